/*
 * Q2_K and Q3_K rows, and the importance-weighted Q4_K, Q5_K and Q6_K,
 * as ggml quantizes them (see quantize_rows.h).
 *
 * Q2_K: 16 groups of 16, each with a 4-bit scale and a 4-bit min.  The
 * reference fit (no weights) is make_qkx2_quants with |x| weights and
 * mean-absolute error, the group scales and mins then rounded against the
 * largest; the weighted one is make_qkx3_quants with qw * sqrt(sigma2 +
 * x^2), the scales and mins quantized by make_qp_quants.  Q3_K: 16 groups
 * of 16 with signed 6-bit scales; the reference fit is make_q3_quants,
 * the weighted one make_qx_quants twice (levels, then the scales).  Both
 * requantize every weight against the stored fp16 scales at the end.
 *
 * Q4_K / Q5_K / Q6_K without weights are kernels/quant.c's reference
 * quantizers; with weights they run ggml's quantize_row_q*_K_impl here.
 */

#include <math.h>
#include <string.h>

#include "kernels/kernels_common.h"
#include "quantize_rows.h"

static inline int
qk_clamp(int v, int lo, int hi)
{
    return v < lo ? lo : (v > hi ? hi : v);
}


/* Q2_K / Q3_K: 2 low bits of L[256] into qs[64], 4 groups of 32 per byte
 * in each half. */
static void
qk_pack2(const uint8_t *L, uint8_t *qs)
{
    for (int j = 0; j < LLM_QK_K; j += 128) {
        for (int l = 0; l < 32; l++) {
            qs[j / 4 + l] = (uint8_t) (L[j + l] | (L[j + l + 32] << 2)
                                       | (L[j + l + 64] << 4)
                                       | (L[j + l + 96] << 6));
        }
    }
}


/* Q2_K: every weight against the stored d * scale and dmin * min. */
static void
qk_q2_requant(const float *x, float dm, float mm, const uint8_t *scales,
    uint8_t *L)
{
    for (int j = 0; j < LLM_QK_K / 16; j++) {
        float  d = dm * (scales[j] & 0xf), m;

        if (!d) {
            continue;
        }
        m = mm * (scales[j] >> 4);
        for (int ii = 0; ii < 16; ii++) {
            int  l = llm_nearest_int((x[16 * j + ii] + m) / d);

            L[16 * j + ii] = (uint8_t) qk_clamp(l, 0, 3);
        }
    }
}


static void
qk_q2_K_ref(const float *x, llm_block_q2_K *y, int64_t nb)
{
    uint8_t  L[LLM_QK_K], Laux[16];
    float    weights[16], mins[16], scales[16];

    for (int64_t i = 0; i < nb; i++, y++, x += LLM_QK_K) {
        float  max_scale = 0, max_min = 0, iscale;
        int    j, l;

        for (j = 0; j < 16; j++) {
            for (l = 0; l < 16; l++) {
                weights[l] = fabsf(x[16 * j + l]);
            }
            scales[j] = llm_qf_qkx2(16, 3, x + 16 * j, weights, L + 16 * j,
                                    &mins[j], Laux, -0.5f, 0.1f, 15, 1);
            if (scales[j] > max_scale) {
                max_scale = scales[j];
            }
            if (mins[j] > max_min) {
                max_min = mins[j];
            }
        }

        if (max_scale > 0) {
            iscale = 15.f / max_scale;
            for (j = 0; j < 16; j++) {
                y->scales[j] = (uint8_t) llm_nearest_int(iscale * scales[j]);
            }
            y->d = llm_fp32_to_fp16(max_scale / 15.f);
        } else {
            memset(y->scales, 0, 16);
            y->d = llm_fp32_to_fp16(0.f);
        }
        if (max_min > 0) {
            iscale = 15.f / max_min;
            for (j = 0; j < 16; j++) {
                l = llm_nearest_int(iscale * mins[j]);
                y->scales[j] |= (uint8_t) (l << 4);
            }
            y->dmin = llm_fp32_to_fp16(max_min / 15.f);
        } else {
            y->dmin = llm_fp32_to_fp16(0.f);
        }

        qk_q2_requant(x, llm_h2f(y->d), llm_h2f(y->dmin), y->scales, L);
        qk_pack2(L, y->qs);
    }
}


