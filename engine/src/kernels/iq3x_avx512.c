/*
 * IQ3_XXS x Q8_K with AVX-512 VBMI (vpermi2b, vpmultishiftqb; Ice Lake,
 * Zen 4 and later): the grid looked up 64 indices at a time in registers
 * instead of by 64 scalar loads.  iq3_avx512.c registers it when the CPU
 * has VBMI (its own kernel stays for those without).
 *
 * The grid is split into four 256-byte tables, one per byte of an entry;
 * two vpermi2b and a blend on the index's top bit fetch byte p of the 64
 * entries of a super-block, four byte-interleaves put them in weight
 * order (the indices permuted first so the interleave's lane order comes
 * out as the weights').  The 32 seven-bit sign codes come out of the sas
 * words with one vpmultishiftqb and become sign bytes (the parity as bit
 * 7) with one vpermi2b; their 256 bits are the masks that negate the
 * activations, as in iq3_avx512.c.  vpmaddubsw and vpdpwssd times the odd
 * sub-block scales 2 ls + 1 give the super-block's exact int32 sum,
 * times d_w d_x into a float accumulator; the total times 1/4.  A weight
 * block is unpacked once for up to 4 columns.
 */

/* built with -mavx512vbmi (engine/Makefile) */

#include <immintrin.h>

#include "kernels_common.h"


/* Byte p of grid entry i at tab[p][i]; the IQ3_XXS sign bytes of the 7-bit
 * codes (bit 7 the parity); the index permutation (see above). */
static uint8_t  llm_iq3x_tab[4][256] __attribute__((aligned(64)));
static uint8_t  llm_iq3x_signs[128] __attribute__((aligned(64)));
static uint8_t  llm_iq3x_perm[64] __attribute__((aligned(64)));


/* Fill the tables (the first time the kernels are installed). */
static void
llm_iq3x_init(void)
{
    static int  done;

    if (__atomic_load_n(&done, __ATOMIC_ACQUIRE)) {
        return;
    }
    for (int i = 0; i < 256; i++) {
        for (int p = 0; p < 4; p++) {
            llm_iq3x_tab[p][i] = (uint8_t) (llm_iq3xxs_grid[i] >> 8 * p);
        }
    }
    for (int k = 0; k < 128; k++) {
        llm_iq3x_signs[k] = (uint8_t) (k | __builtin_parity(k) << 7);
    }
    /* position 16 L + 4 q + t takes index 16 q + 4 L + t: after the
     * in-lane interleaves vector q holds weights 64 q .. 64 q + 63 */
    for (int l = 0; l < 4; l++) {
        for (int q = 0; q < 4; q++) {
            for (int t = 0; t < 4; t++) {
                llm_iq3x_perm[16 * l + 4 * q + t] =
                    (uint8_t) (16 * q + 4 * l + t);
            }
        }
    }
    __atomic_store_n(&done, 1, __ATOMIC_RELEASE);
}


/* Byte p of the grid entries of the 64 indices x (top bit in hi). */
LLM_INLINE __m512i
llm_iq3x_byte(__m512i x, __mmask64 hi, int p)
{
    const __m512i  *t = (const __m512i *) (const void *) llm_iq3x_tab[p];
    __m512i         lo = _mm512_permutex2var_epi8(t[0], x, t[1]);
    __m512i         up = _mm512_permutex2var_epi8(t[2], x, t[3]);

    return _mm512_mask_blend_epi8(hi, lo, up);
}


/*
 * One super-block unpacked: mags[q] the magnitudes of weights 64 q ..
 * 64 q + 63, sg[q] their sign bits, sc[q] the odd scales of sub-blocks
 * 2q (low 256 bits) and 2q + 1 (high) in every int16.
 */
