/*
 * Attention kernels over one KV-cache block, and SwiGLU (internal to the
 * forward pass).
 *
 * K is stored transposed per block and KV head: kt[d * bt + t] for dim d of
 * token t (bt = block tokens), so the scores of G query heads against up to
 * bt positions are G accumulators over the head dims with one contiguous
 * load per dim.  V is stored by token: v[t * v_stride + d].  Elements are
 * F32 or F16.  Scalar references here; AVX2, AVX-512 and NEON versions in
 * attn_avx2.c / attn_avx512.c / attn_neon.c, picked from llm_simd_level()
 * per call.
 */

#ifndef LLM_ATTN_H
#define LLM_ATTN_H

#include <stddef.h>
#include <stdint.h>

#include "quant.h"

/* s[h * lds + t] = scale * dot(q[h * hd ..], K[t]) for h < G, t < n. */
typedef void (*llm_attn_qk_fn)(const float *q, uint32_t G, uint32_t hd,
    const void *kt, uint32_t bt, uint32_t n, int f16, float scale, float *s,
    size_t lds);

/* o[h * hv + d] += sum_t s[h * lds + t] * V[t][d] for h < G, t < n. */
typedef void (*llm_attn_pv_fn)(float *o, uint32_t G, uint32_t hv,
    const void *v, size_t v_stride, uint32_t n, int f16, const float *s,
    size_t lds);

void llm_attn_qk_ref(const float *q, uint32_t G, uint32_t hd,
    const void *kt, uint32_t bt, uint32_t n, int f16, float scale, float *s,
    size_t lds);
void llm_attn_pv_ref(float *o, uint32_t G, uint32_t hv, const void *v,
    size_t v_stride, uint32_t n, int f16, const float *s, size_t lds);

void llm_attn_qk_avx2(const float *q, uint32_t G, uint32_t hd,
    const void *kt, uint32_t bt, uint32_t n, int f16, float scale, float *s,
    size_t lds);
void llm_attn_pv_avx2(float *o, uint32_t G, uint32_t hv, const void *v,
    size_t v_stride, uint32_t n, int f16, const float *s, size_t lds);
void llm_attn_qk_avx512(const float *q, uint32_t G, uint32_t hd,
    const void *kt, uint32_t bt, uint32_t n, int f16, float scale, float *s,
    size_t lds);
void llm_attn_pv_avx512(float *o, uint32_t G, uint32_t hv, const void *v,
    size_t v_stride, uint32_t n, int f16, const float *s, size_t lds);
void llm_attn_qk_neon(const float *q, uint32_t G, uint32_t hd,
    const void *kt, uint32_t bt, uint32_t n, int f16, float scale, float *s,
    size_t lds);
void llm_attn_pv_neon(float *o, uint32_t G, uint32_t hv, const void *v,
    size_t v_stride, uint32_t n, int f16, const float *s, size_t lds);

/* In place: s[t] = exp(s[t] - max(s)) / sum over t < n. */
typedef void (*llm_attn_softmax_fn)(float *s, uint32_t n);

void llm_attn_softmax_ref(float *s, uint32_t n);
void llm_attn_softmax_avx2(float *s, uint32_t n);
void llm_attn_softmax_avx512(float *s, uint32_t n);
void llm_attn_softmax_neon(float *s, uint32_t n);

/*
 * p.v with V read from the first hv dims of the transposed K blocks (MLA:
 * the compressed latent is both the key, with its rope part after it, and
 * the value, so the cache keeps it once).  o[h * hv + d] += sum over the
 * positions of s[h * lds + t] * K[d][t], for nb blocks kb[i] of bt
 * positions (the last holding n_last) whose scores are s[.. + i * bt]:
 * each output is reduced once per call, so a call should cover a tile.
 */
typedef void (*llm_attn_pvt_fn)(float *o, uint32_t G, uint32_t hv,
    const void *const *kb, uint32_t nb, uint32_t bt, uint32_t n_last,
    int f16, const float *s, size_t lds);

void llm_attn_pvt_ref(float *o, uint32_t G, uint32_t hv,
    const void *const *kb, uint32_t nb, uint32_t bt, uint32_t n_last,
    int f16, const float *s, size_t lds);
void llm_attn_pvt_avx2(float *o, uint32_t G, uint32_t hv,
    const void *const *kb, uint32_t nb, uint32_t bt, uint32_t n_last,
    int f16, const float *s, size_t lds);
void llm_attn_pvt_avx512(float *o, uint32_t G, uint32_t hv,
    const void *const *kb, uint32_t nb, uint32_t bt, uint32_t n_last,
    int f16, const float *s, size_t lds);
void llm_attn_pvt_neon(float *o, uint32_t G, uint32_t hv,
    const void *const *kb, uint32_t nb, uint32_t bt, uint32_t n_last,
    int f16, const float *s, size_t lds);