static void
qk_q2_K_impl(const float *x, llm_block_q2_K *y, int64_t nb, const float *qw)
{
    uint8_t  L[LLM_QK_K], Laux[16], Ls[16], Lm[16];
    float    mins[16], scales[16], sw[16], weight[16];

    for (int64_t i = 0; i < nb; i++, y++, x += LLM_QK_K) {
        float  sumx2 = 0, sigma2, dm, mm;
        int    j, l;

        memset(sw, 0, sizeof(sw));
        for (j = 0; j < LLM_QK_K; j++) {
            sumx2 += x[j] * x[j];
        }
        sigma2 = sumx2 / LLM_QK_K;
        for (j = 0; j < 16; j++) {
            const float  *q = qw + LLM_QK_K * i + 16 * j;

            for (l = 0; l < 16; l++) {
                weight[l] = q[l] * sqrtf(sigma2 + x[16 * j + l]
                                                  * x[16 * j + l]);
            }
            for (l = 0; l < 16; l++) {
                sw[j] += weight[l];
            }
            scales[j] = llm_qf_qkx3(16, 3, x + 16 * j, weight, L + 16 * j,
                                    &mins[j], Laux, -0.9f, 0.05f, 36, 0);
        }

        dm = llm_qf_qp(16, 15, scales, Ls, sw);
        mm = llm_qf_qp(16, 15, mins, Lm, sw);
        y->d = llm_fp32_to_fp16(dm);
        y->dmin = llm_fp32_to_fp16(mm);
        for (j = 0; j < 16; j++) {
            y->scales[j] = (uint8_t) (Ls[j] | (Lm[j] << 4));
        }

        qk_q2_requant(x, llm_h2f(y->d), llm_h2f(y->dmin), y->scales, L);
        qk_pack2(L, y->qs);
    }
}


void
llm_qz_q2_K(const float *x, void *dst, int64_t n, const float *qw)
{
    if (qw == NULL) {
        qk_q2_K_ref(x, dst, n / LLM_QK_K);
    } else {
        qk_q2_K_impl(x, dst, n / LLM_QK_K, qw);
    }
}


/* Q3_K: store 16 six-bit scales (already offset by 32) in scales[12]:
 * low nibbles in bytes 0..7, the high 2 bits in bytes 8..11. */
static void
qk_q3_pack_scales(const int *ls, uint8_t *s)
{
    memset(s, 0, 12);
    for (int j = 0; j < 16; j++) {
        int  l = ls[j];

        if (j < 8) {
            s[j] = (uint8_t) (l & 0xf);
        } else {
            s[j - 8] |= (uint8_t) ((l & 0xf) << 4);
        }
        l >>= 4;
        s[j % 4 + 8] |= (uint8_t) (l << (2 * (j / 4)));
    }
}


/* Q3_K's tail, common to both fits: requantize against d * (scale - 32),
 * then split the 3-bit levels into hmask and qs. */
static void
qk_q3_finish(const float *x, llm_block_q3_K *y, int8_t *L)
{
    float    dd = llm_h2f(y->d);
    uint8_t  hm = 1;
    int      m = 0;

    for (int j = 0; j < 16; j++) {
        int    sc = j < 8 ? y->scales[j] & 0xf : y->scales[j - 8] >> 4;
        float  d;

        sc = (int8_t) ((sc | (((y->scales[8 + j % 4] >> (2 * (j / 4))) & 3)
                              << 4)) - 32);
        d = dd * sc;
        if (!d) {
            continue;
        }
        for (int ii = 0; ii < 16; ii++) {
            int  l = llm_nearest_int(x[16 * j + ii] / d);

            L[16 * j + ii] = (int8_t) (qk_clamp(l, -4, 3) + 4);
        }
    }

    memset(y->hmask, 0, sizeof(y->hmask));
    for (int j = 0; j < LLM_QK_K; j++) {
        if (L[j] > 3) {
            y->hmask[m] |= hm;
            L[j] -= 4;
        }
        if (++m == LLM_QK_K / 8) {
            m = 0;
            hm <<= 1;
        }
    }
    qk_pack2((const uint8_t *) L, y->qs);
}


static void
qk_q3_K_ref(const float *x, llm_block_q3_K *y, int64_t nb)
{
    int8_t  L[LLM_QK_K];
    float   scales[16];
    int     ls[16];

    for (int64_t i = 0; i < nb; i++, y++, x += LLM_QK_K) {
        float  max_scale = 0, amax = 0, iscale;

        for (int j = 0; j < 16; j++) {
            scales[j] = llm_qf_q3(16, 4, x + 16 * j, L + 16 * j);
            if (fabsf(scales[j]) > amax) {
                amax = fabsf(scales[j]);
                max_scale = scales[j];
            }
        }

        if (max_scale) {
            iscale = -32.f / max_scale;
            for (int j = 0; j < 16; j++) {
                int8_t  l = (int8_t) llm_nearest_int(iscale * scales[j]);

                ls[j] = qk_clamp(l, -32, 31) + 32;
            }
            qk_q3_pack_scales(ls, y->scales);
            y->d = llm_fp32_to_fp16(1 / iscale);
        } else {
            memset(y->scales, 0, 12);
            y->d = llm_fp32_to_fp16(0.f);
        }
        qk_q3_finish(x, y, L);
    }
}


