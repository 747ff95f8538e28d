/*
 * Vocabulary loading, special tokens and the tokenize entry point.
 *
 * The vocabulary is read from the GGUF keys tokenizer.ggml.* as llama.cpp
 * reads them and copied (the vocabulary outlives nothing but itself: the
 * GGUF may be closed after llm_vocab_load()).  Token texts go into one
 * arena, with an open-addressing hash from text to id.  Detokenization
 * pieces (the bytes a token stands for) are computed once at load.
 *
 * Tokenizing splits the text at special tokens first (user-defined tokens
 * always, control tokens only with LLM_TOK_PARSE_SPECIAL; leftmost, longest
 * first), then hands each plain fragment to the BPE or SPM tokenizer.
 */

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer_int.h"

static int
vocab_get_id(const llm_gguf_t *g, const char *key, uint32_t n, int32_t *id,
    int strict, char *err, size_t errlen)
{
    uint32_t  u;
    int       rc;

    rc = llm_gguf_get_u32(g, key, &u, err, errlen);
    if (rc == -ENOENT) {
        return 0;
    }
    if (rc < 0) {
        return rc;
    }
    if (u >= n) {
        if (!strict) {
            return 0;
        }
        ERR("%s: token id %u out of range (vocabulary has %u tokens)",
            key, u, n);
        return -EINVAL;
    }
    *id = (int32_t) u;
    return 0;
}

static int
vocab_get_flag(const llm_gguf_t *g, const char *key, int *flag, char *err,
    size_t errlen)
{
    int  b, rc;

    rc = llm_gguf_get_bool(g, key, &b, err, errlen);
    if (rc == -ENOENT) {
        return 0;
    }
    if (rc < 0) {
        return rc;
    }
    *flag = b != 0;
    return 0;
}

static int
spec_cmp(const void *a, const void *b, void *arg)
{
    const llm_vocab_t *v = arg;
    int32_t            x = *(const int32_t *) a, y = *(const int32_t *) b;
    uint8_t            cx, cy;

    cx = (uint8_t) v->text[v->text_off[x]];
    cy = (uint8_t) v->text[v->text_off[y]];
    if (cx != cy) {
        return cx < cy ? -1 : 1;
    }
    if (v->text_len[x] != v->text_len[y]) {
        return v->text_len[x] > v->text_len[y] ? -1 : 1;
    }
    return x < y ? -1 : (x > y);
}

/* Index the tokens matched in raw text: control, user-defined, unknown. */
static int
vocab_index_specials(llm_vocab_t *v)
{
    uint32_t  i, n = 0, c, k;

    for (i = 0; i < v->n; i++) {
        if (v->text_len[i] > 0
            && (v->ttype[i] == LLM_TT_CONTROL
                || v->ttype[i] == LLM_TT_USER_DEFINED
                || v->ttype[i] == LLM_TT_UNKNOWN))
        {
            n++;
        }
    }

    v->spec = malloc((n ? n : 1) * sizeof(int32_t));
    if (v->spec == NULL) {
        return -ENOMEM;
    }
    n = 0;
    for (i = 0; i < v->n; i++) {
        if (v->text_len[i] > 0
            && (v->ttype[i] == LLM_TT_CONTROL
                || v->ttype[i] == LLM_TT_USER_DEFINED
                || v->ttype[i] == LLM_TT_UNKNOWN))
        {
            v->spec[n++] = (int32_t) i;
        }
    }
    qsort_r(v->spec, n, sizeof(int32_t), spec_cmp, v);

    /* spec_start[c] .. spec_start[c + 1]: the tokens starting with byte c */
    i = 0;
    for (c = 0; c < 256; c++) {
        v->spec_start[c] = i;
        while (i < n && (uint8_t) v->text[v->text_off[v->spec[i]]] == c) {
            i++;
        }
    }
    v->spec_start[256] = n;

    v->spec_only_first = -1;
    k = 0;
    for (c = 0; c < 256; c++) {
        v->spec_first[c] = v->spec_start[c] != v->spec_start[c + 1];
        if (v->spec_first[c]) {
            v->spec_only_first = (int) c;
            k++;
        }
    }
    if (k != 1) {
        v->spec_only_first = -1;
    }
    return 0;
}

