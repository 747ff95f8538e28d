/*
 * A persistent thread pool for the forward pass.
 *
 * n_threads - 1 worker threads are created once; the calling thread is
 * worker 0.  llm_pool_run() publishes a task by bumping a generation
 * counter, runs its own share, and returns when every worker has finished:
 * one call is one phase, its return is the phase's barrier.  Workers spin
 * on the generation counter for a short while, then sleep on a futex, so an
 * idle engine costs no CPU.  Tasks split their work themselves, usually by
 * claiming items from an atomic counter (llm_pool_claim).
 */

#ifndef LLM_THREADPOOL_H
#define LLM_THREADPOOL_H

#include <stddef.h>
#include <stdint.h>

typedef struct llm_pool_s llm_pool_t;

typedef void (*llm_pool_fn)(void *arg, uint32_t ith, uint32_t nth);

int llm_pool_create(llm_pool_t **out, uint32_t n_threads, char *err,
    size_t errlen);
void llm_pool_free(llm_pool_t *p);
uint32_t llm_pool_size(const llm_pool_t *p);

/*
 * Run fn(arg, ith, nth) on all nth threads (the caller is ith 0) and wait
 * until all returned.  Not reentrant: one task at a time per pool.
 */
void llm_pool_run(llm_pool_t *p, llm_pool_fn fn, void *arg);

/*
 * Work counter for one phase: set to 0 before llm_pool_run (llm_pool_reset)
 * and claim items with llm_pool_claim until it returns >= n.
 */
typedef struct {
    _Alignas(64) uint32_t next;
} llm_pool_counter_t;

static inline void
llm_pool_reset(llm_pool_counter_t *c)
{
    __atomic_store_n(&c->next, 0, __ATOMIC_RELAXED);
}

static inline uint32_t
llm_pool_claim(llm_pool_counter_t *c)
{
    return __atomic_fetch_add(&c->next, 1, __ATOMIC_RELAXED);
}

#endif /* LLM_THREADPOOL_H */
