/*
 * AVX2: the transposed octet layout of 32-weight blocks (Q4_0, IQ4_NL,
 * MXFP4 against Q8_0; kernels_avx2.c, iq4_avx2.c) and the activation
 * columns prepared in it once per gemm call (LLM_T_DRIVER).
 */

#ifndef LLM_A8_AVX2_H
#define LLM_A8_AVX2_H

#include <immintrin.h>
#include <stddef.h>
#include <string.h>

#include "kernels_common.h"


/*
 * Two blocks' 16 quant bytes fill a 256-bit vector (one per 128-bit
 * lane); four such pairs transposed within the lanes put 4 bytes of block
 * 2g + k in 32-bit lane 4k + g.  Per 8 blocks and column: 8 vpmaddubsw
 * summed in 16 bits (|sum| <= 8 x 2 x 15 x 128 < 2^15), one vpmaddwd, the
 * -8 offset and one float step, where the pair tile needs a vpmaddwd and
 * a float step per block.  The columns are prepared once per gemm call
 * in the same layout (LLM_T_DRIVER); every column count takes this tile.
 */
typedef struct {
    __m256i  lo[4];     /* dword 4k + g of lo[i]: y[4i..4i+3] of block
                           2g + k; hi[i]: y[16 + 4i..] */
    __m256i  hi[4];
    __m256i  init;      /* lane 4k + g: -off x the sum of the block's y
                           (Q4_0: 8, MXFP4: 12, IQ4_NL: 0) */
    __m256   d;         /* lane 4k + g: the block's scale */
} llm_q4_a8_t;

#define LLM_A8_MAX        32    /* octets on the stack: rows of 8192 */
#define LLM_A8_OCTETS(nb) ((nb) / 8)


/* 4x4 transpose of 32-bit elements within each 128-bit lane. */
LLM_INLINE void
llm_tr4x4_epi32_256(const __m256i in[4], __m256i out[4])
{
    __m256i  t0 = _mm256_unpacklo_epi32(in[0], in[1]);
    __m256i  t1 = _mm256_unpackhi_epi32(in[0], in[1]);
    __m256i  t2 = _mm256_unpacklo_epi32(in[2], in[3]);
    __m256i  t3 = _mm256_unpackhi_epi32(in[2], in[3]);

    out[0] = _mm256_unpacklo_epi64(t0, t2);
    out[1] = _mm256_unpackhi_epi64(t0, t2);
    out[2] = _mm256_unpacklo_epi64(t1, t3);
    out[3] = _mm256_unpackhi_epi64(t1, t3);
}


/* The fp16 scales (each block's first two bytes) of blocks b[0..7]
 * (stride bsz) in lane order 4k + g = block 2g + k.  Gathered in general
 * registers: through a stack array, the vector load waited on eight
 * 2-byte stores it cannot forward from (Q4_0 at one column, in cache:
 * 12.1 -> 19.7 GB/s). */
LLM_INLINE __m256
llm_a8_scales(const char *b, size_t bsz)
{
    uint64_t  h[2] = { 0, 0 };
    uint16_t  v;
    int       g, k;

    for (k = 0; k < 2; k++) {
        for (g = 0; g < 4; g++) {
            memcpy(&v, b + (2 * g + k) * bsz, 2);
            h[k] |= (uint64_t) v << 16 * g;
        }
    }
    return _mm256_cvtph_ps(_mm_set_epi64x((long long) h[1],
                                          (long long) h[0]));
}


/* Column x of nb Q8_0 blocks as octets (the last nb % 8 blocks left
 * out); init: -off x each block's sum (off 0: none). */
