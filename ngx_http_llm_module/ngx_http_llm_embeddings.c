
/*
 * ngx_http_llm_module: POST /v1/embeddings.  The body parsed with jansson
 * into an EmbedRequest (input as a string, strings, token ids or lists of
 * token ids; encoding_format; dimensions; model; user), the frame encoded,
 * and the engine's Embedding events (one per input) written as OpenAI's
 * list of embedding objects, floats or base64 of little-endian float32,
 * the body completed at EmbedDone.  The engine checks
 * what depends on the model (tokens over the context, dimensions).
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include <math.h>
#include <stdio.h>

#include "ngx_http_llm_module.h"


#define NGX_HTTP_LLM_EMBED_MAX_INPUTS  2048     /* OpenAI's */


static ngx_int_t ngx_http_llm_embed_bad(ngx_http_request_t *r,
    ngx_http_llm_error_t *err, const char *code, const char *param,
    const char *fmt, ...);
static ngx_int_t ngx_http_llm_embed_input(ngx_http_request_t *r,
    ngx_http_llm_ctx_t *ctx, json_t *in, ngx_http_llm_error_t *err);
static ngx_int_t ngx_http_llm_embed_one(ngx_http_request_t *r, json_t *j,
    ngx_uint_t i, ngx_uint_t nested, Llm__EmbedInput *x,
    ngx_http_llm_error_t *err);
static ngx_int_t ngx_http_llm_embed_options(ngx_http_request_t *r,
    ngx_http_llm_ctx_t *ctx, json_t *root, ngx_http_llm_error_t *err);
static void ngx_http_llm_embed_cleanup(void *data);
static u_char *ngx_http_llm_embed_vector(ngx_http_llm_ctx_t *ctx,
    u_char *p, Llm__Embedding *e);


/* A 400 invalid_request_error with the message formatted into r->pool. */

static ngx_int_t
ngx_http_llm_embed_bad(ngx_http_request_t *r, ngx_http_llm_error_t *err,
    const char *code, const char *param, const char *fmt, ...)
{
    u_char   *p;
    va_list   args;

    p = ngx_pnalloc(r->pool, 512);
    if (p == NULL) {
        return NGX_ERROR;
    }

    err->status = NGX_HTTP_BAD_REQUEST;
    err->type = "invalid_request_error";
    err->code = code;
    err->param = param;
    err->message.data = p;

    va_start(args, fmt);
    err->message.len = ngx_vslprintf(p, p + 512, fmt, args) - p;
    va_end(args);

    return NGX_DECLINED;
}


static void
ngx_http_llm_embed_cleanup(void *data)
{
    json_decref(data);
}


/*
 * Parses and validates an embeddings body into ctx->emb.  NGX_OK;
 * NGX_DECLINED with err filled (400); NGX_ERROR on no memory.  Unknown
 * fields are ignored, as on the other routes.
 */

