/*
 * AVX-512 (BW, VNNI) kernels of the legacy 32-weight types Q4_1, Q5_0,
 * Q5_1 (scalar references in quant_legacy.c).
 *
 * Tiles of R weight rows x C activation columns, two blocks per 512-bit
 * register: the weights unpacked to unsigned bytes in element order (the
 * 5th bits of both blocks as one 64-bit mask: a masked byte add of 16),
 * multiplied with the signed activation bytes by vpdpbusd into exact
 * int32 sums of 4; Q5_0's -16 offset is the accumulator's start,
 * -16 x sum(y), once per activation pair.  Each block's 8 lanes are
 * scaled by its own d_w d_x; Q4_1/Q5_1's m x s terms are two lanes of an
 * FMA per pair.  An odd last block runs scalar.  Each (row, column)
 * result takes the same steps whatever the tile's shape, so a gemm
 * column is the same bit for bit as that column alone.
 *
 * Below LLM_ROW_COLS columns (decode) the activation columns are
 * prepared once per call (llm_leg_gemm_pre) and each weight row streams
 * past them: at one column the tile was compute-bound on port 5 (the
 * scale broadcasts and the per-row activation work), 53-74% of a plain
 * read; see docs/BENCHMARKS.md "Kernels", 2026-12-07.
 */

#include <immintrin.h>

#include "kernels_common.h"


#define LLM_LEG_Q4_1  0
#define LLM_LEG_Q5_0  1
#define LLM_LEG_Q5_1  2


/* The block size of kind's weights. */
LLM_INLINE size_t
llm_leg_bsz(const int kind)
{
    return kind == LLM_LEG_Q4_1 ? sizeof(llm_block_q4_1)
           : kind == LLM_LEG_Q5_0 ? sizeof(llm_block_q5_0)
           : sizeof(llm_block_q5_1);
}


/* The quants, 5th bits, d and m of kind's block at p. */
LLM_INLINE void
llm_leg_fields(const int kind, const char *p, const uint8_t **qs,
    uint32_t *qh, uint16_t *d, uint16_t *m)
{
    if (kind == LLM_LEG_Q4_1) {
        const llm_block_q4_1  *b = (const llm_block_q4_1 *) p;

        *qs = b->qs;
        *qh = 0;
        *d = b->d;
        *m = b->m;
    } else if (kind == LLM_LEG_Q5_0) {
        const llm_block_q5_0  *b = (const llm_block_q5_0 *) p;

        *qs = b->qs;
        memcpy(qh, b->qh, 4);
        *d = b->d;
        *m = 0;
    } else {
        const llm_block_q5_1  *b = (const llm_block_q5_1 *) p;

        *qs = b->qs;
        memcpy(qh, b->qh, 4);
        *d = b->d;
        *m = b->m;
    }
}


/* One block's dot with one activation block, scalar: the exact integer
 * sum scaled, plus m x s for Q4_1/Q5_1 (the reference's formula). */
LLM_INLINE float
llm_leg_block1(const int kind, const char *p, const char *qb)
{
    const uint8_t  *qs;
    const int8_t   *y;
    uint32_t        qh;
    uint16_t        d, m, yd, ys = 0;
    int             si = 0, j;

    llm_leg_fields(kind, p, &qs, &qh, &d, &m);
    if (kind == LLM_LEG_Q5_0) {
        const llm_block_q8_0  *q = (const llm_block_q8_0 *) qb;

        y = q->qs;
        yd = q->d;
    } else {
        const llm_block_q8_1  *q = (const llm_block_q8_1 *) qb;

        y = q->qs;
        yd = q->d;
        ys = q->s;
    }
    for (j = 0; j < LLM_QK / 2; j++) {
        int  q0 = (qs[j] & 0xf) | ((qh >> j) & 1) << 4;
        int  q1 = (qs[j] >> 4) | ((qh >> (j + 16)) & 1) << 4;

        if (kind == LLM_LEG_Q5_0) {
            q0 -= 16;
            q1 -= 16;
        }
        si += q0 * y[j] + q1 * y[j + LLM_QK / 2];
    }
    return (llm_h2f_hw(d) * llm_h2f_hw(yd)) * si
           + llm_h2f_hw(m) * llm_h2f_hw(ys);
}


