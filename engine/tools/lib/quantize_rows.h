/*
 * Row quantizers of llm-quantize, as llama-quantize runs them.
 *
 * llama-quantize converts a matrix with ggml_quantize_chunk(type, rows,
 * imatrix): each type has a reference algorithm (the quantize_row_*_ref
 * of ggml-quants.c) and most have an importance-weighted one (the
 * quantize_row_*_impl) that takes one weight per column of the row, from
 * an importance matrix.  Which one runs depends on the type and on
 * whether weights are given; this file's llm_qz_row makes the same
 * choice, so a row here is byte-identical to ggml's wherever ggml's
 * algorithm is deterministic (all of them are: plain float arithmetic in
 * a fixed order, no threads within a row).
 *
 * The fitting helpers (ggml's make_qx_quants, make_qkx2/3_quants,
 * make_q3_quants, make_qp_quants, best_index_int8) live in
 * quantize_fit.c; the formats in quantize_legacy.c (Q4_0 weighted, Q4_1,
 * Q5_0, Q5_1), quantize_k23.c (Q2_K, Q3_K, weighted Q4_K/Q5_K/Q6_K) and
 * quantize_iq4.c (IQ4_NL, IQ4_XS, MXFP4).  Float arithmetic follows
 * ggml's order of operations exactly: byte identity depends on it.
 */

#ifndef LLM_QUANTIZE_ROWS_H
#define LLM_QUANTIZE_ROWS_H

#include <stdint.h>

/*
 * dst = one row of n floats x in type t, as ggml_quantize_chunk() with
 * importance weights qw (n of them) or NULL.  n must be a multiple of
 * t's block.  Returns 0, or -EINVAL for a type this tool cannot write.
 */
int llm_qz_row(uint32_t t, const float *x, void *dst, int64_t n,
    const float *qw);

/* 1 if llm_qz_row(t, ...) reads importance weights, else 0. */
int llm_qz_uses_imatrix(uint32_t t);

/* 1 if llm_qz_row can write type t. */
int llm_qz_can_write(uint32_t t);

/* ---- internal to the quantize_*.c files ---- */

/* ggml's make_qx_quants with rmse_type 1: symmetric levels -nmax..nmax-1
 * stored as L = l + nmax, weights qw or x^2; returns the scale. */
float llm_qf_qx(int n, int nmax, const float *x, int8_t *L,
    const float *qw);
/* ggml's make_q3_quants with do_rmse (x^2 weights, 5 refinement
 * passes); L = l + nmax. */
float llm_qf_q3(int n, int nmax, const float *x, int8_t *L);
/* ggml's make_qkx2_quants: scale and min, L in 0..nmax; *the_min = -min. */
float llm_qf_qkx2(int n, int nmax, const float *x, const float *w,
    uint8_t *L, float *the_min, uint8_t *Laux, float rmin, float rdelta,
    int nstep, int use_mad);
/* ggml's make_qkx3_quants: as qkx2, w NULL means x^2. */
float llm_qf_qkx3(int n, int nmax, const float *x, const float *w,
    uint8_t *L, float *the_min, uint8_t *Laux, float rmin, float rdelta,
    int nstep, int use_mad);
/* ggml's make_qp_quants: non-negative x on levels 0..nmax, weights qw. */
float llm_qf_qp(int n, int nmax, const float *x, uint8_t *L,
    const float *qw);
/* ggml's best_index_int8: the index of the level of sorted val (n a
 * power of two) nearest to x, ties to the upper one. */
int llm_qf_best_index_int8(int n, const int8_t *val, float x);

void llm_qz_q4_0w(const float *x, void *dst, int64_t n, const float *qw);
void llm_qz_q4_1(const float *x, void *dst, int64_t n, const float *qw);
void llm_qz_q5_0(const float *x, void *dst, int64_t n, const float *qw);
void llm_qz_q5_1(const float *x, void *dst, int64_t n, const float *qw);
void llm_qz_q2_K(const float *x, void *dst, int64_t n, const float *qw);
void llm_qz_q3_K(const float *x, void *dst, int64_t n, const float *qw);
void llm_qz_q4_Kw(const float *x, void *dst, int64_t n, const float *qw);
void llm_qz_q5_Kw(const float *x, void *dst, int64_t n, const float *qw);
void llm_qz_q6_Kw(const float *x, void *dst, int64_t n, const float *qw);
void llm_qz_iq4_nl(const float *x, void *dst, int64_t n, const float *qw);
void llm_qz_iq4_xs(const float *x, void *dst, int64_t n, const float *qw);
void llm_qz_mxfp4(const float *x, void *dst, int64_t n);

#endif /* LLM_QUANTIZE_ROWS_H */
