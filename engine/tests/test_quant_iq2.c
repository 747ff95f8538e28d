/*
 * IQ2_XXS, IQ2_XS and IQ2_S (kernels/quant_iq2.c, iq2_grids.c,
 * iq2_{avx2,avx512,neon}.c).
 *
 * 1. The type table: ggml's ids, block sizes, activation type, supported.
 * 2. The grids: every byte one of the definition's magnitudes 8, 25, 43,
 *    entries in increasing order (so distinct), spot entries and the
 *    FNV-1a checksums as written out from ggml-common.h; the computed
 *    sign codes against ggml's ksigns_iq2xs at spot indices, and their
 *    byte masks (llm_iq2_signs64) against them.
 * 3. Per type, hand-built blocks dequantize to the values the format's
 *    definition gives (grid entries and sign rule written out here, not
 *    taken from the engine), exactly.
 * 4. Per type and SIMD level, on random blocks: vec_dot of one
 *    super-block bit-identical to the scalar reference's (the integer sum
 *    is exact); of a row within 1e-6 of it and within 1e-5 of the float64
 *    sum of dequantized products; gemm columns bit-identical to vec_dot,
 *    whatever the number of columns (batch invariance).
 * 5. Real data ($LLM_SHARED/reference, skipped when absent): every IQ2
 *    tensor of the llama.cpp-quantized files has the byte size the table
 *    gives and dequantizes close to the f32 model's tensor (relative RMS
 *    error bound, RMS ratio); every grid entry is used there, and each
 *    byte of each entry is checked against the f32 weights it stands for
 *    (one wrong byte in any entry fails: tried on one entry per grid).
 */

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/quant.h"
#include "kernels/kernels_common.h"
#include "model/gguf.h"
#include "testkit.h"

static const llm_type_t  types[] = {
    LLM_TYPE_IQ2_XXS, LLM_TYPE_IQ2_XS, LLM_TYPE_IQ2_S
};
#define N_TYPES  (sizeof(types) / sizeof(types[0]))

/* Entries of ggml-common.h's grids, index and value, written out here. */
typedef struct {
    int       i;
    uint64_t  v;
} grid_spot_t;

static const grid_spot_t  xxs_spots[5] = {
    { 0, 0x0808080808080808ull }, { 1, 0x080808080808082bull },
    { 77, 0x08190808192b0808ull }, { 131, 0x082b2b2b19081908ull },
    { 255, 0x2b2b2b1908081908ull },
};
static const grid_spot_t  xs_spots[5] = {
    { 0, 0x0808080808080808ull }, { 1, 0x080808080808082bull },
    { 77, 0x080819081908082bull }, { 259, 0x190808080819082bull },
    { 511, 0x2b2b2b2b2b2b2b2bull },
};
static const grid_spot_t  s_spots[5] = {
    { 0, 0x0808080808080808ull }, { 1, 0x080808080808082bull },
    { 77, 0x0808082b2b081919ull }, { 515, 0x190808191908192bull },
    { 1023, 0x2b2b2b2b2b2b2b2bull },
};

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
        uint32_t     id, bytes;
        const char  *name;
    } want[] = {
        { LLM_TYPE_IQ2_XXS, 16, 66, "IQ2_XXS" },
        { LLM_TYPE_IQ2_XS, 17, 74, "IQ2_XS" },
        { LLM_TYPE_IQ2_S, 22, 82, "IQ2_S" },
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
        CHECK(llm_row_bytes(want[i].id, 256 + 32) == 0, "%s odd row",
              want[i].name);
    }
    tk_end_as("type table: IQ2_XXS 16 (66 B), IQ2_XS 17 (74 B), "
              "IQ2_S 22 (82 B) per 256, Q8_K activations");
}


