/*
 * AVX2 attention kernels: 8 positions per register for q.k (K is
 * transposed per block), 8 head dims per register for p.v.  Tails (fewer
 * than 8 positions or dims) go through a zero-padded copy.
 */

#include <string.h>
#include <immintrin.h>
#include <math.h>

#include "attn.h"

static inline __m256
llm_ld8(const void *base, size_t i, uint32_t cnt, int f16)
{
    float     tmp[8];
    uint16_t  th[8];
    uint32_t  k;

    if (cnt >= 8) {
        if (f16) {
            return _mm256_cvtph_ps(_mm_loadu_si128(
                       (const __m128i *) ((const uint16_t *) base + i)));
        }
        return _mm256_loadu_ps((const float *) base + i);
    }
    if (f16) {
        memset(th, 0, sizeof(th));
        memcpy(th, (const uint16_t *) base + i, cnt * 2);
        return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *) th));
    }
    for (k = 0; k < 8; k++) {
        tmp[k] = k < cnt ? ((const float *) base)[i + k] : 0.0f;
    }
    return _mm256_loadu_ps(tmp);
}

static inline void
llm_st8(float *dst, __m256 v, uint32_t cnt)
{
    float  tmp[8];

    if (cnt >= 8) {
        _mm256_storeu_ps(dst, v);
        return;
    }
    _mm256_storeu_ps(tmp, v);
    memcpy(dst, tmp, cnt * sizeof(float));
}

static inline __attribute__((always_inline)) void
llm_qk_heads(const int NG, const float *q, uint32_t hd, const void *kt,
    uint32_t bt, uint32_t n, int f16, float scale, float *s, size_t lds)
{
    uint32_t  t, d, cnt;
    int       j;
    __m256    acc[8], kv;

    for (t = 0; t < n; t += 8) {
        cnt = n - t;
#pragma GCC unroll 8
        for (j = 0; j < NG; j++) {
            acc[j] = _mm256_setzero_ps();
        }
        for (d = 0; d < hd; d++) {
            kv = llm_ld8(kt, (size_t) d * bt + t, cnt, f16);
#pragma GCC unroll 8
            for (j = 0; j < NG; j++) {
                acc[j] = _mm256_fmadd_ps(
                             _mm256_set1_ps(q[(size_t) j * hd + d]), kv,
                             acc[j]);
            }
        }
#pragma GCC unroll 8
        for (j = 0; j < NG; j++) {
            llm_st8(s + j * lds + t,
                    _mm256_mul_ps(acc[j], _mm256_set1_ps(scale)), cnt);
        }
    }
}

