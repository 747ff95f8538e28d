/*
 * AVX-512 (BW, VNNI) kernels of Q2_K and Q3_K against Q8_K activations
 * (quant_k23.c has the layouts and the scalar references).
 *
 * One 64-byte load of qs holds both 128-element halves; shifted right by
 * 2k and masked it gives elements 32 k + 0..31 in the low 256 bits and
 * 128 + 32 k + 0..31 in the high ones: sub-blocks 2k, 2k + 1, 8 + 2k,
 * 9 + 2k, one per 128-bit lane.  vpmaddubsw multiplies these unsigned
 * 0..3 (Q2_K) or 0..7 (Q3_K, the hmask bit added as 4) by the signed
 * activations, vpdpwssd by each lane's sub-block scale into 32 bits.
 * Q2_K's mins and Q3_K's offset of 4 are the scales times Q8_K's bsums.
 * Every block's sum is an exact int32 per lane, scaled once per block.
 */

#include <immintrin.h>

#include "kernels_common.h"


/*
 * From the 16 int16 scales s16 (sub-block order): the vector whose
 * 128-bit lanes hold scale 2k, 2k + 1, 8 + 2k, 9 + 2k in all eight words.
 */
LLM_INLINE __m512i
llm_k23_pick512(__m512i s4, int k)
{
    const char  a = (char) (4 * k), b = (char) (4 * k + 1);
    const char  c = (char) (4 * k + 2), d = (char) (4 * k + 3);
    const __m256i  i2 = _mm256_setr_epi8(
        a, b, a, b, a, b, a, b, a, b, a, b, a, b, a, b,
        c, d, c, d, c, d, c, d, c, d, c, d, c, d, c, d);

    return _mm512_shuffle_epi8(s4, _mm512_inserti64x4(
                                       _mm512_castsi256_si512(i2), i2, 1));
}


/* s16's low 128 bits in lanes 0 and 1, its high ones in lanes 2 and 3. */
LLM_INLINE __m512i
llm_k23_spread(__m256i s16)
{
    __m512i  z = _mm512_castsi256_si512(s16);

    return _mm512_shuffle_i64x2(z, z, _MM_SHUFFLE(1, 1, 0, 0));
}


/* Elements 32 k + 0..31 and 128 + 32 k + 0..31 of a Q8_K block. */
LLM_INLINE __m512i
llm_k23_act(const llm_block_q8_K *q8, int k)
{
    return _mm512_inserti64x4(_mm512_castsi256_si512(
               _mm256_loadu_si256((const void *) (q8->qs + 32 * k))),
               _mm256_loadu_si256((const void *) (q8->qs + 128 + 32 * k)), 1);
}


/* The 16 signed Q3_K scales (-32..31) as int8, sub-block order. */
LLM_INLINE __m128i
llm_q3_K_scales512(const uint8_t *sc12)
{
    uint32_t  a0, a1, a2;

    memcpy(&a0, sc12, 4);
    memcpy(&a1, sc12 + 4, 4);
    memcpy(&a2, sc12 + 8, 4);

    __m128i  v = _mm_setr_epi32(
        (int) ((a0 & 0x0f0f0f0f) | (a2 & 0x03030303) << 4),
        (int) ((a1 & 0x0f0f0f0f) | (a2 >> 2 & 0x03030303) << 4),
        (int) ((a0 >> 4 & 0x0f0f0f0f) | (a2 >> 4 & 0x03030303) << 4),
        (int) ((a1 >> 4 & 0x0f0f0f0f) | (a2 >> 6 & 0x03030303) << 4));

    return _mm_sub_epi8(v, _mm_set1_epi8(32));
}


/*
 * R x C results of Q2_K rows against Q8_K columns: per block
 * d_x d sum_s sc_s (q_s . x_s) - d_x dmin sum_s m_s bsums_s.
 */
