/*
 * Prompt building.  See prompt.h.
 *
 * Tool-call arguments are handed to the template as a JSON object when
 * they parse as one (templates such as Qwen's write them with `| tojson`),
 * otherwise as the string the client sent.
 */

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "prompt.h"

static json_t *
llm_token_text(const llm_vocab_t *v, int32_t id)
{
    const char *p;
    size_t      n = 0;

    if (id < 0) {
        return json_string("");
    }
    p = llm_token_bytes(v, id, 1, &n);
    return p ? json_stringn(p, n) : json_string("");
}

static json_t *
llm_message_json(const Llm__Message *m)
{
    json_t *o = json_object(), *calls, *c, *f, *args;

    if (o == NULL) {
        return NULL;
    }
    json_object_set_new(o, "role", json_string(m->role));
    json_object_set_new(o, "content", m->content_null ? json_null()
                                                      : json_string(m->content));
    if (m->n_tool_calls) {
        calls = json_array();
        for (size_t i = 0; i < m->n_tool_calls; i++) {
            const Llm__ToolCall *t = m->tool_calls[i];

            c = json_object();
            f = json_object();
            json_object_set_new(c, "id", json_string(t->id));
            json_object_set_new(c, "type",
                                json_string(t->type[0] ? t->type
                                                       : "function"));
            json_object_set_new(f, "name", json_string(t->name));
            args = json_loads(t->arguments, JSON_DECODE_ANY, NULL);
            if (args == NULL || !json_is_object(args)) {
                json_decref(args);
                args = json_string(t->arguments);
            }
            json_object_set_new(f, "arguments", args);
            json_object_set_new(c, "function", f);
            json_array_append_new(calls, c);
        }
        json_object_set_new(o, "tool_calls", calls);
    }
    if (m->tool_call_id[0]) {
        json_object_set_new(o, "tool_call_id", json_string(m->tool_call_id));
    }
    if (m->name[0]) {
        json_object_set_new(o, "name", json_string(m->name));
    }
    if (m->reasoning_content[0]) {
        json_object_set_new(o, "reasoning_content",
                            json_string(m->reasoning_content));
    }
    return o;
}

/*
 * A copy of j with every string and object key passed through the guard
 * (a new reference; a string or scalar that needs no guard is j itself).
 * NULL on out of memory.  Depth is bounded by jansson's parser (2048).
 */
static json_t *
guard_json(const llm_tok_guard_t *g, json_t *j)
{
    json_t      *o, *x;
    const char  *k;
    char        *gs;
    size_t       gn, i;
    int          rc;

    switch (json_typeof(j)) {
    case JSON_STRING:
        rc = llm_tok_guard(g, json_string_value(j), json_string_length(j),
                           &gs, &gn);
        if (rc <= 0) {
            return rc < 0 ? NULL : json_incref(j);
        }
        o = json_stringn(gs, gn);
        free(gs);
        return o;
    case JSON_ARRAY:
        o = json_array();
        if (o == NULL) {
            return NULL;
        }
        json_array_foreach(j, i, x) {
            if (json_array_append_new(o, guard_json(g, x)) != 0) {
                json_decref(o);
                return NULL;
            }
        }
        return o;
    case JSON_OBJECT:
        o = json_object();
        if (o == NULL) {
            return NULL;
        }
        json_object_foreach(j, k, x) {
            rc = llm_tok_guard(g, k, strlen(k), &gs, &gn);
            if (rc < 0
                || json_object_set_new(o, rc ? gs : k, guard_json(g, x)) != 0)
            {
                free(gs);
                json_decref(o);
                return NULL;
            }
            free(gs);
        }
        return o;
    default:
        return json_incref(j);
    }
}

/* *x = its guarded copy (no-op without a guard).  0 or -ENOMEM. */
static int
guard_replace(const llm_tok_guard_t *g, json_t **x)
{
    json_t  *y;

    if (g == NULL) {
        return 0;
    }
    y = guard_json(g, *x);
    json_decref(*x);
    *x = y;
    return y ? 0 : -ENOMEM;
}

/*
 * The template variables; with a guard, every string that came from the
 * request (messages, tools, chat_template_kwargs; keys included) carries
 * the tokenizer's guards.
 */
