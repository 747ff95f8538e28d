/*
 * The batched forward pass.
 *
 * One call evaluates a batch of tokens from any number of sequences.  Per
 * layer, in phases separated by the thread pool's barrier:
 *
 *   norm    x -> xn = rmsnorm(x) * attn_norm, quantized once per row to
 *           every activation type the next weights dot with
 *   qkv     q, k, v = xn @ Wq, Wk, Wv (row chunks of the three matrices)
 *   rope    biases, q/k norms, RoPE; K and V rows stored into the paged cache
 *   attn    per (token, kv head): causal softmax(q k^T / sqrt(d)) v over
 *           the token's sequence, all query heads of the group together
 *   wo      att @ Wo, then x += ...; xn = rmsnorm(x) * ffn_norm
 *   ffn     dense: gate and up in one pass (SwiGLU), then down;
 *           MoE: route every token, group the rows by expert, run each
 *           active expert's gate+up+SwiGLU and down over its rows (work
 *           items are (expert, row chunk), so experts spread across
 *           threads and each expert's bytes are read once per batch),
 *           then scatter-add with the routing weights
 *
 * then the output norm and head for the rows that want logits.  Matrix
 * work is a list of items (one weight, a range of its rows, a set of
 * activation columns) claimed from an atomic counter.
 */

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "kernels/attn.h"
#include "kernels/gdn.h"
#include "model_impl.h"

#define LLM_ACT_KINDS     4         /* F32, Q8_0, Q8_K, Q8_1 */
#define LLM_CHUNK_MIN     16        /* weight rows per work item, minimum */

typedef struct {
    const uint8_t  *w;              /* first row of the weight */
    const uint8_t  *w2;             /* GLU partner (up), or NULL */
    uint32_t        type;
    int64_t         n;              /* row length */
    size_t          w_stride;
    const uint8_t  *x;              /* activation column 0 */
    size_t          x_stride;
    int64_t         nc;             /* activation columns */
    float          *y;              /* y[c * ldy + r] */
    float          *y2;             /* partner output */
    size_t          ldy;
    const float    *bias;           /* added to y rows, or NULL */
    const float    *bias2;          /* added to y2 rows, or NULL */
    const llm_hparams_t *glu;       /* with w2: the activation's kind */
    int64_t         r0, nr;         /* row range of this item */
} llm_mm_item_t;

typedef struct {
    llm_type_t      type;
    uint8_t        *buf;
    size_t          cap;            /* bytes */
} llm_act_buf_t;

struct llm_ctx_s {
    const llm_model_t  *m;
    llm_kv_t           *kv;
    llm_pool_t         *pool;
    uint32_t            nth;
    uint32_t            max_tokens;
    uint32_t            max_slots;  /* max_tokens * n_expert_used */
    uint32_t            max_pos;    /* positions the cache can hold */

    /* activations, float, [rows][dim] */
    float              *x;          /* [T][n_embd] residual stream */
    float              *xn;         /* [T][n_embd] normed */
    float              *q;          /* [T][q_dim] */
    float              *k;          /* [T][k_dim] */
    float              *v;          /* [T][v_dim] */
    float              *att;        /* [T][o_dim] */
    float              *tmp;        /* [T][n_embd] */
    float              *ga;         /* [S][ff] gate, then SwiGLU output */
    float              *up;         /* [S][ff] */
    float              *eo;         /* [S][n_embd] expert outputs */
    float              *router;     /* [T][n_expert] */
    /* tiled attention (llm_attention) */
    float              *att_scr;    /* [nth][llm_att_scratch_floats] */
    float              *att_part;   /* split parts' results (malloc) */
    size_t              att_part_cap;  /* bytes */
    uint32_t            att_tile;   /* positions per score tile */
    uint32_t            att_lds;    /* a score row: att_tile padded to 16 */
    uint32_t            att_tq;     /* tokens per query tile */
    uint32_t            att_np;     /* parts per item in the split phase */
    uint32_t           *qt_r0;      /* [T] query tiles: first row, */
    uint32_t           *qt_n;       /*   rows */
    uint32_t            n_qt;
    float              *rope_cs;    /* [T][rope_dims] cos, sin pairs */
    float              *mla_a;      /* MLA: q before absorption, then the
                                       heads' values after v_b */
    float              *mla_in;     /* MLA: one head's rows, contiguous */
    float              *qg;         /* [T][2 q_dim] query and output gate
                                       per head (attn_q_gate) */
    float              *shg;        /* [T] shared experts' gates */
    const float        *add_scale;  /* llm_task_add: x += add_scale[r] *
                                       tmp (NULL: 1) */

    /* gated delta net layers (qwen35moe) */
    float              *ssm_x;      /* [T][conv_dim] q, k, v projections,
                                       then convolved and silu'd */
    float              *ssm_z;      /* [T][ssm_inner] output gate */
    float              *ssm_ba;     /* [T][2 v_heads] beta, alpha */
    uint32_t           *rs_seq;     /* [T] the batch's sequences with
                                       tokens */
    uint32_t           *rs_off;     /* [T + 1] their first in rs_tok */
    uint32_t           *rs_tok;     /* [T] token rows, by sequence */
    uint32_t            n_rs;       /* sequences in rs_seq */
    uint32_t           *rs_map;     /* [cap_map] scratch: per batch seq */
    uint32_t            cap_map;
    uint32_t            gdn_chunk;  /* tokens per chunk of the chunked
                                       delta rule (<= 1: token by token) */
    float              *gdn_w;      /* [nth][gdn_w_floats] its scratch */
    size_t              gdn_w_floats;

    /* quantized activations: one buffer per activation type */
    llm_act_buf_t       act[LLM_ACT_KINDS];
    llm_act_buf_t       act2[LLM_ACT_KINDS];  /* second operand set */
    uint8_t            *xg;         /* [S][act row] rows gathered by expert */
    size_t              xg_cap;

    /* routing */
    int32_t            *sel;        /* [T][k] chosen experts */
    float              *selw;       /* [T][k] their weights */
    uint32_t           *tok_slot;   /* [T][k] slot of (token, j) */
    uint32_t           *slot_tok;   /* [S] token of slot */
    uint32_t           *e_count;    /* [n_expert] */
    uint32_t           *e_off;      /* [n_expert + 1] first slot */
    uint32_t           *active;     /* [n_expert] active experts */
    uint32_t            n_active;

    /* logits rows */
    uint32_t           *out_rows;   /* [T] batch index of each logits row */

    /* the current phase */
    llm_mm_item_t      *items;
    uint32_t            n_items;
    uint32_t            cap_items;
    uint32_t            rpi;        /* rows per item of a row phase */
    uint32_t            n_out;      /* rows wanting logits (last layer) */
    const llm_batch_t  *b;
    uint32_t            T;          /* rows in this phase */
    uint32_t            layer;
    const float        *norm_w;     /* norm weight of a norm phase */
    const float        *norm_src;
    float              *norm_dst;
    uint32_t            act_mask;   /* activation types to produce */
    int64_t             act_n;      /* row length being quantized */
    const float        *act_src;
    size_t              act_src_stride;  /* floats */
    llm_act_buf_t      *act_set;
    const uint8_t      *gather_src;     /* rows to gather, gather_rb each */
    size_t              gather_rb;

    /* experts from elsewhere (NULL acquire: the mapping) */
    llm_expert_source_t xsrc;
    llm_expert_ptrs_t  *xptrs;      /* [n_expert] */
    uint32_t           *pf;         /* [n_expert] prefetch scratch */

    /* mmap'd regions to unmap */
    void               *maps[32];
    size_t              map_len[32];
    uint32_t            n_maps;
    char                err[256];   /* from the expert source */
};

/* ---- small helpers ------------------------------------------------------ */

static int
llm_act_kind(llm_type_t t)
{
    switch (t) {
    case LLM_TYPE_F32:
        return 0;
    case LLM_TYPE_Q8_0:
        return 1;
    case LLM_TYPE_Q8_K:
        return 2;
    case LLM_TYPE_Q8_1:
        return 3;
    default:
        return -1;
    }
}

static const llm_type_t llm_act_types[LLM_ACT_KINDS] = {
    LLM_TYPE_F32, LLM_TYPE_Q8_0, LLM_TYPE_Q8_K, LLM_TYPE_Q8_1
};

/* Bytes of an activation row of n values of type t (rounded up). */
static size_t
llm_act_row_bytes(llm_type_t t, int64_t n)
{
    const llm_type_info_t  *ti = llm_type_info(t);

    if (ti == NULL || ti->block == 0) {
        return (size_t) n * 4;
    }
    return (size_t) ((n + ti->block - 1) / ti->block) * ti->block_bytes;
}

/* A zeroed, lazily backed buffer; freed with the context. */
static void *
llm_ctx_map(llm_ctx_t *c, size_t bytes)
{
    void  *p;

    if (c->n_maps == sizeof(c->maps) / sizeof(c->maps[0])) {
        return NULL;
    }
    bytes = (bytes + 4095) & ~(size_t) 4095;
    if (bytes == 0) {
        bytes = 4096;
    }
    p = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
             MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
        return NULL;
    }
    c->maps[c->n_maps] = p;
    c->map_len[c->n_maps] = bytes;
    c->n_maps++;
    return p;
}

/*
 * y = x / sqrt(mean(x^2) + eps) * w over n values (sum in double); y may
 * be x.  Eight partial sums, the one of lane k summing x[8i + k]^2, held
 * as four vectors of two doubles (the baseline is SSE2): one serial
 * chain of double adds cost 2% of a 64-stream decode step (perf,
 * docs/BENCHMARKS.md), and an array of eight GCC kept in memory, each
 * add a store and a load.  The order depends on n only, so a row's
 * result does not depend on its batch.  The scaling is written with
 * vectors too: GCC will not vectorize it by itself for fear that y
 * overlaps w.
 */
static void
llm_rmsnorm(float *y, const float *x, const float *w, int64_t n, float eps)
{
    typedef double  v2df __attribute__((vector_size(16)));
    typedef float   v4sf __attribute__((vector_size(16)));
    v2df            s0 = { 0, 0 }, s1 = s0, s2 = s0, s3 = s0, d;
    v4sf            vx, vw, vs;
    double          ss;
    float           scale;
    int64_t         i;

    for (i = 0; i + 8 <= n; i += 8) {
        d = (v2df) { x[i], x[i + 1] };
        s0 += d * d;
        d = (v2df) { x[i + 2], x[i + 3] };
        s1 += d * d;
        d = (v2df) { x[i + 4], x[i + 5] };
        s2 += d * d;
        d = (v2df) { x[i + 6], x[i + 7] };
        s3 += d * d;
    }
    for (; i < n; i++) {
        s0[0] += (double) x[i] * x[i];
    }
    ss = ((s0[0] + s0[1]) + (s1[0] + s1[1]))
         + ((s2[0] + s2[1]) + (s3[0] + s3[1]));
    scale = (float) (1.0 / sqrt(ss / (double) n + (double) eps));

    vs = (v4sf) { scale, scale, scale, scale };
    for (i = 0; i + 4 <= n; i += 4) {
        memcpy(&vx, x + i, sizeof(vx));
        memcpy(&vw, w + i, sizeof(vw));
        vx = vx * vs * vw;
        memcpy(y + i, &vx, sizeof(vx));
    }
    for (; i < n; i++) {
        y[i] = x[i] * scale * w[i];
    }
}

/* ---- activation quantization ------------------------------------------- */

static uint32_t
llm_act_mask_of(uint32_t wtype)
{
    int  k = llm_act_kind(llm_type_vec_dot_type((llm_type_t) wtype));

    return k < 0 ? 0 : 1u << k;
}

/*
 * Quantize rows [r0, r1) of c->act_src (stride act_src_stride floats, each
 * act_n values) into every type of c->act_mask in c->act_set.  F32 needs
 * no copy: its operand is the source itself.
 */
static void
llm_act_rows(llm_ctx_t *c, uint32_t r0, uint32_t r1)
{
    llm_act_buf_t  *set = c->act_set;
    uint32_t        k, r;
    size_t          rb;

    for (k = 1; k < LLM_ACT_KINDS; k++) {
        if (!(c->act_mask & (1u << k))) {
            continue;
        }
        rb = llm_act_row_bytes(set[k].type, c->act_n);
        for (r = r0; r < r1; r++) {
            llm_quantize_act(set[k].type,
                             c->act_src + (size_t) r * c->act_src_stride,
                             set[k].buf + (size_t) r * rb, c->act_n);
        }
    }
}

/* The operand for weights of type wtype: column 0 and stride. */
static const uint8_t *
llm_act_operand(llm_ctx_t *c, llm_act_buf_t *set, const float *src,
    size_t src_stride, int64_t n, uint32_t wtype, size_t *stride)
{
    llm_type_t  at = llm_type_vec_dot_type((llm_type_t) wtype);
    int         k = llm_act_kind(at);

    (void) c;
    if (k == 0) {
        *stride = src_stride * sizeof(float);
        return (const uint8_t *) src;
    }
    *stride = llm_act_row_bytes(at, n);
    return set[k].buf;
}

/* ---- matrix work items -------------------------------------------------- */

static int64_t
llm_chunk_rows(const llm_ctx_t *c, int64_t total_rows, int64_t max_rows)
{
    int64_t  want = (int64_t) c->nth * 8;
    int64_t  ch;

    ch = (total_rows + want - 1) / want;
    ch = (ch + LLM_CHUNK_MIN - 1) / LLM_CHUNK_MIN * LLM_CHUNK_MIN;
    if (ch < LLM_CHUNK_MIN) {
        ch = LLM_CHUNK_MIN;
    }
    if (ch > max_rows) {
        ch = max_rows;
    }
    return ch;
}

/* Append items covering all rows of one matrix product, chunk rows each. */
static int
llm_items_add(llm_ctx_t *c, const llm_mm_item_t *proto, int64_t rows,
    int64_t chunk)
{
    int64_t  r;

    for (r = 0; r < rows; r += chunk) {
        if (c->n_items == c->cap_items) {
            llm_mm_item_t *n;
            uint32_t       cap = c->cap_items ? c->cap_items * 2 : 1024;

            n = realloc(c->items, cap * sizeof(*n));
            if (n == NULL) {
                return -ENOMEM;
            }
            c->items = n;
            c->cap_items = cap;
        }
        c->items[c->n_items] = *proto;
        c->items[c->n_items].r0 = r;
        c->items[c->n_items].nr = rows - r < chunk ? rows - r : chunk;
        c->n_items++;
    }
    return 0;
}

/* y[c * ldy + r0 + r] += bias[r0 + r] for the item's rows and columns. */
static void
llm_item_bias(const llm_mm_item_t *it, float *y, const float *bias)
{
    int64_t  ci, r;
    float   *yc;

    for (ci = 0; ci < it->nc; ci++) {
        yc = y + ci * it->ldy + it->r0;
        for (r = 0; r < it->nr; r++) {
            yc[r] += bias[it->r0 + r];
        }
    }
}

/*
 * gpt-oss's gated activation in place, as ggml's swiglu_oai: the gate
 * clamped above at limit, up clamped to [-limit, limit], then
 * g = g * sigmoid(alpha * g) * (u + 1).
 */
