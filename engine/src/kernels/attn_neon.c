/*
 * NEON attention and SwiGLU kernels (aarch64): the AVX2 ones' structure
 * at 4 lanes, 4 positions per register for q.k (K is transposed per
 * block), 4 head dims per register for p.v.  Tails (fewer than 4
 * positions or dims) go through a zero-padded copy.
 */

#include <arm_neon.h>
#include <math.h>
#include <string.h>

#include "attn.h"

static inline float32x4_t
llm_ld4(const void *base, size_t i, uint32_t cnt, int f16)
{
    float     tmp[4];
    uint16_t  th[4];
    uint32_t  k;

    if (cnt >= 4) {
        if (f16) {
            return vcvt_f32_f16(vreinterpret_f16_u16(
                       vld1_u16((const uint16_t *) base + i)));
        }
        return vld1q_f32((const float *) base + i);
    }
    if (f16) {
        memset(th, 0, sizeof(th));
        memcpy(th, (const uint16_t *) base + i, cnt * 2);
        return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(th)));
    }
    for (k = 0; k < 4; k++) {
        tmp[k] = k < cnt ? ((const float *) base)[i + k] : 0.0f;
    }
    return vld1q_f32(tmp);
}

static inline void
llm_st4(float *dst, float32x4_t v, uint32_t cnt)
{
    float  tmp[4];

    if (cnt >= 4) {
        vst1q_f32(dst, v);
        return;
    }
    vst1q_f32(tmp, v);
    memcpy(dst, tmp, cnt * sizeof(float));
}

/* NG heads x 8 positions (two registers each) over all head dims. */
static inline __attribute__((always_inline)) void
llm_qk_heads(const int NG, const float *q, uint32_t hd, const void *kt,
    uint32_t bt, uint32_t n, int f16, float scale, float *s, size_t lds)
{
    uint32_t     t, d, c0, c1;
    int          j;
    float32x4_t  acc[8][2], k0, k1;

    for (t = 0; t < n; t += 8) {
        c0 = n - t;
        c1 = n - t > 4 ? n - t - 4 : 0;
#pragma GCC unroll 8
        for (j = 0; j < NG; j++) {
            acc[j][0] = vdupq_n_f32(0.0f);
            acc[j][1] = vdupq_n_f32(0.0f);
        }
        for (d = 0; d < hd; d++) {
            k0 = llm_ld4(kt, (size_t) d * bt + t, c0, f16);
            k1 = c1 ? llm_ld4(kt, (size_t) d * bt + t + 4, c1, f16)
                    : vdupq_n_f32(0.0f);
#pragma GCC unroll 8
            for (j = 0; j < NG; j++) {
                acc[j][0] = vfmaq_n_f32(acc[j][0], k0, q[(size_t) j * hd + d]);
                acc[j][1] = vfmaq_n_f32(acc[j][1], k1, q[(size_t) j * hd + d]);
            }
        }
#pragma GCC unroll 8
        for (j = 0; j < NG; j++) {
            llm_st4(s + j * lds + t, vmulq_n_f32(acc[j][0], scale), c0);
            if (c1) {
                llm_st4(s + j * lds + t + 4, vmulq_n_f32(acc[j][1], scale),
                        c1);
            }
        }
    }
}

void
llm_attn_qk_neon(const float *q, uint32_t G, uint32_t hd, const void *kt,
    uint32_t bt, uint32_t n, int f16, float scale, float *s, size_t lds)
{
    uint32_t  h = 0;

    for ( ; h + 8 <= G; h += 8) {
        llm_qk_heads(8, q + h * hd, hd, kt, bt, n, f16, scale, s + h * lds,
                     lds);
    }
    for ( ; h + 4 <= G; h += 4) {
        llm_qk_heads(4, q + h * hd, hd, kt, bt, n, f16, scale, s + h * lds,
                     lds);
    }
    for ( ; h < G; h++) {
        llm_qk_heads(1, q + h * hd, hd, kt, bt, n, f16, scale, s + h * lds,
                     lds);
    }
}