/* The kernel for the SIMD level in use. */
llm_attn_pvt_fn llm_attn_pvt_kernel(void);

/*
 * A quantized cache (Q8_0 or Q4_0: ggml's quantization, blocks of 32
 * values along a head's dims with one f16 scale each, the same values
 * and scales llama.cpp's cache holds).  K of one KV head in one block of
 * bt positions (bt a multiple of 16) is interleaved by position:
 *   Q8_0: qs[((d / 4) * bt + t) * 4 + d % 4] (int8): four consecutive
 *         dims of a position side by side, so one 64-byte load holds 16
 *         positions x 4 dims, what an int8 dot product (VNNI vpdpbusd,
 *         NEON sdot) sums per 32-bit lane; then the scales, f16
 *         sc[(d / 32) * bt + t];
 *   Q4_0: qs[(b * 16 + j) * bt + t] is byte j of position t's block b as
 *         ggml has it (dim 32 b + j + 8 in the low nibble, dim
 *         32 b + j + 16 + 8 in the high one); then the scales.  A byte
 *         belongs to one position, so positions are stored independently.
 * V rows keep ggml's block layout: row t at v + t * v_row, the head's
 * hv / 32 blocks.  Same contracts as llm_attn_qk_fn / llm_attn_pv_fn;
 * the SIMD llm_attn_qkq_* read Q4_0 only (a Q8_0 cache's q.k is
 * llm_attn_qk8_fn's), the reference both.
 */
typedef void (*llm_attn_qkq_fn)(const float *q, uint32_t G, uint32_t hd,
    const uint8_t *k, uint32_t bt, uint32_t n, llm_type_t t, float scale,
    float *s, size_t lds);
typedef void (*llm_attn_pvq_fn)(float *o, uint32_t G, uint32_t hv,
    const uint8_t *v, size_t v_row, uint32_t n, llm_type_t t,
    const float *s, size_t lds);

#define LLM_ATTN_Q_DECL(isa)                                               \
    void llm_attn_qkq_##isa(const float *q, uint32_t G, uint32_t hd,       \
        const uint8_t *k, uint32_t bt, uint32_t n, llm_type_t t,           \
        float scale, float *s, size_t lds);                                \
    void llm_attn_pvq_##isa(float *o, uint32_t G, uint32_t hv,             \
        const uint8_t *v, size_t v_row, uint32_t n, llm_type_t t,          \
        const float *s, size_t lds);

LLM_ATTN_Q_DECL(ref)
LLM_ATTN_Q_DECL(avx2)
LLM_ATTN_Q_DECL(avx512)
LLM_ATTN_Q_DECL(neon)

/* The quantized-cache kernels for the SIMD level in use. */
void llm_attn_q_kernels(llm_attn_qkq_fn *qk, llm_attn_pvq_fn *pv);

/*
 * q.k against a Q8_0 cache on int8 dot products, as llama.cpp's CPU
 * attention converts q to the K type's dot type: a query row is
 * quantized once (llm_attn_quant_q) to blocks of 32 dims, values qs * d,
 * with s = the sum of qs (what the x86 kernels' unsigned operand, K +
 * 128, needs taken off).  A block's product is exact in int32, then
 * scaled by d x K's block scale in f32:
 *   s[h * lds + t] = scale * sum over blocks b of (q_hb.d * dK[b][t])
 *                    * (sum over i < 32 of q_hb.qs[i] * K[t][32 b + i]).
 * q holds G rows of hd / 32 blocks each.
 */
typedef struct {
    float    d;
    int32_t  s;
    int8_t   qs[32];
} llm_attn_q8_t;

/* Rows of hd dims (a multiple of 32) to q8 blocks, [rows][hd / 32];
 * scalar and the same at every SIMD level (ggml's rounding). */
void llm_attn_quant_q(const float *q, uint32_t rows, uint32_t hd,
    llm_attn_q8_t *out);

typedef void (*llm_attn_qk8_fn)(const llm_attn_q8_t *q, uint32_t G,
    uint32_t hd, const uint8_t *k, uint32_t bt, uint32_t n, float scale,
    float *s, size_t lds);

void llm_attn_qk8_ref(const llm_attn_q8_t *q, uint32_t G, uint32_t hd,
    const uint8_t *k, uint32_t bt, uint32_t n, float scale, float *s,
    size_t lds);
void llm_attn_qk8_avx2(const llm_attn_q8_t *q, uint32_t G, uint32_t hd,
    const uint8_t *k, uint32_t bt, uint32_t n, float scale, float *s,
    size_t lds);
