
/*
 * ngx_http_llm_module: the non-streaming answer.  Engine events collected
 * per choice (text, reasoning, tool calls, logprobs), then the whole
 * chat.completion or text_completion body written by hand, as OpenAI
 * does.  The logprobs objects (jansson) are shared with the SSE chunks.
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include <math.h>

#include "ngx_http_llm_module.h"


static size_t ngx_http_llm_body_len(ngx_http_llm_ctx_t *ctx, char **lp);
static u_char *ngx_http_llm_body_choice(ngx_http_llm_ctx_t *ctx, ngx_uint_t i,
    char *lp, u_char *p);
static json_t *ngx_http_llm_bytes_json(ProtobufCBinaryData *b);


ngx_http_llm_choice_t *
ngx_http_llm_choice(ngx_http_llm_ctx_t *ctx, ngx_uint_t index)
{
    if (index >= ctx->n) {
        ngx_log_error(NGX_LOG_WARN, ctx->request->connection->log, 0,
                      "llm: engine sent choice %ui of %ui", index, ctx->n);
        return NULL;
    }

    return &ctx->choices[index];
}


/* The finish_reason's name; a legacy functions request ends its calls
 * with "function_call".  None is longer than "content_filter". */

const char *
ngx_http_llm_finish_name(ngx_http_llm_ctx_t *ctx, Llm__FinishReason f)
{
    switch (f) {
    case LLM__FINISH_REASON__FINISH_LENGTH:
        return "length";
    case LLM__FINISH_REASON__FINISH_TOOL_CALLS:
        return ctx->legacy_functions ? "function_call" : "tool_calls";
    case LLM__FINISH_REASON__FINISH_CONTENT_FILTER:
        return "content_filter";
    default:
        return "stop";
    }
}


static json_t *
ngx_http_llm_bytes_json(ProtobufCBinaryData *b)
{
    size_t   i;
    json_t  *a;

    a = json_array();

    for (i = 0; a && i < b->len; i++) {
        json_array_append_new(a, json_integer(b->data[i]));
    }

    return a;
}


/* {"content":[{"token","logprob","bytes","top_logprobs"}],"refusal":null} */

json_t *
ngx_http_llm_chat_logprobs(Llm__Delta *d)
{
    size_t            i, k;
    json_t           *content, *top, *item;
    Llm__TokenLogprob *tl;
    Llm__TopLogprob   *tp;

    content = json_array();
    if (content == NULL) {
        return NULL;
    }

    for (i = 0; i < d->n_logprobs; i++) {
        tl = d->logprobs[i];

        top = json_array();

        for (k = 0; top && k < tl->n_top; k++) {
            tp = tl->top[k];
            json_array_append_new(top,
                json_pack("{s:o,s:f,s:o}",
                          "token", ngx_http_llm_json_text(tp->text.data,
                                                          tp->text.len),
                          "logprob", (double) tp->logprob,
                          "bytes", ngx_http_llm_bytes_json(&tp->text)));
        }

        item = json_pack("{s:o,s:f,s:o,s:o}",
                         "token", ngx_http_llm_json_text(tl->text.data,
                                                         tl->text.len),
                         "logprob", (double) tl->logprob,
                         "bytes", ngx_http_llm_bytes_json(&tl->text),
                         "top_logprobs", top ? top : json_array());
        json_array_append_new(content, item);
    }

    return json_pack("{s:o,s:n}", "content", content, "refusal");
}


/*
 * Legacy completions logprobs, appended to ch->logprobs:
 * {"tokens","token_logprobs","top_logprobs","text_offset"}.
 */

