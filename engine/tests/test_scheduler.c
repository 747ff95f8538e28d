/*
 * Scheduler checks with a fake forward pass that really uses the block
 * tables: it writes each token id into a shadow KV cache at
 * blocks[pos / bt] * bt + pos % bt, and the "logits" of a position make
 * the argmax a hash of everything it reads back through the block table
 * for positions 0..pos.  A wrong block table, a wrongly shared prefix
 * block, or a bad recompute after preemption changes the hash and the
 * generated tokens, which are compared with an oracle computed from the
 * token sequence alone.
 *
 * Groups: batching (many requests, shared prefixes, mixed lengths),
 * preemption (a KV cache too small), prefix reuse, n choices, recurrent
 * state slots, cancel, queue limit, context limit, stop at EOG.
 *
 * The vocabulary (for the detokenizer) comes from
 * engine/tests/data/reference/ref-llama-moe-q4_0.gguf (cwd = repo root).
 */

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/gguf.h"
#include "serve/scheduler.h"
#include "text/tokenizer.h"
#include "testkit.h"


#define BT     4
#define MAXR   64
#define MAXT   512

static uint32_t  V;
static int32_t  *shadow;         /* [n_blocks * BT] */
static uint32_t  shadow_n;
static int32_t   eog_token = -1;
static int       sched_reasoning;    /* the conf's reasoning format */

/* Recurrent mode: like a model with recurrent layers, the fake forward
 * keeps a hash per state slot instead of reading the past back, so the
 * logits are right only if every sequence kept its own slot, started it
 * at 0 and continued it in order (a prefix reuse or a slot handed over
 * without a restart breaks the oracle or fails the call). */
static int       rec_mode;
static uint32_t  rec_slots;         /* max_batch of the scheduler */
static uint32_t  rec_hash[64], rec_pos[64];
static uint64_t  rec_starts;        /* slots started at position 0 */

/* A scripted answer: after a prompt of script_from tokens, the argmax at
 * each position is the script's next token (then EOG, when set). */
static const int32_t *script;
static uint32_t       script_n, script_from;

static uint32_t
mix(uint32_t h, int32_t t)
{
    h ^= (uint32_t) t + 0x9e3779b9u + (h << 6) + (h >> 2);
    return h * 0x85ebca6bu;
}

/* The next token after the sequence t[0..n). */
static int32_t
oracle(const int32_t *t, uint32_t n)
{
    uint32_t h = 7;

    for (uint32_t i = 0; i < n; i++) {
        h = mix(h, t[i]);
    }
    return (int32_t) (3 + h % (V - 3));
}

/* The recurrent mode's forward (see rec_mode). */
static int
fake_recurrent(const llm_batch_t *b, float *out, char *err, size_t errlen)
{
    int32_t   owner[64];
    uint32_t  row = 0;

    for (uint32_t k = 0; k < 64; k++) {
        owner[k] = -1;
    }
    for (uint32_t i = 0; i < b->n_tokens; i++) {
        uint32_t  slot = b->seqs[b->seq[i]].state, p = (uint32_t) b->pos[i];
        float    *row_out;

        if (slot >= rec_slots
            || (owner[slot] >= 0 && owner[slot] != b->seq[i]))
        {
            snprintf(err, errlen, "state slot %u: out of range or shared",
                     slot);
            return -EINVAL;
        }
        owner[slot] = b->seq[i];
        if (p == 0) {
            rec_hash[slot] = 7;
            rec_pos[slot] = 0;
            rec_starts++;
        } else if (rec_pos[slot] != p) {
            snprintf(err, errlen, "state slot %u holds position %u, the "
                     "batch continues at %u", slot, rec_pos[slot], p);
            return -EINVAL;
        }
        rec_hash[slot] = mix(rec_hash[slot], b->tokens[i]);
        rec_pos[slot] = p + 1;
        if (!b->logits[i]) {
            continue;
        }
        row_out = out + (size_t) row++ * V;
        memset(row_out, 0, V * sizeof(float));
        row_out[3 + rec_hash[slot] % (V - 3)] = 10.0f;
    }
    return 0;
}

/* Prompt tokens in the largest step that also decoded some sequence,
 * and in the largest that did not (steps with a sequence of 1 token and
 * one of more; a 1-token prefill tail counts as decoding). */
static uint32_t  pf_with_decode, pf_alone;
static uint32_t  pf_last, dec_last;     /* the last step's */

static uint32_t
note_prefill(const llm_batch_t *b)
{
    uint32_t  per[64] = { 0 }, i, dec = 0, pf = 0;

    for (i = 0; i < b->n_tokens && b->seq[i] < 64; i++) {
        per[b->seq[i]]++;
    }
    for (i = 0; i < b->n_seqs && i < 64; i++) {
        if (per[i] == 1) {
            dec++;
        } else {
            pf += per[i];
        }
    }
    pf_last = pf;
    dec_last = dec;
    if (dec > 0 && pf > pf_with_decode) {
        pf_with_decode = pf;
    } else if (dec == 0 && pf > pf_alone) {
        pf_alone = pf;
    }
    return pf;
}

/* A clock the fake forward pass advances: 8 ms a step plus fake_pf_ms
 * (0.25) a prompt token (of a sequence with more than one in the step). */
static double  fake_ms;
static double  fake_pf_ms = 0.25;

static double
fake_clock(void)
{
    return fake_ms;
}

