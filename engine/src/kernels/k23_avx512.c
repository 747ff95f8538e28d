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
 * Every block's sum is an exact int32 per lane; its lanes summed, it is
 * scaled by one scalar FMA per block (Q2_K: two, the scales then the
 * mins), the order of the regrouped kernels below (Q2_K_R16, Q3_K_R16:
 * what resident matrices of 16-row runs run), so that a streamed expert,
 * which runs this file layout, gives the resident one's bits.
 */

#include <immintrin.h>
#include <math.h>

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
    float          acc[LLM_MAXR][LLM_MAXC];
    int64_t        i;
    int            r, c, k;

#pragma GCC unroll 4
    for (r = 0; r < R; r++) {
#pragma GCC unroll 4
        for (c = 0; c < C; c++) {
            acc[r][c] = 0;
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

                acc[r][c] = fmaf((float) _mm512_reduce_add_epi32(iacc[c]),
                                 d * q8->d, acc[r][c]);
                acc[r][c] = fmaf((float) -_mm512_reduce_add_epi32(macc[c]),
                                 dmin * q8->d, acc[r][c]);
            }
        }
    }

#pragma GCC unroll 4
    for (r = 0; r < R; r++) {
#pragma GCC unroll 4
        for (c = 0; c < C; c++) {
            y[c * ldy + r] = acc[r][c];
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
    float          acc[LLM_MAXR][LLM_MAXC];
    int64_t        i;
    int            r, c, k;

#pragma GCC unroll 4
    for (r = 0; r < R; r++) {
#pragma GCC unroll 4
        for (c = 0; c < C; c++) {
            acc[r][c] = 0;
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

                acc[r][c] = fmaf((float) _mm512_reduce_add_epi32(iacc[c]),
                                 d * q8->d, acc[r][c]);
            }
        }
    }

#pragma GCC unroll 4
    for (r = 0; r < R; r++) {
#pragma GCC unroll 4
        for (c = 0; c < C; c++) {
            y[c * ldy + r] = acc[r][c];
        }
    }
}


/* ---- Q2_K_R16, Q3_K_R16: 16 interleaved rows, one lane per row ------- */

/*
 * Qs vector 8 h + 4 u + m of a regrouped super-block holds, at bits 2k..
 * 2k + 1 of lane r's four bytes, elements 4m..4m+3 of sub-block s = 8 h +
 * 2 k + u of row r.  Masked in place (bits 2k..2k + 1 kept: 4^k q, no
 * shift), four vpdpbusd against the column's 4-byte broadcasts give 4^k
 * x the sub-block's sum for all 16 rows, an exact int32 that a shift
 * brings back below 2^15; vpdpwssd then multiplies it by the rows'
 * sub-block scale, one int16 in the low word of each lane (the high word
 * zero) that a vpshufb takes from the rows' scale bytes.  Q2_K's mins go
 * two sub-blocks a vpdpwssd against a pair of the column's bsums; Q3_K's
 * third bit is a 64-bit mask per unpacked vector (hm), added as 4 (q + 4
 * in 0..7), and the 4 bsums per sub-block are taken off once per
 * super-block.  Per row and super-block the sums are exact integers, then
 * one FMA each (two for Q2_K: the scales, then the mins), as the scalar
 * references in quant_r16.c.
 */
#define LLM_K23R_MAXC  8

/* The vpshufb index taking byte i of each lane into byte at (0 or 1),
 * zeroing the others. */
LLM_INLINE __m512i
llm_k23r_pick(int i, int at)
{
    const int  z = (int) 0x80808080u;
    int        d[4];

    for (int l = 0; l < 4; l++) {
        d[l] = (z & ~(0xff << 8 * at)) | (4 * l + i) << 8 * at;
    }
    return _mm512_broadcast_i32x4(_mm_setr_epi32(d[0], d[1], d[2], d[3]));
}


