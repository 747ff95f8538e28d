/*
 * The gated delta rule over a chunk of tokens (internal to the forward
 * pass: qwen35moe's linear attention layers).
 *
 * The recurrence, per head, with the state as a matrix M of value rows
 * (M[j][i]: value dim j, key dim i) and per token t a decay a_t = exp(g_t),
 * beta_t, an L2-normed key k_t and query q_t and a value v_t:
 *
 *   M <- a_t M;  d_t = beta_t (v_t - M k_t);  M <- M + d_t k_t^T;
 *   o_t = scale M q_t
 *
 * over n tokens at once in matrix form (the chunked form of the Gated
 * DeltaNet paper, as llama.cpp and flash-linear-attention run it).  With
 * G_t the decay summed over the chunk up to t and M0 the state before it:
 *
 *   d_t = beta_t (v_t - e^G_t M0 k_t) - sum_{s<t} beta_t e^(G_t - G_s)
 *         (k_t . k_s) d_s                       (forward substitution)
 *   o_t = scale (e^G_t M0 q_t + sum_{s<=t} e^(G_t - G_s) (q_t . k_s) d_s)
 *   M   = e^G_n M0 + sum_s e^(G_n - G_s) d_s k_s^T
 *
 * which is the recurrence exactly, up to f32 rounding: the work becomes
 * matrix products of the chunk's keys and queries with the state (read
 * once per chunk instead of once per token) and with each other.
 * The decode step keeps the recurrence (llm_gdn_step_fn).  Generic vector
 * code (gdn_impl.h) built at the baseline (gdn.c: SSE2 or NEON), AVX2 and
 * AVX-512 (gdn_avx2.c, gdn_avx512.c), picked from llm_simd_level().
 */

#ifndef LLM_GDN_H
#define LLM_GDN_H

#include <stddef.h>
#include <stdint.h>

#define LLM_GDN_CHUNK_MAX   64      /* tokens per chunk, at most */

/*
 * One chunk of n tokens (1 <= n <= LLM_GDN_CHUNK_MAX) of one head with
 * state dims S (keys and values): kq [2n][S] the keys then the queries
 * (L2-normed), v [n][S], beta [n], g [n] the log decays summed from the
 * chunk's start (g[t] = sum_{s<=t} log a_s), M [S][S] the state (value
 * rows), updated; o [n][S] the outputs; w scratch of
 * llm_gdn_chunk_floats(S, n) floats.
 */
typedef void (*llm_gdn_chunk_fn)(float *M, uint32_t S, uint32_t n,
    const float *kq, const float *v, const float *beta, const float *g,
    float scale, float *o, float *w);

void llm_gdn_chunk_base(float *M, uint32_t S, uint32_t n, const float *kq,
    const float *v, const float *beta, const float *g, float scale,
    float *o, float *w);
void llm_gdn_chunk_avx2(float *M, uint32_t S, uint32_t n, const float *kq,
    const float *v, const float *beta, const float *g, float scale,
    float *o, float *w);
void llm_gdn_chunk_avx512(float *M, uint32_t S, uint32_t n,
    const float *kq, const float *v, const float *beta, const float *g,
    float scale, float *o, float *w);

/*
 * One token of the recurrence (the decode step, tokens outside whole
 * chunks) on the state M [S][S] (value rows): q, k L2-normed, v, beta,
 * decay a; o [S] the output.
 */
typedef void (*llm_gdn_step_fn)(float *M, uint32_t S, const float *q,
    const float *k, const float *v, float beta, float decay, float scale,
    float *o);

void llm_gdn_step_base(float *M, uint32_t S, const float *q,
    const float *k, const float *v, float beta, float decay, float scale,
    float *o);
void llm_gdn_step_avx2(float *M, uint32_t S, const float *q,
    const float *k, const float *v, float beta, float decay, float scale,
    float *o);
void llm_gdn_step_avx512(float *M, uint32_t S, const float *q,
    const float *k, const float *v, float beta, float decay, float scale,
    float *o);

/* The step kernel for the SIMD level in use. */
llm_gdn_step_fn llm_gdn_step_kernel(void);

/* Scratch floats llm_gdn_chunk needs for state dims S and n tokens. */
size_t llm_gdn_chunk_floats(uint32_t S, uint32_t n);

/* The chunk kernel for the SIMD level in use. */
llm_gdn_chunk_fn llm_gdn_chunk_kernel(void);

#endif /* LLM_GDN_H */
