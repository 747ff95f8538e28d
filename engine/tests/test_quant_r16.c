/*
 * IQ4_NL, MXFP4, IQ4_XS, Q2_K, Q3_K, Q8_0, Q4_K and Q6_K regrouped into
 * 16-row runs (IQ4_NL_R16, MXFP4_R16, IQ4_XS_R16, Q2_K_R16, Q3_K_R16,
 * Q8_0_R16, Q4_K_R16, Q6_K_R16:
 * what the engine runs those matrices as with AVX-512, as Q4_0_R16 for
 * Q4_0; test_quant checks that one).
 *
 * 1. llm_repack_type / llm_repack_source: which types regroup, when.
 * 2. Per type, on random blocks (random codes; fp16 scales, E8M0
 *    exponents around 2^-8 with some subnormal ones): the AVX-512 gemm
 *    bit-identical to the scalar reference of its order and to the
 *    AVX-512 kernels of the file layout (what streamed experts run: the
 *    expert cache's logits must be the resident run's bit for bit), every
 *    column bit-identical alone and in any batch (the file layout's also
 *    with a row count that is not a multiple of 16), and every result
 *    within 2e-5
 *    (of the sum of |w x|) of the file type's own dot product; rows 16 to
 *    80, columns 1 to 33, rows of 1 to 300 blocks (IQ4_XS, Q2_K, Q3_K,
 *    Q4_K, Q6_K: 1 to 40 super-blocks).
 */

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/quant.h"
#include "testkit.h"

static uint64_t  rng_state = 0x9e3779b97f4a7c15ull;

static float
rng_uniform(void)
{
    return ((tk_xorshift64(&rng_state) >> 40) + 0.5f) / 16777216.0f;
}


/* A 256-value super-block type (else 32-value blocks). */
static int
at_k(llm_type_t t)
{
    return t == LLM_TYPE_IQ4_XS || t == LLM_TYPE_Q2_K || t == LLM_TYPE_Q3_K
           || t == LLM_TYPE_Q4_K || t == LLM_TYPE_Q6_K;
}


/* nr rows of n values of type t (IQ4_NL, MXFP4, IQ4_XS, Q2_K, Q3_K or
 * Q8_0), random (Q8_0's quants anywhere in -128..127); the float
 * values of the same rows into wf (for the error bound). */
static void
make_rows(llm_type_t t, int64_t n, int nr, char *w, float *wf)
{
    const size_t  rb = llm_row_bytes(t, n);
    const size_t  bb = llm_type_info(t)->block_bytes;
    const size_t  sb = t == LLM_TYPE_MXFP4 ? 1 : 2;

    if (at_k(t)) {
        /* random bytes, then a sane fp16 d (any scale bytes are valid):
         * at byte 0 of an IQ4_XS block, 80 of Q2_K (and dmin at 82), 108
         * of Q3_K, 0 of Q4_K (and dmin at 2), 208 of Q6_K */
        const size_t  kb = llm_row_bytes(t, 256);
        const size_t  doff = t == LLM_TYPE_Q2_K ? 80
                             : t == LLM_TYPE_Q3_K ? 108
                             : t == LLM_TYPE_Q6_K ? 208 : 0;

        for (size_t i = 0; i < nr * rb; i++) {
            w[i] = (char) (tk_xorshift64(&rng_state) >> 56);
        }
        for (int r = 0; r < nr; r++) {
            for (int64_t b = 0; b < n / 256; b++) {
                uint16_t  d = llm_fp32_to_fp16(0.0001f + 0.001f
                                               * rng_uniform());
                uint16_t  dm = llm_fp32_to_fp16(0.0001f + 0.001f
                                                * rng_uniform());

                memcpy(w + r * rb + b * kb + doff, &d, 2);
                if (t == LLM_TYPE_Q2_K || t == LLM_TYPE_Q4_K) {
                    memcpy(w + r * rb + b * kb + doff + 2, &dm, 2);
                }
            }
            llm_dequantize_row(t, w + r * rb, wf + r * n, n);
        }
        return;
    }
    for (int r = 0; r < nr; r++) {
        for (int64_t b = 0; b < n / 32; b++) {
            unsigned char  *p = (unsigned char *) w + r * rb + b * bb;

            if (sb == 1) {
                /* 2^-12 .. 2^-4, and a subnormal scale now and then */
                p[0] = (unsigned char) (r % 7 == 3 && b % 5 == 1
                                        ? b % 2 : 116 + (int) (rng_uniform()
                                                               * 9));
            } else {
                uint16_t  d = llm_fp32_to_fp16(0.001f + 0.01f
                                               * rng_uniform());

                memcpy(p, &d, 2);
            }
            for (size_t i = sb; i < bb; i++) {
                p[i] = (unsigned char) (tk_xorshift64(&rng_state) >> 56);
            }
        }
        llm_dequantize_row(t, w + r * rb, wf + r * n, n);
    }
}


