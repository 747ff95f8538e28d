
/*
 * ngx_http_llm_module: declarations shared between the module's files,
 * one job per file (a request goes down this list):
 *
 *   ngx_http_llm_module.c    the module: directives, configuration,
 *                            $llm_* variables
 *   ngx_http_llm_handler.c   the content handler: route, method, key,
 *                            body, model and fallback chain, admission
 *   ngx_http_llm_request.c   OpenAI request validation (the field
 *                            table), engine limits, the engine frame
 *   ngx_http_llm_upstream.c  the engine protocol over ngx_http_upstream_t:
 *                            frames, events, first byte, finalization
 *   ngx_http_llm_provider.c  remote OpenAI-compatible APIs (llm_provider):
 *                            HTTP/1.1 over the same upstream, their
 *                            answers turned into engine events
 *   ngx_http_llm_balancer.c  failover to the next model of the chain,
 *                            a model's error rate, llm_balance least_load
 *   ngx_http_llm_sse.c       the streaming answer: SSE chunks
 *   ngx_http_llm_response.c  the JSON answer: choices collected, body
 *   ngx_http_llm_responses.c /v1/responses: OpenAI's Responses API as
 *                            a dialect over the chat route, its store
 *   ngx_http_llm_anthropic.c /v1/messages: Anthropic's Messages API as
 *                            a dialect over the chat route
 *   ngx_http_llm_json.c      JSON string escaping (UTF-8 validating)
 *   ngx_http_llm_error.c     OpenAI error bodies, refusals, error filter
 *   ngx_http_llm_cors.c      x-request-id and CORS on every response,
 *                            the CORS preflight
 *   ngx_http_llm_backend.c   the engines: registration, Info probe,
 *                            their limits and fingerprint
 *   ngx_http_llm_info.c      /v1/models, /v1/models/{id}, /healthz
 *   ngx_http_llm_keys.c      API keys (ngx_http_llm_keys_module)
 *   ngx_http_llm_limit.c     per-key limits in a shared zone
 *   ngx_http_llm_store.c     a fleet's limits in Redis (llm_limit_store)
 *   ngx_http_llm_metrics.c   usage counters, Prometheus text
 */


#ifndef _NGX_HTTP_LLM_MODULE_H_INCLUDED_
#define _NGX_HTTP_LLM_MODULE_H_INCLUDED_


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>


/* OpenAI error bodies: {"error":{"message","type","param","code"}}. */

typedef struct {
    ngx_uint_t                  status;    /* HTTP status */
    const char                 *type;      /* invalid_request_error, ... */
    const char                 *code;      /* NULL: JSON null */
    const char                 *param;     /* NULL: JSON null */
    ngx_str_t                   message;
} ngx_http_llm_error_t;


/*
 * Sends an OpenAI-shaped error as the whole response (with the
 * x-ratelimit-* headers when a limit ticket is attached to the request)
 * and finalizes nothing: returns what the content handler should return.
 * Also records the error code for $llm_error_code.
 */
ngx_int_t ngx_http_llm_send_error(ngx_http_request_t *r,
    ngx_http_llm_error_t *err);

/* Helper: formats the message with ngx_vslprintf into r->pool. */
ngx_int_t ngx_http_llm_send_errorf(ngx_http_request_t *r, ngx_uint_t status,
    const char *type, const char *code, const char *param,
    const char *fmt, ...);

/* Adds one response header; value must live as long as the request. */
ngx_int_t ngx_http_llm_header_out(ngx_http_request_t *r, const char *name,
    u_char *value, size_t len);


/*
 * What keys and limits decide about a request: allowed, or which refusal
 * with the values its message names.  ngx_http_llm_auth() and
 * ngx_http_llm_limit_admit() only decide; the caller sends the refusal
 * with ngx_http_llm_send_denial() (ngx_http_llm_error.c).
 */

typedef enum {
    NGX_HTTP_LLM_ALLOW = 0,
    NGX_HTTP_LLM_DENY_NO_KEY,      /* 401: no key presented */
    NGX_HTTP_LLM_DENY_BAD_KEY,     /* 401 invalid_api_key, masked */
    NGX_HTTP_LLM_DENY_ZONE_FULL,   /* 503: the zone cannot track the key */
    NGX_HTTP_LLM_DENY_STORE,       /* 503: llm_limit_store unavailable */
    NGX_HTTP_LLM_DENY_QUOTA,       /* 429 insufficient_quota */
    NGX_HTTP_LLM_DENY_BUDGET,      /* 429 insufficient_quota: spend */
    NGX_HTTP_LLM_DENY_REQUESTS,    /* 429 rate_limit_exceeded, requests */
    NGX_HTTP_LLM_DENY_TOKENS       /* 429 rate_limit_exceeded, tokens */
} ngx_http_llm_verdict_e;


