/*
 * The engine's socket server.  See server.h for the contract.
 *
 * Every epoll registration points at a struct whose first field is its
 * kind.  Connections are never freed while events are being handled: a
 * connection that ends is marked dead and swept at the end of the loop
 * iteration, after its request (if any) has been cancelled, so the
 * scheduler never holds a pointer to a freed owner.
 *
 * Prompt preparation (chat template render, tokenization) runs on one
 * worker thread, never on the loop that feeds the running streams: a
 * multi-megabyte prompt would otherwise stall every stream for as long as
 * it takes.  Tokenize requests go the same way (and their connection's
 * reader waits for the answer, so replies stay in order).  The loop hands
 * a job (the decoded Request) to the worker's FIFO; the worker puts the result on the done list and writes
 * the eventfd; the loop then submits it to the scheduler.  Only the loop
 * touches connections and job->conn: a connection that ends (or Cancels)
 * while its job is out sets job->conn to NULL and the result is dropped
 * when it comes back.  The worker sees only the job and the read-only
 * template and vocabulary.
 */

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/epoll.h>
#include <openssl/crypto.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "decode/hooks.h"
#include "prompt.h"
#include "server.h"
#include "wire.h"

#define LLM_SRV_LISTEN   1
#define LLM_SRV_SIGNAL   2
#define LLM_SRV_CONN     3
#define LLM_SRV_PREP     4

#define LLM_SRV_MAX_EVENTS  128

typedef struct llm_conn_s  llm_conn_t;
typedef struct llm_prep_s  llm_prep_t;

/* A Generate whose prompt the worker prepares, a Tokenize, or an Embed
 * (tokenized and run through the forward pass by the worker). */
struct llm_prep_s {
    llm_prep_t     *next;          /* on the worker's FIFO or done list */
    llm_conn_t     *conn;          /* loop only; NULL: the result is dropped */
    Llm__Request   *rq;            /* owned; generate or tokenize */
    llm_request_t   req;           /* generate, decoded by the worker */
    atomic_int      dropped;       /* set by the loop: skip the work */
    int             rc;            /* llm_prompt_build's */
    llm_tokens_t    toks;
    llm_tokens_t   *all;           /* several prompts: each one's tokens */
    size_t          n_all;
    const char     *param;
    double          ms;            /* the worker's time on it */
    float          *vec;           /* Embed: [n_in][dims] */
    uint32_t       *in_tokens;     /* Embed: [n_in] tokens of each input */
    uint32_t        n_in, dims;
    char            err[512];
};

typedef struct {
    int          kind;
    int          fd;
} llm_srv_fd_t;

struct llm_conn_s {
    int           kind;            /* LLM_SRV_CONN */
    int           fd;
    llm_server_t *srv;
    uint64_t      id;
    int           need_auth;       /* TCP, until a frame brings the secret */
    llm_conn_t   *prev, *next;

    /* the frame being read */
    uint8_t       hdr[4];
    uint32_t      hdr_n;
    uint8_t      *body;
    uint32_t      body_len;
    uint32_t      body_n;

    /* output */
    uint8_t      *wbuf;
    size_t        wpos, wlen, wcap;
    int           want_out;        /* registered for EPOLLOUT */

    /* input held while the output is over wbuf_high: the reader stops */
    int           rpaused;         /* not registered for EPOLLIN */
    uint8_t      *rest;            /* bytes received, not yet parsed */
    size_t        rest_len;

    llm_sreq_t   *req;             /* the running Generate */
    llm_prep_t   *prep;            /* its prompt being prepared */
    char         *req_id;
    int           closing;         /* close once the output is written */
    int           dead;
};

struct llm_server_s {
    llm_server_conf_t  c;
    llm_sched_t       *sched;
    llm_hooks_ctx_t    hooks;     /* constrained decoding, tool calls */
    int                ep;
    llm_srv_fd_t       lunix, ltcp, sig;
    llm_conn_t        *conns;
    uint64_t           n_conns;
    uint64_t           next_id;
    int                draining;
    double             deadline;

    /* the prompt worker */
    llm_srv_fd_t       prep_ev;    /* eventfd: results are on prep_done */
    pthread_t          prep_thread;
    int                prep_started;
    pthread_mutex_t    prep_mu;
    pthread_cond_t     prep_cv;
    llm_prep_t        *prep_head, *prep_tail;  /* to do, FIFO */
    llm_prep_t        *prep_done;              /* done, LIFO */
    int                prep_stop;
    uint32_t           n_prep;     /* jobs a connection waits for */

    /* Embed requests answered and their tokens (Info's stats count them
     * with the Generates') */
    uint64_t           embed_requests;
    uint64_t           embed_tokens;

    /* the steps' wall time, and the loop's between two steps while work
     * was pending (s) */
    double             step_s;
    double             loop_s;

    char               sock_path[sizeof(((struct sockaddr_un *) 0)->sun_path)];
};


static double
llm_srv_now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double) ts.tv_sec + (double) ts.tv_nsec / 1e9;
}


/* Output. */

static int
llm_conn_reserve(llm_conn_t *c, size_t n)
{
    uint8_t *b;
    size_t   cap;

    if (c->wpos > 0 && c->wpos == c->wlen) {
        c->wpos = c->wlen = 0;
    }
    if (c->wlen + n <= c->wcap) {
        return 0;
    }
    if (c->wpos > 0) {
        memmove(c->wbuf, c->wbuf + c->wpos, c->wlen - c->wpos);
        c->wlen -= c->wpos;
        c->wpos = 0;
        if (c->wlen + n <= c->wcap) {
            return 0;
        }
    }
    cap = c->wcap ? c->wcap : 4096;
    while (cap < c->wlen + n) {
        cap *= 2;
    }
    b = realloc(c->wbuf, cap);
    if (b == NULL) {
        return -ENOMEM;
    }
    c->wbuf = b;
    c->wcap = cap;
    return 0;
}

static void llm_conn_kill(llm_conn_t *c, const char *why);
static void llm_prep_drop(llm_conn_t *c);

/* Encode one event as a frame onto c's write buffer. */
static void
llm_conn_send(llm_conn_t *c, const Llm__Event *ev)
{
    size_t   n;
    uint8_t *p;

    if (c->dead) {
        return;
    }
    n = llm__event__get_packed_size(ev);
    if (llm_conn_reserve(c, n + 4) != 0) {
        llm_conn_kill(c, "out of memory for output");
        return;
    }
    p = c->wbuf + c->wlen;
    p[0] = (uint8_t) (n >> 24);
    p[1] = (uint8_t) (n >> 16);
    p[2] = (uint8_t) (n >> 8);
    p[3] = (uint8_t) n;
    llm__event__pack(ev, p + 4);
    c->wlen += n + 4;
}

static void
llm_conn_send_cb(void *c, const Llm__Event *ev)
{
    llm_conn_send(c, ev);
}

/* An Error of the server's own (not of the scheduler), as wire.c
 * encodes every Generate event. */
static void
llm_conn_error(llm_conn_t *c, llm_errcode_e code, const char *param,
    const char *fmt, ...)
{
    llm_sched_event_t  ev;
    char               msg[1024];
    va_list            ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    memset(&ev, 0, sizeof(ev));
    ev.kind = LLM_SEV_ERROR;
    ev.u.error.code = code;
    ev.u.error.message = msg;
    ev.u.error.param = param;
    llm_wire_event(&ev, c->srv->c.vocab, llm_conn_send_cb, c);
}

/* Register c for output (out) and, unless its reader is paused, input. */
static void
llm_conn_arm(llm_conn_t *c, int out, int paused)
{
    struct epoll_event ee;

    if (c->dead || (c->want_out == out && c->rpaused == paused)) {
        return;
    }
    ee.events = (paused ? 0 : EPOLLIN | EPOLLRDHUP) | (out ? EPOLLOUT : 0);
    ee.data.ptr = c;
    if (epoll_ctl(c->srv->ep, EPOLL_CTL_MOD, c->fd, &ee) == 0) {
        c->want_out = out;
        c->rpaused = paused;
    }
}

static void
llm_conn_watch(llm_conn_t *c, int out)
{
    llm_conn_arm(c, out, c->rpaused);
}

/* Unsent output over the limit: c's requests wait (and its streams sit
 * out the steps) until the peer reads. */
static int
llm_conn_over(const llm_conn_t *c)
{
    return c->wlen - c->wpos > c->srv->c.wbuf_high;
}

