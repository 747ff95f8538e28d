/*
 * Deterministic synthetic GGUF models (see mkmodel.h).
 *
 * The tensor list is built once from the hyperparameters (names, shapes,
 * types, how to fill), declared to the GGUF writer, and then each tensor is
 * produced slab by slab: the thread pool fills and converts rows into a
 * slab buffer, the calling thread appends it to the file.
 *
 * Values: matrices ~ N(0, 1/fan_in) (fan_in = the row length ne[0]), so
 * activations keep their scale through every projection; norm weights
 * 1 + N(0, 0.1^2), not all ones, so a skipped norm shows; biases and the
 * expert selection bias small.  The normal deviate is an Irwin-Hall sum of
 * four uniforms: cheap, bounded, and plenty for random weights.
 */

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "model/gguf.h"
#include "mkmodel.h"
#include "mkmodel_script.h"
#include "kernels/quant.h"
#include "vocabgen.h"

#define MK_SLAB_BYTES   (32u << 20)
#define MK_CHUNK_ROWS   16

typedef enum {
    MK_MATRIX = 0,      /* N(0, 1/ne0) */
    MK_NORM,            /* 1 + N(0, 0.01) */
    MK_BIAS,            /* N(0, 0.05^2) */
    MK_DECAY,           /* -(1 + N(0, 0.01)): qwen35moe's ssm_a */
    MK_CONST            /* every value mk_tensor_t.value */
} mk_fill_t;

typedef struct {
    char        name[64];
    uint32_t    n_dims;
    int64_t     ne[4];
    uint32_t    type;
    mk_fill_t   fill;
    char        seed_name[64];  /* values as if rows of this tensor */
    int64_t     row_offset;     /* ... starting at this row */
    float       value;          /* MK_CONST */
} mk_tensor_t;

typedef struct {
    mk_tensor_t *t;
    size_t       n, cap;
} mk_list_t;

const char *const llm_mkmodel_presets[] = {
    "tiny", "bench-moe", "tiny-llama", "tiny-mixtral", "tiny-qwen2",
    "tiny-qwen3", "tiny-minimax", "tiny-embed", "tiny-glm4moe",
    "tiny-gpt-oss", "tiny-deepseek2", "tiny-qwen35moe", "bench-gpt-oss",
    "bench-glm4moe", "bench-deepseek2", "bench-qwen35moe", NULL
};

static int
mk_is_moe_arch(const char *arch)
{
    return strcmp(arch, "qwen3moe") == 0 || strcmp(arch, "minimax-m2") == 0
           || strcmp(arch, "glm4moe") == 0 || strcmp(arch, "gpt-oss") == 0
           || strcmp(arch, "deepseek2") == 0
           || strcmp(arch, "qwen35moe") == 0;
}

uint32_t
llm_mkmodel_file_type(uint32_t t)
{
    switch (t) {
    case LLM_TYPE_F32:  return 0;
    case LLM_TYPE_F16:  return 1;
    case LLM_TYPE_Q4_0: return 2;
    case LLM_TYPE_Q8_0: return 7;
    case LLM_TYPE_Q4_K: return 15;
    case LLM_TYPE_Q5_K: return 17;
    case LLM_TYPE_Q6_K: return 18;
    case LLM_TYPE_BF16: return 32;
    default:            return 0;
    }
}

/* Out of line: inlined, GCC's -Warray-bounds misjudges p->pre under ASan. */
static void __attribute__((noinline))
mk_set_pre(llm_mkmodel_params_t *p, const char *pre)
{
    size_t n = strlen(pre);

    if (n >= sizeof(p->pre)) {
        n = sizeof(p->pre) - 1;
    }
    memcpy(p->pre, pre, n);
    p->pre[n] = '\0';
}

int
llm_mkmodel_arch_defaults(llm_mkmodel_params_t *p, char *err, size_t errlen)
{
    int glm = strcmp(p->arch, "glm4moe") == 0;
    int ds = strcmp(p->arch, "deepseek2") == 0;

    /* what only some architectures have goes when another is asked for
     * (--preset bench-glm4moe --arch qwen3moe: the plain twin) */
    if (!glm && !ds) {
        p->n_layer_dense = 0;
        p->n_expert_shared = 0;
    }
    if (!glm && strcmp(p->arch, "qwen35moe") != 0) {
        p->n_nextn = 0;
    }
    if (strcmp(p->arch, "qwen35moe") != 0) {
        p->ssm_state = p->ssm_k_heads = p->ssm_v_heads = 0;
    } else {
        p->n_expert_shared = 1;
    }
    if (strcmp(p->arch, "gpt-oss") != 0) {
        p->n_swa = 0;
        p->yarn_factor = 0.0f;
        p->yarn_orig_ctx = 0;
    }
    if (!ds) {
        p->n_lora_q = p->n_lora_kv = p->mla_v = 0;
        p->n_groups = p->n_groups_used = 0;
    }
    if (strcmp(p->arch, "llama") == 0) {
        p->rope_base = 10000.0f;
        p->eps = 1e-5f;
        mk_set_pre(p, "gpt-2");
    } else if (strcmp(p->arch, "qwen2") == 0
               || strcmp(p->arch, "qwen3") == 0
               || strcmp(p->arch, "qwen3moe") == 0)
    {
        p->rope_base = 1000000.0f;
        p->eps = 1e-6f;
        mk_set_pre(p, "qwen2");
    } else if (strcmp(p->arch, "minimax-m2") == 0) {
        p->rope_base = 5000000.0f;
        p->eps = 1e-6f;
        mk_set_pre(p, "gpt-2");
    } else if (strcmp(p->arch, "glm4moe") == 0) {
        p->rope_base = 1000000.0f;
        p->eps = 1e-5f;
        mk_set_pre(p, "gpt-2");
    } else if (strcmp(p->arch, "qwen35moe") == 0) {
        p->rope_base = 10000000.0f;
        p->eps = 1e-6f;
        mk_set_pre(p, "qwen2");
        p->ssm_state = p->ssm_state ? p->ssm_state : p->head_dim / 2;
        p->ssm_k_heads = p->ssm_k_heads ? p->ssm_k_heads : 2;
        p->ssm_v_heads = p->ssm_v_heads ? p->ssm_v_heads : 4;
        p->rope_dim = p->head_dim / 4;      /* Qwen3.5: 64 of 256 */
        return 0;
    } else if (strcmp(p->arch, "deepseek2") == 0) {
        p->rope_base = 10000.0f;
        p->eps = 1e-6f;
        mk_set_pre(p, "gpt-2");
        p->n_head_kv = 1;
        p->n_lora_kv = p->n_lora_kv ? p->n_lora_kv : 2 * p->head_dim;
        p->mla_v = p->mla_v ? p->mla_v : p->head_dim;
        p->rope_dim = p->head_dim / 3;
        p->rope_dim -= p->rope_dim % 2;
        return 0;
    } else if (strcmp(p->arch, "gpt-oss") == 0) {
        p->rope_base = 150000.0f;
        p->eps = 1e-5f;
        mk_set_pre(p, "gpt-2");
        p->n_swa = p->n_swa ? p->n_swa : 128;
        p->yarn_factor = p->yarn_factor > 0.0f ? p->yarn_factor : 32.0f;
        p->yarn_orig_ctx = p->yarn_orig_ctx ? p->yarn_orig_ctx : 4096;
    } else {
        llm_err(err, errlen, "unknown architecture '%s' (expected llama, "
            "qwen2, qwen3, qwen3moe, minimax-m2, glm4moe, gpt-oss, "
            "deepseek2 or qwen35moe)", p->arch);
        return -EINVAL;
    }
    /* partial rope: minimax-m2 and glm4moe rotate half the head */
    p->rope_dim = strcmp(p->arch, "minimax-m2") == 0
                  || strcmp(p->arch, "glm4moe") == 0 ? p->head_dim / 2
                                                     : p->head_dim;
    return 0;
}