/* The vpshufb index taking bytes 2p and 2p + 1 of each lane into the low
 * bytes of its two words (at = 0) or their high bytes (at = 1). */
LLM_INLINE __m512i
llm_k23r_pair(int p, int at)
{
    int  d[4];

    for (int l = 0; l < 4; l++) {
        int  a = 4 * l + 2 * p, b = a + 1;

        d[l] = at ? (int) (0x80u | (unsigned) a << 8 | 0x800000u
                           | (unsigned) b << 24)
                  : (int) ((unsigned) a | 0x8000u | (unsigned) b << 16
                           | 0x80000000u);
    }
    return _mm512_broadcast_i32x4(_mm_setr_epi32(d[0], d[1], d[2], d[3]));
}


LLM_INLINE __m512i
llm_k23r_dpbusd(__m512i acc, __m512i u8, const int8_t *s8)
{
    __asm__("vpdpbusd %2%{1to16%}, %1, %0"
            : "+v" (acc)
            : "v" (u8), "m" (*(const int32_t (*)[1]) (const void *) s8));
    return acc;
}


LLM_INLINE __m512i
llm_k23r_dpwssd(__m512i acc, __m512i a, const int16_t *pair)
{
    __asm__("vpdpwssd %2%{1to16%}, %1, %0"
            : "+v" (acc)
            : "v" (a), "m" (*(const int32_t (*)[1]) (const void *) pair));
    return acc;
}


LLM_INLINE void
llm_q2_K_r16_tile(const int C, int64_t nb, const llm_block_q2_Kx16 *w,
    const char *x, size_t xs, float *y, size_t ldy)
{
    const __m512i  m4 = _mm512_set1_epi8(0x0f);
    __m512         acc[LLM_K23R_MAXC];
    int64_t        b;
    int            c, h, u, k, m, j;

#pragma GCC unroll 8
    for (c = 0; c < C; c++) {
        acc[c] = _mm512_setzero_ps();
    }

    for (b = 0; b < nb; b++, w++) {
        __m512         wd, wm;
        __m512i        sc[4], mn[4];
        __m512i        isum[LLM_K23R_MAXC], msum[LLM_K23R_MAXC];

#pragma GCC unroll 4
        for (j = 0; j < 4; j++) {
            __m512i  r = _mm512_loadu_si512((const void *) w->sc[j]);

            sc[j] = _mm512_and_si512(r, m4);
            mn[j] = _mm512_and_si512(_mm512_srli_epi16(r, 4), m4);
        }
#pragma GCC unroll 8
        for (c = 0; c < C; c++) {
            isum[c] = _mm512_setzero_si512();
            msum[c] = _mm512_setzero_si512();
        }
        /* the mins, two sub-blocks a step: words m_4j+2p, m_4j+2p+1 */
#pragma GCC unroll 4
        for (j = 0; j < 4; j++) {
#pragma GCC unroll 2
            for (m = 0; m < 2; m++) {
                __m512i  mp = _mm512_shuffle_epi8(mn[j], llm_k23r_pair(m, 0));

#pragma GCC unroll 8
                for (c = 0; c < C; c++) {
                    const llm_block_q8_K  *q8 = (const llm_block_q8_K *)
                        (const void *) (x + c * xs) + b;

                    msum[c] = llm_k23r_dpwssd(msum[c], mp,
                                              q8->bsums + 4 * j + 2 * m);
                }
            }
        }
#ifndef __clang__
#pragma GCC unroll 2        /* clang cannot unroll it around the inner ones */
#endif
        for (h = 0; h < 2; h++) {
#pragma GCC unroll 2
            for (u = 0; u < 2; u++) {
                LLM_PREFETCH_NEXT(w, 2 * h + u, 4);
#pragma GCC unroll 4
                for (k = 0; k < 4; k++) {
                    const int      s = 8 * h + 2 * k + u;
                    const __m512i  ws = _mm512_shuffle_epi8(
                                            sc[s >> 2],
                                            llm_k23r_pick(s & 3, 0));
                    const __m512i  mk = _mm512_set1_epi8((char) (3 << 2 * k));
                    __m512i        v[4];

#pragma GCC unroll 4
                    for (m = 0; m < 4; m++) {
                        v[m] = _mm512_and_si512(_mm512_loadu_si512(
                                   (const void *) w->qs[8 * h + 4 * u + m]),
                                   mk);
                    }
#pragma GCC unroll 8
                    for (c = 0; c < C; c++) {
                        const int8_t  *qy = ((const llm_block_q8_K *)
                                             (const void *) (x + c * xs)
                                             + b)->qs + 16 * s;
                        __m512i        s0 = _mm512_setzero_si512();

#pragma GCC unroll 4
                        for (m = 0; m < 4; m++) {
                            s0 = llm_k23r_dpbusd(s0, v[m], qy + 4 * m);
                        }
                        if (k > 0) {
                            s0 = _mm512_srai_epi32(s0, 2 * k);
                        }
                        isum[c] = _mm512_dpwssd_epi32(isum[c], s0, ws);
                    }
                }
            }
        }
        wd = _mm512_cvtph_ps(_mm256_loadu_si256((const void *) w->d));
        wm = _mm512_cvtph_ps(_mm256_loadu_si256((const void *) w->dmin));
#pragma GCC unroll 8
        for (c = 0; c < C; c++) {
            const __m512  dx = _mm512_set1_ps(((const llm_block_q8_K *)
                                               (const void *) (x + c * xs)
                                               + b)->d);

            acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[c]),
                                     _mm512_mul_ps(wd, dx), acc[c]);
            acc[c] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(msum[c]),
                                      _mm512_mul_ps(wm, dx), acc[c]);
        }
    }

