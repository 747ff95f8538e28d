/*
 * IQ4_NL, IQ4_XS and MXFP4 rows as ggml quantizes them (see
 * quantize_rows.h).
 *
 * IQ4_NL / IQ4_XS (ggml's quantize_row_iq4_nl_impl with 7 tries, the
 * path llama-quantize takes with or without an importance matrix): each
 * block of 32 maps onto the 16 non-linear levels; the scale starts at
 * -max / levels[0], then 15 trial scales (levels[0] + t) / max for t in
 * -7..7 keep the best weighted least-squares fit.  The weights are
 * qw * sqrt(sigma2 + x^2) (sigma2 twice the mean square of the block or
 * super-block) with an importance matrix, else x^2.  IQ4_NL stores the
 * block's fp16 scale and requantizes against the float scale; IQ4_XS
 * rounds the 8 block scales to 6 bits against d = -max_scale / 32 and
 * requantizes against those.
 *
 * MXFP4 (ggml's quantize_row_mxfp4_ref; ggml has no weighted MXFP4 and
 * ignores an importance matrix): the shared exponent is
 * floor(log2(amax)) - 2, each value the nearest of the 16 E2M1 levels
 * (the first on ties, in table order).
 */

#include <math.h>
#include <string.h>

#include "kernels/kernels_common.h"
#include "quantize_rows.h"

#define QI_NTRY  7

/*
 * One IQ4 super-block of sbs values (32: IQ4_NL, 256: IQ4_XS) in blocks
 * of 32: the block scales into scales[], the levels into L[sbs]; qw the
 * super-block's weights or NULL.
 */
static void
qi_fit_blocks(int sbs, const float *x, const float *qw, float *scales,
    uint8_t *L, float *max_scale_out)
{
    const int8_t  *values = llm_iq4_kvalues;
    float          sigma2 = 0, weight[32], max_scale = 0, amax_scale = 0;

    for (int j = 0; j < sbs; j++) {
        sigma2 += x[j] * x[j];
    }
    sigma2 *= 2.f / sbs;

    for (int ib = 0; ib < sbs / 32; ib++) {
        const float  *xb = x + 32 * ib;
        uint8_t      *Lb = L + 32 * ib;
        float         amax = 0, max = 0, d, id, sumqx = 0, sumq2 = 0, best;

        for (int j = 0; j < 32; j++) {
            weight[j] = qw != NULL ? qw[32 * ib + j]
                                     * sqrtf(sigma2 + xb[j] * xb[j])
                                   : xb[j] * xb[j];
        }
        for (int j = 0; j < 32; j++) {
            float  ax = fabsf(xb[j]);

            if (ax > amax) {
                amax = ax;
                max = xb[j];
            }
        }
        if (amax < 1e-15f) {
            scales[ib] = 0;
            memset(Lb, 0, 32);
            continue;
        }

        d = -max / values[0];
        id = 1 / d;
        for (int j = 0; j < 32; j++) {
            int    l = llm_qf_best_index_int8(16, values, id * xb[j]);
            float  q = values[l], w = weight[j];

            Lb[j] = (uint8_t) l;
            sumqx += w * q * xb[j];
            sumq2 += w * q * q;
        }
        d = sumq2 > 0 ? sumqx / sumq2 : 0.f;
        best = d * sumqx;

        /* only the scale moves; the levels are redone at the end */
        for (int itry = -QI_NTRY; itry <= QI_NTRY; itry++) {
            id = (itry + values[0]) / max;
            sumqx = sumq2 = 0;
            for (int j = 0; j < 32; j++) {
                int    l = llm_qf_best_index_int8(16, values, id * xb[j]);
                float  q = values[l], w = weight[j];

                sumqx += w * q * xb[j];
                sumq2 += w * q * q;
            }
            if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
                d = sumqx / sumq2;
                best = d * sumqx;
            }
        }
        scales[ib] = d;
        if (fabsf(d) > amax_scale) {
            amax_scale = fabsf(d);
            max_scale = d;
        }
    }
    *max_scale_out = max_scale;
}


