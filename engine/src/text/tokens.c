/*
 * What every tokenizer file builds on (tokenizer_int.h): token arrays,
 * UTF-8 encoding, the text -> id hash lookup.  Kept apart from
 * tokenizer.c (the entry point, which calls the BPE and SPM tokenizers)
 * so the helpers they call back into are below them, not beside them.
 */

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer_int.h"

/* FNV-1a, 32 bit: short keys, good enough spread for power-of-2 tables. */
uint32_t
llm_tok_hash_bytes(const void *p, size_t n)
{
    const uint8_t *s = p;
    uint32_t       h = 2166136261u;
    size_t         i;

    for (i = 0; i < n; i++) {
        h ^= s[i];
        h *= 16777619u;
    }
    return h;
}

int32_t
llm_tok_lookup(const llm_vocab_t *v, const char *s, size_t n)
{
    uint32_t  h, slot, id;

    h = llm_tok_hash_bytes(s, n);
    for (slot = h & v->hash_mask; ; slot = (slot + 1) & v->hash_mask) {
        id = v->hash[slot];
        if (id == 0) {
            return -1;
        }
        id--;
        if (v->text_len[id] == n
            && memcmp(v->text + v->text_off[id], s, n) == 0)
        {
            return (int32_t) id;
        }
    }
}

size_t
llm_utf8_len(uint8_t lead)
{
    static const uint8_t lens[16] = {
        1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4
    };

    return lens[lead >> 4];
}

size_t
llm_utf8_put(char *dst, uint32_t cp)
{
    uint8_t *d = (uint8_t *) dst;

    if (cp < 0x80) {
        d[0] = (uint8_t) cp;
        return 1;
    }
    if (cp < 0x800) {
        d[0] = (uint8_t) (0xc0 | (cp >> 6));
        d[1] = (uint8_t) (0x80 | (cp & 0x3f));
        return 2;
    }
    if (cp < 0x10000) {
        d[0] = (uint8_t) (0xe0 | (cp >> 12));
        d[1] = (uint8_t) (0x80 | ((cp >> 6) & 0x3f));
        d[2] = (uint8_t) (0x80 | (cp & 0x3f));
        return 3;
    }
    d[0] = (uint8_t) (0xf0 | (cp >> 18));
    d[1] = (uint8_t) (0x80 | ((cp >> 12) & 0x3f));
    d[2] = (uint8_t) (0x80 | ((cp >> 6) & 0x3f));
    d[3] = (uint8_t) (0x80 | (cp & 0x3f));
    return 4;
}

void
llm_tokens_free(llm_tokens_t *t)
{
    free(t->ids);
    t->ids = NULL;
    t->n = 0;
    t->cap = 0;
}

unsigned long  llm_tok_n_copied;

int
llm_tokens_reserve(llm_tokens_t *t, size_t want)
{
    int32_t  *p;
    size_t    cap;

    if (want <= t->cap) {
        return 0;
    }
    if (want > SIZE_MAX / 2 / sizeof(*p)) {
        return -ENOMEM;
    }
    cap = t->cap ? t->cap * 2 : 64;
    if (cap < want) {
        cap = want;
    }
    p = realloc(t->ids, cap * sizeof(*p));
    if (p == NULL) {
        return -ENOMEM;
    }
    __atomic_add_fetch(&llm_tok_n_copied, t->n, __ATOMIC_RELAXED);
    t->ids = p;
    t->cap = cap;
    return 0;
}

int
llm_tokens_push(llm_tokens_t *t, int32_t id)
{
    if (t->n == t->cap && llm_tokens_reserve(t, t->n + 1) < 0) {
        return -ENOMEM;
    }
    t->ids[t->n++] = id;
    return 0;
}
