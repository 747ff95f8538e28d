/*
 * IQ2_XXS x Q8_K with AVX-512 VBMI (Ice Lake, Zen 4 and later), installed
 * by iq2_avx512.c when the CPU has it.
 *
 * Two super-blocks at a time: their 64 grid indices (the low words'
 * bytes) in one register, byte p of the 64 entries from 8 256-byte tables
 * by two vpermi2b and a blend, then an 8 x 8 byte transpose (three levels
 * of in-lane interleaves) puts them in weight order.  Before: 32 scalar
 * loads and inserts a super-block; four vpgatherdq (kept for a lone last
 * super-block) ran 1.6x slower than the lookups on Zen 4.  Per
 * super-block the 32 seven-bit sign codes (the high words' bits 7 l) come
 * into bytes by one vpmultishiftqb, packed and turned into sign bytes (parity as bit 7) by a vpermi2b: their 256
 * bits negate the activations (|q| <= 127, exact).  vpmaddubsw (pairs at
 * most 2 x 43 x 127) and vpdpwssd times the sub-blocks' 2 s + 1 give the
 * super-block's exact integer sum, scaled with the scalar reference's
 * float steps (quant_iq2.c), so each super-block's result is its bits.
 * A weight block is unpacked once for up to 4 columns.
 */

/* built with -mavx512vbmi (engine/Makefile) */

#include <immintrin.h>

#include "kernels_common.h"
#include "iq2_avx512.h"


/* The sign byte of each 7-bit code (bit 7 the parity); byte p of grid
 * entry i at tab[p][i]; the index bytes of two super-blocks in the order
 * the byte interleave wants (llm_iq2x_pair). */
static uint8_t  llm_iq2x_signs[128] __attribute__((aligned(64)));
static uint8_t  llm_iq2x_tab[8][256] __attribute__((aligned(64)));
static uint8_t  llm_iq2x_perm[64] __attribute__((aligned(64)));


static void
llm_iq2x_init(void)
{
    static int  done;

    if (__atomic_load_n(&done, __ATOMIC_ACQUIRE)) {
        return;
    }
    for (int k = 0; k < 128; k++) {
        llm_iq2x_signs[k] = (uint8_t) llm_iq2_signs((unsigned) k);
    }
    for (int i = 0; i < 256; i++) {
        for (int p = 0; p < 8; p++) {
            llm_iq2x_tab[p][i] = (uint8_t) (llm_iq2xxs_grid[i] >> 8 * p);
        }
    }
    /* position 16 L + 2 t + e takes index n = 8 t + 2 L + e of the pair
     * (n < 32 the first block's, at qs byte 8 (n / 4) + n % 4; the second
     * block's with bit 6 set) */
    for (int l = 0; l < 4; l++) {
        for (int t = 0; t < 8; t++) {
            for (int e = 0; e < 2; e++) {
                int  n = 8 * t + 2 * l + e, m = n % 32;

                llm_iq2x_perm[16 * l + 2 * t + e] =
                    (uint8_t) ((n >= 32 ? 64 : 0) + 8 * (m / 4) + m % 4);
            }
        }
    }
    __atomic_store_n(&done, 1, __ATOMIC_RELEASE);
}


/* The sign bits (sg[q]: weights 64 q .. 64 q + 63) and the scales (sc[q]:
 * 2 s + 1 of sub-blocks 2q in the low 256 bits, 2q + 1 in the high, in
 * every int16) of one super-block whose qs words are v. */
