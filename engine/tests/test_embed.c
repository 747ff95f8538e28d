/*
 * Embeddings (serve/embed.c) on llm-mkmodel's tiny-embed model: each
 * pooling equals the same arithmetic done here on llm_forward_hidden's
 * rows of the whole input in one call; a batch, an input spanning several
 * forward calls and inputs split into several KV groups give the bits of
 * each input alone; Matryoshka truncation is the renormalized prefix;
 * every refusal is -EINVAL with the field; a set cancel flag stops it.
 */

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mkmodel.h"
#include "model/model.h"
#include "serve/embed.h"
#include "testkit.h"

#define N_EMBD   128
#define BIG      96     /* tokens one reference call holds */

typedef struct {
    llm_model_t  *m;
    llm_kv_t     *kv;
    llm_ctx_t    *small;    /* 32 tokens per call: inputs span calls */
    llm_ctx_t    *big;      /* BIG tokens: the reference, one call */
} env_t;

static int
fwd(void *ud, const llm_batch_t *b, float *out, char *err, size_t errlen)
{
    return llm_forward_hidden(ud, b, out, err, errlen);
}

static llm_embed_conf_t
conf(env_t *e, llm_pooling_t pool, uint32_t step)
{
    llm_embed_conf_t c;

    memset(&c, 0, sizeof(c));
    c.forward = fwd;
    c.forward_ud = step == 32 ? e->small : e->big;
    c.n_embd = N_EMBD;
    c.n_vocab = llm_model_hparams(e->m)->n_vocab;
    c.n_ctx = BIG;
    c.step_tokens = step;
    c.n_blocks = llm_kv_n_blocks(e->kv);
    c.block_tokens = llm_kv_block_tokens(e->kv);
    c.max_inputs = 8;
    c.max_total = 1000;
    c.pooling = pool;
    return c;
}

/* n deterministic token ids from seed. */
static llm_tokens_t
input(uint32_t n, uint64_t seed)
{
    llm_tokens_t t = { NULL, 0, 0 };
    uint32_t     i;

    for (i = 0; i < n; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        llm_tokens_push(&t, (int32_t) ((seed >> 33) % 1000));
    }
    return t;
}

/*
 * The reference: every row of the input in one llm_forward_hidden call,
 * pooled and normalized as embed.h says (sums and norm in double).
 */
static int
reference(env_t *e, const llm_tokens_t *in, llm_pooling_t pool, float *out)
{
    static float     rows[BIG * N_EMBD];
    int32_t          pos[BIG], seq[BIG];
    uint8_t          want[BIG];
    uint32_t         blocks[BIG], i, d;
    double           acc[N_EMBD], ss = 0.0, div;
    llm_seq_view_t   v;
    llm_batch_t      b;
    char             err[256];

    for (i = 0; i < in->n; i++) {
        pos[i] = (int32_t) i;
        seq[i] = 0;
        want[i] = 1;
        blocks[i] = i;
    }
    v.blocks = blocks;
    v.n_blocks = (uint32_t) (in->n + 15) / 16;
    memset(&b, 0, sizeof(b));
    b.n_tokens = (uint32_t) in->n;
    b.tokens = in->ids;
    b.pos = pos;
    b.seq = seq;
    b.logits = want;
    b.n_seqs = 1;
    b.seqs = &v;
    if (llm_forward_hidden(e->big, &b, rows, err, sizeof(err)) != 0) {
        tk_note("reference: %s\n", err);
        return -1;
    }
    for (d = 0; d < N_EMBD; d++) {
        acc[d] = 0.0;
        if (pool == LLM_POOL_MEAN) {
            for (i = 0; i < in->n; i++) {
                acc[d] += rows[(size_t) i * N_EMBD + d];
            }
        } else {
            i = pool == LLM_POOL_CLS ? 0 : (uint32_t) in->n - 1;
            acc[d] = rows[(size_t) i * N_EMBD + d];
        }
    }
    div = pool == LLM_POOL_MEAN ? (double) in->n : 1.0;
    for (d = 0; d < N_EMBD; d++) {
        ss += (acc[d] / div) * (acc[d] / div);
    }
    ss = 1.0 / sqrt(ss);
    for (d = 0; d < N_EMBD; d++) {
        out[d] = (float) (acc[d] / div * ss);
    }
    return 0;
}

