/*
 * GGUF reader and writer.
 *
 * The reader maps the file read-only and validates every count, offset,
 * size and shape before anything else may look at it; afterwards all
 * pointers it hands out point into the mapping and stay valid until
 * llm_gguf_close().  Strings inside the file are not NUL-terminated: they
 * come back as (pointer, length) pairs.
 *
 * The writer streams: metadata and tensor infos are collected first, the
 * header is written, then tensor data is appended tensor by tensor in the
 * declared order, so a file larger than RAM never needs to be in memory.
 *
 * All functions that can fail return 0 on success or a negative errno and
 * write a one-line message naming the file, key or tensor into err.
 */

#ifndef LLM_GGUF_H
#define LLM_GGUF_H

#include <stddef.h>
#include <stdint.h>

#define LLM_GGUF_MAGIC       0x46554747u     /* "GGUF" little-endian */
#define LLM_GGUF_ALIGNMENT   32
#define LLM_GGUF_MAX_DIMS    4

typedef enum {
    LLM_GGUF_UINT8 = 0,
    LLM_GGUF_INT8 = 1,
    LLM_GGUF_UINT16 = 2,
    LLM_GGUF_INT16 = 3,
    LLM_GGUF_UINT32 = 4,
    LLM_GGUF_INT32 = 5,
    LLM_GGUF_FLOAT32 = 6,
    LLM_GGUF_BOOL = 7,
    LLM_GGUF_STRING = 8,
    LLM_GGUF_ARRAY = 9,
    LLM_GGUF_UINT64 = 10,
    LLM_GGUF_INT64 = 11,
    LLM_GGUF_FLOAT64 = 12,
    LLM_GGUF_NTYPES
} llm_gguf_vtype_t;

typedef struct {
    const char  *ptr;       /* into the mapping, not NUL-terminated */
    uint64_t     len;
} llm_gguf_str_t;

/*
 * One key/value.  Scalars: data points at the value inside the mapping and
 * may be unaligned (read it with memcpy or the typed getters).  Numeric
 * arrays: data is aligned to the element size (copied once at open when the
 * file places it unaligned), so it may be indexed as a C array.  Strings:
 * strs[0]; string arrays: strs[arr_n], built at open.
 */
typedef struct {
    llm_gguf_str_t    key;
    llm_gguf_vtype_t  type;
    llm_gguf_vtype_t  arr_type;   /* element type when type == ARRAY */
    uint64_t          arr_n;      /* element count when type == ARRAY */
    const void       *data;       /* scalar value, or packed elements */
    llm_gguf_str_t   *strs;       /* string arrays and strings: [arr_n] */
} llm_gguf_kv_t;

typedef struct {
    char        name[96];         /* NUL-terminated copy (GGUF max 64) */
    uint32_t    n_dims;
    int64_t     ne[LLM_GGUF_MAX_DIMS];  /* ne[0] is the row length */
    uint32_t    type;             /* ggml type id, see quant.h */
    uint64_t    offset;           /* relative to the data section */
    uint64_t    nbytes;
    const void *data;             /* into the mapping */
} llm_gguf_tensor_t;

typedef struct llm_gguf_s llm_gguf_t;

int llm_gguf_open(llm_gguf_t **out, const char *path, char *err,
    size_t errlen);
void llm_gguf_close(llm_gguf_t *g);

const char *llm_gguf_path(const llm_gguf_t *g);
uint32_t llm_gguf_version(const llm_gguf_t *g);
uint64_t llm_gguf_file_size(const llm_gguf_t *g);
const void *llm_gguf_map(const llm_gguf_t *g);    /* base of the mapping */
uint64_t llm_gguf_data_offset(const llm_gguf_t *g);  /* file offset */
int llm_gguf_fd(const llm_gguf_t *g);             /* kept open, O_RDONLY */
uint64_t llm_gguf_alignment(const llm_gguf_t *g); /* general.alignment */

/*
 * Whether the file under the mapping is still the one opened: -ESTALE
 * with err saying so when the open file's size or mtime changed
 * (truncated or overwritten in place: the mapping may fault with SIGBUS
 * or hold other bytes); 1 when the path now names another file or none
 * (renamed over or removed: the mapping stays valid); 0 when unchanged;
 * -errno when fstat fails.
 */
int llm_gguf_check_file(const llm_gguf_t *g, char *err, size_t errlen);
/*
 * Install a SIGBUS handler for the mapping of g (one per process): a
 * fault inside it writes one log line to stderr ("model file ... was
 * truncated or overwritten while mapped ...", prefixed by the time and
 * "[error] prog:") and _exit()s with exit_code; a fault elsewhere keeps
 * the default action.  g must outlive the handler.  Returns 0 or -errno.
 */
int llm_gguf_guard(const llm_gguf_t *g, const char *prog, int exit_code);

/* Names for messages and dumps: "Q4_K", "u32"; "?" if unknown. */
const char *llm_gguf_type_name(uint32_t type);
const char *llm_gguf_vtype_name(uint32_t vtype);
/* Bytes of a row of n values of any ggml type id (run here or not); 0
 * for an unknown id or n not a multiple of the type's block. */
