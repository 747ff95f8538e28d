/*
 * IQ4_NL, IQ4_XS and MXFP4 (kernels/quant_iq4.c, quant_mxfp4.c).
 *
 * 1. The type table: ggml's ids, block sizes, activation types, supported.
 * 2. Per type, hand-built blocks dequantize to the values the format's
 *    definition gives (levels written out here, not taken from the
 *    engine's tables), exactly; for MXFP4 also the extreme exponents.
 * 3. Per type and SIMD level: vec_dot and gemm against the float64 sum of
 *    the dequantized weights times the dequantized activations, within a
 *    tight tolerance, on random blocks.
 * 4. Real data ($LLM_SHARED/reference, skipped when absent): every tensor
 *    of these types in the llama.cpp-quantized files has the byte size
 *    the table gives and dequantizes to finite values near the f32
 *    model's (relative RMS error and RMS ratio).
 */

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/quant.h"
#include "model/gguf.h"
#include "testkit.h"

/* The definitions' levels: ggml-common.h's kvalues_iq4nl, and the E2M1
 * values (OCP MX spec) of each 4-bit code. */
static const float  iq4_levels[16] = {
    -127, -104, -83, -65, -49, -35, -22, -10,
    1, 13, 25, 38, 53, 69, 89, 113
};
static const float  e2m1_values[16] = {
    0, 0.5f, 1, 1.5f, 2, 3, 4, 6,
    -0.0f, -0.5f, -1, -1.5f, -2, -3, -4, -6
};

static const llm_type_t  types[] = {
    LLM_TYPE_IQ4_NL, LLM_TYPE_IQ4_XS, LLM_TYPE_MXFP4
};
#define N_TYPES  (sizeof(types) / sizeof(types[0]))

static uint64_t  rng_state = 0x2545f4914f6cdd1dull;

static float
rng_normal(void)
{
    float  u1 = ((tk_xorshift64(&rng_state) >> 40) + 0.5f) / 16777216.0f;
    float  u2 = ((tk_xorshift64(&rng_state) >> 40) + 0.5f) / 16777216.0f;

    return sqrtf(-2 * logf(u1)) * cosf(6.2831853f * u2);
}


static void
test_type_table(void)
{
    static const struct {
        llm_type_t   t;
        uint32_t     id, block, bytes;
        const char  *name;
        llm_type_t   act;
    } want[] = {
        { LLM_TYPE_IQ4_NL, 20, 32, 18, "IQ4_NL", LLM_TYPE_Q8_0 },
        { LLM_TYPE_IQ4_XS, 23, 256, 136, "IQ4_XS", LLM_TYPE_Q8_K },
        { LLM_TYPE_MXFP4, 39, 32, 17, "MXFP4", LLM_TYPE_Q8_0 },
    };

    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
        const llm_type_info_t  *ti = llm_type_info(want[i].id);

        CHECK((uint32_t) want[i].t == want[i].id, "%s id", want[i].name);
        REQUIRE(ti != NULL, "%s known", want[i].name);
        CHECK(ti->block == want[i].block && ti->block_bytes == want[i].bytes,
              "%s block %u x %u bytes", want[i].name, ti->block,
              ti->block_bytes);
        CHECK(ti->supported, "%s supported", want[i].name);
        CHECK(strcmp(ti->name, want[i].name) == 0, "name %s", ti->name);
        CHECK(strcmp(llm_gguf_type_name(want[i].id), want[i].name) == 0,
              "gguf name %s", llm_gguf_type_name(want[i].id));
        CHECK(llm_type_vec_dot_type(want[i].t) == want[i].act, "%s act",
              want[i].name);
        CHECK(llm_row_bytes(want[i].id, 4 * want[i].block)
              == 4 * want[i].bytes, "%s row", want[i].name);
        CHECK(llm_row_bytes(want[i].id, want[i].block + 1) == 0,
              "%s odd row", want[i].name);
    }
    tk_end_as("type table: IQ4_NL 20, IQ4_XS 23, MXFP4 39");
}


