/*
 * Model quantization (see quantize.h).
 *
 * Type choice follows llama.cpp's llama_tensor_get_type() for the targets
 * supported here (src/llama-quant.cpp):
 *  - only 2-D and 3-D tensors whose name ends in "weight" are converted,
 *    never norms ("_norm.weight") nor the router ("ffn_gate_inp.weight");
 *    everything else is copied unchanged;
 *  - output.weight (or token_embd.weight when there is no output) gets
 *    Q6_K unless the target is Q8_0 (kept) or the row is not a multiple of
 *    the Q6_K block (Q8_0);
 *  - attn_v: Q6_K for Q4_K_M / Q5_K_M on the use_more_bits() layers, Q5_K
 *    for the first four under Q4_K_S; Q8_0 in 8-expert models;
 *  - attn_k: Q8_0 in 8-expert models;
 *  - ffn_down (and ffn_down_exps): Q6_K on use_more_bits() layers for
 *    Q4_K_M / Q5_K_M, Q5_K on the first eighth for Q4_K_S;
 *  - attn_output: Q5_K in 8-expert models for Q4_K_S / Q4_K_M;
 *  - a row that is not a multiple of the chosen type's block falls back:
 *    Q6_K -> Q8_0, Q4_K / Q5_K -> Q5_0 / Q5_1 in llama.cpp, which this
 *    engine does not compute with, so Q8_0 here; then F16 if even that
 *    does not fit.
 * The layer of a tensor is parsed from its "blk.N." name.
 */

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <unistd.h>

#include "base/err.h"
#include "model/gguf.h"
#include "kernels/quant.h"
#include "quantize.h"
#include "mkmodel.h"

#define QZ_SLAB_BYTES   (32u << 20)
#define QZ_CHUNK_ROWS   8

/* llama.cpp LLAMA_FTYPE_* */
enum {
    QZ_FT_ALL_F32 = 0, QZ_FT_F16 = 1, QZ_FT_Q4_0 = 2, QZ_FT_Q8_0 = 7,
    QZ_FT_Q4_K_S = 14, QZ_FT_Q4_K_M = 15, QZ_FT_Q5_K_S = 16,
    QZ_FT_Q5_K_M = 17, QZ_FT_Q6_K = 18, QZ_FT_BF16 = 32
};

const llm_qtype_t llm_qtypes[] = {
    { "F32",    QZ_FT_ALL_F32, LLM_TYPE_F32,  0 },
    { "F16",    QZ_FT_F16,     LLM_TYPE_F16,  0 },
    { "BF16",   QZ_FT_BF16,    LLM_TYPE_BF16, 0 },
    { "Q8_0",   QZ_FT_Q8_0,    LLM_TYPE_Q8_0, 0 },
    { "Q4_0",   QZ_FT_Q4_0,    LLM_TYPE_Q4_0, 0 },
    { "Q4_K",   QZ_FT_Q4_K_M,  LLM_TYPE_Q4_K, 1 },
    { "Q5_K",   QZ_FT_Q5_K_M,  LLM_TYPE_Q5_K, 1 },
    { "Q6_K",   QZ_FT_Q6_K,    LLM_TYPE_Q6_K, 0 },
    { "Q4_K_S", QZ_FT_Q4_K_S,  LLM_TYPE_Q4_K, 0 },
    { "Q4_K_M", QZ_FT_Q4_K_M,  LLM_TYPE_Q4_K, 0 },
    { "Q5_K_S", QZ_FT_Q5_K_S,  LLM_TYPE_Q5_K, 0 },
    { "Q5_K_M", QZ_FT_Q5_K_M,  LLM_TYPE_Q5_K, 0 },
    { NULL, 0, 0, 0 }
};

const llm_qtype_t *
llm_qtype_find(const char *name)
{
    for (const llm_qtype_t *q = llm_qtypes; q->name != NULL; q++) {
        if (strcasecmp(q->name, name) == 0) {
            return q;
        }
    }
    return NULL;
}

