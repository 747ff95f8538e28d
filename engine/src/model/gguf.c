/*
 * GGUF reader and writer (see gguf.h for the contract).
 *
 * Reader: the whole file is mapped read-only; a bounds-checked cursor walks
 * the header, the key/value section and the tensor infos, and every length
 * is compared with the bytes that remain before it is used, so no read
 * ever leaves the file.  Keys and tensor names go into open-addressing hash
 * tables.  Numeric arrays whose payload is not aligned to its element size
 * inside the file are copied once to aligned memory so callers may index
 * them as C arrays; tensor data is never copied.
 *
 * Writer: metadata is serialized into a memory buffer and tensor infos into
 * an array while the caller declares them; llm_gguf_w_begin_data() lays out
 * the data section (each tensor aligned) and writes the header, then the
 * caller streams the data tensor by tensor.  The first error is sticky and
 * reported by llm_gguf_writer_close().
 */

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/err.h"
#include "kernels/quant.h"
#include "gguf.h"

#define GG_NAME_MAX   63        /* llama.cpp: GGML_MAX_NAME - 1 */

/*
 * Block geometry of every ggml type id, including the ones this engine does
 * not compute with: the file level only needs the sizes to validate the
 * layout; whether a type can be used is the model loader's decision.  The
 * names are the type table's (llm_type_name, kernels/quant.c).
 */
typedef struct {
    uint32_t     block;
    uint32_t     bytes;
} gg_type_t;

static const gg_type_t gg_types[] = {
    [0]  = { 1, 4 },      /* F32 */      [1]  = { 1, 2 },      /* F16 */
    [2]  = { 32, 18 },    /* Q4_0 */     [3]  = { 32, 20 },    /* Q4_1 */
    [6]  = { 32, 22 },    /* Q5_0 */     [7]  = { 32, 24 },    /* Q5_1 */
    [8]  = { 32, 34 },    /* Q8_0 */     [9]  = { 32, 36 },    /* Q8_1 */
    [10] = { 256, 84 },   /* Q2_K */     [11] = { 256, 110 },  /* Q3_K */
    [12] = { 256, 144 },  /* Q4_K */     [13] = { 256, 176 },  /* Q5_K */
    [14] = { 256, 210 },  /* Q6_K */     [15] = { 256, 292 },  /* Q8_K */
    [16] = { 256, 66 },   /* IQ2_XXS */  [17] = { 256, 74 },   /* IQ2_XS */
    [18] = { 256, 98 },   /* IQ3_XXS */  [19] = { 256, 50 },   /* IQ1_S */
    [20] = { 32, 18 },    /* IQ4_NL */   [21] = { 256, 110 },  /* IQ3_S */
    [22] = { 256, 82 },   /* IQ2_S */    [23] = { 256, 136 },  /* IQ4_XS */
    [24] = { 1, 1 },      /* I8 */       [25] = { 1, 2 },      /* I16 */
    [26] = { 1, 4 },      /* I32 */      [27] = { 1, 8 },      /* I64 */
    [28] = { 1, 8 },      /* F64 */      [29] = { 256, 56 },   /* IQ1_M */
    [30] = { 1, 2 },      /* BF16 */     [34] = { 256, 54 },   /* TQ1_0 */
    [35] = { 256, 66 },   /* TQ2_0 */    [39] = { 32, 17 },    /* MXFP4 */
};

#define GG_NTYPES  (sizeof(gg_types) / sizeof(gg_types[0]))

static const gg_type_t *
gg_type(uint32_t t)
{
    if (t >= GG_NTYPES || gg_types[t].block == 0) {
        return NULL;
    }
    return &gg_types[t];
}

/* Size in bytes of one scalar of value type t; 0 for STRING/ARRAY/bad. */
static size_t
gg_vsize(uint32_t t)
{
    switch (t) {
    case LLM_GGUF_UINT8: case LLM_GGUF_INT8: case LLM_GGUF_BOOL:
        return 1;
    case LLM_GGUF_UINT16: case LLM_GGUF_INT16:
        return 2;
    case LLM_GGUF_UINT32: case LLM_GGUF_INT32: case LLM_GGUF_FLOAT32:
        return 4;
    case LLM_GGUF_UINT64: case LLM_GGUF_INT64: case LLM_GGUF_FLOAT64:
        return 8;
    default:
        return 0;
    }
}

static const char *
gg_vname(uint32_t t)
{
    static const char *names[] = {
        "u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "string",
        "array", "u64", "i64", "f64"
    };
    return t < LLM_GGUF_NTYPES ? names[t] : "?";
}

static uint64_t
gg_hash(const char *p, size_t n)
{
    uint64_t h = 1469598103934665603ull;       /* FNV-1a */
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char) p[i];
        h *= 1099511628211ull;
    }
    return h;
}

/* ------------------------------------------------------------------ */
/* Reader                                                              */
/* ------------------------------------------------------------------ */

struct llm_gguf_s {
    char               *path;
    int                 fd;
    const uint8_t      *map;
    uint64_t            size;
    dev_t               dev;           /* the file as opened: its identity */
    ino_t               ino;
    struct timespec     mtime;
    uint32_t            version;
    uint64_t            alignment;
    uint64_t            data_offset;

    uint64_t            n_kv;
    llm_gguf_kv_t      *kvs;
    uint64_t           *kv_hash;       /* index + 1, 0 = empty */
    uint64_t            kv_mask;

    uint64_t            n_tensors;
    llm_gguf_tensor_t  *tensors;
    uint64_t           *t_hash;
    uint64_t            t_mask;

    void              **copies;        /* aligned array copies, freed */
    uint64_t            n_copies;
};

typedef struct {
    const uint8_t  *base;
    uint64_t        off;
    uint64_t        size;
} gg_rd_t;

static int
rd_bytes(gg_rd_t *r, void *dst, uint64_t n)
{
    if (n > r->size - r->off) {
        return -1;
    }
    memcpy(dst, r->base + r->off, n);
    r->off += n;
    return 0;
}

static int
rd_u32(gg_rd_t *r, uint32_t *v)
{
    return rd_bytes(r, v, 4);
}

static int
rd_u64(gg_rd_t *r, uint64_t *v)
{
    return rd_bytes(r, v, 8);
}

/* A GGUF string: u64 length then bytes; checked against what remains. */
static int
rd_str(gg_rd_t *r, llm_gguf_str_t *s)
{
    uint64_t n;

    if (rd_u64(r, &n) != 0 || n > r->size - r->off) {
        return -1;
    }
    s->ptr = (const char *) r->base + r->off;
    s->len = n;
    r->off += n;
    return 0;
}

static uint64_t
hash_cap(uint64_t n)
{
    uint64_t cap = 16;
    while (cap < n * 2) {
        cap <<= 1;
    }
    return cap;
}

static const llm_gguf_kv_t *
kv_lookup(const llm_gguf_t *g, const char *key, size_t len)
{
    uint64_t h, i;

    if (g->kv_hash == NULL) {
        return NULL;
    }
    h = gg_hash(key, len);
    for (i = h & g->kv_mask; g->kv_hash[i] != 0; i = (i + 1) & g->kv_mask) {
        const llm_gguf_kv_t *kv = &g->kvs[g->kv_hash[i] - 1];
        if (kv->key.len == len && memcmp(kv->key.ptr, key, len) == 0) {
            return kv;
        }
    }
    return NULL;
}

static const llm_gguf_tensor_t *
t_lookup(const llm_gguf_t *g, const char *name, size_t len)
{
    uint64_t h, i;

    if (g->t_hash == NULL) {
        return NULL;
    }
    h = gg_hash(name, len);
    for (i = h & g->t_mask; g->t_hash[i] != 0; i = (i + 1) & g->t_mask) {
        const llm_gguf_tensor_t *t = &g->tensors[g->t_hash[i] - 1];
        if (strlen(t->name) == len && memcmp(t->name, name, len) == 0) {
            return t;
        }
    }
    return NULL;
}

