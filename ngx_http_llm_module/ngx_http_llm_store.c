
/*
 * ngx_http_llm_module: a fleet's shared limits in Redis (llm_limit_store).
 *
 * Several gateways behind an L4 balancer each keep their per-key limits
 * in their own shared zone (ngx_http_llm_limit.c): the fast path, and
 * still the decision of every gateway.  With llm_limit_store, a request
 * of a key with limits is also admitted by the fleet, in one Redis
 * round trip from the event loop (hiredis' async API, its socket on
 * nginx's events; never a blocking call in a worker), the way Kong's
 * "redis" rate-limiting policy does it: counters per key in Redis,
 * changed by every request.  One Lua script checks and takes, atomically:
 *
 *   - the key's budget (dollars spent, exact: settled costs are added),
 *   - its quota (tokens used, reservations included: a request reserves
 *     what it may use at admission, and its settlement replaces the
 *     reservation with the usage; so across the fleet a key never goes
 *     over its quota by more than one request's reservation),
 *   - requests/min and tokens/min as counters of the current minute
 *     (fixed windows: exact per calendar minute over the whole fleet; any
 *     sliding 60 seconds may see up to twice the limit across a window
 *     boundary, and each gateway's own token bucket still applies).
 *
 * A settlement goes to Redis as an increment; one that cannot (Redis down)
 * waits in the worker and is sent when Redis is back, so usage is not
 * lost while the worker lives.  Keys appear in Redis by the first 16
 * bytes of their SHA-256 only.  When Redis cannot answer (down, or slower
 * than timeout=), on_error=local admits on the gateway's own limits and
 * on_error=deny refuses with 503; each worker logs the transitions.
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include <hiredis/hiredis.h>
#include <hiredis/async.h>

#include "ngx_http_llm_module.h"
#include "ngx_http_llm_keys.h"


#define NGX_HTTP_LLM_STORE_PENDING_MAX  65536   /* settlements kept */
#define NGX_HTTP_LLM_STORE_RETRY        1000    /* ms between connects */


typedef struct ngx_http_llm_store_conf_s {
    ngx_str_t                  url;
    u_char                     host[NGX_SOCKADDR_STRLEN + 1];
    int                        port;
    ngx_uint_t                 db;
    ngx_str_t                  password;
    ngx_msec_t                 timeout;
    ngx_flag_t                 deny;       /* on_error=deny */
} ngx_http_llm_store_conf_t;


/* One admission waiting for Redis; lives until its reply or the end. */

typedef struct {
    ngx_http_request_t        *request;    /* NULL: the request is gone */
    ngx_event_t                timer;
    ngx_pool_cleanup_t        *cln;
    ngx_uint_t                 answered;
} ngx_http_llm_store_wait_t;


/* A settlement not yet in Redis. */

typedef struct {
    ngx_queue_t                queue;
    u_char                     id[32];
    int64_t                    tokens;
    int64_t                    cost;
    int64_t                    tpm;
    time_t                     minute;
} ngx_http_llm_store_settle_t;


/* The worker's connection. */

static redisAsyncContext          *ngx_http_llm_store_ac;
static ngx_connection_t           *ngx_http_llm_store_c;
static ngx_uint_t                  ngx_http_llm_store_up;  /* connected */
static ngx_uint_t                  ngx_http_llm_store_was_down;
static ngx_msec_t                  ngx_http_llm_store_last_try;
static ngx_http_llm_store_conf_t  *ngx_http_llm_store_conf;
static ngx_queue_t                 ngx_http_llm_store_pending;
static ngx_uint_t                  ngx_http_llm_store_npending;


/*
 * KEYS: budget spent, quota used, requests of the minute, tokens of the
 * minute.  ARGV: budget, quota, rpm, tpm, the tokens to reserve.
 * Returns {0} admitted, {1} budget, {2} quota, {3} requests, {4} tokens.
 */

