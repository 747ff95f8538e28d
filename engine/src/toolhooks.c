/*
 * Tool-call hooks: the family's parser on the text, and the tool grammar
 * on the logits (toolhooks.h).
 *
 * The grammar is a small machine of phases around the JSON automaton of
 * grammar.h:
 *
 *   FREE    text; the model may write the opener (auto), or must not
 *           (none: tokens that would complete the opener are masked)
 *   LIT     a literal (an opener, a closer), a token at a time, each
 *           token a piece of what is left of it
 *   SET     one of a few literals: a tool's name and what follows it
 *           (mistral: f[ARGS], deepseek-v3: f<｜tool▁sep｜>), or what may
 *           follow a call (deepseek-v3: another call, or the end)
 *   JSON    the call's JSON: for hermes and llama3-json the call object
 *           {"name": ..., "arguments": ...}, an anyOf of one branch per
 *           allowed tool (name const, arguments the tool's parameters,
 *           keys in that order); for mistral and deepseek-v3 the chosen
 *           tool's arguments.  Once complete, the closer's first pieces
 *           (or, for mistral, another [TOOL_CALLS] and the end) are
 *           allowed as well
 *   AFTER   hermes after a call: the end, or (parallel_tool_calls) up to
 *           two whitespace bytes and the opener of another call
 *   END     only the end
 *   OFF     no constraint (the family has no tool grammar, or the model
 *           got past what the grammar can follow)
 *
 * The literal, whitespace and end tokens are few; they are found once per
 * sequence by one pass over the vocabulary.
 */

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "toolcall.h"
#include "toolhooks.h"

#define LLM_TH_WS_MAX   2
#define LLM_TH_MARKERS  8
#define LLM_TH_LITS     8
#define LLM_TH_SBUF     320     /* a name and its separator */

#define DS_MARK(s)      "<\xef\xbd\x9ctool\xe2\x96\x81" s "\xef\xbd\x9c>"
#define DS_CALLS_BEGIN  DS_MARK("calls\xe2\x96\x81" "begin")
#define DS_CALLS_END    DS_MARK("calls\xe2\x96\x81" "end")
#define DS_CALL_BEGIN   DS_MARK("call\xe2\x96\x81" "begin")
#define DS_CALL_END     DS_MARK("call\xe2\x96\x81" "end")
#define DS_SEP          DS_MARK("sep")

/* Every marker of each family (toolcall.h), NULL-terminated. */
static const char *llm_th_markers[][LLM_TH_MARKERS] = {
    [LLM_TOOLFMT_NONE] = { NULL },
    [LLM_TOOLFMT_HERMES] = { "<tool_call>", "</tool_call>", NULL },
    [LLM_TOOLFMT_MINIMAX_M2] = { "<minimax:tool_call>",
                                 "</minimax:tool_call>", NULL },
    [LLM_TOOLFMT_LLAMA3_JSON] = { "<|python_tag|>", NULL },
    [LLM_TOOLFMT_MISTRAL] = { "[TOOL_CALLS]", "[ARGS]", "[CALL_ID]", NULL },
    [LLM_TOOLFMT_DEEPSEEK_V3] = { DS_CALLS_BEGIN, DS_CALLS_END,
                                  DS_CALL_BEGIN, DS_CALL_END, DS_SEP, NULL },
};

typedef enum {
    TH_AUTO = 0,
    TH_NONE,
    TH_REQUIRED,
    TH_NAMED
} llm_th_choice_e;

typedef enum {
    TP_FREE = 0,
    TP_LIT,
    TP_SET,
    TP_JSON,
    TP_AFTER,
    TP_END,
    TP_OFF
} llm_th_phase_e;

/* Where a literal leads. */
typedef enum {
    NX_JSON = 0,     /* the call's JSON (of tool `tool` when per tool) */
    NX_NAMES,        /* the set of names */
    NX_CALLBEGIN,    /* deepseek-v3: <｜tool▁call▁begin｜>, then names */
    NX_AFTER,        /* what may follow a call */
    NX_END,
    NX_OFF
} llm_th_next_e;

typedef struct {
    char           *s;          /* owned */
    size_t          len;
    llm_th_next_e   next;
    int             tool;
} llm_th_cand_t;

