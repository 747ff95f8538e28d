/*
 * AVX2 + FMA + F16C kernels: activation quantizers (bit-identical to the
 * scalar ones), float dot products, and the quantized weight tiles.
 *
 * Quantized dots use vpmaddubsw (unsigned x signed bytes -> 16-bit pair
 * sums, no saturation for these ranges: at most 2 * 255 * 127 never occurs
 * because the unsigned side is <= 63 except in Q8_0, which uses the sign
 * trick instead) and vpmaddwd to widen, with the sub-block scale as the
 * vpmaddwd multiplier for K-quants.  Offsets (Q4_0's 8, Q6_K's 32) are
 * removed with per-activation-block sums.
 */

#include <immintrin.h>

#include "kernels_common.h"
#include "a8_avx2.h"


LLM_INLINE float
llm_hmax256(__m256 v)
{
    __m128  s = _mm_max_ps(_mm256_castps256_ps128(v),
                           _mm256_extractf128_ps(v, 1));

    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}


/* broadcast fp16 -> 8 floats */
LLM_INLINE __m256
llm_bcast_h(uint16_t h)
{
    return _mm256_cvtph_ps(_mm_set1_epi16((short) h));
}


/* 32 int32 (4 vectors) -> 32 int8 in order */
LLM_INLINE __m256i
llm_pack32(__m256i a, __m256i b, __m256i c, __m256i d)
{
    __m256i  ab = _mm256_packs_epi32(a, b);
    __m256i  cd = _mm256_packs_epi32(c, d);
    __m256i  r = _mm256_packs_epi16(ab, cd);

    /* packs work per 128-bit lane: restore the dword order */
    return _mm256_permutevar8x32_epi32(r, _mm256_setr_epi32(0, 4, 1, 5,
                                                            2, 6, 3, 7));
}


/* ---- activation quantizers ------------------------------------------ */

static void
llm_act_q8_0_avx2(const float *x, void *dst, int64_t n)
{
    const __m256    sign = _mm256_set1_ps(-0.0f);
    llm_block_q8_0 *b = dst;

    for (int64_t i = 0; i < n / LLM_QK; i++, b++, x += LLM_QK) {
        __m256  v0 = _mm256_loadu_ps(x), v1 = _mm256_loadu_ps(x + 8);
        __m256  v2 = _mm256_loadu_ps(x + 16), v3 = _mm256_loadu_ps(x + 24);
        __m256  m = _mm256_max_ps(
                        _mm256_max_ps(_mm256_andnot_ps(sign, v0),
                                      _mm256_andnot_ps(sign, v1)),
                        _mm256_max_ps(_mm256_andnot_ps(sign, v2),
                                      _mm256_andnot_ps(sign, v3)));
        float   amax = llm_hmax256(m);
        __m256  id = _mm256_set1_ps(amax != 0.0f ? 127.f / amax : 0.0f);

        b->d = llm_fp32_to_fp16(amax / 127.f);
        _mm256_storeu_si256((void *) b->qs, llm_pack32(
            _mm256_cvtps_epi32(_mm256_mul_ps(v0, id)),
            _mm256_cvtps_epi32(_mm256_mul_ps(v1, id)),
            _mm256_cvtps_epi32(_mm256_mul_ps(v2, id)),
            _mm256_cvtps_epi32(_mm256_mul_ps(v3, id))));
    }
}