static void
mk_shape(llm_mkmodel_params_t *p, const char *arch, uint32_t embd,
    uint32_t layers, uint32_t heads, uint32_t kv, uint32_t hd, uint32_t ff,
    uint32_t experts, uint32_t used, uint32_t ff_exp, uint32_t vocab,
    uint32_t ctx)
{
    snprintf(p->arch, sizeof(p->arch), "%s", arch);
    p->n_embd = embd;
    p->n_layer = layers;
    p->n_head = heads;
    p->n_head_kv = kv;
    p->head_dim = hd;
    p->n_ff = ff;
    p->n_expert = experts;
    p->n_expert_used = used;
    p->n_ff_exp = ff_exp;
    p->n_vocab = vocab;
    p->n_ctx = ctx;
}

int
llm_mkmodel_preset(llm_mkmodel_params_t *p, const char *preset, char *err,
    size_t errlen)
{
    memset(p, 0, sizeof(*p));
    p->type = LLM_TYPE_F32;
    p->seed = 1;
    p->n_threads = 2;
    p->pooling = -1;

    if (strcmp(preset, "tiny") == 0) {
        mk_shape(p, "qwen3moe", 128, 4, 4, 2, 32, 256, 8, 2, 128, 1000,
            2048);
    } else if (strcmp(preset, "bench-moe") == 0) {
        mk_shape(p, "qwen3moe", 2048, 16, 32, 4, 64, 6144, 64, 8, 768, 4096,
            8192);
    } else if (strcmp(preset, "tiny-llama") == 0) {
        mk_shape(p, "llama", 128, 4, 4, 2, 32, 256, 0, 0, 0, 1000, 2048);
    } else if (strcmp(preset, "tiny-mixtral") == 0) {
        mk_shape(p, "llama", 128, 4, 4, 2, 32, 256, 4, 2, 256, 1000, 2048);
    } else if (strcmp(preset, "tiny-qwen2") == 0) {
        mk_shape(p, "qwen2", 128, 4, 4, 2, 32, 256, 0, 0, 0, 1000, 2048);
    } else if (strcmp(preset, "tiny-qwen3") == 0) {
        mk_shape(p, "qwen3", 128, 4, 4, 2, 32, 256, 0, 0, 0, 1000, 2048);
    } else if (strcmp(preset, "tiny-embed") == 0) {
        /* a Qwen3-Embedding-shaped file: last-token pooling */
        mk_shape(p, "qwen3", 128, 4, 4, 2, 32, 256, 0, 0, 0, 1000, 2048);
        p->pooling = 3;
    } else if (strcmp(preset, "tiny-minimax") == 0) {
        mk_shape(p, "minimax-m2", 128, 4, 4, 2, 64, 128, 8, 2, 128, 1000,
            2048);
    } else if (strcmp(preset, "tiny-glm4moe") == 0) {
        /* GLM-4.5's layout: a dense layer, then MoE with a shared expert,
         * and the NextN block the engine must skip */
        mk_shape(p, "glm4moe", 128, 4, 4, 2, 32, 256, 8, 2, 128, 1000,
            2048);
        p->n_layer_dense = 1;
        p->n_expert_shared = 1;
        p->n_nextn = 1;
    } else if (strcmp(preset, "bench-gpt-oss") == 0) {
        /* gpt-oss-20b's widths (2880 embd, 64/8 heads of 64, experts of
         * 2880, 4 of 32 used, window 128) at 6 of its 24 layers, so that
         * with MXFP4 experts it is ~2.7 GB */
        mk_shape(p, "gpt-oss", 2880, 6, 64, 8, 64, 2880, 32, 4, 2880, 32000,
            8192);
        p->n_swa = 128;
        p->yarn_factor = 32.0f;
        p->yarn_orig_ctx = 4096;
    } else if (strcmp(preset, "bench-glm4moe") == 0) {
        /* bench-moe's shape (ANCHORS.md) as GLM-4.5 lays it out: the
         * first layer dense, a shared expert beside the 8 of 64 */
        mk_shape(p, "glm4moe", 2048, 16, 32, 4, 64, 6144, 64, 8, 768, 4096,
            8192);
        p->n_layer_dense = 1;
        p->n_expert_shared = 1;
    } else if (strcmp(preset, "bench-deepseek2") == 0) {
        /* bench-moe's width and depth laid out as DeepSeek-V3: MLA with
         * V3's own dims (q LoRA 1536, a latent of 512 + 64 rope, heads of
         * 128 + 64, values of 128) at 16 heads, layer 0 dense, a shared
         * expert beside 8 of 32 routed in 8 groups of which 4 are used:
         * the active bytes per token of bench-moe (~0.5 GB in Q4_K_M),
         * half its experts to keep the F16 file under 7 GB */
        mk_shape(p, "deepseek2", 2048, 16, 16, 1, 192, 6144, 32, 8, 768,
            4096, 8192);
        p->n_lora_q = 1536;
        p->n_lora_kv = 512;
        p->mla_v = 128;
        p->n_layer_dense = 1;
        p->n_expert_shared = 1;
        p->n_groups = 8;
        p->n_groups_used = 4;
    } else if (strcmp(preset, "bench-qwen35moe") == 0) {
        /* Qwen3.5-35B-A3B's widths (2048 embd; delta net layers of 16 key
         * and 32 value heads of 128; full attention every 4th layer, 16/2
         * heads of 256; experts of 512 with 8 used and a shared one) at
         * 16 of its 40 layers and 32 of its 256 experts: bench-moe's
         * active bytes per token (~0.6 GB in Q4_K_M); no MTP block */
        mk_shape(p, "qwen35moe", 2048, 16, 16, 2, 256, 512, 32, 8, 512,
            4096, 8192);
        p->ssm_state = 128;
        p->ssm_k_heads = 16;
        p->ssm_v_heads = 32;
    } else if (strcmp(preset, "tiny-deepseek2") == 0) {
        /* DeepSeek-V3's layout: MLA (q LoRA, a 64-dim latent, heads of
         * 32 + 16 rope), a dense layer, MoE with a shared expert and
         * 2 expert groups of which 1 is used */
        mk_shape(p, "deepseek2", 128, 4, 4, 1, 48, 256, 8, 2, 128, 1000,
            2048);
        p->n_lora_q = 96;
        p->n_lora_kv = 64;
        p->mla_v = 32;
        p->n_layer_dense = 1;
        p->n_expert_shared = 1;
        p->n_groups = 2;
        p->n_groups_used = 1;
    } else if (strcmp(preset, "tiny-qwen35moe") == 0) {
        /* Qwen3.5 MoE's layout: gated delta net layers (2 key and 4
         * value heads of 32) with full attention every 4th layer (heads
         * of 64 with an output gate), a gated shared expert in every
         * layer, and the MTP block the engine must skip */
        mk_shape(p, "qwen35moe", 128, 4, 4, 2, 64, 256, 8, 2, 128, 1000,
            2048);
        p->ssm_state = 32;
        p->n_nextn = 1;
    } else if (strcmp(preset, "tiny-gpt-oss") == 0) {
        /* gpt-oss's: sinks, biases, a 64-token window on every other
         * layer, YaRN over a 512-token original context */
        mk_shape(p, "gpt-oss", 128, 4, 4, 2, 32, 128, 8, 2, 128, 1000,
            2048);
        p->n_swa = 64;
        p->yarn_factor = 4.0f;
        p->yarn_orig_ctx = 512;
    } else {
        llm_err(err, errlen, "unknown preset '%s'", preset);
        return -EINVAL;
    }
    snprintf(p->name, sizeof(p->name), "synthetic-%s", preset);
    return llm_mkmodel_arch_defaults(p, err, errlen);
}