#pragma GCC unroll 8
    for (c = 0; c < C; c++) {
        _mm512_storeu_ps(y + c * ldy, acc[c]);
    }
}


/*
 * Q3_K's 16 scales of the 16 rows as signed bytes (sc - 32), four
 * vectors, lane r of e[j] row r's scales 4j..4j+3: low four bits from
 * a0 (sub-blocks 0..3, 8..11) and a1 (4..7, 12..15), the top two from
 * a2 (bits 2 (s / 4) of byte s % 4).
 */
LLM_INLINE void
llm_q3_K_r16_scales(const llm_block_q3_Kx16 *w, __m512i e[4])
{
    const __m512i  a0 = _mm512_loadu_si512((const void *) w->sc[0]);
    const __m512i  a1 = _mm512_loadu_si512((const void *) w->sc[1]);
    const __m512i  a2 = _mm512_loadu_si512((const void *) w->sc[2]);
    const __m512i  lo = _mm512_set1_epi8(0x0f), hi = _mm512_set1_epi8(0x30);
    const __m512i  b32 = _mm512_set1_epi8(32);

    e[0] = _mm512_or_si512(_mm512_and_si512(a0, lo),
                           _mm512_and_si512(_mm512_slli_epi32(a2, 4), hi));
    e[1] = _mm512_or_si512(_mm512_and_si512(a1, lo),
                           _mm512_and_si512(_mm512_slli_epi32(a2, 2), hi));
    e[2] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(a0, 4), lo),
                           _mm512_and_si512(a2, hi));
    e[3] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(a1, 4), lo),
                           _mm512_and_si512(_mm512_srli_epi32(a2, 2), hi));
    for (int j = 0; j < 4; j++) {
        e[j] = _mm512_sub_epi8(e[j], b32);
    }
}


/*
 * The scales go in the high byte of the low word (256 sc, the low byte
 * zero): |sum| <= 16 x 32 x 16 x 7 x 127 x 256 < 2^31, and the factor
 * comes off exactly with a shift at the end.
 */
