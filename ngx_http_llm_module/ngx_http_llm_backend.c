
/*
 * ngx_http_llm_module: the engines behind the module.  Registration (one
 * backend per engine address of every upstream{} a model or llm_pass
 * names, at configuration time) and the Info probe: one short connection
 * per address, outside of any request, keeping what the InfoResponse says
 * (model, state, context window, fingerprint, limits) for /v1/models,
 * /healthz, admission and validation.
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "ngx_http_llm_module.h"


static ngx_int_t ngx_http_llm_add_backends(ngx_http_llm_main_conf_t *mcf,
    ngx_http_upstream_srv_conf_t *uscf);
static void ngx_http_llm_probe_write(ngx_event_t *wev);
static void ngx_http_llm_probe_read(ngx_event_t *rev);
static void ngx_http_llm_probe_done(ngx_http_llm_backend_t *be,
    const char *error);


/*
 * Registers every engine address the configuration names, once, after
 * the whole http{} block is read (so every upstream{} is complete): one
 * backend per address of each model's upstream and of each llm_pass
 * upstream, consecutive per upstream{}, and wraps the balancer of each of
 * those upstreams for model failover (ngx_http_llm_balancer.c).
 */

ngx_int_t
ngx_http_llm_register_backends(ngx_conf_t *cf, ngx_http_llm_main_conf_t *mcf)
{
    ngx_uint_t                      i;
    ngx_http_llm_model_t           *m;
    ngx_http_upstream_srv_conf_t  **pass;

    m = mcf->models.elts;

    for (i = 0; i < mcf->models.nelts; i++) {

        /* a provider's servers speak HTTP: wrapped, never probed */

        if (ngx_http_llm_wrap_peer_init(cf, m[i].upstream) != NGX_OK
            || (m[i].provider == NULL
                && ngx_http_llm_add_backends(mcf, m[i].upstream) != NGX_OK))
        {
            return NGX_ERROR;
        }

        if (m[i].provider) {
            continue;
        }

        (void) ngx_http_llm_backends_find(mcf, m[i].upstream,
                                          &m[i].first_backend,
                                          &m[i].nbackends);
    }

    pass = mcf->passes.elts;

    for (i = 0; i < mcf->passes.nelts; i++) {
        if (ngx_http_llm_add_backends(mcf, pass[i]) != NGX_OK
            || ngx_http_llm_wrap_peer_init(cf, pass[i]) != NGX_OK)
        {
            return NGX_ERROR;
        }
    }

    return NGX_OK;
}


/*
 * The backends of uscf: NGX_OK with their range in mcf->backends (empty
 * for no upstream, or one without addresses), NGX_DECLINED when uscf was
 * never registered.
 */

ngx_int_t
ngx_http_llm_backends_find(ngx_http_llm_main_conf_t *mcf,
    ngx_http_upstream_srv_conf_t *uscf, ngx_uint_t *first, ngx_uint_t *n)
{
    ngx_uint_t               i, j;
    ngx_http_llm_backend_t  *be;

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

    for (i = 0; i < mcf->registered.nelts; i++) {
        if (((ngx_http_upstream_srv_conf_t **) mcf->registered.elts)[i]
            == uscf)
        {
            return NGX_OK;
        }
    }

    return NGX_DECLINED;
}


/* Adds one backend per engine address of uscf, unless known. */

static ngx_int_t
ngx_http_llm_add_backends(ngx_http_llm_main_conf_t *mcf,
    ngx_http_upstream_srv_conf_t *uscf)
{
    ngx_uint_t                      i, j, first, n;
    ngx_http_llm_backend_t         *be;
    ngx_http_upstream_server_t     *us;
    ngx_http_upstream_srv_conf_t  **reg;

    if (uscf == NULL
        || ngx_http_llm_backends_find(mcf, uscf, &first, &n) == NGX_OK)
    {
        return NGX_OK;
    }

    reg = ngx_array_push(&mcf->registered);
    if (reg == NULL) {
        return NGX_ERROR;
    }

    *reg = uscf;

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
            be->auth = mcf->engine_auth;
        }
    }

    return NGX_OK;
}


/*
 * The backends that serve the request: its model's, or without a model
 * table those of the location's llm_pass.
 */