static int
fake_forward(void *ud, const llm_batch_t *b, float *out, char *err,
    size_t errlen)
{
    uint32_t row = 0;

    (void) ud;
    fake_ms += 8.0 + fake_pf_ms * note_prefill(b);
    /* writes first: the batch may hold a sequence's earlier positions */
    for (uint32_t i = 0; i < b->n_tokens; i++) {
        const llm_seq_view_t *sv = &b->seqs[b->seq[i]];
        uint32_t              p = (uint32_t) b->pos[i];

        if (p / BT >= sv->n_blocks) {
            snprintf(err, errlen, "position %u beyond the block table", p);
            return -EINVAL;
        }
        shadow[sv->blocks[p / BT] * BT + p % BT] = b->tokens[i];
    }
    if (rec_mode) {
        return fake_recurrent(b, out, err, errlen);
    }
    for (uint32_t i = 0; i < b->n_tokens; i++) {
        const llm_seq_view_t *sv = &b->seqs[b->seq[i]];
        uint32_t              p = (uint32_t) b->pos[i], h = 7;
        float                *row_out;

        if (!b->logits[i]) {
            continue;
        }
        for (uint32_t q = 0; q <= p; q++) {
            h = mix(h, shadow[sv->blocks[q / BT] * BT + q % BT]);
        }
        row_out = out + (size_t) row++ * V;
        memset(row_out, 0, V * sizeof(float));
        row_out[3 + h % (V - 3)] = 10.0f;
        if (script != NULL && p + 1 >= script_from) {
            uint32_t k = p + 1 - script_from;

            row_out[3 + h % (V - 3)] = 0.0f;
            row_out[k < script_n ? script[k]
                    : eog_token >= 0 ? eog_token : 3] = 10.0f;
        }
        if (eog_token >= 0 && p >= 40 && script == NULL) {
            row_out[eog_token] = 20.0f;   /* stop long ones at EOG */
        }
    }
    return 0;
}

typedef struct {
    int       id;
    int32_t   toks[4][MAXT];
    uint32_t  n[4];
    int       done, error, queued, started, cached;
    llm_errcode_e code;
    llm_finish_e finish[4];
    char      msg[256];
    int       has_usage;
    uint32_t  u_prompt, u_completion;
    llm_sreq_t *r;
    char      text[512], rsn[512];     /* choice 0's content, reasoning */
    char      calls[512];              /* its tool calls: "id name(args" */
} owner_t;

static void
append(char *dst, size_t cap, const char *s)
{
    size_t  n = strlen(dst);

    snprintf(dst + n, cap - n, "%s", s ? s : "");
}

static void
emit(void *o, const llm_sched_event_t *ev)
{
    owner_t *w = o;

    switch (ev->kind) {
    case LLM_SEV_DELTA:
        if (ev->u.delta.index == 0) {
            append(w->text, sizeof(w->text), ev->u.delta.text);
            append(w->rsn, sizeof(w->rsn), ev->u.delta.reasoning);
        }
        if (ev->u.delta.token >= 0 && w->n[ev->u.delta.index] < MAXT) {
            w->toks[ev->u.delta.index][w->n[ev->u.delta.index]++] =
                ev->u.delta.token;
        }
        break;
    case LLM_SEV_TOOL_CALL:
        if (ev->u.tool_call.id[0]) {
            append(w->calls, sizeof(w->calls),
                   strncmp(ev->u.tool_call.id, "call_", 5) == 0
                   && strlen(ev->u.tool_call.id) == 29 ? "call_id " : "bad ");
            append(w->calls, sizeof(w->calls), ev->u.tool_call.name);
            append(w->calls, sizeof(w->calls), "(");
        }
        if (ev->u.tool_call.args_len) {
            char a[256];

            snprintf(a, sizeof(a), "%.*s", (int) ev->u.tool_call.args_len,
                     ev->u.tool_call.args);
            append(w->calls, sizeof(w->calls), a);
        }
        break;
    case LLM_SEV_DONE:
        w->done = 1;
        for (size_t i = 0; i < ev->u.done.n_choices; i++) {
            w->finish[i] = ev->u.done.finish[i];
        }
        break;
    case LLM_SEV_ERROR:
        w->error = 1;
        w->code = ev->u.error.code;
        snprintf(w->msg, sizeof(w->msg), "%s", ev->u.error.message);
        if (ev->u.error.usage) {
            w->has_usage = 1;
            w->u_prompt = ev->u.error.usage->prompt_tokens;
            w->u_completion = ev->u.error.usage->completion_tokens;
        }
        break;
    case LLM_SEV_QUEUED:
        w->queued = 1;
        break;
    case LLM_SEV_STARTED:
        w->started = 1;
        w->cached = (int) ev->u.started.cached_tokens;
        break;
    default:
        break;
    }
}

static llm_vocab_t *vocab;

#define LLM_TEST_PF_MIN  8      /* scheduler.c's LLM_SCHED_PF_MIN */

static uint32_t  prefill_budget;    /* the conf's prefill_tokens */
static int       prefill_timed;     /* and prefill_timed */

static llm_sched_t *
make(uint32_t n_blocks, uint32_t max_batch, uint32_t step, uint32_t queue,
    uint32_t ctx)
{
    llm_sched_conf_t c;
    llm_sched_t     *s;
    char             err[256];

    memset(&c, 0, sizeof(c));
    c.vocab = vocab;
    c.n_vocab = V;
    c.n_ctx = ctx;
    c.max_batch = max_batch;
    c.step_tokens = step;
    c.prefill_tokens = prefill_budget;
    c.prefill_timed = prefill_timed;
    c.clock_ms = fake_clock;
    c.max_queue = queue;
    c.n_blocks = n_blocks;
    c.block_tokens = BT;
    c.forward = fake_forward;
    c.emit = emit;
    c.reasoning = sched_reasoning;
    c.recurrent = rec_mode;
    rec_slots = max_batch;
    memset(rec_pos, 0xff, sizeof(rec_pos));
    c.model_name = "fake";
    free(shadow);
    shadow_n = n_blocks * BT;
    shadow = calloc(shadow_n, sizeof(int32_t));
    if (llm_sched_create(&s, &c, err, sizeof(err)) != 0) {
        tk_fail("create: %s", err);
        return NULL;
    }
    return s;
}

