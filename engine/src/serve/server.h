/*
 * The engine's server: one epoll loop that owns every socket (the Unix
 * listener, an optional TCP listener, the connections, a signalfd), reads
 * length-prefixed protobuf frames resumably, answers Info / Tokenize /
 * Detokenize at once, hands Generate requests to the scheduler and runs
 * scheduler steps whenever there is work, writing events as they come.
 *
 * Prompts (template render, tokenization) are prepared on one thread of
 * their own, so a huge one never stalls the running streams; the result
 * comes back to the loop through an eventfd.
 *
 * Backpressure: each connection has a write buffer; while it holds more
 * than wbuf_high bytes the connection's sequences sit out the steps and
 * its input is not read (no more requests parsed) until the buffer is
 * below half that, so a slow reader costs neither memory nor the other
 * streams' progress.
 *
 * Lifecycle: SIGTERM or SIGINT starts the drain: the listeners close (the
 * Unix socket file is removed), new requests get ERROR_SHUTTING_DOWN, the
 * running and queued ones finish; when none is left, or drain_timeout has
 * passed (they then get ERROR_SHUTTING_DOWN), llm_server_run() returns 0.
 */

#ifndef LLM_SERVER_H
#define LLM_SERVER_H

#include <stddef.h>
#include <stdint.h>

#include "base/log.h"
#include "embed.h"
#include "model/expert_cache.h"
#include "scheduler.h"
#include "template/template.h"
#include "text/tokenizer.h"

typedef struct {
    const char          *socket_path;   /* NULL: no Unix socket */
    const char          *listen;        /* "host:port" or NULL */
    const char          *auth;          /* the secret TCP clients send;
                                           NULL: none (loopback only) */
    int                  insecure_listen;  /* no secret on a non-loopback
                                              address: allowed */
    uint32_t             max_frame;     /* bytes, default 16 MiB */
    size_t               wbuf_high;     /* default 1 MiB */
    double               drain_timeout; /* seconds */

    /* what the engine serves */
    llm_sched_conf_t     sched;         /* emit, ready filled in here */
    const llm_vocab_t   *vocab;
    const llm_tmpl_t    *tmpl;

    /* Info */
    const char          *model_name;
    const char *const   *aliases;
    size_t               n_aliases;
    const char          *architecture;
    const char          *quantization;
    const char          *revision;
    uint64_t             n_params;
    uint64_t             file_bytes;
    const char          *chat_template_source;
    const char          *tool_call_format;
    int64_t              created;
    llm_xcache_t        *xcache;        /* streamed experts, or NULL */

    /* embedding mode (--embeddings): Embed only, no Generate; NULL: off */
    const llm_embed_conf_t *embed;
} llm_server_conf_t;

typedef struct llm_server_s llm_server_t;

/* Opens the listeners.  0 or a negative errno with err set. */
int llm_server_create(llm_server_t **out, const llm_server_conf_t *conf,
    char *err, size_t errlen);
/* Runs until drained.  0, or a negative errno on a fatal error. */
int llm_server_run(llm_server_t *srv);
void llm_server_free(llm_server_t *srv);
/* One info line with the expert cache's counters (if there is a cache). */
void llm_server_log_expert_stats(llm_server_t *srv);

#endif /* LLM_SERVER_H */
