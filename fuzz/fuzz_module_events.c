/*
 * The module's side of the engine protocol: the resumable frame parser
 * (ngx_http_llm_frame), the Event decoder, and the renderers fed with
 * whatever events come: the SSE stream (ngx_http_llm_stream_event ->
 * ngx_http_llm_sse_event), the non-streaming body (ngx_http_llm_collect,
 * ngx_http_llm_body; Embedding events through ngx_http_llm_embed_add
 * and ngx_http_llm_embed_body, floats or base64), the error mapping
 * (ngx_http_llm_map_error, ngx_http_llm_error_json), and the Info probe's
 * reader.  This file
 * includes ngx_http_llm_upstream.c and ngx_http_llm_backend.c for their
 * static functions; the rest of the module and nginx's core are linked as
 * built.
 *
 * Input: byte 0 bits 0-1 pick the client request (a fixed body, parsed
 * by the real parser: chat streaming with usage and logprobs, chat
 * non-streaming n=2 with logprobs and tools, completions streaming with
 * logprobs and echo, completions non-streaming n=2 with logprobs); bits
 * 2-3 the size of the pieces the engine's bytes arrive in (all, 1, 3,
 * 61); bit 4 feeds the bytes to the Info probe's reader instead; bit 5
 * renders embeddings as base64; bit 6 makes the request a /v1/responses
 * one instead (bit 0: streamed, both with tools and reasoning effort),
 * rendered by the dialect (ngx_http_llm_responses.c).  The rest is what
 * the engine sends.
 *
 * Checks: every SSE event's data and every body is valid JSON and valid
 * UTF-8; a stream ends with [DONE] after Done, or with an error event; a
 * Responses stream is "event:" and "data:" pairs ending with
 * response.completed, response.incomplete or response.failed.
 */

#include "../ngx_http_llm_module/ngx_http_llm_upstream.c"
#include "../ngx_http_llm_module/ngx_http_llm_backend.c"

#include "ngx_fuzz.h"

static const char *bodies[4] = {
    ("{\"model\":\"m\",\"stream\":true,\"stream_options\":"
     "{\"include_usage\":true},\"logprobs\":true,\"top_logprobs\":3,"
     "\"n\":2,\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}"),

    ("{\"model\":\"m\",\"logprobs\":true,\"top_logprobs\":2,\"n\":2,"
     "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"tools\":"
     "[{\"type\":\"function\",\"function\":{\"name\":\"f\","
     "\"parameters\":{\"type\":\"object\"}}}]}"),

    ("{\"model\":\"m\",\"stream\":true,\"logprobs\":2,\"echo\":true,"
     "\"prompt\":\"Once\"}"),

    ("{\"model\":\"m\",\"logprobs\":1,\"n\":2,\"prompt\":\"Once\"}"),
};

static const char *resp_bodies[2] = {
    ("{\"model\":\"m\",\"input\":[{\"role\":\"user\",\"content\":"
     "\"hi\"}],\"instructions\":\"be brief\",\"reasoning\":"
     "{\"effort\":\"low\"},\"tools\":[{\"type\":\"function\","
     "\"name\":\"f\",\"parameters\":{\"type\":\"object\"}}]}"),

    ("{\"model\":\"m\",\"stream\":true,\"input\":\"hi\","
     "\"reasoning\":{\"effort\":\"low\"},\"tools\":[{\"type\":"
     "\"function\",\"name\":\"f\",\"parameters\":{\"type\":"
     "\"object\"}}]}"),
};

static const size_t chunks[4] = { (size_t) -1, 1, 3, 61 };

int
LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void) argc;
    (void) argv;
    ngx_fuzz_init();
    return 0;
}

/* Each "data: ...\n\n" event of the chain is JSON or [DONE]. */
static void
check_sse(ngx_chain_t *out, int done_expected)
{
    u_char      *all, *p, *end, *e;
    size_t       len = 0;
    ngx_chain_t *cl;
    int          saw_done = 0, saw_error = 0;

    for (cl = out; cl; cl = cl->next) {
        len += cl->buf->last - cl->buf->pos;
    }
    all = malloc(len + 1);
    if (all == NULL) {
        return;
    }
    p = all;
    for (cl = out; cl; cl = cl->next) {
        p = ngx_cpymem(p, cl->buf->pos, cl->buf->last - cl->buf->pos);
    }
    end = p;
    for (p = all; p < end; p = e + 2) {
        e = ngx_strlcasestrn(p, end, (u_char *) "\n\n", 2 - 1);
        if (e == NULL) {
            fprintf(stderr, "SSE: an event without its blank line: %.*s\n",
                    (int) (end - p), p);
            abort();
        }
        if (*p == ':') {
            continue;                       /* a comment (heartbeat) */
        }
        if (e - p < 6 || ngx_strncmp(p, "data: ", 6) != 0) {
            fprintf(stderr, "SSE: not a data line: %.*s\n", (int) (e - p),
                    p);
            abort();
        }
        if (saw_done) {
            fprintf(stderr, "SSE: an event after [DONE]\n");
            abort();
        }
        if (e - p == 12 && ngx_strncmp(p + 6, "[DONE]", 6) == 0) {
            saw_done = 1;
            continue;
        }
        ngx_fuzz_check_json("SSE data", p + 6, e - p - 6);
        if (ngx_strlcasestrn(p, e, (u_char *) "{\"error\":", 9 - 1)
            == p + 6)
        {
            saw_error = 1;
        }
    }
    if (done_expected && !saw_done && !saw_error) {
        fprintf(stderr, "SSE: the stream ended with neither [DONE] nor an "
                "error\n");
        abort();
    }
    free(all);
}

