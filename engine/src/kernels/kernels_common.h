/*
 * Internal to quant.c and kernels_*.c: ggml's block layouts, inline
 * scalar helpers and the kernel table the SIMD files fill in.
 *
 * Layouts are byte-for-byte ggml's (ggml-common.h), since GGUF files store
 * them raw.  QK_K = 256 ("super-blocks").  Sizes are asserted below; the
 * bits per weight figure includes the scales.
 */

#ifndef LLM_KERNELS_COMMON_H
#define LLM_KERNELS_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "quant.h"

#define LLM_QK      32      /* Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1 */
#define LLM_QK_K    256     /* K-quants */

/* Q4_0: 4.5 bpw; w = d * (q - 8), q in 0..15; low nibbles hold
 * elements 0..15, high nibbles 16..31. */
typedef struct __attribute__((packed)) {
    uint16_t  d;                    /* fp16 */
    uint8_t   qs[LLM_QK / 2];
} llm_block_q4_0;

/* Block b of 16 Q4_0 rows, interleaved (LLM_TYPE_Q4_0_R16): the 288
 * bytes of the 16 blocks; lane r of a 64-byte vector is row r. */
typedef struct {
    uint16_t  d[16];                /* row r's scale */
    uint8_t   qs[4][64];            /* qs[i][4r + j] = row r's qs[4i + j] */
} llm_block_q4_0x16;

/* Block b of 16 Q8_0 rows, interleaved (LLM_TYPE_Q8_0_R16): the 544
 * bytes of the 16 blocks, each quant stored + 128 (an unsigned byte, as
 * vpdpbusd takes its first operand); lane r of a 64-byte vector is row
 * r. */
typedef struct {
    uint16_t  d[16];                /* row r's scale */
    uint8_t   qs[8][64];            /* qs[i][4r + j] = row r's qs[4i + j]
                                     * + 128 */
} llm_block_q8_0x16;

/* Q4_1: 5 bpw; w = d * q + m, q in 0..15, nibbles as Q4_0. */
typedef struct __attribute__((packed)) {
    uint16_t  d, m;
    uint8_t   qs[LLM_QK / 2];
} llm_block_q4_1;

/* Q5_0: 5.5 bpw; w = d * (q - 16), q in 0..31: nibbles as Q4_0, the
 * 5th bit of element j is bit j of qh (read as a little-endian u32). */
typedef struct __attribute__((packed)) {
    uint16_t  d;
    uint8_t   qh[4];
    uint8_t   qs[LLM_QK / 2];
} llm_block_q5_0;

/* Q5_1: 6 bpw; w = d * q + m, q in 0..31, bits as Q5_0. */
typedef struct __attribute__((packed)) {
    uint16_t  d, m;
    uint8_t   qh[4];
    uint8_t   qs[LLM_QK / 2];
} llm_block_q5_1;

/* Q8_0: 8.5 bpw; w = d * q, q in -127..127. */
typedef struct __attribute__((packed)) {
    uint16_t  d;
    int8_t    qs[LLM_QK];
} llm_block_q8_0;

/* Q8_1: activation type of Q4_1/Q5_1; w = d * q, s = d * sum(q). */
typedef struct __attribute__((packed)) {
    uint16_t  d, s;
    int8_t    qs[LLM_QK];
} llm_block_q8_1;

/* Q2_K: 2.625 bpw; 16 sub-blocks of 16, scales[i] = scale | min << 4
 * (quant_k23.c has the bit layout). */
typedef struct __attribute__((packed)) {
    uint8_t   scales[LLM_QK_K / 16];
    uint8_t   qs[LLM_QK_K / 4];
    uint16_t  d, dmin;
} llm_block_q2_K;

/* Q3_K: 3.4375 bpw; 2 bits in qs, the 3rd in hmask, 16 six-bit scales
 * in scales[12] (quant_k23.c has the bit layout). */
typedef struct __attribute__((packed)) {
    uint8_t   hmask[LLM_QK_K / 8];
    uint8_t   qs[LLM_QK_K / 4];
    uint8_t   scales[12];
    uint16_t  d;
} llm_block_q3_K;

/*
 * Q4_K: 4.5 bpw.  8 sub-blocks of 32, each with a 6-bit scale and a 6-bit
 * min packed into scales[12]; w = d * sc * q - dmin * m, q in 0..15.  In
 * each 64-element chunk, qs[32] holds the first 32 in low nibbles and the
 * next 32 in high nibbles.
 */
typedef struct __attribute__((packed)) {
    uint16_t  d, dmin;
    uint8_t   scales[12];
    uint8_t   qs[LLM_QK_K / 2];
} llm_block_q4_K;

/* Q5_K: 5.5 bpw; Q4_K plus a fifth bit per weight in qh (bit 2j / 2j+1
 * of qh[l] for chunk j's low / high half). */
typedef struct __attribute__((packed)) {
    uint16_t  d, dmin;
    uint8_t   scales[12];
    uint8_t   qh[LLM_QK_K / 8];
    uint8_t   qs[LLM_QK_K / 2];
} llm_block_q5_K;

/* Q6_K: 6.5625 bpw.  16 sub-blocks of 16 with int8 scales;
 * w = d * sc * (q - 32), q in 0..63 from 4 low bits (ql) + 2 high (qh). */
typedef struct __attribute__((packed)) {
    uint8_t   ql[LLM_QK_K / 2];
    uint8_t   qh[LLM_QK_K / 4];
    int8_t    scales[LLM_QK_K / 16];
    uint16_t  d;
} llm_block_q6_K;

/* Q8_K: activation type of the K-quants; float scale, and the sums of
 * each group of 16 quants (bsums) that the min terms need. */
typedef struct __attribute__((packed)) {
    float     d;
    int8_t    qs[LLM_QK_K];
    int16_t   bsums[LLM_QK_K / 16];
} llm_block_q8_K;

_Static_assert(sizeof(llm_block_q4_0) == 2 + 16, "q4_0 size");
_Static_assert(sizeof(llm_block_q4_0x16) == 16 * sizeof(llm_block_q4_0),
               "q4_0x16 size");
_Static_assert(sizeof(llm_block_q8_0x16) == 16 * sizeof(llm_block_q8_0),
               "q8_0x16 size");
