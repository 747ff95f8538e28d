/*
 * Tool-call parser checks: every family, fed whole, byte by byte, split
 * in two at every point and in random chunks; the content and the calls
 * (id, name, concatenated arguments) must be the expected ones every
 * time.  Multiple calls, text before and after, broken and cut-off
 * markers; minimax-m2 and glm4.5 values converted by the tool's schema;
 * for those two also random texts of their fragments, whole and in
 * chunks, whose calls' arguments must always be JSON objects.  Calls
 * rendered by the real templates (GLM-4.6, GLM-4.7-Flash, MiniMax-M2,
 * Qwen3) parse back to the arguments rendered.  Run from the repository
 * root.
 */

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "decode/sample.h"
#include "decode/toolcall.h"
#include "template/template.h"
#include "testkit.h"

#define MAXC  4

typedef struct {
    char      content[4096];
    size_t    clen;
    struct {
        char    id[64];
        char    name[128];
        char    args[2048];
        size_t  alen;
    }         calls[MAXC];
    uint32_t  n;
    int       bad;          /* a delta out of order */
    uint32_t  deltas;
} rec_t;

static void
rec_content(void *sink, const char *s, size_t len)
{
    rec_t *r = sink;

    if (r->clen + len >= sizeof(r->content)) {
        r->bad = 1;
        return;
    }
    memcpy(r->content + r->clen, s, len);
    r->clen += len;
    r->content[r->clen] = '\0';
}

static void
rec_call(void *sink, uint32_t idx, const char *id, const char *name,
    const char *args, size_t len)
{
    rec_t *r = sink;

    r->deltas++;
    if (id && id[0]) {
        if (idx != r->n || r->n == MAXC || name == NULL || name[0] == '\0'
            || len != 0)
        {
            r->bad = 1;
            return;
        }
        snprintf(r->calls[idx].id, sizeof(r->calls[idx].id), "%s", id);
        snprintf(r->calls[idx].name, sizeof(r->calls[idx].name), "%s", name);
        r->n++;
        return;
    }
    if (r->n == 0 || idx != r->n - 1 || (name && name[0]) || len == 0
        || r->calls[idx].alen + len >= sizeof(r->calls[idx].args))
    {
        r->bad = 1;
        return;
    }
    memcpy(r->calls[idx].args + r->calls[idx].alen, args, len);
    r->calls[idx].alen += len;
    r->calls[idx].args[r->calls[idx].alen] = '\0';
}

typedef struct {
    const char  *what;
    int          fmt;
    const char  *tools;
    const char  *in;
    const char  *content;
    uint32_t     n;
    const char  *names[MAXC];
    const char  *args[MAXC];
} case_t;

/* Feed c->in cut at the given points (sorted, n_cuts of them). */
static int
run(const case_t *c, const size_t *cuts, size_t n_cuts, rec_t *r)
{
    llm_toolcall_t *tc;
    llm_text_out_t  out = { rec_content, rec_call, r };
    char            err[256];
    size_t          len = strlen(c->in), at = 0;
    json_t         *tools = c->tools ? json_loads(c->tools, 0, NULL) : NULL;
    int             rc;

    memset(r, 0, sizeof(*r));
    rc = llm_toolcall_create(&tc, c->fmt, tools, 42, err, sizeof(err));
    json_decref(tools);
    if (rc != 0) {
        tk_fail("create: %s", err);
        return -1;
    }
    for (size_t i = 0; i <= n_cuts; i++) {
        size_t to = i < n_cuts ? cuts[i] : len;

        rc = llm_toolcall_feed(tc, c->in + at, to - at, 0, &out);
        if (rc < 0) {
            llm_toolcall_free(tc);
            return rc;
        }
        at = to;
    }
    rc = llm_toolcall_feed(tc, "", 0, 1, &out);
    llm_toolcall_free(tc);
    if (rc >= 0 && (uint32_t) rc != r->n) {
        r->bad = 1;
    }
    return rc < 0 ? rc : 0;
}

static int
same(const rec_t *a, const rec_t *b)
{
    if (a->clen != b->clen || memcmp(a->content, b->content, a->clen)
        || a->n != b->n)
    {
        return 0;
    }
    for (uint32_t i = 0; i < a->n; i++) {
        if (strcmp(a->calls[i].id, b->calls[i].id)
            || strcmp(a->calls[i].name, b->calls[i].name)
            || strcmp(a->calls[i].args, b->calls[i].args))
        {
            return 0;
        }
    }
    return 1;
}

