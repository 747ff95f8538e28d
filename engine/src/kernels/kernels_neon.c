/*
 * NEON kernels (aarch64, ARMv8.2 with the dot-product extension: Neoverse
 * N1 / Graviton2, Ampere Altra and later).
 *
 * Activations: Q8_0 and Q8_K quantization, bit-exact with the scalar
 * reference (vcvtnq rounds to nearest even as llm_nearest_int does).
 *
 * Q4_0 and Q8_0 against Q8_0: a tile of R weight rows x C columns
 * (R, C <= 4) keeps R x C four-lane float accumulators; per block and
 * pair, two SDOTs give four exact partial sums, converted to float and
 * added with one fused multiply by d_w * d_x; the four lanes are summed at
 * the end.  Each (row, column) result is computed the same way whatever
 * tile it is in, so a column's results do not depend on the batch.  The
 * driver takes 64 weight rows (L2) past each group of 4 prepared columns
 * (L1).
 *
 * K-quants (Q4_K, Q5_K, Q6_K): a row's dot product with exact integer
 * sub-block sums (SDOT) and the scalar reference's float combination per
 * block; gemm is the generic loop over vec_dot.
 *
 * Float rows (F32, F16, BF16): four-lane fused multiply-adds in four
 * accumulators.
 */

#include <arm_neon.h>
#include <string.h>

#include "quant.h"
#include "kernels_common.h"

/* fp16 -> fp32 with the FCVT instruction (exact). */
static inline float
llm_h2f_neon(uint16_t h)
{
    __fp16  f;

    memcpy(&f, &h, sizeof(f));
    return (float) f;
}

/* ---- activations ---------------------------------------------------- */

static inline int8x16_t
llm_narrow_s8(int32x4_t a, int32x4_t b, int32x4_t c, int32x4_t d)
{
    int16x8_t  lo = vcombine_s16(vmovn_s32(a), vmovn_s32(b));
    int16x8_t  hi = vcombine_s16(vmovn_s32(c), vmovn_s32(d));

    return vcombine_s8(vmovn_s16(lo), vmovn_s16(hi));
}

static void
llm_act_q8_0_neon(const float *x, void *dst, int64_t n)
{
    llm_block_q8_0  *b = dst;
    float32x4_t      v[8], m;
    int32x4_t        q[8];
    float            amax, id;
    int              j;

    for (int64_t i = 0; i < n / LLM_QK; i++, b++, x += LLM_QK) {
        for (j = 0; j < 8; j++) {
            v[j] = vld1q_f32(x + 4 * j);
        }
        m = vmaxq_f32(vmaxq_f32(vmaxq_f32(vabsq_f32(v[0]), vabsq_f32(v[1])),
                                vmaxq_f32(vabsq_f32(v[2]), vabsq_f32(v[3]))),
                      vmaxq_f32(vmaxq_f32(vabsq_f32(v[4]), vabsq_f32(v[5])),
                                vmaxq_f32(vabsq_f32(v[6]), vabsq_f32(v[7]))));
        amax = vmaxvq_f32(m);
        id = amax != 0.0f ? 127.f / amax : 0.0f;
        b->d = llm_fp32_to_fp16(amax / 127.f);
        for (j = 0; j < 8; j++) {
            q[j] = vcvtnq_s32_f32(vmulq_n_f32(v[j], id));
        }
        vst1q_s8(b->qs, llm_narrow_s8(q[0], q[1], q[2], q[3]));
        vst1q_s8(b->qs + 16, llm_narrow_s8(q[4], q[5], q[6], q[7]));
    }
}

/* d = max / -127 with max the signed value of largest magnitude (the
 * first such), q clamped to -127..127, and the 16 sums of 16. */
static void
llm_act_q8_K_neon(const float *x, void *dst, int64_t n)
{
    llm_block_q8_K  *b = dst;
    const int32x4_t  lim = vdupq_n_s32(127), nlim = vdupq_n_s32(-127);
    float32x4_t      m;
    int32x4_t        q[4];
    float            amax, max, iscale;
    int              j, k;

    for (int64_t i = 0; i < n / LLM_QK_K; i++, b++, x += LLM_QK_K) {
        m = vdupq_n_f32(0.0f);
        for (j = 0; j < LLM_QK_K; j += 4) {
            m = vmaxq_f32(m, vabsq_f32(vld1q_f32(x + j)));
        }
        amax = vmaxvq_f32(m);
        if (amax == 0.0f) {
            memset(b, 0, sizeof(*b));
            continue;
        }
        for (j = 0; j < LLM_QK_K && __builtin_fabsf(x[j]) != amax; j++) {
            /* void */
        }
        max = x[j];
        iscale = -127.f / max;
        for (j = 0; j < LLM_QK_K; j += 16) {
            for (k = 0; k < 4; k++) {
                q[k] = vcvtnq_s32_f32(vmulq_n_f32(vld1q_f32(x + j + 4 * k),
                                                  iscale));
                q[k] = vmaxq_s32(vminq_s32(q[k], lim), nlim);
            }
            int8x16_t  s = llm_narrow_s8(q[0], q[1], q[2], q[3]);

            vst1q_s8(b->qs + j, s);
            b->bsums[j / 16] = (int16_t) vaddlvq_s8(s);
        }
        b->d = 1 / iscale;
    }
}