LLM_INLINE void
llm_a8_prep(const char *x, int64_t nb, llm_q4_a8_t *out, const int off)
{
    const llm_block_q8_0  *q = (const llm_block_q8_0 *) x;
    const __m256i          offv = _mm256_set1_epi8((char) off);
    const __m256i          ones = _mm256_set1_epi16(1);
    __m256i                lo[4], hi[4], s;
    int64_t                o, no = LLM_A8_OCTETS(nb);
    int                    g, i;

    for (o = 0; o < no; o++, out++) {
        const llm_block_q8_0  *p = q + 8 * o;

        for (g = 0; g < 4; g++) {
            lo[g] = _mm256_loadu2_m128i((const void *) p[2 * g + 1].qs,
                                        (const void *) p[2 * g].qs);
            hi[g] = _mm256_loadu2_m128i((const void *) (p[2 * g + 1].qs + 16),
                                        (const void *) (p[2 * g].qs + 16));
        }
        llm_tr4x4_epi32_256(lo, out->lo);
        llm_tr4x4_epi32_256(hi, out->hi);
        out->d = llm_a8_scales((const char *) p, sizeof(llm_block_q8_0));
        if (off == 0) {
            out->init = _mm256_setzero_si256();
            continue;
        }
        s = _mm256_setzero_si256();
        for (i = 0; i < 4; i++) {
            s = _mm256_add_epi16(s, _mm256_maddubs_epi16(offv, out->lo[i]));
            s = _mm256_add_epi16(s, _mm256_maddubs_epi16(offv, out->hi[i]));
        }
        out->init = _mm256_sub_epi32(_mm256_setzero_si256(),
                                     _mm256_madd_epi16(s, ones));
    }
}



/* The kinds of 4-bit weights the octet rows take. */
#define LLM_A8_Q4_0    0        /* nibble - 8: the column's init */
#define LLM_A8_IQ4_NL  1        /* llm_iq4_kvalues, by the sign trick */
#define LLM_A8_MXFP4   2        /* llm_mxfp4_kvalues + 12, unsigned */


/* The MXFP4 block scales 2^(e - 128) (llm_mxfp4_e8m0_half) of blocks
 * p[0..7] in lane order 4k + g = block 2g + k, in general registers. */
LLM_INLINE __m256
llm_mx_a8_scales(const char *p)
{
    const llm_block_mxfp4  *b = (const llm_block_mxfp4 *) (const void *) p;
    uint64_t                e = 0;
    __m256i                 v, nrm, sub;
    int                     g, k;

    for (g = 0; g < 4; g++) {
        for (k = 0; k < 2; k++) {
            e |= (uint64_t) b[2 * g + k].e << 8 * (4 * k + g);
        }
    }
    v = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long) e));
    /* llm_mxfp4_e8m0_half: (e - 1) << 23, or 0x00200000 << e for e < 2 */
    nrm = _mm256_slli_epi32(_mm256_sub_epi32(v, _mm256_set1_epi32(1)), 23);
    sub = _mm256_sllv_epi32(_mm256_set1_epi32(0x00200000), v);
    return _mm256_castsi256_ps(_mm256_blendv_epi8(nrm, sub,
               _mm256_cmpgt_epi32(_mm256_set1_epi32(2), v)));
}


/*
 * One weight row of kind's blocks x C prepared columns over the nb / 8
 * whole octets: y[c ldy] = the sum of the octets' float steps (the
 * caller adds the last nb % 8 blocks).  Q4_0: the unsigned nibbles, the
 * column's init -8 x the block sums, 8 vpmaddubsw summed in 16 bits (at
 * most 8 x 2 x 15 x 128).  MXFP4: levels + 12 (0..24) from vpshufb, init
 * -12 x the sums, two 16-bit sums of 4 (at most 4 x 2 x 24 x 128).
 * IQ4_NL (levels to 127): |level| against the column bytes with the
 * level's sign (Q8_0 quants are within -127..127), pairs of at most
 * 2 x 127 x 127 widened by vpmaddwd each.  Each block's integer sum is
 * exact; one float step per block (its lane) times d_w d_x.
 */
