/*
 * Models: hyperparameters and weights bound from a GGUF file, a paged KV
 * cache, and the batched forward pass.
 *
 * Weights are pointers into the GGUF mapping (never copied).  The forward
 * pass evaluates one batch of tokens from any number of sequences (prefill
 * chunks and decode steps mixed) and writes logits for the rows asked for.
 *
 * The KV cache is paged: n_blocks blocks of block_tokens positions; each
 * sequence owns a block table, block i holding its positions
 * [i * block_tokens, (i + 1) * block_tokens).  The caller (the scheduler)
 * allocates blocks; two sequences may share full leading blocks (prefix
 * reuse) as long as neither writes into them.
 */

#ifndef LLM_MODEL_H
#define LLM_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "gguf.h"
#include "kernels/quant.h"

typedef enum {
    LLM_ARCH_LLAMA = 0,
    LLM_ARCH_QWEN2,
    LLM_ARCH_QWEN3,
    LLM_ARCH_QWEN3MOE,
    LLM_ARCH_MINIMAX_M2,
    LLM_ARCH_GLM4MOE,
    LLM_ARCH_GPT_OSS,
    LLM_ARCH_DEEPSEEK2,
    LLM_ARCH_QWEN35MOE,
    LLM_ARCH_COUNT
} llm_arch_t;

typedef enum {
    LLM_GATING_SOFTMAX = 1,
    LLM_GATING_SIGMOID = 2
} llm_gating_t;

/* The FFN's gated activation. */
typedef enum {
    LLM_ACT_SWIGLU = 0,            /* silu(gate) * up */
    LLM_ACT_SWIGLU_OAI             /* gpt-oss: clamped, (up + 1) * gate *
                                      sigmoid(alpha * gate) */
} llm_ffn_act_t;

typedef struct {
    llm_arch_t   arch;
    char         arch_name[32];    /* general.architecture */
    char         name[128];        /* general.name, or the file's stem */
    uint32_t     n_vocab;
    uint32_t     n_ctx_train;      /* <arch>.context_length */
    uint32_t     n_ctx_max;        /* the longest window the file's RoPE
                                      covers: n_ctx_train, or with a
                                      linear or yarn scaling its factor
                                      x rope.scaling.original_context_
                                      length (n_ctx_train when absent),
                                      whichever is larger */
    uint32_t     n_embd;
    uint32_t     n_layer;          /* run; NextN/MTP blocks not counted */
    uint32_t     n_layer_file;     /* block_count */
    uint32_t     n_layer_dense;    /* leading dense layers of a MoE model */
    uint32_t     n_head;
    uint32_t     n_head_kv;
    uint32_t     head_dim;         /* key_length */
    uint32_t     head_dim_v;       /* value_length */
    uint32_t     n_ff;             /* dense FFN width (0 if all MoE) */
    uint32_t     n_expert;         /* 0: dense */
    uint32_t     n_expert_used;
    uint32_t     n_ff_exp;
    uint32_t     n_expert_shared;
    uint32_t     n_ff_shexp;       /* all shared experts together */
    llm_gating_t gating;
    int          expert_weights_norm;
    float        expert_weights_scale;
    float        rms_eps;
    float        rope_base;
    uint32_t     rope_dims;        /* rotated dims per head */
    int          rope_neox;        /* 1: NEOX pairing (i, i + d/2) */
    uint32_t     n_swa;            /* sliding window of the sliding
                                      layers (0: none) */
    llm_ffn_act_t ffn_act;
    float        swiglu_alpha;     /* LLM_ACT_SWIGLU_OAI */
    float        swiglu_limit;
    uint32_t     rope_off;         /* dims of a head before its rotated
                                      ones (deepseek2: the latent) */
    float        attn_scale;       /* of q.k; 0: 1/sqrt(head_dim) */
    /* deepseek2: multi-head latent attention (MLA), attention in the
     * latent space: the cache holds the normed latent and the shared
     * rope key (head_dim = kv_lora + rope), the values the latent
     * (head_dim_v = kv_lora) */
    uint32_t     n_lora_q;         /* 0: attn_q directly (V2-Lite) */
    uint32_t     n_lora_kv;
    uint32_t     mla_k;            /* per-head q.k dims: nope + rope */
    uint32_t     mla_v;            /* per-head value dims after v_b */
    uint32_t     n_expert_groups;  /* group-limited routing (1: none) */
    uint32_t     n_group_used;
    /* qwen35moe: gated delta net (linear attention) layers, every layer
     * but each full_attn_interval-th; their state per sequence is the
     * last d_conv - 1 inputs of the convolution and one ssm_state x
     * ssm_state matrix per value head, whatever the context length */
    uint32_t     n_layer_rec;      /* recurrent layers (0: none) */
    uint32_t     full_attn_interval;
    uint32_t     ssm_d_conv;       /* convolution kernel */
    uint32_t     ssm_state;        /* key = value dims per head */
    uint32_t     ssm_k_heads;      /* key (and query) heads */
    uint32_t     ssm_v_heads;      /* value heads (a multiple) */
    uint32_t     ssm_inner;        /* ssm_v_heads * ssm_state */
    int          attn_q_gate;      /* attn_q holds query and an output
                                      gate per head (qwen35moe) */
    uint32_t     ftype;            /* general.file_type, if present */
    uint64_t     n_params;
} llm_hparams_t;

