/*
 * Scalar attention and SwiGLU kernels (the references) and their dispatch.
 */

#include <math.h>

#include "attn.h"

void
llm_attn_qk_ref(const float *q, uint32_t G, uint32_t hd, const void *kt,
    uint32_t bt, uint32_t n, int f16, float scale, float *s, size_t lds)
{
    const float     *kf = kt;
    const uint16_t  *kh = kt;
    uint32_t         h, t, d;
    float            acc;

    for (h = 0; h < G; h++) {
        for (t = 0; t < n; t++) {
            acc = 0.0f;
            for (d = 0; d < hd; d++) {
                acc += q[h * hd + d]
                       * (f16 ? llm_fp16_to_fp32(kh[(size_t) d * bt + t])
                              : kf[(size_t) d * bt + t]);
            }
            s[h * lds + t] = acc * scale;
        }
    }
}

void
llm_attn_pv_ref(float *o, uint32_t G, uint32_t hv, const void *v,
    size_t v_stride, uint32_t n, int f16, const float *s, size_t lds)
{
    const float     *vf;
    const uint16_t  *vh;
    uint32_t         h, t, d;
    float            a;

    for (t = 0; t < n; t++) {
        vf = (const float *) v + t * v_stride;
        vh = (const uint16_t *) v + t * v_stride;
        for (h = 0; h < G; h++) {
            a = s[h * lds + t];
            for (d = 0; d < hv; d++) {
                o[h * hv + d] += a * (f16 ? llm_fp16_to_fp32(vh[d]) : vf[d]);
            }
        }
    }
}

void
llm_attn_softmax_ref(float *s, uint32_t n)
{
    float     mx = -INFINITY, sum = 0.0f;
    uint32_t  t;

    for (t = 0; t < n; t++) {
        mx = s[t] > mx ? s[t] : mx;
    }
    for (t = 0; t < n; t++) {
        s[t] = expf(s[t] - mx);
        sum += s[t];
    }
    sum = 1.0f / sum;
    for (t = 0; t < n; t++) {
        s[t] *= sum;
    }
}

float
llm_attn_max_ref(const float *s, uint32_t n)
{
    float     mx = -INFINITY;
    uint32_t  t;

    for (t = 0; t < n; t++) {
        mx = s[t] > mx ? s[t] : mx;
    }
    return mx;
}

float
llm_attn_exps_ref(float *s, uint32_t n, float m)
{
    float     sum = 0.0f;
    uint32_t  t;

    for (t = 0; t < n; t++) {
        s[t] = s[t] == -INFINITY ? 0.0f : expf(s[t] - m);
        sum += s[t];
    }
    return sum;
}

void
llm_swiglu_ref(float *g, const float *u, size_t n)
{
    size_t  i;

    for (i = 0; i < n; i++) {
        g[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
    }
}

llm_swiglu_fn
llm_swiglu_kernel(void)
{
    switch (llm_simd_level()) {
#if defined(__x86_64__)
    case LLM_SIMD_AVX512:
        return llm_swiglu_avx512;
    case LLM_SIMD_AVX2:
        return llm_swiglu_avx2;
#elif defined(__aarch64__)
    case LLM_SIMD_NEON:
        return llm_swiglu_neon;
#endif
    default:
        return llm_swiglu_ref;
    }
}

void
llm_attn_kernels(llm_attn_qk_fn *qk, llm_attn_pv_fn *pv,
    llm_attn_softmax_fn *sm)
{
    switch (llm_simd_level()) {
#if defined(__x86_64__)
    case LLM_SIMD_AVX512:
        *qk = llm_attn_qk_avx512;
        *pv = llm_attn_pv_avx512;
        *sm = llm_attn_softmax_avx512;
        break;
    case LLM_SIMD_AVX2:
        *qk = llm_attn_qk_avx2;
        *pv = llm_attn_pv_avx2;
        *sm = llm_attn_softmax_avx2;
        break;
#elif defined(__aarch64__)
    case LLM_SIMD_NEON:
        *qk = llm_attn_qk_neon;
        *pv = llm_attn_pv_neon;
        *sm = llm_attn_softmax_neon;
        break;
#endif
    default:
        *qk = llm_attn_qk_ref;
        *pv = llm_attn_pv_ref;
        *sm = llm_attn_softmax_ref;
        break;
    }
}

void
llm_attn_online_kernels(llm_attn_max_fn *mx, llm_attn_exps_fn *ex)
{
    switch (llm_simd_level()) {
#if defined(__x86_64__)
    case LLM_SIMD_AVX512:
        *mx = llm_attn_max_avx512;
        *ex = llm_attn_exps_avx512;
        break;
    case LLM_SIMD_AVX2:
        *mx = llm_attn_max_avx2;
        *ex = llm_attn_exps_avx2;
        break;
#elif defined(__aarch64__)
    case LLM_SIMD_NEON:
        *mx = llm_attn_max_neon;
        *ex = llm_attn_exps_neon;
        break;
#endif
    default:
        *mx = llm_attn_max_ref;
        *ex = llm_attn_exps_ref;
        break;
    }
}
