/*
 * One prompt through the forward pass, as one batch: the reference tools
 * and tests (llm-logits, test_reference, test_f64ref...) all evaluate a
 * token sequence this way and compare every position's logits.
 */

#ifndef LLM_ONEPASS_H
#define LLM_ONEPASS_H

#include <stddef.h>
#include <stdint.h>

#include "model/model.h"

/*
 * Evaluate ids[0..n) as sequence 0 at positions 0..n-1 over the KV blocks
 * blocks[0..n_blocks) (enough for n tokens), writing every position's
 * logits to out (n x n_vocab floats, row-major).  0 or a negative errno
 * with err set.
 */
int llm_onepass(llm_ctx_t *c, const int32_t *ids, uint32_t n,
    const uint32_t *blocks, uint32_t n_blocks, float *out, char *err,
    size_t errlen);

#endif /* LLM_ONEPASS_H */