typedef struct {
    const llm_hooks_ctx_t  *ctx;
    int                     fmt;
    llm_th_choice_e         choice;
    int                     parallel;
    llm_toolcall_t         *parser;

    /* grammars: the call object, or one per allowed tool */
    llm_grammar_t          *grammar;
    llm_gstate_t           *gst;
    llm_grammar_t         **tg;
    llm_gstate_t          **tst;
    uint32_t                n_tg;
    llm_gstate_t           *st;          /* the one in use */
    int                     constrained;

    /* the family's shape */
    const char             *opener;
    llm_th_next_e           opener_next;
    const char             *closer;      /* after the JSON, then AFTER */
    const char             *json_union;  /* allowed once the JSON is whole */
    llm_th_next_e           union_next;
    int                     json_eog;    /* the end allowed then too */
    llm_th_cand_t          *names;
    uint32_t                n_names;
    llm_th_cand_t           after[2];    /* deepseek-v3 after a call */
    uint32_t                n_after;

    llm_th_phase_e          phase;
    const char             *lit;
    size_t                  lit_off;
    llm_th_next_e           lit_next;
    const llm_th_cand_t    *set;
    uint32_t                n_set;
    char                    sbuf[LLM_TH_SBUF];
    size_t                  sbuf_len;
    uint32_t                ws;          /* AFTER: whitespace bytes so far */
    int                     started;     /* FREE: a non-space byte came */

    char                    tail[64];    /* FREE: the last bytes written */
    size_t                  tail_len;

    const char             *lits[LLM_TH_LITS];   /* fixed literals */
    uint32_t                n_lits;
    int32_t                *lit_toks;    /* pieces of any literal or name */
    uint32_t                n_lit;
    int32_t                *ws_toks;     /* 1-2 bytes of whitespace */
    uint32_t                n_ws;
    int32_t                *eog_toks;
    uint32_t                n_eog;
    int32_t                *has_opener;  /* tokens containing the opener */
    uint32_t                n_has;
    float                  *saved;

    /* markers that are control tokens: the detokenizer leaves them out
     * of the text, so accept() passes them to the parser (pending) */
    int32_t                 ctl_ids[LLM_TH_MARKERS];
    uint32_t                n_ctl;
    char                    pending[128];
    size_t                  pending_len;
} llm_th_t;


/* Token sets. */

static const char *
llm_th_bytes(const llm_th_t *th, int32_t id, size_t *len)
{
    const char *b = llm_token_bytes(th->ctx->vocab, id, 1, len);

    if (b == NULL) {
        *len = 0;
        return "";
    }
    return b;
}

static int
llm_th_push(int32_t **a, uint32_t *n, int32_t id)
{
    if (*n == 0 || (*n & (*n - 1)) == 0) {
        /* the size doubles at every power of two */
        int32_t *b = realloc(*a, (size_t) (*n ? *n * 2 : 1) * sizeof(int32_t));

        if (b == NULL) {
            return -ENOMEM;
        }
        *a = b;
    }
    (*a)[(*n)++] = id;
    return 0;
}

/* Is b a piece of s (a substring of it)? */
static int
llm_th_piece(const char *s, size_t sl, const char *b, size_t len)
{
    return sl && len <= sl && memmem(s, sl, b, len) != NULL;
}

static int
llm_th_scan_vocab(llm_th_t *th)
{
    const llm_vocab_t *v = th->ctx->vocab;
    uint32_t           n = llm_vocab_n_tokens(v);
    size_t             ol = th->opener ? strlen(th->opener) : 0;
    int                rc = 0;

    for (uint32_t id = 0; id < n && rc == 0; id++) {
        size_t      len;
        const char *b = llm_th_bytes(th, (int32_t) id, &len);
        size_t      k;
        int         lit = 0;

        if (llm_vocab_is_eog(v, (int32_t) id)) {
            rc = llm_th_push(&th->eog_toks, &th->n_eog, (int32_t) id);
            continue;
        }
        if (len == 0) {
            continue;
        }
        for (uint32_t i = 0; i < th->n_lits && !lit; i++) {
            lit = llm_th_piece(th->lits[i], strlen(th->lits[i]), b, len);
        }
        for (uint32_t i = 0; i < th->n_names && !lit; i++) {
            lit = llm_th_piece(th->names[i].s, th->names[i].len, b, len);
        }
        if (lit) {
            rc = llm_th_push(&th->lit_toks, &th->n_lit, (int32_t) id);
        }
        if (rc == 0 && ol && memmem(b, len, th->opener, ol)) {
            rc = llm_th_push(&th->has_opener, &th->n_has, (int32_t) id);
        }
        if (rc == 0 && len <= LLM_TH_WS_MAX
            && !llm_vocab_is_control(v, (int32_t) id))
        {
            for (k = 0; k < len && (b[k] == ' ' || b[k] == '\n'
                                    || b[k] == '\t'); k++)
            {
                /* whitespace only */
            }
            if (k == len) {
                rc = llm_th_push(&th->ws_toks, &th->n_ws, (int32_t) id);
            }
        }
    }
    if (rc == 0) {
        th->saved = malloc((th->n_lit + th->n_ws + th->n_eog + 1)
                           * sizeof(float));
        if (th->saved == NULL) {
            rc = -ENOMEM;
        }
    }
    return rc;
}


/* Grammar. */

/* tools[i].function.parameters, with its $defs moved into defs. */
static json_t *
llm_th_params(json_t *f, json_t *defs, size_t i, char *err, size_t errlen)
{
    json_t     *p = json_object_get(f, "parameters"), *c, *d, *v;
    const char *k;

    if (p == NULL) {
        return json_pack("{s:s}", "type", "object");
    }
    c = json_deep_copy(p);
    if (c == NULL) {
        snprintf(err, errlen, "tools[%zu].function.parameters: out of "
                 "memory", i);
        return NULL;
    }
    d = json_object_get(c, "$defs");
    json_object_foreach(d, k, v) {
        json_t *o = json_object_get(defs, k);

        if (o && !json_equal(o, v)) {
            snprintf(err, errlen, "tools[%zu].function.parameters: $defs "
                     "name '%s' is used by another tool with another schema",
                     i, k);
            json_decref(c);
            return NULL;
        }
        json_object_set(defs, k, v);
    }
    json_object_del(c, "$defs");
    return c;
}