static int
keep_copy(llm_gguf_t *g, void *p)
{
    void **c = realloc(g->copies, (g->n_copies + 1) * sizeof(void *));
    if (c == NULL) {
        return -ENOMEM;
    }
    g->copies = c;
    g->copies[g->n_copies++] = p;
    return 0;
}

/*
 * Parse the value of kv (its type already read) at the cursor.  Strings and
 * string arrays get their (ptr, len) table; numeric arrays are checked
 * against the remaining bytes and copied to aligned memory if the file
 * places them unaligned.
 */
static int
read_value(llm_gguf_t *g, gg_rd_t *r, llm_gguf_kv_t *kv, char *err,
    size_t errlen)
{
    const char *p = g->path;
    int klen = kv->key.len > 200 ? 200 : (int) kv->key.len;
    uint64_t n, i;
    uint32_t et;
    size_t es;

    if (kv->type == LLM_GGUF_STRING) {
        kv->strs = malloc(sizeof(llm_gguf_str_t));
        if (kv->strs == NULL) {
            return -ENOMEM;
        }
        if (rd_str(r, kv->strs) != 0) {
            llm_err(err, errlen, "%s: key '%.*s': string length beyond end "
                "of file (size %llu)", p, klen, kv->key.ptr,
                (unsigned long long) g->size);
            return -EINVAL;
        }
        kv->data = kv->strs->ptr;
        return 0;
    }

    if (kv->type != LLM_GGUF_ARRAY) {
        es = gg_vsize(kv->type);
        if (es == 0) {
            llm_err(err, errlen, "%s: key '%.*s': unknown value type %u",
                p, klen, kv->key.ptr, (unsigned) kv->type);
            return -EINVAL;
        }
        if (es > r->size - r->off) {
            llm_err(err, errlen, "%s: key '%.*s': value beyond end of file "
                "(size %llu)", p, klen, kv->key.ptr,
                (unsigned long long) g->size);
            return -EINVAL;
        }
        kv->data = r->base + r->off;
        r->off += es;
        return 0;
    }

    if (rd_u32(r, &et) != 0 || rd_u64(r, &n) != 0) {
        llm_err(err, errlen, "%s: key '%.*s': array header beyond end of "
            "file (size %llu)", p, klen, kv->key.ptr,
            (unsigned long long) g->size);
        return -EINVAL;
    }
    kv->arr_type = et;
    kv->arr_n = n;

    if (et == LLM_GGUF_STRING) {
        /* every element takes at least its 8-byte length */
        if (n > (r->size - r->off) / 8) {
            llm_err(err, errlen, "%s: key '%.*s': array of %llu strings "
                "does not fit in the %llu bytes left in the file", p, klen,
                kv->key.ptr, (unsigned long long) n,
                (unsigned long long) (r->size - r->off));
            return -EINVAL;
        }
        kv->strs = malloc((n ? n : 1) * sizeof(llm_gguf_str_t));
        if (kv->strs == NULL) {
            return -ENOMEM;
        }
        kv->data = r->base + r->off;
        for (i = 0; i < n; i++) {
            if (rd_str(r, &kv->strs[i]) != 0) {
                llm_err(err, errlen, "%s: key '%.*s': string %llu of %llu "
                    "beyond end of file (size %llu)", p, klen, kv->key.ptr,
                    (unsigned long long) i, (unsigned long long) n,
                    (unsigned long long) g->size);
                return -EINVAL;
            }
        }
        return 0;
    }

    es = gg_vsize(et);
    if (es == 0) {
        llm_err(err, errlen, "%s: key '%.*s': array of unsupported element "
            "type %u (%s)", p, klen, kv->key.ptr, (unsigned) et,
            gg_vname(et));
        return -EINVAL;
    }
    if (n > (r->size - r->off) / es) {
        llm_err(err, errlen, "%s: key '%.*s': array of %llu %s elements "
            "does not fit in the %llu bytes left in the file", p, klen,
            kv->key.ptr, (unsigned long long) n, gg_vname(et),
            (unsigned long long) (r->size - r->off));
        return -EINVAL;
    }
    kv->data = r->base + r->off;
    if (((uintptr_t) kv->data & (es - 1)) != 0 && n > 0) {
        void *c = malloc(n * es);
        if (c == NULL || keep_copy(g, c) != 0) {
            free(c);
            return -ENOMEM;
        }
        memcpy(c, kv->data, n * es);
        kv->data = c;
    }
    r->off += n * es;
    return 0;
}

/*
 * Read the n_kv key/value pairs at the cursor into g->kvs and hash every
 * key; the first malformed, truncated or duplicate one fails with err.
 */
static int
read_kvs(llm_gguf_t *g, gg_rd_t *r, char *err, size_t errlen)
{
    uint64_t i, h, j;
    uint32_t t;
    int rc;

    g->kvs = calloc(g->n_kv ? g->n_kv : 1, sizeof(llm_gguf_kv_t));
    g->kv_mask = hash_cap(g->n_kv) - 1;
    g->kv_hash = calloc(g->kv_mask + 1, sizeof(uint64_t));
    if (g->kvs == NULL || g->kv_hash == NULL) {
        return -ENOMEM;
    }

    for (i = 0; i < g->n_kv; i++) {
        llm_gguf_kv_t *kv = &g->kvs[i];

        if (rd_str(r, &kv->key) != 0) {
            llm_err(err, errlen, "%s: key %llu of %llu: name beyond end of "
                "file (size %llu)", g->path, (unsigned long long) i,
                (unsigned long long) g->n_kv, (unsigned long long) g->size);
            return -EINVAL;
        }
        if (kv->key.len == 0 || memchr(kv->key.ptr, 0, kv->key.len)) {
            llm_err(err, errlen, "%s: key %llu: empty or contains NUL",
                g->path, (unsigned long long) i);
            return -EINVAL;
        }
        if (kv_lookup(g, kv->key.ptr, kv->key.len) != NULL) {
            llm_err(err, errlen, "%s: duplicate key '%.*s'", g->path,
                (int) (kv->key.len > 200 ? 200 : kv->key.len), kv->key.ptr);
            return -EINVAL;
        }
        if (rd_u32(r, &t) != 0) {
            llm_err(err, errlen, "%s: key '%.*s': type beyond end of file "
                "(size %llu)", g->path,
                (int) (kv->key.len > 200 ? 200 : kv->key.len), kv->key.ptr,
                (unsigned long long) g->size);
            return -EINVAL;
        }
        kv->type = t;
        rc = read_value(g, r, kv, err, errlen);
        if (rc != 0) {
            return rc;
        }
        h = gg_hash(kv->key.ptr, kv->key.len);
        for (j = h & g->kv_mask; g->kv_hash[j] != 0; j = (j + 1) & g->kv_mask)
        {
            /* probe */
        }
        g->kv_hash[j] = i + 1;
    }
    return 0;
}

