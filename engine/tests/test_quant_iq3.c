/*
 * IQ3_XXS and IQ3_S (kernels/quant_iq3.c, iq3_grids.c, iq3_*.c).
 *
 * 1. The type table: ggml's ids, block sizes, activation type, supported.
 * 2. The grids: every magnitude byte in the format's value set, entries
 *    distinct, a few entries as the definition writes them, and the
 *    FNV-1a 64 checksums of iq3_grids.c's comment.
 * 3. Per type, hand-built blocks dequantize exactly to the values the
 *    definition gives: scales, 9-bit indices, sign bits and IQ3_XXS's
 *    parity sign written out here.
 * 4. Per SIMD level: vec_dot (dispatched and reference) against the
 *    float64 sum of dequantized weights times dequantized activations,
 *    the dispatched kernel against the scalar reference, gemm columns
 *    bit-identical to vec_dot and to a one-column gemm (batch invariance).
 * 5. Real data ($LLM_SHARED/reference, skipped when absent): every IQ3
 *    tensor of the llama.cpp-quantized files has the table's byte size
 *    and dequantizes near the same tensor of the f32 model.
 */

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/quant.h"
#include "kernels/kernels_common.h"
#include "model/gguf.h"
#include "testkit.h"

static const llm_type_t  types[] = { LLM_TYPE_IQ3_XXS, LLM_TYPE_IQ3_S };
#define N_TYPES  (sizeof(types) / sizeof(types[0]))

static uint64_t  rng_state = 0x9e3779b97f4a7c15ull;

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
    } want[] = {
        { LLM_TYPE_IQ3_XXS, 18, 256, 98, "IQ3_XXS" },
        { LLM_TYPE_IQ3_S, 21, 256, 110, "IQ3_S" },
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
        CHECK(llm_type_vec_dot_type(want[i].t) == LLM_TYPE_Q8_K, "%s act",
              want[i].name);
        CHECK(llm_row_bytes(want[i].id, 4 * want[i].block)
              == 4 * want[i].bytes, "%s row", want[i].name);
        CHECK(llm_row_bytes(want[i].id, want[i].block + 32) == 0,
              "%s odd row", want[i].name);
    }
    tk_end_as("type table: IQ3_XXS 18 (98 bytes), IQ3_S 21 (110 bytes)");
}


static uint64_t
fnv1a64(const uint32_t *v, int n)
{
    uint64_t  h = 0xcbf29ce484222325ull;

    for (int i = 0; i < n; i++) {
        for (int k = 0; k < 4; k++) {
            h ^= (v[i] >> 8 * k) & 0xff;
            h *= 0x100000001b3ull;
        }
    }
    return h;
}


/*
 * One grid: n entries, each byte in the set allowed (a 64-bit set of
 * values), entries distinct (the generator also keeps them ascending,
 * as ggml-common.h lists them), checksum sum, spot entries.
 */
static void
check_grid(const char *name, const uint32_t *g, int n, uint64_t allowed,
    uint64_t sum, const int *at, const uint32_t *want, int nspot)
{
    int  bad_byte = 0, not_asc = 0, bad_spot = 0;

    for (int i = 0; i < n; i++) {
        for (int k = 0; k < 4; k++) {
            uint32_t  b = (g[i] >> 8 * k) & 0xff;

            bad_byte += b >= 64 || !((allowed >> b) & 1);
        }
        not_asc += i > 0 && g[i] <= g[i - 1];
    }
    for (int i = 0; i < nspot; i++) {
        bad_spot += g[at[i]] != want[i];
    }
    CHECK(bad_byte == 0, "%s: %d bytes outside the value set", name,
          bad_byte);
    CHECK(not_asc == 0, "%s: %d entries not above the one before", name,
          not_asc);
    CHECK(bad_spot == 0, "%s: %d spot entries differ", name, bad_spot);
    CHECK(fnv1a64(g, n) == sum, "%s: checksum %016llx", name,
          (unsigned long long) fnv1a64(g, n));
}