/* NG heads x 16 dims (4 registers each) over all n positions. */
static inline __attribute__((always_inline)) void
llm_pv_heads(const int NG, float *o, uint32_t hv, uint32_t d0,
    const void *v, size_t v_stride, uint32_t n, int f16, const float *s,
    size_t lds)
{
    float32x4_t  acc[2][4], vv[4];
    uint32_t     t, c, cnt[4];
    int          j;
    float        a;

#pragma GCC unroll 4
    for (c = 0; c < 4; c++) {
        cnt[c] = hv > d0 + c * 4 ? hv - d0 - c * 4 : 0;
#pragma GCC unroll 2
        for (j = 0; j < NG; j++) {
            acc[j][c] = cnt[c] ? llm_ld4(o + j * hv, d0 + c * 4, cnt[c], 0)
                               : vdupq_n_f32(0.0f);
        }
    }
    for (t = 0; t < n; t++) {
#pragma GCC unroll 4
        for (c = 0; c < 4; c++) {
            vv[c] = cnt[c] ? llm_ld4(v, t * v_stride + d0 + c * 4, cnt[c],
                                     f16)
                           : vdupq_n_f32(0.0f);
        }
#pragma GCC unroll 2
        for (j = 0; j < NG; j++) {
            a = s[j * lds + t];
#pragma GCC unroll 4
            for (c = 0; c < 4; c++) {
                acc[j][c] = vfmaq_n_f32(acc[j][c], vv[c], a);
            }
        }
    }
#pragma GCC unroll 4
    for (c = 0; c < 4; c++) {
        if (cnt[c] == 0) {
            continue;
        }
#pragma GCC unroll 2
        for (j = 0; j < NG; j++) {
            llm_st4(o + j * hv + d0 + c * 4, acc[j][c], cnt[c]);
        }
    }
}

void
llm_attn_pv_neon(float *o, uint32_t G, uint32_t hv, const void *v,
    size_t v_stride, uint32_t n, int f16, const float *s, size_t lds)
{
    uint32_t  h, d0;

    for (d0 = 0; d0 < hv; d0 += 16) {
        h = 0;
        for ( ; h + 2 <= G; h += 2) {
            llm_pv_heads(2, o + h * hv, hv, d0, v, v_stride, n, f16,
                         s + h * lds, lds);
        }
        for ( ; h < G; h++) {
            llm_pv_heads(1, o + h * hv, hv, d0, v, v_stride, n, f16,
                         s + h * lds, lds);
        }
    }
}

/* NH heads x ND dims of p.v from transposed K, lanes holding positions. */
static inline __attribute__((always_inline)) void
llm_pvt_tile(const int NH, const int ND, float *o, uint32_t hv, uint32_t d0,
    const void *const *kb, uint32_t nb, uint32_t bt, uint32_t n_last,
    int f16, const float *s, size_t lds)
{
    float32x4_t  acc[4][4], pv[4], kv[4];
    uint32_t     i, t, n;
    int          h, d;

#pragma GCC unroll 4
    for (h = 0; h < NH; h++) {
#pragma GCC unroll 4
        for (d = 0; d < ND; d++) {
            acc[h][d] = vdupq_n_f32(0.0f);
        }
    }
    for (i = 0; i < nb; i++) {
        n = i + 1 == nb ? n_last : bt;
        for (t = 0; t < n; t += 4) {
#pragma GCC unroll 4
            for (h = 0; h < NH; h++) {
                pv[h] = llm_ld4(s + h * lds + i * bt, t, n - t, 0);
            }
#pragma GCC unroll 4
            for (d = 0; d < ND; d++) {
                kv[d] = llm_ld4(kb[i], (size_t) (d0 + d) * bt + t, n - t,
                                f16);
            }
#pragma GCC unroll 4
            for (h = 0; h < NH; h++) {
#pragma GCC unroll 4
                for (d = 0; d < ND; d++) {
                    acc[h][d] = vfmaq_f32(acc[h][d], pv[h], kv[d]);
                }
            }
        }
    }
#pragma GCC unroll 4
    for (h = 0; h < NH; h++) {
#pragma GCC unroll 4
        for (d = 0; d < ND; d++) {
            o[h * hv + d0 + d] += vaddvq_f32(acc[h][d]);
        }
    }
}

