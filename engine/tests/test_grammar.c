/*
 * Constrained decoding checks: accept/reject tables over many schemas,
 * compile errors naming the keyword and its pointer, random walks (bytes
 * and tokens) that always end in text jansson parses, and the token mask
 * (trie walk and string fast path) against a brute-force check of every
 * token on a real vocabulary.
 */

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/gguf.h"
#include "decode/grammar.h"
#include "decode/hooks.h"
#include "decode/sample.h"
#include "text/tokenizer.h"
#include "testkit.h"


#define ACC  1      /* accepted, complete */
#define PRE  2      /* accepted, incomplete */
#define REJ  0      /* some byte rejected */

static llm_grammar_t *
compile(const char *schema, unsigned flags)
{
    llm_grammar_t  *g;
    json_t         *j = NULL;
    json_error_t    je;
    char            err[512] = "";

    if (schema != NULL) {
        j = json_loads(schema, 0, &je);
        if (j == NULL) {
            CHECK(0, "bad test schema %s: %s", schema, je.text);
            return NULL;
        }
    }
    if (llm_grammar_compile(&g, j, flags, err, sizeof(err)) != 0) {
        CHECK(0, "compile %s: %s", schema, err);
        g = NULL;
    }
    json_decref(j);
    return g;
}

static int
run(llm_grammar_t *g, const char *text)
{
    llm_gstate_t  *st;
    int            r;
    size_t         i;

    if (llm_gstate_create(&st, g) != 0) {
        return -1;
    }
    /* byte by byte, so every intermediate state is exercised */
    for (i = 0; text[i]; i++) {
        if (llm_gstate_feed(st, &text[i], 1) != 0) {
            llm_gstate_free(st);
            return REJ;
        }
    }
    r = llm_gstate_complete(st) ? ACC : PRE;
    llm_gstate_free(st);
    return r;
}

typedef struct {
    const char  *text;
    int          want;
} tcase_t;

static void
table(const char *schema, unsigned flags, const tcase_t *tc)
{
    llm_grammar_t *g = compile(schema, flags);

    if (g == NULL) {
        return;
    }
    for (; tc->text; tc++) {
        int got = run(g, tc->text);

        CHECK(got == tc->want, "schema %s text '%s': got %d want %d",
              schema ? schema : "(json_object)", tc->text, got, tc->want);
    }
    llm_grammar_free(g);
}

