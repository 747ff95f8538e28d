/*
 * AVX-512 (BW, VNNI) kernels of IQ2_XXS, IQ2_XS and IQ2_S against Q8_K
 * (issue 32).  With VBMI and GFNI, IQ2_XXS takes iq2x_avx512.c's plane
 * tile instead of the vec_dot here.
 *
 * IQ2_XXS per 64 weights (two sub-blocks, one register): the 8 groups'
 * grid entries are loaded as 64-bit words (unsigned magnitudes <= 43);
 * the activations to negate (|q| <= 127, no overflow) are a 64-bit byte
 * mask from its 7-bit codes (llm_iq2_signs64, vpmovb2m).  vpmaddubsw
 * gives pair sums of at most 2 * 43 * 127, vpmaddwd multiplies them by
 * the scale 2s + 1 of each 32 weights.  IQ2_XS and IQ2_S: gemm tiles
 * (below).  Each super-block's integer sum is exact and equal to the
 * scalar reference's (quant_iq2.c), and is scaled with the same float
 * steps.
 */

#include <immintrin.h>

#include "kernels_common.h"
#include "iq2_avx512.h"


/* 8 64-bit words a[0..4), b[0..4) as one register. */
LLM_INLINE __m512i
llm_iq2_words8(uint64_t a0, uint64_t a1, uint64_t a2, uint64_t a3,
    uint64_t b0, uint64_t b1, uint64_t b2, uint64_t b3)
{
    __m256i  lo = _mm256_setr_epi64x((long long) a0, (long long) a1,
                                     (long long) a2, (long long) a3);
    __m256i  hi = _mm256_setr_epi64x((long long) b0, (long long) b1,
                                     (long long) b2, (long long) b3);

    return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}


/*
 * 64 weights: grid magnitudes g (8 groups), activations q8 negated where
 * the byte mask neg is set, 16-bit scales sc: 16 int32 partial sums of
 * sc * +-g * q8.
 */
LLM_INLINE __m512i
llm_iq2_dot64(__m512i g, __mmask64 neg, const int8_t *q8, __m512i sc)
{
    __m512i  q = _mm512_loadu_si512((const void *) q8);

    q = _mm512_mask_sub_epi8(q, neg, _mm512_setzero_si512(), q);
    return _mm512_madd_epi16(_mm512_maddubs_epi16(g, q), sc);
}


/* The byte mask of 8 7-bit sign codes (llm_iq2_signs64). */
LLM_INLINE __mmask64
llm_iq2_codes512(unsigned c0, unsigned c1, unsigned c2, unsigned c3,
    unsigned c4, unsigned c5, unsigned c6, unsigned c7)
{
    return _mm512_movepi8_mask(llm_iq2_words8(
               llm_iq2_signs64[c0], llm_iq2_signs64[c1], llm_iq2_signs64[c2],
               llm_iq2_signs64[c3], llm_iq2_signs64[c4], llm_iq2_signs64[c5],
               llm_iq2_signs64[c6], llm_iq2_signs64[c7]));
}


/* The 16-bit scale 2 s + 1 in all four words of a 64-bit lane. */
LLM_INLINE long long
llm_iq2_sc4(int s)
{
    return (long long) (0x0001000100010001ull * (uint64_t) (2 * s + 1));
}


/* IQ2_XXS . Q8_K over n values (a multiple of 256) into *s. */
static void
llm_dot_iq2_xxs_avx512(int64_t n, float *s, const void *w, const void *x)
{
    const uint64_t           *gr = llm_iq2xxs_grid;
    const llm_block_iq2_xxs  *a = w;
    const llm_block_q8_K     *b = x;
    float                     sum = 0;

    for (int64_t i = 0; i < n / LLM_QK_K; i++, a++, b++) {
        __m512i  acc = _mm512_setzero_si512();

        for (int ib = 0; ib < LLM_QK_K / 32; ib += 2) {
            uint32_t   u[4];
            long long  r0, r1;
            __mmask64  neg;
            __m512i    g;

            memcpy(u, a->qs + 4 * ib, 16);
            g = llm_iq2_words8(gr[u[0] & 0xff], gr[u[0] >> 8 & 0xff],
                               gr[u[0] >> 16 & 0xff], gr[u[0] >> 24],
                               gr[u[2] & 0xff], gr[u[2] >> 8 & 0xff],
                               gr[u[2] >> 16 & 0xff], gr[u[2] >> 24]);
            neg = llm_iq2_codes512(u[1] & 127, u[1] >> 7 & 127,
                                   u[1] >> 14 & 127, u[1] >> 21 & 127,
                                   u[3] & 127, u[3] >> 7 & 127,
                                   u[3] >> 14 & 127, u[3] >> 21 & 127);
            r0 = llm_iq2_sc4(u[1] >> 28);
            r1 = llm_iq2_sc4(u[3] >> 28);
            acc = _mm512_add_epi32(acc, llm_iq2_dot64(g, neg,
                      b->qs + 32 * ib,
                      _mm512_setr_epi64(r0, r0, r0, r0, r1, r1, r1, r1)));
        }
        sum += llm_h2f_hw(a->d) * b->d
               * (float) _mm512_reduce_add_epi32(acc);
    }
    *s = 0.125f * sum;
}