void
llm_attn_pvt_neon(float *o, uint32_t G, uint32_t hv, const void *const *kb,
    uint32_t nb, uint32_t bt, uint32_t n_last, int f16, const float *s,
    size_t lds)
{
    uint32_t  h, d0;

    for (d0 = 0; d0 + 4 <= hv; d0 += 4) {
        for (h = 0; h + 4 <= G; h += 4) {
            llm_pvt_tile(4, 4, o + h * hv, hv, d0, kb, nb, bt, n_last, f16,
                         s + h * lds, lds);
        }
        for ( ; h < G; h++) {
            llm_pvt_tile(1, 4, o + h * hv, hv, d0, kb, nb, bt, n_last, f16,
                         s + h * lds, lds);
        }
    }
    for ( ; d0 < hv; d0++) {
        for (h = 0; h < G; h++) {
            llm_pvt_tile(1, 1, o + h * hv, hv, d0, kb, nb, bt, n_last, f16,
                         s + h * lds, lds);
        }
    }
}

/* ---- quantized cache (layout in attn.h) -------------------------------- */

/* 8 int8 values to two float registers. */
static inline void
llm_i8x8(int8x8_t b, float32x4_t *k0, float32x4_t *k1)
{
    int16x8_t  w = vmovl_s8(b);

    *k0 = vcvtq_f32_s32(vmovl_s16(vget_low_s16(w)));
    *k1 = vcvtq_f32_s32(vmovl_s16(vget_high_s16(w)));
}

static inline __attribute__((always_inline)) void
llm_qkq_heads(const int NG, const float *q, uint32_t hd, const uint8_t *k,
    uint32_t bt, uint32_t n, int q4, float scale, float *s, size_t lds)
{
    const uint16_t  *sc = (const uint16_t *) (k + (q4 ? (size_t) hd * bt / 2
                                                     : (size_t) hd * bt));
    uint32_t         t, d, b, cnt, nd;
    int              j;
    float32x4_t      acc[4][2], accb[4][2], k0, k1, k2, k3, d0, d1, qv;
    uint8x8_t        x;

    for (t = 0; t < n; t += 8) {
        cnt = n - t;
#pragma GCC unroll 8
        for (j = 0; j < NG; j++) {
            acc[j][0] = acc[j][1] = vdupq_n_f32(0.0f);
        }
        for (b = 0; b < hd / 32; b++) {
#pragma GCC unroll 8
            for (j = 0; j < NG; j++) {
                accb[j][0] = accb[j][1] = vdupq_n_f32(0.0f);
            }
            nd = q4 ? 16 : 32;
            for (d = b * 32; d < b * 32 + nd; d++) {
                /* Q4_0 only: byte j holds dims 32 b + j and + 16 */
                x = vld1_u8(k + (size_t) (b * 16 + d % 32) * bt + t);
                llm_i8x8(vsub_s8(vreinterpret_s8_u8(vand_u8(x,
                             vdup_n_u8(15))), vdup_n_s8(8)), &k0, &k1);
                llm_i8x8(vsub_s8(vreinterpret_s8_u8(vshr_n_u8(x, 4)),
                                 vdup_n_s8(8)), &k2, &k3);
#pragma GCC unroll 8
                for (j = 0; j < NG; j++) {
                    qv = vdupq_n_f32(q[(size_t) j * hd + d]);
                    accb[j][0] = vfmaq_f32(accb[j][0], qv, k0);
                    accb[j][1] = vfmaq_f32(accb[j][1], qv, k1);
                    if (q4) {
                        qv = vdupq_n_f32(q[(size_t) j * hd + d + 16]);
                        accb[j][0] = vfmaq_f32(accb[j][0], qv, k2);
                        accb[j][1] = vfmaq_f32(accb[j][1], qv, k3);
                    }
                }
            }
            d0 = vcvt_f32_f16(vreinterpret_f16_u16(
                     vld1_u16(sc + (size_t) b * bt + t)));
            d1 = vcvt_f32_f16(vreinterpret_f16_u16(
                     vld1_u16(sc + (size_t) b * bt + t + 4)));
#pragma GCC unroll 8
            for (j = 0; j < NG; j++) {
                acc[j][0] = vfmaq_f32(acc[j][0], accb[j][0], d0);
                acc[j][1] = vfmaq_f32(acc[j][1], accb[j][1], d1);
            }
        }
#pragma GCC unroll 8
        for (j = 0; j < NG; j++) {
            llm_st4(s + j * lds + t, vmulq_n_f32(acc[j][0], scale), cnt);
            if (cnt > 4) {
                llm_st4(s + j * lds + t + 4, vmulq_n_f32(acc[j][1], scale),
                        cnt - 4);
            }
        }
    }
}

