/*
 * The chunked gated delta rule (gdn.h), written once in GCC's generic
 * vectors and included by gdn.c, gdn_avx2.c and gdn_avx512.c with
 * GDN_VL (floats per vector) and GDN_FN (the function's name) set, so that
 * each file's instruction-set flags pick the instructions.
 */

#include <math.h>
#include <string.h>

#include "gdn.h"

typedef float gdn_vf __attribute__((vector_size(GDN_VL * 4)));

static inline gdn_vf
gdn_ld(const float *p)
{
    gdn_vf  v;

    memcpy(&v, p, sizeof(v));
    return v;
}

static inline void
gdn_st(float *p, gdn_vf v)
{
    memcpy(p, &v, sizeof(v));
}

/* Rows m0..m0+3 of C (+)= A B over columns j..j+2VL. */
static inline void
gdn_tile4x2(const float *A, size_t lda, const float *B, size_t ldb,
    float *C, size_t ldc, uint32_t j, uint32_t K, int acc)
{
    gdn_vf    c00 = { 0 }, c01 = { 0 }, c10 = { 0 }, c11 = { 0 };
    gdn_vf    c20 = { 0 }, c21 = { 0 }, c30 = { 0 }, c31 = { 0 };
    gdn_vf    b0, b1;
    uint32_t  k;

    for (k = 0; k < K; k++) {
        b0 = gdn_ld(B + k * ldb + j);
        b1 = gdn_ld(B + k * ldb + j + GDN_VL);
        c00 += A[k] * b0;
        c01 += A[k] * b1;
        c10 += A[lda + k] * b0;
        c11 += A[lda + k] * b1;
        c20 += A[2 * lda + k] * b0;
        c21 += A[2 * lda + k] * b1;
        c30 += A[3 * lda + k] * b0;
        c31 += A[3 * lda + k] * b1;
    }
    if (acc) {
        c00 += gdn_ld(C + j);
        c01 += gdn_ld(C + j + GDN_VL);
        c10 += gdn_ld(C + ldc + j);
        c11 += gdn_ld(C + ldc + j + GDN_VL);
        c20 += gdn_ld(C + 2 * ldc + j);
        c21 += gdn_ld(C + 2 * ldc + j + GDN_VL);
        c30 += gdn_ld(C + 3 * ldc + j);
        c31 += gdn_ld(C + 3 * ldc + j + GDN_VL);
    }
    gdn_st(C + j, c00);
    gdn_st(C + j + GDN_VL, c01);
    gdn_st(C + ldc + j, c10);
    gdn_st(C + ldc + j + GDN_VL, c11);
    gdn_st(C + 2 * ldc + j, c20);
    gdn_st(C + 2 * ldc + j + GDN_VL, c21);
    gdn_st(C + 3 * ldc + j, c30);
    gdn_st(C + 3 * ldc + j + GDN_VL, c31);
}

/* Row m of C (+)= A B over columns j.. j+VL. */
static inline void
gdn_tile1(const float *A, const float *B, size_t ldb, float *C, uint32_t j,
    uint32_t K, int acc)
{
    gdn_vf    c0 = { 0 };
    uint32_t  k;

    for (k = 0; k < K; k++) {
        c0 += A[k] * gdn_ld(B + k * ldb + j);
    }
    if (acc) {
        c0 += gdn_ld(C + j);
    }
    gdn_st(C + j, c0);
}