ngx_int_t
ngx_http_llm_completion_logprobs(ngx_http_llm_ctx_t *ctx,
    ngx_http_llm_choice_t *ch, Llm__Delta *d)
{
    size_t              i, k;
    json_t             *lp, *top;
    Llm__TokenLogprob  *tl;

    /*
     * with echo the engine sends the prompt's tokens first, each with its
     * logprob (null for the first, which nothing predicts), so offsets
     * start at 0 and count them
     */

    ch->offset_set = 1;

    if (ch->logprobs == NULL) {
        ch->logprobs = json_pack("{s:[],s:[],s:[],s:[]}", "tokens",
                                 "token_logprobs", "top_logprobs",
                                 "text_offset");
        if (ch->logprobs == NULL) {
            return NGX_ERROR;
        }
    }

    lp = ch->logprobs;

    for (i = 0; i < d->n_logprobs; i++) {
        tl = d->logprobs[i];

        json_array_append_new(json_object_get(lp, "tokens"),
                              ngx_http_llm_json_text(tl->text.data,
                                                     tl->text.len));
        if (isnan(tl->logprob)) {
            /* the prompt's first token, echoed */
            json_array_append_new(json_object_get(lp, "token_logprobs"),
                                  json_null());
            json_array_append_new(json_object_get(lp, "top_logprobs"),
                                  json_null());
            json_array_append_new(json_object_get(lp, "text_offset"),
                                  json_integer(ch->text_offset));
            ch->text_offset += tl->text.len;
            continue;
        }

        json_array_append_new(json_object_get(lp, "token_logprobs"),
                              json_real(tl->logprob));

        top = json_object();

        for (k = 0; top && k < tl->n_top; k++) {
            json_t  *s = ngx_http_llm_json_text(tl->top[k]->text.data,
                                                tl->top[k]->text.len);
            if (s) {
                json_object_set_new(top, json_string_value(s),
                                    json_real(tl->top[k]->logprob));
                json_decref(s);
            }
        }

        json_array_append_new(json_object_get(lp, "top_logprobs"),
                              top ? top : json_null());
        json_array_append_new(json_object_get(lp, "text_offset"),
                              json_integer(ch->text_offset));

        ch->text_offset += tl->text.len;
    }

    return NGX_OK;
}


/*
 * Done's finish reasons (and stop strings) into the choices (stop for a
 * choice it does not name) and the first one into $llm_finish_reason.
 */

void
ngx_http_llm_finish(ngx_http_llm_ctx_t *ctx, Llm__Done *done)
{
    u_char          *p;
    size_t           n;
    ngx_uint_t       i;
    Llm__ChoiceEnd  *ce;

    for (i = 0; i < ctx->n; i++) {
        ctx->choices[i].finish = LLM__FINISH_REASON__FINISH_STOP;
    }

    for (i = 0; i < done->n_choices; i++) {
        ce = done->choices[i];
        if (ce->index >= ctx->n) {
            continue;
        }

        ctx->choices[ce->index].finish = ce->finish_reason;

        /* for Anthropic's stop_sequence; without memory: none named */

        n = ngx_strlen(ce->stop_sequence);
        p = n ? ngx_pnalloc(ctx->request->pool, n) : NULL;

        if (p) {
            ngx_memcpy(p, ce->stop_sequence, n);
            ctx->choices[ce->index].stop_sequence.data = p;
            ctx->choices[ce->index].stop_sequence.len = n;
        }
    }

    ctx->finish_reason.data = (u_char *)
                     ngx_http_llm_finish_name(ctx, ctx->choices[0].finish);
    ctx->finish_reason.len = ngx_strlen(ctx->finish_reason.data);
}


/* Non-stream: accumulates one event into the choices. */

