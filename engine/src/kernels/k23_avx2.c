/*
 * AVX2 kernels of the 2- and 3-bit K-quants Q2_K and Q3_K against Q8_K
 * activations (quant_k23.c has the layouts and the scalar references).
 *
 * One 32-byte load of qs holds, shifted right by 2k and masked, the 32
 * elements 128 h + 32 k + 0..31 (sub-blocks 8 h + 2 k and 8 h + 2 k + 1,
 * one per 128-bit lane), in the order the activations have them.
 * vpmaddubsw multiplies these unsigned 0..3 (Q2_K) or 0..7 (Q3_K, the
 * hmask bit added as 4) by the signed activations; vpmaddwd widens with
 * each lane's sub-block scale.  Q2_K's mins and Q3_K's offset of 4 are
 * the scales times Q8_K's bsums.  Every block's sum is an exact int32
 * per vector lane, scaled once per block.
 */

#include <immintrin.h>
#include <math.h>

#include "kernels_common.h"


/* The exact sum of the 8 int32 lanes of v. */
LLM_INLINE int
llm_k23_isum(__m256i v)
{
    __m128i  s = _mm_add_epi32(_mm256_castsi256_si128(v),
                               _mm256_extracti128_si256(v, 1));

    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
    return _mm_cvtsi128_si32(s);
}


/*
 * The byte shuffles that turn 8 int16 scales (both lanes alike) into
 * scale 2k in the low lane's eight words and 2k + 1 in the high lane's.
 */
LLM_INLINE __m256i
llm_k23_pick(__m256i sc, int k)
{
    const char  a = (char) (4 * k), b = (char) (4 * k + 1);
    const char  c = (char) (4 * k + 2), d = (char) (4 * k + 3);

    return _mm256_shuffle_epi8(sc, _mm256_setr_epi8(
        a, b, a, b, a, b, a, b, a, b, a, b, a, b, a, b,
        c, d, c, d, c, d, c, d, c, d, c, d, c, d, c, d));
}


/*
 * The 16 signed Q3_K scales (-32..31) as int8, sub-block order: the low
 * nibbles come from bytes 0..7 (low, then high nibbles), the top two
 * bits from bytes 8..11, two bits per group of four sub-blocks.
 */
LLM_INLINE __m128i
llm_q3_K_scales(const uint8_t *sc12)
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
llm_q2_K_tile(const int R, const int C, int64_t nb, const char *w,
    size_t ws, const char *x, size_t xs, float *y, size_t ldy)
{
    const __m256i  m3 = _mm256_set1_epi8(0x03);
    const __m128i  m4 = _mm_set1_epi8(0x0f);
    float          acc[LLM_MAXR][LLM_MAXC];
    int64_t        i;
    int            r, c, h, k;

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
            __m128i  scl = _mm_and_si128(raw, m4);
            __m256i  sc[2], iacc[LLM_MAXC], macc[LLM_MAXC];
            float    d = llm_h2f_hw(p->d), dmin = llm_h2f_hw(p->dmin);

            _mm_prefetch((const char *) p + LLM_PF_TILES * R * ws,
                         _MM_HINT_T0);
            _mm_prefetch((const char *) p + LLM_PF_TILES * R * ws + 64,
                         _MM_HINT_T0);
            sc[0] = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(scl));
            sc[1] = _mm256_broadcastsi128_si256(
                        _mm_cvtepu8_epi16(_mm_srli_si128(scl, 8)));
#pragma GCC unroll 4
            for (c = 0; c < C; c++) {
                const llm_block_q8_K  *q8 = (const llm_block_q8_K *)
                                            (x + c * xs) + i;

                macc[c] = _mm256_madd_epi16(mins, _mm256_loadu_si256(
                                                (const void *) q8->bsums));
                iacc[c] = _mm256_setzero_si256();
            }
#pragma GCC unroll 2
            for (h = 0; h < 2; h++) {
                __m256i  qv = _mm256_loadu_si256((const void *)
                                                 (p->qs + 32 * h));

#pragma GCC unroll 4
                for (k = 0; k < 4; k++) {
                    __m256i  v = _mm256_and_si256(
                                     _mm256_srli_epi16(qv, 2 * k), m3);
                    __m256i  sv = llm_k23_pick(sc[h], k);

#pragma GCC unroll 4
                    for (c = 0; c < C; c++) {
                        const llm_block_q8_K  *q8 = (const llm_block_q8_K *)
                                                    (x + c * xs) + i;
                        __m256i  yv = _mm256_loadu_si256((const void *)
                                          (q8->qs + 128 * h + 32 * k));

                        iacc[c] = _mm256_add_epi32(iacc[c], _mm256_madd_epi16(
                                      _mm256_maddubs_epi16(v, yv), sv));
                    }
                }
            }
