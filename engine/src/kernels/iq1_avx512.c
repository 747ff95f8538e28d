/*
 * AVX-512 (VNNI) kernels of IQ1_S and IQ1_M against Q8_K (issue 32): gemm
 * tiles of one weight row and up to 4 activation columns, each super-block
 * unpacked once for all of them; the vec_dot is the one-column tile.  The 32
 * grid points by four vpgatherdq (8-byte points; on Sapphire Rapids 1.2 ns
 * per 8 against 3.1 ns for the scalar loads and inserts of the previous
 * kernels, 256-bit, a sub-block each, vpsignb against the activations), made
 * unsigned by + 1 (0, 1, 2) and turned by one vpshufb per 64 weights into 8
 * ls (point + 1), ls = 2 s + 1, at most 240: an unsigned vpdpbusd operand.
 * So per column four loads and four vpdpbusd sum 8 sumi + 8 sum ls Y (Y: the
 * activations' sum over the scale's weights); the rest, sum ls (delta - 8) Y
 * with delta = +-1, is IQ1_S's 8 bsums pairs by one vpmaddwd against
 * per-sub-block words, IQ1_M's (a delta per group of 8) a second vpdpbusd
 * against the bytes ls (8 - delta) (at most 135), subtracted.  Each
 * super-block's lanes add up to the exact 8 sumi + sumi1 of the scalar
 * reference (quant_iq1.c), scaled once by d_w d_x / 8 (quant_iq1.c says why
 * that is the reference's float): each column has the same bits whatever the
 * tile's width.  The weights are prefetched LLM_IQ1G_PF bytes ahead: rows
 * are read once at decode, and without it these kernels ran from RAM at
 * 55-75% of their in-cache rate.
 */

#include <immintrin.h>

#include "kernels_common.h"


#define LLM_IQ1G_PF  1536


/* The points of the 32 indices in i0 (groups 0..15) and i1 (16..31),
 * int32 lanes, plus one: g[q] the weights 64 q .. 64 q + 63. */
LLM_INLINE void
llm_iq1g_gather(__m512i i0, __m512i i1, __m512i g[4])
{
    const long long  *t = (const long long *) (const void *) llm_iq1_grid;
    const __m512i     one = _mm512_set1_epi8(1);

    g[0] = _mm512_add_epi8(_mm512_i32gather_epi64(
               _mm512_castsi512_si256(i0), t, 8), one);
    g[1] = _mm512_add_epi8(_mm512_i32gather_epi64(
               _mm512_extracti64x4_epi64(i0, 1), t, 8), one);
    g[2] = _mm512_add_epi8(_mm512_i32gather_epi64(
               _mm512_castsi512_si256(i1), t, 8), one);
    g[3] = _mm512_add_epi8(_mm512_i32gather_epi64(
               _mm512_extracti64x4_epi64(i1, 1), t, 8), one);
}


/*
 * g[q] (points + 1) times 8 ls.  ls (int32 lanes) holds the ls of each
 * 16 weights k at lane k / div (IQ1_S: a scale per 32, div 2; IQ1_M: per
 * 16, div 1); vpshufb's table, byte p = 8 p ls for p = 0, 1, 2, in byte 0
 * .. 2 of each 128-bit lane.
 */
LLM_INLINE void
llm_iq1g_scale(const int div, __m512i ls, __m512i g[4])
{
    const __m512i  tab = _mm512_mullo_epi32(ls, _mm512_set1_epi32(
                                                    8 << 8 | 16 << 16));

#pragma GCC unroll 4
    for (int q = 0; q < 4; q++) {
        const __m512i  ix = _mm512_setr_epi32(
                             4 * q / div, 0, 0, 0, (4 * q + 1) / div, 0, 0, 0,
                             (4 * q + 2) / div, 0, 0, 0,
                             (4 * q + 3) / div, 0, 0, 0);

        g[q] = _mm512_shuffle_epi8(_mm512_permutexvar_epi32(ix, tab), g[q]);
    }
}


/* Lane k of a 16-lane vector: lane k / 4 of v (sel 0) or 4 + k / 4. */
LLM_INLINE __m512i
llm_iq1g_by4(__m512i v, int sel)
{
    return _mm512_permutexvar_epi32(_mm512_add_epi32(_mm512_setr_epi32(
               0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3),
               _mm512_set1_epi32(4 * sel)), v);
}


/* One IQ1_S super-block: g the scaled points, kw the words
 * ls (delta - 8) of each sub-block, twice (its two bsums). */
