/*
 * AVX2 kernels of the legacy 32-weight types Q4_1, Q5_0, Q5_1 (their
 * scalar references are in quant_legacy.c) and the Q8_1 activations.
 *
 * One tile shape for all three: R weight rows x C activation columns,
 * one block at a time.  The weights are unpacked to unsigned bytes (q in
 * 0..15 or 0..31) and multiplied with the signed activation bytes by
 * vpmaddubsw (a pair sum is at most 2 x 31 x 128, no saturation), then
 * widened by vpmaddwd; Q5_0's -16 offset is removed with 16 x sum(y),
 * computed once per activation block.  The block's integer sum is exact
 * and scaled once; Q4_1/Q5_1's m x s term is a scalar FMA per block and
 * result, added after the vector sum.  Each (row, column) result takes
 * the same steps whatever the tile's shape, so a gemm column is the same
 * bit for bit as that column alone (LLM_GEMM_DRIVER).
 *
 * Up to LLM_LEG_COLS columns (decode) the activation columns are
 * prepared once per call (llm_leg_gemm_pre) and two weight rows at a
 * time stream past them: at one column the plain tile was compute-bound
 * (45-50% of a plain read) on the per-block scale conversions, inserts
 * and activation work; see docs/BENCHMARKS.md "Kernels", 2026-12-07.
 */

#include <immintrin.h>

#include "kernels_common.h"


#define LLM_LEG_Q4_1  0
#define LLM_LEG_Q5_0  1
#define LLM_LEG_Q5_1  2


/* An fp16 value in lane 0 of a vector (F16C). */
LLM_INLINE __m128
llm_leg_h2f_ss(uint16_t h)
{
    return _mm_cvtph_ps(_mm_cvtsi32_si128(h));
}


/* The 32 bits at qh as bytes: byte j is 0x10 if bit j is set, else 0
 * (the 5th bit of element j, in place). */
LLM_INLINE __m256i
llm_leg_high_bits(const uint8_t *qh)
{
    uint32_t  u;
    __m256i   v, sel;

    memcpy(&u, qh, 4);
    /* byte j of v: byte j / 8 of u */
    v = _mm256_shuffle_epi8(_mm256_set1_epi32((int) u),
                            _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0,
                                             1, 1, 1, 1, 1, 1, 1, 1,
                                             2, 2, 2, 2, 2, 2, 2, 2,
                                             3, 3, 3, 3, 3, 3, 3, 3));
    /* byte j: bit j % 8 alone */
    sel = _mm256_set1_epi64x(0x8040201008040201LL);
    v = _mm256_cmpeq_epi8(_mm256_and_si256(v, sel), sel);
    return _mm256_and_si256(v, _mm256_set1_epi8(0x10));
}


/* The 32 unsigned quants of the weight block at p (kind's layout), in
 * element order, with its scale d and (Q4_1, Q5_1) its m. */
LLM_INLINE __m256i
llm_leg_unpack(const int kind, const char *p, uint16_t *d, uint16_t *m)
{
    const __m256i   m4 = _mm256_set1_epi8(0x0f);
    const uint8_t  *qs, *qh = NULL;
    __m128i         t;
    __m256i         q;

    if (kind == LLM_LEG_Q4_1) {
        const llm_block_q4_1  *b = (const llm_block_q4_1 *) p;

        *d = b->d;
        *m = b->m;
        qs = b->qs;
    } else if (kind == LLM_LEG_Q5_0) {
        const llm_block_q5_0  *b = (const llm_block_q5_0 *) p;

        *d = b->d;
        *m = 0;
        qs = b->qs;
        qh = b->qh;
    } else {
        const llm_block_q5_1  *b = (const llm_block_q5_1 *) p;

        *d = b->d;
        *m = b->m;
        qs = b->qs;
        qh = b->qh;
    }
    t = _mm_loadu_si128((const void *) qs);
    q = _mm256_and_si256(m4, _mm256_set_m128i(_mm_srli_epi16(t, 4), t));
    if (kind != LLM_LEG_Q4_1) {
        q = _mm256_or_si256(q, llm_leg_high_bits(qh));
    }
    return q;
}