/* ---- float rows ----------------------------------------------------- */

static void
llm_dot_f32_neon(int64_t n, float *s, const void *w, const void *x)
{
    const float  *a = w, *b = x;
    float32x4_t   acc[4] = { vdupq_n_f32(0.0f), vdupq_n_f32(0.0f),
                             vdupq_n_f32(0.0f), vdupq_n_f32(0.0f) };
    float         sum;
    int64_t       i;
    int           k;

    for (i = 0; i + 16 <= n; i += 16) {
        for (k = 0; k < 4; k++) {
            acc[k] = vfmaq_f32(acc[k], vld1q_f32(a + i + 4 * k),
                               vld1q_f32(b + i + 4 * k));
        }
    }
    sum = vaddvq_f32(vaddq_f32(vaddq_f32(acc[0], acc[1]),
                               vaddq_f32(acc[2], acc[3])));
    for (; i < n; i++) {
        sum += a[i] * b[i];
    }
    *s = sum;
}

static void
llm_dot_f16_neon(int64_t n, float *s, const void *w, const void *x)
{
    const uint16_t  *a = w;
    const float     *b = x;
    float32x4_t      acc[4] = { vdupq_n_f32(0.0f), vdupq_n_f32(0.0f),
                                vdupq_n_f32(0.0f), vdupq_n_f32(0.0f) };
    float            sum;
    int64_t          i;
    int              k;

    for (i = 0; i + 16 <= n; i += 16) {
        for (k = 0; k < 4; k++) {
            acc[k] = vfmaq_f32(acc[k],
                               vcvt_f32_f16(vreinterpret_f16_u16(
                                   vld1_u16(a + i + 4 * k))),
                               vld1q_f32(b + i + 4 * k));
        }
    }
    sum = vaddvq_f32(vaddq_f32(vaddq_f32(acc[0], acc[1]),
                               vaddq_f32(acc[2], acc[3])));
    for (; i < n; i++) {
        sum += llm_h2f_neon(a[i]) * b[i];
    }
    *s = sum;
}

static void
llm_dot_bf16_neon(int64_t n, float *s, const void *w, const void *x)
{
    const uint16_t  *a = w;
    const float     *b = x;
    float32x4_t      acc[4] = { vdupq_n_f32(0.0f), vdupq_n_f32(0.0f),
                                vdupq_n_f32(0.0f), vdupq_n_f32(0.0f) };
    float            sum;
    int64_t          i;
    int              k;

    for (i = 0; i + 16 <= n; i += 16) {
        for (k = 0; k < 4; k++) {
            acc[k] = vfmaq_f32(acc[k],
                               vreinterpretq_f32_u32(vshll_n_u16(
                                   vld1_u16(a + i + 4 * k), 16)),
                               vld1q_f32(b + i + 4 * k));
        }
    }
    sum = vaddvq_f32(vaddq_f32(vaddq_f32(acc[0], acc[1]),
                               vaddq_f32(acc[2], acc[3])));
    for (; i < n; i++) {
        sum += llm_bf16_to_fp32(a[i]) * b[i];
    }
    *s = sum;
}

/* ---- Q4_0 / Q8_0 tiles ---------------------------------------------- */

/* The two 16-value halves of a weight block as signed bytes, its scale. */
static inline __attribute__((always_inline)) float
llm_unpack_q4_0(const void *blk, int8x16_t *lo, int8x16_t *hi)
{
    const llm_block_q4_0  *q = blk;
    const uint8x16_t       v = vld1q_u8(q->qs);
    const int8x16_t        eight = vdupq_n_s8(8);

    *lo = vsubq_s8(vreinterpretq_s8_u8(vandq_u8(v, vdupq_n_u8(0x0f))),
                   eight);
    *hi = vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8(v, 4)), eight);
    return llm_h2f_neon(q->d);
}