/* FNV-1a 64 over the entries' little-endian bytes. */
static uint64_t
grid_fnv(const uint64_t *g, int n)
{
    uint64_t  h = 0xcbf29ce484222325ull;

    for (int i = 0; i < n; i++) {
        for (int j = 0; j < 8; j++) {
            h ^= (g[i] >> 8 * j) & 0xff;
            h *= 0x100000001b3ull;
        }
    }
    return h;
}


static void
check_grid(const char *name, const uint64_t *g, int n,
    const grid_spot_t *spots, uint64_t fnv)
{
    int  badbyte = 0, order = 0, spot = 0;

    for (int i = 0; i < n; i++) {
        for (int j = 0; j < 8; j++) {
            int  b = (int) (g[i] >> 8 * j) & 0xff;

            badbyte += b != 8 && b != 25 && b != 43;
        }
        order += i > 0 && g[i] <= g[i - 1];
    }
    for (int k = 0; k < 5; k++) {
        spot += g[spots[k].i] != spots[k].v;
    }
    CHECK(badbyte == 0, "%s: %d bytes not 8/25/43", name, badbyte);
    CHECK(order == 0, "%s: %d entries out of order", name, order);
    CHECK(spot == 0, "%s: %d spot entries differ", name, spot);
    CHECK(grid_fnv(g, n) == fnv, "%s: checksum %016llx", name,
          (unsigned long long) grid_fnv(g, n));
}


static void
test_grids(void)
{
    /* ggml-common.h's ksigns_iq2xs, its first and last 8 entries */
    static const uint8_t  ks_lo[8] = { 0, 129, 130, 3, 132, 5, 6, 135 };
    static const uint8_t  ks_hi[8] = { 120, 249, 250, 123, 252, 125, 126,
                                       255 };
    int                   bad = 0;

    check_grid("iq2xxs_grid", llm_iq2xxs_grid, 256, xxs_spots,
               0xbb4ee025b5ac6e8eull);
    check_grid("iq2xs_grid", llm_iq2xs_grid, 512, xs_spots,
               0xc9b1ee61e79909bdull);
    check_grid("iq2s_grid", llm_iq2s_grid, 1024, s_spots,
               0x123edd38a3b62b90ull);
    for (int k = 0; k < 8; k++) {
        bad += llm_iq2_signs(k) != ks_lo[k];
        bad += llm_iq2_signs(120 + k) != ks_hi[k];
    }
    for (unsigned k = 0; k < 128; k++) {
        int  minus = 0;

        for (int j = 0; j < 8; j++) {
            minus += llm_iq2_signs(k) >> j & 1;
        }
        bad += (minus & 1) != 0 || (llm_iq2_signs(k) & 127) != k;
        for (int j = 0; j < 8; j++) {
            bad += (llm_iq2_signs64[k] >> 8 * j & 0xff)
                   != ((llm_iq2_signs(k) >> j & 1) ? 0xffu : 0);
        }
    }
    CHECK(bad == 0, "%d sign codes wrong", bad);
    tk_end_as("grids: 256/512/1024 entries of 8/25/43, increasing, spot "
              "entries and checksums as ggml-common.h; sign codes even, "
              "their byte masks agree");
}


/* 8 sign bits of 7-bit code k by the definition: bit 7 makes the count of
 * minus signs even. */
static unsigned
def_signs(unsigned k)
{
    unsigned  p = 0;

    for (int j = 0; j < 7; j++) {
        p ^= k >> j & 1;
    }
    return k | p << 7;
}


/* Weight j of grid value g with sign bits sg and step st. */
static float
def_weight(uint64_t g, unsigned sg, int j, float st)
{
    float  v = st * (float) ((g >> 8 * j) & 0xff);

    return (sg >> j & 1) ? -v : v;
}


/*
 * Two IQ2_XXS blocks, d = 1 then -0.5: sub-block ib has scale 2 ib + 1
 * (the second block 15 - 2 ib), groups the spot entries in turn, sign
 * codes 37 (4 ib + l) mod 128.
 */
