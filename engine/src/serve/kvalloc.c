/*
 * KV block allocator with a prefix cache.  See kvalloc.h.
 *
 * The hash table is open addressing with linear probing over >= 2 x
 * n_blocks slots holding block ids (or EMPTY), deletion by backward shift,
 * keyed by the block's chained
 * hash.  The LRU list links refcount-zero cached blocks through prev/next
 * arrays; eviction takes the head.
 */

#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "kvalloc.h"

#define LLM_KVA_EMPTY  0xffffffffu
#define LLM_KVA_NONE   0xffffffffu

struct llm_kvalloc_s {
    uint32_t   n_blocks;
    uint32_t   bt;          /* tokens per block */
    uint32_t  *ref;         /* [n_blocks] */
    uint32_t  *free;        /* stack of free block ids */
    uint32_t   n_free;
    uint8_t   *cached;      /* [n_blocks] published */
    uint64_t  *hash;        /* [n_blocks] */
    uint64_t  *parent;      /* [n_blocks] */
    int32_t   *toks;        /* [n_blocks * bt] */
    uint32_t  *prev, *next; /* LRU links */
    uint32_t   lru_head, lru_tail, n_lru;
    uint32_t  *slots;       /* [n_slots] */
    uint32_t   n_slots;     /* power of two */
};

int
llm_kvalloc_create(llm_kvalloc_t **out, uint32_t n_blocks,
    uint32_t block_tokens)
{
    llm_kvalloc_t *a;
    uint32_t       i;

    *out = NULL;
    if (n_blocks == 0 || block_tokens == 0 || n_blocks >= LLM_KVA_EMPTY / 2) {
        return -EINVAL;
    }
    a = calloc(1, sizeof(*a));
    if (a == NULL) {
        return -ENOMEM;
    }
    a->n_blocks = n_blocks;
    a->bt = block_tokens;
    for (a->n_slots = 16; a->n_slots < 2 * n_blocks; a->n_slots *= 2) {
        /* void */
    }
    a->ref = calloc(n_blocks, sizeof(uint32_t));
    a->free = malloc(n_blocks * sizeof(uint32_t));
    a->cached = calloc(n_blocks, 1);
    a->hash = calloc(n_blocks, sizeof(uint64_t));
    a->parent = calloc(n_blocks, sizeof(uint64_t));
    a->toks = calloc((size_t) n_blocks * block_tokens, sizeof(int32_t));
    a->prev = malloc(n_blocks * sizeof(uint32_t));
    a->next = malloc(n_blocks * sizeof(uint32_t));
    a->slots = malloc(a->n_slots * sizeof(uint32_t));
    if (a->ref == NULL || a->free == NULL || a->cached == NULL
        || a->hash == NULL || a->parent == NULL || a->toks == NULL
        || a->prev == NULL || a->next == NULL || a->slots == NULL)
    {
        llm_kvalloc_free(a);
        return -ENOMEM;
    }
    /* pop order 0, 1, 2 ... */
    for (i = 0; i < n_blocks; i++) {
        a->free[i] = n_blocks - 1 - i;
    }
    a->n_free = n_blocks;
    memset(a->slots, 0xff, a->n_slots * sizeof(uint32_t));
    a->lru_head = a->lru_tail = LLM_KVA_NONE;
    *out = a;
    return 0;
}

void
llm_kvalloc_free(llm_kvalloc_t *a)
{
    if (a == NULL) {
        return;
    }
    free(a->ref);
    free(a->free);
    free(a->cached);
    free(a->hash);
    free(a->parent);
    free(a->toks);
    free(a->prev);
    free(a->next);
    free(a->slots);
    free(a);
}

uint32_t
llm_kvalloc_n_blocks(const llm_kvalloc_t *a)
{
    return a->n_blocks;
}

uint32_t
llm_kvalloc_block_tokens(const llm_kvalloc_t *a)
{
    return a->bt;
}

uint32_t
llm_kvalloc_n_free(const llm_kvalloc_t *a)
{
    return a->n_free + a->n_lru;
}

uint32_t
llm_kvalloc_n_cached(const llm_kvalloc_t *a)
{
    return a->n_lru;
}

static void
llm_lru_unlink(llm_kvalloc_t *a, uint32_t b)
{
    if (a->prev[b] != LLM_KVA_NONE) {
        a->next[a->prev[b]] = a->next[b];
    } else {
        a->lru_head = a->next[b];
    }
    if (a->next[b] != LLM_KVA_NONE) {
        a->prev[a->next[b]] = a->prev[b];
    } else {
        a->lru_tail = a->prev[b];
    }
    a->n_lru--;
}

