/*
 * Tensor types: the type table, fp16/bf16 conversion and the scalar
 * reference kernels (dequantize, quantize, activation quantize, dot
 * products).  The run-time SIMD dispatch is dispatch.c.
 *
 * The scalar kernels are the definition of correct: every SIMD kernel in
 * kernels_avx2.c / kernels_avx512.c is tested against them.  Integer dot
 * products are exact, so SIMD versions differ only by float summation
 * order.
 */

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>

#include "quant.h"
#include "kernels_common.h"


static const llm_type_info_t  llm_types[LLM_TYPE_COUNT] = {
    [LLM_TYPE_F32]  = { "F32",  1, 4, 1 },
    [LLM_TYPE_F16]  = { "F16",  1, 2, 1 },
    [LLM_TYPE_Q4_0] = { "Q4_0", LLM_QK, sizeof(llm_block_q4_0), 1 },
    [LLM_TYPE_Q4_1] = { "Q4_1", LLM_QK, sizeof(llm_block_q4_1), 1 },
    [LLM_TYPE_Q5_0] = { "Q5_0", LLM_QK, sizeof(llm_block_q5_0), 1 },
    [LLM_TYPE_Q5_1] = { "Q5_1", LLM_QK, sizeof(llm_block_q5_1), 1 },
    [LLM_TYPE_Q8_0] = { "Q8_0", LLM_QK, sizeof(llm_block_q8_0), 1 },
    /* activation type only: not a weight type */
    [LLM_TYPE_Q8_1] = { "Q8_1", LLM_QK, sizeof(llm_block_q8_1), 0 },
    [LLM_TYPE_Q2_K] = { "Q2_K", LLM_QK_K, sizeof(llm_block_q2_K), 1 },
    [LLM_TYPE_Q3_K] = { "Q3_K", LLM_QK_K, sizeof(llm_block_q3_K), 1 },
    [LLM_TYPE_Q4_K] = { "Q4_K", LLM_QK_K, sizeof(llm_block_q4_K), 1 },
    [LLM_TYPE_Q5_K] = { "Q5_K", LLM_QK_K, sizeof(llm_block_q5_K), 1 },
    [LLM_TYPE_Q6_K] = { "Q6_K", LLM_QK_K, sizeof(llm_block_q6_K), 1 },
    /* activation type only: not a weight type */
    [LLM_TYPE_Q8_K] = { "Q8_K", LLM_QK_K, sizeof(llm_block_q8_K), 0 },
    [LLM_TYPE_IQ1_S] = { "IQ1_S", LLM_QK_K, sizeof(llm_block_iq1_s), 1 },
    [LLM_TYPE_IQ3_XXS] = { "IQ3_XXS", LLM_QK_K, sizeof(llm_block_iq3_xxs),
                           1 },
    [LLM_TYPE_IQ4_NL] = { "IQ4_NL", LLM_QK, sizeof(llm_block_iq4_nl), 1 },
    [LLM_TYPE_IQ3_S] = { "IQ3_S", LLM_QK_K, sizeof(llm_block_iq3_s), 1 },
    [LLM_TYPE_IQ4_XS] = { "IQ4_XS", LLM_QK_K, sizeof(llm_block_iq4_xs), 1 },
    [LLM_TYPE_IQ1_M] = { "IQ1_M", LLM_QK_K, sizeof(llm_block_iq1_m), 1 },
    [LLM_TYPE_IQ2_XXS] = { "IQ2_XXS", LLM_QK_K, sizeof(llm_block_iq2_xxs),
                           1 },
    [LLM_TYPE_IQ2_XS] = { "IQ2_XS", LLM_QK_K, sizeof(llm_block_iq2_xs), 1 },
    [LLM_TYPE_IQ2_S] = { "IQ2_S", LLM_QK_K, sizeof(llm_block_iq2_s), 1 },
    [LLM_TYPE_BF16] = { "BF16", 1, 2, 1 },
    [LLM_TYPE_MXFP4] = { "MXFP4", LLM_QK, sizeof(llm_block_mxfp4), 1 },
    /* made at load (llm_repack_rows), never read from a file */
    [LLM_TYPE_Q4_0_R16] = { "Q4_0_R16", LLM_QK, sizeof(llm_block_q4_0), 0 },
    [LLM_TYPE_IQ4_NL_R16] = { "IQ4_NL_R16", LLM_QK,
                              sizeof(llm_block_iq4_nl), 0 },
    [LLM_TYPE_MXFP4_R16] = { "MXFP4_R16", LLM_QK, sizeof(llm_block_mxfp4), 0 },
    [LLM_TYPE_IQ4_XS_R16] = { "IQ4_XS_R16", LLM_QK_K,
                              sizeof(llm_block_iq4_xs), 0 },
    [LLM_TYPE_Q2_K_R16] = { "Q2_K_R16", LLM_QK_K, sizeof(llm_block_q2_K), 0 },
    [LLM_TYPE_Q3_K_R16] = { "Q3_K_R16", LLM_QK_K, sizeof(llm_block_q3_K), 0 },
    [LLM_TYPE_Q8_0_R16] = { "Q8_0_R16", LLM_QK, sizeof(llm_block_q8_0), 0 },
    [LLM_TYPE_Q4_K_R16] = { "Q4_K_R16", LLM_QK_K, sizeof(llm_block_q4_K), 0 },
    [LLM_TYPE_Q6_K_R16] = { "Q6_K_R16", LLM_QK_K, sizeof(llm_block_q6_K), 0 },
};


/*
 * The name of every type id in ggml's enum (ggml.h, enum ggml_type), run
 * here or not, so a message about any tensor a file may hold names its
 * type.  The gaps are ids ggml retired: 4 and 5 (Q4_2, Q4_3), 31-33
 * (Q4_0_4_4, Q4_0_4_8, Q4_0_8_8), 36-38 (IQ4_NL_4_4, _4_8, _8_8).
 * llm_types above names the types this engine knows the layout of; the
 * two agree (test_type_names).
 */
