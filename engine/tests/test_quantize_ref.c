/*
 * llm-quantize against llama-quantize, byte for byte, on the shared
 * reference models ($LLM_SHARED/reference, README.md there): each f32
 * model quantized here to a type is compared with the file llama.cpp's
 * quantizer made from the same f32 model.
 *
 *  - every tensor's type must be the one llama.cpp chose (the mixes:
 *    Q3_K_M, Q4_K_M, MXFP4_MOE; the single types were made --pure), in
 *    the same order;
 *  - every tensor an importance matrix cannot have changed must have the
 *    same bytes: all of them in a file made without one; in a file made
 *    with one (it has quantize.imatrix.file; we do not have that matrix),
 *    the tensors llama-imatrix collects no data for (token_embd, output)
 *    and those of types that ignore it (Q8_0, MXFP4, floats).
 *
 * Skipped, saying why, when the reference directory is absent.  The copy
 * in engine/tests/data/quantize/ (rows of the qwen3moe files, see its
 * README) checks the same row by row without ../shared.
 */

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/quant.h"
#include "model/gguf.h"
#include "quantize.h"
#include "quantize_rows.h"
#include "testkit.h"

static const char *tmpdir;

typedef struct {
    const char  *model;         /* ref-<model>-f32.gguf */
    const char  *ref;           /* ref-<model>-<ref>.gguf */
    const char  *type;          /* llm-quantize TYPE */
    int          pure;
} qr_case_t;

static const qr_case_t cases[] = {
    { "qwen3moe",   "q4_0",      "Q4_0",      1 },
    { "qwen3moe",   "q4_1",      "Q4_1",      1 },
    { "qwen3moe",   "q5_0",      "Q5_0",      1 },
    { "qwen3moe",   "q5_1",      "Q5_1",      1 },
    { "qwen3moe",   "q8_0",      "Q8_0",      1 },
    { "qwen3moe",   "q2_k",      "Q2_K",      1 },
    { "qwen3moe",   "q4_k",      "Q4_K",      1 },
    { "qwen3moe",   "q5_k",      "Q5_K",      1 },
    { "qwen3moe",   "q6_k",      "Q6_K",      1 },
    { "qwen3moe",   "iq4_nl",    "IQ4_NL",    1 },
    { "qwen3moe",   "iq4_xs",    "IQ4_XS",    1 },
    { "qwen3moe",   "q3_k_m",    "Q3_K_M",    0 },
    { "qwen3moe",   "q4_k_m",    "Q4_K_M",    0 },
    { "qwen3moe",   "mxfp4_moe", "MXFP4_MOE", 0 },
    { "minimax-m2", "q3_k_m",    "Q3_K_M",    0 },
    { "minimax-m2", "q4_k_m",    "Q4_K_M",    0 },
    { "minimax-m2", "mxfp4_moe", "MXFP4_MOE", 0 },
    { "minimax-m2", "q4_0",      "Q4_0",      1 },
    { "minimax-m2", "q6_k",      "Q6_K",      1 },
    { "minimax-m2", "q8_0",      "Q8_0",      1 },
    { "llama-moe",  "q4_0",      "Q4_0",      1 },
    { "llama-moe",  "q4_k",      "Q4_K",      1 },
    { "llama-moe",  "q4_k_m",    "Q4_K_M",    0 },
    { "llama-moe",  "q5_k",      "Q5_K",      1 },
    { "llama-moe",  "q6_k",      "Q6_K",      1 },
    { "llama-moe",  "q8_0",      "Q8_0",      1 },
};

/* Could an importance matrix have changed tensor t of a file made with
 * one?  Not when llama-imatrix has no data for it, nor for a type whose
 * quantizer ignores it. */
static int
qr_imatrix_free(const llm_gguf_tensor_t *t)
{
    return strcmp(t->name, "token_embd.weight") == 0
           || strcmp(t->name, "output.weight") == 0
           || !llm_qz_uses_imatrix(t->type);
}

