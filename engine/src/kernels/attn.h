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
