/*
 * Chat template renderer against python3-jinja2.
 *
 * engine/tests/data/templates holds 59 real chat templates, the template
 * variables of a fixed set of conversations (convs/NAME.json) and what
 * jinja2, set up as Hugging Face sets it up, produced for every pair
 * (expected/TMPL__CONV.out, or .err with "KIND<TAB>message" where it
 * raised); tools/ref/render_templates.py regenerates them.  Every pair is
 * rendered here and compared byte for byte; where jinja2 raised, the C
 * renderer must fail too, with the same message for raise_exception().
 *
 * Then fuzz safety: random mutations of the templates and random message
 * content must render or fail cleanly, and the depth, iteration and
 * output limits must hold.  Run it under the sanitizer build as well.
 *
 * Usage: test_template [-v] [SUBSTRING]   (cwd = repo root)
 */

#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "template/template.h"
#include "testkit.h"

#define DATA        "engine/tests/data/templates"
#define FIXED_NOW   1768473000      /* 2026-01-15 10:30:00 UTC */

static int  verbose;

static int
cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *) a, *(char *const *) b);
}

/* Sorted names in dir ending with suffix, suffix stripped. */
static char **
list_dir(const char *dir, const char *suffix, size_t *n)
{
    DIR            *d;
    struct dirent  *e;
    char          **v = NULL, **nv;
    size_t          cap = 0, sl = strlen(suffix), l;

    *n = 0;
    d = opendir(dir);
    if (d == NULL) {
        return NULL;
    }
    while ((e = readdir(d)) != NULL) {
        l = strlen(e->d_name);
        if (l <= sl || strcmp(e->d_name + l - sl, suffix) != 0) {
            continue;
        }
        if (*n == cap) {
            cap = cap ? cap * 2 : 64;
            nv = realloc(v, cap * sizeof(char *));
            if (nv == NULL) {
                break;
            }
            v = nv;
        }
        v[*n] = strndup(e->d_name, l - sl);
        if (v[*n] != NULL) {
            (*n)++;
        }
    }
    closedir(d);
    if (*n) {
        qsort(v, *n, sizeof(char *), cmp_str);
    }
    return v;
}

static void
free_list(char **v, size_t n)
{
    size_t  i;

    for (i = 0; i < n; i++) {
        free(v[i]);
    }
    free(v);
}

static void
show_diff(const char *want, size_t wn, const char *got, size_t gn)
{
    size_t  i, from;

    for (i = 0; i < wn && i < gn && want[i] == got[i]; i++) {
    }
    from = i > 60 ? i - 60 : 0;
    tk_note("      first difference at byte %zu (want %zu bytes, got %zu)\n",
            i, wn, gn);
    tk_note("      want: \"%.*s\"\n",
            (int) (wn - from < 160 ? wn - from : 160),
            want + from);
    tk_note("      got:  \"%.*s\"\n",
            (int) (gn - from < 160 ? gn - from : 160),
            got + from);
}

typedef struct {
    unsigned  out_ok, out_n, err_ok, err_n;
} tally_t;

static const char *const required[] = {
    "MiniMax-M2", "Qwen-Qwen3-0.6B", "deepseek-ai-DeepSeek-V3.1",
    "deepseek-ai-DeepSeek-V3.2", "meta-llama-Llama-3.1-8B-Instruct",
    "meta-llama-Llama-3.2-3B-Instruct", "meta-llama-Llama-3.3-70B-Instruct",
    "mistralai-Mistral-Nemo-Instruct-2407", "openai-gpt-oss-120b", NULL
};

