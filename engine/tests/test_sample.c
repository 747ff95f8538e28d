/*
 * Sampler checks: greedy, determinism by seed, top_k / top_p / min_p
 * support, penalties, logit_bias, masking, logprobs.
 */

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "decode/sample.h"
#include "testkit.h"


#define V 1000

static void
fill(float *l, uint64_t seed)
{
    llm_rng_t r;

    llm_rng_seed(&r, seed);
    for (int i = 0; i < V; i++) {
        l[i] = (float) (llm_rng_uniform(&r) * 10.0 - 5.0);
    }
}

static void
test_greedy(llm_sampler_t *s)
{
    float                l[V];
    llm_sample_params_t  p = {0};
    llm_rng_t            r;
    int32_t              t;

    fill(l, 1);
    l[123] = 50.0f;
    llm_rng_seed(&r, 0);
    t = llm_sample(s, &p, l, NULL, 0, 0, &r, NULL);
    REQUIRE(t == 123);
    /* ties go to the lower id */
    fill(l, 1);
    l[10] = 60.0f;
    l[5] = 60.0f;
    t = llm_sample(s, &p, l, NULL, 0, 0, &r, NULL);
    REQUIRE(t == 5);
}

static void
test_seed(llm_sampler_t *s)
{
    float                l[V], l2[V];
    llm_sample_params_t  p = {0};
    llm_rng_t            a, b;
    int                  same = 1, differ = 0;

    p.temperature = 1.0f;
    p.top_p = 0.9f;
    p.top_k = 200;
    llm_rng_seed(&a, 42);
    llm_rng_seed(&b, 42);
    for (int i = 0; i < 50; i++) {
        fill(l, i);
        memcpy(l2, l, sizeof(l));
        if (llm_sample(s, &p, l, NULL, 0, 0, &a, NULL)
            != llm_sample(s, &p, l2, NULL, 0, 0, &b, NULL))
        {
            same = 0;
        }
    }
    REQUIRE(same);
    llm_rng_seed(&a, 1);
    llm_rng_seed(&b, 2);
    for (int i = 0; i < 50; i++) {
        fill(l, i);
        memcpy(l2, l, sizeof(l));
        if (llm_sample(s, &p, l, NULL, 0, 0, &a, NULL)
            != llm_sample(s, &p, l2, NULL, 0, 0, &b, NULL))
        {
            differ = 1;
        }
    }
    REQUIRE(differ);
}

static void
test_truncation(llm_sampler_t *s)
{
    float                l[V];
    llm_sample_params_t  p = {0};
    llm_rng_t            r;
    int                  i, t;

    llm_rng_seed(&r, 7);
    /* top_k 3: only the three best ever come out */
    p.temperature = 5.0f;
    p.top_k = 3;
    for (i = 0; i < 200; i++) {
        fill(l, 99);
        l[7] = 20.0f;
        l[8] = 19.0f;
        l[9] = 18.0f;
        t = llm_sample(s, &p, l, NULL, 0, 0, &r, NULL);
        REQUIRE(t == 7 || t == 8 || t == 9);
    }
    /* top_p: two tokens hold ~all mass */
    p.top_k = 0;
    p.temperature = 1.0f;
    p.top_p = 0.4f;
    for (i = 0; i < 200; i++) {
        fill(l, 3);
        l[100] = 30.0f;
        l[200] = 30.0f;
        t = llm_sample(s, &p, l, NULL, 0, 0, &r, NULL);
        REQUIRE(t == 100);
    }
    /* min_p */
    p.top_p = 0.0f;
    p.min_p = 0.5f;
    for (i = 0; i < 200; i++) {
        fill(l, 4);
        l[300] = 30.0f;
        l[301] = 29.8f;
        t = llm_sample(s, &p, l, NULL, 0, 0, &r, NULL);
        REQUIRE(t == 300 || t == 301);
    }
    /* masking: everything but 2 tokens is -inf */
    p.min_p = 0.0f;
    for (i = 0; i < 100; i++) {
        for (int j = 0; j < V; j++) {
            l[j] = -INFINITY;
        }
        l[11] = 0.0f;
        l[12] = 0.0f;
        t = llm_sample(s, &p, l, NULL, 0, 0, &r, NULL);
        REQUIRE(t == 11 || t == 12);
    }
    for (int j = 0; j < V; j++) {
        l[j] = -INFINITY;
    }
    REQUIRE(llm_sample(s, &p, l, NULL, 0, 0, &r, NULL) < 0);
}

