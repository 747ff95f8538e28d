/*
 * Model quantization (see quantize.h).
 *
 * Type choice follows llama.cpp's llama_tensor_get_type() (as
 * llama-quantize applies it, src/llama-quant.cpp) for the targets
 * supported here:
 *  - only 2-D and 3-D tensors whose name ends in "weight" are converted,
 *    never norms ("_norm.weight") nor the router ("ffn_gate_inp.weight");
 *    everything else is copied unchanged;
 *  - output.weight (or token_embd.weight when there is no output) gets
 *    Q6_K unless the target is Q8_0 (kept), MXFP4_MOE (Q8_0) or the row
 *    is not a multiple of the target's block (Q8_0);
 *  - attn_v (counted in order, i of n): Q6_K for Q4_K_M / Q5_K_M on the
 *    use_more_bits() ones, Q5_K for the first four under Q4_K_S; Q2_K:
 *    Q4_K with grouped-query attention (n_head / n_head_kv >= 4) else
 *    Q3_K; Q3_K_M: Q5_K for the first two, then Q4_K; Q3_K_L: Q5_K;
 *    IQ4_NL / IQ4_XS: Q5_K with GQA >= 4; Q8_0 in 8-expert models;
 *  - attn_k: Q8_0 in 8-expert models;
 *  - ffn_down (and ffn_down_exps), by layer: Q2_K: Q3_K; Q3_K_M: Q5_K on
 *    the first sixteenth, then Q4_K; Q3_K_L: Q5_K; Q4_K_M / Q5_K_M: Q6_K
 *    on use_more_bits() layers; Q4_K_S: Q5_K on the first eighth; IQ4_NL
 *    / IQ4_XS without an importance matrix: Q5_K on the first eighth;
 *    Q4_0 / Q5_0 with one: Q4_1 / Q5_1 on the first eighth;
 *  - attn_output: in 8-expert models Q5_K for Q2_K, Q3_K_S/M, Q4_K_S/M,
 *    IQ4_NL, IQ4_XS; otherwise Q3_K for Q2_K, Q4_K for Q3_K_M, Q5_K for
 *    Q3_K_L;
 *  - MXFP4_MOE: expert tensors (3-D) MXFP4, every other matrix Q8_0;
 *  - a row that is not a multiple of the chosen type's block falls back
 *    as llama.cpp does: Q2_K / Q3_K -> Q4_0, Q4_K -> Q5_0, Q5_K -> Q5_1,
 *    Q6_K -> Q8_0, IQ4_XS -> IQ4_NL; then F16 if even that does not fit
 *    (and F16 for the 32-blocks, where llama.cpp gives up).
 * The layer of a tensor is parsed from its "blk.N." name.  Falcon's and
 * LLaMA-70B's special cases are kept; attn_qkv follows the rule of the
 * llama.cpp releases before its tensor categories (Q4_K for Q3_K_M/L,
 * Q5_K for Q4_K_M, Q6_K for Q5_K_M).
 *
 * With an importance matrix (params->imatrix) each matrix is quantized
 * with its entry's weights (per expert for a 3-D tensor), and the file
 * gets llama-quantize's quantize.imatrix.* keys; quantize_rows.h says
 * which types use the weights.
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
#include "imatrix.h"
#include "quantize.h"
#include "quantize_rows.h"
#include "mkmodel.h"

#define QZ_SLAB_BYTES   (32u << 20)
#define QZ_CHUNK_ROWS   8

/* llama.cpp LLAMA_FTYPE_* */
enum {
    QZ_FT_ALL_F32 = 0, QZ_FT_F16 = 1, QZ_FT_Q4_0 = 2, QZ_FT_Q4_1 = 3,
    QZ_FT_Q8_0 = 7, QZ_FT_Q5_0 = 8, QZ_FT_Q5_1 = 9, QZ_FT_Q2_K = 10,
    QZ_FT_Q3_K_S = 11, QZ_FT_Q3_K_M = 12, QZ_FT_Q3_K_L = 13,
    QZ_FT_Q4_K_S = 14, QZ_FT_Q4_K_M = 15, QZ_FT_Q5_K_S = 16,
    QZ_FT_Q5_K_M = 17, QZ_FT_Q6_K = 18, QZ_FT_IQ4_NL = 25,
    QZ_FT_IQ4_XS = 30, QZ_FT_BF16 = 32, QZ_FT_MXFP4_MOE = 38
};

