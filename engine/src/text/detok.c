/*
 * Streaming detokenizer.
 *
 * Token pieces are appended to a raw byte tail; complete UTF-8 characters
 * move from the tail into the held text (invalid sequences become U+FFFD,
 * one per maximal invalid subpart, as Unicode recommends and as Python's
 * and Rust's lossy decoders do), an incomplete character stays in the tail
 * until its last byte arrives (so byte-fallback tokens <0xE4><0xB8><0xAD>
 * join into one character).  The held text is then searched for the stop
 * strings: a complete one ends the stream and only the text before it is
 * emitted; otherwise everything is emitted except the longest suffix that
 * is a prefix of some stop string, which waits for the next token.
 */

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer_int.h"

struct llm_detok_s {
    const llm_vocab_t  *v;
    char              **stops;
    size_t             *stop_len;
    size_t              n_stops;

    char               *txt;        /* valid UTF-8 not yet emitted */
    size_t              txt_n;
    size_t              txt_cap;
    uint8_t             raw[4];     /* an incomplete character */
    size_t              raw_n;

    char               *out;        /* what the last call returns */
    size_t              out_n;
    size_t              out_cap;

    int                 stopped;
    size_t              stop_hit;   /* the stop string found, if stopped */
    int                 special;    /* emit control tokens' text */
    int                 strip_space;
    int                 started;
};

static int
buf_add(char **b, size_t *n, size_t *cap, const void *p, size_t len)
{
    char    *nb;
    size_t   nc;

    if (len == 0) {
        return 0;
    }
    if (*n + len > *cap) {
        nc = *cap ? *cap : 256;
        while (nc < *n + len) {
            nc *= 2;
        }
        nb = realloc(*b, nc);
        if (nb == NULL) {
            return -ENOMEM;
        }
        *b = nb;
        *cap = nc;
    }
    memcpy(*b + *n, p, len);
    *n += len;
    return 0;
}

static int
utf8_valid(const char *s, size_t n)
{
    size_t  i = 0;
    int     r;

    while (i < n) {
        r = llm_utf8_check((const uint8_t *) s + i, n - i);
        if (r <= 0) {
            return 0;
        }
        i += (size_t) r;
    }
    return 1;
}

/*
 * Create a detokenizer for v with the given stop strings (copied; empty
 * ones are ignored).  -EINVAL if a stop string is not valid UTF-8.
 */
int
llm_detok_create(llm_detok_t **out, const llm_vocab_t *v,
    const char *const *stops, size_t n_stops)
{
    llm_detok_t  *d;
    size_t        i, l;

    *out = NULL;
    for (i = 0; i < n_stops; i++) {
        if (stops[i] && !utf8_valid(stops[i], strlen(stops[i]))) {
            return -EINVAL;
        }
    }

    d = calloc(1, sizeof(*d));
    if (d == NULL) {
        return -ENOMEM;
    }
    d->v = v;
    d->strip_space = v->type == LLM_VOCAB_SPM && v->add_space_prefix;
    if (n_stops) {
        d->stops = calloc(n_stops, sizeof(char *));
        d->stop_len = calloc(n_stops, sizeof(size_t));
        if (d->stops == NULL || d->stop_len == NULL) {
            goto nomem;
        }
    }
    for (i = 0; i < n_stops; i++) {
        if (stops[i] == NULL || (l = strlen(stops[i])) == 0) {
            continue;
        }
        d->stops[d->n_stops] = strdup(stops[i]);
        if (d->stops[d->n_stops] == NULL) {
            goto nomem;
        }
        d->stop_len[d->n_stops++] = l;
    }
    *out = d;
    return 0;

nomem:
    llm_detok_free(d);
    return -ENOMEM;
}

void
llm_detok_free(llm_detok_t *d)
{
    size_t  i;

    if (d == NULL) {
        return;
    }
    for (i = 0; i < d->n_stops; i++) {
        free(d->stops[i]);
    }
    free(d->stops);
    free(d->stop_len);
    free(d->txt);
    free(d->out);
    free(d);
}

void
llm_detok_set_special(llm_detok_t *d, int special)
{
    d->special = special != 0;
}

void
llm_detok_set_strip_space(llm_detok_t *d, int strip)
{
    d->strip_space = strip != 0;
}

void
llm_detok_reset(llm_detok_t *d)
{
    d->txt_n = 0;
    d->raw_n = 0;
    d->out_n = 0;
    d->stopped = 0;
    d->started = 0;
}

const char *
llm_detok_stop_string(const llm_detok_t *d)
{
    return d != NULL && d->stopped ? d->stops[d->stop_hit] : NULL;
}