static inline __attribute__((always_inline)) float
llm_unpack_q8_0(const void *blk, int8x16_t *lo, int8x16_t *hi)
{
    const llm_block_q8_0  *q = blk;

    *lo = vld1q_s8(q->qs);
    *hi = vld1q_s8(q->qs + 16);
    return llm_h2f_neon(q->d);
}

#define LLM_NEON_TILE(name, blk_t, UNPACK)                                   \
static inline __attribute__((always_inline)) void                           \
name(const int R, const int C, int64_t nb, const char *w, size_t ws,        \
    const char *x, size_t xs, float *y, size_t ldy)                         \
{                                                                           \
    float32x4_t  acc[4][4];                                                 \
    int8x16_t    wl[4], wh[4], y0, y1;                                      \
    float        dw[4], dx;                                                 \
    int32x4_t    p;                                                         \
    int64_t      b;                                                         \
    int          r, c;                                                      \
                                                                            \
    _Pragma("GCC unroll 4")                                                 \
    for (r = 0; r < R; r++) {                                               \
        _Pragma("GCC unroll 4")                                             \
        for (c = 0; c < C; c++) {                                           \
            acc[r][c] = vdupq_n_f32(0.0f);                                  \
        }                                                                   \
    }                                                                       \
    for (b = 0; b < nb; b++) {                                              \
        _Pragma("GCC unroll 4")                                             \
        for (r = 0; r < R; r++) {                                           \
            dw[r] = UNPACK((const blk_t *) (w + r * ws) + b, &wl[r],        \
                           &wh[r]);                                         \
        }                                                                   \
        _Pragma("GCC unroll 4")                                             \
        for (c = 0; c < C; c++) {                                           \
            dx = llm_unpack_q8_0((const llm_block_q8_0 *) (x + c * xs) + b, \
                                 &y0, &y1);                                 \
            _Pragma("GCC unroll 4")                                         \
            for (r = 0; r < R; r++) {                                       \
                p = vdotq_s32(vdotq_s32(vdupq_n_s32(0), wl[r], y0),         \
                              wh[r], y1);                                   \
                acc[r][c] = vfmaq_n_f32(acc[r][c], vcvtq_f32_s32(p),        \
                                        dw[r] * dx);                        \
            }                                                               \
        }                                                                   \
    }                                                                       \
    _Pragma("GCC unroll 4")                                                 \
    for (r = 0; r < R; r++) {                                               \
        _Pragma("GCC unroll 4")                                             \
        for (c = 0; c < C; c++) {                                           \
            y[c * ldy + r] = vaddvq_f32(acc[r][c]);                         \
        }                                                                   \
    }                                                                       \
}

LLM_NEON_TILE(llm_tile_q4_0, llm_block_q4_0, llm_unpack_q4_0)
LLM_NEON_TILE(llm_tile_q8_0, llm_block_q8_0, llm_unpack_q8_0)

#define LLM_NEON_RC(TILE, R, C)                                              \
    case (R) * 8 + (C):                                                     \
        TILE(R, C, nb, wr, ws, xc, xs, yr, ldy);                            \
        break;

#define LLM_NEON_R(TILE, R)                                                  \
    LLM_NEON_RC(TILE, R, 1) LLM_NEON_RC(TILE, R, 2)                         \
    LLM_NEON_RC(TILE, R, 3) LLM_NEON_RC(TILE, R, 4)

#define LLM_NEON_GEMM(name, TILE)                                            \
static void                                                                 \
name(int64_t n, int64_t nr, int64_t nc, const void *w, size_t ws,           \
    const void *x, size_t xs, float *y, size_t ldy)                         \
{                                                                           \
    const int64_t  nb = n / LLM_QK;                                         \
    int64_t        q0, q1, c0, r;                                           \
    int            R, C;                                                    \
                                                                            \
    for (q0 = 0; q0 < nr; q0 = q1) {                                        \
        q1 = q0 + LLM_ROW_CHUNK < nr ? q0 + LLM_ROW_CHUNK : nr;             \
        for (c0 = 0; c0 < nc; c0 += 4) {                                    \
            const char  *xc = (const char *) x + c0 * xs;                   \
                                                                            \
            C = nc - c0 < 4 ? (int) (nc - c0) : 4;                          \
            for (r = q0; r < q1; r += 4) {                                  \
                const char  *wr = (const char *) w + r * ws;                \
                float       *yr = y + c0 * ldy + r;                         \
                                                                            \
                R = q1 - r < 4 ? (int) (q1 - r) : 4;                        \
                switch (R * 8 + C) {                                        \
                LLM_NEON_R(TILE, 1)                                         \
                LLM_NEON_R(TILE, 2)                                         \
                LLM_NEON_R(TILE, 3)                                         \
                LLM_NEON_R(TILE, 4)                                         \
                }                                                           \
            }                                                               \
        }                                                                   \
    }                                                                       \
}                                                                           \
                                                                            \
