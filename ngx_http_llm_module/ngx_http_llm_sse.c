
/*
 * ngx_http_llm_module: the streaming answer.  Engine events rendered as
 * OpenAI's server-sent events: chat.completion.chunk or text_completion
 * chunks, the usage chunk, [DONE], and the final error event; each buffer
 * sized from what is written into it.
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "ngx_http_llm_module.h"


static size_t ngx_http_llm_head_len(ngx_http_llm_ctx_t *ctx);
static u_char *ngx_http_llm_head(ngx_http_llm_ctx_t *ctx, u_char *p);
static size_t ngx_http_llm_tail_len(ngx_http_llm_ctx_t *ctx);
static u_char *ngx_http_llm_tail(ngx_http_llm_ctx_t *ctx, u_char *p);
static ngx_int_t ngx_http_llm_sse_put(ngx_http_request_t *r,
    ngx_chain_t ***ll, ngx_chain_t *cl, u_char *p, size_t size,
    ngx_uint_t flush);
static char *ngx_http_llm_sse_logprobs(ngx_http_llm_ctx_t *ctx,
    ngx_http_llm_choice_t *ch, Llm__Delta *d, ngx_int_t *rc);
static ngx_int_t ngx_http_llm_sse_delta(ngx_http_request_t *r,
    ngx_http_llm_ctx_t *ctx, Llm__Delta *d, ngx_chain_t ***ll);
static ngx_int_t ngx_http_llm_sse_tool_call(ngx_http_request_t *r,
    ngx_http_llm_ctx_t *ctx, Llm__ToolCallDelta *t, ngx_chain_t ***ll);
static ngx_int_t ngx_http_llm_sse_done(ngx_http_request_t *r,
    ngx_http_llm_ctx_t *ctx, Llm__Done *done, ngx_chain_t ***ll);
static ngx_int_t ngx_http_llm_sse_usage(ngx_http_request_t *r,
    ngx_http_llm_ctx_t *ctx, ngx_chain_t ***ll);
static ngx_int_t ngx_http_llm_sse_error(ngx_http_request_t *r,
    ngx_http_llm_ctx_t *ctx, Llm__Error *e, ngx_chain_t ***ll);


/* A buffer with room for size bytes, recycled through u->free_bufs. */

ngx_chain_t *
ngx_http_llm_chain_buf(ngx_http_request_t *r, size_t size)
{
    u_char               *start, *end;
    ngx_buf_t            *b;
    ngx_chain_t          *cl;
    ngx_http_upstream_t  *u;

    u = r->upstream;

    cl = ngx_chain_get_free_buf(r->pool, &u->free_bufs);
    if (cl == NULL) {
        return NULL;
    }

    b = cl->buf;
    start = b->start;
    end = b->end;

    if (start == NULL || (size_t) (end - start) < size) {
        size = ngx_max(size, 1024);

        start = ngx_palloc(r->pool, size);
        if (start == NULL) {
            return NULL;
        }

        end = start + size;
    }

    ngx_memzero(b, sizeof(ngx_buf_t));

    b->start = start;
    b->end = end;
    b->pos = start;
    b->last = start;
    b->temporary = 1;
    b->tag = u->output.tag;

    cl->next = NULL;

    return cl;
}


ngx_int_t
ngx_http_llm_sse_raw(ngx_http_request_t *r, ngx_chain_t ***ll, u_char *data,
    size_t len, ngx_uint_t flush)
{
    ngx_chain_t  *cl;

    cl = ngx_http_llm_chain_buf(r, len);
    if (cl == NULL) {
        return NGX_ERROR;
    }

    if (len) {
        cl->buf->last = ngx_cpymem(cl->buf->last, data, len);

    } else {
        /*
         * An empty buffer must be a special one (flush, no memory flag):
         * the write filter refuses an empty temporary buffer ("zero size
         * buf in writer") and the request would end mid-stream.
         */
        cl->buf->temporary = 0;
    }

    cl->buf->flush = flush;

    **ll = cl;
    *ll = &cl->next;

    return NGX_OK;
}