static const char  ngx_http_llm_store_admit_lua[] =
    "local budget, quota = tonumber(ARGV[1]), tonumber(ARGV[2]) "
    "local rpm, tpm, res = tonumber(ARGV[3]), tonumber(ARGV[4]), "
    "  tonumber(ARGV[5]) "
    "if budget > 0 and tonumber(redis.call('GET', KEYS[1]) or '0') "
    "  >= budget then return {1} end "
    "if quota > 0 and tonumber(redis.call('GET', KEYS[2]) or '0') "
    "  >= quota then return {2} end "
    "if rpm > 0 and tonumber(redis.call('GET', KEYS[3]) or '0') "
    "  >= rpm then return {3} end "
    "if tpm > 0 and tonumber(redis.call('GET', KEYS[4]) or '0') "
    "  >= tpm then return {4} end "
    "if rpm > 0 then redis.call('INCR', KEYS[3]) "
    "  redis.call('EXPIRE', KEYS[3], 120) end "
    "if tpm > 0 then redis.call('INCRBY', KEYS[4], res) "
    "  redis.call('EXPIRE', KEYS[4], 120) end "
    "if quota > 0 then redis.call('INCRBY', KEYS[2], res) end "
    "return {0}";

/* KEYS as above; ARGV: cost, quota delta, tokens/min delta. */

static const char  ngx_http_llm_store_settle_lua[] =
    "if ARGV[1] ~= '0' then redis.call('INCRBY', KEYS[1], ARGV[1]) end "
    "if ARGV[2] ~= '0' then redis.call('INCRBY', KEYS[2], ARGV[2]) end "
    "if ARGV[3] ~= '0' and redis.call('EXISTS', KEYS[4]) == 1 then "
    "  redis.call('INCRBY', KEYS[4], ARGV[3]) end "
    "return 0";


static ngx_int_t ngx_http_llm_store_connect(ngx_log_t *log);
static void ngx_http_llm_store_add_read(void *data);
static void ngx_http_llm_store_del_read(void *data);
static void ngx_http_llm_store_add_write(void *data);
static void ngx_http_llm_store_del_write(void *data);
static void ngx_http_llm_store_cleanup(void *data);
static void ngx_http_llm_store_read_handler(ngx_event_t *ev);
static void ngx_http_llm_store_write_handler(ngx_event_t *ev);
static void ngx_http_llm_store_connected(const redisAsyncContext *ac,
    int status);
static void ngx_http_llm_store_disconnected(const redisAsyncContext *ac,
    int status);
static void ngx_http_llm_store_transition(ngx_uint_t up, ngx_log_t *log,
    const char *why);
static void ngx_http_llm_store_admit_reply(redisAsyncContext *ac,
    void *reply, void *data);
static void ngx_http_llm_store_timeout(ngx_event_t *ev);
static void ngx_http_llm_store_wait_cleanup(void *data);
static void ngx_http_llm_store_finish(ngx_http_request_t *r,
    ngx_int_t verdict);
static void ngx_http_llm_store_keys(u_char *hash, time_t minute,
    u_char keys[4][64]);
static ngx_int_t ngx_http_llm_store_send_settle(
    ngx_http_llm_store_settle_t *s);
static void ngx_http_llm_store_settle_reply(redisAsyncContext *ac,
    void *reply, void *data);
static void ngx_http_llm_store_flush(void);


/* ------------------------------------------------------------------ */
/* configuration                                                      */
/* ------------------------------------------------------------------ */


/*
 * llm_limit_store redis://HOST:PORT[/DB] [password_file=FILE]
 *     [timeout=TIME] [on_error=local|deny];
 */