static llm_sreq_t *
submit(llm_sched_t *s, owner_t *w, const int32_t *prompt, uint32_t n,
    uint32_t max_tokens, uint32_t nchoices)
{
    llm_request_t        rq;
    llm_tokens_t         t = { 0 };

    llm_request_init(&rq);
    rq.sampling.max_tokens = max_tokens;
    rq.sampling.n = nchoices;
    rq.sampling.ignore_eos = eog_token < 0;
    rq.is_completion = 1;
    for (uint32_t i = 0; i < n; i++) {
        llm_tokens_push(&t, prompt[i]);
    }
    w->r = llm_sched_submit(s, &rq, &t, w);
    llm_tokens_free(&t);
    return w->r;
}

static int
run(llm_sched_t *s)
{
    int steps = 0;

    while (llm_sched_pending(s) > 0 && steps < 100000) {
        if (llm_sched_step(s) < 0) {
            return -1;
        }
        steps++;
    }
    return steps;
}

/* Does w's choice k follow the oracle from prompt? */
static int
follows(const owner_t *w, int k, const int32_t *prompt, uint32_t n)
{
    int32_t seq[2 * MAXT];

    memcpy(seq, prompt, n * sizeof(int32_t));
    for (uint32_t i = 0; i < w->n[k]; i++) {
        if (w->toks[k][i] != oracle(seq, n + i)) {
            return 0;
        }
        seq[n + i] = w->toks[k][i];
    }
    return 1;
}

static int32_t prompts[MAXR][64];
static uint32_t plen[MAXR];

static void
make_prompts(void)
{
    for (int i = 0; i < MAXR; i++) {
        /* groups of 8 share a 12-token prefix (3 blocks) */
        plen[i] = 14 + (uint32_t) (i * 7) % 30;
        for (uint32_t k = 0; k < plen[i]; k++) {
            prompts[i][k] = (int32_t) (k < 12 ? 10 + (i / 8) * 13 + k
                                              : 100 + i * 5 + k);
        }
    }
}

static void
test_batching(void)
{
    static owner_t    w[MAXR];
    llm_sched_t      *s = make(4096, 16, 64, 0, 256);
    llm_sched_stats_t st;

    REQUIRE(s != NULL);
    memset(w, 0, sizeof(w));
    for (int i = 0; i < MAXR; i++) {
        REQUIRE(submit(s, &w[i], prompts[i], plen[i],
                       5 + (uint32_t) i % 23, 1) != NULL);
    }
    REQUIRE(run(s) > 0);
    for (int i = 0; i < MAXR; i++) {
        REQUIRE(w[i].done && !w[i].error);
        REQUIRE(w[i].n[0] == 5 + (uint32_t) i % 23);
        REQUIRE(follows(&w[i], 0, prompts[i], plen[i]));
        REQUIRE(w[i].finish[0] == LLM_FINISH_LENGTH);
    }
    llm_sched_get_stats(s, &st);
    REQUIRE(st.kv_blocks_free == st.kv_blocks_total);
    REQUIRE(st.cached_tokens_total > 0);
    REQUIRE(st.requests_running == 0 && st.requests_queued == 0);
    llm_sched_free(s);
    tk_end_as("batching (%llu steps, %llu cached prompt tokens)",
              (unsigned long long) st.steps_total,
              (unsigned long long) st.cached_tokens_total);
}

static void
test_preemption(void)
{
    static owner_t    w[MAXR];
    llm_sched_t      *s = make(40, 32, 64, 0, 150);
    llm_sched_stats_t st;
    int               i;

    REQUIRE(s != NULL);
    memset(w, 0, sizeof(w));
    for (i = 0; i < 24; i++) {
        REQUIRE(submit(s, &w[i], prompts[i], plen[i], 60, 1));
    }
    REQUIRE(run(s) > 0);
    for (i = 0; i < 24; i++) {
        REQUIRE(w[i].done && w[i].n[0] == 60);
        REQUIRE(follows(&w[i], 0, prompts[i], plen[i]));
    }
    llm_sched_get_stats(s, &st);
    REQUIRE(st.requests_preempted > 0);
    REQUIRE(st.kv_blocks_free == st.kv_blocks_total);
    llm_sched_free(s);
    tk_end_as("preemption (%llu preempted)",
              (unsigned long long) st.requests_preempted);
}

static void
test_prefix_and_n(void)
{
    static owner_t w[3];
    llm_sched_t   *s = make(512, 16, 64, 0, 256);

    REQUIRE(s != NULL);
    memset(w, 0, sizeof(w));
    REQUIRE(submit(s, &w[0], prompts[0], plen[0], 8, 1));
    run(s);
    REQUIRE(submit(s, &w[1], prompts[0], plen[0], 8, 1));
    run(s);
    REQUIRE(w[1].cached == (int) ((plen[0] - 1) / BT * BT));
    REQUIRE(memcmp(w[0].toks[0], w[1].toks[0], 8 * 4) == 0);
    /* n = 3: all three follow the oracle (greedy: the same tokens) */
    REQUIRE(submit(s, &w[2], prompts[5], plen[5], 10, 3));
    run(s);
    for (int k = 0; k < 3; k++) {
        REQUIRE(w[2].n[k] == 10 && follows(&w[2], k, prompts[5], plen[5]));
    }
    llm_sched_free(s);
    tk_end_as("prefix and n");
}