#define ngx_http_llm_chunk_object(ctx)                                        \
    ((ctx)->route == NGX_HTTP_LLM_ROUTE_CHAT ? "chat.completion.chunk"        \
                                             : "text_completion")


/*
 * The fixed start of a chunk, data: {"id":...,"choices":[ and its
 * length: exact once written (it is kept), else an upper bound (the
 * "created" digits).
 */

static size_t
ngx_http_llm_head_len(ngx_http_llm_ctx_t *ctx)
{
    if (ctx->head.len) {
        return ctx->head.len;
    }

    return ngx_http_llm_len("data: ")
           + ngx_http_llm_answer_head_len(ctx, ngx_http_llm_chunk_object(ctx));
}


static u_char *
ngx_http_llm_head(ngx_http_llm_ctx_t *ctx, u_char *p)
{
    u_char  *h, *start;

    if (ctx->head.len) {
        return ngx_cpymem(p, ctx->head.data, ctx->head.len);
    }

    start = p;

    p = ngx_cpymem(p, "data: ", ngx_http_llm_len("data: "));
    p = ngx_http_llm_answer_head(ctx, p, ngx_http_llm_chunk_object(ctx));

    /* the same for every chunk of the stream: keep it */

    h = ngx_pnalloc(ctx->request->pool, p - start);
    if (h) {
        ctx->head.len = p - start;
        ctx->head.data = h;
        ngx_memcpy(h, start, ctx->head.len);
    }

    return p;
}


/* The end of a chunk: ]} (and "usage":null when the usage chunk comes). */

static size_t
ngx_http_llm_tail_len(ngx_http_llm_ctx_t *ctx)
{
    return ctx->include_usage ? ngx_http_llm_len("],\"usage\":null}\n\n")
                              : ngx_http_llm_len("]}\n\n");
}


static u_char *
ngx_http_llm_tail(ngx_http_llm_ctx_t *ctx, u_char *p)
{
    if (ctx->include_usage) {
        return ngx_cpymem(p, "],\"usage\":null}\n\n",
                          ngx_http_llm_len("],\"usage\":null}\n\n"));
    }

    return ngx_cpymem(p, "]}\n\n", ngx_http_llm_len("]}\n\n"));
}


/*
 * Appends the chunk cl, written up to p, to *ll.  Its size was computed
 * from its parts before writing: more is a bug in that computation, kept
 * from reaching the client.
 */

static ngx_int_t
ngx_http_llm_sse_put(ngx_http_request_t *r, ngx_chain_t ***ll,
    ngx_chain_t *cl, u_char *p, size_t size, ngx_uint_t flush)
{
    if ((size_t) (p - cl->buf->last) > size) {
        ngx_log_error(NGX_LOG_ALERT, r->connection->log, 0,
                      "llm: an SSE chunk of %uz bytes overran its size %uz",
                      (size_t) (p - cl->buf->last), size);
        return NGX_ERROR;
    }

    cl->buf->last = p;
    cl->buf->flush = flush;

    **ll = cl;
    *ll = &cl->next;

    return NGX_OK;
}


/*
 * Renders one engine event of a started stream as SSE chunks at *ll:
 * Delta and ToolCallDelta as content / tool_calls deltas (the first delta
 * of a choice carries the role), Done as one finish_reason chunk per
 * choice, the usage chunk when asked, and [DONE]; Error (or ev == NULL:
 * the error kept in ctx) as a final error event without [DONE].
 */