static int
golden(const char *filter)
{
    char      **tmpls, **convs, path[1024], err[1024], cerr[1024], *src,
               *want, *got, *tab;
    size_t      nt, nc, i, j, k, slen, wn, gn;
    json_t     *vars[64];
    tally_t     tally[64], total = { 0 };
    llm_tmpl_t *t;
    int         rc, crc, ok, failed = 0, req_bad = 0, is_err;

    tmpls = list_dir(DATA, ".jinja", &nt);
    snprintf(path, sizeof(path), "%s/convs", DATA);
    convs = list_dir(path, ".json", &nc);
    if (nt == 0 || nc == 0 || nc > 64) {
        tk_note("golden: SKIP, no test data in %s (run from the repo root)\n",
                DATA);
        free_list(tmpls, nt);
        free_list(convs, nc);
        return 1;
    }
    memset(tally, 0, sizeof(tally));
    for (j = 0; j < nc; j++) {
        json_error_t  je;

        snprintf(path, sizeof(path), "%s/convs/%s.json", DATA, convs[j]);
        vars[j] = json_load_file(path, 0, &je);
        if (vars[j] == NULL) {
            tk_note("golden: FAIL, %s: %s\n", path, je.text);
            return 1;
        }
    }
    for (i = 0; i < nt; i++) {
        if (filter && strstr(tmpls[i], filter) == NULL) {
            continue;
        }
        snprintf(path, sizeof(path), "%s/%s.jinja", DATA, tmpls[i]);
        src = tk_read_file(path, &slen);
        if (src == NULL) {
            tk_note("golden: FAIL, cannot read %s\n", path);
            failed = 1;
            continue;
        }
        crc = llm_tmpl_compile(&t, src, slen, cerr, sizeof(cerr));
        free(src);
        for (j = 0; j < nc; j++) {
            snprintf(path, sizeof(path), "%s/expected/%s__%s.out", DATA,
                     tmpls[i], convs[j]);
            want = tk_read_file(path, &wn);
            is_err = 0;
            if (want == NULL) {
                snprintf(path, sizeof(path), "%s/expected/%s__%s.err", DATA,
                         tmpls[i], convs[j]);
                want = tk_read_file(path, &wn);
                is_err = 1;
                if (want == NULL) {
                    continue;
                }
            }
            got = NULL;
            gn = 0;
            rc = crc;
            snprintf(err, sizeof(err), "%s", cerr);
            if (rc == 0) {
                rc = llm_tmpl_render_at(t, vars[j], FIXED_NOW, &got, &gn,
                                        err, sizeof(err));
            }
            if (!is_err) {
                tally[j].out_n++;
                ok = rc == 0 && gn == wn && memcmp(got, want, wn) == 0;
                tally[j].out_ok += ok;
                if (!ok) {
                    tk_note("  MISMATCH %s / %s: %s\n", tmpls[i], convs[j],
                            rc ? err : "output differs");
                    if (rc == 0 && verbose) {
                        show_diff(want, wn, got, gn);
                    }
                    for (k = 0; required[k] != NULL; k++) {
                        if (strcmp(required[k], tmpls[i]) == 0) {
                            req_bad = 1;
                        }
                    }
                }
            } else {
                tally[j].err_n++;
                tab = strchr(want, '\t');
                ok = rc != 0;
                if (ok && tab != NULL
                    && strncmp(want, "raise_exception", 15) == 0)
                {
                    ok = rc == -EPERM && strcmp(err, tab + 1) == 0;
                }
                tally[j].err_ok += ok;
                if (!ok) {
                    tk_note("  NOT RAISED %s / %s: want \"%s\", got %s\n",
                            tmpls[i], convs[j], want, rc ? err : "output");
                } else if (verbose) {
                    tk_note("  raised %s / %s: jinja2 \"%s\" / C \"%s\"\n",
                            tmpls[i], convs[j], want, err);
                }
            }
            free(want);
            free(got);
        }
        if (crc != 0 && verbose) {
            tk_note("  compile %s: %s\n", tmpls[i], cerr);
        }
        llm_tmpl_free(t);
    }
    tk_note("golden: %-14s %8s %8s\n", "conversation", "rendered", "raised");
    for (j = 0; j < nc; j++) {
        tk_note("golden: %-14s %3u/%-4u %3u/%-4u\n", convs[j], tally[j].out_ok,
                tally[j].out_n, tally[j].err_ok, tally[j].err_n);
        total.out_ok += tally[j].out_ok;
        total.out_n += tally[j].out_n;
        total.err_ok += tally[j].err_ok;
        total.err_n += tally[j].err_n;
        json_decref(vars[j]);
    }
    tk_note("golden: %-14s %3u/%-4u %3u/%-4u\n", "total", total.out_ok,
            total.out_n, total.err_ok, total.err_n);
    if (total.out_ok != total.out_n || total.err_ok != total.err_n) {
        failed = 1;
    }
    if (filter == NULL) {
        /* the families the issue names must be present and all match */
        for (k = 0; required[k] != NULL; k++) {
            snprintf(path, sizeof(path), "%s/%s.jinja", DATA, required[k]);
            if (access(path, R_OK) != 0) {
                tk_note("golden: required template %s missing\n", path);
                req_bad = 1;
            }
        }
        tk_note("golden: required families (MiniMax-M2, Qwen3, DeepSeek-V3.1 "
                "and V3.2, Llama 3.1/3.2/3.3, Mistral Nemo, gpt-oss): %s\n",
                req_bad ? "FAIL" : "ok");
        failed |= req_bad;
    }
    tk_note("golden: %s\n", failed ? "FAIL" : "ok");
    free_list(tmpls, nt);
    free_list(convs, nc);
    return failed;
}

