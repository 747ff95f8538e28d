/*
 * Tool hooks on the synthetic vocabulary (Hermes template, <tool_call> a
 * user-defined token): decoding from random logits through the hooks'
 * mask and accept, the detokenizer and the text hook, the way the
 * scheduler runs them.  tool_choice required and named always give calls
 * whose arguments are JSON objects with the required keys and the
 * declared types, in the hermes, llama3-json, mistral, deepseek-v3,
 * minimax-m2 and glm4.5 formats (their markers spelled in pieces on this
 * vocabulary); parallel_tool_calls false gives exactly one call; string
 * values of minimax-m2 and glm4.5 are raw text, fed token by token; none
 * never lets the opener through even when it is the likeliest token,
 * nor the closer, nor the call object's head {"name": " (glm4.5: nor
 * <arg_key>, <arg_value>), and its text hook drops a marker that comes
 * all the same, split at any point; auto with the opener pushed up gives
 * a valid call (hermes, glm4.5).  With <tool_call> and </tool_call> made
 * control tokens (the detokenizer leaves those out of the text, as with
 * Mistral's [TOOL_CALLS]), the calls still parse (hermes, glm4.5).
 * Bad schemas and tool_choice name the field at fault.
 */

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "model/gguf.h"
#include "mkmodel.h"
#include "decode/sample.h"
#include "text/tokenizer.h"
#include "decode/toolcall.h"
#include "decode/toolhooks.h"
#include "testkit.h"


static const char tools[] =
    "[{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", "
    "\"parameters\": {\"type\": \"object\", \"properties\": {"
    "\"city\": {\"type\": \"string\"}, "
    "\"unit\": {\"enum\": [\"c\", \"f\"]}, "
    "\"days\": {\"type\": \"integer\"}}, "
    "\"required\": [\"city\", \"days\"], \"additionalProperties\": false}}},"
    " {\"type\": \"function\", \"function\": {\"name\": \"lookup_order\", "
    "\"parameters\": {\"type\": \"object\", \"properties\": {"
    "\"order_id\": {\"type\": \"string\"}, "
    "\"items\": {\"type\": \"array\", \"items\": {\"type\": \"number\"}, "
    "\"maxItems\": 3}}, \"required\": [\"order_id\"], "
    "\"additionalProperties\": false}}}]";

/* minimax-m2 with a random model: string values are raw text that a
 * random model never closes with </parameter>, so its forced calls use
 * other types (test_mm_raw checks strings token by token). */
static const char mm_tools[] =
    "[{\"type\": \"function\", \"function\": {\"name\": \"set_level\", "
    "\"parameters\": {\"type\": \"object\", \"properties\": {"
    "\"level\": {\"type\": \"integer\"}, "
    "\"mode\": {\"enum\": [\"a\", \"b\"]}, "
    "\"flags\": {\"type\": \"array\", \"items\": {\"type\": \"boolean\"}, "
    "\"maxItems\": 3}}, \"required\": [\"level\", \"mode\"]}}}, "
    "{\"type\": \"function\", \"function\": {\"name\": \"ping\", "
    "\"parameters\": {\"type\": \"object\", \"properties\": {}}}}]";

typedef struct {
    char      content[8192];
    size_t    clen;
    char      names[8][64];
    char      args[8][16384];
    uint32_t  n;
} rec_t;

static void
rec_content(void *sink, const char *s, size_t len)
{
    rec_t *r = sink;

    if (r->clen + len < sizeof(r->content)) {
        memcpy(r->content + r->clen, s, len);
        r->clen += len;
        r->content[r->clen] = '\0';
    }
}

static void
rec_call(void *sink, uint32_t idx, const char *id, const char *name,
    const char *args, size_t len)
{
    rec_t *r = sink;

    if (idx >= 8) {
        return;
    }
    if (id && id[0]) {
        snprintf(r->names[idx], sizeof(r->names[idx]), "%s", name);
        r->n = idx + 1;
    }
    if (strlen(r->args[idx]) + len < sizeof(r->args[idx])) {
        strncat(r->args[idx], args, len);
    }
}

/* What the tool hooks read of a request, as JSON text. */
typedef struct {
    const char       *tools_json;
    const char       *tool_choice_json;
    int               parallel_tool_calls;
    const char       *response_format_json;
} treq_t;