int
llm_mkmodel_check(const llm_mkmodel_params_t *p, char *err, size_t errlen)
{
    const llm_type_info_t *ti = llm_type_info(p->type);
    int moe_arch = mk_is_moe_arch(p->arch);

    if (strcmp(p->arch, "llama") != 0 && strcmp(p->arch, "qwen2") != 0
        && strcmp(p->arch, "qwen3") != 0 && !moe_arch)
    {
        llm_err(err, errlen, "unknown architecture '%s' (expected llama, "
            "qwen2, qwen3, qwen3moe, minimax-m2, glm4moe, gpt-oss, "
            "deepseek2 or qwen35moe)", p->arch);
        return -EINVAL;
    }
    if (p->n_layer_dense >= p->n_layer && p->n_layer_dense > 0) {
        llm_err(err, errlen, "dense layers (%u) must be fewer than layers "
            "(%u)", p->n_layer_dense, p->n_layer);
        return -EINVAL;
    }
    if (p->n_embd == 0 || p->n_layer == 0 || p->n_head == 0
        || p->n_head_kv == 0 || p->head_dim == 0 || p->n_ctx == 0)
    {
        llm_err(err, errlen, "embd, layers, heads, heads-kv, head-dim and ctx "
            "must all be > 0");
        return -EINVAL;
    }
    if (p->n_head % p->n_head_kv != 0) {
        llm_err(err, errlen, "heads (%u) must be a multiple of heads-kv (%u)",
            p->n_head, p->n_head_kv);
        return -EINVAL;
    }
    if (p->head_dim % 2 != 0 || p->rope_dim == 0 || p->rope_dim % 2 != 0
        || p->rope_dim > p->head_dim)
    {
        llm_err(err, errlen, "head-dim (%u) and rope-dim (%u) must be even, "
            "0 < rope-dim <= head-dim", p->head_dim, p->rope_dim);
        return -EINVAL;
    }
    if ((strcmp(p->arch, "qwen2") == 0 || strcmp(p->arch, "qwen3") == 0)
        && p->n_expert != 0)
    {
        llm_err(err, errlen, "%s is dense: --experts must be 0 (use qwen3moe)",
            p->arch);
        return -EINVAL;
    }
    if (p->split_experts && (strcmp(p->arch, "llama") != 0
                             || p->n_expert < 2))
    {
        llm_err(err, errlen, "--split-experts is the old Mixtral layout: "
            "llama with --experts >= 2");
        return -EINVAL;
    }
    if (strcmp(p->arch, "qwen35moe") == 0
        && (p->n_layer < 4 || p->ssm_state == 0 || p->ssm_state % 4 != 0
            || p->ssm_k_heads == 0
            || p->ssm_v_heads % p->ssm_k_heads != 0))
    {
        llm_err(err, errlen, "qwen35moe needs >= 4 layers (every 4th full "
            "attention) and value heads a multiple of the key heads");
        return -EINVAL;
    }
    if (moe_arch && p->n_expert < 2) {
        llm_err(err, errlen, "%s needs --experts >= 2", p->arch);
        return -EINVAL;
    }
    if (p->n_expert > 0) {
        if (p->n_expert_used == 0 || p->n_expert_used > p->n_expert
            || p->n_ff_exp == 0)
        {
            llm_err(err, errlen, "experts-used (%u) must be in 1..experts "
                "(%u) and ff-exp (%u) > 0", p->n_expert_used, p->n_expert,
                p->n_ff_exp);
            return -EINVAL;
        }
    } else if (p->n_ff == 0) {
        llm_err(err, errlen, "a dense model needs --ff > 0");
        return -EINVAL;
    }
    if (p->n_vocab < llm_vocabgen_min_size()) {
        llm_err(err, errlen, "vocab %u is below the minimum %u", p->n_vocab,
            llm_vocabgen_min_size());
        return -EINVAL;
    }
    if (ti == NULL || (p->type != LLM_TYPE_F32 && p->type != LLM_TYPE_F16
                       && p->type != LLM_TYPE_BF16
                       && p->type != LLM_TYPE_Q8_0
                       && p->type != LLM_TYPE_Q4_0))
    {
        llm_err(err, errlen, "--type %s: expected F32, F16, BF16, Q8_0 or "
            "Q4_0 (use llm-quantize for K-quants)", llm_type_name(p->type));
        return -EINVAL;
    }
    return 0;
}

static int
mk_add(mk_list_t *l, uint32_t type, mk_fill_t fill, int64_t ne0, int64_t ne1,
    int64_t ne2, const char *fmt, ...)
{
    mk_tensor_t *t;
    va_list ap;

    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 64;
        mk_tensor_t *n = realloc(l->t, cap * sizeof(*n));
        if (n == NULL) {
            return -ENOMEM;
        }
        l->t = n;
        l->cap = cap;
    }
    t = &l->t[l->n++];
    memset(t, 0, sizeof(*t));
    va_start(ap, fmt);
    vsnprintf(t->name, sizeof(t->name), fmt, ap);
    va_end(ap);
    t->ne[0] = ne0;
    t->ne[1] = ne1 ? ne1 : 1;
    t->ne[2] = ne2 ? ne2 : 1;
    t->ne[3] = 1;
    t->n_dims = ne2 ? 3 : ne1 ? 2 : 1;
    t->type = fill == MK_MATRIX ? type : LLM_TYPE_F32;
    t->fill = fill;
    snprintf(t->seed_name, sizeof(t->seed_name), "%s", t->name);
    /* as llama.cpp's converter: a row that does not fit the block -> F16 */
    if (t->type != LLM_TYPE_F32 && llm_row_bytes(t->type, ne0) == 0) {
        t->type = LLM_TYPE_F16;
    }
    return 0;
}