/*
 * R x C results of kind's weights (rows at w, ws bytes apart) against Q8_1
 * (Q4_1, Q5_1) or Q8_0 (Q5_0) columns (at x, xs bytes apart), nb blocks.
 */
LLM_INLINE void
llm_leg_tile(const int kind, const int R, const int C, int64_t nb,
    const char *w, size_t ws, const char *x, size_t xs, float *y,
    size_t ldy)
{
    const __m256i  ones = _mm256_set1_epi16(1);
    const __m256i  sixteen = _mm256_set1_epi8(16);
    const int      q8_1 = kind != LLM_LEG_Q5_0;
    const size_t   bsz = kind == LLM_LEG_Q4_1 ? sizeof(llm_block_q4_1)
                         : kind == LLM_LEG_Q5_0 ? sizeof(llm_block_q5_0)
                         : sizeof(llm_block_q5_1);
    const size_t   xsz = q8_1 ? sizeof(llm_block_q8_1)
                              : sizeof(llm_block_q8_0);
    __m256         acc[LLM_MAXR][LLM_MAXC];
    __m128         macc[LLM_MAXR][LLM_MAXC];
    int64_t        b;
    int            r, c;

#pragma GCC unroll 4
    for (r = 0; r < R; r++) {
#pragma GCC unroll 4
        for (c = 0; c < C; c++) {
            acc[r][c] = _mm256_setzero_ps();
            macc[r][c] = _mm_setzero_ps();
        }
    }

    for (b = 0; b < nb; b++) {
        __m256i   wq[LLM_MAXR];
        __m256    wd[LLM_MAXR];
        __m128    wm[LLM_MAXR];

#pragma GCC unroll 4
        for (r = 0; r < R; r++) {
            const char  *blk = w + r * ws + b * bsz;
            uint16_t     d, m;

            wq[r] = llm_leg_unpack(kind, blk, &d, &m);
            wd[r] = _mm256_cvtph_ps(_mm_set1_epi16((short) d));
            wm[r] = llm_leg_h2f_ss(m);
            _mm_prefetch(blk + LLM_PF_TILES * R * ws, _MM_HINT_T0);
        }

#pragma GCC unroll 4
        for (c = 0; c < C; c++) {
            const char  *qb = x + c * xs + b * xsz;
            uint16_t     yh, sh = 0;
            __m256i      yv, off = _mm256_setzero_si256();
            __m256       yd;

            if (q8_1) {
                const llm_block_q8_1  *q = (const llm_block_q8_1 *) qb;

                yh = q->d;
                sh = q->s;
                yv = _mm256_loadu_si256((const void *) q->qs);
            } else {
                const llm_block_q8_0  *q = (const llm_block_q8_0 *) qb;

                yh = q->d;
                yv = _mm256_loadu_si256((const void *) q->qs);
                off = _mm256_maddubs_epi16(sixteen, yv);
            }
            yd = _mm256_cvtph_ps(_mm_set1_epi16((short) yh));

#pragma GCC unroll 4
            for (r = 0; r < R; r++) {
                __m256i  p16 = _mm256_maddubs_epi16(wq[r], yv);

                if (!q8_1) {
                    p16 = _mm256_sub_epi16(p16, off);
                }
                acc[r][c] = _mm256_fmadd_ps(
                    _mm256_cvtepi32_ps(_mm256_madd_epi16(p16, ones)),
                    _mm256_mul_ps(wd[r], yd), acc[r][c]);
                if (q8_1) {
                    macc[r][c] = _mm_fmadd_ss(wm[r], llm_leg_h2f_ss(sh),
                                              macc[r][c]);
                }
            }
        }
    }

#pragma GCC unroll 4
    for (r = 0; r < R; r++) {
#pragma GCC unroll 4
        for (c = 0; c < C; c++) {
            y[c * ldy + r] = llm_hsum256(acc[r][c])
                             + _mm_cvtss_f32(macc[r][c]);
        }
    }
}