LLM_INLINE void
llm_iq1g_s_unpack(const llm_block_iq1_s *a, __m512i g[4], __m256i *kw)
{
    /* qh[ib] in int32 lane ib */
    const __m512i  h = _mm512_castsi256_si512(_mm256_cvtepu16_epi32(
                           _mm_loadu_si128((const void *) a->qh)));
    /* group l of 4: bits 3 l .. 3 l + 2 to bits 8..10 (l = 3: right 1) */
    const __m512i  rot = _mm512_setr_epi32(8, 5, 2, 31, 8, 5, 2, 31,
                                           8, 5, 2, 31, 8, 5, 2, 31);
    const __m512i  m = _mm512_set1_epi32(0x700);
    __m512i        i0, i1, ls;
    __m256i        k;

    i0 = _mm512_or_si512(_mm512_cvtepu8_epi32(_mm_loadu_si128(
                             (const void *) a->qs)),
                         _mm512_and_si512(_mm512_rolv_epi32(
                             llm_iq1g_by4(h, 0), rot), m));
    i1 = _mm512_or_si512(_mm512_cvtepu8_epi32(_mm_loadu_si128(
                             (const void *) (a->qs + 16))),
                         _mm512_and_si512(_mm512_rolv_epi32(
                             llm_iq1g_by4(h, 1), rot), m));
    llm_iq1g_gather(i0, i1, g);
    ls = _mm512_and_si512(_mm512_srli_epi32(h, 12), _mm512_set1_epi32(7));
    ls = _mm512_add_epi32(_mm512_add_epi32(ls, ls), _mm512_set1_epi32(1));
    llm_iq1g_scale(2, ls, g);
    /* ls (delta - 8): -7 ls, or -9 ls where bit 15 is set */
    k = _mm256_mullo_epi32(_mm512_castsi512_si256(ls), _mm256_sub_epi32(
            _mm256_set1_epi32(-7), _mm256_slli_epi32(_mm256_srli_epi32(
                _mm512_castsi512_si256(h), 15), 1)));
    *kw = _mm256_or_si256(_mm256_and_si256(k, _mm256_set1_epi32(0xffff)),
                          _mm256_slli_epi32(k, 16));
}


/* IQ1_M: the 32 groups' high nibbles (qh), shifted so that the index
 * bits are at 8..10 and the delta bit at 11, for groups 16 sel ..
 * 16 sel + 15 in int32 lanes. */
LLM_INLINE __m512i
llm_iq1g_m_high(const llm_block_iq1_m *a, int sel)
{
    const __m128i  qh = _mm_loadu_si128((const void *) a->qh);
    const __m128i  dup = _mm_add_epi8(_mm_setr_epi8(
                             0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7),
                             _mm_set1_epi8((char) (8 * sel)));

    return _mm512_sllv_epi32(_mm512_cvtepu8_epi32(_mm_shuffle_epi8(qh, dup)),
                             _mm512_setr_epi32(8, 4, 8, 4, 8, 4, 8, 4,
                                               8, 4, 8, 4, 8, 4, 8, 4));
}


/* IQ1_M: the bytes ls (8 - delta) of groups 16 sel + 8 q' .. + 7 (q' =
 * 0, 1) repeated over their 8 weights: c[2 sel + q']. */
LLM_INLINE void
llm_iq1g_m_coef(__m512i ls, __m512i hv, int sel, __m512i *c)
{
    const __m512i  pat = _mm512_set_epi64(
                             0x0808080808080808ll, 0, 0x0808080808080808ll, 0,
                             0x0808080808080808ll, 0, 0x0808080808080808ll, 0);
    /* group k's half: k / 2 */
    const __m512i  half = _mm512_add_epi32(_mm512_setr_epi32(
                              0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7),
                              _mm512_set1_epi32(8 * sel));
    /* 8 - delta: 7, or 9 where the delta bit (11) is set */
    const __m512i  f = _mm512_add_epi32(_mm512_set1_epi32(7),
                           _mm512_and_si512(_mm512_srli_epi32(hv, 10),
                                            _mm512_set1_epi32(2)));
    const __m512i  v = _mm512_mullo_epi32(
                           _mm512_permutexvar_epi32(half, ls), f);

    c[0] = _mm512_shuffle_epi8(_mm512_cvtepu32_epi64(
               _mm512_castsi512_si256(v)), pat);
    c[1] = _mm512_shuffle_epi8(_mm512_cvtepu32_epi64(
               _mm512_extracti64x4_epi64(v, 1)), pat);
}