static const char *const  llm_ggml_names[] = {
    [0] = "F32",        [1] = "F16",        [2] = "Q4_0",
    [3] = "Q4_1",       [6] = "Q5_0",       [7] = "Q5_1",
    [8] = "Q8_0",       [9] = "Q8_1",       [10] = "Q2_K",
    [11] = "Q3_K",      [12] = "Q4_K",      [13] = "Q5_K",
    [14] = "Q6_K",      [15] = "Q8_K",      [16] = "IQ2_XXS",
    [17] = "IQ2_XS",    [18] = "IQ3_XXS",   [19] = "IQ1_S",
    [20] = "IQ4_NL",    [21] = "IQ3_S",     [22] = "IQ2_S",
    [23] = "IQ4_XS",    [24] = "I8",        [25] = "I16",
    [26] = "I32",       [27] = "I64",       [28] = "F64",
    [29] = "IQ1_M",     [30] = "BF16",      [34] = "TQ1_0",
    [35] = "TQ2_0",     [39] = "MXFP4",
};


const llm_type_info_t *
llm_type_info(uint32_t type)
{
    if (type >= LLM_TYPE_COUNT || llm_types[type].name == NULL) {
        return NULL;
    }

    return &llm_types[type];
}


const char *
llm_type_name(uint32_t type)
{
    const llm_type_info_t  *ti = llm_type_info(type);
    size_t                  n = sizeof(llm_ggml_names)
                                / sizeof(llm_ggml_names[0]);

    if (ti != NULL) {
        return ti->name;
    }

    return type < n && llm_ggml_names[type] != NULL ? llm_ggml_names[type]
                                                    : "?";
}


/*
 * The float types first (they are what a file's norms and small tensors
 * hold), then the block types in id order: "F32, F16, BF16, Q4_0, ...".
 */
size_t
llm_type_list_supported(char *buf, size_t len)
{
    size_t    used = 0;
    int       n, pass;
    uint32_t  t;

    if (len > 0) {
        buf[0] = '\0';
    }

    for (pass = 0; pass < 2; pass++) {
        for (t = 0; t < LLM_TYPE_COUNT; t++) {
            const llm_type_info_t  *ti = &llm_types[t];

            if (ti->name == NULL || !ti->supported
                || (ti->block == 1) != (pass == 0))
            {
                continue;
            }
            n = snprintf(buf + (used < len ? used : len),
                         used < len ? len - used : 0, "%s%s",
                         used ? ", " : "", ti->name);
            used += (size_t) n;
        }
    }

    return used;
}


size_t
llm_row_bytes(uint32_t type, int64_t n)
{
    const llm_type_info_t  *ti = llm_type_info(type);

    if (ti == NULL || n < 0 || n % ti->block != 0) {
        return 0;
    }

    return (size_t) (n / ti->block) * ti->block_bytes;
}


llm_type_t
llm_type_vec_dot_type(llm_type_t t)
{
    switch (t) {
    case LLM_TYPE_Q4_0:
    case LLM_TYPE_Q4_0_R16:
    case LLM_TYPE_Q8_0:
    case LLM_TYPE_Q8_0_R16:
    case LLM_TYPE_Q5_0:
    case LLM_TYPE_IQ4_NL:
    case LLM_TYPE_IQ4_NL_R16:
    case LLM_TYPE_MXFP4:
    case LLM_TYPE_MXFP4_R16:
        return LLM_TYPE_Q8_0;
    case LLM_TYPE_Q4_1:
    case LLM_TYPE_Q5_1:
        return LLM_TYPE_Q8_1;
    case LLM_TYPE_Q2_K:
    case LLM_TYPE_Q3_K:
    case LLM_TYPE_Q2_K_R16:
    case LLM_TYPE_Q3_K_R16:
    case LLM_TYPE_Q4_K:
    case LLM_TYPE_Q4_K_R16:
    case LLM_TYPE_Q5_K:
    case LLM_TYPE_Q6_K:
    case LLM_TYPE_Q6_K_R16:
    case LLM_TYPE_IQ4_XS:
    case LLM_TYPE_IQ4_XS_R16:
    case LLM_TYPE_IQ1_S:
    case LLM_TYPE_IQ1_M:
    case LLM_TYPE_IQ2_XXS:
    case LLM_TYPE_IQ2_XS:
    case LLM_TYPE_IQ2_S:
    case LLM_TYPE_IQ3_XXS:
    case LLM_TYPE_IQ3_S:
        return LLM_TYPE_Q8_K;
    default:
        return LLM_TYPE_F32;
    }
}


/* ---- conversions ---------------------------------------------------- */

float
llm_fp16_to_fp32(uint16_t h)
{
    return llm_h2f(h);
}


/* IEEE binary16 with round to nearest even, NaN kept quiet (as F16C). */
uint16_t
llm_fp32_to_fp16(float f)
{
    uint32_t  x, sign, odd;
    float     a;

    memcpy(&x, &f, 4);
    sign = (x >> 16) & 0x8000;
    x &= 0x7fffffff;

    if (x > 0x7f800000) {
        return (uint16_t) (sign | 0x7e00 | ((x >> 13) & 0x3ff));
    }

    if (x >= 0x477ff000) {          /* >= 65520 rounds to infinity */
        return (uint16_t) (sign | 0x7c00);
    }

    if (x < 0x38800000) {           /* below 2^-14: subnormal half */
        memcpy(&a, &x, 4);
        a += 0.5f;                  /* the float's ulp is now 2^-24 */
        memcpy(&x, &a, 4);
        return (uint16_t) (sign | (x - 0x3f000000));
    }

    odd = (x >> 13) & 1;
    x += 0xc8000fffu + odd;         /* rebias exponent, round to even */
    return (uint16_t) (sign | (x >> 13));
}


float
llm_bf16_to_fp32(uint16_t h)
{
    uint32_t  u = (uint32_t) h << 16;
    float     f;

    memcpy(&f, &u, 4);
    return f;
}


/* As ggml_compute_fp32_to_bf16: round to nearest even, NaN made quiet. */
uint16_t
llm_fp32_to_bf16(float f)
{
    uint32_t  u;

    memcpy(&u, &f, 4);

    if ((u & 0x7fffffff) > 0x7f800000) {
        return (uint16_t) ((u >> 16) | 64);
    }

    return (uint16_t) ((u + (0x7fff + ((u >> 16) & 1))) >> 16);
}


