/*
 * IQ1_S and IQ1_M (kernels/quant_iq1.c, iq1_grids.c, iq1_*.c).
 *
 * 1. The type table: ggml's ids, block sizes, activation type, supported.
 * 2. The grid: 2048 points, every value -1, 0 or 1, distinct and
 *    ascending, the FNV-1a 64 its generator wrote, and sample points as
 *    ggml-common.h's iq1s_grid writes them (copied here).
 * 3. Hand-built blocks of each type dequantize exactly to the values the
 *    definition gives, computed here from the sample points.
 * 4. Per SIMD level, on random blocks: vec_dot against the scalar
 *    reference (bit-identical for one-block rows: exact integer block
 *    sums, the same float per block; within 1e-6 of the magnitudes
 *    otherwise, the float order, except on NEON: bit-identical, as
 *    aarch64 builds fuse no multiply-add) and against the float64 sum of the
 *    dequantized products; gemm columns bit-identical to vec_dot and to
 *    the same column computed alone (batch invariance).
 * 5. Real data ($LLM_SHARED/reference, skipped when absent): every IQ1
 *    tensor of the llama.cpp-quantized files has the table's byte size
 *    and dequantizes near the f32 model's tensor (relative RMS error);
 *    and per grid point and element, the f32 weights of every group that
 *    llama.cpp coded with that point, as w / dl - delta, average within
 *    0.5 of the engine's grid value (a wrong grid value fails it).
 */

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/quant.h"
#include "kernels/kernels_common.h"
#include "model/gguf.h"
#include "testkit.h"

/* FNV-1a 64 of llm_iq1_grid's bytes, as tools/ref/iq1_grid.py wrote it. */
#define GRID_FNV  0x6703ed863501ae2eull

/* Sample points of ggml-common.h's iq1s_grid: index, 64-bit word (byte j
 * is element j as int8). */
static const struct { unsigned i; uint64_t w; }  samples[] = {
    { 0x000, 0xffffffffffffffffull }, { 0x001, 0xffffffffffffff01ull },
    { 0x002, 0xffffffffffff0000ull }, { 0x155, 0xff00000001010000ull },
    { 0x2aa, 0x00ffff01ff000001ull }, { 0x3ff, 0x0000000000ff01ffull },
    { 0x400, 0x0000000000ff0100ull }, { 0x555, 0x00010001010100ffull },
    { 0x6ab, 0x010000ff00000001ull }, { 0x7fe, 0x01010101010101ffull },
    { 0x7ff, 0x0101010101010101ull },
};
#define N_SAMPLES  (sizeof(samples) / sizeof(samples[0]))

static const llm_type_t  types[] = { LLM_TYPE_IQ1_S, LLM_TYPE_IQ1_M };
#define N_TYPES  (sizeof(types) / sizeof(types[0]))

static uint64_t  rng_state = 0x9e3779b97f4a7c15ull;

static float
rng_normal(void)
{
    float  u1 = ((tk_xorshift64(&rng_state) >> 40) + 0.5f) / 16777216.0f;
    float  u2 = ((tk_xorshift64(&rng_state) >> 40) + 0.5f) / 16777216.0f;

    return sqrtf(-2 * logf(u1)) * cosf(6.2831853f * u2);
}


/* Element j of 64-bit grid word w. */
static int
elem(uint64_t w, int j)
{
    return (int8_t) (w >> 8 * j);
}


static void
test_type_table(void)
{
    static const struct {
        llm_type_t   t;
        uint32_t     id, bytes;
        const char  *name;
    } want[] = {
        { LLM_TYPE_IQ1_S, 19, 50, "IQ1_S" },
        { LLM_TYPE_IQ1_M, 29, 56, "IQ1_M" },
    };

    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
        const llm_type_info_t  *ti = llm_type_info(want[i].id);

        CHECK((uint32_t) want[i].t == want[i].id, "%s id", want[i].name);
        REQUIRE(ti != NULL, "%s known", want[i].name);
        CHECK(ti->block == 256 && ti->block_bytes == want[i].bytes,
              "%s block %u x %u bytes", want[i].name, ti->block,
              ti->block_bytes);
        CHECK(ti->supported, "%s supported", want[i].name);
        CHECK(strcmp(ti->name, want[i].name) == 0, "name %s", ti->name);
        CHECK(strcmp(llm_gguf_type_name(want[i].id), want[i].name) == 0,
              "gguf name %s", llm_gguf_type_name(want[i].id));
        CHECK(llm_type_vec_dot_type(want[i].t) == LLM_TYPE_Q8_K, "%s act",
              want[i].name);
        CHECK(llm_row_bytes(want[i].id, 4 * 256) == 4 * want[i].bytes,
              "%s row", want[i].name);
        CHECK(llm_row_bytes(want[i].id, 257) == 0, "%s odd row",
              want[i].name);
    }
    tk_end_as("type table: IQ1_S 19 (50 bytes), IQ1_M 29 (56 bytes), Q8_K");
}


