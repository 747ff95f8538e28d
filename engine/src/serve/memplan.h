/*
 * The memory plan: how much memory this process may use (the cgroup's
 * limit, v2 or v1, and the machine's), and how to hold a model within it
 * (docs/STREAMING.md "Choosing at start").
 *
 * Anonymous memory cannot be reclaimed without swap: a process whose
 * anonymous copies (weights regrouped at load, KV cache, buffers, expert
 * cache) exceed its cgroup's limit is OOM-killed, however the file's own
 * pages are counted.  So the plan counts every anonymous copy and picks,
 * before anything big is written:
 *
 *   resident             the file and its regrouped copy fit: map it all,
 *                        regroup (the fastest kernels)
 *   streamed             a MoE model that does not fit: experts read from
 *                        disk into a cache sized to what is left
 *   resident, no regroup nothing else fits: map the file without
 *                        regrouping, so its pages stay reclaimable page
 *                        cache (slow when it thrashes, never an OOM kill)
 */

#ifndef LLM_MEMPLAN_H
#define LLM_MEMPLAN_H

#include <stddef.h>
#include <stdint.h>

/* Where the numbers come from: the real /proc files, or a test's. */
typedef struct {
    const char  *mountinfo;     /* NULL: /proc/self/mountinfo */
    const char  *cgroup;        /* NULL: /proc/self/cgroup */
    const char  *meminfo;       /* NULL: /proc/meminfo */
} llm_mem_src_t;

typedef struct {
    uint64_t     cgroup_limit;  /* smallest limit up the tree; 0: none */
    char         cgroup_kind[4];    /* "v2", "v1" or "" (none found) */
    char         cgroup_dir[2048];  /* the directory whose limit counts */
    uint64_t     mem_total;     /* MemTotal; 0: unknown */
    uint64_t     mem_available; /* MemAvailable; 0: unknown */
    uint64_t     allowed;       /* the smallest known of the three */
} llm_mem_limits_t;

/*
 * Fill lim from src (NULL: the real files).  The cgroup is the process's
 * own (from its cgroup file, matched against the mounts in mountinfo:
 * v1's memory controller, else v2), and its limit the smallest of
 * memory.limit_in_bytes (v1) or memory.max (v2) from it up to the mount's
 * root ("max" and v1's near-2^63 "unlimited" count as none).  Missing
 * files are not errors: what cannot be read stays 0.
 */
void llm_mem_detect(llm_mem_limits_t *lim, const llm_mem_src_t *src);

typedef enum {
    LLM_MEM_RESIDENT = 0,       /* map the file, regroup */
    LLM_MEM_STREAMED,           /* experts from disk into a cache */
    LLM_MEM_NO_REGROUP          /* map the file, no anonymous copy */
} llm_mem_mode_t;

/* What the model and the engine's settings need, in bytes. */
typedef struct {
    uint64_t     file_bytes;    /* the model file (its mapping) */
    uint64_t     experts_bytes; /* experts' slices in it; 0: dense */
    uint64_t     slot_bytes;    /* one expert cache slot */
    uint32_t     n_expert;      /* per layer; 0: dense */
    uint32_t     n_expert_used;
    uint32_t     n_layer;
    uint64_t     regroup_bytes; /* anonymous copy when resident */
    uint64_t     regroup_rest_bytes; /* the same without the experts */
    uint64_t     kv_bytes;      /* the KV cache, all blocks */
    uint64_t     buffer_bytes;  /* the forward pass's buffers */
    uint64_t     other_bytes;   /* vocabulary, server, libc: a margin */
} llm_mem_need_t;

typedef struct {
    llm_mem_mode_t  mode;
    uint64_t        budget;     /* 9/10 of allowed */
    uint64_t        cache_mb;   /* streamed: the expert cache */
    uint64_t        anon_bytes; /* anonymous memory the plan writes */
    uint64_t        total_bytes; /* that plus the file pages it keeps */
} llm_mem_plan_t;

/*
 * Choose how to hold the model in `allowed` bytes (0: unknown, resident):
 * resident when file + KV + buffers + margin fit 9/10 of it; else, for a
 * MoE model, streamed when what is left after the rest of the file holds
 * at least one layer's experts (n_expert slots), capped at all experts;
 * else resident without regrouping when KV + buffers + margin fit.
 * Returns 0, or -ENOMEM with err saying what does not fit and what to
 * lower when not even the anonymous memory without weights fits.
 */
int llm_mem_plan(const llm_mem_need_t *need, uint64_t allowed,
    llm_mem_plan_t *plan, char *err, size_t errlen);

const char *llm_mem_mode_name(llm_mem_mode_t mode);

#endif /* LLM_MEMPLAN_H */
