/*
 * Tool-call parsers, one state machine for every family (toolcall.h).
 *
 * The text fed in is appended to one buffer; b[0..pos) is decided, the
 * rest waits for more bytes.  A state either decides some bytes and moves
 * on, or says it needs more.  The heads of calls (the part before the
 * arguments: a name, an id, markers) are parsed again from their start
 * each time bytes arrive, so a head split anywhere parses as the whole
 * one does; arguments are streamed as they are scanned.  mark is where
 * the text to give back as content starts when a head turns out not to be
 * one (the opener's first byte, mark_len its length: the opener goes out
 * as content and the text after it is scanned again).
 */

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include <jansson.h>

#include "sample.h"
#include "toolcall.h"

#define LLM_TC_HEAD_MAX   512     /* a call head longer than this is not one */
#define LLM_TC_NAME_MAX   256
#define LLM_TC_ID_LEN     24

#define DS_CALLS_BEGIN    "<\xef\xbd\x9ctool\xe2\x96\x81" "calls\xe2\x96\x81" \
                          "begin\xef\xbd\x9c>"
#define DS_CALLS_END      "<\xef\xbd\x9ctool\xe2\x96\x81" "calls\xe2\x96\x81" \
                          "end\xef\xbd\x9c>"
#define DS_CALL_BEGIN     "<\xef\xbd\x9ctool\xe2\x96\x81" "call\xe2\x96\x81" \
                          "begin\xef\xbd\x9c>"
#define DS_CALL_END       "<\xef\xbd\x9ctool\xe2\x96\x81" "call\xe2\x96\x81" \
                          "end\xef\xbd\x9c>"
#define DS_SEP            "<\xef\xbd\x9ctool\xe2\x96\x81sep\xef\xbd\x9c>"

#define KM_CALLS_BEGIN    "<|tool_calls_section_begin|>"
#define KM_CALLS_END      "<|tool_calls_section_end|>"
#define KM_CALL_BEGIN     "<|tool_call_begin|>"
#define KM_CALL_END       "<|tool_call_end|>"
#define KM_ARGS           "<|tool_call_argument_begin|>"

typedef enum {
    S_TEXT = 0,
    S_PLAIN,         /* llama3-json: the answer is not a call */
    S_L3_START,
    S_L3_BETWEEN,
    S_JHEAD,         /* {"name": "f", "arguments": */
    S_JARGS,         /* the arguments value, streamed */
    S_JTAIL,         /* what closes the call object */
    S_JSKIP,         /* more members after the arguments */
    S_HERMES_END,
    S_MS_HEAD,
    S_MS_NEXT,
    S_MM_BLOCK,
    S_MM_PHEAD,
    S_MM_VALUE,
    S_DS_BLOCK,
    S_DS_HEAD,
    S_DS_TAIL,
    S_GLM_HEAD,      /* glm4.5: the name after <tool_call> */
    S_GLM_ARGS       /* glm4.5: <arg_key>k</arg_key><arg_value>, or the end */
} llm_tc_state_e;

enum { M_BAD = -1, M_NEED = 0, M_OK = 1 };
enum { R_NEED = 0, R_MORE = 1 };

struct llm_toolcall_s {
    int              fmt;
    json_t          *tools;
    llm_rng_t        rng;

    char            *b;
    size_t           len, cap, pos;
    size_t           mark, mark_len;
    int              mark_live;

    llm_tc_state_e   state;
    llm_tc_state_e   after_args;   /* where S_JARGS goes when the value ends */
    uint32_t         n_calls;
    int              open;         /* the last call's arguments go on */
    int              after_call;   /* hold whitespace until the next call */
    int              in_block;     /* calls read in this opener's block */

    int              depth, in_str, esc;
    int              ds_v3;

    const json_t    *props;        /* minimax, glm: the called tool's
                                      properties */
    int              n_params;
    int              vstring;      /* minimax, glm: the value is a string */

    char            *tmp;
    size_t           tmp_cap;
};

static const struct {
    int          fmt;
    const char  *name;
} llm_toolfmts[] = {
    { LLM_TOOLFMT_NONE, "none" },
    { LLM_TOOLFMT_HERMES, "hermes" },
    { LLM_TOOLFMT_MINIMAX_M2, "minimax-m2" },
    { LLM_TOOLFMT_LLAMA3_JSON, "llama3-json" },
    { LLM_TOOLFMT_MISTRAL, "mistral" },
    { LLM_TOOLFMT_DEEPSEEK_V3, "deepseek-v3" },
    { LLM_TOOLFMT_GLM45, "glm4.5" },
    { LLM_TOOLFMT_KIMI_K2, "kimi-k2" },
    { LLM_TOOLFMT_QWEN3_CODER, "qwen3-coder" },
    { LLM_TOOLFMT_HARMONY, "harmony" },
    /* GLM-4.7's compact form: the glm4.5 parser reads it; the grammar
     * (toolhooks.c) writes it without newlines */
    { LLM_TOOLFMT_GLM45, "glm4.7" },
};

int
llm_toolfmt_from_name(const char *s)
{
    for (size_t i = 0; i < sizeof(llm_toolfmts) / sizeof(llm_toolfmts[0]);
         i++)
    {
        if (s && strcmp(s, llm_toolfmts[i].name) == 0) {
            return llm_toolfmts[i].fmt;
        }
    }
    return -1;
}

const char *
llm_toolfmt_name(int fmt)
{
    for (size_t i = 0; i < sizeof(llm_toolfmts) / sizeof(llm_toolfmts[0]);
         i++)
    {
        if (llm_toolfmts[i].fmt == fmt) {
            return llm_toolfmts[i].name;
        }
    }
    return "none";
}

const char *
llm_toolfmt_names(void)
{
    return "hermes, minimax-m2, llama3-json, mistral, deepseek-v3, glm4.5, "
           "glm4.7, kimi-k2, harmony, none";
}


/* Matching helpers over p[0..n), from *i. */

static void
llm_tc_ws(const char *p, size_t n, size_t *i)
{
    while (*i < n && isspace((unsigned char) p[*i])) {
        (*i)++;
    }
}

/* s at p[*i]: M_OK (and *i moves past it), M_NEED (a proper prefix is
 * there), M_BAD. */
static int
llm_tc_lit(const char *p, size_t n, size_t *i, const char *s)
{
    size_t l = strlen(s), k = n - *i;

    if (k >= l) {
        if (memcmp(p + *i, s, l) == 0) {
            *i += l;
            return M_OK;
        }
        return M_BAD;
    }
    return memcmp(p + *i, s, k) == 0 ? M_NEED : M_BAD;
}

/* Bytes up to the first of stop (not included) at p[*i]: M_NEED while
 * none came and max is not exceeded. */
