/*
 * Prompt building (prompt.c): chat template + tokenizer together.
 *
 * 1. Linear work: a chat of 100000 messages is rendered and tokenized
 *    with the ids copied by growing token arrays at most a small multiple
 *    of the ids produced (no per-fragment copy of everything so far).
 * 2. No special-token injection: for every template in
 *    engine/tests/data/templates and every special-looking text of its
 *    markup (<|...|>, <｜...｜>, <tag>, [TAG], Gemma's <|turn> / <turn|>),
 *    in a vocabulary where those texts are control tokens and in one where
 *    they are user-defined: the text put into a user message, a system
 *    message, an assistant turn, its reasoning, a tool result, tool-call
 *    arguments, a tool-call name, a tool definition (description and a
 *    parameter name) or a message name never yields the special id (the
 *    ids of that text are those of the unguarded prompt minus one per
 *    copy of the request's text in it), the prompt text is unchanged, and
 *    the same conversation without the text tokenizes bit for bit as
 *    before.  The same for every control, user-defined and unknown token
 *    of the vocabularies in engine/tests/data/vocab with the ChatML
 *    template (and Phi-3.5's with phi-3's).  A completion prompt still
 *    parses special tokens (llama.cpp's server does).
 * 3. The tool-call family each template selects (--tool-format's default).
 *
 * Run from the repository root.  Prints one line per check group; exits
 * non-zero on any failure.
 */

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/gguf.h"
#include "serve/prompt.h"
#include "serve/wire.h"
#include "template/template.h"
#include "text/tokenizer.h"
#include "text/tokenizer_int.h"      /* llm_bpe_byte_cp, llm_tok_n_copied */
#include "testkit.h"

/* The prompt of g as the engine builds it: decoded (serve/wire.c), then
 * built. */
static int
build(const llm_tmpl_t *t, const llm_vocab_t *v,
    const Llm__GenerateRequest *g, llm_tokens_t *out, const char **param,
    char *err, size_t errlen)
{
    llm_request_t  rq;
    int            rc;

    rc = llm_wire_request(&rq, g, err, errlen);
    if (rc == 0) {
        rc = llm_prompt_build(t, v, &rq, out, param, err, errlen);
        llm_request_free(&rq);
    }
    return rc;
}

/* The template variables of g (they keep what they share with it). */
static json_t *
vars_of(const llm_vocab_t *v, const Llm__GenerateRequest *g,
    const char **param, char *err, size_t errlen)
{
    llm_request_t  rq;
    json_t        *vars = NULL;

    if (llm_wire_request(&rq, g, err, errlen) == 0) {
        vars = llm_prompt_vars(v, &rq, param, err, errlen);
        llm_request_free(&rq);
    }
    return vars;
}

/*
 * A byte-level vocabulary with no merges (every plain byte is one token):
 * the 256 byte tokens, then the n special texts (duplicates dropped) of
 * token type ttype.  NULL with a message on failure.
 */
static llm_vocab_t *
synth_vocab(const char *const *spec, size_t n, int ttype)
{
    const char        **toks;
    size_t             *lens, nt = 0, i, j;
    int32_t            *types;
    char                path[512], err[512], (*bytes)[4];
    llm_gguf_writer_t  *w;
    llm_gguf_t         *g = NULL;
    llm_vocab_t        *v = NULL;

    toks = calloc(256 + n, sizeof(*toks));
    lens = calloc(256 + n, sizeof(*lens));
    types = calloc(256 + n, sizeof(*types));
    bytes = calloc(256, sizeof(*bytes));
    if (toks == NULL || lens == NULL || types == NULL || bytes == NULL) {
        tk_note("  synth_vocab: out of memory\n");
        goto done;
    }
    for (i = 0; i < 256; i++) {
        lens[nt] = llm_utf8_put(bytes[i], llm_bpe_byte_cp((uint8_t) i));
        toks[nt] = bytes[i];
        types[nt++] = 1;
    }
    for (i = 0; i < n; i++) {
        for (j = 256; j < nt; j++) {
            if (strcmp(toks[j], spec[i]) == 0) {
                break;
            }
        }
        if (j < nt) {
            continue;
        }
        toks[nt] = spec[i];
        lens[nt] = strlen(spec[i]);
        types[nt++] = ttype;
    }

    snprintf(path, sizeof(path), "%s/test_prompt.%d.gguf",
             getenv("TMPDIR") && *getenv("TMPDIR") ? getenv("TMPDIR")
                                                   : "/tmp", (int) getpid());
    if (llm_gguf_writer_open(&w, path, err, sizeof(err)) < 0) {
        tk_note("  synth_vocab: %s\n", err);
        goto done;
    }
    llm_gguf_w_str(w, "general.architecture", "llama", 5);
    llm_gguf_w_str(w, "tokenizer.ggml.model", "gpt2", 4);
    llm_gguf_w_str(w, "tokenizer.ggml.pre", "gpt-2", 5);
    llm_gguf_w_str_arr(w, "tokenizer.ggml.tokens", toks, lens, nt);
    llm_gguf_w_arr(w, "tokenizer.ggml.token_type", LLM_GGUF_INT32, types, nt);
    llm_gguf_w_begin_data(w);
    if (llm_gguf_writer_close(w, err, sizeof(err)) < 0
        || llm_gguf_open(&g, path, err, sizeof(err)) < 0
        || llm_vocab_load(&v, g, err, sizeof(err)) < 0)
    {
        tk_note("  synth_vocab: %s\n", err);
        v = NULL;
    }
    llm_gguf_close(g);
    unlink(path);

done:
    free(toks);
    free(lens);
    free(types);
    free(bytes);
    return v;
}