/*
 * snippets.json: small templates pinning down jinja2's behaviour.  Output
 * must match byte for byte; where jinja2 raised, the C error must contain
 * jinja2's message.  For another file (--cases, random.json) an error is
 * enough where jinja2 raised.
 */
static int
snippets(const char *file, const char *filter)
{
    json_t       *all, *it, *vars;
    json_error_t  je;
    llm_tmpl_t   *t;
    const char   *name, *src, *want, *werr, *msg;
    char          path[1024], err[1024], *got;
    size_t        i, gn, ok = 0, n = 0;
    int           rc;

    if (file != NULL) {
        snprintf(path, sizeof(path), "%s", file);
    } else {
        snprintf(path, sizeof(path), "%s/snippets.json", DATA);
    }
    all = json_load_file(path, 0, &je);
    if (all == NULL) {
        tk_note("snippets: SKIP, %s: %s\n", path, je.text);
        return 0;
    }
    json_array_foreach(all, i, it) {
        name = json_string_value(json_object_get(it, "name"));
        src = json_string_value(json_object_get(it, "template"));
        vars = json_object_get(it, "vars");
        want = json_string_value(json_object_get(it, "out"));
        werr = json_string_value(json_object_get(it, "err"));
        if (name == NULL || src == NULL || (filter && !strstr(name, filter)))
        {
            continue;
        }
        n++;
        got = NULL;
        gn = 0;
        rc = llm_tmpl_compile(&t, src, strlen(src), err, sizeof(err));
        if (rc == 0) {
            rc = llm_tmpl_render_at(t, vars, FIXED_NOW, &got, &gn, err,
                                    sizeof(err));
            llm_tmpl_free(t);
        }
        if (want != NULL) {
            if (rc == 0 && gn == strlen(want) && memcmp(got, want, gn) == 0) {
                ok++;
            } else {
                tk_note("  snippet %s: %s\n", name, rc ? err : "differs");
                if (rc == 0) {
                    show_diff(want, strlen(want), got, gn);
                }
            }
        } else if (werr != NULL) {
            msg = strchr(werr, '\t');
            msg = msg ? msg + 1 : werr;
            if (rc != 0 && (file != NULL || strstr(err, msg) != NULL)) {
                ok++;
            } else {
                tk_note("  snippet %s: want error \"%s\", got %s\n", name,
                        werr, rc ? err : "output");
            }
            if (verbose && rc != 0) {
                tk_note("  snippet %s: C error \"%s\"\n", name, err);
            }
        }
        free(got);
    }
    json_decref(all);
    tk_note("%s: %zu/%zu match jinja2 %s\n", file ? file : "snippets", ok, n,
            ok == n ? "ok" : "FAIL");
    return ok != n;
}

/* ---- fuzz ---- */

static uint64_t  rng = 0x9e3779b97f4a7c15ull;

static uint32_t
rnd(void)
{
    return (uint32_t) (tk_xorshift64(&rng) >> 16);
}

static const char *const mutations[] = {
    "{{", "}}", "{%", "%}", "{#", "#}", "{%-", "-%}", "(", ")", "[", "]",
    "{", "}", "'", "\"", "|", ".", ",", "~", " if ", " else ", " for ",
    " in ", " not ", " is ", "loop.", "namespace(", "|tojson", "|length",
    "[::-1]", "raise_exception('x')", "{% endfor %}", "{% endif %}",
    "{% macro m(a, b=1) %}{{ m(a) }}{% endmacro %}{{ m(1) }}", "\\",
    "\xff", "\xc3", "{% set x = x ~ x %}", "{% for i in range(99999) %}",
    "**", "//", "%", "-", "1e308", "9223372036854775807",
};

/* LLM_FUZZ_ITERS=N scales the fuzz runs (default 3000 / 1500). */
static unsigned
fuzz_iters(unsigned dflt)
{
    const char  *e = getenv("LLM_FUZZ_ITERS");

    return e != NULL && atoi(e) > 0 ? (unsigned) atoi(e) : dflt;
}

