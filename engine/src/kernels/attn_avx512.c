/*
 * AVX-512 attention kernels: 16 positions per register for q.k (K is
 * transposed per block), 16 head dims per register for p.v.
 */

#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "attn.h"

static inline __m512
llm_ld16(const void *base, size_t i, __mmask16 m, int f16)
{
    if (f16) {
        return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m,
                                   (const uint16_t *) base + i));
    }
    return _mm512_maskz_loadu_ps(m, (const float *) base + i);
}

/* NG query heads at once (NG a constant after inlining). */
static inline __attribute__((always_inline)) void
llm_qk_heads(const int NG, const float *q, uint32_t hd, const void *kt,
    uint32_t bt, uint32_t n, int f16, float scale, float *s, size_t lds)
{
    const float *qp[8];
    uint32_t     t;
    size_t       d;
    int          j;
    __m512       acc[8], kv;
    __mmask16    m;

    /* a base per head and one size_t index: with q[j * hd + d] in 32
     * bits every broadcast FMA took three integer ops to address
     * (perf: the q.k loop 1.7x the p.v loop's time for the same FMAs) */
#pragma GCC unroll 8
    for (j = 0; j < NG; j++) {
        qp[j] = q + (size_t) j * hd;
    }
    for (t = 0; t < n; t += 16) {
        m = n - t >= 16 ? 0xffff : (__mmask16) ((1u << (n - t)) - 1);
#pragma GCC unroll 8
        for (j = 0; j < NG; j++) {
            acc[j] = _mm512_setzero_ps();
        }
        for (d = 0; d < hd; d++) {
            kv = llm_ld16(kt, d * bt + t, m, f16);
#pragma GCC unroll 8
            for (j = 0; j < NG; j++) {
                acc[j] = _mm512_fmadd_ps(_mm512_set1_ps(qp[j][d]), kv,
                                         acc[j]);
            }
        }
#pragma GCC unroll 8
        for (j = 0; j < NG; j++) {
            _mm512_mask_storeu_ps(s + j * lds + t, m,
                                  _mm512_mul_ps(acc[j],
                                                _mm512_set1_ps(scale)));
        }
    }
}

