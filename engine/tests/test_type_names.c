/*
 * Type names and the type mix (issue 32 item 5): every id of ggml's enum
 * has its name in the engine, so a refused tensor is never of type "?";
 * the list of types the engine runs comes from the type table; a file's
 * type mix (llm-gguf-dump's "# types:" line, the engine's start-up log)
 * counts tensors per type, the types in order of the bytes they hold.
 * The refusal message itself is test_model's "refused ..." points.
 */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/quant.h"
#include "model/gguf.h"
#include "testkit.h"

/* ggml.h's enum ggml_type, written out here as the spec the engine's
 * tables are checked against; NULL for the ids ggml retired. */
static const char *const  ggml_enum[] = {
    "F32", "F16", "Q4_0", "Q4_1", NULL, NULL, "Q5_0", "Q5_1", "Q8_0",
    "Q8_1", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "Q8_K", "IQ2_XXS",
    "IQ2_XS", "IQ3_XXS", "IQ1_S", "IQ4_NL", "IQ3_S", "IQ2_S", "IQ4_XS",
    "I8", "I16", "I32", "I64", "F64", "IQ1_M", "BF16", NULL, NULL, NULL,
    "TQ1_0", "TQ2_0", NULL, NULL, NULL, "MXFP4",
};

#define N_GGML  (sizeof(ggml_enum) / sizeof(ggml_enum[0]))

/* Every ggml id named by quant.c and by the gguf layer alike. */
static void
names(void)
{
    uint32_t     t;
    const char  *want;

    tk_begin("every ggml type id has its name");
    for (t = 0; t < 64; t++) {
        want = t < N_GGML && ggml_enum[t] ? ggml_enum[t] : "?";
        if (llm_repack_source(t) != t) {
            /* the engine's own regroupings: named for their source type,
             * but never in a file */
            char  r16[32];

            snprintf(r16, sizeof(r16), "%s_R16",
                     llm_type_name(llm_repack_source(t)));
            CHECK(strcmp(llm_type_name(t), r16) == 0, "id %u: %s", t,
                  llm_type_name(t));
            CHECK(strcmp(llm_gguf_type_name(t), "?") == 0);
            continue;
        }
        CHECK(strcmp(llm_type_name(t), want) == 0, "id %u: %s, want %s", t,
              llm_type_name(t), want);
        CHECK(strcmp(llm_gguf_type_name(t), want) == 0,
              "id %u: gguf says %s, want %s", t, llm_gguf_type_name(t),
              want);
        /* the gguf layer knows the geometry of every named id */
        CHECK((llm_gguf_row_bytes(t, 256) != 0) == (want[0] != '?'),
              "id %u (%s): %llu bytes per 256 values", t, want,
              (unsigned long long) llm_gguf_row_bytes(t, 256));
    }
    CHECK(strcmp(llm_type_name(1000), "?") == 0);
    CHECK(llm_gguf_row_bytes(16, 256) == 66 && llm_gguf_row_bytes(16, 32)
          == 0, "IQ2_XXS: 66 bytes per 256, no partial block");
    tk_end();
}

/* The supported list: every supported weight type once, floats first,
 * nothing else; cut cleanly when the buffer is short. */
static void
supported(void)
{
    char        buf[512], small[8], name[32];
    size_t      n, k;
    uint32_t    t;
    int         seen_block = 0, count = 0;
    const char *p;

    tk_begin("supported types listed from the type table");
    n = llm_type_list_supported(buf, sizeof(buf));
    tk_note("runs: %s\n", buf);
    CHECK(n == strlen(buf), "%zu vs %zu", n, strlen(buf));
    CHECK(strncmp(buf, "F32, F16, BF16, Q4_0, ", 22) == 0, "'%s'", buf);
    for (p = buf; *p; p += k + (p[k] == ',' ? 2 : 0)) {
        const llm_type_info_t  *ti = NULL;

        k = strcspn(p, ",");
        snprintf(name, sizeof(name), "%.*s", (int) k, p);
        for (t = 0; t < LLM_TYPE_COUNT; t++) {
            if (strcmp(llm_type_name(t), name) == 0) {
                ti = llm_type_info(t);
                break;
            }
        }
        CHECK(ti != NULL && ti->supported, "'%s' listed, not supported",
              name);
        if (ti != NULL) {
            CHECK(!(seen_block && ti->block == 1), "float %s after a "
                  "block type", name);
            seen_block |= ti->block > 1;
        }
        count++;
    }
    for (t = 0; t < LLM_TYPE_COUNT; t++) {
        const llm_type_info_t  *ti = llm_type_info(t);

        count -= ti != NULL && ti->supported;
    }
    CHECK(count == 0, "%d more listed than the table supports", count);
    CHECK(llm_type_list_supported(small, sizeof(small)) == n
          && strcmp(small, "F32, F1") == 0, "cut: '%s'", small);
    CHECK(llm_type_list_supported(NULL, 0) == n);
    tk_end();
}

/* A hand-written file: 3 small F32, 2 Q8_0, 1 IQ2_XXS holding the most
 * bytes, 1 MXFP4 (types the engine runs and does not alike). */
static void
mix(const char *dir)
{
    static const struct { const char *name; uint32_t type; int64_t n; }
    ts[] = {
        { "norm.a", LLM_TYPE_F32, 32 },  { "q8.a", LLM_TYPE_Q8_0, 256 },
        { "norm.b", LLM_TYPE_F32, 32 },  { "iq2", 16, 8192 },
        { "q8.b", LLM_TYPE_Q8_0, 256 },  { "norm.c", LLM_TYPE_F32, 32 },
        { "mx", LLM_TYPE_MXFP4, 1024 },
    };
    llm_gguf_writer_t  *w;
    llm_gguf_t         *g;
    char                path[600], err[512], buf[256], cut[10];
    uint8_t            *zero;
    size_t              i, n;

    tk_begin("type mix of a file");
    snprintf(path, sizeof(path), "%s/mix.gguf", dir);
    zero = calloc(1, 4096);
    REQUIRE(llm_gguf_writer_open(&w, path, err, sizeof(err)) == 0, "%s",
            err);
    for (i = 0; i < sizeof(ts) / sizeof(ts[0]); i++) {
        llm_gguf_w_tensor(w, ts[i].name, 1, &ts[i].n, ts[i].type);
    }
    llm_gguf_w_begin_data(w);
    for (i = 0; i < sizeof(ts) / sizeof(ts[0]); i++) {
        llm_gguf_w_data(w, zero, llm_gguf_row_bytes(ts[i].type, ts[i].n));
    }
    free(zero);
    REQUIRE(llm_gguf_writer_close(w, err, sizeof(err)) == 0, "%s", err);
    REQUIRE(llm_gguf_open(&g, path, err, sizeof(err)) == 0, "%s", err);
    n = llm_gguf_type_mix(g, buf, sizeof(buf));
    tk_note("types: %s\n", buf);
    /* bytes: IQ2_XXS 2112, MXFP4 544, Q8_0 544 (tie: lower id first),
     * F32 384 */
    CHECK(strcmp(buf, "IQ2_XXS x 1, Q8_0 x 2, MXFP4 x 1, F32 x 3") == 0,
          "'%s'", buf);
    CHECK(n == strlen(buf));
    CHECK(llm_gguf_type_mix(g, cut, sizeof(cut)) == n
          && strcmp(cut, "IQ2_XXS x") == 0, "cut: '%s'", cut);
    llm_gguf_close(g);
    tk_end();
}

int
main(void)
{
    names();
    supported();
    mix(tk_tmpdir("test_type_names"));
    return tk_done();
}