/* c's Tokenize is on the worker: its next requests wait for the answer. */
static int
llm_conn_tok_wait(const llm_conn_t *c)
{
    return c->prep != NULL
           && c->prep->rq->kind_case == LLM__REQUEST__KIND_TOKENIZE;
}

/* Write what can be written now. */
static void
llm_conn_flush(llm_conn_t *c)
{
    ssize_t n;

    while (!c->dead && c->wpos < c->wlen) {
        n = send(c->fd, c->wbuf + c->wpos, c->wlen - c->wpos, MSG_NOSIGNAL);
        if (n > 0) {
            c->wpos += (size_t) n;
            continue;
        }
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            llm_conn_watch(c, 1);
            return;
        }
        llm_conn_kill(c, n < 0 && (errno == EPIPE || errno == ECONNRESET)
                         ? "client closed (write)"
                         : n < 0 ? strerror(errno) : "short write");
        return;
    }
    if (c->dead) {
        return;
    }
    c->wpos = c->wlen = 0;
    llm_conn_watch(c, 0);
    if (c->closing) {
        llm_conn_kill(c, NULL);
    }
}

/* End c now: cancel its request, mark it for the sweep. */
static void
llm_conn_kill(llm_conn_t *c, const char *why)
{
    if (c->dead) {
        return;
    }
    if (c->req != NULL || (c->prep != NULL && !llm_conn_tok_wait(c))) {
        llm_log(LLM_LOG_INFO, "request %s cancelled: %s", c->req_id,
                why ? why : "connection closed");
    }
    if (c->req != NULL) {
        llm_sched_cancel(c->srv->sched, c->req);
        c->req = NULL;
    } else if (c->prep != NULL) {
        if (!llm_conn_tok_wait(c)) {
            llm_sched_count_cancelled(c->srv->sched);
        }
        llm_prep_drop(c);
    } else if (why) {
        llm_log(LLM_LOG_DEBUG, "connection %llu closed: %s",
                (unsigned long long) c->id, why);
    }
    c->dead = 1;
    epoll_ctl(c->srv->ep, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    c->fd = -1;
}

static void
llm_conn_free(llm_conn_t *c)
{
    llm_server_t *srv = c->srv;

    if (c->prev) {
        c->prev->next = c->next;
    } else {
        srv->conns = c->next;
    }
    if (c->next) {
        c->next->prev = c->prev;
    }
    srv->n_conns--;
    free(c->body);
    free(c->rest);
    free(c->wbuf);
    free(c->req_id);
    free(c);
}


/* Scheduler callbacks. */

static const char *
llm_finish_name(llm_finish_e f)
{
    switch (f) {
    case LLM_FINISH_STOP: return "stop";
    case LLM_FINISH_LENGTH: return "length";
    case LLM_FINISH_TOOL_CALLS: return "tool_calls";
    case LLM_FINISH_CONTENT_FILTER: return "content_filter";
    default: return "none";
    }
}

static void
llm_srv_emit(void *owner, const llm_sched_event_t *ev)
{
    llm_conn_t *c = owner;

    llm_wire_event(ev, c->srv->c.vocab, llm_conn_send_cb, c);
    if (ev->kind == LLM_SEV_DONE) {
        const llm_usage_t *u = &ev->u.done.usage;

        llm_log(LLM_LOG_INFO, "request %s done: finish %s, prompt %u "
                "(cached %u) completion %u tokens, queue %.1f prefill %.1f "
                "decode %.1f ms", c->req_id ? c->req_id : "-",
                ev->u.done.n_choices ? llm_finish_name(ev->u.done.finish[0])
                                     : "none",
                u->prompt_tokens, u->cached_tokens, u->completion_tokens,
                ev->u.done.queue_ms, ev->u.done.prefill_ms,
                ev->u.done.decode_ms);
        c->req = NULL;
    } else if (ev->kind == LLM_SEV_ERROR) {
        llm_log(LLM_LOG_INFO, "request %s failed: %s",
                c->req_id ? c->req_id : "-", ev->u.error.message);
        c->req = NULL;
    }
    if (c->req == NULL && c->srv->draining) {
        c->closing = 1;
    }
}

static int
llm_srv_ready(void *owner)
{
    llm_conn_t *c = owner;

    return c->wlen - c->wpos < c->srv->c.wbuf_high;
}


/* Requests. */

static int
llm_srv_model_ok(llm_server_t *srv, const char *name)
{
    if (name[0] == '\0' || strcmp(name, srv->c.model_name) == 0) {
        return 1;
    }
    for (size_t i = 0; i < srv->c.n_aliases; i++) {
        if (strcmp(name, srv->c.aliases[i]) == 0) {
            return 1;
        }
    }
    return 0;
}

/* Prompt worker. */

static void
llm_prep_free(llm_prep_t *j)
{
    llm_request_free(&j->req);
    llm__request__free_unpacked(j->rq, NULL);
    llm_tokens_free(&j->toks);
    for (size_t i = 0; i < j->n_all; i++) {
        llm_tokens_free(&j->all[i]);
    }
    free(j->all);
    free(j->vec);
    free(j->in_tokens);
    free(j);
}

/* A completion with several prompts: each one's tokens into j->all. */
static int
llm_prep_prompts(llm_server_t *srv, llm_prep_t *j)
{
    int rc = 0;

    j->all = calloc(j->req.n_prompts, sizeof(llm_tokens_t));
    if (j->all == NULL) {
        snprintf(j->err, sizeof(j->err), "out of memory");
        return -ENOMEM;
    }
    j->n_all = j->req.n_prompts;
    for (size_t i = 0; i < j->n_all && rc == 0; i++) {
        rc = llm_prompt_build_nth(srv->c.vocab, &j->req, i, &j->all[i],
                                  &j->param, j->err, sizeof(j->err));
    }
    return rc;
}

/*
 * An Embed on the worker: the texts tokenized (special tokens added as the
 * vocabulary asks), then every input through the forward pass together.
 * The loop never runs the forward pass of an embedding engine (it takes
 * no Generate), so the context is the worker's while this runs.
 */
static void
llm_prep_embed(llm_server_t *srv, llm_prep_t *j)
{
    const Llm__EmbedRequest  *e = j->rq->embed;
    const llm_embed_conf_t   *ec = srv->c.embed;
    llm_tokens_t             *in;
    uint32_t                  i, n = (uint32_t) e->n_inputs;
    double                    t0 = llm_srv_now();

    j->param = "input";
    in = calloc(n ? n : 1, sizeof(*in));
    j->in_tokens = calloc(n ? n : 1, sizeof(uint32_t));
    if (in == NULL || j->in_tokens == NULL) {
        j->rc = -ENOMEM;
        free(in);
        return;
    }
    j->rc = 0;
    for (i = 0; i < n && j->rc == 0; i++) {
        const Llm__EmbedInput *x = e->inputs[i];

        if (x->is_tokens) {
            in[i].ids = x->tokens;      /* borrowed: not freed below */
            in[i].n = x->n_tokens;
        } else {
            j->rc = llm_tokenize(srv->c.vocab, x->text, strlen(x->text),
                                 LLM_TOK_ADD_SPECIAL, &in[i], j->err,
                                 sizeof(j->err));
        }
        j->in_tokens[i] = (uint32_t) in[i].n;
    }
    if (j->rc == 0) {
        j->dims = e->dimensions ? e->dimensions : ec->n_embd;
        if (j->dims <= ec->n_embd) {
            j->vec = malloc((size_t) (n ? n : 1) * j->dims * sizeof(float));
            if (j->vec == NULL) {
                j->rc = -ENOMEM;
            }
        }
    }
    if (j->rc == 0) {
        j->n_in = n;
        /* the loop sets dropped when the client leaves: stop there */
        j->rc = llm_embed_run(ec, in, n, e->dimensions, &j->dropped, j->vec,
                              &j->param, j->err, sizeof(j->err));
    }
    for (i = 0; i < n; i++) {
        if (!e->inputs[i]->is_tokens) {
            llm_tokens_free(&in[i]);
        }
    }
    free(in);
    j->ms = (llm_srv_now() - t0) * 1e3;
}

/* The worker: prepare the jobs in order until told to stop. */
static void *
llm_prep_main(void *arg)
{
    llm_server_t *srv = arg;
    llm_prep_t   *j;
    uint64_t      one = 1;

    pthread_mutex_lock(&srv->prep_mu);
    for (;;) {
        while (srv->prep_head == NULL && !srv->prep_stop) {
            pthread_cond_wait(&srv->prep_cv, &srv->prep_mu);
        }
        if (srv->prep_stop) {
            break;
        }
        j = srv->prep_head;
        srv->prep_head = j->next;
        if (srv->prep_head == NULL) {
            srv->prep_tail = NULL;
        }
        pthread_mutex_unlock(&srv->prep_mu);

        if (atomic_load(&j->dropped)) {
            j->rc = -ECANCELED;
        } else if (j->rq->kind_case == LLM__REQUEST__KIND_TOKENIZE) {
            const Llm__TokenizeRequest *t = j->rq->tokenize;

            j->rc = llm_tokenize(srv->c.vocab, t->text, strlen(t->text),
                                 (t->add_special ? LLM_TOK_ADD_SPECIAL : 0)
                                 | (t->parse_special ? LLM_TOK_PARSE_SPECIAL
                                                     : 0),
                                 &j->toks, j->err, sizeof(j->err));
        } else if (j->rq->kind_case == LLM__REQUEST__KIND_EMBED) {
            llm_prep_embed(srv, j);
        } else {
            double t0 = llm_srv_now();

            /* the one place a Generate is decoded */
            j->rc = llm_wire_request(&j->req, j->rq->generate, j->err,
                                     sizeof(j->err));
            if (j->rc == 0 && j->req.n_prompts > 1) {
                j->rc = llm_prep_prompts(srv, j);
            } else if (j->rc == 0) {
                j->rc = llm_prompt_build(srv->c.tmpl, srv->c.vocab, &j->req,
                                         &j->toks, &j->param, j->err,
                                         sizeof(j->err));
            }
            j->ms = (llm_srv_now() - t0) * 1e3;
        }

        pthread_mutex_lock(&srv->prep_mu);
        j->next = srv->prep_done;
        srv->prep_done = j;
        (void) !write(srv->prep_ev.fd, &one, sizeof(one));
    }
    pthread_mutex_unlock(&srv->prep_mu);
    return NULL;
}

/* Hand c's Generate (rq, owned by the job from now on) to the worker.
 * 0 or -ENOMEM (rq still the caller's). */
static int
llm_prep_submit(llm_conn_t *c, Llm__Request *rq)
{
    llm_server_t *srv = c->srv;
    llm_prep_t   *j;

    j = calloc(1, sizeof(*j));
    if (j == NULL) {
        return -ENOMEM;
    }
    j->conn = c;
    j->rq = rq;
    atomic_init(&j->dropped, 0);
    pthread_mutex_lock(&srv->prep_mu);
    if (srv->prep_tail) {
        srv->prep_tail->next = j;
    } else {
        srv->prep_head = j;
    }
    srv->prep_tail = j;
    pthread_cond_signal(&srv->prep_cv);
    pthread_mutex_unlock(&srv->prep_mu);
    c->prep = j;
    srv->n_prep++;
    return 0;
}

/* Forget c's job: the worker skips it if it has not started, and its
 * result is freed unseen when it comes back. */
static void
llm_prep_drop(llm_conn_t *c)
{
    atomic_store(&c->prep->dropped, 1);
    c->prep->conn = NULL;
    c->prep = NULL;
    c->srv->n_prep--;
}

/*
 * A count_only Generate whose prompt is ready: Started and Done with the
 * prompt's tokens (every prompt's, for several), no choices, nothing
 * generated, the scheduler never involved.
 */
static void
llm_srv_counted(llm_conn_t *c, const llm_prep_t *j)
{
    llm_sched_event_t  ev;
    uint32_t           n = (uint32_t) j->toks.n;

    for (size_t i = 0; i < j->n_all; i++) {
        n += (uint32_t) j->all[i].n;
    }
    memset(&ev, 0, sizeof(ev));
    ev.kind = LLM_SEV_STARTED;
    ev.u.started.prompt_tokens = n;
    llm_srv_emit(c, &ev);
    memset(&ev, 0, sizeof(ev));
    ev.kind = LLM_SEV_DONE;
    ev.u.done.usage.prompt_tokens = n;
    ev.u.done.model = c->srv->c.model_name;
    ev.u.done.fingerprint = c->srv->c.sched.fingerprint
                            ? c->srv->c.sched.fingerprint : "";
    llm_srv_emit(c, &ev);
}

/* c's prompt is ready (or failed): submit it to the scheduler, or for
 * count_only answer with its size. */
static void
llm_srv_prepared(llm_conn_t *c, llm_prep_t *j)
{
    llm_server_t *srv = c->srv;
    int           rc = j->rc;

    if (rc != 0) {
        llm_conn_error(c, rc == -EINVAL ? LLM_ERR_INVALID_REQUEST
                                        : LLM_ERR_INTERNAL,
                       j->param, "%s", j->err[0] ? j->err : strerror(-rc));
    } else if (j->rq->generate->count_only) {
        llm_srv_counted(c, j);
    } else {
        llm_log(LLM_LOG_DEBUG, "request %s: %zu prompt tokens prepared in "
                "%.1f ms, key %s", c->req_id, j->toks.n, j->ms,
                j->rq->generate->key_id[0] ? j->rq->generate->key_id : "-");
        c->req = j->n_all
                 ? llm_sched_submit_many(srv->sched, &j->req, j->all,
                                         j->n_all, c)
                 : llm_sched_submit(srv->sched, &j->req, &j->toks, c);
    }
    if (c->req == NULL && srv->draining) {
        c->closing = 1;
    }
}

/* c's Tokenize is done: the answer; its reader resumes (the sweep). */
static void
llm_srv_tokenized(llm_conn_t *c, llm_prep_t *j)
{
    Llm__Event              ev = LLM__EVENT__INIT;
    Llm__TokenizeResponse   tr = LLM__TOKENIZE_RESPONSE__INIT;

    if (j->rc != 0) {
        llm_conn_error(c, LLM_ERR_INVALID_REQUEST, "text",
                       "%s", j->err[0] ? j->err : strerror(-j->rc));
        c->closing |= c->srv->draining;
        return;
    }
    tr.n_tokens = j->toks.n;
    tr.tokens = j->toks.ids;
    ev.kind_case = LLM__EVENT__KIND_TOKENIZE;
    ev.tokenize = &tr;
    llm_conn_send(c, &ev);
    if (c->srv->draining) {
        c->closing = 1;
    }
}

/* c's Embed is done: one Embedding event per input and EmbedDone, or the
 * error. */
static void
llm_srv_embedded(llm_conn_t *c, llm_prep_t *j)
{
    Llm__Event       ev = LLM__EVENT__INIT;
    Llm__Embedding   row = LLM__EMBEDDING__INIT;
    Llm__EmbedDone   done = LLM__EMBED_DONE__INIT;
    Llm__Usage       u = LLM__USAGE__INIT;
    uint32_t         i, total = 0;

    if (j->rc != 0) {
        llm_conn_error(c, j->rc == -EINVAL ? LLM_ERR_INVALID_REQUEST
                                           : LLM_ERR_INTERNAL,
                       j->rc == -EINVAL ? j->param : NULL, "%s",
                       j->err[0] ? j->err : strerror(-j->rc));
        c->closing |= c->srv->draining;
        return;
    }
    ev.kind_case = LLM__EVENT__KIND_EMBEDDING;
    ev.embedding = &row;
    for (i = 0; i < j->n_in; i++) {
        row.index = i;
        row.n_values = j->dims;
        row.values = j->vec + (size_t) i * j->dims;
        row.tokens = j->in_tokens[i];
        total += j->in_tokens[i];
        llm_conn_send(c, &ev);
    }
    u.prompt_tokens = total;
    c->srv->embed_requests++;
    c->srv->embed_tokens += total;
    done.usage = &u;
    done.model = (char *) c->srv->c.model_name;
    ev.kind_case = LLM__EVENT__KIND_EMBED_DONE;
    ev.embed_done = &done;
    llm_log(LLM_LOG_DEBUG, "request %s: %u inputs, %u tokens embedded in "
            "%.1f ms", c->req_id ? c->req_id : "-", j->n_in, total, j->ms);
    llm_conn_send(c, &ev);
    if (c->srv->draining) {
        c->closing = 1;
    }
}

/* The eventfd fired: take the finished jobs, in the order they ended. */
static void
llm_prep_results(llm_server_t *srv)
{
    llm_prep_t *j, *next, *list = NULL;
    uint64_t    n;

    (void) !read(srv->prep_ev.fd, &n, sizeof(n));
    pthread_mutex_lock(&srv->prep_mu);
    j = srv->prep_done;
    srv->prep_done = NULL;
    pthread_mutex_unlock(&srv->prep_mu);
    for (; j; j = next) {       /* LIFO to FIFO */
        next = j->next;
        j->next = list;
        list = j;
    }
    for (j = list; j; j = next) {
        next = j->next;
        if (j->conn != NULL) {
            srv->n_prep--;
            j->conn->prep = NULL;
            if (j->rq->kind_case == LLM__REQUEST__KIND_TOKENIZE) {
                llm_srv_tokenized(j->conn, j);
            } else if (j->rq->kind_case == LLM__REQUEST__KIND_EMBED) {
                llm_srv_embedded(j->conn, j);
            } else {
                llm_srv_prepared(j->conn, j);
            }
        }
        llm_prep_free(j);
    }
}

/* Stop the worker and free every job left (their connections are gone). */
static void
llm_prep_stop(llm_server_t *srv)
{
    llm_prep_t *j, *next;

    if (srv->prep_started) {
        pthread_mutex_lock(&srv->prep_mu);
        srv->prep_stop = 1;
        pthread_cond_signal(&srv->prep_cv);
        pthread_mutex_unlock(&srv->prep_mu);
        pthread_join(srv->prep_thread, NULL);
        srv->prep_started = 0;
    }
    for (j = srv->prep_head; j; j = next) {
        next = j->next;
        llm_prep_free(j);
    }
    for (j = srv->prep_done; j; j = next) {
        next = j->next;
        llm_prep_free(j);
    }
    srv->prep_head = srv->prep_tail = srv->prep_done = NULL;
}

/*
 * A Generate: checked here, its prompt prepared by the worker.  Returns 1
 * when the job took rq, 0 when the caller still owns it (answered here).
 */
static int
llm_srv_generate(llm_conn_t *c, Llm__Request *rq)
{
    llm_server_t               *srv = c->srv;
    const Llm__GenerateRequest *g = rq->generate;

    free(c->req_id);
    c->req_id = strdup(g->request_id[0] ? g->request_id : "-");
    if (srv->draining) {
        llm_conn_error(c, LLM_ERR_SHUTTING_DOWN, NULL,
                       "the engine is shutting down");
        c->closing = 1;
        return 0;
    }
    if (!llm_srv_model_ok(srv, g->model)) {
        llm_conn_error(c, LLM_ERR_MODEL_NOT_FOUND, "model",
                       "The model '%s' does not exist on this engine; it "
                       "serves '%s'", g->model, srv->c.model_name);
        return 0;
    }
    if (srv->c.embed != NULL) {
        llm_conn_error(c, LLM_ERR_INVALID_REQUEST, "model",
                       "The model '%s' is an embedding model (the engine "
                       "runs with --embeddings): use /v1/embeddings",
                       srv->c.model_name);
        return 0;
    }
    if (llm_prep_submit(c, rq) != 0) {
        llm_conn_error(c, LLM_ERR_INTERNAL, NULL,
                       "out of memory");
        return 0;
    }
    return 1;
}

/*
 * The expert cache's counters in EngineStats: hits count experts resident
 * or already in flight (prefetched) when a layer needed them; the read
 * rate is bytes over the time with reads in flight; stall per token is
 * acquire's waiting over the tokens through the forward pass.
 */
static void
llm_srv_expert_stats(llm_server_t *srv, Llm__EngineStats *es)
{
    llm_xcache_stats_t  xs;

    if (srv->c.xcache == NULL) {
        return;
    }
    llm_xcache_get_stats(srv->c.xcache, &xs);
    es->expert_cache_hits = xs.hits + xs.prefetch_hits;
    es->expert_cache_misses = xs.misses;
    es->expert_bytes_read = xs.bytes_read;
    es->expert_read_mbps = xs.io_busy_ns
        ? (double) xs.bytes_read * 1e3 / (double) xs.io_busy_ns : 0.0;
    es->expert_prefetch_accuracy = xs.prefetch_guessed
        ? (double) xs.prefetch_right / (double) xs.prefetch_guessed : 0.0;
    es->io_stall_ms_per_token = es->step_tokens_total
        ? (double) xs.stall_ns / 1e6 / (double) es->step_tokens_total : 0.0;
}

void
llm_server_log_expert_stats(llm_server_t *srv)
{
    Llm__EngineStats    es = LLM__ENGINE_STATS__INIT;
    llm_sched_stats_t   st;

    if (srv == NULL || srv->c.xcache == NULL) {
        return;
    }
    llm_sched_get_stats(srv->sched, &st);
    es.step_tokens_total = st.step_tokens_total;
    llm_srv_expert_stats(srv, &es);
    llm_log(LLM_LOG_INFO, "expert cache: %llu hits, %llu misses (hit rate "
            "%.1f%%), %.1f MiB read at %.0f MB/s, prefetch accuracy %.1f%%, "
            "I/O stall %.2f ms per token",
            (unsigned long long) es.expert_cache_hits,
            (unsigned long long) es.expert_cache_misses,
            es.expert_cache_hits + es.expert_cache_misses
            ? 100.0 * (double) es.expert_cache_hits
              / (double) (es.expert_cache_hits + es.expert_cache_misses)
            : 0.0,
            (double) es.expert_bytes_read / 1048576.0, es.expert_read_mbps,
            100.0 * es.expert_prefetch_accuracy, es.io_stall_ms_per_token);
}

static void
llm_srv_info(llm_conn_t *c)
{
    llm_server_t       *srv = c->srv;
    Llm__Event          ev = LLM__EVENT__INIT;
    Llm__InfoResponse   in = LLM__INFO_RESPONSE__INIT;
    Llm__EngineStats    es = LLM__ENGINE_STATS__INIT;
    Llm__EngineLimits   el = LLM__ENGINE_LIMITS__INIT;
    llm_sched_stats_t   st;
    llm_sched_limits_t  lim;

    llm_sched_get_stats(srv->sched, &st);
    llm_sched_get_limits(srv->sched, &lim);
    el.max_choices = lim.max_choices;
    el.max_stop = lim.max_stop;
    el.max_stop_bytes = lim.max_stop_bytes;
    el.max_top_logprobs = lim.max_top_logprobs;
    es.requests_total = st.requests_total + srv->embed_requests;
    es.requests_running = st.requests_running;
    es.requests_queued = st.requests_queued;
    es.requests_cancelled = st.requests_cancelled;
    es.prompt_tokens_total = st.prompt_tokens_total + srv->embed_tokens;
    es.completion_tokens_total = st.completion_tokens_total;
    es.cached_tokens_total = st.cached_tokens_total;
    es.steps_total = st.steps_total;
    es.kv_blocks_total = st.kv_blocks_total;
    es.kv_blocks_free = st.kv_blocks_free;
    es.kv_block_tokens = st.kv_block_tokens;
    es.batch_in_flight = st.batch_in_flight;
    es.connections_open = srv->n_conns;
    es.requests_preempted = st.requests_preempted;
    es.seqs_running = st.seqs_running;
    es.kv_blocks_cached = st.kv_blocks_cached;
    es.step_tokens_total = st.step_tokens_total;
    es.decode_steps_total = st.decode_steps_total;
    es.decode_tokens_total = st.decode_tokens_total;
    es.decode_step_ms_total = st.decode_step_ms_total;
    es.forward_ms_total = st.forward_ms_total;
    es.sample_ms_total = st.sample_ms_total;
    es.detok_ms_total = st.detok_ms_total;
    es.emit_ms_total = st.emit_ms_total;
    es.loop_ms_total = srv->loop_s * 1e3;
    es.step_ms_total = srv->step_s * 1e3;
    llm_srv_expert_stats(srv, &es);

    in.model = (char *) srv->c.model_name;
    in.n_aliases = srv->c.n_aliases;
    in.aliases = (char **) srv->c.aliases;
    in.architecture = (char *) (srv->c.architecture ? srv->c.architecture
                                                    : "");
    in.quantization = (char *) (srv->c.quantization ? srv->c.quantization
                                                    : "");
    in.revision = (char *) (srv->c.revision ? srv->c.revision : "");
    in.context_length = srv->c.sched.n_ctx;
    in.load_state = (char *) (srv->draining ? "draining" : "ready");
    in.queue_depth = st.requests_queued;
    in.max_batch = srv->c.sched.max_batch;
    in.n_params = srv->c.n_params;
    in.file_bytes = srv->c.file_bytes;
    in.n_vocab = srv->c.sched.n_vocab;
    in.chat_template_source = (char *) (srv->c.chat_template_source
                                        ? srv->c.chat_template_source : "");
    in.tool_call_format = (char *) (srv->c.tool_call_format
                                    ? srv->c.tool_call_format : "");
    in.stats = &es;
    in.created = srv->c.created;
    in.system_fingerprint = (char *) (srv->c.sched.fingerprint
                                      ? srv->c.sched.fingerprint : "");
    in.limits = &el;
    if (srv->c.embed != NULL) {
        in.embeddings = 1;
        in.embedding_length = srv->c.embed->n_embd;
        in.pooling = (char *) llm_pooling_name(srv->c.embed->pooling);
        in.embedding_truncate = srv->c.embed->truncate;
        el.max_embed_inputs = srv->c.embed->max_inputs;
    }
    ev.kind_case = LLM__EVENT__KIND_INFO;
    ev.info = &in;
    llm_conn_send(c, &ev);
}

/*
 * An Embed: checked here, tokenized and run by the worker.  Returns 1 when
 * the job took rq, 0 when the caller still owns it (answered here).
 */
static int
llm_srv_embed(llm_conn_t *c, Llm__Request *rq)
{
    llm_server_t            *srv = c->srv;
    const Llm__EmbedRequest *e = rq->embed;

    free(c->req_id);
    c->req_id = strdup(e->request_id[0] ? e->request_id : "-");
    if (srv->draining) {
        llm_conn_error(c, LLM_ERR_SHUTTING_DOWN, NULL,
                       "the engine is shutting down");
        c->closing = 1;
        return 0;
    }
    if (!llm_srv_model_ok(srv, e->model)) {
        llm_conn_error(c, LLM_ERR_MODEL_NOT_FOUND, "model",
                       "The model '%s' does not exist on this engine; it "
                       "serves '%s'", e->model, srv->c.model_name);
        return 0;
    }
    if (srv->c.embed == NULL) {
        llm_conn_error(c, LLM_ERR_INVALID_REQUEST, "model",
                       "The model '%s' does not serve embeddings (its "
                       "engine was not started with --embeddings)",
                       srv->c.model_name);
        return 0;
    }
    if (e->n_inputs > srv->c.embed->max_inputs) {
        llm_conn_error(c, LLM_ERR_INVALID_REQUEST, "input",
                       "'input' holds %zu inputs; at most %u are allowed "
                       "per request", e->n_inputs, srv->c.embed->max_inputs);
        return 0;
    }
    if (llm_prep_submit(c, rq) != 0) {
        llm_conn_error(c, LLM_ERR_INTERNAL, NULL, "out of memory");
        return 0;
    }
    return 1;
}

/* Tokenize: on the worker (a long text would stall the streams).
 * Returns 1 when the job took rq. */
static int
llm_srv_tokenize(llm_conn_t *c, Llm__Request *rq)
{
    if (llm_prep_submit(c, rq) != 0) {
        llm_conn_error(c, LLM_ERR_INTERNAL, NULL,
                       "out of memory");
        return 0;
    }
    return 1;
}

static void
llm_srv_detokenize(llm_conn_t *c, const Llm__DetokenizeRequest *t)
{
    Llm__Event                ev = LLM__EVENT__INIT;
    Llm__DetokenizeResponse   dr = LLM__DETOKENIZE_RESPONSE__INIT;
    const llm_vocab_t        *v = c->srv->c.vocab;
    uint32_t                  nv = llm_vocab_n_tokens(v);
    llm_detok_t              *d = NULL;
    char                     *text = NULL;
    size_t                    len = 0, n;
    const char               *p;
    int                       rc = 0;

    for (size_t i = 0; i < t->n_tokens; i++) {
        if (t->tokens[i] < 0 || (uint32_t) t->tokens[i] >= nv) {
            llm_conn_error(c, LLM_ERR_INVALID_REQUEST,
                           "tokens", "tokens[%zu]: id %d is not in the "
                           "vocabulary (0..%u)", i, t->tokens[i], nv - 1);
            return;
        }
    }
    if (llm_detok_create(&d, v, NULL, 0) != 0) {
        llm_conn_error(c, LLM_ERR_INTERNAL, NULL,
                       "out of memory");
        return;
    }
    llm_detok_set_special(d, 1);
    llm_detok_set_strip_space(d, 0);
    for (size_t i = 0; i <= t->n_tokens && rc >= 0; i++) {
        char *nt;

        rc = i < t->n_tokens ? llm_detok_push(d, t->tokens[i], &p, &n)
                             : llm_detok_flush(d, &p, &n);
        if (rc < 0 || n == 0) {
            continue;
        }
        nt = realloc(text, len + n + 1);
        if (nt == NULL) {
            rc = -ENOMEM;
            break;
        }
        text = nt;
        memcpy(text + len, p, n);
        len += n;
        text[len] = '\0';
    }
    llm_detok_free(d);
    if (rc < 0) {
        llm_conn_error(c, LLM_ERR_INTERNAL, NULL,
                       "detokenize: %s", strerror(-rc));
    } else {
        dr.text = text ? text : (char *) "";
        ev.kind_case = LLM__EVENT__KIND_DETOKENIZE;
        ev.detokenize = &dr;
        llm_conn_send(c, &ev);
    }
    free(text);
}

/*
 * Cancel: the Generate running (or queued) on c ends before the next step
 * with Error{ERROR_CANCELLED, usage}; the connection stays open.  On an
 * idle connection the Generate's terminal event crossed the Cancel on the
 * wire: nothing to do, and no reply.
 */
static void
llm_srv_cancel(llm_conn_t *c)
{
    if (c->prep != NULL && !llm_conn_tok_wait(c)) {
        llm_sched_event_t  ev;
        llm_usage_t        u = { 0, 0, 0 };

        llm_log(LLM_LOG_INFO, "request %s cancelled by the client while its "
                "prompt was prepared", c->req_id ? c->req_id : "-");
        llm_prep_drop(c);
        llm_sched_count_cancelled(c->srv->sched);
        memset(&ev, 0, sizeof(ev));
        ev.kind = LLM_SEV_ERROR;
        ev.u.error.code = LLM_ERR_CANCELLED;
        ev.u.error.message = "cancelled by the client";
        ev.u.error.usage = &u;
        llm_wire_event(&ev, c->srv->c.vocab, llm_conn_send_cb, c);
        if (c->srv->draining) {
            c->closing = 1;
        }
        return;
    }
    if (c->req == NULL) {
        llm_log(LLM_LOG_DEBUG, "connection %llu: Cancel with nothing "
                "running, ignored", (unsigned long long) c->id);
        return;
    }
    llm_log(LLM_LOG_INFO, "request %s cancelled by the client",
            c->req_id ? c->req_id : "-");
    llm_sched_stop(c->srv->sched, c->req, "cancelled by the client");
    c->req = NULL;
}

/*
 * The secret's comparison, in time that does not tell how much of it a
 * guess got (OpenSSL's CRYPTO_memcmp; only the length may show).
 */
static int
llm_secret_equal(const char *guess, const char *secret)
{
    size_t  lg = strlen(guess), ls = strlen(secret);

    if (lg != ls || ls == 0) {
        (void) CRYPTO_memcmp(secret, secret, ls);
        return 0;
    }
    return CRYPTO_memcmp(guess, secret, ls) == 0;
}

/*
 * A TCP connection's first frame must bring the engine's secret
 * (--auth-file): 1 when it may go on, else the connection is refused
 * (an Error the gateway treats as the engine's failure) and closed.
 */
static int
llm_conn_authorize(llm_conn_t *c, const Llm__Request *rq)
{
    if (!c->need_auth) {
        return 1;
    }
    if (rq->auth != NULL && llm_secret_equal(rq->auth, c->srv->c.auth)) {
        c->need_auth = 0;
        return 1;
    }
    llm_log(LLM_LOG_WARN, "connection %llu: refused: %s",
            (unsigned long long) c->id,
            rq->auth && rq->auth[0] ? "wrong secret"
                                    : "no secret (see --auth-file)");
    llm_conn_error(c, LLM_ERR_INTERNAL, NULL,
                   "authentication failed: this engine needs its shared "
                   "secret on TCP (llm-engine --auth-file; nginx: "
                   "llm_engine_auth_file)");
    c->closing = 1;
    return 0;
}

static void
llm_conn_frame(llm_conn_t *c, const uint8_t *p, size_t n)
{
    Llm__Request *rq;

    rq = llm__request__unpack(NULL, n, p);
    if (rq == NULL) {
        llm_log(LLM_LOG_WARN, "connection %llu: undecodable frame of %zu "
                "bytes", (unsigned long long) c->id, n);
        llm_conn_error(c, LLM_ERR_BAD_FRAME, NULL,
                       "bad frame: %zu bytes that do not decode as an "
                       "llm.Request", n);
        c->closing = 1;
        return;
    }
    if (!llm_conn_authorize(c, rq)) {
        llm__request__free_unpacked(rq, NULL);
        return;
    }
    if (rq->kind_case == LLM__REQUEST__KIND_CANCEL) {
        llm_srv_cancel(c);
        llm__request__free_unpacked(rq, NULL);
        return;
    }
    if (rq->kind_case == LLM__REQUEST__KIND_PING) {
        /* alive while its prompt is prepared, queued or running */
        if (c->req != NULL || c->prep != NULL) {
            Llm__Event  ev = LLM__EVENT__INIT;
            Llm__Pong   pong = LLM__PONG__INIT;

            ev.kind_case = LLM__EVENT__KIND_PONG;
            ev.pong = &pong;
            llm_conn_send(c, &ev);
        }
        llm__request__free_unpacked(rq, NULL);
        return;
    }
    if (c->req != NULL || c->prep != NULL) {
        if (c->req != NULL) {
            llm_sched_cancel(c->srv->sched, c->req);
            c->req = NULL;
        } else {
            llm_prep_drop(c);
            llm_sched_count_cancelled(c->srv->sched);
        }
        llm_conn_error(c, LLM_ERR_INVALID_REQUEST, NULL,
                       "a request arrived while another one was running on "
                       "this connection (one request at a time)");
        c->closing = 1;
        llm__request__free_unpacked(rq, NULL);
        return;
    }
    switch (rq->kind_case) {
    case LLM__REQUEST__KIND_GENERATE:
        if (llm_srv_generate(c, rq)) {
            return;     /* the prompt job owns rq */
        }
        break;
    case LLM__REQUEST__KIND_INFO:
        llm_srv_info(c);
        break;
    case LLM__REQUEST__KIND_TOKENIZE:
        if (llm_srv_tokenize(c, rq)) {
            return;     /* the job owns rq */
        }
        break;
    case LLM__REQUEST__KIND_DETOKENIZE:
        llm_srv_detokenize(c, rq->detokenize);
        break;
    case LLM__REQUEST__KIND_EMBED:
        if (llm_srv_embed(c, rq)) {
            return;     /* the job owns rq */
        }
        break;
    default:
        llm_conn_error(c, LLM_ERR_INVALID_REQUEST, NULL,
                       "the request has no kind set (generate, info, "
                       "tokenize, detokenize, embed or cancel)");
        break;
    }
    llm__request__free_unpacked(rq, NULL);
}

/*
 * c's output is over the limit (or its Tokenize is on the worker): keep
 * the n bytes at p (what is left of one recv, at most 64 KiB) and stop
 * reading until the peer has read its replies (llm_conn_resume).  Without this a client pipelining requests it
 * never reads the answers to would grow the buffer without bound.
 */
static void
llm_conn_hold(llm_conn_t *c, const uint8_t *p, size_t n)
{
    uint8_t *b = malloc(n ? n : 1);

    if (b == NULL) {
        llm_conn_kill(c, "out of memory for held input");
        return;
    }
    memcpy(b, p, n);
    free(c->rest);
    c->rest = b;
    c->rest_len = n;
    llm_conn_arm(c, c->want_out, 1);
    if (!c->rpaused) {
        llm_conn_kill(c, "epoll_ctl failed");
    }
}

static void llm_conn_input(llm_conn_t *c, const uint8_t *p, size_t n);

/* c's output went under half the limit: parse what it held, read again. */
static void
llm_conn_resume(llm_conn_t *c)
{
    uint8_t *b = c->rest;
    size_t   n = c->rest_len;

    c->rest = NULL;
    c->rest_len = 0;
    llm_conn_arm(c, c->want_out, 0);
    if (c->rpaused) {
        free(b);
        llm_conn_kill(c, "epoll_ctl failed");
        return;
    }
    if (b != NULL && !c->closing) {
        llm_conn_input(c, b, n);    /* may hold again */
    }
    free(b);
}

/* Feed bytes to c's frame reader. */
static void
llm_conn_input(llm_conn_t *c, const uint8_t *p, size_t n)
{
    uint32_t max = c->srv->c.max_frame, k;

    while (n > 0 && !c->dead && !c->closing) {
        if (c->body == NULL && c->hdr_n == 0
            && (llm_conn_over(c) || llm_conn_tok_wait(c)))
        {
            llm_conn_hold(c, p, n);
            return;
        }
        if (c->body == NULL && c->hdr_n < 4) {
            c->hdr[c->hdr_n++] = *p++;
            n--;
            if (c->hdr_n < 4) {
                continue;
            }
            c->body_len = (uint32_t) c->hdr[0] << 24
                          | (uint32_t) c->hdr[1] << 16
                          | (uint32_t) c->hdr[2] << 8 | c->hdr[3];
            if (c->body_len > max) {
                llm_log(LLM_LOG_WARN, "connection %llu: frame of %u bytes "
                        "over the limit of %u", (unsigned long long) c->id,
                        c->body_len, max);
                llm_conn_error(c, LLM_ERR_BAD_FRAME, NULL,
                               "bad frame: %u bytes, over the limit of %u "
                               "(--max-frame)", c->body_len, max);
                c->closing = 1;
                return;
            }
            c->body = malloc(c->body_len ? c->body_len : 1);
            if (c->body == NULL) {
                llm_conn_error(c, LLM_ERR_INTERNAL, NULL,
                               "out of memory for a frame of %u bytes",
                               c->body_len);
                c->closing = 1;
                return;
            }
            c->body_n = 0;
        }
        k = c->body_len - c->body_n;
        if (k > n) {
            k = (uint32_t) n;
        }
        memcpy(c->body + c->body_n, p, k);
        c->body_n += k;
        p += k;
        n -= k;
        if (c->body_n == c->body_len) {
            uint8_t  *b = c->body;
            uint32_t  bl = c->body_len;

            c->body = NULL;
            c->hdr_n = 0;
            llm_conn_frame(c, b, bl);
            free(b);
        }
    }
}

static void
llm_conn_readable(llm_conn_t *c)
{
    uint8_t buf[65536];
    ssize_t n;

    for (;;) {
        if (c->rpaused) {
            return;     /* the rest waits until the peer reads */
        }
        n = recv(c->fd, buf, sizeof(buf), 0);
        if (n > 0) {
            if (!c->closing) {
                llm_conn_input(c, buf, (size_t) n);
            }
            if (c->dead) {
                return;
            }
            continue;
        }
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            return;
        }
        if (n == 0 && llm_conn_tok_wait(c)) {
            /* half-closed after a Tokenize: answer it first (recv gives
             * the EOF again once the reader resumes) */
            llm_conn_hold(c, buf, 0);
            return;
        }
        /* EOF or error: the peer is gone; a request running is cancelled */
        if (n == 0 && (c->hdr_n > 0 || c->body != NULL) && !c->closing) {
            llm_log(LLM_LOG_WARN, "connection %llu: truncated frame "
                    "(%u of %u bytes)", (unsigned long long) c->id,
                    c->body ? c->body_n : c->hdr_n,
                    c->body ? c->body_len : 4);
            if (c->req || c->prep) {
                llm_conn_kill(c, "client closed mid-frame");
                return;
            }
            llm_conn_error(c, LLM_ERR_BAD_FRAME, NULL,
                           "bad frame: truncated, %u of %u bytes",
                           c->body ? c->body_n : c->hdr_n,
                           c->body ? c->body_len : 4);
            c->closing = 1;
            llm_conn_flush(c);
            if (!c->dead) {
                llm_conn_kill(c, NULL);
            }
            return;
        }
        if (n == 0 && c->req == NULL && c->prep == NULL
            && c->wpos < c->wlen)
        {
            /* half-closed after its request: write what is left */
            c->closing = 1;
            llm_conn_flush(c);
            if (!c->dead) {
                llm_conn_kill(c, NULL);
            }
            return;
        }
        llm_conn_kill(c, n < 0 ? strerror(errno) : "client closed");
        return;
    }
}