static void
llm_swiglu_oai(float *g, const float *u, size_t n, float alpha, float limit)
{
    size_t  i;
    float   x, y;

    for (i = 0; i < n; i++) {
        x = g[i] < limit ? g[i] : limit;
        y = u[i] < -limit ? -limit : (u[i] > limit ? limit : u[i]);
        g[i] = x / (1.0f + expf(-alpha * x)) * (y + 1.0f);
    }
}

static void
llm_item_run(const llm_mm_item_t *it)
{
    int64_t  ci;
    float   *g, *u;

    llm_gemm((llm_type_t) it->type, it->n, it->nr, it->nc,
             it->w + it->r0 * it->w_stride, it->w_stride, it->x,
             it->x_stride, it->y + it->r0, it->ldy);
    if (it->bias != NULL) {
        llm_item_bias(it, it->y, it->bias);
    }
    if (it->w2 == NULL) {
        return;
    }

    /* a GLU pair: up, its bias, then the activation into y */
    llm_gemm((llm_type_t) it->type, it->n, it->nr, it->nc,
             it->w2 + it->r0 * it->w_stride, it->w_stride, it->x,
             it->x_stride, it->y2 + it->r0, it->ldy);
    if (it->bias2 != NULL) {
        llm_item_bias(it, it->y2, it->bias2);
    }
    for (ci = 0; ci < it->nc; ci++) {
        g = it->y + ci * it->ldy + it->r0;
        u = it->y2 + ci * it->ldy + it->r0;
        if (it->glu != NULL && it->glu->ffn_act == LLM_ACT_SWIGLU_OAI) {
            llm_swiglu_oai(g, u, (size_t) it->nr, it->glu->swiglu_alpha,
                           it->glu->swiglu_limit);
        } else {
            llm_swiglu_kernel()(g, u, (size_t) it->nr);
        }
    }
}

static void
llm_task_items(void *arg, uint32_t i, uint32_t ith)
{
    llm_ctx_t  *c = arg;

    (void) ith;
    llm_item_run(&c->items[i]);
}

static void
llm_run_items(llm_ctx_t *c)
{
    llm_pool_for(c->pool, c->n_items, llm_task_items, c);
    c->n_items = 0;
}

/*
 * Run a per-row task over rows [0, T): items of c->rpi rows each, about
 * four per thread.  The task reads its range with llm_rows().
 */
static void
llm_run_rows(llm_ctx_t *c, uint32_t T, llm_pool_fn fn)
{
    uint32_t  want = c->nth * 4;

    c->T = T;
    c->rpi = (T + want - 1) / want;
    if (c->rpi == 0) {
        c->rpi = 1;
    }
    llm_pool_for(c->pool, (T + c->rpi - 1) / c->rpi, fn, c);
}

static inline void
llm_rows(const llm_ctx_t *c, uint32_t item, uint32_t *r0, uint32_t *r1)
{
    *r0 = item * c->rpi;
    *r1 = *r0 + c->rpi < c->T ? *r0 + c->rpi : c->T;
}

/* A matrix product y[T][n_out] = src @ W^T as items. */
static int
llm_items_mat(llm_ctx_t *c, const llm_wt_t *w, const float *src,
    size_t src_stride, uint32_t T, float *y, size_t ldy, const float *bias,
    int64_t chunk)
{
    llm_mm_item_t  it;

    memset(&it, 0, sizeof(it));
    it.w = w->data;
    it.type = w->type;
    it.n = w->n_in;
    it.w_stride = w->row_bytes;
    it.x = llm_act_operand(c, c->act, src, src_stride, w->n_in, w->type,
                           &it.x_stride);
    it.nc = T;
    it.y = y;
    it.ldy = ldy;
    it.bias = bias;
    return llm_items_add(c, &it, w->n_out, chunk);
}

/* ---- per-row phases ----------------------------------------------------- */

/*
 * Norm phase: for rows split by thread, norm_dst = rmsnorm(norm_src) *
 * norm_w, then quantize into the activation types of act_mask.
 */
static void
llm_task_norm(void *arg, uint32_t item, uint32_t ith)
{
    llm_ctx_t  *c = arg;
    uint32_t    r0, r1, r;
    int64_t     n = c->m->hp.n_embd;

    (void) ith;
    llm_rows(c, item, &r0, &r1);
    for (r = r0; r < r1; r++) {
        llm_rmsnorm(c->norm_dst + (size_t) r * n,
                    c->norm_src + (size_t) r * n, c->norm_w, n,
                    c->m->hp.rms_eps);
    }
    llm_act_rows(c, r0, r1);
}

/* Quantize rows of act_src only. */
static void
llm_task_act(void *arg, uint32_t item, uint32_t ith)
{
    llm_ctx_t  *c = arg;
    uint32_t    r0, r1;

    (void) ith;
    llm_rows(c, item, &r0, &r1);
    llm_act_rows(c, r0, r1);
}

static void
llm_run_norm(llm_ctx_t *c, uint32_t T, const float *src, float *dst,
    const float *w, uint32_t mask)
{
    c->T = T;
    c->norm_src = src;
    c->norm_dst = dst;
    c->norm_w = w;
    c->act_mask = mask;
    c->act_n = c->m->hp.n_embd;
    c->act_src = dst;
    c->act_src_stride = c->m->hp.n_embd;
    c->act_set = c->act;
    llm_run_rows(c, T, llm_task_norm);
}

static void
llm_run_act(llm_ctx_t *c, uint32_t rows, const float *src, int64_t n,
    uint32_t mask, llm_act_buf_t *set)
{
    c->T = rows;
    c->act_mask = mask;
    c->act_n = n;
    c->act_src = src;
    c->act_src_stride = n;
    c->act_set = set;
    if (mask & ~1u) {
        llm_run_rows(c, rows, llm_task_act);
    }
}

/* ---- RoPE, q/k norms, cache writes ------------------------------------- */

/* Rotate n_rot dims of one head, NEOX pairs (i, i + n_rot/2) or normal
 * pairs (2i, 2i + 1); cs holds (cos, sin) per pair. */
static void
llm_rope_head(float *x, const float *cs, uint32_t n_rot, int neox)
{
    uint32_t  i, half = n_rot / 2;
    float     a, b, co, si;

    for (i = 0; i < half; i++) {
        co = cs[2 * i];
        si = cs[2 * i + 1];
        if (neox) {
            a = x[i];
            b = x[i + half];
            x[i] = a * co - b * si;
            x[i + half] = a * si + b * co;
        } else {
            a = x[2 * i];
            b = x[2 * i + 1];
            x[2 * i] = a * co - b * si;
            x[2 * i + 1] = a * si + b * co;
        }
    }
}

static void
llm_task_rope(void *arg, uint32_t item, uint32_t ith)
{
    llm_ctx_t           *c = arg;
    const llm_model_t   *m = c->m;
    const llm_hparams_t *hp = &m->hp;
    const llm_layer_t   *L = &m->layers[c->layer];
    const llm_batch_t   *b = c->b;
    llm_kv_t            *kv = c->kv;
    uint32_t             r0, r1;
    uint32_t             q_dim = hp->n_head * hp->head_dim;
    uint32_t             k_dim = hp->n_head_kv * hp->head_dim;
    uint32_t             v_dim = hp->n_head_kv * hp->head_dim_v;
    uint32_t             r, h, pos, blk;
    float               *q, *k, *cs;
    const llm_seq_view_t *sv;

    (void) ith;
    llm_rows(c, item, &r0, &r1);
    for (r = r0; r < r1; r++) {
        q = c->q + (size_t) r * q_dim;
        k = c->k + (size_t) r * k_dim;
        cs = c->rope_cs + (size_t) r * hp->rope_dims;
        if (hp->attn_q_gate) {
            /* each head's query, out of [query | gate] per head */
            for (h = 0; h < hp->n_head; h++) {
                memcpy(q + h * hp->head_dim,
                       c->qg + (size_t) r * 2 * q_dim + 2 * h * hp->head_dim,
                       hp->head_dim * sizeof(float));
            }
        }

        if (L->q_norm != NULL) {
            if (m->qk_norm_whole) {
                llm_rmsnorm(q, q, L->q_norm, q_dim, hp->rms_eps);
                llm_rmsnorm(k, k, L->k_norm, k_dim, hp->rms_eps);
            } else {
                for (h = 0; h < hp->n_head; h++) {
                    llm_rmsnorm(q + h * hp->head_dim, q + h * hp->head_dim,
                                L->q_norm, hp->head_dim, hp->rms_eps);
                }
                for (h = 0; h < hp->n_head_kv; h++) {
                    llm_rmsnorm(k + h * hp->head_dim, k + h * hp->head_dim,
                                L->k_norm, hp->head_dim, hp->rms_eps);
                }
            }
        }

        if (hp->rope_dims > 0) {
            for (h = 0; h < hp->n_head; h++) {
                llm_rope_head(q + h * hp->head_dim + hp->rope_off, cs,
                              hp->rope_dims, hp->rope_neox);
            }
            for (h = 0; h < hp->n_head_kv; h++) {
                llm_rope_head(k + h * hp->head_dim + hp->rope_off, cs,
                              hp->rope_dims, hp->rope_neox);
            }
        }

        pos = (uint32_t) b->pos[r];
        sv = &b->seqs[b->seq[r]];
        blk = llm_kv_block_of(kv, c->layer, sv, pos);
        for (h = 0; h < hp->n_head_kv; h++) {
            llm_attn_store_k(kv->type,
                             llm_kv_k_block(kv, c->layer, blk)
                             + h * kv->k_head, kv->block_tokens,
                             pos % kv->block_tokens, k + h * hp->head_dim,
                             hp->head_dim);
            if (kv->v_in_k) {
                continue;           /* MLA: the latent, in K already */
            }
            llm_attn_store_v(kv->type,
                             llm_kv_v_row(kv, c->layer, blk,
                                          pos % kv->block_tokens)
                             + h * kv->v_head,
                             c->v + (size_t) r * v_dim + h * hp->head_dim_v,
                             hp->head_dim_v);
        }
    }
}

/* ---- attention ---------------------------------------------------------- */

/*
 * Tiled attention with an online softmax (flash-attention style), so no
 * step holds a score per cached position and K and V are read once per
 * tile of queries instead of once per query.
 *
 * Work item: a query tile (up to c->att_tq consecutive tokens of one
 * sequence) x one KV head: R = tokens x G rows of q.  Positions are cut at
 * absolute boundaries into score tiles of c->att_tile positions and parts
 * of LLM_ATT_TILES tiles.  Within a part the rows keep a running max m,
 * sum l and unnormalized output o (rescaled when m grows); parts are then
 * merged in order.  Every step of a row's arithmetic depends only on its
 * own positions and these absolute boundaries, not on the rest of its
 * tile, its batch, or whether the parts ran on one thread or several: a
 * row's result is the same in one batch, in chunks or token by token.
 *
 * When there are fewer items than twice the threads (a decode step of few
 * sequences), the parts of an item run as items of their own and write
 * their (m, l, o) to c->att_part; a second phase merges them.  Otherwise
 * each item runs its parts in turn.
 */

#define LLM_ATT_TILES  8            /* score tiles per part */
#define LLM_ATT_MAX_BLOCKS  256     /* cache blocks in a score tile */

/* Per-thread scratch of the tiled attention, floats. */
static size_t
llm_att_scratch_floats(const llm_ctx_t *c)
{
    const llm_hparams_t  *hp = &c->m->hp;
    size_t                R = (size_t) c->att_tq * (hp->n_head / hp->n_head_kv);

    /* q, scores, part o, total o, m, l of both, q in q8 blocks (a Q8_0
     * cache: 40 bytes per 32 dims, under 10 floats), then a tile's V in
     * f32 (llm_att_part) */
    return R * (hp->head_dim + c->att_lds + 2 * hp->head_dim_v + 4
                + (hp->head_dim / 32) * 10)
           + (size_t) c->att_tile * hp->head_dim_v;
}

/* Query tiles of the batch: runs of consecutive positions of a sequence. */
static void
llm_att_tiles(llm_ctx_t *c, uint32_t T)
{
    const llm_batch_t  *b = c->b;
    uint32_t            r, n = 0;

    for (r = 0; r < T; r++) {
        if (n > 0 && c->qt_n[n - 1] < c->att_tq
            && b->seq[r] == b->seq[r - 1] && b->pos[r] == b->pos[r - 1] + 1)
        {
            c->qt_n[n - 1]++;
            continue;
        }
        c->qt_r0[n] = r;
        c->qt_n[n] = 1;
        n++;
    }
    c->n_qt = n;
}

/* The positions [lo, hi) token r sees (a window layer: its last swa). */
static void
llm_att_span(const llm_ctx_t *c, const llm_layer_t *L, uint32_t r,
    uint32_t *lo, uint32_t *hi)
{
    *hi = (uint32_t) c->b->pos[r] + 1;
    *lo = L->swa != 0 && *hi > L->swa ? *hi - L->swa : 0;
}

/* Parts of query tile qt: the part index range [p0, p1). */
static void
llm_att_parts(const llm_ctx_t *c, const llm_layer_t *L, uint32_t qt,
    uint32_t *p0, uint32_t *p1)
{
    uint32_t  part = c->att_tile * LLM_ATT_TILES, lo, hi, x;

    llm_att_span(c, L, c->qt_r0[qt], &lo, &x);
    llm_att_span(c, L, c->qt_r0[qt] + c->qt_n[qt] - 1, &x, &hi);
    *p0 = lo / part;
    *p1 = (hi + part - 1) / part;
}

/*
 * Paged KV: a KV head's K in a block is k_head bytes (2 KiB for 16
 * positions of 64 f16 dims), its V 16 rows of v_head bytes v_tok apart,
 * and consecutive blocks of a sequence lie k_block / v_block apart (all
 * heads), wherever the allocator put them.  The hardware's prefetchers
 * do not follow that: at depth a decode step's q.k and p.v waited on
 * memory (perf at 16k on the bench model: 64% of the step in the two
 * kernels, at about 8 GB/s of KV).  So the q.k walk below asks for the
 * K and V of the block LLM_ATT_AHEAD blocks on, a line at a time, into
 * the L2 (V is read after the tile's softmax; the L1 hint measured the
 * same for K).  Decode at depth 4k: 28.3 -> 24.3 ms a step, 16k: 56.2 ->
 * 45.2 ms (docs/BENCHMARKS.md, "Long context").
 */
#define LLM_ATT_AHEAD  4

static inline void
llm_att_pf_lines(const uint8_t *p, size_t n, size_t stride, size_t rows)
{
    uintptr_t  a, e;
    size_t     r;

    for (r = 0; r < rows; r++, p += stride) {
        e = (uintptr_t) p + n;
        for (a = (uintptr_t) p & ~(uintptr_t) 63; a < e; a += 64) {
            __builtin_prefetch((const void *) a, 0, 2);
        }
    }
}

/* Positions from pos to the end of its cache block or to end. */
static inline uint32_t
llm_att_run(uint32_t pos, uint32_t end, uint32_t bt)
{
    return bt - pos % bt < end - pos ? bt - pos % bt : end - pos;
}