/*
 * The prefix cache under a KV budget: a long prompt A is cached, a longer
 * prompt B then needs some of its blocks back; the tail of A goes first,
 * so A again finds the head of its prompt cached, and gives the same
 * answer.
 */
static void
test_prefix_lru(void)
{
    static owner_t    w[3];
    static int32_t    a[120], b[160];
    llm_sched_t      *s = make(64, 4, 64, 0, 256);
    llm_sched_stats_t st;
    uint32_t          i;

    REQUIRE(s != NULL);
    memset(w, 0, sizeof(w));
    for (i = 0; i < 160; i++) {
        if (i < 120) {
            a[i] = (int32_t) (30 + (i * 7) % 500);
        }
        b[i] = (int32_t) (600 + (i * 11) % 300);
    }
    REQUIRE(submit(s, &w[0], a, 120, 4, 1));
    run(s);
    llm_sched_get_stats(s, &st);
    CHECK(st.kv_blocks_cached == 30, "%u cached after A",
          st.kv_blocks_cached);
    REQUIRE(submit(s, &w[1], b, 160, 4, 1));
    run(s);
    REQUIRE(submit(s, &w[2], a, 120, 4, 1));
    run(s);
    REQUIRE(w[0].done && w[1].done && w[2].done);
    CHECK(w[1].cached == 0, "B: %d cached", w[1].cached);
    /* 123 tokens computed: 30 full blocks cached; B (41 blocks) takes the
     * 34 free ones and 7 of A's: A keeps its 23 leading ones */
    CHECK(w[2].cached == 23 * BT, "A again: %d tokens cached, expected %d",
          w[2].cached, 23 * BT);
    CHECK(memcmp(w[0].toks[0], w[2].toks[0], 4 * sizeof(int32_t)) == 0
          && follows(&w[2], 0, a, 120), "A again: another answer");
    llm_sched_free(s);
    tk_end_as("prefix cache LRU: a prompt's tail is evicted before its "
              "head (%d of 120 tokens reused)", w[2].cached);
}

/*
 * A long prompt while 4 streams decode: with a prefill budget of 8 no
 * step carries more than 8 of its tokens beside theirs, the streams get
 * a token every step, and alone it takes the whole step budget; every
 * answer still follows the oracle.
 */
/*
 * Timed prefill beside 4 streams, a prompt token costing pf_ms of the fake
 * clock (a step 8 ms): after `learn` steps of the 400-token prompt longp,
 * a step takes `want` of its tokens, and the prompt is answered right.
 */
static void
timed_chunk(double pf_ms, uint32_t learn, const int32_t *longp,
    uint32_t want)
{
    owner_t       w[5];
    llm_sched_t  *s;
    uint32_t      i;

    prefill_timed = 1;
    fake_pf_ms = pf_ms;
    s = make(1024, 8, 64, 0, 1024);
    prefill_timed = 0;
    REQUIRE(s != NULL);
    memset(w, 0, sizeof(w));
    for (i = 0; i < 4; i++) {
        REQUIRE(submit(s, &w[i], prompts[i], plen[i], 200, 1));
    }
    while (w[0].n[0] < 4 || w[3].n[0] < 4) {
        REQUIRE(llm_sched_step(s) > 0);
    }
    REQUIRE(submit(s, &w[4], longp, 400, 4, 1));
    for (i = 0; i < learn; i++) {   /* to learn, then converging */
        REQUIRE(llm_sched_step(s) > 0);
    }
    pf_with_decode = pf_alone = 0;
    REQUIRE(llm_sched_step(s) > 0);
    CHECK(pf_with_decode == want, "timed, a prompt token %.2f ms: %u "
          "prompt tokens beside the streams, expected %u", pf_ms,
          pf_with_decode, want);
    REQUIRE(run(s) > 0);
    REQUIRE(w[4].done && follows(&w[4], 0, longp, 400));
    llm_sched_free(s);
    fake_pf_ms = 0.25;
}

/*
 * A timed scheduler (a prompt token 1 ms of the fake clock, a step 8 ms,
 * step budget 64) with one stream, w0, decoding: the costs measured.
 */
static llm_sched_t *
timed_one_stream(owner_t *w0)
{
    llm_sched_t  *s;

    prefill_timed = 1;
    fake_pf_ms = 1.0;
    s = make(1024, 8, 64, 0, 1024);
    prefill_timed = 0;
    if (s == NULL) {
        return NULL;
    }
    if (!submit(s, w0, prompts[0], plen[0], 300, 1)) {
        llm_sched_free(s);
        return NULL;
    }
    while (w0->n[0] < 4) {
        if (llm_sched_step(s) <= 0) {
            llm_sched_free(s);
            return NULL;
        }
    }
    return s;
}

/*
 * Timed prefill, a burst: one stream decoding and four 400-token prompts
 * arriving at once, a prompt token costing 1 ms of the fake clock (a step
 * 8 ms): each request gets about the same share of a step, so the
 * prompts take 4 x 8 / 1 = 32 tokens a step (one long prompt beside the
 * same stream: 8), and every answer follows the oracle.
 */