char *
ngx_http_llm_limit_store(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_llm_keys_main_conf_t *kmcf = conf;

    u_char                     *p, *last, *slash;
    ssize_t                     n;
    ngx_int_t                   t;
    ngx_str_t                  *value, s, file;
    ngx_url_t                   u;
    ngx_uint_t                  i;
    ngx_http_llm_store_conf_t  *sc;

    if (kmcf->store) {
        return "is duplicate";
    }

    value = cf->args->elts;

    sc = ngx_pcalloc(cf->pool, sizeof(ngx_http_llm_store_conf_t));
    if (sc == NULL) {
        return NGX_CONF_ERROR;
    }

    sc->url = value[1];
    sc->timeout = 200;

    if (value[1].len <= 8
        || ngx_strncmp(value[1].data, "redis://", 8) != 0)
    {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "llm_limit_store \"%V\": expected "
                           "redis://HOST:PORT[/DB]", &value[1]);
        return NGX_CONF_ERROR;
    }

    p = value[1].data + 8;
    last = value[1].data + value[1].len;
    slash = ngx_strlchr(p, last, '/');

    if (slash) {
        t = ngx_atoi(slash + 1, last - slash - 1);
        if (t == NGX_ERROR || t > 1000) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "llm_limit_store \"%V\": invalid database "
                               "number", &value[1]);
            return NGX_CONF_ERROR;
        }

        sc->db = (ngx_uint_t) t;
        last = slash;
    }

    /* resolved here, once: hiredis would resolve a name with a blocking
     * call in the worker */

    ngx_memzero(&u, sizeof(ngx_url_t));
    u.url.data = p;
    u.url.len = last - p;
    u.default_port = 6379;

    if (ngx_parse_url(cf->pool, &u) != NGX_OK || u.naddrs == 0) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "llm_limit_store \"%V\": %s", &value[1],
                           u.err ? u.err : "host not found");
        return NGX_CONF_ERROR;
    }

    n = ngx_sock_ntop(u.addrs[0].sockaddr, u.addrs[0].socklen, sc->host,
                      NGX_SOCKADDR_STRLEN, 0);
    sc->host[n] = '\0';
    sc->port = (int) ngx_inet_get_port(u.addrs[0].sockaddr);

    for (i = 2; i < cf->args->nelts; i++) {
        s = value[i];

        if (ngx_strncmp(s.data, "timeout=", 8) == 0) {
            s.data += 8;
            s.len -= 8;

            t = ngx_parse_time(&s, 0);
            if (t == NGX_ERROR || t == 0) {
                goto invalid;
            }

            sc->timeout = (ngx_msec_t) t;
            continue;
        }

        if (ngx_strcmp(s.data, "on_error=local") == 0) {
            sc->deny = 0;
            continue;
        }

        if (ngx_strcmp(s.data, "on_error=deny") == 0) {
            sc->deny = 1;
            continue;
        }

        if (ngx_strncmp(s.data, "password_file=", 14) == 0 && s.len > 14) {
            file.data = s.data + 14;
            file.len = s.len - 14;

            if (ngx_http_llm_conf_secret(cf, &file,
                                         "llm_limit_store password_file",
                                         1024, &sc->password)
                != NGX_OK)
            {
                return NGX_CONF_ERROR;
            }

            continue;
        }

        goto invalid;
    }

    kmcf->store = sc;

    (void) cmd;

    return NGX_CONF_OK;

invalid:

    ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                       "invalid parameter \"%V\" of llm_limit_store",
                       &value[i]);
    return NGX_CONF_ERROR;
}


/* ------------------------------------------------------------------ */
/* the connection, on nginx's events                                  */
/* ------------------------------------------------------------------ */


/*
 * Connects (non-blocking) when there is no connection and the last try
 * is at least a second ago.  NGX_OK: a context to queue commands on
 * (hiredis buffers them until it is connected); NGX_DECLINED: none.
 */