/*
 * IQ2_XS and IQ2_S: a tile of one weight row and up to 4 activation
 * columns, each super-block unpacked once for all of them.  The 32 grid
 * entries by four vpgatherdq (one 8-byte entry a lane; 1.2 ns per 8 on
 * Sapphire Rapids against 3.1 ns for 8 scalar loads and inserts, the
 * previous kernel's way), the signs as four 64-bit masks, the scales
 * 2 s + 1 of each 16 weights in the 16-bit words of a 128-bit lane; per
 * column four loads, masked negations, vpmaddubsw (pairs at most
 * 2 x 43 x 127) and vpdpwssd: the super-block's exact integer sum, then
 * the scalar reference's float steps, so each column's result has the
 * reference's bits whatever the tile's width.  The weights are
 * prefetched LLM_IQ2G_PF bytes ahead: rows are read once at decode,
 * and without it the kernel ran at half its in-cache rate from RAM.
 */

#define LLM_IQ2G_PF  1536


/* 2 s + 1 of the 16 scale nibbles (low nibble first) as 16-bit words,
 * sc[q] lane t: those of the weights 64 q + 16 t .. + 15. */
LLM_INLINE void
llm_iq2g_scales(const uint8_t *scales, __m512i sc[4])
{
    __m128i  b = _mm_loadl_epi64((const void *) scales);
    __m128i  n = _mm_unpacklo_epi8(_mm_and_si128(b, _mm_set1_epi8(0xf)),
                     _mm_and_si128(_mm_srli_epi16(b, 4), _mm_set1_epi8(0xf)));
    __m512i  w = _mm512_castsi256_si512(_mm256_cvtepu8_epi16(n));

    w = _mm512_add_epi16(_mm512_add_epi16(w, w), _mm512_set1_epi16(1));
#pragma GCC unroll 4
    for (int q = 0; q < 4; q++) {
        sc[q] = _mm512_permutexvar_epi16(_mm512_inserti64x4(
                    _mm512_castsi256_si512(_mm256_inserti128_si256(
                        _mm256_castsi128_si256(_mm_set1_epi16(
                            (short) (4 * q))),
                        _mm_set1_epi16((short) (4 * q + 1)), 1)),
                    _mm256_inserti128_si256(_mm256_castsi128_si256(
                        _mm_set1_epi16((short) (4 * q + 2))),
                        _mm_set1_epi16((short) (4 * q + 3)), 1), 1), w);
    }
}


/* The grid entries of the 32 indices in i0 (groups 0..15) and i1
 * (16..31), int32 lanes: g[q] the weights 64 q .. 64 q + 63. */
LLM_INLINE void
llm_iq2g_gather(const uint64_t *grid, __m512i i0, __m512i i1, __m512i g[4])
{
    const long long  *t = (const long long *) (const void *) grid;

    g[0] = _mm512_i32gather_epi64(_mm512_castsi512_si256(i0), t, 8);
    g[1] = _mm512_i32gather_epi64(_mm512_extracti64x4_epi64(i0, 1), t, 8);
    g[2] = _mm512_i32gather_epi64(_mm512_castsi512_si256(i1), t, 8);
    g[3] = _mm512_i32gather_epi64(_mm512_extracti64x4_epi64(i1, 1), t, 8);
}


/* One IQ2_XS super-block: magnitudes, sign masks (7-bit codes, bit 7
 * their parity) and scales. */
LLM_INLINE void
llm_iq2g_xs_unpack(const llm_block_iq2_xs *a, __m512i g[4], uint64_t sg[4],
    __m512i sc[4])
{
    const __m512i  v = _mm512_loadu_si512((const void *) a->qs);
    const __m512i  ix = _mm512_and_si512(v, _mm512_set1_epi16(511));
    __m512i        c = _mm512_srli_epi16(v, 9), p;

    llm_iq2g_gather(llm_iq2xs_grid,
                    _mm512_cvtepu16_epi32(_mm512_castsi512_si256(ix)),
                    _mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(ix, 1)),
                    g);
    p = _mm512_xor_si512(c, _mm512_srli_epi16(c, 4));
    p = _mm512_xor_si512(p, _mm512_srli_epi16(p, 2));
    p = _mm512_xor_si512(p, _mm512_srli_epi16(p, 1));
    c = _mm512_or_si512(c, _mm512_slli_epi16(_mm512_and_si512(p,
                                                 _mm512_set1_epi16(1)), 7));
    _mm256_storeu_si256((void *) sg, _mm512_cvtepi16_epi8(c));
    llm_iq2g_scales(a->scales, sc);
}


/* One IQ2_S super-block: 10-bit indices (qh's two bits above each qs
 * byte), the stored sign bytes, scales. */
