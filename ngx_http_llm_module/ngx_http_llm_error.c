
/*
 * ngx_http_llm_module: errors, always OpenAI-shaped:
 * {"error":{"message","type","param","code"}}.  The bodies the
 * module sends itself, engine error codes mapped to OpenAI classes, and
 * the error filter that turns nginx's own error pages on these locations
 * (502, 413, 504, ...) into such bodies.
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "ngx_http_llm_module.h"


static ngx_int_t ngx_http_llm_header_filter(ngx_http_request_t *r);
static ngx_int_t ngx_http_llm_body_filter(ngx_http_request_t *r,
    ngx_chain_t *in);


static ngx_http_output_header_filter_pt  ngx_http_next_header_filter;
static ngx_http_output_body_filter_pt    ngx_http_next_body_filter;


/* {"error":{"message":...,"type":...,"param":...,"code":...}} */

u_char *
ngx_http_llm_error_json(ngx_pool_t *pool, ngx_http_llm_error_t *err,
    size_t *len)
{
    u_char  *p, *s;
    size_t   n;

    /* exact: the quotes of param and code, or null for either */

    n = ngx_http_llm_len("{\"error\":{\"message\":\"\",\"type\":\"\","
                         "\"param\":,\"code\":}}\n")
        + ngx_http_llm_json_escape_len(err->message.data, err->message.len)
        + ngx_strlen(err->type ? err->type : "invalid_request_error")
        + (err->param ? 2 + ngx_http_llm_json_escape_len(
                                 (u_char *) err->param, ngx_strlen(err->param))
                      : ngx_http_llm_len("null"))
        + (err->code ? 2 + ngx_strlen(err->code) : ngx_http_llm_len("null"));

    s = ngx_pnalloc(pool, n);
    if (s == NULL) {
        return NULL;
    }

    p = ngx_cpymem(s, "{\"error\":{\"message\":\"",
                   sizeof("{\"error\":{\"message\":\"") - 1);
    p = ngx_http_llm_json_escape(p, err->message.data, err->message.len);
    p = ngx_sprintf(p, "\",\"type\":\"%s\",\"param\":",
                    err->type ? err->type : "invalid_request_error");

    if (err->param) {
        *p++ = '"';
        p = ngx_http_llm_json_escape(p, (u_char *) err->param,
                                     ngx_strlen(err->param));
        *p++ = '"';

    } else {
        p = ngx_cpymem(p, "null", 4);
    }

    p = ngx_cpymem(p, ",\"code\":", sizeof(",\"code\":") - 1);

    if (err->code) {
        p = ngx_sprintf(p, "\"%s\"", err->code);

    } else {
        p = ngx_cpymem(p, "null", 4);
    }

    p = ngx_cpymem(p, "}}\n", 3);

    *len = p - s;

    return s;
}


/* The error body in the shape of ctx's dialect (OpenAI's without one). */

u_char *
ngx_http_llm_error_body(ngx_http_llm_ctx_t *ctx, ngx_pool_t *pool,
    ngx_http_llm_error_t *err, size_t *len)
{
    if (ctx && ctx->dialect && ctx->dialect->error_json) {
        return ctx->dialect->error_json(pool, err, len);
    }

    return ngx_http_llm_error_json(pool, err, len);
}