ngx_int_t
ngx_http_llm_embed_parse(ngx_http_request_t *r, ngx_http_llm_ctx_t *ctx,
    u_char *body, size_t len, ngx_http_llm_error_t *err)
{
    u_char               *p;
    json_t               *root, *j;
    ngx_uint_t            i;
    json_error_t          jerr;
    ngx_pool_cleanup_t   *cln;
    Llm__EmbedRequest    *e;

    root = json_loadb((const char *) body, len, 0, &jerr);
    if (root == NULL) {
        return ngx_http_llm_embed_bad(r, err, NULL, NULL,
                                      "We could not parse the JSON body of "
                                      "your request: %s at line %d, column "
                                      "%d (byte %d).", jerr.text, jerr.line,
                                      jerr.column, jerr.position);
    }

    cln = ngx_pool_cleanup_add(r->pool, 0);
    if (cln == NULL) {
        json_decref(root);
        return NGX_ERROR;
    }

    cln->handler = ngx_http_llm_embed_cleanup;
    cln->data = root;

    if (!json_is_object(root)) {
        return ngx_http_llm_embed_bad(r, err, NULL, NULL,
                                      "The request body must be a JSON "
                                      "object.");
    }

    e = ngx_pcalloc(r->pool, sizeof(Llm__EmbedRequest));
    if (e == NULL || ngx_http_llm_keep_json(r, ctx, root) != NGX_OK) {
        return NGX_ERROR;
    }

    llm__embed_request__init(e);
    ctx->emb = e;

    p = ngx_cpymem(ctx->id, "emb-", 4);
    for (i = 0; i < 24; i++) {
        *p++ = "0123456789abcdefghijklmnopqrstuvwxyz"[ngx_random() % 36];
    }
    *p = '\0';
    ctx->id_len = p - ctx->id;
    e->request_id = (char *) ctx->id;

    if (ctx->key) {
        e->key_id = ngx_pnalloc(r->pool, ctx->key->name.len + 1);
        if (e->key_id == NULL) {
            return NGX_ERROR;
        }
        ngx_cpystrn((u_char *) e->key_id, ctx->key->name.data,
                    ctx->key->name.len + 1);
    }

    /* model: required, a non-empty string */

    j = json_object_get(root, "model");
    if (j == NULL) {
        return ngx_http_llm_embed_bad(r, err, "missing_required_parameter",
                                      "model", "Missing required parameter: "
                                      "'model'.");
    }

    if (!json_is_string(j) || json_string_length(j) == 0
        || ngx_strlen(json_string_value(j)) != json_string_length(j))
    {
        return ngx_http_llm_embed_bad(r, err, "invalid_type", "model",
                                      "Invalid type for 'model': expected "
                                      "a non-empty string.");
    }

    ctx->requested.data = (u_char *) json_string_value(j);
    ctx->requested.len = json_string_length(j);
    e->model = (char *) ctx->requested.data;

    j = json_object_get(root, "input");
    if (j == NULL) {
        return ngx_http_llm_embed_bad(r, err, "missing_required_parameter",
                                      "input", "Missing required parameter: "
                                      "'input'.");
    }

    if (ngx_http_llm_embed_input(r, ctx, j, err) != NGX_OK) {
        return err->message.len ? NGX_DECLINED : NGX_ERROR;
    }

    if (ngx_http_llm_embed_options(r, ctx, root, err) != NGX_OK) {
        return err->message.len ? NGX_DECLINED : NGX_ERROR;
    }

    /* the estimate admission reserves, as on the other routes */

    ctx->prompt_est = len / 4;

    return NGX_OK;
}


/* encoding_format, dimensions, user. */

static ngx_int_t
ngx_http_llm_embed_options(ngx_http_request_t *r, ngx_http_llm_ctx_t *ctx,
    json_t *root, ngx_http_llm_error_t *err)
{
    json_t  *j;

    j = json_object_get(root, "encoding_format");
    if (j != NULL && !json_is_null(j)) {
        if (!json_is_string(j)) {
            return ngx_http_llm_embed_bad(r, err, "invalid_type",
                                          "encoding_format",
                                          "Invalid type for "
                                          "'encoding_format': expected "
                                          "a string.");
        }

        if (ngx_strcmp(json_string_value(j), "base64") == 0) {
            ctx->emb_base64 = 1;

        } else if (ngx_strcmp(json_string_value(j), "float") != 0) {
            return ngx_http_llm_embed_bad(r, err, "invalid_value",
                                          "encoding_format",
                                          "Invalid value for "
                                          "'encoding_format': expected "
                                          "'float' or 'base64'.");
        }
    }

    j = json_object_get(root, "dimensions");
    if (j != NULL && !json_is_null(j)) {
        if (!json_is_integer(j)) {
            return ngx_http_llm_embed_bad(r, err, "invalid_type",
                                          "dimensions",
                                          "Invalid type for 'dimensions': "
                                          "expected an integer.");
        }

        if (json_integer_value(j) < 1 || json_integer_value(j) > 65536) {
            return ngx_http_llm_embed_bad(r, err, "invalid_value",
                                          "dimensions",
                                          "Invalid value for 'dimensions': "
                                          "must be between 1 and 65536.");
        }

        ctx->emb->dimensions = (uint32_t) json_integer_value(j);
    }

    j = json_object_get(root, "user");
    if (j != NULL && !json_is_null(j) && !json_is_string(j)) {
        return ngx_http_llm_embed_bad(r, err, "invalid_type", "user",
                                      "Invalid type for 'user': expected "
                                      "a string.");
    }

    return NGX_OK;
}


