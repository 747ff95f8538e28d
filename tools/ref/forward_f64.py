#!/usr/bin/python3
"""Independent float64 forward pass over a GGUF model, for checking the engine.

    forward_f64.py MODEL.gguf ID,ID,... OUT.f32

Reads the GGUF file itself (no engine code), dequantizes every weight
exactly to float64 (F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q6_K), runs the prompt
through the model with every activation in float64, and writes every
position's logits as float32 little-endian, n_tokens x n_vocab, row-major
(the llm-logits format).

Architectures: llama (dense, Mixtral experts as *_exps or per-expert
tensors), qwen2 (q/k/v bias), qwen3 (per-head q/k RMSNorm), qwen3moe,
minimax-m2 (q/k RMSNorm over the whole projection, partial NEOX RoPE,
sigmoid routing with a selection bias).  The semantics follow llama.cpp's
model graphs; this file shares no code with the engine.
"""

import struct
import sys

import numpy as np

GGUF_SCALAR = {0: '<B', 1: '<b', 2: '<H', 3: '<h', 4: '<I', 5: '<i',
               6: '<f', 7: '<?', 10: '<Q', 11: '<q', 12: '<d'}


class Reader:
    def __init__(self, path):
        self.buf = open(path, 'rb').read()
        self.off = 0
        magic, ver = self.unpack('<II')
        if magic != 0x46554747 or ver not in (2, 3):
            raise SystemExit(f'{path}: not a GGUF v2/v3 file')
        n_t, n_kv = self.unpack('<QQ')
        self.kv = {}
        for _ in range(n_kv):
            k = self.string()
            (t,) = self.unpack('<I')
            self.kv[k] = self.value(t)
        self.tensors = {}
        infos = []
        for _ in range(n_t):
            name = self.string()
            (nd,) = self.unpack('<I')
            ne = self.unpack('<' + 'Q' * nd)
            t, off = self.unpack('<IQ')
            infos.append((name, ne, t, off))
        align = self.kv.get('general.alignment', 32)
        base = (self.off + align - 1) // align * align
        for name, ne, t, off in infos:
            self.tensors[name] = (ne, t, base + off)

    def unpack(self, fmt):
        v = struct.unpack_from(fmt, self.buf, self.off)
        self.off += struct.calcsize(fmt)
        return v

    def string(self):
        (n,) = self.unpack('<Q')
        s = self.buf[self.off:self.off + n].decode('utf-8', 'replace')
        self.off += n
        return s

    def value(self, t):
        if t in GGUF_SCALAR:
            return self.unpack(GGUF_SCALAR[t])[0]
        if t == 8:
            return self.string()
        if t == 9:
            et, n = self.unpack('<IQ')
            return [self.value(et) for _ in range(n)]
        raise SystemExit(f'unknown GGUF value type {t}')

    def has(self, name):
        return name in self.tensors

    def get(self, name):
        """The tensor as float64, shape reversed (numpy order)."""
        ne, t, off = self.tensors[name]
        n = int(np.prod(ne))
        flat = dequant(self.buf, off, t, n)
        return flat.reshape(tuple(reversed(ne)))


def f16(b):
    return np.frombuffer(b, dtype='<f2').astype(np.float64)


