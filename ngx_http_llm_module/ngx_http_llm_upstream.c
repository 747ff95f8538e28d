
/*
 * ngx_http_llm_module: the engine protocol over ngx_http_upstream_t.
 *
 * A request is one frame (4-byte big-endian length + protobuf Request);
 * the answer a sequence of Event frames.  The upstream runs unbuffered:
 * process_header consumes events until the first byte for the client is
 * decided (the first token for a stream, Done for a JSON body, or an
 * error), input_filter renders the rest as SSE events.  The frame parser
 * is resumable: it keeps its state in the request context and copies a
 * frame that spans reads, so any split of the byte stream works.
 *
 * Failover: the upstream's own next-upstream handles connect errors,
 * timeouts before the first byte and engine errors reported as
 * "invalid header"; when every server of a model has failed, the wrapped
 * balancer (ngx_http_llm_balancer.c) re-initializes the peer with the
 * next model of the fallback chain and re-encodes the request for it.
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "ngx_http_llm_module.h"


/* the states of the frame parser (ngx_http_llm_frame) */

enum {
    NGX_HTTP_LLM_FRAME_LEN = 0,
    NGX_HTTP_LLM_FRAME_BODY
};


static ngx_int_t ngx_http_llm_create_request(ngx_http_request_t *r);
static ngx_int_t ngx_http_llm_process_header(ngx_http_request_t *r);
static ngx_int_t ngx_http_llm_start_response(ngx_http_request_t *r,
    ngx_http_llm_ctx_t *ctx, ngx_uint_t status, off_t length,
    ngx_uint_t sse);
static ngx_int_t ngx_http_llm_whole_body(ngx_http_request_t *r,
    ngx_str_t *body);
static ngx_int_t ngx_http_llm_input_filter(void *data, ssize_t bytes);
static void ngx_http_llm_terminal(ngx_http_request_t *r,
    ngx_http_llm_ctx_t *ctx);
static void ngx_http_llm_abort_request(ngx_http_request_t *r);
static void ngx_http_llm_finalize_request(ngx_http_request_t *r,
    ngx_int_t rc);
static void ngx_http_llm_heartbeat_handler(ngx_event_t *ev);
static void ngx_http_llm_flush_handler(ngx_event_t *ev);
static void ngx_http_llm_kick(ngx_http_request_t *r);
static ngx_int_t ngx_http_llm_embed_event(ngx_http_request_t *r,
    ngx_http_llm_ctx_t *ctx, Llm__Event *ev);
static void ngx_http_llm_no_retry(ngx_http_request_t *r);
static void ngx_http_llm_rd_check_broken(ngx_http_request_t *r);
static void ngx_http_llm_client_gone(ngx_http_request_t *r,
    ngx_http_llm_ctx_t *ctx);
static ngx_int_t ngx_http_llm_cancel_running(ngx_http_request_t *r,
    ngx_http_llm_ctx_t *ctx);
static ngx_int_t ngx_http_llm_send_control(ngx_http_request_t *r,
    ngx_connection_t *c, Llm__Request__KindCase kind);
static void ngx_http_llm_gone_event(ngx_http_request_t *r,
    ngx_http_llm_ctx_t *ctx, Llm__Event *ev);
static ngx_int_t ngx_http_llm_pb_varint(u_char **p, u_char *last,
    uint64_t *v);
static void *ngx_http_llm_arena_get(size_t size);
static Llm__Event *ngx_http_llm_unpack_delta(size_t len, u_char *data);


/*
 * protobuf-c allocations for one event: a bump arena reused for every
 * event, since a worker decodes and releases events one at a time;
 * events larger than it fall back to malloc.  Holds nothing between two
 * events, so it is not state that could outlive a reload.
 */

#define NGX_HTTP_LLM_ARENA  16384

static uint64_t    ngx_http_llm_arena[NGX_HTTP_LLM_ARENA / 8];
static size_t      ngx_http_llm_arena_used;
static ngx_uint_t  ngx_http_llm_arena_mallocs;


static void *
ngx_http_llm_arena_alloc(void *data, size_t size)
{
    u_char  *p;

    size = (size + 15) & ~((size_t) 15);

    if (ngx_http_llm_arena_used + size <= NGX_HTTP_LLM_ARENA) {
        p = (u_char *) ngx_http_llm_arena + ngx_http_llm_arena_used;
        ngx_http_llm_arena_used += size;
        return p;
    }

    ngx_http_llm_arena_mallocs++;

    return malloc(size);
}


static void
ngx_http_llm_arena_free(void *data, void *p)
{
    if ((u_char *) p >= (u_char *) ngx_http_llm_arena
        && (u_char *) p < (u_char *) ngx_http_llm_arena + NGX_HTTP_LLM_ARENA)
    {
        return;
    }

    free(p);
}


static ProtobufCAllocator  ngx_http_llm_pb_allocator = {
    ngx_http_llm_arena_alloc,
    ngx_http_llm_arena_free,
    NULL
};


static Llm__Event *
ngx_http_llm_unpack(size_t len, u_char *data)
{
    Llm__Event  *ev;

    ngx_http_llm_arena_used = 0;
    ngx_http_llm_arena_mallocs = 0;

    ev = ngx_http_llm_unpack_delta(len, data);
    if (ev) {
        return ev;
    }

    ngx_http_llm_arena_used = 0;

    return llm__event__unpack(&ngx_http_llm_pb_allocator, len, data);
}


/*
 * A protobuf varint at *p, before last, into *v; advances *p.  NGX_ERROR
 * when it is cut off or longer than 10 bytes.
 */

static ngx_int_t
ngx_http_llm_pb_varint(u_char **p, u_char *last, uint64_t *v)
{
    u_char      *q;
    uint64_t     r;
    ngx_uint_t   shift;

    r = 0;

    for (q = *p, shift = 0; q < last && shift < 70; q++, shift += 7) {
        r |= (uint64_t) (*q & 0x7f) << shift;

        if (!(*q & 0x80)) {
            *p = q + 1;
            *v = r;
            return NGX_OK;
        }
    }

    return NGX_ERROR;
}


/* Arena memory for the Delta fast path, or NULL when it is full. */

static void *
ngx_http_llm_arena_get(size_t size)
{
    u_char  *p;

    size = (size + 15) & ~((size_t) 15);

    if (ngx_http_llm_arena_used + size > NGX_HTTP_LLM_ARENA) {
        return NULL;
    }

    p = (u_char *) ngx_http_llm_arena + ngx_http_llm_arena_used;
    ngx_http_llm_arena_used += size;

    return p;
}


/*
 * The event of every generated token, decoded without protobuf-c's
 * descriptor walk (about 1,100 instructions an event, the largest part
 * of a short answer's cost in the worker): an Event that is one Delta
 * with index, text, packed tokens and reasoning, as llm-engine sends it.
 * The result is what llm__event__unpack() gives for the same bytes, in
 * the arena.  NULL for anything else (another kind, logprobs, unpacked
 * or repeated tokens, a field of another wire type, more than the arena
 * holds), which the generic decoder then takes as before.
 */

