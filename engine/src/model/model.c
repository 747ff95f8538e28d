/*
 * Binding a GGUF file to a model: hyperparameters from the metadata keys
 * llama.cpp's converter writes, weights by tensor name with every shape
 * checked against the hyperparameters.  Weights stay pointers into the
 * mapping; only small 1-D tensors that are not F32 are converted into
 * owned float arrays.
 */

#include <errno.h>
#include <math.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22
#endif

#include "model_impl.h"

typedef struct {
    llm_arch_t   arch;
    const char  *name;
    int          rope_neox;
    int          qkv_bias;         /* qwen2 */
    int          qk_norm;          /* 0 none, 1 per head, 2 whole */
    int          moe;              /* 0 dense only, 1 optional, 2 required */
    llm_gating_t gating;           /* default */
} llm_arch_desc_t;

static const llm_arch_desc_t llm_archs[] = {
    { LLM_ARCH_LLAMA,      "llama",      0, 0, 0, 1, LLM_GATING_SOFTMAX },
    { LLM_ARCH_QWEN2,      "qwen2",      1, 1, 0, 0, LLM_GATING_SOFTMAX },
    { LLM_ARCH_QWEN3,      "qwen3",      1, 0, 1, 0, LLM_GATING_SOFTMAX },
    { LLM_ARCH_QWEN3MOE,   "qwen3moe",   1, 0, 1, 2, LLM_GATING_SOFTMAX },
    { LLM_ARCH_MINIMAX_M2, "minimax-m2", 1, 0, 2, 2, LLM_GATING_SIGMOID },
    { LLM_ARCH_GLM4MOE,    "glm4moe",    1, 1, 1, 2, LLM_GATING_SIGMOID },
    { LLM_ARCH_GPT_OSS,    "gpt-oss",    1, 1, 0, 2, LLM_GATING_SOFTMAX },
    { LLM_ARCH_DEEPSEEK2,  "deepseek2",  0, 0, 0, 2, LLM_GATING_SOFTMAX },
    { LLM_ARCH_QWEN35MOE,  "qwen35moe",  1, 0, 1, 2, LLM_GATING_SOFTMAX },
};

/* llama.cpp's general.file_type values (llama_ftype). */
static const struct {
    uint32_t     ftype;
    const char  *name;
} llm_ftypes[] = {
    { 0, "F32" }, { 1, "F16" }, { 2, "Q4_0" }, { 3, "Q4_1" }, { 7, "Q8_0" },
    { 8, "Q5_0" }, { 9, "Q5_1" }, { 10, "Q2_K" }, { 11, "Q3_K_S" },
    { 12, "Q3_K_M" }, { 13, "Q3_K_L" }, { 14, "Q4_K_S" }, { 15, "Q4_K_M" },
    { 16, "Q5_K_S" }, { 17, "Q5_K_M" }, { 18, "Q6_K" }, { 32, "BF16" },
};

typedef struct {
    llm_model_t          *m;
    const char           *path;
    char                 *err;
    size_t                errlen;
} llm_bind_t;


const char *
llm_arch_name(llm_arch_t a)
{
    size_t  i;

    for (i = 0; i < sizeof(llm_archs) / sizeof(llm_archs[0]); i++) {
        if (llm_archs[i].arch == a) {
            return llm_archs[i].name;
        }
    }
    return "?";
}

static int
llm_bind_fail(llm_bind_t *b, int rc, const char *fmt, ...)
{
    va_list  ap;
    int      n;

    n = snprintf(b->err, b->errlen, "%s: ", b->path);
    if (n < 0 || (size_t) n >= b->errlen) {
        return rc;
    }
    va_start(ap, fmt);
    vsnprintf(b->err + n, b->errlen - n, fmt, ap);
    va_end(ap);
    return rc;
}

static int
llm_model_own(llm_model_t *m, void *p)
{
    void  **n;

    if (p == NULL) {
        return -ENOMEM;
    }
    if (m->n_owned == m->cap_owned) {
        m->cap_owned = m->cap_owned ? m->cap_owned * 2 : 16;
        n = realloc(m->owned, m->cap_owned * sizeof(void *));
        if (n == NULL) {
            free(p);
            return -ENOMEM;
        }
        m->owned = n;
    }
    m->owned[m->n_owned++] = p;
    return 0;
}

/*
 * Read an integer hyperparameter "<arch>.<key>".  Absent: *v = def and 0
 * when def_ok, else a "missing key" error.
 */
static int
llm_hp_u32(llm_bind_t *b, const char *key, uint32_t *v, int def_ok,
    uint32_t def)
{
    char  full[128], e[256];
    int   rc;

    snprintf(full, sizeof(full), "%s.%s", b->m->hp.arch_name, key);
    rc = llm_gguf_get_u32(b->m->gguf, full, v, e, sizeof(e));
    if (rc == -ENOENT && def_ok) {
        *v = def;
        return 0;
    }
    if (rc == -ENOENT) {
        return llm_bind_fail(b, -EINVAL, "missing metadata key '%s'", full);
    }
    if (rc < 0) {
        return llm_bind_fail(b, rc, "metadata key '%s': %s", full, e);
    }
    return 0;
}

static int
llm_hp_f32(llm_bind_t *b, const char *key, float *v, int def_ok, float def)
{
    char  full[128], e[256];
    int   rc;

    snprintf(full, sizeof(full), "%s.%s", b->m->hp.arch_name, key);
    rc = llm_gguf_get_f32(b->m->gguf, full, v, e, sizeof(e));
    if (rc == -ENOENT && def_ok) {
        *v = def;
        return 0;
    }
    if (rc == -ENOENT) {
        return llm_bind_fail(b, -EINVAL, "missing metadata key '%s'", full);
    }
    if (rc < 0) {
        return llm_bind_fail(b, rc, "metadata key '%s': %s", full, e);
    }
    return 0;
}

static int
llm_hp_bool(llm_bind_t *b, const char *key, int *v, int def)
{
    char  full[128], e[256];
    int   rc;

    snprintf(full, sizeof(full), "%s.%s", b->m->hp.arch_name, key);
    rc = llm_gguf_get_bool(b->m->gguf, full, v, e, sizeof(e));
    if (rc == -ENOENT) {
        *v = def;
        return 0;
    }
    if (rc < 0) {
        return llm_bind_fail(b, rc, "metadata key '%s': %s", full, e);
    }
    return 0;
}

/*
 * Read the hyperparameters of b->m (arch already set).  Values the shapes
 * decide (n_vocab) are checked later against the tensors.
 */
/*
 * The MoE keys beside the routed experts: leading dense layers
 * (leading_dense_block_count, with feed_forward_length) and shared
 * experts (expert_shared_count of expert_shared_feed_forward_length each,
 * by default expert_feed_forward_length, as llama.cpp sizes them).
 */
static int
llm_bind_moe_shape(llm_bind_t *b)
{
    llm_hparams_t  *hp = &b->m->hp;
    uint32_t        ff;
    int             rc;

    if ((rc = llm_hp_u32(b, "leading_dense_block_count", &hp->n_layer_dense,
                         1, 0)) < 0
        || (rc = llm_hp_u32(b, "expert_shared_count", &hp->n_expert_shared,
                            1, 0)) < 0
        || (rc = llm_hp_u32(b, "expert_shared_feed_forward_length", &ff, 1,
                            hp->n_ff_exp)) < 0)
    {
        return rc;
    }
    if (hp->arch == LLM_ARCH_QWEN35MOE && hp->n_expert_shared == 0) {
        hp->n_expert_shared = 1;    /* one gated shared expert, no key */
    }
    if (hp->n_layer_dense > hp->n_layer) {
        return llm_bind_fail(b, -EINVAL, "%s.leading_dense_block_count is "
                             "%u, expected <= %u layers", hp->arch_name,
                             hp->n_layer_dense, hp->n_layer);
    }
    if (hp->n_layer_dense > 0 && hp->n_ff == 0) {
        return llm_bind_fail(b, -EINVAL, "missing metadata key "
                             "'%s.feed_forward_length' (the %u leading dense "
                             "layers)", hp->arch_name, hp->n_layer_dense);
    }
    if (hp->n_expert_shared > 64 || ff > (1u << 20)) {
        return llm_bind_fail(b, -EINVAL, "%s.expert_shared_count %u of "
                             "width %u, expected <= 64 of <= 2^20",
                             hp->arch_name, hp->n_expert_shared, ff);
    }
    hp->n_ff_shexp = hp->n_expert_shared * ff;

    /* group-limited routing (DeepSeek-V3): the best groups first */
    if ((rc = llm_hp_u32(b, "expert_group_count", &hp->n_expert_groups, 1,
                         1)) < 0
        || (rc = llm_hp_u32(b, "expert_group_used_count", &hp->n_group_used,
                            1, hp->n_expert_groups)) < 0)
    {
        return rc;
    }
    if (hp->n_expert_groups == 0 || hp->n_expert_groups > 64
        || hp->n_expert % hp->n_expert_groups != 0 || hp->n_group_used == 0
        || hp->n_group_used > hp->n_expert_groups
        || (hp->n_expert_groups > 1
            && hp->n_expert_used > hp->n_group_used
                                   * (hp->n_expert / hp->n_expert_groups)))
    {
        return llm_bind_fail(b, -EINVAL, "%s.expert_group_count %u, "
                             "expert_group_used_count %u: expected groups "
                             "dividing the %u experts, 1..64 of them, and "
                             "enough used for %u experts", hp->arch_name,
                             hp->n_expert_groups, hp->n_group_used,
                             hp->n_expert, hp->n_expert_used);
    }
    return 0;
}