ngx_int_t
ngx_http_llm_sse_event(ngx_http_request_t *r, ngx_http_llm_ctx_t *ctx,
    Llm__Event *ev, ngx_chain_t ***ll)
{
    if (ctx->dialect) {
        return ctx->dialect->sse(r, ctx, ev, ll);
    }

    if (ev == NULL) {
        return ngx_http_llm_sse_error(r, ctx, NULL, ll);
    }

    switch (ev->kind_case) {

    case LLM__EVENT__KIND_DELTA:
        return ngx_http_llm_sse_delta(r, ctx, ev->delta, ll);

    case LLM__EVENT__KIND_TOOL_CALL:
        return ngx_http_llm_sse_tool_call(r, ctx, ev->tool_call, ll);

    case LLM__EVENT__KIND_DONE:
        return ngx_http_llm_sse_done(r, ctx, ev->done, ll);

    case LLM__EVENT__KIND_ERROR:
        return ngx_http_llm_sse_error(r, ctx, ev->error, ll);

    default:
        return NGX_OK;
    }
}


/* The logprobs of a delta as JSON text (malloc), NULL if none asked. */

static char *
ngx_http_llm_sse_logprobs(ngx_http_llm_ctx_t *ctx, ngx_http_llm_choice_t *ch,
    Llm__Delta *d, ngx_int_t *rc)
{
    char    *lp;
    json_t  *lj;

    *rc = NGX_OK;

    if (d->n_logprobs == 0
        || !(ctx->logprobs || ctx->completion_logprobs >= 0))
    {
        return NULL;
    }

    if (ctx->route == NGX_HTTP_LLM_ROUTE_CHAT) {
        lj = ngx_http_llm_chat_logprobs(d);

    } else {
        ch->logprobs = NULL;
        if (ngx_http_llm_completion_logprobs(ctx, ch, d) != NGX_OK) {
            *rc = NGX_ERROR;
            return NULL;
        }
        lj = ch->logprobs;
        ch->logprobs = NULL;
    }

    if (lj == NULL) {
        return NULL;
    }

    lp = json_dumps(lj, JSON_COMPACT);
    json_decref(lj);

    return lp;
}


/* A text delta: {"index","delta":{"role"?,"reasoning_content"?,"content"}} */

