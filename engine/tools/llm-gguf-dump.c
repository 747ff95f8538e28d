/*
 * llm-gguf-dump: print a GGUF file's metadata and tensor table.
 *
 * Validates the file with the engine's reader first, so a file this tool
 * prints is one the engine can map.  Long arrays are abbreviated unless
 * --full is given; --kv or --tensors restrict the output to one section.
 */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/gguf.h"

static void
usage(FILE *f)
{
    fprintf(f,
        "usage: llm-gguf-dump [--full] [--kv|--tensors] FILE.gguf\n"
        "  Prints the header, every key/value and every tensor (name, type,\n"
        "  shape, offset, bytes) of a GGUF file after validating it.\n"
        "  --full     print arrays whole (default: first 8 elements)\n"
        "  --kv       only the key/values\n"
        "  --tensors  only the tensors\n");
}

static void
print_str(const char *p, uint64_t n, uint64_t max)
{
    uint64_t i;

    putchar('"');
    for (i = 0; i < n && i < max; i++) {
        unsigned char c = (unsigned char) p[i];
        if (c == '"' || c == '\\') {
            printf("\\%c", c);
        } else if (c == '\n') {
            fputs("\\n", stdout);
        } else if (c < 0x20 || c == 0x7f) {
            printf("\\x%02x", c);
        } else {
            putchar(c);
        }
    }
    putchar('"');
    if (n > max) {
        printf("...(%llu bytes)", (unsigned long long) n);
    }
}

static void
print_scalar(uint32_t type, const void *p)
{
    union { uint8_t u8; int8_t i8; uint16_t u16; int16_t i16; uint32_t u32;
            int32_t i32; uint64_t u64; int64_t i64; float f; double d; } v;

    switch (type) {
    case LLM_GGUF_UINT8:  memcpy(&v, p, 1); printf("%u", v.u8); break;
    case LLM_GGUF_INT8:   memcpy(&v, p, 1); printf("%d", v.i8); break;
    case LLM_GGUF_UINT16: memcpy(&v, p, 2); printf("%u", v.u16); break;
    case LLM_GGUF_INT16:  memcpy(&v, p, 2); printf("%d", v.i16); break;
    case LLM_GGUF_UINT32: memcpy(&v, p, 4); printf("%u", v.u32); break;
    case LLM_GGUF_INT32:  memcpy(&v, p, 4); printf("%d", v.i32); break;
    case LLM_GGUF_FLOAT32: memcpy(&v, p, 4); printf("%g", v.f); break;
    case LLM_GGUF_BOOL:   memcpy(&v, p, 1); fputs(v.u8 ? "true" : "false",
                              stdout); break;
    case LLM_GGUF_UINT64: memcpy(&v, p, 8);
        printf("%llu", (unsigned long long) v.u64); break;
    case LLM_GGUF_INT64:  memcpy(&v, p, 8);
        printf("%lld", (long long) v.i64); break;
    case LLM_GGUF_FLOAT64: memcpy(&v, p, 8); printf("%g", v.d); break;
    default: fputs("?", stdout);
    }
}

static size_t
vsize(uint32_t t)
{
    switch (t) {
    case LLM_GGUF_UINT8: case LLM_GGUF_INT8: case LLM_GGUF_BOOL: return 1;
    case LLM_GGUF_UINT16: case LLM_GGUF_INT16: return 2;
    case LLM_GGUF_UINT64: case LLM_GGUF_INT64: case LLM_GGUF_FLOAT64:
        return 8;
    default: return 4;
    }
}

int
main(int argc, char **argv)
{
    const char *path = NULL;
    int full = 0, want_kv = 1, want_t = 1;
    char err[512], mix[512];
    llm_gguf_t *g;
    uint64_t i, j, lim;

    for (int a = 1; a < argc; a++) {
        if (strcmp(argv[a], "--help") == 0 || strcmp(argv[a], "-h") == 0) {
            usage(stdout);
            return 0;
        } else if (strcmp(argv[a], "--full") == 0) {
            full = 1;
        } else if (strcmp(argv[a], "--kv") == 0) {
            want_t = 0;
        } else if (strcmp(argv[a], "--tensors") == 0) {
            want_kv = 0;
        } else if (argv[a][0] == '-' || path != NULL) {
            usage(stderr);
            return 2;
        } else {
            path = argv[a];
        }
    }
    if (path == NULL) {
        usage(stderr);
        return 2;
    }
    if (llm_gguf_open(&g, path, err, sizeof(err)) != 0) {
        fprintf(stderr, "llm-gguf-dump: %s\n", err);
        return 1;
    }

    printf("# %s: GGUF v%u, %llu bytes, %llu keys, %llu tensors, "
        "alignment %llu, data at %llu\n", path, llm_gguf_version(g),
        (unsigned long long) llm_gguf_file_size(g),
        (unsigned long long) llm_gguf_n_kv(g),
        (unsigned long long) llm_gguf_n_tensors(g),
        (unsigned long long) llm_gguf_alignment(g),
        (unsigned long long) llm_gguf_data_offset(g));
    llm_gguf_type_mix(g, mix, sizeof(mix));
    printf("# types: %s\n", mix);

    for (i = 0; want_kv && i < llm_gguf_n_kv(g); i++) {
        const llm_gguf_kv_t *kv = llm_gguf_kv_at(g, i);

        printf("%.*s: ", (int) kv->key.len, kv->key.ptr);
        if (kv->type == LLM_GGUF_STRING) {
            printf("string = ");
            print_str(kv->strs[0].ptr, kv->strs[0].len, full ? UINT64_MAX
                : 256);
        } else if (kv->type == LLM_GGUF_ARRAY) {
            printf("array[%s; %llu] = [", llm_gguf_vtype_name(kv->arr_type),
                (unsigned long long) kv->arr_n);
            lim = full ? kv->arr_n : (kv->arr_n < 8 ? kv->arr_n : 8);
            for (j = 0; j < lim; j++) {
                if (j) {
                    fputs(", ", stdout);
                }
                if (kv->arr_type == LLM_GGUF_STRING) {
                    print_str(kv->strs[j].ptr, kv->strs[j].len, 64);
                } else {
                    print_scalar(kv->arr_type, (const char *) kv->data
                        + j * vsize(kv->arr_type));
                }
            }
            fputs(lim < kv->arr_n ? ", ...]" : "]", stdout);
        } else {
            printf("%s = ", llm_gguf_vtype_name(kv->type));
            print_scalar(kv->type, kv->data);
        }
        putchar('\n');
    }

    for (i = 0; want_t && i < llm_gguf_n_tensors(g); i++) {
        const llm_gguf_tensor_t *t = llm_gguf_tensor_at(g, i);

        printf("tensor %-40s %-6s [", t->name, llm_gguf_type_name(t->type));
        for (j = 0; j < t->n_dims; j++) {
            printf("%s%lld", j ? ", " : "", (long long) t->ne[j]);
        }
        printf("] offset %llu bytes %llu\n", (unsigned long long) t->offset,
            (unsigned long long) t->nbytes);
    }
    llm_gguf_close(g);
    return 0;
}