/*
 * deepseek2's MLA keys: the latent ranks, the per-head sizes
 * (key_length_mla, value_length_mla), and the cache's shape they make
 * (key_length = kv_lora + rope, value_length = kv_lora, one KV head);
 * the rotated dims come after the latent in q and k.
 */
static int
llm_bind_mla_shape(llm_bind_t *b)
{
    llm_hparams_t  *hp = &b->m->hp;
    int             rc;

    if ((rc = llm_hp_u32(b, "attention.q_lora_rank", &hp->n_lora_q, 1, 0))
        < 0
        || (rc = llm_hp_u32(b, "attention.kv_lora_rank", &hp->n_lora_kv, 0,
                            0)) < 0
        || (rc = llm_hp_u32(b, "attention.key_length_mla", &hp->mla_k, 0,
                            0)) < 0
        || (rc = llm_hp_u32(b, "attention.value_length_mla", &hp->mla_v, 0,
                            0)) < 0)
    {
        return rc;
    }
    if (hp->n_lora_kv == 0 || hp->n_lora_kv > 8192 || hp->n_head_kv != 1
        || hp->head_dim != hp->n_lora_kv + hp->rope_dims
        || hp->head_dim_v != hp->n_lora_kv || hp->mla_k <= hp->rope_dims
        || hp->mla_k > 1024 || hp->mla_v == 0 || hp->mla_v > 1024)
    {
        return llm_bind_fail(b, -EINVAL, "%s: kv_lora_rank %u, rope %u, "
                             "key_length %u / value_length %u, head_count_kv "
                             "%u, key_length_mla %u, value_length_mla %u: "
                             "expected the latent cache's shape (key_length "
                             "= kv_lora_rank + rope, value_length = "
                             "kv_lora_rank, one KV head); files written "
                             "before the converter split attn_kv_b are not "
                             "supported", hp->arch_name, hp->n_lora_kv,
                             hp->rope_dims, hp->head_dim, hp->head_dim_v,
                             hp->n_head_kv, hp->mla_k, hp->mla_v);
    }
    hp->rope_off = hp->n_lora_kv;
    /* q.k over the per-head dims the model was trained with */
    hp->attn_scale = 1.0f / sqrtf((float) hp->mla_k);
    return 0;
}

/*
 * qwen35moe's gated delta net keys (ssm.*: conv_kernel, state_size = the
 * key and value dims of a head, group_count = key heads, time_step_rank
 * = value heads, inner_size = their values) and which layers are full
 * attention (full_attention_interval, default 4: layers 3, 7, ...); the
 * full attention layers' attn_q holds an output gate beside each query.
 */
static int
llm_bind_ssm_shape(llm_bind_t *b)
{
    llm_hparams_t  *hp = &b->m->hp;
    uint32_t        l;
    int             rc;

    if ((rc = llm_hp_u32(b, "ssm.conv_kernel", &hp->ssm_d_conv, 0, 0)) < 0
        || (rc = llm_hp_u32(b, "ssm.state_size", &hp->ssm_state, 0, 0)) < 0
        || (rc = llm_hp_u32(b, "ssm.group_count", &hp->ssm_k_heads, 0, 0))
           < 0
        || (rc = llm_hp_u32(b, "ssm.time_step_rank", &hp->ssm_v_heads, 0,
                            0)) < 0
        || (rc = llm_hp_u32(b, "ssm.inner_size", &hp->ssm_inner, 0, 0)) < 0
        || (rc = llm_hp_u32(b, "full_attention_interval",
                            &hp->full_attn_interval, 1, 4)) < 0)
    {
        return rc;
    }
    if (hp->ssm_d_conv < 2 || hp->ssm_d_conv > 16 || hp->ssm_state == 0
        || hp->ssm_state > 512 || hp->ssm_state % 4 != 0
        || hp->ssm_k_heads == 0 || hp->ssm_v_heads == 0
        || hp->ssm_v_heads > 1024 || hp->ssm_v_heads % hp->ssm_k_heads != 0
        || hp->ssm_inner != hp->ssm_v_heads * hp->ssm_state
        || hp->full_attn_interval == 0)
    {
        return llm_bind_fail(b, -EINVAL, "%s.ssm: conv_kernel %u, "
                             "state_size %u, group_count %u, time_step_rank "
                             "%u, inner_size %u, full_attention_interval %u: "
                             "expected a kernel of 2..16, heads of a "
                             "multiple of 4 up to 512 dims, value heads a "
                             "multiple of the key heads and inner_size = "
                             "value heads x state_size", hp->arch_name,
                             hp->ssm_d_conv, hp->ssm_state, hp->ssm_k_heads,
                             hp->ssm_v_heads, hp->ssm_inner,
                             hp->full_attn_interval);
    }
    hp->n_layer_rec = 0;
    for (l = 0; l < hp->n_layer; l++) {
        hp->n_layer_rec += (l + 1) % hp->full_attn_interval != 0;
    }
    if (hp->n_layer_rec == hp->n_layer) {
        return llm_bind_fail(b, -EINVAL, "%s.full_attention_interval %u "
                             "leaves none of the %u layers full attention",
                             hp->arch_name, hp->full_attn_interval,
                             hp->n_layer);
    }
    if (hp->head_dim != hp->head_dim_v) {
        return llm_bind_fail(b, -EINVAL, "%s.attention.key_length %u and "
                             "value_length %u: expected equal (the output "
                             "gate has one value per head dim)",
                             hp->arch_name, hp->head_dim, hp->head_dim_v);
    }
    hp->attn_q_gate = 1;
    return 0;
}

