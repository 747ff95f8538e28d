/*
 * The types added to the first eight: Q4_1, Q5_0, Q5_1 (legacy, 32
 * weights a block) and Q2_K, Q3_K (K-quants, 256), with the Q8_1
 * activations Q4_1/Q5_1 pair with.
 *
 * 1. The type table: supported, block sizes, the activation pairing
 *    (Q5_0 with Q8_0, Q4_1/Q5_1 with Q8_1, Q2_K/Q3_K with Q8_K as ggml).
 * 2. Hand-built blocks dequantize exactly to the values put in.  The
 *    blocks are packed the way ggml's reference quantizers pack them (an
 *    element-by-element writer, independent of the dequantizers' loops),
 *    with small integer scales so every value is exact.
 * 3. The Q8_1 activation quantizer: ggml's reference semantics on a
 *    hand-built row (ties away from zero, s = d * sum), and the round trip
 *    of random rows within half a step.
 * 4. Blocks quantized by llama.cpp ($LLM_SHARED/reference, skipped when
 *    absent): every tensor dequantizes to the f32 file's tensor within
 *    the type's error (a layout error gives ~1), and on rows of them the
 *    dot product with a random activation row equals the float sum of the
 *    dequantized weights times the dequantized activations, at every SIMD
 *    level, with each gemm column bit-identical to that column alone.
 */

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/quant.h"
#include "kernels/kernels_common.h"
#include "model/gguf.h"
#include "testkit.h"

static uint64_t  rng_state = 0x2545f4914f6cdd1dull;

static float
rng_sym(void)           /* (-1, 1) */
{
    return ((tk_xorshift64(&rng_state) >> 40) + 0.5f) / 8388608.0f - 1.0f;
}

static const llm_type_t  new_types[] = {
    LLM_TYPE_Q4_1, LLM_TYPE_Q5_0, LLM_TYPE_Q5_1, LLM_TYPE_Q2_K, LLM_TYPE_Q3_K
};
#define N_NEW  (sizeof(new_types) / sizeof(new_types[0]))

/* ---- 1. the type table -------------------------------------------------- */

static void
test_table(void)
{
    tk_begin("type table: Q4_1 Q5_0 Q5_1 Q2_K Q3_K supported, sizes,"
             " activation pairs");
    for (size_t i = 0; i < N_NEW; i++) {
        const llm_type_info_t  *ti = llm_type_info(new_types[i]);

        CHECK(ti != NULL && ti->supported, "%s supported",
              llm_type_name(new_types[i]));
    }
    CHECK(llm_row_bytes(LLM_TYPE_Q4_1, 64) == 40, "q4_1 row");
    CHECK(llm_row_bytes(LLM_TYPE_Q5_0, 64) == 44, "q5_0 row");
    CHECK(llm_row_bytes(LLM_TYPE_Q5_1, 64) == 48, "q5_1 row");
    CHECK(llm_row_bytes(LLM_TYPE_Q8_1, 64) == 72, "q8_1 row");
    CHECK(llm_row_bytes(LLM_TYPE_Q2_K, 512) == 168, "q2_K row");
    CHECK(llm_row_bytes(LLM_TYPE_Q3_K, 512) == 220, "q3_K row");
    CHECK(!llm_type_info(LLM_TYPE_Q8_1)->supported, "q8_1 not a weight");
    CHECK(llm_type_vec_dot_type(LLM_TYPE_Q4_1) == LLM_TYPE_Q8_1, "q4_1 act");
    CHECK(llm_type_vec_dot_type(LLM_TYPE_Q5_1) == LLM_TYPE_Q8_1, "q5_1 act");
    CHECK(llm_type_vec_dot_type(LLM_TYPE_Q5_0) == LLM_TYPE_Q8_0, "q5_0 act");
    CHECK(llm_type_vec_dot_type(LLM_TYPE_Q2_K) == LLM_TYPE_Q8_K, "q2_K act");
    CHECK(llm_type_vec_dot_type(LLM_TYPE_Q3_K) == LLM_TYPE_Q8_K, "q3_K act");
    tk_end();
}

