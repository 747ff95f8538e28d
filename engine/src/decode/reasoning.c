/*
 * Reasoning split (reasoning.h): a small state machine over the answer's
 * text.  Bytes that cannot be decided yet (a marker's possible start, the
 * whitespace that may end the reasoning) wait in a hold buffer.
 */

#include <stdlib.h>
#include <string.h>

#include "reasoning.h"

#define LLM_THINK_OPEN   "<think>"
#define LLM_THINK_CLOSE  "</think>"

#define LLM_HM_MESSAGE   "<|message|>"
#define LLM_HM_END       "<|end|>"
#define LLM_HM_HEAD_MAX  256       /* a longer header is not one */

typedef enum {
    RS_START = 0,       /* nothing decided: leading space, maybe <think> */
    RS_IN,              /* inside the reasoning */
    RS_AFTER,           /* after </think>: the answer's leading space */
    RS_ANSWER,          /* the answer, passed on */
    RS_HM_HEAD,         /* harmony: a message header, up to <|message|> */
    RS_HM_REASON,       /* harmony: an analysis message's body */
    RS_HM_TEXT,         /* harmony: a final / commentary message's body */
    RS_HM_CALL          /* harmony: a message to a tool */
} llm_rs_state_e;

struct llm_reasoning_s {
    int              fmt;
    llm_rs_state_e   state;
    int              said;      /* reasoning bytes given out */
    char            *hold;
    size_t           len, cap;
};

static const char *const llm_reasoning_names[] = { "none", "think",
                                                   "harmony" };

int
llm_reasoning_fmt_from_name(const char *s)
{
    size_t  i;

    for (i = 0; s != NULL && i < sizeof(llm_reasoning_names)
                                / sizeof(llm_reasoning_names[0]); i++)
    {
        if (strcmp(s, llm_reasoning_names[i]) == 0) {
            return (int) i;
        }
    }
    return -1;
}

const char *
llm_reasoning_fmt_name(int fmt)
{
    return fmt >= 0 && fmt <= LLM_REASONING_HARMONY
           ? llm_reasoning_names[fmt] : "?";
}

llm_reasoning_t *
llm_reasoning_create(int fmt, int inside)
{
    llm_reasoning_t  *r = calloc(1, sizeof(*r));

    if (r != NULL) {
        r->fmt = fmt;
        r->state = fmt == LLM_REASONING_NONE ? RS_ANSWER
                   : fmt == LLM_REASONING_HARMONY ? RS_HM_HEAD
                   : inside ? RS_IN : RS_START;
    }
    return r;
}

void
llm_reasoning_free(llm_reasoning_t *r)
{
    if (r != NULL) {
        free(r->hold);
        free(r);
    }
}

int
llm_reasoning_inside(const llm_reasoning_t *r)
{
    return r != NULL && (r->state == RS_IN || r->state == RS_HM_REASON);
}

static int
llm_rs_space(char c)
{
    return c == ' ' || c == '\n' || c == '\r' || c == '\t';
}

/* The length of the longest suffix of s[0..n) that is a proper prefix of
 * the marker m. */
static size_t
llm_rs_partial(const char *s, size_t n, const char *m)
{
    size_t  k, ml = strlen(m);

    for (k = ml - 1 < n ? ml - 1 : n; k > 0; k--) {
        if (memcmp(s + n - k, m, k) == 0) {
            return k;
        }
    }
    return 0;
}

static const char *
llm_rs_find(const char *s, size_t n, const char *m)
{
    size_t  i, ml = strlen(m);

    for (i = 0; i + ml <= n; i++) {
        if (s[i] == m[0] && memcmp(s + i, m, ml) == 0) {
            return s + i;
        }
    }
    return NULL;
}

/* Reasoning text out: leading space of the block dropped. */
static void
llm_rs_say(llm_reasoning_t *r, const char *s, size_t n,
    const llm_reasoning_out_t *out)
{
    while (!r->said && n > 0 && llm_rs_space(*s)) {
        s++;
        n--;
    }
    if (n > 0) {
        r->said = 1;
        out->reasoning(out->ud, s, n);
    }
}

/*
 * Inside the block: s[0..n) is what is held plus the new bytes.  Returns
 * how many bytes were decided (the rest is held).
 */
