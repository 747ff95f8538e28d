
/*
 * Usage counters in the llm_zone and the Prometheus text exposition
 * (version 0.0.4) served by "llm_metrics" (docs/METRICS.md).
 *
 * Per model label sets are bounded: the zone has a fixed table of
 * NGX_HTTP_LLM_METRICS_MODELS models filled in order of first use; later
 * models, and names longer than NGX_HTTP_LLM_METRICS_MODEL_LEN, count as
 * model="other".  Each model has NGX_HTTP_LLM_METRICS_STATUSES status
 * slots, then status="other".
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "ngx_http_llm_module.h"
#include "ngx_http_llm_keys.h"


/* bucket upper bounds in milliseconds */

static ngx_msec_t  ngx_http_llm_ttft_bounds[NGX_HTTP_LLM_TTFT_BUCKETS] = {
    10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000
};

static ngx_msec_t
    ngx_http_llm_duration_bounds[NGX_HTTP_LLM_DURATION_BUCKETS] = {
    50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000, 120000,
    300000, 600000, 1800000
};

/* the engines' KV gauges, by engine address */

static const char  *ngx_http_llm_kv_families[] = {
    "# HELP llm_kv_capacity_tokens Tokens the engine's KV cache holds.\n"
    "# TYPE llm_kv_capacity_tokens gauge\n",
    "# HELP llm_kv_used_tokens KV tokens held by the engine's running "
    "requests.\n"
    "# TYPE llm_kv_used_tokens gauge\n",
    "# HELP llm_kv_cached_tokens KV tokens of cached prompt prefixes, free "
    "for reuse or eviction.\n"
    "# TYPE llm_kv_cached_tokens gauge\n"
};

static const char  *ngx_http_llm_kv_names[] = {
    "llm_kv_capacity_tokens", "llm_kv_used_tokens", "llm_kv_cached_tokens"
};

#define NGX_HTTP_LLM_KV_LINE  (sizeof("llm_kv_capacity_tokens{engine=\"\"} ") \
                               + NGX_INT64_LEN + 1)


static void ngx_http_llm_metrics_cleanup(void *data);
static u_char *ngx_http_llm_metrics_key_costs(ngx_http_request_t *r,
    u_char *p, u_char *last, ngx_http_llm_zone_t *zone);
static ngx_http_llm_model_stats_t *ngx_http_llm_metrics_model(
    ngx_http_llm_shctx_t *sh, ngx_str_t *model, ngx_uint_t claim);
static u_char *ngx_http_llm_metrics_counts(u_char *p,
    ngx_http_llm_shctx_t *sh);
static u_char *ngx_http_llm_metrics_times(u_char *p,
    ngx_http_llm_shctx_t *sh);
static u_char *ngx_http_llm_metrics_label(u_char *p,
    ngx_http_llm_model_stats_t *m);
static u_char *ngx_http_llm_metrics_seconds(u_char *p, uint64_t ms);
static size_t ngx_http_llm_metrics_engines_size(ngx_http_request_t *r);
static u_char *ngx_http_llm_metrics_engines(ngx_http_request_t *r,
    u_char *p);
static u_char *ngx_http_llm_metrics_histogram(u_char *p, const char *name,
    ngx_http_llm_model_stats_t *m, uint64_t *buckets, ngx_msec_t *bounds,
    ngx_uint_t n, uint64_t inf, uint64_t sum);


/* The zone of r's location, NULL when it has none. */

static ngx_http_llm_zone_t *
ngx_http_llm_metrics_zone(ngx_http_request_t *r)
{
    ngx_http_llm_keys_ctx_t       *ctx;
    ngx_http_llm_keys_loc_conf_t  *klcf;

    ctx = ngx_http_get_module_ctx(r, ngx_http_llm_keys_module);

    if (ctx && ctx->shm_zone) {
        return ctx->shm_zone->data;
    }

    klcf = ngx_http_get_module_loc_conf(r, ngx_http_llm_keys_module);

    return klcf->shm_zone ? klcf->shm_zone->data : NULL;
}


/*
 * Adds delta to llm_requests_in_flight.  What a request added and did not
 * take back is taken back when the request's pool goes, so a request that
 * ends on an unexpected path does not leave the gauge high forever.
 */

