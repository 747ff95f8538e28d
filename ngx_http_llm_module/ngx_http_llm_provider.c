
/*
 * ngx_http_llm_module: remote OpenAI-compatible APIs as backends
 * (llm_provider, llm_model ... provider=).
 *
 * A provider's model runs on the same ngx_http_upstream_t as an engine's,
 * so the fallback chain, timeouts, keepalive (upstream{} with keepalive)
 * and the balancer are nginx's and shared; nginx's upstream does the TLS
 * (u->ssl with an ngx_ssl_t of the provider, SNI and verification by
 * ngx_ssl_check_host).  This file only speaks HTTP/1.1 over it, with
 * nginx's own parsers (ngx_http_parse_status_line, _header_line,
 * _chunked): the request is the client's request as JSON (a dialect's
 * translation for /v1/responses and /v1/messages) with the provider's
 * model name, its key instead of the client's, and stream usage forced
 * on; the answer (server-sent events or one JSON body, or an error) is
 * turned into the engine's events (Delta, ToolCallDelta, Done, Error,
 * Embedding, EmbedDone), which the rest of the module renders, bills and
 * meters as for an engine.  So the client's key never goes upstream, the
 * extra usage chunk never reaches a client that did not ask for it, and
 * the answer says the gateway's model name.
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "ngx_http_llm_module.h"


#define NGX_HTTP_LLM_PROV_ERROR_MAX   65536     /* of an error body kept */
#define NGX_HTTP_LLM_PROV_BUFFER      16384     /* response headers */
#define NGX_HTTP_LLM_PROV_CA          "/etc/ssl/certs/ca-certificates.crt"


enum {
    NGX_HTTP_LLM_PROV_STATUS = 0,
    NGX_HTTP_LLM_PROV_HEADERS,
    NGX_HTTP_LLM_PROV_BODY
};


/* The state of one answer of a provider. */

typedef struct {
    ngx_uint_t                 phase;
    ngx_http_status_t          status;
    ngx_http_chunked_t         chunked;
    off_t                      length;     /* body bytes left; -1: to EOF */
    ngx_http_llm_sbuf_t        line;       /* SSE: the line so far */
    ngx_http_llm_sbuf_t        data;       /* SSE: the event's data */
    ngx_http_llm_sbuf_t        body;       /* JSON or error: the body */
    Llm__FinishReason         *finish;     /* per choice */
    Llm__Usage                 usage;
    ngx_chain_t              **ll;         /* where stream output goes */
    unsigned                   chunked_body:1;
    unsigned                   sse:1;
    unsigned                   eof:1;      /* the body is whole */
    unsigned                   ended:1;    /* Done or Error emitted */
    unsigned                   has_usage:1;
    unsigned                   data_seen:1;
} ngx_http_llm_pstate_t;


static ngx_int_t ngx_http_llm_prov_url(ngx_conf_t *cf,
    ngx_http_llm_provider_t *p, ngx_str_t *url, ngx_str_t *authority,
    in_port_t *port);
static ngx_int_t ngx_http_llm_prov_key(ngx_conf_t *cf,
    ngx_http_llm_provider_t *p, ngx_str_t *file);
#if (NGX_HTTP_SSL)
static ngx_int_t ngx_http_llm_prov_ssl(ngx_conf_t *cf,
    ngx_http_llm_provider_t *p, ngx_str_t *trusted);
#endif
static ngx_int_t ngx_http_llm_prov_create_request(ngx_http_request_t *r);
static ngx_int_t ngx_http_llm_prov_reinit_request(ngx_http_request_t *r);
static ngx_int_t ngx_http_llm_prov_reset(ngx_http_request_t *r,
    ngx_http_llm_ctx_t *ctx);
static ngx_int_t ngx_http_llm_prov_process_header(ngx_http_request_t *r);
static ngx_int_t ngx_http_llm_prov_input_filter(void *data, ssize_t bytes);
static ngx_int_t ngx_http_llm_prov_headers(ngx_http_request_t *r,
    ngx_http_llm_pstate_t *ps, ngx_buf_t *b);
static ngx_int_t ngx_http_llm_prov_body(ngx_http_request_t *r,
    ngx_http_llm_ctx_t *ctx, ngx_http_llm_pstate_t *ps, ngx_buf_t *b);
static ngx_int_t ngx_http_llm_prov_feed(ngx_http_request_t *r,
    ngx_http_llm_ctx_t *ctx, ngx_http_llm_pstate_t *ps, u_char *p,
    size_t len);
static ngx_int_t ngx_http_llm_prov_sse_line(ngx_http_request_t *r,
    ngx_http_llm_ctx_t *ctx, ngx_http_llm_pstate_t *ps);
static ngx_int_t ngx_http_llm_prov_end(ngx_http_request_t *r,
    ngx_http_llm_ctx_t *ctx, ngx_http_llm_pstate_t *ps);
static ngx_int_t ngx_http_llm_prov_payload(ngx_http_request_t *r,
    ngx_http_llm_ctx_t *ctx, ngx_http_llm_pstate_t *ps, u_char *data,
    size_t len);
static ngx_int_t ngx_http_llm_prov_choices(ngx_http_request_t *r,
    ngx_http_llm_ctx_t *ctx, ngx_http_llm_pstate_t *ps, json_t *root);
static ngx_int_t ngx_http_llm_prov_choice(ngx_http_request_t *r,
    ngx_http_llm_ctx_t *ctx, ngx_http_llm_pstate_t *ps, json_t *c,
    ngx_uint_t index);
static ngx_int_t ngx_http_llm_prov_logprobs(ngx_pool_t *pool, json_t *lp,
    Llm__Delta *delta);
static ngx_int_t ngx_http_llm_prov_calls(ngx_http_request_t *r,
    ngx_http_llm_ctx_t *ctx, json_t *calls, ngx_uint_t index);
static ngx_int_t ngx_http_llm_prov_embeddings(ngx_http_request_t *r,
    ngx_http_llm_ctx_t *ctx, ngx_http_llm_pstate_t *ps, json_t *root);
static ngx_int_t ngx_http_llm_prov_done(ngx_http_request_t *r,
    ngx_http_llm_ctx_t *ctx, ngx_http_llm_pstate_t *ps);
static ngx_int_t ngx_http_llm_prov_error(ngx_http_request_t *r,
    ngx_http_llm_ctx_t *ctx, ngx_http_llm_pstate_t *ps, json_t *root);
static ngx_int_t ngx_http_llm_prov_emit(ngx_http_request_t *r,
    ngx_http_llm_ctx_t *ctx, Llm__Event *ev);
static char *ngx_http_llm_prov_strdup(ngx_pool_t *pool, json_t *s);
static ngx_int_t ngx_http_llm_prov_invalid(ngx_http_request_t *r,
    ngx_http_llm_ctx_t *ctx, const char *what);
static void ngx_http_llm_json_cleanup(void *data);


/* ------------------------------------------------------------------ */
/* configuration                                                      */
/* ------------------------------------------------------------------ */


/*
 * llm_provider NAME url=http[s]://HOST[:PORT][/PREFIX] [key_file=FILE]
 *     [upstream=U] [timeout=T] [connect_timeout=T] [ssl_verify=on|off]
 *     [ssl_trusted_certificate=FILE] [ssl_name=NAME]
 */

char *
ngx_http_llm_provider(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_llm_main_conf_t *mcf = conf;

    ngx_str_t                *value, url, authority, key, trusted, ups, s;
    ngx_url_t                 u;
    in_port_t                 port;
    ngx_int_t                 t;
    ngx_uint_t                i;
    ngx_http_llm_provider_t  *p, *all;

    value = cf->args->elts;

    all = mcf->providers.elts;
    for (i = 0; i < mcf->providers.nelts; i++) {
        if (all[i].name.len == value[1].len
            && ngx_strncmp(all[i].name.data, value[1].data, value[1].len)
               == 0)
        {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "duplicate llm_provider \"%V\"", &value[1]);
            return NGX_CONF_ERROR;
        }
    }

    p = ngx_array_push(&mcf->providers);
    if (p == NULL) {
        return NGX_CONF_ERROR;
    }

    ngx_memzero(p, sizeof(ngx_http_llm_provider_t));
    p->name = value[1];
