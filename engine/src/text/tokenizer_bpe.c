/*
 * Byte-level BPE ("gpt2" vocabularies): pre-tokenizer regexes, then merges
 * by rank.
 *
 * Pre-tokenization follows Hugging Face tokenizers (whose output the test
 * vectors come from): the text is split by each regex of the `pre` set in
 * turn; matches and the gaps between them both become pieces ("Isolated"
 * splits).  The regexes are the tokenizer.json ones, run by PCRE2 with
 * PCRE2_UTF | PCRE2_UCP so \p{L}, \p{N}, \s, (?i:...) and (?!...) mean what
 * they mean there; invalid UTF-8 in the input never matches and lands in a
 * gap (PCRE2_MATCH_INVALID_UTF), so any byte string tokenizes.
 *
 * Each piece is BPE-merged as token ids: start from one token per byte (its
 * bytes_to_unicode character), repeatedly merge the adjacent pair with the
 * lowest merge rank (leftmost on ties) using a heap with lazy deletion, so a
 * piece of n bytes costs O(n log n).  Pieces repeat a lot in real text, so
 * one call keeps a cache from piece bytes to ids.
 */

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer_int.h"

/*
 * Regexes.  GPT2 is the original GPT-2 pattern (ByteLevel use_regex);
 * LLAMA3 / QWEN2 / GPT4O / TEKKEN are the Split patterns of those
 * tokenizer.json files verbatim; the DeepSeek sets are their sequences of
 * Split patterns, with the long letter class written as code point ranges
 * so that look-alike characters cannot creep in.
 */
#define RE_GPT2                                                               \
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+"        \
    "|\\s+(?!\\S)|\\s+"

#define RE_LLAMA3                                                             \
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}"   \
    "| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

#define RE_QWEN2                                                              \
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}"        \
    "| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

#define RE_UPPER  "[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]"
#define RE_LOWER  "[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]"
#define RE_CONTR  "(?i:'s|'t|'re|'ve|'m|'ll|'d)?"

#define RE_GPT4O                                                              \
    "[^\\r\\n\\p{L}\\p{N}]?" RE_UPPER "*" RE_LOWER "+" RE_CONTR                \
    "|[^\\r\\n\\p{L}\\p{N}]?" RE_UPPER "+" RE_LOWER "*" RE_CONTR               \
    "|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)"   \
    "|\\s+"

#define RE_TEKKEN                                                             \
    "[^\\r\\n\\p{L}\\p{N}]?" RE_UPPER "*" RE_LOWER "+"                         \
    "|[^\\r\\n\\p{L}\\p{N}]?" RE_UPPER "+" RE_LOWER "*"                        \
    "|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