/* Listeners. */

static int
llm_srv_listen_unix(llm_server_t *srv, const char *path, char *err,
    size_t errlen)
{
    struct sockaddr_un  sa;
    struct stat         sb;
    mode_t              old;
    int                 fd, probe;

    if (strlen(path) >= sizeof(sa.sun_path)) {
        snprintf(err, errlen, "--socket %s: path longer than %zu bytes",
                 path, sizeof(sa.sun_path) - 1);
        return -ENAMETOOLONG;
    }
    memset(&sa, 0, sizeof(sa));
    sa.sun_family = AF_UNIX;
    strcpy(sa.sun_path, path);

    if (lstat(path, &sb) == 0) {
        if (!S_ISSOCK(sb.st_mode)) {
            snprintf(err, errlen, "--socket %s: exists and is not a socket",
                     path);
            return -EEXIST;
        }
        probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (probe >= 0 && connect(probe, (struct sockaddr *) &sa,
                                  sizeof(sa)) == 0)
        {
            close(probe);
            snprintf(err, errlen, "--socket %s: another process is "
                     "listening on it", path);
            return -EADDRINUSE;
        }
        if (probe >= 0) {
            close(probe);
        }
        llm_log(LLM_LOG_INFO, "removing stale socket %s", path);
        unlink(path);
    }

    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        snprintf(err, errlen, "socket(AF_UNIX): %s", strerror(errno));
        return -errno;
    }
    old = umask(0117);
    if (bind(fd, (struct sockaddr *) &sa, sizeof(sa)) != 0) {
        int e = errno;

        umask(old);
        close(fd);
        snprintf(err, errlen, "--socket %s: bind: %s", path, strerror(e));
        return -e;
    }
    umask(old);
    if (chmod(path, 0660) != 0 || listen(fd, 1024) != 0) {
        int e = errno;

        close(fd);
        unlink(path);
        snprintf(err, errlen, "--socket %s: %s", path, strerror(e));
        return -e;
    }
    srv->lunix.kind = LLM_SRV_LISTEN;
    srv->lunix.fd = fd;
    snprintf(srv->sock_path, sizeof(srv->sock_path), "%s", path);
    return 0;
}

