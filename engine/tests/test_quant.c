/*
 * Tensor types and kernels.
 *
 * 1. fp16 / bf16 conversions: exhaustive round trip, round-to-even ties.
 * 2. Per type: quantize -> dequantize RMS error within the type's bound.
 * 3. Per type: the scalar dot equals the float dot of the dequantized rows
 *    (catches a dot product that reads the layout differently from
 *    dequantize).
 * 4. Per SIMD level the CPU has: quantize_act, vec_dot and gemm (odd
 *    sizes) against the scalar reference, and every gemm column
 *    bit-identical to the same column computed alone (what makes a
 *    request's tokens independent of its batch).
 * 5. Real ggml data ($LLM_SHARED/reference, skipped when absent): every
 *    quantized tensor dequantizes to the f32 file's tensor within the
 *    type's error, and our reference quantizer reproduces ggml's bytes.
 */

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/attn.h"
#include "model/gguf.h"
#include "kernels/quant.h"
#include "testkit.h"

static uint64_t  rng_state = 0x9e3779b97f4a7c15ull;

static uint64_t
rng_u64(void)
{
    return tk_xorshift64(&rng_state);
}

static float
rng_unit(void)          /* (0, 1) */
{
    return ((rng_u64() >> 40) + 0.5f) / 16777216.0f;
}

static float
rng_normal(void)
{
    return sqrtf(-2 * logf(rng_unit())) * cosf(6.2831853f * rng_unit());
}

/* Gaussian values with a few outliers and a per-row scale, like weights. */
static void
fill(float *x, int64_t n, float scale)
{
    for (int64_t i = 0; i < n; i++) {
        x[i] = scale * rng_normal();
        if (rng_u64() % 97 == 0) {
            x[i] *= 4;
        }
    }
}