def dequant(buf, off, t, n):
    if t == 0:
        return np.frombuffer(buf, '<f4', n, off).astype(np.float64)
    if t == 1:
        return np.frombuffer(buf, '<f2', n, off).astype(np.float64)
    if t == 30:
        u = np.frombuffer(buf, '<u2', n, off).astype(np.uint32) << 16
        return u.view(np.float32).astype(np.float64)
    if t == 8:      # Q8_0: fp16 d, 32 int8
        nb = n // 32
        raw = np.frombuffer(buf, np.uint8, nb * 34, off).reshape(nb, 34)
        d = f16(raw[:, :2].tobytes())
        q = raw[:, 2:].view(np.int8).astype(np.float64)
        return (d[:, None] * q).reshape(-1)
    if t == 2:      # Q4_0: fp16 d, 16 bytes; low nibbles 0..15, high 16..31
        nb = n // 32
        raw = np.frombuffer(buf, np.uint8, nb * 18, off).reshape(nb, 18)
        d = f16(raw[:, :2].tobytes())
        qs = raw[:, 2:]
        q = np.concatenate([qs & 15, qs >> 4], axis=1).astype(np.float64) - 8
        return (d[:, None] * q).reshape(-1)
    if t == 12:     # Q4_K
        nb = n // 256
        raw = np.frombuffer(buf, np.uint8, nb * 144, off).reshape(nb, 144)
        d = f16(raw[:, 0:2].tobytes())
        dmin = f16(raw[:, 2:4].tobytes())
        sc = raw[:, 4:16].astype(np.int64)
        qs = raw[:, 16:]
        scale = np.zeros((nb, 8))
        mn = np.zeros((nb, 8))
        for j in range(8):
            if j < 4:
                s, m = sc[:, j] & 63, sc[:, j + 4] & 63
            else:
                s = (sc[:, j + 4] & 15) | ((sc[:, j - 4] >> 6) << 4)
                m = (sc[:, j + 4] >> 4) | ((sc[:, j] >> 6) << 4)
            scale[:, j], mn[:, j] = s, m
        out = np.zeros((nb, 256))
        for c in range(4):
            q = qs[:, c * 32:(c + 1) * 32].astype(np.float64)
            lo, hi = np.floor(q % 16), np.floor(q / 16)
            j = 2 * c
            out[:, c * 64:c * 64 + 32] = (d * scale[:, j])[:, None] * lo \
                - (dmin * mn[:, j])[:, None]
            out[:, c * 64 + 32:c * 64 + 64] = \
                (d * scale[:, j + 1])[:, None] * hi \
                - (dmin * mn[:, j + 1])[:, None]
        return out.reshape(-1)
    if t == 14:     # Q6_K: ql[128] qh[64] scales[16] d
        nb = n // 256
        raw = np.frombuffer(buf, np.uint8, nb * 210, off).reshape(nb, 210)
        ql = raw[:, :128].astype(np.int64)
        qh = raw[:, 128:192].astype(np.int64)
        sc = raw[:, 192:208].view(np.int8).astype(np.float64)
        d = f16(raw[:, 208:210].tobytes())
        out = np.zeros((nb, 256))
        for half in range(2):
            L = ql[:, half * 64:(half + 1) * 64]
            H = qh[:, half * 32:(half + 1) * 32]
            S = sc[:, half * 8:(half + 1) * 8]
            for l in range(32):
                is_ = l // 16
                q1 = ((L[:, l] & 15) | (((H[:, l] >> 0) & 3) << 4)) - 32
                q2 = ((L[:, l + 32] & 15) | (((H[:, l] >> 2) & 3) << 4)) - 32
                q3 = ((L[:, l] >> 4) | (((H[:, l] >> 4) & 3) << 4)) - 32
                q4 = ((L[:, l + 32] >> 4) | (((H[:, l] >> 6) & 3) << 4)) - 32
                b = half * 128
                out[:, b + l] = d * S[:, is_ + 0] * q1
                out[:, b + l + 32] = d * S[:, is_ + 2] * q2
                out[:, b + l + 64] = d * S[:, is_ + 4] * q3
                out[:, b + l + 96] = d * S[:, is_ + 6] * q4
        return out.reshape(-1)
    raise SystemExit(f'tensor type {t} not supported by forward_f64.py')


