/*
 * llm-bench: prefill (pp) and decode (tg) throughput of a model, like
 * llama-bench.  pp: one batch of -p random tokens at positions 0..p-1.
 * tg: -n decode steps with the KV cache, from an empty cache: one token of
 * one sequence per step, or with -b B one token of each of B sequences
 * per step (the batched decode step of a server with B streams).  Each repeated -r times after one warm-up run; prints
 * mean +- stddev in a table with the settings, or JSON.
 */

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "model/expert_cache.h"
#include "model/model.h"

typedef struct {
    llm_ctx_t      *c;
    const llm_hparams_t *hp;
    uint32_t       *blocks;
    uint32_t        n_blocks;       /* per sequence */
    uint32_t        n_seqs;         /* decode batch (-b) */
    llm_seq_view_t *sv;
    int32_t        *tok, *pos, *seq;
    uint8_t        *want;
    float          *logits;
    uint64_t        rng;
    double         *step_ms;        /* [reps * n_gen] decode step times */
    uint32_t        n_steps;
    uint32_t        depth;          /* positions in the cache before */
    int32_t        *ftok;           /* --tokens: decode inputs, cycled */
    uint32_t        n_ftok, i_ftok;
    int             in_tg;          /* run_tg's steps (step_tok) */
} bench_t;

static void
usage(FILE *f)
{
    fprintf(f,
        "usage: llm-bench -m FILE [-t THREADS] [-p N_PROMPT] [-n N_GEN]\n"
        "                 [-r REPS] [-b BATCH] [-d DEPTH] [--kv-type f32|f16|q8_0|q4_0]\n"
        "                 [--no-prefault]\n"
        "                 [--json] [--expert-cache-mb M] [--no-regroup]\n"
        "                 [--tokens FILE]\n"
        "  -t  threads (default 2)        -p  prompt tokens (default 512)\n"
        "  -n  decode steps (128)         -r  repetitions (default 3)\n"
        "  -b  sequences decoded together, one token each per step (1)\n"
        "  -d  context depth: DEPTH tokens are in the cache (filled once,\n"
        "      not timed) before the timed prefill and decode (-b 1 only),\n"
        "      as llama-bench's -d\n"
        "  --no-prefault  let weight pages fault in on first use\n"
        "  --no-regroup   keep the weights in the file's layout (no\n"
        "                 anonymous copy: pure mmap, as llama.cpp runs)\n"
        "  --expert-cache-mb M  stream experts from disk into M MiB of RAM\n"
        "                 (docs/STREAMING.md); adds the cache's counters\n"
        "  --tokens FILE  decode these token ids (decimal, any separator;\n"
        "                 cycled) instead of random ones: a served\n"
        "                 stream's tokens replayed (which experts a token\n"
        "                 routes to sets a step's memory traffic)\n"
        "Prefill: one batch of -p tokens.  Decode: -n steps with the KV\n"
        "cache, each one token of each of -b sequences; tg t/s counts all\n"
        "the batch's tokens.  Reports tokens/s, mean +- stddev.\n"
        "JSON fields: pp_tps, pp_tps_std, tg_tps, tg_tps_std, threads,\n"
        "batch, model_bytes, peak_rss_bytes, kv_bytes, n_prompt, depth, n_gen,\n"
        "reps,\n"
        "active_bytes_per_token (weights one decode step reads), and\n"
        "pp_tps_cpu, tg_tps_cpu: tokens per CPU-second of each thread, a\n"
        "figure less hurt by a shared, oversubscribed machine; tg_p50_ms,\n"
        "tg_p95_ms: decode step latency percentiles, tg_mean_ms its mean;\n"
        "rss_bytes: RSS at\n"
        "the end; with --expert-cache-mb: expert_cache_mb, xc_slots,\n"
        "xc_hits, xc_misses, xc_bytes_read, xc_miss_bytes_per_token,\n"
        "xc_read_mbps, xc_stall_ms_per_token, xc_prefetch_accuracy,\n"
        "xc_prefetch_issued, xc_prefetch_useful, xc_direct (over the timed\n"
        "runs only), xc_slot_bytes, xc_experts_bytes.\n");
}

static double
now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int32_t
rnd_tok(bench_t *B)
{
    B->rng ^= B->rng << 13;
    B->rng ^= B->rng >> 7;
    B->rng ^= B->rng << 17;
    return (int32_t) (B->rng % B->hp->n_vocab);
}