_Static_assert(sizeof(llm_block_q4_1) == 4 + 16, "q4_1 size");
_Static_assert(sizeof(llm_block_q5_0) == 2 + 4 + 16, "q5_0 size");
_Static_assert(sizeof(llm_block_q5_1) == 4 + 4 + 16, "q5_1 size");
_Static_assert(sizeof(llm_block_q8_0) == 2 + 32, "q8_0 size");
_Static_assert(sizeof(llm_block_q8_1) == 4 + 32, "q8_1 size");
_Static_assert(sizeof(llm_block_q2_K) == 16 + 64 + 4, "q2_K size");
_Static_assert(sizeof(llm_block_q3_K) == 32 + 64 + 12 + 2, "q3_K size");

/*
 * Super-block b of 16 Q2_K rows, interleaved (LLM_TYPE_Q2_K_R16): lane r
 * of a 64-byte vector is row r.  sc[j][4r + i] = row r's scales[4j + i],
 * qs[i][4r + j] = row r's qs[4i + j] (so bits 2k..2k+1 of vector 8h + 4u
 * + m are elements 4m..4m+3 of sub-block 8h + 2k + u of every row).
 */
typedef struct {
    uint8_t   sc[4][64];
    uint8_t   qs[16][64];
    uint16_t  d[16], dmin[16];      /* row r's */
} llm_block_q2_Kx16;

/*
 * Super-block b of 16 Q3_K rows, interleaved (LLM_TYPE_Q3_K_R16), in the
 * order the kernel reads it: the scales as Q2_K's (sc[i][4r + j] = row
 * r's scales[4i + j]); per (h, u) the qs vectors 8h + 4u + m as Q2_K's,
 * then the hmask bits of sub-blocks 8h + 2k + u regrouped as 64-bit
 * masks, hm[k][m] bit 4r + j the third bit of element 4m + j of the
 * sub-block of row r (one mask per unpacked qs vector); the d last.
 */
typedef struct {
    uint8_t   sc[3][64];
    struct {
        uint8_t   qs[4][64];
        uint64_t  hm[4][4];
    } g[4];                         /* g[2h + u] */
    uint16_t  d[16];                /* row r's */
} llm_block_q3_Kx16;

/*
 * Super-block b of 16 Q4_K rows, interleaved (LLM_TYPE_Q4_K_R16), in the
 * order the kernel reads it: d and dmin, sc[i][4r + j] = row r's
 * scales[4i + j], qs[i][4r + j] = row r's qs[4i + j] (so the low nibbles
 * of vectors 8p.. 8p + 7 are sub-block 2p of every row, the high ones
 * 2p + 1).
 */
typedef struct {
    uint16_t  d[16], dmin[16];      /* row r's */
    uint8_t   sc[3][64];
    uint8_t   qs[32][64];
} llm_block_q4_Kx16;

/*
 * Super-block b of 16 Q6_K rows, interleaved (LLM_TYPE_Q6_K_R16), in the
 * order the kernel reads it: d, sc[i][4r + j] = row r's scales[4i + j],
 * then per half h and u the bytes of elements 128 h + 32 g + 16 u + 4 k +
 * j (sub-block 8 h + 2 g + u): g[2h + u].qh[k][4r + j] = row r's qh[32 h
 * + 16 u + 4 k + j] (the high bits of all four g) and g[2h + u].ql[4a +
 * k][4r + j] = row r's ql[64 h + 32 a + 16 u + 4 k + j] (the nibbles of
 * g = a and a + 2).
 */
typedef struct {
    uint16_t  d[16];                /* row r's */
    uint8_t   sc[4][64];
    struct {
        uint8_t   qh[4][64];
        uint8_t   ql[8][64];
    } g[4];
} llm_block_q6_Kx16;

_Static_assert(sizeof(llm_block_q2_Kx16) == 16 * sizeof(llm_block_q2_K),
               "q2_Kx16 size");
_Static_assert(sizeof(llm_block_q3_Kx16) == 16 * sizeof(llm_block_q3_K),
               "q3_Kx16 size");
_Static_assert(sizeof(llm_block_q4_K) == 4 + 12 + 128, "q4_K size");
_Static_assert(sizeof(llm_block_q4_Kx16) == 16 * sizeof(llm_block_q4_K),
               "q4_Kx16 size");
_Static_assert(sizeof(llm_block_q5_K) == 4 + 12 + 32 + 128, "q5_K size");
_Static_assert(sizeof(llm_block_q6_K) == 128 + 64 + 16 + 2, "q6_K size");
_Static_assert(sizeof(llm_block_q6_Kx16) == 16 * sizeof(llm_block_q6_K),
               "q6_Kx16 size");
_Static_assert(sizeof(llm_block_q8_K) == 4 + 256 + 32, "q8_K size");

/* quant_iq4.c, quant_mxfp4.c */

/*
 * IQ4_NL: 4.5 bpw; w = d * llm_iq4_kvalues[q], q in 0..15 an index into
 * the 16 non-linear levels; low nibbles hold elements 0..15, high nibbles
 * 16..31 (Q4_0's order).  Dotted with Q8_0.
 */
typedef struct __attribute__((packed)) {
    uint16_t  d;                    /* fp16 */
    uint8_t   qs[LLM_QK / 2];
} llm_block_iq4_nl;

/*
 * IQ4_XS: 4.25 bpw.  8 sub-blocks of 32 with 6-bit scales ls (low 4 bits
 * in scales_l, a nibble each, sub-block 2k in the low one; high 2 bits in
 * scales_h, bits 2j..2j+1 for sub-block j); w = d * (ls - 32) *
 * llm_iq4_kvalues[q], each sub-block's 16 qs bytes in IQ4_NL's nibble
 * order.  Dotted with Q8_K.
 */
typedef struct __attribute__((packed)) {
    uint16_t  d;                    /* fp16 */
    uint16_t  scales_h;
    uint8_t   scales_l[LLM_QK_K / 64];
    uint8_t   qs[LLM_QK_K / 2];
} llm_block_iq4_xs;

/*
 * MXFP4 (OCP microscaling FP4): 4.25 bpw; w = 2^(e - 128) *
 * llm_mxfp4_kvalues[q]: the table holds twice the E2M1 values so they are
 * integers, and the scale is half of E8M0's 2^(e - 127).  Q4_0's nibble
 * order.  Dotted with Q8_0.
 */
typedef struct __attribute__((packed)) {
    uint8_t   e;                    /* E8M0 exponent, bias 127 */
    uint8_t   qs[LLM_QK / 2];
} llm_block_mxfp4;

