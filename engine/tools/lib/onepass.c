/*
 * One prompt through the forward pass (onepass.h).
 */

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "onepass.h"

int
llm_onepass(llm_ctx_t *c, const int32_t *ids, uint32_t n,
    const uint32_t *blocks, uint32_t n_blocks, float *out, char *err,
    size_t errlen)
{
    int32_t         *pos, *seq;
    uint8_t         *want;
    llm_seq_view_t   sv = { blocks, n_blocks, NULL, 0, 0 };
    llm_batch_t      b;
    uint32_t         i;
    int              rc = -ENOMEM;

    pos = malloc((size_t) n * sizeof(int32_t));
    seq = malloc((size_t) n * sizeof(int32_t));
    want = malloc(n ? n : 1);
    if (pos == NULL || seq == NULL || want == NULL) {
        snprintf(err, errlen, "forward of %u tokens: out of memory", n);
        goto done;
    }
    for (i = 0; i < n; i++) {
        pos[i] = (int32_t) i;
        seq[i] = 0;
        want[i] = 1;
    }
    b.n_tokens = n;
    b.tokens = ids;
    b.pos = pos;
    b.seq = seq;
    b.logits = want;
    b.n_seqs = 1;
    b.seqs = &sv;
    rc = llm_forward(c, &b, out, err, errlen);

done:
    free(pos);
    free(seq);
    free(want);
    return rc;
}