static int
llm_tc_until(const char *p, size_t n, size_t *i, const char *stop,
    size_t max, size_t *start, size_t *end)
{
    size_t k = *i;

    while (k < n && strchr(stop, p[k]) == NULL) {
        k++;
    }
    if (k - *i > max) {
        return M_BAD;
    }
    if (k == n) {
        return M_NEED;
    }
    *start = *i;
    *end = k;
    *i = k;
    return M_OK;
}

/* After an opener such as `<invoke name="` (end: `">`) or `<function=`
 * (end: `>`): the name up to end's first byte, then end; the name is
 * copied into name (LLM_TC_NAME_MAX + 1 bytes). */
static int
llm_tc_name_to(const char *p, size_t n, size_t *i, const char *end,
    char *name, size_t *len)
{
    size_t s0, s1;
    int    r;

    r = llm_tc_until(p, n, i, "\"\n<>", LLM_TC_NAME_MAX, &s0, &s1);
    if (r == M_OK) {
        r = p[*i] == end[0] && s1 > s0 ? llm_tc_lit(p, n, i, end) : M_BAD;
    }
    if (r == M_OK) {
        memcpy(name, p + s0, s1 - s0);
        name[s1 - s0] = '\0';
        *len = s1 - s0;
    }
    return r;
}

/* A JSON string at p[*i] decoded into out (cap bytes). */
static int
llm_tc_jstr(const char *p, size_t n, size_t *i, char *out, size_t cap)
{
    size_t        k = *i;
    int           esc = 0;
    json_t       *j;
    json_error_t  je;

    if (k >= n) {
        return M_NEED;
    }
    if (p[k] != '"') {
        return M_BAD;
    }
    for (k++; k < n; k++) {
        if (esc) {
            esc = 0;
        } else if (p[k] == '\\') {
            esc = 1;
        } else if (p[k] == '"') {
            break;
        } else if ((unsigned char) p[k] < 0x20) {
            return M_BAD;
        }
    }
    if (k - *i > cap) {
        return M_BAD;
    }
    if (k == n) {
        return M_NEED;
    }
    j = json_loadb(p + *i, k + 1 - *i, JSON_DECODE_ANY, &je);
    if (j == NULL || !json_is_string(j)
        || json_string_length(j) >= cap
        || strlen(json_string_value(j)) != json_string_length(j))
    {
        json_decref(j);
        return M_BAD;
    }
    memcpy(out, json_string_value(j), json_string_length(j) + 1);
    json_decref(j);
    *i = k + 1;
    return M_OK;
}

/* Is p[0..n) an opener of the family, or a proper prefix of one?
 * Returns the opener's index + 1 when whole, -1 for a prefix, 0 else. */
static const char *llm_tc_openers[][3] = {
    [LLM_TOOLFMT_NONE] = { NULL },
    [LLM_TOOLFMT_HERMES] = { "<tool_call>", NULL },
    [LLM_TOOLFMT_MINIMAX_M2] = { "<minimax:tool_call>", NULL },
    [LLM_TOOLFMT_LLAMA3_JSON] = { NULL },
    [LLM_TOOLFMT_MISTRAL] = { "[TOOL_CALLS]", NULL },
    [LLM_TOOLFMT_DEEPSEEK_V3] = { DS_CALLS_BEGIN, DS_CALL_BEGIN, NULL },
    [LLM_TOOLFMT_GLM45] = { "<tool_call>", NULL },
    [LLM_TOOLFMT_KIMI_K2] = { KM_CALLS_BEGIN, KM_CALL_BEGIN, NULL },
    [LLM_TOOLFMT_QWEN3_CODER] = { "<tool_call>", NULL },
    [LLM_TOOLFMT_HARMONY] = { NULL },
};

static int
llm_tc_opener_at(const llm_toolcall_t *tc, const char *p, size_t n)
{
    const char **o = llm_tc_openers[tc->fmt];

    for (int k = 0; o[k]; k++) {
        size_t l = strlen(o[k]);

        if (n >= l && memcmp(p, o[k], l) == 0) {
            return k + 1;
        }
        if (n < l && (n == 0 || memcmp(p, o[k], n) == 0)) {
            return -1;
        }
    }
    return 0;
}


/* Output. */

static void
llm_tc_content(const llm_text_out_t *out, const char *s, size_t n)
{
    if (n) {
        out->content(out->sink, s, n);
    }
}

static void
llm_tc_begin_call(llm_toolcall_t *tc, const llm_text_out_t *out,
    const char *name)
{
    static const char  an[] = "abcdefghijklmnopqrstuvwxyz"
                              "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    char               id[5 + LLM_TC_ID_LEN + 1] = "call_";

    for (int i = 0; i < LLM_TC_ID_LEN; i++) {
        id[5 + i] = an[llm_rng_next(&tc->rng) % (sizeof(an) - 1)];
    }
    id[5 + LLM_TC_ID_LEN] = '\0';
    out->tool_call(out->sink, tc->n_calls, id, name, "", 0);
    tc->n_calls++;
    tc->open = 1;
    tc->in_block++;
    tc->mark_live = 0;
}

static void
llm_tc_args(llm_toolcall_t *tc, const llm_text_out_t *out, const char *s,
    size_t n)
{
    if (n && tc->open) {
        out->tool_call(out->sink, tc->n_calls - 1, NULL, NULL, s, n);
    }
}

/* s as the inside of a JSON string, as arguments. */
static int
llm_tc_args_escaped(llm_toolcall_t *tc, const llm_text_out_t *out,
    const char *s, size_t n)
{
    size_t  k = 0;

    if (n == 0) {
        return 0;
    }
    /* six bytes per byte at most (\u00XX), and sprintf's NUL */
    if (tc->tmp_cap < n * 6 + 1) {
        char *t = realloc(tc->tmp, n * 6 + 1);

        if (t == NULL) {
            return -ENOMEM;
        }
        tc->tmp = t;
        tc->tmp_cap = n * 6 + 1;
    }
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char) s[i];

        if (c == '"' || c == '\\') {
            tc->tmp[k++] = '\\';
            tc->tmp[k++] = (char) c;
        } else if (c == '\n') {
            tc->tmp[k++] = '\\';
            tc->tmp[k++] = 'n';
        } else if (c == '\t') {
            tc->tmp[k++] = '\\';
            tc->tmp[k++] = 't';
        } else if (c == '\r') {
            tc->tmp[k++] = '\\';
            tc->tmp[k++] = 'r';
        } else if (c < 0x20) {
            k += (size_t) sprintf(tc->tmp + k, "\\u%04x", c);
        } else {
            tc->tmp[k++] = (char) c;
        }
    }
    llm_tc_args(tc, out, tc->tmp, k);
    return 0;
}