static ngx_int_t
ngx_http_llm_sse_delta(ngx_http_request_t *r, ngx_http_llm_ctx_t *ctx,
    Llm__Delta *d, ngx_chain_t ***ll)
{
    u_char                   *p;
    char                     *lp;
    size_t                    size, lplen, text, reasoning;
    ngx_int_t                 rc;
    ngx_uint_t                chat, role;
    ngx_chain_t              *cl;
    ngx_http_llm_choice_t    *ch;
    ngx_http_llm_loc_conf_t  *llcf;

    llcf = ngx_http_get_module_loc_conf(r, ngx_http_llm_module);
    chat = (ctx->route == NGX_HTTP_LLM_ROUTE_CHAT);

    ch = ngx_http_llm_choice(ctx, d->index);
    if (ch == NULL) {
        return NGX_OK;
    }

    lp = ngx_http_llm_sse_logprobs(ctx, ch, d, &rc);
    if (rc != NGX_OK) {
        return rc;
    }

    lplen = lp ? ngx_strlen(lp) : ngx_http_llm_len("null");
    text = ngx_strlen(d->text);
    reasoning = ngx_strlen(d->reasoning);
    role = chat && !ch->role_sent;

    if (chat && text == 0 && reasoning == 0 && lp == NULL) {
        /*
         * nothing to say (the tokens of a tool call, text held for a
         * stop string): no {"content":""} chunk, which clients would take
         * for an empty text part; the role goes with the first delta that
         * is sent
         */
        return NGX_OK;
    }

    size = ngx_http_llm_head_len(ctx)
           + ngx_http_llm_json_escape_len((u_char *) d->text, text)
           + lplen
           + ngx_http_llm_len(",\"finish_reason\":null}")
           + ngx_http_llm_tail_len(ctx);

    if (chat) {
        size += ngx_http_llm_len("{\"index\":,\"delta\":{\"content\":\""
                                 "\"},\"logprobs\":")
                + NGX_INT32_LEN
                + (role ? ngx_http_llm_len("\"role\":\"assistant\",") : 0)
                + (reasoning
                   ? ngx_http_llm_len("\"reasoning_content\":\"\",")
                     + ngx_http_llm_json_escape_len((u_char *) d->reasoning,
                                                    reasoning)
                   : 0);

    } else {
        size += ngx_http_llm_len("{\"text\":\"\",\"index\":,\"logprobs\":")
                + NGX_INT32_LEN;
    }

    cl = ngx_http_llm_chain_buf(r, size);
    if (cl == NULL) {
        free(lp);
        return NGX_ERROR;
    }

    p = ngx_http_llm_head(ctx, cl->buf->last);

    if (chat) {
        p = ngx_sprintf(p, "{\"index\":%uD,\"delta\":{", d->index);

        if (role) {
            ch->role_sent = 1;
            p = ngx_cpymem(p, "\"role\":\"assistant\",",
                           ngx_http_llm_len("\"role\":\"assistant\","));
        }

        if (reasoning) {
            p = ngx_cpymem(p, "\"reasoning_content\":\"",
                           ngx_http_llm_len("\"reasoning_content\":\""));
            p = ngx_http_llm_json_escape(p, (u_char *) d->reasoning,
                                         reasoning);
            *p++ = '"';
            *p++ = ',';
        }

        p = ngx_cpymem(p, "\"content\":\"", ngx_http_llm_len("\"content\":\""));
        p = ngx_http_llm_json_escape(p, (u_char *) d->text, text);
        p = ngx_cpymem(p, "\"},\"logprobs\":",
                       ngx_http_llm_len("\"},\"logprobs\":"));

    } else {
        p = ngx_cpymem(p, "{\"text\":\"", ngx_http_llm_len("{\"text\":\""));
        p = ngx_http_llm_json_escape(p, (u_char *) d->text, text);
        p = ngx_sprintf(p, "\",\"index\":%uD,\"logprobs\":", d->index);
    }

    if (lp) {
        p = ngx_cpymem(p, lp, lplen);
        free(lp);

    } else {
        p = ngx_cpymem(p, "null", ngx_http_llm_len("null"));
    }

    p = ngx_cpymem(p, ",\"finish_reason\":null}",
                   ngx_http_llm_len(",\"finish_reason\":null}"));
    p = ngx_http_llm_tail(ctx, p);

    return ngx_http_llm_sse_put(r, ll, cl, p, size,
                                llcf->sse_flush_interval == 0);
}


/*
 * A legacy functions request's call delta: {"function_call": {"name",
 * "arguments"}} on the first, then {"function_call": {"arguments"}}; only
 * the first call (parallel calls are off for such requests).
 */