static int
cmp_off(const void *a, const void *b)
{
    const llm_gguf_tensor_t *x = *(const llm_gguf_tensor_t *const *) a;
    const llm_gguf_tensor_t *y = *(const llm_gguf_tensor_t *const *) b;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

/*
 * Read tensor info i at the cursor: name (unique), dims (1..4, each > 0,
 * product without overflow), a known type whose block divides ne[0], the
 * byte size; placement in the file is checked later by check_layout().
 */
static int
read_tensor_info(llm_gguf_t *g, gg_rd_t *r, uint64_t i, char *err,
    size_t errlen)
{
    llm_gguf_tensor_t *t = &g->tensors[i];
    const gg_type_t *ti;
    llm_gguf_str_t name;
    uint64_t nel, rows, h, j;
    uint32_t d;

    if (rd_str(r, &name) != 0) {
        llm_err(err, errlen, "%s: tensor %llu of %llu: name beyond end of "
            "file (size %llu)", g->path, (unsigned long long) i,
            (unsigned long long) g->n_tensors, (unsigned long long) g->size);
        return -EINVAL;
    }
    if (name.len == 0 || name.len >= sizeof(t->name)
        || memchr(name.ptr, 0, name.len))
    {
        llm_err(err, errlen, "%s: tensor %llu: name of %llu bytes is empty, "
            "too long (max %zu) or contains NUL", g->path,
            (unsigned long long) i, (unsigned long long) name.len,
            sizeof(t->name) - 1);
        return -EINVAL;
    }
    memcpy(t->name, name.ptr, name.len);
    t->name[name.len] = '\0';

    if (t_lookup(g, t->name, name.len) != NULL) {
        llm_err(err, errlen, "%s: duplicate tensor name '%s'", g->path,
            t->name);
        return -EINVAL;
    }

    if (rd_u32(r, &t->n_dims) != 0) {
        goto truncated;
    }
    if (t->n_dims < 1 || t->n_dims > LLM_GGUF_MAX_DIMS) {
        llm_err(err, errlen, "%s: tensor '%s': %u dimensions (expected 1 "
            "to %d)", g->path, t->name, t->n_dims, LLM_GGUF_MAX_DIMS);
        return -EINVAL;
    }
    nel = 1;
    for (d = 0; d < LLM_GGUF_MAX_DIMS; d++) {
        uint64_t ne = 1;
        if (d < t->n_dims && rd_u64(r, &ne) != 0) {
            goto truncated;
        }
        if (ne == 0 || ne > (uint64_t) INT64_MAX) {
            llm_err(err, errlen, "%s: tensor '%s': ne[%u] = %lld (expected "
                "> 0)", g->path, t->name, d, (long long) ne);
            return -EINVAL;
        }
        if (nel > (uint64_t) INT64_MAX / ne) {
            llm_err(err, errlen, "%s: tensor '%s': element count overflows "
                "int64", g->path, t->name);
            return -EINVAL;
        }
        nel *= ne;
        t->ne[d] = (int64_t) ne;
    }

    if (rd_u32(r, &t->type) != 0 || rd_u64(r, &t->offset) != 0) {
        goto truncated;
    }
    ti = gg_type(t->type);
    if (ti == NULL) {
        llm_err(err, errlen, "%s: tensor '%s': unknown type id %u", g->path,
            t->name, t->type);
        return -EINVAL;
    }
    if (t->ne[0] % ti->block != 0) {
        llm_err(err, errlen, "%s: tensor '%s': row length ne[0] = %lld is "
            "not a multiple of the %s block size %u", g->path, t->name,
            (long long) t->ne[0], llm_type_name(t->type), ti->block);
        return -EINVAL;
    }
    rows = nel / (uint64_t) t->ne[0];
    t->nbytes = (uint64_t) t->ne[0] / ti->block * ti->bytes;
    if (t->nbytes > UINT64_MAX / rows) {
        llm_err(err, errlen, "%s: tensor '%s': byte size overflows",
            g->path, t->name);
        return -EINVAL;
    }
    t->nbytes *= rows;

    h = gg_hash(t->name, name.len);
    for (j = h & g->t_mask; g->t_hash[j] != 0; j = (j + 1) & g->t_mask) {
        /* probe */
    }
    g->t_hash[j] = i + 1;
    return 0;

truncated:
    llm_err(err, errlen, "%s: tensor '%s': info beyond end of file (size "
        "%llu)", g->path, t->name, (unsigned long long) g->size);
    return -EINVAL;
}

/* Place every tensor: aligned, inside the file, no two overlapping. */
static int
check_layout(llm_gguf_t *g, char *err, size_t errlen)
{
    llm_gguf_tensor_t **order;
    uint64_t i, avail;

    if (g->n_tensors == 0) {
        return 0;
    }
    if (g->data_offset > g->size) {
        llm_err(err, errlen, "%s: data section starts at %llu, beyond end of "
            "file (size %llu)", g->path, (unsigned long long) g->data_offset,
            (unsigned long long) g->size);
        return -EINVAL;
    }
    avail = g->size - g->data_offset;

    for (i = 0; i < g->n_tensors; i++) {
        llm_gguf_tensor_t *t = &g->tensors[i];
        if (t->offset % g->alignment != 0) {
            llm_err(err, errlen, "%s: tensor '%s': data offset %llu is not a "
                "multiple of the alignment %llu", g->path, t->name,
                (unsigned long long) t->offset,
                (unsigned long long) g->alignment);
            return -EINVAL;
        }
        if (t->offset > avail || t->nbytes > avail - t->offset) {
            llm_err(err, errlen, "%s: tensor '%s': data [%llu, %llu) beyond "
                "end of file (size %llu)", g->path, t->name,
                (unsigned long long) (g->data_offset + t->offset),
                (unsigned long long) (g->data_offset + t->offset
                                      + t->nbytes),
                (unsigned long long) g->size);
            return -EINVAL;
        }
        t->data = g->map + g->data_offset + t->offset;
    }

    order = malloc(g->n_tensors * sizeof(*order));
    if (order == NULL) {
        return -ENOMEM;
    }
    for (i = 0; i < g->n_tensors; i++) {
        order[i] = &g->tensors[i];
    }
    qsort(order, g->n_tensors, sizeof(*order), cmp_off);
    for (i = 1; i < g->n_tensors; i++) {
        if (order[i - 1]->offset + order[i - 1]->nbytes > order[i]->offset) {
            llm_err(err, errlen, "%s: tensor '%s' (data [%llu, %llu)) "
                "overlaps tensor '%s' (data from %llu)", g->path,
                order[i - 1]->name,
                (unsigned long long) order[i - 1]->offset,
                (unsigned long long) (order[i - 1]->offset
                                      + order[i - 1]->nbytes),
                order[i]->name, (unsigned long long) order[i]->offset);
            free(order);
            return -EINVAL;
        }
    }
    free(order);
    return 0;
}

/*
 * Open and validate path.  On success *out owns the mapping and the fd;
 * on failure nothing is left open and err holds one line.
 */
int
llm_gguf_open(llm_gguf_t **out, const char *path, char *err, size_t errlen)
{
    llm_gguf_t *g;
    struct stat st;
    gg_rd_t r;
    uint32_t magic = 0;
    const llm_gguf_kv_t *al;
    uint64_t min_need;
    int rc = -EINVAL;

    *out = NULL;
    g = calloc(1, sizeof(*g));
    if (g == NULL) {
        llm_err(err, errlen, "%s: out of memory", path);
        return -ENOMEM;
    }
    g->fd = -1;
    g->path = strdup(path);
    if (g->path == NULL) {
        rc = -ENOMEM;
        goto fail;
    }

    g->fd = open(path, O_RDONLY | O_CLOEXEC);
    if (g->fd < 0 || fstat(g->fd, &st) != 0) {
        rc = -errno;
        llm_err(err, errlen, "%s: %s", path, strerror(errno));
        goto fail;
    }
    if (!S_ISREG(st.st_mode)) {
        llm_err(err, errlen, "%s: not a regular file", path);
        goto fail;
    }
    g->size = (uint64_t) st.st_size;
    g->dev = st.st_dev;
    g->ino = st.st_ino;
    g->mtime = st.st_mtim;
    if (g->size < 24) {
        llm_err(err, errlen, "%s: truncated: %llu bytes, a GGUF header needs "
            "24", path, (unsigned long long) g->size);
        goto fail;
    }
    g->map = mmap(NULL, g->size, PROT_READ, MAP_PRIVATE, g->fd, 0);
    if (g->map == MAP_FAILED) {
        g->map = NULL;
        rc = -errno;
        llm_err(err, errlen, "%s: mmap: %s", path, strerror(errno));
        goto fail;
    }

    r.base = g->map;
    r.off = 0;
    r.size = g->size;
    rd_u32(&r, &magic);
    if (magic != LLM_GGUF_MAGIC) {
        llm_err(err, errlen, "%s: bad magic 0x%08x (expected \"GGUF\")", path,
            magic);
        goto fail;
    }
    rd_u32(&r, &g->version);
    if (g->version != 2 && g->version != 3) {
        llm_err(err, errlen, "%s: unsupported GGUF version %u (expected 2 or "
            "3)", path, g->version);
        goto fail;
    }
    rd_u64(&r, &g->n_tensors);
    rd_u64(&r, &g->n_kv);

    /* a tensor info takes >= 32 bytes, a key/value >= 13 */
    if (g->n_tensors > g->size / 32 || g->n_kv > g->size / 13
        || (min_need = g->n_tensors * 32 + g->n_kv * 13) > g->size - 24)
    {
        llm_err(err, errlen, "%s: absurd counts: %llu tensors and %llu keys "
            "cannot fit in a file of %llu bytes", path,
            (unsigned long long) g->n_tensors, (unsigned long long) g->n_kv,
            (unsigned long long) g->size);
        goto fail;
    }

    rc = read_kvs(g, &r, err, errlen);
    if (rc != 0) {
        goto fail;
    }

    g->alignment = LLM_GGUF_ALIGNMENT;
    al = kv_lookup(g, "general.alignment", 17);
    if (al != NULL) {
        uint32_t a;
        if (al->type != LLM_GGUF_UINT32) {
            llm_err(err, errlen, "%s: key 'general.alignment': type %s "
                "(expected u32)", path, gg_vname(al->type));
            rc = -EINVAL;
            goto fail;
        }
        memcpy(&a, al->data, 4);
        if (a == 0 || (a & (a - 1)) != 0) {
            llm_err(err, errlen, "%s: key 'general.alignment': %u is not a "
                "power of two", path, a);
            rc = -EINVAL;
            goto fail;
        }
        g->alignment = a;
    }

    g->tensors = calloc(g->n_tensors ? g->n_tensors : 1,
        sizeof(llm_gguf_tensor_t));
    g->t_mask = hash_cap(g->n_tensors) - 1;
    g->t_hash = calloc(g->t_mask + 1, sizeof(uint64_t));
    if (g->tensors == NULL || g->t_hash == NULL) {
        rc = -ENOMEM;
        goto fail;
    }
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        rc = read_tensor_info(g, &r, i, err, errlen);
        if (rc != 0) {
            goto fail;
        }
    }

    g->data_offset = (r.off + g->alignment - 1) / g->alignment
                     * g->alignment;
    rc = check_layout(g, err, errlen);
    if (rc != 0) {
        goto fail;
    }

    *out = g;
    return 0;

fail:
    if (rc == -ENOMEM) {
        llm_err(err, errlen, "%s: out of memory", path);
    }
    llm_gguf_close(g);
    return rc;
}

