/*
 * Importance matrices in llm-quantize (tools/lib/imatrix.h,
 * quantize_rows.h).
 *
 *  - both llama-imatrix file formats, written here byte by byte as
 *    llama-imatrix writes them, read back to the values llama-quantize
 *    computes (sum / ncall, sum / count, 1 for a matrix never reached),
 *    and broken files refused with a message;
 *  - the weighted quantizers behave as ggml's: Q6_K weighted by x^2 is
 *    exactly the reference quantizer (make_qx_quants' two paths agree);
 *    weights scaled by a power of two give the same bytes; for every type
 *    that takes weights, the weighted result differs from the unweighted
 *    one and has the lower weighted squared error;
 *  - end to end on a synthetic MoE model: tensors with an entry change,
 *    token_embd / output (no entry) do not, each expert's rows use its own
 *    slice of the entry, the output records the matrix in its
 *    quantize.imatrix.* keys, and a wrong-sized entry is refused.
 */

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/quant.h"
#include "model/gguf.h"
#include "imatrix.h"
#include "mkmodel.h"
#include "quantize.h"
#include "quantize_rows.h"
#include "testkit.h"

static const char *tmpdir;
static uint64_t rng = 0x1234567887654321ull;

static float
urand(void)
{
    return (float) (tk_xorshift64(&rng) >> 40) / (float) (1u << 24);
}

/* Roughly normal: the sum of 4 uniforms, centred and scaled. */
static float
nrand(void)
{
    return (urand() + urand() + urand() + urand() - 2.0f) * 1.7f;
}

static void
put_i32(FILE *f, int32_t v)
{
    fwrite(&v, 4, 1, f);
}

/* A legacy .dat as llama-imatrix's save_imatrix_legacy writes it. */
static void
write_legacy(const char *path, int ncall, int trailer)
{
    static const char *names[2] = { "blk.0.attn_q.weight",
                                    "blk.0.ffn_up_exps.weight" };
    FILE *f = fopen(path, "wb");
    float v[8];

    put_i32(f, 2);
    for (int e = 0; e < 2; e++) {
        put_i32(f, (int32_t) strlen(names[e]));
        fwrite(names[e], 1, strlen(names[e]), f);
        put_i32(f, ncall);
        put_i32(f, 4 + 4 * e);
        for (int i = 0; i < 4 + 4 * e; i++) {
            v[i] = 0.5f + (float) i + 10.0f * (float) e;
        }
        fwrite(v, 4, (size_t) (4 + 4 * e), f);
    }
    if (trailer) {
        put_i32(f, 7);
        put_i32(f, 9);
        fwrite("calib.txt", 1, 9, f);
    }
    fclose(f);
}

static void
test_legacy(void)
{
    char path[256], err[512];
    llm_imatrix_t *im = NULL;
    const float *v;
    uint64_t n;

    tk_begin("legacy .dat: values / ncall, chunk count and dataset");
    snprintf(path, sizeof(path), "%s/a.dat", tmpdir);
    write_legacy(path, 3, 1);
    REQUIRE(llm_imatrix_load(&im, path, err, sizeof(err)) == 0, "%s", err);
    CHECK(llm_imatrix_is_legacy(im));
    CHECK(llm_imatrix_n_entries(im) == 2);
    CHECK(llm_imatrix_chunks(im) == 7, "%u", llm_imatrix_chunks(im));
    CHECK(llm_imatrix_dataset(im) != NULL
          && strcmp(llm_imatrix_dataset(im), "calib.txt") == 0);
    v = llm_imatrix_find(im, "blk.0.ffn_up_exps.weight", &n);
    REQUIRE(v != NULL && n == 8, "n %llu", (unsigned long long) n);
    for (int i = 0; i < 8; i++) {
        CHECK(v[i] == (10.5f + (float) i) / 3, "v[%d] %g", i, v[i]);
    }
    CHECK(llm_imatrix_find(im, "output.weight", &n) == NULL && n == 0);
    llm_imatrix_free(im);

    tk_begin("legacy .dat: ncall 0 keeps the sums, no trailer");
    write_legacy(path, 0, 0);
    REQUIRE(llm_imatrix_load(&im, path, err, sizeof(err)) == 0, "%s", err);
    v = llm_imatrix_find(im, "blk.0.attn_q.weight", &n);
    REQUIRE(v != NULL && n == 4);
    CHECK(v[3] == 3.5f && llm_imatrix_chunks(im) == 0
          && llm_imatrix_dataset(im) == NULL);
    llm_imatrix_free(im);

    tk_begin("legacy .dat: truncated and empty files are refused");
    {
        FILE *f = fopen(path, "r+b");
        REQUIRE(f != NULL);
        REQUIRE(ftruncate(fileno(f), 40) == 0);
        fclose(f);
    }
    CHECK(llm_imatrix_load(&im, path, err, sizeof(err)) == -EINVAL
          && im == NULL);
    CHECK(strstr(err, "truncated") != NULL, "%s", err);
    {
        FILE *f = fopen(path, "wb");
        put_i32(f, 0);
        fclose(f);
    }
    CHECK(llm_imatrix_load(&im, path, err, sizeof(err)) == -EINVAL);
    CHECK(strstr(err, "no entries") != NULL, "%s", err);
}

