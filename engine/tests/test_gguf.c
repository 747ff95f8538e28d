/*
 * test_gguf: the GGUF reader and writer.
 *
 * 1. Round trip: a file with every value type, string arrays, tensors of
 *    several types and a non-default alignment is written and read back.
 * 2. Writer misuse: short / long tensor data, duplicates, bad alignment.
 * 3. Bad input: corrupted copies of a real llama.cpp-written file
 *    (engine/tests/data/gguf/ref-llama-dense-q4_0.gguf), one per class of
 *    damage; each must fail with a message naming the problem.
 * 4. Every file in $LLM_SHARED/reference and /vocab opens (skipped when
 *    absent).
 *
 * Run from the repository root; TAP output (testkit.h), one point per check
 * group; exits non-zero on any failure.
 */

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "model/gguf.h"
#include "kernels/quant.h"
#include "testkit.h"

#define REF_FILE "engine/tests/data/gguf/ref-llama-dense-q4_0.gguf"

static const char *tmpdir;

static int
spew(const char *path, const void *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    int ok;

    if (f == NULL) {
        return -1;
    }
    ok = fwrite(p, 1, n, f) == n;
    return (fclose(f) == 0 && ok) ? 0 : -1;
}

/* ---- 1. round trip ---- */

static void
test_roundtrip(void)
{
    char path[128], err[512];
    llm_gguf_writer_t *w;
    llm_gguf_t *g;
    const llm_gguf_kv_t *kv;
    const llm_gguf_tensor_t *t;
    uint8_t u8 = 200; int8_t i8 = -100; uint16_t u16 = 60000;
    int16_t i16 = -30000; uint64_t u64 = 0x123456789abcdefull;
    int64_t i64 = -0x123456789abcdefll; double f64 = 3.25e300;
    float farr[5] = { 1.5f, -2.0f, 0.0f, 1e-30f, 7.0f };
    int32_t iarr[3] = { -1, 0, 2147483647 };
    uint8_t barr[4] = { 1, 0, 1, 1 };
    const char *strs[4] = { "hello", "", "w\xc3\xb6rld", "<|im_end|>" };
    int64_t ne_a[2] = { 8, 3 }, ne_b[1] = { 64 }, ne_c[3] = { 32, 2, 2 };
    float da[24];
    uint8_t db[128], dc[4 * 34];
    uint32_t v32; uint64_t v64; int32_t vi32; float vf; int vb;
    llm_gguf_str_t s;
    uint64_t n;
    const void *data;
    const llm_gguf_str_t *items;
    int rc;

    for (int i = 0; i < 24; i++) {
        da[i] = (float) i * 0.5f - 3.0f;
    }
    for (int i = 0; i < 128; i++) {
        db[i] = (uint8_t) (i * 7);
    }
    for (int i = 0; i < 4 * 34; i++) {
        dc[i] = (uint8_t) (255 - i);
    }

    snprintf(path, sizeof(path), "%s/rt.gguf", tmpdir);
    rc = llm_gguf_writer_open(&w, path, err, sizeof(err));
    CHECK(rc == 0, "writer_open: %s", err);
    if (rc != 0) {
        tk_end_as("round trip");
        return;
    }
    llm_gguf_w_str(w, "general.architecture", "llama", 5);
    llm_gguf_w_u32(w, "general.alignment", 64);
    llm_gguf_w_scalar(w, "t.u8", LLM_GGUF_UINT8, &u8);
    llm_gguf_w_scalar(w, "t.i8", LLM_GGUF_INT8, &i8);
    llm_gguf_w_scalar(w, "t.u16", LLM_GGUF_UINT16, &u16);
    llm_gguf_w_scalar(w, "t.i16", LLM_GGUF_INT16, &i16);
    llm_gguf_w_u32(w, "t.u32", 4000000000u);
    llm_gguf_w_i32(w, "t.i32", -7);
    llm_gguf_w_f32(w, "t.f32", 0.125f);
    llm_gguf_w_bool(w, "t.bool", 1);
    llm_gguf_w_u64(w, "t.u64", u64);
    llm_gguf_w_scalar(w, "t.i64", LLM_GGUF_INT64, &i64);
    llm_gguf_w_scalar(w, "t.f64", LLM_GGUF_FLOAT64, &f64);
    llm_gguf_w_arr(w, "t.arr_f32", LLM_GGUF_FLOAT32, farr, 5);
    llm_gguf_w_arr(w, "t.arr_i32", LLM_GGUF_INT32, iarr, 3);
    llm_gguf_w_arr(w, "t.arr_bool", LLM_GGUF_BOOL, barr, 4);
    llm_gguf_w_arr(w, "t.arr_empty", LLM_GGUF_UINT64, NULL, 0);
    llm_gguf_w_str_arr(w, "t.strs", strs, NULL, 4);
    llm_gguf_w_tensor(w, "a", 2, ne_a, 0 /* F32 */);
    llm_gguf_w_tensor(w, "b.weight", 1, ne_b, 1 /* F16 */);
    llm_gguf_w_tensor(w, "c.weight", 3, ne_c, 8 /* Q8_0 */);
    rc = llm_gguf_w_begin_data(w);
    CHECK(rc == 0, "begin_data %d", rc);
    llm_gguf_w_data(w, da, 10 * sizeof(float));   /* in two pieces */
    llm_gguf_w_data(w, da + 10, 14 * sizeof(float));
    llm_gguf_w_data(w, db, 128);
    llm_gguf_w_data(w, dc, sizeof(dc));
    rc = llm_gguf_writer_close(w, err, sizeof(err));
    CHECK(rc == 0, "writer_close: %s", err);

    rc = llm_gguf_open(&g, path, err, sizeof(err));
    CHECK(rc == 0, "open: %s", err);
    if (rc != 0) {
        tk_end_as("round trip");
        return;
    }
    CHECK(llm_gguf_version(g) == 3, "version");
    CHECK(llm_gguf_alignment(g) == 64, "alignment %llu",
        (unsigned long long) llm_gguf_alignment(g));
    CHECK(llm_gguf_data_offset(g) % 64 == 0, "data offset aligned");
    CHECK(llm_gguf_n_kv(g) == 18, "n_kv %llu",
        (unsigned long long) llm_gguf_n_kv(g));
    CHECK(llm_gguf_n_tensors(g) == 3, "n_tensors");

    kv = llm_gguf_find_kv(g, "t.u8");
    CHECK(kv && kv->type == LLM_GGUF_UINT8
          && *(const uint8_t *) kv->data == 200, "u8");
    kv = llm_gguf_find_kv(g, "t.i8");
    CHECK(kv && kv->type == LLM_GGUF_INT8
          && *(const int8_t *) kv->data == -100, "i8");
    kv = llm_gguf_find_kv(g, "t.u16");
    CHECK(kv && kv->type == LLM_GGUF_UINT16
          && memcmp(kv->data, &u16, 2) == 0, "u16");
    kv = llm_gguf_find_kv(g, "t.i16");
    CHECK(kv && kv->type == LLM_GGUF_INT16
          && memcmp(kv->data, &i16, 2) == 0, "i16");
    kv = llm_gguf_find_kv(g, "t.i64");
    CHECK(kv && kv->type == LLM_GGUF_INT64
          && memcmp(kv->data, &i64, 8) == 0, "i64");
    kv = llm_gguf_find_kv(g, "t.f64");
    CHECK(kv && kv->type == LLM_GGUF_FLOAT64
          && memcmp(kv->data, &f64, 8) == 0, "f64");

    CHECK(llm_gguf_get_u32(g, "t.u32", &v32, err, sizeof(err)) == 0
          && v32 == 4000000000u, "get_u32");
    CHECK(llm_gguf_get_u32(g, "t.u8", &v32, err, sizeof(err)) == 0
          && v32 == 200, "get_u32 from u8");
    CHECK(llm_gguf_get_u32(g, "t.i32", &v32, err, sizeof(err)) == -EINVAL
          && strstr(err, "does not fit"), "get_u32 of -7: %s", err);
    CHECK(llm_gguf_get_i32(g, "t.u32", &vi32, err, sizeof(err)) == -EINVAL,
        "get_i32 of 4e9");
    CHECK(llm_gguf_get_i32(g, "t.i16", &vi32, err, sizeof(err)) == 0
          && vi32 == -30000, "get_i32 from i16");
    CHECK(llm_gguf_get_u64(g, "t.u64", &v64, err, sizeof(err)) == 0
          && v64 == u64, "get_u64");
    CHECK(llm_gguf_get_f32(g, "t.f32", &vf, err, sizeof(err)) == 0
          && vf == 0.125f, "get_f32");
    CHECK(llm_gguf_get_bool(g, "t.bool", &vb, err, sizeof(err)) == 0
          && vb == 1, "get_bool");
    CHECK(llm_gguf_get_u32(g, "t.f32", &v32, err, sizeof(err)) == -EINVAL
          && strstr(err, "t.f32") && strstr(err, "expected u32"),
        "type mismatch message: %s", err);
    CHECK(llm_gguf_get_u32(g, "nope", &v32, err, sizeof(err)) == -ENOENT
          && strstr(err, "'nope' not found"), "missing key: %s", err);
    CHECK(llm_gguf_get_str(g, "general.architecture", &s, err,
              sizeof(err)) == 0 && s.len == 5
          && memcmp(s.ptr, "llama", 5) == 0, "get_str");

    CHECK(llm_gguf_get_arr(g, "t.arr_f32", LLM_GGUF_FLOAT32, &n, &data,
              err, sizeof(err)) == 0 && n == 5
          && ((uintptr_t) data & 3) == 0
          && memcmp(data, farr, sizeof(farr)) == 0, "f32 array");
    CHECK(llm_gguf_get_arr(g, "t.arr_i32", LLM_GGUF_INT32, &n, &data,
              err, sizeof(err)) == 0 && n == 3
          && ((const int32_t *) data)[2] == 2147483647, "i32 array");
    CHECK(llm_gguf_get_arr(g, "t.arr_bool", LLM_GGUF_BOOL, &n, &data,
              err, sizeof(err)) == 0 && n == 4
          && memcmp(data, barr, 4) == 0, "bool array");
    CHECK(llm_gguf_get_arr(g, "t.arr_empty", LLM_GGUF_UINT64, &n, &data,
              err, sizeof(err)) == 0 && n == 0, "empty array");
    CHECK(llm_gguf_get_arr(g, "t.arr_f32", LLM_GGUF_INT32, &n, &data,
              err, sizeof(err)) == -EINVAL, "array elem mismatch");
    rc = llm_gguf_get_str_arr(g, "t.strs", &n, &items, err, sizeof(err));
    CHECK(rc == 0 && n == 4, "str array");
    if (rc == 0 && n == 4) {
        for (int i = 0; i < 4; i++) {
            CHECK(items[i].len == strlen(strs[i])
                  && memcmp(items[i].ptr, strs[i], items[i].len) == 0,
                "str %d", i);
        }
    }

    t = llm_gguf_find_tensor(g, "a");
    CHECK(t && t->type == 0 && t->n_dims == 2 && t->ne[0] == 8
          && t->ne[1] == 3 && t->ne[2] == 1 && t->nbytes == sizeof(da)
          && memcmp(t->data, da, sizeof(da)) == 0, "tensor a");
    t = llm_gguf_find_tensor(g, "b.weight");
    CHECK(t && t->type == 1 && t->nbytes == 128
          && t->offset % 64 == 0
          && memcmp(t->data, db, 128) == 0, "tensor b");
    t = llm_gguf_find_tensor(g, "c.weight");
    CHECK(t && t->type == 8 && t->nbytes == sizeof(dc)
          && t->offset % 64 == 0
          && memcmp(t->data, dc, sizeof(dc)) == 0, "tensor c");
    CHECK(llm_gguf_find_tensor(g, "c") == NULL, "no tensor c");
    CHECK(llm_gguf_tensor_at(g, 1) == llm_gguf_find_tensor(g, "b.weight"),
        "tensor order");
    llm_gguf_close(g);
    tk_end_as("round trip: every value type, 3 tensors, alignment 64");
}

