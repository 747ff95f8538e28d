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
#include <string.h>

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


/*
 * The plane tile: the same sums in about half the vector ops (the tile
 * above: ~50 a super-block, 23 of them shuffles; this one ~26 512-bit
 * and 5 256-bit).
 *
 * Byte p of the grid entries of the 64 indices of a super-block, looked
 * up as above (two vpermi2b and a blend), is weight 4 g + p of the
 * super-block for the group g whose index sits at that position: plane
 * p.  The planes are not interleaved back into weight order; instead
 * each activation column is prepared once per call in the same order
 * (llm_iq3p_prep), and vpdpbusd of plane p against the column's plane p
 * sums, in int32 lane m, plane p of the 4 groups at positions 4 m ..
 * 4 m + 3 (one quarter of a sub-block's weights).
 *
 * The positions follow the sign bits.  vpmultishiftqb spreads the 8
 * 7-bit sign codes of sub-blocks 2 k, 2 k + 1 (qword k of the sas words)
 * over the 8 bytes of qword k; one gf2p8affineqb with those bytes as the
 * matrix is an 8 x 8 bit transpose: output byte 2 p + h of qword k takes
 * bit 4 h + p of code bytes 7 .. 0 (for bit 7, the parity of bits 0..6:
 * the 8th sign), the signs of plane p of groups 16 k + 2 (7 - i) + h, i
 * = 0..7.  One vpermb gathers plane p's 8 bytes, which are its 64-bit
 * mask: position P = 8 (2 k + h) + i holds group 16 k + 2 (7 - i) + h
 * (the index bytes permuted by one vpermb).  Lane m then covers one
 * sub-block, 2 (m / 4) + 1 for even m, 2 (m / 4) for odd; its 2 ls + 1
 * is (word >> 27) | 1, spread by one vpermd.  The mask negates the
 * column's activations (exact: Q8_K's quants are within -127..127); the
 * 4 planes' sums per lane (at most 4 x 4 x 62 x 127) times 2 ls + 1
 * (vpmulld) are exact int32 sums; per super-block they go to a float
 * accumulator times d_w d_x, the total times 1/4.  Every column count
 * takes this tile (columns share only the unpacked weights), so a
 * column's result does not depend on its batch; vec_dot is the gemm of
 * one row and one column.
 */

/* One super-block of a prepared column: the 4 planes. */
typedef struct {
    __m512i  py[4];
} llm_iq3p_t;

/* Super-blocks on the stack per column: rows up to 8192 weights
 * (8 columns x 32 x 256 bytes); longer rows take the tile above. */
#define LLM_IQ3P_MAX  32
#define LLM_IQ3P_UNITS(nb)  (nb)
#define LLM_IQ3P_PF  1536      /* weight prefetch distance, bytes */

/* Position P's group: 16 k + 2 (7 - i) + h for P = 8 (2 k + h) + i. */
static uint8_t  llm_iq3p_group[64] __attribute__((aligned(64)));
/* IQ3_S: byte p of grid entry i at tab[p][i] (512 entries) */
static uint8_t  llm_iq3s_tab[4][512] __attribute__((aligned(64)));
/* IQ3_S rows past the stack: the vec_dot installed before this file's */
static llm_vec_dot_fn  llm_iq3s_long_dot;


static void
llm_iq3p_init(void)
{
    for (int P = 0; P < 64; P++) {
        llm_iq3p_group[P] = (uint8_t) (16 * (P / 16) + 2 * (7 - P % 8)
                                       + (P / 8) % 2);
    }
    for (int i = 0; i < 512; i++) {
        for (int p = 0; p < 4; p++) {
            llm_iq3s_tab[p][i] = (uint8_t) (llm_iq3s_grid[i] >> 8 * p);
        }
    }
}


/* Column x (nb Q8_K blocks) into the plane order: py[p] byte P = y[4 G
 * + p], G the group of position P. */