void
llm_gguf_close(llm_gguf_t *g)
{
    uint64_t i;

    if (g == NULL) {
        return;
    }
    if (g->kvs != NULL) {
        for (i = 0; i < g->n_kv; i++) {
            free(g->kvs[i].strs);
        }
    }
    for (i = 0; i < g->n_copies; i++) {
        free(g->copies[i]);
    }
    free(g->copies);
    free(g->kvs);
    free(g->kv_hash);
    free(g->tensors);
    free(g->t_hash);
    if (g->map != NULL) {
        munmap((void *) g->map, g->size);
    }
    if (g->fd >= 0) {
        close(g->fd);
    }
    free(g->path);
    free(g);
}

/* ---- the file under the mapping ---------------------------------------- */

int
llm_gguf_check_file(const llm_gguf_t *g, char *err, size_t errlen)
{
    struct stat  st;

    if (fstat(g->fd, &st) != 0) {
        llm_err(err, errlen, "model file %s: fstat: %s", g->path,
               strerror(errno));
        return -errno;
    }
    if ((uint64_t) st.st_size != g->size
        || st.st_mtim.tv_sec != g->mtime.tv_sec
        || st.st_mtim.tv_nsec != g->mtime.tv_nsec)
    {
        llm_err(err, errlen, "model file %s was %s while mapped (%llu bytes, "
               "%llu at load); deploy by rename, see docs/DEPLOY.md",
               g->path, (uint64_t) st.st_size < g->size ? "truncated"
               : "overwritten in place", (unsigned long long) st.st_size,
               (unsigned long long) g->size);
        return -ESTALE;
    }
    if (stat(g->path, &st) != 0 || st.st_dev != g->dev
        || st.st_ino != g->ino)
    {
        return 1;
    }
    return 0;
}

/*
 * The SIGBUS guard: one mapping per process (the engine's model).  The
 * handler may only use async-signal-safe calls: it formats the log line
 * by hand into a buffer made at install time.
 */
static const uint8_t   *gg_guard_lo, *gg_guard_hi;
static char             gg_guard_msg[1024];
static size_t           gg_guard_len;
static int              gg_guard_code;

/* "YYYY-MM-DDTHH:MM:SS.mmmZ" of now into out (24 bytes), signal-safe. */
static void
gg_guard_time(char *out)
{
    struct timespec  ts;
    int64_t          d, z, era, doe, yoe, y, doy, mp, day, mon, sec;
    char             tmp[32];
    int              i, v[7], w[7] = { 4, 2, 2, 2, 2, 2, 3 };
    const char      *sep = "--T::.Z";
    char            *o = out;

    clock_gettime(CLOCK_REALTIME, &ts);
    sec = ts.tv_sec % 86400;
    d = ts.tv_sec / 86400;
    /* days to civil date (H. Hinnant's algorithm) */
    z = d + 719468;
    era = (z >= 0 ? z : z - 146096) / 146097;
    doe = z - era * 146097;
    yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    y = yoe + era * 400;
    doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    mp = (5 * doy + 2) / 153;
    day = doy - (153 * mp + 2) / 5 + 1;
    mon = mp < 10 ? mp + 3 : mp - 9;
    y += mon <= 2;
    v[0] = (int) y;
    v[1] = (int) mon;
    v[2] = (int) day;
    v[3] = (int) (sec / 3600);
    v[4] = (int) (sec / 60 % 60);
    v[5] = (int) (sec % 60);
    v[6] = (int) (ts.tv_nsec / 1000000);
    for (i = 0; i < 7; i++) {
        int  n = w[i], x = v[i];

        tmp[n] = '\0';
        while (n-- > 0) {
            tmp[n] = (char) ('0' + x % 10);
            x /= 10;
        }
        memcpy(o, tmp, (size_t) w[i]);
        o += w[i];
        *o++ = sep[i];
    }
}

static void
gg_guard_handler(int sig, siginfo_t *si, void *uctx)
{
    const uint8_t  *a = si->si_addr;
    char            t[32];

    (void) uctx;
    if (a >= gg_guard_lo && a < gg_guard_hi) {
        gg_guard_time(t);
        if (write(STDERR_FILENO, t, 24) < 0
            || write(STDERR_FILENO, gg_guard_msg, gg_guard_len) < 0)
        {
            /* nothing else to do: exiting anyway */
        }
        _exit(gg_guard_code);
    }
    /* not the model's mapping: the default action (a core dump) */
    signal(sig, SIG_DFL);
}

