/*
 * The module's request JSON parser and validator
 * (ngx_http_llm_parse_request in ngx_http_llm_request.c,
 * ngx_http_llm_embed_parse in ngx_http_llm_embeddings.c, and the
 * /v1/responses dialect's parser in ngx_http_llm_responses.c) called as a
 * function on a fake request (ngx_fuzz.h), then what follows it in the
 * module: a valid request is encoded as the engine frame
 * (ngx_http_llm_encode), a refused one becomes the OpenAI error body
 * (ngx_http_llm_error_json).
 *
 * Input: byte 0 bit 0 picks the route (0 chat completions, 1 legacy
 * completions), bit 1 attaches an API key, bit 2 makes it /v1/embeddings
 * instead, bit 3 /v1/responses (the store off: no shared zone); the rest
 * is the body.
 *
 * Checks: the encoded frame is one length-prefixed llm.Request that
 * decodes, with the model and prompt or messages of the body; every
 * error body is valid JSON and valid UTF-8.
 */

#include "ngx_fuzz.h"

static ngx_http_llm_key_t  fuzz_key;

int
LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void) argc;
    (void) argv;
    ngx_fuzz_init();
    ngx_str_set(&fuzz_key.name, "fuzz-key");
    return 0;
}

static void
check_frame(ngx_chain_t *out, int kind)
{
    u_char        *p;
    size_t         len, n;
    ngx_buf_t     *b;
    Llm__Request  *rq;

    if (out == NULL || out->next != NULL) {
        fprintf(stderr, "encode: expected one buffer\n");
        abort();
    }
    b = out->buf;
    p = b->pos;
    len = b->last - b->pos;
    if (len < 4) {
        fprintf(stderr, "encode: %zu bytes, no frame\n", len);
        abort();
    }
    n = (size_t) p[0] << 24 | (size_t) p[1] << 16 | (size_t) p[2] << 8
        | p[3];
    if (n != len - 4) {
        fprintf(stderr, "encode: frame says %zu bytes, has %zu\n", n,
                len - 4);
        abort();
    }
    rq = llm__request__unpack(NULL, n, p + 4);
    if (rq == NULL || (int) rq->kind_case != kind) {
        fprintf(stderr, "encode: the frame is not the route's request\n");
        abort();
    }
    if (kind == LLM__REQUEST__KIND_EMBED && rq->embed->n_inputs == 0) {
        fprintf(stderr, "encode: an Embed without inputs\n");
        abort();
    }
    llm__request__free_unpacked(rq, NULL);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    u_char                *body, *ej;
    size_t                 ejlen;
    ngx_int_t              rc;
    ngx_chain_t           *out = NULL;
    ngx_http_request_t    *r;
    ngx_http_llm_ctx_t    *ctx;
    ngx_http_llm_error_t   err;

    if (size < 1) {
        return 0;
    }
    r = ngx_fuzz_request();
    if (r == NULL) {
        return 0;
    }
    ctx = ngx_http_llm_get_ctx(r);
    /* the body in a buffer of its own size, as nginx reads it */
    body = ngx_pnalloc(r->pool, size - 1 ? size - 1 : 1);
    if (ctx == NULL || body == NULL) {
        goto done;
    }
    ngx_memcpy(body, data + 1, size - 1);
    ctx->route = (data[0] & 1) ? NGX_HTTP_LLM_ROUTE_COMPLETION
                               : NGX_HTTP_LLM_ROUTE_CHAT;
    ctx->key = (data[0] & 2) ? &fuzz_key : NULL;
    if (data[0] & 4) {
        ctx->route = NGX_HTTP_LLM_ROUTE_EMBEDDINGS;

    } else if (data[0] & 8) {
        ctx->route = NGX_HTTP_LLM_ROUTE_CHAT;
        ctx->dialect = &ngx_http_llm_responses_dialect;
    }

    ngx_memzero(&err, sizeof(err));
    if (ctx->route == NGX_HTTP_LLM_ROUTE_EMBEDDINGS) {
        rc = ngx_http_llm_embed_parse(r, ctx, body, size - 1, &err);
    } else if (ctx->dialect) {
        rc = ctx->dialect->parse(r, ctx, body, size - 1, &err);
    } else {
        rc = ngx_http_llm_parse_request(r, ctx, body, size - 1, &err);
    }

    if (rc == NGX_OK) {
        if ((ctx->gen == NULL && ctx->emb == NULL)
            || ctx->requested.len == 0)
        {
            fprintf(stderr, "parse: NGX_OK without a request or model\n");
            abort();
        }
        if (ngx_http_llm_encode(r, ctx, &out) != NGX_OK) {
            goto done;
        }
        check_frame(out, ctx->emb ? LLM__REQUEST__KIND_EMBED
                                  : LLM__REQUEST__KIND_GENERATE);

    } else if (rc == NGX_DECLINED) {
        if (err.status < 400 || err.status > 599) {
            fprintf(stderr, "parse: refused with status %lu\n",
                    (unsigned long) err.status);
            abort();
        }
        ej = ngx_http_llm_error_body(ctx, r->pool, &err, &ejlen);
        if (ej != NULL) {
            ngx_fuzz_check_json("error body", ej, ejlen);
        }
    }

done:
    ngx_destroy_pool(r->pool);
    return 0;
}
