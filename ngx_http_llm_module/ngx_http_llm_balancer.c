
/*
 * ngx_http_llm_module: failover across models, as a balancer wrapper;
 * and llm_balance least_load, a balancer of engines by their load.
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "ngx_http_llm_module.h"


static ngx_int_t ngx_http_llm_peer_init(ngx_http_request_t *r,
    ngx_http_upstream_srv_conf_t *us);
static void ngx_http_llm_wrap_peer(ngx_http_llm_ctx_t *ctx,
    ngx_http_upstream_t *u);
static ngx_int_t ngx_http_llm_peer_get(ngx_peer_connection_t *pc,
    void *data);
static void ngx_http_llm_quiet_write(ngx_http_llm_ctx_t *ctx,
    ngx_connection_t *c);
static void ngx_http_llm_peer_free(ngx_peer_connection_t *pc, void *data,
    ngx_uint_t state);
static ngx_int_t ngx_http_llm_next_model(ngx_http_llm_ctx_t *ctx);
#if (NGX_HTTP_SSL)
static ngx_int_t ngx_http_llm_peer_set_session(ngx_peer_connection_t *pc,
    void *data);
static void ngx_http_llm_peer_save_session(ngx_peer_connection_t *pc,
    void *data);
#endif


/*
 * ngx_http_llm_wrap_peer_init() replaces the peer
 * init of an upstream{} used by this module (at configuration time, once)
 * so that each request of ours gets its get/free wrapped: when a model's
 * servers are exhausted (no live peer, or the last try failed) the next
 * model of the chain takes over before nginx gives up.
 */

ngx_int_t
ngx_http_llm_wrap_peer_init(ngx_conf_t *cf,
    ngx_http_upstream_srv_conf_t *uscf)
{
    ngx_uint_t                 i;
    ngx_http_llm_peer_init_t  *pi;
    ngx_http_llm_main_conf_t  *mcf;

    if (uscf == NULL || uscf->peer.init == ngx_http_llm_peer_init) {
        return NGX_OK;
    }

    mcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_llm_module);

    pi = mcf->inits.elts;
    for (i = 0; i < mcf->inits.nelts; i++) {
        if (pi[i].upstream == uscf) {
            return NGX_OK;
        }
    }

    if (uscf->peer.init == NULL) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "llm: upstream \"%V\" has no balancer",
                           &uscf->host);
        return NGX_ERROR;
    }

    pi = ngx_array_push(&mcf->inits);
    if (pi == NULL) {
        return NGX_ERROR;
    }

    pi->upstream = uscf;
    pi->init = uscf->peer.init;

    uscf->peer.init = ngx_http_llm_peer_init;

    return NGX_OK;
}


static ngx_http_upstream_init_peer_pt
ngx_http_llm_orig_init(ngx_http_request_t *r,
    ngx_http_upstream_srv_conf_t *us)
{
    ngx_uint_t                 i;
    ngx_http_llm_peer_init_t  *pi;
    ngx_http_llm_main_conf_t  *mcf;

    mcf = ngx_http_get_module_main_conf(r, ngx_http_llm_module);

    pi = mcf->inits.elts;
    for (i = 0; i < mcf->inits.nelts; i++) {
        if (pi[i].upstream == us) {
            return pi[i].init;
        }
    }

    return NULL;
}


static ngx_int_t
ngx_http_llm_peer_init(ngx_http_request_t *r,
    ngx_http_upstream_srv_conf_t *us)
{
    ngx_int_t                        rc;
    ngx_http_upstream_t             *u;
    ngx_http_llm_ctx_t              *ctx;
    ngx_http_upstream_init_peer_pt   init;

    init = ngx_http_llm_orig_init(r, us);
    if (init == NULL) {
        return NGX_ERROR;
    }

    rc = init(r, us);
    if (rc != NGX_OK) {
        return rc;
    }

    u = r->upstream;
    ctx = ngx_http_get_module_ctx(r, ngx_http_llm_module);

    if (ctx == NULL || u == NULL || u->input_filter_ctx != ctx) {
        /* not one of ours: the upstream{} is shared with another module */
        return NGX_OK;
    }

    ngx_http_llm_wrap_peer(ctx, u);

    return NGX_OK;
}


/* Puts ngx_http_llm_peer_get/_free around the balancer u now has. */