#if (NGX_HTTP_SSL)
    p->ssl_verify = 1;
#endif

    ngx_str_null(&url);
    ngx_str_null(&key);
    ngx_str_null(&trusted);
    ngx_str_null(&ups);

    for (i = 2; i < cf->args->nelts; i++) {
        s = value[i];

        if (ngx_strncmp(s.data, "url=", 4) == 0) {
            url.data = s.data + 4;
            url.len = s.len - 4;
            continue;
        }

        if (ngx_strncmp(s.data, "key_file=", 9) == 0 && s.len > 9) {
            key.data = s.data + 9;
            key.len = s.len - 9;
            continue;
        }

        if (ngx_strncmp(s.data, "upstream=", 9) == 0 && s.len > 9) {
            ups.data = s.data + 9;
            ups.len = s.len - 9;
            continue;
        }

        if (ngx_strncmp(s.data, "timeout=", 8) == 0
            || ngx_strncmp(s.data, "connect_timeout=", 16) == 0)
        {
            s.data = (u_char *) ngx_strchr(value[i].data, '=') + 1;
            s.len = value[i].len - (s.data - value[i].data);

            t = ngx_parse_time(&s, 0);
            if (t == NGX_ERROR || t == 0) {
                goto invalid;
            }

            if (value[i].data[0] == 't') {
                p->timeout = (ngx_msec_t) t;

            } else {
                p->connect_timeout = (ngx_msec_t) t;
            }

            continue;
        }

#if (NGX_HTTP_SSL)
        if (ngx_strcmp(s.data, "ssl_verify=on") == 0) {
            p->ssl_verify = 1;
            continue;
        }

        if (ngx_strcmp(s.data, "ssl_verify=off") == 0) {
            p->ssl_verify = 0;
            continue;
        }

        if (ngx_strncmp(s.data, "ssl_trusted_certificate=", 24) == 0
            && s.len > 24)
        {
            trusted.data = s.data + 24;
            trusted.len = s.len - 24;
            continue;
        }

        if (ngx_strncmp(s.data, "ssl_name=", 9) == 0 && s.len > 9) {
            p->ssl_name.data = s.data + 9;
            p->ssl_name.len = s.len - 9;
            continue;
        }
#endif

        goto invalid;
    }

    if (url.len == 0) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "llm_provider \"%V\" needs url=", &p->name);
        return NGX_CONF_ERROR;
    }

    if (ngx_http_llm_prov_url(cf, p, &url, &authority, &port) != NGX_OK) {
        return NGX_CONF_ERROR;
    }

    if (key.len && ngx_http_llm_prov_key(cf, p, &key) != NGX_OK) {
        return NGX_CONF_ERROR;
    }

#if (NGX_HTTP_SSL)
    if (p->ssl_name.len == 0) {
        /* the URL's host, without the port */
        p->ssl_name = authority;

        if (p->ssl_name.data[0] == '[') {
            p->ssl_name.len = (u_char *) ngx_strlchr(authority.data,
                                  authority.data + authority.len, ']')
                              - authority.data + 1;

        } else if (ngx_strlchr(authority.data, authority.data + authority.len,
                               ':'))
        {
            p->ssl_name.len = (u_char *) ngx_strlchr(authority.data,
                                  authority.data + authority.len, ':')
                              - authority.data;
        }
    }

    p->ssl_name_cv.value = p->ssl_name;

    if (p->ssl && ngx_http_llm_prov_ssl(cf, p, &trusted) != NGX_OK) {
        return NGX_CONF_ERROR;
    }
#endif

    /* an upstream{} named by upstream=, else the URL's host as proxy_pass */

    ngx_memzero(&u, sizeof(ngx_url_t));

    u.url = ups.len ? ups : authority;
    u.default_port = port;
    u.no_resolve = 1;

    p->upstream = ngx_http_upstream_add(cf, &u, 0);
    if (p->upstream == NULL) {
        return NGX_CONF_ERROR;
    }

    (void) cmd;

    return NGX_CONF_OK;

invalid:

    ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                       "invalid parameter \"%V\" of llm_provider",
                       &value[i]);
    return NGX_CONF_ERROR;
}


/* Splits url= into the scheme (p->ssl), authority, path prefix, port. */

static ngx_int_t
ngx_http_llm_prov_url(ngx_conf_t *cf, ngx_http_llm_provider_t *p,
    ngx_str_t *url, ngx_str_t *authority, in_port_t *port)
{
    u_char  *s, *last, *slash;

    p->url = *url;
    last = url->data + url->len;

    if (url->len > 7 && ngx_strncasecmp(url->data, (u_char *) "http://", 7)
                        == 0)
    {
        s = url->data + 7;
        *port = 80;

    } else if (url->len > 8
               && ngx_strncasecmp(url->data, (u_char *) "https://", 8) == 0)
    {
#if (NGX_HTTP_SSL)
        s = url->data + 8;
        *port = 443;

        p->ssl = ngx_pcalloc(cf->pool, sizeof(ngx_ssl_t));
        if (p->ssl == NULL) {
            return NGX_ERROR;
        }
#else
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "llm_provider \"%V\": https needs nginx built "
                           "with the SSL module", &p->name);
        return NGX_ERROR;
#endif

    } else {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "llm_provider \"%V\": url \"%V\" must start with "
                           "http:// or https://", &p->name, url);
        return NGX_ERROR;
    }

    slash = ngx_strlchr(s, last, '/');

    authority->data = s;
    authority->len = (slash ? slash : last) - s;

    if (authority->len == 0) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "llm_provider \"%V\": url \"%V\" has no host",
                           &p->name, url);
        return NGX_ERROR;
    }

    p->host = *authority;

    p->prefix.data = slash ? slash : last;
    p->prefix.len = last - p->prefix.data;

    while (p->prefix.len && p->prefix.data[p->prefix.len - 1] == '/') {
        p->prefix.len--;
    }

    return NGX_OK;
}


/* The provider's API key from key_file=, as "Bearer KEY". */

static ngx_int_t
ngx_http_llm_prov_key(ngx_conf_t *cf, ngx_http_llm_provider_t *p,
    ngx_str_t *name)
{
    ngx_str_t  key;

    if (ngx_http_llm_conf_secret(cf, name, "llm_provider key_file", 4096,
                                 &key)
        != NGX_OK)
    {
        return NGX_ERROR;
    }

    p->auth.len = sizeof("Bearer ") - 1 + key.len;
    p->auth.data = ngx_pnalloc(cf->pool, p->auth.len);
    if (p->auth.data == NULL) {
        return NGX_ERROR;
    }

    ngx_memcpy(ngx_cpymem(p->auth.data, "Bearer ", 7), key.data, key.len);

    return NGX_OK;
}


#if (NGX_HTTP_SSL)

/*
 * The TLS client context, as proxy_ssl_* makes one: TLS 1.2 and 1.3,
 * session reuse, and the server certificate verified against
 * ssl_trusted_certificate= (the system's CA bundle by default: a gateway
 * sends its provider key there, so verification is on unless turned off).
 */

static ngx_int_t
ngx_http_llm_prov_ssl(ngx_conf_t *cf, ngx_http_llm_provider_t *p,
    ngx_str_t *trusted)
{
    ngx_str_t            ciphers;
    ngx_pool_cleanup_t  *cln;

    p->ssl->log = cf->log;

    if (ngx_ssl_create(p->ssl, NGX_SSL_TLSv1_2|NGX_SSL_TLSv1_3, NULL)
        != NGX_OK)
    {
        return NGX_ERROR;
    }

    cln = ngx_pool_cleanup_add(cf->pool, 0);
    if (cln == NULL) {
        ngx_ssl_cleanup_ctx(p->ssl);
        return NGX_ERROR;
    }

    cln->handler = ngx_ssl_cleanup_ctx;
    cln->data = p->ssl;

    ngx_str_set(&ciphers, "DEFAULT");

    if (ngx_ssl_ciphers(cf, p->ssl, &ciphers, 0) != NGX_OK) {
        return NGX_ERROR;
    }

    if (p->ssl_verify) {
        if (trusted->len == 0) {
            ngx_str_set(trusted, NGX_HTTP_LLM_PROV_CA);
        }

        if (ngx_ssl_trusted_certificate(cf, p->ssl, trusted, 4) != NGX_OK) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "llm_provider \"%V\": cannot load the "
                               "trusted certificates \"%V\" "
                               "(ssl_trusted_certificate=, or "
                               "ssl_verify=off)", &p->name, trusted);
            return NGX_ERROR;
        }
    }

    if (ngx_ssl_client_session_cache(cf, p->ssl, 1) != NGX_OK) {
        return NGX_ERROR;
    }

    return NGX_OK;
}