static int
fuzz_templates(void)
{
    char      **tmpls, path[1024], err[512], *src, *buf, *out;
    size_t      nt, slen, len, i, k, n, pos, outlen, rendered = 0,
                failed = 0;
    llm_tmpl_t *t;
    json_t     *vars;
    json_error_t je;
    unsigned    iter, iters = fuzz_iters(3000);
    const char *sn;

    tmpls = list_dir(DATA, ".jinja", &nt);
    snprintf(path, sizeof(path), "%s/convs/tools.json", DATA);
    vars = json_load_file(path, 0, &je);
    if (nt == 0 || vars == NULL) {
        tk_note("fuzz-templates: SKIP, no test data\n");
        free_list(tmpls, nt);
        return 0;
    }
    for (iter = 0; iter < iters; iter++) {
        i = rnd() % nt;
        snprintf(path, sizeof(path), "%s/%s.jinja", DATA, tmpls[i]);
        src = tk_read_file(path, &slen);
        if (src == NULL) {
            continue;
        }
        buf = malloc(slen * 2 + 4096);
        if (buf == NULL) {
            free(src);
            continue;
        }
        memcpy(buf, src, slen);
        len = slen;
        n = 1 + rnd() % 8;
        for (k = 0; k < n; k++) {
            pos = len ? rnd() % len : 0;
            switch (rnd() % 4) {
            case 0:                 /* flip a byte */
                if (len) {
                    buf[pos] = (char) rnd();
                }
                break;
            case 1: {               /* delete a run */
                size_t d = rnd() % 32;

                if (pos + d > len) {
                    d = len - pos;
                }
                memmove(buf + pos, buf + pos + d, len - pos - d);
                len -= d;
                break;
            }
            default:                /* insert a snippet */
                sn = mutations[rnd() % (sizeof(mutations)
                                       / sizeof(mutations[0]))];
                if (len + strlen(sn) < slen * 2 + 4096) {
                    memmove(buf + pos + strlen(sn), buf + pos, len - pos);
                    memcpy(buf + pos, sn, strlen(sn));
                    len += strlen(sn);
                }
            }
        }
        if (llm_tmpl_compile(&t, buf, len, err, sizeof(err)) == 0) {
            out = NULL;
            if (llm_tmpl_render_at(t, vars, FIXED_NOW, &out, &outlen, err,
                                   sizeof(err)) == 0)
            {
                rendered++;
                if (out == NULL || strlen(out) > outlen) {
                    failed++;
                }
            } else if (err[0] == '\0') {
                failed++;          /* an error must say something */
            }
            free(out);
            llm_tmpl_free(t);
        } else if (err[0] == '\0') {
            failed++;
        }
        free(buf);
        free(src);
    }
    tk_note("fuzz-templates: %u mutated templates, %zu rendered, %s\n",
            iters, rendered, failed ? "FAIL" : "ok");
    json_decref(vars);
    free_list(tmpls, nt);
    return failed != 0;
}

static int
fuzz_messages(void)
{
    char      **tmpls, path[1024], err[512], *src, *out, content[256];
    size_t      nt, slen, i, k, outlen, n;
    llm_tmpl_t *t;
    json_t     *vars, *msgs, *m;
    unsigned    iter, failed = 0, rendered = 0, iters = fuzz_iters(1500);
    const char *roles[] = { "system", "user", "assistant", "tool", "x" };

    tmpls = list_dir(DATA, ".jinja", &nt);
    if (nt == 0) {
        tk_note("fuzz-messages: SKIP, no test data\n");
        return 0;
    }
    for (iter = 0; iter < iters; iter++) {
        i = rnd() % nt;
        snprintf(path, sizeof(path), "%s/%s.jinja", DATA, tmpls[i]);
        src = tk_read_file(path, &slen);
        if (src == NULL || llm_tmpl_compile(&t, src, slen, err,
                                            sizeof(err)) != 0)
        {
            free(src);
            continue;
        }
        free(src);
        msgs = json_array();
        n = 1 + rnd() % 5;
        for (k = 0; k < n; k++) {
            size_t  cl = rnd() % sizeof(content), c;

            for (c = 0; c < cl; c++) {
                content[c] = (char) (rnd() % 4 ? 32 + rnd() % 95
                                     : rnd() % 256);
            }
            m = json_object();
            json_object_set_new(m, "role", json_string(roles[rnd() % 5]));
            if (rnd() % 8 == 0) {
                json_object_set_new(m, "content", json_null());
            } else if (rnd() % 8 == 0) {
                json_object_set_new(m, "content", json_integer(rnd()));
            } else {
                json_object_set_new(m, "content",
                                    json_stringn_nocheck(content, cl));
            }
            json_array_append_new(msgs, m);
        }
        vars = json_object();
        json_object_set_new(vars, "messages", msgs);
        json_object_set_new(vars, "add_generation_prompt",
                            json_boolean(rnd() % 2));
        json_object_set_new(vars, "bos_token", json_string("<s>"));
        out = NULL;
        if (llm_tmpl_render_at(t, vars, FIXED_NOW, &out, &outlen, err,
                               sizeof(err)) == 0)
        {
            rendered++;
            if (out == NULL) {
                failed++;
            }
        } else if (err[0] == '\0') {
            failed++;
        }
        free(out);
        json_decref(vars);
        llm_tmpl_free(t);
    }
    tk_note("fuzz-messages: %u random conversations, %u rendered, %s\n",
            iters, rendered, failed ? "FAIL" : "ok");
    free_list(tmpls, nt);
    return failed != 0;
}