/* ---- dequantization ------------------------------------------------- */

static void
llm_dequant_q4_0(const llm_block_q4_0 *b, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, b++, y += LLM_QK) {
        float  d = llm_h2f(b->d);

        for (int j = 0; j < LLM_QK / 2; j++) {
            y[j] = d * ((b->qs[j] & 0xf) - 8);
            y[j + LLM_QK / 2] = d * ((b->qs[j] >> 4) - 8);
        }
    }
}


static void
llm_dequant_q8_0(const llm_block_q8_0 *b, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, b++, y += LLM_QK) {
        float  d = llm_h2f(b->d);

        for (int j = 0; j < LLM_QK; j++) {
            y[j] = d * b->qs[j];
        }
    }
}


static void
llm_dequant_q4_K(const llm_block_q4_K *b, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, b++) {
        float           d = llm_h2f(b->d), dmin = llm_h2f(b->dmin);
        const uint8_t  *q = b->qs;
        uint8_t         sc, m;

        for (int j = 0; j < LLM_QK_K / 64; j++, q += 32) {
            llm_get_scale_min_k4(2 * j, b->scales, &sc, &m);
            float  d1 = d * sc, m1 = dmin * m;
            llm_get_scale_min_k4(2 * j + 1, b->scales, &sc, &m);
            float  d2 = d * sc, m2 = dmin * m;

            for (int l = 0; l < 32; l++) {
                *y++ = d1 * (q[l] & 0xf) - m1;
            }
            for (int l = 0; l < 32; l++) {
                *y++ = d2 * (q[l] >> 4) - m2;
            }
        }
    }
}


static void
llm_dequant_q5_K(const llm_block_q5_K *b, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, b++) {
        float           d = llm_h2f(b->d), dmin = llm_h2f(b->dmin);
        const uint8_t  *ql = b->qs;
        uint8_t         sc, m, u1 = 1, u2 = 2;

        for (int j = 0; j < LLM_QK_K / 64; j++, ql += 32) {
            llm_get_scale_min_k4(2 * j, b->scales, &sc, &m);
            float  d1 = d * sc, m1 = dmin * m;
            llm_get_scale_min_k4(2 * j + 1, b->scales, &sc, &m);
            float  d2 = d * sc, m2 = dmin * m;

            for (int l = 0; l < 32; l++) {
                *y++ = d1 * ((ql[l] & 0xf) + (b->qh[l] & u1 ? 16 : 0)) - m1;
            }
            for (int l = 0; l < 32; l++) {
                *y++ = d2 * ((ql[l] >> 4) + (b->qh[l] & u2 ? 16 : 0)) - m2;
            }
            u1 <<= 2;
            u2 <<= 2;
        }
    }
}


static void
llm_dequant_q6_K(const llm_block_q6_K *b, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, b++) {
        float           d = llm_h2f(b->d);
        const uint8_t  *ql = b->ql, *qh = b->qh;
        const int8_t   *sc = b->scales;

        for (int n = 0; n < LLM_QK_K; n += 128) {
            for (int l = 0; l < 32; l++) {
                int  is = l / 16;
                int  q1 = ((ql[l] & 0xf) | ((qh[l] & 3) << 4)) - 32;
                int  q2 = ((ql[l + 32] & 0xf) | (((qh[l] >> 2) & 3) << 4))
                          - 32;
                int  q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                int  q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4))
                          - 32;

                y[l] = d * sc[is] * q1;
                y[l + 32] = d * sc[is + 2] * q2;
                y[l + 64] = d * sc[is + 4] * q3;
                y[l + 96] = d * sc[is + 6] * q4;
            }
            y += 128;
            ql += 64;
            qh += 32;
            sc += 8;
        }
    }
}


static void
llm_dequant_q8_K(const llm_block_q8_K *b, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, b++, y += LLM_QK_K) {
        for (int j = 0; j < LLM_QK_K; j++) {
            y[j] = b->d * b->qs[j];
        }
    }
}


/*
 * dst[0..n) = the values of row src of type t.  n must be a multiple of the
 * block size; unsupported types produce zeros (the loader rejects them
 * before anything gets here).
 */
void
llm_dequantize_row(llm_type_t t, const void *src, float *dst, int64_t n)
{
    const uint16_t  *h = src;
    int64_t          i;

    switch (t) {
    case LLM_TYPE_F32:
        memcpy(dst, src, n * sizeof(float));
        break;
    case LLM_TYPE_F16:
        for (i = 0; i < n; i++) {
            dst[i] = llm_h2f(h[i]);
        }
        break;
    case LLM_TYPE_BF16:
        for (i = 0; i < n; i++) {
            dst[i] = llm_bf16_to_fp32(h[i]);
        }
        break;
    case LLM_TYPE_Q4_0:
        llm_dequant_q4_0(src, dst, n / LLM_QK);
        break;
    case LLM_TYPE_Q8_0:
        llm_dequant_q8_0(src, dst, n / LLM_QK);
        break;
    case LLM_TYPE_Q4_K:
        llm_dequant_q4_K(src, dst, n / LLM_QK_K);
        break;
    case LLM_TYPE_Q5_K:
        llm_dequant_q5_K(src, dst, n / LLM_QK_K);
        break;
    case LLM_TYPE_Q6_K:
        llm_dequant_q6_K(src, dst, n / LLM_QK_K);
        break;
    case LLM_TYPE_Q8_K:
        llm_dequant_q8_K(src, dst, n / LLM_QK_K);
        break;
    case LLM_TYPE_Q4_1:
        llm_dequant_q4_1(src, dst, n / LLM_QK);
        break;
    case LLM_TYPE_Q5_0:
        llm_dequant_q5_0(src, dst, n / LLM_QK);
        break;
    case LLM_TYPE_Q5_1:
        llm_dequant_q5_1(src, dst, n / LLM_QK);
        break;
    case LLM_TYPE_Q8_1:
        llm_dequant_q8_1(src, dst, n / LLM_QK);
        break;
    case LLM_TYPE_Q2_K:
        llm_dequant_q2_K(src, dst, n / LLM_QK_K);
        break;
    case LLM_TYPE_Q3_K:
        llm_dequant_q3_K(src, dst, n / LLM_QK_K);
        break;
    case LLM_TYPE_IQ4_NL:
        llm_iq4_nl_dequant(src, dst, n / LLM_QK);
        break;
    case LLM_TYPE_IQ4_XS:
        llm_iq4_xs_dequant(src, dst, n / LLM_QK_K);
        break;
    case LLM_TYPE_MXFP4:
        llm_mxfp4_dequant(src, dst, n / LLM_QK);
        break;
    case LLM_TYPE_IQ1_S:
        llm_iq1_s_dequant(src, dst, n / LLM_QK_K);
        break;
    case LLM_TYPE_IQ1_M:
        llm_iq1_m_dequant(src, dst, n / LLM_QK_K);
        break;
    case LLM_TYPE_IQ2_XXS:
        llm_iq2_xxs_dequant(src, dst, n / LLM_QK_K);
        break;
    case LLM_TYPE_IQ2_XS:
        llm_iq2_xs_dequant(src, dst, n / LLM_QK_K);
        break;
    case LLM_TYPE_IQ2_S:
        llm_iq2_s_dequant(src, dst, n / LLM_QK_K);
        break;
    case LLM_TYPE_IQ3_XXS:
        llm_iq3_xxs_dequant(src, dst, n / LLM_QK_K);
        break;
    case LLM_TYPE_IQ3_S:
        llm_iq3_s_dequant(src, dst, n / LLM_QK_K);
        break;
    default:
        memset(dst, 0, n * sizeof(float));
        break;
    }
}


