/*
 * IQ2_XXS, IQ2_XS and IQ2_S: the scalar reference dequantization and dot
 * products (quant.c's type table and kernel table point here).
 *
 * All three code each group of 8 weights as an index into a grid of
 * 8-byte magnitude patterns (iq2_grids.c: 256, 512 and 1024 entries) and
 * 8 sign bits; a 4-bit scale s per 32 weights (IQ2_XXS) or per 16
 * (IQ2_XS, IQ2_S) gives the group's step d * (0.5 + s) / 4.  IQ2_XXS and
 * IQ2_XS store 7 sign bits, the 8th being their parity (an even count of
 * minus signs: llm_iq2_signs).
 *
 * Dequantization is ggml's (ggml-quants.c), value for value: the step is
 * computed as d * (0.5f + s) * 0.25f, then each weight is step * grid
 * byte, negated by its sign bit.  The dot products (Q8_K activations)
 * sum in integers per super-block, sum_j (2 s_j + 1) * dot_j, then scale
 * once by d_w * d_x and the sum of super-blocks by 1/8 at the end (as
 * ggml's vec_dot_iq2_*_q8_K), so SIMD versions match them bit for bit
 * per super-block.
 */

#include <stdint.h>
#include <string.h>

#include "quant.h"
#include "kernels_common.h"


/* Weight j (0..7) of group pattern g, unsigned (8, 25 or 43). */
static inline int
llm_iq2_mag(uint64_t g, int j)
{
    return (int) (g >> 8 * j) & 0xff;
}


/* y[0..8) = step * grid byte j, negated where bit j of signs is set. */
static inline void
llm_iq2_group_dequant(uint64_t g, unsigned signs, float step, float *y)
{
    for (int j = 0; j < 8; j++) {
        float  v = step * (float) llm_iq2_mag(g, j);

        y[j] = (signs >> j & 1) ? -v : v;
    }
}


/* Sum over the group of +-grid byte j * q[j] (at most 8 * 43 * 128). */
static inline int
llm_iq2_group_dot(uint64_t g, unsigned signs, const int8_t *q)
{
    int  s = 0;

    for (int j = 0; j < 8; j++) {
        int  p = llm_iq2_mag(g, j) * q[j];

        s += (signs >> j & 1) ? -p : p;
    }
    return s;
}


/* The IQ2_XXS sub-block ib (0..7): grid bytes in aux[0], 4 x 7 sign bits
 * and the 4-bit scale (top) in aux[1]. */
static inline void
llm_iq2_xxs_aux(const llm_block_iq2_xxs *b, int ib, uint32_t aux[2])
{
    memcpy(aux, b->qs + 4 * ib, 8);
}


/* IQ2_XXS: nb super-blocks at src into y[0..256 nb); per 32 weights the
 * step from the scale in the second word, groups by byte index. */
void
llm_iq2_xxs_dequant(const void *src, float *y, int64_t nb)
{
    const llm_block_iq2_xxs  *b = src;
    uint32_t                  aux[2];

    for (int64_t i = 0; i < nb; i++, b++) {
        float  d = llm_h2f(b->d);

        for (int ib = 0; ib < LLM_QK_K / 32; ib++) {
            llm_iq2_xxs_aux(b, ib, aux);

            float  step = d * (0.5f + (float) (aux[1] >> 28)) * 0.25f;

            for (int l = 0; l < 4; l++, y += 8) {
                llm_iq2_group_dequant(llm_iq2xxs_grid[aux[0] >> 8 * l & 0xff],
                                      llm_iq2_signs(aux[1] >> 7 * l & 127),
                                      step, y);
            }
        }
    }
}


/* IQ2_XS: nb super-blocks into y; 9-bit index and 7-bit sign code per
 * group, a step per 16 weights. */
void
llm_iq2_xs_dequant(const void *src, float *y, int64_t nb)
{
    const llm_block_iq2_xs  *b = src;

    for (int64_t i = 0; i < nb; i++, b++) {
        float  d = llm_h2f(b->d);

        for (int ib = 0; ib < LLM_QK_K / 32; ib++) {
            float  step[2];

            step[0] = d * (0.5f + (float) (b->scales[ib] & 0xf)) * 0.25f;
            step[1] = d * (0.5f + (float) (b->scales[ib] >> 4)) * 0.25f;
            for (int l = 0; l < 4; l++, y += 8) {
                unsigned  q = b->qs[4 * ib + l];

                llm_iq2_group_dequant(llm_iq2xs_grid[q & 511],
                                      llm_iq2_signs(q >> 9), step[l / 2], y);
            }
        }
    }
}