static void
test_penalties(llm_sampler_t *s)
{
    float                l[V];
    llm_sample_params_t  p = {0};
    llm_rng_t            r;
    int32_t              hist[4] = { 1, 2, 5, 5 };
    int32_t              bid = 9;
    float                bv = 100.0f;

    llm_rng_seed(&r, 0);
    memset(l, 0, sizeof(l));
    l[5] = 3.0f;
    l[6] = 2.5f;
    p.frequency_penalty = 0.5f;    /* 5 seen twice: 3 - 1 = 2 < 2.5 */
    REQUIRE(llm_sample(s, &p, l, hist, 2, 2, &r, NULL) == 6);
    REQUIRE(fabsf(l[5] - 2.0f) < 1e-6f);
    memset(l, 0, sizeof(l));
    l[5] = 3.0f;
    l[6] = 2.5f;
    p.frequency_penalty = 0.0f;
    p.presence_penalty = 0.6f;     /* once: 2.4 < 2.5 */
    REQUIRE(llm_sample(s, &p, l, hist, 2, 2, &r, NULL) == 6);
    memset(l, 0, sizeof(l));
    l[1] = 3.0f;
    l[6] = 2.5f;
    p.presence_penalty = 0.0f;     /* token 1 is in the prompt only */
    REQUIRE(llm_sample(s, &p, l, hist, 2, 2, &r, NULL) == 1);
    p.repetition_penalty = 1.5f;   /* 3 / 1.5 = 2 < 2.5 */
    l[1] = 3.0f;
    REQUIRE(llm_sample(s, &p, l, hist, 2, 2, &r, NULL) == 6);
    p.repetition_penalty = 0.0f;
    p.bias_ids = &bid;
    p.bias_vals = &bv;
    p.n_bias = 1;
    memset(l, 0, sizeof(l));
    l[6] = 2.5f;
    REQUIRE(llm_sample(s, &p, l, hist, 2, 2, &r, NULL) == 9);
}

static void
test_logprobs(llm_sampler_t *s)
{
    float                l[V];
    llm_sample_params_t  p = {0};
    llm_sample_result_t  res;
    llm_rng_t            r;
    double               sum = 0.0;

    llm_rng_seed(&r, 0);
    fill(l, 5);
    p.logprobs = 1;
    p.top_logprobs = 20;
    llm_sample(s, &p, l, NULL, 0, 0, &r, &res);
    REQUIRE(res.n_top == 20);
    REQUIRE(res.top[0].token == res.token);
    REQUIRE(fabsf(res.top[0].logprob - res.logprob) < 1e-6f);
    for (int i = 1; i < 20; i++) {
        REQUIRE(res.top[i].logprob <= res.top[i - 1].logprob);
    }
    for (int i = 0; i < V; i++) {
        sum += exp((double) l[i] - (double) l[res.token]
                   + (double) res.logprob);
    }
    REQUIRE(fabs(sum - 1.0) < 1e-4);
}

/*
 * A vocabulary of 50,003 (many 4096-value blocks and a tail that is not a
 * multiple of 16), as the vector passes, the block sums and the top_p
 * histogram see it: greedy finds the first maximum anywhere; temperature
 * draws reach every block and follow the softmax (the mean logit drawn);
 * every top_p draw lies in the nucleus computed here by sorting the whole
 * row, and the draws reach its last tenth.
 */
#define VB 50003