/* 1 for 127.0.0.0/8 and ::1. */
static int
llm_srv_loopback(const struct sockaddr *sa)
{
    const struct sockaddr_in   *in4;
    const struct sockaddr_in6  *in6;

    if (sa->sa_family == AF_INET) {
        in4 = (const struct sockaddr_in *) sa;
        return (ntohl(in4->sin_addr.s_addr) >> 24) == 127;
    }
    if (sa->sa_family == AF_INET6) {
        in6 = (const struct sockaddr_in6 *) sa;
        return IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr);
    }
    return 0;
}

static int
llm_srv_listen_tcp(llm_server_t *srv, const char *spec, char *err,
    size_t errlen)
{
    struct addrinfo  hints, *res = NULL, *ai;
    char             host[256], *colon, *h = host;
    int              fd = -1, one = 1, rc;

    snprintf(host, sizeof(host), "%s", spec);
    colon = strrchr(host, ':');
    if (colon == NULL || colon[1] == '\0') {
        snprintf(err, errlen, "--listen %s: expected host:port", spec);
        return -EINVAL;
    }
    *colon = '\0';
    if (h[0] == '[' && colon > h && colon[-1] == ']') {
        h++;
        colon[-1] = '\0';
    }
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE;
    rc = getaddrinfo(h[0] ? h : NULL, colon + 1, &hints, &res);
    if (rc != 0) {
        snprintf(err, errlen, "--listen %s: %s", spec, gai_strerror(rc));
        return -EINVAL;
    }
    for (ai = res; ai; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK
                    | SOCK_CLOEXEC, ai->ai_protocol);
        if (fd < 0) {
            continue;
        }
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        if (!llm_srv_loopback(ai->ai_addr) && srv->c.auth == NULL
            && !srv->c.insecure_listen)
        {
            close(fd);
            freeaddrinfo(res);
            snprintf(err, errlen, "--listen %s: a non-loopback address "
                     "would let anyone on the network use the engine: "
                     "give --auth-file FILE (the secret nginx sends, "
                     "llm_engine_auth_file) or --insecure-listen", spec);
            return -EPERM;
        }
        if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0
            && listen(fd, 1024) == 0)
        {
            break;
        }
        close(fd);
        fd = -1;
    }
    rc = errno;
    freeaddrinfo(res);
    if (fd < 0) {
        snprintf(err, errlen, "--listen %s: %s", spec, strerror(rc));
        return -rc;
    }
    srv->ltcp.kind = LLM_SRV_LISTEN;
    srv->ltcp.fd = fd;
    return 0;
}