/* Give back the opener as content and scan what follows it as text. */
static void
llm_tc_fallback(llm_toolcall_t *tc, const llm_text_out_t *out)
{
    if (tc->mark_live) {
        llm_tc_content(out, tc->b + tc->mark, tc->mark_len);
        tc->pos = tc->mark + tc->mark_len;
    }
    tc->mark_live = 0;
    tc->after_call = 0;
    tc->open = 0;
    tc->state = tc->fmt == LLM_TOOLFMT_LLAMA3_JSON ? S_PLAIN : S_TEXT;
}

static void
llm_tc_set_mark(llm_toolcall_t *tc, size_t at, size_t len)
{
    tc->mark = at;
    tc->mark_len = len;
    tc->mark_live = 1;
}

/* The call ended (its arguments are whole): text after it goes as the
 * family says, or as content. */
static void
llm_tc_call_done(llm_toolcall_t *tc)
{
    tc->open = 0;
    tc->mark_live = 0;
}

static void
llm_tc_to_text(llm_toolcall_t *tc)
{
    tc->state = S_TEXT;
    tc->after_call = 1;
    tc->mark_live = 0;
    tc->in_block = 0;
}


/* States.  Each returns R_MORE after a change, R_NEED when it has to wait
 * (with final set, it never waits: it decides and moves on). */

static int
llm_tc_text(llm_toolcall_t *tc, int final, const llm_text_out_t *out)
{
    const char  *p = tc->b + tc->pos;
    size_t       n = tc->len - tc->pos, k, best = (size_t) -1, bl = 0;
    size_t       maxl = 0;
    const char **o = llm_tc_openers[tc->fmt];
    int          bi = 0, r;

    if (tc->after_call) {
        k = 0;
        llm_tc_ws(p, n, &k);
        if (k == n) {
            if (final) {
                tc->pos = tc->len;     /* whitespace after the last call */
            }
            return R_NEED;
        }
        r = llm_tc_opener_at(tc, p + k, n - k);
        if (r > 0) {
            tc->pos += k;
            p += k;
            n -= k;
        } else if (r < 0 && !final) {
            return R_NEED;
        }
        tc->after_call = 0;
    }

    for (int i = 0; o[i]; i++) {
        size_t      l = strlen(o[i]);
        /* n == 0: nothing buffered yet, and p may be NULL */
        const char *f = n >= l ? memmem(p, n, o[i], l) : NULL;

        if (f && (size_t) (f - p) < best) {
            best = (size_t) (f - p);
            bl = l;
            bi = i;
        }
        if (l > maxl) {
            maxl = l;
        }
    }
    if (best != (size_t) -1) {
        llm_tc_content(out, p, best);
        llm_tc_set_mark(tc, tc->pos + best, bl);
        tc->pos += best + bl;
        tc->in_block = 0;
        switch (tc->fmt) {
        case LLM_TOOLFMT_HERMES:
            tc->state = S_JHEAD;
            tc->after_args = S_JTAIL;
            break;
        case LLM_TOOLFMT_MINIMAX_M2:
        case LLM_TOOLFMT_QWEN3_CODER:
            tc->state = S_MM_BLOCK;
            break;
        case LLM_TOOLFMT_MISTRAL:
            tc->state = S_MS_HEAD;
            break;
        case LLM_TOOLFMT_GLM45:
            tc->state = S_GLM_HEAD;
            break;
        default:
            tc->state = bi == 0 ? S_DS_BLOCK : S_DS_HEAD;
            break;
        }
        return R_MORE;
    }
    if (final) {
        llm_tc_content(out, p, n);
        tc->pos = tc->len;
        return R_NEED;
    }
    /* hold back the tail that could still become an opener */
    for (k = n > maxl ? n - maxl + 1 : 0; k < n; k++) {
        if (llm_tc_opener_at(tc, p + k, n - k) < 0) {
            break;
        }
    }
    llm_tc_content(out, p, k);
    tc->pos += k;
    return R_NEED;
}

/* {"name": "f", "arguments": at p: M_OK with *at on the arguments' '{'. */
static int
llm_tc_parse_jhead(const char *p, size_t n, char *name, size_t *at)
{
    char    key[32];
    size_t  i = 0;
    int     r;

#define LLM_TC_STEP(e)                                                  \
    do {                                                                \
        r = (e);                                                        \
        if (r != M_OK) {                                                \
            return r == M_NEED && n > LLM_TC_HEAD_MAX ? M_BAD : r;      \
        }                                                               \
    } while (0)

    llm_tc_ws(p, n, &i);
    LLM_TC_STEP(llm_tc_lit(p, n, &i, "{"));
    llm_tc_ws(p, n, &i);
    LLM_TC_STEP(llm_tc_jstr(p, n, &i, key, sizeof(key)));
    if (strcmp(key, "name") != 0) {
        return M_BAD;
    }
    llm_tc_ws(p, n, &i);
    LLM_TC_STEP(llm_tc_lit(p, n, &i, ":"));
    llm_tc_ws(p, n, &i);
    LLM_TC_STEP(llm_tc_jstr(p, n, &i, name, LLM_TC_NAME_MAX));
    if (name[0] == '\0') {
        return M_BAD;
    }
    llm_tc_ws(p, n, &i);
    LLM_TC_STEP(llm_tc_lit(p, n, &i, ","));
    llm_tc_ws(p, n, &i);
    LLM_TC_STEP(llm_tc_jstr(p, n, &i, key, sizeof(key)));
    if (strcmp(key, "arguments") != 0 && strcmp(key, "parameters") != 0) {
        return M_BAD;
    }
    llm_tc_ws(p, n, &i);
    LLM_TC_STEP(llm_tc_lit(p, n, &i, ":"));
    llm_tc_ws(p, n, &i);
    LLM_TC_STEP(llm_tc_lit(p, n, &i, "{"));
    *at = i - 1;
    return M_OK;

#undef LLM_TC_STEP
}

static int
llm_tc_jhead(llm_toolcall_t *tc, int final, const llm_text_out_t *out)
{
    char    name[LLM_TC_NAME_MAX + 1];
    size_t  at = 0;
    int     r;

    r = llm_tc_parse_jhead(tc->b + tc->pos, tc->len - tc->pos, name, &at);
    if (r == M_NEED && !final) {
        return R_NEED;
    }
    if (r != M_OK) {
        llm_tc_fallback(tc, out);
        return R_MORE;
    }
    llm_tc_begin_call(tc, out, name);
    tc->pos += at;
    tc->depth = tc->in_str = tc->esc = 0;
    tc->state = S_JARGS;
    return R_MORE;
}

/* Scan JSON from pos while depth > 0; 1 when the value closed. */
static int
llm_tc_scan(llm_toolcall_t *tc, size_t *end)
{
    size_t i;

    for (i = tc->pos; i < tc->len; i++) {
        char c = tc->b[i];

        if (tc->in_str) {
            if (tc->esc) {
                tc->esc = 0;
            } else if (c == '\\') {
                tc->esc = 1;
            } else if (c == '"') {
                tc->in_str = 0;
            }
        } else if (c == '"') {
            tc->in_str = 1;
        } else if (c == '{' || c == '[') {
            tc->depth++;
        } else if (c == '}' || c == ']') {
            if (--tc->depth <= 0) {
                *end = i + 1;
                return 1;
            }
        }
    }
    *end = tc->len;
    return 0;
}

