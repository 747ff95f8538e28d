
/*
 * ngx_http_llm_module: declarations shared between the module's files.
 *
 *   ngx_http_llm_module.c    directives, routes, request/response JSON
 *   ngx_http_llm_upstream.c  the engine protocol over ngx_http_upstream_t
 *   ngx_http_llm_openai.c    OpenAI request validation, bodies, SSE chunks
 *   ngx_http_llm_keys.c      API keys (ngx_http_llm_keys_module)
 *   ngx_http_llm_limit.c     per-key limits in a shared zone
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


/* API keys (ngx_http_llm_keys.c). */

typedef struct {
    ngx_str_t                   name;      /* the key's name, for logs */
    u_char                      hash[32];  /* SHA-256 of the key */
    ngx_uint_t                  rpm;       /* requests/min, 0: unlimited */
    ngx_uint_t                  tpm;       /* tokens/min, 0: unlimited */
    uint64_t                    quota;     /* total tokens, 0: none */
    ngx_array_t                *models;    /* of ngx_str_t; NULL: all */
    ngx_uint_t                  index;     /* position in the keys file */
} ngx_http_llm_key_t;


/*
 * Authenticates r from "Authorization: Bearer <key>" or "x-api-key".
 * Returns NGX_OK with *key set, NGX_DECLINED when no llm_keys is
 * configured for the location (open access, *key = NULL), or an error
 * already sent with ngx_http_llm_send_error() (401), whose return value
 * is passed back.
 */
ngx_int_t ngx_http_llm_auth(ngx_http_request_t *r, ngx_http_llm_key_t **key);

/* 1 if the key may use the model (by its configured name), else 0. */
ngx_uint_t ngx_http_llm_key_allows(ngx_http_llm_key_t *key, ngx_str_t *model);


/* Limits (ngx_http_llm_limit.c). */

typedef struct {
    ngx_http_llm_key_t         *key;
    ngx_uint_t                  reserved;  /* tokens reserved at admission */
    ngx_uint_t                  settled;   /* 1 once settled */

    /* values for the x-ratelimit-* headers, filled at admission */
    ngx_uint_t                  limit_requests;
    ngx_uint_t                  remaining_requests;
    ngx_msec_t                  reset_requests;
    ngx_uint_t                  limit_tokens;
    ngx_uint_t                  remaining_tokens;
    ngx_msec_t                  reset_tokens;
} ngx_http_llm_ticket_t;


/*
 * Admits one request of key against its requests/min and tokens/min
 * (reserving est_tokens = prompt estimate + max_tokens) and its quota.
 * NGX_OK: admitted, t filled, settle later.  Otherwise a 429 has been sent
 * (rate_limit_exceeded with type requests or tokens, or
 * insufficient_quota) with Retry-After, and its return value is returned.
 */
ngx_int_t ngx_http_llm_limit_admit(ngx_http_request_t *r,
    ngx_http_llm_key_t *key, ngx_uint_t est_tokens,
    ngx_http_llm_ticket_t *t);

/* Replaces the reservation with the tokens actually used.  Idempotent. */
void ngx_http_llm_limit_settle(ngx_http_request_t *r,
    ngx_http_llm_ticket_t *t, ngx_uint_t used_tokens);

/* Adds the six x-ratelimit-* response headers from t. */
ngx_int_t ngx_http_llm_limit_headers(ngx_http_request_t *r,
    ngx_http_llm_ticket_t *t);


/* Metrics (ngx_http_llm_metrics.c). */

typedef struct {
    ngx_str_t                   model;     /* the model that answered */
    ngx_uint_t                  status;    /* HTTP status sent */
    ngx_uint_t                  prompt_tokens;
    ngx_uint_t                  completion_tokens;
    ngx_uint_t                  cached_tokens;
    ngx_msec_t                  ttft;      /* first token, 0 if none */
    ngx_msec_t                  duration;
    unsigned                    rate_limited:1;
    unsigned                    fallback:1;
    unsigned                    upstream_error:1;
    unsigned                    stream:1;
} ngx_http_llm_sample_t;


void ngx_http_llm_metrics_inflight(ngx_http_request_t *r, ngx_int_t delta);
void ngx_http_llm_metrics_record(ngx_http_request_t *r,
    ngx_http_llm_sample_t *s);


extern ngx_module_t  ngx_http_llm_module;
extern ngx_module_t  ngx_http_llm_keys_module;


#endif /* _NGX_HTTP_LLM_MODULE_H_INCLUDED_ */