/* Move bytes through the UTF-8 check into txt; keep an incomplete tail. */
static int
feed(llm_detok_t *d, const uint8_t *p, size_t n)
{
    uint8_t  tmp[8];
    size_t   tn, i;
    int      r;

    /* first complete the character in the tail, byte by byte */
    while (d->raw_n > 0 && n > 0) {
        d->raw[d->raw_n++] = *p++;
        n--;
        r = llm_utf8_check(d->raw, d->raw_n);
        if (r == 0) {
            continue;
        }
        if (r > 0) {
            if (buf_add(&d->txt, &d->txt_n, &d->txt_cap, d->raw, d->raw_n)) {
                return -ENOMEM;
            }
            d->raw_n = 0;
        } else {
            if (buf_add(&d->txt, &d->txt_n, &d->txt_cap, "\xef\xbf\xbd", 3)) {
                return -ENOMEM;
            }
            /* the bytes after the invalid subpart are looked at again */
            tn = d->raw_n - (size_t) -r;
            memcpy(tmp, d->raw + (size_t) -r, tn);
            d->raw_n = 0;
            if (tn && feed(d, tmp, tn) < 0) {
                return -ENOMEM;
            }
        }
    }

    i = 0;
    while (i < n) {
        r = llm_utf8_check(p + i, n - i);
        if (r > 0) {
            size_t j = i + (size_t) r;

            /* copy a run of valid characters at once */
            while (j < n && (r = llm_utf8_check(p + j, n - j)) > 0) {
                j += (size_t) r;
            }
            if (buf_add(&d->txt, &d->txt_n, &d->txt_cap, p + i, j - i)) {
                return -ENOMEM;
            }
            i = j;
            continue;
        }
        if (r == 0) {
            memcpy(d->raw, p + i, n - i);
            d->raw_n = n - i;
            break;
        }
        if (buf_add(&d->txt, &d->txt_n, &d->txt_cap, "\xef\xbf\xbd", 3)) {
            return -ENOMEM;
        }
        i += (size_t) -r;
    }
    return 0;
}

static int
emit(llm_detok_t *d, size_t n)
{
    if (n == 0) {
        return 0;
    }
    if (buf_add(&d->out, &d->out_n, &d->out_cap, d->txt, n) < 0) {
        return -ENOMEM;
    }
    memmove(d->txt, d->txt + n, d->txt_n - n);
    d->txt_n -= n;
    return 0;
}

/*
 * Emit what is safe.  Returns 1 when a stop string is complete (the text
 * before it is emitted, the rest dropped), else 0.  With final set nothing
 * is held back.
 */
static int
settle(llm_detok_t *d, int final)
{
    size_t  i, k, best = (size_t) -1, hit = 0, hold = 0, h;

    for (k = 0; k < d->n_stops && d->txt_n > 0; k++) {
        /* no text yet: memmem's arguments must not be NULL */
        const char *m = memmem(d->txt, d->txt_n, d->stops[k],
                               d->stop_len[k]);

        if (m != NULL && (size_t) (m - d->txt) < best) {
            best = (size_t) (m - d->txt);
            hit = k;
        }
    }
    if (best != (size_t) -1) {
        if (emit(d, best) < 0) {
            return -ENOMEM;
        }
        d->txt_n = 0;
        d->raw_n = 0;
        d->stopped = 1;
        d->stop_hit = hit;
        return 1;
    }

    if (!final) {
        for (k = 0; k < d->n_stops; k++) {
            h = d->stop_len[k] - 1;
            if (h > d->txt_n) {
                h = d->txt_n;
            }
            for (; h > hold; h--) {
                if (memcmp(d->txt + d->txt_n - h, d->stops[k], h) == 0) {
                    break;
                }
            }
            if (h > hold) {
                hold = h;
            }
        }
    }
    i = d->txt_n - hold;
    return emit(d, i);
}

int
llm_detok_push(llm_detok_t *d, int32_t id, const char **out, size_t *len)
{
    const char  *p;
    size_t       n;
    int          rc;

    d->out_n = 0;
    *out = "";
    *len = 0;
    if (d->stopped) {
        return 1;
    }

    p = llm_token_bytes(d->v, id, d->special, &n);
    if (n > 0 && !d->started) {
        d->started = 1;
        if (d->strip_space && p[0] == ' ') {
            p++;
            n--;
        }
    }
    rc = feed(d, (const uint8_t *) p, n);
    if (rc == 0) {
        rc = settle(d, 0);
    }
    if (rc < 0) {
        return rc;
    }
    *out = d->out_n ? d->out : "";
    *len = d->out_n;
    return rc;
}

int
llm_detok_flush(llm_detok_t *d, const char **out, size_t *len)
{
    int  rc;

    d->out_n = 0;
    *out = "";
    *len = 0;
    if (d->stopped) {
        return 1;
    }
    if (d->raw_n > 0) {
        d->raw_n = 0;
        if (buf_add(&d->txt, &d->txt_n, &d->txt_cap, "\xef\xbf\xbd", 3)) {
            return -ENOMEM;
        }
    }
    rc = settle(d, 1);
    if (rc < 0) {
        return rc;
    }
    *out = d->out_n ? d->out : "";
    *len = d->out_n;
    return rc;
}
