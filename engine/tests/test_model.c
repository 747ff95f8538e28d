/*
 * Model binding errors and batch validation.  Each case rewrites a copy of
 * a small real model (engine/tests/data/reference/ref-qwen3moe-q4_0.gguf)
 * with one thing wrong, and checks that llm_model_load fails with a
 * one-line message naming the key or tensor and what was expected.  Then
 * bad batches: llm_forward must refuse them with -EINVAL and a message.
 */

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/quant.h"
#include "model/gguf.h"
#include "model/model.h"
#include "testkit.h"

#define SRC "engine/tests/data/reference/ref-qwen3moe-q4_0.gguf"

typedef enum {
    EDIT_ARCH,          /* general.architecture = "gpt9" */
    EDIT_DROP_KEY,      /* drop a key */
    EDIT_DROP_TENSOR,   /* drop a tensor */
    EDIT_SHAPE,         /* halve a tensor's rows */
    EDIT_TYPE,          /* declare a tensor of type `value` (zeros) */
    EDIT_U32            /* set a u32 key */
} edit_kind_t;

typedef struct {
    const char   *label;
    edit_kind_t   kind;
    const char   *name;         /* key or tensor */
    uint32_t      value;
    const char   *expect[3];    /* substrings of the error */
} edit_t;

static const edit_t edits[] = {
    { "unknown architecture", EDIT_ARCH, "general.architecture", 0,
      { "unknown architecture 'gpt9'", "general.architecture", NULL } },
    { "missing key", EDIT_DROP_KEY, "qwen3moe.block_count", 0,
      { "missing metadata key 'qwen3moe.block_count'", NULL, NULL } },
    { "missing rms eps", EDIT_DROP_KEY,
      "qwen3moe.attention.layer_norm_rms_epsilon", 0,
      { "missing metadata key", "layer_norm_rms_epsilon", NULL } },
    { "missing expert count", EDIT_DROP_KEY, "qwen3moe.expert_count", 0,
      { "qwen3moe.expert_count", "MoE", NULL } },
    { "missing tensor", EDIT_DROP_TENSOR, "blk.1.attn_q.weight", 0,
      { "missing tensor 'blk.1.attn_q.weight'", NULL, NULL } },
    { "missing experts", EDIT_DROP_TENSOR, "blk.0.ffn_up_exps.weight", 0,
      { "missing tensor 'blk.0.ffn_up_exps.weight'", NULL, NULL } },
    { "wrong shape", EDIT_SHAPE, "blk.0.attn_q.weight", 0,
      { "tensor 'blk.0.attn_q.weight' has shape [256, 128]",
        "expected [256, 256] (n_embd, n_head*head_dim)", NULL } },
    { "wrong expert shape", EDIT_SHAPE, "blk.1.ffn_down_exps.weight", 0,
      { "tensor 'blk.1.ffn_down_exps.weight' has shape",
        "(n_ff_exp, n_embd, n_expert)", NULL } },
    { "activation type as a weight", EDIT_TYPE, "blk.0.attn_k.weight",
      LLM_TYPE_Q8_1,
      { "tensor 'blk.0.attn_k.weight' has type Q8_1 (9)",
        "which this engine does not run yet; it runs F32, F16, BF16, Q4_0",
        NULL } },
    /* types the engine does not run (yet): named, never "?" */
    { "refused TQ2_0", EDIT_TYPE, "blk.0.attn_q.weight", 35,
      { "tensor 'blk.0.attn_q.weight' has type TQ2_0 (35), which this "
        "engine does not run yet; it runs ", NULL, NULL } },
    { "refused TQ1_0", EDIT_TYPE, "blk.1.attn_output.weight", 34,
      { "tensor 'blk.1.attn_output.weight' has type TQ1_0 (34), which this "
        "engine does not run yet; it runs ", NULL, NULL } },
    { "heads not multiple", EDIT_U32, "qwen3moe.attention.head_count_kv", 3,
      { "head_count_kv 3", "multiple", NULL } },
    { "too many used experts", EDIT_U32, "qwen3moe.expert_used_count", 9,
      { "expert_used_count is 9", NULL, NULL } },
    { "zero layers", EDIT_U32, "qwen3moe.block_count", 0,
      { "block_count is 0", NULL, NULL } },
};

