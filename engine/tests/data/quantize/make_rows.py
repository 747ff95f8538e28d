#!/usr/bin/env python3
"""Make rows.gguf: the first rows of tensors of the shared reference files.

    python3 make_rows.py ../../../../../shared/reference rows.gguf

f32.token_embd: rows 0..15 of ref-qwen3moe-f32's token_embd.weight;
<TYPE>.token_embd: the same rows of that tensor in llama.cpp's quantized
file (no importance data reaches token_embd, so these are imatrix-free);
f32.ffn_up_exps / MXFP4.ffn_up_exps: rows 0..15 of expert 0 of
blk.0.ffn_up_exps.weight in the f32 and mxfp4_moe files.  Rows quantize
independently, so llm-quantize must reproduce each one.
"""
import struct
import sys

NROWS = 16
TYPES = {0: (1, 4), 2: (32, 18), 3: (32, 20), 6: (32, 22), 7: (32, 24),
         8: (32, 34), 10: (256, 84), 11: (256, 110), 12: (256, 144),
         13: (256, 176), 14: (256, 210), 20: (32, 18), 23: (256, 136),
         39: (32, 17)}


def read_gguf(path):
    d = open(path, 'rb').read()
    o = 4
    ver, nt, nkv = struct.unpack_from('<IQQ', d, o)
    o += 20
    sizes = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8,
             12: 8}

    def skip_val(t, o):
        if t == 8:
            n, = struct.unpack_from('<Q', d, o)
            return o + 8 + n
        if t == 9:
            at, n = struct.unpack_from('<IQ', d, o)
            o += 12
            for _ in range(n):
                o = skip_val(at, o)
            return o
        return o + sizes[t]
    for _ in range(nkv):
        n, = struct.unpack_from('<Q', d, o)
        o += 8 + n
        t, = struct.unpack_from('<I', d, o)
        o = skip_val(t, o + 4)
    tens = {}
    for _ in range(nt):
        n, = struct.unpack_from('<Q', d, o)
        name = d[o + 8:o + 8 + n].decode()
        o += 8 + n
        nd, = struct.unpack_from('<I', d, o)
        ne = struct.unpack_from('<%dQ' % nd, d, o + 4)
        o += 4 + 8 * nd
        ty, off = struct.unpack_from('<IQ', d, o)
        o += 12
        tens[name] = (ne, ty, off)
    base = (o + 31) // 32 * 32
    return d, base, tens


def rows(path, name, nrows):
    d, base, tens = read_gguf(path)
    ne, ty, off = tens[name]
    blk, bb = TYPES[ty]
    rb = ne[0] // blk * bb
    return ne[0], ty, d[base + off: base + off + nrows * rb]


def main():
    ref, out = sys.argv[1], sys.argv[2]
    q = ref + '/ref-qwen3moe-%s.gguf'
    items = [('f32.token_embd', rows(q % 'f32', 'token_embd.weight', NROWS))]
    for t, f in [('Q4_0', 'q4_0'), ('Q4_1', 'q4_1'), ('Q5_0', 'q5_0'),
                 ('Q5_1', 'q5_1'), ('Q8_0', 'q8_0'), ('Q2_K', 'q2_k'),
                 ('Q3_K', 'q3_k_m'), ('Q4_K', 'q4_k'), ('Q5_K', 'q5_k'),
                 ('Q6_K', 'q6_k'), ('IQ4_NL', 'iq4_nl'),
                 ('IQ4_XS', 'iq4_xs')]:
        items.append((t + '.token_embd', rows(q % f, 'token_embd.weight', NROWS)))
    up = 'blk.0.ffn_up_exps.weight'
    items.append(('f32.ffn_up_exps', rows(q % 'f32', up, NROWS)))
    items.append(('MXFP4.ffn_up_exps', rows(q % 'mxfp4_moe', up, NROWS)))

    desc = b'rows of the shared reference files, see make_rows.py'
    hdr = b'GGUF' + struct.pack('<IQQ', 3, len(items), 1)
    key = b'general.description'
    hdr += struct.pack('<Q', len(key)) + key + struct.pack('<IQ', 8, len(desc))
    hdr += desc
    data = b''
    for name, (ne0, ty, raw) in items:
        nb = name.encode()
        hdr += struct.pack('<Q', len(nb)) + nb
        hdr += struct.pack('<IQQIQ', 2, ne0, NROWS, ty, len(data))
        data += raw + b'\0' * ((-len(raw)) % 32)
    hdr += b'\0' * ((-len(hdr)) % 32)
    open(out, 'wb').write(hdr + data)


main()