static int
llm_th_grammar(llm_th_t *th, json_t *tools, const char *only,
    const char *args_key, char *err, size_t errlen)
{
    json_t         *any = json_array(), *defs = json_object(), *root, *t;
    llm_grammar_t  *one;
    char            e2[256];
    size_t          i;
    int             rc = 0;

    if (any == NULL || defs == NULL) {
        rc = -ENOMEM;
        goto done;
    }
    json_array_foreach(tools, i, t) {
        json_t     *f = json_object_get(t, "function"), *ps, *br;
        const char *name = json_string_value(json_object_get(f, "name"));

        if (name == NULL) {
            snprintf(err, errlen, "tools[%zu].function.name: missing", i);
            rc = -EINVAL;
            goto done;
        }
        /* each tool's schema on its own, so that an error names it */
        rc = llm_grammar_compile(&one, json_object_get(f, "parameters"),
                                 LLM_GRAMMAR_ORDERED, e2, sizeof(e2));
        if (rc != 0) {
            snprintf(err, errlen, "tools[%zu].function.parameters: %s", i,
                     e2);
            goto done;
        }
        llm_grammar_free(one);
        if (only && strcmp(name, only) != 0) {
            continue;
        }
        ps = llm_th_params(f, defs, i, err, errlen);
        if (ps == NULL) {
            rc = -EINVAL;
            goto done;
        }
        br = json_pack("{s:s, s:{s:{s:s}, s:o}, s:[s, s], s:b}", "type",
                       "object", "properties", "name", "const", name,
                       args_key, ps, "required", "name", args_key,
                       "additionalProperties", 0);
        if (br == NULL || json_array_append_new(any, br) != 0) {
            rc = -ENOMEM;
            goto done;
        }
    }
    if (json_array_size(any) == 0) {
        snprintf(err, errlen, "tool_choice: no function named '%s' in "
                 "tools", only ? only : "");
        rc = -EINVAL;
        goto done;
    }
    if (json_array_size(any) == 1) {
        root = json_incref(json_array_get(any, 0));
    } else {
        root = json_pack("{s:O}", "anyOf", any);
    }
    if (root && json_object_size(defs)) {
        json_object_set(root, "$defs", defs);
    }
    if (root == NULL) {
        rc = -ENOMEM;
        goto done;
    }
    rc = llm_grammar_compile(&th->grammar, root,
                             LLM_GRAMMAR_ORDERED | LLM_GRAMMAR_STRICT, e2,
                             sizeof(e2));
    json_decref(root);
    if (rc != 0) {
        snprintf(err, errlen, "tools: %s", e2);
        goto done;
    }
    rc = llm_gstate_create(&th->gst, th->grammar);

done:
    if (rc == -ENOMEM && err[0] == '\0') {
        snprintf(err, errlen, "tools: out of memory");
    }
    json_decref(any);
    json_decref(defs);
    return rc;
}


/* mistral, deepseek-v3: one grammar per allowed tool (its parameters), and
 * the name candidates `name` + sep. */
static int
llm_th_grammar_per_tool(llm_th_t *th, json_t *tools, const char *only,
    const char *sep, char *err, size_t errlen)
{
    size_t   i, n = json_array_size(tools), sl = strlen(sep);
    json_t  *t;
    char     e2[256];
    int      rc;

    th->tg = calloc(n ? n : 1, sizeof(*th->tg));
    th->tst = calloc(n ? n : 1, sizeof(*th->tst));
    th->names = calloc(n ? n : 1, sizeof(*th->names));
    if (th->tg == NULL || th->tst == NULL || th->names == NULL) {
        snprintf(err, errlen, "tools: out of memory");
        return -ENOMEM;
    }
    json_array_foreach(tools, i, t) {
        json_t         *f = json_object_get(t, "function");
        const char     *name = json_string_value(json_object_get(f, "name"));
        json_t         *p = json_object_get(f, "parameters");
        llm_grammar_t  *g;
        llm_th_cand_t  *c;
        size_t          nl;

        if (name == NULL) {
            snprintf(err, errlen, "tools[%zu].function.name: missing", i);
            return -EINVAL;
        }
        rc = llm_grammar_compile(&g, p, LLM_GRAMMAR_ORDERED
                                        | LLM_GRAMMAR_STRICT, e2,
                                 sizeof(e2));
        if (rc != 0) {
            snprintf(err, errlen, "tools[%zu].function.parameters: %s", i,
                     e2);
            return rc;
        }
        if ((only && strcmp(name, only) != 0)
            || (nl = strlen(name)) + sl >= LLM_TH_SBUF)
        {
            llm_grammar_free(g);
            continue;
        }
        th->tg[th->n_tg] = g;
        rc = llm_gstate_create(&th->tst[th->n_tg], g);
        th->n_tg++;
        if (rc != 0) {
            snprintf(err, errlen, "tools: out of memory");
            return -ENOMEM;
        }
        c = &th->names[th->n_names++];
        c->s = malloc(nl + sl + 1);
        if (c->s == NULL) {
            snprintf(err, errlen, "tools: out of memory");
            return -ENOMEM;
        }
        memcpy(c->s, name, nl);
        memcpy(c->s + nl, sep, sl + 1);
        c->len = nl + sl;
        c->next = NX_JSON;
        c->tool = (int) th->n_tg - 1;
    }
    if (th->n_names == 0) {
        snprintf(err, errlen, "tool_choice: no function named '%s' in "
                 "tools", only ? only : "");
        return -EINVAL;
    }
    return 0;
}


