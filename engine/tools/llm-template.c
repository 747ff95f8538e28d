/*
 * llm-template: render a chat template the way the engine does, for
 * debugging prompts.
 *
 *   llm-template -m MODEL.gguf | --template FILE.jinja
 *                --messages FILE.json [--tools FILE.json]
 *                [--add-generation-prompt] [--var KEY=VALUE]...
 *                [--bos TEXT] [--eos TEXT] [--now EPOCH] [--bench N]
 *
 * Prints the rendered prompt exactly (no newline added), or the
 * template's error on stderr with exit status 1.
 */

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "model/gguf.h"
#include "template/template.h"
#include "readfile.h"

static void
usage(FILE *f)
{
    fprintf(f,
        "usage: llm-template (-m MODEL.gguf | --template FILE.jinja)\n"
        "                    --messages FILE.json [--tools FILE.json]\n"
        "                    [--add-generation-prompt] [--var KEY=VALUE]...\n"
        "                    [--bos TEXT] [--eos TEXT] [--now EPOCH]\n"
        "                    [--bench N]\n"
        "\n"
        "Renders the chat template (the GGUF's tokenizer.chat_template, or\n"
        "a Jinja file; a GGUF without one falls back to ChatML) with the\n"
        "messages and prints the prompt exactly, or the error (exit 1).\n"
        "\n"
        "  -m FILE                 read the template and the bos/eos token\n"
        "                          text from a GGUF model or vocabulary\n"
        "  --template FILE         a Jinja template file\n"
        "  --chatml                the built-in ChatML fallback template\n"
        "  --messages FILE         a JSON array of messages, or an object\n"
        "                          with \"messages\" (and \"tools\", ...),\n"
        "                          e.g. an OpenAI request body\n"
        "  --tools FILE            a JSON array of tools\n"
        "  --add-generation-prompt end with the assistant turn opener\n"
        "  --var KEY=VALUE         another template variable; VALUE is\n"
        "                          JSON if it parses, else a string\n"
        "  --bos TEXT, --eos TEXT  bos_token / eos_token (override -m)\n"
        "  --now EPOCH             strftime_now() formats this UTC instant\n"
        "  --bench N               compile and render N times; print the mean\n"
        "                          microseconds of each (wall and CPU) to\n"
        "                          stderr before the prompt\n"
        "  --help                  this text\n");
}

/* The text of the token whose id is stored under key, or NULL. */
static json_t *
token_text(llm_gguf_t *g, const char *key)
{
    const llm_gguf_str_t  *toks;
    uint64_t               n;
    uint32_t               id;
    char                   err[256];

    if (llm_gguf_get_u32(g, key, &id, err, sizeof(err)) != 0
        || llm_gguf_get_str_arr(g, "tokenizer.ggml.tokens", &n, &toks, err,
                                sizeof(err)) != 0
        || id >= n)
    {
        return NULL;
    }
    return json_stringn(toks[id].ptr, toks[id].len);
}