ngx_int_t
ngx_http_llm_collect(ngx_http_request_t *r, ngx_http_llm_ctx_t *ctx,
    Llm__Event *ev)
{
    json_t                 *lj, *a, *v;
    size_t                  i;
    Llm__Delta             *d;
    Llm__ToolCallDelta     *t;
    ngx_http_llm_call_t    *call;
    ngx_http_llm_choice_t  *ch;

    switch (ev->kind_case) {

    case LLM__EVENT__KIND_DELTA:
        d = ev->delta;
        ctx->streamed_tokens += d->n_tokens;

        ch = ngx_http_llm_choice(ctx, d->index);
        if (ch == NULL) {
            return NGX_OK;
        }

        if (ngx_http_llm_sbuf_add(r->pool, &ch->content, (u_char *) d->text,
                                  ngx_strlen(d->text))
            != NGX_OK
            || ngx_http_llm_sbuf_add(r->pool, &ch->reasoning,
                                     (u_char *) d->reasoning,
                                     ngx_strlen(d->reasoning))
               != NGX_OK)
        {
            return NGX_ERROR;
        }

        if (d->n_logprobs == 0) {
            return NGX_OK;
        }

        if (ctx->route == NGX_HTTP_LLM_ROUTE_COMPLETION) {
            if (ctx->completion_logprobs >= 0) {
                return ngx_http_llm_completion_logprobs(ctx, ch, d);
            }

            return NGX_OK;
        }

        if (!ctx->logprobs) {
            return NGX_OK;
        }

        lj = ngx_http_llm_chat_logprobs(d);
        if (lj == NULL) {
            return NGX_ERROR;
        }

        if (ch->logprobs == NULL) {
            ch->logprobs = lj;
            return NGX_OK;
        }

        a = json_object_get(ch->logprobs, "content");

        json_array_foreach(json_object_get(lj, "content"), i, v) {
            json_array_append(a, v);
        }

        json_decref(lj);

        return NGX_OK;

    case LLM__EVENT__KIND_TOOL_CALL:
        t = ev->tool_call;

        ch = ngx_http_llm_choice(ctx, t->index);
        if (ch == NULL) {
            return NGX_OK;
        }

        if (t->call_index > 1024) {
            return NGX_OK;
        }

        while (ch->calls.nelts <= t->call_index) {
            call = ngx_array_push(&ch->calls);
            if (call == NULL) {
                return NGX_ERROR;
            }

            ngx_memzero(call, sizeof(ngx_http_llm_call_t));
        }

        call = (ngx_http_llm_call_t *) ch->calls.elts + t->call_index;

        if (t->id[0] && call->id.len == 0
            && ngx_http_llm_sbuf_add(r->pool, &call->id, (u_char *) t->id,
                                     ngx_strlen(t->id))
               != NGX_OK)
        {
            return NGX_ERROR;
        }

        if (t->name[0] && call->name.len == 0
            && ngx_http_llm_sbuf_add(r->pool, &call->name, (u_char *) t->name,
                                     ngx_strlen(t->name))
               != NGX_OK)
        {
            return NGX_ERROR;
        }

        return ngx_http_llm_sbuf_add(r->pool, &call->arguments,
                                     (u_char *) t->arguments,
                                     ngx_strlen(t->arguments));

    case LLM__EVENT__KIND_DONE:

        if (ev->done->usage) {
            ctx->prompt_tokens = ev->done->usage->prompt_tokens;
            ctx->completion_tokens = ev->done->usage->completion_tokens;
            ctx->cached_tokens = ev->done->usage->cached_tokens;
        }

        if (ev->done->system_fingerprint[0]) {
            if (ngx_http_llm_json_str(r->pool, &ctx->fingerprint,
                                      (u_char *) ev->done->system_fingerprint,
                                      ngx_strlen(ev->done->system_fingerprint))
                != NGX_OK)
            {
                return NGX_ERROR;
            }
        }

        ngx_http_llm_finish(ctx, ev->done);
        ctx->done = 1;

        return NGX_OK;

    default:
        return NGX_OK;
    }
}


/*
 * The start of every answer, a JSON body or an SSE chunk:
 * {"id":...,"object":...,"created":...,"model":...,
 * "system_fingerprint":...,"choices":[ and its length (exact but for the
 * digits of "created").
 */

size_t
ngx_http_llm_answer_head_len(ngx_http_llm_ctx_t *ctx, const char *object)
{
    return ngx_http_llm_len("{\"id\":\"\",\"object\":\"\",\"created\":,"
                            "\"model\":\"\",\"system_fingerprint\":,"
                            "\"choices\":[")
           + ctx->id_len + ngx_strlen(object) + NGX_TIME_T_LEN
           + ctx->model_json.len
           + (ctx->fingerprint.len ? ctx->fingerprint.len + 2
                                   : ngx_http_llm_len("null"));
}


u_char *
ngx_http_llm_answer_head(ngx_http_llm_ctx_t *ctx, u_char *p,
    const char *object)
{
    p = ngx_cpymem(p, "{\"id\":\"", ngx_http_llm_len("{\"id\":\""));
    p = ngx_cpymem(p, ctx->id, ctx->id_len);
    p = ngx_cpymem(p, "\",\"object\":\"", ngx_http_llm_len("\",\"object\":\""));
    p = ngx_cpymem(p, object, ngx_strlen(object));
    p = ngx_cpymem(p, "\",\"created\":", ngx_http_llm_len("\",\"created\":"));
    p = ngx_http_llm_uint(p, (uint64_t) ctx->created);
    p = ngx_cpymem(p, ",\"model\":\"", ngx_http_llm_len(",\"model\":\""));
    p = ngx_cpymem(p, ctx->model_json.data, ctx->model_json.len);

    if (ctx->fingerprint.len) {
        p = ngx_cpymem(p, "\",\"system_fingerprint\":\"",
                       ngx_http_llm_len("\",\"system_fingerprint\":\""));
        p = ngx_cpymem(p, ctx->fingerprint.data, ctx->fingerprint.len);

        return ngx_cpymem(p, "\",\"choices\":[",
                          ngx_http_llm_len("\",\"choices\":["));
    }

    return ngx_cpymem(p, "\",\"system_fingerprint\":null,\"choices\":[",
                      ngx_http_llm_len("\",\"system_fingerprint\":null,"
                                       "\"choices\":["));
}