static int
llm_tc_jargs(llm_toolcall_t *tc, int final, const llm_text_out_t *out)
{
    size_t end;
    int    done = llm_tc_scan(tc, &end);

    llm_tc_args(tc, out, tc->b + tc->pos, end - tc->pos);
    tc->pos = end;
    if (!done) {
        if (final) {
            llm_tc_call_done(tc);   /* cut short: what came is the call */
        }
        return R_NEED;
    }
    llm_tc_call_done(tc);
    if (tc->after_args == S_TEXT) {
        llm_tc_to_text(tc);
    } else {
        tc->state = tc->after_args;
    }
    return R_MORE;
}

/* What follows the arguments once they are complete. */
static void
llm_tc_object_done(llm_toolcall_t *tc)
{
    switch (tc->fmt) {
    case LLM_TOOLFMT_HERMES:
        tc->state = S_HERMES_END;
        break;
    case LLM_TOOLFMT_LLAMA3_JSON:
        tc->state = S_L3_BETWEEN;
        break;
    default:
        tc->state = S_MS_NEXT;
        break;
    }
}

static int
llm_tc_jtail(llm_toolcall_t *tc, int final)
{
    size_t k = tc->pos;

    llm_tc_ws(tc->b, tc->len, &k);
    if (k == tc->len) {
        if (final) {
            tc->pos = tc->len;
            llm_tc_object_done(tc);
            return R_MORE;
        }
        return R_NEED;
    }
    if (tc->b[k] == '}') {
        tc->pos = k + 1;
        llm_tc_object_done(tc);
    } else if (tc->b[k] == ',') {
        tc->pos = k + 1;
        tc->depth = 1;
        tc->in_str = tc->esc = 0;
        tc->state = S_JSKIP;
    } else {
        /* the object's '}' is missing: take the call as it is */
        tc->pos = k;
        llm_tc_object_done(tc);
    }
    return R_MORE;
}

static int
llm_tc_jskip(llm_toolcall_t *tc, int final)
{
    size_t end;
    int    done = llm_tc_scan(tc, &end);

    tc->pos = end;
    if (done || final) {
        llm_tc_object_done(tc);
        return done ? R_MORE : R_NEED;
    }
    return R_NEED;
}

static int
llm_tc_hermes_end(llm_toolcall_t *tc, int final)
{
    size_t k = tc->pos;
    int    r;

    llm_tc_ws(tc->b, tc->len, &k);
    r = llm_tc_lit(tc->b, tc->len, &k, "</tool_call>");
    if (r == M_NEED) {
        if (!final) {
            return R_NEED;
        }
        tc->pos = tc->len;     /* a cut-off closer */
    } else if (r == M_OK) {
        tc->pos = k;
    }
    llm_tc_to_text(tc);
    return R_MORE;
}

static int
llm_tc_l3_start(llm_toolcall_t *tc, int final)
{
    size_t k = tc->pos;
    int    r;

    llm_tc_ws(tc->b, tc->len, &k);
    if (k == tc->len) {
        if (final) {
            tc->state = S_PLAIN;
            return R_MORE;
        }
        return R_NEED;
    }
    llm_tc_set_mark(tc, tc->pos, 0);
    tc->after_args = S_JTAIL;
    if (tc->b[k] == '{') {
        tc->state = S_JHEAD;
        tc->pos = k;
        return R_MORE;
    }
    r = llm_tc_lit(tc->b, tc->len, &k, "<|python_tag|>");
    if (r == M_OK) {
        tc->state = S_JHEAD;
        tc->pos = k;
        return R_MORE;
    }
    if (r == M_NEED && !final) {
        return R_NEED;
    }
    tc->state = S_PLAIN;
    return R_MORE;
}

static int
llm_tc_l3_between(llm_toolcall_t *tc, int final)
{
    size_t k = tc->pos;

    while (k < tc->len && (isspace((unsigned char) tc->b[k])
                           || tc->b[k] == ';'))
    {
        k++;
    }
    if (k == tc->len) {
        if (final) {
            tc->pos = tc->len;
        }
        return R_NEED;
    }
    if (tc->b[k] == '{') {
        llm_tc_set_mark(tc, k, 0);
        tc->pos = k;
        tc->state = S_JHEAD;
        return R_MORE;
    }
    tc->state = S_PLAIN;
    return R_MORE;
}

static int
llm_tc_plain(llm_toolcall_t *tc, const llm_text_out_t *out)
{
    llm_tc_content(out, tc->b + tc->pos, tc->len - tc->pos);
    tc->pos = tc->len;
    return R_NEED;
}

/* [TOOL_CALLS] then [ {...}, ... ] or name[CALL_ID]id[ARGS]{...} */
static int
llm_tc_ms_head(llm_toolcall_t *tc, int final, const llm_text_out_t *out)
{
    const char *p = tc->b;
    size_t      n = tc->len, k = tc->pos, s0, s1, i0, i1;
    char        name[LLM_TC_NAME_MAX + 1];
    int         r;

    llm_tc_ws(p, n, &k);
    if (k == n) {
        goto need;
    }
    if (p[k] == '[') {
        tc->pos = k + 1;
        tc->state = S_JHEAD;
        tc->after_args = S_JTAIL;
        return R_MORE;
    }
    r = llm_tc_until(p, n, &k, "[ \t\r\n", LLM_TC_NAME_MAX, &s0, &s1);
    if (r == M_NEED) {
        goto need;
    }
    if (r == M_BAD || s1 == s0 || p[k] != '[') {
        goto bad;
    }
    r = llm_tc_lit(p, n, &k, "[CALL_ID]");
    if (r == M_NEED) {
        goto need;
    }
    if (r == M_OK) {
        r = llm_tc_until(p, n, &k, "[", 64, &i0, &i1);
        if (r == M_NEED) {
            goto need;
        }
        if (r == M_BAD) {
            goto bad;
        }
    }
    r = llm_tc_lit(p, n, &k, "[ARGS]");
    if (r == M_NEED) {
        goto need;
    }
    if (r == M_BAD) {
        goto bad;
    }
    llm_tc_ws(p, n, &k);
    r = llm_tc_lit(p, n, &k, "{");
    if (r == M_NEED) {
        goto need;
    }
    if (r == M_BAD) {
        goto bad;
    }
    memcpy(name, p + s0, s1 - s0);
    name[s1 - s0] = '\0';
    llm_tc_begin_call(tc, out, name);
    tc->pos = k - 1;
    tc->depth = tc->in_str = tc->esc = 0;
    tc->after_args = S_TEXT;
    tc->state = S_JARGS;
    return R_MORE;

need:
    if (!final && n - tc->pos <= LLM_TC_HEAD_MAX) {
        return R_NEED;
    }
bad:
    llm_tc_fallback(tc, out);
    return R_MORE;
}