typedef struct llm_model_s llm_model_t;

typedef struct {
    int          use_mlock;
    uint64_t     expert_cache_mb;  /* 0: all experts from the mapping */
    int          no_prefault;      /* 1: leave pages to fault in on use */
    int          no_regroup;       /* 1: no anonymous regrouped copy */
    int          bind_only;        /* 1: llm_model_prepare() comes later */
} llm_model_opts_t;

/*
 * Load and bind a model, then llm_model_prepare() it unless
 * opts->bind_only (opts may be NULL).
 */
int llm_model_load(llm_model_t **out, const char *path,
    const llm_model_opts_t *opts, char *err, size_t errlen);
/*
 * Make a bound model ready to run, once: mlock the mapping (use_mlock);
 * unless no_prefault or an expert cache, populate the page tables of a
 * file that fits in 3/4 of physical memory (MADV_POPULATE_READ), so the
 * first tokens do not pay page faults; unless no_regroup, regroup the
 * weights whose kernels want another layout into anonymous memory
 * (llm_model_regroup_bytes; the experts too when expert_cache_mb is 0).
 */
int llm_model_prepare(llm_model_t *m, const llm_model_opts_t *opts,
    char *err, size_t errlen);
/* The anonymous bytes regrouping writes, with or without the experts. */
uint64_t llm_model_regroup_bytes(const llm_model_t *m, int experts);
void llm_model_free(llm_model_t *m);
const llm_hparams_t *llm_model_hparams(const llm_model_t *m);
const llm_gguf_t *llm_model_gguf(const llm_model_t *m);
const char *llm_model_quant_name(const llm_model_t *m);  /* "Q4_0" ... */
const char *llm_arch_name(llm_arch_t a);

/* Paged KV cache. */
typedef struct llm_kv_s llm_kv_t;

/*
 * A model with recurrent layers (qwen35moe's gated delta net) keeps their
 * state per sequence in n_states slots of the cache instead of K and V
 * (llm_seq_view_t.state names a sequence's slot).  llm_kv_create and
 * llm_kv_create_swa give such a model min(n_blocks, 64) slots.
 */
int llm_kv_create_rs(llm_kv_t **out, const llm_model_t *m,
    uint32_t n_blocks, uint32_t n_blocks_swa, uint32_t n_states,
    uint32_t block_tokens, llm_type_t type, char *err, size_t errlen);
uint32_t llm_kv_n_states(const llm_kv_t *kv);
/* Bytes of one sequence's recurrent state (0: no recurrent layers). */
size_t llm_kv_state_bytes(const llm_model_t *m);

