/*
 * The paged KV cache: one anonymous mapping holding, for every layer,
 * n_blocks blocks of block_tokens K rows and as many V rows, F32 or F16.
 * Pages are touched only when written, so a large cache costs resident
 * memory only for the blocks in use.
 */

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <stdlib.h>
#include <sys/mman.h>

#include "model_impl.h"

size_t
llm_kv_block_bytes(const llm_model_t *m, uint32_t block_tokens,
    llm_type_t type)
{
    const llm_hparams_t  *hp = &m->hp;
    size_t                elem = type == LLM_TYPE_F16 ? 2 : 4;

    return (size_t) hp->n_layer * block_tokens * hp->n_head_kv
           * (hp->head_dim + hp->head_dim_v) * elem;
}

/*
 * Create a cache of n_blocks blocks of block_tokens positions for model m.
 * Only F32 and F16 are accepted.
 */
int
llm_kv_create(llm_kv_t **out, const llm_model_t *m, uint32_t n_blocks,
    uint32_t block_tokens, llm_type_t type, char *err, size_t errlen)
{
    const llm_hparams_t  *hp = &m->hp;
    llm_kv_t             *kv;
    size_t                per_block;
    void                 *p;

    *out = NULL;
    if (type != LLM_TYPE_F32 && type != LLM_TYPE_F16) {
        snprintf(err, errlen, "kv cache: type %s, expected F32 or F16",
                 llm_type_name(type));
        return -EINVAL;
    }
    if (n_blocks == 0 || block_tokens == 0 || block_tokens > 65536) {
        snprintf(err, errlen, "kv cache: %u blocks of %u tokens, expected "
                 ">= 1 blocks of 1..65536 tokens", n_blocks, block_tokens);
        return -EINVAL;
    }
    per_block = llm_kv_block_bytes(m, block_tokens, type);
    if (per_block == 0 || (size_t) n_blocks > SIZE_MAX / 2 / per_block) {
        snprintf(err, errlen, "kv cache: %u blocks of %zu bytes overflow",
                 n_blocks, per_block);
        return -EINVAL;
    }

    kv = calloc(1, sizeof(*kv));
    if (kv == NULL) {
        snprintf(err, errlen, "kv cache: out of memory");
        return -ENOMEM;
    }
    kv->n_blocks = n_blocks;
    kv->block_tokens = block_tokens;
    kv->n_layer = hp->n_layer;
    kv->k_dim = hp->n_head_kv * hp->head_dim;
    kv->v_dim = hp->n_head_kv * hp->head_dim_v;
    kv->type = type;
    kv->elem = type == LLM_TYPE_F16 ? 2 : 4;
    kv->k_block = (size_t) block_tokens * kv->k_dim * kv->elem;
    kv->v_block = (size_t) block_tokens * kv->v_dim * kv->elem;
    kv->bytes = per_block * n_blocks;

    p = mmap(NULL, kv->bytes, PROT_READ | PROT_WRITE,
             MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
        snprintf(err, errlen, "kv cache: mmap of %zu bytes: %s", kv->bytes,
                 strerror(errno));
        free(kv);
        return -ENOMEM;
    }
    kv->base = p;
    *out = kv;
    return 0;
}

void
llm_kv_free(llm_kv_t *kv)
{
    if (kv == NULL) {
        return;
    }
    munmap(kv->base, kv->bytes);
    free(kv);
}

uint32_t
llm_kv_n_blocks(const llm_kv_t *kv)
{
    return kv->n_blocks;
}

uint32_t
llm_kv_block_tokens(const llm_kv_t *kv)
{
    return kv->block_tokens;
}

void
llm_kv_copy_block(llm_kv_t *kv, uint32_t dst, uint32_t src)
{
    uint32_t  l;

    if (dst == src || dst >= kv->n_blocks || src >= kv->n_blocks) {
        return;
    }
    for (l = 0; l < kv->n_layer; l++) {
        memcpy(llm_kv_k_block(kv, l, dst), llm_kv_k_block(kv, l, src),
               kv->k_block);
        memcpy(llm_kv_v_row(kv, l, dst, 0), llm_kv_v_row(kv, l, src, 0),
               kv->v_block);
    }
}