static ngx_int_t
ngx_http_llm_store_connect(ngx_log_t *log)
{
    redisAsyncContext          *ac;
    ngx_connection_t           *c;
    ngx_http_llm_store_conf_t  *sc;

    if (ngx_http_llm_store_ac) {
        return NGX_OK;
    }

    if (ngx_http_llm_store_last_try
        && ngx_current_msec - ngx_http_llm_store_last_try
           < NGX_HTTP_LLM_STORE_RETRY)
    {
        return NGX_DECLINED;
    }

    ngx_http_llm_store_last_try = ngx_current_msec;

    if (ngx_http_llm_store_pending.next == NULL) {
        ngx_queue_init(&ngx_http_llm_store_pending);
    }

    sc = ngx_http_llm_store_conf;

    ac = redisAsyncConnect((char *) sc->host, sc->port);

    if (ac == NULL || ac->err) {
        ngx_http_llm_store_transition(0, log, ac ? ac->errstr : "no memory");
        if (ac) {
            redisAsyncFree(ac);
        }
        return NGX_DECLINED;
    }

    c = ngx_get_connection(ac->c.fd, log);
    if (c == NULL) {
        redisAsyncFree(ac);
        return NGX_DECLINED;
    }

    c->data = ac;
    c->read->handler = ngx_http_llm_store_read_handler;
    c->write->handler = ngx_http_llm_store_write_handler;
    c->read->log = log;
    c->write->log = log;

    ngx_http_llm_store_ac = ac;
    ngx_http_llm_store_c = c;

    ac->ev.data = c;
    ac->ev.addRead = ngx_http_llm_store_add_read;
    ac->ev.delRead = ngx_http_llm_store_del_read;
    ac->ev.addWrite = ngx_http_llm_store_add_write;
    ac->ev.delWrite = ngx_http_llm_store_del_write;
    ac->ev.cleanup = ngx_http_llm_store_cleanup;

    redisAsyncSetConnectCallback(ac, ngx_http_llm_store_connected);
    redisAsyncSetDisconnectCallback(ac, ngx_http_llm_store_disconnected);

    /* the connection's first commands */

    if (sc->password.len) {
        (void) redisAsyncCommand(ac, NULL, NULL, "AUTH %b",
                                 sc->password.data, sc->password.len);
    }

    if (sc->db) {
        (void) redisAsyncCommand(ac, NULL, NULL, "SELECT %d", (int) sc->db);
    }

    /* hiredis waits for the connect's writability */

    ngx_http_llm_store_add_write(c);

    return NGX_OK;
}


/* Level-triggered: hiredis reads once per call. */

static void
ngx_http_llm_store_add_read(void *data)
{
    ngx_connection_t *c = data;

    if (!c->read->active) {
        (void) ngx_add_event(c->read, NGX_READ_EVENT, NGX_LEVEL_EVENT);
    }
}


static void
ngx_http_llm_store_del_read(void *data)
{
    ngx_connection_t *c = data;

    if (c->read->active) {
        (void) ngx_del_event(c->read, NGX_READ_EVENT, 0);
    }
}


static void
ngx_http_llm_store_add_write(void *data)
{
    ngx_connection_t *c = data;

    if (!c->write->active) {
        (void) ngx_add_event(c->write, NGX_WRITE_EVENT, NGX_LEVEL_EVENT);
    }
}


static void
ngx_http_llm_store_del_write(void *data)
{
    ngx_connection_t *c = data;

    if (c->write->active) {
        (void) ngx_del_event(c->write, NGX_WRITE_EVENT, 0);
    }
}


/* hiredis frees its context (and closes the socket): ours goes too. */

static void
ngx_http_llm_store_cleanup(void *data)
{
    ngx_connection_t *c = data;

    if (c->read->active) {
        (void) ngx_del_event(c->read, NGX_READ_EVENT, NGX_CLOSE_EVENT);
    }

    if (c->write->active) {
        (void) ngx_del_event(c->write, NGX_WRITE_EVENT, NGX_CLOSE_EVENT);
    }

    if (c->read->posted) {
        ngx_delete_posted_event(c->read);
    }

    if (c->write->posted) {
        ngx_delete_posted_event(c->write);
    }

    c->fd = (ngx_socket_t) -1;
    ngx_free_connection(c);

    if (ngx_http_llm_store_c == c) {
        ngx_http_llm_store_c = NULL;
        ngx_http_llm_store_ac = NULL;
        ngx_http_llm_store_up = 0;
    }
}