#endif


/*
 * Once every directive is read: the provider of each llm_model
 * provider=, its upstream the model's.
 */

ngx_int_t
ngx_http_llm_providers_resolve(ngx_conf_t *cf, ngx_http_llm_main_conf_t *mcf)
{
    ngx_uint_t                i, j;
    ngx_http_llm_model_t     *m;
    ngx_http_llm_provider_t  *p;

    m = mcf->models.elts;
    p = mcf->providers.elts;

    for (i = 0; i < mcf->models.nelts; i++) {
        if (m[i].provider_name.len == 0) {
            continue;
        }

        for (j = 0; j < mcf->providers.nelts; j++) {
            if (p[j].name.len == m[i].provider_name.len
                && ngx_strncmp(p[j].name.data, m[i].provider_name.data,
                               p[j].name.len) == 0)
            {
                break;
            }
        }

        if (j == mcf->providers.nelts) {
            ngx_log_error(NGX_LOG_EMERG, cf->log, 0,
                          "llm_model \"%V\": provider \"%V\" is not "
                          "defined by any llm_provider",
                          &m[i].name, &m[i].provider_name);
            return NGX_ERROR;
        }

        m[i].provider = &p[j];
        m[i].upstream = p[j].upstream;
        m[i].upstream_name = p[j].name;

        if (m[i].remote_model.len == 0) {
            m[i].remote_model = m[i].name;
        }
    }

    return NGX_OK;
}


/*
 * Keeps the request's JSON (the client's, or a dialect's chat request)
 * for a provider, released with the request.
 */

ngx_int_t
ngx_http_llm_keep_json(ngx_http_request_t *r, ngx_http_llm_ctx_t *ctx,
    json_t *root)
{
    ngx_pool_cleanup_t  *cln;

    if (ctx->json) {
        return NGX_OK;
    }

    cln = ngx_pool_cleanup_add(r->pool, 0);
    if (cln == NULL) {
        return NGX_ERROR;
    }

    cln->handler = ngx_http_llm_json_cleanup;
    cln->data = json_incref(root);
    ctx->json = root;

    return NGX_OK;
}


static void
ngx_http_llm_json_cleanup(void *data)
{
    json_decref(data);
}


/* ------------------------------------------------------------------ */
/* the request                                                        */
/* ------------------------------------------------------------------ */


/*
 * Points the upstream (already created, u->conf this request's copy) at
 * model m of provider m->provider: HTTP handlers, TLS, timeouts.
 */

void
ngx_http_llm_provider_setup(ngx_http_request_t *r, ngx_http_llm_ctx_t *ctx,
    ngx_http_llm_model_t *m)
{
    ngx_http_upstream_t      *u;
    ngx_http_llm_provider_t  *p;

    u = r->upstream;
    p = m->provider;

    ctx->provider = 1;

#if (NGX_HTTP_SSL)
    u->ssl = (p->ssl != NULL);

    if (p->ssl) {
        ngx_str_set(&u->schema, "https://");
        u->conf->ssl = p->ssl;
        u->conf->ssl_verify = p->ssl_verify;
        u->conf->ssl_server_name = 1;
        u->conf->ssl_session_reuse = 1;
        u->conf->ssl_name = &p->ssl_name_cv;

    } else {
        ngx_str_set(&u->schema, "http://");
    }
#else
    ngx_str_set(&u->schema, "http://");
#endif

    if (p->timeout) {
        ctx->read_timeout = p->timeout;
        u->conf->read_timeout = p->timeout;
    }

    if (p->connect_timeout) {
        u->conf->connect_timeout = p->connect_timeout;
    }

    if (u->conf->buffer_size < NGX_HTTP_LLM_PROV_BUFFER) {
        u->conf->buffer_size = NGX_HTTP_LLM_PROV_BUFFER;
    }

    u->create_request = ngx_http_llm_prov_create_request;
    u->reinit_request = ngx_http_llm_prov_reinit_request;
    u->process_header = ngx_http_llm_prov_process_header;
    u->input_filter = ngx_http_llm_prov_input_filter;

    (void) ngx_http_llm_prov_reset(r, ctx);
}


/*
 * The request body: ctx->json with the provider's model name; a stream
 * asks for usage (stream_options.include_usage, the client's other
 * stream options kept); the key's remaining tokens cap max_tokens (or
 * max_completion_tokens when the client used that); embeddings come as
 * floats (re-encoded as the client asked).
 */

ngx_int_t
ngx_http_llm_provider_encode(ngx_http_request_t *r, ngx_http_llm_ctx_t *ctx,
    ngx_chain_t **out)
{
    char                  *js;
    u_char                *p;
    size_t                 len, jlen;
    json_t                *j, *so;
    ngx_str_t              path;
    ngx_chain_t           *cl;
    ngx_http_llm_model_t  *m;
    ngx_http_llm_provider_t  *pv;

    m = ctx->model;
    pv = m->provider;

    if (ctx->json == NULL) {
        ngx_log_error(NGX_LOG_ALERT, r->connection->log, 0,
                      "llm: no JSON request for provider \"%V\"", &pv->name);
        return NGX_ERROR;
    }

    j = json_deep_copy(ctx->json);
    if (j == NULL) {
        return NGX_ERROR;
    }

    json_object_set_new(j, "model", json_stringn((char *) m->remote_model.data,
                                                 m->remote_model.len));

    if (ctx->dialect) {
        /* this engine's extensions a dialect adds: not OpenAI's API */
        json_object_del(j, "chat_template_kwargs");
        json_object_del(j, "top_k");
    }

    switch (ctx->route) {

    case NGX_HTTP_LLM_ROUTE_EMBEDDINGS:
        ngx_str_set(&path, "/embeddings");
        json_object_set_new(j, "encoding_format", json_string("float"));
        break;

    case NGX_HTTP_LLM_ROUTE_COMPLETION:
        ngx_str_set(&path, "/completions");
        break;

    default:
        ngx_str_set(&path, "/chat/completions");
    }

    if (ctx->stream) {
        so = json_object_get(j, "stream_options");

        if (!json_is_object(so)) {
            so = json_object();
            json_object_set_new(j, "stream_options", so);
        }

        json_object_set_new(so, "include_usage", json_true());
    }

    if (ctx->ticket_set && ctx->ticket.out_cap && ctx->max_tokens) {
        json_object_set_new(j, json_object_get(j, "max_completion_tokens")
                               ? "max_completion_tokens" : "max_tokens",
                            json_integer(ctx->max_tokens));
    }

    js = json_dumps(j, JSON_COMPACT);
    json_decref(j);

    if (js == NULL) {
        return NGX_ERROR;
    }

    jlen = ngx_strlen(js);

    len = sizeof("POST ") - 1 + pv->prefix.len + path.len
          + sizeof(" HTTP/1.1\r\nHost: ") - 1 + pv->host.len
          + sizeof("\r\nAuthorization: ") - 1 + pv->auth.len
          + sizeof("\r\nContent-Type: application/json"
                   "\r\nAccept: text/event-stream"
                   "\r\nX-Request-Id: ") - 1 + ctx->id_len
          + sizeof("\r\nContent-Length: ") - 1 + NGX_SIZE_T_LEN
          + sizeof("\r\n\r\n") - 1 + jlen;

    cl = ngx_http_llm_chain_buf(r, len);
    if (cl == NULL) {
        free(js);
        return NGX_ERROR;
    }

    p = cl->buf->last;

    p = ngx_cpymem(p, "POST ", 5);
    p = ngx_cpymem(p, pv->prefix.data, pv->prefix.len);
    p = ngx_cpymem(p, path.data, path.len);
    p = ngx_cpymem(p, " HTTP/1.1\r\nHost: ", 17);
    p = ngx_cpymem(p, pv->host.data, pv->host.len);

    if (pv->auth.len) {
        p = ngx_cpymem(p, "\r\nAuthorization: ", 17);
        p = ngx_cpymem(p, pv->auth.data, pv->auth.len);
    }

    p = ngx_cpymem(p, "\r\nContent-Type: application/json", 32);

    if (ctx->stream) {
        p = ngx_cpymem(p, "\r\nAccept: text/event-stream", 27);

    } else {
        p = ngx_cpymem(p, "\r\nAccept: application/json", 26);
    }

    p = ngx_cpymem(p, "\r\nX-Request-Id: ", 16);
    p = ngx_cpymem(p, ctx->id, ctx->id_len);
    p = ngx_sprintf(p, "\r\nContent-Length: %uz\r\n\r\n", jlen);
    p = ngx_cpymem(p, js, jlen);

    free(js);

    cl->buf->last = p;
    cl->buf->flush = 1;
    cl->buf->last_buf = 0;
    *out = cl;

    return NGX_OK;
}


