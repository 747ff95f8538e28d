/*
 * NEON kernels (ARMv8.2 with the dot-product extension) of the legacy
 * 32-weight types Q4_1, Q5_0, Q5_1 (scalar references in quant_legacy.c).
 *
 * Tiles of R weight rows x C columns, one block at a time: the weights
 * unpacked to signed bytes in element order (Q4_1 0..15, Q5_1 0..31,
 * Q5_0 -16..15; the 5th bits by a table lookup of qh's bytes and a bit
 * test), two SDOTs per block and column give four exact partial sums,
 * converted and added with one multiply by d_w d_x; Q4_1/Q5_1's m x s is
 * a scalar multiply-add per block and result, added after the lanes' sum.
 * Each (row, column) result takes the same steps whatever the tile's
 * shape, so a gemm column is the same bit for bit as that column alone.
 */

#include <arm_neon.h>
#include <string.h>

#include "quant.h"
#include "kernels_common.h"


#define LLM_LEG_Q4_1  0
#define LLM_LEG_Q5_0  1
#define LLM_LEG_Q5_1  2


/* fp16 -> fp32 (FCVT, exact). */
LLM_INLINE float
llm_leg_h2f(uint16_t h)
{
    __fp16  f;

    memcpy(&f, &h, sizeof(f));
    return (float) f;
}


/* The 5th bits of elements 0..15 (lo) and 16..31 (hi) in place: byte j
 * is 0x10 if bit j of the little-endian qh is set. */
LLM_INLINE void
llm_leg_high_bits(const uint8_t *qh, uint8x16_t *lo, uint8x16_t *hi)
{
    static const uint8_t  idx[32] = {
        0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,
        2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3
    };
    static const uint8_t  bit[16] = {
        1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128
    };
    uint32_t              u;
    uint8x16_t            h, sel = vld1q_u8(bit), v16 = vdupq_n_u8(0x10);

    memcpy(&u, qh, 4);
    h = vreinterpretq_u8_u32(vdupq_n_u32(u));
    *lo = vandq_u8(vtstq_u8(vqtbl1q_u8(h, vld1q_u8(idx)), sel), v16);
    *hi = vandq_u8(vtstq_u8(vqtbl1q_u8(h, vld1q_u8(idx + 16)), sel), v16);
}


/* kind's block at p as signed bytes (elements 0..15, 16..31); its d
 * and m (0 for Q5_0) as floats. */
LLM_INLINE void
llm_leg_unpack(const int kind, const char *p, int8x16_t *wl, int8x16_t *wh,
    float *d, float *m)
{
    const uint8x16_t  m4 = vdupq_n_u8(0x0f);
    const uint8_t    *qs, *qh = NULL;
    uint8x16_t        v, lo, hi, bl, bh;

    if (kind == LLM_LEG_Q4_1) {
        const llm_block_q4_1  *b = (const llm_block_q4_1 *) p;

        qs = b->qs;
        *d = llm_leg_h2f(b->d);
        *m = llm_leg_h2f(b->m);
    } else if (kind == LLM_LEG_Q5_0) {
        const llm_block_q5_0  *b = (const llm_block_q5_0 *) p;

        qs = b->qs;
        qh = b->qh;
        *d = llm_leg_h2f(b->d);
        *m = 0;
    } else {
        const llm_block_q5_1  *b = (const llm_block_q5_1 *) p;

        qs = b->qs;
        qh = b->qh;
        *d = llm_leg_h2f(b->d);
        *m = llm_leg_h2f(b->m);
    }
    v = vld1q_u8(qs);
    lo = vandq_u8(v, m4);
    hi = vshrq_n_u8(v, 4);
    if (kind != LLM_LEG_Q4_1) {
        llm_leg_high_bits(qh, &bl, &bh);
        lo = vorrq_u8(lo, bl);
        hi = vorrq_u8(hi, bh);
    }
    *wl = vreinterpretq_s8_u8(lo);
    *wh = vreinterpretq_s8_u8(hi);
    if (kind == LLM_LEG_Q5_0) {
        *wl = vsubq_s8(*wl, vdupq_n_s8(16));
        *wh = vsubq_s8(*wh, vdupq_n_s8(16));
    }
}