static void
timed_burst(const int32_t *longp)
{
    owner_t       w[5];
    int32_t       p[4][400];
    llm_sched_t  *s;
    uint32_t      i, j;

    memset(w, 0, sizeof(w));
    s = timed_one_stream(&w[0]);
    REQUIRE(s != NULL);
    for (i = 0; i < 4; i++) {
        for (j = 0; j < 400; j++) {
            p[i][j] = longp[(j + 37 * i) % 400];
        }
        REQUIRE(submit(s, &w[1 + i], p[i], 400, 4, 1));
    }
    for (i = 0; i < 8; i++) {       /* to learn, then converging */
        REQUIRE(llm_sched_step(s) > 0);
    }
    pf_with_decode = pf_alone = 0;
    REQUIRE(llm_sched_step(s) > 0);
    CHECK(w[1].n[0] == 0 && w[4].n[0] == 0 && pf_with_decode == 32,
          "a burst of 4 prompts beside 1 stream: %u prompt tokens a step, "
          "expected 32", pf_with_decode);
    REQUIRE(run(s) > 0);
    REQUIRE(w[0].done && follows(&w[0], 0, prompts[0], plen[0]));
    for (i = 0; i < 4; i++) {
        REQUIRE(w[1 + i].done && follows(&w[1 + i], 0, p[i], 400));
    }
    llm_sched_free(s);
    fake_pf_ms = 0.25;
}

/*
 * Timed prefill, short prompts: one stream decoding and four prompts of
 * 17, 24, 15 and 22 tokens arriving at once (step budget 64): those that
 * fit whole in what the step leaves go whole, oldest first, so three are
 * answered after one step, the fourth (22 > 63 - 56) the step after;
 * every answer follows the oracle.
 */
static void
timed_short(void)
{
    static const int       pi[4] = { 9, 10, 13, 14 };
    static const uint32_t  pl[4] = { 17, 24, 15, 22 };
    owner_t                w[5];
    llm_sched_t           *s;
    uint32_t               i;

    memset(w, 0, sizeof(w));
    s = timed_one_stream(&w[0]);
    REQUIRE(s != NULL);
    for (i = 0; i < 4; i++) {
        REQUIRE(plen[pi[i]] == pl[i]);
        REQUIRE(submit(s, &w[1 + i], prompts[pi[i]], plen[pi[i]], 4, 1));
    }
    REQUIRE(llm_sched_step(s) > 0);
    CHECK(w[1].n[0] == 1 && w[2].n[0] == 1 && w[3].n[0] == 1
          && w[4].n[0] == 0, "short prompts beside a stream, one step: "
          "first tokens %u %u %u %u, expected 1 1 1 0", w[1].n[0],
          w[2].n[0], w[3].n[0], w[4].n[0]);
    REQUIRE(llm_sched_step(s) > 0);
    CHECK(w[4].n[0] == 1, "the fourth answered the step after: %u",
          w[4].n[0]);
    REQUIRE(run(s) > 0);
    REQUIRE(w[0].done && follows(&w[0], 0, prompts[0], plen[0]));
    for (i = 0; i < 4; i++) {
        REQUIRE(w[1 + i].done
                && follows(&w[1 + i], 0, prompts[pi[i]], plen[pi[i]]));
    }
    llm_sched_free(s);
    fake_pf_ms = 0.25;
}

static void
test_prefill_budget(void)
{
    static owner_t    w[6];
    static int32_t    longp[400];
    llm_sched_t      *s;
    uint32_t          i, steps = 0, min_gain = 1000, before[4];
    uint32_t          short_first = 0;

    prefill_budget = 8;
    s = make(1024, 8, 64, 0, 1024);
    prefill_budget = 0;
    REQUIRE(s != NULL);
    memset(w, 0, sizeof(w));
    for (i = 0; i < 400; i++) {
        longp[i] = (int32_t) (20 + (i * 31) % 900);
    }
    for (i = 0; i < 4; i++) {
        REQUIRE(submit(s, &w[i], prompts[i], plen[i], 200, 1));
    }
    while (w[0].n[0] < 2 || w[3].n[0] < 2) {       /* all four decoding */
        REQUIRE(llm_sched_step(s) > 0);
    }
    pf_with_decode = pf_alone = 0;
    REQUIRE(submit(s, &w[4], longp, 400, 4, 1));
    while (w[4].n[0] == 0 && steps < 1000) {
        for (i = 0; i < 4; i++) {
            before[i] = w[i].n[0];
        }
        if (steps == 5) {
            /* a short prompt behind the long one: 6 of 8 tokens a step */
            REQUIRE(submit(s, &w[5], prompts[9], plen[9], 2, 1));
        }
        REQUIRE(llm_sched_step(s) > 0);
        steps++;
        if (steps > 5 && w[5].n[0] > 0 && short_first == 0) {
            short_first = steps - 5;
        }
        for (i = 0; i < 4; i++) {
            uint32_t g = w[i].n[0] - before[i];

            min_gain = g < min_gain ? g : min_gain;
        }
    }
    CHECK(pf_with_decode == 8, "%u prompt tokens in a step with decodes",
          pf_with_decode);
    CHECK(min_gain == 1, "a stream went a step without a token");
    CHECK(steps >= 400 / 8, "the prompt took %u steps", steps);
    CHECK(short_first > 0 && short_first <= (plen[9] + 5) / 6,
          "a %u-token prompt behind it: first token after %u steps",
          plen[9], short_first);
    REQUIRE(run(s) > 0);
    for (i = 0; i < 6; i++) {
        REQUIRE(w[i].done && !w[i].error);
        REQUIRE(follows(&w[i], 0, i < 4 ? prompts[i] : i == 5 ? prompts[9]
                        : longp, i < 4 ? plen[i] : i == 5 ? plen[9] : 400));
    }
    llm_sched_free(s);

    /* alone, the same prompt goes in chunks of the whole budget */
    prefill_budget = 8;
    s = make(1024, 8, 64, 0, 1024);
    prefill_budget = 0;
    REQUIRE(s != NULL);
    memset(&w[4], 0, sizeof(w[4]));
    pf_with_decode = pf_alone = 0;
    REQUIRE(submit(s, &w[4], longp, 400, 4, 1));
    REQUIRE(run(s) > 0);
    CHECK(pf_alone == 64 && pf_with_decode == 0, "alone: %u, %u",
          pf_alone, pf_with_decode);
    llm_sched_free(s);

    /* timed: chunks that cost one decode step, 8 / 0.25 = 32 tokens;
     * with a prompt token dearer than an eighth of a decode step (a long
     * prompt's depth) 8 / 4 = 2 tokens, not a floor of 8 */
    timed_chunk(0.25, 6, longp, 32);
    timed_chunk(4.0, 12, longp, 2);
    timed_burst(longp);
    timed_short();

    /* timed, all at once: no decode-only step measured yet, so the first
     * step with decodes is one (a probe), then chunks follow */
    prefill_timed = 1;
    s = make(1024, 8, 64, 0, 1024);
    prefill_timed = 0;
    REQUIRE(s != NULL);
    memset(w, 0, sizeof(w));
    for (i = 0; i < 4; i++) {
        REQUIRE(submit(s, &w[i], prompts[i], plen[i], 200, 1));
    }
    REQUIRE(submit(s, &w[4], longp, 400, 4, 1));
    for (steps = 0, i = 0; w[4].n[0] == 0 && steps < 1000; steps++) {
        REQUIRE(llm_sched_step(s) > 0);
        i += dec_last > 0 && pf_last == 0 && w[4].n[0] == 0;
    }
    CHECK(i >= 1, "no decode-only step while the prompt waited");
    CHECK(steps < 400 / LLM_TEST_PF_MIN, "%u steps: chunks of the minimum",
          steps);
    REQUIRE(run(s) > 0);
    REQUIRE(w[4].done && follows(&w[4], 0, longp, 400));
    llm_sched_free(s);
    tk_end_as("prefill budget: 400 prompt tokens in %u steps of <= 8 "
              "beside 4 streams, each a token every step; a %u-token "
              "prompt behind it answered after %u", steps, plen[9],
              short_first);
}

