/*
 * NEON (dot-product extension) kernels of Q2_K and Q3_K against Q8_K
 * activations (quant_k23.c has the layouts and the scalar references).
 *
 * A 16-byte load of qs shifted right by 2k and masked is one sub-block's
 * 16 quants, 0..3 (Q2_K, signed as they are) or, with the hmask bit,
 * -4..3 (Q3_K); SDOT against the activations gives four exact partial
 * sums, multiplied by the sub-block scale into an int32 accumulator.
 * Q2_K's mins are the scales times Q8_K's bsums.  The block's int is
 * scaled once, as the scalar reference does; gemm is the generic loop
 * over vec_dot.
 */

#include <arm_neon.h>
#include <string.h>

#include "quant.h"
#include "kernels_common.h"


LLM_INLINE float
llm_k23_h2f(uint16_t h)
{
    __fp16  f;

    memcpy(&f, &h, sizeof(f));
    return (float) f;
}


/* The 16 signed Q3_K scales (-32..31), sub-block order, into sc[16]. */
LLM_INLINE void
llm_q3_K_scales_neon(const uint8_t *sc12, int8_t *sc)
{
    uint32_t  a0, a1, a2, v[4];

    memcpy(&a0, sc12, 4);
    memcpy(&a1, sc12 + 4, 4);
    memcpy(&a2, sc12 + 8, 4);
    v[0] = (a0 & 0x0f0f0f0f) | (a2 & 0x03030303) << 4;
    v[1] = (a1 & 0x0f0f0f0f) | (a2 >> 2 & 0x03030303) << 4;
    v[2] = (a0 >> 4 & 0x0f0f0f0f) | (a2 >> 4 & 0x03030303) << 4;
    v[3] = (a1 >> 4 & 0x0f0f0f0f) | (a2 >> 6 & 0x03030303) << 4;
    vst1q_s8(sc, vsubq_s8(vreinterpretq_s8_u32(vld1q_u32(v)),
                          vdupq_n_s8(32)));
}


/*
 * Q2_K . Q8_K: per block d_x d sum_s sc_s (q_s . x_s)
 * - d_x dmin sum_s m_s bsums_s.
 */
static void
llm_dot_q2_K_neon(int64_t n, float *s, const void *w, const void *x)
{
    const llm_block_q2_K  *a = w;
    const llm_block_q8_K  *b = x;
    const uint8x16_t       m3 = vdupq_n_u8(0x03);
    float                  sum = 0;

    for (int64_t i = 0; i < n / LLM_QK_K; i++, a++, b++) {
        uint8x16_t  raw = vld1q_u8(a->scales);
        int16x8_t   m0 = vreinterpretq_s16_u16(
                             vmovl_u8(vshr_n_u8(vget_low_u8(raw), 4)));
        int16x8_t   m1 = vreinterpretq_s16_u16(
                             vmovl_u8(vshr_n_u8(vget_high_u8(raw), 4)));
        int32x4_t   macc, iacc = vdupq_n_s32(0);
        uint8_t     sc[16];
        int16_t     bs[16];

        __builtin_prefetch((const char *) a + 4 * sizeof(*a));
        memcpy(bs, b->bsums, sizeof(bs));
        vst1q_u8(sc, vandq_u8(raw, vdupq_n_u8(0x0f)));
        macc = vmull_s16(vget_low_s16(m0), vld1_s16(bs));
        macc = vmlal_s16(macc, vget_high_s16(m0), vld1_s16(bs + 4));
        macc = vmlal_s16(macc, vget_low_s16(m1), vld1_s16(bs + 8));
        macc = vmlal_s16(macc, vget_high_s16(m1), vld1_s16(bs + 12));

        for (int h = 0; h < 2; h++) {
            uint8x16_t  q0 = vld1q_u8(a->qs + 32 * h);
            uint8x16_t  q1 = vld1q_u8(a->qs + 32 * h + 16);
            const int8_t  *y = b->qs + 128 * h;

            for (int k = 0; k < 4; k++) {
                int8x16_t  shift = vdupq_n_s8((int8_t) (-2 * k));
                int8x16_t  v0 = vreinterpretq_s8_u8(
                                    vandq_u8(vshlq_u8(q0, shift), m3));
                int8x16_t  v1 = vreinterpretq_s8_u8(
                                    vandq_u8(vshlq_u8(q1, shift), m3));
                int        sb = 8 * h + 2 * k;

                iacc = vmlaq_n_s32(iacc, vdotq_s32(vdupq_n_s32(0), v0,
                                       vld1q_s8(y + 32 * k)), sc[sb]);
                iacc = vmlaq_n_s32(iacc, vdotq_s32(vdupq_n_s32(0), v1,
                                       vld1q_s8(y + 32 * k + 16)),
                                   sc[sb + 1]);
            }
        }
        sum += b->d * llm_k23_h2f(a->d) * vaddvq_s32(iacc)
               - b->d * llm_k23_h2f(a->dmin) * vaddvq_s32(macc);
    }
    *s = sum;
}