static void
qr_run(const qr_case_t *c)
{
    char in[512], ref[512], out[256], err[512];
    llm_quantize_params_t qp;
    llm_gguf_t *gr = NULL, *go = NULL;
    int with_im, n_cmp = 0, n_same = 0, n_types = 0, n_q = 0;
    uint64_t nt;

    snprintf(in, sizeof(in), "%s/reference/ref-%s-f32.gguf",
        tk_shared_dir(), c->model);
    snprintf(ref, sizeof(ref), "%s/reference/ref-%s-%s.gguf",
        tk_shared_dir(), c->model, c->ref);
    snprintf(out, sizeof(out), "%s/out.gguf", tmpdir);
    if (access(in, R_OK) != 0 || access(ref, R_OK) != 0) {
        tk_skip(ref, "absent");
        return;
    }

    tk_begin("%s %s", c->model, c->ref);
    memset(&qp, 0, sizeof(qp));
    qp.n_threads = 1;       /* two livelock under qemu-aarch64 */
    qp.pure = c->pure;
    REQUIRE(llm_model_quantize(in, out, llm_qtype_find(c->type), &qp, NULL,
            err, sizeof(err)) == 0, "%s", err);
    REQUIRE(llm_gguf_open(&gr, ref, err, sizeof(err)) == 0, "%s", err);
    if (!CHECK(llm_gguf_open(&go, out, err, sizeof(err)) == 0, "%s", err)) {
        llm_gguf_close(gr);
        return;
    }
    with_im = llm_gguf_find_kv(gr, "quantize.imatrix.file") != NULL;
    nt = llm_gguf_n_tensors(gr);
    CHECK(llm_gguf_n_tensors(go) == nt, "%llu tensors, llama.cpp %llu",
        (unsigned long long) llm_gguf_n_tensors(go),
        (unsigned long long) nt);

    for (uint64_t i = 0; i < nt && i < llm_gguf_n_tensors(go); i++) {
        const llm_gguf_tensor_t *r = llm_gguf_tensor_at(gr, i);
        const llm_gguf_tensor_t *o = llm_gguf_tensor_at(go, i);

        if (!CHECK(strcmp(r->name, o->name) == 0, "tensor %llu: '%s', "
                "llama.cpp '%s'", (unsigned long long) i, o->name, r->name)
            || !CHECK(r->type == o->type, "%s: %s, llama.cpp %s", r->name,
                llm_type_name(o->type), llm_type_name(r->type)))
        {
            continue;
        }
        n_types++;
        if (with_im && !qr_imatrix_free(r)) {
            continue;
        }
        n_cmp++;
        if (CHECK(r->nbytes == o->nbytes
                  && memcmp(r->data, o->data, r->nbytes) == 0,
                  "%s (%s): bytes differ from llama-quantize's", r->name,
                  llm_type_name(r->type)))
        {
            n_same++;
            n_q += r->type != LLM_TYPE_F32;
        }
    }
    tk_end_as("%s %s: %d/%llu tensor types as llama.cpp, %d/%d tensors "
        "byte-identical (%d quantized)%s", c->model, c->ref, n_types,
        (unsigned long long) nt, n_same, n_cmp, n_q,
        with_im ? "; made with an imatrix: the others not comparable" : "");
    llm_gguf_close(gr);
    llm_gguf_close(go);
}

/*
 * The mixes llama.cpp made no reference file of, by its rules
 * (llama_tensor_get_type): a GQA-4 dense llama (attn_v promoted by the
 * head ratio) and the 8-expert qwen3moe (attn_v / attn_k Q8_0,
 * attn_output Q5_K except under Q3_K_L).  Each rule: a name part (it
 * starts the name or follows a dot) and the type; the first that matches
 * a matrix applies, "*" matches any.
 */
typedef struct {
    const char  *model, *type;
    const char  *rules[8][2];
} qr_mix_t;

static const qr_mix_t mixes[] = {
    { "llama-dense", "Q2_K", { { "output", "Q6_K" }, { "attn_v", "Q4_K" },
      { "attn_output", "Q3_K" }, { "ffn_down", "Q3_K" }, { "*", "Q2_K" } } },
    { "llama-dense", "Q3_K_S", { { "output", "Q6_K" }, { "*", "Q3_K" } } },
    { "llama-dense", "Q3_K_M", { { "output", "Q6_K" }, { "attn_v", "Q5_K" },
      { "attn_output", "Q4_K" }, { "ffn_down", "Q4_K" }, { "*", "Q3_K" } } },
    { "llama-dense", "Q3_K_L", { { "output", "Q6_K" }, { "attn_v", "Q5_K" },
      { "attn_output", "Q5_K" }, { "ffn_down", "Q5_K" }, { "*", "Q3_K" } } },
    { "llama-dense", "IQ4_XS", { { "output", "Q6_K" }, { "attn_v", "Q5_K" },
      { "*", "IQ4_XS" } } },
    { "llama-dense", "Q5_1", { { "output", "Q6_K" }, { "*", "Q5_1" } } },
    { "llama-dense", "MXFP4_MOE", { { "*", "Q8_0" } } },
    { "qwen3moe", "Q2_K", { { "output", "Q6_K" }, { "attn_v", "Q8_0" },
      { "attn_k", "Q8_0" }, { "attn_output", "Q5_K" },
      { "ffn_down", "Q3_K" }, { "*", "Q2_K" } } },
    { "qwen3moe", "Q3_K_S", { { "output", "Q6_K" }, { "attn_v", "Q8_0" },
      { "attn_k", "Q8_0" }, { "attn_output", "Q5_K" }, { "*", "Q3_K" } } },
    { "qwen3moe", "Q3_K_L", { { "output", "Q6_K" }, { "attn_v", "Q8_0" },
      { "attn_k", "Q8_0" }, { "ffn_down", "Q5_K" }, { "*", "Q3_K" } } },
    { "qwen3moe", "IQ4_NL", { { "output", "Q6_K" }, { "attn_v", "Q8_0" },
      { "attn_k", "Q8_0" }, { "attn_output", "Q5_K" },
      { "*", "IQ4_NL" } } },
};

