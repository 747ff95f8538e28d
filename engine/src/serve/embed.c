/*
 * Embeddings.  See embed.h.
 */

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "embed.h"

const char *
llm_pooling_name(uint32_t pooling)
{
    switch (pooling) {
    case LLM_POOL_MEAN: return "mean";
    case LLM_POOL_CLS:  return "cls";
    case LLM_POOL_LAST: return "last";
    default:            return NULL;
    }
}

int
llm_pooling_from_name(const char *name)
{
    static const char *const names[] = { "none", "mean", "cls", "last",
                                         "rank" };
    int i;

    for (i = 0; i < 5; i++) {
        if (strcmp(name, names[i]) == 0) {
            return i;
        }
    }
    return -1;
}

/* The request's checks: -EINVAL with *param and err, or 0. */
static int
llm_embed_check(const llm_embed_conf_t *ec, const llm_tokens_t *in,
    uint32_t n, uint32_t dims, const char **param, char *err, size_t errlen)
{
    uint32_t  i;
    size_t    t;
    uint64_t  total = 0;

    *param = "input";
    if (n == 0) {
        llm_err(err, errlen, "'input' must not be empty");
        return -EINVAL;
    }
    if (n > ec->max_inputs) {
        llm_err(err, errlen, "'input' holds %u inputs; at most %u are "
                "allowed per request", n, ec->max_inputs);
        return -EINVAL;
    }
    for (i = 0; i < n; i++) {
        if (in[i].n == 0) {
            llm_err(err, errlen, "input %u is empty (no tokens)", i);
            return -EINVAL;
        }
        if (in[i].n > ec->n_ctx) {
            llm_err(err, errlen, "input %u has %zu tokens, over the "
                    "model's maximum context length of %u tokens", i,
                    in[i].n, ec->n_ctx);
            return -EINVAL;
        }
        total += in[i].n;
        if (total > ec->max_total) {
            llm_err(err, errlen, "the inputs hold more than %llu tokens, "
                    "the most one request may embed",
                    (unsigned long long) ec->max_total);
            return -EINVAL;
        }
        for (t = 0; t < in[i].n; t++) {
            if (in[i].ids[t] < 0 || (uint32_t) in[i].ids[t] >= ec->n_vocab) {
                llm_err(err, errlen, "input %u: token %d is not in the "
                        "vocabulary (0..%u)", i, in[i].ids[t],
                        ec->n_vocab - 1);
                return -EINVAL;
            }
        }
    }
    *param = "dimensions";
    if (dims > ec->n_embd) {
        llm_err(err, errlen, "dimensions must be at most %u (the model's "
                "embedding length), got %u", ec->n_embd, dims);
        return -EINVAL;
    }
    if (dims != 0 && dims != ec->n_embd && !ec->truncate) {
        llm_err(err, errlen, "this model does not support 'dimensions' "
                "other than %u (the engine was not started with "
                "--embd-truncate)", ec->n_embd);
        return -EINVAL;
    }
    *param = NULL;
    return 0;
}

/* Does the token at pos of an input of len tokens go into its pooling? */
static int
llm_embed_wants(llm_pooling_t pooling, size_t pos, size_t len)
{
    switch (pooling) {
    case LLM_POOL_MEAN: return 1;
    case LLM_POOL_CLS:  return pos == 0;
    default:            return pos + 1 == len;
    }
}

/* The scratch of one call, freed at its end. */
typedef struct {
    int32_t          *tok, *pos, *seq;
    uint8_t          *want;
    int32_t          *owner;        /* [step] input of each batch sequence */
    llm_seq_view_t   *views;        /* [step] */
    uint32_t         *table;        /* [n_blocks] identity block table */
    uint32_t         *base;         /* [n] first block of each input */
    float            *hid;          /* [step][n_embd] */
    double           *acc;          /* [n][n_embd] */
} llm_embed_buf_t;

static void
llm_embed_buf_free(llm_embed_buf_t *b)
{
    free(b->tok);
    free(b->pos);
    free(b->seq);
    free(b->want);
    free(b->owner);
    free(b->views);
    free(b->table);
    free(b->base);
    free(b->hid);
    free(b->acc);
}

static int
llm_embed_buf_alloc(llm_embed_buf_t *b, const llm_embed_conf_t *ec,
    uint32_t n)
{
    size_t  st = ec->step_tokens;
    uint32_t i;

    memset(b, 0, sizeof(*b));
    b->tok = malloc(st * sizeof(int32_t));
    b->pos = malloc(st * sizeof(int32_t));
    b->seq = malloc(st * sizeof(int32_t));
    b->want = malloc(st);
    b->owner = malloc(st * sizeof(int32_t));
    b->views = malloc(st * sizeof(llm_seq_view_t));
    b->table = malloc((size_t) ec->n_blocks * sizeof(uint32_t));
    b->base = malloc((size_t) n * sizeof(uint32_t));
    b->hid = malloc(st * ec->n_embd * sizeof(float));
    b->acc = calloc((size_t) n * ec->n_embd, sizeof(double));
    if (!b->tok || !b->pos || !b->seq || !b->want || !b->owner || !b->views
        || !b->table || !b->base || !b->hid || !b->acc)
    {
        llm_embed_buf_free(b);
        return -ENOMEM;
    }
    for (i = 0; i < ec->n_blocks; i++) {
        b->table[i] = i;
    }
    return 0;
}