/*
 * The file layer's type table (all ggml ids) must agree with quant.c's on
 * every type quant.c knows: same name, same bytes per block.
 */
static void
test_type_table(void)
{
    char path[128], err[512], name[32];
    llm_gguf_writer_t *w;
    llm_gguf_t *g;
    int n = 0;

    snprintf(path, sizeof(path), "%s/types.gguf", tmpdir);
    if (llm_gguf_writer_open(&w, path, err, sizeof(err)) != 0) {
        CHECK(0, "%s", err);
        tk_end_as("type table");
        return;
    }
    for (uint32_t t = 0; t < LLM_TYPE_COUNT; t++) {
        const llm_type_info_t *ti = llm_type_info(t);
        int64_t ne[1];
        if (ti == NULL || llm_repack_source(t) != t) {
            continue;           /* the engine's own layout, not in files */
        }
        CHECK(strcmp(ti->name, llm_gguf_type_name(t)) == 0,
            "type %u: quant.c says %s, gguf.c %s", t, ti->name,
            llm_gguf_type_name(t));
        snprintf(name, sizeof(name), "t%u", t);
        ne[0] = ti->block;
        llm_gguf_w_tensor(w, name, 1, ne, t);
        n++;
    }
    llm_gguf_w_begin_data(w);
    for (uint32_t t = 0; t < LLM_TYPE_COUNT; t++) {
        const llm_type_info_t *ti = llm_type_info(t);
        uint8_t buf[512] = { 0 };
        if (ti != NULL && llm_repack_source(t) == t) {
            llm_gguf_w_data(w, buf, ti->block_bytes);
        }
    }
    CHECK(llm_gguf_writer_close(w, err, sizeof(err)) == 0,
        "block sizes disagree: %s", err);
    if (llm_gguf_open(&g, path, err, sizeof(err)) == 0) {
        for (uint32_t t = 0; t < LLM_TYPE_COUNT; t++) {
            const llm_type_info_t *ti = llm_type_info(t);
            const llm_gguf_tensor_t *gt;
            if (ti == NULL || llm_repack_source(t) != t) {
                continue;
            }
            snprintf(name, sizeof(name), "t%u", t);
            gt = llm_gguf_find_tensor(g, name);
            CHECK(gt != NULL && gt->nbytes == llm_row_bytes(t, ti->block),
                "type %s: %llu bytes per block here, %zu in quant.c",
                ti->name, gt ? (unsigned long long) gt->nbytes : 0ull,
                llm_row_bytes(t, ti->block));
        }
        llm_gguf_close(g);
    } else {
        CHECK(0, "%s", err);
    }
    tk_end_as("type table: %d types agree with quant.c", n);
}