/*
 * Non-stream: the whole chat.completion / text_completion body, written
 * by hand like the SSE chunks (jansson's dump was half of the gateway's
 * CPU per request); only logprobs, already JSON objects, are dumped.
 */

#define ngx_http_llm_esc_len(sb)                                              \
    ngx_http_llm_json_escape_len((sb)->data, (sb)->len)

#define NGX_HTTP_LLM_NO_CHAT_LOGPROBS  "{\"content\":[],\"refusal\":null}"
#define NGX_HTTP_LLM_NO_TEXT_LOGPROBS                                         \
    "{\"tokens\":[],\"token_logprobs\":[],\"top_logprobs\":[],"               \
    "\"text_offset\":[]}"


ngx_int_t
ngx_http_llm_body(ngx_http_request_t *r, ngx_http_llm_ctx_t *ctx,
    ngx_str_t *body)
{
    u_char                 *p;
    char                  **lp;
    size_t                  size;
    ngx_uint_t              i;
    ngx_http_llm_choice_t  *ch;

    if (ctx->dialect) {
        return ctx->dialect->body(r, ctx, body);
    }

    lp = ngx_pcalloc(r->pool, ctx->n * sizeof(char *));
    if (lp == NULL) {
        return NGX_ERROR;
    }

    for (i = 0; i < ctx->n; i++) {
        ch = &ctx->choices[i];

        if (ch->logprobs) {
            lp[i] = json_dumps(ch->logprobs, JSON_COMPACT);
            json_decref(ch->logprobs);
            ch->logprobs = NULL;

            if (lp[i] == NULL) {
                goto failed;
            }
        }
    }

    size = ngx_http_llm_body_len(ctx, lp);

    p = ngx_pnalloc(r->pool, size);
    if (p == NULL) {
        goto failed;
    }

    body->data = p;

    p = ngx_http_llm_answer_head(ctx, p,
                                 ctx->route == NGX_HTTP_LLM_ROUTE_CHAT
                                 ? "chat.completion" : "text_completion");

    for (i = 0; i < ctx->n; i++) {
        if (i) {
            *p++ = ',';
        }

        p = ngx_http_llm_body_choice(ctx, i, lp[i], p);
    }

    p = ngx_cpymem(p, "],\"usage\":{\"prompt_tokens\":",
                   ngx_http_llm_len("],\"usage\":{\"prompt_tokens\":"));
    p = ngx_http_llm_uint(p, ctx->prompt_tokens);
    p = ngx_cpymem(p, ",\"completion_tokens\":",
                   ngx_http_llm_len(",\"completion_tokens\":"));
    p = ngx_http_llm_uint(p, ctx->completion_tokens);
    p = ngx_cpymem(p, ",\"total_tokens\":",
                   ngx_http_llm_len(",\"total_tokens\":"));
    p = ngx_http_llm_uint(p, ctx->prompt_tokens + ctx->completion_tokens);
    p = ngx_cpymem(p, ",\"prompt_tokens_details\":{\"cached_tokens\":",
                   ngx_http_llm_len(",\"prompt_tokens_details\":"
                                    "{\"cached_tokens\":"));
    p = ngx_http_llm_uint(p, ctx->cached_tokens);
    p = ngx_cpymem(p, "}}}\n", ngx_http_llm_len("}}}\n"));

    body->len = p - body->data;

    for (i = 0; i < ctx->n; i++) {
        free(lp[i]);
    }

    if (body->len > size) {
        ngx_log_error(NGX_LOG_ALERT, r->connection->log, 0,
                      "llm: a body of %uz bytes overran its size %uz",
                      body->len, size);
        return NGX_ERROR;
    }

    return NGX_OK;

failed:

    for (i = 0; i < ctx->n; i++) {
        free(lp[i]);

        if (ctx->choices[i].logprobs) {
            json_decref(ctx->choices[i].logprobs);
            ctx->choices[i].logprobs = NULL;
        }
    }

    return NGX_ERROR;
}