/*
 * The bytes each token stands for: byte-level BPE decoded, "▁" turned
 * into a space for SentencePiece, <0xNN> into its byte; other types keep
 * their text (whether it is emitted is decided in llm_token_bytes()).
 */
static int
vocab_build_pieces(llm_vocab_t *v)
{
    size_t       total = 0, pos = 0, i, j, k;
    const char  *t;
    size_t       tl;
    uint32_t     cp;
    int          b, hex;
    uint8_t      c;

    for (i = 0; i < v->n; i++) {
        total += v->text_len[i] + 1;
    }
    v->piece = malloc(total);
    v->piece_off = malloc(v->n * sizeof(uint32_t));
    v->piece_len = malloc(v->n * sizeof(uint32_t));
    if (v->piece == NULL || v->piece_off == NULL || v->piece_len == NULL) {
        return -ENOMEM;
    }

    for (i = 0; i < v->n; i++) {
        t = v->text + v->text_off[i];
        tl = v->text_len[i];
        v->piece_off[i] = (uint32_t) pos;

        if (v->ttype[i] == LLM_TT_BYTE && tl == 6 && memcmp(t, "<0x", 3) == 0
            && t[5] == '>')
        {
            hex = 0;
            for (k = 3; k < 5; k++) {
                c = (uint8_t) t[k];
                hex = hex * 16 + (c >= 'a' ? c - 'a' + 10
                                  : c >= 'A' ? c - 'A' + 10 : c - '0');
            }
            v->piece[pos++] = (char) hex;

        } else if (v->type == LLM_VOCAB_BPE
                   && (v->ttype[i] == LLM_TT_NORMAL
                       || v->ttype[i] == LLM_TT_UNDEFINED))
        {
            for (j = 0; j < tl; ) {
                k = llm_utf8_len((uint8_t) t[j]);
                if (j + k > tl) {
                    k = tl - j;
                }
                cp = 0;
                if (k == 2) {
                    cp = ((uint32_t) (t[j] & 0x1f) << 6) | (t[j + 1] & 0x3f);
                } else if (k == 1) {
                    cp = (uint8_t) t[j];
                }
                b = (k <= 2) ? llm_bpe_cp_byte(cp) : -1;
                if (b >= 0) {
                    v->piece[pos++] = (char) b;
                } else {
                    memcpy(v->piece + pos, t + j, k);
                    pos += k;
                }
                j += k;
            }

        } else if (v->type == LLM_VOCAB_SPM
                   && (v->ttype[i] == LLM_TT_NORMAL
                       || v->ttype[i] == LLM_TT_UNDEFINED))
        {
            for (j = 0; j < tl; ) {
                if (j + 3 <= tl && memcmp(t + j, "\xe2\x96\x81", 3) == 0) {
                    v->piece[pos++] = ' ';
                    j += 3;
                } else {
                    v->piece[pos++] = t[j++];
                }
            }

        } else {
            memcpy(v->piece + pos, t, tl);
            pos += tl;
        }

        v->piece_len[i] = (uint32_t) (pos - v->piece_off[i]);
        v->piece[pos++] = '\0';
    }
    return 0;
}

/*
 * End-of-generation tokens: eos, eot, eom and, as llama.cpp does, control
 * tokens whose text ends a turn in a known chat format.  gpt-oss ends the
 * analysis message with <|end|> and goes on, so there <|end|> does not end
 * generation when <|return|> or <|call|> exist.
 */
