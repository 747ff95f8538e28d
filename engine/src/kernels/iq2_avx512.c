/*
 * AVX-512 (BW) vec_dot kernels of IQ2_XXS, IQ2_XS and IQ2_S against Q8_K
 * (issue 32).
 *
 * Per 64 weights (two sub-blocks, one register): the 8 groups' grid
 * entries are loaded as 64-bit words (unsigned magnitudes <= 43); the
 * activations to negate (|q| <= 127, no overflow) are a 64-bit byte mask:
 * IQ2_S's 8 sign bytes read as one word are that mask, IQ2_XS's 7-bit
 * codes get their parity bit in 16-bit lanes and packed to bytes make it,
 * IQ2_XXS takes its codes' byte masks from llm_iq2_signs64 (vpmovb2m).
 * vpmaddubsw gives pair sums of at most 2 * 43 * 127, vpmaddwd multiplies
 * them by the scale 2s + 1 of each 32 (IQ2_XXS) or 16 weights (one per
 * 128-bit lane).  The super-block's integer sum is exact and equal to the
 * scalar reference's (quant_iq2.c), and is scaled with the same float
 * steps.
 */

#include <immintrin.h>

#include "kernels_common.h"


/* 8 64-bit words a[0..4), b[0..4) as one register. */
LLM_INLINE __m512i
llm_iq2_words8(uint64_t a0, uint64_t a1, uint64_t a2, uint64_t a3,
    uint64_t b0, uint64_t b1, uint64_t b2, uint64_t b3)
{
    __m256i  lo = _mm256_setr_epi64x((long long) a0, (long long) a1,
                                     (long long) a2, (long long) a3);
    __m256i  hi = _mm256_setr_epi64x((long long) b0, (long long) b1,
                                     (long long) b2, (long long) b3);

    return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}


/*
 * 64 weights: grid magnitudes g (8 groups), activations q8 negated where
 * the byte mask neg is set, 16-bit scales sc: 16 int32 partial sums of
 * sc * +-g * q8.
 */
LLM_INLINE __m512i
llm_iq2_dot64(__m512i g, __mmask64 neg, const int8_t *q8, __m512i sc)
{
    __m512i  q = _mm512_loadu_si512((const void *) q8);

    q = _mm512_mask_sub_epi8(q, neg, _mm512_setzero_si512(), q);
    return _mm512_madd_epi16(_mm512_maddubs_epi16(g, q), sc);
}


/* The byte mask of 8 7-bit sign codes (llm_iq2_signs64). */
LLM_INLINE __mmask64
llm_iq2_codes512(unsigned c0, unsigned c1, unsigned c2, unsigned c3,
    unsigned c4, unsigned c5, unsigned c6, unsigned c7)
{
    return _mm512_movepi8_mask(llm_iq2_words8(
               llm_iq2_signs64[c0], llm_iq2_signs64[c1], llm_iq2_signs64[c2],
               llm_iq2_signs64[c3], llm_iq2_signs64[c4], llm_iq2_signs64[c5],
               llm_iq2_signs64[c6], llm_iq2_signs64[c7]));
}


/* The 16-bit scale 2 s + 1 in all four words of a 64-bit lane. */
LLM_INLINE long long
llm_iq2_sc4(int s)
{
    return (long long) (0x0001000100010001ull * (uint64_t) (2 * s + 1));
}


/*
 * The sign bits of 8 groups from their 7-bit codes (the 16-bit lanes of
 * c): code | parity << 7 in byte l, which read as a 64-bit word is the
 * byte mask of the activations to negate.
 */
LLM_INLINE __mmask64
llm_iq2_codes8(__m128i c)
{
    __m128i  p = _mm_xor_si128(c, _mm_srli_epi16(c, 4));

    p = _mm_xor_si128(p, _mm_srli_epi16(p, 2));
    p = _mm_xor_si128(p, _mm_srli_epi16(p, 1));
    p = _mm_or_si128(c, _mm_slli_epi16(_mm_and_si128(p,
                                           _mm_set1_epi16(1)), 7));
    return (__mmask64) _mm_cvtsi128_si64(_mm_packus_epi16(p, p));
}


/* IQ2_XS / IQ2_S scales of sub-blocks ib, ib + 1: 2s + 1 of each 16
 * weights, in the 8 words of its 128-bit lane. */
LLM_INLINE __m512i
llm_iq2_scales16(const uint8_t *scales, int ib)
{
    const __m512i  lanes = _mm512_setr_epi64(0, 0, 0x0001000100010001ll,
                               0x0001000100010001ll, 0x0002000200020002ll,
                               0x0002000200020002ll, 0x0003000300030003ll,
                               0x0003000300030003ll);
    uint16_t       two;
    __m128i        v;

    memcpy(&two, scales + ib, 2);
    /* the 4 nibbles as 16-bit words, then 2s + 1 */
    v = _mm_cvtepu8_epi16(_mm_cvtsi32_si128(
            (int) ((two & 0xf) | (two >> 4 & 0xf) << 8
                   | (uint32_t) (two >> 8 & 0xf) << 16
                   | (uint32_t) (two >> 12) << 24)));
    v = _mm_add_epi16(_mm_add_epi16(v, v), _mm_set1_epi16(1));
    return _mm512_permutexvar_epi16(lanes, _mm512_castsi128_si512(v));
}