static size_t
count_id(const llm_tokens_t *t, int32_t id)
{
    size_t  i, n = 0;

    for (i = 0; i < t->n; i++) {
        n += t->ids[i] == id;
    }
    return n;
}

/* ---- 1. linear work ---- */

static void
test_linear(void)
{
    static const char *const spec[] = { "<|im_start|>", "<|im_end|>" };
    const size_t           n_msgs = 100000;
    Llm__GenerateRequest   g = LLM__GENERATE_REQUEST__INIT;
    Llm__Message          *msgs = NULL, **mp = NULL;
    llm_vocab_t           *v;
    llm_tmpl_t            *t = NULL;
    llm_tokens_t           toks = { 0 };
    const char            *param = NULL;
    char                   err[512], (*text)[32] = NULL;
    unsigned long          copied0;
    size_t                 i;
    int                    rc;

    v = synth_vocab(spec, 2, 3);
    if (v == NULL) {
        CHECK(0, "no synthetic vocabulary");
        return;
    }
    msgs = calloc(n_msgs, sizeof(*msgs));
    mp = calloc(n_msgs, sizeof(*mp));
    text = calloc(n_msgs, sizeof(*text));
    if (msgs == NULL || mp == NULL || text == NULL
        || llm_tmpl_compile(&t, llm_tmpl_chatml, strlen(llm_tmpl_chatml),
                            err, sizeof(err)) != 0)
    {
        CHECK(0, "setup failed");
        goto done;
    }
    for (i = 0; i < n_msgs; i++) {
        Llm__Message m = LLM__MESSAGE__INIT;

        msgs[i] = m;
        snprintf(text[i], sizeof(text[i]), "message %zu", i);
        msgs[i].role = i % 2 ? "assistant" : "user";
        msgs[i].content = text[i];
        mp[i] = &msgs[i];
    }
    g.n_messages = n_msgs;
    g.messages = mp;

    copied0 = llm_tok_n_copied;
    rc = build(t, v, &g, &toks, &param, err, sizeof(err));
    CHECK(rc == 0, "%zu messages: %s", n_msgs, err);
    CHECK(count_id(&toks, llm_vocab_find(v, "<|im_start|>", 12))
          == n_msgs + 1, "<|im_start|> %zu times for %zu messages",
          count_id(&toks, llm_vocab_find(v, "<|im_start|>", 12)), n_msgs);
    CHECK(llm_tok_n_copied - copied0 <= 3 * toks.n, "%lu ids copied growing "
          "token arrays for %zu tokens", llm_tok_n_copied - copied0, toks.n);

    tk_end_as("linear: %zu messages rendered and tokenized into %zu tokens, "
              "%lu ids copied growing arrays", n_msgs, toks.n,
              llm_tok_n_copied - copied0);

done:
    llm_tokens_free(&toks);
    llm_tmpl_free(t);
    llm_vocab_free(v);
    free(msgs);
    free(mp);
    free(text);
}

/* ---- 2. no special-token injection ---- */

#define N_FIELDS  9

static const char *const field_name[N_FIELDS] = {
    "user message", "system message", "assistant turn", "tool result",
    "tool-call arguments", "tool-call name", "tool definition",
    "message name", "reasoning"
};

/* Storage for one request built by make_request(). */
typedef struct {
    Llm__GenerateRequest  g;
    Llm__Message          m[5];
    Llm__Message         *mp[5];
    Llm__ToolCall         tc;
    Llm__ToolCall        *tcp[1];
    char                 *args;
    char                 *tools;
} req_t;

static void
req_free(req_t *r)
{
    free(r->args);
    free(r->tools);
}

/*
 * A conversation with x in field f: system, user, assistant calling a
 * tool, the tool's result, a final user turn; the tool is defined.
 * simple: user, assistant, user only (for templates that refuse system
 * or tool turns; fields 0, 2, 7 and 8 only).
 */