static int
by_logit(const void *a, const void *b)
{
    float  x = *(const float *) a, y = *(const float *) b;

    return x > y ? -1 : x < y;
}

static void
test_scale(void)
{
    llm_sampler_t       *s;
    llm_sample_params_t  p = {0};
    llm_rng_t            r, g;
    float               *l = malloc(VB * sizeof(float));
    float               *w = malloc(VB * sizeof(float));
    float               *srt = malloc(VB * sizeof(float));
    double               z = 0.0, mean = 0.0, got = 0.0, acc, target;
    const float          tops[3] = { 0.3f, 0.9f, 0.99f };
    int                  i, k, t, pos[5] = { 0, 17, 4095, 4096, VB - 1 };
    int                  last_block = 0, bad, far;
    float                cut;

    if (l == NULL || w == NULL || srt == NULL
        || llm_sampler_create(&s, VB) != 0)
    {
        tk_fatal("out of memory");
    }
    llm_rng_seed(&g, 5);
    for (i = 0; i < VB; i++) {
        l[i] = (float) (llm_rng_uniform(&g) * 10.0 - 5.0);
    }
    llm_rng_seed(&r, 3);
    for (k = 0; k < 5; k++) {
        memcpy(w, l, VB * sizeof(float));
        w[pos[k]] = 9.0f;
        w[VB - 1] = 9.0f;           /* a tie: the first wins */
        t = llm_sample(s, &p, w, NULL, 0, 0, &r, NULL);
        REQUIRE(t == pos[k]);
    }

    /* temperature 1, no truncation: the mean logit drawn */
    for (i = 0; i < VB; i++) {
        z += exp((double) l[i]);
        mean += (double) l[i] * exp((double) l[i]);
    }
    mean /= z;
    p.temperature = 1.0f;
    for (i = 0; i < 4000; i++) {
        memcpy(w, l, VB * sizeof(float));
        t = llm_sample(s, &p, w, NULL, 0, 0, &r, NULL);
        REQUIRE(t >= 0 && t < VB);
        got += (double) l[t];
        last_block |= t >= 49152;
    }
    got /= 4000.0;
    tk_note("mean logit drawn %.3f, expected %.3f\n", got, mean);
    REQUIRE(fabs(got - mean) < 0.2);
    REQUIRE(last_block);

    /* top_p: the nucleus by a full sort (its boundary within rounding) */
    memcpy(srt, l, VB * sizeof(float));
    qsort(srt, VB, sizeof(float), by_logit);
    for (k = 0; k < 3; k++) {
        target = (double) tops[k] * z;
        acc = 0.0;
        for (i = 0; i < VB && acc < target; i++) {
            acc += exp((double) srt[i]);
        }
        cut = srt[i + 1 < VB ? i + 1 : VB - 1];  /* one past, rounding */
        p.top_p = tops[k];
        bad = far = 0;
        for (int d = 0; d < 3000; d++) {
            memcpy(w, l, VB * sizeof(float));
            t = llm_sample(s, &p, w, NULL, 0, 0, &r, NULL);
            bad += l[t] < cut;
            far |= l[t] <= srt[i - 1 - (i - 1) / 10];
        }
        tk_note("top_p %.2f: nucleus of %d, %d draws outside\n",
                (double) tops[k], i, bad);
        REQUIRE(bad == 0);
        REQUIRE(far);
    }
    llm_sampler_free(s);
    free(l);
    free(w);
    free(srt);
}

int
main(void)
{
    llm_sampler_t *s;

    if (llm_sampler_create(&s, V) != 0) {
        tk_fatal("llm_sampler_create failed");
    }
    tk_begin("greedy");
    test_greedy(s);
    tk_begin("seed");
    test_seed(s);
    tk_begin("truncation");
    test_truncation(s);
    tk_begin("penalties");
    test_penalties(s);
    tk_begin("logprobs");
    test_logprobs(s);
    llm_sampler_free(s);
    tk_begin("a large vocabulary");
    test_scale();
    return tk_done();
}