/* IQ2_S: nb super-blocks into y; 10-bit index (8 bits in qs, 2 in qh)
 * and a stored sign byte per group, a step per 16 weights. */
void
llm_iq2_s_dequant(const void *src, float *y, int64_t nb)
{
    const llm_block_iq2_s  *b = src;

    for (int64_t i = 0; i < nb; i++, b++) {
        float  d = llm_h2f(b->d);

        for (int ib = 0; ib < LLM_QK_K / 32; ib++) {
            float  step[2];

            step[0] = d * (0.5f + (float) (b->scales[ib] & 0xf)) * 0.25f;
            step[1] = d * (0.5f + (float) (b->scales[ib] >> 4)) * 0.25f;
            for (int l = 0; l < 4; l++, y += 8) {
                llm_iq2_group_dequant(llm_iq2s_grid[llm_iq2_s_index(b, ib, l)],
                                      b->qs[LLM_QK_K / 8 + 4 * ib + l],
                                      step[l / 2], y);
            }
        }
    }
}


/*
 * IQ2_XXS . Q8_K: per super-block sum_ib (2 s_ib + 1) * dot_ib in
 * integers (at most 8 * 31 * 32 * 43 * 128, within int), times
 * d_w * d_x; the total times 1/8.
 */
void
llm_iq2_xxs_dot(int64_t n, float *s, const void *w, const void *x)
{
    const llm_block_iq2_xxs  *a = w;
    const llm_block_q8_K     *b = x;
    float                     sum = 0;
    uint32_t                  aux[2];

    for (int64_t i = 0; i < n / LLM_QK_K; i++, a++, b++) {
        int  isum = 0;

        for (int ib = 0; ib < LLM_QK_K / 32; ib++) {
            int  dot = 0;

            llm_iq2_xxs_aux(a, ib, aux);
            for (int l = 0; l < 4; l++) {
                dot += llm_iq2_group_dot(
                           llm_iq2xxs_grid[aux[0] >> 8 * l & 0xff],
                           llm_iq2_signs(aux[1] >> 7 * l & 127),
                           b->qs + 32 * ib + 8 * l);
            }
            isum += (int) (2 * (aux[1] >> 28) + 1) * dot;
        }
        sum += llm_h2f(a->d) * b->d * (float) isum;
    }
    *s = 0.125f * sum;
}


/* IQ2_XS . Q8_K: as IQ2_XXS, a scale per 16 weights. */
void
llm_iq2_xs_dot(int64_t n, float *s, const void *w, const void *x)
{
    const llm_block_iq2_xs  *a = w;
    const llm_block_q8_K    *b = x;
    float                    sum = 0;

    for (int64_t i = 0; i < n / LLM_QK_K; i++, a++, b++) {
        int  isum = 0;

        for (int ib = 0; ib < LLM_QK_K / 32; ib++) {
            for (int h = 0; h < 2; h++) {
                int  dot = 0;

                for (int l = 2 * h; l < 2 * h + 2; l++) {
                    unsigned  q = a->qs[4 * ib + l];

                    dot += llm_iq2_group_dot(llm_iq2xs_grid[q & 511],
                                             llm_iq2_signs(q >> 9),
                                             b->qs + 32 * ib + 8 * l);
                }
                isum += (2 * (a->scales[ib] >> 4 * h & 0xf) + 1) * dot;
            }
        }
        sum += llm_h2f(a->d) * b->d * (float) isum;
    }
    *s = 0.125f * sum;
}


/* IQ2_S . Q8_K: as IQ2_XS, 10-bit grid indices and stored sign bytes. */
void
llm_iq2_s_dot(int64_t n, float *s, const void *w, const void *x)
{
    const llm_block_iq2_s  *a = w;
    const llm_block_q8_K   *b = x;
    float                   sum = 0;

    for (int64_t i = 0; i < n / LLM_QK_K; i++, a++, b++) {
        int  isum = 0;

        for (int ib = 0; ib < LLM_QK_K / 32; ib++) {
            for (int h = 0; h < 2; h++) {
                int  dot = 0;

                for (int l = 2 * h; l < 2 * h + 2; l++) {
                    dot += llm_iq2_group_dot(
                               llm_iq2s_grid[llm_iq2_s_index(a, ib, l)],
                               a->qs[LLM_QK_K / 8 + 4 * ib + l],
                               b->qs + 32 * ib + 8 * l);
                }
                isum += (2 * (a->scales[ib] >> 4 * h & 0xf) + 1) * dot;
            }
        }
        sum += llm_h2f(a->d) * b->d * (float) isum;
    }
    *s = 0.125f * sum;
}