static void
qk_q3_K_impl(const float *x, llm_block_q3_K *y, int64_t nb, const float *qw)
{
    int8_t  L[LLM_QK_K], Ls[16];
    float   scales[16], weight[16], sw[16];
    int     ls[16];

    for (int64_t i = 0; i < nb; i++, y++, x += LLM_QK_K) {
        float  sumx2 = 0, sigma2;

        for (int j = 0; j < LLM_QK_K; j++) {
            sumx2 += x[j] * x[j];
        }
        sigma2 = 2 * sumx2 / LLM_QK_K;

        for (int j = 0; j < 16; j++) {
            const float  *q = qw + LLM_QK_K * i + 16 * j;
            float         sumw = 0;

            for (int l = 0; l < 16; l++) {
                weight[l] = q[l] * sqrtf(sigma2 + x[16 * j + l]
                                                  * x[16 * j + l]);
            }
            for (int l = 0; l < 16; l++) {
                sumw += weight[l];
            }
            sw[j] = sumw;
            scales[j] = llm_qf_qx(16, 4, x + 16 * j, L + 16 * j, weight);
        }

        float  d_block = llm_qf_qx(16, 32, scales, Ls, sw);

        for (int j = 0; j < 16; j++) {
            ls[j] = Ls[j];
        }
        qk_q3_pack_scales(ls, y->scales);
        y->d = llm_fp32_to_fp16(d_block);
        qk_q3_finish(x, y, L);
    }
}


void
llm_qz_q3_K(const float *x, void *dst, int64_t n, const float *qw)
{
    if (qw == NULL) {
        qk_q3_K_ref(x, dst, n / LLM_QK_K);
    } else {
        qk_q3_K_impl(x, dst, n / LLM_QK_K, qw);
    }
}


/* Q4_K / Q5_K scales[12]: 8 six-bit scales and mins. */
static void
qk_pack_scale_min(const uint8_t *Ls, const uint8_t *Lm, uint8_t *s)
{
    for (int j = 0; j < 8; j++) {
        uint8_t  ls = Ls[j] < 63 ? Ls[j] : 63, lm = Lm[j] < 63 ? Lm[j] : 63;

        if (j < 4) {
            s[j] = ls;
            s[j + 4] = lm;
        } else {
            s[j + 4] = (uint8_t) ((ls & 0xf) | ((lm & 0xf) << 4));
            s[j - 4] |= (uint8_t) ((ls >> 4) << 6);
            s[j] |= (uint8_t) ((lm >> 4) << 6);
        }
    }
}


/*
 * The weighted fit shared by Q4_K (nmax 15) and Q5_K (nmax 31): writes
 * d, dmin, scales[12] and the levels L[256] of one block.
 */
static void
qk_k45_impl(const float *x, const float *qw, int nmax, uint16_t *dd,
    uint16_t *dmin, uint8_t *scales12, uint8_t *L)
{
    uint8_t  Laux[32], Ls[8], Lm[8], sc, m;
    float    weights[32], sw[8], mins[8], scales[8];
    float    sum_x2 = 0, sigma2;
    int      j, l;

    for (l = 0; l < LLM_QK_K; l++) {
        sum_x2 += x[l] * x[l];
    }
    sigma2 = 2 * sum_x2 / LLM_QK_K;

    for (j = 0; j < 8; j++) {
        float  sumw = 0;

        for (l = 0; l < 32; l++) {
            weights[l] = qw[32 * j + l] * sqrtf(sigma2 + x[32 * j + l]
                                                         * x[32 * j + l]);
        }
        for (l = 0; l < 32; l++) {
            sumw += weights[l];
        }
        sw[j] = sumw;
        scales[j] = llm_qf_qkx3(32, nmax, x + 32 * j, weights, L + 32 * j,
                                &mins[j], Laux, -0.9f, 0.05f, 36, 0);
    }

    float  d_block = llm_qf_qp(8, 63, scales, Ls, sw);
    float  m_block = llm_qf_qp(8, 63, mins, Lm, sw);

    memset(scales12, 0, 12);
    qk_pack_scale_min(Ls, Lm, scales12);
    *dd = llm_fp32_to_fp16(d_block);
    *dmin = llm_fp32_to_fp16(m_block);

    for (j = 0; j < 8; j++) {
        float  d, dm;

        llm_get_scale_min_k4(j, scales12, &sc, &m);
        d = llm_h2f(*dd) * sc;
        if (!d) {
            continue;
        }
        dm = llm_h2f(*dmin) * m;
        for (l = 0; l < 32; l++) {
            int  v = llm_nearest_int((x[32 * j + l] + dm) / d);

            L[32 * j + l] = (uint8_t) qk_clamp(v, 0, nmax);
        }
    }
}