/* KV head g's K in the block holding position pos of sv. */
static inline const uint8_t *
llm_att_k_at(const llm_ctx_t *c, const llm_seq_view_t *sv, uint32_t g,
    uint32_t pos)
{
    return llm_kv_k_block(c->kv, c->layer,
                          llm_kv_block_of(c->kv, c->layer, sv, pos))
           + g * c->kv->k_head;
}

/* KV head g's part of the V row of position pos of sv. */
static inline const uint8_t *
llm_att_v_at(const llm_ctx_t *c, const llm_seq_view_t *sv, uint32_t g,
    uint32_t pos)
{
    return llm_kv_v_row(c->kv, c->layer,
                        llm_kv_block_of(c->kv, c->layer, sv, pos),
                        pos % c->kv->block_tokens)
           + g * c->kv->v_head;
}

/* K and V of KV head g in the block at position pos of sv, if before
 * end. */
static inline void
llm_att_prefetch(const llm_ctx_t *c, const llm_seq_view_t *sv, uint32_t g,
    uint32_t pos, uint32_t end)
{
    const llm_kv_t  *kv = c->kv;

    if (pos >= end) {
        return;
    }
    pos -= pos % kv->block_tokens;
    llm_att_pf_lines(llm_att_k_at(c, sv, g, pos), kv->k_head, 0, 1);
    if (!kv->v_in_k) {
        llm_att_pf_lines(llm_att_v_at(c, sv, g, pos), kv->v_head, kv->v_tok,
                         kv->block_tokens);
    }
}

/*
 * One part of one item: the rows' (m, l, o) over positions of part p, from
 * q rows qs [R][hd]; sc the score scratch [R][lds].  A row that sees no
 * position of the part keeps m = -INFINITY.
 */
static void
llm_att_part(llm_ctx_t *c, uint32_t qt, uint32_t g, uint32_t p,
    const float *qs, const llm_attn_q8_t *q8, float *sc, float *pm,
    float *pl, float *po, float *vs)
{
    const llm_hparams_t  *hp = &c->m->hp;
    const llm_layer_t    *L = &c->m->layers[c->layer];
    const llm_seq_view_t *sv = &c->b->seqs[c->b->seq[c->qt_r0[qt]]];
    llm_kv_t             *kv = c->kv;
    uint32_t              G = hp->n_head / hp->n_head_kv;
    uint32_t              hd = hp->head_dim, hv = hp->head_dim_v;
    uint32_t              nq = c->qt_n[qt], R = nq * G, R0 = c->qt_r0[qt];
    uint32_t              bt = kv->block_tokens, TS = c->att_tile;
    uint32_t              lds = c->att_lds, lo0, hi1, k0, k1, p0, p1;
    uint32_t              i, j, t, a, e, lo, hi, pos, n, nb, s0;
    int                   f16 = kv->type == LLM_TYPE_F16;
    int                   quant = kv->type == LLM_TYPE_Q8_0
                                  || kv->type == LLM_TYPE_Q4_0;
    float                 scale = hp->attn_scale != 0.0f ? hp->attn_scale
                                  : 1.0f / sqrtf((float) hd);
    float                 mk, mn, al, *s;
    const uint8_t        *kb, *vb;
    llm_attn_qk_fn        qk;
    llm_attn_pv_fn        pv;
    llm_attn_softmax_fn   sm;
    llm_attn_qkq_fn       qkq;
    llm_attn_pvq_fn       pvq;
    llm_attn_max_fn       mx;
    llm_attn_exps_fn      ex;
    llm_attn_pvt_fn       pvt = llm_attn_pvt_kernel();
    llm_attn_qk8_fn       qk8 = llm_attn_qk8_kernel();
    llm_attn_vf_fn        vf = llm_attn_vf_kernel();
    const void           *kbs[LLM_ATT_MAX_BLOCKS];

    llm_attn_kernels(&qk, &pv, &sm);
    llm_attn_q_kernels(&qkq, &pvq);
    llm_attn_online_kernels(&mx, &ex);
    for (i = 0; i < R; i++) {
        pm[i] = -INFINITY;
        pl[i] = 0.0f;
    }
    memset(po, 0, (size_t) R * hv * sizeof(float));

    llm_att_span(c, L, R0, &lo0, &hi1);
    llm_att_span(c, L, R0 + nq - 1, &i, &hi1);
    p0 = p * TS * LLM_ATT_TILES;
    p1 = p0 + TS * LLM_ATT_TILES < hi1 ? p0 + TS * LLM_ATT_TILES : hi1;

    for (k0 = p0 + (lo0 > p0 ? (lo0 - p0) / TS * TS : 0); k0 < p1; k0 += TS) {
        k1 = k0 + TS < p1 ? k0 + TS : p1;
        /* blocks from the first any row sees: s0 its first position */
        s0 = (lo0 > k0 ? lo0 : k0) / bt * bt;
        s0 = s0 > k0 ? s0 : k0;
        for (pos = s0; pos < k1; pos += nb) {
            nb = llm_att_run(pos, k1, bt);
            llm_att_prefetch(c, sv, g, (pos / bt + LLM_ATT_AHEAD) * bt, p1);
            kb = llm_att_k_at(c, sv, g, pos);
            if (kv->type == LLM_TYPE_Q8_0) {
                qk8(q8, R, hd, kb, bt, nb, scale, sc + (pos - k0), lds);
            } else if (quant) {
                qkq(qs, R, hd, kb, bt, nb, kv->type, scale, sc + (pos - k0),
                    lds);
            } else {
                qk(qs, R, hd, kb, bt, nb, f16, scale, sc + (pos - k0), lds);
            }
        }
        n = (k1 - k0 + 15) & ~15u;
        for (i = 0; i < R; i++) {
            s = sc + (size_t) i * lds;
            llm_att_span(c, L, R0 + i / G, &lo, &hi);
            a = lo > k0 ? lo - k0 : 0;
            e = hi < k1 ? (hi > k0 ? hi - k0 : 0) : k1 - k0;
            if (a >= e) {
                memset(s, 0, n * sizeof(float));
                continue;
            }
            for (t = 0; t < a; t++) {
                s[t] = -INFINITY;
            }
            for (t = e; t < n; t++) {
                s[t] = -INFINITY;
            }
            mk = mx(s, n);
            mn = mk > pm[i] ? mk : pm[i];
            if (mn > pm[i] && pm[i] != -INFINITY) {
                al = expf(pm[i] - mn);
                pl[i] *= al;
                for (j = 0; j < hv; j++) {
                    po[(size_t) i * hv + j] *= al;
                }
            }
            pm[i] = mn;
            pl[i] += ex(s, n, mn);
        }
        if (kv->v_in_k) {
            /* MLA: p.v over the tile's K blocks, V their first hv dims */
            nb = 0;
            for (pos = s0, i = 0; pos < k1; pos += nb, i++) {
                nb = llm_att_run(pos, k1, bt);
                kbs[i] = llm_att_k_at(c, sv, g, pos);
            }
            pvt(po, R, hv, kbs, i, bt, nb, f16, sc + (s0 - k0), lds);
            continue;
        }
        if (R > 8 && kv->type != LLM_TYPE_F32) {
            /* more than one pass of heads (the kernels take up to 8 a
             * V load): V to f32 once for the tile, not once a pass; the
             * same values, so the same sums bit for bit */
            for (pos = s0; pos < k1; pos += nb) {
                nb = llm_att_run(pos, k1, bt);
                vf(vs + (size_t) (pos - s0) * hv, llm_att_v_at(c, sv, g, pos),
                   kv->v_tok, nb, hv, kv->type);
            }
            pv(po, R, hv, vs, hv, k1 - s0, 0, sc + (s0 - k0), lds);
            continue;
        }
        for (pos = s0; pos < k1; pos += nb) {
            nb = llm_att_run(pos, k1, bt);
            vb = llm_att_v_at(c, sv, g, pos);
            if (quant) {
                pvq(po, R, hv, vb, kv->v_tok, nb, kv->type, sc + (pos - k0),
                    lds);
            } else {
                pv(po, R, hv, vb, kv->v_dim, nb, f16, sc + (pos - k0), lds);
            }
        }
    }
    (void) sm;
}

/* Merges a part's (pm, pl, po) into the running (tm, tl, to), R rows. */
static void
llm_att_merge(uint32_t R, uint32_t hv, float *tm, float *tl, float *to,
    const float *pm, const float *pl, const float *po)
{
    uint32_t  i, j;
    float     mn, a, b;

    for (i = 0; i < R; i++) {
        if (pm[i] == -INFINITY) {
            continue;
        }
        if (tm[i] == -INFINITY) {
            tm[i] = pm[i];
            tl[i] = pl[i];
            memcpy(to + (size_t) i * hv, po + (size_t) i * hv,
                   hv * sizeof(float));
            continue;
        }
        mn = pm[i] > tm[i] ? pm[i] : tm[i];
        a = expf(tm[i] - mn);
        b = expf(pm[i] - mn);
        tl[i] = tl[i] * a + pl[i] * b;
        for (j = 0; j < hv; j++) {
            to[(size_t) i * hv + j] = to[(size_t) i * hv + j] * a
                                      + po[(size_t) i * hv + j] * b;
        }
        tm[i] = mn;
    }
}

/* The item's q rows, [token][head of group g][hd], into qs; with a Q8_0
 * cache also quantized to q8 blocks, once per item (llm_attn_quant_q). */
static void
llm_att_gather_q(const llm_ctx_t *c, uint32_t qt, uint32_t g, float *qs,
    llm_attn_q8_t *q8)
{
    const llm_hparams_t  *hp = &c->m->hp;
    uint32_t              G = hp->n_head / hp->n_head_kv, j;
    size_t                hd = hp->head_dim;

    for (j = 0; j < c->qt_n[qt]; j++) {
        memcpy(qs + j * G * hd,
               c->q + (size_t) (c->qt_r0[qt] + j) * hp->n_head * hd
               + g * G * hd, G * hd * sizeof(float));
    }
    if (c->kv->type == LLM_TYPE_Q8_0) {
        llm_attn_quant_q(qs, c->qt_n[qt] * G, (uint32_t) hd, q8);
    }
}

/* Normalizes the merged rows (with the layer's sinks) into att. */
static void
llm_att_finish(llm_ctx_t *c, uint32_t qt, uint32_t g, const float *tm,
    const float *tl, const float *to)
{
    const llm_hparams_t  *hp = &c->m->hp;
    const llm_layer_t    *L = &c->m->layers[c->layer];
    uint32_t              G = hp->n_head / hp->n_head_kv;
    uint32_t              hv = hp->head_dim_v, i, j, h;
    float                *o, l;

    for (i = 0; i < c->qt_n[qt] * G; i++) {
        h = g * G + i % G;
        o = c->att + (size_t) (c->qt_r0[qt] + i / G) * hp->n_head * hv
            + (size_t) h * hv;
        /* a sink: one more logit in the denominator, weighing no value */
        l = tl[i] + (L->sinks != NULL ? expf(L->sinks[h] - tm[i]) : 0.0f);
        l = 1.0f / l;
        for (j = 0; j < hv; j++) {
            o[j] = to[(size_t) i * hv + j] * l;
        }
    }
}

/* Scratch pointers of thread ith. */
static void
llm_att_scr(llm_ctx_t *c, uint32_t ith, float **qs, float **sc, float **po,
    float **to, float **pm, llm_attn_q8_t **q8)
{
    const llm_hparams_t  *hp = &c->m->hp;
    size_t                R = (size_t) c->att_tq * (hp->n_head / hp->n_head_kv);
    float                *base = c->att_scr + ith * llm_att_scratch_floats(c);

    *qs = base;
    *sc = *qs + R * hp->head_dim;
    *po = *sc + R * c->att_lds;
    *to = *po + R * hp->head_dim_v;
    *pm = *to + R * hp->head_dim_v;     /* pm, pl, tm, tl: R each */
    *q8 = (llm_attn_q8_t *) (*pm + 4 * R);
}

/* The thread's f32 V tile (after the q8 rows). */
static float *
llm_att_vtile(llm_ctx_t *c, const llm_attn_q8_t *q8)
{
    const llm_hparams_t  *hp = &c->m->hp;
    size_t                R = (size_t) c->att_tq
                              * (hp->n_head / hp->n_head_kv);

    return (float *) q8 + R * (hp->head_dim / 32) * 10;
}

/* Item (query tile, KV head), all its parts in turn. */
static void
llm_task_attn(void *arg, uint32_t item, uint32_t ith)
{
    llm_ctx_t           *c = arg;
    const llm_hparams_t *hp = &c->m->hp;
    const llm_layer_t   *L = &c->m->layers[c->layer];
    uint32_t             qt = item / hp->n_head_kv, g = item % hp->n_head_kv;
    uint32_t             R = c->qt_n[qt] * (hp->n_head / hp->n_head_kv);
    uint32_t             p, p0, p1, i;
    float               *qs, *sc, *po, *to, *pm;
    llm_attn_q8_t       *q8;

    llm_att_scr(c, ith, &qs, &sc, &po, &to, &pm, &q8);
    llm_att_gather_q(c, qt, g, qs, q8);
    for (i = 0; i < R; i++) {
        pm[2 * R + i] = -INFINITY;
        pm[3 * R + i] = 0.0f;
    }
    llm_att_parts(c, L, qt, &p0, &p1);
    for (p = p0; p < p1; p++) {
        llm_att_part(c, qt, g, p, qs, q8, sc, pm, pm + R, po,
                     llm_att_vtile(c, q8));
        llm_att_merge(R, hp->head_dim_v, pm + 2 * R, pm + 3 * R, to, pm,
                      pm + R, po);
    }
    llm_att_finish(c, qt, g, pm + 2 * R, pm + 3 * R, to);
}

/* Floats of one part's result in c->att_part: m, l, o of R rows. */
static size_t
llm_att_part_floats(const llm_ctx_t *c)
{
    const llm_hparams_t  *hp = &c->m->hp;

    return (size_t) c->att_tq * (hp->n_head / hp->n_head_kv)
           * (hp->head_dim_v + 2);
}

/* Split phase: item (query tile, KV head, part p0 + j) into att_part. */
static void
llm_task_attn_part(void *arg, uint32_t item, uint32_t ith)
{
    llm_ctx_t           *c = arg;
    const llm_hparams_t *hp = &c->m->hp;
    const llm_layer_t   *L = &c->m->layers[c->layer];
    uint32_t             np = c->att_np, j = item % np;
    uint32_t             qg = item / np;
    uint32_t             qt = qg / hp->n_head_kv, g = qg % hp->n_head_kv;
    uint32_t             R = c->qt_n[qt] * (hp->n_head / hp->n_head_kv);
    uint32_t             p0, p1;
    float               *qs, *sc, *po, *to, *pm, *dst;
    llm_attn_q8_t       *q8;

    llm_att_parts(c, L, qt, &p0, &p1);
    if (p0 + j >= p1) {
        return;
    }
    llm_att_scr(c, ith, &qs, &sc, &po, &to, &pm, &q8);
    dst = c->att_part + (size_t) item * llm_att_part_floats(c);
    llm_att_gather_q(c, qt, g, qs, q8);
    llm_att_part(c, qt, g, p0 + j, qs, q8, sc, dst, dst + R, dst + 2 * R,
                 llm_att_vtile(c, q8));
}