static void
llm_lru_push(llm_kvalloc_t *a, uint32_t b)
{
    a->prev[b] = a->lru_tail;
    a->next[b] = LLM_KVA_NONE;
    if (a->lru_tail != LLM_KVA_NONE) {
        a->next[a->lru_tail] = b;
    } else {
        a->lru_head = b;
    }
    a->lru_tail = b;
    a->n_lru++;
}

/* Linear-probing delete with backward shift: no tombstones. */
static void
llm_slot_remove(llm_kvalloc_t *a, uint32_t b)
{
    uint32_t mask = a->n_slots - 1, i, j, k;

    for (i = (uint32_t) a->hash[b] & mask; a->slots[i] != b;
         i = (i + 1) & mask)
    {
        if (a->slots[i] == LLM_KVA_EMPTY) {
            return;
        }
    }
    for (j = i; ; ) {
        j = (j + 1) & mask;
        if (a->slots[j] == LLM_KVA_EMPTY) {
            break;
        }
        k = (uint32_t) a->hash[a->slots[j]] & mask;
        if (i <= j ? (i < k && k <= j) : (i < k || k <= j)) {
            continue;
        }
        a->slots[i] = a->slots[j];
        i = j;
    }
    a->slots[i] = LLM_KVA_EMPTY;
}

int64_t
llm_kvalloc_get(llm_kvalloc_t *a)
{
    uint32_t b;

    if (a->n_free > 0) {
        b = a->free[--a->n_free];
    } else if (a->lru_head != LLM_KVA_NONE) {
        b = a->lru_head;
        llm_lru_unlink(a, b);
        llm_slot_remove(a, b);
        a->cached[b] = 0;
    } else {
        return -1;
    }
    assert(a->ref[b] == 0);         /* free and cached blocks are unowned */
    a->ref[b] = 1;
    return b;
}

void
llm_kvalloc_ref(llm_kvalloc_t *a, uint32_t b)
{
    assert(b < a->n_blocks);
    if (a->ref[b]++ == 0 && a->cached[b]) {
        llm_lru_unlink(a, b);
    }
}

void
llm_kvalloc_put(llm_kvalloc_t *a, uint32_t b)
{
    assert(b < a->n_blocks);
    if (a->ref[b] == 0 || --a->ref[b] > 0) {
        return;
    }
    if (a->cached[b]) {
        llm_lru_push(a, b);
    } else {
        assert(a->n_free < a->n_blocks);
        a->free[a->n_free++] = b;
    }
}

uint64_t
llm_kvalloc_hash(uint64_t parent, const int32_t *toks, uint32_t n)
{
    uint64_t h = parent ^ 0x9e3779b97f4a7c15ull;

    for (uint32_t i = 0; i < n; i++) {
        h ^= (uint32_t) toks[i];
        h *= 0xff51afd7ed558ccdull;
        h ^= h >> 32;
    }
    h *= 0xc4ceb9fe1a85ec53ull;
    h ^= h >> 29;
    return h ? h : 1;
}

int64_t
llm_kvalloc_lookup(llm_kvalloc_t *a, uint64_t hash, uint64_t parent,
    const int32_t *toks)
{
    uint32_t mask = a->n_slots - 1, i, b;

    for (i = (uint32_t) hash & mask; a->slots[i] != LLM_KVA_EMPTY;
         i = (i + 1) & mask)
    {
        b = a->slots[i];
        if (a->hash[b] != hash || a->parent[b] != parent
            || memcmp(&a->toks[(size_t) b * a->bt], toks,
                      a->bt * sizeof(int32_t)) != 0)
        {
            continue;
        }
        llm_kvalloc_ref(a, b);
        return b;
    }
    return -1;
}

void
llm_kvalloc_publish(llm_kvalloc_t *a, uint32_t b, uint64_t hash,
    uint64_t parent, const int32_t *toks)
{
    uint32_t mask = a->n_slots - 1, i, s;

    if (a->cached[b]) {
        return;
    }
    for (i = (uint32_t) hash & mask; a->slots[i] != LLM_KVA_EMPTY;
         i = (i + 1) & mask)
    {
        s = a->slots[i];
        if (a->hash[s] == hash && a->parent[s] == parent
            && memcmp(&a->toks[(size_t) s * a->bt], toks,
                      a->bt * sizeof(int32_t)) == 0)
        {
            return;    /* already cached by s */
        }
    }
    a->slots[i] = b;
    a->cached[b] = 1;
    a->hash[b] = hash;
    a->parent[b] = parent;
    memcpy(&a->toks[(size_t) b * a->bt], toks, a->bt * sizeof(int32_t));
}