static void
ngx_http_llm_store_read_handler(ngx_event_t *ev)
{
    ngx_connection_t *c = ev->data;

    redisAsyncHandleRead(c->data);
}


static void
ngx_http_llm_store_write_handler(ngx_event_t *ev)
{
    ngx_connection_t *c = ev->data;

    redisAsyncHandleWrite(c->data);
}


static void
ngx_http_llm_store_connected(const redisAsyncContext *ac, int status)
{
    ngx_log_t  *log;

    log = ngx_cycle->log;

    if (status != REDIS_OK) {
        /* hiredis frees the context after this */
        ngx_http_llm_store_transition(0, log, ac->errstr);
        return;
    }

    ngx_http_llm_store_up = 1;
    ngx_http_llm_store_transition(1, log, NULL);
    ngx_http_llm_store_flush();
}


static void
ngx_http_llm_store_disconnected(const redisAsyncContext *ac, int status)
{
    ngx_http_llm_store_transition(0, ngx_cycle->log,
                                  status == REDIS_OK ? "closed"
                                                     : ac->errstr);
}


/* Logs a change of the store's state, once per change per worker. */

static void
ngx_http_llm_store_transition(ngx_uint_t up, ngx_log_t *log, const char *why)
{
    if (up && ngx_http_llm_store_was_down) {
        ngx_http_llm_store_was_down = 0;
        ngx_log_error(NGX_LOG_WARN, log, 0,
                      "llm_limit_store %V is back",
                      &ngx_http_llm_store_conf->url);
        return;
    }

    if (!up && !ngx_http_llm_store_was_down) {
        ngx_http_llm_store_was_down = 1;
        ngx_log_error(NGX_LOG_ERR, log, 0,
                      "llm_limit_store %V is unavailable (%s): limits %s",
                      &ngx_http_llm_store_conf->url, why ? why : "",
                      ngx_http_llm_store_conf->deny
                      ? "refuse requests (on_error=deny)"
                      : "are this gateway's own (on_error=local)");
    }
}


/* ------------------------------------------------------------------ */
/* admission                                                          */
/* ------------------------------------------------------------------ */


/* Redis key names of a key's counters: by the start of its SHA-256. */

static void
ngx_http_llm_store_keys(u_char *hash, time_t minute, u_char keys[4][64])
{
    u_char  hex[33];

    ngx_hex_dump(hex, hash, 16);
    hex[32] = '\0';

    ngx_sprintf(keys[0], "llm:%s:spent%Z", hex);
    ngx_sprintf(keys[1], "llm:%s:used%Z", hex);
    ngx_sprintf(keys[2], "llm:%s:rpm:%T%Z", hex, minute);
    ngx_sprintf(keys[3], "llm:%s:tpm:%T%Z", hex, minute);
}


/*
 * After the gateway's own admission: the fleet's, for a key with limits
 * when llm_limit_store is set.  NGX_DECLINED: nothing to ask, or the
 * store is unavailable and on_error=local (go on); NGX_AGAIN:
 * ngx_http_llm_resume() runs (or ran already) with the decision.
 */