static void
test_tables(void)
{
    static const tcase_t obj[] = {
        { "{}", ACC }, { " {}", ACC }, { "{} ", ACC }, { "{}\n\n", ACC },
        { "{}   ", REJ }, { "   {}", REJ },
        { "{\"a\":1}", ACC }, { "{ \"a\" : 1 , \"b\" : [1, 2.5e3, -0] }",
          ACC },
        { "{\"a\":{\"b\":{\"c\":[null,true,false,\"x\"]}}}", ACC },
        { "{\"a\":1,}", REJ }, { "{,}", REJ }, { "{\"a\"}", REJ },
        { "{\"a\":01}", REJ }, { "{\"a\":1.}", REJ }, { "{\"a\":.5}", REJ },
        { "{\"a\":1e}", REJ }, { "{\"a\":-}", REJ }, { "{\"a\":+1}", REJ },
        { "{\"a\":1.5E+10}", ACC }, { "{\"a\":tru}", REJ },
        { "{\"a\":nul", PRE }, { "{\"a\":\"x", PRE }, { "{", PRE },
        { "[]", REJ }, { "1", REJ }, { "\"s\"", REJ }, { "null", REJ },
        { "{\"a\":\"\\n\\t\\\"\\\\\\/\\u00e9\"}", ACC },
        { "{\"a\":\"\\x\"}", REJ }, { "{\"a\":\"\\u12\"}", REJ },
        { "{\"a\":\"\\ud800\"}", REJ }, { "{\"a\":\"\\u0000\"}", REJ },
        { "{\"a\":\"\\u0001\"}", ACC },
        { "{\"a\":\"tab\there\"}", REJ }, { "{\"a\":\"nl\nx\"}", REJ },
        { "{\"a\":\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\"}", ACC },
        { "{\"a\":\"\xc3\"}", REJ }, { "{\"a\":\"\xc0\xaf\"}", REJ },
        { "{\"a\":\"\xed\xa0\x80\"}", REJ }, { "{\"a\":\"\xff\"}", REJ },
        { "{\"\xc3\xa9\":1}", ACC }, { "{\"a\\u0062\":1}", REJ },
        { "{\"a\":1}x", REJ }, { "{}{}", REJ },
        { "{\"a\":1234567890123456789}", REJ },
        { "{\"a\":123456789012345678}", ACC },
        { "{\"a\":1e100}", REJ }, { "{\"a\":1e99}", ACC },
        { "{\"a\":\t1}", ACC }, { "{\"a\":\r1}", REJ },
        { "{\"a\":   1}", REJ },
        { NULL, 0 }
    };
    static const tcase_t person[] = {
        { "{\"name\":\"x\",\"age\":3}", ACC },
        { "{\"age\":3,\"name\":\"x\"}", ACC },
        { "{\"name\":\"x\"}", ACC },
        { "{\"age\":3}", REJ },
        { "{\"name\":\"x\",\"age\":3.5}", REJ },
        { "{\"name\":\"x\",\"age\":-3}", ACC },
        { "{\"name\":\"x\",\"age\":3e2}", REJ },
        { "{\"name\":1}", REJ },
        { "{\"name\":\"x\",\"extra\":1}", REJ },
        { "{\"name\":\"x\",\"name\":\"y\"}", REJ },
        { "{\"nam\":\"x\"}", REJ },
        { "{\"names\":\"x\"}", REJ },
        { "{\"name\":\"x\",}", REJ },
        { "{\"name\":\"x\",\"age\":3,", PRE },
        { "{\"name\":null}", REJ },
        { "{\"name\":\"x\",\"tags\":[]}", REJ },
        { "{\"name\":\"x\",\"tags\":[\"a\"]}", ACC },
        { "{\"name\":\"x\",\"tags\":[\"a\",\"b\",\"c\"]}", ACC },
        { "{\"name\":\"x\",\"tags\":[\"a\",\"b\",\"c\",\"d\"]}", REJ },
        { "{\"name\":\"x\",\"tags\":[1]}", REJ },
        { "{\"name\":\"x\",\"nick\":null}", ACC },
        { "{\"name\":\"x\",\"nick\":\"n\"}", ACC },
        { "{\"name\":\"x\",\"nick\":1}", REJ },
        { NULL, 0 }
    };
    static const tcase_t prefix_keys[] = {
        { "{\"a\":1}", ACC }, { "{\"ab\":1}", ACC }, { "{\"abc\":1}", ACC },
        { "{\"a\":1,\"ab\":2,\"abc\":3}", ACC },
        { "{\"abc\":1,\"a\":2}", ACC }, { "{\"abcd\":1}", REJ },
        { "{\"ab\":1,\"ab\":1}", REJ },
        { NULL, 0 }
    };
    static const tcase_t ordered[] = {
        { "{\"name\":\"f\",\"arguments\":{}}", ACC },
        { "{\"arguments\":{},\"name\":\"f\"}", REJ },
        { "{\"name\":\"f\"}", REJ },
        { NULL, 0 }
    };
    static const tcase_t enums[] = {
        { "{\"c\":\"red\"}", ACC }, { "{\"c\":\"green\"}", ACC },
        { "{\"c\":\"gre\"}", REJ }, { "{\"c\":\"blue\"}", REJ },
        { "{\"c\":1}", ACC }, { "{\"c\":12}", ACC }, { "{\"c\":2}", REJ },
        { "{\"c\":null}", ACC }, { "{\"c\":[1,{\"x\":true}]}", ACC },
        { "{\"c\":[1, {\"x\":true}]}", REJ }, { "{\"c\":\"r\\u0065d\"}", REJ },
        { "{\"k\":\"v\"}", ACC }, { "{\"k\":\"w\"}", REJ },
        { NULL, 0 }
    };
    static const tcase_t anyof[] = {
        { "{\"v\":{\"kind\":\"a\",\"x\":1}}", ACC },
        { "{\"v\":{\"kind\":\"b\",\"y\":\"s\"}}", ACC },
        { "{\"v\":{\"kind\":\"a\",\"y\":\"s\"}}", REJ },
        { "{\"v\":{\"kind\":\"b\",\"x\":1}}", REJ },
        { "{\"v\":\"str\"}", ACC }, { "{\"v\":3}", ACC },
        { "{\"v\":3.5}", REJ }, { "{\"v\":[1,2]}", ACC },
        { "{\"v\":[1,\"a\"]}", ACC }, { "{\"v\":[\"a\", 1]}", ACC },
        { "{\"v\":true}", REJ },
        { NULL, 0 }
    };
    static const tcase_t refs[] = {
        { "{\"name\":\"n\",\"children\":[]}", ACC },
        { "{\"name\":\"n\",\"children\":[{\"name\":\"m\",\"children\":"
          "[{\"name\":\"o\",\"children\":[]}]}]}", ACC },
        { "{\"name\":\"n\",\"children\":[{\"name\":1,\"children\":[]}]}",
          REJ },
        { "{\"name\":\"n\",\"children\":[],\"p\":{\"x\":1,\"y\":2}}", ACC },
        { "{\"name\":\"n\",\"children\":[],\"p\":{\"x\":1}}", REJ },
        { NULL, 0 }
    };
    static const tcase_t scalars[] = {
        { "1", ACC }, { "-0", ACC }, { "12", ACC }, { "1 ", ACC },
        { "\"1\"", REJ }, { "1.5", ACC }, { "null", ACC }, { "nul", PRE },
        { "{}", REJ },
        { NULL, 0 }
    };
    static const tcase_t free_extra[] = {
        { "{\"a\":1}", ACC }, { "{\"a\":1,\"b\":\"x\"}", ACC },
        { "{\"a\":\"x\"}", REJ }, { "{\"b\":2}", REJ },
        { "{\"b\":\"x\",\"a\":2,\"c\":\"y\"}", ACC },
        { "{\"ab\":\"x\",\"a\":2}", ACC }, { "{\"ab\":2,\"a\":2}", REJ },
        { NULL, 0 }
    };
    static const tcase_t minmax[] = {
        { "[[1],[1,2]]", ACC }, { "[[1]]", REJ }, { "[[1],[1],[1]]", REJ },
        { "[[],[1]]", REJ }, { "[[1],[1,2,3]]", REJ }, { "[ [1] , [2] ]",
          ACC },
        { NULL, 0 }
    };

    table(NULL, 0, obj);
    table("{\"type\":\"object\",\"properties\":{"
          "\"name\":{\"type\":\"string\",\"description\":\"d\"},"
          "\"age\":{\"type\":\"integer\"},"
          "\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\"},"
          "\"minItems\":1,\"maxItems\":3},"
          "\"nick\":{\"type\":[\"string\",\"null\"]}},"
          "\"required\":[\"name\"],\"additionalProperties\":false}",
          0, person);
    table("{\"properties\":{\"a\":{},\"ab\":{},\"abc\":{}},"
          "\"additionalProperties\":false}", 0, prefix_keys);
    table("{\"type\":\"object\",\"properties\":{\"name\":{\"const\":\"f\"},"
          "\"arguments\":{\"type\":\"object\"}},"
          "\"required\":[\"name\",\"arguments\"]}",
          LLM_GRAMMAR_STRICT | LLM_GRAMMAR_ORDERED, ordered);
    table("{\"type\":\"object\",\"properties\":{"
          "\"c\":{\"enum\":[\"red\",\"green\",1,12,null,[1,{\"x\":true}]]},"
          "\"k\":{\"const\":\"v\"}},\"additionalProperties\":false}",
          0, enums);
    table("{\"type\":\"object\",\"properties\":{\"v\":{\"anyOf\":["
          "{\"type\":\"object\",\"properties\":{\"kind\":{\"const\":\"a\"},"
          "\"x\":{\"type\":\"integer\"}},\"required\":[\"kind\",\"x\"],"
          "\"additionalProperties\":false},"
          "{\"type\":\"object\",\"properties\":{\"kind\":{\"const\":\"b\"},"
          "\"y\":{\"type\":\"string\"}},\"required\":[\"kind\",\"y\"],"
          "\"additionalProperties\":false},"
          "{\"type\":\"string\"},{\"type\":\"integer\"},"
          "{\"type\":\"array\",\"items\":{\"type\":\"integer\"}},"
          "{\"type\":\"array\",\"items\":{\"oneOf\":[{\"type\":\"string\"},"
          "{\"type\":\"integer\"}]}}]}},"
          "\"required\":[\"v\"],\"additionalProperties\":false}", 0, anyof);
    table("{\"$ref\":\"#/$defs/node\",\"$defs\":{\"node\":{\"type\":"
          "\"object\",\"properties\":{\"name\":{\"type\":\"string\"},"
          "\"children\":{\"type\":\"array\",\"items\":{\"$ref\":"
          "\"#/$defs/node\"}},\"p\":{\"$ref\":\"#/definitions/pt\"}},"
          "\"required\":[\"name\",\"children\"]}},"
          "\"definitions\":{\"pt\":{\"type\":\"object\",\"properties\":"
          "{\"x\":{\"type\":\"number\"},\"y\":{\"type\":\"number\"}},"
          "\"required\":[\"x\",\"y\"],\"additionalProperties\":false}}}",
          LLM_GRAMMAR_STRICT, refs);
    table("{\"type\":[\"number\",\"null\"]}", 0, scalars);
    table("{\"properties\":{\"a\":{\"type\":\"integer\"}},\"required\":"
          "[\"a\"],\"additionalProperties\":{\"type\":\"string\"}}", 0,
          free_extra);
    table("{\"type\":\"array\",\"minItems\":2,\"maxItems\":2,\"items\":"
          "{\"type\":\"array\",\"items\":{\"type\":\"integer\"},"
          "\"minItems\":1,\"maxItems\":2}}", 0, minmax);
    tk_end_as("tables");
}

