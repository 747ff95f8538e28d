/*
 * Prompt building.  See prompt.h.
 */

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "prompt.h"
#include "decode/reasoning.h"

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
 * Whether a template knows the developer role: its source names it.  A
 * template that does not (most of them: Qwen, Llama, Mistral) would skip
 * such a message, so it is given to it as a system message, as OpenAI
 * treats developer messages for models without their own role.
 */
static int
tmpl_has_developer(const llm_tmpl_t *tmpl)
{
    const char  *src;
    size_t       len = 0;

    src = tmpl ? llm_tmpl_source(tmpl, &len) : NULL;
    return src != NULL && memmem(src, len, "developer", 9) != NULL;
}

/*
 * One message as the template sees it: x itself (a new reference), or a
 * shallow copy: a developer message with role "system" (dev_as_system),
 * an assistant message's reasoning_content also as "thinking" (the name
 * gpt-oss's template reads).  NULL on out of memory.
 */
static json_t *
prompt_message(json_t *x, int dev_as_system)
{
    const char  *role = json_string_value(json_object_get(x, "role"));
    json_t      *rc = json_object_get(x, "reasoning_content"), *c;
    int          dev, think;

    dev = dev_as_system && role != NULL && strcmp(role, "developer") == 0;
    think = rc != NULL && json_object_get(x, "thinking") == NULL;
    if (!dev && !think) {
        return json_incref(x);
    }
    c = json_copy(x);
    if (c == NULL
        || (dev && json_object_set_new(c, "role", json_string("system")) != 0)
        || (think && json_object_set(c, "thinking", rc) != 0))
    {
        json_decref(c);
        return NULL;
    }
    return c;
}

/* The messages the template sees (prompt_message); NULL: no memory. */
static json_t *
prompt_messages(json_t *msgs, int dev_as_system)
{
    json_t      *o, *x, *c;
    size_t       i;

    o = json_array();
    if (o == NULL || msgs == NULL) {
        return o;
    }
    json_array_foreach(msgs, i, x) {
        c = prompt_message(x, dev_as_system);
        if (c == NULL) {
            json_decref(o);
            return NULL;
        }
        if (json_array_append_new(o, c) != 0) {
            json_decref(o);
            return NULL;
        }
    }
    return o;
}

/*
 * The template variables; with a guard, every string that came from the
 * request (messages, tools, chat_template_kwargs; keys included) carries
 * the tokenizer's guards.  dev_as_system: developer messages become
 * system messages (prompt_messages).
 */