/* A decode step's input: the next of --tokens, or a random one. */
static int32_t
step_tok(bench_t *B)
{
    if (B->n_ftok > 0) {
        return B->ftok[B->i_ftok++ % B->n_ftok];
    }
    return rnd_tok(B);
}

/* --tokens FILE: decimal ids, anything else separates them. */
static int
read_tokens(bench_t *B, const char *path, uint32_t n_vocab, char *err,
    size_t errlen)
{
    FILE     *f = fopen(path, "r");
    int       ch;
    uint64_t  v = 0;
    int       in = 0;
    uint32_t  cap = 0;
    int32_t  *nt;

    if (f == NULL) {
        snprintf(err, errlen, "--tokens %s: %s", path, strerror(errno));
        return -1;
    }
    for (;;) {
        ch = fgetc(f);
        if (ch >= '0' && ch <= '9') {
            v = v < UINT32_MAX ? v * 10 + (uint64_t) (ch - '0') : v;
            in = 1;
            continue;
        }
        if (in) {
            if (v >= n_vocab) {
                snprintf(err, errlen, "--tokens %s: token id %llu (number "
                         "%u in the file) is past the vocabulary (%u)", path,
                         (unsigned long long) v, B->n_ftok + 1, n_vocab);
                fclose(f);
                return -1;
            }
            if (B->n_ftok == cap) {
                cap = cap ? 2 * cap : 256;
                nt = realloc(B->ftok, cap * sizeof(int32_t));
                if (nt == NULL) {
                    snprintf(err, errlen, "--tokens %s: out of memory", path);
                    fclose(f);
                    return -1;
                }
                B->ftok = nt;
            }
            B->ftok[B->n_ftok++] = (int32_t) v;
            v = 0;
            in = 0;
        }
        if (ch == EOF) {
            break;
        }
    }
    fclose(f);
    if (B->n_ftok == 0) {
        snprintf(err, errlen, "--tokens %s: no token ids in it", path);
        return -1;
    }
    return 0;
}

static int
run_batch(bench_t *B, uint32_t n, uint32_t pos0, char *err, size_t errlen)
{
    llm_seq_view_t  sv = { B->blocks, B->n_blocks, NULL, 0, 0 };
    llm_batch_t     b;
    uint32_t        i;

    for (i = 0; i < n; i++) {
        B->tok[i] = B->in_tg ? step_tok(B) : rnd_tok(B);
        B->pos[i] = (int32_t) (pos0 + i);
        B->seq[i] = 0;
        B->want[i] = i == n - 1;
    }
    b.n_tokens = n;
    b.tokens = B->tok;
    b.pos = B->pos;
    b.seq = B->seq;
    b.logits = B->want;
    b.n_seqs = 1;
    b.seqs = &sv;
    return llm_forward(B->c, &b, B->logits, err, errlen);
}

/* One decode step: the token at position pos of each of the n_seqs
 * sequences, every one wanting logits. */
static int
run_step(bench_t *B, uint32_t pos, char *err, size_t errlen)
{
    llm_batch_t  b;
    uint32_t     s;

    for (s = 0; s < B->n_seqs; s++) {
        B->tok[s] = step_tok(B);
        B->pos[s] = (int32_t) pos;
        B->seq[s] = (int32_t) s;
        B->want[s] = 1;
    }
    b.n_tokens = B->n_seqs;
    b.tokens = B->tok;
    b.pos = B->pos;
    b.seq = B->seq;
    b.logits = B->want;
    b.n_seqs = B->n_seqs;
    b.seqs = B->sv;
    return llm_forward(B->c, &b, B->logits, err, errlen);
}

static int
run_tg(bench_t *B, uint32_t n, char *err, size_t errlen)
{
    uint32_t  i;
    double    t;
    int       rc;

    B->i_ftok = 0;      /* each run replays --tokens from its start */
    B->in_tg = 1;
    for (i = 0; i < n; i++) {
        t = now_s();
        rc = B->n_seqs == 1 ? run_batch(B, 1, B->depth + i, err, errlen)
                            : run_step(B, i, err, errlen);
        if (rc < 0) {
            B->in_tg = 0;
            return rc;
        }
        if (B->step_ms != NULL) {
            B->step_ms[B->n_steps++] = (now_s() - t) * 1e3;
        }
    }
    B->in_tg = 0;
    return 0;
}

