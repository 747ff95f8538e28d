/*
 * The seam between the scheduler (serve/) and decoding (this folder): the
 * hooks a sequence runs around sampling and on its detokenized text, and
 * where the text hook sends what it makes of it.
 */

#ifndef LLM_SEQ_HOOKS_H
#define LLM_SEQ_HOOKS_H

#include <stddef.h>
#include <stdint.h>

/*
 * Hooks for constrained decoding and tool-call parsing, one set
 * per sequence, made by the scheduler's conf.hooks_make at admission when
 * set (serve/scheduler.h):
 *
 *   mask:   before sampling; set logits of forbidden tokens to -INFINITY.
 *   accept: after sampling, with the chosen token.
 *   text:   every piece of emit-safe detokenized text (final = 1 once at
 *           the end with len 0); the hook passes plain content on through
 *           out->content() and tool calls through out->tool_call().  It
 *           returns the number of tool calls seen so far (> 0 makes the
 *           finish reason tool_calls) or a negative errno.
 */
typedef struct {
    void  (*content)(void *sink, const char *s, size_t len);
    void  (*tool_call)(void *sink, uint32_t call_index, const char *id,
              const char *name, const char *args, size_t args_len);
    void   *sink;
} llm_text_out_t;

typedef struct {
    int   (*mask)(void *ud, float *logits, uint32_t n_vocab);
    int   (*accept)(void *ud, int32_t token);
    int   (*text)(void *ud, const char *s, size_t len, int final,
              const llm_text_out_t *out);
    void  (*free)(void *ud);
    void   *ud;
} llm_seq_hooks_t;

#endif /* LLM_SEQ_HOOKS_H */
