/*
 * The scheduler: continuous batching over one model.
 *
 * Requests are submitted with their prompt tokens; each of their n choices
 * becomes a sequence.  llm_sched_step() runs one step: admit queued
 * sequences while the batch has room and the KV cache has blocks (prefix
 * reuse first), give every decoding sequence its next token and the
 * prefilling ones chunks under the per-step token budget (and, while
 * any sequence decodes, under the prefill budget), run one forward
 * pass, sample, detokenize and emit events.  When a decoding sequence needs
 * a block and none is left, the most recently admitted sequence is
 * preempted: its blocks are freed and it is queued again at the front, to
 * be recomputed (prompt and output so far) when blocks come back.  A
 * running sequence holds a seat (0..max_batch-1): its window ring and its
 * recurrent state slot, when the model has them; the seat goes back with
 * its blocks.
 *
 * Events go to the request's owner through conf.emit, as the engine's own
 * types below (server.c has them written to the wire, serve/wire.c); after
 * the terminal event (Done or Error) the scheduler has forgotten the
 * request.  Nothing
 * here does I/O; the caller runs step() and its event loop in turn, so
 * llm_sched_cancel() and llm_sched_submit() are never called mid-step.
 */

#ifndef LLM_SCHED_H
#define LLM_SCHED_H

#include <stddef.h>
#include <stdint.h>

#include "decode/request.h"
#include "decode/sample.h"
#include "decode/seq_hooks.h"
#include "model/model.h"
#include "text/tokenizer.h"

typedef struct llm_sched_s llm_sched_t;
typedef struct llm_sreq_s llm_sreq_t;

/* What one Generate may ask for; past it, ERROR_INVALID_REQUEST. */
#define LLM_SCHED_MAX_N     16      /* choices (and at most max_batch) */
#define LLM_SCHED_MAX_STOP  16      /* stop strings */

/* The limits a scheduler enforces, as Info reports them (proto
 * EngineLimits), so no other process holds a copy of the numbers. */
typedef struct {
    uint32_t  max_choices;       /* n: LLM_SCHED_MAX_N or max_batch */
    uint32_t  max_stop;          /* stop strings */
    uint32_t  max_stop_bytes;    /* bytes of one stop string; 0: no limit */
    uint32_t  max_top_logprobs;  /* LLM_SAMPLE_MAX_TOP_LOGPROBS */
} llm_sched_limits_t;

/* Why a choice ended (the numbers of proto FinishReason). */
typedef enum {
    LLM_FINISH_NONE = 0,
    LLM_FINISH_STOP,
    LLM_FINISH_LENGTH,
    LLM_FINISH_TOOL_CALLS,
    LLM_FINISH_CONTENT_FILTER
} llm_finish_e;

/* Why a request failed (the numbers of proto ErrorCode). */
typedef enum {
    LLM_ERR_NONE = 0,
    LLM_ERR_CONTEXT_LENGTH_EXCEEDED,
    LLM_ERR_INVALID_REQUEST,
    LLM_ERR_MODEL_NOT_FOUND,
    LLM_ERR_OVERLOADED,
    LLM_ERR_INTERNAL,
    LLM_ERR_BAD_FRAME,
    LLM_ERR_SHUTTING_DOWN,
    LLM_ERR_CANCELLED
} llm_errcode_e;

typedef struct {
    uint32_t  prompt_tokens;
    uint32_t  completion_tokens;
    uint32_t  cached_tokens;
} llm_usage_t;

/* The events of a request, in the order proto/llm.proto gives for
 * Generate: [QUEUED] [STARTED] (DELTA | TOOL_CALL)* (DONE | ERROR). */
typedef enum {
    LLM_SEV_QUEUED = 1,
    LLM_SEV_STARTED,
    LLM_SEV_DELTA,
    LLM_SEV_TOOL_CALL,
    LLM_SEV_DONE,
    LLM_SEV_ERROR
} llm_sched_event_e;