/* The 4 halves at p (d, m of a Q4_1/Q5_1 block; d and 16 bits after it
 * for Q5_0 and Q8_0) and those at p + off as [p0 p1 (p+off)0 (p+off)1],
 * floats: two broadcast loads and a blend, one conversion. */
LLM_INLINE __m128
llm_leg_pair_h4(const char *p, size_t off)
{
    __m128i  a = _mm_castps_si128(_mm_broadcast_ss((const float *) p));
    __m128i  b = _mm_castps_si128(_mm_broadcast_ss((const float *)
                                                   (p + off)));

    return _mm_cvtph_ps(_mm_blend_epi32(a, b, 0x2));
}


/*
 * One column's activation pairs prepared once per gemm call for the
 * tiles below: the quants of blocks 2i, 2i+1 as one vector, their
 * [d s d s] (Q8_1) or [d ? d ?] (Q8_0) as floats, and for Q5_0 the
 * offset's -16 x sum(y) per lane.  LLM_LEG_PREP bytes of stack hold
 * them for all the columns prepared at once.
 */
typedef struct {
    __m512i  y;
    __m256   ds;                    /* Q4_1: and [d/16 s d/16 s] */
} llm_leg_p81_t;                    /* 128 bytes */

typedef struct {
    __m512i  y;
    __m512i  init;
    __m128   ds;
} llm_leg_p80_t;                    /* 192 bytes */

#define LLM_LEG_PREP  (96 * 1024)

/* The prepared record size of kind's activations. */
LLM_INLINE size_t
llm_leg_rsz(const int kind)
{
    return kind == LLM_LEG_Q5_0 ? sizeof(llm_leg_p80_t)
                                : sizeof(llm_leg_p81_t);
}


/* The quants, [d s d s] and offset sum of the activation pair at q0. */
LLM_INLINE void
llm_leg_act_blocks(const int kind, const char *q0, __m512i *yv, __m128 *ds,
    __m512i *init)
{
    const int     q8_1 = kind != LLM_LEG_Q5_0;
    const size_t  xsz = q8_1 ? sizeof(llm_block_q8_1)
                             : sizeof(llm_block_q8_0);
    const int     qo = q8_1 ? 4 : 2;        /* offset of qs */

    *yv = _mm512_inserti64x4(_mm512_castsi256_si512(
              _mm256_loadu_si256((const void *) (q0 + qo))),
              _mm256_loadu_si256((const void *) (q0 + xsz + qo)), 1);
    *ds = llm_leg_pair_h4(q0, xsz);
    *init = q8_1 ? _mm512_setzero_si512()
                 : _mm512_sub_epi32(_mm512_setzero_si512(),
                       _mm512_dpbusd_epi32(_mm512_setzero_si512(),
                                           _mm512_set1_epi8(16), *yv));
}


/* Column c's pair i: from the blocks at x or prepared (prep: column c's
 * records at pre + c * pcs).  ds: 4 lanes, or 8 for prepared Q4_1. */
LLM_INLINE void
llm_leg_act(const int kind, const int prep, const char *pre, size_t pcs,
    int c, const char *x, size_t xs, int64_t i, __m512i *yv, __m256 *ds,
    __m512i *init)
{
    const size_t  xsz = kind != LLM_LEG_Q5_0 ? sizeof(llm_block_q8_1)
                                             : sizeof(llm_block_q8_0);

    if (!prep) {
        __m128  d4;

        llm_leg_act_blocks(kind, x + c * xs + 2 * i * xsz, yv, &d4, init);
        *ds = _mm256_castps128_ps256(d4);
    } else if (kind == LLM_LEG_Q5_0) {
        const llm_leg_p80_t  *q = (const llm_leg_p80_t *) (pre + c * pcs)
                                  + i;

        *yv = q->y;
        *ds = _mm256_castps128_ps256(q->ds);
        *init = q->init;
    } else {
        const llm_leg_p81_t  *q = (const llm_leg_p81_t *) (pre + c * pcs)
                                  + i;

        *yv = q->y;
        *ds = q->ds;
        *init = _mm512_setzero_si512();
    }
}