/* Merge phase: item (query tile, KV head), its parts' results in order. */
static void
llm_task_attn_merge(void *arg, uint32_t item, uint32_t ith)
{
    llm_ctx_t           *c = arg;
    const llm_hparams_t *hp = &c->m->hp;
    const llm_layer_t   *L = &c->m->layers[c->layer];
    uint32_t             qt = item / hp->n_head_kv, g = item % hp->n_head_kv;
    uint32_t             R = c->qt_n[qt] * (hp->n_head / hp->n_head_kv);
    uint32_t             p0, p1, j, i;
    float               *qs, *sc, *po, *to, *pm, *src;
    llm_attn_q8_t       *q8;

    llm_att_scr(c, ith, &qs, &sc, &po, &to, &pm, &q8);
    for (i = 0; i < R; i++) {
        pm[2 * R + i] = -INFINITY;
        pm[3 * R + i] = 0.0f;
    }
    llm_att_parts(c, L, qt, &p0, &p1);
    for (j = 0; p0 + j < p1; j++) {
        src = c->att_part + ((size_t) item * c->att_np + j)
                            * llm_att_part_floats(c);
        llm_att_merge(R, hp->head_dim_v, pm + 2 * R, pm + 3 * R, to, src,
                      src + R, src + 2 * R);
    }
    llm_att_finish(c, qt, g, pm + 2 * R, pm + 3 * R, to);
}

/*
 * Attention of the batch's T rows for the current layer: the item phases
 * above.  Splitting parts across threads needs c->att_part of items x
 * parts results; past LLM_ATT_PART_MAX bytes the items run whole instead
 * (the same arithmetic).
 */
#define LLM_ATT_PART_MAX  ((size_t) 256 << 20)

static int
llm_attention(llm_ctx_t *c, uint32_t T)
{
    const llm_hparams_t  *hp = &c->m->hp;
    const llm_layer_t    *L = &c->m->layers[c->layer];
    uint32_t              n_items, qt, p0, p1, np = 1;
    size_t                need;
    float                *nb;

    llm_att_tiles(c, T);
    n_items = c->n_qt * hp->n_head_kv;
    if (n_items < 2 * c->nth) {
        for (qt = 0; qt < c->n_qt; qt++) {
            llm_att_parts(c, L, qt, &p0, &p1);
            np = p1 - p0 > np ? p1 - p0 : np;
        }
    }
    need = (size_t) n_items * np * llm_att_part_floats(c) * sizeof(float);
    if (np > 1 && need <= LLM_ATT_PART_MAX && need > c->att_part_cap) {
        nb = realloc(c->att_part, need);
        if (nb != NULL) {
            c->att_part = nb;
            c->att_part_cap = need;
        }
    }
    if (np <= 1 || need > c->att_part_cap) {
        llm_pool_for(c->pool, n_items, llm_task_attn, c);
        return 0;
    }
    c->att_np = np;
    llm_pool_for(c->pool, n_items * np, llm_task_attn_part, c);
    llm_pool_for(c->pool, n_items, llm_task_attn_merge, c);
    return 0;
}

/* ---- MoE routing -------------------------------------------------------- */

/*
 * Group-limited routing (DeepSeek-V3): a group of experts scores the sum
 * of its best two selection scores; only the n_group_used best groups'
 * experts stay selectable (the others' scores become -INFINITY).
 */
static void
llm_route_groups(const llm_hparams_t *hp, float *sel)
{
    uint32_t  NG = hp->n_expert_groups, per = hp->n_expert / NG;
    uint32_t  g, e, j, best;
    float     gs[64], a, b, v;
    uint8_t   keep[64];

    for (g = 0; g < NG; g++) {
        a = b = -INFINITY;
        for (e = g * per; e < (g + 1) * per; e++) {
            v = sel[e];
            if (v > a) {
                b = a;
                a = v;
            } else if (v > b) {
                b = v;
            }
        }
        gs[g] = per > 1 ? a + b : a;
        keep[g] = 0;
    }
    for (j = 0; j < hp->n_group_used; j++) {
        best = 0;
        for (g = 1; g < NG; g++) {
            if (!keep[g] && (keep[best] || gs[g] > gs[best])) {
                best = g;
            }
        }
        keep[best] = 1;
    }
    for (g = 0; g < NG; g++) {
        for (e = g * per; !keep[g] && e < (g + 1) * per; e++) {
            sel[e] = -INFINITY;
        }
    }
}

/*
 * Router for rows split by thread: logits = xn @ gate_inp (already in
 * c->router), then gating, top-k on (probs + selection bias), weights from
 * the unbiased probs, optional renormalization and scale.
 */
static void
llm_task_route(void *arg, uint32_t item, uint32_t ith)
{
    llm_ctx_t           *c = arg;
    const llm_hparams_t *hp = &c->m->hp;
    const llm_layer_t   *L = &c->m->layers[c->layer];
    uint32_t             r0, r1;
    uint32_t             NE = hp->n_expert, K = hp->n_expert_used;
    uint32_t             r, e, j, best;
    float                mx, sum, *pr, sel[4096];
    int32_t             *se;
    float               *sw;
    double               ws;

    (void) ith;
    llm_rows(c, item, &r0, &r1);
    for (r = r0; r < r1; r++) {
        pr = c->router + (size_t) r * NE;
        se = c->sel + (size_t) r * K;
        sw = c->selw + (size_t) r * K;

        if (hp->gating == LLM_GATING_SIGMOID) {
            for (e = 0; e < NE; e++) {
                pr[e] = 1.0f / (1.0f + expf(-pr[e]));
            }
        } else {
            mx = -INFINITY;
            for (e = 0; e < NE; e++) {
                mx = pr[e] > mx ? pr[e] : mx;
            }
            sum = 0.0f;
            for (e = 0; e < NE; e++) {
                pr[e] = expf(pr[e] - mx);
                sum += pr[e];
            }
            for (e = 0; e < NE; e++) {
                pr[e] /= sum;
            }
        }

        for (e = 0; e < NE; e++) {
            sel[e] = pr[e] + (L->exp_probs_b ? L->exp_probs_b[e] : 0.0f);
        }
        if (hp->n_expert_groups > 1) {
            llm_route_groups(hp, sel);
        }
        ws = 0.0;
        for (j = 0; j < K; j++) {
            best = 0;
            mx = -INFINITY;
            for (e = 0; e < NE; e++) {
                if (sel[e] > mx) {
                    mx = sel[e];
                    best = e;
                }
            }
            sel[best] = -INFINITY;
            se[j] = (int32_t) best;
            sw[j] = pr[best];
            ws += pr[best];
        }
        if (hp->expert_weights_norm) {
            if (ws < 6.103515625e-5) {
                ws = 6.103515625e-5;
            }
            for (j = 0; j < K; j++) {
                sw[j] = (float) (sw[j] / ws);
            }
        }
        if (hp->expert_weights_scale != 0.0f) {
            for (j = 0; j < K; j++) {
                sw[j] *= hp->expert_weights_scale;
            }
        }
    }
}

/* Group (token, j) pairs by expert: slots sorted by expert, then token. */
static void
llm_group_experts(llm_ctx_t *c, uint32_t T)
{
    const llm_hparams_t  *hp = &c->m->hp;
    uint32_t              NE = hp->n_expert, K = hp->n_expert_used;
    uint32_t              e, t, j, s;

    memset(c->e_count, 0, NE * sizeof(uint32_t));
    for (t = 0; t < T * K; t++) {
        c->e_count[c->sel[t]]++;
    }
    c->n_active = 0;
    c->e_off[0] = 0;
    for (e = 0; e < NE; e++) {
        c->e_off[e + 1] = c->e_off[e] + c->e_count[e];
        if (c->e_count[e] > 0) {
            c->active[c->n_active++] = e;
        }
        c->e_count[e] = 0;
    }
    for (t = 0; t < T; t++) {
        for (j = 0; j < K; j++) {
            e = (uint32_t) c->sel[t * K + j];
            s = c->e_off[e] + c->e_count[e]++;
            c->slot_tok[s] = t;
            c->tok_slot[t * K + j] = s;
        }
    }
}

/* Copy each slot's activation row (of its token) into slot order. */
static void
llm_task_gather(void *arg, uint32_t item, uint32_t ith)
{
    llm_ctx_t  *c = arg;
    uint32_t    s0, s1, s;
    size_t      rb = c->gather_rb;
    const uint8_t *src = c->gather_src;

    (void) ith;
    llm_rows(c, item, &s0, &s1);

    for (s = s0; s < s1; s++) {
        memcpy(c->xg + (size_t) s * rb, src + (size_t) c->slot_tok[s] * rb,
               rb);
    }
}

/*
 * x[i] += a * y[i].  GCC 12 at -O2 leaves the plain loop scalar (x and y
 * may alias), and at 64 streams the expert scatter ran it for 2.4% of a
 * step; eight lanes of the generic vector extension, each the same
 * multiply and add as the scalar loop, give the same bits on any target.
 */
static void
llm_axpy(float *x, const float *y, float a, uint32_t n)
{
    typedef float  v8sf __attribute__((vector_size(32)));
    v8sf           va = { a, a, a, a, a, a, a, a }, vx, vy;
    uint32_t       i;

    for (i = 0; i + 16 <= n; i += 16) {
        /* y is an expert's output, most often written by the other
         * thread: perf showed three quarters of the scatter waiting on
         * its loads, so ask for it 1 KB ahead of use */
        __builtin_prefetch(y + i + 256);
        memcpy(&vx, x + i, sizeof(vx));
        memcpy(&vy, y + i, sizeof(vy));
        vx += va * vy;
        memcpy(x + i, &vx, sizeof(vx));
        memcpy(&vx, x + i + 8, sizeof(vx));
        memcpy(&vy, y + i + 8, sizeof(vy));
        vx += va * vy;
        memcpy(x + i + 8, &vx, sizeof(vx));
    }
    for (; i + 8 <= n; i += 8) {
        memcpy(&vx, x + i, sizeof(vx));
        memcpy(&vy, y + i, sizeof(vy));
        vx += va * vy;
        memcpy(x + i, &vx, sizeof(vx));
    }
    for (; i < n; i++) {
        x[i] += a * y[i];
    }
}

/* x[t] += sum_j w[t][j] * eo[slot(t, j)], rows split by thread. */
static void
llm_task_scatter(void *arg, uint32_t item, uint32_t ith)
{
    llm_ctx_t  *c = arg;
    uint32_t    K = c->m->hp.n_expert_used;
    uint32_t    n = c->m->hp.n_embd;
    uint32_t    r0, r1;
    uint32_t    r, j;
    float      *x, a;
    const float *eo;

    (void) ith;
    llm_rows(c, item, &r0, &r1);
    for (r = r0; r < r1; r++) {
        x = c->x + (size_t) r * n;
        for (j = 0; j < K; j++) {
            a = c->selw[r * K + j];
            eo = c->eo + (size_t) c->tok_slot[r * K + j] * n;
            llm_axpy(x, eo, a, n);
        }
    }
}

/* x += tmp (times add_scale[row] when set), rows split by thread. */
static void
llm_task_add(void *arg, uint32_t item, uint32_t ith)
{
    llm_ctx_t  *c = arg;
    size_t      n = c->m->hp.n_embd;
    uint32_t    r0, r1, r;
    size_t      i, i0, i1;

    (void) ith;
    llm_rows(c, item, &r0, &r1);
    if (c->add_scale != NULL) {
        for (r = r0; r < r1; r++) {
            for (i = 0; i < n; i++) {
                c->x[r * n + i] += c->tmp[r * n + i] * c->add_scale[r];
            }
        }
        return;
    }
    i0 = r0 * n;
    i1 = r1 * n;

    for (i = i0; i < i1; i++) {
        c->x[i] += c->tmp[i];
    }
}

/* ---- gated delta net (qwen35moe's linear attention) ------------------- */

/*
 * sum a[i] b[i] over n values, eight partial sums (lane k sums i = k mod
 * 8) added pairwise at the end: the order depends on n only.
 */
static float
llm_dot8(const float *a, const float *b, uint32_t n)
{
    typedef float  v8sf __attribute__((vector_size(32)));
    v8sf           acc = { 0 }, va, vb;
    uint32_t       i;
    float          s;

    for (i = 0; i + 8 <= n; i += 8) {
        memcpy(&va, a + i, sizeof(va));
        memcpy(&vb, b + i, sizeof(vb));
        acc += va * vb;
    }
    s = ((acc[0] + acc[1]) + (acc[2] + acc[3]))
        + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
    for (; i < n; i++) {
        s += a[i] * b[i];
    }
    return s;
}

/* y = x / max(|x|, eps) over n values (ggml's l2_norm; the sum of
 * squares in float lanes, llm_dot8). */
static void
llm_l2norm(float *y, const float *x, uint32_t n, float eps)
{
    uint32_t  i;
    float     scale;

    scale = 1.0f / fmaxf(sqrtf(llm_dot8(x, x, n)), eps);
    for (i = 0; i < n; i++) {
        y[i] = x[i] * scale;
    }
}

/* Channels per convolution item. */
#define LLM_CONV_CHUNK  64

/*
 * Item (sequence k, channel chunk): the causal convolution of the
 * sequence's tokens in order over the chunk's channels, each output
 * sum_j w[j] in[t - K + 1 + j] (oldest first) with the conv state holding
 * the inputs before the batch, then silu, in place in ssm_x; the state
 * keeps the last K - 1 inputs.  In vectors across the chunk's channels
 * (the weights transposed to taps by channel), silu as SwiGLU by ones.
 */