static void
vocab_mark_eog(llm_vocab_t *v)
{
    static const char *const eog_texts[] = {
        "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>",
        "<|endoftext|>", "<|eom_id|>", "<EOT>", "_<EOT>",
        "<|end_of_text|>", "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81"
        "sentence\xef\xbd\x9c>", "<|return|>", "<|call|>",
        "<end_of_utterance>", "[e~[", NULL
    };
    static const char *const eot_texts[] = {
        "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>",
        "<|endoftext|>", "<EOT>", "_<EOT>", "<\xef\xbd\x9c" "end\xe2\x96\x81"
        "of\xe2\x96\x81sentence\xef\xbd\x9c>", "<end_of_utterance>", NULL
    };
    int32_t  id, end_id;
    size_t   i;
    int      gpt_oss;

    if (v->eot < 0) {
        for (i = 0; eot_texts[i] != NULL && v->eot < 0; i++) {
            id = llm_tok_lookup(v, eot_texts[i], strlen(eot_texts[i]));
            if (id >= 0 && v->ttype[id] == LLM_TT_CONTROL) {
                v->eot = id;
            }
        }
    }
    if (v->eom < 0) {
        id = llm_tok_lookup(v, "<|eom_id|>", 10);
        if (id >= 0) {
            v->eom = id;
        }
    }

    for (i = 0; eog_texts[i] != NULL; i++) {
        id = llm_tok_lookup(v, eog_texts[i], strlen(eog_texts[i]));
        if (id >= 0 && (v->ttype[id] == LLM_TT_CONTROL
                        || v->ttype[id] == LLM_TT_USER_DEFINED))
        {
            v->eog[id] = 1;
        }
    }

    gpt_oss = llm_tok_lookup(v, "<|return|>", 10) >= 0
              || llm_tok_lookup(v, "<|call|>", 8) >= 0;
    end_id = llm_tok_lookup(v, "<|end|>", 7);
    if (gpt_oss && end_id >= 0 && end_id != v->eos) {
        v->eog[end_id] = 0;
        if (v->eot == end_id) {
            v->eot = -1;
        }
    }

    if (v->eos >= 0) {
        v->eog[v->eos] = 1;
    }
    if (v->eot >= 0) {
        v->eog[v->eot] = 1;
    }
    if (v->eom >= 0) {
        v->eog[v->eom] = 1;
    }
}

/*
 * Load the tokenizer from g.  Everything is copied; g may be closed
 * afterwards.  Fails with -ENOENT (no tokenizer keys), -ENOTSUP (unknown
 * tokenizer model or pre-tokenizer) or -EINVAL (inconsistent arrays).
 */
