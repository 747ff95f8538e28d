/*
 * IQ4_NL_R16 and MXFP4_R16 x Q8_0 (and IQ4_XS_R16, Q2_K_R16, Q3_K_R16 x
 * Q8_K, below): the scalar references of the regrouped layouts' gemm
 * (kernels_avx512.c and k23_avx512.c run them; the tests hold them to
 * these bit for bit).  Per row the exact integer sum of a block, the level of
 * each 4-bit code times the activation, then acc = fma(sum, d_w * d_x,
 * acc) block after block (fmaf: one rounding, as vfmadd), whatever the
 * number of columns.  d_w is the row's fp16 scale (IQ4_NL) or half its
 * E8M0 scale (MXFP4, whose level table holds twice the E2M1 values).
 */

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "quant.h"
#include "kernels_common.h"


/* Row r's block sum against a Q8_0 block: codes from the interleaved
 * quants qs (llm_block_q4_0x16 / llm_block_mxfp4x16 order). */
static int
llm_r16_block_sum(const uint8_t (*qs)[64], int r, const int8_t *lv,
    const int8_t *y)
{
    int  si = 0;

    for (int i = 0; i < 4; i++) {
        for (int j = 0; j < 4; j++) {
            int  v = qs[i][4 * r + j];

            si += lv[v & 0xf] * y[4 * i + j] + lv[v >> 4] * y[16 + 4 * i + j];
        }
    }
    return si;
}


static void
llm_gemm_r16_ref(const int mx, int64_t n, int64_t nr, int64_t nc,
    const void *w, size_t ws, const void *x, size_t xs, float *y, size_t ldy)
{
    const int64_t  nb = n / LLM_QK;
    const int8_t  *lv = mx ? llm_mxfp4_kvalues : llm_iq4_kvalues;

    for (int64_t g = 0; g < nr / 16; g++) {
        const char  *wg = (const char *) w + g * 16 * ws;

        for (int64_t c = 0; c < nc; c++) {
            const llm_block_q8_0  *q = (const void *) ((const char *) x
                                                       + c * xs);

            for (int r = 0; r < 16; r++) {
                float  acc = 0;

                for (int64_t b = 0; b < nb; b++) {
                    float  dw;
                    int    si;

                    if (mx) {
                        const llm_block_mxfp4x16  *p =
                            (const llm_block_mxfp4x16 *) wg + b;

                        dw = llm_mxfp4_e8m0_half(p->e[r]);
                        si = llm_r16_block_sum(p->qs, r, lv, q[b].qs);
                    } else {
                        const llm_block_q4_0x16  *p =
                            (const llm_block_q4_0x16 *) wg + b;

                        dw = llm_h2f(p->d[r]);
                        si = llm_r16_block_sum(p->qs, r, lv, q[b].qs);
                    }
                    acc = fmaf((float) si, dw * llm_h2f(q[b].d), acc);
                }
                y[c * ldy + g * 16 + r] = acc;
            }
        }
    }
}


void
llm_gemm_iq4_nl_r16_ref(int64_t n, int64_t nr, int64_t nc, const void *w,
    size_t ws, const void *x, size_t xs, float *y, size_t ldy)
{
    llm_gemm_r16_ref(0, n, nr, nc, w, ws, x, xs, y, ldy);
}


void
llm_gemm_mxfp4_r16_ref(int64_t n, int64_t nr, int64_t nc, const void *w,
    size_t ws, const void *x, size_t xs, float *y, size_t ldy)
{
    llm_gemm_r16_ref(1, n, nr, nc, w, ws, x, xs, y, ldy);
}


/* Row r of a Q4_K_R16 super-block in the file's layout. */
static void
llm_q4_K_r16_row(const llm_block_q4_Kx16 *p, int r, llm_block_q4_K *o)
{
    for (int i = 0; i < 3; i++) {
        memcpy(o->scales + 4 * i, &p->sc[i][4 * r], 4);
    }
    for (int i = 0; i < 32; i++) {
        memcpy(o->qs + 4 * i, &p->qs[i][4 * r], 4);
    }
    o->d = p->d[r];
    o->dmin = p->dmin[r];
}


