/*
 * Sampling.  See sample.h for the order of operations and the contract.
 *
 * A step touches the vocabulary (200k entries for gpt-oss, MiniMax-M2,
 * Kimi-K2) in a few vector passes and never sorts it: the maximum and the
 * exponentials run on the online-softmax kernels of kernels/attn.h (AVX-512,
 * AVX2, NEON), block by block so that a draw finds its block by the
 * blocks' sums; top_k and top_logprobs keep the k best in a heap in one
 * pass and sort only those; top_p finds its nucleus with a
 * histogram of the probabilities' float bits (16 buckets per octave) and
 * sorts only the bucket where the mass crosses top_p.  At 201,088 entries
 * this took top_p 0.95 from 24 ms to well under a millisecond
 * (docs/BENCHMARKS.md, Serving).
 */

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sample.h"
#include "kernels/attn.h"

/* values per block of the probability row (a multiple of 16: the kernels') */
#define LLM_SBLK      4096u
/* top_p's histogram: a positive float's bits >> 19, its exponent and the
 * 4 highest mantissa bits; 1.0f is key 2032 */
#define LLM_SKEY(v)   (llm_fbits(v) >> 19)
#define LLM_SKEYS     4096u

typedef struct {
    int32_t  id;
    float    v;        /* logit, then probability */
} llm_cand_t;

struct llm_sampler_s {
    uint32_t     n_vocab;
    llm_cand_t  *cand;     /* [n_vocab] */
    uint32_t    *count;    /* [n_vocab] zero between calls */
    uint8_t     *seen;     /* [n_vocab] zero between calls */
    float       *prob;     /* [n_vocab] exp((logit - max) / T) */
    double      *bsum;     /* [blocks] of prob */
    double      *mass;     /* [LLM_SKEYS] top_p's histogram */
};