static int
llm_tc_ms_next(llm_toolcall_t *tc, int final)
{
    size_t k = tc->pos;

    llm_tc_ws(tc->b, tc->len, &k);
    if (k == tc->len) {
        if (final) {
            tc->pos = tc->len;
        }
        return R_NEED;
    }
    if (tc->b[k] == ',') {
        llm_tc_set_mark(tc, tc->pos, 0);
        tc->pos = k + 1;
        tc->state = S_JHEAD;
        tc->after_args = S_JTAIL;
        return R_MORE;
    }
    if (tc->b[k] == ']') {
        tc->pos = k + 1;
    }
    llm_tc_to_text(tc);
    return R_MORE;
}


/* minimax-m2 */

static const json_t *
llm_tc_tool_props(const llm_toolcall_t *tc, const char *name)
{
    size_t  i;
    json_t *t, *f;

    json_array_foreach(tc->tools, i, t) {
        f = json_object_get(t, "function");
        if (json_is_string(json_object_get(f, "name"))
            && strcmp(json_string_value(json_object_get(f, "name")), name)
               == 0)
        {
            return json_object_get(json_object_get(f, "parameters"),
                                   "properties");
        }
    }
    return NULL;
}

int
llm_toolcall_param_is_string(const json_t *param)
{
    const json_t *t = json_object_get(param, "type");
    size_t        i;
    json_t       *e;
    int           str = 0;

    if (json_is_string(t)) {
        return strcmp(json_string_value(t), "string") == 0;
    }
    json_array_foreach(t, i, e) {
        if (!json_is_string(e)) {
            return 0;
        }
        if (strcmp(json_string_value(e), "string") == 0) {
            str = 1;
        } else if (strcmp(json_string_value(e), "null") != 0) {
            return 0;
        }
    }
    return str;
}

static int
llm_tc_mm_close_args(llm_toolcall_t *tc, const llm_text_out_t *out)
{
    if (tc->open) {
        llm_tc_args(tc, out, tc->n_params ? "}" : "{}",
                    tc->n_params ? 1 : 2);
        llm_tc_call_done(tc);
    }
    return 0;
}

/* A parameter's key as arguments (`{"k": ` or `, "k": `, a string's
 * opening quote too); vstring says how its value is written. */
static int
llm_tc_mm_key(llm_toolcall_t *tc, const llm_text_out_t *out,
    const char *key, size_t nl)
{
    int rc;

    llm_tc_args(tc, out, tc->n_params ? ", \"" : "{\"", tc->n_params ? 3 : 2);
    rc = llm_tc_args_escaped(tc, out, key, nl);
    if (rc != 0) {
        return rc;
    }
    tc->vstring = llm_toolcall_param_is_string(
                      json_object_get(tc->props, key));
    llm_tc_args(tc, out, tc->vstring ? "\": \"" : "\": ",
                tc->vstring ? 4 : 3);
    tc->n_params++;
    return 0;
}

/* minimax-m2 <invoke name="f"> or the block's end; qwen3-coder
 * <function=f> or </tool_call> */
static int
llm_tc_mm_block(llm_toolcall_t *tc, int final, const llm_text_out_t *out)
{
    const char *p = tc->b;
    size_t      n = tc->len, k, nl;
    char        name[LLM_TC_NAME_MAX + 1];
    int         r1, r2, qc = tc->fmt == LLM_TOOLFMT_QWEN3_CODER;

    k = tc->pos;
    llm_tc_ws(p, n, &k);
    if (k == n) {
        goto need;
    }
    r1 = llm_tc_lit(p, n, &k, qc ? "<function=" : "<invoke name=\"");
    if (r1 == M_OK) {
        r1 = llm_tc_name_to(p, n, &k, qc ? ">" : "\">", name, &nl);
        if (r1 == M_NEED) {
            goto need;
        }
        if (r1 == M_BAD) {
            goto bad;
        }
        llm_tc_begin_call(tc, out, name);
        tc->props = llm_tc_tool_props(tc, name);
        tc->n_params = 0;
        tc->pos = k;
        tc->state = S_MM_PHEAD;
        return R_MORE;
    }
    k = tc->pos;
    llm_tc_ws(p, n, &k);
    r2 = llm_tc_lit(p, n, &k, qc ? "</tool_call>" : "</minimax:tool_call>");
    if (r2 == M_OK) {
        tc->pos = k;
        llm_tc_to_text(tc);
        return R_MORE;
    }
    if (r1 == M_NEED || r2 == M_NEED) {
        goto need;
    }
bad:
    if (tc->in_block) {
        llm_tc_set_mark(tc, tc->pos, 0);
    }
    llm_tc_fallback(tc, out);
    return R_MORE;

need:
    if (final && tc->in_block) {
        tc->pos = tc->len;          /* the block was cut off after calls */
        return R_NEED;
    }
    if (!final && n - tc->pos <= LLM_TC_HEAD_MAX) {
        return R_NEED;
    }
    goto bad;
}

/* minimax-m2 <parameter name="k"> or </invoke>; qwen3-coder
 * <parameter=k>\n or </function> */
static int
llm_tc_mm_phead(llm_toolcall_t *tc, int final, const llm_text_out_t *out)
{
    const char *p = tc->b;
    size_t      n = tc->len, k, nl;
    char        key[LLM_TC_NAME_MAX + 1];
    int         r1, r2, rc, qc = tc->fmt == LLM_TOOLFMT_QWEN3_CODER;

    k = tc->pos;
    llm_tc_ws(p, n, &k);
    if (k == n) {
        goto need;
    }
    r1 = llm_tc_lit(p, n, &k, qc ? "<parameter=" : "<parameter name=\"");
    if (r1 == M_OK) {
        r1 = llm_tc_name_to(p, n, &k, qc ? ">" : "\">", key, &nl);
        if (r1 == M_OK && qc) {
            /* the value starts on the next line */
            if (k == n) {
                r1 = M_NEED;
            } else if (p[k] == '\n') {
                k++;
            }
        }
        if (r1 == M_NEED) {
            goto need;
        }
        if (r1 == M_BAD) {
            goto bad;
        }
        rc = llm_tc_mm_key(tc, out, key, nl);
        if (rc != 0) {
            return rc;
        }
        tc->pos = k;
        tc->state = S_MM_VALUE;
        return R_MORE;
    }
    k = tc->pos;
    llm_tc_ws(p, n, &k);
    r2 = llm_tc_lit(p, n, &k, qc ? "</function>" : "</invoke>");
    if (r2 == M_OK) {
        llm_tc_mm_close_args(tc, out);
        tc->pos = k;
        tc->state = S_MM_BLOCK;
        return R_MORE;
    }
    if (r1 == M_NEED || r2 == M_NEED) {
        goto need;
    }
bad:
    llm_tc_mm_close_args(tc, out);
    llm_tc_set_mark(tc, tc->pos, 0);
    llm_tc_fallback(tc, out);
    return R_MORE;

need:
    if (!final && n - tc->pos <= LLM_TC_HEAD_MAX) {
        return R_NEED;
    }
    if (final) {
        llm_tc_mm_close_args(tc, out);
        tc->pos = tc->len;
        return R_NEED;
    }
    goto bad;
}