void
llm_attn_qk_avx2(const float *q, uint32_t G, uint32_t hd, const void *kt,
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

/* NG heads x 32 dims (4 registers each) over all n positions. */
static inline __attribute__((always_inline)) void
llm_pv_heads(const int NG, float *o, uint32_t hv, uint32_t d0,
    const void *v, size_t v_stride, uint32_t n, int f16, const float *s,
    size_t lds)
{
    __m256    acc[2][4], vv[4], a;
    uint32_t  t, c, cnt[4];
    int       j;

#pragma GCC unroll 8
    for (c = 0; c < 4; c++) {
        cnt[c] = hv > d0 + c * 8 ? hv - d0 - c * 8 : 0;
#pragma GCC unroll 8
        for (j = 0; j < NG; j++) {
            acc[j][c] = cnt[c] ? llm_ld8(o + j * hv, d0 + c * 8, cnt[c], 0)
                               : _mm256_setzero_ps();
        }
    }
    for (t = 0; t < n; t++) {
#pragma GCC unroll 8
        for (c = 0; c < 4; c++) {
            vv[c] = cnt[c] ? llm_ld8(v, t * v_stride + d0 + c * 8, cnt[c],
                                     f16)
                           : _mm256_setzero_ps();
        }
#pragma GCC unroll 8
        for (j = 0; j < NG; j++) {
            a = _mm256_set1_ps(s[j * lds + t]);
#pragma GCC unroll 8
            for (c = 0; c < 4; c++) {
                acc[j][c] = _mm256_fmadd_ps(a, vv[c], acc[j][c]);
            }
        }
    }
#pragma GCC unroll 8
    for (c = 0; c < 4; c++) {
        if (cnt[c] == 0) {
            continue;
        }
#pragma GCC unroll 8
        for (j = 0; j < NG; j++) {
            llm_st8(o + j * hv + d0 + c * 8, acc[j][c], cnt[c]);
        }
    }
}

void
llm_attn_pv_avx2(float *o, uint32_t G, uint32_t hv, const void *v,
    size_t v_stride, uint32_t n, int f16, const float *s, size_t lds)
{
    uint32_t  h, d0;

    for (d0 = 0; d0 < hv; d0 += 32) {
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

static inline float llm_hsum8(__m256 v);

/* NH heads x ND dims of p.v from transposed K, lanes holding positions. */
static inline __attribute__((always_inline)) void
llm_pvt_tile(const int NH, const int ND, float *o, uint32_t hv, uint32_t d0,
    const void *const *kb, uint32_t nb, uint32_t bt, uint32_t n_last,
    int f16, const float *s, size_t lds)
{
    __m256     acc[3][4], pv[3], kv[4];
    uint32_t   i, t, n;
    int        h, d;

#pragma GCC unroll 4
    for (h = 0; h < NH; h++) {
#pragma GCC unroll 4
        for (d = 0; d < ND; d++) {
            acc[h][d] = _mm256_setzero_ps();
        }
    }
    for (i = 0; i < nb; i++) {
        n = i + 1 == nb ? n_last : bt;
        for (t = 0; t < n; t += 8) {
#pragma GCC unroll 4
            for (h = 0; h < NH; h++) {
                pv[h] = llm_ld8(s + h * lds + i * bt, t, n - t, 0);
            }
#pragma GCC unroll 4
            for (d = 0; d < ND; d++) {
                kv[d] = llm_ld8(kb[i], (size_t) (d0 + d) * bt + t, n - t,
                                f16);
            }
#pragma GCC unroll 4
            for (h = 0; h < NH; h++) {
#pragma GCC unroll 4
                for (d = 0; d < ND; d++) {
                    acc[h][d] = _mm256_fmadd_ps(pv[h], kv[d], acc[h][d]);
                }
            }
        }
    }
#pragma GCC unroll 4
    for (h = 0; h < NH; h++) {
#pragma GCC unroll 4
        for (d = 0; d < ND; d++) {
            o[h * hv + d0 + d] += llm_hsum8(acc[h][d]);
        }
    }
}

void
llm_attn_pvt_avx2(float *o, uint32_t G, uint32_t hv, const void *const *kb,
    uint32_t nb, uint32_t bt, uint32_t n_last, int f16, const float *s,
    size_t lds)
{
    uint32_t  h, d0;

    for (d0 = 0; d0 + 4 <= hv; d0 += 4) {
        for (h = 0; h + 3 <= G; h += 3) {
            llm_pvt_tile(3, 4, o + h * hv, hv, d0, kb, nb, bt, n_last, f16,
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

static inline __m256
llm_i8x8(__m128i b)
{
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b));
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
    __m256           acc[4], accb[4], k0, k1, dk;
    __m128i          x;

    for (t = 0; t < n; t += 8) {
#pragma GCC unroll 8
        for (j = 0; j < NG; j++) {
            acc[j] = _mm256_setzero_ps();
        }
        for (b = 0; b < hd / 32; b++) {
#pragma GCC unroll 8
            for (j = 0; j < NG; j++) {
                accb[j] = _mm256_setzero_ps();
            }
            {
                for (d = b * 32; d < b * 32 + 16; d++) {
                    x = _mm_loadl_epi64((const __m128i *)
                            (k + (size_t) (b * 16 + d % 32) * bt + t));
                    k0 = llm_i8x8(_mm_sub_epi8(_mm_and_si128(x, m4), o8));
                    k1 = llm_i8x8(_mm_sub_epi8(_mm_and_si128(
                             _mm_srli_epi16(x, 4), m4), o8));
#pragma GCC unroll 8
                    for (j = 0; j < NG; j++) {
                        const float *qj = q + (size_t) j * hd + d;

                        accb[j] = _mm256_fmadd_ps(_mm256_set1_ps(qj[0]), k0,
                                                  accb[j]);
                        accb[j] = _mm256_fmadd_ps(_mm256_set1_ps(qj[16]), k1,
                                                  accb[j]);
                    }
                }
            }
            dk = _mm256_cvtph_ps(_mm_loadu_si128(
                     (const __m128i *) (sc + (size_t) b * bt + t)));
#pragma GCC unroll 8
            for (j = 0; j < NG; j++) {
                acc[j] = _mm256_fmadd_ps(accb[j], dk, acc[j]);
            }
        }
#pragma GCC unroll 8
        for (j = 0; j < NG; j++) {
            llm_st8(s + j * lds + t, _mm256_mul_ps(acc[j],
                                                   _mm256_set1_ps(scale)),
                    n - t);
        }
    }
}

/* Q4_0 only (a Q8_0 cache goes through llm_attn_qk8_avx2). */
void
llm_attn_qkq_avx2(const float *q, uint32_t G, uint32_t hd, const uint8_t *k,
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
 * NG heads' q.k against a Q8_0 K, 8 positions a register: per 4 dims one
 * 32-byte load (8 positions x 4 dims); per head vpmaddubsw of |K| by q's
 * 4 bytes broadcast with K's signs (|k q| <= 127 x 127, a pair fits in
 * int16), vpmaddwd by ones to a 32-bit lane per position.  Whole groups
 * of 8 positions are read (the block's positions are a multiple of 16).
 */
static inline __attribute__((always_inline)) void
llm_qk8_heads(const int NG, const llm_attn_q8_t *q, uint32_t nbk,
    const uint8_t *k, uint32_t bt, uint32_t n, float scale, float *s,
    size_t lds)
{
    const uint16_t  *sc = (const uint16_t *) (k + (size_t) nbk * 32 * bt);
    const __m256i    one = _mm256_set1_epi16(1);
    uint32_t         t, b;
    int              j, c;
    __m256i          ai[4], kv, ka;
    __m256           acc[4], dk;
    int32_t          qw;

    for (t = 0; t < n; t += 8) {
#pragma GCC unroll 8
        for (j = 0; j < NG; j++) {
            acc[j] = _mm256_setzero_ps();
        }
        for (b = 0; b < nbk; b++) {
#pragma GCC unroll 8
            for (j = 0; j < NG; j++) {
                ai[j] = _mm256_setzero_si256();
            }
            for (c = 0; c < 8; c++) {
                kv = _mm256_loadu_si256((const __m256i *)
                         (k + ((size_t) (b * 8 + c) * bt + t) * 4));
                ka = _mm256_sign_epi8(kv, kv);
#pragma GCC unroll 8
                for (j = 0; j < NG; j++) {
                    memcpy(&qw, q[j * nbk + b].qs + 4 * c, 4);
                    ai[j] = _mm256_add_epi32(ai[j], _mm256_madd_epi16(
                                _mm256_maddubs_epi16(ka, _mm256_sign_epi8(
                                    _mm256_set1_epi32(qw), kv)), one));
                }
            }
            dk = _mm256_cvtph_ps(_mm_loadu_si128(
                     (const __m128i *) (sc + (size_t) b * bt + t)));
#pragma GCC unroll 8
            for (j = 0; j < NG; j++) {
                acc[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(ai[j]),
                                         _mm256_mul_ps(dk, _mm256_set1_ps(
                                             q[j * nbk + b].d)),
                                         acc[j]);
            }
        }
#pragma GCC unroll 8
        for (j = 0; j < NG; j++) {
            llm_st8(s + j * lds + t, _mm256_mul_ps(acc[j],
                                                   _mm256_set1_ps(scale)),
                    n - t);
        }
    }
}

void
llm_attn_qk8_avx2(const llm_attn_q8_t *q, uint32_t G, uint32_t hd,
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

/* One ggml block (32 values) of a V row, times its scale: four registers. */
static inline void
llm_vq32(const uint8_t *blk, int q4, __m256 *v)
{
    __m256   dv = _mm256_set1_ps(_cvtsh_ss(*(const uint16_t *) blk));
    __m128i  b, lo, hi;

    if (!q4) {
        lo = _mm_loadu_si128((const __m128i *) (blk + 2));
        hi = _mm_loadu_si128((const __m128i *) (blk + 18));
    } else {
        b = _mm_loadu_si128((const __m128i *) (blk + 2));
        lo = _mm_sub_epi8(_mm_and_si128(b, _mm_set1_epi8(15)),
                          _mm_set1_epi8(8));
        hi = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(b, 4),
                                        _mm_set1_epi8(15)),
                          _mm_set1_epi8(8));
    }
    v[0] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(lo)), dv);
    v[1] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(
               _mm_srli_si128(lo, 8))), dv);
    v[2] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(hi)), dv);
    v[3] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(
               _mm_srli_si128(hi, 8))), dv);
}

