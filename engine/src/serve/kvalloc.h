/*
 * The KV block allocator and the prefix cache.
 *
 * Blocks are numbered 0..n_blocks-1 (the ids llm_kv_t uses) and carry a
 * reference count.  A block whose count drops to zero goes back to the
 * free list, unless it was published in the prefix cache: then it stays
 * readable, on an LRU list, until either a new sequence with the same
 * leading tokens takes a reference again (prefix reuse) or the allocator
 * needs it (eviction, oldest first).  Both kinds count as free.
 *
 * A published block is keyed by a chained hash: the hash of its
 * block_tokens token ids and of the block before it, so that a hit means
 * the whole prefix up to and including this block matches; the ids
 * themselves are kept and compared too, so a hash collision never shares
 * a wrong block.
 */

#ifndef LLM_KVALLOC_H
#define LLM_KVALLOC_H

#include <stddef.h>
#include <stdint.h>

typedef struct llm_kvalloc_s llm_kvalloc_t;

int llm_kvalloc_create(llm_kvalloc_t **out, uint32_t n_blocks,
    uint32_t block_tokens);
void llm_kvalloc_free(llm_kvalloc_t *a);

uint32_t llm_kvalloc_n_blocks(const llm_kvalloc_t *a);
uint32_t llm_kvalloc_block_tokens(const llm_kvalloc_t *a);
/* Blocks available to llm_kvalloc_get(): free plus evictable cached. */
uint32_t llm_kvalloc_n_free(const llm_kvalloc_t *a);
/* Of those, the ones that hold a cached prefix. */
uint32_t llm_kvalloc_n_cached(const llm_kvalloc_t *a);

/* A block with count 1, or -1 when none is left. */
int64_t llm_kvalloc_get(llm_kvalloc_t *a);
void llm_kvalloc_ref(llm_kvalloc_t *a, uint32_t b);
void llm_kvalloc_put(llm_kvalloc_t *a, uint32_t b);

/* The chained hash of one full block of token ids. */
uint64_t llm_kvalloc_hash(uint64_t parent, const int32_t *toks,
    uint32_t n);

/*
 * The cached block for (hash, parent, toks), with a reference taken, or
 * -1.  toks holds block_tokens ids.
 */
int64_t llm_kvalloc_lookup(llm_kvalloc_t *a, uint64_t hash,
    uint64_t parent, const int32_t *toks);

/*
 * Publish block b (held by the caller, fully written) under its hash.
 * If that prefix is already cached by another block, nothing happens.
 */
void llm_kvalloc_publish(llm_kvalloc_t *a, uint32_t b, uint64_t hash,
    uint64_t parent, const int32_t *toks);

#endif /* LLM_KVALLOC_H */