static int
key_is(const llm_gguf_kv_t *kv, const char *name)
{
    return kv->key.len == strlen(name)
           && memcmp(kv->key.ptr, name, kv->key.len) == 0;
}

/* Write dst = src with edit e applied. */
static int
write_edited(const edit_t *e, const char *dst, char *err, size_t errlen)
{
    llm_gguf_t               *g = NULL;
    llm_gguf_writer_t        *w = NULL;
    const llm_gguf_kv_t      *kv;
    const llm_gguf_tensor_t  *t;
    int64_t                   ne[LLM_GGUF_MAX_DIMS];
    uint64_t                  i;
    size_t                    nb;
    void                     *zero;
    int                       rc = 0, hit;

    if ((rc = llm_gguf_open(&g, SRC, err, errlen)) < 0) {
        return rc;
    }
    if ((rc = llm_gguf_writer_open(&w, dst, err, errlen)) < 0) {
        llm_gguf_close(g);
        return rc;
    }
    for (i = 0; i < llm_gguf_n_kv(g) && rc == 0; i++) {
        kv = llm_gguf_kv_at(g, i);
        if (!key_is(kv, e->name)) {
            rc = llm_gguf_w_copy_kv(w, kv);
        } else if (e->kind == EDIT_ARCH) {
            rc = llm_gguf_w_str(w, e->name, "gpt9", 4);
        } else if (e->kind == EDIT_U32) {
            rc = llm_gguf_w_u32(w, e->name, e->value);
        }
    }
    for (i = 0; i < llm_gguf_n_tensors(g) && rc == 0; i++) {
        t = llm_gguf_tensor_at(g, i);
        hit = strcmp(t->name, e->name) == 0;
        memcpy(ne, t->ne, sizeof(ne));
        if (hit && e->kind == EDIT_DROP_TENSOR) {
            continue;
        }
        if (hit && e->kind == EDIT_SHAPE) {
            ne[1] /= 2;
        }
        rc = llm_gguf_w_tensor(w, t->name, t->n_dims, ne,
                               hit && e->kind == EDIT_TYPE ? e->value
                                                           : t->type);
    }
    if (rc == 0) {
        rc = llm_gguf_w_begin_data(w);
    }
    for (i = 0; i < llm_gguf_n_tensors(g) && rc == 0; i++) {
        t = llm_gguf_tensor_at(g, i);
        hit = strcmp(t->name, e->name) == 0;
        if (hit && e->kind == EDIT_DROP_TENSOR) {
            continue;
        }
        nb = t->nbytes;
        if (hit && e->kind == EDIT_SHAPE) {
            nb = t->nbytes / 2;
        }
        if (hit && e->kind == EDIT_TYPE) {
            nb = llm_gguf_row_bytes(e->value, t->ne[0]) * t->ne[1];
            zero = calloc(1, nb);
            rc = llm_gguf_w_data(w, zero, nb);
            free(zero);
            continue;
        }
        rc = llm_gguf_w_data(w, t->data, nb);
    }
    if (rc == 0) {
        rc = llm_gguf_writer_close(w, err, errlen);
    } else {
        llm_gguf_writer_abort(w);
        snprintf(err, errlen, "writing %s failed (%d)", dst, rc);
    }
    llm_gguf_close(g);
    return rc;
}

