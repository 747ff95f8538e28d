/*
 * AVX-512 (BW, DQ, VNNI) vec_dot kernels of IQ4_NL and MXFP4 (against
 * Q8_0) and IQ4_XS (against Q8_K): two 32-weight blocks per register.
 *
 * vpshufb looks the 4-bit codes up in a table of the levels' magnitudes
 * (|level| <= 127, unsigned); the level's sign, a function of the code's
 * bit 3 (negative for codes 0..7 in IQ4's table, 8..15 in MXFP4's),
 * becomes a mask that negates the activation bytes (Q8_0 / Q8_K quants
 * are within -127..127, so negation is exact).  IQ4_NL / MXFP4 then take
 * vpdpbusd to 32-bit sums per block; IQ4_XS takes vpmaddubsw pair sums
 * (at most 2 * 127 * 127) and vpdpwssd with the sub-block scales.  Every
 * block's integer sum is exact, as the scalar reference's, and the float
 * steps are those of the regrouped layouts' gemm (IQ4_NL_R16, MXFP4_R16,
 * IQ4_XS_R16): a row's result does not depend on whether it was regrouped.
 */

#include <immintrin.h>
#include <math.h>

#include "kernels_common.h"


/* |lv[0..15]| in all four 128-bit lanes. */
LLM_INLINE __m512i
llm_iq4_abs_table(const int8_t *lv)
{
    return _mm512_broadcast_i32x4(_mm_abs_epi8(
               _mm_loadu_si128((const void *) lv)));
}


/*
 * The codes of two 16-byte code groups c0, c1 (each a 32-weight block or
 * sub-block) in element order: [c0 low | c0 high | c1 low | c1 high]
 * nibbles, from t = [c0 | c1].
 */
LLM_INLINE __m512i
llm_iq4_codes64(__m256i t)
{
    __m512i  v = _mm512_inserti64x4(_mm512_castsi256_si512(t),
                                    _mm256_srli_epi16(t, 4), 1);

    v = _mm512_and_si512(v, _mm512_set1_epi8(0x0f));
    return _mm512_shuffle_i64x2(v, v, _MM_SHUFFLE(3, 1, 2, 0));
}


/*
 * The activation bytes y negated where the level of code c is negative:
 * codes with bit 3 clear (mx = 0, IQ4's table) or set (mx = 1, MXFP4's;
 * its code 8 is -0, whose sign does not matter).
 */
LLM_INLINE __m512i
llm_iq4_signed_y(const int mx, __m512i c, __m512i y)
{
    const __m512i  b3 = _mm512_set1_epi8(8);
    __mmask64      neg = mx ? _mm512_test_epi8_mask(c, b3)
                            : _mm512_testn_epi8_mask(c, b3);

    return _mm512_mask_sub_epi8(y, neg, _mm512_setzero_si512(), y);
}


/*
 * The two 8-lane halves of p summed: [sum of lanes 0..7, sum of lanes
 * 8..15] (exact int32).
 */
LLM_INLINE void
llm_iq4_sum2(__m512i p, int *s0, int *s1)
{
    __m256i  t = _mm256_hadd_epi32(_mm512_castsi512_si256(p),
                                   _mm512_extracti64x4_epi64(p, 1));
    __m128i  h;

    t = _mm256_hadd_epi32(t, t);
    h = _mm_add_epi32(_mm256_castsi256_si128(t),
                      _mm256_extracti128_si256(t, 1));
    *s0 = _mm_cvtsi128_si32(h);
    *s1 = _mm_extract_epi32(h, 1);
}


/*
 * IQ4_NL (mx = 0) or MXFP4 (mx = 1) . Q8_0 over n values, two blocks a
 * step, each block's exact integer sum then acc = fma(sum, d_w * d_x,
 * acc) block after block: the order of the regrouped layout's gemm
 * (quant_r16.c), so a row gives the same bits whether its matrix was
 * regrouped at load or streamed in the file's layout (the expert cache).
 * An odd last block pairs with itself and is counted once.
 */
