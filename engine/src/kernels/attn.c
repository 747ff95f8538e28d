/*
 * Scalar attention and SwiGLU kernels (the references) and their dispatch.
 */

#include <math.h>
#include <string.h>

#include "attn.h"

void
llm_attn_pvt_ref(float *o, uint32_t G, uint32_t hv, const void *const *kb,
    uint32_t nb, uint32_t bt, uint32_t n_last, int f16, const float *s,
    size_t lds)
{
    uint32_t  h, d, i, t, n;
    float     acc, k;

    for (h = 0; h < G; h++) {
        for (d = 0; d < hv; d++) {
            acc = 0.0f;
            for (i = 0; i < nb; i++) {
                n = i + 1 == nb ? n_last : bt;
                for (t = 0; t < n; t++) {
                    k = f16 ? llm_fp16_to_fp32(((const uint16_t *) kb[i])
                                               [(size_t) d * bt + t])
                            : ((const float *) kb[i])[(size_t) d * bt + t];
                    acc += s[h * lds + i * bt + t] * k;
                }
            }
            o[h * hv + d] += acc;
        }
    }
}

llm_attn_pvt_fn
llm_attn_pvt_kernel(void)
{
    switch (llm_simd_level()) {
#if defined(__x86_64__)
    case LLM_SIMD_AVX512:
        return llm_attn_pvt_avx512;
    case LLM_SIMD_AVX2:
        return llm_attn_pvt_avx2;
#elif defined(__aarch64__)
    case LLM_SIMD_NEON:
        return llm_attn_pvt_neon;
#endif
    default:
        return llm_attn_pvt_ref;
    }
}

/* ---- quantized cache ---------------------------------------------------- */

/* ggml's blocks, for the quantizer's output */
typedef struct { uint16_t d; int8_t qs[32]; } llm_kq8_t;
typedef struct { uint16_t d; uint8_t qs[16]; } llm_kq4_t;

size_t
llm_attn_k_head_bytes(llm_type_t t, uint32_t hd, uint32_t bt)
{
    return (size_t) bt * llm_row_bytes(t, hd);
}

size_t
llm_attn_v_row_bytes(llm_type_t t, uint32_t hv)
{
    return llm_row_bytes(t, hv);
}

void
llm_attn_store_k(llm_type_t t, uint8_t *kh, uint32_t bt, uint32_t tok,
    const float *k, uint32_t hd)
{
    llm_kq8_t  b8[64];
    llm_kq4_t  b4[64];
    uint16_t  *sc;
    uint32_t   d, nb = hd / 32, i;

    if (t == LLM_TYPE_F32 || t == LLM_TYPE_F16) {
        for (d = 0; d < hd; d++) {
            if (t == LLM_TYPE_F32) {
                ((float *) kh)[(size_t) d * bt + tok] = k[d];
            } else {
                ((uint16_t *) kh)[(size_t) d * bt + tok]
                    = llm_fp32_to_fp16(k[d]);
            }
        }
        return;
    }
    for (i = 0; i < nb; i += 64) {
        uint32_t  n = nb - i < 64 ? nb - i : 64;

        if (t == LLM_TYPE_Q8_0) {
            llm_quantize_row(t, k + i * 32, b8, (int64_t) n * 32);
            sc = (uint16_t *) (kh + (size_t) hd * bt);
            for (d = 0; d < n * 32; d++) {
                ((int8_t *) kh)[(((size_t) (i * 32 + d) / 4) * bt + tok) * 4
                                + d % 4] = b8[d / 32].qs[d % 32];
            }
            for (d = 0; d < n; d++) {
                sc[(size_t) (i + d) * bt + tok] = b8[d].d;
            }
            continue;
        }
        llm_quantize_row(t, k + i * 32, b4, (int64_t) n * 32);
        sc = (uint16_t *) (kh + (size_t) hd * bt / 2);
        for (d = 0; d < n * 16; d++) {
            kh[(size_t) (i * 16 + d) * bt + tok] = b4[d / 16].qs[d % 16];
        }
        for (d = 0; d < n; d++) {
            sc[(size_t) (i + d) * bt + tok] = b4[d].d;
        }
    }
}

void
llm_attn_store_v(llm_type_t t, uint8_t *vrow, const float *v, uint32_t hv)
{
    uint32_t  i;

    if (t == LLM_TYPE_F16) {
        for (i = 0; i < hv; i++) {
            ((uint16_t *) vrow)[i] = llm_fp32_to_fp16(v[i]);
        }
        return;
    }
    if (t == LLM_TYPE_F32) {
        memcpy(vrow, v, hv * sizeof(float));
        return;
    }
    llm_quantize_row(t, v, vrow, hv);
}

/* Value of dim d, position tt of a quantized K head region. */
static float
llm_kq_at(const uint8_t *k, uint32_t hd, uint32_t bt, llm_type_t t,
    uint32_t d, uint32_t tt)
{
    const uint16_t  *sc;
    int              v;

    if (t == LLM_TYPE_Q8_0) {
        sc = (const uint16_t *) (k + (size_t) hd * bt);
        v = ((const int8_t *) k)[((size_t) (d / 4) * bt + tt) * 4 + d % 4];
    } else {
        sc = (const uint16_t *) (k + (size_t) hd * bt / 2);
        v = k[(size_t) ((d / 32) * 16 + d % 16) * bt + tt];
        v = (d % 32 < 16 ? v & 15 : v >> 4) - 8;
    }
    return (float) v * llm_fp16_to_fp32(sc[(size_t) (d / 32) * bt + tt]);
}