#pragma GCC unroll 4
            for (c = 0; c < C; c++) {
                const llm_block_q8_K  *q8 = (const llm_block_q8_K *)
                                            (x + c * xs) + i;

                acc[r][c] = fmaf((float) llm_k23_isum(iacc[c]),
                                 d * q8->d, acc[r][c]);
                acc[r][c] = fmaf((float) -llm_k23_isum(macc[c]),
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
llm_q3_K_tile(const int R, const int C, int64_t nb, const char *w,
    size_t ws, const char *x, size_t xs, float *y, size_t ldy)
{
    const __m256i  m3 = _mm256_set1_epi8(0x03);
    const __m256i  m1 = _mm256_set1_epi8(0x01);
    __m256         acc[LLM_MAXR][LLM_MAXC];
    int64_t        i;
    int            r, c, h, k;

#pragma GCC unroll 4
    for (r = 0; r < R; r++) {
#pragma GCC unroll 4
        for (c = 0; c < C; c++) {
            acc[r][c] = _mm256_setzero_ps();
        }
    }

    for (i = 0; i < nb; i++) {
#pragma GCC unroll 4
        for (r = 0; r < R; r++) {
            const llm_block_q3_K  *p = (const llm_block_q3_K *)
                                       (w + r * ws) + i;
            __m128i  s8 = llm_q3_K_scales(p->scales);
            __m256i  s16 = _mm256_cvtepi8_epi16(s8);
            __m256i  hm = _mm256_loadu_si256((const void *) p->hmask);
            __m256i  sc[2], iacc[LLM_MAXC];
            float    d = llm_h2f_hw(p->d);

            _mm_prefetch((const char *) p + LLM_PF_TILES * R * ws,
                         _MM_HINT_T0);
            _mm_prefetch((const char *) p + LLM_PF_TILES * R * ws + 64,
                         _MM_HINT_T0);
            sc[0] = _mm256_permute2x128_si256(s16, s16, 0x00);
            sc[1] = _mm256_permute2x128_si256(s16, s16, 0x11);
#pragma GCC unroll 4
            for (c = 0; c < C; c++) {
                const llm_block_q8_K  *q8 = (const llm_block_q8_K *)
                                            (x + c * xs) + i;

                /* start at -4 sum_s sc_s bsums_s */
                iacc[c] = _mm256_sub_epi32(_mm256_setzero_si256(),
                              _mm256_slli_epi32(_mm256_madd_epi16(s16,
                                  _mm256_loadu_si256((const void *)
                                                     q8->bsums)), 2));
            }
#pragma GCC unroll 2
            for (h = 0; h < 2; h++) {
                __m256i  qv = _mm256_loadu_si256((const void *)
                                                 (p->qs + 32 * h));

#pragma GCC unroll 4
                for (k = 0; k < 4; k++) {
                    __m256i  hb = _mm256_and_si256(
                                      _mm256_srli_epi16(hm, 4 * h + k), m1);
                    __m256i  v = _mm256_or_si256(
                                     _mm256_and_si256(
                                         _mm256_srli_epi16(qv, 2 * k), m3),
                                     _mm256_slli_epi16(hb, 2));
                    __m256i  sv = llm_k23_pick(sc[h], k);

#pragma GCC unroll 4
                    for (c = 0; c < C; c++) {
                        const llm_block_q8_K  *q8 = (const llm_block_q8_K *)
                                                    (x + c * xs) + i;
                        __m256i  yv = _mm256_loadu_si256((const void *)
                                          (q8->qs + 128 * h + 32 * k));

                        iacc[c] = _mm256_add_epi32(iacc[c], _mm256_madd_epi16(
                                      _mm256_maddubs_epi16(v, yv), sv));
                    }
                }
            }
#pragma GCC unroll 4
            for (c = 0; c < C; c++) {
                const llm_block_q8_K  *q8 = (const llm_block_q8_K *)
                                            (x + c * xs) + i;

                acc[r][c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(iacc[c]),
                                _mm256_set1_ps(q8->d * d), acc[r][c]);
            }
        }
    }

#pragma GCC unroll 4
    for (r = 0; r < R; r++) {
#pragma GCC unroll 4
        for (c = 0; c < C; c++) {
            y[c * ldy + r] = llm_hsum256(acc[r][c]);
        }
    }
}


/* ---- Q2_K_R16: 16 interleaved rows, 8 (one half) a pass ------------- */

/*
 * The regrouped layout of k23_avx512.c (llm_block_q2_Kx16) with 256-bit
 * vectors: half hf of each 64-byte vector is rows 8 hf .. 8 hf + 7, one
 * 32-bit lane each.  Per sub-block the four unpacked qs vectors (shift,
 * mask: 0..3) go through vpmaddubsw against the column's 4-byte
 * broadcasts, summed in int16 (at most 4 x 2 x 3 x 127), then vpmaddwd by
 * the rows' scale (a vpshufb of their scale bytes into both words of each
 * lane) into the int32 sum; the mins two sub-blocks a vpmaddwd against a
 * pair of bsums.  Per row and super-block the same exact integers and the
 * same two FMAs as the AVX-512 kernel and quant_r16.c's reference.
 */
#define LLM_K23R2_MAXC  4

/* The vpshufb index taking byte i of each lane into both low bytes of its
 * words (at = 0: words (b_i, b_i)), or bytes 2p, 2p + 1 (pair). */
LLM_INLINE __m256i
llm_k23r2_idx(int a, int b)
{
    int  d[4];

    for (int l = 0; l < 4; l++) {
        d[l] = (int) ((unsigned) (4 * l + a) | 0x8000u
                      | (unsigned) (4 * l + b) << 16 | 0x80000000u);
    }
    return _mm256_broadcastsi128_si256(_mm_setr_epi32(d[0], d[1], d[2],
                                                      d[3]));
}


LLM_INLINE __m256i
llm_k23r2_b4(const void *p)
{
    int32_t  v;

    memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}


LLM_INLINE void
llm_q2_K_r16_half(const int C, int hf, int64_t nb,
    const llm_block_q2_Kx16 *w, const char *x, size_t xs, float *y,
    size_t ldy)
{
    const __m256i  m3 = _mm256_set1_epi8(0x03), m4 = _mm256_set1_epi8(0x0f);
    __m256         acc[LLM_K23R2_MAXC];
    int64_t        b;
    int            c, h, u, k, m, j;

#pragma GCC unroll 4
    for (c = 0; c < C; c++) {
        acc[c] = _mm256_setzero_ps();
    }
    for (b = 0; b < nb; b++, w++) {
        __m256i  sc[4], mn[4];
        __m256i  isum[LLM_K23R2_MAXC], msum[LLM_K23R2_MAXC];
        __m256   wd, wm;

#pragma GCC unroll 4
        for (j = 0; j < 4; j++) {
            __m256i  r = _mm256_loadu_si256((const void *)
                                            (w->sc[j] + 32 * hf));

            sc[j] = _mm256_and_si256(r, m4);
            mn[j] = _mm256_and_si256(_mm256_srli_epi16(r, 4), m4);
        }
#pragma GCC unroll 4
        for (c = 0; c < C; c++) {
            isum[c] = _mm256_setzero_si256();
            msum[c] = _mm256_setzero_si256();
        }
#pragma GCC unroll 4
        for (j = 0; j < 4; j++) {
#pragma GCC unroll 2
            for (m = 0; m < 2; m++) {
                __m256i  mp = _mm256_shuffle_epi8(mn[j],
                                  llm_k23r2_idx(2 * m, 2 * m + 1));

#pragma GCC unroll 4
                for (c = 0; c < C; c++) {
                    const llm_block_q8_K  *q8 = (const llm_block_q8_K *)
                        (const void *) (x + c * xs) + b;

                    msum[c] = _mm256_add_epi32(msum[c], _mm256_madd_epi16(
                                  mp, llm_k23r2_b4(q8->bsums + 4 * j
                                                   + 2 * m)));
                }
            }
        }
#pragma GCC unroll 2
        for (h = 0; h < 2; h++) {
#pragma GCC unroll 2
            for (u = 0; u < 2; u++) {
#pragma GCC unroll 4
                for (k = 0; k < 4; k++) {
                    const int      s = 8 * h + 2 * k + u;
                    const __m256i  ws = _mm256_shuffle_epi8(
                                            sc[s >> 2],
                                            llm_k23r2_idx(s & 3, s & 3));
                    __m256i        v[4];

#pragma GCC unroll 4
                    for (m = 0; m < 4; m++) {
                        v[m] = _mm256_and_si256(_mm256_srli_epi16(
                                   _mm256_loadu_si256((const void *)
                                       (w->qs[8 * h + 4 * u + m] + 32 * hf)),
                                   2 * k), m3);
                    }
#pragma GCC unroll 4
                    for (c = 0; c < C; c++) {
                        const int8_t  *qy = ((const llm_block_q8_K *)
                                             (const void *) (x + c * xs)
                                             + b)->qs + 16 * s;
                        __m256i        p = _mm256_maddubs_epi16(v[0],
                                               llm_k23r2_b4(qy));

#pragma GCC unroll 3
                        for (m = 1; m < 4; m++) {
                            p = _mm256_add_epi16(p, _mm256_maddubs_epi16(
                                    v[m], llm_k23r2_b4(qy + 4 * m)));
                        }
                        isum[c] = _mm256_add_epi32(isum[c],
                                                   _mm256_madd_epi16(p, ws));
                    }
                }
            }
        }
        wd = _mm256_cvtph_ps(_mm_loadu_si128((const void *)
                                             (w->d + 8 * hf)));
        wm = _mm256_cvtph_ps(_mm_loadu_si128((const void *)
                                             (w->dmin + 8 * hf)));
#pragma GCC unroll 4
        for (c = 0; c < C; c++) {
            const __m256  dx = _mm256_set1_ps(((const llm_block_q8_K *)
                                               (const void *) (x + c * xs)
                                               + b)->d);

            acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[c]),
                                     _mm256_mul_ps(wd, dx), acc[c]);
            acc[c] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(msum[c]),
                                      _mm256_mul_ps(wm, dx), acc[c]);
        }
    }