/* Random templates from a small grammar: every construct, any nesting. */
static const char *const atoms[] = {
    "1", "0", "-3", "2.5", "'s'", "\"é😀\"", "none", "true", "x", "l", "d",
    "nope", "messages", "messages[0]", "l[1:]", "d.k", "d['k']", "[]",
    "{}", "[1, 'a', none]", "{'k': [1, 2]}", "(1, 2)", "range(3)",
    "ns.v", "loop.index", "loop", "m(1)", "'a,b'.split(',')", "l[-1]",
    "d.items()", "messages|length", "x ~ 'y'", "caller", "varargs",
};
static const char *const binops[] = {
    " + ", " - ", " * ", " / ", " // ", " % ", " ** ", " ~ ", " == ",
    " != ", " < ", " >= ", " in ", " not in ", " and ", " or ",
};
static const char *const filters[] = {
    "length", "string", "trim", "tojson", "tojson(indent=2)", "upper",
    "first", "last", "list", "items", "dictsort", "join(',')", "unique",
    "sort", "reverse", "int", "float", "abs", "default('z')", "safe",
    "selectattr('role')", "map(attribute='role')", "indent(2)", "title",
    "capitalize", "replace('a', 'b')", "min", "max", "sum", "round",
    "select('odd')", "reject('none')", "wordcount", "center(9)", "e",
};
static const char *const tests[] = {
    "defined", "none", "string", "mapping", "iterable", "sequence",
    "number", "odd", "even", "true", "divisibleby(2)", "eq 1", "in [1]",
    "lower", "callable", "boolean", "integer", "float",
};

typedef struct {
    char    *p;
    size_t   n, cap;
} gbuf_t;

static void
gput(gbuf_t *g, const char *s)
{
    size_t  l = strlen(s);

    if (g->n + l + 1 > g->cap) {
        g->cap = (g->n + l + 1) * 2;
        g->p = realloc(g->p, g->cap);
        if (g->p == NULL) {
            abort();
        }
    }
    memcpy(g->p + g->n, s, l + 1);
    g->n += l;
}

#define PICK(a)  a[rnd() % (sizeof(a) / sizeof(a[0]))]

static void
gen_expr(gbuf_t *g, int depth)
{
    switch (depth > 3 ? 0 : rnd() % 7) {
    case 0:
    case 1:
        gput(g, PICK(atoms));
        break;
    case 2:
        gen_expr(g, depth + 1);
        gput(g, PICK(binops));
        gen_expr(g, depth + 1);
        break;
    case 3:
        gen_expr(g, depth + 1);
        gput(g, "|");
        gput(g, PICK(filters));
        break;
    case 4:
        gen_expr(g, depth + 1);
        gput(g, rnd() % 2 ? " is " : " is not ");
        gput(g, PICK(tests));
        break;
    case 5:
        gput(g, "(");
        gen_expr(g, depth + 1);
        gput(g, " if ");
        gen_expr(g, depth + 1);
        gput(g, " else ");
        gen_expr(g, depth + 1);
        gput(g, ")");
        break;
    default:
        gput(g, rnd() % 2 ? "not " : "-");
        gen_expr(g, depth + 1);
    }
}