static ngx_int_t
ngx_http_llm_prov_create_request(ngx_http_request_t *r)
{
    ngx_http_llm_ctx_t  *ctx;

    ctx = ngx_http_get_module_ctx(r, ngx_http_llm_module);

    return ngx_http_llm_provider_encode(r, ctx, &r->upstream->request_bufs);
}


/* Before each attempt: the module's state, then the HTTP parser's. */

static ngx_int_t
ngx_http_llm_prov_reinit_request(ngx_http_request_t *r)
{
    ngx_http_llm_ctx_t  *ctx;

    ctx = ngx_http_get_module_ctx(r, ngx_http_llm_module);

    if (ngx_http_llm_reinit_request(r) != NGX_OK) {
        return NGX_ERROR;
    }

    return ngx_http_llm_prov_reset(r, ctx);
}


/* The HTTP parser's state for a new answer. */

static ngx_int_t
ngx_http_llm_prov_reset(ngx_http_request_t *r, ngx_http_llm_ctx_t *ctx)
{
    ngx_http_llm_pstate_t  *ps;

    ps = ctx->pstate;

    if (ps == NULL) {
        ps = ngx_pcalloc(r->pool, sizeof(ngx_http_llm_pstate_t));
        if (ps == NULL) {
            return NGX_ERROR;
        }

        ctx->pstate = ps;
    }

    ps->phase = NGX_HTTP_LLM_PROV_STATUS;
    ngx_memzero(&ps->status, sizeof(ngx_http_status_t));
    ngx_memzero(&ps->chunked, sizeof(ngx_http_chunked_t));
    ps->length = -1;
    ps->line.len = 0;
    ps->data.len = 0;
    ps->body.len = 0;
    ps->finish = NULL;
    ngx_memzero(&ps->usage, sizeof(Llm__Usage));
    ps->chunked_body = 0;
    ps->sse = 0;
    ps->eof = 0;
    ps->ended = 0;
    ps->has_usage = 0;
    ps->data_seen = 0;

    r->state = 0;

    /* until the provider's usage says otherwise: the admission estimate */

    ctx->prompt_tokens = ctx->prompt_est;

    return NGX_OK;
}


/* ------------------------------------------------------------------ */
/* the answer                                                         */
/* ------------------------------------------------------------------ */


/*
 * The status line, headers and the answer up to its first byte for the
 * client (as for an engine: the response starts at the first token, at
 * the whole JSON answer, or at the error).  NGX_AGAIN: more bytes.
 */

static ngx_int_t
ngx_http_llm_prov_process_header(ngx_http_request_t *r)
{
    ngx_int_t               rc;
    ngx_buf_t              *b;
    ngx_http_upstream_t    *u;
    ngx_http_llm_ctx_t     *ctx;
    ngx_http_llm_pstate_t  *ps;

    u = r->upstream;
    b = &u->buffer;
    ctx = ngx_http_get_module_ctx(r, ngx_http_llm_module);
    ps = ctx->pstate;

    ngx_http_llm_arm_read(r, ctx);

    if (ps->phase != NGX_HTTP_LLM_PROV_BODY) {
        rc = ngx_http_llm_prov_headers(r, ps, b);

        if (rc == NGX_AGAIN) {
            if (b->last == b->end) {
                ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                              "llm: provider sent too big a header");
                return NGX_HTTP_UPSTREAM_INVALID_HEADER;
            }

            return NGX_AGAIN;
        }

        if (rc != NGX_OK) {
            return rc;
        }
    }

    ps->ll = &u->out_bufs;

    rc = ngx_http_llm_prov_body(r, ctx, ps, b);

    if (rc != NGX_OK) {
        return rc;
    }

    if (ctx->header_done) {
        if (ps->eof) {
            u->keepalive = !u->headers_in.connection_close;
        }

        return NGX_OK;
    }

    if (ps->eof) {
        /* a whole answer without a token, a Done or an error */
        return ngx_http_llm_prov_invalid(r, ctx, "an answer without end");
    }

    /* every byte is consumed or copied: the buffer can be reused */

    b->pos = b->start;
    b->last = b->start;

    return NGX_AGAIN;
}


/*
 * The status line and headers: what the body is (chunked, length,
 * server-sent events) and whether the connection stays.
 */

static ngx_int_t
ngx_http_llm_prov_headers(ngx_http_request_t *r, ngx_http_llm_pstate_t *ps,
    ngx_buf_t *b)
{
    size_t                len;
    u_char               *name, *value;
    ngx_int_t             rc;
    ngx_http_upstream_t  *u;

    u = r->upstream;

    for ( ;; ) {

        if (ps->phase == NGX_HTTP_LLM_PROV_STATUS) {
            rc = ngx_http_parse_status_line(r, b, &ps->status);

            if (rc == NGX_AGAIN) {
                return NGX_AGAIN;
            }

            if (rc != NGX_OK) {
                ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                              "llm: provider sent no valid HTTP status "
                              "line");
                return NGX_HTTP_UPSTREAM_INVALID_HEADER;
            }

            ps->phase = NGX_HTTP_LLM_PROV_HEADERS;
            ps->length = -1;
            ps->chunked_body = 0;
            ps->sse = 0;
            u->headers_in.connection_close =
                                   (ps->status.http_version < NGX_HTTP_VERSION_11);
        }

        rc = ngx_http_parse_header_line(r, b, 1);

        if (rc == NGX_AGAIN) {
            return NGX_AGAIN;
        }

        if (rc == NGX_HTTP_PARSE_HEADER_DONE) {

            if (ps->status.code >= 100 && ps->status.code < 200) {
                /* an interim answer (100 Continue): the real one follows */
                ps->phase = NGX_HTTP_LLM_PROV_STATUS;
                ngx_memzero(&ps->status, sizeof(ngx_http_status_t));
                r->state = 0;
                continue;
            }

            ps->phase = NGX_HTTP_LLM_PROV_BODY;

            if (ps->status.code == 204 || ps->status.code == 304) {
                ps->length = 0;
            }

            if (ps->chunked_body) {
                ps->length = -1;
            }

            return NGX_OK;
        }

        if (rc != NGX_OK) {
            ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                          "llm: provider sent an invalid header line");
            return NGX_HTTP_UPSTREAM_INVALID_HEADER;
        }

        name = r->header_name_start;
        len = r->header_name_end - r->header_name_start;
        value = r->header_start;

        if (len == 12 && ngx_strncasecmp(name, (u_char *) "content-type", 12)
                         == 0)
        {
            ps->sse = (ngx_strlcasestrn(value, r->header_end,
                                        (u_char *) "text/event-stream",
                                        17 - 1) != NULL);

        } else if (len == 14
                   && ngx_strncasecmp(name, (u_char *) "content-length", 14)
                      == 0)
        {
            ps->length = ngx_atoof(value, r->header_end - value);

            if (ps->length == NGX_ERROR) {
                ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                              "llm: provider sent an invalid "
                              "Content-Length");
                return NGX_HTTP_UPSTREAM_INVALID_HEADER;
            }

        } else if (len == 17
                   && ngx_strncasecmp(name, (u_char *) "transfer-encoding",
                                      17) == 0)
        {
            ps->chunked_body = (ngx_strlcasestrn(value, r->header_end,
                                                 (u_char *) "chunked",
                                                 7 - 1) != NULL);

        } else if (len == 10
                   && ngx_strncasecmp(name, (u_char *) "connection", 10)
                      == 0)
        {
            if (ngx_strlcasestrn(value, r->header_end, (u_char *) "close",
                                 5 - 1))
            {
                u->headers_in.connection_close = 1;
            }
        }
    }
}


