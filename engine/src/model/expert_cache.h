/*
 * The expert cache: experts streamed from the model file with io_uring
 * into a fixed pool of RAM slots, for models bigger than the memory they
 * may use (docs/STREAMING.md).
 *
 * A slot holds one (layer, expert): the 4 KiB-aligned windows of the file
 * around its gate, up and down slices, read with O_DIRECT (buffered when
 * the filesystem refuses it) and handed to the forward pass as pointers
 * inside those windows, so the I/O lands where the kernels read (no second
 * copy).  Lookup is a table indexed by layer * n_expert + expert; eviction
 * is CLOCK; a slot acquired for the current layer is pinned until release.
 *
 * It implements llm_expert_source_t: every callback runs on the thread
 * calling llm_forward (no locks); the kernel does the reads, completions
 * are reaped without waiting whenever the cache is called, and acquire()
 * waits only for the reads of its own layer still in flight (the stall).
 */

#ifndef LLM_EXPERT_CACHE_H
#define LLM_EXPERT_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "model.h"

typedef struct llm_xcache_s llm_xcache_t;

typedef struct {
    uint64_t     cache_mb;      /* RAM for slots */
    const char  *path;          /* file to read; NULL: the model's own */
    uint32_t     queue_depth;   /* io_uring entries; 0: 128 (minimum 32) */
    int          no_direct;     /* 1: buffered reads even if O_DIRECT works */
    uint32_t     max_slots;     /* nonzero: at most this many (tests) */
} llm_xcache_opts_t;

typedef struct {
    uint32_t     n_slots;
    uint64_t     slot_bytes;
    uint64_t     experts_bytes; /* all experts' slices in the file */
    int          direct;        /* reads are O_DIRECT */
    const char  *buffered_why;  /* when not: O_DIRECT's refusal ("" if
                                   opts.no_direct asked for it) */
    uint64_t     hits;          /* acquired and already resident */
    uint64_t     misses;        /* acquired and not resident or in flight */
    uint64_t     prefetch_hits; /* acquired while a prefetch read it */
    uint64_t     bytes_read;
    uint64_t     reads;         /* read operations completed */
    uint64_t     retries;       /* short or failed reads resubmitted */
    uint64_t     io_busy_ns;    /* time with at least one read in flight */
    uint64_t     stall_ns;      /* time acquire() waited for reads */
    uint64_t     acquires;
    uint64_t     prefetch_guessed;  /* experts named by prefetch hints */
    uint64_t     prefetch_right;    /* of those, used by the next acquire */
    uint64_t     prefetch_issued;   /* experts read because of a hint */
    uint64_t     prefetch_useful;   /* of those, used before eviction */
    uint64_t     regroups;      /* slots regrouped for the faster kernels */
} llm_xcache_stats_t;

/*
 * Create a cache for m and set it as the ctx's expert source (ctx may be
 * NULL: llm_xcache_source() gives the source to set).  Fails with err set
 * when the model has no experts, the budget holds fewer slots than
 * n_expert_used (the message names the minimum), the file cannot be
 * opened or io_uring cannot be set up.  madvise()s the experts' ranges of
 * the mapping away (MADV_DONTNEED, MADV_RANDOM) so they stay out of RSS.
 */
int llm_xcache_create(llm_xcache_t **out, const llm_model_t *m,
    const llm_xcache_opts_t *opts, char *err, size_t errlen);
void llm_xcache_free(llm_xcache_t *xc);
const llm_expert_source_t *llm_xcache_source(llm_xcache_t *xc);
void llm_xcache_get_stats(const llm_xcache_t *xc, llm_xcache_stats_t *st);
/* Slot bytes for m (the budget per slot) and all experts' bytes. */
int llm_xcache_sizes(const llm_model_t *m, uint64_t *slot_bytes,
    uint64_t *experts_bytes);

#endif /* LLM_EXPERT_CACHE_H */
