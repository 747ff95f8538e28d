/*
 * llm-logits: evaluate token ids as one prompt in one batch and write every
 * position's logits, float32 little-endian, n_tokens x n_vocab row-major.
 */

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h"
#include "onepass.h"

static void
usage(FILE *f)
{
    fprintf(f,
        "usage: llm-logits -m FILE -t ID,ID,... -o OUT.f32 [--threads N]\n"
        "                  [--kv-type f32|f16]\n"
        "Evaluates the token ids as one prompt (one batch) and writes every\n"
        "position's logits as float32 little-endian, n_tokens x n_vocab,\n"
        "row-major.\n");
}

static int
parse_ids(const char *s, int32_t **out, uint32_t *n)
{
    char     *end;
    long      v;
    uint32_t  cap = 64;
    int32_t  *ids = malloc(cap * sizeof(int32_t));

    *n = 0;
    if (ids == NULL) {
        return -1;
    }
    while (*s) {
        errno = 0;
        v = strtol(s, &end, 10);
        if (end == s || errno || v < 0 || v > INT32_MAX
            || (*end != ',' && *end != '\0'))
        {
            free(ids);
            return -1;
        }
        if (*n == cap) {
            int32_t *p = realloc(ids, (cap *= 2) * sizeof(int32_t));

            if (p == NULL) {
                free(ids);
                return -1;
            }
            ids = p;
        }
        ids[(*n)++] = (int32_t) v;
        s = *end ? end + 1 : end;
    }
    *out = ids;
    return *n > 0 ? 0 : -1;
}

int
main(int argc, char **argv)
{
    static const struct option opts[] = {
        { "model", required_argument, NULL, 'm' },
        { "tokens", required_argument, NULL, 't' },
        { "output", required_argument, NULL, 'o' },
        { "threads", required_argument, NULL, 'j' },
        { "kv-type", required_argument, NULL, 'k' },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 }
    };
    const char          *model = NULL, *toks = NULL, *outp = NULL;
    uint32_t             threads = 1, n = 0, i, bt = 16, nb;
    llm_type_t           kvt = LLM_TYPE_F32;
    llm_model_t         *m = NULL;
    llm_kv_t            *kv = NULL;
    llm_ctx_t           *c = NULL;
    const llm_hparams_t *hp;
    int32_t             *ids = NULL;
    uint32_t            *blocks = NULL;
    float               *logits = NULL;
    char                 err[512];
    FILE                *f;
    int                  ch, rc = 1;

    while ((ch = getopt_long(argc, argv, "m:t:o:h", opts, NULL)) != -1) {
        switch (ch) {
        case 'm': model = optarg; break;
        case 't': toks = optarg; break;
        case 'o': outp = optarg; break;
        case 'j': threads = (uint32_t) atoi(optarg); break;
        case 'k':
            if (strcmp(optarg, "f16") == 0) {
                kvt = LLM_TYPE_F16;
            } else if (strcmp(optarg, "f32") != 0) {
                fprintf(stderr, "llm-logits: --kv-type is f32 or f16\n");
                return 2;
            }
            break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (model == NULL || toks == NULL || outp == NULL || threads == 0) {
        usage(stderr);
        return 2;
    }
    if (parse_ids(toks, &ids, &n) < 0) {
        fprintf(stderr, "llm-logits: -t: expected comma-separated token ids"
                " (non-negative integers)\n");
        return 2;
    }

    if (llm_simd_note() != NULL) {
        fprintf(stderr, "llm-logits: %s\n", llm_simd_note());
    }
    if (llm_model_load(&m, model, NULL, err, sizeof(err)) < 0) {
        fprintf(stderr, "llm-logits: %s\n", err);
        goto done;
    }
    hp = llm_model_hparams(m);
    nb = (n + bt - 1) / bt;
    if (llm_kv_create(&kv, m, nb, bt, kvt, err, sizeof(err)) < 0
        || llm_ctx_create(&c, m, kv, threads, n, err, sizeof(err)) < 0)
    {
        fprintf(stderr, "llm-logits: %s\n", err);
        goto done;
    }

    blocks = malloc(nb * sizeof(uint32_t));
    logits = malloc((size_t) n * hp->n_vocab * sizeof(float));
    if (!blocks || !logits) {
        fprintf(stderr, "llm-logits: out of memory\n");
        goto done;
    }
    for (i = 0; i < nb; i++) {
        blocks[i] = i;
    }

    if (llm_onepass(c, ids, n, blocks, nb, logits, err, sizeof(err)) < 0) {
        fprintf(stderr, "llm-logits: %s\n", err);
        goto done;
    }

    f = fopen(outp, "wb");
    if (f == NULL) {
        fprintf(stderr, "llm-logits: %s: %s\n", outp, strerror(errno));
        goto done;
    }
    if (fwrite(logits, sizeof(float), (size_t) n * hp->n_vocab, f)
        != (size_t) n * hp->n_vocab || fclose(f) != 0)
    {
        fprintf(stderr, "llm-logits: %s: write failed\n", outp);
        goto done;
    }
    rc = 0;

done:
    llm_ctx_free(c);
    llm_kv_free(kv);
    llm_model_free(m);
    free(ids);
    free(blocks);
    free(logits);
    return rc;
}
