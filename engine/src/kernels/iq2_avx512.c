/*
 * AVX-512 (BW) vec_dot kernels of IQ2_XXS, IQ2_XS and IQ2_S against Q8_K
 * (issue 32).
 *
 * Per 64 weights (two sub-blocks, one register): the 8 groups' grid
 * entries are loaded as 64-bit words (unsigned magnitudes <= 43); the 8
 * sign bytes, read as one 64-bit word, are directly the byte mask of the
 * activations to negate (|q| <= 127, no overflow); vpmaddubsw gives pair
 * sums of at most 2 * 43 * 127, vpmaddwd multiplies them by the scale
 * 2s + 1 of each 32 (IQ2_XXS) or 16 weights (one per 128-bit lane).  The
 * super-block's integer sum is exact and equal to the scalar reference's
 * (quant_iq2.c), and is scaled with the same float steps.
 */

#include <immintrin.h>

#include "kernels_common.h"


/*
 * 64 weights: grid magnitudes g (8 groups), sign bits sg (bit 8l + j:
 * weight j of group l), activations q8, 16-bit scales sc: 16 int32
 * partial sums of sc * +-g * q8.
 */
LLM_INLINE __m512i
llm_iq2_dot64(__m512i g, uint64_t sg, const int8_t *q8, __m512i sc)
{
    __m512i  q = _mm512_loadu_si512((const void *) q8);

    q = _mm512_mask_sub_epi8(q, (__mmask64) sg, _mm512_setzero_si512(), q);
    return _mm512_madd_epi16(_mm512_maddubs_epi16(g, q), sc);
}


/* The 16-bit scale 2 s + 1 in all four words of a 64-bit lane. */
LLM_INLINE long long
llm_iq2_sc4(int s)
{
    return (long long) (0x0001000100010001ull * (uint64_t) (2 * s + 1));
}


/* IQ2_XS / IQ2_S scales of sub-blocks ib, ib + 1: one per 16 weights. */
LLM_INLINE __m512i
llm_iq2_scales16(const uint8_t *scales, int ib)
{
    long long  r0 = llm_iq2_sc4(scales[ib] & 0xf);
    long long  r1 = llm_iq2_sc4(scales[ib] >> 4);
    long long  r2 = llm_iq2_sc4(scales[ib + 1] & 0xf);
    long long  r3 = llm_iq2_sc4(scales[ib + 1] >> 4);

    return _mm512_setr_epi64(r0, r0, r1, r1, r2, r2, r3, r3);
}


static void
llm_dot_iq2_xxs_avx512(int64_t n, float *s, const void *w, const void *x)
{
    const llm_block_iq2_xxs  *a = w;
    const llm_block_q8_K     *b = x;
    float                     sum = 0;

    for (int64_t i = 0; i < n / LLM_QK_K; i++, a++, b++) {
        __m512i  acc = _mm512_setzero_si512();

        for (int ib = 0; ib < LLM_QK_K / 32; ib += 2) {
            uint32_t  aux[4];
            uint64_t  sg = 0;
            uint8_t   gi[8];
            long long  r0, r1;

            memcpy(aux, a->qs + 4 * ib, 16);
            memcpy(gi, &aux[0], 4);
            memcpy(gi + 4, &aux[2], 4);
            for (int l = 0; l < 4; l++) {
                sg |= (uint64_t) llm_iq2_signs(aux[1] >> 7 * l & 127) << 8 * l;
                sg |= (uint64_t) llm_iq2_signs(aux[3] >> 7 * l & 127)
                      << (32 + 8 * l);
            }
            r0 = llm_iq2_sc4(aux[1] >> 28);
            r1 = llm_iq2_sc4(aux[3] >> 28);
            acc = _mm512_add_epi32(acc, llm_iq2_dot64(
                      _mm512_setr_epi64(
                          (long long) llm_iq2xxs_grid[gi[0]],
                          (long long) llm_iq2xxs_grid[gi[1]],
                          (long long) llm_iq2xxs_grid[gi[2]],
                          (long long) llm_iq2xxs_grid[gi[3]],
                          (long long) llm_iq2xxs_grid[gi[4]],
                          (long long) llm_iq2xxs_grid[gi[5]],
                          (long long) llm_iq2xxs_grid[gi[6]],
                          (long long) llm_iq2xxs_grid[gi[7]]),
                      sg, b->qs + 32 * ib,
                      _mm512_setr_epi64(r0, r0, r0, r0, r1, r1, r1, r1)));
        }
        sum += llm_h2f_hw(a->d) * b->d
               * (float) _mm512_reduce_add_epi32(acc);
    }
    *s = 0.125f * sum;
}