void
ngx_http_llm_metrics_inflight(ngx_http_request_t *r, ngx_int_t delta)
{
    ngx_pool_cleanup_t             *cln;
    ngx_http_llm_zone_t            *zone;
    ngx_http_llm_keys_ctx_t        *ctx;
    ngx_http_llm_keys_loc_conf_t   *klcf;

    ctx = ngx_http_llm_keys_get_ctx(r);
    if (ctx == NULL) {
        return;
    }

    if (ctx->shm_zone == NULL) {
        klcf = ngx_http_get_module_loc_conf(r, ngx_http_llm_keys_module);
        ctx->shm_zone = klcf->shm_zone;
    }

    if (ctx->shm_zone == NULL) {
        return;
    }

    if (delta < 0 && ctx->in_flight + delta < 0) {
        delta = -ctx->in_flight;
    }

    if (delta == 0) {
        return;
    }

    if (!ctx->cleanup) {
        cln = ngx_pool_cleanup_add(r->pool, 0);
        if (cln == NULL) {
            return;
        }

        cln->handler = ngx_http_llm_metrics_cleanup;
        cln->data = ctx;
        ctx->cleanup = 1;
    }

    zone = ctx->shm_zone->data;

    ngx_shmtx_lock(&zone->shpool->mutex);
    zone->sh->in_flight += delta;
    ngx_shmtx_unlock(&zone->shpool->mutex);

    ctx->in_flight += delta;
}


static void
ngx_http_llm_metrics_cleanup(void *data)
{
    ngx_http_llm_keys_ctx_t  *ctx = data;

    ngx_http_llm_zone_t  *zone;

    if (ctx->in_flight == 0 || ctx->shm_zone == NULL) {
        return;
    }

    zone = ctx->shm_zone->data;

    ngx_shmtx_lock(&zone->shpool->mutex);
    zone->sh->in_flight -= ctx->in_flight;
    ngx_shmtx_unlock(&zone->shpool->mutex);

    ctx->in_flight = 0;
}


/*
 * Records one finished request; only the first call per request counts.
 * A request refused by ngx_http_llm_limit_admit() was already counted in
 * llm_rate_limited_total there, so s->rate_limited does not count it
 * twice.
 */

void
ngx_http_llm_metrics_record(ngx_http_request_t *r, ngx_http_llm_sample_t *s)
{
    ngx_uint_t                   i, limited;
    ngx_http_llm_zone_t         *zone;
    ngx_http_llm_keys_ctx_t     *ctx;
    ngx_http_llm_model_stats_t  *m;

    ctx = ngx_http_llm_keys_get_ctx(r);
    if (ctx == NULL || ctx->recorded) {
        return;
    }

    ctx->recorded = 1;

    zone = ngx_http_llm_metrics_zone(r);
    if (zone == NULL) {
        return;
    }

    limited = s->rate_limited && !ctx->rate_limited;

    ngx_shmtx_lock(&zone->shpool->mutex);

    /*
     * only a request that reached a model may take a slot: a 400 or 404
     * names whatever the client sent
     */

    m = ngx_http_llm_metrics_model(zone->sh, &s->model,
                                   s->known || s->status < 400
                                   || s->status == 429 || s->status >= 500);

    for (i = 0; i < NGX_HTTP_LLM_METRICS_STATUSES; i++) {
        if (m->status[i].status == s->status) {
            break;
        }

        if (m->status[i].status == 0) {
            m->status[i].status = s->status;
            break;
        }
    }

    if (i < NGX_HTTP_LLM_METRICS_STATUSES) {
        m->status[i].count++;

    } else {
        m->status_other++;
    }

    m->prompt_tokens += s->prompt_tokens;
    m->completion_tokens += s->completion_tokens;
    m->cached_tokens += s->cached_tokens;
    m->cost += s->cost;

    /* a first token may well come within the first millisecond */

    if (s->ttft || s->completion_tokens) {
        for (i = 0; i < NGX_HTTP_LLM_TTFT_BUCKETS; i++) {
            if (s->ttft <= ngx_http_llm_ttft_bounds[i]) {
                m->ttft[i]++;
                break;
            }
        }

        m->ttft_inf++;
        m->ttft_sum += s->ttft;
    }

    for (i = 0; i < NGX_HTTP_LLM_DURATION_BUCKETS; i++) {
        if (s->duration <= ngx_http_llm_duration_bounds[i]) {
            m->duration[i]++;
            break;
        }
    }

    m->duration_inf++;
    m->duration_sum += s->duration;

    if (s->asked.len) {
        /* the model asked for, as configured (a slot it may take) */
        ngx_http_llm_metrics_model(zone->sh, &s->asked, 1)->fell_back++;
    }

    zone->sh->rate_limited += limited;
    zone->sh->fallbacks += s->fallback;
    zone->sh->upstream_errors += s->upstream_error;

    ngx_shmtx_unlock(&zone->shpool->mutex);
}


