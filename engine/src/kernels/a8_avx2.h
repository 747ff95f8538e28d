/*
 * AVX2: the transposed octet layout of 32-weight blocks (Q4_0, IQ4_NL,
 * MXFP4 against Q8_0; kernels_avx2.c, iq4_avx2.c) and the activation
 * columns prepared in it once per gemm call (LLM_T_DRIVER).
 */

#ifndef LLM_A8_AVX2_H
#define LLM_A8_AVX2_H

#include <immintrin.h>
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


#endif /* LLM_A8_AVX2_H */