static Llm__Event *
ngx_http_llm_unpack_delta(size_t len, u_char *data)
{
    u_char      *p, *last, *end, *q;
    char        *s;
    size_t       n;
    uint64_t     v, tag;
    Llm__Delta  *d;
    Llm__Event  *ev;

    static const Llm__Event  ev_init = LLM__EVENT__INIT;
    static const Llm__Delta  d_init = LLM__DELTA__INIT;

    p = data;
    last = data + len;

    if (len < 2 || *p++ != 0x1a
        || ngx_http_llm_pb_varint(&p, last, &v) != NGX_OK
        || v != (uint64_t) (last - p))
    {
        return NULL;
    }

    ev = ngx_http_llm_arena_get(sizeof(Llm__Event));
    d = ngx_http_llm_arena_get(sizeof(Llm__Delta));

    if (ev == NULL || d == NULL) {
        return NULL;
    }

    *ev = ev_init;
    *d = d_init;
    ev->kind_case = LLM__EVENT__KIND_DELTA;
    ev->delta = d;

    while (p < last) {

        if (ngx_http_llm_pb_varint(&p, last, &tag) != NGX_OK) {
            return NULL;
        }

        if (tag == 0x08) {                      /* index, varint */
            if (ngx_http_llm_pb_varint(&p, last, &v) != NGX_OK) {
                return NULL;
            }

            d->index = (uint32_t) v;
            continue;
        }

        if (tag != 0x12 && tag != 0x1a && tag != 0x2a) {
            return NULL;
        }

        /* length-delimited: text, packed tokens, reasoning */

        if (ngx_http_llm_pb_varint(&p, last, &v) != NGX_OK
            || v > (uint64_t) (last - p))
        {
            return NULL;
        }

        end = p + v;

        if (tag == 0x1a) {
            if (d->n_tokens) {
                return NULL;
            }

            for (n = 0, q = p; q < end; q++) {
                n += !(*q & 0x80);
            }

            if (n == 0 || (end[-1] & 0x80)) {
                return NULL;
            }

            d->tokens = ngx_http_llm_arena_get(n * sizeof(int32_t));
            if (d->tokens == NULL) {
                return NULL;
            }

            while (p < end) {
                if (ngx_http_llm_pb_varint(&p, end, &v) != NGX_OK) {
                    return NULL;
                }

                d->tokens[d->n_tokens++] = (int32_t) v;
            }

            continue;
        }

        s = ngx_http_llm_arena_get(v + 1);
        if (s == NULL) {
            return NULL;
        }

        ngx_memcpy(s, p, v);
        s[v] = '\0';
        p = end;

        if (tag == 0x12) {
            d->text = s;

        } else {
            d->reasoning = s;
        }
    }

    return ev;
}


static void
ngx_http_llm_unpack_free(Llm__Event *ev)
{
    if (ngx_http_llm_arena_mallocs) {
        llm__event__free_unpacked(ev, &ngx_http_llm_pb_allocator);
    }

    ngx_http_llm_arena_used = 0;
    ngx_http_llm_arena_mallocs = 0;
}


/*
 * Creates the upstream for a validated generate request in ctx and starts
 * it.  The upstream finalizes the request.
 */