/* Two IQ4_NL blocks: d = 0.5 then -2; codes j and 15 - j. */
static void
test_iq4_nl_block(void)
{
    uint8_t  b[2 * 18];
    float    y[64];
    int      bad = 0;

    memset(b, 0, sizeof(b));
    b[0] = 0x00; b[1] = 0x38;           /* fp16 0.5 */
    b[18] = 0x00; b[19] = 0xc0;         /* fp16 -2 */
    for (int j = 0; j < 16; j++) {
        b[2 + j] = (uint8_t) (j | (15 - j) << 4);
        b[20 + j] = (uint8_t) ((15 - j) | j << 4);
    }
    llm_dequantize_row(LLM_TYPE_IQ4_NL, b, y, 64);
    for (int j = 0; j < 16; j++) {
        bad += y[j] != 0.5f * iq4_levels[j];
        bad += y[j + 16] != 0.5f * iq4_levels[15 - j];
        bad += y[32 + j] != -2.0f * iq4_levels[15 - j];
        bad += y[48 + j] != -2.0f * iq4_levels[j];
    }
    CHECK(bad == 0, "%d values wrong (y0 %g y16 %g y32 %g)", bad, y[0],
          y[16], y[32]);
    CHECK(y[0] == -63.5f && y[8] == 0.5f && y[31] == -63.5f
          && y[15] == 56.5f, "spot values %g %g %g %g", y[0], y[8], y[31],
          y[15]);
    tk_end_as("IQ4_NL: hand-built blocks dequantize exactly");
}


/*
 * One IQ4_XS block, d = 1: sub-block scales ls = 0, 63, 32, 33, 40, 20,
 * 5, 50 (6 bits: low nibbles in scales_l, high pairs in scales_h, packed
 * here by hand), codes (k + j) & 15 and 15 - k in sub-block j.
 */
static void
test_iq4_xs_block(void)
{
    static const int  ls[8] = { 0, 63, 32, 33, 40, 20, 5, 50 };
    uint8_t           b[136];
    float             y[256];
    int               bad = 0;

    memset(b, 0, sizeof(b));
    b[0] = 0x00; b[1] = 0x3c;           /* fp16 1 */
    b[2] = 0xac; b[3] = 0xc6;           /* scales_h 0xc6ac */
    b[4] = 0xf0; b[5] = 0x10; b[6] = 0x48; b[7] = 0x25;
    for (int j = 0; j < 8; j++) {
        for (int k = 0; k < 16; k++) {
            b[8 + 16 * j + k] = (uint8_t) (((k + j) & 15) | (15 - k) << 4);
        }
    }
    llm_dequantize_row(LLM_TYPE_IQ4_XS, b, y, 256);
    for (int j = 0; j < 8; j++) {
        for (int k = 0; k < 16; k++) {
            bad += y[32 * j + k] != (ls[j] - 32) * iq4_levels[(k + j) & 15];
            bad += y[32 * j + 16 + k] != (ls[j] - 32) * iq4_levels[15 - k];
        }
    }
    CHECK(bad == 0, "%d values wrong (y0 %g y32 %g y255 %g)", bad, y[0],
          y[32], y[255]);
    CHECK(y[0] == 4064 && y[32] == -3224 && y[64] == 0 && y[96] == -65,
          "spot values %g %g %g %g", y[0], y[32], y[64], y[96]);
    tk_end_as("IQ4_XS: hand-built block (6-bit scales -32..31) "
              "dequantizes exactly");
}


/*
 * MXFP4 blocks with E8M0 exponents 127 (scale 1: the E2M1 values
 * themselves), 130 (x 8), 0 and 1 (2^-127 and 2^-126 as E8M0: subnormal
 * floats), 254 and 255 (ggml reads 255 as 2^128, not NaN; codes past
 * 3 then overflow to infinity, as in ggml): codes j and 15 - j.
 */