static void
llm_srv_accept(llm_server_t *srv, llm_srv_fd_t *l)
{
    struct epoll_event  ee;
    llm_conn_t         *c;
    int                 fd, one = 1;

    for (;;) {
        fd = accept4(l->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED) {
                continue;
            }
            if (errno != EAGAIN && errno != EWOULDBLOCK) {
                llm_log(LLM_LOG_WARN, "accept: %s", strerror(errno));
            }
            return;
        }
        if (l == &srv->ltcp) {
            setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        }
        c = calloc(1, sizeof(*c));
        if (c == NULL) {
            close(fd);
            continue;
        }
        c->kind = LLM_SRV_CONN;
        c->fd = fd;
        c->srv = srv;
        c->id = ++srv->next_id;
        c->need_auth = (l == &srv->ltcp && srv->c.auth != NULL);
        ee.events = EPOLLIN | EPOLLRDHUP;
        ee.data.ptr = c;
        if (epoll_ctl(srv->ep, EPOLL_CTL_ADD, fd, &ee) != 0) {
            close(fd);
            free(c);
            continue;
        }
        c->next = srv->conns;
        if (srv->conns) {
            srv->conns->prev = c;
        }
        srv->conns = c;
        srv->n_conns++;
    }
}

static void
llm_srv_close_listeners(llm_server_t *srv)
{
    if (srv->lunix.fd >= 0) {
        epoll_ctl(srv->ep, EPOLL_CTL_DEL, srv->lunix.fd, NULL);
        close(srv->lunix.fd);
        srv->lunix.fd = -1;
        unlink(srv->sock_path);
    }
    if (srv->ltcp.fd >= 0) {
        epoll_ctl(srv->ep, EPOLL_CTL_DEL, srv->ltcp.fd, NULL);
        close(srv->ltcp.fd);
        srv->ltcp.fd = -1;
    }
}