_Static_assert(sizeof(llm_block_iq4_nl) == 2 + 16, "iq4_nl size");
_Static_assert(sizeof(llm_block_iq4_xs) == 2 + 2 + 4 + 128, "iq4_xs size");
_Static_assert(sizeof(llm_block_mxfp4) == 1 + 16, "mxfp4 size");

/* Block b of 16 MXFP4 rows, interleaved (LLM_TYPE_MXFP4_R16) as Q4_0's
 * are (IQ4_NL_R16 takes llm_block_q4_0x16: its blocks are Q4_0's bytes). */
typedef struct {
    uint8_t   e[16];                /* row r's exponent */
    uint8_t   qs[4][64];            /* qs[i][4r + j] = row r's qs[4i + j] */
} llm_block_mxfp4x16;

_Static_assert(sizeof(llm_block_mxfp4x16) == 16 * sizeof(llm_block_mxfp4),
               "mxfp4x16 size");

/* Super-block b of 16 IQ4_XS rows, interleaved (LLM_TYPE_IQ4_XS_R16): per
 * row its d, scales_h and scales_l as they were, then per sub-block j the
 * 16 rows' 16 quant bytes 4 at a time, lane r of a 64-byte vector row r. */
typedef struct {
    uint16_t  d[16];                /* row r's scale */
    uint16_t  scales_h[16];         /* row r's scales_h */
    uint8_t   scales_l[16][4];      /* row r's scales_l */
    uint8_t   qs[8][4][64];         /* qs[j][i][4r + k] = row r's
                                       qs[16 j + 4 i + k] */
} llm_block_iq4_xsx16;

_Static_assert(sizeof(llm_block_iq4_xsx16) == 16 * sizeof(llm_block_iq4_xs),
               "iq4_xsx16 size");

/* The levels of a 4-bit index (tables from the formats' definitions). */
extern const int8_t  llm_iq4_kvalues[16];
extern const int8_t  llm_mxfp4_kvalues[16];

/* 2^(e - 128) exactly, subnormal for e < 2 (ggml's
 * ggml_e8m0_to_fp32_half: e = 255 is 2^127, not NaN). */
static inline float
llm_mxfp4_e8m0_half(uint8_t e)
{
    uint32_t  u = e < 2 ? 0x00200000u << e : (uint32_t) (e - 1) << 23;
    float     f;

    memcpy(&f, &u, 4);
    return f;
}

/* Scalar references: dequantize nb blocks; dot over n values with the
 * activation type of llm_type_vec_dot_type (quant.c's table slots). */
void llm_iq4_nl_dequant(const void *src, float *y, int64_t nb);
void llm_iq4_xs_dequant(const void *src, float *y, int64_t nb);
void llm_mxfp4_dequant(const void *src, float *y, int64_t nb);
void llm_iq4_nl_dot(int64_t n, float *s, const void *w, const void *x);
void llm_iq4_xs_dot(int64_t n, float *s, const void *w, const void *x);
void llm_mxfp4_dot(int64_t n, float *s, const void *w, const void *x);
/* quant_r16.c: the scalar references of the regrouped IQ4_NL, MXFP4 and
 * IQ4_XS gemm (the llm_gemm_fn signature below). */
void llm_gemm_iq4_nl_r16_ref(int64_t n, int64_t nr, int64_t nc,
    const void *w, size_t ws, const void *x, size_t xs, float *y,
    size_t ldy);
void llm_gemm_mxfp4_r16_ref(int64_t n, int64_t nr, int64_t nc,
    const void *w, size_t ws, const void *x, size_t xs, float *y,
    size_t ldy);
void llm_gemm_iq4_xs_r16_ref(int64_t n, int64_t nr, int64_t nc,
    const void *w, size_t ws, const void *x, size_t xs, float *y,
    size_t ldy);
/* quant_r16.c: Q4_K_R16 x Q8_K: per row and super-block the exact sums
 * isum = sum_j sc_j (q_j . y_j) and msum = sum_j m_j (bsums of j), then
 * acc = fma(-msum, dmin_w d_x, acc) and acc = fma(isum, d_w d_x, acc). */
void llm_gemm_q4_K_r16_ref(int64_t n, int64_t nr, int64_t nc,
    const void *w, size_t ws, const void *x, size_t xs, float *y,
    size_t ldy);
/* quant_r16.c: Q6_K_R16 x Q8_K: per row and super-block the exact sum
 * sum_s sc_s (q_s . y_s), q in -32..31, then acc = fma(sum, d_w d_x,
 * acc). */
void llm_gemm_q6_K_r16_ref(int64_t n, int64_t nr, int64_t nc,
    const void *w, size_t ws, const void *x, size_t xs, float *y,
    size_t ldy);
/* dispatch.c: the same as llm_repack_group_q4_K for Q6_K. */
void llm_repack_group_q6_K(int64_t b0, int64_t nb, size_t rb, int nrow,
    const char *src, char *dst);
/* dispatch.c: rows g * 16 .. g * 16 + 15 of Q4_K rows (rb bytes each)
 * from src into the Q4_K_R16 super-blocks [b0, b0 + nb) at dst; rows
 * past nrow (< 16) are zero. */
void llm_repack_group_q4_K(int64_t b0, int64_t nb, size_t rb, int nrow,
    const char *src, char *dst);
/* quant_r16.c: Q8_0_R16 x Q8_0 the same way (per row the exact integer
 * sum of a block, then one fma per block). */
void llm_gemm_q8_0_r16_ref(int64_t n, int64_t nr, int64_t nc,
    const void *w, size_t ws, const void *x, size_t xs, float *y,
    size_t ldy);
/* quant_r16.c: the same for Q2_K_R16 and Q3_K_R16: per row and
 * super-block the exact integer sums (llm_q2_K_isum, llm_q3_K_isum), then
 * acc = fma(isum, d_w d_x, acc) (Q2_K: and acc = fma(-msum, dmin_w d_x,
 * acc)), super-block after super-block, one rounding each. */
void llm_gemm_q2_K_r16_ref(int64_t n, int64_t nr, int64_t nc,
    const void *w, size_t ws, const void *x, size_t xs, float *y,
    size_t ldy);
void llm_gemm_q3_K_r16_ref(int64_t n, int64_t nr, int64_t nc,
    const void *w, size_t ws, const void *x, size_t xs, float *y,
    size_t ldy);

/* quant_iq1.c, iq1_grids.c */