static void
ngx_http_llm_wrap_peer(ngx_http_llm_ctx_t *ctx, ngx_http_upstream_t *u)
{
    ctx->inner_get = u->peer.get;
    ctx->inner_free = u->peer.free;
    ctx->inner_data = u->peer.data;

    u->peer.get = ngx_http_llm_peer_get;
    u->peer.free = ngx_http_llm_peer_free;
    u->peer.data = ctx;

#if (NGX_HTTP_SSL)
    /* TLS session reuse (providers): the inner balancer's, on its data */
    ctx->inner_set_session = u->peer.set_session;
    ctx->inner_save_session = u->peer.save_session;
    u->peer.set_session = ngx_http_llm_peer_set_session;
    u->peer.save_session = ngx_http_llm_peer_save_session;
#endif
}


#if (NGX_HTTP_SSL)

static ngx_int_t
ngx_http_llm_peer_set_session(ngx_peer_connection_t *pc, void *data)
{
    ngx_http_llm_ctx_t *ctx = data;

    if (ctx->inner_set_session == NULL) {
        return NGX_OK;
    }

    return ctx->inner_set_session(pc, ctx->inner_data);
}


static void
ngx_http_llm_peer_save_session(ngx_peer_connection_t *pc, void *data)
{
    ngx_http_llm_ctx_t *ctx = data;

    if (ctx->inner_save_session) {
        ctx->inner_save_session(pc, ctx->inner_data);
    }
}

#endif


static ngx_int_t
ngx_http_llm_peer_get(ngx_peer_connection_t *pc, void *data)
{
    ngx_http_llm_ctx_t *ctx = data;

    ngx_int_t  rc;

    ctx->backpressure = 0;

    for ( ;; ) {
        rc = ctx->inner_get(pc, ctx->inner_data);

        if (rc == NGX_DONE) {
            ngx_http_llm_quiet_write(ctx, pc->connection);
            return rc;
        }

        if (rc != NGX_BUSY || ctx->header_done
            || ctx->chain_pos + 1 >= ctx->chain.nelts)
        {
            return rc;
        }

        ngx_log_error(NGX_LOG_WARN, pc->log, 0,
                      "llm: no live engine for model \"%V\"",
                      &ctx->model_name);

        if (ngx_http_llm_next_model(ctx) != NGX_OK) {
            return NGX_ERROR;
        }
    }
}


/*
 * A cached engine connection stops reporting "writable" before the
 * request is written on it.  With edge-triggered epoll every read of the
 * engine (the request, later a Cancel or Ping) frees socket buffer space
 * and so woke the worker with a write event nobody waits for: one more
 * process wake-up and event-loop turn per request, on the way to the
 * answer.  The request goes out on the still ready write event; a write
 * that does not finish clears ready, and the upstream's
 * ngx_handle_write_event() then asks for the write event again.  Only
 * the engine protocol on epoll: a provider's TLS may need it at any time.
 */

static void
ngx_http_llm_quiet_write(ngx_http_llm_ctx_t *ctx, ngx_connection_t *c)
{
    ngx_event_t  *wev;

    if (c == NULL || ctx->provider
        || !(ngx_event_flags & NGX_USE_EPOLL_EVENT))
    {
        return;
    }

    wev = c->write;

    if (!wev->active || !wev->ready || !c->read->active) {
        return;
    }

    if (ngx_del_event(wev, NGX_WRITE_EVENT, NGX_CLEAR_EVENT) != NGX_OK) {
        ngx_log_error(NGX_LOG_WARN, c->log, 0,
                      "llm: could not stop write events on an engine "
                      "connection");
    }
}


static void
ngx_http_llm_peer_free(ngx_peer_connection_t *pc, void *data,
    ngx_uint_t state)
{
    ngx_http_llm_ctx_t *ctx = data;

    ngx_uint_t  inner;

    /* an engine that said "overloaded" is busy, not down (max_fails) */

    inner = state;

    /*
     * Neither is a slow one: a first-token deadline that passed (ttft= of
     * llm_model) moves the request on without marking the server down.
     */

    if ((ctx->backpressure
         || (ctx->ttft_deadline && !ctx->got_token
             && (ngx_msec_int_t) (ngx_current_msec - ctx->ttft_deadline)
                >= 0))
        && (state & NGX_PEER_FAILED))
    {
        inner = NGX_PEER_NEXT;
    }

    ctx->inner_free(pc, ctx->inner_data, inner);

    if (ctx->got_token || ctx->client_gone) {

        /*
         * Tokens were produced (a timeout or a lost connection after
         * them), or nobody waits for the answer: never generate again.
         */

        pc->tries = 0;
        return;
    }

    if (pc->tries == 0 && (state & NGX_PEER_FAILED) && !ctx->header_done
        && ctx->chain_pos + 1 < ctx->chain.nelts)
    {
        if (ngx_http_llm_next_model(ctx) != NGX_OK) {
            pc->tries = 0;
        }
    }
}


