/*
 * NEON (dot-product extension) vec_dot kernels of IQ3_XXS and IQ3_S
 * against Q8_K.
 *
 * Per 32-weight sub-block: its 8 grid entries are loaded as 32 magnitude
 * bytes (at most 62, so valid int8), the 32 sign bits become byte masks
 * (each sign byte duplicated over 8 lanes, tested against the lane's
 * bit) that negate the activation bytes (Q8_K quants are within
 * -127..127, so negation is exact), and SDOT gives four exact 32-bit
 * partial sums, times the sub-block's odd scale 2 ls + 1 and summed
 * exactly per super-block, then converted and scaled by d_w * d_x.  Only
 * the float accumulation order differs from the scalar reference's.
 */

#include <arm_neon.h>
#include <string.h>

#include "quant.h"
#include "kernels_common.h"


/* fp16 -> fp32 with the FCVT instruction (exact). */
static inline float
llm_iq3_h2f_neon(uint16_t h)
{
    __fp16  f;

    memcpy(&f, &h, sizeof(f));
    return (float) f;
}


/* 16 activation bytes y, negated where bit i of the 16 bits sg is set. */
static inline __attribute__((always_inline)) int8x16_t
llm_iq3_signed16(const int8_t *y, uint32_t sg)
{
    static const uint8_t  bits[16] = {
        1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128
    };
    uint8x16_t            v = vcombine_u8(vdup_n_u8((uint8_t) sg),
                                          vdup_n_u8((uint8_t) (sg >> 8)));
    int8x16_t             m = vreinterpretq_s8_u8(vtstq_u8(v,
                                                      vld1q_u8(bits)));
    int8x16_t             yv = vld1q_s8(y);

    return vsubq_s8(veorq_s8(yv, m), m);
}


/* Four partial sums of +-magnitude * y over one sub-block: grid entries
 * g[0..8), sign bits sg, activations y[0..32). */
static inline __attribute__((always_inline)) int32x4_t
llm_iq3_dot32_neon(const uint32_t *g, uint32_t sg, const int8_t *y)
{
    int8x16_t  g0 = vreinterpretq_s8_u32(vld1q_u32(g));
    int8x16_t  g1 = vreinterpretq_s8_u32(vld1q_u32(g + 4));

    return vdotq_s32(vdotq_s32(vdupq_n_s32(0), g0,
                               llm_iq3_signed16(y, sg)),
                     g1, llm_iq3_signed16(y + 16, sg >> 16));
}


/* IQ3_XXS's 32 sign bits of sub-block word aux: 7 stored per 8, the 8th
 * the parity of the 7. */
static inline uint32_t
llm_iq3_xxs_signs_neon(uint32_t aux)
{
    uint32_t  s = 0;

    for (int l = 0; l < 4; l++) {
        uint32_t  b = (aux >> 7 * l) & 127;

        s |= (b | (uint32_t) __builtin_parity(b) << 7) << 8 * l;
    }
    return s;
}


/*
 * IQ3_XXS . Q8_K over n values: per super-block the exact sum of
 * (2 ls_j + 1) * dot_j (four int32 lanes), times d_w * d_x; the total
 * times 1/4.
 */
static void
llm_dot_iq3_xxs_neon(int64_t n, float *s, const void *w, const void *x)
{
    const llm_block_iq3_xxs  *a = w;
    const llm_block_q8_K     *q = x;
    float32x4_t               acc = vdupq_n_f32(0);
    int64_t                   nb = n / LLM_QK_K, b;

    for (b = 0; b < nb; b++, a++, q++) {
        int32x4_t  isum = vdupq_n_s32(0);

        __builtin_prefetch(a + 4);
        for (int j = 0; j < LLM_QK_K / 32; j++) {
            uint32_t  aux, g[8];

            memcpy(&aux, a->sas + 4 * j, 4);
            for (int k = 0; k < 8; k++) {
                g[k] = llm_iq3xxs_grid[a->qs[8 * j + k]];
            }
            isum = vmlaq_n_s32(isum,
                       llm_iq3_dot32_neon(g, llm_iq3_xxs_signs_neon(aux),
                                          q->qs + 32 * j),
                       (int32_t) (2 * (aux >> 28) + 1));
        }
        acc = vfmaq_n_f32(acc, vcvtq_f32_s32(isum),
                          llm_iq3_h2f_neon(a->d) * q->d);
    }
    *s = 0.25f * vaddvq_f32(acc);
}


/*
 * IQ3_S . Q8_K over n values: per super-block the exact sum of
 * (2 ls_j + 1) * dot_j, times d_w * d_x.
 */
static void
llm_dot_iq3_s_neon(int64_t n, float *s, const void *w, const void *x)
{
    const llm_block_iq3_s  *a = w;
    const llm_block_q8_K   *q = x;
    float32x4_t             acc = vdupq_n_f32(0);
    int64_t                 nb = n / LLM_QK_K, b;

    for (b = 0; b < nb; b++, a++, q++) {
        int32x4_t  isum = vdupq_n_s32(0);

        __builtin_prefetch(a + 4);
        for (int j = 0; j < LLM_QK_K / 32; j++) {
            int       ls = (a->scales[j / 2] >> 4 * (j % 2)) & 0xf;
            uint32_t  sg, g[8];

            memcpy(&sg, a->signs + 4 * j, 4);
            for (int k = 0; k < 8; k++) {
                g[k] = llm_iq3s_grid[a->qs[8 * j + k]
                                     | ((a->qh[j] >> k) & 1) << 8];
            }
            isum = vmlaq_n_s32(isum,
                       llm_iq3_dot32_neon(g, sg, q->qs + 32 * j),
                       2 * ls + 1);
        }
        acc = vfmaq_n_f32(acc, vcvtq_f32_s32(isum),
                          llm_iq3_h2f_neon(a->d) * q->d);
    }
    *s = vaddvq_f32(acc);
}


void
llm_kernels_init_iq3_neon(llm_kernels_t *k)
{
    k->vec_dot[LLM_TYPE_IQ3_XXS] = llm_dot_iq3_xxs_neon;
    k->vec_dot[LLM_TYPE_IQ3_S] = llm_dot_iq3_s_neon;
}