static void
expect_error(const char *schema, const char *want)
{
    llm_grammar_t  *g = NULL;
    json_t         *j;
    json_error_t    je;
    char            err[512] = "";
    int             rc;

    j = json_loads(schema, 0, &je);
    CHECK(j != NULL, "bad test schema %s", schema);
    rc = llm_grammar_compile(&g, j, 0, err, sizeof(err));
    CHECK(rc < 0 && strstr(err, want) != NULL,
          "schema %s: rc %d err '%s', want '%s'", schema, rc, err, want);
    llm_grammar_free(g);
    json_decref(j);
}

static void
test_errors(void)
{
    char   big[80000];
    size_t n = 0;

    expect_error("{\"type\":\"object\",\"properties\":{\"zip\":{\"type\":"
                 "\"string\",\"pattern\":\"^[0-9]+$\"}}}",
                 "unsupported JSON schema keyword 'pattern' at "
                 "/properties/zip");
    expect_error("{\"type\":\"string\",\"format\":\"date\"}",
                 "unsupported JSON schema keyword 'format' at the root");
    expect_error("{\"type\":\"array\",\"items\":{\"type\":\"integer\","
                 "\"minimum\":0}}",
                 "unsupported JSON schema keyword 'minimum' at /items");
    expect_error("{\"anyOf\":[{\"type\":\"string\",\"minLength\":1}]}",
                 "unsupported JSON schema keyword 'minLength' at /anyOf/0");
    expect_error("{\"properties\":{\"a/b\":{\"maxLength\":3}}}",
                 "'maxLength' at /properties/a~1b");
    expect_error("{\"$ref\":\"#/$defs/x\",\"$defs\":{\"x\":"
                 "{\"not\":{}}}}", "'not' at /$defs/x");
    expect_error("{\"type\":\"strnig\"}", "unknown type 'strnig'");
    expect_error("{\"enum\":[]}", "'enum' must be a non-empty list");
    expect_error("{\"type\":\"string\",\"enum\":[1,2]}",
                 "no value of 'enum' matches 'type'");
    expect_error("{\"anyOf\":[]}", "'anyOf' must be a non-empty list");
    {
        /* more branches than the automaton follows at once: an error, not
         * a schema silently narrowed to its first 16 branches */
        char   many[1024];
        size_t k = 0;
        int    i;

        k += (size_t) snprintf(many + k, sizeof(many) - k, "{\"anyOf\":[");
        for (i = 0; i < LLM_GRAMMAR_MAX_THREADS + 1; i++) {
            k += (size_t) snprintf(many + k, sizeof(many) - k,
                                   "%s{\"const\":%d}", i ? "," : "", i);
        }
        snprintf(many + k, sizeof(many) - k, "]}");
        expect_error(many, "'anyOf' has 17 schemas, at most 16 are supported");
    }
    expect_error("{\"anyOf\":[{}],\"type\":\"object\"}",
                 "'anyOf' cannot be combined with 'type'");
    expect_error("{\"$ref\":\"#/$defs/nope\"}", "does not resolve");
    expect_error("{\"$ref\":\"http://x/y\"}", "only local $ref");
    expect_error("{\"minItems\":3,\"maxItems\":2}",
                 "'minItems' is greater than 'maxItems'");
    expect_error("{\"required\":[\"a\"]}",
                 "required property 'a' is not in 'properties'");
    expect_error("{\"items\":[{}]}", "'items' as a list");
    expect_error("{\"properties\":{\"a\\\"b\":{}}}", "needs JSON escapes");
    expect_error("{\"enum\":[1],\"properties\":{}}",
                 "'enum' cannot be combined with 'properties'");

    /* too large: 64 objects of 64 properties, 4161 nodes */
    n += (size_t) snprintf(big + n, sizeof(big) - n, "{\"properties\":{");
    for (int i = 0; i < 64; i++) {
        n += (size_t) snprintf(big + n, sizeof(big) - n,
                               "%s\"o%d\":{\"properties\":{", i ? "," : "",
                               i);
        for (int j = 0; j < 64; j++) {
            n += (size_t) snprintf(big + n, sizeof(big) - n, "%s\"p%d\":{}",
                                   j ? "," : "", j);
        }
        n += (size_t) snprintf(big + n, sizeof(big) - n, "}}");
    }
    snprintf(big + n, sizeof(big) - n, "}}");
    expect_error(big, "JSON schema too large");
    /* too deep */
    n = 0;
    for (int i = 0; i < 100; i++) {
        n += (size_t) snprintf(big + n, sizeof(big) - n, "{\"items\":");
    }
    n += (size_t) snprintf(big + n, sizeof(big) - n, "{}");
    for (int i = 0; i < 100; i++) {
        n += (size_t) snprintf(big + n, sizeof(big) - n, "}");
    }
    expect_error(big, "nested too deeply");
    tk_end_as("errors");
}