/* Q4_0 only (a Q8_0 cache goes through llm_attn_qk8_neon). */
void
llm_attn_qkq_neon(const float *q, uint32_t G, uint32_t hd, const uint8_t *k,
    uint32_t bt, uint32_t n, llm_type_t t, float scale, float *s,
    size_t lds)
{
    int       q4 = 1;
    uint32_t  h = 0;

    (void) t;

    for ( ; h + 4 <= G; h += 4) {
        llm_qkq_heads(4, q + h * hd, hd, k, bt, n, q4, scale, s + h * lds,
                      lds);
    }
    for ( ; h < G; h++) {
        llm_qkq_heads(1, q + h * hd, hd, k, bt, n, q4, scale, s + h * lds,
                      lds);
    }
}

/*
 * NG heads' q.k against a Q8_0 K, 4 positions a register: per 4 dims one
 * 16-byte load (4 positions x 4 dims) and one sdot per head with that
 * head's 4 q bytes as the lane.  Whole groups of 4 positions are read
 * (the block's positions are a multiple of 16).
 */
#define LLM_QK8_DOT(c)                                                     \
    kv = vld1q_s8((const int8_t *) k + ((size_t) (b * 8 + (c)) * bt + t)   \
                                       * 4);                               \
    for (j = 0; j < NG; j++) {                                             \
        ai[j] = vdotq_laneq_s32(ai[j], kv, qv[j][(c) / 4], (c) % 4);       \
    }

static inline __attribute__((always_inline)) void
llm_qk8_heads(const int NG, const llm_attn_q8_t *q, uint32_t nbk,
    const uint8_t *k, uint32_t bt, uint32_t n, float scale, float *s,
    size_t lds)
{
    const uint16_t  *sc = (const uint16_t *) (k + (size_t) nbk * 32 * bt);
    uint32_t         t, b;
    int              j;
    int32x4_t        ai[4];
    int8x16_t        qv[4][2], kv;
    float32x4_t      acc[4], dk;

    for (t = 0; t < n; t += 4) {
        for (j = 0; j < NG; j++) {
            acc[j] = vdupq_n_f32(0.0f);
        }
        for (b = 0; b < nbk; b++) {
            for (j = 0; j < NG; j++) {
                ai[j] = vdupq_n_s32(0);
                qv[j][0] = vld1q_s8(q[j * nbk + b].qs);
                qv[j][1] = vld1q_s8(q[j * nbk + b].qs + 16);
            }
            LLM_QK8_DOT(0) LLM_QK8_DOT(1) LLM_QK8_DOT(2) LLM_QK8_DOT(3)
            LLM_QK8_DOT(4) LLM_QK8_DOT(5) LLM_QK8_DOT(6) LLM_QK8_DOT(7)
            dk = vcvt_f32_f16(vreinterpret_f16_u16(
                     vld1_u16(sc + (size_t) b * bt + t)));
            for (j = 0; j < NG; j++) {
                acc[j] = vfmaq_f32(acc[j], vcvtq_f32_s32(ai[j]),
                                   vmulq_n_f32(dk, q[j * nbk + b].d));
            }
        }
        for (j = 0; j < NG; j++) {
            llm_st4(s + j * lds + t, vmulq_n_f32(acc[j], scale), n - t);
        }
    }
}

void
llm_attn_qk8_neon(const llm_attn_q8_t *q, uint32_t G, uint32_t hd,
    const uint8_t *k, uint32_t bt, uint32_t n, float scale, float *s,
    size_t lds)
{
    uint32_t  h = 0, nbk = hd / 32;

    for ( ; h + 4 <= G; h += 4) {
        llm_qk8_heads(4, q + h * nbk, nbk, k, bt, n, scale, s + h * lds,
                      lds);
    }
    for ( ; h < G; h++) {
        llm_qk8_heads(1, q + h * nbk, nbk, k, bt, n, scale, s + h * lds,
                      lds);
    }
}