void
ngx_http_llm_request_backends(ngx_http_request_t *r, ngx_http_llm_ctx_t *ctx,
    ngx_uint_t *first, ngx_uint_t *n)
{
    ngx_http_llm_loc_conf_t  *llcf;

    if (ctx->model) {
        *first = ctx->model->first_backend;
        *n = ctx->model->nbackends;
        return;
    }

    llcf = ngx_http_get_module_loc_conf(r, ngx_http_llm_module);

    *first = llcf->backend;
    *n = llcf->nbackends;
}


/* Starts a probe of be when its last answer is older than llm_info_cache. */

void
ngx_http_llm_backend_refresh(ngx_http_request_t *r, ngx_http_llm_backend_t *be)
{
    ngx_http_llm_main_conf_t  *mcf;

    mcf = ngx_http_get_module_main_conf(r, ngx_http_llm_module);

    if (!be->busy
        && (be->checked == 0
            || ngx_current_msec - be->checked >= mcf->info_cache))
    {
        (void) ngx_http_llm_probe(be, r->connection->log);
    }
}


/*
 * The strictest limits of the request's engines that are up and told
 * theirs in Info (stale answers are refreshed for the next request):
 * NGX_OK, or NGX_DECLINED when none did, and the engine's own refusal
 * stands.
 */

ngx_int_t
ngx_http_llm_engine_limits(ngx_http_request_t *r, ngx_http_llm_ctx_t *ctx,
    ngx_http_llm_engine_limits_t *lim)
{
    ngx_uint_t                     i, first, n, found;
    ngx_http_llm_backend_t        *be;
    ngx_http_llm_main_conf_t      *mcf;
    ngx_http_llm_engine_limits_t  *l;

    mcf = ngx_http_get_module_main_conf(r, ngx_http_llm_module);
    be = mcf->backends.elts;

    ngx_http_llm_request_backends(r, ctx, &first, &n);

    found = 0;

    for (i = first; i < first + n && i < mcf->backends.nelts; i++) {

        ngx_http_llm_backend_refresh(r, &be[i]);

        if (!be[i].up || !be[i].has_limits) {
            continue;
        }

        l = &be[i].limits;

        if (!found) {
            *lim = *l;
            found = 1;
            continue;
        }

        ngx_http_llm_limits_merge(lim, l);
    }

    return found ? NGX_OK : NGX_DECLINED;
}


/* lim becomes the stricter of lim and l. */

void
ngx_http_llm_limits_merge(ngx_http_llm_engine_limits_t *lim,
    ngx_http_llm_engine_limits_t *l)
{
    lim->max_choices = ngx_min(lim->max_choices, l->max_choices);
    lim->max_stop = ngx_min(lim->max_stop, l->max_stop);
    lim->max_top_logprobs = ngx_min(lim->max_top_logprobs,
                                    l->max_top_logprobs);

    /* 0: no limit */

    if (l->max_stop_bytes
        && (lim->max_stop_bytes == 0
            || l->max_stop_bytes < lim->max_stop_bytes))
    {
        lim->max_stop_bytes = l->max_stop_bytes;
    }
}


/*
 * Stream chunks go out before the engine's Done names its fingerprint:
 * when every engine of the model that answered Info agrees on the
 * system_fingerprint it reported there, the chunks carry it from the
 * first one on.
 */

void
ngx_http_llm_fingerprint(ngx_http_request_t *r, ngx_http_llm_ctx_t *ctx)
{
    u_char                    *fp;
    ngx_uint_t                 i;
    ngx_http_llm_backend_t    *be;
    ngx_http_llm_main_conf_t  *mcf;

    if (ctx->model == NULL || !ctx->stream) {
        return;
    }

    mcf = ngx_http_get_module_main_conf(r, ngx_http_llm_module);
    be = mcf->backends.elts;
    fp = NULL;

    for (i = ctx->model->first_backend;
         i < ctx->model->first_backend + ctx->model->nbackends;
         i++)
    {
        if (!be[i].up || be[i].fingerprint[0] == '\0') {
            continue;
        }

        if (fp && ngx_strcmp(fp, be[i].fingerprint) != 0) {
            return;
        }

        fp = be[i].fingerprint;
    }

    if (fp == NULL) {
        return;
    }

    /* the engine's text: kept escaped, as at Done */

    if (ngx_http_llm_json_str(r->pool, &ctx->fingerprint, fp,
                              ngx_strlen(fp))
        != NGX_OK)
    {
        ngx_str_null(&ctx->fingerprint);
    }
}


/*
 * The Info probe: one short connection to one engine address, sending an
 * InfoRequest and keeping what the InfoResponse says in be.  Runs
 * detached from requests (they poll be->busy).
 */