/* IQ2_XXS . Q8_K over n values (a multiple of 256) into *s. */
static void
llm_dot_iq2_xxs_avx512(int64_t n, float *s, const void *w, const void *x)
{
    const uint64_t           *gr = llm_iq2xxs_grid;
    const llm_block_iq2_xxs  *a = w;
    const llm_block_q8_K     *b = x;
    float                     sum = 0;

    for (int64_t i = 0; i < n / LLM_QK_K; i++, a++, b++) {
        __m512i  acc = _mm512_setzero_si512();

        for (int ib = 0; ib < LLM_QK_K / 32; ib += 2) {
            uint32_t   u[4];
            long long  r0, r1;
            __mmask64  neg;
            __m512i    g;

            memcpy(u, a->qs + 4 * ib, 16);
            g = llm_iq2_words8(gr[u[0] & 0xff], gr[u[0] >> 8 & 0xff],
                               gr[u[0] >> 16 & 0xff], gr[u[0] >> 24],
                               gr[u[2] & 0xff], gr[u[2] >> 8 & 0xff],
                               gr[u[2] >> 16 & 0xff], gr[u[2] >> 24]);
            neg = llm_iq2_codes512(u[1] & 127, u[1] >> 7 & 127,
                                   u[1] >> 14 & 127, u[1] >> 21 & 127,
                                   u[3] & 127, u[3] >> 7 & 127,
                                   u[3] >> 14 & 127, u[3] >> 21 & 127);
            r0 = llm_iq2_sc4(u[1] >> 28);
            r1 = llm_iq2_sc4(u[3] >> 28);
            acc = _mm512_add_epi32(acc, llm_iq2_dot64(g, neg,
                      b->qs + 32 * ib,
                      _mm512_setr_epi64(r0, r0, r0, r0, r1, r1, r1, r1)));
        }
        sum += llm_h2f_hw(a->d) * b->d
               * (float) _mm512_reduce_add_epi32(acc);
    }
    *s = 0.125f * sum;
}


/* IQ2_XS . Q8_K over n values (a multiple of 256) into *s. */
static void
llm_dot_iq2_xs_avx512(int64_t n, float *s, const void *w, const void *x)
{
    const uint64_t          *gr = llm_iq2xs_grid;
    const llm_block_iq2_xs  *a = w;
    const llm_block_q8_K    *b = x;
    float                    sum = 0;

    for (int64_t i = 0; i < n / LLM_QK_K; i++, a++, b++) {
        __m512i  acc = _mm512_setzero_si512();

        for (int ib = 0; ib < LLM_QK_K / 32; ib += 2) {
            uint64_t   q[2];
            __m512i    g;
            __mmask64  neg;

            memcpy(q, a->qs + 4 * ib, 16);
            g = llm_iq2_words8(gr[q[0] & 511], gr[q[0] >> 16 & 511],
                               gr[q[0] >> 32 & 511], gr[q[0] >> 48 & 511],
                               gr[q[1] & 511], gr[q[1] >> 16 & 511],
                               gr[q[1] >> 32 & 511], gr[q[1] >> 48 & 511]);
            neg = llm_iq2_codes8(_mm_srli_epi16(
                      _mm_loadu_si128((const void *) q), 9));
            acc = _mm512_add_epi32(acc, llm_iq2_dot64(g, neg,
                      b->qs + 32 * ib, llm_iq2_scales16(a->scales, ib)));
        }
        sum += llm_h2f_hw(a->d) * b->d
               * (float) _mm512_reduce_add_epi32(acc);
    }
    *s = 0.125f * sum;
}


/* IQ2_S . Q8_K over n values (a multiple of 256) into *s. */
static void
llm_dot_iq2_s_avx512(int64_t n, float *s, const void *w, const void *x)
{
    const uint64_t         *gr = llm_iq2s_grid;
    const llm_block_iq2_s  *a = w;
    const llm_block_q8_K   *b = x;
    float                   sum = 0;

    for (int64_t i = 0; i < n / LLM_QK_K; i++, a++, b++) {
        __m512i  acc = _mm512_setzero_si512();

        for (int ib = 0; ib < LLM_QK_K / 32; ib += 2) {
            uint64_t  sg;
            __m512i   g;

            g = llm_iq2_words8(gr[llm_iq2_s_index(a, ib, 0)],
                               gr[llm_iq2_s_index(a, ib, 1)],
                               gr[llm_iq2_s_index(a, ib, 2)],
                               gr[llm_iq2_s_index(a, ib, 3)],
                               gr[llm_iq2_s_index(a, ib + 1, 0)],
                               gr[llm_iq2_s_index(a, ib + 1, 1)],
                               gr[llm_iq2_s_index(a, ib + 1, 2)],
                               gr[llm_iq2_s_index(a, ib + 1, 3)]);
            /* the 8 sign bytes are the byte mask itself */
            memcpy(&sg, a->qs + LLM_QK_K / 8 + 4 * ib, 8);
            acc = _mm512_add_epi32(acc, llm_iq2_dot64(g, (__mmask64) sg,
                      b->qs + 32 * ib, llm_iq2_scales16(a->scales, ib)));
        }
        sum += llm_h2f_hw(a->d) * b->d
               * (float) _mm512_reduce_add_epi32(acc);
    }
    *s = 0.125f * sum;
}


void
llm_kernels_init_iq2_avx512(llm_kernels_t *k)
{
    k->vec_dot[LLM_TYPE_IQ2_XXS] = llm_dot_iq2_xxs_avx512;
    k->vec_dot[LLM_TYPE_IQ2_XS] = llm_dot_iq2_xs_avx512;
    k->vec_dot[LLM_TYPE_IQ2_S] = llm_dot_iq2_s_avx512;
    if (__builtin_cpu_supports("avx512vbmi")) {
        llm_kernels_init_iq2_vbmi(k);
    }
}