/* ---- 2. writer misuse ---- */

static void
test_writer_errors(void)
{
    char path[128], err[512];
    llm_gguf_writer_t *w;
    int64_t ne[1] = { 32 };
    float d[33] = { 0 };
    int rc;

    snprintf(path, sizeof(path), "%s/w.gguf", tmpdir);

    llm_gguf_writer_open(&w, path, err, sizeof(err));
    llm_gguf_w_tensor(w, "x", 1, ne, 0);
    llm_gguf_w_begin_data(w);
    llm_gguf_w_data(w, d, 31 * sizeof(float));
    rc = llm_gguf_writer_close(w, err, sizeof(err));
    CHECK(rc != 0 && strstr(err, "'x'") && strstr(err, "124 of 128"),
        "short data: %s", err);
    CHECK(access(path, F_OK) != 0, "failed file unlinked");

    llm_gguf_writer_open(&w, path, err, sizeof(err));
    llm_gguf_w_tensor(w, "x", 1, ne, 0);
    llm_gguf_w_begin_data(w);
    llm_gguf_w_data(w, d, 33 * sizeof(float));
    rc = llm_gguf_writer_close(w, err, sizeof(err));
    CHECK(rc != 0 && strstr(err, "more than its 128"), "long data: %s",
        err);

    llm_gguf_writer_open(&w, path, err, sizeof(err));
    llm_gguf_w_u32(w, "k", 1);
    llm_gguf_w_u32(w, "k", 2);
    rc = llm_gguf_writer_close(w, err, sizeof(err));
    CHECK(rc != 0 && strstr(err, "duplicate key 'k'"), "dup key: %s", err);

    llm_gguf_writer_open(&w, path, err, sizeof(err));
    llm_gguf_w_tensor(w, "x", 1, ne, 0);
    llm_gguf_w_tensor(w, "x", 1, ne, 0);
    rc = llm_gguf_writer_close(w, err, sizeof(err));
    CHECK(rc != 0 && strstr(err, "duplicate tensor 'x'"), "dup tensor: %s",
        err);

    llm_gguf_writer_open(&w, path, err, sizeof(err));
    llm_gguf_w_u32(w, "general.alignment", 48);
    rc = llm_gguf_writer_close(w, err, sizeof(err));
    CHECK(rc != 0 && strstr(err, "power of two"), "alignment: %s", err);

    llm_gguf_writer_open(&w, path, err, sizeof(err));
    ne[0] = 33;
    llm_gguf_w_tensor(w, "q", 1, ne, 2 /* Q4_0 */);
    rc = llm_gguf_writer_close(w, err, sizeof(err));
    CHECK(rc != 0 && strstr(err, "block size 32"), "block: %s", err);

    llm_gguf_writer_open(&w, path, err, sizeof(err));
    rc = llm_gguf_writer_close(w, err, sizeof(err));
    CHECK(rc == 0, "empty file: %s", err);
    {
        llm_gguf_t *g;
        rc = llm_gguf_open(&g, path, err, sizeof(err));
        CHECK(rc == 0 && llm_gguf_n_kv(g) == 0 && llm_gguf_n_tensors(g) == 0,
            "empty file reopens: %s", err);
        if (rc == 0) {
            llm_gguf_close(g);
        }
    }
    tk_end_as("writer: short/long data, duplicates, alignment, block size");
}