static void
test_grid(void)
{
    uint64_t  h = 0xcbf29ce484222325ull;
    int       bad = 0, order = 0, wrong = 0;

    for (int i = 0; i < 2048; i++) {
        uint64_t  w = llm_iq1_grid[i];

        for (int j = 0; j < 8; j++) {
            int  v = elem(w, j);

            bad += v < -1 || v > 1;
            h = (h ^ ((w >> 8 * j) & 0xff)) * 0x100000001b3ull;
        }
        if (i > 0) {
            /* ascending as base-3 numbers, element 7 the most significant:
             * strictly, so also distinct */
            int  c = 0;

            for (int j = 7; j >= 0 && c == 0; j--) {
                c = elem(w, j) - elem(llm_iq1_grid[i - 1], j);
            }
            order += c <= 0;
        }
    }
    for (size_t k = 0; k < N_SAMPLES; k++) {
        wrong += llm_iq1_grid[samples[k].i] != samples[k].w;
    }
    CHECK(bad == 0, "%d values outside -1..1", bad);
    CHECK(order == 0, "%d points out of order or repeated", order);
    CHECK(h == GRID_FNV, "FNV-1a 64 %016llx, want %016llx",
          (unsigned long long) h, (unsigned long long) GRID_FNV);
    CHECK(wrong == 0, "%d of %zu sample points differ from ggml-common.h",
          wrong, N_SAMPLES);
    tk_end_as("grid: 2048 points in {-1,0,1}^8, distinct, ascending, "
              "FNV-1a %016llx, samples as ggml's", (unsigned long long) h);
}


/*
 * Two IQ1_S blocks, d = 0.5 and -3: group l of sub-block ib takes sample
 * point (4 ib + l + 5 b) % N_SAMPLES (its low byte in qs, high 3 bits in
 * qh), scale bits ib ((2 ib + 1) * d), delta sign ib & 1 (block 1: the
 * opposite).  Every value is exact in float.
 */
static void
test_iq1_s_block(void)
{
    uint8_t  blk[2 * 50];
    float    y[512];
    int      bad = 0;

    memset(blk, 0, sizeof(blk));
    blk[0] = 0x00; blk[1] = 0x38;       /* fp16 0.5 */
    blk[50] = 0x00; blk[51] = 0xc2;     /* fp16 -3 */
    for (int b = 0; b < 2; b++) {
        uint8_t  *p = blk + 50 * b;

        for (int ib = 0; ib < 8; ib++) {
            unsigned  qh = (unsigned) ib << 12
                           | (unsigned) ((ib & 1) ^ b) << 15;

            for (int l = 0; l < 4; l++) {
                unsigned  i = samples[(4 * ib + l + 5 * b) % N_SAMPLES].i;

                p[2 + 4 * ib + l] = (uint8_t) i;
                qh |= (i >> 8) << 3 * l;
            }
            p[34 + 2 * ib] = (uint8_t) qh;
            p[35 + 2 * ib] = (uint8_t) (qh >> 8);
        }
    }
    llm_dequantize_row(LLM_TYPE_IQ1_S, blk, y, 512);
    for (int b = 0; b < 2; b++) {
        for (int ib = 0; ib < 8; ib++) {
            double  dl = (b ? -3.0 : 0.5) * (2 * ib + 1);
            double  delta = ((ib & 1) ^ b) ? -0.125 : 0.125;

            for (int l = 0; l < 4; l++) {
                uint64_t  w = samples[(4 * ib + l + 5 * b) % N_SAMPLES].w;

                for (int j = 0; j < 8; j++) {
                    bad += y[256 * b + 32 * ib + 8 * l + j]
                           != dl * (elem(w, j) + delta);
                }
            }
        }
    }
    CHECK(bad == 0, "%d values wrong (y0 %g y32 %g y300 %g)", bad, y[0],
          y[32], y[300]);
    CHECK(y[0] == -0.4375f && y[7] == -0.4375f && y[8] == 0.5625f
          && y[32] == 1.3125f, "spot values %g %g %g %g", y[0], y[7], y[8],
          y[32]);
    tk_end_as("IQ1_S: hand-built blocks dequantize exactly");
}