#define RE_DS_LETTERS                                                         \
    "\\s?[A-Za-z\\x{B5}\\x{C0}-\\x{D6}\\x{D8}-\\x{F6}\\x{F8}-\\x{1BA}"         \
    "\\x{1BC}-\\x{1BF}\\x{1C4}-\\x{293}\\x{295}-\\x{2AF}\\x{370}-\\x{373}"     \
    "\\x{376}\\x{377}\\x{37B}-\\x{37D}\\x{37F}\\x{386}\\x{388}-\\x{38A}"       \
    "\\x{38C}\\x{38E}-\\x{3A1}\\x{3A3}-\\x{3F5}\\x{3F7}-\\x{481}"              \
    "\\x{48A}-\\x{52F}\\x{531}-\\x{556}\\x{10A0}-\\x{10C5}\\x{13A0}-\\x{13F5}" \
    "\\x{13F8}-\\x{13FD}\\x{1C90}-\\x{1CBA}\\x{1CBD}-\\x{1CBF}"                \
    "\\x{1D00}-\\x{1D2B}\\x{1D6B}-\\x{1D77}\\x{1D79}-\\x{1D9A}"                \
    "\\x{1E00}-\\x{1F15}\\x{1F18}-\\x{1F1D}\\x{1F20}-\\x{1F45}"                \
    "\\x{1F48}-\\x{1F4D}\\x{1F50}-\\x{1F57}\\x{1F59}\\x{1F5B}\\x{1F5D}"        \
    "\\x{1F5F}-\\x{1F7D}\\x{1F80}-\\x{1FB4}\\x{1FB6}-\\x{1FBC}\\x{1FBE}"       \
    "\\x{1FC2}-\\x{1FC4}\\x{1FC6}-\\x{1FCC}\\x{1FD0}-\\x{1FD3}"                \
    "\\x{1FD6}-\\x{1FDB}\\x{1FE0}-\\x{1FEC}\\x{1FF2}-\\x{1FF4}"                \
    "\\x{1FF6}-\\x{1FFC}\\x{2102}\\x{2107}\\x{210A}-\\x{2113}\\x{2115}"        \
    "\\x{2119}-\\x{211D}\\x{2124}\\x{2126}\\x{2128}\\x{212A}-\\x{212D}"        \
    "\\x{212F}-\\x{2134}\\x{2139}\\x{213C}-\\x{213F}\\x{2145}-\\x{2149}"       \
    "\\x{214E}\\x{2183}\\x{2184}\\x{2C00}-\\x{2C7B}\\x{2C7E}-\\x{2CE4}"        \
    "\\x{2CEB}-\\x{2CEE}\\x{2CF2}\\x{2CF3}\\x{A640}-\\x{A66D}"                 \
    "\\x{A680}-\\x{A69B}\\x{A722}-\\x{A76F}\\x{A771}-\\x{A787}"                \
    "\\x{A78B}-\\x{A78E}\\x{AB70}-\\x{ABBF}\\x{FB00}-\\x{FB06}"                \
    "\\x{FB13}-\\x{FB17}\\x{FF21}-\\x{FF3A}\\x{FF41}-\\x{FF5A}"                \
    "\\x{10400}-\\x{1044F}\\x{104B0}-\\x{104D3}\\x{104D8}-\\x{104FB}"          \
    "\\x{10C80}-\\x{10CB2}\\x{10CC0}-\\x{10CF2}\\x{118A0}-\\x{118DF}"          \
    "\\x{1E900}-\\x{1E943}]+"

#define RE_DS_PUNCT                                                           \
    "\\s?[!-/:-~\\x{FF01}-\\x{FF0F}\\x{FF1A}-\\x{FF5E}\\x{2018}-\\x{201F}"     \
    "\\x{3000}-\\x{3002}]+"

#define RE_DS_CJK                                                             \
    "[\\x{4E00}-\\x{9FA5}\\x{0800}-\\x{4E00}\\x{AC00}-\\x{D7FF}]+"

#define RE_DS3_MAIN                                                           \
    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+"                    \
    "|[^\\r\\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\\r\\n]*"  \
    "|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

typedef struct {
    const char   *names;        /* NUL-separated, double NUL at the end */
    const char   *re[LLM_TOK_MAX_REGEX];
    int           ignore_merges;
    int           add_bos;
    int           nfc;          /* tokenizer.json normalizer is NFC */
} llm_pre_set_t;