/*
 * Moves the request to the next model of its chain: that model's
 * upstream balancer takes the peer, and the request is encoded again
 * with the model's name, for an engine or a provider as the model is.
 */

static ngx_int_t
ngx_http_llm_next_model(ngx_http_llm_ctx_t *ctx)
{
    ngx_http_request_t              *r;
    ngx_http_upstream_t             *u;
    ngx_http_llm_model_t            *m, **chain;
    ngx_http_upstream_init_peer_pt   init;

    r = ctx->request;
    u = r->upstream;

    chain = ctx->chain.elts;
    m = chain[++ctx->chain_pos];

    ngx_log_error(NGX_LOG_WARN, r->connection->log, 0,
                  "llm: model \"%V\" failed, falling back to \"%V\"",
                  &ctx->model_name, &m->name);

    if (ctx->model) {
        ngx_http_llm_model_outcome(ctx->model, 0);
    }

    /* the round-robin init reuses a non-NULL peer.data as its own */
    u->peer.data = NULL;

    init = ngx_http_llm_orig_init(r, m->upstream);
    if (init == NULL || init(r, m->upstream) != NGX_OK) {
        return NGX_ERROR;
    }

    ngx_http_llm_wrap_peer(ctx, u);

    if (u->conf->next_upstream_tries
        && u->peer.tries > u->conf->next_upstream_tries)
    {
        u->peer.tries = u->conf->next_upstream_tries;
    }

    ctx->model = m;
    ctx->model_name = m->name;
    ctx->model_json = m->json_name;
    ctx->head.len = 0;
    ctx->fallbacks++;

    if (ngx_http_llm_use_model(r, ctx, m) != NGX_OK) {
        return NGX_ERROR;
    }

    u->request_bufs = NULL;

    return u->create_request(r);
}


/*
 * llm_balance least_load (in an upstream{} of engines): a balancer in
 * nginx's framework, like least_conn, that sends a request to the engine
 * with the least work: the requests it runs and queues as its last Info
 * answer said (every gateway's, refreshed every llm_info_cache while
 * requests come) plus this worker's own in flight to it since; among
 * equals the most free KV cache, then round robin's weights.  Servers
 * down, failed (max_fails) or full (max_conns) are skipped as round
 * robin skips them; backup servers and the rest are round robin's.
 */

typedef struct {
    ngx_http_upstream_rr_peer_data_t   rrp;    /* first: round robin's */
    ngx_http_request_t                *request;
    ngx_http_upstream_srv_conf_t      *upstream;
} ngx_http_llm_lb_peer_data_t;


static ngx_int_t ngx_http_llm_lb_init_upstream(ngx_conf_t *cf,
    ngx_http_upstream_srv_conf_t *us);
static ngx_int_t ngx_http_llm_lb_init_peer(ngx_http_request_t *r,
    ngx_http_upstream_srv_conf_t *us);
static ngx_int_t ngx_http_llm_lb_get_peer(ngx_peer_connection_t *pc,
    void *data);
static ngx_http_llm_backend_t *ngx_http_llm_lb_backend(
    ngx_http_llm_lb_peer_data_t *lbp, ngx_http_upstream_rr_peer_t *peer);


char *
ngx_http_llm_balance(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_str_t                     *value;
    ngx_http_upstream_srv_conf_t  *uscf;

    value = cf->args->elts;

    if (ngx_strcmp(value[1].data, "least_load") != 0) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "invalid llm_balance \"%V\" (expected "
                           "least_load)", &value[1]);
        return NGX_CONF_ERROR;
    }

    uscf = ngx_http_conf_get_module_srv_conf(cf, ngx_http_upstream_module);

    if (uscf->peer.init_upstream) {
        ngx_conf_log_error(NGX_LOG_WARN, cf, 0,
                           "load balancing method redefined");
    }

    uscf->peer.init_upstream = ngx_http_llm_lb_init_upstream;

    uscf->flags = NGX_HTTP_UPSTREAM_CREATE
                  |NGX_HTTP_UPSTREAM_WEIGHT
                  |NGX_HTTP_UPSTREAM_MAX_CONNS
                  |NGX_HTTP_UPSTREAM_MAX_FAILS
                  |NGX_HTTP_UPSTREAM_FAIL_TIMEOUT
                  |NGX_HTTP_UPSTREAM_DOWN
                  |NGX_HTTP_UPSTREAM_BACKUP;

    (void) cmd;
    (void) conf;

    return NGX_CONF_OK;
}