static int
expected(const case_t *c, const rec_t *r)
{
    if (r->bad) {
        tk_fail("deltas out of order");
        return 0;
    }
    if (strcmp(r->content, c->content) != 0) {
        tk_fail("content [%s], expected [%s]", r->content, c->content);
        return 0;
    }
    if (r->n != c->n) {
        tk_fail("%u calls, expected %u", r->n, c->n);
        return 0;
    }
    for (uint32_t i = 0; i < r->n; i++) {
        const char *id = r->calls[i].id;
        json_t     *j;

        if (strncmp(id, "call_", 5) != 0 || strlen(id) != 29) {
            tk_fail("id %s", id);
            return 0;
        }
        for (int k = 5; k < 29; k++) {
            if (!isalnum((unsigned char) id[k])) {
                tk_fail("id %s", id);
                return 0;
            }
        }
        if (i > 0 && strcmp(id, r->calls[i - 1].id) == 0) {
            tk_fail("ids repeat");
            return 0;
        }
        if (strcmp(r->calls[i].name, c->names[i]) != 0
            || strcmp(r->calls[i].args, c->args[i]) != 0)
        {
            tk_fail("call %u is %s %s, expected %s %s", i,
                    r->calls[i].name, r->calls[i].args, c->names[i],
                    c->args[i]);
            return 0;
        }
        j = json_loads(r->calls[i].args, 0, NULL);
        if (j == NULL && c->args[i][0] == '{'
            && strchr(c->what, '~') == NULL)
        {
            tk_fail("arguments are not JSON: %s", r->calls[i].args);
            return 0;
        }
        json_decref(j);
    }
    return 1;
}

static void
check(const case_t *c)
{
    size_t     len = strlen(c->in), cuts[64];
    rec_t     *whole = malloc(sizeof(rec_t)), *r = malloc(sizeof(rec_t));
    llm_rng_t  rng;

    tk_begin("%s", c->what);
    if (run(c, NULL, 0, whole) != 0 || !expected(c, whole)) {
        tk_fail_quiet();
        goto done;
    }
    /* byte by byte */
    if (len <= 64 * 8) {
        size_t *all = malloc(len * sizeof(size_t));

        for (size_t i = 0; i < len; i++) {
            all[i] = i;
        }
        if (run(c, all, len, r) != 0 || !same(whole, r) || r->bad) {
            tk_fail("byte by byte: content [%s], %u calls", r->content,
                    r->n);
            free(all);
            goto done;
        }
        free(all);
    }
    /* two pieces, every split point */
    for (size_t i = 1; i < len; i++) {
        cuts[0] = i;
        if (run(c, cuts, 1, r) != 0 || !same(whole, r) || r->bad) {
            tk_fail("split at %zu: content [%s], %u calls", i, r->content,
                    r->n);
            goto done;
        }
    }
    /* random chunks */
    llm_rng_seed(&rng, 7);
    for (int t = 0; t < 200; t++) {
        size_t n = 0, at = 0;

        while (n < 64) {
            at += 1 + llm_rng_next(&rng) % 9;
            if (at >= len) {
                break;
            }
            cuts[n++] = at;
        }
        if (run(c, cuts, n, r) != 0 || !same(whole, r) || r->bad) {
            tk_fail("random chunks %d: content [%s], %u calls", t,
                    r->content, r->n);
            goto done;
        }
    }
done:
    free(whole);
    free(r);
}

#define H LLM_TOOLFMT_HERMES
#define M LLM_TOOLFMT_MINIMAX_M2
#define L LLM_TOOLFMT_LLAMA3_JSON
#define S LLM_TOOLFMT_MISTRAL
#define D LLM_TOOLFMT_DEEPSEEK_V3
#define G LLM_TOOLFMT_GLM45
#define Q LLM_TOOLFMT_QWEN3_CODER
#define K LLM_TOOLFMT_KIMI_K2

#define KM_CALLS_BEGIN  "<|tool_calls_section_begin|>"
#define KM_CALLS_END    "<|tool_calls_section_end|>"
#define KM_CALL_BEGIN   "<|tool_call_begin|>"
#define KM_CALL_END     "<|tool_call_end|>"
#define KM_ARGS         "<|tool_call_argument_begin|>"

#define DS_CALLS_BEGIN  "<｜tool▁calls▁begin｜>"
#define DS_CALLS_END    "<｜tool▁calls▁end｜>"
#define DS_CALL_BEGIN   "<｜tool▁call▁begin｜>"
#define DS_CALL_END     "<｜tool▁call▁end｜>"
#define DS_SEP          "<｜tool▁sep｜>"

static const char mm_tools[] =
    "[{\"type\": \"function\", \"function\": {\"name\": \"get_weather\","
    " \"parameters\": {\"type\": \"object\", \"properties\": {"
    "\"city\": {\"type\": \"string\"}, \"days\": {\"type\": \"integer\"},"
    " \"opts\": {\"type\": \"object\"}, \"note\": {\"type\": [\"string\","
    " \"null\"]}}}}}]";