LLM_INLINE void
llm_iq2x_signs_scales(__m512i v, uint64_t sg[8], __m512i sc[4])
{
    /* code l of sub-block j at bit 32 + 7 l of qword j: byte 8 j + l,
     * then packed to byte 4 j + l */
    const __m512i     codes = _mm512_multishift_epi64_epi8(
                                  _mm512_set1_epi64(0x3f38312a352e2720ll), v);
    const __m512i     pk = _mm512_set_epi32(
        0, 0, 0, 0, 0, 0, 0, 0,
        0x3b3a3938, 0x33323130, 0x2b2a2928, 0x23222120,
        0x1b1a1918, 0x13121110, 0x0b0a0908, 0x03020100);
    const __m512i    *st = (const __m512i *) (const void *) llm_iq2x_signs;
    __m512i           s;

    _mm512_storeu_si512((void *) sg, _mm512_permutex2var_epi8(
                            st[0], _mm512_permutexvar_epi8(pk, codes), st[1]));
    /* 2 s + 1 in both words of each odd lane (s: bits 28..31 of the high
     * word), then spread: lanes 4q + 1 (low half), 4q + 3 (high) */
    s = _mm512_srli_epi32(v, 28);
    s = _mm512_add_epi32(_mm512_add_epi32(s, s), _mm512_set1_epi32(1));
    s = _mm512_or_si512(s, _mm512_slli_epi32(s, 16));
#pragma GCC unroll 8
    for (int q = 0; q < 4; q++) {
        sc[q] = _mm512_permutexvar_epi32(
                    _mm512_inserti64x4(_mm512_set1_epi32(4 * q + 1),
                                       _mm256_set1_epi32(4 * q + 3), 1), s);
    }
}


/* The magnitudes of one super-block (g[q]: weights 64 q .. 64 q + 63)
 * whose qs words are v, by four vpgatherdq (a lone last super-block). */
LLM_INLINE void
llm_iq2x_gather(__m512i v, __m512i g[4])
{
    const long long  *grid = (const long long *) (const void *)
                             llm_iq2xxs_grid;
    /* lane k of the first 16: index byte k (sub-block k / 4, byte k % 4:
     * byte 8 (k / 4) + k % 4 of the block's qs) */
    const __m512i     pi = _mm512_set_epi32(
        0x3b, 0x3a, 0x39, 0x38, 0x33, 0x32, 0x31, 0x30,
        0x2b, 0x2a, 0x29, 0x28, 0x23, 0x22, 0x21, 0x20);
    const __m512i     pl = _mm512_set_epi32(
        0x1b, 0x1a, 0x19, 0x18, 0x13, 0x12, 0x11, 0x10,
        0x0b, 0x0a, 0x09, 0x08, 0x03, 0x02, 0x01, 0x00);
    const __mmask64   m0 = 0x1111111111111111ull;
    const __m512i     i0 = _mm512_maskz_permutexvar_epi8(m0, pl, v);
    const __m512i     i1 = _mm512_maskz_permutexvar_epi8(m0, pi, v);

    g[0] = _mm512_i32gather_epi64(_mm512_castsi512_si256(i0), grid, 8);
    g[1] = _mm512_i32gather_epi64(_mm512_extracti64x4_epi64(i0, 1), grid, 8);
    g[2] = _mm512_i32gather_epi64(_mm512_castsi512_si256(i1), grid, 8);
    g[3] = _mm512_i32gather_epi64(_mm512_extracti64x4_epi64(i1, 1), grid, 8);
}


/* Byte p of the grid entries of the 64 indices x (top bit in hi). */
LLM_INLINE __m512i
llm_iq2x_byte(__m512i x, __mmask64 hi, int p)
{
    const __m512i  *t = (const __m512i *) (const void *) llm_iq2x_tab[p];
    __m512i         lo = _mm512_permutex2var_epi8(t[0], x, t[1]);
    __m512i         up = _mm512_permutex2var_epi8(t[2], x, t[3]);

    return _mm512_mask_blend_epi8(hi, lo, up);
}


/*
 * The magnitudes of two super-blocks (qs words v0, v1) by table lookups:
 * their 64 indices in one register, byte p of the 64 entries with two
 * vpermi2b and a blend, then an 8 x 8 byte transpose by three levels of
 * in-lane interleaves; g[t] weights 64 t .. 64 t + 63 of the pair.
 */