static ngx_int_t
ngx_http_llm_lb_init_upstream(ngx_conf_t *cf,
    ngx_http_upstream_srv_conf_t *us)
{
    if (ngx_http_upstream_init_round_robin(cf, us) != NGX_OK) {
        return NGX_ERROR;
    }

    us->peer.init = ngx_http_llm_lb_init_peer;

    return NGX_OK;
}


static ngx_int_t
ngx_http_llm_lb_init_peer(ngx_http_request_t *r,
    ngx_http_upstream_srv_conf_t *us)
{
    ngx_http_llm_lb_peer_data_t  *lbp;

    lbp = ngx_palloc(r->pool, sizeof(ngx_http_llm_lb_peer_data_t));
    if (lbp == NULL) {
        return NGX_ERROR;
    }

    lbp->request = r;
    lbp->upstream = us;

    r->upstream->peer.data = &lbp->rrp;

    if (ngx_http_upstream_init_round_robin_peer(r, us) != NGX_OK) {
        return NGX_ERROR;
    }

    r->upstream->peer.get = ngx_http_llm_lb_get_peer;

    return NGX_OK;
}


/* The engine behind a round-robin peer: by upstream and address. */

static ngx_http_llm_backend_t *
ngx_http_llm_lb_backend(ngx_http_llm_lb_peer_data_t *lbp,
    ngx_http_upstream_rr_peer_t *peer)
{
    ngx_uint_t                 i;
    ngx_http_llm_backend_t    *be;
    ngx_http_llm_main_conf_t  *mcf;

    mcf = ngx_http_get_module_main_conf(lbp->request, ngx_http_llm_module);
    be = mcf->backends.elts;

    for (i = 0; i < mcf->backends.nelts; i++) {
        if (be[i].upstream == lbp->upstream && be[i].addr
            && ngx_cmp_sockaddr(be[i].addr->sockaddr, be[i].addr->socklen,
                                peer->sockaddr, peer->socklen, 1)
               == NGX_OK)
        {
            return &be[i];
        }
    }

    return NULL;
}


static ngx_int_t
ngx_http_llm_lb_get_peer(ngx_peer_connection_t *pc, void *data)
{
    ngx_http_llm_lb_peer_data_t *lbp = data;

    time_t                             now;
    uint64_t                           load, best_load, free, best_free;
    uintptr_t                          m;
    ngx_uint_t                         i, n, p;
    ngx_http_llm_backend_t            *be;
    ngx_http_upstream_rr_peer_t       *peer, *best;
    ngx_http_upstream_rr_peers_t      *peers;
    ngx_http_upstream_rr_peer_data_t  *rrp;

    rrp = &lbp->rrp;
    peers = rrp->peers;

    if (peers->single) {
        return ngx_http_upstream_get_round_robin_peer(pc, rrp);
    }

    pc->cached = 0;
    pc->connection = NULL;

    now = ngx_time();

    ngx_http_upstream_rr_peers_wlock(peers);

    best = NULL;
    best_load = 0;
    best_free = 0;
    p = 0;

    for (peer = peers->peer, i = 0; peer; peer = peer->next, i++) {

        n = i / (8 * sizeof(uintptr_t));
        m = (uintptr_t) 1 << i % (8 * sizeof(uintptr_t));

        if (rrp->tried[n] & m || peer->down) {
            continue;
        }

        if (peer->max_fails && peer->fails >= peer->max_fails
            && now - peer->checked <= peer->fail_timeout)
        {
            continue;
        }

        if (peer->max_conns && peer->conns >= peer->max_conns) {
            continue;
        }

        be = ngx_http_llm_lb_backend(lbp, peer);

        /* the engine's own count includes this worker's requests it had
         * when it answered; what this worker started since adds on */

        load = (be && be->up) ? be->requests_running + be->requests_queued
                              : 0;
        load += peer->conns;
        free = (be && be->up) ? be->kv_free : 0;

        if (best == NULL || load < best_load
            || (load == best_load
                && (free > best_free
                    || (free == best_free
                        && peer->current_weight > best->current_weight))))
        {
            best = peer;
            best_load = load;
            best_free = free;
            p = i;
        }
    }

    if (best == NULL) {
        ngx_http_upstream_rr_peers_unlock(peers);

        /* nothing left among the primary servers: backup, or the error */
        return ngx_http_upstream_get_round_robin_peer(pc, rrp);
    }

    best->current_weight -= best->effective_weight;

    for (peer = peers->peer; peer; peer = peer->next) {
        peer->current_weight += peer->effective_weight;
    }

    pc->sockaddr = best->sockaddr;
    pc->socklen = best->socklen;
    pc->name = &best->name;

    best->conns++;

    if (now - best->checked > best->fail_timeout) {
        best->checked = now;
    }

    rrp->current = best;

    n = p / (8 * sizeof(uintptr_t));
    m = (uintptr_t) 1 << p % (8 * sizeof(uintptr_t));
    rrp->tried[n] |= m;

    ngx_http_upstream_rr_peers_unlock(peers);

    return NGX_OK;
}


