/*
 * The legacy 32-weight types Q4_1, Q5_0, Q5_1 and the Q8_1 activation
 * type: scalar reference dequantization, activation quantization and dot
 * products (the definition of correct for any SIMD kernel of them).
 *
 * ggml pairs Q5_0 with Q8_0 activations and Q4_1 / Q5_1 with Q8_1, whose
 * block carries s = d * (sum of its quants) so that the weight's offset m
 * enters a block's dot product as m * s.  Every dot product sums the
 * block's quant products in an int, then scales once per block.
 */

#include <math.h>
#include <string.h>

#include "quant.h"
#include "kernels_common.h"


/* The 5th bits of a Q5_0/Q5_1 block: bit j is element j's (little
 * endian, as ggml reads qh[4] into a uint32_t). */
static inline uint32_t
llm_q5_high_bits(const uint8_t *qh)
{
    return (uint32_t) qh[0] | (uint32_t) qh[1] << 8 | (uint32_t) qh[2] << 16
           | (uint32_t) qh[3] << 24;
}


/* nb Q4_1 blocks to floats: w = d * q + m, q in 0..15 (low nibbles are
 * elements 0..15, high nibbles 16..31); as ggml, d * q rounded, then + m. */
void
llm_dequant_q4_1(const void *src, float *y, int64_t nb)
{
    const llm_block_q4_1  *b = src;

    for (int64_t i = 0; i < nb; i++, b++, y += LLM_QK) {
        float  d = llm_h2f(b->d), m = llm_h2f(b->m);

        for (int j = 0; j < LLM_QK / 2; j++) {
            y[j] = (b->qs[j] & 0xf) * d + m;
            y[j + LLM_QK / 2] = (b->qs[j] >> 4) * d + m;
        }
    }
}


/* nb Q5_0 blocks: w = d * (q - 16), q in 0..31, the 5th bit from qh. */
void
llm_dequant_q5_0(const void *src, float *y, int64_t nb)
{
    const llm_block_q5_0  *b = src;

    for (int64_t i = 0; i < nb; i++, b++, y += LLM_QK) {
        float     d = llm_h2f(b->d);
        uint32_t  qh = llm_q5_high_bits(b->qh);

        for (int j = 0; j < LLM_QK / 2; j++) {
            int  q0 = (b->qs[j] & 0xf) | ((qh >> j) & 1) << 4;
            int  q1 = (b->qs[j] >> 4) | ((qh >> (j + 16)) & 1) << 4;

            y[j] = (q0 - 16) * d;
            y[j + LLM_QK / 2] = (q1 - 16) * d;
        }
    }
}


/* nb Q5_1 blocks: w = d * q + m, q in 0..31. */
void
llm_dequant_q5_1(const void *src, float *y, int64_t nb)
{
    const llm_block_q5_1  *b = src;

    for (int64_t i = 0; i < nb; i++, b++, y += LLM_QK) {
        float     d = llm_h2f(b->d), m = llm_h2f(b->m);
        uint32_t  qh = llm_q5_high_bits(b->qh);

        for (int j = 0; j < LLM_QK / 2; j++) {
            int  q0 = (b->qs[j] & 0xf) | ((qh >> j) & 1) << 4;
            int  q1 = (b->qs[j] >> 4) | ((qh >> (j + 16)) & 1) << 4;

            y[j] = q0 * d + m;
            y[j + LLM_QK / 2] = q1 * d + m;
        }
    }
}


/* nb Q8_1 blocks: w = d * q (s is not needed to read the values). */
void
llm_dequant_q8_1(const void *src, float *y, int64_t nb)
{
    const llm_block_q8_1  *b = src;

    for (int64_t i = 0; i < nb; i++, b++, y += LLM_QK) {
        float  d = llm_h2f(b->d);

        for (int j = 0; j < LLM_QK; j++) {
            y[j] = b->qs[j] * d;
        }
    }
}


