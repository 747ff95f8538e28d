
/*
 * ngx_http_llm_module: directives, the model table, the OpenAI routes,
 * body reading, OpenAI-shaped errors (also for nginx's own error pages on
 * these locations, through a header/body filter), /v1/models, /healthz
 * and the $llm_* variables.
 *
 * The engine exchange itself is in ngx_http_llm_upstream.c; request
 * validation and response rendering in ngx_http_llm_openai.c.
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "ngx_http_llm_module.h"


#define NGX_HTTP_LLM_PROBE_POLL  5


static ngx_int_t ngx_http_llm_handler(ngx_http_request_t *r);
static void ngx_http_llm_body_handler(ngx_http_request_t *r);
static ngx_int_t ngx_http_llm_read_body(ngx_http_request_t *r,
    ngx_str_t *body);
static ngx_int_t ngx_http_llm_resolve(ngx_http_request_t *r,
    ngx_http_llm_ctx_t *ctx, ngx_int_t *sent);
static ngx_int_t ngx_http_llm_not_found(ngx_http_request_t *r,
    ngx_str_t *name);
static ngx_int_t ngx_http_llm_info_route(ngx_http_request_t *r,
    ngx_http_llm_ctx_t *ctx);
static void ngx_http_llm_info_wait(ngx_event_t *ev);
static ngx_int_t ngx_http_llm_info_send(ngx_http_request_t *r,
    ngx_http_llm_ctx_t *ctx);
static ngx_int_t ngx_http_llm_send_json(ngx_http_request_t *r,
    ngx_uint_t status, json_t *j);
static void ngx_http_llm_cleanup(void *data);
static ngx_int_t ngx_http_llm_admit(ngx_http_request_t *r,
    ngx_http_llm_ctx_t *ctx);
static ngx_uint_t ngx_http_llm_window(ngx_http_request_t *r,
    ngx_http_llm_ctx_t *ctx);
static void ngx_http_llm_pool_cleanup(void *data);

static ngx_int_t ngx_http_llm_header_filter(ngx_http_request_t *r);
static ngx_int_t ngx_http_llm_body_filter(ngx_http_request_t *r,
    ngx_chain_t *in);

static ngx_int_t ngx_http_llm_variable(ngx_http_request_t *r,
    ngx_http_variable_value_t *v, uintptr_t data);

static ngx_int_t ngx_http_llm_add_variables(ngx_conf_t *cf);
static ngx_int_t ngx_http_llm_init(ngx_conf_t *cf);
static void *ngx_http_llm_create_main_conf(ngx_conf_t *cf);
static char *ngx_http_llm_init_main_conf(ngx_conf_t *cf, void *conf);
static void *ngx_http_llm_create_loc_conf(ngx_conf_t *cf);
static char *ngx_http_llm_merge_loc_conf(ngx_conf_t *cf, void *parent,
    void *child);
static ngx_int_t ngx_http_llm_add_backends(ngx_conf_t *cf,
    ngx_http_llm_main_conf_t *mcf, ngx_http_upstream_srv_conf_t *uscf,
    ngx_uint_t *first, ngx_uint_t *n);

static char *ngx_http_llm_pass(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
static char *ngx_http_llm_model(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
static char *ngx_http_llm_handler_flag(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);


static ngx_conf_bitmask_t  ngx_http_llm_next_upstream_masks[] = {
    { ngx_string("error"), NGX_HTTP_UPSTREAM_FT_ERROR },
    { ngx_string("timeout"), NGX_HTTP_UPSTREAM_FT_TIMEOUT },
    { ngx_string("invalid_frame"), NGX_HTTP_UPSTREAM_FT_INVALID_HEADER },
    { ngx_string("overloaded"), NGX_HTTP_UPSTREAM_FT_HTTP_503 },
    { ngx_string("http_500"), NGX_HTTP_UPSTREAM_FT_HTTP_500 },
    { ngx_string("http_502"), NGX_HTTP_UPSTREAM_FT_HTTP_502 },
    { ngx_string("http_503"), NGX_HTTP_UPSTREAM_FT_HTTP_503 },
    { ngx_string("http_504"), NGX_HTTP_UPSTREAM_FT_HTTP_504 },
    { ngx_string("off"), NGX_HTTP_UPSTREAM_FT_OFF },
    { ngx_null_string, 0 }
};


static ngx_command_t  ngx_http_llm_commands[] = {

    { ngx_string("llm_pass"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_http_llm_pass,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("llm_api"),
      NGX_HTTP_LOC_CONF|NGX_CONF_FLAG,
      ngx_http_llm_handler_flag,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_llm_loc_conf_t, api),
      NULL },

    { ngx_string("llm_health"),
      NGX_HTTP_LOC_CONF|NGX_CONF_FLAG,
      ngx_http_llm_handler_flag,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_llm_loc_conf_t, health),
      NULL },

    { ngx_string("llm_model"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_2MORE,
      ngx_http_llm_model,
      NGX_HTTP_MAIN_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("llm_info_cache"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_msec_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_llm_main_conf_t, info_cache),
      NULL },

    { ngx_string("llm_connect_timeout"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_msec_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_llm_loc_conf_t, upstream.connect_timeout),
      NULL },

    { ngx_string("llm_send_timeout"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_msec_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_llm_loc_conf_t, upstream.send_timeout),
      NULL },

    { ngx_string("llm_read_timeout"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_msec_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_llm_loc_conf_t, upstream.read_timeout),
      NULL },

    { ngx_string("llm_next_upstream"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_1MORE,
      ngx_conf_set_bitmask_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_llm_loc_conf_t, upstream.next_upstream),
      &ngx_http_llm_next_upstream_masks },

    { ngx_string("llm_next_upstream_tries"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_num_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_llm_loc_conf_t, upstream.next_upstream_tries),
      NULL },

    { ngx_string("llm_next_upstream_timeout"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_msec_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_llm_loc_conf_t, upstream.next_upstream_timeout),
      NULL },

    { ngx_string("llm_buffer_size"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_size_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_llm_loc_conf_t, upstream.buffer_size),
      NULL },

    { ngx_string("llm_max_frame"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_size_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_llm_loc_conf_t, max_frame),
      NULL },

    { ngx_string("llm_fallback_header"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_FLAG,
      ngx_conf_set_flag_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_llm_loc_conf_t, fallback_header),
      NULL },

    { ngx_string("llm_sse_heartbeat"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_msec_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_llm_loc_conf_t, sse_heartbeat),
      NULL },

    { ngx_string("llm_sse_flush_interval"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_msec_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_llm_loc_conf_t, sse_flush_interval),
      NULL },

      ngx_null_command
};


static ngx_http_module_t  ngx_http_llm_module_ctx = {
    ngx_http_llm_add_variables,            /* preconfiguration */
    ngx_http_llm_init,                     /* postconfiguration */

    ngx_http_llm_create_main_conf,         /* create main configuration */
    ngx_http_llm_init_main_conf,           /* init main configuration */

    NULL,                                  /* create server configuration */
    NULL,                                  /* merge server configuration */

    ngx_http_llm_create_loc_conf,          /* create location configuration */
    ngx_http_llm_merge_loc_conf            /* merge location configuration */
};


ngx_module_t  ngx_http_llm_module = {
    NGX_MODULE_V1,
    &ngx_http_llm_module_ctx,              /* module context */
    ngx_http_llm_commands,                 /* module directives */
    NGX_HTTP_MODULE,                       /* module type */
    NULL,                                  /* init master */
    NULL,                                  /* init module */
    NULL,                                  /* init process */
    NULL,                                  /* init thread */
    NULL,                                  /* exit thread */
    NULL,                                  /* exit process */
    NULL,                                  /* exit master */
    NGX_MODULE_V1_PADDING
};


enum {
    NGX_HTTP_LLM_VAR_KEY_NAME = 0,
    NGX_HTTP_LLM_VAR_MODEL,
    NGX_HTTP_LLM_VAR_PROMPT_TOKENS,
    NGX_HTTP_LLM_VAR_COMPLETION_TOKENS,
    NGX_HTTP_LLM_VAR_CACHED_TOKENS,
    NGX_HTTP_LLM_VAR_TTFT_MS,
    NGX_HTTP_LLM_VAR_FINISH_REASON,
    NGX_HTTP_LLM_VAR_ERROR_CODE
};