/* A non-string parameter value: as JSON when it is JSON, else a string. */
static int
llm_tc_mm_json_value(llm_toolcall_t *tc, const llm_text_out_t *out,
    const char *s, size_t n)
{
    size_t        a = 0, z = n;
    json_t       *j;
    json_error_t  je;
    int           rc;

    while (a < z && isspace((unsigned char) s[a])) {
        a++;
    }
    while (z > a && isspace((unsigned char) s[z - 1])) {
        z--;
    }
    j = z > a ? json_loadb(s + a, z - a, JSON_DECODE_ANY, &je) : NULL;
    if (j) {
        json_decref(j);
        llm_tc_args(tc, out, s + a, z - a);
        return 0;
    }
    /* Python's spelling, as templates that print values with |string
     * write them (Qwen3-Coder, Qwen3.5) */
    if (z - a == 4 && memcmp(s + a, "True", 4) == 0) {
        llm_tc_args(tc, out, "true", 4);
        return 0;
    }
    if (z - a == 5 && memcmp(s + a, "False", 5) == 0) {
        llm_tc_args(tc, out, "false", 5);
        return 0;
    }
    if (z - a == 4 && memcmp(s + a, "None", 4) == 0) {
        llm_tc_args(tc, out, "null", 4);
        return 0;
    }
    llm_tc_args(tc, out, "\"", 1);
    rc = llm_tc_args_escaped(tc, out, s, n);
    llm_tc_args(tc, out, "\"", 1);
    return rc;
}

/* A parameter's value up to its closer (minimax-m2 </parameter>, glm4.5
 * </arg_value>): a string streamed as it comes, any other value once it
 * is whole. */
static int
llm_tc_mm_value(llm_toolcall_t *tc, int final, const llm_text_out_t *out)
{
    int                glm = tc->fmt == LLM_TOOLFMT_GLM45;
    int                qc = tc->fmt == LLM_TOOLFMT_QWEN3_CODER;
    const char        *closer = glm ? "</arg_value>" : "</parameter>";
    size_t             cl = strlen(closer);
    const char        *p = tc->b + tc->pos, *f;
    size_t             n = tc->len - tc->pos, k, kv;
    int                rc;

    /* a string value is streamed from pos; any other waits at pos */
    f = n >= cl ? memmem(p, n, closer, cl) : NULL;
    if (f || final) {
        k = f ? (size_t) (f - p) : n;
        kv = k;
        if (qc && kv > 0 && p[kv - 1] == '\n') {
            kv--;       /* qwen3-coder: the value ends its line */
        }
        if (tc->vstring) {
            rc = llm_tc_args_escaped(tc, out, p, kv);
            llm_tc_args(tc, out, "\"", 1);
        } else {
            rc = llm_tc_mm_json_value(tc, out, p, kv);
        }
        if (rc != 0) {
            return rc;
        }
        if (f == NULL) {
            llm_tc_mm_close_args(tc, out);
            tc->pos = tc->len;
            return R_NEED;
        }
        tc->pos += k + cl;
        tc->state = glm ? S_GLM_ARGS : S_MM_PHEAD;
        return R_MORE;
    }
    if (!tc->vstring) {
        return R_NEED;
    }
    /* stream the string, holding back what could start the closer */
    k = n > cl - 1 ? n - (cl - 1) : 0;
    for (; k < n; k++) {
        if (p[k] == '<' && memcmp(p + k, closer, n - k) == 0) {
            break;
        }
    }
    if (qc && k > 0 && p[k - 1] == '\n') {
        k--;            /* perhaps the newline before the closer */
    }
    rc = llm_tc_args_escaped(tc, out, p, k);
    tc->pos += k;
    return rc != 0 ? rc : R_NEED;
}


/* deepseek-v3 */

static int
llm_tc_ds_block(llm_toolcall_t *tc, int final, const llm_text_out_t *out)
{
    size_t k = tc->pos, k0;
    int    r1, r2, km = tc->fmt == LLM_TOOLFMT_KIMI_K2;

    llm_tc_ws(tc->b, tc->len, &k);
    k0 = k;
    r1 = llm_tc_lit(tc->b, tc->len, &k, km ? KM_CALL_BEGIN : DS_CALL_BEGIN);
    if (r1 == M_OK) {
        tc->pos = k;
        if (!tc->mark_live) {
            llm_tc_set_mark(tc, k0, k - k0);
        }
        tc->state = S_DS_HEAD;
        return R_MORE;
    }
    r2 = llm_tc_lit(tc->b, tc->len, &k, km ? KM_CALLS_END : DS_CALLS_END);
    if (r2 == M_OK) {
        tc->pos = k;
        llm_tc_to_text(tc);
        return R_MORE;
    }
    if ((r1 == M_NEED || r2 == M_NEED) && !final) {
        return R_NEED;
    }
    if (final && tc->in_block) {
        tc->pos = tc->len;
        return R_NEED;
    }
    if (tc->in_block) {
        llm_tc_set_mark(tc, tc->pos, 0);
    }
    llm_tc_fallback(tc, out);
    return R_MORE;
}

/*
 * kimi-k2: the call's id functions.NAME:INDEX, <|tool_call_argument_begin|>
 * and the arguments' '{'; the name is NAME (an id without the functions.
 * prefix or the :INDEX is taken whole).
 */