/*
 * IQ1_S: 1.5625 bpw.  8 sub-blocks of 32, each 4 groups of 8 weights;
 * group l of sub-block ib is grid point qs[4 ib + l] | (qh[ib] >> 3 l
 * & 7) << 8 (llm_iq1_grid), and w = d * (2 (qh[ib] >> 12 & 7) + 1) *
 * (point + delta), delta = -1/8 if qh[ib] bit 15 is set, else +1/8.
 * Dotted with Q8_K.
 */
typedef struct __attribute__((packed)) {
    uint16_t  d;                    /* fp16 */
    uint8_t   qs[LLM_QK_K / 8];
    uint16_t  qh[LLM_QK_K / 32];
} llm_block_iq1_s;

/*
 * IQ1_M: 1.75 bpw, no separate scale field.  Group l (0..3) of sub-block
 * ib is grid point qs[4 ib + l] | (qh[2 ib + l / 2] >> 4 (l % 2) & 7)
 * << 8, its delta -1/8 if bit 3 of that nibble is set, else +1/8.  The 8
 * scales bytes read as 4 little-endian uint16 sc[k]: 3-bit scales of the
 * halves of 16 (sub-block 2k + h, half s at bit 6 h + 3 s), and the fp16
 * d spread over their top nibbles (sc[0] >> 12 the lowest).  w = d *
 * (2 scale + 1) * (point + delta).  Dotted with Q8_K.
 */
typedef struct __attribute__((packed)) {
    uint8_t   qs[LLM_QK_K / 8];
    uint8_t   qh[LLM_QK_K / 16];
    uint8_t   scales[LLM_QK_K / 32];
} llm_block_iq1_m;

_Static_assert(sizeof(llm_block_iq1_s) == 2 + 32 + 16, "iq1_s size");
_Static_assert(sizeof(llm_block_iq1_m) == 32 + 16 + 8, "iq1_m size");

/* The 2048 grid points, point i as int8_t[8] (iq1_grids.c). */
extern const uint64_t  llm_iq1_grid[2048];

/* IQ1_M's fp16 d from the top nibbles of its 4 scale words (the lowest
 * in word 0). */
static inline uint16_t
llm_iq1_m_d(const uint8_t *scales)
{
    return (uint16_t) (scales[1] >> 4 | (scales[3] & 0xf0)
                       | (scales[5] >> 4) << 8 | (scales[7] & 0xf0) << 8);
}

/* Scalar references (quant.c's table slots). */
void llm_iq1_s_dequant(const void *src, float *y, int64_t nb);
void llm_iq1_m_dequant(const void *src, float *y, int64_t nb);
void llm_iq1_s_dot(int64_t n, float *s, const void *w, const void *x);
void llm_iq1_m_dot(int64_t n, float *s, const void *w, const void *x);

/* quant_iq2.c, iq2_grids.c */

/*
 * IQ2_XXS: 2.0625 bpw.  Per 32 weights two uint32 (qs[4 ib..4 ib + 3]):
 * the first holds 4 grid indices (a byte per group of 8 into
 * llm_iq2xxs_grid), the second 4 x 7 sign bits (llm_iq2_signs) and the
 * 4-bit scale s in bits 28..31; w = d * (0.5 + s) / 4 * +-grid byte.
 */
typedef struct __attribute__((packed)) {
    uint16_t  d;                    /* fp16 */
    uint16_t  qs[LLM_QK_K / 8];
} llm_block_iq2_xxs;

/*
 * IQ2_XS: 2.3125 bpw.  Per group of 8 a uint16: 9-bit index into
 * llm_iq2xs_grid, 7 sign bits above it; a 4-bit scale per 16 weights
 * (scales[ib]: low nibble the first 16 of the 32, high the next).
 */
typedef struct __attribute__((packed)) {
    uint16_t  d;                    /* fp16 */
    uint16_t  qs[LLM_QK_K / 8];
    uint8_t   scales[LLM_QK_K / 32];
} llm_block_iq2_xs;

/*
 * IQ2_S: 2.5625 bpw.  qs[0..32): the low 8 bits of the 10-bit
 * llm_iq2s_grid index per group, qs[32..64): the group's 8 sign bits
 * (stored, no parity rule); qh[ib] bits 2l..2l+1 the index's top bits of
 * group l; scales as IQ2_XS.
 */
typedef struct __attribute__((packed)) {
    uint16_t  d;                    /* fp16 */
    uint8_t   qs[LLM_QK_K / 4];
    uint8_t   qh[LLM_QK_K / 32];
    uint8_t   scales[LLM_QK_K / 32];
} llm_block_iq2_s;

_Static_assert(sizeof(llm_block_iq2_xxs) == 2 + 64, "iq2_xxs size");
_Static_assert(sizeof(llm_block_iq2_xs) == 2 + 64 + 8, "iq2_xs size");
_Static_assert(sizeof(llm_block_iq2_s) == 2 + 64 + 8 + 8, "iq2_s size");

/* The grids (iq2_grids.c): byte j of an entry is weight j's magnitude. */
extern const uint64_t  llm_iq2xxs_grid[256];
extern const uint64_t  llm_iq2xs_grid[512];
extern const uint64_t  llm_iq2s_grid[1024];

/* The 8 sign bits of a 7-bit IQ2_XXS / IQ2_XS sign code k: bit 7 is the
 * parity of k (ggml's ksigns_iq2xs table, computed). */
static inline unsigned
llm_iq2_signs(unsigned k)
{
    return k | (unsigned) __builtin_parity(k) << 7;
}

/* llm_iq2_signs(k) as 8 bytes, 0xff where the sign is minus (iq2_grids.c,
 * computed at compile time): the SIMD kernels' sign masks. */
extern const uint64_t  llm_iq2_signs64[128];

/* The 10-bit grid index of group l (0..3) of IQ2_S sub-block ib. */
#define llm_iq2_s_index(b, ib, l)                                           \
    ((b)->qs[4 * (ib) + (l)] | ((b)->qh[ib] << (8 - 2 * (l)) & 0x300))

void llm_iq2_xxs_dequant(const void *src, float *y, int64_t nb);
void llm_iq2_xs_dequant(const void *src, float *y, int64_t nb);
void llm_iq2_s_dequant(const void *src, float *y, int64_t nb);
void llm_iq2_xxs_dot(int64_t n, float *s, const void *w, const void *x);
void llm_iq2_xs_dot(int64_t n, float *s, const void *w, const void *x);
void llm_iq2_s_dot(int64_t n, float *s, const void *w, const void *x);

/* quant_iq3.c, iq3_grids.c */

