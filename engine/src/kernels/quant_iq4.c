/*
 * IQ4_NL and IQ4_XS: the scalar reference dequantization and dot products
 * (quant.c's type table and kernel table point here).
 *
 * Both index a fixed table of 16 non-linear levels with 4-bit codes;
 * IQ4_NL scales blocks of 32 by an fp16 d, IQ4_XS super-blocks of 256 by
 * an fp16 d times a 6-bit signed scale per 32.  Dequantization is ggml's
 * (ggml-quants.c), value for value: d * level for IQ4_NL,
 * (d * (ls - 32)) * level for IQ4_XS.  The dot products sum in integers
 * per block (IQ4_XS: per super-block, the sub-block sums times their
 * scales) and then scale once, so SIMD versions can match them bit for
 * bit per block.
 */

#include <stdint.h>

#include "quant.h"
#include "kernels_common.h"


/* kvalues_iq4nl of ggml-common.h (llama.cpp), the format's definition. */
const int8_t  llm_iq4_kvalues[16] = {
    -127, -104, -83, -65, -49, -35, -22, -10,
    1, 13, 25, 38, 53, 69, 89, 113
};


/* The 6-bit scale of sub-block j (0..7) of an IQ4_XS block, minus 32. */
static inline int
llm_iq4_xs_scale(const llm_block_iq4_xs *b, int j)
{
    int  lo = (b->scales_l[j / 2] >> 4 * (j % 2)) & 0xf;
    int  hi = (b->scales_h >> 2 * j) & 3;

    return (lo | hi << 4) - 32;
}


/* y[0..32) from the 16 code bytes qs, each level times d. */
static inline void
llm_iq4_dequant32(const uint8_t *qs, float d, float *y)
{
    for (int j = 0; j < 16; j++) {
        y[j] = d * llm_iq4_kvalues[qs[j] & 0xf];
        y[j + 16] = d * llm_iq4_kvalues[qs[j] >> 4];
    }
}


/* Sum of level(code) * q over 32 values: qs as in a block, q8 int8. */
static inline int
llm_iq4_dot32(const uint8_t *qs, const int8_t *q8)
{
    int  s = 0;

    for (int j = 0; j < 16; j++) {
        s += llm_iq4_kvalues[qs[j] & 0xf] * q8[j]
             + llm_iq4_kvalues[qs[j] >> 4] * q8[j + 16];
    }
    return s;
}


void
llm_iq4_nl_dequant(const void *src, float *y, int64_t nb)
{
    const llm_block_iq4_nl  *b = src;

    for (int64_t i = 0; i < nb; i++, b++, y += LLM_QK) {
        llm_iq4_dequant32(b->qs, llm_h2f(b->d), y);
    }
}


void
llm_iq4_xs_dequant(const void *src, float *y, int64_t nb)
{
    const llm_block_iq4_xs  *b = src;

    for (int64_t i = 0; i < nb; i++, b++) {
        float  d = llm_h2f(b->d);

        for (int j = 0; j < LLM_QK_K / 32; j++, y += 32) {
            llm_iq4_dequant32(b->qs + 16 * j,
                              d * (float) llm_iq4_xs_scale(b, j), y);
        }
    }
}


/* IQ4_NL . Q8_0: per block the integer sum, times d_w * d_x. */
void
llm_iq4_nl_dot(int64_t n, float *s, const void *w, const void *x)
{
    const llm_block_iq4_nl  *a = w;
    const llm_block_q8_0    *b = x;
    float                    sum = 0;

    for (int64_t i = 0; i < n / LLM_QK; i++) {
        int  si = llm_iq4_dot32(a[i].qs, b[i].qs);

        sum += si * (llm_h2f(a[i].d) * llm_h2f(b[i].d));
    }
    *s = sum;
}


/*
 * IQ4_XS . Q8_K: per super-block sum_j (ls_j - 32) * dot_j in integers
 * (at most 8 * 32 * 32 * 127 * 127, within int), times d_w * d_x.
 */
void
llm_iq4_xs_dot(int64_t n, float *s, const void *w, const void *x)
{
    const llm_block_iq4_xs  *a = w;
    const llm_block_q8_K    *b = x;
    float                    sum = 0;

    for (int64_t i = 0; i < n / LLM_QK_K; i++, a++, b++) {
        int  isum = 0;

        for (int j = 0; j < LLM_QK_K / 32; j++) {
            isum += llm_iq4_xs_scale(a, j)
                    * llm_iq4_dot32(a->qs + 16 * j, b->qs + 32 * j);
        }
        sum += b->d * llm_h2f(a->d) * isum;
    }
    *s = sum;
}
