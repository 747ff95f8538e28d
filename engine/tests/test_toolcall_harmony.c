/*
 * The harmony tool grammar (gpt-oss, decode/toolhooks.c) with the harmony
 * reasoning split (decode/reasoning.c), run the way the scheduler runs
 * them: the hooks' mask and accept around each token except inside an
 * analysis body, the detokenizer with control tokens' text, the split on
 * the text, its answer through the hooks' text hook and its calls
 * recorded.  On two vocabularies: llm-mkmodel's tiny gpt-oss with
 * gpt-oss's template (the harmony markup control tokens, <|call|> and
 * <|return|> end tokens, as in o200k_harmony), and the plain generated
 * one (the markup spelled in text pieces).
 *
 * From random logits, tool_choice required and named always give one
 * call, <|channel|>commentary to=functions.NAME <|constrain|>json
 * <|message|>{...} then <|call|>, its arguments valid against the tool's
 * schema, no content and no reasoning; with control tokens the markup is
 * written by them, never spelled.  auto: after an analysis message, a
 * header with to=functions. is held to a valid call; to=functions. in a
 * final message's text is not (nothing is masked).  none: the recipient
 * cannot be finished.  A named function that is not a tool is a 400.
 */

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "model/gguf.h"
#include "mkmodel.h"
#include "decode/reasoning.h"
#include "decode/sample.h"
#include "decode/toolcall.h"
#include "decode/toolhooks.h"
#include "text/tokenizer.h"
#include "testkit.h"

static const char tools[] =
    "[{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", "
    "\"parameters\": {\"type\": \"object\", \"properties\": {"
    "\"city\": {\"type\": \"string\"}, "
    "\"unit\": {\"enum\": [\"c\", \"f\"]}, "
    "\"days\": {\"type\": \"integer\"}}, "
    "\"required\": [\"city\", \"days\"], \"additionalProperties\": false}}},"
    " {\"type\": \"function\", \"function\": {\"name\": \"set_level\", "
    "\"parameters\": {\"type\": \"object\", \"properties\": {"
    "\"level\": {\"type\": \"integer\"}, "
    "\"flags\": {\"type\": \"array\", \"items\": {\"type\": \"boolean\"}, "
    "\"maxItems\": 3}}, \"required\": [\"level\"]}}}]";

typedef struct {
    char      raw[16384];       /* the text as decoded, markup and all */
    size_t    rlen;
    char      content[4096];
    char      reasoning[4096];
    char      names[4][64];
    char      args[4][8192];
    uint32_t  n;
    uint32_t  ctl;              /* control tokens sampled */
} rec_t;

typedef struct {
    llm_vocab_t      *v;
    llm_hooks_ctx_t   ctx;
    uint32_t          nv;
    llm_seq_hooks_t   h;
    llm_reasoning_t  *rs;
    rec_t            *r;
} env_t;

static void
cat(char *dst, size_t cap, const char *s, size_t len)
{
    size_t n = strlen(dst);

    if (n + len < cap) {
        memcpy(dst + n, s, len);
        dst[n + len] = '\0';
    }
}

static void
rec_content(void *sink, const char *s, size_t len)
{
    rec_t *r = sink;

    cat(r->content, sizeof(r->content), s, len);
}

static void
rec_tool_call(void *sink, uint32_t idx, const char *id, const char *name,
    const char *args, size_t len)
{
    (void) sink; (void) idx; (void) id; (void) name; (void) args; (void) len;
    tk_fail("the harmony hooks parsed a call themselves");
}

static void
rs_reasoning(void *ud, const char *s, size_t len)
{
    env_t *e = ud;

    cat(e->r->reasoning, sizeof(e->r->reasoning), s, len);
}

static void
rs_answer(void *ud, const char *s, size_t len)
{
    env_t          *e = ud;
    llm_text_out_t  out = { rec_content, rec_tool_call, e->r };

    e->h.text(e->h.ud, s, len, 0, &out);
}

static void
rs_call(void *ud, const char *name, size_t nl, const char *args, size_t len)
{
    env_t *e = ud;
    rec_t *r = e->r;

    if (name != NULL) {
        if (r->n < 4) {
            snprintf(r->names[r->n], sizeof(r->names[0]), "%.*s", (int) nl,
                     name);
        }
        r->n++;
    } else if (r->n > 0 && r->n <= 4) {
        cat(r->args[r->n - 1], sizeof(r->args[0]), args, len);
    }
}