static void
llm_act_q8_K_avx2(const float *x, void *dst, int64_t n)
{
    const __m256    sign = _mm256_set1_ps(-0.0f);
    llm_block_q8_K *b = dst;

    for (int64_t i = 0; i < n / LLM_QK_K; i++, b++, x += LLM_QK_K) {
        __m256  m = _mm256_setzero_ps();
        float   amax, max = 0;
        int     j;

        for (j = 0; j < LLM_QK_K; j += 8) {
            m = _mm256_max_ps(m, _mm256_andnot_ps(sign,
                                                  _mm256_loadu_ps(x + j)));
        }
        amax = llm_hmax256(m);
        if (amax == 0.0f) {
            memset(b, 0, sizeof(*b));
            continue;
        }
        for (j = 0; j < LLM_QK_K; j++) {    /* first of largest |x| */
            if (x[j] == amax || x[j] == -amax) {
                max = x[j];
                break;
            }
        }

        float   iscale = -127.f / max;
        __m256  is = _mm256_set1_ps(iscale);

        for (j = 0; j < LLM_QK_K; j += 32) {
            __m256i  q = llm_pack32(
                _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + j), is)),
                _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + j + 8),
                                                 is)),
                _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + j + 16),
                                                 is)),
                _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + j + 24),
                                                 is)));
            /* sums of each 16: widen to int16, add pairs of halves */
            __m256i  lo = _mm256_cvtepi8_epi16(_mm256_castsi256_si128(q));
            __m256i  hi = _mm256_cvtepi8_epi16(_mm256_extracti128_si256(q,
                                                                       1));
            __m256i  ones = _mm256_set1_epi16(1);
            __m256i  s0 = _mm256_madd_epi16(lo, ones);  /* 8 x int32 */
            __m256i  s1 = _mm256_madd_epi16(hi, ones);
            __m256i  s = _mm256_hadd_epi32(s0, s1);
            /* s: [s0a s0b s1a s1b | s0c s0d s1c s1d] pair sums; fold */
            __m256i  t = _mm256_hadd_epi32(s, s);
            int32_t  v[8];

            _mm256_storeu_si256((void *) (b->qs + j), q);
            _mm256_storeu_si256((void *) v, t);
            /* t lanes: [lo0-7, hi0-7, lo0-7, hi0-7 | lo8-15, hi8-15, ..] */
            b->bsums[j / 16] = (int16_t) (v[0] + v[4]);
            b->bsums[j / 16 + 1] = (int16_t) (v[1] + v[5]);
        }
        b->d = 1 / iscale;
    }
}


/* ---- float dots (F32 activations) ----------------------------------- */

static void
llm_dot_f32_avx2(int64_t n, float *s, const void *w, const void *x)
{
    const float  *a = w, *b = x;
    __m256        s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    int64_t       i = 0;
    float         sum;

    for (; i + 32 <= n; i += 32) {
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i),
                             s0);
        s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8),
                             _mm256_loadu_ps(b + i + 8), s1);
        s2 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 16),
                             _mm256_loadu_ps(b + i + 16), s2);
        s3 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 24),
                             _mm256_loadu_ps(b + i + 24), s3);
    }
    for (; i + 8 <= n; i += 8) {
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i),
                             s0);
    }
    sum = llm_hsum256(_mm256_add_ps(_mm256_add_ps(s0, s1),
                                    _mm256_add_ps(s2, s3)));
    for (; i < n; i++) {
        sum += a[i] * b[i];
    }
    *s = sum;
}


/*
 * F32 weights times C (at most 3) float columns at once: the router's
 * logits, 64 experts x every token of the step.  One dot at a time loads
 * a weight and a column vector per FMA, which perf showed at 2% of a
 * 64-stream decode step; here each weight vector feeds C FMAs.  Every
 * (row, column) pair keeps llm_dot_f32_avx2's four accumulators, order
 * and tail, so the logits, and with them the experts a token picks, are
 * the same bit for bit as the dot's whatever the batch.
 */
LLM_INLINE void
llm_f32_cols(const int C, int64_t n, const float *a, const float *x,
    size_t xs, float *y, size_t ldy)
{
    __m256   s[3][4];
    int64_t  i = 0;
    int      c, k;
    float    sum;

    for (c = 0; c < C; c++) {
        for (k = 0; k < 4; k++) {
            s[c][k] = _mm256_setzero_ps();
        }
    }
    for (; i + 32 <= n; i += 32) {
#pragma GCC unroll 4
        for (k = 0; k < 4; k++) {
            __m256  va = _mm256_loadu_ps(a + i + 8 * k);

#pragma GCC unroll 3
            for (c = 0; c < C; c++) {
                s[c][k] = _mm256_fmadd_ps(va, _mm256_loadu_ps(x + c * xs + i
                                                              + 8 * k),
                                          s[c][k]);
            }
        }
    }
    for (; i + 8 <= n; i += 8) {
        for (c = 0; c < C; c++) {
            s[c][0] = _mm256_fmadd_ps(_mm256_loadu_ps(a + i),
                                      _mm256_loadu_ps(x + c * xs + i),
                                      s[c][0]);
        }
    }
    for (c = 0; c < C; c++) {
        int64_t  j;

        sum = llm_hsum256(_mm256_add_ps(_mm256_add_ps(s[c][0], s[c][1]),
                                        _mm256_add_ps(s[c][2], s[c][3])));
        for (j = i; j < n; j++) {
            sum += a[j] * x[c * xs + j];
        }
        y[c * ldy] = sum;
    }
}

