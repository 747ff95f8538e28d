/*
 * AVX-512 (BW, VNNI) kernels of Q4_K_R16 and Q6_K_R16 against Q8_K: 16
 * interleaved rows, one lane per row (llm_block_q4_Kx16,
 * llm_block_q6_Kx16, kernels_common.h), and of Q4_K and Q6_K in the
 * file's layout through the same tiles.
 *
 * Qs vector 8p + 4e + m of a regrouped super-block holds in lane r the
 * qs bytes 32p + 16e + 4m.. of row r: low nibbles elements 16e + 4m..
 * of sub-block 2p, high nibbles those of sub-block 2p + 1.  Per half
 * sub-block, four vpdpbusd against the column's 4-byte broadcasts give
 * its exact sum for all 16 rows (|sum| <= 15 x 128 x 16, an int16), and
 * one vpdpwssd multiplies it by the rows' 6-bit scale (the low word of
 * each lane, a vpshufb of the unpacked scale bytes) into the
 * super-block's isum.  The mins go one vpdpwssd per sub-block: the min
 * in both words of a lane against the column's two bsums of the
 * sub-block.  Per row and super-block: acc = fma(-msum, dmin d_x, acc),
 * then acc = fma(isum, d d_x, acc), the scalar reference's steps
 * (quant_r16.c), whatever the number of columns.
 *
 * Q6_K: the 6-bit q + 32 (0..63, unsigned: the nibble from ql with qh's
 * two bits above it, unpacked once per 16 rows and shared by the
 * columns), four vpdpbusd per 16-element sub-block, the exact int32 sum
 * times the rows' int8 scale by vpmulld (it does not fit an int16), and
 * the + 32 taken off once per super-block as 32 x sum_s sc_s bsum_s (one
 * vpdpwssd per two sub-blocks); then one FMA per super-block.
 *
 * The file layout (streamed experts, a tied output, rows not in runs of
 * 16) regroups 16 rows a slice at a time on the stack (by 16 x 8 dword
 * transposes, as llm_repack_group_q4_K / _q6_K would) and runs the same
 * tile: the same bits, so a streamed expert's logits are the resident
 * run's.
 */

#include <immintrin.h>
#include <string.h>

#include "kernels_common.h"


#define LLM_K4R_MAXC   8        /* columns per tile */
#define LLM_K4R_SLICE  8        /* super-blocks regrouped at a time: 18 KB */


LLM_INLINE __m512i
llm_k4r_dpbusd(__m512i acc, __m512i u8, const int8_t *s8)
{
    __asm__("vpdpbusd %2%{1to16%}, %1, %0"
            : "+v" (acc)
            : "v" (u8), "m" (*(const int32_t (*)[1]) (const void *) s8));
    return acc;
}


LLM_INLINE __m512i
llm_k4r_dpwssd(__m512i acc, __m512i a, const int16_t *pair)
{
    __asm__("vpdpwssd %2%{1to16%}, %1, %0"
            : "+v" (acc)
            : "v" (a), "m" (*(const int32_t (*)[1]) (const void *) pair));
    return acc;
}



/* The vpshufb index taking byte i of each lane into its low byte (dup:
 * into bytes 0 and 2), zeroing the others. */
LLM_INLINE __m512i
llm_k4r_pick(int i, int dup)
{
    int  d[4];

    for (int l = 0; l < 4; l++) {
        d[l] = (int) ((unsigned) (4 * l + i) | 0x8000u
                      | (dup ? (unsigned) (4 * l + i) << 16 : 0x800000u)
                      | 0x80000000u);
    }
    return _mm512_broadcast_i32x4(_mm_setr_epi32(d[0], d[1], d[2], d[3]));
}


/*
 * 16 rows x C columns over nb regrouped super-blocks; x at the first
 * one's column blocks (xs apart); y[c * ldy + r] accumulated into unless
 * first.
 */