def rmsnorm(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def rope(x, pos, n_rot, base, neox, freqs=None):
    """x: [T, H, D]; rotate the first n_rot dims of each head."""
    half = n_rot // 2
    inv = base ** (-2.0 * np.arange(half) / n_rot)
    if freqs is not None:
        inv = inv / freqs
    ang = pos[:, None] * inv[None, :]          # [T, half]
    co, si = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    y = x.copy()
    if neox:
        a, b = x[..., :half], x[..., half:n_rot]
        y[..., :half] = a * co - b * si
        y[..., half:n_rot] = a * si + b * co
    else:
        a, b = x[..., 0:n_rot:2], x[..., 1:n_rot:2]
        y[..., 0:n_rot:2] = a * co - b * si
        y[..., 1:n_rot:2] = a * si + b * co
    return y


def silu(x):
    return x / (1.0 + np.exp(-x))


def main():
    if len(sys.argv) != 4 or sys.argv[1] in ('-h', '--help'):
        print(__doc__.strip())
        sys.exit(0 if len(sys.argv) == 2 else 2)
    g = Reader(sys.argv[1])
    ids = np.array([int(t) for t in sys.argv[2].split(',')])
    arch = g.kv['general.architecture']
    A = lambda k, d=None: g.kv.get(f'{arch}.{k}', d)   # noqa: E731

    n_layer = A('block_count')
    n_embd = A('embedding_length')
    n_head = A('attention.head_count')
    n_kv = A('attention.head_count_kv', n_head)
    hd = A('attention.key_length', n_embd // n_head)
    hdv = A('attention.value_length', hd)
    eps = A('attention.layer_norm_rms_epsilon')
    base = A('rope.freq_base', 10000.0)
    n_rot = A('rope.dimension_count', hd)
    n_exp = A('expert_count', 0)
    k_used = A('expert_used_count', 0)
    neox = arch != 'llama'
    gating = A('expert_gating_func', 2 if arch == 'minimax-m2' else 1)
    norm_w = A('expert_weights_norm', True) if arch == 'minimax-m2' else True
    w_scale = A('expert_weights_scale', 0.0)

    T = len(ids)
    pos = np.arange(T, dtype=np.float64)
    if A('rope.scaling.type', 'none') == 'linear':
        pos = pos / A('rope.scaling.factor', 1.0)
    elif A('rope.scaling.type', 'none') != 'none':
        raise SystemExit('rope scaling other than linear: not supported')
    freqs = g.get('rope_freqs.weight') if g.has('rope_freqs.weight') else None
    emb = g.get('token_embd.weight')                    # [n_vocab, n_embd]
    x = emb[ids]
    out_w = g.get('output.weight') if g.has('output.weight') else emb

    mask = np.triu(np.full((T, T), -np.inf), 1)
    G = n_head // n_kv
    for l in range(n_layer):
        P = f'blk.{l}.'
        h = rmsnorm(x, g.get(P + 'attn_norm.weight'), eps)
        q = h @ g.get(P + 'attn_q.weight').T
        k = h @ g.get(P + 'attn_k.weight').T
        v = h @ g.get(P + 'attn_v.weight').T
        for nm, arr in (('q', q), ('k', k), ('v', v)):
            if g.has(P + f'attn_{nm}.bias'):
                arr += g.get(P + f'attn_{nm}.bias')
        if arch == 'minimax-m2':
            q = rmsnorm(q, g.get(P + 'attn_q_norm.weight'), eps)
            k = rmsnorm(k, g.get(P + 'attn_k_norm.weight'), eps)
        q = q.reshape(T, n_head, hd)
        k = k.reshape(T, n_kv, hd)
        v = v.reshape(T, n_kv, hdv)
        if arch in ('qwen3', 'qwen3moe'):
            q = rmsnorm(q, g.get(P + 'attn_q_norm.weight'), eps)
            k = rmsnorm(k, g.get(P + 'attn_k_norm.weight'), eps)
        q = rope(q, pos, n_rot, base, neox, freqs)
        k = rope(k, pos, n_rot, base, neox, freqs)
        att = np.zeros((T, n_head, hdv))
        for hh in range(n_head):
            s = q[:, hh, :] @ k[:, hh // G, :].T / np.sqrt(hd) + mask
            s = np.exp(s - s.max(axis=1, keepdims=True))
            s /= s.sum(axis=1, keepdims=True)
            att[:, hh, :] = s @ v[:, hh // G, :]
        x = x + att.reshape(T, -1) @ g.get(P + 'attn_output.weight').T

        h = rmsnorm(x, g.get(P + 'ffn_norm.weight'), eps)
        if n_exp == 0:
            gt = h @ g.get(P + 'ffn_gate.weight').T
            up = h @ g.get(P + 'ffn_up.weight').T
            x = x + (silu(gt) * up) @ g.get(P + 'ffn_down.weight').T
            continue

        logits = h @ g.get(P + 'ffn_gate_inp.weight').T     # [T, n_exp]
        if gating == 2:
            probs = 1.0 / (1.0 + np.exp(-logits))
        else:
            e = np.exp(logits - logits.max(axis=1, keepdims=True))
            probs = e / e.sum(axis=1, keepdims=True)
        selp = probs.copy()
        if g.has(P + 'exp_probs_b.bias'):
            selp = selp + g.get(P + 'exp_probs_b.bias')
        if g.has(P + 'ffn_gate_exps.weight'):
            W1 = g.get(P + 'ffn_gate_exps.weight')      # [E, ff, n_embd]
            W3 = g.get(P + 'ffn_up_exps.weight')
            W2 = g.get(P + 'ffn_down_exps.weight')      # [E, n_embd, ff]
        else:
            W1 = np.stack([g.get(P + f'ffn_gate.{e}.weight')
                           for e in range(n_exp)])
            W3 = np.stack([g.get(P + f'ffn_up.{e}.weight')
                           for e in range(n_exp)])
            W2 = np.stack([g.get(P + f'ffn_down.{e}.weight')
                           for e in range(n_exp)])
        moe = np.zeros_like(x)
        for t in range(T):
            sel = np.argsort(-selp[t], kind='stable')[:k_used]
            w = probs[t, sel]
            if norm_w:
                w = w / max(w.sum(), 6.103515625e-5)
            if w_scale:
                w = w * w_scale
            for e, we in zip(sel, w):
                a = silu(W1[e] @ h[t]) * (W3[e] @ h[t])
                moe[t] += we * (W2[e] @ a)
        x = x + moe

    x = rmsnorm(x, g.get('output_norm.weight'), eps)
    logits = x @ out_w.T
    logits.astype('<f4').tofile(sys.argv[3])


if __name__ == '__main__':
    main()