static int
prompt_vars(const llm_vocab_t *v, const llm_tok_guard_t *guard,
    const llm_request_t *rq, int dev_as_system, json_t **out,
    const char **param, char *err, size_t errlen)
{
    json_t       *vars = json_object(), *msgs = NULL, *x;
    size_t        i;
    int           rc = -EINVAL;

    *out = NULL;

    if (vars == NULL) {
        goto nomem;
    }
    json_array_foreach(rq->messages, i, x) {
        const char *role = json_string_value(json_object_get(x, "role"));

        if (role == NULL || role[0] == '\0') {
            *param = "messages";
            snprintf(err, errlen, "messages[%zu]: the role is empty", i);
            goto invalid;
        }
    }
    msgs = prompt_messages(rq->messages, dev_as_system);
    if (msgs == NULL || guard_replace(guard, &msgs) != 0) {
        goto nomem;
    }
    json_object_set_new(vars, "messages", msgs);
    msgs = NULL;

    if (rq->tools_bad) {
        *param = "tools";
        snprintf(err, errlen, "%s", rq->tools_bad);
        goto invalid;
    }
    if (rq->tools) {
        x = json_incref(rq->tools);
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

    if (rq->template_kwargs_bad) {
        *param = "chat_template_kwargs";
        snprintf(err, errlen, "chat_template_kwargs: not a JSON object");
        goto invalid;
    }
    if (rq->template_kwargs) {
        x = json_incref(rq->template_kwargs);
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
llm_prompt_vars(const llm_vocab_t *v, const llm_request_t *rq,
    const char **param, char *err, size_t errlen)
{
    json_t  *vars;

    prompt_vars(v, NULL, rq, 0, &vars, param, err, errlen);
    return vars;
}

/*
 * A completion prompt given as token ids: those ids, each checked against
 * the vocabulary (-EINVAL naming the first one out of it).
 */
static int
prompt_ids(const llm_vocab_t *v, const int32_t *ids, size_t n,
    llm_tokens_t *out, char *err, size_t errlen)
{
    uint32_t  nv = llm_vocab_n_tokens(v);

    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || (uint32_t) ids[i] >= nv) {
            snprintf(err, errlen, "prompt[%zu]: token id %d is not in the "
                     "vocabulary (0..%u)", i, (int) ids[i], nv - 1);
            return -EINVAL;
        }
        if (llm_tokens_push(out, ids[i]) != 0) {
            snprintf(err, errlen, "out of memory");
            return -ENOMEM;
        }
    }
    return 0;
}

/*
 * A completion prompt is the client's own raw text: tokenized as
 * llama.cpp's server does (special tokens parsed, BOS/EOS as the
 * vocabulary asks), or its token ids as they are.  A chat is rendered with every request string
 * guarded (developer messages as system ones when the template has no
 * developer role), and tokenized so that special tokens come from the
 * template's markup only.
 */
int
llm_prompt_build(const llm_tmpl_t *tmpl, const llm_vocab_t *v,
    const llm_request_t *rq, llm_tokens_t *out, const char **param,
    char *err, size_t errlen)
{
    llm_tok_guard_t  *guard = NULL;
    json_t           *vars;
    const char       *src;
    char             *text = NULL;
    size_t            len = 0, srclen;
    int               rc;

    if (rq->is_completion && rq->n_prompts) {
        return llm_prompt_build_nth(v, rq, 0, out, param, err, errlen);
    }
    if (rq->is_completion && rq->n_prompt_ids) {
        *param = "prompt";
        return prompt_ids(v, rq->prompt_ids, rq->n_prompt_ids, out, err,
                          errlen);
    }
    if (rq->is_completion) {
        *param = "prompt";
        return llm_tokenize(v, rq->prompt, strlen(rq->prompt),
                            LLM_TOK_ADD_SPECIAL | LLM_TOK_PARSE_SPECIAL, out,
                            err, errlen);
    }
    *param = "messages";
    if (json_array_size(rq->messages) == 0) {
        snprintf(err, errlen, "messages: at least one message is required");
        return -EINVAL;
    }
    src = llm_tmpl_source(tmpl, &srclen);
    guard = llm_tok_guard_new(v, src, srclen);
    if (guard == NULL) {
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    rc = prompt_vars(v, guard, rq, !tmpl_has_developer(tmpl), &vars, param,
                     err, errlen);
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

int
llm_prompt_build_nth(const llm_vocab_t *v, const llm_request_t *rq,
    size_t i, llm_tokens_t *out, const char **param, char *err,
    size_t errlen)
{
    const llm_req_prompt_t  *p = &rq->prompts[i];
    char                     e[256];
    int                      rc;

    *param = "prompt";
    if (p->n_ids) {
        rc = prompt_ids(v, p->ids, p->n_ids, out, e, sizeof(e));
    } else {
        rc = llm_tokenize(v, p->text, strlen(p->text),
                          LLM_TOK_ADD_SPECIAL | LLM_TOK_PARSE_SPECIAL, out,
                          e, sizeof(e));
    }
    if (rc != 0) {
        snprintf(err, errlen, "prompt %zu: %s", i, e);
    }
    return rc;
}

const char *
llm_prompt_tool_format(const char *src, size_t len)
{
    static const struct {
        const char *needle;
        const char *name;
    } f[] = {
        { "<|channel|>", "harmony" },       /* gpt-oss */
        { "<minimax:tool_call>", "minimax-m2" },
        { "<|tool_calls_section_begin|>", "kimi-k2" },
        { "</arg_key><arg_value>", "glm4.7" },  /* compact, no newlines */
        { "<arg_key>", "glm4.5" },          /* GLM's <tool_call> too */
        { "<tool_call>", "hermes" },
        { "[TOOL_CALLS]", "mistral" },
        { "<｜tool▁calls▁begin｜>", "deepseek-v3" },
        { "<|python_tag|>", "llama3-json" },
        { "\"parameters\": ", "llama3-json" },
    };

    /* Qwen3-Coder, Qwen3.5 (and the templates that copied them): XML
     * calls in <tool_call> blocks; <function= alone is functionary's or
     * Seed-OSS' (not this family) */
    if (src && memmem(src, len, "<tool_call>", 11)
        && memmem(src, len, "<function=", 10)
        && memmem(src, len, "<parameter=", 11))
    {
        return "qwen3-coder";
    }
    for (size_t i = 0; i < sizeof(f) / sizeof(f[0]); i++) {
        if (src && memmem(src, len, f[i].needle, strlen(f[i].needle))) {
            return f[i].name;
        }
    }
    return "none";
}

int
llm_prompt_reasoning_format(const char *src, size_t len)
{
    if (src != NULL && memmem(src, len, "<|channel|>", 11) != NULL) {
        return LLM_REASONING_HARMONY;
    }
    return src != NULL && memmem(src, len, "</think>", 8) != NULL
           ? LLM_REASONING_THINK : LLM_REASONING_NONE;
}