/*
 * One IQ1_M block, d = fp16 0x3a5b (its four nibbles b, 5, a, 3 spread
 * over the top nibbles of the scale words, the lowest first): group l of
 * sub-block ib takes sample point (4 ib + l) % N_SAMPLES, half h of
 * sub-block ib scale bits (2 ib + h + 3) % 8, group delta negative when
 * (ib + l) % 3 == 0.
 */
static void
test_iq1_m_block(void)
{
    static const unsigned  dn[4] = { 0xb, 0x5, 0xa, 0x3 };
    uint8_t                blk[56];
    unsigned               sc[4] = { 0, 0, 0, 0 };
    float                  y[256];
    double                 d = (1024 + 0x25b) / 2048.0;    /* 0x3a5b */
    int                    bad = 0;

    memset(blk, 0, sizeof(blk));
    for (int ib = 0; ib < 8; ib++) {
        for (int l = 0; l < 4; l++) {
            unsigned  i = samples[(4 * ib + l) % N_SAMPLES].i;
            unsigned  nib = (i >> 8) | ((ib + l) % 3 == 0) << 3;

            blk[4 * ib + l] = (uint8_t) i;
            blk[32 + 2 * ib + l / 2] |= (uint8_t) (nib << 4 * (l % 2));
        }
        for (int h = 0; h < 2; h++) {
            sc[ib / 2] |= (unsigned) ((2 * ib + h + 3) % 8)
                          << (6 * (ib % 2) + 3 * h);
        }
    }
    for (int k = 0; k < 4; k++) {
        sc[k] |= dn[k] << 12;
        blk[48 + 2 * k] = (uint8_t) sc[k];
        blk[49 + 2 * k] = (uint8_t) (sc[k] >> 8);
    }
    llm_dequantize_row(LLM_TYPE_IQ1_M, blk, y, 256);
    for (int ib = 0; ib < 8; ib++) {
        for (int l = 0; l < 4; l++) {
            uint64_t  w = samples[(4 * ib + l) % N_SAMPLES].w;
            double    dl = d * (2 * ((2 * ib + l / 2 + 3) % 8) + 1);
            double    delta = (ib + l) % 3 == 0 ? -0.125 : 0.125;

            for (int j = 0; j < 8; j++) {
                bad += y[32 * ib + 8 * l + j] != dl * (elem(w, j) + delta);
            }
        }
    }
    CHECK(bad == 0, "%d values wrong (y0 %g y16 %g y255 %g)", bad, y[0],
          y[16], y[255]);
    CHECK(fabs(y[0] - d * 7 * -1.125) < 1e-7, "y0 %g", y[0]);
    tk_end_as("IQ1_M: hand-built block (d spread over the scale words) "
              "dequantizes exactly");
}


/* Random weight blocks: every byte random, then d of plausible size
 * (IQ1_M: written into the scale words' top nibbles). */
static void
random_blocks(llm_type_t t, uint8_t *w, int64_t n)
{
    size_t  rb = llm_row_bytes(t, n);

    for (size_t i = 0; i < rb; i++) {
        w[i] = (uint8_t) tk_xorshift64(&rng_state);
    }
    for (int64_t i = 0; i < n / 256; i++) {
        uint16_t  d = llm_fp32_to_fp16(0.01f * rng_normal());

        if (t == LLM_TYPE_IQ1_S) {
            memcpy(w + 50 * i, &d, 2);
        } else {
            uint8_t  *sc = w + 56 * i + 48;

            for (int k = 0; k < 4; k++) {
                sc[2 * k + 1] = (uint8_t) ((sc[2 * k + 1] & 0x0f)
                                           | ((d >> 4 * k) & 0xf) << 4);
            }
        }
    }
}


/*
 * Per SIMD level: NR rows of N random weights against NC activation rows
 * quantized to Q8_K.  Dispatched and reference vec_dot within 1e-5 of the
 * float64 sum of dequantized products (relative to the sum of their
 * magnitudes) and within 1e-6 of each other; one-block rows (every block
 * of a row on its own) bit-identical to the reference; gemm of all
 * columns, and of each column alone, bit-identical to vec_dot.
 */