static void
route(env_t *e, const char *t, size_t len, int final)
{
    llm_reasoning_out_t ro = { rs_reasoning, rs_answer, rs_call, e };

    cat(e->r->raw, sizeof(e->r->raw), t, len);
    llm_reasoning_feed(e->rs, t, len, final, &ro);
}

/* The hooks for choice on e (1), or the error (<= 0). */
static int
make(env_t *e, const char *choice, char *err, size_t errlen)
{
    llm_request_t  rq;
    int            rc;

    llm_request_init(&rq);
    rq.parallel_tool_calls = 1;
    if (llm_request_set_tools(&rq, tools) != 0
        || llm_request_set_tool_choice(&rq, choice) != 0)
    {
        llm_request_free(&rq);
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    memset(&e->h, 0, sizeof(e->h));
    rc = llm_tool_hooks_make(&e->ctx, &rq, 0, &e->h, err, errlen);
    llm_request_free(&rq);
    return rc;
}

/* One token through the hooks as the scheduler runs them; 1 at the end
 * of generation, -1 when the mask had forbidden it. */
static int
step(env_t *e, llm_detok_t *d, int32_t tok, float *row, int check)
{
    int         thinking = llm_reasoning_inside(e->rs);
    const char *t;
    size_t      len;

    if (check && !thinking) {
        memset(row, 0, e->nv * sizeof(float));
        e->h.mask(e->h.ud, row, e->nv);
        if (row[tok] == -INFINITY) {
            return -1;
        }
    }
    if (!thinking) {
        e->h.accept(e->h.ud, tok);
    }
    e->r->ctl += llm_vocab_is_control(e->v, tok);
    if (llm_vocab_is_eog(e->v, tok)) {
        return 1;
    }
    if (llm_detok_push(d, tok, &t, &len) >= 0 && len > 0) {
        route(e, t, len, 0);
    }
    return 0;
}

/*
 * Decode: the prefix's tokens first (each allowed by the mask), then up
 * to max tokens from seeded random logits, greedy under the mask.  With
 * masked set, *masked tells whether the mask forbade anything at the
 * first random step.  0, or an error with err written.
 */
static int
decode(env_t *e, const char *choice, const char *prefix, uint64_t seed,
    uint32_t max, int *masked, char *err, size_t errlen)
{
    llm_detok_t    *d;
    llm_tokens_t    toks = { 0 };
    llm_rng_t       rng;
    llm_text_out_t  out = { rec_content, rec_tool_call, e->r };
    float          *row = malloc(e->nv * sizeof(float));
    const char     *t;
    size_t          len;
    int             rc = make(e, choice, err, errlen), end = 0;

    memset(e->r, 0, sizeof(*e->r));
    if (rc != 1) {
        free(row);
        return rc < 0 ? rc : -ENOENT;
    }
    e->rs = llm_reasoning_create(LLM_REASONING_HARMONY, 0);
    if (row == NULL || e->rs == NULL
        || llm_detok_create(&d, e->v, NULL, 0) != 0)
    {
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    llm_detok_set_special(d, 1);
    if (prefix && llm_tokenize(e->v, prefix, strlen(prefix),
                               LLM_TOK_PARSE_SPECIAL, &toks, err, errlen)
                  != 0)
    {
        rc = -EINVAL;
    }
    for (size_t i = 0; rc == 1 && i < toks.n && !end; i++) {
        end = step(e, d, toks.ids[i], row, 1);
        if (end < 0) {
            snprintf(err, errlen, "prefix token %zu masked after [%.100s]",
                     i, e->r->raw);
            rc = -EPERM;
        }
    }
    llm_rng_seed(&rng, seed);
    for (uint32_t s = 0; rc == 1 && s < max && !end; s++) {
        int     thinking = llm_reasoning_inside(e->rs);
        int32_t best = -1;

        for (uint32_t i = 0; i < e->nv; i++) {
            row[i] = (float) llm_rng_uniform(&rng) * 8.0f;
        }
        if (!thinking && e->h.mask(e->h.ud, row, e->nv) < 0) {
            break;
        }
        for (uint32_t i = 0; i < e->nv; i++) {
            if (masked && s == 0 && row[i] == -INFINITY) {
                *masked = 1;
            }
            if (row[i] != -INFINITY && (best < 0 || row[i] > row[best])) {
                best = (int32_t) i;
            }
        }
        if (best < 0) {
            snprintf(err, errlen, "every token masked after [%.100s]",
                     e->r->raw);
            rc = -EDEADLK;
            break;
        }
        end = step(e, d, best, row, 0);
    }
    if (llm_detok_flush(d, &t, &len) == 0 && len > 0) {
        route(e, t, len, 0);
    }
    route(e, "", 0, 1);
    e->h.text(e->h.ud, "", 0, 1, &out);
    llm_tokens_free(&toks);
    llm_detok_free(d);
    llm_reasoning_free(e->rs);
    e->rs = NULL;
    e->h.free(e->h.ud);
    free(row);
    return rc == 1 ? 0 : rc;
}

/* A call's arguments against the two tools' schemas. */
static int
valid_call(const char *name, const char *args, char *why, size_t wl)
{
    json_t      *a = json_loads(args, 0, NULL), *x;
    const char  *k;
    int          ok = 0;

    if (!json_is_object(a)) {
        snprintf(why, wl, "arguments are not a JSON object: %.200s", args);
    } else if (strcmp(name, "get_weather") == 0) {
        x = json_object_get(a, "unit");
        ok = json_is_string(json_object_get(a, "city"))
             && json_is_integer(json_object_get(a, "days"))
             && (x == NULL || (json_is_string(x)
                               && (strcmp(json_string_value(x), "c") == 0
                                   || strcmp(json_string_value(x), "f")
                                      == 0)));
        json_object_foreach(a, k, x) {
            ok &= strcmp(k, "city") == 0 || strcmp(k, "unit") == 0
                  || strcmp(k, "days") == 0;
        }
    } else if (strcmp(name, "set_level") == 0) {
        x = json_object_get(a, "flags");
        ok = json_is_integer(json_object_get(a, "level"))
             && (x == NULL || (json_is_array(x) && json_array_size(x) <= 3));
        json_object_foreach(a, k, x) {
            ok &= strcmp(k, "level") == 0 || strcmp(k, "flags") == 0;
        }
    } else {
        snprintf(why, wl, "unknown tool %s", name);
    }
    if (!ok && json_is_object(a)) {
        snprintf(why, wl, "%s arguments: %.200s", name, args);
    }
    json_decref(a);
    return ok;
}

static void
test_forced(env_t *e, const char *what, int control)
{
    const char *named = "{\"type\": \"function\", \"function\": "
                        "{\"name\": \"set_level\"}}";
    char        err[256] = "", why[256], head[128];
    int         calls = 0;

    for (uint64_t seed = 1; seed <= 40; seed++) {
        const char *choice = seed % 2 ? "required" : named;
        rec_t      *r = e->r;

        REQUIRE(decode(e, choice, NULL, seed, 1500, NULL, err, sizeof(err))
                == 0, "%s seed %llu: %s", what, (unsigned long long) seed,
                err);
        REQUIRE(r->n == 1, "%s seed %llu: %u calls, raw [%.300s]", what,
                (unsigned long long) seed, r->n, r->raw);
        snprintf(head, sizeof(head), "<|channel|>commentary to=functions.%s "
                 "<|constrain|>json<|message|>", r->names[0]);
        REQUIRE(strncmp(r->raw, head, strlen(head)) == 0,
                "%s: the call's header: [%.200s]", what, r->raw);
        REQUIRE(seed % 2 || strcmp(r->names[0], "set_level") == 0,
                "%s: named set_level, called %s", what, r->names[0]);
        REQUIRE(valid_call(r->names[0], r->args[0], why, sizeof(why)),
                "%s seed %llu: %s", what, (unsigned long long) seed, why);
        REQUIRE(r->content[0] == '\0' && r->reasoning[0] == '\0',
                "%s: content [%s] reasoning [%s] beside the call", what,
                r->content, r->reasoning);
        /* <|channel|>, <|constrain|>, <|message|>, <|call|> */
        REQUIRE(!control || r->ctl == 4, "%s: %u control tokens, raw "
                "[%.300s]", what, r->ctl, r->raw);
        calls++;
    }
    tk_end_as("forced calls, %s (%d calls)", what, calls);
}

static void
test_auto_none(env_t *e, const char *what)
{
    char  err[256] = "", why[256];
    int   masked;

    for (uint64_t seed = 1; seed <= 10; seed++) {
        REQUIRE(decode(e, "auto", "<|channel|>analysis<|message|>I will "
                       "look it up.<|end|><|start|>assistant<|channel|>"
                       "commentary to=functions.", seed, 1500, NULL, err,
                       sizeof(err)) == 0, "%s auto: %s", what, err);
        REQUIRE(e->r->n == 1 && strcmp(e->r->reasoning, "I will look it up.")
                == 0, "%s auto: %u calls, reasoning [%s]", what, e->r->n,
                e->r->reasoning);
        REQUIRE(valid_call(e->r->names[0], e->r->args[0], why, sizeof(why)),
                "%s auto: %s", what, why);
    }
    masked = 0;
    REQUIRE(decode(e, "auto", "<|channel|>final<|message|>write to=functions.",
                   1, 1, &masked, err, sizeof(err)) == 0, "%s: %s", what,
            err);
    REQUIRE(!masked && e->r->n == 0, "%s auto: to=functions. in a final "
            "message's text was taken for a call", what);
    masked = 0;
    REQUIRE(decode(e, "none", "<|channel|>commentary to=functions", 1, 1,
                   &masked, err, sizeof(err)) == 0, "%s none: %s", what, err);
    REQUIRE(masked && e->r->n == 0, "%s none: the recipient can be finished",
            what);
    REQUIRE(make(e, "{\"type\": \"function\", \"function\": {\"name\": "
                 "\"nope\"}}", err, sizeof(err)) == -EINVAL
            && strncmp(err, "tool_choice", 11) == 0,
            "%s: an unknown named function: [%s]", what, err);
    tk_end_as("%s: auto follows a header's call, not a body's text; none "
              "masks the recipient", what);
}

/* llm-mkmodel's preset with template file tmpl (NULL: its ChatML). */
static int
load(env_t *e, llm_gguf_t **gg, const char *preset, const char *tmpl,
    const char *path, char *err, size_t errlen)
{
    llm_mkmodel_params_t  p;
    char                 *src = NULL;
    size_t                len;
    int                   rc;

    memset(e, 0, sizeof(*e));
    if (tmpl && (src = tk_read_file(tmpl, &len)) == NULL) {
        snprintf(err, errlen, "cannot read %s", tmpl);
        return -EIO;
    }
    rc = llm_mkmodel_preset(&p, preset, err, errlen);
    p.chat_template = src;
    if (rc == 0) {
        rc = llm_mkmodel_write(&p, path, NULL, err, errlen);
    }
    free(src);
    if (rc == 0) {
        rc = llm_gguf_open(gg, path, err, errlen);
    }
    if (rc == 0) {
        rc = llm_vocab_load(&e->v, *gg, err, errlen);
    }
    if (rc == 0) {
        rc = llm_tokindex_create(&e->ctx.tokindex, e->v, err, errlen);
    }
    if (rc == 0) {
        e->nv = llm_vocab_n_tokens(e->v);
        e->ctx.vocab = e->v;
        e->ctx.n_vocab = e->nv;
        e->ctx.tool_call_format = "harmony";
    }
    return rc;
}

int
main(void)
{
    static const struct {
        const char *preset, *tmpl, *what;
        int         control;
    } vocabs[] = {
        { "tiny-gpt-oss", "engine/tests/data/templates/"
          "openai-gpt-oss-120b.jinja", "control-token markup", 1 },
        { "tiny", NULL, "spelled markup", 0 },
    };
    rec_t  *r = calloc(1, sizeof(*r));
    char    err[512], path[512];

    snprintf(path, sizeof(path), "%s/m.gguf",
             tk_tmpdir("test_toolcall_harmony"));
    for (size_t i = 0; i < sizeof(vocabs) / sizeof(vocabs[0]); i++) {
        llm_gguf_t *gg = NULL;
        env_t       e;

        if (load(&e, &gg, vocabs[i].preset, vocabs[i].tmpl, path, err,
                 sizeof(err)) != 0)
        {
            tk_fatal("setup %s: %s", vocabs[i].what, err);
        }
        e.r = r;
        if (vocabs[i].control) {
            int32_t c = llm_vocab_find(e.v, "<|call|>", 8);

            tk_begin("%s: the vocabulary has it", vocabs[i].what);
            CHECK(c >= 0 && llm_vocab_is_control(e.v, c)
                  && llm_vocab_is_eog(e.v, c),
                  "<|call|> is not a control end token");
            tk_end();
        }
        tk_begin("forced calls, %s", vocabs[i].what);
        test_forced(&e, vocabs[i].what, vocabs[i].control);
        tk_begin("%s: auto and none", vocabs[i].what);
        test_auto_none(&e, vocabs[i].what);
        llm_tokindex_free(e.ctx.tokindex);
        llm_vocab_free(e.v);
        llm_gguf_close(gg);
    }
    unlink(path);
    free(r);
    return tk_done();
}