LLM_INLINE void
llm_q4_K_r16_tile(const int C, int64_t nb, const llm_block_q4_Kx16 *w,
    const char *x, size_t xs, int first, float *y, size_t ldy)
{
    const __m512i  m4 = _mm512_set1_epi8(0x0f);
    const __m512i  m6 = _mm512_set1_epi8(0x3f);
    const __m512i  m30 = _mm512_set1_epi8(0x30);
    __m512         acc[LLM_K4R_MAXC];
    int64_t        b;
    int            c, p, e, m, j;

#pragma GCC unroll 8
    for (c = 0; c < C; c++) {
        acc[c] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(y + c * ldy);
    }

    for (b = 0; b < nb; b++, w++) {
        const __m512i  a0 = _mm512_loadu_si512((const void *) w->sc[0]);
        const __m512i  a1 = _mm512_loadu_si512((const void *) w->sc[1]);
        const __m512i  a2 = _mm512_loadu_si512((const void *) w->sc[2]);
        __m512i        sc[2], mn[2], isum[LLM_K4R_MAXC];
        __m512         wd, wm;

        /* the 6-bit scales and mins of sub-blocks 4h + i in byte i */
        sc[0] = _mm512_and_si512(a0, m6);
        mn[0] = _mm512_and_si512(a1, m6);
        sc[1] = _mm512_or_si512(_mm512_and_si512(a2, m4),
                    _mm512_and_si512(_mm512_srli_epi16(a0, 2), m30));
        mn[1] = _mm512_or_si512(
                    _mm512_and_si512(_mm512_srli_epi16(a2, 4), m4),
                    _mm512_and_si512(_mm512_srli_epi16(a1, 2), m30));

        wm = _mm512_cvtph_ps(_mm256_loadu_si256((const void *) w->dmin));
        wd = _mm512_cvtph_ps(_mm256_loadu_si256((const void *) w->d));

        /* the mins: msum, then its FMA */
#pragma GCC unroll 8
        for (c = 0; c < C; c++) {
            isum[c] = _mm512_setzero_si512();
        }
#pragma GCC unroll 8
        for (j = 0; j < 8; j++) {
            const __m512i  mj = _mm512_shuffle_epi8(mn[j >> 2],
                                                    llm_k4r_pick(j & 3, 1));

#pragma GCC unroll 8
            for (c = 0; c < C; c++) {
                const llm_block_q8_K  *q8 = (const llm_block_q8_K *)
                    (const void *) (x + c * xs) + b;

                isum[c] = llm_k4r_dpwssd(isum[c], mj, q8->bsums + 2 * j);
            }
        }
#pragma GCC unroll 8
        for (c = 0; c < C; c++) {
            const __m512  dx = _mm512_set1_ps(((const llm_block_q8_K *)
                                               (const void *) (x + c * xs)
                                               + b)->d);

            acc[c] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(isum[c]),
                                      _mm512_mul_ps(wm, dx), acc[c]);
            isum[c] = _mm512_setzero_si512();
        }

        for (p = 0; p < 4; p++) {
            const __m512i  s0 = _mm512_shuffle_epi8(sc[p >> 1],
                                    llm_k4r_pick(2 * (p & 1), 0));
            const __m512i  s1 = _mm512_shuffle_epi8(sc[p >> 1],
                                    llm_k4r_pick(2 * (p & 1) + 1, 0));

            LLM_PREFETCH_NEXT(w, p, 4);

#pragma GCC unroll 2
            for (e = 0; e < 2; e++) {
                __m512i  lo[4], hi[4];

#pragma GCC unroll 4
                for (m = 0; m < 4; m++) {
                    __m512i  v = _mm512_loadu_si512(
                                     (const void *) w->qs[8 * p + 4 * e + m]);

                    lo[m] = _mm512_and_si512(v, m4);
                    hi[m] = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
                }
#pragma GCC unroll 8
                for (c = 0; c < C; c++) {
                    const int8_t  *qy = ((const llm_block_q8_K *)
                                         (const void *) (x + c * xs)
                                         + b)->qs + 64 * p + 16 * e;
                    __m512i        t0 = _mm512_setzero_si512();
                    __m512i        t1 = _mm512_setzero_si512();

#pragma GCC unroll 4
                    for (m = 0; m < 4; m++) {
                        t0 = llm_k4r_dpbusd(t0, lo[m], qy + 4 * m);
                        t1 = llm_k4r_dpbusd(t1, hi[m], qy + 32 + 4 * m);
                    }
                    isum[c] = _mm512_dpwssd_epi32(isum[c], t0, s0);
                    isum[c] = _mm512_dpwssd_epi32(isum[c], t1, s1);
                }
            }
        }
#pragma GCC unroll 8
        for (c = 0; c < C; c++) {
            const __m512  dx = _mm512_set1_ps(((const llm_block_q8_K *)
                                               (const void *) (x + c * xs)
                                               + b)->d);

            acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[c]),
                                     _mm512_mul_ps(wd, dx), acc[c]);
        }
    }