static void
test_response_format(void)
{
    llm_grammar_t  *g;
    char            err[512];
    const char     *s;

    s = "{\"type\":\"text\"}";
    CHECK(llm_grammar_from_response_format(&g, s, strlen(s), err,
                                           sizeof(err)) == 0 && g == NULL,
          "text");
    s = "{\"type\":\"json_object\"}";
    CHECK(llm_grammar_from_response_format(&g, s, strlen(s), err,
                                           sizeof(err)) == 0 && g != NULL,
          "json_object");
    CHECK(g && run(g, "{\"x\":[1]}") == ACC, "json_object run");
    llm_grammar_free(g);
    s = "{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"n\","
        "\"strict\":true,\"schema\":{\"type\":\"object\",\"properties\":"
        "{\"a\":{\"type\":\"integer\"}},\"required\":[\"a\"]}}}";
    CHECK(llm_grammar_from_response_format(&g, s, strlen(s), err,
                                           sizeof(err)) == 0 && g != NULL,
          "json_schema: %s", err);
    /* strict: absent additionalProperties is false */
    CHECK(g && run(g, "{\"a\":1,\"b\":2}") == REJ, "strict extra key");
    CHECK(g && run(g, "{\"a\":1}") == ACC, "strict");
    llm_grammar_free(g);
    s = "{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"n\","
        "\"schema\":{\"type\":\"string\",\"pattern\":\"a\"}}}";
    CHECK(llm_grammar_from_response_format(&g, s, strlen(s), err,
                                           sizeof(err)) == -EINVAL
          && strcmp(err, "response_format.json_schema.schema: unsupported "
                    "JSON schema keyword 'pattern' at the root") == 0,
          "error text: %s", err);
    tk_end_as("response_format");
}