static void
test_mxfp4_block(void)
{
    static const uint8_t  e[6] = { 127, 130, 0, 1, 254, 255 };
    static const int      p2[6] = { 0, 3, -127, -126, 127, 128 };
    uint8_t               b[6 * 17];
    float                 y[6 * 32];
    int                   bad = 0;

    for (int i = 0; i < 6; i++) {
        b[17 * i] = e[i];
        for (int j = 0; j < 16; j++) {
            b[17 * i + 1 + j] = (uint8_t) (j | (15 - j) << 4);
        }
    }
    llm_dequantize_row(LLM_TYPE_MXFP4, b, y, 6 * 32);
    for (int i = 0; i < 6; i++) {
        for (int j = 0; j < 16; j++) {
            /* 2^p2 * v: as two exact steps, 2^128 is not a float */
            float  a = ldexpf(e2m1_values[j], p2[i] / 2);
            float  c = ldexpf(e2m1_values[15 - j], p2[i] / 2);

            a = ldexpf(a, p2[i] - p2[i] / 2);
            c = ldexpf(c, p2[i] - p2[i] / 2);
            bad += y[32 * i + j] != a;
            bad += y[32 * i + 16 + j] != c;
        }
    }
    CHECK(bad == 0, "%d values wrong", bad);
    CHECK(y[1] == 0.5f && y[7] == 6.0f && y[16] == -6.0f && y[39] == 48.0f
          && y[65] == 0x1p-128f && y[97] == 0x1p-127f,
          "spot values %g %g %g %g %g %g", y[1], y[7], y[16], y[39], y[65],
          y[97]);
    tk_end_as("MXFP4: hand-built blocks dequantize exactly (E8M0 0, 1, "
              "127, 130, 254, 255)");
}


/* Random weight blocks: random code bytes, scales of plausible size. */
static void
random_blocks(llm_type_t t, uint8_t *w, int64_t n)
{
    size_t  rb = llm_row_bytes(t, n);

    for (size_t i = 0; i < rb; i++) {
        w[i] = (uint8_t) tk_xorshift64(&rng_state);
    }
    if (t == LLM_TYPE_IQ4_NL) {
        for (int64_t i = 0; i < n / 32; i++) {
            uint16_t  d = llm_fp32_to_fp16(0.01f * rng_normal());

            memcpy(w + 18 * i, &d, 2);
        }
    } else if (t == LLM_TYPE_IQ4_XS) {
        for (int64_t i = 0; i < n / 256; i++) {
            uint16_t  d = llm_fp32_to_fp16(0.001f * rng_normal());

            memcpy(w + 136 * i, &d, 2);
        }
    } else {
        for (int64_t i = 0; i < n / 32; i++) {
            w[17 * i] = (uint8_t) (118 + tk_xorshift64(&rng_state) % 12);
        }
    }
}


/*
 * Per SIMD level, rows of n = 1024 random blocks against 5 quantized
 * activation rows: vec_dot (dispatched and reference) and gemm within
 * 1e-5 of the float64 sum of dequantized products (relative to the sum of
 * their magnitudes), the dispatched vec_dot within 1e-6 of the scalar
 * reference's (exact block sums: only the float order differs); gemm
 * columns bit-identical to vec_dot at that level, also for rows one block
 * shorter (AVX2's octet tiles end with a block tail).
 */