/*
 * The size of what ngx_http_llm_body() writes, from its parts; an upper
 * bound only in the numbers (index, created, usage) and the finish
 * reason (the longest one).
 */

static size_t
ngx_http_llm_body_len(ngx_http_llm_ctx_t *ctx, char **lp)
{
    size_t                  size;
    ngx_uint_t              i, k, chat;
    ngx_http_llm_call_t    *call;
    ngx_http_llm_choice_t  *ch;

    chat = (ctx->route == NGX_HTTP_LLM_ROUTE_CHAT);

    size = ngx_http_llm_answer_head_len(ctx,
                                        chat ? "chat.completion"
                                             : "text_completion")
           + ngx_http_llm_len("],\"usage\":{\"prompt_tokens\":,"
                              "\"completion_tokens\":,\"total_tokens\":,"
                              "\"prompt_tokens_details\":"
                              "{\"cached_tokens\":}}}\n")
           + 4 * NGX_INT_T_LEN;

    for (i = 0; i < ctx->n; i++) {
        ch = &ctx->choices[i];

        size += (i ? 1 : 0) + NGX_INT_T_LEN
                + ngx_http_llm_len("content_filter")
                + ngx_http_llm_esc_len(&ch->content);

        if (lp[i]) {
            size += ngx_strlen(lp[i]);

        } else if (chat && ctx->logprobs) {
            size += ngx_http_llm_len(NGX_HTTP_LLM_NO_CHAT_LOGPROBS);

        } else if (!chat && ctx->completion_logprobs >= 0) {
            size += ngx_http_llm_len(NGX_HTTP_LLM_NO_TEXT_LOGPROBS);

        } else {
            size += ngx_http_llm_len("null");
        }

        if (!chat) {
            size += ngx_http_llm_len("{\"text\":\"\",\"index\":,"
                                     "\"logprobs\":,\"finish_reason\":\"\"}");
            continue;
        }

        size += ngx_http_llm_len("{\"index\":,\"message\":{\"role\":"
                                 "\"assistant\",\"content\":\"\","
                                 "\"refusal\":null},\"logprobs\":,"
                                 "\"finish_reason\":\"\"}");

        if (ch->reasoning.len) {
            size += ngx_http_llm_len(",\"reasoning_content\":\"\"")
                    + ngx_http_llm_esc_len(&ch->reasoning);
        }

        if (ch->calls.nelts && ctx->legacy_functions) {
            call = ch->calls.elts;
            size += ngx_http_llm_len(",\"function_call\":{\"name\":\"\","
                                     "\"arguments\":\"\"}")
                    + ngx_http_llm_esc_len(&call[0].name)
                    + ngx_http_llm_esc_len(&call[0].arguments);

        } else if (ch->calls.nelts) {
            size += ngx_http_llm_len(",\"tool_calls\":[]");
            call = ch->calls.elts;

            for (k = 0; k < ch->calls.nelts; k++) {
                size += (k ? 1 : 0)
                        + ngx_http_llm_len("{\"id\":\"\",\"type\":"
                                           "\"function\",\"function\":"
                                           "{\"name\":\"\","
                                           "\"arguments\":\"\"}}")
                        + ngx_http_llm_esc_len(&call[k].id)
                        + ngx_http_llm_esc_len(&call[k].name)
                        + ngx_http_llm_esc_len(&call[k].arguments);
            }
        }
    }

    return size;
}


/* One choice of the body, with its logprobs lp (JSON text) if any. */