/* The hooks. */

/* Keep only the tokens of ids that ok() takes (all when ok is NULL). */
static void
llm_th_keep_only(llm_th_t *th, float *logits, uint32_t n_vocab,
    const int32_t *ids, uint32_t n, int (*ok)(llm_th_t *, int32_t))
{
    uint32_t k = 0;

    for (uint32_t i = 0; i < n; i++) {
        if ((uint32_t) ids[i] < n_vocab && (ok == NULL || ok(th, ids[i]))) {
            th->saved[k++] = logits[ids[i]];
        }
    }
    for (uint32_t i = 0; i < n_vocab; i++) {
        logits[i] = -INFINITY;
    }
    k = 0;
    for (uint32_t i = 0; i < n; i++) {
        if ((uint32_t) ids[i] < n_vocab && (ok == NULL || ok(th, ids[i]))) {
            logits[ids[i]] = th->saved[k++];
        }
    }
}

/* Is the token a piece of what is left of the literal? */
static int
llm_th_lit_ok(llm_th_t *th, int32_t id)
{
    size_t      len, left = strlen(th->lit) - th->lit_off;
    const char *b = llm_th_bytes(th, id, &len);

    return len > 0 && len <= left && memcmp(b, th->lit + th->lit_off, len)
                                     == 0;
}

/* Does the token go on one of the set's literals? */
static int
llm_th_set_ok(llm_th_t *th, int32_t id)
{
    size_t      len;
    const char *b = llm_th_bytes(th, id, &len);

    if (len == 0) {
        return 0;
    }
    for (uint32_t i = 0; i < th->n_set; i++) {
        const llm_th_cand_t *c = &th->set[i];

        if (th->sbuf_len + len <= c->len
            && memcmp(c->s, th->sbuf, th->sbuf_len) == 0
            && memcmp(c->s + th->sbuf_len, b, len) == 0)
        {
            return 1;
        }
    }
    return 0;
}

static int
llm_th_ws_ok(llm_th_t *th, int32_t id)
{
    size_t len;

    llm_th_bytes(th, id, &len);
    return th->ws + len <= LLM_TH_WS_MAX;
}

static void llm_th_go(llm_th_t *th, llm_th_next_e nx, int tool);

/* The literal lit from off on, then nx (at once when it is all there). */
static void
llm_th_lit(llm_th_t *th, const char *lit, size_t off, llm_th_next_e nx)
{
    th->phase = TP_LIT;
    th->lit = lit;
    th->lit_off = off;
    th->lit_next = nx;
    if (lit[off] == '\0') {
        llm_th_go(th, nx, -1);
    }
}

static void
llm_th_go(llm_th_t *th, llm_th_next_e nx, int tool)
{
    th->ws = 0;
    switch (nx) {
    case NX_JSON:
        th->st = th->tst ? (tool >= 0 ? th->tst[tool] : NULL) : th->gst;
        if (th->st == NULL) {
            th->phase = TP_OFF;
            return;
        }
        llm_gstate_reset(th->st);
        th->phase = TP_JSON;
        return;
    case NX_NAMES:
        th->set = th->names;
        th->n_set = th->n_names;
        th->sbuf_len = 0;
        th->phase = th->n_names ? TP_SET : TP_OFF;
        return;
    case NX_CALLBEGIN:
        llm_th_lit(th, DS_CALL_BEGIN, 0, NX_NAMES);
        return;
    case NX_AFTER:
        if (th->n_after) {
            th->set = th->after;
            th->n_set = th->n_after;
            th->sbuf_len = 0;
            th->phase = TP_SET;
        } else {
            th->phase = TP_AFTER;
        }
        return;
    case NX_END:
        th->phase = TP_END;
        return;
    case NX_OFF:
        th->phase = TP_OFF;
        return;
    }
}