ngx_int_t
ngx_http_llm_upstream_start(ngx_http_request_t *r, ngx_http_llm_ctx_t *ctx)
{
    ngx_http_upstream_t       *u;
    ngx_http_upstream_conf_t  *conf;
    ngx_http_llm_loc_conf_t   *llcf;

    llcf = ngx_http_get_module_loc_conf(r, ngx_http_llm_module);

    if (ctx->model && ctx->model->provider && ctx->gen
        && ctx->gen->count_only)
    {
        return ngx_http_llm_send_errorf(r, NGX_HTTP_BAD_REQUEST,
                                        "invalid_request_error",
                                        "invalid_value", "model",
                                        "Counting tokens is not available "
                                        "for '%V', a model of a remote "
                                        "provider.", &ctx->model->name);
    }

    if (ngx_http_upstream_create(r) != NGX_OK) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    u = r->upstream;

    conf = ngx_palloc(r->pool, sizeof(ngx_http_upstream_conf_t));
    if (conf == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    *conf = llcf->upstream;

    /*
     * A client that leaves is noticed by ngx_http_llm_rd_check_broken()
     * instead of the upstream's own check, which would close the engine
     * connection at once: the engine is told to stop with a Cancel frame
     * and its answer says what the generation cost (billed like any
     * other).
     */

    conf->ignore_client_abort = 1;

    if (ctx->model) {
        conf->upstream = ctx->model->upstream;
    }

    if (conf->upstream == NULL) {
        ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                      "llm: no llm_pass for model \"%V\"", &ctx->requested);
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    u->conf = conf;
    ctx->read_timeout = conf->read_timeout;

    u->output.tag = (ngx_buf_tag_t) &ngx_http_llm_module;
    u->abort_request = ngx_http_llm_abort_request;
    u->finalize_request = ngx_http_llm_finalize_request;
    u->input_filter_init = ngx_http_llm_input_filter_init;
    u->input_filter_ctx = ctx;

    if (ngx_http_llm_use_model(r, ctx, ctx->model) != NGX_OK) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ngx_http_llm_fingerprint(r, ctx);

    ctx->inflight = 1;
    ngx_http_llm_metrics_inflight(r, 1);

    ctx->next_upstream = conf->next_upstream;

    if (ctx->stream && llcf->sse_heartbeat) {

        /*
         * Before the first token the heartbeat pings the engine, and the
         * response (headers, a keep-alive comment) starts at its Pong: an
         * engine that dies before then is still failed over.
         */

        ctx->heartbeat.handler = ngx_http_llm_heartbeat_handler;
        ctx->heartbeat.data = r;
        ctx->heartbeat.log = r->connection->log;
        ngx_add_timer(&ctx->heartbeat, llcf->sse_heartbeat);
    }

    /*
     * Set before ngx_http_upstream_init(), which may finalize (and free)
     * the request at once (no live upstream, connection refused): r is
     * not touched after it.  With ignore_client_abort the upstream leaves
     * the handler alone, and its finalization resets it.  A client EOF
     * that already arrived is looked at on the next event loop turn.
     */

    r->read_event_handler = ngx_http_llm_rd_check_broken;

    if (r->connection->read->ready) {
        ngx_post_event(r->connection->read, &ngx_posted_events);
    }

    ngx_http_upstream_init(r);

    return NGX_OK;
}


/*
 * Points the upstream at model m (NULL: llm_pass): the engine protocol,
 * or for a provider's model HTTP to the provider (ngx_http_llm_provider.c),
 * with m's first-token deadline.  At the start and when the chain moves
 * on (ngx_http_llm_balancer.c), before the request is encoded for it.
 */

ngx_int_t
ngx_http_llm_use_model(ngx_http_request_t *r, ngx_http_llm_ctx_t *ctx,
    ngx_http_llm_model_t *m)
{
    ngx_http_upstream_t      *u;
    ngx_http_llm_loc_conf_t  *llcf;

    u = r->upstream;
    llcf = ngx_http_get_module_loc_conf(r, ngx_http_llm_module);

    /* the location's timeouts, which a provider may set for itself */

    ctx->read_timeout = llcf->upstream.read_timeout;
    u->conf->read_timeout = ctx->read_timeout;
    u->conf->connect_timeout = llcf->upstream.connect_timeout;
    ctx->ttft_limit = m ? m->ttft : 0;

    if (m && m->provider) {
        ngx_http_llm_provider_setup(r, ctx, m);

    } else {
        ctx->provider = 0;
        ngx_str_set(&u->schema, "llm://");
#if (NGX_HTTP_SSL)
        u->ssl = 0;
#endif
        u->create_request = ngx_http_llm_create_request;
        u->reinit_request = ngx_http_llm_reinit_request;
        u->process_header = ngx_http_llm_process_header;
        u->input_filter = ngx_http_llm_input_filter;
    }

    ngx_http_llm_arm_ttft(r, ctx);

    return NGX_OK;
}


/*
 * A model's first-token deadline (ttft= of llm_model) is the read timeout
 * of an attempt until its first token: the upstream's timeout then moves
 * the request on (llm_next_upstream timeout) like a silent engine.  Set
 * at each attempt; ngx_http_llm_no_retry() restores the normal timeout.
 */

void
ngx_http_llm_arm_ttft(ngx_http_request_t *r, ngx_http_llm_ctx_t *ctx)
{
    ngx_http_upstream_t  *u;

    u = r->upstream;

    if (ctx->ttft_limit == 0 || ctx->got_token) {
        ctx->ttft_deadline = 0;
        return;
    }

    ctx->ttft_deadline = ngx_current_msec + ctx->ttft_limit;

    if (ctx->ttft_limit < ctx->read_timeout) {
        u->conf->read_timeout = ctx->ttft_limit;
    }
}


/*
 * The read timer while waiting for the first byte of the answer: the
 * normal read timeout, or what is left of the first-token deadline.
 */

void
ngx_http_llm_arm_read(ngx_http_request_t *r, ngx_http_llm_ctx_t *ctx)
{
    ngx_msec_t            t;
    ngx_msec_int_t        left;
    ngx_http_upstream_t  *u;

    u = r->upstream;

    if (u->peer.connection == NULL) {
        return;
    }

    t = ctx->read_timeout;

    if (ctx->ttft_deadline && !ctx->got_token) {
        left = (ngx_msec_int_t) (ctx->ttft_deadline - ngx_current_msec);
        t = ngx_min(t, (ngx_msec_t) ngx_max(left, 1));
    }

    ngx_add_timer(u->peer.connection->read, t);
}


/*
 * From the first token on (or once the client is gone) the work is not
 * idempotent: this request's copy of llm_next_upstream is emptied, so
 * neither the upstream's next-upstream (including its extra try on a
 * cached keepalive connection) nor its status test can start a second
 * generation.  reinit_request, which only runs before that, restores it.
 */

static void
ngx_http_llm_no_retry(ngx_http_request_t *r)
{
    ngx_http_llm_ctx_t  *ctx;

    if (r->upstream && r->upstream->conf) {
        r->upstream->conf->next_upstream = 0;

        ctx = ngx_http_get_module_ctx(r, ngx_http_llm_module);
        if (ctx && ctx->read_timeout) {
            r->upstream->conf->read_timeout = ctx->read_timeout;
            ctx->ttft_deadline = 0;
        }
    }
}


static ngx_int_t
ngx_http_llm_create_request(ngx_http_request_t *r)
{
    ngx_http_llm_ctx_t  *ctx;

    ctx = ngx_http_get_module_ctx(r, ngx_http_llm_module);

    return ngx_http_llm_encode(r, ctx, &r->upstream->request_bufs);
}


ngx_int_t
ngx_http_llm_reinit_request(ngx_http_request_t *r)
{
    ngx_uint_t              i;
    ngx_http_llm_ctx_t     *ctx;
    ngx_http_llm_choice_t  *ch;

    ctx = ngx_http_get_module_ctx(r, ngx_http_llm_module);

    if (ctx == NULL) {
        return NGX_OK;
    }

    ctx->state = NGX_HTTP_LLM_FRAME_LEN;
    ctx->lenpos = 0;
    ctx->frame_got = 0;
    ctx->done = 0;
    ctx->err_status = 0;
    ctx->prompt_tokens = 0;
    ctx->cached_tokens = 0;
    ctx->streamed_tokens = 0;
    ctx->got_token = 0;
    ctx->ttft = 0;
    ctx->backpressure = 0;
    ctx->hb_due = 0;
    r->upstream->conf->next_upstream = ctx->next_upstream;
    ngx_http_llm_arm_ttft(r, ctx);

    /* a JSON answer collected in part from the failed engine starts over */

    for (i = 0; ctx->choices && i < ctx->n; i++) {
        ch = &ctx->choices[i];

        ch->content.len = 0;
        ch->reasoning.len = 0;
        ch->calls.nelts = 0;
        ch->text_offset = 0;
        ch->offset_set = 0;
        ch->finish = LLM__FINISH_REASON__FINISH_NONE;
        ch->role_sent = 0;

        if (ch->logprobs) {
            json_decref(ch->logprobs);
            ch->logprobs = NULL;
        }
    }

    r->upstream->out_bufs = NULL;

    return NGX_OK;
}


/*
 * The resumable frame parser, a state machine (ctx->state:
 * NGX_HTTP_LLM_FRAME_LEN, the 4 length bytes; NGX_HTTP_LLM_FRAME_BODY,
 * the protobuf).  Walks *pos..last; returns NGX_OK with one
 * complete frame in *frame and *len (pointing into the input when the frame
 * arrived whole, else into ctx->frame), NGX_AGAIN when every byte was
 * consumed and more are needed, NGX_ERROR for a frame over max bytes.
 */

ngx_int_t
ngx_http_llm_frame(ngx_http_llm_ctx_t *ctx, u_char **pos, u_char *last,
    size_t max, u_char **frame, size_t *len)
{
    u_char  *p;
    size_t   n;

    p = *pos;

    if (ctx->state == NGX_HTTP_LLM_FRAME_LEN) {

        while (ctx->lenpos < 4 && p < last) {
            ctx->lenbuf[ctx->lenpos++] = *p++;
        }

        *pos = p;

        if (ctx->lenpos < 4) {
            return NGX_AGAIN;
        }

        ctx->frame_len = ((size_t) ctx->lenbuf[0] << 24)
                         | ((size_t) ctx->lenbuf[1] << 16)
                         | ((size_t) ctx->lenbuf[2] << 8)
                         | (size_t) ctx->lenbuf[3];
        ctx->lenpos = 0;

        if (ctx->frame_len > max) {
            return NGX_ERROR;
        }

        ctx->state = NGX_HTTP_LLM_FRAME_BODY;
        ctx->frame_got = 0;
    }

    /* NGX_HTTP_LLM_FRAME_BODY */

    if (ctx->frame_got == 0 && (size_t) (last - p) >= ctx->frame_len) {
        *frame = p;
        *len = ctx->frame_len;
        *pos = p + ctx->frame_len;
        ctx->state = NGX_HTTP_LLM_FRAME_LEN;
        return NGX_OK;
    }

    if (ctx->frame_cap < ctx->frame_len) {
        ngx_free(ctx->frame);

        ctx->frame_cap = ngx_max(ctx->frame_len, 4096);
        ctx->frame = ngx_alloc(ctx->frame_cap, ngx_cycle->log);
        if (ctx->frame == NULL) {
            ctx->frame_cap = 0;
            return NGX_ERROR;
        }
    }

    n = ngx_min((size_t) (last - p), ctx->frame_len - ctx->frame_got);
    ngx_memcpy(ctx->frame + ctx->frame_got, p, n);
    ctx->frame_got += n;
    *pos = p + n;

    if (ctx->frame_got < ctx->frame_len) {
        return NGX_AGAIN;
    }

    *frame = ctx->frame;
    *len = ctx->frame_len;
    ctx->frame_got = 0;
    ctx->state = NGX_HTTP_LLM_FRAME_LEN;

    return NGX_OK;
}


static ngx_int_t
ngx_http_llm_process_header(ngx_http_request_t *r)
{
    size_t                    len;
    u_char                   *frame;
    ngx_int_t                 rc;
    ngx_buf_t                *b;
    Llm__Event               *ev;
    ngx_http_upstream_t      *u;
    ngx_http_llm_ctx_t       *ctx;
    ngx_http_llm_loc_conf_t  *llcf;

    u = r->upstream;
    b = &u->buffer;
    ctx = ngx_http_get_module_ctx(r, ngx_http_llm_module);
    llcf = ngx_http_get_module_loc_conf(r, ngx_http_llm_module);

    /*
     * llm_read_timeout bounds the gap between two reads from the engine,
     * not the whole answer: the upstream arms the timer once when the
     * request is sent and does not re-arm it while it collects a header,
     * and a JSON answer is one long header here.
     */

    ngx_http_llm_arm_read(r, ctx);

    for ( ;; ) {

        if (ctx->client_gone && ctx->done) {
            /* whatever follows the terminal event is not ours */
            b->pos = b->last;
        }

        rc = ngx_http_llm_frame(ctx, &b->pos, b->last, llcf->max_frame,
                                &frame, &len);

        if (rc == NGX_AGAIN) {
            /* every byte is consumed or copied: the buffer can be reused */
            b->pos = b->start;
            b->last = b->start;
            return NGX_AGAIN;
        }

        if (rc == NGX_ERROR) {
            ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                          "llm: engine sent a frame of %uz bytes, over "
                          "llm_max_frame %uz", ctx->frame_len,
                          llcf->max_frame);
            return NGX_HTTP_UPSTREAM_INVALID_HEADER;
        }

        ev = ngx_http_llm_unpack(len, frame);
        if (ev == NULL || ev->kind_case == LLM__EVENT__KIND__NOT_SET) {
            ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                          "llm: engine sent an undecodable frame of %uz "
                          "bytes", len);
            if (ev) {
                ngx_http_llm_unpack_free(ev);
            }
            return NGX_HTTP_UPSTREAM_INVALID_HEADER;
        }

        if (ctx->client_gone) {
            ngx_http_llm_gone_event(r, ctx, ev);
            ngx_http_llm_unpack_free(ev);

            if (!ctx->done) {
                continue;
            }

            /*
             * The cancelled generation ended and its usage is known: the
             * response "starts" with 499 and no body, so the upstream's
             * own send path ends the request (the client connection has
             * its error flag set) and keeps the engine connection when
             * the exchange ended cleanly.
             */

            u->keepalive = (b->pos == b->last
                            && ctx->state == NGX_HTTP_LLM_FRAME_LEN
                            && ctx->lenpos == 0
                            && !u->headers_in.connection_close);

            return ngx_http_llm_start_response(r, ctx,
                                        NGX_HTTP_CLIENT_CLOSED_REQUEST, 0, 0);
        }

        rc = ngx_http_llm_header_event(r, ctx, ev);

        ngx_http_llm_unpack_free(ev);

        if (rc != NGX_AGAIN) {
            if (rc == NGX_OK && ctx->done && b->pos == b->last
                && ctx->state == NGX_HTTP_LLM_FRAME_LEN && ctx->lenpos == 0)
            {
                u->keepalive = !u->headers_in.connection_close;
            }

            return rc;
        }
    }
}