static void
test_dot(llm_simd_t level)
{
    enum { N = 2048, NR = 3, NC = 5, NB = N / 256 };
    static uint8_t  wq[NR][N], xq[NC][N * 2];
    static float    wd[NR][N], xf[NC][N], xd[NC][N], y[NC * NR], y1[NR];
    int             bad, same, exact, alone;

    if (llm_simd_force(level) != 0) {
        return;
    }
    for (size_t ti = 0; ti < N_TYPES; ti++) {
        llm_type_t  t = types[ti];
        size_t      wb = llm_row_bytes(t, 256), xb = llm_row_bytes(
                                                        LLM_TYPE_Q8_K, 256);
        float       s, sr;

        for (int r = 0; r < NR; r++) {
            random_blocks(t, wq[r], N);
            llm_dequantize_row(t, wq[r], wd[r], N);
        }
        for (int c = 0; c < NC; c++) {
            for (int j = 0; j < N; j++) {
                xf[c][j] = rng_normal() * (c + 1);
            }
            llm_quantize_act(LLM_TYPE_Q8_K, xf[c], xq[c], N);
            llm_dequantize_row(LLM_TYPE_Q8_K, xq[c], xd[c], N);
        }
        llm_gemm(t, N, NR, NC, wq, sizeof(wq[0]), xq, sizeof(xq[0]), y, NR);

        bad = same = exact = alone = 0;
        for (int c = 0; c < NC; c++) {
            llm_gemm(t, N, NR, 1, wq, sizeof(wq[0]), xq[c], sizeof(xq[0]),
                     y1, NR);
            for (int r = 0; r < NR; r++) {
                double  ref = 0, norm = 0;

                for (int j = 0; j < N; j++) {
                    ref += (double) wd[r][j] * xd[c][j];
                    norm += fabs((double) wd[r][j] * xd[c][j]);
                }
                llm_vec_dot(t, N, &s, wq[r], xq[c]);
                llm_vec_dot_ref(t, N, &sr, wq[r], xq[c]);
                bad += !(fabs(s - ref) <= 1e-5 * norm);
                bad += !(fabs(sr - ref) <= 1e-5 * norm);
                bad += !(fabs(s - sr) <= 1e-6 * norm);
                /* no fused multiply-add on aarch64: the reference's bits */
                bad += level == LLM_SIMD_NEON
                       && memcmp(&s, &sr, sizeof(float)) != 0;
                same += memcmp(&s, &y[c * NR + r], sizeof(float)) == 0;
                alone += memcmp(&s, &y1[r], sizeof(float)) == 0;
                if (bad && r == 0 && c == 0) {
                    tk_note("%s %s: dot %.9g ref %.9g f64 %.9g norm %.3g\n",
                            llm_simd_name(level), llm_type_name(t), s, sr,
                            ref, norm);
                }
                for (int b = 0; b < NB; b++) {
                    llm_vec_dot(t, 256, &s, wq[r] + b * wb, xq[c] + b * xb);
                    llm_vec_dot_ref(t, 256, &sr, wq[r] + b * wb,
                                    xq[c] + b * xb);
                    exact += memcmp(&s, &sr, sizeof(float)) == 0;
                }
            }
        }
        CHECK(bad == 0, "%s %s: %d dots off", llm_simd_name(level),
              llm_type_name(t), bad);
        CHECK(exact == NR * NC * NB, "%s %s: %d one-block dots differ from "
              "the reference", llm_simd_name(level), llm_type_name(t),
              NR * NC * NB - exact);
        CHECK(same == NR * NC, "%s %s: gemm differs from vec_dot in %d",
              llm_simd_name(level), llm_type_name(t), NR * NC - same);
        CHECK(alone == NR * NC, "%s %s: a column alone differs in %d",
              llm_simd_name(level), llm_type_name(t), NR * NC - alone);
    }
    tk_end_as("%s: IQ1_S, IQ1_M vec_dot equal the reference per block and "
              "the dequantized dot; gemm batch-invariant",
              llm_simd_name(level));
    llm_simd_force(LLM_SIMD_SCALAR);
}


/* Per grid point and element: sum and count of w / dl - delta. */
typedef struct {
    double  sum[2048][8];
    int     n[2048];
} grid_stats_t;


/*
 * Row r of tensor tq (ne0 values at q, f32 original x): add each group's
 * w / dl - delta to its grid point's sums, from the block layout decoded
 * here (kernels_common.h's description).
 */
