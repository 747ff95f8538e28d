
/*
 * ngx_http_llm_module: the content handler of llm_api and llm_health
 * locations.  Routes by the path after "/v1/", checks the method and the
 * key, reads the body, has it validated (ngx_http_llm_request.c),
 * resolves the model and its fallback chain, admits the request against
 * the key's limits and starts the engine exchange
 * (ngx_http_llm_upstream.c).  Also the request context's life: created
 * here, settled and recorded (limits, metrics) once at the end.
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "ngx_http_llm_module.h"


static void ngx_http_llm_cleanup(void *data);
static void ngx_http_llm_pool_cleanup(void *data);
static ngx_int_t ngx_http_llm_rest(ngx_http_request_t *r, ngx_str_t *rest);
static ngx_http_llm_dialect_t *ngx_http_llm_path_dialect(ngx_str_t *rest);
static ngx_int_t ngx_http_llm_route(ngx_http_request_t *r,
    ngx_http_llm_ctx_t *ctx, ngx_uint_t *allowed);
static ngx_int_t ngx_http_llm_not_allowed(ngx_http_request_t *r,
    ngx_uint_t allowed);
static void ngx_http_llm_body_handler(ngx_http_request_t *r);
static ngx_int_t ngx_http_llm_admit(ngx_http_request_t *r,
    ngx_http_llm_ctx_t *ctx, ngx_int_t *sent);
static uint64_t ngx_http_llm_cost(ngx_http_llm_ctx_t *ctx);
static ngx_uint_t ngx_http_llm_window(ngx_http_request_t *r,
    ngx_http_llm_ctx_t *ctx);
static ngx_int_t ngx_http_llm_read_body(ngx_http_request_t *r,
    ngx_str_t *body);
static ngx_int_t ngx_http_llm_resolve(ngx_http_request_t *r,
    ngx_http_llm_ctx_t *ctx, ngx_int_t *sent);
static ngx_int_t ngx_http_llm_chain_header(ngx_http_request_t *r,
    ngx_http_llm_ctx_t *ctx, ngx_str_t *value, ngx_int_t *sent);
static void ngx_http_llm_chain_filter(ngx_http_llm_ctx_t *ctx);
static ngx_int_t ngx_http_llm_not_found(ngx_http_request_t *r,
    ngx_str_t *name);


/*
 * Returns the request's context, creating it (with the cleanup that
 * settles limits and records metrics) on first use; NULL on no memory.
 */