/*
 * One event before the first byte.  NGX_AGAIN: keep reading; NGX_OK: the
 * response starts (headers set, any body already in u->out_bufs);
 * NGX_HTTP_UPSTREAM_INVALID_HEADER: try the next engine.
 */

ngx_int_t
ngx_http_llm_header_event(ngx_http_request_t *r, ngx_http_llm_ctx_t *ctx,
    Llm__Event *ev)
{
    ngx_int_t                 rc;
    ngx_str_t                 body;
    ngx_chain_t             **ll;
    ngx_http_upstream_t      *u;
    ngx_http_llm_loc_conf_t  *llcf;

    u = r->upstream;
    llcf = ngx_http_get_module_loc_conf(r, ngx_http_llm_module);

    switch (ev->kind_case) {

    case LLM__EVENT__KIND_QUEUED:
        return NGX_AGAIN;

    case LLM__EVENT__KIND_STARTED:
        ctx->prompt_tokens = ev->started->prompt_tokens;
        ctx->cached_tokens = ev->started->cached_tokens;
        return NGX_AGAIN;

    case LLM__EVENT__KIND_PONG:
        if (!ctx->stream || !llcf->sse_heartbeat || !ctx->hb_due) {
            return NGX_AGAIN;
        }

        /* the first heartbeat: the stream starts with a comment */

        rc = ngx_http_llm_start_response(r, ctx, NGX_HTTP_OK, -1, 1);
        if (rc != NGX_OK) {
            return rc;
        }

        for (ll = &u->out_bufs; *ll; ll = &(*ll)->next) { /* void */ }

        if (ngx_http_llm_sse_raw(r, &ll, (u_char *) ": keep-alive\n\n",
                                 sizeof(": keep-alive\n\n") - 1, 1)
            != NGX_OK)
        {
            return NGX_ERROR;
        }

        return NGX_OK;

    case LLM__EVENT__KIND_DELTA:
    case LLM__EVENT__KIND_TOOL_CALL:
    case LLM__EVENT__KIND_DONE:

        if (ctx->stream) {
            rc = ngx_http_llm_start_response(r, ctx, NGX_HTTP_OK, -1, 1);
            if (rc != NGX_OK) {
                return rc;
            }

            for (ll = &u->out_bufs; *ll; ll = &(*ll)->next) { /* void */ }

            if (ngx_http_llm_stream_event(r, ctx, ev, &ll) != NGX_OK) {
                return NGX_ERROR;
            }

            return NGX_OK;
        }

        if (ev->kind_case != LLM__EVENT__KIND_DONE && !ctx->got_token) {
            ctx->got_token = 1;
            ctx->ttft = ngx_current_msec - ctx->start;
            ngx_http_llm_no_retry(r);
        }

        if (ngx_http_llm_collect(r, ctx, ev) != NGX_OK) {
            return NGX_ERROR;
        }

        if (ev->kind_case != LLM__EVENT__KIND_DONE) {
            return NGX_AGAIN;
        }

        ngx_http_llm_terminal(r, ctx);

        if (ngx_http_llm_body(r, ctx, &body) != NGX_OK) {
            return NGX_ERROR;
        }

        rc = ngx_http_llm_start_response(r, ctx, NGX_HTTP_OK, body.len, 0);
        if (rc != NGX_OK) {
            return rc;
        }

        return ngx_http_llm_whole_body(r, &body);

    case LLM__EVENT__KIND_EMBEDDING:
    case LLM__EVENT__KIND_EMBED_DONE:

        if (ctx->emb == NULL) {
            break;
        }

        return ngx_http_llm_embed_event(r, ctx, ev);

    case LLM__EVENT__KIND_ERROR:
        return ngx_http_llm_engine_error(r, ctx, ev->error);

    default:
        break;
    }

    ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                  "llm: engine sent an unexpected event %d",
                  (int) ev->kind_case);
    return NGX_HTTP_UPSTREAM_INVALID_HEADER;
}


/*
 * /v1/embeddings: an Embedding event adds its item (NGX_AGAIN), EmbedDone
 * starts the whole answer (NGX_OK); the first vector ends retries, and an
 * engine answering out of order is an invalid answer.
 */

static ngx_int_t
ngx_http_llm_embed_event(ngx_http_request_t *r, ngx_http_llm_ctx_t *ctx,
    Llm__Event *ev)
{
    ngx_int_t  rc;
    ngx_str_t  body;

    if (!ctx->got_token) {
        ctx->got_token = 1;
        ctx->ttft = ngx_current_msec - ctx->start;
        ngx_http_llm_no_retry(r);
    }

    if (ev->kind_case == LLM__EVENT__KIND_EMBEDDING) {
        rc = ngx_http_llm_embed_add(r, ctx, ev->embedding);

        if (rc == NGX_DECLINED) {
            return NGX_HTTP_UPSTREAM_INVALID_HEADER;
        }

        return rc == NGX_OK ? NGX_AGAIN : NGX_ERROR;
    }

    ctx->done = 1;
    ngx_http_llm_terminal(r, ctx);

    rc = ngx_http_llm_embed_body(r, ctx, ev->embed_done, &body);

    if (rc == NGX_DECLINED) {
        return NGX_HTTP_UPSTREAM_INVALID_HEADER;
    }

    if (rc != NGX_OK) {
        return NGX_ERROR;
    }

    rc = ngx_http_llm_start_response(r, ctx, NGX_HTTP_OK, body.len, 0);
    if (rc != NGX_OK) {
        return rc;
    }

    return ngx_http_llm_whole_body(r, &body);
}


/*
 * An Error event before the first byte.  Overloaded, shutting down and
 * internal errors go to the next engine when llm_next_upstream allows;
 * the error is kept so that the final answer, if every engine fails, says
 * what happened.  Others become the response.
 */

