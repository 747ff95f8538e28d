/*
 * AVX-512 (F, BW, VL, DQ, VNNI) kernels: integer dot products of the
 * quantized weight types against Q8_0 / Q8_K activations, as tiles of
 * R weight rows x C activation columns so each weight block is loaded and
 * unpacked once for C columns, and each activation block once for R rows.
 *
 * Q4_0 / Q8_0: two 32-weight blocks per 512-bit register; vpdpbusd
 * (unsigned x signed bytes) with the weights made unsigned (Q4_0 nibbles
 * as they are, Q8_0 + 128) and the offset removed by starting the
 * accumulator at -offset * sum(y), computed once per activation block.
 * Q8_0 runs only as Q8_0_R16 (16 rows regrouped at load, or as the file's
 * rows are read: llm_gemm_q8_0_file), so that every Q8_0 result takes
 * one order of steps whatever its layout.
 *
 * K-quants: 64 weights (two sub-blocks) per register; vpmaddubsw gives
 * 16-bit pair sums, vpdpwssd multiplies them by the sub-block scales and
 * accumulates in 32 bits; the super-block's float scales are applied once
 * per 256 weights.  Every integer sum is exact, so results differ from the
 * scalar reference only by float rounding order.
 *
 * Float types and the activation quantizers come from kernels_avx2.c.
 */

#include <cpuid.h>
#include <immintrin.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "kernels_common.h"


/* [h0 x 8 | h1 x 8] as floats from two fp16 values. */
LLM_INLINE __m512
llm_pair_scale(uint16_t h0, uint16_t h1)
{
    __m256i  t = _mm256_inserti128_si256(
                     _mm256_castsi128_si256(_mm_set1_epi16((short) h0)),
                     _mm_set1_epi16((short) h1), 1);

    return _mm512_cvtph_ps(t);
}


/* ---- Q4_0 x Q8_0 ----------------------------------------------------- */

LLM_INLINE void
llm_q4_0_tile(const int R, const int C, int64_t nb, const char *w,
    size_t ws, const char *x, size_t xs, float *y, size_t ldy)
{
    const __m512i  m4 = _mm512_set1_epi8(0x0f);
    const __m512i  eight = _mm512_set1_epi8(8);
    __m512         acc[LLM_MAXR][LLM_MAXC];
    float          tail[LLM_MAXR][LLM_MAXC];
    int64_t        b;
    int            r, c;

#pragma GCC unroll 4
    for (r = 0; r < R; r++) {
#pragma GCC unroll 4
        for (c = 0; c < C; c++) {
            acc[r][c] = _mm512_setzero_ps();
            tail[r][c] = 0;
        }
    }

    for (b = 0; b + 2 <= nb; b += 2) {
        __m512i  wq[LLM_MAXR];
        __m512   wd[LLM_MAXR];

#pragma GCC unroll 4
        for (r = 0; r < R; r++) {
            const llm_block_q4_0  *p = (const llm_block_q4_0 *)
                                       (w + r * ws) + b;
            __m256i  t = _mm256_inserti128_si256(_mm256_castsi128_si256(
                             _mm_loadu_si128((const void *) p[0].qs)),
                             _mm_loadu_si128((const void *) p[1].qs), 1);
            __m512i  z = _mm512_inserti64x4(_mm512_castsi256_si512(t),
                                            _mm256_srli_epi16(t, 4), 1);

            /* lanes: lo(q0) hi(q0) lo(q1) hi(q1), as the y bytes lie */
            z = _mm512_shuffle_i64x2(z, z, _MM_SHUFFLE(3, 1, 2, 0));
            wq[r] = _mm512_and_si512(z, m4);
            /* the next row tile, same offset: a stream the hardware
             * prefetchers do not see through R interleaved rows */
            _mm_prefetch((const char *) p + LLM_PF_TILES * R * ws + 64,
                         _MM_HINT_T0);
            wd[r] = llm_pair_scale(p[0].d, p[1].d);
        }

#pragma GCC unroll 4
        for (c = 0; c < C; c++) {
            const llm_block_q8_0  *q = (const llm_block_q8_0 *)
                                       (x + c * xs) + b;
            __m512i  yv = _mm512_inserti64x4(_mm512_castsi256_si512(
                              _mm256_loadu_si256((const void *) q[0].qs)),
                              _mm256_loadu_si256((const void *) q[1].qs), 1);
            __m512i  init = _mm512_sub_epi32(_mm512_setzero_si512(),
                                _mm512_dpbusd_epi32(_mm512_setzero_si512(),
                                                    eight, yv));
            __m512   yd = llm_pair_scale(q[0].d, q[1].d);

#pragma GCC unroll 4
            for (r = 0; r < R; r++) {
                __m512i  dp = _mm512_dpbusd_epi32(init, wq[r], yv);

                acc[r][c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dp),
                                            _mm512_mul_ps(wd[r], yd),
                                            acc[r][c]);
            }
        }
    }

    for (; b < nb; b++) {           /* odd block count: scalar */
#pragma GCC unroll 4
        for (r = 0; r < R; r++) {
            const llm_block_q4_0  *p = (const llm_block_q4_0 *)
                                       (w + r * ws) + b;
#pragma GCC unroll 4
            for (c = 0; c < C; c++) {
                const llm_block_q8_0  *q = (const llm_block_q8_0 *)
                                           (x + c * xs) + b;
                int  s = 0;

                for (int j = 0; j < 16; j++) {
                    s += ((p->qs[j] & 0xf) - 8) * q->qs[j]
                         + ((p->qs[j] >> 4) - 8) * q->qs[j + 16];
                }
                tail[r][c] += s * llm_h2f_hw(p->d) * llm_h2f_hw(q->d);
            }
        }
    }

#pragma GCC unroll 4
    for (r = 0; r < R; r++) {
#pragma GCC unroll 4
        for (c = 0; c < C; c++) {
            y[c * ldy + r] = _mm512_reduce_add_ps(acc[r][c]) + tail[r][c];
        }
    }
}


/* ---- Q8_0 x Q8_0 ----------------------------------------------------- */

LLM_INLINE void
llm_q8_0_tile(const int R, const int C, int64_t nb, const char *w,
    size_t ws, const char *x, size_t xs, float *y, size_t ldy)
{
    const __m512i  bias = _mm512_set1_epi8((char) 0x80);
    __m512         acc[LLM_MAXR][LLM_MAXC];
    float          tail[LLM_MAXR][LLM_MAXC];
    int64_t        b;
    int            r, c;

#pragma GCC unroll 4
    for (r = 0; r < R; r++) {
#pragma GCC unroll 4
        for (c = 0; c < C; c++) {
            acc[r][c] = _mm512_setzero_ps();
            tail[r][c] = 0;
        }
    }

    for (b = 0; b + 2 <= nb; b += 2) {
        __m512i  wq[LLM_MAXR];
        __m512   wd[LLM_MAXR];

#pragma GCC unroll 4
        for (r = 0; r < R; r++) {
            const llm_block_q8_0  *p = (const llm_block_q8_0 *)
                                       (w + r * ws) + b;
            __m512i  z = _mm512_inserti64x4(_mm512_castsi256_si512(
                             _mm256_loadu_si256((const void *) p[0].qs)),
                             _mm256_loadu_si256((const void *) p[1].qs), 1);

            wq[r] = _mm512_xor_si512(z, bias);      /* w + 128 */
            _mm_prefetch((const char *) p + LLM_PF_TILES * R * ws + 64,
                         _MM_HINT_T0);
            wd[r] = llm_pair_scale(p[0].d, p[1].d);
        }

#pragma GCC unroll 4
        for (c = 0; c < C; c++) {
            const llm_block_q8_0  *q = (const llm_block_q8_0 *)
                                       (x + c * xs) + b;
            __m512i  yv = _mm512_inserti64x4(_mm512_castsi256_si512(
                              _mm256_loadu_si256((const void *) q[0].qs)),
                              _mm256_loadu_si256((const void *) q[1].qs), 1);
            __m512i  init = _mm512_sub_epi32(_mm512_setzero_si512(),
                                _mm512_dpbusd_epi32(_mm512_setzero_si512(),
                                                    bias, yv));
            __m512   yd = llm_pair_scale(q[0].d, q[1].d);

#pragma GCC unroll 4
            for (r = 0; r < R; r++) {
                __m512i  dp = _mm512_dpbusd_epi32(init, wq[r], yv);

                acc[r][c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dp),
                                            _mm512_mul_ps(wd[r], yd),
                                            acc[r][c]);
            }
        }
    }

    for (; b < nb; b++) {
#pragma GCC unroll 4
        for (r = 0; r < R; r++) {
            const llm_block_q8_0  *p = (const llm_block_q8_0 *)
                                       (w + r * ws) + b;
#pragma GCC unroll 4
            for (c = 0; c < C; c++) {
                const llm_block_q8_0  *q = (const llm_block_q8_0 *)
                                           (x + c * xs) + b;
                int  s = 0;

                for (int j = 0; j < 32; j++) {
                    s += p->qs[j] * q->qs[j];
                }
                tail[r][c] += s * llm_h2f_hw(p->d) * llm_h2f_hw(q->d);
            }
        }
    }

#pragma GCC unroll 4
    for (r = 0; r < R; r++) {
#pragma GCC unroll 4
        for (c = 0; c < C; c++) {
            y[c * ldy + r] = _mm512_reduce_add_ps(acc[r][c]) + tail[r][c];
        }
    }
}


/* ---- K-quants -------------------------------------------------------- */

/*
 * The 8 scales and 8 mins of a Q4_K/Q5_K block as 16 int16 lanes:
 * sc[0..7] then m[0..7] (the 12-byte packing of get_scale_min_k4).
 */
LLM_INLINE __m256i
llm_k4_scales(const uint8_t *s12)
{
    return _mm256_cvtepu8_epi16(llm_k4_scales_u8(s12));
}


/* permutexvar index: lanes 0..15 = a, lanes 16..31 = b */
LLM_INLINE __m512i
llm_idx2(int a, int b)
{
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi16(
               (short) a)), _mm256_set1_epi16((short) b), 1);
}


/* permutexvar index: four groups of 8 lanes = a, b, c, d */
LLM_INLINE __m512i
llm_idx4(int a, int b, int c, int d)
{
    return _mm512_inserti64x4(_mm512_castsi256_si512(
               _mm256_set_m128i(_mm_set1_epi16((short) b),
                                _mm_set1_epi16((short) a))),
               _mm256_set_m128i(_mm_set1_epi16((short) d),
                                _mm_set1_epi16((short) c)), 1);
}


/*
 * Q4_K (with_qh = 0) and Q5_K (with_qh = 1) tiles; the two differ only in
 * the fifth bit and the block stride.
 */
LLM_INLINE void
llm_qk45_tile(const int R, const int C, const int with_qh, int64_t nb,
    const char *w, size_t ws, const char *x, size_t xs, float *y,
    size_t ldy)
{
    const __m512i  m4 = _mm512_set1_epi8(0x0f);
    const __m512i  sixteen = _mm512_set1_epi8(16);
    const __m512i  idx_m = _mm512_set_epi16(
        15, 15, 14, 14, 13, 13, 12, 12, 11, 11, 10, 10, 9, 9, 8, 8,
        15, 15, 14, 14, 13, 13, 12, 12, 11, 11, 10, 10, 9, 9, 8, 8);
    const __m512i  sh4 = _mm512_inserti64x4(_mm512_setzero_si512(),
                                            _mm256_set1_epi16(4), 1);
    const size_t   bsz = with_qh ? sizeof(llm_block_q5_K)
                                 : sizeof(llm_block_q4_K);
    __m512         acc[LLM_MAXR][LLM_MAXC];
    __m256         accm[LLM_MAXR][LLM_MAXC];
    int64_t        i;
    int            r, c, j;

#pragma GCC unroll 4
    for (r = 0; r < R; r++) {
#pragma GCC unroll 4
        for (c = 0; c < C; c++) {
            acc[r][c] = _mm512_setzero_ps();
            accm[r][c] = _mm256_setzero_ps();
        }
    }

    for (i = 0; i < nb; i++) {
        __m512i  iacc[LLM_MAXR][LLM_MAXC], iacc1[LLM_MAXR][LLM_MAXC];
        __m512i  scz[LLM_MAXR], hz[LLM_MAXR];
        float    d[LLM_MAXR], dmin[LLM_MAXR];

#pragma GCC unroll 4
        for (r = 0; r < R; r++) {
            const char  *blk = w + r * ws + i * bsz;
            /* d, dmin, scales are at the same offsets in both types */
            const llm_block_q4_K  *p = (const llm_block_q4_K *) blk;

            d[r] = llm_h2f_hw(p->d);
            dmin[r] = llm_h2f_hw(p->dmin);
            scz[r] = _mm512_castsi256_si512(llm_k4_scales(p->scales));
            if (with_qh) {
                __m256i  qh = _mm256_loadu_si256((const void *)
                                  ((const llm_block_q5_K *) blk)->qh);
                hz[r] = _mm512_inserti64x4(_mm512_castsi256_si512(qh),
                                           _mm256_srli_epi16(qh, 1), 1);
            }
#pragma GCC unroll 4
            for (c = 0; c < C; c++) {
                iacc[r][c] = _mm512_setzero_si512();
                iacc1[r][c] = _mm512_setzero_si512();
            }
        }

#pragma GCC unroll 4
        for (j = 0; j < 4; j++) {
            const __m512i  idx = llm_idx2(2 * j, 2 * j + 1);
            const __m512i  hbit = _mm512_set1_epi8((char) (1 << (2 * j)));
            /* one row and column: odd chunks into a second accumulator,
             * or the vpdpwssd latency bounds the loop */
            __m512i      (*ia)[LLM_MAXC] = R * C == 1 && (j & 1) ? iacc1
                                                                  : iacc;

#pragma GCC unroll 4
            for (r = 0; r < R; r++) {
                const char  *blk = w + r * ws + i * bsz;
                const uint8_t  *qs = with_qh
                    ? ((const llm_block_q5_K *) blk)->qs
                    : ((const llm_block_q4_K *) blk)->qs;
                /* the 32 bytes in both halves, the upper shifted by 4:
                 * low nibbles then high, one variable shift */
                __m512i  z = _mm512_srlv_epi16(_mm512_broadcast_i64x4(
                                 _mm256_loadu_si256((const void *)
                                                    (qs + 32 * j))), sh4);
                __m512i  sv = _mm512_permutexvar_epi16(idx, scz[r]);

                z = _mm512_and_si512(z, m4);
                _mm_prefetch(blk + LLM_PF_TILES * R * ws + 64 * j,
                             _MM_HINT_T0);
                if (with_qh) {
                    __mmask64  k = _mm512_test_epi8_mask(hz[r], hbit);
                    z = _mm512_mask_add_epi8(z, k, z, sixteen);
                }

#pragma GCC unroll 4
                for (c = 0; c < C; c++) {
                    const llm_block_q8_K  *q8 = (const llm_block_q8_K *)
                                                (x + c * xs) + i;
                    __m512i  yv = _mm512_loadu_si512(q8->qs + 64 * j);
                    __m512i  pr = _mm512_maddubs_epi16(z, yv);

                    ia[r][c] = _mm512_dpwssd_epi32(ia[r][c], pr, sv);
                }
            }
        }

        if (R * C == 1) {
            iacc[0][0] = _mm512_add_epi32(iacc[0][0], iacc1[0][0]);
        }

#pragma GCC unroll 4
        for (r = 0; r < R; r++) {
            __m256i  mdup = _mm512_castsi512_si256(
                                _mm512_permutexvar_epi16(idx_m, scz[r]));

#pragma GCC unroll 4
            for (c = 0; c < C; c++) {
                const llm_block_q8_K  *q8 = (const llm_block_q8_K *)
                                            (x + c * xs) + i;
                __m256i  bs = _mm256_loadu_si256((const void *) q8->bsums);
                __m256i  mi = _mm256_madd_epi16(bs, mdup);

                acc[r][c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(iacc[r][c]),
                                _mm512_set1_ps(d[r] * q8->d), acc[r][c]);
                /* the mins in their own 8 lanes: half the width */
                accm[r][c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(mi),
                                 _mm256_set1_ps(-dmin[r] * q8->d),
                                 accm[r][c]);
            }
        }
    }

#pragma GCC unroll 4
    for (r = 0; r < R; r++) {
#pragma GCC unroll 4
        for (c = 0; c < C; c++) {
            y[c * ldy + r] = _mm512_reduce_add_ps(_mm512_add_ps(acc[r][c],
                                 _mm512_zextps256_ps512(accm[r][c])));
        }
    }
}


