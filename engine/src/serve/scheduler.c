/*
 * Continuous batching.  See sched.h for the contract.
 *
 * Data: every live request is on s->reqs; its choices are sequences.  A
 * sequence is in limbo (choices 1..n-1 until choice 0 has prefilled, so
 * they find its prefix in the cache), queued (FIFO s->qhead..qtail), or
 * running (s->run[], in admission order).  A sequence's tokens are its
 * prompt followed by its output; n_done of them are in the KV cache, and
 * a step computes tokens [n_done, n_done + step_n), asking for logits when
 * that reaches the last token.  So decode, prefill, chunked prefill and the
 * recompute after preemption are one code path.
 *
 * Requests that end during a step go on s->dead and are freed at the end
 * of the step, so the step's own lists never point at freed memory.
 */

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "kvalloc.h"
#include "decode/reasoning.h"
#include "decode/sample.h"
#include "scheduler.h"

typedef enum {
    LLM_SEQ_LIMBO = 0,
    LLM_SEQ_QUEUED,
    LLM_SEQ_RUNNING,
    LLM_SEQ_DONE
} llm_seq_state_t;

typedef struct llm_seq_s  llm_seq_t;

struct llm_seq_s {
    llm_sreq_t         *req;
    uint32_t            index;         /* choice */
    llm_seq_state_t     state;
    llm_tokens_t        toks;          /* prompt, then output */
    uint32_t            n_gen;
    uint32_t            n_done;        /* tokens in the KV cache */
    uint32_t           *blocks;        /* block table */
    uint32_t            n_blocks;
    int32_t             ring;          /* its seat: window pool ring and
                                          recurrent state slot, -1 */
    uint32_t            cap_blocks;
    uint32_t            n_pub;         /* leading blocks published */
    uint64_t            last_hash;     /* chained hash of block n_pub-1 */
    uint32_t            step_n;        /* tokens in this step */
    int32_t             logit_row;     /* row of this step's logits, -1 */
    llm_rng_t           rng;
    llm_detok_t        *detok;
    llm_seq_hooks_t     hooks;
    int                 n_tool_calls;
    llm_finish_e        finish;
    char               *text;          /* content of the next Delta */
    size_t              text_len;
    size_t              text_cap;
    llm_reasoning_t    *rs;            /* the reasoning split, or NULL */
    char               *rtext;         /* reasoning of the next Delta */
    size_t              rtext_len;
    size_t              rtext_cap;
    llm_sample_result_t *plp;          /* echo with logprobs: the prompt
                                          tokens' logprobs ([toks.n]) */
    int32_t             plp_row;       /* this step's first prompt row */
    llm_seq_t          *qprev, *qnext;
};

struct llm_sreq_s {
    llm_sched_t          *s;
    void                 *owner;
    llm_sreq_t           *prev, *next; /* s->reqs */
    uint32_t              n;
    llm_seq_t            *seqs;
    uint32_t              n_finished;
    uint32_t              n_prompt;
    uint32_t              cached;
    uint32_t              max_tokens;
    uint32_t              completion_tokens;
    llm_sample_params_t   sp;
    int32_t              *bias_ids;
    float                *bias_vals;
    char                **stops;
    size_t                n_stops;
    int                   ignore_eos;
    int                   started;
    int                   dead;
    char                **echo;        /* completions with echo: the text
                                          of each prompt, or NULL */
    int                   prompt_lp;   /* echo with logprobs: each prompt
                                          token with its logprob, as the
                                          echo (no prefix cache then) */
    uint32_t              n_per;       /* choices per prompt (n) */
    uint32_t              n_prompts;   /* 1, or a completion's several */
    char                 *request_id;
    double                t_submit, t_admit, t_first;
};

struct llm_sched_s {
    llm_sched_conf_t      c;
    llm_kvalloc_t        *kva;
    uint32_t             *rings;       /* window pool block ids, in order */
    uint32_t             *ring_free;   /* free seats, a stack */
    uint32_t              n_ring_free;
    llm_sampler_t        *sampler;
    llm_sreq_t           *reqs;
    llm_sreq_t          **dead;
    uint32_t              n_dead, cap_dead;
    llm_seq_t            *qhead, *qtail;
    llm_seq_t           **run;         /* [max_batch] */
    uint32_t              n_run;
    uint32_t              n_queued_reqs;
    uint32_t              n_running_reqs;

    /* the step's batch */
    int32_t              *b_tok, *b_pos, *b_seq;
    uint8_t              *b_logits;
    llm_seq_view_t       *b_views;
    llm_seq_t           **b_seqs;
    float                *out;         /* [max_batch * n_vocab] */

    /* the timed prefill budget (conf.prefill_timed): running means of a
     * decode-only step's forward call and of one prompt token's share of
     * a step that also decoded, in ms; 0 until measured */
    double                dec_ms;
    double                pf_tok_ms;
    uint32_t              since_dec;   /* steps since a decode-only one */

    llm_sched_stats_t     st;
};

static double
llm_now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double) ts.tv_sec * 1e3 + (double) ts.tv_nsec / 1e6;
}

static void llm_seq_release(llm_sched_t *s, llm_seq_t *q);
static void llm_req_destroy(llm_sreq_t *r);


/* Events. */

static void
llm_emit_error(llm_sched_t *s, void *owner, llm_errcode_e code,
    const char *param, const llm_usage_t *usage, const char *fmt, ...)
{
    llm_sched_event_t  ev;
    char               msg[512];
    va_list            ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    memset(&ev, 0, sizeof(ev));
    ev.kind = LLM_SEV_ERROR;
    ev.u.error.code = code;
    ev.u.error.message = msg;
    ev.u.error.param = param;
    ev.u.error.usage = usage;
    s->c.emit(owner, &ev);
}

static void
llm_req_usage(const llm_sreq_t *r, llm_usage_t *u)
{
    u->prompt_tokens = r->n_prompt;
    u->completion_tokens = r->completion_tokens;
    u->cached_tokens = r->cached;
}

/* Appends p to a growing NUL-terminated buffer (lost under OOM: the
 * tokens still flow). */
static void
llm_buf_add(char **buf, size_t *blen, size_t *bcap, const char *p,
    size_t len)
{
    if (len == 0) {
        return;
    }
    if (*blen + len + 1 > *bcap) {
        size_t  cap = (*blen + len + 1) * 2;
        char   *t = realloc(*buf, cap);

        if (t == NULL) {
            return;
        }
        *buf = t;
        *bcap = cap;
    }
    memcpy(*buf + *blen, p, len);
    *blen += len;
    (*buf)[*blen] = '\0';
}

/* Appends text to the sequence's pending Delta. */
static void
llm_seq_text(llm_seq_t *q, const char *p, size_t len)
{
    llm_buf_add(&q->text, &q->text_len, &q->text_cap, p, len);
}

/* Appends reasoning text to the pending Delta. */
static void
llm_seq_reasoning(void *ud, const char *p, size_t len)
{
    llm_seq_t  *q = ud;

    llm_buf_add(&q->rtext, &q->rtext_len, &q->rtext_cap, p, len);
}

/*
 * Emit the pending Delta of q: its text, plus token tok (when >= 0) with
 * its logprobs (when res is set and the request asked for them).
 */
static void
llm_seq_flush_delta_as(llm_seq_t *q, int32_t tok,
    const llm_sample_result_t *res, int echo)
{
    llm_sched_t       *s = q->req->s;
    llm_sched_event_t  ev;

    if (tok < 0 && q->text_len == 0 && q->rtext_len == 0) {
        return;
    }
    memset(&ev, 0, sizeof(ev));
    ev.u.delta.echo = echo;
    ev.kind = LLM_SEV_DELTA;
    ev.u.delta.index = q->index;
    ev.u.delta.text = q->text_len ? q->text : "";
    ev.u.delta.reasoning = q->rtext_len ? q->rtext : "";
    ev.u.delta.token = tok >= 0 ? tok : -1;
    if (tok >= 0 && res != NULL
        && (q->req->sp.logprobs || q->req->sp.top_logprobs))
    {
        ev.u.delta.lp = res;
    }
    s->c.emit(q->req->owner, &ev);
    q->text_len = 0;
    if (q->text) {
        q->text[0] = '\0';
    }
    q->rtext_len = 0;
    if (q->rtext) {
        q->rtext[0] = '\0';
    }
}

