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
 */

#include <immintrin.h>

#include "kernels_common.h"


#define LLM_LEG_Q4_1  0
#define LLM_LEG_Q5_0  1
#define LLM_LEG_Q5_1  2


/* [h0 x 8 | h1 x 8] as floats. */
LLM_INLINE __m512
llm_leg_pair_scale(uint16_t h0, uint16_t h1)
{
    return _mm512_cvtph_ps(_mm256_inserti128_si256(
               _mm256_castsi128_si256(_mm_set1_epi16((short) h0)),
               _mm_set1_epi16((short) h1), 1));
}


/* [h0, h1, 0, 0] as floats. */
LLM_INLINE __m128
llm_leg_pair_h(uint16_t h0, uint16_t h1)
{
    return _mm_cvtph_ps(_mm_cvtsi32_si128((int) ((uint32_t) h0
                                                 | (uint32_t) h1 << 16)));
}


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


LLM_INLINE void
llm_leg_tile(const int kind, const int R, const int C, int64_t nb,
    const char *w, size_t ws, const char *x, size_t xs, float *y,
    size_t ldy)
{
    const __m512i  m4 = _mm512_set1_epi8(0x0f);
    const __m512i  sixteen = _mm512_set1_epi8(16);
    const int      q8_1 = kind != LLM_LEG_Q5_0;
    const size_t   bsz = llm_leg_bsz(kind);
    const size_t   xsz = q8_1 ? sizeof(llm_block_q8_1)
                              : sizeof(llm_block_q8_0);
    __m512         acc[LLM_MAXR][LLM_MAXC];
    __m128         macc[LLM_MAXR][LLM_MAXC];
    float          tail[LLM_MAXR][LLM_MAXC];
    int64_t        b;
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

    for (b = 0; b + 2 <= nb; b += 2) {
        __m512i  wq[LLM_MAXR];
        __m512   wd[LLM_MAXR];
        __m128   wm[LLM_MAXR];

#pragma GCC unroll 4
        for (r = 0; r < R; r++) {
            const char     *p = w + r * ws + b * bsz;
            const uint8_t  *qs0, *qs1;
            uint32_t        qh0, qh1;
            uint16_t        d0, d1, m0, m1;
            __m256i         t;
            __m512i         z;

            llm_leg_fields(kind, p, &qs0, &qh0, &d0, &m0);
            llm_leg_fields(kind, p + bsz, &qs1, &qh1, &d1, &m1);
            t = _mm256_inserti128_si256(_mm256_castsi128_si256(
                    _mm_loadu_si128((const void *) qs0)),
                    _mm_loadu_si128((const void *) qs1), 1);
            z = _mm512_inserti64x4(_mm512_castsi256_si512(t),
                                   _mm256_srli_epi16(t, 4), 1);
            /* lanes: lo(q0) hi(q0) lo(q1) hi(q1): element order */
            z = _mm512_and_si512(_mm512_shuffle_i64x2(z, z,
                                     _MM_SHUFFLE(3, 1, 2, 0)), m4);
            if (kind != LLM_LEG_Q4_1) {
                z = _mm512_mask_add_epi8(z, (__mmask64) qh0
                                            | (__mmask64) qh1 << 32,
                                         z, sixteen);
            }
            wq[r] = z;
            wd[r] = llm_leg_pair_scale(d0, d1);
            if (q8_1) {
                wm[r] = llm_leg_pair_h(m0, m1);
            }
            _mm_prefetch(p + LLM_PF_TILES * R * ws, _MM_HINT_T0);
        }

#pragma GCC unroll 4
        for (c = 0; c < C; c++) {
            const char  *q0 = x + c * xs + b * xsz, *q1 = q0 + xsz;
            const int    qo = q8_1 ? 4 : 2;     /* offset of qs */
            __m512i      yv, init = _mm512_setzero_si512();
            __m512       yd;
            __m128       ys = _mm_setzero_ps();
            uint16_t     h0, h1;

            yv = _mm512_inserti64x4(_mm512_castsi256_si512(
                     _mm256_loadu_si256((const void *) (q0 + qo))),
                     _mm256_loadu_si256((const void *) (q1 + qo)), 1);
            memcpy(&h0, q0, 2);
            memcpy(&h1, q1, 2);
            yd = llm_leg_pair_scale(h0, h1);
            if (q8_1) {
                memcpy(&h0, q0 + 2, 2);
                memcpy(&h1, q1 + 2, 2);
                ys = llm_leg_pair_h(h0, h1);
            } else {
                init = _mm512_sub_epi32(_mm512_setzero_si512(),
                           _mm512_dpbusd_epi32(_mm512_setzero_si512(),
                                               sixteen, yv));
            }

#pragma GCC unroll 4
            for (r = 0; r < R; r++) {
                __m512i  dp = _mm512_dpbusd_epi32(init, wq[r], yv);

                acc[r][c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dp),
                                            _mm512_mul_ps(wd[r], yd),
                                            acc[r][c]);
                if (q8_1) {
                    macc[r][c] = _mm_fmadd_ps(wm[r], ys, macc[r][c]);
                }
            }
        }
    }

    for (; b < nb; b++) {           /* odd block count: scalar */
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
            __m128  m = _mm_add_ss(macc[r][c], _mm_movehdup_ps(macc[r][c]));

            y[c * ldy + r] = _mm512_reduce_add_ps(acc[r][c])
                             + _mm_cvtss_f32(m) + tail[r][c];
        }
    }
}

#define LLM_Q4_1_TILE(R, C, ...)  llm_leg_tile(LLM_LEG_Q4_1, R, C, __VA_ARGS__)
#define LLM_Q5_0_TILE(R, C, ...)  llm_leg_tile(LLM_LEG_Q5_0, R, C, __VA_ARGS__)
#define LLM_Q5_1_TILE(R, C, ...)  llm_leg_tile(LLM_LEG_Q5_1, R, C, __VA_ARGS__)

LLM_GEMM_DRIVER(leg_q4_1, LLM_QK, 4, 4, LLM_ROW_COLS, LLM_Q4_1_TILE)
LLM_GEMM_DRIVER(leg_q5_0, LLM_QK, 4, 4, LLM_ROW_COLS, LLM_Q5_0_TILE)
LLM_GEMM_DRIVER(leg_q5_1, LLM_QK, 4, 4, LLM_ROW_COLS, LLM_Q5_1_TILE)


/* AVX-512 table entries of Q4_1, Q5_0, Q5_1 (the Q8_1 activations keep
 * the AVX2 quantizer). */
void
llm_kernels_init_legacy_avx512(llm_kernels_t *k)
{
    k->vec_dot[LLM_TYPE_Q4_1] = llm_dot_leg_q4_1;
    k->vec_dot[LLM_TYPE_Q5_0] = llm_dot_leg_q5_0;
    k->vec_dot[LLM_TYPE_Q5_1] = llm_dot_leg_q5_1;
    k->gemm[LLM_TYPE_Q4_1] = llm_gemm_leg_q4_1;
    k->gemm[LLM_TYPE_Q5_0] = llm_gemm_leg_q5_0;
    k->gemm[LLM_TYPE_Q5_1] = llm_gemm_leg_q5_1;
}