int
llm_gguf_guard(const llm_gguf_t *g, const char *prog, int exit_code)
{
    struct sigaction  sa;
    int               n;

    n = snprintf(gg_guard_msg, sizeof(gg_guard_msg), " [error] %s: model "
                 "file %s was truncated or overwritten while mapped, or a "
                 "read of it failed (SIGBUS); deploy by rename, see "
                 "docs/DEPLOY.md; exiting with code %d\n", prog, g->path, exit_code);
    if (n < 0) {
        return -EINVAL;
    }
    gg_guard_len = (size_t) n < sizeof(gg_guard_msg) ? (size_t) n
                   : sizeof(gg_guard_msg) - 1;
    gg_guard_lo = g->map;
    gg_guard_hi = g->map + g->size;
    gg_guard_code = exit_code;
    memset(&sa, 0, sizeof(sa));
    sa.sa_sigaction = gg_guard_handler;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGBUS, &sa, NULL) != 0) {
        return -errno;
    }
    return 0;
}

const char *
llm_gguf_path(const llm_gguf_t *g)
{
    return g->path;
}

uint32_t
llm_gguf_version(const llm_gguf_t *g)
{
    return g->version;
}

uint64_t
llm_gguf_file_size(const llm_gguf_t *g)
{
    return g->size;
}

const void *
llm_gguf_map(const llm_gguf_t *g)
{
    return g->map;
}

uint64_t
llm_gguf_data_offset(const llm_gguf_t *g)
{
    return g->data_offset;
}

int
llm_gguf_fd(const llm_gguf_t *g)
{
    return g->fd;
}

uint64_t
llm_gguf_alignment(const llm_gguf_t *g)
{
    return g->alignment;
}

uint64_t
llm_gguf_n_kv(const llm_gguf_t *g)
{
    return g->n_kv;
}

const llm_gguf_kv_t *
llm_gguf_kv_at(const llm_gguf_t *g, uint64_t i)
{
    return i < g->n_kv ? &g->kvs[i] : NULL;
}

const llm_gguf_kv_t *
llm_gguf_find_kv(const llm_gguf_t *g, const char *key)
{
    return kv_lookup(g, key, strlen(key));
}

uint64_t
llm_gguf_n_tensors(const llm_gguf_t *g)
{
    return g->n_tensors;
}

const llm_gguf_tensor_t *
llm_gguf_tensor_at(const llm_gguf_t *g, uint64_t i)
{
    return i < g->n_tensors ? &g->tensors[i] : NULL;
}

const llm_gguf_tensor_t *
llm_gguf_find_tensor(const llm_gguf_t *g, const char *name)
{
    return t_lookup(g, name, strlen(name));
}

const char *
llm_gguf_type_name(uint32_t type)
{
    return gg_type(type) ? llm_type_name(type) : "?";
}

uint64_t
llm_gguf_row_bytes(uint32_t type, int64_t n)
{
    const gg_type_t *t = gg_type(type);

    if (t == NULL || n < 0 || n % t->block != 0) {
        return 0;
    }
    return (uint64_t) n / t->block * t->bytes;
}

/*
 * Counts and bytes per type id over the tensors, then the types in order
 * of bytes (most first, ties by id): the one that makes the file's size
 * leads, the norms' F32 usually trails.
 */
size_t
llm_gguf_type_mix(const llm_gguf_t *g, char *buf, size_t len)
{
    uint64_t  count[GG_NTYPES], bytes[GG_NTYPES], i;
    uint32_t  t, best;
    size_t    used = 0;
    int       n, found;

    memset(count, 0, sizeof(count));
    memset(bytes, 0, sizeof(bytes));
    for (i = 0; i < g->n_tensors; i++) {
        t = g->tensors[i].type;         /* known: checked at open */
        count[t]++;
        bytes[t] += g->tensors[i].nbytes;
    }
    if (len > 0) {
        buf[0] = '\0';
    }
    for (;;) {
        found = 0;
        best = 0;
        for (t = 0; t < GG_NTYPES; t++) {
            if (count[t] != 0 && (!found || bytes[t] > bytes[best])) {
                best = t;
                found = 1;
            }
        }
        if (!found) {
            break;
        }
        n = snprintf(buf + (used < len ? used : len),
            used < len ? len - used : 0, "%s%s x %llu", used ? ", " : "",
            llm_type_name(best), (unsigned long long) count[best]);
        used += (size_t) n;
        count[best] = 0;
    }
    return used;
}

const char *
llm_gguf_vtype_name(uint32_t vtype)
{
    return gg_vname(vtype);
}

/* ---- typed getters ---- */

static const llm_gguf_kv_t *
get_kv(const llm_gguf_t *g, const char *key, char *err, size_t errlen)
{
    const llm_gguf_kv_t *kv = llm_gguf_find_kv(g, key);
    if (kv == NULL) {
        llm_err(err, errlen, "%s: key '%s' not found", g->path, key);
    }
    return kv;
}

/* Read an integer kv as a wide signed/unsigned pair; -1 if not integer. */
static int
kv_int(const llm_gguf_kv_t *kv, int64_t *sv, uint64_t *uv, int *is_signed)
{
    union { uint8_t u8; int8_t i8; uint16_t u16; int16_t i16; uint32_t u32;
            int32_t i32; uint64_t u64; int64_t i64; } v;

    memset(&v, 0, sizeof(v));
    switch (kv->type) {
    case LLM_GGUF_UINT8:  memcpy(&v.u8, kv->data, 1);  *uv = v.u8;  break;
    case LLM_GGUF_UINT16: memcpy(&v.u16, kv->data, 2); *uv = v.u16; break;
    case LLM_GGUF_UINT32: memcpy(&v.u32, kv->data, 4); *uv = v.u32; break;
    case LLM_GGUF_UINT64: memcpy(&v.u64, kv->data, 8); *uv = v.u64; break;
    case LLM_GGUF_INT8:   memcpy(&v.i8, kv->data, 1);  *sv = v.i8;  break;
    case LLM_GGUF_INT16:  memcpy(&v.i16, kv->data, 2); *sv = v.i16; break;
    case LLM_GGUF_INT32:  memcpy(&v.i32, kv->data, 4); *sv = v.i32; break;
    case LLM_GGUF_INT64:  memcpy(&v.i64, kv->data, 8); *sv = v.i64; break;
    default:
        return -1;
    }
    *is_signed = kv->type == LLM_GGUF_INT8 || kv->type == LLM_GGUF_INT16
                 || kv->type == LLM_GGUF_INT32 || kv->type == LLM_GGUF_INT64;
    return 0;
}

/*
 * Any integer-typed key as a value in [lo, hi]: both signed and unsigned
 * views are returned; a non-integer type or an out-of-range value is
 * -EINVAL naming the key.
 */
static int
get_int(const llm_gguf_t *g, const char *key, int64_t lo, uint64_t hi,
    int64_t *sout, uint64_t *uout, const char *want, char *err,
    size_t errlen)
{
    const llm_gguf_kv_t *kv = get_kv(g, key, err, errlen);
    int64_t sv = 0;
    uint64_t uv = 0;
    int is_signed;

    if (kv == NULL) {
        return -ENOENT;
    }
    if (kv_int(kv, &sv, &uv, &is_signed) != 0) {
        llm_err(err, errlen, "%s: key '%s': type %s (expected %s)", g->path,
            key, gg_vname(kv->type), want);
        return -EINVAL;
    }
    if (is_signed) {
        if (sv < lo || (sv > 0 && (uint64_t) sv > hi)) {
            goto range;
        }
        *sout = sv;
        *uout = (uint64_t) sv;
    } else {
        if (uv > hi) {
            goto range;
        }
        *sout = (int64_t) uv;
        *uout = uv;
    }
    return 0;

range:
    if (is_signed) {
        llm_err(err, errlen, "%s: key '%s': value %lld does not fit in %s",
            g->path, key, (long long) sv, want);
    } else {
        llm_err(err, errlen, "%s: key '%s': value %llu does not fit in %s",
            g->path, key, (unsigned long long) uv, want);
    }
    return -EINVAL;
}