static void
llm_seq_flush_delta(llm_seq_t *q, int32_t tok, const llm_sample_result_t *res)
{
    llm_seq_flush_delta_as(q, tok, res, 0);
}

/*
 * Echo with logprobs: the prompt of q (its first toks.n - n_gen tokens)
 * as one Delta per token, each with its text and the logprobs plp holds
 * (NaN for the first token, which nothing predicts).
 */
static void
llm_seq_echo_logprobs(llm_sched_t *s, llm_seq_t *q)
{
    llm_detok_t  *d;
    const char   *t;
    size_t        len, n = q->toks.n - q->n_gen;

    if (llm_detok_create(&d, s->c.vocab, NULL, 0) != 0) {
        return;
    }
    for (size_t i = 0; i < n; i++) {
        len = 0;
        if (llm_detok_push(d, q->toks.ids[i], &t, &len) >= 0 && len) {
            llm_seq_text(q, t, len);
        }
        if (i + 1 == n && llm_detok_flush(d, &t, &len) == 0 && len) {
            llm_seq_text(q, t, len);
        }
        llm_seq_flush_delta_as(q, q->toks.ids[i], &q->plp[i], 1);
    }
    llm_detok_free(d);
}

/*
 * The logprob of token tok under one row of raw logits (log-softmax,
 * before any sampling option), and the top k into res.
 */
static void
llm_row_logprobs(const float *row, uint32_t V, int32_t tok, uint32_t k,
    llm_sample_result_t *res)
{
    float   mx = -INFINITY;
    double  sum = 0.0;
    float   lse;

    for (uint32_t i = 0; i < V; i++) {
        mx = row[i] > mx ? row[i] : mx;
    }
    for (uint32_t i = 0; i < V; i++) {
        sum += exp((double) (row[i] - mx));
    }
    lse = mx + (float) log(sum);
    res->token = tok;
    res->logprob = row[tok] - lse;
    res->n_top = 0;
    if (k > LLM_SAMPLE_MAX_TOP_LOGPROBS) {
        k = LLM_SAMPLE_MAX_TOP_LOGPROBS;
    }
    /* insertion into the k best so far, best first */
    for (uint32_t i = 0; i < V && k; i++) {
        uint32_t  j = res->n_top;

        if (j == k && row[i] - lse <= res->top[k - 1].logprob) {
            continue;
        }
        if (j == k) {
            j--;
        } else {
            res->n_top++;
        }
        while (j > 0 && res->top[j - 1].logprob < row[i] - lse) {
            res->top[j] = res->top[j - 1];
            j--;
        }
        res->top[j].token = (int32_t) i;
        res->top[j].logprob = row[i] - lse;
    }
}

/*
 * q's tokens of this step into the batch from token nt on, as sequence
 * ns: a row of logits for its last token (the next one is sampled from
 * it), and with echo and logprobs one for every prompt token before it
 * too (from plp_row on).  nt and nl (rows) advance.
 */
static void
llm_seq_batch(llm_sched_t *s, llm_seq_t *q, uint32_t ns, uint32_t *nt,
    uint32_t *nl)
{
    q->plp_row = -1;
    for (uint32_t j = 0; j < q->step_n; j++) {
        uint32_t p = q->n_done + j, t = (*nt)++;

        s->b_tok[t] = q->toks.ids[p];
        s->b_pos[t] = (int32_t) p;
        s->b_seq[t] = (int32_t) ns;
        if (q->plp && q->n_gen == 0 && p + 1 < q->toks.n) {
            /* echo with logprobs: this row predicts token p + 1 */
            if (q->plp_row < 0) {
                q->plp_row = (int32_t) *nl;
            }
            s->b_logits[t] = 1;
            (*nl)++;
            continue;
        }
        s->b_logits[t] = p + 1 == q->toks.n;
        if (s->b_logits[t]) {
            q->logit_row = (int32_t) (*nl)++;
        }
    }
}

/*
 * Echo with logprobs, after a prefill step of q: each prompt token this
 * step predicted (from plp_row on, one row per position) gets its
 * logprob and top.
 */
static void
llm_seq_prompt_logprobs(llm_sched_t *s, llm_seq_t *q)
{
    for (uint32_t j = 0; q->plp_row >= 0 && j < q->step_n
                         && q->n_done + j + 1 < q->toks.n; j++)
    {
        llm_row_logprobs(s->out + (size_t) (q->plp_row + j) * s->c.n_vocab,
                         s->c.n_vocab, q->toks.ids[q->n_done + j + 1],
                         q->req->sp.top_logprobs, &q->plp[q->n_done + j + 1]);
    }
}

static void
llm_sink_content(void *sink, const char *p, size_t len)
{
    llm_seq_text(sink, p, len);
}

static void
llm_sink_tool_call(void *sink, uint32_t call_index, const char *id,
    const char *name, const char *args, size_t args_len)
{
    llm_seq_t         *q = sink;
    llm_sched_event_t  ev;

    llm_seq_flush_delta(q, -1, NULL);
    memset(&ev, 0, sizeof(ev));
    ev.kind = LLM_SEV_TOOL_CALL;
    ev.u.tool_call.index = q->index;
    ev.u.tool_call.call_index = call_index;
    ev.u.tool_call.id = id ? id : "";
    ev.u.tool_call.name = name ? name : "";
    ev.u.tool_call.args = args ? args : "";
    ev.u.tool_call.args_len = args ? args_len : 0;
    q->req->s->c.emit(q->req->owner, &ev);
}

/* The answer's text: through the hooks when set, else content. */
static void
llm_seq_answer_text(llm_seq_t *q, const char *p, size_t len, int final)
{
    llm_text_out_t out = { llm_sink_content, llm_sink_tool_call, q };
    int            rc;

    if (q->hooks.text == NULL) {
        llm_seq_text(q, p, len);
        return;
    }
    rc = q->hooks.text(q->hooks.ud, p, len, final, &out);
    if (rc > 0) {
        q->n_tool_calls = rc;
    }
}

static void
llm_seq_answer(void *ud, const char *p, size_t len)
{
    llm_seq_answer_text(ud, p, len, 0);
}

/*
 * A tool call the reasoning split read (harmony): its first delta with
 * an id call_ + 24 letters and digits and the name, then argument
 * fragments, as the tool-call parsers give them.
 */
