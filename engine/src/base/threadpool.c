/*
 * Persistent thread pool: a generation counter publishes a phase, workers
 * spin then sleep on it (futex), items are claimed with a compare-and-swap
 * on a counter tagged with the phase, and a done counter ends the phase.
 *
 * Phase descriptors live in a ring indexed by generation.  A descriptor is
 * rewritten only after its counter is marked invalid, and a worker checks
 * the tag before and after reading the descriptor (a seqlock), so a worker
 * that slept through many phases reads either a consistent descriptor of
 * the phase it saw or nothing at all.
 */

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "threadpool.h"

#define LLM_POOL_SPIN       (1u << 13)   /* pause loops before sleeping */
#define LLM_POOL_YIELD      (1u << 12)   /* caller: pauses before yielding */
#define LLM_POOL_MAX        256
#define LLM_POOL_RING       64
#define LLM_POOL_INVALID    0xffffffffu

typedef struct {
    _Alignas(64) uint64_t  ctr;        /* tag << 32 | next item */
    uint32_t               n;
    llm_pool_fn            fn;
    void                  *arg;
} llm_pool_phase_t;

typedef struct {
    llm_pool_t      *pool;
    uint32_t         ith;
} llm_pool_worker_t;

struct llm_pool_s {
    _Alignas(64) uint32_t gen;         /* futex word: bumped per phase */
    _Alignas(64) uint32_t done;        /* items finished this phase */
    _Alignas(64) uint32_t sleepers;
    uint32_t             stop;
    uint32_t             n;
    uint32_t             n_started;
    pthread_t           *threads;
    llm_pool_worker_t   *workers;
    llm_pool_phase_t     ring[LLM_POOL_RING];
};

static inline void
llm_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

static void
llm_futex_wait(uint32_t *addr, uint32_t val)
{
    syscall(SYS_futex, addr, FUTEX_WAIT_PRIVATE, val, NULL, NULL, 0);
}

