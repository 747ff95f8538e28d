
/*
 * ngx_http_llm_module: /v1/models, /v1/models/{id} and /healthz, answered
 * from what the engines said to the Info probe (ngx_http_llm_backend.c);
 * stale answers are refreshed first.
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "ngx_http_llm_module.h"


#define NGX_HTTP_LLM_PROBE_POLL  5


static void ngx_http_llm_info_wait(ngx_event_t *ev);
static ngx_int_t ngx_http_llm_info_send(ngx_http_request_t *r,
    ngx_http_llm_ctx_t *ctx);
static ngx_int_t ngx_http_llm_info_model(ngx_http_request_t *r,
    ngx_str_t *id);
static ngx_int_t ngx_http_llm_info_models(ngx_http_request_t *r);
static ngx_int_t ngx_http_llm_info_health(ngx_http_request_t *r);
static json_t *ngx_http_llm_backends_json(ngx_http_llm_backend_t *be,
    ngx_uint_t first, ngx_uint_t n, ngx_uint_t *up);
static ngx_int_t ngx_http_llm_send_json(ngx_http_request_t *r,
    ngx_uint_t status, json_t *j);


/* /v1/models, /v1/models/{id} and /healthz: probe stale engines first. */

ngx_int_t
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
        ngx_http_llm_backend_refresh(r, &be[i]);
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


/*
 * A model object: OpenAI's four fields, then what the engines that serve
 * it (be[first..first+n), those up and, with only, serving that model)
 * said in Info: the context window (the smallest, which every request
 * must fit) as context_length, OpenRouter's name for it, and as
 * max_model_len, vLLM's, the two that OpenAI-compatible clients read;
 * and the engine's limits (the strictest) under "limits".  Without an
 * engine up, only the four fields.
 */

static json_t *
ngx_http_llm_model_json(ngx_str_t *id, ngx_http_llm_backend_t *be,
    ngx_uint_t first, ngx_uint_t n, u_char *only)
{
    json_t                        *j;
    int64_t                        created;
    uint32_t                       ctxlen;
    ngx_uint_t                     i, lims;
    ngx_http_llm_engine_limits_t   lim, *l;

    created = 0;
    ctxlen = 0;
    lims = 0;
    ngx_memzero(&lim, sizeof(ngx_http_llm_engine_limits_t));

    for (i = first; i < first + n; i++) {
        if (!be[i].up
            || (only && ngx_strcmp(be[i].model, only) != 0))
        {
            continue;
        }

        if (created == 0) {
            created = be[i].created;
        }

        if (be[i].context_length
            && (ctxlen == 0 || be[i].context_length < ctxlen))
        {
            ctxlen = be[i].context_length;
        }

        if (!be[i].has_limits) {
            continue;
        }

        l = &be[i].limits;

        if (lims++ == 0) {
            lim = *l;
            continue;
        }

        ngx_http_llm_limits_merge(&lim, l);
    }

    j = json_pack("{s:s%,s:s,s:I,s:s}",
                  "id", (char *) id->data, id->len,
                  "object", "model",
                  "created", (json_int_t) created,
                  "owned_by", "llm-engine");
    if (j == NULL) {
        return NULL;
    }

    if (ctxlen) {
        json_object_set_new(j, "context_length", json_integer(ctxlen));
        json_object_set_new(j, "max_model_len", json_integer(ctxlen));
    }

    if (lims) {
        json_object_set_new(j, "limits",
                            json_pack("{s:I,s:I,s:I,s:I}",
                                      "max_choices",
                                      (json_int_t) lim.max_choices,
                                      "max_stop", (json_int_t) lim.max_stop,
                                      "max_stop_bytes",
                                      (json_int_t) lim.max_stop_bytes,
                                      "max_top_logprobs",
                                      (json_int_t) lim.max_top_logprobs));
    }

    return j;
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

    /*
     * the KV cache in tokens: its capacity, what running requests hold,
     * and of the rest the cached prefixes (reused by a request that
     * starts the same way, evicted oldest first when blocks run out)
     */

    json_object_set_new(j, "kv",
                        json_pack("{s:I,s:I,s:I,s:I}",
                                  "capacity_tokens",
                                  (json_int_t) be->kv_total
                                  * be->kv_block_tokens,
                                  "used_tokens",
                                  (json_int_t) ngx_http_llm_kv_used(be),
                                  "cached_tokens",
                                  (json_int_t) be->kv_cached
                                  * be->kv_block_tokens,
                                  "block_tokens",
                                  (json_int_t) be->kv_block_tokens));
    return j;
}


/* The backends first..first+n as a JSON array; *up: any of them is up. */

static json_t *
ngx_http_llm_backends_json(ngx_http_llm_backend_t *be, ngx_uint_t first,
    ngx_uint_t n, ngx_uint_t *up)
{
    json_t      *bes;
    ngx_uint_t   j;

    bes = json_array();
    *up = 0;

    for (j = first; j < first + n; j++) {
        json_array_append_new(bes, ngx_http_llm_backend_json(&be[j]));
        *up |= be[j].up;
    }

    return bes;
}


/* Renders /v1/models, /v1/models/{id} or /healthz from the probe cache. */

static ngx_int_t
ngx_http_llm_info_send(ngx_http_request_t *r, ngx_http_llm_ctx_t *ctx)
{
    switch (ctx->info) {

    case NGX_HTTP_LLM_INFO_MODEL:
        return ngx_http_llm_info_model(r, &ctx->info_id);

    case NGX_HTTP_LLM_INFO_MODELS:
        return ngx_http_llm_info_models(r);

    default: /* NGX_HTTP_LLM_INFO_HEALTH */
        return ngx_http_llm_info_health(r);
    }
}