/*
 * input: a string, an array of strings, an array of token ids, or an
 * array of arrays of token ids (OpenAI's four forms).
 */

static ngx_int_t
ngx_http_llm_embed_input(ngx_http_request_t *r, ngx_http_llm_ctx_t *ctx,
    json_t *in, ngx_http_llm_error_t *err)
{
    size_t             n, i;
    json_t            *first;
    Llm__EmbedInput   *xs, **px;
    Llm__EmbedRequest *e;

    e = ctx->emb;

    if (json_is_string(in)) {
        n = 1;

    } else if (json_is_array(in)) {
        n = json_array_size(in);

        if (n == 0) {
            return ngx_http_llm_embed_bad(r, err, "invalid_value", "input",
                                          "'input' must not be empty.");
        }

        first = json_array_get(in, 0);

        if (json_is_integer(first)) {
            n = 1;              /* one input of token ids */
        }

    } else {
        return ngx_http_llm_embed_bad(r, err, "invalid_type", "input",
                                      "Invalid type for 'input': expected "
                                      "a string, an array of strings, an "
                                      "array of token ids or an array of "
                                      "arrays of token ids.");
    }

    if (n > NGX_HTTP_LLM_EMBED_MAX_INPUTS) {
        return ngx_http_llm_embed_bad(r, err, "invalid_value", "input",
                                      "'input' holds %uz inputs; at most "
                                      "%d are allowed per request.", n,
                                      NGX_HTTP_LLM_EMBED_MAX_INPUTS);
    }

    xs = ngx_pcalloc(r->pool, n * sizeof(Llm__EmbedInput));
    px = ngx_palloc(r->pool, n * sizeof(Llm__EmbedInput *));
    if (xs == NULL || px == NULL) {
        return NGX_ERROR;
    }

    for (i = 0; i < n; i++) {
        llm__embed_input__init(&xs[i]);
        px[i] = &xs[i];
    }

    e->inputs = px;
    e->n_inputs = n;

    if (json_is_string(in) || json_is_integer(json_array_get(in, 0))) {
        return ngx_http_llm_embed_one(r, in, 0, 0, &xs[0], err);
    }

    for (i = 0; i < n; i++) {
        if (ngx_http_llm_embed_one(r, json_array_get(in, i), i, 1, &xs[i],
                                   err)
            != NGX_OK)
        {
            return NGX_DECLINED;
        }
    }

    return NGX_OK;
}


/*
 * One input: a non-empty string, or a non-empty array of token ids (ints
 * in 0..2^31-1; the engine checks them against its vocabulary).
 */