void
llm_qz_q4_Kw(const float *x, void *dst, int64_t n, const float *qw)
{
    llm_block_q4_K  *y = dst;
    uint8_t          L[LLM_QK_K];

    for (int64_t i = 0; i < n / LLM_QK_K; i++, y++, x += LLM_QK_K) {
        uint16_t  d, dmin;

        qk_k45_impl(x, qw + LLM_QK_K * i, 15, &d, &dmin, y->scales, L);
        y->d = d;
        y->dmin = dmin;
        uint8_t  *q = y->qs;
        for (int j = 0; j < LLM_QK_K; j += 64, q += 32) {
            for (int l = 0; l < 32; l++) {
                q[l] = (uint8_t) (L[j + l] | (L[j + l + 32] << 4));
            }
        }
    }
}


void
llm_qz_q5_Kw(const float *x, void *dst, int64_t n, const float *qw)
{
    llm_block_q5_K  *y = dst;
    uint8_t          L[LLM_QK_K];

    for (int64_t i = 0; i < n / LLM_QK_K; i++, y++, x += LLM_QK_K) {
        uint8_t   *ql = y->qs, m1 = 1, m2 = 2;
        uint16_t   d, dmin;

        qk_k45_impl(x, qw + LLM_QK_K * i, 31, &d, &dmin, y->scales, L);
        y->d = d;
        y->dmin = dmin;
        memset(y->qh, 0, sizeof(y->qh));
        for (int nn = 0; nn < LLM_QK_K; nn += 64, ql += 32) {
            for (int j = 0; j < 32; j++) {
                int  l1 = L[nn + j], l2 = L[nn + j + 32];

                if (l1 > 15) {
                    l1 -= 16;
                    y->qh[j] |= m1;
                }
                if (l2 > 15) {
                    l2 -= 16;
                    y->qh[j] |= m2;
                }
                ql[j] = (uint8_t) (l1 | (l2 << 4));
            }
            m1 <<= 2;
            m2 <<= 2;
        }
    }
}


void
llm_qz_q6_Kw(const float *x, void *dst, int64_t n, const float *qw)
{
    llm_block_q6_K  *y = dst;
    int8_t           L[LLM_QK_K];
    float            scales[16];

    for (int64_t i = 0; i < n / LLM_QK_K; i++, y++, x += LLM_QK_K) {
        float  max_scale = 0, max_abs = 0, iscale;

        for (int ib = 0; ib < 16; ib++) {
            scales[ib] = llm_qf_qx(16, 32, x + 16 * ib, L + 16 * ib,
                                   qw + LLM_QK_K * i + 16 * ib);
            if (fabsf(scales[ib]) > max_abs) {
                max_abs = fabsf(scales[ib]);
                max_scale = scales[ib];
            }
        }
        if (max_abs < 1e-15f) {
            memset(y, 0, sizeof(*y));
            continue;
        }

        iscale = -128.f / max_scale;
        y->d = llm_fp32_to_fp16(1 / iscale);
        for (int ib = 0; ib < 16; ib++) {
            int  v = llm_nearest_int(iscale * scales[ib]);

            y->scales[ib] = (int8_t) (v < 127 ? v : 127);
        }
        for (int j = 0; j < 16; j++) {
            float  d = llm_h2f(y->d) * y->scales[j];

            if (!d) {
                continue;
            }
            for (int ii = 0; ii < 16; ii++) {
                int  l = llm_nearest_int(x[16 * j + ii] / d);

                L[16 * j + ii] = (int8_t) (qk_clamp(l, -32, 31) + 32);
            }
        }

        uint8_t  *ql = y->ql, *qh = y->qh;
        for (int j = 0; j < LLM_QK_K; j += 128, ql += 64, qh += 32) {
            for (int l = 0; l < 32; l++) {
                uint8_t  q1 = (uint8_t) L[j + l], q2 = (uint8_t) L[j + l + 32];
                uint8_t  q3 = (uint8_t) L[j + l + 64];
                uint8_t  q4 = (uint8_t) L[j + l + 96];

                ql[l] = (uint8_t) ((q1 & 0xf) | ((q3 & 0xf) << 4));
                ql[l + 32] = (uint8_t) ((q2 & 0xf) | ((q4 & 0xf) << 4));
                qh[l] = (uint8_t) ((q1 >> 4) | ((q2 >> 4) << 2)
                                   | ((q3 >> 4) << 4) | ((q4 >> 4) << 6));
            }
        }
    }
}