static void                                                                 \
name##_dot(int64_t n, float *s, const void *w, const void *x)               \
{                                                                           \
    TILE(1, 1, n / LLM_QK, w, 0, x, 0, s, 1);                               \
}

LLM_NEON_GEMM(llm_gemm_q4_0_neon, llm_tile_q4_0)
LLM_NEON_GEMM(llm_gemm_q8_0_neon, llm_tile_q8_0)

/* ---- K-quants ------------------------------------------------------- */

static inline int32_t
llm_sdot2(int8x16_t a0, int8x16_t b0, int8x16_t a1, int8x16_t b1)
{
    return vaddvq_s32(vdotq_s32(vdotq_s32(vdupq_n_s32(0), a0, b0), a1, b1));
}

/*
 * Q4_K and Q5_K . Q8_K: 64 values per chunk k, low nibbles sub-block 2k,
 * high nibbles 2k + 1; Q5_K's fifth bit of sub-block j is bit j of qh[l].
 */
static inline __attribute__((always_inline)) void
llm_dot_q45_K(const int five, int64_t n, float *s, const void *w,
    const void *x)
{
    const uint8x16_t       m4 = vdupq_n_u8(0x0f), b4 = vdupq_n_u8(0x10);
    const llm_block_q4_K  *a4 = w;
    const llm_block_q5_K  *a5 = w;
    const llm_block_q8_K  *b = x;
    uint8x16_t             q0, q1, h0 = vdupq_n_u8(0), h1 = vdupq_n_u8(0);
    uint8x16_t             l0, l1, u0, u1;
    const uint8_t         *scales, *qs;
    uint8_t                sc[8], m[8];
    float                  sum = 0, d, dmin;
    int                    isum, msum, k, j;

    for (int64_t i = 0; i < n / LLM_QK_K; i++, b++) {
        if (five) {
            scales = a5[i].scales;
            qs = a5[i].qs;
            d = llm_h2f_neon(a5[i].d);
            dmin = llm_h2f_neon(a5[i].dmin);
            h0 = vld1q_u8(a5[i].qh);
            h1 = vld1q_u8(a5[i].qh + 16);
        } else {
            scales = a4[i].scales;
            qs = a4[i].qs;
            d = llm_h2f_neon(a4[i].d);
            dmin = llm_h2f_neon(a4[i].dmin);
        }
        for (j = 0; j < 8; j++) {
            llm_get_scale_min_k4(j, scales, &sc[j], &m[j]);
        }
        isum = 0;
        msum = 0;
        for (k = 0; k < 4; k++) {
            const int8_t  *y = b->qs + 64 * k;

            q0 = vld1q_u8(qs + 32 * k);
            q1 = vld1q_u8(qs + 32 * k + 16);
            l0 = vandq_u8(q0, m4);
            l1 = vandq_u8(q1, m4);
            u0 = vshrq_n_u8(q0, 4);
            u1 = vshrq_n_u8(q1, 4);
            if (five) {
                const uint8x16_t  bl = vdupq_n_u8((uint8_t) (1u << (2 * k)));
                const uint8x16_t  bh = vdupq_n_u8((uint8_t) (2u << (2 * k)));

                l0 = vorrq_u8(l0, vandq_u8(vtstq_u8(h0, bl), b4));
                l1 = vorrq_u8(l1, vandq_u8(vtstq_u8(h1, bl), b4));
                u0 = vorrq_u8(u0, vandq_u8(vtstq_u8(h0, bh), b4));
                u1 = vorrq_u8(u1, vandq_u8(vtstq_u8(h1, bh), b4));
            }
            isum += sc[2 * k] * llm_sdot2(vreinterpretq_s8_u8(l0),
                                          vld1q_s8(y),
                                          vreinterpretq_s8_u8(l1),
                                          vld1q_s8(y + 16));
            isum += sc[2 * k + 1] * llm_sdot2(vreinterpretq_s8_u8(u0),
                                              vld1q_s8(y + 32),
                                              vreinterpretq_s8_u8(u1),
                                              vld1q_s8(y + 48));
        }
        for (j = 0; j < 8; j++) {
            msum += m[j] * (b->bsums[2 * j] + b->bsums[2 * j + 1]);
        }
        sum += b->d * d * isum - b->d * dmin * msum;
    }
    *s = sum;
}