int
llm_gguf_get_u32(const llm_gguf_t *g, const char *key, uint32_t *v,
    char *err, size_t errlen)
{
    int64_t s;
    uint64_t u;
    int rc = get_int(g, key, 0, UINT32_MAX, &s, &u, "u32", err, errlen);
    if (rc == 0) {
        *v = (uint32_t) u;
    }
    return rc;
}

int
llm_gguf_get_u64(const llm_gguf_t *g, const char *key, uint64_t *v,
    char *err, size_t errlen)
{
    int64_t s;
    uint64_t u;
    int rc = get_int(g, key, 0, UINT64_MAX, &s, &u, "u64", err, errlen);
    if (rc == 0) {
        *v = u;
    }
    return rc;
}

int
llm_gguf_get_i32(const llm_gguf_t *g, const char *key, int32_t *v,
    char *err, size_t errlen)
{
    int64_t s;
    uint64_t u;
    int rc = get_int(g, key, INT32_MIN, INT32_MAX, &s, &u, "i32", err,
        errlen);
    if (rc == 0) {
        *v = (int32_t) s;
    }
    return rc;
}

int
llm_gguf_get_f32(const llm_gguf_t *g, const char *key, float *v,
    char *err, size_t errlen)
{
    const llm_gguf_kv_t *kv = get_kv(g, key, err, errlen);

    if (kv == NULL) {
        return -ENOENT;
    }
    if (kv->type == LLM_GGUF_FLOAT32) {
        memcpy(v, kv->data, 4);
        return 0;
    }
    if (kv->type == LLM_GGUF_FLOAT64) {
        double d;
        memcpy(&d, kv->data, 8);
        *v = (float) d;
        return 0;
    }
    llm_err(err, errlen, "%s: key '%s': type %s (expected f32)", g->path, key,
        gg_vname(kv->type));
    return -EINVAL;
}

int
llm_gguf_get_bool(const llm_gguf_t *g, const char *key, int *v, char *err,
    size_t errlen)
{
    const llm_gguf_kv_t *kv = get_kv(g, key, err, errlen);
    uint8_t b;

    if (kv == NULL) {
        return -ENOENT;
    }
    if (kv->type != LLM_GGUF_BOOL) {
        llm_err(err, errlen, "%s: key '%s': type %s (expected bool)", g->path,
            key, gg_vname(kv->type));
        return -EINVAL;
    }
    memcpy(&b, kv->data, 1);
    *v = b != 0;
    return 0;
}

int
llm_gguf_get_str(const llm_gguf_t *g, const char *key, llm_gguf_str_t *v,
    char *err, size_t errlen)
{
    const llm_gguf_kv_t *kv = get_kv(g, key, err, errlen);

    if (kv == NULL) {
        return -ENOENT;
    }
    if (kv->type != LLM_GGUF_STRING) {
        llm_err(err, errlen, "%s: key '%s': type %s (expected string)",
            g->path, key, gg_vname(kv->type));
        return -EINVAL;
    }
    *v = kv->strs[0];
    return 0;
}

int
llm_gguf_get_arr(const llm_gguf_t *g, const char *key, llm_gguf_vtype_t elem,
    uint64_t *n, const void **data, char *err, size_t errlen)
{
    const llm_gguf_kv_t *kv = get_kv(g, key, err, errlen);

    if (kv == NULL) {
        return -ENOENT;
    }
    if (kv->type != LLM_GGUF_ARRAY || kv->arr_type != elem) {
        llm_err(err, errlen, "%s: key '%s': type %s%s%s (expected array of "
            "%s)", g->path, key, gg_vname(kv->type),
            kv->type == LLM_GGUF_ARRAY ? " of " : "",
            kv->type == LLM_GGUF_ARRAY ? gg_vname(kv->arr_type) : "",
            gg_vname(elem));
        return -EINVAL;
    }
    *n = kv->arr_n;
    *data = kv->data;
    return 0;
}

int
llm_gguf_get_str_arr(const llm_gguf_t *g, const char *key, uint64_t *n,
    const llm_gguf_str_t **items, char *err, size_t errlen)
{
    const llm_gguf_kv_t *kv = get_kv(g, key, err, errlen);

    if (kv == NULL) {
        return -ENOENT;
    }
    if (kv->type != LLM_GGUF_ARRAY || kv->arr_type != LLM_GGUF_STRING) {
        llm_err(err, errlen, "%s: key '%s': type %s%s%s (expected array of "
            "string)", g->path, key, gg_vname(kv->type),
            kv->type == LLM_GGUF_ARRAY ? " of " : "",
            kv->type == LLM_GGUF_ARRAY ? gg_vname(kv->arr_type) : "");
        return -EINVAL;
    }
    *n = kv->arr_n;
    *items = kv->strs;
    return 0;
}

/* ------------------------------------------------------------------ */
/* Writer                                                              */
/* ------------------------------------------------------------------ */

typedef struct {
    char        name[GG_NAME_MAX + 1];
    uint32_t    n_dims;
    int64_t     ne[LLM_GGUF_MAX_DIMS];
    uint32_t    type;
    uint64_t    offset;
    uint64_t    nbytes;
} gg_wtensor_t;

struct llm_gguf_writer_s {
    char           *path;
    FILE           *fp;
    int             rc;             /* sticky first error */
    char            msg[512];

    uint8_t        *kvbuf;          /* serialized key/values */
    size_t          kvlen, kvcap;
    uint64_t        n_kv;
    char          **keys;           /* for duplicate checks */
    uint64_t        keycap;
    uint32_t        alignment;

    gg_wtensor_t   *tensors;
    uint64_t        n_tensors, tcap;

    int             in_data;
    uint64_t        cur;            /* tensor being written */
    uint64_t        cur_written;
    uint64_t        pos;            /* bytes into the data section */
};

static int
w_fail(llm_gguf_writer_t *w, int rc, const char *fmt, ...)
{
    va_list ap;
    int n;

    if (w->rc != 0) {
        return w->rc;
    }
    w->rc = rc;
    n = snprintf(w->msg, sizeof(w->msg), "%s: ", w->path);
    va_start(ap, fmt);
    vsnprintf(w->msg + n, sizeof(w->msg) - n, fmt, ap);
    va_end(ap);
    return rc;
}

static int
w_put(llm_gguf_writer_t *w, const void *p, size_t n)
{
    if (n == 0) {
        return 0;
    }
    if (w->kvlen + n > w->kvcap) {
        size_t cap = w->kvcap ? w->kvcap : 4096;
        uint8_t *b;
        while (cap < w->kvlen + n) {
            cap *= 2;
        }
        b = realloc(w->kvbuf, cap);
        if (b == NULL) {
            return w_fail(w, -ENOMEM, "out of memory");
        }
        w->kvbuf = b;
        w->kvcap = cap;
    }
    memcpy(w->kvbuf + w->kvlen, p, n);
    w->kvlen += n;
    return 0;
}

static int
w_put_str(llm_gguf_writer_t *w, const char *s, uint64_t n)
{
    int rc = w_put(w, &n, 8);
    return rc ? rc : w_put(w, s, n);
}