#define LLM_Q4_1_TILE(R, C, ...)  llm_leg_tile(LLM_LEG_Q4_1, R, C, __VA_ARGS__)
#define LLM_Q5_0_TILE(R, C, ...)  llm_leg_tile(LLM_LEG_Q5_0, R, C, __VA_ARGS__)
#define LLM_Q5_1_TILE(R, C, ...)  llm_leg_tile(LLM_LEG_Q5_1, R, C, __VA_ARGS__)

LLM_GEMM_DRIVER(leg_q4_1_raw, LLM_QK, 2, 2, 2, LLM_Q4_1_TILE)
LLM_GEMM_DRIVER(leg_q5_0_raw, LLM_QK, 2, 2, 2, LLM_Q5_0_TILE)
LLM_GEMM_DRIVER(leg_q5_1_raw, LLM_QK, 2, 2, 2, LLM_Q5_1_TILE)


/*
 * The activation columns (decode) prepared once per gemm call: per block
 * the quants, [d_x s d_x s] as floats (Q8_0: [d_x 0 d_x 0]), and for
 * Q5_0 the offset 16 x (y0 + y1) per byte pair.  LLM_LEG_PREP bytes of
 * stack hold them.
 */
typedef struct {
    __m256i  y;
    __m256i  off;                   /* Q5_0 only */
    __m128   ds;
} llm_leg_pre_t;

#define LLM_LEG_PREP  (96 * 1024)


/* The nb blocks of one activation column prepared. */
LLM_INLINE void
llm_leg_prep(const int kind, const char *x, int64_t nb, llm_leg_pre_t *pre)
{
    const __m256i  sixteen = _mm256_set1_epi8(16);
    int64_t        b;

    for (b = 0; b < nb; b++) {
        if (kind != LLM_LEG_Q5_0) {
            const llm_block_q8_1  *q = (const llm_block_q8_1 *) x + b;

            pre[b].y = _mm256_loadu_si256((const void *) q->qs);
            pre[b].off = _mm256_setzero_si256();
            pre[b].ds = _mm_cvtph_ps(_mm_set1_epi32(
                            (int) ((uint32_t) q->d
                                   | (uint32_t) q->s << 16)));
        } else {
            const llm_block_q8_0  *q = (const llm_block_q8_0 *) x + b;

            pre[b].y = _mm256_loadu_si256((const void *) q->qs);
            pre[b].off = _mm256_maddubs_epi16(sixteen, pre[b].y);
            pre[b].ds = _mm_cvtph_ps(_mm_set1_epi32((int) q->d));
        }
    }
}


/*
 * R (1, 2) weight rows against C prepared columns (column c's records at
 * pre + c * pcs).  Per block and row: the quants from one 128-bit
 * broadcast load, the high nibbles shifted down in the upper lane by one
 * variable shift.  Per block: the rows' [d m] (Q5_0 [d .]) as floats
 * from one conversion ([d0 m0 d1 m1] for two rows); per column d_w d_x
 * of both rows from one 4-lane product, broadcast (lanes 0 and 2), and
 * m s by a 4-lane FMA whose lanes 1 and 3 are the two rows' m x s
 * chains.  The same values and roundings as llm_leg_tile: d_w d_x is the
 * same (exact) product, each m s FMA chain the same, the integer sums
 * the same.
 */