/* One event; pointers are valid during the emit call only. */
typedef struct {
    llm_sched_event_e  kind;
    union {
        struct {
            uint32_t        position;       /* requests ahead */
        } queued;
        struct {
            uint32_t        prompt_tokens;
            uint32_t        cached_tokens;  /* from the prefix cache */
        } started;
        struct {
            uint32_t        index;          /* choice */
            const char     *text;           /* UTF-8, NUL-terminated */
            const char     *reasoning;      /* the same, reasoning text */
            int32_t         token;          /* -1: text only */
            /* token's logprobs, when the request asked for them */
            const llm_sample_result_t *lp;
            int             echo;           /* token is a prompt token
                                             * (echo with logprobs): not
                                             * generated; lp->logprob NaN
                                             * for the first */
        } delta;
        struct {
            uint32_t        index;          /* choice */
            uint32_t        call_index;
            const char     *id;             /* "" after the first */
            const char     *name;
            const char     *args;           /* a fragment, args_len bytes */
            size_t          args_len;
        } tool_call;
        struct {
            uint32_t        n_choices;
            const llm_finish_e *finish;     /* [n_choices] */
            /* [n_choices]: the stop string that ended a choice
             * (LLM_FINISH_STOP), else NULL */
            const char *const *stop;
            llm_usage_t     usage;
            double          queue_ms, prefill_ms, decode_ms;
            const char     *model;
            const char     *fingerprint;
        } done;
        struct {
            llm_errcode_e   code;
            const char     *message;
            const char     *param;          /* or NULL */
            const llm_usage_t *usage;       /* or NULL */
        } error;
    } u;
} llm_sched_event_t;

/* Receives every event of a request (owner is what submit was given). */
typedef void (*llm_sched_emit_pt)(void *owner, const llm_sched_event_t *ev);
/* Nonzero when the owner can take more output now (backpressure). */
typedef int (*llm_sched_ready_pt)(void *owner);
typedef int (*llm_sched_forward_pt)(void *ud, const llm_batch_t *b,
    float *out, char *err, size_t errlen);

/* 0 with *out filled (or left zeroed: no hooks), or a negative errno. */
typedef int (*llm_sched_hooks_pt)(void *ctx, const llm_request_t *rq,
    uint32_t choice, llm_seq_hooks_t *out, char *err, size_t errlen);

typedef struct {
    const llm_vocab_t      *vocab;
    uint32_t                n_vocab;      /* logits row length */
    uint32_t                n_ctx;        /* context window per sequence */
    uint32_t                max_batch;    /* running sequences */
    uint32_t                step_tokens;  /* tokens per forward call */
    uint32_t                prefill_tokens; /* of those, prompt tokens
                                             while any sequence decodes
                                             (a long prefill goes in
                                             chunks this size so the
                                             streams' inter-token latency
                                             holds); 0: step_tokens */
    int                     prefill_timed;  /* and, within that, as many
                                             as take about one decode-only
                                             step's time (measured) */
    double                (*clock_ms)(void); /* what measures that, in ms;
                                             NULL: the monotonic clock
                                             (tests give their own) */
    uint32_t                max_queue;    /* queued requests; beyond: 429 */
    uint32_t                n_blocks;     /* KV blocks (llm_kv_t's) */
    uint32_t                block_tokens;
    uint32_t                swa_ring;     /* a ring of this many blocks of
                                             the window pool per running
                                             sequence (the cache has
                                             max_batch * swa_ring); 0: no
                                             pool.  No prefix reuse then:
                                             a ring holds the last window
                                             only */
    int                     recurrent;    /* the model has recurrent
                                             layers: each running sequence
                                             has its own state slot
                                             (llm_seq_view_t.state <
                                             max_batch; the cache has
                                             max_batch of them).  No
                                             prefix reuse then: the state
                                             at a prefix is not kept */
    llm_sched_forward_pt    forward;
    void                   *forward_ud;
    llm_sched_emit_pt       emit;
    llm_sched_ready_pt      ready;        /* optional */
    llm_sched_hooks_pt      hooks_make;   /* optional */
    void                   *hooks_ctx;
    int                     reasoning;    /* llm_reasoning_fmt_e of the
                                             chat answers */
    const char             *model_name;
    const char             *fingerprint;
} llm_sched_conf_t;

