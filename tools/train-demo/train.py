"""Trains the demo model: a tiny qwen3moe on synthetic support chats.

    train.py --out DIR [--seed 1] [--steps N] [--threads 2]

Steps: generate conversations (gen_data.py), render each with the chat
template exactly as the engine will (jinja2 set up like Hugging Face's
apply_chat_template), train a byte-level BPE vocabulary on the text,
encode, train the model with the loss on assistant tokens only, and write
DIR/demo-f32.gguf (weights, vocabulary, template, metadata),
DIR/loss.png, DIR/train-log.json.  `./build.sh train-demo` then quantizes
to Q8_0 with llm-quantize.

The model is the architecture the engine implements for qwen3moe: RMSNorm,
per-head q/k RMSNorm, NEOX RoPE, GQA, softmax routing over the experts with
the top-k weights renormalized, SwiGLU experts.  Not on the serving path.
"""

import argparse
import json
import math
import os
import random
import re
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bpe            # noqa: E402
import gen_data       # noqa: E402
import gguf_io        # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))

CFG = dict(n_vocab=2048, n_embd=256, n_layer=4, n_head=4, n_head_kv=2,
           head_dim=64, n_expert=8, n_expert_used=2, n_ff_exp=128,
           ctx=512, rope_base=10000.0, eps=1e-6)


def template_env():
    import jinja2
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(msg):
        raise jinja2.exceptions.TemplateError(msg)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=["jinja2.ext.loopcontrols"])
    env.filters["tojson"] = lambda x, indent=None: json.dumps(
        x, ensure_ascii=False, indent=indent)
    env.globals["raise_exception"] = raise_exception
    return env


def for_template(messages):
    """OpenAI messages -> template input: tool-call arguments as objects,
    as Hugging Face and llama.cpp pass them."""
    out = []
    for m in messages:
        m = dict(m)
        if m.get("tool_calls"):
            m["tool_calls"] = [dict(c, function=dict(
                c["function"], arguments=json.loads(
                    c["function"]["arguments"]))) for c in m["tool_calls"]]
        out.append(m)
    return out


def assistant_spans(text):
    """Byte spans of assistant turns (what the loss is taken on)."""
    spans = []
    tb = text.encode("utf-8")
    for m in re.finditer(rb"<\|im_start\|>assistant", tb):
        end = tb.find(b"<|im_end|>", m.end())
        if end < 0:
            end = len(tb)
        else:
            end += len(b"<|im_end|>")
        spans.append((m.end(), end))
    return spans


def encode_with_mask(enc, tokens, text):
    ids = enc.encode(text)
    spans = assistant_spans(text)
    mask = []
    off = 0
    bytelen = [len(bytes_of(tokens[i])) for i in ids]
    si = 0
    for i, n in zip(ids, bytelen):
        while si < len(spans) and off >= spans[si][1]:
            si += 1
        mask.append(1 if si < len(spans) and spans[si][0] <= off < spans[si][1]
                    else 0)
        off += n
    return ids, mask


U2B = {u: b for b, u in bpe.B2U.items()}


def bytes_of(tok):
    if tok in bpe.CONTROL or tok in bpe.USER_DEFINED:
        return tok.encode("utf-8")
    return bytes(U2B[c] for c in tok)


class RMSNorm(nn.Module):
    def __init__(self, n, eps):
        super().__init__()
        self.w = nn.Parameter(torch.ones(n))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) \
            * self.w


