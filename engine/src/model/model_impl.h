/*
 * Internals of the model, the KV cache and the forward pass, shared by
 * model.c, kv.c and forward.c only.  Nothing outside those files includes
 * this header; the public contract is model.h.
 */

#ifndef LLM_MODEL_IMPL_H
#define LLM_MODEL_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "model.h"
#include "base/threadpool.h"

/*
 * One weight matrix: n_out rows of n_in values of a ggml type, pointing
 * into the mapping.  Expert tensors hold n_expert such matrices; ex[e] is
 * the base of expert e (contiguous for *_exps tensors, one tensor per expert
 * in old Mixtral files).
 */
typedef struct {
    const uint8_t   *data;         /* NULL: tensor absent */
    uint32_t         type;
    int64_t          n_in;         /* ne[0]: row length */
    int64_t          n_out;        /* ne[1]: rows */
    size_t           row_bytes;
    const uint8_t  **ex;           /* [n_expert] or NULL (not an expert) */
} llm_wt_t;

typedef struct {
    const float     *attn_norm;    /* [n_embd] */
    llm_wt_t         wq;           /* [n_embd] -> [n_head * head_dim] */
    llm_wt_t         wk;           /* [n_embd] -> [n_head_kv * head_dim] */
    llm_wt_t         wv;           /* [n_embd] -> [n_head_kv * head_dim_v] */
    llm_wt_t         wo;           /* [n_head * head_dim_v] -> [n_embd] */
    const float     *bq, *bk, *bv; /* qwen2 biases, or NULL */
    const float     *bo;           /* attn_output bias, or NULL */
    const float     *sinks;        /* [n_head] attention sink logits */
    uint32_t         swa;          /* sliding window (0: full attention) */
    const float     *q_norm;       /* [head_dim] or [n_head * head_dim] */
    const float     *k_norm;       /* [head_dim] or [n_head_kv * head_dim] */
    const float     *ffn_norm;     /* [n_embd] */

    /* deepseek2's MLA (instead of wq, wk, wv) */
    llm_wt_t         wq_a;         /* [n_embd] -> [n_lora_q], or absent */
    const float     *q_a_norm;     /* [n_lora_q] */
    llm_wt_t         wq_b;         /* [n_lora_q] -> [n_head * mla_k] */
    llm_wt_t         wkv_a;        /* [n_embd] -> [n_lora_kv + rope] */
    const float     *kv_a_norm;    /* [n_lora_kv] */
    llm_wt_t         wk_b;         /* per head [nope] -> [n_lora_kv] */
    llm_wt_t         wv_b;         /* per head [n_lora_kv] -> [mla_v] */

    llm_wt_t         ffn_gate;     /* dense: [n_embd] -> [n_ff] */
    llm_wt_t         ffn_up;
    llm_wt_t         ffn_down;     /* [n_ff] -> [n_embd] */

    llm_wt_t         gate_inp;     /* router: [n_embd] -> [n_expert] */
    const float     *exp_probs_b;  /* [n_expert] selection bias, or NULL */
    const float     *gate_inp_b;   /* [n_expert] router bias, or NULL */
    const float     *gate_exps_b;  /* [n_expert][n_ff_exp] or NULL */
    const float     *up_exps_b;    /* [n_expert][n_ff_exp] or NULL */
    const float     *down_exps_b;  /* [n_expert][n_embd] or NULL */
    llm_wt_t         gate_exps;    /* per expert [n_embd] -> [n_ff_exp] */
    llm_wt_t         up_exps;
    llm_wt_t         down_exps;    /* per expert [n_ff_exp] -> [n_embd] */

    llm_wt_t         gate_shexp;   /* shared experts: [n_embd] -> */
    llm_wt_t         up_shexp;     /*   [n_ff_shexp], or absent */
    llm_wt_t         down_shexp;   /* [n_ff_shexp] -> [n_embd] */
    const float     *gate_inp_shexp; /* [n_embd]: the shared experts'
                                      output times sigmoid(this . x) */

    /* qwen35moe's gated delta net (recurrent: no wq, wk, wv; wo is
     * ssm_out [ssm_inner] -> [n_embd]) */
    int              recurrent;
    uint32_t         rslot;        /* its index among recurrent layers */
    llm_wt_t         wqkv;         /* [n_embd] -> [conv_dim]: q, k, v */
    llm_wt_t         wz;           /* [n_embd] -> [ssm_inner] out gate */
    llm_wt_t         wbeta;        /* [n_embd] -> [ssm_v_heads] */
    llm_wt_t         walpha;       /* [n_embd] -> [ssm_v_heads] */
    const float     *conv1d;       /* [conv_dim][ssm_d_conv] */
    const float     *dt_bias;      /* [ssm_v_heads] */
    const float     *ssm_a;        /* [ssm_v_heads], -exp(A_log) */
    const float     *ssm_norm;     /* [ssm_state] */
} llm_layer_t;