static ngx_int_t
ngx_http_llm_sse_function_call(ngx_http_request_t *r,
    ngx_http_llm_ctx_t *ctx, ngx_http_llm_choice_t *ch,
    Llm__ToolCallDelta *t, ngx_chain_t ***ll)
{
    u_char                   *p;
    size_t                    size, name, args;
    ngx_uint_t                role;
    ngx_chain_t              *cl;
    ngx_http_llm_loc_conf_t  *llcf;

    if (t->call_index != 0) {
        return NGX_OK;
    }

    llcf = ngx_http_get_module_loc_conf(r, ngx_http_llm_module);

    name = ngx_strlen(t->name);
    args = ngx_strlen(t->arguments);
    role = !ch->role_sent;

    size = ngx_http_llm_head_len(ctx)
           + ngx_http_llm_len("{\"index\":,\"delta\":{\"function_call\":"
                              "{\"arguments\":\"\"}},"
                              "\"logprobs\":null,\"finish_reason\":null}")
           + NGX_INT32_LEN
           + (role ? ngx_http_llm_len("\"role\":\"assistant\","
                                      "\"content\":null,")
                   : 0)
           + (name ? ngx_http_llm_len("\"name\":\"\",")
                     + ngx_http_llm_json_escape_len((u_char *) t->name,
                                                    name)
                   : 0)
           + ngx_http_llm_json_escape_len((u_char *) t->arguments, args)
           + ngx_http_llm_tail_len(ctx);

    cl = ngx_http_llm_chain_buf(r, size);
    if (cl == NULL) {
        return NGX_ERROR;
    }

    p = ngx_http_llm_head(ctx, cl->buf->last);
    p = ngx_sprintf(p, "{\"index\":%uD,\"delta\":{", t->index);

    if (role) {
        ch->role_sent = 1;
        p = ngx_cpymem(p, "\"role\":\"assistant\",\"content\":null,",
                       ngx_http_llm_len("\"role\":\"assistant\","
                                        "\"content\":null,"));
    }

    p = ngx_cpymem(p, "\"function_call\":{",
                   ngx_http_llm_len("\"function_call\":{"));

    if (name) {
        p = ngx_cpymem(p, "\"name\":\"", ngx_http_llm_len("\"name\":\""));
        p = ngx_http_llm_json_escape(p, (u_char *) t->name, name);
        p = ngx_cpymem(p, "\",", 2);
    }

    p = ngx_cpymem(p, "\"arguments\":\"", ngx_http_llm_len("\"arguments\":\""));
    p = ngx_http_llm_json_escape(p, (u_char *) t->arguments, args);
    p = ngx_cpymem(p, "\"}},\"logprobs\":null,\"finish_reason\":null}",
                   ngx_http_llm_len("\"}},\"logprobs\":null,"
                                    "\"finish_reason\":null}"));
    p = ngx_http_llm_tail(ctx, p);

    return ngx_http_llm_sse_put(r, ll, cl, p, size,
                                llcf->sse_flush_interval == 0);
}


/* A tool call delta: the id and name once, then pieces of arguments. */

static ngx_int_t
ngx_http_llm_sse_tool_call(ngx_http_request_t *r, ngx_http_llm_ctx_t *ctx,
    Llm__ToolCallDelta *t, ngx_chain_t ***ll)
{
    u_char                   *p;
    size_t                    size, id, name, args;
    ngx_uint_t                role, first;
    ngx_chain_t              *cl;
    ngx_http_llm_choice_t    *ch;
    ngx_http_llm_loc_conf_t  *llcf;

    llcf = ngx_http_get_module_loc_conf(r, ngx_http_llm_module);

    ch = ngx_http_llm_choice(ctx, t->index);
    if (ch == NULL || ctx->route != NGX_HTTP_LLM_ROUTE_CHAT) {
        return NGX_OK;
    }

    if (ctx->legacy_functions) {
        return ngx_http_llm_sse_function_call(r, ctx, ch, t, ll);
    }

    id = ngx_strlen(t->id);
    name = ngx_strlen(t->name);
    args = ngx_strlen(t->arguments);
    role = !ch->role_sent;
    first = (id || name);

    size = ngx_http_llm_head_len(ctx)
           + ngx_http_llm_len("{\"index\":,\"delta\":{\"tool_calls\":"
                              "[{\"index\":,\"arguments\":\"\"}}]},"
                              "\"logprobs\":null,\"finish_reason\":null}")
           + 2 * NGX_INT32_LEN
           + (role ? ngx_http_llm_len("\"role\":\"assistant\","
                                      "\"content\":null,")
                   : 0)
           + (first ? ngx_http_llm_len("\"id\":\"\",\"type\":\"function\","
                                       "\"function\":{\"name\":\"\",")
                      + ngx_http_llm_json_escape_len((u_char *) t->id, id)
                      + ngx_http_llm_json_escape_len((u_char *) t->name,
                                                     name)
                    : ngx_http_llm_len("\"function\":{"))
           + ngx_http_llm_json_escape_len((u_char *) t->arguments, args)
           + ngx_http_llm_tail_len(ctx);

    cl = ngx_http_llm_chain_buf(r, size);
    if (cl == NULL) {
        return NGX_ERROR;
    }

    p = ngx_http_llm_head(ctx, cl->buf->last);
    p = ngx_sprintf(p, "{\"index\":%uD,\"delta\":{", t->index);

    if (role) {
        ch->role_sent = 1;
        p = ngx_cpymem(p, "\"role\":\"assistant\",\"content\":null,",
                       ngx_http_llm_len("\"role\":\"assistant\","
                                        "\"content\":null,"));
    }

    p = ngx_sprintf(p, "\"tool_calls\":[{\"index\":%uD,", t->call_index);

    if (first) {
        p = ngx_cpymem(p, "\"id\":\"", ngx_http_llm_len("\"id\":\""));
        p = ngx_http_llm_json_escape(p, (u_char *) t->id, id);
        p = ngx_cpymem(p, "\",\"type\":\"function\",\"function\":"
                       "{\"name\":\"",
                       ngx_http_llm_len("\",\"type\":\"function\","
                                        "\"function\":{\"name\":\""));
        p = ngx_http_llm_json_escape(p, (u_char *) t->name, name);
        p = ngx_cpymem(p, "\",", 2);

    } else {
        p = ngx_cpymem(p, "\"function\":{", ngx_http_llm_len("\"function\":{"));
    }

    p = ngx_cpymem(p, "\"arguments\":\"", ngx_http_llm_len("\"arguments\":\""));
    p = ngx_http_llm_json_escape(p, (u_char *) t->arguments, args);
    p = ngx_cpymem(p, "\"}}]},\"logprobs\":null,\"finish_reason\":null}",
                   ngx_http_llm_len("\"}}]},\"logprobs\":null,"
                                    "\"finish_reason\":null}"));
    p = ngx_http_llm_tail(ctx, p);

    return ngx_http_llm_sse_put(r, ll, cl, p, size,
                                llcf->sse_flush_interval == 0);
}