static void
llm_srv_signal(llm_server_t *srv)
{
    struct signalfd_siginfo si;

    while (read(srv->sig.fd, &si, sizeof(si)) == sizeof(si)) {
        if (srv->draining) {
            llm_log(LLM_LOG_INFO, "signal %u during the drain: still "
                    "draining (%u requests)", si.ssi_signo,
                    llm_sched_pending(srv->sched) + srv->n_prep);
            continue;
        }
        srv->draining = 1;
        srv->deadline = llm_srv_now() + srv->c.drain_timeout;
        llm_log(LLM_LOG_INFO, "signal %u: draining %u requests, up to "
                "%.1f s; no new connections", si.ssi_signo,
                llm_sched_pending(srv->sched) + srv->n_prep,
                srv->c.drain_timeout);
        llm_srv_close_listeners(srv);
        for (llm_conn_t *c = srv->conns; c; c = c->next) {
            if (c->req == NULL && c->prep == NULL) {
                c->closing = 1;
                llm_conn_flush(c);
            }
        }
    }
}


/* Creation and the loop. */

int
llm_server_create(llm_server_t **out, const llm_server_conf_t *conf,
    char *err, size_t errlen)
{
    llm_server_t       *srv;
    struct epoll_event  ee;
    sigset_t            set;
    int                 rc;

    *out = NULL;
    srv = calloc(1, sizeof(*srv));
    if (srv == NULL) {
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    srv->c = *conf;
    if (srv->c.max_frame == 0) {
        srv->c.max_frame = 16u << 20;
    }
    if (srv->c.wbuf_high == 0) {
        srv->c.wbuf_high = 1u << 20;
    }
    srv->lunix.fd = srv->ltcp.fd = srv->sig.fd = srv->prep_ev.fd = -1;
    pthread_mutex_init(&srv->prep_mu, NULL);
    pthread_cond_init(&srv->prep_cv, NULL);
    srv->ep = epoll_create1(EPOLL_CLOEXEC);
    if (srv->ep < 0) {
        rc = -errno;
        snprintf(err, errlen, "epoll_create1: %s", strerror(errno));
        goto failed;
    }

    srv->c.sched.emit = llm_srv_emit;
    srv->c.sched.ready = llm_srv_ready;
    if (srv->c.sched.hooks_make == NULL && srv->c.sched.vocab != NULL) {
        rc = llm_hooks_ctx_init(&srv->hooks, srv->c.sched.vocab,
                                srv->c.sched.n_vocab,
                                srv->c.tool_call_format, err, errlen);
        if (rc != 0) {
            goto failed;
        }
        srv->c.sched.hooks_make = llm_hooks_make;
        srv->c.sched.hooks_ctx = &srv->hooks;
    }
    rc = llm_sched_create(&srv->sched, &srv->c.sched, err, errlen);
    if (rc != 0) {
        goto failed;
    }

    /* signals come through a signalfd; the caller blocked them in every
     * thread before starting any (see llm-engine.c) */
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigprocmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);
    srv->sig.kind = LLM_SRV_SIGNAL;
    srv->sig.fd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
    if (srv->sig.fd < 0) {
        rc = -errno;
        snprintf(err, errlen, "signalfd: %s", strerror(errno));
        goto failed;
    }
    ee.events = EPOLLIN;
    ee.data.ptr = &srv->sig;
    epoll_ctl(srv->ep, EPOLL_CTL_ADD, srv->sig.fd, &ee);

    /* the prompt worker, started with the signals blocked */
    srv->prep_ev.kind = LLM_SRV_PREP;
    srv->prep_ev.fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (srv->prep_ev.fd < 0) {
        rc = -errno;
        snprintf(err, errlen, "eventfd: %s", strerror(errno));
        goto failed;
    }
    ee.events = EPOLLIN;
    ee.data.ptr = &srv->prep_ev;
    epoll_ctl(srv->ep, EPOLL_CTL_ADD, srv->prep_ev.fd, &ee);
    rc = pthread_create(&srv->prep_thread, NULL, llm_prep_main, srv);
    if (rc != 0) {
        snprintf(err, errlen, "starting the prompt thread: %s",
                 strerror(rc));
        rc = -rc;
        goto failed;
    }
    srv->prep_started = 1;

    if (conf->socket_path == NULL && conf->listen == NULL) {
        snprintf(err, errlen, "nothing to listen on: give --socket or "
                 "--listen");
        rc = -EINVAL;
        goto failed;
    }
    if (conf->socket_path) {
        rc = llm_srv_listen_unix(srv, conf->socket_path, err, errlen);
        if (rc != 0) {
            goto failed;
        }
        ee.events = EPOLLIN;
        ee.data.ptr = &srv->lunix;
        epoll_ctl(srv->ep, EPOLL_CTL_ADD, srv->lunix.fd, &ee);
    }
    if (conf->listen) {
        rc = llm_srv_listen_tcp(srv, conf->listen, err, errlen);
        if (rc != 0) {
            goto failed;
        }
        ee.events = EPOLLIN;
        ee.data.ptr = &srv->ltcp;
        epoll_ctl(srv->ep, EPOLL_CTL_ADD, srv->ltcp.fd, &ee);
    }
    *out = srv;
    return 0;

failed:
    llm_server_free(srv);
    return rc;
}