LLM_INLINE void
llm_leg_rows_pre(const int kind, const int R, const int C, int64_t nb,
    const char *w, size_t ws, const llm_leg_pre_t *pre, int64_t pcs,
    float *y, size_t ldy)
{
    const __m256i  m4 = _mm256_set1_epi8(0x0f);
    const __m256i  ones = _mm256_set1_epi16(1);
    const __m256i  sh = _mm256_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4);
    const size_t   bsz = kind == LLM_LEG_Q4_1 ? sizeof(llm_block_q4_1)
                         : kind == LLM_LEG_Q5_0 ? sizeof(llm_block_q5_0)
                         : sizeof(llm_block_q5_1);
    const int      qo = kind == LLM_LEG_Q4_1 ? 4
                        : kind == LLM_LEG_Q5_0 ? 6 : 8;  /* qs offset */
    const int      ho = kind == LLM_LEG_Q5_0 ? 2 : 4;    /* qh offset */
    __m256         acc[2][LLM_MAXC];
    __m128         macc[LLM_MAXC];
    int64_t        b;
    int            r, c;

#pragma GCC unroll 4
    for (c = 0; c < C; c++) {
        acc[0][c] = _mm256_setzero_ps();
        acc[1][c] = _mm256_setzero_ps();
        macc[c] = _mm_setzero_ps();
    }

    for (b = 0; b < nb; b++) {
        const char  *p = w + b * bsz;
        __m256i      q[2];
        __m128       h;

        if (R == 2) {
            h = _mm_cvtph_ps(_mm_blend_epi32(
                    _mm_castps_si128(_mm_broadcast_ss((const float *) p)),
                    _mm_castps_si128(_mm_broadcast_ss((const float *)
                                                      (p + ws))), 0x2));
        } else {
            h = _mm_cvtph_ps(_mm_loadl_epi64((const void *) p));
        }

#pragma GCC unroll 4
        for (c = 0; c < C; c++) {
            const llm_leg_pre_t  *pc = pre + c * pcs + b;
            const __m256i         yv = _mm256_load_si256(&pc->y);
            const __m128          ds = _mm_load_ps((const float *) &pc->ds);
            const __m128          hp = _mm_mul_ps(h, ds);

            if (kind != LLM_LEG_Q5_0) {
                macc[c] = _mm_fmadd_ps(h, ds, macc[c]);
            }
#pragma GCC unroll 2
            for (r = 0; r < R; r++) {
                __m256   dd = r == 0
                              ? _mm256_broadcastss_ps(hp)
                              : _mm256_permutevar8x32_ps(
                                    _mm256_castps128_ps256(hp),
                                    _mm256_set1_epi32(2));
                __m256i  p16;

                if (c == 0) {       /* row r's quants */
                    const char  *pr = p + r * ws;

                    q[r] = _mm256_broadcastsi128_si256(_mm_loadu_si128(
                               (const void *) (pr + qo)));
                    q[r] = _mm256_and_si256(_mm256_srlv_epi32(q[r], sh), m4);
                    if (kind != LLM_LEG_Q4_1) {
                        q[r] = _mm256_or_si256(q[r], llm_leg_high_bits(
                                   (const uint8_t *) pr + ho));
                    }
                    _mm_prefetch(pr + LLM_PF_TILES * R * ws, _MM_HINT_T0);
                }
                p16 = _mm256_maddubs_epi16(q[r], yv);

                if (kind == LLM_LEG_Q5_0) {
                    p16 = _mm256_sub_epi16(p16, _mm256_load_si256(&pc->off));
                }
                acc[r][c] = _mm256_fmadd_ps(
                    _mm256_cvtepi32_ps(_mm256_madd_epi16(p16, ones)), dd,
                    acc[r][c]);
            }
        }
    }

#pragma GCC unroll 4
    for (c = 0; c < C; c++) {
#pragma GCC unroll 2
        for (r = 0; r < R; r++) {
            /* lanes 1, 3: the rows' m s chains (0 for Q5_0, as the
             * tile's) */
            y[c * ldy + r] = llm_hsum256(acc[r][c])
                             + _mm_cvtss_f32(r == 1
                                   ? _mm_movehl_ps(macc[c],
                                                   _mm_movehdup_ps(macc[c]))
                                   : _mm_movehdup_ps(macc[c]));
        }
    }
}