static uint32_t
qr_type_id(const char *name)
{
    for (uint32_t t = 0; t < LLM_TYPE_COUNT; t++) {
        if (strcmp(llm_type_name(t), name) == 0) {
            return t;
        }
    }
    return LLM_TYPE_COUNT;
}

static void
qr_mix(const qr_mix_t *m)
{
    char in[512], out[256], err[512];
    llm_quantize_params_t qp;
    llm_gguf_t *g = NULL;
    int n = 0;

    snprintf(in, sizeof(in), "%s/reference/ref-%s-f32.gguf",
        tk_shared_dir(), m->model);
    snprintf(out, sizeof(out), "%s/mix.gguf", tmpdir);
    if (access(in, R_OK) != 0) {
        tk_skip(in, "absent");
        return;
    }
    tk_begin("%s %s mix rules", m->model, m->type);
    memset(&qp, 0, sizeof(qp));
    qp.n_threads = 1;       /* two livelock under qemu-aarch64 */
    REQUIRE(llm_model_quantize(in, out, llm_qtype_find(m->type), &qp, NULL,
            err, sizeof(err)) == 0, "%s", err);
    REQUIRE(llm_gguf_open(&g, out, err, sizeof(err)) == 0, "%s", err);
    for (uint64_t i = 0; i < llm_gguf_n_tensors(g); i++) {
        const llm_gguf_tensor_t *t = llm_gguf_tensor_at(g, i);

        if (t->type == LLM_TYPE_F32) {
            continue;           /* norms, router */
        }
        for (int r = 0; r < 8 && m->rules[r][0] != NULL; r++) {
            const char *pat = m->rules[r][0];
            char dotted[64];

            snprintf(dotted, sizeof(dotted), ".%s", pat);
            if (strcmp(pat, "*") == 0
                || strncmp(t->name, pat, strlen(pat)) == 0
                || strstr(t->name, dotted) != NULL)
            {
                CHECK(t->type == qr_type_id(m->rules[r][1]), "%s: %s, "
                    "llama.cpp's rules give %s", t->name,
                    llm_type_name(t->type), m->rules[r][1]);
                n++;
                break;
            }
        }
    }
    llm_gguf_close(g);
    tk_end_as("%s %s: %d matrices typed by llama.cpp's rules", m->model,
        m->type, n);
}

/*
 * engine/tests/data/quantize/rows.gguf: the first rows of qwen3moe's
 * token_embd (f32) and of the same tensor in llama.cpp's files, and of
 * blk.0.ffn_up_exps expert 0 in f32 and MXFP4 ("<type>.<what>").  Each
 * quantized here must match.
 */
static void
qr_rows(void)
{
    static const char *const types[] = {
        "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K",
        "Q5_K", "Q6_K", "IQ4_NL", "IQ4_XS", "MXFP4"
    };
    llm_gguf_t *g = NULL;
    char err[512], name[96];
    int n = 0;

    tk_begin("in-repo rows of llama.cpp's files");
    REQUIRE(llm_gguf_open(&g, "engine/tests/data/quantize/rows.gguf", err,
            sizeof(err)) == 0, "%s (run from the repository root)", err);
    for (size_t k = 0; k < sizeof(types) / sizeof(types[0]); k++) {
        const char *what = strcmp(types[k], "MXFP4") == 0 ? "ffn_up_exps"
                                                           : "token_embd";
        const llm_gguf_tensor_t *x, *q;
        uint8_t *buf;
        size_t rb;

        snprintf(name, sizeof(name), "f32.%s", what);
        x = llm_gguf_find_tensor(g, name);
        snprintf(name, sizeof(name), "%s.%s", types[k], what);
        q = llm_gguf_find_tensor(g, name);
        if (!CHECK(x != NULL && q != NULL, "%s missing", name)) {
            continue;
        }
        rb = llm_row_bytes(q->type, x->ne[0]);
        buf = malloc(rb);
        for (int64_t r = 0; r < x->ne[1]; r++) {
            llm_qz_row(q->type, (const float *) x->data + r * x->ne[0], buf,
                x->ne[0], NULL);
            CHECK(memcmp(buf, (const uint8_t *) q->data + r * rb, rb) == 0,
                "%s row %lld differs", name, (long long) r);
        }
        free(buf);
        n++;
    }
    llm_gguf_close(g);
    tk_end_as("in-repo rows of llama.cpp's files: %d types", n);
}

int
main(void)
{
    char dir[512];

    tmpdir = tk_tmpdir("test_quantize_ref");
    llm_simd_init();
    qr_rows();
    snprintf(dir, sizeof(dir), "%s/reference", tk_shared_dir());
    if (access(dir, R_OK) != 0) {
        tk_skip("llama-quantize identity on the shared reference models",
            "%s absent (set LLM_SHARED)", dir);
        return tk_done();
    }
    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
        qr_run(&cases[k]);
    }
    for (size_t k = 0; k < sizeof(mixes) / sizeof(mixes[0]); k++) {
        qr_mix(&mixes[k]);
    }
    return tk_done();
}