/* Random walks. */

static uint64_t
rnd(llm_rng_t *r, uint64_t n)
{
    return llm_rng_next(r) % n;
}

/* Feed bytes that steer toward the end of the value; 0 when complete. */
static int
finish(llm_gstate_t *st, char *buf, size_t *n, size_t cap)
{
    static const char  pref[] = "\"}]0,:";
    uint8_t            next[256];
    size_t             k, i, steps;
    char               c;

    for (steps = 0; steps < 4000 && !llm_gstate_complete(st); steps++) {
        k = llm_gstate_next_bytes(st, next, sizeof(next));
        if (k == 0 || *n + 1 >= cap) {
            return -1;
        }
        c = (char) next[0];
        for (i = 0; pref[i]; i++) {
            if (memchr(next, pref[i], k) != NULL) {
                c = pref[i];
                break;
            }
        }
        if (llm_gstate_feed(st, &c, 1) != 0) {
            return -1;
        }
        buf[(*n)++] = c;
    }
    return llm_gstate_complete(st) ? 0 : -1;
}

static const char *walk_schemas[] = {
    NULL,
    "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},"
    "\"age\":{\"type\":\"integer\"},\"score\":{\"type\":\"number\"},"
    "\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\"},"
    "\"minItems\":1,\"maxItems\":3},\"nick\":{\"type\":[\"string\","
    "\"null\"]},\"ok\":{\"type\":\"boolean\"}},"
    "\"required\":[\"name\",\"age\",\"tags\"],"
    "\"additionalProperties\":false}",
    "{\"type\":\"object\",\"properties\":{\"v\":{\"anyOf\":["
    "{\"type\":\"object\",\"properties\":{\"kind\":{\"const\":\"a\"},"
    "\"x\":{\"type\":\"integer\"}},\"required\":[\"kind\",\"x\"],"
    "\"additionalProperties\":false},"
    "{\"type\":\"object\",\"properties\":{\"kind\":{\"const\":\"b\"},"
    "\"y\":{\"enum\":[\"p\",\"q\",3]}},\"required\":[\"kind\",\"y\"],"
    "\"additionalProperties\":false},{\"type\":\"null\"}]}},"
    "\"required\":[\"v\"],\"additionalProperties\":false}",
    "{\"$ref\":\"#/$defs/node\",\"$defs\":{\"node\":{\"type\":"
    "\"object\",\"properties\":{\"name\":{\"type\":\"string\"},"
    "\"children\":{\"type\":\"array\",\"maxItems\":2,\"items\":{\"$ref\":"
    "\"#/$defs/node\"}}},\"required\":[\"name\"],"
    "\"additionalProperties\":false}}}",
    "{\"type\":\"array\",\"items\":{\"type\":[\"number\",\"string\","
    "\"boolean\",\"null\"]},\"minItems\":2}",
};