const llm_qtype_t llm_qtypes[] = {
    { "F32",       QZ_FT_ALL_F32,   LLM_TYPE_F32,    0 },
    { "F16",       QZ_FT_F16,       LLM_TYPE_F16,    0 },
    { "BF16",      QZ_FT_BF16,      LLM_TYPE_BF16,   0 },
    { "Q8_0",      QZ_FT_Q8_0,      LLM_TYPE_Q8_0,   0 },
    { "Q4_0",      QZ_FT_Q4_0,      LLM_TYPE_Q4_0,   0 },
    { "Q4_1",      QZ_FT_Q4_1,      LLM_TYPE_Q4_1,   0 },
    { "Q5_0",      QZ_FT_Q5_0,      LLM_TYPE_Q5_0,   0 },
    { "Q5_1",      QZ_FT_Q5_1,      LLM_TYPE_Q5_1,   0 },
    { "Q2_K",      QZ_FT_Q2_K,      LLM_TYPE_Q2_K,   0 },
    { "Q3_K",      QZ_FT_Q3_K_M,    LLM_TYPE_Q3_K,   1 },
    { "Q4_K",      QZ_FT_Q4_K_M,    LLM_TYPE_Q4_K,   1 },
    { "Q5_K",      QZ_FT_Q5_K_M,    LLM_TYPE_Q5_K,   1 },
    { "Q6_K",      QZ_FT_Q6_K,      LLM_TYPE_Q6_K,   0 },
    { "Q3_K_S",    QZ_FT_Q3_K_S,    LLM_TYPE_Q3_K,   0 },
    { "Q3_K_M",    QZ_FT_Q3_K_M,    LLM_TYPE_Q3_K,   0 },
    { "Q3_K_L",    QZ_FT_Q3_K_L,    LLM_TYPE_Q3_K,   0 },
    { "Q4_K_S",    QZ_FT_Q4_K_S,    LLM_TYPE_Q4_K,   0 },
    { "Q4_K_M",    QZ_FT_Q4_K_M,    LLM_TYPE_Q4_K,   0 },
    { "Q5_K_S",    QZ_FT_Q5_K_S,    LLM_TYPE_Q5_K,   0 },
    { "Q5_K_M",    QZ_FT_Q5_K_M,    LLM_TYPE_Q5_K,   0 },
    { "IQ4_NL",    QZ_FT_IQ4_NL,    LLM_TYPE_IQ4_NL, 0 },
    { "IQ4_XS",    QZ_FT_IQ4_XS,    LLM_TYPE_IQ4_XS, 0 },
    { "MXFP4_MOE", QZ_FT_MXFP4_MOE, LLM_TYPE_MXFP4,  0 },
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
    uint32_t    n_gqa;          /* n_head / n_head_kv, 0 if unknown */
    int         has_output;
    int         has_imatrix;
    int         falcon;
    int         bailingmoe3;
    int         llama70b;       /* llama.cpp's LLM_TYPE_70B */
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

static int
qz_is_token_embd(const char *name)
{
    return strcmp(name, "token_embd.weight") == 0
           || strcmp(name, "per_layer_token_embd.weight") == 0;
}

/* llama.cpp's fallback for a row that is not a multiple of t's block. */
static uint32_t
qz_fallback(uint32_t t, int64_t ne0, int *fallback)
{
    if (ne0 % qz_block(t) == 0) {
        return t;
    }
    *fallback = 1;
    switch (t) {
    case LLM_TYPE_Q2_K:
    case LLM_TYPE_Q3_K:
        t = LLM_TYPE_Q4_0;
        break;
    case LLM_TYPE_Q4_K:
        t = LLM_TYPE_Q5_0;
        break;
    case LLM_TYPE_Q5_K:
        t = LLM_TYPE_Q5_1;
        break;
    case LLM_TYPE_Q6_K:
        t = LLM_TYPE_Q8_0;
        break;
    case LLM_TYPE_IQ4_XS:
        t = LLM_TYPE_IQ4_NL;
        break;
    default:
        t = LLM_TYPE_F16;
        break;
    }
    return ne0 % qz_block(t) == 0 ? t : LLM_TYPE_F16;
}

/* The output matrix (or the tied token embedding). */
static uint32_t
qz_type_output(const qz_state_t *s, uint32_t type, int64_t ne0)
{
    if (s->ftype == QZ_FT_MXFP4_MOE) {
        return LLM_TYPE_Q8_0;
    }
    if (s->falcon || ne0 % qz_block(type) != 0) {
        return LLM_TYPE_Q8_0;
    }
    return type != LLM_TYPE_Q8_0 ? LLM_TYPE_Q6_K : type;
}

static uint32_t
qz_type_attn_v(qz_state_t *s, uint32_t type)
{
    uint32_t ft = s->ftype;

    if (ft == QZ_FT_Q2_K) {
        type = s->n_gqa >= 4 ? LLM_TYPE_Q4_K : LLM_TYPE_Q3_K;
    } else if (ft == QZ_FT_Q3_K_M) {
        type = s->i_attention_wv < 2 ? LLM_TYPE_Q5_K : LLM_TYPE_Q4_K;
    } else if (ft == QZ_FT_Q3_K_L) {
        type = LLM_TYPE_Q5_K;
    } else if ((ft == QZ_FT_IQ4_NL || ft == QZ_FT_IQ4_XS) && s->n_gqa >= 4) {
        type = LLM_TYPE_Q5_K;
    } else if ((ft == QZ_FT_Q4_K_M || ft == QZ_FT_Q5_K_M)
               && qz_more_bits(s->i_attention_wv, s->n_attention_wv))
    {
        type = LLM_TYPE_Q6_K;
    } else if (ft == QZ_FT_Q4_K_S && s->i_attention_wv < 4) {
        type = LLM_TYPE_Q5_K;
    }
    if (s->llama70b && (type == LLM_TYPE_Q3_K || type == LLM_TYPE_Q4_K)) {
        type = LLM_TYPE_Q5_K;
    }
    if (s->n_expert == 8) {
        type = LLM_TYPE_Q8_0;
    }
    s->i_attention_wv++;
    return type;
}

static uint32_t
qz_type_ffn_down(qz_state_t *s, uint32_t type, const char *name)
{
    uint32_t ft = s->ftype;
    int n = (int) s->n_layer, i;

    if (sscanf(name, "blk.%d.", &i) != 1) {
        i = s->i_ffn_down;
    }
    s->i_ffn_down++;
    if (ft == QZ_FT_Q2_K) {
        return LLM_TYPE_Q3_K;
    }
    if (ft == QZ_FT_Q3_K_M) {
        return i < n / 16 ? LLM_TYPE_Q5_K
               : !s->falcon || qz_more_bits(i, n) ? LLM_TYPE_Q4_K
               : LLM_TYPE_Q3_K;
    }
    if (ft == QZ_FT_Q3_K_L) {
        return s->falcon ? LLM_TYPE_Q4_K : LLM_TYPE_Q5_K;
    }
    if (ft == QZ_FT_Q4_K_M) {
        if (s->falcon) {
            return i < n / 16 ? LLM_TYPE_Q6_K
                   : qz_more_bits(i, n) ? LLM_TYPE_Q5_K : LLM_TYPE_Q4_K;
        }
        return qz_more_bits(i, n) ? LLM_TYPE_Q6_K : type;
    }
    if (i < n / 8 && (ft == QZ_FT_IQ4_NL || ft == QZ_FT_IQ4_XS)
        && !s->has_imatrix)
    {
        return LLM_TYPE_Q5_K;
    }
    if (ft == QZ_FT_Q5_K_M && qz_more_bits(i, n)) {
        return LLM_TYPE_Q6_K;
    }
    if (ft == QZ_FT_Q4_K_S && !s->falcon && i < n / 8) {
        return LLM_TYPE_Q5_K;
    }
    if ((ft == QZ_FT_Q4_0 || ft == QZ_FT_Q5_0) && s->has_imatrix
        && i < n / 8)
    {
        return ft == QZ_FT_Q4_0 ? LLM_TYPE_Q4_1 : LLM_TYPE_Q5_1;
    }
    return type;
}

static uint32_t
qz_type_attn_output(const qz_state_t *s, uint32_t type)
{
    uint32_t ft = s->ftype;

    if (s->falcon) {
        return ft == QZ_FT_Q3_K_L ? LLM_TYPE_Q4_K : type;
    }
    if (s->n_expert == 8) {
        if (ft == QZ_FT_Q2_K || ft == QZ_FT_Q3_K_S || ft == QZ_FT_Q3_K_M
            || ft == QZ_FT_IQ4_NL || ft == QZ_FT_Q4_K_S
            || ft == QZ_FT_Q4_K_M || ft == QZ_FT_IQ4_XS)
        {
            type = LLM_TYPE_Q5_K;
        }
        return type;
    }
    if (ft == QZ_FT_Q2_K) {
        return LLM_TYPE_Q3_K;
    }
    if (ft == QZ_FT_Q3_K_M) {
        return LLM_TYPE_Q4_K;
    }
    if (ft == QZ_FT_Q3_K_L) {
        return LLM_TYPE_Q5_K;
    }
    return type;
}

/* llama_tensor_get_type() for the ftypes of llm_qtypes (not --pure). */
static uint32_t
qz_get_type(qz_state_t *s, uint32_t type, const llm_gguf_tensor_t *t)
{
    const char *name = t->name;
    uint32_t ft = s->ftype;

    if (strcmp(name, "output.weight") == 0
        || (!s->has_output && qz_is_token_embd(name)))
    {
        return qz_type_output(s, type, t->ne[0]);
    }
    if (ft == QZ_FT_MXFP4_MOE) {
        int expert = strstr(name, "ffn_up") != NULL
                     || strstr(name, "ffn_gate") != NULL
                     || strstr(name, "ffn_down") != NULL;
        return t->ne[2] > 1 && (!s->bailingmoe3 || expert)
               ? LLM_TYPE_MXFP4 : LLM_TYPE_Q8_0;
    }
    if (qz_is_token_embd(name)) {
        return type;    /* only the IQ1/IQ2/IQ3 / TQ ftypes change it */
    }
    if (strstr(name, "attn_v.weight") != NULL) {
        return qz_type_attn_v(s, type);
    }
    if (strstr(name, "attn_k.weight") != NULL) {
        return s->n_expert == 8 ? LLM_TYPE_Q8_0 : type;
    }
    if (strstr(name, "ffn_down") != NULL) {
        return qz_type_ffn_down(s, type, name);
    }
    if (strstr(name, "attn_output.weight") != NULL) {
        return qz_type_attn_output(s, type);
    }
    if (strstr(name, "attn_qkv.weight") != NULL) {
        if (ft == QZ_FT_Q3_K_M || ft == QZ_FT_Q3_K_L) {
            type = LLM_TYPE_Q4_K;
        } else if (ft == QZ_FT_Q4_K_M) {
            type = LLM_TYPE_Q5_K;
        } else if (ft == QZ_FT_Q5_K_M) {
            type = LLM_TYPE_Q6_K;
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
    int64_t             row0;       /* of src in the tensor */
    int64_t             ne1;        /* rows per expert */
    size_t              src_rb, dst_rb;
    const float        *imatrix;    /* ne0 per expert, or NULL */
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
            const float *qw = NULL;

            if (j->imatrix != NULL) {
                qw = j->imatrix + (j->row0 + r) / j->ne1 * j->ne0;
            }
            llm_dequantize_row(j->src_type, j->src + r * j->src_rb, x,
                j->ne0);
            llm_qz_row(j->dst_type, x, j->dst + r * j->dst_rb, j->ne0, qw);
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
    const llm_gguf_kv_t *kv;

    snprintf(key, sizeof(key), "%s.%s", arch, suffix);
    if (llm_gguf_get_u32(g, key, v, NULL, 0) == 0) {
        return;
    }
    /* a per-layer array: llama.cpp's hparams for layer 0 */
    *v = 0;
    kv = llm_gguf_find_kv(g, key);
    if (kv != NULL && kv->type == LLM_GGUF_ARRAY && kv->arr_n > 0
        && (kv->arr_type == LLM_GGUF_UINT32
            || kv->arr_type == LLM_GGUF_INT32))
    {
        memcpy(v, kv->data, 4);
    }
}

/* The model facts llama_tensor_get_type looks at besides the names. */
static void
qz_model_facts(const llm_gguf_t *g, const char *arch, qz_state_t *s)
{
    uint32_t n_head = 0, n_head_kv = 0;
    char key[128];

    qz_arch_u32(g, arch, "expert_count", &s->n_expert);
    qz_arch_u32(g, arch, "block_count", &s->n_layer);
    qz_arch_u32(g, arch, "attention.head_count", &n_head);
    qz_arch_u32(g, arch, "attention.head_count_kv", &n_head_kv);
    snprintf(key, sizeof(key), "%s.attention.head_count_kv", arch);
    if (llm_gguf_find_kv(g, key) == NULL) {
        n_head_kv = n_head;         /* llama.cpp's default */
    }
    s->n_gqa = n_head_kv ? n_head / n_head_kv : 0;
    s->falcon = strcmp(arch, "falcon") == 0;
    s->bailingmoe3 = strcmp(arch, "bailingmoe3") == 0;
    s->llama70b = strcmp(arch, "llama") == 0 && s->n_layer == 80
                  && n_head != n_head_kv;
}

/* The type of tensor t (llama.cpp's choice for target q). */
static uint32_t
qz_choose(qz_state_t *s, const llm_qtype_t *q, int pure,
    const llm_gguf_tensor_t *t, int *fb)
{
    uint32_t type = q->type;

    if (!qz_is_quantized(type)) {
        return type;
    }
    if (!pure) {
        type = qz_get_type(s, type, t);
    }
    return qz_fallback(type, t->ne[0], fb);
}

/*
 * The importance weights of tensor t, or NULL (no matrix, no entry for
 * t, or a type that takes none).  A size that is not ne0 * n_expert is an
 * error, as in llama-quantize, except for the token embedding.
 */
static int
qz_imatrix_for(const llm_imatrix_t *im, const llm_gguf_tensor_t *t,
    uint32_t type, const float **out, char *err, size_t errlen)
{
    uint64_t n;
    const float *v;

    *out = NULL;
    if (im == NULL || !llm_qz_uses_imatrix(type)) {
        return 0;
    }
    v = llm_imatrix_find(im, t->name, &n);
    if (v == NULL) {
        return 0;
    }
    if (n != (uint64_t) (t->ne[0] * t->ne[2])) {
        if (qz_is_token_embd(t->name)) {
            return 0;
        }
        llm_err(err, errlen, "imatrix has %llu values for '%s', which "
            "needs %lld (ne0 %lld x %lld experts)", (unsigned long long) n,
            t->name, (long long) (t->ne[0] * t->ne[2]),
            (long long) t->ne[0], (long long) t->ne[2]);
        return -EINVAL;
    }
    *out = v;
    return 0;
}

/* llama-quantize's record of the importance matrix in the output. */
static void
qz_write_imatrix_kv(llm_gguf_writer_t *w, const llm_imatrix_t *im,
    const char *path)
{
    const char *ds = llm_imatrix_dataset(im);

    llm_gguf_w_str(w, "quantize.imatrix.file", path,
        strlen(path) < 127 ? strlen(path) : 127);
    if (ds != NULL) {
        llm_gguf_w_str(w, "quantize.imatrix.dataset", ds,
            strlen(ds) < 127 ? strlen(ds) : 127);
    }
    llm_gguf_w_u32(w, "quantize.imatrix.entries_count",
        llm_imatrix_n_entries(im));
    if (llm_imatrix_chunks(im) > 0) {
        llm_gguf_w_u32(w, "quantize.imatrix.chunks_count",
            llm_imatrix_chunks(im));
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
    const float **qws = NULL;       /* importance weights per tensor */
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
    s.has_imatrix = params->imatrix != NULL;
    qz_model_facts(g, arch, &s);
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
    qws = calloc(nt ? nt : 1, sizeof(float *));
    scratch = calloc(nth, sizeof(float *));
    slab = malloc(QZ_SLAB_BYTES + (size_t) max_ne0 * 4);
    if (types == NULL || order == NULL || qws == NULL || scratch == NULL
        || slab == NULL)
    {
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
            type = qz_choose(&s, q, pure, t, &fb);
            stats.n_fallback += (uint64_t) fb;
            if (!llm_qz_can_write(type)) {
                llm_err(err, errlen, "tensor '%s': this tool cannot write "
                    "%s", t->name, llm_type_name(type));
                rc = -EINVAL;
                goto done;
            }
        }
        types[i] = type;
        if (type != t->type) {
            rc = qz_imatrix_for(params->imatrix, t, type, &qws[i], err,
                errlen);
            if (rc != 0) {
                goto done;
            }
        }
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
                   == 0)
            || (params->imatrix != NULL && kv->key.len > 17
                && memcmp(kv->key.ptr, "quantize.imatrix.", 17) == 0))
        {
            continue;
        }
        llm_gguf_w_copy_kv(w, kv);
    }
    llm_gguf_w_u32(w, "general.quantization_version", 2);
    llm_gguf_w_u32(w, "general.file_type", q->ftype);
    if (params->imatrix != NULL) {
        qz_write_imatrix_kv(w, params->imatrix,
            params->imatrix_path ? params->imatrix_path : "");
    }
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
            job.imatrix = qws[i];
            job.ne1 = t->ne[1];
            for (int64_t r = 0; r < rows; r += per) {
                job.src = (const uint8_t *) t->data + (size_t) r * src_rb;
                job.row0 = r;
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
    free(qws);
    llm_gguf_close(g);
    if (st != NULL) {
        *st = stats;
    }
    return rc;
}