LLM_INLINE void
llm_iq2x_pair(__m512i v0, __m512i v1, __m512i g[8])
{
    const __m512i    x = _mm512_permutex2var_epi8(
                             v0, _mm512_load_si512((const void *)
                                                   llm_iq2x_perm), v1);
    const __mmask64  hi = _mm512_movepi8_mask(x);
    __m512i          b[8], s[8];

#pragma GCC unroll 8
    for (int p = 0; p < 8; p++) {
        b[p] = llm_iq2x_byte(x, hi, p);
    }
#pragma GCC unroll 8
    for (int k = 0; k < 4; k++) {
        s[k] = _mm512_unpacklo_epi8(b[2 * k], b[2 * k + 1]);
        s[4 + k] = _mm512_unpackhi_epi8(b[2 * k], b[2 * k + 1]);
    }
#pragma GCC unroll 8
    for (int h = 0; h < 2; h++) {
        const __m512i  *a = s + 4 * h;
        __m512i         l0 = _mm512_unpacklo_epi16(a[0], a[1]);
        __m512i         l1 = _mm512_unpacklo_epi16(a[2], a[3]);
        __m512i         h0 = _mm512_unpackhi_epi16(a[0], a[1]);
        __m512i         h1 = _mm512_unpackhi_epi16(a[2], a[3]);

        g[4 * h] = _mm512_unpacklo_epi32(l0, l1);
        g[4 * h + 1] = _mm512_unpackhi_epi32(l0, l1);
        g[4 * h + 2] = _mm512_unpacklo_epi32(h0, h1);
        g[4 * h + 3] = _mm512_unpackhi_epi32(h0, h1);
    }
}


/* R (1) x C (at most 4) results of IQ2_XXS rows against Q8_K columns. */
LLM_INLINE void
llm_iq2x_tile(const int R, const int C, int64_t nb, const char *w,
    size_t ws, const char *x, size_t xs, float *y, size_t ldy)
{
    const llm_block_iq2_xxs  *a = (const llm_block_iq2_xxs *)
                                  (const void *) w;
    float                     sum[LLM_MAXC];
    int64_t                   b;
    int                       c;

    (void) R;
    (void) ws;
#pragma GCC unroll 4
    for (c = 0; c < C; c++) {
        sum[c] = 0;
    }
    for (b = 0; b + 1 < nb; b += 2, a += 2) {
        const __m512i  v0 = _mm512_loadu_si512((const void *) a[0].qs);
        const __m512i  v1 = _mm512_loadu_si512((const void *) a[1].qs);
        __m512i        g[8], sc[8];
        uint64_t       sg[16];

        llm_iq2x_pair(v0, v1, g);
        llm_iq2x_signs_scales(v0, sg, sc);
        llm_iq2x_signs_scales(v1, sg + 8, sc + 4);
        llm_iq2g_cols(C, a->d, g, sg, sc, x, xs, b, sum);
        llm_iq2g_cols(C, a[1].d, g + 4, sg + 8, sc + 4, x, xs, b + 1, sum);
    }
    if (b < nb) {
        const __m512i  v = _mm512_loadu_si512((const void *) a->qs);
        __m512i        g[4], sc[4];
        uint64_t       sg[8];

        llm_iq2x_gather(v, g);
        llm_iq2x_signs_scales(v, sg, sc);
        llm_iq2g_cols(C, a->d, g, sg, sc, x, xs, b, sum);
    }
#pragma GCC unroll 4
    for (c = 0; c < C; c++) {
        y[c * ldy] = 0.125f * sum[c];
    }
}


LLM_GEMM_DRIVER(iq2_xxs_vbmi, LLM_QK_K, 1, 4, LLM_ROW_COLS, llm_iq2x_tile)


/*
 * The plane tile (GFNI too; as iq3x_avx512.c's): two super-blocks' 64
 * indices in natural order, byte p of their grid entries (two vpermi2b
 * and a blend) is weight p of each group of 8: plane p, dotted by
 * vpdpbusd against the column prepared once per call in the same order
 * (py[p] byte P = y[8 P + p] of the pair), so int32 lane m is sub-block
 * m of the pair.  The 7-bit sign codes, one vpmultishiftqb per block and
 * one vpermi2b into the transpose's order, become the 8 planes' masks by
 * one gf2p8affineqb (row 0x7f: the parity, the 8th sign) and one vpermb.
 * Lane m times 2 s + 1 (vpmulld), the two halves summed in int32: each
 * super-block's exact sum, then the scalar reference's float steps, so
 * each super-block's result, and a row's, has the reference's bits.
 * Rows over 8192 weights take the tile above.
 */