static void
test_iq2_xxs_block(void)
{
    uint8_t  b[2 * 66];
    float    y[512];
    int      bad = 0;

    memset(b, 0, sizeof(b));
    for (int blk = 0; blk < 2; blk++) {
        uint8_t  *p = b + 66 * blk;

        p[0] = 0x00;
        p[1] = blk ? 0xb8 : 0x3c;       /* fp16 1, -0.5 */
        for (int ib = 0; ib < 8; ib++) {
            uint32_t  a0 = 0, a1;
            int       s = blk ? 15 - 2 * ib : 2 * ib + 1;

            a1 = (uint32_t) s << 28;
            for (int l = 0; l < 4; l++) {
                a0 |= (uint32_t) xxs_spots[(ib + l) % 5].i << 8 * l;
                a1 |= (uint32_t) (37 * (4 * ib + l) % 128) << 7 * l;
            }
            memcpy(p + 2 + 8 * ib, &a0, 4);
            memcpy(p + 6 + 8 * ib, &a1, 4);
        }
    }
    llm_dequantize_row(LLM_TYPE_IQ2_XXS, b, y, 512);
    for (int blk = 0; blk < 2; blk++) {
        for (int ib = 0; ib < 8; ib++) {
            int    s = blk ? 15 - 2 * ib : 2 * ib + 1;
            float  st = (blk ? -0.5f : 1.0f) * (0.5f + s) * 0.25f;

            for (int l = 0; l < 4; l++) {
                uint64_t  g = xxs_spots[(ib + l) % 5].v;
                unsigned  sg = def_signs(37 * (4 * ib + l) % 128);

                for (int j = 0; j < 8; j++) {
                    bad += y[256 * blk + 32 * ib + 8 * l + j]
                           != def_weight(g, sg, j, st);
                }
            }
        }
    }
    CHECK(bad == 0, "%d values wrong (y0 %g y1 %g y256 %g)", bad, y[0], y[1],
          y[256]);
    /* group 0: entry 0 (all 8), code 0: step 0.375 */
    CHECK(y[0] == 3.0f && y[7] == 3.0f, "spot values %g %g", y[0], y[7]);
    tk_end_as("IQ2_XXS: hand-built blocks dequantize exactly");
}


/* Two IQ2_XS blocks, d = 1 then -0.5: scales ib (first 16) and 15 - ib
 * (next 16), spot entries in turn, sign codes 53 g + 11 mod 128. */
static void
test_iq2_xs_block(void)
{
    uint8_t  b[2 * 74];
    float    y[512];
    int      bad = 0;

    memset(b, 0, sizeof(b));
    for (int blk = 0; blk < 2; blk++) {
        uint8_t  *p = b + 74 * blk;

        p[1] = blk ? 0xb8 : 0x3c;
        for (int g = 0; g < 32; g++) {
            uint16_t  q = (uint16_t) (xs_spots[g % 5].i
                                      | (53 * g + 11) % 128 << 9);

            memcpy(p + 2 + 2 * g, &q, 2);
        }
        for (int ib = 0; ib < 8; ib++) {
            p[66 + ib] = (uint8_t) (ib | (15 - ib) << 4);
        }
    }
    llm_dequantize_row(LLM_TYPE_IQ2_XS, b, y, 512);
    for (int blk = 0; blk < 2; blk++) {
        for (int g = 0; g < 32; g++) {
            int    s = g % 4 < 2 ? g / 4 : 15 - g / 4;
            float  st = (blk ? -0.5f : 1.0f) * (0.5f + s) * 0.25f;

            for (int j = 0; j < 8; j++) {
                bad += y[256 * blk + 8 * g + j]
                       != def_weight(xs_spots[g % 5].v,
                                     def_signs((53 * g + 11) % 128), j, st);
            }
        }
    }
    CHECK(bad == 0, "%d values wrong (y0 %g y16 %g y256 %g)", bad, y[0],
          y[16], y[256]);
    tk_end_as("IQ2_XS: hand-built blocks dequantize exactly");
}