LLM_INLINE void
llm_iq3p_prep_any(const int U, const char *x, int64_t nb, llm_iq3p_t *out)
{
    const llm_block_q8_K  *q = (const llm_block_q8_K *) (const void *) x;
    /* byte 16 p + j <- byte 4 j + p: each 128-bit lane one plane */
    const __m512i          pm = _mm512_set_epi32(
                               0x3f3b3733, 0x2f2b2723, 0x1f1b1713, 0x0f0b0703,
                               0x3e3a3632, 0x2e2a2622, 0x1e1a1612, 0x0e0a0602,
                               0x3d393531, 0x2d292521, 0x1d191511, 0x0d090501,
                               0x3c383430, 0x2c282420, 0x1c181410, 0x0c080400);
    const __m512i          gp = _mm512_load_si512((const void *)
                                                  llm_iq3p_group);
    /* y + 128 for U: the top bit flipped */
    const __m512i          fl = _mm512_set1_epi8(U ? (char) 0x80 : 0);

    for (int64_t b = 0; b < nb; b++, q++) {
        __m512i  o[4], a, c, e, f;

        for (int k = 0; k < 4; k++) {
            o[k] = _mm512_permutexvar_epi8(pm, _mm512_loadu_si512(
                       (const void *) (q->qs + 64 * k)));
        }
        /* plane p, byte g = y[4 g + p] (group order) */
        a = _mm512_shuffle_i64x2(o[0], o[1], 0x44);
        c = _mm512_shuffle_i64x2(o[2], o[3], 0x44);
        e = _mm512_shuffle_i64x2(o[0], o[1], 0xee);
        f = _mm512_shuffle_i64x2(o[2], o[3], 0xee);
        out[b].py[0] = _mm512_xor_si512(fl, _mm512_permutexvar_epi8(gp,
                           _mm512_shuffle_i64x2(a, c, 0x88)));
        out[b].py[1] = _mm512_xor_si512(fl, _mm512_permutexvar_epi8(gp,
                           _mm512_shuffle_i64x2(a, c, 0xdd)));
        out[b].py[2] = _mm512_xor_si512(fl, _mm512_permutexvar_epi8(gp,
                           _mm512_shuffle_i64x2(e, f, 0x88)));
        out[b].py[3] = _mm512_xor_si512(fl, _mm512_permutexvar_epi8(gp,
                           _mm512_shuffle_i64x2(e, f, 0xdd)));
    }
}


static void
llm_iq3p_prep(const char *x, int64_t nb, llm_iq3p_t *out)
{
    llm_iq3p_prep_any(0, x, nb, out);
}


static void
llm_iq3p_prep_u(const char *x, int64_t nb, llm_iq3p_t *out)
{
    llm_iq3p_prep_any(1, x, nb, out);
}


/* The plane of 64 indices x from the 4 x 64 bytes tab (top bit in hi). */
LLM_INLINE __m512i
llm_iq3p_plane(const uint8_t *tab, __m512i x, __mmask64 hi)
{
    const __m512i  *t = (const __m512i *) (const void *) tab;

    return _mm512_mask_blend_epi8(hi, _mm512_permutex2var_epi8(t[0], x, t[1]),
                                  _mm512_permutex2var_epi8(t[2], x, t[3]));
}


/* One super-block unpacked: the planes (signed for U), the masks, the
 * lanes' 2 ls + 1, -128 x the signed weights' sum per lane (U), d_w. */
typedef struct {
    __m512i   g[4];
    __m512i   sc;
    __m512i   nbias;
    uint64_t  sg[4] __attribute__((aligned(32)));
    float     dw;
} llm_iq3p_w_t;