/*
 * R x C results.  Per block pair and row: the quants as [q0 q0 q1 q1]
 * by two 128-bit broadcast loads and a blend, the high halves shifted
 * down in lanes 1 and 3, the nibbles masked; [d m d m] as floats from
 * one conversion.  Per result: d_w d_x of both blocks from one 4-lane
 * product, spread to [d0 x 8 | d1 x 8] by one permute, and the m x s
 * FMAs in lanes 1 and 3 of the same 4 lanes.  (Each value and each
 * rounding is the same as before: the products d_w d_x and the FMA
 * chains of m s, lane by lane.)
 */
LLM_INLINE void
llm_leg_tile_x(const int kind, const int R, const int C, int64_t nb,
    const char *w, size_t ws, const char *x, size_t xs, const int prep,
    const char *pre, size_t pcs, float *y, size_t ldy)
{
    const __m512i  m4 = _mm512_set1_epi8(0x0f);
    const __m512i  sixteen = _mm512_set1_epi8(16);
    /* prepared Q4_1: the high nibbles in place (16 q), their sums
     * scaled by d/16 (exact: a power of 2 and no underflow) */
    const int      h16 = prep && kind == LLM_LEG_Q4_1;
    const __m512i  spread = h16 ? _mm512_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4,
                                                    2, 2, 2, 2, 6, 6, 6, 6)
                                : _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0,
                                                    2, 2, 2, 2, 2, 2, 2, 2);
    /* tiles of several results on the blocks: d_w and d_x each spread
     * once per row / column, one product per result (as zmm lanes, the
     * same products) */
    const int      bc = !prep && R * C > 1;
    const __m512i  nib = _mm512_set_epi64(               /* h16: lanes */
                             (long long) 0xf0f0f0f0f0f0f0f0ULL,
                             (long long) 0xf0f0f0f0f0f0f0f0ULL,
                             0x0f0f0f0f0f0f0f0fLL, 0x0f0f0f0f0f0f0f0fLL,
                             (long long) 0xf0f0f0f0f0f0f0f0ULL,
                             (long long) 0xf0f0f0f0f0f0f0f0ULL,
                             0x0f0f0f0f0f0f0f0fLL, 0x0f0f0f0f0f0f0f0fLL);
    const int      q8_1 = kind != LLM_LEG_Q5_0;
    const size_t   bsz = llm_leg_bsz(kind);
    const size_t   xsz = q8_1 ? sizeof(llm_block_q8_1)
                              : sizeof(llm_block_q8_0);
    const int      qo = kind == LLM_LEG_Q4_1 ? 4
                        : kind == LLM_LEG_Q5_0 ? 6 : 8;  /* qs offset */
    __m512         acc[LLM_MAXR][LLM_MAXC];
    __m128         macc[LLM_MAXR][LLM_MAXC];
    float          tail[LLM_MAXR][LLM_MAXC];
    int64_t        b, i;
    int            r, c;

