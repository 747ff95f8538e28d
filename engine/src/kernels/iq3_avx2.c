/*
 * AVX2 vec_dot kernels of IQ3_XXS and IQ3_S against Q8_K (issue 32).
 *
 * Per 32-weight sub-block: 8 scalar loads fetch its grid entries (32
 * unsigned magnitudes, at most 62; vpgatherdd measured half as fast on
 * AMD EPYC), the 32 sign bits become a byte mask
 * (broadcast, vpshufb, test against each byte's bit) that negates the
 * activation bytes (Q8_K quants are within -127..127, so negation is
 * exact), vpmaddubsw makes 16-bit pair sums (at most 2 * 62 * 127, no
 * saturation) and vpmaddwd widens them times the sub-block's odd scale
 * 2 ls + 1.  The super-block's sum is exact in int32, as the scalar
 * reference's (quant_iq3.c); only the float accumulation order differs.
 */

#include <immintrin.h>

#include "kernels_common.h"


/* 0xff in byte i of 32 where bit i of sg is set, else 0. */
LLM_INLINE __m256i
llm_iq3_sign_mask(uint32_t sg)
{
    const __m256i  spread = _mm256_set_epi64x(0x0303030303030303ll,
                                              0x0202020202020202ll,
                                              0x0101010101010101ll, 0);
    const __m256i  bit = _mm256_set1_epi64x(0x8040201008040201ll);
    __m256i        v = _mm256_shuffle_epi8(_mm256_set1_epi32((int) sg),
                                           spread);

    return _mm256_cmpeq_epi8(_mm256_and_si256(v, bit), bit);
}


/* IQ3_XXS's grid entries at the 8 index bytes qs, weight order. */
LLM_INLINE __m256i
llm_iq3_xxs_grid8(const uint8_t *qs)
{
    const uint32_t  *g = llm_iq3xxs_grid;

    return _mm256_setr_epi32((int) g[qs[0]], (int) g[qs[1]],
                             (int) g[qs[2]], (int) g[qs[3]],
                             (int) g[qs[4]], (int) g[qs[5]],
                             (int) g[qs[6]], (int) g[qs[7]]);
}


/* IQ3_S's grid entries at the 8 index bytes qs, bit k of h the 9th bit
 * of index k. */
LLM_INLINE __m256i
llm_iq3_s_grid8(const uint8_t *qs, uint32_t h)
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
 * 16 pair sums (int16) of magnitude * +-y over one sub-block: grid
 * entries g (32 magnitude bytes), sign bits sg, y the sub-block's 32
 * activation bytes.
 */
LLM_INLINE __m256i
llm_iq3_pairs(__m256i g, uint32_t sg, const int8_t *y)
{
    __m256i  m = llm_iq3_sign_mask(sg);
    __m256i  yv = _mm256_loadu_si256((const void *) y);

    yv = _mm256_sub_epi8(_mm256_xor_si256(yv, m), m);
    return _mm256_maddubs_epi16(g, yv);
}


/*
 * IQ3_XXS's 32 sign bits of sub-block word aux: 7 stored per 8, the 8th
 * the parity of the 7 (xor-folded within each byte: bit 0 of byte l
 * becomes the xor of that byte's 8 bits; nothing from the next byte
 * reaches it).
 */
LLM_INLINE uint32_t
llm_iq3_xxs_signs_avx2(uint32_t aux)
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
llm_dot_iq3_xxs_avx2(int64_t n, float *s, const void *w, const void *x)
{
    const llm_block_iq3_xxs  *a = w;
    const llm_block_q8_K     *q = x;
    __m256                    acc = _mm256_setzero_ps();
    int64_t                   nb = n / LLM_QK_K, b;

    for (b = 0; b < nb; b++, a++, q++) {
        __m256i  isum = _mm256_setzero_si256();

        _mm_prefetch((const char *) (a + 4), _MM_HINT_T0);
#pragma GCC unroll 8
        for (int j = 0; j < LLM_QK_K / 32; j++) {
            uint32_t  aux;
            __m256i   p16;

            memcpy(&aux, a->sas + 4 * j, 4);
            p16 = llm_iq3_pairs(llm_iq3_xxs_grid8(a->qs + 8 * j),
                                llm_iq3_xxs_signs_avx2(aux), q->qs + 32 * j);
            isum = _mm256_add_epi32(isum, _mm256_madd_epi16(p16,
                       _mm256_set1_epi16((short) (2 * (aux >> 28) + 1))));
        }
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum),
                              _mm256_set1_ps(llm_h2f_hw(a->d) * q->d), acc);
    }
    *s = 0.25f * llm_hsum256(acc);
}


/*
 * IQ3_S . Q8_K over n values: per super-block the exact int32 sum of
 * (2 ls_j + 1) * pairs_j, times d_w * d_x.  Index k's 9th bit is bit k
 * of qh[j].
 */
static void
llm_dot_iq3_s_avx2(int64_t n, float *s, const void *w, const void *x)
{
    const llm_block_iq3_s  *a = w;
    const llm_block_q8_K   *q = x;
    __m256                  acc = _mm256_setzero_ps();
    int64_t                 nb = n / LLM_QK_K, b;

    for (b = 0; b < nb; b++, a++, q++) {
        __m256i  isum = _mm256_setzero_si256();

        _mm_prefetch((const char *) (a + 4), _MM_HINT_T0);
#pragma GCC unroll 8
        for (int j = 0; j < LLM_QK_K / 32; j++) {
            int       ls = (a->scales[j / 2] >> 4 * (j % 2)) & 0xf;
            uint32_t  sg;
            __m256i   p16;

            memcpy(&sg, a->signs + 4 * j, 4);
            p16 = llm_iq3_pairs(llm_iq3_s_grid8(a->qs + 8 * j, a->qh[j]), sg,
                                q->qs + 32 * j);
            isum = _mm256_add_epi32(isum, _mm256_madd_epi16(p16,
                       _mm256_set1_epi16((short) (2 * ls + 1))));
        }
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum),
                              _mm256_set1_ps(llm_h2f_hw(a->d) * q->d), acc);
    }
    *s = llm_hsum256(acc);
}


void
llm_kernels_init_iq3_avx2(llm_kernels_t *k)
{
    k->vec_dot[LLM_TYPE_IQ3_XXS] = llm_dot_iq3_xxs_avx2;
    k->vec_dot[LLM_TYPE_IQ3_S] = llm_dot_iq3_s_avx2;
}
