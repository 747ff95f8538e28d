/*
 * NEON (dot-product extension) vec_dot kernels of IQ1_S and IQ1_M
 * against Q8_K.
 *
 * Two 64-bit loads from llm_iq1_grid give 16 grid values (-1, 0, 1 as
 * bytes); shifted left by 3 and plus the groups' delta signs they are
 * 8 (point + delta) in -9..9, and SDOT multiplies them with the
 * activation bytes: per half or sub-block the exact integer sum, times
 * the scale 2 s + 1, summed per super-block to 8 sumi + sumi1 of the
 * scalar reference (quant_iq1.c), then scaled once by d_w * d_x / 8 in
 * general registers.  The aarch64 build does not fuse multiply-adds, so
 * the result is the reference's bit for bit.
 */

#include <arm_neon.h>
#include <string.h>

#include "quant.h"
#include "kernels_common.h"


/* fp16 -> fp32 with the FCVT instruction (exact). */
static inline float
llm_iq1_h2f_neon(uint16_t h)
{
    __fp16  f;

    memcpy(&f, &h, sizeof(f));
    return (float) f;
}


/* 8 (point + delta) of points i0, i1 with delta signs neg0, neg1. */
static inline int8x16_t
llm_iq1_w16(unsigned i0, unsigned i1, unsigned neg0, unsigned neg1)
{
    int8x16_t  g = vcombine_s8(vld1_s8((const int8_t *) (llm_iq1_grid + i0)),
                               vld1_s8((const int8_t *) (llm_iq1_grid + i1)));
    int8x16_t  d = vcombine_s8(vdup_n_s8(neg0 ? -1 : 1),
                               vdup_n_s8(neg1 ? -1 : 1));

    return vaddq_s8(vshlq_n_s8(g, 3), d);
}


/* Sum of w * y over 16 bytes. */
static inline int
llm_iq1_dot16(int8x16_t w, const int8_t *y)
{
    return vaddvq_s32(vdotq_s32(vdupq_n_s32(0), w, vld1q_s8(y)));
}


static void
llm_dot_iq1_s_neon(int64_t n, float *s, const void *w, const void *x)
{
    const llm_block_iq1_s  *a = w;
    const llm_block_q8_K   *q = x;
    float                   sum = 0;
    int64_t                 nb = n / LLM_QK_K, b;

    for (b = 0; b < nb; b++, a++, q++) {
        int  isum = 0;

        for (int ib = 0; ib < LLM_QK_K / 32; ib++) {
            const uint8_t  *qs = a->qs + 4 * ib;
            const int8_t   *y = q->qs + 32 * ib;
            unsigned        h = a->qh[ib], neg = h >> 15;
            int             ls = (int) (2 * (h >> 12 & 7) + 1);
            int8x16_t       w0 = llm_iq1_w16(qs[0] | (h << 8 & 0x700),
                                             qs[1] | (h << 5 & 0x700),
                                             neg, neg);
            int8x16_t       w1 = llm_iq1_w16(qs[2] | (h << 2 & 0x700),
                                             qs[3] | (h >> 1 & 0x700),
                                             neg, neg);

            isum += ls * vaddvq_s32(vdotq_s32(
                             vdotq_s32(vdupq_n_s32(0), w0, vld1q_s8(y)),
                             w1, vld1q_s8(y + 16)));
        }
        sum += llm_iq1_h2f_neon(a->d) * q->d * 0.125f * (float) isum;
    }
    *s = sum;
}


static void
llm_dot_iq1_m_neon(int64_t n, float *s, const void *w, const void *x)
{
    const llm_block_iq1_m  *a = w;
    const llm_block_q8_K   *q = x;
    float                   sum = 0;
    int64_t                 nb = n / LLM_QK_K, b;

    for (b = 0; b < nb; b++, a++, q++) {
        int  isum = 0;

        for (int ib = 0; ib < LLM_QK_K / 32; ib++) {
            const uint8_t  *qs = a->qs + 4 * ib;
            const int8_t   *y = q->qs + 32 * ib;
            unsigned        h0 = a->qh[2 * ib], h1 = a->qh[2 * ib + 1];
            unsigned        sc = (a->scales[ib & ~1]
                                  | (unsigned) a->scales[(ib & ~1) + 1] << 8)
                                 >> 6 * (ib % 2);
            int8x16_t       w0 = llm_iq1_w16(qs[0] | (h0 << 8 & 0x700),
                                             qs[1] | (h0 << 4 & 0x700),
                                             h0 & 0x08, h0 & 0x80);
            int8x16_t       w1 = llm_iq1_w16(qs[2] | (h1 << 8 & 0x700),
                                             qs[3] | (h1 << 4 & 0x700),
                                             h1 & 0x08, h1 & 0x80);

            isum += (int) (2 * (sc & 7) + 1) * llm_iq1_dot16(w0, y)
                    + (int) (2 * (sc >> 3 & 7) + 1)
                      * llm_iq1_dot16(w1, y + 16);
        }
        sum += llm_iq1_h2f_neon(llm_iq1_m_d(a->scales)) * q->d * 0.125f
               * (float) isum;
    }
    *s = sum;
}


void
llm_kernels_init_iq1_neon(llm_kernels_t *k)
{
    k->vec_dot[LLM_TYPE_IQ1_S] = llm_dot_iq1_s_neon;
    k->vec_dot[LLM_TYPE_IQ1_M] = llm_dot_iq1_m_neon;
}