static void
test_grids(void)
{
    /* entries as ggml-common.h writes them */
    static const int       xat[] = { 0, 5, 100, 128, 255 };
    static const uint32_t  xwant[] = { 0x04040404, 0x04040c3e, 0x14040c1c,
                                       0x141c3e04, 0x3e341c04 };
    static const int       sat[] = { 0, 1, 100, 256, 257, 300, 511 };
    static const uint32_t  swant[] = { 0x01010101, 0x01010103, 0x010f0101,
                                       0x05090507, 0x05090705, 0x07030503,
                                       0x0f0f0101 };
    uint64_t               xset = 0, sset = 0;

    for (int v = 4; v <= 52; v += 8) {
        xset |= 1ull << v;
    }
    xset |= 1ull << 62;
    for (int v = 1; v <= 15; v += 2) {
        sset |= 1ull << v;
    }
    check_grid("iq3xxs_grid", llm_iq3xxs_grid, 256, xset,
               0xdfa5dc83d6a155d5ull, xat, xwant, 5);
    check_grid("iq3s_grid", llm_iq3s_grid, 512, sset,
               0xfa37020c25b44829ull, sat, swant, 7);
    tk_end_as("grids: 256 / 512 distinct ascending entries, bytes in "
              "{4..52 step 8, 62} / {1..15 odd}, checksums");
}


/*
 * Two IQ3_XXS super-blocks, d = 1 then -0.5.  Sub-block j: grid indices
 * 0, 5, 100, 128, 255, 0, 5, 100 (rotated by j), scale ls = 2j + 1 (then
 * 15 - 2j), sign groups 0, 0x01, 0x7f, 0x03 (rotated): group 0x01 sets
 * bit 0 and, by parity, bit 7; 0x7f all eight; 0x03 bits 0 and 1 only.
 */
static void
test_iq3_xxs_block(void)
{
    static const int       idx[8] = { 0, 5, 100, 128, 255, 0, 5, 100 };
    static const uint32_t  ent[8] = { 0x04040404, 0x04040c3e, 0x14040c1c,
                                      0x141c3e04, 0x3e341c04, 0x04040404,
                                      0x04040c3e, 0x14040c1c };
    static const uint32_t  grp[4] = { 0, 0x01, 0x7f, 0x03 };
    static const uint8_t   full[4] = { 0x00, 0x81, 0xff, 0x03 };
    uint8_t                b[2 * 98];
    float                  y[512], dd[2] = { 1.0f, -0.5f };
    int                    bad = 0;

    memset(b, 0, sizeof(b));
    b[0] = 0x00; b[1] = 0x3c;           /* fp16 1 */
    b[98] = 0x00; b[99] = 0xb8;         /* fp16 -0.5 */
    for (int i = 0; i < 2; i++) {
        for (int j = 0; j < 8; j++) {
            uint32_t  ls = i ? 15 - 2 * j : 2 * j + 1, aux = ls << 28;

            for (int k = 0; k < 8; k++) {
                b[98 * i + 2 + 8 * j + k] = (uint8_t) idx[(k + j) % 8];
            }
            for (int l = 0; l < 4; l++) {
                aux |= grp[(l + j) % 4] << 7 * l;
            }
            for (int k = 0; k < 4; k++) {
                b[98 * i + 66 + 4 * j + k] = (uint8_t) (aux >> 8 * k);
            }
        }
    }
    llm_dequantize_row(LLM_TYPE_IQ3_XXS, b, y, 512);
    for (int i = 0; i < 2; i++) {
        for (int j = 0; j < 8; j++) {
            float  ls = i ? 15 - 2 * j : 2 * j + 1;
            float  db = dd[i] * (0.5f + ls) * 0.5f;

            for (int w = 0; w < 32; w++) {
                uint32_t  e = ent[(w / 4 + j) % 8];
                float     mag = (float) ((e >> 8 * (w % 4)) & 0xff);
                int       neg = (full[(w / 8 + j) % 4] >> (w % 8)) & 1;
                float     v = db * mag;

                bad += y[256 * i + 32 * j + w] != (neg ? -v : v);
            }
        }
    }
    CHECK(bad == 0, "%d values wrong (y0 %g y40 %g y300 %g)", bad, y[0],
          y[40], y[300]);
    /* sub-block 0: ls 1, db 0.75; weights 0, 4: 4 and 62; group 0x01
     * negates weight 8 (28) and, by parity, 15 (20), not 14 (28); group
     * 0x7f weight 16 (4); sub-block 1 of block 2: ls 13, db -3.375,
     * first weight 62, negated by its group 0x01 */
    CHECK(y[0] == 3.0f && y[4] == 46.5f && y[8] == -21.0f && y[14] == 21.0f
          && y[15] == -15.0f && y[16] == -3.0f && y[256 + 32] == 209.25f,
          "spot values %g %g %g %g %g %g %g", y[0], y[4], y[8], y[14],
          y[15], y[16], y[256 + 32]);
    tk_end_as("IQ3_XXS: hand-built blocks dequantize exactly (scales, "
              "grid, sign bits, parity sign)");
}


