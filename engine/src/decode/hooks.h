/*
 * Per-sequence hooks (scheduler.h's llm_seq_hooks_t) made at admission
 * from what a Generate request asks: constrained decoding for
 * response_format json_object / json_schema (grammar.h), and later the
 * tool-call text hook.  One llm_hooks_ctx_t per served model holds what
 * every sequence shares: the vocabulary and its token index.
 */

#ifndef LLM_HOOKS_H
#define LLM_HOOKS_H

#include <stddef.h>
#include <stdint.h>

#include "grammar.h"
#include "request.h"
#include "seq_hooks.h"
#include "text/tokenizer.h"

typedef struct {
    const llm_vocab_t  *vocab;
    llm_tokindex_t     *tokindex;
    uint32_t            n_vocab;      /* logits row length */
    const char         *tool_call_format;  /* may be NULL */
} llm_hooks_ctx_t;

/* Builds the token index of v (once per model).  0 or a negative errno
 * with err set. */
int llm_hooks_ctx_init(llm_hooks_ctx_t *ctx, const llm_vocab_t *v,
    uint32_t n_vocab, const char *tool_call_format, char *err,
    size_t errlen);
void llm_hooks_ctx_free(llm_hooks_ctx_t *ctx);

/*
 * llm_sched_hooks_pt: fill *out for choice `choice` of rq (left zeroed
 * when the request needs no hooks).  ctx is an llm_hooks_ctx_t.  A bad
 * response_format gives -EINVAL with the reason in err (the scheduler
 * answers invalid_request_error, param "response_format").
 */
int llm_hooks_make(void *ctx, const llm_request_t *rq, uint32_t choice,
    llm_seq_hooks_t *out, char *err, size_t errlen);

#endif /* LLM_HOOKS_H */
