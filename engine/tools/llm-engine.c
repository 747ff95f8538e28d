/*
 * llm-engine: the long-lived inference process nginx talks to.  Loads one
 * GGUF model, opens the Unix socket (mode 0660: whoever may connect may
 * use the model; the group is the trust boundary) and optionally a TCP
 * port, and serves the protocol of proto/llm.proto with continuous
 * batching until SIGTERM or SIGINT, then drains.
 */

#include <errno.h>
#include <getopt.h>
#include <openssl/evp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "model/expert_cache.h"
#include "model/gguf.h"
#include "serve/memplan.h"
#include "model/model.h"
#include "serve/prompt.h"
#include "kernels/quant.h"
#include "serve/server.h"
#include "template/template.h"
#include "text/tokenizer.h"
#include "decode/reasoning.h"
#include "readfile.h"
#include "decode/toolcall.h"

#define LLM_MAX_ALIASES  32

static void
usage(FILE *f)
{
    fprintf(f,
"usage: llm-engine --model FILE --socket PATH [options]\n"
"\n"
"Serves one GGUF model over proto/llm.proto (4-byte big-endian length +\n"
"protobuf frames) with continuous batching.\n"
"\n"
"  --model FILE          the GGUF model (required)\n"
"  --socket PATH         Unix socket to listen on, created mode 0660; a\n"
"                        stale socket file is replaced only if nothing\n"
"                        listens on it\n"
"  --listen HOST:PORT    also listen on TCP (engines on other hosts); on\n"
"                        a non-loopback address only with --auth-file\n"
"                        (or --insecure-listen)\n"
"  --auth-file FILE      the shared secret (the file's first line) every\n"
"                        TCP connection must send first (nginx:\n"
"                        llm_engine_auth_file)\n"
"  --insecure-listen     allow --listen on any address without a secret\n"
"  --threads N           forward-pass threads (default: online CPUs)\n"
"  --max-batch B         sequences decoded together (default 64)\n"
"  --ctx C               context window per request (default: the\n"
"                        model's training context, at most 8192); up\n"
"                        to the training context, or past it to the\n"
"                        window the file's RoPE scaling gives\n"
"  --kv-mb M             KV cache budget in MiB (default: room for\n"
"                        max(ctx, 16384) tokens)\n"
"  --kv-type T           f16 (default), q8_0 (half the memory), q4_0\n"
"                        (a quarter) or f32: the cache's element type\n"
"                        (q8_0/q4_0: ggml's blocks of 32 values per head,\n"
"                        read by the attention kernels directly)\n"
"  --block-tokens N      tokens per KV block (default 16)\n"
"  --swa-full            sliding-window layers (gpt-oss) keep the whole\n"
"                        sequence's KV like the others, so prefixes can\n"
"                        be reused; by default they keep a ring of what\n"
"                        their window sees (less memory, no prefix cache)\n"
"  --step-tokens N       tokens per forward call, decode + prefill\n"
"                        chunks (default: 16 per expert's share of\n"
"                        the routing, 16 x experts / used, in\n"
"                        [128, 512]; 128 for a dense model)\n"
"  --prefill-tokens N|auto\n"
"                        of those, prompt tokens per step while other\n"
"                        sequences decode: a long prompt is prefilled in\n"
"                        chunks between their tokens.  auto (default):\n"
"                        as many as cost about one decode-only step\n"
"                        (measured as it runs; at least 1), so their\n"
"                        inter-token latency stays near 2x; when more\n"
"                        prompts wait than streams decode (a burst),\n"
"                        each request gets about an equal share of a\n"
"                        step, and a prompt that fits whole in the step\n"
"                        goes whole; N: chunks of N; 0: the whole budget\n"
"  --max-queue Q         queued requests before `overloaded` (default 256)\n"
"  --name NAME           the served model name (default: general.name)\n"
"  --alias NAME          another name this engine answers to (repeat)\n"
"  --drain-timeout S     seconds to finish requests after SIGTERM (30)\n"
"  --max-frame BYTES     largest request frame (default 16 MiB)\n"
"  --write-buffer-kb K   output held per connection before its streams\n"
"                        pause and its requests are no longer read, for a\n"
"                        slow reader (default 1024)\n"
"  --expert-cache-mb M   stream experts from disk (io_uring) into M MiB\n"
"                        of RAM; 0: map the whole file.  Default: chosen\n"
"                        at start from the memory allowed (the cgroup's\n"
"                        limit, MemAvailable) and logged: resident,\n"
"                        streamed with the cache that fits, or resident\n"
"                        without regrouping (docs/STREAMING.md)\n"
"  --memory-limit-mb M   plan for M MiB instead of the detected limit\n"
"  --no-regroup          keep the weights in the file's layout (no\n"
"                        anonymous copy; pages stay reclaimable)\n"
"  --mlock               lock the weights in RAM\n"
"  --log-level L         error, warn, info (default) or debug\n"
"  --embeddings          serve embeddings (Embed requests, /v1/embeddings)\n"
"                        instead of generation, as llama-server's\n"
"                        --embeddings: the forward pass without the head,\n"
"                        pooled as <arch>.pooling_type says, L2-normalized\n"
"  --pooling P           mean, cls or last: overrides the file's pooling\n"
"                        (required when the file has none)\n"
"  --embd-truncate       the model is trained for truncated vectors\n"
"                        (Matryoshka): `dimensions` below the embedding\n"
"                        length keeps the first values and renormalizes\n"
"  --tool-format F       the tool-call format, instead of the one the chat\n"
"                        template suggests: hermes, minimax-m2, llama3-json,\n"
"                        mistral, deepseek-v3, glm4.5, glm4.7, kimi-k2,\n"
"                        harmony or none\n"
"                        (docs/TOOLS.md)\n"
"  --reasoning-format F  think, harmony or none: how a chat answer's\n"
"                        reasoning is told from the answer\n"
"                        (reasoning_content); by default harmony when the\n"
"                        chat template knows <|channel|> (gpt-oss), think\n"
"                        when it knows </think>, else none (docs/TOOLS.md)\n"
"  --help                this text\n"
"\n"
"Exit codes: 0 drained after SIGTERM/SIGINT, 1 an error (logged), 2 bad\n"
"usage, 3 the model file was truncated or overwritten in place while\n"
"mapped (deploy by rename: docs/DEPLOY.md).\n");
}