static int
qz_is_quantized(uint32_t t)
{
    return t != LLM_TYPE_F32 && t != LLM_TYPE_F16 && t != LLM_TYPE_BF16;
}

static uint32_t
qz_block(uint32_t t)
{
    const llm_type_info_t *ti = llm_type_info(t);
    return ti ? ti->block : 1;
}

static int
qz_ends_with(const char *s, const char *suf)
{
    size_t n = strlen(s), m = strlen(suf);
    return n >= m && strcmp(s + n - m, suf) == 0;
}

/* Model facts the rules look at, and the running counters. */
typedef struct {
    uint32_t    ftype;
    uint32_t    n_expert;
    uint32_t    n_layer;
    int         has_output;
    int         n_attention_wv;
    int         i_attention_wv;
    int         i_ffn_down;
} qz_state_t;

static int
qz_more_bits(int i, int n)
{
    return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2;
}

/* Whether llama.cpp would convert this tensor at all. */
static int
qz_wants(const llm_gguf_tensor_t *t)
{
    return qz_ends_with(t->name, "weight") && t->n_dims >= 2
           && strstr(t->name, "_norm.weight") == NULL
           && strstr(t->name, "ffn_gate_inp.weight") == NULL;
}

/* llama_tensor_get_type() for the ftypes of llm_qtypes. */
static uint32_t
qz_get_type(qz_state_t *s, uint32_t type, const llm_gguf_tensor_t *t,
    int *fallback)
{
    const char *name = t->name;
    uint32_t ft = s->ftype;
    int layer;

    if (strcmp(name, "output.weight") == 0
        || (!s->has_output && strcmp(name, "token_embd.weight") == 0))
    {
        if (t->ne[0] % qz_block(type) != 0) {
            type = LLM_TYPE_Q8_0;
        } else if (type != LLM_TYPE_Q8_0) {
            type = LLM_TYPE_Q6_K;
        }
    } else if (strcmp(name, "token_embd.weight") == 0) {
        /* only the IQ / TQ ftypes change it */
    } else if (strstr(name, "attn_v.weight") != NULL) {
        if ((ft == QZ_FT_Q4_K_M || ft == QZ_FT_Q5_K_M)
            && qz_more_bits(s->i_attention_wv, s->n_attention_wv))
        {
            type = LLM_TYPE_Q6_K;
        } else if (ft == QZ_FT_Q4_K_S && s->i_attention_wv < 4) {
            type = LLM_TYPE_Q5_K;
        }
        if (s->n_expert == 8) {
            type = LLM_TYPE_Q8_0;
        }
        s->i_attention_wv++;
    } else if (strstr(name, "attn_k.weight") != NULL) {
        if (s->n_expert == 8) {
            type = LLM_TYPE_Q8_0;
        }
    } else if (strstr(name, "ffn_down") != NULL) {
        int n_layer = (int) s->n_layer;
        if (sscanf(name, "blk.%d.", &layer) != 1) {
            layer = s->i_ffn_down;
        }
        if (ft == QZ_FT_Q4_K_M) {
            if (qz_more_bits(layer, n_layer)) {
                type = LLM_TYPE_Q6_K;
            }
        } else if (ft == QZ_FT_Q5_K_M && qz_more_bits(layer, n_layer)) {
            type = LLM_TYPE_Q6_K;
        } else if (ft == QZ_FT_Q4_K_S && layer < n_layer / 8) {
            type = LLM_TYPE_Q5_K;
        }
        s->i_ffn_down++;
    } else if (strstr(name, "attn_output.weight") != NULL) {
        if (s->n_expert == 8
            && (ft == QZ_FT_Q4_K_S || ft == QZ_FT_Q4_K_M))
        {
            type = LLM_TYPE_Q5_K;
        }
    } else if (strstr(name, "attn_qkv.weight") != NULL) {
        if (ft == QZ_FT_Q4_K_M) {
            type = LLM_TYPE_Q5_K;
        } else if (ft == QZ_FT_Q5_K_M) {
            type = LLM_TYPE_Q6_K;
        }
    }

    if (t->ne[0] % qz_block(type) != 0) {
        *fallback = 1;
        type = LLM_TYPE_Q8_0;
        if (t->ne[0] % qz_block(type) != 0) {
            type = LLM_TYPE_F16;
        }
    }
    return type;
}