static void
gen_body(gbuf_t *g, int depth)
{
    int  k, n = 1 + (int) (rnd() % 3);

    for (k = 0; k < n; k++) {
        switch (depth > 4 ? 0 : rnd() % 9) {
        case 0:
            gput(g, rnd() % 2 ? "t\n " : "{{- ");
            if (g->p[g->n - 1] == ' ') {
                gen_expr(g, 0);
                gput(g, " -}}");
            }
            break;
        case 1:
            gput(g, "{{ ");
            gen_expr(g, 0);
            gput(g, " }}");
            break;
        case 2:
            gput(g, "{% for x in ");
            gen_expr(g, 1);
            gput(g, rnd() % 3 ? " %}" : " if x %}");
            gen_body(g, depth + 1);
            if (rnd() % 3 == 0) {
                gput(g, "{% else %}");
                gen_body(g, depth + 1);
            }
            gput(g, "{% endfor %}");
            break;
        case 3:
            gput(g, "{% if ");
            gen_expr(g, 1);
            gput(g, " %}");
            gen_body(g, depth + 1);
            if (rnd() % 2) {
                gput(g, "{% elif ");
                gen_expr(g, 1);
                gput(g, " %}");
                gen_body(g, depth + 1);
            }
            gput(g, "{% else %}");
            gen_body(g, depth + 1);
            gput(g, "{% endif %}");
            break;
        case 4:
            gput(g, rnd() % 2 ? "{% set x = " : "{% set ns.v = ");
            gen_expr(g, 1);
            gput(g, " %}");
            break;
        case 5:
            gput(g, "{% macro m(a, b=2) %}");
            gen_body(g, depth + 1);
            gput(g, "{% endmacro %}");
            break;
        case 6:
            gput(g, "{% set y %}");
            gen_body(g, depth + 1);
            gput(g, "{% endset %}{{ y|trim }}");
            break;
        case 7:
            gput(g, rnd() % 2 ? "{% break %}" : "{% continue %}");
            break;
        default:
            gput(g, "{% filter upper %}");
            gen_body(g, depth + 1);
            gput(g, "{% endfilter %}");
        }
    }
}

static int
fuzz_grammar(void)
{
    gbuf_t       g = { 0 };
    llm_tmpl_t  *t;
    json_t      *vars;
    json_error_t je;
    char         err[512], *out;
    size_t       outlen;
    unsigned     iter, iters = fuzz_iters(3000), compiled = 0, rendered = 0,
                 failed = 0;

    vars = json_loads("{\"x\": 3, \"l\": [1, 2, \"z\"], \"d\": {\"k\": \"v\", "
                      "\"n\": null}, \"messages\": [{\"role\": \"user\", "
                      "\"content\": \"hi\"}]}", 0, &je);
    if (vars == NULL) {
        return 1;
    }
    for (iter = 0; iter < iters; iter++) {
        g.n = 0;
        gput(&g, "{% set ns = namespace(v=0) %}");
        gen_body(&g, 0);
        if (llm_tmpl_compile(&t, g.p, g.n, err, sizeof(err)) != 0) {
            failed += err[0] == '\0';
            if (getenv("LLM_FUZZ_SHOW")) {
                tk_note("  compile error %s:\n%s\n", err, g.p);
            }
            continue;
        }
        compiled++;
        out = NULL;
        if (llm_tmpl_render_at(t, vars, FIXED_NOW, &out, &outlen, err,
                               sizeof(err)) == 0)
        {
            rendered++;
        } else {
            failed += err[0] == '\0';
        }
        free(out);
        llm_tmpl_free(t);
    }
    free(g.p);
    json_decref(vars);
    tk_note("fuzz-grammar: %u generated templates, %u compiled, %u rendered, "
            "%s\n", iters, compiled, rendered, failed ? "FAIL" : "ok");
    return failed != 0;
}

/* A template that must fail at compile (want_compile) or at render. */
static int
expect_error(const char *name, const char *src, int want_rc,
    const char *want_substr)
{
    llm_tmpl_t *t;
    char        err[512];
    char       *out = NULL;
    size_t      outlen;
    int         rc;

    rc = llm_tmpl_compile(&t, src, strlen(src), err, sizeof(err));
    if (rc == 0) {
        rc = llm_tmpl_render_at(t, NULL, FIXED_NOW, &out, &outlen, err,
                                sizeof(err));
        llm_tmpl_free(t);
        free(out);
    }
    if (rc == 0 || (want_rc && rc != want_rc)
        || (want_substr && strstr(err, want_substr) == NULL))
    {
        tk_note("limits: FAIL %s: rc %d, \"%s\"\n", name, rc,
                rc ? err : "(rendered)");
        return 1;
    }
    if (verbose) {
        tk_note("limits: %s -> %s\n", name, err);
    }
    return 0;
}