static long
minflt(void)
{
    struct rusage  ru;

    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_minflt + ru.ru_majflt;
}

static double
cpu_s(void)
{
    struct rusage  ru;

    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6
           + ru.ru_stime.tv_sec + ru.ru_stime.tv_usec * 1e-6;
}

/* An old per-expert tensor: blk.N.ffn_{gate,up,down}.E.weight. */
static int
per_expert(const char *name)
{
    const char  *p = strstr(name, ".ffn_");

    if (p == NULL || strncmp(name, "blk.", 4) != 0) {
        return 0;
    }
    p += 5;
    p += strncmp(p, "gate.", 5) == 0 ? 5 : strncmp(p, "down.", 5) == 0 ? 5
         : strncmp(p, "up.", 3) == 0 ? 3 : 0;
    return p[-1] == '.' && *p >= '0' && *p <= '9';
}

/*
 * Weight bytes one decode step reads: every tensor once, except expert
 * tensors (n_used of n_expert), the embedding table (one row) and the
 * blocks the forward pass does not run (NextN / MTP).
 */
static uint64_t
active_bytes(const llm_model_t *m)
{
    const llm_gguf_t         *g = llm_model_gguf(m);
    const llm_hparams_t      *hp = llm_model_hparams(m);
    const llm_gguf_tensor_t  *t;
    uint64_t                  i, sum = 0;
    unsigned long             blk;

    for (i = 0; i < llm_gguf_n_tensors(g); i++) {
        t = llm_gguf_tensor_at(g, i);
        if (sscanf(t->name, "blk.%lu.", &blk) == 1 && blk >= hp->n_layer) {
            continue;
        }
        if (strstr(t->name, "_exps.") != NULL && hp->n_expert > 0) {
            sum += t->nbytes / hp->n_expert * hp->n_expert_used;
        } else if (hp->n_expert > 0 && per_expert(t->name)) {
            sum += t->nbytes * hp->n_expert_used / hp->n_expert;
        } else if (strcmp(t->name, "token_embd.weight") == 0) {
            sum += t->nbytes / hp->n_vocab;
        } else {
            sum += t->nbytes;
        }
    }
    return sum;
}

static int
cmp_double(const void *a, const void *b)
{
    double  x = *(const double *) a, y = *(const double *) b;

    return x < y ? -1 : x > y;
}

static uint64_t
rss_now(void)
{
    FILE                *f = fopen("/proc/self/statm", "r");
    unsigned long long   size = 0, res = 0;

    if (f != NULL) {
        if (fscanf(f, "%llu %llu", &size, &res) != 2) {
            res = 0;
        }
        fclose(f);
    }
    return (uint64_t) res * 4096;
}

static void
stats(const double *v, int n, double *mean, double *sd)
{
    double  s = 0, q = 0;
    int     i;

    for (i = 0; i < n; i++) {
        s += v[i];
    }
    *mean = s / n;
    for (i = 0; i < n; i++) {
        q += (v[i] - *mean) * (v[i] - *mean);
    }
    *sd = n > 1 ? sqrt(q / (n - 1)) : 0.0;
}


/* The kernels' level, "+amx" when the regrouped gemms run on AMX tiles. */
static const char *
simd_label(void)
{
    static char  buf[32];

    snprintf(buf, sizeof(buf), "%s%s", llm_simd_name(llm_simd_level()),
             llm_simd_amx() ? "+amx" : "");
    return buf;
}