/*
 * IQ3_XXS: 3.0625 bpw.  Per 32-weight sub-block j: 8 grid indices in
 * qs[8j..8j+8) (each an entry of 4 magnitudes, llm_iq3xxs_grid), and
 * the little-endian word sas[4j..4j+4): bits 7l..7l+6 the signs of
 * weights 8l..8l+6 (the 8th sign, of weight 8l+7, makes the count of
 * minus signs even), bits 28..31 the scale ls; w = d * (0.5 + ls) / 2 *
 * magnitude * sign.  Dotted with Q8_K.
 */
typedef struct __attribute__((packed)) {
    uint16_t  d;                    /* fp16 */
    uint8_t   qs[LLM_QK_K / 4];
    uint8_t   sas[LLM_QK_K / 8];    /* scales and signs */
} llm_block_iq3_xxs;

/*
 * IQ3_S: 3.4375 bpw.  Per 32-weight sub-block j: 8 grid indices of 9 bits
 * (low 8 in qs[8j + k], bit 8 is bit k of qh[j]; llm_iq3s_grid), sign
 * bits signs[4j..4j+4) (bit i of the 32 negates weight i), 4-bit scale
 * ls (nibble j % 2 of scales[j / 2], low first); w = d * (1 + 2 ls) *
 * magnitude * sign.  Dotted with Q8_K.
 */
typedef struct __attribute__((packed)) {
    uint16_t  d;                    /* fp16 */
    uint8_t   qs[LLM_QK_K / 4];
    uint8_t   qh[LLM_QK_K / 32];
    uint8_t   signs[LLM_QK_K / 8];
    uint8_t   scales[LLM_QK_K / 64];
} llm_block_iq3_s;

_Static_assert(sizeof(llm_block_iq3_xxs) == 2 + 96, "iq3_xxs size");
_Static_assert(sizeof(llm_block_iq3_s) == 2 + 64 + 8 + 32 + 4, "iq3_s size");

/* The grids of the formats' definition (iq3_grids.c). */
extern const uint32_t  llm_iq3xxs_grid[256];
extern const uint32_t  llm_iq3s_grid[512];

void llm_iq3_xxs_dequant(const void *src, float *y, int64_t nb);
void llm_iq3_s_dequant(const void *src, float *y, int64_t nb);
void llm_iq3_xxs_dot(int64_t n, float *s, const void *w, const void *x);
void llm_iq3_s_dot(int64_t n, float *s, const void *w, const void *x);

/* Kernel signatures (the type is implied by the table slot). */
typedef void (*llm_vec_dot_fn)(int64_t n, float *s, const void *w,
    const void *x);
typedef void (*llm_gemm_fn)(int64_t n, int64_t nr, int64_t nc,
    const void *w, size_t w_stride, const void *x, size_t x_stride,
    float *y, size_t ldy);
typedef void (*llm_quant_fn)(const float *src, void *dst, int64_t n);

typedef struct {
    llm_vec_dot_fn  vec_dot[LLM_TYPE_COUNT];
    llm_gemm_fn     gemm[LLM_TYPE_COUNT];       /* NULL: loop of vec_dot */
    llm_quant_fn    quantize_act[LLM_TYPE_COUNT];
} llm_kernels_t;

/* The transposed tiles keep their prepared columns within this many bytes
 * (five sixths of the L1 data cache, set with the SIMD level). */
extern int64_t  llm_pre_bytes;

/* iq4_avx2.c, iq4_avx512.c, iq4_neon.c: the SIMD vec_dot kernels of
 * IQ4_NL, IQ4_XS and MXFP4, each file's init called last by
 * llm_kernels_init_avx2 / _avx512 / _neon. */
void llm_kernels_init_iq4_avx2(llm_kernels_t *k);
void llm_kernels_init_iq4_avx512(llm_kernels_t *k);
void llm_kernels_init_iq4_neon(llm_kernels_t *k);

/* iq1_avx2.c, iq1_avx512.c, iq1_neon.c: the SIMD vec_dot kernels of
 * IQ1_S and IQ1_M, each file's init called last by
 * llm_kernels_init_avx2 / _avx512 / _neon. */
void llm_kernels_init_iq1_avx2(llm_kernels_t *k);
void llm_kernels_init_iq1_avx512(llm_kernels_t *k);
void llm_kernels_init_iq1_neon(llm_kernels_t *k);
/* iq2_avx2.c, iq2_avx512.c, iq2_neon.c: the SIMD vec_dot kernels of
 * IQ2_XXS, IQ2_XS and IQ2_S, each file's init called last by
 * llm_kernels_init_avx2 / _avx512 / _neon. */
void llm_kernels_init_iq2_avx2(llm_kernels_t *k);
void llm_kernels_init_iq2_avx512(llm_kernels_t *k);
void llm_kernels_init_iq2_neon(llm_kernels_t *k);
/* iq2x_avx512.c: IQ2_XXS vec_dot and gemm with AVX-512 VBMI, installed
 * by llm_kernels_init_iq2_avx512 when the CPU has it. */
void llm_kernels_init_iq2_vbmi(llm_kernels_t *k);
/* iq3_avx2.c, iq3_avx512.c, iq3_neon.c: IQ3_XXS and IQ3_S vec_dot,
 * called at the end of the matching llm_kernels_init_<isa>. */
void llm_kernels_init_iq3_avx2(llm_kernels_t *k);
void llm_kernels_init_iq3_avx512(llm_kernels_t *k);
void llm_kernels_init_iq3_neon(llm_kernels_t *k);
/* iq3x_avx512.c: IQ3_XXS vec_dot and gemm with AVX-512 VBMI, installed
 * by llm_kernels_init_iq3_avx512 when the CPU has it. */
void llm_kernels_init_iq3_vbmi(llm_kernels_t *k);

/* The scalar table (quant.c); each SIMD file then overwrites the entries
 * it implements and leaves the others. */
void llm_kernels_init_scalar(llm_kernels_t *k);
void llm_kernels_init_avx2(llm_kernels_t *k);
void llm_kernels_init_avx512(llm_kernels_t *k);
/* kernels_avx512.c: the AMX-INT8 tiles of the regrouped gemms (Q4_0, Q8_0,
 * IQ4_NL, MXFP4 _R16): available (the CPU and the kernel allow them), and
 * switched on or off (LLM_AMX=0 at start-up: off); returns whether on. */
int llm_amx_available(void);
int llm_amx_set(int on);
int llm_amx_get(void);
void llm_kernels_init_neon(llm_kernels_t *k);