/*
 * A model with recurrent layers: every sequence keeps its own state slot
 * through chunked prefill, continuous batching, preemption (restarted
 * from position 0), n choices and cancellation; nothing comes from the
 * prefix cache.
 */
static void
test_recurrent(void)
{
    static owner_t    w[MAXR];
    llm_sched_t      *s;
    llm_sched_stats_t st;
    unsigned long long pre;
    int               i;

    rec_mode = 1;               /* main() turns it off again */
    /* batching: mixed lengths, shared prefixes, prefill in chunks */
    s = make(4096, 16, 24, 0, 256);
    REQUIRE(s != NULL);
    memset(w, 0, sizeof(w));
    for (i = 0; i < MAXR; i++) {
        REQUIRE(submit(s, &w[i], prompts[i], plen[i],
                       5 + (uint32_t) i % 23, 1) != NULL);
    }
    REQUIRE(run(s) > 0);
    for (i = 0; i < MAXR; i++) {
        REQUIRE(w[i].done && !w[i].error && w[i].cached == 0);
        REQUIRE(w[i].n[0] == 5 + (uint32_t) i % 23);
        REQUIRE(follows(&w[i], 0, prompts[i], plen[i]));
    }
    llm_sched_get_stats(s, &st);
    REQUIRE(st.cached_tokens_total == 0);
    REQUIRE(st.kv_blocks_free == st.kv_blocks_total);
    llm_sched_free(s);

    /* preemption: recomputed from 0 in whatever slot is free */
    s = make(40, 32, 64, 0, 150);
    REQUIRE(s != NULL);
    memset(w, 0, sizeof(w));
    rec_starts = 0;
    for (i = 0; i < 24; i++) {
        REQUIRE(submit(s, &w[i], prompts[i], plen[i], 60, 1));
    }
    REQUIRE(run(s) > 0);
    for (i = 0; i < 24; i++) {
        REQUIRE(w[i].done && !w[i].error && w[i].n[0] == 60);
        REQUIRE(follows(&w[i], 0, prompts[i], plen[i]));
    }
    llm_sched_get_stats(s, &st);
    REQUIRE(st.requests_preempted > 0);
    REQUIRE(rec_starts > 24);      /* some restarted from 0 */
    pre = st.requests_preempted;
    REQUIRE(st.kv_blocks_free == st.kv_blocks_total);
    llm_sched_free(s);

    /* the same prompt again is no prefix hit; n = 3; a cancel mid-way
     * frees its slot for the next */
    s = make(512, 3, 64, 0, 256);
    REQUIRE(s != NULL);
    memset(w, 0, sizeof(w));
    REQUIRE(submit(s, &w[0], prompts[0], plen[0], 8, 1));
    run(s);
    REQUIRE(submit(s, &w[1], prompts[0], plen[0], 8, 1));
    run(s);
    REQUIRE(w[1].cached == 0);
    REQUIRE(memcmp(w[0].toks[0], w[1].toks[0], 8 * 4) == 0);
    REQUIRE(submit(s, &w[2], prompts[5], plen[5], 10, 3));
    REQUIRE(submit(s, &w[3], prompts[6], plen[6], 30, 1));
    REQUIRE(submit(s, &w[4], prompts[7], plen[7], 10, 1));
    for (i = 0; i < 4; i++) {
        llm_sched_step(s);
    }
    llm_sched_cancel(s, w[3].r);
    run(s);
    for (int k = 0; k < 3; k++) {
        REQUIRE(w[2].n[k] == 10 && follows(&w[2], k, prompts[5], plen[5]));
    }
    REQUIRE(w[4].done && follows(&w[4], 0, prompts[7], plen[7]));
    llm_sched_get_stats(s, &st);
    REQUIRE(st.kv_blocks_free == st.kv_blocks_total);
    llm_sched_free(s);
    rec_mode = 0;
    tk_end_as("recurrent state slots (%llu preempted)", pre);
}