/*
 * Old Mixtral files: one 2-D tensor per expert, blk.N.ffn_gate.E.weight
 * etc.  Each takes its values from the rows of the merged tensor it
 * corresponds to, so both layouts hold the same model.
 */
static int
mk_split_experts(mk_list_t *l, const llm_mkmodel_params_t *p, uint32_t i)
{
    static const char *parts[3] = { "gate", "up", "down" };
    int64_t E = p->n_embd, FX = p->n_ff_exp;
    int rc = 0;

    for (int k = 0; k < 3; k++) {
        for (uint32_t e = 0; e < p->n_expert; e++) {
            int64_t ne0 = k == 2 ? FX : E, ne1 = k == 2 ? E : FX;
            mk_tensor_t *t;
            rc |= mk_add(l, p->type, MK_MATRIX, ne0, ne1, 0,
                "blk.%u.ffn_%s.%u.weight", i, parts[k], e);
            if (rc != 0) {
                return rc;
            }
            t = &l->t[l->n - 1];
            snprintf(t->seed_name, sizeof(t->seed_name),
                "blk.%u.ffn_%s_exps.weight", i, parts[k]);
            t->row_offset = (int64_t) e * ne1;
        }
    }
    return rc;
}

/* deepseek2's attention (MLA), as the converter writes it with attn_kv_b
 * split into attn_k_b and attn_v_b. */
static int
mk_mla(const llm_mkmodel_params_t *p, mk_list_t *l, uint32_t i)
{
    int64_t E = p->n_embd, H = p->n_head, R = p->n_lora_kv;
    int64_t rope = p->rope_dim, nope = p->head_dim - rope;
    uint32_t ty = p->type;
    int rc = 0;

    rc |= mk_add(l, ty, MK_MATRIX, E, p->n_lora_q, 0,
        "blk.%u.attn_q_a.weight", i);
    rc |= mk_add(l, ty, MK_NORM, p->n_lora_q, 0, 0,
        "blk.%u.attn_q_a_norm.weight", i);
    rc |= mk_add(l, ty, MK_MATRIX, p->n_lora_q, H * p->head_dim, 0,
        "blk.%u.attn_q_b.weight", i);
    rc |= mk_add(l, ty, MK_MATRIX, E, R + rope, 0,
        "blk.%u.attn_kv_a_mqa.weight", i);
    rc |= mk_add(l, ty, MK_NORM, R, 0, 0, "blk.%u.attn_kv_a_norm.weight", i);
    rc |= mk_add(l, ty, MK_MATRIX, nope, R, H, "blk.%u.attn_k_b.weight", i);
    rc |= mk_add(l, ty, MK_MATRIX, R, p->mla_v, H, "blk.%u.attn_v_b.weight",
        i);
    rc |= mk_add(l, ty, MK_MATRIX, H * p->mla_v, E, 0,
        "blk.%u.attn_output.weight", i);
    return rc;
}

/* qwen35moe's gated delta net (linear attention) layer, as the converter
 * writes it; the convolution, ssm_a and the gates stay F32. */
static int
mk_gdn(const llm_mkmodel_params_t *p, mk_list_t *l, uint32_t i)
{
    int64_t E = p->n_embd, S = p->ssm_state, HV = p->ssm_v_heads;
    int64_t CD = 2 * p->ssm_k_heads * S + HV * S;
    uint32_t ty = p->type;
    int rc = 0;

    rc |= mk_add(l, ty, MK_MATRIX, E, CD, 0, "blk.%u.attn_qkv.weight", i);
    rc |= mk_add(l, ty, MK_MATRIX, E, HV * S, 0, "blk.%u.attn_gate.weight",
        i);
    rc |= mk_add(l, LLM_TYPE_F32, MK_MATRIX, 4, CD, 0,
        "blk.%u.ssm_conv1d.weight", i);
    rc |= mk_add(l, ty, MK_BIAS, HV, 0, 0, "blk.%u.ssm_dt.bias", i);
    rc |= mk_add(l, ty, MK_DECAY, HV, 0, 0, "blk.%u.ssm_a", i);
    rc |= mk_add(l, ty, MK_MATRIX, E, HV, 0, "blk.%u.ssm_beta.weight", i);
    rc |= mk_add(l, ty, MK_MATRIX, E, HV, 0, "blk.%u.ssm_alpha.weight", i);
    rc |= mk_add(l, ty, MK_NORM, S, 0, 0, "blk.%u.ssm_norm.weight", i);
    rc |= mk_add(l, ty, MK_MATRIX, HV * S, E, 0, "blk.%u.ssm_out.weight", i);
    return rc;
}

/*
 * One decoder layer's tensors, in the order the converter writes them;
 * dense: the dense FFN of a leading layer of a MoE model (glm4moe).
 */