/*
 * A /v1/responses stream: "event: T\ndata: {...}\n\n" with T the data's
 * type, the last one response.completed, .incomplete or .failed.
 */
static void
check_resp_sse(ngx_chain_t *out)
{
    u_char      *all, *p, *end, *e, *nl;
    size_t       len = 0, tlen;
    ngx_chain_t *cl;
    int          final = 0;
    json_t      *j;
    const char  *type;

    for (cl = out; cl; cl = cl->next) {
        len += cl->buf->last - cl->buf->pos;
    }
    all = malloc(len + 1);
    if (all == NULL) {
        return;
    }
    p = all;
    for (cl = out; cl; cl = cl->next) {
        p = ngx_cpymem(p, cl->buf->pos, cl->buf->last - cl->buf->pos);
    }
    end = p;
    for (p = all; p < end; p = e + 2) {
        e = ngx_strlcasestrn(p, end, (u_char *) "\n\n", 2 - 1);
        if (e == NULL) {
            fprintf(stderr, "SSE: an event without its blank line\n");
            abort();
        }
        if (*p == ':') {
            continue;
        }
        nl = memchr(p, '\n', e - p);
        if (final || nl == NULL || ngx_strncmp(p, "event: ", 7) != 0
            || e - nl < 7 || ngx_strncmp(nl + 1, "data: ", 6) != 0)
        {
            fprintf(stderr, "SSE: not an event and data pair (or after "
                    "the last one): %.*s\n", (int) (e - p), p);
            abort();
        }
        ngx_fuzz_check_json("SSE data", nl + 7, e - nl - 7);
        j = json_loadb((char *) nl + 7, e - nl - 7, 0, NULL);
        type = json_string_value(json_object_get(j, "type"));
        tlen = nl - p - 7;
        if (type == NULL || ngx_strlen(type) != tlen
            || ngx_strncmp(type, p + 7, tlen) != 0)
        {
            fprintf(stderr, "SSE: the event's name is not its type\n");
            abort();
        }
        final = ngx_strcmp(type, "response.completed") == 0
                || ngx_strcmp(type, "response.incomplete") == 0
                || ngx_strcmp(type, "response.failed") == 0;
        json_decref(j);
    }
    if (!final) {
        fprintf(stderr, "SSE: a Responses stream without its end\n");
        abort();
    }
    free(all);
}

static ngx_str_t  probe_in;      /* what the probe's recv returns */

static ssize_t
fuzz_recv(ngx_connection_t *c, u_char *buf, size_t size)
{
    ngx_str_t *in = &probe_in;
    size_t     n = ngx_min(size, in->len);

    if (n == 0) {
        return 0;
    }
    ngx_memcpy(buf, in->data, n);
    in->data += n;
    in->len -= n;
    return n;
}