static int
make_request(req_t *r, int f, const char *x, int simple)
{
    static const Llm__GenerateRequest  g0 = LLM__GENERATE_REQUEST__INIT;
    static const Llm__Message          m0 = LLM__MESSAGE__INIT;
    static const Llm__ToolCall         t0 = LLM__TOOL_CALL__INIT;
    json_t                            *a, *tools;
    int                                i;

    memset(r, 0, sizeof(*r));
    r->g = g0;
    for (i = 0; i < 5; i++) {
        r->m[i] = m0;
        r->mp[i] = &r->m[i];
    }
    r->tc = t0;
    r->tcp[0] = &r->tc;
    if (simple) {
        r->m[0].role = "user";
        r->m[0].content = f == 0 ? (char *) x : "What is the weather?";
        if (f == 7) {
            r->m[0].name = (char *) x;
        }
        r->m[1].role = "assistant";
        r->m[1].content = f == 2 ? (char *) x : "Sunny.";
        if (f == 8) {
            r->m[1].reasoning_content = (char *) x;
        }
        r->m[2].role = "user";
        r->m[2].content = "Thanks.";
        r->g.n_messages = 3;
        r->g.messages = r->mp;
        r->g.tools_json = "";
        return 0;
    }

    r->m[0].role = "system";
    r->m[0].content = f == 1 ? (char *) x : "You are helpful.";
    r->m[1].role = "user";
    r->m[1].content = f == 0 ? (char *) x : "What is the weather?";
    if (f == 7) {
        r->m[1].name = (char *) x;
    }
    r->m[2].role = "assistant";
    r->m[2].content = f == 2 ? (char *) x : "";
    r->m[2].content_null = f != 2;
    if (f == 8) {
        r->m[2].reasoning_content = (char *) x;
    }
    r->m[2].n_tool_calls = 1;
    r->m[2].tool_calls = r->tcp;
    r->tc.id = "call12345";         /* Mistral wants 9 characters */
    r->tc.type = "function";
    r->tc.name = f == 5 ? (char *) x : "get_weather";
    a = json_pack("{ss}", "city", f == 4 ? x : "Paris");
    r->args = a ? json_dumps(a, 0) : NULL;
    json_decref(a);
    r->tc.arguments = r->args;
    r->m[3].role = "tool";
    r->m[3].tool_call_id = "call12345";
    r->m[3].content = f == 3 ? (char *) x : "sunny, 21 C";
    r->m[4].role = "user";
    r->m[4].content = "Thanks.";

    tools = json_pack("[{ss s{ss ss s{ss s{s{ss ss}} s[s]}}}]",
        "type", "function", "function",
        "name", f == 5 ? x : "get_weather",
        "description", f == 6 ? x : "The weather in a city",
        "parameters", "type", "object", "properties",
        f == 6 ? x : "city", "type", "string", "description", "A city",
        "required", f == 6 ? x : "city");
    r->tools = tools ? json_dumps(tools, 0) : NULL;
    json_decref(tools);
    r->g.tools_json = r->tools;
    r->g.n_messages = 5;
    r->g.messages = r->mp;
    return r->args && r->tools ? 0 : -ENOMEM;
}

/* The old way: render unguarded, tokenize it all with special tokens. */
static int
render_plain(const llm_tmpl_t *t, const llm_vocab_t *v, const req_t *r,
    char **text, size_t *len, llm_tokens_t *toks)
{
    const char  *param;
    char         err[512];
    json_t      *vars;
    int          rc;

    vars = vars_of(v, &r->g, &param, err, sizeof(err));
    if (vars == NULL) {
        return -EINVAL;
    }
    rc = llm_tmpl_render(t, vars, text, len, err, sizeof(err));
    json_decref(vars);
    if (rc != 0) {
        return rc;
    }
    return llm_tokenize(v, *text, *len, LLM_TOK_PARSE_SPECIAL, toks, err,
                        sizeof(err));
}

static size_t
count_str(const char *hay, size_t n, const char *needle)
{
    size_t       k = strlen(needle), c = 0;
    const char  *p = hay, *end = hay + n, *q;

    while ((q = memmem(p, (size_t) (end - p), needle, k)) != NULL) {
        c++;
        p = q + k;
    }
    return c;
}

typedef struct {
    size_t  renders;          /* conversations rendered */
    size_t  injected;         /* (text, field) pairs that reached the prompt */
    size_t  fields[N_FIELDS]; /* ... per field */
} inj_stats_t;

/*
 * The text sp of special token id, put into field f: the guarded prompt
 * must have as many ids of it as the unguarded one minus the copies that
 * came from the request, and the same text; the conversation without sp
 * must tokenize exactly as before.  byte_exact: the vocabulary has one
 * token per byte (the decoded prompt is the prompt).
 */
static void
check_injection(const char *what, const llm_tmpl_t *t, const llm_vocab_t *v,
    int32_t id, const char *sp, int f, int byte_exact, int guarded,
    inj_stats_t *st)
{
    req_t          r;
    char          *x, *text = NULL, err[512], *dec = NULL, *mark;
    size_t         len = 0, n_data, c_old, c_new, i, dn = 0, pl;
    const char    *param, *p;
    llm_tokens_t   old = { 0 }, now = { 0 };
    int            rc, full = 0;

    x = malloc(strlen(sp) + 5);
    mark = malloc(strlen(sp) + 5);
    if (x == NULL || mark == NULL) {
        CHECK(0, "out of memory");
        goto done;
    }
    for (int benign = 0; benign < 4; benign++) {
        int simple = benign >= 2;

        if (simple && (full || (f != 0 && f != 2 && f != 7 && f != 8))) {
            break;              /* the full conversation did render */
        }
        sprintf(x, benign % 2 ? "qz zq" : "qz%szq", sp);
        strcpy(mark, x);
        free(text);
        text = NULL;
        old.n = now.n = 0;
        if (make_request(&r, f, x, simple) != 0) {
            CHECK(0, "out of memory");
            goto done;
        }
        rc = render_plain(t, v, &r, &text, &len, &old);
        if (rc != 0) {
            req_free(&r);
            continue;           /* the template refuses this conversation */
        }
        rc = build(t, v, &r.g, &now, &param, err, sizeof(err));
        req_free(&r);
        st->renders++;
        full |= !simple;
        if (rc != 0) {
            CHECK(0, "%s, %s, %s: the guarded prompt fails: %s", what,
                  field_name[f], sp, err);
            continue;
        }
        if (benign % 2) {
            CHECK(old.n == now.n
                  && memcmp(old.ids, now.ids, old.n * sizeof(int32_t)) == 0,
                  "%s, %s: without special text, %zu tokens now, %zu "
                  "before", what, field_name[f], now.n, old.n);
            continue;
        }
        n_data = count_str(text, len, mark);
        c_old = count_id(&old, id);
        c_new = count_id(&now, id);
        if (!guarded) {
            /* user-defined, not markup: matched in plain text as before */
            CHECK(c_new == c_old, "%s, %s: '%s' is not markup but gives "
                  "%zu ids, %zu before", what, field_name[f], sp, c_new,
                  c_old);
            continue;
        }
        if (n_data > 0) {
            st->injected++;
            st->fields[f]++;
        }
        CHECK(c_new + n_data == c_old, "%s, %s: '%s' in the request gives "
              "the special id %zu times (%zu in the prompt, %zu from the "
              "request)", what, field_name[f], sp, c_new, c_old, n_data);
        if (byte_exact) {
            free(dec);
            dec = malloc(len + 1);
            dn = 0;
            for (i = 0; dec != NULL && i < now.n; i++) {
                p = llm_token_bytes(v, now.ids[i], 1, &pl);
                if (dn + pl > len) {
                    break;
                }
                memcpy(dec + dn, p, pl);
                dn += pl;
            }
            CHECK(dec != NULL && i == now.n && dn == len
                  && memcmp(dec, text, len) == 0, "%s, %s, %s: the guarded "
                  "prompt's text differs", what, field_name[f], sp);
        }
    }

done:
    free(x);
    free(mark);
    free(text);
    free(dec);
    llm_tokens_free(&old);
    llm_tokens_free(&now);
}