/* The body bytes of b: de-chunked, counted, fed; b is consumed. */

static ngx_int_t
ngx_http_llm_prov_body(ngx_http_request_t *r, ngx_http_llm_ctx_t *ctx,
    ngx_http_llm_pstate_t *ps, ngx_buf_t *b)
{
    size_t     n;
    ngx_int_t  rc;

    while (b->pos < b->last && !ps->eof) {

        if (ps->chunked_body) {
            rc = ngx_http_parse_chunked(r, b, &ps->chunked);

            if (rc == NGX_OK) {
                n = (size_t) ngx_min(ps->chunked.size, b->last - b->pos);

                rc = ngx_http_llm_prov_feed(r, ctx, ps, b->pos, n);
                if (rc != NGX_OK) {
                    return rc;
                }

                b->pos += n;
                ps->chunked.size -= n;
                continue;
            }

            if (rc == NGX_DONE) {
                ps->eof = 1;
                break;
            }

            if (rc == NGX_AGAIN) {
                break;
            }

            ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                          "llm: provider sent an invalid chunked body");
            return ngx_http_llm_prov_invalid(r, ctx, "an invalid body");
        }

        n = b->last - b->pos;

        if (ps->length >= 0 && (off_t) n > ps->length) {
            n = (size_t) ps->length;
        }

        rc = ngx_http_llm_prov_feed(r, ctx, ps, b->pos, n);
        if (rc != NGX_OK) {
            return rc;
        }

        b->pos += n;

        if (ps->length >= 0) {
            ps->length -= n;
        }

        if (ps->length == 0) {
            ps->eof = 1;
        }
    }

    if (ps->length == 0) {
        ps->eof = 1;
    }

    if (b->pos < b->last) {
        ngx_log_error(NGX_LOG_WARN, r->connection->log, 0,
                      "llm: provider sent %z bytes after its answer",
                      b->last - b->pos);
        b->pos = b->last;
        r->upstream->headers_in.connection_close = 1;
    }

    if (ps->eof) {
        return ngx_http_llm_prov_end(r, ctx, ps);
    }

    return NGX_OK;
}


/*
 * Body bytes: an error's or a JSON answer's are kept for the end; server-
 * sent events are cut into lines as they come.
 */

static ngx_int_t
ngx_http_llm_prov_feed(ngx_http_request_t *r, ngx_http_llm_ctx_t *ctx,
    ngx_http_llm_pstate_t *ps, u_char *p, size_t len)
{
    u_char                   *nl, *last;
    size_t                    n;
    ngx_int_t                 rc;
    ngx_http_llm_loc_conf_t  *llcf;

    llcf = ngx_http_get_module_loc_conf(r, ngx_http_llm_module);

    if (ps->ended || ctx->done) {
        return NGX_OK;      /* after the end of the answer: dropped */
    }

    if (ps->status.code < 200 || ps->status.code > 299) {
        n = ngx_min(len, NGX_HTTP_LLM_PROV_ERROR_MAX - ps->body.len);
        return ngx_http_llm_sbuf_add(r->pool, &ps->body, p, n);
    }

    if (!ps->sse) {
        if (ps->body.len + len > llcf->max_frame) {
            ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                          "llm: provider's answer is over llm_max_frame "
                          "%uz", llcf->max_frame);
            return ngx_http_llm_prov_invalid(r, ctx, "too long an answer");
        }

        return ngx_http_llm_sbuf_add(r->pool, &ps->body, p, len);
    }

    last = p + len;

    while (p < last) {
        nl = ngx_strlchr(p, last, '\n');
        n = (nl ? nl : last) - p;

        if (ps->line.len + n > llcf->max_frame) {
            ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                          "llm: provider sent an event line over "
                          "llm_max_frame %uz", llcf->max_frame);
            return ngx_http_llm_prov_invalid(r, ctx, "too long an event");
        }

        if (ngx_http_llm_sbuf_add(r->pool, &ps->line, p, n) != NGX_OK) {
            return NGX_ERROR;
        }

        if (nl == NULL) {
            break;
        }

        p = nl + 1;

        rc = ngx_http_llm_prov_sse_line(r, ctx, ps);
        ps->line.len = 0;

        if (rc != NGX_OK) {
            return rc;
        }
    }

    return NGX_OK;
}


/*
 * One line of server-sent events (ps->line): "data:" lines add to the
 * event, an empty line dispatches it; comments, event names, ids and
 * retry hints do not matter here.
 */

static ngx_int_t
ngx_http_llm_prov_sse_line(ngx_http_request_t *r, ngx_http_llm_ctx_t *ctx,
    ngx_http_llm_pstate_t *ps)
{
    u_char     *p;
    size_t      len;
    ngx_int_t   rc;

    p = ps->line.data;
    len = ps->line.len;

    if (len && p[len - 1] == '\r') {
        len--;
    }

    if (len == 0) {
        if (!ps->data_seen) {
            return NGX_OK;
        }

        rc = ngx_http_llm_prov_payload(r, ctx, ps, ps->data.data,
                                       ps->data.len);
        ps->data.len = 0;
        ps->data_seen = 0;

        return rc;
    }

    if (len < 5 || ngx_strncmp(p, "data:", 5) != 0) {
        return NGX_OK;
    }

    p += 5;
    len -= 5;

    if (len && *p == ' ') {
        p++;
        len--;
    }

    if (ps->data_seen
        && ngx_http_llm_sbuf_add(r->pool, &ps->data, (u_char *) "\n", 1)
           != NGX_OK)
    {
        return NGX_ERROR;
    }

    ps->data_seen = 1;

    return ngx_http_llm_sbuf_add(r->pool, &ps->data, p, len);
}


/*
 * The body is whole: an error status becomes the error answer; a JSON
 * answer its events; a stream that ended without [DONE] ends here
 * (ended: nothing missing; otherwise a cut answer).
 */

static ngx_int_t
ngx_http_llm_prov_end(ngx_http_request_t *r, ngx_http_llm_ctx_t *ctx,
    ngx_http_llm_pstate_t *ps)
{
    json_t        *root;
    ngx_int_t      rc;
    json_error_t   jerr;

    if (ps->ended || ctx->done) {
        return NGX_OK;
    }

    if (ps->status.code < 200 || ps->status.code > 299) {
        root = json_loadb((char *) ps->body.data, ps->body.len, 0, &jerr);
        rc = ngx_http_llm_prov_error(r, ctx, ps, root);

        if (root) {
            json_decref(root);
        }

        return rc;
    }

    if (!ps->sse) {
        return ngx_http_llm_prov_payload(r, ctx, ps, ps->body.data,
                                         ps->body.len);
    }

    if (ps->data_seen) {
        rc = ngx_http_llm_prov_payload(r, ctx, ps, ps->data.data,
                                       ps->data.len);
        ps->data_seen = 0;

        if (rc != NGX_OK) {
            return rc;
        }
    }

    if (!ps->ended && ps->finish) {
        /* every choice said how it finished: only [DONE] is missing */
        return ngx_http_llm_prov_done(r, ctx, ps);
    }

    return NGX_OK;
}


/*
 * One answer object: a stream's chunk (or [DONE]), or the whole JSON
 * answer, into events.
 */