static void
test_pooling(env_t *e, llm_pooling_t pool)
{
    llm_tokens_t      in = input(70, 7 + pool);
    llm_embed_conf_t  c = conf(e, pool, 32);
    float             ref[N_EMBD], got[N_EMBD];
    const char       *param;
    char              err[256];
    double            n2 = 0.0;
    int               i;

    REQUIRE(reference(e, &in, pool, ref) == 0, "reference");
    /* 70 tokens, 32 per call: three forward calls */
    REQUIRE(llm_embed_run(&c, &in, 1, 0, NULL, got, &param, err,
                          sizeof(err)) == 0, "%s", err);
    CHECK(memcmp(ref, got, sizeof(ref)) == 0,
          "%s: over three calls, the bits of one call", llm_pooling_name(pool));
    for (i = 0; i < N_EMBD; i++) {
        n2 += (double) got[i] * got[i];
    }
    CHECK(fabs(n2 - 1.0) < 1e-6, "unit length: |v|^2 = %.9f", n2);
    llm_tokens_free(&in);
}

static void
test_batch(env_t *e)
{
    llm_tokens_t      in[5];
    llm_embed_conf_t  c = conf(e, LLM_POOL_MEAN, 32), g;
    static float      all[5 * N_EMBD], grouped[5 * N_EMBD];
    float             one[N_EMBD];
    const char       *param;
    char              err[256];
    uint32_t          lens[5] = { 3, 40, 1, 90, 17 }, i;

    for (i = 0; i < 5; i++) {
        in[i] = input(lens[i], 100 + i);
    }
    REQUIRE(llm_embed_run(&c, in, 5, 0, NULL, all, &param, err,
                          sizeof(err)) == 0, "%s", err);
    for (i = 0; i < 5; i++) {
        REQUIRE(llm_embed_run(&c, &in[i], 1, 0, NULL, one, &param, err,
                              sizeof(err)) == 0, "%s", err);
        CHECK(memcmp(one, all + i * N_EMBD, sizeof(one)) == 0,
              "input %u in the batch: the bits of it alone", i);
    }
    /* a cache of 8 blocks (128 tokens): the inputs in several groups */
    g = c;
    g.n_blocks = 8;
    REQUIRE(llm_embed_run(&g, in, 5, 0, NULL, grouped, &param, err,
                          sizeof(err)) == 0, "%s", err);
    CHECK(memcmp(grouped, all, sizeof(all)) == 0,
          "in KV groups: the same bits");
    for (i = 0; i < 5; i++) {
        llm_tokens_free(&in[i]);
    }
}

static void
test_truncate(env_t *e)
{
    llm_tokens_t      in = input(12, 5);
    llm_embed_conf_t  c = conf(e, LLM_POOL_LAST, 32);
    float             full[N_EMBD], cut[16];
    const char       *param;
    char              err[256];
    double            n2 = 0.0;
    int               i, bad = 0;

    c.truncate = 1;
    REQUIRE(llm_embed_run(&c, &in, 1, 0, NULL, full, &param, err,
                          sizeof(err)) == 0, "%s", err);
    REQUIRE(llm_embed_run(&c, &in, 1, 16, NULL, cut, &param, err,
                          sizeof(err)) == 0, "%s", err);
    for (i = 0; i < 16; i++) {
        n2 += (double) full[i] * full[i];
    }
    for (i = 0; i < 16; i++) {
        bad += fabs(cut[i] - full[i] / sqrt(n2)) > 1e-6;
    }
    CHECK(bad == 0, "16 dimensions: the renormalized prefix (%d off)", bad);
    llm_tokens_free(&in);
}

static void
refused(env_t *e, llm_embed_conf_t *c, llm_tokens_t *in, uint32_t n,
    uint32_t dims, const char *want_param, const char *what)
{
    static float  out[9 * N_EMBD];
    const char   *param = NULL;
    char          err[256] = "";
    int           rc;

    (void) e;
    rc = llm_embed_run(c, in, n, dims, NULL, out, &param, err,
                       sizeof(err));
    CHECK(rc == -EINVAL && param != NULL && strcmp(param, want_param) == 0
          && err[0] != '\0', "%s: rc %d, param %s, '%s'", what, rc,
          param ? param : "(null)", err);
    tk_note("%s: %s\n", what, err);
}