static const case_t cases[] = {
    { "hermes: text then a call", H, NULL,
      "Let me check.<tool_call>\n{\"name\": \"get_weather\", \"arguments\":"
      " {\"city\": \"Pa\\\"ris\", \"n\": [1, {\"a\": \"}\"}]}}\n</tool_call>",
      "Let me check.", 1, { "get_weather" },
      { "{\"city\": \"Pa\\\"ris\", \"n\": [1, {\"a\": \"}\"}]}" } },
    { "hermes: two calls", H, NULL,
      "<tool_call>\n{\"name\": \"a\", \"arguments\": {\"x\": 1}}\n</tool_call>"
      "\n<tool_call>\n{\"name\": \"b\", \"arguments\": {}}\n</tool_call>\n",
      "", 2, { "a", "b" }, { "{\"x\": 1}", "{}" } },
    { "hermes: text after a call", H, NULL,
      "<tool_call>{\"name\":\"f\",\"arguments\":{}}</tool_call>\nDone.",
      "\nDone.", 1, { "f" }, { "{}" } },
    { "hermes: broken head is content", H, NULL,
      "a <tool_call> not json </tool_call> b",
      "a <tool_call> not json </tool_call> b", 0, { 0 }, { 0 } },
    { "hermes: wrong key is content", H, NULL,
      "<tool_call>{\"title\": \"x\"}</tool_call>",
      "<tool_call>{\"title\": \"x\"}</tool_call>", 0, { 0 }, { 0 } },
    { "hermes: marker prefixes are content", H, NULL,
      "x < y, <tool and <tool_", "x < y, <tool and <tool_", 0, { 0 },
      { 0 } },
    { "hermes: broken second call", H, NULL,
      "<tool_call>{\"name\":\"f\",\"arguments\":{}}</tool_call><tool_call>"
      "oops",
      "<tool_call>oops", 1, { "f" }, { "{}" } },
    { "hermes: cut off in the arguments ~", H, NULL,
      "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": \"b",
      "", 1, { "f" }, { "{\"a\": \"b" } },
    { "hermes: extra member, no closer", H, NULL,
      "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": 1}, \"id\": \"x}\"}",
      "", 1, { "f" }, { "{\"a\": 1}" } },
    { "hermes: parameters key, unicode", H, NULL,
      "日本<tool_call>{\"name\": \"f\", \"parameters\": {\"q\": \"東京\"}}"
      "</tool_call>",
      "日本", 1, { "f" }, { "{\"q\": \"東京\"}" } },

    { "minimax-m2: text then calls", M, mm_tools,
      "Sure.\n<minimax:tool_call>\n<invoke name=\"get_weather\">\n"
      "<parameter name=\"city\">New \"York\"\n</parameter>\n"
      "<parameter name=\"days\">3</parameter>\n"
      "<parameter name=\"opts\">{\"unit\": \"c\"}</parameter>\n"
      "<parameter name=\"note\">null</parameter>\n</invoke>\n"
      "<invoke name=\"get_time\">\n</invoke>\n</minimax:tool_call>",
      "Sure.\n", 2, { "get_weather", "get_time" },
      { "{\"city\": \"New \\\"York\\\"\\n\", \"days\": 3, \"opts\": "
        "{\"unit\": \"c\"}, \"note\": \"null\"}", "{}" } },
    { "minimax-m2: values by schema", M, mm_tools,
      "<minimax:tool_call><invoke name=\"get_weather\"><parameter name=\""
      "city\">a<b</parameter><parameter name=\"days\">three</parameter>"
      "<parameter name=\"x\">[1, 2]</parameter><parameter name=\"y\">hi"
      "</parameter></invoke></minimax:tool_call>",
      "", 1, { "get_weather" },
      { "{\"city\": \"a<b\", \"days\": \"three\", \"x\": [1, 2], "
        "\"y\": \"hi\"}" } },
    { "minimax-m2: broken block is content", M, mm_tools,
      "<minimax:tool_call>\nhello", "<minimax:tool_call>\nhello", 0, { 0 },
      { 0 } },
    { "minimax-m2: cut off in a value", M, mm_tools,
      "<minimax:tool_call>\n<invoke name=\"get_weather\">\n<parameter name="
      "\"city\">Par",
      "", 1, { "get_weather" }, { "{\"city\": \"Par\"}" } },
    { "minimax-m2: broken inside a call", M, mm_tools,
      "<minimax:tool_call>\n<invoke name=\"get_weather\">\n"
      "<parameter name=\"days\">2</parameter>\nthen text",
      "\nthen text", 1, { "get_weather" }, { "{\"days\": 2}" } },

    { "qwen3-coder: text then calls", Q, mm_tools,
      "Sure.\n<tool_call>\n<function=get_weather>\n"
      "<parameter=city>\nNew \"York\"\nline 2\n</parameter>\n"
      "<parameter=days>\n3\n</parameter>\n"
      "<parameter=opts>\n{\"unit\": \"c\"}\n</parameter>\n"
      "</function>\n</tool_call>\n<tool_call>\n<function=get_time>\n"
      "</function>\n</tool_call>",
      "Sure.\n", 2, { "get_weather", "get_time" },
      { "{\"city\": \"New \\\"York\\\"\\nline 2\", \"days\": 3, "
        "\"opts\": {\"unit\": \"c\"}}", "{}" } },
    { "qwen3-coder: values by schema, no newlines", Q, mm_tools,
      "<tool_call><function=get_weather><parameter=city>a<b</parameter>"
      "<parameter=days>three</parameter><parameter=x>[1, 2]</parameter>"
      "</function></tool_call>",
      "", 1, { "get_weather" },
      { "{\"city\": \"a<b\", \"days\": \"three\", \"x\": [1, 2]}" } },
    { "qwen3-coder: broken block is content", Q, mm_tools,
      "<tool_call>\nhello", "<tool_call>\nhello", 0, { 0 }, { 0 } },
    { "qwen3-coder: cut off in a value", Q, mm_tools,
      "<tool_call>\n<function=get_weather>\n<parameter=city>\nPar",
      "", 1, { "get_weather" }, { "{\"city\": \"Par\"}" } },

    { "llama3-json: the answer is a call", L, NULL,
      "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}",
      "", 1, { "get_weather" }, { "{\"city\": \"Paris\"}" } },
    { "llama3-json: python_tag", L, NULL,
      "<|python_tag|>{\"name\": \"f\", \"parameters\": {}}",
      "", 1, { "f" }, { "{}" } },
    { "llama3-json: two calls", L, NULL,
      " {\"name\": \"a\", \"parameters\": {}}; {\"name\": \"b\", "
      "\"parameters\": {\"x\": [1]}}",
      "", 2, { "a", "b" }, { "{}", "{\"x\": [1]}" } },
    { "llama3-json: text is content", L, NULL,
      "Hello {\"name\": \"f\", \"parameters\": {}}",
      "Hello {\"name\": \"f\", \"parameters\": {}}", 0, { 0 }, { 0 } },
    { "llama3-json: other JSON is content", L, NULL,
      " {\"answer\": 42}", " {\"answer\": 42}", 0, { 0 }, { 0 } },
    { "llama3-json: a prefix of python_tag", L, NULL,
      "<|python", "<|python", 0, { 0 }, { 0 } },

    { "mistral: array form", S, NULL,
      "[TOOL_CALLS][{\"name\": \"a\", \"arguments\": {\"x\": 1}}, {\"name\": "
      "\"b\", \"arguments\": {}, \"id\": \"abc123def\"}]",
      "", 2, { "a", "b" }, { "{\"x\": 1}", "{}" } },
    { "mistral: name[ARGS] form", S, NULL,
      "Ok.[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\"}[TOOL_CALLS]f"
      "[CALL_ID]abcdefghi[ARGS]{}",
      "Ok.", 2, { "get_weather", "f" }, { "{\"city\": \"Paris\"}", "{}" } },
    { "mistral: broken is content", S, NULL,
      "Hi [TOOL_CALLS] oops", "Hi [TOOL_CALLS] oops", 0, { 0 }, { 0 } },
    { "mistral: [ARGS] missing", S, NULL,
      "[TOOL_CALLS]f{\"a\": 1}", "[TOOL_CALLS]f{\"a\": 1}", 0, { 0 },
      { 0 } },

    { "deepseek-v3: V3 form", D, NULL,
      "Text" DS_CALLS_BEGIN DS_CALL_BEGIN "function" DS_SEP "get_weather\n"
      "```json\n{\"city\": \"Paris\"}\n```" DS_CALL_END "\n" DS_CALL_BEGIN
      "function" DS_SEP "f\n```json\n{}\n```" DS_CALL_END DS_CALLS_END,
      "Text", 2, { "get_weather", "f" }, { "{\"city\": \"Paris\"}", "{}" } },
    { "deepseek-v3: V3.1 form", D, NULL,
      DS_CALLS_BEGIN DS_CALL_BEGIN "get_weather" DS_SEP "{\"city\": "
      "\"Paris\"}" DS_CALL_END DS_CALLS_END " after",
      " after", 1, { "get_weather" }, { "{\"city\": \"Paris\"}" } },
    { "deepseek-v3: broken is content", D, NULL,
      "a" DS_CALLS_BEGIN "nope", "a" DS_CALLS_BEGIN "nope", 0, { 0 },
      { 0 } },
    { "deepseek-v3: broken head is content", D, NULL,
      DS_CALLS_BEGIN DS_CALL_BEGIN "f" DS_SEP "oops",
      DS_CALLS_BEGIN DS_CALL_BEGIN "f" DS_SEP "oops", 0, { 0 }, { 0 } },

    /* kimi-k2: as Kimi-K2's template writes calls */
    { "kimi-k2: text then two calls", K, NULL,
      "Let me check." KM_CALLS_BEGIN KM_CALL_BEGIN "functions.get_weather:0"
      KM_ARGS "{\"city\": \"Paris\"}" KM_CALL_END KM_CALL_BEGIN
      "functions.f:1" KM_ARGS "{}" KM_CALL_END KM_CALLS_END,
      "Let me check.", 2, { "get_weather", "f" },
      { "{\"city\": \"Paris\"}", "{}" } },
    { "kimi-k2: an id without the prefix or index", K, NULL,
      KM_CALLS_BEGIN KM_CALL_BEGIN "lookup" KM_ARGS "{\"q\": 1}"
      KM_CALL_END KM_CALLS_END " done",
      " done", 1, { "lookup" }, { "{\"q\": 1}" } },
    { "kimi-k2: broken is content", K, NULL,
      "a" KM_CALLS_BEGIN "nope", "a" KM_CALLS_BEGIN "nope", 0, { 0 },
      { 0 } },
    { "kimi-k2: no argument marker is content", K, NULL,
      KM_CALLS_BEGIN KM_CALL_BEGIN "functions.f:0{}",
      KM_CALLS_BEGIN KM_CALL_BEGIN "functions.f:0{}", 0, { 0 }, { 0 } },

    /* glm4.5: the bytes GLM-4.6's template renders (build/bin/llm-template
     * on GLM-4.6.jinja), GLM-4.7's compact form, values by schema type */
    { "glm4.5: text then calls, as GLM-4.6 writes them", G, mm_tools,
      "Sure.\n<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>"
      "New \"York\"\n</arg_value>\n<arg_key>days</arg_key>\n<arg_value>3"
      "</arg_value>\n<arg_key>opts</arg_key>\n<arg_value>{\"unit\": \"c\"}"
      "</arg_value>\n<arg_key>note</arg_key>\n<arg_value>null</arg_value>\n"
      "</tool_call>\n<tool_call>get_time\n</tool_call>",
      "Sure.\n", 2, { "get_weather", "get_time" },
      { "{\"city\": \"New \\\"York\\\"\\n\", \"days\": 3, \"opts\": "
        "{\"unit\": \"c\"}, \"note\": \"null\"}", "{}" } },
    { "glm4.5: GLM-4.7's form, values by schema", G, mm_tools,
      "<tool_call>get_weather<arg_key>city</arg_key><arg_value>a<b"
      "</arg_value><arg_key>days</arg_key><arg_value>three</arg_value>"
      "<arg_key>x</arg_key><arg_value>[1, 2]</arg_value><arg_key>y"
      "</arg_key><arg_value>hi</arg_value></tool_call><tool_call>get_time"
      "</tool_call>",
      "", 2, { "get_weather", "get_time" },
      { "{\"city\": \"a<b\", \"days\": \"three\", \"x\": [1, 2], "
        "\"y\": \"hi\"}", "{}" } },
    { "glm4.5: no tools given, values as JSON or text", G, NULL,
      "<tool_call>f\n<arg_key>n</arg_key>\n<arg_value>12</arg_value>\n"
      "<arg_key>s</arg_key>\n<arg_value>日本 \"x\"</arg_value>\n"
      "</tool_call>",
      "", 1, { "f" }, { "{\"n\": 12, \"s\": \"日本 \\\"x\\\"\"}" } },
    { "glm4.5: text after calls", G, mm_tools,
      "<tool_call>get_time\n</tool_call>\n\nDone.",
      "\n\nDone.", 1, { "get_time" }, { "{}" } },
    { "glm4.5: hermes JSON is content", G, mm_tools,
      "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>",
      "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>", 0,
      { 0 }, { 0 } },
    { "glm4.5: a sentence is not a name", G, mm_tools,
      "a <tool_call>call it</tool_call> b",
      "a <tool_call>call it</tool_call> b", 0, { 0 }, { 0 } },
    { "glm4.5: marker prefixes are content", G, mm_tools,
      "x < y, <tool_c and <tool_call", "x < y, <tool_c and <tool_call", 0,
      { 0 }, { 0 } },
    { "glm4.5: cut off after the name", G, mm_tools,
      "Hm <tool_call>get_weather\n<arg_",
      "Hm <tool_call>get_weather\n<arg_", 0, { 0 }, { 0 } },
    { "glm4.5: broken key, after the name went out", G, mm_tools,
      "<tool_call>get_weather\n<arg_key>city</arg_value>\nPa",
      "<arg_key>city</arg_value>\nPa", 1, { "get_weather" }, { "{}" } },
    { "glm4.5: broken inside a call", G, mm_tools,
      "<tool_call>get_weather\n<arg_key>days</arg_key>\n<arg_value>2"
      "</arg_value>\nthen text",
      "\nthen text", 1, { "get_weather" }, { "{\"days\": 2}" } },
    { "glm4.5: broken second call", G, mm_tools,
      "<tool_call>get_time\n</tool_call>\n<tool_call>\noops",
      "<tool_call>\noops", 1, { "get_time" }, { "{}" } },
    { "glm4.5: cut off in a string value", G, mm_tools,
      "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Par",
      "", 1, { "get_weather" }, { "{\"city\": \"Par\"}" } },
    { "glm4.5: cut off in a number", G, mm_tools,
      "<tool_call>get_weather\n<arg_key>days</arg_key>\n<arg_value>1",
      "", 1, { "get_weather" }, { "{\"days\": 1}" } },
    { "glm4.5: cut off in the head", G, mm_tools,
      "<tool_call>get_time\n</tool_",
      "<tool_call>get_time\n</tool_", 0, { 0 }, { 0 } },
    { "glm4.5: cut off in the closer", G, mm_tools,
      "<tool_call>get_time\n<arg_key>a</arg_key><arg_value>1</arg_value>\n"
      "</tool_",
      "", 1, { "get_time" }, { "{\"a\": 1}" } },
};