static double
rel_rms(const float *a, const float *b, int64_t n)
{
    double  num = 0, den = 0;

    for (int64_t i = 0; i < n; i++) {
        num += ((double) a[i] - b[i]) * ((double) a[i] - b[i]);
        den += (double) b[i] * b[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}


static const llm_type_t  weight_types[] = {
    LLM_TYPE_F32, LLM_TYPE_F16, LLM_TYPE_BF16, LLM_TYPE_Q8_0, LLM_TYPE_Q4_0,
    LLM_TYPE_Q4_K, LLM_TYPE_Q5_K, LLM_TYPE_Q6_K
};
#define N_WEIGHT_TYPES  (sizeof(weight_types) / sizeof(weight_types[0]))

/* Round-trip bound on relative RMS error for Gaussian data. */
static double
roundtrip_bound(llm_type_t t)
{
    switch (t) {
    case LLM_TYPE_F32:  return 0;
    case LLM_TYPE_F16:  return 5e-4;
    case LLM_TYPE_BF16: return 4e-3;
    case LLM_TYPE_Q8_0: return 0.01;
    case LLM_TYPE_Q4_0: return 0.12;
    case LLM_TYPE_Q4_K: return 0.1;
    case LLM_TYPE_Q5_K: return 0.05;
    case LLM_TYPE_Q6_K: return 0.025;
    default:            return 0;
    }
}


static void
test_conversions(void)
{
    int  bad = 0;

    for (uint32_t h = 0; h < 65536; h++) {
        float     f = llm_fp16_to_fp32((uint16_t) h);
        uint16_t  back = llm_fp32_to_fp16(f);

        if (isnan(f)) {
            bad += !isnan(llm_fp16_to_fp32(back));
        } else {
            bad += back != h;
        }
    }
    CHECK(bad == 0, "fp16 round trip: %d of 65536 halves differ", bad);

    /* ties go to even; just above a tie goes up */
    CHECK(llm_fp32_to_fp16(1.0f + 0x1p-11f) == 0x3c00, "1+2^-11 -> 1");
    CHECK(llm_fp32_to_fp16(1.0f + 3 * 0x1p-11f) == 0x3c02, "tie up to even");
    CHECK(llm_fp32_to_fp16(1.0f + 0x1p-11f + 0x1p-20f) == 0x3c01, "> tie");
    CHECK(llm_fp32_to_fp16(65504.f) == 0x7bff, "max half");
    CHECK(llm_fp32_to_fp16(65520.f) == 0x7c00, "65520 -> inf");
    CHECK(llm_fp32_to_fp16(0x1p-24f) == 0x0001, "min subnormal");
    CHECK(llm_fp32_to_fp16(0x1p-25f) == 0x0000, "half of min: tie to 0");
    CHECK(llm_fp32_to_fp16(-0.0f) == 0x8000, "-0");
    CHECK(llm_fp32_to_fp16(1e-9f) == 0, "underflow");

    /* random floats: the result is the nearest half */
    bad = 0;
    for (int i = 0; i < 200000; i++) {
        float     f = rng_normal() * ldexpf(1, (int) (rng_u64() % 40) - 24);
        uint16_t  h = llm_fp32_to_fp16(f);
        double    e = fabs((double) llm_fp16_to_fp32(h) - f);
        double    e1 = fabs((double) llm_fp16_to_fp32(h + 1) - f);
        double    e2 = h & 0x7fff ? fabs((double) llm_fp16_to_fp32(h - 1) - f)
                                  : INFINITY;

        if (fabsf(f) < 65504 && (e > e1 || e > e2)) {
            bad++;
        }
    }
    CHECK(bad == 0, "fp16 nearest: %d of 200000 not nearest", bad);

    bad = 0;
    for (int i = 0; i < 200000; i++) {
        float     f = rng_normal() * 100;
        uint16_t  h = llm_fp32_to_bf16(f);
        double    e = fabs((double) llm_bf16_to_fp32(h) - f);
        double    e1 = fabs((double) llm_bf16_to_fp32(h + 1) - f);
        double    e2 = fabs((double) llm_bf16_to_fp32(h - 1) - f);

        bad += e > e1 || e > e2;
    }
    CHECK(bad == 0, "bf16 nearest: %d of 200000 not nearest", bad);
    CHECK(llm_fp32_to_bf16(1.0f + 0x1p-8f) == 0x3f80, "bf16 tie to even");
    CHECK(llm_fp32_to_bf16(1.0f + 3 * 0x1p-8f) == 0x3f82, "bf16 tie up");

    tk_end_as("conversions: fp16/bf16 exhaustive round trip, nearest-even");
}


static void
test_type_table(void)
{

    CHECK(llm_row_bytes(LLM_TYPE_Q4_0, 64) == 36, "q4_0 row");
    CHECK(llm_row_bytes(LLM_TYPE_Q4_K, 512) == 288, "q4_K row");
    CHECK(llm_row_bytes(LLM_TYPE_Q6_K, 256) == 210, "q6_K row");
    CHECK(llm_row_bytes(LLM_TYPE_Q5_K, 256) == 176, "q5_K row");
    CHECK(llm_row_bytes(LLM_TYPE_Q8_0, 32) == 34, "q8_0 row");
    CHECK(llm_row_bytes(LLM_TYPE_Q8_K, 256) == 292, "q8_K row");
    CHECK(llm_row_bytes(LLM_TYPE_BF16, 3) == 6, "bf16 row");
    CHECK(llm_row_bytes(LLM_TYPE_Q4_0, 33) == 0, "q4_0 odd row");
    CHECK(llm_type_info(LLM_TYPE_Q8_1) != NULL
          && !llm_type_info(LLM_TYPE_Q8_1)->supported, "q8_1 known");
    CHECK(llm_type_info(4) == NULL, "type 4 unknown");
    CHECK(llm_type_info(1000) == NULL, "type 1000 unknown");
    CHECK(strcmp(llm_type_name(LLM_TYPE_Q5_K), "Q5_K") == 0, "name");
    CHECK(strcmp(llm_type_name(99), "?") == 0, "unknown name");
    CHECK(llm_type_vec_dot_type(LLM_TYPE_Q6_K) == LLM_TYPE_Q8_K, "q6_K act");
    CHECK(llm_type_vec_dot_type(LLM_TYPE_Q4_0) == LLM_TYPE_Q8_0, "q4_0 act");
    CHECK(llm_type_vec_dot_type(LLM_TYPE_BF16) == LLM_TYPE_F32, "bf16 act");
    for (size_t i = 0; i < N_WEIGHT_TYPES; i++) {
        CHECK(llm_type_info(weight_types[i])->supported, "%s supported",
              llm_type_name(weight_types[i]));
    }

    tk_end_as("type table: sizes, names, activation types");
}


static void
test_roundtrip(void)
{
    const int64_t  n = 256 * 64;
    float         *x = malloc(n * sizeof(float));
    float         *y = malloc(n * sizeof(float));
    void          *q = malloc(n * 4);
    char           line[512];
    int            off = 0;

    for (size_t i = 0; i < N_WEIGHT_TYPES; i++) {
        llm_type_t  t = weight_types[i];

        fill(x, n, 0.02f);
        llm_quantize_row(t, x, q, n);
        llm_dequantize_row(t, q, y, n);
        double  e = rel_rms(y, x, n);

        CHECK(e <= roundtrip_bound(t), "%s round trip rel RMS %.5f > %.5f",
              llm_type_name(t), e, roundtrip_bound(t));
        off += snprintf(line + off, sizeof(line) - off, " %s=%.4f",
                        llm_type_name(t), e);
    }

    /* all-zero and constant blocks must not produce NaN */
    for (size_t i = 0; i < N_WEIGHT_TYPES; i++) {
        llm_type_t  t = weight_types[i];

        memset(x, 0, 256 * sizeof(float));
        llm_quantize_row(t, x, q, 256);
        llm_dequantize_row(t, q, y, 256);
        CHECK(rel_rms(y, x, 256) == 0, "%s zeros", llm_type_name(t));
        for (int j = 0; j < 256; j++) {
            x[j] = 0.5f;
        }
        llm_quantize_row(t, x, q, 256);
        llm_dequantize_row(t, q, y, 256);
        CHECK(rel_rms(y, x, 256) < 0.02, "%s constant block %.4f",
              llm_type_name(t), rel_rms(y, x, 256));
    }

    /* activation types */
    fill(x, n, 1.0f);
    llm_quantize_act_ref(LLM_TYPE_Q8_0, x, q, n);
    llm_dequantize_row(LLM_TYPE_Q8_0, q, y, n);
    CHECK(rel_rms(y, x, n) < 0.01, "act q8_0 %.4f", rel_rms(y, x, n));
    llm_quantize_act_ref(LLM_TYPE_Q8_K, x, q, n);
    llm_dequantize_row(LLM_TYPE_Q8_K, q, y, n);
    CHECK(rel_rms(y, x, n) < 0.02, "act q8_K %.4f", rel_rms(y, x, n));

    tk_note("round-trip rel RMS:%s\n", line);
    tk_end_as("round trip: quantize -> dequantize within each type's bound");
    free(x);
    free(y);
    free(q);
}


/* Scalar dot == float dot of the dequantized operands. */
static void
test_dot_vs_dequant(void)
{
    const int64_t  n = 256 * 8;
    float         *w = malloc(n * sizeof(float));
    float         *x = malloc(n * sizeof(float));
    float         *wd = malloc(n * sizeof(float));
    float         *xd = malloc(n * sizeof(float));
    void          *wq = malloc(n * 4);
    void          *xq = malloc(n * 4 + 1024);

    for (size_t i = 0; i < N_WEIGHT_TYPES; i++) {
        llm_type_t  t = weight_types[i], at = llm_type_vec_dot_type(t);

        for (int rep = 0; rep < 20; rep++) {
            double  ref = 0, norm = 0;
            float   s;

            fill(w, n, 0.05f);
            fill(x, n, 1.0f);
            llm_quantize_row(t, w, wq, n);
            llm_quantize_act_ref(at, x, xq, n);
            llm_dequantize_row(t, wq, wd, n);
            llm_dequantize_row(at, xq, xd, n);
            for (int64_t j = 0; j < n; j++) {
                ref += (double) wd[j] * xd[j];
                norm += fabs((double) wd[j] * xd[j]);
            }
            llm_vec_dot_ref(t, n, &s, wq, xq);
            CHECK(fabs(s - ref) <= 1e-5 * norm + 1e-6,
                  "%s dot %.7g vs dequantized %.7g", llm_type_name(t), s,
                  ref);
        }
    }

    tk_end_as("scalar vec_dot agrees with dequantize on every type");
    free(w);
    free(x);
    free(wd);
    free(xd);
    free(wq);
    free(xq);
}


/*
 * One gemm of nr rows x nc columns over the first gn of each row's n
 * values against the scalar reference (within 2e-5 of the sum of
 * |w x|), with a padded ldy that must stay untouched; then each column
 * alone, whose results must be bit-identical (the engine's batch
 * invariance).  y and yr hold (nr + 1) x nc floats, y1 nr.
 */
static void
check_gemm(llm_simd_t level, llm_type_t t, int64_t n, int64_t gn, int nr,
    int nc, const float *w, const float *x, const void *wq, size_t wrow,
    const void *xq, size_t xrow, float *y, float *yr, float *y1)
{
    size_t  ldy = nr + 1;
    int     bad = 0;

    for (int k = 0; k < (nr + 1) * nc; k++) {
        y[k] = yr[k] = -12345.f;
    }
    llm_gemm(t, gn, nr, nc, wq, wrow, xq, xrow, y, ldy);
    for (int c = 0; c < nc; c++) {
        for (int r = 0; r < nr; r++) {
            llm_vec_dot_ref(t, gn, &yr[c * ldy + r],
                            (const char *) wq + r * wrow,
                            (const char *) xq + c * xrow);
        }
    }
    for (int c = 0; c < nc; c++) {
        for (int r = 0; r < nr; r++) {
            double  norm = 0;
            for (int64_t j = 0; j < gn; j++) {
                norm += fabsf(w[r * n + j] * x[c * n + j]);
            }
            float  d = y[c * ldy + r] - yr[c * ldy + r];
            bad += !(fabs(d) <= 2e-5 * norm);
        }
        bad += y[c * ldy + nr] != -12345.f;     /* padding */
    }
    CHECK(bad == 0, "%s gemm %s n=%lld %dx%d: %d wrong",
          llm_simd_name(level), llm_type_name(t), (long long) gn, nr, nc,
          bad);

    bad = 0;
    for (int c = 0; nc > 1 && c < nc; c++) {
        llm_gemm(t, gn, nr, 1, wq, wrow, (const char *) xq + c * xrow, xrow,
                 y1, nr);
        bad += memcmp(y1, &y[c * ldy], nr * sizeof(float)) != 0;
    }
    CHECK(bad == 0, "%s gemm %s n=%lld %dx%d: %d columns differ from the"
          " same column alone", llm_simd_name(level), llm_type_name(t),
          (long long) gn, nr, nc, bad);

    /* and each row as alone: a result must not change with the rows
     * computed beside it */
    bad = 0;
    for (int r = 0; nr > 1 && r < nr; r++) {
        llm_gemm(t, gn, 1, nc, (const char *) wq + r * wrow, wrow, xq, xrow,
                 y1, 1);
        for (int c = 0; c < nc; c++) {
            bad += memcmp(&y1[c], &y[c * ldy + r], sizeof(float)) != 0;
        }
    }
    CHECK(bad == 0, "%s gemm %s n=%lld %dx%d: %d results differ from the"
          " same row alone", llm_simd_name(level), llm_type_name(t),
          (long long) gn, nr, nc, bad);
}


/* SIMD kernels against the scalar reference. */
static void
test_simd_level(llm_simd_t level)
{
    /* 33 columns: past LLM_ROW_COLS, the prepared-row tiles */
    static const int  sizes[] = { 1, 2, 3, 5, 7, 8, 17, 33 };
    /* and column counts the 16-wide tiles take in one group */
    static const int  cols[] = { 1, 2, 3, 5, 7, 8, 12, 16, 17, 33 };
    const int64_t     n = 256 * 6;
    const int         maxr = 33, maxc = 33;
    float            *w = malloc(n * maxr * sizeof(float));
    float            *x = malloc(n * maxc * sizeof(float));
    void             *wq = malloc(n * maxr * 4);
    void             *xq = malloc(n * maxc * 4 + 4096);
    void             *xr = malloc(n * 4 + 4096);
    float            *y = malloc((maxr + 1) * maxc * sizeof(float));
    float            *yr = malloc((maxr + 1) * maxc * sizeof(float));
    float            *y1 = malloc((maxr + maxc) * sizeof(float));
    char              name[256], errs[512];
    int               eoff = 0;

    if (llm_simd_force(level) != 0) {
        snprintf(name, sizeof(name), "simd %s", llm_simd_name(level));
        tk_skip(name, "not supported here");
        goto done;
    }

    /* activation quantization */
    static const llm_type_t  acts[] = { LLM_TYPE_F32, LLM_TYPE_Q8_0,
                                        LLM_TYPE_Q8_K };
    for (size_t a = 0; a < 3; a++) {
        size_t  bytes = llm_row_bytes(acts[a], n);

        for (int rep = 0; rep < 50; rep++) {
            fill(x, n, rep % 2 ? 1.0f : 1e-3f);
            if (rep == 3) {
                memset(x, 0, 512 * sizeof(float));
            }
            llm_quantize_act(acts[a], x, xq, n);
            llm_quantize_act_ref(acts[a], x, xr, n);
            CHECK(memcmp(xq, xr, bytes) == 0, "%s quantize_act %s differs",
                  llm_simd_name(level), llm_type_name(acts[a]));
        }
    }

    for (size_t i = 0; i < N_WEIGHT_TYPES; i++) {
        llm_type_t  t = weight_types[i], at = llm_type_vec_dot_type(t);
        size_t      wrow = llm_row_bytes(t, n), xrow = llm_row_bytes(at, n);
        double      worst = 0;

        fill(w, n * maxr, 0.05f);
        fill(x, n * maxc, 1.0f);
        for (int r = 0; r < maxr; r++) {
            llm_quantize_row(t, w + r * n, (char *) wq + r * wrow, n);
        }
        for (int c = 0; c < maxc; c++) {
            llm_quantize_act_ref(at, x + c * n, (char *) xq + c * xrow, n);
        }

        /* vec_dot at several lengths */
        int64_t  blk = llm_type_info(t)->block < 32
                       ? 32 : llm_type_info(t)->block;
        for (int64_t len = blk; len <= n; len += blk) {
            for (int r = 0; r < 3; r++) {
                float   s, sr;
                double  norm = 0;

                llm_vec_dot(t, len, &s, (char *) wq + r * wrow, xq);
                llm_vec_dot_ref(t, len, &sr, (char *) wq + r * wrow, xq);
                for (int64_t j = 0; j < len; j++) {
                    norm += fabsf(w[r * n + j] * x[j]);
                }
                double  e = fabs(s - sr) / (norm + 1e-30);
                worst = e > worst ? e : worst;
                CHECK(e < 2e-5, "%s vec_dot %s n=%lld: %.7g vs %.7g",
                      llm_simd_name(level), llm_type_name(t),
                      (long long) len, s, sr);
            }
        }

        /* gemm over odd shapes, with padding in strides and ldy; for
         * 32-blocks also block counts that leave 1..3 over a multiple
         * of 4 (the AVX-512 Q4_0 kernel takes 4 blocks per step) and
         * 1..3 groups of 4 over a multiple of 16 (its quads); for
         * 256-blocks an odd count too (AVX-512 Q4_K pairs them) */
        for (int64_t gn = n; gn >= n - 15 * 32; gn -= blk) {
            if (gn < n - blk && blk != 32) {
                break;
            }
            for (size_t a = 0; a < sizeof(sizes) / sizeof(sizes[0]); a++) {
                for (size_t b = 0; b < sizeof(cols) / sizeof(cols[0]); b++) {
                    check_gemm(level, t, n, gn, sizes[a], cols[b], w, x, wq,
                               wrow, xq, xrow, y, yr, y1);
                }
            }
        }
        eoff += snprintf(errs + eoff, sizeof(errs) - eoff, " %s=%.1e",
                         llm_type_name(t), worst);
    }
    tk_note("%s vec_dot worst rel err:%s\n", llm_simd_name(level), errs);

    snprintf(name, sizeof(name), "simd %s: quantize_act bit-exact, vec_dot"
             " and gemm (1..33 rows x cols) match scalar within 2e-5; a gemm"
             " column or row is bit-identical to that column or row alone",
             llm_simd_name(level));
    tk_end_as("%s", name);

done:
    llm_simd_force(llm_simd_best());
    free(w);
    free(x);
    free(wq);
    free(xq);
    free(xr);
    free(y);
    free(yr);
    free(y1);
}


/* ---- real ggml data ------------------------------------------------- */

/* Expected rel RMS error of ggml's quantization of random weights. */
static double
ggml_bound(uint32_t t)
{
    switch (t) {
    case LLM_TYPE_F16:  return 1e-3;
    case LLM_TYPE_BF16: return 5e-3;
    case LLM_TYPE_Q8_0: return 0.01;
    case LLM_TYPE_Q4_0: return 0.12;
    case LLM_TYPE_Q4_K: return 0.12;
    case LLM_TYPE_Q5_K: return 0.06;
    case LLM_TYPE_Q6_K: return 0.03;
    default:            return 0;
    }
}

/*
 * Compare every non-F32 tensor of qpath with the same tensor of f32path:
 * dequantized values within the type's error; and our reference quantizer
 * on the f32 values reproduces ggml's blocks (reported as a share).
 */
static void
test_ref_pair(const char *dir, const char *qname, const char *fname)
{
    char                      qpath[1100], fpath[1100], err[512], name[600];
    llm_gguf_t               *q = NULL, *f = NULL;
    uint64_t                  blocks = 0, same = 0, tensors = 0;
    double                    worst = 0;

    snprintf(qpath, sizeof(qpath), "%s/reference/%s.gguf", dir, qname);
    snprintf(fpath, sizeof(fpath), "%s/reference/%s.gguf", dir, fname);

    if (llm_gguf_open(&q, qpath, err, sizeof(err)) != 0
        || llm_gguf_open(&f, fpath, err, sizeof(err)) != 0)
    {
        snprintf(name, sizeof(name), "ggml data %s", qname);
        tk_skip(name, "%s", err);
        goto done;
    }

    for (uint64_t i = 0; i < llm_gguf_n_tensors(q); i++) {
        const llm_gguf_tensor_t  *tq = llm_gguf_tensor_at(q, i);
        const llm_gguf_tensor_t  *tf = llm_gguf_find_tensor(f, tq->name);

        if (tq->type == LLM_TYPE_F32) {
            continue;
        }
        CHECK(tf != NULL && tf->type == LLM_TYPE_F32, "%s: %s not F32 in %s",
              qname, tq->name, fname);
        if (tf == NULL || tf->type != LLM_TYPE_F32) {
            continue;
        }

        int64_t  ne0 = tq->ne[0], rows = 1;
        for (uint32_t d = 1; d < tq->n_dims; d++) {
            rows *= tq->ne[d];
        }
        size_t   rb = llm_row_bytes(tq->type, ne0);
        float   *deq = malloc(ne0 * sizeof(float));
        void    *req = malloc(rb);
        double   num = 0, den = 0;
        uint32_t bb = llm_type_info(tq->type)->block_bytes;

        for (int64_t r = 0; r < rows; r++) {
            const float  *src = (const float *) tf->data + r * ne0;
            const char   *qrow = (const char *) tq->data + r * rb;

            llm_dequantize_row(tq->type, qrow, deq, ne0);
            for (int64_t j = 0; j < ne0; j++) {
                num += ((double) deq[j] - src[j]) * ((double) deq[j] - src[j]);
                den += (double) src[j] * src[j];
            }
            llm_quantize_row(tq->type, src, req, ne0);
            for (size_t b = 0; b < rb / bb; b++) {
                blocks++;
                same += memcmp(qrow + b * bb, (char *) req + b * bb, bb) == 0;
            }
        }
        double  e = sqrt(num / (den > 0 ? den : 1));
        worst = e > worst ? e : worst;
        CHECK(e <= ggml_bound(tq->type), "%s %s (%s): rel RMS %.5f > %.5f",
              qname, tq->name, llm_type_name(tq->type), e,
              ggml_bound(tq->type));
        tensors++;
        free(deq);
        free(req);
    }

    CHECK(tensors > 0, "%s: no quantized tensors", qname);
    /* Q8_0/Q4_0 are fully determined; K-quant searches may differ on
     * float ties or fused multiply-adds, so ask for nearly all. */
    CHECK(blocks > 0 && same >= blocks * 0.98, "%s: only %llu of %llu blocks"
          " byte-identical to ggml's", qname, (unsigned long long) same,
          (unsigned long long) blocks);
    snprintf(name, sizeof(name), "ggml data %s: %llu tensors vs f32 worst"
             " rel RMS %.4f; requantized %llu/%llu blocks byte-identical",
             qname, (unsigned long long) tensors, worst,
             (unsigned long long) same, (unsigned long long) blocks);
    tk_end_as("%s", name);

done:
    if (q) {
        llm_gguf_close(q);
    }
    if (f) {
        llm_gguf_close(f);
    }
}


static void
test_reference_files(void)
{
    static const char  *pairs[][2] = {
        { "ref-llama-dense-q4_0", "ref-llama-dense-f32" },
        { "ref-llama-dense-q8_0", "ref-llama-dense-f32" },
        { "ref-llama-dense-q4_k", "ref-llama-dense-f32" },
        { "ref-llama-dense-q6_k", "ref-llama-dense-f32" },
        { "ref-llama-dense-f16",  "ref-llama-dense-f32" },
        { "ref-qwen3moe-q5_k",    "ref-qwen3moe-f32" },
        { "ref-qwen3moe-q4_k",    "ref-qwen3moe-f32" },
        { "ref-qwen3moe-bf16",    "ref-qwen3moe-f32" },
        { "ref-llama-moe-q4_k_m", "ref-llama-moe-f32" },
    };
    for (size_t i = 0; i < sizeof(pairs) / sizeof(pairs[0]); i++) {
        test_ref_pair(tk_shared_dir(), pairs[i][0], pairs[i][1]);
    }
}


/* SwiGLU at each level against the scalar one (libm expf), every length
 * tail and the gate's extremes. */
static void
test_swiglu(void)
{
    enum { N = 203 };
    float   g[N], u[N], ref[N], got[N];
    int     i, l, n;
    double  worst = 0;

    for (i = 0; i < N; i++) {
        g[i] = 6 * rng_normal();
        u[i] = rng_normal();
    }
    g[0] = 0;
    g[1] = -100;
    g[2] = 100;
    g[3] = -87.5f;
    g[4] = 88.5f;
    g[5] = -1e-30f;
    for (l = LLM_SIMD_SCALAR; l < LLM_SIMD_COUNT; l++) {
        if (llm_simd_force((llm_simd_t) l) != 0) {
            continue;
        }
        for (n = 0; n <= N; n += n < 20 ? 1 : 61) {
            memcpy(ref, g, sizeof(g));
            memcpy(got, g, sizeof(g));
            llm_swiglu_ref(ref, u, (size_t) n);
            llm_swiglu_kernel()(got, u, (size_t) n);
            for (i = 0; i < N; i++) {
                double  e = fabs((double) got[i] - ref[i])
                            / (fabs((double) ref[i]) + 1e-30);

                if (i >= n) {
                    CHECK(got[i] == g[i], "swiglu %s wrote past n = %d",
                          llm_simd_name(l), n);
                    break;
                }
                worst = e > worst && ref[i] != 0 ? e : worst;
                CHECK(ref[i] == 0 ? fabsf(got[i]) < 1e-30f : e < 4e-7,
                      "swiglu %s g %g: %g vs %g", llm_simd_name(l), g[i],
                      got[i], ref[i]);
            }
        }
    }
    llm_simd_force(llm_simd_best());
    tk_note("swiglu: worst relative error %.1e\n", worst);
    tk_end_as("swiglu at every level vs the scalar one");
}



/*
 * Rows longer than the transposed AVX-512 tiles hold on the stack (8192
 * values) take the older tiles: the same checks at n = 8448 (264 blocks
 * of 32, 33 of 256).  At n = 8192 the transposed tiles take them in
 * narrower column groups (their prepared columns kept within the L1):
 * 3, 8, 16 and 33 columns then split into groups of a few.
 */
static void
test_long_rows(llm_simd_t level, int64_t n)
{
    static const int  rows[] = { 1, 5 }, cols[] = { 1, 3, 8, 16, 33 };
    const int         maxr = 5, maxc = 33;
    float            *w = malloc(n * maxr * sizeof(float));
    float            *x = malloc(n * maxc * sizeof(float));
    void             *wq = malloc(n * maxr * 4);
    void             *xq = malloc(n * maxc * 4 + 4096);
    float            *y = malloc((maxr + 1) * maxc * sizeof(float));
    float            *yr = malloc((maxr + 1) * maxc * sizeof(float));
    float            *y1 = malloc((maxr + maxc) * sizeof(float));
    char              name[128];

    if (llm_simd_force(level) != 0) {
        goto done;
    }
    for (size_t i = 0; i < N_WEIGHT_TYPES; i++) {
        llm_type_t  t = weight_types[i], at = llm_type_vec_dot_type(t);
        size_t      wrow = llm_row_bytes(t, n), xrow = llm_row_bytes(at, n);

        fill(w, n * maxr, 0.05f);
        fill(x, n * maxc, 1.0f);
        for (int r = 0; r < maxr; r++) {
            llm_quantize_row(t, w + r * n, (char *) wq + r * wrow, n);
        }
        for (int c = 0; c < maxc; c++) {
            llm_quantize_act_ref(at, x + c * n, (char *) xq + c * xrow, n);
        }
        for (size_t a = 0; a < sizeof(rows) / sizeof(rows[0]); a++) {
            for (size_t b = 0; b < sizeof(cols) / sizeof(cols[0]); b++) {
                check_gemm(level, t, n, n, rows[a], cols[b], w, x, wq, wrow,
                           xq, xrow, y, yr, y1);
            }
        }
    }
    snprintf(name, sizeof(name), "simd %s: gemm of %lld-value rows (%s)"
             " matches scalar, columns as alone", llm_simd_name(level),
             (long long) n, n > 8192 ? "the long-row tiles"
                                     : "narrow column groups");
    tk_end_as("%s", name);

done:
    llm_simd_force(llm_simd_best());
    free(w);
    free(x);
    free(wq);
    free(xq);
    free(y);
    free(yr);
    free(y1);
}

/*
 * Weights at every even offset from a cache line and at an odd one: the
 * AVX-512 Q8_0 tile loads whole aligned lines and permutes by the offset,
 * and an odd address takes the pair tiles.
 */
static void
test_offsets(llm_simd_t level)
{
    static const int  cols[] = { 1, 8 };
    const int64_t     n = 256;
    const int         nr = 3, maxc = 8;
    float            *w = malloc(n * nr * sizeof(float));
    float            *x = malloc(n * maxc * sizeof(float));
    char             *buf = aligned_alloc(64, n * nr * 4 + 128);
    void             *xq = malloc(n * maxc * 4);
    float            *y = malloc((nr + 1) * maxc * sizeof(float));
    float            *yr = malloc((nr + 1) * maxc * sizeof(float));
    float            *y1 = malloc((nr + maxc) * sizeof(float));
    char              name[128];

    if (llm_simd_force(level) != 0) {
        goto done;
    }
    for (size_t i = 0; i < N_WEIGHT_TYPES; i++) {
        llm_type_t  t = weight_types[i], at = llm_type_vec_dot_type(t);
        size_t      wrow = llm_row_bytes(t, n), xrow = llm_row_bytes(at, n);

        fill(w, n * nr, 0.05f);
        fill(x, n * maxc, 1.0f);
        for (int c = 0; c < maxc; c++) {
            llm_quantize_act_ref(at, x + c * n, (char *) xq + c * xrow, n);
        }
        for (int k = 0; k <= 32; k++) {
            char    *wq = buf + (k < 32 ? 2 * k : 1);
            size_t   align = t == LLM_TYPE_F32 ? 4
                             : t == LLM_TYPE_F16 || t == LLM_TYPE_BF16 ? 2
                             : 1;

            /* float tensors are aligned to their element in any GGUF
             * (32-byte data alignment); a float row off its element is
             * no input, and the scalar reference's loads would be
             * undefined (UBSan stops there) */
            if ((size_t) (wq - buf) % align != 0) {
                continue;
            }
            for (int r = 0; r < nr; r++) {
                llm_quantize_row(t, w + r * n, wq + r * wrow, n);
            }
            for (size_t b = 0; b < sizeof(cols) / sizeof(cols[0]); b++) {
                check_gemm(level, t, n, n, nr, cols[b], w, x, wq, wrow, xq,
                           xrow, y, yr, y1);
            }
        }
    }
    snprintf(name, sizeof(name), "simd %s: gemm of weights at every even"
             " offset in a line and at an odd one matches scalar",
             llm_simd_name(level));
    tk_end_as("%s", name);

done:
    llm_simd_force(llm_simd_best());
    free(w);
    free(x);
    free(buf);
    free(xq);
    free(y);
    free(yr);
    free(y1);
}

/*
 * Q4_0 regrouped into 16-row runs (Q4_0_R16, what the engine runs Q4_0
 * matrices as with AVX-512): the AVX-512 gemm bit-identical to the scalar
 * reference of its order, every column bit-identical to itself alone or
 * in any batch, all within 2e-5 of the Q4_0 dot product; rows per call 16
 * to 80 (past the 4-group row chunk), columns 1 to 64 (past one 16-column
 * chunk), rows of 1 to 300 blocks (past the 128-block slice).
 */
static void
test_q4_0_r16(void)
{
    static const int64_t  ns[] = { 32, 768, 2048, 300 * 32 };
    static const int      rows[] = { 16, 48, 80 };
    static const int      cols[] = { 1, 2, 3, 7, 8, 9, 16, 17, 33, 64 };
    const int             maxr = 80, maxc = 64;

    if (!llm_simd_supported(LLM_SIMD_AVX512)) {
        tk_skip("Q4_0_R16", "no AVX-512 here");
        return;
    }
    llm_simd_force(LLM_SIMD_AVX512);
    CHECK(llm_repack_type(LLM_TYPE_Q4_0, 48) == LLM_TYPE_Q4_0_R16
          && llm_repack_type(LLM_TYPE_Q4_0, 40) == LLM_TYPE_Q4_0
          && llm_repack_type(LLM_TYPE_Q5_K, 48) == LLM_TYPE_Q5_K,
          "llm_repack_type: Q4_0 x 48 rows regroups, 40 rows or Q5_K not");

    /* with the AMX-INT8 tiles where the CPU has them, then without */
    for (int amx = llm_simd_amx_set(1); amx >= 0; amx--) {
    llm_simd_amx_set(amx);
    for (size_t in = 0; in < sizeof(ns) / sizeof(ns[0]); in++) {
        const int64_t  n = ns[in];
        const size_t   wrow = llm_row_bytes(LLM_TYPE_Q4_0, n);
        const size_t   xrow = llm_row_bytes(LLM_TYPE_Q8_0, n);
        float         *w = malloc(n * maxr * sizeof(float));
        float         *x = malloc(n * maxc * sizeof(float));
        char          *wq = malloc(wrow * maxr), *wr = malloc(wrow * maxr);
        char          *xq = malloc(xrow * maxc);
        float         *y = malloc(maxr * maxc * sizeof(float));
        float         *ys = malloc(maxr * maxc * sizeof(float));
        float         *y1 = malloc(maxr * sizeof(float));

        fill(w, n * maxr, 0.05f);
        fill(x, n * maxc, 1.0f);
        for (int r = 0; r < maxr; r++) {
            llm_quantize_row(LLM_TYPE_Q4_0, w + r * n, wq + r * wrow, n);
        }
        for (int c = 0; c < maxc; c++) {
            llm_quantize_act_ref(LLM_TYPE_Q8_0, x + c * n, xq + c * xrow, n);
        }
        llm_repack_rows(LLM_TYPE_Q4_0, n, maxr, wq, wr);

        for (size_t ir = 0; ir < sizeof(rows) / sizeof(rows[0]); ir++) {
            for (size_t ic = 0; ic < sizeof(cols) / sizeof(cols[0]); ic++) {
                const int  nr = rows[ir], nc = cols[ic];
                int        far = 0, diff = 0, alone = 0;

                llm_gemm(LLM_TYPE_Q4_0_R16, n, nr, nc, wr, wrow, xq, xrow,
                         y, nr);
                llm_simd_force(LLM_SIMD_SCALAR);
                llm_gemm(LLM_TYPE_Q4_0_R16, n, nr, nc, wr, wrow, xq, xrow,
                         ys, nr);
                llm_simd_force(LLM_SIMD_AVX512);
                diff = memcmp(y, ys, nr * nc * sizeof(float)) != 0;
                for (int c = 0; c < nc; c++) {
                    llm_gemm(LLM_TYPE_Q4_0_R16, n, nr, 1, wr, wrow,
                             xq + c * xrow, xrow, y1, nr);
                    alone += memcmp(y1, y + c * nr, nr * sizeof(float)) != 0;
                    for (int r = 0; r < nr; r++) {
                        double  norm = 0;
                        float   ref;

                        llm_vec_dot_ref(LLM_TYPE_Q4_0, n, &ref,
                                        wq + r * wrow, xq + c * xrow);
                        for (int64_t j = 0; j < n; j++) {
                            norm += fabsf(w[r * n + j] * x[c * n + j]);
                        }
                        far += !(fabs(y[c * nr + r] - ref) <= 2e-5 * norm);
                    }
                }
                CHECK(diff == 0 && alone == 0 && far == 0,
                      "Q4_0_R16 n=%lld %dx%d%s: %s scalar, %d columns"
                      " differ alone, %d results off the Q4_0 dot",
                      (long long) n, nr, nc, amx ? " (AMX tiles)" : "",
                      diff ? "differs from" : "as", alone, far);
            }
        }
        free(w);
        free(x);
        free(wq);
        free(wr);
        free(xq);
        free(y);
        free(ys);
        free(y1);
    }
    }
    llm_simd_amx_set(1);
    llm_simd_force(llm_simd_best());
    tk_end_as("Q4_0_R16: AVX-512 gemm bit-identical to its scalar reference"
              " and to each column alone, within 2e-5 of Q4_0");
}

int
main(int argc, char **argv)
{
    (void) argc;
    (void) argv;

    setvbuf(stdout, NULL, _IOLBF, 0);
    llm_simd_init();
    tk_note("simd: best %s, in use %s\n", llm_simd_name(llm_simd_best()),
            llm_simd_name(llm_simd_level()));

    test_conversions();
    test_type_table();
    test_roundtrip();
    test_dot_vs_dequant();
    for (int l = LLM_SIMD_SCALAR + 1; l < LLM_SIMD_COUNT; l++) {
        if (llm_simd_supported((llm_simd_t) l)) {
            test_simd_level((llm_simd_t) l);
            test_long_rows((llm_simd_t) l, 8192);
            test_long_rows((llm_simd_t) l, 8448);
            test_offsets((llm_simd_t) l);
        } else {
            char  name[64];

            snprintf(name, sizeof(name), "simd %s", llm_simd_name(l));
            tk_skip(name, "not this CPU or build");
        }
    }
    test_swiglu();
    test_reference_files();
    test_q4_0_r16();

    return tk_done();
}