/* Append s[0..n) to the list (no duplicates). */
static void
add_special(char ***list, size_t *n, const char *s, size_t len)
{
    char  **l;
    size_t  i;

    for (i = 0; i < *n; i++) {
        if (strlen((*list)[i]) == len && memcmp((*list)[i], s, len) == 0) {
            return;
        }
    }
    l = realloc(*list, (*n + 1) * sizeof(char *));
    if (l == NULL) {
        return;
    }
    *list = l;
    l[*n] = strndup(s, len);
    if (l[*n] != NULL) {
        (*n)++;
    }
}

static int
is_word(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
           || (c >= '0' && c <= '9') || c == '_';
}

/*
 * The special-looking texts of a template's source: <|...|>, <｜...｜>,
 * <|word> and <word|> (Gemma 4), <tag> and </tag>, [TAG] and [/TAG].
 */
static size_t
template_specials(const char *src, size_t n, char ***out)
{
    static const char  fw[] = "\xef\xbd\x9c";   /* ｜ */
    size_t             i, j, k = 0;

    *out = NULL;
    for (i = 0; i + 2 < n; i++) {
        if (src[i] == '<' && src[i + 1] == '|') {
            for (j = i + 2; j < n && j < i + 48 && src[j] != '|'
                 && src[j] != '>' && src[j] != '<' && src[j] != '\n'
                 && src[j] != '\'' && src[j] != '"'; j++) { /* void */ }
            if (j + 1 < n && src[j] == '|' && src[j + 1] == '>' && j > i + 2) {
                add_special(out, &k, src + i, j + 2 - i);
            } else if (j < n && src[j] == '>' && j > i + 2) {
                add_special(out, &k, src + i, j + 1 - i);
            }
        } else if (src[i] == '<' && i + 4 < n
                   && memcmp(src + i + 1, fw, 3) == 0)
        {
            for (j = i + 4; j + 3 < n && j < i + 96
                 && memcmp(src + j, fw, 3) != 0 && src[j] != '\n'; j++) {
                /* void */
            }
            if (j + 3 < n && memcmp(src + j, fw, 3) == 0 && src[j + 3] == '>')
            {
                add_special(out, &k, src + i, j + 4 - i);
            }
        } else if (src[i] == '<' && (is_word((unsigned char) src[i + 1])
                                     || src[i + 1] == '/'))
        {
            for (j = i + 2; j < n && j < i + 40
                 && (is_word((unsigned char) src[j]) || src[j] == ':'
                     || src[j] == '-' || src[j] == '.'); j++) { /* void */ }
            if (j < n && src[j] == '>') {
                add_special(out, &k, src + i, j + 1 - i);
            } else if (j + 1 < n && src[j] == '|' && src[j + 1] == '>') {
                add_special(out, &k, src + i, j + 2 - i);
            }
        } else if (src[i] == '['
                   && (src[i + 1] == '/'
                       || (src[i + 1] >= 'A' && src[i + 1] <= 'Z')))
        {
            for (j = i + 1; j < n && j < i + 32
                 && ((src[j] >= 'A' && src[j] <= 'Z') || src[j] == '_'
                     || src[j] == '/'); j++) { /* void */ }
            if (j < n && src[j] == ']' && j > i + 2) {
                add_special(out, &k, src + i, j + 1 - i);
            }
        }
    }
    return k;
}

static void
free_list(char **l, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free(l[i]);
    }
    free(l);
}

static int
name_cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *) a, *(char *const *) b);
}