static const llm_pre_set_t  pre_sets[] = {
    { "gpt-2\0phi-2\0jina-es\0jina-de\0gigachat\0jina-v1-en\0jina-v2-es\0"
      "jina-v2-de\0jina-v2-code\0roberta-bpe\0mpt\0olmo\0jais\0a.x-4.0\0"
      "mellum\0",
      { RE_GPT2 }, 0, 0, 0 },
    { "llama3\0llama-v3\0llama-bpe\0falcon3\0falcon-h1\0pixtral\0midm-2.0\0"
      "lfm2\0",
      { RE_LLAMA3 }, 1, 1, 0 },
    { "dbrx\0smaug-bpe\0chatglm-bpe\0",
      { RE_LLAMA3 }, 0, 0, 0 },
    { "qwen2\0deepseek-r1-qwen\0megrez\0",
      { RE_QWEN2 }, 0, 0, 1 },
    { "stablelm2\0hunyuan\0",
      { RE_QWEN2 }, 0, 0, 0 },
    { "deepseek-llm\0",
      { "[\\r\\n]", RE_DS_LETTERS, RE_DS_PUNCT, "\\s+$", RE_DS_CJK,
        "\\p{N}+" }, 0, 0, 0 },
    { "deepseek-coder\0",
      { "[\\r\\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", RE_DS_CJK, "\\p{N}" },
      0, 0, 0 },
    { "deepseek-v3\0hunyuan-dense\0",
      { "\\p{N}{1,3}", "[\\x{4E00}-\\x{9FA5}\\x{3040}-\\x{309F}"
        "\\x{30A0}-\\x{30FF}]+", RE_DS3_MAIN }, 0, 0, 0 },
    { "falcon\0",
      { "[\\p{P}\\$\\+<=>\\^~\\|`]+", RE_GPT2, "[0-9][0-9][0-9]" }, 0, 0, 0 },
    { "starcoder\0refact\0command-r\0smollm\0codeshell\0exaone\0"
      "minerva-7b\0",
      { "\\p{N}", RE_GPT2 }, 0, 0, 0 },
    { "gpt-4o\0minimax-m2\0llama4\0",
      { RE_GPT4O }, 0, 0, 0 },
    { "tekken\0",
      { RE_TEKKEN }, 1, 1, 0 },
    { "bloom\0poro-chat\0gpt3-finnish\0viking\0",
      { " ?[^(\\s|.,!?\\x{2026}\\x{3002}\\x{FF0C}\\x{3001}\\x{0964}\\x{06D4}"
        "\\x{060C})]+" }, 0, 0, 0 },
    { "default\0",
      { "[\\p{P}\\$\\+<=>\\^~\\|]+", RE_GPT2, "\\p{N}+", "[0-9][0-9][0-9]" },
      0, 0, 0 },
};

/* GPT-2's bytes_to_unicode(): printable bytes stand for themselves, the
 * rest (0-32, 127-160, 173) for 256, 257, ... in byte order. */
uint32_t
llm_bpe_byte_cp(uint8_t b)
{
    uint32_t  n = 0;
    unsigned  i;

    if ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174) {
        return b;
    }
    for (i = 0; i < b; i++) {
        if (!((i >= 33 && i <= 126) || (i >= 161 && i <= 172) || i >= 174)) {
            n++;
        }
    }
    return 256 + n;
}

int
llm_bpe_cp_byte(uint32_t cp)
{
    static int16_t  inv[324];
    static int      ready;
    unsigned        b;

    if (!__atomic_load_n(&ready, __ATOMIC_ACQUIRE)) {
        int16_t t[324];

        for (b = 0; b < 324; b++) {
            t[b] = -1;
        }
        for (b = 0; b < 256; b++) {
            t[llm_bpe_byte_cp((uint8_t) b)] = (int16_t) b;
        }
        memcpy(inv, t, sizeof(inv));
        __atomic_store_n(&ready, 1, __ATOMIC_RELEASE);
    }
    return cp < 324 ? inv[cp] : -1;
}

static const llm_pre_set_t *
find_pre_set(const char *pre)
{
    const char  *p;
    size_t       i;

    for (i = 0; i < sizeof(pre_sets) / sizeof(pre_sets[0]); i++) {
        for (p = pre_sets[i].names; *p; p += strlen(p) + 1) {
            if (strcmp(p, pre) == 0) {
                return &pre_sets[i];
            }
        }
    }
    return NULL;
}

static int
merges_insert(llm_vocab_t *v, uint64_t key, int32_t rank, int32_t id)
{
    uint32_t  slot;

    slot = (uint32_t) ((key * 0x9e3779b97f4a7c15ull) >> 32) & v->merge_mask;
    for (;; slot = (slot + 1) & v->merge_mask) {
        if (v->merges[slot].key == 0) {
            v->merges[slot].key = key;
            v->merges[slot].rank = rank;
            v->merges[slot].id = id;
            return 1;
        }
        if (v->merges[slot].key == key) {
            return 0;       /* the first (lowest) rank wins */
        }
    }
}

static inline const llm_merge_slot_t *
merges_find(const llm_vocab_t *v, int32_t l, int32_t r)
{
    uint64_t  key = ((uint64_t) (uint32_t) l << 32) | (uint32_t) r | 1ull << 63;
    uint32_t  slot;

    slot = (uint32_t) ((key * 0x9e3779b97f4a7c15ull) >> 32) & v->merge_mask;
    for (;; slot = (slot + 1) & v->merge_mask) {
        if (v->merges[slot].key == key) {
            return &v->merges[slot];
        }
        if (v->merges[slot].key == 0) {
            return NULL;
        }
    }
}