static int
mk_layer(const llm_mkmodel_params_t *p, mk_list_t *l, uint32_t i, int dense)
{
    int64_t E = p->n_embd, Q = (int64_t) p->n_head * p->head_dim,
            KV = (int64_t) p->n_head_kv * p->head_dim;
    int64_t X = dense ? 0 : p->n_expert, F = p->n_ff, FX = p->n_ff_exp;
    uint32_t ty = p->type;
    int qkv_bias = strcmp(p->arch, "qwen2") == 0
                   || strcmp(p->arch, "glm4moe") == 0
                   || strcmp(p->arch, "gpt-oss") == 0;
    int qk_head = strcmp(p->arch, "qwen3") == 0
                  || strcmp(p->arch, "qwen3moe") == 0
                  || strcmp(p->arch, "glm4moe") == 0
                  || strcmp(p->arch, "qwen35moe") == 0;
    int minimax = strcmp(p->arch, "minimax-m2") == 0;
    int glm = strcmp(p->arch, "glm4moe") == 0;
    int oss = strcmp(p->arch, "gpt-oss") == 0;
    int ds = strcmp(p->arch, "deepseek2") == 0;
    int q35 = strcmp(p->arch, "qwen35moe") == 0;
    int rc = 0;

    rc |= mk_add(l, ty, MK_NORM, E, 0, 0, "blk.%u.attn_norm.weight", i);
    if (ds) {
        rc |= mk_mla(p, l, i);
    } else if (q35 && i < p->n_layer && (i + 1) % 4 != 0) {
        rc |= mk_gdn(p, l, i);
    } else {
    /* qwen35moe: each head's query and output gate */
    rc |= mk_add(l, ty, MK_MATRIX, E, q35 ? 2 * Q : Q, 0,
        "blk.%u.attn_q.weight", i);
    if (oss) {
        rc |= mk_add(l, ty, MK_BIAS, Q, 0, 0, "blk.%u.attn_q.bias", i);
    }
    rc |= mk_add(l, ty, MK_MATRIX, E, KV, 0, "blk.%u.attn_k.weight", i);
    if (oss) {
        rc |= mk_add(l, ty, MK_BIAS, KV, 0, 0, "blk.%u.attn_k.bias", i);
    }
    rc |= mk_add(l, ty, MK_MATRIX, E, KV, 0, "blk.%u.attn_v.weight", i);
    if (oss) {
        rc |= mk_add(l, ty, MK_BIAS, KV, 0, 0, "blk.%u.attn_v.bias", i);
    }
    if (qkv_bias && !oss) {
        rc |= mk_add(l, ty, MK_BIAS, Q, 0, 0, "blk.%u.attn_q.bias", i);
        rc |= mk_add(l, ty, MK_BIAS, KV, 0, 0, "blk.%u.attn_k.bias", i);
        rc |= mk_add(l, ty, MK_BIAS, KV, 0, 0, "blk.%u.attn_v.bias", i);
    }
    if (qk_head) {
        rc |= mk_add(l, ty, MK_NORM, p->head_dim, 0, 0,
            "blk.%u.attn_q_norm.weight", i);
        rc |= mk_add(l, ty, MK_NORM, p->head_dim, 0, 0,
            "blk.%u.attn_k_norm.weight", i);
    }
    if (minimax) {
        rc |= mk_add(l, ty, MK_NORM, Q, 0, 0, "blk.%u.attn_q_norm.weight",
            i);
        rc |= mk_add(l, ty, MK_NORM, KV, 0, 0, "blk.%u.attn_k_norm.weight",
            i);
    }
    rc |= mk_add(l, ty, MK_MATRIX, Q, E, 0, "blk.%u.attn_output.weight", i);
    }
    if (oss) {
        rc |= mk_add(l, ty, MK_BIAS, E, 0, 0, "blk.%u.attn_output.bias", i);
        /* one sink logit per head: norm-filled, about 1 */
        rc |= mk_add(l, ty, MK_NORM, p->n_head, 0, 0,
            "blk.%u.attn_sinks.weight", i);
    }
    rc |= mk_add(l, ty, MK_NORM, E, 0, 0, glm || oss || q35
        ? "blk.%u.post_attention_norm.weight" : "blk.%u.ffn_norm.weight", i);
    if (X == 0) {
        rc |= mk_add(l, ty, MK_MATRIX, E, F, 0, "blk.%u.ffn_gate.weight", i);
        rc |= mk_add(l, ty, MK_MATRIX, E, F, 0, "blk.%u.ffn_up.weight", i);
        rc |= mk_add(l, ty, MK_MATRIX, F, E, 0, "blk.%u.ffn_down.weight", i);
        return rc;
    }
    /* the router stays F32, as the converter keeps it */
    rc |= mk_add(l, LLM_TYPE_F32, MK_MATRIX, E, X, 0,
        "blk.%u.ffn_gate_inp.weight", i);
    if (oss) {
        rc |= mk_add(l, ty, MK_BIAS, X, 0, 0, "blk.%u.ffn_gate_inp.bias", i);
    }
    if (minimax || glm || ds) {
        rc |= mk_add(l, ty, MK_BIAS, X, 0, 0, "blk.%u.exp_probs_b.bias", i);
    }
    if (p->split_experts) {
        return rc | mk_split_experts(l, p, i);
    }
    rc |= mk_add(l, ty, MK_MATRIX, E, FX, X, "blk.%u.ffn_gate_exps.weight",
        i);
    if (oss) {
        rc |= mk_add(l, ty, MK_BIAS, FX, X, 0, "blk.%u.ffn_gate_exps.bias",
            i);
    }
    rc |= mk_add(l, ty, MK_MATRIX, E, FX, X, "blk.%u.ffn_up_exps.weight", i);
    if (oss) {
        rc |= mk_add(l, ty, MK_BIAS, FX, X, 0, "blk.%u.ffn_up_exps.bias", i);
    }
    rc |= mk_add(l, ty, MK_MATRIX, FX, E, X, "blk.%u.ffn_down_exps.weight",
        i);
    if (oss) {
        rc |= mk_add(l, ty, MK_BIAS, E, X, 0, "blk.%u.ffn_down_exps.bias",
            i);
    }
    if (p->n_expert_shared > 0) {
        int64_t FS = FX * p->n_expert_shared;

        if (q35) {
            /* the shared expert's gate: one F32 row, [n_embd, 1] */
            rc |= mk_add(l, LLM_TYPE_F32, MK_MATRIX, E, 1, 0,
                "blk.%u.ffn_gate_inp_shexp.weight", i);
        }

        rc |= mk_add(l, ty, MK_MATRIX, E, FS, 0,
            "blk.%u.ffn_gate_shexp.weight", i);
        rc |= mk_add(l, ty, MK_MATRIX, E, FS, 0,
            "blk.%u.ffn_up_shexp.weight", i);
        rc |= mk_add(l, ty, MK_MATRIX, FS, E, 0,
            "blk.%u.ffn_down_shexp.weight", i);
    }
    return rc;
}

/* The tensor list of p, in the order the converter writes them. */
static int
mk_tensors(const llm_mkmodel_params_t *p, mk_list_t *l)
{
    int64_t E = p->n_embd, V = p->n_vocab;
    uint32_t ty = p->type, i;
    int rc = 0;

    rc |= mk_add(l, ty, MK_MATRIX, E, V, 0, "token_embd.weight");
    for (i = 0; i < p->n_layer && rc == 0; i++) {
        rc |= mk_layer(p, l, i, p->n_expert == 0 || i < p->n_layer_dense);
    }
    /* NextN (MTP) blocks: a layer and the draft head, as GLM-4.5 ships */
    for (; i < p->n_layer + p->n_nextn && rc == 0; i++) {
        rc |= mk_layer(p, l, i, 0);
        rc |= mk_add(l, ty, MK_MATRIX, 2 * E, E, 0,
            "blk.%u.nextn.eh_proj.weight", i);
        rc |= mk_add(l, ty, MK_MATRIX, E, V, 0,
            "blk.%u.nextn.embed_tokens.weight", i);
        rc |= mk_add(l, ty, MK_NORM, E, 0, 0, "blk.%u.nextn.enorm.weight",
            i);
        rc |= mk_add(l, ty, MK_NORM, E, 0, 0, "blk.%u.nextn.hnorm.weight",
            i);
        rc |= mk_add(l, ty, MK_MATRIX, E, V, 0,
            "blk.%u.nextn.shared_head_head.weight", i);
        rc |= mk_add(l, ty, MK_NORM, E, 0, 0,
            "blk.%u.nextn.shared_head_norm.weight", i);
    }
    if (p->rope_freqs > 0.0f && rc == 0) {
        /* Llama 3.1's per-pair frequency divisors, all one value */
        rc |= mk_add(l, ty, MK_CONST, p->rope_dim / 2, 0, 0,
                     "rope_freqs.weight");
        l->t[l->n - 1].value = p->rope_freqs;
    }
    rc |= mk_add(l, ty, MK_NORM, E, 0, 0, "output_norm.weight");
    if (!p->tied) {
        rc |= mk_add(l, ty, MK_MATRIX, E, V, 0, "output.weight");
    }
    return rc ? -ENOMEM : 0;
}

/* ---- random numbers ---- */