/*
 * One IQ3_S super-block, d = 0.25: sub-block j has scale ls = 2j (low
 * nibbles) or 15 - j (high), grid indices 0, 1, 100, 256, 257, 300, 511,
 * 0 rotated by j (the 9th bit in qh[j]), sign bytes j * 37 + 4 * k.
 */
static void
test_iq3_s_block(void)
{
    static const int       idx[8] = { 0, 1, 100, 256, 257, 300, 511, 0 };
    static const uint32_t  ent[8] = { 0x01010101, 0x01010103, 0x010f0101,
                                      0x05090507, 0x05090705, 0x07030503,
                                      0x0f0f0101, 0x01010101 };
    uint8_t                b[110];
    float                  y[256];
    int                    bad = 0;

    memset(b, 0, sizeof(b));
    b[0] = 0x00; b[1] = 0x34;           /* fp16 0.25 */
    for (int j = 0; j < 8; j++) {
        for (int k = 0; k < 8; k++) {
            int  ix = idx[(k + j) % 8];

            b[2 + 8 * j + k] = (uint8_t) (ix & 0xff);
            b[66 + j] |= (uint8_t) ((ix >> 8) << k);
        }
        for (int k = 0; k < 4; k++) {
            b[74 + 4 * j + k] = (uint8_t) (j * 37 + 4 * k);
        }
    }
    for (int j = 0; j < 4; j++) {
        b[106 + j] = (uint8_t) ((2 * (2 * j)) | (15 - (2 * j + 1)) << 4);
    }
    llm_dequantize_row(LLM_TYPE_IQ3_S, b, y, 256);
    for (int j = 0; j < 8; j++) {
        int    ls = j % 2 ? 15 - j : 2 * j;
        float  db = 0.25f * (float) (1 + 2 * ls);

        for (int w = 0; w < 32; w++) {
            uint32_t  e = ent[(w / 4 + j) % 8];
            float     v = db * (float) ((e >> 8 * (w % 4)) & 0xff);
            int       neg = ((j * 37 + 4 * (w / 8)) & 0xff) >> (w % 8) & 1;

            bad += y[32 * j + w] != (neg ? -v : v);
        }
    }
    CHECK(bad == 0, "%d values wrong (y0 %g y12 %g y255 %g)", bad, y[0],
          y[12], y[255]);
    /* sub-block 0: ls 0, db 0.25; weights 12, 13 are entry 256's bytes
     * 7 and 5; sub-block 1: ls 14, db 7.25, entry 1's bytes 3 and 1, sign
     * byte 37 negating the first */
    CHECK(y[0] == 0.25f && y[12] == 1.75f && y[13] == 1.25f
          && y[32] == -21.75f && y[33] == 7.25f,
          "spot values %g %g %g %g %g", y[0], y[12], y[13], y[32], y[33]);
    tk_end_as("IQ3_S: hand-built block dequantizes exactly (9-bit "
              "indices, explicit signs, scales 1 + 2 ls)");
}