static ngx_http_variable_t  ngx_http_llm_vars[] = {

    { ngx_string("llm_key_name"), NULL, ngx_http_llm_variable,
      NGX_HTTP_LLM_VAR_KEY_NAME, NGX_HTTP_VAR_NOCACHEABLE, 0 },

    { ngx_string("llm_model"), NULL, ngx_http_llm_variable,
      NGX_HTTP_LLM_VAR_MODEL, NGX_HTTP_VAR_NOCACHEABLE, 0 },

    { ngx_string("llm_prompt_tokens"), NULL, ngx_http_llm_variable,
      NGX_HTTP_LLM_VAR_PROMPT_TOKENS, NGX_HTTP_VAR_NOCACHEABLE, 0 },

    { ngx_string("llm_completion_tokens"), NULL, ngx_http_llm_variable,
      NGX_HTTP_LLM_VAR_COMPLETION_TOKENS, NGX_HTTP_VAR_NOCACHEABLE, 0 },

    { ngx_string("llm_cached_tokens"), NULL, ngx_http_llm_variable,
      NGX_HTTP_LLM_VAR_CACHED_TOKENS, NGX_HTTP_VAR_NOCACHEABLE, 0 },

    { ngx_string("llm_ttft_ms"), NULL, ngx_http_llm_variable,
      NGX_HTTP_LLM_VAR_TTFT_MS, NGX_HTTP_VAR_NOCACHEABLE, 0 },

    { ngx_string("llm_finish_reason"), NULL, ngx_http_llm_variable,
      NGX_HTTP_LLM_VAR_FINISH_REASON, NGX_HTTP_VAR_NOCACHEABLE, 0 },

    { ngx_string("llm_error_code"), NULL, ngx_http_llm_variable,
      NGX_HTTP_LLM_VAR_ERROR_CODE, NGX_HTTP_VAR_NOCACHEABLE, 0 },

      ngx_http_null_variable
};


static ngx_http_output_header_filter_pt  ngx_http_next_header_filter;
static ngx_http_output_body_filter_pt    ngx_http_next_body_filter;


/*
 * Returns the request's context, creating it (with the cleanup that
 * settles limits and records metrics) on first use; NULL on no memory.
 */

ngx_http_llm_ctx_t *
ngx_http_llm_get_ctx(ngx_http_request_t *r)
{
    ngx_http_llm_ctx_t  *ctx;
    ngx_pool_cleanup_t  *pcln;
    ngx_http_cleanup_t  *cln;

    ctx = ngx_http_get_module_ctx(r, ngx_http_llm_module);
    if (ctx) {
        return ctx;
    }

    ctx = ngx_pcalloc(r->pool, sizeof(ngx_http_llm_ctx_t));
    if (ctx == NULL) {
        return NULL;
    }

    ctx->request = r;
    ctx->start = ngx_current_msec;
    ctx->created = ngx_time();
    ctx->completion_logprobs = -1;
    ctx->n = 1;

    cln = ngx_http_cleanup_add(r, 0);
    if (cln == NULL) {
        return NULL;
    }

    cln->handler = ngx_http_llm_cleanup;
    cln->data = ctx;

    pcln = ngx_pool_cleanup_add(r->pool, 0);
    if (pcln == NULL) {
        return NULL;
    }

    pcln->handler = ngx_http_llm_pool_cleanup;
    pcln->data = ctx;

    ngx_http_set_ctx(r, ctx, ngx_http_llm_module);

    return ctx;
}


/*
 * Settles the token reservation and records the metrics sample, once:
 * when the engine's answer has been handed to the output chain (the
 * upstream's finalize), so a scrape after the client saw the end always
 * counts it; or, for a request cut short, from the request cleanup.
 */

void
ngx_http_llm_record(ngx_http_request_t *r, ngx_http_llm_ctx_t *ctx,
    ngx_uint_t status)
{
    ngx_http_llm_sample_t  s;

    if (ctx->recorded) {
        return;
    }

    ctx->recorded = 1;

    /* cut off before the engine's usage: count what was generated */

    if (ctx->completion_tokens < ctx->streamed_tokens) {
        ctx->completion_tokens = ctx->streamed_tokens;
    }

    if (ctx->ticket_set) {
        ngx_http_llm_limit_settle(r, &ctx->ticket,
                                  ctx->prompt_tokens
                                  + ctx->completion_tokens);
    }

    if (ctx->route == 0) {
        return;
    }

    ngx_memzero(&s, sizeof(ngx_http_llm_sample_t));

    s.model = ctx->model_name.len ? ctx->model_name : ctx->requested;
    s.status = status;
    s.prompt_tokens = ctx->prompt_tokens;
    s.completion_tokens = ctx->completion_tokens;
    s.cached_tokens = ctx->cached_tokens;
    s.ttft = ctx->ttft;
    s.duration = ngx_current_msec - ctx->start;
    s.rate_limited = (status == NGX_HTTP_TOO_MANY_REQUESTS);
    s.fallback = (ctx->fallbacks > 0);
    s.upstream_error = ctx->upstream_error;
    s.stream = ctx->stream;

    /*
     * A model of the table, or a name an engine answered to (a request
     * cancelled by its client, 499, was still served): its own label.
     * Other names a client made up share one, so they cannot grow the
     * zone.
     */

    s.known = (ctx->model != NULL || ctx->prompt_tokens > 0);

    ngx_http_llm_metrics_record(r, &s);
}


static void
ngx_http_llm_cleanup(void *data)
{
    ngx_http_llm_ctx_t *ctx = data;

    ngx_http_request_t  *r;

    r = ctx->request;

    if (ctx->inflight) {
        ctx->inflight = 0;
        ngx_http_llm_metrics_inflight(r, -1);
    }

    if (ctx->finish_reason.len == 0 && ctx->got_token && !ctx->done) {
        if (r->headers_out.status >= NGX_HTTP_INTERNAL_SERVER_ERROR
            && r->headers_out.status != NGX_HTTP_CLIENT_CLOSED_REQUEST)
        {
            /* cut off by a timeout or a lost engine, not by the client */
            ngx_str_set(&ctx->finish_reason, "error");

        } else {
            ngx_str_set(&ctx->finish_reason, "cancelled");
        }
    }

    ngx_http_llm_record(r, ctx, r->headers_out.status ? r->headers_out.status
                                : (ngx_uint_t) NGX_HTTP_CLIENT_CLOSED_REQUEST);
}


static void
ngx_http_llm_pool_cleanup(void *data)
{
    ngx_http_llm_ctx_t *ctx = data;

    ngx_uint_t  i;

    if (ctx->heartbeat.timer_set) {
        ngx_del_timer(&ctx->heartbeat);
    }

    if (ctx->flush.timer_set) {
        ngx_del_timer(&ctx->flush);
    }

    if (ctx->heartbeat.posted) {
        ngx_delete_posted_event(&ctx->heartbeat);
    }

    if (ctx->flush.posted) {
        ngx_delete_posted_event(&ctx->flush);
    }

    ngx_free(ctx->frame);
    ctx->frame = NULL;

    /*
     * The logprobs of a JSON answer are jansson trees (malloc, not the
     * pool): a request that ends before Done (client gone, engine error,
     * timeout) still holds them here.
     */

    for (i = 0; ctx->choices && i < ctx->n; i++) {
        if (ctx->choices[i].logprobs) {
            json_decref(ctx->choices[i].logprobs);
            ctx->choices[i].logprobs = NULL;
        }
    }
}


/*
 * The content handler of llm_api and llm_health locations: routes by the
 * path after "/v1/", checks the method and the key, then reads the body.
 */