#pragma GCC unroll 8
    for (c = 0; c < C; c++) {
        _mm512_storeu_ps(y + c * ldy, acc[c]);
    }
}


/* ---- Q6_K_R16 ---------------------------------------------------------- */

/*
 * From the 16 rows' scale bytes v (lane r: scales 4j..4j+3), the words
 * [sc_4j+2p, sc_4j+2p+1] (sign-extended) of each lane.
 */
LLM_INLINE __m512i
llm_k6r_pair(__m512i v, int p)
{
    const __m512i  ev = _mm512_srai_epi16(_mm512_slli_epi16(v, 8), 8);
    const __m512i  od = _mm512_srai_epi16(v, 8);

    return p == 0
           ? _mm512_mask_blend_epi16(0xaaaaaaaa, ev,
                                     _mm512_slli_epi32(od, 16))
           : _mm512_mask_blend_epi16(0xaaaaaaaa, _mm512_srli_epi32(ev, 16),
                                     od);
}


/* Byte i of each lane of v, sign-extended to the lane. */
LLM_INLINE __m512i
llm_k6r_scale(__m512i v, int i)
{
    return _mm512_srai_epi32(_mm512_slli_epi32(v, 24 - 8 * i), 24);
}


LLM_INLINE void
llm_q6_K_r16_tile(const int C, int64_t nb, const llm_block_q6_Kx16 *w,
    const char *x, size_t xs, int first, float *y, size_t ldy)
{
    const __m512i  m4 = _mm512_set1_epi8(0x0f);
    const __m512i  m30 = _mm512_set1_epi8(0x30);
    __m512         acc[LLM_K4R_MAXC];
    int64_t        b;
    int            c, h, u, g, k, j, p;

#pragma GCC unroll 8
    for (c = 0; c < C; c++) {
        acc[c] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(y + c * ldy);
    }

    for (b = 0; b < nb; b++, w++) {
        __m512i  isum[LLM_K4R_MAXC];
        __m512   wd = _mm512_cvtph_ps(_mm256_loadu_si256((const void *)
                                                         w->d));

        /* the offset: sum_s sc_s bsum_s, two sub-blocks a vpdpwssd;
         * the sum starts at -32 x it */
#pragma GCC unroll 8
        for (c = 0; c < C; c++) {
            isum[c] = _mm512_setzero_si512();
        }
#pragma GCC unroll 4
        for (j = 0; j < 4; j++) {
            const __m512i  v = _mm512_loadu_si512((const void *) w->sc[j]);

#pragma GCC unroll 2
            for (p = 0; p < 2; p++) {
                const __m512i  sp = llm_k6r_pair(v, p);

#pragma GCC unroll 8
                for (c = 0; c < C; c++) {
                    const llm_block_q8_K  *q8 = (const llm_block_q8_K *)
                        (const void *) (x + c * xs) + b;

                    isum[c] = llm_k4r_dpwssd(isum[c], sp,
                                             q8->bsums + 4 * j + 2 * p);
                }
            }
        }
#pragma GCC unroll 8
        for (c = 0; c < C; c++) {
            isum[c] = _mm512_sub_epi32(_mm512_setzero_si512(),
                                       _mm512_slli_epi32(isum[c], 5));
        }

        /* sub-block s = 8h + 2g + u: elements 128h + 32g + 16u + 4k..
         * are nibble g >> 1 of w->g[2h + u].ql[4 (g & 1) + k] and bits
         * 2g of its qh[k]; the groups in memory order */
        for (h = 0; h < 2; h++) {
            for (u = 0; u < 2; u++) {
#pragma GCC unroll 4
                for (g = 0; g < 4; g++) {
                    const int      s = 8 * h + 2 * g + u;
                    const __m512i  sc = llm_k6r_scale(_mm512_loadu_si512(
                                            (const void *) w->sc[s >> 2]),
                                            s & 3);
                    __m512i        q[4];

                    /* a sixteenth a step (a quarter per (h, u): 2-7% less) */
                    LLM_PREFETCH_NEXT(w, 8 * h + 4 * u + g, 16);

#pragma GCC unroll 4
                    for (k = 0; k < 4; k++) {
                        __m512i  l = _mm512_loadu_si512((const void *)
                                         w->g[2 * h + u].ql[4 * (g & 1)
                                                            + k]);
                        __m512i  hb = _mm512_loadu_si512((const void *)
                                          w->g[2 * h + u].qh[k]);

                        l = g >> 1 ? _mm512_srli_epi16(l, 4) : l;
                        hb = g < 2 ? _mm512_slli_epi16(hb, 4 - 2 * g)
                             : g == 2 ? hb : _mm512_srli_epi16(hb, 2);
                        q[k] = _mm512_or_si512(_mm512_and_si512(l, m4),
                                               _mm512_and_si512(hb, m30));
                    }
#pragma GCC unroll 8
                    for (c = 0; c < C; c++) {
                        const int8_t  *qy = ((const llm_block_q8_K *)
                                             (const void *) (x + c * xs)
                                             + b)->qs + 16 * s;
                        __m512i        t = _mm512_setzero_si512();

#pragma GCC unroll 4
                        for (k = 0; k < 4; k++) {
                            t = llm_k4r_dpbusd(t, q[k], qy + 4 * k);
                        }
                        isum[c] = _mm512_add_epi32(isum[c],
                                      _mm512_mullo_epi32(t, sc));
                    }
                }
            }
        }
#pragma GCC unroll 8
        for (c = 0; c < C; c++) {
            const __m512  dx = _mm512_set1_ps(((const llm_block_q8_K *)
                                               (const void *) (x + c * xs)
                                               + b)->d);

            acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[c]),
                                     _mm512_mul_ps(wd, dx), acc[c]);
        }
    }

