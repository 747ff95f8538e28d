/*
 * llm_qz_row: which quantizer ggml_quantize_chunk() runs for a type, with
 * and without importance weights (see quantize_rows.h).
 *
 *   F32 F16 BF16 Q8_0 MXFP4   no weighted algorithm: weights ignored
 *   Q4_0 Q4_K Q5_K Q6_K       kernels/quant.c's reference without
 *                             weights, the weighted fit with them
 *   Q4_1 Q5_0 Q5_1 Q2_K Q3_K  reference / weighted, both here
 *   IQ4_NL IQ4_XS             always the weighted fit (x^2 without an
 *                             importance matrix)
 */

#include <errno.h>

#include "kernels/quant.h"
#include "quantize_rows.h"

int
llm_qz_uses_imatrix(uint32_t t)
{
    switch (t) {
    case LLM_TYPE_Q4_0:
    case LLM_TYPE_Q4_1:
    case LLM_TYPE_Q5_0:
    case LLM_TYPE_Q5_1:
    case LLM_TYPE_Q2_K:
    case LLM_TYPE_Q3_K:
    case LLM_TYPE_Q4_K:
    case LLM_TYPE_Q5_K:
    case LLM_TYPE_Q6_K:
    case LLM_TYPE_IQ4_NL:
    case LLM_TYPE_IQ4_XS:
        return 1;
    default:
        return 0;
    }
}


int
llm_qz_can_write(uint32_t t)
{
    switch (t) {
    case LLM_TYPE_F32:
    case LLM_TYPE_F16:
    case LLM_TYPE_BF16:
    case LLM_TYPE_Q8_0:
    case LLM_TYPE_MXFP4:
        return 1;
    default:
        return llm_qz_uses_imatrix(t);
    }
}


int
llm_qz_row(uint32_t t, const float *x, void *dst, int64_t n,
    const float *qw)
{
    switch (t) {
    case LLM_TYPE_F32:
    case LLM_TYPE_F16:
    case LLM_TYPE_BF16:
    case LLM_TYPE_Q8_0:
        llm_quantize_row((llm_type_t) t, x, dst, n);
        return 0;
    case LLM_TYPE_Q4_0:
    case LLM_TYPE_Q4_K:
    case LLM_TYPE_Q5_K:
    case LLM_TYPE_Q6_K:
        if (qw == NULL) {
            llm_quantize_row((llm_type_t) t, x, dst, n);
        } else if (t == LLM_TYPE_Q4_0) {
            llm_qz_q4_0w(x, dst, n, qw);
        } else if (t == LLM_TYPE_Q4_K) {
            llm_qz_q4_Kw(x, dst, n, qw);
        } else if (t == LLM_TYPE_Q5_K) {
            llm_qz_q5_Kw(x, dst, n, qw);
        } else {
            llm_qz_q6_Kw(x, dst, n, qw);
        }
        return 0;
    case LLM_TYPE_Q4_1:
        llm_qz_q4_1(x, dst, n, qw);
        return 0;
    case LLM_TYPE_Q5_0:
        llm_qz_q5_0(x, dst, n, qw);
        return 0;
    case LLM_TYPE_Q5_1:
        llm_qz_q5_1(x, dst, n, qw);
        return 0;
    case LLM_TYPE_Q2_K:
        llm_qz_q2_K(x, dst, n, qw);
        return 0;
    case LLM_TYPE_Q3_K:
        llm_qz_q3_K(x, dst, n, qw);
        return 0;
    case LLM_TYPE_IQ4_NL:
        llm_qz_iq4_nl(x, dst, n, qw);
        return 0;
    case LLM_TYPE_IQ4_XS:
        llm_qz_iq4_xs(x, dst, n, qw);
        return 0;
    case LLM_TYPE_MXFP4:
        llm_qz_mxfp4(x, dst, n);
        return 0;
    default:
        return -EINVAL;
    }
}