int
llm_vocab_load(llm_vocab_t **out, const llm_gguf_t *g, char *err,
    size_t errlen)
{
    llm_vocab_t           *v;
    llm_gguf_str_t         s;
    const llm_gguf_str_t  *toks;
    const void            *data;
    uint64_t               n, m, total, i;
    uint32_t               cap, slot, h;
    int                    rc;

    *out = NULL;
    v = calloc(1, sizeof(*v));
    if (v == NULL) {
        ERR("tokenizer: out of memory");
        return -ENOMEM;
    }
    v->bos = v->eos = v->eot = v->eom = v->unk = v->pad = -1;

    rc = llm_gguf_get_str(g, "tokenizer.ggml.model", &s, err, errlen);
    if (rc < 0) {
        if (rc == -ENOENT) {
            ERR("%s: no tokenizer.ggml.model key (not a model or vocabulary "
                "file?)", llm_gguf_path(g));
        }
        goto fail;
    }
    if (s.len == 4 && memcmp(s.ptr, "gpt2", 4) == 0) {
        v->type = LLM_VOCAB_BPE;
    } else if (s.len == 5 && memcmp(s.ptr, "llama", 5) == 0) {
        v->type = LLM_VOCAB_SPM;
    } else {
        ERR("tokenizer.ggml.model: '%.*s' is not supported (expected "
            "\"gpt2\" or \"llama\")", (int) (s.len < 40 ? s.len : 40), s.ptr);
        rc = -ENOTSUP;
        goto fail;
    }
    snprintf(v->model, sizeof(v->model), "%.*s", (int) s.len, s.ptr);

    rc = llm_gguf_get_str(g, "tokenizer.ggml.pre", &s, err, errlen);
    if (rc == -ENOENT) {
        snprintf(v->pre, sizeof(v->pre), "default");
    } else if (rc < 0) {
        goto fail;
    } else {
        if (s.len >= sizeof(v->pre)) {
            ERR("tokenizer.ggml.pre: value too long (%llu bytes)",
                (unsigned long long) s.len);
            rc = -EINVAL;
            goto fail;
        }
        snprintf(v->pre, sizeof(v->pre), "%.*s", (int) s.len, s.ptr);
    }

    rc = llm_gguf_get_str_arr(g, "tokenizer.ggml.tokens", &n, &toks, err,
                              errlen);
    if (rc < 0) {
        goto fail;
    }
    if (n == 0 || n > (1u << 30)) {
        ERR("tokenizer.ggml.tokens: %llu tokens (expected 1 .. 2^30)",
            (unsigned long long) n);
        rc = -EINVAL;
        goto fail;
    }
    v->n = (uint32_t) n;

    total = 0;
    for (i = 0; i < n; i++) {
        total += toks[i].len + 1;
    }
    if (total > 0xffffffffu) {
        ERR("tokenizer.ggml.tokens: token texts too large (%llu bytes)",
            (unsigned long long) total);
        rc = -EINVAL;
        goto fail;
    }

    v->text = malloc(total);
    v->text_off = malloc(n * sizeof(uint32_t));
    v->text_len = malloc(n * sizeof(uint32_t));
    v->scores = calloc(n, sizeof(float));
    v->ttype = malloc(n);
    v->eog = calloc(n, 1);
    if (v->text == NULL || v->text_off == NULL || v->text_len == NULL
        || v->scores == NULL || v->ttype == NULL || v->eog == NULL)
    {
        ERR("tokenizer: out of memory for %llu tokens",
            (unsigned long long) n);
        rc = -ENOMEM;
        goto fail;
    }

    total = 0;
    for (i = 0; i < n; i++) {
        v->text_off[i] = (uint32_t) total;
        v->text_len[i] = (uint32_t) toks[i].len;
        memcpy(v->text + total, toks[i].ptr, toks[i].len);
        total += toks[i].len;
        v->text[total++] = '\0';
        if (toks[i].len > v->max_token_len) {
            v->max_token_len = (uint32_t) toks[i].len;
        }
    }

    rc = llm_gguf_get_arr(g, "tokenizer.ggml.scores", LLM_GGUF_FLOAT32, &m,
                          &data, err, errlen);
    if (rc == 0) {
        if (m != n) {
            ERR("tokenizer.ggml.scores: %llu entries, expected %llu (one per "
                "token)", (unsigned long long) m, (unsigned long long) n);
            rc = -EINVAL;
            goto fail;
        }
        memcpy(v->scores, data, n * sizeof(float));
    } else if (rc != -ENOENT) {
        goto fail;
    }

    memset(v->ttype, LLM_TT_NORMAL, n);
    rc = llm_gguf_get_arr(g, "tokenizer.ggml.token_type", LLM_GGUF_INT32, &m,
                          &data, err, errlen);
    if (rc == 0) {
        if (m != n) {
            ERR("tokenizer.ggml.token_type: %llu entries, expected %llu (one "
                "per token)", (unsigned long long) m, (unsigned long long) n);
            rc = -EINVAL;
            goto fail;
        }
        for (i = 0; i < n; i++) {
            int32_t t;

            memcpy(&t, (const char *) data + i * 4, 4);
            v->ttype[i] = (t >= 0 && t <= LLM_TT_BYTE) ? (uint8_t) t
                                                       : LLM_TT_UNDEFINED;
        }
    } else if (rc != -ENOENT) {
        goto fail;
    }

    /* text -> id; a repeated text maps to its last id, as in llama.cpp */
    for (cap = 16; cap < 2 * n; cap <<= 1) { /* void */ }
    v->hash = calloc(cap, sizeof(uint32_t));
    if (v->hash == NULL) {
        rc = -ENOMEM;
        ERR("tokenizer: out of memory");
        goto fail;
    }
    v->hash_mask = cap - 1;
    for (i = 0; i < n; i++) {
        if (v->text_len[i] == 0) {
            continue;
        }
        h = llm_tok_hash_bytes(v->text + v->text_off[i], v->text_len[i]);
        for (slot = h & v->hash_mask; ; slot = (slot + 1) & v->hash_mask) {
            uint32_t o = v->hash[slot];

            if (o == 0) {
                v->hash[slot] = (uint32_t) i + 1;
                break;
            }
            if (v->text_len[o - 1] == v->text_len[i]
                && memcmp(v->text + v->text_off[o - 1],
                          v->text + v->text_off[i], v->text_len[i]) == 0)
            {
                v->hash[slot] = (uint32_t) i + 1;
                break;
            }
        }
    }

    /* defaults as llama.cpp sets them per tokenizer type */
    if (v->type == LLM_VOCAB_SPM) {
        v->bos = 1 < v->n ? 1 : -1;
        v->eos = 2 < v->n ? 2 : -1;
        v->unk = 0;
        v->add_bos = 1;
        v->add_space_prefix = 1;
    }

    if ((rc = vocab_get_id(g, "tokenizer.ggml.bos_token_id", v->n, &v->bos,
                           1, err, errlen)) < 0
        || (rc = vocab_get_id(g, "tokenizer.ggml.eos_token_id", v->n,
                              &v->eos, 1, err, errlen)) < 0
        || (rc = vocab_get_id(g, "tokenizer.ggml.eot_token_id", v->n,
                              &v->eot, 0, err, errlen)) < 0
        || (rc = vocab_get_id(g, "tokenizer.ggml.eom_token_id", v->n,
                              &v->eom, 0, err, errlen)) < 0
        || (rc = vocab_get_id(g, "tokenizer.ggml.unknown_token_id", v->n,
                              &v->unk, 0, err, errlen)) < 0
        || (rc = vocab_get_id(g, "tokenizer.ggml.padding_token_id", v->n,
                              &v->pad, 0, err, errlen)) < 0)
    {
        goto fail;
    }

    if (v->type == LLM_VOCAB_BPE) {
        rc = llm_bpe_init(v, g, err, errlen);
        if (rc < 0) {
            goto fail;
        }
    } else {
        char   buf[8];
        int    b;

        /* can words be merged one by one? (see llm_spm_tokenize) */
        v->spm_split = 1;
        for (i = 0; i < n && v->spm_split; i++) {
            const char *t = v->text + v->text_off[i];
            size_t      tl = v->text_len[i], j = 0;

            while (j + 3 <= tl && memcmp(t + j, "\xe2\x96\x81", 3) == 0) {
                j += 3;
            }
            if (j < tl && memmem(t + j, tl - j, "\xe2\x96\x81", 3) != NULL) {
                v->spm_split = 0;
            }
        }

        for (b = 0; b < 256; b++) {
            snprintf(buf, sizeof(buf), "<0x%02X>", b);
            v->byte_tok[b] = llm_tok_lookup(v, buf, 6);
            if (v->byte_tok[b] < 0) {
                buf[1] = (char) b;
                v->byte_tok[b] = llm_tok_lookup(v, buf + 1, 1);
            }
        }
    }

    if ((rc = vocab_get_flag(g, "tokenizer.ggml.add_bos_token", &v->add_bos,
                             err, errlen)) < 0
        || (rc = vocab_get_flag(g, "tokenizer.ggml.add_eos_token",
                                &v->add_eos, err, errlen)) < 0
        || (rc = vocab_get_flag(g, "tokenizer.ggml.add_space_prefix",
                                &v->add_space_prefix, err, errlen)) < 0)
    {
        goto fail;
    }

    vocab_mark_eog(v);

    rc = vocab_index_specials(v);
    if (rc == 0) {
        rc = vocab_build_pieces(v);
    }
    if (rc < 0) {
        ERR("tokenizer: out of memory");
        goto fail;
    }

    *out = v;
    return 0;

fail:
    llm_vocab_free(v);
    return rc;
}