static void
llm_gemm_f32_avx2(int64_t n, int64_t nr, int64_t nc, const void *w,
    size_t ws, const void *x, size_t xs, float *y, size_t ldy)
{
    const float  *xf = x;
    int64_t       r, c;

    if (xs % sizeof(float) != 0 || ws % sizeof(float) != 0) {
        for (r = 0; r < nr; r++) {
            for (c = 0; c < nc; c++) {
                llm_dot_f32_avx2(n, &y[c * ldy + r],
                                 (const char *) w + r * ws,
                                 (const char *) x + c * xs);
            }
        }
        return;
    }
    xs /= sizeof(float);
    /* row outer, as llm_gemm's generic loop: a weight row stays in L1
     * while the columns pass over it */
    for (r = 0; r < nr; r++) {
        const float  *a = (const float *) ((const char *) w + r * ws);

        for (c = 0; c + 3 <= nc; c += 3) {
            llm_f32_cols(3, n, a, xf + c * xs, xs, y + c * ldy + r, ldy);
        }
        if (nc - c == 2) {
            llm_f32_cols(2, n, a, xf + c * xs, xs, y + c * ldy + r, ldy);
        } else if (nc - c == 1) {
            llm_f32_cols(1, n, a, xf + c * xs, xs, y + c * ldy + r, ldy);
        }
    }
}


LLM_INLINE void
llm_dot_h16_avx2(const int bf, int64_t n, float *s, const void *w,
    const void *x)
{
    const uint16_t  *a = w;
    const float     *b = x;
    __m256           s0 = _mm256_setzero_ps(), s1 = s0;
    int64_t          i = 0;
    float            sum;

#define LLM_H8(p)                                                           \
    (bf ? _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(       \
              _mm_loadu_si128((const void *) (p))), 16))                    \
        : _mm256_cvtph_ps(_mm_loadu_si128((const void *) (p))))

    for (; i + 16 <= n; i += 16) {
        s0 = _mm256_fmadd_ps(LLM_H8(a + i), _mm256_loadu_ps(b + i), s0);
        s1 = _mm256_fmadd_ps(LLM_H8(a + i + 8), _mm256_loadu_ps(b + i + 8),
                             s1);
    }
    for (; i + 8 <= n; i += 8) {
        s0 = _mm256_fmadd_ps(LLM_H8(a + i), _mm256_loadu_ps(b + i), s0);
    }
#undef LLM_H8

    sum = llm_hsum256(_mm256_add_ps(s0, s1));
    for (; i < n; i++) {
        sum += (bf ? llm_bf16_to_fp32(a[i]) : llm_h2f_hw(a[i])) * b[i];
    }
    *s = sum;
}


static void
llm_dot_f16_avx2(int64_t n, float *s, const void *w, const void *x)
{
    llm_dot_h16_avx2(0, n, s, w, x);
}


static void
llm_dot_bf16_avx2(int64_t n, float *s, const void *w, const void *x)
{
    llm_dot_h16_avx2(1, n, s, w, x);
}


/* ---- Q4_0 / Q8_0 ---------------------------------------------------- */

/*
 * q8 = 0: Q4_0 weights, nibbles unsigned, minus 8 * sum(y) per block.
 * q8 = 1: Q8_0 weights, |w| against y with w's sign (the sign trick;
 *         |w| <= 127 so the pair sums fit in 16 bits).
 */