static void
grid_stats_row(grid_stats_t *st, uint32_t type, const uint8_t *q,
    const float *x, int64_t ne0)
{
    for (int64_t b = 0; b < ne0 / 256; b++, x += 256) {
        const uint8_t  *p = q + b * (type == LLM_TYPE_IQ1_S ? 50 : 56);
        float           d;

        if (type == LLM_TYPE_IQ1_S) {
            d = llm_fp16_to_fp32((uint16_t) (p[0] | p[1] << 8));
        } else {
            d = llm_fp16_to_fp32((uint16_t) (p[49] >> 4 | (p[51] & 0xf0)
                                             | (p[53] >> 4) << 8
                                             | (p[55] & 0xf0) << 8));
        }
        for (int ib = 0; ib < 8; ib++) {
            for (int l = 0; l < 4; l++) {
                unsigned  i, hi, neg, s;

                if (type == LLM_TYPE_IQ1_S) {
                    unsigned  qh = p[34 + 2 * ib] | p[35 + 2 * ib] << 8;

                    i = p[2 + 4 * ib + l] | ((qh >> 3 * l) & 7) << 8;
                    s = qh >> 12 & 7;
                    neg = qh >> 15;
                } else {
                    unsigned  sc = p[48 + 2 * (ib / 2)]
                                   | p[49 + 2 * (ib / 2)] << 8;

                    hi = p[32 + 2 * ib + l / 2] >> 4 * (l % 2);
                    i = p[4 * ib + l] | (hi & 7) << 8;
                    s = sc >> (6 * (ib % 2) + 3 * (l / 2)) & 7;
                    neg = hi >> 3 & 1;
                }
                double  dl = (double) d * (2 * s + 1);

                if (dl == 0) {
                    continue;
                }
                for (int j = 0; j < 8; j++) {
                    st->sum[i][j] += x[32 * ib + 8 * l + j] / dl
                                     - (neg ? -0.125 : 0.125);
                }
                st->n[i]++;
            }
        }
    }
}


static int
iq1_family(uint32_t t)
{
    return t == LLM_TYPE_IQ1_S || t == LLM_TYPE_IQ1_M;
}


/* Row hook of tk_qref_check: the row's groups into the grid statistics. */
static void
iq1_row(void *ud, uint32_t type, const uint8_t *q, const float *deq,
    const float *f, int64_t n)
{
    (void) deq;
    grid_stats_row(ud, type, q, f, n);
}


/*
 * Every IQ1 tensor of reference file qname against the same tensor of
 * fname (F32): byte size, finite values, relative RMS error at most
 * max_err; then the grid check over all of them (points used by at least
 * 8 groups).
 */
static void
test_ref_file(const char *qname, const char *fname, double max_err)
{
    static grid_stats_t  st;
    tk_qref_t            c = { qname, fname, iq1_family, max_err, 0, 0,
                               iq1_row, &st };
    tk_qref_stats_t      rs;
    double               gworst = 0;
    int                  points = 0, off = 0;

    tk_begin("reference %s", qname);
    memset(&st, 0, sizeof(st));
    if (tk_qref_check(&c, &rs) != 0) {
        return;
    }
    CHECK(rs.tensors > 0, "%s: no IQ1_S/IQ1_M tensors", qname);

    for (int i = 0; i < 2048; i++) {
        if (st.n[i] < 8) {
            continue;
        }
        points++;
        for (int j = 0; j < 8; j++) {
            double  m = st.sum[i][j] / st.n[i];
            double  e = fabs(m - elem(llm_iq1_grid[i], j));

            gworst = e > gworst ? e : gworst;
            if (e > 0.5) {
                if (off++ < 5) {
                    tk_note("point %d element %d: data mean %.3f, grid %d "
                            "(%d groups)\n", i, j, m,
                            elem(llm_iq1_grid[i], j), st.n[i]);
                }
            }
        }
    }
    CHECK(points > 1000, "%s: only %d grid points used 8 times", qname,
          points);
    CHECK(off == 0, "%s: %d grid values off the data", qname, off);
    tk_end_as("reference %s: %llu tensors, worst rel RMS %.4f vs f32; "
              "%d grid points: data means within %.3f of the grid", qname,
              (unsigned long long) rs.tensors, rs.worst, points, gworst);
}

int
main(int argc, char **argv)
{
    (void) argc;
    (void) argv;

    setvbuf(stdout, NULL, _IOLBF, 0);
    llm_simd_init();

    test_type_table();
    test_grid();
    test_iq1_s_block();
    test_iq1_m_block();
    for (int l = 0; l < LLM_SIMD_COUNT; l++) {
        if (llm_simd_supported((llm_simd_t) l)) {
            test_dot((llm_simd_t) l);
        } else {
            char  name[64];

            snprintf(name, sizeof(name), "dot %s", llm_simd_name(l));
            tk_skip(name, "not this CPU or build");
        }
    }
    test_ref_file("ref-qwen3moe-iq1_s", "ref-qwen3moe-f32", 0.65);
    test_ref_file("ref-qwen3moe-iq1_m", "ref-qwen3moe-f32", 0.65);

    return tk_done();
}