static int
llm_bind_hparams(llm_bind_t *b, const llm_arch_desc_t *ad)
{
    llm_hparams_t   *hp = &b->m->hp;
    llm_gguf_str_t   s;
    uint64_t         n;
    const llm_gguf_str_t *items;
    uint32_t         u;
    char             e[256];
    int              rc;

    if ((rc = llm_hp_u32(b, "block_count", &hp->n_layer, 0, 0)) < 0
        || (rc = llm_hp_u32(b, "embedding_length", &hp->n_embd, 0, 0)) < 0
        || (rc = llm_hp_u32(b, "attention.head_count", &hp->n_head, 0, 0))
           < 0
        || (rc = llm_hp_u32(b, "attention.head_count_kv", &hp->n_head_kv, 1,
                            hp->n_head)) < 0
        || (rc = llm_hp_u32(b, "context_length", &hp->n_ctx_train, 1, 4096))
           < 0
        || (rc = llm_hp_u32(b, "expert_count", &hp->n_expert, 1, 0)) < 0
        || (rc = llm_hp_u32(b, "feed_forward_length", &hp->n_ff, 1, 0)) < 0
        || (rc = llm_hp_f32(b, "attention.layer_norm_rms_epsilon",
                            &hp->rms_eps, 0, 0)) < 0
        || (rc = llm_hp_f32(b, "rope.freq_base", &hp->rope_base, 1,
                            10000.0f)) < 0)
    {
        return rc;
    }

    if (hp->n_layer == 0 || hp->n_layer > 4096) {
        return llm_bind_fail(b, -EINVAL, "%s.block_count is %u, expected "
                             "1..4096", hp->arch_name, hp->n_layer);
    }
    hp->n_ctx_max = hp->n_ctx_train;    /* RoPE scaling may stretch it */

    /*
     * NextN / MTP blocks (GLM-4.5, Qwen3.5) come last in block_count:
     * llama.cpp loads them for speculative decoding and never runs them
     * in the forward pass; neither does this engine, nor does it bind
     * them (their tensors stay unread in the mapping).
     */
    hp->n_layer_file = hp->n_layer;
    if ((rc = llm_hp_u32(b, "nextn_predict_layers", &u, 1, 0)) < 0) {
        return rc;
    }
    if (u >= hp->n_layer) {
        return llm_bind_fail(b, -EINVAL, "%s.nextn_predict_layers is %u, "
                             "expected less than block_count %u",
                             hp->arch_name, u, hp->n_layer);
    }
    hp->n_layer -= u;
    if (hp->n_embd == 0 || hp->n_embd > (1u << 20)) {
        return llm_bind_fail(b, -EINVAL, "%s.embedding_length is %u, "
                             "expected 1..2^20", hp->arch_name, hp->n_embd);
    }
    if (hp->n_head == 0 || hp->n_head > 4096 || hp->n_head_kv == 0
        || hp->n_head % hp->n_head_kv != 0)
    {
        return llm_bind_fail(b, -EINVAL, "%s.attention.head_count %u and "
                             "head_count_kv %u: expected head_count a "
                             "multiple of head_count_kv (and both > 0)",
                             hp->arch_name, hp->n_head, hp->n_head_kv);
    }
    if (!(hp->rms_eps > 0.0f && hp->rms_eps < 1.0f)) {
        return llm_bind_fail(b, -EINVAL, "%s.attention.layer_norm_rms_"
                             "epsilon is %g, expected (0, 1)", hp->arch_name,
                             (double) hp->rms_eps);
    }
    if (!(hp->rope_base > 0.0f)) {
        return llm_bind_fail(b, -EINVAL, "%s.rope.freq_base is %g, expected "
                             "> 0", hp->arch_name, (double) hp->rope_base);
    }

    if ((rc = llm_hp_u32(b, "attention.key_length", &hp->head_dim, 1,
                         hp->n_embd / hp->n_head)) < 0
        || (rc = llm_hp_u32(b, "attention.value_length", &hp->head_dim_v, 1,
                            hp->head_dim)) < 0
        || (rc = llm_hp_u32(b, "rope.dimension_count", &hp->rope_dims, 1,
                            hp->head_dim)) < 0)
    {
        return rc;
    }
    if (hp->head_dim == 0 || hp->head_dim > 1024 || hp->head_dim % 2 != 0
        || hp->head_dim_v == 0 || hp->head_dim_v > 1024)
    {
        return llm_bind_fail(b, -EINVAL, "%s.attention.key_length %u / "
                             "value_length %u, expected even 2..1024",
                             hp->arch_name, hp->head_dim, hp->head_dim_v);
    }
    if (hp->rope_dims > hp->head_dim || hp->rope_dims % 2 != 0) {
        return llm_bind_fail(b, -EINVAL, "%s.rope.dimension_count is %u, "
                             "expected even and <= key_length %u",
                             hp->arch_name, hp->rope_dims, hp->head_dim);
    }
    hp->rope_neox = ad->rope_neox;

    if (hp->arch == LLM_ARCH_GPT_OSS) {
        /* sliding-window layers and OpenAI's clamped SwiGLU, with the
         * constants llama.cpp uses for this architecture */
        if ((rc = llm_hp_u32(b, "attention.sliding_window", &hp->n_swa, 0,
                             0)) < 0)
        {
            return rc;
        }
        if (hp->n_swa == 0) {
            return llm_bind_fail(b, -EINVAL, "%s.attention.sliding_window "
                                 "is 0, expected > 0", hp->arch_name);
        }
        hp->ffn_act = LLM_ACT_SWIGLU_OAI;
        hp->swiglu_alpha = 1.702f;
        hp->swiglu_limit = 7.0f;
    }
    if (hp->arch == LLM_ARCH_DEEPSEEK2 && (rc = llm_bind_mla_shape(b)) < 0) {
        return rc;
    }
    if (hp->arch == LLM_ARCH_QWEN35MOE && (rc = llm_bind_ssm_shape(b)) < 0) {
        return rc;
    }

    if (hp->n_expert > 0) {
        if (ad->moe == 0) {
            return llm_bind_fail(b, -EINVAL, "architecture '%s' has no "
                                 "experts, but %s.expert_count is %u",
                                 hp->arch_name, hp->arch_name, hp->n_expert);
        }
        if (hp->n_expert > 4096) {
            return llm_bind_fail(b, -EINVAL, "%s.expert_count is %u, "
                                 "expected <= 4096", hp->arch_name,
                                 hp->n_expert);
        }
        if ((rc = llm_hp_u32(b, "expert_used_count", &hp->n_expert_used, 0,
                             0)) < 0
            || (rc = llm_hp_u32(b, "expert_feed_forward_length",
                                &hp->n_ff_exp, 1, hp->n_ff)) < 0
            || (rc = llm_hp_u32(b, "expert_gating_func", &u, 1, 0)) < 0
            || (rc = llm_hp_bool(b, "expert_weights_norm",
                                 &hp->expert_weights_norm, 1)) < 0
            || (rc = llm_hp_f32(b, "expert_weights_scale",
                                &hp->expert_weights_scale, 1, 0.0f)) < 0)
        {
            return rc;
        }
        if (hp->n_expert_used == 0 || hp->n_expert_used > hp->n_expert
            || hp->n_expert_used > 64)
        {
            return llm_bind_fail(b, -EINVAL, "%s.expert_used_count is %u, "
                                 "expected 1..min(expert_count %u, 64)",
                                 hp->arch_name, hp->n_expert_used,
                                 hp->n_expert);
        }
        if (u == 0) {
            hp->gating = ad->gating;
        } else if (u == LLM_GATING_SOFTMAX || u == LLM_GATING_SIGMOID) {
            hp->gating = (llm_gating_t) u;
        } else {
            return llm_bind_fail(b, -EINVAL, "%s.expert_gating_func is %u, "
                                 "expected 1 (softmax) or 2 (sigmoid)",
                                 hp->arch_name, u);
        }
        /* llama.cpp always renormalizes top-k for these architectures */
        if (hp->arch != LLM_ARCH_MINIMAX_M2) {
            hp->expert_weights_norm = 1;
        }
        if (hp->n_ff_exp == 0) {
            return llm_bind_fail(b, -EINVAL, "missing metadata key "
                                 "'%s.expert_feed_forward_length'",
                                 hp->arch_name);
        }
        if ((rc = llm_bind_moe_shape(b)) < 0) {
            return rc;
        }
    } else if (ad->moe == 2) {
        return llm_bind_fail(b, -EINVAL, "missing metadata key "
                             "'%s.expert_count' (architecture '%s' is MoE)",
                             hp->arch_name, hp->arch_name);
    } else if (hp->n_ff == 0) {
        return llm_bind_fail(b, -EINVAL, "missing metadata key "
                             "'%s.feed_forward_length'", hp->arch_name);
    }

    /* vocabulary size: the key, else the token list, else token_embd */
    if ((rc = llm_hp_u32(b, "vocab_size", &hp->n_vocab, 1, 0)) < 0) {
        return rc;
    }
    if (hp->n_vocab == 0
        && llm_gguf_get_str_arr(b->m->gguf, "tokenizer.ggml.tokens", &n,
                                &items, e, sizeof(e)) == 0
        && n <= UINT32_MAX)
    {
        hp->n_vocab = (uint32_t) n;
    }

    if (llm_gguf_get_u32(b->m->gguf, "general.file_type", &hp->ftype, e,
                         sizeof(e)) < 0)
    {
        hp->ftype = UINT32_MAX;
    }

    if (llm_gguf_get_str(b->m->gguf, "general.name", &s, e, sizeof(e)) == 0
        && s.len > 0)
    {
        n = s.len < sizeof(hp->name) - 1 ? s.len : sizeof(hp->name) - 1;
        memcpy(hp->name, s.ptr, n);
        hp->name[n] = '\0';
    } else {
        const char *base = strrchr(b->path, '/');
        const char *dot;

        base = base ? base + 1 : b->path;
        dot = strrchr(base, '.');
        n = dot && dot > base ? (size_t) (dot - base) : strlen(base);
        if (n > sizeof(hp->name) - 1) {
            n = sizeof(hp->name) - 1;
        }
        memcpy(hp->name, base, n);
        hp->name[n] = '\0';
    }

    return 0;
}

static void
llm_shape_str(char *buf, size_t len, uint32_t nd, const int64_t *ne)
{
    size_t    o = 0;
    uint32_t  i;

    o += snprintf(buf + o, len - o, "[");
    for (i = 0; i < nd && o < len; i++) {
        o += snprintf(buf + o, len - o, "%s%lld", i ? ", " : "",
                      (long long) ne[i]);
    }
    if (o < len) {
        snprintf(buf + o, len - o, "]");
    }
}

/*
 * Find tensor `name` and check its shape is exactly ne[0..nd) (trailing
 * dims of 1 ignored).  *t = NULL and 0 when it is absent and optional.
 * `what` names the hyperparameters of each dim for the error message.
 */
static int
llm_bind_tensor(llm_bind_t *b, const char *name, uint32_t nd,
    const int64_t *ne, const char *what, int optional,
    const llm_gguf_tensor_t **t)
{
    const llm_gguf_tensor_t  *x;
    const llm_type_info_t    *ti;
    uint32_t                  i, xd;
    char                      got[96], want[96], runs[256];

    *t = NULL;
    x = llm_gguf_find_tensor(b->m->gguf, name);
    if (x == NULL) {
        if (optional) {
            return 0;
        }
        return llm_bind_fail(b, -EINVAL, "missing tensor '%s'", name);
    }

    xd = x->n_dims;
    while (xd > nd && x->ne[xd - 1] == 1) {
        xd--;
    }
    for (i = 0; i < nd && i < xd; i++) {
        if (x->ne[i] != ne[i]) {
            break;
        }
    }
    if (xd != nd || i != nd) {
        llm_shape_str(got, sizeof(got), x->n_dims, x->ne);
        llm_shape_str(want, sizeof(want), nd, ne);
        return llm_bind_fail(b, -EINVAL, "tensor '%s' has shape %s, "
                             "expected %s (%s)", name, got, want, what);
    }

    ti = llm_type_info(x->type);
    if (ti == NULL || !ti->supported) {
        llm_type_list_supported(runs, sizeof(runs));
        return llm_bind_fail(b, -EINVAL, "tensor '%s' has type %s (%u), "
                             "which this engine does not run yet; it runs "
                             "%s", name, llm_type_name(x->type), x->type,
                             runs);
    }
    if (llm_row_bytes(x->type, x->ne[0]) == 0) {
        return llm_bind_fail(b, -EINVAL, "tensor '%s': row of %lld values "
                             "is not a multiple of the %s block (%u)", name,
                             (long long) x->ne[0], ti->name, ti->block);
    }

    *t = x;
    return 0;
}