/* --kv-type's names. */
static const struct {
    const char  *name;
    llm_type_t   type;
} kv_types[] = {
    { "f16", LLM_TYPE_F16 }, { "q8_0", LLM_TYPE_Q8_0 },
    { "q4_0", LLM_TYPE_Q4_0 }, { "f32", LLM_TYPE_F32 },
};

static int
parse_kv_type(const char *s, llm_type_t *t)
{
    size_t  i;

    for (i = 0; i < sizeof(kv_types) / sizeof(kv_types[0]); i++) {
        if (strcmp(s, kv_types[i].name) == 0) {
            *t = kv_types[i].type;
            return 0;
        }
    }
    return -1;
}

static const char *
kv_type_name(llm_type_t t)
{
    size_t  i;

    for (i = 0; i < sizeof(kv_types) / sizeof(kv_types[0]); i++) {
        if (kv_types[i].type == t) {
            return kv_types[i].name;
        }
    }
    return "?";
}

/* Exit code when the model file changed under the mapping (DEPLOY.md). */
#define LLM_EXIT_MODEL_CHANGED  3

typedef struct {
    llm_ctx_t          *ctx;
    const llm_gguf_t   *gguf;
    int                 changed;    /* truncated/overwritten: draining */
    int                 renamed;    /* logged once */
} engine_fwd_t;

/*
 * The scheduler's forward: first check that the model file under the
 * mapping is the one loaded.  Truncated or overwritten in place, the
 * mapping may fault (SIGBUS, which llm_gguf_guard turns into a logged
 * exit) or hold other weights: the step fails with the reason (its
 * requests get an Error), and the engine drains (SIGTERM to itself) and
 * exits with LLM_EXIT_MODEL_CHANGED.  Renamed over: the old file stays
 * mapped and valid; logged once.
 */
static int
fwd(void *ud, const llm_batch_t *b, float *out, char *err, size_t errlen)
{
    engine_fwd_t  *f = ud;
    int            rc;

    rc = llm_gguf_check_file(f->gguf, err, errlen);
    if (rc < 0) {
        if (!f->changed) {
            f->changed = 1;
            llm_log(LLM_LOG_ERROR, "%s; draining, then exiting with code "
                    "%d", err, LLM_EXIT_MODEL_CHANGED);
            kill(getpid(), SIGTERM);
        }
        return rc;
    }
    if (rc == 1 && !f->renamed) {
        f->renamed = 1;
        llm_log(LLM_LOG_INFO, "model file %s now names another file (or "
                "none): serving the one loaded until restarted",
                llm_gguf_path(f->gguf));
    }
    return llm_forward(f->ctx, b, out, err, errlen);
}

/* fwd for an embedding engine: the same checks, then no head. */
static int
fwd_hidden(void *ud, const llm_batch_t *b, float *out, char *err,
    size_t errlen)
{
    engine_fwd_t  *f = ud;
    int            rc;

    rc = llm_gguf_check_file(f->gguf, err, errlen);
    if (rc < 0) {
        return fwd(ud, b, out, err, errlen);    /* logs, drains */
    }
    return llm_forward_hidden(f->ctx, b, out, err, errlen);
}

/*
 * The pooling of an embedding engine: --pooling when given, else the
 * file's <arch>.pooling_type (llama.cpp's enum).  Mean, cls and last are
 * implemented; none (per-token vectors), rank (rerankers) and a file
 * without the key are refused with the reason.  0 or -1 (logged).
 */
static int
embed_pooling(const llm_model_t *m, const char *opt, llm_pooling_t *out)
{
    const llm_hparams_t *hp = llm_model_hparams(m);
    char                 key[96], err[256];
    uint32_t             pt;
    int                  v;

    if (opt != NULL) {
        v = llm_pooling_from_name(opt);
        if (v < 0 || llm_pooling_name((uint32_t) v) == NULL) {
            llm_log(LLM_LOG_ERROR, "--pooling: expected mean, cls or last, "
                    "got '%s'", opt);
            return -1;
        }
        *out = (llm_pooling_t) v;
        return 0;
    }
    snprintf(key, sizeof(key), "%s.pooling_type", hp->arch_name);
    if (llm_gguf_get_u32(llm_model_gguf(m), key, &pt, err, sizeof(err))
        != 0)
    {
        llm_log(LLM_LOG_ERROR, "--embeddings: the file has no %s (not an "
                "embedding model?); give --pooling mean, cls or last", key);
        return -1;
    }
    if (llm_pooling_name(pt) == NULL) {
        llm_log(LLM_LOG_ERROR, "--embeddings: %s is %u (%s), which this "
                "engine does not implement; it pools mean (1), cls (2) or "
                "last (3); --pooling overrides the file", key, pt,
                pt == LLM_POOL_NONE ? "none: per-token vectors"
                : pt == LLM_POOL_RANK ? "rank: a reranker" : "unknown");
        return -1;
    }
    *out = (llm_pooling_t) pt;
    return 0;
}