/*
 * A GGUF imatrix as llama-imatrix's save_imatrix writes it: per entry
 * "<name>.in_sum2" F32 [ne0, nmat] and "<name>.counts" F32 [1, nmat].
 * names/ne0/nmat describe the entries; sums[i] and counts[i] their data.
 * keys 0 leaves out the imatrix.* keys.
 */
static int
write_gguf_imatrix(const char *path, int n, const char *const *names,
    const int64_t *ne0, const int64_t *nmat, float *const *sums,
    float *const *counts, int keys)
{
    llm_gguf_writer_t *w;
    char err[256], tn[160];
    const char *ds[1] = { "calib.txt" };
    size_t dl[1] = { 9 };

    if (llm_gguf_writer_open(&w, path, err, sizeof(err)) != 0) {
        return -1;
    }
    llm_gguf_w_str(w, "general.type", "imatrix", 7);
    if (keys) {
        llm_gguf_w_str_arr(w, "imatrix.datasets", ds, dl, 1);
        llm_gguf_w_u32(w, "imatrix.chunk_count", 164);
        llm_gguf_w_u32(w, "imatrix.chunk_size", 512);
    }
    for (int i = 0; i < n; i++) {
        int64_t s[2] = { ne0[i], nmat[i] }, c[2] = { 1, nmat[i] };

        snprintf(tn, sizeof(tn), "%s.in_sum2", names[i]);
        llm_gguf_w_tensor(w, tn, 2, s, LLM_TYPE_F32);
        if (counts[i] != NULL) {
            snprintf(tn, sizeof(tn), "%s.counts", names[i]);
            llm_gguf_w_tensor(w, tn, 2, c, LLM_TYPE_F32);
        }
    }
    llm_gguf_w_begin_data(w);
    for (int i = 0; i < n; i++) {
        llm_gguf_w_data(w, sums[i], (size_t) (ne0[i] * nmat[i]) * 4);
        if (counts[i] != NULL) {
            llm_gguf_w_data(w, counts[i], (size_t) nmat[i] * 4);
        }
    }
    return llm_gguf_writer_close(w, err, sizeof(err));
}

static void
test_gguf(void)
{
    char path[256], err[512];
    const char *names[2] = { "blk.0.attn_q.weight",
                             "blk.0.ffn_down_exps.weight" };
    int64_t ne0[2] = { 4, 3 }, nmat[2] = { 1, 2 };
    float s0[4] = { 1, 2, 3, 4 }, c0[1] = { 8 };
    float s1[6] = { 5, 6, 7, 8, 9, 10 }, c1[2] = { 0, 3 };
    float *sums[2] = { s0, s1 }, *counts[2] = { c0, c1 };
    llm_imatrix_t *im = NULL;
    const float *v;
    uint64_t n;

    tk_begin("GGUF imatrix: in_sum2 / counts per matrix, 1 where count 0");
    snprintf(path, sizeof(path), "%s/a.gguf", tmpdir);
    REQUIRE(write_gguf_imatrix(path, 2, names, ne0, nmat, sums, counts, 1)
            == 0);
    REQUIRE(llm_imatrix_load(&im, path, err, sizeof(err)) == 0, "%s", err);
    CHECK(!llm_imatrix_is_legacy(im) && llm_imatrix_n_entries(im) == 2);
    CHECK(llm_imatrix_chunks(im) == 164);
    CHECK(llm_imatrix_dataset(im) != NULL
          && strcmp(llm_imatrix_dataset(im), "calib.txt") == 0);
    v = llm_imatrix_find(im, names[0], &n);
    REQUIRE(v != NULL && n == 4);
    for (int i = 0; i < 4; i++) {
        CHECK(v[i] == s0[i] / 8, "v[%d] %g", i, v[i]);
    }
    v = llm_imatrix_find(im, names[1], &n);
    REQUIRE(v != NULL && n == 6);
    CHECK(v[0] == 1 && v[1] == 1 && v[2] == 1, "expert 0 never reached");
    CHECK(v[3] == 8.0f / 3 && v[4] == 9.0f / 3 && v[5] == 10.0f / 3);
    llm_imatrix_free(im);

    tk_begin("GGUF imatrix: missing keys, unpaired tensors, NaN refused");
    REQUIRE(write_gguf_imatrix(path, 2, names, ne0, nmat, sums, counts, 0)
            == 0);
    CHECK(llm_imatrix_load(&im, path, err, sizeof(err)) == -EINVAL);
    CHECK(strstr(err, "missing imatrix metadata") != NULL, "%s", err);
    counts[1] = NULL;
    REQUIRE(write_gguf_imatrix(path, 2, names, ne0, nmat, sums, counts, 1)
            == 0);
    CHECK(llm_imatrix_load(&im, path, err, sizeof(err)) == -EINVAL);
    CHECK(strstr(err, "no counts") != NULL, "%s", err);
    counts[1] = c1;
    s0[2] = NAN;
    REQUIRE(write_gguf_imatrix(path, 2, names, ne0, nmat, sums, counts, 1)
            == 0);
    CHECK(llm_imatrix_load(&im, path, err, sizeof(err)) == -EINVAL);
    CHECK(strstr(err, "not finite") != NULL, "%s", err);
}