static int
limits(void)
{
    char   *deep;
    size_t  i, n = 20000;
    int     bad = 0;

    deep = malloc(2 * n + 16);
    if (deep == NULL) {
        return 1;
    }
    memcpy(deep, "{{ ", 3);
    for (i = 0; i < n; i++) {
        deep[3 + i] = '(';
    }
    deep[3 + n] = '1';
    for (i = 0; i < n; i++) {
        deep[4 + n + i] = ')';
    }
    memcpy(deep + 4 + 2 * n, " }}", 4);
    bad |= expect_error("deep parens", deep, -EINVAL, "nested too deeply");
    free(deep);
    bad |= expect_error("recursive macro",
                        "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",
                        -ELOOP, "recursion");
    bad |= expect_error("iterations",
                        "{% for i in range(100000) %}{% for j in "
                        "range(100000) %}{% endfor %}{% endfor %}",
                        -E2BIG, "iterations");
    bad |= expect_error("output",
                        "{% set ns = namespace(s='xxxxxxxxxxxxxxxx') %}"
                        "{% for i in range(30) %}{% set ns.s = ns.s ~ ns.s %}"
                        "{% endfor %}{{ ns.s }}", 0, NULL);
    bad |= expect_error("range", "{{ range(1000000) }}", -E2BIG, "Range");
    bad |= expect_error("work", "{% set big = range(100000)|list %}"
                        "{% for i in range(100000) %}{% if -1 in big %}"
                        "{% endif %}{% endfor %}", -E2BIG, "work limit");
    bad |= expect_error("self-holding namespace",
                        "{% set ns = namespace() %}{% set ns.me = ns %}"
                        "{{ ns }}", -ELOOP, "RecursionError");
    bad |= expect_error("deep list",
                        "{% set ns = namespace(l=[]) %}{% for i in "
                        "range(50000) %}{% set ns.l = [ns.l] %}{% endfor %}"
                        "{{ ns.l == ns.l }}{{ ns.l < ns.l }}", -ELOOP,
                        "RecursionError");
    bad |= expect_error("deep list tojson",
                        "{% set ns = namespace(l=[]) %}{% for i in "
                        "range(50000) %}{% set ns.l = [ns.l] %}{% endfor %}"
                        "{{ ns.l|tojson }}", -EINVAL, "recursion");
    bad |= expect_error("unknown tag", "a\n{% generation %}x"
                        "{% endgeneration %}", -EINVAL, "line 2");
    bad |= expect_error("unknown filter", "{{ x | from_json }}", -EINVAL,
                        "from_json");
    bad |= expect_error("raise", "{{ raise_exception('boom') }}", -EPERM,
                        "boom");
    bad |= expect_error("undefined attribute", "{{ foo.bar }}", -EINVAL,
                        "'foo' is undefined");
    bad |= expect_error("unsafe", "{% set l = [] %}{{ l.append(1) }}",
                        -EINVAL, "unsafe");
    {
        /* variables nested deeper than the renderer takes */
        json_t      *vars = json_object(), *deepj = json_array(), *x;
        llm_tmpl_t  *t;
        char         err[512], *out = NULL;
        size_t       outlen;
        int          rc;

        for (i = 0; i < 300; i++) {
            x = json_array();
            json_array_append_new(x, deepj);
            deepj = x;
        }
        json_object_set_new(vars, "messages", deepj);
        rc = llm_tmpl_compile(&t, "{{ messages }}", 14, err, sizeof(err));
        if (rc == 0) {
            rc = llm_tmpl_render(t, vars, &out, &outlen, err, sizeof(err));
            llm_tmpl_free(t);
        }
        if (rc != -EINVAL || strstr(err, "nested deeper") == NULL) {
            tk_note("limits: FAIL deep JSON: rc %d, \"%s\"\n", rc, err);
            bad = 1;
        }
        free(out);
        json_decref(vars);
    }
    tk_note("limits: depth, recursion, iterations, output, range, JSON "
            "depth, errors: %s\n", bad ? "FAIL" : "ok");
    return bad;
}