/* Random weight blocks: random bytes, fp16 d of plausible size. */
static void
random_blocks(llm_type_t t, uint8_t *w, int64_t n)
{
    size_t  rb = llm_row_bytes(t, n), bs = llm_type_info(t)->block_bytes;

    for (size_t i = 0; i < rb; i++) {
        w[i] = (uint8_t) tk_xorshift64(&rng_state);
    }
    for (int64_t i = 0; i < n / 256; i++) {
        uint16_t  d = llm_fp32_to_fp16(0.001f * rng_normal());

        memcpy(w + bs * i, &d, 2);
    }
}


/*
 * Per SIMD level, NR rows of n = 2048 random weights against NC quantized
 * activation rows: vec_dot (dispatched and reference) and gemm within
 * 1e-5 of the float64 sum of dequantized products (relative to the sum of
 * their magnitudes), the dispatched vec_dot within 1e-6 of the reference's
 * (exact super-block sums: only the float order differs), also over an
 * odd number of super-blocks; gemm of NC columns and gemm of each column
 * alone bit-identical to vec_dot at that level.
 */
static void
test_dot(llm_simd_t level)
{
    enum { N = 2048, NR = 3, NC = 5, XB = N / 256 * 292 };
    static uint8_t  wq[NR][N], xq[NC][XB];
    static float    wd[NR][N], xf[NC][N], xd[NC][N], y[NC * NR], y1[NR];
    int             bad, same, same1;

    if (llm_simd_force(level) != 0) {
        return;
    }
    for (size_t ti = 0; ti < N_TYPES; ti++) {
        llm_type_t  t = types[ti];
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

        bad = same = same1 = 0;
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
                if (bad && r == 0 && c == 0) {
                    tk_note("%s %s: dot %.9g ref %.9g f64 %.9g norm %.3g\n",
                            llm_simd_name(level), llm_type_name(t), s, sr,
                            ref, norm);
                }
                llm_vec_dot(t, N - 256, &s, wq[r], xq[c]);
                llm_vec_dot_ref(t, N - 256, &sr, wq[r], xq[c]);
                bad += !(fabs(s - sr) <= 1e-6 * norm);
                llm_vec_dot(t, N, &s, wq[r], xq[c]);
                bad += !(fabs(y[c * NR + r] - ref) <= 1e-5 * norm);
                same += memcmp(&s, &y[c * NR + r], sizeof(float)) == 0;
                same1 += memcmp(&s, &y1[r], sizeof(float)) == 0;
            }
        }
        CHECK(bad == 0, "%s %s: %d dots off the dequantized sum",
              llm_simd_name(level), llm_type_name(t), bad);
        CHECK(same == NR * NC && same1 == NR * NC, "%s %s: gemm differs "
              "from vec_dot in %d, one-column gemm in %d",
              llm_simd_name(level), llm_type_name(t), NR * NC - same,
              NR * NC - same1);
    }
    tk_end_as("%s: IQ3_XXS, IQ3_S vec_dot and gemm equal the dequantized "
              "dot, the scalar reference, and each other across batch "
              "sizes", llm_simd_name(level));
    llm_simd_force(LLM_SIMD_SCALAR);
}


/*
 * Rows longer than the AVX-512 plane tiles keep on the stack (8192
 * weights: they take the older kernels) and a row of just that many: per SIMD
 * level, gemm of 3 columns and of each alone bit-identical to vec_dot
 * and within 1e-6 of the scalar reference.
 */
