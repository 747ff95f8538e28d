/*
 * MXFP4 (OCP microscaling FP4, E2M1 values with a shared E8M0 scale per
 * 32): the scalar reference dequantization and dot product (quant.c's type
 * table and kernel table point here).
 *
 * As in ggml, the table holds the E2M1 values doubled (integers
 * -12..12), and the scale is halved to match: w = 2^(e - 128) * level.
 * Dequantization is ggml's value for value (level * scale); the dot
 * product sums levels times Q8_0 quants in integers per block, then
 * scales once by d_x * 2^(e - 128).
 */

#include <stdint.h>

#include "quant.h"
#include "kernels_common.h"


/* kvalues_mxfp4 of ggml-common.h (llama.cpp): 2 x the E2M1 value of each
 * code (sign bit 3; 0, 0.5, 1, 1.5, 2, 3, 4, 6). */
const int8_t  llm_mxfp4_kvalues[16] = {
    0, 1, 2, 3, 4, 6, 8, 12,
    0, -1, -2, -3, -4, -6, -8, -12
};


void
llm_mxfp4_dequant(const void *src, float *y, int64_t nb)
{
    const llm_block_mxfp4  *b = src;

    for (int64_t i = 0; i < nb; i++, b++, y += LLM_QK) {
        float  d = llm_mxfp4_e8m0_half(b->e);

        for (int j = 0; j < LLM_QK / 2; j++) {
            y[j] = llm_mxfp4_kvalues[b->qs[j] & 0xf] * d;
            y[j + LLM_QK / 2] = llm_mxfp4_kvalues[b->qs[j] >> 4] * d;
        }
    }
}


/* MXFP4 . Q8_0: per block the integer sum, times d_x * 2^(e - 128). */
void
llm_mxfp4_dot(int64_t n, float *s, const void *w, const void *x)
{
    const llm_block_mxfp4  *a = w;
    const llm_block_q8_0   *b = x;
    float                   sum = 0;

    for (int64_t i = 0; i < n / LLM_QK; i++) {
        int  si = 0;

        for (int j = 0; j < LLM_QK / 2; j++) {
            si += llm_mxfp4_kvalues[a[i].qs[j] & 0xf] * b[i].qs[j]
                  + llm_mxfp4_kvalues[a[i].qs[j] >> 4] * b[i].qs[j + 16];
        }
        sum += si * (llm_h2f(b[i].d) * llm_mxfp4_e8m0_half(a[i].e));
    }
    *s = sum;
}
