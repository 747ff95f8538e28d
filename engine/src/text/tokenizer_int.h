/*
 * Internals shared by tokenizer.c (vocabulary, special tokens, dispatch),
 * tokenizer_bpe.c (byte-level BPE), tokenizer_spm.c (SentencePiece BPE)
 * and detok.c (streaming detokenizer).  Not a public API.
 */

#ifndef LLM_TOKENIZER_INT_H
#define LLM_TOKENIZER_INT_H

#include <stddef.h>
#include <stdio.h>
#include <stdint.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "base/err.h"
#include "tokenizer.h"

/* The message of a failure into the caller's err buffer (err may be NULL
 * or errlen 0: no message wanted), in functions taking (err, errlen). */
#define ERR(...)  llm_err(err, errlen, __VA_ARGS__)

/* tokenizer.ggml.token_type values, as llama.cpp's converter writes them */
#define LLM_TT_UNDEFINED     0
#define LLM_TT_NORMAL        1
#define LLM_TT_UNKNOWN       2
#define LLM_TT_CONTROL       3
#define LLM_TT_USER_DEFINED  4
#define LLM_TT_UNUSED        5
#define LLM_TT_BYTE          6

typedef enum {
    LLM_VOCAB_BPE = 1,        /* "gpt2": byte-level BPE by merge rank */
    LLM_VOCAB_SPM = 2         /* "llama": SentencePiece BPE by score */
} llm_vocab_type_t;

#define LLM_TOK_MAX_REGEX  8

typedef struct {
    uint64_t   key;           /* (left id << 32) | right id; 0 = empty */
    int32_t    rank;
    int32_t    id;            /* token the pair merges into */
} llm_merge_slot_t;

struct llm_vocab_s {
    llm_vocab_type_t   type;
    char               model[32];
    char               pre[64];
    uint32_t           n;

    /* token texts as stored in the file, NUL-terminated, in one arena */
    char              *text;
    uint32_t          *text_off;
    uint32_t          *text_len;
    float             *scores;
    uint8_t           *ttype;       /* LLM_TT_* */
    uint8_t           *eog;         /* 1: ends generation */

    /* decoded bytes per token (what detokenization emits) */
    char              *piece;
    uint32_t          *piece_off;
    uint32_t          *piece_len;

    /* text -> id, open addressing, slot holds id + 1 (0 = empty) */
    uint32_t          *hash;
    uint32_t           hash_mask;

    /* BPE merges: (left, right) -> rank, merged id */
    llm_merge_slot_t  *merges;
    uint32_t           merge_mask;

    /* BPE: merges of two single-byte tokens, by (byte << 8 | byte) */
    llm_merge_slot_t  *byte_pair;

    /* BPE: token of each byte's bytes_to_unicode char; SPM: <0xNN> */
    int32_t            byte_tok[256];

    /* special tokens matched in the raw text, by first byte, longest first */
    int32_t           *spec;        /* ids */
    uint32_t           spec_start[257];
    uint8_t            spec_first[256];  /* 1: some special starts so */
    int                spec_only_first;  /* the one first byte, or -1 */

    /* pre-tokenizer: regexes applied one after the other */
    pcre2_code        *re[LLM_TOK_MAX_REGEX];
    uint8_t            re_kind[LLM_TOK_MAX_REGEX];  /* LLM_PRE_* */
    uint32_t           n_re;
    int                pcre_only;   /* tests: no hand-written matchers */
    llm_tokens_t      *split_log;   /* tests: record piece end offsets */
    int                ignore_merges;
    int                nfc;         /* normalize fragments to NFC first */

    int                spm_split;   /* "▁" only leads pieces: split words */

    int32_t            bos, eos, eot, eom, unk, pad;
    int                add_bos, add_eos, add_space_prefix;
    uint32_t           max_token_len;
};

uint32_t llm_tok_hash_bytes(const void *p, size_t n);

/* Tests: ids copied by growing token arrays so far (all threads). */
extern unsigned long  llm_tok_n_copied;

/* llm_tokens_push() with the common case inline */
static inline int
llm_tok_push(llm_tokens_t *t, int32_t id)
{
    if (t->n < t->cap) {
        t->ids[t->n++] = id;
        return 0;
    }
    return llm_tokens_push(t, id);
}
int32_t llm_tok_lookup(const llm_vocab_t *v, const char *s, size_t n);