LLM_INLINE void
llm_a8_rows(const int kind, const int C, int64_t nb, const char *w,
    size_t ws, const llm_q4_a8_t *pre, float *y, size_t ldy)
{
    const size_t   bsz = kind == LLM_A8_MXFP4 ? sizeof(llm_block_mxfp4)
                                              : sizeof(llm_block_q4_0);
    const size_t   qo = kind == LLM_A8_MXFP4 ? offsetof(llm_block_mxfp4, qs)
                                             : offsetof(llm_block_q4_0, qs);
    const __m256i  m4 = _mm256_set1_epi8(0x0f);
    const __m256i  ones = _mm256_set1_epi16(1);
    const __m256i  tab = kind == LLM_A8_MXFP4
                         ? _mm256_add_epi8(_mm256_broadcastsi128_si256(
                               _mm_loadu_si128((const void *)
                                               llm_mxfp4_kvalues)),
                               _mm256_set1_epi8(12))
                         : _mm256_broadcastsi128_si256(_mm_loadu_si128(
                               (const void *) llm_iq4_kvalues));
    const int64_t  no = LLM_A8_OCTETS(nb);
    __m256         acc[LLM_T_COLS];
    int64_t        o;
    int            c, g, i;

#pragma GCC unroll 8
    for (c = 0; c < C; c++) {
        acc[c] = _mm256_setzero_ps();
    }

    for (o = 0; o < no; o++) {
        const char  *p = w + 8 * o * bsz;
        __m256i      in[4], v[4], lo[4], hi[4], alo[4], ahi[4];
        __m256       wd;

#pragma GCC unroll 4
        for (g = 0; g < 4; g++) {
            in[g] = _mm256_loadu2_m128i(
                        (const void *) (p + (2 * g + 1) * bsz + qo),
                        (const void *) (p + 2 * g * bsz + qo));
        }
        /* tiles ahead, same place: 136-144 bytes, 3 lines at most */
        _mm_prefetch(p + LLM_PF_TILES * ws, _MM_HINT_T0);
        _mm_prefetch(p + LLM_PF_TILES * ws + 64, _MM_HINT_T0);
        _mm_prefetch(p + LLM_PF_TILES * ws + 128, _MM_HINT_T0);
        llm_tr4x4_epi32_256(in, v);
#pragma GCC unroll 4
        for (i = 0; i < 4; i++) {
            lo[i] = _mm256_and_si256(v[i], m4);
            hi[i] = _mm256_and_si256(_mm256_srli_epi16(v[i], 4), m4);
            if (kind != LLM_A8_Q4_0) {
                lo[i] = _mm256_shuffle_epi8(tab, lo[i]);
                hi[i] = _mm256_shuffle_epi8(tab, hi[i]);
            }
            if (kind == LLM_A8_IQ4_NL) {
                alo[i] = _mm256_abs_epi8(lo[i]);
                ahi[i] = _mm256_abs_epi8(hi[i]);
            }
        }
        wd = kind == LLM_A8_MXFP4 ? llm_mx_a8_scales(p)
                                  : llm_a8_scales(p, bsz);

#pragma GCC unroll 8
        for (c = 0; c < C; c++) {
            const llm_q4_a8_t  *pc = pre + c * no + o;
            __m256i             isum;

            if (kind == LLM_A8_IQ4_NL) {
                isum = _mm256_setzero_si256();
#pragma GCC unroll 4
                for (i = 0; i < 4; i++) {
                    isum = _mm256_add_epi32(isum, _mm256_madd_epi16(
                               _mm256_maddubs_epi16(alo[i], _mm256_sign_epi8(
                                   pc->lo[i], lo[i])), ones));
                    isum = _mm256_add_epi32(isum, _mm256_madd_epi16(
                               _mm256_maddubs_epi16(ahi[i], _mm256_sign_epi8(
                                   pc->hi[i], hi[i])), ones));
                }
            } else {
                __m256i  s0 = _mm256_maddubs_epi16(lo[0], pc->lo[0]);
                __m256i  s1 = _mm256_maddubs_epi16(hi[0], pc->hi[0]);

#pragma GCC unroll 3
                for (i = 1; i < 4; i++) {
                    s0 = _mm256_add_epi16(s0, _mm256_maddubs_epi16(
                                                  lo[i], pc->lo[i]));
                    s1 = _mm256_add_epi16(s1, _mm256_maddubs_epi16(
                                                  hi[i], pc->hi[i]));
                }
                isum = kind == LLM_A8_Q4_0
                       ? _mm256_madd_epi16(_mm256_add_epi16(s0, s1), ones)
                       : _mm256_add_epi32(_mm256_madd_epi16(s0, ones),
                                          _mm256_madd_epi16(s1, ones));
                isum = _mm256_add_epi32(isum, pc->init);
            }
            acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum),
                                     _mm256_mul_ps(wd, pc->d), acc[c]);
        }
    }

#pragma GCC unroll 8
    for (c = 0; c < C; c++) {
        y[c * ldy] = llm_hsum256(acc[c]);
    }
}


#endif /* LLM_A8_AVX2_H */
