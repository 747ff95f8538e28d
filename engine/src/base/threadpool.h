/*
 * A persistent thread pool for the forward pass.
 *
 * n_threads - 1 worker threads are created once; the calling thread is
 * worker 0.  llm_pool_for() publishes a phase of n items by bumping a
 * generation counter; every thread claims items from an atomic counter and
 * runs fn(arg, item, ith) on each; the call returns when all n items are
 * done: one call is one phase, its return is the phase's barrier.
 *
 * The barrier waits for items, not for threads: a worker that the kernel
 * has descheduled (a shared, oversubscribed machine) simply claims nothing,
 * and the caller does its share, instead of every phase waiting a full time
 * slice for it.  Claims are tagged with the phase so a late worker can
 * never take an item of a later phase by mistake.  Idle workers spin for a
 * short while, then sleep on a futex, so an idle engine costs no CPU.
 */

#ifndef LLM_THREADPOOL_H
#define LLM_THREADPOOL_H

#include <stddef.h>
#include <stdint.h>

typedef struct llm_pool_s llm_pool_t;

/* One item of a phase; ith (0..n_threads-1) names the thread running it,
 * for per-thread scratch. */
typedef void (*llm_pool_fn)(void *arg, uint32_t item, uint32_t ith);

int llm_pool_create(llm_pool_t **out, uint32_t n_threads, char *err,
    size_t errlen);
void llm_pool_free(llm_pool_t *p);
uint32_t llm_pool_size(const llm_pool_t *p);

/*
 * Run fn(arg, i, ith) for every i < n_items, spread over the pool's
 * threads, and return when all are done.  Not reentrant: one phase at a
 * time per pool, from one calling thread.
 */
void llm_pool_for(llm_pool_t *p, uint32_t n_items, llm_pool_fn fn,
    void *arg);

#endif /* LLM_THREADPOOL_H */