static void
llm_seq_call(void *ud, const char *name, size_t name_len, const char *args,
    size_t len)
{
    static const char  an[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstu"
                              "vwxyz0123456789";
    llm_seq_t  *q = ud;
    char        id[32], nm[256];
    uint8_t     rnd[24];
    size_t      i;

    if (name == NULL) {
        if (q->n_tool_calls > 0) {
            llm_sink_tool_call(q, (uint32_t) q->n_tool_calls - 1, NULL, NULL,
                               args, len);
        }
        return;
    }
    if (getrandom(rnd, sizeof(rnd), 0) != (ssize_t) sizeof(rnd)) {
        memset(rnd, 0, sizeof(rnd));
    }
    memcpy(id, "call_", 5);
    for (i = 0; i < sizeof(rnd); i++) {
        id[5 + i] = an[rnd[i] % (sizeof(an) - 1)];
    }
    id[5 + sizeof(rnd)] = '\0';
    name_len = name_len < sizeof(nm) - 1 ? name_len : sizeof(nm) - 1;
    memcpy(nm, name, name_len);
    nm[name_len] = '\0';
    llm_sink_tool_call(q, (uint32_t) q->n_tool_calls, id, nm, NULL, 0);
    q->n_tool_calls++;
}

/*
 * Route detokenized text: a reasoning model's thinking to the reasoning
 * text (reasoning.h), the answer to the hooks or content.
 */
static void
llm_seq_route_text(llm_seq_t *q, const char *p, size_t len, int final)
{
    llm_reasoning_out_t  ro = { llm_seq_reasoning, llm_seq_answer,
                                llm_seq_call, q };

    if (q->rs != NULL) {
        llm_reasoning_feed(q->rs, p, len, final, &ro);
        if (!final) {
            return;
        }
        p = "";
        len = 0;
    }
    llm_seq_answer_text(q, p, len, final);
}

/*
 * Mark r finished and put it on the dead list, freed at the end of the
 * step: its sibling sequences may still be on the step's lists.
 */
static void
llm_sched_bury(llm_sched_t *s, llm_sreq_t *r)
{
    if (r->dead) {
        return;
    }
    r->dead = 1;
    if (s->n_dead == s->cap_dead) {
        uint32_t     cap = s->cap_dead ? s->cap_dead * 2 : 16;
        llm_sreq_t **d2 = realloc(s->dead, cap * sizeof(*d2));

        if (d2 == NULL) {
            return;     /* leaks r rather than freeing it under our feet */
        }
        s->dead = d2;
        s->cap_dead = cap;
    }
    s->dead[s->n_dead++] = r;
}

static void
llm_req_done(llm_sreq_t *r)
{
    llm_sched_t       *s = r->s;
    llm_sched_event_t  ev;
    llm_finish_e       fin[LLM_SCHED_MAX_N];
    const char        *stop[LLM_SCHED_MAX_N];
    double             now = llm_now_ms();

    for (uint32_t i = 0; i < r->n; i++) {
        fin[i] = r->seqs[i].finish;
        stop[i] = fin[i] == LLM_FINISH_STOP
                  ? llm_detok_stop_string(r->seqs[i].detok) : NULL;
    }
    memset(&ev, 0, sizeof(ev));
    ev.kind = LLM_SEV_DONE;
    ev.u.done.n_choices = r->n;
    ev.u.done.finish = fin;
    ev.u.done.stop = stop;
    llm_req_usage(r, &ev.u.done.usage);
    ev.u.done.queue_ms = r->t_admit - r->t_submit;
    ev.u.done.prefill_ms = (r->t_first ? r->t_first : now) - r->t_admit;
    ev.u.done.decode_ms = r->t_first ? now - r->t_first : 0.0;
    ev.u.done.model = s->c.model_name ? s->c.model_name : "";
    ev.u.done.fingerprint = s->c.fingerprint ? s->c.fingerprint : "";
    s->c.emit(r->owner, &ev);
    llm_sched_bury(s, r);
}

/* Lists. */

static void
llm_queue_remove(llm_sched_t *s, llm_seq_t *q)
{
    if (q->qprev) {
        q->qprev->qnext = q->qnext;
    } else {
        s->qhead = q->qnext;
    }
    if (q->qnext) {
        q->qnext->qprev = q->qprev;
    } else {
        s->qtail = q->qprev;
    }
    q->qprev = q->qnext = NULL;
}

static void
llm_queue_push(llm_sched_t *s, llm_seq_t *q, int front)
{
    if (front) {
        q->qprev = NULL;
        q->qnext = s->qhead;
        if (s->qhead) {
            s->qhead->qprev = q;
        } else {
            s->qtail = q;
        }
        s->qhead = q;
    } else {
        q->qnext = NULL;
        q->qprev = s->qtail;
        if (s->qtail) {
            s->qtail->qnext = q;
        } else {
            s->qhead = q;
        }
        s->qtail = q;
    }
    q->state = LLM_SEQ_QUEUED;
}

static void
llm_run_remove(llm_sched_t *s, llm_seq_t *q)
{
    for (uint32_t i = 0; i < s->n_run; i++) {
        if (s->run[i] == q) {
            memmove(&s->run[i], &s->run[i + 1],
                    (s->n_run - i - 1) * sizeof(s->run[0]));
            s->n_run--;
            return;
        }
    }
}

/*
 * Give back every KV block of q, and its seat (window ring, state).  Last
 * block first: cached blocks join the LRU in that order, so eviction
 * takes a prefix's tail before its head, and what is left of it is still
 * a prefix a later request can reuse (the head first would leave blocks
 * no lookup can reach, their chain broken).
 */
static void
llm_seq_release(llm_sched_t *s, llm_seq_t *q)
{
    for (uint32_t i = q->n_blocks; i-- > 0; ) {
        llm_kvalloc_put(s->kva, q->blocks[i]);
    }
    if (q->ring >= 0 && s->ring_free != NULL) {
        s->ring_free[s->n_ring_free++] = (uint32_t) q->ring;
        q->ring = -1;
    }
    q->n_blocks = 0;
    q->n_done = 0;
    q->n_pub = 0;
    q->last_hash = 0;
}

static int
llm_seq_reserve_blocks(llm_seq_t *q, uint32_t n)
{
    uint32_t *b;

    if (n <= q->cap_blocks) {
        return 0;
    }
    b = realloc(q->blocks, n * sizeof(uint32_t));
    if (b == NULL) {
        return -ENOMEM;
    }
    q->blocks = b;
    q->cap_blocks = n;
    return 0;
}

/* Take q out of whatever list it is on, free its blocks. */
static void
llm_seq_detach(llm_sched_t *s, llm_seq_t *q)
{
    if (q->state == LLM_SEQ_RUNNING) {
        llm_run_remove(s, q);
    } else if (q->state == LLM_SEQ_QUEUED) {
        llm_queue_remove(s, q);
    }
    llm_seq_release(s, q);
    q->state = LLM_SEQ_DONE;
}

static void
llm_req_destroy(llm_sreq_t *r)
{
    llm_sched_t *s = r->s;

    for (uint32_t i = 0; r->seqs != NULL && i < r->n; i++) {
        llm_seq_t *q = &r->seqs[i];

        llm_seq_detach(s, q);
        if (q->hooks.free) {
            q->hooks.free(q->hooks.ud);
        }
        llm_detok_free(q->detok);
        llm_tokens_free(&q->toks);
        free(q->blocks);
        free(q->text);
        free(q->rtext);
        llm_reasoning_free(q->rs);
        free(q->plp);
    }
    if (!r->started) {
        s->n_queued_reqs--;
    } else if (r->n_finished < r->n || !r->dead) {
        s->n_running_reqs--;
    }
    if (r->prev) {
        r->prev->next = r->next;
    } else {
        s->reqs = r->next;
    }
    if (r->next) {
        r->next->prev = r->prev;
    }
    for (size_t i = 0; i < r->n_stops; i++) {
        free(r->stops[i]);
    }
    free(r->stops);
    free(r->bias_ids);
    free(r->bias_vals);
    for (uint32_t p = 0; r->echo && p < r->n_prompts; p++) {
        free(r->echo[p]);
    }
    free(r->echo);
    free(r->request_id);
    free(r->seqs);
    free(r);
}


/* Creation. */

int
llm_sched_create(llm_sched_t **out, const llm_sched_conf_t *conf, char *err,
    size_t errlen)
{
    llm_sched_t *s;
    uint32_t     T, B;
    int          rc;

    *out = NULL;
    if (conf->max_batch == 0 || conf->n_vocab == 0 || conf->n_ctx == 0
        || conf->block_tokens == 0 || conf->forward == NULL
        || conf->emit == NULL)
    {
        snprintf(err, errlen, "scheduler: max_batch, n_vocab, n_ctx, "
                 "block_tokens, forward and emit must be set");
        return -EINVAL;
    }
    if ((uint64_t) conf->n_blocks * conf->block_tokens < conf->n_ctx) {
        snprintf(err, errlen, "scheduler: the KV cache holds %llu tokens, "
                 "less than the context window of %u; raise --kv-mb or "
                 "lower --ctx",
                 (unsigned long long) conf->n_blocks * conf->block_tokens,
                 conf->n_ctx);
        return -EINVAL;
    }
    if (conf->step_tokens < conf->max_batch) {
        snprintf(err, errlen, "scheduler: the step token budget (%u) must "
                 "be at least max_batch (%u)", conf->step_tokens,
                 conf->max_batch);
        return -EINVAL;
    }

    s = calloc(1, sizeof(*s));
    if (s == NULL) {
        goto nomem;
    }
    s->c = *conf;
    T = conf->step_tokens;
    B = conf->max_batch;
    rc = llm_kvalloc_create(&s->kva, conf->n_blocks, conf->block_tokens);
    if (rc != 0) {
        snprintf(err, errlen, "scheduler: KV allocator for %u blocks: %s",
                 conf->n_blocks, strerror(-rc));
        llm_sched_free(s);
        return rc;
    }
    if (llm_sampler_create(&s->sampler, conf->n_vocab) != 0) {
        goto nomem;
    }
    s->run = calloc(B, sizeof(*s->run));
    s->b_tok = calloc(T, sizeof(int32_t));
    s->b_pos = calloc(T, sizeof(int32_t));
    s->b_seq = calloc(T, sizeof(int32_t));
    s->b_logits = calloc(T, 1);
    s->b_views = calloc(B, sizeof(llm_seq_view_t));
    s->b_seqs = calloc(B, sizeof(llm_seq_t *));
    s->out = malloc((size_t) B * conf->n_vocab * sizeof(float));
    if (s->run == NULL || s->b_tok == NULL || s->b_pos == NULL
        || s->b_seq == NULL || s->b_logits == NULL || s->b_views == NULL
        || s->b_seqs == NULL || s->out == NULL)
    {
        goto nomem;
    }
    if (conf->swa_ring > 0 || conf->recurrent) {
        s->rings = calloc((size_t) B * conf->swa_ring + 1, sizeof(uint32_t));
        s->ring_free = calloc(B, sizeof(uint32_t));
        if (s->rings == NULL || s->ring_free == NULL) {
            goto nomem;
        }
        for (uint32_t i = 0; i < B * conf->swa_ring; i++) {
            s->rings[i] = i;
        }
        for (uint32_t i = 0; i < B; i++) {
            s->ring_free[s->n_ring_free++] = B - 1 - i;
        }
    }
    s->st.kv_blocks_total = conf->n_blocks;
    s->st.kv_block_tokens = conf->block_tokens;
    *out = s;
    return 0;

nomem:
    snprintf(err, errlen, "scheduler: out of memory");
    llm_sched_free(s);
    return -ENOMEM;
}

void
llm_sched_free(llm_sched_t *s)
{
    if (s == NULL) {
        return;
    }
    while (s->reqs) {
        llm_req_destroy(s->reqs);
    }
    llm_kvalloc_free(s->kva);
    free(s->rings);
    free(s->ring_free);
    llm_sampler_free(s->sampler);
    free(s->dead);
    free(s->run);
    free(s->b_tok);
    free(s->b_pos);
    free(s->b_seq);
    free(s->b_logits);
    free(s->b_views);
    free(s->b_seqs);
    free(s->out);
    free(s);
}



/*
 * The text of a prompt given as token ids, for echo: detokenized as the
 * output is (control tokens give nothing).  malloc'd; NULL on no memory.
 */
static char *
llm_echo_text(const llm_sched_t *s, const int32_t *ids, size_t n)
{
    llm_detok_t  *d;
    const char   *t;
    size_t        len, tl = 0, cap = 64;
    char         *text = malloc(cap), *x;

    if (text == NULL || llm_detok_create(&d, s->c.vocab, NULL, 0) != 0) {
        free(text);
        return NULL;
    }
    for (size_t i = 0; i <= n; i++) {
        len = 0;
        if (i < n ? llm_detok_push(d, ids[i], &t, &len) < 0
                  : llm_detok_flush(d, &t, &len) != 0)
        {
            len = 0;
        }
        if (tl + len + 1 > cap) {
            while (tl + len + 1 > cap) {
                cap *= 2;
            }
            x = realloc(text, cap);
            if (x == NULL) {
                free(text);
                llm_detok_free(d);
                return NULL;
            }
            text = x;
        }
        if (len) {
            memcpy(text + tl, t, len);
            tl += len;
        }
    }
    text[tl] = '\0';
    llm_detok_free(d);
    return text;
}

/*
 * 1 when q's prompt ends inside a reasoning block (the chat template
 * opened <think> for the answer): its last tokens, as text.
 */
static int
llm_seq_think_open(const llm_sched_t *s, const llm_seq_t *q)
{
    size_t  n = q->toks.n < 8 ? q->toks.n : 8;
    char   *t = llm_echo_text(s, q->toks.ids + q->toks.n - n, n);
    int     open;

    if (t == NULL) {
        return 0;
    }
    open = llm_reasoning_prompt_opens(s->c.reasoning, t, strlen(t));
    free(t);
    return open;
}

/* Submission. */

/*
 * The context check, with both numbers, for the longest of the prompts;
 * sets r->n_prompt (all prompts' tokens) and r->max_tokens.  0, or
 * -EINVAL (an empty prompt) / -E2BIG with param and err written.
 */
static int
llm_req_context(llm_sched_t *s, llm_sreq_t *r, const llm_request_t *rq,
    const llm_tokens_t *prompts, uint32_t n_prompts, const char **param,
    char *err, size_t errlen)
{
    const llm_req_sampling_t *sm = &rq->sampling;
    const llm_tokens_t       *prompt;
    uint32_t                  max_new, p;

    prompt = &prompts[0];
    r->n_prompt = 0;
    for (p = 0; p < n_prompts; p++) {
        if (prompts[p].n == 0) {
            *param = rq->is_completion ? "prompt" : "messages";
            snprintf(err, errlen, "the prompt is empty (0 tokens)");
            return -EINVAL;
        }
        r->n_prompt += (uint32_t) prompts[p].n;
        if (prompts[p].n > prompt->n) {
            prompt = &prompts[p];
        }
    }
    if (prompt->n >= s->c.n_ctx) {
        *param = rq->is_completion ? "prompt" : "messages";
        snprintf(err, errlen, "This model's maximum context length is %u "
                 "tokens. However, your messages resulted in %zu tokens. "
                 "Please reduce the length of the messages.", s->c.n_ctx,
                 prompt->n);
        return -E2BIG;
    }
    max_new = s->c.n_ctx - (uint32_t) prompt->n;
    r->max_tokens = sm->max_tokens ? sm->max_tokens : max_new;
    if (r->max_tokens > max_new) {
        *param = rq->is_completion ? "prompt" : "messages";
        snprintf(err, errlen, "This model's maximum context length is %u "
                 "tokens. However, you requested %llu tokens (%zu in the "
                 "messages, %u in the completion). Please reduce the length "
                 "of the messages or completion.", s->c.n_ctx,
                 (unsigned long long) prompt->n + r->max_tokens, prompt->n,
                 r->max_tokens);
        return -E2BIG;
    }

    return 0;
}

/*
 * Echo: with logprobs, a logprob slot per prompt token of each sequence
 * (the prompt then goes out token by token, llm_seq_echo_logprobs);
 * without, the text of each prompt.  0 or -ENOMEM.
 */
static int
llm_req_echo(llm_sched_t *s, llm_sreq_t *r, const llm_request_t *rq,
    uint32_t n_prompts)
{
    const llm_req_sampling_t *sm = &rq->sampling;
    uint32_t                  p;

    r->prompt_lp = rq->is_completion && rq->echo
                   && (sm->logprobs || sm->top_logprobs);
    for (uint32_t k = 0; r->prompt_lp && k < r->n; k++) {
        llm_seq_t *q = &r->seqs[k];

        q->plp = calloc(q->toks.n, sizeof(llm_sample_result_t));
        if (q->plp == NULL) {
            return -ENOMEM;
        }
        q->plp[0].token = q->toks.ids[0];
        q->plp[0].logprob = NAN;
    }
    if (rq->is_completion && rq->echo && !r->prompt_lp) {
        r->echo = calloc(n_prompts, sizeof(char *));
        if (r->echo == NULL) {
            return -ENOMEM;
        }
        for (p = 0; p < n_prompts; p++) {
            const llm_req_prompt_t  one = {
                rq->prompt, rq->prompt_ids, rq->n_prompt_ids
            };
            const llm_req_prompt_t *e = rq->n_prompts ? &rq->prompts[p]
                                                      : &one;

            r->echo[p] = e->n_ids ? llm_echo_text(s, e->ids, e->n_ids)
                                  : strdup(e->text);
            if (r->echo[p] == NULL) {
                return -ENOMEM;
            }
        }
    }
    return 0;
}

static int
llm_req_setup(llm_sched_t *s, llm_sreq_t *r, const llm_request_t *rq,
    llm_tokens_t *prompts, uint32_t n_prompts, const char **param,
    char *err, size_t errlen)
{
    const llm_req_sampling_t *sm = &rq->sampling;
    uint32_t              V = s->c.n_vocab, p;
    uint64_t              seed;
    llm_sched_limits_t    lim;
    size_t                i;
    int                   rc;

    llm_sched_get_limits(s, &lim);
    r->n_per = sm->n ? sm->n : 1;
    r->n_prompts = n_prompts;
    r->n = r->n_per * n_prompts;
    if (n_prompts > 1 && (r->n > lim.max_choices || r->n / n_prompts
                                                    != r->n_per))
    {
        *param = "n";
        snprintf(err, errlen, "n times the number of prompts must be at "
                 "most %u, got %u x %u", lim.max_choices, r->n_per,
                 n_prompts);
        return -EINVAL;
    }
    if (r->n > lim.max_choices) {
        *param = "n";
        snprintf(err, errlen, "n must be between 1 and %u, got %u",
                 lim.max_choices, r->n);
        return -EINVAL;
    }
    if (!(sm->temperature >= 0.0f) || !isfinite(sm->temperature)) {
        *param = "temperature";
        snprintf(err, errlen, "temperature must be >= 0, got %g",
                 (double) sm->temperature);
        return -EINVAL;
    }
    if (!(sm->top_p >= 0.0f && sm->top_p <= 1.0f)) {
        *param = "top_p";
        snprintf(err, errlen, "top_p must be between 0 and 1, got %g",
                 (double) sm->top_p);
        return -EINVAL;
    }
    if (!(sm->min_p >= 0.0f && sm->min_p <= 1.0f)) {
        *param = "min_p";
        snprintf(err, errlen, "min_p must be between 0 and 1, got %g",
                 (double) sm->min_p);
        return -EINVAL;
    }
    if (sm->top_k < 0) {
        *param = "top_k";
        snprintf(err, errlen, "top_k must be >= 0, got %d", sm->top_k);
        return -EINVAL;
    }
    if (sm->top_logprobs > lim.max_top_logprobs) {
        *param = "top_logprobs";
        snprintf(err, errlen, "top_logprobs must be <= %u, got %u",
                 lim.max_top_logprobs, sm->top_logprobs);
        return -EINVAL;
    }
    if (!isfinite(sm->presence_penalty) || !isfinite(sm->frequency_penalty)
        || !(sm->repetition_penalty >= 0.0f)
        || !isfinite(sm->repetition_penalty))
    {
        *param = "presence_penalty";
        snprintf(err, errlen, "penalties must be finite numbers "
                 "(repetition_penalty >= 0)");
        return -EINVAL;
    }
    if (sm->n_stop > lim.max_stop) {
        *param = "stop";
        snprintf(err, errlen, "at most %u stop strings, got %zu",
                 lim.max_stop, sm->n_stop);
        return -EINVAL;
    }

    r->sp.temperature = sm->temperature;
    r->sp.top_k = sm->top_k;
    r->sp.top_p = sm->top_p;
    r->sp.min_p = sm->min_p;
    r->sp.presence_penalty = sm->presence_penalty;
    r->sp.frequency_penalty = sm->frequency_penalty;
    r->sp.repetition_penalty = sm->repetition_penalty;
    r->sp.logprobs = sm->logprobs;
    r->sp.top_logprobs = sm->top_logprobs;
    r->ignore_eos = sm->ignore_eos;

    if (sm->n_bias) {
        r->bias_ids = calloc(sm->n_bias, sizeof(int32_t));
        r->bias_vals = calloc(sm->n_bias, sizeof(float));
        if (r->bias_ids == NULL || r->bias_vals == NULL) {
            return -ENOMEM;
        }
        for (i = 0; i < sm->n_bias; i++) {
            int32_t  id = sm->bias_ids[i];
            float    b = sm->bias_vals[i];

            if (id < 0 || (uint32_t) id >= V) {
                *param = "logit_bias";
                snprintf(err, errlen, "logit_bias: token id %d is not in "
                         "the vocabulary (0..%u)", id, V - 1);
                return -EINVAL;
            }
            if (!(b >= -100.0f && b <= 100.0f)) {
                *param = "logit_bias";
                snprintf(err, errlen, "logit_bias: the bias of token %d "
                         "must be between -100 and 100, got %g", id,
                         (double) b);
                return -EINVAL;
            }
            r->bias_ids[i] = id;
            r->bias_vals[i] = b;
        }
        r->sp.bias_ids = r->bias_ids;
        r->sp.bias_vals = r->bias_vals;
        r->sp.n_bias = sm->n_bias;
    }

    if (sm->n_stop) {
        r->stops = calloc(sm->n_stop, sizeof(char *));
        if (r->stops == NULL) {
            return -ENOMEM;
        }
        for (i = 0; i < sm->n_stop; i++) {
            if (sm->stop[i][0] == '\0') {
                continue;
            }
            r->stops[r->n_stops] = strdup(sm->stop[i]);
            if (r->stops[r->n_stops] == NULL) {
                return -ENOMEM;
            }
            r->n_stops++;
        }
    }

    rc = llm_req_context(s, r, rq, prompts, n_prompts, param, err, errlen);
    if (rc != 0) {
        return rc;
    }

    if (sm->has_seed) {
        seed = sm->seed;
    } else if (getrandom(&seed, sizeof(seed), 0) != sizeof(seed)) {
        seed = (uint64_t) llm_now_ms();
    }

    r->seqs = calloc(r->n, sizeof(llm_seq_t));
    if (r->seqs == NULL) {
        return -ENOMEM;
    }
    for (uint32_t k = 0; k < r->n; k++) {
        r->seqs[k].ring = -1;   /* also for those a failure leaves unset */
    }
    for (uint32_t k = 0; k < r->n; k++) {
        llm_seq_t *q = &r->seqs[k];

        q->req = r;
        q->index = k;
        q->state = LLM_SEQ_LIMBO;
        q->logit_row = -1;
        llm_rng_seed(&q->rng, seed + 0x9e3779b97f4a7c15ull * k);
        rc = llm_detok_create(&q->detok, s->c.vocab,
                              (const char *const *) r->stops, r->n_stops);
        if (rc != 0) {
            snprintf(err, errlen, "detokenizer: %s", strerror(-rc));
            return rc;
        }
        /* choice k answers prompt k / n_per: the first of its prompt
         * takes the tokens, the others copy them */
        p = k / r->n_per;
        if (k % r->n_per == 0) {
            q->toks = prompts[p];
            memset(&prompts[p], 0, sizeof(prompts[p]));
        } else {
            const llm_tokens_t *f = &r->seqs[p * r->n_per].toks;

            for (i = 0; i < f->n; i++) {
                if (llm_tokens_push(&q->toks, f->ids[i]) != 0) {
                    return -ENOMEM;
                }
            }
        }
        if (s->c.hooks_make) {
            rc = s->c.hooks_make(s->c.hooks_ctx, rq, k, &q->hooks, err,
                                 errlen);
            if (rc != 0) {
                *param = "response_format";
                return rc;
            }
        }
        if (s->c.reasoning != LLM_REASONING_NONE && !rq->is_completion) {
            q->rs = llm_reasoning_create(s->c.reasoning,
                                         llm_seq_think_open(s, q));
            if (q->rs == NULL) {
                return -ENOMEM;
            }
            /* harmony's markup is control tokens: the split reads them */
            llm_detok_set_special(q->detok,
                                  s->c.reasoning == LLM_REASONING_HARMONY);
        }
    }
    rc = llm_req_echo(s, r, rq, n_prompts);
    if (rc != 0) {
        return rc;
    }
    r->request_id = strdup(rq->request_id ? rq->request_id : "");
    return 0;
}

/*
 * A hooks_make error is about response_format unless its message says
 * otherwise: the tool hooks write "PARAM: message" with PARAM tools[i]...
 * or tool_choice (toolhooks.h).  The param is copied into pbuf.
 */
/* not inlined: GCC 12 for aarch64 follows param into a caller's 9-byte
 * array and turns the strcmp below into a -Wstring-compare error */
static __attribute__((noinline)) const char *
llm_hooks_err_param(const char *param, const char *err, char *pbuf,
    size_t len)
{
    const char *c;

    if (param == NULL || strcmp(param, "response_format") != 0
        || (strncmp(err, "tools", 5) != 0
            && strncmp(err, "tool_choice", 11) != 0))
    {
        return param;
    }
    c = strstr(err, ": ");
    if (c == NULL || (size_t) (c - err) >= len) {
        return param;
    }
    memcpy(pbuf, err, (size_t) (c - err));
    pbuf[c - err] = '\0';
    return pbuf;
}

llm_sreq_t *
llm_sched_submit(llm_sched_t *s, const llm_request_t *rq,
    llm_tokens_t *prompt, void *owner)
{
    return llm_sched_submit_many(s, rq, prompt, 1, owner);
}

llm_sreq_t *
llm_sched_submit_many(llm_sched_t *s, const llm_request_t *rq,
    llm_tokens_t *prompts, uint32_t n_prompts, void *owner)
{
    llm_sreq_t    *r;
    const char    *param = NULL;
    char           err[512] = "", pbuf[96];
    int            rc;

    if (s->c.max_queue && s->n_queued_reqs >= s->c.max_queue) {
        llm_emit_error(s, owner, LLM_ERR_OVERLOADED, NULL,
                       NULL, "the engine is overloaded: %u requests queued "
                       "(--max-queue %u)", s->n_queued_reqs,
                       s->c.max_queue);
        return NULL;
    }

    r = calloc(1, sizeof(*r));
    if (r == NULL) {
        llm_emit_error(s, owner, LLM_ERR_INTERNAL, NULL, NULL,
                       "out of memory");
        return NULL;
    }
    r->s = s;
    r->owner = owner;
    r->t_submit = llm_now_ms();
    r->next = s->reqs;
    if (s->reqs) {
        s->reqs->prev = r;
    }
    s->reqs = r;
    s->n_queued_reqs++;

    rc = llm_req_setup(s, r, rq, prompts, n_prompts, &param, err,
                       sizeof(err));
    if (rc != 0) {
        param = llm_hooks_err_param(param, err, pbuf, sizeof(pbuf));
        llm_emit_error(s, owner,
                       rc == -E2BIG ? LLM_ERR_CONTEXT_LENGTH_EXCEEDED
                       : rc == -ENOMEM ? LLM_ERR_INTERNAL
                       : LLM_ERR_INVALID_REQUEST,
                       param, NULL, "%s",
                       err[0] ? err : "out of memory");
        llm_req_destroy(r);
        return NULL;
    }
    s->st.requests_total++;

    if (s->qhead != NULL || s->n_run >= s->c.max_batch) {
        llm_sched_event_t ev;

        memset(&ev, 0, sizeof(ev));
        ev.kind = LLM_SEV_QUEUED;
        ev.u.queued.position = s->n_queued_reqs - 1;
        s->c.emit(owner, &ev);
    }
    llm_queue_push(s, &r->seqs[0], 0);
    return r;
}

void
llm_sched_cancel(llm_sched_t *s, llm_sreq_t *r)
{
    s->st.requests_cancelled++;
    llm_req_destroy(r);
}

void
llm_sched_stop(llm_sched_t *s, llm_sreq_t *r, const char *msg)
{
    llm_usage_t u;

    llm_req_usage(r, &u);
    if (!r->started) {
        u.prompt_tokens = 0;    /* nothing of it ran */
    }
    s->st.requests_cancelled++;
    llm_emit_error(s, r->owner, LLM_ERR_CANCELLED, NULL, &u,
                   "%s", msg);
    llm_req_destroy(r);
}

void
llm_sched_count_cancelled(llm_sched_t *s)
{
    s->st.requests_cancelled++;
}

void
llm_sched_abort_all(llm_sched_t *s, llm_errcode_e code, const char *msg)
{
    while (s->reqs) {
        llm_sreq_t *r = s->reqs;
        llm_usage_t  u;

        llm_req_usage(r, &u);
        llm_emit_error(s, r->owner, code, NULL, &u, "%s", msg);
        llm_req_destroy(r);
    }
}

void
llm_sched_get_limits(const llm_sched_t *s, llm_sched_limits_t *l)
{
    l->max_choices = s->c.max_batch < LLM_SCHED_MAX_N ? s->c.max_batch
                                                      : LLM_SCHED_MAX_N;
    l->max_stop = LLM_SCHED_MAX_STOP;
    l->max_stop_bytes = 0;
    l->max_top_logprobs = LLM_SAMPLE_MAX_TOP_LOGPROBS;
}

uint32_t
llm_sched_pending(const llm_sched_t *s)
{
    return s->n_queued_reqs + s->n_running_reqs;
}

void
llm_sched_get_stats(const llm_sched_t *s, llm_sched_stats_t *st)
{
    *st = s->st;
    st->requests_running = s->n_running_reqs;
    st->requests_queued = s->n_queued_reqs;
    st->seqs_running = s->n_run;
    st->kv_blocks_free = llm_kvalloc_n_free(s->kva);
    st->kv_blocks_cached = llm_kvalloc_n_cached(s->kva);
}


/* Admission, preemption. */

static void
llm_req_started(llm_sched_t *s, llm_sreq_t *r, uint32_t cached)
{
    llm_sched_event_t ev;

    r->started = 1;
    r->t_admit = llm_now_ms();
    r->cached = cached;
    s->n_queued_reqs--;
    s->n_running_reqs++;
    s->st.prompt_tokens_total += r->n_prompt;
    s->st.cached_tokens_total += cached;
    memset(&ev, 0, sizeof(ev));
    ev.kind = LLM_SEV_STARTED;
    ev.u.started.prompt_tokens = r->n_prompt;
    ev.u.started.cached_tokens = cached;
    s->c.emit(r->owner, &ev);
    for (uint32_t k = 0; r->echo && k < r->n; k++) {
        const char *e = r->echo[k / r->n_per];

        if (e && e[0]) {
            llm_seq_text(&r->seqs[k], e, strlen(e));
            llm_seq_flush_delta(&r->seqs[k], -1, NULL);
        }
    }
}

/*
 * Admit the queue head while there is room: share cached prefix blocks,
 * allocate the rest of the blocks its tokens need.  FIFO: when the head
 * does not fit, nothing behind it is admitted either.
 */
static void
llm_sched_admit(llm_sched_t *s)
{
    uint32_t bt = s->c.block_tokens;
    uint32_t reserve = s->c.n_blocks / 100 + 1;

    while (s->qhead != NULL && s->n_run < s->c.max_batch) {
        llm_seq_t *q = s->qhead;
        uint32_t   n = (uint32_t) q->toks.n, max_shared = (n - 1) / bt;
        uint32_t   need = (n + bt - 1) / bt, shared = 0, i;
        uint64_t   h = 0, hh;
        int64_t    b;

        if (llm_seq_reserve_blocks(q, need + 1) != 0) {
            return;
        }
        while (shared < max_shared && !(q->plp && q->n_gen == 0)
               && s->c.swa_ring == 0 && !s->c.recurrent)
        {
            const int32_t *t = q->toks.ids + (size_t) shared * bt;

            hh = llm_kvalloc_hash(h, t, bt);
            b = llm_kvalloc_lookup(s->kva, hh, h, t);
            if (b < 0) {
                break;
            }
            q->blocks[shared++] = (uint32_t) b;
            h = hh;
        }
        if (llm_kvalloc_n_free(s->kva) < need - shared
            + (s->n_run ? reserve : 0))
        {
            for (i = 0; i < shared; i++) {
                llm_kvalloc_put(s->kva, q->blocks[i]);
            }
            return;
        }
        for (i = shared; i < need; i++) {
            q->blocks[i] = (uint32_t) llm_kvalloc_get(s->kva);
        }
        if (s->c.swa_ring > 0 || s->c.recurrent) {
            q->ring = (int32_t) s->ring_free[--s->n_ring_free];
        }
        q->n_blocks = need;
        q->n_done = shared * bt;
        q->n_pub = shared;
        q->last_hash = h;

        llm_queue_remove(s, q);
        q->state = LLM_SEQ_RUNNING;
        s->run[s->n_run++] = q;
        if (!q->req->started) {
            llm_req_started(s, q->req, shared * bt);
        }
    }
}

static void
llm_sched_preempt(llm_sched_t *s, llm_seq_t *q)
{
    llm_run_remove(s, q);
    llm_seq_release(s, q);
    llm_queue_push(s, q, 1);
    s->st.requests_preempted++;
}

/* Publish the blocks of q that the last step filled. */
static void
llm_seq_publish(llm_sched_t *s, llm_seq_t *q)
{
    uint32_t bt = s->c.block_tokens;

    if (s->c.swa_ring > 0 || s->c.recurrent) {
        return;     /* a block without its window layers, or without the
                       recurrent state after it, is no prefix */
    }
    while ((q->n_pub + 1) * bt <= q->n_done && q->n_pub < q->n_blocks) {
        const int32_t *t = q->toks.ids + (size_t) q->n_pub * bt;
        uint64_t       h = llm_kvalloc_hash(q->last_hash, t, bt);

        llm_kvalloc_publish(s->kva, q->blocks[q->n_pub], h, q->last_hash, t);
        q->last_hash = h;
        q->n_pub++;
    }
}


/* Ending sequences. */

static void
llm_seq_finish(llm_sched_t *s, llm_seq_t *q, llm_finish_e why)
{
    llm_sreq_t *r = q->req;
    const char *t;
    size_t      len = 0;

    if (llm_detok_flush(q->detok, &t, &len) == 0 && len > 0) {
        llm_seq_route_text(q, t, len, 0);
    }
    if (q->hooks.text || q->rs) {
        llm_seq_route_text(q, "", 0, 1);
    }
    llm_seq_flush_delta(q, -1, NULL);
    if (q->n_tool_calls > 0 && why == LLM_FINISH_STOP) {
        why = LLM_FINISH_TOOL_CALLS;
    }
    q->finish = why;
    llm_seq_detach(s, q);
    if (++r->n_finished == r->n) {
        s->n_running_reqs--;
        llm_req_done(r);
    }
}

/* Choices 1..n-1 join the queue once choice 0 has prefilled. */
static void
llm_req_release_siblings(llm_sched_t *s, llm_sreq_t *r)
{
    for (uint32_t k = r->n; k-- > 1; ) {
        if (r->seqs[k].state == LLM_SEQ_LIMBO) {
            llm_queue_push(s, &r->seqs[k], 1);
        }
    }
}

/* Sample the next token of q from its logits row and emit it. */
static void
llm_seq_sample(llm_sched_t *s, llm_seq_t *q, float *row)
{
    llm_sreq_t          *r = q->req;
    llm_sample_result_t  res;
    const char          *t;
    size_t               len = 0;
    int32_t              tok;
    int                  stop, thinking;
    double               t0 = llm_now_ms(), t1, t2, t3;

    /* the answer's grammars do not constrain a reasoning block */
    thinking = llm_reasoning_inside(q->rs);
    if (!thinking && q->hooks.mask
        && q->hooks.mask(q->hooks.ud, row, s->c.n_vocab) < 0)
    {
        llm_seq_finish(s, q, LLM_FINISH_CONTENT_FILTER);
        return;
    }
    tok = llm_sample(s->sampler, &r->sp, row, q->toks.ids,
                     q->toks.n - q->n_gen, q->n_gen, &q->rng, &res);
    if (tok < 0) {
        llm_seq_finish(s, q, LLM_FINISH_CONTENT_FILTER);
        return;
    }
    if (llm_tokens_push(&q->toks, tok) != 0) {
        llm_seq_finish(s, q, LLM_FINISH_LENGTH);
        return;
    }
    q->n_gen++;
    r->completion_tokens++;
    s->st.completion_tokens_total++;
    if (r->t_first == 0.0) {
        r->t_first = llm_now_ms();
    }
    if (q->n_gen == 1 && q->index == 0) {
        llm_req_release_siblings(s, r);
    }
    if (q->n_gen == 1 && q->plp) {
        llm_seq_echo_logprobs(s, q);
    }
    if (!thinking && q->hooks.accept) {
        q->hooks.accept(q->hooks.ud, tok);
    }

    t1 = llm_now_ms();
    s->st.sample_ms_total += t1 - t0;
    if (!r->ignore_eos && llm_vocab_is_eog(s->c.vocab, tok)) {
        llm_seq_finish(s, q, LLM_FINISH_STOP);
        s->st.emit_ms_total += llm_now_ms() - t1;
        return;
    }
    stop = llm_detok_push(q->detok, tok, &t, &len);
    if (stop >= 0 && len > 0) {
        llm_seq_route_text(q, t, len, 0);
    }
    t2 = llm_now_ms();
    llm_seq_flush_delta(q, tok, &res);
    if (stop == 1) {
        llm_seq_finish(s, q, LLM_FINISH_STOP);
    } else if (q->n_gen >= r->max_tokens || q->toks.n >= s->c.n_ctx) {
        llm_seq_finish(s, q, LLM_FINISH_LENGTH);
    }
    t3 = llm_now_ms();
    s->st.detok_ms_total += t2 - t1;
    s->st.emit_ms_total += t3 - t2;
}


/* The step. */

#define LLM_SCHED_PF_MIN   8    /* prompt tokens a timed step takes before
                                   a prompt token's cost was measured */
#define LLM_SCHED_PF_FLOOR 1    /* and after, however much one costs */
#define LLM_SCHED_PF_PROBE 64   /* a decode-only step at least this often */

/*
 * The prompt tokens a step may take beside n_dec decoding sequences while
 * n_wait sequences still have prompt tokens to go, of budget (what the
 * step budget leaves): at most conf.prefill_tokens; with
 * conf.prefill_timed, also about as many as cost w decode-only steps,
 * at least LLM_SCHED_PF_FLOOR (LLM_SCHED_PF_MIN x w until a step has
 * measured the cost), where w = max(1, n_wait / n_dec): every request in
 * the step, waiting for its first token or decoding, gets about the same
 * share of the step's time.  One long prompt beside running streams (w
 * = 1) keeps their inter-token latency near twice the decode step's,
 * whatever the prompt's depth and the machine's load; a burst of new
 * requests is not held to one decode step's worth of prompt while the
 * first of them decodes alone (8 clients x 81 tokens: TTFT p50 2.5 s at
 * w = 1, docs/BENCHMARKS.md "One served stream").  (A floor of 8 held
 * the streams at 3x their decode step beside a 14k-token prompt, whose
 * tokens at that depth each cost more than a decode step:
 * docs/BENCHMARKS.md, "A long prompt".)  None when no decode-only step
 * was measured yet, or none for LLM_SCHED_PF_PROBE steps (the streams
 * come and go): that step is one.
 */
static uint32_t
llm_sched_prefill_budget(const llm_sched_t *s, uint32_t budget,
    uint32_t n_dec, uint32_t n_wait)
{
    uint32_t  cap = s->c.prefill_tokens ? s->c.prefill_tokens : budget;
    double    n, w;

    if (n_dec == 0) {
        return budget;
    }
    if (s->c.prefill_timed) {
        if (s->dec_ms <= 0.0 || s->since_dec >= LLM_SCHED_PF_PROBE) {
            return 0;       /* measure (again) what the streams alone cost */
        }
        w = n_wait > n_dec ? (double) n_wait / n_dec : 1.0;
        if (s->pf_tok_ms <= 0.0) {
            n = LLM_SCHED_PF_MIN * w;
        } else {
            n = s->dec_ms * w / s->pf_tok_ms;
            n = n < LLM_SCHED_PF_FLOOR ? LLM_SCHED_PF_FLOOR : n;
        }
        cap = n < (double) cap ? (uint32_t) n : cap;
    }
    return cap < budget ? cap : budget;
}

/*
 * Learn from a forward call of ms with n_dec decoding and n_pf prompt
 * tokens: a decode-only step's time, and a prompt token's marginal cost
 * (the step's time beyond a decode-only step's, per prompt token).
 * Running means with weight 1/4 on the newest, so the cost follows the
 * prompt's depth (attention grows with it) and the machine's load.
 */
static void
llm_sched_learn(llm_sched_t *s, double ms, uint32_t n_dec, uint32_t n_pf)
{
    double  c;

    s->since_dec++;
    if (n_pf == 0 && n_dec > 0) {
        s->dec_ms = s->dec_ms > 0.0 ? 0.75 * s->dec_ms + 0.25 * ms : ms;
        s->since_dec = 0;
    } else if (n_pf > 0 && n_dec > 0 && s->dec_ms > 0.0) {
        c = (ms > s->dec_ms ? ms - s->dec_ms : 0.0) / n_pf;
        s->pf_tok_ms = s->pf_tok_ms > 0.0 ? 0.75 * s->pf_tok_ms + 0.25 * c
                                          : c;
    }
}

/*
 * Give q up to limit more of its pending prompt tokens from *budget.  An
 * echo with logprobs needs a row of logits per prompt token: at most the
 * rows left (*rows: rows beyond one per running sequence).
 */
static void
llm_seq_give(llm_seq_t *q, uint32_t limit, uint32_t *budget, uint32_t *rows)
{
    uint32_t  want = (uint32_t) q->toks.n - q->n_done - q->step_n;
    uint32_t  first = q->step_n == 0, room;

    want = want < limit ? want : limit;
    want = want < *budget ? want : *budget;
    if (q->plp && q->n_gen == 0) {
        room = *rows + first;
        want = want < room ? want : room;
        *rows -= want > 0 ? want - first : 0;
    }
    q->step_n += want;
    *budget -= want;
}

/*
 * Share the step's prompt tokens among the prefilling sequences (those
 * ready with more than one token to compute).  First, with the timed
 * budget (conf.prefill_timed; a fixed --prefill-tokens is a hard cap),
 * a prompt that has not started (no output, nothing computed past its cached prefix) and
 * fits whole in what the step budget leaves (full) goes whole, oldest
 * first, whatever the timed budget (a burst of short requests is
 * answered a step each, as without the timed budget: 8 clients x 97
 * tokens, TTFT p50 2.8 -> 1.4 s; a running stream pays one longer
 * step per such arrival); such a step counts against the timed budget
 * too.  Then the rest of budget (the timed one, at most full): the
 * earliest admitted takes up to a quarter of it first, so a long prompt
 * always advances; then the shortest remainders first, so a short prompt
 * that arrives behind a long one is prefilled in a step or two instead
 * of after it (its TTFT is not the long prompt's).  s->b_seqs is the
 * scratch list.
 */
static void
llm_sched_plan_prefill(llm_sched_t *s, uint32_t budget, uint32_t full)
{
    llm_seq_t  **pf = s->b_seqs, *q;
    uint32_t     n = 0, i, j, rows = s->c.max_batch - s->n_run, rem, got;

    for (i = 0; i < s->n_run; i++) {
        q = s->run[i];
        if (q->toks.n - q->n_done > 1
            && (!s->c.ready || s->c.ready(q->req->owner)))
        {
            pf[n++] = q;
        }
    }
    if (n == 0 || full == 0 || budget == 0) {
        return;     /* budget 0: a decode-only step that measures */
    }
    for (i = 0; i < n && s->c.prefill_timed; i++) {
        q = pf[i];
        rem = (uint32_t) q->toks.n - q->n_done;
        if (q->n_gen == 0 && q->n_done <= q->req->cached && rem <= full) {
            got = full;
            llm_seq_give(q, rem, &full, &rows);
            got -= full;
            budget = budget > got ? budget - got : 0;
        }
    }
    budget = budget < full ? budget : full;
    if (budget == 0) {
        return;
    }
    llm_seq_give(pf[0], (budget + 3) / 4, &budget, &rows);
    for (i = 1; i < n; i++) {       /* insertion sort, stable: n is small */
        q = pf[i];
        for (j = i; j > 0 && q->toks.n - q->n_done - q->step_n
                              < pf[j - 1]->toks.n - pf[j - 1]->n_done
                                - pf[j - 1]->step_n; j--)
        {
            pf[j] = pf[j - 1];
        }
        pf[j] = q;
    }
    for (i = 0; i < n && budget > 0; i++) {
        llm_seq_give(pf[i], budget, &budget, &rows);
    }
}

static void
llm_sched_reap(llm_sched_t *s)
{
    for (uint32_t i = 0; i < s->n_dead; i++) {
        llm_req_destroy(s->dead[i]);
    }
    s->n_dead = 0;
}

int
llm_sched_step(llm_sched_t *s)
{
    uint32_t  bt = s->c.block_tokens, i, nt, ns, nl;
    uint32_t  n_dec = 0, n_wait = 0, n_pf;
    llm_batch_t b;
    char      err[256] = "";
    int       rc;
    double    t0, tf;

    llm_sched_admit(s);
    if (s->n_run == 0) {
        return 0;
    }

    /* 1: tokens per sequence: every decode first, then prefill chunks
     * from what is left of the budget (llm_sched_plan_prefill), at most
     * prefill_tokens of it while some sequence decodes */
    for (i = 0; i < s->n_run; i++) {
        llm_seq_t *q = s->run[i];

        q->step_n = 0;
        q->logit_row = -1;
        if (s->c.ready && !s->c.ready(q->req->owner)) {
            continue;
        }
        if (q->toks.n - q->n_done == 1) {
            q->step_n = 1;
            n_dec++;
        } else if (q->toks.n - q->n_done > 1) {
            n_wait++;
        }
    }
    /* the streams' latency first */
    llm_sched_plan_prefill(s, llm_sched_prefill_budget(s, s->c.step_tokens
                                                          - n_dec, n_dec,
                                                       n_wait),
                           s->c.step_tokens - n_dec);

    /* 2: blocks; when they run out, preempt the newest sequence */
    for (i = 0; i < s->n_run; i++) {
        llm_seq_t *q = s->run[i];
        uint32_t   need = (q->n_done + q->step_n + bt - 1) / bt;

        while (q->n_blocks < need) {
            int64_t blk = llm_kvalloc_get(s->kva);

            if (blk < 0 || llm_seq_reserve_blocks(q, need) != 0) {
                if (blk >= 0) {
                    llm_kvalloc_put(s->kva, (uint32_t) blk);
                }
                llm_sched_preempt(s, s->run[s->n_run - 1]);
                if (i >= s->n_run) {
                    break;      /* q itself was the newest */
                }
                continue;
            }
            q->blocks[q->n_blocks++] = (uint32_t) blk;
        }
    }

    /* 3: the batch */
    nt = ns = nl = n_dec = n_pf = 0;
    for (i = 0; i < s->n_run; i++) {
        llm_seq_t *q = s->run[i];

        if (q->step_n == 0) {
            continue;
        }
        if (q->toks.n - q->n_done > 1) {
            n_pf += q->step_n;
        } else {
            n_dec++;
        }
        s->b_views[ns].blocks = q->blocks;
        s->b_views[ns].n_blocks = q->n_blocks;
        s->b_views[ns].swa_blocks = q->ring >= 0 && s->c.swa_ring > 0
            ? s->rings + (size_t) q->ring * s->c.swa_ring : NULL;
        s->b_views[ns].n_swa_blocks = q->ring >= 0 ? s->c.swa_ring : 0;
        s->b_views[ns].state = q->ring >= 0 ? (uint32_t) q->ring : 0;
        s->b_seqs[ns] = q;
        llm_seq_batch(s, q, ns, &nt, &nl);
        ns++;
    }
    if (nt == 0) {
        return 0;
    }
    b.n_tokens = nt;
    b.tokens = s->b_tok;
    b.pos = s->b_pos;
    b.seq = s->b_seq;
    b.logits = s->b_logits;
    b.n_seqs = ns;
    b.seqs = s->b_views;

    t0 = llm_now_ms();
    tf = s->c.clock_ms ? s->c.clock_ms() : t0;
    rc = s->c.forward(s->c.forward_ud, &b, s->out, err, sizeof(err));
    llm_sched_learn(s, (s->c.clock_ms ? s->c.clock_ms() : llm_now_ms()) - tf,
                    n_dec, n_pf);
    s->st.forward_ms_total += llm_now_ms() - t0;
    s->st.steps_total++;
    s->st.step_tokens_total += nt;
    s->st.batch_in_flight = ns;
    if (rc != 0) {
        for (i = 0; i < ns; i++) {
            llm_sreq_t *r = s->b_seqs[i]->req;
            llm_usage_t  u;

            if (r->dead) {
                continue;
            }
            llm_req_usage(r, &u);
            llm_emit_error(s, r->owner, LLM_ERR_INTERNAL,
                           NULL, &u, "forward pass failed: %s", err);
            llm_sched_bury(s, r);
        }
        llm_sched_reap(s);
        return rc;
    }

    /* 4: advance, publish full blocks, sample */
    for (i = 0; i < ns; i++) {
        llm_seq_t *q = s->b_seqs[i];

        llm_seq_prompt_logprobs(s, q);
        q->n_done += q->step_n;
        llm_seq_publish(s, q);
        if (q->logit_row >= 0) {
            llm_seq_sample(s, q, s->out + (size_t) q->logit_row
                                          * s->c.n_vocab);
        }
    }
    if (n_pf == 0) {        /* (not nt == ns: a 1-token prompt chunk) */
        s->st.decode_steps_total++;
        s->st.decode_tokens_total += nt;
        s->st.decode_step_ms_total += llm_now_ms() - t0;
    }

    llm_sched_reap(s);
    return (int) ns;
}