#define LLM_Q5_K_TILE(R, C, ...)  llm_qk45_tile(R, C, 1, __VA_ARGS__)

LLM_GEMM_DRIVER(q4_0, LLM_QK, 4, 4, LLM_ROW_COLS, llm_q4_0_tile)
LLM_GEMM_DRIVER(q5_K, LLM_QK_K, 4, 2, LLM_ROW_COLS, LLM_Q5_K_TILE)


/* ---- K-quants with prepared weight rows ------------------------------ */

/*
 * For several columns, each group of 4 weight rows is unpacked once per
 * call into this form (quants as bytes, scales as int16 lanes, per chunk
 * of 64), and every column tile then costs two instructions per 64
 * weights: vpmaddubsw and vpdpwssd.
 */
typedef struct {
    __m512i  z[4];          /* chunk j: 64 quants, 0..31 or 0..63 */
    __m512i  sv[4];         /* chunk j: int16 scale per 16-bit pair */
    __m256i  m16;           /* Q4/5_K: mins duplicated per bsum;
                               Q6_K: the 16 scales (for the -32 term) */
    float    d, dmin;
    char     pad[24];
} llm_kq_prep_t;

/* Super-blocks per row a prepared group may hold (n <= 8192). */
#define LLM_KPREP_MAX  32


/* kind: 4 = Q4_K, 5 = Q5_K, 6 = Q6_K */
LLM_INLINE void
llm_kq_prep_row(const int kind, const char *w, int64_t nb,
    llm_kq_prep_t *out)
{
    const __m512i  m4 = _mm512_set1_epi8(0x0f);
    const __m512i  m3 = _mm512_set1_epi8(0x03);
    const __m512i  sixteen = _mm512_set1_epi8(16);
    const __m512i  idx_m = _mm512_set_epi16(
        15, 15, 14, 14, 13, 13, 12, 12, 11, 11, 10, 10, 9, 9, 8, 8,
        15, 15, 14, 14, 13, 13, 12, 12, 11, 11, 10, 10, 9, 9, 8, 8);

    for (int64_t i = 0; i < nb; i++, out++) {
        if (kind == 6) {
            const llm_block_q6_K  *p = (const llm_block_q6_K *) w + i;
            __m256i  sc16 = _mm256_cvtepi8_epi16(
                                _mm_loadu_si128((const void *) p->scales));
            __m512i  scz = _mm512_castsi256_si512(sc16);

            out->d = llm_h2f_hw(p->d);
            out->m16 = sc16;
#pragma GCC unroll 4
            for (int t = 0; t < 4; t++) {
                const int  h = t / 2, hi = t & 1;
                __m512i  ql = _mm512_loadu_si512(p->ql + 64 * h);
                __m256i  qh = _mm256_loadu_si256((const void *)
                                                 (p->qh + 32 * h));
                __m512i  hz = _mm512_inserti64x4(_mm512_castsi256_si512(
                                  _mm256_srli_epi16(qh, hi ? 4 : 0)),
                                  _mm256_srli_epi16(qh, hi ? 6 : 2), 1);
                __m512i  lo = hi ? _mm512_srli_epi16(ql, 4) : ql;

                hz = _mm512_slli_epi16(_mm512_and_si512(hz, m3), 4);
                out->z[t] = _mm512_or_si512(_mm512_and_si512(lo, m4), hz);
                out->sv[t] = _mm512_permutexvar_epi16(
                    llm_idx4(4 * t, 4 * t + 1, 4 * t + 2, 4 * t + 3), scz);
            }

        } else {
            const size_t   bsz = kind == 5 ? sizeof(llm_block_q5_K)
                                           : sizeof(llm_block_q4_K);
            const char    *blk = w + i * bsz;
            const llm_block_q4_K  *p = (const llm_block_q4_K *) blk;
            const uint8_t *qs = kind == 5
                ? ((const llm_block_q5_K *) blk)->qs : p->qs;
            __m512i        scz = _mm512_castsi256_si512(
                                     llm_k4_scales(p->scales));
            __m512i        hz = _mm512_setzero_si512();

            out->d = llm_h2f_hw(p->d);
            out->dmin = llm_h2f_hw(p->dmin);
            out->m16 = _mm512_castsi512_si256(
                           _mm512_permutexvar_epi16(idx_m, scz));
            if (kind == 5) {
                __m256i  qh = _mm256_loadu_si256((const void *)
                                  ((const llm_block_q5_K *) blk)->qh);
                hz = _mm512_inserti64x4(_mm512_castsi256_si512(qh),
                                        _mm256_srli_epi16(qh, 1), 1);
            }
#pragma GCC unroll 4
            for (int j = 0; j < 4; j++) {
                __m256i  q = _mm256_loadu_si256((const void *) (qs + 32 * j));
                __m512i  z = _mm512_inserti64x4(_mm512_castsi256_si512(q),
                                                _mm256_srli_epi16(q, 4), 1);

                z = _mm512_and_si512(z, m4);
                if (kind == 5) {
                    __mmask64  k = _mm512_test_epi8_mask(hz,
                                       _mm512_set1_epi8((char) (1 << (2 * j))));
                    z = _mm512_mask_add_epi8(z, k, z, sixteen);
                }
                out->z[j] = z;
                out->sv[j] = _mm512_permutexvar_epi16(
                                 llm_idx2(2 * j, 2 * j + 1), scz);
            }
        }
    }
}


LLM_INLINE void
llm_kq_tile_pre(const int kind, const int R, const int C, int64_t nb,
    const llm_kq_prep_t *pre, const char *x, size_t xs, float *y,
    size_t ldy)
{
    __m512   acc[LLM_MAXR][LLM_MAXC];
    __m256   accm[LLM_MAXR][LLM_MAXC];
    int64_t  i;
    int      r, c, j;

#pragma GCC unroll 4
    for (r = 0; r < R; r++) {
#pragma GCC unroll 4
        for (c = 0; c < C; c++) {
            acc[r][c] = _mm512_setzero_ps();
            accm[r][c] = _mm256_setzero_ps();
        }
    }

    for (i = 0; i < nb; i++) {
        __m512i  iacc[LLM_MAXR][LLM_MAXC];

#pragma GCC unroll 4
        for (r = 0; r < R; r++) {
#pragma GCC unroll 4
            for (c = 0; c < C; c++) {
                iacc[r][c] = _mm512_setzero_si512();
            }
        }

#pragma GCC unroll 4
        for (j = 0; j < 4; j++) {
#pragma GCC unroll 4
            for (r = 0; r < R; r++) {
                const llm_kq_prep_t  *pr = pre + r * nb + i;
                __m512i               z = pr->z[j];

#pragma GCC unroll 4
                for (c = 0; c < C; c++) {
                    const llm_block_q8_K  *q8 = (const llm_block_q8_K *)
                                                (x + c * xs) + i;
                    __m512i  p = _mm512_maddubs_epi16(z,
                                     _mm512_loadu_si512(q8->qs + 64 * j));

                    iacc[r][c] = _mm512_dpwssd_epi32(iacc[r][c], p,
                                                     pr->sv[j]);
                }
            }
        }

#pragma GCC unroll 4
        for (r = 0; r < R; r++) {
            const llm_kq_prep_t  *pr = pre + r * nb + i;

#pragma GCC unroll 4
            for (c = 0; c < C; c++) {
                const llm_block_q8_K  *q8 = (const llm_block_q8_K *)
                                            (x + c * xs) + i;
                __m256i  bs = _mm256_loadu_si256((const void *) q8->bsums);
                __m256i  mi = _mm256_madd_epi16(bs, pr->m16);

                if (kind == 6) {
                    /* the -32 offset, exact in integers */
                    iacc[r][c] = _mm512_sub_epi32(iacc[r][c],
                        _mm512_zextsi256_si512(_mm256_slli_epi32(mi, 5)));
                    acc[r][c] = _mm512_fmadd_ps(
                        _mm512_cvtepi32_ps(iacc[r][c]),
                        _mm512_set1_ps(pr->d * q8->d), acc[r][c]);
                } else {
                    acc[r][c] = _mm512_fmadd_ps(
                        _mm512_cvtepi32_ps(iacc[r][c]),
                        _mm512_set1_ps(pr->d * q8->d), acc[r][c]);
                    /* as llm_qk45_tile, so both give the same sums */
                    accm[r][c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(mi),
                        _mm256_set1_ps(-pr->dmin * q8->d), accm[r][c]);
                }
            }
        }
    }

#pragma GCC unroll 4
    for (r = 0; r < R; r++) {
#pragma GCC unroll 4
        for (c = 0; c < C; c++) {
            y[c * ldy + r] = _mm512_reduce_add_ps(_mm512_add_ps(acc[r][c],
                                 _mm512_zextps256_ps512(accm[r][c])));
        }
    }
}


/*
 * Several columns: per group of 4 rows, unpack the rows once, then run
 * tiles of 4 rows x 3 columns over all columns.
 */
LLM_INLINE void
llm_gemm_kq_pre(const int kind, int64_t n, int64_t nr, int64_t nc,
    const void *w, size_t ws, const void *x, size_t xs, float *y,
    size_t ldy)
{
    llm_kq_prep_t  pre[4 * LLM_KPREP_MAX];
    const char    *wp = w, *xp = x;
    int64_t        nb = n / LLM_QK_K, r0, r, c, rr;

    for (r0 = 0; r0 < nr; r0 += 4) {
        rr = nr - r0 < 4 ? nr - r0 : 4;
        for (r = 0; r < rr; r++) {
            llm_kq_prep_row(kind, wp + (r0 + r) * ws, nb, pre + r * nb);
        }

        if (rr == 4) {
            /* 4x3 tiles, the rest in 4x2 (a 4x1 tile is half as
             * efficient) */
            for (c = 0; nc - c >= 5 || nc - c == 3; c += 3) {
                llm_kq_tile_pre(kind, 4, 3, nb, pre, xp + c * xs, xs,
                                y + c * ldy + r0, ldy);
            }
            for (; c + 2 <= nc; c += 2) {
                llm_kq_tile_pre(kind, 4, 2, nb, pre, xp + c * xs, xs,
                                y + c * ldy + r0, ldy);
            }
            for (; c < nc; c++) {
                llm_kq_tile_pre(kind, 4, 1, nb, pre, xp + c * xs, xs,
                                y + c * ldy + r0, ldy);
            }
        } else {
            for (r = 0; r < rr; r++) {
                for (c = 0; c + 3 <= nc; c += 3) {
                    llm_kq_tile_pre(kind, 1, 3, nb, pre + r * nb,
                                    xp + c * xs, xs, y + c * ldy + r0 + r,
                                    ldy);
                }
                for (; c < nc; c++) {
                    llm_kq_tile_pre(kind, 1, 1, nb, pre + r * nb,
                                    xp + c * xs, xs, y + c * ldy + r0 + r,
                                    ldy);
                }
            }
        }
    }
}


/* Rows too long for the transposed tiles: the prepared-row tiles from
 * LLM_ROW_COLS columns, the plain ones below (and past LLM_KPREP_MAX). */