/* Channels of a gated delta net's convolution: q, k (ssm_k_heads heads
 * each) and v (ssm_v_heads heads). */
#define llm_ssm_conv_dim(hp) \
    (2 * (hp)->ssm_k_heads * (hp)->ssm_state + (hp)->ssm_inner)

/* A MoE layer (routed experts); else the layer's FFN is dense. */
#define llm_layer_is_moe(L)  ((L)->gate_exps.data != NULL)

struct llm_model_s {
    llm_gguf_t      *gguf;
    llm_hparams_t    hp;
    int              qk_norm_whole; /* q/k norm over the whole projection */
    const char      *quant_name;

    llm_wt_t         tok_embd;     /* [n_embd] x n_vocab rows */
    const float     *output_norm;  /* [n_embd] */
    llm_wt_t         output;       /* [n_embd] -> [n_vocab] (may be tied) */
    llm_layer_t     *layers;       /* [n_layer] */
    const float     *rope_freqs;   /* [rope_dims / 2] divisors, or NULL */
    float            rope_scale;   /* linear position scale (1: none) */

    /* YaRN (rope.scaling.type yarn), ggml's rope_yarn: pair i's angle
     * mixes the interpolated (rope_scale) and the original angle by a
     * ramp over pairs [corr[0], corr[1]], times ext_factor; cos and sin
     * are scaled by mscale */
    int              yarn;
    float            yarn_ext;
    float            yarn_corr[2];
    float            yarn_mscale;

    /* Weights regrouped at load (llm_repack_rows), anonymous memory */
    uint8_t         *repack;
    size_t           repack_bytes;
    uint64_t        *regrouped;    /* their tensors' file offsets, sorted */
    size_t           n_regrouped;

    /* Storage owned by the model: expert pointer tables, converted vectors */
    void           **owned;
    size_t           n_owned;
    size_t           cap_owned;
};

#define LLM_KV_MAX_LAYERS  512

struct llm_kv_s {
    uint32_t         n_blocks;
    uint32_t         n_blocks_swa; /* the window layers' pool, 0: none */
    uint32_t         block_tokens;
    uint32_t         n_layer;
    uint32_t         k_dim;        /* n_head_kv * head_dim */
    uint32_t         v_dim;        /* n_head_kv * head_dim_v */
    llm_type_t       type;         /* F32, F16, Q8_0 or Q4_0 */
    size_t           elem;         /* F32, F16: 4 or 2 */
    size_t           k_head;       /* bytes of one KV head's K in a block
                                      (kernels/attn.h: the layouts) */
    size_t           v_head;       /* bytes of one head's part of a V row */
    int              v_in_k;       /* MLA: V is K's first head_dim_v dims
                                      (the latent), no V rows (0 bytes) */
    size_t           v_tok;        /* bytes of a V row (all heads) */
    size_t           k_block;      /* bytes of one block of K of one layer */
    size_t           v_block;
    size_t           bytes;        /* whole mapping */
    size_t           k_swa;        /* offsets: the window pool's K, */
    size_t           v_base;       /*   all V, */
    size_t           v_swa;        /*   the window pool's V */
    uint8_t         *base;         /* anonymous mapping */
    uint8_t          swa[LLM_KV_MAX_LAYERS];   /* layer in the window pool */
    uint32_t         slot[LLM_KV_MAX_LAYERS];  /* its index in its pool */
    uint8_t          rec[LLM_KV_MAX_LAYERS];   /* recurrent: no K, V */