/* none: mask what would write the opener. */
static void
llm_th_mask_opener(llm_th_t *th, float *logits, uint32_t n_vocab)
{
    const char *o = th->opener;
    size_t      ol = strlen(o);
    uint32_t    nv = llm_vocab_n_tokens(th->ctx->vocab);

    for (uint32_t i = 0; i < th->n_has; i++) {
        if ((uint32_t) th->has_opener[i] < n_vocab) {
            logits[th->has_opener[i]] = -INFINITY;
        }
    }
    /* the opener finished by the next token */
    for (size_t k = ol - 1; k > 0; k--) {
        if (th->tail_len < k
            || memcmp(th->tail + th->tail_len - k, o, k) != 0)
        {
            continue;
        }
        for (uint32_t id = 0; id < nv && id < n_vocab; id++) {
            size_t      len;
            const char *b = llm_th_bytes(th, (int32_t) id, &len);

            if (len >= ol - k && memcmp(b, o + k, ol - k) == 0) {
                logits[id] = -INFINITY;
            }
        }
    }
}

/* The JSON's mask; once it is whole, the pieces that start json_union
 * are kept beside what the JSON allows. */
static int
llm_th_mask_json(llm_th_t *th, float *logits, uint32_t n_vocab)
{
    uint32_t nl = 0;
    int      rc, complete = llm_gstate_complete(th->st);

    if (complete && th->json_union) {
        th->lit = th->json_union;
        th->lit_off = 0;
        for (uint32_t i = 0; i < th->n_lit; i++) {
            if ((uint32_t) th->lit_toks[i] < n_vocab
                && llm_th_lit_ok(th, th->lit_toks[i]))
            {
                th->saved[nl++] = logits[th->lit_toks[i]];
            }
        }
    }
    rc = llm_tokindex_mask(th->ctx->tokindex, th->st,
                           th->json_eog ? LLM_GMASK_EOG : 0, logits, n_vocab);
    if (rc < 0) {
        return rc;
    }
    if (nl) {
        nl = 0;
        for (uint32_t i = 0; i < th->n_lit; i++) {
            if ((uint32_t) th->lit_toks[i] < n_vocab
                && llm_th_lit_ok(th, th->lit_toks[i]))
            {
                logits[th->lit_toks[i]] = th->saved[nl++];
            }
        }
    }
    return 0;
}

/* hermes after a call: the end; with parallel calls also whitespace and
 * the opener. */
static void
llm_th_mask_after(llm_th_t *th, float *logits, uint32_t n_vocab)
{
    uint32_t nl = 0;
    int      more = th->parallel && th->opener;

    th->lit = th->opener;
    th->lit_off = 0;
    for (uint32_t i = 0; i < th->n_eog; i++) {
        if ((uint32_t) th->eog_toks[i] < n_vocab) {
            th->saved[nl++] = logits[th->eog_toks[i]];
        }
    }
    for (uint32_t i = 0; more && i < th->n_lit; i++) {
        if ((uint32_t) th->lit_toks[i] < n_vocab
            && llm_th_lit_ok(th, th->lit_toks[i]))
        {
            th->saved[nl++] = logits[th->lit_toks[i]];
        }
    }
    for (uint32_t i = 0; more && i < th->n_ws; i++) {
        if ((uint32_t) th->ws_toks[i] < n_vocab
            && llm_th_ws_ok(th, th->ws_toks[i]))
        {
            th->saved[nl++] = logits[th->ws_toks[i]];
        }
    }
    for (uint32_t i = 0; i < n_vocab; i++) {
        logits[i] = -INFINITY;
    }
    nl = 0;
    for (uint32_t i = 0; i < th->n_eog; i++) {
        if ((uint32_t) th->eog_toks[i] < n_vocab) {
            logits[th->eog_toks[i]] = th->saved[nl++];
        }
    }
    for (uint32_t i = 0; more && i < th->n_lit; i++) {
        if ((uint32_t) th->lit_toks[i] < n_vocab
            && llm_th_lit_ok(th, th->lit_toks[i]))
        {
            logits[th->lit_toks[i]] = th->saved[nl++];
        }
    }
    for (uint32_t i = 0; more && i < th->n_ws; i++) {
        if ((uint32_t) th->ws_toks[i] < n_vocab
            && llm_th_ws_ok(th, th->ws_toks[i]))
        {
            logits[th->ws_toks[i]] = th->saved[nl++];
        }
    }
}

static int
llm_th_mask(void *ud, float *logits, uint32_t n_vocab)
{
    llm_th_t *th = ud;

    switch (th->phase) {
    case TP_FREE:
        if (th->choice == TH_NONE && th->opener) {
            llm_th_mask_opener(th, logits, n_vocab);
        }
        return 0;
    case TP_LIT:
        llm_th_keep_only(th, logits, n_vocab, th->lit_toks, th->n_lit,
                         llm_th_lit_ok);
        return 0;
    case TP_SET:
        llm_th_keep_only(th, logits, n_vocab, th->lit_toks, th->n_lit,
                         llm_th_set_ok);
        return 0;
    case TP_JSON:
        return llm_th_mask_json(th, logits, n_vocab);
    case TP_AFTER:
        llm_th_mask_after(th, logits, n_vocab);
        return 0;
    case TP_END:
        llm_th_keep_only(th, logits, n_vocab, th->eog_toks, th->n_eog,
                         NULL);
        return 0;
    case TP_OFF:
        return 0;
    }
    return 0;
}