LLM_INLINE void
llm_iq3p_unpack(const int U, const llm_block_iq3_xxs *a, llm_iq3p_w_t *o)
{
    const __m512i    gp = _mm512_load_si512((const void *) llm_iq3p_group);
    /* code c of qword k at byte c: bits 7 c (c < 4), 32 + 7 (c - 4) */
    const __m256i    sh = _mm256_set1_epi64x(0x352e2720150e0700ll);
    /* byte 2 p + h selects bit 4 h + p; 0x7f: the parity of bits 0..6 */
    const __m256i    sel = _mm256_set1_epi64x(0x7f08400420021001ll);
    /* byte 8 p + 2 k + h <- byte 8 k + 2 p + h */
    const __m256i    gat = _mm256_setr_epi8(
                         0, 1, 8, 9, 16, 17, 24, 25, 2, 3, 10, 11, 18, 19,
                         26, 27, 4, 5, 12, 13, 20, 21, 28, 29, 6, 7, 14, 15,
                         22, 23, 30, 31);
    /* lane m: sub-block 2 (m / 4) + 1 (m even), 2 (m / 4) (m odd) */
    const __m512i    sbi = _mm512_setr_epi32(1, 0, 1, 0, 3, 2, 3, 2,
                                             5, 4, 5, 4, 7, 6, 7, 6);
    const __m512i    xi = _mm512_permutexvar_epi8(gp,
                              _mm512_loadu_si512((const void *) a->qs));
    const __mmask64  hi = _mm512_movepi8_mask(xi);
    const __m256i    sw = _mm256_loadu_si256((const void *) a->sas);
    const __m256i    tr = _mm256_gf2p8affine_epi64_epi8(sel,
                              _mm256_multishift_epi64_epi8(sh, sw), 0);

    /* lanes of sub-block j: (word j >> 27) | 1 = 2 ls_j + 1 */
    o->sc = _mm512_permutexvar_epi32(sbi, _mm512_castsi256_si512(
                _mm256_or_si256(_mm256_srli_epi32(sw, 27),
                                _mm256_set1_epi32(1))));
    o->dw = llm_h2f_hw(a->d);
    _mm256_store_si256((void *) o->sg, _mm256_permutexvar_epi8(gat, tr));
    /* the masks loaded by kmovq from memory: gcc otherwise takes the
     * qwords out through general registers (6 more vector ops) */
    __asm__ ("" : "+m" (o->sg));
    o->g[0] = llm_iq3p_plane(llm_iq3x_tab[0], xi, hi);
    o->g[1] = llm_iq3p_plane(llm_iq3x_tab[1], xi, hi);
    o->g[2] = llm_iq3p_plane(llm_iq3x_tab[2], xi, hi);
    o->g[3] = llm_iq3p_plane(llm_iq3x_tab[3], xi, hi);
    if (U) {
        /* the signed weights, and -128 x their sum per lane */
        __m512i  bias = _mm512_setzero_si512();

#pragma GCC unroll 4
        for (int p = 0; p < 4; p++) {
            o->g[p] = _mm512_mask_sub_epi8(o->g[p],
                          _load_mask64((__mmask64 *) &o->sg[p]),
                          _mm512_setzero_si512(), o->g[p]);
            bias = _mm512_dpbusd_epi32(bias,
                       _mm512_set1_epi8((char) 0x80), o->g[p]);
        }
        o->nbias = _mm512_sub_epi32(_mm512_setzero_si512(), bias);
    }
}


/* IQ3_S's plane of 64 9-bit indices: x the low 8 bits (bit 7 in b7),
 * b8 the 9th. */
LLM_INLINE __m512i
llm_iq3s_plane(const uint8_t *tab, __m512i x, __mmask64 b7, __mmask64 b8)
{
    const __m512i  *t = (const __m512i *) (const void *) tab;
    __m512i         lo, up;

    lo = _mm512_mask_blend_epi8(b7, _mm512_permutex2var_epi8(t[0], x, t[1]),
                                _mm512_permutex2var_epi8(t[2], x, t[3]));
    up = _mm512_mask_blend_epi8(b7, _mm512_permutex2var_epi8(t[4], x, t[5]),
                                _mm512_permutex2var_epi8(t[6], x, t[7]));
    return _mm512_mask_blend_epi8(b8, lo, up);
}


/* An IQ3_S block's 64 high bits as a mask: qh sits at byte 66 of the
 * block, so a copy, not a 64-bit load through a cast (unaligned: UB). */
static inline __mmask64
llm_iq3s_qh(const llm_block_iq3_s *a)
{
    uint64_t  v;

    memcpy(&v, a->qh, sizeof(v));
    return _cvtu64_mask64(v);
}