static size_t
llm_rs_inside(llm_reasoning_t *r, const char *s, size_t n, int final,
    const llm_reasoning_out_t *out)
{
    const char  *e = llm_rs_find(s, n, LLM_THINK_CLOSE);
    size_t       k;

    if (e != NULL) {
        k = (size_t) (e - s);
        while (k > 0 && llm_rs_space(s[k - 1])) {
            k--;                        /* space before </think> */
        }
        llm_rs_say(r, s, k, out);
        r->state = RS_AFTER;
        return (size_t) (e - s) + strlen(LLM_THINK_CLOSE);
    }
    k = final ? n : n - llm_rs_partial(s, n, LLM_THINK_CLOSE);
    while (k > 0 && llm_rs_space(s[k - 1])) {
        k--;                            /* may come right before it */
    }
    llm_rs_say(r, s, k, out);
    return final ? n : k;
}

/*
 * harmony: a header s[0..n) up to <|message|> decides the body: analysis
 * is reasoning, a recipient functions.NAME a tool call (out->call with
 * the name), anything else answer text.
 */
static void
llm_hm_header(llm_reasoning_t *r, const char *s, size_t n,
    const llm_reasoning_out_t *out)
{
    const char  *ch = llm_rs_find(s, n, "<|channel|>");
    const char  *to = llm_rs_find(s, n, "to=functions.");
    size_t       k, cl = strlen("<|channel|>"), tl = strlen("to=functions.");

    if (to != NULL && out->call != NULL) {
        k = (size_t) (to - s) + tl;
        while (k < n && s[k] != ' ' && s[k] != '<') {
            k++;
        }
        out->call(out->ud, to + tl, (size_t) (s + k - to - tl), NULL, 0);
        r->state = RS_HM_CALL;
        return;
    }
    if (ch != NULL && (size_t) (s + n - ch) >= cl + 8
        && memcmp(ch + cl, "analysis", 8) == 0)
    {
        r->state = RS_HM_REASON;
        return;
    }
    r->state = RS_HM_TEXT;
}

/*
 * harmony: where a message's body ends in s[0..n): the first <|end|>,
 * <|call|> or <|return|> (the last two end generation as tokens, and end
 * the message when a model spells them in text), with its length in
 * *ml; NULL when none is there, with *hold the bytes at the end that may
 * still begin one.
 */
static const char *
llm_hm_end(const char *s, size_t n, size_t *ml, size_t *hold)
{
    static const char *const ends[] = { LLM_HM_END, "<|call|>",
                                        "<|return|>" };
    const char  *e = NULL, *f;
    size_t       i, p;

    *hold = 0;
    for (i = 0; i < sizeof(ends) / sizeof(ends[0]); i++) {
        f = llm_rs_find(s, n, ends[i]);
        if (f != NULL && (e == NULL || f < e)) {
            e = f;
            *ml = strlen(ends[i]);
        }
        p = llm_rs_partial(s, n, ends[i]);
        *hold = p > *hold ? p : *hold;
    }
    return e;
}

/* harmony: a message's body up to its end; returns the bytes taken. */
static size_t
llm_hm_body(llm_reasoning_t *r, const char *s, size_t n, int final,
    const llm_reasoning_out_t *out)
{
    size_t       ml = 0, hold;
    const char  *e = llm_hm_end(s, n, &ml, &hold);
    size_t       k = e ? (size_t) (e - s) : final ? n : n - hold;

    if (r->state == RS_HM_REASON) {
        llm_rs_say(r, s, k, out);
    } else if (r->state == RS_HM_CALL) {
        if (k > 0) {
            out->call(out->ud, NULL, 0, s, k);
        }
    } else if (k > 0) {
        out->answer(out->ud, s, k);
    }
    if (e == NULL) {
        return k;
    }
    r->state = RS_HM_HEAD;
    return k + ml;
}