int
main(int argc, char **argv)
{
    static const struct option opts[] = {
        { "model", required_argument, NULL, 'm' },
        { "threads", required_argument, NULL, 't' },
        { "n-prompt", required_argument, NULL, 'p' },
        { "n-gen", required_argument, NULL, 'n' },
        { "repetitions", required_argument, NULL, 'r' },
        { "batch", required_argument, NULL, 'b' },
        { "depth", required_argument, NULL, 'd' },
        { "kv-type", required_argument, NULL, 'k' },
        { "json", no_argument, NULL, 'J' },
        { "no-prefault", no_argument, NULL, 'F' },
        { "no-regroup", no_argument, NULL, 'G' },
        { "expert-cache-mb", required_argument, NULL, 'X' },
        { "tokens", required_argument, NULL, 'T' },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 }
    };
    const char      *model = NULL, *tokens = NULL;
    int              threads = 2, np = 512, ng = 128, reps = 3, json = 0;
    int              nb = 1, depth = 0;
    int              ch, i, rc = 1;
    llm_type_t       kvt = LLM_TYPE_F32;
    llm_model_t     *m = NULL;
    llm_kv_t        *kv = NULL;
    llm_model_opts_t mopts;
    bench_t          B;
    double           t0, *pp = NULL, *tg = NULL, ppm = 0, pps = 0, tgm = 0;
    double           tgs = 0, c0, *ppc = NULL, *tgc = NULL, ppcm = 0;
    double           tgcm = 0, sdc;
    long             flt0, faults = 0;
    uint64_t         model_bytes;
    size_t           kv_bytes;
    struct rusage    ru;
    char             err[512];
    uint32_t         bt = 16, maxb, j, rows;
    uint64_t         xmb = 0, ntg;
    llm_xcache_t    *xc = NULL;
    llm_xcache_opts_t xo;
    llm_xcache_stats_t xs0, xs1;
    double           p50 = 0, p95 = 0, mean = 0, busy, stall, acc;

    memset(&B, 0, sizeof(B));
    memset(&mopts, 0, sizeof(mopts));
    while ((ch = getopt_long(argc, argv, "m:t:p:n:r:b:d:h", opts, NULL)) != -1) {
        switch (ch) {
        case 'm': model = optarg; break;
        case 't': threads = atoi(optarg); break;
        case 'p': np = atoi(optarg); break;
        case 'n': ng = atoi(optarg); break;
        case 'r': reps = atoi(optarg); break;
        case 'b': nb = atoi(optarg); break;
        case 'd': depth = atoi(optarg); break;
        case 'J': json = 1; break;
        case 'F': mopts.no_prefault = 1; break;
        case 'G': mopts.no_regroup = 1; break;
        case 'X': xmb = strtoull(optarg, NULL, 10); break;
        case 'T': tokens = optarg; break;
        case 'k':
            if (strcmp(optarg, "f16") == 0) {
                kvt = LLM_TYPE_F16;
            } else if (strcmp(optarg, "q8_0") == 0) {
                kvt = LLM_TYPE_Q8_0;
            } else if (strcmp(optarg, "q4_0") == 0) {
                kvt = LLM_TYPE_Q4_0;
            } else if (strcmp(optarg, "f32") != 0) {
                fprintf(stderr, "llm-bench: --kv-type is f32, f16, q8_0 or "
                        "q4_0\n");
                return 2;
            }
            break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (model == NULL || threads < 1 || np < 0 || ng < 0 || reps < 1
        || nb < 1 || nb > 4096 || (np == 0 && ng == 0) || depth < 0
        || (depth > 0 && nb > 1))
    {
        usage(stderr);
        return 2;
    }

    mopts.expert_cache_mb = xmb;
    if (llm_simd_note() != NULL) {
        fprintf(stderr, "llm-bench: %s\n", llm_simd_note());
    }
    if (llm_model_load(&m, model, &mopts, err, sizeof(err)) < 0) {
        fprintf(stderr, "llm-bench: %s\n", err);
        return 1;
    }
    B.hp = llm_model_hparams(m);
    if (tokens != NULL
        && read_tokens(&B, tokens, B.hp->n_vocab, err, sizeof(err)) < 0)
    {
        fprintf(stderr, "llm-bench: %s\n", err);
        goto done;
    }
    model_bytes = llm_gguf_file_size(llm_model_gguf(m));
    maxb = ((uint32_t) depth + (uint32_t) (np > ng ? np : ng) + 1 + bt - 1)
           / bt;
    rows = (uint32_t) (np > nb ? np : nb);
    rows = depth > 0 && rows < 512 ? 512 : rows;
    B.depth = (uint32_t) depth;
    B.n_seqs = (uint32_t) nb;
    if (llm_kv_create(&kv, m, maxb * B.n_seqs, bt, kvt, err, sizeof(err)) < 0
        || llm_ctx_create(&B.c, m, kv, (uint32_t) threads, rows, err,
                          sizeof(err)) < 0)
    {
        fprintf(stderr, "llm-bench: %s\n", err);
        goto done;
    }
    if (xmb > 0) {
        memset(&xo, 0, sizeof(xo));
        xo.cache_mb = xmb;
        if (llm_xcache_create(&xc, m, &xo, err, sizeof(err)) < 0) {
            fprintf(stderr, "llm-bench: %s\n", err);
            goto done;
        }
        llm_ctx_set_expert_source(B.c, llm_xcache_source(xc));
    }
    kv_bytes = llm_kv_block_bytes(m, bt, kvt) * maxb * B.n_seqs;
    B.n_blocks = maxb;
    B.blocks = malloc(maxb * B.n_seqs * sizeof(uint32_t));
    B.sv = malloc(B.n_seqs * sizeof(llm_seq_view_t));
    B.tok = malloc((rows + 1) * sizeof(int32_t));
    B.pos = malloc((rows + 1) * sizeof(int32_t));
    B.seq = malloc((rows + 1) * sizeof(int32_t));
    B.want = malloc(rows + 1);
    B.logits = malloc((size_t) B.n_seqs * B.hp->n_vocab * sizeof(float));
    pp = calloc(reps, sizeof(double));
    tg = calloc(reps, sizeof(double));
    ppc = calloc(reps, sizeof(double));
    tgc = calloc(reps, sizeof(double));
    B.step_ms = calloc((size_t) reps * (ng > 0 ? ng : 1), sizeof(double));
    if (!B.step_ms || !B.blocks || !B.sv || !B.tok || !B.pos || !B.seq
        || !B.want || !B.logits
        || !pp || !tg || !ppc || !tgc)
    {
        fprintf(stderr, "llm-bench: out of memory\n");
        goto done;
    }
    for (j = 0; j < maxb * B.n_seqs; j++) {
        B.blocks[j] = j;
    }
    for (j = 0; j < B.n_seqs; j++) {
        B.sv[j].blocks = B.blocks + (size_t) j * maxb;
        B.sv[j].n_blocks = maxb;
        B.sv[j].state = j;
    }
    B.rng = 0x9e3779b97f4a7c15ull;

    /* the context (not timed), in batches of up to `rows` */
    for (j = 0; j < (uint32_t) depth; j += rows) {
        if (run_batch(&B, (uint32_t) depth - j < rows ? (uint32_t) depth - j
                                                      : rows, j, err,
                      sizeof(err)) < 0)
        {
            fprintf(stderr, "llm-bench: %s\n", err);
            goto done;
        }
    }

    /* warm-up: fault the weights in, size the buffers (not timed) */
    B.n_steps = 0;
    if ((np > 0 && run_batch(&B, (uint32_t) np, B.depth, err,
                             sizeof(err)) < 0)
        || (ng > 0 && run_tg(&B, ng < 4 ? (uint32_t) ng : 4, err,
                             sizeof(err)) < 0))
    {
        fprintf(stderr, "llm-bench: %s\n", err);
        goto done;
    }

    B.n_steps = 0;
    memset(&xs0, 0, sizeof(xs0));
    if (xc != NULL) {
        llm_xcache_get_stats(xc, &xs0);
    }
    flt0 = minflt();
    for (i = 0; i < reps; i++) {
        if (np > 0) {
            t0 = now_s();
            c0 = cpu_s();
            if (run_batch(&B, (uint32_t) np, B.depth, err, sizeof(err))
                < 0)
            {
                fprintf(stderr, "llm-bench: %s\n", err);
                goto done;
            }
            pp[i] = np / (now_s() - t0);
            ppc[i] = np / ((cpu_s() - c0) / threads);
        }
        if (ng > 0) {
            t0 = now_s();
            c0 = cpu_s();
            if (run_tg(&B, (uint32_t) ng, err, sizeof(err)) < 0) {
                fprintf(stderr, "llm-bench: %s\n", err);
                goto done;
            }
            tg[i] = (double) ng * nb / (now_s() - t0);
            tgc[i] = (double) ng * nb / ((cpu_s() - c0) / threads);
        }
    }
    faults = minflt() - flt0;
    if (np > 0) {
        stats(pp, reps, &ppm, &pps);
        stats(ppc, reps, &ppcm, &sdc);
    }
    if (ng > 0) {
        stats(tg, reps, &tgm, &tgs);
        stats(tgc, reps, &tgcm, &sdc);
    }
    getrusage(RUSAGE_SELF, &ru);
    if (B.n_steps > 0) {
        qsort(B.step_ms, B.n_steps, sizeof(double), cmp_double);
        for (size_t k = 0; k < B.n_steps; k++) {
            mean += B.step_ms[k];
        }
        mean /= (double) B.n_steps;
        p50 = B.step_ms[(B.n_steps - 1) / 2];
        p95 = B.step_ms[(size_t) ((B.n_steps - 1) * 0.95 + 0.5)];
    }
    memset(&xs1, 0, sizeof(xs1));
    if (xc != NULL) {
        llm_xcache_get_stats(xc, &xs1);
    }
    ntg = (uint64_t) reps * (uint64_t) ng * (uint64_t) nb
          + (uint64_t) reps * np;
    ntg = ntg ? ntg : 1;
    busy = (double) (xs1.io_busy_ns - xs0.io_busy_ns);
    stall = (double) (xs1.stall_ns - xs0.stall_ns);
    acc = xs1.prefetch_guessed > xs0.prefetch_guessed
          ? (double) (xs1.prefetch_right - xs0.prefetch_right)
            / (double) (xs1.prefetch_guessed - xs0.prefetch_guessed) : 0.0;

    if (json) {
        printf("{\"model\": \"%s\", \"arch\": \"%s\", \"quant\": \"%s\", "
               "\"simd\": \"%s\", \"threads\": %d, \"batch\": %d, "
               "\"n_prompt\": %d, \"depth\": %d, "
               "\"n_gen\": %d, \"reps\": %d, \"pp_tps\": %.3f, "
               "\"pp_tps_std\": %.3f, \"tg_tps\": %.3f, \"tg_tps_std\": "
               "%.3f, \"pp_tps_cpu\": %.3f, \"tg_tps_cpu\": %.3f, "
               "\"model_bytes\": %llu, \"active_bytes_per_token\": %llu, "
               "\"kv_type\": \"%s\", \"kv_bytes\": %zu, "
               "\"peak_rss_bytes\": %llu, "
               "\"page_faults\": %ld, \"tg_p50_ms\": %.3f, "
               "\"tg_p95_ms\": %.3f, \"tg_mean_ms\": %.3f, "
               "\"rss_bytes\": %llu, "
               "\"expert_cache_mb\": %llu, \"xc_slots\": %u, "
               "\"xc_hits\": %llu, \"xc_misses\": %llu, "
               "\"xc_bytes_read\": %llu, \"xc_miss_bytes_per_token\": %.0f, "
               "\"xc_read_mbps\": %.1f, \"xc_stall_ms_per_token\": %.3f, "
               "\"xc_prefetch_accuracy\": %.4f, \"xc_prefetch_issued\": "
               "%llu, \"xc_prefetch_useful\": %llu, \"xc_direct\": %d, "
               "\"xc_slot_bytes\": %llu, \"xc_experts_bytes\": %llu}\n",
               model,
               B.hp->arch_name, llm_model_quant_name(m),
               simd_label(), threads, nb, np, depth, ng,
               reps,
               ppm,
               pps, tgm, tgs, ppcm, tgcm, (unsigned long long) model_bytes,
               (unsigned long long) active_bytes(m), llm_type_name(kvt),
               kv_bytes,
               (unsigned long long) ru.ru_maxrss * 1024ull, faults, p50,
               p95, mean, (unsigned long long) rss_now(),
               (unsigned long long) xmb,
               xs1.n_slots,
               (unsigned long long) (xs1.hits + xs1.prefetch_hits
                                     - xs0.hits - xs0.prefetch_hits),
               (unsigned long long) (xs1.misses - xs0.misses),
               (unsigned long long) (xs1.bytes_read - xs0.bytes_read),
               (double) (xs1.bytes_read - xs0.bytes_read) / (double) ntg,
               busy > 0 ? (double) (xs1.bytes_read - xs0.bytes_read) / busy
                          * 1e3 : 0.0,
               stall / 1e6 / (double) ntg, acc,
               (unsigned long long) (xs1.prefetch_issued
                                     - xs0.prefetch_issued),
               (unsigned long long) (xs1.prefetch_useful
                                     - xs0.prefetch_useful),
               xs1.direct, (unsigned long long) xs1.slot_bytes,
               (unsigned long long) xs1.experts_bytes);
    } else {
        printf("| model | size | params | simd | threads | test | t/s |\n");
        printf("| --- | ---: | ---: | --- | ---: | --- | ---: |\n");
        if (np > 0) {
            printf("| %s %s | %.2f GiB | %.2f B | %s | %d | pp%d | "
                   "%.2f ± %.2f |\n", B.hp->arch_name,
                   llm_model_quant_name(m), model_bytes / 1073741824.0,
                   B.hp->n_params / 1e9, simd_label(),
                   threads, np, ppm, pps);
        }
        if (ng > 0 && nb == 1) {
            printf("| %s %s | %.2f GiB | %.2f B | %s | %d | tg%d | "
                   "%.2f ± %.2f |\n", B.hp->arch_name,
                   llm_model_quant_name(m), model_bytes / 1073741824.0,
                   B.hp->n_params / 1e9, simd_label(),
                   threads, ng, tgm, tgs);
        } else if (ng > 0) {
            printf("| %s %s | %.2f GiB | %.2f B | %s | %d | tg%d x b%d | "
                   "%.2f ± %.2f |\n", B.hp->arch_name,
                   llm_model_quant_name(m), model_bytes / 1073741824.0,
                   B.hp->n_params / 1e9, simd_label(),
                   threads, ng, nb, tgm, tgs);
        }
        if (depth > 0) {
            printf("\nat depth %d: %d tokens in the cache before each "
                   "prefill and decode", depth, depth);
        }
        printf("\nreps %d, KV %s %.1f MiB, peak RSS %.2f GiB (file %.2f "
               "GiB), %.1f MB of weights per decode step\n", reps,
               llm_type_name(kvt), kv_bytes / 1048576.0,
               ru.ru_maxrss / 1048576.0, model_bytes / 1073741824.0,
               active_bytes(m) / 1e6);
        printf("page faults in the timed runs: %ld\n", faults);
        if (ng > 0) {
            /* the mean too: a served stream's rate is its mean step */
            printf("decode step latency: p50 %.2f ms, p95 %.2f ms, mean "
                   "%.2f ms\n", p50, p95, mean);
        }
        if (xc != NULL) {
            printf("expert cache %llu MiB (%u slots of %.2f MiB, %s): "
                   "%llu hits (%llu of them still in flight from a "
                   "prefetch), %llu misses, %.1f MB read per token at "
                   "%.0f MB/s, stalled %.2f ms per token, prefetch "
                   "accuracy %.1f%% (%llu read, %llu used)\n",
                   (unsigned long long) xmb, xs1.n_slots,
                   xs1.slot_bytes / 1048576.0,
                   xs1.direct ? "O_DIRECT" : "buffered",
                   (unsigned long long) (xs1.hits + xs1.prefetch_hits
                                         - xs0.hits - xs0.prefetch_hits),
                   (unsigned long long) (xs1.prefetch_hits
                                         - xs0.prefetch_hits),
                   (unsigned long long) (xs1.misses - xs0.misses),
                   (double) (xs1.bytes_read - xs0.bytes_read) / 1e6
                   / (double) ntg,
                   busy > 0 ? (double) (xs1.bytes_read - xs0.bytes_read)
                              / busy * 1e3 : 0.0,
                   stall / 1e6 / (double) ntg, acc * 100.0,
                   (unsigned long long) (xs1.prefetch_issued
                                         - xs0.prefetch_issued),
                   (unsigned long long) (xs1.prefetch_useful
                                         - xs0.prefetch_useful));
        }
        printf("per CPU-second of each thread (what an idle machine would "
               "give): pp %.2f t/s, tg %.2f t/s\n", ppcm, tgcm);
    }
    rc = 0;

done:
    llm_ctx_free(B.c);
    llm_xcache_free(xc);
    llm_kv_free(kv);
    llm_model_free(m);
    free(B.blocks);
    free(B.sv);
    free(B.tok);
    free(B.pos);
    free(B.seq);
    free(B.want);
    free(B.logits);
    free(B.ftok);
    free(pp);
    free(tg);
    free(ppc);
    free(tgc);
    free(B.step_ms);
    return rc;
}