static void
test_dot(llm_simd_t level)
{
    enum { N = 1024, NR = 3, NC = 5 };
    static uint8_t  wq[NR][N], xq[NC][N * 2];
    static float    wd[NR][N], xf[NC][N], xd[NC][N], y[NC * NR];
    static float    yt[NC * NR];
    int             bad, same;

    if (llm_simd_force(level) != 0) {
        return;
    }
    for (size_t ti = 0; ti < N_TYPES; ti++) {
        llm_type_t  t = types[ti], at = llm_type_vec_dot_type(t);
        int64_t     blk = llm_type_info(t)->block;
        float       s, sr;

        for (int r = 0; r < NR; r++) {
            random_blocks(t, wq[r], N);
            llm_dequantize_row(t, wq[r], wd[r], N);
        }
        for (int c = 0; c < NC; c++) {
            for (int j = 0; j < N; j++) {
                xf[c][j] = rng_normal() * (c + 1);
            }
            llm_quantize_act(at, xf[c], xq[c], N);
            llm_dequantize_row(at, xq[c], xd[c], N);
        }
        llm_gemm(t, N, NR, NC, wq, sizeof(wq[0]), xq, sizeof(xq[0]), y, NR);
        llm_gemm(t, N - blk, NR, NC, wq, sizeof(wq[0]), xq, sizeof(xq[0]),
                 yt, NR);

        bad = same = 0;
        for (int r = 0; r < NR; r++) {
            for (int c = 0; c < NC; c++) {
                double  ref = 0, norm = 0;

                for (int j = 0; j < N; j++) {
                    ref += (double) wd[r][j] * xd[c][j];
                    norm += fabs((double) wd[r][j] * xd[c][j]);
                }
                llm_vec_dot(t, N, &s, wq[r], xq[c]);
                llm_vec_dot_ref(t, N, &sr, wq[r], xq[c]);
                bad += !(fabs(s - ref) <= 1e-5 * norm);
                bad += !(fabs(sr - ref) <= 1e-5 * norm);
                bad += !(fabs(s - sr) <= 1e-6 * norm);     /* SIMD ~ ref */
                /* an odd number of blocks (the AVX-512 pairs' tail) */
                llm_vec_dot(t, N - blk, &s, wq[r], xq[c]);
                llm_vec_dot_ref(t, N - blk, &sr, wq[r], xq[c]);
                bad += !(fabs(s - sr) <= 1e-6 * norm);
                same += memcmp(&s, &yt[c * NR + r], sizeof(float)) == 0;
                llm_vec_dot(t, N, &s, wq[r], xq[c]);
                bad += !(fabs(y[c * NR + r] - ref) <= 1e-5 * norm);
                same += memcmp(&s, &y[c * NR + r], sizeof(float)) == 0;
                if (bad && r == 0 && c == 0) {
                    tk_note("%s %s: dot %.9g ref %.9g f64 %.9g norm %.3g\n",
                            llm_simd_name(level), llm_type_name(t), s, sr,
                            ref, norm);
                }
            }
        }
        CHECK(bad == 0, "%s %s: %d dots off the dequantized sum",
              llm_simd_name(level), llm_type_name(t), bad);
        CHECK(same == 2 * NR * NC, "%s %s: gemm differs from vec_dot in %d",
              llm_simd_name(level), llm_type_name(t), 2 * NR * NC - same);
    }
    tk_end_as("%s: IQ4_NL, IQ4_XS, MXFP4 vec_dot and gemm equal the "
              "dequantized dot", llm_simd_name(level));
    llm_simd_force(LLM_SIMD_SCALAR);
}


static int
iq4_family(uint32_t t)
{
    return t == LLM_TYPE_IQ4_NL || t == LLM_TYPE_IQ4_XS || t == LLM_TYPE_MXFP4;
}


/*
 * Every tensor of our types in reference file qname: byte size, finite
 * values, and against the same tensor of fname (F32): relative RMS error
 * at most max_err, RMS ratio within 0.8..1.25.
 */
static void
test_ref_file(const char *qname, const char *fname, double max_err)
{
    tk_qref_t        c = { qname, fname, iq4_family, max_err, 0.8, 1.25,
                           NULL, NULL };
    tk_qref_stats_t  st;

    tk_begin("reference %s", qname);
    if (tk_qref_check(&c, &st) != 0) {
        return;
    }
    CHECK(st.tensors > 0, "%s: no IQ4_NL/IQ4_XS/MXFP4 tensors", qname);
    tk_end_as("reference %s: %llu tensors finite, vs f32 worst rel RMS "
              "%.4f, RMS ratio %.3f", qname, (unsigned long long) st.tensors,
              st.worst, st.wratio);
}

int
main(int argc, char **argv)
{
    (void) argc;
    (void) argv;

    setvbuf(stdout, NULL, _IOLBF, 0);
    llm_simd_init();

    test_type_table();
    test_iq4_nl_block();
    test_iq4_xs_block();
    test_mxfp4_block();
    for (int l = 0; l < LLM_SIMD_COUNT; l++) {
        if (llm_simd_supported((llm_simd_t) l)) {
            test_dot((llm_simd_t) l);
        } else {
            char  name[64];

            snprintf(name, sizeof(name), "dot %s", llm_simd_name(l));
            tk_skip(name, "not this CPU or build");
        }
    }
    test_ref_file("ref-qwen3moe-iq4_nl", "ref-qwen3moe-f32", 0.1);
    test_ref_file("ref-qwen3moe-iq4_xs", "ref-qwen3moe-f32", 0.1);
    test_ref_file("ref-qwen3moe-mxfp4_moe", "ref-qwen3moe-f32", 0.15);
    test_ref_file("ref-minimax-m2-mxfp4_moe", "ref-minimax-m2-f32", 0.15);

    return tk_done();
}
