/*
 * Q4_0 (weighted), Q4_1, Q5_0 and Q5_1 rows as ggml quantizes them (see
 * quantize_rows.h).
 *
 * Without importance weights ggml runs the reference quantizers: Q4_1 and
 * Q5_1 map [min, max] of each block of 32 onto 16 / 32 levels, Q5_0 puts
 * the value of largest magnitude on level -16 (as Q4_0 on -8), and the
 * level is (int) (v + 0.5) on the scaled value.  With weights qw (one per
 * column) the weighted searches run: each block's weights are
 * qw * sqrt(sigma2 + x^2), sigma2 the mean square of the whole row;
 * Q4_0 / Q5_0 fit a symmetric scale (make_qx_quants), Q4_1 / Q5_1 a scale
 * and a min (make_qkx3_quants).  Unweighted Q4_0 is kernels/quant.c's.
 */

#include <float.h>
#include <math.h>
#include <string.h>

#include "kernels/kernels_common.h"
#include "quantize_rows.h"

/* The row's mean square, summed in order as ggml's *_impl do. */
static float
ql_sigma2(const float *x, int64_t n)
{
    float  sum_x2 = 0;

    for (int64_t j = 0; j < n; j++) {
        sum_x2 += x[j] * x[j];
    }
    return sum_x2 / n;
}


static void
ql_weights(const float *xb, const float *qw, float sigma2, float *w)
{
    for (int j = 0; j < LLM_QK; j++) {
        w[j] = qw[j] * sqrtf(sigma2 + xb[j] * xb[j]);
    }
}


/* Pack 32 five-bit levels: low nibbles as Q4_0, bit 4 of element j in
 * bit j of the little-endian qh. */
static void
ql_pack5(const uint8_t *L, uint8_t *qs, uint8_t *qh4)
{
    uint32_t  qh = 0;

    for (int j = 0; j < LLM_QK / 2; j++) {
        uint8_t  a = L[j], b = L[j + LLM_QK / 2];

        qs[j] = (uint8_t) ((a & 0x0f) | ((b & 0x0f) << 4));
        qh |= (uint32_t) ((a & 0x10u) >> 4) << j;
        qh |= (uint32_t) ((b & 0x10u) >> 4) << (j + LLM_QK / 2);
    }
    memcpy(qh4, &qh, 4);
}


/* Q4_0 with importance weights (ggml's quantize_row_q4_0_impl). */
void
llm_qz_q4_0w(const float *x, void *dst, int64_t n, const float *qw)
{
    llm_block_q4_0  *b = dst;
    float            w[LLM_QK], sigma2 = ql_sigma2(x, n);
    int8_t           L[LLM_QK];

    for (int64_t ib = 0; ib < n / LLM_QK; ib++, b++) {
        const float  *xb = x + LLM_QK * ib;

        ql_weights(xb, qw + LLM_QK * ib, sigma2, w);
        b->d = llm_fp32_to_fp16(llm_qf_qx(LLM_QK, 8, xb, L, w));
        for (int j = 0; j < 16; j++) {
            b->qs[j] = (uint8_t) (L[j] | (L[j + 16] << 4));
        }
    }
}


static void
ql_q4_1_ref(const float *x, llm_block_q4_1 *b, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, b++, x += LLM_QK) {
        float  min = FLT_MAX, max = -FLT_MAX, d, id;

        for (int j = 0; j < LLM_QK; j++) {
            min = x[j] < min ? x[j] : min;
            max = x[j] > max ? x[j] : max;
        }
        d = (max - min) / 15;
        id = d ? 1.0f / d : 0.0f;
        b->d = llm_fp32_to_fp16(d);
        b->m = llm_fp32_to_fp16(min);

        for (int j = 0; j < LLM_QK / 2; j++) {
            int8_t  a = (int8_t) ((x[j] - min) * id + 0.5f);
            int8_t  c = (int8_t) ((x[j + 16] - min) * id + 0.5f);

            a = a < 15 ? a : 15;
            c = c < 15 ? c : 15;
            b->qs[j] = (uint8_t) (a | (c << 4));
        }
    }
}


