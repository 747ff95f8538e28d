/*
 * Deterministic synthetic GGUF models (the engine of llm-mkmodel).
 *
 * Writes a model of any supported architecture with the metadata keys,
 * tensor names and shapes llama.cpp's converter writes, random weights from
 * a seed, and a small byte-level BPE vocabulary with a ChatML tool-calling
 * template (vocabgen.h).  Tensors are generated and written slab by slab,
 * so memory stays small whatever the file size.  Each row's random stream
 * depends only on (seed, tensor name, row), so the bytes do not depend on
 * the thread count.
 */

#ifndef LLM_MKMODEL_H
#define LLM_MKMODEL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef struct {
    char        arch[32];       /* llama, qwen2, qwen3, qwen3moe, minimax-m2,
                                   glm4moe, gpt-oss, deepseek2,
                                   qwen35moe */
    char        name[64];       /* general.name */
    char        pre[16];        /* tokenizer.ggml.pre: qwen2 or gpt-2 */
    uint32_t    n_vocab;
    uint32_t    n_ctx;
    uint32_t    n_embd;
    uint32_t    n_layer;
    uint32_t    n_head;
    uint32_t    n_head_kv;
    uint32_t    head_dim;
    uint32_t    n_ff;           /* dense FFN (metadata only for MoE archs) */
    uint32_t    n_expert;       /* 0 = dense */
    uint32_t    n_expert_used;
    uint32_t    n_ff_exp;       /* expert FFN */
    uint32_t    n_layer_dense;  /* glm4moe: leading dense layers */
    uint32_t    n_expert_shared;/* glm4moe: shared experts (of n_ff_exp) */
    uint32_t    n_nextn;        /* glm4moe: NextN blocks after n_layer */
    uint32_t    n_swa;          /* gpt-oss: sliding window */
    float       yarn_factor;    /* gpt-oss: rope.scaling yarn factor */
    uint32_t    yarn_orig_ctx;  /*   and original_context_length */
    uint32_t    n_lora_q;       /* deepseek2 (MLA; head_dim is the q.k
                                   head, key_length_mla): q LoRA rank, */
    uint32_t    n_lora_kv;      /*   the latent's rank, */
    uint32_t    mla_v;          /*   the value head after v_b, */
    uint32_t    n_groups;       /*   expert groups and those used */
    uint32_t    n_groups_used;
    uint32_t    ssm_state;      /* qwen35moe's gated delta net layers
                                   (3 of every 4; head_dim is the full
                                   attention's): dims of a head, */
    uint32_t    ssm_k_heads;    /*   key heads, */
    uint32_t    ssm_v_heads;    /*   value heads */
    uint32_t    rope_dim;
    float       rope_base;
    float       rope_linear;    /* > 0: rope.scaling.type linear with this
                                   factor (not with gpt-oss's yarn) */
    float       rope_freqs;     /* > 0: a rope_freqs.weight tensor, every
                                   pair's divisor this value */
    float       eps;
    uint32_t    type;           /* ggml type of the weight matrices */
    uint64_t    seed;
    uint32_t    n_threads;
    int         tied;           /* no output.weight: the head is
                                   token_embd (small Qwen models) */
    int         split_experts;  /* llama: old per-expert tensors
                                   blk.N.ffn_{gate,up,down}.E.weight, same
                                   values as the merged _exps layout */
    int         pooling;        /* -1: no <arch>.pooling_type key; else
                                   llama.cpp's enum (1 mean, 2 cls, 3 last):
                                   an embedding model */
    const char *chat_template;  /* tokenizer.chat_template; NULL: the
                                   generated vocabulary's ChatML one */
    const int32_t *script;      /* gpt-oss, glm4moe: the last two prompt
                                   tokens, then the answer greedy decoding
                                   follows (mkmodel_script.h); NULL:
                                   random weights */
    uint32_t    n_script;
} llm_mkmodel_params_t;

/* Names of the presets, NULL-terminated (for --help). */
extern const char *const llm_mkmodel_presets[];

/*
 * Fill p from a preset ("tiny", "bench-moe", "tiny-llama", ...).  Returns 0
 * or -EINVAL with err naming the preset.
 */
int llm_mkmodel_preset(llm_mkmodel_params_t *p, const char *preset,
    char *err, size_t errlen);

/* Architecture defaults (rope base, eps, pre, rope_dim) for p->arch. */
int llm_mkmodel_arch_defaults(llm_mkmodel_params_t *p, char *err,
    size_t errlen);

/* Check every hyperparameter against the architecture and each other. */
int llm_mkmodel_check(const llm_mkmodel_params_t *p, char *err,
    size_t errlen);

/*
 * Write the model to path.  log (may be NULL) gets one line per tensor.
 * Returns 0, or a negative errno with err set; a failed file is removed.
 */
int llm_mkmodel_write(const llm_mkmodel_params_t *p, const char *path,
    FILE *log, char *err, size_t errlen);

/*
 * Run fn(arg, ith) on nth threads (the caller is ith 0) and wait for all:
 * the tools' fan-out per slab.  Work inside is split by an atomic counter.
 */
void llm_mk_parallel(uint32_t nth, void (*fn)(void *arg, uint32_t ith),
    void *arg);

/* The llama.cpp general.file_type for a file whose matrices are type t. */
uint32_t llm_mkmodel_file_type(uint32_t t);

#endif /* LLM_MKMODEL_H */