static uint64_t
mk_splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Approximately N(0, 1): four 16-bit uniforms summed (Irwin-Hall). */
static float
mk_normal(uint64_t *s)
{
    uint64_t r = mk_splitmix(s);
    uint32_t sum = (uint32_t) (r & 0xffff) + (uint32_t) ((r >> 16) & 0xffff)
                   + (uint32_t) ((r >> 32) & 0xffff) + (uint32_t) (r >> 48);
    /* mean 4 * 32767.5, variance 4 * (65536^2 - 1) / 12 */
    return ((float) sum - 131070.0f) * (1.0f / 37837.23f);
}

static uint64_t
mk_name_hash(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    while (*s) {
        h = (h ^ (unsigned char) *s++) * 1099511628211ull;
    }
    return h;
}

/* ---- slab production ---- */

typedef struct {
    const mk_tensor_t  *t;
    uint64_t            tseed;
    int64_t             row0, nrows;
    size_t              row_bytes;
    uint8_t            *out;
    float             **scratch;     /* one row of floats per thread */
    uint32_t            next;        /* chunk counter, atomic */
    const llm_mk_script_t *script;   /* scripted rows, or NULL */
} mk_job_t;

static void
mk_fill_row(const mk_tensor_t *t, uint64_t tseed, int64_t row, float *x)
{
    uint64_t s = tseed ^ ((uint64_t) row * 0xd1b54a32d192ed03ull);
    int64_t n = t->ne[0];
    float scale;

    mk_splitmix(&s);
    switch (t->fill) {
    case MK_MATRIX:
        scale = 1.0f / sqrtf((float) n);
        for (int64_t i = 0; i < n; i++) {
            x[i] = scale * mk_normal(&s);
        }
        break;
    case MK_NORM:
        for (int64_t i = 0; i < n; i++) {
            x[i] = 1.0f + 0.1f * mk_normal(&s);
        }
        break;
    case MK_BIAS:
        for (int64_t i = 0; i < n; i++) {
            x[i] = 0.05f * mk_normal(&s);
        }
        break;
    case MK_DECAY:
        for (int64_t i = 0; i < n; i++) {
            x[i] = -1.0f - 0.1f * mk_normal(&s);
        }
        break;
    case MK_CONST:
        for (int64_t i = 0; i < n; i++) {
            x[i] = t->value;
        }
        break;
    }
}

typedef struct {
    void      (*fn)(void *, uint32_t);
    void       *arg;
    uint32_t    ith;
} mk_thread_t;

static void *
mk_thread_main(void *a)
{
    mk_thread_t *t = a;
    t->fn(t->arg, t->ith);
    return NULL;
}

void
llm_mk_parallel(uint32_t nth, void (*fn)(void *arg, uint32_t ith),
    void *arg)
{
    pthread_t tid[64];
    mk_thread_t ts[64];
    uint32_t started = 0;

    if (nth > 64) {
        nth = 64;
    }
    for (uint32_t i = 1; i < nth; i++) {
        ts[i].fn = fn;
        ts[i].arg = arg;
        ts[i].ith = i;
        if (pthread_create(&tid[i], NULL, mk_thread_main, &ts[i]) != 0) {
            break;          /* fewer threads: the counter still splits */
        }
        started = i;
    }
    fn(arg, 0);
    for (uint32_t i = 1; i <= started; i++) {
        pthread_join(tid[i], NULL);
    }
}

static void
mk_slab_task(void *arg, uint32_t ith)
{
    mk_job_t *j = arg;
    int64_t nchunks = (j->nrows + MK_CHUNK_ROWS - 1) / MK_CHUNK_ROWS;
    float *x = j->scratch[ith];
    uint32_t c;

    while ((c = __atomic_fetch_add(&j->next, 1, __ATOMIC_RELAXED))
           < nchunks)
    {
        int64_t r0 = (int64_t) c * MK_CHUNK_ROWS;
        int64_t r1 = r0 + MK_CHUNK_ROWS < j->nrows ? r0 + MK_CHUNK_ROWS
                                                  : j->nrows;
        for (int64_t r = r0; r < r1; r++) {
            int64_t row = j->t->row_offset + j->row0 + r;

            if (j->script == NULL
                || !llm_mk_script_row(j->script, j->t->name, row,
                                      j->t->ne[0], x))
            {
                mk_fill_row(j->t, j->tseed, row, x);
            }
            llm_quantize_row(j->t->type, x, j->out + r * j->row_bytes,
                j->t->ne[0]);
        }
    }
}

/* ---- metadata ---- */

static void
mk_key(char *buf, size_t n, const char *arch, const char *suffix)
{
    snprintf(buf, n, "%s.%s", arch, suffix);
}

/* The keys only glm4moe and gpt-oss files have, and a linear RoPE
 * scaling when asked for. */
static void
mk_write_meta_arch(llm_gguf_writer_t *w, const llm_mkmodel_params_t *p)
{
    const char *a = p->arch;
    char k[128];

    if (strcmp(a, "glm4moe") == 0) {
        mk_key(k, sizeof(k), a, "leading_dense_block_count");
        llm_gguf_w_u32(w, k, p->n_layer_dense);
        mk_key(k, sizeof(k), a, "expert_shared_count");
        llm_gguf_w_u32(w, k, p->n_expert_shared);
        mk_key(k, sizeof(k), a, "expert_weights_scale");
        llm_gguf_w_f32(w, k, 2.5f);
        mk_key(k, sizeof(k), a, "expert_group_count");
        llm_gguf_w_u32(w, k, 1);
        mk_key(k, sizeof(k), a, "expert_group_used_count");
        llm_gguf_w_u32(w, k, 1);
        mk_key(k, sizeof(k), a, "nextn_predict_layers");
        llm_gguf_w_u32(w, k, p->n_nextn);
    }
    if (strcmp(a, "deepseek2") == 0) {
        mk_key(k, sizeof(k), a, "attention.q_lora_rank");
        llm_gguf_w_u32(w, k, p->n_lora_q);
        mk_key(k, sizeof(k), a, "attention.kv_lora_rank");
        llm_gguf_w_u32(w, k, p->n_lora_kv);
        mk_key(k, sizeof(k), a, "attention.key_length_mla");
        llm_gguf_w_u32(w, k, p->head_dim);
        mk_key(k, sizeof(k), a, "attention.value_length_mla");
        llm_gguf_w_u32(w, k, p->mla_v);
        mk_key(k, sizeof(k), a, "leading_dense_block_count");
        llm_gguf_w_u32(w, k, p->n_layer_dense);
        mk_key(k, sizeof(k), a, "expert_shared_count");
        llm_gguf_w_u32(w, k, p->n_expert_shared);
        mk_key(k, sizeof(k), a, "expert_weights_scale");
        llm_gguf_w_f32(w, k, 2.5f);
        mk_key(k, sizeof(k), a, "expert_group_count");
        llm_gguf_w_u32(w, k, p->n_groups ? p->n_groups : 1);
        mk_key(k, sizeof(k), a, "expert_group_used_count");
        llm_gguf_w_u32(w, k, p->n_groups_used ? p->n_groups_used : 1);
    }
    if (strcmp(a, "qwen35moe") == 0) {
        static const int32_t sect[4] = { 11, 11, 10, 0 };

        mk_key(k, sizeof(k), a, "expert_shared_feed_forward_length");
        llm_gguf_w_u32(w, k, p->n_ff_exp);
        mk_key(k, sizeof(k), a, "rope.dimension_sections");
        llm_gguf_w_arr(w, k, LLM_GGUF_INT32, sect, 4);
        mk_key(k, sizeof(k), a, "nextn_predict_layers");
        llm_gguf_w_u32(w, k, p->n_nextn);
        mk_key(k, sizeof(k), a, "ssm.conv_kernel");
        llm_gguf_w_u32(w, k, 4);
        mk_key(k, sizeof(k), a, "ssm.state_size");
        llm_gguf_w_u32(w, k, p->ssm_state);
        mk_key(k, sizeof(k), a, "ssm.group_count");
        llm_gguf_w_u32(w, k, p->ssm_k_heads);
        mk_key(k, sizeof(k), a, "ssm.time_step_rank");
        llm_gguf_w_u32(w, k, p->ssm_v_heads);
        mk_key(k, sizeof(k), a, "ssm.inner_size");
        llm_gguf_w_u32(w, k, p->ssm_v_heads * p->ssm_state);
        mk_key(k, sizeof(k), a, "full_attention_interval");
        llm_gguf_w_u32(w, k, 4);
    }
    if (p->rope_linear > 0.0f && strcmp(a, "gpt-oss") != 0) {
        mk_key(k, sizeof(k), a, "rope.scaling.type");
        llm_gguf_w_str(w, k, "linear", 6);
        mk_key(k, sizeof(k), a, "rope.scaling.factor");
        llm_gguf_w_f32(w, k, p->rope_linear);
    }
    if (strcmp(a, "gpt-oss") == 0) {
        mk_key(k, sizeof(k), a, "attention.sliding_window");
        llm_gguf_w_u32(w, k, p->n_swa);
        mk_key(k, sizeof(k), a, "rope.scaling.type");
        llm_gguf_w_str(w, k, "yarn", 4);
        mk_key(k, sizeof(k), a, "rope.scaling.factor");
        llm_gguf_w_f32(w, k, p->yarn_factor);
        mk_key(k, sizeof(k), a, "rope.scaling.original_context_length");
        llm_gguf_w_u32(w, k, p->yarn_orig_ctx);
    }
}