/* FREE: remember the last bytes; with the opener written, the call
 * begins (for hermes its grammar gets the bytes after the opener). */
static void
llm_th_free_accept(llm_th_t *th, const char *b, size_t len)
{
    char        buf[sizeof(th->tail) + 256];
    size_t      n, ol, rest;
    const char *f;

    if (th->fmt == LLM_TOOLFMT_LLAMA3_JSON) {
        size_t k = 0;

        if (th->started || th->choice == TH_NONE) {
            return;
        }
        while (k < len && (b[k] == ' ' || b[k] == '\n' || b[k] == '\t')) {
            k++;
        }
        if (k == len) {
            return;
        }
        th->started = 1;
        if (b[k] != '{' || !th->constrained) {
            th->phase = TP_OFF;
            return;
        }
        llm_th_go(th, NX_JSON, -1);
        if (llm_gstate_feed(th->st, b + k, len - k) != 0) {
            th->phase = TP_OFF;
        }
        return;
    }
    if (th->opener == NULL) {
        return;
    }
    if (len > 256) {
        th->phase = TP_OFF;
        return;
    }
    memcpy(buf, th->tail, th->tail_len);
    memcpy(buf + th->tail_len, b, len);
    n = th->tail_len + len;
    ol = strlen(th->opener);
    f = memmem(buf, n, th->opener, ol);
    if (f && th->choice != TH_NONE) {
        rest = n - (size_t) (f - buf) - ol;
        th->tail_len = 0;
        if (!th->constrained) {
            th->phase = TP_OFF;
            return;
        }
        llm_th_go(th, th->opener_next, -1);
        if (rest && (th->phase != TP_JSON
                     || llm_gstate_feed(th->st, f + ol, rest) != 0))
        {
            th->phase = TP_OFF;    /* the token went past the opener */
        }
        return;
    }
    if (n > sizeof(th->tail)) {
        memcpy(th->tail, buf + n - sizeof(th->tail), sizeof(th->tail));
        th->tail_len = sizeof(th->tail);
    } else {
        memcpy(th->tail, buf, n);
        th->tail_len = n;
    }
}

static void
llm_th_set_accept(llm_th_t *th, const char *b, size_t len)
{
    int live = 0;

    if (th->sbuf_len + len > sizeof(th->sbuf)) {
        th->phase = TP_OFF;
        return;
    }
    memcpy(th->sbuf + th->sbuf_len, b, len);
    th->sbuf_len += len;
    for (uint32_t i = 0; i < th->n_set; i++) {
        const llm_th_cand_t *c = &th->set[i];

        if (th->sbuf_len > c->len || memcmp(c->s, th->sbuf, th->sbuf_len)) {
            continue;
        }
        if (th->sbuf_len == c->len) {
            llm_th_go(th, c->next, c->tool);
            return;
        }
        live = 1;
    }
    if (!live) {
        th->phase = TP_OFF;
    }
}

static int
llm_th_accept(void *ud, int32_t token)
{
    llm_th_t   *th = ud;
    size_t      len;
    const char *b;

    if (llm_vocab_is_eog(th->ctx->vocab, token)) {
        if (th->phase == TP_JSON) {
            llm_tokindex_accept(th->ctx->tokindex, th->st, token);
        }
        return 0;
    }
    b = llm_th_bytes(th, token, &len);
    for (uint32_t i = 0; i < th->n_ctl; i++) {
        if (th->ctl_ids[i] == token
            && th->pending_len + len <= sizeof(th->pending))
        {
            memcpy(th->pending + th->pending_len, b, len);
            th->pending_len += len;
        }
    }

    switch (th->phase) {
    case TP_FREE:
        llm_th_free_accept(th, b, len);
        break;

    case TP_LIT:
        if (!llm_th_lit_ok(th, token)) {
            th->phase = TP_OFF;
            break;
        }
        llm_th_lit(th, th->lit, th->lit_off + len, th->lit_next);
        break;

    case TP_SET:
        llm_th_set_accept(th, b, len);
        break;

    case TP_JSON:
        if (llm_tokindex_accept(th->ctx->tokindex, th->st, token) == 0) {
            break;
        }
        if (th->json_union && llm_gstate_complete(th->st)) {
            th->lit = th->json_union;
            th->lit_off = 0;
            if (llm_th_lit_ok(th, token)) {
                llm_th_lit(th, th->json_union, len, th->union_next);
                break;
            }
        }
        th->phase = TP_OFF;
        break;

    case TP_AFTER:
        if (th->opener && len && len <= LLM_TH_WS_MAX
            && memchr(" \n\t", b[0], 3))
        {
            th->ws += (uint32_t) len;
            break;
        }
        if (th->opener) {
            th->lit = th->opener;
            th->lit_off = 0;
            if (llm_th_lit_ok(th, token)) {
                llm_th_lit(th, th->opener, len, th->opener_next);
                break;
            }
        }
        th->phase = TP_OFF;
        break;

    case TP_END:
    case TP_OFF:
        break;
    }
    return 0;
}