void
llm_gemm_q4_K_r16_ref(int64_t n, int64_t nr, int64_t nc, const void *w,
    size_t ws, const void *x, size_t xs, float *y, size_t ldy)
{
    const int64_t  nb = n / LLM_QK_K;

    for (int64_t g = 0; g < nr / 16; g++) {
        const llm_block_q4_Kx16  *wg = (const void *) ((const char *) w
                                                       + g * 16 * ws);

        for (int64_t c = 0; c < nc; c++) {
            const llm_block_q8_K  *q = (const void *) ((const char *) x
                                                       + c * xs);

            for (int r = 0; r < 16; r++) {
                float  acc = 0;

                for (int64_t b = 0; b < nb; b++) {
                    llm_block_q4_K  blk;
                    int             isum = 0, msum = 0;
                    float           dx = q[b].d;

                    llm_q4_K_r16_row(wg + b, r, &blk);
                    for (int j = 0; j < 8; j++) {
                        const uint8_t  *qs = blk.qs + 32 * (j / 2);
                        const int8_t   *qy = q[b].qs + 32 * j;
                        int             dot = 0;
                        uint8_t         sc, m;

                        llm_get_scale_min_k4(j, blk.scales, &sc, &m);
                        for (int l = 0; l < 32; l++) {
                            dot += (qs[l] >> 4 * (j & 1) & 0xf) * qy[l];
                        }
                        isum += sc * dot;
                        msum += m * (q[b].bsums[2 * j]
                                     + q[b].bsums[2 * j + 1]);
                    }
                    acc = fmaf((float) -msum, llm_h2f(blk.dmin) * dx, acc);
                    acc = fmaf((float) isum, llm_h2f(blk.d) * dx, acc);
                }
                y[c * ldy + g * 16 + r] = acc;
            }
        }
    }
}


/* Row r of a Q6_K_R16 super-block in the file's layout. */
static void
llm_q6_K_r16_row(const llm_block_q6_Kx16 *p, int r, llm_block_q6_K *o)
{
    for (int i = 0; i < 4; i++) {
        memcpy(o->scales + 4 * i, &p->sc[i][4 * r], 4);
    }
    for (int h = 0; h < 2; h++) {
        for (int u = 0; u < 2; u++) {
            for (int k = 0; k < 4; k++) {
                memcpy(o->qh + 32 * h + 16 * u + 4 * k,
                       &p->g[2 * h + u].qh[k][4 * r], 4);
                for (int a = 0; a < 2; a++) {
                    memcpy(o->ql + 64 * h + 32 * a + 16 * u + 4 * k,
                           &p->g[2 * h + u].ql[4 * a + k][4 * r], 4);
                }
            }
        }
    }
    o->d = p->d[r];
}


/* The exact sum of a Q6_K super-block against a Q8_K one: element h 128
 * + k 32 + l is nibble (k & 2) of ql[64 h + l + 32 (k & 1)] with bits 2k
 * of qh[32 h + l] above it, less 32, scale 8 h + 2 k + l / 16. */
static int
llm_q6_K_isum(const llm_block_q6_K *a, const llm_block_q8_K *b)
{
    int  isum = 0;

    for (int h = 0; h < 2; h++) {
        const uint8_t  *ql = a->ql + 64 * h, *qh = a->qh + 32 * h;

        for (int k = 0; k < 4; k++) {
            for (int half = 0; half < 2; half++) {
                int  dot = 0;

                for (int l = half * 16; l < half * 16 + 16; l++) {
                    int  lo = k & 1 ? ql[l + 32] : ql[l];

                    lo = k & 2 ? lo >> 4 : lo & 0xf;
                    dot += ((lo | ((qh[l] >> (2 * k)) & 3) << 4) - 32)
                           * b->qs[h * 128 + k * 32 + l];
                }
                isum += a->scales[h * 8 + k * 2 + half] * dot;
            }
        }
    }
    return isum;
}