static void
test_templates(void)
{
    const char     *dir = "engine/tests/data/templates";
    DIR            *d;
    struct dirent  *e;
    char          **names = NULL, **sp, path[1024], err[512], *src;
    size_t          n_names = 0, n_sp, i, k, total_sp = 0, len, inj0;
    size_t          n_covered = 0;
    inj_stats_t     st = { 0 };
    llm_tmpl_t     *t;
    llm_vocab_t    *v;
    FILE           *fp;
    long            fl;
    int             type, f;

    d = opendir(dir);
    if (d == NULL) {
        CHECK(0, "no %s (run from the repository root)", dir);
        return;
    }
    while ((e = readdir(d)) != NULL) {
        len = strlen(e->d_name);
        if (len > 6 && strcmp(e->d_name + len - 6, ".jinja") == 0) {
            add_special(&names, &n_names, e->d_name, len);
        }
    }
    closedir(d);
    qsort(names, n_names, sizeof(char *), name_cmp);

    for (i = 0; i < n_names; i++) {
        snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
        fp = fopen(path, "rb");
        src = NULL;
        if (fp == NULL || fseek(fp, 0, SEEK_END) != 0 || (fl = ftell(fp)) < 0
            || fseek(fp, 0, SEEK_SET) != 0
            || (src = malloc((size_t) fl + 1)) == NULL
            || fread(src, 1, (size_t) fl, fp) != (size_t) fl)
        {
            CHECK(0, "cannot read %s", path);
            if (fp) {
                fclose(fp);
            }
            free(src);
            continue;
        }
        fclose(fp);
        src[fl] = '\0';
        if (llm_tmpl_compile(&t, src, (size_t) fl, err, sizeof(err)) != 0) {
            free(src);          /* outside the subset (test_template) */
            continue;
        }
        n_sp = template_specials(src, (size_t) fl, &sp);
        total_sp += n_sp;
        inj0 = st.injected;
        for (type = 3; type <= 4; type++) {
            v = synth_vocab((const char *const *) sp, n_sp, type);
            if (v == NULL) {
                CHECK(0, "%s: no vocabulary", names[i]);
                continue;
            }
            for (k = 0; k < n_sp; k++) {
                for (f = 0; f < N_FIELDS; f++) {
                    check_injection(names[i], t, v,
                                    llm_vocab_find(v, sp[k], strlen(sp[k])),
                                    sp[k], f, 1, 1, &st);
                }
            }
            llm_vocab_free(v);
        }
        n_covered += st.injected > inj0;
        if (st.injected == inj0) {
            tk_note("note: %s: no special text reached its prompt from "
                    "the request\n", names[i]);
        }
        free_list(sp, n_sp);
        llm_tmpl_free(t);
        free(src);
    }
    free_list(names, n_names);

    CHECK(n_names >= 50 && total_sp >= 300 && st.injected >= 1000,
          "too little covered: %zu templates, %zu texts, %zu injections",
          n_names, total_sp, st.injected);
    for (f = 0; f < N_FIELDS; f++) {
        CHECK(st.fields[f] > 0 || f == 7, "no template renders the %s",
              field_name[f]);
    }
    CHECK(n_covered + 3 >= n_names, "only %zu of %zu templates covered",
          n_covered, n_names);
    tk_end_as("injection: %zu templates (%zu with injections in their "
              "prompt), %zu special texts as control and as user-defined "
              "tokens, %zu renders, %zu injected copies reached the prompt as "
              "plain text, markup kept", n_names, n_covered, total_sp,
              st.renders, st.injected);
}

static llm_tmpl_t *
load_template(const char *file)
{
    char        path[1024], err[512], *src = NULL;
    llm_tmpl_t *t = NULL;
    FILE       *fp;
    long        fl = 0;

    if (file == NULL) {
        llm_tmpl_compile(&t, llm_tmpl_chatml, strlen(llm_tmpl_chatml), err,
                         sizeof(err));
        return t;
    }
    snprintf(path, sizeof(path), "engine/tests/data/templates/%s", file);
    fp = fopen(path, "rb");
    if (fp != NULL && fseek(fp, 0, SEEK_END) == 0 && (fl = ftell(fp)) > 0
        && fseek(fp, 0, SEEK_SET) == 0 && (src = malloc((size_t) fl)) != NULL
        && fread(src, 1, (size_t) fl, fp) == (size_t) fl)
    {
        llm_tmpl_compile(&t, src, (size_t) fl, err, sizeof(err));
    }
    if (fp != NULL) {
        fclose(fp);
    }
    free(src);
    return t;
}

/*
 * Every control, user-defined and unknown token of the real vocabularies
 * with a template of their family (ChatML for those without one); the
 * big ones where tests/tokenizer/run.sh converts them ($LLM_TOK_VOCAB_DIR,
 * skipped without).
 */