/*
 * The key/values of p's architecture as llama.cpp's converter writes them,
 * the tokenizer keys from v and the chat template.  Writer errors are
 * sticky and surface at llm_gguf_writer_close().
 */
static int
mk_write_meta(llm_gguf_writer_t *w, const llm_mkmodel_params_t *p,
    const llm_vocabgen_t *v)
{
    const char *a = p->arch;
    const char *tmpl = p->chat_template ? p->chat_template
                                        : llm_vocabgen_chat_template();
    char k[128];
    uint32_t ff = p->n_ff;

    if (strcmp(a, "llama") == 0 && p->n_expert > 0) {
        ff = p->n_ff_exp;       /* Mixtral: feed_forward_length = expert */
    }
    llm_gguf_w_str(w, "general.architecture", a, strlen(a));
    llm_gguf_w_str(w, "general.name", p->name, strlen(p->name));
    llm_gguf_w_u32(w, "general.file_type", llm_mkmodel_file_type(p->type));
    llm_gguf_w_u32(w, "general.quantization_version", 2);
    llm_gguf_w_u32(w, "general.alignment", LLM_GGUF_ALIGNMENT);
    mk_key(k, sizeof(k), a, "vocab_size");
    llm_gguf_w_u32(w, k, p->n_vocab);
    mk_key(k, sizeof(k), a, "context_length");
    llm_gguf_w_u32(w, k, p->n_ctx);
    mk_key(k, sizeof(k), a, "embedding_length");
    llm_gguf_w_u32(w, k, p->n_embd);
    mk_key(k, sizeof(k), a, "block_count");
    llm_gguf_w_u32(w, k, p->n_layer + p->n_nextn);
    mk_key(k, sizeof(k), a, "feed_forward_length");
    llm_gguf_w_u32(w, k, ff);
    if (mk_is_moe_arch(a)) {
        mk_key(k, sizeof(k), a, "expert_feed_forward_length");
        llm_gguf_w_u32(w, k, p->n_ff_exp);
    }
    mk_key(k, sizeof(k), a, "attention.head_count");
    llm_gguf_w_u32(w, k, p->n_head);
    mk_key(k, sizeof(k), a, "attention.head_count_kv");
    llm_gguf_w_u32(w, k, p->n_head_kv);
    mk_key(k, sizeof(k), a, "attention.key_length");
    llm_gguf_w_u32(w, k, p->n_lora_kv ? p->n_lora_kv + p->rope_dim
                                      : p->head_dim);
    mk_key(k, sizeof(k), a, "attention.value_length");
    llm_gguf_w_u32(w, k, p->n_lora_kv ? p->n_lora_kv : p->head_dim);
    mk_key(k, sizeof(k), a, "attention.layer_norm_rms_epsilon");
    llm_gguf_w_f32(w, k, p->eps);
    mk_key(k, sizeof(k), a, "rope.dimension_count");
    llm_gguf_w_u32(w, k, p->rope_dim);
    mk_key(k, sizeof(k), a, "rope.freq_base");
    llm_gguf_w_f32(w, k, p->rope_base);
    if (p->n_expert > 0) {
        mk_key(k, sizeof(k), a, "expert_count");
        llm_gguf_w_u32(w, k, p->n_expert);
        mk_key(k, sizeof(k), a, "expert_used_count");
        llm_gguf_w_u32(w, k, p->n_expert_used);
    }
    if (p->pooling >= 0) {
        mk_key(k, sizeof(k), a, "pooling_type");
        llm_gguf_w_u32(w, k, (uint32_t) p->pooling);
    }
    if (strcmp(a, "minimax-m2") == 0 || strcmp(a, "glm4moe") == 0
        || strcmp(a, "deepseek2") == 0)
    {
        mk_key(k, sizeof(k), a, "expert_gating_func");
        llm_gguf_w_u32(w, k, 2);            /* sigmoid */
        mk_key(k, sizeof(k), a, "expert_weights_norm");
        llm_gguf_w_bool(w, k, 1);
    }
    mk_write_meta_arch(w, p);

    llm_gguf_w_str(w, "tokenizer.ggml.model", "gpt2", 4);
    llm_gguf_w_str(w, "tokenizer.ggml.pre", p->pre, strlen(p->pre));
    llm_gguf_w_str_arr(w, "tokenizer.ggml.tokens",
        (const char *const *) v->tokens, NULL, v->n_tokens);
    llm_gguf_w_arr(w, "tokenizer.ggml.token_type", LLM_GGUF_INT32, v->types,
        v->n_tokens);
    llm_gguf_w_str_arr(w, "tokenizer.ggml.merges",
        (const char *const *) v->merges, NULL, v->n_merges);
    llm_gguf_w_u32(w, "tokenizer.ggml.bos_token_id", v->bos_id);
    llm_gguf_w_u32(w, "tokenizer.ggml.eos_token_id", v->eos_id);
    llm_gguf_w_u32(w, "tokenizer.ggml.eot_token_id", v->eot_id);
    llm_gguf_w_u32(w, "tokenizer.ggml.padding_token_id", v->pad_id);
    llm_gguf_w_bool(w, "tokenizer.ggml.add_bos_token", 0);
    return llm_gguf_w_str(w, "tokenizer.chat_template", tmpl, strlen(tmpl));
}