void
llm_gemm_q6_K_r16_ref(int64_t n, int64_t nr, int64_t nc, const void *w,
    size_t ws, const void *x, size_t xs, float *y, size_t ldy)
{
    const int64_t  nb = n / LLM_QK_K;

    for (int64_t g = 0; g < nr / 16; g++) {
        const llm_block_q6_Kx16  *wg = (const void *) ((const char *) w
                                                       + g * 16 * ws);

        for (int64_t c = 0; c < nc; c++) {
            const llm_block_q8_K  *q = (const void *) ((const char *) x
                                                       + c * xs);

            for (int r = 0; r < 16; r++) {
                float  acc = 0;

                for (int64_t b = 0; b < nb; b++) {
                    llm_block_q6_K  blk;

                    llm_q6_K_r16_row(wg + b, r, &blk);
                    acc = fmaf((float) llm_q6_K_isum(&blk, &q[b]),
                               llm_h2f(blk.d) * q[b].d, acc);
                }
                y[c * ldy + g * 16 + r] = acc;
            }
        }
    }
}


/*
 * Q8_0_R16 x Q8_0: per row the exact integer sum of a block (the quants
 * stored + 128), then acc = fma(sum, d_w * d_x, acc) block after block,
 * as the Q4_0_R16 reference (quant.c).
 */
void
llm_gemm_q8_0_r16_ref(int64_t n, int64_t nr, int64_t nc, const void *w,
    size_t ws, const void *x, size_t xs, float *y, size_t ldy)
{
    const int64_t  nb = n / LLM_QK;

    for (int64_t g = 0; g < nr / 16; g++) {
        const llm_block_q8_0x16  *wg = (const void *) ((const char *) w
                                                       + g * 16 * ws);

        for (int64_t c = 0; c < nc; c++) {
            const llm_block_q8_0  *q = (const void *) ((const char *) x
                                                       + c * xs);

            for (int r = 0; r < 16; r++) {
                float  acc = 0;

                for (int64_t b = 0; b < nb; b++) {
                    int  si = 0;

                    for (int i = 0; i < 8; i++) {
                        for (int j = 0; j < 4; j++) {
                            si += (wg[b].qs[i][4 * r + j] - 128)
                                  * q[b].qs[4 * i + j];
                        }
                    }
                    acc = fmaf((float) si,
                               llm_h2f(wg[b].d[r]) * llm_h2f(q[b].d), acc);
                }
                y[c * ldy + g * 16 + r] = acc;
            }
        }
    }
}


/*
 * IQ4_XS_R16 x Q8_K: per row and super-block the exact integer sum over
 * sub-blocks j of (ls_j - 32) x sum(level x activation) (as
 * llm_iq4_xs_dot), then acc = fma(sum, d_w * d_x, acc) super-block after
 * super-block.
 */
void
llm_gemm_iq4_xs_r16_ref(int64_t n, int64_t nr, int64_t nc, const void *w,
    size_t ws, const void *x, size_t xs, float *y, size_t ldy)
{
    const int64_t  nb = n / LLM_QK_K;

    for (int64_t g = 0; g < nr / 16; g++) {
        const llm_block_iq4_xsx16  *wg = (const void *) ((const char *) w
                                                         + g * 16 * ws);

        for (int64_t c = 0; c < nc; c++) {
            const llm_block_q8_K  *q = (const void *) ((const char *) x
                                                       + c * xs);

            for (int r = 0; r < 16; r++) {
                float  acc = 0;

                for (int64_t b = 0; b < nb; b++) {
                    const llm_block_iq4_xsx16  *p = wg + b;
                    int                         isum = 0;

                    for (int j = 0; j < 8; j++) {
                        int  lo = p->scales_l[r][j / 2] >> 4 * (j % 2) & 0xf;
                        int  hi = p->scales_h[r] >> 2 * j & 3;

                        isum += ((lo | hi << 4) - 32)
                                * llm_r16_block_sum(p->qs[j], r,
                                                    llm_iq4_kvalues,
                                                    q[b].qs + 32 * j);
                    }
                    acc = fmaf((float) isum, llm_h2f(p->d[r]) * q[b].d, acc);
                }
                y[c * ldy + g * 16 + r] = acc;
            }
        }
    }
}