/* sum w (x - q)^2 of row x quantized to t with weights qw (or NULL). */
static double
werr(uint32_t t, const float *x, int64_t n, const float *qw,
    const float *w, void *buf, float *deq)
{
    double e = 0;

    llm_qz_row(t, x, buf, n, qw);
    llm_dequantize_row((llm_type_t) t, buf, deq, n);
    for (int64_t i = 0; i < n; i++) {
        double d = (double) x[i] - deq[i];
        e += w[i] * d * d;
    }
    return e;
}

static void
test_weighted(void)
{
    static const uint32_t types[] = {
        LLM_TYPE_Q4_0, LLM_TYPE_Q4_1, LLM_TYPE_Q5_0, LLM_TYPE_Q5_1,
        LLM_TYPE_Q2_K, LLM_TYPE_Q3_K, LLM_TYPE_Q4_K, LLM_TYPE_Q5_K,
        LLM_TYPE_Q6_K, LLM_TYPE_IQ4_NL, LLM_TYPE_IQ4_XS
    };
    enum { N = 1024, ROWS = 48 };
    static float x[ROWS][N], w[N], w4[N], x2[N], deq[N];
    static uint8_t a[N * 2], b[N * 2];
    int same;

    for (int r = 0; r < ROWS; r++) {
        for (int i = 0; i < N; i++) {
            x[r][i] = nrand() * 0.02f;
        }
        x[r][(r * 37) % N] *= 8;       /* an outlier per row */
    }
    /* importance spread over three orders of magnitude */
    for (int i = 0; i < N; i++) {
        w[i] = expf(3.0f * (urand() - 0.5f) * 2.3f);
        w4[i] = w[i] * 4;
    }

    tk_begin("Q6_K weighted by x^2 is the reference quantizer, bit for bit");
    same = 1;
    for (int r = 0; r < ROWS; r++) {
        for (int i = 0; i < N; i++) {
            x2[i] = x[r][i] * x[r][i];
        }
        llm_qz_row(LLM_TYPE_Q6_K, x[r], a, N, x2);
        llm_quantize_row(LLM_TYPE_Q6_K, x[r], b, N);
        same &= memcmp(a, b, llm_row_bytes(LLM_TYPE_Q6_K, N)) == 0;
    }
    CHECK(same, "make_qx_quants with qw = x^2 differs from rmse_type 1");

    for (size_t k = 0; k < sizeof(types) / sizeof(types[0]); k++) {
        uint32_t t = types[k];
        size_t rb = llm_row_bytes(t, N);
        double ew = 0, eu = 0;
        int differs = 0, scaled_same = 1;

        tk_begin("%s: weighted fit differs, lower weighted error, "
            "scale-free weights", llm_type_name(t));
        for (int r = 0; r < ROWS; r++) {
            ew += werr(t, x[r], N, w, w, a, deq);
            eu += werr(t, x[r], N, NULL, w, b, deq);
            differs += memcmp(a, b, rb) != 0;
            llm_qz_row(t, x[r], b, N, w4);
            scaled_same &= memcmp(a, b, rb) == 0;
        }
        CHECK(differs == ROWS, "%d of %d rows differ", differs, ROWS);
        CHECK(ew < eu, "weighted error %g, unweighted %g", ew, eu);
        CHECK(scaled_same, "weights x4 changed the bytes");
        tk_note("%-6s weighted error %.4g vs %.4g without (%.0f%%)\n",
            llm_type_name(t), ew, eu, 100.0 * ew / eu);
    }

    tk_begin("Q8_0 and MXFP4 ignore weights");
    for (int r = 0; r < 4; r++) {
        llm_qz_row(LLM_TYPE_Q8_0, x[r], a, N, w);
        llm_qz_row(LLM_TYPE_Q8_0, x[r], b, N, NULL);
        CHECK(memcmp(a, b, llm_row_bytes(LLM_TYPE_Q8_0, N)) == 0);
        llm_qz_row(LLM_TYPE_MXFP4, x[r], a, N, w);
        llm_qz_row(LLM_TYPE_MXFP4, x[r], b, N, NULL);
        CHECK(memcmp(a, b, llm_row_bytes(LLM_TYPE_MXFP4, N)) == 0);
    }
    CHECK(!llm_qz_uses_imatrix(LLM_TYPE_Q8_0)
          && !llm_qz_uses_imatrix(LLM_TYPE_MXFP4)
          && llm_qz_uses_imatrix(LLM_TYPE_IQ4_XS));
}