/* One IQ1_M super-block: g the scaled points, c the delta bytes. */
LLM_INLINE void
llm_iq1g_m_unpack(const llm_block_iq1_m *a, __m512i g[4], __m512i c[4])
{
    const __m512i  h0 = llm_iq1g_m_high(a, 0);
    const __m512i  h1 = llm_iq1g_m_high(a, 1);
    const __m512i  m = _mm512_set1_epi32(0x700);
    /* the 4 scale words in lanes 0..3; half h's 3 bits at 3 (h % 4) of
     * word h / 4 */
    const __m512i  sw = _mm512_castsi128_si512(_mm_cvtepu16_epi32(
                            _mm_loadl_epi64((const void *) a->scales)));
    __m512i        ls;

    llm_iq1g_gather(
        _mm512_or_si512(_mm512_cvtepu8_epi32(_mm_loadu_si128(
                            (const void *) a->qs)),
                        _mm512_and_si512(h0, m)),
        _mm512_or_si512(_mm512_cvtepu8_epi32(_mm_loadu_si128(
                            (const void *) (a->qs + 16))),
                        _mm512_and_si512(h1, m)),
        g);
    ls = _mm512_and_si512(_mm512_srlv_epi32(llm_iq1g_by4(sw, 0),
                              _mm512_setr_epi32(0, 3, 6, 9, 0, 3, 6, 9,
                                                0, 3, 6, 9, 0, 3, 6, 9)),
                          _mm512_set1_epi32(7));
    ls = _mm512_add_epi32(_mm512_add_epi32(ls, ls), _mm512_set1_epi32(1));
    llm_iq1g_scale(1, ls, g);
    llm_iq1g_m_coef(ls, h0, 0, c);
    llm_iq1g_m_coef(ls, h1, 1, c + 2);
}


/* R (1) x C (at most 4) results of IQ1_S (m = 0) or IQ1_M (m = 1) rows
 * against Q8_K columns. */
LLM_INLINE void
llm_iq1g_tile(const int m, const int R, const int C, int64_t nb,
    const char *w, size_t ws, const char *x, size_t xs, float *y, size_t ldy)
{
    const size_t  bsz = m ? sizeof(llm_block_iq1_m) : sizeof(llm_block_iq1_s);
    float         sum[LLM_MAXC];
    int64_t       b;
    int           c;

    (void) R;
    (void) ws;
    for (c = 0; c < C; c++) {
        sum[c] = 0;
    }
    for (b = 0; b < nb; b++, w += bsz) {
        const llm_block_iq1_s  *as = (const llm_block_iq1_s *)
                                     (const void *) w;
        const llm_block_iq1_m  *am = (const llm_block_iq1_m *)
                                     (const void *) w;
        __m512i                 g[4], k[4];
        __m256i                 kw;
        float                   d;

        _mm_prefetch(w + LLM_IQ1G_PF, _MM_HINT_T0);
        if (m) {
            llm_iq1g_m_unpack(am, g, k);
            d = llm_h2f_hw(llm_iq1_m_d(am->scales));
        } else {
            llm_iq1g_s_unpack(as, g, &kw);
            d = llm_h2f_hw(as->d);
        }
#pragma GCC unroll 4
        for (c = 0; c < C; c++) {
            const llm_block_q8_K  *q8 = (const llm_block_q8_K *)
                                        (const void *) (x + c * xs) + b;
            /* IQ1_S: the delta terms from the bsums; IQ1_M: subtracted
             * below */
            __m512i                pos = m ? _mm512_setzero_si512()
                                         : _mm512_zextsi256_si512(
                                               _mm256_madd_epi16(
                                                   _mm256_loadu_si256(
                                                       (const void *)
                                                       q8->bsums), kw));
            __m512i                neg = _mm512_setzero_si512();

#pragma GCC unroll 4
            for (int q = 0; q < 4; q++) {
                __m512i  yv = _mm512_loadu_si512((const void *)
                                                 (q8->qs + 64 * q));

                pos = _mm512_dpbusd_epi32(pos, g[q], yv);
                if (m) {
                    neg = _mm512_dpbusd_epi32(neg, k[q], yv);
                }
            }
            if (m) {
                pos = _mm512_sub_epi32(pos, neg);
            }
            sum[c] += d * q8->d * 0.125f
                      * (float) _mm512_reduce_add_epi32(pos);
        }
    }
    for (c = 0; c < C; c++) {
        y[c * ldy] = sum[c];
    }
}

#define llm_iq1g_s_tile(...)  llm_iq1g_tile(0, __VA_ARGS__)
#define llm_iq1g_m_tile(...)  llm_iq1g_tile(1, __VA_ARGS__)


LLM_GEMM_DRIVER(iq1_s_avx512, LLM_QK_K, 1, 4, LLM_ROW_COLS, llm_iq1g_s_tile)
LLM_GEMM_DRIVER(iq1_m_avx512, LLM_QK_K, 1, 4, LLM_ROW_COLS, llm_iq1g_m_tile)


void
llm_kernels_init_iq1_avx512(llm_kernels_t *k)
{
    k->vec_dot[LLM_TYPE_IQ1_S] = llm_dot_iq1_s_avx512;
    k->gemm[LLM_TYPE_IQ1_S] = llm_gemm_iq1_s_avx512;
    k->vec_dot[LLM_TYPE_IQ1_M] = llm_dot_iq1_m_avx512;
    k->gemm[LLM_TYPE_IQ1_M] = llm_gemm_iq1_m_avx512;
}