/* A short revision id: SHA-256 of the header and metadata plus size. */
static void
revision_of(const llm_gguf_t *g, char *out, size_t outlen)
{
    unsigned char  md[EVP_MAX_MD_SIZE];
    unsigned int   mdlen = 0;
    uint64_t       size = llm_gguf_file_size(g);
    EVP_MD_CTX    *x = EVP_MD_CTX_new();

    snprintf(out, outlen, "unknown");
    if (x == NULL) {
        return;
    }
    if (EVP_DigestInit_ex(x, EVP_sha256(), NULL) == 1
        && EVP_DigestUpdate(x, llm_gguf_map(g), llm_gguf_data_offset(g)) == 1
        && EVP_DigestUpdate(x, &size, sizeof(size)) == 1
        && EVP_DigestFinal_ex(x, md, &mdlen) == 1)
    {
        for (unsigned i = 0; i < 6 && 2 * i + 2 < outlen; i++) {
            snprintf(out + 2 * i, 3, "%02x", md[i]);
        }
    }
    EVP_MD_CTX_free(x);
}

static double
now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double) ts.tv_sec + (double) ts.tv_nsec / 1e9;
}

#define LLM_MEM_MARGIN  (64ull << 20)   /* vocabulary, server, libc */

/*
 * --ctx against what the file's positions were trained for: up to its
 * context_length, and past it only as far as its RoPE scaling stretches
 * (hp->n_ctx_max).  0, or -1 with the error logged naming both.
 */
static int
check_ctx(const llm_hparams_t *hp, uint32_t n_ctx)
{
    uint32_t  train = hp->n_ctx_train ? hp->n_ctx_train : 4096;
    uint32_t  max = hp->n_ctx_max > train ? hp->n_ctx_max : train;

    if (n_ctx <= max) {
        return 0;
    }
    if (max == train) {
        llm_log(LLM_LOG_ERROR, "--ctx %u: the model was trained on %u "
                "tokens and the file gives no RoPE scaling (%s.rope."
                "scaling.type linear or yarn) to go past it; use --ctx %u "
                "or less", n_ctx, train, hp->arch_name, train);
    } else {
        llm_log(LLM_LOG_ERROR, "--ctx %u: the model was trained on %u "
                "tokens and the file's RoPE scaling stretches that to %u; "
                "use --ctx %u or less", n_ctx, train, max, max);
    }
    return -1;
}

/*
 * Choose how to hold the model (memplan.h) and set mo's expert cache,
 * regrouping and prefault accordingly: the user's --expert-cache-mb or
 * --no-regroup when given (a warning when over the budget), else the
 * plan for the memory allowed (--memory-limit-mb MiB when nonzero, else
 * the cgroup's and the machine's).  Logs one line with the numbers.
 * Returns 0, or -1 with the error logged when not even the KV cache and
 * buffers fit.
 */
static int
plan_memory(const llm_model_t *m, const llm_ctx_t *ctx, uint64_t kv_bytes,
    uint32_t expert_mb, int no_regroup, uint32_t limit_mb,
    llm_model_opts_t *mo)
{
    const llm_hparams_t  *hp = llm_model_hparams(m);
    llm_mem_limits_t      lim;
    llm_mem_need_t        need;
    llm_mem_plan_t        plan;
    uint64_t              allowed, slot = 0, experts = 0;
    char                  src[2400], mode[96], err[512];
    const double          mib = 1048576.0;

    llm_mem_detect(&lim, NULL);
    allowed = limit_mb ? (uint64_t) limit_mb << 20 : lim.allowed;

    memset(&need, 0, sizeof(need));
    need.file_bytes = llm_gguf_file_size(llm_model_gguf(m));
    if (hp->n_expert > 0 && llm_xcache_sizes(m, &slot, &experts) == 0) {
        need.experts_bytes = experts;
        need.slot_bytes = slot;
        need.n_expert = hp->n_expert;
        need.n_expert_used = hp->n_expert_used;
    }
    need.n_layer = hp->n_layer;
    need.regroup_bytes = llm_model_regroup_bytes(m, 1);
    need.regroup_rest_bytes = llm_model_regroup_bytes(m, 0);
    need.kv_bytes = kv_bytes;
    need.buffer_bytes = llm_ctx_buffer_bytes(ctx);
    need.other_bytes = LLM_MEM_MARGIN;

    if (llm_mem_plan(&need, allowed, &plan, err, sizeof(err)) != 0
        && expert_mb == UINT32_MAX && !no_regroup)
    {
        llm_log(LLM_LOG_ERROR, "%s", err);
        return -1;
    }
    if (expert_mb != UINT32_MAX || no_regroup) {
        /* the user's choice, with what it needs */
        plan.mode = expert_mb != UINT32_MAX && expert_mb > 0
                    && hp->n_expert > 0 ? LLM_MEM_STREAMED
                    : no_regroup ? LLM_MEM_NO_REGROUP : LLM_MEM_RESIDENT;
        plan.cache_mb = plan.mode == LLM_MEM_STREAMED ? expert_mb : 0;
        plan.budget = allowed / 10 * 9;
        plan.anon_bytes = need.kv_bytes + need.buffer_bytes
                          + need.other_bytes;
        plan.total_bytes = plan.anon_bytes + need.file_bytes;
        if (plan.mode == LLM_MEM_STREAMED) {
            plan.anon_bytes += (plan.cache_mb << 20)
                               + (no_regroup ? 0 : need.regroup_rest_bytes);
            plan.total_bytes += (plan.cache_mb << 20) - need.experts_bytes;
        } else if (plan.mode == LLM_MEM_RESIDENT) {
            plan.anon_bytes += need.regroup_bytes;
        }
    }

    if (lim.cgroup_kind[0]) {
        snprintf(src, sizeof(src), "cgroup %s limit %.1f MiB at %s",
                 lim.cgroup_kind, (double) lim.cgroup_limit / mib,
                 lim.cgroup_dir);
    } else {
        snprintf(src, sizeof(src), "no cgroup limit");
    }
    snprintf(mode, sizeof(mode), "%s", llm_mem_mode_name(plan.mode));
    if (plan.mode == LLM_MEM_STREAMED) {
        snprintf(mode, sizeof(mode), "streamed experts, cache %llu MiB "
                 "(%.0f%% of the experts)", (unsigned long long) plan.cache_mb,
                 100.0 * (double) (plan.cache_mb << 20)
                 / (double) need.experts_bytes);
    }
    llm_log(allowed && plan.anon_bytes > plan.budget ? LLM_LOG_WARN
            : LLM_LOG_INFO,
            "memory: %s%s; allowed %.1f MiB%s (%s, MemTotal %.0f MiB, "
            "MemAvailable %.0f MiB), budget 90%% %.1f MiB; needs: file "
            "%.1f MiB (experts %.1f MiB), regrouped copy %.1f MiB (%.1f "
            "MiB without experts), KV %.1f MiB, buffers %.1f MiB, margin "
            "%.0f MiB; planned %.1f MiB anonymous, %.1f MiB in all",
            mode, expert_mb != UINT32_MAX || no_regroup
            ? " (by --expert-cache-mb/--no-regroup)" : "",
            (double) allowed / mib, limit_mb ? " (--memory-limit-mb)" : "",
            src, (double) lim.mem_total / mib,
            (double) lim.mem_available / mib, (double) plan.budget / mib,
            (double) need.file_bytes / mib,
            (double) need.experts_bytes / mib,
            (double) need.regroup_bytes / mib,
            (double) need.regroup_rest_bytes / mib,
            (double) need.kv_bytes / mib, (double) need.buffer_bytes / mib,
            (double) need.other_bytes / mib,
            (double) plan.anon_bytes / mib, (double) plan.total_bytes / mib);

    mo->expert_cache_mb = plan.mode == LLM_MEM_STREAMED ? plan.cache_mb
                          : expert_mb != UINT32_MAX ? expert_mb : 0;
    mo->no_regroup = plan.mode == LLM_MEM_NO_REGROUP || no_regroup;
    if (plan.mode == LLM_MEM_NO_REGROUP) {
        mo->no_prefault = 1;
    }
    return 0;
}