/*
 * The same unpacked form of an IQ3_S super-block: the planes from the
 * 512-entry grid (four vpermi2b and three blends each, the 9th index
 * bits, bit k of qh[j] for group 8 j + k, moved to the positions' order
 * by vpmovm2b, vpermb, vpmovb2m), the explicit sign bytes through the
 * same bit transpose (bit 7 as it is), the lanes' 2 ls + 1 from the
 * scale nibbles.
 */
LLM_INLINE void
llm_iq3p_unpack_s(const int U, const llm_block_iq3_s *a, llm_iq3p_w_t *o)
{
    const __m512i    gp = _mm512_load_si512((const void *) llm_iq3p_group);
    /* byte 2 p + h selects bit 4 h + p */
    const __m256i    sel = _mm256_set1_epi64x((long long)
                                              0x8008400420021001ull);
    /* byte 8 p + 2 k + h <- byte 8 k + 2 p + h */
    const __m256i    gat = _mm256_setr_epi8(
                         0, 1, 8, 9, 16, 17, 24, 25, 2, 3, 10, 11, 18, 19,
                         26, 27, 4, 5, 12, 13, 20, 21, 28, 29, 6, 7, 14, 15,
                         22, 23, 30, 31);
    const __m512i    sbi = _mm512_setr_epi32(1, 0, 1, 0, 3, 2, 3, 2,
                                             5, 4, 5, 4, 7, 6, 7, 6);
    const __m512i    xi = _mm512_permutexvar_epi8(gp,
                              _mm512_loadu_si512((const void *) a->qs));
    const __mmask64  b7 = _mm512_movepi8_mask(xi);
    const __mmask64  b8 = _mm512_movepi8_mask(_mm512_permutexvar_epi8(gp,
                              _mm512_movm_epi8(llm_iq3s_qh(a))));
    const __m256i    tr = _mm256_gf2p8affine_epi64_epi8(sel,
                              _mm256_loadu_si256((const void *) a->signs), 0);
    uint32_t         sc4;
    __m256i          ls;

    memcpy(&sc4, a->scales, 4);
    /* nibble j of the 4 scale bytes is sub-block j's ls */
    ls = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32((int) sc4),
                              _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28)),
                          _mm256_set1_epi32(15));
    o->sc = _mm512_permutexvar_epi32(sbi, _mm512_castsi256_si512(
                _mm256_or_si256(_mm256_add_epi32(ls, ls),
                                _mm256_set1_epi32(1))));
    o->dw = llm_h2f_hw(a->d);
    _mm256_store_si256((void *) o->sg, _mm256_permutexvar_epi8(gat, tr));
    __asm__ ("" : "+m" (o->sg));
    o->g[0] = llm_iq3s_plane(llm_iq3s_tab[0], xi, b7, b8);
    o->g[1] = llm_iq3s_plane(llm_iq3s_tab[1], xi, b7, b8);
    o->g[2] = llm_iq3s_plane(llm_iq3s_tab[2], xi, b7, b8);
    o->g[3] = llm_iq3s_plane(llm_iq3s_tab[3], xi, b7, b8);
    if (U) {
        __m512i  bias = _mm512_setzero_si512();

#pragma GCC unroll 4
        for (int p = 0; p < 4; p++) {
            o->g[p] = _mm512_mask_sub_epi8(o->g[p],
                          _load_mask64((__mmask64 *) &o->sg[p]),
                          _mm512_setzero_si512(), o->g[p]);
            bias = _mm512_dpbusd_epi32(bias,
                       _mm512_set1_epi8((char) 0x80), o->g[p]);
        }
        o->nbias = _mm512_sub_epi32(_mm512_setzero_si512(), bias);
    }
}


/*
 * One weight row's C results against C prepared columns.  Software-
 * pipelined: super-block b + 1 is unpacked before b's columns run, so
 * that its long chain (load, lookups, 4 vpdpbusd, vpmulld, convert,
 * FMA: ~40 cycles) overlaps the next one's (in program order they
 * filled the scheduler; llm-kbench in cache ~10% faster).
 */