/* ---- weight quantization (reference, as ggml's *_ref) --------------- */

static void
llm_quant_q4_0(const float *x, llm_block_q4_0 *b, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, b++, x += LLM_QK) {
        float  amax = 0.0f, max = 0.0f;

        for (int j = 0; j < LLM_QK; j++) {
            if (amax < fabsf(x[j])) {
                amax = fabsf(x[j]);
                max = x[j];
            }
        }

        /* the largest magnitude maps to -8, which has no +8 twin */
        float  d = max / -8;
        float  id = d ? 1.0f / d : 0.0f;

        b->d = llm_fp32_to_fp16(d);

        for (int j = 0; j < LLM_QK / 2; j++) {
            int  q0 = (int8_t) (x[j] * id + 8.5f);
            int  q1 = (int8_t) (x[j + LLM_QK / 2] * id + 8.5f);

            q0 = q0 > 15 ? 15 : q0;
            q1 = q1 > 15 ? 15 : q1;
            b->qs[j] = (uint8_t) (q0 | (q1 << 4));
        }
    }
}


static void
llm_quant_q8_0(const float *x, llm_block_q8_0 *b, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, b++, x += LLM_QK) {
        float  amax = 0.0f;

        for (int j = 0; j < LLM_QK; j++) {
            amax = fmaxf(amax, fabsf(x[j]));
        }

        float  d = amax / 127;
        float  id = d ? 1.0f / d : 0.0f;

        b->d = llm_fp32_to_fp16(d);

        for (int j = 0; j < LLM_QK; j++) {
            b->qs[j] = (int8_t) roundf(x[j] * id);
        }
    }
}


/*
 * Fit x[0..n) ~ scale * L + min with L in 0..nmax and min <= 0, by
 * weighted least squares over nstep candidate scales around
 * nmax / (max - min) (ggml's make_qkx2_quants idea).  Returns the scale,
 * writes L and *the_min = -min (>= 0).
 */
static float
llm_fit_scale_min(int n, int nmax, const float *x, const float *w,
    uint8_t *L, float *the_min, float rmin, float rdelta, int nstep)
{
    uint8_t  Laux[32];
    float    min = x[0], max = x[0], sum_w = w[0], sum_x = w[0] * x[0];
    float    iscale, scale, best, err, diff;
    int      i, is, l;

    for (i = 1; i < n; i++) {
        min = x[i] < min ? x[i] : min;
        max = x[i] > max ? x[i] : max;
        sum_w += w[i];
        sum_x += w[i] * x[i];
    }

    if (min > 0) {
        min = 0;
    }

    if (max == min) {
        memset(L, 0, n);
        *the_min = -min;
        return 0.f;
    }

    iscale = nmax / (max - min);
    scale = 1 / iscale;
    best = 0;

    for (i = 0; i < n; i++) {
        l = llm_nearest_int(iscale * (x[i] - min));
        l = l < 0 ? 0 : (l > nmax ? nmax : l);
        L[i] = (uint8_t) l;
        diff = scale * l + min - x[i];
        best += w[i] * diff * diff;
    }

    for (is = 0; is <= nstep; is++) {
        float  sum_l = 0, sum_l2 = 0, sum_xl = 0, D;

        iscale = (rmin + rdelta * is + nmax) / (max - min);

        for (i = 0; i < n; i++) {
            l = llm_nearest_int(iscale * (x[i] - min));
            l = l < 0 ? 0 : (l > nmax ? nmax : l);
            Laux[i] = (uint8_t) l;
            sum_l += w[i] * l;
            sum_l2 += w[i] * l * l;
            sum_xl += w[i] * l * x[i];
        }

        D = sum_w * sum_l2 - sum_l * sum_l;
        if (D <= 0) {
            continue;
        }

        float  this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
        float  this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;

        if (this_min > 0) {
            this_min = 0;
            this_scale = sum_xl / sum_l2;
        }

        err = 0;
        for (i = 0; i < n; i++) {
            diff = this_scale * Laux[i] + this_min - x[i];
            err += w[i] * diff * diff;
        }

        if (err < best) {
            memcpy(L, Laux, n);
            best = err;
            scale = this_scale;
            min = this_min;
        }
    }

    *the_min = -min;
    return scale;
}