/*
 * R rows against C prepared columns, one function each (as one inlined
 * function the loops shared hoisted constants and spilled them).
 */
typedef void (*llm_leg_rc_fn)(int64_t nb, const char *w, size_t ws,
    const llm_leg_pre_t *pre, float *y, size_t ldy);

#define LLM_LEG_RC(k, R, C)                                                 \
static __attribute__((noinline)) void                                       \
llm_leg_rc_##k##_##R##_##C(int64_t nb, const char *w, size_t ws,            \
    const llm_leg_pre_t *pre, float *y, size_t ldy)                         \
{                                                                           \
    llm_leg_rows_pre(k, R, C, nb, w, ws, pre, nb, y, ldy);                  \
}

#define LLM_LEG_RCS(k)                                                      \
    LLM_LEG_RC(k, 1, 1) LLM_LEG_RC(k, 1, 2) LLM_LEG_RC(k, 1, 3)             \
    LLM_LEG_RC(k, 1, 4)                                                     \
    LLM_LEG_RC(k, 2, 1) LLM_LEG_RC(k, 2, 2) LLM_LEG_RC(k, 2, 3)             \
    LLM_LEG_RC(k, 2, 4)

LLM_LEG_RCS(0)
LLM_LEG_RCS(1)
LLM_LEG_RCS(2)

