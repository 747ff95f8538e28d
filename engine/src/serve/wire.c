/*
 * Between the protocol's types and the engine's.  See wire.h.
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
    if (g->is_completion && g->n_prompt_token_ids) {
        r->prompt_ids = g->prompt_token_ids;
        r->n_prompt_ids = g->n_prompt_token_ids;
    }
    if (g->is_completion && g->n_prompts > 1) {
        r->prompts = calloc(g->n_prompts, sizeof(llm_req_prompt_t));
        if (r->prompts == NULL) {
            snprintf(err, errlen, "out of memory");
            return -ENOMEM;
        }
        for (size_t i = 0; i < g->n_prompts; i++) {
            r->prompts[i].text = g->prompts[i]->text ? g->prompts[i]->text
                                                     : "";
            r->prompts[i].ids = g->prompts[i]->token_ids;
            r->prompts[i].n_ids = g->prompts[i]->n_token_ids;
        }
        r->n_prompts = g->n_prompts;
    }
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


/* The engine's enums are the protocol's numbers. */
_Static_assert((int) LLM_FINISH_CONTENT_FILTER
               == LLM__FINISH_REASON__FINISH_CONTENT_FILTER,
               "llm_finish_e follows FinishReason");
_Static_assert((int) LLM_ERR_CANCELLED == LLM__ERROR_CODE__ERROR_CANCELLED,
               "llm_errcode_e follows ErrorCode");

static void
llm_wire_usage(Llm__Usage *u, const llm_usage_t *x)
{
    llm__usage__init(u);
    u->prompt_tokens = x->prompt_tokens;
    u->completion_tokens = x->completion_tokens;
    u->cached_tokens = x->cached_tokens;
}

/* A token's bytes for logprobs (may be partial UTF-8). */
static ProtobufCBinaryData
llm_wire_token_bytes(const llm_vocab_t *v, int32_t tok)
{
    ProtobufCBinaryData  b;
    size_t               len = 0;
    const char          *p = llm_token_bytes(v, tok, 1, &len);

    b.data = (uint8_t *) p;
    b.len = p ? len : 0;
    return b;
}

static void
llm_wire_delta(const llm_sched_event_t *ev, const llm_vocab_t *v,
    llm_wire_send_pt send, void *ud)
{
    const llm_sample_result_t *res = ev->u.delta.lp;
    Llm__Event            pe = LLM__EVENT__INIT;
    Llm__Delta            d = LLM__DELTA__INIT;
    Llm__TokenLogprob     lp = LLM__TOKEN_LOGPROB__INIT, *lpp = &lp;
    Llm__TopLogprob       top[LLM_SAMPLE_MAX_TOP_LOGPROBS];
    Llm__TopLogprob      *topp[LLM_SAMPLE_MAX_TOP_LOGPROBS];
    int32_t               tok = ev->u.delta.token;

    d.index = ev->u.delta.index;
    d.text = (char *) ev->u.delta.text;
    d.reasoning = (char *) (ev->u.delta.reasoning ? ev->u.delta.reasoning
                                                   : "");
    if (tok >= 0 && !ev->u.delta.echo) {
        /* a prompt token echoed is not output: only its logprob goes */
        d.n_tokens = 1;
        d.tokens = &tok;
    }
    if (tok >= 0 && res != NULL) {
        lp.token = tok;
        lp.text = llm_wire_token_bytes(v, tok);
        lp.logprob = res->logprob;
        for (uint32_t i = 0; i < res->n_top; i++) {
            llm__top_logprob__init(&top[i]);
            top[i].token = res->top[i].token;
            top[i].text = llm_wire_token_bytes(v, res->top[i].token);
            top[i].logprob = res->top[i].logprob;
            topp[i] = &top[i];
        }
        lp.n_top = res->n_top;
        lp.top = topp;
        d.n_logprobs = 1;
        d.logprobs = &lpp;
    }
    pe.kind_case = LLM__EVENT__KIND_DELTA;
    pe.delta = &d;
    send(ud, &pe);
}