/* harmony: one decision; returns the bytes taken (0: wait). */
static size_t
llm_hm_step(llm_reasoning_t *r, const char *s, size_t n, int final,
    const llm_reasoning_out_t *out)
{
    const char  *m;

    if (r->state != RS_HM_HEAD) {
        return llm_hm_body(r, s, n, final, out);
    }
    /* a header starts with its markup (<|start|>, <|channel|>) or to= */
    if (n > 0 && s[0] != '<' && s[0] != 't') {
        r->state = RS_HM_TEXT;
        return 0;
    }
    m = llm_rs_find(s, n, LLM_HM_MESSAGE);
    if (m != NULL && (size_t) (m - s) <= LLM_HM_HEAD_MAX) {
        llm_hm_header(r, s, (size_t) (m - s), out);
        return (size_t) (m - s) + strlen(LLM_HM_MESSAGE);
    }
    /* wait while a marker starting within the limit may still complete */
    if (n < LLM_HM_HEAD_MAX + strlen(LLM_HM_MESSAGE)) {
        /* the header goes on; cut off by the end, it is markup only */
        return final ? n : 0;
    }
    /* not a header: the model wrote plain text; it is the answer */
    r->state = RS_HM_TEXT;
    return 0;
}

/* One decision over s[0..n); returns the bytes it took (0: wait). */
static size_t
llm_rs_step(llm_reasoning_t *r, const char *s, size_t n, int final,
    const llm_reasoning_out_t *out)
{
    size_t  i = 0, ol = strlen(LLM_THINK_OPEN);

    if (r->fmt == LLM_REASONING_HARMONY) {
        return llm_hm_step(r, s, n, final, out);
    }
    switch (r->state) {

    case RS_START:
        while (i < n && llm_rs_space(s[i])) {
            i++;
        }
        if (n - i >= ol && memcmp(s + i, LLM_THINK_OPEN, ol) == 0) {
            r->state = RS_IN;
            return i + ol;
        }
        if (!final
            && (i == n
                || (n - i < ol && memcmp(s + i, LLM_THINK_OPEN, n - i) == 0)))
        {
            return 0;                   /* may still open */
        }
        r->state = RS_ANSWER;
        return 0;

    case RS_IN:
        return llm_rs_inside(r, s, n, final, out);

    case RS_AFTER:
        while (i < n && llm_rs_space(s[i])) {
            i++;
        }
        if (i < n) {
            r->state = RS_ANSWER;
        }
        return i;

    default:
        out->answer(out->ud, s, n);
        return n;
    }
}

static int
llm_rs_keep(llm_reasoning_t *r, const char *s, size_t n)
{
    if (n > r->cap) {
        char  *h = realloc(r->hold, n * 2);

        if (h == NULL) {
            return -1;
        }
        r->hold = h;
        r->cap = n * 2;
    }
    memmove(r->hold, s, n);
    r->len = n;
    return 0;
}

void
llm_reasoning_feed(llm_reasoning_t *r, const char *s, size_t len, int final,
    const llm_reasoning_out_t *out)
{
    const char      *p;
    size_t           n, used;
    llm_rs_state_e   before;
    char            *joined = NULL;

    if (r->state == RS_ANSWER && r->len == 0) {
        if (len > 0) {
            out->answer(out->ud, s, len);
        }
        return;
    }
    p = s;
    n = len;
    if (r->len > 0) {
        joined = malloc(r->len + len + 1);
        if (joined == NULL) {
            /* no memory: what is held goes out where it stands */
            r->len = 0;
            out->answer(out->ud, s, len);
            return;
        }
        memcpy(joined, r->hold, r->len);
        if (len > 0) {
            memcpy(joined + r->len, s, len);
        }
        p = joined;
        n = r->len + len;
        r->len = 0;
    }
    for (;;) {
        before = r->state;
        used = llm_rs_step(r, p, n, final, out);
        p += used;
        n -= used;
        if (n == 0 || (used == 0 && r->state == before)) {
            break;
        }
    }
    if (n > 0 && !final && llm_rs_keep(r, p, n) != 0) {
        out->answer(out->ud, p, n);
    }
    free(joined);
}

int
llm_reasoning_prompt_opens(int fmt, const char *prompt, size_t len)
{
    size_t  ol = strlen(LLM_THINK_OPEN);

    if (fmt != LLM_REASONING_THINK) {
        return 0;
    }
    while (len > 0 && llm_rs_space(prompt[len - 1])) {
        len--;
    }
    return len >= ol && memcmp(prompt + len - ol, LLM_THINK_OPEN, ol) == 0;
}
