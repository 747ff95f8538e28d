/*
 * Embeddings: the forward pass without the head, pooled per input and
 * L2-normalized (an engine started with --embeddings, docs/PROTOCOL.md).
 *
 * Every input is its own sequence; the inputs of one call are packed into
 * forward batches of up to step_tokens tokens (several inputs per batch, a
 * long input over several), their K/V in blocks of the KV cache that are
 * free again when the call returns: nothing is cached between calls.  The
 * caller guarantees that nothing else uses the context or the KV cache
 * while a call runs (an embedding engine answers no Generate).
 */

#ifndef LLM_EMBED_H
#define LLM_EMBED_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "model/model.h"
#include "text/tokenizer.h"

/* llama.cpp's enum llama_pooling_type, as <arch>.pooling_type holds it. */
typedef enum {
    LLM_POOL_NONE = 0,
    LLM_POOL_MEAN = 1,
    LLM_POOL_CLS = 2,
    LLM_POOL_LAST = 3,
    LLM_POOL_RANK = 4
} llm_pooling_t;

typedef struct {
    /* llm_forward_hidden or a wrapper around it */
    int           (*forward)(void *ud, const llm_batch_t *b, float *out,
                             char *err, size_t errlen);
    void           *forward_ud;
    uint32_t        n_embd;
    uint32_t        n_vocab;
    uint32_t        n_ctx;          /* tokens of one input, at most */
    uint32_t        step_tokens;    /* tokens of one forward call */
    uint32_t        n_blocks;       /* the KV cache's */
    uint32_t        block_tokens;
    uint32_t        max_inputs;     /* inputs of one call */
    uint64_t        max_total;      /* tokens of one call, all inputs */
    llm_pooling_t   pooling;        /* MEAN, CLS or LAST */
    int             truncate;       /* dimensions < n_embd allowed */
} llm_embed_conf_t;

/* "mean", "cls", "last" for the pooling types embed implements, or NULL. */
const char *llm_pooling_name(uint32_t pooling);
/* The type named "mean", "cls", "last" (or "none", "rank"), or -1. */
int llm_pooling_from_name(const char *name);

/*
 * Embed n inputs (token ids each) into out[n * dims] (dims 0: n_embd),
 * each row pooled then, when dims < n_embd, cut to its first dims values
 * (Matryoshka), and L2-normalized.  Returns 0; -EINVAL for a request the
 * engine refuses (no inputs or too many, an empty input or one over n_ctx,
 * more than max_total tokens in all,
 * a token id out of the vocabulary, dimensions not allowed) with *param
 * the field at fault and err the message; -ECANCELED when *cancel (may be
 * NULL) was set before a forward call (the client left: nothing more is
 * computed); another negative errno when the forward pass failed.
 */
int llm_embed_run(const llm_embed_conf_t *ec, const llm_tokens_t *in,
    uint32_t n, uint32_t dims, const atomic_int *cancel, float *out,
    const char **param, char *err, size_t errlen);

#endif /* LLM_EMBED_H */