static int
parse_u32(const char *opt, const char *s, uint32_t min, uint32_t *v)
{
    char          *end;
    unsigned long  x;

    errno = 0;
    x = strtoul(s, &end, 10);
    if (errno || *end || end == s || x < min || x > 0xffffffffUL) {
        fprintf(stderr, "llm-engine: %s: expected an integer >= %u, got "
                "'%s'\n", opt, min, s);
        return -1;
    }
    *v = (uint32_t) x;
    return 0;
}

/*
 * The shared secret of --auth-file: its first line, surrounding blanks
 * removed; NULL with the reason printed when it is missing or empty.
 */
static char *
llm_engine_secret(const char *path)
{
    char    *buf, *s, *e;
    size_t   len;

    buf = llm_read_file(path, &len);
    if (buf == NULL) {
        fprintf(stderr, "llm-engine: --auth-file %s: %s\n", path,
                strerror(errno));
        return NULL;
    }
    s = buf;
    while (*s == ' ' || *s == '\t' || *s == '\r' || *s == '\n') {
        s++;
    }
    e = s;
    while (*e != '\0' && *e != '\r' && *e != '\n') {
        e++;
    }
    while (e > s && (e[-1] == ' ' || e[-1] == '\t')) {
        e--;
    }
    *e = '\0';
    if (*s == '\0') {
        fprintf(stderr, "llm-engine: --auth-file %s: the file holds no "
                "secret\n", path);
        free(buf);
        return NULL;
    }
    memmove(buf, s, (size_t) (e - s) + 1);
    return buf;
}