static void
test_vocabs(void)
{
    static const struct {
        const char  *name;
        const char  *tmpl;      /* NULL: ChatML */
        int          optional;
    } vocabs[] = {
        { "gpt-2", NULL, 0 },
        { "llama-spm", NULL, 0 },
        { "phi-3", "microsoft-Phi-3.5-mini-instruct.jinja", 0 },
        { "deepseek-coder", NULL, 0 },
        { "mpt", NULL, 0 },
        { "refact", NULL, 0 },
        { "starcoder", NULL, 0 },
        { "qwen2", "Qwen-Qwen3-0.6B.jinja", 1 },
        { "llama-bpe", "meta-llama-Llama-3.1-8B-Instruct.jinja", 1 },
        { "gpt-4o", "openai-gpt-oss-120b.jinja", 1 },
        { "deepseek-v3", "deepseek-ai-DeepSeek-V3.1.jinja", 1 },
    };
    const char    *dir = getenv("LLM_TOK_VOCAB_DIR");
    char           path[1024], err[512];
    llm_gguf_t    *g;
    llm_vocab_t   *v;
    llm_tmpl_t    *t;
    inj_stats_t    st = { 0 };
    size_t         i, n_tok = 0, n_vocab = 0, tl, tsl;
    uint32_t       id;
    const char    *tsrc;
    int            type, f, guarded;

    for (i = 0; i < sizeof(vocabs) / sizeof(vocabs[0]); i++) {
        snprintf(path, sizeof(path), "engine/tests/data/vocab/%s.gguf",
                 vocabs[i].name);
        if (vocabs[i].optional) {
            snprintf(path, sizeof(path), "%s/%s.gguf", dir ? dir : ".",
                     vocabs[i].name);
            if (dir == NULL || access(path, R_OK) != 0) {
                tk_note("SKIP injection, %s: no %s.gguf in "
                        "$LLM_TOK_VOCAB_DIR\n", vocabs[i].name,
                        vocabs[i].name);
                continue;
            }
        }
        if (llm_gguf_open(&g, path, err, sizeof(err)) < 0) {
            CHECK(0, "%s", err);
            continue;
        }
        if (llm_vocab_load(&v, g, err, sizeof(err)) < 0) {
            CHECK(0, "%s", err);
            llm_gguf_close(g);
            continue;
        }
        t = load_template(vocabs[i].tmpl);
        CHECK(t != NULL, "%s: no template", vocabs[i].name);
        n_vocab += t != NULL;
        tsrc = t ? llm_tmpl_source(t, &tsl) : NULL;
        for (id = 0; t != NULL && id < llm_vocab_n_tokens(v); id++) {
            const char *txt = llm_vocab_token_text(v, (int32_t) id, &tl);
            char       *sp;

            type = llm_vocab_token_type(v, (int32_t) id);
            if ((type != 2 && type != 3 && type != 4) || tl == 0
                || memchr(txt, '\0', tl) != NULL
                || llm_vocab_find(v, txt, tl) != (int32_t) id)
            {
                continue;
            }
            sp = strndup(txt, tl);
            n_tok++;
            guarded = type != 4 || memmem(tsrc, tsl, txt, tl) != NULL;
            for (f = 0; sp != NULL && f < N_FIELDS; f++) {
                check_injection(vocabs[i].name, t, v, (int32_t) id, sp, f, 0,
                                guarded, &st);
            }
            free(sp);
        }
        llm_tmpl_free(t);
        llm_vocab_free(v);
        llm_gguf_close(g);
    }
    CHECK(n_tok >= 50, "only %zu special tokens", n_tok);
    tk_end_as("injection, real vocabularies: %zu control/user-defined/"
              "unknown tokens of %zu vocabularies, %zu injected copies as "
              "plain text", n_tok, n_vocab, st.injected);
}

/* A completion prompt is raw text: special tokens parsed, as llama.cpp. */
static void
test_completion(void)
{
    static const char *const spec[] = { "<|im_start|>", "<|im_end|>" };
    Llm__GenerateRequest  g = LLM__GENERATE_REQUEST__INIT;
    llm_vocab_t          *v;
    llm_tmpl_t           *t = NULL;
    llm_tokens_t          toks = { 0 };
    const char           *param;
    char                  err[512];

    v = synth_vocab(spec, 2, 3);
    if (v == NULL || llm_tmpl_compile(&t, llm_tmpl_chatml,
                                      strlen(llm_tmpl_chatml), err,
                                      sizeof(err)) != 0)
    {
        CHECK(0, "setup failed");
        llm_vocab_free(v);
        return;
    }
    g.is_completion = 1;
    g.prompt = "<|im_start|>user\nhi<|im_end|>\n";
    CHECK(build(t, v, &g, &toks, &param, err, sizeof(err)) == 0,
          "completion: %s", err);
    CHECK(toks.n == 1 + 7 + 1 + 1
          && toks.ids[0] == llm_vocab_find(v, "<|im_start|>", 12)
          && toks.ids[8] == llm_vocab_find(v, "<|im_end|>", 10),
          "completion prompt: %zu tokens, special tokens not parsed", toks.n);
    tk_end_as("completion prompt: special tokens parsed as llama.cpp's "
              "server does");
    llm_tokens_free(&toks);
    llm_tmpl_free(t);
    llm_vocab_free(v);
}

/*
 * Edges: a special text split over two request strings printed next to
 * each other, a request string ending in the start of one right before
 * the template's own token, tojson with ensure_ascii, a client's
 * chat_template_kwargs overriding bos_token.
 */