/*
 * The model's slot, taking a free one on first use when claim is set,
 * else "other"; zone locked.  An empty name is "none" and may always
 * take a slot (401s and other errors before the body).
 */

static ngx_http_llm_model_stats_t *
ngx_http_llm_metrics_model(ngx_http_llm_shctx_t *sh, ngx_str_t *model,
    ngx_uint_t claim)
{
    ngx_str_t                    name;
    ngx_uint_t                   i;
    ngx_http_llm_model_stats_t  *m;

    name = *model;

    if (name.len == 0) {
        ngx_str_set(&name, "none");
        claim = 1;
    }

    if (name.len > NGX_HTTP_LLM_METRICS_MODEL_LEN) {
        return &sh->models[NGX_HTTP_LLM_METRICS_MODELS];
    }

    for (i = 0; i < NGX_HTTP_LLM_METRICS_MODELS; i++) {
        m = &sh->models[i];

        if (m->len == 0) {
            if (!claim) {
                break;
            }

            m->len = name.len;
            ngx_memcpy(m->name, name.data, name.len);
            return m;
        }

        if (m->len == name.len && ngx_memcmp(m->name, name.data, name.len)
                                  == 0)
        {
            return m;
        }
    }

    return &sh->models[NGX_HTTP_LLM_METRICS_MODELS];
}


/*
 * The content handler of "llm_metrics": copies the counters out of the
 * zone under its lock, then formats them without it.
 */