/* A 2-D weight: n_out rows of n_in. */
static int
llm_bind_mat(llm_bind_t *b, llm_wt_t *w, const char *name, int64_t n_in,
    int64_t n_out, const char *what, int optional)
{
    const llm_gguf_tensor_t  *t;
    int64_t                   ne[2] = { n_in, n_out };
    int                       rc;

    memset(w, 0, sizeof(*w));
    rc = llm_bind_tensor(b, name, 2, ne, what, optional, &t);
    if (rc < 0 || t == NULL) {
        return rc;
    }
    w->data = t->data;
    w->type = t->type;
    w->n_in = n_in;
    w->n_out = n_out;
    w->row_bytes = llm_row_bytes(t->type, n_in);
    return 0;
}

/*
 * A 1-D float vector of n values.  F32 points into the mapping; other
 * types are converted into an owned array.
 */
/*
 * A small tensor of floats, [n1][n0] (n1 = 1: a vector): F32 in place,
 * another type converted once into memory the model owns.
 */
static int
llm_bind_floats(llm_bind_t *b, const float **v, const char *name,
    int64_t n0, int64_t n1, const char *what, int optional)
{
    const llm_gguf_tensor_t  *t;
    float                    *f;
    int64_t                   ne[2] = { n0, n1 }, r;
    size_t                    rb;
    int                       rc;

    *v = NULL;
    rc = llm_bind_tensor(b, name, n1 > 1 ? 2 : 1, ne, what, optional, &t);
    if (rc < 0 || t == NULL) {
        return rc;
    }
    if (t->type == LLM_TYPE_F32) {
        *v = t->data;
        return 0;
    }
    f = malloc((size_t) n0 * n1 * sizeof(float));
    if (llm_model_own(b->m, f) < 0) {
        return llm_bind_fail(b, -ENOMEM, "out of memory");
    }
    rb = llm_row_bytes(t->type, n0);
    for (r = 0; r < n1; r++) {
        llm_dequantize_row(t->type, (const uint8_t *) t->data + r * rb,
                           f + r * n0, n0);
    }
    *v = f;
    return 0;
}

static int
llm_bind_vec(llm_bind_t *b, const float **v, const char *name, int64_t n,
    const char *what, int optional)
{
    return llm_bind_floats(b, v, name, n, 1, what, optional);
}

/*
 * Expert weights of layer il: blk.N.ffn_<kind>_exps.weight [n_in, n_out,
 * n_expert], or old per-expert tensors blk.N.ffn_<kind>.E.weight.  All
 * experts must share one type.
 */
static int
llm_bind_experts(llm_bind_t *b, llm_wt_t *w, uint32_t il, const char *kind,
    int64_t n_in, int64_t n_out, const char *what)
{
    const llm_hparams_t      *hp = &b->m->hp;
    const llm_gguf_tensor_t  *t;
    const uint8_t           **ex;
    char                      name[96], w3[160];
    int64_t                   ne[3] = { n_in, n_out, hp->n_expert };
    uint32_t                  e;
    int                       rc;

    memset(w, 0, sizeof(*w));
    ex = calloc(hp->n_expert, sizeof(*ex));
    if (llm_model_own(b->m, ex) < 0) {
        return llm_bind_fail(b, -ENOMEM, "out of memory");
    }

    snprintf(name, sizeof(name), "blk.%u.ffn_%s_exps.weight", il, kind);
    snprintf(w3, sizeof(w3), "%s, n_expert", what);
    if (llm_gguf_find_tensor(b->m->gguf, name) != NULL) {
        rc = llm_bind_tensor(b, name, 3, ne, w3, 0, &t);
        if (rc < 0) {
            return rc;
        }
        w->type = t->type;
        w->data = t->data;
        w->row_bytes = llm_row_bytes(t->type, n_in);
        for (e = 0; e < hp->n_expert; e++) {
            ex[e] = (const uint8_t *) t->data
                    + (size_t) e * n_out * w->row_bytes;
        }

    } else {
        snprintf(name, sizeof(name), "blk.%u.ffn_%s.0.weight", il, kind);
        if (llm_gguf_find_tensor(b->m->gguf, name) == NULL) {
            return llm_bind_fail(b, -EINVAL, "missing tensor "
                                 "'blk.%u.ffn_%s_exps.weight'", il, kind);
        }
        for (e = 0; e < hp->n_expert; e++) {
            snprintf(name, sizeof(name), "blk.%u.ffn_%s.%u.weight", il, kind,
                     e);
            rc = llm_bind_tensor(b, name, 2, ne, what, 0, &t);
            if (rc < 0) {
                return rc;
            }
            if (e > 0 && t->type != w->type) {
                return llm_bind_fail(b, -EINVAL, "tensor '%s' has type %s, "
                                     "expected %s like expert 0", name,
                                     llm_type_name(t->type),
                                     llm_type_name(w->type));
            }
            w->type = t->type;
            w->row_bytes = llm_row_bytes(t->type, n_in);
            ex[e] = t->data;
        }
        w->data = ex[0];
    }

    w->n_in = n_in;
    w->n_out = n_out;
    w->ex = ex;
    return 0;
}

/*
 * deepseek2's attention tensors: q through its LoRA (attn_q_a, its norm,
 * attn_q_b) or attn_q, the latent and rope key (attn_kv_a_mqa, the
 * latent's norm), and the per-head halves of the latent's up-projection
 * as the converter splits it (attn_k_b [nope, kv_lora, n_head], attn_v_b
 * [kv_lora, mla_v, n_head]), each bound as one matrix of n_head blocks
 * of rows.
 */
static int
llm_bind_mla(llm_bind_t *b, uint32_t il)
{
    llm_layer_t          *L = &b->m->layers[il];
    const llm_hparams_t  *hp = &b->m->hp;
    int64_t               E = hp->n_embd, H = hp->n_head;
    int64_t               nope = hp->mla_k - hp->rope_dims;
    int64_t               qk = (int64_t) H * hp->mla_k;
    int64_t               ne_k[3] = { nope, hp->n_lora_kv, H };
    int64_t               ne_v[3] = { hp->n_lora_kv, hp->mla_v, H };
    const llm_gguf_tensor_t *t;
    char                  n[96];
    int                   rc;

#define LLM_NAME(fmt) (snprintf(n, sizeof(n), "blk.%u." fmt, il), n)

    if (hp->n_lora_q > 0) {
        if ((rc = llm_bind_mat(b, &L->wq_a, LLM_NAME("attn_q_a.weight"), E,
                               hp->n_lora_q, "n_embd, q_lora_rank", 0)) < 0
            || (rc = llm_bind_vec(b, &L->q_a_norm,
                                  LLM_NAME("attn_q_a_norm.weight"),
                                  hp->n_lora_q, "q_lora_rank", 0)) < 0
            || (rc = llm_bind_mat(b, &L->wq_b, LLM_NAME("attn_q_b.weight"),
                                  hp->n_lora_q, qk,
                                  "q_lora_rank, n_head*key_length_mla", 0))
               < 0)
        {
            return rc;
        }
    } else if ((rc = llm_bind_mat(b, &L->wq_b, LLM_NAME("attn_q.weight"), E,
                                  qk, "n_embd, n_head*key_length_mla", 0))
               < 0)
    {
        return rc;
    }
    if ((rc = llm_bind_mat(b, &L->wkv_a, LLM_NAME("attn_kv_a_mqa.weight"), E,
                           hp->n_lora_kv + hp->rope_dims,
                           "n_embd, kv_lora_rank+rope", 0)) < 0
        || (rc = llm_bind_vec(b, &L->kv_a_norm,
                              LLM_NAME("attn_kv_a_norm.weight"),
                              hp->n_lora_kv, "kv_lora_rank", 0)) < 0
        || (rc = llm_bind_tensor(b, LLM_NAME("attn_k_b.weight"), 3, ne_k,
                                 "nope, kv_lora_rank, n_head", 0, &t)) < 0)
    {
        return rc;
    }
    L->wk_b.type = t->type;
    L->wk_b.data = t->data;
    L->wk_b.n_in = nope;
    L->wk_b.n_out = (int64_t) hp->n_lora_kv * H;
    L->wk_b.row_bytes = llm_row_bytes(t->type, nope);
    rc = llm_bind_tensor(b, LLM_NAME("attn_v_b.weight"), 3, ne_v,
                         "kv_lora_rank, value_length_mla, n_head", 0, &t);
    if (rc < 0) {
        return rc;
    }
    L->wv_b.type = t->type;
    L->wv_b.data = t->data;
    L->wv_b.n_in = hp->n_lora_kv;
    L->wv_b.n_out = (int64_t) hp->mla_v * H;
    L->wv_b.row_bytes = llm_row_bytes(t->type, hp->n_lora_kv);

#undef LLM_NAME

    return 0;
}

/*
 * A gated delta net layer's tensors (qwen35moe): the q/k/v projection
 * attn_qkv and the output gate attn_gate, the convolution ssm_conv1d
 * [d_conv, conv_dim], the per value head ssm_beta, ssm_alpha, ssm_dt.bias
 * and ssm_a, the gated norm ssm_norm over one head, and ssm_out (bound as
 * the layer's wo).
 */