/* Whether tensor name of files a and b has the same bytes. */
static int
same_tensor(const llm_gguf_t *a, const llm_gguf_t *b, const char *name)
{
    const llm_gguf_tensor_t *x = llm_gguf_find_tensor(a, name);
    const llm_gguf_tensor_t *y = llm_gguf_find_tensor(b, name);

    return x != NULL && y != NULL && x->nbytes == y->nbytes
           && x->type == y->type
           && memcmp(x->data, y->data, x->nbytes) == 0;
}

/*
 * An imatrix for every block matrix of model g (one matrix per expert),
 * random positive values; bad_name gets one value too many.
 */
static int
imatrix_for_model(const llm_gguf_t *g, const char *path,
    const char *bad_name)
{
    const char *names[64];
    int64_t ne0[64], nmat[64];
    float *sums[64], *counts[64];
    int n = 0, rc;

    for (uint64_t i = 0; i < llm_gguf_n_tensors(g) && n < 64; i++) {
        const llm_gguf_tensor_t *t = llm_gguf_tensor_at(g, i);

        if (strncmp(t->name, "blk.", 4) != 0 || t->n_dims < 2
            || strstr(t->name, "ffn_gate_inp") != NULL)
        {
            continue;
        }
        names[n] = t->name;
        ne0[n] = t->ne[0] + (bad_name && strcmp(bad_name, t->name) == 0);
        nmat[n] = t->ne[2];
        sums[n] = malloc((size_t) (ne0[n] * nmat[n]) * 4);
        counts[n] = malloc((size_t) nmat[n] * 4);
        for (int64_t j = 0; j < ne0[n] * nmat[n]; j++) {
            sums[n][j] = 0.01f + 50 * urand() * urand();
        }
        for (int64_t j = 0; j < nmat[n]; j++) {
            counts[n][j] = 10 + (float) j;
        }
        n++;
    }
    rc = write_gguf_imatrix(path, n, names, ne0, nmat, sums, counts, 1);
    for (int i = 0; i < n; i++) {
        free(sums[i]);
        free(counts[i]);
    }
    return rc;
}