LLM_INLINE void
llm_q3_K_r16_tile(const int C, int64_t nb, const llm_block_q3_Kx16 *w,
    const char *x, size_t xs, float *y, size_t ldy)
{
    const __m512i  m3 = _mm512_set1_epi8(0x03);
    __m512         acc[LLM_K23R_MAXC];
    int64_t        b;
    int            c, h, u, k, m, j;

#pragma GCC unroll 8
    for (c = 0; c < C; c++) {
        acc[c] = _mm512_setzero_ps();
    }

    for (b = 0; b < nb; b++, w++) {
        __m512         wd;
        __m512i        e[4];
        __m512i        isum[LLM_K23R_MAXC], msum[LLM_K23R_MAXC];

        llm_q3_K_r16_scales(w, e);
#pragma GCC unroll 8
        for (c = 0; c < C; c++) {
            isum[c] = _mm512_setzero_si512();
            msum[c] = _mm512_setzero_si512();
        }
        /* 256 sum_s sc_s bsums_s, two sub-blocks a step */
#pragma GCC unroll 4
        for (j = 0; j < 4; j++) {
#pragma GCC unroll 2
            for (m = 0; m < 2; m++) {
                __m512i  sp = _mm512_shuffle_epi8(e[j], llm_k23r_pair(m, 1));

#pragma GCC unroll 8
                for (c = 0; c < C; c++) {
                    const llm_block_q8_K  *q8 = (const llm_block_q8_K *)
                        (const void *) (x + c * xs) + b;

                    msum[c] = llm_k23r_dpwssd(msum[c], sp,
                                              q8->bsums + 4 * j + 2 * m);
                }
            }
        }
#ifndef __clang__
#pragma GCC unroll 2        /* clang cannot unroll it around the inner ones */
#endif
        for (h = 0; h < 2; h++) {
#pragma GCC unroll 2
            for (u = 0; u < 2; u++) {
                LLM_PREFETCH_NEXT(w, 2 * h + u, 4);
#pragma GCC unroll 4
                for (k = 0; k < 4; k++) {
                    const int      s = 8 * h + 2 * k + u;
                    const int      kk = k < 3 ? k : 0;
                    const __m512i  ws = _mm512_shuffle_epi8(
                                            e[s >> 2],
                                            llm_k23r_pick(s & 3, 1));
                    const __m512i  mk = _mm512_set1_epi8((char) (3 << 2 * k));
                    const __m512i  four = _mm512_set1_epi8((char) (4 << 2
                                                                   * kk));
                    __m512i        v[4];

#pragma GCC unroll 4
                    for (m = 0; m < 4; m++) {
                        __m512i  q = _mm512_loadu_si512(
                                   (const void *) w->g[2 * h + u].qs[m]);

                        q = k < 3 ? _mm512_and_si512(q, mk)
                                  : _mm512_and_si512(_mm512_srli_epi16(q, 6),
                                                     m3);
                        v[m] = _mm512_mask_add_epi8(q, (__mmask64)
                                                    w->g[2 * h + u].hm[k][m],
                                                    q, four);
                    }
#pragma GCC unroll 8
                    for (c = 0; c < C; c++) {
                        const int8_t  *qy = ((const llm_block_q8_K *)
                                             (const void *) (x + c * xs)
                                             + b)->qs + 16 * s;
                        __m512i        s0 = _mm512_setzero_si512();

#pragma GCC unroll 4
                        for (m = 0; m < 4; m++) {
                            s0 = llm_k23r_dpbusd(s0, v[m], qy + 4 * m);
                        }
                        if (kk > 0) {
                            s0 = _mm512_srai_epi32(s0, 2 * kk);
                        }
                        isum[c] = _mm512_dpwssd_epi32(isum[c], s0, ws);
                    }
                }
            }
        }
        wd = _mm512_cvtph_ps(_mm256_loadu_si256((const void *) w->d));
#pragma GCC unroll 8
        for (c = 0; c < C; c++) {
            const __m512   dx = _mm512_set1_ps(((const llm_block_q8_K *)
                                                (const void *) (x + c * xs)
                                                + b)->d);
            const __m512i  is = _mm512_sub_epi32(
                                    _mm512_srai_epi32(isum[c], 8),
                                    _mm512_slli_epi32(
                                        _mm512_srai_epi32(msum[c], 8), 2));

            acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(is),
                                     _mm512_mul_ps(wd, dx), acc[c]);
        }
    }