static void
test_guard_edges(void)
{
    static const char *const spec[] = { "<|im_start|>", "<|im_end|>" };
    static const struct {
        const char  *tmpl;
        const char  *c0, *c1;
        const char  *kwargs;
        size_t       n_start, n_end;
        const char  *text;          /* the prompt, or NULL */
    } cases[] = {
        { "{% for m in messages %}{{ m.content }}{% endfor %}",
          "a<|im_", "start|>b", "", 0, 0, "a<|im_start|>b" },
        { "{% for m in messages %}{{ m.content }}{% endfor %}",
          "a<", "|im_end|>", "", 0, 0, "a<|im_end|>" },
        { "<|im_start|>{{ messages[0].content }}<|im_end|>",
          "x<|im_", "", "", 1, 1, "<|im_start|>x<|im_<|im_end|>" },
        { "{{ messages[0].content | tojson(ensure_ascii=True) }}",
          "<|im_start|>\xc3\xa9", "", "", 0, 0,
          "\"<|im_start|>\\u00e9\"" },
        { "{{ messages[0].content | upper | lower }}<|im_end|>",
          "<|im_start|>", "", "", 0, 1, "<|im_start|><|im_end|>" },
        { "{{ bos_token }}hi", "x", "", "{\"bos_token\": \"<|im_start|>\"}",
          0, 0, "<|im_start|>hi" },
    };
    Llm__GenerateRequest  g = LLM__GENERATE_REQUEST__INIT;
    Llm__Message          m[2] = { LLM__MESSAGE__INIT, LLM__MESSAGE__INIT };
    Llm__Message         *mp[2] = { &m[0], &m[1] };
    llm_vocab_t          *v;
    llm_tmpl_t           *t;
    llm_tokens_t          toks = { 0 };
    const char           *param, *p;
    char                  err[512], dec[256];
    size_t                i, k, dn, pl;
    int32_t               s_id, e_id;

    v = synth_vocab(spec, 2, 3);
    if (v == NULL) {
        CHECK(0, "no vocabulary");
        return;
    }
    s_id = llm_vocab_find(v, "<|im_start|>", 12);
    e_id = llm_vocab_find(v, "<|im_end|>", 10);
    for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        if (llm_tmpl_compile(&t, cases[i].tmpl, strlen(cases[i].tmpl), err,
                             sizeof(err)) != 0)
        {
            CHECK(0, "case %zu: %s", i, err);
            continue;
        }
        m[0].role = "user";
        m[0].content = (char *) cases[i].c0;
        m[1].role = "user";
        m[1].content = (char *) cases[i].c1;
        g.n_messages = 2;
        g.messages = mp;
        g.chat_template_kwargs_json = (char *) cases[i].kwargs;
        toks.n = 0;
        CHECK(build(t, v, &g, &toks, &param, err, sizeof(err))
              == 0, "case %zu: %s", i, err);
        CHECK(count_id(&toks, s_id) == cases[i].n_start
              && count_id(&toks, e_id) == cases[i].n_end,
              "case %zu: %zu <|im_start|> and %zu <|im_end|>, expected %zu "
              "and %zu", i, count_id(&toks, s_id), count_id(&toks, e_id),
              cases[i].n_start, cases[i].n_end);
        dn = 0;
        for (k = 0; k < toks.n; k++) {
            p = llm_token_bytes(v, toks.ids[k], 1, &pl);
            if (dn + pl < sizeof(dec)) {
                memcpy(dec + dn, p, pl);
                dn += pl;
            }
        }
        dec[dn] = '\0';
        CHECK(strcmp(dec, cases[i].text) == 0, "case %zu: prompt '%s', "
              "expected '%s'", i, dec, cases[i].text);
        llm_tmpl_free(t);
    }
    llm_vocab_free(v);

    /* a control token that begins inside a UTF-8 character: the guard
     * goes before the character (the text stays valid UTF-8) */
    {
        static const char *const odd[] = { "\xa9x" };
        llm_tmpl_t  *tc = NULL;

        v = synth_vocab(odd, 1, 3);
        if (v == NULL || llm_tmpl_compile(&tc, llm_tmpl_chatml,
                                          strlen(llm_tmpl_chatml), err,
                                          sizeof(err)) != 0)
        {
            CHECK(0, "setup failed");
        } else {
            m[0].content = "a\xc2\xa9x";
            g.n_messages = 1;
            g.chat_template_kwargs_json = "";
            toks.n = 0;
            CHECK(build(tc, v, &g, &toks, &param, err,
                                   sizeof(err)) == 0, "mid-character: %s",
                  err);
            CHECK(count_id(&toks, llm_vocab_find(v, "\xa9x", 2)) == 0,
                  "a token beginning inside a character matched");
        }
        llm_tmpl_free(tc);
        llm_vocab_free(v);
    }

    tk_end_as("guard edges: split over two strings, before the template's "
              "own token, tojson ascii, case mapping, kwargs, inside a "
              "character");
    llm_tokens_free(&toks);
}

/*
 * The tool-call family each template of engine/tests/data/templates
 * selects (llm_prompt_tool_format): GLM's (<tool_call> and <arg_key>)
 * glm4.5, the others what they selected before glm4.5 existed.
 */