ngx_int_t
ngx_http_llm_store_admit(ngx_http_request_t *r, ngx_http_llm_ctx_t *ctx)
{
    u_char                          keys[4][64], args[5][NGX_INT64_LEN + 2];
    time_t                          minute;
    ngx_int_t                       i;
    ngx_pool_cleanup_t             *cln;
    ngx_http_llm_key_t             *key;
    ngx_http_llm_ticket_t          *t;
    ngx_http_llm_store_wait_t      *w;
    ngx_http_llm_store_conf_t      *sc;
    ngx_http_llm_keys_main_conf_t  *kmcf;

    kmcf = ngx_http_get_module_main_conf(r, ngx_http_llm_keys_module);
    key = ctx->key;
    t = &ctx->ticket;

    sc = kmcf->store;

    if (sc == NULL || key == NULL || !ctx->ticket_set
        || (key->rpm == 0 && key->tpm == 0 && key->quota == 0
            && key->budget == 0))
    {
        return NGX_DECLINED;
    }

    ngx_http_llm_store_conf = sc;

    if (ngx_http_llm_store_connect(ngx_cycle->log) != NGX_OK) {
        goto failed;
    }

    w = ngx_alloc(sizeof(ngx_http_llm_store_wait_t), ngx_cycle->log);
    if (w == NULL) {
        return NGX_DECLINED;
    }

    cln = ngx_pool_cleanup_add(r->pool, 0);
    if (cln == NULL) {
        ngx_free(w);
        return NGX_DECLINED;
    }

    ngx_memzero(w, sizeof(ngx_http_llm_store_wait_t));
    w->request = r;
    w->timer.handler = ngx_http_llm_store_timeout;
    w->timer.data = w;
    w->timer.log = ngx_cycle->log;

    cln->handler = ngx_http_llm_store_wait_cleanup;
    cln->data = w;
    w->cln = cln;

    minute = ngx_time() / 60;
    t->fleet_minute = minute;

    ngx_http_llm_store_keys(key->hash, minute, keys);

    ngx_sprintf(args[0], "%uL%Z", key->budget);
    ngx_sprintf(args[1], "%uL%Z", key->quota);
    ngx_sprintf(args[2], "%ui%Z", key->rpm);
    ngx_sprintf(args[3], "%ui%Z", key->tpm);
    ngx_sprintf(args[4], "%ui%Z", t->reserved);

    i = redisAsyncCommand(ngx_http_llm_store_ac,
                          ngx_http_llm_store_admit_reply, w,
                          "EVAL %s 4 %s %s %s %s %s %s %s %s %s",
                          ngx_http_llm_store_admit_lua,
                          keys[0], keys[1], keys[2], keys[3],
                          args[0], args[1], args[2], args[3], args[4]);

    if (i != REDIS_OK) {
        cln->handler = NULL;
        ngx_free(w);
        goto failed;
    }

    ngx_add_timer(&w->timer, sc->timeout);

    return NGX_AGAIN;

failed:

    if (!sc->deny) {
        /* admitted here alone: its usage still goes to Redis, later */
        t->fleet = 1;
        t->fleet_minute = ngx_time() / 60;
        return NGX_DECLINED;
    }

    ngx_http_llm_store_finish(r, -1);

    return NGX_AGAIN;
}


static void
ngx_http_llm_store_admit_reply(redisAsyncContext *ac, void *reply,
    void *data)
{
    ngx_http_llm_store_wait_t *w = data;

    ngx_int_t            verdict;
    redisReply          *rep;
    ngx_http_request_t  *r;

    (void) ac;

    rep = reply;
    r = w->request;

    if (w->timer.timer_set) {
        ngx_del_timer(&w->timer);
    }

    if (r) {
        /* the request's cleanup must not find w any more */
        w->cln->handler = NULL;
    }

    if (r == NULL || w->answered) {
        ngx_free(w);
        return;
    }

    w->answered = 1;

    if (rep == NULL || rep->type != REDIS_REPLY_ARRAY || rep->elements < 1
        || rep->element[0]->type != REDIS_REPLY_INTEGER)
    {
        if (rep && rep->type == REDIS_REPLY_ERROR) {
            ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                          "llm_limit_store: %s", rep->str);
        }

        verdict = -1;

    } else {
        verdict = (ngx_int_t) rep->element[0]->integer;
    }

    ngx_free(w);

    ngx_http_llm_store_finish(r, verdict);
}