/* Nibbles of 32 levels, IQ4_NL's order: elements 0..15 low, 16..31 high. */
static void
qi_pack(const uint8_t *L, uint8_t *qs, int sbs)
{
    for (int i = 0; i < sbs / 32; i++) {
        for (int j = 0; j < 16; j++) {
            qs[16 * i + j] = (uint8_t) (L[32 * i + j]
                                        | (L[32 * i + 16 + j] << 4));
        }
    }
}


void
llm_qz_iq4_nl(const float *x, void *dst, int64_t n, const float *qw)
{
    llm_block_iq4_nl  *b = dst;
    uint8_t            L[32];
    float              scale, max_scale;

    for (int64_t ib = 0; ib < n / 32; ib++, b++, x += 32) {
        qi_fit_blocks(32, x, qw != NULL ? qw + 32 * ib : NULL, &scale, L,
                      &max_scale);
        b->d = llm_fp32_to_fp16(scale);
        float  id = scale ? 1 / scale : 0;
        for (int j = 0; j < 32; j++) {
            L[j] = (uint8_t) llm_qf_best_index_int8(16, llm_iq4_kvalues,
                                                    id * x[j]);
        }
        qi_pack(L, b->qs, 32);
    }
}


void
llm_qz_iq4_xs(const float *x, void *dst, int64_t n, const float *qw)
{
    llm_block_iq4_xs  *b = dst;
    uint8_t            L[LLM_QK_K];
    float              scales[8], max_scale, d, id;

    for (int64_t ibl = 0; ibl < n / LLM_QK_K; ibl++, b++, x += LLM_QK_K) {
        qi_fit_blocks(LLM_QK_K, x, qw != NULL ? qw + LLM_QK_K * ibl : NULL,
                      scales, L, &max_scale);

        b->scales_h = 0;
        memset(b->scales_l, 0, sizeof(b->scales_l));
        d = -max_scale / 32;
        b->d = llm_fp32_to_fp16(d);
        id = d ? 1 / d : 0.f;
        for (int ib = 0; ib < 8; ib++) {
            int    l = llm_nearest_int(id * scales[ib]);
            float  dl, idl;

            l = l < -32 ? -32 : (l > 31 ? 31 : l);
            dl = d * l;
            idl = dl ? 1 / dl : 0.f;
            for (int j = 0; j < 32; j++) {
                L[32 * ib + j] = (uint8_t) llm_qf_best_index_int8(16,
                    llm_iq4_kvalues, idl * x[32 * ib + j]);
            }
            l += 32;
            if (ib % 2 == 0) {
                b->scales_l[ib / 2] = (uint8_t) (l & 0xf);
            } else {
                b->scales_l[ib / 2] |= (uint8_t) ((l & 0xf) << 4);
            }
            b->scales_h |= (uint16_t) ((l >> 4) << (2 * (ib % 8)));
        }
        qi_pack(L, b->qs, LLM_QK_K);
    }
}


/* The first of the 16 levels nearest to x at scale e (ggml's order). */
static int
qi_mxfp4_index(float x, float e)
{
    float  best_err = fabsf(llm_mxfp4_kvalues[0] * e - x);
    int    best = 0;

    for (int i = 1; i < 16; i++) {
        float  err = fabsf(llm_mxfp4_kvalues[i] * e - x);

        if (err < best_err) {
            best = i;
            best_err = err;
        }
    }
    return best;
}


void
llm_qz_mxfp4(const float *x, void *dst, int64_t n)
{
    llm_block_mxfp4  *b = dst;

    for (int64_t i = 0; i < n / 32; i++, b++, x += 32) {
        float    amax = 0.0f, d;
        uint8_t  e;

        for (int j = 0; j < 32; j++) {
            if (amax < fabsf(x[j])) {
                amax = fabsf(x[j]);
            }
        }
        e = amax > 0.0f ? (uint8_t) (floorf(log2f(amax)) - 2 + 127) : 0;
        d = llm_mxfp4_e8m0_half(e);
        b->e = e;
        for (int j = 0; j < 16; j++) {
            b->qs[j] = (uint8_t) (qi_mxfp4_index(x[j], d)
                                  | (qi_mxfp4_index(x[j + 16], d) << 4));
        }
    }
}
