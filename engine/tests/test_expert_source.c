/*
 * The expert-source hook (for streamed experts): a source that copies each
 * acquired expert out of the file into its own buffers and poisons them on
 * release must give bitwise the same logits as reading the mapping; every
 * acquire is matched by a release, prefetch hints name valid experts, and
 * a failing acquire fails llm_forward with the source's message.
 */

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h"
#include "testkit.h"
#include "onepass.h"

#define N_TOK 24

typedef struct {
    const llm_model_t  *m;
    const uint8_t      *file;
    void               *buf[64][3];
    int                 held;
    int                 acquires, releases, prefetches, bad_hint;
    int                 fail;
} src_t;

static int
src_acquire(void *ud, uint32_t layer, const uint32_t *ex, uint32_t n,
    llm_expert_ptrs_t *ptrs, char *err, size_t errlen)
{
    src_t               *s = ud;
    llm_expert_slices_t  sl;
    uint32_t             i;
    int                  k;

    if (s->fail) {
        snprintf(err, errlen, "expert source: read of layer %u failed",
                 layer);
        return -EIO;
    }
    s->acquires++;
    for (i = 0; i < n; i++) {
        if (llm_model_expert_slices(s->m, layer, ex[i], &sl) < 0) {
            return -EINVAL;
        }
        for (k = 0; k < 3; k++) {
            s->buf[i][k] = malloc(sl.bytes[k]);
            memcpy(s->buf[i][k], s->file + sl.offset[k], sl.bytes[k]);
        }
        ptrs[i].gate = s->buf[i][0];
        ptrs[i].up = s->buf[i][1];
        ptrs[i].down = s->buf[i][2];
    }
    s->held = (int) n;
    return 0;
}

static void
src_release(void *ud, uint32_t layer, const uint32_t *ex, uint32_t n)
{
    src_t    *s = ud;
    int       i, k;

    (void) layer;
    (void) ex;
    s->releases++;
    for (i = 0; i < (int) n && i < s->held; i++) {
        for (k = 0; k < 3; k++) {
            free(s->buf[i][k]);
        }
    }
    s->held = 0;
}

static void
src_prefetch(void *ud, uint32_t layer, const uint32_t *ex, uint32_t n)
{
    src_t    *s = ud;
    uint32_t  i;

    s->prefetches++;
    for (i = 0; i < n; i++) {
        if (ex[i] >= llm_model_hparams(s->m)->n_expert || layer == 0) {
            s->bad_hint++;
        }
    }
}

static int
run(llm_model_t *m, const llm_expert_source_t *xs, float *out, char *err,
    size_t errlen)
{
    llm_kv_t       *kv = NULL;
    llm_ctx_t      *c = NULL;
    int32_t         tok[N_TOK];
    uint32_t        blocks[2] = { 1, 0 }, i;
    int             rc;

    rc = llm_kv_create(&kv, m, 2, 16, LLM_TYPE_F32, err, errlen);
    if (rc == 0) {
        rc = llm_ctx_create(&c, m, kv, 2, N_TOK, err, errlen);
    }
    if (rc == 0) {
        llm_ctx_set_expert_source(c, xs);
        for (i = 0; i < N_TOK; i++) {
            tok[i] = (int32_t) ((i * 53 + 7) % 512);
        }
        rc = llm_onepass(c, tok, N_TOK, blocks, 2, out, err, errlen);
    }
    llm_ctx_free(c);
    llm_kv_free(kv);
    return rc;
}

int
main(void)
{
    const char           *path = "engine/tests/data/reference/"
                                 "ref-qwen3moe-q4_0.gguf";
    llm_model_t          *m = NULL;
    llm_expert_source_t   xs;
    src_t                 s;
    float                *a, *b;
    size_t                n;
    char                  err[512];
    int                   rc;

    if (llm_model_load(&m, path, NULL, err, sizeof(err)) < 0) {
        tk_fatal("load: %s", err);
    }
    n = (size_t) N_TOK * llm_model_hparams(m)->n_vocab;
    a = malloc(n * sizeof(float));
    b = malloc(n * sizeof(float));

    memset(&s, 0, sizeof(s));
    s.m = m;
    s.file = llm_gguf_map(llm_model_gguf(m));
    xs.ud = &s;
    xs.acquire = src_acquire;
    xs.release = src_release;
    xs.prefetch = src_prefetch;

    if (run(m, NULL, a, err, sizeof(err)) < 0
        || run(m, &xs, b, err, sizeof(err)) < 0)
    {
        tk_fatal("forward: %s", err);
    }
    tk_begin("logits with copied experts bitwise equal");
    CHECK(memcmp(a, b, n * sizeof(float)) == 0);
    tk_begin("acquire/release once per MoE layer (%d/%d)", s.acquires,
             s.releases);
    CHECK(s.acquires == (int) llm_model_hparams(m)->n_layer
          && s.releases == s.acquires);
    tk_begin("prefetch hints for the next layer (%d)", s.prefetches);
    CHECK(s.prefetches == (int) llm_model_hparams(m)->n_layer - 1
          && s.bad_hint == 0);

    s.fail = 1;
    rc = run(m, &xs, b, err, sizeof(err));
    tk_begin("failing acquire fails the forward pass (%s)", err);
    CHECK(rc == -EIO && strstr(err, "read of layer 0 failed") != NULL);

    free(a);
    free(b);
    llm_model_free(m);
    return tk_done();
}