/* /v1/models/{id}: a model of the table, else one an engine serves. */

static ngx_int_t
ngx_http_llm_info_model(ngx_http_request_t *r, ngx_str_t *id)
{
    ngx_uint_t                 i;
    ngx_http_llm_model_t      *found;
    ngx_http_llm_backend_t    *be;
    ngx_http_llm_loc_conf_t   *llcf;
    ngx_http_llm_main_conf_t  *mcf;

    mcf = ngx_http_get_module_main_conf(r, ngx_http_llm_module);
    llcf = ngx_http_get_module_loc_conf(r, ngx_http_llm_module);

    be = mcf->backends.elts;

    if (mcf->models.nelts) {
        found = ngx_http_llm_find_model(mcf, id);
        if (found == NULL) {
            return ngx_http_llm_send_errorf(r, NGX_HTTP_NOT_FOUND,
                                            "invalid_request_error",
                                            "model_not_found", "model",
                                            "The model '%V' does not "
                                            "exist", id);
        }

        return ngx_http_llm_send_json(r, NGX_HTTP_OK,
                   ngx_http_llm_model_json(id, be, found->first_backend,
                                           found->nbackends, NULL));
    }

    for (i = llcf->backend; i < llcf->backend + llcf->nbackends; i++) {
        if (be[i].up
            && ngx_strlen(be[i].model) == id->len
            && ngx_strncmp(be[i].model, id->data, id->len) == 0)
        {
            return ngx_http_llm_send_json(r, NGX_HTTP_OK,
                       ngx_http_llm_model_json(id, be, llcf->backend,
                                               llcf->nbackends,
                                               be[i].model));
        }
    }

    return ngx_http_llm_send_errorf(r, NGX_HTTP_NOT_FOUND,
                                    "invalid_request_error",
                                    "model_not_found", "model",
                                    "The model '%V' does not exist", id);
}


/*
 * /v1/models: the models of the table with their aliases, else the
 * distinct models the llm_pass engines serve.
 */

static ngx_int_t
ngx_http_llm_info_models(ngx_http_request_t *r)
{
    json_t                    *root, *data;
    ngx_str_t                 *a, name;
    ngx_uint_t                 i, j;
    ngx_http_llm_model_t      *m;
    ngx_http_llm_backend_t    *be;
    ngx_http_llm_loc_conf_t   *llcf;
    ngx_http_llm_main_conf_t  *mcf;

    mcf = ngx_http_get_module_main_conf(r, ngx_http_llm_module);
    llcf = ngx_http_get_module_loc_conf(r, ngx_http_llm_module);

    be = mcf->backends.elts;
    m = mcf->models.elts;

    root = json_pack("{s:s,s:[]}", "object", "list", "data");
    if (root == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    data = json_object_get(root, "data");

    for (i = 0; i < mcf->models.nelts; i++) {
        json_array_append_new(data,
            ngx_http_llm_model_json(&m[i].name, be, m[i].first_backend,
                                    m[i].nbackends, NULL));

        a = m[i].aliases.elts;
        for (j = 0; j < m[i].aliases.nelts; j++) {
            json_array_append_new(data,
                ngx_http_llm_model_json(&a[j], be, m[i].first_backend,
                                        m[i].nbackends, NULL));
        }
    }

    if (mcf->models.nelts == 0) {
        for (i = llcf->backend; i < llcf->backend + llcf->nbackends; i++) {
            if (!be[i].up || be[i].model[0] == '\0') {
                continue;
            }

            for (j = llcf->backend; j < i; j++) {
                if (be[j].up && ngx_strcmp(be[j].model, be[i].model) == 0) {
                    break;
                }
            }

            if (j < i) {
                continue;
            }

            name.data = be[i].model;
            name.len = ngx_strlen(be[i].model);

            json_array_append_new(data,
                ngx_http_llm_model_json(&name, be, llcf->backend,
                                        llcf->nbackends, be[i].model));
        }
    }

    return ngx_http_llm_send_json(r, NGX_HTTP_OK, root);
}


/*
 * /healthz: each model with its engines; "ok" (200) when every model has
 * an engine up, "degraded" when some has, "down" (503 both) when none.
 */

static ngx_int_t
ngx_http_llm_info_health(ngx_http_request_t *r)
{
    json_t                    *root, *models, *bes, *jm;
    ngx_uint_t                 i, up, any, all, status;
    ngx_http_llm_model_t      *m;
    ngx_http_llm_backend_t    *be;
    ngx_http_llm_loc_conf_t   *llcf;
    ngx_http_llm_main_conf_t  *mcf;

    mcf = ngx_http_get_module_main_conf(r, ngx_http_llm_module);
    llcf = ngx_http_get_module_loc_conf(r, ngx_http_llm_module);

    be = mcf->backends.elts;
    m = mcf->models.elts;

    root = json_object();
    models = json_array();
    if (root == NULL || models == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    all = 1;
    any = 0;

    for (i = 0; i < mcf->models.nelts; i++) {

        if (m[i].provider) {

            /* a remote API: not probed, its answers say how it is */

            jm = json_pack("{s:s%,s:s%,s:b,s:[]}",
                           "id", (char *) m[i].name.data, m[i].name.len,
                           "provider", (char *) m[i].provider->name.data,
                           m[i].provider->name.len, "up", 1, "backends");
            json_array_append_new(models, jm);
            any = 1;
            continue;
        }

        bes = ngx_http_llm_backends_json(be, m[i].first_backend,
                                         m[i].nbackends, &up);

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
        bes = ngx_http_llm_backends_json(be, llcf->backend, llcf->nbackends,
                                         &up);

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

    return ngx_http_llm_send_json(r, status, root);
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