/* ---- 2. hand-built blocks ------------------------------------------------ */

/* Element j of a legacy block: nibble of qs[j % 16] (low for j < 16),
 * 5th bit at bit j of qh (as ggml's quantize_row_q5_*_ref). */
static void
put_legacy(uint8_t *qs, uint8_t *qh, int j, int q)
{
    qs[j % 16] |= (uint8_t) ((q & 0xf) << (j < 16 ? 0 : 4));
    if (qh != NULL && (q & 0x10)) {
        qh[j / 8] |= (uint8_t) (1u << (j % 8));
    }
}

/* Element j of a K block's 2-bit field (as ggml's quantize_row_q2_K_ref
 * and q3_K_ref pack L): qs[32 (j / 128) + j % 32], bits 2 ((j / 32) % 4). */
static void
put_k2(uint8_t *qs, int j, int q)
{
    qs[32 * (j / 128) + j % 32] |= (uint8_t) ((q & 3) << (2 * ((j / 32) % 4)));
}

/* Q3_K's 6-bit scale l (0..63) of sub-block j into scales[12], as the
 * reference quantizer packs them. */
static void
put_q3_scale(uint8_t *sc, int j, int l)
{
    if (j < 8) {
        sc[j] |= (uint8_t) (l & 0xf);
    } else {
        sc[j - 8] |= (uint8_t) ((l & 0xf) << 4);
    }
    sc[8 + j % 4] |= (uint8_t) ((l >> 4) << (2 * (j / 4)));
}

static int
same_floats(const float *a, const float *b, int n, const char *what)
{
    for (int i = 0; i < n; i++) {
        if (memcmp(&a[i], &b[i], 4) != 0) {
            tk_fail("%s: element %d is %.9g, want %.9g", what, i, a[i], b[i]);
            return 0;
        }
    }
    tk_pass();
    return 1;
}