void
llm_attn_vf_avx2(float *dst, const uint8_t *v, size_t v_row, uint32_t n,
    uint32_t hv, llm_type_t t)
{
    int       q4 = t == LLM_TYPE_Q4_0;
    size_t    bs = q4 ? 18 : 34;
    uint32_t  i, d, c;
    __m256    vv[4];

    for (i = 0; i < n; i++, dst += hv, v += v_row) {
        if (t == LLM_TYPE_F16) {
            for (d = 0; d < hv; d += 8) {
                llm_st8(dst + d, llm_ld8(v, d, hv - d, 1), hv - d);
            }
            continue;
        }
        for (d = 0; d < hv; d += 32) {
            llm_vq32(v + (d / 32) * bs, q4, vv);
            for (c = 0; c < 4; c++) {
                _mm256_storeu_ps(dst + d + c * 8, vv[c]);
            }
        }
    }
}

/* NG heads x one block (32 dims) from dim d0 over n rows. */
static inline __attribute__((always_inline)) void
llm_pvq_heads(const int NG, float *o, uint32_t hv, uint32_t d0,
    const uint8_t *v, size_t v_row, uint32_t n, int q4, const float *s,
    size_t lds)
{
    size_t    bs = q4 ? 18 : 34;
    __m256    acc[3][4], vv[4], a;
    uint32_t  t, c;
    int       j;

#pragma GCC unroll 8
    for (j = 0; j < NG; j++) {
        for (c = 0; c < 4; c++) {
            acc[j][c] = _mm256_loadu_ps(o + j * hv + d0 + c * 8);
        }
    }
    for (t = 0; t < n; t++) {
        llm_vq32(v + t * v_row + (d0 / 32) * bs, q4, vv);
#pragma GCC unroll 8
        for (j = 0; j < NG; j++) {
            a = _mm256_set1_ps(s[j * lds + t]);
            for (c = 0; c < 4; c++) {
                acc[j][c] = _mm256_fmadd_ps(a, vv[c], acc[j][c]);
            }
        }
    }
#pragma GCC unroll 8
    for (j = 0; j < NG; j++) {
        for (c = 0; c < 4; c++) {
            _mm256_storeu_ps(o + j * hv + d0 + c * 8, acc[j][c]);
        }
    }
}