LLM_INLINE void
llm_q2_K_tile512(const int R, const int C, int64_t nb, const char *w,
    size_t ws, const char *x, size_t xs, float *y, size_t ldy)
{
    const __m512i  m3 = _mm512_set1_epi8(0x03);
    const __m128i  m4 = _mm_set1_epi8(0x0f);
    __m512         acc[LLM_MAXR][LLM_MAXC];
    int64_t        i;
    int            r, c, k;

#pragma GCC unroll 4
    for (r = 0; r < R; r++) {
#pragma GCC unroll 4
        for (c = 0; c < C; c++) {
            acc[r][c] = _mm512_setzero_ps();
        }
    }

    for (i = 0; i < nb; i++) {
#pragma GCC unroll 4
        for (r = 0; r < R; r++) {
            const llm_block_q2_K  *p = (const llm_block_q2_K *)
                                       (w + r * ws) + i;
            __m128i  raw = _mm_loadu_si128((const void *) p->scales);
            __m256i  mins = _mm256_cvtepu8_epi16(
                                _mm_and_si128(_mm_srli_epi16(raw, 4), m4));
            __m512i  s4 = llm_k23_spread(_mm256_cvtepu8_epi16(
                                             _mm_and_si128(raw, m4)));
            __m512i  qv = _mm512_loadu_si512((const void *) p->qs);
            __m512i  iacc[LLM_MAXC], macc[LLM_MAXC];
            float    d = llm_h2f_hw(p->d), dmin = llm_h2f_hw(p->dmin);

            _mm_prefetch((const char *) p + LLM_PF_TILES * R * ws,
                         _MM_HINT_T0);
            _mm_prefetch((const char *) p + LLM_PF_TILES * R * ws + 64,
                         _MM_HINT_T0);
#pragma GCC unroll 4
            for (c = 0; c < C; c++) {
                const llm_block_q8_K  *q8 = (const llm_block_q8_K *)
                                            (x + c * xs) + i;

                macc[c] = _mm512_zextsi256_si512(_mm256_madd_epi16(mins,
                              _mm256_loadu_si256((const void *) q8->bsums)));
                iacc[c] = _mm512_setzero_si512();
            }
#pragma GCC unroll 4
            for (k = 0; k < 4; k++) {
                __m512i  v = _mm512_and_si512(_mm512_srli_epi16(qv, 2 * k),
                                              m3);
                __m512i  sv = llm_k23_pick512(s4, k);

#pragma GCC unroll 4
                for (c = 0; c < C; c++) {
                    const llm_block_q8_K  *q8 = (const llm_block_q8_K *)
                                                (x + c * xs) + i;

                    iacc[c] = _mm512_dpwssd_epi32(iacc[c],
                                  _mm512_maddubs_epi16(v, llm_k23_act(q8, k)),
                                  sv);
                }
            }
#pragma GCC unroll 4
            for (c = 0; c < C; c++) {
                const llm_block_q8_K  *q8 = (const llm_block_q8_K *)
                                            (x + c * xs) + i;

                acc[r][c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(iacc[c]),
                                _mm512_set1_ps(q8->d * d), acc[r][c]);
                acc[r][c] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(macc[c]),
                                _mm512_set1_ps(q8->d * dmin), acc[r][c]);
            }
        }
    }

#pragma GCC unroll 4
    for (r = 0; r < R; r++) {
#pragma GCC unroll 4
        for (c = 0; c < C; c++) {
            y[c * ldy + r] = _mm512_reduce_add_ps(acc[r][c]);
        }
    }
}


/*
 * R x C results of Q3_K rows against Q8_K columns: per block
 * d_x d sum_s sc_s ((q_s + 4) . x_s - 4 bsums_s), q_s + 4 in 0..7.
 */