static inline uint32_t
llm_fbits(float v)
{
    uint32_t  u;

    memcpy(&u, &v, sizeof(u));
    return u;
}

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
    s->prob = malloc(sizeof(float) * (n_vocab ? n_vocab : 1));
    s->bsum = malloc(sizeof(double) * (n_vocab / LLM_SBLK + 1));
    s->mass = malloc(sizeof(double) * LLM_SKEYS);
    if (s->cand == NULL || s->count == NULL || s->seen == NULL
        || s->prob == NULL || s->bsum == NULL || s->mass == NULL)
    {
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
    free(s->prob);
    free(s->bsum);
    free(s->mass);
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
 * The k best of x[0..n) (by llm_cand_before: value, then lower id),
 * leaving out zeros when skip0 and -INFINITY always, sorted into c:
 * returns how many (<= k).  One pass with a heap of the k kept, its root
 * the worst of them: a value not above the root's is passed over without
 * a write, so a pass over 200k logits costs little more than reading them.
 */
static size_t
llm_top_heap(const float *x, uint32_t n, size_t k, int skip0, llm_cand_t *c)
{
    size_t      m = 0, j, a, b;
    llm_cand_t  t;
    uint32_t    i;

    if (k == 0) {
        return 0;
    }
    for (i = 0; i < n; i++) {
        if (x[i] == -INFINITY || (skip0 && x[i] == 0.0f)
            || (m == k && x[i] <= c[0].v))
        {
            continue;
        }
        t.id = (int32_t) i;
        t.v = x[i];
        if (m < k) {            /* sift up: parents are worse */
            for (j = m++; j > 0 && llm_cand_before(&c[(j - 1) / 2], &t);
                 j = (j - 1) / 2)
            {
                c[j] = c[(j - 1) / 2];
            }
            c[j] = t;
            continue;
        }
        for (j = 0; ; j = b) {  /* replace the root, sift down */
            a = 2 * j + 1;
            if (a >= m) {
                break;
            }
            b = a + 1 < m && llm_cand_before(&c[a], &c[a + 1]) ? a + 1 : a;
            if (!llm_cand_before(&t, &c[b])) {
                break;
            }
            c[j] = c[b];
        }
        c[j] = t;
    }
    qsort(c, m, sizeof(*c), llm_cand_cmp);
    return m;
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

/*
 * The first index of the largest of x[0..n), -1 when all are -INFINITY:
 * each block's maximum on the vector kernel, then a scan of the first
 * block that holds the largest.
 */
static int32_t
llm_argmax(const float *x, uint32_t n)
{
    llm_attn_max_fn   mx;
    llm_attn_exps_fn  ex;
    uint32_t          b, i, len, a, best = UINT32_MAX;
    float             bv = -INFINITY, m;

    llm_attn_online_kernels(&mx, &ex);
    for (b = 0; b < n; b += LLM_SBLK) {
        len = n - b < LLM_SBLK ? n - b : LLM_SBLK;
        a = len & ~15u;
        m = a ? mx(x + b, a) : -INFINITY;
        for (i = a; i < len; i++) {
            m = x[b + i] > m ? x[b + i] : m;
        }
        if (m > bv) {
            bv = m;
            best = b;
        }
    }
    if (best == UINT32_MAX) {
        return -1;
    }
    for (i = best; i < n; i++) {
        if (x[i] == bv) {
            return (int32_t) i;
        }
    }
    return -1;
}

/*
 * s->prob[i] = exp((logits[i] - max) / T), 0 for a masked (-INFINITY)
 * token, with the sum of every LLM_SBLK block in s->bsum: returns the
 * total.  The largest is exactly 1.
 */
static double
llm_sample_probs(llm_sampler_t *s, const float *logits, float max,
    float inv_t)
{
    llm_attn_max_fn   mx;
    llm_attn_exps_fn  ex;
    float            *e = s->prob;
    uint32_t          V = s->n_vocab, b, i, len, a;
    double            tot = 0.0, bs;

    llm_attn_online_kernels(&mx, &ex);
    for (i = 0; i < V; i++) {
        e[i] = (logits[i] - max) * inv_t;
    }
    for (b = 0; b < V; b += LLM_SBLK) {
        len = V - b < LLM_SBLK ? V - b : LLM_SBLK;
        a = len & ~15u;
        bs = a ? (double) ex(e + b, a, 0.0f) : 0.0;
        for (i = b + a; i < b + len; i++) {
            e[i] = e[i] == -INFINITY ? 0.0f : expf(e[i]);
            bs += (double) e[i];
        }
        s->bsum[b / LLM_SBLK] = bs;
        tot += bs;
    }
    return tot;
}

/*
 * The nucleus of top_p (0 < top_p < 1) over s->prob, total its sum: the
 * fewest most probable tokens (ties: lower id first) whose mass reaches
 * top_p * total, into c; returns their count and their mass in *mass.
 * The histogram of the probabilities' float bits finds the bucket where
 * the mass crosses; the buckets above are in whole (in id order), the
 * crossing one is sorted and taken until the mass is reached.
 */
static size_t
llm_sample_nucleus(llm_sampler_t *s, double top_p, double total,
    llm_cand_t *c, double *mass)
{
    const float  *e = s->prob;
    uint32_t      V = s->n_vocab, i, k, cross = 0;
    size_t        n = 0, nc = 0;
    double        target = top_p * total, acc = 0.0;

    memset(s->mass, 0, LLM_SKEYS * sizeof(double));
    for (i = 0; i < V; i++) {
        if (e[i] > 0.0f) {
            s->mass[LLM_SKEY(e[i])] += (double) e[i];
        }
    }
    for (k = LLM_SKEYS; k-- > 0; ) {
        acc += s->mass[k];
        cross = k;
        if (acc >= target) {
            break;
        }
    }
    /* above the crossing bucket from the front, its members from the back */
    acc = 0.0;
    for (i = 0; i < V; i++) {
        if (e[i] > 0.0f) {
            k = LLM_SKEY(e[i]);
            if (k > cross) {
                c[n].id = (int32_t) i;
                c[n++].v = e[i];
                acc += (double) e[i];
            } else if (k == cross) {
                nc++;
                c[V - nc].id = (int32_t) i;
                c[V - nc].v = e[i];
            }
        }
    }
    qsort(c + V - nc, nc, sizeof(*c), llm_cand_cmp);
    for (i = 0; i < nc && acc < target; i++) {
        c[n++] = c[V - nc + i];
        acc += (double) c[n - 1].v;
    }
    *mass = acc;
    return n;
}

/* The token at mass r (0 <= r < total) of s->prob, by the block sums. */
static int32_t
llm_sample_row(const llm_sampler_t *s, double r)
{
    const float  *e = s->prob;
    uint32_t      V = s->n_vocab, b = 0, i, end, last = 0;
    double        acc = 0.0;

    while (b + LLM_SBLK < V && acc + s->bsum[b / LLM_SBLK] <= r) {
        acc += s->bsum[b / LLM_SBLK];
        b += LLM_SBLK;
    }
    end = V - b < LLM_SBLK ? V : b + LLM_SBLK;
    for (i = b; i < end; i++) {
        if (e[i] > 0.0f) {
            last = i;
            acc += (double) e[i];
            if (r < acc) {
                return (int32_t) i;
            }
        }
    }
    return (int32_t) last;      /* r at the very end (rounding) */
}

/*
 * log(sum(exp(x - max))) + max over the whole row: the exponentials on the
 * vector kernel, in s->prob, block sums in double.
 */
static double
llm_logsumexp(llm_sampler_t *s, const float *x, float max)
{
    llm_attn_max_fn   mx;
    llm_attn_exps_fn  ex;
    uint32_t          V = s->n_vocab, b, i, len, a;
    double            sum = 0.0;

    llm_attn_online_kernels(&mx, &ex);
    memcpy(s->prob, x, V * sizeof(float));
    for (b = 0; b < V; b += LLM_SBLK) {
        len = V - b < LLM_SBLK ? V - b : LLM_SBLK;
        a = len & ~15u;
        sum += a ? (double) ex(s->prob + b, a, max) : 0.0;
        for (i = b + a; i < b + len; i++) {
            sum += x[i] == -INFINITY ? 0.0 : exp((double) (x[i] - max));
        }
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
    size_t       n, i;
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

        lse = llm_logsumexp(s, logits, max);
        if (k > LLM_SAMPLE_MAX_TOP_LOGPROBS) {
            k = LLM_SAMPLE_MAX_TOP_LOGPROBS;
        }
        if (k > 0) {
            /* masked tokens (constrained decoding) are no alternatives */
            k = (uint32_t) llm_top_heap(logits, V, k, 0, c);
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

    /* probabilities relative to the most probable token's (1) */
    inv_t = 1.0f / p->temperature;
    sum = llm_sample_probs(s, logits, max, inv_t);
    n = 0;
    if (p->top_k > 0 && (uint32_t) p->top_k < V) {
        n = llm_top_heap(s->prob, V, (size_t) p->top_k, 1, c);
    }
    if (n > 0) {
        /* the k best, sorted, then top_p over them as they come */
        sum = 0.0;
        for (i = 0; i < n; i++) {
            sum += c[i].v;
        }
        if (p->top_p > 0.0f && p->top_p < 1.0f) {
            double target = (double) p->top_p * sum;

            acc = 0.0;
            for (i = 0; i < n; i++) {
                acc += c[i].v;
                if (acc >= target) {
                    break;
                }
            }
            n = i < n ? i + 1 : n;
            sum = acc;
        }
    } else if (p->top_p > 0.0f && p->top_p < 1.0f) {
        n = llm_sample_nucleus(s, (double) p->top_p, sum, c, &sum);
    } else if (p->min_p > 0.0f) {
        n = 0;      /* (the tokens min_p keeps, below, in id order) */
        for (i = 0; i < V; i++) {
            if (s->prob[i] >= p->min_p && s->prob[i] > 0.0f) {
                c[n].id = (int32_t) i;
                c[n++].v = s->prob[i];
            }
        }
    } else {
        /* the whole row: the draw finds its block by the blocks' sums */
        tok = llm_sample_row(s, llm_rng_uniform(rng) * sum);
        goto done;
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
