/*
 * IQ3_XXS and IQ3_S: the scalar reference dequantization and dot products
 * (quant.c's type table and kernel table point here).
 *
 * Both code each 4 weights of a 256-weight super-block as an index into a
 * grid of 4 magnitudes (iq3_grids.c), with one sign bit per weight and a
 * 4-bit scale per 32-weight sub-block; kernels_common.h gives the block
 * layouts.  Dequantization is ggml's (ggml-quants.c), value for value and
 * in its float order: IQ3_XXS's sub-block scale is (d * (0.5 + ls)) *
 * 0.5, IQ3_S's d * (1 + 2 ls), each weight that scale times its
 * magnitude, then signed.  The dot products (against Q8_K) sum each
 * sub-block in integers, times its odd integer scale 2 ls + 1, per
 * super-block exactly, then scale once by d_w * d_x (and IQ3_XXS by 1/4
 * at the end, as ggml: (0.5 + ls) / 2 = (2 ls + 1) / 4), so SIMD versions
 * can match them bit for bit per super-block.
 */

#include <stdint.h>

#include "quant.h"
#include "kernels_common.h"


/* Byte j (0..3) of grid entry g: the magnitude of its weight j. */
static inline int
llm_iq3_mag(uint32_t g, int j)
{
    return (int) (g >> 8 * j) & 0xff;
}


/*
 * The 32 sign bits of IQ3_XXS sub-block word aux (bit i negates weight
 * i): each 7-bit group l gets as bit 7 the parity of its 7 bits.
 */
static inline uint32_t
llm_iq3_xxs_signs(uint32_t aux)
{
    uint32_t  s = 0;

    for (int l = 0; l < 4; l++) {
        uint32_t  b = (aux >> 7 * l) & 127;

        s |= (b | (uint32_t) __builtin_parity(b) << 7) << 8 * l;
    }
    return s;
}


/* The little-endian word k (sub-block k) of IQ3_XXS's sas bytes. */
static inline uint32_t
llm_iq3_xxs_word(const llm_block_iq3_xxs *b, int k)
{
    const uint8_t  *p = b->sas + 4 * k;

    return (uint32_t) p[0] | (uint32_t) p[1] << 8 | (uint32_t) p[2] << 16
           | (uint32_t) p[3] << 24;
}


/* Grid index k (0..7) of IQ3_S sub-block j: 8 bits of qs, the 9th of qh. */
static inline int
llm_iq3_s_index(const llm_block_iq3_s *b, int j, int k)
{
    return b->qs[8 * j + k] | ((b->qh[j] >> k) & 1) << 8;
}


/* The 32 sign bits of IQ3_S sub-block j. */
static inline uint32_t
llm_iq3_s_signs(const llm_block_iq3_s *b, int j)
{
    const uint8_t  *p = b->signs + 4 * j;

    return (uint32_t) p[0] | (uint32_t) p[1] << 8 | (uint32_t) p[2] << 16
           | (uint32_t) p[3] << 24;
}


/* y[0..32) of one sub-block: grid entries g[0..8), sign bits sg, scale
 * db; each weight db * magnitude, negated where its sign bit is set. */
static inline void
llm_iq3_dequant32(const uint32_t *g, uint32_t sg, float db, float *y)
{
    for (int i = 0; i < 32; i++) {
        float  v = db * (float) llm_iq3_mag(g[i / 4], i % 4);

        y[i] = (sg >> i) & 1 ? -v : v;
    }
}


/* Sum over one sub-block of +-magnitude * q8 (at most 32 * 62 * 127). */
static inline int
llm_iq3_dot32(const uint32_t *g, uint32_t sg, const int8_t *q8)
{
    int  s = 0;

    for (int i = 0; i < 32; i++) {
        int  p = llm_iq3_mag(g[i / 4], i % 4) * q8[i];

        s += (sg >> i) & 1 ? -p : p;
    }
    return s;
}


void
llm_iq3_xxs_dequant(const void *src, float *y, int64_t nb)
{
    const llm_block_iq3_xxs  *b = src;

    for (int64_t i = 0; i < nb; i++, b++) {
        float  d = llm_h2f(b->d);

        for (int j = 0; j < LLM_QK_K / 32; j++, y += 32) {
            uint32_t  aux = llm_iq3_xxs_word(b, j), g[8];
            float     db = d * (0.5f + (float) (aux >> 28)) * 0.5f;

            for (int k = 0; k < 8; k++) {
                g[k] = llm_iq3xxs_grid[b->qs[8 * j + k]];
            }
            llm_iq3_dequant32(g, llm_iq3_xxs_signs(aux), db, y);
        }
    }
}


void
llm_iq3_s_dequant(const void *src, float *y, int64_t nb)
{
    const llm_block_iq3_s  *b = src;

    for (int64_t i = 0; i < nb; i++, b++) {
        float  d = llm_h2f(b->d);

        for (int j = 0; j < LLM_QK_K / 32; j++, y += 32) {
            int       ls = (b->scales[j / 2] >> 4 * (j % 2)) & 0xf;
            float     db = d * (float) (1 + 2 * ls);
            uint32_t  g[8];

            for (int k = 0; k < 8; k++) {
                g[k] = llm_iq3s_grid[llm_iq3_s_index(b, j, k)];
            }
            llm_iq3_dequant32(g, llm_iq3_s_signs(b, j), db, y);
        }
    }
}


/*
 * IQ3_XXS . Q8_K: per super-block sum_j (2 ls_j + 1) * dot_j in integers
 * (at most 8 * 31 * 32 * 62 * 127, within int), times d_w * d_x; the sum
 * over super-blocks times 1/4.
 */
void
llm_iq3_xxs_dot(int64_t n, float *s, const void *w, const void *x)
{
    const llm_block_iq3_xxs  *a = w;
    const llm_block_q8_K     *b = x;
    float                     sum = 0;

    for (int64_t i = 0; i < n / LLM_QK_K; i++, a++, b++) {
        int  isum = 0;

        for (int j = 0; j < LLM_QK_K / 32; j++) {
            uint32_t  aux = llm_iq3_xxs_word(a, j), g[8];

            for (int k = 0; k < 8; k++) {
                g[k] = llm_iq3xxs_grid[a->qs[8 * j + k]];
            }
            isum += (int) (2 * (aux >> 28) + 1)
                    * llm_iq3_dot32(g, llm_iq3_xxs_signs(aux),
                                    b->qs + 32 * j);
        }
        sum += llm_h2f(a->d) * b->d * isum;
    }
    *s = 0.25f * sum;
}


/*
 * IQ3_S . Q8_K: per super-block sum_j (2 ls_j + 1) * dot_j in integers
 * (at most 8 * 31 * 32 * 15 * 127), times d_w * d_x.
 */
void
llm_iq3_s_dot(int64_t n, float *s, const void *w, const void *x)
{
    const llm_block_iq3_s  *a = w;
    const llm_block_q8_K   *b = x;
    float                   sum = 0;

    for (int64_t i = 0; i < n / LLM_QK_K; i++, a++, b++) {
        int  isum = 0;

        for (int j = 0; j < LLM_QK_K / 32; j++) {
            int       ls = (a->scales[j / 2] >> 4 * (j % 2)) & 0xf;
            uint32_t  g[8];

            for (int k = 0; k < 8; k++) {
                g[k] = llm_iq3s_grid[llm_iq3_s_index(a, j, k)];
            }
            isum += (2 * ls + 1)
                    * llm_iq3_dot32(g, llm_iq3_s_signs(a, j), b->qs + 32 * j);
        }
        sum += llm_h2f(a->d) * b->d * isum;
    }
    *s = sum;
}