static inline __attribute__((always_inline)) void
llm_qk_all(const float *q, uint32_t G, uint32_t hd, const void *kt,
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

/* f16 a constant in each copy: no test of it in the inner loops */
void
llm_attn_qk_avx512(const float *q, uint32_t G, uint32_t hd, const void *kt,
    uint32_t bt, uint32_t n, int f16, float scale, float *s, size_t lds)
{
    if (f16) {
        llm_qk_all(q, G, hd, kt, bt, n, 1, scale, s, lds);
    } else {
        llm_qk_all(q, G, hd, kt, bt, n, 0, scale, s, lds);
    }
}

/* NG heads x NC registers of 16 dims from d0 over all n positions. */
static inline __attribute__((always_inline)) void
llm_pv_heads(const int NG, const int NC, float *o, uint32_t hv, uint32_t d0,
    const void *v, size_t v_stride, uint32_t n, int f16, const float *s,
    size_t lds)
{
    __m512    acc[8][4], vv[4], a;
    __mmask16 m[4];
    uint32_t  t;
    int       j, c;

#pragma GCC unroll 8
    for (c = 0; c < NC; c++) {
        uint32_t left = hv > d0 + c * 16 ? hv - d0 - c * 16 : 0;

        m[c] = left >= 16 ? 0xffff : (__mmask16) ((1u << left) - 1);
#pragma GCC unroll 8
        for (j = 0; j < NG; j++) {
            acc[j][c] = _mm512_maskz_loadu_ps(m[c], o + j * hv + d0 + c * 16);
        }
    }
    for (t = 0; t < n; t++) {
#pragma GCC unroll 8
        for (c = 0; c < NC; c++) {
            vv[c] = llm_ld16(v, t * v_stride + d0 + c * 16, m[c], f16);
        }
#pragma GCC unroll 8
        for (j = 0; j < NG; j++) {
            a = _mm512_set1_ps(s[j * lds + t]);
#pragma GCC unroll 8
            for (c = 0; c < NC; c++) {
                acc[j][c] = _mm512_fmadd_ps(a, vv[c], acc[j][c]);
            }
        }
    }
#pragma GCC unroll 8
    for (c = 0; c < NC; c++) {
#pragma GCC unroll 8
        for (j = 0; j < NG; j++) {
            _mm512_mask_storeu_ps(o + j * hv + d0 + c * 16, m[c], acc[j][c]);
        }
    }
}

/*
 * Heads in eights over 32 dims at a time (a V load feeds 8 FMAs, 16
 * accumulators), the rest in fours over 64 dims, then one by one.
 */
static inline __attribute__((always_inline)) void
llm_pv_all(float *o, uint32_t G, uint32_t hv, const void *v,
    size_t v_stride, uint32_t n, int f16, const float *s, size_t lds)
{
    uint32_t  h = 0, d0;

    for ( ; h + 8 <= G; h += 8) {
        for (d0 = 0; d0 < hv; d0 += 32) {
            llm_pv_heads(8, 2, o + h * hv, hv, d0, v, v_stride, n, f16,
                         s + h * lds, lds);
        }
    }
    for (d0 = 0; d0 < hv; d0 += 64) {
        uint32_t  k = h;

        for ( ; k + 4 <= G; k += 4) {
            llm_pv_heads(4, 4, o + k * hv, hv, d0, v, v_stride, n, f16,
                         s + k * lds, lds);
        }
        for ( ; k < G; k++) {
            llm_pv_heads(1, 4, o + k * hv, hv, d0, v, v_stride, n, f16,
                         s + k * lds, lds);
        }
    }
}

void
llm_attn_pv_avx512(float *o, uint32_t G, uint32_t hv, const void *v,
    size_t v_stride, uint32_t n, int f16, const float *s, size_t lds)
{
    if (f16) {
        llm_pv_all(o, G, hv, v, v_stride, n, 1, s, lds);
    } else {
        llm_pv_all(o, G, hv, v, v_stride, n, 0, s, lds);
    }
}

/* NH heads x ND dims of p.v from transposed K over all blocks, lanes
 * holding positions, reduced once at the end. */
static inline __attribute__((always_inline)) void
llm_pvt_tile(const int NH, const int ND, float *o, uint32_t hv, uint32_t d0,
    const void *const *kb, uint32_t nb, uint32_t bt, uint32_t n_last,
    int f16, const float *s, size_t lds)
{
    __m512     acc[4][4], pv[4], kv[4];
    __mmask16  m;
    uint32_t   i, t, n;
    int        h, d;

#pragma GCC unroll 4
    for (h = 0; h < NH; h++) {
#pragma GCC unroll 4
        for (d = 0; d < ND; d++) {
            acc[h][d] = _mm512_setzero_ps();
        }
    }
    for (i = 0; i < nb; i++) {
        n = i + 1 == nb ? n_last : bt;
        for (t = 0; t < n; t += 16) {
            m = n - t >= 16 ? 0xffff : (__mmask16) ((1u << (n - t)) - 1);
#pragma GCC unroll 4
            for (h = 0; h < NH; h++) {
                pv[h] = _mm512_maskz_loadu_ps(m, s + h * lds + i * bt + t);
            }
#pragma GCC unroll 4
            for (d = 0; d < ND; d++) {
                kv[d] = llm_ld16(kb[i], (size_t) (d0 + d) * bt + t, m, f16);
            }
#pragma GCC unroll 4
            for (h = 0; h < NH; h++) {
#pragma GCC unroll 4
                for (d = 0; d < ND; d++) {
                    acc[h][d] = _mm512_fmadd_ps(pv[h], kv[d], acc[h][d]);
                }
            }
        }
    }
#pragma GCC unroll 4
    for (h = 0; h < NH; h++) {
#pragma GCC unroll 4
        for (d = 0; d < ND; d++) {
            o[h * hv + d0 + d] += _mm512_reduce_add_ps(acc[h][d]);
        }
    }
}

void
llm_attn_pvt_avx512(float *o, uint32_t G, uint32_t hv, const void *const *kb,
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

static inline __m512
llm_i8x16(__m128i b)
{
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(b));
}

static inline __attribute__((always_inline)) void
llm_qkq_heads(const int NG, const float *q, uint32_t hd, const uint8_t *k,
    uint32_t bt, uint32_t n, int q4, float scale, float *s, size_t lds)
{
    const uint16_t  *sc = (const uint16_t *) (k + (q4 ? (size_t) hd * bt / 2
                                                     : (size_t) hd * bt));
    const __m128i    m4 = _mm_set1_epi8(15), o8 = _mm_set1_epi8(8);
    uint32_t         t, d, b;
    int              j;
    __m512           acc[8], accb[8], k0, k1, dk;
    __m128i          x;
    __mmask16        m;

    for (t = 0; t < n; t += 16) {
        m = n - t >= 16 ? 0xffff : (__mmask16) ((1u << (n - t)) - 1);
#pragma GCC unroll 8
        for (j = 0; j < NG; j++) {
            acc[j] = _mm512_setzero_ps();
        }
        for (b = 0; b < hd / 32; b++) {
#pragma GCC unroll 8
            for (j = 0; j < NG; j++) {
                accb[j] = _mm512_setzero_ps();
            }
            {
                /* byte j: dims 32 b + j (low nibble) and + 16 (high) */
                for (d = b * 32; d < b * 32 + 16; d++) {
                    x = _mm_loadu_si128((const __m128i *)
                            (k + (size_t) (b * 16 + d % 32) * bt + t));
                    k0 = llm_i8x16(_mm_sub_epi8(_mm_and_si128(x, m4), o8));
                    k1 = llm_i8x16(_mm_sub_epi8(_mm_and_si128(
                             _mm_srli_epi16(x, 4), m4), o8));
#pragma GCC unroll 8
                    for (j = 0; j < NG; j++) {
                        const float *qj = q + (size_t) j * hd + d;

                        accb[j] = _mm512_fmadd_ps(_mm512_set1_ps(qj[0]), k0,
                                                  accb[j]);
                        accb[j] = _mm512_fmadd_ps(_mm512_set1_ps(qj[16]), k1,
                                                  accb[j]);
                    }
                }
            }
            dk = _mm512_cvtph_ps(_mm256_loadu_si256(
                     (const __m256i *) (sc + (size_t) b * bt + t)));
#pragma GCC unroll 8
            for (j = 0; j < NG; j++) {
                acc[j] = _mm512_fmadd_ps(accb[j], dk, acc[j]);
            }
        }
#pragma GCC unroll 8
        for (j = 0; j < NG; j++) {
            _mm512_mask_storeu_ps(s + j * lds + t, m,
                                  _mm512_mul_ps(acc[j],
                                                _mm512_set1_ps(scale)));
        }
    }
}

/* Q4_0 only (a Q8_0 cache goes through llm_attn_qk8_avx512). */
void
llm_attn_qkq_avx512(const float *q, uint32_t G, uint32_t hd,
    const uint8_t *k, uint32_t bt, uint32_t n, llm_type_t t, float scale,
    float *s, size_t lds)
{
    int       q4 = 1;
    uint32_t  h = 0;

    (void) t;

    for ( ; h + 8 <= G; h += 8) {
        llm_qkq_heads(8, q + h * hd, hd, k, bt, n, q4, scale, s + h * lds,
                      lds);
    }
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
 * NG heads' q.k against a Q8_0 K, 16 positions a register: per 4 dims one
 * 64-byte load of K (16 positions x 4 dims), made unsigned (K + 128) for
 * vpdpbusd, and one vpdpbusd per head with that head's 4 q bytes
 * broadcast; each head's block sum starts at -128 x the sum of its q
 * block, which takes the offset off exactly.  Whole 16-position groups
 * are read (the block's positions are a multiple of 16); the stores are
 * masked to n.
 */
static inline __attribute__((always_inline)) void
llm_qk8_heads(const int NG, const llm_attn_q8_t *q, uint32_t nbk,
    const uint8_t *k, uint32_t bt, uint32_t n, float scale, float *s,
    size_t lds)
{
    const uint16_t  *sc = (const uint16_t *) (k + (size_t) nbk * 32 * bt);
    const __m512i    x80 = _mm512_set1_epi8((char) 0x80);
    uint32_t         t, b;
    int              j, c;
    __m512i          ai[8], kv;
    __m512           acc[8], dk;
    __mmask16        m;

    for (t = 0; t < n; t += 16) {
        m = n - t >= 16 ? 0xffff : (__mmask16) ((1u << (n - t)) - 1);
#pragma GCC unroll 8
        for (j = 0; j < NG; j++) {
            acc[j] = _mm512_setzero_ps();
        }
        for (b = 0; b < nbk; b++) {
#pragma GCC unroll 8
            for (j = 0; j < NG; j++) {
                ai[j] = _mm512_set1_epi32(-128 * q[j * nbk + b].s);
            }
#pragma GCC unroll 8
            for (c = 0; c < 8; c++) {
                kv = _mm512_xor_si512(_mm512_loadu_si512(
                         k + ((size_t) (b * 8 + c) * bt + t) * 4), x80);
#pragma GCC unroll 8
                for (j = 0; j < NG; j++) {
                    int32_t  qw;

                    memcpy(&qw, q[j * nbk + b].qs + 4 * c, 4);
                    ai[j] = _mm512_dpbusd_epi32(ai[j], kv,
                                                _mm512_set1_epi32(qw));
                }
            }
            dk = _mm512_cvtph_ps(_mm256_loadu_si256(
                     (const __m256i *) (sc + (size_t) b * bt + t)));
#pragma GCC unroll 8
            for (j = 0; j < NG; j++) {
                acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ai[j]),
                                         _mm512_mul_ps(dk, _mm512_set1_ps(
                                             q[j * nbk + b].d)),
                                         acc[j]);
            }
        }
#pragma GCC unroll 8
        for (j = 0; j < NG; j++) {
            _mm512_mask_storeu_ps(s + j * lds + t, m,
                                  _mm512_mul_ps(acc[j],
                                                _mm512_set1_ps(scale)));
        }
    }
}

void
llm_attn_qk8_avx512(const llm_attn_q8_t *q, uint32_t G, uint32_t hd,
    const uint8_t *k, uint32_t bt, uint32_t n, float scale, float *s,
    size_t lds)
{
    uint32_t  h = 0, nbk = hd / 32;

    for ( ; h + 8 <= G; h += 8) {
        llm_qk8_heads(8, q + h * nbk, nbk, k, bt, n, scale, s + h * lds,
                      lds);
    }
    for ( ; h + 4 <= G; h += 4) {
        llm_qk8_heads(4, q + h * nbk, nbk, k, bt, n, scale, s + h * lds,
                      lds);
    }
    for ( ; h < G; h++) {
        llm_qk8_heads(1, q + h * nbk, nbk, k, bt, n, scale, s + h * lds,
                      lds);
    }
}

/* One ggml block (32 values) of a V row, times its scale: two registers. */
static inline void
llm_vq32(const uint8_t *blk, int q4, __m512 *v0, __m512 *v1)
{
    __m512   dv = _mm512_set1_ps(_cvtsh_ss(*(const uint16_t *) blk));
    __m128i  b, lo, hi;

    if (!q4) {
        *v0 = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(
                  _mm_loadu_si128((const __m128i *) (blk + 2)))), dv);
        *v1 = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(
                  _mm_loadu_si128((const __m128i *) (blk + 18)))), dv);
        return;
    }
    b = _mm_loadu_si128((const __m128i *) (blk + 2));
    lo = _mm_sub_epi8(_mm_and_si128(b, _mm_set1_epi8(15)), _mm_set1_epi8(8));
    hi = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(b, 4), _mm_set1_epi8(15)),
                      _mm_set1_epi8(8));
    *v0 = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(lo)), dv);
    *v1 = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(hi)), dv);
}