/* A pair of super-blocks of a prepared column: the 8 planes. */
typedef struct {
    __m512i  py[8];
} llm_iq2p_t;

#define LLM_IQ2P_MAX  16        /* pairs on the stack: 8192 weights */
#define LLM_IQ2P_UNITS(nb)  (((nb) + 1) / 2)
#define LLM_IQ2P_PF  1536       /* weight prefetch distance, bytes */

/* index bytes in natural order: index n of the pair (n >= 32: the second
 * block's) at byte 8 (m / 4) + m % 4 of its block, m = n % 32; the codes
 * of indices 8 Q + 7 - c at byte 8 Q + c (multishift output: code l of
 * sub-block j at byte 8 j + l); mask gather: byte 8 p + Q <- 8 Q + p */
static uint8_t  llm_iq2p_ictl[64] __attribute__((aligned(64)));
static uint8_t  llm_iq2p_cctl[64] __attribute__((aligned(64)));
static uint8_t  llm_iq2p_gctl[64] __attribute__((aligned(64)));


static void
llm_iq2p_init(void)
{
    for (int n = 0; n < 64; n++) {
        int  m = n % 32, q = n / 8, c = n % 8, v = 8 * q + 7 - c;
        int  mv = v % 32;

        llm_iq2p_ictl[n] = (uint8_t) ((n >= 32 ? 64 : 0) + 8 * (m / 4)
                                      + m % 4);
        llm_iq2p_cctl[n] = (uint8_t) ((v >= 32 ? 64 : 0) + 8 * (mv / 4)
                                      + mv % 4);
        llm_iq2p_gctl[n] = (uint8_t) (8 * (n % 8) + n / 8);
    }
}


/* Column x (nb Q8_K blocks) into pairs of planes: byte 8 p + t of o[k]
 * <- byte 8 t + p of the pair's 64-byte chunk k (qword p: plane p of
 * groups 8 k .. 8 k + 7), then an 8 x 8 qword transpose, py[p] qword k
 * = o[k] qword p (three levels of vpermt2q). */