static void
llm_dot_q4_K_neon(int64_t n, float *s, const void *w, const void *x)
{
    llm_dot_q45_K(0, n, s, w, x);
}

static void
llm_dot_q5_K_neon(int64_t n, float *s, const void *w, const void *x)
{
    llm_dot_q45_K(1, n, s, w, x);
}

/* Q6_K . Q8_K: element h*128 + k*32 + l is nibble (k & 2) of
 * ql[l + 32 (k & 1)] with bits 2k of qh[l] above it, minus 32. */
static void
llm_dot_q6_K_neon(int64_t n, float *s, const void *w, const void *x)
{
    const llm_block_q6_K  *a = w;
    const llm_block_q8_K  *b = x;
    const uint8x16_t       m4 = vdupq_n_u8(0x0f), m2 = vdupq_n_u8(0x03);
    const int8x16_t        s32 = vdupq_n_s8(32);
    uint8x16_t             ql[4], qh[2], lo0, lo1, hi0, hi1;
    int8x16_t              shift;
    float                  sum = 0;
    int                    isum, h, k;

    for (int64_t i = 0; i < n / LLM_QK_K; i++, a++, b++) {
        isum = 0;
        for (h = 0; h < 2; h++) {
            const uint8_t  *pl = a->ql + 64 * h, *ph = a->qh + 32 * h;
            const int8_t   *y = b->qs + 128 * h;
            const int8_t   *sc = a->scales + 8 * h;

            for (k = 0; k < 4; k++) {
                ql[k] = vld1q_u8(pl + 16 * k);
            }
            qh[0] = vld1q_u8(ph);
            qh[1] = vld1q_u8(ph + 16);
            for (k = 0; k < 4; k++) {
                lo0 = ql[(k & 1) * 2];
                lo1 = ql[(k & 1) * 2 + 1];
                if (k & 2) {
                    lo0 = vshrq_n_u8(lo0, 4);
                    lo1 = vshrq_n_u8(lo1, 4);
                } else {
                    lo0 = vandq_u8(lo0, m4);
                    lo1 = vandq_u8(lo1, m4);
                }
                shift = vdupq_n_s8((int8_t) (-2 * k));
                hi0 = vshlq_n_u8(vandq_u8(vshlq_u8(qh[0], shift), m2), 4);
                hi1 = vshlq_n_u8(vandq_u8(vshlq_u8(qh[1], shift), m2), 4);
                isum += sc[2 * k] * vaddvq_s32(vdotq_s32(vdupq_n_s32(0),
                            vsubq_s8(vreinterpretq_s8_u8(vorrq_u8(lo0, hi0)),
                                     s32),
                            vld1q_s8(y + 32 * k)));
                isum += sc[2 * k + 1] * vaddvq_s32(vdotq_s32(vdupq_n_s32(0),
                            vsubq_s8(vreinterpretq_s8_u8(vorrq_u8(lo1, hi1)),
                                     s32),
                            vld1q_s8(y + 32 * k + 16)));
            }
        }
        sum += b->d * llm_h2f_neon(a->d) * isum;
    }
    *s = sum;
}

void
llm_kernels_init_neon(llm_kernels_t *k)
{
    k->quantize_act[LLM_TYPE_Q8_0] = llm_act_q8_0_neon;
    k->quantize_act[LLM_TYPE_Q8_K] = llm_act_q8_K_neon;
    k->vec_dot[LLM_TYPE_F32] = llm_dot_f32_neon;
    k->vec_dot[LLM_TYPE_F16] = llm_dot_f16_neon;
    k->vec_dot[LLM_TYPE_BF16] = llm_dot_bf16_neon;
    k->vec_dot[LLM_TYPE_Q4_0] = llm_gemm_q4_0_neon_dot;
    k->vec_dot[LLM_TYPE_Q8_0] = llm_gemm_q8_0_neon_dot;
    k->vec_dot[LLM_TYPE_Q4_K] = llm_dot_q4_K_neon;
    k->vec_dot[LLM_TYPE_Q5_K] = llm_dot_q5_K_neon;
    k->vec_dot[LLM_TYPE_Q6_K] = llm_dot_q6_K_neon;
    k->gemm[LLM_TYPE_Q4_0] = llm_gemm_q4_0_neon;
    k->gemm[LLM_TYPE_Q8_0] = llm_gemm_q8_0_neon;
    llm_kernels_init_k23_neon(k);
    llm_kernels_init_legacy_neon(k);
    llm_kernels_init_iq4_neon(k);
    llm_kernels_init_iq1_neon(k);
    llm_kernels_init_iq2_neon(k);
    llm_kernels_init_iq3_neon(k);
}