static void
llm_task_conv(void *arg, uint32_t item, uint32_t ith)
{
    typedef float        v8sf __attribute__((vector_size(32)));
    llm_ctx_t           *c = arg;
    const llm_hparams_t *hp = &c->m->hp;
    const llm_layer_t   *L = &c->m->layers[c->layer];
    uint32_t             cd = llm_ssm_conv_dim(hp), K = hp->ssm_d_conv;
    uint32_t             nch = (cd + LLM_CONV_CHUNK - 1) / LLM_CONV_CHUNK;
    uint32_t             k = item / nch, c0 = item % nch * LLM_CONV_CHUNK;
    uint32_t             n = c0 + LLM_CONV_CHUNK < cd
                             ? LLM_CONV_CHUNK : cd - c0;
    uint32_t             seq = c->rs_seq[k], i, j, ch;
    float                wt[16][LLM_CONV_CHUNK], acc[LLM_CONV_CHUNK];
    float                one[LLM_CONV_CHUNK], *st, *x;
    v8sf                 va, vs, vw;

    (void) ith;
    for (ch = 0; ch < n; ch++) {
        for (j = 0; j < K; j++) {
            wt[j][ch] = L->conv1d[(size_t) (c0 + ch) * K + j];
        }
        one[ch] = 1.0f;
    }
    st = llm_kv_conv_state(c->kv, c->b->seqs[seq].state, L->rslot) + c0;
    for (i = c->rs_off[k]; i < c->rs_off[k + 1]; i++) {
        x = c->ssm_x + (size_t) c->rs_tok[i] * cd + c0;
        if (i + 4 < c->rs_off[k + 1]) {     /* rows 4 x cd bytes apart */
            for (ch = 0; ch < n; ch += 16) {
                __builtin_prefetch(c->ssm_x + (size_t) c->rs_tok[i + 4] * cd
                                   + c0 + ch);
            }
        }
        for (ch = 0; ch + 8 <= n; ch += 8) {
            va = (v8sf) { 0 };
            for (j = 0; j + 1 < K; j++) {
                memcpy(&vs, st + (size_t) j * cd + ch, sizeof(vs));
                memcpy(&vw, &wt[j][ch], sizeof(vw));
                va += vs * vw;
            }
            memcpy(&vs, x + ch, sizeof(vs));
            memcpy(&vw, &wt[K - 1][ch], sizeof(vw));
            va += vs * vw;
            memcpy(acc + ch, &va, sizeof(va));
        }
        for (; ch < n; ch++) {
            acc[ch] = 0.0f;
            for (j = 0; j + 1 < K; j++) {
                acc[ch] += st[(size_t) j * cd + ch] * wt[j][ch];
            }
            acc[ch] += x[ch] * wt[K - 1][ch];
        }
        for (j = 0; j + 2 < K; j++) {
            memcpy(st + (size_t) j * cd, st + (size_t) (j + 1) * cd,
                   n * sizeof(float));
        }
        memcpy(st + (size_t) (K - 2) * cd, x, n * sizeof(float));
        memcpy(x, acc, n * sizeof(float));
        llm_swiglu_kernel()(x, one, n);
    }
}

/*
 * Token row r's inputs to value head h's delta rule, as llama.cpp's
 * gated_delta_net: q and k of key head h mod k_heads L2-normed into q and
 * kk, beta = sigmoid(b), the decay's log ssm_a * softplus(alpha +
 * dt_bias) into *lg; returns v's row.
 */
static const float *
llm_gdn_inputs(llm_ctx_t *c, const llm_layer_t *L, uint32_t r, uint32_t h,
    float *q, float *kk, float *beta, float *lg)
{
    const llm_hparams_t *hp = &c->m->hp;
    uint32_t             S = hp->ssm_state, H = hp->ssm_v_heads;
    uint32_t             HK = hp->ssm_k_heads, kh = h % HK;
    const float         *x = c->ssm_x + (size_t) r * llm_ssm_conv_dim(hp);
    float                a;

    llm_l2norm(q, x + (size_t) kh * S, S, hp->rms_eps);
    llm_l2norm(kk, x + (size_t) (HK + kh) * S, S, hp->rms_eps);
    *beta = 1.0f / (1.0f + expf(-c->ssm_ba[(size_t) r * 2 * H + h]));
    a = c->ssm_ba[(size_t) r * 2 * H + H + h] + L->dt_bias[h];
    a = a > 20.0f ? a : logf(1.0f + expf(a));
    *lg = L->ssm_a[h] * a;
    return x + (size_t) 2 * HK * S + (size_t) h * S;
}

/* The gated norm of head h's output o at row r: rmsnorm(o) * ssm_norm *
 * silu(z), into att. */
static void
llm_gdn_out(llm_ctx_t *c, const llm_layer_t *L, uint32_t r, uint32_t h,
    const float *o)
{
    const llm_hparams_t *hp = &c->m->hp;
    uint32_t             S = hp->ssm_state;
    float               *y, g[512];

    y = c->att + (size_t) r * hp->ssm_inner + (size_t) h * S;
    memcpy(g, c->ssm_z + (size_t) r * hp->ssm_inner + (size_t) h * S,
           S * sizeof(float));
    llm_rmsnorm(y, o, L->ssm_norm, S, hp->rms_eps);
    llm_swiglu_kernel()(g, y, S);
    memcpy(y, g, S * sizeof(float));
}

/*
 * One token of head h's delta rule on its state M, the recurrence
 * (gdn.h's step: with the state as rows M[j], value dim j, key dims along
 * the row, M[j] *= decay, d = (v[j] - M[j].k) beta, M[j] += d k, o[j] =
 * M[j].q / sqrt(state)).
 */
static void
llm_gdn_step(llm_ctx_t *c, const llm_layer_t *L, uint32_t r, uint32_t h,
    float *M)
{
    uint32_t             S = c->m->hp.ssm_state;
    float                q[512], kk[512], o[512], beta, lg;
    const float         *v;

    v = llm_gdn_inputs(c, L, r, h, q, kk, &beta, &lg);
    llm_gdn_step_kernel()(M, S, q, kk, v, beta, expf(lg),
                          1.0f / sqrtf((float) S), o);
    llm_gdn_out(c, L, r, h, o);
}

/*
 * n tokens of head h's delta rule at once, rows rs_tok[t0 ..]: their
 * inputs gathered into the thread's scratch, gdn.h's chunk kernel, the
 * outputs normed into att.
 */
static void
llm_gdn_chunk(llm_ctx_t *c, const llm_layer_t *L, uint32_t t0, uint32_t n,
    uint32_t h, float *M, uint32_t ith)
{
    const llm_hparams_t *hp = &c->m->hp;
    uint32_t             S = hp->ssm_state, C = c->gdn_chunk, t, i;
    uint32_t             HK = hp->ssm_k_heads, cd = llm_ssm_conv_dim(hp);
    float               *kq = c->gdn_w + ith * c->gdn_w_floats;
    float               *v = kq + (size_t) 2 * C * S, *o = v + (size_t) C * S;
    float               *beta = o + (size_t) C * S, *g = beta + C;
    float               *w = g + C, lg;
    const float         *x;

    for (t = 0; t < n; t++) {
        uint32_t  r = c->rs_tok[t0 + t];

        /* the rows are 4 x conv_dim bytes apart, too far for the
         * hardware's prefetch: a later token's q, k and v ahead */
        if (t + 4 < n) {
            x = c->ssm_x + (size_t) c->rs_tok[t0 + t + 4] * cd;
            for (i = 0; i < S; i += 16) {
                __builtin_prefetch(x + (size_t) (h % HK) * S + i);
                __builtin_prefetch(x + (size_t) (HK + h % HK) * S + i);
                __builtin_prefetch(x + (size_t) (2 * HK + h) * S + i);
            }
        }
        memcpy(v + (size_t) t * S,
               llm_gdn_inputs(c, L, r, h, kq + (size_t) (n + t) * S,
                              kq + (size_t) t * S, &beta[t], &lg),
               S * sizeof(float));
        g[t] = t == 0 ? lg : g[t - 1] + lg;
    }
    llm_gdn_chunk_kernel()(M, S, n, kq, v, beta, g, 1.0f / sqrtf((float) S),
                           o, w);
    for (t = 0; t < n; t++) {
        if (t + 4 < n) {
            x = c->ssm_z + (size_t) c->rs_tok[t0 + t + 4] * hp->ssm_inner
                + (size_t) h * S;
            for (i = 0; i < S; i += 16) {
                __builtin_prefetch(x + i);
            }
        }
        llm_gdn_out(c, L, c->rs_tok[t0 + t], h, o + (size_t) t * S);
    }
}

/*
 * Item (sequence k, value head h): the delta rule over the sequence's
 * tokens in order.  Every whole chunk of gdn_chunk positions, aligned to
 * multiples of gdn_chunk, goes through the chunked form (gdn.h); the
 * tokens around them (a prompt's tail, a decode step) one by one through
 * the recurrence.  Aligned, a prompt's numbers do not depend on how it is
 * split over steps at multiples of the chunk.
 */
static void
llm_task_gdn(void *arg, uint32_t item, uint32_t ith)
{
    llm_ctx_t           *c = arg;
    const llm_hparams_t *hp = &c->m->hp;
    const llm_layer_t   *L = &c->m->layers[c->layer];
    uint32_t             S = hp->ssm_state, H = hp->ssm_v_heads;
    uint32_t             k = item / H, h = item % H, C = c->gdn_chunk;
    uint32_t             t, end = c->rs_off[k + 1];
    const int32_t       *pos = c->b->pos;
    float               *M;

    M = llm_kv_ssm_state(c->kv, c->b->seqs[c->rs_seq[k]].state, L->rslot)
        + (size_t) h * S * S;
    for (t = c->rs_off[k]; t < end; ) {
        if (C > 1 && pos[c->rs_tok[t]] % C == 0 && t + C <= end
            && pos[c->rs_tok[t + C - 1]] == pos[c->rs_tok[t]]
                                           + (int32_t) C - 1)
        {
            llm_gdn_chunk(c, L, t, C, h, M, ith);
            t += C;
        } else {
            llm_gdn_step(c, L, c->rs_tok[t], h, M);
            t++;
        }
    }
}

/*
 * A gated delta net layer's mixing, from the normed rows in xn to
 * x += ssm_out(...): the projections, the convolution, the recurrence
 * per (sequence, value head) and the output projection.
 */
static int
llm_gdn(llm_ctx_t *c, const llm_layer_t *L, uint32_t T)
{
    const llm_hparams_t  *hp = &c->m->hp;
    int64_t               E = hp->n_embd, cd = llm_ssm_conv_dim(hp);
    int64_t               H = hp->ssm_v_heads, in = hp->ssm_inner;
    int                   rc;

    if ((rc = llm_items_mat(c, &L->wqkv, c->xn, E, T, c->ssm_x, cd, NULL,
                            llm_chunk_rows(c, cd + in, cd))) < 0
        || (rc = llm_items_mat(c, &L->wz, c->xn, E, T, c->ssm_z, in, NULL,
                               llm_chunk_rows(c, cd + in, in))) < 0
        || (rc = llm_items_mat(c, &L->wbeta, c->xn, E, T, c->ssm_ba, 2 * H,
                               NULL, llm_chunk_rows(c, H, H))) < 0
        || (rc = llm_items_mat(c, &L->walpha, c->xn, E, T, c->ssm_ba + H,
                               2 * H, NULL, llm_chunk_rows(c, H, H))) < 0)
    {
        return rc;
    }
    llm_run_items(c);

    llm_pool_for(c->pool, c->n_rs * (uint32_t) ((cd + LLM_CONV_CHUNK - 1)
                                                / LLM_CONV_CHUNK),
                 llm_task_conv, c);
    llm_pool_for(c->pool, c->n_rs * (uint32_t) H, llm_task_gdn, c);

    llm_run_act(c, T, c->att, in, llm_act_mask_of(L->wo.type), c->act);
    rc = llm_items_mat(c, &L->wo, c->att, in, T, c->tmp, E, NULL,
                       llm_chunk_rows(c, E, E));
    if (rc < 0) {
        return rc;
    }
    llm_run_items(c);
    llm_run_rows(c, T, llm_task_add);
    return 0;
}

/* att[r] *= sigmoid(the head's output gate), rows split by thread. */
static void
llm_task_attn_gate(void *arg, uint32_t item, uint32_t ith)
{
    llm_ctx_t           *c = arg;
    const llm_hparams_t *hp = &c->m->hp;
    uint32_t             hd = hp->head_dim, q_dim = hp->n_head * hd;
    uint32_t             r0, r1, r, h, i;
    const float         *g;
    float               *o;

    (void) ith;
    llm_rows(c, item, &r0, &r1);
    for (r = r0; r < r1; r++) {
        for (h = 0; h < hp->n_head; h++) {
            g = c->qg + (size_t) r * 2 * q_dim + (size_t) (2 * h + 1) * hd;
            o = c->att + (size_t) r * q_dim + (size_t) h * hd;
            for (i = 0; i < hd; i++) {
                o[i] *= 1.0f / (1.0f + expf(-g[i]));
            }
        }
    }
}

/* shg[r] = sigmoid(gate_inp_shexp . xn[r]), rows split by thread. */
static void
llm_task_shexp_gate(void *arg, uint32_t item, uint32_t ith)
{
    llm_ctx_t           *c = arg;
    const llm_layer_t   *L = &c->m->layers[c->layer];
    uint32_t             E = c->m->hp.n_embd, r0, r1, r;

    (void) ith;
    llm_rows(c, item, &r0, &r1);
    for (r = r0; r < r1; r++) {
        c->shg[r] = 1.0f / (1.0f + expf(-llm_dot8(L->gate_inp_shexp,
                                                  c->xn + (size_t) r * E,
                                                  E)));
    }
}

/* ---- the layer ---------------------------------------------------------- */

/*
 * Prefetch hint: the next layer's router applied to this layer's normed
 * hidden state (c->xn), top-k per token with the next layer's selection
 * bias; the union of the picks goes to the source.  Runs on the caller.
 */
static void
llm_prefetch_next(llm_ctx_t *c, uint32_t T)
{
    const llm_hparams_t  *hp = &c->m->hp;
    const llm_layer_t    *N = &c->m->layers[c->layer + 1];
    uint32_t              NE = hp->n_expert, K = hp->n_expert_used;
    uint32_t              t, j, e, best, n = 0;
    float                 mx, v, *lg = c->router;
    uint8_t               mark[4096];
    size_t                xs;
    const uint8_t        *x;

    if (!llm_layer_is_moe(N) || N->gate_inp.type != LLM_TYPE_F32) {
        return;                     /* dense, or the operand would need
                                       quantizing */
    }
    memset(mark, 0, NE);
    x = llm_act_operand(c, c->act, c->xn, hp->n_embd, hp->n_embd,
                        N->gate_inp.type, &xs);
    llm_gemm(LLM_TYPE_F32, hp->n_embd, NE, T, N->gate_inp.data,
             N->gate_inp.row_bytes, x, xs, lg, NE);
    for (t = 0; t < T; t++, lg += NE) {
        if (N->gate_inp_b != NULL) {
            for (e = 0; e < NE; e++) {
                lg[e] += N->gate_inp_b[e];
            }
        }
        /* the selection order of the real router: gating, then bias */
        if (hp->gating == LLM_GATING_SIGMOID) {
            for (e = 0; e < NE; e++) {
                lg[e] = 1.0f / (1.0f + expf(-lg[e]));
            }
        } else if (N->exp_probs_b != NULL) {
            float sum = 0.0f;

            mx = -INFINITY;
            for (e = 0; e < NE; e++) {
                mx = lg[e] > mx ? lg[e] : mx;
            }
            for (e = 0; e < NE; e++) {
                lg[e] = expf(lg[e] - mx);
                sum += lg[e];
            }
            for (e = 0; e < NE; e++) {
                lg[e] /= sum;
            }
        }
        for (j = 0; j < K; j++) {
            best = 0;
            mx = -INFINITY;
            for (e = 0; e < NE; e++) {
                v = mark[e] == 2 ? -INFINITY : lg[e]
                    + (N->exp_probs_b ? N->exp_probs_b[e] : 0.0f);
                if (v > mx) {
                    mx = v;
                    best = e;
                }
            }
            mark[best] = 2;
        }
        for (e = 0; e < NE; e++) {
            mark[e] = mark[e] ? 1 : 0;
        }
    }
    for (e = 0; e < NE; e++) {
        if (mark[e]) {
            c->pf[n++] = e;
        }
    }
    c->xsrc.prefetch(c->xsrc.ud, c->layer + 1, c->pf, n);
}