#define LLM_KQ_LONG(name, kind)                                             \
static void                                                                 \
llm_gemm_##name##_long(int64_t n, int64_t nr, int64_t nc, const void *w,    \
    size_t ws, const void *x, size_t xs, float *y, size_t ldy)              \
{                                                                           \
    if (nc < LLM_ROW_COLS || n / LLM_QK_K > LLM_KPREP_MAX) {                \
        llm_gemm_##name(n, nr, nc, w, ws, x, xs, y, ldy);                   \
        return;                                                             \
    }                                                                       \
    llm_gemm_kq_pre(kind, n, nr, nc, w, ws, x, xs, y, ldy);                 \
}

LLM_KQ_LONG(q5_K, 5)


/* ---- Q4_0 / Q8_0 with prepared activation columns -------------------- */

/*
 * For several columns the per-column work of the tiles above (load two
 * blocks, the offset sum, the scale pair) is done once per column group
 * into this form, then every row tile reads it straight from L1/L2.
 */
typedef struct {
    __m512i  y;         /* qs of blocks 2i, 2i+1 */
    __m512i  init;      /* -offset * sum(y) per lane group */
    __m512   yd;        /* [d(2i) x 8 | d(2i+1) x 8] */
} llm_q8_pair_t;

/* Stack budget for one column group's prepared pairs. */
#define LLM_PREP_MAX  (4 * 128)


LLM_INLINE void
llm_q8_0_prep(const char *x, int64_t np, const int q8, llm_q8_pair_t *out)
{
    const __m512i           off = _mm512_set1_epi8(q8 ? (char) 0x80 : 8);
    const llm_block_q8_0   *q = (const llm_block_q8_0 *) x;

    for (int64_t i = 0; i < np; i++, q += 2) {
        __m512i  yv = _mm512_inserti64x4(_mm512_castsi256_si512(
                          _mm256_loadu_si256((const void *) q[0].qs)),
                          _mm256_loadu_si256((const void *) q[1].qs), 1);

        out[i].y = yv;
        out[i].init = _mm512_sub_epi32(_mm512_setzero_si512(),
                          _mm512_dpbusd_epi32(_mm512_setzero_si512(), off,
                                              yv));
        out[i].yd = llm_pair_scale(q[0].d, q[1].d);
    }
}


/*
 * R x C results from np block pairs; pre holds C columns of np pairs.
 * Odd trailing blocks are left to the caller.
 */
LLM_INLINE void
llm_q_0_tile_pre(const int R, const int C, const int q8, int64_t np,
    const char *w, size_t ws, const llm_q8_pair_t *pre, float *y,
    size_t ldy)
{
    const __m512i  m4 = _mm512_set1_epi8(0x0f);
    const __m512i  bias = _mm512_set1_epi8((char) 0x80);
    __m512         acc[LLM_MAXR][LLM_MAXC];
    int64_t        b;
    int            r, c;

#pragma GCC unroll 4
    for (r = 0; r < R; r++) {
#pragma GCC unroll 4
        for (c = 0; c < C; c++) {
            acc[r][c] = _mm512_setzero_ps();
        }
    }

    for (b = 0; b < np; b++) {
        __m512i  wq[LLM_MAXR];
        __m512   wd[LLM_MAXR];

#pragma GCC unroll 4
        for (r = 0; r < R; r++) {
            if (q8) {
                const llm_block_q8_0  *p = (const llm_block_q8_0 *)
                                           (w + r * ws) + 2 * b;
                __m512i  z = _mm512_inserti64x4(_mm512_castsi256_si512(
                                 _mm256_loadu_si256((const void *) p[0].qs)),
                                 _mm256_loadu_si256((const void *) p[1].qs),
                                 1);

                wq[r] = _mm512_xor_si512(z, bias);
                wd[r] = llm_pair_scale(p[0].d, p[1].d);
            } else {
                const llm_block_q4_0  *p = (const llm_block_q4_0 *)
                                           (w + r * ws) + 2 * b;
                __m256i  t = _mm256_inserti128_si256(_mm256_castsi128_si256(
                                 _mm_loadu_si128((const void *) p[0].qs)),
                                 _mm_loadu_si128((const void *) p[1].qs), 1);
                __m512i  z = _mm512_inserti64x4(_mm512_castsi256_si512(t),
                                                _mm256_srli_epi16(t, 4), 1);

                z = _mm512_shuffle_i64x2(z, z, _MM_SHUFFLE(3, 1, 2, 0));
                wq[r] = _mm512_and_si512(z, m4);
                wd[r] = llm_pair_scale(p[0].d, p[1].d);
            }
        }

        if (R == 1) {
            /* one row stream: run ahead of it across 4 KB pages, where
             * the hardware prefetchers stop (file pages are not huge) */
            _mm_prefetch(w + 2 * b * (q8 ? sizeof(llm_block_q8_0)
                                         : sizeof(llm_block_q4_0)) + 1024,
                         _MM_HINT_T0);
        }
#pragma GCC unroll 4
        for (c = 0; c < C; c++) {
            const llm_q8_pair_t  *pc = pre + c * np + b;

#pragma GCC unroll 4
            for (r = 0; r < R; r++) {
                __m512i  dp = _mm512_dpbusd_epi32(pc->init, wq[r], pc->y);

                acc[r][c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dp),
                                            _mm512_mul_ps(wd[r], pc->yd),
                                            acc[r][c]);
            }
        }
    }

#pragma GCC unroll 4
    for (r = 0; r < R; r++) {
#pragma GCC unroll 4
        for (c = 0; c < C; c++) {
            y[c * ldy + r] = _mm512_reduce_add_ps(acc[r][c]);
        }
    }
}


/*
 * Several columns: for each group of 4, prepare the columns once, then
 * run every 4-row tile over them; an odd last block is added per result
 * by the plain tile.  Very long rows take the plain driver.
 */
LLM_INLINE void
llm_gemm_q_0_pre(const int q8, int64_t n, int64_t nr, int64_t nc,
    const void *w, size_t ws, const void *x, size_t xs, float *y,
    size_t ldy)
{
    llm_q8_pair_t  pre[LLM_PREP_MAX];
    const char    *wp = w, *xp = x;
    int64_t        nb = n / LLM_QK, np = nb / 2, c0, r, c, cc, q0, q1;
    size_t         bsz = q8 ? sizeof(llm_block_q8_0)
                            : sizeof(llm_block_q4_0);

    /* rows in chunks that stay in L2 while every column group passes */
    for (q0 = 0; q0 < nr; q0 = q1) {
        q1 = q0 + LLM_ROW_CHUNK < nr ? q0 + LLM_ROW_CHUNK : nr;

        for (c0 = 0; c0 < nc; c0 += 4) {
            cc = nc - c0 < 4 ? nc - c0 : 4;
            for (c = 0; c < cc; c++) {
                llm_q8_0_prep(xp + (c0 + c) * xs, np, q8, pre + c * np);
            }

            /* four columns: 4x4 tiles from L2.  Fewer: one weight row
             * at a time, as llm_gemm_q4_0_g4 (llm-kbench -j 2 Q8_0,
             * GMAC/s at 2 / 3 columns: 28-30 / 33-36 with 4x1 tiles per
             * column, 41-43 / 48-62 this way; at 64 columns 4x4 tiles
             * keep 118 where one row gives 78-87) */
            for (r = q0; cc == 4 && r + 4 <= q1; r += 4) {
                llm_q_0_tile_pre(4, 4, q8, np, wp + r * ws, ws, pre,
                                 y + c0 * ldy + r, ldy);
            }
            for (; r < q1; r++) {
                switch (cc) {
                case 1:
                    llm_q_0_tile_pre(1, 1, q8, np, wp + r * ws, ws, pre,
                                     y + c0 * ldy + r, ldy);
                    break;
                case 2:
                    llm_q_0_tile_pre(1, 2, q8, np, wp + r * ws, ws, pre,
                                     y + c0 * ldy + r, ldy);
                    break;
                case 3:
                    llm_q_0_tile_pre(1, 3, q8, np, wp + r * ws, ws, pre,
                                     y + c0 * ldy + r, ldy);
                    break;
                default:
                    llm_q_0_tile_pre(1, 4, q8, np, wp + r * ws, ws, pre,
                                     y + c0 * ldy + r, ldy);
                    break;
                }
            }

            if (nb & 1) {           /* the odd last block */
                for (c = 0; c < cc; c++) {
                    const char  *xb = xp + (c0 + c) * xs
                                      + (nb - 1) * sizeof(llm_block_q8_0);

                    for (r = q0; r < q1; r++) {
                        const char  *wb = wp + r * ws + (nb - 1) * bsz;
                        float        t;

                        if (q8) {
                            llm_q8_0_tile(1, 1, 1, wb, 0, xb, 0, &t, 1);
                        } else {
                            llm_q4_0_tile(1, 1, 1, wb, 0, xb, 0, &t, 1);
                        }
                        y[(c0 + c) * ldy + r] += t;
                    }
                }
            }
        }
    }
}


/* Rows too long for the transposed tiles: the prepared-column tiles while
 * a column group fits LLM_PREP_MAX, the plain ones beyond. */
#define LLM_Q0_LONG(name, q8)                                               \
static void                                                                 \
llm_gemm_##name##_long(int64_t n, int64_t nr, int64_t nc, const void *w,    \
    size_t ws, const void *x, size_t xs, float *y, size_t ldy)              \
{                                                                           \
    if (n / LLM_QK / 2 * (nc < 4 ? nc : 4) > LLM_PREP_MAX) {                \
        llm_gemm_##name(n, nr, nc, w, ws, x, xs, y, ldy);                   \
        return;                                                             \
    }                                                                       \
    llm_gemm_q_0_pre(q8, n, nr, nc, w, ws, x, xs, y, ldy);                  \
}

LLM_Q0_LONG(q4_0, 0)


/* ---- Q4_0 x Q8_0: one lane per block ----------------------------------- */

/*
 * Four Q4_0 blocks are 72 bytes.  Two overlapping 64-byte loads (at 0 and
 * 8) cover them; since every block's qs starts at an even offset, one
 * two-source word permute gathers the 64 quant bytes in block order.
 * Sixteen blocks (a quad of four such groups) are then transposed so that
 * every vector holds 4 bytes of each block, and the activation columns
 * are prepared in the same layout (llm_q4_t16_t, the -8 offset folded
 * into the accumulator's start).  Each column's vpdpbusd chains then end
 * with one lane per block: per 16 blocks and column, 8 vpdpbusd, an add,
 * a convert, a multiply and an FMA; the weight side (loads, permutes, the
 * transpose, nibble split, scales) is shared by all columns.  From RAM
 * one column needs the prefetch LLM_PF_TILES ahead (kernels_common.h).
 */

/* y of 4 activation blocks in the weights' group order. */
typedef struct {
    __m512i  lo;        /* y[0..15] of blocks 4g..4g+3, 16 bytes each */
    __m512i  hi;        /* y[16..31] */
    __m512i  init;      /* per 32-bit lane: -8 * (its 4 lo + 4 hi bytes) */
} llm_q4_g4_t;

/* Quads per row on the stack: rows up to 8192 weights; longer rows take
 * the pair tiles. */
#define LLM_G4_MAX    64
#define LLM_G4_QUADS  (LLM_G4_MAX / 4)


/* Group of 4 activation blocks q in the weights' group order. */
LLM_INLINE void
llm_q4_g4_group(const llm_block_q8_0 *q, llm_q4_g4_t *out)
{
    const __m512i  eight = _mm512_set1_epi8(8);
    __m512i        lo, hi, s;

#define LLM_G4_Y(o)                                                          \
    _mm512_inserti32x4(_mm512_inserti32x4(_mm512_inserti32x4(                \
        _mm512_castsi128_si512(_mm_loadu_si128((const void *)                \
                                               (q[0].qs + (o)))),            \
        _mm_loadu_si128((const void *) (q[1].qs + (o))), 1),                 \
        _mm_loadu_si128((const void *) (q[2].qs + (o))), 2),                 \
        _mm_loadu_si128((const void *) (q[3].qs + (o))), 3)

    lo = LLM_G4_Y(0);
    hi = LLM_G4_Y(16);
#undef LLM_G4_Y
    s = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(),
                                                eight, lo),
                            eight, hi);
    out->lo = lo;
    out->hi = hi;
    out->init = _mm512_sub_epi32(_mm512_setzero_si512(), s);
}


/* The block scales of a quad of groups from block b0 of x, lane 4k + g =
 * block k of group g, zero past the G-th group. */
LLM_INLINE __m512
llm_q4_quad_xd(const llm_block_q8_0 *q, int G)
{
    float  d[16];
    int    g, k;

    memset(d, 0, sizeof(d));
    for (g = 0; g < G; g++) {
        for (k = 0; k < 4; k++) {
            d[4 * k + g] = llm_h2f_hw(q[4 * g + k].d);
        }
    }
    return _mm512_loadu_ps(d);
}


/* 4x4 transpose of 32-bit elements within each 128-bit lane: out[i]
 * dword g = in[g] dword i. */
LLM_INLINE void
llm_tr4x4_epi32(const __m512i in[4], __m512i out[4])
{
    __m512i  t0 = _mm512_unpacklo_epi32(in[0], in[1]);
    __m512i  t1 = _mm512_unpackhi_epi32(in[0], in[1]);
    __m512i  t2 = _mm512_unpacklo_epi32(in[2], in[3]);
    __m512i  t3 = _mm512_unpackhi_epi32(in[2], in[3]);

    out[0] = _mm512_unpacklo_epi64(t0, t2);
    out[1] = _mm512_unpackhi_epi64(t0, t2);
    out[2] = _mm512_unpacklo_epi64(t1, t3);
    out[3] = _mm512_unpackhi_epi64(t1, t3);
}