static void
test_model(void)
{
    llm_mkmodel_params_t mp;
    llm_quantize_params_t qp;
    char in[256], imp[256], outw[256], outu[256], err[512];
    llm_imatrix_t *im = NULL;
    llm_gguf_t *gi = NULL, *gw = NULL, *gu = NULL;
    const llm_gguf_tensor_t *t, *src;
    const float *qw;
    uint64_t n;
    uint32_t u;

    tk_begin("model: per-tensor entries, per-expert slices, keys");
    snprintf(in, sizeof(in), "%s/m.gguf", tmpdir);
    snprintf(imp, sizeof(imp), "%s/m.imatrix.gguf", tmpdir);
    snprintf(outw, sizeof(outw), "%s/w.gguf", tmpdir);
    snprintf(outu, sizeof(outu), "%s/u.gguf", tmpdir);
    REQUIRE(llm_mkmodel_preset(&mp, "tiny", err, sizeof(err)) == 0);
    mp.type = LLM_TYPE_F32;
    mp.n_layer = 2;
    mp.n_vocab = 300;       /* a short BPE training */
    mp.n_threads = 1;       /* two threads livelock under qemu-aarch64 */
    REQUIRE(llm_mkmodel_write(&mp, in, NULL, err, sizeof(err)) == 0,
            "%s", err);
    REQUIRE(llm_gguf_open(&gi, in, err, sizeof(err)) == 0, "%s", err);
    REQUIRE(imatrix_for_model(gi, imp, NULL) == 0);
    REQUIRE(llm_imatrix_load(&im, imp, err, sizeof(err)) == 0, "%s", err);

    memset(&qp, 0, sizeof(qp));
    qp.n_threads = 1;
    REQUIRE(llm_model_quantize(in, outu, llm_qtype_find("IQ4_NL"), &qp,
            NULL, err, sizeof(err)) == 0, "%s", err);
    qp.imatrix = im;
    qp.imatrix_path = imp;
    REQUIRE(llm_model_quantize(in, outw, llm_qtype_find("IQ4_NL"), &qp,
            NULL, err, sizeof(err)) == 0, "%s", err);
    REQUIRE(llm_gguf_open(&gw, outw, err, sizeof(err)) == 0, "%s", err);
    REQUIRE(llm_gguf_open(&gu, outu, err, sizeof(err)) == 0, "%s", err);

    for (uint64_t i = 0; i < llm_gguf_n_tensors(gw); i++) {
        t = llm_gguf_tensor_at(gw, i);
        qw = llm_imatrix_find(im, t->name, &n);
        if (t->type == LLM_TYPE_F32) {
            continue;
        }
        if (qw != NULL && llm_qz_uses_imatrix(t->type)) {
            CHECK(!same_tensor(gw, gu, t->name), "%s (%s) did not change",
                t->name, llm_type_name(t->type));
        } else {
            CHECK(same_tensor(gw, gu, t->name), "%s (%s, no weights) "
                "changed", t->name, llm_type_name(t->type));
        }
    }
    CHECK(same_tensor(gw, gu, "token_embd.weight"));

    /* every row of an expert tensor from its expert's slice */
    src = llm_gguf_find_tensor(gi, "blk.1.ffn_up_exps.weight");
    t = llm_gguf_find_tensor(gw, "blk.1.ffn_up_exps.weight");
    qw = llm_imatrix_find(im, "blk.1.ffn_up_exps.weight", &n);
    REQUIRE(src != NULL && t != NULL && qw != NULL && t->ne[2] > 1);
    {
        size_t rb = llm_row_bytes(t->type, t->ne[0]);
        uint8_t *row = malloc(rb);
        int bad = 0;

        for (int64_t r = 0; r < t->ne[1] * t->ne[2]; r++) {
            llm_qz_row(t->type, (const float *) src->data + r * t->ne[0],
                row, t->ne[0], qw + (r / t->ne[1]) * t->ne[0]);
            bad += memcmp(row, (const uint8_t *) t->data + r * rb, rb) != 0;
        }
        CHECK(bad == 0, "%d rows not from their expert's weights", bad);
        free(row);
    }

    CHECK(llm_gguf_get_u32(gw, "quantize.imatrix.entries_count", &u, NULL,
          0) == 0 && u == llm_imatrix_n_entries(im));
    CHECK(llm_gguf_get_u32(gw, "quantize.imatrix.chunks_count", &u, NULL,
          0) == 0 && u == 164);
    CHECK(llm_gguf_find_kv(gw, "quantize.imatrix.file") != NULL
          && llm_gguf_find_kv(gw, "quantize.imatrix.dataset") != NULL);
    CHECK(llm_gguf_find_kv(gu, "quantize.imatrix.file") == NULL);
    llm_imatrix_free(im);
    im = NULL;

    tk_begin("model: an entry of the wrong size is refused");
    REQUIRE(imatrix_for_model(gi, imp, "blk.0.attn_q.weight") == 0);
    REQUIRE(llm_imatrix_load(&im, imp, err, sizeof(err)) == 0, "%s", err);
    qp.imatrix = im;
    CHECK(llm_model_quantize(in, outw, llm_qtype_find("Q4_1"), &qp, NULL,
          err, sizeof(err)) == -EINVAL);
    CHECK(strstr(err, "blk.0.attn_q.weight") != NULL, "%s", err);
    llm_imatrix_free(im);
    llm_gguf_close(gi);
    llm_gguf_close(gw);
    llm_gguf_close(gu);
}

int
main(void)
{
    tmpdir = tk_tmpdir("test_imatrix");
    llm_simd_init();
    test_legacy();
    test_gguf();
    test_weighted();
    test_model();
    return tk_done();
}
