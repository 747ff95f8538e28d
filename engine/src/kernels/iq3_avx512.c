/*
 * AVX-512 (BW, VNNI) vec_dot kernels of IQ3_XXS and IQ3_S against Q8_K:
 * two 32-weight sub-blocks per register.
 *
 * 16 scalar loads fetch the grid entries of two sub-blocks (64 unsigned
 * magnitudes, at most 62; vpgatherdd measured slower on AMD EPYC); their
 * 64 sign bits are a mask register that negates the activation bytes
 * (Q8_K quants are within -127..127, so negation is exact); vpmaddubsw
 * makes 16-bit pair sums (at most 2 * 62 * 127) and vpdpwssd adds them
 * times [2 ls_j + 1 x 16 | 2 ls_j+1 + 1 x 16].  The super-block's sum is
 * exact in int32, as the scalar reference's (quant_iq3.c); only the
 * float accumulation order differs.
 */

#include <immintrin.h>

#include "kernels_common.h"


/* The 8 grid entries of one sub-block (ymm): for IQ3_XXS the index
 * bytes qs, for IQ3_S also bit k of h as index k's 9th bit. */
LLM_INLINE __m256i
llm_iq3_xxs_grid8_512(const uint8_t *qs)
{
    const uint32_t  *g = llm_iq3xxs_grid;

    return _mm256_setr_epi32((int) g[qs[0]], (int) g[qs[1]],
                             (int) g[qs[2]], (int) g[qs[3]],
                             (int) g[qs[4]], (int) g[qs[5]],
                             (int) g[qs[6]], (int) g[qs[7]]);
}


LLM_INLINE __m256i
llm_iq3_s_grid8_512(const uint8_t *qs, uint32_t h)
{
    const uint32_t  *g = llm_iq3s_grid;

    return _mm256_setr_epi32((int) g[qs[0] | (h << 8 & 256)],
                             (int) g[qs[1] | (h << 7 & 256)],
                             (int) g[qs[2] | (h << 6 & 256)],
                             (int) g[qs[3] | (h << 5 & 256)],
                             (int) g[qs[4] | (h << 4 & 256)],
                             (int) g[qs[5] | (h << 3 & 256)],
                             (int) g[qs[6] | (h << 2 & 256)],
                             (int) g[qs[7] | (h << 1 & 256)]);
}


/*
 * The int32 sum register plus the scaled pair sums of two sub-blocks:
 * grid entries g0, g1, sign bits sg (bit i negates weight i of 64),
 * activations y (64 bytes), scales ls0, ls1 (already odd).
 */
LLM_INLINE __m512i
llm_iq3_dot64(__m512i isum, __m256i g0, __m256i g1, uint64_t sg,
    const int8_t *y, int ls0, int ls1)
{
    __m512i  g = _mm512_inserti64x4(_mm512_castsi256_si512(g0), g1, 1);
    __m512i  yv = _mm512_loadu_si512((const void *) y);
    __m512i  sc = _mm512_inserti64x4(_mm512_set1_epi16((short) ls0),
                                     _mm256_set1_epi16((short) ls1), 1);

    yv = _mm512_mask_sub_epi8(yv, (__mmask64) sg, _mm512_setzero_si512(),
                              yv);
    return _mm512_dpwssd_epi32(isum, _mm512_maddubs_epi16(g, yv), sc);
}


/*
 * IQ3_XXS's 32 sign bits of sub-block word aux: 7 stored per 8, the 8th
 * the parity of the 7 (xor-folded within each byte: bit 0 of byte l
 * becomes the xor of that byte's 8 bits; nothing from the next byte
 * reaches it).
 */
LLM_INLINE uint64_t
llm_iq3_xxs_signs_avx512(uint32_t aux)
{
    uint32_t  s = (aux & 0x7f) | (aux << 1 & 0x7f00) | (aux << 2 & 0x7f0000)
                  | (aux << 3 & 0x7f000000);
    uint32_t  p = s ^ s >> 4;

    p ^= p >> 2;
    p ^= p >> 1;
    return s | (p & 0x01010101u) << 7;
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

            memcpy(aux, a->sas + 4 * j, 8);
            isum = llm_iq3_dot64(isum, llm_iq3_xxs_grid8_512(a->qs + 8 * j),
                       llm_iq3_xxs_grid8_512(a->qs + 8 * j + 8),
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
 * (2 ls_j + 1) * pairs_j, times d_w * d_x.
 */
static void
llm_dot_iq3_s_avx512(int64_t n, float *s, const void *w, const void *x)
{
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

            memcpy(&sg, a->signs + 4 * j, 8);
            isum = llm_iq3_dot64(isum,
                       llm_iq3_s_grid8_512(a->qs + 8 * j, a->qh[j]),
                       llm_iq3_s_grid8_512(a->qs + 8 * j + 8, a->qh[j + 1]),
                       sg,
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
    if (__builtin_cpu_supports("avx512vbmi")) {
        llm_kernels_init_iq3_vbmi(k);
    }
}