static void
llm_iq2p_prep(const char *x, int64_t nb, llm_iq2p_t *out)
{
    const llm_block_q8_K  *q = (const llm_block_q8_K *) (const void *) x;
    const __m512i          pm = _mm512_set_epi64(
                               0x3f372f271f170f07ll, 0x3e362e261e160e06ll,
                               0x3d352d251d150d05ll, 0x3c342c241c140c04ll,
                               0x3b332b231b130b03ll, 0x3a322a221a120a02ll,
                               0x3931292119110901ll, 0x3830282018100800ll);
    const __m512i          i1 = _mm512_setr_epi64(0, 8, 1, 9, 2, 10, 3, 11);
    const __m512i          i2 = _mm512_setr_epi64(4, 12, 5, 13, 6, 14, 7, 15);
    const __m512i          j1 = _mm512_setr_epi64(0, 1, 8, 9, 2, 3, 10, 11);
    const __m512i          j2 = _mm512_setr_epi64(4, 5, 12, 13, 6, 7, 14, 15);
    const __m512i          k1 = _mm512_setr_epi64(0, 1, 2, 3, 8, 9, 10, 11);
    const __m512i          k2 = _mm512_setr_epi64(4, 5, 6, 7, 12, 13, 14,
                                                  15);

    for (int64_t pi = 0; pi < (nb + 1) / 2; pi++) {
        __m512i  o[8], u[8], v[8];

        for (int k = 0; k < 8; k++) {
            o[k] = 2 * pi + k / 4 < nb
                   ? _mm512_permutexvar_epi8(pm, _mm512_loadu_si512(
                         (const void *) (q[2 * pi + k / 4].qs
                                         + 64 * (k % 4))))
                   : _mm512_setzero_si512();
        }
        for (int j = 0; j < 4; j++) {
            u[j] = _mm512_permutex2var_epi64(o[2 * j], i1, o[2 * j + 1]);
            u[4 + j] = _mm512_permutex2var_epi64(o[2 * j], i2, o[2 * j + 1]);
        }
        /* u[j] (j < 4): qwords 0..3 of o[2j], o[2j+1] interleaved;
         * u[4 + j]: qwords 4..7 */
        for (int h = 0; h < 2; h++) {
            for (int j = 0; j < 2; j++) {
                v[4 * h + 2 * j] = _mm512_permutex2var_epi64(
                    u[4 * h + 2 * j], j1, u[4 * h + 2 * j + 1]);
                v[4 * h + 2 * j + 1] = _mm512_permutex2var_epi64(
                    u[4 * h + 2 * j], j2, u[4 * h + 2 * j + 1]);
            }
        }
        /* v[4 h + 2 j + e]: qwords 4 h + 2 e, + 1 of o[4j .. 4j + 3] */
        for (int h = 0; h < 2; h++) {
            for (int e = 0; e < 2; e++) {
                out[pi].py[4 * h + 2 * e] = _mm512_permutex2var_epi64(
                    v[4 * h + e], k1, v[4 * h + 2 + e]);
                out[pi].py[4 * h + 2 * e + 1] = _mm512_permutex2var_epi64(
                    v[4 * h + e], k2, v[4 * h + 2 + e]);
            }
        }
    }
}


/* One weight row's C results against C prepared columns. */
LLM_INLINE void
llm_iq2p_rows(const int C, int64_t nb, const char *w, size_t ws,
    const char *x, size_t xs, const llm_iq2p_t *pre, float *y, size_t ldy)
{
    const llm_block_iq2_xxs  *a = (const llm_block_iq2_xxs *)
                                  (const void *) w;
    const __m512i             ic = _mm512_load_si512((const void *)
                                                     llm_iq2p_ictl);
    const __m512i             cc = _mm512_load_si512((const void *)
                                                     llm_iq2p_cctl);
    const __m512i             gc = _mm512_load_si512((const void *)
                                                     llm_iq2p_gctl);
    /* code l of qword j at byte l: bits 32 + 7 l */
    const __m512i             sh = _mm512_set1_epi64(0x3f38312a352e2720ll);
    /* byte p selects bit p; 0x7f: the parity of bits 0..6 */
    const __m512i             sel = _mm512_set1_epi64(0x7f40201008040201ll);
    /* lane m: the high word of sub-block m (of the second block: m - 8) */
    const __m512i             si = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13,
                                                     15, 17, 19, 21, 23, 25,
                                                     27, 29, 31);
    const int64_t             np = (nb + 1) / 2;
    float                     sum[LLM_T_COLS];
    int64_t                   pi;
    int                       c, p;

    (void) ws;