static void
test_cancel_and_limits(void)
{
    static owner_t    w[4];
    llm_sched_t      *s = make(256, 1, 64, 1, 64);
    llm_sched_stats_t st;
    llm_sched_limits_t lim;

    REQUIRE(s != NULL);
    memset(w, 0, sizeof(w));
    /* the limits Info reports are the ones submit enforces */
    llm_sched_get_limits(s, &lim);
    REQUIRE(lim.max_choices == 1 && lim.max_stop == 16
            && lim.max_stop_bytes == 0 && lim.max_top_logprobs == 20);
    REQUIRE(submit(s, &w[0], prompts[1], plen[1], 4, 2) == NULL);
    REQUIRE(w[0].error
            && w[0].code == LLM_ERR_INVALID_REQUEST
            && strstr(w[0].msg, "between 1 and 1") != NULL);
    memset(w, 0, sizeof(w));
    REQUIRE(submit(s, &w[0], prompts[1], plen[1], 40, 1));
    llm_sched_step(s);      /* admitted: the queue is empty again */
    REQUIRE(submit(s, &w[1], prompts[2], plen[2], 5, 1));
    REQUIRE(w[1].queued);
    REQUIRE(submit(s, &w[2], prompts[3], plen[3], 5, 1) == NULL);
    REQUIRE(w[2].error
            && w[2].code == LLM_ERR_OVERLOADED);
    for (int i = 0; i < 5; i++) {
        llm_sched_step(s);
    }
    llm_sched_cancel(s, w[0].r);
    llm_sched_get_stats(s, &st);
    REQUIRE(st.requests_cancelled == 1);
    REQUIRE(st.kv_blocks_free == st.kv_blocks_total);
    run(s);
    REQUIRE(!w[0].done && w[1].done);
    /* context */
    REQUIRE(submit(s, &w[3], prompts[4], plen[4], 64, 1) == NULL);
    REQUIRE(w[3].code
            == LLM_ERR_CONTEXT_LENGTH_EXCEEDED);
    REQUIRE(strstr(w[3].msg, "64 tokens") != NULL);
    llm_sched_free(s);
    s = make(256, 32, 64, 1, 64);
    REQUIRE(s != NULL);
    llm_sched_get_limits(s, &lim);
    REQUIRE(lim.max_choices == 16);
    llm_sched_free(s);
    tk_end_as("cancel and limits");
}

/* Cancel (llm_sched_stop): a running request of n = 2 and a queued one
 * end with Error{ERROR_CANCELLED} and what they used; blocks come back. */
static void
test_stop(void)
{
    static owner_t    w[3];
    llm_sched_t      *s = make(256, 2, 64, 4, 128);
    llm_sched_stats_t st;

    REQUIRE(s != NULL);
    memset(w, 0, sizeof(w));
    REQUIRE(submit(s, &w[0], prompts[1], plen[1], 60, 2));
    for (int i = 0; i < 6; i++) {
        llm_sched_step(s);
    }
    REQUIRE(submit(s, &w[1], prompts[2], plen[2], 5, 1));
    REQUIRE(w[1].queued);
    REQUIRE(w[0].n[0] > 0 && w[0].n[1] > 0);
    llm_sched_stop(s, w[0].r, "cancelled by the client");
    REQUIRE(w[0].error && !w[0].done);
    REQUIRE(w[0].code == LLM_ERR_CANCELLED);
    REQUIRE(w[0].has_usage && w[0].u_prompt == plen[1]);
    REQUIRE(w[0].u_completion == w[0].n[0] + w[0].n[1]);
    llm_sched_stop(s, w[1].r, "cancelled by the client");
    REQUIRE(w[1].code == LLM_ERR_CANCELLED);
    REQUIRE(w[1].has_usage && w[1].u_prompt == 0
            && w[1].u_completion == 0);
    llm_sched_get_stats(s, &st);
    REQUIRE(st.requests_cancelled == 2);
    REQUIRE(st.requests_running == 0 && st.requests_queued == 0);
    REQUIRE(st.kv_blocks_free == st.kv_blocks_total);
    REQUIRE(st.completion_tokens_total == w[0].u_completion);
    REQUIRE(llm_sched_pending(s) == 0 && llm_sched_step(s) == 0);
    /* the scheduler goes on */
    REQUIRE(submit(s, &w[2], prompts[3], plen[3], 5, 1));
    run(s);
    REQUIRE(w[2].done && w[2].n[0] == 5);
    llm_sched_free(s);
    tk_end_as("stop (%u tokens billed)", w[0].u_completion);
}

static void
test_eog(void)
{
    static owner_t w[1];
    llm_sched_t   *s;

    eog_token = llm_vocab_eos(vocab);
    if (eog_token < 0) {
        tk_skip("eog", "the vocabulary has no EOS");
        return;
    }
    s = make(256, 4, 64, 0, 256);
    REQUIRE(s != NULL);
    memset(w, 0, sizeof(w));
    REQUIRE(submit(s, &w[0], prompts[0], plen[0], 100, 1));
    run(s);
    REQUIRE(w[0].done);
    REQUIRE(w[0].finish[0] == LLM_FINISH_STOP);
    /* positions plen-1 .. 39 give tokens, 40 gives the EOS (not emitted) */
    REQUIRE(w[0].n[0] == 41 - plen[0]);
    eog_token = -1;
    llm_sched_free(s);
    tk_end_as("eog");
}