/* Permute indices of the Q4_0 tile. */
typedef struct {
    __m512i  q;         /* out word k: block k / 8, word k % 8 of its qs =
                           byte-pair of the 72 bytes at 2 + 18 (k / 8) +
                           2 (k % 8); a holds words 0..31, b (loaded at
                           byte 8) words 4..35 as its 0..31 */
    __m512i  s0;        /* word 2k = word 9k of the first source, 2k + 1
                           of the second */
    __m512i  s1;        /* word 4k + g: group g = word 2k + (g & 1) of
                           source g / 2 */
} llm_q4_idx_t;

LLM_INLINE llm_q4_idx_t
llm_q4_idx(void)
{
    llm_q4_idx_t  ix;

    ix.q = _mm512_set_epi16(32 + 31, 32 + 30, 32 + 29, 32 + 28,
                            31, 30, 29, 28, 26, 25, 24, 23, 22, 21, 20, 19,
                            17, 16, 15, 14, 13, 12, 11, 10,
                            8, 7, 6, 5, 4, 3, 2, 1);
    ix.s0 = _mm512_set_epi16(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                             0, 0, 0, 0, 0, 0, 0, 0,
                             32 + 27, 27, 32 + 18, 18, 32 + 9, 9, 32 + 0, 0);
    ix.s1 = _mm512_set_epi16(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                             32 + 7, 32 + 6, 7, 6, 32 + 5, 32 + 4, 5, 4,
                             32 + 3, 32 + 2, 3, 2, 32 + 1, 32 + 0, 1, 0);
    return ix;
}


/* The 16 fp16 weight scales of a quad (words 0, 9, 18, 27 of each group's
 * first 64 bytes a[g]) in the summed order: lane 4k + g = block k of
 * group g. */
LLM_INLINE __m512
llm_q4_quad_wd(const __m512i a[4], const llm_q4_idx_t *ix)
{
    return _mm512_cvtph_ps(_mm512_castsi512_si256(
               _mm512_permutex2var_epi16(
                   _mm512_permutex2var_epi16(a[0], ix->s0, a[1]), ix->s1,
                   _mm512_permutex2var_epi16(a[2], ix->s0, a[3]))));
}


/* Group g of 4 blocks at p: its first 64 bytes into a, the 64 quant bytes
 * in block order returned; the row LLM_PF_TILES * step ahead prefetched. */
LLM_INLINE __m512i
llm_q4_group_qs(const char *p, size_t step, const llm_q4_idx_t *ix,
    __m512i *a)
{
    *a = _mm512_loadu_si512((const void *) p);
    /* tiles ahead, same place: the hardware prefetchers follow a walk
     * over many short rows late */
    _mm_prefetch(p + LLM_PF_TILES * step, _MM_HINT_T0);
    _mm_prefetch(p + LLM_PF_TILES * step + 64, _MM_HINT_T0);
    return _mm512_permutex2var_epi16(*a, ix->q,
               _mm512_loadu_si512((const void *) (p + 8)));
}


/* Column y of a quad, transposed as the weights are. */
typedef struct {
    __m512i  lo[4];     /* dword 4k + g of lo[i]: y[4i..4i+3] of block k
                           of group g; hi[i]: y[16 + 4i..] */
    __m512i  hi[4];
    __m512i  init;      /* lane 4k + g: -8 x the sum of the block's y */
    __m512   d;         /* lane 4k + g: the block's scale */
} llm_q4_t16_t;

/* Quads of a row of nb blocks (the last may be partial). */
#define LLM_Q4_QUADS(nb)  (((nb) / 4 + 3) / 4)


/* Column x of nb blocks as quads. */
LLM_INLINE void
llm_q4_t16_prep(const char *x, int64_t nb, llm_q4_t16_t *out)
{
    const llm_block_q8_0  *q = (const llm_block_q8_0 *) x;
    const int64_t          ng = nb / 4, nq = LLM_Q4_QUADS(nb);
    llm_q4_g4_t            gr;
    __m512i                lo[4], hi[4], in[4], t[4];
    int64_t                qi;
    int                    g, G;

    for (qi = 0; qi < nq; qi++, out++) {
        G = ng - 4 * qi < 4 ? (int) (ng - 4 * qi) : 4;
        for (g = 0; g < 4; g++) {
            if (g < G) {
                llm_q4_g4_group(q + 16 * qi + 4 * g, &gr);
                lo[g] = gr.lo;
                hi[g] = gr.hi;
                in[g] = gr.init;
            } else {
                lo[g] = hi[g] = in[g] = _mm512_setzero_si512();
            }
        }
        llm_tr4x4_epi32(lo, out->lo);
        llm_tr4x4_epi32(hi, out->hi);
        llm_tr4x4_epi32(in, t);
        out->init = _mm512_add_epi32(_mm512_add_epi32(t[0], t[1]),
                                     _mm512_add_epi32(t[2], t[3]));
        out->d = llm_q4_quad_xd(q + 16 * qi, G);
        if (G <= 2) {
            /* the half quad's layout (llm_q4_t16_tile): dwords 0, 1 of
             * each 128-bit lane of vectors 2h and 2h + 1 */
            for (g = 0; g < 2; g++) {
                out->lo[g] = _mm512_unpacklo_epi64(out->lo[2 * g],
                                                   out->lo[2 * g + 1]);
                out->hi[g] = _mm512_unpacklo_epi64(out->hi[2 * g],
                                                   out->hi[2 * g + 1]);
            }
        }
    }
}


/*
 * The last quad of a row whose groups end 1 or 2 past a quad (768 values:
 * one quad and a half): the full step would spend half its multiplies on
 * the zero groups.  With only groups 0 and 1, unpacking their qs in each
 * 128-bit lane k gives dwords [g0 i, g1 i, g0 i+1, g1 i+1] for i = 0 and
 * 2, two vectors instead of four, with each block in two lanes; the
 * prepared column is in the same layout (llm_q4_t16_prep).  A shuffle and
 * an add then give every block's sum in its lane 4k + g as the full step
 * has it (the sums are integers: the same values), the zero groups'
 * lanes meet zero scales, and the float step is the full step's: the
 * result is bit for bit the one the full step gives.
 */
LLM_INLINE void
llm_q4_t16_half(const int C, const char *w, size_t ws, int G,
    const llm_q4_t16_t *pre, int64_t nq, const llm_q4_idx_t *ix,
    __m512 *acc)
{
    const __m512i  m4 = _mm512_set1_epi8(0x0f);
    __m512i        a[4], qv[2], u[2], lo[2], hi[2];
    __m512         wq;
    int            c, h;

    qv[0] = llm_q4_group_qs(w, ws, ix, &a[0]);
    if (G > 1) {
        qv[1] = llm_q4_group_qs(w + 4 * sizeof(llm_block_q4_0), ws, ix,
                                &a[1]);
    } else {
        a[1] = qv[1] = _mm512_setzero_si512();
    }
    a[2] = a[3] = _mm512_setzero_si512();
    u[0] = _mm512_unpacklo_epi32(qv[0], qv[1]);
    u[1] = _mm512_unpackhi_epi32(qv[0], qv[1]);
    for (h = 0; h < 2; h++) {
        lo[h] = _mm512_and_si512(u[h], m4);
        hi[h] = _mm512_and_si512(_mm512_srli_epi16(u[h], 4), m4);
    }
    wq = llm_q4_quad_wd(a, ix);

#pragma GCC unroll 16
    for (c = 0; c < C; c++) {
        const llm_q4_t16_t  *pc = pre + c * nq;
        __m512i              s0, s1;

        s0 = _mm512_dpbusd_epi32(pc->init, lo[0], pc->lo[0]);
        s1 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), hi[0], pc->hi[0]);
        s0 = _mm512_dpbusd_epi32(s0, lo[1], pc->lo[1]);
        s1 = _mm512_dpbusd_epi32(s1, hi[1], pc->hi[1]);
        s0 = _mm512_add_epi32(s0, s1);
        s0 = _mm512_add_epi32(s0, _mm512_shuffle_epi32(s0, _MM_PERM_BADC));
        acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s0),
                                 _mm512_mul_ps(wq, pc->d), acc[c]);
    }
}


/* One weight row x C columns over ng groups; blocks past 4 * ng are left
 * to the caller. */
LLM_INLINE void
llm_q4_t16_tile(const int C, int64_t ng, int64_t nq, const char *w,
    size_t ws, const llm_q4_t16_t *pre, float *y, size_t ldy)
{
    const llm_q4_idx_t  ix = llm_q4_idx();
    const __m512i  m4 = _mm512_set1_epi8(0x0f);
    __m512         acc[LLM_T_COLS];
    int64_t        qi;
    int            c, g, i, G;

#pragma GCC unroll 16
    for (c = 0; c < C; c++) {
        acc[c] = _mm512_setzero_ps();
    }

    for (qi = 0; qi < nq; qi++) {
        __m512i  a[4], qv[4], v[4], lo[4], hi[4];
        __m512   wq;

        G = ng - 4 * qi < 4 ? (int) (ng - 4 * qi) : 4;
        if (G <= 2) {
            llm_q4_t16_half(C, w + 16 * qi * sizeof(llm_block_q4_0), ws,
                            G, pre + qi, nq, &ix, acc);
            continue;
        }
#pragma GCC unroll 4
        for (g = 0; g < 4; g++) {
            if (g >= G) {
                a[g] = qv[g] = _mm512_setzero_si512();
                continue;
            }
            qv[g] = llm_q4_group_qs(w + (4 * qi + g) * 4
                                        * sizeof(llm_block_q4_0),
                                    ws, &ix, &a[g]);
        }
        llm_tr4x4_epi32(qv, v);
#pragma GCC unroll 4
        for (i = 0; i < 4; i++) {
            lo[i] = _mm512_and_si512(v[i], m4);
            hi[i] = _mm512_and_si512(_mm512_srli_epi16(v[i], 4), m4);
        }
        wq = llm_q4_quad_wd(a, &ix);

#pragma GCC unroll 16
        for (c = 0; c < C; c++) {
            const llm_q4_t16_t  *pc = pre + c * nq + qi;
            __m512i              s0 = pc->init;
            __m512i              s1 = _mm512_setzero_si512();

#pragma GCC unroll 4
            for (i = 0; i < 4; i++) {
                s0 = _mm512_dpbusd_epi32(s0, lo[i], pc->lo[i]);
                s1 = _mm512_dpbusd_epi32(s1, hi[i], pc->hi[i]);
            }
            acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(
                                         _mm512_add_epi32(s0, s1)),
                                     _mm512_mul_ps(wq, pc->d), acc[c]);
        }
    }

#pragma GCC unroll 16
    for (c = 0; c < C; c++) {
        y[c * ldy] = _mm512_reduce_add_ps(acc[c]);
    }
}


/* The tile and then the last nb % 4 blocks, column by column by the pair
 * tile (it sums each result in the same order whatever its width). */
LLM_INLINE void
llm_q4_t16_rows(const int C, int64_t nb, const char *w, size_t ws,
    const char *x, size_t xs, const llm_q4_t16_t *pre, float *y, size_t ldy)
{
    const int64_t  ng = nb / 4;
    float          t;
    int            c;

    llm_q4_t16_tile(C, ng, LLM_Q4_QUADS(nb), w, ws, pre, y, ldy);
    if (nb > 4 * ng) {
        for (c = 0; c < C; c++) {
            llm_q4_0_tile(1, 1, nb - 4 * ng,
                          w + 4 * ng * sizeof(llm_block_q4_0), ws,
                          x + c * xs + 4 * ng * sizeof(llm_block_q8_0), xs,
                          &t, 1);
            y[c * ldy] += t;
        }
    }
}

/* One column in this layout ran level with or ahead of the quad step that
 * transposed each column's sums (llm-kbench -c 1: in cache 25-33 vs 24-28
 * GB/s, from RAM with 2 threads 29-35 vs 22-28). */
LLM_T_DRIVER(llm_gemm_q4_0_t16, llm_q4_t16_t, LLM_QK, LLM_G4_QUADS,
             LLM_Q4_QUADS, llm_q4_t16_prep, llm_q4_t16_rows,
             llm_gemm_q4_0_long, 1, 16)


/* ---- Q4_0_R16 x Q8_0: 16 interleaved rows, one lane per row ------------- */

/*
 * Weights regrouped at load (llm_repack_rows): block b of 16 rows is 4
 * vectors of 4 quant bytes per row, so one vpdpbusd multiplies 16 rows by
 * 4 bytes of a column, the column's 4 bytes broadcast from memory.  Per
 * block and column: 8 vpdpbusd in one chain, a convert, a multiply and an FMA
 * on one lane per row, with no transposes, permutes or final lane sums
 * (the Q4_0 tile needs all three), and each column brings 40 bytes per
 * block instead of 640 per 16 blocks of the tile's prepared vectors.  From
 * RAM the tile lost a third of its in-cache rate to those 64-byte column
 * loads meeting the weight stream; this one keeps most of it (BENCHMARKS).
 *
 * GCC 12 does not fold _mm512_set1_epi32(*p) into vpdpbusd's embedded
 * broadcast (it emits vpbroadcastd, which shares the multiply pipes here:
 * 165 against 246 GMAC/s at 8 columns in L2), hence the one line of asm.
 */

/* A column's block: its quants, -off x their sum (the weights' offset, as
 * the accumulator's start) and its scale. */
typedef struct {
    int8_t   qs[LLM_QK];
    int32_t  init;
    float    d;
} llm_q4r_col_t;

/* Blocks of a row per pass: the prepared columns (40 bytes a block and
 * column) stay within 80 KB of stack at 16 columns. */