LLM_INLINE void
llm_iq2g_s_unpack(const llm_block_iq2_s *a, __m512i g[4], uint64_t sg[4],
    __m512i sc[4])
{
    const __m128i  qh = _mm_loadl_epi64((const void *) a->qh);
    /* byte k of each: qh[k / 4] (groups 0..15, 16..31) */
    const __m128i  h0 = _mm_shuffle_epi8(qh, _mm_setr_epi8(
                            0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3));
    const __m128i  h1 = _mm_shuffle_epi8(qh, _mm_setr_epi8(
                            4, 4, 4, 4, 5, 5, 5, 5, 6, 6, 6, 6, 7, 7, 7, 7));
    /* group l of 4 takes bits 2 l, 2 l + 1 to bits 8, 9 */
    const __m512i  sh = _mm512_setr_epi32(8, 6, 4, 2, 8, 6, 4, 2,
                                          8, 6, 4, 2, 8, 6, 4, 2);
    const __m512i  m = _mm512_set1_epi32(0x300);
    __m512i        i0, i1;

    i0 = _mm512_or_si512(_mm512_cvtepu8_epi32(_mm_loadu_si128(
                             (const void *) a->qs)),
                         _mm512_and_si512(_mm512_sllv_epi32(
                             _mm512_cvtepu8_epi32(h0), sh), m));
    i1 = _mm512_or_si512(_mm512_cvtepu8_epi32(_mm_loadu_si128(
                             (const void *) (a->qs + 16))),
                         _mm512_and_si512(_mm512_sllv_epi32(
                             _mm512_cvtepu8_epi32(h1), sh), m));
    llm_iq2g_gather(llm_iq2s_grid, i0, i1, g);
    memcpy(sg, a->qs + LLM_QK_K / 8, 32);
    llm_iq2g_scales(a->scales, sc);
}


#define LLM_IQ2G_TILE(T, UNPACK)                                            \
    const T  *a = (const T *) (const void *) w;                             \
    float     sum[LLM_MAXC];                                                \
    int64_t   b;                                                            \
    int       c;                                                            \
                                                                            \
    (void) R;                                                               \
    (void) ws;                                                              \
    for (c = 0; c < C; c++) {                                               \
        sum[c] = 0;                                                         \
    }                                                                       \
    for (b = 0; b < nb; b++, a++) {                                         \
        __m512i   g[4], sc[4];                                              \
        uint64_t  sg[4] __attribute__((aligned(32)));                       \
                                                                            \
        _mm_prefetch((const char *) a + LLM_IQ2G_PF, _MM_HINT_T0);          \
        _mm_prefetch((const char *) (a + 1) + LLM_IQ2G_PF - 1, _MM_HINT_T0);\
        UNPACK(a, g, sg, sc);                                               \
        __asm__ ("" : "+m" (sg));                                           \
        llm_iq2g_cols(C, a->d, g, sg, sc, x, xs, b, sum);                   \
    }                                                                       \
    for (c = 0; c < C; c++) {                                               \
        y[c * ldy] = 0.125f * sum[c];                                       \
    }


/* R (1) x C (at most 4) results of IQ2_XS rows against Q8_K columns. */
LLM_INLINE void
llm_iq2g_xs_tile(const int R, const int C, int64_t nb, const char *w,
    size_t ws, const char *x, size_t xs, float *y, size_t ldy)
{
    LLM_IQ2G_TILE(llm_block_iq2_xs, llm_iq2g_xs_unpack)
}


/* R (1) x C (at most 4) results of IQ2_S rows against Q8_K columns. */
LLM_INLINE void
llm_iq2g_s_tile(const int R, const int C, int64_t nb, const char *w,
    size_t ws, const char *x, size_t xs, float *y, size_t ldy)
{
    LLM_IQ2G_TILE(llm_block_iq2_s, llm_iq2g_s_unpack)
}


LLM_GEMM_DRIVER(iq2_xs_avx512, LLM_QK_K, 1, 4, LLM_ROW_COLS, llm_iq2g_xs_tile)
LLM_GEMM_DRIVER(iq2_s_avx512, LLM_QK_K, 1, 4, LLM_ROW_COLS, llm_iq2g_s_tile)


void
llm_kernels_init_iq2_avx512(llm_kernels_t *k)
{
    k->vec_dot[LLM_TYPE_IQ2_XXS] = llm_dot_iq2_xxs_avx512;
    k->vec_dot[LLM_TYPE_IQ2_XS] = llm_dot_iq2_xs_avx512;
    k->gemm[LLM_TYPE_IQ2_XS] = llm_gemm_iq2_xs_avx512;
    k->vec_dot[LLM_TYPE_IQ2_S] = llm_dot_iq2_s_avx512;
    k->gemm[LLM_TYPE_IQ2_S] = llm_gemm_iq2_s_avx512;
    if (__builtin_cpu_supports("avx512vbmi")) {
        llm_kernels_init_iq2_vbmi(k);
    }
}