int llm_kv_create(llm_kv_t **out, const llm_model_t *m, uint32_t n_blocks,
    uint32_t block_tokens, llm_type_t type /* F32 or F16 */, char *err,
    size_t errlen);
/*
 * The same with the sliding-window layers (gpt-oss) in a pool of their
 * own of n_blocks_swa blocks (0: they keep every position like the
 * others): each sequence gives them a ring of llm_kv_swa_ring() blocks
 * (llm_seq_view_t.swa_blocks), so their memory is bounded by the window,
 * not by the sequence.
 */
int llm_kv_create_swa(llm_kv_t **out, const llm_model_t *m,
    uint32_t n_blocks, uint32_t n_blocks_swa, uint32_t block_tokens,
    llm_type_t type, char *err, size_t errlen);
void llm_kv_free(llm_kv_t *kv);
/* 0 if a cache of this type (F32, F16, Q8_0, Q4_0) and block size can
 * hold this model's heads, else -EINVAL with err saying why. */
int llm_kv_type_check(const llm_model_t *m, llm_type_t type,
    uint32_t block_tokens, char *err, size_t errlen);
uint32_t llm_kv_n_blocks(const llm_kv_t *kv);
uint32_t llm_kv_n_blocks_swa(const llm_kv_t *kv);
uint32_t llm_kv_block_tokens(const llm_kv_t *kv);
size_t llm_kv_bytes(const llm_kv_t *kv);
/* Bytes one block takes across all layers (K and V). */
size_t llm_kv_block_bytes(const llm_model_t *m, uint32_t block_tokens,
    llm_type_t type);
/* ... across the layers of one group: LLM_KV_FULL (those a block table
 * addresses when the window layers are pooled), LLM_KV_SWA, LLM_KV_ALL. */
#define LLM_KV_ALL   0
#define LLM_KV_FULL  1
#define LLM_KV_SWA   2
size_t llm_kv_block_bytes_of(const llm_model_t *m, uint32_t block_tokens,
    llm_type_t type, int group);
/*
 * The ring a sequence gives the window layers: enough blocks for the
 * window before a step's first token and the max_step tokens of a step;
 * 0 when the model has no sliding-window layers.
 */
uint32_t llm_kv_swa_ring(const llm_model_t *m, uint32_t block_tokens,
    uint32_t max_step);
/* Copy one block's contents to another (copy-on-write of a shared tail). */
void llm_kv_copy_block(llm_kv_t *kv, uint32_t dst, uint32_t src);

typedef struct {
    const uint32_t *blocks;        /* block table */
    uint32_t        n_blocks;
    const uint32_t *swa_blocks;    /* ring of the window pool's blocks */
    uint32_t        n_swa_blocks;  /*   (when the cache has the pool) */
    uint32_t        state;         /* recurrent layers: the state slot
                                      (< llm_kv_n_states); a batch that
                                      starts the sequence at position 0
                                      clears it, any other must continue
                                      where the slot's last batch ended */
} llm_seq_view_t;

typedef struct {
    uint32_t              n_tokens;
    const int32_t        *tokens;  /* [n_tokens] */
    const int32_t        *pos;     /* [n_tokens] position in its sequence */
    const int32_t        *seq;     /* [n_tokens] index into seqs */
    const uint8_t        *logits;  /* [n_tokens] nonzero: want logits */
    uint32_t              n_seqs;
    const llm_seq_view_t *seqs;    /* [n_seqs] */
} llm_batch_t;

/*
 * A context: the thread pool and every scratch buffer of the forward pass,
 * allocated once for batches of up to max_tokens tokens.
 */
typedef struct llm_ctx_s llm_ctx_t;

int llm_ctx_create(llm_ctx_t **out, const llm_model_t *m, llm_kv_t *kv,
    uint32_t n_threads, uint32_t max_tokens, char *err, size_t errlen);
void llm_ctx_free(llm_ctx_t *c);
/* The bytes of the context's buffers (lazily backed: at most resident). */
size_t llm_ctx_buffer_bytes(const llm_ctx_t *c);
/*
 * For tests and benchmarks: the attention's score tile, in positions (a
 * multiple of the cache's block tokens; the default is about 256).  Parts
 * are 8 tiles.  Results change by rounding only.  0 or -EINVAL/-ENOMEM.
 */