/* Compile the regexes of a pre-tokenizer set into v (replacing any). */
static int
compile_set(llm_vocab_t *v, const llm_pre_set_t *set, char *err,
    size_t errlen)
{
    uint32_t    k;
    int         ec;
    PCRE2_SIZE  eo;

    for (k = 0; k < v->n_re; k++) {
        pcre2_code_free(v->re[k]);
        v->re[k] = NULL;
    }
    v->n_re = 0;

    for (k = 0; k < LLM_TOK_MAX_REGEX && set->re[k] != NULL; k++) {
        v->re[k] = pcre2_compile((PCRE2_SPTR) set->re[k], PCRE2_ZERO_TERMINATED,
                                 PCRE2_UTF | PCRE2_UCP
                                 | PCRE2_MATCH_INVALID_UTF,
                                 &ec, &eo, NULL);
        if (v->re[k] == NULL) {
            PCRE2_UCHAR msg[128];

            pcre2_get_error_message(ec, msg, sizeof(msg));
            ERR("tokenizer: pre-tokenizer '%s' regex %u: %s at offset %zu",
                v->pre, k, (char *) msg, (size_t) eo);
            return -EINVAL;
        }
        v->n_re = k + 1;
        /* JIT is an optimisation: the interpreter gives the same matches */
        (void) pcre2_jit_compile(v->re[k], PCRE2_JIT_COMPLETE);

        /* the common patterns have hand-written matchers (same matches) */
        v->re_kind[k] = LLM_PRE_PCRE;
        if (llm_ucd_init() == 0) {
            if (strcmp(set->re[k], RE_GPT2) == 0) {
                v->re_kind[k] = LLM_PRE_GPT2;
            } else if (strcmp(set->re[k], RE_LLAMA3) == 0) {
                v->re_kind[k] = LLM_PRE_LLAMA3;
            } else if (strcmp(set->re[k], RE_QWEN2) == 0) {
                v->re_kind[k] = LLM_PRE_QWEN2;
            } else if (strcmp(set->re[k], RE_GPT4O) == 0) {
                v->re_kind[k] = LLM_PRE_O200K;
            }
        }
    }
    return 0;
}

/*
 * Tests: split with the regex set of another `pre` (the merges stay).
 */
int
llm_bpe_set_pre(llm_vocab_t *v, const char *pre, char *err, size_t errlen)
{
    const llm_pre_set_t *set = find_pre_set(pre);

    if (set == NULL || v->type != LLM_VOCAB_BPE) {
        ERR("tokenizer: cannot use pre-tokenizer '%s' here", pre);
        return -EINVAL;
    }
    v->nfc = set->nfc;
    return compile_set(v, set, err, errlen);
}

/*
 * Compile the `pre` regex set, resolve merges to (left id, right id) ->
 * (rank, merged id), and find each byte's token.
 */