/* Pack 8 six-bit scales and mins into a Q4_K/Q5_K scales[12]. */
static void
llm_pack_scale_min_k4(uint8_t *q, const uint8_t *ls, const uint8_t *lm)
{
    memset(q, 0, 12);

    for (int j = 0; j < 8; j++) {
        if (j < 4) {
            q[j] = ls[j];
            q[j + 4] = lm[j];

        } else {
            q[j + 4] = (ls[j] & 0xf) | ((lm[j] & 0xf) << 4);
            q[j - 4] |= (ls[j] >> 4) << 6;
            q[j] |= (lm[j] >> 4) << 6;
        }
    }
}


/*
 * Common to Q4_K (nmax 15) and Q5_K (nmax 31): per 32-element sub-block
 * fit scale and min, quantize the 8 of each to 6 bits against the block's
 * fp16 d and dmin, then requantize every weight against the rounded
 * scales.  Writes d, dmin, scales[12] and L[256].
 */
static void
llm_quant_k_scale_min(const float *x, int nmax, uint16_t *dd,
    uint16_t *ddmin, uint8_t *scales12, uint8_t *L)
{
    float    w[32], scales[8], mins[8], max_scale = 0, max_min = 0;
    float    inv_scale, inv_min, d, dmin, sum_x2, av_x;
    uint8_t  ls[8], lm[8], sc, m;
    int      j, l, v;

    for (j = 0; j < 8; j++) {
        sum_x2 = 0;
        for (l = 0; l < 32; l++) {
            sum_x2 += x[32 * j + l] * x[32 * j + l];
        }
        av_x = sqrtf(sum_x2 / 32);
        for (l = 0; l < 32; l++) {
            w[l] = av_x + fabsf(x[32 * j + l]);
        }

        scales[j] = llm_fit_scale_min(32, nmax, x + 32 * j, w, L + 32 * j,
                                      &mins[j], nmax == 15 ? -1.f : -0.5f,
                                      0.1f, nmax == 15 ? 20 : 15);
        max_scale = scales[j] > max_scale ? scales[j] : max_scale;
        max_min = mins[j] > max_min ? mins[j] : max_min;
    }

    inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
    inv_min = max_min > 0 ? 63.f / max_min : 0.f;

    for (j = 0; j < 8; j++) {
        v = llm_nearest_int(inv_scale * scales[j]);
        ls[j] = (uint8_t) (v > 63 ? 63 : v);
        v = llm_nearest_int(inv_min * mins[j]);
        lm[j] = (uint8_t) (v > 63 ? 63 : v);
    }

    llm_pack_scale_min_k4(scales12, ls, lm);
    *dd = llm_fp32_to_fp16(max_scale / 63.f);
    *ddmin = llm_fp32_to_fp16(max_min / 63.f);

    for (j = 0; j < 8; j++) {
        llm_get_scale_min_k4(j, scales12, &sc, &m);
        d = llm_h2f(*dd) * sc;
        if (d == 0) {
            continue;
        }
        dmin = llm_h2f(*ddmin) * m;
        for (l = 0; l < 32; l++) {
            v = llm_nearest_int((x[32 * j + l] + dmin) / d);
            L[32 * j + l] = (uint8_t) (v < 0 ? 0 : (v > nmax ? nmax : v));
        }
    }
}


static void
llm_quant_q4_K(const float *x, llm_block_q4_K *b, int64_t nb)
{
    uint8_t  L[LLM_QK_K];

    for (int64_t i = 0; i < nb; i++, b++, x += LLM_QK_K) {
        uint16_t  d, dmin;

        llm_quant_k_scale_min(x, 15, &d, &dmin, b->scales, L);
        b->d = d;
        b->dmin = dmin;

        uint8_t  *q = b->qs;
        for (int j = 0; j < LLM_QK_K; j += 64, q += 32) {
            for (int l = 0; l < 32; l++) {
                q[l] = L[j + l] | (L[j + l + 32] << 4);
            }
        }
    }
}


static void
llm_quant_q5_K(const float *x, llm_block_q5_K *b, int64_t nb)
{
    uint8_t  L[LLM_QK_K];

    for (int64_t i = 0; i < nb; i++, b++, x += LLM_QK_K) {
        uint16_t  d, dmin;

        llm_quant_k_scale_min(x, 31, &d, &dmin, b->scales, L);
        b->d = d;
        b->dmin = dmin;

        uint8_t  *ql = b->qs, m1 = 1, m2 = 2;
        memset(b->qh, 0, sizeof(b->qh));

        for (int n = 0; n < LLM_QK_K; n += 64, ql += 32) {
            for (int j = 0; j < 32; j++) {
                int  l1 = L[n + j], l2 = L[n + j + 32];

                if (l1 > 15) {
                    l1 -= 16;
                    b->qh[j] |= m1;
                }
                if (l2 > 15) {
                    l2 -= 16;
                    b->qh[j] |= m2;
                }
                ql[j] = (uint8_t) (l1 | (l2 << 4));
            }
            m1 <<= 2;
            m2 <<= 2;
        }
    }
}


/*
 * Symmetric fit x ~ scale * (L - nmax), L in 0..2nmax-1, weights x^2,
 * trying 19 scales around -nmax/max (ggml's make_qx_quants, rmse_type 1).
 */