static int
llm_tc_kimi_head(llm_toolcall_t *tc, int final, const llm_text_out_t *out)
{
    const char *p = tc->b, *c;
    size_t      n = tc->len, k = tc->pos, s0, s1;
    char        name[LLM_TC_NAME_MAX + 1];
    int         r;

    r = llm_tc_until(p, n, &k, "<", LLM_TC_NAME_MAX, &s0, &s1);
    if (r == M_NEED) {
        goto need;
    }
    if (r == M_BAD || s1 == s0) {
        goto bad;
    }
    r = llm_tc_lit(p, n, &k, KM_ARGS);
    if (r == M_NEED) {
        goto need;
    }
    if (r == M_BAD) {
        goto bad;
    }
    llm_tc_ws(p, n, &k);
    r = llm_tc_lit(p, n, &k, "{");
    if (r == M_NEED) {
        goto need;
    }
    if (r == M_BAD) {
        goto bad;
    }
    if (s1 - s0 > 10 && memcmp(p + s0, "functions.", 10) == 0) {
        s0 += 10;
    }
    for (c = p + s1; c > p + s0 && isdigit((unsigned char) c[-1]); c--) {
        /* void */
    }
    if (c > p + s0 + 1 && c < p + s1 && c[-1] == ':') {
        s1 = (size_t) (c - 1 - p);
    }
    memcpy(name, p + s0, s1 - s0);
    name[s1 - s0] = '\0';
    llm_tc_begin_call(tc, out, name);
    tc->ds_v3 = 0;
    tc->pos = k - 1;
    tc->depth = tc->in_str = tc->esc = 0;
    tc->after_args = S_DS_TAIL;
    tc->state = S_JARGS;
    return R_MORE;

need:
    if (!final && n - tc->pos <= LLM_TC_HEAD_MAX) {
        return R_NEED;
    }
bad:
    llm_tc_fallback(tc, out);
    return R_MORE;
}

static int
llm_tc_ds_head(llm_toolcall_t *tc, int final, const llm_text_out_t *out)
{
    const char *p = tc->b;
    size_t      n = tc->len, k = tc->pos, s0, s1, n0, n1;
    char        name[LLM_TC_NAME_MAX + 1];
    int         r, v3 = 0;

    if (tc->fmt == LLM_TOOLFMT_KIMI_K2) {
        return llm_tc_kimi_head(tc, final, out);
    }

    r = llm_tc_until(p, n, &k, "<\n", LLM_TC_NAME_MAX, &s0, &s1);
    if (r == M_NEED) {
        goto need;
    }
    if (r == M_BAD || p[k] != '<' || s1 == s0) {
        goto bad;
    }
    r = llm_tc_lit(p, n, &k, DS_SEP);
    if (r == M_NEED) {
        goto need;
    }
    if (r == M_BAD) {
        goto bad;
    }
    if (s1 - s0 == 8 && memcmp(p + s0, "function", 8) == 0) {
        r = llm_tc_until(p, n, &k, "\n{`", LLM_TC_NAME_MAX, &n0, &n1);
        if (r == M_NEED) {
            goto need;
        }
        if (r == M_BAD) {
            goto bad;
        }
        if (p[k] == '\n' && n1 > n0) {
            /* V3: function<sep>name\n```json\n{...} */
            v3 = 1;
            s0 = n0;
            s1 = n1;
            llm_tc_ws(p, n, &k);
            r = llm_tc_lit(p, n, &k, "```");
            if (r == M_NEED) {
                goto need;
            }
            if (r == M_BAD) {
                goto bad;
            }
            r = llm_tc_lit(p, n, &k, "json");
            if (r == M_NEED) {
                goto need;
            }
        } else if (p[k] != '{' || n1 != n0) {
            goto bad;
        }
    }
    llm_tc_ws(p, n, &k);
    r = llm_tc_lit(p, n, &k, "{");
    if (r == M_NEED) {
        goto need;
    }
    if (r == M_BAD) {
        goto bad;
    }
    while (s1 > s0 && isspace((unsigned char) p[s1 - 1])) {
        s1--;
    }
    while (s0 < s1 && isspace((unsigned char) p[s0])) {
        s0++;
    }
    if (s0 == s1) {
        goto bad;
    }
    memcpy(name, p + s0, s1 - s0);
    name[s1 - s0] = '\0';
    llm_tc_begin_call(tc, out, name);
    tc->ds_v3 = v3;
    tc->pos = k - 1;
    tc->depth = tc->in_str = tc->esc = 0;
    tc->after_args = S_DS_TAIL;
    tc->state = S_JARGS;
    return R_MORE;

need:
    if (!final && n - tc->pos <= LLM_TC_HEAD_MAX) {
        return R_NEED;
    }
bad:
    llm_tc_fallback(tc, out);
    return R_MORE;
}

static int
llm_tc_ds_tail(llm_toolcall_t *tc, int final)
{
    size_t k = tc->pos;
    int    r;

    llm_tc_ws(tc->b, tc->len, &k);
    if (tc->ds_v3) {
        r = llm_tc_lit(tc->b, tc->len, &k, "```");
        if (r == M_NEED && !final) {
            return R_NEED;
        }
        llm_tc_ws(tc->b, tc->len, &k);
    }
    r = llm_tc_lit(tc->b, tc->len, &k, tc->fmt == LLM_TOOLFMT_KIMI_K2
                                       ? KM_CALL_END : DS_CALL_END);
    if (r == M_OK) {
        tc->pos = k;
        tc->state = S_DS_BLOCK;
        return R_MORE;
    }
    if (r == M_NEED) {
        if (!final) {
            return R_NEED;
        }
        tc->pos = tc->len;
        return R_NEED;
    }
    llm_tc_to_text(tc);
    return R_MORE;
}


/* glm4.5 */

/*
 * After <tool_call>: the name up to a newline or '<' (GLM-4.5/4.6 write
 * `f\n`, GLM-4.7 `f` alone), then <arg_key> or </tool_call>, whole: only
 * then the call begins (the head is parsed again from its start as bytes
 * arrive).  A name with a space in it, or anything else, is not a call.
 */
static int
llm_tc_glm_head(llm_toolcall_t *tc, int final, const llm_text_out_t *out)
{
    const char *p = tc->b;
    size_t      n = tc->len, k = tc->pos, k0, s0, s1;
    char        name[LLM_TC_NAME_MAX + 1];
    int         r1, r2;

    llm_tc_ws(p, n, &k);
    r1 = llm_tc_until(p, n, &k, "< \t\r\n", LLM_TC_NAME_MAX, &s0, &s1);
    if (r1 == M_NEED) {
        goto need;
    }
    if (r1 == M_BAD || s1 == s0) {
        goto bad;
    }
    llm_tc_ws(p, n, &k);
    k0 = k;
    r1 = llm_tc_lit(p, n, &k, "<arg_key>");
    k = k0;
    r2 = llm_tc_lit(p, n, &k, "</tool_call>");
    if (r1 == M_OK || r2 == M_OK) {
        memcpy(name, p + s0, s1 - s0);
        name[s1 - s0] = '\0';
        llm_tc_begin_call(tc, out, name);
        tc->props = llm_tc_tool_props(tc, name);
        tc->n_params = 0;
        tc->pos = k0;
        tc->state = S_GLM_ARGS;
        return R_MORE;
    }
    if (r1 == M_NEED || r2 == M_NEED) {
        goto need;
    }
bad:
    llm_tc_fallback(tc, out);
    return R_MORE;

need:
    if (!final && n - tc->pos <= LLM_TC_HEAD_MAX) {
        return R_NEED;
    }
    goto bad;
}

