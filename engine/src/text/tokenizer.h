/*
 * Tokenizers read from GGUF (tokenizer.ggml.*), as llama.cpp reads them:
 * "gpt2" byte-level BPE with PCRE2 pre-tokenizer regexes per `pre` value,
 * and "llama" SentencePiece BPE with byte fallback.  Plus streaming
 * detokenization that never splits a UTF-8 sequence and holds back text
 * that may be the start of a stop string.
 */

#ifndef LLM_TOKENIZER_H
#define LLM_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "model/gguf.h"

typedef struct llm_vocab_s llm_vocab_t;

int llm_vocab_load(llm_vocab_t **out, const llm_gguf_t *g, char *err,
    size_t errlen);
void llm_vocab_free(llm_vocab_t *v);

uint32_t llm_vocab_n_tokens(const llm_vocab_t *v);
const char *llm_vocab_model(const llm_vocab_t *v);   /* "gpt2", "llama" */
const char *llm_vocab_pre(const llm_vocab_t *v);     /* "qwen2", ... */
int32_t llm_vocab_bos(const llm_vocab_t *v);         /* -1 if none */
int32_t llm_vocab_eos(const llm_vocab_t *v);
int32_t llm_vocab_eot(const llm_vocab_t *v);
int llm_vocab_add_bos(const llm_vocab_t *v);
int llm_vocab_add_eos(const llm_vocab_t *v);
/* End of generation: eos, eot, or another control token that ends a turn. */
int llm_vocab_is_eog(const llm_vocab_t *v, int32_t id);
int llm_vocab_is_control(const llm_vocab_t *v, int32_t id);
/* Look up a token by its exact text (e.g. "<|im_end|>"); -1 if absent. */
int32_t llm_vocab_find(const llm_vocab_t *v, const char *text, size_t len);

/* The token's text as stored in the file (byte-level / "▁" form). */
const char *llm_vocab_token_text(const llm_vocab_t *v, int32_t id,
    size_t *len);
/* tokenizer.ggml.token_type of id: 1 normal, 2 unknown, 3 control,
 * 4 user-defined, 5 unused, 6 byte; -1 if out of range. */
int llm_vocab_token_type(const llm_vocab_t *v, int32_t id);

/* A growable array of token ids. */
typedef struct {
    int32_t  *ids;
    size_t    n;
    size_t    cap;
} llm_tokens_t;

void llm_tokens_free(llm_tokens_t *t);
int llm_tokens_push(llm_tokens_t *t, int32_t id);
/*
 * Room for at least want ids: 0 or -ENOMEM.  Grows geometrically (at least
 * doubling), so any sequence of reserves and pushes copies O(n) ids.
 */
int llm_tokens_reserve(llm_tokens_t *t, size_t want);

#define LLM_TOK_ADD_SPECIAL    0x01  /* BOS/EOS as the vocabulary asks */
#define LLM_TOK_PARSE_SPECIAL  0x02  /* match control tokens in the text */
#define LLM_TOK_GUARDED        0x04  /* the text carries LLM_TOK_GUARD marks */

/*
 * Appends to out.  0 or a negative errno with err set.
 *
 * With LLM_TOK_GUARDED every LLM_TOK_GUARD in the text is removed, and no
 * special token (control, user-defined or unknown) is matched starting in
 * the character that follows it: that text is tokenized as plain text.
 */
int llm_tokenize(const llm_vocab_t *v, const char *text, size_t len,
    unsigned flags, llm_tokens_t *out, char *err, size_t errlen);

/*
 * Guards: text that must never yield a special token (a chat request's
 * message contents, tool results, arguments, names, ...) is marked before
 * it goes into the rendered prompt, so that tokenizing the whole prompt
 * with LLM_TOK_PARSE_SPECIAL | LLM_TOK_GUARDED matches special tokens in
 * the chat template's own markup only.
 *
 * The mark is U+FDD0 U+FDD1 (two Unicode noncharacters, valid UTF-8 that
 * the template renderer passes through unchanged, tojson included).
 */
#define LLM_TOK_GUARD      "\xef\xb7\x90\xef\xb7\x91"
#define LLM_TOK_GUARD_LEN  6

typedef struct llm_tok_guard_s llm_tok_guard_t;

/*
 * The special tokens to guard against: every control and unknown token,
 * and the user-defined tokens whose text occurs in markup[0..len) (the
 * chat template's source: "<think>", "<tool_call>", ...; other
 * user-defined tokens stay matched in plain text, as Hugging Face and
 * llama.cpp match them).  NULL on out of memory.
 */
llm_tok_guard_t *llm_tok_guard_new(const llm_vocab_t *v, const char *markup,
    size_t len);
void llm_tok_guard_free(llm_tok_guard_t *g);

/*
 * A copy of s[0..n) with LLM_TOK_GUARD before every character where (at
 * any of its bytes) a guarded token's text begins, and before a tail of s
 * that begins one (so that nothing concatenated after s completes a
 * special token begun in s).
 * 1 with a malloc'd *out (*outlen bytes, NUL-terminated), 0 if s needs no
 * guard (*out NULL), -ENOMEM.
 */
int llm_tok_guard(const llm_tok_guard_t *g, const char *s, size_t n,
    char **out, size_t *outlen);

/*
 * The bytes a token stands for (byte-level BPE decoded, "▁" turned into a
 * space, <0xNN> turned into that byte).  Control tokens give their text
 * only when `special` is set, else an empty piece.
 */
const char *llm_token_bytes(const llm_vocab_t *v, int32_t id, int special,
    size_t *len);

/*
 * Streaming detokenizer.  Push token ids; get back text that is safe to
 * emit: complete UTF-8 only (invalid sequences become U+FFFD), nothing
 * that could be the beginning of a stop string.  When a stop string
 * completes, llm_detok_push() returns 1 and the text before it is in out;
 * the stop string itself is never emitted.
 */
typedef struct llm_detok_s llm_detok_t;

int llm_detok_create(llm_detok_t **out, const llm_vocab_t *v,
    const char *const *stops, size_t n_stops);
void llm_detok_free(llm_detok_t *d);
/* Appends emit-safe text to *out (malloc'd buffer managed by d). */
int llm_detok_push(llm_detok_t *d, int32_t id, const char **out,
    size_t *len);
/* The stop string that ended the stream (d's copy, valid until d is
 * freed or reset), or NULL when none did. */
const char *llm_detok_stop_string(const llm_detok_t *d);
/* End of stream: flush what is held (incomplete UTF-8 becomes U+FFFD). */
int llm_detok_flush(llm_detok_t *d, const char **out, size_t *len);
/*
 * Options (set before the first push):
 * special: emit control tokens' text (default 0: they give nothing);
 * strip_space: drop one leading space of the first piece, as Hugging
 * Face's SentencePiece decoder does (default 1 for "llama" vocabularies
 * with add_space_prefix, 0 otherwise).
 * reset: start a new stream with the same stop strings.
 */
void llm_detok_set_special(llm_detok_t *d, int special);
void llm_detok_set_strip_space(llm_detok_t *d, int strip);
void llm_detok_reset(llm_detok_t *d);

#endif /* LLM_TOKENIZER_H */
