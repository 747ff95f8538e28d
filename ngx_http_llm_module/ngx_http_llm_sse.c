
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
static u_char *ngx_http_llm_tail(ngx_http_llm_ctx_t *ctx, u_char *p);
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


/* The fixed start of a chunk: data: {"id":...,"choices":[ */

static size_t
ngx_http_llm_head_len(ngx_http_llm_ctx_t *ctx)
{
    return sizeof("data: {\"id\":\"\",\"object\":\"chat.completion.chunk\","
                  "\"created\":,\"model\":\"\",\"system_fingerprint\":,"
                  "\"choices\":[") + ctx->id_len + NGX_TIME_T_LEN
           + ngx_http_llm_json_escape_len(ctx->model_name.data,
                                          ctx->model_name.len)
           + ctx->fingerprint.len + 8;
}


static u_char *
ngx_http_llm_head(ngx_http_llm_ctx_t *ctx, u_char *p)
{
    u_char  *h, *start;

    if (ctx->head.len) {
        return ngx_cpymem(p, ctx->head.data, ctx->head.len);
    }

    start = p;

    p = ngx_sprintf(p, "data: {\"id\":\"%*s\",\"object\":\"%s\","
                    "\"created\":%T,\"model\":\"",
                    ctx->id_len, ctx->id,
                    ctx->route == NGX_HTTP_LLM_ROUTE_CHAT
                    ? "chat.completion.chunk" : "text_completion",
                    ctx->created);
    p = ngx_http_llm_json_escape(p, ctx->model_name.data,
                                 ctx->model_name.len);

    if (ctx->fingerprint.len) {
        p = ngx_sprintf(p, "\",\"system_fingerprint\":\"%V\",\"choices\":[",
                        &ctx->fingerprint);

    } else {
        p = ngx_cpymem(p, "\",\"system_fingerprint\":null,\"choices\":[",
                       sizeof("\",\"system_fingerprint\":null,\"choices\":[")
                       - 1);
    }

    /* the same for every chunk of the stream: keep it */

    h = ngx_pnalloc(ctx->request->pool, p - start);
    if (h) {
        ctx->head.len = p - start;
        ctx->head.data = h;
        ngx_memcpy(h, start, ctx->head.len);
    }

    return p;
}