void
llm_attn_pvq_avx2(float *o, uint32_t G, uint32_t hv, const uint8_t *v,
    size_t v_row, uint32_t n, llm_type_t t, const float *s, size_t lds)
{
    int       q4 = t == LLM_TYPE_Q4_0;
    uint32_t  h, d0;

    for (d0 = 0; d0 < hv; d0 += 32) {
        h = 0;
        for ( ; h + 3 <= G; h += 3) {
            llm_pvq_heads(3, o + h * hv, hv, d0, v, v_row, n, q4,
                          s + h * lds, lds);
        }
        for ( ; h < G; h++) {
            llm_pvq_heads(1, o + h * hv, hv, d0, v, v_row, n, q4,
                          s + h * lds, lds);
        }
    }
}

/* exp(x) for x in [-87, 0]: Cephes reduction and polynomial, 2^n built in
 * the exponent bits. */
static inline __m256
llm_exp8(__m256 x)
{
    __m256   n, r, p;
    __m256i  e;

    x = _mm256_max_ps(x, _mm256_set1_ps(-87.0f));
    n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    p = _mm256_fmadd_ps(_mm256_mul_ps(p, r), r, r);
    p = _mm256_add_ps(p, _mm256_set1_ps(1.0f));
    e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n),
                                           _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