void
llm_vocab_free(llm_vocab_t *v)
{
    if (v == NULL) {
        return;
    }
    if (v->type == LLM_VOCAB_BPE) {
        llm_bpe_free(v);
    }
    free(v->text);
    free(v->text_off);
    free(v->text_len);
    free(v->scores);
    free(v->ttype);
    free(v->eog);
    free(v->piece);
    free(v->piece_off);
    free(v->piece_len);
    free(v->hash);
    free(v->spec);
    free(v);
}

uint32_t
llm_vocab_n_tokens(const llm_vocab_t *v)
{
    return v->n;
}

const char *
llm_vocab_model(const llm_vocab_t *v)
{
    return v->model;
}

const char *
llm_vocab_pre(const llm_vocab_t *v)
{
    return v->pre;
}

int32_t
llm_vocab_bos(const llm_vocab_t *v)
{
    return v->bos;
}

int32_t
llm_vocab_eos(const llm_vocab_t *v)
{
    return v->eos;
}

int32_t
llm_vocab_eot(const llm_vocab_t *v)
{
    return v->eot;
}

int
llm_vocab_add_bos(const llm_vocab_t *v)
{
    return v->add_bos && v->bos >= 0;
}

int
llm_vocab_add_eos(const llm_vocab_t *v)
{
    return v->add_eos && v->eos >= 0;
}

