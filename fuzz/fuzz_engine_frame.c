/*
 * The engine's connection input: the 4-byte length framing, the
 * llm.Request decoder and every request kind's handling (Generate through
 * prompt building on the prompt worker thread, chat template, tokenizer,
 * sampling options, constrained decoding and tool-call hooks; Info,
 * Tokenize, Detokenize, Cancel), exactly as engine/src/serve/server.c runs
 * them: this file includes server.c, so its static functions are called
 * as they are, on a server made by llm_server_create and a connection
 * with no socket.  The scheduler is the real one over a fake forward pass (the
 * logits a hash of the position; end of generation after 24 positions),
 * stepped until every request is done (at most 64 steps, then
 * cancelled).
 *
 * Checks: whatever the input, every frame the engine wrote back decodes
 * as an llm.Event, and no request is left in the scheduler.
 */

#include "../engine/src/serve/server.c"

#include <poll.h>

#include "fuzz_common.h"

#define FZ_CTX      256
#define FZ_STEPS    64

static llm_server_t *fz_srv;
static uint32_t      fz_vocab_n;
static int32_t       fz_eog;

static int
fz_forward(void *ud, const llm_batch_t *b, float *out, char *err,
    size_t errlen)
{
    uint32_t row = 0;

    (void) ud;
    (void) err;
    (void) errlen;
    for (uint32_t i = 0; i < b->n_tokens; i++) {
        uint32_t p = (uint32_t) b->pos[i];
        uint32_t h = (p * 2654435761u) ^ (uint32_t) b->tokens[i];
        float   *o;

        if (!b->logits[i]) {
            continue;
        }
        o = out + (size_t) row++ * fz_vocab_n;
        memset(o, 0, fz_vocab_n * sizeof(float));
        o[h % fz_vocab_n] = 8.0f;
        o[(h >> 7) % fz_vocab_n] = 7.5f;
        if (fz_eog >= 0 && p >= 24) {
            o[fz_eog] = 20.0f;
        }
    }
    return 0;
}

int
LLVMFuzzerInitialize(int *argc, char ***argv)
{
    static const char   *aliases[] = { "alias-a" };
    static char          sock[108];     /* sun_path */
    const char          *tmp;
    llm_server_conf_t    conf;
    llm_vocab_t         *v;
    llm_tmpl_t          *t;
    char                 err[512];

    (void) argc;
    (void) argv;
    llm_log_set_level(LLM_LOG_ERROR);
    v = fuzz_vocab("engine/tests/data/reference/ref-qwen3moe-q4_0.gguf");
    if (llm_tmpl_compile(&t, llm_tmpl_chatml, strlen(llm_tmpl_chatml), err,
                         sizeof(err)) != 0)
    {
        fprintf(stderr, "fuzz: chatml: %s\n", err);
        return 1;
    }
    fz_vocab_n = llm_vocab_n_tokens(v);
    fz_eog = llm_vocab_eos(v);

    /* the real server, listening on a socket nobody connects to; the
     * connections below have no socket (fd -1) */
    memset(&conf, 0, sizeof(conf));
    tmp = getenv("TMPDIR");
    if (tmp == NULL || tmp[0] == '\0' || strlen(tmp) > 64) {
        tmp = "/tmp";           /* a socket path must stay short */
    }
    snprintf(sock, sizeof(sock), "%s/fuzz-engine-%d.sock", tmp,
             (int) getpid());
    conf.socket_path = sock;
    conf.max_frame = 1u << 20;
    conf.vocab = v;
    conf.tmpl = t;
    conf.model_name = "fake";
    conf.aliases = aliases;
    conf.n_aliases = 1;
    conf.tool_call_format = "hermes";
    conf.sched.vocab = v;
    conf.sched.n_vocab = fz_vocab_n;
    conf.sched.n_ctx = FZ_CTX;
    conf.sched.max_batch = 4;
    conf.sched.step_tokens = 64;
    conf.sched.max_queue = 4;
    conf.sched.n_blocks = 4 * FZ_CTX / 16;
    conf.sched.block_tokens = 16;
    conf.sched.forward = fz_forward;
    conf.sched.model_name = "fake";
    conf.sched.fingerprint = "fp_fuzz";
    if (llm_server_create(&fz_srv, &conf, err, sizeof(err)) != 0) {
        fprintf(stderr, "fuzz: server: %s\n", err);
        return 1;
    }
    unlink(sock);
    return 0;
}

/* Wait for the prompt worker's results (or a poll of 0 ms). */
static void
fz_prep_results(int timeout_ms)
{
    struct pollfd pfd = { .fd = fz_srv->prep_ev.fd, .events = POLLIN };

    if (poll(&pfd, 1, timeout_ms) > 0) {
        llm_prep_results(fz_srv);
    }
}

/* Every frame in c's output decodes as an Event. */
static void
fz_check_output(const llm_conn_t *c)
{
    const uint8_t *p, *end;

    if (c->wbuf == NULL) {
        return;
    }
    p = c->wbuf + c->wpos;
    end = c->wbuf + c->wlen;
    while (p < end) {
        uint32_t     n;
        Llm__Event  *ev;

        if (end - p < 4) {
            fprintf(stderr, "output: a partial frame header\n");
            abort();
        }
        n = (uint32_t) p[0] << 24 | (uint32_t) p[1] << 16
            | (uint32_t) p[2] << 8 | p[3];
        p += 4;
        if ((size_t) (end - p) < n) {
            fprintf(stderr, "output: frame of %u bytes, %zu left\n", n,
                    (size_t) (end - p));
            abort();
        }
        ev = llm__event__unpack(NULL, n, p);
        if (ev == NULL) {
            fprintf(stderr, "output: a frame of %u bytes is no Event\n", n);
            abort();
        }
        llm__event__free_unpacked(ev, NULL);
        p += n;
    }
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    llm_conn_t *c;
    int         s;

    c = calloc(1, sizeof(*c));
    if (c == NULL) {
        return 0;
    }
    c->kind = LLM_SRV_CONN;
    c->fd = -1;
    c->srv = fz_srv;
    c->id = ++fz_srv->next_id;
    fz_srv->conns = c;
    fz_srv->n_conns = 1;

    llm_conn_input(c, data, size);
    /* as the loop does: prompt results, then steps, until nothing is
     * left (a prompt takes the worker at most a few seconds) */
    for (s = 0; s < FZ_STEPS; ) {
        if (fz_srv->n_prep > 0) {
            fz_prep_results(1000);
            continue;
        }
        if (llm_sched_pending(fz_srv->sched) == 0) {
            break;
        }
        if (llm_sched_step(fz_srv->sched) < 0) {
            break;
        }
        s++;
    }
    if (c->req != NULL) {
        llm_sched_cancel(fz_srv->sched, c->req);
        c->req = NULL;
    }
    if (c->prep != NULL) {
        llm_prep_drop(c);
    }
    if (llm_sched_pending(fz_srv->sched) != 0) {
        fprintf(stderr, "%u requests left in the scheduler\n",
                llm_sched_pending(fz_srv->sched));
        abort();
    }
    fz_check_output(c);
    llm_conn_free(c);
    fz_prep_results(0);         /* dropped jobs that came back */
    return 0;
}