#pragma GCC unroll 4
    for (c = 0; c < C; c++) {
        _mm256_storeu_ps(y + c * ldy + 8 * hf, acc[c]);
    }
}


#define LLM_K23R2_CASE(n)                                                   \
    case n:                                                                 \
        llm_q2_K_r16_half(n, hf, nb, (const llm_block_q2_Kx16 *)            \
                              (const void *) (wp + g * 16 * ws),            \
                          (const char *) x + c0 * xs, xs,                   \
                          y + c0 * ldy + g * 16, ldy);                      \
        break;

/* Each 16-row group, half by half, against the columns in balanced
 * chunks of at most 4. */
static void
llm_gemm_q2_K_r16_avx2(int64_t n, int64_t nr, int64_t nc, const void *w,
    size_t ws, const void *x, size_t xs, float *y, size_t ldy)
{
    const char    *wp = w;
    const int64_t  nb = n / LLM_QK_K, ng = nr / 16;
    const int64_t  nch = (nc + LLM_K23R2_MAXC - 1) / LLM_K23R2_MAXC;
    int64_t        g, j, c0, c1;
    int            hf;

    for (g = 0; g < ng; g++) {
        for (hf = 0; hf < 2; hf++) {
            for (j = 0; j < nch; j++) {
                c0 = j * nc / nch;
                c1 = (j + 1) * nc / nch;
                switch (c1 - c0) {
                LLM_K23R2_CASE(1)
                LLM_K23R2_CASE(2)
                LLM_K23R2_CASE(3)
                default:
                LLM_K23R2_CASE(4)
                }
            }
        }
    }
}
#undef LLM_K23R2_CASE


LLM_GEMM_DRIVER(q2_K_avx2, LLM_QK_K, 2, 2, LLM_ROW_COLS, llm_q2_K_tile)
LLM_GEMM_DRIVER(q3_K_avx2, LLM_QK_K, 2, 2, LLM_ROW_COLS, llm_q3_K_tile)


void
llm_kernels_init_k23_avx2(llm_kernels_t *k)
{
    k->vec_dot[LLM_TYPE_Q2_K] = llm_dot_q2_K_avx2;
    k->vec_dot[LLM_TYPE_Q3_K] = llm_dot_q3_K_avx2;
    k->gemm[LLM_TYPE_Q2_K] = llm_gemm_q2_K_avx2;
    k->gemm[LLM_TYPE_Q3_K] = llm_gemm_q3_K_avx2;
    k->gemm[LLM_TYPE_Q2_K_R16] = llm_gemm_q2_K_r16_avx2;
}
