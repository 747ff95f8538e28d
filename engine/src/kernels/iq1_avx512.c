/*
 * AVX-512 (BW, VNNI) vec_dot kernels of IQ1_S and IQ1_M against Q8_K:
 * two 32-weight sub-blocks per register.
 *
 * Eight 64-bit loads from llm_iq1_grid give the two sub-blocks' grid
 * values (-1, 0, 1 as bytes); as masks (non-zero, negative) they zero or
 * negate the activation bytes (exact: Q8_K quants are within -127..127),
 * and vpdpbusd multiplies those by 8 times the scale 2 s + 1 as unsigned
 * bytes (at most 120) into 32-bit sums.  The +-1/8 deltas: IQ1_S's from
 * the Q8_K bsums in general registers; IQ1_M's (a sign per group of 8,
 * pext from qh) negate the activation bytes of their groups for a second
 * vpdpbusd with the scales themselves.  So each super-block's lanes add
 * up exactly to 8 sumi + sumi1 of the scalar reference (quant_iq1.c),
 * scaled once by d_w * d_x / 8: the same float per block as the
 * reference's; only the accumulation over blocks may round differently.
 */

#include <immintrin.h>

#include "kernels_common.h"


/* The 64 grid values of points i[0..7], in element order. */
LLM_INLINE __m512i
llm_iq1_points8(const unsigned *i)
{
    return _mm512_set_epi64((long long) llm_iq1_grid[i[7]],
                            (long long) llm_iq1_grid[i[6]],
                            (long long) llm_iq1_grid[i[5]],
                            (long long) llm_iq1_grid[i[4]],
                            (long long) llm_iq1_grid[i[3]],
                            (long long) llm_iq1_grid[i[2]],
                            (long long) llm_iq1_grid[i[1]],
                            (long long) llm_iq1_grid[i[0]]);
}


/* y times the grid values g (-1, 0, 1) byte by byte. */
LLM_INLINE __m512i
llm_iq1_apply(__m512i g, __m512i y)
{
    __mmask64  nz = _mm512_test_epi8_mask(g, g);
    __mmask64  neg = _mm512_movepi8_mask(g);

    return _mm512_mask_sub_epi8(_mm512_maskz_mov_epi8(nz, y), neg,
                                _mm512_setzero_si512(), y);
}


/* Bytes: c0 in the low 32, c1 in the high 32. */
LLM_INLINE __m512i
llm_iq1_halves(int c0, int c1)
{
    return _mm512_inserti64x4(
               _mm512_castsi256_si512(_mm256_set1_epi8((char) c0)),
               _mm256_set1_epi8((char) c1), 1);
}


/*
 * IQ1_S . Q8_K: per super-block the lanes of 8 ls (points . q8), plus
 * sum ls (+-1) (bsums pair) in a register: the exact 8 sumi + sumi1.
 */
static void
llm_dot_iq1_s_avx512(int64_t n, float *s, const void *w, const void *x)
{
    const llm_block_iq1_s  *a = w;
    const llm_block_q8_K   *q = x;
    float                   sum = 0;
    int64_t                 nb = n / LLM_QK_K, b;

    for (b = 0; b < nb; b++, a++, q++) {
        __m512i  acc = _mm512_setzero_si512();
        int      sumi1 = 0;

        _mm_prefetch((const char *) (a + 4), _MM_HINT_T0);
#pragma GCC unroll 4
        for (int ib = 0; ib < LLM_QK_K / 32; ib += 2) {
            const uint8_t  *qs = a->qs + 4 * ib;
            unsigned        h0 = a->qh[ib], h1 = a->qh[ib + 1], idx[8];
            int             ls0 = (int) (2 * (h0 >> 12 & 7) + 1);
            int             ls1 = (int) (2 * (h1 >> 12 & 7) + 1);

            for (int l = 0; l < 4; l++) {
                idx[l] = qs[l] | (h0 >> 3 * l & 7) << 8;
                idx[4 + l] = qs[4 + l] | (h1 >> 3 * l & 7) << 8;
            }
            acc = _mm512_dpbusd_epi32(acc, llm_iq1_halves(8 * ls0, 8 * ls1),
                      llm_iq1_apply(llm_iq1_points8(idx),
                                    _mm512_loadu_si512(q->qs + 32 * ib)));
            sumi1 += (h0 & 0x8000 ? -ls0 : ls0)
                     * (q->bsums[2 * ib] + q->bsums[2 * ib + 1])
                     + (h1 & 0x8000 ? -ls1 : ls1)
                     * (q->bsums[2 * ib + 2] + q->bsums[2 * ib + 3]);
        }
        sum += llm_h2f_hw(a->d) * q->d * 0.125f
               * (float) (_mm512_reduce_add_epi32(acc) + sumi1);
    }
    *s = sum;
}