static float
llm_fit_scale_sym(int n, int nmax, const float *x, uint8_t *L)
{
    float  max = 0, amax = 0, iscale, sumlx, suml2, scale, best, w;
    int    i, is, l;

    for (i = 0; i < n; i++) {
        if (fabsf(x[i]) > amax) {
            amax = fabsf(x[i]);
            max = x[i];
        }
    }

    if (amax < 1e-15f) {
        memset(L, 0, n);
        return 0.f;
    }

    iscale = -nmax / max;
    sumlx = suml2 = 0;
    for (i = 0; i < n; i++) {
        l = llm_nearest_int(iscale * x[i]);
        l = l < -nmax ? -nmax : (l > nmax - 1 ? nmax - 1 : l);
        L[i] = (uint8_t) (l + nmax);
        w = x[i] * x[i];
        sumlx += w * x[i] * l;
        suml2 += w * l * l;
    }
    scale = suml2 ? sumlx / suml2 : 0.0f;
    best = scale * sumlx;

    for (is = -9; is <= 9; is++) {
        if (is == 0) {
            continue;
        }
        iscale = -(nmax + 0.1f * is) / max;
        sumlx = suml2 = 0;
        for (i = 0; i < n; i++) {
            l = llm_nearest_int(iscale * x[i]);
            l = l < -nmax ? -nmax : (l > nmax - 1 ? nmax - 1 : l);
            w = x[i] * x[i];
            sumlx += w * x[i] * l;
            suml2 += w * l * l;
        }
        if (suml2 > 0 && sumlx * sumlx > best * suml2) {
            for (i = 0; i < n; i++) {
                l = llm_nearest_int(iscale * x[i]);
                l = l < -nmax ? -nmax : (l > nmax - 1 ? nmax - 1 : l);
                L[i] = (uint8_t) (l + nmax);
            }
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }

    return scale;
}


static void
llm_quant_q6_K(const float *x, llm_block_q6_K *b, int64_t nb)
{
    uint8_t  L[LLM_QK_K];
    float    scales[16];

    for (int64_t i = 0; i < nb; i++, b++, x += LLM_QK_K) {
        float  max_scale = 0, max_abs = 0, iscale, d;
        int    j, l, v;

        for (j = 0; j < 16; j++) {
            scales[j] = llm_fit_scale_sym(16, 32, x + 16 * j, L + 16 * j);
            if (fabsf(scales[j]) > max_abs) {
                max_abs = fabsf(scales[j]);
                max_scale = scales[j];
            }
        }

        if (max_abs < 1e-15f) {
            memset(b, 0, sizeof(*b));
            continue;
        }

        iscale = -128.f / max_scale;
        b->d = llm_fp32_to_fp16(1 / iscale);
        for (j = 0; j < 16; j++) {
            v = llm_nearest_int(iscale * scales[j]);
            b->scales[j] = (int8_t) (v > 127 ? 127 : v);
        }

        for (j = 0; j < 16; j++) {
            d = llm_h2f(b->d) * b->scales[j];
            if (d == 0) {
                continue;
            }
            for (l = 0; l < 16; l++) {
                v = llm_nearest_int(x[16 * j + l] / d);
                v = v < -32 ? -32 : (v > 31 ? 31 : v);
                L[16 * j + l] = (uint8_t) (v + 32);
            }
        }

        uint8_t  *ql = b->ql, *qh = b->qh;
        for (j = 0; j < LLM_QK_K; j += 128, ql += 64, qh += 32) {
            for (l = 0; l < 32; l++) {
                uint8_t  q1 = L[j + l], q2 = L[j + l + 32];
                uint8_t  q3 = L[j + l + 64], q4 = L[j + l + 96];

                ql[l] = (q1 & 0xf) | ((q3 & 0xf) << 4);
                ql[l + 32] = (q2 & 0xf) | ((q4 & 0xf) << 4);
                qh[l] = (q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4)
                        | ((q4 >> 4) << 6);
            }
        }
    }
}


/* ---- activation quantization (reference) ---------------------------- */

/*
 * Q8_0 activations: d = amax / 127, q = round-to-even(x * 127 / amax).
 * The SIMD versions compute exactly this, so they match bit for bit.
 */
static void
llm_act_q8_0(const float *x, void *dst, int64_t n)
{
    llm_block_q8_0  *b = dst;

    for (int64_t i = 0; i < n / LLM_QK; i++, b++, x += LLM_QK) {
        float  amax = 0.0f;

        for (int j = 0; j < LLM_QK; j++) {
            amax = fmaxf(amax, fabsf(x[j]));
        }

        float  id = amax != 0.0f ? 127.f / amax : 0.0f;

        b->d = llm_fp32_to_fp16(amax / 127.f);
        for (int j = 0; j < LLM_QK; j++) {
            b->qs[j] = (int8_t) llm_nearest_int(x[j] * id);
        }
    }
}


/*
 * Q8_K activations: d = max / -127 where max is the signed value of
 * largest magnitude, so q in -127..127, plus the 16 sums of 16.
 */
static void
llm_act_q8_K(const float *x, void *dst, int64_t n)
{
    llm_block_q8_K  *b = dst;

    for (int64_t i = 0; i < n / LLM_QK_K; i++, b++, x += LLM_QK_K) {
        float  amax = 0.0f, max = 0.0f;

        for (int j = 0; j < LLM_QK_K; j++) {
            if (fabsf(x[j]) > amax) {
                amax = fabsf(x[j]);
                max = x[j];
            }
        }

        if (amax == 0.0f) {
            memset(b, 0, sizeof(*b));
            continue;
        }

        float  iscale = -127.f / max;

        for (int j = 0; j < LLM_QK_K; j++) {
            int  v = llm_nearest_int(iscale * x[j]);

            b->qs[j] = (int8_t) (v > 127 ? 127 : (v < -127 ? -127 : v));
        }
        for (int j = 0; j < LLM_QK_K / 16; j++) {
            int  sum = 0;

            for (int l = 0; l < 16; l++) {
                sum += b->qs[16 * j + l];
            }
            b->bsums[j] = (int16_t) sum;
        }
        b->d = 1 / iscale;
    }
}


static void
llm_act_f32(const float *x, void *dst, int64_t n)
{
    memcpy(dst, x, n * sizeof(float));
}


/*
 * dst = row src in type t, as ggml's reference quantizers produce it (for
 * tools: llm-quantize, llm-mkmodel).  Float types are converted with
 * round-to-nearest-even.
 */
void
llm_quantize_row(llm_type_t t, const float *src, void *dst, int64_t n)
{
    uint16_t  *h = dst;
    int64_t    i;

    switch (t) {
    case LLM_TYPE_F32:
        memcpy(dst, src, n * sizeof(float));
        break;
    case LLM_TYPE_F16:
        for (i = 0; i < n; i++) {
            h[i] = llm_fp32_to_fp16(src[i]);
        }
        break;
    case LLM_TYPE_BF16:
        for (i = 0; i < n; i++) {
            h[i] = llm_fp32_to_bf16(src[i]);
        }
        break;
    case LLM_TYPE_Q4_0:
        llm_quant_q4_0(src, dst, n / LLM_QK);
        break;
    case LLM_TYPE_Q8_0:
        llm_quant_q8_0(src, dst, n / LLM_QK);
        break;
    case LLM_TYPE_Q4_K:
        llm_quant_q4_K(src, dst, n / LLM_QK_K);
        break;
    case LLM_TYPE_Q5_K:
        llm_quant_q5_K(src, dst, n / LLM_QK_K);
        break;
    case LLM_TYPE_Q6_K:
        llm_quant_q6_K(src, dst, n / LLM_QK_K);
        break;
    case LLM_TYPE_Q8_K:
        llm_act_q8_K(src, dst, n);
        break;
    case LLM_TYPE_Q8_1:
        llm_act_q8_1(src, dst, n);
        break;
    default:
        memset(dst, 0, llm_row_bytes(t, n));
        break;
    }
}


/* ---- scalar dot products -------------------------------------------- */

static void
llm_dot_f32(int64_t n, float *s, const void *w, const void *x)
{
    const float  *a = w, *b = x;
    double        sum = 0;

    for (int64_t i = 0; i < n; i++) {
        sum += (double) a[i] * b[i];
    }
    *s = (float) sum;
}


static void
llm_dot_f16(int64_t n, float *s, const void *w, const void *x)
{
    const uint16_t  *a = w;
    const float     *b = x;
    double           sum = 0;

    for (int64_t i = 0; i < n; i++) {
        sum += (double) llm_h2f(a[i]) * b[i];
    }
    *s = (float) sum;
}


static void
llm_dot_bf16(int64_t n, float *s, const void *w, const void *x)
{
    const uint16_t  *a = w;
    const float     *b = x;
    double           sum = 0;

    for (int64_t i = 0; i < n; i++) {
        sum += (double) llm_bf16_to_fp32(a[i]) * b[i];
    }
    *s = (float) sum;
}


static void
llm_dot_q4_0(int64_t n, float *s, const void *w, const void *x)
{
    const llm_block_q4_0  *a = w;
    const llm_block_q8_0  *b = x;
    float                  sum = 0;

    for (int64_t i = 0; i < n / LLM_QK; i++) {
        int  si = 0;

        for (int j = 0; j < LLM_QK / 2; j++) {
            si += ((a[i].qs[j] & 0xf) - 8) * b[i].qs[j]
                  + ((a[i].qs[j] >> 4) - 8) * b[i].qs[j + LLM_QK / 2];
        }
        sum += si * (llm_h2f(a[i].d) * llm_h2f(b[i].d));
    }
    *s = sum;
}


/*
 * Q4_0_R16 x Q8_0, the reference of the SIMD kernel's order: per row, the
 * exact integer sum of a block, then acc = fma(sum, d_w * d_x, acc) block
 * after block (fmaf: one rounding, as vfmadd).
 */
static void
llm_gemm_q4_0_r16(int64_t n, int64_t nr, int64_t nc, const void *w,
    size_t ws, const void *x, size_t xs, float *y, size_t ldy)
{
    const int64_t  nb = n / LLM_QK;

    for (int64_t g = 0; g < nr / 16; g++) {
        const llm_block_q4_0x16  *wg = (const void *) ((const char *) w
                                                       + g * 16 * ws);

        for (int64_t c = 0; c < nc; c++) {
            const llm_block_q8_0  *q = (const void *) ((const char *) x
                                                       + c * xs);

            for (int r = 0; r < 16; r++) {
                float  acc = 0;

                for (int64_t b = 0; b < nb; b++) {
                    int  si = 0;

                    for (int i = 0; i < 4; i++) {
                        for (int j = 0; j < 4; j++) {
                            int  v = wg[b].qs[i][4 * r + j];

                            si += ((v & 0xf) - 8) * q[b].qs[4 * i + j]
                                  + ((v >> 4) - 8) * q[b].qs[16 + 4 * i + j];
                        }
                    }
                    acc = fmaf((float) si,
                               llm_h2f(wg[b].d[r]) * llm_h2f(q[b].d), acc);
                }
                y[c * ldy + g * 16 + r] = acc;
            }
        }
    }
}


static void
llm_dot_q8_0(int64_t n, float *s, const void *w, const void *x)
{
    const llm_block_q8_0  *a = w, *b = x;
    float                  sum = 0;

    for (int64_t i = 0; i < n / LLM_QK; i++) {
        int  si = 0;

        for (int j = 0; j < LLM_QK; j++) {
            si += a[i].qs[j] * b[i].qs[j];
        }
        sum += si * (llm_h2f(a[i].d) * llm_h2f(b[i].d));
    }
    *s = sum;
}


/*
 * Q4_K . Q8_K: per block, d * sum_j sc_j * (q_j . y_j)
 * - dmin * sum_j m_j * (sum of y_j), the latter from bsums.
 */
static void
llm_dot_q4_K(int64_t n, float *s, const void *w, const void *x)
{
    const llm_block_q4_K  *a = w;
    const llm_block_q8_K  *b = x;
    float                  sum = 0;
    uint8_t                sc, m;

    for (int64_t i = 0; i < n / LLM_QK_K; i++, a++, b++) {
        int  isum = 0, msum = 0;

        for (int j = 0; j < 8; j++) {
            const uint8_t  *q = a->qs + 32 * (j / 2);
            const int8_t   *y = b->qs + 32 * j;
            int             shift = (j & 1) * 4, dot = 0;

            llm_get_scale_min_k4(j, a->scales, &sc, &m);
            for (int l = 0; l < 32; l++) {
                dot += ((q[l] >> shift) & 0xf) * y[l];
            }
            isum += sc * dot;
            msum += m * (b->bsums[2 * j] + b->bsums[2 * j + 1]);
        }
        sum += b->d * llm_h2f(a->d) * isum - b->d * llm_h2f(a->dmin) * msum;
    }
    *s = sum;
}


static void
llm_dot_q5_K(int64_t n, float *s, const void *w, const void *x)
{
    const llm_block_q5_K  *a = w;
    const llm_block_q8_K  *b = x;
    float                  sum = 0;
    uint8_t                sc, m;

    for (int64_t i = 0; i < n / LLM_QK_K; i++, a++, b++) {
        int  isum = 0, msum = 0;

        for (int j = 0; j < 8; j++) {
            const uint8_t  *q = a->qs + 32 * (j / 2);
            const int8_t   *y = b->qs + 32 * j;
            int             shift = (j & 1) * 4, dot = 0;

            llm_get_scale_min_k4(j, a->scales, &sc, &m);
            for (int l = 0; l < 32; l++) {
                int  v = ((q[l] >> shift) & 0xf)
                         | (((a->qh[l] >> j) & 1) << 4);
                dot += v * y[l];
            }
            isum += sc * dot;
            msum += m * (b->bsums[2 * j] + b->bsums[2 * j + 1]);
        }
        sum += b->d * llm_h2f(a->d) * isum - b->d * llm_h2f(a->dmin) * msum;
    }
    *s = sum;
}


static void
llm_dot_q6_K(int64_t n, float *s, const void *w, const void *x)
{
    const llm_block_q6_K  *a = w;
    const llm_block_q8_K  *b = x;
    float                  sum = 0;

    for (int64_t i = 0; i < n / LLM_QK_K; i++, a++, b++) {
        const uint8_t  *ql = a->ql, *qh = a->qh;
        int             isum = 0;

        /* element h*128 + k*32 + l: nibble (k & 2) of ql[l + 32 (k & 1)],
         * bits 2k of qh[l], scale h*8 + 2k + l/16 */
        for (int h = 0; h < 2; h++, ql += 64, qh += 32) {
            for (int k = 0; k < 4; k++) {
                for (int half = 0; half < 2; half++) {
                    int  dot = 0;

                    for (int l = half * 16; l < half * 16 + 16; l++) {
                        int  lo = k & 1 ? ql[l + 32] : ql[l];
                        int  v;

                        lo = k & 2 ? lo >> 4 : lo & 0xf;
                        v = (lo | (((qh[l] >> (2 * k)) & 3) << 4)) - 32;
                        dot += v * b->qs[h * 128 + k * 32 + l];
                    }
                    isum += a->scales[h * 8 + k * 2 + half] * dot;
                }
            }
        }
        sum += b->d * llm_h2f(a->d) * isum;
    }
    *s = sum;
}


/* The scalar kernels' table: what every SIMD table starts from
 * (dispatch.c) and the reference the tests compare against. */
void
llm_kernels_init_scalar(llm_kernels_t *k)
{
    memset(k, 0, sizeof(*k));
    k->vec_dot[LLM_TYPE_F32] = llm_dot_f32;
    k->vec_dot[LLM_TYPE_F16] = llm_dot_f16;
    k->vec_dot[LLM_TYPE_BF16] = llm_dot_bf16;
    k->vec_dot[LLM_TYPE_Q4_0] = llm_dot_q4_0;
    k->vec_dot[LLM_TYPE_Q8_0] = llm_dot_q8_0;
    k->vec_dot[LLM_TYPE_Q4_K] = llm_dot_q4_K;
    k->vec_dot[LLM_TYPE_Q5_K] = llm_dot_q5_K;
    k->vec_dot[LLM_TYPE_Q6_K] = llm_dot_q6_K;
    k->vec_dot[LLM_TYPE_Q4_1] = llm_dot_q4_1;
    k->vec_dot[LLM_TYPE_Q5_0] = llm_dot_q5_0;
    k->vec_dot[LLM_TYPE_Q5_1] = llm_dot_q5_1;
    k->vec_dot[LLM_TYPE_Q2_K] = llm_dot_q2_K;
    k->vec_dot[LLM_TYPE_Q3_K] = llm_dot_q3_K;
    k->quantize_act[LLM_TYPE_Q8_1] = llm_act_q8_1;
    k->vec_dot[LLM_TYPE_IQ4_NL] = llm_iq4_nl_dot;
    k->vec_dot[LLM_TYPE_IQ4_XS] = llm_iq4_xs_dot;
    k->vec_dot[LLM_TYPE_MXFP4] = llm_mxfp4_dot;
    k->vec_dot[LLM_TYPE_IQ1_S] = llm_iq1_s_dot;
    k->vec_dot[LLM_TYPE_IQ1_M] = llm_iq1_m_dot;
    k->vec_dot[LLM_TYPE_IQ2_XXS] = llm_iq2_xxs_dot;
    k->vec_dot[LLM_TYPE_IQ2_XS] = llm_iq2_xs_dot;
    k->vec_dot[LLM_TYPE_IQ2_S] = llm_iq2_s_dot;
    k->vec_dot[LLM_TYPE_IQ3_XXS] = llm_iq3_xxs_dot;
    k->vec_dot[LLM_TYPE_IQ3_S] = llm_iq3_s_dot;
    k->gemm[LLM_TYPE_Q4_0_R16] = llm_gemm_q4_0_r16;
    k->gemm[LLM_TYPE_IQ4_NL_R16] = llm_gemm_iq4_nl_r16_ref;
    k->gemm[LLM_TYPE_MXFP4_R16] = llm_gemm_mxfp4_r16_ref;
    k->gemm[LLM_TYPE_IQ4_XS_R16] = llm_gemm_iq4_xs_r16_ref;
    k->gemm[LLM_TYPE_Q2_K_R16] = llm_gemm_q2_K_r16_ref;
    k->gemm[LLM_TYPE_Q3_K_R16] = llm_gemm_q3_K_r16_ref;
    k->gemm[LLM_TYPE_Q8_0_R16] = llm_gemm_q8_0_r16_ref;
    k->gemm[LLM_TYPE_Q4_K_R16] = llm_gemm_q4_K_r16_ref;
    k->gemm[LLM_TYPE_Q6_K_R16] = llm_gemm_q6_K_r16_ref;
    k->quantize_act[LLM_TYPE_F32] = llm_act_f32;
    k->quantize_act[LLM_TYPE_Q8_0] = llm_act_q8_0;
    k->quantize_act[LLM_TYPE_Q8_K] = llm_act_q8_K;
}


/* Prepared-column budget of the tiled kernels (kernels_common.h);
 * dispatch.c sets it from the L1 size before any kernel runs. */
int64_t  llm_pre_bytes = 32768 / 6 * 5;       /* a 32 KB L1 */