int
llm_bpe_init(llm_vocab_t *v, const llm_gguf_t *g, char *err, size_t errlen)
{
    const llm_pre_set_t   *set;
    const llm_gguf_str_t  *m;
    uint64_t               n, i;
    uint32_t               cap;
    int                    rc, b;
    char                   buf[8], *cat = NULL;
    size_t                 catcap = 0, sp, ll;
    int32_t                l, r, id;

    set = find_pre_set(v->pre);
    if (set == NULL) {
        ERR("tokenizer.ggml.pre: unknown pre-tokenizer '%s' (known: gpt-2, "
            "llama-bpe, qwen2, deepseek-llm, deepseek-coder, deepseek-v3, "
            "falcon, mpt, starcoder, refact, minimax-m2, ...)", v->pre);
        return -ENOTSUP;
    }
    v->ignore_merges = set->ignore_merges;
    v->nfc = set->nfc;
    if (set->add_bos) {
        v->add_bos = 1;
    }
    rc = compile_set(v, set, err, errlen);
    if (rc < 0) {
        return rc;
    }

    for (b = 0; b < 256; b++) {
        size_t bl = llm_utf8_put(buf, llm_bpe_byte_cp((uint8_t) b));

        v->byte_tok[b] = llm_tok_lookup(v, buf, bl);
    }

    rc = llm_gguf_get_str_arr(g, "tokenizer.ggml.merges", &n, &m, err,
                              errlen);
    if (rc == -ENOENT) {
        n = 0;
        m = NULL;
    } else if (rc < 0) {
        return rc;
    }
    if (n > (1u << 30)) {
        ERR("tokenizer.ggml.merges: %llu merges (expected at most 2^30)",
            (unsigned long long) n);
        return -EINVAL;
    }

    for (cap = 16; cap < 2 * n; cap <<= 1) { /* void */ }
    v->merges = calloc(cap, sizeof(llm_merge_slot_t));
    v->byte_pair = calloc(65536, sizeof(llm_merge_slot_t));
    if (v->merges == NULL || v->byte_pair == NULL) {
        ERR("tokenizer: out of memory for %llu merges",
            (unsigned long long) n);
        return -ENOMEM;
    }
    v->merge_mask = cap - 1;

    for (i = 0; i < n; i++) {
        const char *s = m[i].ptr;

        ll = m[i].len;
        for (sp = 1; sp < ll && s[sp] != ' '; sp++) { /* void */ }
        if (sp >= ll) {
            continue;           /* not "left right": ignored, as llama.cpp */
        }
        l = llm_tok_lookup(v, s, sp);
        r = llm_tok_lookup(v, s + sp + 1, ll - sp - 1);
        if (l < 0 || r < 0) {
            continue;
        }
        if (ll > catcap) {
            char *p = realloc(cat, ll);

            if (p == NULL) {
                free(cat);
                ERR("tokenizer: out of memory");
                return -ENOMEM;
            }
            cat = p;
            catcap = ll;
        }
        memcpy(cat, s, sp);
        memcpy(cat + sp, s + sp + 1, ll - sp - 1);
        id = llm_tok_lookup(v, cat, ll - 1);
        if (id < 0) {
            continue;
        }
        merges_insert(v, ((uint64_t) (uint32_t) l << 32) | (uint32_t) r
                         | 1ull << 63, (int32_t) i, id);
    }
    free(cat);

    /* the first round of every piece merges byte tokens: a direct table */
    for (b = 0; b < 65536; b++) {
        const llm_merge_slot_t *ms = NULL;

        if (v->byte_tok[b >> 8] >= 0 && v->byte_tok[b & 0xff] >= 0) {
            ms = merges_find(v, v->byte_tok[b >> 8], v->byte_tok[b & 0xff]);
        }
        if (ms != NULL) {
            v->byte_pair[b] = *ms;
        } else {
            v->byte_pair[b].key = 0;
            v->byte_pair[b].rank = -1;
        }
    }
    return 0;
}

void
llm_bpe_free(llm_vocab_t *v)
{
    uint32_t  k;

    for (k = 0; k < v->n_re; k++) {
        pcre2_code_free(v->re[k]);
        v->re[k] = NULL;
    }
    free(v->merges);
    free(v->byte_pair);
    v->merges = NULL;
    v->byte_pair = NULL;
}

/* ---- BPE of one piece ---- */

typedef struct {
    int32_t   rank;
    int32_t   left;
    int32_t   lid;
    int32_t   rid;
    int32_t   id;           /* what the pair merges into */
} bigram_t;

typedef struct {
    int32_t   *id;          /* per symbol: token id, -1 if none */
    int32_t   *prev;
    int32_t   *next;
    size_t     cap;
    bigram_t  *heap;
    size_t     hn;
    size_t     hcap;
    char      *enc;         /* byte-level encoded piece (ignore_merges) */
    size_t     enccap;
} bpe_work_t;

static inline int
bigram_less(const bigram_t *a, const bigram_t *b)
{
    return a->rank < b->rank || (a->rank == b->rank && a->left < b->left);
}

static int
heap_push(bpe_work_t *w, bigram_t bg)
{
    size_t    i, p;
    bigram_t *h;

    if (w->hn == w->hcap) {
        size_t cap = w->hcap ? w->hcap * 2 : 64;

        h = realloc(w->heap, cap * sizeof(*h));
        if (h == NULL) {
            return -ENOMEM;
        }
        w->heap = h;
        w->hcap = cap;
    }
    h = w->heap;
    i = w->hn++;
    while (i > 0) {
        p = (i - 1) / 2;
        if (!bigram_less(&bg, &h[p])) {
            break;
        }
        h[i] = h[p];
        i = p;
    }
    h[i] = bg;
    return 0;
}