/* k23_avx2.c, k23_avx512.c, k23_neon.c: Q2_K and Q3_K vec_dot (and gemm)
 * kernels, called at the end of the matching llm_kernels_init_<isa>. */
void llm_kernels_init_k23_avx2(llm_kernels_t *k);
void llm_kernels_init_k23_avx512(llm_kernels_t *k);
void llm_kernels_init_kr16_avx512(llm_kernels_t *k);
void llm_kernels_init_k23_neon(llm_kernels_t *k);

/* quant_legacy.c, quant_k23.c: scalar references of Q4_1, Q5_0, Q5_1,
 * Q2_K, Q3_K and the Q8_1 activations (dequantize nb blocks; vec_dot and
 * quantize_act with the kernel table's signatures). */
void llm_dequant_q4_1(const void *src, float *y, int64_t nb);
void llm_dequant_q5_0(const void *src, float *y, int64_t nb);
void llm_dequant_q5_1(const void *src, float *y, int64_t nb);
void llm_dequant_q8_1(const void *src, float *y, int64_t nb);
void llm_dequant_q2_K(const void *src, float *y, int64_t nb);
void llm_dequant_q3_K(const void *src, float *y, int64_t nb);
void llm_act_q8_1(const float *x, void *dst, int64_t n);
void llm_dot_q4_1(int64_t n, float *s, const void *w, const void *x);
void llm_dot_q5_0(int64_t n, float *s, const void *w, const void *x);
void llm_dot_q5_1(int64_t n, float *s, const void *w, const void *x);
void llm_dot_q2_K(int64_t n, float *s, const void *w, const void *x);
void llm_dot_q3_K(int64_t n, float *s, const void *w, const void *x);
/* One block's exact integer sums against a Q8_K block: Q2_K sum_s sc_s
 * (q_s . x_s) and (*msum) sum_s m_s bsums_s; Q3_K sum_s (sc_s - 32)
 * (q_s . x_s). */
int llm_q2_K_isum(const llm_block_q2_K *a, const llm_block_q8_K *b,
    int *msum);
int llm_q3_K_isum(const llm_block_q3_K *a, const llm_block_q8_K *b);

/* legacy_avx2.c, legacy_avx512.c, legacy_neon.c: the SIMD kernels of
 * Q4_1, Q5_0, Q5_1 (and the Q8_1 activations), called last by
 * llm_kernels_init_avx2 / _avx512 / _neon. */
void llm_kernels_init_legacy_avx2(llm_kernels_t *k);
void llm_kernels_init_legacy_avx512(llm_kernels_t *k);
void llm_kernels_init_legacy_neon(llm_kernels_t *k);

#define LLM_INLINE  static inline __attribute__((always_inline))

/*
 * The regrouped tiles' weight stream at one column (decode) runs ahead of
 * the hardware prefetcher only with help: part q of n of the super-block
 * after *w, prefetched while part q of *w is computed (n parts per loop
 * over a super-block).  One super-block ahead, spread so: the K-quant
 * tiles from 74-79% to 84-93% of a plain read (docs/BENCHMARKS.md
 * "Kernels"); the whole super-block at the loop's top, or two ahead, lost
 * to no prefetch at all.
 */
#define LLM_PREFETCH_NEXT(w, q, n)                                          \
    do {                                                                    \
        const char  *pf_ = (const char *) ((w) + 1)                         \
                           + sizeof(*(w)) / (n) * (q);                      \
                                                                            \
        for (size_t i_ = 0; i_ < (sizeof(*(w)) + (n) - 1) / (n);            \
             i_ += 64)                                                      \
        {                                                                   \
            __builtin_prefetch(pf_ + i_, 0, 3);                             \
        }                                                                   \
    } while (0)

/* Column tiles are walked in chunks of this many activation rows so the
 * chunk stays in L2 while every weight row tile passes over it. */
#define LLM_COL_CHUNK  64

/*
 * The weight prefetch runs this many row tiles ahead of the one being
 * computed.  One tile row is ~1 KB (2048 weights at 4.5 bits), which a
 * thread streams in ~50 ns, less than a miss to RAM takes.  On this
 * machine llm-kbench -c 1 (Q4_0, 2 threads) gave 20-27 GB/s one tile
 * ahead and 28-39 four ahead in one alternating series, no difference in
 * another, and decode tg128 did not tell them apart: the shared memory
 * system's noise is larger.  Four ahead is never worse.
 */
#define LLM_PF_TILES  4

/* Largest tile; tiles declare fixed-size arrays of this size (a [R]
 * array would be a VLA on the stack, not registers). */
#define LLM_MAXR  4
#define LLM_MAXC  4

/*
 * The gemm and vec_dot entry points of one type, from a tile function
 * TILE(R, C, nb, w, w_stride, x, x_stride, y, ldy) that computes an R x C
 * block of results (R, C compile-time constants after inlining).
 * Fewer than ROWC activation columns (decode: an expert gets 1-3 of the
 * batch's tokens) walk one weight row at a time with up to 4 columns per
 * tile: one sequential weight stream, prefetched ahead.
 * Interleaved rows are faster only while the matrix is in cache;
 * streamed from RAM, four interleaved Q4_K/Q6_K rows ran at half the
 * bandwidth of one (llm-kbench -c 1: 8.7 vs 16.4 GB/s on 1 thread,
 * 17.5 vs 28.3 on 2), and Q4_K at 2 / 4 / 8 columns gave 34 / 48 / 63
 * GMAC/s in 4x2 tiles of prepared rows, 76-82 / 90-108 / 92-106 so.
 * From ROWC columns on (prefill) RT x CT tiles reuse each weight tile
 * from L1 across columns.  ROWC is LLM_ROW_COLS, or 2 for the AVX2
 * Q4_0/Q8_0 tiles, whose one-row several-column shapes ran slower
 * (16 registers).
 */
#define LLM_ROW_COLS  32