/*
 * The special tokens of the chat format a template writes, which the real
 * models' vocabularies have and the generated one lacks: gpt-oss's
 * harmony markup (the template knows <|channel|>), control tokens as in
 * o200k_harmony.  NULL-terminated; NULL for other templates.
 */
static const char *const *
mk_template_specials(const char *tmpl)
{
    static const char *const harmony[] = {
        "<|start|>", "<|end|>", "<|message|>", "<|channel|>",
        "<|constrain|>", "<|return|>", "<|call|>", NULL
    };

    return tmpl != NULL && strstr(tmpl, "<|channel|>") ? harmony : NULL;
}

/* Append the control tokens sp to v (its ids after the generated ones).
 * 0 or -ENOMEM. */
static int
mk_vocab_append(llm_vocabgen_t *v, const char *const *sp)
{
    uint32_t  n = 0;
    char    **t;
    int32_t  *ty;

    while (sp[n] != NULL) {
        n++;
    }
    t = realloc(v->tokens, (v->n_tokens + n) * sizeof(*t));
    if (t == NULL) {
        return -ENOMEM;
    }
    v->tokens = t;
    ty = realloc(v->types, (v->n_tokens + n) * sizeof(*ty));
    if (ty == NULL) {
        return -ENOMEM;
    }
    v->types = ty;
    for (uint32_t i = 0; i < n; i++) {
        v->tokens[v->n_tokens] = strdup(sp[i]);
        if (v->tokens[v->n_tokens] == NULL) {
            return -ENOMEM;
        }
        v->types[v->n_tokens++] = LLM_VG_CONTROL;
    }
    return 0;
}

/*
 * Validate p, build the vocabulary and tensor list, write the header, then
 * every tensor slab by slab (threads fill and convert rows, this thread
 * appends).  One cleanup path frees everything; the writer removes a
 * failed file.
 */
int
llm_mkmodel_write(const llm_mkmodel_params_t *p, const char *path, FILE *log,
    char *err, size_t errlen)
{
    llm_gguf_writer_t *w = NULL;
    llm_mk_script_t *script = NULL;
    llm_vocabgen_t v;
    mk_list_t l = { 0 };
    mk_job_t job;
    uint8_t *slab = NULL;
    float **scratch = NULL;
    uint32_t nth = p->n_threads ? p->n_threads : 1;
    const char *const *sp;
    uint32_t n_sp;
    int64_t max_ne0 = 0;
    int rc;

    memset(&v, 0, sizeof(v));
    rc = llm_mkmodel_check(p, err, errlen);
    if (rc != 0) {
        return rc;
    }
    llm_simd_init();
    /* the chat format's own special tokens take the last ids */
    sp = mk_template_specials(p->chat_template);
    for (n_sp = 0; sp != NULL && sp[n_sp] != NULL; n_sp++) {
        /* count */
    }
    if (p->n_vocab < llm_vocabgen_min_size() + n_sp) {
        llm_err(err, errlen, "vocab %u is below the minimum %u with the "
            "template's %u special tokens", p->n_vocab,
            llm_vocabgen_min_size() + n_sp, n_sp);
        return -EINVAL;
    }
    rc = llm_vocabgen_build(&v, p->n_vocab - n_sp, p->pre, err, errlen);
    if (rc != 0) {
        return rc;
    }
    if (sp != NULL && mk_vocab_append(&v, sp) != 0) {
        rc = -ENOMEM;
        llm_err(err, errlen, "out of memory");
        goto done;
    }
    if (p->script != NULL) {
        rc = llm_mk_script_create(&script, p, err, errlen);
        if (rc != 0) {
            goto done;
        }
    }
    rc = mk_tensors(p, &l);
    if (rc != 0) {
        llm_err(err, errlen, "out of memory");
        goto done;
    }
    if (nth > 64) {
        nth = 64;
    }
    for (size_t i = 0; i < l.n; i++) {
        if (l.t[i].ne[0] > max_ne0) {
            max_ne0 = l.t[i].ne[0];
        }
    }
    scratch = calloc(nth, sizeof(float *));
    slab = malloc(MK_SLAB_BYTES + (size_t) max_ne0 * 4);
    if (scratch == NULL || slab == NULL) {
        rc = -ENOMEM;
        llm_err(err, errlen, "out of memory");
        goto done;
    }
    for (uint32_t i = 0; i < nth; i++) {
        scratch[i] = malloc((size_t) max_ne0 * sizeof(float));
        if (scratch[i] == NULL) {
            rc = -ENOMEM;
            llm_err(err, errlen, "out of memory");
            goto done;
        }
    }

    rc = llm_gguf_writer_open(&w, path, err, errlen);
    if (rc != 0) {
        goto done;
    }
    mk_write_meta(w, p, &v);
    for (size_t i = 0; i < l.n; i++) {
        llm_gguf_w_tensor(w, l.t[i].name, l.t[i].n_dims, l.t[i].ne,
            l.t[i].type);
    }
    if (llm_gguf_w_begin_data(w) != 0) {
        goto wfail;
    }

    for (size_t i = 0; i < l.n; i++) {
        const mk_tensor_t *t = &l.t[i];
        int64_t rows = t->ne[1] * t->ne[2] * t->ne[3];
        size_t rb = llm_row_bytes(t->type, t->ne[0]);
        int64_t per = (int64_t) (MK_SLAB_BYTES / rb);

        if (per < 1) {
            per = 1;
        }
        memset(&job, 0, sizeof(job));
        job.t = t;
        job.tseed = p->seed * 0x9e3779b97f4a7c15ull
                    ^ mk_name_hash(t->seed_name);
        job.row_bytes = rb;
        job.out = slab;
        job.scratch = scratch;
        job.script = script;
        for (int64_t r = 0; r < rows; r += per) {
            job.row0 = r;
            job.nrows = rows - r < per ? rows - r : per;
            job.next = 0;
            llm_mk_parallel(nth, mk_slab_task, &job);
            if (llm_gguf_w_data(w, slab, (size_t) job.nrows * rb) != 0) {
                goto wfail;
            }
        }
        if (log != NULL) {
            fprintf(log, "%-32s %-5s [%lld, %lld, %lld] %zu bytes\n",
                t->name, llm_type_name(t->type), (long long) t->ne[0],
                (long long) t->ne[1], (long long) t->ne[2],
                (size_t) rows * rb);
        }
    }

wfail:
    rc = llm_gguf_writer_close(w, err, errlen);
    w = NULL;

done:
    if (scratch != NULL) {
        for (uint32_t i = 0; i < nth; i++) {
            free(scratch[i]);
        }
    }
    free(scratch);
    free(slab);
    free(l.t);
    llm_mk_script_free(script);
    llm_vocabgen_free(&v);
    return rc;
}