static bigram_t
heap_pop(bpe_work_t *w)
{
    bigram_t  top = w->heap[0], last;
    bigram_t *h = w->heap;
    size_t    i = 0, c, n;

    n = --w->hn;
    if (n == 0) {
        return top;
    }
    last = h[n];
    for (;;) {
        c = 2 * i + 1;
        if (c >= n) {
            break;
        }
        if (c + 1 < n && bigram_less(&h[c + 1], &h[c])) {
            c++;
        }
        if (!bigram_less(&h[c], &last)) {
            break;
        }
        h[i] = h[c];
        i = c;
    }
    h[i] = last;
    return top;
}

static int
try_pair(const llm_vocab_t *v, bpe_work_t *w, int32_t left, int32_t right)
{
    const llm_merge_slot_t  *ms;
    bigram_t                 bg;

    if (left < 0 || right < 0 || w->id[left] < 0 || w->id[right] < 0) {
        return 0;
    }
    ms = merges_find(v, w->id[left], w->id[right]);
    if (ms == NULL) {
        return 0;
    }
    bg.rank = ms->rank;
    bg.left = left;
    bg.lid = w->id[left];
    bg.rid = w->id[right];
    bg.id = ms->id;
    return heap_push(w, bg);
}

/* Merge piece p[0..n) into token ids appended to out. */
static int
bpe_piece(const llm_vocab_t *v, bpe_work_t *w, const uint8_t *p, size_t n,
    llm_tokens_t *out)
{
    bigram_t                 bg;
    size_t                   i, el;
    int32_t                  l, r, id;

    if (n == 1) {
        return v->byte_tok[p[0]] >= 0 ? llm_tokens_push(out, v->byte_tok[p[0]])
                                      : 0;
    }

    if (v->ignore_merges) {
        if (w->enccap < 2 * n) {
            char *e = realloc(w->enc, 2 * n);

            if (e == NULL) {
                return -ENOMEM;
            }
            w->enc = e;
            w->enccap = 2 * n;
        }
        el = 0;
        for (i = 0; i < n; i++) {
            el += llm_utf8_put(w->enc + el, llm_bpe_byte_cp(p[i]));
        }
        id = llm_tok_lookup(v, w->enc, el);
        if (id >= 0) {
            return llm_tokens_push(out, id);
        }
    }

    if (w->cap < n) {
        int32_t *a = realloc(w->id, n * 3 * sizeof(int32_t));

        if (a == NULL) {
            return -ENOMEM;
        }
        w->id = a;
        w->prev = a + n;
        w->next = a + 2 * n;
        w->cap = n;
    }
    for (i = 0; i < n; i++) {
        w->id[i] = v->byte_tok[p[i]];
        w->prev[i] = (int32_t) i - 1;
        w->next[i] = i + 1 < n ? (int32_t) i + 1 : -1;
    }

    w->hn = 0;
    for (i = 0; i + 1 < n; i++) {
        const llm_merge_slot_t *bp = &v->byte_pair[p[i] << 8 | p[i + 1]];

        if (bp->rank >= 0) {
            bg.rank = bp->rank;
            bg.left = (int32_t) i;
            bg.lid = w->id[i];
            bg.rid = w->id[i + 1];
            bg.id = bp->id;
            if (heap_push(w, bg) < 0) {
                return -ENOMEM;
            }
        }
    }

    while (w->hn > 0) {
        bg = heap_pop(w);
        l = bg.left;
        r = w->next[l];
        /* stale: left merged into something else, or right changed */
        if (w->id[l] != bg.lid || r < 0 || w->id[r] != bg.rid) {
            continue;
        }
        w->id[l] = bg.id;
        w->id[r] = -2;                      /* dead */
        w->next[l] = w->next[r];
        if (w->next[r] >= 0) {
            w->prev[w->next[r]] = l;
        }
        if (try_pair(v, w, w->prev[l], l) < 0
            || try_pair(v, w, l, w->next[l]) < 0)
        {
            return -ENOMEM;
        }
    }

    for (i = 0; i < n; i = (size_t) w->next[i]) {
        if (w->id[i] >= 0 && llm_tok_push(out, w->id[i]) < 0) {
            return -ENOMEM;
        }
        if (w->next[i] < 0) {
            break;
        }
    }
    return 0;
}

