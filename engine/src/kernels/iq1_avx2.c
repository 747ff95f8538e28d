/*
 * AVX2 vec_dot kernels of IQ1_S and IQ1_M against Q8_K (issue 32).
 *
 * A sub-block's 32 grid values (-1, 0, 1 as bytes) are four 64-bit loads
 * from llm_iq1_grid; vpsignb applies them to the activation bytes (exact:
 * Q8_K quants are within -127..127), vpmaddubsw against ones sums pairs
 * (at most 254) and vpmaddwd multiplies by 8 times the scale 2 s + 1.
 * The +-1/8 deltas: IQ1_S's from the Q8_K bsums in general registers,
 * IQ1_M's (a sign per group of 8) by a second vpsignb with the groups'
 * signs, its pair sums added to 8 times the grid's before vpmaddwd
 * (at most 8 * 254 + 254).  So each super-block's int32 lanes add up
 * exactly to 8 sumi + sumi1 of the scalar reference (quant_iq1.c), which
 * is scaled once by d_w * d_x / 8: the same float per block as the
 * reference's; only the accumulation over blocks may round differently
 * (GCC may fuse its multiply-add).
 */

#include <immintrin.h>

#include "kernels_common.h"


LLM_INLINE int
llm_iq1_hsum_epi32(__m256i v)
{
    __m128i  s = _mm_add_epi32(_mm256_castsi256_si128(v),
                               _mm256_extracti128_si256(v, 1));

    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
    return _mm_cvtsi128_si32(s);
}


/* The 32 grid values of points i0..i3, in element order. */
LLM_INLINE __m256i
llm_iq1_points4(unsigned i0, unsigned i1, unsigned i2, unsigned i3)
{
    return _mm256_set_epi64x((long long) llm_iq1_grid[i3],
                             (long long) llm_iq1_grid[i2],
                             (long long) llm_iq1_grid[i1],
                             (long long) llm_iq1_grid[i0]);
}


/* 16 pair sums (int16) of v * y over 32 bytes, v in -1..1. */
LLM_INLINE __m256i
llm_iq1_pairs(__m256i v, __m256i y)
{
    return _mm256_maddubs_epi16(_mm256_set1_epi8(1), _mm256_sign_epi8(y, v));
}


/* A group's delta sign as 8 bytes: +1, or -1 when neg. */
LLM_INLINE long long
llm_iq1_sign8(unsigned neg)
{
    return neg ? -1LL : 0x0101010101010101LL;
}


/*
 * IQ1_S . Q8_K: per super-block the int32 lanes of 8 ls (points . q8)
 * per sub-block, plus sum ls (+-1) (bsums pair) in a register: the exact
 * 8 sumi + sumi1.
 */
static void
llm_dot_iq1_s_avx2(int64_t n, float *s, const void *w, const void *x)
{
    const llm_block_iq1_s  *a = w;
    const llm_block_q8_K   *q = x;
    float                   sum = 0;
    int64_t                 nb = n / LLM_QK_K, b;

    for (b = 0; b < nb; b++, a++, q++) {
        __m256i  acc = _mm256_setzero_si256();
        int      sumi1 = 0;

        _mm_prefetch((const char *) (a + 4), _MM_HINT_T0);
#pragma GCC unroll 8
        for (int ib = 0; ib < LLM_QK_K / 32; ib++) {
            const uint8_t  *qs = a->qs + 4 * ib;
            unsigned        h = a->qh[ib];
            int             ls = (int) (2 * (h >> 12 & 7) + 1);
            __m256i         g = llm_iq1_points4(qs[0] | (h << 8 & 0x700),
                                                qs[1] | (h << 5 & 0x700),
                                                qs[2] | (h << 2 & 0x700),
                                                qs[3] | (h >> 1 & 0x700));
            __m256i         y = _mm256_loadu_si256(
                                    (const void *) (q->qs + 32 * ib));

            acc = _mm256_add_epi32(acc, _mm256_madd_epi16(
                      llm_iq1_pairs(g, y),
                      _mm256_set1_epi16((short) (8 * ls))));
            sumi1 += (h & 0x8000 ? -ls : ls)
                     * (q->bsums[2 * ib] + q->bsums[2 * ib + 1]);
        }
        sum += llm_h2f_hw(a->d) * q->d * 0.125f
               * (float) (llm_iq1_hsum_epi32(acc) + sumi1);
    }
    *s = sum;
}


/*
 * IQ1_M . Q8_K: per sub-block the pair sums 8 (points . q8) + (signs .
 * q8), times the halves' scales by vpmaddwd: the exact 8 sumi + sumi1.
 */
static void
llm_dot_iq1_m_avx2(int64_t n, float *s, const void *w, const void *x)
{
    const llm_block_iq1_m  *a = w;
    const llm_block_q8_K   *q = x;
    float                   sum = 0;
    int64_t                 nb = n / LLM_QK_K, b;

    for (b = 0; b < nb; b++, a++, q++) {
        __m256i  acc = _mm256_setzero_si256();

        _mm_prefetch((const char *) (a + 4), _MM_HINT_T0);
#pragma GCC unroll 8
        for (int ib = 0; ib < LLM_QK_K / 32; ib++) {
            const uint8_t  *qs = a->qs + 4 * ib;
            unsigned        h0 = a->qh[2 * ib], h1 = a->qh[2 * ib + 1];
            unsigned        sc = (a->scales[ib & ~1]
                                  | (unsigned) a->scales[(ib & ~1) + 1] << 8)
                                 >> 6 * (ib % 2);
            __m256i         g = llm_iq1_points4(qs[0] | (h0 << 8 & 0x700),
                                                qs[1] | (h0 << 4 & 0x700),
                                                qs[2] | (h1 << 8 & 0x700),
                                                qs[3] | (h1 << 4 & 0x700));
            __m256i         dv = _mm256_set_epi64x(llm_iq1_sign8(h1 & 0x80),
                                                   llm_iq1_sign8(h1 & 0x08),
                                                   llm_iq1_sign8(h0 & 0x80),
                                                   llm_iq1_sign8(h0 & 0x08));
            __m256i         y = _mm256_loadu_si256(
                                    (const void *) (q->qs + 32 * ib));
            __m256i         t = _mm256_add_epi16(
                                    _mm256_slli_epi16(llm_iq1_pairs(g, y), 3),
                                    llm_iq1_pairs(dv, y));
            __m256i         lsv = _mm256_set_m128i(
                                      _mm_set1_epi16((short) (2 * (sc >> 3 & 7)
                                                              + 1)),
                                      _mm_set1_epi16((short) (2 * (sc & 7)
                                                              + 1)));

            acc = _mm256_add_epi32(acc, _mm256_madd_epi16(t, lsv));
        }
        sum += llm_h2f_hw(llm_iq1_m_d(a->scales)) * q->d * 0.125f
               * (float) llm_iq1_hsum_epi32(acc);
    }
    *s = sum;
}


void
llm_kernels_init_iq1_avx2(llm_kernels_t *k)
{
    k->vec_dot[LLM_TYPE_IQ1_S] = llm_dot_iq1_s_avx2;
    k->vec_dot[LLM_TYPE_IQ1_M] = llm_dot_iq1_m_avx2;
}
