/*
 * NEON (dot-product extension) vec_dot kernels of IQ4_NL and MXFP4
 * (against Q8_0) and IQ4_XS (against Q8_K).
 *
 * vqtbl1q_s8 looks the 4-bit codes up in the type's 16 levels as signed
 * bytes, and SDOT multiplies them with the activation bytes: four exact
 * 32-bit partial sums per block (IQ4_XS: per sub-block, times its scale
 * ls - 32 and summed exactly per super-block), converted to float and
 * added with one fused multiply by the block's scale.  Only the float
 * accumulation order differs from the scalar reference's.
 */

#include <arm_neon.h>
#include <string.h>

#include "quant.h"
#include "kernels_common.h"


/* fp16 -> fp32 with the FCVT instruction (exact). */
static inline float
llm_iq4_h2f_neon(uint16_t h)
{
    __fp16  f;

    memcpy(&f, &h, sizeof(f));
    return (float) f;
}


/* Four partial sums of level(code) * y over one 32-value block: codes in
 * qs (low nibbles 0..15, high 16..31), y 32 int8, levels tab. */
static inline __attribute__((always_inline)) int32x4_t
llm_iq4_dot32_neon(int8x16_t tab, const uint8_t *qs, const int8_t *y)
{
    uint8x16_t  c = vld1q_u8(qs);
    int8x16_t   lo = vqtbl1q_s8(tab, vandq_u8(c, vdupq_n_u8(0x0f)));
    int8x16_t   hi = vqtbl1q_s8(tab, vshrq_n_u8(c, 4));

    return vdotq_s32(vdotq_s32(vdupq_n_s32(0), lo, vld1q_s8(y)),
                     hi, vld1q_s8(y + 16));
}


/*
 * IQ4_NL (mx = 0) or MXFP4 (mx = 1) . Q8_0 over n values: per block the
 * exact partial sums times d_w * d_x, in two accumulators.
 */
static inline __attribute__((always_inline)) void
llm_iq4_q8_0_dot_neon(const int mx, int64_t n, float *s, const void *w,
    const void *x)
{
    const size_t           bsz = mx ? sizeof(llm_block_mxfp4)
                                    : sizeof(llm_block_iq4_nl);
    const int8x16_t        tab = vld1q_s8(mx ? llm_mxfp4_kvalues
                                             : llm_iq4_kvalues);
    const char            *wp = w;
    const llm_block_q8_0  *q = x;
    float32x4_t            acc[2] = { vdupq_n_f32(0), vdupq_n_f32(0) };
    int64_t                nb = n / LLM_QK, b;

    for (b = 0; b < nb; b++, wp += bsz, q++) {
        const uint8_t  *qs;
        float           d;

        if (mx) {
            const llm_block_mxfp4  *p = (const llm_block_mxfp4 *) wp;

            qs = p->qs;
            d = llm_iq4_h2f_neon(q->d) * llm_mxfp4_e8m0_half(p->e);
        } else {
            const llm_block_iq4_nl  *p = (const llm_block_iq4_nl *) wp;

            qs = p->qs;
            d = llm_iq4_h2f_neon(p->d) * llm_iq4_h2f_neon(q->d);
        }
        __builtin_prefetch(wp + 8 * 64);
        acc[b & 1] = vfmaq_n_f32(acc[b & 1],
                         vcvtq_f32_s32(llm_iq4_dot32_neon(tab, qs, q->qs)),
                         d);
    }
    *s = vaddvq_f32(vaddq_f32(acc[0], acc[1]));
}


static void
llm_dot_iq4_nl_neon(int64_t n, float *s, const void *w, const void *x)
{
    llm_iq4_q8_0_dot_neon(0, n, s, w, x);
}


static void
llm_dot_mxfp4_neon(int64_t n, float *s, const void *w, const void *x)
{
    llm_iq4_q8_0_dot_neon(1, n, s, w, x);
}


/*
 * IQ4_XS . Q8_K over n values: per super-block the sub-block partial sums
 * times ls_j - 32, summed exactly in int32, then times d_w * d_x.
 */
static void
llm_dot_iq4_xs_neon(int64_t n, float *s, const void *w, const void *x)
{
    const int8x16_t          tab = vld1q_s8(llm_iq4_kvalues);
    const llm_block_iq4_xs  *a = w;
    const llm_block_q8_K    *q = x;
    float32x4_t              acc = vdupq_n_f32(0);
    int64_t                  nb = n / LLM_QK_K, b;

    for (b = 0; b < nb; b++, a++, q++) {
        int32x4_t  isum = vdupq_n_s32(0);

        __builtin_prefetch(a + 4);
        for (int j = 0; j < LLM_QK_K / 32; j++) {
            int  ls = ((a->scales_l[j / 2] >> 4 * (j % 2)) & 0xf)
                      | ((a->scales_h >> 2 * j) & 3) << 4;

            isum = vmlaq_n_s32(isum,
                       llm_iq4_dot32_neon(tab, a->qs + 16 * j,
                                          q->qs + 32 * j),
                       ls - 32);
        }
        acc = vfmaq_n_f32(acc, vcvtq_f32_s32(isum),
                          q->d * llm_iq4_h2f_neon(a->d));
    }
    *s = vaddvq_f32(acc);
}


void
llm_kernels_init_iq4_neon(llm_kernels_t *k)
{
    k->vec_dot[LLM_TYPE_IQ4_NL] = llm_dot_iq4_nl_neon;
    k->vec_dot[LLM_TYPE_IQ4_XS] = llm_dot_iq4_xs_neon;
    k->vec_dot[LLM_TYPE_MXFP4] = llm_dot_mxfp4_neon;
}
