/*
 * Per-sequence hooks.  One function per concern: the shared context, the
 * response_format grammar (mask + accept), and llm_hooks_make() putting
 * together what a request asks for.
 */

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hooks.h"
#include "toolhooks.h"


/* The shared context. */

int
llm_hooks_ctx_init(llm_hooks_ctx_t *ctx, const llm_vocab_t *v,
    uint32_t n_vocab, const char *tool_call_format, char *err,
    size_t errlen)
{
    memset(ctx, 0, sizeof(*ctx));
    ctx->vocab = v;
    ctx->n_vocab = n_vocab;
    ctx->tool_call_format = tool_call_format;
    return llm_tokindex_create(&ctx->tokindex, v, err, errlen);
}

void
llm_hooks_ctx_free(llm_hooks_ctx_t *ctx)
{
    llm_tokindex_free(ctx->tokindex);
    ctx->tokindex = NULL;
}


/* response_format: the output is one JSON value the grammar accepts. */

typedef struct {
    const llm_hooks_ctx_t  *ctx;
    llm_grammar_t          *grammar;
    llm_gstate_t           *state;
} llm_hooks_json_t;

/* Forbidden tokens to -INFINITY; a dead end (nothing allowed) is an
 * error: the scheduler ends the sequence rather than sample garbage. */
static int
llm_hooks_json_mask(void *ud, float *logits, uint32_t n_vocab)
{
    llm_hooks_json_t *j = ud;
    int               n;

    n = llm_tokindex_mask(j->ctx->tokindex, j->state, LLM_GMASK_EOG, logits,
                          n_vocab);
    return n > 0 ? 0 : -1;
}

static int
llm_hooks_json_accept(void *ud, int32_t token)
{
    llm_hooks_json_t *j = ud;

    return llm_tokindex_accept(j->ctx->tokindex, j->state, token);
}

static void
llm_hooks_json_free(void *ud)
{
    llm_hooks_json_t *j = ud;

    llm_gstate_free(j->state);
    llm_grammar_free(j->grammar);
    free(j);
}

/* 0 with out set (or untouched for "text" / no response_format). */
static int
llm_hooks_json_make(const llm_hooks_ctx_t *ctx, const llm_request_t *rq,
    llm_seq_hooks_t *out, char *err, size_t errlen)
{
    llm_hooks_json_t  *j;
    llm_grammar_t     *gr;
    int                rc;

    if (rq->response_format == NULL && !rq->response_format_bad) {
        return 0;
    }
    rc = llm_grammar_from_response_format_json(&gr, rq->response_format,
                                               err, errlen);
    if (rc != 0 || gr == NULL) {
        return rc;
    }
    if (ctx->tokindex == NULL) {
        llm_grammar_free(gr);
        snprintf(err, errlen, "response_format: this engine has no token "
                 "index");
        return -EINVAL;
    }
    j = calloc(1, sizeof(*j));
    if (j == NULL || llm_gstate_create(&j->state, gr) != 0) {
        free(j);
        llm_grammar_free(gr);
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    j->ctx = ctx;
    j->grammar = gr;
    out->mask = llm_hooks_json_mask;
    out->accept = llm_hooks_json_accept;
    out->free = llm_hooks_json_free;
    out->ud = j;
    return 0;
}


/* Putting them together. */

int
llm_hooks_make(void *ctx, const llm_request_t *rq, uint32_t choice,
    llm_seq_hooks_t *out, char *err, size_t errlen)
{
    const llm_hooks_ctx_t *c = ctx;
    int                    rc;

    memset(out, 0, sizeof(*out));
    /* tools in play: the tool hooks own the sequence (toolhooks.h) */
    rc = llm_tool_hooks_make(c, rq, choice, out, err, errlen);
    if (rc != 0) {
        return rc < 0 ? rc : 0;
    }
    return llm_hooks_json_make(c, rq, out, err, errlen);
}