static ngx_int_t
ngx_http_llm_prov_payload(ngx_http_request_t *r, ngx_http_llm_ctx_t *ctx,
    ngx_http_llm_pstate_t *ps, u_char *data, size_t len)
{
    json_t        *root, *j;
    ngx_int_t      rc;
    json_error_t   jerr;

    if (ps->ended) {
        return NGX_OK;
    }

    if (len == 6 && ngx_strncmp(data, "[DONE]", 6) == 0) {
        return ngx_http_llm_prov_done(r, ctx, ps);
    }

    root = json_loadb((char *) data, len, 0, &jerr);

    if (!json_is_object(root)) {
        ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                      "llm: provider sent an answer that is not a JSON "
                      "object: %s at byte %d", jerr.text, jerr.position);

        if (root) {
            json_decref(root);
        }

        return ngx_http_llm_prov_invalid(r, ctx, "an answer that is not "
                                         "JSON");
    }

    if (json_object_get(root, "error")) {
        rc = ngx_http_llm_prov_error(r, ctx, ps, root);
        json_decref(root);
        return rc;
    }

    j = json_object_get(root, "usage");

    if (json_is_object(j)) {
        ps->has_usage = 1;
        ps->usage.prompt_tokens = (uint32_t)
            json_integer_value(json_object_get(j, "prompt_tokens"));
        ps->usage.completion_tokens = (uint32_t)
            json_integer_value(json_object_get(j, "completion_tokens"));
        ps->usage.cached_tokens = (uint32_t) json_integer_value(
            json_object_get(json_object_get(j, "prompt_tokens_details"),
                            "cached_tokens"));
    }

    if (ctx->route == NGX_HTTP_LLM_ROUTE_EMBEDDINGS) {
        rc = ngx_http_llm_prov_embeddings(r, ctx, ps, root);

    } else {
        rc = ngx_http_llm_prov_choices(r, ctx, ps, root);

        if (rc == NGX_OK && !ps->sse) {
            rc = ngx_http_llm_prov_done(r, ctx, ps);
        }
    }

    json_decref(root);

    return rc;
}


static ngx_int_t
ngx_http_llm_prov_choices(ngx_http_request_t *r, ngx_http_llm_ctx_t *ctx,
    ngx_http_llm_pstate_t *ps, json_t *root)
{
    size_t      i;
    json_t     *choices, *c, *ix;
    ngx_int_t   rc;
    ngx_uint_t  index;

    choices = json_object_get(root, "choices");

    if (choices == NULL || json_is_null(choices)) {
        return NGX_OK;      /* the usage chunk */
    }

    if (!json_is_array(choices)) {
        return ngx_http_llm_prov_invalid(r, ctx, "choices that are not an "
                                         "array");
    }

    if (ps->finish == NULL) {
        ps->finish = ngx_pcalloc(r->pool,
                                 ctx->n * sizeof(Llm__FinishReason));
        if (ps->finish == NULL) {
            return NGX_ERROR;
        }
    }

    json_array_foreach(choices, i, c) {
        ix = json_object_get(c, "index");
        index = json_is_integer(ix) ? (ngx_uint_t) json_integer_value(ix)
                                    : (ngx_uint_t) i;

        if (!json_is_object(c) || index >= ctx->n) {
            continue;       /* not a choice that was asked for */
        }

        rc = ngx_http_llm_prov_choice(r, ctx, ps, c, index);
        if (rc != NGX_OK) {
            return rc;
        }
    }

    return NGX_OK;
}


/*
 * One choice of a chunk (delta) or of a whole answer (message; text for
 * legacy completions): its text and reasoning as a Delta, its tool calls,
 * its finish reason kept for Done.
 */

static ngx_int_t
ngx_http_llm_prov_choice(ngx_http_request_t *r, ngx_http_llm_ctx_t *ctx,
    ngx_http_llm_pstate_t *ps, json_t *c, ngx_uint_t index)
{
    json_t       *d, *text, *reasoning, *fr, *lp;
    ngx_int_t     rc;
    ngx_pool_t   *tmp;
    const char   *f;
    Llm__Event    ev = LLM__EVENT__INIT;
    Llm__Delta    delta = LLM__DELTA__INIT;

    d = json_object_get(c, "delta");

    if (!json_is_object(d)) {
        d = json_object_get(c, "message");
    }

    if (json_is_object(d)) {
        text = json_object_get(d, "content");
        reasoning = json_object_get(d, "reasoning_content");

        if (!json_is_string(reasoning)) {
            reasoning = json_object_get(d, "reasoning");
        }

    } else {
        text = json_object_get(c, "text");
        reasoning = NULL;
    }

    delta.index = (uint32_t) index;
    delta.text = json_is_string(text) ? (char *) json_string_value(text) : "";
    delta.reasoning = json_is_string(reasoning)
                      ? (char *) json_string_value(reasoning) : "";

    /* the tokens' logprobs, when the client asked and the provider gave */

    lp = json_object_get(c, "logprobs");
    tmp = NULL;

    if (json_is_object(lp)) {
        tmp = ngx_create_pool(4096, r->connection->log);
        if (tmp == NULL
            || ngx_http_llm_prov_logprobs(tmp, lp, &delta) != NGX_OK)
        {
            if (tmp) {
                ngx_destroy_pool(tmp);
            }
            return NGX_ERROR;
        }
    }

    rc = NGX_OK;

    if (delta.text[0] || delta.reasoning[0] || delta.n_logprobs) {
        ev.kind_case = LLM__EVENT__KIND_DELTA;
        ev.delta = &delta;

        /* one token per chunk, until the usage counts them */
        ctx->streamed_tokens++;

        rc = ngx_http_llm_prov_emit(r, ctx, &ev);
    }

    if (tmp) {
        ngx_destroy_pool(tmp);
    }

    if (rc != NGX_OK) {
        return rc;
    }

    if (json_is_object(d) && json_is_array(json_object_get(d, "tool_calls")))
    {
        rc = ngx_http_llm_prov_calls(r, ctx,
                                     json_object_get(d, "tool_calls"), index);
        if (rc != NGX_OK) {
            return rc;
        }
    }

    fr = json_object_get(c, "finish_reason");

    if (json_is_string(fr)) {
        f = json_string_value(fr);

        ps->finish[index] =
            ngx_strcmp(f, "length") == 0 ? LLM__FINISH_REASON__FINISH_LENGTH
            : ngx_strcmp(f, "tool_calls") == 0
              || ngx_strcmp(f, "function_call") == 0
              ? LLM__FINISH_REASON__FINISH_TOOL_CALLS
            : ngx_strcmp(f, "content_filter") == 0
              ? LLM__FINISH_REASON__FINISH_CONTENT_FILTER
            : LLM__FINISH_REASON__FINISH_STOP;
    }

    return NGX_OK;
}


/*
 * A choice's logprobs as the engine's TokenLogprob list, in pool: chat's
 * {"content": [{token, logprob, top_logprobs: [{token, logprob}]}]} or
 * legacy completions' {tokens, token_logprobs, top_logprobs: [{tok: lp}]}.
 */

static ngx_int_t
ngx_http_llm_prov_logprobs(ngx_pool_t *pool, json_t *lp, Llm__Delta *delta)
{
    size_t              i, k, n;
    json_t             *content, *tokens, *lps, *tops, *it, *top, *t;
    const char         *key;
    Llm__TopLogprob    *tp;
    Llm__TokenLogprob  *tl, **all;

    content = json_object_get(lp, "content");
    tokens = json_object_get(lp, "tokens");
    lps = json_object_get(lp, "token_logprobs");
    tops = json_object_get(lp, "top_logprobs");

    n = json_is_array(content) ? json_array_size(content)
        : json_is_array(tokens) ? json_array_size(tokens) : 0;

    if (n == 0) {
        return NGX_OK;
    }

    all = ngx_pcalloc(pool, n * sizeof(Llm__TokenLogprob *));
    if (all == NULL) {
        return NGX_ERROR;
    }

    for (i = 0; i < n; i++) {
        tl = ngx_pcalloc(pool, sizeof(Llm__TokenLogprob));
        if (tl == NULL) {
            return NGX_ERROR;
        }

        llm__token_logprob__init(tl);
        all[i] = tl;

        if (json_is_array(content)) {
            it = json_array_get(content, i);
            t = json_object_get(it, "token");
            tl->logprob = (float) json_number_value(
                                          json_object_get(it, "logprob"));
            top = json_object_get(it, "top_logprobs");

        } else {
            t = json_array_get(tokens, i);
            tl->logprob = (float) json_number_value(json_array_get(lps, i));
            top = json_array_get(tops, i);
        }

        if (json_is_string(t)) {
            tl->text.data = (uint8_t *) json_string_value(t);
            tl->text.len = json_string_length(t);
        }

        k = json_is_array(top) ? json_array_size(top)
            : json_is_object(top) ? json_object_size(top) : 0;

        if (k == 0) {
            continue;
        }

        tl->top = ngx_pcalloc(pool, k * sizeof(Llm__TopLogprob *));
        if (tl->top == NULL) {
            return NGX_ERROR;
        }

        if (json_is_array(top)) {
            json_array_foreach(top, k, it) {
                t = json_object_get(it, "token");
                tp = ngx_pcalloc(pool, sizeof(Llm__TopLogprob));
                if (tp == NULL) {
                    return NGX_ERROR;
                }

                llm__top_logprob__init(tp);
                if (json_is_string(t)) {
                    tp->text.data = (uint8_t *) json_string_value(t);
                    tp->text.len = json_string_length(t);
                }
                tp->logprob = (float) json_number_value(
                                          json_object_get(it, "logprob"));
                tl->top[tl->n_top++] = tp;
            }

        } else {
            json_object_foreach(top, key, it) {
                tp = ngx_pcalloc(pool, sizeof(Llm__TopLogprob));
                if (tp == NULL) {
                    return NGX_ERROR;
                }

                llm__top_logprob__init(tp);
                tp->text.data = (uint8_t *) key;
                tp->text.len = ngx_strlen(key);
                tp->logprob = (float) json_number_value(it);
                tl->top[tl->n_top++] = tp;
            }
        }
    }

    delta->logprobs = all;
    delta->n_logprobs = n;

    return NGX_OK;
}