/*
 * In a call: <arg_key>k</arg_key> and <arg_value> (whitespace between
 * them and before each is skipped), then the value (S_MM_VALUE); or
 * </tool_call>, which ends the call.  Anything else ends the call as it
 * is (its arguments closed) and is content; cut off at the end, the
 * arguments are closed.
 */
static int
llm_tc_glm_args(llm_toolcall_t *tc, int final, const llm_text_out_t *out)
{
    const char *p = tc->b;
    size_t      n = tc->len, k, s0 = 0, s1 = 0;
    char        key[LLM_TC_NAME_MAX + 1];
    int         r, rc;

    k = tc->pos;
    llm_tc_ws(p, n, &k);
    r = llm_tc_lit(p, n, &k, "</tool_call>");
    if (r == M_OK) {
        llm_tc_mm_close_args(tc, out);
        tc->pos = k;
        llm_tc_to_text(tc);
        return R_MORE;
    }
    if (r == M_NEED) {
        goto need;
    }
    r = llm_tc_lit(p, n, &k, "<arg_key>");
    if (r == M_OK) {
        r = llm_tc_until(p, n, &k, "<", LLM_TC_NAME_MAX, &s0, &s1);
    }
    if (r == M_OK) {
        r = s1 > s0 ? llm_tc_lit(p, n, &k, "</arg_key>") : M_BAD;
    }
    if (r == M_OK) {
        llm_tc_ws(p, n, &k);
        r = llm_tc_lit(p, n, &k, "<arg_value>");
    }
    if (r == M_NEED) {
        goto need;
    }
    if (r == M_BAD) {
        goto bad;
    }
    memcpy(key, p + s0, s1 - s0);
    key[s1 - s0] = '\0';
    rc = llm_tc_mm_key(tc, out, key, s1 - s0);
    if (rc != 0) {
        return rc;
    }
    tc->pos = k;
    tc->state = S_MM_VALUE;
    return R_MORE;

bad:
    llm_tc_mm_close_args(tc, out);
    llm_tc_set_mark(tc, tc->pos, 0);
    llm_tc_fallback(tc, out);
    return R_MORE;

need:
    if (!final && n - tc->pos <= LLM_TC_HEAD_MAX) {
        return R_NEED;
    }
    if (final) {
        llm_tc_mm_close_args(tc, out);
        tc->pos = tc->len;
        return R_NEED;
    }
    goto bad;
}


/* The driver. */

static int
llm_tc_step(llm_toolcall_t *tc, int final, const llm_text_out_t *out)
{
    switch (tc->state) {
    case S_TEXT:       return llm_tc_text(tc, final, out);
    case S_PLAIN:      return llm_tc_plain(tc, out);
    case S_L3_START:   return llm_tc_l3_start(tc, final);
    case S_L3_BETWEEN: return llm_tc_l3_between(tc, final);
    case S_JHEAD:      return llm_tc_jhead(tc, final, out);
    case S_JARGS:      return llm_tc_jargs(tc, final, out);
    case S_JTAIL:      return llm_tc_jtail(tc, final);
    case S_JSKIP:      return llm_tc_jskip(tc, final);
    case S_HERMES_END: return llm_tc_hermes_end(tc, final);
    case S_MS_HEAD:    return llm_tc_ms_head(tc, final, out);
    case S_MS_NEXT:    return llm_tc_ms_next(tc, final);
    case S_MM_BLOCK:   return llm_tc_mm_block(tc, final, out);
    case S_MM_PHEAD:   return llm_tc_mm_phead(tc, final, out);
    case S_MM_VALUE:   return llm_tc_mm_value(tc, final, out);
    case S_DS_BLOCK:   return llm_tc_ds_block(tc, final, out);
    case S_DS_HEAD:    return llm_tc_ds_head(tc, final, out);
    case S_DS_TAIL:    return llm_tc_ds_tail(tc, final);
    case S_GLM_HEAD:   return llm_tc_glm_head(tc, final, out);
    case S_GLM_ARGS:   return llm_tc_glm_args(tc, final, out);
    }
    return -EINVAL;
}

int
llm_toolcall_feed(llm_toolcall_t *tc, const char *s, size_t len, int final,
    const llm_text_out_t *out)
{
    size_t keep;
    int    rc;

    /* a buffer from the first call on, also for len 0: the states do
     * arithmetic on it */
    if (tc->len + len > tc->cap || tc->b == NULL) {
        size_t  cap = tc->cap ? tc->cap : 256;
        char   *b;

        while (cap < tc->len + len) {
            cap *= 2;
        }
        b = realloc(tc->b, cap);
        if (b == NULL) {
            return -ENOMEM;
        }
        tc->b = b;
        tc->cap = cap;
    }
    if (len) {
        memcpy(tc->b + tc->len, s, len);
        tc->len += len;
    }

    do {
        rc = llm_tc_step(tc, final, out);
        if (rc < 0) {
            return rc;
        }
    } while (rc == R_MORE);

    /* drop what is decided, but keep what a fallback may give back */
    keep = tc->pos;
    if (tc->mark_live && tc->mark < keep) {
        keep = tc->mark;
    }
    if (keep > 0) {
        memmove(tc->b, tc->b + keep, tc->len - keep);
        tc->len -= keep;
        tc->pos -= keep;
        if (tc->mark_live) {
            tc->mark -= keep;
        }
    }
    return (int) tc->n_calls;
}

int
llm_toolcall_create(llm_toolcall_t **out, int fmt, const json_t *tools,
    uint64_t seed, char *err, size_t errlen)
{
    llm_toolcall_t *tc;

    *out = NULL;
    if (fmt <= LLM_TOOLFMT_NONE || fmt > LLM_TOOLFMT_QWEN3_CODER) {
        snprintf(err, errlen, "tool-call format %d: no parser", fmt);
        return -EINVAL;
    }
    tc = calloc(1, sizeof(*tc));
    if (tc == NULL) {
        snprintf(err, errlen, "tool-call parser: out of memory");
        return -ENOMEM;
    }
    tc->fmt = fmt;
    if (tools != NULL) {
        if (!json_is_array(tools)) {
            snprintf(err, errlen, "tools: not a JSON array");
            llm_toolcall_free(tc);
            return -EINVAL;
        }
        tc->tools = json_incref((json_t *) tools);
    }
    if (seed == 0 && getrandom(&seed, sizeof(seed), 0) != sizeof(seed)) {
        seed = (uint64_t) (uintptr_t) tc;
    }
    llm_rng_seed(&tc->rng, seed);
    tc->state = fmt == LLM_TOOLFMT_LLAMA3_JSON ? S_L3_START : S_TEXT;
    *out = tc;
    return 0;
}

void
llm_toolcall_free(llm_toolcall_t *tc)
{
    if (tc == NULL) {
        return;
    }
    json_decref(tc->tools);
    free(tc->b);
    free(tc->tmp);
    free(tc);
}