/* Start a key/value: check state and duplicates, write key and type. */
static int
w_key(llm_gguf_writer_t *w, const char *key, uint32_t type)
{
    uint64_t i;
    size_t len;

    if (w->rc != 0) {
        return w->rc;
    }
    if (w->in_data) {
        return w_fail(w, -EINVAL, "key '%s' added after the header was "
            "written", key);
    }
    len = strlen(key);
    if (len == 0) {
        return w_fail(w, -EINVAL, "empty key");
    }
    for (i = 0; i < w->n_kv; i++) {
        if (strcmp(w->keys[i], key) == 0) {
            return w_fail(w, -EINVAL, "duplicate key '%s'", key);
        }
    }
    if (w->n_kv == w->keycap) {
        uint64_t cap = w->keycap ? w->keycap * 2 : 64;
        char **k = realloc(w->keys, cap * sizeof(char *));
        if (k == NULL) {
            return w_fail(w, -ENOMEM, "out of memory");
        }
        w->keys = k;
        w->keycap = cap;
    }
    w->keys[w->n_kv] = strdup(key);
    if (w->keys[w->n_kv] == NULL) {
        return w_fail(w, -ENOMEM, "out of memory");
    }
    w->n_kv++;
    if (w_put_str(w, key, len) != 0 || w_put(w, &type, 4) != 0) {
        return w->rc;
    }
    return 0;
}

int
llm_gguf_writer_open(llm_gguf_writer_t **out, const char *path, char *err,
    size_t errlen)
{
    llm_gguf_writer_t *w;

    *out = NULL;
    w = calloc(1, sizeof(*w));
    if (w == NULL || (w->path = strdup(path)) == NULL) {
        free(w);
        llm_err(err, errlen, "%s: out of memory", path);
        return -ENOMEM;
    }
    w->alignment = LLM_GGUF_ALIGNMENT;
    w->fp = fopen(path, "wb");
    if (w->fp == NULL) {
        int rc = -errno;
        llm_err(err, errlen, "%s: %s", path, strerror(errno));
        free(w->path);
        free(w);
        return rc;
    }
    setvbuf(w->fp, NULL, _IOFBF, 1 << 20);
    *out = w;
    return 0;
}

int
llm_gguf_w_u32(llm_gguf_writer_t *w, const char *key, uint32_t v)
{
    if (strcmp(key, "general.alignment") == 0) {
        if (v == 0 || (v & (v - 1)) != 0) {
            return w_fail(w, -EINVAL, "general.alignment %u is not a power "
                "of two", v);
        }
        w->alignment = v;
    }
    return w_key(w, key, LLM_GGUF_UINT32) ? w->rc : w_put(w, &v, 4);
}

int
llm_gguf_w_i32(llm_gguf_writer_t *w, const char *key, int32_t v)
{
    return w_key(w, key, LLM_GGUF_INT32) ? w->rc : w_put(w, &v, 4);
}

int
llm_gguf_w_u64(llm_gguf_writer_t *w, const char *key, uint64_t v)
{
    return w_key(w, key, LLM_GGUF_UINT64) ? w->rc : w_put(w, &v, 8);
}

int
llm_gguf_w_f32(llm_gguf_writer_t *w, const char *key, float v)
{
    return w_key(w, key, LLM_GGUF_FLOAT32) ? w->rc : w_put(w, &v, 4);
}

int
llm_gguf_w_bool(llm_gguf_writer_t *w, const char *key, int v)
{
    uint8_t b = v != 0;
    return w_key(w, key, LLM_GGUF_BOOL) ? w->rc : w_put(w, &b, 1);
}

int
llm_gguf_w_scalar(llm_gguf_writer_t *w, const char *key,
    llm_gguf_vtype_t type, const void *v)
{
    size_t es = gg_vsize(type);

    if (es == 0) {
        return w_fail(w, -EINVAL, "key '%s': type %u is not a scalar", key,
            (unsigned) type);
    }
    if (type == LLM_GGUF_UINT32) {
        uint32_t u;
        memcpy(&u, v, 4);
        return llm_gguf_w_u32(w, key, u);     /* tracks general.alignment */
    }
    return w_key(w, key, type) ? w->rc : w_put(w, v, es);
}

int
llm_gguf_w_str(llm_gguf_writer_t *w, const char *key, const char *v,
    size_t len)
{
    return w_key(w, key, LLM_GGUF_STRING) ? w->rc : w_put_str(w, v, len);
}

int
llm_gguf_w_arr(llm_gguf_writer_t *w, const char *key, llm_gguf_vtype_t elem,
    const void *data, uint64_t n)
{
    uint32_t et = elem;
    size_t es = gg_vsize(elem);

    if (es == 0) {
        return w_fail(w, -EINVAL, "key '%s': array element type %u is not "
            "numeric", key, (unsigned) elem);
    }
    if (w_key(w, key, LLM_GGUF_ARRAY) || w_put(w, &et, 4)
        || w_put(w, &n, 8) || w_put(w, data, n * es))
    {
        return w->rc;
    }
    return 0;
}

int
llm_gguf_w_str_arr(llm_gguf_writer_t *w, const char *key,
    const char *const *strs, const size_t *lens, uint64_t n)
{
    uint32_t et = LLM_GGUF_STRING;
    uint64_t i;

    if (w_key(w, key, LLM_GGUF_ARRAY) || w_put(w, &et, 4)
        || w_put(w, &n, 8))
    {
        return w->rc;
    }
    for (i = 0; i < n; i++) {
        size_t len = lens ? lens[i] : strlen(strs[i]);
        if (w_put_str(w, strs[i], len) != 0) {
            return w->rc;
        }
    }
    return 0;
}

int
llm_gguf_w_copy_kv(llm_gguf_writer_t *w, const llm_gguf_kv_t *kv)
{
    char key[256];
    uint32_t et;
    uint64_t i;

    if (kv->key.len >= sizeof(key)) {
        return w_fail(w, -EINVAL, "key of %llu bytes too long to copy",
            (unsigned long long) kv->key.len);
    }
    memcpy(key, kv->key.ptr, kv->key.len);
    key[kv->key.len] = '\0';

    if (kv->type == LLM_GGUF_STRING) {
        return llm_gguf_w_str(w, key, kv->strs[0].ptr, kv->strs[0].len);
    }
    if (kv->type == LLM_GGUF_ARRAY) {
        if (kv->arr_type != LLM_GGUF_STRING) {
            return llm_gguf_w_arr(w, key, kv->arr_type, kv->data, kv->arr_n);
        }
        et = LLM_GGUF_STRING;
        if (w_key(w, key, LLM_GGUF_ARRAY) || w_put(w, &et, 4)
            || w_put(w, &kv->arr_n, 8))
        {
            return w->rc;
        }
        for (i = 0; i < kv->arr_n; i++) {
            if (w_put_str(w, kv->strs[i].ptr, kv->strs[i].len) != 0) {
                return w->rc;
            }
        }
        return 0;
    }
    return llm_gguf_w_scalar(w, key, kv->type, kv->data);
}