void
llm_attn_softmax_avx2(float *s, uint32_t n)
{
    __m256    mx = _mm256_set1_ps(-INFINITY), sum = _mm256_setzero_ps(), v;
    float     m1, tot, lane[8], inv;
    uint32_t  t, k, end = n & ~7u;

    for (t = 0; t < end; t += 8) {
        mx = _mm256_max_ps(mx, _mm256_loadu_ps(s + t));
    }
    _mm256_storeu_ps(lane, mx);
    m1 = lane[0];
    for (k = 1; k < 8; k++) {
        m1 = lane[k] > m1 ? lane[k] : m1;
    }
    for (t = end; t < n; t++) {
        m1 = s[t] > m1 ? s[t] : m1;
    }
    for (t = 0; t < end; t += 8) {
        v = llm_exp8(_mm256_sub_ps(_mm256_loadu_ps(s + t),
                                   _mm256_set1_ps(m1)));
        sum = _mm256_add_ps(sum, v);
        _mm256_storeu_ps(s + t, v);
    }
    _mm256_storeu_ps(lane, sum);
    tot = 0.0f;
    for (k = 0; k < 8; k++) {
        tot += lane[k];
    }
    for (t = end; t < n; t++) {
        s[t] = expf(s[t] - m1);
        tot += s[t];
    }
    inv = 1.0f / tot;
    for (t = 0; t < n; t++) {
        s[t] *= inv;
    }
}

/* The 8 lanes of v reduced in a fixed order. */
static inline float
llm_hsum8(__m256 v)
{
    __m128  a = _mm_add_ps(_mm256_castps256_ps128(v),
                           _mm256_extractf128_ps(v, 1));

    a = _mm_add_ps(a, _mm_movehl_ps(a, a));
    a = _mm_add_ss(a, _mm_movehdup_ps(a));
    return _mm_cvtss_f32(a);
}

float
llm_attn_max_avx2(const float *s, uint32_t n)
{
    __m256    mx = _mm256_set1_ps(-INFINITY);
    __m128    a;
    uint32_t  t;

    for (t = 0; t < n; t += 8) {
        mx = _mm256_max_ps(mx, _mm256_loadu_ps(s + t));
    }
    a = _mm_max_ps(_mm256_castps256_ps128(mx), _mm256_extractf128_ps(mx, 1));
    a = _mm_max_ps(a, _mm_movehl_ps(a, a));
    a = _mm_max_ss(a, _mm_movehdup_ps(a));
    return _mm_cvtss_f32(a);
}

float
llm_attn_exps_avx2(float *s, uint32_t n, float m)
{
    const __m256  vm = _mm256_set1_ps(m), ninf = _mm256_set1_ps(-INFINITY);
    __m256        sum = _mm256_setzero_ps(), v, e;
    uint32_t      t;

    for (t = 0; t < n; t += 8) {
        v = _mm256_loadu_ps(s + t);
        e = _mm256_and_ps(_mm256_cmp_ps(v, ninf, _CMP_NEQ_OQ),
                          llm_exp8(_mm256_sub_ps(v, vm)));
        _mm256_storeu_ps(s + t, e);
        sum = _mm256_add_ps(sum, e);
    }
    return llm_hsum8(sum);
}

void
llm_swiglu_avx2(float *g, const float *u, size_t n)
{
    const __m256  one = _mm256_set1_ps(1.0f), lim = _mm256_set1_ps(88.0f);
    __m256        x, e;
    size_t        i;

    for (i = 0; i + 8 <= n; i += 8) {
        x = _mm256_loadu_ps(g + i);
        /* exp(-x), its argument at most 88 so 2^n stays a normal float
         * (n = 127); past 88.72 expf overflows and silu is -0 anyway */
        e = llm_exp8(_mm256_min_ps(_mm256_sub_ps(_mm256_setzero_ps(), x),
                                   lim));
        _mm256_storeu_ps(g + i,
                         _mm256_mul_ps(_mm256_div_ps(x, _mm256_add_ps(one, e)),
                                       _mm256_loadu_ps(u + i)));
    }
    for (; i < n; i++) {
        g[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
    }
}