static int
llm_moe(llm_ctx_t *c, const llm_layer_t *L, uint32_t T)
{
    const llm_hparams_t  *hp = &c->m->hp;
    uint32_t              K = hp->n_expert_used, S = T * K;
    int64_t               ff = hp->n_ff_exp, E = hp->n_embd, ch;
    llm_mm_item_t         it;
    const uint8_t        *xop;
    size_t                xs, hs;
    uint32_t              a, e, n_e;
    int                   rc;

    /* router logits (gate_inp is usually F32: operand is xn itself) */
    rc = llm_items_mat(c, &L->gate_inp, c->xn, E, T, c->router,
                       hp->n_expert, L->gate_inp_b,
                       llm_chunk_rows(c, hp->n_expert, hp->n_expert));
    if (rc < 0) {
        return rc;
    }
    llm_run_items(c);
    llm_run_rows(c, T, llm_task_route);
    llm_group_experts(c, T);

    /* expert weights: the mapping, or the expert source */
    for (a = 0; a < c->n_active; a++) {
        e = c->active[a];
        c->xptrs[a].gate = llm_wt_expert(&L->gate_exps, e);
        c->xptrs[a].up = llm_wt_expert(&L->up_exps, e);
        c->xptrs[a].down = llm_wt_expert(&L->down_exps, e);
        c->xptrs[a].type[0] = L->gate_exps.type;
        c->xptrs[a].type[1] = L->up_exps.type;
        c->xptrs[a].type[2] = L->down_exps.type;
    }
    if (c->xsrc.prefetch != NULL && c->layer + 1 < hp->n_layer) {
        llm_prefetch_next(c, T);
    }
    if (c->xsrc.acquire != NULL) {
        rc = c->xsrc.acquire(c->xsrc.ud, c->layer, c->active, c->n_active,
                             c->xptrs, c->err, sizeof(c->err));
        if (rc < 0) {
            return rc;
        }
    }

    /* gather the activation rows of the gate/up type into slot order */
    xop = llm_act_operand(c, c->act, c->xn, E, E, L->gate_exps.type, &xs);
    c->gather_src = xop;
    c->gather_rb = xs;
    llm_run_rows(c, S, llm_task_gather);

    /* gate + up + SwiGLU per (expert, ff chunk) */
    ch = llm_chunk_rows(c, ff * c->n_active, ff);
    for (a = 0; a < c->n_active; a++) {
        e = c->active[a];
        n_e = c->e_off[e + 1] - c->e_off[e];
        memset(&it, 0, sizeof(it));
        it.w = c->xptrs[a].gate;
        it.w2 = c->xptrs[a].up;
        it.type = c->xptrs[a].type[0];  /* up's: the same (load checks) */
        it.n = E;
        it.w_stride = L->gate_exps.row_bytes;
        it.x = c->xg + (size_t) c->e_off[e] * xs;
        it.x_stride = xs;
        it.nc = n_e;
        it.y = c->ga + (size_t) c->e_off[e] * ff;
        it.y2 = c->up + (size_t) c->e_off[e] * ff;
        it.ldy = ff;
        it.glu = hp;
        it.bias = L->gate_exps_b ? L->gate_exps_b + (size_t) e * ff : NULL;
        it.bias2 = L->up_exps_b ? L->up_exps_b + (size_t) e * ff : NULL;
        if ((rc = llm_items_add(c, &it, ff, ch)) < 0) {
            return rc;
        }
    }
    llm_run_items(c);

    /* quantize the SwiGLU rows for down */
    llm_run_act(c, S, c->ga, ff, llm_act_mask_of(L->down_exps.type),
                c->act2);
    xop = llm_act_operand(c, c->act2, c->ga, ff, ff, L->down_exps.type, &hs);

    /* down per (expert, n_embd chunk) */
    ch = llm_chunk_rows(c, E * c->n_active, E);
    for (a = 0; a < c->n_active; a++) {
        e = c->active[a];
        n_e = c->e_off[e + 1] - c->e_off[e];
        memset(&it, 0, sizeof(it));
        it.w = c->xptrs[a].down;
        it.type = c->xptrs[a].type[2];
        it.n = ff;
        it.w_stride = L->down_exps.row_bytes;
        it.x = xop + (size_t) c->e_off[e] * hs;
        it.x_stride = hs;
        it.nc = n_e;
        it.y = c->eo + (size_t) c->e_off[e] * E;
        it.ldy = E;
        it.bias = L->down_exps_b ? L->down_exps_b + (size_t) e * E : NULL;
        if ((rc = llm_items_add(c, &it, E, ch)) < 0) {
            return rc;
        }
    }
    llm_run_items(c);
    if (c->xsrc.release != NULL) {
        c->xsrc.release(c->xsrc.ud, c->layer, c->active, c->n_active);
    }

    llm_run_rows(c, T, llm_task_scatter);
    return 0;
}

/*
 * A dense SwiGLU FFN (a dense layer's, or a MoE layer's shared experts)
 * of the normed rows c->xn, added to x.
 */
static int
llm_dense_ffn(llm_ctx_t *c, const llm_wt_t *gate, const llm_wt_t *upw,
    const llm_wt_t *down, uint32_t T)
{
    const llm_hparams_t  *hp = &c->m->hp;
    int64_t               ff = gate->n_out, E = hp->n_embd;
    llm_mm_item_t         it;
    int                   rc;

    memset(&it, 0, sizeof(it));
    it.w = gate->data;
    it.type = gate->type;
    it.n = E;
    it.w_stride = gate->row_bytes;
    it.x = llm_act_operand(c, c->act, c->xn, E, E, gate->type,
                           &it.x_stride);
    it.nc = T;
    it.y = c->ga;
    it.ldy = ff;
    if (upw->type == gate->type) {
        it.glu = hp;
        it.w2 = upw->data;
        it.y2 = c->up;
        rc = llm_items_add(c, &it, ff, llm_chunk_rows(c, ff, ff));
        if (rc < 0) {
            return rc;
        }
        llm_run_items(c);
    } else {
        /* mixed types: gate and up separately, then SwiGLU */
        if ((rc = llm_items_add(c, &it, ff, llm_chunk_rows(c, ff, ff))) < 0
            || (rc = llm_items_mat(c, upw, c->xn, E, T, c->up, ff,
                                   NULL, llm_chunk_rows(c, ff, ff))) < 0)
        {
            return rc;
        }
        llm_run_items(c);
        llm_swiglu_kernel()(c->ga, c->up, (size_t) T * ff);
    }

    llm_run_act(c, T, c->ga, ff, llm_act_mask_of(down->type), c->act);
    memset(&it, 0, sizeof(it));
    it.w = down->data;
    it.type = down->type;
    it.n = ff;
    it.w_stride = down->row_bytes;
    it.x = llm_act_operand(c, c->act, c->ga, ff, ff, down->type,
                           &it.x_stride);
    it.nc = T;
    it.y = c->tmp;
    it.ldy = E;
    rc = llm_items_add(c, &it, E, llm_chunk_rows(c, E, E));
    if (rc < 0) {
        return rc;
    }
    llm_run_items(c);
    llm_run_rows(c, T, llm_task_add);
    return 0;
}

/* Gather the rows that want logits into the front of x. */
static uint32_t
llm_gather_out_rows(llm_ctx_t *c, const llm_batch_t *b)
{
    size_t    n = c->m->hp.n_embd;
    uint32_t  i, o = 0;

    for (i = 0; i < b->n_tokens; i++) {
        if (b->logits != NULL && b->logits[i]) {
            if (o != i) {
                memcpy(c->x + o * n, c->x + i * n, n * sizeof(float));
            }
            c->out_rows[o++] = i;
        }
    }
    return o;
}

/* ---- multi-head latent attention (deepseek2) -------------------------- */

/*
 * y[t][0..rows) (row stride ldy) = W_h x_t for the T rows x_t of n floats
 * at src + t * src_stride: one head's block of rows of a per-head weight
 * (wk_b, wv_b).  The rows are gathered contiguous and quantized for W
 * first.
 */
static int
llm_mla_head_mat(llm_ctx_t *c, const llm_wt_t *w, uint32_t h, int64_t rows,
    const float *src, size_t src_stride, int64_t n, uint32_t T, float *y,
    size_t ldy)
{
    llm_wt_t  wh = *w;
    uint32_t  t;

    for (t = 0; t < T; t++) {
        memcpy(c->mla_in + (size_t) t * n, src + (size_t) t * src_stride,
               (size_t) n * sizeof(float));
    }
    wh.data = w->data + (size_t) h * rows * w->row_bytes;
    wh.n_out = rows;
    llm_run_act(c, T, c->mla_in, n, llm_act_mask_of(w->type), c->act);
    if (llm_items_mat(c, &wh, c->mla_in, n, T, y, ldy, NULL,
                      llm_chunk_rows(c, rows, rows)) < 0)
    {
        return -ENOMEM;
    }
    llm_run_items(c);
    return 0;
}

/* RMS-norm rows of n floats in place, at stride floats apart. */
static void
llm_norm_rows(float *x, uint32_t T, size_t stride, const float *w,
    int64_t n, float eps)
{
    uint32_t  t;

    for (t = 0; t < T; t++) {
        llm_rmsnorm(x + t * stride, x + t * stride, w, n, eps);
    }
}

/*
 * MLA's q, k and v in the latent space, as llama.cpp absorbs them:
 * q = q_b(norm(q_a(x))) per head [nope | rope]; each head's nope part
 * through its block of k_b gives its latent query, followed by its rope
 * part; k = [norm(latent) | rope key] (the shared kv head), v = the
 * normed latent.  RoPE comes after (llm_task_rope, at rope_off).
 */
static int
llm_mla_qkv(llm_ctx_t *c, const llm_layer_t *L, uint32_t T)
{
    const llm_hparams_t  *hp = &c->m->hp;
    int64_t               E = hp->n_embd, R = hp->n_lora_kv;
    int64_t               rope = hp->rope_dims, nope = hp->mla_k - rope;
    int64_t               qk = (int64_t) hp->n_head * hp->mla_k;
    uint32_t              h, t;
    int                   rc;

    /* from the normed x (its activations are set now): k = [latent |
     * rope key] and q's LoRA (or q itself, into mla_a) */
    if (llm_items_mat(c, &L->wkv_a, c->xn, E, T, c->k, R + rope, NULL,
                      llm_chunk_rows(c, R + rope, R + rope)) < 0
        || (L->wq_a.data != NULL
            ? llm_items_mat(c, &L->wq_a, c->xn, E, T, c->mla_in,
                            hp->n_lora_q, NULL,
                            llm_chunk_rows(c, hp->n_lora_q, hp->n_lora_q))
            : llm_items_mat(c, &L->wq_b, c->xn, E, T, c->mla_a, qk, NULL,
                            llm_chunk_rows(c, qk, qk))) < 0)
    {
        return -ENOMEM;
    }
    llm_run_items(c);

    /* q before absorption into mla_a: [T][n_head * mla_k] */
    if (L->wq_a.data != NULL) {
        llm_norm_rows(c->mla_in, T, hp->n_lora_q, L->q_a_norm, hp->n_lora_q,
                      hp->rms_eps);
        llm_run_act(c, T, c->mla_in, hp->n_lora_q,
                    llm_act_mask_of(L->wq_b.type), c->act);
        if (llm_items_mat(c, &L->wq_b, c->mla_in, hp->n_lora_q, T, c->mla_a,
                          qk, NULL, llm_chunk_rows(c, qk, qk)) < 0)
        {
            return -ENOMEM;
        }
        llm_run_items(c);
    }

    /* the latent normed, and v a copy of it */
    llm_norm_rows(c->k, T, hp->head_dim, L->kv_a_norm, R, hp->rms_eps);
    for (t = 0; t < T; t++) {
        memcpy(c->v + (size_t) t * R, c->k + (size_t) t * hp->head_dim,
               (size_t) R * sizeof(float));
    }

    /* each head's query: its nope part through k_b, then its rope part */
    for (h = 0; h < hp->n_head; h++) {
        rc = llm_mla_head_mat(c, &L->wk_b, h, R,
                              c->mla_a + (size_t) h * hp->mla_k, qk, nope, T,
                              c->q + (size_t) h * hp->head_dim,
                              (size_t) hp->n_head * hp->head_dim);
        if (rc < 0) {
            return rc;
        }
        for (t = 0; t < T; t++) {
            memcpy(c->q + (size_t) t * hp->n_head * hp->head_dim
                   + (size_t) h * hp->head_dim + R,
                   c->mla_a + (size_t) t * qk + (size_t) h * hp->mla_k + nope,
                   (size_t) rope * sizeof(float));
        }
    }
    return 0;
}

/* Each head's attention output (a latent) through its block of v_b, into
 * mla_a: [T][n_head * mla_v], what attn_output reads. */
static int
llm_mla_values(llm_ctx_t *c, const llm_layer_t *L, uint32_t T)
{
    const llm_hparams_t  *hp = &c->m->hp;
    int64_t               R = hp->n_lora_kv;
    uint32_t              h;
    int                   rc;

    for (h = 0; h < hp->n_head; h++) {
        rc = llm_mla_head_mat(c, &L->wv_b, h, hp->mla_v,
                              c->att + (size_t) h * R,
                              (size_t) hp->n_head * R, R, T,
                              c->mla_a + (size_t) h * hp->mla_v,
                              (size_t) hp->n_head * hp->mla_v);
        if (rc < 0) {
            return rc;
        }
    }
    return 0;
}

/*
 * A softmax attention layer's mixing, from the normed rows in xn to
 * x += wo(attention) (MLA: in the latent space; attn_q_gate: each head's
 * output times sigmoid of its gate).
 */
static int
llm_attn_block(llm_ctx_t *c, const llm_layer_t *L, uint32_t T)
{
    const llm_hparams_t  *hp = &c->m->hp;
    int64_t               E = hp->n_embd;
    uint32_t              q_dim = hp->n_head * hp->head_dim;
    uint32_t              k_dim = hp->n_head_kv * hp->head_dim;
    uint32_t              v_dim = hp->n_head_kv * hp->head_dim_v;
    uint32_t              o_dim = hp->n_head * hp->head_dim_v;
    uint32_t              qo = hp->attn_q_gate ? 2 * q_dim : q_dim;
    int64_t               ch;
    float                *att;
    int                   rc = 0;

    if (hp->n_lora_kv > 0) {
        rc = llm_mla_qkv(c, L, T);
    } else {
        ch = llm_chunk_rows(c, qo + k_dim + v_dim, qo);
        if ((rc = llm_items_mat(c, &L->wq, c->xn, E, T,
                                hp->attn_q_gate ? c->qg : c->q, qo, L->bq,
                                ch)) < 0
            || (rc = llm_items_mat(c, &L->wk, c->xn, E, T, c->k, k_dim,
                                   L->bk, ch)) < 0
            || (rc = llm_items_mat(c, &L->wv, c->xn, E, T, c->v, v_dim,
                                   L->bv, ch)) < 0)
        {
            return rc;
        }
        llm_run_items(c);
    }
    if (rc < 0) {
        return rc;
    }

    llm_run_rows(c, T, llm_task_rope);

    llm_attention(c, T);
    if (hp->attn_q_gate) {
        llm_run_rows(c, T, llm_task_attn_gate);
    }

    /* output projection (MLA: each head's latent through v_b first),
     * residual */
    att = c->att;
    if (hp->n_lora_kv > 0) {
        if ((rc = llm_mla_values(c, L, T)) < 0) {
            return rc;
        }
        att = c->mla_a;
        o_dim = hp->n_head * hp->mla_v;
    }
    llm_run_act(c, T, att, o_dim, llm_act_mask_of(L->wo.type), c->act);
    rc = llm_items_mat(c, &L->wo, att, o_dim, T, c->tmp, E, L->bo,
                       llm_chunk_rows(c, E, E));
    if (rc < 0) {
        return rc;
    }
    llm_run_items(c);
    llm_run_rows(c, T, llm_task_add);
    return 0;
}