int
llm_gguf_w_tensor(llm_gguf_writer_t *w, const char *name, uint32_t n_dims,
    const int64_t *ne, uint32_t type)
{
    const gg_type_t *ti = gg_type(type);
    gg_wtensor_t *t;
    uint64_t nel = 1, i;
    uint32_t d;

    if (w->rc != 0) {
        return w->rc;
    }
    if (w->in_data) {
        return w_fail(w, -EINVAL, "tensor '%s' declared after the header "
            "was written", name);
    }
    if (strlen(name) == 0 || strlen(name) > GG_NAME_MAX) {
        return w_fail(w, -EINVAL, "tensor name '%s' empty or longer than "
            "%d bytes", name, GG_NAME_MAX);
    }
    if (n_dims < 1 || n_dims > LLM_GGUF_MAX_DIMS) {
        return w_fail(w, -EINVAL, "tensor '%s': %u dimensions", name,
            n_dims);
    }
    if (ti == NULL) {
        return w_fail(w, -EINVAL, "tensor '%s': unknown type %u", name,
            type);
    }
    for (i = 0; i < w->n_tensors; i++) {
        if (strcmp(w->tensors[i].name, name) == 0) {
            return w_fail(w, -EINVAL, "duplicate tensor '%s'", name);
        }
    }
    if (w->n_tensors == w->tcap) {
        uint64_t cap = w->tcap ? w->tcap * 2 : 64;
        gg_wtensor_t *nt = realloc(w->tensors, cap * sizeof(*nt));
        if (nt == NULL) {
            return w_fail(w, -ENOMEM, "out of memory");
        }
        w->tensors = nt;
        w->tcap = cap;
    }
    t = &w->tensors[w->n_tensors];
    memset(t, 0, sizeof(*t));
    strcpy(t->name, name);
    t->n_dims = n_dims;
    t->type = type;
    for (d = 0; d < LLM_GGUF_MAX_DIMS; d++) {
        t->ne[d] = d < n_dims ? ne[d] : 1;
        if (t->ne[d] <= 0 || nel > (uint64_t) INT64_MAX / t->ne[d]) {
            return w_fail(w, -EINVAL, "tensor '%s': bad ne[%u] = %lld",
                name, d, (long long) t->ne[d]);
        }
        nel *= (uint64_t) t->ne[d];
    }
    if (t->ne[0] % ti->block != 0) {
        return w_fail(w, -EINVAL, "tensor '%s': ne[0] = %lld is not a "
            "multiple of the %s block size %u", name, (long long) t->ne[0],
            llm_type_name(type), ti->block);
    }
    t->nbytes = nel / ti->block * ti->bytes;
    w->n_tensors++;
    return 0;
}

static int
w_pad(llm_gguf_writer_t *w, uint64_t at)
{
    static const uint8_t zeros[256];
    uint64_t pad = (w->alignment - at % w->alignment) % w->alignment;

    while (pad > 0) {
        size_t n = pad > sizeof(zeros) ? sizeof(zeros) : pad;
        if (fwrite(zeros, 1, n, w->fp) != n) {
            return w_fail(w, -EIO, "write: %s", strerror(errno));
        }
        pad -= n;
    }
    return 0;
}

/*
 * Lay out the data section (each tensor at the next aligned offset, in
 * declaration order, as llama.cpp expects) and write the header, the
 * key/values, the tensor infos and the padding up to the data.
 */
int
llm_gguf_w_begin_data(llm_gguf_writer_t *w)
{
    uint32_t hdr[2] = { LLM_GGUF_MAGIC, 3 };
    uint64_t off = 0, hlen, i;

    if (w->rc != 0) {
        return w->rc;
    }
    if (w->in_data) {
        return w_fail(w, -EINVAL, "header written twice");
    }
    if (fwrite(hdr, 4, 2, w->fp) != 2
        || fwrite(&w->n_tensors, 8, 1, w->fp) != 1
        || fwrite(&w->n_kv, 8, 1, w->fp) != 1
        || (w->kvlen && fwrite(w->kvbuf, 1, w->kvlen, w->fp) != w->kvlen))
    {
        return w_fail(w, -EIO, "write: %s", strerror(errno));
    }
    hlen = 24 + w->kvlen;
    for (i = 0; i < w->n_tensors; i++) {
        gg_wtensor_t *t = &w->tensors[i];
        uint64_t nlen = strlen(t->name);

        t->offset = off;
        off += (t->nbytes + w->alignment - 1) / w->alignment * w->alignment;
        if (fwrite(&nlen, 8, 1, w->fp) != 1
            || fwrite(t->name, 1, nlen, w->fp) != nlen
            || fwrite(&t->n_dims, 4, 1, w->fp) != 1
            || fwrite(t->ne, 8, t->n_dims, w->fp) != t->n_dims
            || fwrite(&t->type, 4, 1, w->fp) != 1
            || fwrite(&t->offset, 8, 1, w->fp) != 1)
        {
            return w_fail(w, -EIO, "write: %s", strerror(errno));
        }
        hlen += 8 + nlen + 4 + 8 * t->n_dims + 4 + 8;
    }
    if (w_pad(w, hlen) != 0) {
        return w->rc;
    }
    w->in_data = 1;
    w->cur = 0;
    w->cur_written = 0;
    w->pos = 0;
    return 0;
}

/*
 * Append n bytes of the current tensor; more than it has left is an error.
 * When a tensor is complete it is padded to the alignment and the next
 * one becomes current.
 */
int
llm_gguf_w_data(llm_gguf_writer_t *w, const void *p, size_t n)
{
    gg_wtensor_t *t;

    if (w->rc != 0) {
        return w->rc;
    }
    if (!w->in_data) {
        return w_fail(w, -EINVAL, "tensor data before the header");
    }
    if (n == 0) {
        return 0;
    }
    if (w->cur >= w->n_tensors) {
        return w_fail(w, -EINVAL, "%zu bytes of data after the last tensor",
            n);
    }
    t = &w->tensors[w->cur];
    if (n > t->nbytes - w->cur_written) {
        return w_fail(w, -EINVAL, "tensor '%s': %llu bytes written, more "
            "than its %llu", t->name,
            (unsigned long long) (w->cur_written + n),
            (unsigned long long) t->nbytes);
    }
    if (fwrite(p, 1, n, w->fp) != n) {
        return w_fail(w, -EIO, "write: %s", strerror(errno));
    }
    w->cur_written += n;
    w->pos += n;
    if (w->cur_written == t->nbytes) {
        if (w_pad(w, w->pos) != 0) {
            return w->rc;
        }
        w->pos = t->offset + (t->nbytes + w->alignment - 1) / w->alignment
                 * w->alignment;
        w->cur++;
        w->cur_written = 0;
    }
    return 0;
}

static void
w_free(llm_gguf_writer_t *w)
{
    uint64_t i;

    for (i = 0; i < w->n_kv; i++) {
        free(w->keys[i]);
    }
    free(w->keys);
    free(w->kvbuf);
    free(w->tensors);
    free(w->path);
    free(w);
}

/*
 * Finish the file: the header if it was never written, then a check that
 * every declared tensor got exactly its bytes.  Any error (sticky from an
 * earlier call, or found here) is reported in err and the file removed.
 * Frees w in every case.
 */
int
llm_gguf_writer_close(llm_gguf_writer_t *w, char *err, size_t errlen)
{
    int rc;

    if (w->rc == 0 && !w->in_data) {
        llm_gguf_w_begin_data(w);
    }
    if (w->rc == 0 && w->cur < w->n_tensors) {
        w_fail(w, -EINVAL, "tensor '%s': %llu of %llu bytes written",
            w->tensors[w->cur].name, (unsigned long long) w->cur_written,
            (unsigned long long) w->tensors[w->cur].nbytes);
    }
    if (fclose(w->fp) != 0 && w->rc == 0) {
        w_fail(w, -EIO, "close: %s", strerror(errno));
    }
    rc = w->rc;
    if (rc != 0) {
        llm_err(err, errlen, "%s", w->msg);
        unlink(w->path);
    }
    w_free(w);
    return rc;
}

void
llm_gguf_writer_abort(llm_gguf_writer_t *w)
{
    if (w == NULL) {
        return;
    }
    fclose(w->fp);
    unlink(w->path);
    w_free(w);
}
