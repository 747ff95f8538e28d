/*
 * AVX2 vec_dot kernels of IQ2_XXS, IQ2_XS and IQ2_S against Q8_K
 * (issue 32).
 *
 * Per 32 weights (one register): the 4 groups' grid entries are loaded as
 * 64-bit words (unsigned magnitudes <= 43), the activations take the
 * groups' signs as byte masks m (IQ2_XXS, IQ2_XS: the 7-bit codes' masks
 * from llm_iq2_signs64; IQ2_S: each sign byte spread over its group and
 * tested bit by bit), negated as (q ^ m) - m (|q| <= 127, no overflow);
 * vpmaddubsw gives pair sums of at most 2 * 43 * 127 and vpmaddwd
 * multiplies them by the scale 2s + 1 (per 32 weights, or per 16: one per
 * 128-bit lane).
 * The super-block's integer sum is exact and equal to the scalar
 * reference's (quant_iq2.c), and is scaled with the same float steps.
 */

#include <immintrin.h>

#include "kernels_common.h"


/* Byte 8l + j 0xff where bit j of sign byte l of s is set, else 0. */
LLM_INLINE __m256i
llm_iq2_signs256(uint32_t s)
{
    const __m256i  spread = _mm256_setr_epi8(
        0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,
        2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
    const __m256i  bits = _mm256_set1_epi64x(0x8040201008040201ll);
    __m256i        v = _mm256_shuffle_epi8(_mm256_set1_epi32((int) s),
                                           spread);

    return _mm256_cmpeq_epi8(_mm256_and_si256(v, bits), bits);
}


/* The sign masks of 7-bit codes c0..c3 (llm_iq2_signs64). */
LLM_INLINE __m256i
llm_iq2_codes256(unsigned c0, unsigned c1, unsigned c2, unsigned c3)
{
    return _mm256_setr_epi64x((long long) llm_iq2_signs64[c0],
                              (long long) llm_iq2_signs64[c1],
                              (long long) llm_iq2_signs64[c2],
                              (long long) llm_iq2_signs64[c3]);
}


/* Sum of 8 int32 lanes. */
LLM_INLINE int
llm_iq2_hsum_i32(__m256i v)
{
    __m128i  s = _mm_add_epi32(_mm256_castsi256_si128(v),
                               _mm256_extracti128_si256(v, 1));

    s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 1));
    return _mm_cvtsi128_si32(s);
}


/*
 * 32 weights: grid magnitudes g (4 groups), sign masks m (0xff: minus),
 * activations q8, 16-bit scales sc (per lane): 8 int32 partial sums of
 * sc * +-g * q8 (q8 negated as (q8 ^ m) - m).
 */
LLM_INLINE __m256i
llm_iq2_dot32(__m256i g, __m256i m, const int8_t *q8, __m256i sc)
{
    __m256i  q = _mm256_loadu_si256((const void *) q8);

    q = _mm256_sub_epi8(_mm256_xor_si256(q, m), m);
    return _mm256_madd_epi16(_mm256_maddubs_epi16(g, q), sc);
}


/* The 16-bit scales 2 s + 1: s0 for bytes 0..15, s1 for 16..31. */
LLM_INLINE __m256i
llm_iq2_scales(int s0, int s1)
{
    return _mm256_setr_m128i(_mm_set1_epi16((short) (2 * s0 + 1)),
                             _mm_set1_epi16((short) (2 * s1 + 1)));
}


/* IQ2_XXS . Q8_K over n values (a multiple of 256) into *s. */
static void
llm_dot_iq2_xxs_avx2(int64_t n, float *s, const void *w, const void *x)
{
    const llm_block_iq2_xxs  *a = w;
    const llm_block_q8_K     *b = x;
    float                     sum = 0;

    for (int64_t i = 0; i < n / LLM_QK_K; i++, a++, b++) {
        __m256i  acc = _mm256_setzero_si256();

        for (int ib = 0; ib < LLM_QK_K / 32; ib++) {
            uint32_t  aux[2];
            __m256i   g, m;

            memcpy(aux, a->qs + 4 * ib, 8);
            g = _mm256_setr_epi64x(
                    (long long) llm_iq2xxs_grid[aux[0] & 0xff],
                    (long long) llm_iq2xxs_grid[aux[0] >> 8 & 0xff],
                    (long long) llm_iq2xxs_grid[aux[0] >> 16 & 0xff],
                    (long long) llm_iq2xxs_grid[aux[0] >> 24]);
            m = llm_iq2_codes256(aux[1] & 127, aux[1] >> 7 & 127,
                                 aux[1] >> 14 & 127, aux[1] >> 21 & 127);
            acc = _mm256_add_epi32(acc, llm_iq2_dot32(g, m, b->qs + 32 * ib,
                      llm_iq2_scales(aux[1] >> 28, aux[1] >> 28)));
        }
        sum += llm_h2f_hw(a->d) * b->d * (float) llm_iq2_hsum_i32(acc);
    }
    *s = 0.125f * sum;
}