#pragma GCC unroll 8
    for (c = 0; c < C; c++) {
        _mm512_storeu_ps(y + c * ldy, acc[c]);
    }
}


#define LLM_KR_Q4_K  4
#define LLM_KR_Q6_K  6

#define LLM_K4R_CASE(n)                                                     \
    case n:                                                                 \
        if (kind == LLM_KR_Q4_K) {                                          \
            llm_q4_K_r16_tile(n, nbs, wg, xc, xs, first, yc, ldy);          \
        } else {                                                            \
            llm_q6_K_r16_tile(n, nbs, wg, xc, xs, first, yc, ldy);          \
        }                                                                   \
        break;

/* One 16-row group of kind (nbs super-blocks at wg, from super-block b0
 * of the columns) against nc columns in balanced chunks of at most
 * LLM_K4R_MAXC; y[c * ldy + r] accumulated into unless first. */
LLM_INLINE void
llm_kr16_group(const int kind, int64_t b0, int64_t nbs, const void *wg,
    int64_t nc, const char *x, size_t xs, int first, float *y, size_t ldy)
{
    const int64_t  nch = (nc + LLM_K4R_MAXC - 1) / LLM_K4R_MAXC;
    int64_t        j, c0, c1;

    for (j = 0; j < nch; j++) {
        const char  *xc;
        float       *yc;

        c0 = j * nc / nch;
        c1 = (j + 1) * nc / nch;
        xc = x + c0 * xs + b0 * sizeof(llm_block_q8_K);
        yc = y + c0 * ldy;
        switch (c1 - c0) {
        LLM_K4R_CASE(1)
        LLM_K4R_CASE(2)
        LLM_K4R_CASE(3)
        LLM_K4R_CASE(4)
        LLM_K4R_CASE(5)
        LLM_K4R_CASE(6)
        LLM_K4R_CASE(7)
        default:
        LLM_K4R_CASE(8)
        }
    }
}
#undef LLM_K4R_CASE