static int
llm_bind_gdn(llm_bind_t *b, uint32_t il)
{
    llm_layer_t          *L = &b->m->layers[il];
    const llm_hparams_t  *hp = &b->m->hp;
    int64_t               E = hp->n_embd, H = hp->ssm_v_heads;
    int64_t               cd = llm_ssm_conv_dim(hp);
    char                  n[96];
    int                   rc;

#define LLM_NAME(fmt) (snprintf(n, sizeof(n), "blk.%u." fmt, il), n)

    if ((rc = llm_bind_mat(b, &L->wqkv, LLM_NAME("attn_qkv.weight"), E, cd,
                           "n_embd, 2*key heads*state + inner", 0)) < 0
        || (rc = llm_bind_mat(b, &L->wz, LLM_NAME("attn_gate.weight"), E,
                              hp->ssm_inner, "n_embd, ssm inner", 0)) < 0
        || (rc = llm_bind_mat(b, &L->wbeta, LLM_NAME("ssm_beta.weight"), E,
                              H, "n_embd, value heads", 0)) < 0
        || (rc = llm_bind_mat(b, &L->walpha, LLM_NAME("ssm_alpha.weight"), E,
                              H, "n_embd, value heads", 0)) < 0
        || (rc = llm_bind_floats(b, &L->conv1d,
                                 LLM_NAME("ssm_conv1d.weight"),
                                 hp->ssm_d_conv, cd, "conv kernel, channels",
                                 0)) < 0
        || (rc = llm_bind_vec(b, &L->dt_bias, LLM_NAME("ssm_dt.bias"), H,
                              "value heads", 0)) < 0
        || (rc = llm_bind_vec(b, &L->ssm_a, LLM_NAME("ssm_a"), H,
                              "value heads", 0)) < 0
        || (rc = llm_bind_vec(b, &L->ssm_norm, LLM_NAME("ssm_norm.weight"),
                              hp->ssm_state, "state size", 0)) < 0
        || (rc = llm_bind_mat(b, &L->wo, LLM_NAME("ssm_out.weight"),
                              hp->ssm_inner, E, "ssm inner, n_embd", 0)) < 0)
    {
        return rc;
    }

#undef LLM_NAME

    return 0;
}

static int
llm_bind_layer(llm_bind_t *b, uint32_t il, const llm_arch_desc_t *ad)
{
    llm_model_t          *m = b->m;
    const llm_hparams_t  *hp = &m->hp;
    llm_layer_t          *L = &m->layers[il];
    int64_t               E = hp->n_embd;
    int64_t               q_dim = (int64_t) hp->n_head * hp->head_dim;
    int64_t               k_dim = (int64_t) hp->n_head_kv * hp->head_dim;
    int64_t               v_dim = (int64_t) hp->n_head_kv * hp->head_dim_v;
    int64_t               o_dim = (int64_t) hp->n_head * hp->head_dim_v;
    char                  n[96];
    int                   rc;

#define LLM_NAME(fmt) (snprintf(n, sizeof(n), "blk.%u." fmt, il), n)

    L->recurrent = hp->n_layer_rec > 0
                   && (il + 1) % hp->full_attn_interval != 0;
    if (L->recurrent) {
        /* the recurrent layers before it: all but the full attention */
        L->rslot = il - il / hp->full_attn_interval;
        rc = llm_bind_gdn(b, il);
    } else if (hp->n_lora_kv > 0) {
        rc = llm_bind_mla(b, il);
    } else if ((rc = llm_bind_mat(b, &L->wq, LLM_NAME("attn_q.weight"), E,
                                  q_dim * (hp->attn_q_gate ? 2 : 1),
                                  hp->attn_q_gate
                                  ? "n_embd, 2*n_head*head_dim (query and "
                                    "gate)"
                                  : "n_embd, n_head*head_dim", 0)) < 0
               || (rc = llm_bind_mat(b, &L->wk, LLM_NAME("attn_k.weight"), E,
                                     k_dim, "n_embd, n_head_kv*head_dim", 0))
                  < 0
               || (rc = llm_bind_mat(b, &L->wv, LLM_NAME("attn_v.weight"), E,
                                     v_dim, "n_embd, n_head_kv*head_dim_v",
                                     0)) < 0)
    {
        return rc;
    }
    if (rc < 0) {
        return rc;
    }
    if (hp->n_lora_kv > 0) {
        o_dim = (int64_t) hp->n_head * hp->mla_v;
    }

    if ((rc = llm_bind_vec(b, &L->attn_norm, LLM_NAME("attn_norm.weight"), E,
                           "n_embd", 0)) < 0
        || (!L->recurrent
            && (rc = llm_bind_mat(b, &L->wo, LLM_NAME("attn_output.weight"),
                                  o_dim, E, "n_head*head_dim_v, n_embd", 0))
               < 0)
        || (rc = llm_bind_vec(b, &L->ffn_norm, LLM_NAME("ffn_norm.weight"),
                              E, "n_embd", 1)) < 0)
    {
        return rc;
    }
    /* glm4moe and gpt-oss name the FFN's input norm post_attention_norm */
    if (L->ffn_norm == NULL
        && (rc = llm_bind_vec(b, &L->ffn_norm,
                              LLM_NAME("post_attention_norm.weight"), E,
                              "n_embd", 1)) < 0)
    {
        return rc;
    }
    if (L->ffn_norm == NULL) {
        return llm_bind_fail(b, -EINVAL, "missing tensor "
                             "'blk.%u.ffn_norm.weight'", il);
    }

    if (ad->qkv_bias || m->hp.arch == LLM_ARCH_LLAMA) {
        /* qwen2 requires them; llama files may carry them */
        if ((rc = llm_bind_vec(b, &L->bq, LLM_NAME("attn_q.bias"), q_dim,
                               "n_head*head_dim", !ad->qkv_bias)) < 0
            || (rc = llm_bind_vec(b, &L->bk, LLM_NAME("attn_k.bias"), k_dim,
                                  "n_head_kv*head_dim", !ad->qkv_bias)) < 0
            || (rc = llm_bind_vec(b, &L->bv, LLM_NAME("attn_v.bias"), v_dim,
                                  "n_head_kv*head_dim_v", !ad->qkv_bias)) < 0)
        {
            return rc;
        }
    }

    if (ad->qk_norm == 1 && !L->recurrent) {
        if ((rc = llm_bind_vec(b, &L->q_norm, LLM_NAME("attn_q_norm.weight"),
                               hp->head_dim, "head_dim", 0)) < 0
            || (rc = llm_bind_vec(b, &L->k_norm,
                                  LLM_NAME("attn_k_norm.weight"),
                                  hp->head_dim, "head_dim", 0)) < 0)
        {
            return rc;
        }
    } else if (ad->qk_norm == 2) {
        if ((rc = llm_bind_vec(b, &L->q_norm, LLM_NAME("attn_q_norm.weight"),
                               q_dim, "n_head*head_dim", 0)) < 0
            || (rc = llm_bind_vec(b, &L->k_norm,
                                  LLM_NAME("attn_k_norm.weight"), k_dim,
                                  "n_head_kv*head_dim", 0)) < 0)
        {
            return rc;
        }
    }

    /* gpt-oss: output bias, sinks, every other layer sliding (from 0) */
    if ((rc = llm_bind_vec(b, &L->bo, LLM_NAME("attn_output.bias"), E,
                           "n_embd", hp->arch != LLM_ARCH_GPT_OSS)) < 0
        || (rc = llm_bind_vec(b, &L->sinks, LLM_NAME("attn_sinks.weight"),
                              hp->n_head, "n_head",
                              hp->arch != LLM_ARCH_GPT_OSS)) < 0)
    {
        return rc;
    }
    L->swa = hp->arch == LLM_ARCH_GPT_OSS && il % 2 == 0 ? hp->n_swa : 0;

    if (hp->n_expert == 0 || il < hp->n_layer_dense) {
        if ((rc = llm_bind_mat(b, &L->ffn_gate, LLM_NAME("ffn_gate.weight"),
                               E, hp->n_ff, "n_embd, n_ff", 0)) < 0
            || (rc = llm_bind_mat(b, &L->ffn_up, LLM_NAME("ffn_up.weight"),
                                  E, hp->n_ff, "n_embd, n_ff", 0)) < 0
            || (rc = llm_bind_mat(b, &L->ffn_down,
                                  LLM_NAME("ffn_down.weight"), hp->n_ff, E,
                                  "n_ff, n_embd", 0)) < 0)
        {
            return rc;
        }
        return 0;
    }

    if ((rc = llm_bind_mat(b, &L->gate_inp, LLM_NAME("ffn_gate_inp.weight"),
                           E, hp->n_expert, "n_embd, n_expert", 0)) < 0
        || (rc = llm_bind_vec(b, &L->exp_probs_b,
                              LLM_NAME("exp_probs_b.bias"), hp->n_expert,
                              "n_expert",
                              hp->arch != LLM_ARCH_MINIMAX_M2
                              && hp->arch != LLM_ARCH_GLM4MOE)) < 0
        || (rc = llm_bind_experts(b, &L->gate_exps, il, "gate", E,
                                  hp->n_ff_exp, "n_embd, n_ff_exp")) < 0
        || (rc = llm_bind_experts(b, &L->up_exps, il, "up", E, hp->n_ff_exp,
                                  "n_embd, n_ff_exp")) < 0
        || (rc = llm_bind_experts(b, &L->down_exps, il, "down", hp->n_ff_exp,
                                  E, "n_ff_exp, n_embd")) < 0)
    {
        return rc;
    }

    /* gpt-oss: router and expert biases */
    if ((rc = llm_bind_vec(b, &L->gate_inp_b, LLM_NAME("ffn_gate_inp.bias"),
                           hp->n_expert, "n_expert",
                           hp->arch != LLM_ARCH_GPT_OSS)) < 0
        || (rc = llm_bind_floats(b, &L->gate_exps_b,
                                 LLM_NAME("ffn_gate_exps.bias"),
                                 hp->n_ff_exp, hp->n_expert,
                                 "n_ff_exp, n_expert",
                                 hp->arch != LLM_ARCH_GPT_OSS)) < 0
        || (rc = llm_bind_floats(b, &L->up_exps_b,
                                 LLM_NAME("ffn_up_exps.bias"), hp->n_ff_exp,
                                 hp->n_expert, "n_ff_exp, n_expert",
                                 hp->arch != LLM_ARCH_GPT_OSS)) < 0
        || (rc = llm_bind_floats(b, &L->down_exps_b,
                                 LLM_NAME("ffn_down_exps.bias"), E,
                                 hp->n_expert, "n_embd, n_expert",
                                 hp->arch != LLM_ARCH_GPT_OSS)) < 0)
    {
        return rc;
    }

    if (hp->arch == LLM_ARCH_QWEN35MOE && hp->n_ff_shexp > 0
        && (rc = llm_bind_vec(b, &L->gate_inp_shexp,
                              LLM_NAME("ffn_gate_inp_shexp.weight"), E,
                              "n_embd", 0)) < 0)
    {
        return rc;
    }
    if (hp->n_ff_shexp > 0
        && ((rc = llm_bind_mat(b, &L->gate_shexp,
                               LLM_NAME("ffn_gate_shexp.weight"), E,
                               hp->n_ff_shexp, "n_embd, n_ff_shexp", 0)) < 0
            || (rc = llm_bind_mat(b, &L->up_shexp,
                                  LLM_NAME("ffn_up_shexp.weight"), E,
                                  hp->n_ff_shexp, "n_embd, n_ff_shexp", 0))
               < 0
            || (rc = llm_bind_mat(b, &L->down_shexp,
                                  LLM_NAME("ffn_down_shexp.weight"),
                                  hp->n_ff_shexp, E, "n_ff_shexp, n_embd", 0))
               < 0))
    {
        return rc;
    }

#undef LLM_NAME

    if (L->up_exps.type != L->gate_exps.type) {
        return llm_bind_fail(b, -EINVAL, "tensor 'blk.%u.ffn_up_exps.weight' "
                             "has type %s, expected %s like ffn_gate_exps",
                             il, llm_type_name(L->up_exps.type),
                             llm_type_name(L->gate_exps.type));
    }
    return 0;
}