/*
 * Done: the finish reasons (one chunk per choice, in one buffer), the
 * usage chunk when asked, and [DONE].
 */

static ngx_int_t
ngx_http_llm_sse_done(ngx_http_request_t *r, ngx_http_llm_ctx_t *ctx,
    Llm__Done *done, ngx_chain_t ***ll)
{
    u_char          *p;
    size_t           size, each;
    ngx_uint_t       i, chat;
    ngx_chain_t     *cl;

    chat = (ctx->route == NGX_HTTP_LLM_ROUTE_CHAT);

    if (done->system_fingerprint[0] && ctx->fingerprint.len == 0) {
        ctx->head.len = 0;
        if (ngx_http_llm_json_str(r->pool, &ctx->fingerprint,
                                  (u_char *) done->system_fingerprint,
                                  ngx_strlen(done->system_fingerprint))
            != NGX_OK)
        {
            return NGX_ERROR;
        }
    }

    ngx_http_llm_finish(ctx, done);

    /* per choice: the longest finish reason, the role when none went */

    each = ngx_http_llm_head_len(ctx) + ngx_http_llm_tail_len(ctx)
           + NGX_INT_T_LEN + ngx_http_llm_len("content_filter")
           + (chat ? ngx_http_llm_len("{\"index\":,\"delta\":{"
                                      "\"role\":\"assistant\","
                                      "\"content\":\"\"},\"logprobs\":null,"
                                      "\"finish_reason\":\"\"}")
                   : ngx_http_llm_len("{\"text\":\"\",\"index\":,"
                                      "\"logprobs\":null,"
                                      "\"finish_reason\":\"\"}"));
    size = ctx->n * each;

    cl = ngx_http_llm_chain_buf(r, size);
    if (cl == NULL) {
        return NGX_ERROR;
    }

    p = cl->buf->last;

    for (i = 0; i < ctx->n; i++) {
        p = ngx_http_llm_head(ctx, p);

        if (chat) {
            p = ngx_sprintf(p, "{\"index\":%ui,\"delta\":{%s},"
                            "\"logprobs\":null,\"finish_reason\":\"%s\"}",
                            i, ctx->choices[i].role_sent ? ""
                            : "\"role\":\"assistant\",\"content\":\"\"",
                            ngx_http_llm_finish_name(ctx,
                                                     ctx->choices[i].finish));

        } else {
            p = ngx_sprintf(p, "{\"text\":\"\",\"index\":%ui,"
                            "\"logprobs\":null,\"finish_reason\":\"%s\"}",
                            i,
                            ngx_http_llm_finish_name(ctx,
                                                     ctx->choices[i].finish));
        }

        p = ngx_http_llm_tail(ctx, p);
    }

    if (ngx_http_llm_sse_put(r, ll, cl, p, size, 0) != NGX_OK) {
        return NGX_ERROR;
    }

    if (ctx->include_usage
        && ngx_http_llm_sse_usage(r, ctx, ll) != NGX_OK)
    {
        return NGX_ERROR;
    }

    return ngx_http_llm_sse_raw(r, ll, (u_char *) "data: [DONE]\n\n",
                                ngx_http_llm_len("data: [DONE]\n\n"), 1);
}


