/*
 * AVX-512: what the IQ2 kernels of iq2_avx512.c and iq2x_avx512.c (built
 * with other flags) share.
 */

#ifndef LLM_IQ2_AVX512_H
#define LLM_IQ2_AVX512_H

#include <immintrin.h>

#include "kernels_common.h"


/*
 * Columns c < C of one unpacked super-block into sum[c]: g[q] the
 * magnitudes of weights 64 q .. 64 q + 63, sg[q] their sign masks, sc[q]
 * the scales 2 s + 1 of their pair sums (16-bit words), d the weights'
 * fp16 scale.  vpmaddubsw (pairs at most 2 x 43 x 127) and vpdpwssd give
 * the exact integer sum, then the scalar reference's float steps.
 */
LLM_INLINE void
llm_iq2g_cols(const int C, uint16_t d, const __m512i *g, const uint64_t *sg,
    const __m512i *sc, const char *x, size_t xs, int64_t b, float *sum)
{
#pragma GCC unroll 4
    for (int c = 0; c < C; c++) {
        const llm_block_q8_K  *q8 = (const llm_block_q8_K *)
                                    (const void *) (x + c * xs) + b;
        __m512i                isum = _mm512_setzero_si512();

#pragma GCC unroll 4
        for (int q = 0; q < 4; q++) {
            __m512i  yv = _mm512_loadu_si512((const void *)
                                             (q8->qs + 64 * q));

            yv = _mm512_mask_sub_epi8(yv, _load_mask64((__mmask64 *)
                                                       (sg + q)),
                                      _mm512_setzero_si512(), yv);
            isum = _mm512_dpwssd_epi32(isum, _mm512_maddubs_epi16(g[q], yv),
                                       sc[q]);
        }
        sum[c] += llm_h2f_hw(d) * q8->d
                  * (float) _mm512_reduce_add_epi32(isum);
    }
}


#endif /* LLM_IQ2_AVX512_H */