#pragma GCC unroll 8
    for (c = 0; c < C; c++) {
        _mm512_storeu_ps(y + c * ldy, acc[c]);
    }
}


#define LLM_K23R_CASE(TILE, BLK, n)                                         \
    case n:                                                                 \
        TILE(n, nb, (const BLK *) (const void *) (wp + g * 16 * ws),        \
             (const char *) x + c0 * xs, xs, y + c0 * ldy + g * 16, ldy);   \
        break;

/* Each 16-row group against the columns in balanced chunks of at most
 * LLM_K23R_MAXC (the group's rows stay in L2 between the chunks). */
#define LLM_K23R_GEMM(name, TILE, BLK)                                      \
static void                                                                 \
name(int64_t n, int64_t nr, int64_t nc, const void *w, size_t ws,           \
    const void *x, size_t xs, float *y, size_t ldy)                         \
{                                                                           \
    const char    *wp = w;                                                  \
    const int64_t  nb = n / LLM_QK_K, ng = nr / 16;                         \
    const int64_t  nch = (nc + LLM_K23R_MAXC - 1) / LLM_K23R_MAXC;          \
    int64_t        g, j, c0, c1;                                            \
                                                                            \
    for (g = 0; g < ng; g++) {                                              \
        for (j = 0; j < nch; j++) {                                         \
            c0 = j * nc / nch;                                              \
            c1 = (j + 1) * nc / nch;                                        \
            switch (c1 - c0) {                                              \
            LLM_K23R_CASE(TILE, BLK, 1)                                     \
            LLM_K23R_CASE(TILE, BLK, 2)                                     \
            LLM_K23R_CASE(TILE, BLK, 3)                                     \
            LLM_K23R_CASE(TILE, BLK, 4)                                     \
            LLM_K23R_CASE(TILE, BLK, 5)                                     \
            LLM_K23R_CASE(TILE, BLK, 6)                                     \
            LLM_K23R_CASE(TILE, BLK, 7)                                     \
            default:                                                        \
            LLM_K23R_CASE(TILE, BLK, 8)                                     \
            }                                                               \
        }                                                                   \
    }                                                                       \
}

LLM_K23R_GEMM(llm_gemm_q2_K_r16, llm_q2_K_r16_tile, llm_block_q2_Kx16)
LLM_K23R_GEMM(llm_gemm_q3_K_r16, llm_q3_K_r16_tile, llm_block_q3_Kx16)


LLM_GEMM_DRIVER(q2_K_avx512, LLM_QK_K, 2, 2, LLM_ROW_COLS, llm_q2_K_tile512)
LLM_GEMM_DRIVER(q3_K_avx512, LLM_QK_K, 2, 2, LLM_ROW_COLS, llm_q3_K_tile512)


void
llm_kernels_init_k23_avx512(llm_kernels_t *k)
{
    k->vec_dot[LLM_TYPE_Q2_K] = llm_dot_q2_K_avx512;
    k->vec_dot[LLM_TYPE_Q3_K] = llm_dot_q3_K_avx512;
    k->gemm[LLM_TYPE_Q2_K] = llm_gemm_q2_K_avx512;
    k->gemm[LLM_TYPE_Q3_K] = llm_gemm_q3_K_avx512;
    k->gemm[LLM_TYPE_Q2_K_R16] = llm_gemm_q2_K_r16;
    k->gemm[LLM_TYPE_Q3_K_R16] = llm_gemm_q3_K_r16;
}