static ngx_int_t
ngx_http_llm_embed_one(ngx_http_request_t *r, json_t *j, ngx_uint_t i,
    ngx_uint_t nested, Llm__EmbedInput *x, ngx_http_llm_error_t *err)
{
    size_t      k, n;
    json_t     *t;
    json_int_t  v;
    u_char     *param;

    param = ngx_pnalloc(r->pool, sizeof("input[2048]"));
    if (param == NULL) {
        return NGX_ERROR;
    }

    if (nested) {
        ngx_sprintf(param, "input[%ui]%Z", i);

    } else {
        ngx_cpystrn(param, (u_char *) "input", sizeof("input"));
    }

    if (json_is_string(j)) {
        if (json_string_length(j) == 0) {
            return ngx_http_llm_embed_bad(r, err, "invalid_value",
                                          (char *) param,
                                          "'%s' must not be an empty "
                                          "string.", param);
        }

        if (ngx_strlen(json_string_value(j)) != json_string_length(j)) {
            return ngx_http_llm_embed_bad(r, err, "invalid_value",
                                          (char *) param,
                                          "'%s' must not contain NUL "
                                          "characters.", param);
        }

        x->text = (char *) json_string_value(j);
        return NGX_OK;
    }

    if (!json_is_array(j)) {
        return ngx_http_llm_embed_bad(r, err, "invalid_type",
                                      (char *) param,
                                      "Invalid type for '%s': expected a "
                                      "string or an array of token ids.",
                                      param);
    }

    n = json_array_size(j);
    if (n == 0) {
        return ngx_http_llm_embed_bad(r, err, "invalid_value",
                                      (char *) param,
                                      "'%s' must not be an empty array.",
                                      param);
    }

    x->is_tokens = 1;
    x->n_tokens = n;
    x->tokens = ngx_palloc(r->pool, n * sizeof(int32_t));
    if (x->tokens == NULL) {
        return NGX_ERROR;
    }

    for (k = 0; k < n; k++) {
        t = json_array_get(j, k);
        v = json_is_integer(t) ? json_integer_value(t) : -1;

        if (v < 0 || v > 0x7fffffff) {
            return ngx_http_llm_embed_bad(r, err, "invalid_type",
                                          (char *) param,
                                          "Invalid value for '%s': every "
                                          "element of an array of token "
                                          "ids must be a non-negative "
                                          "integer (element %uz is not).",
                                          param, k);
        }

        x->tokens[k] = (int32_t) v;
    }

    return NGX_OK;
}


/* Request{embed} as one length-prefixed frame in a new chain. */

ngx_int_t
ngx_http_llm_embed_encode(ngx_http_request_t *r, ngx_http_llm_ctx_t *ctx,
    ngx_chain_t **out)
{
    size_t        len;
    ngx_buf_t    *b;
    ngx_chain_t  *cl;
    Llm__Request  req = LLM__REQUEST__INIT;

    if (ctx->model) {
        /* the model table chose this engine: "whatever you serve" */
        ctx->emb->model = "";
    }

    req.kind_case = LLM__REQUEST__KIND_EMBED;
    req.embed = ctx->emb;
    req.auth = ((ngx_http_llm_main_conf_t *)
                ngx_http_get_module_main_conf(r, ngx_http_llm_module))
               ->engine_auth;

    len = llm__request__get_packed_size(&req);

    b = ngx_create_temp_buf(r->pool, len + 4);
    if (b == NULL) {
        return NGX_ERROR;
    }

    b->last[0] = (u_char) (len >> 24);
    b->last[1] = (u_char) (len >> 16);
    b->last[2] = (u_char) (len >> 8);
    b->last[3] = (u_char) len;

    b->last += 4;
    b->last += llm__request__pack(&req, b->last);

    cl = ngx_alloc_chain_link(r->pool);
    if (cl == NULL) {
        return NGX_ERROR;
    }

    cl->buf = b;
    cl->next = NULL;
    *out = cl;

    return NGX_OK;
}


/*
 * One vector: a JSON array of floats (%.9g: every float32 reads back
 * exactly) or a base64 string of its little-endian float32 bytes.
 */

static u_char *
ngx_http_llm_embed_vector(ngx_http_llm_ctx_t *ctx, u_char *p,
    Llm__Embedding *e)
{
    u_char     *raw;
    size_t      k;
    uint32_t    bits;
    ngx_str_t   src, dst;

    if (ctx->emb_base64) {
        /* the raw bytes first, in the tail of the room reserved */
        raw = p + ngx_base64_encoded_length(e->n_values * 4) + 2;

        for (k = 0; k < e->n_values; k++) {
            ngx_memcpy(&bits, &e->values[k], 4);
            raw[4 * k] = (u_char) bits;
            raw[4 * k + 1] = (u_char) (bits >> 8);
            raw[4 * k + 2] = (u_char) (bits >> 16);
            raw[4 * k + 3] = (u_char) (bits >> 24);
        }

        src.data = raw;
        src.len = e->n_values * 4;
        *p++ = '"';
        dst.data = p;
        ngx_encode_base64(&dst, &src);
        p += dst.len;
        *p++ = '"';

        return p;
    }

    *p++ = '[';

    for (k = 0; k < e->n_values; k++) {
        if (k) {
            *p++ = ',';
        }

        /* libc's %g: nginx's formatter has no shortest float form */
        p += snprintf((char *) p, 20, "%.9g",
                      isfinite(e->values[k]) ? (double) e->values[k] : 0.0);
    }

    *p++ = ']';

    return p;
}