/*
 * YaRN's correction range as ggml computes it: the pairs whose rotation
 * over the original context is between beta_fast and beta_slow turns.
 */
static float
llm_yarn_corr_dim(uint32_t n_dims, uint32_t n_ctx_orig, float n_rot,
    float base)
{
    return (float) n_dims * logf((float) n_ctx_orig
                                 / (n_rot * 2.0f * (float) M_PI))
           / (2.0f * logf(base));
}

static int
llm_bind_yarn(llm_bind_t *b, float factor)
{
    llm_model_t    *m = b->m;
    llm_hparams_t  *hp = &m->hp;
    uint32_t        orig;
    float           fast, slow, attn, lo, hi;
    int             rc;

    if ((rc = llm_hp_u32(b, "rope.scaling.original_context_length", &orig,
                         1, hp->n_ctx_train)) < 0
        || (rc = llm_hp_f32(b, "rope.scaling.yarn_beta_fast", &fast, 1,
                            32.0f)) < 0
        || (rc = llm_hp_f32(b, "rope.scaling.yarn_beta_slow", &slow, 1,
                            1.0f)) < 0
        || (rc = llm_hp_f32(b, "rope.scaling.yarn_ext_factor", &m->yarn_ext,
                            1, 1.0f)) < 0
        || (rc = llm_hp_f32(b, "rope.scaling.yarn_attn_factor", &attn, 1,
                            1.0f)) < 0)
    {
        return rc;
    }
    if (orig == 0 || !(fast > 0.0f) || !(slow > 0.0f)) {
        return llm_bind_fail(b, -EINVAL, "%s.rope.scaling: yarn with "
                             "original_context_length %u, beta_fast %g, "
                             "beta_slow %g; expected all > 0",
                             hp->arch_name, orig, (double) fast,
                             (double) slow);
    }
    lo = floorf(llm_yarn_corr_dim(hp->rope_dims, orig, fast, hp->rope_base));
    hi = ceilf(llm_yarn_corr_dim(hp->rope_dims, orig, slow, hp->rope_base));
    m->yarn = 1;
    m->yarn_corr[0] = lo > 0.0f ? lo : 0.0f;
    m->yarn_corr[1] = hi < (float) (hp->rope_dims - 1)
                      ? hi : (float) (hp->rope_dims - 1);
    /* ggml scales the attention by 1 + 0.1 ln(factor) when extrapolating */
    m->yarn_mscale = m->yarn_ext != 0.0f
                     ? attn * (1.0f + 0.1f * logf(factor)) : attn;
    if (hp->n_lora_kv > 0) {
        /*
         * deepseek2, as llama.cpp runs it: RoPE unscaled (the attention
         * factor cancels ggml's), and q.k scaled by mscale^2 instead,
         * mscale = 1 + yarn_log_multiplier * ln(factor): the converter
         * writes the multiplier as 0.1 * mscale_all_dim, so this is
         * DeepSeek's 1 + 0.1 * mscale_all_dim * ln(factor) (checked
         * against llama.cpp's logits on ../shared/reference-arch)
         */
        float  lm, ms;
        int    rc2;

        if ((rc2 = llm_hp_f32(b, "rope.scaling.yarn_log_multiplier", &lm, 1,
                              0.0f)) < 0)
        {
            return rc2;
        }
        ms = attn * (1.0f + lm * logf(factor));
        m->yarn_mscale = attn;
        hp->attn_scale = ms * ms / sqrtf((float) hp->mla_k);
    }
    return 0;
}

/*
 * The window a RoPE scaling by factor f stretches the file to, as
 * llama.cpp reads it: the original context (rope.scaling.original_
 * context_length, else context_length) times f, never below
 * context_length (a file whose context_length is already the stretched
 * window, as gpt-oss's 131072 = 4096 x 32).  Capped at 2^24 tokens.
 */
static int
llm_bind_ctx_max(llm_bind_t *b, float f)
{
    llm_hparams_t  *hp = &b->m->hp;
    uint32_t        orig;
    double          w;
    int             rc;

    if ((rc = llm_hp_u32(b, "rope.scaling.original_context_length", &orig,
                         1, hp->n_ctx_train)) < 0)
    {
        return rc;
    }
    w = (double) (orig ? orig : hp->n_ctx_train) * (double) f;
    w = w > (double) (1u << 24) ? (double) (1u << 24) : w;
    if (w > (double) hp->n_ctx_train) {
        hp->n_ctx_max = (uint32_t) w;
    }
    return 0;
}

/*
 * RoPE scaling: rope_freqs.weight (per-pair frequency divisors, Llama 3.1),
 * rope.scaling.type "linear" with rope.scaling.factor, and "yarn" (with
 * its original context, beta_fast / beta_slow and the attention factor)
 * are applied; other scaling types (longrope) are refused rather than
 * computed wrong.
 */
static int
llm_bind_rope_scaling(llm_bind_t *b)
{
    llm_model_t     *m = b->m;
    llm_gguf_str_t   s;
    char             key[96], e[256];
    float            f;
    int              rc;

    m->rope_scale = 1.0f;
    rc = llm_bind_vec(b, &m->rope_freqs, "rope_freqs.weight",
                      m->hp.rope_dims / 2, "rope_dims/2", 1);
    if (rc < 0) {
        return rc;
    }
    snprintf(key, sizeof(key), "%s.rope.scaling.type", m->hp.arch_name);
    if (llm_gguf_get_str(m->gguf, key, &s, e, sizeof(e)) < 0
        || (s.len == 4 && memcmp(s.ptr, "none", 4) == 0))
    {
        return 0;
    }
    if (!(s.len == 6 && memcmp(s.ptr, "linear", 6) == 0)
        && !(s.len == 4 && memcmp(s.ptr, "yarn", 4) == 0))
    {
        return llm_bind_fail(b, -EINVAL, "%s is '%.*s', expected none, "
                             "linear or yarn (others are not supported)",
                             key, (int) (s.len > 32 ? 32 : s.len), s.ptr);
    }
    if ((rc = llm_hp_f32(b, "rope.scaling.factor", &f, 1, 1.0f)) < 0) {
        return rc;
    }
    if (!(f > 0.0f)) {
        return llm_bind_fail(b, -EINVAL, "%s.rope.scaling.factor is %g, "
                             "expected > 0", m->hp.arch_name, (double) f);
    }
    m->rope_scale = 1.0f / f;
    if ((rc = llm_bind_ctx_max(b, f)) < 0) {
        return rc;
    }
    return s.len == 4 ? llm_bind_yarn(b, f) : 0;
}

/* The name of the file's quantization: general.file_type, else the type
 * holding the most bytes. */