#pragma GCC unroll 4
    for (r = 0; r < R; r++) {
#pragma GCC unroll 4
        for (c = 0; c < C; c++) {
            acc[r][c] = _mm512_setzero_ps();
            macc[r][c] = _mm_setzero_ps();
            tail[r][c] = 0;
        }
    }

    for (i = 0; i < nb / 2; i++) {
        __m512i  wq[LLM_MAXR];
        __m256   wv[LLM_MAXR];
        __m512   wd[LLM_MAXR];

#pragma GCC unroll 4
        for (r = 0; r < R; r++) {
            const char  *p = w + r * ws + 2 * i * bsz;
            __m512i      z;

            z = _mm512_mask_blend_epi64(0xf0,
                    _mm512_broadcast_i32x4(_mm_loadu_si128(
                        (const void *) (p + qo))),
                    _mm512_broadcast_i32x4(_mm_loadu_si128(
                        (const void *) (p + bsz + qo))));
            /* lanes: lo(q0) hi(q0) lo(q1) hi(q1): element order */
            if (h16) {
                z = _mm512_and_si512(z, nib);
            } else {
                z = _mm512_and_si512(_mm512_mask_srli_epi16(z, 0xff00ff00, z,
                                                            4), m4);
            }
            if (kind != LLM_LEG_Q4_1) {
                const int  ho = kind == LLM_LEG_Q5_0 ? 2 : 4;
                uint32_t   qh0, qh1;

                memcpy(&qh0, p + ho, 4);
                memcpy(&qh1, p + bsz + ho, 4);
                z = _mm512_mask_add_epi8(z, (__mmask64) qh0
                                            | (__mmask64) qh1 << 32,
                                         z, sixteen);
            }
            wq[r] = z;
            if (h16) {
                __m128i  a = _mm_castps_si128(_mm_broadcast_ss(
                                 (const float *) p));
                __m128i  bb = _mm_castps_si128(_mm_broadcast_ss(
                                  (const float *) (p + bsz)));

                /* [d m d m] twice */
                wv[r] = _mm256_cvtph_ps(_mm_blend_epi32(a, bb, 0xa));
            } else {
                wv[r] = _mm256_castps128_ps256(llm_leg_pair_h4(p, bsz));
            }
            if (bc) {
                wd[r] = _mm512_permutexvar_ps(spread,
                            _mm512_castps256_ps512(wv[r]));
            }
            _mm_prefetch(p + LLM_PF_TILES * R * ws, _MM_HINT_T0);
        }

#pragma GCC unroll 4
        for (c = 0; c < C; c++) {
            __m512i  yv, init;
            __m256   ds;
            __m512   yd = _mm512_setzero_ps();

            llm_leg_act(kind, prep, pre, pcs, c, x, xs, i, &yv, &ds, &init);
            if (bc) {
                yd = _mm512_permutexvar_ps(spread,
                         _mm512_castps256_ps512(ds));
            }

#pragma GCC unroll 4
            for (r = 0; r < R; r++) {
                __m512i  dp = _mm512_dpbusd_epi32(init, wq[r], yv);
                __m512   dd;

                if (bc) {
                    dd = _mm512_mul_ps(wd[r], yd);
                } else if (h16) {
                    dd = _mm512_castps256_ps512(_mm256_mul_ps(wv[r], ds));
                } else {
                    dd = _mm512_castps128_ps512(_mm_mul_ps(
                             _mm256_castps256_ps128(wv[r]),
                             _mm256_castps256_ps128(ds)));
                }
                if (!bc) {
                    dd = _mm512_permutexvar_ps(spread, dd);
                }

                acc[r][c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dp), dd,
                                            acc[r][c]);
                if (q8_1) {
                    macc[r][c] = _mm_fmadd_ps(_mm256_castps256_ps128(wv[r]),
                                              _mm256_castps256_ps128(ds),
                                              macc[r][c]);
                }
            }
        }
    }

    for (b = 2 * i; b < nb; b++) {  /* odd block count: scalar */
#pragma GCC unroll 4
        for (r = 0; r < R; r++) {
#pragma GCC unroll 4
            for (c = 0; c < C; c++) {
                tail[r][c] += llm_leg_block1(kind, w + r * ws + b * bsz,
                                             x + c * xs + b * xsz);
            }
        }
    }