#define LLM_Q4R_SLICE  128
/* The weight stream's prefetch, about this many bytes ahead in whole
 * regrouped blocks: 8 of 288 / 272 bytes, 4 of Q8_0_R16's 544 (8 of
 * those read RAM at 91-95% of a plain read at one column, 4 at 99-100%;
 * docs/BENCHMARKS.md "Kernels"). */
#define LLM_Q4R_PF_BYTES  2304

/*
 * The regrouped kinds: Q4_0 (weights q - 8: the nibble itself times the
 * column, less 8 x the column's sum), IQ4_NL and MXFP4 (the nibble's
 * level from a table, stored as level + 128 so that it is an unsigned
 * byte for vpdpbusd, less 128 x the column's sum).  IQ4_NL's scale is
 * fp16 as Q4_0's; MXFP4's an E8M0 exponent per row.  The offsets make
 * every block sum the exact integer sum of level x activation, as the
 * scalar references compute it.
 */
#define LLM_R16_Q4_0   0
#define LLM_R16_IQ4NL  1
#define LLM_R16_MXFP4  2
/* Q8_0_R16: the quants stored + 128, the accumulator starting at -128 x
 * the column's block sum as for the table kinds; no unpacking. */
#define LLM_R16_Q8_0   3


/* Bytes of a regrouped block of kind. */
LLM_INLINE size_t
llm_r16_block_bytes(const int kind)
{
    return kind == LLM_R16_MXFP4 ? sizeof(llm_block_mxfp4x16)
           : kind == LLM_R16_Q8_0 ? sizeof(llm_block_q8_0x16)
           : sizeof(llm_block_q4_0x16);
}


LLM_INLINE __m512i
llm_dpbusd_b4(__m512i acc, __m512i u8, const int8_t *s8)
{
    __asm__("vpdpbusd %2%{1to16%}, %1, %0"
            : "+v" (acc)
            : "v" (u8), "m" (*(const int32_t (*)[1]) (const void *) s8));
    return acc;
}


/* Blocks [b0, b0 + nbs) of C columns, block-major: p[b * C + c]; init is
 * -off x the sum of the block's quants. */
LLM_INLINE void
llm_q4r_prep(const int C, const int off, const char *x, size_t xs,
    int64_t b0, int64_t nbs, llm_q4r_col_t *p)
{
    const __m256i  bias = _mm256_set1_epi8((char) 0x80);
    int64_t        b;
    int            c;

    for (b = 0; b < nbs; b++) {
        for (c = 0; c < C; c++, p++) {
            const llm_block_q8_0  *q = (const llm_block_q8_0 *) (x + c * xs)
                                       + b0 + b;
            __m256i                v, s;
            __m128i                h;

            v = _mm256_loadu_si256((const void *) q->qs);
            _mm256_storeu_si256((void *) p->qs, v);
            /* sum of the signed bytes: |x + 128| summed, less 32 x 128 */
            s = _mm256_sad_epu8(_mm256_xor_si256(v, bias),
                                _mm256_setzero_si256());
            h = _mm_add_epi64(_mm256_castsi256_si128(s),
                              _mm256_extracti128_si256(s, 1));
            h = _mm_add_epi64(h, _mm_unpackhi_epi64(h, h));
            p->init = -off * (_mm_cvtsi128_si32(h) - 32 * 128);
            p->d = llm_h2f_hw(q->d);
        }
    }
}


/* The level table of a kind as unsigned bytes, level + 128, in every
 * 128-bit lane (unused for Q4_0). */
LLM_INLINE __m512i
llm_r16_levels(const int kind)
{
    const int8_t  *lv = kind == LLM_R16_MXFP4 ? llm_mxfp4_kvalues
                                              : llm_iq4_kvalues;

    return _mm512_broadcast_i32x4(_mm_xor_si128(
               _mm_loadu_si128((const void *) lv),
               _mm_set1_epi8((char) 0x80)));
}


/* The 16 rows' weight scales of a regrouped block: fp16 d[16], or
 * 2^(e - 128) from E8M0 exponents (llm_mxfp4_e8m0_half, subnormal for
 * e < 2). */
LLM_INLINE __m512
llm_r16_scales(const int kind, const char *blk)
{
    if (kind != LLM_R16_MXFP4) {
        return _mm512_cvtph_ps(_mm256_loadu_si256((const void *) blk));
    }
    __m512i    e = _mm512_cvtepu8_epi32(_mm_loadu_si128((const void *) blk));
    __mmask16  sub = _mm512_cmplt_epu32_mask(e, _mm512_set1_epi32(2));
    __m512i    nrm = _mm512_slli_epi32(_mm512_sub_epi32(e,
                                           _mm512_set1_epi32(1)), 23);
    __m512i    dn = _mm512_sllv_epi32(_mm512_set1_epi32(0x00200000), e);

    return _mm512_castsi512_ps(_mm512_mask_blend_epi32(sub, nrm, dn));
}


/* ---- AMX-INT8: the regrouped tiles on the tile unit -------------------- */

/*
 * On CPUs with AMX-INT8 (Sapphire Rapids and later Xeons) the block sums
 * of a regrouped tile come from the tile unit: one TDPBSSD per 32-weight
 * block multiplies C columns' quants (the A tile: C rows of 32 bytes,
 * straight from the Q8_0 activation rows) by the 16 rows' signed weights
 * (the B tile: 8 rows of 64 bytes, which is the regrouped layout itself:
 * row i is the 16 rows' bytes 4i..4i+3) into a C x 16 int32 tile.  One
 * block per TDPBSSD keeps every sum the exact integer sum of that block,
 * so the rest is the vpdpbusd tile's: per column a convert, the scales'
 * product and an FMA, block after block, the same bits (test_quant and
 * test_quant_r16 hold both to the scalar reference).  The weights are
 * made signed as they are unpacked (Q8_0's + 128 undone, nibbles through
 * a signed level table), so there is no offset to take out and the
 * columns need no preparation beyond their scales.
 *
 * That per-block scaling (3 vector ops per column and block) stays and
 * bounds the gain: in L2, 16 columns, one thread, 220 -> 270-300 GMAC/s
 * (docs/BENCHMARKS.md "Kernels"); below 12 columns the tile unit's fixed
 * cost per block (two tile loads, a tile store, the unpacking) loses to
 * vpdpbusd.  What no library does: oneDNN has no ggml block formats with
 * per-32 scales.
 *
 * Linux hands out the tile state only on request (arch_prctl
 * ARCH_REQ_XCOMP_PERM, once per process); each call loads its tile
 * configuration and releases the tiles at the end, so a thread between
 * calls carries no tile state through a context switch.
 */
#define LLM_AMX_MINC   12       /* columns from which the tile unit pays */
/* Block b0's quants in the first of the Q8_0 activation rows at x. */
#define LLM_AMX_QS(x, b0)                                                   \
    ((const int8_t *) ((const llm_block_q8_0 *) (const void *) (x) + (b0))->qs)

static int  llm_amx_ok;         /* the CPU and the kernel allow AMX-INT8 */
static int  llm_amx_on;         /* and it is in use (LLM_AMX=0: not) */

typedef struct {
    uint8_t   palette;
    uint8_t   start_row;
    uint8_t   reserved[14];
    uint16_t  colsb[16];
    uint8_t   rows[16];
} __attribute__((aligned(64))) llm_amx_cfg_t;


static int
llm_amx_detect(void)
{
    unsigned  a, b, c, d, lo, hi;

    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)
        || !(d & (1u << 24)) || !(d & (1u << 25)))
    {
        return 0;                       /* no AMX-TILE / AMX-INT8 */
    }
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 27))) {
        return 0;                       /* no OSXSAVE: no xgetbv */
    }
    __asm__ volatile ("xgetbv" : "=a" (lo), "=d" (hi) : "c" (0));
    if ((lo & (3u << 17)) != (3u << 17)) {
        return 0;                       /* XTILECFG / XTILEDATA off */
    }
    /* ARCH_REQ_XCOMP_PERM (0x1023) for XFEATURE_XTILEDATA (18) */
    return syscall(SYS_arch_prctl, 0x1023, 18) == 0;
}


/* A, B and C tiles 0-2 and 3-5 for c columns. */
LLM_INLINE void
llm_amx_config(int c)
{
    llm_amx_cfg_t  cfg;

    memset(&cfg, 0, sizeof(cfg));
    cfg.palette = 1;
    for (int t = 0; t < 6; t += 3) {
        cfg.rows[t] = (uint8_t) c;              /* A: c columns x 32 B */
        cfg.colsb[t] = LLM_QK;
        cfg.rows[t + 1] = LLM_QK / 4;           /* B: 8 x 64 B */
        cfg.colsb[t + 1] = 64;
        cfg.rows[t + 2] = (uint8_t) c;          /* C: c x 16 int32 */
        cfg.colsb[t + 2] = 64;
    }
    _tile_loadconfig(&cfg);
}


/* A regrouped block's 16 rows as signed bytes in the B tile's order
 * (bytes 4i.. of every row, then 16 + 4i..). */
LLM_INLINE void
llm_amx_weights(const int kind, const char *w, int8_t *bt)
{
    const __m512i  m4 = _mm512_set1_epi8(0x0f);
    const __m512i  bias = _mm512_set1_epi8((char) 0x80);
    const size_t   qo = kind == LLM_R16_MXFP4 ? 16 : 32;
    __m512i        lv = _mm512_setzero_si512();
    int            i;

    if (kind == LLM_R16_Q4_0) {
        lv = _mm512_broadcast_i32x4(_mm_setr_epi8(-8, -7, -6, -5, -4, -3,
                                                  -2, -1, 0, 1, 2, 3, 4, 5,
                                                  6, 7));
    } else if (kind != LLM_R16_Q8_0) {
        lv = _mm512_xor_si512(llm_r16_levels(kind), bias);
    }
    if (kind == LLM_R16_Q8_0) {
#pragma GCC unroll 8
        for (i = 0; i < 8; i++) {
            _mm512_store_si512((void *) (bt + 64 * i), _mm512_xor_si512(
                _mm512_loadu_si512((const void *) (w + qo + 64 * i)), bias));
        }
        return;
    }
#pragma GCC unroll 4
    for (i = 0; i < 4; i++) {
        __m512i  v = _mm512_loadu_si512((const void *) (w + qo + 64 * i));

        _mm512_store_si512((void *) (bt + 64 * i),
                           _mm512_shuffle_epi8(lv, _mm512_and_si512(v, m4)));
        _mm512_store_si512((void *) (bt + 256 + 64 * i),
                           _mm512_shuffle_epi8(lv, _mm512_and_si512(
                               _mm512_srli_epi16(v, 4), m4)));
    }
}


/* Blocks [b0, b0 + nbs) of C columns' scales, block-major: d[b * C + c]
 * (the tile unit takes the quants from the rows as they are). */
LLM_INLINE void
llm_amx_prep(const int C, const char *x, size_t xs, int64_t b0,
    int64_t nbs, float *d)
{
    for (int64_t b = 0; b < nbs; b++) {
        for (int c = 0; c < C; c++) {
            *d++ = llm_h2f_hw(((const llm_block_q8_0 *) (x + c * xs))[b0 + b]
                              .d);
        }
    }
}


/* The products of the columns' quants at pb (rows xs apart) and the
 * unpacked weights at btb on tiles ta x tb into tc; then stored at ctb. */
#define LLM_AMX_DP(ta, tb, tc, pb, btb)                                     \
    do {                                                                    \
        _tile_loadd(ta, (pb), xs);                                          \
        _tile_loadd(tb, (btb), 64);                                         \
        _tile_zero(tc);                                                     \
        _tile_dpbssd(tc, ta, tb);                                           \
    } while (0)

/*
 * 16 rows x C columns (LLM_AMX_MINC <= C <= 16) over nbs regrouped blocks,
 * as llm_q4r_tile.  A software pipeline: while block b's sums are scaled,
 * the tile unit runs block b + LLM_AMX_AHEAD and block b + LLM_AMX_AHEAD
 * + 2's weights are unpacked, so each buffer is read a few blocks after
 * it was written.  A tile load does not take its data from pending
 * vector stores, nor a vector load from a tile store: with the steps of
 * one block back to back (or one block apart) each waited for the last,
 * no faster than vpdpbusd here (perf: the stalls on the first load after
 * each store).  Two sets of tiles alternate.
 */
#define LLM_AMX_AHEAD  3
#define LLM_AMX_PF     16       /* the weight prefetch, in blocks ahead */
#define LLM_AMX_UNPK   (LLM_AMX_AHEAD + 2)