/*
 * Random text made of a family's fragments (its markers, names, keys,
 * values, whitespace and stray bytes), 2000 pieces: fed whole and in
 * random chunks it must give the same content and calls, every call's
 * arguments a JSON object (however the text breaks or ends), and the
 * content at most the text's bytes.
 */
static size_t
count_str(const char *s, const char *x)
{
    size_t n = 0;

    for (s = strstr(s, x); s; s = strstr(s + 1, x)) {
        n++;
    }
    return n;
}

static void
test_soup(const char *what, int fmt, const char *tools,
    const char *const *frags, size_t n_frags, const char *opener,
    const char *call_mark)
{
    char       in[1024];
    size_t     cuts[64];
    rec_t     *whole = malloc(sizeof(rec_t)), *r = malloc(sizeof(rec_t));
    llm_rng_t  rng;
    uint32_t   calls = 0, broken = 0, tried = 0;
    case_t     c = { what, fmt, tools, in, "", 0, { 0 }, { 0 } };

    tk_begin("%s", what);
    llm_rng_seed(&rng, 11);
    for (int t = 0; t < 2000; t++) {
        size_t len = 0, nf = 1 + llm_rng_next(&rng) % 24, at, n;

        in[0] = '\0';
        for (size_t k = 0; k < nf; k++) {
            const char *f = frags[llm_rng_next(&rng) % n_frags];

            if (len + strlen(f) < sizeof(in)) {
                memcpy(in + len, f, strlen(f) + 1);
                len += strlen(f);
            }
        }
        if (count_str(in, call_mark) > MAXC) {
            continue;                   /* more calls than rec_t holds */
        }
        tried++;
        if (run(&c, NULL, 0, whole) != 0 || whole->bad) {
            tk_fail("[%s]: whole: deltas out of order", in);
            break;
        }
        for (uint32_t i = 0; i < whole->n; i++) {
            json_t *j = json_loads(whole->calls[i].args, 0, NULL);

            if (!json_is_object(j)) {
                tk_fail("[%s]: call %u arguments are not a JSON object: %s",
                        in, i, whole->calls[i].args);
                json_decref(j);
                goto done;
            }
            json_decref(j);
        }
        if (whole->clen > len) {
            tk_fail("[%s]: more content than text: [%s]", in,
                    whole->content);
            break;
        }
        calls += whole->n;
        broken += whole->clen > 0 && strstr(whole->content, opener) != NULL;
        n = 0;
        at = 0;
        while (n < 64) {
            at += 1 + llm_rng_next(&rng) % 7;
            if (at >= len) {
                break;
            }
            cuts[n++] = at;
        }
        if (run(&c, cuts, n, r) != 0 || r->bad || !same(whole, r)) {
            tk_fail("[%s]: in chunks: content [%s], %u calls; whole: "
                    "[%s], %u calls", in, r->content, r->n, whole->content,
                    whole->n);
            break;
        }
    }
done:
    tk_end_as("%s (%u texts, %u calls, %u with an opener given back as "
              "content)", what, tried, calls, broken);
    free(whole);
    free(r);
}