/*
 * A model's recent error rate (error_rate= of llm_model), per worker: the
 * answers of the last window in 10 buckets; a model with at least
 * NGX_HTTP_LLM_HEALTH_MIN answers in the window of which PCT% or more
 * failed is "failing" and requests start at its fallback.  Skipped, it
 * gets no answers, so its buckets age out and after a window it is
 * tried again (a circuit breaker that half-opens by time).
 */

#define NGX_HTTP_LLM_HEALTH_BUCKETS  10
#define NGX_HTTP_LLM_HEALTH_MIN      5

struct ngx_http_llm_health_s {
    ngx_msec_t   start[NGX_HTTP_LLM_HEALTH_BUCKETS];
    ngx_uint_t   total[NGX_HTTP_LLM_HEALTH_BUCKETS];
    ngx_uint_t   failed[NGX_HTTP_LLM_HEALTH_BUCKETS];
};


/* error_rate=PCT%[/WINDOW] */

ngx_int_t
ngx_http_llm_model_error_rate(ngx_conf_t *cf, ngx_http_llm_model_t *m,
    ngx_str_t *value)
{
    u_char     *p, *last, *slash;
    ngx_int_t   pct, t;
    ngx_str_t   w;

    p = value->data + sizeof("error_rate=") - 1;
    last = value->data + value->len;
    slash = ngx_strlchr(p, last, '/');

    w.data = slash ? slash + 1 : NULL;
    w.len = slash ? (size_t) (last - slash - 1) : 0;

    if (slash == NULL) {
        slash = last;
    }

    if (slash > p && slash[-1] == '%') {
        slash--;
    }

    pct = ngx_atoi(p, slash - p);
    if (pct == NGX_ERROR || pct < 1 || pct > 100) {
        return NGX_DECLINED;
    }

    m->err_pct = (ngx_uint_t) pct;
    m->err_window = 30000;

    if (w.len) {
        t = ngx_parse_time(&w, 0);
        if (t == NGX_ERROR || t < 1000) {
            return NGX_DECLINED;
        }

        m->err_window = (ngx_msec_t) t;
    }

    m->health = ngx_pcalloc(cf->pool, sizeof(struct ngx_http_llm_health_s));
    if (m->health == NULL) {
        return NGX_ERROR;
    }

    return NGX_OK;
}


/* Counts one answer of m (ok: not the engine's or provider's failure). */

void
ngx_http_llm_model_outcome(ngx_http_llm_model_t *m, ngx_uint_t ok)
{
    ngx_msec_t                     span;
    ngx_uint_t                     b;
    struct ngx_http_llm_health_s  *h;

    h = m->health;
    if (h == NULL) {
        return;
    }

    span = m->err_window / NGX_HTTP_LLM_HEALTH_BUCKETS;
    b = (ngx_current_msec / span) % NGX_HTTP_LLM_HEALTH_BUCKETS;

    if (ngx_current_msec - h->start[b] >= span || h->total[b] == 0) {
        h->start[b] = ngx_current_msec - ngx_current_msec % span;
        h->total[b] = 0;
        h->failed[b] = 0;
    }

    h->total[b]++;
    h->failed[b] += !ok;
}


ngx_uint_t
ngx_http_llm_model_failing(ngx_http_llm_model_t *m)
{
    ngx_uint_t                     i, total, failed;
    struct ngx_http_llm_health_s  *h;

    h = m->health;
    if (h == NULL) {
        return 0;
    }

    total = 0;
    failed = 0;

    for (i = 0; i < NGX_HTTP_LLM_HEALTH_BUCKETS; i++) {
        if (h->total[i] && ngx_current_msec - h->start[i] < m->err_window) {
            total += h->total[i];
            failed += h->failed[i];
        }
    }

    return total >= NGX_HTTP_LLM_HEALTH_MIN
           && failed * 100 >= total * m->err_pct;
}