static int
llm_th_text(void *ud, const char *s, size_t len, int final,
    const llm_text_out_t *out)
{
    llm_th_t *th = ud;
    int       rc;

    if (th->parser == NULL) {
        if (len) {
            out->content(out->sink, s, len);
        }
        return 0;
    }
    if (th->pending_len) {
        /* a control-token marker accepted since the last text */
        rc = llm_toolcall_feed(th->parser, th->pending, th->pending_len, 0,
                               out);
        th->pending_len = 0;
        if (rc < 0) {
            return rc;
        }
    }
    return llm_toolcall_feed(th->parser, s, len, final, out);
}

static void
llm_th_free(void *ud)
{
    llm_th_t *th = ud;

    if (th == NULL) {
        return;
    }
    llm_toolcall_free(th->parser);
    llm_gstate_free(th->gst);
    llm_grammar_free(th->grammar);
    for (uint32_t i = 0; i < th->n_tg; i++) {
        llm_gstate_free(th->tst[i]);
        llm_grammar_free(th->tg[i]);
    }
    free(th->tg);
    free(th->tst);
    for (uint32_t i = 0; i < th->n_names; i++) {
        free(th->names[i].s);
    }
    free(th->names);
    free(th->lit_toks);
    free(th->ws_toks);
    free(th->eog_toks);
    free(th->has_opener);
    free(th->saved);
    free(th);
}


/* Making them. */

static int
llm_th_choice(const char *tc, llm_th_choice_e *c, const char **name,
    json_t **obj, char *err, size_t errlen)
{
    json_t       *j, *f;
    json_error_t  je;

    *obj = NULL;
    *name = NULL;
    if (tc == NULL || tc[0] == '\0' || strcmp(tc, "auto") == 0) {
        *c = TH_AUTO;
        return 0;
    }
    if (strcmp(tc, "none") == 0) {
        *c = TH_NONE;
        return 0;
    }
    if (strcmp(tc, "required") == 0) {
        *c = TH_REQUIRED;
        return 0;
    }
    j = json_loads(tc, JSON_DECODE_ANY, &je);
    if (json_is_string(j)) {
        /* a JSON-quoted string */
        const char *s = json_string_value(j);
        int         rc = strcmp(s, "auto") && strcmp(s, "none")
                         && strcmp(s, "required") ? -EINVAL : 0;

        if (rc == 0) {
            *c = strcmp(s, "auto") == 0 ? TH_AUTO
                 : strcmp(s, "none") == 0 ? TH_NONE : TH_REQUIRED;
            json_decref(j);
            return 0;
        }
    }
    f = json_object_get(j, "function");
    if (!json_is_object(j)
        || !json_is_string(json_object_get(j, "type"))
        || strcmp(json_string_value(json_object_get(j, "type")), "function")
        || !json_is_string(json_object_get(f, "name")))
    {
        snprintf(err, errlen, "tool_choice: expected \"none\", \"auto\", "
                 "\"required\" or {\"type\": \"function\", \"function\": "
                 "{\"name\": ...}}");
        json_decref(j);
        return -EINVAL;
    }
    *c = TH_NAMED;
    *name = json_string_value(json_object_get(f, "name"));
    *obj = j;
    return 0;
}

/* The family's shape (see the top of the file). */
static int
llm_th_shape(llm_th_t *th, json_t *tools, const char *only, char *err,
    size_t errlen)
{
    int rc = 0;

    switch (th->fmt) {
    case LLM_TOOLFMT_HERMES:
        th->opener = "<tool_call>";
        th->opener_next = NX_JSON;
        th->closer = "</tool_call>";
        th->json_union = th->closer;
        th->union_next = NX_AFTER;
        th->lits[th->n_lits++] = th->opener;
        th->lits[th->n_lits++] = th->closer;
        if (th->choice != TH_NONE) {
            rc = llm_th_grammar(th, tools, only, "arguments", err, errlen);
        }
        break;
    case LLM_TOOLFMT_LLAMA3_JSON:
        th->json_eog = 1;
        if (th->choice != TH_NONE) {
            rc = llm_th_grammar(th, tools, only, "parameters", err, errlen);
        }
        break;
    case LLM_TOOLFMT_MISTRAL:
        th->opener = "[TOOL_CALLS]";
        th->opener_next = NX_NAMES;
        th->json_eog = 1;
        if (th->parallel) {
            th->json_union = th->opener;
            th->union_next = NX_NAMES;
        }
        th->lits[th->n_lits++] = th->opener;
        if (th->choice != TH_NONE) {
            rc = llm_th_grammar_per_tool(th, tools, only, "[ARGS]", err,
                                         errlen);
        }
        break;
    case LLM_TOOLFMT_DEEPSEEK_V3:
        th->opener = DS_CALLS_BEGIN;
        th->opener_next = NX_CALLBEGIN;
        th->json_union = DS_CALL_END;
        th->union_next = NX_AFTER;
        th->after[th->n_after++] = (llm_th_cand_t) {
            (char *) DS_CALLS_END, strlen(DS_CALLS_END), NX_END, -1 };
        if (th->parallel) {
            th->after[th->n_after++] = (llm_th_cand_t) {
                (char *) DS_CALL_BEGIN, strlen(DS_CALL_BEGIN), NX_NAMES,
                -1 };
        }
        th->lits[th->n_lits++] = DS_CALLS_BEGIN;
        th->lits[th->n_lits++] = DS_CALLS_END;
        th->lits[th->n_lits++] = DS_CALL_BEGIN;
        th->lits[th->n_lits++] = DS_CALL_END;
        if (th->choice != TH_NONE) {
            rc = llm_th_grammar_per_tool(th, tools, only, DS_SEP, err,
                                         errlen);
        }
        break;
    case LLM_TOOLFMT_MINIMAX_M2:
        th->opener = "<minimax:tool_call>";
        th->opener_next = NX_OFF;
        th->lits[th->n_lits++] = th->opener;
        break;
    default:
        break;
    }
    if (rc == 0 && only && th->grammar == NULL && th->n_names == 0) {
        /* no grammar to check it: the named function must be a tool */
        size_t  i;
        json_t *t;
        int     found = 0;

        json_array_foreach(tools, i, t) {
            const char *n = json_string_value(json_object_get(
                                json_object_get(t, "function"), "name"));

            found |= n && strcmp(n, only) == 0;
        }
        if (!found) {
            snprintf(err, errlen, "tool_choice: no function named '%s' in "
                     "tools", only);
            rc = -EINVAL;
        }
    }
    th->constrained = th->grammar != NULL || th->n_names > 0;
    return rc;
}