/* [kind][R - 1][C - 1] */
static const llm_leg_rc_fn  llm_leg_rc[3][2][4] = {
#define LLM_LEG_RCT(k)                                                      \
    { { llm_leg_rc_##k##_1_1, llm_leg_rc_##k##_1_2, llm_leg_rc_##k##_1_3,   \
        llm_leg_rc_##k##_1_4 },                                             \
      { llm_leg_rc_##k##_2_1, llm_leg_rc_##k##_2_2, llm_leg_rc_##k##_2_3,   \
        llm_leg_rc_##k##_2_4 } }
    LLM_LEG_RCT(0), LLM_LEG_RCT(1), LLM_LEG_RCT(2)
#undef LLM_LEG_RCT
};


/*
 * 1 to LLM_LEG_COLS columns (decode): all prepared once (when their
 * blocks fit LLM_LEG_PREP), then two rows at a time (one row's FMA
 * chains alone are latency-bound) against groups of up to 4 of them (the
 * two rows stay in L1 while the groups pass).  Returns 0 (not done)
 * otherwise: the plain driver's.
 */
#define LLM_LEG_COLS  16

LLM_INLINE int
llm_leg_gemm_pre(const int kind, int64_t n, int64_t nr, int64_t nc,
    const char *w, size_t ws, const char *x, size_t xs, float *y,
    size_t ldy)
{
    llm_leg_pre_t  pre[LLM_LEG_PREP / sizeof(llm_leg_pre_t)];
    int64_t        nb = n / LLM_QK, r, c;

    if (nc < 1 || nc > LLM_LEG_COLS || nb == 0
        || nb * nc > (int64_t) (sizeof(pre) / sizeof(pre[0]))) {
        return 0;
    }
    for (c = 0; c < nc; c++) {
        llm_leg_prep(kind, x + c * xs, nb, pre + c * nb);
    }
    for (r = 0; r < nr; r += 2) {
        const int  rr = nr - r < 2 ? 0 : 1;

        for (c = 0; c < nc; c += 4) {
            llm_leg_rc[kind][rr][nc - c < 4 ? nc - c - 1 : 3](
                nb, w + r * ws, ws, pre + c * nb, y + c * ldy + r, ldy);
        }
    }
    return 1;
}


/* The gemm: prepared columns (llm_leg_gemm_pre), the plain driver's
 * tiles otherwise. */
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


/*
 * n floats to Q8_1, byte for byte llm_act_q8_1: the same float steps
 * (d = amax / 127, id = 1 / d, x * id), roundf's ties away from zero as
 * truncation plus one where the dropped fraction is at least a half (the
 * fraction x - trunc(x) is exact), and s from the exact integer sum.
 */
static void
llm_act_q8_1_avx2(const float *x, void *dst, int64_t n)
{
    const __m256     sign = _mm256_set1_ps(-0.0f);
    const __m256     half = _mm256_set1_ps(0.5f);
    const __m256     one = _mm256_set1_ps(1.0f);
    llm_block_q8_1  *b = dst;

    for (int64_t i = 0; i < n / LLM_QK; i++, b++, x += LLM_QK) {
        __m256   v[4], m;
        __m256i  q[4], qs, s16;
        __m128i  s4;
        float    amax, d, id;
        int      k, sum;

        for (k = 0; k < 4; k++) {
            v[k] = _mm256_loadu_ps(x + 8 * k);
        }
        m = _mm256_max_ps(_mm256_max_ps(_mm256_andnot_ps(sign, v[0]),
                                        _mm256_andnot_ps(sign, v[1])),
                          _mm256_max_ps(_mm256_andnot_ps(sign, v[2]),
                                        _mm256_andnot_ps(sign, v[3])));
        {
            __m128  h = _mm_max_ps(_mm256_castps256_ps128(m),
                                   _mm256_extractf128_ps(m, 1));

            h = _mm_max_ps(h, _mm_movehl_ps(h, h));
            h = _mm_max_ss(h, _mm_movehdup_ps(h));
            amax = _mm_cvtss_f32(h);
        }
        d = amax / 127;
        id = d != 0.0f ? 1.0f / d : 0.0f;

        for (k = 0; k < 4; k++) {
            __m256  p = _mm256_mul_ps(v[k], _mm256_set1_ps(id));
            __m256  t = _mm256_round_ps(p, _MM_FROUND_TO_ZERO
                                           | _MM_FROUND_NO_EXC);
            __m256  up = _mm256_cmp_ps(_mm256_andnot_ps(sign,
                                                        _mm256_sub_ps(p, t)),
                                       half, _CMP_GE_OQ);

            /* t + copysign(1, p) where the fraction is >= 0.5 */
            t = _mm256_add_ps(t, _mm256_and_ps(up, _mm256_or_ps(
                                      one, _mm256_and_ps(sign, p))));
            q[k] = _mm256_cvttps_epi32(t);
        }
        qs = _mm256_permutevar8x32_epi32(
                 _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]),
                                    _mm256_packs_epi32(q[2], q[3])),
                 _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
        _mm256_storeu_si256((void *) b->qs, qs);

        s16 = _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]),
                               _mm256_add_epi32(q[2], q[3]));
        s4 = _mm_add_epi32(_mm256_castsi256_si128(s16),
                           _mm256_extracti128_si256(s16, 1));
        s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, _MM_SHUFFLE(1, 0, 3, 2)));
        s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, _MM_SHUFFLE(2, 3, 0, 1)));
        sum = _mm_cvtsi128_si32(s4);

        b->d = llm_fp32_to_fp16(d);
        b->s = llm_fp32_to_fp16(sum * d);
    }
}


/* AVX2 table entries of Q4_1, Q5_0, Q5_1 and the Q8_1 activations. */
void
llm_kernels_init_legacy_avx2(llm_kernels_t *k)
{
    k->quantize_act[LLM_TYPE_Q8_1] = llm_act_q8_1_avx2;
    k->vec_dot[LLM_TYPE_Q4_1] = llm_dot_leg_q4_1_raw;
    k->vec_dot[LLM_TYPE_Q5_0] = llm_dot_leg_q5_0_raw;
    k->vec_dot[LLM_TYPE_Q5_1] = llm_dot_leg_q5_1_raw;
    k->gemm[LLM_TYPE_Q4_1] = llm_gemm_leg_q4_1;
    k->gemm[LLM_TYPE_Q5_0] = llm_gemm_leg_q5_0;
    k->gemm[LLM_TYPE_Q5_1] = llm_gemm_leg_q5_1;
}