/* No answer in time: the request goes on by on_error; w waits for the
 * reply (hiredis calls back once, with NULL when the connection goes). */

static void
ngx_http_llm_store_timeout(ngx_event_t *ev)
{
    ngx_http_llm_store_wait_t *w = ev->data;

    ngx_http_request_t  *r;

    r = w->request;

    if (r == NULL || w->answered) {
        return;
    }

    w->answered = 1;

    ngx_log_error(NGX_LOG_WARN, r->connection->log, 0,
                  "llm_limit_store %V did not answer in time",
                  &ngx_http_llm_store_conf->url);

    ngx_http_llm_store_finish(r, -1);
}


/* The request ends before the reply: the reply finds no request. */

static void
ngx_http_llm_store_wait_cleanup(void *data)
{
    ngx_http_llm_store_wait_t *w = data;

    if (w->timer.timer_set) {
        ngx_del_timer(&w->timer);
    }

    w->request = NULL;
}


/*
 * The fleet's answer (-1: none): admitted, refused (the gateway's own
 * reservation is released), or the store's failure by on_error.
 */

static void
ngx_http_llm_store_finish(ngx_http_request_t *r, ngx_int_t verdict)
{
    ngx_connection_t         *c;
    ngx_http_llm_ctx_t       *ctx;
    ngx_http_llm_decision_t   d;

    c = r->connection;
    ctx = ngx_http_get_module_ctx(r, ngx_http_llm_module);

    ngx_memzero(&d, sizeof(ngx_http_llm_decision_t));
    d.key = ctx->key;

    switch (verdict) {

    case 0:
        ctx->ticket.fleet = 1;
        ctx->ticket.fleet_reserved = 1;
        d.verdict = NGX_HTTP_LLM_ALLOW;
        break;

    case -1:
        /* admitted here alone: its usage still goes to Redis, later */
        ctx->ticket.fleet = 1;
        ngx_http_llm_store_transition(0, c->log, "no answer");
        d.verdict = ngx_http_llm_store_conf->deny ? NGX_HTTP_LLM_DENY_STORE
                                                  : NGX_HTTP_LLM_ALLOW;
        break;

    case 1:
        d.verdict = NGX_HTTP_LLM_DENY_BUDGET;
        break;

    case 2:
        d.verdict = NGX_HTTP_LLM_DENY_QUOTA;
        break;

    case 3:
        d.verdict = NGX_HTTP_LLM_DENY_REQUESTS;
        d.used = ctx->key->rpm;
        d.requested = 1;
        d.wait = (60 - ngx_time() % 60) * 1000;
        break;

    default:
        d.verdict = NGX_HTTP_LLM_DENY_TOKENS;
        d.used = ctx->key->tpm;
        d.requested = ctx->ticket.reserved;
        d.wait = (60 - ngx_time() % 60) * 1000;
        break;
    }

    ngx_http_llm_resume(r, ctx, &d);
    ngx_http_run_posted_requests(c);
}


/* ------------------------------------------------------------------ */
/* settlement                                                         */
/* ------------------------------------------------------------------ */


/*
 * A request of a fleet-admitted ticket ended: its usage replaces its
 * reservation in Redis (quota, tokens of its minute), its cost is spent.
 * Kept in the worker and sent later when Redis is not there.
 */