/* ---- 3. bad input ---- */

static uint8_t *ref;
static size_t ref_n;
static uint64_t ref_data_off;

static void
put32(uint8_t *b, size_t off, uint32_t v)
{
    memcpy(b + off, &v, 4);
}

static void
put64(uint8_t *b, size_t off, uint64_t v)
{
    memcpy(b + off, &v, 8);
}

static uint64_t
get64(const uint8_t *b, size_t off)
{
    uint64_t v;
    memcpy(&v, b + off, 8);
    return v;
}

/* Offset of the tensor info of name inside ref (its u64 name length). */
static size_t
tinfo_off(const char *name)
{
    size_t len = strlen(name);
    for (size_t i = 8; i + len < ref_data_off; i++) {
        if (memcmp(ref + i, name, len) == 0 && get64(ref, i - 8) == len) {
            return i - 8;
        }
    }
    return 0;
}

/* Field offsets inside a tensor info. */
static size_t
tinfo_ndims(const char *name)
{
    return tinfo_off(name) + 8 + strlen(name);
}

static size_t
tinfo_type(const char *name)
{
    uint32_t nd;
    size_t o = tinfo_ndims(name);
    memcpy(&nd, ref + o, 4);
    return o + 4 + 8 * nd;
}

static size_t
tinfo_offset(const char *name)
{
    return tinfo_type(name) + 4;
}