LLM_INLINE void
llm_q4r_tile_amx(const int kind, const int C, int64_t nbs, const char *w,
    const int8_t *xq, size_t xs, const float *dx, int first, float *y,
    size_t ldy)
{
    const size_t  bb = llm_r16_block_bytes(kind), xb = sizeof(llm_block_q8_0);
    int8_t        bt[8][512] __attribute__((aligned(64)));
    int32_t       ct[4][256] __attribute__((aligned(64)));
    __m512        acc[16], wd;
    int64_t       b, j;
    int           c, i;

#pragma GCC unroll 16
    for (c = 0; c < C; c++) {
        acc[c] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(y + c * ldy);
    }
    llm_amx_config(C);

    for (j = 0; j < LLM_AMX_UNPK && j < nbs; j++) {
        llm_amx_weights(kind, w + j * bb, bt[j & 7]);
    }
    for (j = 0; j < LLM_AMX_AHEAD && j < nbs; j++) {
        if (j & 1) {
            LLM_AMX_DP(3, 4, 5, xq + j * xb, bt[j & 7]);
            _tile_stored(5, ct[j & 3], 64);
        } else {
            LLM_AMX_DP(0, 1, 2, xq + j * xb, bt[j & 7]);
            _tile_stored(2, ct[j & 3], 64);
        }
    }

    /* per block: the tile unit's loads and products, the unpacking (its
     * stores after those loads), the scaling (its loads before the tile
     * store: a load after a pending tile store waits for it) */
    for (b = 0; b < nbs; b++) {
        const char     *wb = w + b * bb;
        const char     *pf = wb + LLM_AMX_PF * bb;
        const float    *db = dx + b * C;
        const int32_t  *cb = ct[b & 3];
        const int64_t   ja = b + LLM_AMX_AHEAD, ju = b + LLM_AMX_UNPK;

        for (i = 0; i < (int) (bb + 63) / 64; i++) {
            _mm_prefetch(pf + 64 * i, _MM_HINT_T0);
        }
        if (ja < nbs) {
            if (ja & 1) {
                LLM_AMX_DP(3, 4, 5, xq + ja * xb, bt[ja & 7]);
            } else {
                LLM_AMX_DP(0, 1, 2, xq + ja * xb, bt[ja & 7]);
            }
        }
        if (ju < nbs) {
            llm_amx_weights(kind, w + ju * bb, bt[ju & 7]);
        }
        wd = llm_r16_scales(kind, wb);
#pragma GCC unroll 16
        for (c = 0; c < C; c++) {
            acc[c] = _mm512_fmadd_ps(
                _mm512_cvtepi32_ps(_mm512_load_si512(
                    (const void *) (cb + 16 * c))),
                _mm512_mul_ps(wd, _mm512_set1_ps(db[c])), acc[c]);
        }
        if (ja < nbs) {
            if (ja & 1) {
                _tile_stored(5, ct[ja & 3], 64);
            } else {
                _tile_stored(2, ct[ja & 3], 64);
            }
        }
    }
    _tile_release();

#pragma GCC unroll 16
    for (c = 0; c < C; c++) {
        _mm512_storeu_ps(y + c * ldy, acc[c]);
    }
}
#undef LLM_AMX_DP


int
llm_amx_set(int on)
{
    llm_amx_on = on && llm_amx_ok;
    return llm_amx_on;
}


int
llm_amx_available(void)
{
    return llm_amx_ok;
}


int
llm_amx_get(void)
{
    return llm_amx_on;
}


/* 16 rows x C columns over nbs regrouped blocks of bb bytes (their
 * quants at qo); y[c * ldy + r] accumulated into unless first. */
LLM_INLINE void
llm_q4r_tile(const int kind, const int C, int64_t nbs, const char *w,
    const llm_q4r_col_t *p, int first, float *y, size_t ldy)
{
    const size_t   bb = llm_r16_block_bytes(kind);
    const size_t   qo = kind == LLM_R16_MXFP4 ? 16 : 32;
    const __m512i  m4 = _mm512_set1_epi8(0x0f);
    const __m512i  lv = llm_r16_levels(kind);
    __m512         acc[16];
    int64_t        b;
    int            c, i;

#pragma GCC unroll 16
    for (c = 0; c < C; c++) {
        acc[c] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(y + c * ldy);
    }

    for (b = 0; b < nbs; b++, w += bb, p += C) {
        const char  *pf = w + LLM_Q4R_PF_BYTES / bb * bb;
        __m512i      lo[4], hi[4];
        __m512       wd;

        for (i = 0; i < (int) (bb + 63) / 64; i++) {
            _mm_prefetch(pf + 64 * i, _MM_HINT_T0);
        }
#pragma GCC unroll 4
        for (i = 0; i < 4; i++) {
            __m512i  v = _mm512_loadu_si512((const void *) (w + qo + 64 * i));

            if (kind == LLM_R16_Q8_0) {
                /* the quants as they are: bytes 4i.. and 16 + 4i.. */
                lo[i] = v;
                hi[i] = _mm512_loadu_si512((const void *) (w + qo + 256
                                                           + 64 * i));
                continue;
            }
            lo[i] = _mm512_and_si512(v, m4);
            hi[i] = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
            if (kind != LLM_R16_Q4_0) {
                lo[i] = _mm512_shuffle_epi8(lv, lo[i]);
                hi[i] = _mm512_shuffle_epi8(lv, hi[i]);
            }
        }
        wd = llm_r16_scales(kind, w);

#pragma GCC unroll 16
        for (c = 0; c < C; c++) {
            __m512i  s0 = _mm512_set1_epi32(p[c].init);

#pragma GCC unroll 4
            for (i = 0; i < 4; i++) {
                s0 = llm_dpbusd_b4(s0, lo[i], p[c].qs + 4 * i);
            }
#pragma GCC unroll 4
            for (i = 0; i < 4; i++) {
                s0 = llm_dpbusd_b4(s0, hi[i], p[c].qs + 16 + 4 * i);
            }
            acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s0),
                                     _mm512_mul_ps(wd,
                                                   _mm512_set1_ps(p[c].d)),
                                     acc[c]);
        }
    }

#pragma GCC unroll 16
    for (c = 0; c < C; c++) {
        _mm512_storeu_ps(y + c * ldy, acc[c]);
    }
}


#define LLM_Q4R_CASE(n)                                                     \
    case n:                                                                 \
        if (n >= LLM_AMX_MINC && llm_amx_on) {                              \
            llm_amx_prep(n, xc, xs, b0, nbs, dpre);                         \
            for (g = g0; g < g1; g++) {                                     \
                llm_q4r_tile_amx(kind, n, nbs, wp + g * 16 * ws + b0 * bb,  \
                                 LLM_AMX_QS(xc, b0), xs, dpre, b0 == 0,     \
                                 yc + g * 16, ldy);                         \
            }                                                               \
            break;                                                          \
        }                                                                   \
        llm_q4r_prep(n, off, xc, xs, b0, nbs, pre);                         \
        for (g = g0; g < g1; g++) {                                         \
            llm_q4r_tile(kind, n, nbs, wp + g * 16 * ws + b0 * bb, pre,     \
                         b0 == 0, yc + g * 16, ldy);                        \
        }                                                                   \
        break;

/*
 * Rows in chunks of 4 groups (64 rows, 72 KB at n = 2048: they stay in
 * L2 while every column chunk passes), columns in chunks of at most 16
 * (balanced: 20 are 10 + 10), blocks in slices of LLM_Q4R_SLICE.  With
 * one column chunk (an expert's few tokens) there is nothing to keep in
 * L2, so all rows are one chunk and the columns are prepared once per
 * slice, not once per 64 rows.
 */
LLM_INLINE void
llm_gemm_r16(const int kind, int64_t n, int64_t nr, int64_t nc,
    const void *w, size_t ws, const void *x, size_t xs, float *y, size_t ldy)
{
    llm_q4r_col_t  pre[16 * LLM_Q4R_SLICE];
    float          dpre[16 * LLM_Q4R_SLICE];
    const char    *wp = w;
    const size_t   bb = llm_r16_block_bytes(kind);
    const int      off = kind == LLM_R16_Q4_0 ? 8 : 128;
    const int64_t  nb = n / LLM_QK, ng = nr / 16;
    const int64_t  nch = (nc + 15) / 16, gch = nch == 1 ? ng : 4;
    int64_t        g0, g1, g, j, c0, c1, b0, nbs;

    for (g0 = 0; g0 < ng; g0 = g1) {
        g1 = g0 + gch < ng ? g0 + gch : ng;
        for (j = 0; j < nch; j++) {
            const char  *xc;
            float       *yc;

            c0 = j * nc / nch;
            c1 = (j + 1) * nc / nch;
            xc = (const char *) x + c0 * xs;
            yc = y + c0 * ldy;
            for (b0 = 0; b0 < nb; b0 += nbs) {
                nbs = nb - b0 < LLM_Q4R_SLICE ? nb - b0 : LLM_Q4R_SLICE;
                switch (c1 - c0) {
                LLM_Q4R_CASE(1)
                LLM_Q4R_CASE(2)
                LLM_Q4R_CASE(3)
                LLM_Q4R_CASE(4)
                LLM_Q4R_CASE(5)
                LLM_Q4R_CASE(6)
                LLM_Q4R_CASE(7)
                LLM_Q4R_CASE(8)
                LLM_Q4R_CASE(9)
                LLM_Q4R_CASE(10)
                LLM_Q4R_CASE(11)
                LLM_Q4R_CASE(12)
                LLM_Q4R_CASE(13)
                LLM_Q4R_CASE(14)
                LLM_Q4R_CASE(15)
                default:
                LLM_Q4R_CASE(16)
                }
            }
        }
    }
}
#undef LLM_Q4R_CASE


static void
llm_gemm_q4_0_r16(int64_t n, int64_t nr, int64_t nc, const void *w,
    size_t ws, const void *x, size_t xs, float *y, size_t ldy)
{
    llm_gemm_r16(LLM_R16_Q4_0, n, nr, nc, w, ws, x, xs, y, ldy);
}


static void
llm_gemm_q8_0_r16(int64_t n, int64_t nr, int64_t nc, const void *w,
    size_t ws, const void *x, size_t xs, float *y, size_t ldy)
{
    llm_gemm_r16(LLM_R16_Q8_0, n, nr, nc, w, ws, x, xs, y, ldy);
}


/* ---- Q8_0 in the file's layout, regrouped as it is read ---------------- */

/*
 * Streamed experts, a tied output matrix and row counts that are not a
 * multiple of 16 keep Q8_0's file layout, yet must give the bits of the
 * regrouped rows (a streamed expert's logits are the resident run's).  So
 * this gemm regroups each 16 rows (zero rows past the last) a slice at a
 * time into a llm_block_q8_0x16 buffer on the stack and runs the
 * Q8_0_R16 tile on it: per block, 16 masked loads of a row's 34 bytes,
 * 8 word permutes that put two rows' quants side by side, a 16 x 8
 * transpose of their dwords in three steps of 8 two-source permutes, the
 * + 128 and a gather of the 16 scales.  The column slices are prepared
 * as for the regrouped rows; a group is regrouped once per column chunk.
 */
#define LLM_Q8F_SLICE  32       /* blocks per regrouped slice: 17 KB */

/* Blocks [b0, b0 + nbs) of rows r < R (R <= 16) of w into o. */
LLM_INLINE void
llm_q8_0_regroup(const int R, const char *w, size_t ws, int64_t b0,
    int64_t nbs, llm_block_q8_0x16 *o)
{
    /* words 1..16 of a and of b: two rows' quants */
    const __m512i  iw = _mm512_set_epi16(48, 47, 46, 45, 44, 43, 42, 41,
                                         40, 39, 38, 37, 36, 35, 34, 33,
                                         16, 15, 14, 13, 12, 11, 10, 9,
                                         8, 7, 6, 5, 4, 3, 2, 1);
    /* the three transpose steps (lane = (row, dword) label sorts) */
    const __m512i  i10 = _mm512_set_epi32(27, 19, 11, 3, 26, 18, 10, 2,
                                          25, 17, 9, 1, 24, 16, 8, 0);
    const __m512i  i11 = _mm512_set_epi32(31, 23, 15, 7, 30, 22, 14, 6,
                                          29, 21, 13, 5, 28, 20, 12, 4);
    const __m512i  i20 = _mm512_set_epi32(23, 22, 21, 20, 7, 6, 5, 4,
                                          19, 18, 17, 16, 3, 2, 1, 0);
    const __m512i  i21 = _mm512_set_epi32(31, 30, 29, 28, 15, 14, 13, 12,
                                          27, 26, 25, 24, 11, 10, 9, 8);
    const __m512i  bias = _mm512_set1_epi8((char) 0x80);
    const __m512i  rows = _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13,
                              12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                              _mm512_set1_epi32((int) ws));
    const __mmask16  live = (__mmask16) ((1u << R) - 1);
    int64_t        b;
    int            k, h;

    for (b = 0; b < nbs; b++, o++) {
        const char  *p = w + (b0 + b) * sizeof(llm_block_q8_0);
        __m512i      pk[8], sv[8], tv[8], d;

#pragma GCC unroll 8
        for (k = 0; k < 8; k++) {
            __m512i  a = _mm512_setzero_si512(), c = a;

            if (2 * k < R) {
                a = _mm512_maskz_loadu_epi16(0x1ffff, p + 2 * k * ws);
            }
            if (2 * k + 1 < R) {
                c = _mm512_maskz_loadu_epi16(0x1ffff, p + (2 * k + 1) * ws);
            }
            pk[k] = _mm512_permutex2var_epi16(a, iw, c);
        }
#pragma GCC unroll 4
        for (k = 0; k < 4; k++) {
            sv[2 * k] = _mm512_permutex2var_epi32(pk[2 * k], i10,
                                                  pk[2 * k + 1]);
            sv[2 * k + 1] = _mm512_permutex2var_epi32(pk[2 * k], i11,
                                                      pk[2 * k + 1]);
        }
        /* sv[2m + h]: rows 4m.., dwords 4h.. */
#pragma GCC unroll 2
        for (k = 0; k < 2; k++) {
#pragma GCC unroll 2
            for (h = 0; h < 2; h++) {
                __m512i  a = sv[4 * k + h], c = sv[4 * k + 2 + h];

                tv[4 * h + 2 * k] = _mm512_permutex2var_epi32(a, i20, c);
                tv[4 * h + 2 * k + 1] = _mm512_permutex2var_epi32(a, i21,
                                                                  c);
            }
        }
        /* tv[4h + 2n + q]: rows 8n.., dwords 4h + 2q.. */
#pragma GCC unroll 2
        for (h = 0; h < 2; h++) {
#pragma GCC unroll 2
            for (k = 0; k < 2; k++) {
                __m512i  a = tv[4 * h + k], c = tv[4 * h + 2 + k];

                _mm512_storeu_si512((void *) o->qs[4 * h + 2 * k],
                    _mm512_xor_si512(_mm512_shuffle_i64x2(a, c, 0x44),
                                     bias));
                _mm512_storeu_si512((void *) o->qs[4 * h + 2 * k + 1],
                    _mm512_xor_si512(_mm512_shuffle_i64x2(a, c, 0xee),
                                     bias));
            }
        }
        d = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), live, rows,
                                        (const void *) p, 1);
        _mm256_storeu_si256((void *) o->d, _mm512_cvtepi32_epi16(d));
    }
}


