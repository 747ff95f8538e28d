/*
 * llm-samplebench: what sampling one token costs on a vocabulary of a
 * given size, per setting (greedy, temperature, top_k, top_p, min_p,
 * logprobs).
 *
 *   llm-samplebench [-V N[,N...]] [-n REPS] [--flat]
 *
 * Each row of logits is random (uniform in [-5, 5], a flat, high-entropy
 * distribution where top_p keeps many tokens: the expensive case; with
 * no --flat, one token in 64 is raised by 8, a peaked one like a trained
 * model's), copied fresh before every call (the copy's time subtracted);
 * prints a table of microseconds per call (mean over REPS).
 */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "decode/sample.h"

static double
now_us(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

typedef struct {
    const char  *name;
    float        temperature;
    int32_t      top_k;
    float        top_p;
    float        min_p;
    uint32_t     top_logprobs;
} sb_case_t;

static const sb_case_t sb_cases[] = {
    { "greedy", 0.0f, 0, 1.0f, 0.0f, 0 },
    { "temperature 1", 1.0f, 0, 1.0f, 0.0f, 0 },
    { "temperature 0.7, top_p 0.8", 0.7f, 0, 0.8f, 0.0f, 0 },
    { "temperature 1, top_p 0.95", 1.0f, 0, 0.95f, 0.0f, 0 },
    { "temperature 1, top_k 40, top_p 0.95", 1.0f, 40, 0.95f, 0.0f, 0 },
    { "temperature 1, min_p 0.05", 1.0f, 0, 1.0f, 0.05f, 0 },
    { "greedy, top_logprobs 5", 0.0f, 0, 1.0f, 0.0f, 5 },
};

int
main(int argc, char **argv)
{
    const char  *vs = "4096,32000,151936,201088";
    int          reps = 200, flat = 0, i;

    for (i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-V") == 0 && i + 1 < argc) {
            vs = argv[++i];
        } else if (strcmp(argv[i], "-n") == 0 && i + 1 < argc) {
            reps = atoi(argv[++i]);
        } else if (strcmp(argv[i], "--flat") == 0) {
            flat = 1;
        } else {
            fprintf(stderr, "usage: llm-samplebench [-V N[,N...]] [-n REPS] "
                    "[--flat]\n");
            return 2;
        }
    }
    if (reps < 1) {
        reps = 1;
    }
    printf("| vocabulary | setting | us per token |\n| ---: | --- | ---: |\n");
    for (const char *p = vs; *p; ) {
        uint32_t              V = (uint32_t) strtoul(p, NULL, 10);
        llm_sampler_t        *s;
        llm_sample_params_t   sp;
        llm_sample_result_t   res;
        llm_rng_t             r, g;
        float                *l, *w;
        const char           *c = strchr(p, ',');

        p = c ? c + 1 : p + strlen(p);
        if (V == 0 || llm_sampler_create(&s, V) != 0) {
            fprintf(stderr, "llm-samplebench: bad vocabulary size or out of "
                    "memory\n");
            return 1;
        }
        l = malloc(V * sizeof(float));
        w = malloc(V * sizeof(float));
        if (l == NULL || w == NULL) {
            fprintf(stderr, "llm-samplebench: out of memory\n");
            return 1;
        }
        llm_rng_seed(&g, 1);
        for (uint32_t k = 0; k < V; k++) {
            l[k] = (float) (llm_rng_uniform(&g) * 10.0 - 5.0)
                   + (!flat && k % 64 == 0 ? 8.0f : 0.0f);
        }
        for (size_t k = 0; k < sizeof(sb_cases) / sizeof(sb_cases[0]); k++) {
            const sb_case_t  *sc = &sb_cases[k];
            double            t0, t1, t2;
            long              sink = 0;

            memset(&sp, 0, sizeof(sp));
            sp.temperature = sc->temperature;
            sp.top_k = sc->top_k;
            sp.top_p = sc->top_p;
            sp.min_p = sc->min_p;
            sp.top_logprobs = sc->top_logprobs;
            sp.logprobs = sc->top_logprobs > 0;
            llm_rng_seed(&r, 7);
            t0 = now_us();
            for (i = 0; i < reps; i++) {
                memcpy(w, l, V * sizeof(float));
                sink += llm_sample(s, &sp, w, NULL, 0, 0, &r, &res);
            }
            t1 = now_us();
            for (i = 0; i < reps; i++) {
                memcpy(w, l, V * sizeof(float));
                sink += w[i % V] > 0.0f;
            }
            t2 = now_us();
            printf("| %u | %s | %.1f |\n", V, sc->name,
                   ((t1 - t0) - (t2 - t1)) / reps + 0.0 * (double) sink);
        }
        llm_sampler_free(s);
        free(l);
        free(w);
    }
    return 0;
}