/* llm_tool_hooks_make() on g decoded as the engine decodes it. */
static int
tool_hooks(const llm_hooks_ctx_t *ctx, const treq_t *g, llm_seq_hooks_t *h,
    char *err, size_t errlen)
{
    llm_request_t  rq;
    int            rc;

    llm_request_init(&rq);
    rq.parallel_tool_calls = g->parallel_tool_calls;
    if (llm_request_set_tools(&rq, g->tools_json) != 0
        || llm_request_set_tool_choice(&rq, g->tool_choice_json) != 0
        || llm_request_set_response_format(&rq, g->response_format_json)
           != 0)
    {
        llm_request_free(&rq);
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    rc = llm_tool_hooks_make(ctx, &rq, 0, h, err, errlen);
    llm_request_free(&rq);
    return rc;
}

typedef struct {
    llm_vocab_t      *v;
    llm_hooks_ctx_t   ctx;
    uint32_t          nv;
    const char       *tools;
} env_t;

/* Decode up to max tokens from seeded random logits; boost raises one
 * token's logit (the opener) to make it the likeliest, at the first step
 * or (every) at every step. */
static int
decode(env_t *e, const char *choice, int parallel, uint64_t seed,
    int32_t boost, int every, uint32_t max, rec_t *r, char *err,
    size_t errlen)
{
    treq_t                g = { 0 };
    llm_seq_hooks_t       h;
    llm_text_out_t        out = { rec_content, rec_call, r };
    llm_detok_t          *d;
    llm_rng_t             rng;
    float                *row;
    const char           *t;
    size_t                len;
    int                   rc;

    memset(r, 0, sizeof(*r));
    memset(&h, 0, sizeof(h));
    g.tools_json = (char *) (e->tools ? e->tools : tools);
    g.tool_choice_json = (char *) choice;
    g.parallel_tool_calls = parallel;
    rc = tool_hooks(&e->ctx, &g, &h, err, errlen);
    if (rc <= 0) {
        return rc < 0 ? rc : -ENOENT;
    }
    row = malloc(e->nv * sizeof(float));
    if (row == NULL || llm_detok_create(&d, e->v, NULL, 0) != 0) {
        free(row);
        h.free(h.ud);
        return -ENOMEM;
    }
    llm_rng_seed(&rng, seed);
    for (uint32_t step = 0; step < max; step++) {
        int32_t best = -1;

        for (uint32_t i = 0; i < e->nv; i++) {
            row[i] = (float) llm_rng_uniform(&rng) * 8.0f;
        }
        if (boost >= 0 && (step == 0 || every)) {
            row[boost] = 100.0f;
        }
        if (h.mask(h.ud, row, e->nv) < 0) {
            break;
        }
        for (uint32_t i = 0; i < e->nv; i++) {
            if (row[i] != -INFINITY && (best < 0 || row[i] > row[best])) {
                best = (int32_t) i;
            }
        }
        if (best < 0) {
            snprintf(err, errlen, "every token masked at step %u after [%.80s] call [%.120s]", step, r->content, r->args[0]);
            rc = -EDEADLK;
            break;
        }
        h.accept(h.ud, best);
        if (llm_vocab_is_eog(e->v, best)) {
            break;
        }
        if (llm_detok_push(d, best, &t, &len) >= 0 && len > 0 && h.text) {
            h.text(h.ud, t, len, 0, &out);
        } else if (len > 0) {
            rec_content(r, t, len);
        }
    }
    if (llm_detok_flush(d, &t, &len) == 0 && len > 0) {
        if (h.text) {
            h.text(h.ud, t, len, 0, &out);
        } else {
            rec_content(r, t, len);
        }
    }
    if (h.text) {
        h.text(h.ud, "", 0, 1, &out);
    }
    llm_detok_free(d);
    free(row);
    h.free(h.ud);
    return rc > 0 ? 0 : rc;
}

/* The arguments of a call against the two tools' schemas. */
static int
valid_call(const char *name, const char *args, char *why, size_t wl)
{
    json_t       *a = json_loads(args, 0, NULL), *x;
    const char   *k;
    int           ok = 0;

    if (!json_is_object(a)) {
        snprintf(why, wl, "arguments are not a JSON object: %s", args);
        goto done;
    }
    if (strcmp(name, "get_weather") == 0) {
        x = json_object_get(a, "unit");
        if (!json_is_string(json_object_get(a, "city"))
            || !json_is_integer(json_object_get(a, "days"))
            || (x && (!json_is_string(x)
                      || (strcmp(json_string_value(x), "c")
                          && strcmp(json_string_value(x), "f")))))
        {
            snprintf(why, wl, "get_weather arguments: %s", args);
            goto done;
        }
        json_object_foreach(a, k, x) {
            if (strcmp(k, "city") && strcmp(k, "unit") && strcmp(k, "days")) {
                snprintf(why, wl, "get_weather: extra key %s", k);
                goto done;
            }
        }
    } else if (strcmp(name, "lookup_order") == 0) {
        x = json_object_get(a, "items");
        if (!json_is_string(json_object_get(a, "order_id"))
            || (x && (!json_is_array(x) || json_array_size(x) > 3)))
        {
            snprintf(why, wl, "lookup_order arguments: %s", args);
            goto done;
        }
        json_object_foreach(a, k, x) {
            if (strcmp(k, "order_id") && strcmp(k, "items")) {
                snprintf(why, wl, "lookup_order: extra key %s", k);
                goto done;
            }
        }
    } else if (strcmp(name, "set_level") == 0) {
        x = json_object_get(a, "mode");
        if (!json_is_integer(json_object_get(a, "level"))
            || !json_is_string(x)
            || (strcmp(json_string_value(x), "a")
                && strcmp(json_string_value(x), "b")))
        {
            snprintf(why, wl, "set_level arguments: %s", args);
            goto done;
        }
        x = json_object_get(a, "flags");
        if (x && (!json_is_array(x) || json_array_size(x) > 3)) {
            snprintf(why, wl, "set_level flags: %s", args);
            goto done;
        }
        json_object_foreach(a, k, x) {
            if (strcmp(k, "level") && strcmp(k, "mode") && strcmp(k, "flags")) {
                snprintf(why, wl, "set_level: extra key %s", k);
                goto done;
            }
        }
    } else if (strcmp(name, "ping") == 0) {
        if (json_object_size(a) != 0) {
            snprintf(why, wl, "ping arguments: %s", args);
            goto done;
        }
    } else {
        snprintf(why, wl, "unknown tool %s", name);
        goto done;
    }
    ok = 1;
done:
    json_decref(a);
    return ok;
}

static void
test_forced(env_t *e, const char *fmt, const char *tl, const char *named)
{
    char        nc[128];
    const char *choices[] = { "required", nc };
    rec_t  *r = malloc(sizeof(*r));
    char    err[256] = "", why[256];
    int     calls = 0, multi = 0;

    e->ctx.tool_call_format = fmt;
    e->tools = tl;
    snprintf(nc, sizeof(nc), "{\"type\": \"function\", \"function\": "
             "{\"name\": \"%s\"}}", named);
    for (int c = 0; c < 2; c++) {
        for (uint64_t seed = 1; seed <= 30; seed++) {
            int par = seed % 2;
            int rc = decode(e, choices[c], par, seed, -1, 0, 1500, r, err,
                            sizeof(err));

            REQUIRE(rc == 0, "decode %s seed %llu: %d %s", choices[c],
                    (unsigned long long) seed, rc, err);
            REQUIRE(r->n >= 1, "%s seed %llu: no call; content [%s]",
                    choices[c], (unsigned long long) seed, r->content);
            REQUIRE(par || r->n == 1, "parallel false gave %u calls", r->n);
            REQUIRE(r->clen == 0, "content beside forced calls: [%s]",
                    r->content);
            for (uint32_t i = 0; i < r->n; i++) {
                REQUIRE(valid_call(r->names[i], r->args[i], why, sizeof(why)),
                        "seed %llu call %u: %s", (unsigned long long) seed, i,
                        why);
                REQUIRE(c == 0 || strcmp(r->names[i], named) == 0,
                        "named choice gave %s", r->names[i]);
            }
            calls += (int) r->n;
            multi += r->n > 1;
        }
    }
    free(r);
    tk_end_as("forced calls, %s (%d calls, %d answers with several)", fmt,
              calls, multi);
}

/* none for one family: boosted tokens (the closer, the head's start)
 * never write the markup; text through the text hook comes out as
 * expect, whatever the split. */
typedef struct {
    const char  *fmt;
    const char  *boost[2];
    const char  *markup[4];     /* never in the content */
    const char  *text;
    const char  *expect;
} none_fmt_t;

static const none_fmt_t none_fmts[] = {
    { "hermes", { "</tool_call>", "{\"" },
      { "</tool_call>", "{\"name\": \"", "{\"name\":\"" },
      "a<tool_call>b</tool_call>c<tool", "abc<tool" },
    { "glm4.5", { "</tool_call>", "<tool_call>" },
      { "<tool_call>", "</tool_call>", "<arg_key>", "<arg_value>" },
      "a<tool_call>f\n<arg_key>k</arg_key>\n<arg_value>v</arg_value>\n"
      "</tool_call>c<arg_", "af\nk\nv\nc<arg_" },
};

/* none: the closer and the head are masked too; the text hook strips
 * markers in any split and keeps what only looked like one. */
static void
test_none_markup(env_t *e, const none_fmt_t *f)
{
    const char        *text = f->text;
    size_t             tl = strlen(text);
    rec_t             *r = malloc(sizeof(*r));
    char               err[256] = "";
    llm_text_out_t     out = { rec_content, rec_call, r };
    llm_seq_hooks_t    h;
    treq_t             g = { 0 };

    e->ctx.tool_call_format = f->fmt;
    e->tools = NULL;
    REQUIRE(r != NULL, "out of memory");
    for (size_t b = 0; b < 2; b++) {
        const char *boost[] = { f->boost[0], f->boost[1] };
        int32_t id = llm_vocab_find(e->v, boost[b], strlen(boost[b]));

        REQUIRE(id >= 0, "no %s token", boost[b]);
        for (uint64_t seed = 1; seed <= 10; seed++) {
            REQUIRE(decode(e, "none", 1, seed, id, 1, 60, r, err,
                           sizeof(err)) == 0, "none: %s", err);
            REQUIRE(r->n == 0, "none gave a call");
            for (size_t m = 0; m < 4 && f->markup[m]; m++) {
                REQUIRE(strstr(r->content, f->markup[m]) == NULL,
                        "none let %s through: [%s]", f->markup[m],
                        r->content);
            }
        }
    }
    g.tools_json = tools;
    g.tool_choice_json = "none";
    g.parallel_tool_calls = 1;
    for (size_t cut = 0; cut <= tl; cut++) {
        memset(r, 0, sizeof(*r));
        REQUIRE(tool_hooks(&e->ctx, &g, &h, err, sizeof(err)) == 1,
                "hooks: %s", err);
        REQUIRE(h.text(h.ud, text, cut, 0, &out) == 0
                && h.text(h.ud, text + cut, tl - cut, 0, &out) == 0
                && h.text(h.ud, "", 0, 1, &out) == 0, "text hook failed");
        h.free(h.ud);
        REQUIRE(strcmp(r->content, f->expect) == 0,
                "split at %zu: [%s]", cut, r->content);
    }
    free(r);
    e->ctx.tool_call_format = "hermes";
    tk_end_as("%s: none masks the closer and the call head, strips "
              "markers", f->fmt);
}

/* none never lets the opener through even as the likeliest token; auto
 * with the opener first follows it into one valid call (tools tl: for
 * glm4.5 without string parameters, which a random model never closes). */
static void
test_none_and_auto(env_t *e, const char *fmt, const char *tl)
{
    rec_t   *r = malloc(sizeof(*r));
    char     err[256] = "", why[256];
    int32_t  op = llm_vocab_find(e->v, "<tool_call>", 11);

    e->ctx.tool_call_format = fmt;
    e->tools = tl;
    REQUIRE(op >= 0, "no <tool_call> token");
    for (uint64_t seed = 1; seed <= 10; seed++) {
        REQUIRE(decode(e, "none", 1, seed, op, 1, 60, r, err, sizeof(err))
                == 0, "none: %s", err);
        REQUIRE(r->n == 0 && strstr(r->content, "<tool_call>") == NULL,
                "none let the opener through: [%s]", r->content);
        REQUIRE(r->clen > 0, "none: no content");
    }
    for (uint64_t seed = 1; seed <= 10; seed++) {
        REQUIRE(decode(e, "auto", 0, seed, op, 0, 1500, r, err, sizeof(err))
                == 0, "auto: %s", err);
        REQUIRE(r->n == 1, "auto with the opener first: %u calls, [%s]", r->n,
                r->content);
        REQUIRE(valid_call(r->names[0], r->args[0], why, sizeof(why)),
                "auto: %s", why);
    }
    free(r);
    e->ctx.tool_call_format = "hermes";
    e->tools = NULL;
    tk_end_as("%s: none masks the opener, auto follows it", fmt);
}

static int feed_script(env_t *e, llm_seq_hooks_t *h, llm_detok_t *d,
    rec_t *r, const char *text, float *row, char *why, size_t wl);

/* More tools than the grammar's anyOf follows at once (16): every name
 * must stay reachable, the last one too (a hermes call to tool_23 fed
 * token by token must be allowed all along). */
static void
test_many_tools(env_t *e, const char *fmt)
{
    char    *tl = malloc(8192), nc[96], why[256], err[256] = "";
    rec_t   *r = malloc(sizeof(*r));
    size_t   n = 0;
    int      calls = 0;

    n += (size_t) snprintf(tl + n, 8192 - n, "[");
    for (int i = 0; i < 24; i++) {
        n += (size_t) snprintf(tl + n, 8192 - n, "%s{\"type\": \"function\", "
            "\"function\": {\"name\": \"tool_%d\", \"parameters\": "
            "{\"type\": \"object\", \"properties\": {\"x\": {\"type\": "
            "\"integer\"}}, \"required\": [\"x\"]}}}", i ? ", " : "", i);
    }
    snprintf(tl + n, 8192 - n, "]");
    e->ctx.tool_call_format = fmt;
    e->tools = tl;
    snprintf(nc, sizeof(nc), "{\"type\": \"function\", \"function\": "
             "{\"name\": \"tool_23\"}}");
    for (uint64_t seed = 1; seed <= 20; seed++) {
        const char *choice = seed % 2 ? "required" : nc;
        json_t     *a;

        REQUIRE(decode(e, choice, 0, seed, -1, 0, 1500, r, err, sizeof(err))
                == 0, "%s many tools: %s", fmt, err);
        REQUIRE(r->n == 1, "%s many tools: %u calls, content [%s]", fmt, r->n,
                r->content);
        REQUIRE(strncmp(r->names[0], "tool_", 5) == 0
                && atoi(r->names[0] + 5) < 24
                && (seed % 2 || strcmp(r->names[0], "tool_23") == 0),
                "%s many tools: called %s", fmt, r->names[0]);
        a = json_loads(r->args[0], 0, NULL);
        snprintf(why, sizeof(why), "%.200s", r->args[0]);
        REQUIRE(json_is_integer(json_object_get(a, "x"))
                && json_object_size(a) == 1, "%s many tools: arguments %s",
                fmt, why);
        json_decref(a);
        calls++;
    }
    if (strcmp(fmt, "hermes") == 0) {
        treq_t                g = { 0 };
        llm_seq_hooks_t       h;
        llm_detok_t          *d;
        float                *row = malloc(e->nv * sizeof(float));

        memset(r, 0, sizeof(*r));
        memset(&h, 0, sizeof(h));
        g.tools_json = tl;
        g.tool_choice_json = (char *) "required";
        REQUIRE(tool_hooks(&e->ctx, &g, &h, err, sizeof(err)) == 1
                && llm_detok_create(&d, e->v, NULL, 0) == 0, "hooks: %s", err);
        REQUIRE(feed_script(e, &h, d, r,
                            "<tool_call>\n{\"name\": \"tool_23\", "
                            "\"arguments\": {\"x\": 5}\n}\n</tool_call>", row,
                            why, sizeof(why)) == 0, "%s", why);
        h.free(h.ud);
        llm_detok_free(d);
        free(row);
    }
    e->tools = NULL;
    free(tl);
    free(r);
    tk_end_as("%s with 24 tools (%d calls)", fmt, calls);
}

/* Accept the tokens of text one by one, each allowed by the mask. */
static int
feed_script(env_t *e, llm_seq_hooks_t *h, llm_detok_t *d, rec_t *r,
    const char *text, float *row, char *why, size_t wl)
{
    llm_text_out_t  out = { rec_content, rec_call, r };
    llm_tokens_t    toks = { 0 };
    const char     *t;
    size_t          len;
    char            err[256];

    if (llm_tokenize(e->v, text, strlen(text), 0, &toks, err, sizeof(err))
        != 0)
    {
        snprintf(why, wl, "tokenize: %s", err);
        return -1;
    }
    for (size_t i = 0; i < toks.n; i++) {
        int32_t id = toks.ids[i];

        memset(row, 0, e->nv * sizeof(float));
        h->mask(h->ud, row, e->nv);
        if (row[id] == -INFINITY) {
            const char *b = llm_token_bytes(e->v, id, 1, &len);

            snprintf(why, wl, "token %zu [%.*s] of [%s] masked", i,
                     (int) len, b, text);
            llm_tokens_free(&toks);
            return -1;
        }
        h->accept(h->ud, id);
        if (llm_detok_push(d, id, &t, &len) >= 0 && len > 0) {
            h->text(h->ud, t, len, 0, &out);
        }
    }
    llm_tokens_free(&toks);
    return 0;
}

/* A family whose string values are raw text (minimax-m2, glm4.5): the
 * call whole, then the call up to the end of a string value. */
typedef struct {
    const char  *fmt;
    const char  *call;      /* a call to note(text: "a<b </x>", n: 42) */
    const char  *upto;      /* up to the closer of text: "ab" */
} raw_fmt_t;

static const raw_fmt_t raw_fmts[] = {
    { "minimax-m2",
      "<minimax:tool_call>\n<invoke name=\"note\">\n<parameter name=\"text\">"
      "a<b </x></parameter>\n<parameter name=\"n\">42</parameter>\n"
      "</invoke>\n</minimax:tool_call>",
      "<minimax:tool_call>\n<invoke name=\"note\">\n<parameter name=\"text"
      "\">ab</parameter>" },
    /* as GLM-4.6's template renders it (build/bin/llm-template) */
    { "glm4.5",
      "<tool_call>note\n<arg_key>text</arg_key>\n<arg_value>a<b </x>"
      "</arg_value>\n<arg_key>n</arg_key>\n<arg_value>42</arg_value>\n"
      "</tool_call>",
      "<tool_call>note\n<arg_key>text</arg_key>\n<arg_value>ab</arg_value>" },
    /* as Qwen3.5's template renders it */
    { "qwen3-coder",
      "<tool_call>\n<function=note>\n<parameter=text>\na<b </x>\n"
      "</parameter>\n<parameter=n>\n42\n</parameter>\n</function>\n"
      "</tool_call>",
      "<tool_call>\n<function=note>\n<parameter=text>\nab\n</parameter>" },
};

/* String values, token by token: '<' and even </x> inside a value are
 * allowed, the closer (</parameter>, </arg_value>) ends it and only at the
 * end of a token, the values convert by type. */
static void
test_mm_raw(env_t *e, const raw_fmt_t *f)
{
    static const char     tl[] =
        "[{\"type\": \"function\", \"function\": {\"name\": \"note\", "
        "\"parameters\": {\"type\": \"object\", \"properties\": {"
        "\"text\": {\"type\": \"string\"}, \"n\": {\"type\": "
        "\"integer\"}}, \"required\": [\"text\"]}}}]";
    treq_t                g = { 0 };
    llm_text_out_t        out;
    llm_seq_hooks_t       h;
    llm_detok_t          *d = NULL;
    rec_t                *r = calloc(1, sizeof(*r));
    float                *row = malloc(e->nv * sizeof(float));
    char                  err[256] = "", why[512] = "";
    const char           *t;
    size_t                len;
    int                   rc, masked = 0, single = -1;

    out = (llm_text_out_t) { rec_content, rec_call, r };
    e->ctx.tool_call_format = f->fmt;
    g.tools_json = (char *) tl;
    g.tool_choice_json = (char *) "required";
    g.parallel_tool_calls = 0;
    memset(&h, 0, sizeof(h));
    rc = tool_hooks(&e->ctx, &g, &h, err, sizeof(err));
    REQUIRE(rc == 1 && llm_detok_create(&d, e->v, NULL, 0) == 0,
            "hooks: %d %s", rc, err);
    rc = feed_script(e, &h, d, r, f->call, row, why, sizeof(why));
    REQUIRE(rc == 0, "%s", why);
    memset(row, 0, e->nv * sizeof(float));
    h.mask(h.ud, row, e->nv);
    REQUIRE(row[llm_vocab_eos(e->v)] == 0.0f && row['a'] == -INFINITY,
            "after the block only the end is allowed");
    if (llm_detok_flush(d, &t, &len) == 0 && len > 0) {
        h.text(h.ud, t, len, 0, &out);
    }
    h.text(h.ud, "", 0, 1, &out);
    REQUIRE(r->n == 1 && strcmp(r->names[0], "note") == 0
            && strcmp(r->args[0], "{\"text\": \"a<b </x>\", \"n\": 42}") == 0
            && r->clen == 0, "call %u %s %s, content [%s]", r->n, r->names[0],
            r->args[0], r->content);
    h.free(h.ud);
    llm_detok_reset(d);

    /* inside a value that ends with </parameter> (</arg_value>), the
     * parser has ended the value: what may come is only the closer's \n,
     * as a token of its own */
    memset(r, 0, sizeof(*r));
    memset(&h, 0, sizeof(h));
    rc = tool_hooks(&e->ctx, &g, &h, err, sizeof(err));
    REQUIRE(rc == 1, "hooks: %s", err);
    rc = feed_script(e, &h, d, r, f->upto, row, why, sizeof(why));
    REQUIRE(rc == 0, "%s", why);
    memset(row, 0, e->nv * sizeof(float));
    h.mask(h.ud, row, e->nv);
    for (uint32_t id = 0; id < e->nv; id++) {
        const char *b = llm_token_bytes(e->v, (int32_t) id, 1, &len);

        if (len > 1 && b[0] == '\n') {
            REQUIRE(row[id] == -INFINITY, "[%.*s] goes past the closer",
                    (int) len, b);
            masked++;
        }
        if (len == 1 && b[0] == '\n') {
            single = (int) id;
        }
    }
    REQUIRE(single >= 0 && row[single] == 0.0f, "'\\n' is not allowed");
    for (uint32_t id = 0; id < e->nv; id++) {
        REQUIRE(row[id] == -INFINITY || (int) id == single,
                "token %u allowed after the closer but its newline", id);
    }
    h.free(h.ud);
    llm_detok_free(d);
    free(row);
    free(r);
    e->ctx.tool_call_format = "hermes";
    tk_end_as("%s string values token by token (%d tokens past the "
              "closer masked)", f->fmt, masked);
}

/* glm4.7: GLM-4.7's compact calls (no newlines) are what the grammar
 * writes: the template's form passes token by token and parses; a newline
 * after the name is masked. */
static void
test_glm47(env_t *e)
{
    static const char     tl[] =
        "[{\"type\": \"function\", \"function\": {\"name\": \"note\", "
        "\"parameters\": {\"type\": \"object\", \"properties\": {"
        "\"text\": {\"type\": \"string\"}, \"n\": {\"type\": "
        "\"integer\"}}, \"required\": [\"text\"]}}}]";
    treq_t                g = { 0 };
    llm_text_out_t        out;
    llm_seq_hooks_t       h;
    llm_detok_t          *d = NULL;
    rec_t                *r = calloc(1, sizeof(*r));
    float                *row = malloc(e->nv * sizeof(float));
    char                  err[256] = "", why[512] = "";
    int32_t               nl = -1;
    size_t                len;
    int                   rc;

    for (uint32_t id = 0; id < e->nv && nl < 0; id++) {
        const char *b = llm_token_bytes(e->v, (int32_t) id, 1, &len);

        if (len == 1 && b[0] == '\n') {
            nl = (int32_t) id;
        }
    }

    out = (llm_text_out_t) { rec_content, rec_call, r };
    e->ctx.tool_call_format = "glm4.7";
    g.tools_json = (char *) tl;
    g.tool_choice_json = (char *) "required";
    memset(&h, 0, sizeof(h));
    rc = tool_hooks(&e->ctx, &g, &h, err, sizeof(err));
    REQUIRE(rc == 1 && llm_detok_create(&d, e->v, NULL, 0) == 0,
            "hooks: %d %s", rc, err);
    rc = feed_script(e, &h, d, r, "<tool_call>note<arg_key>text</arg_key>"
                     "<arg_value>a<b </x></arg_value><arg_key>n</arg_key>"
                     "<arg_value>42</arg_value></tool_call>", row, why,
                     sizeof(why));
    REQUIRE(rc == 0, "%s", why);
    h.text(h.ud, "", 0, 1, &out);
    REQUIRE(r->n == 1 && strcmp(r->names[0], "note") == 0
            && strcmp(r->args[0], "{\"text\": \"a<b </x>\", \"n\": 42}") == 0
            && r->clen == 0, "call %u %s %s, content [%s]", r->n, r->names[0],
            r->args[0], r->content);
    h.free(h.ud);
    llm_detok_reset(d);
    memset(r, 0, sizeof(*r));
    memset(&h, 0, sizeof(h));
    REQUIRE(tool_hooks(&e->ctx, &g, &h, err, sizeof(err)) == 1, "%s", err);
    REQUIRE(feed_script(e, &h, d, r, "<tool_call>note", row, why,
                        sizeof(why)) == 0, "%s", why);
    memset(row, 0, e->nv * sizeof(float));
    h.mask(h.ud, row, e->nv);
    {
        uint32_t allowed = 0;

        for (uint32_t id = 0; id < e->nv; id++) {
            allowed += row[id] != -INFINITY;
        }
        REQUIRE(nl >= 0 && row[nl] == -INFINITY, "glm4.7: a newline after "
                "the name is allowed (%u tokens allowed)", allowed);
    }
    h.free(h.ud);
    llm_detok_free(d);
    free(row);
    free(r);
    e->ctx.tool_call_format = "hermes";
    tk_end_as("glm4.7: the compact form token by token, no newline after "
              "the name");
}

static void
test_errors(env_t *e)
{
    treq_t                g = { 0 };
    llm_seq_hooks_t       h;
    char                  err[256];
    int                   rc;

    memset(&h, 0, sizeof(h));
    g.tools_json = (char *) "[{\"type\": \"function\", \"function\": "
        "{\"name\": \"a\", \"parameters\": {\"type\": \"object\"}}}, "
        "{\"type\": \"function\", \"function\": {\"name\": \"b\", "
        "\"parameters\": {\"type\": \"object\", \"properties\": {\"zip\": "
        "{\"type\": \"string\", \"pattern\": \"^[0-9]+$\"}}}}}]";
    g.tool_choice_json = (char *) "auto";
    rc = tool_hooks(&e->ctx, &g, &h, err, sizeof(err));
    REQUIRE(rc == -EINVAL && strncmp(err, "tools[1].function.parameters: ", 30)
            == 0 && strstr(err, "pattern"), "bad schema: %d %s", rc, err);
    e->ctx.tool_call_format = "deepseek-v3";
    rc = tool_hooks(&e->ctx, &g, &h, err, sizeof(err));
    e->ctx.tool_call_format = "hermes";
    REQUIRE(rc == -EINVAL && strncmp(err, "tools[1].function.parameters: ", 30)
            == 0 && strstr(err, "pattern"), "bad schema, per tool: %d %s", rc,
            err);

    g.tools_json = (char *) tools;
    g.tool_choice_json = (char *) "{\"type\": \"function\", \"function\": "
        "{\"name\": \"nope\"}}";
    rc = tool_hooks(&e->ctx, &g, &h, err, sizeof(err));
    REQUIRE(rc == -EINVAL && strncmp(err, "tool_choice: ", 13) == 0,
            "unknown name: %d %s", rc, err);

    g.tool_choice_json = (char *) "sometimes";
    rc = tool_hooks(&e->ctx, &g, &h, err, sizeof(err));
    REQUIRE(rc == -EINVAL && strncmp(err, "tool_choice: ", 13) == 0,
            "bad choice: %d %s", rc, err);

    /* a JSON response_format owns the answer: with tools it needs
     * tool_choice "none", whatever words its schema uses ("text" too) */
    g.tool_choice_json = (char *) "auto";
    g.response_format_json = "{\"type\": \"json_schema\", \"json_schema\": "
        "{\"name\": \"note\", \"schema\": {\"type\": \"object\", "
        "\"properties\": {\"text\": {\"type\": \"string\"}}}}}";
    rc = tool_hooks(&e->ctx, &g, &h, err, sizeof(err));
    REQUIRE(rc == -EINVAL && strncmp(err, "response_format: ", 17) == 0,
            "json_schema with a 'text' property and tools: %d %s", rc, err);
    g.tool_choice_json = (char *) "none";
    rc = tool_hooks(&e->ctx, &g, &h, err, sizeof(err));
    REQUIRE(rc == 0 && h.mask == NULL,
            "json_schema with tool_choice none leaves the answer to it: %d",
            rc);
    g.tool_choice_json = (char *) "auto";
    g.response_format_json = "{\"type\": \"text\"}";
    rc = tool_hooks(&e->ctx, &g, &h, err, sizeof(err));
    REQUIRE(rc == 1 && h.mask != NULL, "response_format text and tools: %d "
            "%s", rc, err);
    if (h.free) {
        h.free(h.ud);
    }
    memset(&h, 0, sizeof(h));
    g.response_format_json = NULL;

    g.tools_json = (char *) "";
    rc = tool_hooks(&e->ctx, &g, &h, err, sizeof(err));
    REQUIRE(rc == 0 && h.mask == NULL, "no tools: %d", rc);
    tk_end_as("errors name the field");
}

/*
 * Make the markers control tokens in the file at path: token_type 3 in
 * the tokenizer.ggml.token_type array, found after its key (GGUF: key,
 * u32 value type 9 = array, u32 element type, u64 count, the values).
 */
static int
make_markers_control(const char *path, const llm_vocab_t *v, char *err,
    size_t errlen)
{
    static const char  key[] = "tokenizer.ggml.token_type";
    static const char *m[] = { "<tool_call>", "</tool_call>" };
    char              *buf;
    const char        *f;
    int32_t            ctl = 3;
    off_t              size, at;
    int                fd, rc = 0;

    fd = open(path, O_RDWR);
    if (fd < 0) {
        snprintf(err, errlen, "open: %s", strerror(errno));
        return -EIO;
    }
    size = lseek(fd, 0, SEEK_END);
    buf = malloc((size_t) size);
    if (buf == NULL || pread(fd, buf, (size_t) size, 0) != size) {
        snprintf(err, errlen, "read failed");
        rc = -EIO;
        goto done;
    }
    f = memmem(buf, (size_t) size, key, sizeof(key) - 1);
    if (f == NULL) {
        snprintf(err, errlen, "no %s in the file", key);
        rc = -EIO;
        goto done;
    }
    at = (f - buf) + (off_t) sizeof(key) - 1 + 4 + 4 + 8;
    for (int k = 0; k < 2; k++) {
        int32_t id = llm_vocab_find(v, m[k], strlen(m[k]));

        if (id < 0 || pwrite(fd, &ctl, 4, at + (off_t) id * 4) != 4) {
            snprintf(err, errlen, "cannot mark %s as control", m[k]);
            rc = -EIO;
            goto done;
        }
    }
done:
    free(buf);
    close(fd);
    return rc;
}

static void
test_control_markers(env_t *e, const char *fmt, const char *tl)
{
    rec_t  *r = malloc(sizeof(*r));
    char    err[256] = "", why[256];
    int32_t op = llm_vocab_find(e->v, "<tool_call>", 11);
    int     calls = 0;

    e->ctx.tool_call_format = fmt;
    e->tools = tl;
    REQUIRE(op >= 0 && llm_vocab_is_control(e->v, op),
            "<tool_call> is not a control token");
    for (uint64_t seed = 1; seed <= 10; seed++) {
        REQUIRE(decode(e, "required", seed % 2, seed, -1, 0, 1500, r, err,
                       sizeof(err)) == 0, "control: %s", err);
        REQUIRE(r->n >= 1 && r->clen == 0, "control markers: %u calls, "
                "content [%s]", r->n, r->content);
        for (uint32_t i = 0; i < r->n; i++) {
            REQUIRE(valid_call(r->names[i], r->args[i], why, sizeof(why)),
                    "control markers: %s", why);
        }
        calls += (int) r->n;
    }
    free(r);
    e->ctx.tool_call_format = "hermes";
    e->tools = NULL;
    tk_end_as("%s: control-token markers reach the parser (%d calls)", fmt,
              calls);
}

int
main(void)
{
    llm_mkmodel_params_t  p;
    llm_gguf_t           *gg = NULL;
    env_t                 e;
    char                  err[512], path[512];

    memset(&e, 0, sizeof(e));
    snprintf(path, sizeof(path), "%s/m.gguf", tk_tmpdir("test_toolhooks"));
    if (llm_mkmodel_preset(&p, "tiny", err, sizeof(err)) != 0
        || llm_mkmodel_write(&p, path, NULL, err, sizeof(err)) != 0
        || llm_gguf_open(&gg, path, err, sizeof(err)) != 0
        || llm_vocab_load(&e.v, gg, err, sizeof(err)) != 0
        || llm_tokindex_create(&e.ctx.tokindex, e.v, err, sizeof(err)) != 0)
    {
        tk_fatal("setup: %s", err);
    }
    e.nv = llm_vocab_n_tokens(e.v);
    e.ctx.vocab = e.v;
    e.ctx.n_vocab = e.nv;
    e.ctx.tool_call_format = "hermes";

    tk_begin("forced calls, hermes");
    test_forced(&e, "hermes", NULL, "lookup_order");
    tk_begin("forced calls, llama3-json");
    test_forced(&e, "llama3-json", NULL, "lookup_order");
    tk_begin("forced calls, mistral");
    test_forced(&e, "mistral", NULL, "lookup_order");
    tk_begin("forced calls, deepseek-v3");
    test_forced(&e, "deepseek-v3", NULL, "lookup_order");
    tk_begin("forced calls, kimi-k2");
    test_forced(&e, "kimi-k2", NULL, "lookup_order");
    tk_begin("forced calls, minimax-m2");
    test_forced(&e, "minimax-m2", mm_tools, "set_level");
    tk_begin("forced calls, glm4.5");
    test_forced(&e, "glm4.5", mm_tools, "set_level");
    tk_begin("forced calls, glm4.7");
    test_forced(&e, "glm4.7", mm_tools, "set_level");
    tk_begin("forced calls, qwen3-coder");
    test_forced(&e, "qwen3-coder", mm_tools, "set_level");
    tk_begin("glm4.7: the compact form");
    test_glm47(&e);
    for (size_t i = 0; i < sizeof(raw_fmts) / sizeof(raw_fmts[0]); i++) {
        tk_begin("%s string values token by token", raw_fmts[i].fmt);
        test_mm_raw(&e, &raw_fmts[i]);
    }
    tk_begin("hermes with 24 tools");
    test_many_tools(&e, "hermes");
    tk_begin("llama3-json with 24 tools");
    test_many_tools(&e, "llama3-json");
    tk_begin("mistral with 24 tools");
    test_many_tools(&e, "mistral");
    tk_begin("glm4.5 with 24 tools");
    test_many_tools(&e, "glm4.5");
    tk_begin("qwen3-coder with 24 tools");
    test_many_tools(&e, "qwen3-coder");
    e.ctx.tool_call_format = "hermes";
    e.tools = NULL;
    tk_begin("hermes: none masks the opener, auto follows it");
    test_none_and_auto(&e, "hermes", NULL);
    tk_begin("glm4.5: none masks the opener, auto follows it");
    test_none_and_auto(&e, "glm4.5", mm_tools);
    for (size_t i = 0; i < sizeof(none_fmts) / sizeof(none_fmts[0]); i++) {
        tk_begin("%s: none masks the closer and the call head, strips "
                 "markers", none_fmts[i].fmt);
        test_none_markup(&e, &none_fmts[i]);
    }
    tk_begin("errors name the field");
    test_errors(&e);

    /* again with the markers as control tokens */
    tk_begin("hermes: control-token markers reach the parser");
    if (make_markers_control(path, e.v, err, sizeof(err)) != 0) {
        tk_fail("control markers: %s", err);
    }
    llm_tokindex_free(e.ctx.tokindex);
    llm_vocab_free(e.v);
    llm_gguf_close(gg);
    if (tk_failures() == 0) {
        if (llm_gguf_open(&gg, path, err, sizeof(err)) != 0
            || llm_vocab_load(&e.v, gg, err, sizeof(err)) != 0
            || llm_tokindex_create(&e.ctx.tokindex, e.v, err, sizeof(err))
               != 0)
        {
            tk_fatal("reload: %s", err);
        }
        e.ctx.vocab = e.v;
        test_control_markers(&e, "hermes", NULL);
        tk_begin("glm4.5: control-token markers reach the parser");
        test_control_markers(&e, "glm4.5", mm_tools);
        llm_tokindex_free(e.ctx.tokindex);
        llm_vocab_free(e.v);
        llm_gguf_close(gg);
    } else if (tk_point_ok()) {
        tk_skip("control-token markers reach the parser",
                "an earlier check failed");
    }
    unlink(path);
    return tk_done();
}
