/*
 * The paged KV cache: one anonymous mapping holding, for every layer,
 * blocks of block_tokens K rows and as many V rows, F32 or F16.  Pages
 * are touched only when written, so a large cache costs resident memory
 * only for the blocks in use.
 *
 * Two pools.  Full-attention layers (and sliding-window layers when no
 * window pool is asked) have n_blocks blocks each, addressed by a
 * sequence's block table.  With n_blocks_swa > 0, the sliding-window
 * layers have a pool of their own of that many blocks, and a sequence
 * gives them a ring of blocks (llm_seq_view_t.swa_blocks) that its
 * positions go around: a window layer keeps what its window can see, not
 * the whole sequence (llm_kv_swa_ring sizes the ring).
 *
 * Recurrent layers (qwen35moe's gated delta net) have no K and V: their
 * state per sequence has a fixed size, in n_states slots after the
 * blocks; llm_forward clears a slot when its sequence starts at 0.
 */

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <stdlib.h>
#include <sys/mman.h>

#include "kernels/attn.h"
#include "model_impl.h"

/* Layers of the window group (pooled apart), given the pool is used. */
static uint32_t
llm_kv_n_swa_layers(const llm_model_t *m)
{
    uint32_t  l, n = 0;

    for (l = 0; l < m->hp.n_layer; l++) {
        n += m->layers[l].swa != 0;
    }
    return n;
}

size_t
llm_kv_block_bytes_of(const llm_model_t *m, uint32_t block_tokens,
    llm_type_t type, int group)
{
    const llm_hparams_t  *hp = &m->hp;
    uint32_t              n = llm_kv_n_swa_layers(m);
    uint32_t              att = hp->n_layer - hp->n_layer_rec;

    n = group == LLM_KV_SWA ? n : group == LLM_KV_FULL ? att - n : att;
    /* MLA: the value is the latent the key starts with, kept once */
    return (size_t) n * block_tokens * hp->n_head_kv
           * (llm_row_bytes(type, hp->head_dim)
              + (hp->n_lora_kv > 0 ? 0 : llm_row_bytes(type, hp->head_dim_v)));
}

size_t
llm_kv_block_bytes(const llm_model_t *m, uint32_t block_tokens,
    llm_type_t type)
{
    return llm_kv_block_bytes_of(m, block_tokens, type, LLM_KV_ALL);
}

uint32_t
llm_kv_swa_ring(const llm_model_t *m, uint32_t block_tokens,
    uint32_t max_step)
{
    uint32_t  w = m->hp.n_swa;

    if (w == 0 || llm_kv_n_swa_layers(m) == 0 || block_tokens == 0) {
        return 0;
    }
    /* the window before a step's first token, and the step itself */
    return (w + max_step + block_tokens - 1) / block_tokens + 1;
}

size_t
llm_kv_state_bytes(const llm_model_t *m)
{
    const llm_hparams_t  *hp = &m->hp;

    if (hp->n_layer_rec == 0) {
        return 0;
    }
    return (size_t) hp->n_layer_rec * sizeof(float)
           * ((size_t) (hp->ssm_d_conv - 1) * llm_ssm_conv_dim(hp)
              + (size_t) hp->ssm_v_heads * hp->ssm_state * hp->ssm_state);
}

uint32_t
llm_kv_n_states(const llm_kv_t *kv)
{
    return kv->n_states;
}

int
llm_kv_type_check(const llm_model_t *m, llm_type_t type,
    uint32_t block_tokens, char *err, size_t errlen)
{
    const llm_hparams_t  *hp = &m->hp;

    if (type == LLM_TYPE_F32 || type == LLM_TYPE_F16) {
        return 0;
    }
    if (type != LLM_TYPE_Q8_0 && type != LLM_TYPE_Q4_0) {
        snprintf(err, errlen, "kv cache: type %s, expected f32, f16, q8_0 "
                 "or q4_0", llm_type_name(type));
        return -EINVAL;
    }
    if (hp->n_lora_kv > 0) {
        snprintf(err, errlen, "kv cache: a %s cache of an MLA model (%s) "
                 "is not supported yet: its f16 cache keeps one %u-value "
                 "latent per token and layer; use f16",
                 llm_type_name(type), hp->arch_name, hp->head_dim);
        return -EINVAL;
    }
    if (hp->head_dim % 32 != 0 || hp->head_dim_v % 32 != 0) {
        snprintf(err, errlen, "kv cache: a %s cache holds blocks of 32 "
                 "values of a head; this model's heads have %u (keys) and "
                 "%u (values) dims: use f16", llm_type_name(type),
                 hp->head_dim, hp->head_dim_v);
        return -EINVAL;
    }
    if (block_tokens % 16 != 0) {
        snprintf(err, errlen, "kv cache: a %s cache needs blocks of a "
                 "multiple of 16 tokens, got %u", llm_type_name(type),
                 block_tokens);
        return -EINVAL;
    }
    return 0;
}