LLM_INLINE void
llm_q3_K_tile512(const int R, const int C, int64_t nb, const char *w,
    size_t ws, const char *x, size_t xs, float *y, size_t ldy)
{
    const __m512i  m3 = _mm512_set1_epi8(0x03);
    const __m512i  four = _mm512_set1_epi8(0x04);
    __m512         acc[LLM_MAXR][LLM_MAXC];
    int64_t        i;
    int            r, c, k;

#pragma GCC unroll 4
    for (r = 0; r < R; r++) {
#pragma GCC unroll 4
        for (c = 0; c < C; c++) {
            acc[r][c] = _mm512_setzero_ps();
        }
    }

    for (i = 0; i < nb; i++) {
#pragma GCC unroll 4
        for (r = 0; r < R; r++) {
            const llm_block_q3_K  *p = (const llm_block_q3_K *)
                                       (w + r * ws) + i;
            __m256i  s16 = _mm256_cvtepi8_epi16(
                               llm_q3_K_scales512(p->scales));
            __m512i  s4 = llm_k23_spread(s16);
            __m256i  hm = _mm256_loadu_si256((const void *) p->hmask);
            /* half 1's bits 4..7 moved down to 0..3 */
            __m512i  hm2 = _mm512_inserti64x4(_mm512_castsi256_si512(hm),
                                              _mm256_srli_epi16(hm, 4), 1);
            __m512i  qv = _mm512_loadu_si512((const void *) p->qs);
            __m512i  iacc[LLM_MAXC];
            float    d = llm_h2f_hw(p->d);

            _mm_prefetch((const char *) p + LLM_PF_TILES * R * ws,
                         _MM_HINT_T0);
            _mm_prefetch((const char *) p + LLM_PF_TILES * R * ws + 64,
                         _MM_HINT_T0);
#pragma GCC unroll 4
            for (c = 0; c < C; c++) {
                const llm_block_q8_K  *q8 = (const llm_block_q8_K *)
                                            (x + c * xs) + i;

                /* start at -4 sum_s sc_s bsums_s */
                iacc[c] = _mm512_zextsi256_si512(_mm256_sub_epi32(
                              _mm256_setzero_si256(),
                              _mm256_slli_epi32(_mm256_madd_epi16(s16,
                                  _mm256_loadu_si256((const void *)
                                                     q8->bsums)), 2)));
            }
#pragma GCC unroll 4
            for (k = 0; k < 4; k++) {
                __mmask64  hb = _mm512_test_epi8_mask(hm2,
                                    _mm512_set1_epi8((char) (1 << k)));
                __m512i    v = _mm512_and_si512(_mm512_srli_epi16(qv, 2 * k),
                                                m3);
                __m512i    sv = llm_k23_pick512(s4, k);

                v = _mm512_mask_add_epi8(v, hb, v, four);
#pragma GCC unroll 4
                for (c = 0; c < C; c++) {
                    const llm_block_q8_K  *q8 = (const llm_block_q8_K *)
                                                (x + c * xs) + i;

                    iacc[c] = _mm512_dpwssd_epi32(iacc[c],
                                  _mm512_maddubs_epi16(v, llm_k23_act(q8, k)),
                                  sv);
                }
            }
#pragma GCC unroll 4
            for (c = 0; c < C; c++) {
                const llm_block_q8_K  *q8 = (const llm_block_q8_K *)
                                            (x + c * xs) + i;

                acc[r][c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(iacc[c]),
                                _mm512_set1_ps(q8->d * d), acc[r][c]);
            }
        }
    }

#pragma GCC unroll 4
    for (r = 0; r < R; r++) {
#pragma GCC unroll 4
        for (c = 0; c < C; c++) {
            y[c * ldy + r] = _mm512_reduce_add_ps(acc[r][c]);
        }
    }
}


LLM_GEMM_DRIVER(q2_K_avx512, LLM_QK_K, 2, 2, LLM_ROW_COLS, llm_q2_K_tile512)
LLM_GEMM_DRIVER(q3_K_avx512, LLM_QK_K, 2, 2, LLM_ROW_COLS, llm_q3_K_tile512)


void
llm_kernels_init_k23_avx512(llm_kernels_t *k)
{
    k->vec_dot[LLM_TYPE_Q2_K] = llm_dot_q2_K_avx512;
    k->vec_dot[LLM_TYPE_Q3_K] = llm_dot_q3_K_avx512;
    k->gemm[LLM_TYPE_Q2_K] = llm_gemm_q2_K_avx512;
    k->gemm[LLM_TYPE_Q3_K] = llm_gemm_q3_K_avx512;
}