ngx_int_t
ngx_http_llm_send_error(ngx_http_request_t *r, ngx_http_llm_error_t *err)
{
    u_char              *s;
    size_t               len;
    ngx_int_t            rc;
    ngx_buf_t           *b;
    ngx_chain_t          out;
    ngx_http_llm_ctx_t  *ctx;

    ctx = ngx_http_llm_get_ctx(r);
    if (ctx == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    if (err->code) {
        ctx->error_code.data = (u_char *) err->code;
        ctx->error_code.len = ngx_strlen(err->code);

    } else if (err->type) {
        ctx->error_code.data = (u_char *) err->type;
        ctx->error_code.len = ngx_strlen(err->type);
    }

    if (r->request_body == NULL && !r->discard_body) {
        if (ngx_http_discard_request_body(r) != NGX_OK) {
            r->keepalive = 0;
        }
    }

    s = ngx_http_llm_error_body(ctx, r->pool, err, &len);
    if (s == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    b = ngx_calloc_buf(r->pool);
    if (b == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    b->pos = s;
    b->last = s + len;
    b->memory = 1;
    b->last_buf = (r == r->main) ? 1 : 0;
    b->last_in_chain = 1;

    r->headers_out.status = err->status;
    r->headers_out.content_length_n = len;
    ngx_str_set(&r->headers_out.content_type, "application/json");
    r->headers_out.content_type_len = r->headers_out.content_type.len;
    r->headers_out.content_type_lowcase = NULL;

    if (ctx->ticket_set
        && ngx_http_llm_limit_headers(r, &ctx->ticket) != NGX_OK)
    {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ngx_log_error(NGX_LOG_INFO, r->connection->log, 0,
                  "llm: %ui %s: %V", err->status,
                  err->code ? err->code : "-", &err->message);

    rc = ngx_http_send_header(r);

    if (rc == NGX_ERROR || rc > NGX_OK || r->header_only) {
        return rc;
    }

    out.buf = b;
    out.next = NULL;

    return ngx_http_output_filter(r, &out);
}


ngx_int_t
ngx_http_llm_send_errorf(ngx_http_request_t *r, ngx_uint_t status,
    const char *type, const char *code, const char *param,
    const char *fmt, ...)
{
    u_char                *p;
    va_list                args;
    ngx_http_llm_error_t   err;

    p = ngx_pnalloc(r->pool, 2048);
    if (p == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    err.status = status;
    err.type = type;
    err.code = code;
    err.param = param;
    err.message.data = p;

    va_start(args, fmt);
    err.message.len = ngx_vslprintf(p, p + 2048, fmt, args) - p;
    va_end(args);

    return ngx_http_llm_send_error(r, &err);
}


/*
 * Retry-After on an answer that says "busy, come back" (every engine
 * overloaded or draining): OpenAI's SDKs wait that long before their
 * automatic retry instead of their own backoff.
 */

ngx_int_t
ngx_http_llm_retry_after(ngx_http_request_t *r)
{
    return ngx_http_llm_header_out(r, "Retry-After", (u_char *) "1", 1);
}


ngx_int_t
ngx_http_llm_header_out(ngx_http_request_t *r, const char *name,
    u_char *value, size_t len)
{
    ngx_table_elt_t  *h;

    h = ngx_list_push(&r->headers_out.headers);
    if (h == NULL) {
        return NGX_ERROR;
    }

    h->hash = 1;
    h->key.data = (u_char *) name;
    h->key.len = ngx_strlen(name);
    h->value.data = value;
    h->value.len = len;
    h->lowcase_key = NULL;

#if (nginx_version >= 1023000)
    h->next = NULL;
#endif

    return NGX_OK;
}


/*
 * The refusals of keys and limits (contract in ngx_http_llm_module.h):
 * OpenAI's codes and message texts; a 429 carries the x-ratelimit-*
 * headers, and Retry-After (whole seconds, at least 1) when waiting
 * helps; for an exhausted quota it does not, and "x-should-retry: false"
 * tells the OpenAI SDKs not to retry.
 */

ngx_int_t
ngx_http_llm_send_denial(ngx_http_request_t *r, ngx_http_llm_decision_t *d,
    ngx_http_llm_ticket_t *t)
{
    u_char      *p, dur[NGX_INT_T_LEN + 16], budget[32];
    size_t       len;
    ngx_uint_t   secs;

    switch (d->verdict) {

    case NGX_HTTP_LLM_DENY_STORE:
        return ngx_http_llm_send_errorf(r, NGX_HTTP_SERVICE_UNAVAILABLE,
                   "server_error", "limit_store_unavailable", NULL,
                   "The gateway cannot check the limits of key \"%V\" "
                   "now; please retry.", &d->key->name);

    case NGX_HTTP_LLM_DENY_NO_KEY:
        return ngx_http_llm_send_errorf(r, NGX_HTTP_UNAUTHORIZED,
                   "invalid_request_error", NULL, NULL,
                   "You didn't provide an API key. You need to provide "
                   "your API key in an Authorization header using Bearer "
                   "auth (i.e. Authorization: Bearer YOUR_KEY), or in an "
                   "x-api-key header.");

    case NGX_HTTP_LLM_DENY_BAD_KEY:
        return ngx_http_llm_send_errorf(r, NGX_HTTP_UNAUTHORIZED,
                   "invalid_request_error", "invalid_api_key", NULL,
                   "Incorrect API key provided: %s. You can find your API "
                   "key with the administrator of this gateway.",
                   d->masked);

    case NGX_HTTP_LLM_DENY_ZONE_FULL:
        return ngx_http_llm_send_errorf(r, NGX_HTTP_SERVICE_UNAVAILABLE,
                   "server_error", NULL, NULL,
                   "The gateway cannot track more API keys right now; "
                   "please retry.");

    default:
        break;
    }

    if (ngx_http_llm_limit_headers(r, t) != NGX_OK) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    if (d->verdict == NGX_HTTP_LLM_DENY_QUOTA
        || d->verdict == NGX_HTTP_LLM_DENY_BUDGET)
    {

        if (ngx_http_llm_header_out(r, "x-should-retry", (u_char *) "false",
                                    5)
            != NGX_OK)
        {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        if (d->verdict == NGX_HTTP_LLM_DENY_BUDGET) {
            (void) ngx_http_llm_format_cost(budget, d->key->budget);

            return ngx_http_llm_send_errorf(r, NGX_HTTP_TOO_MANY_REQUESTS,
                       "insufficient_quota", "insufficient_quota", NULL,
                       "You exceeded your current quota, please check "
                       "your plan and billing details. (key \"%V\": "
                       "budget $%s spent)", &d->key->name, budget);
        }

        return ngx_http_llm_send_errorf(r, NGX_HTTP_TOO_MANY_REQUESTS,
                   "insufficient_quota", "insufficient_quota", NULL,
                   "You exceeded your current quota, please check your "
                   "plan and billing details. (key \"%V\": quota %uL "
                   "tokens)", &d->key->name, d->key->quota);
    }

    secs = (d->wait + 999) / 1000;

    if (secs == 0) {
        secs = 1;
    }

    p = ngx_pnalloc(r->pool, NGX_INT_T_LEN);
    if (p == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    len = ngx_sprintf(p, "%ui", secs) - p;

    if (ngx_http_llm_header_out(r, "Retry-After", p, len) != NGX_OK) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    len = ngx_http_llm_format_duration(dur, d->wait ? d->wait : 1);
    dur[len] = '\0';

    if (d->verdict == NGX_HTTP_LLM_DENY_REQUESTS) {
        return ngx_http_llm_send_errorf(r, NGX_HTTP_TOO_MANY_REQUESTS,
                   "requests", "rate_limit_exceeded", NULL,
                   "Rate limit reached for key \"%V\" on requests per min "
                   "(RPM): Limit %ui, Used %ui, Requested %ui. Please try "
                   "again in %s.", &d->key->name, d->key->rpm, d->used,
                   d->requested, dur);
    }

    return ngx_http_llm_send_errorf(r, NGX_HTTP_TOO_MANY_REQUESTS,
               "tokens", "rate_limit_exceeded", NULL,
               "Rate limit reached for key \"%V\" on tokens per min (TPM): "
               "Limit %ui, Used %ui, Requested %ui. Please try again in %s.",
               &d->key->name, d->key->tpm, d->used, d->requested, dur);
}


/*
 * The error filter: nginx's own error responses (a 502 after every engine
 * failed, a 413 for a chunked body over client_max_body_size, a 500, ...)
 * on requests this module handles become OpenAI error bodies.  An engine
 * error kept in the context (say "overloaded" after every engine said so)
 * sets the status and the message.  Every response of these locations,
 * error or not, gets x-request-id (and the CORS headers) here.
 */

static ngx_int_t
ngx_http_llm_header_filter(ngx_http_request_t *r)
{
    ngx_http_llm_ctx_t       *ctx;
    ngx_http_llm_error_t      err;
    ngx_http_llm_loc_conf_t  *llcf;

    if (r != r->main) {
        return ngx_http_next_header_filter(r);
    }

    ctx = ngx_http_get_module_ctx(r, ngx_http_llm_module);

    if (ctx == NULL) {
        /* an error before the handler ran, e.g. 413 on Content-Length */

        llcf = ngx_http_get_module_loc_conf(r, ngx_http_llm_module);

        if (llcf->api != 1 && llcf->health != 1) {
            return ngx_http_next_header_filter(r);
        }

        ctx = ngx_http_llm_get_ctx(r);
        if (ctx == NULL) {
            return NGX_ERROR;
        }
    }

    if (!ctx->common_headers) {
        ctx->common_headers = 1;

        if (ngx_http_llm_response_headers(r, ctx) != NGX_OK) {
            return NGX_ERROR;
        }
    }

    if (r->err_status == 0 || ctx->rewrite) {
        return ngx_http_next_header_filter(r);
    }

    ngx_memzero(&err, sizeof(ngx_http_llm_error_t));

    if (ctx->err_status && r->err_status >= 500) {
        err.status = ctx->err_status;
        err.type = ctx->err_type;
        err.code = ctx->err_code;
        err.param = ctx->err_param;
        err.message = ctx->err_message;

    } else {
        err.status = r->err_status;
        err.type = "server_error";

        switch (r->err_status) {

        case NGX_HTTP_REQUEST_ENTITY_TOO_LARGE:
            err.type = "invalid_request_error";
            err.code = "request_too_large";
            ngx_str_set(&err.message, "The request body is over the size "
                        "limit (client_max_body_size).");
            break;

        case NGX_HTTP_BAD_REQUEST:
            err.type = "invalid_request_error";
            ngx_str_set(&err.message, "Bad request.");
            break;

        case NGX_HTTP_REQUEST_TIME_OUT:
            err.type = "invalid_request_error";
            err.code = "request_timeout";
            ngx_str_set(&err.message, "The request body was not received "
                        "in time.");
            break;

        case NGX_HTTP_BAD_GATEWAY:
            ctx->upstream_error = 1;
            err.code = "engine_unavailable";
            ngx_str_set(&err.message, "No inference engine could serve the "
                        "request (connection failed or invalid answer).");
            break;

        case NGX_HTTP_GATEWAY_TIME_OUT:
            ctx->upstream_error = 1;
            err.code = "engine_timeout";
            ngx_str_set(&err.message, "The inference engine did not answer "
                        "in time.");
            break;

        case NGX_HTTP_SERVICE_UNAVAILABLE:
            ctx->upstream_error = 1;
            err.code = "engine_overloaded";
            ngx_str_set(&err.message, "The inference engine is overloaded; "
                        "retry later.");
            break;

        default:
            if (r->err_status < 500) {
                err.type = "invalid_request_error";
            }

            err.code = (r->err_status >= 500) ? "internal_error" : NULL;
            ngx_str_set(&err.message, "The server could not handle the "
                        "request.");
        }
    }

    ctx->err_body.data = ngx_http_llm_error_body(ctx, r->pool, &err,
                                                 &ctx->err_body.len);
    if (ctx->err_body.data == NULL) {
        return NGX_ERROR;
    }

    if (err.code) {
        ctx->error_code.data = (u_char *) err.code;
        ctx->error_code.len = ngx_strlen(err.code);

    } else if (err.type) {
        ctx->error_code.data = (u_char *) err.type;
        ctx->error_code.len = ngx_strlen(err.type);
    }

    ctx->rewrite = 1;

    r->headers_out.status = err.status;
    r->err_status = err.status;
    r->headers_out.status_line.len = 0;
    r->headers_out.content_length_n = ctx->err_body.len;
    ngx_str_set(&r->headers_out.content_type, "application/json");
    r->headers_out.content_type_len = r->headers_out.content_type.len;
    r->headers_out.content_type_lowcase = NULL;

    if (ctx->ticket_set
        && ngx_http_llm_limit_headers(r, &ctx->ticket) != NGX_OK)
    {
        return NGX_ERROR;
    }

    if (err.status == NGX_HTTP_SERVICE_UNAVAILABLE
        && ngx_http_llm_retry_after(r) != NGX_OK)
    {
        return NGX_ERROR;
    }

    return ngx_http_next_header_filter(r);
}


static ngx_int_t
ngx_http_llm_body_filter(ngx_http_request_t *r, ngx_chain_t *in)
{
    ngx_int_t            rc;
    ngx_buf_t           *b;
    ngx_chain_t         *cl, out;
    ngx_http_llm_ctx_t  *ctx;

    ctx = ngx_http_get_module_ctx(r, ngx_http_llm_module);

    if (ctx == NULL || !ctx->rewrite || r != r->main) {
        rc = ngx_http_next_body_filter(r, in);

        /* a client gone under a write: its generation is still billed */

        if (rc == NGX_ERROR && ctx != NULL && r == r->main
            && r->connection->error)
        {
            return ngx_http_llm_write_failed(r, ctx);
        }

        return rc;
    }

    for (cl = in; cl; cl = cl->next) {
        cl->buf->pos = cl->buf->last;
        if (cl->buf->file) {
            cl->buf->file_pos = cl->buf->file_last;
        }
    }

    if (ctx->rewrite_sent) {
        return ngx_http_next_body_filter(r, NULL);
    }

    ctx->rewrite_sent = 1;

    b = ngx_calloc_buf(r->pool);
    if (b == NULL) {
        return NGX_ERROR;
    }

    b->pos = ctx->err_body.data;
    b->last = ctx->err_body.data + ctx->err_body.len;
    b->memory = 1;
    b->last_buf = 1;
    b->last_in_chain = 1;

    out.buf = b;
    out.next = NULL;

    return ngx_http_next_body_filter(r, &out);
}


/* Engine error codes as OpenAI error classes. */

void
ngx_http_llm_map_error(Llm__Error *e, ngx_http_llm_error_t *err)
{
    err->param = (e->param && e->param[0]) ? e->param : NULL;
    err->message.data = (u_char *) e->message;
    err->message.len = ngx_strlen(e->message);

    switch (e->code) {

    case LLM__ERROR_CODE__ERROR_CONTEXT_LENGTH_EXCEEDED:
        err->status = NGX_HTTP_BAD_REQUEST;
        err->type = "invalid_request_error";
        err->code = "context_length_exceeded";
        if (err->param == NULL) {
            err->param = "messages";
        }
        break;

    case LLM__ERROR_CODE__ERROR_INVALID_REQUEST:
        err->status = NGX_HTTP_BAD_REQUEST;
        err->type = "invalid_request_error";
        err->code = "invalid_value";
        break;

    case LLM__ERROR_CODE__ERROR_MODEL_NOT_FOUND:
        err->status = NGX_HTTP_NOT_FOUND;
        err->type = "invalid_request_error";
        err->code = "model_not_found";
        break;

    case LLM__ERROR_CODE__ERROR_OVERLOADED:
        err->status = NGX_HTTP_SERVICE_UNAVAILABLE;
        err->type = "server_error";
        err->code = "engine_overloaded";
        break;

    case LLM__ERROR_CODE__ERROR_SHUTTING_DOWN:
        err->status = NGX_HTTP_SERVICE_UNAVAILABLE;
        err->type = "server_error";
        err->code = "engine_shutting_down";
        break;

    case LLM__ERROR_CODE__ERROR_BAD_FRAME:
        err->status = NGX_HTTP_BAD_GATEWAY;
        err->type = "server_error";
        err->code = "bad_frame";
        break;

    default:
        err->status = NGX_HTTP_INTERNAL_SERVER_ERROR;
        err->type = "server_error";
        err->code = "internal_error";
    }

    if (err->message.len == 0) {
        ngx_str_set(&err->message, "The inference engine failed.");
    }
}


/* Puts the error filter into nginx's filter chains (postconfiguration). */

ngx_int_t
ngx_http_llm_error_filter_init(ngx_conf_t *cf)
{
    ngx_http_next_header_filter = ngx_http_top_header_filter;
    ngx_http_top_header_filter = ngx_http_llm_header_filter;

    ngx_http_next_body_filter = ngx_http_top_body_filter;
    ngx_http_top_body_filter = ngx_http_llm_body_filter;

    return NGX_OK;
}