static const char *
llm_model_quant_guess(const llm_model_t *m)
{
    const llm_gguf_t  *g = m->gguf;
    uint64_t           bytes[LLM_TYPE_COUNT], i, best = 0;
    size_t             k;
    uint32_t           t, bt = 0;

    for (k = 0; k < sizeof(llm_ftypes) / sizeof(llm_ftypes[0]); k++) {
        if (llm_ftypes[k].ftype == m->hp.ftype) {
            return llm_ftypes[k].name;
        }
    }
    memset(bytes, 0, sizeof(bytes));
    for (i = 0; i < llm_gguf_n_tensors(g); i++) {
        t = llm_gguf_tensor_at(g, i)->type;
        if (t < LLM_TYPE_COUNT) {
            bytes[t] += llm_gguf_tensor_at(g, i)->nbytes;
        }
    }
    for (t = 0; t < LLM_TYPE_COUNT; t++) {
        if (bytes[t] > best) {
            best = bytes[t];
            bt = t;
        }
    }
    return llm_type_name(bt);
}

/* Kilobytes of the mapping at base that are mapped with 2 MB entries. */
static uint64_t
llm_pmd_mapped_kb(const void *base)
{
    FILE     *f = fopen("/proc/self/smaps", "r");
    char      line[512];
    unsigned long start, end;
    uint64_t  kb = 0;
    int       in = 0;

    if (f == NULL) {
        return 0;
    }
    while (fgets(line, sizeof(line), f)) {
        if (sscanf(line, "%lx-%lx ", &start, &end) == 2
            && strchr(line, ':') != NULL && line[0] != ' ')
        {
            in = (uintptr_t) start == (uintptr_t) base;
            continue;
        }
        if (in && sscanf(line, "FilePmdMapped: %lu kB", &start) == 1) {
            kb = start;
            break;
        }
    }
    fclose(f);
    return kb;
}

/*
 * Populate the mapping's page tables when the file fits comfortably in
 * RAM, so the first tokens pay no page faults; older kernels get a
 * read-ahead hint instead.
 *
 * Streaming weights through 4 KB pages costs a TLB miss every 4 KB
 * (measured: decode ~1.8x slower than from huge pages).  With
 * MADV_HUGEPAGE, the page cache reads the file in 2 MB folios that map
 * with one entry each; but pages already cached in small folios (a file
 * just written by llm-quantize) stay small.  So when less than half the
 * mapping came out huge, drop our page tables, ask the kernel to evict
 * the file's cached pages (clean, unmapped ones only) and populate again,
 * reading the file once more from disk.  Failures are harmless.
 */
static void
llm_model_prefault(llm_model_t *m, const llm_model_opts_t *opts)
{
    uint64_t  size = llm_gguf_file_size(m->gguf);
    uint64_t  ram;
    long      pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
    void     *base = (void *) llm_gguf_map(m->gguf);

    if (opts != NULL && (opts->no_prefault || opts->expert_cache_mb > 0)) {
        return;
    }
    ram = pages > 0 && psz > 0 ? (uint64_t) pages * (uint64_t) psz : 0;
    if (ram == 0 || size > ram / 4 * 3) {
        return;
    }
    if (size >= (64u << 20)) {
        madvise(base, size, MADV_HUGEPAGE);
    }
    if (madvise(base, size, MADV_POPULATE_READ) != 0) {
        madvise(base, size, MADV_WILLNEED);
        return;
    }
    if (size < (64u << 20) || llm_pmd_mapped_kb(base) * 1024 >= size / 2) {
        return;
    }
    madvise(base, size, MADV_DONTNEED);
    posix_fadvise(llm_gguf_fd(m->gguf), 0, 0, POSIX_FADV_DONTNEED);
    madvise(base, size, MADV_POPULATE_READ);
}

/*
 * The matrices of the model that only ever meet llm_gemm (not the token
 * embeddings, which are read row by row, nor an output tied to them
 * unless its file layout's gemm regroups per call: llm_repack_file_slow,
 * then the output gets a regrouped copy of its own); the experts only
 * when they come from the mapping.  At most 22 per layer and the output:
 * fills out and returns the count.
 */
static size_t
llm_gemm_weights(llm_model_t *m, int experts, llm_wt_t **out)
{
    size_t    n = 0;
    uint32_t  l;

    if (m->output.data != m->tok_embd.data
        || llm_repack_file_slow((llm_type_t) m->output.type))
    {
        out[n++] = &m->output;
    }
    for (l = 0; l < m->hp.n_layer; l++) {
        llm_layer_t  *L = &m->layers[l];

        out[n++] = &L->wq;
        out[n++] = &L->wk;
        out[n++] = &L->wv;
        out[n++] = &L->wo;
        out[n++] = &L->ffn_gate;
        out[n++] = &L->ffn_up;
        out[n++] = &L->ffn_down;
        out[n++] = &L->gate_shexp;
        out[n++] = &L->up_shexp;
        out[n++] = &L->down_shexp;
        out[n++] = &L->wq_a;
        out[n++] = &L->wq_b;
        out[n++] = &L->wkv_a;
        out[n++] = &L->wk_b;
        out[n++] = &L->wv_b;
        out[n++] = &L->wqkv;
        out[n++] = &L->wz;
        out[n++] = &L->wbeta;
        out[n++] = &L->walpha;
        if (experts) {
            out[n++] = &L->gate_exps;
            out[n++] = &L->up_exps;
            out[n++] = &L->down_exps;
        }
    }
    return n;
}

/* Drop the file's pages of [p, p + len) once they are copied out. */
static void
llm_drop_source(llm_model_t *m, const uint8_t *p, size_t len)
{
    const uint8_t  *base = llm_gguf_map(m->gguf);
    uintptr_t       psz = (uintptr_t) sysconf(_SC_PAGESIZE);
    uintptr_t       a = ((uintptr_t) p + psz - 1) & ~(psz - 1);
    uintptr_t       e = ((uintptr_t) p + len) & ~(psz - 1);

    if (e <= a) {
        return;
    }
    madvise((void *) a, e - a, MADV_DONTNEED);
    posix_fadvise(llm_gguf_fd(m->gguf), (off_t) (a - (uintptr_t) base),
                  (off_t) (e - a), POSIX_FADV_DONTNEED);
}

static int
llm_cmp_u64(const void *a, const void *b)
{
    uint64_t  x = *(const uint64_t *) a, y = *(const uint64_t *) b;

    return x < y ? -1 : x > y;
}

int
llm_model_regrouped(const llm_model_t *m, uint64_t file_offset)
{
    return m->n_regrouped > 0
           && bsearch(&file_offset, m->regrouped, m->n_regrouped,
                      sizeof(*m->regrouped), llm_cmp_u64) != NULL;
}

/* The bytes regrouping the n weights of ws writes. */
static size_t
llm_regroup_size(const llm_model_t *m, llm_wt_t **ws, size_t n)
{
    size_t    i, bytes = 0;
    uint32_t  ne;

    for (i = 0; i < n; i++) {
        const llm_wt_t  *w = ws[i];

        ne = w->ex != NULL ? m->hp.n_expert : 1;
        if (w->data != NULL
            && llm_repack_type(w->type, w->n_out) != (llm_type_t) w->type)
        {
            bytes += (size_t) ne * w->n_out * w->row_bytes;
        }
    }
    return bytes;
}

uint64_t
llm_model_regroup_bytes(const llm_model_t *m, int experts)
{
    llm_wt_t  **ws;
    size_t      n, bytes;

    if (m->repack != NULL) {
        return 0;                   /* already regrouped */
    }
    ws = malloc((1 + 22 * (size_t) m->hp.n_layer) * sizeof(*ws));
    if (ws == NULL) {
        return 0;
    }
    /* only reads the weights: the cast is for llm_gemm_weights' output */
    n = llm_gemm_weights((llm_model_t *) m, experts, ws);
    bytes = llm_regroup_size(m, ws, n);
    free(ws);
    return bytes;
}

/*
 * Regroup the gemm-only weights whose kernels run faster in another
 * layout (llm_repack_type: Q4_0 into Q4_0_R16 with AVX-512) into one
 * anonymous mapping on huge pages, and let the file's pages go.  The
 * resident size stays the file's; a model streamed from disk keeps its
 * experts in the file's layout (the expert cache reads them as they are).
 */