static void
llm_dot_iq2_xs_avx512(int64_t n, float *s, const void *w, const void *x)
{
    const llm_block_iq2_xs  *a = w;
    const llm_block_q8_K    *b = x;
    float                    sum = 0;

    for (int64_t i = 0; i < n / LLM_QK_K; i++, a++, b++) {
        __m512i  acc = _mm512_setzero_si512();

        for (int ib = 0; ib < LLM_QK_K / 32; ib += 2) {
            const uint16_t  *q = a->qs + 4 * ib;
            uint64_t         sg = 0;

            for (int l = 0; l < 8; l++) {
                sg |= (uint64_t) llm_iq2_signs(q[l] >> 9) << 8 * l;
            }
            acc = _mm512_add_epi32(acc, llm_iq2_dot64(
                      _mm512_setr_epi64(
                          (long long) llm_iq2xs_grid[q[0] & 511],
                          (long long) llm_iq2xs_grid[q[1] & 511],
                          (long long) llm_iq2xs_grid[q[2] & 511],
                          (long long) llm_iq2xs_grid[q[3] & 511],
                          (long long) llm_iq2xs_grid[q[4] & 511],
                          (long long) llm_iq2xs_grid[q[5] & 511],
                          (long long) llm_iq2xs_grid[q[6] & 511],
                          (long long) llm_iq2xs_grid[q[7] & 511]),
                      sg, b->qs + 32 * ib, llm_iq2_scales16(a->scales, ib)));
        }
        sum += llm_h2f_hw(a->d) * b->d
               * (float) _mm512_reduce_add_epi32(acc);
    }
    *s = 0.125f * sum;
}


static void
llm_dot_iq2_s_avx512(int64_t n, float *s, const void *w, const void *x)
{
    const llm_block_iq2_s  *a = w;
    const llm_block_q8_K   *b = x;
    float                   sum = 0;

    for (int64_t i = 0; i < n / LLM_QK_K; i++, a++, b++) {
        __m512i  acc = _mm512_setzero_si512();

        for (int ib = 0; ib < LLM_QK_K / 32; ib += 2) {
            uint64_t  sg;

            memcpy(&sg, a->qs + LLM_QK_K / 8 + 4 * ib, 8);
            acc = _mm512_add_epi32(acc, llm_iq2_dot64(
                      _mm512_setr_epi64(
                          (long long) llm_iq2s_grid[llm_iq2_s_index(a, ib, 0)],
                          (long long) llm_iq2s_grid[llm_iq2_s_index(a, ib, 1)],
                          (long long) llm_iq2s_grid[llm_iq2_s_index(a, ib, 2)],
                          (long long) llm_iq2s_grid[llm_iq2_s_index(a, ib, 3)],
                          (long long) llm_iq2s_grid[
                              llm_iq2_s_index(a, ib + 1, 0)],
                          (long long) llm_iq2s_grid[
                              llm_iq2_s_index(a, ib + 1, 1)],
                          (long long) llm_iq2s_grid[
                              llm_iq2_s_index(a, ib + 1, 2)],
                          (long long) llm_iq2s_grid[
                              llm_iq2_s_index(a, ib + 1, 3)]),
                      sg, b->qs + 32 * ib, llm_iq2_scales16(a->scales, ib)));
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
}