void
ngx_http_llm_store_settle(ngx_http_request_t *r, ngx_http_llm_ticket_t *t,
    ngx_uint_t used_tokens, uint64_t cost)
{
    int64_t                       reserved;
    ngx_http_llm_store_settle_t  *s;

    if (!t->fleet || t->key == NULL) {
        return;
    }

    s = ngx_alloc(sizeof(ngx_http_llm_store_settle_t), r->connection->log);
    if (s == NULL) {
        return;
    }

    ngx_memcpy(s->id, t->key->hash, 32);
    s->cost = (int64_t) cost;
    reserved = t->fleet_reserved ? (int64_t) t->reserved : 0;
    s->tokens = t->key->quota ? (int64_t) used_tokens - reserved : 0;
    s->tpm = t->key->tpm ? (int64_t) used_tokens - reserved : 0;
    s->minute = t->fleet_minute;

    if (ngx_http_llm_store_pending.next == NULL) {
        ngx_queue_init(&ngx_http_llm_store_pending);
    }

    if (s->cost == 0 && s->tokens == 0 && s->tpm == 0) {
        ngx_free(s);
        return;
    }

    if (ngx_http_llm_store_up
        && ngx_http_llm_store_send_settle(s) == NGX_OK)
    {
        return;
    }

    if (ngx_http_llm_store_npending >= NGX_HTTP_LLM_STORE_PENDING_MAX) {
        ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                      "llm_limit_store: %ui settlements wait for Redis, "
                      "dropping one of key \"%V\" (%L tokens)",
                      ngx_http_llm_store_npending, &t->key->name,
                      s->tokens);
        ngx_free(s);
        return;
    }

    ngx_queue_insert_tail(&ngx_http_llm_store_pending, &s->queue);
    ngx_http_llm_store_npending++;

    if (ngx_http_llm_store_conf) {
        (void) ngx_http_llm_store_connect(r->connection->log);
    }
}


static ngx_int_t
ngx_http_llm_store_send_settle(ngx_http_llm_store_settle_t *s)
{
    u_char  keys[4][64];

    ngx_http_llm_store_keys(s->id, s->minute, keys);

    if (redisAsyncCommand(ngx_http_llm_store_ac,
                          ngx_http_llm_store_settle_reply, NULL,
                          "EVAL %s 4 %s %s %s %s %lld %lld %lld",
                          ngx_http_llm_store_settle_lua,
                          keys[0], keys[1], keys[2], keys[3],
                          (long long) s->cost, (long long) s->tokens,
                          (long long) s->tpm)
        != REDIS_OK)
    {
        return NGX_ERROR;
    }

    ngx_free(s);

    return NGX_OK;
}


static void
ngx_http_llm_store_settle_reply(redisAsyncContext *ac, void *reply,
    void *data)
{
    redisReply  *rep;

    (void) ac;
    (void) data;

    rep = reply;

    if (rep && rep->type == REDIS_REPLY_ERROR) {
        ngx_log_error(NGX_LOG_ERR, ngx_cycle->log, 0,
                      "llm_limit_store: a settlement failed: %s", rep->str);
    }
}


/* Sends the settlements that waited for the connection. */

static void
ngx_http_llm_store_flush(void)
{
    ngx_queue_t                  *q;
    ngx_http_llm_store_settle_t  *s;

    if (ngx_http_llm_store_pending.next == NULL) {
        return;
    }

    while (!ngx_queue_empty(&ngx_http_llm_store_pending)) {
        q = ngx_queue_head(&ngx_http_llm_store_pending);
        s = ngx_queue_data(q, ngx_http_llm_store_settle_t, queue);

        ngx_queue_remove(q);
        ngx_http_llm_store_npending--;

        if (ngx_http_llm_store_send_settle(s) != NGX_OK) {
            ngx_queue_insert_head(&ngx_http_llm_store_pending, q);
            ngx_http_llm_store_npending++;
            return;
        }
    }
}


/* The worker exits: the Redis connection closes (settlements still
 * waiting are lost with the worker, and logged). */

void
ngx_http_llm_store_exit(ngx_cycle_t *cycle)
{
    if (ngx_http_llm_store_npending) {
        ngx_log_error(NGX_LOG_ERR, cycle->log, 0,
                      "llm_limit_store: %ui settlements never reached "
                      "Redis", ngx_http_llm_store_npending);
    }

    if (ngx_http_llm_store_ac) {
        redisAsyncFree(ngx_http_llm_store_ac);
    }
}