/*
 * Create a cache of n_blocks blocks of block_tokens positions for model m
 * (n_blocks_swa > 0: the sliding-window layers in a pool of their own of
 * that many blocks; n_states state slots for a model with recurrent
 * layers, ignored for others).  F32, F16, Q8_0 or Q4_0
 * (llm_kv_type_check).
 */
int
llm_kv_create_rs(llm_kv_t **out, const llm_model_t *m, uint32_t n_blocks,
    uint32_t n_blocks_swa, uint32_t n_states, uint32_t block_tokens,
    llm_type_t type, char *err, size_t errlen)
{
    const llm_hparams_t  *hp = &m->hp;
    llm_kv_t             *kv;
    size_t                full, swa, k_all, v_all, sb;
    uint32_t              l, nf = 0, ns = 0;
    void                 *p;

    *out = NULL;
    if (llm_kv_type_check(m, type, block_tokens, err, errlen) < 0) {
        return -EINVAL;
    }
    if (n_blocks == 0 || block_tokens == 0 || block_tokens > 65536) {
        snprintf(err, errlen, "kv cache: %u blocks of %u tokens, expected "
                 ">= 1 blocks of 1..65536 tokens", n_blocks, block_tokens);
        return -EINVAL;
    }
    if (n_blocks_swa > 0 && llm_kv_n_swa_layers(m) == 0) {
        n_blocks_swa = 0;           /* no window layers: nothing to pool */
    }
    full = llm_kv_block_bytes_of(m, block_tokens, type,
                                 n_blocks_swa ? LLM_KV_FULL : LLM_KV_ALL);
    swa = n_blocks_swa ? llm_kv_block_bytes_of(m, block_tokens, type,
                                               LLM_KV_SWA) : 0;
    sb = llm_kv_state_bytes(m);
    n_states = sb > 0 ? n_states : 0;
    if (sb > 0 && (n_states == 0 || n_states > 65536)) {
        snprintf(err, errlen, "kv cache: %u recurrent state slots, "
                 "expected 1..65536 for a model with recurrent layers",
                 n_states);
        return -EINVAL;
    }
    if (full + swa == 0
        || (size_t) n_blocks + n_blocks_swa > SIZE_MAX / 4 / (full + swa)
        || (sb > 0 && (size_t) n_states > SIZE_MAX / 4 / sb))
    {
        snprintf(err, errlen, "kv cache: %u blocks overflow", n_blocks);
        return -EINVAL;
    }

    kv = calloc(1, sizeof(*kv));
    if (kv == NULL) {
        snprintf(err, errlen, "kv cache: out of memory");
        return -ENOMEM;
    }
    kv->n_blocks = n_blocks;
    kv->n_blocks_swa = n_blocks_swa;
    kv->block_tokens = block_tokens;
    kv->n_layer = hp->n_layer;
    kv->k_dim = hp->n_head_kv * hp->head_dim;
    kv->v_dim = hp->n_head_kv * hp->head_dim_v;
    kv->type = type;
    kv->elem = type == LLM_TYPE_F16 ? 2 : 4;
    kv->k_head = llm_attn_k_head_bytes(type, hp->head_dim, block_tokens);
    kv->v_in_k = hp->n_lora_kv > 0;
    kv->v_head = kv->v_in_k ? 0 : llm_attn_v_row_bytes(type, hp->head_dim_v);
    kv->v_tok = (size_t) hp->n_head_kv * kv->v_head;
    kv->k_block = (size_t) hp->n_head_kv * kv->k_head;
    kv->v_block = (size_t) block_tokens * kv->v_tok;
    for (l = 0; l < hp->n_layer && l < LLM_KV_MAX_LAYERS; l++) {
        if (m->layers[l].recurrent) {
            kv->rec[l] = 1;         /* no K and V: a state slot part */
            continue;
        }
        kv->swa[l] = n_blocks_swa && m->layers[l].swa != 0;
        kv->slot[l] = kv->swa[l] ? ns++ : nf++;
    }
    if (hp->n_layer > LLM_KV_MAX_LAYERS) {
        snprintf(err, errlen, "kv cache: %u layers, at most %u",
                 hp->n_layer, LLM_KV_MAX_LAYERS);
        free(kv);
        return -EINVAL;
    }
    kv->n_states = n_states;
    kv->state_bytes = sb;
    if (sb > 0) {
        kv->conv_floats = (size_t) (hp->ssm_d_conv - 1)
                          * llm_ssm_conv_dim(hp);
        kv->ssm_floats = (size_t) hp->ssm_v_heads * hp->ssm_state
                         * hp->ssm_state;
        kv->state_pos = malloc(n_states * sizeof(uint32_t));
        if (kv->state_pos == NULL) {
            snprintf(err, errlen, "kv cache: out of memory");
            free(kv);
            return -ENOMEM;
        }
        memset(kv->state_pos, 0xff, n_states * sizeof(uint32_t));
    }
    /* K of the full pool, K of the window pool, then V likewise */
    k_all = ((size_t) nf * n_blocks + (size_t) ns * n_blocks_swa)
            * kv->k_block;
    v_all = ((size_t) nf * n_blocks + (size_t) ns * n_blocks_swa)
            * kv->v_block;
    kv->k_swa = (size_t) nf * n_blocks * kv->k_block;
    kv->v_base = k_all;
    kv->v_swa = k_all + (size_t) nf * n_blocks * kv->v_block;
    kv->s_base = k_all + v_all;
    kv->bytes = kv->s_base + (size_t) n_states * sb;

    p = mmap(NULL, kv->bytes, PROT_READ | PROT_WRITE,
             MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
        snprintf(err, errlen, "kv cache: mmap of %zu bytes: %s", kv->bytes,
                 strerror(errno));
        free(kv->state_pos);
        free(kv);
        return -ENOMEM;
    }
    /* 2 MB pages where the kernel has them (THP "madvise" mode is
     * Debian's default): a decode step at depth reads every block of
     * its sequence in every layer, 64k 4 KB pages a token at 16k on the
     * bench model, and each was a TLB walk.  The pool is the budget the
     * user gave (--kv-mb), so backing it in 2 MB steps costs nothing
     * it was not meant to use. */
    (void) madvise(p, kv->bytes, MADV_HUGEPAGE);
    kv->base = p;
    *out = kv;
    return 0;
}

