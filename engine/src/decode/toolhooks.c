/*
 * Tool-call hooks: the family's parser on the text, and the tool grammar
 * on the logits (toolhooks.h).
 *
 * The grammar is a small machine of phases around the JSON automaton of
 * grammar.h:
 *
 *   FREE    text; the model may write the opener (auto), or must not
 *           (none: tokens that would complete any of the family's
 *           markers, opener or closer, are masked, and the text hook
 *           drops a marker should one come all the same)
 *   LIT     a literal (an opener, a closer), a token at a time, each
 *           token a piece of what is left of it
 *   SET     one of a few literals: a tool's name and what follows it
 *           (mistral: f[ARGS], deepseek-v3: f<｜tool▁sep｜>), or what may
 *           follow a call (deepseek-v3: another call, or the end)
 *   JSON    the call's JSON: for hermes and llama3-json the call object
 *           {"name": ..., "arguments": ...}, an anyOf of one branch per
 *           allowed tool (name const, arguments the tool's parameters,
 *           keys in that order); for mistral and deepseek-v3 the chosen
 *           tool's arguments; for minimax-m2 and glm4.5 one parameter's
 *           value (any type but string) against its schema.  Once complete, the
 *           closer's first pieces (or, for mistral, another [TOOL_CALLS]
 *           and the end) are allowed as well
 *
 * minimax-m2 calls are written as its template shows them: the opener and
 * \n, then per call <invoke name="f">\n, per parameter (in the schema's
 * order, none past a required one still missing) <parameter name="k">,
 * the value and </parameter>\n, then </invoke>\n, and after the last call
 * </minimax:tool_call>.  glm4.5 calls likewise, as GLM-4.5/4.6's template
 * writes them: the opener, f\n, per parameter <arg_key>k</arg_key>\n
 * <arg_value>, the value and </arg_value>\n, then </tool_call>; then the
 * end or (parallel) whitespace and another opener, as for hermes.
 *   RAW     minimax-m2, glm4.5: a string parameter's value, any text up to
 *           </parameter>\n (</arg_value>\n), which may come only at the end
 *           of a token
 *   AFTER   hermes, glm4.5 after a call: the end, or (parallel_tool_calls) up to
 *           two whitespace bytes and the opener of another call
 *   END     only the end
 *   OFF     no constraint (the family has no tool grammar, or the model
 *           got past what the grammar can follow)
 *
 * glm4.7 writes the same as glm4.5 without the newlines, a name together
 * with its first parameter (llm_th_glm47_names).  harmony (gpt-oss) is
 * LIT <|channel|>commentary to=functions. (forced; under auto the
 * header's to=functions. in FREE), SET name + " <|constrain|>json
 * <|message|>", JSON, then <|call|> (an end token) and END; its text
 * hook passes content only (the reasoning split parses harmony calls).
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

#define KM_CALLS_BEGIN  "<|tool_calls_section_begin|>"
#define KM_CALLS_END    "<|tool_calls_section_end|>"
#define KM_CALL_BEGIN   "<|tool_call_begin|>"
#define KM_CALL_END     "<|tool_call_end|>"
#define KM_ARGS         "<|tool_call_argument_begin|>"

/* harmony (gpt-oss): a call is a commentary message to functions.NAME */
#define HM_FORCED       "<|channel|>commentary to=functions."
#define HM_OPENER       "to=functions."
#define HM_SEP          " <|constrain|>json<|message|>"
#define HM_CALL         "<|call|>"
#define HM_MESSAGE      "<|message|>"

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
    [LLM_TOOLFMT_GLM45] = { "<tool_call>", "</tool_call>", "<arg_key>",
                            "</arg_key>", "<arg_value>", "</arg_value>",
                            NULL },
    [LLM_TOOLFMT_KIMI_K2] = { KM_CALLS_BEGIN, KM_CALLS_END, KM_CALL_BEGIN,
                              KM_CALL_END, KM_ARGS, NULL },
    [LLM_TOOLFMT_QWEN3_CODER] = { "<tool_call>", "</tool_call>",
                                  "<function=", "</function>",
                                  "<parameter=", "</parameter>", NULL },
    [LLM_TOOLFMT_HARMONY] = { HM_OPENER, NULL },
};

/*
 * harmony's markup, control tokens in gpt-oss's vocabulary: where a
 * literal holds one that is a control token of the model's, only that
 * token may write it (a model never spells it in text pieces), and a text
 * token may not run into it.  <|start|>, <|end|> and <|channel|> end a
 * header's recipient or a message's body (the auto grammar's opener only
 * counts in a header); <|message|> starts a body.
 */
static const char *const llm_th_hm_ctl[] = {
    "<|channel|>", "<|constrain|>", "<|message|>", "<|call|>", "<|start|>",
    "<|end|>", NULL
};

/*
 * What a call of each family begins with beside its markers: the JSON
 * families' call object, as their templates and the grammar write it.
 * With tool_choice none these are masked too (not stripped: they are
 * also ordinary JSON), so that a model keen on calling cannot write the
 * call without its opener either.
 */
static const char *llm_th_heads[][3] = {
    [LLM_TOOLFMT_HERMES] = { "{\"name\": \"", "{\"name\":\"", NULL },
    [LLM_TOOLFMT_LLAMA3_JSON] = { "{\"name\": \"", "{\"name\":\"",
                                  NULL },
};

typedef enum {
    TP_FREE = 0,
    TP_LIT,
    TP_SET,
    TP_JSON,
    TP_RAW,
    TP_AFTER,
    TP_END,
    TP_OFF
} llm_th_phase_e;

/* Where a literal leads. */
typedef enum {
    NX_JSON = 0,     /* the call's JSON (of tool `tool` when per tool) */
    NX_NAMES,        /* the set of names */
    NX_CALLBEGIN,    /* deepseek-v3, kimi-k2: the call marker (call_begin),
                        then names */
    NX_MM_START,     /* minimax-m2: \n, then names */
    NX_HEAD,         /* hermes, llama3-json with many tools: the call
                        object's head {"name": ", then names */
    NX_AFTER,        /* what may follow a call */
    NX_MM_PARAMS,    /* minimax-m2, glm4.5: the next parameter (of tool
                        `tool`, or -1: of the tool being written) or the
                        call's end (</invoke>, </tool_call>) */
    NX_MM_VALUE,     /* minimax-m2, glm4.5: the value of parameter `tool` */
    NX_END,
    NX_OFF
} llm_th_next_e;

typedef struct {
    char           *s;          /* owned */
    size_t          len;
    llm_th_next_e   next;
    int             tool;
    int             mm_tool;    /* glm4.7: the tool (+ 1) of a name and
                                   its first parameter together */
} llm_th_cand_t;

/* minimax-m2, glm4.5: one allowed tool's parameters, in the schema's
 * order. */