/* Offset of a key's u64 length inside ref. */
static size_t
key_off(const char *key)
{
    size_t len = strlen(key);
    for (size_t i = 24; i + len < ref_data_off; i++) {
        if (memcmp(ref + i, key, len) == 0 && get64(ref, i - 8) == len) {
            return i - 8;
        }
    }
    return 0;
}

/* Write b[0..n) as a file, open it, expect failure naming want. */
static void
expect_bad(const char *what, const uint8_t *b, size_t n, const char *want)
{
    char path[160], err[512];
    llm_gguf_t *g;
    int rc;

    snprintf(path, sizeof(path), "%s/bad.gguf", tmpdir);
    if (spew(path, b, n) != 0) {
        CHECK(0, "%s: cannot write %s", what, path);
        return;
    }
    err[0] = '\0';
    rc = llm_gguf_open(&g, path, err, sizeof(err));
    CHECK(rc < 0, "%s: opened a corrupted file", what);
    if (rc == 0) {
        llm_gguf_close(g);
        return;
    }
    CHECK(strstr(err, want) != NULL && strstr(err, path) != NULL
          && strchr(err, '\n') == NULL,
        "%s: message '%s' lacks '%s'", what, err, want);
}

static void
test_bad_input(void)
{
    uint8_t *b;
    size_t o, o2;
    char err[512];
    llm_gguf_t *g;
    uint64_t off0;

    ref = (uint8_t *) tk_read_file(REF_FILE, &ref_n);
    if (ref == NULL) {
        tk_fail("cannot read %s (run from the repo root)", REF_FILE);
        tk_end_as("bad input");
        return;
    }
    if (llm_gguf_open(&g, REF_FILE, err, sizeof(err)) != 0) {
        tk_fail("reference does not open: %s", err);
        tk_end_as("bad input");
        return;
    }
    ref_data_off = llm_gguf_data_offset(g);
    llm_gguf_close(g);
    b = malloc(ref_n);

#define FRESH() memcpy(b, ref, ref_n)

    FRESH();
    expect_bad("truncated header", b, 10, "truncated");
    expect_bad("truncated in metadata", b, 2000, "does not fit");
    expect_bad("truncated in tensor infos", b, ref_data_off - 100,
        "beyond end of file");
    expect_bad("truncated in data", b, ref_n / 2, "beyond end of file");
    expect_bad("last byte missing", b, ref_n - 1,
        "'blk.1.ffn_up.weight': data [");

    FRESH();
    put32(b, 4, 2);                     /* v2: same layout, must open */
    {
        char path[160];
        snprintf(path, sizeof(path), "%s/v2.gguf", tmpdir);
        err[0] = '\0';
        if (spew(path, b, ref_n) == 0
            && llm_gguf_open(&g, path, err, sizeof(err)) == 0)
        {
            CHECK(llm_gguf_version(g) == 2, "v2 reported as v%u",
                llm_gguf_version(g));
            llm_gguf_close(g);
        } else {
            CHECK(0, "GGUF v2 refused: %s", err);
        }
    }

    FRESH();
    b[0] = 'X';
    expect_bad("wrong magic", b, ref_n, "bad magic");

    FRESH();
    put32(b, 4, 99);
    expect_bad("unknown version", b, ref_n, "unsupported GGUF version 99");
    put32(b, 4, 1);
    expect_bad("version 1", b, ref_n, "unsupported GGUF version 1");

    FRESH();
    put64(b, 8, 1ull << 40);
    expect_bad("absurd tensor count", b, ref_n, "absurd counts");
    FRESH();
    put64(b, 16, UINT64_MAX);
    expect_bad("absurd key count", b, ref_n, "absurd counts");
    FRESH();
    put64(b, 16, get64(ref, 16) + 5);
    expect_bad("too many keys", b, ref_n, "");

    FRESH();
    o = tinfo_offset("blk.0.attn_q.weight");
    put64(b, o, 1ull << 30);
    expect_bad("tensor out of the file", b, ref_n,
        "tensor 'blk.0.attn_q.weight': data [");
    put64(b, o, UINT64_MAX - 31);
    expect_bad("tensor offset overflow", b, ref_n, "beyond end of file");

    FRESH();
    o = tinfo_offset("blk.0.attn_q.weight");
    off0 = get64(ref, tinfo_offset("blk.0.attn_output.weight"));
    put64(b, o, off0 + 64);
    expect_bad("overlapping tensors", b, ref_n, "overlaps");

    FRESH();
    o = tinfo_type("blk.0.attn_k.weight");
    put32(b, o, 200);
    expect_bad("unknown type", b, ref_n,
        "tensor 'blk.0.attn_k.weight': unknown type id 200");

    FRESH();
    o = tinfo_offset("blk.0.attn_k.weight");
    put64(b, o, get64(ref, o) + 4);
    expect_bad("misaligned tensor", b, ref_n, "not a multiple of the "
        "alignment 32");

    FRESH();
    o = tinfo_ndims("blk.0.attn_norm.weight");
    put32(b, o, 5);
    expect_bad("too many dims", b, ref_n, "5 dimensions");

    FRESH();
    o = tinfo_ndims("blk.0.attn_norm.weight");
    put64(b, o + 4, 0);
    expect_bad("zero dim", b, ref_n, "ne[0] = 0");

    FRESH();
    o = tinfo_ndims("blk.0.attn_q.weight");
    put64(b, o + 4, 255);
    expect_bad("row not a block multiple", b, ref_n, "not a multiple of the "
        "Q4_0 block size 32");

    FRESH();
    o = tinfo_ndims("blk.0.attn_q.weight");
    put64(b, o + 4, 1ull << 40);
    put64(b, o + 12, 1ull << 40);
    expect_bad("element count overflow", b, ref_n, "overflows");

    FRESH();
    o = key_off("tokenizer.ggml.tokens") + 8 + 21 + 4 + 4;
    put64(b, o, 1ull << 61);
    expect_bad("string array count", b, ref_n, "'tokenizer.ggml.tokens': "
        "array of 2305843009213693952 strings does not fit");

    FRESH();
    o = key_off("tokenizer.ggml.token_type") + 8 + 25 + 4 + 4;
    put64(b, o, get64(ref, o) * 1000);
    expect_bad("numeric array count", b, ref_n, "'tokenizer.ggml."
        "token_type': array of 512000 i32 elements does not fit");

    FRESH();
    o = key_off("tokenizer.ggml.token_type") + 8 + 25 + 4 + 4;
    put64(b, o, get64(ref, o) + 1);     /* one element too many */
    expect_bad("array one too long", b, ref_n, "");

    FRESH();
    o = key_off("tokenizer.ggml.tokens") + 8 + 21 + 4 + 4 + 8;
    put64(b, o, 1ull << 50);            /* first string's length */
    expect_bad("string length", b, ref_n, "'tokenizer.ggml.tokens': "
        "string 0 of 512 beyond end of file");

    FRESH();
    o = key_off("general.name") + 8 + 12;
    put32(b, o, 77);
    expect_bad("unknown value type", b, ref_n, "'general.name': unknown "
        "value type 77");

    FRESH();
    o2 = key_off("llama.attention.key_length");     /* 26 bytes, as */
    memcpy(b + o2 + 8, "llama.attention.head_count", 26);   /* this one */
    expect_bad("duplicate key", b, ref_n,
        "duplicate key 'llama.attention.head_count'");

    FRESH();
    o = tinfo_off("blk.1.attn_q.weight");
    b[o + 8 + 4] = '0';
    expect_bad("duplicate tensor", b, ref_n,
        "duplicate tensor name 'blk.0.attn_q.weight'");

    FRESH();
    off0 = get64(ref, tinfo_offset("output.weight"));
    put64(b, tinfo_offset("token_embd.weight"), off0);
    expect_bad("two tensors at one offset", b, ref_n, "overlaps");

    free(b);
    tk_end_as("bad input: 25 corrupted copies of a llama.cpp file");
}