ngx_int_t
ngx_http_llm_probe(ngx_http_llm_backend_t *be, ngx_log_t *log)
{
    ngx_int_t          rc;
    ngx_connection_t  *c;

    if (be->busy) {
        return NGX_AGAIN;
    }

    if (be->buf == NULL) {
        be->size = 65536;
        be->buf = ngx_alloc(be->size, ngx_cycle->log);
        if (be->buf == NULL) {
            return NGX_ERROR;
        }
    }

    ngx_memzero(&be->pc, sizeof(ngx_peer_connection_t));

    be->pc.sockaddr = be->addr->sockaddr;
    be->pc.socklen = be->addr->socklen;
    be->pc.name = &be->name;
    be->pc.get = ngx_event_get_peer;
    be->pc.log = ngx_cycle->log;
    be->pc.log_error = NGX_ERROR_ERR;
    be->pc.tries = 1;
    be->len = 0;
    be->sent = 0;

    (void) log;

    rc = ngx_event_connect_peer(&be->pc);

    if (rc == NGX_ERROR || rc == NGX_BUSY || rc == NGX_DECLINED) {
        if (be->pc.connection) {
            ngx_close_connection(be->pc.connection);
            be->pc.connection = NULL;
        }

        be->up = 0;
        be->checked = ngx_current_msec;
        ngx_cpystrn(be->error, (u_char *) "connect failed",
                    sizeof(be->error));
        return NGX_DECLINED;
    }

    be->busy = 1;

    c = be->pc.connection;
    c->data = be;
    c->read->handler = ngx_http_llm_probe_read;
    c->write->handler = ngx_http_llm_probe_write;

    ngx_add_timer(c->read, be->timeout);

    if (rc == NGX_OK) {
        ngx_http_llm_probe_write(c->write);
    }

    return NGX_AGAIN;
}


static void
ngx_http_llm_probe_write(ngx_event_t *wev)
{
    u_char                   req[16 + NGX_HTTP_LLM_AUTH_MAX];
    size_t                   len;
    ssize_t                  n;
    Llm__Request             rq = LLM__REQUEST__INIT;
    Llm__InfoRequest         info = LLM__INFO_REQUEST__INIT;
    ngx_connection_t        *c;
    ngx_http_llm_backend_t  *be;

    c = wev->data;
    be = c->data;

    if (be->sent) {
        return;
    }

    rq.kind_case = LLM__REQUEST__KIND_INFO;
    rq.info = &info;
    rq.auth = be->auth;

    len = llm__request__get_packed_size(&rq);
    req[0] = (u_char) (len >> 24);
    req[1] = (u_char) (len >> 16);
    req[2] = (u_char) (len >> 8);
    req[3] = (u_char) len;
    len = 4 + llm__request__pack(&rq, req + 4);

    n = c->send(c, req, len);

    if (n == NGX_AGAIN) {
        if (ngx_handle_write_event(wev, 0) != NGX_OK) {
            ngx_http_llm_probe_done(be, "send failed");
        }
        return;
    }

    if (n != (ssize_t) len) {
        ngx_http_llm_probe_done(be, "send failed");
        return;
    }

    be->sent = 1;

    if (ngx_handle_read_event(c->read, 0) != NGX_OK) {
        ngx_http_llm_probe_done(be, "read failed");
    }
}