/* The Info probe's reader on a fake connection holding the input. */
static void
fuzz_probe(const uint8_t *data, size_t size)
{
    static u_char           buf[65536];
    ngx_event_t             rev;
    ngx_connection_t        c;
    ngx_http_llm_backend_t  be;

    ngx_memzero(&be, sizeof(be));
    ngx_memzero(&c, sizeof(c));
    ngx_memzero(&rev, sizeof(rev));
    ngx_str_set(&be.name, "unix:/fuzz.sock");
    be.buf = buf;
    be.size = sizeof(buf);
    probe_in.data = (u_char *) data;
    probe_in.len = size;
    c.data = &be;
    c.recv = fuzz_recv;
    c.log = &ngx_fuzz_log;
    rev.data = &c;
    rev.log = &ngx_fuzz_log;
    ngx_http_llm_probe_read(&rev);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    u_char              *pos, *last, *end, *frame, *bp;
    size_t               len, step;
    ngx_int_t            rc;
    ngx_str_t            body;
    ngx_chain_t         *out = NULL, **ll = &out;
    Llm__Event          *ev;
    ngx_http_request_t  *r;
    ngx_http_llm_ctx_t  *ctx;
    ngx_http_llm_error_t err;
    int                  stream, started = 0, ended = 0;
    const char          *req;

    if (size < 1) {
        return 0;
    }
    if (data[0] & 0x10) {
        fuzz_probe(data + 1, size - 1);
        return 0;
    }
    r = ngx_fuzz_request();
    if (r == NULL) {
        return 0;
    }
    ctx = ngx_http_llm_get_ctx(r);
    if (ctx == NULL) {
        goto done;
    }
    ctx->route = (data[0] & 2) ? NGX_HTTP_LLM_ROUTE_COMPLETION
                               : NGX_HTTP_LLM_ROUTE_CHAT;
    ctx->emb_base64 = (data[0] & 0x20) != 0;
    req = bodies[data[0] & 3];
    if (data[0] & 0x40) {
        ctx->route = NGX_HTTP_LLM_ROUTE_CHAT;
        ctx->dialect = &ngx_http_llm_responses_dialect;
        req = resp_bodies[data[0] & 1];
    }
    len = ngx_strlen(req);
    bp = ngx_pnalloc(r->pool, len);
    if (bp == NULL) {
        goto done;
    }
    ngx_memcpy(bp, req, len);
    if ((ctx->dialect ? ctx->dialect->parse(r, ctx, bp, len, &err)
                      : ngx_http_llm_parse_request(r, ctx, bp, len, &err))
        != NGX_OK)
    {
        fprintf(stderr, "the fixed request %d does not parse: %.*s\n",
                data[0] & 3, (int) err.message.len, err.message.data);
        abort();
    }
    ctx->model_name = ctx->requested;
    if (ngx_http_llm_json_str(r->pool, &ctx->model_json, ctx->requested.data,
                              ctx->requested.len)
        != NGX_OK)
    {
        goto done;
    }
    stream = ctx->stream;
    step = chunks[(data[0] >> 2) & 3];

    /* the engine's bytes, in pieces; the input stays where it is so the
     * parser's "whole frame in the buffer" path reads it in place */
    pos = (u_char *) data + 1;
    end = (u_char *) data + size;
    while (pos < end && !ended) {
        last = (size_t) (end - pos) > step ? pos + step : end;
        for ( ;; ) {
            rc = ngx_http_llm_frame(ctx, &pos, last, ngx_fuzz_llcf.max_frame,
                                    &frame, &len);
            if (rc == NGX_AGAIN) {
                break;
            }
            if (rc == NGX_ERROR) {
                ended = 1;
                break;
            }
            ev = ngx_http_llm_unpack(len, frame);
            if (ev == NULL || ev->kind_case == LLM__EVENT__KIND__NOT_SET) {
                if (ev) {
                    ngx_http_llm_unpack_free(ev);
                }
                ended = 1;
                break;
            }
            if (ev->kind_case == LLM__EVENT__KIND_ERROR
                && (!stream || !started))
            {
                /* before the first byte: the error is the answer */
                ngx_http_llm_map_error(ev->error, &err);
                bp = ngx_http_llm_error_body(ctx, r->pool, &err, &len);
                if (bp) {
                    ngx_fuzz_check_json("error body", bp, len);
                }
                ctx->done = 1;
                rc = NGX_OK;

            } else if (stream) {
                if (ev->kind_case == LLM__EVENT__KIND_DELTA
                    || ev->kind_case == LLM__EVENT__KIND_TOOL_CALL
                    || ev->kind_case == LLM__EVENT__KIND_DONE)
                {
                    started = 1;
                    ctx->header_done = 1;
                }
                rc = ngx_http_llm_stream_event(r, ctx, ev, &ll);

            } else if (ev->kind_case == LLM__EVENT__KIND_DELTA
                       || ev->kind_case == LLM__EVENT__KIND_TOOL_CALL
                       || ev->kind_case == LLM__EVENT__KIND_DONE)
            {
                rc = ngx_http_llm_collect(r, ctx, ev);
                if (rc == NGX_OK && ev->kind_case == LLM__EVENT__KIND_DONE) {
                    ctx->done = 1;
                    if (ngx_http_llm_body(r, ctx, &body) == NGX_OK) {
                        ngx_fuzz_check_json("body", body.data, body.len);
                    }
                }

            } else if (ev->kind_case == LLM__EVENT__KIND_EMBEDDING) {
                /* a /v1/embeddings answer: its data items, then the body */
                rc = ngx_http_llm_embed_add(r, ctx, ev->embedding);

            } else if (ev->kind_case == LLM__EVENT__KIND_EMBED_DONE) {
                ctx->done = 1;
                rc = ngx_http_llm_embed_body(r, ctx, ev->embed_done, &body);
                if (rc == NGX_OK) {
                    ngx_fuzz_check_json("embeddings body", body.data,
                                        body.len);
                }

            } else {
                rc = NGX_OK;
            }
            ngx_http_llm_unpack_free(ev);
            if (rc != NGX_OK || ctx->done) {
                ended = 1;
                break;
            }
        }
        if (pos < last) {
            pos = last;     /* the parser stopped: drop the piece */
        }
    }

    if (stream && started) {
        /* as the upstream's finalize: a stream cut short gets an error */
        if (!ctx->done) {
            ctx->upstream_error = 1;
            ctx->done = 1;
            ctx->err_status = NGX_HTTP_BAD_GATEWAY;
            ngx_str_set(&ctx->error_code, "engine_disconnected");
            ngx_str_set(&ctx->err_message, "The inference engine closed "
                        "the stream before its end.");
            (void) ngx_http_llm_sse_event(r, ctx, NULL, &ll);
        }
        if (ctx->dialect) {
            check_resp_sse(out);
        } else {
            check_sse(out, 1);
        }
    }

done:
    ngx_destroy_pool(r->pool);
    return 0;
}