LLM_INLINE void
llm_iq3p_rows_any(const int S, const int U, const int C, int64_t nb,
    const char *w, const char *x, size_t xs, const llm_iq3p_t *pre, float *y,
    size_t ldy)
{
    const size_t              bs = S ? sizeof(llm_block_iq3_s)
                                     : sizeof(llm_block_iq3_xxs);
    __m512                    acc[LLM_T_COLS];
    llm_iq3p_w_t              u[2];
    int64_t                   b;
    int                       c, p;

#pragma GCC unroll 8
    for (c = 0; c < C; c++) {
        acc[c] = _mm512_setzero_ps();
    }
    if (S) {
        llm_iq3p_unpack_s(U, (const llm_block_iq3_s *) (const void *) w,
                          &u[0]);
    } else {
        llm_iq3p_unpack(U, (const llm_block_iq3_xxs *) (const void *) w,
                        &u[0]);
    }
    for (b = 0; b < nb; b++) {
        const llm_iq3p_w_t  *cu = &u[b & 1];
        const char          *nx = w + (b + 1) * bs;

        /* both lines a super-block may span, ~1.5 KB ahead */
        _mm_prefetch(w + b * bs + LLM_IQ3P_PF, _MM_HINT_T0);
        _mm_prefetch(w + (b + 1) * bs + LLM_IQ3P_PF - 1, _MM_HINT_T0);
        if (b + 1 < nb && S) {
            llm_iq3p_unpack_s(U, (const llm_block_iq3_s *) (const void *) nx,
                              &u[(b + 1) & 1]);
        } else if (b + 1 < nb) {
            llm_iq3p_unpack(U, (const llm_block_iq3_xxs *) (const void *) nx,
                            &u[(b + 1) & 1]);
        }
#pragma GCC unroll 8
        for (c = 0; c < C; c++) {
            const llm_iq3p_t      *pc = pre + c * nb + b;
            const llm_block_q8_K  *q8 = (const llm_block_q8_K *)
                                        (const void *) (x + c * xs) + b;
            __m512i                isum = U ? cu->nbias
                                            : _mm512_setzero_si512();

#pragma GCC unroll 4
            for (p = 0; p < 4; p++) {
                isum = U ? _mm512_dpbusd_epi32(isum, pc->py[p], cu->g[p])
                         : _mm512_dpbusd_epi32(isum, cu->g[p],
                               _mm512_mask_sub_epi8(pc->py[p],
                                   _load_mask64((__mmask64 *) &cu->sg[p]),
                                   _mm512_setzero_si512(), pc->py[p]));
            }
            acc[c] = _mm512_fmadd_ps(
                         _mm512_cvtepi32_ps(_mm512_mullo_epi32(isum,
                                                               cu->sc)),
                         _mm512_set1_ps(cu->dw * q8->d), acc[c]);
        }
    }
#pragma GCC unroll 8
    for (c = 0; c < C; c++) {
        /* IQ3_XXS's (0.5 + ls) / 2 = (2 ls + 1) / 4 */
        y[c * ldy] = S ? _mm512_reduce_add_ps(acc[c])
                       : 0.25f * _mm512_reduce_add_ps(acc[c]);
    }
}


/*
 * A type's plane kernels (S: IQ3_S, else IQ3_XXS): the one-column rows,
 * the activations signed by the masks (4 vpsubb a column); the several-
 * column rows_u, the weights signed once (4 vpsubb a row) against the
 * columns as y + 128, unsigned, minus 128 x the signed weights' sum (4
 * more vpdpbusd a row, none a column: the same int32 sums, so the same
 * bits as one column); their drivers, each falling back to LONGER (rows
 * past the stack), picked by the column count; and the vec_dot on top.
 */