void
llm_attn_vf_avx512(float *dst, const uint8_t *v, size_t v_row, uint32_t n,
    uint32_t hv, llm_type_t t)
{
    int       q4 = t == LLM_TYPE_Q4_0;
    size_t    bs = q4 ? 18 : 34;
    uint32_t  i, d;
    __m512    v0, v1;
    __mmask16 m;

    for (i = 0; i < n; i++, dst += hv, v += v_row) {
        if (t == LLM_TYPE_F16) {
            for (d = 0; d < hv; d += 16) {
                m = hv - d >= 16 ? 0xffff : (__mmask16) ((1u << (hv - d)) - 1);
                _mm512_mask_storeu_ps(dst + d, m, llm_ld16(v, d, m, 1));
            }
            continue;
        }
        for (d = 0; d < hv; d += 32) {
            llm_vq32(v + (d / 32) * bs, q4, &v0, &v1);
            _mm512_storeu_ps(dst + d, v0);
            _mm512_storeu_ps(dst + d + 16, v1);
        }
    }
}

/* NG heads x one block (32 dims: two registers) at d0 over n rows. */
static inline __attribute__((always_inline)) void
llm_pvq_heads(const int NG, float *o, uint32_t hv, uint32_t d0,
    const uint8_t *v, size_t v_row, uint32_t n, int q4, const float *s,
    size_t lds)
{
    size_t    bs = q4 ? 18 : 34;
    __m512    acc[8][2], vv[2], a;
    uint32_t  t;
    int       j;

#pragma GCC unroll 8
    for (j = 0; j < NG; j++) {
        acc[j][0] = _mm512_loadu_ps(o + j * hv + d0);
        acc[j][1] = _mm512_loadu_ps(o + j * hv + d0 + 16);
    }
    for (t = 0; t < n; t++) {
        llm_vq32(v + t * v_row + (d0 / 32) * bs, q4, &vv[0], &vv[1]);
#pragma GCC unroll 8
        for (j = 0; j < NG; j++) {
            a = _mm512_set1_ps(s[j * lds + t]);
            acc[j][0] = _mm512_fmadd_ps(a, vv[0], acc[j][0]);
            acc[j][1] = _mm512_fmadd_ps(a, vv[1], acc[j][1]);
        }
    }
#pragma GCC unroll 8
    for (j = 0; j < NG; j++) {
        _mm512_storeu_ps(o + j * hv + d0, acc[j][0]);
        _mm512_storeu_ps(o + j * hv + d0 + 16, acc[j][1]);
    }
}

