/*
 * From the protocol's types to the engine's.  See wire.h.
 *
 * Tool-call arguments are handed to the template as a JSON object when
 * they parse as one (templates such as Qwen's write them with `| tojson`),
 * otherwise as the string the client sent.
 */

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "wire.h"

/* One message as the chat template sees it; NULL on out of memory. */
static json_t *
llm_wire_message(const Llm__Message *m)
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

/* The messages of a chat (none for a completion).  0 or -ENOMEM. */
static int
llm_wire_messages(llm_request_t *r, const Llm__GenerateRequest *g)
{
    json_t  *x;

    if (g->is_completion) {
        return 0;
    }
    r->messages = json_array();
    if (r->messages == NULL) {
        return -ENOMEM;
    }
    for (size_t i = 0; i < g->n_messages; i++) {
        x = llm_wire_message(g->messages[i]);
        if (x == NULL || json_array_append_new(r->messages, x) != 0) {
            return -ENOMEM;
        }
    }
    return 0;
}

/* Sampling as asked (absent: every option off).  0 or -ENOMEM. */
static int
llm_wire_sampling(llm_req_sampling_t *o, const Llm__Sampling *sm)
{
    if (sm == NULL) {
        return 0;
    }
    o->n = sm->n;
    o->max_tokens = sm->max_tokens;
    o->temperature = sm->temperature;
    o->top_p = sm->top_p;
    o->top_k = sm->top_k;
    o->min_p = sm->min_p;
    o->presence_penalty = sm->presence_penalty;
    o->frequency_penalty = sm->frequency_penalty;
    o->repetition_penalty = sm->repetition_penalty;
    o->has_seed = sm->has_seed;
    o->seed = sm->seed;
    o->logprobs = sm->logprobs;
    o->top_logprobs = sm->top_logprobs;
    o->ignore_eos = sm->ignore_eos;
    if (sm->n_logit_bias) {
        o->bias_ids = calloc(sm->n_logit_bias, sizeof(int32_t));
        o->bias_vals = calloc(sm->n_logit_bias, sizeof(float));
        if (o->bias_ids == NULL || o->bias_vals == NULL) {
            return -ENOMEM;
        }
        for (size_t i = 0; i < sm->n_logit_bias; i++) {
            o->bias_ids[i] = sm->logit_bias[i]->key;
            o->bias_vals[i] = sm->logit_bias[i]->value;
        }
        o->n_bias = sm->n_logit_bias;
    }
    if (sm->n_stop) {
        o->stop = calloc(sm->n_stop, sizeof(char *));
        if (o->stop == NULL) {
            return -ENOMEM;
        }
        for (size_t i = 0; i < sm->n_stop; i++) {
            o->stop[i] = sm->stop[i];
        }
        o->n_stop = sm->n_stop;
    }
    return 0;
}

int
llm_wire_request(llm_request_t *r, const Llm__GenerateRequest *g,
    char *err, size_t errlen)
{
    llm_request_init(r);
    r->request_id = g->request_id ? g->request_id : "";
    r->is_completion = g->is_completion;
    r->prompt = g->prompt ? g->prompt : "";
    r->echo = g->echo;
    r->parallel_tool_calls = g->parallel_tool_calls;
    /* a completion has no tools: they are not even parsed */
    if (llm_wire_messages(r, g) != 0
        || llm_wire_sampling(&r->sampling, g->sampling) != 0
        || (!g->is_completion
            && llm_request_set_tools(r, g->tools_json) != 0)
        || llm_request_set_tool_choice(r, g->tool_choice_json) != 0
        || llm_request_set_response_format(r, g->response_format_json) != 0
        || (!g->is_completion
            && llm_request_set_template_kwargs(r,
                   g->chat_template_kwargs_json) != 0))
    {
        llm_request_free(r);
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    return 0;
}