typedef struct {
    uint32_t                n;
    int                    *required;
    llm_grammar_t         **g;           /* NULL: a string, written raw */
    llm_gstate_t          **st;
    llm_th_cand_t          *cands;       /* <parameter name="k">, then
                                            </invoke>\n at [n] */
    llm_th_cand_t         **enums;       /* a string with an enum: its
                                            values, each with the closer */
    uint32_t               *n_enums;
} llm_th_mmtool_t;

/* Newlines end the literals, as they end pre-tokens: a BPE token such as
 * ">\n" then lies inside one literal. */
#define MM_CLOSER       "</parameter>\n"
#define GLM_CLOSER      "</arg_value>\n"
#define GLM47_CLOSER    "</arg_value>"
#define QC_CLOSER       "\n</parameter>\n"     /* qwen3-coder */
#define QC_JSON_CLOSER  "</parameter>\n"

typedef struct {
    const llm_hooks_ctx_t  *ctx;
    int                     fmt;
    llm_tool_choice_e       choice;
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
    const char             *forced;      /* what a forced call starts with
                                            (NULL: the opener) */
    llm_th_next_e           forced_next;
    const char             *head;        /* NX_HEAD's literal */
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
    int32_t                *has_opener;  /* tokens containing the opener
                                            (none: any forbidden marker) */
    uint32_t                n_has;
    const char *const      *forbid;      /* none: the family's markers */
    const char             *masked[LLM_TH_MARKERS + 3];  /* none: those
                                            and the heads, NULL-ended */
    char                    hold[64];    /* none: a marker's start, held */
    size_t                  hold_len;
    float                  *saved;

    /* minimax-m2, glm4.5 */
    const char             *raw_closer;  /* what ends a value: MM_CLOSER,
                                            GLM_CLOSER */
    llm_th_mmtool_t        *mm;          /* per name candidate */
    uint32_t                n_mm;
    int                     mm_tool;
    uint32_t                mm_pos;      /* next parameter allowed */
    llm_th_cand_t          *pset;        /* the parameter set now */
    llm_th_cand_t          *mm_after;    /* </minimax:tool_call>, names */
    uint32_t                n_mm_after;
    char                    raw_tail[16];
    size_t                  raw_len;
    int32_t                *bad_raw;     /* </parameter> not at the end */
    uint32_t                n_bad_raw;

    /* markers that are control tokens: the detokenizer leaves them out
     * of the text, so accept() passes them to the parser (pending) */
    int32_t                 ctl_ids[LLM_TH_MARKERS];
    uint32_t                n_ctl;
    char                    pending[128];
    size_t                  pending_len;

    int                     glm47;       /* glm4.5 in GLM-4.7's compact
                                            form (no newlines) */

    /* harmony: the markup that is control tokens here (NULL-ended), and
     * whether the text so far is inside a message's body */
    const char             *hm_ctl[8];
    int                     hm_body;
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

/* Is b a piece of s (a substring of it)?  Both are short: a plain loop
 * costs less than memmem's set-up. */
static int
llm_th_piece(const char *s, size_t sl, const char *b, size_t len)
{
    for (size_t i = 0; len <= sl && i <= sl - len; i++) {
        if (s[i] == b[0] && memcmp(s + i, b, len) == 0) {
            return 1;
        }
    }
    return 0;
}

static void
llm_th_mark_bytes(uint8_t *in, const char *s, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        in[(uint8_t) s[i]] = 1;
    }
}

/* none: whether b holds one of the masked texts whole. */
static int
llm_th_has_marker(const llm_th_t *th, const char *b, size_t len)
{
    for (size_t i = 0; th->masked[i]; i++) {
        if (memmem(b, len, th->masked[i], strlen(th->masked[i]))) {
            return 1;
        }
    }
    return 0;
}