#define LLM_GEMM_DRIVER(name, QK, RT, CT, ROWC, TILE)                          \
static void                                                                 \
llm_gemm_##name(int64_t n, int64_t nr, int64_t nc, const void *w,           \
    size_t ws, const void *x, size_t xs, float *y, size_t ldy)              \
{                                                                           \
    const char  *wp = w, *xp = x;                                           \
    int64_t      nb = n / (QK), c0, c1, r, c;                               \
                                                                            \
    if (nc < (ROWC)) {                                                      \
        for (r = 0; r < nr; r++) {                                          \
            for (c = 0; c < nc; c += 4) {                                   \
                const char  *xc = xp + c * xs;                              \
                float       *yc = y + c * ldy + r;                          \
                                                                            \
                switch (nc - c) {                                           \
                case 1:                                                     \
                    TILE(1, 1, nb, wp + r * ws, ws, xc, xs, yc, ldy);       \
                    break;                                                  \
                case 2:                                                     \
                    TILE(1, 2, nb, wp + r * ws, ws, xc, xs, yc, ldy);       \
                    break;                                                  \
                case 3:                                                     \
                    TILE(1, 3, nb, wp + r * ws, ws, xc, xs, yc, ldy);       \
                    break;                                                  \
                default:                                                    \
                    TILE(1, 4, nb, wp + r * ws, ws, xc, xs, yc, ldy);       \
                    break;                                                  \
                }                                                           \
            }                                                               \
        }                                                                   \
        return;                                                             \
    }                                                                       \
    for (c0 = 0; c0 < nc; c0 = c1) {                                        \
        c1 = c0 + LLM_COL_CHUNK < nc ? c0 + LLM_COL_CHUNK : nc;             \
        for (r = 0; r + (RT) <= nr; r += (RT)) {                            \
            for (c = c0; c + (CT) <= c1; c += (CT)) {                       \
                TILE((RT), (CT), nb, wp + r * ws, ws, xp + c * xs, xs,      \
                     y + c * ldy + r, ldy);                                 \
            }                                                               \
            for (; c < c1; c++) {                                           \
                TILE((RT), 1, nb, wp + r * ws, ws, xp + c * xs, xs,         \
                     y + c * ldy + r, ldy);                                 \
            }                                                               \
        }                                                                   \
        for (; r < nr; r++) {                                               \
            for (c = c0; c + (CT) <= c1; c += (CT)) {                       \
                TILE(1, (CT), nb, wp + r * ws, ws, xp + c * xs, xs,         \
                     y + c * ldy + r, ldy);                                 \
            }                                                               \
            for (; c < c1; c++) {                                           \
                TILE(1, 1, nb, wp + r * ws, ws, xp + c * xs, xs,            \
                     y + c * ldy + r, ldy);                                 \
            }                                                               \
        }                                                                   \
    }                                                                       \
}                                                                           \
                                                                            \
static void                                                                 \
llm_dot_##name(int64_t n, float *s, const void *w, const void *x)           \
{                                                                           \
    TILE(1, 1, n / (QK), w, 0, x, 0, s, 1);                                 \
}


/* Scalar fp16 -> fp32, exact (every half is a float). */
static inline float
llm_h2f(uint16_t h)
{
    uint32_t  sign = (uint32_t) (h & 0x8000) << 16;
    uint32_t  exp = (h >> 10) & 0x1f;
    uint32_t  mant = h & 0x3ff;
    uint32_t  u;
    float     f;

    if (exp == 0x1f) {
        u = sign | 0x7f800000 | (mant << 13);

    } else if (exp == 0) {
        f = (float) mant * 0x1p-24f;        /* zero or subnormal, exact */
        return sign ? -f : f;

    } else {
        u = sign | ((exp + 112) << 23) | (mant << 13);
    }

    memcpy(&f, &u, 4);
    return f;
}

/* Round to nearest, ties to even, for |f| < 2^22 (ggml's nearest_int). */
static inline int
llm_nearest_int(float f)
{
    float    v = f + 12582912.f;
    int32_t  i;

    memcpy(&i, &v, 4);
    return (i & 0x007fffff) - 0x00400000;
}

/* The 6-bit scale and min of sub-block j from a Q4_K/Q5_K scales[12]. */
static inline void
llm_get_scale_min_k4(int j, const uint8_t *q, uint8_t *d, uint8_t *m)
{
    if (j < 4) {
        *d = q[j] & 63;
        *m = q[j + 4] & 63;

    } else {
        *d = (q[j + 4] & 0xf) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

#if defined(__F16C__) && defined(__SSSE3__)
/* Helpers for the SIMD kernel files (built with -mavx2 or more). */

#include <immintrin.h>

/* fp16 -> fp32 with the F16C instruction: exact like llm_h2f, without
 * its branches (on the per-block path of the tiles). */
static inline float
llm_h2f_hw(uint16_t h)
{
    return _cvtsh_ss(h);
}

#if defined(__AVX__)
/* The sum of v's 8 lanes, in the one order the AVX2 kernels use. */
static inline float
llm_hsum256(__m256 v)
{
    __m128  s = _mm_add_ps(_mm256_castps256_ps128(v),
                           _mm256_extractf128_ps(v, 1));

    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}
#endif

/*
 * The 8 scales and 8 mins of a Q4_K/Q5_K block as bytes, sc[0..7] then
 * m[0..7] (the 12-byte packing of ggml's get_scale_min_k4), by byte
 * shuffles: in general registers, with four inserts into a vector per
 * block, this was a third of the one-column Q4_K tile's time.  The
 * 16-byte load reads 4 bytes of the block's qs after the scales (never
 * past the block); they are shuffled away.  sc[0..3] = s[0..3] & 63,
 * sc[4..7] = (s[8..11] & 15) | (s[0..3] >> 6) << 4, m[0..3] = s[4..7] & 63,
 * m[4..7] = (s[8..11] >> 4) | (s[4..7] >> 6) << 4.
 */
static inline __m128i
llm_k4_scales_u8(const uint8_t *s12)
{
    const __m128i  v = _mm_loadu_si128((const void *) s12);
    const __m128i  a = _mm_shuffle_epi8(v, _mm_setr_epi8(
                           0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 8, 9, 10, 11));
    const __m128i  b = _mm_shuffle_epi8(v, _mm_setr_epi8(
                           -1, -1, -1, -1, 0, 1, 2, 3, -1, -1, -1, -1,
                           4, 5, 6, 7));
    const __m128i  m1 = _mm_setr_epi8(63, 63, 63, 63, 15, 15, 15, 15,
                                      63, 63, 63, 63, 0, 0, 0, 0);
    const __m128i  m2 = _mm_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0,
                                      0, 0, 0, 0, 15, 15, 15, 15);
    __m128i        r;

    r = _mm_or_si128(_mm_and_si128(a, m1),
                     _mm_and_si128(_mm_srli_epi16(a, 4), m2));
    return _mm_or_si128(r, _mm_and_si128(_mm_srli_epi16(b, 2),
                                         _mm_set1_epi8(0x30)));
}
#endif


/* Weight rows per pass over the column groups (64 x 2048 Q4_0 = 72 KB). */
#define LLM_ROW_CHUNK  64

/* ---- The transposed tiles' driver ----------------------------------- */

/*
 * The transposed tiles (AVX-512 Q4_0, Q4_K, Q5_K, Q6_K, Q8_0; AVX2 Q4_0)
 * transpose the weights as they load them, and the activation columns are prepared in the same layout.
 * Their driver: columns in one group when there are at most COLS of them
 * (8, or 16 where the tile keeps 16 accumulators in registers), else in
 * groups of 8; fewer when that many prepared columns would not fit in
 * llm_pre_bytes (the L1), and the groups then of even widths (13 columns
 * as 7 + 6, not 8 + 5).  Each group is prepared once per row chunk (rows
 * that stay in L2 while the column groups pass over them; all rows when
 * there is one group), then runs one weight row at a time.
 * PREP(x, nb, out) prepares one column of nb blocks, UNITS(nb) prepared
 * units; ROWS(C, nb, w, ws, x, xs, pre, y, ldy) computes one weight row's
 * C results.  Rows of more than MAXU units (the stack holds COLS x MAXU),
 * and weights whose address or stride is not a multiple of ALIGN
 * (what the tile's loads assume), go to LONG, a gemm with the same
 * arguments.  Every column count takes the same tile for a result, so it
 * does not depend on the batch it was computed in.
 *
 * Two interleaved rows (sharing each prepared column load) were slower:
 * from RAM before the transposed layout (llm-kbench -j 2 -m 256, GMAC/s
 * at 2 / 3 / 4 / 8 columns, 71 / 88-101 / 125-131 / 142-144 with two
 * rows, 98-102 / 119-136 / 152-160 / 150-156 with one), and in cache
 * after it (docs/BENCHMARKS.md).  One 16-wide group for 9-16 columns (an
 * expert's share of 64 decoding streams) instead of 8 and a narrow rest
 * ran the Q4_0 tile 18-20% faster at 11-12 columns in cache and level at
 * 16; past 16, groups of 8 kept prefill level where groups of 16 lost
 * 2-9% (docs/BENCHMARKS.md, kernels).
 */
#define LLM_T_COLS  16          /* the widest COLS; tiles size arrays by it */


#define LLM_T_CASE(ROWS, C)                                                  \
                case C:                                                     \
                    ROWS(C, nb, wr, ws, xc, xs, pre, yr, ldy);              \
                    break;

#define LLM_T_DRIVER(name, pre_t, QK, MAXU, UNITS, PREP, ROWS, LONG, ALIGN,  \
                     COLS)                                                  \