int llm_ctx_set_attn_tile(llm_ctx_t *c, uint32_t tile);

/*
 * Evaluate a batch.  Within one sequence, tokens must come in increasing
 * position order and every earlier position must already be in the cache
 * or earlier in this batch.  Writes K/V of every token into its sequence's
 * blocks, and for each token with logits[i] set, one row of n_vocab floats
 * to out, in batch order.  Returns 0 or a negative errno with err set.
 * With recurrent layers, a sequence's positions in the batch are
 * consecutive and advance its state slot (see llm_seq_view_t.state); a
 * failed call leaves the slots of its sequences usable only from 0.
 */
int llm_forward(llm_ctx_t *c, const llm_batch_t *b, float *out, char *err,
    size_t errlen);
/*
 * The same batch without the head: for each token with logits[i] set, one
 * row of n_embd floats, the last layer's hidden state after the output
 * norm (what llama.cpp pools for embeddings), to out in batch order.
 */
int llm_forward_hidden(llm_ctx_t *c, const llm_batch_t *b, float *out,
    char *err, size_t errlen);

/*
 * Experts from somewhere other than the mapping (streamed experts,
 * docs/STREAMING.md).
 *
 * In each MoE layer, after routing, the forward pass calls acquire() once
 * with the distinct experts the batch needs (ascending ids); the source
 * fills ptrs[i] with the base of expert experts[i]'s gate, up and down
 * matrices (the same bytes as the file's slices, see llm_model_expert_
 * slices, or those bytes regrouped: ptrs[i].type) and may block until
 * they are resident.  release() follows once
 * the layer's expert phase is over; until then the pointers must stay
 * valid.  acquire() returning < 0 fails the forward call with its err.
 * prefetch(), when set, is a hint: the experts the next layer's router
 * picks for this layer's normed hidden state, before this layer's experts
 * run.  Callbacks run on the thread calling llm_forward.
 */
typedef struct {
    const void  *gate;
    const void  *up;
    const void  *down;
    /* the type of the bytes at gate, up, down: the slices' (the file's),
     * or the type the source regrouped them into in place
     * (llm_repack_type: the same bytes, the regrouped rows' kernels) */
    uint32_t     type[3];
} llm_expert_ptrs_t;

typedef struct {
    void  *ud;
    int  (*acquire)(void *ud, uint32_t layer, const uint32_t *experts,
                    uint32_t n, llm_expert_ptrs_t *ptrs, char *err,
                    size_t errlen);
    void (*release)(void *ud, uint32_t layer, const uint32_t *experts,
                    uint32_t n);
    void (*prefetch)(void *ud, uint32_t layer, const uint32_t *experts,
                     uint32_t n);
} llm_expert_source_t;

/* NULL restores reading experts from the mapping. */
void llm_ctx_set_expert_source(llm_ctx_t *c, const llm_expert_source_t *src);

/* Where expert e of a layer lives in the file: [0] gate, [1] up, [2] down,
 * absolute file offsets and byte counts (each contiguous), their type and
 * shape. */
typedef struct {
    uint64_t  offset[3];
    uint64_t  bytes[3];
    uint32_t  type[3];
    uint32_t  n_in[3];      /* values per row */
    uint32_t  n_out[3];     /* rows */
} llm_expert_slices_t;

/* 0; -ENOENT for a layer without routed experts (a leading dense layer);
 * -EINVAL for a layer or expert out of range. */
int llm_model_expert_slices(const llm_model_t *m, uint32_t layer,
    uint32_t expert, llm_expert_slices_t *out);

/*
 * Nonzero when the tensor whose data starts at this file offset was
 * regrouped into anonymous memory at load: the forward pass no longer
 * reads its pages of the mapping.
 */
int llm_model_regrouped(const llm_model_t *m, uint64_t file_offset);

#endif /* LLM_MODEL_H */