/*
 * Random damage: 2000 rounds of 1-4 random bytes overwritten in the header
 * region of the reference file.  The reader may accept or refuse each, but
 * must not crash (run it under ASan to see reads outside the mapping), and
 * a refusal carries a message.
 */
static void
test_fuzz(void)
{
    char path[160], err[512];
    uint64_t seed = 0x9e3779b97f4a7c15ull;
    int fd, accepted = 0, refused = 0;

    if (ref == NULL) {
        return;
    }
    snprintf(path, sizeof(path), "%s/fuzz.gguf", tmpdir);
    if (spew(path, ref, ref_n) != 0 || (fd = open(path, O_RDWR)) < 0) {
        CHECK(0, "cannot write %s", path);
        tk_end_as("fuzz");
        return;
    }
    for (int round = 0; round < 2000; round++) {
        size_t pos[4];
        int nb;
        llm_gguf_t *g;

        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        nb = 1 + (int) ((seed >> 33) % 4);
        for (int i = 0; i < nb; i++) {
            uint8_t v;
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            pos[i] = (seed >> 20) % ref_data_off;
            v = (uint8_t) (seed >> 56);
            if (pwrite(fd, &v, 1, pos[i]) != 1) {
                CHECK(0, "pwrite");
            }
        }
        err[0] = '\0';
        if (llm_gguf_open(&g, path, err, sizeof(err)) == 0) {
            accepted++;
            llm_gguf_close(g);
        } else {
            refused++;
            CHECK(err[0] != '\0', "refusal without a message");
        }
        for (int i = 0; i < nb; i++) {
            if (pwrite(fd, ref + pos[i], 1, pos[i]) != 1) {
                CHECK(0, "pwrite");
            }
        }
    }
    close(fd);
    tk_end_as("fuzz: 2000 damaged headers, %d refused, %d accepted, no crash",
              refused, accepted);
}