ngx_int_t
ngx_http_llm_engine_error(ngx_http_request_t *r, ngx_http_llm_ctx_t *ctx,
    Llm__Error *e)
{
    ngx_int_t              rc;
    ngx_uint_t             mask;
    ngx_http_llm_error_t   err;

    ngx_http_llm_map_error(e, &err);

    if (e->usage) {
        ctx->prompt_tokens = e->usage->prompt_tokens;
        ctx->completion_tokens = e->usage->completion_tokens;
        ctx->cached_tokens = e->usage->cached_tokens;
    }

    switch (e->code) {

    case LLM__ERROR_CODE__ERROR_OVERLOADED:
    case LLM__ERROR_CODE__ERROR_SHUTTING_DOWN:
        mask = NGX_HTTP_UPSTREAM_FT_HTTP_503;
        break;

    case LLM__ERROR_CODE__ERROR_INTERNAL:
        mask = NGX_HTTP_UPSTREAM_FT_HTTP_500;
        break;

    default:
        mask = 0;
    }

    rc = ngx_http_llm_upstream_error(r, ctx, &err, mask);

    if (rc == NGX_OK && e->code == LLM__ERROR_CODE__ERROR_BAD_FRAME) {
        /* the engine closes the connection after it */
        ctx->done = 1;
        r->upstream->headers_in.connection_close = 1;
    }

    return rc;
}


/*
 * An error answer of the backend (an engine's Error event, a provider's
 * error status) before the first byte.  mask: the llm_next_upstream
 * condition it is (NGX_HTTP_UPSTREAM_FT_HTTP_503: back-pressure, not a
 * failed server; 0: the request's own fault, never retried).  Retried on
 * the next server or model when allowed (NGX_HTTP_UPSTREAM_INVALID_HEADER);
 * otherwise the error, in the request's dialect, is the response (NGX_OK).
 */

ngx_int_t
ngx_http_llm_upstream_error(ngx_http_request_t *r, ngx_http_llm_ctx_t *ctx,
    ngx_http_llm_error_t *in, ngx_uint_t mask)
{
    u_char                *p;
    ngx_str_t              body;
    ngx_http_upstream_t   *u;
    ngx_http_llm_error_t   err;

    u = r->upstream;
    err = *in;

    p = ngx_pnalloc(r->pool, err.message.len);
    if (p == NULL) {
        return NGX_ERROR;
    }

    ngx_memcpy(p, err.message.data, err.message.len);
    err.message.data = p;

    if (err.param) {
        p = ngx_pnalloc(r->pool, ngx_strlen(err.param) + 1);
        if (p == NULL) {
            return NGX_ERROR;
        }

        ngx_cpystrn(p, (u_char *) err.param, ngx_strlen(err.param) + 1);
        err.param = (char *) p;
    }

    ctx->err_status = err.status;
    ctx->err_type = err.type;
    ctx->err_code = err.code;
    ctx->err_param = err.param;
    ctx->err_message = err.message;

    /*
     * Once a token was produced the work is not idempotent: the error is
     * the answer (and what ran is billed), never a second generation.
     */

    if (mask == NGX_HTTP_UPSTREAM_FT_HTTP_503) {
        /* released without counting a failure, retried or not */
        ctx->backpressure = 1;
    }

    if (mask && !ctx->got_token && (ctx->next_upstream & mask)
        && !(ctx->next_upstream & NGX_HTTP_UPSTREAM_FT_OFF))
    {
        ngx_log_error(NGX_LOG_WARN, r->connection->log, 0,
                      "llm: %s %V answered \"%V\", trying the next one",
                      ctx->provider ? "provider" : "engine",
                      u->peer.name, &err.message);
        ctx->upstream_error = 1;

        if (mask == NGX_HTTP_UPSTREAM_FT_HTTP_503) {

            /*
             * Overloaded or draining is back-pressure, not a failed peer:
             * ngx_http_llm_peer_free() releases the peer without counting
             * a failure.  The upstream decides on the next try by the
             * "invalid header" bit we return under; this request's copy
             * of the mask gets that bit from "overloaded" alone, and
             * reinit_request restores it.
             */

            u->conf->next_upstream |= NGX_HTTP_UPSTREAM_FT_INVALID_HEADER;
        }

        return NGX_HTTP_UPSTREAM_INVALID_HEADER;
    }

    ngx_log_error(NGX_LOG_INFO, r->connection->log, 0,
                  "llm: %s error %ui: %V",
                  ctx->provider ? "provider" : "engine", err.status,
                  &err.message);

    if (err.status >= 500) {
        ctx->upstream_error = 1;
    }

    ctx->done = 1;
    ctx->error_code.data = (u_char *) (err.code ? err.code : err.type);
    ctx->error_code.len = ngx_strlen(ctx->error_code.data);

    body.data = ngx_http_llm_error_body(ctx, r->pool, &err, &body.len);
    if (body.data == NULL) {
        return NGX_ERROR;
    }

    if (ngx_http_llm_start_response(r, ctx, err.status, body.len, 0)
        != NGX_OK)
    {
        return NGX_ERROR;
    }

    if (err.status == NGX_HTTP_SERVICE_UNAVAILABLE
        && ngx_http_llm_retry_after(r) != NGX_OK)
    {
        return NGX_ERROR;
    }

    if (ngx_http_llm_whole_body(r, &body) != NGX_OK) {
        return NGX_ERROR;
    }

    return NGX_OK;
}


/* An answer that is whole before its first byte: the upstream's output. */

static ngx_int_t
ngx_http_llm_whole_body(ngx_http_request_t *r, ngx_str_t *body)
{
    ngx_chain_t  *cl;

    cl = ngx_http_llm_chain_buf(r, body->len);
    if (cl == NULL) {
        return NGX_ERROR;
    }

    cl->buf->last = ngx_cpymem(cl->buf->last, body->data, body->len);
    cl->buf->flush = 1;
    r->upstream->out_bufs = cl;

    return NGX_OK;
}


/* Sets the response status and headers; the upstream sends them. */

static ngx_int_t
ngx_http_llm_start_response(ngx_http_request_t *r, ngx_http_llm_ctx_t *ctx,
    ngx_uint_t status, off_t length, ngx_uint_t sse)
{
    ngx_table_elt_t      *h;
    ngx_http_upstream_t  *u;

    u = r->upstream;

    if (ctx->header_done) {
        return NGX_OK;
    }

    ctx->header_done = 1;

    u->headers_in.status_n = status;
    u->headers_in.content_length_n = length;
    u->state->status = status;

    if (sse) {
        ngx_str_set(&r->headers_out.content_type, "text/event-stream");

        h = ngx_list_push(&r->headers_out.headers);
        if (h == NULL) {
            return NGX_ERROR;
        }

        h->hash = 1;
        ngx_str_set(&h->key, "Cache-Control");
        ngx_str_set(&h->value, "no-cache");

        h = ngx_list_push(&r->headers_out.headers);
        if (h == NULL) {
            return NGX_ERROR;
        }

        h->hash = 1;
        ngx_str_set(&h->key, "X-Accel-Buffering");
        ngx_str_set(&h->value, "no");

    } else {
        ngx_str_set(&r->headers_out.content_type, "application/json");
    }

    r->headers_out.content_type_len = r->headers_out.content_type.len;
    r->headers_out.content_type_lowcase = NULL;

    if (ctx->model_name.len) {
        h = ngx_list_push(&r->headers_out.headers);
        if (h == NULL) {
            return NGX_ERROR;
        }

        h->hash = 1;
        ngx_str_set(&h->key, "x-llm-model");
        h->value = ctx->model_name;
    }

    if (ctx->fallbacks) {
        h = ngx_list_push(&r->headers_out.headers);
        if (h == NULL) {
            return NGX_ERROR;
        }

        h->hash = 1;
        ngx_str_set(&h->key, "x-llm-fallback");
        h->value = ctx->model_name;
    }

    if (ctx->ticket_set
        && ngx_http_llm_limit_headers(r, &ctx->ticket) != NGX_OK)
    {
        return NGX_ERROR;
    }

#if (NGX_HTTP_GZIP)
    r->gzip_tested = 1;
    r->gzip_ok = 0;
#endif

    return NGX_OK;
}