static void
test_errors(env_t *e)
{
    llm_embed_conf_t  c = conf(e, LLM_POOL_MEAN, 32);
    llm_tokens_t      in[9], empty = { NULL, 0, 0 }, big = input(BIG + 1, 3);
    llm_tokens_t      bad = input(4, 4);
    uint32_t          i;

    for (i = 0; i < 9; i++) {
        in[i] = input(2, i);
    }
    bad.ids[2] = 1000;
    refused(e, &c, in, 0, 0, "input", "no inputs");
    refused(e, &c, in, 9, 0, "input", "9 inputs, max 8");
    refused(e, &c, &empty, 1, 0, "input", "an empty input");
    refused(e, &c, &big, 1, 0, "input", "an input over n_ctx");
    refused(e, &c, &bad, 1, 0, "input", "a token id out of the vocabulary");
    refused(e, &c, in, 1, 64, "dimensions", "dimensions without truncate");
    c.truncate = 1;
    refused(e, &c, in, 1, N_EMBD + 1, "dimensions", "dimensions > n_embd");
    c.max_total = 10;
    refused(e, &c, in, 6, 0, "input", "12 tokens, max_total 10");
    for (i = 0; i < 9; i++) {
        llm_tokens_free(&in[i]);
    }
    llm_tokens_free(&big);
    llm_tokens_free(&bad);
}

/* A set cancel flag stops before the first forward call. */
static void
test_cancel(env_t *e)
{
    llm_tokens_t      in = input(40, 9);
    llm_embed_conf_t  c = conf(e, LLM_POOL_MEAN, 32);
    float             out[N_EMBD];
    const char       *param;
    char              err[256] = "";
    atomic_int        stop;
    int               rc;

    atomic_init(&stop, 1);
    rc = llm_embed_run(&c, &in, 1, 0, &stop, out, &param, err, sizeof(err));
    CHECK(rc == -ECANCELED, "rc %d (%s)", rc, err);
    atomic_store(&stop, 0);
    rc = llm_embed_run(&c, &in, 1, 0, &stop, out, &param, err, sizeof(err));
    CHECK(rc == 0, "not set: rc %d (%s)", rc, err);
    llm_tokens_free(&in);
}

int
main(void)
{
    llm_mkmodel_params_t  p;
    env_t                 e;
    char                  err[512], path[512];

    memset(&e, 0, sizeof(e));
    snprintf(path, sizeof(path), "%s/e.gguf", tk_tmpdir("test_embed"));
    if (llm_mkmodel_preset(&p, "tiny-embed", err, sizeof(err)) != 0
        || llm_mkmodel_write(&p, path, NULL, err, sizeof(err)) != 0
        || llm_model_load(&e.m, path, NULL, err, sizeof(err)) != 0
        || llm_kv_create(&e.kv, e.m, 64, 16, LLM_TYPE_F16, err,
                         sizeof(err)) != 0
        || llm_ctx_create(&e.small, e.m, e.kv, 2, 32, err, sizeof(err)) != 0
        || llm_ctx_create(&e.big, e.m, e.kv, 2, BIG, err, sizeof(err)) != 0)
    {
        tk_fatal("setup: %s", err);
    }

    tk_begin("mean pooling: the reference's bits, across calls");
    test_pooling(&e, LLM_POOL_MEAN);
    tk_begin("cls pooling: the reference's bits, across calls");
    test_pooling(&e, LLM_POOL_CLS);
    tk_begin("last pooling: the reference's bits, across calls");
    test_pooling(&e, LLM_POOL_LAST);
    tk_begin("a batch and KV groups: each input's bits alone");
    test_batch(&e);
    tk_begin("Matryoshka truncation: the renormalized prefix");
    test_truncate(&e);
    tk_begin("refusals: -EINVAL with the field");
    test_errors(&e);
    tk_begin("a set cancel flag: -ECANCELED, nothing computed");
    test_cancel(&e);

    llm_ctx_free(e.small);
    llm_ctx_free(e.big);
    llm_kv_free(e.kv);
    llm_model_free(e.m);
    return tk_done();
}
