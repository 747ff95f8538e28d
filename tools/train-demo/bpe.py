"""Byte-level BPE in the GPT-2 convention, trained on the demo corpus.

Tokens are written with GPT-2's byte-to-unicode mapping, merges as
"a b" strings, exactly what llama.cpp's converter writes for
tokenizer.ggml.model = "gpt2".  The pre-tokenizer is Qwen2's regex
(digits split one by one), approximated here with Python's re, which has
no \\p{..} classes: letters are [^\\W\\d_], numbers \\d.  On the ASCII text
of this corpus that is the same split; the engine's PCRE2 tokenizer is the
authority at run time and encode() below is checked against it.
"""

import collections
import re

# \p{L} -> [^\W\d_] (letters); \p{N} -> \d; [^\p{L}\p{N}] -> [\W_] (note the
# underscore: a word character to Python, neither letter nor number to
# Unicode).
PRE = re.compile(
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)"
    r"|(?:(?![\r\n])[\W_])?[^\W\d_]+"
    r"|\d"
    r"| ?(?:(?!\s)[\W_])+[\r\n]*"
    r"|\s*[\r\n]+"
    r"|\s+(?!\S)"
    r"|\s+")

# Control tokens (token_type 3) and user-defined tokens (4), in id order
# after the merges.
CONTROL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
USER_DEFINED = ["<tool_call>", "</tool_call>", "<tool_response>",
                "</tool_response>"]


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + \
        list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


B2U = bytes_to_unicode()


def words(text):
    # The specials are never split; the engine matches them as whole tokens.
    specials = "|".join(re.escape(s) for s in CONTROL + USER_DEFINED)
    for part in re.split("(%s)" % specials, text):
        if not part or part in CONTROL or part in USER_DEFINED:
            continue
        for m in PRE.finditer(part):
            yield "".join(B2U[b] for b in m.group(0).encode("utf-8"))


def train(texts, vocab_size):
    freq = collections.Counter()
    for t in texts:
        freq.update(words(t))
    seqs = {w: list(w) for w in freq}
    base = [B2U[b] for b in range(256)]
    merges = []
    n_merges = vocab_size - 256 - len(CONTROL) - len(USER_DEFINED)
    pairs = collections.Counter()
    for w, f in freq.items():
        s = seqs[w]
        for a, b in zip(s, s[1:]):
            pairs[(a, b)] += f
    while len(merges) < n_merges and pairs:
        (a, b), c = max(pairs.items(), key=lambda kv: (kv[1], kv[0]))
        if c < 2:
            break
        merges.append((a, b))
        ab = a + b
        for w, f in freq.items():
            s = seqs[w]
            if len(s) < 2 or a not in s:
                continue
            i = 0
            out = []
            changed = False
            while i < len(s):
                if i + 1 < len(s) and s[i] == a and s[i + 1] == b:
                    out.append(ab)
                    i += 2
                    changed = True
                else:
                    out.append(s[i])
                    i += 1
            if changed:
                for x, y in zip(s, s[1:]):
                    pairs[(x, y)] -= f
                for x, y in zip(out, out[1:]):
                    pairs[(x, y)] += f
                seqs[w] = out
        pairs = +pairs
    tokens = base + [a + b for a, b in merges] + CONTROL + USER_DEFINED
    types = [1] * (256 + len(merges)) + [3] * len(CONTROL) + \
        [4] * len(USER_DEFINED)
    return tokens, types, ["%s %s" % m for m in merges]


class Encoder:
    def __init__(self, tokens, merges):
        self.ids = {t: i for i, t in enumerate(tokens)}
        self.rank = {tuple(m.split(" ")): i for i, m in enumerate(merges)}
        self.cache = {}
        self.special = re.compile("(%s)" % "|".join(
            re.escape(s) for s in CONTROL + USER_DEFINED))

    def word(self, w):
        if w in self.cache:
            return self.cache[w]
        s = list(w)
        while len(s) > 1:
            best = None
            for i in range(len(s) - 1):
                r = self.rank.get((s[i], s[i + 1]))
                if r is not None and (best is None or r < best[0]):
                    best = (r, i)
            if best is None:
                break
            i = best[1]
            s = s[:i] + [s[i] + s[i + 1]] + s[i + 2:]
        out = [self.ids[t] for t in s]
        self.cache[w] = out
        return out

    def encode(self, text):
        out = []
        for part in self.special.split(text):
            if not part:
                continue
            if part in self.ids and (part in CONTROL or part in USER_DEFINED):
                out.append(self.ids[part])
                continue
            for m in PRE.finditer(part):
                out.extend(self.word("".join(
                    B2U[b] for b in m.group(0).encode("utf-8"))))
        return out