static double
clock_us(clockid_t id)
{
    struct timespec  ts;

    clock_gettime(id, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

/* Mean cost of a compile and of a render, wall and process CPU time. */
static int
run_bench(const char *src, size_t len, json_t *vars, long long now,
    long long n)
{
    llm_tmpl_t  *t;
    char         err[1024], *out;
    size_t       outlen = 0;
    double       w0, c0, w1, c1, w2, c2;
    long long    i;

    w0 = clock_us(CLOCK_MONOTONIC);
    c0 = clock_us(CLOCK_PROCESS_CPUTIME_ID);
    for (i = 0; i < n; i++) {
        if (llm_tmpl_compile(&t, src, len, err, sizeof(err)) != 0) {
            fprintf(stderr, "llm-template: %s\n", err);
            return -1;
        }
        llm_tmpl_free(t);
    }
    w1 = clock_us(CLOCK_MONOTONIC);
    c1 = clock_us(CLOCK_PROCESS_CPUTIME_ID);
    if (llm_tmpl_compile(&t, src, len, err, sizeof(err)) != 0) {
        return -1;
    }
    w1 = clock_us(CLOCK_MONOTONIC);
    c1 = clock_us(CLOCK_PROCESS_CPUTIME_ID);
    for (i = 0; i < n; i++) {
        if (llm_tmpl_render_at(t, vars, now, &out, &outlen, err,
                               sizeof(err)) != 0)
        {
            fprintf(stderr, "llm-template: %s\n", err);
            llm_tmpl_free(t);
            return -1;
        }
        free(out);
    }
    w2 = clock_us(CLOCK_MONOTONIC);
    c2 = clock_us(CLOCK_PROCESS_CPUTIME_ID);
    llm_tmpl_free(t);
    fprintf(stderr, "bench: %lld runs, template %zu bytes, prompt %zu bytes: "
            "compile %.1f us wall / %.1f us cpu, render %.1f us wall / "
            "%.1f us cpu\n", n, len, outlen, (w1 - w0) / (double) n,
            (c1 - c0) / (double) n, (w2 - w1) / (double) n,
            (c2 - c1) / (double) n);
    return 0;
}

int
main(int argc, char **argv)
{
    const char     *model = NULL, *tmpl_path = NULL, *msgs_path = NULL,
                   *tools_path = NULL, *eq;
    char           *src = NULL, *out = NULL, err[1024], key[256];
    size_t          len = 0, outlen;
    int             i, agp = 0, chatml = 0, rc = 1;
    long long       now = -1, bench = 0;
    json_t         *vars, *j, *bos = NULL, *eos = NULL;
    json_error_t    je;
    llm_tmpl_t     *t = NULL;
    llm_gguf_t     *g = NULL;
    llm_gguf_str_t  s;

    vars = json_object();
    if (vars == NULL) {
        return 1;
    }
    for (i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;

        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            json_decref(vars);
            return 0;
        } else if (strcmp(a, "--add-generation-prompt") == 0) {
            agp = 1;
        } else if (strcmp(a, "--chatml") == 0) {
            chatml = 1;
        } else if (v == NULL) {
            fprintf(stderr, "llm-template: %s needs a value (see --help)\n",
                    a);
            goto done;
        } else if (strcmp(a, "-m") == 0) {
            model = argv[++i];
        } else if (strcmp(a, "--template") == 0) {
            tmpl_path = argv[++i];
        } else if (strcmp(a, "--messages") == 0) {
            msgs_path = argv[++i];
        } else if (strcmp(a, "--tools") == 0) {
            tools_path = argv[++i];
        } else if (strcmp(a, "--bos") == 0) {
            json_decref(bos);
            bos = json_string(argv[++i]);
        } else if (strcmp(a, "--eos") == 0) {
            json_decref(eos);
            eos = json_string(argv[++i]);
        } else if (strcmp(a, "--now") == 0) {
            now = strtoll(argv[++i], NULL, 10);
        } else if (strcmp(a, "--bench") == 0) {
            bench = strtoll(argv[++i], NULL, 10);
        } else if (strcmp(a, "--var") == 0) {
            v = argv[++i];
            eq = strchr(v, '=');
            if (eq == NULL || eq == v || (size_t) (eq - v) >= sizeof(key)) {
                fprintf(stderr, "llm-template: --var wants KEY=VALUE, got "
                        "\"%s\"\n", v);
                goto done;
            }
            memcpy(key, v, (size_t) (eq - v));
            key[eq - v] = '\0';
            j = json_loads(eq + 1, JSON_DECODE_ANY, &je);
            if (j == NULL) {
                j = json_string(eq + 1);
            }
            json_object_set_new(vars, key, j);
        } else {
            fprintf(stderr, "llm-template: unknown option %s (see --help)\n",
                    a);
            goto done;
        }
    }
    if ((model != NULL) + (tmpl_path != NULL) + chatml != 1
        || msgs_path == NULL)
    {
        fprintf(stderr, "llm-template: need one of -m / --template / "
                "--chatml, and --messages (see --help)\n");
        goto done;
    }

    if (model != NULL) {
        if (llm_gguf_open(&g, model, err, sizeof(err)) != 0) {
            fprintf(stderr, "llm-template: %s\n", err);
            goto done;
        }
        if (llm_gguf_get_str(g, "tokenizer.chat_template", &s, err,
                             sizeof(err)) == 0)
        {
            src = malloc(s.len + 1);
            if (src == NULL) {
                goto done;
            }
            memcpy(src, s.ptr, s.len);
            src[s.len] = '\0';
            len = s.len;
        } else {
            fprintf(stderr, "llm-template: %s has no tokenizer.chat_template;"
                    " using the ChatML fallback\n", model);
            chatml = 1;
        }
        if (bos == NULL) {
            bos = token_text(g, "tokenizer.ggml.bos_token_id");
        }
        if (eos == NULL) {
            eos = token_text(g, "tokenizer.ggml.eos_token_id");
        }
    } else if (tmpl_path != NULL) {
        src = llm_read_file(tmpl_path, &len);
        if (src == NULL) {
            fprintf(stderr, "llm-template: %s: %s\n", tmpl_path,
                    strerror(errno));
            goto done;
        }
    }
    if (chatml) {
        free(src);
        src = strdup(llm_tmpl_chatml);
        if (src == NULL) {
            goto done;
        }
        len = strlen(src);
    }

    j = json_load_file(msgs_path, 0, &je);
    if (j == NULL) {
        fprintf(stderr, "llm-template: %s:%d: %s\n", msgs_path, je.line,
                je.text);
        goto done;
    }
    if (json_is_array(j)) {
        json_object_set_new(vars, "messages", j);
    } else if (json_is_object(j) && json_is_array(json_object_get(j,
                                                              "messages")))
    {
        /* every key of the object is a variable (messages, tools, ...) */
        json_object_update_missing(vars, j);
        json_decref(j);
    } else {
        fprintf(stderr, "llm-template: %s: expected an array of messages or "
                "an object with \"messages\"\n", msgs_path);
        json_decref(j);
        goto done;
    }
    if (tools_path != NULL) {
        j = json_load_file(tools_path, 0, &je);
        if (j == NULL) {
            fprintf(stderr, "llm-template: %s:%d: %s\n", tools_path, je.line,
                    je.text);
            goto done;
        }
        json_object_set_new(vars, "tools", j);
    }
    if (agp || json_object_get(vars, "add_generation_prompt") == NULL) {
        json_object_set_new(vars, "add_generation_prompt",
                            json_boolean(agp));
    }
    json_object_set_new(vars, "bos_token", bos ? bos : json_string(""));
    json_object_set_new(vars, "eos_token", eos ? eos : json_string(""));
    bos = eos = NULL;

    if (bench > 0 && run_bench(src, len, vars, now, bench) != 0) {
        goto done;
    }
    if (llm_tmpl_compile(&t, src, len, err, sizeof(err)) != 0) {
        fprintf(stderr, "llm-template: %s: %s\n",
                model ? model : tmpl_path ? tmpl_path : "chatml", err);
        goto done;
    }
    if (llm_tmpl_render_at(t, vars, now, &out, &outlen, err, sizeof(err))
        != 0)
    {
        fprintf(stderr, "llm-template: %s\n", err);
        goto done;
    }
    if (fwrite(out, 1, outlen, stdout) != outlen || fflush(stdout) != 0) {
        fprintf(stderr, "llm-template: write error\n");
        goto done;
    }
    rc = 0;

done:
    free(out);
    free(src);
    llm_tmpl_free(t);
    llm_gguf_close(g);
    json_decref(bos);
    json_decref(eos);
    json_decref(vars);
    return rc;
}