/*
 * llama.cpp's loader order (weight_name_comparer): tensors outside the
 * blocks first, then by layer number, each group by name.  llama-quantize
 * converts and writes in this order, and the counters above depend on it.
 */
static const llm_gguf_t *qz_sort_g;

static int
qz_layer(const char *name)
{
    int l = -1;
    if (sscanf(name, "blk.%d.", &l) != 1) {
        l = -1;
    }
    return l;
}

static int
qz_cmp_order(const void *a, const void *b)
{
    const llm_gguf_tensor_t *x = llm_gguf_tensor_at(qz_sort_g,
        *(const uint64_t *) a);
    const llm_gguf_tensor_t *y = llm_gguf_tensor_at(qz_sort_g,
        *(const uint64_t *) b);
    int lx = qz_layer(x->name), ly = qz_layer(y->name);

    if (lx != ly) {
        return lx < ly ? -1 : 1;
    }
    return strcmp(x->name, y->name);
}

/* ---- the row conversion task ---- */

typedef struct {
    const uint8_t      *src;
    uint8_t            *dst;
    uint32_t            src_type, dst_type;
    int64_t             ne0, nrows;
    size_t              src_rb, dst_rb;
    float             **scratch;
    uint32_t            next;       /* chunk counter, atomic */
} qz_job_t;

static void
qz_task(void *arg, uint32_t ith)
{
    qz_job_t *j = arg;
    int64_t nchunks = (j->nrows + QZ_CHUNK_ROWS - 1) / QZ_CHUNK_ROWS;
    float *x = j->scratch[ith];
    uint32_t c;

    while ((c = __atomic_fetch_add(&j->next, 1, __ATOMIC_RELAXED))
           < nchunks)
    {
        int64_t r0 = (int64_t) c * QZ_CHUNK_ROWS;
        int64_t r1 = r0 + QZ_CHUNK_ROWS < j->nrows ? r0 + QZ_CHUNK_ROWS
                                                  : j->nrows;
        for (int64_t r = r0; r < r1; r++) {
            llm_dequantize_row(j->src_type, j->src + r * j->src_rb, x,
                j->ne0);
            llm_quantize_row(j->dst_type, x, j->dst + r * j->dst_rb,
                j->ne0);
        }
    }
}

/*
 * Done with a tensor: let its input pages go, so resident memory stays
 * near one tensor rather than growing to the input file's size.  The
 * mapping is read-only and file-backed, so this only drops clean pages.
 */
static void
qz_drop(const void *p, uint64_t n)
{
    uintptr_t pg = (uintptr_t) sysconf(_SC_PAGESIZE);
    uintptr_t a = ((uintptr_t) p + pg - 1) & ~(pg - 1);
    uintptr_t b = ((uintptr_t) p + n) & ~(pg - 1);

    if (b > a) {
        madvise((void *) a, b - a, MADV_DONTNEED);
    }
}

static void
qz_arch_u32(const llm_gguf_t *g, const char *arch, const char *suffix,
    uint32_t *v)
{
    char key[128];

    snprintf(key, sizeof(key), "%s.%s", arch, suffix);
    if (llm_gguf_get_u32(g, key, v, NULL, 0) != 0) {
        *v = 0;
    }
}

/*
 * Open and check the input, choose every tensor's type (in llama.cpp's
 * order), copy the metadata, then convert or copy tensor by tensor.  The
 * input stays mapped read-only; one cleanup path; the writer removes a
 * failed output.
 */