/* Each 16-row group against all columns (its rows stay in L1/L2 while
 * the column chunks pass). */
LLM_INLINE void
llm_gemm_kr16(const int kind, int64_t n, int64_t nr, int64_t nc,
    const void *w, size_t ws, const void *x, size_t xs, float *y, size_t ldy)
{
    const int64_t  nb = n / LLM_QK_K, ng = nr / 16;

    for (int64_t g = 0; g < ng; g++) {
        llm_kr16_group(kind, 0, nb, (const char *) w + g * 16 * ws, nc, x,
                       xs, 1, y + g * 16, ldy);
    }
}


/*
 * Bytes [0, 4 nd) (nd <= 8 dwords) of the 16 rows p + r ws (zeros for r
 * >= R) transposed: dword i of row r to lane r of vector i, vectors 0..3
 * to o0[0..], 4..7 to o1[0..].  Two rows a vector, then three steps of
 * two-source dword permutes (the Q8_0 regrouping's, kernels_avx512.c).
 */
LLM_INLINE void
llm_kr16_tr(const char *p, size_t ws, int R, int nd, uint8_t (*o0)[64],
    uint8_t (*o1)[64])
{
    const __m512i    i10 = _mm512_set_epi32(27, 19, 11, 3, 26, 18, 10, 2,
                                            25, 17, 9, 1, 24, 16, 8, 0);
    const __m512i    i11 = _mm512_set_epi32(31, 23, 15, 7, 30, 22, 14, 6,
                                            29, 21, 13, 5, 28, 20, 12, 4);
    const __m512i    i20 = _mm512_set_epi32(23, 22, 21, 20, 7, 6, 5, 4,
                                            19, 18, 17, 16, 3, 2, 1, 0);
    const __m512i    i21 = _mm512_set_epi32(31, 30, 29, 28, 15, 14, 13, 12,
                                            27, 26, 25, 24, 11, 10, 9, 8);
    const __mmask8   m = (__mmask8) ((1u << nd) - 1);
    __m512i          pk[8], sv[8], tv[8], ov[8];
    int              k, h;

#pragma GCC unroll 8
    for (k = 0; k < 8; k++) {
        __m256i  a = _mm256_setzero_si256(), c = a;

        if (2 * k < R) {
            a = _mm256_maskz_loadu_epi32(m, p + 2 * k * ws);
        }
        if (2 * k + 1 < R) {
            c = _mm256_maskz_loadu_epi32(m, p + (2 * k + 1) * ws);
        }
        pk[k] = _mm512_inserti64x4(_mm512_castsi256_si512(a), c, 1);
    }
#pragma GCC unroll 4
    for (k = 0; k < 4; k++) {
        sv[2 * k] = _mm512_permutex2var_epi32(pk[2 * k], i10, pk[2 * k + 1]);
        sv[2 * k + 1] = _mm512_permutex2var_epi32(pk[2 * k], i11,
                                                  pk[2 * k + 1]);
    }
#pragma GCC unroll 2
    for (k = 0; k < 2; k++) {
#pragma GCC unroll 2
        for (h = 0; h < 2; h++) {
            __m512i  a = sv[4 * k + h], c = sv[4 * k + 2 + h];

            tv[4 * h + 2 * k] = _mm512_permutex2var_epi32(a, i20, c);
            tv[4 * h + 2 * k + 1] = _mm512_permutex2var_epi32(a, i21, c);
        }
    }
#pragma GCC unroll 2
    for (h = 0; h < 2; h++) {
#pragma GCC unroll 2
        for (k = 0; k < 2; k++) {
            __m512i  a = tv[4 * h + k], c = tv[4 * h + 2 + k];

            ov[4 * h + 2 * k] = _mm512_shuffle_i64x2(a, c, 0x44);
            ov[4 * h + 2 * k + 1] = _mm512_shuffle_i64x2(a, c, 0xee);
        }
    }
    for (k = 0; k < nd; k++) {
        _mm512_storeu_si512((void *) (k < 4 ? o0[k] : o1[k - 4]), ov[k]);
    }
}