LLM_INLINE void
llm_iq4_q8_0_dot512(const int mx, int64_t n, float *s, const void *w,
    const void *x)
{
    const size_t           bsz = mx ? sizeof(llm_block_mxfp4)
                                    : sizeof(llm_block_iq4_nl);
    const __m512i          tab = llm_iq4_abs_table(mx ? llm_mxfp4_kvalues
                                                      : llm_iq4_kvalues);
    const char            *wp = w;
    const llm_block_q8_0  *q = x;
    float                  acc = 0;
    int64_t                nb = n / LLM_QK, b;

    for (b = 0; b < nb; b += 2) {
        const int       two = b + 1 < nb;
        const char     *w0 = wp + b * bsz, *w1 = two ? w0 + bsz : w0;
        const uint8_t  *qs0, *qs1;
        float           d0, d1;
        int             i0, i1;

        if (mx) {
            const llm_block_mxfp4  *p0 = (const llm_block_mxfp4 *) w0;
            const llm_block_mxfp4  *p1 = (const llm_block_mxfp4 *) w1;

            qs0 = p0->qs;
            qs1 = p1->qs;
            d0 = llm_mxfp4_e8m0_half(p0->e) * llm_h2f_hw(q[b].d);
            d1 = two ? llm_mxfp4_e8m0_half(p1->e) * llm_h2f_hw(q[b + 1].d)
                     : 0.0f;
        } else {
            const llm_block_iq4_nl  *p0 = (const llm_block_iq4_nl *) w0;
            const llm_block_iq4_nl  *p1 = (const llm_block_iq4_nl *) w1;

            qs0 = p0->qs;
            qs1 = p1->qs;
            d0 = llm_h2f_hw(p0->d) * llm_h2f_hw(q[b].d);
            d1 = two ? llm_h2f_hw(p1->d) * llm_h2f_hw(q[b + 1].d) : 0.0f;
        }
        _mm_prefetch(w0 + 8 * 64, _MM_HINT_T0);

        __m512i  c = llm_iq4_codes64(_mm256_set_m128i(
                         _mm_loadu_si128((const void *) qs1),
                         _mm_loadu_si128((const void *) qs0)));
        __m512i  y = _mm512_inserti64x4(
                         _mm512_castsi256_si512(
                             _mm256_loadu_si256((const void *) q[b].qs)),
                         _mm256_loadu_si256((const void *)
                                            q[two ? b + 1 : b].qs), 1);
        __m512i  p32 = _mm512_dpbusd_epi32(_mm512_setzero_si512(),
                           _mm512_shuffle_epi8(tab, c),
                           llm_iq4_signed_y(mx, c, y));

        llm_iq4_sum2(p32, &i0, &i1);
        acc = fmaf((float) i0, d0, acc);
        if (two) {
            acc = fmaf((float) i1, d1, acc);
        }
    }
    *s = acc;
}


static void
llm_dot_iq4_nl_avx512(int64_t n, float *s, const void *w, const void *x)
{
    llm_iq4_q8_0_dot512(0, n, s, w, x);
}


static void
llm_dot_mxfp4_avx512(int64_t n, float *s, const void *w, const void *x)
{
    llm_iq4_q8_0_dot512(1, n, s, w, x);
}


/*
 * IQ4_XS . Q8_K over n values: per super-block, two sub-blocks a step,
 * pair sums times [ls_j - 32 x 16 | ls_j+1 - 32 x 16] by vpdpwssd, summed
 * exactly in int32, then acc = fma(sum, d_w * d_x, acc): the order of
 * IQ4_XS_R16 (quant_r16.c), as for IQ4_NL above.
 */
static void
llm_dot_iq4_xs_avx512(int64_t n, float *s, const void *w, const void *x)
{
    const __m512i            tab = llm_iq4_abs_table(llm_iq4_kvalues);
    const llm_block_iq4_xs  *a = w;
    const llm_block_q8_K    *q = x;
    float                    acc = 0;
    int64_t                  nb = n / LLM_QK_K, b;

    for (b = 0; b < nb; b++, a++, q++) {
        __m512i  isum = _mm512_setzero_si512();

        _mm_prefetch((const char *) (a + 4), _MM_HINT_T0);
#pragma GCC unroll 4
        for (int j = 0; j < LLM_QK_K / 32; j += 2) {
            int      sl = a->scales_l[j / 2], sh = a->scales_h >> 2 * j;
            int      ls0 = ((sl & 0xf) | (sh & 3) << 4) - 32;
            int      ls1 = ((sl >> 4) | (sh >> 2 & 3) << 4) - 32;
            __m512i  c = llm_iq4_codes64(
                             _mm256_loadu_si256((const void *)
                                                (a->qs + 16 * j)));
            __m512i  y = _mm512_loadu_si512((const void *) (q->qs + 32 * j));
            __m512i  p16 = _mm512_maddubs_epi16(_mm512_shuffle_epi8(tab, c),
                                                llm_iq4_signed_y(0, c, y));
            __m512i  sc = _mm512_inserti64x4(
                              _mm512_set1_epi16((short) ls0),
                              _mm256_set1_epi16((short) ls1), 1);

            isum = _mm512_dpwssd_epi32(isum, p16, sc);
        }
        acc = fmaf((float) _mm512_reduce_add_epi32(isum),
                   llm_h2f_hw(a->d) * q->d, acc);
    }
    *s = acc;
}


void
llm_kernels_init_iq4_avx512(llm_kernels_t *k)
{
    k->vec_dot[LLM_TYPE_IQ4_NL] = llm_dot_iq4_nl_avx512;
    k->vec_dot[LLM_TYPE_IQ4_XS] = llm_dot_iq4_xs_avx512;
    k->vec_dot[LLM_TYPE_MXFP4] = llm_dot_mxfp4_avx512;
    /* not AVX2's octet tiles (other float steps): the file layout's gemm
     * is these vec_dots, row by row (the regrouped layouts have theirs) */
    k->gemm[LLM_TYPE_IQ4_NL] = NULL;
    k->gemm[LLM_TYPE_MXFP4] = NULL;
}
