/*
 * SentencePiece BPE ("llama" vocabularies), as llama.cpp runs it.
 *
 * Spaces become "▁" (and one is prepended at the start of the text and
 * after a special token when add_space_prefix is set), the text is split
 * into UTF-8 characters, and adjacent symbols whose concatenation is a
 * vocabulary piece are merged, highest score first (leftmost on ties),
 * with a heap and lazy deletion.  Symbols left that are no piece fall back
 * to <0xNN> byte tokens, or <unk> when the vocabulary has none.
 */

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer_int.h"

typedef struct {
    uint32_t  off;          /* into the escaped text */
    uint32_t  n;            /* bytes; 0 once merged away */
    int32_t   prev;
    int32_t   next;
} sym_t;

typedef struct {
    float     score;
    int32_t   left;
    int32_t   right;
    uint32_t  size;
} spm_bigram_t;

typedef struct {
    spm_bigram_t  *h;
    size_t         n;
    size_t         cap;
} spm_heap_t;

static inline int
spm_before(const spm_bigram_t *a, const spm_bigram_t *b)
{
    return a->score > b->score || (a->score == b->score && a->left < b->left);
}

static int
spm_push(spm_heap_t *q, spm_bigram_t bg)
{
    size_t         i, p;
    spm_bigram_t  *h;

    if (q->n == q->cap) {
        size_t cap = q->cap ? q->cap * 2 : 64;

        h = realloc(q->h, cap * sizeof(*h));
        if (h == NULL) {
            return -ENOMEM;
        }
        q->h = h;
        q->cap = cap;
    }
    h = q->h;
    for (i = q->n++; i > 0; i = p) {
        p = (i - 1) / 2;
        if (!spm_before(&bg, &h[p])) {
            break;
        }
        h[i] = h[p];
    }
    h[i] = bg;
    return 0;
}

static spm_bigram_t
spm_pop(spm_heap_t *q)
{
    spm_bigram_t  top = q->h[0], last;
    size_t        i = 0, c, n;

    n = --q->n;
    if (n == 0) {
        return top;
    }
    last = q->h[n];
    for (;;) {
        c = 2 * i + 1;
        if (c >= n) {
            break;
        }
        if (c + 1 < n && spm_before(&q->h[c + 1], &q->h[c])) {
            c++;
        }
        if (!spm_before(&q->h[c], &last)) {
            break;
        }
        q->h[i] = q->h[c];
        i = c;
    }
    q->h[i] = last;
    return top;
}

/* Pieces that merging may produce: ordinary and user-defined ones. */
static int32_t
spm_piece(const llm_vocab_t *v, const char *s, size_t n)
{
    int32_t  id = llm_tok_lookup(v, s, n);

    if (id >= 0 && v->ttype[id] != LLM_TT_NORMAL
        && v->ttype[id] != LLM_TT_USER_DEFINED
        && v->ttype[id] != LLM_TT_UNDEFINED)
    {
        return -1;
    }
    return id;
}

static int
spm_try(const llm_vocab_t *v, const char *t, const sym_t *sy, spm_heap_t *q,
    int32_t left, int32_t right)
{
    spm_bigram_t  bg;
    int32_t       id;

    if (left < 0 || right < 0) {
        return 0;
    }
    id = spm_piece(v, t + sy[left].off, sy[left].n + sy[right].n);
    if (id < 0) {
        return 0;
    }
    bg.score = v->scores[id];
    bg.left = left;
    bg.right = right;
    bg.size = sy[left].n + sy[right].n;
    return spm_push(q, bg);
}

/*
 * Merge the symbols of t[0..tl) (one chunk of escaped text) and append the
 * resulting pieces, or their bytes, to out.  sy has room for tl symbols.
 */