static void
check_batches(void)
{
    llm_model_t    *m = NULL;
    llm_kv_t       *kv = NULL;
    llm_ctx_t      *c = NULL;
    int32_t         tok[2] = { 1, 2 }, pos[2] = { 0, 1 }, seq[2] = { 0, 0 };
    uint8_t         want[2] = { 1, 1 };
    uint32_t        blocks[1] = { 0 };
    llm_seq_view_t  sv = { blocks, 1, NULL, 0, 0 };
    llm_batch_t     b = { 2, tok, pos, seq, want, 1, &sv };
    float          *out;
    char            err[512];
    int             rc;

    if (llm_model_load(&m, SRC, NULL, err, sizeof(err)) < 0
        || llm_kv_create(&kv, m, 2, 16, LLM_TYPE_F32, err, sizeof(err)) < 0
        || llm_ctx_create(&c, m, kv, 2, 2, err, sizeof(err)) < 0)
    {
        tk_begin("batches");
        tk_fail("setup: %s", err);
        return;
    }
    out = malloc(2 * 512 * sizeof(float));

#define BAD(label, stmt, undo, sub)                                          \
    do {                                                                     \
        stmt;                                                                \
        err[0] = '\0';                                                       \
        rc = llm_forward(c, &b, out, err, sizeof(err));                      \
        undo;                                                                \
        tk_begin("batch %s (%s)", label, err);                               \
        CHECK(rc == -EINVAL && strstr(err, sub) != NULL, "rc %d, '%s'", rc,  \
              err);                                                          \
    } while (0)

    BAD("token out of range", tok[1] = 512, tok[1] = 2, "id 512");
    BAD("negative token", tok[0] = -1, tok[0] = 1, "id -1");
    BAD("position past blocks", pos[1] = 16, pos[1] = 1, "position 16");
    BAD("bad sequence", seq[1] = 1, seq[1] = 0, "sequence 1");
    BAD("block out of cache", blocks[0] = 2, blocks[0] = 0, "block 0 is 2");
    BAD("too many tokens", b.n_tokens = 3, b.n_tokens = 2, "3 tokens");
    BAD("empty batch", b.n_tokens = 0, b.n_tokens = 2, "0 tokens");
#undef BAD

    rc = llm_forward(c, &b, out, err, sizeof(err));
    tk_begin("batch good after bad ones");
    CHECK(rc == 0, "%s", err);
    free(out);
    llm_ctx_free(c);
    llm_kv_free(kv);
    llm_model_free(m);
}

int
main(void)
{
    const char             *dst;
    const llm_type_info_t  *ti;
    char                    path[160], err[512], runs[256];
    llm_model_t            *m;
    size_t                  i;
    int                     rc, k, ok;

    if (access(SRC, R_OK) != 0) {
        tk_fatal("%s missing (run from the repo root)", SRC);
    }
    dst = tk_tmpdir("test_model");
    llm_type_list_supported(runs, sizeof(runs));
    for (i = 0; i < sizeof(edits) / sizeof(edits[0]); i++) {
        ti = llm_type_info(edits[i].value);
        if (edits[i].kind == EDIT_TYPE && ti != NULL && ti->supported) {
            tk_skip(edits[i].label, "%s runs now: pick another type",
                    ti->name);
            continue;
        }
        snprintf(path, sizeof(path), "%s/m.gguf", dst);
        if (write_edited(&edits[i], path, err, sizeof(err)) < 0) {
            tk_begin("%s", edits[i].label);
            tk_fail("cannot write the copy: %s", err);
            continue;
        }
        m = NULL;
        err[0] = '\0';
        rc = llm_model_load(&m, path, NULL, err, sizeof(err));
        ok = rc < 0 && m == NULL && strchr(err, '\n') == NULL
             && strstr(err, path) != NULL;
        for (k = 0; k < 3 && edits[i].expect[k]; k++) {
            ok = ok && strstr(err, edits[i].expect[k]) != NULL;
        }
        /* a refusal ends with the list the type table makes */
        if (edits[i].kind == EDIT_TYPE) {
            ok = ok && strlen(err) >= strlen(runs)
                 && strcmp(err + strlen(err) - strlen(runs), runs) == 0;
        }
        tk_begin("%s (%s)", edits[i].label, err);
        CHECK(ok);
        llm_model_free(m);
        unlink(path);
    }

    check_batches();
    return tk_done();
}