LLM_INLINE void
llm_iq3x_unpack(const llm_block_iq3_xxs *a, __m512i mags[4], uint64_t sg[8],
    __m512i sc[4])
{
    const __m512i  x = _mm512_permutexvar_epi8(
                           _mm512_load_si512((const void *) llm_iq3x_perm),
                           _mm512_loadu_si512((const void *) a->qs));
    const __mmask64  hi = _mm512_movepi8_mask(x);
    const __m512i  g0 = llm_iq3x_byte(x, hi, 0), g1 = llm_iq3x_byte(x, hi, 1);
    const __m512i  g2 = llm_iq3x_byte(x, hi, 2), g3 = llm_iq3x_byte(x, hi, 3);
    const __m512i  a01 = _mm512_unpacklo_epi8(g0, g1);
    const __m512i  b01 = _mm512_unpackhi_epi8(g0, g1);
    const __m512i  a23 = _mm512_unpacklo_epi8(g2, g3);
    const __m512i  b23 = _mm512_unpackhi_epi8(g2, g3);
    const __m256i  w = _mm256_loadu_si256((const void *) a->sas);
    const __m512i  ws = _mm512_castsi256_si512(w);
    /* code l of sub-block j at bits 7 l of word j: byte 4 j + l */
    const __m512i  sh = _mm512_set1_epi64(0x352e2720150e0700ll);
    const __m512i  codes = _mm512_multishift_epi64_epi8(sh, ws);
    const __m512i  *st = (const __m512i *) (const void *) llm_iq3x_signs;
    __m256i        ls = _mm256_srli_epi32(w, 28);

    mags[0] = _mm512_unpacklo_epi16(a01, a23);
    mags[1] = _mm512_unpackhi_epi16(a01, a23);
    mags[2] = _mm512_unpacklo_epi16(b01, b23);
    mags[3] = _mm512_unpackhi_epi16(b01, b23);
    _mm512_storeu_si512((void *) sg,
                        _mm512_permutex2var_epi8(st[0], codes, st[1]));
    /* 2 ls + 1 in both words of each lane */
    ls = _mm256_add_epi32(_mm256_add_epi32(ls, ls), _mm256_set1_epi32(1));
    ls = _mm256_or_si256(ls, _mm256_slli_epi32(ls, 16));
#pragma GCC unroll 8
    for (int q = 0; q < 4; q++) {
        sc[q] = _mm512_permutexvar_epi32(
                    _mm512_inserti64x4(_mm512_set1_epi32(2 * q),
                                       _mm256_set1_epi32(2 * q + 1), 1),
                    _mm512_castsi256_si512(ls));
    }
}


/* R (1) x C (at most 4) results of IQ3_XXS rows against Q8_K columns. */
LLM_INLINE void
llm_iq3x_tile(const int R, const int C, int64_t nb, const char *w,
    size_t ws, const char *x, size_t xs, float *y, size_t ldy)
{
    const llm_block_iq3_xxs  *a = (const llm_block_iq3_xxs *)
                                  (const void *) w;
    __m512                    acc[LLM_MAXC];
    int64_t                   b;
    int                       c, q;

    (void) R;
    (void) ws;
#pragma GCC unroll 4
    for (c = 0; c < C; c++) {
        acc[c] = _mm512_setzero_ps();
    }
    for (b = 0; b < nb; b++, a++) {
        __m512i   mags[4], sc[4];
        uint64_t  sg[8];
        float     dw = llm_h2f_hw(a->d);

        llm_iq3x_unpack(a, mags, sg, sc);
#pragma GCC unroll 4
        for (c = 0; c < C; c++) {
            const llm_block_q8_K  *q8 = (const llm_block_q8_K *)
                                        (const void *) (x + c * xs) + b;
            __m512i                isum = _mm512_setzero_si512();

#pragma GCC unroll 4
            for (q = 0; q < 4; q++) {
                __m512i  yv = _mm512_loadu_si512((const void *)
                                                 (q8->qs + 64 * q));

                yv = _mm512_mask_sub_epi8(yv, (__mmask64) sg[q],
                                          _mm512_setzero_si512(), yv);
                isum = _mm512_dpwssd_epi32(isum,
                                           _mm512_maddubs_epi16(mags[q], yv),
                                           sc[q]);
            }
            acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum),
                                     _mm512_set1_ps(dw * q8->d), acc[c]);
        }
    }
#pragma GCC unroll 4
    for (c = 0; c < C; c++) {
        y[c * ldy] = 0.25f * _mm512_reduce_add_ps(acc[c]);
    }
}


LLM_GEMM_DRIVER(iq3_xxs_vbmi, LLM_QK_K, 1, 4, LLM_ROW_COLS, llm_iq3x_tile)


/* The kernels into k (the caller checked the CPU has VBMI). */
void
llm_kernels_init_iq3_vbmi(llm_kernels_t *k)
{
    llm_iq3x_init();
    k->vec_dot[LLM_TYPE_IQ3_XXS] = llm_dot_iq3_xxs_vbmi;
    k->gemm[LLM_TYPE_IQ3_XXS] = llm_gemm_iq3_xxs_vbmi;
}