int
main(int argc, char **argv)
{
    enum {
        O_MODEL = 1, O_SOCKET, O_LISTEN, O_THREADS, O_MAXBATCH, O_CTX,
        O_KVMB, O_KVTYPE, O_BLOCK, O_STEP, O_QUEUE, O_NAME, O_ALIAS,
        O_DRAIN, O_FRAME, O_EXPERT, O_MLOCK, O_LOG, O_WBUF, O_TOOLFMT,
        O_RSNFMT, O_SWAFULL, O_MEMLIMIT, O_NOREGROUP, O_EMBD, O_POOLING, O_EMBDTRUNC,
        O_AUTH, O_INSECURE, O_PREFILL, O_HELP
    };
    static const struct option lo[] = {
        { "model", 1, 0, O_MODEL }, { "socket", 1, 0, O_SOCKET },
        { "listen", 1, 0, O_LISTEN }, { "threads", 1, 0, O_THREADS },
        { "max-batch", 1, 0, O_MAXBATCH }, { "ctx", 1, 0, O_CTX },
        { "kv-mb", 1, 0, O_KVMB }, { "kv-type", 1, 0, O_KVTYPE },
        { "block-tokens", 1, 0, O_BLOCK }, { "step-tokens", 1, 0, O_STEP },
        { "prefill-tokens", 1, 0, O_PREFILL },
        { "max-queue", 1, 0, O_QUEUE }, { "name", 1, 0, O_NAME },
        { "alias", 1, 0, O_ALIAS }, { "drain-timeout", 1, 0, O_DRAIN },
        { "max-frame", 1, 0, O_FRAME }, { "expert-cache-mb", 1, 0, O_EXPERT },
        { "mlock", 0, 0, O_MLOCK }, { "log-level", 1, 0, O_LOG },
        { "write-buffer-kb", 1, 0, O_WBUF },
        { "tool-format", 1, 0, O_TOOLFMT },
        { "reasoning-format", 1, 0, O_RSNFMT },
        { "memory-limit-mb", 1, 0, O_MEMLIMIT },
        { "no-regroup", 0, 0, O_NOREGROUP },
        { "swa-full", 0, 0, O_SWAFULL },
        { "embeddings", 0, 0, O_EMBD }, { "pooling", 1, 0, O_POOLING },
        { "embd-truncate", 0, 0, O_EMBDTRUNC },
        { "auth-file", 1, 0, O_AUTH }, { "insecure-listen", 0, 0, O_INSECURE },
        { "help", 0, 0, O_HELP }, { 0, 0, 0, 0 }
    };
    const char         *model_path = NULL, *sock = NULL, *listen_on = NULL;
    const char         *auth_file = NULL;
    char               *auth = NULL;
    int                 insecure_listen = 0;
    const char         *name = NULL, *aliases[LLM_MAX_ALIASES];
    uint32_t            threads = 0, max_batch = 64, n_ctx = 0, kv_mb = 0;
    uint32_t            block_tokens = 16, step_tokens = 0;
    uint32_t            prefill_tokens = 0;
    int                 prefill_timed = 1;
    uint32_t            max_queue = 256, max_frame = 16u << 20;
    uint32_t            expert_mb = UINT32_MAX, n_blocks, wbuf_kb = 1024;
    uint32_t            limit_mb = 0;
    int                 no_regroup = 0, embeddings = 0, embd_trunc = 0;
    int                 swa_full = 0;
    uint32_t            swa_ring, n_blocks_swa;
    size_t              swa_bytes, rs_bytes;
    const char         *pooling = NULL;
    llm_embed_conf_t    ec;
    size_t              n_aliases = 0, block_bytes;
    double              drain = 30.0, t0;
    llm_type_t          kv_type = LLM_TYPE_F16;
    llm_model_opts_t    mo = { 0 };
    llm_model_t        *m = NULL;
    llm_vocab_t        *v = NULL;
    llm_kv_t           *kv = NULL;
    llm_ctx_t          *ctx = NULL;
    llm_tmpl_t         *tmpl = NULL;
    llm_server_t       *srv = NULL;
    llm_server_conf_t   sc;
    llm_xcache_t       *xc = NULL;
    llm_xcache_opts_t   xo;
    llm_xcache_stats_t  xs;
    engine_fwd_t        ef = { 0 };
    const llm_hparams_t *hp;
    llm_gguf_str_t      ts = { 0 };
    char                err[512] = "", rev[16], fp[32], mix[512];
    const char         *tsrc = "gguf", *tfmt = "none", *tool_format = NULL;
    sigset_t            set;
    int                 o, rc = 1, lvl, rfmt = -1;

    /* before any thread exists: SIGTERM/SIGINT only through the signalfd */
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigprocmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);

    while ((o = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
        switch (o) {
        case O_MODEL: model_path = optarg; break;
        case O_EMBD: embeddings = 1; break;
        case O_POOLING: pooling = optarg; break;
        case O_EMBDTRUNC: embd_trunc = 1; break;
        case O_SOCKET: sock = optarg; break;
        case O_LISTEN: listen_on = optarg; break;
        case O_AUTH: auth_file = optarg; break;
        case O_INSECURE: insecure_listen = 1; break;
        case O_THREADS:
            if (parse_u32("--threads", optarg, 1, &threads)) return 2;
            break;
        case O_MAXBATCH:
            if (parse_u32("--max-batch", optarg, 1, &max_batch)) return 2;
            break;
        case O_CTX:
            if (parse_u32("--ctx", optarg, 16, &n_ctx)) return 2;
            break;
        case O_KVMB:
            if (parse_u32("--kv-mb", optarg, 1, &kv_mb)) return 2;
            break;
        case O_KVTYPE:
            if (parse_kv_type(optarg, &kv_type) < 0) {
                fprintf(stderr, "llm-engine: --kv-type: f16, q8_0, q4_0 or "
                        "f32, got '%s'\n", optarg);
                return 2;
            }
            break;
        case O_BLOCK:
            if (parse_u32("--block-tokens", optarg, 1, &block_tokens)) {
                return 2;
            }
            break;
        case O_STEP:
            if (parse_u32("--step-tokens", optarg, 1, &step_tokens)) {
                return 2;
            }
            break;
        case O_PREFILL:
            prefill_timed = strcmp(optarg, "auto") == 0;
            if (!prefill_timed
                && parse_u32("--prefill-tokens", optarg, 0, &prefill_tokens))
            {
                return 2;
            }
            break;
        case O_QUEUE:
            if (parse_u32("--max-queue", optarg, 0, &max_queue)) return 2;
            break;
        case O_NAME: name = optarg; break;
        case O_ALIAS:
            if (n_aliases == LLM_MAX_ALIASES) {
                fprintf(stderr, "llm-engine: at most %d --alias\n",
                        LLM_MAX_ALIASES);
                return 2;
            }
            aliases[n_aliases++] = optarg;
            break;
        case O_DRAIN:
            drain = strtod(optarg, NULL);
            if (!(drain >= 0.0)) {
                fprintf(stderr, "llm-engine: --drain-timeout: seconds >= 0\n");
                return 2;
            }
            break;
        case O_FRAME:
            if (parse_u32("--max-frame", optarg, 64, &max_frame)) return 2;
            break;
        case O_EXPERT:
            if (parse_u32("--expert-cache-mb", optarg, 0, &expert_mb)) {
                return 2;
            }
            break;
        case O_WBUF:
            if (parse_u32("--write-buffer-kb", optarg, 1, &wbuf_kb)) {
                return 2;
            }
            break;
        case O_MEMLIMIT:
            if (parse_u32("--memory-limit-mb", optarg, 1, &limit_mb)) {
                return 2;
            }
            break;
        case O_NOREGROUP: no_regroup = 1; break;
        case O_SWAFULL: swa_full = 1; break;
        case O_MLOCK: mo.use_mlock = 1; break;
        case O_LOG:
            lvl = llm_log_parse_level(optarg);
            if (lvl < 0) {
                fprintf(stderr, "llm-engine: --log-level: error, warn, info "
                        "or debug, got '%s'\n", optarg);
                return 2;
            }
            llm_log_set_level((llm_log_level_t) lvl);
            break;
        case O_TOOLFMT:
            if (llm_toolfmt_from_name(optarg) < 0) {
                fprintf(stderr, "llm-engine: --tool-format: one of %s, got "
                        "'%s'\n", llm_toolfmt_names(), optarg);
                return 2;
            }
            tool_format = optarg;
            break;
        case O_RSNFMT:
            rfmt = llm_reasoning_fmt_from_name(optarg);
            if (rfmt < 0) {
                fprintf(stderr, "llm-engine: --reasoning-format: think, "
                        "harmony or none, got '%s'\n", optarg);
                return 2;
            }
            break;
        case O_HELP: case 'h':
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "llm-engine: unexpected argument '%s'\n",
                argv[optind]);
        return 2;
    }
    if (model_path == NULL || (sock == NULL && listen_on == NULL)) {
        fprintf(stderr, "llm-engine: --model and --socket (or --listen) are "
                "required; see --help\n");
        return 2;
    }
    if (threads == 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);

        threads = n > 0 ? (uint32_t) n : 1;
    }

    llm_log(LLM_LOG_INFO, "starting: model %s, %u threads, max batch %u",
            model_path, threads, max_batch);
    t0 = now_s();
    /*
     * Bind only: nothing big is written until plan_memory() has chosen
     * how the model fits (the KV cache and buffers are lazily backed).
     */
    mo.bind_only = 1;
    if (llm_model_load(&m, model_path, &mo, err, sizeof(err)) != 0) {
        llm_log(LLM_LOG_ERROR, "%s", err);
        goto done;
    }
    /* a fault on the mapping (file truncated under it): a clear exit */
    if (llm_gguf_guard(llm_model_gguf(m), "llm-engine",
                       LLM_EXIT_MODEL_CHANGED) != 0)
    {
        llm_log(LLM_LOG_WARN, "no SIGBUS handler for the model's mapping: "
                "%s", strerror(errno));
    }
    hp = llm_model_hparams(m);
    if (step_tokens == 0) {
        /*
         * A step's cost is its weights, read once, plus its arithmetic:
         * once every routed expert gets ~16 rows, more tokens per step
         * only add latency for the streams already decoding (bench
         * serve on the bench model, 64 experts / 8 used: 128 against 512
         * gave TTFT p50 0.89 s instead of 2.0 s and 77 tok/s instead of
         * 62 at 8 x 32-token prompts; docs/BENCHMARKS.md).  A model with
         * 256 experts needs 512 for the same rows per expert.
         */
        step_tokens = hp->n_expert && hp->n_expert_used
                      ? 16 * hp->n_expert / hp->n_expert_used : 128;
        step_tokens = step_tokens < 128 ? 128
                      : step_tokens > 512 ? 512 : step_tokens;
    }
    if (step_tokens < max_batch) {
        step_tokens = max_batch;
    }
    if (llm_vocab_load(&v, llm_model_gguf(m), err, sizeof(err)) != 0) {
        llm_log(LLM_LOG_ERROR, "%s", err);
        goto done;
    }

    if (n_ctx == 0) {
        /* the KV cache holds max(ctx, 16384) tokens by default: 8192
         * leaves room for two full windows, or many short requests */
        n_ctx = hp->n_ctx_train ? hp->n_ctx_train : 4096;
        if (n_ctx > 8192) {
            n_ctx = 8192;
        }
    } else if (check_ctx(hp, n_ctx) != 0) {
        goto done;
    }
    if (llm_kv_type_check(m, kv_type, block_tokens, err, sizeof(err)) < 0) {
        llm_log(LLM_LOG_ERROR, "--kv-type %s: %s", kv_type_name(kv_type),
                err);
        goto done;
    }
    /* sliding-window layers: a ring per running sequence (llm_kv_swa_ring),
     * unless --swa-full or embeddings (their forward gives no rings) */
    swa_ring = swa_full || embeddings
               ? 0 : llm_kv_swa_ring(m, block_tokens, step_tokens);
    n_blocks_swa = swa_ring * max_batch;
    swa_bytes = (size_t) n_blocks_swa
                * llm_kv_block_bytes_of(m, block_tokens, kv_type,
                                        LLM_KV_SWA);
    block_bytes = llm_kv_block_bytes_of(m, block_tokens, kv_type,
                                        swa_ring ? LLM_KV_FULL : LLM_KV_ALL);
    /* recurrent layers: a state slot per running sequence, counted in
     * --kv-mb with the rings */
    rs_bytes = llm_kv_state_bytes(m) * max_batch;
    if (kv_mb && ((uint64_t) kv_mb << 20) <= swa_bytes + rs_bytes) {
        llm_log(LLM_LOG_ERROR, "--kv-mb %u: the recurrent layers' states "
                "(%.1f MiB for %u sequences) and window rings (%.1f MiB) "
                "take it all; raise --kv-mb or lower --max-batch", kv_mb,
                (double) rs_bytes / 1048576.0, max_batch,
                (double) swa_bytes / 1048576.0);
        goto done;
    }
    if (kv_mb && ((uint64_t) kv_mb << 20) <= swa_bytes) {
        llm_log(LLM_LOG_ERROR, "--kv-mb %u: the sliding-window layers' "
                "rings alone take %.1f MiB (%u sequences x %u blocks); "
                "raise --kv-mb or lower --max-batch", kv_mb,
                (double) swa_bytes / 1048576.0, max_batch, swa_ring);
        goto done;
    }
    if (kv_mb) {
        n_blocks = (uint32_t) ((((uint64_t) kv_mb << 20) - swa_bytes
                                - rs_bytes)
                               / block_bytes);
    } else {
        uint32_t tokens = n_ctx > 16384 ? n_ctx : 16384;

        n_blocks = (tokens + block_tokens - 1) / block_tokens;
    }
    if ((uint64_t) n_blocks * block_tokens < n_ctx) {
        llm_log(LLM_LOG_ERROR, "--kv-mb %u holds %llu tokens, less than the "
                "context window %u; raise --kv-mb or lower --ctx", kv_mb,
                (unsigned long long) n_blocks * block_tokens, n_ctx);
        goto done;
    }
    if (llm_kv_create_rs(&kv, m, n_blocks, n_blocks_swa, max_batch,
                         block_tokens, kv_type, err, sizeof(err)) != 0)
    {
        llm_log(LLM_LOG_ERROR, "%s", err);
        goto done;
    }
    if (llm_ctx_create(&ctx, m, kv, threads, step_tokens, err,
                       sizeof(err)) != 0)
    {
        llm_log(LLM_LOG_ERROR, "%s", err);
        goto done;
    }

    if (plan_memory(m, ctx, llm_kv_bytes(kv), expert_mb,
                    no_regroup, limit_mb, &mo) != 0)
    {
        goto done;
    }
    if (llm_model_prepare(m, &mo, err, sizeof(err)) != 0) {
        llm_log(LLM_LOG_ERROR, "%s", err);
        goto done;
    }
    expert_mb = (uint32_t) mo.expert_cache_mb;

    if (expert_mb > 0 && hp->n_expert > 0) {
        memset(&xo, 0, sizeof(xo));
        xo.cache_mb = expert_mb;
        if (llm_xcache_create(&xc, m, &xo, err, sizeof(err)) != 0) {
            llm_log(LLM_LOG_ERROR, "%s", err);
            goto done;
        }
        llm_ctx_set_expert_source(ctx, llm_xcache_source(xc));
        llm_xcache_get_stats(xc, &xs);
        llm_log(LLM_LOG_INFO, "expert cache: %u MiB, %u slots of %.2f MiB "
                "for %.1f MiB of experts (%.0f%%), reads %s", expert_mb,
                xs.n_slots, (double) xs.slot_bytes / 1048576.0,
                (double) xs.experts_bytes / 1048576.0,
                100.0 * (double) xs.n_slots * (double) xs.slot_bytes
                / (double) xs.experts_bytes,
                xs.direct ? "O_DIRECT" : "buffered (page cache)");
        if (!xs.direct && xs.buffered_why[0]) {
            llm_log(LLM_LOG_WARN, "expert cache: %s; reading through the "
                    "page cache", xs.buffered_why);
        }
    } else if (expert_mb > 0) {
        llm_log(LLM_LOG_WARN, "--expert-cache-mb %u: the model has no "
                "experts; mapping the whole file", expert_mb);
    }

    if (llm_gguf_get_str(llm_model_gguf(m), "tokenizer.chat_template", &ts,
                         err, sizeof(err)) == 0 && ts.len > 0)
    {
        if (llm_tmpl_compile(&tmpl, ts.ptr, ts.len, err, sizeof(err)) != 0) {
            llm_log(LLM_LOG_WARN, "the model's chat template does not "
                    "compile (%s); using ChatML", err);
            tmpl = NULL;
        } else {
            tfmt = llm_prompt_tool_format(ts.ptr, ts.len);
            if (rfmt < 0) {
                rfmt = llm_prompt_reasoning_format(ts.ptr, ts.len);
            }
        }
    }
    if (tmpl == NULL) {
        tsrc = "chatml (fallback)";
        if (llm_tmpl_compile(&tmpl, llm_tmpl_chatml, strlen(llm_tmpl_chatml),
                             err, sizeof(err)) != 0)
        {
            llm_log(LLM_LOG_ERROR, "ChatML template: %s", err);
            goto done;
        }
        tfmt = llm_prompt_tool_format(llm_tmpl_chatml,
                                      strlen(llm_tmpl_chatml));
    }

    if (tool_format) {
        tfmt = tool_format;
    }
    if (rfmt < 0) {
        rfmt = LLM_REASONING_NONE;      /* the ChatML fallback */
    }

    revision_of(llm_model_gguf(m), rev, sizeof(rev));
    snprintf(fp, sizeof(fp), "fp_%s", rev);

    llm_log(LLM_LOG_INFO, "model loaded in %.2f s: %s (%s, %s), %u layers, "
            "n_embd %u, %u experts (%u used), vocab %u, %.2f %s params, "
            "file %.1f MiB, revision %s, chat template %s, tool calls %s%s, "
            "reasoning %s",
            now_s() - t0, name ? name : hp->name, hp->arch_name,
            llm_model_quant_name(m), hp->n_layer, hp->n_embd, hp->n_expert,
            hp->n_expert_used, hp->n_vocab,
            (double) hp->n_params / (hp->n_params >= 1000000000 ? 1e9 : 1e6),
            hp->n_params >= 1000000000 ? "B" : "M",
            (double) llm_gguf_file_size(llm_model_gguf(m)) / 1048576.0, rev,
            tsrc, tfmt, tool_format ? " (--tool-format)" : "",
            llm_reasoning_fmt_name(rfmt));
    llm_gguf_type_mix(llm_model_gguf(m), mix, sizeof(mix));
    llm_log(LLM_LOG_INFO, "types: %s", mix);
    llm_log(LLM_LOG_INFO, "KV cache: %u blocks of %u tokens (%.1f MiB, %s), "
            "context %u, step budget %u tokens (prefill %s%u while others "
            "decode), max queue %u, kernels %s%s (this CPU's best %s)",
            n_blocks, block_tokens,
            (double) n_blocks * block_bytes / 1048576.0,
            kv_type_name(kv_type), n_ctx, step_tokens,
            prefill_timed ? "timed, at most " : "",
            prefill_tokens ? prefill_tokens : step_tokens, max_queue,
            llm_simd_name(llm_simd_level()),
            llm_simd_amx() ? " with AMX-INT8 tiles" : "",
            llm_simd_name(llm_simd_best()));
    if (swa_ring > 0) {
        llm_log(LLM_LOG_INFO, "sliding-window layers: a ring of %u blocks "
                "per sequence (%u-token window), %.1f MiB for %u sequences; "
                "no prefix reuse (--swa-full keeps their whole KV)",
                swa_ring, hp->n_swa, (double) swa_bytes / 1048576.0,
                max_batch);
    }
    if (rs_bytes > 0) {
        llm_log(LLM_LOG_INFO, "recurrent layers: %u of %u, a state of "
                "%.2f MiB per sequence whatever its length, %.1f MiB for %u "
                "sequences; no prefix reuse", hp->n_layer_rec, hp->n_layer,
                (double) llm_kv_state_bytes(m) / 1048576.0,
                (double) rs_bytes / 1048576.0, max_batch);
    }
    if (llm_simd_note() != NULL) {
        llm_log(LLM_LOG_WARN, "%s", llm_simd_note());
    }

    if (auth_file != NULL && (auth = llm_engine_secret(auth_file)) == NULL) {
        return 2;
    }

    memset(&sc, 0, sizeof(sc));
    sc.socket_path = sock;
    sc.listen = listen_on;
    sc.auth = auth;
    sc.insecure_listen = insecure_listen;
    sc.max_frame = max_frame;
    sc.wbuf_high = (size_t) wbuf_kb << 10;
    sc.drain_timeout = drain;
    sc.sched.vocab = v;
    sc.sched.n_vocab = hp->n_vocab;
    sc.sched.n_ctx = n_ctx;
    sc.sched.max_batch = max_batch;
    sc.sched.step_tokens = step_tokens;
    sc.sched.prefill_tokens = prefill_tokens;
    sc.sched.prefill_timed = prefill_timed;
    sc.sched.max_queue = max_queue;
    sc.sched.n_blocks = n_blocks;
    sc.sched.block_tokens = block_tokens;
    sc.sched.swa_ring = swa_ring;
    sc.sched.recurrent = hp->n_layer_rec > 0;
    sc.sched.reasoning = rfmt;
    ef.ctx = ctx;
    ef.gguf = llm_model_gguf(m);
    sc.sched.forward = fwd;
    sc.sched.forward_ud = &ef;
    sc.sched.model_name = name ? name : hp->name;
    sc.sched.fingerprint = fp;
    sc.vocab = v;
    sc.tmpl = tmpl;
    sc.model_name = name ? name : hp->name;
    sc.aliases = aliases;
    sc.n_aliases = n_aliases;
    sc.architecture = hp->arch_name;
    sc.quantization = llm_model_quant_name(m);
    sc.revision = rev;
    sc.n_params = hp->n_params;
    sc.file_bytes = llm_gguf_file_size(llm_model_gguf(m));
    sc.chat_template_source = tsrc;
    sc.tool_call_format = tfmt;
    sc.created = (int64_t) time(NULL);
    sc.xcache = xc;

    memset(&ec, 0, sizeof(ec));
    if (embeddings) {
        if (embed_pooling(m, pooling, &ec.pooling) != 0) {
            goto done;
        }
        ec.forward = fwd_hidden;
        ec.forward_ud = &ef;
        ec.n_embd = hp->n_embd;
        ec.n_vocab = hp->n_vocab;
        ec.n_ctx = n_ctx;
        ec.step_tokens = step_tokens;
        ec.n_blocks = n_blocks;
        ec.block_tokens = block_tokens;
        ec.max_inputs = 2048;           /* OpenAI's limits */
        ec.max_total = 300000;
        ec.truncate = embd_trunc;
        sc.embed = &ec;
        llm_log(LLM_LOG_INFO, "embeddings: %u dimensions, %s pooling%s, "
                "L2-normalized, up to %u inputs per request", ec.n_embd,
                llm_pooling_name(ec.pooling), pooling ? " (--pooling)" : "",
                ec.max_inputs);
    } else if (pooling != NULL || embd_trunc) {
        llm_log(LLM_LOG_ERROR, "--pooling and --embd-truncate need "
                "--embeddings");
        goto done;
    }

    if (llm_server_create(&srv, &sc, err, sizeof(err)) != 0) {
        llm_log(LLM_LOG_ERROR, "%s", err);
        goto done;
    }
    llm_log(LLM_LOG_INFO, "listening on %s%s%s", sock ? sock : "",
            sock && listen_on ? " and " : "", listen_on ? listen_on : "");
    rc = llm_server_run(srv) == 0 ? 0 : 1;
    if (ef.changed) {
        rc = LLM_EXIT_MODEL_CHANGED;
    }
    if (xc != NULL) {
        llm_server_log_expert_stats(srv);
    }

done:
    llm_server_free(srv);
    llm_tmpl_free(tmpl);
    llm_ctx_free(ctx);
    llm_xcache_free(xc);
    llm_kv_free(kv);
    llm_vocab_free(v);
    llm_model_free(m);
    free(auth);
    return rc;
}
