/*
 * Sampling.  See sample.h for the order of operations and the contract.
 *
 * Candidate selection never sorts the whole vocabulary: top_k and top_p
 * use a quickselect partition to bring the m best candidates to the front
 * (m doubling until their mass reaches top_p), then sort only those.
 */

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sample.h"

typedef struct {
    int32_t  id;
    float    v;        /* logit, then probability */
} llm_cand_t;

struct llm_sampler_s {
    uint32_t     n_vocab;
    llm_cand_t  *cand;     /* [n_vocab] */
    uint32_t    *count;    /* [n_vocab] zero between calls */
    uint8_t     *seen;     /* [n_vocab] zero between calls */
};

static uint64_t
llm_splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);

    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void
llm_rng_seed(llm_rng_t *r, uint64_t seed)
{
    uint64_t x = seed;

    for (int i = 0; i < 4; i++) {
        r->s[i] = llm_splitmix64(&x);
    }
}

static inline uint64_t
llm_rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

uint64_t
llm_rng_next(llm_rng_t *r)
{
    uint64_t *s = r->s;
    uint64_t  res = llm_rotl(s[1] * 5, 7) * 9;
    uint64_t  t = s[1] << 17;

    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = llm_rotl(s[3], 45);
    return res;
}

double
llm_rng_uniform(llm_rng_t *r)
{
    return (double) (llm_rng_next(r) >> 11) * 0x1.0p-53;
}

int
llm_sampler_create(llm_sampler_t **out, uint32_t n_vocab)
{
    llm_sampler_t *s;

    *out = NULL;
    s = calloc(1, sizeof(*s));
    if (s == NULL) {
        return -ENOMEM;
    }
    s->n_vocab = n_vocab;
    s->cand = malloc(sizeof(llm_cand_t) * (n_vocab ? n_vocab : 1));
    s->count = calloc(n_vocab ? n_vocab : 1, sizeof(uint32_t));
    s->seen = calloc(n_vocab ? n_vocab : 1, 1);
    if (s->cand == NULL || s->count == NULL || s->seen == NULL) {
        llm_sampler_free(s);
        return -ENOMEM;
    }
    *out = s;
    return 0;
}

void
llm_sampler_free(llm_sampler_t *s)
{
    if (s == NULL) {
        return;
    }
    free(s->cand);
    free(s->count);
    free(s->seen);
    free(s);
}

/* Descending by value, ascending id on ties: a total, stable order. */
static inline int
llm_cand_before(const llm_cand_t *a, const llm_cand_t *b)
{
    return a->v > b->v || (a->v == b->v && a->id < b->id);
}

static int
llm_cand_cmp(const void *pa, const void *pb)
{
    const llm_cand_t *a = pa, *b = pb;

    if (llm_cand_before(a, b)) {
        return -1;
    }
    return llm_cand_before(b, a) ? 1 : 0;
}

/*
 * Rearrange c[0..n) so that its m best (by llm_cand_before) come first,
 * sorted.  Quickselect with median-of-three pivots, then qsort of m.
 */
static void
llm_cand_top(llm_cand_t *c, size_t n, size_t m)
{
    size_t lo = 0, hi = n;

    if (m >= n) {
        qsort(c, n, sizeof(*c), llm_cand_cmp);
        return;
    }

    while (hi - lo > 1) {
        size_t      mid = lo + (hi - lo) / 2, i, store;
        llm_cand_t  piv, tmp;
        llm_cand_t *a = &c[lo], *b = &c[mid], *d = &c[hi - 1], *p;

        /* median of three */
        if (llm_cand_before(a, b)) {
            p = llm_cand_before(b, d) ? b : (llm_cand_before(a, d) ? d : a);
        } else {
            p = llm_cand_before(a, d) ? a : (llm_cand_before(b, d) ? d : b);
        }
        piv = *p;
        *p = c[hi - 1];
        c[hi - 1] = piv;

        store = lo;
        for (i = lo; i < hi - 1; i++) {
            if (llm_cand_before(&c[i], &piv)) {
                tmp = c[i];
                c[i] = c[store];
                c[store] = tmp;
                store++;
            }
        }
        c[hi - 1] = c[store];
        c[store] = piv;

        if (store == m || store + 1 == m) {
            break;
        }
        if (store > m) {
            hi = store;
        } else {
            lo = store + 1;
        }
    }
    qsort(c, m, sizeof(*c), llm_cand_cmp);
}

/* Logit processing that changes the distribution: bias and penalties. */
static void
llm_sample_process(llm_sampler_t *s, const llm_sample_params_t *p,
    float *logits, const int32_t *hist, size_t n_prompt, size_t n_gen)
{
    uint32_t  V = s->n_vocab;
    size_t    i, n_hist = n_prompt + n_gen;
    float     rp = p->repetition_penalty;

    for (i = 0; i < p->n_bias; i++) {
        int32_t id = p->bias_ids[i];

        if (id >= 0 && (uint32_t) id < V) {
            logits[id] += p->bias_vals[i];
        }
    }

    /* repetition penalty (CTRL paper, as llama.cpp and HF): once per
     * distinct token of prompt and output */
    if (rp > 0.0f && rp != 1.0f) {
        for (i = 0; i < n_hist; i++) {
            int32_t id = hist[i];

            if (id < 0 || (uint32_t) id >= V || s->seen[id]) {
                continue;
            }
            s->seen[id] = 1;
            logits[id] = logits[id] > 0.0f ? logits[id] / rp
                                           : logits[id] * rp;
        }
        for (i = 0; i < n_hist; i++) {
            if (hist[i] >= 0 && (uint32_t) hist[i] < V) {
                s->seen[hist[i]] = 0;
            }
        }
    }

    /* OpenAI: mu[j] -= c[j] * frequency + (c[j] > 0) * presence, c over
     * the tokens sampled so far */
    if (p->presence_penalty != 0.0f || p->frequency_penalty != 0.0f) {
        const int32_t *gen = hist + n_prompt;

        for (i = 0; i < n_gen; i++) {
            if (gen[i] >= 0 && (uint32_t) gen[i] < V) {
                s->count[gen[i]]++;
            }
        }
        for (i = 0; i < n_gen; i++) {
            int32_t id = gen[i];

            if (id < 0 || (uint32_t) id >= V || s->count[id] == 0) {
                continue;
            }
            logits[id] -= (float) s->count[id] * p->frequency_penalty
                          + p->presence_penalty;
            s->count[id] = 0;
        }
    }
}