/*
 * Called by the upstream once the headers went out.  Arms the heartbeat
 * for a stream still waiting for its first token, ends the response at
 * once when the terminal event came with the headers, and makes sure
 * output prepared in process_header is written even when no more bytes
 * arrive from the engine.
 */

ngx_int_t
ngx_http_llm_input_filter_init(void *data)
{
    ngx_http_llm_ctx_t *ctx = data;

    ngx_http_request_t       *r;
    ngx_http_upstream_t      *u;
    ngx_http_llm_loc_conf_t  *llcf;

    r = ctx->request;
    u = r->upstream;
    llcf = ngx_http_get_module_loc_conf(r, ngx_http_llm_module);

    if (ctx->done) {
        u->length = 0;

    } else {
        u->length = -1;
    }

    if (ctx->stream && !ctx->done && !ctx->got_token && llcf->sse_heartbeat)
    {
        ctx->heartbeat.handler = ngx_http_llm_heartbeat_handler;
        ctx->heartbeat.data = r;
        ctx->heartbeat.log = r->connection->log;
        ngx_add_timer(&ctx->heartbeat, llcf->sse_heartbeat);
    }

    if (u->buffer.pos == u->buffer.last && (u->out_bufs || ctx->done)) {

        /*
         * No engine bytes left for input_filter, so the upstream would
         * flush the headers alone and wait for the engine: write the
         * prepared body with them now (one writev), and let the client
         * write event run the upstream's writer, which ends the response
         * when the terminal event came with the headers.
         */

        if (u->out_bufs) {
            if (ngx_http_output_filter(r, u->out_bufs) == NGX_ERROR) {
                return NGX_ERROR;
            }

            ngx_chain_update_chains(r->pool, &u->free_bufs, &u->busy_bufs,
                                    &u->out_bufs, u->output.tag);
        }

        ngx_post_event(r->connection->write, &ngx_posted_events);
    }

    return NGX_OK;
}


static ngx_int_t
ngx_http_llm_input_filter(void *data, ssize_t bytes)
{
    ngx_http_llm_ctx_t *ctx = data;

    size_t                    len;
    u_char                   *frame;
    ngx_int_t                 rc;
    ngx_buf_t                *b;
    ngx_chain_t              *cl, **ll;
    Llm__Event               *ev;
    ngx_http_request_t       *r;
    ngx_http_upstream_t      *u;
    ngx_http_llm_loc_conf_t  *llcf;

    r = ctx->request;
    u = r->upstream;
    b = &u->buffer;
    llcf = ngx_http_get_module_loc_conf(r, ngx_http_llm_module);

    b->pos = b->last;
    b->last += bytes;

    for (cl = u->out_bufs, ll = &u->out_bufs; cl; cl = cl->next) {
        ll = &cl->next;
    }

    while (b->pos < b->last) {

        if (ctx->done) {
            ngx_log_error(NGX_LOG_WARN, r->connection->log, 0,
                          "llm: engine sent %z bytes after the end of the "
                          "answer", b->last - b->pos);
            b->pos = b->last;
            u->keepalive = 0;
            break;
        }

        rc = ngx_http_llm_frame(ctx, &b->pos, b->last, llcf->max_frame,
                                &frame, &len);

        if (rc == NGX_AGAIN) {
            break;
        }

        ev = NULL;

        if (rc == NGX_OK) {
            ev = ngx_http_llm_unpack(len, frame);
        }

        if (ev == NULL || ev->kind_case == LLM__EVENT__KIND__NOT_SET) {
            ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                          "llm: engine sent an invalid frame of %uz bytes "
                          "mid-stream", ctx->frame_len);

            if (ev) {
                ngx_http_llm_unpack_free(ev);
            }

            ctx->upstream_error = 1;
            ngx_str_set(&ctx->error_code, "invalid_frame");
            ctx->err_status = NGX_HTTP_BAD_GATEWAY;
            ngx_str_set(&ctx->err_message, "The inference engine sent an "
                        "invalid answer.");

            if (ctx->stream
                && ngx_http_llm_stream_event(r, ctx, NULL, &ll) != NGX_OK)
            {
                return NGX_ERROR;
            }

            ctx->done = 1;
            u->keepalive = 0;
            u->length = 0;
            b->pos = b->last;
            return NGX_OK;
        }

        if (ctx->client_gone) {
            ngx_http_llm_gone_event(r, ctx, ev);
            ngx_http_llm_unpack_free(ev);
            continue;
        }

        rc = ngx_http_llm_stream_event(r, ctx, ev, &ll);

        ngx_http_llm_unpack_free(ev);

        if (rc != NGX_OK) {
            return NGX_ERROR;
        }
    }

    if (ctx->done) {
        u->length = 0;

        if (b->pos == b->last && ctx->state == NGX_HTTP_LLM_FRAME_LEN
            && ctx->lenpos == 0 && !u->headers_in.connection_close)
        {
            u->keepalive = 1;
        }
    }

    return NGX_OK;
}


/*
 * One event of a started stream, rendered as SSE at *ll; ev == NULL
 * renders the error kept in ctx.  Marks the end on Done and Error.
 */

ngx_int_t
ngx_http_llm_stream_event(ngx_http_request_t *r, ngx_http_llm_ctx_t *ctx,
    Llm__Event *ev, ngx_chain_t ***ll)
{
    ngx_http_upstream_t      *u;
    ngx_http_llm_loc_conf_t  *llcf;

    u = r->upstream;
    llcf = ngx_http_get_module_loc_conf(r, ngx_http_llm_module);

    if (ev == NULL) {
        return ngx_http_llm_sse_event(r, ctx, NULL, ll);
    }

    switch (ev->kind_case) {

    case LLM__EVENT__KIND_QUEUED:
    case LLM__EVENT__KIND_PONG:
        return NGX_OK;

    case LLM__EVENT__KIND_STARTED:
        ctx->prompt_tokens = ev->started->prompt_tokens;
        ctx->cached_tokens = ev->started->cached_tokens;
        return NGX_OK;

    case LLM__EVENT__KIND_DELTA:
    case LLM__EVENT__KIND_TOOL_CALL:
        if (!ctx->got_token) {
            ctx->got_token = 1;
            ctx->ttft = ngx_current_msec - ctx->start;
            ngx_http_llm_no_retry(r);

            if (ctx->heartbeat.timer_set) {
                ngx_del_timer(&ctx->heartbeat);
            }
        }

        if (ev->kind_case == LLM__EVENT__KIND_DELTA) {
            ctx->streamed_tokens += ev->delta->n_tokens;
        }

        break;

    case LLM__EVENT__KIND_DONE:
        if (ev->done->usage) {
            ctx->prompt_tokens = ev->done->usage->prompt_tokens;
            ctx->completion_tokens = ev->done->usage->completion_tokens;
            ctx->cached_tokens = ev->done->usage->cached_tokens;
        }

        ngx_http_llm_terminal(r, ctx);
        ctx->done = 1;
        break;

    case LLM__EVENT__KIND_ERROR:
        if (ev->error->usage) {
            ctx->prompt_tokens = ev->error->usage->prompt_tokens;
            ctx->completion_tokens = ev->error->usage->completion_tokens;
            ctx->cached_tokens = ev->error->usage->cached_tokens;
        }

        ctx->upstream_error = 1;
        ctx->done = 1;

        if (ev->error->code == LLM__ERROR_CODE__ERROR_BAD_FRAME) {
            u->headers_in.connection_close = 1;
        }

        break;

    default:
        ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                      "llm: engine sent an unexpected event %d mid-stream",
                      (int) ev->kind_case);
        return NGX_OK;
    }

    if (ngx_http_llm_sse_event(r, ctx, ev, ll) != NGX_OK) {
        return NGX_ERROR;
    }

    if (ctx->done || llcf->sse_flush_interval == 0) {
        return NGX_OK;
    }

    /* coalesce: the flush timer pushes the events out */

    if (!ctx->flush.timer_set) {
        ctx->flush.handler = ngx_http_llm_flush_handler;
        ctx->flush.data = r;
        ctx->flush.log = r->connection->log;
        ngx_add_timer(&ctx->flush, llcf->sse_flush_interval);
    }

    return NGX_OK;
}