static u_char *
ngx_http_llm_tail(ngx_http_llm_ctx_t *ctx, u_char *p)
{
    if (ctx->include_usage) {
        return ngx_cpymem(p, "],\"usage\":null}\n\n",
                          sizeof("],\"usage\":null}\n\n") - 1);
    }

    return ngx_cpymem(p, "]}\n\n", sizeof("]}\n\n") - 1);
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
    u_char                   *p;
    char                     *lp;
    size_t                    size, lplen;
    json_t                   *lj;
    ngx_uint_t                i, chat, flush;
    ngx_chain_t              *cl;
    Llm__Delta               *d;
    Llm__ToolCallDelta       *t;
    Llm__ChoiceEnd           *ce;
    ngx_http_llm_choice_t    *ch;
    ngx_http_llm_loc_conf_t  *llcf;

    llcf = ngx_http_get_module_loc_conf(r, ngx_http_llm_module);
    chat = (ctx->route == NGX_HTTP_LLM_ROUTE_CHAT);
    flush = (llcf->sse_flush_interval == 0);

    if (ev == NULL) {
        return ngx_http_llm_sse_error(r, ctx, NULL, ll);
    }

    switch (ev->kind_case) {

    case LLM__EVENT__KIND_DELTA:
        d = ev->delta;

        ch = ngx_http_llm_choice(ctx, d->index);
        if (ch == NULL) {
            return NGX_OK;
        }

        lp = NULL;
        lplen = 0;

        if (d->n_logprobs && (ctx->logprobs || ctx->completion_logprobs >= 0))
        {
            if (chat) {
                lj = ngx_http_llm_chat_logprobs(d);

            } else {
                ch->logprobs = NULL;
                if (ngx_http_llm_completion_logprobs(ctx, ch, d) != NGX_OK) {
                    return NGX_ERROR;
                }
                lj = ch->logprobs;
                ch->logprobs = NULL;
            }

            if (lj) {
                lp = json_dumps(lj, JSON_COMPACT);
                json_decref(lj);
                lplen = lp ? ngx_strlen(lp) : 0;
            }
        }

        size = ngx_http_llm_head_len(ctx) + 160 + lplen
               + ngx_http_llm_json_escape_len((u_char *) d->text,
                                              ngx_strlen(d->text))
               + ngx_http_llm_json_escape_len((u_char *) d->reasoning,
                                              ngx_strlen(d->reasoning));

        cl = ngx_http_llm_chain_buf(r, size);
        if (cl == NULL) {
            free(lp);
            return NGX_ERROR;
        }

        p = ngx_http_llm_head(ctx, cl->buf->last);

        if (chat) {
            p = ngx_sprintf(p, "{\"index\":%uD,\"delta\":{", d->index);

            if (!ch->role_sent) {
                ch->role_sent = 1;
                p = ngx_cpymem(p, "\"role\":\"assistant\",",
                               sizeof("\"role\":\"assistant\",") - 1);
            }

            if (d->reasoning[0]) {
                p = ngx_cpymem(p, "\"reasoning_content\":\"",
                               sizeof("\"reasoning_content\":\"") - 1);
                p = ngx_http_llm_json_escape(p, (u_char *) d->reasoning,
                                             ngx_strlen(d->reasoning));
                *p++ = '"';
                *p++ = ',';
            }

            p = ngx_cpymem(p, "\"content\":\"", sizeof("\"content\":\"") - 1);
            p = ngx_http_llm_json_escape(p, (u_char *) d->text,
                                         ngx_strlen(d->text));
            p = ngx_cpymem(p, "\"},\"logprobs\":",
                           sizeof("\"},\"logprobs\":") - 1);

        } else {
            p = ngx_cpymem(p, "{\"text\":\"", sizeof("{\"text\":\"") - 1);
            p = ngx_http_llm_json_escape(p, (u_char *) d->text,
                                         ngx_strlen(d->text));
            p = ngx_sprintf(p, "\",\"index\":%uD,\"logprobs\":", d->index);
        }

        if (lp) {
            p = ngx_cpymem(p, lp, lplen);
            free(lp);

        } else {
            p = ngx_cpymem(p, "null", 4);
        }

        p = ngx_cpymem(p, ",\"finish_reason\":null}",
                       sizeof(",\"finish_reason\":null}") - 1);
        p = ngx_http_llm_tail(ctx, p);

        cl->buf->last = p;
        cl->buf->flush = flush;

        **ll = cl;
        *ll = &cl->next;

        return NGX_OK;

    case LLM__EVENT__KIND_TOOL_CALL:
        t = ev->tool_call;

        ch = ngx_http_llm_choice(ctx, t->index);
        if (ch == NULL || !chat) {
            return NGX_OK;
        }

        size = ngx_http_llm_head_len(ctx) + 256
               + ngx_http_llm_json_escape_len((u_char *) t->id,
                                              ngx_strlen(t->id))
               + ngx_http_llm_json_escape_len((u_char *) t->name,
                                              ngx_strlen(t->name))
               + ngx_http_llm_json_escape_len((u_char *) t->arguments,
                                              ngx_strlen(t->arguments));

        cl = ngx_http_llm_chain_buf(r, size);
        if (cl == NULL) {
            return NGX_ERROR;
        }

        p = ngx_http_llm_head(ctx, cl->buf->last);
        p = ngx_sprintf(p, "{\"index\":%uD,\"delta\":{", t->index);

        if (!ch->role_sent) {
            ch->role_sent = 1;
            p = ngx_cpymem(p, "\"role\":\"assistant\",\"content\":null,",
                     sizeof("\"role\":\"assistant\",\"content\":null,") - 1);
        }

        p = ngx_sprintf(p, "\"tool_calls\":[{\"index\":%uD,", t->call_index);

        if (t->id[0] || t->name[0]) {
            p = ngx_cpymem(p, "\"id\":\"", sizeof("\"id\":\"") - 1);
            p = ngx_http_llm_json_escape(p, (u_char *) t->id,
                                         ngx_strlen(t->id));
            p = ngx_cpymem(p, "\",\"type\":\"function\",\"function\":"
                           "{\"name\":\"", sizeof("\",\"type\":\"function\","
                           "\"function\":{\"name\":\"") - 1);
            p = ngx_http_llm_json_escape(p, (u_char *) t->name,
                                         ngx_strlen(t->name));
            p = ngx_cpymem(p, "\",", 2);

        } else {
            p = ngx_cpymem(p, "\"function\":{", sizeof("\"function\":{") - 1);
        }

        p = ngx_cpymem(p, "\"arguments\":\"", sizeof("\"arguments\":\"") - 1);
        p = ngx_http_llm_json_escape(p, (u_char *) t->arguments,
                                     ngx_strlen(t->arguments));
        p = ngx_cpymem(p, "\"}}]},\"logprobs\":null,\"finish_reason\":null}",
                       sizeof("\"}}]},\"logprobs\":null,"
                              "\"finish_reason\":null}") - 1);
        p = ngx_http_llm_tail(ctx, p);

        cl->buf->last = p;
        cl->buf->flush = flush;

        **ll = cl;
        *ll = &cl->next;

        return NGX_OK;

    case LLM__EVENT__KIND_DONE:

        if (ev->done->system_fingerprint[0] && ctx->fingerprint.len == 0) {
            ctx->head.len = 0;
            if (ngx_http_llm_json_str(r->pool, &ctx->fingerprint,
                                      (u_char *) ev->done->system_fingerprint,
                                      ngx_strlen(ev->done->system_fingerprint))
                != NGX_OK)
            {
                return NGX_ERROR;
            }
        }

        for (i = 0; i < ctx->n; i++) {
            ctx->choices[i].finish = LLM__FINISH_REASON__FINISH_STOP;
        }

        for (i = 0; i < ev->done->n_choices; i++) {
            ce = ev->done->choices[i];
            if (ce->index < ctx->n) {
                ctx->choices[ce->index].finish = ce->finish_reason;
            }
        }

        ctx->finish_reason.data = (u_char *)
                             ngx_http_llm_finish_name(ctx->choices[0].finish);
        ctx->finish_reason.len = ngx_strlen(ctx->finish_reason.data);

        size = ctx->n * (ngx_http_llm_head_len(ctx) + 128) + 512;

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
                                ngx_http_llm_finish_name(
                                    ctx->choices[i].finish));

            } else {
                p = ngx_sprintf(p, "{\"text\":\"\",\"index\":%ui,"
                                "\"logprobs\":null,\"finish_reason\":\"%s\"}",
                                i, ngx_http_llm_finish_name(
                                       ctx->choices[i].finish));
            }

            p = ngx_http_llm_tail(ctx, p);
        }

        cl->buf->last = p;

        **ll = cl;
        *ll = &cl->next;

        if (ctx->include_usage
            && ngx_http_llm_sse_usage(r, ctx, ll) != NGX_OK)
        {
            return NGX_ERROR;
        }

        return ngx_http_llm_sse_raw(r, ll, (u_char *) "data: [DONE]\n\n",
                                    sizeof("data: [DONE]\n\n") - 1, 1);

    case LLM__EVENT__KIND_ERROR:
        return ngx_http_llm_sse_error(r, ctx, ev->error, ll);

    default:
        return NGX_OK;
    }
}


