/*
 * Persistent thread pool: a generation counter publishes a task, workers
 * spin then sleep on it (futex), a done counter ends the phase.
 */

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "threadpool.h"

#define LLM_POOL_SPIN       (1u << 17)   /* pause loops before sleeping */
#define LLM_POOL_MAX        256

typedef struct {
    llm_pool_t      *pool;
    uint32_t         ith;
} llm_pool_worker_t;

struct llm_pool_s {
    _Alignas(64) uint32_t gen;         /* futex word: bumped per task */
    _Alignas(64) uint32_t done;        /* workers finished this task */
    _Alignas(64) uint32_t sleepers;
    uint32_t             stop;
    uint32_t             n;
    llm_pool_fn          fn;
    void                *arg;
    pthread_t           *threads;
    llm_pool_worker_t   *workers;
    uint32_t             n_started;
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
        p->fn(p->arg, w->ith, p->n);
        __atomic_fetch_add(&p->done, 1, __ATOMIC_RELEASE);
    }
}

static void
llm_pool_publish(llm_pool_t *p)
{
    __atomic_fetch_add(&p->gen, 1, __ATOMIC_SEQ_CST);
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
        llm_pool_publish(p);
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
llm_pool_run(llm_pool_t *p, llm_pool_fn fn, void *arg)
{
    uint32_t  spins = 0;

    if (p->n == 1) {
        fn(arg, 0, 1);
        return;
    }

    p->fn = fn;
    p->arg = arg;
    __atomic_store_n(&p->done, 0, __ATOMIC_RELAXED);
    llm_pool_publish(p);

    fn(arg, 0, p->n);

    while (__atomic_load_n(&p->done, __ATOMIC_ACQUIRE) != p->n - 1) {
        if (++spins < LLM_POOL_SPIN) {
            llm_cpu_relax();
        } else {
            sched_yield();
        }
    }
}