LLM_INLINE void
llm_q_0_tile(const int R, const int C, const int q8, int64_t nb,
    const char *w, size_t ws, const char *x, size_t xs, float *y,
    size_t ldy)
{
    const __m256i  m4 = _mm256_set1_epi8(0x0f);
    const __m256i  eight = _mm256_set1_epi8(8);
    const __m256i  ones = _mm256_set1_epi16(1);
    const size_t   bsz = q8 ? sizeof(llm_block_q8_0) : sizeof(llm_block_q4_0);
    __m256         acc[LLM_MAXR][LLM_MAXC];
    int64_t        b;
    int            r, c;

#pragma GCC unroll 4
    for (r = 0; r < R; r++) {
#pragma GCC unroll 4
        for (c = 0; c < C; c++) {
            acc[r][c] = _mm256_setzero_ps();
        }
    }

    for (b = 0; b < nb; b++) {
        __m256i  wq[LLM_MAXR];
        __m256   wd[LLM_MAXR];

#pragma GCC unroll 4
        for (r = 0; r < R; r++) {
            const char  *blk = w + r * ws + b * bsz;

            if (q8) {
                const llm_block_q8_0  *p = (const llm_block_q8_0 *) blk;
                wq[r] = _mm256_loadu_si256((const void *) p->qs);
                wd[r] = llm_bcast_h(p->d);
            } else {
                const llm_block_q4_0  *p = (const llm_block_q4_0 *) blk;
                __m128i  t = _mm_loadu_si128((const void *) p->qs);
                wq[r] = _mm256_and_si256(m4, _mm256_set_m128i(
                            _mm_srli_epi16(t, 4), t));
                wd[r] = llm_bcast_h(p->d);
            }
            _mm_prefetch(blk + LLM_PF_TILES * R * ws, _MM_HINT_T0);
        }

#pragma GCC unroll 4
        for (c = 0; c < C; c++) {
            const llm_block_q8_0  *q = (const llm_block_q8_0 *)
                                       (x + c * xs) + b;
            __m256i  yv = _mm256_loadu_si256((const void *) q->qs);
            __m256   yd = llm_bcast_h(q->d);
            __m256i  off = _mm256_setzero_si256();

            if (!q8) {
                off = _mm256_maddubs_epi16(eight, yv);
            }

#pragma GCC unroll 4
            for (r = 0; r < R; r++) {
                __m256i  p16;

                if (q8) {
                    p16 = _mm256_maddubs_epi16(_mm256_sign_epi8(wq[r], wq[r]),
                                               _mm256_sign_epi8(yv, wq[r]));
                } else {
                    p16 = _mm256_sub_epi16(_mm256_maddubs_epi16(wq[r], yv),
                                           off);
                }
                acc[r][c] = _mm256_fmadd_ps(
                    _mm256_cvtepi32_ps(_mm256_madd_epi16(p16, ones)),
                    _mm256_mul_ps(wd[r], yd), acc[r][c]);
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

#define LLM_Q4_0_TILE(R, C, ...)  llm_q_0_tile(R, C, 0, __VA_ARGS__)
#define LLM_Q8_0_TILE(R, C, ...)  llm_q_0_tile(R, C, 1, __VA_ARGS__)


/* ---- K-quants -------------------------------------------------------- */

/* Unpacked Q4_K/Q5_K scales: sc[0..7] then m[0..7] as bytes. */
LLM_INLINE void
llm_k4_unpack(const uint8_t *s12, uint8_t out[16])
{
    _mm_storeu_si128((void *) out, llm_k4_scales_u8(s12));
}


LLM_INLINE void
llm_qk45_tile(const int R, const int C, const int with_qh, int64_t nb,
    const char *w, size_t ws, const char *x, size_t xs, float *y,
    size_t ldy)
{
    const __m256i  m4 = _mm256_set1_epi8(0x0f);
    const __m256i  one8 = _mm256_set1_epi8(1);
    const __m256i  ones = _mm256_set1_epi16(1);
    const size_t   bsz = with_qh ? sizeof(llm_block_q5_K)
                                 : sizeof(llm_block_q4_K);
    __m256         acc[LLM_MAXR][LLM_MAXC];
    int64_t        i;
    int            r, c, j;

#pragma GCC unroll 4
    for (r = 0; r < R; r++) {
#pragma GCC unroll 4
        for (c = 0; c < C; c++) {
            acc[r][c] = _mm256_setzero_ps();
        }
    }

    for (i = 0; i < nb; i++) {
        __m256i   iacc[LLM_MAXR][LLM_MAXC];
        uint8_t   sm[LLM_MAXR][16];
        float     d[LLM_MAXR], dmin[LLM_MAXR];

#pragma GCC unroll 4
        for (r = 0; r < R; r++) {
            const llm_block_q4_K  *p = (const llm_block_q4_K *)
                                       (w + r * ws + i * bsz);

            d[r] = llm_h2f_hw(p->d);
            dmin[r] = llm_h2f_hw(p->dmin);
            llm_k4_unpack(p->scales, sm[r]);
#pragma GCC unroll 4
            for (c = 0; c < C; c++) {
                iacc[r][c] = _mm256_setzero_si256();
            }
        }

#pragma GCC unroll 4
        for (j = 0; j < 4; j++) {
#pragma GCC unroll 4
            for (r = 0; r < R; r++) {
                const char     *blk = w + r * ws + i * bsz;
                const uint8_t  *qs = with_qh
                    ? ((const llm_block_q5_K *) blk)->qs
                    : ((const llm_block_q4_K *) blk)->qs;
                __m256i  q = _mm256_loadu_si256((const void *) (qs + 32 * j));
                __m256i  lo = _mm256_and_si256(q, m4);
                __m256i  hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
                __m256i  s_lo = _mm256_set1_epi16(sm[r][2 * j]);
                __m256i  s_hi = _mm256_set1_epi16(sm[r][2 * j + 1]);

                _mm_prefetch(blk + LLM_PF_TILES * R * ws + 48 * j,
                             _MM_HINT_T0);
                if (with_qh) {
                    __m256i  qh = _mm256_loadu_si256((const void *)
                                      ((const llm_block_q5_K *) blk)->qh);
                    __m256i  h0 = _mm256_and_si256(
                                      _mm256_srli_epi16(qh, 2 * j), one8);
                    __m256i  h1 = _mm256_and_si256(
                                      _mm256_srli_epi16(qh, 2 * j + 1), one8);

                    lo = _mm256_or_si256(lo, _mm256_slli_epi16(h0, 4));
                    hi = _mm256_or_si256(hi, _mm256_slli_epi16(h1, 4));
                }

#pragma GCC unroll 4
                for (c = 0; c < C; c++) {
                    const llm_block_q8_K  *q8 = (const llm_block_q8_K *)
                                                (x + c * xs) + i;
                    __m256i  y0 = _mm256_loadu_si256((const void *)
                                                     (q8->qs + 64 * j));
                    __m256i  y1 = _mm256_loadu_si256((const void *)
                                                     (q8->qs + 64 * j + 32));
                    __m256i  p0 = _mm256_madd_epi16(
                                      _mm256_maddubs_epi16(lo, y0), s_lo);
                    __m256i  p1 = _mm256_madd_epi16(
                                      _mm256_maddubs_epi16(hi, y1), s_hi);

                    iacc[r][c] = _mm256_add_epi32(iacc[r][c],
                                                  _mm256_add_epi32(p0, p1));
                }
            }
        }

#pragma GCC unroll 4
        for (r = 0; r < R; r++) {
            __m256i  mins = _mm256_cvtepu8_epi32(
                                _mm_loadl_epi64((const void *) &sm[r][8]));

#pragma GCC unroll 4
            for (c = 0; c < C; c++) {
                const llm_block_q8_K  *q8 = (const llm_block_q8_K *)
                                            (x + c * xs) + i;
                __m256i  bs = _mm256_madd_epi16(_mm256_loadu_si256(
                                  (const void *) q8->bsums), ones);
                __m256i  mi = _mm256_mullo_epi32(bs, mins);

                acc[r][c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(iacc[r][c]),
                                _mm256_set1_ps(d[r] * q8->d), acc[r][c]);
                acc[r][c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(mi),
                                _mm256_set1_ps(-dmin[r] * q8->d), acc[r][c]);
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

#define LLM_Q4_K_TILE(R, C, ...)  llm_qk45_tile(R, C, 0, __VA_ARGS__)
#define LLM_Q5_K_TILE(R, C, ...)  llm_qk45_tile(R, C, 1, __VA_ARGS__)


LLM_INLINE void
llm_q6_K_tile(const int R, const int C, int64_t nb, const char *w,
    size_t ws, const char *x, size_t xs, float *y, size_t ldy)
{
    const __m256i  m4 = _mm256_set1_epi8(0x0f);
    const __m256i  m3 = _mm256_set1_epi8(0x03);
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
        __m256i  iacc[LLM_MAXR][LLM_MAXC];
        float    d[LLM_MAXR];

#pragma GCC unroll 4
        for (r = 0; r < R; r++) {
            const llm_block_q6_K  *p = (const llm_block_q6_K *)
                                       (w + r * ws) + i;
            __m256i  sc16 = _mm256_cvtepi8_epi16(
                                _mm_loadu_si128((const void *) p->scales));

            d[r] = llm_h2f_hw(p->d);
#pragma GCC unroll 4
            for (c = 0; c < C; c++) {
                const llm_block_q8_K  *q8 = (const llm_block_q8_K *)
                                            (x + c * xs) + i;
                __m256i  bs = _mm256_loadu_si256((const void *) q8->bsums);

                /* start at -32 * sum_k sc_k * bsum_k */
                iacc[r][c] = _mm256_sub_epi32(_mm256_setzero_si256(),
                    _mm256_slli_epi32(_mm256_madd_epi16(bs, sc16), 5));
            }
        }

#pragma GCC unroll 4
        for (h = 0; h < 2; h++) {
#pragma GCC unroll 4
            for (r = 0; r < R; r++) {
                const llm_block_q6_K  *p = (const llm_block_q6_K *)
                                           (w + r * ws) + i;
                __m256i  ql0 = _mm256_loadu_si256((const void *)
                                                  (p->ql + 64 * h));
                __m256i  ql1 = _mm256_loadu_si256((const void *)
                                                  (p->ql + 64 * h + 32));
                __m256i  qh = _mm256_loadu_si256((const void *)
                                                 (p->qh + 32 * h));
                __m256i  q[4];

                _mm_prefetch((const char *) p + LLM_PF_TILES * R * ws
                             + 128 * h, _MM_HINT_T0);
                _mm_prefetch((const char *) p + LLM_PF_TILES * R * ws
                             + 128 * h + 64, _MM_HINT_T0);
                q[0] = _mm256_or_si256(_mm256_and_si256(ql0, m4),
                           _mm256_slli_epi16(_mm256_and_si256(qh, m3), 4));
                q[1] = _mm256_or_si256(_mm256_and_si256(ql1, m4),
                           _mm256_slli_epi16(_mm256_and_si256(
                               _mm256_srli_epi16(qh, 2), m3), 4));
                q[2] = _mm256_or_si256(_mm256_and_si256(
                               _mm256_srli_epi16(ql0, 4), m4),
                           _mm256_slli_epi16(_mm256_and_si256(
                               _mm256_srli_epi16(qh, 4), m3), 4));
                q[3] = _mm256_or_si256(_mm256_and_si256(
                               _mm256_srli_epi16(ql1, 4), m4),
                           _mm256_slli_epi16(_mm256_and_si256(
                               _mm256_srli_epi16(qh, 6), m3), 4));

#pragma GCC unroll 4
                for (k = 0; k < 4; k++) {
                    int      is = 8 * h + 2 * k;
                    __m256i  sv = _mm256_set_m128i(
                                      _mm_set1_epi16(p->scales[is + 1]),
                                      _mm_set1_epi16(p->scales[is]));

#pragma GCC unroll 4
                    for (c = 0; c < C; c++) {
                        const llm_block_q8_K  *q8 = (const llm_block_q8_K *)
                                                    (x + c * xs) + i;
                        __m256i  yv = _mm256_loadu_si256((const void *)
                                          (q8->qs + 128 * h + 32 * k));
                        __m256i  pr = _mm256_madd_epi16(
                                          _mm256_maddubs_epi16(q[k], yv), sv);

                        iacc[r][c] = _mm256_add_epi32(iacc[r][c], pr);
                    }
                }
            }
        }

#pragma GCC unroll 4
        for (r = 0; r < R; r++) {
#pragma GCC unroll 4
            for (c = 0; c < C; c++) {
                const llm_block_q8_K  *q8 = (const llm_block_q8_K *)
                                            (x + c * xs) + i;

                acc[r][c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(iacc[r][c]),
                                _mm256_set1_ps(d[r] * q8->d), acc[r][c]);
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


LLM_GEMM_DRIVER(q4_0, LLM_QK, 2, 2, 2, LLM_Q4_0_TILE)
LLM_GEMM_DRIVER(q8_0, LLM_QK, 2, 2, 2, LLM_Q8_0_TILE)
LLM_GEMM_DRIVER(q4_K, LLM_QK_K, 2, 2, LLM_ROW_COLS, LLM_Q4_K_TILE)
LLM_GEMM_DRIVER(q5_K, LLM_QK_K, 2, 2, LLM_ROW_COLS, LLM_Q5_K_TILE)
LLM_GEMM_DRIVER(q6_K, LLM_QK_K, 2, 2, LLM_ROW_COLS, llm_q6_K_tile)



/* ---- Q4_0 x Q8_0, transposed: eight blocks per float step ------------ */

/* The octet layout and the column preparation: a8_avx2.h. */


/* One weight row x C columns: the octets (a8_avx2.h), then the last
 * nb % 8 blocks column by column by the pair tile. */
LLM_INLINE void
llm_q4_a8_rows(const int C, int64_t nb, const char *w, size_t ws,
    const char *x, size_t xs, const llm_q4_a8_t *pre, float *y, size_t ldy)
{
    const int64_t  off = 8 * LLM_A8_OCTETS(nb);
    float          t;

    llm_a8_rows(LLM_A8_Q4_0, C, nb, w, ws, pre, y, ldy);
    if (nb > off) {
#pragma GCC unroll 8
        for (int c = 0; c < C; c++) {
            llm_q_0_tile(1, 1, 0, nb - off, w + off * sizeof(llm_block_q4_0),
                         ws, x + c * xs + off * sizeof(llm_block_q8_0), xs,
                         &t, 1);
            y[c * ldy] += t;
        }
    }
}

LLM_INLINE void
llm_q4_a8_prep(const char *x, int64_t nb, llm_q4_a8_t *out)
{
    llm_a8_prep(x, nb, out, 8);
}

LLM_T_DRIVER(llm_gemm_q4_0_a8, llm_q4_a8_t, LLM_QK, LLM_A8_MAX,
             LLM_A8_OCTETS, llm_q4_a8_prep, llm_q4_a8_rows, llm_gemm_q4_0,
             1, 8)


void
llm_kernels_init_avx2(llm_kernels_t *k)
{
    k->quantize_act[LLM_TYPE_Q8_0] = llm_act_q8_0_avx2;
    k->quantize_act[LLM_TYPE_Q8_K] = llm_act_q8_K_avx2;
    k->vec_dot[LLM_TYPE_F32] = llm_dot_f32_avx2;
    k->vec_dot[LLM_TYPE_F16] = llm_dot_f16_avx2;
    k->vec_dot[LLM_TYPE_BF16] = llm_dot_bf16_avx2;
    k->vec_dot[LLM_TYPE_Q4_0] = llm_dot_q4_0;
    k->vec_dot[LLM_TYPE_Q8_0] = llm_dot_q8_0;
    k->vec_dot[LLM_TYPE_Q4_K] = llm_dot_q4_K;
    k->vec_dot[LLM_TYPE_Q5_K] = llm_dot_q5_K;
    k->vec_dot[LLM_TYPE_Q6_K] = llm_dot_q6_K;
    k->gemm[LLM_TYPE_F32] = llm_gemm_f32_avx2;
    k->gemm[LLM_TYPE_Q4_0] = llm_gemm_q4_0_a8;
    k->gemm[LLM_TYPE_Q8_0] = llm_gemm_q8_0;
    k->gemm[LLM_TYPE_Q4_K] = llm_gemm_q4_K;
    k->gemm[LLM_TYPE_Q5_K] = llm_gemm_q5_K;
    k->gemm[LLM_TYPE_Q6_K] = llm_gemm_q6_K;
    llm_kernels_init_k23_avx2(k);
    llm_kernels_init_legacy_avx2(k);
    llm_kernels_init_iq4_avx2(k);
    llm_kernels_init_iq1_avx2(k);
    llm_kernels_init_iq2_avx2(k);
    llm_kernels_init_iq3_avx2(k);
}