static ngx_int_t
ngx_http_llm_sse_usage(ngx_http_request_t *r, ngx_http_llm_ctx_t *ctx,
    ngx_chain_t ***ll)
{
    u_char       *p;
    ngx_chain_t  *cl;

    cl = ngx_http_llm_chain_buf(r, ngx_http_llm_head_len(ctx) + 256);
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

    cl->buf->last = p;

    **ll = cl;
    *ll = &cl->next;

    return NGX_OK;
}


static ngx_int_t
ngx_http_llm_sse_error(ngx_http_request_t *r, ngx_http_llm_ctx_t *ctx,
    Llm__Error *e, ngx_chain_t ***ll)
{
    u_char                *body;
    size_t                 len;
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

    body = ngx_http_llm_error_json(r->pool, &err, &len);
    if (body == NULL) {
        return NGX_ERROR;
    }

    cl = ngx_http_llm_chain_buf(r, len + 16);
    if (cl == NULL) {
        return NGX_ERROR;
    }

    /* error_json ends with "\n"; an SSE event ends with an empty line */
    cl->buf->last = ngx_cpymem(cl->buf->last, "data: ", 6);
    cl->buf->last = ngx_cpymem(cl->buf->last, body, len - 1);
    cl->buf->last = ngx_cpymem(cl->buf->last, "\n\n", 2);
    cl->buf->flush = 1;

    **ll = cl;
    *ll = &cl->next;

    return NGX_OK;
}
