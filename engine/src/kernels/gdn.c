/*
 * The chunked gated delta rule at the baseline (SSE2 on x86-64, NEON on
 * aarch64: vectors of 4 floats), its scratch size and the dispatch.
 */

#define GDN_VL  4
#define GDN_FN  llm_gdn_chunk_base
#define GDN_STEP_FN llm_gdn_step_base
#include "gdn_impl.h"

#include "quant.h"

size_t
llm_gdn_chunk_floats(uint32_t S, uint32_t n)
{
    return (size_t) S * S + (size_t) S * n + (size_t) 2 * n * S
           + (size_t) 2 * n * n + (size_t) n * S;
}

llm_gdn_chunk_fn
llm_gdn_chunk_kernel(void)
{
    switch (llm_simd_level()) {
#if defined(__x86_64__)
    case LLM_SIMD_AVX512:
        return llm_gdn_chunk_avx512;
    case LLM_SIMD_AVX2:
        return llm_gdn_chunk_avx2;
#endif
    default:
        return llm_gdn_chunk_base;
    }
}

llm_gdn_step_fn
llm_gdn_step_kernel(void)
{
    switch (llm_simd_level()) {
#if defined(__x86_64__)
    case LLM_SIMD_AVX512:
        return llm_gdn_step_avx512;
    case LLM_SIMD_AVX2:
        return llm_gdn_step_avx2;
#endif
    default:
        return llm_gdn_step_base;
    }
}