#pragma GCC unroll 4
    for (r = 0; r < R; r++) {
#pragma GCC unroll 4
        for (c = 0; c < C; c++) {
            /* lanes 1 and 3: the m s sums of the even and odd blocks */
            __m128  m = _mm_movehdup_ps(macc[r][c]);

            m = _mm_add_ss(m, _mm_movehl_ps(m, m));
            y[c * ldy + r] = _mm512_reduce_add_ps(acc[r][c])
                             + _mm_cvtss_f32(m) + tail[r][c];
        }
    }
}


/* The np pairs of one activation column prepared. */
LLM_INLINE void
llm_leg_prep(const int kind, const char *x, int64_t np, char *pre)
{
    const size_t  xsz = kind != LLM_LEG_Q5_0 ? sizeof(llm_block_q8_1)
                                             : sizeof(llm_block_q8_0);

    for (int64_t i = 0; i < np; i++) {
        __m512i  yv, init;
        __m128   ds;

        llm_leg_act_blocks(kind, x + 2 * i * xsz, &yv, &ds, &init);
        if (kind == LLM_LEG_Q5_0) {
            llm_leg_p80_t  *q = (llm_leg_p80_t *) pre + i;

            q->y = yv;
            q->init = init;
            q->ds = ds;
        } else {
            llm_leg_p81_t  *q = (llm_leg_p81_t *) pre + i;

            q->y = yv;
            /* Q4_1: [d s d s] and [d/16 s d/16 s] (exact) */
            q->ds = kind != LLM_LEG_Q4_1 ? _mm256_castps128_ps256(ds)
                    : _mm256_insertf128_ps(_mm256_castps128_ps256(ds),
                          _mm_mul_ps(ds, _mm_setr_ps(0.0625f, 1, 0.0625f,
                                                     1)), 1);
        }
    }
}


/* One weight row against cc prepared columns (and the raw columns at x
 * for an odd last block). */
LLM_INLINE void
llm_leg_row_pre(const int kind, int cc, int64_t nb, const char *w,
    size_t ws, const char *x, size_t xs, const char *pre, size_t pcs,
    float *y, size_t ldy)
{
    switch (cc) {
    case 1:
        llm_leg_tile_x(kind, 1, 1, nb, w, ws, x, xs, 1, pre, pcs, y, ldy);
        break;
    case 2:
        llm_leg_tile_x(kind, 1, 2, nb, w, ws, x, xs, 1, pre, pcs, y, ldy);
        break;
    case 3:
        llm_leg_tile_x(kind, 1, 3, nb, w, ws, x, xs, 1, pre, pcs, y, ldy);
        break;
    default:
        llm_leg_tile_x(kind, 1, 4, nb, w, ws, x, xs, 1, pre, pcs, y, ldy);
        break;
    }
}


/*
 * Fewer than LLM_ROW_COLS columns (decode): the columns prepared once
 * (llm_leg_prep), then one weight row at a time against up to 4 of them
 * (one sequential weight stream, as LLM_GEMM_DRIVER).  When not all
 * columns fit LLM_LEG_PREP, rows in chunks of LLM_ROW_CHUNK (in L2 while
 * each group of columns passes).  Returns 0 (not done) when not even one
 * column fits, or from LLM_ROW_COLS columns on: the plain driver's.
 */