static ngx_int_t
ngx_http_llm_sse_usage(ngx_http_request_t *r, ngx_http_llm_ctx_t *ctx,
    ngx_chain_t ***ll)
{
    u_char       *p;
    size_t        size;
    ngx_chain_t  *cl;

    size = ngx_http_llm_head_len(ctx)
           + ngx_http_llm_len("],\"usage\":{\"prompt_tokens\":,"
                              "\"completion_tokens\":,\"total_tokens\":,"
                              "\"prompt_tokens_details\":"
                              "{\"cached_tokens\":}}}\n\n")
           + 4 * NGX_INT_T_LEN;

    cl = ngx_http_llm_chain_buf(r, size);
    if (cl == NULL) {
        return NGX_ERROR;
    }

    p = ngx_http_llm_head(ctx, cl->buf->last);
    p = ngx_sprintf(p, "],\"usage\":{\"prompt_tokens\":%ui,"
                    "\"completion_tokens\":%ui,\"total_tokens\":%ui,"
                    "\"prompt_tokens_details\":{\"cached_tokens\":%ui}}}\n\n",
                    ctx->prompt_tokens, ctx->completion_tokens,
                    ctx->prompt_tokens + ctx->completion_tokens,
                    ctx->cached_tokens);

    return ngx_http_llm_sse_put(r, ll, cl, p, size, 0);
}


static ngx_int_t
ngx_http_llm_sse_error(ngx_http_request_t *r, ngx_http_llm_ctx_t *ctx,
    Llm__Error *e, ngx_chain_t ***ll)
{
    u_char                *p, *body;
    size_t                 len, size;
    ngx_chain_t           *cl;
    ngx_http_llm_error_t   err;

    if (e) {
        ngx_http_llm_map_error(e, &err);

    } else {
        err.status = ctx->err_status;
        err.type = "server_error";
        err.code = ctx->error_code.len ? (char *) ctx->error_code.data : NULL;
        err.param = NULL;
        err.message = ctx->err_message;
    }

    if (err.code) {
        ctx->error_code.data = (u_char *) err.code;
        ctx->error_code.len = ngx_strlen(err.code);
    }

    ngx_str_set(&ctx->finish_reason, "error");

    body = ngx_http_llm_error_body(ctx, r->pool, &err, &len);
    if (body == NULL) {
        return NGX_ERROR;
    }

    /* error_json ends with "\n"; an SSE event ends with an empty line */

    size = ngx_http_llm_len("data: ") + len - 1 + ngx_http_llm_len("\n\n");

    cl = ngx_http_llm_chain_buf(r, size);
    if (cl == NULL) {
        return NGX_ERROR;
    }

    p = ngx_cpymem(cl->buf->last, "data: ", ngx_http_llm_len("data: "));
    p = ngx_cpymem(p, body, len - 1);
    p = ngx_cpymem(p, "\n\n", 2);

    return ngx_http_llm_sse_put(r, ll, cl, p, size, 1);
}