#define LLM_IQ3P_GEMMS(T, S, LONGER)                                         \
LLM_INLINE void                                                              \
llm_##T##_rows(const int C, int64_t nb, const char *w, size_t ws,            \
    const char *x, size_t xs, const llm_iq3p_t *pre, float *y, size_t ldy)   \
{                                                                            \
    (void) ws;                                                               \
    llm_iq3p_rows_any(S, 0, C, nb, w, x, xs, pre, y, ldy);                   \
}                                                                            \
                                                                             \
LLM_INLINE void                                                              \
llm_##T##_rows_u(const int C, int64_t nb, const char *w, size_t ws,          \
    const char *x, size_t xs, const llm_iq3p_t *pre, float *y, size_t ldy)   \
{                                                                            \
    (void) ws;                                                               \
    llm_iq3p_rows_any(S, 1, C, nb, w, x, xs, pre, y, ldy);                   \
}                                                                            \
                                                                             \
LLM_T_DRIVER(llm_gemm_##T##_p1, llm_iq3p_t, LLM_QK_K, LLM_IQ3P_MAX,          \
             LLM_IQ3P_UNITS, llm_iq3p_prep, llm_##T##_rows, LONGER, 1, 8)    \
                                                                             \
LLM_T_DRIVER(llm_gemm_##T##_pu, llm_iq3p_t, LLM_QK_K, LLM_IQ3P_MAX,          \
             LLM_IQ3P_UNITS, llm_iq3p_prep_u, llm_##T##_rows_u, LONGER, 1,   \
             8)                                                              \
                                                                             \
static void                                                                  \
llm_gemm_##T##_plane(int64_t n, int64_t nr, int64_t nc, const void *w,       \
    size_t ws, const void *x, size_t xs, float *y, size_t ldy)               \
{                                                                            \
    if (nc == 1) {                                                           \
        llm_gemm_##T##_p1(n, nr, nc, w, ws, x, xs, y, ldy);                  \
    } else {                                                                 \
        llm_gemm_##T##_pu(n, nr, nc, w, ws, x, xs, y, ldy);                  \
    }                                                                        \
}                                                                            \
                                                                             \
static void                                                                  \
llm_dot_##T##_plane(int64_t n, float *s, const void *w, const void *x)       \
{                                                                            \
    llm_gemm_##T##_plane(n, 1, 1, w, 0, x, 0, s, 1);                         \
}

LLM_IQ3P_GEMMS(iq3_xxs, 0, llm_gemm_iq3_xxs_vbmi)


/* IQ3_S: rows past the stack a loop of the vec_dot (iq3_avx512.c's)
 * this file's replaced. */
static void
llm_gemm_iq3_s_long(int64_t n, int64_t nr, int64_t nc, const void *w,
    size_t ws, const void *x, size_t xs, float *y, size_t ldy)
{
    for (int64_t r = 0; r < nr; r++) {
        for (int64_t c = 0; c < nc; c++) {
            llm_iq3s_long_dot(n, &y[c * ldy + r], (const char *) w + r * ws,
                              (const char *) x + c * xs);
        }
    }
}


LLM_IQ3P_GEMMS(iq3_s, 1, llm_gemm_iq3_s_long)


/* The kernels into k (the caller checked the CPU has VBMI). */
void
llm_kernels_init_iq3_vbmi(llm_kernels_t *k)
{
    llm_iq3x_init();
    if (!__builtin_cpu_supports("gfni")) {
        k->vec_dot[LLM_TYPE_IQ3_XXS] = llm_dot_iq3_xxs_vbmi;
        k->gemm[LLM_TYPE_IQ3_XXS] = llm_gemm_iq3_xxs_vbmi;
        return;
    }
    llm_iq3p_init();
    k->vec_dot[LLM_TYPE_IQ3_XXS] = llm_dot_iq3_xxs_plane;
    k->gemm[LLM_TYPE_IQ3_XXS] = llm_gemm_iq3_xxs_plane;
    llm_iq3s_long_dot = k->vec_dot[LLM_TYPE_IQ3_S];
    k->vec_dot[LLM_TYPE_IQ3_S] = llm_dot_iq3_s_plane;
    k->gemm[LLM_TYPE_IQ3_S] = llm_gemm_iq3_s_plane;
}