/* The 16 rows' 16-bit words at p + r ws (4 readable bytes there), as
 * words (hi: the upper two of the four bytes). */
LLM_INLINE __m256i
llm_kr16_words(const char *p, size_t ws, int R, int hi)
{
    const __m512i  rows = _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13,
                              12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                              _mm512_set1_epi32((int) ws));
    __m512i        v = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(),
                           (__mmask16) ((1u << R) - 1), rows,
                           (const void *) p, 1);

    return _mm512_cvtepi32_epi16(hi ? _mm512_srli_epi32(v, 16) : v);
}


/* Super-blocks [b0, b0 + nb) of R <= 16 Q4_K rows (ws apart) regrouped
 * into o (llm_repack_group_q4_K's result, by vector transposes). */
LLM_INLINE void
llm_kr16_regroup_q4_K(const char *w, size_t ws, int R, int64_t b0,
    int64_t nb, llm_block_q4_Kx16 *o)
{
    for (int64_t b = 0; b < nb; b++, o++) {
        const char  *p = w + (b0 + b) * sizeof(llm_block_q4_K);

        _mm256_storeu_si256((void *) o->d, llm_kr16_words(p, ws, R, 0));
        _mm256_storeu_si256((void *) o->dmin, llm_kr16_words(p, ws, R, 1));
        llm_kr16_tr(p + 4, ws, R, 3, o->sc, NULL);
        for (int c = 0; c < 4; c++) {
            llm_kr16_tr(p + 16 + 32 * c, ws, R, 8, o->qs + 8 * c,
                        o->qs + 8 * c + 4);
        }
    }
}


/* The same for Q6_K (llm_repack_group_q6_K's result). */
LLM_INLINE void
llm_kr16_regroup_q6_K(const char *w, size_t ws, int R, int64_t b0,
    int64_t nb, llm_block_q6_Kx16 *o)
{
    for (int64_t b = 0; b < nb; b++, o++) {
        const char  *p = w + (b0 + b) * sizeof(llm_block_q6_K);

        /* d is the block's last two bytes: the four from 206 */
        _mm256_storeu_si256((void *) o->d, llm_kr16_words(p + 206, ws, R,
                                                          1));
        llm_kr16_tr(p + 192, ws, R, 4, o->sc, NULL);
        for (int h = 0; h < 2; h++) {
            /* qh bytes 32h + 16u + 4k: g[2h + u].qh[k] */
            llm_kr16_tr(p + 128 + 32 * h, ws, R, 8, o->g[2 * h].qh,
                        o->g[2 * h + 1].qh);
            for (int a = 0; a < 2; a++) {
                /* ql bytes 64h + 32a + 16u + 4k: g[2h + u].ql[4a + k] */
                llm_kr16_tr(p + 64 * h + 32 * a, ws, R, 8,
                            o->g[2 * h].ql + 4 * a,
                            o->g[2 * h + 1].ql + 4 * a);
            }
        }
    }
}


/*
 * The file layout: each 16 rows (the last run padded with zero rows)
 * regrouped LLM_K4R_SLICE super-blocks at a time, then the tile; the last
 * run's results through a 16-row buffer.
 */