int
llm_model_quantize(const char *in_path, const char *out_path,
    const llm_qtype_t *q, const llm_quantize_params_t *params,
    llm_quantize_stats_t *st, char *err, size_t errlen)
{
    llm_gguf_t *g = NULL;
    llm_gguf_writer_t *w = NULL;
    llm_quantize_stats_t stats;
    qz_state_t s;
    qz_job_t job;
    uint32_t *types = NULL;
    uint64_t *order = NULL;
    uint8_t *slab = NULL;
    float **scratch = NULL;
    uint32_t nth = params->n_threads ? params->n_threads : 1;
    int64_t max_ne0 = 0;
    uint64_t nt, i;
    char arch[64] = "";
    llm_gguf_str_t as;
    int pure = params->pure || q->pure;
    int rc;

    memset(&stats, 0, sizeof(stats));
    memset(&s, 0, sizeof(s));
    llm_simd_init();

    rc = llm_gguf_open(&g, in_path, err, errlen);
    if (rc != 0) {
        return rc;
    }
    if (llm_gguf_get_str(g, "general.architecture", &as, NULL, 0) == 0
        && as.len < sizeof(arch))
    {
        memcpy(arch, as.ptr, as.len);
        arch[as.len] = '\0';
    }
    s.ftype = q->ftype;
    qz_arch_u32(g, arch, "expert_count", &s.n_expert);
    qz_arch_u32(g, arch, "block_count", &s.n_layer);
    nt = llm_gguf_n_tensors(g);

    /* first pass: counts the rules need, and validation of the input */
    for (i = 0; i < nt; i++) {
        const llm_gguf_tensor_t *t = llm_gguf_tensor_at(g, i);
        const llm_type_info_t *ti = llm_type_info(t->type);

        if (strstr(t->name, "attn_v.weight") != NULL
            || strstr(t->name, "attn_qkv.weight") != NULL
            || strstr(t->name, "attn_kv_b.weight") != NULL)
        {
            s.n_attention_wv++;
        }
        if (strcmp(t->name, "output.weight") == 0) {
            s.has_output = 1;
        }
        if (qz_wants(t) && (ti == NULL || !ti->supported)) {
            llm_err(err, errlen, "%s: tensor '%s': type %s cannot be "
                "converted by this engine", in_path, t->name,
                llm_gguf_type_name(t->type));
            rc = -EINVAL;
            goto done;
        }
        if (qz_wants(t) && qz_is_quantized(t->type)
            && !params->allow_requantize)
        {
            llm_err(err, errlen, "%s: tensor '%s' is already %s: "
                "requantizing loses accuracy (pass --allow-requantize)",
                in_path, t->name, llm_type_name(t->type));
            rc = -EINVAL;
            goto done;
        }
        if (t->ne[0] > max_ne0) {
            max_ne0 = t->ne[0];
        }
    }

    types = calloc(nt ? nt : 1, sizeof(uint32_t));
    order = calloc(nt ? nt : 1, sizeof(uint64_t));
    scratch = calloc(nth, sizeof(float *));
    slab = malloc(QZ_SLAB_BYTES + (size_t) max_ne0 * 4);
    if (types == NULL || order == NULL || scratch == NULL || slab == NULL) {
        rc = -ENOMEM;
        llm_err(err, errlen, "out of memory");
        goto done;
    }
    for (uint32_t k = 0; k < nth; k++) {
        scratch[k] = malloc((size_t) (max_ne0 ? max_ne0 : 1)
                            * sizeof(float));
        if (scratch[k] == NULL) {
            rc = -ENOMEM;
            llm_err(err, errlen, "out of memory");
            goto done;
        }
    }

    /* the output order, and every tensor's type in that order */
    for (i = 0; i < nt; i++) {
        order[i] = i;
    }
    qz_sort_g = g;
    qsort(order, nt, sizeof(uint64_t), qz_cmp_order);
    for (i = 0; i < nt; i++) {
        const llm_gguf_tensor_t *t = llm_gguf_tensor_at(g, order[i]);
        uint32_t type = t->type;

        if (qz_wants(t)) {
            int fb = 0;
            type = q->type;
            if (!pure && qz_is_quantized(q->type)) {
                type = qz_get_type(&s, type, t, &fb);
            } else if (t->ne[0] % qz_block(type) != 0) {
                fb = 1;
                type = LLM_TYPE_F16;
            }
            stats.n_fallback += (uint64_t) fb;
        }
        types[i] = type;
    }

    rc = llm_gguf_writer_open(&w, out_path, err, errlen);
    if (rc != 0) {
        goto done;
    }
    for (i = 0; i < llm_gguf_n_kv(g); i++) {
        const llm_gguf_kv_t *kv = llm_gguf_kv_at(g, i);
        if ((kv->key.len == 17
             && memcmp(kv->key.ptr, "general.file_type", 17) == 0)
            || (kv->key.len == 28
                && memcmp(kv->key.ptr, "general.quantization_version", 28)
                   == 0))
        {
            continue;
        }
        llm_gguf_w_copy_kv(w, kv);
    }
    llm_gguf_w_u32(w, "general.quantization_version", 2);
    llm_gguf_w_u32(w, "general.file_type", q->ftype);
    for (i = 0; i < nt; i++) {
        const llm_gguf_tensor_t *t = llm_gguf_tensor_at(g, order[i]);
        llm_gguf_w_tensor(w, t->name, t->n_dims, t->ne, types[i]);
    }
    if (llm_gguf_w_begin_data(w) != 0) {
        goto wclose;
    }

    for (i = 0; i < nt; i++) {
        const llm_gguf_tensor_t *t = llm_gguf_tensor_at(g, order[i]);
        int64_t rows = t->ne[1] * t->ne[2] * t->ne[3];
        size_t src_rb = (size_t) (t->nbytes / (uint64_t) rows);
        size_t dst_rb = llm_row_bytes(types[i], t->ne[0]);
        uint64_t out_bytes = (uint64_t) rows * dst_rb;

        if (types[i] == t->type) {
            /* copied unchanged, straight from the mapping */
            if (llm_gguf_w_data(w, t->data, t->nbytes) != 0) {
                goto wclose;
            }
            out_bytes = t->nbytes;
        } else {
            int64_t per = (int64_t) (QZ_SLAB_BYTES / dst_rb);
            if (per < 1) {
                per = 1;
            }
            memset(&job, 0, sizeof(job));
            job.src_type = t->type;
            job.dst_type = types[i];
            job.ne0 = t->ne[0];
            job.src_rb = src_rb;
            job.dst_rb = dst_rb;
            job.dst = slab;
            job.scratch = scratch;
            for (int64_t r = 0; r < rows; r += per) {
                job.src = (const uint8_t *) t->data + (size_t) r * src_rb;
                job.nrows = rows - r < per ? rows - r : per;
                job.next = 0;
                llm_mk_parallel(nth, qz_task, &job);
                if (llm_gguf_w_data(w, slab, (size_t) job.nrows * dst_rb)
                    != 0)
                {
                    goto wclose;
                }
            }
            stats.n_quantized++;
        }
        qz_drop(t->data, t->nbytes);
        stats.n_tensors++;
        stats.bytes_in += t->nbytes;
        stats.bytes_out += out_bytes;
        if (params->log != NULL) {
            fprintf(params->log, "[%4llu/%4llu] %-32s %-5s -> %-5s "
                "[%lld, %lld, %lld] %8.3f -> %8.3f MiB\n",
                (unsigned long long) i + 1, (unsigned long long) nt,
                t->name, llm_type_name(t->type), llm_type_name(types[i]),
                (long long) t->ne[0], (long long) t->ne[1],
                (long long) t->ne[2], (double) t->nbytes / 1048576.0,
                (double) out_bytes / 1048576.0);
        }
    }

wclose:
    rc = llm_gguf_writer_close(w, err, errlen);
    w = NULL;

done:
    if (scratch != NULL) {
        for (uint32_t k = 0; k < nth; k++) {
            free(scratch[k]);
        }
    }
    free(scratch);
    free(slab);
    free(types);
    free(order);
    llm_gguf_close(g);
    if (st != NULL) {
        *st = stats;
    }
    return rc;
}