static void
test_hand_blocks(void)
{
    float  got[256], want[256];

    tk_begin("hand-built blocks dequantize exactly (ggml's packing)");

    {   /* Q4_1: w = q * d + m, d = 0.5, m = -3 */
        llm_block_q4_1  b;

        memset(&b, 0, sizeof(b));
        b.d = llm_fp32_to_fp16(0.5f);
        b.m = llm_fp32_to_fp16(-3.0f);
        for (int j = 0; j < 32; j++) {
            int  q = (j * 7 + 3) & 15;

            put_legacy(b.qs, NULL, j, q);
            want[j] = q * 0.5f - 3.0f;
        }
        llm_dequantize_row(LLM_TYPE_Q4_1, &b, got, 32);
        same_floats(got, want, 32, "q4_1");
    }

    {   /* Q5_0: w = (q - 16) * d, d = 0.25 */
        llm_block_q5_0  b;

        memset(&b, 0, sizeof(b));
        b.d = llm_fp32_to_fp16(0.25f);
        for (int j = 0; j < 32; j++) {
            int  q = (j * 11 + 5) & 31;

            put_legacy(b.qs, b.qh, j, q);
            want[j] = (q - 16) * 0.25f;
        }
        llm_dequantize_row(LLM_TYPE_Q5_0, &b, got, 32);
        same_floats(got, want, 32, "q5_0");
    }

    {   /* Q5_1: w = q * d + m, d = 2, m = 1.5 */
        llm_block_q5_1  b;

        memset(&b, 0, sizeof(b));
        b.d = llm_fp32_to_fp16(2.0f);
        b.m = llm_fp32_to_fp16(1.5f);
        for (int j = 0; j < 32; j++) {
            int  q = (j * 13 + 7) & 31;

            put_legacy(b.qs, b.qh, j, q);
            want[j] = q * 2.0f + 1.5f;
        }
        llm_dequantize_row(LLM_TYPE_Q5_1, &b, got, 32);
        same_floats(got, want, 32, "q5_1");
    }

    {   /* Q2_K: w = d sc q - dmin m, d = 1, dmin = 0.5, sc = 1 + s % 15,
         * m = (3 s) % 16 for sub-block s */
        llm_block_q2_K  b;

        memset(&b, 0, sizeof(b));
        b.d = llm_fp32_to_fp16(1.0f);
        b.dmin = llm_fp32_to_fp16(0.5f);
        for (int s = 0; s < 16; s++) {
            b.scales[s] = (uint8_t) ((1 + s % 15) | ((3 * s) % 16) << 4);
        }
        for (int j = 0; j < 256; j++) {
            int  q = (j * 5 + j / 7) & 3, s = j / 16;

            put_k2(b.qs, j, q);
            want[j] = (float) (1 + s % 15) * q - 0.5f * ((3 * s) % 16);
        }
        llm_dequantize_row(LLM_TYPE_Q2_K, &b, got, 256);
        same_floats(got, want, 256, "q2_K");
    }

    {   /* Q3_K: w = d (sc - 32) q, q in -4..3 (hmask bit set: +0, clear:
         * -4), d = 0.125, sc = (5 s + 3) % 64 for sub-block s */
        llm_block_q3_K  b;

        memset(&b, 0, sizeof(b));
        b.d = llm_fp32_to_fp16(0.125f);
        for (int s = 0; s < 16; s++) {
            put_q3_scale(b.scales, s, ((5 * s + 3) % 64) ^ (s & 1 ? 32 : 0));
        }
        for (int j = 0; j < 256; j++) {
            int  L = (j * 3 + j / 9) & 7, s = j / 16;
            int  sc = (((5 * s + 3) % 64) ^ (s & 1 ? 32 : 0)) - 32;

            /* L in 0..7 is q + 4: its bit 2 goes to hmask[j % 32] at bit
             * j / 32, the low two to qs */
            if (L > 3) {
                b.hmask[j % 32] |= (uint8_t) (1u << (j / 32));
            }
            put_k2(b.qs, j, L & 3);
            want[j] = 0.125f * sc * (L - 4);
        }
        llm_dequantize_row(LLM_TYPE_Q3_K, &b, got, 256);
        same_floats(got, want, 256, "q3_K");
    }

    {   /* a scale that is not a power of two: ggml's order of rounding */
        llm_block_q4_1  b;
        float           d, m;

        memset(&b, 0, sizeof(b));
        b.d = llm_fp32_to_fp16(0.0123f);
        b.m = llm_fp32_to_fp16(-0.0917f);
        d = llm_fp16_to_fp32(b.d);
        m = llm_fp16_to_fp32(b.m);
        for (int j = 0; j < 32; j++) {
            volatile float  p;
            int             q = (j * 7 + 3) & 15;

            put_legacy(b.qs, NULL, j, q);
            p = q * d;              /* rounded, then + m: no fused add */
            want[j] = p + m;
        }
        llm_dequantize_row(LLM_TYPE_Q4_1, &b, got, 32);
        same_floats(got, want, 32, "q4_1 fp16 scales");
    }
    tk_end();
}

/* ---- 3. the Q8_1 activation quantizer --------------------------------- */

/* ties at every level: d = 1 and d = 1/4 (x * (1 / d) exact halves),
 * then a zero block; the SIMD quantizers byte for byte the scalar one */
static void
act_q8_1_ties(void)
{
    llm_block_q8_1  b[3];
    float           x[96];

    for (int j = 0; j < 32; j++) {
        x[j] = (j - 16) + 0.5f;
        x[32 + j] = ((j - 16) + 0.5f) / 4;
        x[64 + j] = 0;
    }
    x[31] = 127.0f;
    x[63] = -127.0f / 4;
    llm_quantize_act_ref(LLM_TYPE_Q8_1, x, b, 96);
    for (int l = 0; l < LLM_SIMD_COUNT; l++) {
        llm_block_q8_1  c[3];

        if (!llm_simd_supported((llm_simd_t) l)) {
            continue;
        }
        llm_simd_force((llm_simd_t) l);
        llm_quantize_act(LLM_TYPE_Q8_1, x, c, 96);
        CHECK(memcmp(b, c, sizeof(c)) == 0, "%s: ties quantize differently",
              llm_simd_name((llm_simd_t) l));
    }
}