uint64_t llm_gguf_row_bytes(uint32_t type, int64_t n);
/*
 * The file's type mix, for llm-gguf-dump and the engine's start-up log:
 * "Q8_0 x 42, MXFP4 x 48, F32 x 97", the tensor count of each type, the
 * types in order of the bytes they hold (most first, ties by id).
 * Writes at most len bytes, NUL-terminated when len > 0; returns the
 * length of the whole line (as snprintf: >= len means it was cut).
 */
size_t llm_gguf_type_mix(const llm_gguf_t *g, char *buf, size_t len);

/* Metadata. */
uint64_t llm_gguf_n_kv(const llm_gguf_t *g);
const llm_gguf_kv_t *llm_gguf_kv_at(const llm_gguf_t *g, uint64_t i);
const llm_gguf_kv_t *llm_gguf_find_kv(const llm_gguf_t *g, const char *key);

/*
 * Typed getters: 0 on success, -ENOENT when the key is absent, -EINVAL when
 * it has another type or the value does not fit (err says which).  Integer
 * getters accept any integer type whose value fits.
 */
int llm_gguf_get_u32(const llm_gguf_t *g, const char *key, uint32_t *v,
    char *err, size_t errlen);
int llm_gguf_get_u64(const llm_gguf_t *g, const char *key, uint64_t *v,
    char *err, size_t errlen);
int llm_gguf_get_i32(const llm_gguf_t *g, const char *key, int32_t *v,
    char *err, size_t errlen);
int llm_gguf_get_f32(const llm_gguf_t *g, const char *key, float *v,
    char *err, size_t errlen);
int llm_gguf_get_bool(const llm_gguf_t *g, const char *key, int *v,
    char *err, size_t errlen);
int llm_gguf_get_str(const llm_gguf_t *g, const char *key,
    llm_gguf_str_t *v, char *err, size_t errlen);
/* Arrays: elem must match (-EINVAL otherwise); *data is packed LE values. */
int llm_gguf_get_arr(const llm_gguf_t *g, const char *key,
    llm_gguf_vtype_t elem, uint64_t *n, const void **data, char *err,
    size_t errlen);
int llm_gguf_get_str_arr(const llm_gguf_t *g, const char *key, uint64_t *n,
    const llm_gguf_str_t **items, char *err, size_t errlen);

/* Tensors. */
uint64_t llm_gguf_n_tensors(const llm_gguf_t *g);
const llm_gguf_tensor_t *llm_gguf_tensor_at(const llm_gguf_t *g,
    uint64_t i);
const llm_gguf_tensor_t *llm_gguf_find_tensor(const llm_gguf_t *g,
    const char *name);

/* Writer. */
typedef struct llm_gguf_writer_s llm_gguf_writer_t;

int llm_gguf_writer_open(llm_gguf_writer_t **out, const char *path,
    char *err, size_t errlen);
int llm_gguf_w_u32(llm_gguf_writer_t *w, const char *key, uint32_t v);
int llm_gguf_w_i32(llm_gguf_writer_t *w, const char *key, int32_t v);
int llm_gguf_w_u64(llm_gguf_writer_t *w, const char *key, uint64_t v);
int llm_gguf_w_f32(llm_gguf_writer_t *w, const char *key, float v);
int llm_gguf_w_bool(llm_gguf_writer_t *w, const char *key, int v);
/* Any scalar value type (u8 ... f64, bool); v points at its LE bytes. */
int llm_gguf_w_scalar(llm_gguf_writer_t *w, const char *key,
    llm_gguf_vtype_t type, const void *v);
int llm_gguf_w_str(llm_gguf_writer_t *w, const char *key, const char *v,
    size_t len);
int llm_gguf_w_arr(llm_gguf_writer_t *w, const char *key,
    llm_gguf_vtype_t elem, const void *data, uint64_t n);
int llm_gguf_w_str_arr(llm_gguf_writer_t *w, const char *key,
    const char *const *strs, const size_t *lens, uint64_t n);
/* Copy one key/value from an open file (used by llm-quantize). */
int llm_gguf_w_copy_kv(llm_gguf_writer_t *w, const llm_gguf_kv_t *kv);
/* Declare a tensor; data comes later, in the same order. */
int llm_gguf_w_tensor(llm_gguf_writer_t *w, const char *name,
    uint32_t n_dims, const int64_t *ne, uint32_t type);
/* Write the header; after this only tensor data may follow. */
int llm_gguf_w_begin_data(llm_gguf_writer_t *w);
/* Append the next tensor's bytes; may be called several times per tensor. */
int llm_gguf_w_data(llm_gguf_writer_t *w, const void *p, size_t n);
/* Check sizes, pad, fsync-less close; unlinks the file on failure. */
int llm_gguf_writer_close(llm_gguf_writer_t *w, char *err, size_t errlen);
void llm_gguf_writer_abort(llm_gguf_writer_t *w);

#endif /* LLM_GGUF_H */