#define LLM_Q8F_TILE(n, yt, ldt)                                            \
    do {                                                                    \
        if (n >= LLM_AMX_MINC && llm_amx_on) {                              \
            llm_q4r_tile_amx(LLM_R16_Q8_0, n, nbs, (const char *) buf,      \
                             LLM_AMX_QS(xc, b0), xs, dpre, b0 == 0, yt,     \
                             ldt);                                          \
        } else {                                                            \
            llm_q4r_tile(LLM_R16_Q8_0, n, nbs, (const char *) buf, pre,     \
                         b0 == 0, yt, ldt);                                 \
        }                                                                   \
    } while (0)

#define LLM_Q8F_CASE(n)                                                     \
    case n:                                                                 \
        if (n >= LLM_AMX_MINC && llm_amx_on) {                              \
            llm_amx_prep(n, xc, xs, b0, nbs, dpre);                         \
        } else {                                                            \
            llm_q4r_prep(n, 128, xc, xs, b0, nbs, pre);                     \
        }                                                                   \
        for (g = g0; g < g1; g++) {                                         \
            int  R = nr - 16 * g < 16 ? (int) (nr - 16 * g) : 16;           \
                                                                            \
            llm_q8_0_regroup(R, wp + g * 16 * ws, ws, b0, nbs, buf);        \
            if (R == 16) {                                                  \
                LLM_Q8F_TILE(n, yc + g * 16, ldy);                          \
                continue;                                                   \
            }                                                               \
            LLM_Q8F_TILE(n, part, 16);                                      \
            if (b0 + nbs == nb) {                                           \
                for (c = 0; c < n; c++) {                                   \
                    memcpy(yc + c * ldy + g * 16, part + 16 * c,            \
                           R * sizeof(float));                              \
                }                                                           \
            }                                                               \
        }                                                                   \
        break;

/*
 * As llm_gemm_r16 (row chunks of 4 groups, column chunks of at most 16,
 * block slices), the rows in the file's layout: any nr, the last group's
 * results through a 16-row buffer.
 */
static void
llm_gemm_q8_0_file(int64_t n, int64_t nr, int64_t nc, const void *w,
    size_t ws, const void *x, size_t xs, float *y, size_t ldy)
{
    llm_q4r_col_t      pre[16 * LLM_Q8F_SLICE];
    float              dpre[16 * LLM_Q8F_SLICE];
    llm_block_q8_0x16  buf[LLM_Q8F_SLICE];
    float              part[16 * 16];
    const char        *wp = w;
    const int64_t      nb = n / LLM_QK, ng = (nr + 15) / 16;
    const int64_t      nch = (nc + 15) / 16, gch = nch == 1 ? ng : 4;
    int64_t            g0, g1, g, j, c0, c1, b0, nbs, c;

    for (g0 = 0; g0 < ng; g0 = g1) {
        g1 = g0 + gch < ng ? g0 + gch : ng;
        for (j = 0; j < nch; j++) {
            const char  *xc;
            float       *yc;

            c0 = j * nc / nch;
            c1 = (j + 1) * nc / nch;
            xc = (const char *) x + c0 * xs;
            yc = y + c0 * ldy;
            for (b0 = 0; b0 < nb; b0 += nbs) {
                nbs = nb - b0 < LLM_Q8F_SLICE ? nb - b0 : LLM_Q8F_SLICE;
                switch (c1 - c0) {
                LLM_Q8F_CASE(1)
                LLM_Q8F_CASE(2)
                LLM_Q8F_CASE(3)
                LLM_Q8F_CASE(4)
                LLM_Q8F_CASE(5)
                LLM_Q8F_CASE(6)
                LLM_Q8F_CASE(7)
                LLM_Q8F_CASE(8)
                LLM_Q8F_CASE(9)
                LLM_Q8F_CASE(10)
                LLM_Q8F_CASE(11)
                LLM_Q8F_CASE(12)
                LLM_Q8F_CASE(13)
                LLM_Q8F_CASE(14)
                LLM_Q8F_CASE(15)
                default:
                LLM_Q8F_CASE(16)
                }
            }
        }
    }
}
#undef LLM_Q8F_CASE
#undef LLM_Q8F_TILE


/* One row, one column: the same steps (the same bits as a gemm row). */
static void
llm_dot_q8_0(int64_t n, float *s, const void *w, const void *x)
{
    llm_gemm_q8_0_file(n, 1, 1, w, 0, x, 0, s, 1);
}


static void
llm_gemm_iq4_nl_r16(int64_t n, int64_t nr, int64_t nc, const void *w,
    size_t ws, const void *x, size_t xs, float *y, size_t ldy)
{
    llm_gemm_r16(LLM_R16_IQ4NL, n, nr, nc, w, ws, x, xs, y, ldy);
}


static void
llm_gemm_mxfp4_r16(int64_t n, int64_t nr, int64_t nc, const void *w,
    size_t ws, const void *x, size_t xs, float *y, size_t ldy)
{
    llm_gemm_r16(LLM_R16_MXFP4, n, nr, nc, w, ws, x, xs, y, ldy);
}


/* ---- IQ4_XS_R16 x Q8_K: 16 interleaved rows, one lane per row --------- */

/*
 * Per super-block and column: for each sub-block j, 8 vpdpbusd of the 16
 * rows' level + 128 bytes against the column's 4-byte broadcasts, started
 * at -128 x the column's sub-block sum (two Q8_K bsums), then times the 16
 * rows' 6-bit scales less 32 (vpmulld) into an int32 super-block sum,
 * exact as llm_iq4_xs_dot's; one convert and FMA per super-block.  The
 * scales come straight from the rows' packed bytes: lane r of the 64-byte
 * scales_l load is row r's 4 bytes, so a shift and a mask give sub-block
 * j's low 4 bits for all 16 rows at once.  At most 8 columns a pass (16
 * int32 sums and 8 float accumulators stay in registers).
 */
#define LLM_XSR_MAXC  8


LLM_INLINE void
llm_iq4_xs_r16_tile(const int C, int64_t nb, const llm_block_iq4_xsx16 *w,
    const char *x, size_t xs, float *y, size_t ldy)
{
    const __m512i  m4 = _mm512_set1_epi8(0x0f);
    const __m512i  lv = llm_r16_levels(LLM_R16_IQ4NL);
    __m512         acc[LLM_XSR_MAXC];
    int64_t        b;
    int            c, i, j;

#pragma GCC unroll 8
    for (c = 0; c < C; c++) {
        acc[c] = _mm512_setzero_ps();
    }

    for (b = 0; b < nb; b++, w++) {
        const __m512i  sl = _mm512_loadu_si512((const void *) w->scales_l);
        const __m512i  sh = _mm512_cvtepu16_epi32(
                                _mm256_loadu_si256((const void *)
                                                   w->scales_h));
        const __m512   wd = _mm512_cvtph_ps(
                                _mm256_loadu_si256((const void *) w->d));
        __m512i        isum[LLM_XSR_MAXC];

#pragma GCC unroll 8
        for (c = 0; c < C; c++) {
            isum[c] = _mm512_setzero_si512();
        }
        for (j = 0; j < 8; j++) {
            __m512i  lo[4], hi[4], ls;

            LLM_PREFETCH_NEXT(w, j, 8);
            ls = _mm512_or_si512(
                     _mm512_and_si512(_mm512_srli_epi32(sl, 4 * j),
                                      _mm512_set1_epi32(0xf)),
                     _mm512_slli_epi32(_mm512_and_si512(
                                           _mm512_srli_epi32(sh, 2 * j),
                                           _mm512_set1_epi32(3)), 4));
            ls = _mm512_sub_epi32(ls, _mm512_set1_epi32(32));
#pragma GCC unroll 4
            for (i = 0; i < 4; i++) {
                __m512i  v = _mm512_loadu_si512((const void *) w->qs[j][i]);

                lo[i] = _mm512_shuffle_epi8(lv, _mm512_and_si512(v, m4));
                hi[i] = _mm512_shuffle_epi8(lv, _mm512_and_si512(
                                                    _mm512_srli_epi16(v, 4),
                                                    m4));
            }
#pragma GCC unroll 8
            for (c = 0; c < C; c++) {
                const llm_block_q8_K  *q = (const llm_block_q8_K *)
                                           (const void *) (x + c * xs) + b;
                const int8_t          *qy = q->qs + 32 * j;
                __m512i                s0 = _mm512_set1_epi32(
                    -128 * (q->bsums[2 * j] + q->bsums[2 * j + 1]));

#pragma GCC unroll 4
                for (i = 0; i < 4; i++) {
                    s0 = llm_dpbusd_b4(s0, lo[i], qy + 4 * i);
                }
#pragma GCC unroll 4
                for (i = 0; i < 4; i++) {
                    s0 = llm_dpbusd_b4(s0, hi[i], qy + 16 + 4 * i);
                }
                isum[c] = _mm512_add_epi32(isum[c],
                                           _mm512_mullo_epi32(s0, ls));
            }
        }
#pragma GCC unroll 8
        for (c = 0; c < C; c++) {
            const llm_block_q8_K  *q = (const llm_block_q8_K *)
                                       (const void *) (x + c * xs) + b;

            acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[c]),
                                     _mm512_mul_ps(wd,
                                                   _mm512_set1_ps(q->d)),
                                     acc[c]);
        }
    }

#pragma GCC unroll 8
    for (c = 0; c < C; c++) {
        _mm512_storeu_ps(y + c * ldy, acc[c]);
    }
}


#define LLM_XSR_CASE(n)                                                     \
    case n:                                                                 \
        llm_iq4_xs_r16_tile(n, nb, (const llm_block_iq4_xsx16 *)            \
                                (const void *) (wp + g * 16 * ws),          \
                            (const char *) x + c0 * xs, xs,                 \
                            y + c0 * ldy + g * 16, ldy);                    \
        break;

/* Each 16-row group against columns in chunks of at most 8 (balanced);
 * a group's rows (16 x 1088 bytes at n = 2048) stay in L2 between the
 * chunks. */
static void
llm_gemm_iq4_xs_r16(int64_t n, int64_t nr, int64_t nc, const void *w,
    size_t ws, const void *x, size_t xs, float *y, size_t ldy)
{
    const char    *wp = w;
    const int64_t  nb = n / LLM_QK_K, ng = nr / 16;
    const int64_t  nch = (nc + LLM_XSR_MAXC - 1) / LLM_XSR_MAXC;
    int64_t        g, j, c0, c1;

    for (g = 0; g < ng; g++) {
        for (j = 0; j < nch; j++) {
            c0 = j * nc / nch;
            c1 = (j + 1) * nc / nch;
            switch (c1 - c0) {
            LLM_XSR_CASE(1)
            LLM_XSR_CASE(2)
            LLM_XSR_CASE(3)
            LLM_XSR_CASE(4)
            LLM_XSR_CASE(5)
            LLM_XSR_CASE(6)
            LLM_XSR_CASE(7)
            default:
            LLM_XSR_CASE(8)
            }
        }
    }
}
#undef LLM_XSR_CASE


/* ---- Q4_K x Q8_K: two super-blocks per step --------------------------- */

/* Q4_K itself now runs as Q4_K_R16 (kr16_avx512.c, the file layout
 * regrouped per call); this tile serves Q5_K (q5 = 1). */

/*
 * The 128 quant bytes of each of two super-blocks are four 64-byte loads;
 * transposed as the Q4_0 groups are, the 32-bit lane 4k + g of vector i
 * holds bytes 4i..4i+3 of 128-bit lane k of load g.  Low nibbles then give
 * 16 weights of sub-block 4 (g & 1) + 2 (k / 2) of super-block g / 2, high
 * nibbles 16 of the next sub-block.  Each column's two vpdpbusd chains of 4
 * end with one lane per half sub-block, so its 6-bit scale is applied in
 * the float step: per 512 weights and column, 8 vpdpbusd and three FMAs
 * (the pair of vpmaddubsw + vpdpwssd per 64 weights of llm_qk45_tile
 * needs 16 multiplies and a float step per 256).  The mins take one more
 * FMA against the sub-block sums of the column.  An odd last super-block
 * runs with a zero partner.  Every column count takes this tile.
 */
typedef struct {
    __m512i  lo[4];     /* dword 4k + g of lo[i]: the y bytes that meet
                           lo[i] of the weights; hi[i] likewise */
    __m512i  hi[4];
    __m512   dy;        /* lane 4k + g: the scale of super-block g / 2 */
    __m512   ym;        /* lane 8s + j: dy x the sum of sub-block j of
                           super-block s */
} llm_k4_t2_t;

#define LLM_K2_MAX   16         /* super-block pairs on the stack: 8192 */


/* lane 4k + g <- byte 8 (g / 2) + 4 (g & 1) + 2 (k / 2) (+ 1 for hi) */
#define LLM_K2_SC_IDX(h)                                                     \
    _mm_setr_epi8(0 + h, 4 + h, 8 + h, 12 + h, 0 + h, 4 + h, 8 + h, 12 + h,  \
                  2 + h, 6 + h, 10 + h, 14 + h, 2 + h, 6 + h, 10 + h, 14 + h)

/* [a, a, b, b] in every 128-bit lane */
LLM_INLINE __m512
llm_k2_pairs(float a, float b)
{
    return _mm512_broadcast_f32x4(_mm_setr_ps(a, a, b, b));
}

/* a in lanes 0..7, b in 8..15 */
LLM_INLINE __m512
llm_k2_halves(float a, float b)
{
    return _mm512_insertf32x8(_mm512_set1_ps(a), _mm256_set1_ps(b), 1);
}


