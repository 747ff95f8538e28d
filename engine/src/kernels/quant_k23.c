/*
 * The 2- and 3-bit K-quants Q2_K and Q3_K: scalar reference
 * dequantization and dot products against Q8_K activations.
 *
 * Both have 16 sub-blocks of 16 weights per 256-weight block.  Element
 * e = 128 h + 32 k + 16 u + l (h < 2, k < 4, u < 2, l < 16) is sub-block
 * 8 h + 2 k + u, and its two low bits are bits 2k..2k+1 of
 * qs[32 h + 16 u + l].
 *
 * Q2_K: scales[s] holds the sub-block's scale (low nibble) and min (high
 * nibble); w = d * sc * q - dmin * m, q in 0..3.
 * Q3_K: a third bit in hmask (bit 4 h + k of hmask[16 u + l]); a set bit
 * means q, a clear one q - 4 (so q in -4..3); 16 six-bit scales packed
 * into scales[12], stored with a bias of 32; w = d * (sc - 32) * q.
 *
 * The dot products sum each sub-block's integer products, weight them
 * with the integer scales, and scale the block's int once.
 */

#include <string.h>

#include "quant.h"
#include "kernels_common.h"


/*
 * The signed scale (-32..31) of Q3_K sub-block s from scales[12]: the low
 * four bits are the low (s < 8) or high (s >= 8) nibble of byte s % 8,
 * the top two bits are bits 2 (s / 4)..2 (s / 4) + 1 of byte 8 + s % 4.
 */
static inline int
llm_q3_K_scale(const uint8_t *sc12, int s)
{
    int  lo = s < 8 ? sc12[s] & 0xf : sc12[s - 8] >> 4;
    int  hi = (sc12[8 + (s & 3)] >> (2 * (s >> 2))) & 3;

    return (lo | hi << 4) - 32;
}


/* nb Q2_K blocks to floats, rounding as ggml: (d * sc) * q - dmin * m. */
void
llm_dequant_q2_K(const void *src, float *y, int64_t nb)
{
    const llm_block_q2_K  *b = src;

    for (int64_t i = 0; i < nb; i++, b++) {
        float  d = llm_h2f(b->d), dmin = llm_h2f(b->dmin);

        for (int s = 0; s < LLM_QK_K / 16; s++, y += 16) {
            const uint8_t  *q = b->qs + 32 * (s >> 3) + 16 * (s & 1);
            int             shift = 2 * ((s >> 1) & 3);
            float           dl = d * (b->scales[s] & 0xf);
            float           ml = dmin * (b->scales[s] >> 4);

            for (int l = 0; l < 16; l++) {
                y[l] = dl * ((q[l] >> shift) & 3) - ml;
            }
        }
    }
}


/* nb Q3_K blocks to floats: (d * (sc - 32)) * q. */
void
llm_dequant_q3_K(const void *src, float *y, int64_t nb)
{
    const llm_block_q3_K  *b = src;

    for (int64_t i = 0; i < nb; i++, b++) {
        float  d = llm_h2f(b->d);

        for (int s = 0; s < LLM_QK_K / 16; s++, y += 16) {
            const uint8_t  *q = b->qs + 32 * (s >> 3) + 16 * (s & 1);
            const uint8_t  *hm = b->hmask + 16 * (s & 1);
            int             k = (s >> 1) & 3, shift = 2 * k;
            uint8_t         bit = (uint8_t) (1u << (4 * (s >> 3) + k));
            float           dl = d * llm_q3_K_scale(b->scales, s);

            for (int l = 0; l < 16; l++) {
                y[l] = dl * (((q[l] >> shift) & 3) - (hm[l] & bit ? 0 : 4));
            }
        }
    }
}


/* Q2_K . Q8_K over one block: sum_s sc_s (q_s . x_s), and into *msum
 * sum_s m_s bsums_s; both exact. */
int
llm_q2_K_isum(const llm_block_q2_K *a, const llm_block_q8_K *b, int *msum)
{
    int  isum = 0, ms = 0;

    for (int sb = 0; sb < LLM_QK_K / 16; sb++) {
        const uint8_t  *q = a->qs + 32 * (sb >> 3) + 16 * (sb & 1);
        const int8_t   *y = b->qs + 16 * sb;
        int             shift = 2 * ((sb >> 1) & 3), dot = 0;

        for (int l = 0; l < 16; l++) {
            dot += ((q[l] >> shift) & 3) * y[l];
        }
        isum += (a->scales[sb] & 0xf) * dot;
        ms += (a->scales[sb] >> 4) * b->bsums[sb];
    }
    *msum = ms;
    return isum;
}


/* Q3_K . Q8_K over one block: sum_s (sc_s - 32) (q_s . x_s), exact. */
int
llm_q3_K_isum(const llm_block_q3_K *a, const llm_block_q8_K *b)
{
    int  isum = 0;

    for (int sb = 0; sb < LLM_QK_K / 16; sb++) {
        const uint8_t  *q = a->qs + 32 * (sb >> 3) + 16 * (sb & 1);
        const uint8_t  *hm = a->hmask + 16 * (sb & 1);
        const int8_t   *y = b->qs + 16 * sb;
        int             k = (sb >> 1) & 3, shift = 2 * k, dot = 0;
        uint8_t         bit = (uint8_t) (1u << (4 * (sb >> 3) + k));

        for (int l = 0; l < 16; l++) {
            int  v = ((q[l] >> shift) & 3) - (hm[l] & bit ? 0 : 4);

            dot += v * y[l];
        }
        isum += llm_q3_K_scale(a->scales, sb) * dot;
    }
    return isum;
}


/*
 * Q2_K . Q8_K: per block d_x d * sum_s sc_s (q_s . x_s)
 * - d_x dmin * sum_s m_s bsums_s.
 */
void
llm_dot_q2_K(int64_t n, float *s, const void *w, const void *x)
{
    const llm_block_q2_K  *a = w;
    const llm_block_q8_K  *b = x;
    float                  sum = 0;

    for (int64_t i = 0; i < n / LLM_QK_K; i++, a++, b++) {
        int  msum, isum = llm_q2_K_isum(a, b, &msum);

        sum += b->d * llm_h2f(a->d) * isum - b->d * llm_h2f(a->dmin) * msum;
    }
    *s = sum;
}


/* Q3_K . Q8_K: per block d_x d * sum_s (sc_s - 32) (q_s . x_s). */
void
llm_dot_q3_K(int64_t n, float *s, const void *w, const void *x)
{
    const llm_block_q3_K  *a = w;
    const llm_block_q8_K  *b = x;
    float                  sum = 0;

    for (int64_t i = 0; i < n / LLM_QK_K; i++, a++, b++) {
        sum += b->d * llm_h2f(a->d) * llm_q3_K_isum(a, b);
    }
    *s = sum;
}