static const char *const glm_frags[] = {
    "<tool_call>", "</tool_call>", "<arg_key>", "</arg_key>", "<arg_value>",
    "</arg_value>", "get_weather", "get_time", "city", "days", "opts", "x",
    "Paris", "3", "{\"unit\": \"c\"}", "[1", "\"", "\\", "\n", " ", "<",
    "</", ">", "<tool_", "</arg_", "日本",
    /* whole pieces, so that calls form too */
    "<tool_call>get_weather\n", "<arg_key>city</arg_key>\n<arg_value>",
    "<arg_key>days</arg_key><arg_value>", "</arg_value>\n",
    "</tool_call>\n",
};

static const char *const mm_frags[] = {
    "<minimax:tool_call>", "</minimax:tool_call>", "<invoke name=\"",
    "</invoke>", "<parameter name=\"", "</parameter>", "\">", "get_weather",
    "city", "days", "Paris", "3", "{\"unit\": \"c\"}", "[1", "\"", "\\",
    "\n", " ", "<", "</", ">", "日本",
    "<minimax:tool_call>\n<invoke name=\"get_weather\">\n",
    "<parameter name=\"city\">", "<parameter name=\"days\">",
    "</parameter>\n", "</invoke>\n",
};

static const char *const qc_frags[] = {
    "<tool_call>", "</tool_call>", "<function=", "</function>",
    "<parameter=", "</parameter>", ">", "get_weather", "city", "days",
    "Paris", "3", "{\"unit\": \"c\"}", "[1", "\"", "\\", "\n", " ", "<",
    "</", "日本",
    "<tool_call>\n<function=get_weather>\n", "<parameter=city>\n",
    "<parameter=days>\n", "\n</parameter>\n", "</function>\n</tool_call>",
};