/* Two IQ2_S blocks, d = 1 then -0.5: scales as IQ2_XS, 10-bit indices of
 * the spot entries in turn (low bytes in qs, top bits in qh), sign bytes
 * 97 g + 5 mod 256 (all 8 bits stored). */
static void
test_iq2_s_block(void)
{
    uint8_t  b[2 * 82];
    float    y[512];
    int      bad = 0;

    memset(b, 0, sizeof(b));
    for (int blk = 0; blk < 2; blk++) {
        uint8_t  *p = b + 82 * blk;

        p[1] = blk ? 0xb8 : 0x3c;
        for (int g = 0; g < 32; g++) {
            int  idx = s_spots[(g + blk) % 5].i;

            p[2 + g] = (uint8_t) (idx & 0xff);
            p[34 + g] = (uint8_t) ((97 * g + 5) % 256);
            p[66 + g / 4] |= (uint8_t) ((idx >> 8) << 2 * (g % 4));
        }
        for (int ib = 0; ib < 8; ib++) {
            p[74 + ib] = (uint8_t) (ib | (15 - ib) << 4);
        }
    }
    llm_dequantize_row(LLM_TYPE_IQ2_S, b, y, 512);
    for (int blk = 0; blk < 2; blk++) {
        for (int g = 0; g < 32; g++) {
            int    s = g % 4 < 2 ? g / 4 : 15 - g / 4;
            float  st = (blk ? -0.5f : 1.0f) * (0.5f + s) * 0.25f;

            for (int j = 0; j < 8; j++) {
                bad += y[256 * blk + 8 * g + j]
                       != def_weight(s_spots[(g + blk) % 5].v,
                                     (97 * g + 5) % 256, j, st);
            }
        }
    }
    CHECK(bad == 0, "%d values wrong (y0 %g y24 %g y256 %g)", bad, y[0],
          y[24], y[256]);
    tk_end_as("IQ2_S: hand-built blocks dequantize exactly (10-bit "
              "indices, stored signs)");
}


/* Random weight blocks: random bytes, then an fp16 d of plausible size. */
static void
random_blocks(llm_type_t t, uint8_t *w, int64_t n)
{
    size_t  rb = llm_row_bytes(t, n), bb = llm_type_info(t)->block_bytes;

    for (size_t i = 0; i < rb; i++) {
        w[i] = (uint8_t) tk_xorshift64(&rng_state);
    }
    for (int64_t i = 0; i < n / 256; i++) {
        uint16_t  d = llm_fp32_to_fp16(0.002f * rng_normal());

        memcpy(w + bb * i, &d, 2);
    }
}


/*
 * Per SIMD level, rows of n = 2048 random blocks against 5 quantized
 * activation rows: each super-block's vec_dot bit-identical to the
 * scalar reference's; the row's within 1e-6 of it (relative to the sum
 * of the products' magnitudes) and within 1e-5 of the float64 sum of
 * dequantized products; an odd number of super-blocks too; gemm over 5
 * columns and over 1 bit-identical to vec_dot.
 */