/* Tool calls of a choice: stream fragments or whole calls, as deltas. */

static ngx_int_t
ngx_http_llm_prov_calls(ngx_http_request_t *r, ngx_http_llm_ctx_t *ctx,
    json_t *calls, ngx_uint_t index)
{
    size_t          i;
    json_t         *tc, *fn, *ci, *id, *name, *args;
    ngx_int_t       rc;
    Llm__Event      ev = LLM__EVENT__INIT;
    Llm__ToolCallDelta  call = LLM__TOOL_CALL_DELTA__INIT;

    json_array_foreach(calls, i, tc) {
        if (!json_is_object(tc)) {
            continue;
        }

        fn = json_object_get(tc, "function");
        ci = json_object_get(tc, "index");
        id = json_object_get(tc, "id");
        name = json_object_get(fn, "name");
        args = json_object_get(fn, "arguments");

        llm__tool_call_delta__init(&call);
        call.index = (uint32_t) index;
        call.call_index = json_is_integer(ci)
                          ? (uint32_t) json_integer_value(ci) : (uint32_t) i;
        call.id = json_is_string(id) ? (char *) json_string_value(id) : "";
        call.name = json_is_string(name) ? (char *) json_string_value(name)
                                         : "";
        call.arguments = json_is_string(args)
                         ? (char *) json_string_value(args) : "";

        ev.kind_case = LLM__EVENT__KIND_TOOL_CALL;
        ev.tool_call = &call;

        rc = ngx_http_llm_prov_emit(r, ctx, &ev);
        if (rc != NGX_OK) {
            return rc;
        }
    }

    return NGX_OK;
}


/* An embeddings answer: its vectors in input order, then EmbedDone. */

static ngx_int_t
ngx_http_llm_prov_embeddings(ngx_http_request_t *r, ngx_http_llm_ctx_t *ctx,
    ngx_http_llm_pstate_t *ps, json_t *root)
{
    float          *v;
    size_t          i, k, n;
    json_t         *data, *item, *vec, *x;
    ngx_int_t       rc;
    Llm__Event      ev = LLM__EVENT__INIT;
    Llm__Usage      usage = LLM__USAGE__INIT;
    Llm__Embedding  e = LLM__EMBEDDING__INIT;
    Llm__EmbedDone  done = LLM__EMBED_DONE__INIT;

    data = json_object_get(root, "data");

    if (!json_is_array(data)) {
        return ngx_http_llm_prov_invalid(r, ctx, "embeddings without data");
    }

    n = json_array_size(data);

    for (k = 0; k < n; k++) {

        /* the item of index k (providers answer in order; not assumed) */

        vec = NULL;

        json_array_foreach(data, i, item) {
            x = json_object_get(item, "index");

            if ((json_is_integer(x) ? (size_t) json_integer_value(x) : i)
                == k)
            {
                vec = json_object_get(item, "embedding");
                break;
            }
        }

        if (!json_is_array(vec)) {
            return ngx_http_llm_prov_invalid(r, ctx, "embeddings that are "
                                             "not float arrays");
        }

        v = ngx_alloc(json_array_size(vec) * sizeof(float) + 1,
                      r->connection->log);
        if (v == NULL) {
            return NGX_ERROR;
        }

        json_array_foreach(vec, i, x) {
            v[i] = (float) json_number_value(x);
        }

        e.index = (uint32_t) k;
        e.n_values = json_array_size(vec);
        e.values = v;

        ev.kind_case = LLM__EVENT__KIND_EMBEDDING;
        ev.embedding = &e;

        rc = ngx_http_llm_prov_emit(r, ctx, &ev);
        ngx_free(v);

        if (rc != NGX_OK) {
            return rc;
        }
    }

    usage.prompt_tokens = ps->usage.prompt_tokens;
    done.usage = &usage;
    done.model = (char *) "";

    ev.kind_case = LLM__EVENT__KIND_EMBED_DONE;
    ev.embed_done = &done;

    ctx->prompt_tokens = usage.prompt_tokens;
    ps->ended = 1;

    return ngx_http_llm_prov_emit(r, ctx, &ev);
}


/* The end of a chat or completion answer: Done with the choices' ends. */

static ngx_int_t
ngx_http_llm_prov_done(ngx_http_request_t *r, ngx_http_llm_ctx_t *ctx,
    ngx_http_llm_pstate_t *ps)
{
    ngx_uint_t    i;
    Llm__Event    ev = LLM__EVENT__INIT;
    Llm__Done     done = LLM__DONE__INIT;
    Llm__Usage    usage = LLM__USAGE__INIT;
    Llm__ChoiceEnd   *ends, **pends;

    if (ps->ended) {
        return NGX_OK;
    }

    if (ctx->route == NGX_HTTP_LLM_ROUTE_EMBEDDINGS) {
        return ngx_http_llm_prov_invalid(r, ctx, "a stream for embeddings");
    }

    ps->ended = 1;

    ends = ngx_pcalloc(r->pool, ctx->n * sizeof(Llm__ChoiceEnd));
    pends = ngx_pcalloc(r->pool, ctx->n * sizeof(Llm__ChoiceEnd *));
    if (ends == NULL || pends == NULL) {
        return NGX_ERROR;
    }

    for (i = 0; i < ctx->n; i++) {
        llm__choice_end__init(&ends[i]);
        ends[i].index = (uint32_t) i;
        ends[i].finish_reason = (ps->finish && ps->finish[i])
                                ? ps->finish[i]
                                : LLM__FINISH_REASON__FINISH_STOP;
        ends[i].stop_sequence = (char *) "";
        pends[i] = &ends[i];
    }

    done.n_choices = ctx->n;
    done.choices = pends;
    done.model = (char *) "";
    done.system_fingerprint = (char *) "";

    if (ps->has_usage) {
        usage = ps->usage;
        done.usage = &usage;

    } else {
        /* no usage from the provider: the estimates are billed */
        usage.prompt_tokens = (uint32_t) ctx->prompt_est;
        usage.completion_tokens = (uint32_t) ctx->streamed_tokens;
        done.usage = &usage;

        ngx_log_error(NGX_LOG_WARN, r->connection->log, 0,
                      "llm: provider \"%V\" sent no usage: billing the "
                      "estimate (%uD prompt, %uD completion tokens)",
                      &ctx->model->provider->name, usage.prompt_tokens,
                      usage.completion_tokens);
    }

    ev.kind_case = LLM__EVENT__KIND_DONE;
    ev.done = &done;

    return ngx_http_llm_prov_emit(r, ctx, &ev);
}


/*
 * A provider's error (an error status with its body, or an "error" object
 * in a stream) as the module's error: before the first byte through
 * ngx_http_llm_upstream_error() (429 and 5xx go to the next server or
 * model as llm_next_upstream says; the request's own errors are the
 * answer), mid-stream as the stream's error event.
 */