void
llm_qz_q4_1(const float *x, void *dst, int64_t n, const float *qw)
{
    llm_block_q4_1  *b = dst;
    float            w[LLM_QK], sigma2, min;
    uint8_t          L[LLM_QK], Laux[LLM_QK];

    if (qw == NULL) {
        ql_q4_1_ref(x, dst, n / LLM_QK);
        return;
    }
    sigma2 = ql_sigma2(x, n);
    for (int64_t ib = 0; ib < n / LLM_QK; ib++, b++) {
        const float  *xb = x + LLM_QK * ib;
        float         d;

        ql_weights(xb, qw + LLM_QK * ib, sigma2, w);
        d = llm_qf_qkx3(LLM_QK, 15, xb, w, L, &min, Laux, -0.9f, 0.05f, 36,
                        0);
        b->d = llm_fp32_to_fp16(d);
        b->m = llm_fp32_to_fp16(-min);
        for (int j = 0; j < 16; j++) {
            b->qs[j] = (uint8_t) (L[j] | (L[j + 16] << 4));
        }
    }
}


static void
ql_q5_0_ref(const float *x, llm_block_q5_0 *b, int64_t nb)
{
    uint8_t  L[LLM_QK];

    for (int64_t i = 0; i < nb; i++, b++, x += LLM_QK) {
        float  amax = 0.0f, max = 0.0f, d, id;

        for (int j = 0; j < LLM_QK; j++) {
            if (amax < fabsf(x[j])) {
                amax = fabsf(x[j]);
                max = x[j];
            }
        }
        d = max / -16;
        id = d ? 1.0f / d : 0.0f;
        b->d = llm_fp32_to_fp16(d);

        for (int j = 0; j < LLM_QK; j++) {
            int8_t  v = (int8_t) (x[j] * id + 16.5f);

            L[j] = (uint8_t) (v < 31 ? v : 31);
        }
        ql_pack5(L, b->qs, b->qh);
    }
}


void
llm_qz_q5_0(const float *x, void *dst, int64_t n, const float *qw)
{
    llm_block_q5_0  *b = dst;
    float            w[LLM_QK], sigma2;
    int8_t           L[LLM_QK];

    if (qw == NULL) {
        ql_q5_0_ref(x, dst, n / LLM_QK);
        return;
    }
    sigma2 = ql_sigma2(x, n);
    for (int64_t ib = 0; ib < n / LLM_QK; ib++, b++) {
        const float  *xb = x + LLM_QK * ib;

        ql_weights(xb, qw + LLM_QK * ib, sigma2, w);
        b->d = llm_fp32_to_fp16(llm_qf_qx(LLM_QK, 16, xb, L, w));
        ql_pack5((const uint8_t *) L, b->qs, b->qh);
    }
}


static void
ql_q5_1_ref(const float *x, llm_block_q5_1 *b, int64_t nb)
{
    uint8_t  L[LLM_QK];

    for (int64_t i = 0; i < nb; i++, b++, x += LLM_QK) {
        float  min = FLT_MAX, max = -FLT_MAX, d, id;

        for (int j = 0; j < LLM_QK; j++) {
            min = x[j] < min ? x[j] : min;
            max = x[j] > max ? x[j] : max;
        }
        d = (max - min) / 31;
        id = d ? 1.0f / d : 0.0f;
        b->d = llm_fp32_to_fp16(d);
        b->m = llm_fp32_to_fp16(min);

        for (int j = 0; j < LLM_QK; j++) {
            L[j] = (uint8_t) ((x[j] - min) * id + 0.5f);
        }
        ql_pack5(L, b->qs, b->qh);
    }
}


void
llm_qz_q5_1(const float *x, void *dst, int64_t n, const float *qw)
{
    llm_block_q5_1  *b = dst;
    float            w[LLM_QK], sigma2, min;
    uint8_t          L[LLM_QK], Laux[LLM_QK];

    if (qw == NULL) {
        ql_q5_1_ref(x, dst, n / LLM_QK);
        return;
    }
    sigma2 = ql_sigma2(x, n);
    for (int64_t ib = 0; ib < n / LLM_QK; ib++, b++) {
        const float  *xb = x + LLM_QK * ib;
        float         d;

        ql_weights(xb, qw + LLM_QK * ib, sigma2, w);
        d = llm_qf_qkx3(LLM_QK, 31, xb, w, L, &min, Laux, -0.9f, 0.05f, 36,
                        0);
        b->d = llm_fp32_to_fp16(d);
        b->m = llm_fp32_to_fp16(-min);
        ql_pack5(L, b->qs, b->qh);
    }
}