static void
ngx_http_llm_probe_read(ngx_event_t *rev)
{
    size_t                   len, got;
    ssize_t                  n;
    ngx_connection_t        *c;
    Llm__Event              *ev;
    Llm__InfoResponse       *info;
    ngx_http_llm_backend_t  *be;

    c = rev->data;
    be = c->data;

    if (rev->timedout) {
        ngx_http_llm_probe_done(be, "timed out");
        return;
    }

    got = be->len;

    for ( ;; ) {
        n = c->recv(c, be->buf + got, be->size - got);

        if (n == NGX_AGAIN) {
            be->len = got;

            if (ngx_handle_read_event(rev, 0) != NGX_OK) {
                ngx_http_llm_probe_done(be, "read failed");
            }
            return;
        }

        if (n == 0 || n == NGX_ERROR) {
            ngx_http_llm_probe_done(be, "connection closed");
            return;
        }

        got += n;

        if (got < 4) {
            continue;
        }

        len = ((size_t) be->buf[0] << 24) | ((size_t) be->buf[1] << 16)
              | ((size_t) be->buf[2] << 8) | (size_t) be->buf[3];

        if (len > be->size - 4) {
            ngx_http_llm_probe_done(be, "info frame too large");
            return;
        }

        if (got >= len + 4) {
            break;
        }

        if (got == be->size) {
            ngx_http_llm_probe_done(be, "info frame too large");
            return;
        }
    }

    ev = llm__event__unpack(NULL, len, be->buf + 4);

    if (ev == NULL || ev->kind_case != LLM__EVENT__KIND_INFO) {
        if (ev && ev->kind_case == LLM__EVENT__KIND_ERROR) {
            ngx_cpystrn(be->error, (u_char *) ev->error->message,
                        sizeof(be->error));
            llm__event__free_unpacked(ev, NULL);
            ngx_http_llm_probe_done(be, (char *) be->error);
            return;
        }

        if (ev) {
            llm__event__free_unpacked(ev, NULL);
        }

        ngx_http_llm_probe_done(be, "invalid info answer");
        return;
    }

    info = ev->info;

    ngx_http_llm_utf8_cpystrn(be->model, (u_char *) info->model,
                              sizeof(be->model));
    ngx_http_llm_utf8_cpystrn(be->revision, (u_char *) info->revision,
                              sizeof(be->revision));
    ngx_http_llm_utf8_cpystrn(be->load_state, (u_char *) info->load_state,
                              sizeof(be->load_state));
    ngx_http_llm_utf8_cpystrn(be->quantization, (u_char *) info->quantization,
                              sizeof(be->quantization));
    ngx_http_llm_utf8_cpystrn(be->architecture, (u_char *) info->architecture,
                              sizeof(be->architecture));
    ngx_http_llm_utf8_cpystrn(be->fingerprint,
                              (u_char *) info->system_fingerprint,
                              sizeof(be->fingerprint));

    be->has_limits = (info->limits != NULL);

    if (info->limits) {
        be->limits.max_choices = info->limits->max_choices;
        be->limits.max_stop = info->limits->max_stop;
        be->limits.max_stop_bytes = info->limits->max_stop_bytes;
        be->limits.max_top_logprobs = info->limits->max_top_logprobs;
    }

    be->queue_depth = info->queue_depth;
    be->context_length = info->context_length;
    be->created = info->created;

    if (info->stats) {
        be->requests_total = info->stats->requests_total;
        be->requests_running = info->stats->requests_running;
        be->requests_queued = info->stats->requests_queued;
        be->requests_cancelled = info->stats->requests_cancelled;
        be->kv_free = info->stats->kv_blocks_free;
        be->kv_total = info->stats->kv_blocks_total;
        be->kv_cached = info->stats->kv_blocks_cached;
        be->kv_block_tokens = info->stats->kv_block_tokens;
    }

    llm__event__free_unpacked(ev, NULL);

    ngx_http_llm_probe_done(be, NULL);
}


static void
ngx_http_llm_probe_done(ngx_http_llm_backend_t *be, const char *error)
{
    if (be->pc.connection) {
        ngx_close_connection(be->pc.connection);
        be->pc.connection = NULL;
    }

    be->busy = 0;
    be->checked = ngx_current_msec;

    if (error) {
        be->up = 0;

        if ((u_char *) error != be->error) {
            ngx_cpystrn(be->error, (u_char *) error, sizeof(be->error));
        }

        ngx_log_error(NGX_LOG_INFO, ngx_cycle->log, 0,
                      "llm: info probe of %V: %s", &be->name, error);
        return;
    }

    be->up = (ngx_strcmp(be->load_state, "draining") != 0);
    be->error[0] = '\0';
}


/*
 * llm_engine_auth_file FILE: the secret engines on TCP want (llm-engine
 * --auth-file), sent on every frame.  Its first line, blanks trimmed;
 * printable ASCII, at most NGX_HTTP_LLM_AUTH_MAX bytes.
 */

char *
ngx_http_llm_engine_auth_file(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_llm_main_conf_t *mcf = conf;

    ngx_str_t  *value, secret;

    if (mcf->engine_auth[0] != '\0') {
        return "is duplicate";
    }

    value = cf->args->elts;

    if (ngx_http_llm_conf_secret(cf, &value[1], "llm_engine_auth_file",
                                 NGX_HTTP_LLM_AUTH_MAX, &secret)
        != NGX_OK)
    {
        return NGX_CONF_ERROR;
    }

    mcf->engine_auth = (char *) secret.data;

    (void) cmd;

    return NGX_CONF_OK;
}