static void
check_parses(const char *schema, const char *text, size_t n)
{
    json_error_t   je;
    json_t        *j = json_loadb(text, n, JSON_DECODE_ANY, &je);

    CHECK(j != NULL, "schema %s: walk output does not parse: %s: %.*s",
          schema ? schema : "(json_object)", je.text, (int) n, text);
    json_decref(j);
}

static void
test_byte_walks(void)
{
    llm_rng_t  r;
    uint8_t    next[256];
    char       buf[8192];
    size_t     n, k, len;

    llm_rng_seed(&r, 42);
    for (size_t s = 0; s < sizeof(walk_schemas) / sizeof(walk_schemas[0]);
         s++)
    {
        llm_grammar_t *g = compile(walk_schemas[s], 0);
        llm_gstate_t  *st;

        if (g == NULL || llm_gstate_create(&st, g) != 0) {
            llm_grammar_free(g);
            continue;
        }
        for (int w = 0; w < 300; w++) {
            llm_gstate_reset(st);
            n = 0;
            len = rnd(&r, 200);
            for (size_t i = 0; i < len; i++) {
                k = llm_gstate_next_bytes(st, next, sizeof(next));
                if (k == 0) {
                    break;
                }
                buf[n] = (char) next[rnd(&r, k)];
                CHECK(llm_gstate_feed(st, &buf[n], 1) == 0, "feed allowed");
                n++;
            }
            CHECK(finish(st, buf, &n, sizeof(buf)) == 0,
                  "walk %d of schema %zu does not finish: %.*s", w, s,
                  (int) n, buf);
            check_parses(walk_schemas[s], buf, n);
        }
        llm_gstate_free(st);
        llm_grammar_free(g);
    }
    tk_end_as("byte walks");
}


/* The token index on a real vocabulary. */

static llm_vocab_t *
load_vocab(const char *name, llm_gguf_t **gg)
{
    static const char *dirs[] = { "engine/tests/data/vocab",
                                  "tests/data/vocab" };
    llm_vocab_t  *v;
    char          path[512], err[512];

    for (size_t i = 0; i < 2; i++) {
        snprintf(path, sizeof(path), "%s/%s.gguf", dirs[i], name);
        if (access(path, R_OK) != 0) {
            continue;
        }
        if (llm_gguf_open(gg, path, err, sizeof(err)) < 0
            || llm_vocab_load(&v, *gg, err, sizeof(err)) < 0)
        {
            CHECK(0, "%s: %s", path, err);
            return NULL;
        }
        return v;
    }
    CHECK(0, "vocabulary %s not found", name);
    return NULL;
}

/* The mask against feeding every token's bytes to a copy of the state. */
static void
check_mask(const llm_vocab_t *v, llm_tokindex_t *ti, llm_gstate_t *st,
    llm_gstate_t *tmp, float *row, uint32_t nv)
{
    const char  *p;
    size_t       len;
    int          n, slow = 0, bad = 0;
    int          complete = llm_gstate_complete(st);

    for (uint32_t i = 0; i < nv; i++) {
        row[i] = 0.0f;
    }
    n = llm_tokindex_mask(ti, st, LLM_GMASK_EOG, row, nv);
    for (uint32_t id = 0; id < nv; id++) {
        int ok;

        if (llm_vocab_is_eog(v, (int32_t) id)) {
            ok = complete;
        } else if (llm_vocab_is_control(v, (int32_t) id)
                   || llm_vocab_token_type(v, (int32_t) id) == 2
                   || llm_vocab_token_type(v, (int32_t) id) == 5)
        {
            ok = 0;
        } else {
            p = llm_token_bytes(v, (int32_t) id, 0, &len);
            llm_gstate_copy(tmp, st);
            ok = len > 0 && llm_gstate_feed(tmp, p, len) == 0;
        }
        slow += ok;
        if (ok != (row[id] == 0.0f) && bad++ < 3) {
            p = llm_token_bytes(v, (int32_t) id, 0, &len);
            CHECK(0, "token %u '%.*s': mask %s, feed %s", id, (int) len, p,
                  row[id] == 0.0f ? "allows" : "forbids",
                  ok ? "accepts" : "rejects");
        }
    }
    CHECK(n == slow, "mask count %d, brute force %d", n, slow);
}