#pragma GCC unroll 8
    for (c = 0; c < C; c++) {
        sum[c] = 0;
    }
    for (pi = 0; pi < np; pi++) {
        const llm_block_iq2_xxs  *A = a + 2 * pi;
        const int                 two = 2 * pi + 1 < nb;
        const llm_block_iq2_xxs  *B = two ? A + 1 : A;
        const __m512i             vA = _mm512_loadu_si512((const void *)
                                                          A->qs);
        const __m512i             vB = _mm512_loadu_si512((const void *)
                                                          B->qs);
        const __m512i             xi = _mm512_permutex2var_epi8(vA, ic, vB);
        const __mmask64           hi = _mm512_movepi8_mask(xi);
        const __m512i             cv = _mm512_permutex2var_epi8(
                                      _mm512_multishift_epi64_epi8(sh, vA),
                                      cc,
                                      _mm512_multishift_epi64_epi8(sh, vB));
        __m512i                   sc, g[8];
        uint64_t                  sg[8] __attribute__((aligned(64)));
        const float               dA = llm_h2f_hw(A->d);
        const float               dB = llm_h2f_hw(B->d);

        /* the lines of the pair, ~1.5 KB ahead */
        _mm_prefetch((const char *) A + LLM_IQ2P_PF, _MM_HINT_T0);
        _mm_prefetch((const char *) (A + 1) + LLM_IQ2P_PF, _MM_HINT_T0);
        _mm_prefetch((const char *) (A + 2) + LLM_IQ2P_PF - 1, _MM_HINT_T0);
        _mm512_store_si512((void *) sg, _mm512_permutexvar_epi8(gc,
                               _mm512_gf2p8affine_epi64_epi8(sel, cv, 0)));
        __asm__ ("" : "+m" (sg));
        sc = _mm512_srli_epi32(_mm512_permutex2var_epi32(vA, si, vB), 28);
        sc = _mm512_or_si512(_mm512_add_epi32(sc, sc), _mm512_set1_epi32(1));
#pragma GCC unroll 8
        for (p = 0; p < 8; p++) {
            g[p] = llm_iq2x_byte(xi, hi, p);
        }
#pragma GCC unroll 8
        for (c = 0; c < C; c++) {
            const llm_iq2p_t      *pc = pre + c * np + pi;
            const llm_block_q8_K  *q8 = (const llm_block_q8_K *)
                                        (const void *) (x + c * xs) + 2 * pi;
            __m512i                isum = _mm512_setzero_si512();
            __m256i                h;
            __m128i                r;

#pragma GCC unroll 8
            for (p = 0; p < 8; p++) {
                isum = _mm512_dpbusd_epi32(isum, g[p],
                           _mm512_mask_sub_epi8(pc->py[p],
                               _load_mask64((__mmask64 *) &sg[p]),
                               _mm512_setzero_si512(), pc->py[p]));
            }
            isum = _mm512_mullo_epi32(isum, sc);
            /* lanes 0..7: the first block's sum, 8..15 the second's */
            h = _mm256_hadd_epi32(_mm512_castsi512_si256(isum),
                                  _mm512_extracti64x4_epi64(isum, 1));
            h = _mm256_hadd_epi32(h, h);
            r = _mm_add_epi32(_mm256_castsi256_si128(h),
                              _mm256_extracti128_si256(h, 1));
            sum[c] += dA * q8[0].d * (float) _mm_cvtsi128_si32(r);
            if (two) {
                sum[c] += dB * q8[1].d * (float) _mm_extract_epi32(r, 1);
            }
        }
    }
#pragma GCC unroll 8
    for (c = 0; c < C; c++) {
        y[c * ldy] = 0.125f * sum[c];
    }
}


LLM_T_DRIVER(llm_gemm_iq2_xxs_plane, llm_iq2p_t, LLM_QK_K, LLM_IQ2P_MAX,
             LLM_IQ2P_UNITS, llm_iq2p_prep, llm_iq2p_rows,
             llm_gemm_iq2_xxs_vbmi, 1, 8)


static void
llm_dot_iq2_xxs_plane(int64_t n, float *s, const void *w, const void *x)
{
    llm_gemm_iq2_xxs_plane(n, 1, 1, w, 0, x, 0, s, 1);
}


/* The kernels into k (the caller checked the CPU has VBMI). */
void
llm_kernels_init_iq2_vbmi(llm_kernels_t *k)
{
    llm_iq2x_init();
    if (!__builtin_cpu_supports("gfni")) {
        k->vec_dot[LLM_TYPE_IQ2_XXS] = llm_dot_iq2_xxs_vbmi;
        k->gemm[LLM_TYPE_IQ2_XXS] = llm_gemm_iq2_xxs_vbmi;
        return;
    }
    llm_iq2p_init();
    k->vec_dot[LLM_TYPE_IQ2_XXS] = llm_dot_iq2_xxs_plane;
    k->gemm[LLM_TYPE_IQ2_XXS] = llm_gemm_iq2_xxs_plane;
}