LLM_INLINE void
llm_gemm_kr16_file(const int kind, int64_t n, int64_t nr, int64_t nc,
    const void *w, size_t ws, const void *x, size_t xs, float *y, size_t ldy)
{
    /* the larger of the two super-block groups: Q6_K's */
    llm_block_q6_Kx16  buf[LLM_K4R_SLICE];
    const int64_t      nb = n / LLM_QK_K, ng = (nr + 15) / 16;
    int64_t            g, b0, nbs, c, c0, cn;

    for (g = 0; g < ng; g++) {
        const int    R = nr - 16 * g < 16 ? (int) (nr - 16 * g) : 16;
        const char  *wg = (const char *) w + g * 16 * ws;

        /* a part run: 16 columns at a time through part */
        for (c0 = 0; c0 < nc; c0 += R == 16 ? nc : 16) {
            float  part[16 * 16];

            cn = R == 16 ? nc : (nc - c0 < 16 ? nc - c0 : 16);
            for (b0 = 0; b0 < nb; b0 += nbs) {
                nbs = nb - b0 < LLM_K4R_SLICE ? nb - b0 : LLM_K4R_SLICE;
                if (kind == LLM_KR_Q4_K) {
                    llm_kr16_regroup_q4_K(wg, ws, R, b0, nbs,
                                          (llm_block_q4_Kx16 *) (void *)
                                          buf);
                } else {
                    llm_kr16_regroup_q6_K(wg, ws, R, b0, nbs, buf);
                }
                if (R == 16) {
                    llm_kr16_group(kind, b0, nbs, buf, cn, x, xs, b0 == 0,
                                   y + g * 16, ldy);
                } else {
                    llm_kr16_group(kind, b0, nbs, buf, cn,
                                   (const char *) x + c0 * xs, xs, b0 == 0,
                                   part, 16);
                }
            }
            if (R < 16) {
                for (c = 0; c < cn; c++) {
                    memcpy(y + (c0 + c) * ldy + g * 16, part + 16 * c,
                           R * sizeof(float));
                }
            }
        }
    }
}


static void
llm_gemm_q4_K_r16(int64_t n, int64_t nr, int64_t nc, const void *w,
    size_t ws, const void *x, size_t xs, float *y, size_t ldy)
{
    llm_gemm_kr16(LLM_KR_Q4_K, n, nr, nc, w, ws, x, xs, y, ldy);
}


static void
llm_gemm_q6_K_r16(int64_t n, int64_t nr, int64_t nc, const void *w,
    size_t ws, const void *x, size_t xs, float *y, size_t ldy)
{
    llm_gemm_kr16(LLM_KR_Q6_K, n, nr, nc, w, ws, x, xs, y, ldy);
}


static void
llm_gemm_q4_K_file(int64_t n, int64_t nr, int64_t nc, const void *w,
    size_t ws, const void *x, size_t xs, float *y, size_t ldy)
{
    llm_gemm_kr16_file(LLM_KR_Q4_K, n, nr, nc, w, ws, x, xs, y, ldy);
}


static void
llm_gemm_q6_K_file(int64_t n, int64_t nr, int64_t nc, const void *w,
    size_t ws, const void *x, size_t xs, float *y, size_t ldy)
{
    llm_gemm_kr16_file(LLM_KR_Q6_K, n, nr, nc, w, ws, x, xs, y, ldy);
}


/* One row, one column: the same steps (the same bits as a gemm row). */
static void
llm_dot_q4_K_r16(int64_t n, float *s, const void *w, const void *x)
{
    llm_gemm_q4_K_file(n, 1, 1, w, 0, x, 0, s, 1);
}


static void
llm_dot_q6_K_r16(int64_t n, float *s, const void *w, const void *x)
{
    llm_gemm_q6_K_file(n, 1, 1, w, 0, x, 0, s, 1);
}


void
llm_kernels_init_kr16_avx512(llm_kernels_t *k)
{
    k->vec_dot[LLM_TYPE_Q4_K] = llm_dot_q4_K_r16;
    k->gemm[LLM_TYPE_Q4_K] = llm_gemm_q4_K_file;
    k->gemm[LLM_TYPE_Q4_K_R16] = llm_gemm_q4_K_r16;
    k->vec_dot[LLM_TYPE_Q6_K] = llm_dot_q6_K_r16;
    k->gemm[LLM_TYPE_Q6_K] = llm_gemm_q6_K_file;
    k->gemm[LLM_TYPE_Q6_K_R16] = llm_gemm_q6_K_r16;
}