static ngx_int_t
ngx_http_llm_prov_error(ngx_http_request_t *r, ngx_http_llm_ctx_t *ctx,
    ngx_http_llm_pstate_t *ps, json_t *root)
{
    u_char                *p;
    json_t                *e, *msg, *code, *param, *type;
    ngx_uint_t             status, mask;
    ngx_chain_t          **ll;
    ngx_http_llm_error_t   err;
    ngx_http_llm_provider_t  *pv;

    pv = ctx->model->provider;
    status = ps->status.code;

    e = json_object_get(root, "error");
    if (!json_is_object(e)) {
        e = root;
    }

    msg = json_object_get(e, "message");
    if (!json_is_string(msg) && json_is_string(json_object_get(root, "error")))
    {
        msg = json_object_get(root, "error");
    }

    code = json_object_get(e, "code");
    param = json_object_get(e, "param");
    type = json_object_get(e, "type");

    ngx_memzero(&err, sizeof(ngx_http_llm_error_t));

    p = ngx_pnalloc(r->pool, 256 + pv->name.len
                             + (json_is_string(msg)
                                ? json_string_length(msg) : 0));
    if (p == NULL) {
        return NGX_ERROR;
    }

    err.message.data = p;

    if (json_is_string(msg) && json_string_length(msg)) {
        p = ngx_sprintf(p, "The provider \"%V\" answered: ", &pv->name);
        p = ngx_cpymem(p, json_string_value(msg), json_string_length(msg));

    } else {
        p = ngx_sprintf(p, "The provider \"%V\" answered with status %ui.",
                        &pv->name, status ? status : 500);
    }

    err.message.len = p - err.message.data;

    if (json_is_string(param) && json_string_length(param) < 128) {
        err.param = ngx_http_llm_prov_strdup(r->pool, param);
    }

    mask = 0;

    if (status == 429 || status == 503 || status == 529) {
        /* a provider rate-limiting or overloaded: back-pressure */
        err.status = (status == 429) ? NGX_HTTP_TOO_MANY_REQUESTS
                                     : NGX_HTTP_SERVICE_UNAVAILABLE;
        err.type = (status == 429) ? "rate_limit_error" : "server_error";
        err.code = (status == 429) ? "provider_rate_limited"
                                   : "provider_overloaded";
        mask = NGX_HTTP_UPSTREAM_FT_HTTP_503;

    } else if (status == 401 || status == 403) {
        /* the gateway's credentials, not the client's fault */
        err.status = NGX_HTTP_BAD_GATEWAY;
        err.type = "server_error";
        err.code = "provider_auth_failed";
        mask = NGX_HTTP_UPSTREAM_FT_HTTP_502;

    } else if (status >= 400 && status < 500) {
        err.status = (status == 404) ? NGX_HTTP_BAD_REQUEST : status;
        err.type = "invalid_request_error";
        err.code = json_is_string(code) && json_string_length(code) < 64
                   ? ngx_http_llm_prov_strdup(r->pool, code) : "invalid_value";

        if (json_is_string(type)
            && ngx_strcmp(json_string_value(type), "invalid_request_error")
               != 0)
        {
            err.type = "invalid_request_error";
        }

    } else {
        /* 5xx, or an error object in a 2xx stream */
        err.status = NGX_HTTP_BAD_GATEWAY;
        err.type = "server_error";
        err.code = "provider_error";
        mask = NGX_HTTP_UPSTREAM_FT_HTTP_500;
    }

    if (err.code == NULL) {
        return NGX_ERROR;
    }

    if (!ctx->header_done) {
        return ngx_http_llm_upstream_error(r, ctx, &err, mask);
    }

    /* mid-stream: the stream's error event, and its end */

    ps->ended = 1;

    ctx->upstream_error = 1;
    ctx->err_status = err.status;
    ctx->err_type = err.type;
    ctx->err_code = err.code;
    ctx->err_param = err.param;
    ctx->err_message = err.message;
    ctx->error_code.data = (u_char *) err.code;
    ctx->error_code.len = ngx_strlen(err.code);

    for (ll = ps->ll; *ll; ll = &(*ll)->next) { /* void */ }

    if (ngx_http_llm_stream_event(r, ctx, NULL, &ll) != NGX_OK) {
        return NGX_ERROR;
    }

    ctx->done = 1;

    return NGX_OK;
}


/*
 * One event, as an engine's: before the response started it decides the
 * first byte (ngx_http_llm_header_event), after it goes to the stream.
 * NGX_OK, or what process_header returns (a retry, an error).
 */

static ngx_int_t
ngx_http_llm_prov_emit(ngx_http_request_t *r, ngx_http_llm_ctx_t *ctx,
    Llm__Event *ev)
{
    ngx_int_t                rc;
    ngx_chain_t            **ll;
    ngx_http_llm_pstate_t   *ps;

    if (ctx->done) {
        return NGX_OK;
    }

    if (!ctx->header_done) {
        rc = ngx_http_llm_header_event(r, ctx, ev);
        return rc == NGX_AGAIN ? NGX_OK : rc;
    }

    ps = ctx->pstate;

    for (ll = ps->ll; *ll; ll = &(*ll)->next) { /* void */ }

    return ngx_http_llm_stream_event(r, ctx, ev, &ll);
}


/* A JSON string as a C string in pool (NUL-free: jansson's default). */

static char *
ngx_http_llm_prov_strdup(ngx_pool_t *pool, json_t *s)
{
    u_char  *p;

    p = ngx_pnalloc(pool, json_string_length(s) + 1);
    if (p == NULL) {
        return NULL;
    }

    ngx_memcpy(p, json_string_value(s), json_string_length(s) + 1);

    return (char *) p;
}


/*
 * An answer this module cannot read: before the first byte the next
 * server or model is tried (invalid_frame in llm_next_upstream); after
 * it, the stream ends with an error event.
 */

static ngx_int_t
ngx_http_llm_prov_invalid(ngx_http_request_t *r, ngx_http_llm_ctx_t *ctx,
    const char *what)
{
    ngx_chain_t           **ll;
    ngx_http_llm_pstate_t  *ps;

    ps = ctx->pstate;

    ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                  "llm: provider \"%V\" sent %s",
                  &ctx->model->provider->name, what);

    if (!ctx->header_done) {
        return NGX_HTTP_UPSTREAM_INVALID_HEADER;
    }

    if (ctx->done) {
        return NGX_OK;
    }

    ps->ended = 1;
    ctx->upstream_error = 1;
    ngx_str_set(&ctx->error_code, "invalid_answer");
    ctx->err_status = NGX_HTTP_BAD_GATEWAY;
    ngx_str_set(&ctx->err_message, "The provider sent an invalid answer.");

    for (ll = ps->ll; *ll; ll = &(*ll)->next) { /* void */ }

    if (ctx->stream
        && ngx_http_llm_stream_event(r, ctx, NULL, &ll) != NGX_OK)
    {
        return NGX_ERROR;
    }

    ctx->done = 1;
    r->upstream->headers_in.connection_close = 1;

    return NGX_OK;
}


/* The answer after its first byte, as the upstream reads it. */

static ngx_int_t
ngx_http_llm_prov_input_filter(void *data, ssize_t bytes)
{
    ngx_http_llm_ctx_t *ctx = data;

    ngx_int_t               rc;
    ngx_buf_t              *b;
    ngx_chain_t            *cl, **ll;
    ngx_http_request_t     *r;
    ngx_http_upstream_t    *u;
    ngx_http_llm_pstate_t  *ps;

    r = ctx->request;
    u = r->upstream;
    b = &u->buffer;
    ps = ctx->pstate;

    b->pos = b->last;
    b->last += bytes;

    for (cl = u->out_bufs, ll = &u->out_bufs; cl; cl = cl->next) {
        ll = &cl->next;
    }

    ps->ll = ll;

    rc = ngx_http_llm_prov_body(r, ctx, ps, b);

    b->pos = b->start;
    b->last = b->start;

    if (rc != NGX_OK) {
        return NGX_ERROR;
    }

    if (ps->eof) {
        u->length = 0;

        if (ctx->done) {
            u->keepalive = !u->headers_in.connection_close;
        }

    } else if (ctx->done && !ps->chunked_body && ps->length < 0) {
        /* an answer read to the connection's end: it ends it */
        u->length = 0;
    }

    return NGX_OK;
}