/* ---- per-call piece cache ---- */

typedef struct {
    uint32_t  hash;
    uint32_t  off;          /* piece bytes in the fragment */
    uint32_t  len;
    uint32_t  ids;          /* first id in cache_ids */
    uint32_t  n_ids;        /* 0: empty slot */
} cache_slot_t;

typedef struct {
    cache_slot_t  *slot;
    uint32_t       mask;
    uint32_t       used;
    llm_tokens_t   ids;
} piece_cache_t;

static int
cache_grow(piece_cache_t *c)
{
    cache_slot_t  *ns, *os = c->slot;
    uint32_t       ncap = c->slot ? (c->mask + 1) * 2 : c->mask + 1, i, j, oc;

    ns = calloc(ncap, sizeof(*ns));
    if (ns == NULL) {
        return -ENOMEM;
    }
    oc = c->slot ? c->mask + 1 : 0;
    for (i = 0; i < oc; i++) {
        if (os[i].n_ids == 0) {
            continue;
        }
        for (j = os[i].hash & (ncap - 1); ns[j].n_ids;
             j = (j + 1) & (ncap - 1)) { /* void */ }
        ns[j] = os[i];
    }
    free(os);
    c->slot = ns;
    c->mask = ncap - 1;
    return 0;
}

typedef struct {
    const llm_vocab_t  *v;
    const char         *text;
    pcre2_match_data   *md;
    bpe_work_t          w;
    piece_cache_t       c;
    llm_tokens_t       *out;
    char               *err;
    size_t              errlen;
} bpe_ctx_t;

/* One piece: from the cache, else merged and remembered. */
static int
emit_piece(bpe_ctx_t *x, size_t off, size_t len)
{
    piece_cache_t  *c = &x->c;
    llm_tokens_t   *out = x->out;
    cache_slot_t   *cs;
    const uint8_t  *p = (const uint8_t *) x->text + off;
    uint32_t        h, j;
    size_t          k, before;

    if (x->v->split_log != NULL
        && llm_tokens_push(x->v->split_log, (int32_t) (off + len)) < 0)
    {
        return -ENOMEM;
    }
    if (len <= 1) {
        return bpe_piece(x->v, &x->w, p, len, out);
    }

    h = llm_tok_hash_bytes(p, len);
    for (j = h & c->mask; c->slot[j].n_ids; j = (j + 1) & c->mask) {
        cs = &c->slot[j];
        if (cs->hash == h && cs->len == len
            && memcmp(x->text + cs->off, p, len) == 0)
        {
            for (k = 0; k < cs->n_ids; k++) {
                if (llm_tok_push(out, c->ids.ids[cs->ids + k]) < 0) {
                    return -ENOMEM;
                }
            }
            return 0;
        }
    }

    before = out->n;
    if (bpe_piece(x->v, &x->w, p, len, out) < 0) {
        return -ENOMEM;
    }
    if (out->n == before) {
        return 0;
    }
    cs = &c->slot[j];
    cs->hash = h;
    cs->off = (uint32_t) off;
    cs->len = (uint32_t) len;
    cs->ids = (uint32_t) c->ids.n;
    cs->n_ids = (uint32_t) (out->n - before);
    for (k = before; k < out->n; k++) {
        if (llm_tok_push(&c->ids, out->ids[k]) < 0) {
            return -ENOMEM;
        }
    }
    if (++c->used * 2 > c->mask) {
        return cache_grow(c);
    }
    return 0;
}

/*
 * Split text[off..off+len) by regex k: the gaps between matches and the
 * matches both go on to regex k + 1, and after the last regex to BPE.
 * Recursion depth is the number of regexes in the set (at most 8).
 */