/* One ggml block (32 values) of a V row, times its scale: eight registers. */
static inline void
llm_vq32(const uint8_t *blk, int q4, float32x4_t *v)
{
    uint16_t     h;
    float        dv;
    int8x16_t    lo, hi;
    uint8x16_t   b;
    int16x8_t    w;
    int          i;

    memcpy(&h, blk, 2);
    dv = vgetq_lane_f32(vcvt_f32_f16(vreinterpret_f16_u16(vdup_n_u16(h))), 0);
    if (!q4) {
        lo = vld1q_s8((const int8_t *) blk + 2);
        hi = vld1q_s8((const int8_t *) blk + 18);
    } else {
        b = vld1q_u8(blk + 2);
        lo = vsubq_s8(vreinterpretq_s8_u8(vandq_u8(b, vdupq_n_u8(15))),
                      vdupq_n_s8(8));
        hi = vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8(b, 4)), vdupq_n_s8(8));
    }
    for (i = 0; i < 2; i++) {
        int8x16_t  x = i == 0 ? lo : hi;

        w = vmovl_s8(vget_low_s8(x));
        v[4 * i + 0] = vmulq_n_f32(vcvtq_f32_s32(vmovl_s16(vget_low_s16(w))),
                                   dv);
        v[4 * i + 1] = vmulq_n_f32(vcvtq_f32_s32(vmovl_s16(
                                       vget_high_s16(w))), dv);
        w = vmovl_s8(vget_high_s8(x));
        v[4 * i + 2] = vmulq_n_f32(vcvtq_f32_s32(vmovl_s16(vget_low_s16(w))),
                                   dv);
        v[4 * i + 3] = vmulq_n_f32(vcvtq_f32_s32(vmovl_s16(
                                       vget_high_s16(w))), dv);
    }
}

void
llm_attn_vf_neon(float *dst, const uint8_t *v, size_t v_row, uint32_t n,
    uint32_t hv, llm_type_t t)
{
    int          q4 = t == LLM_TYPE_Q4_0;
    size_t       bs = q4 ? 18 : 34;
    uint32_t     i, d, c;
    float32x4_t  vv[8];

    for (i = 0; i < n; i++, dst += hv, v += v_row) {
        if (t == LLM_TYPE_F16) {
            for (d = 0; d < hv; d += 4) {
                llm_st4(dst + d, llm_ld4(v, d, hv - d, 1), hv - d);
            }
            continue;
        }
        for (d = 0; d < hv; d += 32) {
            llm_vq32(v + (d / 32) * bs, q4, vv);
            for (c = 0; c < 8; c++) {
                vst1q_f32(dst + d + c * 4, vv[c]);
            }
        }
    }
}

void
llm_attn_pvq_neon(float *o, uint32_t G, uint32_t hv, const uint8_t *v,
    size_t v_row, uint32_t n, llm_type_t t, const float *s, size_t lds)
{
    int          q4 = t == LLM_TYPE_Q4_0;
    size_t       bs = q4 ? 18 : 34;
    uint32_t     h, d0, tt, c;
    float32x4_t  vv[8], acc[8], a;

    for (d0 = 0; d0 < hv; d0 += 32) {
        for (h = 0; h < G; h++) {
            for (c = 0; c < 8; c++) {
                acc[c] = vld1q_f32(o + h * hv + d0 + c * 4);
            }
            for (tt = 0; tt < n; tt++) {
                llm_vq32(v + tt * v_row + (d0 / 32) * bs, q4, vv);
                a = vdupq_n_f32(s[h * lds + tt]);
                for (c = 0; c < 8; c++) {
                    acc[c] = vfmaq_f32(acc[c], a, vv[c]);
                }
            }
            for (c = 0; c < 8; c++) {
                vst1q_f32(o + h * hv + d0 + c * 4, acc[c]);
            }
        }
    }
}

/* exp(x) for x in [-87, 0] (and up to 87 for SwiGLU): the AVX2 kernel's
 * Cephes reduction and polynomial, 2^n built in the exponent bits. */