ngx_http_llm_ctx_t *
ngx_http_llm_get_ctx(ngx_http_request_t *r)
{
    ngx_str_t            rest;
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

    /* an error before the handler ran (nginx's 413) has the route's shape */

    if (ngx_http_llm_rest(r, &rest) == NGX_OK) {
        ctx->dialect = ngx_http_llm_path_dialect(&rest);
    }

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
 * The request's id, made once: the answer's id for chat ("chatcmpl-") and
 * completions ("cmpl-"), "req_" for any other request; 24 random letters
 * and digits follow.  It goes out as x-request-id on every response and
 * is $llm_request_id.
 */

u_char *
ngx_http_llm_request_id(ngx_http_llm_ctx_t *ctx)
{
    u_char      *p;
    ngx_uint_t   i;

    static const char  alnum[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";

    if (ctx->id_len) {
        return ctx->id;
    }

    if (ctx->dialect) {
        p = ngx_cpymem(ctx->id, ctx->dialect->id_prefix,
                       ngx_strlen(ctx->dialect->id_prefix));

    } else switch (ctx->route) {
    case NGX_HTTP_LLM_ROUTE_CHAT:
        p = ngx_cpymem(ctx->id, "chatcmpl-", ngx_http_llm_len("chatcmpl-"));
        break;
    case NGX_HTTP_LLM_ROUTE_COMPLETION:
        p = ngx_cpymem(ctx->id, "cmpl-", ngx_http_llm_len("cmpl-"));
        break;
    default:
        p = ngx_cpymem(ctx->id, "req_", ngx_http_llm_len("req_"));
    }

    for (i = 0; i < 24; i++) {
        *p++ = alnum[ngx_random() % 62];
    }

    *p = '\0';
    ctx->id_len = p - ctx->id;

    return ctx->id;
}


/*
 * What the request cost at its model's price= (input tokens not from the
 * cache, cached input tokens, output tokens), in picodollars: the price
 * per million tokens in microdollars is the price per token in
 * picodollars.  0 for a model without a price.
 */

static uint64_t
ngx_http_llm_cost(ngx_http_llm_ctx_t *ctx)
{
    uint64_t               cached, fresh;
    ngx_http_llm_model_t  *m;

    m = ctx->model;

    if (m == NULL || !m->priced) {
        return 0;
    }

    cached = ngx_min(ctx->cached_tokens, ctx->prompt_tokens);
    fresh = ctx->prompt_tokens - cached;

    return fresh * m->price_input + cached * m->price_cached
           + (uint64_t) ctx->completion_tokens * m->price_output;
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

    ctx->cost = ngx_http_llm_cost(ctx);

    /* the model's health (error_rate=): the client's own errors and
     * leaving count neither way */

    if (ctx->model && ctx->route
        && (status < 400 || status >= 500) && status != 499)
    {
        ngx_http_llm_model_outcome(ctx->model,
                                   status < 500 && !ctx->upstream_error);
    }

    if (ctx->ticket_set) {
        ngx_http_llm_limit_settle(r, &ctx->ticket,
                                  ctx->prompt_tokens
                                  + ctx->completion_tokens, ctx->cost);
    }

    if (ctx->route == 0) {
        return;
    }

    ngx_memzero(&s, sizeof(ngx_http_llm_sample_t));

    s.model = ctx->model_name.len ? ctx->model_name : ctx->requested;

    if (ctx->fallbacks && ctx->chain.nelts) {
        s.asked = (*(ngx_http_llm_model_t **) ctx->chain.elts)->name;
    }
    s.status = status;
    s.prompt_tokens = ctx->prompt_tokens;
    s.completion_tokens = ctx->completion_tokens;
    s.cached_tokens = ctx->cached_tokens;
    s.ttft = ctx->ttft;
    s.cost = ctx->cost;
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

ngx_int_t
ngx_http_llm_handler(ngx_http_request_t *r)
{
    ngx_int_t                  rc;
    ngx_uint_t                 allowed;
    ngx_http_llm_ctx_t        *ctx;
    ngx_http_llm_decision_t    d;
    ngx_http_core_loc_conf_t  *clcf;

    ctx = ngx_http_llm_get_ctx(r);
    if (ctx == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    if (r != r->main) {
        return NGX_HTTP_NOT_FOUND;
    }

    if (ngx_http_llm_route(r, ctx, &allowed) != NGX_OK) {
        return ngx_http_llm_send_errorf(r, NGX_HTTP_NOT_FOUND,
                                        "invalid_request_error", NULL, NULL,
                                        "Invalid URL (%V %V)",
                                        &r->method_name, &r->uri);
    }

    if (r->method == NGX_HTTP_OPTIONS) {
        rc = ngx_http_llm_cors_preflight(r);
        if (rc != NGX_DECLINED) {
            return rc;
        }
    }

    if (!(r->method & allowed)) {
        return ngx_http_llm_not_allowed(r, allowed);
    }

    if (ctx->info == NGX_HTTP_LLM_INFO_HEALTH) {
        /* no key: a load balancer's health check */
        return ngx_http_llm_info_route(r, ctx);
    }

    rc = ngx_http_llm_auth(r, &ctx->key, &d);

    if (rc == NGX_DECLINED) {
        ctx->key = NULL;

    } else if (rc != NGX_OK) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;

    } else if (d.verdict != NGX_HTTP_LLM_ALLOW) {
        return ngx_http_llm_send_denial(r, &d, NULL);
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
}


/* What follows "/v1/" in r's path: NGX_OK with rest set, else NGX_DECLINED. */

static ngx_int_t
ngx_http_llm_rest(ngx_http_request_t *r, ngx_str_t *rest)
{
    u_char  *p, *last;

    if (r->uri.len < 4) {
        /* no URI yet (nginx's own error for a bad request line) */
        return NGX_DECLINED;
    }

    p = r->uri.data;
    last = r->uri.data + r->uri.len;

    while (p + 4 <= last) {
        if (ngx_strncmp(p, "/v1/", 4) == 0) {
            rest->data = p + 4;
            rest->len = last - rest->data;
            return NGX_OK;
        }

        p++;
    }

    return NGX_DECLINED;
}


/*
 * The dialect of a path after "/v1/": responses, messages,
 * messages/count_tokens.
 */

static ngx_http_llm_dialect_t *
ngx_http_llm_path_dialect(ngx_str_t *rest)
{
    if (rest->len == sizeof("responses") - 1
        && ngx_strncmp(rest->data, "responses", rest->len) == 0)
    {
        return &ngx_http_llm_responses_dialect;
    }

    if (rest->len == sizeof("messages") - 1
        && ngx_strncmp(rest->data, "messages", rest->len) == 0)
    {
        return &ngx_http_llm_anthropic_dialect;
    }

    if (rest->len == sizeof("messages/count_tokens") - 1
        && ngx_strncmp(rest->data, "messages/count_tokens", rest->len) == 0)
    {
        return &ngx_http_llm_anthropic_count_dialect;
    }

    return NULL;
}


/*
 * The route of r: chat/completions and completions (POST), responses
 * (POST, the chat route in the Responses dialect), messages and
 * messages/count_tokens (POST, the chat route in Anthropic's dialect),
 * models and
 * models/{id} (GET, HEAD), healthz where llm_health is on (GET, HEAD);
 * an llm_health location without llm_api is /healthz whatever its path.
 * NGX_OK with ctx->route or ctx->info set and *allowed the methods;
 * NGX_DECLINED for an unknown path.
 */

static ngx_int_t
ngx_http_llm_route(ngx_http_request_t *r, ngx_http_llm_ctx_t *ctx,
    ngx_uint_t *allowed)
{
    ngx_str_t                 rest;
    ngx_http_llm_loc_conf_t  *llcf;

    llcf = ngx_http_get_module_loc_conf(r, ngx_http_llm_module);

    *allowed = NGX_HTTP_GET|NGX_HTTP_HEAD;

    if (llcf->health == 1 && llcf->api != 1) {
        ctx->info = NGX_HTTP_LLM_INFO_HEALTH;
        return NGX_OK;
    }

    if (ngx_http_llm_rest(r, &rest) != NGX_OK) {
        return NGX_DECLINED;
    }

    if (rest.len == sizeof("chat/completions") - 1
        && ngx_strncmp(rest.data, "chat/completions", rest.len) == 0)
    {
        ctx->route = NGX_HTTP_LLM_ROUTE_CHAT;
        *allowed = NGX_HTTP_POST;
        return NGX_OK;
    }

    ctx->dialect = ngx_http_llm_path_dialect(&rest);

    if (ctx->dialect) {
        ctx->route = NGX_HTTP_LLM_ROUTE_CHAT;
        *allowed = NGX_HTTP_POST;
        return NGX_OK;
    }

    if (rest.len == sizeof("completions") - 1
        && ngx_strncmp(rest.data, "completions", rest.len) == 0)
    {
        ctx->route = NGX_HTTP_LLM_ROUTE_COMPLETION;
        *allowed = NGX_HTTP_POST;
        return NGX_OK;
    }

    if (rest.len == sizeof("embeddings") - 1
        && ngx_strncmp(rest.data, "embeddings", rest.len) == 0)
    {
        ctx->route = NGX_HTTP_LLM_ROUTE_EMBEDDINGS;
        *allowed = NGX_HTTP_POST;
        return NGX_OK;
    }

    if (rest.len >= sizeof("models") - 1
        && ngx_strncmp(rest.data, "models", 6) == 0
        && (rest.len == 6 || (rest.data[6] == '/' && rest.len > 7)))
    {
        if (rest.len == 6) {
            ctx->info = NGX_HTTP_LLM_INFO_MODELS;

        } else {
            ctx->info = NGX_HTTP_LLM_INFO_MODEL;
            ctx->info_id.data = rest.data + 7;
            ctx->info_id.len = rest.len - 7;
        }

        return NGX_OK;
    }

    if (rest.len == sizeof("healthz") - 1
        && ngx_strncmp(rest.data, "healthz", rest.len) == 0
        && llcf->health == 1)
    {
        ctx->info = NGX_HTTP_LLM_INFO_HEALTH;
        return NGX_OK;
    }

    return NGX_DECLINED;
}


/* 405 with the Allow header of the route. */

static ngx_int_t
ngx_http_llm_not_allowed(ngx_http_request_t *r, ngx_uint_t allowed)
{
    ngx_str_t  allow;

    if (allowed == NGX_HTTP_POST) {
        ngx_str_set(&allow, "POST");

    } else {
        ngx_str_set(&allow, "GET, HEAD");
    }

    if (ngx_http_llm_header_out(r, "Allow", allow.data, allow.len)
        != NGX_OK)
    {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    return ngx_http_llm_send_errorf(r, NGX_HTTP_NOT_ALLOWED,
                                    "invalid_request_error",
                                    "method_not_allowed", NULL,
                                    "Method %V is not allowed for %V "
                                    "(allowed: %V)", &r->method_name,
                                    &r->uri, &allow);
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

    if (ctx->route == NGX_HTTP_LLM_ROUTE_EMBEDDINGS) {
        rc = ngx_http_llm_embed_parse(r, ctx, body.data, body.len, &err);

    } else if (ctx->dialect) {
        rc = ctx->dialect->parse(r, ctx, body.data, body.len, &err);

    } else {
        rc = ngx_http_llm_parse_request(r, ctx, body.data, body.len, &err);
    }

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

    /* what the model's engines accept, as they told in Info */

    rc = ctx->emb ? NGX_OK : ngx_http_llm_check_limits(r, ctx, &err);

    if (rc == NGX_ERROR) {
        ngx_http_finalize_request(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    if (rc != NGX_OK) {
        ngx_http_finalize_request(r, ngx_http_llm_send_error(r, &err));
        return;
    }

    if (ctx->key && ngx_http_llm_admit(r, ctx, &rc) != NGX_OK) {
        ngx_http_finalize_request(r, rc);
        return;
    }

    /* the fleet's limits (llm_limit_store): resumes when Redis answers */

    if (ngx_http_llm_store_admit(r, ctx) == NGX_AGAIN) {
        return;
    }

    rc = ngx_http_llm_upstream_start(r, ctx);
    if (rc != NGX_OK) {
        ngx_http_finalize_request(r, rc);
        return;
    }
}


/*
 * The fleet's decision on a request the gateway admitted: the engine
 * exchange starts, or the refusal is sent and the gateway's own
 * reservation given back.  Finalizes the request itself.
 */

void
ngx_http_llm_resume(ngx_http_request_t *r, ngx_http_llm_ctx_t *ctx,
    ngx_http_llm_decision_t *d)
{
    ngx_int_t  rc;

    if (d->verdict == NGX_HTTP_LLM_ALLOW) {
        rc = ngx_http_llm_upstream_start(r, ctx);

        if (rc != NGX_OK) {
            ngx_http_finalize_request(r, rc);
        }

        return;
    }

    ngx_log_error(NGX_LOG_INFO, r->connection->log, 0,
                  "llm: key \"%V\" refused by the fleet's limits",
                  &ctx->key->name);

    ngx_http_llm_limit_settle(r, &ctx->ticket, 0, 0);
    ctx->ticket_set = 0;

    ngx_http_finalize_request(r, ngx_http_llm_send_denial(r, d,
                                                          &ctx->ticket));
}


/*
 * Admission against the key's limits.  The output a request may generate
 * is max_tokens per choice, or without it the model's context window
 * (from the engines' Info) minus the prompt; when the key has less left,
 * the request's max_tokens becomes what it has left, so a key overruns
 * its quota by no more than one prompt estimate (docs/KEYS.md).
 * NGX_OK: admitted; otherwise the refusal was sent (NGX_DONE) or could
 * not be decided (NGX_ERROR), and *sent is what to finalize with.
 */

static ngx_int_t
ngx_http_llm_admit(ngx_http_request_t *r, ngx_http_llm_ctx_t *ctx,
    ngx_int_t *sent)
{
    ngx_uint_t                window, output, per;
    Llm__Sampling            *s;
    ngx_http_llm_decision_t   d;

    if (ctx->emb || (ctx->gen && ctx->gen->count_only)) {
        output = 0;             /* embeddings, counts generate nothing */

    } else if (ctx->max_tokens) {
        output = ctx->n * ctx->max_tokens;

    } else {
        window = ngx_http_llm_window(r, ctx);
        output = ctx->n * (window > ctx->prompt_est
                           ? window - ctx->prompt_est : 1);
    }

    if (ngx_http_llm_limit_admit(r, ctx->key, ctx->prompt_est, output,
                                 ctx->max_tokens != 0 || output == 0,
                                 &ctx->ticket, &d)
        != NGX_OK)
    {
        *sent = NGX_HTTP_INTERNAL_SERVER_ERROR;
        return NGX_ERROR;
    }

    if (d.verdict != NGX_HTTP_LLM_ALLOW) {
        *sent = ngx_http_llm_send_denial(r, &d, &ctx->ticket);
        return NGX_DONE;
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

    mcf = ngx_http_get_module_main_conf(r, ngx_http_llm_module);

    ngx_http_llm_request_backends(r, ctx, &first, &n);

    be = mcf->backends.elts;
    window = 0;

    for (i = first; i < first + n && i < mcf->backends.nelts; i++) {

        ngx_http_llm_backend_refresh(r, &be[i]);

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
    ngx_int_t                   rc;
    ngx_uint_t                  i;
    ngx_table_elt_t            *header;
    ngx_http_llm_model_t       *m, **pm, **chain;
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

        /* the client's text: the validating escaper */

        if (ngx_http_llm_json_str(r->pool, &ctx->model_json,
                                  ctx->requested.data, ctx->requested.len)
            != NGX_OK)
        {
            goto failed;
        }

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
    ctx->model_json = m->json_name;

    pm = ngx_array_push(&ctx->chain);
    if (pm == NULL) {
        goto failed;
    }

    *pm = m;

    header = (llcf->fallback_header == 1)
             ? ngx_http_llm_find_header(r, "x-llm-fallback") : NULL;

    if (header) {
        rc = ngx_http_llm_chain_header(r, ctx, &header->value, sent);
        if (rc != NGX_OK) {
            return rc;
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

    ngx_http_llm_chain_filter(ctx);

    /* a model failing too often (error_rate=) starts at its fallback */

    chain = ctx->chain.elts;

    while (ctx->chain_pos + 1 < ctx->chain.nelts
           && ngx_http_llm_model_failing(chain[ctx->chain_pos]))
    {
        ngx_log_error(NGX_LOG_INFO, r->connection->log, 0,
                      "llm: model \"%V\" fails too often, skipped for "
                      "\"%V\"", &chain[ctx->chain_pos]->name,
                      &chain[ctx->chain_pos + 1]->name);

        m = chain[++ctx->chain_pos];
        ctx->model = m;
        ctx->model_name = m->name;
        ctx->model_json = m->json_name;
        ctx->fallbacks++;
    }

    return NGX_OK;

failed:

    *sent = NGX_HTTP_INTERNAL_SERVER_ERROR;
    return NGX_ERROR;
}


/* The first request header called name (case-insensitive), or NULL. */

ngx_table_elt_t *
ngx_http_llm_find_header(ngx_http_request_t *r, const char *name)
{
    size_t            len;
    ngx_uint_t        i;
    ngx_list_part_t  *part;
    ngx_table_elt_t  *h;

    len = ngx_strlen(name);
    part = &r->headers_in.headers.part;
    h = part->elts;

    for (i = 0; /* void */; i++) {

        if (i >= part->nelts) {
            if (part->next == NULL) {
                return NULL;
            }

            part = part->next;
            h = part->elts;
            i = 0;
        }

        if (h[i].key.len == len
            && ngx_strncasecmp(h[i].key.data, (u_char *) name, len) == 0)
        {
            return &h[i];
        }
    }
}


/*
 * Appends the models named in an x-llm-fallback value (separated by
 * commas or blanks) to the chain.  NGX_OK; NGX_DONE with a 400 sent for
 * a name that is no model; NGX_ERROR.
 */

static ngx_int_t
ngx_http_llm_chain_header(ngx_http_request_t *r, ngx_http_llm_ctx_t *ctx,
    ngx_str_t *value, ngx_int_t *sent)
{
    u_char                     *p, *last, *s;
    ngx_str_t                   name;
    ngx_http_llm_model_t       *fb, **pm;
    ngx_http_llm_main_conf_t   *mcf;

    mcf = ngx_http_get_module_main_conf(r, ngx_http_llm_module);

    p = value->data;
    last = p + value->len;

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
            *sent = NGX_HTTP_INTERNAL_SERVER_ERROR;
            return NGX_ERROR;
        }

        *pm = fb;
    }

    return NGX_OK;
}


/* Drops duplicates and models the key may not use from the chain. */

static void
ngx_http_llm_chain_filter(ngx_http_llm_ctx_t *ctx)
{
    ngx_uint_t              i, j, n;
    ngx_http_llm_model_t  **chain;

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
