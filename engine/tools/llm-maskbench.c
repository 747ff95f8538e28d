/*
 * llm-maskbench: the cost of constrained decoding's logits mask on a
 * vocabulary, step by step.
 *
 *   llm-maskbench -m FILE [--schema JSON | --json-object] [--repeat N]
 *                 < document.json
 *
 * Builds the token index of the vocabulary of FILE (a model or
 * vocabulary-only GGUF), compiles the schema, tokenizes the document
 * (which must be valid under the schema) and replays it token by token:
 * before each token the mask is computed on a fresh logits row and timed,
 * then the token is accepted.  Prints the index build time and the mask
 * time per step (mean, p50, p95, max), split into steps inside a plain
 * string body (the precomputed fast path) and the others (trie walks),
 * and the slowest step (after the first pass) with the text before it.
 */

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "model/gguf.h"
#include "decode/grammar.h"
#include "text/tokenizer.h"
#include "readfile.h"

static double
now_us(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static int
cmp_d(const void *a, const void *b)
{
    double x = *(const double *) a, y = *(const double *) b;

    return x < y ? -1 : x > y;
}

static void
usage(FILE *f)
{
    fprintf(f,
        "usage: llm-maskbench -m FILE [--schema JSON | --json-object] "
        "[--repeat N] < document.json\n");
}

typedef struct {
    double  *t;
    size_t   n;
} series_t;

static void
report(const char *name, series_t *s)
{
    double sum = 0;

    if (s->n == 0) {
        printf("%-14s %6s\n", name, "0");
        return;
    }
    qsort(s->t, s->n, sizeof(double), cmp_d);
    for (size_t i = 0; i < s->n; i++) {
        sum += s->t[i];
    }
    printf("%-14s %6zu %9.1f %9.1f %9.1f %9.1f\n", name, s->n, sum / s->n,
           s->t[s->n / 2], s->t[(size_t) (s->n * 0.95)], s->t[s->n - 1]);
}

int
main(int argc, char **argv)
{
    const char      *path = NULL, *schema = NULL;
    int              json_object = 0, repeat = 3;
    llm_gguf_t      *gg;
    llm_vocab_t     *v;
    llm_tokindex_t  *ti;
    llm_grammar_t   *g;
    llm_gstate_t    *st;
    llm_tokens_t     toks = {0};
    json_t          *sj = NULL;
    json_error_t     je;
    char             err[512], *doc;
    size_t           len = 0;
    float           *row;
    double           t0, t1, build_ms;
    series_t         fast = {0}, walk = {0};
    uint32_t         nv;
    double           worst = 0;
    size_t           worst_at = 0;

    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-m") == 0 && i + 1 < argc) {
            path = argv[++i];
        } else if (strcmp(argv[i], "--schema") == 0 && i + 1 < argc) {
            schema = argv[++i];
        } else if (strcmp(argv[i], "--json-object") == 0) {
            json_object = 1;
        } else if (strcmp(argv[i], "--repeat") == 0 && i + 1 < argc) {
            repeat = atoi(argv[++i]);
        } else if (strcmp(argv[i], "--help") == 0) {
            usage(stdout);
            return 0;
        } else {
            usage(stderr);
            return 2;
        }
    }
    if (path == NULL || (schema == NULL && !json_object) || repeat < 1) {
        usage(stderr);
        return 2;
    }
    doc = llm_read_stream(stdin, &len);
    if (doc == NULL) {
        fprintf(stderr, "llm-maskbench: reading stdin: %s\n",
                strerror(errno));
        return 1;
    }
    while (len > 0 && (doc[len - 1] == '\n' || doc[len - 1] == ' ')) {
        len--;
    }
    if (llm_gguf_open(&gg, path, err, sizeof(err)) < 0
        || llm_vocab_load(&v, gg, err, sizeof(err)) < 0)
    {
        fprintf(stderr, "llm-maskbench: %s: %s\n", path, err);
        return 1;
    }
    nv = llm_vocab_n_tokens(v);
    t0 = now_us();
    if (llm_tokindex_create(&ti, v, err, sizeof(err)) != 0) {
        fprintf(stderr, "llm-maskbench: %s\n", err);
        return 1;
    }
    build_ms = (now_us() - t0) / 1e3;
    if (schema) {
        sj = json_loads(schema, 0, &je);
        if (sj == NULL) {
            fprintf(stderr, "llm-maskbench: --schema: %s\n", je.text);
            return 1;
        }
    }
    if (llm_grammar_compile(&g, sj, 0, err, sizeof(err)) != 0
        || llm_gstate_create(&st, g) != 0)
    {
        fprintf(stderr, "llm-maskbench: schema: %s\n", err);
        return 1;
    }
    if (llm_tokenize(v, doc, len, 0, &toks, err, sizeof(err)) != 0) {
        fprintf(stderr, "llm-maskbench: tokenize: %s\n", err);
        return 1;
    }
    row = malloc(nv * sizeof(float));
    fast.t = malloc((toks.n + 1) * repeat * sizeof(double));
    walk.t = malloc((toks.n + 1) * repeat * sizeof(double));
    if (row == NULL || fast.t == NULL || walk.t == NULL) {
        fprintf(stderr, "llm-maskbench: out of memory\n");
        return 1;
    }

    for (int r = 0; r < repeat; r++) {
        llm_gstate_reset(st);
        for (size_t i = 0; i <= toks.n; i++) {
            int32_t  tok = i < toks.n ? toks.ids[i] : llm_vocab_eos(v);
            uint8_t  nb[256];
            int      in_str, n;

            /* a plain string body accepts 'a' and leaves the state as is:
             * the fast path's condition, seen from outside */
            in_str = llm_gstate_next_bytes(st, nb, sizeof(nb)) > 120;
            for (uint32_t j = 0; j < nv; j++) {
                row[j] = 0.0f;
            }
            t0 = now_us();
            n = llm_tokindex_mask(ti, st, LLM_GMASK_EOG, row, nv);
            t1 = now_us();
            if (n <= 0 || row[tok] != 0.0f) {
                fprintf(stderr, "llm-maskbench: token %zu (%d) is masked: "
                        "the document does not fit the schema\n", i, tok);
                return 1;
            }
            if (t1 - t0 > worst && r > 0) {
                worst = t1 - t0;
                worst_at = i;
            }
            if (in_str) {
                fast.t[fast.n++] = t1 - t0;
            } else {
                walk.t[walk.n++] = t1 - t0;
            }
            if (llm_tokindex_accept(ti, st, tok) != 0) {
                fprintf(stderr, "llm-maskbench: accept %d failed\n", tok);
                return 1;
            }
        }
    }

    printf("vocabulary     %s: %u tokens, index built in %.1f ms\n", path,
           nv, build_ms);
    printf("document       %zu bytes, %zu tokens (+ EOS), %d passes\n", len,
           toks.n, repeat);
    printf("%-14s %6s %9s %9s %9s %9s   (microseconds per mask)\n", "steps",
           "n", "mean", "p50", "p95", "max");
    report("string body", &fast);
    report("other", &walk);
    {
        series_t all = { malloc((fast.n + walk.n) * sizeof(double)), 0 };

        if (all.t) {
            memcpy(all.t, fast.t, fast.n * sizeof(double));
            memcpy(all.t + fast.n, walk.t, walk.n * sizeof(double));
            all.n = fast.n + walk.n;
            report("all", &all);
            free(all.t);
        }
    }
    {
        size_t  off = 0, l;

        for (size_t i = 0; i < worst_at && i < toks.n; i++) {
            llm_token_bytes(v, toks.ids[i], 0, &l);
            off += l;
        }
        printf("slowest step after the first pass: %.1f us, after \"...%.*s\"\n",
               worst, (int) (off < 40 ? off : 40),
               doc + (off < 40 ? 0 : off - 40));
    }
    free(row);
    free(fast.t);
    free(walk.t);
    free(doc);
    llm_tokens_free(&toks);
    llm_gstate_free(st);
    llm_grammar_free(g);
    json_decref(sj);
    llm_tokindex_free(ti);
    llm_vocab_free(v);
    llm_gguf_close(gg);
    return 0;
}