static void
test_act_q8_1(void)
{
    llm_block_q8_1  b[8];
    float           x[256], y[256];
    int             sum = 0;

    tk_begin("Q8_1 activations: ggml's reference semantics, round trip");

    /* amax 127: d = 1; halves round away from zero (roundf) */
    for (int j = 0; j < 32; j++) {
        x[j] = (j - 16) + 0.5f;
    }
    x[31] = 127.0f;
    llm_quantize_act_ref(LLM_TYPE_Q8_1, x, b, 32);
    CHECK(llm_fp16_to_fp32(b[0].d) == 1.0f, "d %g",
          llm_fp16_to_fp32(b[0].d));
    for (int j = 0; j < 32; j++) {
        int  want = j == 31 ? 127 : (j < 16 ? j - 16 : j - 15);

        CHECK(b[0].qs[j] == want, "q[%d] = %d, want %d", j, b[0].qs[j],
              want);
        sum += want;
    }
    CHECK(llm_fp16_to_fp32(b[0].s) == (float) sum, "s %g, want %d",
          llm_fp16_to_fp32(b[0].s), sum);

    /* a zero block: d = s = 0, q = 0 */
    memset(x, 0, 32 * sizeof(float));
    llm_quantize_act_ref(LLM_TYPE_Q8_1, x, b, 32);
    CHECK(b[0].d == 0 && b[0].s == 0, "zero block d/s");

    /* random rows: |x - q d| within half a step plus d's fp16 rounding,
     * s = d * sum(q) within fp16 rounding, the same at every level */
    for (int j = 0; j < 256; j++) {
        x[j] = rng_sym() * (j % 32 == 5 ? 40.0f : 3.0f);
    }
    llm_quantize_act_ref(LLM_TYPE_Q8_1, x, b, 256);
    llm_dequantize_row(LLM_TYPE_Q8_1, b, y, 256);
    for (int i = 0; i < 8; i++) {
        float  amax = 0, d;
        int    s = 0;

        /* two loops: aarch64 gcc 12 -O2 fails (internal compiler error
         * in vect_transform_reduction) vectorizing both in one */
        for (int j = 0; j < 32; j++) {
            amax = fmaxf(amax, fabsf(x[32 * i + j]));
        }
        for (int j = 0; j < 32; j++) {
            s += b[i].qs[j];
        }
        d = amax / 127;
        for (int j = 0; j < 32; j++) {
            float  e = fabsf(x[32 * i + j] - y[32 * i + j]);

            if (!CHECK(e <= 0.5f * d + 127 * d / 1024, "block %d elem %d:"
                       " |%g - %g| > half step %g", i, j, x[32 * i + j],
                       y[32 * i + j], d / 2)) {
                break;
            }
        }
        CHECK(fabsf(llm_fp16_to_fp32(b[i].s) - d * s)
              <= fabsf(d * s) / 1024 + 1e-6f, "block %d s", i);
    }
    for (int l = 0; l < LLM_SIMD_COUNT; l++) {
        llm_block_q8_1  c[8];

        if (!llm_simd_supported((llm_simd_t) l)) {
            continue;
        }
        llm_simd_force((llm_simd_t) l);
        llm_quantize_act(LLM_TYPE_Q8_1, x, c, 256);
        CHECK(memcmp(b, c, sizeof(c)) == 0, "%s: quantize_act differs",
              llm_simd_name((llm_simd_t) l));
    }

    act_q8_1_ties();
    llm_simd_force(llm_simd_best());
    tk_end();
}

/* ---- 4. blocks quantized by llama.cpp -------------------------------- */

/* Relative RMS error bound of a tensor against its f32 source. */
static double
type_bound(uint32_t t)
{
    switch (t) {
    case LLM_TYPE_Q4_1: return 0.1;
    case LLM_TYPE_Q5_0: return 0.05;
    case LLM_TYPE_Q5_1: return 0.05;
    case LLM_TYPE_Q2_K: return 0.35;
    case LLM_TYPE_Q3_K: return 0.2;
    default:            return 0.15;
    }
}