/* ---- 4. the shared reference models ---- */

/* Open every .gguf in $LLM_SHARED/<sub>; want_tensors: model files. */
static void
test_shared_dir(const char *sub, int models)
{
    char dir[512], path[1024], err[512], name[64];
    struct dirent *de;
    DIR *d;
    int n = 0;

    snprintf(dir, sizeof(dir), "%s/%s", tk_shared_dir(), sub);
    d = opendir(dir);
    if (d == NULL) {
        snprintf(name, sizeof(name), "shared %s", sub);
        tk_skip(name, "%s absent", dir);
        return;
    }
    while ((de = readdir(d)) != NULL) {
        size_t l = strlen(de->d_name);
        llm_gguf_t *g;
        uint64_t nt;
        const llm_gguf_str_t *tok;
        if (l < 5 || strcmp(de->d_name + l - 5, ".gguf") != 0) {
            continue;
        }
        snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
        if (llm_gguf_open(&g, path, err, sizeof(err)) != 0) {
            CHECK(0, "%s", err);
            continue;
        }
        CHECK(llm_gguf_find_kv(g, "general.architecture") != NULL,
            "%s: no architecture", path);
        if (models) {
            CHECK(llm_gguf_find_tensor(g, "token_embd.weight") != NULL,
                "%s: no token_embd", path);
        } else {
            CHECK(llm_gguf_get_str_arr(g, "tokenizer.ggml.tokens", &nt, &tok,
                      err, sizeof(err)) == 0 && nt > 1000, "%s: %s", path,
                err);
        }
        llm_gguf_close(g);
        n++;
    }
    closedir(d);
    CHECK(n > 0, "no .gguf in %s", dir);
    tk_end_as("shared %s: %d files open", sub, n);
}

/* Write n bytes of b to path; 0 or -1. */
static int
put_file(const char *path, const uint8_t *b, size_t n)
{
    FILE  *f = fopen(path, "wb");
    int    rc;

    if (f == NULL) {
        return -1;
    }
    rc = fwrite(b, 1, n, f) == n ? 0 : -1;
    return fclose(f) == 0 ? rc : -1;
}

/*
 * The file under the mapping (docs/RELIABILITY.md): renamed over, the
 * mapping stays valid and check says 1; overwritten in place or truncated,
 * check says -ESTALE with the reason; a fault on the truncated mapping
 * with the guard installed exits with the given code and one log line,
 * not SIGBUS.
 */