/* Copies the finish reason and stops the timers at the terminal event. */

static void
ngx_http_llm_terminal(ngx_http_request_t *r, ngx_http_llm_ctx_t *ctx)
{
    (void) r;

    if (ctx->heartbeat.timer_set) {
        ngx_del_timer(&ctx->heartbeat);
    }

    if (ctx->flush.timer_set) {
        ngx_del_timer(&ctx->flush);
    }
}


static void
ngx_http_llm_abort_request(ngx_http_request_t *r)
{
    ngx_log_debug0(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "abort http llm request");
    return;
}


/*
 * The end of the exchange.  A stream that ends without a terminal event
 * (engine closed, timed out, invalid data) gets a final error event so
 * the client never sees a silent truncation.
 */

static void
ngx_http_llm_finalize_request(ngx_http_request_t *r, ngx_int_t rc)
{
    ngx_chain_t          *out, **ll;
    ngx_http_llm_ctx_t   *ctx;

    ngx_log_debug1(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "finalize http llm request %i", rc);

    ctx = ngx_http_get_module_ctx(r, ngx_http_llm_module);
    if (ctx == NULL) {
        return;
    }

    ngx_http_llm_terminal(r, ctx);

    if (ctx->inflight) {
        ctx->inflight = 0;
        ngx_http_llm_metrics_inflight(r, -1);
    }

    if (!ctx->stream || !ctx->header_done || ctx->done
        || rc == NGX_HTTP_CLIENT_CLOSED_REQUEST || r->connection->error)
    {
        if (!ctx->done && ctx->header_done) {
            ngx_str_set(&ctx->finish_reason, "cancelled");
        }

        if (ctx->done && ctx->header_done
            && rc != NGX_HTTP_CLIENT_CLOSED_REQUEST && !r->connection->error)
        {
            ngx_http_llm_record(r, ctx, r->headers_out.status);
        }

        return;
    }

    ctx->upstream_error = 1;
    ctx->done = 1;

    if (ctx->err_status == 0) {
        ctx->err_status = (rc == NGX_HTTP_GATEWAY_TIME_OUT)
                          ? NGX_HTTP_GATEWAY_TIME_OUT : NGX_HTTP_BAD_GATEWAY;

        if (rc == NGX_HTTP_GATEWAY_TIME_OUT) {
            ngx_str_set(&ctx->error_code, "engine_timeout");
            ngx_str_set(&ctx->err_message, "The inference engine stopped "
                        "answering in the middle of the stream.");

        } else {
            ngx_str_set(&ctx->error_code, "engine_disconnected");
            ngx_str_set(&ctx->err_message, "The inference engine closed the "
                        "stream before its end.");
        }
    }

    ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                  "llm: stream cut off: %V", &ctx->err_message);

    ngx_str_set(&ctx->finish_reason, "error");

    out = NULL;
    ll = &out;

    if (ngx_http_llm_sse_event(r, ctx, NULL, &ll) != NGX_OK || out == NULL) {
        return;
    }

    (void) ngx_http_output_filter(r, out);

    ngx_http_llm_record(r, ctx, r->headers_out.status);
}


static void
ngx_http_llm_heartbeat_handler(ngx_event_t *ev)
{
    ngx_chain_t              *cl, **ll;
    ngx_connection_t         *c;
    ngx_http_request_t       *r;
    ngx_http_upstream_t      *u;
    ngx_http_llm_ctx_t       *ctx;
    ngx_http_llm_loc_conf_t  *llcf;

    r = ev->data;
    c = r->connection;
    u = r->upstream;
    ctx = ngx_http_get_module_ctx(r, ngx_http_llm_module);
    llcf = ngx_http_get_module_loc_conf(r, ngx_http_llm_module);

    if (u == NULL || ctx->got_token || ctx->done || u->cleanup == NULL
        || ctx->client_gone)
    {
        return;
    }

    if (!u->header_sent) {

        /* no response yet: ask the engine, its Pong starts it */

        if (!ctx->header_done && !ctx->provider && u->peer.connection
            && u->request_body_sent
            && ngx_http_llm_send_control(r, u->peer.connection,
                                         LLM__REQUEST__KIND_PING)
               == NGX_OK)
        {
            ctx->hb_due = 1;
        }

        ngx_add_timer(ev, llcf->sse_heartbeat);
        return;
    }

    for (cl = u->out_bufs, ll = &u->out_bufs; cl; cl = cl->next) {
        ll = &cl->next;
    }

    if (ngx_http_llm_sse_raw(r, &ll, (u_char *) ": keep-alive\n\n",
                             sizeof(": keep-alive\n\n") - 1, 1)
        != NGX_OK)
    {
        return;
    }

    ngx_add_timer(ev, llcf->sse_heartbeat);

    ngx_http_llm_kick(r);
    ngx_http_run_posted_requests(c);
}


static void
ngx_http_llm_flush_handler(ngx_event_t *ev)
{
    ngx_chain_t          *cl, **ll;
    ngx_connection_t     *c;
    ngx_http_request_t   *r;
    ngx_http_upstream_t  *u;

    r = ev->data;
    c = r->connection;
    u = r->upstream;

    if (u == NULL || u->cleanup == NULL) {
        return;
    }

    for (cl = u->out_bufs, ll = &u->out_bufs; cl; cl = cl->next) {
        ll = &cl->next;
    }

    if (ngx_http_llm_sse_raw(r, &ll, NULL, 0, 1) != NGX_OK) {
        return;
    }

    ngx_http_llm_kick(r);
    ngx_http_run_posted_requests(c);
}


/*
 * The client connection's read handler while the upstream runs (in place
 * of the upstream's broken-connection check, see upstream_start): tells
 * a closed client connection from pipelined bytes the way the upstream
 * does, then hands over to ngx_http_llm_client_gone().
 */

static void
ngx_http_llm_rd_check_broken(ngx_http_request_t *r)
{
    int                  n;
    char                 buf[1];
    ngx_err_t            err;
    ngx_event_t         *ev;
    ngx_connection_t    *c;
    ngx_http_llm_ctx_t  *ctx;

    c = r->connection;
    ev = c->read;
    ctx = ngx_http_get_module_ctx(r, ngx_http_llm_module);

    if (ctx == NULL || r->upstream == NULL || r->upstream->cleanup == NULL) {
        return;
    }

    if (c->error) {
        goto gone;
    }

#if (NGX_HTTP_V2)
    if (r->stream) {
        return;
    }
#endif

#if (NGX_HAVE_EPOLLRDHUP)

    if ((ngx_event_flags & NGX_USE_EPOLL_EVENT) && ngx_use_epoll_rdhup) {

        if (!ev->pending_eof) {
            return;
        }

        ev->eof = 1;
        c->error = 1;

        goto gone;
    }

#endif

    n = recv(c->fd, buf, 1, MSG_PEEK);

    err = ngx_socket_errno;

    if ((ngx_event_flags & NGX_USE_LEVEL_EVENT) && ev->active) {
        if (ngx_del_event(ev, NGX_READ_EVENT, 0) != NGX_OK) {
            goto gone;
        }
    }

    if (n > 0) {
        return;
    }

    if (n == -1) {
        if (err == NGX_EAGAIN) {
            return;
        }

        ev->error = 1;
    }

    ev->eof = 1;
    c->error = 1;

gone:

    ngx_http_llm_client_gone(r, ctx);
}