/* C[m][j] (+)= sum_k A[m][k] B[k][j], m < M, j < N, k < K (row-major). */
static void
gdn_gemm(const float *A, size_t lda, const float *B, size_t ldb, float *C,
    size_t ldc, uint32_t M, uint32_t N, uint32_t K, int acc)
{
    uint32_t  m, j, k, r, rows;
    float     s;

    for (m = 0; m < M; m += rows) {
        rows = M - m >= 4 ? 4 : 1;
        j = 0;
        if (rows == 4) {
            for (; j + 2 * GDN_VL <= N; j += 2 * GDN_VL) {
                gdn_tile4x2(A + m * lda, lda, B, ldb, C + m * ldc, ldc, j, K,
                            acc);
            }
        }
        for (; j + GDN_VL <= N; j += GDN_VL) {
            for (r = 0; r < rows; r++) {
                gdn_tile1(A + (m + r) * lda, B, ldb, C + (m + r) * ldc, j,
                          K, acc);
            }
        }
        for (; j < N; j++) {
            for (r = 0; r < rows; r++) {
                s = 0.0f;
                for (k = 0; k < K; k++) {
                    s += A[(m + r) * lda + k] * B[k * ldb + j];
                }
                C[(m + r) * ldc + j] = acc ? C[(m + r) * ldc + j] + s : s;
            }
        }
    }
}

/* y += a x over n values. */
static inline void
gdn_axpy(float *y, const float *x, float a, uint32_t n)
{
    uint32_t  i;

    for (i = 0; i + GDN_VL <= n; i += GDN_VL) {
        gdn_st(y + i, gdn_ld(y + i) + a * gdn_ld(x + i));
    }
    for (; i < n; i++) {
        y[i] += a * x[i];
    }
}

/* dst[c][r] = src[r][c] for r < R, c < C, in 16 x 16 tiles. */
static void
gdn_transpose(float *dst, const float *src, uint32_t R, uint32_t C)
{
    uint32_t  r0, c0, r, c, r1, c1;

    for (r0 = 0; r0 < R; r0 += 16) {
        r1 = r0 + 16 < R ? r0 + 16 : R;
        for (c0 = 0; c0 < C; c0 += 16) {
            c1 = c0 + 16 < C ? c0 + 16 : C;
            for (c = c0; c < c1; c++) {
                for (r = r0; r < r1; r++) {
                    dst[(size_t) c * R + r] = src[(size_t) r * C + c];
                }
            }
        }
    }
}

/* The sum of v's lanes, halving. */
static inline float
gdn_hsum(gdn_vf v)
{
    float     t[GDN_VL];
    uint32_t  w, l;

    memcpy(t, &v, sizeof(t));
    for (w = GDN_VL / 2; w >= 1; w /= 2) {
        for (l = 0; l < w; l++) {
            t[l] += t[l + w];
        }
    }
    return t[0];
}

/*
 * sum a[i] b[i], i < n, and a[i] *= m first when m is not 1: two
 * accumulators of vectors, then the tail; the order depends on n only.
 */
static inline float
gdn_dot(float *a, const float *b, uint32_t n, float m)
{
    gdn_vf    acc0 = { 0 }, acc1 = { 0 }, x0, x1;
    uint32_t  i = 0;
    float     s;

    for (; i + 2 * GDN_VL <= n; i += 2 * GDN_VL) {
        x0 = gdn_ld(a + i);
        x1 = gdn_ld(a + i + GDN_VL);
        if (m != 1.0f) {
            x0 *= m;
            x1 *= m;
            gdn_st(a + i, x0);
            gdn_st(a + i + GDN_VL, x1);
        }
        acc0 += x0 * gdn_ld(b + i);
        acc1 += x1 * gdn_ld(b + i + GDN_VL);
    }
    for (; i + GDN_VL <= n; i += GDN_VL) {
        x0 = gdn_ld(a + i);
        if (m != 1.0f) {
            x0 *= m;
            gdn_st(a + i, x0);
        }
        acc0 += x0 * gdn_ld(b + i);
    }
    s = gdn_hsum(acc0 + acc1);
    for (; i < n; i++) {
        a[i] = m != 1.0f ? a[i] * m : a[i];
        s += a[i] * b[i];
    }
    return s;
}

/*
 * gdn.h's step: one token of the recurrence, row by row of M (each row
 * decayed, dotted with k, updated and dotted with q while in L1).
 */