int
llm_kv_create_swa(llm_kv_t **out, const llm_model_t *m, uint32_t n_blocks,
    uint32_t n_blocks_swa, uint32_t block_tokens, llm_type_t type, char *err,
    size_t errlen)
{
    return llm_kv_create_rs(out, m, n_blocks, n_blocks_swa,
                            n_blocks < 64 ? n_blocks : 64, block_tokens,
                            type, err, errlen);
}

int
llm_kv_create(llm_kv_t **out, const llm_model_t *m, uint32_t n_blocks,
    uint32_t block_tokens, llm_type_t type, char *err, size_t errlen)
{
    return llm_kv_create_swa(out, m, n_blocks, 0, block_tokens, type, err,
                             errlen);
}

void
llm_kv_free(llm_kv_t *kv)
{
    if (kv == NULL) {
        return;
    }
    munmap(kv->base, kv->bytes);
    free(kv->state_pos);
    free(kv);
}

uint32_t
llm_kv_n_blocks(const llm_kv_t *kv)
{
    return kv->n_blocks;
}

uint32_t
llm_kv_n_blocks_swa(const llm_kv_t *kv)
{
    return kv->n_blocks_swa;
}

uint32_t
llm_kv_block_tokens(const llm_kv_t *kv)
{
    return kv->block_tokens;
}

size_t
llm_kv_bytes(const llm_kv_t *kv)
{
    return kv->bytes;
}

/* Copies a block of the full pool (the layers a block table addresses). */
void
llm_kv_copy_block(llm_kv_t *kv, uint32_t dst, uint32_t src)
{
    uint32_t  l;

    if (dst == src || dst >= kv->n_blocks || src >= kv->n_blocks) {
        return;
    }
    for (l = 0; l < kv->n_layer; l++) {
        if (kv->swa[l] || kv->rec[l]) {
            continue;
        }
        memcpy(llm_kv_k_block(kv, l, dst), llm_kv_k_block(kv, l, src),
               kv->k_block);
        memcpy(llm_kv_v_row(kv, l, dst, 0), llm_kv_v_row(kv, l, src, 0),
               kv->v_block);
    }
}