/*
 * Round trip through the model's own template: an assistant turn with
 * two calls rendered by the real chat template (what a model trained on
 * it writes), the answer's text from the first opener to the end of the
 * turn (eot, an end token the model writes; NULL: the text's end) parsed
 * back:
 * the same names, and arguments equal as JSON to the ones rendered.
 * Run from the repository root (engine/tests/data/templates).
 */
static const char rt_tools[] =
    "[{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", "
    "\"parameters\": {\"type\": \"object\", \"properties\": {"
    "\"city\": {\"type\": \"string\"}, \"days\": {\"type\": \"integer\"}, "
    "\"opts\": {\"type\": \"object\"}, \"flag\": {\"type\": \"boolean\"}, "
    "\"code\": {\"type\": \"string\"}}}}}, "
    "{\"type\": \"function\", \"function\": {\"name\": \"get_time\", "
    "\"parameters\": {\"type\": \"object\", \"properties\": {}}}}]";

static const char *const rt_args[] = {
    "{\"city\": \"New \\\"York\\\" <b>\\n\", \"days\": 3, \"opts\": "
    "{\"unit\": \"c\", \"n\": [1, 2.5]}, \"flag\": true, \"code\": \"42\"}",
    "{}",
};

static void
test_roundtrip(const char *file, int fmt, const char *opener,
    const char *eot)
{
    char           path[512], err[256], *src = NULL, *text = NULL;
    char          *at;
    size_t         tl;
    long           fl = 0;
    FILE          *fp;
    llm_tmpl_t    *t = NULL;
    json_t        *vars = NULL, *msg, *calls;
    rec_t         *r = calloc(1, sizeof(rec_t));
    case_t         c = { file, fmt, rt_tools, NULL, "", 0, { 0 }, { 0 } };

    tk_begin("%s: template round trip", file);
    snprintf(path, sizeof(path), "engine/tests/data/templates/%s", file);
    fp = fopen(path, "rb");
    if (fp == NULL || fseek(fp, 0, SEEK_END) != 0 || (fl = ftell(fp)) <= 0
        || fseek(fp, 0, SEEK_SET) != 0 || (src = malloc((size_t) fl)) == NULL
        || fread(src, 1, (size_t) fl, fp) != (size_t) fl
        || llm_tmpl_compile(&t, src, (size_t) fl, err, sizeof(err)) != 0)
    {
        tk_fail("cannot read or compile %s (run from the repository root)",
                path);
        goto done;
    }
    calls = json_array();
    for (size_t i = 0; i < 2; i++) {
        json_array_append_new(calls, json_pack("{s:s, s:s, s:{s:s, s:o}}",
            "id", i ? "call_2" : "call_1", "type", "function", "function",
            "name", i ? "get_time" : "get_weather", "arguments",
            json_loads(rt_args[i], 0, NULL)));
    }
    msg = json_pack("{s:s, s:s, s:o}", "role", "assistant", "content", "",
                    "tool_calls", calls);
    vars = json_pack("{s:[{s:s, s:s}, o], s:o, s:b, s:s, s:s}", "messages",
                     "role", "user", "content", "Weather?", msg, "tools",
                     json_loads(rt_tools, 0, NULL), "add_generation_prompt",
                     0, "bos_token", "", "eos_token", "");
    if (vars == NULL
        || llm_tmpl_render(t, vars, &text, &tl, err, sizeof(err)) != 0)
    {
        tk_fail("render: %s", vars ? err : "out of memory");
        goto done;
    }
    /* the answer: from the last message's first opener on */
    at = strstr(strstr(text, "Weather?"), opener);
    if (at == NULL) {
        tk_fail("no %s in the rendered answer: %s", opener, text);
        goto done;
    }
    if (eot && strstr(at, eot)) {
        *strstr(at, eot) = '\0';
    }
    c.in = at;
    if (run(&c, NULL, 0, r) != 0 || r->bad || r->n != 2) {
        tk_fail("parsed %u calls from [%s]", r->n, at);
        goto done;
    }
    for (uint32_t i = 0; i < 2; i++) {
        json_t *want = json_loads(rt_args[i], 0, NULL);
        json_t *got = json_loads(r->calls[i].args, 0, NULL);
        int     ok = got && json_equal(want, got)
                     && strcmp(r->calls[i].name, i ? "get_time"
                                                   : "get_weather") == 0;

        json_decref(want);
        json_decref(got);
        if (!ok) {
            tk_fail("call %u: %s %s from [%s]", i, r->calls[i].name,
                    r->calls[i].args, at);
            goto done;
        }
    }
    for (size_t i = 0; i < r->clen; i++) {
        if (!isspace((unsigned char) r->content[i])) {
            tk_fail("content beside the calls: [%s]", r->content);
            goto done;
        }
    }
done:
    if (fp) {
        fclose(fp);
    }
    json_decref(vars);
    llm_tmpl_free(t);
    free(text);
    free(src);
    free(r);
}