int
llm_vocab_is_eog(const llm_vocab_t *v, int32_t id)
{
    return id >= 0 && (uint32_t) id < v->n && v->eog[id];
}

int
llm_vocab_is_control(const llm_vocab_t *v, int32_t id)
{
    return id >= 0 && (uint32_t) id < v->n && v->ttype[id] == LLM_TT_CONTROL;
}

int32_t
llm_vocab_find(const llm_vocab_t *v, const char *text, size_t len)
{
    return llm_tok_lookup(v, text, len);
}

const char *
llm_vocab_token_text(const llm_vocab_t *v, int32_t id, size_t *len)
{
    if (id < 0 || (uint32_t) id >= v->n) {
        *len = 0;
        return "";
    }
    *len = v->text_len[id];
    return v->text + v->text_off[id];
}

int
llm_vocab_token_type(const llm_vocab_t *v, int32_t id)
{
    if (id < 0 || (uint32_t) id >= v->n) {
        return -1;
    }
    return v->ttype[id];
}

const char *
llm_token_bytes(const llm_vocab_t *v, int32_t id, int special, size_t *len)
{
    uint8_t  t;

    if (id < 0 || (uint32_t) id >= v->n) {
        *len = 0;
        return "";
    }
    t = v->ttype[id];
    if (!special && (t == LLM_TT_CONTROL || t == LLM_TT_UNKNOWN
                     || t == LLM_TT_UNUSED))
    {
        *len = 0;
        return "";
    }
    *len = v->piece_len[id];
    return v->piece + v->piece_off[id];
}

/* The longest special token at text[i], or -1. */
static int32_t
match_special(const llm_vocab_t *v, const char *text, size_t len, size_t i,
    int parse_special)
{
    uint32_t  k, end;
    uint8_t   c = (uint8_t) text[i];
    int32_t   id;

    end = v->spec_start[c + 1];
    for (k = v->spec_start[c]; k < end; k++) {
        id = v->spec[k];
        if (!parse_special && v->ttype[id] != LLM_TT_USER_DEFINED) {
            continue;
        }
        if (v->text_len[id] <= len - i
            && memcmp(text + i, v->text + v->text_off[id],
                      v->text_len[id]) == 0)
        {
            return id;
        }
    }
    return -1;
}

static int
tokenize_fragment(const llm_vocab_t *v, const char *text, size_t len,
    int prev_special, llm_tokens_t *out, char *err, size_t errlen)
{
    char    *norm;
    size_t   nlen;
    int      rc;

    if (v->type == LLM_VOCAB_BPE) {
        if (v->nfc) {
            rc = llm_nfc(text, len, &norm, &nlen);
            if (rc < 0) {
                ERR("tokenize: out of memory");
                return rc;
            }
            if (rc == 1) {
                rc = llm_bpe_tokenize(v, norm, nlen, out, err, errlen);
                free(norm);
                return rc;
            }
        }
        return llm_bpe_tokenize(v, text, len, out, err, errlen);
    }
    return llm_spm_tokenize(v, text, len,
                            v->add_space_prefix && prev_special, out, err,
                            errlen);
}

/*
 * Remove the LLM_TOK_GUARD marks of text[0..len): *plain gets the text
 * without them, *marks the offsets in *plain where one stood (ascending).
 */