void
llm_attn_qkq_ref(const float *q, uint32_t G, uint32_t hd, const uint8_t *k,
    uint32_t bt, uint32_t n, llm_type_t t, float scale, float *s,
    size_t lds)
{
    uint32_t  h, tt, d;
    float     acc;

    for (h = 0; h < G; h++) {
        for (tt = 0; tt < n; tt++) {
            acc = 0.0f;
            for (d = 0; d < hd; d++) {
                acc += q[h * hd + d] * llm_kq_at(k, hd, bt, t, d, tt);
            }
            s[h * lds + tt] = acc * scale;
        }
    }
}

void
llm_attn_quant_q(const float *q, uint32_t rows, uint32_t hd,
    llm_attn_q8_t *out)
{
    uint32_t  r, b, i;
    float     amax, d, id;
    int32_t   sum, v;

    for (r = 0; r < rows; r++) {
        for (b = 0; b < hd / 32; b++, out++) {
            const float  *x = q + (size_t) r * hd + b * 32;

            amax = 0.0f;
            for (i = 0; i < 32; i++) {
                amax = fabsf(x[i]) > amax ? fabsf(x[i]) : amax;
            }
            d = amax / 127.0f;
            id = d != 0.0f ? 1.0f / d : 0.0f;
            sum = 0;
            for (i = 0; i < 32; i++) {
                v = (int32_t) roundf(x[i] * id);
                out->qs[i] = (int8_t) v;
                sum += v;
            }
            out->d = d;
            out->s = sum;
        }
    }
}

void
llm_attn_qk8_ref(const llm_attn_q8_t *q, uint32_t G, uint32_t hd,
    const uint8_t *k, uint32_t bt, uint32_t n, float scale, float *s,
    size_t lds)
{
    const int8_t    *ks = (const int8_t *) k;
    const uint16_t  *sc = (const uint16_t *) (k + (size_t) hd * bt);
    uint32_t         h, t, b, i, nb = hd / 32;
    int32_t          isum;
    float            acc;

    for (h = 0; h < G; h++) {
        for (t = 0; t < n; t++) {
            acc = 0.0f;
            for (b = 0; b < nb; b++) {
                const llm_attn_q8_t  *qb = &q[h * nb + b];

                isum = 0;
                for (i = 0; i < 32; i++) {
                    isum += qb->qs[i]
                            * ks[((size_t) (b * 8 + i / 4) * bt + t) * 4
                                 + i % 4];
                }
                acc += (float) isum
                       * (qb->d * llm_fp16_to_fp32(sc[(size_t) b * bt + t]));
            }
            s[h * lds + t] = acc * scale;
        }
    }
}

llm_attn_qk8_fn
llm_attn_qk8_kernel(void)
{
    switch (llm_simd_level()) {
#if defined(__x86_64__)
    case LLM_SIMD_AVX512:
        return llm_attn_qk8_avx512;
    case LLM_SIMD_AVX2:
        return llm_attn_qk8_avx2;
#elif defined(__aarch64__)
    case LLM_SIMD_NEON:
        return llm_attn_qk8_neon;
#endif
    default:
        return llm_attn_qk8_ref;
    }
}

void
llm_attn_vf_ref(float *dst, const uint8_t *v, size_t v_row, uint32_t n,
    uint32_t hv, llm_type_t t)
{
    uint32_t  i;

    for (i = 0; i < n; i++) {
        llm_dequantize_row(t, v + i * v_row, dst + (size_t) i * hv, hv);
    }
}

llm_attn_vf_fn
llm_attn_vf_kernel(void)
{
    switch (llm_simd_level()) {
#if defined(__x86_64__)
    case LLM_SIMD_AVX512:
        return llm_attn_vf_avx512;
    case LLM_SIMD_AVX2:
        return llm_attn_vf_avx2;
#elif defined(__aarch64__)
    case LLM_SIMD_NEON:
        return llm_attn_vf_neon;
#endif
    default:
        return llm_attn_vf_ref;
    }
}

void
llm_attn_pvq_ref(float *o, uint32_t G, uint32_t hv, const uint8_t *v,
    size_t v_row, uint32_t n, llm_type_t t, const float *s, size_t lds)
{
    float     row[4096];
    uint32_t  h, tt, d, c;

    for (tt = 0; tt < n; tt++) {
        for (c = 0; c < hv; c += 4096) {
            uint32_t  w = hv - c < 4096 ? hv - c : 4096;

            llm_dequantize_row(t, v + tt * v_row + llm_row_bytes(t, c), row,
                               w);
            for (h = 0; h < G; h++) {
                for (d = 0; d < w; d++) {
                    o[h * hv + c + d] += s[h * lds + tt] * row[d];
                }
            }
        }
    }
}

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
llm_attn_q_kernels(llm_attn_qkq_fn *qk, llm_attn_pvq_fn *pv)
{
    switch (llm_simd_level()) {
#if defined(__x86_64__)
    case LLM_SIMD_AVX512:
        *qk = llm_attn_qkq_avx512;
        *pv = llm_attn_pvq_avx512;
        break;
    case LLM_SIMD_AVX2:
        *qk = llm_attn_qkq_avx2;
        *pv = llm_attn_pvq_avx2;
        break;
#elif defined(__aarch64__)
    case LLM_SIMD_NEON:
        *qk = llm_attn_qkq_neon;
        *pv = llm_attn_pvq_neon;
        break;
#endif
    default:
        *qk = llm_attn_qkq_ref;
        *pv = llm_attn_pvq_ref;
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