ngx_int_t
ngx_http_llm_metrics_handler(ngx_http_request_t *r)
{
    u_char                      *p;
    size_t                       size;
    ngx_int_t                    rc;
    ngx_buf_t                   *b;
    ngx_uint_t                   i, nmodels;
    ngx_chain_t                  out;
    ngx_http_llm_zone_t         *zone;
    ngx_http_llm_shctx_t        *sh;

    if (!(r->method & (NGX_HTTP_GET|NGX_HTTP_HEAD))) {
        return NGX_HTTP_NOT_ALLOWED;
    }

    rc = ngx_http_discard_request_body(r);

    if (rc != NGX_OK) {
        return rc;
    }

    zone = ngx_http_llm_metrics_zone(r);
    if (zone == NULL) {
        return NGX_HTTP_NOT_FOUND;
    }

    sh = ngx_palloc(r->pool, sizeof(ngx_http_llm_shctx_t));
    if (sh == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ngx_shmtx_lock(&zone->shpool->mutex);
    ngx_memcpy(sh, zone->sh, sizeof(ngx_http_llm_shctx_t));
    ngx_shmtx_unlock(&zone->shpool->mutex);

    nmodels = 1;    /* the cost lines */

    for (i = 0; i <= NGX_HTTP_LLM_METRICS_MODELS; i++) {
        if (sh->models[i].len || sh->models[i].duration_inf) {
            nmodels++;
        }
    }

    /* every line is below 256 bytes: labels are at most 2 * 64 + 40 */

    size = 4096 + 256 * 1024       /* the keys' spend */
           + nmodels * 256 * (NGX_HTTP_LLM_METRICS_STATUSES + 1 + 3
                              + NGX_HTTP_LLM_TTFT_BUCKETS + 3
                              + NGX_HTTP_LLM_DURATION_BUCKETS + 3);

    size += ngx_http_llm_metrics_engines_size(r);

    b = ngx_create_temp_buf(r->pool, size);
    if (b == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    p = b->last;

    p = ngx_http_llm_metrics_counts(p, sh);
    p = ngx_http_llm_metrics_times(p, sh);
    p = ngx_http_llm_metrics_key_costs(r, p, b->end - 4096, zone);

    p = ngx_sprintf(p, "# HELP llm_requests_in_flight Requests being "
                    "answered now, in all workers.\n"
                    "# TYPE llm_requests_in_flight gauge\n"
                    "llm_requests_in_flight %L\n"
                    "# HELP llm_rate_limited_total Requests refused with "
                    "429 by a key's limits or quota.\n"
                    "# TYPE llm_rate_limited_total counter\n"
                    "llm_rate_limited_total %uL\n"
                    "# HELP llm_fallbacks_total Requests answered by a "
                    "fallback model.\n"
                    "# TYPE llm_fallbacks_total counter\n"
                    "llm_fallbacks_total %uL\n"
                    "# HELP llm_upstream_errors_total Requests that met an "
                    "engine error.\n"
                    "# TYPE llm_upstream_errors_total counter\n"
                    "llm_upstream_errors_total %uL\n"
                    "# HELP llm_zone_start_time_seconds When the counters "
                    "started (reloads keep them).\n"
                    "# TYPE llm_zone_start_time_seconds gauge\n"
                    "llm_zone_start_time_seconds %T\n"
                    "# HELP llm_zone_reloads_total Reloads that kept the "
                    "counters.\n"
                    "# TYPE llm_zone_reloads_total counter\n"
                    "llm_zone_reloads_total %ui\n",
                    sh->in_flight > 0 ? sh->in_flight : 0,
                    sh->rate_limited, sh->fallbacks, sh->upstream_errors,
                    sh->started, sh->reloads);

    p = ngx_http_llm_metrics_engines(r, p);

    b->last = p;
    b->last_buf = (r == r->main) ? 1 : 0;
    b->last_in_chain = 1;

    r->headers_out.status = NGX_HTTP_OK;
    r->headers_out.content_length_n = b->last - b->pos;

    ngx_str_set(&r->headers_out.content_type,
                "text/plain; version=0.0.4; charset=utf-8");
    r->headers_out.content_type_len = sizeof("text/plain") - 1;
    r->headers_out.content_type_lowcase = NULL;

    rc = ngx_http_send_header(r);

    if (rc == NGX_ERROR || rc > NGX_OK || r->header_only) {
        return rc;
    }

    out.buf = b;
    out.next = NULL;

    return ngx_http_output_filter(r, &out);
}


/* llm_requests_total and llm_tokens_total, per model. */

static u_char *
ngx_http_llm_metrics_counts(u_char *p, ngx_http_llm_shctx_t *sh)
{
    ngx_uint_t                   i, j;
    ngx_http_llm_model_stats_t  *m;

    p = ngx_cpymem(p, "# HELP llm_requests_total Requests by the model that "
                   "answered and the HTTP status sent.\n"
                   "# TYPE llm_requests_total counter\n",
                   sizeof("# HELP llm_requests_total Requests by the model "
                          "that answered and the HTTP status sent.\n"
                          "# TYPE llm_requests_total counter\n") - 1);

    for (i = 0; i <= NGX_HTTP_LLM_METRICS_MODELS; i++) {
        m = &sh->models[i];

        for (j = 0; j < NGX_HTTP_LLM_METRICS_STATUSES; j++) {
            if (m->status[j].status == 0) {
                break;
            }

            p = ngx_sprintf(p, "llm_requests_total{");
            p = ngx_http_llm_metrics_label(p, m);
            p = ngx_sprintf(p, ",status=\"%ui\"} %uL\n",
                            m->status[j].status, m->status[j].count);
        }

        if (m->status_other) {
            p = ngx_sprintf(p, "llm_requests_total{");
            p = ngx_http_llm_metrics_label(p, m);
            p = ngx_sprintf(p, ",status=\"other\"} %uL\n", m->status_other);
        }
    }

    p = ngx_sprintf(p, "# HELP llm_tokens_total Tokens by model and kind "
                    "(cached: prompt tokens served from the cache).\n"
                    "# TYPE llm_tokens_total counter\n");

    for (i = 0; i <= NGX_HTTP_LLM_METRICS_MODELS; i++) {
        m = &sh->models[i];

        if (m->len == 0 && m->duration_inf == 0) {
            continue;
        }

        p = ngx_sprintf(p, "llm_tokens_total{");
        p = ngx_http_llm_metrics_label(p, m);
        p = ngx_sprintf(p, ",kind=\"prompt\"} %uL\n", m->prompt_tokens);

        p = ngx_sprintf(p, "llm_tokens_total{");
        p = ngx_http_llm_metrics_label(p, m);
        p = ngx_sprintf(p, ",kind=\"completion\"} %uL\n",
                        m->completion_tokens);

        p = ngx_sprintf(p, "llm_tokens_total{");
        p = ngx_http_llm_metrics_label(p, m);
        p = ngx_sprintf(p, ",kind=\"cached\"} %uL\n", m->cached_tokens);
    }

    p = ngx_sprintf(p, "# HELP llm_fallbacks_from_total Requests for the "
                    "model that its fallback chain answered.\n"
                    "# TYPE llm_fallbacks_from_total counter\n");

    for (i = 0; i <= NGX_HTTP_LLM_METRICS_MODELS; i++) {
        m = &sh->models[i];

        if (m->fell_back == 0) {
            continue;
        }

        p = ngx_sprintf(p, "llm_fallbacks_from_total{");
        p = ngx_http_llm_metrics_label(p, m);
        p = ngx_sprintf(p, "} %uL\n", m->fell_back);
    }

    p = ngx_sprintf(p, "# HELP llm_cost_dollars_total Spend at the models' "
                    "price= by model.\n"
                    "# TYPE llm_cost_dollars_total counter\n");

    for (i = 0; i <= NGX_HTTP_LLM_METRICS_MODELS; i++) {
        m = &sh->models[i];

        if (m->len == 0 && m->duration_inf == 0) {
            continue;
        }

        p = ngx_sprintf(p, "llm_cost_dollars_total{");
        p = ngx_http_llm_metrics_label(p, m);
        p = ngx_sprintf(p, "} ");
        p = ngx_http_llm_format_cost(p, m->cost);
        *p++ = '\n';
    }

    return p;
}


/* llm_ttft_seconds and llm_request_duration_seconds, per model. */

static u_char *
ngx_http_llm_metrics_times(u_char *p, ngx_http_llm_shctx_t *sh)
{
    ngx_uint_t                   i;
    ngx_http_llm_model_stats_t  *m;

    p = ngx_sprintf(p, "# HELP llm_ttft_seconds Time from the request to "
                    "the first token.\n"
                    "# TYPE llm_ttft_seconds histogram\n");

    for (i = 0; i <= NGX_HTTP_LLM_METRICS_MODELS; i++) {
        m = &sh->models[i];

        if (m->ttft_inf) {
            p = ngx_http_llm_metrics_histogram(p, "llm_ttft_seconds", m,
                                               m->ttft,
                                               ngx_http_llm_ttft_bounds,
                                               NGX_HTTP_LLM_TTFT_BUCKETS,
                                               m->ttft_inf, m->ttft_sum);
        }
    }

    p = ngx_sprintf(p, "# HELP llm_request_duration_seconds Time from the "
                    "request to its last byte.\n"
                    "# TYPE llm_request_duration_seconds histogram\n");

    for (i = 0; i <= NGX_HTTP_LLM_METRICS_MODELS; i++) {
        m = &sh->models[i];

        if (m->duration_inf) {
            p = ngx_http_llm_metrics_histogram(p,
                                          "llm_request_duration_seconds", m,
                                          m->duration,
                                          ngx_http_llm_duration_bounds,
                                          NGX_HTTP_LLM_DURATION_BUCKETS,
                                          m->duration_inf, m->duration_sum);
        }
    }

    return p;
}


/* model="NAME" with Prometheus' escapes (backslash, quote, newline). */

static u_char *
ngx_http_llm_metrics_label(u_char *p, ngx_http_llm_model_stats_t *m)
{
    u_char      c;
    ngx_uint_t  i;

    if (m->len == 0) {
        return ngx_cpymem(p, "model=\"other\"", sizeof("model=\"other\"") - 1);
    }

    p = ngx_cpymem(p, "model=\"", sizeof("model=\"") - 1);

    for (i = 0; i < m->len; i++) {
        c = m->name[i];

        if (c == '\\' || c == '"') {
            *p++ = '\\';
            *p++ = c;

        } else if (c == '\n') {
            *p++ = '\\';
            *p++ = 'n';

        } else {
            *p++ = c;
        }
    }

    *p++ = '"';

    return p;
}


/*
 * The engines' KV gauges are this worker's copy of their last Info
 * answers (at most llm_info_cache old; a stale one starts a probe for
 * the next scrape).  One series per engine address, engines down or not
 * yet probed left out.
 */

static ngx_uint_t
ngx_http_llm_metrics_engine_dup(ngx_http_llm_backend_t *be, ngx_uint_t i)
{
    ngx_uint_t  j;

    for (j = 0; j < i; j++) {
        if (be[j].name.len == be[i].name.len
            && ngx_strncmp(be[j].name.data, be[i].name.data, be[i].name.len)
               == 0)
        {
            return 1;
        }
    }

    return 0;
}


static size_t
ngx_http_llm_metrics_engines_size(ngx_http_request_t *r)
{
    size_t                     size;
    ngx_uint_t                 i, f;
    ngx_http_llm_backend_t    *be;
    ngx_http_llm_main_conf_t  *mcf;

    mcf = ngx_http_get_module_main_conf(r, ngx_http_llm_module);
    be = mcf->backends.elts;

    size = 0;

    for (f = 0; f < 3; f++) {
        size += ngx_strlen(ngx_http_llm_kv_families[f]);
    }

    for (i = 0; i < mcf->backends.nelts; i++) {
        /* a name escaped is at most twice as long */
        size += 3 * (NGX_HTTP_LLM_KV_LINE + 2 * be[i].name.len);
    }

    return size;
}


static u_char *
ngx_http_llm_metrics_engine_line(u_char *p, const char *family,
    ngx_str_t *name, uint64_t v)
{
    u_char      c;
    ngx_uint_t  i;

    p = ngx_sprintf(p, "%s{engine=\"", family);

    for (i = 0; i < name->len; i++) {
        c = name->data[i];

        if (c == '\\' || c == '"') {
            *p++ = '\\';
            *p++ = c;

        } else if (c == '\n') {
            *p++ = '\\';
            *p++ = 'n';

        } else {
            *p++ = c;
        }
    }

    return ngx_sprintf(p, "\"} %uL\n", v);
}


static u_char *
ngx_http_llm_metrics_engines(ngx_http_request_t *r, u_char *p)
{
    uint64_t                   v;
    ngx_uint_t                 i, f, any;
    ngx_http_llm_backend_t    *be;
    ngx_http_llm_main_conf_t  *mcf;

    mcf = ngx_http_get_module_main_conf(r, ngx_http_llm_module);
    be = mcf->backends.elts;

    for (i = 0; i < mcf->backends.nelts; i++) {
        ngx_http_llm_backend_refresh(r, &be[i]);
    }

    for (f = 0; f < 3; f++) {

        any = 0;

        for (i = 0; i < mcf->backends.nelts; i++) {

            if (!be[i].up || be[i].kv_block_tokens == 0
                || ngx_http_llm_metrics_engine_dup(be, i))
            {
                continue;
            }

            if (!any) {
                p = ngx_cpymem(p, ngx_http_llm_kv_families[f],
                               ngx_strlen(ngx_http_llm_kv_families[f]));
                any = 1;
            }

            v = (f == 0) ? (uint64_t) be[i].kv_total * be[i].kv_block_tokens
                : (f == 1) ? ngx_http_llm_kv_used(&be[i])
                : (uint64_t) be[i].kv_cached * be[i].kv_block_tokens;

            p = ngx_http_llm_metrics_engine_line(p, ngx_http_llm_kv_names[f],
                                                 &be[i].name, v);
        }
    }

    return p;
}


static u_char *
ngx_http_llm_metrics_seconds(u_char *p, uint64_t ms)
{
    if (ms % 1000 == 0) {
        return ngx_sprintf(p, "%uL", ms / 1000);
    }

    return ngx_sprintf(p, "%uL.%03uL", ms / 1000, ms % 1000);
}


static u_char *
ngx_http_llm_metrics_histogram(u_char *p, const char *name,
    ngx_http_llm_model_stats_t *m, uint64_t *buckets, ngx_msec_t *bounds,
    ngx_uint_t n, uint64_t inf, uint64_t sum)
{
    uint64_t    acc;
    ngx_uint_t  i;

    acc = 0;

    for (i = 0; i < n; i++) {
        acc += buckets[i];

        p = ngx_sprintf(p, "%s_bucket{", name);
        p = ngx_http_llm_metrics_label(p, m);
        p = ngx_sprintf(p, ",le=\"");
        p = ngx_http_llm_metrics_seconds(p, bounds[i]);
        p = ngx_sprintf(p, "\"} %uL\n", acc);
    }

    p = ngx_sprintf(p, "%s_bucket{", name);
    p = ngx_http_llm_metrics_label(p, m);
    p = ngx_sprintf(p, ",le=\"+Inf\"} %uL\n", inf);

    p = ngx_sprintf(p, "%s_sum{", name);
    p = ngx_http_llm_metrics_label(p, m);
    p = ngx_sprintf(p, "} ");
    p = ngx_http_llm_metrics_seconds(p, sum);
    p = ngx_sprintf(p, "\n%s_count{", name);
    p = ngx_http_llm_metrics_label(p, m);
    p = ngx_sprintf(p, "} %uL\n", inf);

    return p;
}


/*
 * llm_key_cost_dollars_total: the spend of each key of the keys files that
 * spent anything, by its name (a key removed from the files is not
 * listed; its spend stays in the zone with its digest).  As many as fit
 * before last.
 */

#define NGX_HTTP_LLM_KEY_COST_LINE  (NGX_HTTP_LLM_METRICS_MODEL_LEN * 2 + 80)

static u_char *
ngx_http_llm_metrics_key_costs(ngx_http_request_t *r, u_char *p,
    u_char *last, ngx_http_llm_zone_t *zone)
{
    u_char                     *hashes;
    uint64_t                   *spent;
    ngx_uint_t                  i, n, max;
    ngx_queue_t                *q;
    ngx_http_llm_key_t         *key;
    ngx_http_llm_limit_node_t  *ln;

    p = ngx_sprintf(p, "# HELP llm_key_cost_dollars_total Spend at the "
                    "models' price= by key.\n"
                    "# TYPE llm_key_cost_dollars_total counter\n");

    max = (last > p) ? (last - p) / NGX_HTTP_LLM_KEY_COST_LINE : 0;

    hashes = ngx_pnalloc(r->pool, max * 32 + 1);
    spent = ngx_palloc(r->pool, (max + 1) * sizeof(uint64_t));
    if (hashes == NULL || spent == NULL) {
        return p;
    }

    n = 0;

    ngx_shmtx_lock(&zone->shpool->mutex);

    for (q = ngx_queue_head(&zone->sh->queue);
         q != ngx_queue_sentinel(&zone->sh->queue) && n < max;
         q = ngx_queue_next(q))
    {
        ln = ngx_queue_data(q, ngx_http_llm_limit_node_t, queue);

        if (ln->spent) {
            ngx_memcpy(hashes + n * 32, ln->hash, 32);
            spent[n++] = ln->spent;
        }
    }

    ngx_shmtx_unlock(&zone->shpool->mutex);

    for (i = 0; i < n; i++) {
        key = ngx_http_llm_key_by_hash(r, hashes + i * 32);
        if (key == NULL) {
            continue;
        }

        p = ngx_sprintf(p, "llm_key_cost_dollars_total{key=\"");
        p = (u_char *) ngx_escape_json(p, key->name.data,
                                       ngx_min(key->name.len,
                                               NGX_HTTP_LLM_METRICS_MODEL_LEN));
        p = ngx_sprintf(p, "\"} ");
        p = ngx_http_llm_format_cost(p, spent[i]);
        *p++ = '\n';
    }

    return p;
}
