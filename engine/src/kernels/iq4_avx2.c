/*
 * AVX2 vec_dot kernels of the table-coded 4-bit types: IQ4_NL and MXFP4
 * against Q8_0 activations, IQ4_XS against Q8_K (issue 32).
 *
 * The 16 levels of a type fit one 128-bit register, so vpshufb looks the
 * 4-bit codes up as signed bytes (|level| <= 127).  The signed x signed
 * byte products then use the sign trick of the Q8_0 kernel: vpmaddubsw of
 * |w| against y with w's sign, 16-bit pair sums of at most
 * 2 * 127 * 127 (no saturation), widened by vpmaddwd: with ones for
 * IQ4_NL / MXFP4, with the sub-block scale for IQ4_XS.  Every block's
 * integer sum is exact, as the scalar reference's (quant_iq4.c,
 * quant_mxfp4.c); only the float accumulation order differs.
 */

#include <immintrin.h>
#include <stddef.h>

#include "kernels_common.h"
#include "a8_avx2.h"


/* The 32 levels of one block's 16 code bytes, in element order (low
 * nibbles 0..15, high nibbles 16..31), from table tab (in both lanes). */
LLM_INLINE __m256i
llm_iq4_levels32(const uint8_t *qs, __m256i tab)
{
    __m128i  t = _mm_loadu_si128((const void *) qs);
    __m256i  c = _mm256_and_si256(_mm256_set1_epi8(0x0f),
                     _mm256_set_m128i(_mm_srli_epi16(t, 4), t));

    return _mm256_shuffle_epi8(tab, c);
}


/* 16 pair sums (int16) of w * y over 32 signed bytes, |w| <= 127. */
LLM_INLINE __m256i
llm_iq4_pairs(__m256i w, const int8_t *y)
{
    __m256i  yv = _mm256_loadu_si256((const void *) y);

    return _mm256_maddubs_epi16(_mm256_sign_epi8(w, w),
                                _mm256_sign_epi8(yv, w));
}


/* The table of levels lv[16] in both 128-bit lanes. */
LLM_INLINE __m256i
llm_iq4_table(const int8_t *lv)
{
    return _mm256_broadcastsi128_si256(_mm_loadu_si128((const void *) lv));
}


/*
 * IQ4_NL (mx = 0) or MXFP4 (mx = 1) . Q8_0 over n values: per block the
 * exact integer sum (8 lanes) times d_w * d_x; two accumulators.
 */
LLM_INLINE void
llm_iq4_q8_0_dot(const int mx, int64_t n, float *s, const void *w,
    const void *x)
{
    const size_t           bsz = mx ? sizeof(llm_block_mxfp4)
                                    : sizeof(llm_block_iq4_nl);
    const __m256i          tab = llm_iq4_table(mx ? llm_mxfp4_kvalues
                                                  : llm_iq4_kvalues);
    const __m256i          ones = _mm256_set1_epi16(1);
    const char            *wp = w;
    const llm_block_q8_0  *q = x;
    __m256                 acc[2] = { _mm256_setzero_ps(),
                                      _mm256_setzero_ps() };
    int64_t                nb = n / LLM_QK, b;

    for (b = 0; b < nb; b++, wp += bsz, q++) {
        const uint8_t  *qs;
        float           d;

        if (mx) {
            const llm_block_mxfp4  *p = (const llm_block_mxfp4 *) wp;

            qs = p->qs;
            d = llm_h2f_hw(q->d) * llm_mxfp4_e8m0_half(p->e);
        } else {
            const llm_block_iq4_nl  *p = (const llm_block_iq4_nl *) wp;

            qs = p->qs;
            d = llm_h2f_hw(p->d) * llm_h2f_hw(q->d);
        }
        _mm_prefetch(wp + 8 * 64, _MM_HINT_T0);

        __m256i  p32 = _mm256_madd_epi16(
                           llm_iq4_pairs(llm_iq4_levels32(qs, tab), q->qs),
                           ones);

        acc[b & 1] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p32),
                                     _mm256_set1_ps(d), acc[b & 1]);
    }
    *s = llm_hsum256(_mm256_add_ps(acc[0], acc[1]));
}


static void
llm_dot_iq4_nl_blocks(int64_t n, float *s, const void *w, const void *x)
{
    llm_iq4_q8_0_dot(0, n, s, w, x);
}


static void
llm_dot_mxfp4_blocks(int64_t n, float *s, const void *w, const void *x)
{
    llm_iq4_q8_0_dot(1, n, s, w, x);
}


/* Row by row and column by column with the per-block kernels: rows too
 * long for the octet tiles' prepared columns. */
#define LLM_IQ4_DOTS(name, dot)                                              \
static void                                                                 \
name(int64_t n, int64_t nr, int64_t nc, const void *w, size_t ws,           \
    const void *x, size_t xs, float *y, size_t ldy)                         \
{                                                                           \
    for (int64_t r = 0; r < nr; r++) {                                      \
        for (int64_t c = 0; c < nc; c++) {                                  \
            dot(n, &y[c * ldy + r], (const char *) w + r * ws,              \
                (const char *) x + c * xs);                                 \
        }                                                                   \
    }                                                                       \
}

LLM_IQ4_DOTS(llm_gemm_iq4_nl_dots, llm_dot_iq4_nl_blocks)
LLM_IQ4_DOTS(llm_gemm_mxfp4_dots, llm_dot_mxfp4_blocks)