static ngx_int_t
ngx_http_llm_handler(ngx_http_request_t *r)
{
    u_char                    *p, *last;
    ngx_int_t                  rc;
    ngx_str_t                  rest;
    ngx_uint_t                 allowed;
    ngx_table_elt_t           *h;
    ngx_http_llm_ctx_t        *ctx;
    ngx_http_llm_loc_conf_t   *llcf;
    ngx_http_core_loc_conf_t  *clcf;

    llcf = ngx_http_get_module_loc_conf(r, ngx_http_llm_module);

    ctx = ngx_http_llm_get_ctx(r);
    if (ctx == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    if (r != r->main) {
        return NGX_HTTP_NOT_FOUND;
    }

    if (llcf->health == 1 && llcf->api != 1) {
        if (!(r->method & (NGX_HTTP_GET|NGX_HTTP_HEAD))) {
            goto not_allowed_get;
        }

        ctx->info = 3;
        return ngx_http_llm_info_route(r, ctx);
    }

    /* the route: what follows "/v1/" */

    p = r->uri.data;
    last = r->uri.data + r->uri.len;
    rest.len = 0;
    rest.data = NULL;

    while (p + 4 <= last) {
        if (ngx_strncmp(p, "/v1/", 4) == 0) {
            rest.data = p + 4;
            rest.len = last - rest.data;
            break;
        }

        p++;
    }

    if (rest.data == NULL) {
        goto unknown;
    }

    if (rest.len == sizeof("chat/completions") - 1
        && ngx_strncmp(rest.data, "chat/completions", rest.len) == 0)
    {
        ctx->route = NGX_HTTP_LLM_ROUTE_CHAT;
        allowed = NGX_HTTP_POST;

    } else if (rest.len == sizeof("completions") - 1
               && ngx_strncmp(rest.data, "completions", rest.len) == 0)
    {
        ctx->route = NGX_HTTP_LLM_ROUTE_COMPLETION;
        allowed = NGX_HTTP_POST;

    } else if (rest.len >= sizeof("models") - 1
               && ngx_strncmp(rest.data, "models", 6) == 0
               && (rest.len == 6
                   || (rest.data[6] == '/' && rest.len > 7)))
    {
        allowed = NGX_HTTP_GET|NGX_HTTP_HEAD;

        if (rest.len == 6) {
            ctx->info = 1;

        } else {
            ctx->info = 2;
            ctx->info_id.data = rest.data + 7;
            ctx->info_id.len = rest.len - 7;
        }

    } else if (rest.len == sizeof("healthz") - 1
               && ngx_strncmp(rest.data, "healthz", rest.len) == 0
               && llcf->health == 1)
    {
        if (!(r->method & (NGX_HTTP_GET|NGX_HTTP_HEAD))) {
            goto not_allowed_get;
        }

        ctx->info = 3;
        return ngx_http_llm_info_route(r, ctx);

    } else {
        goto unknown;
    }

    if (!(r->method & allowed)) {
        if (allowed == NGX_HTTP_POST) {
            goto not_allowed_post;
        }

        goto not_allowed_get;
    }

    rc = ngx_http_llm_auth(r, &ctx->key);

    if (rc == NGX_DECLINED) {
        ctx->key = NULL;

    } else if (rc != NGX_OK) {
        return rc;
    }

    if (allowed != NGX_HTTP_POST) {
        return ngx_http_llm_info_route(r, ctx);
    }

    clcf = ngx_http_get_module_loc_conf(r, ngx_http_core_module);

    if (r->headers_in.content_length_n > 0
        && clcf->client_max_body_size
        && r->headers_in.content_length_n
           > (off_t) clcf->client_max_body_size)
    {
        return ngx_http_llm_send_errorf(r, NGX_HTTP_REQUEST_ENTITY_TOO_LARGE,
                                        "invalid_request_error",
                                        "request_too_large", NULL,
                                        "Request body of %O bytes is over "
                                        "the limit of %O bytes.",
                                        r->headers_in.content_length_n,
                                        clcf->client_max_body_size);
    }

    rc = ngx_http_read_client_request_body(r, ngx_http_llm_body_handler);

    if (rc >= NGX_HTTP_SPECIAL_RESPONSE) {
        return rc;
    }

    return NGX_DONE;

unknown:

    return ngx_http_llm_send_errorf(r, NGX_HTTP_NOT_FOUND,
                                    "invalid_request_error", NULL, NULL,
                                    "Invalid URL (%V %V)",
                                    &r->method_name, &r->uri);

not_allowed_post:

    h = ngx_list_push(&r->headers_out.headers);
    if (h == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    h->hash = 1;
    ngx_str_set(&h->key, "Allow");
    ngx_str_set(&h->value, "POST");

    goto not_allowed;

not_allowed_get:

    h = ngx_list_push(&r->headers_out.headers);
    if (h == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    h->hash = 1;
    ngx_str_set(&h->key, "Allow");
    ngx_str_set(&h->value, "GET, HEAD");

not_allowed:

    return ngx_http_llm_send_errorf(r, NGX_HTTP_NOT_ALLOWED,
                                    "invalid_request_error",
                                    "method_not_allowed", NULL,
                                    "Method %V is not allowed for %V "
                                    "(allowed: %V)", &r->method_name,
                                    &r->uri, &h->value);
}


/*
 * Runs once the whole body is read: parses and validates it, resolves the
 * model and its fallback chain, checks the key's model list and limits,
 * and starts the engine exchange.  Finalizes the request itself.
 */

static void
ngx_http_llm_body_handler(ngx_http_request_t *r)
{
    ngx_int_t              rc;
    ngx_str_t              body;
    ngx_http_llm_ctx_t    *ctx;
    ngx_http_llm_error_t   err;

    ctx = ngx_http_get_module_ctx(r, ngx_http_llm_module);

    if (ngx_http_llm_read_body(r, &body) != NGX_OK) {
        ngx_http_finalize_request(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    ngx_memzero(&err, sizeof(ngx_http_llm_error_t));

    rc = ngx_http_llm_parse_request(r, ctx, body.data, body.len, &err);

    if (rc == NGX_ERROR) {
        ngx_http_finalize_request(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    if (rc != NGX_OK) {
        ngx_http_finalize_request(r, ngx_http_llm_send_error(r, &err));
        return;
    }

    if (ngx_http_llm_resolve(r, ctx, &rc) != NGX_OK) {
        ngx_http_finalize_request(r, rc);
        return;
    }

    if (ctx->key) {
        rc = ngx_http_llm_admit(r, ctx);
        if (rc != NGX_OK) {
            ngx_http_finalize_request(r, rc);
            return;
        }
    }

    rc = ngx_http_llm_upstream_start(r, ctx);
    if (rc != NGX_OK) {
        ngx_http_finalize_request(r, rc);
        return;
    }
}


/*
 * Admission against the key's limits.  The output a request may generate
 * is max_tokens per choice, or without it the model's context window
 * (from the engines' Info) minus the prompt; when the key has less left,
 * the request's max_tokens becomes what it has left, so a key overruns
 * its quota by no more than one prompt estimate (docs/KEYS.md).
 */

static ngx_int_t
ngx_http_llm_admit(ngx_http_request_t *r, ngx_http_llm_ctx_t *ctx)
{
    ngx_int_t      rc;
    ngx_uint_t     window, output, per;
    Llm__Sampling  *s;

    if (ctx->max_tokens) {
        output = ctx->n * ctx->max_tokens;

    } else {
        window = ngx_http_llm_window(r, ctx);
        output = ctx->n * (window > ctx->prompt_est
                           ? window - ctx->prompt_est : 1);
    }

    rc = ngx_http_llm_limit_admit(r, ctx->key, ctx->prompt_est, output,
                                  ctx->max_tokens != 0, &ctx->ticket);
    if (rc != NGX_OK) {
        return rc;
    }

    ctx->ticket_set = 1;

    if (ctx->ticket.out_cap == 0) {
        return NGX_OK;
    }

    per = ctx->ticket.out_cap / ctx->n;

    if (per == 0) {
        per = 1;
    }

    ngx_log_error(NGX_LOG_INFO, r->connection->log, 0,
                  "llm: key \"%V\" has %ui tokens left: max_tokens %ui",
                  &ctx->key->name, ctx->ticket.out_cap, per);

    ctx->max_tokens = per;

    s = ctx->gen ? ctx->gen->sampling : NULL;

    if (s) {
        s->max_tokens = (uint32_t) per;
    }

    return NGX_OK;
}


/*
 * The largest context window the engines of the request's model reported.
 * A stale or missing answer starts a probe, so the next request knows;
 * until one came (the first requests of a worker, every engine down), the
 * largest window any engine reported, else NGX_HTTP_LLM_WINDOW: a guess,
 * but not "all the key has left", which would keep every concurrent
 * request of the key out until the first one ends.
 */

#define NGX_HTTP_LLM_WINDOW  8192


static ngx_uint_t
ngx_http_llm_window(ngx_http_request_t *r, ngx_http_llm_ctx_t *ctx)
{
    ngx_uint_t                 i, first, n, window;
    ngx_http_llm_backend_t    *be;
    ngx_http_llm_main_conf_t  *mcf;
    ngx_http_llm_loc_conf_t   *llcf;

    mcf = ngx_http_get_module_main_conf(r, ngx_http_llm_module);

    if (ctx->model) {
        first = ctx->model->first_backend;
        n = ctx->model->nbackends;

    } else {
        llcf = ngx_http_get_module_loc_conf(r, ngx_http_llm_module);
        first = llcf->backend;
        n = llcf->nbackends;
    }

    be = mcf->backends.elts;
    window = 0;

    for (i = first; i < first + n && i < mcf->backends.nelts; i++) {

        if (!be[i].busy
            && (be[i].checked == 0
                || ngx_current_msec - be[i].checked >= mcf->info_cache))
        {
            (void) ngx_http_llm_probe(&be[i], r->connection->log);
        }

        if (be[i].up && be[i].context_length > window) {
            window = be[i].context_length;
        }
    }

    for (i = 0; window == 0 && i < mcf->backends.nelts; i++) {
        if (be[i].context_length > window) {
            window = be[i].context_length;
        }
    }

    return window ? window : NGX_HTTP_LLM_WINDOW;
}


/* The body as one contiguous string, read from the temp file if needed. */

static ngx_int_t
ngx_http_llm_read_body(ngx_http_request_t *r, ngx_str_t *body)
{
    u_char       *p;
    size_t        len;
    ssize_t       n;
    ngx_buf_t    *b;
    ngx_chain_t  *cl;

    body->len = 0;
    body->data = (u_char *) "";

    if (r->request_body == NULL || r->request_body->bufs == NULL) {
        return NGX_OK;
    }

    len = 0;

    for (cl = r->request_body->bufs; cl; cl = cl->next) {
        len += ngx_buf_size(cl->buf);
    }

    if (len == 0) {
        return NGX_OK;
    }

    p = ngx_pnalloc(r->pool, len + 1);
    if (p == NULL) {
        return NGX_ERROR;
    }

    body->data = p;

    for (cl = r->request_body->bufs; cl; cl = cl->next) {
        b = cl->buf;

        if (b->in_file) {
            n = ngx_read_file(b->file, p, b->file_last - b->file_pos,
                              b->file_pos);
            if (n != b->file_last - b->file_pos) {
                ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                              "llm: could not read the request body from "
                              "\"%V\"", &b->file->name);
                return NGX_ERROR;
            }

            p += n;

        } else {
            p = ngx_cpymem(p, b->pos, b->last - b->pos);
        }
    }

    *p = '\0';
    body->len = p - body->data;

    return NGX_OK;
}


ngx_http_llm_model_t *
ngx_http_llm_find_model(ngx_http_llm_main_conf_t *mcf, ngx_str_t *name)
{
    ngx_str_t             *a;
    ngx_uint_t             i, j;
    ngx_http_llm_model_t  *m;

    m = mcf->models.elts;

    for (i = 0; i < mcf->models.nelts; i++) {
        if (m[i].name.len == name->len
            && ngx_strncmp(m[i].name.data, name->data, name->len) == 0)
        {
            return &m[i];
        }
    }

    for (i = 0; i < mcf->models.nelts; i++) {
        a = m[i].aliases.elts;

        for (j = 0; j < m[i].aliases.nelts; j++) {
            if (a[j].len == name->len
                && ngx_strncmp(a[j].data, name->data, name->len) == 0)
            {
                return &m[i];
            }
        }
    }

    return NULL;
}


/*
 * Resolves ctx->requested to a model and builds the chain of models to
 * try: the model, then its configured fallbacks, or the models named in
 * the request's x-llm-fallback header when llm_fallback_header is on.
 * Models the key may not use are left out of the fallbacks.
 */

static ngx_int_t
ngx_http_llm_resolve(ngx_http_request_t *r, ngx_http_llm_ctx_t *ctx,
    ngx_int_t *sent)
{
    u_char                     *p, *last, *s;
    ngx_str_t                   name;
    ngx_uint_t                  i, j, n;
    ngx_list_part_t            *part;
    ngx_table_elt_t            *h, *header;
    ngx_http_llm_model_t       *m, *fb, **pm, **chain;
    ngx_http_llm_loc_conf_t    *llcf;
    ngx_http_llm_main_conf_t   *mcf;

    mcf = ngx_http_get_module_main_conf(r, ngx_http_llm_module);
    llcf = ngx_http_get_module_loc_conf(r, ngx_http_llm_module);

    if (ngx_array_init(&ctx->chain, r->pool, 4, sizeof(ngx_http_llm_model_t *))
        != NGX_OK)
    {
        goto failed;
    }

    if (mcf->models.nelts == 0) {
        /* no model table: every name goes to llm_pass as asked */
        ctx->model = NULL;
        ctx->model_name = ctx->requested;
        return NGX_OK;
    }

    m = ngx_http_llm_find_model(mcf, &ctx->requested);
    if (m == NULL) {
        *sent = ngx_http_llm_not_found(r, &ctx->requested);
        return NGX_DONE;
    }

    if (ctx->key && !ngx_http_llm_key_allows(ctx->key, &m->name)) {
        *sent = ngx_http_llm_send_errorf(r, NGX_HTTP_FORBIDDEN,
                                        "invalid_request_error",
                                        "model_not_allowed", "model",
                                        "The API key may not use the model "
                                        "'%V'.", &ctx->requested);
        return NGX_DONE;
    }

    ctx->model = m;
    ctx->model_name = m->name;

    pm = ngx_array_push(&ctx->chain);
    if (pm == NULL) {
        goto failed;
    }

    *pm = m;

    header = NULL;

    if (llcf->fallback_header == 1) {
        part = &r->headers_in.headers.part;
        h = part->elts;

        for (i = 0; /* void */; i++) {

            if (i >= part->nelts) {
                if (part->next == NULL) {
                    break;
                }

                part = part->next;
                h = part->elts;
                i = 0;
            }

            if (h[i].key.len == sizeof("x-llm-fallback") - 1
                && ngx_strncasecmp(h[i].key.data, (u_char *) "x-llm-fallback",
                                   h[i].key.len) == 0)
            {
                header = &h[i];
                break;
            }
        }
    }

    if (header) {
        p = header->value.data;
        last = p + header->value.len;

        while (p < last) {
            while (p < last && (*p == ' ' || *p == ',' || *p == '\t')) {
                p++;
            }

            s = p;

            while (p < last && *p != ',' && *p != ' ' && *p != '\t') {
                p++;
            }

            if (p == s) {
                break;
            }

            name.data = s;
            name.len = p - s;

            fb = ngx_http_llm_find_model(mcf, &name);
            if (fb == NULL) {
                *sent = ngx_http_llm_send_errorf(r, NGX_HTTP_BAD_REQUEST,
                                                "invalid_request_error",
                                                "model_not_found",
                                                "x-llm-fallback",
                                                "The fallback model '%V' "
                                                "does not exist.", &name);
                return NGX_DONE;
            }

            pm = ngx_array_push(&ctx->chain);
            if (pm == NULL) {
                goto failed;
            }

            *pm = fb;
        }

    } else {
        chain = m->fallback.elts;

        for (i = 0; i < m->fallback.nelts; i++) {
            pm = ngx_array_push(&ctx->chain);
            if (pm == NULL) {
                goto failed;
            }

            *pm = chain[i];
        }
    }

    /* drop duplicates and models the key may not use */

    chain = ctx->chain.elts;
    n = 1;

    for (i = 1; i < ctx->chain.nelts; i++) {

        if (ctx->key && !ngx_http_llm_key_allows(ctx->key, &chain[i]->name)) {
            continue;
        }

        for (j = 0; j < n; j++) {
            if (chain[j] == chain[i]) {
                break;
            }
        }

        if (j == n) {
            chain[n++] = chain[i];
        }
    }

    ctx->chain.nelts = n;
    ctx->chain_pos = 0;

    return NGX_OK;

failed:

    *sent = NGX_HTTP_INTERNAL_SERVER_ERROR;
    return NGX_ERROR;
}


static ngx_uint_t
ngx_http_llm_distance(ngx_str_t *a, ngx_str_t *b)
{
    ngx_uint_t  i, j, prev, cur, tmp, cost, row[65];

    if (a->len > 64 || b->len > 64) {
        return a->len > b->len ? a->len : b->len;
    }

    for (j = 0; j <= b->len; j++) {
        row[j] = j;
    }

    for (i = 1; i <= a->len; i++) {
        prev = row[0];
        row[0] = i;

        for (j = 1; j <= b->len; j++) {
            cost = (ngx_tolower(a->data[i - 1]) == ngx_tolower(b->data[j - 1]))
                   ? 0 : 1;
            cur = prev + cost;

            if (row[j] + 1 < cur) {
                cur = row[j] + 1;
            }

            if (row[j - 1] + 1 < cur) {
                cur = row[j - 1] + 1;
            }

            tmp = row[j];
            row[j] = cur;
            prev = tmp;
        }
    }

    return row[b->len];
}


/* 404 model_not_found naming the configured models, closest first. */

static ngx_int_t
ngx_http_llm_not_found(ngx_http_request_t *r, ngx_str_t *name)
{
    u_char                    *p, *last;
    ngx_str_t                 *names, *a, tmp;
    ngx_uint_t                 i, j, n, *dist, d;
    ngx_http_llm_model_t      *m;
    ngx_http_llm_main_conf_t  *mcf;

    mcf = ngx_http_get_module_main_conf(r, ngx_http_llm_module);

    n = 0;
    m = mcf->models.elts;

    for (i = 0; i < mcf->models.nelts; i++) {
        n += 1 + m[i].aliases.nelts;
    }

    names = ngx_palloc(r->pool, (n + 1) * sizeof(ngx_str_t));
    dist = ngx_palloc(r->pool, (n + 1) * sizeof(ngx_uint_t));
    p = ngx_pnalloc(r->pool, 1024);

    if (names == NULL || dist == NULL || p == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    n = 0;

    for (i = 0; i < mcf->models.nelts; i++) {
        names[n++] = m[i].name;

        a = m[i].aliases.elts;
        for (j = 0; j < m[i].aliases.nelts; j++) {
            names[n++] = a[j];
        }
    }

    for (i = 0; i < n; i++) {
        dist[i] = ngx_http_llm_distance(name, &names[i]);
    }

    /* insertion sort by distance, stable */

    for (i = 1; i < n; i++) {
        for (j = i; j > 0 && dist[j - 1] > dist[j]; j--) {
            d = dist[j]; dist[j] = dist[j - 1]; dist[j - 1] = d;
            tmp = names[j]; names[j] = names[j - 1]; names[j - 1] = tmp;
        }
    }

    last = p + 1024;
    tmp.data = p;

    for (i = 0; i < n && p < last - 80; i++) {
        p = ngx_slprintf(p, last, "%s'%V'", i ? ", " : "", &names[i]);
    }

    tmp.len = p - tmp.data;

    return ngx_http_llm_send_errorf(r, NGX_HTTP_NOT_FOUND,
                                    "invalid_request_error",
                                    "model_not_found", "model",
                                    "The model '%V' does not exist. "
                                    "Available models, closest first: %V.",
                                    name, &tmp);
}


/* /v1/models, /v1/models/{id} and /healthz: probe stale engines first. */

static ngx_int_t
ngx_http_llm_info_route(ngx_http_request_t *r, ngx_http_llm_ctx_t *ctx)
{
    ngx_int_t                  rc;
    ngx_uint_t                 i, busy;
    ngx_http_llm_backend_t    *be;
    ngx_http_llm_main_conf_t  *mcf;

    rc = ngx_http_discard_request_body(r);
    if (rc != NGX_OK) {
        return rc;
    }

    mcf = ngx_http_get_module_main_conf(r, ngx_http_llm_module);

    be = mcf->backends.elts;
    busy = 0;

    for (i = 0; i < mcf->backends.nelts; i++) {
        if (!be[i].busy
            && (be[i].checked == 0
                || ngx_current_msec - be[i].checked >= mcf->info_cache))
        {
            (void) ngx_http_llm_probe(&be[i], r->connection->log);
        }

        busy |= be[i].busy;
    }

    if (!busy) {
        return ngx_http_llm_info_send(r, ctx);
    }

    ctx->heartbeat.handler = ngx_http_llm_info_wait;
    ctx->heartbeat.data = r;
    ctx->heartbeat.log = r->connection->log;
    ngx_add_timer(&ctx->heartbeat, NGX_HTTP_LLM_PROBE_POLL);

    r->main->count++;

    return NGX_DONE;
}


static void
ngx_http_llm_info_wait(ngx_event_t *ev)
{
    ngx_uint_t                 i;
    ngx_connection_t          *c;
    ngx_http_request_t        *r;
    ngx_http_llm_ctx_t        *ctx;
    ngx_http_llm_backend_t    *be;
    ngx_http_llm_main_conf_t  *mcf;

    r = ev->data;
    c = r->connection;
    ctx = ngx_http_get_module_ctx(r, ngx_http_llm_module);
    mcf = ngx_http_get_module_main_conf(r, ngx_http_llm_module);

    be = mcf->backends.elts;

    for (i = 0; i < mcf->backends.nelts; i++) {
        if (be[i].busy && ngx_current_msec - ctx->start < 5000) {
            ngx_add_timer(ev, NGX_HTTP_LLM_PROBE_POLL);
            return;
        }
    }

    ngx_http_finalize_request(r, ngx_http_llm_info_send(r, ctx));
    ngx_http_run_posted_requests(c);
}


static json_t *
ngx_http_llm_model_json(ngx_str_t *id, int64_t created)
{
    return json_pack("{s:s%,s:s,s:I,s:s}",
                     "id", (char *) id->data, id->len,
                     "object", "model",
                     "created", (json_int_t) created,
                     "owned_by", "llm-engine");
}


static int64_t
ngx_http_llm_model_created(ngx_http_llm_main_conf_t *mcf,
    ngx_http_llm_model_t *m)
{
    ngx_uint_t               i;
    ngx_http_llm_backend_t  *be;

    be = mcf->backends.elts;

    for (i = m->first_backend; i < m->first_backend + m->nbackends; i++) {
        if (be[i].up && be[i].created) {
            return be[i].created;
        }
    }

    return 0;
}


static json_t *
ngx_http_llm_backend_json(ngx_http_llm_backend_t *be)
{
    json_t  *j;

    if (!be->up) {
        return json_pack("{s:s%,s:b,s:s}",
                         "backend", (char *) be->name.data, be->name.len,
                         "up", 0, "error", (char *) be->error);
    }

    j = json_pack("{s:s%,s:b,s:s,s:s,s:s,s:s,s:I,s:I,s:I}",
                  "backend", (char *) be->name.data, be->name.len,
                  "up", 1,
                  "model", (char *) be->model,
                  "revision", (char *) be->revision,
                  "load_state", (char *) be->load_state,
                  "quantization", (char *) be->quantization,
                  "queue_depth", (json_int_t) be->queue_depth,
                  "context_length", (json_int_t) be->context_length,
                  "created", (json_int_t) be->created);
    if (j == NULL) {
        return NULL;
    }

    json_object_set_new(j, "stats",
                        json_pack("{s:I,s:I,s:I,s:I}",
                                  "requests_total",
                                  (json_int_t) be->requests_total,
                                  "requests_running",
                                  (json_int_t) be->requests_running,
                                  "requests_queued",
                                  (json_int_t) be->requests_queued,
                                  "requests_cancelled",
                                  (json_int_t) be->requests_cancelled));
    return j;
}


/* Renders /v1/models, /v1/models/{id} or /healthz from the probe cache. */

static ngx_int_t
ngx_http_llm_info_send(ngx_http_request_t *r, ngx_http_llm_ctx_t *ctx)
{
    json_t                    *root, *data, *models, *bes, *jm;
    ngx_str_t                  id, *a, name;
    ngx_int_t                  rc;
    ngx_uint_t                 i, j, up, any, all, status;
    ngx_http_llm_model_t      *m;
    ngx_http_llm_backend_t    *be;
    ngx_http_llm_loc_conf_t   *llcf;
    ngx_http_llm_main_conf_t  *mcf;

    mcf = ngx_http_get_module_main_conf(r, ngx_http_llm_module);
    llcf = ngx_http_get_module_loc_conf(r, ngx_http_llm_module);

    be = mcf->backends.elts;
    m = mcf->models.elts;

    if (ctx->info == 2) {
        id = ctx->info_id;

        if (mcf->models.nelts) {
            ngx_http_llm_model_t  *found;

            found = ngx_http_llm_find_model(mcf, &id);
            if (found == NULL) {
                return ngx_http_llm_send_errorf(r, NGX_HTTP_NOT_FOUND,
                                                "invalid_request_error",
                                                "model_not_found", "model",
                                                "The model '%V' does not "
                                                "exist", &id);
            }

            return ngx_http_llm_send_json(r, NGX_HTTP_OK,
                       ngx_http_llm_model_json(&id,
                           ngx_http_llm_model_created(mcf, found)));
        }

        for (i = llcf->backend; i < llcf->backend + llcf->nbackends; i++) {
            if (be[i].up
                && ngx_strlen(be[i].model) == id.len
                && ngx_strncmp(be[i].model, id.data, id.len) == 0)
            {
                return ngx_http_llm_send_json(r, NGX_HTTP_OK,
                           ngx_http_llm_model_json(&id, be[i].created));
            }
        }

        return ngx_http_llm_send_errorf(r, NGX_HTTP_NOT_FOUND,
                                        "invalid_request_error",
                                        "model_not_found", "model",
                                        "The model '%V' does not exist",
                                        &id);
    }

    if (ctx->info == 1) {
        /* /v1/models */

        root = json_pack("{s:s,s:[]}", "object", "list", "data");
        if (root == NULL) {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        data = json_object_get(root, "data");

        for (i = 0; i < mcf->models.nelts; i++) {
            json_array_append_new(data,
                ngx_http_llm_model_json(&m[i].name,
                    ngx_http_llm_model_created(mcf, &m[i])));

            a = m[i].aliases.elts;
            for (j = 0; j < m[i].aliases.nelts; j++) {
                json_array_append_new(data,
                    ngx_http_llm_model_json(&a[j],
                        ngx_http_llm_model_created(mcf, &m[i])));
            }
        }

        if (mcf->models.nelts == 0) {
            for (i = llcf->backend; i < llcf->backend + llcf->nbackends; i++)
            {
                if (!be[i].up || be[i].model[0] == '\0') {
                    continue;
                }

                for (j = llcf->backend; j < i; j++) {
                    if (be[j].up
                        && ngx_strcmp(be[j].model, be[i].model) == 0)
                    {
                        break;
                    }
                }

                if (j < i) {
                    continue;
                }

                name.data = be[i].model;
                name.len = ngx_strlen(be[i].model);

                json_array_append_new(data,
                    ngx_http_llm_model_json(&name, be[i].created));
            }
        }

        return ngx_http_llm_send_json(r, NGX_HTTP_OK, root);
    }

    /* /healthz */

    root = json_object();
    models = json_array();
    if (root == NULL || models == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    all = 1;
    any = 0;

    for (i = 0; i < mcf->models.nelts; i++) {
        bes = json_array();
        up = 0;

        for (j = m[i].first_backend;
             j < m[i].first_backend + m[i].nbackends;
             j++)
        {
            json_array_append_new(bes, ngx_http_llm_backend_json(&be[j]));
            up |= be[j].up;
        }

        jm = json_pack("{s:s%,s:s%,s:b,s:o}",
                       "id", (char *) m[i].name.data, m[i].name.len,
                       "upstream", (char *) m[i].upstream_name.data,
                       m[i].upstream_name.len,
                       "up", (int) up, "backends", bes);
        json_array_append_new(models, jm);

        all &= up;
        any |= up;
    }

    if (mcf->models.nelts == 0) {
        bes = json_array();
        up = 0;

        for (j = llcf->backend; j < llcf->backend + llcf->nbackends; j++) {
            json_array_append_new(bes, ngx_http_llm_backend_json(&be[j]));
            up |= be[j].up;
        }

        jm = json_pack("{s:s,s:b,s:o}", "id", "*", "up", (int) up,
                       "backends", bes);
        json_array_append_new(models, jm);

        all = up;
        any = up;
    }

    json_object_set_new(root, "status",
                        json_string(all ? "ok" : (any ? "degraded" : "down")));
    json_object_set_new(root, "models", models);

    status = all ? NGX_HTTP_OK : NGX_HTTP_SERVICE_UNAVAILABLE;

    rc = ngx_http_llm_send_json(r, status, root);

    return rc;
}


/* Sends j (consumed) as the whole JSON response. */

static ngx_int_t
ngx_http_llm_send_json(ngx_http_request_t *r, ngx_uint_t status, json_t *j)
{
    char         *s;
    size_t        len;
    ngx_int_t     rc;
    ngx_buf_t    *b;
    ngx_chain_t   out;

    if (j == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    s = json_dumps(j, JSON_COMPACT);
    json_decref(j);

    if (s == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    len = ngx_strlen(s);

    b = ngx_create_temp_buf(r->pool, len + 1);
    if (b == NULL) {
        free(s);
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    b->last = ngx_cpymem(b->last, s, len);
    *b->last++ = '\n';
    free(s);

    b->last_buf = (r == r->main) ? 1 : 0;
    b->last_in_chain = 1;

    r->headers_out.status = status;
    r->headers_out.content_length_n = b->last - b->pos;
    ngx_str_set(&r->headers_out.content_type, "application/json");
    r->headers_out.content_type_len = r->headers_out.content_type.len;
    r->headers_out.content_type_lowcase = NULL;

    rc = ngx_http_send_header(r);

    if (rc == NGX_ERROR || rc > NGX_OK || r->header_only) {
        return rc;
    }

    out.buf = b;
    out.next = NULL;

    return ngx_http_output_filter(r, &out);
}


/* {"error":{"message":...,"type":...,"param":...,"code":...}} */

u_char *
ngx_http_llm_error_json(ngx_pool_t *pool, ngx_http_llm_error_t *err,
    size_t *len)
{
    u_char  *p, *s;
    size_t   n;

    n = sizeof("{\"error\":{\"message\":\"\",\"type\":\"\",\"param\":,"
               "\"code\":}}\n") + 16
        + ngx_http_llm_json_escape_len(err->message.data, err->message.len)
        + ngx_strlen(err->type ? err->type : "invalid_request_error")
        + (err->param ? ngx_http_llm_json_escape_len((u_char *) err->param,
                                                ngx_strlen(err->param)) : 4)
        + (err->code ? ngx_strlen(err->code) : 4);

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

    s = ngx_http_llm_error_json(r->pool, err, &len);
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
    ngx_table_elt_t  *h;

    h = ngx_list_push(&r->headers_out.headers);
    if (h == NULL) {
        return NGX_ERROR;
    }

    h->hash = 1;
    ngx_str_set(&h->key, "Retry-After");
    ngx_str_set(&h->value, "1");
    h->lowcase_key = NULL;

#if (nginx_version >= 1023000)
    h->next = NULL;
#endif

    return NGX_OK;
}


/*
 * The error filter: nginx's own error responses (a 502 after every engine
 * failed, a 413 for a chunked body over client_max_body_size, a 500, ...)
 * on requests this module handles become OpenAI error bodies.  An engine
 * error kept in the context (say "overloaded" after every engine said so)
 * sets the status and the message.
 */

static ngx_int_t
ngx_http_llm_header_filter(ngx_http_request_t *r)
{
    ngx_http_llm_ctx_t       *ctx;
    ngx_http_llm_error_t      err;
    ngx_http_llm_loc_conf_t  *llcf;

    if (r != r->main || r->err_status == 0) {
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

    if (ctx->rewrite) {
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

    ctx->err_body.data = ngx_http_llm_error_json(r->pool, &err,
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
    ngx_buf_t           *b;
    ngx_chain_t         *cl, out;
    ngx_http_llm_ctx_t  *ctx;

    ctx = ngx_http_get_module_ctx(r, ngx_http_llm_module);

    if (ctx == NULL || !ctx->rewrite || r != r->main) {
        return ngx_http_next_body_filter(r, in);
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


static ngx_int_t
ngx_http_llm_variable(ngx_http_request_t *r, ngx_http_variable_value_t *v,
    uintptr_t data)
{
    u_char              *p;
    ngx_str_t            s;
    ngx_uint_t           n;
    ngx_http_llm_ctx_t  *ctx;

    ctx = ngx_http_get_module_ctx(r, ngx_http_llm_module);

    if (ctx == NULL) {
        v->not_found = 1;
        return NGX_OK;
    }

    s.len = 0;
    s.data = NULL;
    n = 0;

    switch (data) {

    case NGX_HTTP_LLM_VAR_KEY_NAME:
        if (ctx->key) {
            s = ctx->key->name;
        }
        goto string;

    case NGX_HTTP_LLM_VAR_MODEL:
        s = ctx->model_name.len ? ctx->model_name : ctx->requested;
        goto string;

    case NGX_HTTP_LLM_VAR_FINISH_REASON:
        s = ctx->finish_reason;
        goto string;

    case NGX_HTTP_LLM_VAR_ERROR_CODE:
        s = ctx->error_code;
        goto string;

    case NGX_HTTP_LLM_VAR_PROMPT_TOKENS:
        n = ctx->prompt_tokens;
        break;

    case NGX_HTTP_LLM_VAR_COMPLETION_TOKENS:
        n = ctx->completion_tokens;
        break;

    case NGX_HTTP_LLM_VAR_CACHED_TOKENS:
        n = ctx->cached_tokens;
        break;

    case NGX_HTTP_LLM_VAR_TTFT_MS:
        if (!ctx->got_token) {
            goto dash;
        }

        n = ctx->ttft;
        break;
    }

    p = ngx_pnalloc(r->pool, NGX_INT_T_LEN);
    if (p == NULL) {
        return NGX_ERROR;
    }

    v->len = ngx_sprintf(p, "%ui", n) - p;
    v->data = p;
    v->valid = 1;
    v->no_cacheable = 1;
    v->not_found = 0;

    return NGX_OK;

string:

    if (s.len == 0) {
        goto dash;
    }

    v->len = s.len;
    v->data = s.data;
    v->valid = 1;
    v->no_cacheable = 1;
    v->not_found = 0;

    return NGX_OK;

dash:

    v->len = 1;
    v->data = (u_char *) "-";
    v->valid = 1;
    v->no_cacheable = 1;
    v->not_found = 0;

    return NGX_OK;
}


static ngx_int_t
ngx_http_llm_add_variables(ngx_conf_t *cf)
{
    ngx_http_variable_t  *var, *v;

    for (v = ngx_http_llm_vars; v->name.len; v++) {
        var = ngx_http_add_variable(cf, &v->name, v->flags);
        if (var == NULL) {
            return NGX_ERROR;
        }

        var->get_handler = v->get_handler;
        var->data = v->data;
    }

    return NGX_OK;
}


static ngx_int_t
ngx_http_llm_init(ngx_conf_t *cf)
{
    ngx_http_next_header_filter = ngx_http_top_header_filter;
    ngx_http_top_header_filter = ngx_http_llm_header_filter;

    ngx_http_next_body_filter = ngx_http_top_body_filter;
    ngx_http_top_body_filter = ngx_http_llm_body_filter;

    return NGX_OK;
}


static void *
ngx_http_llm_create_main_conf(ngx_conf_t *cf)
{
    ngx_http_llm_main_conf_t  *mcf;

    mcf = ngx_pcalloc(cf->pool, sizeof(ngx_http_llm_main_conf_t));
    if (mcf == NULL) {
        return NULL;
    }

    if (ngx_array_init(&mcf->models, cf->pool, 4,
                       sizeof(ngx_http_llm_model_t))
        != NGX_OK)
    {
        return NULL;
    }

    if (ngx_array_init(&mcf->backends, cf->pool, 4,
                       sizeof(ngx_http_llm_backend_t))
        != NGX_OK)
    {
        return NULL;
    }

    if (ngx_array_init(&mcf->inits, cf->pool, 4,
                       sizeof(ngx_http_llm_peer_init_t))
        != NGX_OK)
    {
        return NULL;
    }

    mcf->info_cache = NGX_CONF_UNSET_MSEC;

    return mcf;
}


/*
 * Runs after the whole http{} block is read, so upstream{} blocks named
 * by llm_model are known: resolves fallback names and lists every engine
 * address for the Info probes.
 */

static char *
ngx_http_llm_init_main_conf(ngx_conf_t *cf, void *conf)
{
    ngx_http_llm_main_conf_t *mcf = conf;

    ngx_str_t              *names;
    ngx_uint_t              i, j;
    ngx_http_llm_model_t   *m, *fb, **pm;

    ngx_conf_init_msec_value(mcf->info_cache, 1000);

    m = mcf->models.elts;

    for (i = 0; i < mcf->models.nelts; i++) {

        names = m[i].fallback_names.elts;

        for (j = 0; j < m[i].fallback_names.nelts; j++) {
            fb = ngx_http_llm_find_model(mcf, &names[j]);
            if (fb == NULL) {
                ngx_log_error(NGX_LOG_EMERG, cf->log, 0,
                              "llm_model \"%V\": fallback model \"%V\" is "
                              "not defined by any llm_model",
                              &m[i].name, &names[j]);
                return NGX_CONF_ERROR;
            }

            if (fb == &m[i]) {
                continue;
            }

            pm = ngx_array_push(&m[i].fallback);
            if (pm == NULL) {
                return NGX_CONF_ERROR;
            }

            *pm = fb;
        }

        if (ngx_http_llm_add_backends(cf, mcf, m[i].upstream,
                                      &m[i].first_backend, &m[i].nbackends)
            != NGX_OK)
        {
            return NGX_CONF_ERROR;
        }

        if (ngx_http_llm_wrap_peer_init(cf, m[i].upstream) != NGX_OK) {
            return NGX_CONF_ERROR;
        }
    }

    return NGX_CONF_OK;
}


/* Adds one backend per engine address of uscf (reusing known ones). */

static ngx_int_t
ngx_http_llm_add_backends(ngx_conf_t *cf, ngx_http_llm_main_conf_t *mcf,
    ngx_http_upstream_srv_conf_t *uscf, ngx_uint_t *first, ngx_uint_t *n)
{
    ngx_uint_t                   i, j;
    ngx_http_llm_backend_t      *be;
    ngx_http_upstream_server_t  *us;

    *first = 0;
    *n = 0;

    if (uscf == NULL) {
        return NGX_OK;
    }

    be = mcf->backends.elts;

    for (i = 0; i < mcf->backends.nelts; i++) {
        if (be[i].upstream == uscf) {
            *first = i;

            for (j = i; j < mcf->backends.nelts && be[j].upstream == uscf;
                 j++)
            {
                (*n)++;
            }

            return NGX_OK;
        }
    }

    *first = mcf->backends.nelts;

    if (uscf->servers == NULL) {
        return NGX_OK;
    }

    us = uscf->servers->elts;

    for (i = 0; i < uscf->servers->nelts; i++) {
        for (j = 0; j < us[i].naddrs; j++) {
            be = ngx_array_push(&mcf->backends);
            if (be == NULL) {
                return NGX_ERROR;
            }

            ngx_memzero(be, sizeof(ngx_http_llm_backend_t));

            be->name = us[i].addrs[j].name;
            be->addr = &us[i].addrs[j];
            be->upstream = uscf;
            be->timeout = 1000;

            (*n)++;
        }
    }

    (void) cf;

    return NGX_OK;
}


static void *
ngx_http_llm_create_loc_conf(ngx_conf_t *cf)
{
    ngx_http_llm_loc_conf_t  *conf;

    conf = ngx_pcalloc(cf->pool, sizeof(ngx_http_llm_loc_conf_t));
    if (conf == NULL) {
        return NULL;
    }

    /*
     * set by ngx_pcalloc():
     *
     *     conf->upstream.upstream = NULL;
     *     conf->upstream.next_upstream = 0;
     *     conf->upstream.hide_headers_hash = { NULL, 0 };
     */

    conf->upstream.local = NGX_CONF_UNSET_PTR;
    conf->upstream.socket_keepalive = NGX_CONF_UNSET;
    conf->upstream.next_upstream_tries = NGX_CONF_UNSET_UINT;
    conf->upstream.connect_timeout = NGX_CONF_UNSET_MSEC;
    conf->upstream.send_timeout = NGX_CONF_UNSET_MSEC;
    conf->upstream.read_timeout = NGX_CONF_UNSET_MSEC;
    conf->upstream.next_upstream_timeout = NGX_CONF_UNSET_MSEC;
    conf->upstream.buffer_size = NGX_CONF_UNSET_SIZE;

    /* the hardcoded values */
    conf->upstream.cyclic_temp_file = 0;
    conf->upstream.buffering = 0;
    conf->upstream.ignore_client_abort = 0;
    conf->upstream.send_lowat = 0;
    conf->upstream.bufs.num = 0;
    conf->upstream.busy_buffers_size = 0;
    conf->upstream.max_temp_file_size = 0;
    conf->upstream.temp_file_write_size = 0;
    conf->upstream.intercept_errors = 0;
    conf->upstream.pass_request_headers = 0;
    conf->upstream.pass_request_body = 0;
    conf->upstream.force_ranges = 0;

    ngx_str_set(&conf->upstream.module, "llm");

    conf->api = NGX_CONF_UNSET;
    conf->health = NGX_CONF_UNSET;
    conf->fallback_header = NGX_CONF_UNSET;
    conf->sse_heartbeat = NGX_CONF_UNSET_MSEC;
    conf->sse_flush_interval = NGX_CONF_UNSET_MSEC;
    conf->max_frame = NGX_CONF_UNSET_SIZE;

    return conf;
}


static char *
ngx_http_llm_merge_loc_conf(ngx_conf_t *cf, void *parent, void *child)
{
    ngx_http_llm_loc_conf_t *prev = parent;
    ngx_http_llm_loc_conf_t *conf = child;

    ngx_http_llm_main_conf_t  *mcf;

    ngx_conf_merge_ptr_value(conf->upstream.local, prev->upstream.local,
                             NULL);

    ngx_conf_merge_value(conf->upstream.socket_keepalive,
                         prev->upstream.socket_keepalive, 0);

    ngx_conf_merge_uint_value(conf->upstream.next_upstream_tries,
                              prev->upstream.next_upstream_tries, 0);

    ngx_conf_merge_msec_value(conf->upstream.connect_timeout,
                              prev->upstream.connect_timeout, 5000);

    ngx_conf_merge_msec_value(conf->upstream.send_timeout,
                              prev->upstream.send_timeout, 60000);

    ngx_conf_merge_msec_value(conf->upstream.read_timeout,
                              prev->upstream.read_timeout, 300000);

    ngx_conf_merge_msec_value(conf->upstream.next_upstream_timeout,
                              prev->upstream.next_upstream_timeout, 0);

    ngx_conf_merge_size_value(conf->upstream.buffer_size,
                              prev->upstream.buffer_size,
                              (size_t) ngx_pagesize);

    ngx_conf_merge_bitmask_value(conf->upstream.next_upstream,
                              prev->upstream.next_upstream,
                              (NGX_CONF_BITMASK_SET
                               |NGX_HTTP_UPSTREAM_FT_ERROR
                               |NGX_HTTP_UPSTREAM_FT_TIMEOUT
                               |NGX_HTTP_UPSTREAM_FT_INVALID_HEADER
                               |NGX_HTTP_UPSTREAM_FT_HTTP_500
                               |NGX_HTTP_UPSTREAM_FT_HTTP_502
                               |NGX_HTTP_UPSTREAM_FT_HTTP_503
                               |NGX_HTTP_UPSTREAM_FT_HTTP_504));

    if (conf->upstream.next_upstream & NGX_HTTP_UPSTREAM_FT_OFF) {
        conf->upstream.next_upstream = NGX_CONF_BITMASK_SET
                                       |NGX_HTTP_UPSTREAM_FT_OFF;

    } else {
        /*
         * A generate request is safe to repeat until the first byte went
         * to the client, and that is the only time a retry happens.
         */
        conf->upstream.next_upstream |= NGX_HTTP_UPSTREAM_FT_NON_IDEMPOTENT;
    }

    ngx_conf_merge_value(conf->api, prev->api, 0);
    ngx_conf_merge_value(conf->health, prev->health, 0);
    ngx_conf_merge_value(conf->fallback_header, prev->fallback_header, 0);
    ngx_conf_merge_msec_value(conf->sse_heartbeat, prev->sse_heartbeat, 0);
    ngx_conf_merge_msec_value(conf->sse_flush_interval,
                              prev->sse_flush_interval, 0);
    ngx_conf_merge_size_value(conf->max_frame, prev->max_frame,
                              (size_t) 4 * 1024 * 1024);

    if (conf->max_frame < 64) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"llm_max_frame\" must be at least 64 bytes");
        return NGX_CONF_ERROR;
    }

    if (conf->upstream.upstream == NULL) {
        conf->upstream.upstream = prev->upstream.upstream;
    }

    mcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_llm_module);

    if ((conf->api == 1 || conf->health == 1)
        && conf->upstream.upstream == NULL && mcf->models.nelts == 0)
    {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"llm_api\" and \"llm_health\" need \"llm_pass\" "
                           "or at least one \"llm_model\"");
        return NGX_CONF_ERROR;
    }

    if (ngx_http_llm_add_backends(cf, mcf, conf->upstream.upstream,
                                  &conf->backend, &conf->nbackends)
        != NGX_OK)
    {
        return NGX_CONF_ERROR;
    }

    if ((conf->api == 1 || conf->health == 1)
        && ngx_http_llm_wrap_peer_init(cf, conf->upstream.upstream)
           != NGX_OK)
    {
        return NGX_CONF_ERROR;
    }

    return NGX_CONF_OK;
}


static char *
ngx_http_llm_pass(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_llm_loc_conf_t *llcf = conf;

    ngx_str_t  *value;
    ngx_url_t   u;

    if (llcf->upstream.upstream) {
        return "is duplicate";
    }

    value = cf->args->elts;

    ngx_memzero(&u, sizeof(ngx_url_t));

    u.url = value[1];
    u.no_resolve = 1;

    llcf->upstream.upstream = ngx_http_upstream_add(cf, &u, 0);
    if (llcf->upstream.upstream == NULL) {
        return NGX_CONF_ERROR;
    }

    return NGX_CONF_OK;
}


static char *
ngx_http_llm_handler_flag(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    char                      *rv;
    ngx_flag_t                *fp;
    ngx_http_core_loc_conf_t  *clcf;

    rv = ngx_conf_set_flag_slot(cf, cmd, conf);
    if (rv != NGX_CONF_OK) {
        return rv;
    }

    fp = (ngx_flag_t *) ((char *) conf + cmd->offset);

    if (*fp == 1) {
        clcf = ngx_http_conf_get_module_loc_conf(cf, ngx_http_core_module);
        clcf->handler = ngx_http_llm_handler;
    }

    return NGX_CONF_OK;
}


/*
 * llm_model NAME upstream=U [alias=A]... [fallback=M[,M2...]]
 */

static char *
ngx_http_llm_model(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_llm_main_conf_t *mcf = conf;

    u_char                *p, *last, *s;
    ngx_str_t             *value, *a;
    ngx_url_t              u;
    ngx_uint_t             i;
    ngx_http_llm_model_t  *m;

    value = cf->args->elts;

    if (ngx_http_llm_find_model(mcf, &value[1])) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "duplicate llm_model name or alias \"%V\"",
                           &value[1]);
        return NGX_CONF_ERROR;
    }

    m = ngx_array_push(&mcf->models);
    if (m == NULL) {
        return NGX_CONF_ERROR;
    }

    ngx_memzero(m, sizeof(ngx_http_llm_model_t));

    m->name = value[1];

    if (ngx_array_init(&m->aliases, cf->pool, 2, sizeof(ngx_str_t)) != NGX_OK
        || ngx_array_init(&m->fallback_names, cf->pool, 2, sizeof(ngx_str_t))
           != NGX_OK
        || ngx_array_init(&m->fallback, cf->pool, 2,
                          sizeof(ngx_http_llm_model_t *))
           != NGX_OK)
    {
        return NGX_CONF_ERROR;
    }

    for (i = 2; i < cf->args->nelts; i++) {

        if (ngx_strncmp(value[i].data, "upstream=", 9) == 0) {
            ngx_memzero(&u, sizeof(ngx_url_t));

            u.url.data = value[i].data + 9;
            u.url.len = value[i].len - 9;
            u.no_resolve = 1;

            if (u.url.len == 0) {
                goto invalid;
            }

            m->upstream_name = u.url;
            m->upstream = ngx_http_upstream_add(cf, &u, 0);
            if (m->upstream == NULL) {
                return NGX_CONF_ERROR;
            }

            continue;
        }

        if (ngx_strncmp(value[i].data, "alias=", 6) == 0) {
            if (value[i].len == 6) {
                goto invalid;
            }

            a = ngx_array_push(&m->aliases);
            if (a == NULL) {
                return NGX_CONF_ERROR;
            }

            a->data = value[i].data + 6;
            a->len = value[i].len - 6;

            m->aliases.nelts--;
            if (ngx_http_llm_find_model(mcf, a)) {
                ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                                   "duplicate llm_model name or alias "
                                   "\"%V\"", a);
                return NGX_CONF_ERROR;
            }
            m->aliases.nelts++;

            continue;
        }

        if (ngx_strncmp(value[i].data, "fallback=", 9) == 0) {
            p = value[i].data + 9;
            last = value[i].data + value[i].len;

            while (p < last) {
                s = p;

                while (p < last && *p != ',') {
                    p++;
                }

                if (p == s) {
                    goto invalid;
                }

                a = ngx_array_push(&m->fallback_names);
                if (a == NULL) {
                    return NGX_CONF_ERROR;
                }

                a->data = s;
                a->len = p - s;

                if (p < last) {
                    p++;
                }
            }

            continue;
        }

        goto invalid;
    }

    if (m->upstream == NULL) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "llm_model \"%V\" needs upstream=NAME", &m->name);
        return NGX_CONF_ERROR;
    }

    (void) cmd;

    return NGX_CONF_OK;

invalid:

    ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                       "invalid parameter \"%V\" of llm_model", &value[i]);
    return NGX_CONF_ERROR;
}