static void
test_names(void)
{
    if (llm_toolfmt_from_name("hermes") != LLM_TOOLFMT_HERMES
        || llm_toolfmt_from_name("deepseek-v3") != LLM_TOOLFMT_DEEPSEEK_V3
        || llm_toolfmt_from_name("none") != LLM_TOOLFMT_NONE
        || llm_toolfmt_from_name("glm4.5") != LLM_TOOLFMT_GLM45
        || strcmp(llm_toolfmt_name(LLM_TOOLFMT_GLM45), "glm4.5")
        || strstr(llm_toolfmt_names(), "glm4.5") == NULL
        || llm_toolfmt_from_name("xml") != -1
        || strcmp(llm_toolfmt_name(LLM_TOOLFMT_MINIMAX_M2), "minimax-m2"))
    {
        tk_fail("names and formats do not map both ways");
    }
}

int
main(void)
{
    tk_begin("names");
    test_names();
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        check(&cases[i]);
    }
    test_roundtrip("GLM-4.6.jinja", G, "<tool_call>", NULL);
    test_roundtrip("GLM-4.7-Flash.jinja", G, "<tool_call>", NULL);
    test_roundtrip("MiniMax-M2.jinja", M, "<minimax:tool_call>", "[e~[");
    test_roundtrip("Qwen-Qwen3-0.6B.jinja", H, "<tool_call>", "<|im_end|>");
    test_roundtrip("Qwen3.5-4B.jinja", Q, "<tool_call>", "<|im_end|>");
    test_roundtrip("Qwen3-Coder.jinja", Q, "<tool_call>", "<|im_end|>");
    test_soup("qwen3-coder: random fragments", Q, mm_tools, qc_frags,
              sizeof(qc_frags) / sizeof(qc_frags[0]), "<tool_call>",
              "<function=");
    test_soup("glm4.5: random fragments", G, mm_tools, glm_frags,
              sizeof(glm_frags) / sizeof(glm_frags[0]), "<tool_call>",
              "<tool_call>");
    test_soup("minimax-m2: random fragments", M, mm_tools, mm_frags,
              sizeof(mm_frags) / sizeof(mm_frags[0]), "<minimax:tool_call>",
              "<invoke name=\"");
    return tk_done();
}
