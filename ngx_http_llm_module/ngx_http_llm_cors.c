
/*
 * ngx_http_llm_module: the headers every response of the module's
 * locations carries, whatever answered (the error filter calls
 * ngx_http_llm_response_headers once per request): x-request-id, and,
 * with llm_cors, the CORS headers for an allowed Origin; and the answer
 * to a CORS preflight (OPTIONS).
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "ngx_http_llm_module.h"


static ngx_table_elt_t *ngx_http_llm_cors_origin(ngx_http_request_t *r,
    ngx_uint_t *any);


/* The response headers a browser script may read. */

static u_char  ngx_http_llm_cors_expose[] =
    "x-request-id, x-llm-fallback, retry-after, "
    "x-ratelimit-limit-requests, x-ratelimit-remaining-requests, "
    "x-ratelimit-reset-requests, x-ratelimit-limit-tokens, "
    "x-ratelimit-remaining-tokens, x-ratelimit-reset-tokens";


/*
 * The request's Origin header when llm_cors allows it (*any: allowed as
 * "*"), else NULL: no llm_cors, no Origin, or one not in the list.
 */

static ngx_table_elt_t *
ngx_http_llm_cors_origin(ngx_http_request_t *r, ngx_uint_t *any)
{
    ngx_str_t                *o;
    ngx_uint_t                i;
    ngx_table_elt_t          *origin;
    ngx_http_llm_loc_conf_t  *llcf;

    *any = 0;

    llcf = ngx_http_get_module_loc_conf(r, ngx_http_llm_module);

    if (llcf->cors == NULL || llcf->cors->nelts == 0) {
        return NULL;
    }

    origin = ngx_http_llm_find_header(r, "Origin");
    if (origin == NULL || origin->value.len == 0) {
        return NULL;
    }

    o = llcf->cors->elts;

    for (i = 0; i < llcf->cors->nelts; i++) {
        if (o[i].len == 1 && o[i].data[0] == '*') {
            *any = 1;
            return origin;
        }

        if (o[i].len == origin->value.len
            && ngx_strncasecmp(o[i].data, origin->value.data, o[i].len) == 0)
        {
            return origin;
        }
    }

    return NULL;
}


/*
 * Adds x-request-id and, for an allowed Origin, Access-Control-Allow-Origin
 * (the origin itself, with Vary: Origin; or "*" when llm_cors allows any)
 * and Access-Control-Expose-Headers.
 */

ngx_int_t
ngx_http_llm_response_headers(ngx_http_request_t *r, ngx_http_llm_ctx_t *ctx)
{
    u_char           *id;
    ngx_uint_t        any;
    ngx_table_elt_t  *origin;

    id = ngx_http_llm_request_id(ctx);

    if (ngx_http_llm_header_out(r, "x-request-id", id, ctx->id_len)
        != NGX_OK)
    {
        return NGX_ERROR;
    }

    origin = ngx_http_llm_cors_origin(r, &any);
    if (origin == NULL) {
        return NGX_OK;
    }

    if (any) {
        if (ngx_http_llm_header_out(r, "Access-Control-Allow-Origin",
                                    (u_char *) "*", 1)
            != NGX_OK)
        {
            return NGX_ERROR;
        }

    } else if (ngx_http_llm_header_out(r, "Access-Control-Allow-Origin",
                                       origin->value.data,
                                       origin->value.len)
               != NGX_OK
               || ngx_http_llm_header_out(r, "Vary", (u_char *) "Origin",
                                          ngx_http_llm_len("Origin"))
                  != NGX_OK)
    {
        return NGX_ERROR;
    }

    return ngx_http_llm_header_out(r, "Access-Control-Expose-Headers",
                                   ngx_http_llm_cors_expose,
                                   sizeof(ngx_http_llm_cors_expose) - 1);
}


/*
 * OPTIONS on a route: with llm_cors and an Origin it allows, the
 * preflight's answer, 204 with the methods, the headers asked for in
 * Access-Control-Request-Headers (the SDKs send their own x-stainless-*
 * ones beside Authorization) and a day's Max-Age; the Allow-Origin comes
 * from ngx_http_llm_response_headers.  With llm_cors but an Origin it
 * does not allow: 403.  NGX_DECLINED otherwise (no llm_cors, or not a
 * preflight): the method is then refused as any other.
 */

ngx_int_t
ngx_http_llm_cors_preflight(ngx_http_request_t *r)
{
    ngx_int_t                 rc;
    ngx_uint_t                any;
    ngx_table_elt_t          *origin, *hdrs;
    ngx_http_llm_loc_conf_t  *llcf;

    llcf = ngx_http_get_module_loc_conf(r, ngx_http_llm_module);

    if (llcf->cors == NULL || llcf->cors->nelts == 0
        || ngx_http_llm_find_header(r, "Origin") == NULL
        || ngx_http_llm_find_header(r, "Access-Control-Request-Method")
           == NULL)
    {
        return NGX_DECLINED;
    }

    origin = ngx_http_llm_cors_origin(r, &any);

    if (origin == NULL) {
        return ngx_http_llm_send_errorf(r, NGX_HTTP_FORBIDDEN,
                                        "invalid_request_error",
                                        "origin_not_allowed", NULL,
                                        "This origin may not call the API "
                                        "from a browser (llm_cors).");
    }

    rc = ngx_http_discard_request_body(r);
    if (rc != NGX_OK) {
        return rc;
    }

    if (ngx_http_llm_header_out(r, "Access-Control-Allow-Methods",
                                (u_char *) "GET, POST, OPTIONS",
                                ngx_http_llm_len("GET, POST, OPTIONS"))
        != NGX_OK
        || ngx_http_llm_header_out(r, "Access-Control-Max-Age",
                                   (u_char *) "86400",
                                   ngx_http_llm_len("86400"))
           != NGX_OK)
    {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    hdrs = ngx_http_llm_find_header(r, "Access-Control-Request-Headers");

    if (ngx_http_llm_header_out(r, "Access-Control-Allow-Headers",
                                hdrs ? hdrs->value.data
                                     : (u_char *) "authorization, "
                                                  "content-type",
                                hdrs ? hdrs->value.len
                                     : ngx_http_llm_len("authorization, "
                                                        "content-type"))
        != NGX_OK)
    {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    r->headers_out.status = NGX_HTTP_NO_CONTENT;
    r->headers_out.content_length_n = 0;
    r->header_only = 1;

    return ngx_http_send_header(r);
}