static int32_t
llm_argmax(const float *x, uint32_t n)
{
    int32_t best = -1;
    float   bv = -INFINITY;

    for (uint32_t i = 0; i < n; i++) {
        if (x[i] > bv) {
            bv = x[i];
            best = (int32_t) i;
        }
    }
    return best;
}

/* log(sum(exp(x - max))) + max, over the whole row. */
static double
llm_logsumexp(const float *x, uint32_t n, float max)
{
    double sum = 0.0;

    for (uint32_t i = 0; i < n; i++) {
        sum += exp((double) (x[i] - max));
    }
    return log(sum) + (double) max;
}

int32_t
llm_sample(llm_sampler_t *s, const llm_sample_params_t *p, float *logits,
    const int32_t *hist, size_t n_prompt, size_t n_gen, llm_rng_t *rng,
    llm_sample_result_t *res)
{
    uint32_t     V = s->n_vocab;
    llm_cand_t  *c = s->cand;
    size_t       n, i, m;
    int32_t      tok, amax;
    double       lse = 0.0, sum, r, acc;
    float        max, inv_t;

    llm_sample_process(s, p, logits, hist, n_prompt, n_gen);

    amax = llm_argmax(logits, V);
    if (amax < 0) {
        return -EINVAL;
    }
    max = logits[amax];

    if (res != NULL) {
        res->n_top = 0;
        res->logprob = 0.0f;
    }
    if (res != NULL && (p->logprobs || p->top_logprobs)) {
        uint32_t k = p->top_logprobs;

        lse = llm_logsumexp(logits, V, max);
        if (k > LLM_SAMPLE_MAX_TOP_LOGPROBS) {
            k = LLM_SAMPLE_MAX_TOP_LOGPROBS;
        }
        if (k > 0) {
            for (i = 0; i < V; i++) {
                c[i].id = (int32_t) i;
                c[i].v = logits[i];
            }
            if (k > V) {
                k = V;
            }
            llm_cand_top(c, V, k);
            /* masked tokens (constrained decoding) are no alternatives */
            while (k > 0 && c[k - 1].v == -INFINITY) {
                k--;
            }
            for (i = 0; i < k; i++) {
                res->top[i].token = c[i].id;
                res->top[i].logprob = (float) ((double) c[i].v - lse);
            }
            res->n_top = k;
        }
    }

    if (p->temperature <= 0.0f || p->top_k == 1) {
        tok = amax;
        goto done;
    }

    /* candidates: every token that is not masked, logits / T */
    inv_t = 1.0f / p->temperature;
    n = 0;
    for (i = 0; i < V; i++) {
        if (logits[i] != -INFINITY) {
            c[n].id = (int32_t) i;
            c[n].v = (logits[i] - max) * inv_t;
            n++;
        }
    }

    if (p->top_k > 0 && (size_t) p->top_k < n) {
        llm_cand_top(c, n, (size_t) p->top_k);
        n = (size_t) p->top_k;
    }

    /* softmax over what is left (values are <= 0, the max is 0) */
    sum = 0.0;
    for (i = 0; i < n; i++) {
        c[i].v = expf(c[i].v);
        sum += c[i].v;
    }

    if (p->top_p > 0.0f && p->top_p < 1.0f) {
        double target = (double) p->top_p * sum;

        for (m = 64; ; m *= 2) {
            if (m > n) {
                m = n;
            }
            llm_cand_top(c, n, m);
            acc = 0.0;
            for (i = 0; i < m; i++) {
                acc += c[i].v;
                if (acc >= target) {
                    break;
                }
            }
            if (i < m) {
                n = i + 1;
                break;
            }
            if (m == n) {
                break;
            }
        }
        sum = acc;
    }

    if (p->min_p > 0.0f) {
        /* the max candidate has probability mass 1 before normalization */
        float  thr = p->min_p;
        size_t j = 0;

        sum = 0.0;
        for (i = 0; i < n; i++) {
            if (c[i].v >= thr) {
                c[j++] = c[i];
                sum += c[i].v;
            }
        }
        n = j;
    }

    if (n == 0) {
        tok = amax;
        goto done;
    }

    r = llm_rng_uniform(rng) * sum;
    acc = 0.0;
    tok = c[n - 1].id;
    for (i = 0; i < n; i++) {
        acc += c[i].v;
        if (r < acc) {
            tok = c[i].id;
            break;
        }
    }

done:
    if (res != NULL) {
        res->token = tok;
        if (p->logprobs || p->top_logprobs) {
            res->logprob = (float) ((double) logits[tok] - lse);
        }
    }
    return tok;
}