static int
llm_layer(llm_ctx_t *c, uint32_t l, uint32_t T)
{
    const llm_hparams_t  *hp = &c->m->hp;
    const llm_layer_t    *L = &c->m->layers[l];
    uint32_t              mask;
    int                   rc = 0;

    c->layer = l;

    /* attention norm, activations for the first projections (MLA: q_a
     * or q, kv_a; a gated delta net: qkv, z, beta, alpha) */
    if (L->recurrent) {
        mask = llm_act_mask_of(L->wqkv.type) | llm_act_mask_of(L->wz.type)
               | llm_act_mask_of(L->wbeta.type)
               | llm_act_mask_of(L->walpha.type);
    } else if (hp->n_lora_kv > 0) {
        mask = llm_act_mask_of(L->wq_a.data ? L->wq_a.type : L->wq_b.type)
               | llm_act_mask_of(L->wkv_a.type);
    } else {
        mask = llm_act_mask_of(L->wq.type) | llm_act_mask_of(L->wk.type)
               | llm_act_mask_of(L->wv.type);
    }
    llm_run_norm(c, T, c->x, c->xn, L->attn_norm, mask);
    rc = L->recurrent ? llm_gdn(c, L, T) : llm_attn_block(c, L, T);
    if (rc < 0) {
        return rc;
    }

    /* the last layer's FFN only for the rows that want logits */
    if (l + 1 == hp->n_layer) {
        T = llm_gather_out_rows(c, c->b);
        c->n_out = T;
        if (T == 0) {
            return 0;
        }
    }

    /* FFN */
    if (llm_layer_is_moe(L)) {
        mask = llm_act_mask_of(L->gate_inp.type)
               | llm_act_mask_of(L->gate_exps.type);
        if (L->gate_shexp.data != NULL) {
            mask |= llm_act_mask_of(L->gate_shexp.type)
                    | llm_act_mask_of(L->up_shexp.type);
        }
        llm_run_norm(c, T, c->x, c->xn, L->ffn_norm, mask);
        rc = llm_moe(c, L, T);
        if (rc < 0 || L->gate_shexp.data == NULL) {
            return rc;
        }
        /* the shared experts see every token: x += their output (times
         * its gate, qwen35moe) */
        if (L->gate_inp_shexp != NULL) {
            llm_run_rows(c, T, llm_task_shexp_gate);
            c->add_scale = c->shg;
        }
        rc = llm_dense_ffn(c, &L->gate_shexp, &L->up_shexp, &L->down_shexp,
                           T);
        c->add_scale = NULL;
        return rc;
    }
    mask = llm_act_mask_of(L->ffn_gate.type) | llm_act_mask_of(L->ffn_up.type);
    llm_run_norm(c, T, c->x, c->xn, L->ffn_norm, mask);
    return llm_dense_ffn(c, &L->ffn_gate, &L->ffn_up, &L->ffn_down, T);
}

/* ---- batch validation, embeddings, logits ------------------------------ */

/*
 * A cache with a window pool: sequence s's ring is valid and holds, for
 * every token of s in the batch, its window and the positions the batch
 * writes (they go in before attention reads).
 */
static int
llm_check_ring(const llm_ctx_t *c, const llm_batch_t *b, uint32_t s,
    char *err, size_t errlen)
{
    const llm_seq_view_t *sv = &b->seqs[s];
    uint32_t              i, bt = c->kv->block_tokens, w = c->m->hp.n_swa;
    int64_t               lo = INT64_MAX, hi = -1, first;

    if (sv->swa_blocks == NULL || sv->n_swa_blocks == 0) {
        snprintf(err, errlen, "forward: sequence %u has no window ring, "
                 "which this cache needs", s);
        return -EINVAL;
    }
    for (i = 0; i < sv->n_swa_blocks; i++) {
        if (sv->swa_blocks[i] >= c->kv->n_blocks_swa) {
            snprintf(err, errlen, "forward: sequence %u ring block %u is "
                     "%u, expected < %u", s, i, sv->swa_blocks[i],
                     c->kv->n_blocks_swa);
            return -EINVAL;
        }
    }
    for (i = 0; i < b->n_tokens; i++) {
        if ((uint32_t) b->seq[i] == s) {
            lo = b->pos[i] < lo ? b->pos[i] : lo;
            hi = b->pos[i] > hi ? b->pos[i] : hi;
        }
    }
    if (hi < 0) {
        return 0;
    }
    first = lo + 1 > (int64_t) w ? lo + 1 - w : 0;
    if (hi / bt - first / bt + 1 > (int64_t) sv->n_swa_blocks) {
        snprintf(err, errlen, "forward: sequence %u's ring of %u blocks "
                 "cannot hold positions %lld..%lld and the %u-token "
                 "window", s, sv->n_swa_blocks, (long long) lo,
                 (long long) hi, w);
        return -EINVAL;
    }
    return 0;
}

static int
llm_check_batch(const llm_ctx_t *c, const llm_batch_t *b, char *err,
    size_t errlen)
{
    const llm_hparams_t  *hp = &c->m->hp;
    uint32_t              i, s, bt = c->kv->block_tokens;
    int32_t               p;

    if (b->n_tokens == 0 || b->n_tokens > c->max_tokens) {
        snprintf(err, errlen, "forward: batch of %u tokens, expected "
                 "1..%u", b->n_tokens, c->max_tokens);
        return -EINVAL;
    }
    for (i = 0; i < b->n_tokens; i++) {
        if (b->tokens[i] < 0 || (uint32_t) b->tokens[i] >= hp->n_vocab) {
            snprintf(err, errlen, "forward: token %u is id %d, expected "
                     "0..%u", i, b->tokens[i], hp->n_vocab - 1);
            return -EINVAL;
        }
        if (b->seq[i] < 0 || (uint32_t) b->seq[i] >= b->n_seqs) {
            snprintf(err, errlen, "forward: token %u has sequence %d, "
                     "expected 0..%d", i, b->seq[i], (int) b->n_seqs - 1);
            return -EINVAL;
        }
        p = b->pos[i];
        s = (uint32_t) b->seq[i];
        if (p < 0 || (uint64_t) p >= (uint64_t) b->seqs[s].n_blocks * bt) {
            snprintf(err, errlen, "forward: token %u at position %d, but "
                     "sequence %u has %u blocks of %u", i, p, s,
                     b->seqs[s].n_blocks, bt);
            return -EINVAL;
        }
        if ((uint32_t) p >= c->max_pos) {
            snprintf(err, errlen, "forward: position %d beyond the cache "
                     "(%u positions)", p, c->max_pos);
            return -EINVAL;
        }
    }
    for (s = 0; s < b->n_seqs; s++) {
        for (i = 0; i < b->seqs[s].n_blocks; i++) {
            if (b->seqs[s].blocks[i] >= c->kv->n_blocks) {
                snprintf(err, errlen, "forward: sequence %u block %u is %u, "
                         "expected < %u", s, i, b->seqs[s].blocks[i],
                         c->kv->n_blocks);
                return -EINVAL;
            }
        }
        if (c->kv->n_blocks_swa > 0
            && llm_check_ring(c, b, s, err, errlen) < 0)
        {
            return -EINVAL;
        }
    }
    return 0;
}

/*
 * Recurrent layers: group the batch's rows by sequence (c->rs_*, each
 * sequence's rows in batch order) and check that each sequence's
 * positions are consecutive, its state slot is its own and in range, and
 * it starts at 0 or where the slot's last batch ended.
 */
static int
llm_check_states(llm_ctx_t *c, const llm_batch_t *b, char *err,
    size_t errlen)
{
    llm_kv_t  *kv = c->kv;
    uint32_t   i, k, s, n = 0, slot;
    uint32_t  *map;
    int32_t    p0;

    if (b->n_seqs > c->cap_map) {
        map = realloc(c->rs_map, b->n_seqs * sizeof(uint32_t));
        if (map == NULL) {
            snprintf(err, errlen, "forward: out of memory");
            return -ENOMEM;
        }
        c->rs_map = map;
        c->cap_map = b->n_seqs;
    }
    map = c->rs_map;
    for (s = 0; s < b->n_seqs; s++) {
        map[s] = UINT32_MAX;
    }
    /* the sequences in order of their first row, and their row counts */
    for (i = 0; i < b->n_tokens; i++) {
        s = (uint32_t) b->seq[i];
        if (map[s] == UINT32_MAX) {
            map[s] = n;
            c->rs_seq[n] = s;
            c->rs_off[n + 1] = 0;
            n++;
        }
        c->rs_off[map[s] + 1]++;
    }
    c->rs_off[0] = 0;
    for (k = 0; k < n; k++) {
        c->rs_off[k + 1] += c->rs_off[k];
    }
    for (i = 0; i < b->n_tokens; i++) {
        k = map[b->seq[i]];
        /* the next free row of k: rs_off[k] advances, restored below */
        c->rs_tok[c->rs_off[k]++] = i;
    }
    for (k = n; k > 0; k--) {
        c->rs_off[k] = c->rs_off[k - 1];
    }
    c->rs_off[0] = 0;
    c->n_rs = n;

    for (k = 0; k < n; k++) {
        s = c->rs_seq[k];
        slot = b->seqs[s].state;
        p0 = b->pos[c->rs_tok[c->rs_off[k]]];
        if (slot >= kv->n_states) {
            snprintf(err, errlen, "forward: sequence %u has state slot %u, "
                     "expected < %u", s, slot, kv->n_states);
            return -EINVAL;
        }
        for (i = 0; i < k; i++) {
            if (b->seqs[c->rs_seq[i]].state == slot) {
                snprintf(err, errlen, "forward: sequences %u and %u share "
                         "state slot %u", c->rs_seq[i], s, slot);
                return -EINVAL;
            }
        }
        for (i = c->rs_off[k] + 1; i < c->rs_off[k + 1]; i++) {
            if (b->pos[c->rs_tok[i]] != b->pos[c->rs_tok[i - 1]] + 1) {
                snprintf(err, errlen, "forward: sequence %u's positions "
                         "%d then %d: the recurrent layers need them "
                         "consecutive", s, b->pos[c->rs_tok[i - 1]],
                         b->pos[c->rs_tok[i]]);
                return -EINVAL;
            }
        }
        if (p0 != 0 && kv->state_pos[slot] != (uint32_t) p0) {
            snprintf(err, errlen, "forward: sequence %u continues at "
                     "position %d, but its state slot %u holds %s %u", s,
                     p0, slot, kv->state_pos[slot] == UINT32_MAX
                     ? "no state" : "the state before position",
                     kv->state_pos[slot] == UINT32_MAX
                     ? 0 : kv->state_pos[slot]);
            return -EINVAL;
        }
    }
    return 0;
}

/* Clear the slots of sequences that start at 0 and mark every slot in
 * the batch as being written (usable again once the batch is done). */
static void
llm_states_begin(llm_ctx_t *c, const llm_batch_t *b)
{
    llm_kv_t  *kv = c->kv;
    uint32_t   k, slot;

    for (k = 0; k < c->n_rs; k++) {
        slot = b->seqs[c->rs_seq[k]].state;
        if (b->pos[c->rs_tok[c->rs_off[k]]] == 0) {
            memset(llm_kv_conv_state(kv, slot, 0), 0, kv->state_bytes);
        }
        kv->state_pos[slot] = UINT32_MAX;
    }
}

static void
llm_states_end(llm_ctx_t *c, const llm_batch_t *b)
{
    uint32_t  k;

    for (k = 0; k < c->n_rs; k++) {
        c->kv->state_pos[b->seqs[c->rs_seq[k]].state] =
            (uint32_t) b->pos[c->rs_tok[c->rs_off[k + 1] - 1]] + 1;
    }
}

/*
 * YaRN's (cos, sin) of pair i at the unscaled angle th, as ggml's
 * rope_yarn: the interpolated angle below the correction range, the
 * original above it, a linear ramp between, both scaled by mscale.
 */
static void
llm_yarn_cs(const llm_model_t *m, double th, uint32_t i, float *cs)
{
    double  y, ramp, interp = th * m->rope_scale;

    y = ((double) i - m->yarn_corr[0])
        / fmax(0.001, (double) m->yarn_corr[1] - m->yarn_corr[0]);
    ramp = (1.0 - fmin(1.0, fmax(0.0, y))) * m->yarn_ext;
    th = interp * (1.0 - ramp) + th * ramp;
    cs[0] = (float) cos(th) * m->yarn_mscale;
    cs[1] = (float) sin(th) * m->yarn_mscale;
}

/* Embedding rows and RoPE tables, rows split by thread. */
static void
llm_task_embed(void *arg, uint32_t item, uint32_t ith)
{
    llm_ctx_t           *c = arg;
    const llm_model_t   *m = c->m;
    const llm_hparams_t *hp = &m->hp;
    const llm_batch_t   *b = c->b;
    uint32_t             r0, r1;
    uint32_t             r, i, half = hp->rope_dims / 2;
    double               th, base = hp->rope_base;
    float               *cs;

    (void) ith;
    llm_rows(c, item, &r0, &r1);
    for (r = r0; r < r1; r++) {
        llm_dequantize_row((llm_type_t) m->tok_embd.type,
                           m->tok_embd.data
                           + (size_t) b->tokens[r] * m->tok_embd.row_bytes,
                           c->x + (size_t) r * hp->n_embd, hp->n_embd);
        cs = c->rope_cs + (size_t) r * hp->rope_dims;
        for (i = 0; i < half; i++) {
            th = (double) b->pos[r]
                 * pow(base, -2.0 * i / (double) hp->rope_dims);
            if (m->rope_freqs != NULL) {
                th /= m->rope_freqs[i];
            }
            if (m->yarn) {
                llm_yarn_cs(m, th, i, cs + 2 * i);
                continue;
            }
            th *= m->rope_scale;
            cs[2 * i] = (float) cos(th);
            cs[2 * i + 1] = (float) sin(th);
        }
    }
}

/*
 * The embeddings and every layer of a batch: leaves the rows that want
 * output (n_out of them) gathered at the front of x.  0 or a negative
 * errno with err set.
 */