static u_char *
ngx_http_llm_body_choice(ngx_http_llm_ctx_t *ctx, ngx_uint_t i, char *lp,
    u_char *p)
{
    ngx_uint_t              k, chat;
    const char             *name;
    ngx_http_llm_call_t    *call;
    ngx_http_llm_choice_t  *ch;

    ch = &ctx->choices[i];
    chat = (ctx->route == NGX_HTTP_LLM_ROUTE_CHAT);

    if (!chat) {
        p = ngx_cpymem(p, "{\"text\":\"", ngx_http_llm_len("{\"text\":\""));
        p = ngx_http_llm_json_escape(p, ch->content.data, ch->content.len);
        p = ngx_cpymem(p, "\",\"index\":", ngx_http_llm_len("\",\"index\":"));
        p = ngx_http_llm_uint(p, i);
        p = ngx_cpymem(p, ",\"logprobs\":", ngx_http_llm_len(",\"logprobs\":"));
        goto logprobs;
    }

    p = ngx_cpymem(p, "{\"index\":", ngx_http_llm_len("{\"index\":"));
    p = ngx_http_llm_uint(p, i);
    p = ngx_cpymem(p, ",\"message\":{\"role\":\"assistant\",\"content\":",
                   ngx_http_llm_len(",\"message\":{\"role\":\"assistant\","
                                    "\"content\":"));

    if (ch->content.len || ch->calls.nelts == 0) {
        *p++ = '"';
        p = ngx_http_llm_json_escape(p, ch->content.data, ch->content.len);
        *p++ = '"';

    } else {
        p = ngx_cpymem(p, "null", ngx_http_llm_len("null"));
    }

    p = ngx_cpymem(p, ",\"refusal\":null",
                   ngx_http_llm_len(",\"refusal\":null"));

    if (ch->reasoning.len) {
        p = ngx_cpymem(p, ",\"reasoning_content\":\"",
                       ngx_http_llm_len(",\"reasoning_content\":\""));
        p = ngx_http_llm_json_escape(p, ch->reasoning.data,
                                     ch->reasoning.len);
        *p++ = '"';
    }

    if (ch->calls.nelts && ctx->legacy_functions) {
        /* the legacy answer: the first (with parallel off, the one) call */
        call = ch->calls.elts;
        p = ngx_cpymem(p, ",\"function_call\":{\"name\":\"",
                       ngx_http_llm_len(",\"function_call\":{\"name\":\""));
        p = ngx_http_llm_json_escape(p, call[0].name.data, call[0].name.len);
        p = ngx_cpymem(p, "\",\"arguments\":\"",
                       ngx_http_llm_len("\",\"arguments\":\""));
        p = ngx_http_llm_json_escape(p, call[0].arguments.data,
                                     call[0].arguments.len);
        p = ngx_cpymem(p, "\"}", 2);

    } else if (ch->calls.nelts) {
        p = ngx_cpymem(p, ",\"tool_calls\":[",
                       ngx_http_llm_len(",\"tool_calls\":["));
        call = ch->calls.elts;

        for (k = 0; k < ch->calls.nelts; k++) {
            if (k) {
                *p++ = ',';
            }

            p = ngx_cpymem(p, "{\"id\":\"", ngx_http_llm_len("{\"id\":\""));
            p = ngx_http_llm_json_escape(p, call[k].id.data, call[k].id.len);
            p = ngx_cpymem(p, "\",\"type\":\"function\",\"function\":"
                           "{\"name\":\"",
                           ngx_http_llm_len("\",\"type\":\"function\","
                                            "\"function\":{\"name\":\""));
            p = ngx_http_llm_json_escape(p, call[k].name.data,
                                         call[k].name.len);
            p = ngx_cpymem(p, "\",\"arguments\":\"",
                           ngx_http_llm_len("\",\"arguments\":\""));
            p = ngx_http_llm_json_escape(p, call[k].arguments.data,
                                         call[k].arguments.len);
            p = ngx_cpymem(p, "\"}}", 3);
        }

        *p++ = ']';
    }

    p = ngx_cpymem(p, "},\"logprobs\":", ngx_http_llm_len("},\"logprobs\":"));

logprobs:

    if (lp) {
        p = ngx_cpymem(p, lp, ngx_strlen(lp));

    } else if (chat && ctx->logprobs) {
        /* asked for, but no token came: the first one was the end */
        p = ngx_cpymem(p, NGX_HTTP_LLM_NO_CHAT_LOGPROBS,
                       ngx_http_llm_len(NGX_HTTP_LLM_NO_CHAT_LOGPROBS));

    } else if (!chat && ctx->completion_logprobs >= 0) {
        p = ngx_cpymem(p, NGX_HTTP_LLM_NO_TEXT_LOGPROBS,
                       ngx_http_llm_len(NGX_HTTP_LLM_NO_TEXT_LOGPROBS));

    } else {
        p = ngx_cpymem(p, "null", ngx_http_llm_len("null"));
    }

    name = ngx_http_llm_finish_name(ctx, ch->finish);

    p = ngx_cpymem(p, ",\"finish_reason\":\"",
                   ngx_http_llm_len(",\"finish_reason\":\""));
    p = ngx_cpymem(p, name, ngx_strlen(name));

    return ngx_cpymem(p, "\"}", 2);
}