static int
strip_guards(const char *text, size_t len, char **plain, size_t *plen,
    size_t **marks, size_t *n_marks)
{
    const char  *p, *end = text + len, *g;
    char        *o;
    size_t       n = 0, m = 0;

    *plain = o = malloc(len + 1);
    *marks = malloc((len / LLM_TOK_GUARD_LEN + 1) * sizeof(size_t));
    if (o == NULL || *marks == NULL) {
        return -ENOMEM;
    }
    for (p = text; p < end; p = g + LLM_TOK_GUARD_LEN) {
        g = memmem(p, (size_t) (end - p), LLM_TOK_GUARD, LLM_TOK_GUARD_LEN);
        if (g == NULL) {
            g = end;
        }
        memcpy(o + n, p, (size_t) (g - p));
        n += (size_t) (g - p);
        if (g == end) {
            break;
        }
        (*marks)[m++] = n;
    }
    o[n] = '\0';
    *plen = n;
    *n_marks = m;
    return 0;
}

/* 1 if text[i] is in the UTF-8 character that starts at text[p]. */
static int
same_char(const char *text, size_t p, size_t i)
{
    size_t  j;

    if (i - p > 3) {
        return 0;
    }
    for (j = p + 1; j <= i; j++) {
        if (((uint8_t) text[j] & 0xc0) != 0x80) {
            return 0;
        }
    }
    return 1;
}

/*
 * Tokenize text[0..len) into out (appending).  Special tokens in the text
 * are cut out first, the rest goes to the model's tokenizer.  A guard
 * stands before a character: it stops special tokens starting at any of
 * the character's bytes.
 */
int
llm_tokenize(const llm_vocab_t *v, const char *text, size_t len,
    unsigned flags, llm_tokens_t *out, char *err, size_t errlen)
{
    size_t   i, start, *marks = NULL, n_marks = 0, next = 0;
    char    *plain = NULL;
    int32_t  id;
    int      rc = 0, prev_special = 1;
    int      parse = (flags & LLM_TOK_PARSE_SPECIAL) != 0;

    if ((flags & LLM_TOK_GUARDED)
        && memmem(text, len, LLM_TOK_GUARD, LLM_TOK_GUARD_LEN) != NULL)
    {
        rc = strip_guards(text, len, &plain, &len, &marks, &n_marks);
        if (rc < 0) {
            goto nomem;
        }
        text = plain;
    }

    if ((flags & LLM_TOK_ADD_SPECIAL) && v->add_bos && v->bos >= 0) {
        if ((rc = llm_tokens_push(out, v->bos)) < 0) {
            goto nomem;
        }
    }

    start = 0;
    for (i = 0; i < len; i++) {
        if (v->spec_only_first >= 0) {
            const char *p = memchr(text + i, v->spec_only_first, len - i);

            if (p == NULL) {
                break;
            }
            i = (size_t) (p - text);
        } else {
            while (i < len && !v->spec_first[(uint8_t) text[i]]) {
                i++;
            }
            if (i == len) {
                break;
            }
        }
        id = match_special(v, text, len, i, parse);
        if (id < 0) {
            continue;
        }
        while (next + 1 < n_marks && marks[next + 1] <= i) {
            next++;
        }
        if (next < n_marks && marks[next] <= i
            && same_char(text, marks[next], i))
        {
            continue;           /* guarded: plain text from here */
        }
        if (i > start) {
            rc = tokenize_fragment(v, text + start, i - start, prev_special,
                                   out, err, errlen);
            if (rc < 0) {
                goto done;
            }
            prev_special = 0;
        }
        if ((rc = llm_tokens_push(out, id)) < 0) {
            goto nomem;
        }
        prev_special = 1;
        i += v->text_len[id];
        start = i;
        i--;
    }
    if (len > start) {
        rc = tokenize_fragment(v, text + start, len - start, prev_special,
                               out, err, errlen);
        if (rc < 0) {
            goto done;
        }
    }

    if ((flags & LLM_TOK_ADD_SPECIAL) && v->add_eos && v->eos >= 0) {
        if ((rc = llm_tokens_push(out, v->eos)) < 0) {
            goto nomem;
        }
    }
    goto done;

nomem:
    ERR("tokenize: out of memory");
    rc = -ENOMEM;

done:
    free(plain);
    free(marks);
    return rc;
}