static void
llm_futex_wake(uint32_t *addr)
{
    syscall(SYS_futex, addr, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

/* Claim and run items of phase g until none are left (or g is gone). */
static void
llm_pool_work(llm_pool_t *p, uint32_t g, uint32_t ith)
{
    llm_pool_phase_t  *ph = &p->ring[g % LLM_POOL_RING];
    llm_pool_fn        fn;
    void              *arg;
    uint64_t           v;
    uint32_t           n;

    v = __atomic_load_n(&ph->ctr, __ATOMIC_ACQUIRE);
    if ((uint32_t) (v >> 32) != g) {
        return;
    }
    fn = __atomic_load_n(&ph->fn, __ATOMIC_RELAXED);
    arg = __atomic_load_n(&ph->arg, __ATOMIC_RELAXED);
    n = __atomic_load_n(&ph->n, __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    v = __atomic_load_n(&ph->ctr, __ATOMIC_RELAXED);

    for ( ;; ) {
        if ((uint32_t) (v >> 32) != g || (uint32_t) v >= n) {
            return;
        }
        if (__atomic_compare_exchange_n(&ph->ctr, &v, v + 1, 0,
                                        __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
        {
            fn(arg, (uint32_t) v, ith);
            __atomic_fetch_add(&p->done, 1, __ATOMIC_RELEASE);
            v = __atomic_load_n(&ph->ctr, __ATOMIC_RELAXED);
        }
    }
}

static void *
llm_pool_main(void *arg)
{
    llm_pool_worker_t *w = arg;
    llm_pool_t        *p = w->pool;
    uint32_t           seen = 0, g, spins;

    for ( ;; ) {
        spins = 0;
        while ((g = __atomic_load_n(&p->gen, __ATOMIC_ACQUIRE)) == seen) {
            if (++spins < LLM_POOL_SPIN) {
                llm_cpu_relax();
                continue;
            }
            __atomic_fetch_add(&p->sleepers, 1, __ATOMIC_SEQ_CST);
            if (__atomic_load_n(&p->gen, __ATOMIC_SEQ_CST) == seen) {
                llm_futex_wait(&p->gen, seen);
            }
            __atomic_fetch_sub(&p->sleepers, 1, __ATOMIC_SEQ_CST);
            spins = 0;
        }
        seen = g;
        if (__atomic_load_n(&p->stop, __ATOMIC_ACQUIRE)) {
            return NULL;
        }
        llm_pool_work(p, g, w->ith);
    }
}

static void
llm_pool_wake(llm_pool_t *p)
{
    if (__atomic_load_n(&p->sleepers, __ATOMIC_SEQ_CST) != 0) {
        llm_futex_wake(&p->gen);
    }
}

int
llm_pool_create(llm_pool_t **out, uint32_t n_threads, char *err,
    size_t errlen)
{
    llm_pool_t  *p;
    uint32_t     i;
    int          rc;

    *out = NULL;
    if (n_threads == 0 || n_threads > LLM_POOL_MAX) {
        snprintf(err, errlen, "thread pool: %u threads, expected 1..%d",
                 n_threads, LLM_POOL_MAX);
        return -EINVAL;
    }

    p = calloc(1, sizeof(*p));
    if (p == NULL) {
        goto nomem;
    }
    p->n = n_threads;
    for (i = 0; i < LLM_POOL_RING; i++) {
        p->ring[i].ctr = (uint64_t) LLM_POOL_INVALID << 32;
    }
    p->threads = calloc(n_threads, sizeof(pthread_t));
    p->workers = calloc(n_threads, sizeof(llm_pool_worker_t));
    if (p->threads == NULL || p->workers == NULL) {
        goto nomem;
    }

    for (i = 1; i < n_threads; i++) {
        p->workers[i].pool = p;
        p->workers[i].ith = i;
        rc = pthread_create(&p->threads[i], NULL, llm_pool_main,
                            &p->workers[i]);
        if (rc != 0) {
            snprintf(err, errlen, "thread pool: pthread_create: %s",
                     strerror(rc));
            llm_pool_free(p);
            return -rc;
        }
        p->n_started = i;
    }

    *out = p;
    return 0;

nomem:
    snprintf(err, errlen, "thread pool: out of memory");
    llm_pool_free(p);
    return -ENOMEM;
}

void
llm_pool_free(llm_pool_t *p)
{
    uint32_t  i;

    if (p == NULL) {
        return;
    }
    if (p->n_started > 0) {
        __atomic_store_n(&p->stop, 1, __ATOMIC_RELEASE);
        __atomic_fetch_add(&p->gen, 1, __ATOMIC_SEQ_CST);
        llm_futex_wake(&p->gen);
        for (i = 1; i <= p->n_started; i++) {
            pthread_join(p->threads[i], NULL);
        }
    }
    free(p->threads);
    free(p->workers);
    free(p);
}

uint32_t
llm_pool_size(const llm_pool_t *p)
{
    return p->n;
}

void
llm_pool_for(llm_pool_t *p, uint32_t n_items, llm_pool_fn fn, void *arg)
{
    llm_pool_phase_t  *ph;
    uint32_t           g, i, spins = 0;

    if (n_items == 0) {
        return;
    }
    if (p->n == 1 || n_items == 1) {
        for (i = 0; i < n_items; i++) {
            fn(arg, i, 0);
        }
        return;
    }

    g = p->gen + 1;
    if (g == LLM_POOL_INVALID) {
        g = 1;          /* skip the invalid tag (and 0, the initial seen) */
    }
    ph = &p->ring[g % LLM_POOL_RING];

    /* invalidate, rewrite, then tag: a stale reader sees a mismatch */
    __atomic_store_n(&ph->ctr, (uint64_t) LLM_POOL_INVALID << 32,
                     __ATOMIC_RELEASE);
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    __atomic_store_n(&ph->fn, fn, __ATOMIC_RELAXED);
    __atomic_store_n(&ph->arg, arg, __ATOMIC_RELAXED);
    __atomic_store_n(&ph->n, n_items, __ATOMIC_RELAXED);
    __atomic_store_n(&p->done, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&ph->ctr, (uint64_t) g << 32, __ATOMIC_RELEASE);
    __atomic_store_n(&p->gen, g, __ATOMIC_SEQ_CST);
    llm_pool_wake(p);

    llm_pool_work(p, g, 0);

    while (__atomic_load_n(&p->done, __ATOMIC_ACQUIRE) != n_items) {
        if (++spins < LLM_POOL_YIELD) {
            llm_cpu_relax();
        } else {
            sched_yield();
        }
    }
}