static inline float32x4_t
llm_exp4(float32x4_t x)
{
    float32x4_t  n, r, p;
    int32x4_t    e;

    x = vmaxq_f32(x, vdupq_n_f32(-87.0f));
    n = vrndnq_f32(vmulq_n_f32(x, 1.44269504088896341f));
    r = vfmsq_f32(x, n, vdupq_n_f32(0.693359375f));
    r = vfmsq_f32(r, n, vdupq_n_f32(-2.12194440e-4f));
    p = vdupq_n_f32(1.9875691500e-4f);
    p = vfmaq_f32(vdupq_n_f32(1.3981999507e-3f), p, r);
    p = vfmaq_f32(vdupq_n_f32(8.3334519073e-3f), p, r);
    p = vfmaq_f32(vdupq_n_f32(4.1665795894e-2f), p, r);
    p = vfmaq_f32(vdupq_n_f32(1.6666665459e-1f), p, r);
    p = vfmaq_f32(vdupq_n_f32(5.0000001201e-1f), p, r);
    p = vfmaq_f32(r, vmulq_f32(p, r), r);
    p = vaddq_f32(p, vdupq_n_f32(1.0f));
    e = vshlq_n_s32(vaddq_s32(vcvtnq_s32_f32(n), vdupq_n_s32(127)), 23);
    return vmulq_f32(p, vreinterpretq_f32_s32(e));
}

void
llm_attn_softmax_neon(float *s, uint32_t n)
{
    float32x4_t  mx = vdupq_n_f32(-INFINITY), sum = vdupq_n_f32(0.0f), v;
    float        m1, tot, inv;
    uint32_t     t, end = n & ~3u;

    for (t = 0; t < end; t += 4) {
        mx = vmaxq_f32(mx, vld1q_f32(s + t));
    }
    m1 = vmaxvq_f32(mx);
    for (t = end; t < n; t++) {
        m1 = s[t] > m1 ? s[t] : m1;
    }
    for (t = 0; t < end; t += 4) {
        v = llm_exp4(vsubq_f32(vld1q_f32(s + t), vdupq_n_f32(m1)));
        sum = vaddq_f32(sum, v);
        vst1q_f32(s + t, v);
    }
    tot = vaddvq_f32(sum);
    for (t = end; t < n; t++) {
        s[t] = expf(s[t] - m1);
        tot += s[t];
    }
    inv = 1.0f / tot;
    for (t = 0; t < n; t++) {
        s[t] *= inv;
    }
}

float
llm_attn_max_neon(const float *s, uint32_t n)
{
    float32x4_t  mx = vdupq_n_f32(-INFINITY);
    uint32_t     t;

    for (t = 0; t < n; t += 4) {
        mx = vmaxq_f32(mx, vld1q_f32(s + t));
    }
    return vmaxvq_f32(mx);
}

float
llm_attn_exps_neon(float *s, uint32_t n, float m)
{
    const float32x4_t  vm = vdupq_n_f32(m), ninf = vdupq_n_f32(-INFINITY);
    float32x4_t        sum = vdupq_n_f32(0.0f), v, e;
    uint32x4_t         live;
    uint32_t           t;

    for (t = 0; t < n; t += 4) {
        v = vld1q_f32(s + t);
        live = vmvnq_u32(vceqq_f32(v, ninf));
        e = vreinterpretq_f32_u32(vandq_u32(live, vreinterpretq_u32_f32(
                llm_exp4(vsubq_f32(v, vm)))));
        vst1q_f32(s + t, e);
        sum = vaddq_f32(sum, e);
    }
    return vaddvq_f32(sum);
}

void
llm_swiglu_neon(float *g, const float *u, size_t n)
{
    const float32x4_t  one = vdupq_n_f32(1.0f), lim = vdupq_n_f32(88.0f);
    float32x4_t        x, e;
    size_t             i;

    for (i = 0; i + 4 <= n; i += 4) {
        x = vld1q_f32(g + i);
        /* exp(-x), its argument at most 88 so 2^n stays a normal float
         * (n = 127); past 88.72 expf overflows and silu is -0 anyway */
        e = llm_exp4(vminq_f32(vnegq_f32(x), lim));
        vst1q_f32(g + i, vmulq_f32(vdivq_f32(x, vaddq_f32(one, e)),
                                   vld1q_f32(u + i)));
    }
    for (; i < n; i++) {
        g[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
    }
}