static void
test_model_file(void)
{
    char                path[128], tmp[128], log[128], err[512], buf[1024];
    uint8_t            *b;
    size_t              n;
    llm_gguf_t         *g = NULL, *g2 = NULL;
    const uint8_t      *map;
    struct timespec     old[2];
    int                 fd, st, rc;
    pid_t               pid;
    FILE               *f;

    b = (uint8_t *) tk_read_file(REF_FILE, &n);
    CHECK(b != NULL, "%s", REF_FILE);
    if (b == NULL) {
        tk_end_as("model file changes");
        return;
    }
    snprintf(path, sizeof(path), "%s/live.gguf", tmpdir);
    snprintf(tmp, sizeof(tmp), "%s/live.gguf.new", tmpdir);
    snprintf(log, sizeof(log), "%s/guard.log", tmpdir);
    CHECK(put_file(path, b, n) == 0, "write %s", path);
    CHECK(llm_gguf_open(&g, path, err, sizeof(err)) == 0, "open: %s", err);
    if (g == NULL) {
        free(b);
        tk_end_as("model file changes");
        return;
    }
    map = llm_gguf_map(g);
    CHECK(llm_gguf_check_file(g, err, sizeof(err)) == 0, "unchanged");

    /* deploy by rename: the old mapping stays, check reports it */
    CHECK(put_file(tmp, b, n) == 0 && rename(tmp, path) == 0, "rename");
    CHECK(llm_gguf_check_file(g, err, sizeof(err)) == 1, "renamed over");
    CHECK(map[n - 1] == b[n - 1] && memcmp(map, b, 64) == 0,
          "old mapping still reads the old bytes");
    unlink(path);
    CHECK(llm_gguf_check_file(g, err, sizeof(err)) == 1, "removed");
    llm_gguf_close(g);

    /* overwritten in place (same size, one byte, a new mtime) */
    CHECK(put_file(path, b, n) == 0, "write %s", path);
    clock_gettime(CLOCK_REALTIME, &old[0]);
    old[0].tv_sec -= 3600;
    old[1] = old[0];
    CHECK(utimensat(AT_FDCWD, path, old, 0) == 0, "utimensat");
    CHECK(llm_gguf_open(&g2, path, err, sizeof(err)) == 0, "open: %s", err);
    fd = open(path, O_WRONLY);
    CHECK(fd >= 0 && pwrite(fd, b + n - 1, 1, (off_t) n - 1) == 1,
          "pwrite");
    if (fd >= 0) {
        close(fd);
    }
    rc = g2 ? llm_gguf_check_file(g2, err, sizeof(err)) : 0;
    CHECK(rc == -ESTALE && strstr(err, "was overwritten in place while "
                                  "mapped") && strstr(err, "DEPLOY.md"),
          "overwritten: %d %s", rc, err);

    /* truncated */
    CHECK(truncate(path, (off_t) n / 2) == 0, "truncate");
    rc = g2 ? llm_gguf_check_file(g2, err, sizeof(err)) : 0;
    CHECK(rc == -ESTALE && strstr(err, "was truncated while mapped"),
          "truncated: %d %s", rc, err);
    llm_gguf_close(g2);

    /* a fault on the truncated mapping: a logged exit with the code */
    CHECK(put_file(path, b, n) == 0, "write %s", path);
    fflush(NULL);
    pid = fork();
    if (pid == 0) {
        llm_gguf_t *c = NULL;

        fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd < 0 || dup2(fd, STDERR_FILENO) < 0
            || llm_gguf_open(&c, path, err, sizeof(err)) != 0
            || llm_gguf_guard(c, "test_gguf", 3) != 0
            || truncate(path, 0) != 0)
        {
            _exit(99);
        }
        map = llm_gguf_map(c);
        _exit(map[n - 1] == 0x5a ? 98 : 97);     /* faults first */
    }
    CHECK(pid > 0 && waitpid(pid, &st, 0) == pid, "fork/wait");
    CHECK(pid > 0 && WIFEXITED(st) && WEXITSTATUS(st) == 3,
          "guarded fault: exit %d, signal %d", WIFEXITED(st)
          ? WEXITSTATUS(st) : -1, WIFSIGNALED(st) ? WTERMSIG(st) : 0);
    f = fopen(log, "r");
    buf[0] = '\0';
    if (f != NULL) {
        n = fread(buf, 1, sizeof(buf) - 1, f);
        buf[n] = '\0';
        fclose(f);
    }
    CHECK(strstr(buf, "Z [error] test_gguf: model file ")
          && strstr(buf, "was truncated or overwritten while mapped")
          && strstr(buf, "exiting with code 3\n"), "log line: '%s'", buf);
    CHECK(strlen(buf) > 24 && buf[4] == '-' && buf[10] == 'T'
          && buf[23] == 'Z', "timestamp: '%.30s'", buf);
    free(b);
    tk_end_as("model file changes");
}

int
main(void)
{
    tmpdir = tk_tmpdir("test_gguf");
    test_roundtrip();
    test_type_table();
    test_writer_errors();
    test_bad_input();
    test_fuzz();
    test_model_file();
    test_shared_dir("reference", 1);
    test_shared_dir("vocab", 0);
    free(ref);
    return tk_done();
}