void
llm_server_free(llm_server_t *srv)
{
    if (srv == NULL) {
        return;
    }
    while (srv->conns) {
        llm_conn_t *c = srv->conns;

        llm_conn_kill(c, NULL);
        llm_conn_free(c);
    }
    llm_srv_close_listeners(srv);
    llm_prep_stop(srv);
    if (srv->prep_ev.fd >= 0) {
        close(srv->prep_ev.fd);
    }
    pthread_mutex_destroy(&srv->prep_mu);
    pthread_cond_destroy(&srv->prep_cv);
    llm_sched_free(srv->sched);
    llm_hooks_ctx_free(&srv->hooks);
    if (srv->sig.fd >= 0) {
        close(srv->sig.fd);
    }
    if (srv->ep >= 0) {
        close(srv->ep);
    }
    free(srv);
}

static int
llm_srv_output_pending(llm_server_t *srv)
{
    for (llm_conn_t *c = srv->conns; c; c = c->next) {
        if (!c->dead && c->wpos < c->wlen) {
            return 1;
        }
    }
    return 0;
}

/* Drain timeout: the requests whose prompt is still being prepared end
 * with ERROR_SHUTTING_DOWN (their jobs are dropped). */
static void
llm_srv_abort_preps(llm_server_t *srv)
{
    for (llm_conn_t *c = srv->conns; c; c = c->next) {
        if (c->prep != NULL) {
            llm_prep_drop(c);
            llm_conn_error(c, LLM_ERR_SHUTTING_DOWN, NULL,
                           "the engine is shutting down (drain timeout)");
            c->closing = 1;
        }
    }
}