static int
chatml(void)
{
    llm_tmpl_t *t;
    char        err[512], *out = NULL;
    size_t      outlen;
    json_t     *vars;
    json_error_t je;
    int         bad = 0;
    const char *want =
        "<|im_start|>system\nYou are a helpful assistant.\n\n# Tools\n\n"
        "You may call one or more functions to assist with the user query."
        "\n\nYou are provided with function signatures within <tools>"
        "</tools> XML tags:\n<tools>\n{\"type\": \"function\", \"function\": "
        "{\"name\": \"f\"}}\n</tools>\n\nFor each function call, return a "
        "json object with function name and arguments within <tool_call>"
        "</tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, "
        "\"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n"
        "<|im_start|>user\nhi<|im_end|>\n"
        "<|im_start|>assistant\n<tool_call>\n{\"name\": \"f\", "
        "\"arguments\": {\"a\": 1}}\n</tool_call><|im_end|>\n"
        "<|im_start|>user\n<tool_response>\nok\n</tool_response><|im_end|>\n"
        "<|im_start|>assistant\n";

    vars = json_loads("{\"messages\": ["
        "{\"role\": \"system\", \"content\": \"You are a helpful assistant.\"},"
        "{\"role\": \"user\", \"content\": [{\"type\": \"text\", "
        "\"text\": \"hi\"}]},"
        "{\"role\": \"assistant\", \"content\": null, \"tool_calls\": "
        "[{\"id\": \"c1\", \"type\": \"function\", \"function\": "
        "{\"name\": \"f\", \"arguments\": {\"a\": 1}}}]},"
        "{\"role\": \"tool\", \"tool_call_id\": \"c1\", \"content\": \"ok\"}],"
        "\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\"}}],"
        "\"add_generation_prompt\": true}", 0, &je);
    if (vars == NULL
        || llm_tmpl_compile(&t, llm_tmpl_chatml, strlen(llm_tmpl_chatml),
                            err, sizeof(err)) != 0)
    {
        tk_note("chatml: FAIL compile: %s\n", err);
        json_decref(vars);
        return 1;
    }
    if (llm_tmpl_render(t, vars, &out, &outlen, err, sizeof(err)) != 0) {
        tk_note("chatml: FAIL render: %s\n", err);
        bad = 1;
    } else if (strcmp(out, want) != 0) {
        tk_note("chatml: FAIL output differs\n");
        show_diff(want, strlen(want), out, outlen);
        bad = 1;
    }
    free(out);
    llm_tmpl_free(t);
    json_decref(vars);
    tk_note("chatml: fallback with Hermes tools: %s\n", bad ? "FAIL" : "ok");
    return bad;
}

int
main(int argc, char **argv)
{
    const char *filter = NULL, *seed;
    int         i;

    seed = getenv("LLM_FUZZ_SEED");
    if (seed != NULL && strtoull(seed, NULL, 0) != 0) {
        rng = strtoull(seed, NULL, 0);
    }

    for (i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-v") == 0) {
            verbose = 1;
        } else if (strcmp(argv[i], "--cases") == 0 && i + 1 < argc) {
            /* a file in snippets.json's format, e.g. from
             * tools/ref/fuzz_templates.py */
            tk_begin("cases in %s", argv[i + 1]);
            CHECK(snippets(argv[i + 1], NULL) == 0);
            return tk_done();
        } else if (strcmp(argv[i], "--help") == 0) {
            printf("usage: test_template [-v] [TEMPLATE-SUBSTRING]\n"
                   "       test_template [-v] --cases FILE.json\n");
            return 0;
        } else {
            filter = argv[i];
        }
    }
    /* each part prints its findings as notes and returns nonzero when one
     * failed */
    tk_begin("golden: every template and conversation as jinja2");
    CHECK(golden(filter) == 0, "golden");
    tk_begin("snippets");
    CHECK(snippets(NULL, filter) == 0, "snippets");
    if (filter == NULL) {
        tk_begin("random snippets");
        CHECK(snippets(DATA "/random.json", NULL) == 0, "random.json");
        tk_begin("limits");
        CHECK(limits() == 0, "limits");
        tk_begin("chatml fallback with Hermes tools");
        CHECK(chatml() == 0, "chatml");
        tk_begin("fuzz-templates");
        CHECK(fuzz_templates() == 0, "fuzz-templates");
        tk_begin("fuzz-messages");
        CHECK(fuzz_messages() == 0, "fuzz-messages");
        tk_begin("fuzz-grammar");
        CHECK(fuzz_grammar() == 0, "fuzz-grammar");
    }
    return tk_done();
}