/* Q3_K . Q8_K: per block d_x d sum_s (sc_s - 32) (q_s . x_s). */
static void
llm_dot_q3_K_neon(int64_t n, float *s, const void *w, const void *x)
{
    const llm_block_q3_K  *a = w;
    const llm_block_q8_K  *b = x;
    const uint8x16_t       m3 = vdupq_n_u8(0x03);
    const int8x16_t        four = vdupq_n_s8(4);
    float                  sum = 0;

    for (int64_t i = 0; i < n / LLM_QK_K; i++, a++, b++) {
        uint8x16_t  hm0 = vld1q_u8(a->hmask), hm1 = vld1q_u8(a->hmask + 16);
        int32x4_t   iacc = vdupq_n_s32(0);
        int8_t      sc[16];

        __builtin_prefetch((const char *) a + 4 * sizeof(*a));
        llm_q3_K_scales_neon(a->scales, sc);

        for (int h = 0; h < 2; h++) {
            uint8x16_t  q0 = vld1q_u8(a->qs + 32 * h);
            uint8x16_t  q1 = vld1q_u8(a->qs + 32 * h + 16);
            const int8_t  *y = b->qs + 128 * h;

            for (int k = 0; k < 4; k++) {
                int8x16_t   shift = vdupq_n_s8((int8_t) (-2 * k));
                uint8x16_t  bit = vdupq_n_u8((uint8_t) (1u << (4 * h + k)));
                /* q - 4 where the hmask bit is clear */
                int8x16_t   v0 = vsubq_s8(vreinterpretq_s8_u8(
                                     vandq_u8(vshlq_u8(q0, shift), m3)),
                                     vbicq_s8(four, vreinterpretq_s8_u8(
                                         vtstq_u8(hm0, bit))));
                int8x16_t   v1 = vsubq_s8(vreinterpretq_s8_u8(
                                     vandq_u8(vshlq_u8(q1, shift), m3)),
                                     vbicq_s8(four, vreinterpretq_s8_u8(
                                         vtstq_u8(hm1, bit))));
                int         sb = 8 * h + 2 * k;

                iacc = vmlaq_n_s32(iacc, vdotq_s32(vdupq_n_s32(0), v0,
                                       vld1q_s8(y + 32 * k)), sc[sb]);
                iacc = vmlaq_n_s32(iacc, vdotq_s32(vdupq_n_s32(0), v1,
                                       vld1q_s8(y + 32 * k + 16)),
                                   sc[sb + 1]);
            }
        }
        sum += b->d * llm_k23_h2f(a->d) * vaddvq_s32(iacc);
    }
    *s = sum;
}


void
llm_kernels_init_k23_neon(llm_kernels_t *k)
{
    k->vec_dot[LLM_TYPE_Q2_K] = llm_dot_q2_K_neon;
    k->vec_dot[LLM_TYPE_Q3_K] = llm_dot_q3_K_neon;
}