int
llm_tool_hooks_make(const llm_hooks_ctx_t *ctx,
    const Llm__GenerateRequest *g, uint32_t choice, llm_seq_hooks_t *out,
    char *err, size_t errlen)
{
    llm_th_t        *th;
    llm_th_choice_e  c;
    const char      *only, *rf = g->response_format_json;
    json_t          *obj = NULL, *tools = NULL;
    json_error_t     je;
    int              fmt, rc;

    (void) choice;
    if (g->tools_json == NULL || g->tools_json[0] == '\0'
        || g->is_completion)
    {
        return 0;
    }
    fmt = llm_toolfmt_from_name(ctx->tool_call_format);
    if (fmt <= LLM_TOOLFMT_NONE) {
        return 0;
    }
    rc = llm_th_choice(g->tool_choice_json, &c, &only, &obj, err, errlen);
    if (rc != 0) {
        return rc;
    }
    if (c == TH_NONE && rf && rf[0] && strstr(rf, "\"text\"") == NULL) {
        /* the response_format grammar owns the answer: no opener there */
        json_decref(obj);
        return 0;
    }
    if (rf && rf[0] && strstr(rf, "\"text\"") == NULL) {
        snprintf(err, errlen, "response_format: a JSON response_format "
                 "cannot be combined with tools unless tool_choice is "
                 "\"none\"");
        json_decref(obj);
        return -EINVAL;
    }

    th = calloc(1, sizeof(*th));
    if (th == NULL) {
        json_decref(obj);
        snprintf(err, errlen, "tools: out of memory");
        return -ENOMEM;
    }
    th->ctx = ctx;
    th->fmt = fmt;
    th->choice = c;
    th->parallel = g->parallel_tool_calls;

    tools = json_loads(g->tools_json, 0, &je);
    if (!json_is_array(tools)) {
        snprintf(err, errlen, "tools: not a JSON array (%s)", je.text);
        rc = -EINVAL;
        goto failed;
    }
    rc = llm_th_shape(th, tools, only, err, errlen);
    if (rc != 0) {
        goto failed;
    }
    rc = llm_th_scan_vocab(th);
    if (rc != 0) {
        snprintf(err, errlen, "tools: out of memory");
        goto failed;
    }
    if (c != TH_NONE) {
        rc = llm_toolcall_create(&th->parser, fmt, g->tools_json, 0, err,
                                 errlen);
        if (rc != 0) {
            goto failed;
        }
    }
    for (int k = 0; llm_th_markers[fmt][k]; k++) {
        const char *m = llm_th_markers[fmt][k];
        int32_t     id = llm_vocab_find(ctx->vocab, m, strlen(m));

        if (id >= 0 && llm_vocab_is_control(ctx->vocab, id)) {
            th->ctl_ids[th->n_ctl++] = id;
        }
    }

    th->phase = TP_FREE;
    if (c == TH_REQUIRED || c == TH_NAMED) {
        if (th->opener) {
            llm_th_lit(th, th->opener, 0,
                       th->constrained ? th->opener_next : NX_OFF);
        } else if (th->constrained) {
            llm_th_go(th, NX_JSON, -1);
        }
    }
    json_decref(obj);
    json_decref(tools);

    memset(out, 0, sizeof(*out));
    out->mask = llm_th_mask;
    out->accept = llm_th_accept;
    out->text = c == TH_NONE ? NULL : llm_th_text;
    out->free = llm_th_free;
    out->ud = th;
    return 1;

failed:
    json_decref(obj);
    json_decref(tools);
    llm_th_free(th);
    return rc;
}