static void
check_type(llm_type_t t, llm_type_t rt, llm_simd_t level)
{
    static const int64_t  ns32[] = { 32, 768, 2048, 300 * 32 };
    static const int64_t  ns256[] = { 256, 768, 2048, 40 * 256 };
    static const int      rows[] = { 16, 48, 80 };
    static const int      cols[] = { 1, 2, 3, 8, 9, 16, 17, 33 };
    const int             maxr = 80, maxc = 33;
    const llm_type_t      at = llm_type_vec_dot_type(t);
    const int64_t        *ns = at == LLM_TYPE_Q8_K ? ns256 : ns32;

    for (size_t in = 0; in < 4; in++) {
        const int64_t  n = ns[in];
        const size_t   wrow = llm_row_bytes(t, n);
        const size_t   xrow = llm_row_bytes(at, n);
        float         *wf = malloc(n * maxr * sizeof(float));
        float         *x = malloc(n * maxc * sizeof(float));
        char          *wq = malloc(wrow * maxr), *wr = malloc(wrow * maxr);
        char          *xq = malloc(xrow * maxc);
        float         *y = malloc(maxr * maxc * sizeof(float));
        float         *ys = malloc(maxr * maxc * sizeof(float));
        float         *y1 = malloc(maxr * sizeof(float));

        REQUIRE(wf && x && wq && wr && xq && y && ys && y1);
        make_rows(t, n, maxr, wq, wf);
        for (int64_t i = 0; i < n * maxc; i++) {
            x[i] = 2 * rng_uniform() - 1;
        }
        for (int c = 0; c < maxc; c++) {
            llm_quantize_act_ref(at, x + c * n, xq + c * xrow, n);
        }
        llm_repack_rows(t, n, maxr, wq, wr);

        for (size_t ir = 0; ir < sizeof(rows) / sizeof(rows[0]); ir++) {
            for (size_t ic = 0; ic < sizeof(cols) / sizeof(cols[0]); ic++) {
                const int  nr = rows[ir], nc = cols[ic];
                int        far = 0, diff, flay, alone = 0;

                llm_gemm(rt, n, nr, nc, wr, wrow, xq, xrow, y, nr);
                llm_simd_force(LLM_SIMD_SCALAR);
                llm_gemm(rt, n, nr, nc, wr, wrow, xq, xrow, ys, nr);
                llm_simd_force(level);
                diff = memcmp(y, ys, nr * nc * sizeof(float)) != 0;
                /* the file layout's kernels (streamed experts) */
                llm_gemm(t, n, nr, nc, wq, wrow, xq, xrow, ys, nr);
                flay = memcmp(y, ys, nr * nc * sizeof(float)) != 0;
                /* and fewer rows than a multiple of 16 (the last run
                 * partial): the same bits row by row */
                llm_gemm(t, n, nr - 5, nc, wq, wrow, xq, xrow, ys, nr);
                for (int c = 0; c < nc; c++) {
                    flay |= memcmp(y + c * nr, ys + c * nr,
                                   (nr - 5) * sizeof(float)) != 0;
                }
                for (int c = 0; c < nc; c++) {
                    llm_gemm(rt, n, nr, 1, wr, wrow, xq + c * xrow, xrow,
                             y1, nr);
                    alone += memcmp(y1, y + c * nr, nr * sizeof(float)) != 0;
                    for (int r = 0; r < nr; r++) {
                        double  norm = 0;
                        float   ref;

                        llm_vec_dot_ref(t, n, &ref, wq + r * wrow,
                                        xq + c * xrow);
                        for (int64_t j = 0; j < n; j++) {
                            norm += fabsf(wf[r * n + j] * x[c * n + j]);
                        }
                        far += !(fabs(y[c * nr + r] - ref) <= 2e-5 * norm);
                    }
                }
                CHECK(diff == 0 && flay == 0 && alone == 0 && far == 0,
                      "%s n=%lld %dx%d: %s scalar, %s the file layout's"
                      " gemm, %d columns differ alone, %d results off the"
                      " %s dot", llm_type_name(rt), (long long) n, nr, nc,
                      diff ? "differs from" : "as",
                      flay ? "differs from" : "as", alone, far,
                      llm_type_name(t));
            }
        }
        free(wf);
        free(x);
        free(wq);
        free(wr);
        free(xq);
        free(y);
        free(ys);
        free(y1);
    }
}