LLM_INLINE int
llm_leg_gemm_pre(const int kind, int64_t n, int64_t nr, int64_t nc,
    const char *w, size_t ws, const char *x, size_t xs, float *y,
    size_t ldy)
{
    llm_leg_p80_t  buf[LLM_LEG_PREP / sizeof(llm_leg_p80_t)];
    char          *pre = (char *) buf;
    int64_t        nb = n / LLM_QK, np = nb / 2, g, c0, c1, c, q0, q1, r;
    size_t         pcs = np * llm_leg_rsz(kind);

    if (nc >= LLM_ROW_COLS || np == 0 || pcs > sizeof(buf)) {
        return 0;
    }
    g = sizeof(buf) / pcs;          /* columns per group */
    if (g > nc) {
        g = nc;
    }
    for (q0 = 0; q0 < nr; q0 = q1) {
        q1 = g == nc ? nr
             : (q0 + LLM_ROW_CHUNK < nr ? q0 + LLM_ROW_CHUNK : nr);
        for (c0 = 0; c0 < nc; c0 = c1) {
            c1 = c0 + g < nc ? c0 + g : nc;
            for (c = c0; c < c1; c++) {
                llm_leg_prep(kind, x + c * xs, np, pre + (c - c0) * pcs);
            }
            for (r = q0; r < q1; r++) {
                for (c = c0; c < c1; c += 4) {
                    llm_leg_row_pre(kind, c1 - c < 4 ? (int) (c1 - c) : 4,
                                    nb, w + r * ws, ws, x + c * xs, xs,
                                    pre + (c - c0) * pcs, pcs,
                                    y + c * ldy + r, ldy);
                }
            }
        }
    }
    return 1;
}


#define LLM_LEG_TILE(kind, R, C, nb, w, ws, x, xs, y, ldy) \
    llm_leg_tile_x(kind, R, C, nb, w, ws, x, xs, 0, NULL, 0, y, ldy)
#define LLM_Q4_1_TILE(R, C, ...)  LLM_LEG_TILE(LLM_LEG_Q4_1, R, C, __VA_ARGS__)
#define LLM_Q5_0_TILE(R, C, ...)  LLM_LEG_TILE(LLM_LEG_Q5_0, R, C, __VA_ARGS__)
#define LLM_Q5_1_TILE(R, C, ...)  LLM_LEG_TILE(LLM_LEG_Q5_1, R, C, __VA_ARGS__)

LLM_GEMM_DRIVER(leg_q4_1_raw, LLM_QK, 4, 4, LLM_ROW_COLS, LLM_Q4_1_TILE)
LLM_GEMM_DRIVER(leg_q5_0_raw, LLM_QK, 4, 4, LLM_ROW_COLS, LLM_Q5_0_TILE)
LLM_GEMM_DRIVER(leg_q5_1_raw, LLM_QK, 4, 4, LLM_ROW_COLS, LLM_Q5_1_TILE)

/* The gemm: prepared columns below LLM_ROW_COLS (llm_leg_gemm_pre), the
 * plain driver's tiles on the blocks otherwise. */
#define LLM_LEG_GEMM(name, kind)                                            \
static void                                                                 \
llm_gemm_##name(int64_t n, int64_t nr, int64_t nc, const void *w,           \
    size_t ws, const void *x, size_t xs, float *y, size_t ldy)              \
{                                                                           \
    if (!llm_leg_gemm_pre(kind, n, nr, nc, w, ws, x, xs, y, ldy)) {         \
        llm_gemm_##name##_raw(n, nr, nc, w, ws, x, xs, y, ldy);             \
    }                                                                       \
}

LLM_LEG_GEMM(leg_q4_1, LLM_LEG_Q4_1)
LLM_LEG_GEMM(leg_q5_0, LLM_LEG_Q5_0)
LLM_LEG_GEMM(leg_q5_1, LLM_LEG_Q5_1)


/* AVX-512 table entries of Q4_1, Q5_0, Q5_1 (the Q8_1 activations keep
 * the AVX2 quantizer). */
void
llm_kernels_init_legacy_avx512(llm_kernels_t *k)
{
    k->vec_dot[LLM_TYPE_Q4_1] = llm_dot_leg_q4_1_raw;
    k->vec_dot[LLM_TYPE_Q5_0] = llm_dot_leg_q5_0_raw;
    k->vec_dot[LLM_TYPE_Q5_1] = llm_dot_leg_q5_1_raw;
    k->gemm[LLM_TYPE_Q4_1] = llm_gemm_leg_q4_1;
    k->gemm[LLM_TYPE_Q5_0] = llm_gemm_leg_q5_0;
    k->gemm[LLM_TYPE_Q5_1] = llm_gemm_leg_q5_1;
}