int
llm_server_run(llm_server_t *srv)
{
    struct epoll_event  ev[LLM_SRV_MAX_EVENTS];
    int                 n, i, timeout, stepped = 0, rc;
    double              flush_until = 0.0, t_step_end = 0.0, t;
    llm_conn_t         *c, *next;

    for (;;) {
        uint32_t pending = llm_sched_pending(srv->sched);

        if (pending > 0 && stepped > 0) {
            timeout = 0;
        } else if (pending > 0) {
            timeout = 20;       /* waiting for blocks or a slow reader */
        } else {
            timeout = -1;
        }
        if (srv->draining) {
            double left = srv->deadline - llm_srv_now();

            pending += srv->n_prep;
            if (pending == 0 && !llm_srv_output_pending(srv)) {
                break;
            }
            if (left <= 0.0 && flush_until == 0.0) {
                /* also when only unread output is left: a peer that
                 * does not read must not hold the exit forever */
                if (pending > 0) {
                    llm_log(LLM_LOG_WARN, "drain timeout: ending %u "
                            "requests", pending);
                    llm_sched_abort_all(srv->sched,
                                        LLM_ERR_SHUTTING_DOWN,
                                        "the engine is shutting down (drain "
                                        "timeout)");
                    llm_srv_abort_preps(srv);
                }
                flush_until = llm_srv_now() + 1.0;
                pending = 0;
            }
            if (flush_until > 0.0) {
                pending = 0;
            }
            if (pending == 0 && flush_until > 0.0
                && llm_srv_now() > flush_until)
            {
                break;
            }
            if (timeout != 0) {
                timeout = 20;
            }
        }

        n = epoll_wait(srv->ep, ev, LLM_SRV_MAX_EVENTS, timeout);
        if (n < 0 && errno != EINTR) {
            llm_log(LLM_LOG_ERROR, "epoll_wait: %s", strerror(errno));
            return -errno;
        }
        for (i = 0; i < n; i++) {
            int kind = *(int *) ev[i].data.ptr;

            if (kind == LLM_SRV_SIGNAL) {
                llm_srv_signal(srv);
            } else if (kind == LLM_SRV_PREP) {
                llm_prep_results(srv);
            } else if (kind == LLM_SRV_LISTEN) {
                llm_srv_accept(srv, ev[i].data.ptr);
            } else {
                c = ev[i].data.ptr;
                if (c->dead) {
                    continue;
                }
                if (ev[i].events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP
                                    | EPOLLERR))
                {
                    llm_conn_readable(c);
                }
                if (!c->dead && (ev[i].events & EPOLLOUT)) {
                    llm_conn_flush(c);
                }
            }
        }

        if (stepped <= 0) {
            t_step_end = 0.0;   /* idle or waiting: not the loop's cost */
        }
        stepped = 0;
        if (llm_sched_pending(srv->sched) > 0) {
            t = llm_srv_now();
            if (t_step_end > 0.0) {
                srv->loop_s += t - t_step_end;
            }
            rc = llm_sched_step(srv->sched);
            if (rc < 0) {
                llm_log(LLM_LOG_ERROR, "step failed: %s", strerror(-rc));
            }
            stepped = rc;
            t_step_end = llm_srv_now();
            srv->step_s += t_step_end - t;
        }

        for (c = srv->conns; c; c = next) {
            next = c->next;
            /* write; a reader paused whose peer has read resumes (each
             * round parses at least one held frame, so this ends) */
            for (;;) {
                if (!c->dead && (c->wpos < c->wlen || c->closing)) {
                    llm_conn_flush(c);
                }
                if (c->dead || !c->rpaused || llm_conn_tok_wait(c)
                    || c->wlen - c->wpos > srv->c.wbuf_high / 2)
                {
                    break;
                }
                llm_conn_resume(c);
            }
            if (c->dead) {
                llm_conn_free(c);
            }
        }
    }
    llm_log(LLM_LOG_INFO, "drained; exiting");
    return 0;
}
