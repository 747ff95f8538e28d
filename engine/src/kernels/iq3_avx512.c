/*
 * AVX-512 (BW, VNNI) vec_dot kernels of IQ3_XXS and IQ3_S against Q8_K:
 * two 32-weight sub-blocks per register.
 *
 * vpgatherdd fetches the 16 grid entries of two sub-blocks (64 unsigned
 * magnitudes, at most 62); their 64 sign bits are a mask register that
 * negates the activation bytes (Q8_K quants are within -127..127, so
 * negation is exact); vpmaddubsw makes 16-bit pair sums (at most
 * 2 * 62 * 127) and vpdpwssd adds them times [2 ls_j + 1 x 16 |
 * 2 ls_j+1 + 1 x 16].  The super-block's sum is exact in int32, as the
 * scalar reference's (quant_iq3.c); only the float accumulation order
 * differs.
 */

#include <immintrin.h>

#include "kernels_common.h"


/*
 * The int32 sum register plus the scaled pair sums of two sub-blocks:
 * grid entries at idx (16 indices), sign bits sg (bit i negates weight
 * i of 64), activations y (64 bytes), scales ls0, ls1 (already odd).
 */
LLM_INLINE __m512i
llm_iq3_dot64(__m512i isum, const uint32_t *grid, __m512i idx, uint64_t sg,
    const int8_t *y, int ls0, int ls1)
{
    __m512i  g = _mm512_i32gather_epi32(idx, (const void *) grid, 4);
    __m512i  yv = _mm512_loadu_si512((const void *) y);
    __m512i  sc = _mm512_inserti64x4(_mm512_set1_epi16((short) ls0),
                                     _mm256_set1_epi16((short) ls1), 1);

    yv = _mm512_mask_sub_epi8(yv, (__mmask64) sg, _mm512_setzero_si512(),
                              yv);
    return _mm512_dpwssd_epi32(isum, _mm512_maddubs_epi16(g, yv), sc);
}


/* IQ3_XXS's 32 sign bits of sub-block word aux: 7 stored per 8, the 8th
 * the parity of the 7. */
LLM_INLINE uint64_t
llm_iq3_xxs_signs_avx512(uint32_t aux)
{
    uint32_t  s = (aux & 0x7f) | (aux << 1 & 0x7f00) | (aux << 2 & 0x7f0000)
                  | (aux << 3 & 0x7f000000);

    for (int l = 0; l < 4; l++) {
        s |= (uint32_t) __builtin_parity((aux >> 7 * l) & 127) << (8 * l + 7);
    }
    return s;
}


/*
 * IQ3_XXS . Q8_K over n values: per super-block the exact int32 sum of
 * (2 ls_j + 1) * pairs_j, times d_w * d_x; the total times 1/4.
 */
static void
llm_dot_iq3_xxs_avx512(int64_t n, float *s, const void *w, const void *x)
{
    const llm_block_iq3_xxs  *a = w;
    const llm_block_q8_K     *q = x;
    __m512                    acc = _mm512_setzero_ps();
    int64_t                   nb = n / LLM_QK_K, b;

    for (b = 0; b < nb; b++, a++, q++) {
        __m512i  isum = _mm512_setzero_si512();

        _mm_prefetch((const char *) (a + 4), _MM_HINT_T0);
#pragma GCC unroll 4
        for (int j = 0; j < LLM_QK_K / 32; j += 2) {
            uint32_t  aux[2];
            __m512i   idx = _mm512_cvtepu8_epi32(
                                _mm_loadu_si128((const void *)
                                                (a->qs + 8 * j)));

            memcpy(aux, a->sas + 4 * j, 8);
            isum = llm_iq3_dot64(isum, llm_iq3xxs_grid, idx,
                       llm_iq3_xxs_signs_avx512(aux[0])
                       | llm_iq3_xxs_signs_avx512(aux[1]) << 32,
                       q->qs + 32 * j, (int) (2 * (aux[0] >> 28) + 1),
                       (int) (2 * (aux[1] >> 28) + 1));
        }
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum),
                              _mm512_set1_ps(llm_h2f_hw(a->d) * q->d), acc);
    }
    *s = 0.25f * _mm512_reduce_add_ps(acc);
}


/*
 * IQ3_S . Q8_K over n values: per super-block the exact int32 sum of
 * (2 ls_j + 1) * pairs_j, times d_w * d_x.  The 9th index bits of two
 * sub-blocks, qh[j] and qh[j + 1], are a 16-bit mask in index order.
 */
static void
llm_dot_iq3_s_avx512(int64_t n, float *s, const void *w, const void *x)
{
    const __m512i           b8 = _mm512_set1_epi32(256);
    const llm_block_iq3_s  *a = w;
    const llm_block_q8_K   *q = x;
    __m512                  acc = _mm512_setzero_ps();
    int64_t                 nb = n / LLM_QK_K, b;

    for (b = 0; b < nb; b++, a++, q++) {
        __m512i  isum = _mm512_setzero_si512();

        _mm_prefetch((const char *) (a + 4), _MM_HINT_T0);
#pragma GCC unroll 4
        for (int j = 0; j < LLM_QK_K / 32; j += 2) {
            int       sc = a->scales[j / 2];
            uint64_t  sg;
            __m512i   idx = _mm512_cvtepu8_epi32(
                                _mm_loadu_si128((const void *)
                                                (a->qs + 8 * j)));

            idx = _mm512_mask_or_epi32(idx,
                      (__mmask16) (a->qh[j] | a->qh[j + 1] << 8), idx, b8);
            memcpy(&sg, a->signs + 4 * j, 8);
            isum = llm_iq3_dot64(isum, llm_iq3s_grid, idx, sg,
                                 q->qs + 32 * j, 2 * (sc & 0xf) + 1,
                                 2 * (sc >> 4) + 1);
        }
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum),
                              _mm512_set1_ps(llm_h2f_hw(a->d) * q->d), acc);
    }
    *s = _mm512_reduce_add_ps(acc);
}


void
llm_kernels_init_iq3_avx512(llm_kernels_t *k)
{
    k->vec_dot[LLM_TYPE_IQ3_XXS] = llm_dot_iq3_xxs_avx512;
    k->vec_dot[LLM_TYPE_IQ3_S] = llm_dot_iq3_s_avx512;
}