/*
 * IQ4_NL and MXFP4 in the Q4_0 octet tile's transposed layout
 * (a8_avx2.h, llm_a8_rows): eight blocks' codes per four registers,
 * looked up once per row and octet, the columns prepared once per call.
 * Before, these types had only the per-block vec_dot (20 ops a block, the
 * codes looked up again for every column): 6.8-8.1 GB/s at one column, 13-16 GMAC/s at
 * 8-64 (Q4_0's octet tile: 11 GB/s, 53-57 GMAC/s).
 */


LLM_INLINE void
llm_iq4_a8_rows_k(const int mx, const int C, int64_t nb, const char *w,
    size_t ws, const char *x, size_t xs, const llm_q4_a8_t *pre, float *y,
    size_t ldy)
{
    const size_t   bsz = mx ? sizeof(llm_block_mxfp4)
                            : sizeof(llm_block_iq4_nl);
    const int64_t  off = 8 * LLM_A8_OCTETS(nb);
    float          t;

    llm_a8_rows(mx ? LLM_A8_MXFP4 : LLM_A8_IQ4_NL, C, nb, w, ws, pre, y,
                ldy);
    if (nb > off) {
#pragma GCC unroll 8
        for (int c = 0; c < C; c++) {
            llm_iq4_q8_0_dot(mx, (nb - off) * LLM_QK, &t, w + off * bsz,
                             x + c * xs + off * sizeof(llm_block_q8_0));
            y[c * ldy] += t;
        }
    }
}


LLM_INLINE void
llm_iq4_nl_a8_rows(const int C, int64_t nb, const char *w, size_t ws,
    const char *x, size_t xs, const llm_q4_a8_t *pre, float *y, size_t ldy)
{
    llm_iq4_a8_rows_k(0, C, nb, w, ws, x, xs, pre, y, ldy);
}


LLM_INLINE void
llm_mxfp4_a8_rows(const int C, int64_t nb, const char *w, size_t ws,
    const char *x, size_t xs, const llm_q4_a8_t *pre, float *y, size_t ldy)
{
    llm_iq4_a8_rows_k(1, C, nb, w, ws, x, xs, pre, y, ldy);
}


LLM_INLINE void
llm_iq4_nl_a8_prep(const char *x, int64_t nb, llm_q4_a8_t *out)
{
    llm_a8_prep(x, nb, out, 0);
}


LLM_INLINE void
llm_mxfp4_a8_prep(const char *x, int64_t nb, llm_q4_a8_t *out)
{
    llm_a8_prep(x, nb, out, 12);
}


LLM_T_DRIVER(llm_gemm_iq4_nl_a8, llm_q4_a8_t, LLM_QK, LLM_A8_MAX,
             LLM_A8_OCTETS, llm_iq4_nl_a8_prep, llm_iq4_nl_a8_rows,
             llm_gemm_iq4_nl_dots, 1, 8)
LLM_T_DRIVER(llm_gemm_mxfp4_a8, llm_q4_a8_t, LLM_QK, LLM_A8_MAX,
             LLM_A8_OCTETS, llm_mxfp4_a8_prep, llm_mxfp4_a8_rows,
             llm_gemm_mxfp4_dots, 1, 8)


static void
llm_dot_iq4_nl_avx2(int64_t n, float *s, const void *w, const void *x)
{
    llm_gemm_iq4_nl_a8(n, 1, 1, w, 0, x, 0, s, 1);
}


static void
llm_dot_mxfp4_avx2(int64_t n, float *s, const void *w, const void *x)
{
    llm_gemm_mxfp4_a8(n, 1, 1, w, 0, x, 0, s, 1);
}


/*
 * IQ4_XS . Q8_K over n values: per super-block, sub-block j's pair sums
 * times its scale ls_j - 32 by vpmaddwd, summed exactly in int32 (at most
 * 8 * 32 * 127 * 127 * 32 in all), then times d_w * d_x.
 */
static void
llm_dot_iq4_xs_avx2(int64_t n, float *s, const void *w, const void *x)
{
    const __m256i            tab = llm_iq4_table(llm_iq4_kvalues);
    const llm_block_iq4_xs  *a = w;
    const llm_block_q8_K    *q = x;
    __m256                   acc = _mm256_setzero_ps();
    int64_t                  nb = n / LLM_QK_K, b;

    for (b = 0; b < nb; b++, a++, q++) {
        __m256i  isum = _mm256_setzero_si256();

        _mm_prefetch((const char *) (a + 4), _MM_HINT_T0);
#pragma GCC unroll 8
        for (int j = 0; j < LLM_QK_K / 32; j++) {
            int  ls = ((a->scales_l[j / 2] >> 4 * (j % 2)) & 0xf)
                      | ((a->scales_h >> 2 * j) & 3) << 4;
            __m256i  p16 = llm_iq4_pairs(
                               llm_iq4_levels32(a->qs + 16 * j, tab),
                               q->qs + 32 * j);

            isum = _mm256_add_epi32(isum, _mm256_madd_epi16(p16,
                       _mm256_set1_epi16((short) (ls - 32))));
        }
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum),
                              _mm256_set1_ps(q->d * llm_h2f_hw(a->d)), acc);
    }
    *s = llm_hsum256(acc);
}


void
llm_kernels_init_iq4_avx2(llm_kernels_t *k)
{
    k->vec_dot[LLM_TYPE_IQ4_NL] = llm_dot_iq4_nl_avx2;
    k->vec_dot[LLM_TYPE_IQ4_XS] = llm_dot_iq4_xs_avx2;
    k->vec_dot[LLM_TYPE_MXFP4] = llm_dot_mxfp4_avx2;
    k->gemm[LLM_TYPE_IQ4_NL] = llm_gemm_iq4_nl_a8;
    k->gemm[LLM_TYPE_MXFP4] = llm_gemm_mxfp4_a8;
}