/*
 * n floats (a multiple of 32) to Q8_1 as ggml's quantize_row_q8_1_ref:
 * d = amax / 127, q = roundf(x * (1 / d)) (ties away from zero),
 * s = fp16(d * sum of q) with d before its fp16 rounding.
 */
void
llm_act_q8_1(const float *x, void *dst, int64_t n)
{
    llm_block_q8_1  *b = dst;

    for (int64_t i = 0; i < n / LLM_QK; i++, b++, x += LLM_QK) {
        float  amax = 0.0f;
        int    sum = 0;

        for (int j = 0; j < LLM_QK; j++) {
            amax = fmaxf(amax, fabsf(x[j]));
        }

        float  d = amax / 127;
        float  id = d != 0.0f ? 1.0f / d : 0.0f;

        b->d = llm_fp32_to_fp16(d);
        for (int j = 0; j < LLM_QK; j++) {
            b->qs[j] = (int8_t) roundf(x[j] * id);
            sum += b->qs[j];
        }
        b->s = llm_fp32_to_fp16(sum * d);
    }
}


/* Q4_1 . Q8_1: per block d_w d_x * (sum q_w q_x) + m_w * s_x. */
void
llm_dot_q4_1(int64_t n, float *s, const void *w, const void *x)
{
    const llm_block_q4_1  *a = w;
    const llm_block_q8_1  *b = x;
    float                  sum = 0;

    for (int64_t i = 0; i < n / LLM_QK; i++, a++, b++) {
        int  si = 0;

        for (int j = 0; j < LLM_QK / 2; j++) {
            si += (a->qs[j] & 0xf) * b->qs[j]
                  + (a->qs[j] >> 4) * b->qs[j + LLM_QK / 2];
        }
        sum += (llm_h2f(a->d) * llm_h2f(b->d)) * si
               + llm_h2f(a->m) * llm_h2f(b->s);
    }
    *s = sum;
}


/* Q5_0 . Q8_0: per block d_w d_x * (sum (q_w - 16) q_x). */
void
llm_dot_q5_0(int64_t n, float *s, const void *w, const void *x)
{
    const llm_block_q5_0  *a = w;
    const llm_block_q8_0  *b = x;
    float                  sum = 0;

    for (int64_t i = 0; i < n / LLM_QK; i++, a++, b++) {
        uint32_t  qh = llm_q5_high_bits(a->qh);
        int       si = 0;

        for (int j = 0; j < LLM_QK / 2; j++) {
            int  q0 = ((a->qs[j] & 0xf) | ((qh >> j) & 1) << 4) - 16;
            int  q1 = ((a->qs[j] >> 4) | ((qh >> (j + 16)) & 1) << 4) - 16;

            si += q0 * b->qs[j] + q1 * b->qs[j + LLM_QK / 2];
        }
        sum += (llm_h2f(a->d) * llm_h2f(b->d)) * si;
    }
    *s = sum;
}


/* Q5_1 . Q8_1: per block d_w d_x * (sum q_w q_x) + m_w * s_x. */
void
llm_dot_q5_1(int64_t n, float *s, const void *w, const void *x)
{
    const llm_block_q5_1  *a = w;
    const llm_block_q8_1  *b = x;
    float                  sum = 0;

    for (int64_t i = 0; i < n / LLM_QK; i++, a++, b++) {
        uint32_t  qh = llm_q5_high_bits(a->qh);
        int       si = 0;

        for (int j = 0; j < LLM_QK / 2; j++) {
            int  q0 = (a->qs[j] & 0xf) | ((qh >> j) & 1) << 4;
            int  q1 = (a->qs[j] >> 4) | ((qh >> (j + 16)) & 1) << 4;

            si += q0 * b->qs[j] + q1 * b->qs[j + LLM_QK / 2];
        }
        sum += (llm_h2f(a->d) * llm_h2f(b->d)) * si
               + llm_h2f(a->m) * llm_h2f(b->s);
    }
    *s = sum;
}