/*
 * For weight rows of type t (rows of n values at w, rb bytes apart): the
 * dot with nc random activation rows, at every SIMD level, against the
 * double sum of dequantized weights times dequantized activations.  The
 * tolerance is float rounding of the per-block products, plus for Q8_1
 * the fp16 rounding of s (m * s enters instead of m * sum(d q)).
 */
static void
check_dots(uint32_t t, const char *w, size_t rb, int64_t n, int64_t nr,
    double *worst)
{
    llm_type_t   at = llm_type_vec_dot_type((llm_type_t) t);
    size_t       xb = llm_row_bytes(at, n);
    int          nc = 3;
    float       *x = malloc(n * sizeof(float)), *wd = malloc(n * sizeof(float));
    float       *xd = malloc(n * sizeof(float)), *y = malloc(nr * nc * 4);
    char        *xq = malloc(xb * nc);
    int64_t      blk = llm_type_info(at)->block;

    for (int c = 0; c < nc; c++) {
        for (int64_t j = 0; j < n; j++) {
            x[j] = rng_sym() * (1 + c);
        }
        llm_quantize_act_ref(at, x, xq + c * xb, n);
    }

    for (int l = 0; l < LLM_SIMD_COUNT; l++) {
        if (!llm_simd_supported((llm_simd_t) l)) {
            continue;
        }
        llm_simd_force((llm_simd_t) l);
        llm_gemm((llm_type_t) t, n, nr, nc, w, rb, xq, xb, y, nr);

        for (int64_t r = 0; r < nr; r++) {
            llm_dequantize_row((llm_type_t) t, w + r * rb, wd, n);
            for (int c = 0; c < nc; c++) {
                const char  *xc = xq + c * xb;
                double       sum = 0, mag = 0, tol;
                float        s, s1;

                llm_dequantize_row(at, xc, xd, n);
                for (int64_t j = 0; j < n; j++) {
                    sum += (double) wd[j] * xd[j];
                    mag += fabs((double) wd[j] * xd[j]);
                }
                tol = 1e-5 * mag + 1e-6;
                if (at == LLM_TYPE_Q8_1) {
                    for (int64_t b = 0; b < n / blk; b++) {
                        const llm_block_q8_1  *qb = (const void *)
                                                    (xc + b * sizeof(*qb));
                        uint16_t               m;

                        /* m is the second fp16 of Q4_1 and Q5_1 blocks */
                        memcpy(&m, w + r * rb
                               + b * llm_type_info(t)->block_bytes + 2, 2);
                        tol += fabs((double) llm_fp16_to_fp32(m)
                                    * llm_fp16_to_fp32(qb->s)) / 1024;
                    }
                }
                llm_vec_dot_ref((llm_type_t) t, n, &s, w + r * rb, xc);
                llm_vec_dot((llm_type_t) t, n, &s1, w + r * rb, xc);
                if (!CHECK(fabs(s - sum) <= tol, "%s row %lld col %d: dot"
                           " %.7g, dequantized %.7g (tol %.2g)",
                           llm_type_name(t), (long long) r, c, s, sum, tol)
                    || !CHECK(fabsf(s1 - s) <= 1e-5f * (float) mag,
                              "%s %s: vec_dot %.7g, ref %.7g",
                              llm_simd_name((llm_simd_t) l),
                              llm_type_name(t), s1, s)
                    || !CHECK(memcmp(&y[c * nr + r], &s1, 4) == 0,
                              "%s %s: gemm column %d differs from alone",
                              llm_simd_name((llm_simd_t) l),
                              llm_type_name(t), c))
                {
                    goto out;
                }
                if (mag > 0 && fabs(s - sum) / mag > *worst) {
                    *worst = fabs(s - sum) / mag;
                }
            }
        }
    }
out:
    llm_simd_force(llm_simd_best());
    free(x);
    free(wd);
    free(xd);
    free(y);
    free(xq);
}

/* ---- 5. random legacy blocks, odd block counts ------------------------ */