static void
test_token_walks(const char *vocab)
{
    llm_gguf_t      *gg = NULL;
    llm_vocab_t     *v;
    llm_tokindex_t  *ti;
    llm_rng_t        r;
    float           *row;
    char             err[256], buf[16384];
    uint32_t         nv;
    size_t           n, len;
    int              masks = 0;

    v = load_vocab(vocab, &gg);
    if (v == NULL) {
        return;
    }
    if (llm_tokindex_create(&ti, v, err, sizeof(err)) != 0) {
        CHECK(0, "tokindex: %s", err);
        return;
    }
    nv = llm_vocab_n_tokens(v);
    row = malloc(nv * sizeof(float));
    llm_rng_seed(&r, 7);
    for (size_t s = 0; s < sizeof(walk_schemas) / sizeof(walk_schemas[0]);
         s++)
    {
        llm_grammar_t *g = compile(walk_schemas[s], 0);
        llm_gstate_t  *st, *tmp;

        if (g == NULL) {
            continue;
        }
        llm_gstate_create(&st, g);
        llm_gstate_create(&tmp, g);
        for (int w = 0; w < 12; w++) {
            int steps = (int) rnd(&r, 60);

            llm_gstate_reset(st);
            n = 0;
            for (int i = 0; i < steps; i++) {
                uint32_t  pick, k = 0;
                int       allowed;
                int32_t   tok = -1;
                const char *p;

                if (masks < 120 && (w < 3 || i % 7 == 0)) {
                    check_mask(v, ti, st, tmp, row, nv);
                    masks++;
                }
                for (uint32_t id = 0; id < nv; id++) {
                    row[id] = 0.0f;
                }
                allowed = llm_tokindex_mask(ti, st, LLM_GMASK_EOG, row, nv);
                CHECK(allowed > 0, "dead end after '%.*s'", (int) n, buf);
                if (allowed <= 0) {
                    break;
                }
                pick = (uint32_t) rnd(&r, (uint64_t) allowed);
                for (uint32_t id = 0; id < nv; id++) {
                    if (row[id] == 0.0f && k++ == pick) {
                        tok = (int32_t) id;
                        break;
                    }
                }
                CHECK(llm_tokindex_accept(ti, st, tok) == 0,
                      "accept allowed token %d", tok);
                if (llm_gstate_finished(st)) {
                    break;
                }
                p = llm_token_bytes(v, tok, 0, &len);
                if (n + len < sizeof(buf) / 2) {
                    memcpy(buf + n, p, len);
                    n += len;
                }
            }
            if (!llm_gstate_finished(st)) {
                CHECK(finish(st, buf, &n, sizeof(buf)) == 0,
                      "token walk does not finish: %.*s", (int) n, buf);
            }
            check_parses(walk_schemas[s], buf, n);
            /* once complete, an EOG token finishes; then only EOG */
            if (!llm_gstate_finished(st)) {
                CHECK(llm_tokindex_accept(ti, st, llm_vocab_eos(v)) == 0,
                      "eos after a complete value");
            }
            CHECK(llm_gstate_finished(st), "finished");
            for (uint32_t id = 0; id < nv; id++) {
                row[id] = 0.0f;
            }
            CHECK(llm_tokindex_mask(ti, st, LLM_GMASK_EOG, row, nv) >= 1
                  && row[llm_vocab_eos(v)] == 0.0f && row['{'] == -INFINITY,
                  "finished mask");
        }
        /* EOG is forbidden before the value is complete */
        llm_gstate_reset(st);
        CHECK(llm_tokindex_accept(ti, st, llm_vocab_eos(v)) == -EILSEQ,
              "eos at the start");
        llm_gstate_free(st);
        llm_gstate_free(tmp);
        llm_grammar_free(g);
    }
    tk_end_as("token walks (%s, %u tokens, %d masks checked)", vocab, nv,
              masks);
    free(row);
    llm_tokindex_free(ti);
    llm_vocab_free(v);
    llm_gguf_close(gg);
}