static const struct {
    const char *file;
    const char *fmt;
} tool_formats[] = {
    { "Apertus-8B-Instruct.jinja", "none" },
    { "Apriel-1.6-15b-Thinker-fixed.jinja", "none" },
    { "Bielik-11B-v3.0-Instruct.jinja", "hermes" },
    { "ByteDance-Seed-OSS.jinja", "none" },
    { "Cohere2MoE.jinja", "llama3-json" },
    { "CohereForAI-c4ai-command-r-plus-tool_use.jinja", "llama3-json" },
    { "CohereForAI-c4ai-command-r7b-12-2024-tool_use.jinja", "llama3-json" },
    { "GLM-4.6.jinja", "glm4.5" },
    { "GLM-4.7-Flash.jinja", "glm4.7" },
    { "GigaChat3-10B-A1.8B.jinja", "none" },
    { "GigaChat3.1-10B-A1.8B.jinja", "none" },
    { "HuggingFaceTB-SmolLM3-3B.jinja", "none" },
    { "Kimi-K2-Instruct.jinja", "kimi-k2" },
    { "Kimi-K2-Thinking.jinja", "kimi-k2" },
    { "LFM2-8B-A1B.jinja", "none" },
    { "LFM2.5-8B-A1B.jinja", "none" },
    { "LFM2.5-Instruct.jinja", "none" },
    { "MiMo-VL.jinja", "hermes" },
    { "MiniMax-M2.jinja", "minimax-m2" },
    { "Mistral-Small-3.2-24B-Instruct-2506.jinja", "mistral" },
    { "NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.jinja", "qwen3-coder" },
    { "NVIDIA-Nemotron-Nano-v2.jinja", "none" },
    { "NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.jinja", "hermes" },
    { "NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja", "hermes" },
    { "Qwen-QwQ-32B.jinja", "hermes" },
    { "Qwen-Qwen2.5-7B-Instruct.jinja", "hermes" },
    { "Qwen-Qwen3-0.6B.jinja", "hermes" },
    { "Qwen3-Coder.jinja", "qwen3-coder" },
    { "Qwen3.5-4B.jinja", "qwen3-coder" },
    { "Reka-Edge.jinja", "hermes" },
    { "StepFun3.5-Flash.jinja", "qwen3-coder" },
    { "deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja", "deepseek-v3" },
    { "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja", "deepseek-v3" },
    { "deepseek-ai-DeepSeek-V3.1.jinja", "deepseek-v3" },
    { "deepseek-ai-DeepSeek-V3.2.jinja", "none" },
    { "deepseek-ai-DeepSeek-V4.jinja", "none" },
    { "fireworks-ai-llama-3-firefunction-v2.jinja", "none" },
    { "google-gemma-2-2b-it.jinja", "none" },
    { "google-gemma-4-31B-it-interleaved.jinja", "none" },
    { "google-gemma-4-31B-it.jinja", "none" },
    { "ibm-granite-granite-3.3-2B-Instruct.jinja", "none" },
    { "ibm-granite-granite-4.0.jinja", "hermes" },
    { "ibm-granite-granite-4.1.jinja", "hermes" },
    { "llama-cpp-deepseek-r1.jinja", "deepseek-v3" },
    { "llama-cpp-rwkv-world.jinja", "none" },
    { "meetkai-functionary-medium-v3.1.jinja", "llama3-json" },
    { "meetkai-functionary-medium-v3.2.jinja", "none" },
    { "meta-llama-Llama-3.1-8B-Instruct.jinja", "llama3-json" },
    { "meta-llama-Llama-3.2-3B-Instruct.jinja", "llama3-json" },
    { "meta-llama-Llama-3.3-70B-Instruct.jinja", "llama3-json" },
    { "microsoft-Phi-3.5-mini-instruct.jinja", "none" },
    { "mistralai-Ministral-3-14B-Reasoning-2512.jinja", "mistral" },
    { "mistralai-Mistral-Nemo-Instruct-2407.jinja", "mistral" },
    { "moonshotai-Kimi-K2.jinja", "kimi-k2" },
    { "openai-gpt-oss-120b.jinja", "harmony" },
    { "openbmb-MiniCPM5-1B.jinja", "none" },
    { "unsloth-Apriel-1.5.jinja", "hermes" },
    { "unsloth-mistral-Devstral-Small-2507.jinja", "mistral" },
    { "upstage-Solar-Open-100B.jinja", "none" },
};

static void
test_tool_format(void)
{
    char    path[1024], *src;
    size_t  i, n = sizeof(tool_formats) / sizeof(tool_formats[0]), ok = 0;
    FILE   *fp;
    long    fl;

    for (i = 0; i < n; i++) {
        const char *got;

        snprintf(path, sizeof(path), "engine/tests/data/templates/%s",
                 tool_formats[i].file);
        fp = fopen(path, "rb");
        src = NULL;
        if (fp == NULL || fseek(fp, 0, SEEK_END) != 0 || (fl = ftell(fp)) < 0
            || fseek(fp, 0, SEEK_SET) != 0
            || (src = malloc((size_t) fl + 1)) == NULL
            || fread(src, 1, (size_t) fl, fp) != (size_t) fl)
        {
            CHECK(0, "cannot read %s", path);
            if (fp) {
                fclose(fp);
            }
            free(src);
            continue;
        }
        fclose(fp);
        got = llm_prompt_tool_format(src, (size_t) fl);
        CHECK(strcmp(got, tool_formats[i].fmt) == 0, "%s: %s, expected %s",
              tool_formats[i].file, got, tool_formats[i].fmt);
        ok += strcmp(got, tool_formats[i].fmt) == 0;
        free(src);
    }
    CHECK(strcmp(llm_prompt_tool_format(llm_tmpl_chatml,
                                        strlen(llm_tmpl_chatml)), "hermes")
          == 0, "the built-in ChatML template is not hermes");
    CHECK(strcmp(llm_prompt_tool_format(NULL, 0), "none") == 0,
          "no template is not none");
    tk_end_as("tool-call family: %zu of %zu templates as expected", ok, n);
}

int
main(void)
{
    tk_begin("linear");
    test_linear();
    tk_begin("completion prompt");
    test_completion();
    tk_begin("guard edges");
    test_guard_edges();
    tk_begin("injection, real vocabularies");
    test_vocabs();
    tk_begin("injection");
    test_templates();
    tk_begin("tool-call family");
    test_tool_format();
    return tk_done();
}