typedef struct ngx_http_llm_key_s  ngx_http_llm_key_t;

typedef struct {
    ngx_http_llm_verdict_e      verdict;
    ngx_http_llm_key_t         *key;       /* the key refused */
    ngx_msec_t                  wait;      /* until the request fits */
    ngx_uint_t                  used;      /* of the limit, per minute */
    ngx_uint_t                  requested;
    u_char                      masked[16];  /* a bad key, as shown */
} ngx_http_llm_decision_t;


/* API keys (ngx_http_llm_keys.c). */

struct ngx_http_llm_key_s {
    ngx_str_t                   name;      /* the key's name, for logs */
    u_char                      hash[32];  /* SHA-256 of the key */
    ngx_uint_t                  rpm;       /* requests/min, 0: unlimited */
    ngx_uint_t                  tpm;       /* tokens/min, 0: unlimited */
    uint64_t                    quota;     /* total tokens, 0: none */
    uint64_t                    budget;    /* total spend, picodollars;
                                              0: none */
    ngx_array_t                *models;    /* of ngx_str_t; NULL: all */
    ngx_uint_t                  index;     /* position in the keys file */
};


/*
 * Authenticates r from "Authorization: Bearer <key>" or "x-api-key".
 * Returns NGX_OK with d->verdict NGX_HTTP_LLM_ALLOW and *key set, or a
 * 401 verdict (no key, unknown key) for the caller to send; NGX_DECLINED
 * when no llm_keys is configured for the location (open access,
 * *key = NULL); NGX_ERROR on an internal failure.
 */
ngx_int_t ngx_http_llm_auth(ngx_http_request_t *r, ngx_http_llm_key_t **key,
    ngx_http_llm_decision_t *d);

/* 1 if the key may use the model (by its configured name), else 0. */
ngx_uint_t ngx_http_llm_key_allows(ngx_http_llm_key_t *key, ngx_str_t *model);


/* Limits (ngx_http_llm_limit.c). */

typedef struct {
    ngx_http_llm_key_t         *key;
    ngx_uint_t                  reserved;  /* tokens reserved at admission */
    ngx_uint_t                  tok_reserved;  /* of them, taken from tpm */
    ngx_uint_t                  out_cap;   /* output tokens allowed, 0: any */
    ngx_uint_t                  settled;   /* 1 once settled */
    unsigned                    fleet:1;   /* settles in llm_limit_store */
    unsigned                    fleet_reserved:1;  /* reserved there too */
    time_t                      fleet_minute;  /* its window */

    /* values for the x-ratelimit-* headers, filled at admission */
    ngx_uint_t                  limit_requests;
    ngx_uint_t                  remaining_requests;
    ngx_msec_t                  reset_requests;
    ngx_uint_t                  limit_tokens;
    ngx_uint_t                  remaining_tokens;
    ngx_msec_t                  reset_tokens;
} ngx_http_llm_ticket_t;


/*
 * Admits one request of key against its requests/min and tokens/min and
 * its quota, reserving the prompt estimate plus the output it may
 * generate: output tokens over all choices, NGX_HTTP_LLM_UNBOUNDED when
 * neither max_tokens nor the model's window is known; explicit when the
 * client set max_tokens.  The output is capped at what the key has left
 * (quota, and the tokens/min bucket unless an explicit max_tokens fits
 * in it, which waits for it instead): t->out_cap is then the tokens the
 * request may generate, else 0.  NGX_OK with d->verdict
 * NGX_HTTP_LLM_ALLOW: admitted, t filled, settle later.  NGX_OK with a
 * refusal (a 429 for quota, requests/min or tokens/min, with t filled for
 * the x-ratelimit-* headers; a 503 when the zone is full): the caller
 * sends it.  NGX_ERROR on an internal failure.
 */
#define NGX_HTTP_LLM_UNBOUNDED  ((ngx_uint_t) 0x7fffffff)

ngx_int_t ngx_http_llm_limit_admit(ngx_http_request_t *r,
    ngx_http_llm_key_t *key, ngx_uint_t prompt, ngx_uint_t output,
    ngx_uint_t explicit, ngx_http_llm_ticket_t *t,
    ngx_http_llm_decision_t *d);

/* Replaces the reservation with the tokens actually used.  Idempotent. */
void ngx_http_llm_limit_settle(ngx_http_request_t *r,
    ngx_http_llm_ticket_t *t, ngx_uint_t used_tokens, uint64_t cost);

/* Picodollars as dollars ("0.000123450"); buf holds 32 bytes. */
u_char *ngx_http_llm_format_cost(u_char *buf, uint64_t pico);