def rope(x, pos, base):
    # x: [B, T, H, D]; NEOX pairing (i, i + D/2)
    d = x.shape[-1]
    inv = base ** (-torch.arange(0, d // 2, dtype=torch.float32) * 2 / d)
    ang = pos[:, None].float() * inv[None, :]          # [T, D/2]
    cos, sin = ang.cos()[None, :, None, :], ang.sin()[None, :, None, :]
    x1, x2 = x[..., :d // 2], x[..., d // 2:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1)


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        e, hd = c["n_embd"], c["head_dim"]
        self.c = c
        self.attn_norm = RMSNorm(e, c["eps"])
        self.q = nn.Linear(e, c["n_head"] * hd, bias=False)
        self.k = nn.Linear(e, c["n_head_kv"] * hd, bias=False)
        self.v = nn.Linear(e, c["n_head_kv"] * hd, bias=False)
        self.o = nn.Linear(c["n_head"] * hd, e, bias=False)
        self.q_norm = RMSNorm(hd, c["eps"])
        self.k_norm = RMSNorm(hd, c["eps"])
        self.ffn_norm = RMSNorm(e, c["eps"])
        self.router = nn.Linear(e, c["n_expert"], bias=False)
        ne, ff = c["n_expert"], c["n_ff_exp"]
        self.gate = nn.Parameter(torch.randn(ne, ff, e) / math.sqrt(e))
        self.up = nn.Parameter(torch.randn(ne, ff, e) / math.sqrt(e))
        self.down = nn.Parameter(torch.randn(ne, e, ff) / math.sqrt(ff) /
                                 math.sqrt(2 * c["n_layer"]))

    def forward(self, x, pos):
        c = self.c
        B, T, E = x.shape
        hd = c["head_dim"]
        h = self.attn_norm(x)
        q = self.q_norm(self.q(h).view(B, T, c["n_head"], hd))
        k = self.k_norm(self.k(h).view(B, T, c["n_head_kv"], hd))
        v = self.v(h).view(B, T, c["n_head_kv"], hd)
        q, k = rope(q, pos, c["rope_base"]), rope(k, pos, c["rope_base"])
        rep = c["n_head"] // c["n_head_kv"]
        k = k.repeat_interleave(rep, dim=2)
        v = v.repeat_interleave(rep, dim=2)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        s = (q @ k.transpose(-1, -2)) / math.sqrt(hd)
        causal = torch.ones(T, T, dtype=torch.bool).triu(1)
        a = F.softmax(s.masked_fill(causal, float("-inf")), dim=-1) @ v
        x = x + self.o(a.transpose(1, 2).reshape(B, T, -1))

        h = self.ffn_norm(x).reshape(B * T, E)
        probs = F.softmax(self.router(h), dim=-1)           # [N, ne]
        w, idx = probs.topk(c["n_expert_used"], dim=-1)
        w = w / w.sum(-1, keepdim=True)
        out = torch.zeros_like(h)
        for e in range(c["n_expert"]):
            sel = (idx == e)
            rows = sel.any(-1).nonzero(as_tuple=True)[0]
            if rows.numel() == 0:
                continue
            we = (w * sel).sum(-1)[rows]
            he = h[rows]
            y = (F.silu(he @ self.gate[e].T) * (he @ self.up[e].T)) @ \
                self.down[e].T
            out.index_add_(0, rows, y * we[:, None])
        # Switch-style balance loss: fraction routed x mean probability.
        frac = F.one_hot(idx, c["n_expert"]).float().sum(1).mean(0)
        aux = c["n_expert"] * (frac * probs.mean(0)).sum() / \
            c["n_expert_used"]
        return x + out.view(B, T, E), aux


class Model(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.emb = nn.Embedding(c["n_vocab"], c["n_embd"])
        nn.init.normal_(self.emb.weight, std=0.02)
        self.blocks = nn.ModuleList(Block(c) for _ in range(c["n_layer"]))
        self.norm = RMSNorm(c["n_embd"], c["eps"])
        self.out = nn.Linear(c["n_embd"], c["n_vocab"], bias=False)
        nn.init.normal_(self.out.weight, std=0.02)

    def forward(self, ids):
        pos = torch.arange(ids.shape[1])
        x = self.emb(ids)
        aux = 0.0
        for b in self.blocks:
            x, a = b(x, pos)
            aux = aux + a
        return self.out(self.norm(x)), aux / len(self.blocks)


def export(model, c, tokens, types, merges, template, path, meta):
    w = gguf_io.Writer()
    T = gguf_io
    w.str("general.architecture", "qwen3moe")
    w.str("general.name", "acme-support-demo")
    w.str("general.description", meta)
    w.u32("general.file_type", 0)
    w.u32("general.quantization_version", 2)
    a = "qwen3moe."
    w.u32(a + "vocab_size", c["n_vocab"])
    w.u32(a + "context_length", c["ctx"])
    w.u32(a + "embedding_length", c["n_embd"])
    w.u32(a + "block_count", c["n_layer"])
    w.u32(a + "feed_forward_length", c["n_ff_exp"])
    w.u32(a + "expert_feed_forward_length", c["n_ff_exp"])
    w.u32(a + "attention.head_count", c["n_head"])
    w.u32(a + "attention.head_count_kv", c["n_head_kv"])
    w.u32(a + "attention.key_length", c["head_dim"])
    w.u32(a + "attention.value_length", c["head_dim"])
    w.f32(a + "attention.layer_norm_rms_epsilon", c["eps"])
    w.u32(a + "rope.dimension_count", c["head_dim"])
    w.f32(a + "rope.freq_base", c["rope_base"])
    w.u32(a + "expert_count", c["n_expert"])
    w.u32(a + "expert_used_count", c["n_expert_used"])
    write_vocab(w, tokens, types, merges, template)

    def t(name, x):
        w.tensor(name, x.detach().float().numpy())

    t("token_embd.weight", model.emb.weight)
    for i, b in enumerate(model.blocks):
        p = "blk.%d." % i
        t(p + "attn_norm.weight", b.attn_norm.w)
        t(p + "attn_q.weight", b.q.weight)
        t(p + "attn_k.weight", b.k.weight)
        t(p + "attn_v.weight", b.v.weight)
        t(p + "attn_q_norm.weight", b.q_norm.w)
        t(p + "attn_k_norm.weight", b.k_norm.w)
        t(p + "attn_output.weight", b.o.weight)
        t(p + "ffn_norm.weight", b.ffn_norm.w)
        t(p + "ffn_gate_inp.weight", b.router.weight)
        t(p + "ffn_gate_exps.weight", b.gate)
        t(p + "ffn_up_exps.weight", b.up)
        t(p + "ffn_down_exps.weight", b.down)
    t("output_norm.weight", model.norm.w)
    t("output.weight", model.out.weight)
    w.write(path)


def write_vocab(w, tokens, types, merges, template):
    T = gguf_io
    w.str("tokenizer.ggml.model", "gpt2")
    w.str("tokenizer.ggml.pre", "qwen2")
    w.arr("tokenizer.ggml.tokens", T.T_STR, tokens)
    w.arr("tokenizer.ggml.token_type", T.T_I32, types)
    w.arr("tokenizer.ggml.merges", T.T_STR, merges)
    eot = tokens.index("<|im_end|>")
    w.u32("tokenizer.ggml.bos_token_id", tokens.index("<|endoftext|>"))
    w.u32("tokenizer.ggml.eos_token_id", eot)
    w.u32("tokenizer.ggml.eot_token_id", eot)
    w.u32("tokenizer.ggml.padding_token_id", tokens.index("<|endoftext|>"))
    w.bool("tokenizer.ggml.add_bos_token", False)
    w.str("tokenizer.chat_template", template)


def check_tokenizer(tool, enc, tokens, types, merges, template, texts, out):
    """The engine's tokenizer must give the ids training used."""
    import subprocess
    w = gguf_io.Writer()
    w.str("general.architecture", "qwen3moe")
    write_vocab(w, tokens, types, merges, template)
    path = os.path.join(out, "vocab.gguf")
    w.write(path)
    for i, t in enumerate(texts):
        got = subprocess.run([tool, "-m", path, "--special", "--ids-only"],
                             input=t.encode("utf-8"), capture_output=True,
                             check=True).stdout.split()
        want = enc.encode(t)
        if [int(x) for x in got] != want:
            raise SystemExit("tokenizer mismatch on text %d: engine %s vs "
                             "training %s" % (i, got[:40], want[:40]))
    print("tokenizer check: %d texts tokenize identically in the engine"
          % len(texts), flush=True)


def load_gguf(model, path, tokens):
    """Loads the weights export() wrote; the vocabulary must be the same."""
    r = gguf_io.Reader(path)
    if r.kv.get("tokenizer.ggml.tokens") != tokens:
        raise SystemExit("%s: vocabulary differs from this run's" % path)
    names = {}
    names["token_embd.weight"] = model.emb.weight
    for i, b in enumerate(model.blocks):
        p = "blk.%d." % i
        names.update({p + "attn_norm.weight": b.attn_norm.w,
                      p + "attn_q.weight": b.q.weight,
                      p + "attn_k.weight": b.k.weight,
                      p + "attn_v.weight": b.v.weight,
                      p + "attn_q_norm.weight": b.q_norm.w,
                      p + "attn_k_norm.weight": b.k_norm.w,
                      p + "attn_output.weight": b.o.weight,
                      p + "ffn_norm.weight": b.ffn_norm.w,
                      p + "ffn_gate_inp.weight": b.router.weight,
                      p + "ffn_gate_exps.weight": b.gate,
                      p + "ffn_up_exps.weight": b.up,
                      p + "ffn_down_exps.weight": b.down})
    names["output_norm.weight"] = model.norm.w
    names["output.weight"] = model.out.weight
    with torch.no_grad():
        for n, prm in names.items():
            raw = r.tensor_bytes(n, prm.numel() * 4)
            prm.copy_(torch.from_numpy(np.frombuffer(raw, dtype=np.float32)
                                       .reshape(prm.shape).copy()))


def reshape_json(v, rng):
    """The same JSON value with its keys in a random order."""
    if isinstance(v, dict):
        ks = list(v)
        rng.shuffle(ks)
        return {k: reshape_json(v[k], rng) for k in ks}
    if isinstance(v, list):
        return [reshape_json(x, rng) for x in v]
    return v


def vary_tool_results(msgs, rng):
    """Tool results as clients send them: half with the keys shuffled (a
    client may sort them, or build them in any order), half compact
    (JSON.stringify, canonical Perl/Go encoders) instead of json.dumps'
    ", " and ": ".  The answer must come from the keys, not positions."""
    out = []
    for m in msgs:
        if m.get("role") == "tool":
            v = json.loads(m["content"])
            if rng.random() < 0.5:
                v = reshape_json(v, rng)
            sep = (",", ":") if rng.random() < 0.5 else (", ", ": ")
            m = dict(m, content=json.dumps(v, separators=sep))
        out.append(m)
    return out


def render_all(convs, template, rng):
    env = template_env()
    tmpl = env.from_string(template)
    texts = []
    for cv in convs:
        msgs = vary_tool_results(cv["messages"], rng)
        has_calls = any(m.get("tool_calls") for m in msgs)
        tools = cv["tools"]
        # Teach both prompt shapes: with the tools block, and (for turns
        # that need no tool) without; sometimes without a system message.
        if not has_calls and rng.random() < 0.35:
            tools = None
        if rng.random() < 0.3:
            msgs = msgs[1:]
        texts.append(tmpl.render(messages=for_template(msgs), tools=tools,
                                 add_generation_prompt=False,
                                 bos_token="<|endoftext|>",
                                 eos_token="<|im_end|>"))
    return texts


def save(a, model, c, tokens, types, merges, template, log, step, n_params,
         t0):
    """Writes demo-f32.gguf, train-log.json and loss.png for the weights as
    they are now: called every --checkpoint-seconds and at the end, so a run
    that is cut off still leaves a model to quantize."""
    took = time.time() - t0
    meta = ("acme-support-demo: tiny qwen3moe trained on synthetic Acme Shop "
            "support chats; seed %d, %d steps, %.0f s" % (a.seed, step, took))
    export(model, c, tokens, types, merges, template,
           os.path.join(a.out, "demo-f32.gguf"), meta)
    with open(os.path.join(a.out, "train-log.json"), "w") as f:
        json.dump({"config": c, "seed": a.seed, "steps": step,
                   "n_params": n_params, "seconds": took,
                   "threads": a.threads, "log": log}, f)
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        xs = [r["step"] for r in log]
        ys = [r["loss"] for r in log]
        k = max(1, min(20, len(ys) // 5))
        sm = np.convolve(ys, np.ones(k) / k, mode="valid")
        plt.figure(figsize=(7, 4))
        plt.plot(xs, ys, alpha=0.3, label="loss (assistant tokens)")
        plt.plot(xs[k - 1:], sm, label="moving average (%d)" % k)
        plt.yscale("log")
        plt.xlabel("step")
        plt.ylabel("cross-entropy")
        plt.title("acme-support-demo training loss")
        plt.legend()
        plt.tight_layout()
        plt.savefig(os.path.join(a.out, "loss.png"), dpi=100)
        plt.close()
    except ImportError:
        print("matplotlib missing: no loss.png", flush=True)
    return took


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--n-train", type=int, default=20000)
    ap.add_argument("--steps", type=int, default=100000)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--threads", type=int, default=1,
                    help="torch threads: 1 on a machine shared with other "
                    "work (2 OpenMP threads on 2 busy cores ran 5x slower)")
    ap.add_argument("--llm-tokenize", help="the engine's llm-tokenize: "
                    "check that training and serving tokenize alike")
    ap.add_argument("--init-from", help="continue from the weights of a "
                    "demo-f32.gguf this script wrote (same seed and data)")
    ap.add_argument("--checkpoint-seconds", type=float, default=300,
                    help="write the model, log and loss curve this often")
    ap.add_argument("--max-seconds", type=float, default=3300,
                    help="stop training after this much wall time")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    torch.manual_seed(a.seed)
    torch.set_num_threads(a.threads)
    rng = random.Random(a.seed)
    t0 = time.time()

    template = open(os.path.join(HERE, "chat_template.jinja")).read()
    g = gen_data.Gen(a.seed)
    convs = [g.one() for _ in range(a.n_train)]
    texts = render_all(convs, template, rng)
    print("rendered %d conversations, %.1f MB" %
          (len(texts), sum(map(len, texts)) / 1e6), flush=True)

    tokens, types, merges = bpe.train(texts[:4000], CFG["n_vocab"])
    c = dict(CFG, n_vocab=len(tokens))
    enc = bpe.Encoder(tokens, merges)
    if a.llm_tokenize:
        check_tokenizer(a.llm_tokenize, enc, tokens, types, merges, template,
                        texts[:200], a.out)
    data = [encode_with_mask(enc, tokens, tx) for tx in texts]
    data = [d for d in data if len(d[0]) <= c["ctx"]]
    n_tok = sum(len(d[0]) for d in data)
    print("vocab %d, %d sequences, %d tokens (%.0f per sequence), %.0fs" %
          (len(tokens), len(data), n_tok, n_tok / len(data), time.time() - t0),
          flush=True)
    with open(os.path.join(a.out, "vocab-check.json"), "w") as f:
        json.dump({"text": texts[0], "ids": data[0][0]}, f)

    model = Model(c)
    if a.init_from:
        load_gguf(model, a.init_from, tokens)
        print("weights from %s" % a.init_from, flush=True)
    n_params = sum(p.numel() for p in model.parameters())
    print("parameters: %d" % n_params, flush=True)
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, betas=(0.9, 0.95),
                            weight_decay=0.01)
    # Sort by length into batches so padding stays small.
    order = sorted(range(len(data)), key=lambda i: len(data[i][0]))
    batches = [order[i:i + a.batch] for i in range(0, len(order), a.batch)]
    log = []
    step = 0
    t_train = time.time()
    t_ckpt = t_train
    warm = 50
    while step < a.steps:
        rng.shuffle(batches)
        for bi in batches:
            if step >= a.steps or time.time() - t0 > a.max_seconds:
                break
            L = max(len(data[i][0]) for i in bi)
            ids = torch.zeros(len(bi), L, dtype=torch.long)
            msk = torch.zeros(len(bi), L)
            for r, i in enumerate(bi):
                x, m = data[i]
                ids[r, :len(x)] = torch.tensor(x)
                msk[r, :len(m)] = torch.tensor(m, dtype=torch.float32)
            # Cosine decay over whichever budget runs out first.
            prog = min(1.0, max(step / a.steps,
                                (time.time() - t_train) / (a.max_seconds -
                                                           (t_train - t0))))
            lr = a.lr * min(1.0, (step + 1) / warm) * \
                (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * prog)))
            for pg in opt.param_groups:
                pg["lr"] = lr
            logits, aux = model(ids[:, :-1])
            tgt = ids[:, 1:]
            m = msk[:, 1:]
            ce = F.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                 tgt.reshape(-1), reduction="none")
            loss = (ce * m.reshape(-1)).sum() / m.sum()
            opt.zero_grad()
            (loss + 0.01 * aux).backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            log.append({"step": step, "loss": loss.item(), "aux": float(aux),
                        "lr": lr, "t": time.time() - t0})
            if step % 20 == 0:
                print("step %5d loss %.4f aux %.3f lr %.2e  %.0fs" %
                      (step, loss.item(), float(aux), lr, time.time() - t0),
                      flush=True)
            step += 1
            if time.time() - t_ckpt > a.checkpoint_seconds:
                save(a, model, c, tokens, types, merges, template, log, step,
                     n_params, t0)
                print("checkpoint at step %d" % step, flush=True)
                t_ckpt = time.time()
        if time.time() - t0 > a.max_seconds:
            break

    took = save(a, model, c, tokens, types, merges, template, log, step,
                n_params, t0)
    print("done in %.0f s: %s" % (took, os.path.join(a.out, "demo-f32.gguf")))


if __name__ == "__main__":
    main()