/*
 * The Cancel half of ngx_http_llm_client_gone: when the engine has the
 * whole request and takes the Cancel frame, the request lives on until
 * its terminal event brings the usage.  NGX_OK then; NGX_DECLINED when no
 * Cancel could be sent (nothing changed).
 */

static ngx_int_t
ngx_http_llm_cancel_running(ngx_http_request_t *r, ngx_http_llm_ctx_t *ctx)
{
    ngx_connection_t     *c;
    ngx_http_upstream_t  *u;

    c = r->connection;
    u = r->upstream;

    if (ctx->done || ctx->provider || u == NULL || u->cleanup == NULL
        || u->peer.connection == NULL || !u->request_body_sent
        || ngx_http_llm_send_control(r, u->peer.connection,
                                     LLM__REQUEST__KIND_CANCEL) != NGX_OK)
    {
        return NGX_DECLINED;
    }

    ngx_log_error(NGX_LOG_INFO, c->log, 0,
                  "llm: client closed the connection, cancelling the "
                  "generation");

    ctx->client_gone = 1;
    ngx_http_llm_terminal(r, ctx);
    ngx_http_llm_no_retry(r);

    if (ngx_handle_read_event(c->read, 0) != NGX_OK) {
        /* keep going: the engine's answer ends the request */
    }

    /* what the client did not take is dropped, not written */

    u->out_bufs = NULL;
    u->busy_bufs = NULL;
    r->out = NULL;
    c->buffered = 0;

    if (c->write->timer_set) {
        ngx_del_timer(c->write);
    }

    if (u->header_sent) {

        /*
         * A slow client may have left the read buffer full (it is
         * emptied only once the client took its data): input_filter
         * consumed every byte in it, so it starts over, and the engine
         * connection is read again, its answer bounded by
         * llm_read_timeout.
         */

        u->buffer.pos = u->buffer.start;
        u->buffer.last = u->buffer.start;
        ngx_post_event(u->peer.connection->read, &ngx_posted_events);
    }

    ngx_add_timer(u->peer.connection->read, u->conf->read_timeout);

    return NGX_OK;
}


/*
 * A write to the client failed (the output filter saw the error: a reset
 * connection, found on a write before any read noticed it).  A running
 * generation is cancelled and its usage awaited, as when the client's
 * closing is seen on a read, so the tokens the engine made are billed:
 * NGX_OK, and the upstream keeps reading the engine.  Otherwise NGX_ERROR,
 * the write's own result: the request ends as nginx ends it.
 */

ngx_int_t
ngx_http_llm_write_failed(ngx_http_request_t *r, ngx_http_llm_ctx_t *ctx)
{
    if (r->upstream == NULL) {
        return NGX_ERROR;
    }

    if (ctx->client_gone) {
        return NGX_OK;      /* cancelled before: output is dropped */
    }

    return ngx_http_llm_cancel_running(r, ctx) == NGX_OK ? NGX_OK : NGX_ERROR;
}


/*
 * The client left before the end.  When the engine has the whole request,
 * a Cancel frame stops the generation and the request lives on until the
 * engine's terminal event brings the usage (ngx_http_llm_gone_event);
 * nothing more is written to the client.  Otherwise the request ends now
 * and closing the engine connection cancels.
 */

static void
ngx_http_llm_client_gone(ngx_http_request_t *r, ngx_http_llm_ctx_t *ctx)
{
    ngx_connection_t     *c;
    ngx_http_upstream_t  *u;

    c = r->connection;
    u = r->upstream;

    if (ctx->client_gone || ngx_http_llm_cancel_running(r, ctx) == NGX_OK) {
        return;
    }

    ngx_log_error(NGX_LOG_INFO, c->log, 0,
                  "llm: client closed the connection, so the engine "
                  "connection is closed too");

    /*
     * The upstream's own cleanup finalizes it (closing the engine
     * connection) and then the request; what the upstream's broken-
     * connection check would do, with the status it would log.
     */

    r->read_event_handler = ngx_http_block_reading;
    r->keepalive = 0;

    if (!u->header_sent) {
        r->headers_out.status = NGX_HTTP_CLIENT_CLOSED_REQUEST;
    }

    if (u->cleanup && *u->cleanup) {
        (*u->cleanup)(r);
    }
}


/*
 * Writes a Cancel or Ping frame (6 bytes) on the engine connection of a
 * running Generate, or fails.  The request frame went out whole before
 * (request_body_sent) and the engine always reads, so the socket buffer
 * takes them at once; a partial write can only close the connection.
 */

static ngx_int_t
ngx_http_llm_send_control(ngx_http_request_t *r, ngx_connection_t *c,
    Llm__Request__KindCase kind)
{
    u_char              buf[16 + NGX_HTTP_LLM_AUTH_MAX];
    size_t              len;
    ssize_t             n;
    Llm__Request        req = LLM__REQUEST__INIT;
    Llm__PingRequest    ping = LLM__PING_REQUEST__INIT;
    Llm__CancelRequest  cancel = LLM__CANCEL_REQUEST__INIT;

    req.kind_case = kind;
    req.auth = ((ngx_http_llm_main_conf_t *)
                ngx_http_get_module_main_conf(r, ngx_http_llm_module))
               ->engine_auth;

    if (kind == LLM__REQUEST__KIND_PING) {
        req.ping = &ping;

    } else {
        req.cancel = &cancel;
    }

    len = llm__request__get_packed_size(&req);
    if (len + 4 > sizeof(buf)) {
        return NGX_ERROR;
    }

    buf[0] = (u_char) (len >> 24);
    buf[1] = (u_char) (len >> 16);
    buf[2] = (u_char) (len >> 8);
    buf[3] = (u_char) len;
    (void) llm__request__pack(&req, buf + 4);

    n = c->send(c, buf, len + 4);

    if (n != (ssize_t) (len + 4)) {
        ngx_log_error(NGX_LOG_INFO, r->connection->log, 0,
                      "llm: could not send %s to the engine (%z)",
                      kind == LLM__REQUEST__KIND_PING ? "Ping" : "Cancel",
                      n);

        if (n > 0) {
            /* a partial frame: the connection can only be closed */
            r->upstream->headers_in.connection_close = 1;
        }

        return NGX_ERROR;
    }

    return NGX_OK;
}


/*
 * An engine event after the client left: only the usage matters.  Done
 * and Error (ERROR_CANCELLED, or anything else) are terminal.
 */

static void
ngx_http_llm_gone_event(ngx_http_request_t *r, ngx_http_llm_ctx_t *ctx,
    Llm__Event *ev)
{
    Llm__Usage  *usage;

    usage = NULL;

    switch (ev->kind_case) {

    case LLM__EVENT__KIND_STARTED:
        ctx->prompt_tokens = ev->started->prompt_tokens;
        ctx->cached_tokens = ev->started->cached_tokens;
        return;

    case LLM__EVENT__KIND_DELTA:
        ctx->streamed_tokens += ev->delta->n_tokens;
        return;

    case LLM__EVENT__KIND_DONE:
        usage = ev->done->usage;
        break;

    case LLM__EVENT__KIND_ERROR:
        usage = ev->error->usage;

        if (ev->error->code == LLM__ERROR_CODE__ERROR_BAD_FRAME) {
            r->upstream->headers_in.connection_close = 1;
        }

        break;

    default:
        return;
    }

    if (usage) {
        ctx->prompt_tokens = usage->prompt_tokens;
        ctx->completion_tokens = usage->completion_tokens;
        ctx->cached_tokens = usage->cached_tokens;
    }

    ngx_str_set(&ctx->finish_reason, "cancelled");
    ctx->done = 1;
}


/* Runs the upstream's writer to the client, as a write event would. */

static void
ngx_http_llm_kick(ngx_http_request_t *r)
{
    if (r->upstream && r->upstream->header_sent && r->write_event_handler) {
        r->write_event_handler(r);
    }
}