static int
split_rec(bpe_ctx_t *x, uint32_t k, size_t off, size_t len)
{
    const PCRE2_SIZE  *ov;
    const char        *sub = x->text + off;
    size_t             pos = 0, last = 0, ms, me;
    int                rc;

    if (k == x->v->n_re) {
        return emit_piece(x, off, len);
    }

    if (x->v->re_kind[k] != LLM_PRE_PCRE && !x->v->pcre_only) {
        const uint8_t *u = (const uint8_t *) sub;
        int            kind = x->v->re_kind[k];

        while (pos < len) {
            me = kind == LLM_PRE_GPT2 ? llm_pre_gpt2(u, len, pos)
                 : kind == LLM_PRE_O200K ? llm_pre_o200k(u, len, pos)
                 : llm_pre_llama3(u, len, pos, kind == LLM_PRE_LLAMA3 ? 3 : 1);
            if (me == 0) {
                /* no match here: on to the next character */
                rc = llm_utf8_check(u + pos, len - pos);
                pos += rc > 0 ? (size_t) rc : 1;
                continue;
            }
            if (pos > last
                && (rc = split_rec(x, k + 1, off + last, pos - last)) < 0)
            {
                return rc;
            }
            if ((rc = split_rec(x, k + 1, off + pos, me - pos)) < 0) {
                return rc;
            }
            last = pos = me;
        }
        if (len > last) {
            return split_rec(x, k + 1, off + last, len - last);
        }
        return 0;
    }

    ov = pcre2_get_ovector_pointer(x->md);
    while (pos < len) {
        rc = pcre2_match(x->v->re[k], (PCRE2_SPTR) sub, len, pos, 0, x->md,
                         NULL);
        if (rc == PCRE2_ERROR_NOMATCH) {
            break;
        }
        if (rc < 0) {
            PCRE2_UCHAR msg[128];
            char       *err = x->err;
            size_t      errlen = x->errlen;

            pcre2_get_error_message(rc, msg, sizeof(msg));
            ERR("tokenize: pre-tokenizer regex failed: %s", (char *) msg);
            return -EINVAL;
        }
        ms = ov[0];
        me = ov[1];
        if (me == ms) {
            pos = ms + 1;       /* never produced by these patterns */
            continue;
        }
        if (ms > last && (rc = split_rec(x, k + 1, off + last, ms - last)) < 0)
        {
            return rc;
        }
        if ((rc = split_rec(x, k + 1, off + ms, me - ms)) < 0) {
            return rc;
        }
        last = pos = me;
    }
    if (len > last) {
        return split_rec(x, k + 1, off + last, len - last);
    }
    return 0;
}

/*
 * Byte-level BPE of one plain fragment (no special tokens in it).
 */
int
llm_bpe_tokenize(const llm_vocab_t *v, const char *text, size_t len,
    llm_tokens_t *out, char *err, size_t errlen)
{
    bpe_ctx_t   x;
    size_t      want;
    int         rc;

    if (len > 0xffffffffu) {
        ERR("tokenize: text too long (%zu bytes)", len);
        return -E2BIG;
    }
    if (len == 0) {
        return 0;
    }

    memset(&x, 0, sizeof(x));
    x.v = v;
    x.text = text;
    x.out = out;
    x.err = err;
    x.errlen = errlen;

    /*
     * About one token per 2-4 bytes: reserve for the fragment up front.
     * The reserve grows the array geometrically (never to the exact size),
     * so a prompt cut into many fragments by special tokens costs linear
     * copying in all, not a copy of everything so far per fragment.
     */
    if (llm_tokens_reserve(out, out->n + len / 3 + 16) < 0) {
        ERR("tokenize: out of memory");
        return -ENOMEM;
    }

    /* first cache size: about one distinct piece per 16 bytes, 64 .. 4096 */
    for (want = 64; want < 4096 && want * 16 < len; want <<= 1) { /* void */ }
    x.c.mask = (uint32_t) want - 1;

    x.md = pcre2_match_data_create(1, NULL);
    if (x.md == NULL || cache_grow(&x.c) < 0) {
        rc = -ENOMEM;
    } else {
        rc = split_rec(&x, 0, 0, len);
    }
    if (rc == -ENOMEM) {
        ERR("tokenize: out of memory");
    }

    pcre2_match_data_free(x.md);
    free(x.w.id);
    free(x.w.heap);
    free(x.w.enc);
    free(x.c.slot);
    llm_tokens_free(&x.c.ids);
    return rc;
}