/* tokenizer_bpe.c */
int llm_bpe_init(llm_vocab_t *v, const llm_gguf_t *g, char *err,
    size_t errlen);
void llm_bpe_free(llm_vocab_t *v);
/* tests: use the regex set of another `pre` value */
int llm_bpe_set_pre(llm_vocab_t *v, const char *pre, char *err,
    size_t errlen);
int llm_bpe_tokenize(const llm_vocab_t *v, const char *text, size_t len,
    llm_tokens_t *out, char *err, size_t errlen);
/* bytes_to_unicode: the code point that stands for byte b */
uint32_t llm_bpe_byte_cp(uint8_t b);
/* inverse: byte for code point cp, or -1 */
int llm_bpe_cp_byte(uint32_t cp);

/* tokenizer_pre.c: hand-written matchers for the common regexes */
#define LLM_PRE_PCRE     0      /* run the regex with PCRE2 */
#define LLM_PRE_GPT2     1
#define LLM_PRE_LLAMA3   2      /* \p{N}{1,3} */
#define LLM_PRE_QWEN2    3      /* \p{N} */
#define LLM_PRE_O200K    4      /* gpt-4o, gpt-oss, llama4, minimax-m2 */

#define LLM_UCD_L  1            /* \p{L} */
#define LLM_UCD_N  2            /* \p{N} */
#define LLM_UCD_S  4            /* \s (PCRE2_UCP) */

#define LLM_UCD_NFC  8          /* NFC may change the text around it */
#define LLM_UCD_UP  16          /* [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}] */
#define LLM_UCD_LO  32          /* [\p{Ll}\p{Lm}\p{Lo}\p{M}] */

int llm_ucd_init(void);
/* Flags of a code point (after llm_ucd_init() succeeded). */
uint8_t llm_ucd_flags(uint32_t cp);
/* tokenizer_nfc.c: 1 and a malloc'd *out if NFC changes the text, else 0 */
int llm_nfc(const char *text, size_t len, char **out, size_t *out_len);
/* End of the match at byte i of s[0..n), or 0 if none starts there. */
size_t llm_pre_gpt2(const uint8_t *s, size_t n, size_t i);
size_t llm_pre_llama3(const uint8_t *s, size_t n, size_t i, int max_digits);
size_t llm_pre_o200k(const uint8_t *s, size_t n, size_t i);

/* tokenizer_spm.c */
int llm_spm_tokenize(const llm_vocab_t *v, const char *text, size_t len,
    int add_prefix, llm_tokens_t *out, char *err, size_t errlen);

/* UTF-8 helpers (tokens.c) */
size_t llm_utf8_len(uint8_t lead);
size_t llm_utf8_put(char *dst, uint32_t cp);
/*
 * Validate one UTF-8 sequence at s (n >= 1 bytes available), following
 * Unicode's "maximal subpart" rule for replacement: returns its length,
 * 0 if it is a valid prefix cut short by n, or -k for k bytes to replace
 * by one U+FFFD.
 */
static inline int
llm_utf8_check(const uint8_t *s, size_t n)
{
    uint8_t  c = s[0], lo = 0x80, hi = 0xbf;
    size_t   need, i;

    if (c < 0x80) {
        return 1;
    }
    if (c < 0xc2 || c > 0xf4) {
        return -1;
    }
    if (c < 0xe0) {
        need = 2;
    } else if (c < 0xf0) {
        need = 3;
        if (c == 0xe0) {
            lo = 0xa0;
        } else if (c == 0xed) {
            hi = 0x9f;
        }
    } else {
        need = 4;
        if (c == 0xf0) {
            lo = 0x90;
        } else if (c == 0xf4) {
            hi = 0x8f;
        }
    }

    for (i = 1; i < need; i++) {
        if (i >= n) {
            return 0;
        }
        if (s[i] < lo || s[i] > hi) {
            return -(int) i;
        }
        lo = 0x80;
        hi = 0xbf;
    }
    return (int) need;
}


#endif /* LLM_TOKENIZER_INT_H */