/* The fleet's limits in Redis (ngx_http_llm_store.c). */
char *ngx_http_llm_limit_store(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
void ngx_http_llm_store_exit(ngx_cycle_t *cycle);
void ngx_http_llm_store_settle(ngx_http_request_t *r,
    ngx_http_llm_ticket_t *t, ngx_uint_t used_tokens, uint64_t cost);

/* Adds the six x-ratelimit-* response headers from t. */
ngx_int_t ngx_http_llm_limit_headers(ngx_http_request_t *r,
    ngx_http_llm_ticket_t *t);

/* ms as Go's time.Duration prints it; buf holds NGX_INT_T_LEN + 16. */
size_t ngx_http_llm_format_duration(u_char *buf, ngx_msec_t ms);

/*
 * Sends the refusal d (the 401, 429 or 503 with OpenAI's codes and
 * texts, and for a 429 the x-ratelimit-* headers of t, Retry-After or
 * x-should-retry): returns what the handler should return.
 */
ngx_int_t ngx_http_llm_send_denial(ngx_http_request_t *r,
    ngx_http_llm_decision_t *d, ngx_http_llm_ticket_t *t);


/* Metrics (ngx_http_llm_metrics.c). */

typedef struct {
    ngx_str_t                   model;     /* the model that answered */
    ngx_str_t                   asked;     /* the model asked for, when a
                                              fallback answered; else "" */
    ngx_uint_t                  status;    /* HTTP status sent */
    ngx_uint_t                  prompt_tokens;
    ngx_uint_t                  completion_tokens;
    ngx_uint_t                  cached_tokens;
    ngx_msec_t                  ttft;      /* first token, 0 if none */
    uint64_t                    cost;      /* picodollars */
    ngx_msec_t                  duration;
    unsigned                    rate_limited:1;
    unsigned                    fallback:1;
    unsigned                    upstream_error:1;
    unsigned                    stream:1;
    unsigned                    known:1;   /* model: a name we serve */
} ngx_http_llm_sample_t;


void ngx_http_llm_metrics_inflight(ngx_http_request_t *r, ngx_int_t delta);
void ngx_http_llm_metrics_record(ngx_http_request_t *r,
    ngx_http_llm_sample_t *s);


/*
 * Internals of ngx_http_llm_module shared by its three files (module,
 * upstream, openai).  Not used by the keys module.
 */

#include <jansson.h>
#include "llm.pb-c.h"


#define NGX_HTTP_LLM_ROUTE_CHAT         1
#define NGX_HTTP_LLM_ROUTE_COMPLETION   2
#define NGX_HTTP_LLM_ROUTE_EMBEDDINGS   4

#define NGX_HTTP_LLM_INFO_MODELS        1   /* /v1/models */
#define NGX_HTTP_LLM_INFO_MODEL         2   /* /v1/models/{id} */
#define NGX_HTTP_LLM_INFO_HEALTH        3   /* /healthz */


typedef struct ngx_http_llm_model_s  ngx_http_llm_model_t;
typedef struct ngx_http_llm_ctx_s    ngx_http_llm_ctx_t;


/*
 * An API dialect over the chat route (/v1/responses, /v1/messages): its
 * request becomes the chat request the engine knows (parse, through
 * ngx_http_llm_parse_json), and the engine's events, collected into
 * ctx->choices as for chat, are rendered in its own shapes.  A request
 * without a dialect (ctx->dialect NULL) is OpenAI's chat or legacy
 * completions.
 */

typedef struct {
    const char                    *name;       /* for logs */
    const char                    *id_prefix;  /* of the response id */

    /* the body into ctx (NGX_OK; NGX_DECLINED with err; NGX_ERROR) */
    ngx_int_t                    (*parse)(ngx_http_request_t *r,
                                          ngx_http_llm_ctx_t *ctx,
                                          u_char *body, size_t len,
                                          ngx_http_llm_error_t *err);

    /* the whole answer, from ctx->choices after Done */
    ngx_int_t                    (*body)(ngx_http_request_t *r,
                                         ngx_http_llm_ctx_t *ctx,
                                         ngx_str_t *body);

    /* one event of a started stream as SSE at *ll; NULL: ctx's error */
    ngx_int_t                    (*sse)(ngx_http_request_t *r,
                                        ngx_http_llm_ctx_t *ctx,
                                        Llm__Event *ev, ngx_chain_t ***ll);

    /* an error body in the dialect's shape, ending in "\n"; NULL:
     * OpenAI's */
    u_char                      *(*error_json)(ngx_pool_t *pool,
                                               ngx_http_llm_error_t *err,
                                               size_t *len);
} ngx_http_llm_dialect_t;


/* What an engine accepts (InfoResponse.limits). */
typedef struct {
    ngx_uint_t                     max_choices;     /* n */
    ngx_uint_t                     max_stop;        /* stop strings */
    ngx_uint_t                     max_stop_bytes;  /* of one; 0: any */
    ngx_uint_t                     max_top_logprobs;
} ngx_http_llm_engine_limits_t;

/* One engine address of an upstream, probed with InfoRequest. */
typedef struct {
    ngx_str_t                      name;       /* "unix:/run/a.sock" */
    ngx_addr_t                    *addr;
    ngx_http_upstream_srv_conf_t  *upstream;
    ngx_msec_t                     timeout;
    char                          *auth;       /* the engines' secret */

    /* the probe in flight */
    ngx_peer_connection_t          pc;
    u_char                        *buf;
    size_t                         size;
    size_t                         len;
    unsigned                       busy:1;
    unsigned                       sent:1;

    /* the last answer */
    ngx_msec_t                     checked;    /* 0: never */
    unsigned                       up:1;
    u_char                         model[128];
    u_char                         revision[64];
    u_char                         load_state[32];
    u_char                         quantization[32];
    u_char                         architecture[32];
    u_char                         fingerprint[64];
    ngx_http_llm_engine_limits_t   limits;
    unsigned                       has_limits:1;
    uint32_t                       queue_depth;
    uint32_t                       context_length;
    int64_t                        created;
    uint64_t                       requests_total;
    uint64_t                       requests_running;
    uint64_t                       requests_queued;
    uint64_t                       requests_cancelled;
    uint32_t                       kv_free;    /* KV blocks */
    uint32_t                       kv_total;
    uint32_t                       kv_cached;  /* of kv_free: prefixes */
    uint32_t                       kv_block_tokens;
    u_char                         error[128];
} ngx_http_llm_backend_t;

/* KV tokens the engine's running requests hold, from its last Info. */
#define ngx_http_llm_kv_used(be)                                              \
    ((uint64_t) ((be)->kv_free < (be)->kv_total                              \
                 ? (be)->kv_total - (be)->kv_free : 0)                       \
     * (be)->kv_block_tokens)


/*
 * A remote OpenAI-compatible API (llm_provider): reached with nginx's
 * upstream and TLS, its answers turned into the engine's events.
 */
typedef struct {
    ngx_str_t                      name;
    ngx_str_t                      url;        /* as configured */
    ngx_str_t                      host;       /* the Host header */
    ngx_str_t                      prefix;     /* the path, no final "/" */
    ngx_str_t                      auth;       /* "Bearer KEY" */
    ngx_http_upstream_srv_conf_t  *upstream;
    ngx_msec_t                     timeout;    /* read; 0: llm_read_timeout */
    ngx_msec_t                     connect_timeout;  /* 0: the location's */
#if (NGX_HTTP_SSL)
    ngx_ssl_t                     *ssl;        /* NULL: http:// */
    ngx_str_t                      ssl_name;   /* SNI and the name checked */
    ngx_http_complex_value_t       ssl_name_cv;  /* the same, constant */
    ngx_flag_t                     ssl_verify;
#endif
} ngx_http_llm_provider_t;


struct ngx_http_llm_model_s {
    ngx_str_t                      name;
    ngx_str_t                      json_name;  /* name, JSON-escaped */
    ngx_array_t                    aliases;    /* of ngx_str_t */
    ngx_str_t                      upstream_name;
    ngx_http_upstream_srv_conf_t  *upstream;
    ngx_array_t                    fallback_names;  /* of ngx_str_t */
    ngx_array_t                    fallback;   /* of ngx_http_llm_model_t * */
    ngx_uint_t                     first_backend;   /* in mcf->backends */
    ngx_uint_t                     nbackends;
    ngx_str_t                      provider_name;
    ngx_http_llm_provider_t       *provider;  /* NULL: llm-engine */
    ngx_str_t                      remote_model;  /* the provider's name */
    ngx_msec_t                     ttft;       /* first token deadline */

    /* price=: dollars per million tokens, in microdollars (so a token
     * costs that many picodollars) */
    uint64_t                       price_input;
    uint64_t                       price_cached;
    uint64_t                       price_output;
    unsigned                       priced:1;

    /* error_rate=PCT[/WINDOW]: skipped for its fallback while its recent
     * answers (this worker's) fail that often */
    ngx_uint_t                     err_pct;    /* 0: off */
    ngx_msec_t                     err_window;
    struct ngx_http_llm_health_s  *health;     /* this worker's counts */
};


/* ngx_http_llm_balancer.c: a model's recent outcomes, per worker */
void ngx_http_llm_model_outcome(ngx_http_llm_model_t *m, ngx_uint_t ok);
ngx_uint_t ngx_http_llm_model_failing(ngx_http_llm_model_t *m);
ngx_int_t ngx_http_llm_model_error_rate(ngx_conf_t *cf,
    ngx_http_llm_model_t *m, ngx_str_t *value);


typedef struct {
    ngx_http_upstream_srv_conf_t  *upstream;
    ngx_http_upstream_init_peer_pt init;
} ngx_http_llm_peer_init_t;


typedef struct {
    ngx_array_t                    models;     /* of ngx_http_llm_model_t */
    ngx_array_t                    inits;      /* of ngx_http_llm_peer_init_t */
    ngx_array_t                    backends;   /* of ngx_http_llm_backend_t */
    ngx_array_t                    passes;     /* llm_pass upstreams */
    ngx_array_t                    registered; /* upstreams with backends */
    ngx_array_t                    providers;  /* of ngx_http_llm_provider_t */
    char                          *engine_auth;  /* llm_engine_auth_file:
                                                    the secret; "" none */
    ngx_msec_t                     info_cache;
    ngx_shm_zone_t                *responses_store;  /* NULL: off */
    time_t                         responses_ttl;
    unsigned                       responses_set:1;
} ngx_http_llm_main_conf_t;


typedef struct {
    ngx_http_upstream_conf_t       upstream;
    ngx_flag_t                     api;
    ngx_flag_t                     health;
    ngx_flag_t                     fallback_header;
    ngx_msec_t                     sse_heartbeat;
    ngx_msec_t                     sse_flush_interval;
    size_t                         max_frame;
    ngx_array_t                   *cors;       /* llm_cors: of ngx_str_t;
                                                  empty: off */
    ngx_uint_t                     backend;    /* llm_pass's first backend */
    ngx_uint_t                     nbackends;
} ngx_http_llm_loc_conf_t;


/* The longest engine secret (llm_engine_auth_file). */
#define NGX_HTTP_LLM_AUTH_MAX  256

/* The length of a string literal. */
#define ngx_http_llm_len(s)  (sizeof(s) - 1)


/* A growable byte string in r->pool. */
typedef struct {
    u_char                        *data;
    size_t                         len;
    size_t                         cap;
} ngx_http_llm_sbuf_t;


typedef struct {
    ngx_http_llm_sbuf_t            id;
    ngx_http_llm_sbuf_t            name;
    ngx_http_llm_sbuf_t            arguments;
} ngx_http_llm_call_t;


typedef struct {
    ngx_http_llm_sbuf_t            content;
    ngx_http_llm_sbuf_t            reasoning;
    ngx_array_t                    calls;      /* of ngx_http_llm_call_t */
    json_t                        *logprobs;   /* non-stream: array */
    ngx_uint_t                     text_offset;
    Llm__FinishReason              finish;
    ngx_str_t                      stop_sequence;  /* the stop string
                                                      that ended it */
    unsigned                       role_sent:1;
    unsigned                       offset_set:1;
} ngx_http_llm_choice_t;


struct ngx_http_llm_ctx_s {
    ngx_http_request_t            *request;
    ngx_uint_t                     route;
    ngx_http_llm_dialect_t        *dialect;    /* NULL: OpenAI chat/compl. */
    void                          *dialect_ctx;  /* the dialect's state */
    ngx_uint_t                     info;       /* NGX_HTTP_LLM_INFO_* */
    ngx_str_t                      info_id;

    /* the request */
    ngx_str_t                      requested;  /* model name as asked */
    ngx_http_llm_model_t          *model;      /* answering; NULL: llm_pass */
    ngx_str_t                      model_name; /* for "model" in bodies */
    ngx_str_t                      model_json; /* the same, JSON-escaped */
    ngx_array_t                    chain;      /* of ngx_http_llm_model_t * */
    ngx_uint_t                     chain_pos;
    ngx_uint_t                     fallbacks;
    Llm__GenerateRequest          *gen;
    Llm__EmbedRequest             *emb;        /* /v1/embeddings */
    json_t                        *json;       /* the (chat) request as
                                                  JSON, for providers */
    void                          *pstate;     /* a provider's answer */
    ngx_http_llm_sbuf_t            emb_data;   /* the data items so far */
    ngx_uint_t                     emb_count;
    ngx_uint_t                     n;
    ngx_uint_t                     max_tokens;
    ngx_uint_t                     prompt_est;  /* body bytes / 4 */
    ngx_int_t                      completion_logprobs;  /* -1: off */
    unsigned                       stream:1;
    unsigned                       include_usage:1;
    unsigned                       logprobs:1;
    unsigned                       echo:1;
    unsigned                       legacy_functions:1;  /* functions[] */
    unsigned                       common_headers:1;  /* x-request-id.. */
    unsigned                       emb_base64:1;

    /* the response */
    u_char                         id[48];
    size_t                         id_len;
    time_t                         created;
    ngx_str_t                      fingerprint;
    ngx_str_t                      head;       /* SSE chunk start, cached */
    ngx_http_llm_choice_t         *choices;
    ngx_uint_t                     prompt_tokens;
    ngx_uint_t                     completion_tokens;
    ngx_uint_t                     cached_tokens;
    ngx_uint_t                     streamed_tokens;  /* counted in deltas */
    uint64_t                       cost;       /* picodollars, at record */
    ngx_str_t                      finish_reason;
    ngx_str_t                      error_code;
    ngx_msec_t                     start;
    ngx_msec_t                     ttft;
    unsigned                       header_done:1;   /* first byte decided */
    unsigned                       done:1;          /* terminal event */
    unsigned                       got_token:1;
    unsigned                       upstream_error:1;
    unsigned                       rewrite:1;       /* error filter active */
    unsigned                       rewrite_sent:1;
    unsigned                       recorded:1;
    unsigned                       inflight:1;
    unsigned                       client_gone:1;   /* Cancel sent */
    unsigned                       backpressure:1;  /* overloaded/draining */
    unsigned                       hb_due:1;        /* Ping sent: start */
    unsigned                       provider:1;      /* talking HTTP */
    ngx_msec_t                     read_timeout;    /* llm_read_timeout */
    ngx_msec_t                     ttft_limit;      /* the model's ttft= */
    ngx_msec_t                     ttft_deadline;   /* 0: none */

    /* an engine error before the first byte, for the final answer */
    ngx_uint_t                     err_status;
    const char                    *err_type;
    const char                    *err_code;
    const char                    *err_param;
    ngx_str_t                      err_message;
    ngx_str_t                      err_body;

    /* keys and limits */
    ngx_http_llm_key_t            *key;
    ngx_http_llm_ticket_t          ticket;
    unsigned                       ticket_set:1;

    /* the frame parser */
    ngx_uint_t                     state;
    u_char                         lenbuf[4];
    ngx_uint_t                     lenpos;
    size_t                         frame_len;
    size_t                         frame_got;
    u_char                        *frame;
    size_t                         frame_cap;

    /* streaming timers */
    ngx_event_t                    heartbeat;
    ngx_event_t                    flush;
    unsigned                       unflushed:1;

    /* the request's own llm_next_upstream, see ngx_http_llm_engine_error */
    ngx_uint_t                     next_upstream;

    /* the wrapped balancer */
    ngx_event_get_peer_pt          inner_get;
    ngx_event_free_peer_pt         inner_free;
    void                          *inner_data;
#if (NGX_HTTP_SSL)
    ngx_event_set_peer_session_pt  inner_set_session;
    ngx_event_save_peer_session_pt inner_save_session;
#endif
};


/* ngx_http_llm_handler.c */
ngx_int_t ngx_http_llm_handler(ngx_http_request_t *r);
ngx_int_t ngx_http_llm_store_admit(ngx_http_request_t *r,
    ngx_http_llm_ctx_t *ctx);
void ngx_http_llm_resume(ngx_http_request_t *r, ngx_http_llm_ctx_t *ctx,
    ngx_http_llm_decision_t *d);
ngx_http_llm_ctx_t *ngx_http_llm_get_ctx(ngx_http_request_t *r);
u_char *ngx_http_llm_request_id(ngx_http_llm_ctx_t *ctx);
ngx_table_elt_t *ngx_http_llm_find_header(ngx_http_request_t *r,
    const char *name);

/* ngx_http_llm_cors.c */
ngx_int_t ngx_http_llm_cors_preflight(ngx_http_request_t *r);
ngx_int_t ngx_http_llm_response_headers(ngx_http_request_t *r,
    ngx_http_llm_ctx_t *ctx);
ngx_http_llm_model_t *ngx_http_llm_find_model(ngx_http_llm_main_conf_t *mcf,
    ngx_str_t *name);
void ngx_http_llm_record(ngx_http_request_t *r, ngx_http_llm_ctx_t *ctx,
    ngx_uint_t status);

/* ngx_http_llm_info.c */
ngx_int_t ngx_http_llm_info_route(ngx_http_request_t *r,
    ngx_http_llm_ctx_t *ctx);

/* ngx_http_llm_error.c */
u_char *ngx_http_llm_error_json(ngx_pool_t *pool, ngx_http_llm_error_t *err,
    size_t *len);
u_char *ngx_http_llm_error_body(ngx_http_llm_ctx_t *ctx, ngx_pool_t *pool,
    ngx_http_llm_error_t *err, size_t *len);
void ngx_http_llm_map_error(Llm__Error *e, ngx_http_llm_error_t *err);
ngx_int_t ngx_http_llm_retry_after(ngx_http_request_t *r);
ngx_int_t ngx_http_llm_error_filter_init(ngx_conf_t *cf);
ngx_int_t ngx_http_llm_write_failed(ngx_http_request_t *r,
    ngx_http_llm_ctx_t *ctx);

/* ngx_http_llm_backend.c */
ngx_int_t ngx_http_llm_register_backends(ngx_conf_t *cf,
    ngx_http_llm_main_conf_t *mcf);
ngx_int_t ngx_http_llm_backends_find(ngx_http_llm_main_conf_t *mcf,
    ngx_http_upstream_srv_conf_t *uscf, ngx_uint_t *first, ngx_uint_t *n);
ngx_int_t ngx_http_llm_probe(ngx_http_llm_backend_t *be, ngx_log_t *log);
void ngx_http_llm_request_backends(ngx_http_request_t *r,
    ngx_http_llm_ctx_t *ctx, ngx_uint_t *first, ngx_uint_t *n);
void ngx_http_llm_backend_refresh(ngx_http_request_t *r,
    ngx_http_llm_backend_t *be);
ngx_int_t ngx_http_llm_engine_limits(ngx_http_request_t *r,
    ngx_http_llm_ctx_t *ctx, ngx_http_llm_engine_limits_t *lim);
void ngx_http_llm_limits_merge(ngx_http_llm_engine_limits_t *lim,
    ngx_http_llm_engine_limits_t *l);
void ngx_http_llm_fingerprint(ngx_http_request_t *r,
    ngx_http_llm_ctx_t *ctx);

/* ngx_http_llm_balancer.c */
ngx_int_t ngx_http_llm_wrap_peer_init(ngx_conf_t *cf,
    ngx_http_upstream_srv_conf_t *uscf);
char *ngx_http_llm_balance(ngx_conf_t *cf, ngx_command_t *cmd, void *conf);

/* ngx_http_llm_upstream.c */
ngx_int_t ngx_http_llm_upstream_start(ngx_http_request_t *r,
    ngx_http_llm_ctx_t *ctx);
ngx_int_t ngx_http_llm_use_model(ngx_http_request_t *r,
    ngx_http_llm_ctx_t *ctx, ngx_http_llm_model_t *m);
ngx_int_t ngx_http_llm_reinit_request(ngx_http_request_t *r);
ngx_int_t ngx_http_llm_header_event(ngx_http_request_t *r,
    ngx_http_llm_ctx_t *ctx, Llm__Event *ev);
ngx_int_t ngx_http_llm_stream_event(ngx_http_request_t *r,
    ngx_http_llm_ctx_t *ctx, Llm__Event *ev, ngx_chain_t ***ll);
ngx_int_t ngx_http_llm_engine_error(ngx_http_request_t *r,
    ngx_http_llm_ctx_t *ctx, Llm__Error *e);
ngx_int_t ngx_http_llm_upstream_error(ngx_http_request_t *r,
    ngx_http_llm_ctx_t *ctx, ngx_http_llm_error_t *err, ngx_uint_t mask);
ngx_int_t ngx_http_llm_input_filter_init(void *data);
void ngx_http_llm_arm_read(ngx_http_request_t *r, ngx_http_llm_ctx_t *ctx);
void ngx_http_llm_arm_ttft(ngx_http_request_t *r, ngx_http_llm_ctx_t *ctx);

/* ngx_http_llm_module.c: a secret's file (first line, visible ASCII) */
ngx_int_t ngx_http_llm_conf_secret(ngx_conf_t *cf, ngx_str_t *name,
    const char *what, size_t max, ngx_str_t *out);

/* ngx_http_llm_backend.c: llm_engine_auth_file */
char *ngx_http_llm_engine_auth_file(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);

/* ngx_http_llm_provider.c */
char *ngx_http_llm_provider(ngx_conf_t *cf, ngx_command_t *cmd, void *conf);
ngx_int_t ngx_http_llm_providers_resolve(ngx_conf_t *cf,
    ngx_http_llm_main_conf_t *mcf);
void ngx_http_llm_provider_setup(ngx_http_request_t *r,
    ngx_http_llm_ctx_t *ctx, ngx_http_llm_model_t *m);
ngx_int_t ngx_http_llm_provider_encode(ngx_http_request_t *r,
    ngx_http_llm_ctx_t *ctx, ngx_chain_t **out);
ngx_int_t ngx_http_llm_keep_json(ngx_http_request_t *r,
    ngx_http_llm_ctx_t *ctx, json_t *root);
ngx_int_t ngx_http_llm_frame(ngx_http_llm_ctx_t *ctx, u_char **pos,
    u_char *last, size_t max, u_char **frame, size_t *len);

/* ngx_http_llm_request.c */
ngx_int_t ngx_http_llm_parse_request(ngx_http_request_t *r,
    ngx_http_llm_ctx_t *ctx, u_char *body, size_t len,
    ngx_http_llm_error_t *err);
ngx_int_t ngx_http_llm_parse_json(ngx_http_request_t *r,
    ngx_http_llm_ctx_t *ctx, json_t *root, size_t len,
    ngx_http_llm_error_t *err);
json_t *ngx_http_llm_load_json(ngx_http_request_t *r, u_char *body,
    size_t len, ngx_http_llm_error_t *err);
ngx_int_t ngx_http_llm_check_limits(ngx_http_request_t *r,
    ngx_http_llm_ctx_t *ctx, ngx_http_llm_error_t *err);
ngx_int_t ngx_http_llm_encode(ngx_http_request_t *r, ngx_http_llm_ctx_t *ctx,
    ngx_chain_t **out);

/* ngx_http_llm_embeddings.c */
ngx_int_t ngx_http_llm_embed_parse(ngx_http_request_t *r,
    ngx_http_llm_ctx_t *ctx, u_char *body, size_t len,
    ngx_http_llm_error_t *err);
ngx_int_t ngx_http_llm_embed_encode(ngx_http_request_t *r,
    ngx_http_llm_ctx_t *ctx, ngx_chain_t **out);
ngx_int_t ngx_http_llm_embed_add(ngx_http_request_t *r,
    ngx_http_llm_ctx_t *ctx, Llm__Embedding *e);
ngx_int_t ngx_http_llm_embed_body(ngx_http_request_t *r,
    ngx_http_llm_ctx_t *ctx, Llm__EmbedDone *done, ngx_str_t *body);

/* ngx_http_llm_responses.c: POST /v1/responses */
extern ngx_http_llm_dialect_t  ngx_http_llm_responses_dialect;
char *ngx_http_llm_responses_store(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);

/* ngx_http_llm_json.c */
size_t ngx_http_llm_utf8_seq(const u_char *s, size_t len);
void ngx_http_llm_utf8_cpystrn(u_char *dst, const u_char *src, size_t size);
size_t ngx_http_llm_json_escape_len(const u_char *s, size_t len);
u_char *ngx_http_llm_json_escape(u_char *d, const u_char *s, size_t len);
u_char *ngx_http_llm_uint(u_char *p, uint64_t n);
ngx_int_t ngx_http_llm_json_str(ngx_pool_t *pool, ngx_str_t *out,
    const u_char *s, size_t len);
ngx_int_t ngx_http_llm_sbuf_add(ngx_pool_t *pool, ngx_http_llm_sbuf_t *s,
    const u_char *data, size_t len);
json_t *ngx_http_llm_json_text(const u_char *s, size_t len);
const char *ngx_http_llm_json_type_name(json_t *j);

/* ngx_http_llm_response.c */
size_t ngx_http_llm_answer_head_len(ngx_http_llm_ctx_t *ctx,
    const char *object);
u_char *ngx_http_llm_answer_head(ngx_http_llm_ctx_t *ctx, u_char *p,
    const char *object);
ngx_http_llm_choice_t *ngx_http_llm_choice(ngx_http_llm_ctx_t *ctx,
    ngx_uint_t index);
const char *ngx_http_llm_finish_name(ngx_http_llm_ctx_t *ctx,
    Llm__FinishReason f);
void ngx_http_llm_finish(ngx_http_llm_ctx_t *ctx, Llm__Done *done);
json_t *ngx_http_llm_chat_logprobs(Llm__Delta *d);
ngx_int_t ngx_http_llm_completion_logprobs(ngx_http_llm_ctx_t *ctx,
    ngx_http_llm_choice_t *ch, Llm__Delta *d);
ngx_int_t ngx_http_llm_collect(ngx_http_request_t *r,
    ngx_http_llm_ctx_t *ctx, Llm__Event *ev);
ngx_int_t ngx_http_llm_body(ngx_http_request_t *r, ngx_http_llm_ctx_t *ctx,
    ngx_str_t *body);

/* ngx_http_llm_anthropic.c: /v1/messages, /v1/messages/count_tokens */
extern ngx_http_llm_dialect_t  ngx_http_llm_anthropic_dialect;
extern ngx_http_llm_dialect_t  ngx_http_llm_anthropic_count_dialect;

/* ngx_http_llm_sse.c */
ngx_chain_t *ngx_http_llm_chain_buf(ngx_http_request_t *r, size_t size);
ngx_int_t ngx_http_llm_sse_event(ngx_http_request_t *r,
    ngx_http_llm_ctx_t *ctx, Llm__Event *ev, ngx_chain_t ***ll);
ngx_int_t ngx_http_llm_sse_raw(ngx_http_request_t *r, ngx_chain_t ***ll,
    u_char *data, size_t len, ngx_uint_t flush);

extern ngx_module_t  ngx_http_llm_module;
extern ngx_module_t  ngx_http_llm_keys_module;


#endif /* _NGX_HTTP_LLM_MODULE_H_INCLUDED_ */