/* ---- guards ---- */

struct llm_tok_guard_s {
    const llm_vocab_t  *v;
    uint8_t            *on;         /* per v->spec index: 1 = guarded */
    uint8_t             first[256]; /* some guarded token starts so */
};

llm_tok_guard_t *
llm_tok_guard_new(const llm_vocab_t *v, const char *markup, size_t len)
{
    llm_tok_guard_t  *g;
    uint32_t          k, n = v->spec_start[256], c;
    int32_t           id;

    g = calloc(1, sizeof(*g));
    if (g == NULL) {
        return NULL;
    }
    g->v = v;
    g->on = calloc(n ? n : 1, 1);
    if (g->on == NULL) {
        free(g);
        return NULL;
    }
    for (c = 0; c < 256; c++) {
        for (k = v->spec_start[c]; k < v->spec_start[c + 1]; k++) {
            id = v->spec[k];
            if (v->ttype[id] != LLM_TT_USER_DEFINED
                || (markup != NULL
                    && memmem(markup, len, v->text + v->text_off[id],
                              v->text_len[id]) != NULL))
            {
                g->on[k] = 1;
                g->first[c] = 1;
            }
        }
    }
    return g;
}

void
llm_tok_guard_free(llm_tok_guard_t *g)
{
    if (g != NULL) {
        free(g->on);
        free(g);
    }
}

/*
 * 1 if a guarded token begins at s[i]: its whole text, or (at the end of
 * s) a proper prefix of it.
 */
static int
guard_at(const llm_tok_guard_t *g, const char *s, size_t n, size_t i)
{
    const llm_vocab_t  *v = g->v;
    uint8_t             c = (uint8_t) s[i];
    uint32_t            k;
    int32_t             id;
    size_t              tl, left = n - i;

    if (!g->first[c]) {
        return 0;
    }
    for (k = v->spec_start[c]; k < v->spec_start[c + 1]; k++) {
        if (!g->on[k]) {
            continue;
        }
        id = v->spec[k];
        tl = v->text_len[id];
        if (memcmp(s + i, v->text + v->text_off[id], tl < left ? tl : left)
            == 0)
        {
            return 1;
        }
    }
    return 0;
}

/*
 * The length of the character at s[i] (the byte and the continuation bytes
 * after it, at most 4), and in *guard whether a guarded token begins at
 * any of its bytes: guards go before whole characters, so that the text
 * stays valid UTF-8 even for a token that begins inside one.
 */
static size_t
guard_char(const llm_tok_guard_t *g, const char *s, size_t n, size_t i,
    int *guard)
{
    size_t  k = 1;

    while (i + k < n && k < 4 && ((uint8_t) s[i + k] & 0xc0) == 0x80) {
        k++;
    }
    *guard = 0;
    for (size_t j = i; j < i + k && !*guard; j++) {
        *guard = guard_at(g, s, n, j);
    }
    return k;
}

int
llm_tok_guard(const llm_tok_guard_t *g, const char *s, size_t n, char **out,
    size_t *outlen)
{
    size_t  i, k, m = 0, o = 0;
    char   *d;
    int     gd;

    *out = NULL;
    *outlen = 0;
    for (i = 0; i < n; i += k) {
        k = guard_char(g, s, n, i, &gd);
        m += gd;
    }
    if (m == 0) {
        return 0;
    }
    d = malloc(n + m * LLM_TOK_GUARD_LEN + 1);
    if (d == NULL) {
        return -ENOMEM;
    }
    for (i = 0; i < n; i += k) {
        k = guard_char(g, s, n, i, &gd);
        if (gd) {
            memcpy(d + o, LLM_TOK_GUARD, LLM_TOK_GUARD_LEN);
            o += LLM_TOK_GUARD_LEN;
        }
        memcpy(d + o, s + i, k);
        o += k;
    }
    d[o] = '\0';
    *out = d;
    *outlen = o;
    return 1;
}