/* Row r of a Q2_K_R16 super-block back in the file's layout. */
static void
llm_q2_K_r16_row(const llm_block_q2_Kx16 *p, int r, llm_block_q2_K *o)
{
    for (int j = 0; j < 4; j++) {
        memcpy(o->scales + 4 * j, &p->sc[j][4 * r], 4);
    }
    for (int i = 0; i < 16; i++) {
        memcpy(o->qs + 4 * i, &p->qs[i][4 * r], 4);
    }
    o->d = p->d[r];
    o->dmin = p->dmin[r];
}


/* Row r of a Q3_K_R16 super-block back in the file's layout: the third
 * bit of element 16 s + l is bit 4 h + k of hmask[16 u + l] (s = 8 h + 2
 * k + u, quant_k23.c). */
static void
llm_q3_K_r16_row(const llm_block_q3_Kx16 *p, int r, llm_block_q3_K *o)
{
    memset(o->hmask, 0, sizeof(o->hmask));
    for (int s = 0; s < 16; s++) {
        int  h = s >> 3, k = (s >> 1) & 3, u = s & 1;

        for (int l = 0; l < 16; l++) {
            unsigned  bit = p->g[2 * h + u].hm[k][l >> 2]
                            >> (4 * r + (l & 3)) & 1;

            o->hmask[16 * u + l] |= (uint8_t) (bit << (4 * h + k));
        }
    }
    for (int i = 0; i < 16; i++) {
        memcpy(o->qs + 4 * i, &p->g[i >> 2].qs[i & 3][4 * r], 4);
    }
    for (int i = 0; i < 3; i++) {
        memcpy(o->scales + 4 * i, &p->sc[i][4 * r], 4);
    }
    o->d = p->d[r];
}


static void
llm_gemm_k23_r16_ref(const int q3, int64_t n, int64_t nr, int64_t nc,
    const void *w, size_t ws, const void *x, size_t xs, float *y, size_t ldy)
{
    const int64_t  nb = n / LLM_QK_K;

    for (int64_t g = 0; g < nr / 16; g++) {
        const char  *wg = (const char *) w + g * 16 * ws;

        for (int64_t c = 0; c < nc; c++) {
            const llm_block_q8_K  *q = (const void *) ((const char *) x
                                                       + c * xs);

            for (int r = 0; r < 16; r++) {
                float  acc = 0;

                for (int64_t b = 0; b < nb; b++) {
                    float  dx = q[b].d;

                    if (q3) {
                        llm_block_q3_K  blk;

                        llm_q3_K_r16_row((const llm_block_q3_Kx16 *)
                                         (const void *) wg + b, r, &blk);
                        acc = fmaf((float) llm_q3_K_isum(&blk, &q[b]),
                                   llm_h2f(blk.d) * dx, acc);
                    } else {
                        llm_block_q2_K  blk;
                        int             isum, msum;

                        llm_q2_K_r16_row((const llm_block_q2_Kx16 *)
                                         (const void *) wg + b, r, &blk);
                        isum = llm_q2_K_isum(&blk, &q[b], &msum);
                        acc = fmaf((float) isum, llm_h2f(blk.d) * dx, acc);
                        acc = fmaf((float) -msum, llm_h2f(blk.dmin) * dx,
                                   acc);
                    }
                }
                y[c * ldy + g * 16 + r] = acc;
            }
        }
    }
}


void
llm_gemm_q2_K_r16_ref(int64_t n, int64_t nr, int64_t nc, const void *w,
    size_t ws, const void *x, size_t xs, float *y, size_t ldy)
{
    llm_gemm_k23_r16_ref(0, n, nr, nc, w, ws, x, xs, y, ldy);
}


void
llm_gemm_q3_K_r16_ref(int64_t n, int64_t nr, int64_t nc, const void *w,
    size_t ws, const void *x, size_t xs, float *y, size_t ldy)
{
    llm_gemm_k23_r16_ref(1, n, nr, nc, w, ws, x, xs, y, ldy);
}