static int
spm_chunk(const llm_vocab_t *v, const char *t, size_t tl, sym_t *sy,
    spm_heap_t *q, llm_tokens_t *out)
{
    spm_bigram_t   bg;
    size_t         i, n = 0, cl;
    int32_t        id, k;
    int            r;

    for (i = 0; i < tl; i += cl) {
        /* a character, or one byte of invalid UTF-8 (to byte fallback) */
        r = llm_utf8_check((const uint8_t *) t + i, tl - i);
        cl = r > 0 ? (size_t) r : 1;
        sy[n].off = (uint32_t) i;
        sy[n].n = (uint32_t) cl;
        sy[n].prev = (int32_t) n - 1;
        sy[n].next = i + cl < tl ? (int32_t) n + 1 : -1;
        n++;
    }

    q->n = 0;
    for (i = 1; i < n; i++) {
        if (spm_try(v, t, sy, q, (int32_t) i - 1, (int32_t) i) < 0) {
            return -ENOMEM;
        }
    }

    while (q->n > 0) {
        bg = spm_pop(q);
        if (sy[bg.left].n == 0 || sy[bg.right].n == 0
            || sy[bg.left].n + sy[bg.right].n != bg.size)
        {
            continue;
        }
        sy[bg.left].n += sy[bg.right].n;
        sy[bg.right].n = 0;
        sy[bg.left].next = sy[bg.right].next;
        if (sy[bg.right].next >= 0) {
            sy[sy[bg.right].next].prev = bg.left;
        }
        if (spm_try(v, t, sy, q, sy[bg.left].prev, bg.left) < 0
            || spm_try(v, t, sy, q, bg.left, sy[bg.left].next) < 0)
        {
            return -ENOMEM;
        }
    }

    for (k = n ? 0 : -1; k >= 0; k = sy[k].next) {
        id = spm_piece(v, t + sy[k].off, sy[k].n);
        if (id >= 0) {
            if (llm_tok_push(out, id) < 0) {
                return -ENOMEM;
            }
            continue;
        }
        for (i = 0; i < sy[k].n; i++) {
            id = v->byte_tok[(uint8_t) t[sy[k].off + i]];
            if (id < 0) {
                id = v->unk;
            }
            if (id >= 0 && llm_tok_push(out, id) < 0) {
                return -ENOMEM;
            }
        }
    }
    return 0;
}

#define SPM_SPACE  "\xe2\x96\x81"

/*
 * SentencePiece BPE of one plain fragment.  When no piece of the
 * vocabulary has "▁" anywhere but in a leading run (v->spm_split), no
 * piece can span the start of a "▁" that follows another character, so
 * the text is merged word by word there: the same result, with small heaps.
 */
int
llm_spm_tokenize(const llm_vocab_t *v, const char *text, size_t len,
    int add_prefix, llm_tokens_t *out, char *err, size_t errlen)
{
    char          *t = NULL;
    sym_t         *sy = NULL;
    spm_heap_t     q = { 0 };
    size_t         tl = 0, i, start;
    int            rc = -ENOMEM;

    if (len > 0x3fffffff) {
        ERR("tokenize: text too long (%zu bytes)", len);
        return -E2BIG;
    }

    /* escape: every space (and the optional prefix space) becomes ▁ */
    t = malloc(3 * (len + 1));
    sy = malloc((len + 3) * sizeof(*sy));
    if (t == NULL || sy == NULL) {
        goto done;
    }
    if (add_prefix) {
        memcpy(t, SPM_SPACE, 3);
        tl = 3;
    }
    for (i = 0; i < len; i++) {
        if (text[i] == ' ') {
            memcpy(t + tl, SPM_SPACE, 3);
            tl += 3;
        } else {
            t[tl++] = text[i];
        }
    }

    if (!v->spm_split) {
        rc = spm_chunk(v, t, tl, sy, &q, out);
        goto done;
    }
    start = 0;
    for (i = 1; i + 3 <= tl; i++) {
        if (memcmp(t + i, SPM_SPACE, 3) == 0
            && !(i >= 3 && memcmp(t + i - 3, SPM_SPACE, 3) == 0))
        {
            if ((rc = spm_chunk(v, t + start, i - start, sy, &q, out)) < 0) {
                goto done;
            }
            start = i;
            i += 2;
        }
    }
    rc = spm_chunk(v, t + start, tl - start, sy, &q, out);

done:
    if (rc < 0) {
        ERR("tokenize: out of memory");
    }
    free(t);
    free(sy);
    free(q.h);
    return rc;
}