LLM_INLINE void
llm_leg_tile(const int kind, const int R, const int C, int64_t nb,
    const char *w, size_t ws, const char *x, size_t xs, float *y,
    size_t ldy)
{
    const int     q8_1 = kind != LLM_LEG_Q5_0;
    const size_t  bsz = kind == LLM_LEG_Q4_1 ? sizeof(llm_block_q4_1)
                        : kind == LLM_LEG_Q5_0 ? sizeof(llm_block_q5_0)
                        : sizeof(llm_block_q5_1);
    const size_t  xsz = q8_1 ? sizeof(llm_block_q8_1)
                             : sizeof(llm_block_q8_0);
    float32x4_t   acc[LLM_MAXR][LLM_MAXC];
    float         macc[LLM_MAXR][LLM_MAXC];
    int8x16_t     wl[LLM_MAXR], wh[LLM_MAXR], y0, y1;
    float         dw[LLM_MAXR], mw[LLM_MAXR], dx, sx;
    int64_t       b;
    int           r, c;

#pragma GCC unroll 4
    for (r = 0; r < R; r++) {
#pragma GCC unroll 4
        for (c = 0; c < C; c++) {
            acc[r][c] = vdupq_n_f32(0.0f);
            macc[r][c] = 0;
        }
    }

    for (b = 0; b < nb; b++) {
#pragma GCC unroll 4
        for (r = 0; r < R; r++) {
            const char  *blk = w + r * ws + b * bsz;

            llm_leg_unpack(kind, blk, &wl[r], &wh[r], &dw[r], &mw[r]);
            __builtin_prefetch(blk + LLM_PF_TILES * R * ws);
        }

#pragma GCC unroll 4
        for (c = 0; c < C; c++) {
            const char  *qb = x + c * xs + b * xsz;

            if (q8_1) {
                const llm_block_q8_1  *q = (const llm_block_q8_1 *) qb;

                dx = llm_leg_h2f(q->d);
                sx = llm_leg_h2f(q->s);
                y0 = vld1q_s8(q->qs);
                y1 = vld1q_s8(q->qs + 16);
            } else {
                const llm_block_q8_0  *q = (const llm_block_q8_0 *) qb;

                dx = llm_leg_h2f(q->d);
                sx = 0;
                y0 = vld1q_s8(q->qs);
                y1 = vld1q_s8(q->qs + 16);
            }

#pragma GCC unroll 4
            for (r = 0; r < R; r++) {
                int32x4_t  p = vdotq_s32(vdotq_s32(vdupq_n_s32(0), wl[r], y0),
                                         wh[r], y1);

                acc[r][c] = vfmaq_n_f32(acc[r][c], vcvtq_f32_s32(p),
                                        dw[r] * dx);
                if (q8_1) {
                    macc[r][c] += mw[r] * sx;
                }
            }
        }
    }

#pragma GCC unroll 4
    for (r = 0; r < R; r++) {
#pragma GCC unroll 4
        for (c = 0; c < C; c++) {
            y[c * ldy + r] = vaddvq_f32(acc[r][c]) + macc[r][c];
        }
    }
}

#define LLM_Q4_1_TILE(R, C, ...)  llm_leg_tile(LLM_LEG_Q4_1, R, C, __VA_ARGS__)
#define LLM_Q5_0_TILE(R, C, ...)  llm_leg_tile(LLM_LEG_Q5_0, R, C, __VA_ARGS__)
#define LLM_Q5_1_TILE(R, C, ...)  llm_leg_tile(LLM_LEG_Q5_1, R, C, __VA_ARGS__)

LLM_GEMM_DRIVER(leg_q4_1, LLM_QK, 4, 4, LLM_ROW_COLS, LLM_Q4_1_TILE)
LLM_GEMM_DRIVER(leg_q5_0, LLM_QK, 4, 4, LLM_ROW_COLS, LLM_Q5_0_TILE)
LLM_GEMM_DRIVER(leg_q5_1, LLM_QK, 4, 4, LLM_ROW_COLS, LLM_Q5_1_TILE)


/* NEON table entries of Q4_1, Q5_0, Q5_1 (the Q8_1 activations keep
 * the scalar quantizer: once per row, off the weights' path). */
void
llm_kernels_init_legacy_neon(llm_kernels_t *k)
{
    k->vec_dot[LLM_TYPE_Q4_1] = llm_dot_leg_q4_1;
    k->vec_dot[LLM_TYPE_Q5_0] = llm_dot_leg_q5_0;
    k->vec_dot[LLM_TYPE_Q5_1] = llm_dot_leg_q5_1;
    k->gemm[LLM_TYPE_Q4_1] = llm_gemm_leg_q4_1;
    k->gemm[LLM_TYPE_Q5_0] = llm_gemm_leg_q5_0;
    k->gemm[LLM_TYPE_Q5_1] = llm_gemm_leg_q5_1;
}