/*
 * Run inputs [first, last), whose blocks (from b->base) fit the cache
 * together, through the forward pass in batches of up to step_tokens
 * tokens, adding each wanted row into its input's accumulator; stops
 * with -ECANCELED before a call once *cancel is set.
 */
static int
llm_embed_group(const llm_embed_conf_t *ec, llm_embed_buf_t *bf,
    const llm_tokens_t *in, uint32_t first, uint32_t last,
    const atomic_int *cancel, char *err, size_t errlen)
{
    uint32_t     s = first, T, ns, r, o, d;
    size_t       p = 0;
    llm_batch_t  b;
    int          rc;

    while (s < last) {
        T = 0;
        ns = 0;
        while (s < last && T < ec->step_tokens) {
            if (ns == 0 || bf->owner[ns - 1] != (int32_t) s) {
                bf->owner[ns] = (int32_t) s;
                bf->views[ns].blocks = bf->table + bf->base[s];
                bf->views[ns].n_blocks = (uint32_t) ((in[s].n
                                          + ec->block_tokens - 1)
                                          / ec->block_tokens);
                bf->views[ns].swa_blocks = NULL;
                bf->views[ns].n_swa_blocks = 0;
                bf->views[ns].state = ns;
                ns++;
            }
            bf->tok[T] = in[s].ids[p];
            bf->pos[T] = (int32_t) p;
            bf->seq[T] = (int32_t) (ns - 1);
            bf->want[T] = (uint8_t) llm_embed_wants(ec->pooling, p,
                                                    in[s].n);
            T++;
            if (++p == in[s].n) {
                s++;
                p = 0;
            }
        }
        if (cancel != NULL && atomic_load(cancel)) {
            llm_err(err, errlen, "embeddings: cancelled");
            return -ECANCELED;
        }
        memset(&b, 0, sizeof(b));
        b.n_tokens = T;
        b.tokens = bf->tok;
        b.pos = bf->pos;
        b.seq = bf->seq;
        b.logits = bf->want;
        b.n_seqs = ns;
        b.seqs = bf->views;
        rc = ec->forward(ec->forward_ud, &b, bf->hid, err, errlen);
        if (rc < 0) {
            return rc;
        }
        /* the wanted rows come back in batch order */
        for (r = 0, o = 0; r < T; r++) {
            const float  *h;
            double       *a;

            if (!bf->want[r]) {
                continue;
            }
            h = bf->hid + (size_t) o++ * ec->n_embd;
            a = bf->acc + (size_t) bf->owner[bf->seq[r]] * ec->n_embd;
            for (d = 0; d < ec->n_embd; d++) {
                a[d] += h[d];
            }
        }
    }
    return 0;
}

/* Pooled sums to unit vectors of dims values. */
static void
llm_embed_finish(const llm_embed_conf_t *ec, const llm_embed_buf_t *bf,
    const llm_tokens_t *in, uint32_t n, uint32_t dims, float *out)
{
    uint32_t  i, d;
    double    div, ss;

    for (i = 0; i < n; i++) {
        const double *a = bf->acc + (size_t) i * ec->n_embd;

        div = ec->pooling == LLM_POOL_MEAN ? (double) in[i].n : 1.0;
        ss = 0.0;
        for (d = 0; d < dims; d++) {
            ss += (a[d] / div) * (a[d] / div);
        }
        ss = ss > 0.0 ? 1.0 / sqrt(ss) : 0.0;
        for (d = 0; d < dims; d++) {
            out[(size_t) i * dims + d] = (float) (a[d] / div * ss);
        }
    }
}

int
llm_embed_run(const llm_embed_conf_t *ec, const llm_tokens_t *in,
    uint32_t n, uint32_t dims, const atomic_int *cancel, float *out,
    const char **param, char *err, size_t errlen)
{
    llm_embed_buf_t  bf;
    uint32_t         i, first, nb, need;
    int              rc;

    rc = llm_embed_check(ec, in, n, dims, param, err, errlen);
    if (rc < 0) {
        return rc;
    }
    if (dims == 0) {
        dims = ec->n_embd;
    }
    rc = llm_embed_buf_alloc(&bf, ec, n);
    if (rc < 0) {
        llm_err(err, errlen, "embeddings: out of memory for %u inputs", n);
        return rc;
    }
    /* groups of inputs whose blocks fit the cache together */
    for (first = 0; first < n; first = i) {
        nb = 0;
        for (i = first; i < n; i++) {
            need = (uint32_t) ((in[i].n + ec->block_tokens - 1)
                               / ec->block_tokens);
            if (i > first && nb + need > ec->n_blocks) {
                break;
            }
            bf.base[i] = nb;
            nb += need;
        }
        rc = llm_embed_group(ec, &bf, in, first, i, cancel, err, errlen);
        if (rc < 0) {
            break;
        }
    }
    if (rc == 0) {
        llm_embed_finish(ec, &bf, in, n, dims, out);
    }
    llm_embed_buf_free(&bf);
    return rc;
}