static int
prompt_vars(const llm_vocab_t *v, const llm_tok_guard_t *guard,
    const Llm__GenerateRequest *g, json_t **out, const char **param,
    char *err, size_t errlen)
{
    json_t       *vars = json_object(), *msgs = json_array(), *x;
    json_error_t  je;
    int           rc = -EINVAL;

    *out = NULL;

    if (vars == NULL || msgs == NULL) {
        goto nomem;
    }
    for (size_t i = 0; i < g->n_messages; i++) {
        if (g->messages[i]->role[0] == '\0') {
            *param = "messages";
            snprintf(err, errlen, "messages[%zu]: the role is empty", i);
            goto invalid;
        }
        x = llm_message_json(g->messages[i]);
        if (x == NULL || guard_replace(guard, &x) != 0
            || json_array_append_new(msgs, x) != 0)
        {
            goto nomem;
        }
    }
    json_object_set_new(vars, "messages", msgs);
    msgs = NULL;

    if (g->tools_json[0]) {
        x = json_loads(g->tools_json, 0, &je);
        if (x == NULL || !json_is_array(x)) {
            json_decref(x);
            *param = "tools";
            snprintf(err, errlen, "tools: not a JSON array (%s at %d)",
                     x ? "wrong type" : je.text, x ? 0 : je.position);
            goto invalid;
        }
        if (guard_replace(guard, &x) != 0) {
            goto nomem;
        }
        if (json_array_size(x) > 0) {
            json_object_set_new(vars, "tools", x);
        } else {
            json_decref(x);
        }
    }
    json_object_set_new(vars, "add_generation_prompt", json_true());
    json_object_set_new(vars, "bos_token", llm_token_text(v, llm_vocab_bos(v)));
    json_object_set_new(vars, "eos_token", llm_token_text(v, llm_vocab_eos(v)));

    if (g->chat_template_kwargs_json[0]) {
        x = json_loads(g->chat_template_kwargs_json, 0, &je);
        if (x == NULL || !json_is_object(x)) {
            json_decref(x);
            *param = "chat_template_kwargs";
            snprintf(err, errlen, "chat_template_kwargs: not a JSON object");
            goto invalid;
        }
        if (guard_replace(guard, &x) != 0) {
            goto nomem;
        }
        json_object_update(vars, x);
        json_decref(x);
    }
    *out = vars;
    return 0;

nomem:
    snprintf(err, errlen, "out of memory");
    rc = -ENOMEM;

invalid:
    json_decref(msgs);
    json_decref(vars);
    return rc;
}

json_t *
llm_prompt_vars(const llm_vocab_t *v, const Llm__GenerateRequest *g,
    const char **param, char *err, size_t errlen)
{
    json_t  *vars;

    prompt_vars(v, NULL, g, &vars, param, err, errlen);
    return vars;
}

/*
 * A completion prompt is the client's own raw text: tokenized as
 * llama.cpp's server does (special tokens parsed, BOS/EOS as the
 * vocabulary asks).  A chat is rendered with every request string
 * guarded, and tokenized so that special tokens come from the template's
 * markup only.
 */
int
llm_prompt_build(const llm_tmpl_t *tmpl, const llm_vocab_t *v,
    const Llm__GenerateRequest *g, llm_tokens_t *out, const char **param,
    char *err, size_t errlen)
{
    llm_tok_guard_t  *guard = NULL;
    json_t           *vars;
    const char       *src;
    char             *text = NULL;
    size_t            len = 0, srclen;
    int               rc;

    if (g->is_completion) {
        *param = "prompt";
        return llm_tokenize(v, g->prompt, strlen(g->prompt),
                            LLM_TOK_ADD_SPECIAL | LLM_TOK_PARSE_SPECIAL, out,
                            err, errlen);
    }
    *param = "messages";
    if (g->n_messages == 0) {
        snprintf(err, errlen, "messages: at least one message is required");
        return -EINVAL;
    }
    src = llm_tmpl_source(tmpl, &srclen);
    guard = llm_tok_guard_new(v, src, srclen);
    if (guard == NULL) {
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    rc = prompt_vars(v, guard, g, &vars, param, err, errlen);
    llm_tok_guard_free(guard);
    if (rc != 0) {
        return rc;
    }
    rc = llm_tmpl_render(tmpl, vars, &text, &len, err, errlen);
    json_decref(vars);
    if (rc != 0) {
        *param = "messages";
        return rc == -EPERM ? -EINVAL : rc;
    }
    rc = llm_tokenize(v, text, len, LLM_TOK_PARSE_SPECIAL | LLM_TOK_GUARDED,
                      out, err, errlen);
    free(text);
    return rc;
}

const char *
llm_prompt_tool_format(const char *src, size_t len)
{
    static const struct {
        const char *needle;
        const char *name;
    } f[] = {
        { "<minimax:tool_call>", "minimax-m2" },
        { "<tool_call>", "hermes" },
        { "[TOOL_CALLS]", "mistral" },
        { "<｜tool▁calls▁begin｜>", "deepseek-v3" },
        { "<|python_tag|>", "llama3-json" },
        { "\"parameters\": ", "llama3-json" },
    };

    for (size_t i = 0; i < sizeof(f) / sizeof(f[0]); i++) {
        if (src && memmem(src, len, f[i].needle, strlen(f[i].needle))) {
            return f[i].name;
        }
    }
    return "none";
}