static void
llm_wire_tool_call(const llm_sched_event_t *ev, llm_wire_send_pt send,
    void *ud)
{
    Llm__Event          pe = LLM__EVENT__INIT;
    Llm__ToolCallDelta  t = LLM__TOOL_CALL_DELTA__INIT;
    char               *a;

    /* the fragment as a string (under OOM: sent empty) */
    a = strndup(ev->u.tool_call.args, ev->u.tool_call.args_len);
    t.index = ev->u.tool_call.index;
    t.call_index = ev->u.tool_call.call_index;
    t.id = (char *) ev->u.tool_call.id;
    t.name = (char *) ev->u.tool_call.name;
    t.arguments = a ? a : (char *) "";
    pe.kind_case = LLM__EVENT__KIND_TOOL_CALL;
    pe.tool_call = &t;
    send(ud, &pe);
    free(a);
}

static void
llm_wire_done(const llm_sched_event_t *ev, llm_wire_send_pt send, void *ud)
{
    Llm__Event        pe = LLM__EVENT__INIT;
    Llm__Done         d = LLM__DONE__INIT;
    Llm__Usage        u;
    Llm__Timings      tm = LLM__TIMINGS__INIT;
    Llm__ChoiceEnd    ce[LLM_SCHED_MAX_N], *cep[LLM_SCHED_MAX_N];
    uint32_t          n = ev->u.done.n_choices;

    if (n > LLM_SCHED_MAX_N) {
        n = LLM_SCHED_MAX_N;
    }
    for (uint32_t i = 0; i < n; i++) {
        llm__choice_end__init(&ce[i]);
        ce[i].index = i;
        ce[i].finish_reason = (Llm__FinishReason) ev->u.done.finish[i];
        if (ev->u.done.stop != NULL && ev->u.done.stop[i] != NULL) {
            ce[i].stop_sequence = (char *) ev->u.done.stop[i];
        }
        cep[i] = &ce[i];
    }
    llm_wire_usage(&u, &ev->u.done.usage);
    tm.queue_ms = ev->u.done.queue_ms;
    tm.prefill_ms = ev->u.done.prefill_ms;
    tm.decode_ms = ev->u.done.decode_ms;
    d.n_choices = n;
    d.choices = cep;
    d.usage = &u;
    d.timings = &tm;
    d.model = (char *) ev->u.done.model;
    d.system_fingerprint = (char *) ev->u.done.fingerprint;
    pe.kind_case = LLM__EVENT__KIND_DONE;
    pe.done = &d;
    send(ud, &pe);
}

void
llm_wire_event(const llm_sched_event_t *ev, const llm_vocab_t *v,
    llm_wire_send_pt send, void *ud)
{
    Llm__Event    pe = LLM__EVENT__INIT;
    Llm__Queued   qd = LLM__QUEUED__INIT;
    Llm__Started  st = LLM__STARTED__INIT;
    Llm__Error    e = LLM__ERROR__INIT;
    Llm__Usage    u;

    switch (ev->kind) {
    case LLM_SEV_QUEUED:
        qd.position = ev->u.queued.position;
        pe.kind_case = LLM__EVENT__KIND_QUEUED;
        pe.queued = &qd;
        break;
    case LLM_SEV_STARTED:
        st.prompt_tokens = ev->u.started.prompt_tokens;
        st.cached_tokens = ev->u.started.cached_tokens;
        pe.kind_case = LLM__EVENT__KIND_STARTED;
        pe.started = &st;
        break;
    case LLM_SEV_DELTA:
        llm_wire_delta(ev, v, send, ud);
        return;
    case LLM_SEV_TOOL_CALL:
        llm_wire_tool_call(ev, send, ud);
        return;
    case LLM_SEV_DONE:
        llm_wire_done(ev, send, ud);
        return;
    case LLM_SEV_ERROR:
        e.code = (Llm__ErrorCode) ev->u.error.code;
        e.message = (char *) ev->u.error.message;
        if (ev->u.error.param != NULL) {
            e.param = (char *) ev->u.error.param;
        }
        if (ev->u.error.usage != NULL) {
            llm_wire_usage(&u, ev->u.error.usage);
            e.usage = &u;
        }
        pe.kind_case = LLM__EVENT__KIND_ERROR;
        pe.error = &e;
        break;
    default:
        return;
    }
    send(ud, &pe);
}