void llm_attn_qk8_avx512(const llm_attn_q8_t *q, uint32_t G, uint32_t hd,
    const uint8_t *k, uint32_t bt, uint32_t n, float scale, float *s,
    size_t lds);
void llm_attn_qk8_neon(const llm_attn_q8_t *q, uint32_t G, uint32_t hd,
    const uint8_t *k, uint32_t bt, uint32_t n, float scale, float *s,
    size_t lds);

/* The Q8_0 q.k kernel for the SIMD level in use. */
llm_attn_qk8_fn llm_attn_qk8_kernel(void);

/*
 * n V rows of hv dims (row t at v + t * v_row bytes; F16, Q8_0 or Q4_0)
 * to f32, dst[t * hv + d]: exact (an f16 value, or an int times its f16
 * scale, is an f32), so p.v over them gives bit for bit what
 * llm_attn_pv_fn / llm_attn_pvq_fn give over the rows themselves.  The
 * forward pass converts a tile's V once when more than one pass of heads
 * would convert it again.
 */
typedef void (*llm_attn_vf_fn)(float *dst, const uint8_t *v, size_t v_row,
    uint32_t n, uint32_t hv, llm_type_t t);

void llm_attn_vf_ref(float *dst, const uint8_t *v, size_t v_row, uint32_t n,
    uint32_t hv, llm_type_t t);
void llm_attn_vf_avx2(float *dst, const uint8_t *v, size_t v_row,
    uint32_t n, uint32_t hv, llm_type_t t);
void llm_attn_vf_avx512(float *dst, const uint8_t *v, size_t v_row,
    uint32_t n, uint32_t hv, llm_type_t t);
void llm_attn_vf_neon(float *dst, const uint8_t *v, size_t v_row,
    uint32_t n, uint32_t hv, llm_type_t t);

llm_attn_vf_fn llm_attn_vf_kernel(void);

/* Bytes of one KV head's K in a block of bt positions of a cache of type
 * t (F32, F16, Q8_0, Q4_0), and of one V row of hv dims. */
size_t llm_attn_k_head_bytes(llm_type_t t, uint32_t hd, uint32_t bt);
size_t llm_attn_v_row_bytes(llm_type_t t, uint32_t hv);

/* Stores K vector k[hd] as position tok of a head's K region kh (layout
 * above, or transposed F32/F16), V vector v[hv] as a V row. */
void llm_attn_store_k(llm_type_t t, uint8_t *kh, uint32_t bt, uint32_t tok,
    const float *k, uint32_t hd);
void llm_attn_store_v(llm_type_t t, uint8_t *vrow, const float *v,
    uint32_t hv);

/*
 * Online softmax over one score tile (tiled attention), n a multiple of 16
 * (the caller pads a row with -INFINITY).  max: the largest of s[0..n).
 * exps: s[t] = exp(s[t] - m), exactly 0 where s[t] is -INFINITY, and the
 * sum of the results, added lane by lane in position order and reduced in
 * a fixed order: a row's sum does not change when -INFINITY positions are
 * appended, so it does not depend on the tile's other rows.
 */
typedef float (*llm_attn_max_fn)(const float *s, uint32_t n);
typedef float (*llm_attn_exps_fn)(float *s, uint32_t n, float m);

float llm_attn_max_ref(const float *s, uint32_t n);
float llm_attn_exps_ref(float *s, uint32_t n, float m);
float llm_attn_max_avx2(const float *s, uint32_t n);
float llm_attn_exps_avx2(float *s, uint32_t n, float m);
float llm_attn_max_avx512(const float *s, uint32_t n);
float llm_attn_exps_avx512(float *s, uint32_t n, float m);
float llm_attn_max_neon(const float *s, uint32_t n);
float llm_attn_exps_neon(float *s, uint32_t n, float m);

/* The online-softmax kernels for the SIMD level in use. */
void llm_attn_online_kernels(llm_attn_max_fn *mx, llm_attn_exps_fn *ex);

/* The kernels for the SIMD level in use. */
void llm_attn_kernels(llm_attn_qk_fn *qk, llm_attn_pv_fn *pv,
    llm_attn_softmax_fn *sm);

/*
 * SwiGLU in place, g[i] = silu(g[i]) * u[i] for i < n: the FFN's gate,
 * here beside softmax because both are built on the same vector exp.
 */
typedef void (*llm_swiglu_fn)(float *g, const float *u, size_t n);

void llm_swiglu_ref(float *g, const float *u, size_t n);
void llm_swiglu_avx2(float *g, const float *u, size_t n);
void llm_swiglu_avx512(float *g, const float *u, size_t n);
void llm_swiglu_neon(float *g, const float *u, size_t n);

/* The SwiGLU kernel for the SIMD level in use. */
llm_swiglu_fn llm_swiglu_kernel(void);

#endif /* LLM_ATTN_H */