/* IQ2_XS . Q8_K over n values (a multiple of 256) into *s. */
static void
llm_dot_iq2_xs_avx2(int64_t n, float *s, const void *w, const void *x)
{
    const llm_block_iq2_xs  *a = w;
    const llm_block_q8_K    *b = x;
    float                    sum = 0;

    for (int64_t i = 0; i < n / LLM_QK_K; i++, a++, b++) {
        __m256i  acc = _mm256_setzero_si256();

        for (int ib = 0; ib < LLM_QK_K / 32; ib++) {
            const uint16_t  *q = a->qs + 4 * ib;
            __m256i          g, m;

            g = _mm256_setr_epi64x((long long) llm_iq2xs_grid[q[0] & 511],
                                   (long long) llm_iq2xs_grid[q[1] & 511],
                                   (long long) llm_iq2xs_grid[q[2] & 511],
                                   (long long) llm_iq2xs_grid[q[3] & 511]);
            m = llm_iq2_codes256(q[0] >> 9, q[1] >> 9, q[2] >> 9, q[3] >> 9);
            acc = _mm256_add_epi32(acc, llm_iq2_dot32(g, m, b->qs + 32 * ib,
                      llm_iq2_scales(a->scales[ib] & 0xf,
                                     a->scales[ib] >> 4)));
        }
        sum += llm_h2f_hw(a->d) * b->d * (float) llm_iq2_hsum_i32(acc);
    }
    *s = 0.125f * sum;
}


/* IQ2_S . Q8_K over n values (a multiple of 256) into *s. */
static void
llm_dot_iq2_s_avx2(int64_t n, float *s, const void *w, const void *x)
{
    const llm_block_iq2_s  *a = w;
    const llm_block_q8_K   *b = x;
    float                   sum = 0;

    for (int64_t i = 0; i < n / LLM_QK_K; i++, a++, b++) {
        __m256i  acc = _mm256_setzero_si256();

        for (int ib = 0; ib < LLM_QK_K / 32; ib++) {
            uint32_t  sg;
            __m256i   g;

            g = _mm256_setr_epi64x(
                    (long long) llm_iq2s_grid[llm_iq2_s_index(a, ib, 0)],
                    (long long) llm_iq2s_grid[llm_iq2_s_index(a, ib, 1)],
                    (long long) llm_iq2s_grid[llm_iq2_s_index(a, ib, 2)],
                    (long long) llm_iq2s_grid[llm_iq2_s_index(a, ib, 3)]);
            memcpy(&sg, a->qs + LLM_QK_K / 8 + 4 * ib, 4);
            acc = _mm256_add_epi32(acc, llm_iq2_dot32(g,
                      llm_iq2_signs256(sg), b->qs + 32 * ib,
                      llm_iq2_scales(a->scales[ib] & 0xf,
                                     a->scales[ib] >> 4)));
        }
        sum += llm_h2f_hw(a->d) * b->d * (float) llm_iq2_hsum_i32(acc);
    }
    *s = 0.125f * sum;
}


void
llm_kernels_init_iq2_avx2(llm_kernels_t *k)
{
    k->vec_dot[LLM_TYPE_IQ2_XXS] = llm_dot_iq2_xxs_avx2;
    k->vec_dot[LLM_TYPE_IQ2_XS] = llm_dot_iq2_xs_avx2;
    k->vec_dot[LLM_TYPE_IQ2_S] = llm_dot_iq2_s_avx2;
}