static int
llm_model_repack(llm_model_t *m, const llm_model_opts_t *opts,
    llm_bind_t *b)
{
    llm_wt_t       **ws;
    const uint8_t   *base = llm_gguf_map(m->gguf);
    size_t           n, i, bytes, off = 0, one;
    uint32_t         e, ne;
    int              experts = opts == NULL || opts->expert_cache_mb == 0;

    if (m->repack != NULL) {
        return 0;                   /* prepared before */
    }
    ws = malloc((1 + 22 * (size_t) m->hp.n_layer) * sizeof(*ws));
    if (ws == NULL) {
        return llm_bind_fail(b, -ENOMEM, "out of memory");
    }
    n = llm_gemm_weights(m, experts, ws);
    bytes = llm_regroup_size(m, ws, n);
    if (bytes == 0) {
        free(ws);
        return 0;
    }

    m->repack = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m->repack == MAP_FAILED) {
        m->repack = NULL;
        free(ws);
        return llm_bind_fail(b, -errno, "regrouped weights: mmap of %zu "
                             "bytes: %s", bytes, strerror(errno));
    }
    m->repack_bytes = bytes;
    m->regrouped = malloc(n * sizeof(*m->regrouped));
    if (m->regrouped == NULL) {
        free(ws);
        return llm_bind_fail(b, -ENOMEM, "out of memory");
    }
    madvise(m->repack, bytes, MADV_HUGEPAGE);
    if (opts != NULL && opts->use_mlock && mlock(m->repack, bytes) != 0) {
        free(ws);
        return llm_bind_fail(b, -errno, "mlock of %zu bytes: %s", bytes,
                             strerror(errno));
    }

    for (i = 0; i < n; i++) {
        llm_wt_t    *w = ws[i];
        llm_type_t   rt;
        /* an output tied to the embeddings: a copy, the rows stay */
        int          tied = w->data == m->tok_embd.data;

        if (w->data == NULL
            || (rt = llm_repack_type(w->type, w->n_out)) == w->type)
        {
            continue;
        }
        one = (size_t) w->n_out * w->row_bytes;
        ne = w->ex != NULL ? m->hp.n_expert : 1;
        if (!tied) {
            m->regrouped[m->n_regrouped++] = (uint64_t)
                ((w->ex != NULL ? w->ex[0] : w->data) - base);
        }
        for (e = 0; e < ne; e++) {
            const uint8_t  *src = w->ex != NULL ? w->ex[e] : w->data;

            llm_repack_rows(w->type, w->n_in, w->n_out, src,
                            m->repack + off);
            if (!tied) {
                llm_drop_source(m, src, one);
            }
            if (w->ex != NULL) {
                w->ex[e] = m->repack + off;
            }
            if (e == 0) {
                w->data = m->repack + off;
            }
            off += one;
        }
        w->type = rt;
    }
    free(ws);
    qsort(m->regrouped, m->n_regrouped, sizeof(*m->regrouped),
          llm_cmp_u64);
    return 0;
}

/*
 * Open path, bind hyperparameters and every weight.  On failure *out is
 * NULL and err names the file and the key, tensor or value at fault.
 */
int
llm_model_load(llm_model_t **out, const char *path,
    const llm_model_opts_t *opts, char *err, size_t errlen)
{
    llm_model_t              *m;
    llm_bind_t                b;
    const llm_arch_desc_t    *ad = NULL;
    const llm_gguf_tensor_t  *t;
    llm_gguf_str_t            s;
    llm_hparams_t            *hp;
    char                      e[256];
    uint64_t                  i, j, ne;
    size_t                    k;
    int                       rc;

    *out = NULL;
    m = calloc(1, sizeof(*m));
    if (m == NULL) {
        snprintf(err, errlen, "%s: out of memory", path);
        return -ENOMEM;
    }
    hp = &m->hp;
    b.m = m;
    b.path = path;
    b.err = err;
    b.errlen = errlen;

    rc = llm_gguf_open(&m->gguf, path, err, errlen);
    if (rc < 0) {
        goto failed;
    }

    rc = llm_gguf_get_str(m->gguf, "general.architecture", &s, e, sizeof(e));
    if (rc == -ENOENT) {
        rc = llm_bind_fail(&b, -EINVAL, "missing metadata key "
                           "'general.architecture'");
        goto failed;
    }
    if (rc < 0) {
        rc = llm_bind_fail(&b, rc, "%s", e);
        goto failed;
    }
    for (k = 0; k < sizeof(llm_archs) / sizeof(llm_archs[0]); k++) {
        if (strlen(llm_archs[k].name) == s.len
            && memcmp(llm_archs[k].name, s.ptr, s.len) == 0)
        {
            ad = &llm_archs[k];
        }
    }
    if (ad == NULL) {
        rc = llm_bind_fail(&b, -EINVAL, "unknown architecture '%.*s' "
                           "(general.architecture), expected llama, qwen2, "
                           "qwen3, qwen3moe, minimax-m2, glm4moe, "
                           "gpt-oss, deepseek2 or qwen35moe",
                           (int) (s.len > 64 ? 64 : s.len), s.ptr);
        goto failed;
    }
    hp->arch = ad->arch;
    snprintf(hp->arch_name, sizeof(hp->arch_name), "%s", ad->name);
    m->qk_norm_whole = ad->qk_norm == 2;

    rc = llm_bind_hparams(&b, ad);
    if (rc < 0) {
        goto failed;
    }

    /* token embeddings decide the vocabulary when no key does */
    t = llm_gguf_find_tensor(m->gguf, "token_embd.weight");
    if (t == NULL) {
        rc = llm_bind_fail(&b, -EINVAL, "missing tensor 'token_embd.weight'");
        goto failed;
    }
    if (hp->n_vocab == 0 && t->n_dims == 2 && t->ne[1] > 0
        && t->ne[1] <= (int64_t) UINT32_MAX)
    {
        hp->n_vocab = (uint32_t) t->ne[1];
    }
    rc = llm_bind_mat(&b, &m->tok_embd, "token_embd.weight", hp->n_embd,
                      hp->n_vocab, "n_embd, n_vocab", 0);
    if (rc < 0) {
        goto failed;
    }
    rc = llm_bind_vec(&b, &m->output_norm, "output_norm.weight", hp->n_embd,
                      "n_embd", 0);
    if (rc < 0) {
        goto failed;
    }
    rc = llm_bind_mat(&b, &m->output, "output.weight", hp->n_embd,
                      hp->n_vocab, "n_embd, n_vocab", 1);
    if (rc < 0) {
        goto failed;
    }
    if (m->output.data == NULL) {
        m->output = m->tok_embd;             /* tied embeddings */
    }

    rc = llm_bind_rope_scaling(&b);
    if (rc < 0) {
        goto failed;
    }

    m->layers = calloc(hp->n_layer, sizeof(llm_layer_t));
    if (m->layers == NULL) {
        rc = llm_bind_fail(&b, -ENOMEM, "out of memory");
        goto failed;
    }
    for (i = 0; i < hp->n_layer; i++) {
        rc = llm_bind_layer(&b, (uint32_t) i, ad);
        if (rc < 0) {
            goto failed;
        }
    }

    hp->n_params = 0;
    for (i = 0; i < llm_gguf_n_tensors(m->gguf); i++) {
        t = llm_gguf_tensor_at(m->gguf, i);
        ne = 1;
        for (j = 0; j < t->n_dims; j++) {
            ne *= (uint64_t) t->ne[j];
        }
        hp->n_params += ne;
    }
    m->quant_name = llm_model_quant_guess(m);

    if (opts == NULL || !opts->bind_only) {
        rc = llm_model_prepare(m, opts, err, errlen);
        if (rc < 0) {
            goto failed;
        }
    }

    *out = m;
    return 0;

failed:
    llm_model_free(m);
    return rc;
}

int
llm_model_prepare(llm_model_t *m, const llm_model_opts_t *opts, char *err,
    size_t errlen)
{
    llm_bind_t  b;

    b.m = m;
    b.path = llm_gguf_path(m->gguf);
    b.err = err;
    b.errlen = errlen;
    if (opts != NULL && opts->use_mlock) {
        if (mlock(llm_gguf_map(m->gguf), llm_gguf_file_size(m->gguf)) != 0) {
            return llm_bind_fail(&b, -errno, "mlock of %llu bytes: %s",
                                 (unsigned long long)
                                 llm_gguf_file_size(m->gguf),
                                 strerror(errno));
        }
    }
    llm_model_prefault(m, opts);
    if (opts != NULL && opts->no_regroup) {
        return 0;
    }
    return llm_model_repack(m, opts, &b);
}

void
llm_model_free(llm_model_t *m)
{
    size_t  i;

    if (m == NULL) {
        return;
    }
    for (i = 0; i < m->n_owned; i++) {
        free(m->owned[i]);
    }
    free(m->owned);
    free(m->layers);
    if (m->repack != NULL) {
        munmap(m->repack, m->repack_bytes);
    }
    free(m->regrouped);
    if (m->gguf != NULL) {
        llm_gguf_close(m->gguf);
    }
    free(m);
}

const llm_hparams_t *
llm_model_hparams(const llm_model_t *m)
{
    return &m->hp;
}

const llm_gguf_t *
llm_model_gguf(const llm_model_t *m)
{
    return m->gguf;
}

const char *
llm_model_quant_name(const llm_model_t *m)
{
    return m->quant_name;
}

int
llm_model_expert_slices(const llm_model_t *m, uint32_t layer,
    uint32_t expert, llm_expert_slices_t *out)
{
    const llm_layer_t  *L;
    const llm_wt_t     *w[3];
    const uint8_t      *base = llm_gguf_map(m->gguf);
    int                 i;

    if (m->hp.n_expert == 0 || layer >= m->hp.n_layer
        || expert >= m->hp.n_expert)
    {
        return -EINVAL;
    }
    L = &m->layers[layer];
    if (!llm_layer_is_moe(L)) {
        return -ENOENT;             /* a leading dense layer */
    }
    w[0] = &L->gate_exps;
    w[1] = &L->up_exps;
    w[2] = &L->down_exps;
    for (i = 0; i < 3; i++) {
        out->offset[i] = (uint64_t) (w[i]->ex[expert] - base);
        out->bytes[i] = (uint64_t) w[i]->n_out * w[i]->row_bytes;
        out->type[i] = w[i]->type;
        out->n_in[i] = (uint32_t) w[i]->n_in;
        out->n_out[i] = (uint32_t) w[i]->n_out;
    }
    return 0;
}