/* A random fp16 scale of magnitude about 2^-6..2^-4, either sign. */
static uint16_t
rng_scale(void)
{
    return llm_fp32_to_fp16(rng_sym() * 0.06f);
}

/*
 * Q4_1, Q5_0, Q5_1 rows of 1, 2, 3, 5 and 7 blocks of random bytes
 * (every quant and 5th-bit pattern; an odd count takes the AVX-512
 * tiles' scalar last block): at every level vec_dot against the scalar
 * reference, and each column of a 5 x 5 gemm against that column alone.
 */
static void
test_random_legacy(void)
{
    static const llm_type_t  types[] = {
        LLM_TYPE_Q4_1, LLM_TYPE_Q5_0, LLM_TYPE_Q5_1
    };
    enum { NR = 5, NC = 5, MAXB = 7 };
    static const int  counts[] = { 1, 2, 3, 5, 7 };
    float             x[MAXB * 32], y[NR * NC], wd[MAXB * 32];
    float             xd[MAXB * 32];
    char              w[NR * MAXB * 24], xq[NC * MAXB * 36];

    tk_begin("Q4_1 Q5_0 Q5_1: random blocks, odd counts, every level");
    for (size_t t = 0; t < sizeof(types) / sizeof(types[0]); t++) {
        llm_type_t  at = llm_type_vec_dot_type(types[t]);
        size_t      bb = llm_type_info(types[t])->block_bytes;

        for (size_t k = 0; k < sizeof(counts) / sizeof(counts[0]); k++) {
            int64_t  n = 32 * counts[k];
            size_t   rb = llm_row_bytes(types[t], n);
            size_t   xb = llm_row_bytes(at, n);

            for (size_t i = 0; i < NR * rb; i++) {
                w[i] = (char) tk_xorshift64(&rng_state);
            }
            for (int r = 0; r < NR; r++) {
                for (int b = 0; b < counts[k]; b++) {
                    uint16_t  d = rng_scale(), m = rng_scale();
                    char     *p = w + r * rb + b * bb;

                    memcpy(p, &d, 2);
                    if (types[t] != LLM_TYPE_Q5_0) {
                        memcpy(p + 2, &m, 2);
                    }
                }
            }
            for (int c = 0; c < NC; c++) {
                for (int64_t j = 0; j < n; j++) {
                    x[j] = rng_sym() * (1 + c);
                }
                llm_quantize_act_ref(at, x, xq + c * xb, n);
            }
            for (int l = 0; l < LLM_SIMD_COUNT; l++) {
                if (!llm_simd_supported((llm_simd_t) l)) {
                    continue;
                }
                llm_simd_force((llm_simd_t) l);
                llm_gemm(types[t], n, NR, NC, w, rb, xq, xb, y, NR);
                for (int r = 0; r < NR; r++) {
                    for (int c = 0; c < NC; c++) {
                        float  s, s1, mag = 0;

                        llm_dequantize_row(types[t], w + r * rb, wd, n);
                        llm_dequantize_row(at, xq + c * xb, xd, n);
                        for (int64_t j = 0; j < n; j++) {
                            mag += fabsf(wd[j] * xd[j]);
                        }
                        llm_vec_dot_ref(types[t], n, &s, w + r * rb,
                                        xq + c * xb);
                        llm_vec_dot(types[t], n, &s1, w + r * rb,
                                    xq + c * xb);
                        CHECK(fabsf(s1 - s) <= 1e-5f * mag,
                              "%s %s nb %d: vec_dot %.7g, ref %.7g",
                              llm_simd_name((llm_simd_t) l),
                              llm_type_name(types[t]), counts[k], s1, s);
                        CHECK(memcmp(&y[c * NR + r], &s1, 4) == 0,
                              "%s %s nb %d: gemm (%d, %d) differs from"
                              " alone", llm_simd_name((llm_simd_t) l),
                              llm_type_name(types[t]), counts[k], r, c);
                    }
                }
            }
        }
    }
    llm_simd_force(llm_simd_best());
    tk_end();
}