/* Heads in eights (a block's dequantization feeds 16 FMAs), then fours,
 * then one by one; a block (32 dims) at a time. */
void
llm_attn_pvq_avx512(float *o, uint32_t G, uint32_t hv, const uint8_t *v,
    size_t v_row, uint32_t n, llm_type_t t, const float *s, size_t lds)
{
    int       q4 = t == LLM_TYPE_Q4_0;
    uint32_t  h, d0;

    for (d0 = 0; d0 < hv; d0 += 32) {
        h = 0;
        for ( ; h + 8 <= G; h += 8) {
            llm_pvq_heads(8, o + h * hv, hv, d0, v, v_row, n, q4,
                          s + h * lds, lds);
        }
        for ( ; h + 4 <= G; h += 4) {
            llm_pvq_heads(4, o + h * hv, hv, d0, v, v_row, n, q4,
                          s + h * lds, lds);
        }
        for ( ; h < G; h++) {
            llm_pvq_heads(1, o + h * hv, hv, d0, v, v_row, n, q4,
                          s + h * lds, lds);
        }
    }
}

/* exp(x) for x in [-87, 0] (softmax after subtracting the max): Cephes
 * range reduction and polynomial, about 1 ulp; 2^n by vscalefps. */
static inline __m512
llm_exp16(__m512 x)
{
    const __m512  l2e = _mm512_set1_ps(1.44269504088896341f);
    __m512        n, r, p;

    x = _mm512_max_ps(x, _mm512_set1_ps(-87.0f));
    n = _mm512_roundscale_ps(_mm512_mul_ps(x, l2e),
                             _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    p = _mm512_set1_ps(1.9875691500e-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    p = _mm512_fmadd_ps(_mm512_mul_ps(p, r), r, r);
    p = _mm512_add_ps(p, _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(p, n);
}

void
llm_attn_softmax_avx512(float *s, uint32_t n)
{
    __m512     mx = _mm512_set1_ps(-INFINITY), sum = _mm512_setzero_ps();
    __m512     v, m1;
    __mmask16  m;
    uint32_t   t;
    float      inv;

    for (t = 0; t < n; t += 16) {
        m = n - t >= 16 ? 0xffff : (__mmask16) ((1u << (n - t)) - 1);
        mx = _mm512_mask_max_ps(mx, m, mx, _mm512_maskz_loadu_ps(m, s + t));
    }
    m1 = _mm512_set1_ps(_mm512_reduce_max_ps(mx));
    for (t = 0; t < n; t += 16) {
        m = n - t >= 16 ? 0xffff : (__mmask16) ((1u << (n - t)) - 1);
        v = llm_exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, s + t), m1));
        sum = _mm512_mask_add_ps(sum, m, sum, v);
        _mm512_mask_storeu_ps(s + t, m, v);
    }
    inv = 1.0f / _mm512_reduce_add_ps(sum);
    v = _mm512_set1_ps(inv);
    for (t = 0; t < n; t += 16) {
        m = n - t >= 16 ? 0xffff : (__mmask16) ((1u << (n - t)) - 1);
        _mm512_mask_storeu_ps(s + t, m,
                              _mm512_mul_ps(_mm512_maskz_loadu_ps(m, s + t),
                                            v));
    }
}