#define LLM_K2_PAIRS(nb)  (((nb) + 1) / 2)


/* llm_k4_scales_u8 of two blocks' 12-byte scales, one per 128-bit lane
 * (each load reads 4 bytes past the scales, inside the block). */
LLM_INLINE __m256i
llm_k4_scales_u8x2(const uint8_t *s0, const uint8_t *s1)
{
    const __m256i  v = _mm256_loadu2_m128i((const __m128i *) s1,
                                           (const __m128i *) s0);
    const __m256i  a = _mm256_shuffle_epi8(v, _mm256_broadcastsi128_si256(
                           _mm_setr_epi8(0, 1, 2, 3, 8, 9, 10, 11,
                                         4, 5, 6, 7, 8, 9, 10, 11)));
    const __m256i  b = _mm256_shuffle_epi8(v, _mm256_broadcastsi128_si256(
                           _mm_setr_epi8(-1, -1, -1, -1, 0, 1, 2, 3,
                                         -1, -1, -1, -1, 4, 5, 6, 7)));
    const __m256i  m1 = _mm256_broadcastsi128_si256(
                            _mm_setr_epi8(63, 63, 63, 63, 15, 15, 15, 15,
                                          63, 63, 63, 63, 0, 0, 0, 0));
    const __m256i  m2 = _mm256_broadcastsi128_si256(
                            _mm_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0,
                                          0, 0, 0, 0, 15, 15, 15, 15));
    __m256i        r;

    r = _mm256_or_si256(_mm256_and_si256(a, m1),
                        _mm256_and_si256(_mm256_srli_epi16(a, 4), m2));
    return _mm256_or_si256(r, _mm256_and_si256(_mm256_srli_epi16(b, 2),
                                               _mm256_set1_epi8(0x30)));
}


/* Column x (Q8_K) of nb super-blocks as pairs. */
LLM_INLINE void
llm_k4_t2_prep(const char *x, int64_t nb, llm_k4_t2_t *out)
{
    const llm_block_q8_K  *q = (const llm_block_q8_K *) x;
    const int64_t          np = LLM_K2_PAIRS(nb);
    const __m256i          ones = _mm256_set1_epi16(1);
    __m512i                lo[4], hi[4];
    __m256i                bs[2];
    float                  dy[2];
    int64_t                pi;
    int                    g, sb;

    for (pi = 0; pi < np; pi++, out++) {
        for (sb = 0; sb < 2; sb++) {
            const llm_block_q8_K  *b = q + 2 * pi + sb;

            if (2 * pi + sb >= nb) {
                dy[sb] = 0;
                bs[sb] = _mm256_setzero_si256();
                lo[2 * sb] = lo[2 * sb + 1] = _mm512_setzero_si512();
                hi[2 * sb] = hi[2 * sb + 1] = _mm512_setzero_si512();
                continue;
            }
            dy[sb] = b->d;
            bs[sb] = _mm256_madd_epi16(_mm256_loadu_si256((const void *)
                                                          b->bsums), ones);
            for (g = 2 * sb; g < 2 * sb + 2; g++) {
                const int8_t  *y = b->qs + 128 * (g & 1);

#define LLM_K2_Y(o)                                                          \
                _mm512_inserti64x4(_mm512_castsi256_si512(                  \
                    _mm256_loadu_si256((const void *) (y + (o)))),          \
                    _mm256_loadu_si256((const void *) (y + (o) + 64)), 1)
                lo[g] = LLM_K2_Y(0);
                hi[g] = LLM_K2_Y(32);
#undef LLM_K2_Y
            }
        }
        llm_tr4x4_epi32(lo, out->lo);
        llm_tr4x4_epi32(hi, out->hi);
        out->dy = llm_k2_pairs(dy[0], dy[1]);
        out->ym = _mm512_mul_ps(_mm512_cvtepi32_ps(
                      _mm512_inserti64x4(_mm512_castsi256_si512(bs[0]),
                                         bs[1], 1)),
                      llm_k2_halves(dy[0], dy[1]));
    }
}


/*
 * One weight row x C columns over nb super-blocks (x is prepared); q5:
 * Q5_K, whose fifth bits (bit 2c / 2c + 1 of qh[l] for the low / high
 * nibbles of chunk c, byte l) are brought to each quant byte before the
 * transpose: one byte per quant byte, bit 0 for its low nibble, bit 4 for
 * its high one.
 */
LLM_INLINE void
llm_k45_t2_tile(const int q5, const int C, int64_t nb, const char *w,
    size_t ws, const llm_k4_t2_t *pre, float *y, size_t ldy)
{
    const size_t   bsz = q5 ? sizeof(llm_block_q5_K)
                            : sizeof(llm_block_q4_K);
    const __m512i  m4 = _mm512_set1_epi8(0x0f);
    const __m512i  m01 = _mm512_set1_epi8(0x01), m10 = _mm512_set1_epi8(0x10);
    /* per 128-bit lane k of load g: qh >> 2c, c = 2 (g & 1) + k / 2 */
    const __m512i  sh0 = _mm512_inserti64x4(_mm512_setzero_si512(),
                                            _mm256_set1_epi16(2), 1);
    const __m512i  sh1 = _mm512_inserti64x4(_mm512_set1_epi16(4),
                                            _mm256_set1_epi16(6), 1);
    const __m128i  ilo = LLM_K2_SC_IDX(0), ihi = LLM_K2_SC_IDX(1);
    const int64_t  np = LLM_K2_PAIRS(nb);
    __m512         acc[LLM_T_COLS];
    int64_t        pi;
    int            c, g, i, sb;

#pragma GCC unroll 8
    for (c = 0; c < C; c++) {
        acc[c] = _mm512_setzero_ps();
    }

    for (pi = 0; pi < np; pi++) {
        const char  *b = w + 2 * pi * bsz;
        const int    two = 2 * pi + 1 < nb;
        const char  *b1 = two ? b + bsz : b;    /* scales only */
        __m512i      in[4], hb[4], v[4], hv[4], lo[4], hi[4];
        __m256i      s2;
        __m128i      sc, mn, dh;
        __m128       dd;
        int          dw[2];
        __m512       wsl, wsh, wmn, wd;

#pragma GCC unroll 2
        for (sb = 0; sb < 2; sb++) {
            const llm_block_q4_K  *p4 = (const llm_block_q4_K *)
                                        (b + sb * bsz);
            const uint8_t         *qs = q5 ? ((const llm_block_q5_K *) p4)->qs
                                           : p4->qs;

            if (sb == 1 && !two) {
                in[2] = in[3] = hb[2] = hb[3] = _mm512_setzero_si512();
                break;
            }
            in[2 * sb] = _mm512_loadu_si512((const void *) qs);
            in[2 * sb + 1] = _mm512_loadu_si512((const void *) (qs + 64));
            if (q5) {
                __m512i  qh = _mm512_broadcast_i64x4(_mm256_loadu_si256(
                                  (const void *)
                                  ((const llm_block_q5_K *) p4)->qh));
                __m512i  h0 = _mm512_srlv_epi16(qh, sh0);
                __m512i  h1 = _mm512_srlv_epi16(qh, sh1);

                /* bit 0 as it is, bit 1 to bit 4 (other bits unused):
                 * 0xe4 = A & C | B & ~C */
                hb[2 * sb] = _mm512_ternarylogic_epi32(h0,
                                 _mm512_slli_epi16(h0, 3), m01, 0xe4);
                hb[2 * sb + 1] = _mm512_ternarylogic_epi32(h1,
                                     _mm512_slli_epi16(h1, 3), m01, 0xe4);
            }
        }
        /* d, dmin of both blocks as 4 fp16 (zero for a missing second) */
        memcpy(&dw[0], b, 4);
        memcpy(&dw[1], b1, 4);
        dh = _mm_cvtsi32_si128(dw[0]);
        if (two) {
            dh = _mm_insert_epi32(dh, dw[1], 1);
        }
        dd = _mm_cvtph_ps(dh);                  /* d0, dm0, d1, dm1 */
        s2 = llm_k4_scales_u8x2(((const llm_block_q4_K *) b)->scales,
                                ((const llm_block_q4_K *) b1)->scales);
        /* qwords sc0, m0 | sc1, m1 -> sc0, sc1 | m0, m1 */
        s2 = _mm256_permute4x64_epi64(s2, _MM_SHUFFLE(3, 1, 2, 0));
        sc = _mm256_castsi256_si128(s2);
        mn = _mm256_extracti128_si256(s2, 1);
        /* rows ahead, same place: 288 / 352 bytes; two at one or two
         * columns (Q5_K at one column, 2 threads: 18 GB/s four rows
         * ahead, 24 two ahead, READ 31), else LLM_PF_TILES (at 8
         * columns two ahead lost 15%; docs/BENCHMARKS.md "Kernels") */
        for (i = 0; i < (q5 ? 6 : 5); i++) {
            _mm_prefetch(b + (C <= 2 ? 2 : LLM_PF_TILES) * ws + 64 * i,
                         _MM_HINT_T0);
        }
        llm_tr4x4_epi32(in, v);
#pragma GCC unroll 4
        for (i = 0; i < 4; i++) {
            lo[i] = _mm512_and_si512(v[i], m4);
            hi[i] = _mm512_and_si512(_mm512_srli_epi16(v[i], 4), m4);
        }
        if (q5) {
            llm_tr4x4_epi32(hb, hv);
#pragma GCC unroll 4
            for (i = 0; i < 4; i++) {
                /* 0xf8 = A | B & C */
                lo[i] = _mm512_ternarylogic_epi32(lo[i],
                            _mm512_slli_epi16(hv[i], 4), m10, 0xf8);
                hi[i] = _mm512_ternarylogic_epi32(hi[i], hv[i], m10, 0xf8);
            }
        }
        wd = _mm512_broadcast_f32x4(_mm_permute_ps(dd,
                                                   _MM_SHUFFLE(2, 2, 0, 0)));
        wsl = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(
                  _mm_shuffle_epi8(sc, ilo))), wd);
        wsh = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(
                  _mm_shuffle_epi8(sc, ihi))), wd);
        wmn = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(mn)),
                            _mm512_permutexvar_ps(_mm512_set_epi32(
                                3, 3, 3, 3, 3, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1),
                                _mm512_castps128_ps512(dd)));

#pragma GCC unroll 8
        for (c = 0; c < C; c++) {
            const llm_k4_t2_t  *pc = pre + c * np + pi;
            __m512i             sl, sh;

            sl = _mm512_dpbusd_epi32(_mm512_setzero_si512(), lo[0],
                                     pc->lo[0]);
            sh = _mm512_dpbusd_epi32(_mm512_setzero_si512(), hi[0],
                                     pc->hi[0]);
#pragma GCC unroll 3
            for (g = 1; g < 4; g++) {
                sl = _mm512_dpbusd_epi32(sl, lo[g], pc->lo[g]);
                sh = _mm512_dpbusd_epi32(sh, hi[g], pc->hi[g]);
            }
            acc[c] = _mm512_fnmadd_ps(wmn, pc->ym, acc[c]);
            acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sl),
                                     _mm512_mul_ps(wsl, pc->dy), acc[c]);
            acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sh),
                                     _mm512_mul_ps(wsh, pc->dy), acc[c]);
        }
    }

#pragma GCC unroll 8
    for (c = 0; c < C; c++) {
        y[c * ldy] = _mm512_reduce_add_ps(acc[c]);
    }
}


LLM_INLINE void
llm_k5_t2_rows(const int C, int64_t nb, const char *w, size_t ws,
    const char *x, size_t xs, const llm_k4_t2_t *pre, float *y, size_t ldy)
{
    (void) x;
    (void) xs;
    llm_k45_t2_tile(1, C, nb, w, ws, pre, y, ldy);
}

LLM_T_DRIVER(llm_gemm_q5_K_t2, llm_k4_t2_t, LLM_QK_K, LLM_K2_MAX,
             LLM_K2_PAIRS, llm_k4_t2_prep, llm_k5_t2_rows,
             llm_gemm_q5_K_long, 1, 8)


void
llm_kernels_init_avx512(llm_kernels_t *k)
{
    static int  probed;
    const char *env;

    if (!probed) {
        probed = 1;
        llm_amx_ok = llm_amx_detect();
        env = getenv("LLM_AMX");
        llm_amx_on = llm_amx_ok && !(env != NULL && strcmp(env, "0") == 0);
    }
    k->vec_dot[LLM_TYPE_Q4_0] = llm_dot_q4_0;
    k->vec_dot[LLM_TYPE_Q8_0] = llm_dot_q8_0;
    k->vec_dot[LLM_TYPE_Q5_K] = llm_dot_q5_K;
    k->gemm[LLM_TYPE_Q4_0] = llm_gemm_q4_0_t16;
    k->gemm[LLM_TYPE_Q4_0_R16] = llm_gemm_q4_0_r16;
    k->gemm[LLM_TYPE_IQ4_NL_R16] = llm_gemm_iq4_nl_r16;
    k->gemm[LLM_TYPE_MXFP4_R16] = llm_gemm_mxfp4_r16;
    k->gemm[LLM_TYPE_IQ4_XS_R16] = llm_gemm_iq4_xs_r16;
    k->gemm[LLM_TYPE_Q8_0] = llm_gemm_q8_0_file;
    k->gemm[LLM_TYPE_Q8_0_R16] = llm_gemm_q8_0_r16;
    k->gemm[LLM_TYPE_Q5_K] = llm_gemm_q5_K_t2;
    llm_kernels_init_k23_avx512(k);
    llm_kernels_init_kr16_avx512(k);
    llm_kernels_init_legacy_avx512(k);
    llm_kernels_init_iq4_avx512(k);
    llm_kernels_init_iq1_avx512(k);
    llm_kernels_init_iq2_avx512(k);
    llm_kernels_init_iq3_avx512(k);
}