int
main(void)
{
    llm_simd_init();

    tk_begin("regrouped types: llm_repack_type and llm_repack_source");
    CHECK(llm_repack_source(LLM_TYPE_Q4_0_R16) == LLM_TYPE_Q4_0
          && llm_repack_source(LLM_TYPE_IQ4_NL_R16) == LLM_TYPE_IQ4_NL
          && llm_repack_source(LLM_TYPE_MXFP4_R16) == LLM_TYPE_MXFP4
          && llm_repack_source(LLM_TYPE_IQ4_XS_R16) == LLM_TYPE_IQ4_XS
          && llm_repack_source(LLM_TYPE_Q2_K_R16) == LLM_TYPE_Q2_K
          && llm_repack_source(LLM_TYPE_Q3_K_R16) == LLM_TYPE_Q3_K
          && llm_repack_source(LLM_TYPE_Q8_0_R16) == LLM_TYPE_Q8_0
          && llm_repack_source(LLM_TYPE_Q4_K_R16) == LLM_TYPE_Q4_K
          && llm_repack_source(LLM_TYPE_Q6_K_R16) == LLM_TYPE_Q6_K
          && llm_repack_source(LLM_TYPE_Q8_0) == LLM_TYPE_Q8_0);
    CHECK(llm_type_vec_dot_type(LLM_TYPE_IQ4_NL_R16) == LLM_TYPE_Q8_0
          && llm_type_vec_dot_type(LLM_TYPE_MXFP4_R16) == LLM_TYPE_Q8_0
          && llm_type_vec_dot_type(LLM_TYPE_Q8_0_R16) == LLM_TYPE_Q8_0);
    CHECK(llm_row_bytes(LLM_TYPE_IQ4_NL_R16, 64)
          == llm_row_bytes(LLM_TYPE_IQ4_NL, 64)
          && llm_row_bytes(LLM_TYPE_MXFP4_R16, 64)
          == llm_row_bytes(LLM_TYPE_MXFP4, 64),
          "a regrouped row takes its source row's bytes");
    llm_simd_force(LLM_SIMD_SCALAR);
    CHECK(llm_repack_type(LLM_TYPE_IQ4_NL, 48) == LLM_TYPE_IQ4_NL,
          "the scalar level keeps the file layout");
    llm_simd_force(llm_simd_best());
    if (llm_simd_supported(LLM_SIMD_AVX512)) {
        llm_simd_force(LLM_SIMD_AVX512);
        CHECK(llm_repack_type(LLM_TYPE_IQ4_NL, 48) == LLM_TYPE_IQ4_NL_R16
              && llm_repack_type(LLM_TYPE_MXFP4, 16) == LLM_TYPE_MXFP4_R16
              && llm_repack_type(LLM_TYPE_MXFP4, 40) == LLM_TYPE_MXFP4
              && llm_repack_type(LLM_TYPE_IQ4_XS, 48) == LLM_TYPE_IQ4_XS_R16
              && llm_repack_type(LLM_TYPE_Q2_K, 32) == LLM_TYPE_Q2_K_R16
              && llm_repack_type(LLM_TYPE_Q3_K, 64) == LLM_TYPE_Q3_K_R16
              && llm_repack_type(LLM_TYPE_Q3_K, 24) == LLM_TYPE_Q3_K
              && llm_repack_type(LLM_TYPE_Q8_0, 32) == LLM_TYPE_Q8_0_R16
              && llm_repack_type(LLM_TYPE_Q8_0, 40) == LLM_TYPE_Q8_0
              && llm_repack_type(LLM_TYPE_Q4_K, 48) == LLM_TYPE_Q4_K_R16
              && llm_repack_type(LLM_TYPE_Q4_K, 8) == LLM_TYPE_Q4_K
              && llm_repack_type(LLM_TYPE_Q6_K, 48) == LLM_TYPE_Q6_K_R16
              && llm_repack_type(LLM_TYPE_Q5_K, 48) == LLM_TYPE_Q5_K,
              "AVX-512: IQ4_NL, MXFP4, IQ4_XS, Q2_K, Q3_K, Q8_0, Q4_K and"
              " Q6_K in runs of 16 rows regroup");
        llm_simd_force(llm_simd_best());
    }
    tk_end();

    /* AVX2 regroups Q2_K alone (a machine without AVX-512 runs it) */
    if (llm_simd_supported(LLM_SIMD_AVX2)) {
        llm_simd_force(LLM_SIMD_AVX2);
        tk_begin("Q2_K_R16: AVX2 (regroups Q2_K only) gemm bit-identical to"
                 " its scalar reference, to AVX2's file layout and to each"
                 " column alone, within 2e-5 of Q2_K");
        CHECK(llm_repack_type(LLM_TYPE_Q2_K, 32) == LLM_TYPE_Q2_K_R16
              && llm_repack_type(LLM_TYPE_Q3_K, 32) == LLM_TYPE_Q3_K
              && llm_repack_type(LLM_TYPE_IQ4_XS, 32) == LLM_TYPE_IQ4_XS,
              "AVX2 regroups Q2_K and nothing else");
        check_type(LLM_TYPE_Q2_K, LLM_TYPE_Q2_K_R16, LLM_SIMD_AVX2);
        tk_end();
    }
    if (!llm_simd_supported(LLM_SIMD_AVX512)) {
        tk_skip("IQ4_NL_R16, MXFP4_R16", "no AVX-512 here");
        llm_simd_force(llm_simd_best());
        return tk_done();
    }
    llm_simd_force(LLM_SIMD_AVX512);
    tk_begin("IQ4_NL_R16: AVX-512 gemm bit-identical to its scalar"
             " reference, to the file layout and to each column alone,"
             " within 2e-5 of IQ4_NL");
    check_type(LLM_TYPE_IQ4_NL, LLM_TYPE_IQ4_NL_R16, LLM_SIMD_AVX512);
    tk_end();
    tk_begin("MXFP4_R16: AVX-512 gemm bit-identical to its scalar"
             " reference, to the file layout and to each column alone,"
             " within 2e-5 of MXFP4");
    check_type(LLM_TYPE_MXFP4, LLM_TYPE_MXFP4_R16, LLM_SIMD_AVX512);
    tk_end();
    tk_begin("IQ4_XS_R16: AVX-512 gemm bit-identical to its scalar"
             " reference, to the file layout and to each column alone,"
             " within 2e-5 of IQ4_XS");
    check_type(LLM_TYPE_IQ4_XS, LLM_TYPE_IQ4_XS_R16, LLM_SIMD_AVX512);
    tk_end();
    tk_begin("Q2_K_R16: AVX-512 gemm bit-identical to its scalar"
             " reference, to the file layout and to each column alone,"
             " within 2e-5 of Q2_K");
    check_type(LLM_TYPE_Q2_K, LLM_TYPE_Q2_K_R16, LLM_SIMD_AVX512);
    tk_end();
    tk_begin("Q3_K_R16: AVX-512 gemm bit-identical to its scalar"
             " reference, to the file layout and to each column alone,"
             " within 2e-5 of Q3_K");
    check_type(LLM_TYPE_Q3_K, LLM_TYPE_Q3_K_R16, LLM_SIMD_AVX512);
    tk_end();
    tk_begin("Q8_0_R16: AVX-512 gemm bit-identical to its scalar"
             " reference, to the file layout and to each column alone,"
             " within 2e-5 of Q8_0");
    check_type(LLM_TYPE_Q8_0, LLM_TYPE_Q8_0_R16, LLM_SIMD_AVX512);
    tk_end();
    /* the sections above ran the AMX-INT8 tiles (8 columns and more)
     * where the CPU has them; the vpdpbusd tiles they replace too */
    if (llm_simd_amx_set(1)) {
        tk_begin("IQ4_NL_R16, MXFP4_R16, Q8_0_R16 with the AMX tiles off:"
                 " the same checks on the vpdpbusd tiles");
        llm_simd_amx_set(0);
        check_type(LLM_TYPE_IQ4_NL, LLM_TYPE_IQ4_NL_R16, LLM_SIMD_AVX512);
        check_type(LLM_TYPE_MXFP4, LLM_TYPE_MXFP4_R16, LLM_SIMD_AVX512);
        check_type(LLM_TYPE_Q8_0, LLM_TYPE_Q8_0_R16, LLM_SIMD_AVX512);
        llm_simd_amx_set(1);
        tk_end();
    } else {
        tk_skip("the AMX-INT8 tiles", "this CPU or kernel has none (the"
                " sections above ran the vpdpbusd tiles)");
    }
    tk_begin("Q4_K_R16: AVX-512 gemm bit-identical to its scalar"
             " reference, to the file layout and to each column alone,"
             " within 2e-5 of Q4_K");
    check_type(LLM_TYPE_Q4_K, LLM_TYPE_Q4_K_R16, LLM_SIMD_AVX512);
    tk_end();
    tk_begin("Q6_K_R16: AVX-512 gemm bit-identical to its scalar"
             " reference, to the file layout and to each column alone,"
             " within 2e-5 of Q6_K");
    check_type(LLM_TYPE_Q6_K, LLM_TYPE_Q6_K_R16, LLM_SIMD_AVX512);
    tk_end();
    llm_simd_force(llm_simd_best());
    return tk_done();
}