static void
test_dot(llm_simd_t level)
{
    enum { N = 2048, NR = 3, NC = 5 };
    static uint8_t  wq[NR][N], xq[NC][N * 2];
    static float    wd[NR][N], xf[NC][N], xd[NC][N], y[NC * NR], y1[NR];

    if (llm_simd_force(level) != 0) {
        return;
    }
    for (size_t ti = 0; ti < N_TYPES; ti++) {
        llm_type_t  t = types[ti];
        size_t      bb = llm_type_info(t)->block_bytes;
        int         bad = 0, blkdiff = 0, same = 0;
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

        for (int r = 0; r < NR; r++) {
            for (int c = 0; c < NC; c++) {
                double  ref = 0, norm = 0;

                for (int j = 0; j < N; j++) {
                    ref += (double) wd[r][j] * xd[c][j];
                    norm += fabs((double) wd[r][j] * xd[c][j]);
                }
                for (int k = 0; k < N / 256; k++) {
                    llm_vec_dot(t, 256, &s, wq[r] + bb * k,
                                xq[c] + sizeof(llm_block_q8_K) * k);
                    llm_vec_dot_ref(t, 256, &sr, wq[r] + bb * k,
                                    xq[c] + sizeof(llm_block_q8_K) * k);
                    blkdiff += memcmp(&s, &sr, sizeof(float)) != 0;
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
                same += memcmp(&s, &y[c * NR + r], sizeof(float)) == 0;
                llm_vec_dot(t, N - 256, &s, wq[r], xq[c]);
                llm_vec_dot_ref(t, N - 256, &sr, wq[r], xq[c]);
                bad += !(fabs(s - sr) <= 1e-6 * norm);
            }
        }
        /* one column at a time: the same bits as five at once */
        for (int c = 0; c < NC; c++) {
            llm_gemm(t, N, NR, 1, wq, sizeof(wq[0]), xq[c], sizeof(xq[0]),
                     y1, NR);
            for (int r = 0; r < NR; r++) {
                same += memcmp(&y1[r], &y[c * NR + r], sizeof(float)) == 0;
            }
        }
        CHECK(blkdiff == 0, "%s %s: %d super-block dots differ from the "
              "scalar reference", llm_simd_name(level), llm_type_name(t),
              blkdiff);
        CHECK(bad == 0, "%s %s: %d dots off", llm_simd_name(level),
              llm_type_name(t), bad);
        CHECK(same == 2 * NR * NC, "%s %s: gemm differs from vec_dot in %d",
              llm_simd_name(level), llm_type_name(t), 2 * NR * NC - same);
    }
    tk_end_as("%s: IQ2_XXS, IQ2_XS, IQ2_S vec_dot (per super-block exact) "
              "and gemm equal the dequantized dot", llm_simd_name(level));
    llm_simd_force(LLM_SIMD_SCALAR);
}


/* The grid index of group g (0..nb * 32) of row data p of type t. */
static int
grid_index(llm_type_t t, const uint8_t *p, int64_t g)
{
    int64_t  i = g / 32;
    int      ib = (int) (g % 32) / 4, l = (int) (g % 4);

    if (t == LLM_TYPE_IQ2_XXS) {
        return p[66 * i + 2 + 8 * ib + l];
    }
    if (t == LLM_TYPE_IQ2_XS) {
        const llm_block_iq2_xs  *b = (const void *) (p + 74 * i);

        return b->qs[4 * ib + l] & 511;
    }

    const llm_block_iq2_s  *b = (const void *) (p + 82 * i);

    return llm_iq2_s_index(b, ib, l);
}


/* Per grid entry k and weight j: sum(f32 x deq), sum(deq^2), groups. */
typedef struct {
    llm_type_t  t;
    double      sd[1024][8], dd[1024][8];
    int         cnt[1024];
} iq2_gstats_t;

static int is_iq2_xxs(uint32_t t) { return t == LLM_TYPE_IQ2_XXS; }
static int is_iq2_xs(uint32_t t) { return t == LLM_TYPE_IQ2_XS; }
static int is_iq2_s(uint32_t t) { return t == LLM_TYPE_IQ2_S; }


/* Row hook of tk_qref_check: each group's weights into its entry's sums. */
static void
iq2_row(void *ud, uint32_t type, const uint8_t *q, const float *deq,
    const float *f, int64_t n)
{
    iq2_gstats_t  *g = ud;

    (void) type;
    for (int64_t j = 0; j < n; j++) {
        int  k = grid_index(g->t, q, j / 8);

        g->sd[k][j % 8] += (double) f[j] * deq[j];
        g->dd[k][j % 8] += (double) deq[j] * deq[j];
        g->cnt[k] += j % 8 == 0;
    }
}


/*
 * Every tensor of type t in reference file qname: byte size, finite
 * values, and against the same tensor of the f32 file: relative RMS error
 * at most max_err, RMS ratio within 0.75..1.25.  And per grid entry k
 * and weight j of it, over the groups that use k: the least-squares
 * factor f = sum(f32 * deq) / sum(deq^2), which is near 1 when byte j of
 * entry k is the magnitude the quantizer chose by.  On these files it is
 * 0.74..1.07 for bytes 25 and 43 and at most 1.42 for 8 (whose slots can
 * go lower: the parity rule flips the sign of a group's smallest weight).
 * A wrong byte (another of 8, 25, 43) scales f by 0.19..0.58 or 1.7..5.4,
 * so f must be at most 1.6, and at least 0.7 where the byte is 25 or 43.
 * Entries used by fewer than 8 groups are not judged.
 */
static void
test_ref_file(const char *qname, llm_type_t t, const uint64_t *grid,
    int grid_n, double max_err)
{
    static iq2_gstats_t  g;
    tk_qref_t            c = { qname, "ref-qwen3moe-f32", NULL, max_err,
                               0.75, 1.25, iq2_row, &g };
    tk_qref_stats_t      st;
    int                  n_used = 0, n_judged = 0, out = 0;
    double               fmin = 1e9, fmax = -1e9;

    tk_begin("reference %s", qname);
    memset(&g, 0, sizeof(g));
    g.t = t;
    c.want = t == LLM_TYPE_IQ2_XXS ? is_iq2_xxs
             : t == LLM_TYPE_IQ2_XS ? is_iq2_xs : is_iq2_s;
    if (tk_qref_check(&c, &st) != 0) {
        return;
    }
    for (int k = 0; k < grid_n; k++) {
        n_used += g.cnt[k] > 0;
        if (g.cnt[k] < 8) {
            continue;
        }
        n_judged++;
        for (int j = 0; j < 8; j++) {
            double  fk = g.dd[k][j] > 0 ? g.sd[k][j] / g.dd[k][j] : 0;
            int     mag = (int) (grid[k] >> 8 * j) & 0xff;

            if (!(fk <= 1.6 && (mag == 8 || fk >= 0.7)) && out++ < 5) {
                tk_note("%s: grid entry %d weight %d (%d): factor %.3f over "
                        "%d groups\n", qname, k, j, mag, fk, g.cnt[k]);
            }
            fmin = fk < fmin ? fk : fmin;
            fmax = fk > fmax ? fk : fmax;
        }
    }
    CHECK(st.tensors > 0, "%s: no %s tensors", qname, llm_type_name(t));
    CHECK(out == 0, "%s: %d grid slots off", qname, out);
    tk_end_as("reference %s: %llu tensors finite, vs f32 worst rel RMS "
              "%.4f, RMS ratio %.3f; %d of %d grid entries used, per "
              "entry and weight f32/deq factor %.3f..%.3f (%d entries)",
              qname, (unsigned long long) st.tensors, st.worst, st.wratio,
              n_used, grid_n, fmin, fmax, n_judged);
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
    test_iq2_xxs_block();
    test_iq2_xs_block();
    test_iq2_s_block();
    for (int l = 0; l < LLM_SIMD_COUNT; l++) {
        if (llm_simd_supported((llm_simd_t) l)) {
            test_dot((llm_simd_t) l);
        } else {
            char  name[64];

            snprintf(name, sizeof(name), "dot %s", llm_simd_name(l));
            tk_skip(name, "not this CPU or build");
        }
    }
    test_ref_file("ref-qwen3moe-iq2_xxs", LLM_TYPE_IQ2_XXS, llm_iq2xxs_grid,
                  256, 0.45);
    test_ref_file("ref-qwen3moe-iq2_xs", LLM_TYPE_IQ2_XS, llm_iq2xs_grid, 512,
                  0.4);
    test_ref_file("ref-qwen3moe-iq2_s", LLM_TYPE_IQ2_S, llm_iq2s_grid, 1024,
                  0.35);

    return tk_done();
}