/*
 * IQ1_M . Q8_K: per pair of sub-blocks, 8 ls times the grid-applied
 * bytes plus ls times the delta-signed bytes, ls per group of 16: the
 * exact 8 sumi + sumi1.
 */
static void
llm_dot_iq1_m_avx512(int64_t n, float *s, const void *w, const void *x)
{
    const __m512i           rep = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1,
                                                    2, 2, 2, 2, 3, 3, 3, 3);
    const llm_block_iq1_m  *a = w;
    const llm_block_q8_K   *q = x;
    float                   sum = 0;
    int64_t                 nb = n / LLM_QK_K, b;

    for (b = 0; b < nb; b++, a++, q++) {
        __m512i  acc = _mm512_setzero_si512();

        _mm_prefetch((const char *) (a + 4), _MM_HINT_T0);
#pragma GCC unroll 4
        for (int ib = 0; ib < LLM_QK_K / 32; ib += 2) {
            const uint8_t  *qs = a->qs + 4 * ib, *qh = a->qh + 2 * ib;
            unsigned        sc = a->scales[ib] | a->scales[ib + 1] << 8;
            uint32_t        hw = qh[0] | qh[1] << 8 | qh[2] << 16
                                 | (uint32_t) qh[3] << 24;
            unsigned        idx[8];

            for (int l = 0; l < 8; l++) {
                idx[l] = qs[l] | (hw >> 4 * l & 7) << 8;
            }

            /* ls per group of 16 as bytes (the halves of both
             * sub-blocks), and the groups' delta signs as a byte mask */
            __m128i    l4 = _mm_mullo_epi32(
                                _mm_setr_epi32((int) (2 * (sc & 7) + 1),
                                               (int) (2 * (sc >> 3 & 7) + 1),
                                               (int) (2 * (sc >> 6 & 7) + 1),
                                               (int) (2 * (sc >> 9 & 7) + 1)),
                                _mm_set1_epi32(0x01010101));
            __m512i    lsv = _mm512_permutexvar_epi32(rep,
                                 _mm512_castsi128_si512(l4));
            __mmask64  dm = _pdep_u64(_pext_u32(hw, 0x88888888u),
                                      0x0101010101010101ull) * 0xff;
            __m512i    y = _mm512_loadu_si512(q->qs + 32 * ib);

            acc = _mm512_dpbusd_epi32(acc, _mm512_slli_epi32(lsv, 3),
                      llm_iq1_apply(llm_iq1_points8(idx), y));
            acc = _mm512_dpbusd_epi32(acc, lsv,
                      _mm512_mask_sub_epi8(y, dm, _mm512_setzero_si512(),
                                           y));
        }
        sum += llm_h2f_hw(llm_iq1_m_d(a->scales)) * q->d * 0.125f
               * (float) _mm512_reduce_add_epi32(acc);
    }
    *s = sum;
}


void
llm_kernels_init_iq1_avx512(llm_kernels_t *k)
{
    k->vec_dot[LLM_TYPE_IQ1_S] = llm_dot_iq1_s_avx512;
    k->vec_dot[LLM_TYPE_IQ1_M] = llm_dot_iq1_m_avx512;
}