typedef struct {
    uint64_t  requests_total;
    uint64_t  requests_cancelled;
    uint64_t  requests_preempted;
    uint64_t  prompt_tokens_total;
    uint64_t  completion_tokens_total;
    uint64_t  cached_tokens_total;
    uint64_t  steps_total;
    uint64_t  step_tokens_total;
    uint64_t  decode_steps_total;        /* steps of one token per sequence */
    uint64_t  decode_tokens_total;
    double    decode_step_ms_total;      /* forward call through sampling */
    /* where every step's time goes (all steps, ms): the forward call;
     * grammar masks and sampling; detokenization with stop strings and
     * the reasoning / tool-call split; the events' encoding into the
     * connections' buffers (the server's emit callback) */
    double    forward_ms_total;
    double    sample_ms_total;
    double    detok_ms_total;
    double    emit_ms_total;
    uint32_t  requests_running;
    uint32_t  requests_queued;
    uint32_t  seqs_running;
    uint32_t  batch_in_flight;           /* sequences in the last step */
    uint32_t  kv_blocks_total;
    uint32_t  kv_blocks_free;
    uint32_t  kv_blocks_cached;
    uint32_t  kv_block_tokens;
} llm_sched_stats_t;

int llm_sched_create(llm_sched_t **out, const llm_sched_conf_t *conf,
    char *err, size_t errlen);
void llm_sched_free(llm_sched_t *s);

/*
 * Submit a request whose prompt is already tokenized (prompt is moved
 * into the scheduler and left empty).  rq is read during the call only:
 * what the request needs later is copied, and its hooks keep references
 * to the trees they use.  On success returns the request and may already
 * have emitted Queued.  On failure (invalid sampling options, context
 * overflow, queue full) returns NULL after emitting the Error event to
 * owner.
 */
llm_sreq_t *llm_sched_submit(llm_sched_t *s, const llm_request_t *rq,
    llm_tokens_t *prompt, void *owner);

/*
 * The same for a completion with several prompts (n_prompts >= 1, each
 * moved and left empty): each prompt gets rq's n choices, choice index
 * prompt * n + j (OpenAI's numbering); usage counts every prompt's
 * tokens; n times n_prompts is held to the max_choices limit.
 */
llm_sreq_t *llm_sched_submit_many(llm_sched_t *s, const llm_request_t *rq,
    llm_tokens_t *prompts, uint32_t n_prompts, void *owner);

/* The owner is gone: drop the request now, freeing its KV blocks.  No
 * more events are emitted. */
void llm_sched_cancel(llm_sched_t *s, llm_sreq_t *r);

/*
 * The client asked to stop r (Cancel): end it now with the terminal
 * Error{ERROR_CANCELLED, msg, usage} (usage.completion_tokens: every token
 * sampled for it so far, across its choices; all 0 when it was still
 * queued),
 * free its KV blocks and count it in requests_cancelled.  Text a choice
 * held back (a partial UTF-8 character, a possible stop string) is not
 * sent.
 */
void llm_sched_stop(llm_sched_t *s, llm_sreq_t *r, const char *msg);

/* Count a request cancelled before it reached the scheduler (its prompt
 * was still being prepared) in requests_cancelled. */
void llm_sched_count_cancelled(llm_sched_t *s);

/* End every request with Error(code, msg) (drain timeout, shutdown). */
void llm_sched_abort_all(llm_sched_t *s, llm_errcode_e code,
    const char *msg);

/*
 * One step.  Returns the number of sequences that took part (0: nothing
 * to do) or a negative errno when the forward pass failed (the requests
 * in that batch got Error internal).
 */
int llm_sched_step(llm_sched_t *s);

/* Requests queued or running. */
uint32_t llm_sched_pending(const llm_sched_t *s);

void llm_sched_get_stats(const llm_sched_t *s, llm_sched_stats_t *st);

/* The limits llm_sched_submit() checks a request against. */
void llm_sched_get_limits(const llm_sched_t *s, llm_sched_limits_t *l);

#endif /* LLM_SCHED_H */