/* What the hooks read of a request, as JSON text. */
typedef struct {
    const char  *response_format_json;
} hreq_t;

/* llm_hooks_make() on g decoded as the engine decodes it. */
static int
hooks_make(llm_hooks_ctx_t *ctx, const hreq_t *g, uint32_t choice,
    llm_seq_hooks_t *h, char *err, size_t errlen)
{
    llm_request_t  rq;
    int            rc;

    llm_request_init(&rq);
    if (llm_request_set_response_format(&rq, g->response_format_json) != 0) {
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    rc = llm_hooks_make(ctx, &rq, choice, h, err, errlen);
    llm_request_free(&rq);
    return rc;
}

/* hooks.c: what response_format installs, and the mask through it. */
static void
test_hooks(void)
{
    hreq_t                g = { 0 };
    llm_hooks_ctx_t       ctx;
    llm_seq_hooks_t       h;
    llm_gguf_t           *gg = NULL;
    llm_vocab_t          *v;
    char                  err[512] = "";
    float                *row;
    uint32_t              nv, id;
    int32_t               open = -1, close = -1;
    int                   rc;

    v = load_vocab("gpt-2", &gg);
    if (v == NULL) {
        return;
    }
    nv = llm_vocab_n_tokens(v);
    rc = llm_hooks_ctx_init(&ctx, v, nv, NULL, err, sizeof(err));
    CHECK(rc == 0, "hooks ctx: %s", err);
    if (rc != 0) {
        return;
    }
    row = malloc(nv * sizeof(float));

    g.response_format_json = "";
    CHECK(hooks_make(&ctx, &g, 0, &h, err, sizeof(err)) == 0
          && h.mask == NULL && h.accept == NULL, "no response_format");
    g.response_format_json = "{\"type\":\"text\"}";
    CHECK(hooks_make(&ctx, &g, 0, &h, err, sizeof(err)) == 0
          && h.mask == NULL, "text");
    g.response_format_json = "{\"type\":\"json_schema\",\"json_schema\":"
        "{\"name\":\"x\",\"schema\":{\"type\":\"object\","
        "\"properties\":{\"a\":{\"minimum\":1}}}}}";
    err[0] = '\0';
    CHECK(hooks_make(&ctx, &g, 0, &h, err, sizeof(err)) == -EINVAL
          && strstr(err, "'minimum' at /properties/a") != NULL,
          "bad schema: %s", err);

    g.response_format_json = "{\"type\":\"json_object\"}";
    rc = hooks_make(&ctx, &g, 1, &h, err, sizeof(err));
    CHECK(rc == 0 && h.mask && h.accept && h.free && h.ud, "json_object");
    if (rc == 0 && h.mask) {
        for (id = 0; id < nv; id++) {
            size_t      len;
            const char *p = llm_token_bytes(v, (int32_t) id, 0, &len);

            if (len == 1 && p[0] == '{') {
                open = (int32_t) id;
            } else if (len == 1 && p[0] == '}') {
                close = (int32_t) id;
            }
        }
        for (id = 0; id < nv; id++) {
            row[id] = 1.0f;
        }
        CHECK(h.mask(h.ud, row, nv) == 0, "mask at the start");
        CHECK(open >= 0 && row[open] == 1.0f && close >= 0
              && row[close] == -INFINITY
              && row[llm_vocab_eos(v)] == -INFINITY,
              "only an object may start, EOS may not");
        CHECK(h.accept(h.ud, open) == 0 && h.accept(h.ud, close) == 0,
              "accept {}");
        for (id = 0; id < nv; id++) {
            row[id] = 1.0f;
        }
        CHECK(h.mask(h.ud, row, nv) == 0 && row[llm_vocab_eos(v)] == 1.0f
              && row[open] == -INFINITY, "complete: EOS allowed");
        CHECK(h.accept(h.ud, llm_vocab_eos(v)) == 0, "accept EOS");
        h.free(h.ud);
    }
    free(row);
    llm_hooks_ctx_free(&ctx);
    llm_vocab_free(v);
    llm_gguf_close(gg);
    tk_end_as("hooks");
}

int
main(void)
{
    tk_begin("tables");
    test_tables();
    tk_begin("errors");
    test_errors();
    tk_begin("response_format");
    test_response_format();
    tk_begin("byte walks");
    test_byte_walks();
    tk_begin("token walks (gpt-2)");
    test_token_walks("gpt-2");
    tk_begin("token walks (llama-spm)");
    test_token_walks("llama-spm");
    tk_begin("hooks");
    test_hooks();
    return tk_done();
}