static int
llm_forward_layers(llm_ctx_t *c, const llm_batch_t *b, char *err,
    size_t errlen)
{
    const llm_hparams_t  *hp = &c->m->hp;
    uint32_t              T = b->n_tokens, l;
    int                   rc;

    rc = llm_check_batch(c, b, err, errlen);
    if (rc == 0 && hp->n_layer_rec > 0) {
        rc = llm_check_states(c, b, err, errlen);
    }
    if (rc < 0) {
        return rc;
    }
    c->b = b;
    if (hp->n_layer_rec > 0) {
        llm_states_begin(c, b);
    }
    llm_run_rows(c, T, llm_task_embed);

    for (l = 0; l < hp->n_layer; l++) {
        c->err[0] = '\0';
        rc = llm_layer(c, l, T);
        if (rc < 0) {
            snprintf(err, errlen, "forward: layer %u: %s", l,
                     c->err[0] ? c->err : strerror(-rc));
            return rc;
        }
    }
    if (hp->n_layer_rec > 0) {
        llm_states_end(c, b);
    }
    return 0;
}

int
llm_forward(llm_ctx_t *c, const llm_batch_t *b, float *out, char *err,
    size_t errlen)
{
    const llm_model_t    *m = c->m;
    const llm_hparams_t  *hp = &m->hp;
    uint32_t              n_out;
    int                   rc;

    rc = llm_forward_layers(c, b, err, errlen);
    if (rc < 0) {
        return rc;
    }
    n_out = c->n_out;
    if (n_out == 0) {
        return 0;
    }
    llm_run_norm(c, n_out, c->x, c->xn, m->output_norm,
                 llm_act_mask_of(m->output.type));
    rc = llm_items_mat(c, &m->output, c->xn, hp->n_embd, n_out, out,
                       hp->n_vocab, NULL,
                       llm_chunk_rows(c, hp->n_vocab, hp->n_vocab));
    if (rc < 0) {
        snprintf(err, errlen, "forward: output: %s", strerror(-rc));
        return rc;
    }
    llm_run_items(c);
    return 0;
}

int
llm_forward_hidden(llm_ctx_t *c, const llm_batch_t *b, float *out,
    char *err, size_t errlen)
{
    size_t  n = c->m->hp.n_embd;
    int     rc;

    rc = llm_forward_layers(c, b, err, errlen);
    if (rc < 0 || c->n_out == 0) {
        return rc;
    }
    /* the output norm only: what the head would read (no activations) */
    llm_run_norm(c, c->n_out, c->x, c->xn, c->m->output_norm, 0);
    memcpy(out, c->xn, (size_t) c->n_out * n * sizeof(float));
    return 0;
}

/* ---- context ------------------------------------------------------------ */

size_t
llm_ctx_buffer_bytes(const llm_ctx_t *c)
{
    size_t    bytes = 0;
    uint32_t  i;

    for (i = 0; i < c->n_maps; i++) {
        bytes += c->map_len[i];
    }
    return bytes;
}

/*
 * Allocate every buffer for batches of up to max_tokens tokens.  Big
 * buffers are lazily backed anonymous mappings: a context sized for large
 * batches costs resident memory only for what a batch touches.
 */
int
llm_ctx_create(llm_ctx_t **out, const llm_model_t *m, llm_kv_t *kv,
    uint32_t n_threads, uint32_t max_tokens, char *err, size_t errlen)
{
    const llm_hparams_t  *hp = &m->hp;
    llm_ctx_t            *c;
    size_t                T, S, E, q_dim, k_dim, v_dim, o_dim, ff, maxlen;
    size_t                G, rb;
    uint32_t              k;
    int                   rc;

    *out = NULL;
    if (max_tokens == 0 || max_tokens > 65536) {
        snprintf(err, errlen, "context: max_tokens %u, expected 1..65536",
                 max_tokens);
        return -EINVAL;
    }
    if (kv->n_layer != hp->n_layer
        || kv->k_dim != hp->n_head_kv * hp->head_dim
        || kv->v_dim != hp->n_head_kv * hp->head_dim_v
        || kv->state_bytes != llm_kv_state_bytes(m)
        || (hp->n_layer_rec > 0 && kv->n_states == 0))
    {
        snprintf(err, errlen, "context: the KV cache was made for another "
                 "model shape");
        return -EINVAL;
    }

    c = calloc(1, sizeof(*c));
    if (c == NULL) {
        snprintf(err, errlen, "context: out of memory");
        return -ENOMEM;
    }
    c->m = m;
    c->kv = kv;
    c->nth = n_threads;
    c->max_tokens = max_tokens;
    c->max_pos = kv->n_blocks * kv->block_tokens;

    rc = llm_pool_create(&c->pool, n_threads, err, errlen);
    if (rc < 0) {
        free(c);
        return rc;
    }

    T = max_tokens;
    E = hp->n_embd;
    q_dim = (size_t) hp->n_head * hp->head_dim;
    k_dim = (size_t) hp->n_head_kv * hp->head_dim;
    v_dim = (size_t) hp->n_head_kv * hp->head_dim_v;
    o_dim = (size_t) hp->n_head * hp->head_dim_v;
    ff = hp->n_expert > 0 ? hp->n_ff_exp : hp->n_ff;
    S = hp->n_expert > 0 ? T * hp->n_expert_used : T;
    c->max_slots = (uint32_t) S;
    G = hp->n_head / hp->n_head_kv;

    maxlen = E;
    maxlen = q_dim > maxlen ? q_dim : maxlen;
    maxlen = o_dim > maxlen ? o_dim : maxlen;
    maxlen = ff > maxlen ? ff : maxlen;
    maxlen = hp->n_ff > maxlen ? hp->n_ff : maxlen;
    maxlen = hp->n_ff_shexp > maxlen ? hp->n_ff_shexp : maxlen;
    maxlen = hp->n_lora_q > maxlen ? hp->n_lora_q : maxlen;
    maxlen = hp->n_lora_kv > maxlen ? hp->n_lora_kv : maxlen;
    maxlen = (size_t) hp->n_head * hp->mla_v > maxlen
             ? (size_t) hp->n_head * hp->mla_v : maxlen;
    maxlen = hp->ssm_inner > maxlen ? hp->ssm_inner : maxlen;
    o_dim = hp->ssm_inner > o_dim ? hp->ssm_inner : o_dim;

    /* ga and up hold S rows of the experts' width, or T rows of a dense
     * layer's or the shared experts' */
    ff = S * ff;
    ff = T * hp->n_ff > ff ? T * hp->n_ff : ff;
    ff = T * hp->n_ff_shexp > ff ? T * hp->n_ff_shexp : ff;

    c->x = llm_ctx_map(c, T * E * sizeof(float));
    c->xn = llm_ctx_map(c, T * E * sizeof(float));
    c->q = llm_ctx_map(c, T * q_dim * sizeof(float));
    c->k = llm_ctx_map(c, T * k_dim * sizeof(float));
    c->v = llm_ctx_map(c, T * v_dim * sizeof(float));
    c->att = llm_ctx_map(c, T * o_dim * sizeof(float));
    c->tmp = llm_ctx_map(c, T * E * sizeof(float));
    c->ga = llm_ctx_map(c, ff * sizeof(float));
    c->up = llm_ctx_map(c, ff * sizeof(float));
    /* score tiles of about 256 positions, whole blocks; query tiles of
     * about 128 rows (at least one token) */
    c->att_tile = kv->block_tokens >= 256 ? kv->block_tokens
                  : 256 / kv->block_tokens * kv->block_tokens;
    c->att_lds = (c->att_tile + 15) & ~15u;
    c->att_tq = G >= 128 ? 1 : 128 / (uint32_t) G;
    c->att_tq = c->att_tq > 16 ? 16 : c->att_tq;
    c->att_tq = c->att_tq > max_tokens ? max_tokens : c->att_tq;
    c->att_scr = llm_ctx_map(c, n_threads * llm_att_scratch_floats(c)
                                * sizeof(float));
    c->qt_r0 = calloc(T, sizeof(uint32_t));
    c->qt_n = calloc(T, sizeof(uint32_t));
    c->rope_cs = llm_ctx_map(c, T * (hp->rope_dims + 2) * sizeof(float));
    if (hp->n_lora_kv > 0) {
        size_t  a = hp->n_lora_q, h = (size_t) hp->n_head;

        a = h * hp->mla_k > a ? h * hp->mla_k : a;
        a = h * hp->mla_v > a ? h * hp->mla_v : a;
        c->mla_a = llm_ctx_map(c, T * a * sizeof(float));
        a = hp->n_lora_q > hp->n_lora_kv ? hp->n_lora_q : hp->n_lora_kv;
        c->mla_in = llm_ctx_map(c, T * a * sizeof(float));
        if (c->mla_a == NULL || c->mla_in == NULL) {
            goto nomem;
        }
    }
    if (hp->attn_q_gate) {
        c->qg = llm_ctx_map(c, T * 2 * q_dim * sizeof(float));
        if (c->qg == NULL) {
            goto nomem;
        }
    }
    if (hp->n_ff_shexp > 0) {
        c->shg = llm_ctx_map(c, T * sizeof(float));
        if (c->shg == NULL) {
            goto nomem;
        }
    }
    if (hp->n_layer_rec > 0) {
        const char  *ch = getenv("LLM_GDN_CHUNK");

        /* the chunked delta rule's chunk ($LLM_GDN_CHUNK: another, for
         * tests and benchmarks; 0 or 1: token by token) and per thread
         * its inputs, outputs and scratch (llm_gdn_chunk) */
        c->gdn_chunk = ch != NULL ? (uint32_t) atoi(ch) : LLM_GDN_CHUNK_MAX;
        c->gdn_chunk = c->gdn_chunk > LLM_GDN_CHUNK_MAX ? LLM_GDN_CHUNK_MAX
                                                        : c->gdn_chunk;
        c->gdn_w_floats = (size_t) 4 * LLM_GDN_CHUNK_MAX * hp->ssm_state
                          + 2 * LLM_GDN_CHUNK_MAX
                          + llm_gdn_chunk_floats(hp->ssm_state,
                                                 LLM_GDN_CHUNK_MAX);
        c->gdn_w = llm_ctx_map(c, n_threads * c->gdn_w_floats
                                  * sizeof(float));
        if (c->gdn_w == NULL) {
            goto nomem;
        }
        c->ssm_x = llm_ctx_map(c, T * llm_ssm_conv_dim(hp) * sizeof(float));
        c->ssm_z = llm_ctx_map(c, T * hp->ssm_inner * sizeof(float));
        c->ssm_ba = llm_ctx_map(c, T * 2 * hp->ssm_v_heads * sizeof(float));
        c->rs_seq = calloc(T, sizeof(uint32_t));
        c->rs_off = calloc(T + 1, sizeof(uint32_t));
        c->rs_tok = calloc(T, sizeof(uint32_t));
        if (c->ssm_x == NULL || c->ssm_z == NULL || c->ssm_ba == NULL
            || c->rs_seq == NULL || c->rs_off == NULL || c->rs_tok == NULL)
        {
            goto nomem;
        }
    }
    c->out_rows = calloc(T, sizeof(uint32_t));
    if (c->x == NULL || c->xn == NULL || c->q == NULL || c->k == NULL
        || c->v == NULL || c->att == NULL || c->tmp == NULL || c->ga == NULL
        || c->up == NULL || c->att_scr == NULL || c->rope_cs == NULL
        || c->out_rows == NULL || c->qt_r0 == NULL || c->qt_n == NULL)
    {
        goto nomem;
    }

    for (k = 1; k < LLM_ACT_KINDS; k++) {
        rb = llm_act_row_bytes(llm_act_types[k], maxlen);
        c->act[k].type = llm_act_types[k];
        c->act[k].cap = T * rb;
        c->act[k].buf = llm_ctx_map(c, c->act[k].cap);
        c->act2[k].type = llm_act_types[k];
        c->act2[k].cap = S * rb;
        c->act2[k].buf = llm_ctx_map(c, c->act2[k].cap);
        if (c->act[k].buf == NULL || c->act2[k].buf == NULL) {
            goto nomem;
        }
    }
    c->act[0].type = LLM_TYPE_F32;
    c->act2[0].type = LLM_TYPE_F32;

    if (hp->n_expert > 0) {
        c->eo = llm_ctx_map(c, S * E * sizeof(float));
        c->xg_cap = S * E * sizeof(float);
        c->xg = llm_ctx_map(c, c->xg_cap);
        c->router = llm_ctx_map(c, T * hp->n_expert * sizeof(float));
        c->sel = calloc(S, sizeof(int32_t));
        c->selw = calloc(S, sizeof(float));
        c->tok_slot = calloc(S, sizeof(uint32_t));
        c->slot_tok = calloc(S, sizeof(uint32_t));
        c->e_count = calloc(hp->n_expert, sizeof(uint32_t));
        c->e_off = calloc(hp->n_expert + 1, sizeof(uint32_t));
        c->active = calloc(hp->n_expert, sizeof(uint32_t));
        c->xptrs = calloc(hp->n_expert, sizeof(llm_expert_ptrs_t));
        c->pf = calloc(hp->n_expert, sizeof(uint32_t));
        if (c->eo == NULL || c->xg == NULL || c->router == NULL
            || c->sel == NULL || c->selw == NULL || c->tok_slot == NULL
            || c->slot_tok == NULL || c->e_count == NULL || c->e_off == NULL
            || c->active == NULL || c->xptrs == NULL || c->pf == NULL)
        {
            goto nomem;
        }
    }

    llm_simd_init();
    *out = c;
    return 0;

nomem:
    snprintf(err, errlen, "context: out of memory for batches of %u tokens",
             max_tokens);
    llm_ctx_free(c);
    return -ENOMEM;
}

int
llm_ctx_set_attn_tile(llm_ctx_t *c, uint32_t tile)
{
    float  *scr;

    if (tile == 0 || tile % c->kv->block_tokens != 0 || tile > (1u << 20)
        || tile / c->kv->block_tokens > LLM_ATT_MAX_BLOCKS)
    {
        return -EINVAL;
    }
    c->att_tile = tile;
    c->att_lds = (tile + 15) & ~15u;
    scr = llm_ctx_map(c, c->nth * llm_att_scratch_floats(c) * sizeof(float));
    if (scr == NULL) {
        return -ENOMEM;
    }
    c->att_scr = scr;               /* the old one unmapped with the rest */
    return 0;
}

void
llm_ctx_free(llm_ctx_t *c)
{
    uint32_t  i;

    if (c == NULL) {
        return;
    }
    llm_pool_free(c->pool);
    for (i = 0; i < c->n_maps; i++) {
        munmap(c->maps[i], c->map_len[i]);
    }
    free(c->out_rows);
    free(c->qt_r0);
    free(c->qt_n);
    free(c->att_part);
    free(c->rs_seq);
    free(c->rs_off);
    free(c->rs_tok);
    free(c->rs_map);
    free(c->sel);
    free(c->selw);
    free(c->tok_slot);
    free(c->slot_tok);
    free(c->e_count);
    free(c->e_off);
    free(c->active);
    free(c->xptrs);
    free(c->pf);
    free(c->items);
    free(c);
}

void
llm_ctx_set_expert_source(llm_ctx_t *c, const llm_expert_source_t *src)
{
    if (src == NULL) {
        memset(&c->xsrc, 0, sizeof(c->xsrc));
        return;
    }
    c->xsrc = *src;
}