void
GDN_STEP_FN(float *M, uint32_t S, const float *q, const float *k,
    const float *v, float beta, float decay, float scale, float *o)
{
    uint32_t  j;
    float    *row, d;

    for (j = 0; j < S; j++) {
        row = M + (size_t) j * S;
        d = (v[j] - gdn_dot(row, k, S, decay)) * beta;
        gdn_axpy(row, k, d, S);
        o[j] = gdn_dot(row, q, S, 1.0f) * scale;
    }
}

/*
 * gdn.h's chunk.  Scratch: ST [S][S] the state by key rows, KT [S][n] the
 * keys by dim, P [2n][S] = [K; Q] M0^T, G2 [2n][n] = [K; Q] K^T (then the
 * queries' rows become the masked, decayed, scaled weights of the chunk's
 * own d), D [n][S].
 */
void
GDN_FN(float *M, uint32_t S, uint32_t n, const float *kq, const float *v,
    const float *beta, const float *g, float scale, float *o, float *w)
{
    float     *ST = w, *KT = ST + (size_t) S * S, *P = KT + (size_t) S * n;
    float     *G2 = P + (size_t) 2 * n * S, *D = G2 + (size_t) 2 * n * n;
    float      gl = g[n - 1], e, x[LLM_GDN_CHUNK_MAX];
    gdn_vf     ve;
    uint32_t   t, s, j;

    gdn_transpose(ST, M, S, S);
    gdn_transpose(KT, kq, n, S);
    gdn_gemm(kq, S, ST, S, P, S, 2 * n, S, S, 0);
    gdn_gemm(kq, S, KT, n, G2, n, 2 * n, n, S, 0);

    /* d_t, by forward substitution over the chunk; the keys' rows of G2
     * become e^(G_t-G_s) (k_t.k_s), the queries' ones scale e^(G_t-G_s)
     * (q_t.k_s) for s <= t, 0 after */
    for (t = 0; t < n; t++) {
        float  *d = D + (size_t) t * S, *kk = G2 + (size_t) t * n;
        float  *qk = G2 + (size_t) (n + t) * n;
        const float *p = P + (size_t) t * S, *vt = v + (size_t) t * S;

        for (s = 0; s <= t; s++) {
            x[s] = expf(g[t] - g[s]);
            kk[s] *= x[s];
            qk[s] *= scale * x[s];
        }
        for (; s < n; s++) {
            qk[s] = 0.0f;
        }
        e = expf(g[t]);
        for (j = 0; j < S; j++) {
            d[j] = beta[t] * (vt[j] - e * p[j]);
        }
        for (s = 0; s < t; s++) {
            gdn_axpy(d, D + (size_t) s * S, -beta[t] * kk[s], S);
        }
    }

    /* o_t = scale (e^G_t M0 q_t + sum_{s<=t} e^(G_t-G_s) (q_t.k_s) d_s) */
    for (t = 0; t < n; t++) {
        float  *ot = o + (size_t) t * S;
        const float *p = P + (size_t) (n + t) * S;

        e = scale * expf(g[t]);
        for (j = 0; j < S; j++) {
            ot[j] = e * p[j];
        }
    }
    gdn_gemm(G2 + (size_t) n * n, n, D, S, o, S, n, S, n, 1);

    /* M = e^G_n M0 + sum_s e^(G_n-G_s) d_s k_s^T, by key rows */
    for (s = 0; s < n; s++) {
        x[s] = expf(gl - g[s]);
    }
    for (j = 0; j < S; j++) {
        for (s = 0; s < n; s++) {
            KT[(size_t) j * n + s] *= x[s];
        }
    }
    ve = (gdn_vf) { 0 } + expf(gl);
    for (j = 0; j + GDN_VL <= S * S; j += GDN_VL) {
        gdn_st(ST + j, gdn_ld(ST + j) * ve);
    }
    for (; j < S * S; j++) {
        ST[j] *= ve[0];
    }
    gdn_gemm(KT, n, D, S, ST, S, S, S, n, 1);
    gdn_transpose(M, ST, S, S);
}