static void
test_long_rows(llm_simd_t level)
{
    enum { NMAX = 8448, NR = 2, NC = 3, XB = NMAX / 256 * 292 };
    static const int64_t  ns[] = { 8192, 8448 };
    static uint8_t        wq[NR][NMAX], xq[NC][XB];
    static float          xf[NMAX], wd[NR][NMAX], xd[NC][NMAX];
    static float          y[NC * NR], y1[NR];
    int                   bad = 0;

    if (llm_simd_force(level) != 0) {
        return;
    }
    for (size_t k = 0; k < 2 * N_TYPES; k++) {
        llm_type_t  t = types[k % N_TYPES];
        int64_t     n = ns[k / N_TYPES];
        size_t      ws = sizeof(wq[0]), xs = sizeof(xq[0]);

        for (int r = 0; r < NR; r++) {
            random_blocks(t, wq[r], n);
            llm_dequantize_row(t, wq[r], wd[r], n);
        }
        for (int c = 0; c < NC; c++) {
            for (int64_t j = 0; j < n; j++) {
                xf[j] = rng_normal();
            }
            llm_quantize_act(LLM_TYPE_Q8_K, xf, xq[c], n);
            llm_dequantize_row(LLM_TYPE_Q8_K, xq[c], xd[c], n);
        }
        llm_gemm(t, n, NR, NC, wq, ws, xq, xs, y, NR);
        for (int c = 0; c < NC; c++) {
            llm_gemm(t, n, NR, 1, wq, ws, xq[c], xs, y1, NR);
            for (int r = 0; r < NR; r++) {
                float   s, sr;
                double  norm = 0;

                for (int64_t j = 0; j < n; j++) {
                    norm += fabs((double) wd[r][j] * xd[c][j]);
                }
                llm_vec_dot(t, n, &s, wq[r], xq[c]);
                llm_vec_dot_ref(t, n, &sr, wq[r], xq[c]);
                bad += memcmp(&s, &y[c * NR + r], sizeof(s)) != 0;
                bad += memcmp(&s, &y1[r], sizeof(s)) != 0;
                bad += !(fabs(s - sr) <= 1e-6 * norm);
            }
        }
    }
    CHECK(bad == 0, "%s: %d long-row results differ",
          llm_simd_name(level), bad);
    tk_end_as("%s: IQ3_XXS, IQ3_S rows of 8192 and 8448 weights: gemm, "
              "one-column gemm and vec_dot the same bits, within 1e-6 of "
              "the reference",
              llm_simd_name(level));
    llm_simd_force(LLM_SIMD_SCALAR);
}


static int
iq3_family(uint32_t t)
{
    return t == LLM_TYPE_IQ3_XXS || t == LLM_TYPE_IQ3_S;
}


/* Row hook: counts rows whose type is not the file's (ud: {want, n}). */
static void
iq3_count_other(void *ud, uint32_t type, const uint8_t *q, const float *deq,
    const float *f, int64_t n)
{
    uint64_t  *w = ud;

    (void) q;
    (void) deq;
    (void) f;
    (void) n;
    w[1] += type != w[0];
}


/*
 * Every IQ3 tensor in reference file qname: byte size, finite values,
 * and against the same tensor of fname (F32): relative RMS error at most
 * max_err, RMS ratio within 0.8..1.25.
 */
static void
test_ref_file(const char *qname, const char *fname, llm_type_t want,
    double max_err)
{
    uint64_t         other[2] = { want, 0 };
    tk_qref_t        c = { qname, fname, iq3_family, max_err, 0.8, 1.25,
                           iq3_count_other, other };
    tk_qref_stats_t  st;

    tk_begin("reference %s", qname);
    if (tk_qref_check(&c, &st) != 0) {
        return;
    }
    CHECK(other[1] == 0, "%llu rows of another IQ3 type in a %s file",
          (unsigned long long) other[1], llm_type_name(want));
    CHECK(st.tensors > 0, "%s: no %s tensors", qname, llm_type_name(want));
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
    test_grids();
    test_iq3_xxs_block();
    test_iq3_s_block();
    for (int l = 0; l < LLM_SIMD_COUNT; l++) {
        if (llm_simd_supported((llm_simd_t) l)) {
            test_dot((llm_simd_t) l);
            test_long_rows((llm_simd_t) l);
        } else {
            char  name[64];

            snprintf(name, sizeof(name), "dot %s", llm_simd_name(l));
            tk_skip(name, "not this CPU or build");
        }
    }
    test_ref_file("ref-qwen3moe-iq3_xxs", "ref-qwen3moe-f32",
                  LLM_TYPE_IQ3_XXS, 0.3);
    test_ref_file("ref-qwen3moe-iq3_s", "ref-qwen3moe-f32", LLM_TYPE_IQ3_S,
                  0.25);

    return tk_done();
}