static int
llm_th_scan_vocab(llm_th_t *th)
{
    const llm_vocab_t *v = th->ctx->vocab;
    uint32_t           n = llm_vocab_n_tokens(v);
    size_t             ol = th->opener ? strlen(th->opener) : 0;
    uint8_t            in[256] = { 0 };   /* bytes of the literals */
    int                rc = 0;

    for (uint32_t i = 0; i < th->n_lits; i++) {
        llm_th_mark_bytes(in, th->lits[i], strlen(th->lits[i]));
    }
    for (uint32_t i = 0; i < th->n_names; i++) {
        llm_th_mark_bytes(in, th->names[i].s, th->names[i].len);
    }
    for (uint32_t t = 0; t < th->n_mm; t++) {
        for (uint32_t i = 0; i <= th->mm[t].n; i++) {
            llm_th_mark_bytes(in, th->mm[t].cands[i].s,
                              th->mm[t].cands[i].len);
        }
    }
    for (uint32_t id = 0; id < n && rc == 0; id++) {
        size_t      len;
        const char *b = llm_th_bytes(th, (int32_t) id, &len);
        size_t      k;
        int         lit = 0;

        if (llm_vocab_is_eog(v, (int32_t) id)) {
            rc = llm_th_push(&th->eog_toks, &th->n_eog, (int32_t) id);
            if (rc == 0 && th->fmt == LLM_TOOLFMT_HARMONY
                && len == strlen(HM_CALL) && memcmp(b, HM_CALL, len) == 0)
            {
                /* gpt-oss's <|call|> ends generation: the one end token
                 * that may close the arguments (as the literal's piece) */
                rc = llm_th_push(&th->lit_toks, &th->n_lit, (int32_t) id);
            }
            continue;
        }
        if (len == 0) {
            continue;
        }
        /* a piece of a literal has only bytes of the literals */
        for (k = 0; k < len && in[(uint8_t) b[k]]; k++) {
            /* nothing */
        }
        for (uint32_t i = 0; k == len && i < th->n_lits && !lit; i++) {
            lit = llm_th_piece(th->lits[i], strlen(th->lits[i]), b, len);
        }
        for (uint32_t i = 0; k == len && i < th->n_names && !lit; i++) {
            lit = llm_th_piece(th->names[i].s, th->names[i].len, b, len);
        }
        for (uint32_t t = 0; k == len && t < th->n_mm && !lit; t++) {
            for (uint32_t i = 0; i <= th->mm[t].n && !lit; i++) {
                lit = llm_th_piece(th->mm[t].cands[i].s,
                                   th->mm[t].cands[i].len, b, len);
            }
        }
        if (lit) {
            rc = llm_th_push(&th->lit_toks, &th->n_lit, (int32_t) id);
        }
        if (rc == 0 && th->n_mm && len >= strlen(th->raw_closer)) {
            size_t      cl = strlen(th->raw_closer);
            const char *c = memmem(b, len, th->raw_closer, cl);

            if (c && (size_t) (c - b) + cl != len) {
                rc = llm_th_push(&th->bad_raw, &th->n_bad_raw, (int32_t) id);
            }
        }
        if (rc == 0
            && (th->forbid ? llm_th_has_marker(th, b, len)
                           : ol && len >= ol
                             && memchr(b, th->opener[0], len - ol + 1)
                             && memmem(b, len, th->opener, ol)))
        {
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


/* Every name candidate gets prefix in front (kimi-k2's functions.). */
static int
llm_th_prefix_names(llm_th_t *th, const char *prefix, char *err,
    size_t errlen)
{
    size_t  pl = strlen(prefix);

    for (uint32_t i = 0; i < th->n_names; i++) {
        llm_th_cand_t *c = &th->names[i];
        char          *s = malloc(pl + c->len + 1);

        if (s == NULL) {
            snprintf(err, errlen, "tools: out of memory");
            return -ENOMEM;
        }
        memcpy(s, prefix, pl);
        memcpy(s + pl, c->s, c->len + 1);
        free(c->s);
        c->s = s;
        c->len += pl;
    }
    return 0;
}

static char *
llm_th_cat3(const char *a, const char *b, const char *c, size_t *len)
{
    size_t  la = strlen(a), lb = strlen(b), lc = strlen(c);
    char   *s = malloc(la + lb + lc + 1);

    if (s) {
        memcpy(s, a, la);
        memcpy(s + la, b, lb);
        memcpy(s + la + lb, c, lc + 1);
        *len = la + lb + lc;
    }
    return s;
}

/*
 * A raw string parameter with an enum of strings: its values, each
 * followed by the closer, as the candidates the value must be one of
 * (else the text up to the closer is free).  0, or -1 on no memory.
 */
static int
llm_th_mm_enum(llm_th_mmtool_t *t, json_t *p, const char *closer)
{
    json_t  *en = json_object_get(p, "enum"), *v;
    size_t   i, n = json_array_size(en);

    json_array_foreach(en, i, v) {
        if (!json_is_string(v) || strstr(json_string_value(v), closer)) {
            return 0;               /* null or others: left free */
        }
    }
    if (n == 0) {
        return 0;
    }
    t->enums[t->n] = calloc(n, sizeof(llm_th_cand_t));
    if (t->enums[t->n] == NULL) {
        return -1;
    }
    json_array_foreach(en, i, v) {
        llm_th_cand_t *c = &t->enums[t->n][i];

        c->s = llm_th_cat3(json_string_value(v), closer, "", &c->len);
        if (c->s == NULL) {
            return -1;
        }
        c->next = NX_MM_PARAMS;
        c->tool = -1;
        t->n_enums[t->n]++;
    }
    return 0;
}

/* One tool's parameters: a candidate per property (minimax-m2
 * <parameter name="k">, glm4.5 <arg_key>k</arg_key>\n<arg_value>, glm
 * 2: glm4.7, without the newline), a
 * grammar per value that is not a string (the property's schema, with the
 * root's $defs), and the call's end as the last candidate. */
static int
llm_th_mm_tool(llm_th_mmtool_t *t, json_t *params, int glm, size_t ti,
    char *err, size_t errlen)
{
    json_t      *props = json_object_get(params, "properties"), *p;
    json_t      *req = json_object_get(params, "required"), *defs, *r;
    const char  *k;
    char         e2[256];
    size_t       n = json_object_size(props), i, j;
    int          rc;

    defs = json_object_get(params, "$defs");
    t->required = calloc(n + 1, sizeof(int));
    t->g = calloc(n + 1, sizeof(*t->g));
    t->st = calloc(n + 1, sizeof(*t->st));
    t->cands = calloc(n + 1, sizeof(*t->cands));
    t->enums = calloc(n + 1, sizeof(*t->enums));
    t->n_enums = calloc(n + 1, sizeof(*t->n_enums));
    if (t->required == NULL || t->g == NULL || t->st == NULL
        || t->cands == NULL || t->enums == NULL || t->n_enums == NULL)
    {
        goto nomem;
    }
    json_object_foreach(props, k, p) {
        llm_th_cand_t *c = &t->cands[t->n];

        json_array_foreach(req, j, r) {
            if (json_is_string(r) && strcmp(json_string_value(r), k) == 0) {
                t->required[t->n] = 1;
            }
        }
        c->s = glm == 3 ? llm_th_cat3("<parameter=", k, ">\n", &c->len)
               : glm ? llm_th_cat3("<arg_key>", k, glm == 2
                                   ? "</arg_key><arg_value>"
                                   : "</arg_key>\n<arg_value>", &c->len)
               : llm_th_cat3("<parameter name=\"", k, "\">", &c->len);
        if (c->s == NULL) {
            goto nomem;
        }
        c->next = NX_MM_VALUE;
        c->tool = (int) t->n;
        if (llm_toolcall_param_is_string(p)
            && llm_th_mm_enum(t, p, glm == 3 ? QC_CLOSER
                                    : glm == 2 ? GLM47_CLOSER
                                    : glm ? GLM_CLOSER : MM_CLOSER) != 0)
        {
            goto nomem;
        }
        if (!llm_toolcall_param_is_string(p)) {
            json_t *sub = json_deep_copy(p);

            if (sub == NULL) {
                goto nomem;
            }
            if (defs) {
                json_object_set(sub, "$defs", defs);
            }
            rc = llm_grammar_compile(&t->g[t->n], sub, LLM_GRAMMAR_ORDERED
                                     | LLM_GRAMMAR_STRICT, e2, sizeof(e2));
            json_decref(sub);
            if (rc != 0) {
                snprintf(err, errlen, "tools[%zu].function.parameters: "
                         "properties.%s: %s", ti, k, e2);
                t->n++;
                return rc;
            }
            if (llm_gstate_create(&t->st[t->n], t->g[t->n]) != 0) {
                t->n++;
                goto nomem;
            }
        }
        t->n++;
    }
    i = t->n;
    t->cands[i].s = strdup(glm == 3 ? "</function>\n</tool_call>"
                           : glm ? "</tool_call>" : "</invoke>\n");
    if (t->cands[i].s == NULL) {
        goto nomem;
    }
    t->cands[i].len = strlen(t->cands[i].s);
    t->cands[i].next = NX_AFTER;
    t->cands[i].tool = -1;
    return 0;

nomem:
    snprintf(err, errlen, "tools: out of memory");
    return -ENOMEM;
}

/*
 * glm4.7: nothing ends a name (f<arg_key>... or f</tool_call>), so a name
 * goes with what may follow it: one candidate per first parameter allowed
 * (up to the first required one) and the call's end when none is
 * required, each leading where that candidate leads, for the tool just
 * added (th->mm[n_mm - 1]).  0 or -ENOMEM.
 */
static int
llm_th_glm47_names(llm_th_t *th, const char *name, char *err, size_t errlen)
{
    llm_th_mmtool_t *t = &th->mm[th->n_mm - 1];
    llm_th_cand_t   *c;
    uint32_t         k, last = t->n;

    for (k = 0; k < t->n; k++) {
        if (t->required[k]) {
            last = k;
            break;
        }
    }
    c = realloc(th->names, (th->n_names + last + 1) * sizeof(*c));
    if (c == NULL) {
        snprintf(err, errlen, "tools: out of memory");
        return -ENOMEM;
    }
    th->names = c;
    for (k = 0; k <= t->n; k++) {
        if (k > last && k < t->n) {
            continue;                   /* past a required one */
        }
        if (k == t->n && last < t->n) {
            break;                      /* a required one is missing */
        }
        c = &th->names[th->n_names++];
        memset(c, 0, sizeof(*c));
        c->s = llm_th_cat3(name, t->cands[k].s, "", &c->len);
        if (c->s == NULL) {
            snprintf(err, errlen, "tools: out of memory");
            return -ENOMEM;
        }
        c->next = t->cands[k].next;
        c->tool = t->cands[k].tool;
        c->mm_tool = (int) th->n_mm;
    }
    return 0;
}

/* minimax-m2: the invoke names, each tool's parameters, what follows a
 * call; glm4.5: the names (f\n) and each tool's parameters (what follows
 * a call is TP_AFTER's, as for hermes); glm4.7 the same without the
 * newlines (llm_th_glm47_names). */
static int
llm_th_grammar_minimax(llm_th_t *th, json_t *tools, const char *only,
    char *err, size_t errlen)
{
    size_t   i, n = json_array_size(tools), maxp = 0;
    json_t  *t;
    char     e2[256];
    int      rc, glm;

    /* the style: 0 minimax-m2, 1 glm4.5, 2 glm4.7, 3 qwen3-coder */
    glm = th->fmt == LLM_TOOLFMT_QWEN3_CODER ? 3
          : th->fmt != LLM_TOOLFMT_GLM45 ? 0 : th->glm47 ? 2 : 1;

    th->names = calloc(n ? n : 1, sizeof(*th->names));
    th->mm = calloc(n ? n : 1, sizeof(*th->mm));
    th->mm_after = calloc(n + 1, sizeof(*th->mm_after));
    if (th->names == NULL || th->mm == NULL || th->mm_after == NULL) {
        snprintf(err, errlen, "tools: out of memory");
        return -ENOMEM;
    }
    json_array_foreach(tools, i, t) {
        json_t         *f = json_object_get(t, "function");
        const char     *name = json_string_value(json_object_get(f, "name"));
        json_t         *p = json_object_get(f, "parameters");
        llm_grammar_t  *g;
        llm_th_cand_t  *c;

        if (name == NULL) {
            snprintf(err, errlen, "tools[%zu].function.name: missing", i);
            return -EINVAL;
        }
        /* the whole schema first, so that an error names the keyword */
        rc = llm_grammar_compile(&g, p, LLM_GRAMMAR_ORDERED, e2, sizeof(e2));
        if (rc != 0) {
            snprintf(err, errlen, "tools[%zu].function.parameters: %s", i,
                     e2);
            return rc;
        }
        llm_grammar_free(g);
        if ((only && strcmp(name, only) != 0)
            || strlen(name) + 20 >= LLM_TH_SBUF)
        {
            continue;
        }
        rc = llm_th_mm_tool(&th->mm[th->n_mm++], p, glm, i, err, errlen);
        if (rc != 0) {
            return rc;
        }
        if (th->mm[th->n_mm - 1].n > maxp) {
            maxp = th->mm[th->n_mm - 1].n;
        }
        if (glm == 2) {
            rc = llm_th_glm47_names(th, name, err, errlen);
            if (rc != 0) {
                return rc;
            }
            continue;
        }
        c = &th->names[th->n_names++];
        c->s = glm == 3 ? llm_th_cat3("<function=", name, ">\n", &c->len)
               : glm ? llm_th_cat3("", name, "\n", &c->len)
               : llm_th_cat3("<invoke name=\"", name, "\">\n", &c->len);
        if (c->s == NULL) {
            snprintf(err, errlen, "tools: out of memory");
            return -ENOMEM;
        }
        c->next = NX_MM_PARAMS;
        c->tool = (int) th->n_mm - 1;
    }
    if (th->n_names == 0) {
        snprintf(err, errlen, "tool_choice: no function named '%s' in "
                 "tools", only ? only : "");
        return -EINVAL;
    }
    th->pset = calloc(maxp + 1, sizeof(*th->pset));
    if (th->pset == NULL) {
        snprintf(err, errlen, "tools: out of memory");
        return -ENOMEM;
    }
    if (glm) {
        return 0;
    }
    /* after a call: the end of the block, or (parallel) another invoke;
     * the names' strings stay owned by names */
    th->mm_after[th->n_mm_after++] = (llm_th_cand_t) {
        (char *) "</minimax:tool_call>", 20, NX_END, -1, 0 };
    for (uint32_t k = 0; th->parallel && k < th->n_names; k++) {
        th->mm_after[th->n_mm_after++] = th->names[k];
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

/*
 * harmony: does a text token (not a control one) at lit[off..off+len)
 * run into markup that is a control token here (hm_ctl)?  Such markup
 * is written by its token only.
 */
static int
llm_th_hm_crosses(const llm_th_t *th, int32_t id, const char *lit,
    size_t ll, size_t off, size_t len)
{
    if (th->hm_ctl[0] == NULL || llm_vocab_is_control(th->ctx->vocab, id)) {
        return 0;
    }
    for (size_t k = 0; th->hm_ctl[k]; k++) {
        size_t      ml = strlen(th->hm_ctl[k]), a;
        const char *p = lit;

        while ((p = memmem(p, ll - (size_t) (p - lit), th->hm_ctl[k], ml))) {
            a = (size_t) (p - lit);
            if (off < a + ml && a < off + len) {
                return 1;
            }
            p++;
        }
    }
    return 0;
}

/* Is the token a piece of what is left of the literal? */
static int
llm_th_lit_ok(llm_th_t *th, int32_t id)
{
    size_t      len, ll = strlen(th->lit), left = ll - th->lit_off;
    const char *b = llm_th_bytes(th, id, &len);

    return len > 0 && len <= left
           && memcmp(b, th->lit + th->lit_off, len) == 0
           && !llm_th_hm_crosses(th, id, th->lit, ll, th->lit_off, len);
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
            && memcmp(c->s + th->sbuf_len, b, len) == 0
            && !llm_th_hm_crosses(th, id, c->s, c->len, th->sbuf_len, len))
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

/* minimax-m2, glm4.5: the parameters that may come next (in order, none
 * past a required one still missing), and the call's end (</invoke>\n,
 * </tool_call>) when none is missing. */
static void
llm_th_mm_params(llm_th_t *th, int tool)
{
    llm_th_mmtool_t *t;
    uint32_t         n = 0, k;
    int              missing = 0;

    if (tool >= 0) {
        th->mm_tool = tool;
        th->mm_pos = 0;
    }
    t = &th->mm[th->mm_tool];
    for (k = th->mm_pos; k < t->n; k++) {
        th->pset[n++] = t->cands[k];
        if (t->required[k]) {
            missing = 1;
            break;
        }
    }
    if (!missing) {
        th->pset[n++] = t->cands[t->n];
    }
    th->set = th->pset;
    th->n_set = n;
    th->sbuf_len = 0;
    th->phase = TP_SET;
}

/* minimax-m2, glm4.5: the value of parameter k: raw text for a string,
 * else JSON against its schema, then the closer (raw_closer). */
static void
llm_th_mm_value(llm_th_t *th, int k)
{
    llm_th_mmtool_t *t = &th->mm[th->mm_tool];

    th->mm_pos = (uint32_t) k + 1;
    if (t->g[k] == NULL && t->n_enums[k] > 0) {
        th->set = t->enums[k];              /* one of the enum's values */
        th->n_set = t->n_enums[k];
        th->sbuf_len = 0;
        th->phase = TP_SET;
        return;
    }
    if (t->g[k] == NULL) {
        th->raw_len = 0;
        th->phase = TP_RAW;
        return;
    }
    th->st = t->st[k];
    llm_gstate_reset(th->st);

    /* qwen3-coder: the newline before </parameter> is the JSON value's
     * trailing whitespace (the grammar takes it) */
    th->json_union = th->fmt == LLM_TOOLFMT_QWEN3_CODER ? QC_JSON_CLOSER
                                                        : th->raw_closer;
    th->union_next = NX_MM_PARAMS;
    th->json_eog = 0;
    th->phase = TP_JSON;
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
        llm_th_lit(th, th->fmt == LLM_TOOLFMT_KIMI_K2 ? KM_CALL_BEGIN
                                                     : DS_CALL_BEGIN,
                   0, NX_NAMES);
        return;
    case NX_MM_START:
        llm_th_lit(th, "\n", 0, NX_NAMES);
        return;
    case NX_HEAD:
        llm_th_lit(th, th->head, 0, NX_NAMES);
        return;
    case NX_MM_PARAMS:
        llm_th_mm_params(th, tool);
        return;
    case NX_MM_VALUE:
        llm_th_mm_value(th, tool);
        return;
    case NX_AFTER:
        if (th->n_mm_after) {
            th->set = th->mm_after;
            th->n_set = th->n_mm_after;
            th->sbuf_len = 0;
            th->phase = TP_SET;
        } else if (th->n_after) {
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

/* none: mask the tokens that finish marker o begun in the tail. */
static void
llm_th_mask_finish(llm_th_t *th, const char *o, float *logits,
    uint32_t n_vocab)
{
    size_t      ol = strlen(o);
    uint32_t    nv = llm_vocab_n_tokens(th->ctx->vocab);

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

/* none: mask what would write any of the family's markers, whole or
 * finishing one begun in the text so far. */
static void
llm_th_mask_opener(llm_th_t *th, float *logits, uint32_t n_vocab)
{
    for (uint32_t i = 0; i < th->n_has; i++) {
        if ((uint32_t) th->has_opener[i] < n_vocab) {
            logits[th->has_opener[i]] = -INFINITY;
        }
    }
    for (size_t i = 0; th->masked[i]; i++) {
        llm_th_mask_finish(th, th->masked[i], logits, n_vocab);
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

/* hermes, glm4.5 after a call: the end; with parallel calls also
 * whitespace and the opener. */
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

/* minimax-m2, glm4.5 string value: no end token, and the closer
 * (raw_closer) only at the end of a token (what follows it is the
 * grammar's again).  Once all of the closer but its newline is there
 * (</parameter>, </arg_value>: a single token in GLM's vocabulary), the
 * parser has ended the value, so only the newline may follow. */
static void
llm_th_mask_raw(llm_th_t *th, float *logits, uint32_t n_vocab)
{
    const char        *c = th->raw_closer;
    size_t             cl = strlen(c);
    uint32_t           nv = llm_vocab_n_tokens(th->ctx->vocab);

    if (th->raw_len >= cl - 1
        && memcmp(th->raw_tail + th->raw_len - (cl - 1), c, cl - 1) == 0)
    {
        th->lit = c;
        th->lit_off = cl - 1;
        llm_th_keep_only(th, logits, n_vocab, th->lit_toks, th->n_lit,
                         llm_th_lit_ok);
        return;
    }
    for (uint32_t i = 0; i < th->n_bad_raw; i++) {
        if ((uint32_t) th->bad_raw[i] < n_vocab) {
            logits[th->bad_raw[i]] = -INFINITY;
        }
    }
    for (uint32_t i = 0; i < th->n_eog; i++) {
        if ((uint32_t) th->eog_toks[i] < n_vocab) {
            logits[th->eog_toks[i]] = -INFINITY;
        }
    }
    for (size_t k = cl - 1; k > 0; k--) {
        if (th->raw_len < k
            || memcmp(th->raw_tail + th->raw_len - k, c, k) != 0)
        {
            continue;
        }
        /* a token finishing the closer must end there */
        for (uint32_t id = 0; id < nv && id < n_vocab; id++) {
            size_t      len;
            const char *b = llm_th_bytes(th, (int32_t) id, &len);

            if (len > cl - k && memcmp(b, c + k, cl - k) == 0) {
                logits[id] = -INFINITY;
            }
        }
    }
}

static void
llm_th_raw_accept(llm_th_t *th, const char *b, size_t len)
{
    char    buf[sizeof(th->raw_tail) + 256];
    size_t  n, keep = sizeof(th->raw_tail) - 1;

    if (len > 256) {
        b += len - 256;
        len = 256;
    }
    memcpy(buf, th->raw_tail, th->raw_len);
    memcpy(buf + th->raw_len, b, len);
    n = th->raw_len + len;
    if (memmem(buf, n, th->raw_closer, strlen(th->raw_closer))) {
        llm_th_go(th, NX_MM_PARAMS, -1);
        return;
    }
    if (n > keep) {
        memmove(th->raw_tail, buf + n - keep, keep);
        th->raw_len = keep;
    } else {
        memcpy(th->raw_tail, buf, n);
        th->raw_len = n;
    }
}

static int
llm_th_mask(void *ud, float *logits, uint32_t n_vocab)
{
    llm_th_t *th = ud;

    switch (th->phase) {
    case TP_FREE:
        if (th->forbid) {
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
    case TP_RAW:
        llm_th_mask_raw(th, logits, n_vocab);
        return 0;
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

static void llm_th_set_accept(llm_th_t *th, const char *b, size_t len);

/* The bytes of a token after the opener, into the phase that follows it
 * (a literal, a set, the JSON); OFF when they do not fit. */
static void
llm_th_feed_rest(llm_th_t *th, const char *b, size_t len)
{
    size_t k;

    while (len > 0) {
        switch (th->phase) {
        case TP_JSON:
            if (llm_gstate_feed(th->st, b, len) != 0) {
                th->phase = TP_OFF;
            }
            return;
        case TP_LIT:
            k = strlen(th->lit) - th->lit_off;
            k = k < len ? k : len;
            if (memcmp(th->lit + th->lit_off, b, k) != 0) {
                th->phase = TP_OFF;
                return;
            }
            llm_th_lit(th, th->lit, th->lit_off + k, th->lit_next);
            b += k;
            len -= k;
            break;
        case TP_SET:
            llm_th_set_accept(th, b, len);
            return;
        default:
            th->phase = TP_OFF;
            return;
        }
    }
}

/* Does buf[0..i) end with m? */
static int
llm_th_ends(const char *buf, size_t i, const char *m)
{
    size_t ml = strlen(m);

    return i >= ml && memcmp(buf + i - ml, m, ml) == 0;
}

/*
 * harmony FREE (auto): the opener to=functions. begins a call only in a
 * message's header (from <|start|>, <|end|> or <|channel|> to
 * <|message|>), not as text of a body.  The markup is followed as it
 * ends in the new bytes, in order.  (The scheduler does not run the
 * hooks inside an analysis body: its <|end|> never comes here, the next
 * header's <|start|> or <|channel|> does.)
 */
static void
llm_th_hm_free_accept(llm_th_t *th, const char *b, size_t len)
{
    char    buf[sizeof(th->tail) + 256];
    size_t  n;

    if (len > 256) {
        b += len - 256;
        len = 256;
    }
    memcpy(buf, th->tail, th->tail_len);
    memcpy(buf + th->tail_len, b, len);
    n = th->tail_len + len;
    for (size_t i = th->tail_len + 1; i <= n; i++) {
        if (llm_th_ends(buf, i, HM_MESSAGE)) {
            th->hm_body = 1;
        } else if (llm_th_ends(buf, i, "<|start|>")
                   || llm_th_ends(buf, i, "<|end|>")
                   || llm_th_ends(buf, i, "<|channel|>"))
        {
            th->hm_body = 0;
        } else if (!th->hm_body && llm_th_ends(buf, i, HM_OPENER)) {
            th->tail_len = 0;
            if (!th->constrained) {
                th->phase = TP_OFF;
                return;
            }
            llm_th_go(th, th->opener_next, -1);
            if (i < n) {
                llm_th_feed_rest(th, buf + i, n - i);
            }
            return;
        }
    }
    if (n > sizeof(th->tail)) {
        memcpy(th->tail, buf + n - sizeof(th->tail), sizeof(th->tail));
        th->tail_len = sizeof(th->tail);
    } else {
        memcpy(th->tail, buf, n);
        th->tail_len = n;
    }
}

/* FREE: remember the last bytes; with the opener written, the call
 * begins (what the token has after the opener goes to what follows). */
static void
llm_th_free_accept(llm_th_t *th, const char *b, size_t len)
{
    char        buf[sizeof(th->tail) + 256];
    size_t      n, ol, rest;
    const char *f;

    if (th->forbid) {
        /* none: only the tail, for the markers' mask */
        if (len >= sizeof(th->tail)) {
            memcpy(th->tail, b + len - sizeof(th->tail), sizeof(th->tail));
            th->tail_len = sizeof(th->tail);
            return;
        }
        n = th->tail_len + len;
        if (n > sizeof(th->tail)) {
            memmove(th->tail, th->tail + n - sizeof(th->tail),
                    sizeof(th->tail) - len);
            th->tail_len = sizeof(th->tail) - len;
        }
        memcpy(th->tail + th->tail_len, b, len);
        th->tail_len += len;
        return;
    }
    if (th->fmt == LLM_TOOLFMT_HARMONY) {
        llm_th_hm_free_accept(th, b, len);
        return;
    }
    if (th->fmt == LLM_TOOLFMT_LLAMA3_JSON) {
        size_t k = 0;

        if (th->started || th->choice == LLM_TOOL_CHOICE_NONE) {
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
        llm_th_go(th, th->opener_next, -1);
        llm_th_feed_rest(th, b + k, len - k);
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
    if (f && th->choice != LLM_TOOL_CHOICE_NONE) {
        rest = n - (size_t) (f - buf) - ol;
        th->tail_len = 0;
        if (!th->constrained) {
            th->phase = TP_OFF;
            return;
        }
        llm_th_go(th, th->opener_next, -1);
        if (rest) {
            llm_th_feed_rest(th, f + ol, rest);
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
            if (c->mm_tool > 0) {
                /* glm4.7: a name with its first parameter */
                th->mm_tool = c->mm_tool - 1;
                th->mm_pos = 0;
            }
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

    case TP_RAW:
        llm_th_raw_accept(th, b, len);
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

/* none: the length of the marker b starts with; more than n when b is
 * the beginning of one (not final); 0 when neither. */
static size_t
llm_th_marker_at(const llm_th_t *th, const char *b, size_t n, int final)
{
    size_t  k, ml, part = 0;

    for (k = 0; th->forbid[k]; k++) {
        ml = strlen(th->forbid[k]);
        if (n >= ml && memcmp(b, th->forbid[k], ml) == 0) {
            return ml;
        }
        if (!final && n < ml && memcmp(b, th->forbid[k], n) == 0) {
            part = ml;
        }
    }
    return part;
}

/*
 * none: the text as content, without any of the family's markers (the
 * mask keeps the model from writing them; this keeps one that came all
 * the same, e.g. through the prompt's own end, out of the answer).  The
 * bytes that could begin a marker are held until the next piece decides
 * them (markers begin with an ASCII byte, so what goes out is whole
 * UTF-8 characters).
 */
static int
llm_th_strip(void *ud, const char *s, size_t len, int final,
    const llm_text_out_t *out)
{
    llm_th_t   *th = ud;
    char        sbuf[256], *b = sbuf;
    size_t      n = th->hold_len + len, i = 0, start = 0, ml;
    int         held = 0;

    if (n > sizeof(sbuf)) {
        b = malloc(n);
        if (b == NULL) {
            return -ENOMEM;
        }
    }
    memcpy(b, th->hold, th->hold_len);
    memcpy(b + th->hold_len, s, len);
    th->hold_len = 0;

    while (i < n && !held) {
        ml = llm_th_marker_at(th, b + i, n - i, final);
        if (ml == 0) {
            i++;
            continue;
        }
        if (i > start) {
            out->content(out->sink, b + start, i - start);
        }
        if (ml > n - i) {
            /* a marker's beginning: held (fits: markers are short) */
            memcpy(th->hold, b + i, n - i);
            th->hold_len = n - i;
            held = 1;
        } else {
            i += ml;
        }
        start = i;
    }
    if (!held && n > start) {
        out->content(out->sink, b + start, n - start);
    }
    if (b != sbuf) {
        free(b);
    }
    return 0;
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
    for (uint32_t t = 0; t < th->n_mm; t++) {
        for (uint32_t i = 0; i < th->mm[t].n; i++) {
            llm_gstate_free(th->mm[t].st[i]);
            llm_grammar_free(th->mm[t].g[i]);
        }
        for (uint32_t i = 0; th->mm[t].cands && i <= th->mm[t].n; i++) {
            free(th->mm[t].cands[i].s);
        }
        for (uint32_t i = 0; th->mm[t].enums && i <= th->mm[t].n; i++) {
            for (uint32_t j = 0; j < th->mm[t].n_enums[i]; j++) {
                free(th->mm[t].enums[i][j].s);
            }
            free(th->mm[t].enums[i]);
        }
        free(th->mm[t].enums);
        free(th->mm[t].n_enums);
        free(th->mm[t].required);
        free(th->mm[t].g);
        free(th->mm[t].st);
        free(th->mm[t].cands);
    }
    free(th->mm);
    free(th->pset);
    free(th->mm_after);
    free(th->bad_raw);
    free(th->lit_toks);
    free(th->ws_toks);
    free(th->eog_toks);
    free(th->has_opener);
    free(th->saved);
    free(th);
}


/* Making them. */

/* The family's shape (see the top of the file). */
static int
llm_th_shape(llm_th_t *th, json_t *tools, const char *only, char *err,
    size_t errlen)
{
    int rc = 0;
    /* the call object as one anyOf follows at most MAX_THREADS branches
     * at once (grammar.h): with more tools, literals and a grammar per
     * tool */
    int many = !only && json_array_size(tools) > LLM_GRAMMAR_MAX_THREADS;

    switch (th->fmt) {
    case LLM_TOOLFMT_HERMES:
        th->opener = "<tool_call>";
        th->opener_next = NX_JSON;
        th->closer = "</tool_call>";
        th->json_union = th->closer;
        th->union_next = NX_AFTER;
        th->lits[th->n_lits++] = th->opener;
        th->lits[th->n_lits++] = th->closer;
        if (th->choice == LLM_TOOL_CHOICE_NONE) {
            break;
        }
        if (!many) {
            rc = llm_th_grammar(th, tools, only, "arguments", err, errlen);
            break;
        }
        /* the call object as literals around each tool's arguments */
        th->opener_next = NX_HEAD;
        th->head = "\n{\"name\": \"";
        th->json_union = "}\n</tool_call>";
        th->lits[th->n_lits++] = th->head;
        th->lits[th->n_lits++] = th->json_union;
        rc = llm_th_grammar_per_tool(th, tools, only,
                                     "\", \"arguments\":", err, errlen);
        break;
    case LLM_TOOLFMT_LLAMA3_JSON:
        th->json_eog = 1;
        th->opener_next = NX_JSON;
        if (th->choice == LLM_TOOL_CHOICE_NONE) {
            break;
        }
        if (!many) {
            rc = llm_th_grammar(th, tools, only, "parameters", err, errlen);
            break;
        }
        th->opener_next = NX_HEAD;
        th->head = "{\"name\": \"";
        th->json_union = "}";
        th->union_next = NX_END;
        th->json_eog = 0;
        th->lits[th->n_lits++] = th->head;
        th->lits[th->n_lits++] = th->json_union;
        rc = llm_th_grammar_per_tool(th, tools, only,
                                     "\", \"parameters\":", err, errlen);
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
        if (th->choice != LLM_TOOL_CHOICE_NONE) {
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
            (char *) DS_CALLS_END, strlen(DS_CALLS_END), NX_END, -1, 0 };
        if (th->parallel) {
            th->after[th->n_after++] = (llm_th_cand_t) {
                (char *) DS_CALL_BEGIN, strlen(DS_CALL_BEGIN), NX_NAMES,
                -1, 0 };
        }
        th->lits[th->n_lits++] = DS_CALLS_BEGIN;
        th->lits[th->n_lits++] = DS_CALLS_END;
        th->lits[th->n_lits++] = DS_CALL_BEGIN;
        th->lits[th->n_lits++] = DS_CALL_END;
        if (th->choice != LLM_TOOL_CHOICE_NONE) {
            rc = llm_th_grammar_per_tool(th, tools, only, DS_SEP, err,
                                         errlen);
        }
        break;
    case LLM_TOOLFMT_KIMI_K2:
        /* as deepseek-v3's, with the ids functions.NAME:0 (the grammar
         * numbers every call 0; the parser takes any index) */
        th->opener = KM_CALLS_BEGIN;
        th->opener_next = NX_CALLBEGIN;
        th->json_union = KM_CALL_END;
        th->union_next = NX_AFTER;
        th->after[th->n_after++] = (llm_th_cand_t) {
            (char *) KM_CALLS_END, strlen(KM_CALLS_END), NX_END, -1, 0 };
        if (th->parallel) {
            th->after[th->n_after++] = (llm_th_cand_t) {
                (char *) KM_CALL_BEGIN, strlen(KM_CALL_BEGIN), NX_NAMES,
                -1, 0 };
        }
        th->lits[th->n_lits++] = KM_CALLS_BEGIN;
        th->lits[th->n_lits++] = KM_CALLS_END;
        th->lits[th->n_lits++] = KM_CALL_BEGIN;
        th->lits[th->n_lits++] = KM_CALL_END;
        if (th->choice != LLM_TOOL_CHOICE_NONE) {
            rc = llm_th_grammar_per_tool(th, tools, only, ":0" KM_ARGS, err,
                                         errlen);
        }
        if (rc == 0 && th->choice != LLM_TOOL_CHOICE_NONE) {
            rc = llm_th_prefix_names(th, "functions.", err, errlen);
        }
        break;
    case LLM_TOOLFMT_MINIMAX_M2:
        th->opener = "<minimax:tool_call>";
        th->opener_next = NX_MM_START;
        th->forced = "<minimax:tool_call>\n";
        th->forced_next = NX_NAMES;
        th->raw_closer = MM_CLOSER;
        th->lits[th->n_lits++] = th->forced;
        th->lits[th->n_lits++] = MM_CLOSER;
        th->lits[th->n_lits++] = "\n";
        th->lits[th->n_lits++] = "</minimax:tool_call>";
        if (th->choice != LLM_TOOL_CHOICE_NONE) {
            rc = llm_th_grammar_minimax(th, tools, only, err, errlen);
        }
        break;
    case LLM_TOOLFMT_QWEN3_CODER:
        /* the opener and its newline, the names <function=f>\n, each
         * parameter <parameter=k>\n, its value and \n</parameter>\n,
         * then </function>\n</tool_call>; after it the end or
         * (parallel) whitespace and the opener, as for hermes */
        th->opener = "<tool_call>";
        th->opener_next = NX_MM_START;
        th->forced = "<tool_call>\n";
        th->forced_next = NX_NAMES;
        th->raw_closer = QC_CLOSER;
        th->lits[th->n_lits++] = th->forced;
        th->lits[th->n_lits++] = QC_CLOSER;
        th->lits[th->n_lits++] = QC_JSON_CLOSER;
        th->lits[th->n_lits++] = "\n";
        th->lits[th->n_lits++] = "</function>\n</tool_call>";
        if (th->choice != LLM_TOOL_CHOICE_NONE) {
            rc = llm_th_grammar_minimax(th, tools, only, err, errlen);
        }
        break;
    case LLM_TOOLFMT_GLM45:
        /* the opener, then the names f\n; after </tool_call> the end or
         * (parallel) whitespace and the opener, as for hermes */
        th->opener = "<tool_call>";
        th->opener_next = NX_NAMES;
        th->raw_closer = th->glm47 ? GLM47_CLOSER : GLM_CLOSER;
        th->lits[th->n_lits++] = th->opener;
        th->lits[th->n_lits++] = th->raw_closer;
        th->lits[th->n_lits++] = "</tool_call>";
        if (th->choice != LLM_TOOL_CHOICE_NONE) {
            rc = llm_th_grammar_minimax(th, tools, only, err, errlen);
        }
        break;
    case LLM_TOOLFMT_HARMONY:
        /* a forced call opens its own commentary message (the prompt
         * ends with <|start|>assistant); under auto the model's own
         * header with to=functions. opens it.  Then the name, the
         * constraint and <|message|>, the arguments, and <|call|>, which
         * ends generation (one call per answer) */
        th->opener = HM_OPENER;
        th->opener_next = NX_NAMES;
        th->forced = HM_FORCED;
        th->forced_next = NX_NAMES;
        th->json_union = HM_CALL;
        th->union_next = NX_END;
        th->lits[th->n_lits++] = HM_FORCED;
        th->lits[th->n_lits++] = HM_CALL;
        if (th->choice != LLM_TOOL_CHOICE_NONE) {
            rc = llm_th_grammar_per_tool(th, tools, only, HM_SEP, err,
                                         errlen);
        }
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

/* harmony: which of its markup is control tokens in this vocabulary. */
static void
llm_th_hm_vocab(llm_th_t *th)
{
    const llm_vocab_t *v = th->ctx->vocab;
    uint32_t           n = 0;
    int32_t            id;

    for (size_t k = 0; llm_th_hm_ctl[k]; k++) {
        id = llm_vocab_find(v, llm_th_hm_ctl[k], strlen(llm_th_hm_ctl[k]));
        if (id >= 0 && llm_vocab_is_control(v, id)) {
            th->hm_ctl[n++] = llm_th_hm_ctl[k];
        }
    }
    th->hm_ctl[n] = NULL;
}

int
llm_tool_hooks_make(const llm_hooks_ctx_t *ctx, const llm_request_t *rq,
    uint32_t choice, llm_seq_hooks_t *out, char *err, size_t errlen)
{
    llm_th_t           *th;
    llm_tool_choice_e   c = rq->tool_choice;
    const char         *only = rq->tool_choice_name;
    json_t             *tools = rq->tools;
    int                 fmt, rc;

    (void) choice;
    if ((tools == NULL && rq->tools_bad == NULL) || rq->is_completion) {
        return 0;
    }
    fmt = llm_toolfmt_from_name(ctx->tool_call_format);
    if (fmt <= LLM_TOOLFMT_NONE) {
        return 0;
    }
    if (c == LLM_TOOL_CHOICE_INVALID) {
        snprintf(err, errlen, "tool_choice: expected \"none\", \"auto\", "
                 "\"required\" or {\"type\": \"function\", \"function\": "
                 "{\"name\": ...}}");
        return -EINVAL;
    }
    if (c == LLM_TOOL_CHOICE_NONE && llm_request_wants_json(rq)) {
        /* the response_format grammar owns the answer: no opener there */
        return 0;
    }
    if (llm_request_wants_json(rq)) {
        snprintf(err, errlen, "response_format: a JSON response_format "
                 "cannot be combined with tools unless tool_choice is "
                 "\"none\"");
        return -EINVAL;
    }
    if (tools == NULL) {
        snprintf(err, errlen, "%s", rq->tools_bad);
        return -EINVAL;
    }

    th = calloc(1, sizeof(*th));
    if (th == NULL) {
        snprintf(err, errlen, "tools: out of memory");
        return -ENOMEM;
    }
    th->ctx = ctx;
    th->fmt = fmt;
    th->glm47 = strcmp(ctx->tool_call_format, "glm4.7") == 0;
    th->choice = c;
    th->parallel = rq->parallel_tool_calls;
    if (c == LLM_TOOL_CHOICE_NONE) {
        size_t k = 0;

        th->forbid = llm_th_markers[fmt];
        for (size_t i = 0; th->forbid[i]; i++) {
            th->masked[k++] = th->forbid[i];
        }
        for (size_t i = 0; fmt < (int) (sizeof(llm_th_heads)
                                        / sizeof(llm_th_heads[0]))
                           && llm_th_heads[fmt][i]; i++)
        {
            th->masked[k++] = llm_th_heads[fmt][i];
        }
    }

    rc = llm_th_shape(th, tools, only, err, errlen);
    if (rc != 0) {
        goto failed;
    }
    if (fmt == LLM_TOOLFMT_HARMONY) {
        llm_th_hm_vocab(th);
    }
    rc = llm_th_scan_vocab(th);
    if (rc != 0) {
        snprintf(err, errlen, "tools: out of memory");
        goto failed;
    }
    if (c != LLM_TOOL_CHOICE_NONE && fmt != LLM_TOOLFMT_HARMONY) {
        rc = llm_toolcall_create(&th->parser, fmt, tools, 0, err, errlen);
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
    if (c == LLM_TOOL_CHOICE_REQUIRED || c == LLM_TOOL_CHOICE_NAMED) {
        if (th->forced) {
            llm_th_lit(th, th->forced, 0,
                       th->constrained ? th->forced_next : NX_OFF);
        } else if (th->opener) {
            llm_th_lit(th, th->opener, 0,
                       th->constrained ? th->opener_next : NX_OFF);
        } else if (th->constrained) {
            llm_th_go(th, th->opener_next, -1);
        }
    }
    memset(out, 0, sizeof(*out));
    out->mask = llm_th_mask;
    out->accept = llm_th_accept;
    out->text = c == LLM_TOOL_CHOICE_NONE ? llm_th_strip : llm_th_text;
    out->free = llm_th_free;
    out->ud = th;
    return 1;

failed:
    llm_th_free(th);
    return rc;
}
