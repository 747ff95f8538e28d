/*
 * NEON (dot-product extension) vec_dot kernels of IQ2_XXS, IQ2_XS and
 * IQ2_S against Q8_K (issue 32).
 *
 * Per 16 weights (two groups, one scale): the groups' grid entries make
 * one register of magnitudes (<= 43, fine as signed bytes), the
 * activations take the groups' signs as byte masks (IQ2_XXS, IQ2_XS: the
 * 7-bit codes' masks from llm_iq2_signs64; IQ2_S: each sign byte repeated
 * over its group and tested bit by bit with CMTST), a select of the
 * negated bytes (|q| <= 127, no overflow), and SDOT gives four exact partial
 * sums, multiplied by the scale 2s + 1 and added in 32-bit lanes.  The
 * super-block's integer sum is exact and equal to the scalar reference's
 * (quant_iq2.c), and is scaled with the same float steps.
 */

#include <arm_neon.h>
#include <string.h>

#include "quant.h"
#include "kernels_common.h"


/* fp16 -> fp32 with the FCVT instruction (exact). */
static inline float
llm_iq2_h2f_neon(uint16_t h)
{
    __fp16  f;

    memcpy(&f, &h, sizeof(f));
    return (float) f;
}


/* The byte masks (0xff: minus) of sign bytes s0, s1, each over 8 bytes. */
static inline __attribute__((always_inline)) uint8x16_t
llm_iq2_signs_neon(unsigned s0, unsigned s1)
{
    const uint8x16_t  bits = vreinterpretq_u8_u64(
                                 vdupq_n_u64(0x8040201008040201ull));

    return vtstq_u8(vcombine_u8(vdup_n_u8((uint8_t) s0),
                                vdup_n_u8((uint8_t) s1)), bits);
}


/* The byte masks of 7-bit sign codes c0, c1 (llm_iq2_signs64). */
static inline __attribute__((always_inline)) uint8x16_t
llm_iq2_codes_neon(unsigned c0, unsigned c1)
{
    return vreinterpretq_u8_u64(vcombine_u64(vcreate_u64(llm_iq2_signs64[c0]),
                                             vcreate_u64(llm_iq2_signs64[c1])));
}


/*
 * acc + sc * (partial sums of +-g * q8) over 16 weights: grid entries g0,
 * g1, sign masks neg (0xff: minus), activations q8.
 */
static inline __attribute__((always_inline)) int32x4_t
llm_iq2_dot16_neon(int32x4_t acc, uint64_t g0, uint64_t g1, uint8x16_t neg,
    const int8_t *q8, int sc)
{
    int8x16_t  q = vld1q_s8(q8);
    int8x16_t  g = vreinterpretq_s8_u64(vcombine_u64(vcreate_u64(g0),
                                                     vcreate_u64(g1)));

    q = vbslq_s8(neg, vnegq_s8(q), q);
    return vmlaq_n_s32(acc, vdotq_s32(vdupq_n_s32(0), g, q), sc);
}


/* IQ2_XXS . Q8_K over n values (a multiple of 256) into *s. */
static void
llm_dot_iq2_xxs_neon(int64_t n, float *s, const void *w, const void *x)
{
    const llm_block_iq2_xxs  *a = w;
    const llm_block_q8_K     *b = x;
    float                     sum = 0;

    for (int64_t i = 0; i < n / LLM_QK_K; i++, a++, b++) {
        int32x4_t  acc = vdupq_n_s32(0);

        for (int ib = 0; ib < LLM_QK_K / 32; ib++) {
            uint32_t  aux[2];
            int       sc;

            memcpy(aux, a->qs + 4 * ib, 8);
            sc = (int) (2 * (aux[1] >> 28) + 1);
            for (int h = 0; h < 2; h++) {
                acc = llm_iq2_dot16_neon(acc,
                          llm_iq2xxs_grid[aux[0] >> 16 * h & 0xff],
                          llm_iq2xxs_grid[aux[0] >> (16 * h + 8) & 0xff],
                          llm_iq2_codes_neon(aux[1] >> 14 * h & 127,
                                             aux[1] >> (14 * h + 7) & 127),
                          b->qs + 32 * ib + 16 * h, sc);
            }
        }
        sum += llm_iq2_h2f_neon(a->d) * b->d * (float) vaddvq_s32(acc);
    }
    *s = 0.125f * sum;
}


/* IQ2_XS . Q8_K over n values (a multiple of 256) into *s. */
static void
llm_dot_iq2_xs_neon(int64_t n, float *s, const void *w, const void *x)
{
    const llm_block_iq2_xs  *a = w;
    const llm_block_q8_K    *b = x;
    float                    sum = 0;

    for (int64_t i = 0; i < n / LLM_QK_K; i++, a++, b++) {
        int32x4_t  acc = vdupq_n_s32(0);

        for (int ib = 0; ib < LLM_QK_K / 32; ib++) {
            for (int h = 0; h < 2; h++) {
                const uint16_t  *q = a->qs + 4 * ib + 2 * h;

                acc = llm_iq2_dot16_neon(acc, llm_iq2xs_grid[q[0] & 511],
                          llm_iq2xs_grid[q[1] & 511],
                          llm_iq2_codes_neon(q[0] >> 9, q[1] >> 9),
                          b->qs + 32 * ib + 16 * h,
                          2 * (a->scales[ib] >> 4 * h & 0xf) + 1);
            }
        }
        sum += llm_iq2_h2f_neon(a->d) * b->d * (float) vaddvq_s32(acc);
    }
    *s = 0.125f * sum;
}


/* IQ2_S . Q8_K over n values (a multiple of 256) into *s. */
static void
llm_dot_iq2_s_neon(int64_t n, float *s, const void *w, const void *x)
{
    const llm_block_iq2_s  *a = w;
    const llm_block_q8_K   *b = x;
    float                   sum = 0;

    for (int64_t i = 0; i < n / LLM_QK_K; i++, a++, b++) {
        const uint8_t  *sg = a->qs + LLM_QK_K / 8;
        int32x4_t       acc = vdupq_n_s32(0);

        for (int ib = 0; ib < LLM_QK_K / 32; ib++) {
            for (int h = 0; h < 2; h++) {
                acc = llm_iq2_dot16_neon(acc,
                          llm_iq2s_grid[llm_iq2_s_index(a, ib, 2 * h)],
                          llm_iq2s_grid[llm_iq2_s_index(a, ib, 2 * h + 1)],
                          llm_iq2_signs_neon(sg[4 * ib + 2 * h],
                                             sg[4 * ib + 2 * h + 1]),
                          b->qs + 32 * ib + 16 * h,
                          2 * (a->scales[ib] >> 4 * h & 0xf) + 1);
            }
        }
        sum += llm_iq2_h2f_neon(a->d) * b->d * (float) vaddvq_s32(acc);
    }
    *s = 0.125f * sum;
}


void
llm_kernels_init_iq2_neon(llm_kernels_t *k)
{
    k->vec_dot[LLM_TYPE_IQ2_XXS] = llm_dot_iq2_xxs_neon;
    k->vec_dot[LLM_TYPE_IQ2_XS] = llm_dot_iq2_xs_neon;
    k->vec_dot[LLM_TYPE_IQ2_S] = llm_dot_iq2_s_neon;
}