    /* recurrent layers' states: after K and V, n_states slots of
     * state_bytes, each [recurrent layer][conv | ssm] floats: the conv
     * part the layer's last d_conv - 1 inputs [d_conv - 1][conv_dim],
     * the ssm part per value head a matrix [value dim][key dim] */
    uint32_t         n_states;
    size_t           s_base;
    size_t           state_bytes;  /* one slot */
    size_t           conv_floats;  /* per layer */
    size_t           ssm_floats;   /* per layer */
    uint32_t        *state_pos;    /* [n_states] next position of the
                                      slot's sequence; UINT32_MAX: none */
};

/* Layer rslot's conv state and ssm state in a state slot. */
static inline float *
llm_kv_conv_state(const llm_kv_t *kv, uint32_t slot, uint32_t rslot)
{
    return (float *) (kv->base + kv->s_base + slot * kv->state_bytes)
           + (size_t) rslot * (kv->conv_floats + kv->ssm_floats);
}

static inline float *
llm_kv_ssm_state(const llm_kv_t *kv, uint32_t slot, uint32_t rslot)
{
    return llm_kv_conv_state(kv, slot, rslot) + kv->conv_floats;
}

/*
 * Layout: [layer][block] of K for the full pool's layers, then for the
 * window pool's, then V the same way.  K blocks are per KV head
 * (k_head bytes each) and transposed, [head_dim][block_tokens] (dim-major,
 * so attention loads many positions of one dim at once; a quantized cache
 * interleaves its blocks the same way, kernels/attn.h); V blocks are
 * [block_tokens] rows of v_tok bytes.  blk is a block of the layer's
 * pool.
 */
static inline uint8_t *
llm_kv_k_block(const llm_kv_t *kv, uint32_t l, uint32_t blk)
{
    if (kv->swa[l]) {
        return kv->base + kv->k_swa
               + ((size_t) kv->slot[l] * kv->n_blocks_swa + blk)
                 * kv->k_block;
    }
    return kv->base + ((size_t) kv->slot[l] * kv->n_blocks + blk)
                      * kv->k_block;
}

static inline uint8_t *
llm_kv_v_row(const llm_kv_t *kv, uint32_t l, uint32_t blk, uint32_t tok)
{
    size_t  at = kv->swa[l]
                 ? kv->v_swa + ((size_t) kv->slot[l] * kv->n_blocks_swa + blk)
                               * kv->v_block
                 : kv->v_base + ((size_t) kv->slot[l] * kv->n_blocks + blk)
                                * kv->v_block;

    return kv->base + at + (size_t) tok * kv->v_tok;
}

/*
 * The block of layer l holding position pos of sequence sv: its block
 * table's, or for a pooled window layer its ring's.
 */
static inline uint32_t
llm_kv_block_of(const llm_kv_t *kv, uint32_t l, const llm_seq_view_t *sv,
    uint32_t pos)
{
    uint32_t  i = pos / kv->block_tokens;

    return kv->swa[l] ? sv->swa_blocks[i % sv->n_swa_blocks] : sv->blocks[i];
}

/* Base address of expert e of an expert weight. */
static inline const uint8_t *
llm_wt_expert(const llm_wt_t *w, uint32_t e)
{
    return w->ex[e];
}

#endif /* LLM_MODEL_IMPL_H */