/* tokens of text (special tokens not parsed: "<think>" as its bytes) */
static uint32_t
toks_of(const char *text, int32_t *out, uint32_t cap)
{
    llm_tokens_t  t = { 0 };
    char          err[256];
    uint32_t      n = 0;

    if (llm_tokenize(vocab, text, strlen(text), 0, &t, err,
                     sizeof(err)) == 0)
    {
        for (n = 0; n < t.n && n < cap; n++) {
            out[n] = t.ids[n];
        }
    }
    llm_tokens_free(&t);
    return n;
}

/*
 * The reasoning split on chat answers: a scripted answer with a think
 * block comes out as reasoning text and content apart, the block opened
 * by the prompt too; with the format off it is all content; completions
 * are never split.
 */
static void
test_reasoning(void)
{
    static const struct {
        int          fmt;
        const char  *prompt, *answer, *rsn, *text;
        int          completion;
        const char  *calls;
        int          finish;
    } c[] = {
        { 1, "Q: hi\n", "<think>\nplan a\n</think>\n\nAnswer b",
          "plan a", "Answer b", 0, "", LLM_FINISH_LENGTH },
        { 1, "Q: hi\n<think>\n", "x y</think>z", "x y", "z", 0, "",
          LLM_FINISH_LENGTH },
        { 0, "Q: hi\n", "<think>r</think>s", "", "<think>r</think>s", 0, "",
          LLM_FINISH_LENGTH },
        { 1, "Q: hi\n", "<think>r</think>s", "", "<think>r</think>s", 1, "",
          LLM_FINISH_LENGTH },
        { 2, "Q: hi\n", "<|channel|>analysis<|message|>r<|end|><|start|>"
          "assistant<|channel|>final<|message|>ok", "r", "ok", 0, "",
          LLM_FINISH_LENGTH },
        { 2, "Q: hi\n", "<|channel|>analysis<|message|>r<|end|><|start|>"
          "assistant<|channel|>commentary to=functions.f <|constrain|>json"
          "<|message|>{\"a\":1}", "r", "", 0, "call_id f({\"a\":1}",
          LLM_FINISH_TOOL_CALLS },
    };
    static owner_t  w;
    int32_t         prompt[64], ans[256];
    uint32_t        np, na, i;
    llm_request_t   rq;
    llm_tokens_t    t;
    llm_sched_t    *s;

    for (i = 0; i < sizeof(c) / sizeof(c[0]); i++) {
        np = toks_of(c[i].prompt, prompt, 64);
        na = toks_of(c[i].answer, ans, 256);
        REQUIRE(np > 0 && na > 0 && na < 256);
        sched_reasoning = c[i].fmt;
        s = make(64, 2, 64, 4, 256);
        REQUIRE(s != NULL);
        script = ans;
        script_n = na;
        script_from = np;
        memset(&w, 0, sizeof(w));
        memset(&t, 0, sizeof(t));
        llm_request_init(&rq);
        /* a harmony call ends at <|call|>, an end-of-generation token */
        eog_token = c[i].finish == LLM_FINISH_TOOL_CALLS
                    ? llm_vocab_eos(vocab) : -1;
        rq.sampling.max_tokens = na + (eog_token >= 0);
        rq.sampling.ignore_eos = eog_token < 0;
        rq.is_completion = c[i].completion;
        for (uint32_t k = 0; k < np; k++) {
            llm_tokens_push(&t, prompt[k]);
        }
        w.r = llm_sched_submit(s, &rq, &t, &w);
        llm_tokens_free(&t);
        REQUIRE(w.r != NULL);
        run(s);
        eog_token = -1;
        script = NULL;
        sched_reasoning = 0;
        llm_sched_free(s);
        CHECK(w.done && strcmp(w.rsn, c[i].rsn) == 0
              && strcmp(w.text, c[i].text) == 0
              && strcmp(w.calls, c[i].calls) == 0
              && (int) w.finish[0] == c[i].finish,
              "case %u: reasoning '%s' content '%s' calls '%s' finish %d", i,
              w.rsn, w.text, w.calls, (int) w.finish[0]);
    }
    tk_end_as("reasoning split (%u cases)", i);
}

int
main(void)
{
    const char *path = "engine/tests/data/reference/ref-llama-moe-q4_0.gguf";
    llm_gguf_t *g;
    char        err[512];

    if (llm_gguf_open(&g, path, err, sizeof(err)) != 0) {
        tk_skip_all("%s", err);
    }
    if (llm_vocab_load(&vocab, g, err, sizeof(err)) != 0) {
        tk_fatal("vocab: %s", err);
    }
    V = llm_vocab_n_tokens(vocab);
    make_prompts();
    tk_begin("batching");
    test_batching();
    tk_begin("preemption");
    test_preemption();
    tk_begin("prefix and n");
    test_prefix_and_n();
    tk_begin("prefix LRU");
    test_prefix_lru();
    tk_begin("prefill budget");
    test_prefill_budget();
    tk_begin("recurrent");
    test_recurrent();
    rec_mode = 0;
    tk_begin("cancel and limits");
    test_cancel_and_limits();
    tk_begin("stop");
    test_stop();
    tk_begin("eog");
    test_eog();
    tk_begin("reasoning");
    test_reasoning();
    llm_sched_free(NULL);
    free(shadow);
    llm_vocab_free(vocab);
    llm_gguf_close(g);
    return tk_done();
}