static void                                                                 \
name(int64_t n, int64_t nr, int64_t nc, const void *w, size_t ws,           \
    const void *x, size_t xs, float *y, size_t ldy)                         \
{                                                                           \
    pre_t        pre[(COLS) * (MAXU)];                                      \
    const char  *wp = w, *xp = x;                                           \
    int64_t      nb = n / (QK), nu = UNITS(nb);                             \
    int64_t      q0, q1, c0, cc, c, r, gw;                                  \
                                                                            \
    if (nu > (MAXU) || (((uintptr_t) w | ws) & ((ALIGN) - 1))) {            \
        LONG(n, nr, nc, w, ws, x, xs, y, ldy);                              \
        return;                                                             \
    }                                                                       \
    gw = nc <= (COLS) ? (COLS) : 8;                                         \
    if (gw * nu * (int64_t) sizeof(pre_t) > llm_pre_bytes) {                \
        gw = llm_pre_bytes / (nu * (int64_t) sizeof(pre_t));                \
        gw = gw < 1 ? 1 : gw;                                               \
    }                                                                       \
    gw = nc > gw ? (nc + (nc + gw - 1) / gw - 1) / ((nc + gw - 1) / gw)     \
                 : gw;                                                      \
    for (q0 = 0; q0 < nr; q0 = q1) {                                        \
        q1 = nc <= gw ? nr                                                  \
             : (q0 + LLM_ROW_CHUNK < nr ? q0 + LLM_ROW_CHUNK : nr);         \
                                                                            \
        for (c0 = 0; c0 < nc; c0 += gw) {                                   \
            const char  *xc = xp + c0 * xs;                                 \
                                                                            \
            cc = nc - c0 < gw ? nc - c0 : gw;                               \
            for (c = 0; c < cc; c++) {                                      \
                PREP(xc + c * xs, nb, pre + c * nu);                        \
            }                                                               \
            for (r = q0; r < q1; r++) {                                     \
                const char  *wr = wp + r * ws;                              \
                float       *yr = y + c0 * ldy + r;                         \
                                                                            \
                if ((COLS) > 8) {                                           \
                    switch (cc) {                                           \
                    LLM_T_CASE(ROWS, 1)                                     \
                    LLM_T_CASE(ROWS, 2)                                     \
                    LLM_T_CASE(ROWS, 3)                                     \
                    LLM_T_CASE(ROWS, 4)                                     \
                    LLM_T_CASE(ROWS, 5)                                     \
                    LLM_T_CASE(ROWS, 6)                                     \
                    LLM_T_CASE(ROWS, 7)                                     \
                    LLM_T_CASE(ROWS, 8)                                     \
                    LLM_T_CASE(ROWS, 9)                                     \
                    LLM_T_CASE(ROWS, 10)                                    \
                    LLM_T_CASE(ROWS, 11)                                    \
                    LLM_T_CASE(ROWS, 12)                                    \
                    LLM_T_CASE(ROWS, 13)                                    \
                    LLM_T_CASE(ROWS, 14)                                    \
                    LLM_T_CASE(ROWS, 15)                                    \
                    default:                                                \
                    LLM_T_CASE(ROWS, 16)                                    \
                    }                                                       \
                } else {                                                    \
                    switch (cc) {                                           \
                    LLM_T_CASE(ROWS, 1)                                     \
                    LLM_T_CASE(ROWS, 2)                                     \
                    LLM_T_CASE(ROWS, 3)                                     \
                    LLM_T_CASE(ROWS, 4)                                     \
                    LLM_T_CASE(ROWS, 5)                                     \
                    LLM_T_CASE(ROWS, 6)                                     \
                    LLM_T_CASE(ROWS, 7)                                     \
                    default:                                                \
                    LLM_T_CASE(ROWS, 8)                                     \
                    }                                                       \
                }                                                           \
            }                                                               \
        }                                                                   \
    }                                                                       \
}


#endif /* LLM_KERNELS_COMMON_H */