/*
 * One Embedding event: its data item appended to ctx->emb_data, written
 * in place.  The engine sends them in input order; another index is an
 * invalid answer (NGX_DECLINED).
 */

ngx_int_t
ngx_http_llm_embed_add(ngx_http_request_t *r, ngx_http_llm_ctx_t *ctx,
    Llm__Embedding *e)
{
    u_char               *p;
    size_t                need, cap;
    ngx_http_llm_sbuf_t  *s;

    if (e->index != ctx->emb_count) {
        ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                      "llm: engine sent embedding %uD, expected %ui",
                      e->index, ctx->emb_count);
        return NGX_DECLINED;
    }

    need = sizeof(",{\"object\":\"embedding\",\"index\":,"
                  "\"embedding\":}") + NGX_INT_T_LEN
           + (ctx->emb_base64
              ? ngx_base64_encoded_length(e->n_values * 4) + 4
                + e->n_values * 4
              : e->n_values * 20 + 2);

    s = &ctx->emb_data;

    if (s->len + need > s->cap) {
        cap = ngx_max(s->cap * 2, s->len + need);

        p = ngx_pnalloc(r->pool, cap);
        if (p == NULL) {
            return NGX_ERROR;
        }

        if (s->len) {
            ngx_memcpy(p, s->data, s->len);
        }

        s->data = p;
        s->cap = cap;
    }

    p = ngx_sprintf(s->data + s->len, "%s{\"object\":\"embedding\","
                    "\"index\":%ui,\"embedding\":",
                    ctx->emb_count ? "," : "", ctx->emb_count);
    p = ngx_http_llm_embed_vector(ctx, p, e);
    *p++ = '}';

    s->len = p - s->data;
    ctx->emb_count++;

    return NGX_OK;
}


/*
 * The answer, at EmbedDone: {"object":"list","data":[...],"model":...,
 * "usage":{"prompt_tokens":N,"total_tokens":N}}.  The engine must have
 * sent one Embedding per input (else NGX_DECLINED).
 */

ngx_int_t
ngx_http_llm_embed_body(ngx_http_request_t *r, ngx_http_llm_ctx_t *ctx,
    Llm__EmbedDone *done, ngx_str_t *body)
{
    u_char  *p;
    size_t   len;

    ctx->prompt_tokens = done->usage ? done->usage->prompt_tokens : 0;

    if (ctx->emb && ctx->emb_count != ctx->emb->n_inputs) {
        ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                      "llm: engine sent %ui embeddings for %uz inputs",
                      ctx->emb_count, ctx->emb->n_inputs);
        return NGX_DECLINED;
    }

    len = sizeof("{\"object\":\"list\",\"data\":[],\"model\":\"\","
                 "\"usage\":{\"prompt_tokens\":,\"total_tokens\":}}")
          + ctx->emb_data.len + ctx->model_json.len + 2 * NGX_INT_T_LEN;

    body->data = ngx_pnalloc(r->pool, len);
    if (body->data == NULL) {
        return NGX_ERROR;
    }

    p = ngx_cpymem(body->data, "{\"object\":\"list\",\"data\":[",
                   sizeof("{\"object\":\"list\",\"data\":[") - 1);
    if (ctx->emb_data.len) {
        /* none yet: its data may be NULL, which memcpy must not get */
        p = ngx_cpymem(p, ctx->emb_data.data, ctx->emb_data.len);
    }

    p = ngx_sprintf(p, "],\"model\":\"%V\",\"usage\":"
                    "{\"prompt_tokens\":%ui,\"total_tokens\":%ui}}",
                    &ctx->model_json, ctx->prompt_tokens,
                    ctx->prompt_tokens);

    body->len = p - body->data;

    return NGX_OK;
}
