/*
 * IQ1_S and IQ1_M: the scalar reference dequantization and dot products
 * (quant.c's type table and kernel table point here).
 *
 * Both code each group of 8 weights as one of 2048 points of
 * {-1, 0, 1}^8 (llm_iq1_grid, iq1_grids.c) shifted by delta = +-1/8,
 * times an odd 3-bit scale 2 s + 1 and an fp16 d: IQ1_S per sub-block of
 * 32, IQ1_M per half of 16 with a delta per group and d spread over the
 * scales' top nibbles (kernels_common.h has the layouts).
 * Dequantization is ggml's (ggml-quants.c) value for value:
 * (d * (2 s + 1)) * (point + delta).
 *
 * The dot products against Q8_K are ggml's too (ggml-cpu's vec_dot
 * iq1_s_q8_K / iq1_m_q8_K): per super-block, in integers, sumi = the
 * sum over halves or sub-blocks of (2 s + 1) * (point . q8) and sumi1 =
 * the same of (2 s + 1) * (+-1) * (sum of q8) (IQ1_S takes those sums
 * from the Q8_K bsums, IQ1_M adds each group of 8), then
 * d_w * d_x * (sumi + 0.125f * sumi1) in ggml's float order.  What is
 * exact: both sums (|sumi|, |sumi1| <= 15 * 256 * 127), and
 * sumi + sumi1 / 8 as a float too, since 8 sumi + sumi1 is an integer
 * under 2^23; so a block's value is d_w * d_x times the exact
 * (8 sumi + sumi1) / 8, rounded once, and the SIMD kernels compute the
 * integer 8 sumi + sumi1 and scale it by (d_w * d_x) / 8 (a power of two
 * changes no rounding): the same float per block.
 */

#include <stdint.h>

#include "quant.h"
#include "kernels_common.h"


/* Grid point i as 8 signed bytes. */
static inline const int8_t *
llm_iq1_point(unsigned i)
{
    return (const int8_t *) (llm_iq1_grid + i);
}


/* The 8-bit low index byte q and 3 high bits h of a group's point. */
static inline unsigned
llm_iq1_index(unsigned q, unsigned h)
{
    return q | (h & 7) << 8;
}


/* IQ1_M's scale word k (0..3): 4 three-bit scales and a nibble of d. */
static inline unsigned
llm_iq1_m_word(const uint8_t *sc, int k)
{
    return sc[2 * k] | (unsigned) sc[2 * k + 1] << 8;
}


void
llm_iq1_s_dequant(const void *src, float *y, int64_t nb)
{
    const llm_block_iq1_s  *b = src;

    for (int64_t i = 0; i < nb; i++, b++) {
        float  d = llm_h2f(b->d);

        for (int ib = 0; ib < LLM_QK_K / 32; ib++) {
            unsigned  h = b->qh[ib];
            float     dl = d * (float) (2 * (h >> 12 & 7) + 1);
            float     delta = h & 0x8000 ? -0.125f : 0.125f;

            for (int l = 0; l < 4; l++, y += 8) {
                const int8_t  *g = llm_iq1_point(
                                       llm_iq1_index(b->qs[4 * ib + l],
                                                     h >> 3 * l));

                for (int j = 0; j < 8; j++) {
                    y[j] = dl * ((float) g[j] + delta);
                }
            }
        }
    }
}


void
llm_iq1_m_dequant(const void *src, float *y, int64_t nb)
{
    const llm_block_iq1_m  *b = src;

    for (int64_t i = 0; i < nb; i++, b++) {
        float  d = llm_h2f(llm_iq1_m_d(b->scales));

        for (int ib = 0; ib < LLM_QK_K / 32; ib++) {
            unsigned  sc = llm_iq1_m_word(b->scales, ib / 2) >> 6 * (ib % 2);

            for (int l = 0; l < 4; l++, y += 8) {
                unsigned       h = b->qh[2 * ib + l / 2] >> 4 * (l % 2);
                float          dl = d * (float) (2 * (sc >> 3 * (l / 2) & 7)
                                                 + 1);
                float          delta = h & 8 ? -0.125f : 0.125f;
                const int8_t  *g = llm_iq1_point(
                                       llm_iq1_index(b->qs[4 * ib + l], h));

                for (int j = 0; j < 8; j++) {
                    y[j] = dl * ((float) g[j] + delta);
                }
            }
        }
    }
}


/* Sum of point[j] * q[j] over one group of 8. */
static inline int
llm_iq1_dot8(const int8_t *g, const int8_t *q)
{
    int  s = 0;

    for (int j = 0; j < 8; j++) {
        s += g[j] * q[j];
    }
    return s;
}


/*
 * IQ1_S . Q8_K: per super-block sumi = sum_ib ls * (points . q8), sumi1 =
 * sum_ib ls * (+-1) * (bsums[2 ib] + bsums[2 ib + 1]), then ggml's
 * d_w * d_x * (sumi + 0.125f * sumi1).
 */
void
llm_iq1_s_dot(int64_t n, float *s, const void *w, const void *x)
{
    const llm_block_iq1_s  *a = w;
    const llm_block_q8_K   *b = x;
    float                   sum = 0;

    for (int64_t i = 0; i < n / LLM_QK_K; i++, a++, b++) {
        int  sumi = 0, sumi1 = 0;

        for (int ib = 0; ib < LLM_QK_K / 32; ib++) {
            unsigned  h = a->qh[ib];
            int       ls = (int) (2 * (h >> 12 & 7) + 1), lsum = 0;

            for (int l = 0; l < 4; l++) {
                lsum += llm_iq1_dot8(
                            llm_iq1_point(llm_iq1_index(a->qs[4 * ib + l],
                                                        h >> 3 * l)),
                            b->qs + 32 * ib + 8 * l);
            }
            sumi += ls * lsum;
            sumi1 += (h & 0x8000 ? -ls : ls)
                     * (b->bsums[2 * ib] + b->bsums[2 * ib + 1]);
        }
        sum += llm_h2f(a->d) * b->d * ((float) sumi + 0.125f * (float) sumi1);
    }
    *s = sum;
}


/*
 * IQ1_M . Q8_K: as IQ1_S with a scale per half of 16 and a delta sign per
 * group of 8 (its sum of q8 added here), d from the scale words.
 */
void
llm_iq1_m_dot(int64_t n, float *s, const void *w, const void *x)
{
    const llm_block_iq1_m  *a = w;
    const llm_block_q8_K   *b = x;
    float                   sum = 0;

    for (int64_t i = 0; i < n / LLM_QK_K; i++, a++, b++) {
        int  sumi = 0, sumi1 = 0;

        for (int ib = 0; ib < LLM_QK_K / 32; ib++) {
            unsigned  sc = llm_iq1_m_word(a->scales, ib / 2) >> 6 * (ib % 2);

            for (int l = 0; l < 4; l++) {
                const int8_t  *q = b->qs + 32 * ib + 8 * l;
                unsigned       h = a->qh[2 * ib + l / 2] >> 4 * (l % 2);
                int            ls = (int) (2 * (sc >> 3 * (l / 2) & 7) + 1);
                int            qsum = 0;

                for (int j = 0; j < 8; j++) {
                    qsum += q[j];
                }
                sumi += ls * llm_iq1_dot8(
                                 llm_iq1_point(
                                     llm_iq1_index(a->qs[4 * ib + l], h)),
                                 q);
                sumi1 += (h & 8 ? -ls : ls) * qsum;
            }
        }
        sum += llm_h2f(llm_iq1_m_d(a->scales)) * b->d
               * ((float) sumi + 0.125f * (float) sumi1);
    }
    *s = sum;
}