static void
test_ggml_file(const char *dir, const char *qname, uint32_t want_type)
{
    char         qpath[1100], fpath[1100], err[512];
    llm_gguf_t  *q = NULL, *f = NULL;
    int          tensors = 0;
    double       worst = 0, dworst = 0;

    snprintf(qpath, sizeof(qpath), "%s/reference/%s.gguf", dir, qname);
    snprintf(fpath, sizeof(fpath), "%s/reference/ref-qwen3moe-f32.gguf",
             dir);
    if (llm_gguf_open(&q, qpath, err, sizeof(err)) != 0
        || llm_gguf_open(&f, fpath, err, sizeof(err)) != 0)
    {
        tk_skip(qname, "%s", err);
        goto done;
    }

    tk_begin("%s", qname);
    for (uint64_t i = 0; i < llm_gguf_n_tensors(q); i++) {
        const llm_gguf_tensor_t  *tq = llm_gguf_tensor_at(q, i);
        const llm_gguf_tensor_t  *tf = llm_gguf_find_tensor(f, tq->name);
        int64_t                   ne0 = tq->ne[0], rows = 1;
        double                    num = 0, den = 0, e;
        size_t                    rb;
        float                    *deq;

        if (tq->type != want_type) {
            continue;
        }
        if (!CHECK(tf != NULL && tf->type == LLM_TYPE_F32, "%s: no f32 %s",
                   qname, tq->name)) {
            continue;
        }
        for (uint32_t d = 1; d < tq->n_dims; d++) {
            rows *= tq->ne[d];
        }
        rb = llm_row_bytes(tq->type, ne0);
        deq = malloc(ne0 * sizeof(float));
        for (int64_t r = 0; r < rows; r++) {
            const float  *src = (const float *) tf->data + r * ne0;

            llm_dequantize_row(tq->type, (const char *) tq->data + r * rb,
                               deq, ne0);
            for (int64_t j = 0; j < ne0; j++) {
                num += ((double) deq[j] - src[j]) * ((double) deq[j] - src[j]);
                den += (double) src[j] * src[j];
            }
        }
        free(deq);
        e = sqrt(num / (den > 0 ? den : 1));
        worst = e > worst ? e : worst;
        CHECK(e <= type_bound(tq->type), "%s %s: rel RMS %.4f > %.2f", qname,
              tq->name, e, type_bound(tq->type));

        /* the first 8 rows (and a few from the end) of each tensor */
        check_dots(tq->type, tq->data, rb, ne0, rows < 8 ? rows : 8, &dworst);
        if (rows > 8) {
            check_dots(tq->type, (const char *) tq->data + (rows - 3) * rb,
                       rb, ne0, 3, &dworst);
        }
        tensors++;
    }
    CHECK(tensors > 0, "%s: no %s tensors", qname, llm_type_name(want_type));
    tk_end_as("%s: %d %s tensors vs f32 worst rel RMS %.4f; dots vs"
              " dequantized worst %.2g of sum|w x|, every level", qname,
              tensors, llm_type_name(want_type), worst, dworst);
done:
    if (q) {
        llm_gguf_close(q);
    }
    if (f) {
        llm_gguf_close(f);
    }
}

int
main(int argc, char **argv)
{
    static const struct {
        const char  *name;
        uint32_t     type;
    } files[] = {
        { "ref-qwen3moe-q4_1", LLM_TYPE_Q4_1 },
        { "ref-qwen3moe-q5_0", LLM_TYPE_Q5_0 },
        { "ref-qwen3moe-q5_1", LLM_TYPE_Q5_1 },
        { "ref-qwen3moe-q2_k", LLM_TYPE_Q2_K },
        { "ref-qwen3moe-q3_k_m", LLM_TYPE_Q3_K },
    };

    (void) argc;
    (void) argv;
    setvbuf(stdout, NULL, _IOLBF, 0);
    llm_simd_init();

    test_table();
    test_hand_blocks();
    test_act_q8_1();
    test_random_legacy();
    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
        test_ggml_file(tk_shared_dir(), files[i].name, files[i].type);
    }
    return tk_done();
}