float
llm_attn_max_avx512(const float *s, uint32_t n)
{
    __m512    mx = _mm512_set1_ps(-INFINITY);
    uint32_t  t;

    for (t = 0; t < n; t += 16) {
        mx = _mm512_max_ps(mx, _mm512_loadu_ps(s + t));
    }
    return _mm512_reduce_max_ps(mx);
}

float
llm_attn_exps_avx512(float *s, uint32_t n, float m)
{
    const __m512  vm = _mm512_set1_ps(m), ninf = _mm512_set1_ps(-INFINITY);
    __m512        sum = _mm512_setzero_ps(), v, e;
    __mmask16     k;
    uint32_t      t;

    for (t = 0; t < n; t += 16) {
        v = _mm512_loadu_ps(s + t);
        k = _mm512_cmp_ps_mask(v, ninf, _CMP_NEQ_OQ);
        e = _mm512_maskz_mov_ps(k, llm_exp16(_mm512_sub_ps(v, vm)));
        _mm512_storeu_ps(s + t, e);
        sum = _mm512_add_ps(sum, e);
    }
    return _mm512_reduce_add_ps(sum);
}

void
llm_swiglu_avx512(float *g, const float *u, size_t n)
{
    const __m512  one = _mm512_set1_ps(1.0f), lim = _mm512_set1_ps(88.0f);
    __m512        x, e;
    __mmask16     m;
    size_t        i;

    for (i = 0; i < n; i += 16) {
        m = n - i >= 16 ? 0xffff : (__mmask16) ((1u << (n - i)) - 1);
        x = _mm512_maskz_loadu_ps(m, g + i);
        /* exp(-x), its argument at most 88 so 2^n stays a normal float
         * (n = 127); past 88.72 expf overflows and silu is -0 anyway */
        e = llm_exp16(_mm512_min_ps(_mm512_sub_ps(_mm512_setzero_ps(), x),
                                    lim));
        _mm512_mask_storeu_ps(g + i, m,
                              _mm512_mul_ps(_mm512_div_ps(x,
                                                _mm512_add_ps(one, e)),
                                            _mm512_maskz_loadu_ps(m, u + i)));
    }
}
