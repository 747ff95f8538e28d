/*
 * The expert cache (see expert_cache.h and docs/STREAMING.md).
 *
 * Slot states: EMPTY (no key), LOADING (reads in flight; never evicted),
 * READY (complete; evictable when unpinned), FAILED (a read failed after
 * its retries; evictable, and re-read on demand).  A slot is handed out
 * only READY, so a partially read expert never reaches the kernels.
 *
 * Reads: one operation per window chunk of up to 256 KiB, user data = the
 * operation's index; a short read is resubmitted for the remainder, an
 * error up to LLM_XC_TRIES times.  Operations in flight never exceed the
 * ring's entries, so the completion queue (twice as large) cannot
 * overflow.
 */

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <liburing.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "expert_cache.h"
#include "kernels/quant.h"

#define LLM_XC_ALIGN   4096u
#define LLM_XC_CHUNK   (256u << 10)
#define LLM_XC_TRIES   3
#define LLM_XC_QD      128u

enum {
    LLM_XC_EMPTY = 0,
    LLM_XC_LOADING,
    LLM_XC_READY,
    LLM_XC_FAILED
};

typedef struct {
    int32_t      key;           /* layer * n_expert + expert, -1: none */
    uint8_t      state;
    uint8_t      ref;           /* CLOCK reference bit */
    uint8_t      prefetched;    /* read for a hint, not used yet */
    int32_t      pins;
    int32_t      pending;       /* operations in flight */
    int          err;           /* negative errno of the failed read */
    uint64_t     err_off;
    uint8_t     *buf;           /* slot_bytes, 4 KiB aligned */
    uint32_t     inner[3];      /* gate/up/down offsets inside buf */
    uint32_t     type[3];       /* of the bytes there: file or regrouped */
    uint8_t      regrouped;     /* type[] final (set when first handed out) */
} llm_xc_slot_t;

typedef struct {
    int32_t      slot;
    int32_t      next_free;
    uint32_t     tries;
    uint32_t     len;           /* bytes asked for */
    uint32_t     done;
    uint32_t     need;          /* bytes that hold the slice (<= len) */
    uint64_t     off;           /* file offset of the operation's start */
    uint8_t     *buf;
} llm_xc_op_t;

struct llm_xcache_s {
    const llm_model_t    *m;
    llm_expert_source_t   src;
    char                  path[512];
    int                   fd;
    int                   direct;
    char                  buffered_why[768];
    struct io_uring       ring;
    int                   ring_ok;
    uint32_t              qd;
    uint32_t              ops_per_slot;  /* at most, one slot's reads */

    uint32_t              n_layer, n_expert;
    uint32_t              n_slots;
    uint64_t              slot_bytes;
    uint32_t              win_base[3];   /* window k's offset in a slot */
    uint8_t              *pool;
    uint8_t              *spare;         /* a slot's bytes, to regroup into */
    void                 *spare_mem;     /* its allocation (buffers swap) */
    llm_xc_slot_t        *slots;
    int32_t              *map;           /* [n_layer * n_expert] -> slot */
    uint32_t              hand;

    llm_xc_op_t          *ops;           /* [qd] */
    int32_t               free_op;
    uint32_t              in_flight;
    uint32_t              unsubmitted;
    uint64_t              busy_t0;

    int32_t              *cur;           /* [n_expert] acquire scratch */
    uint8_t              *hint;          /* [n_layer * n_expert] hinted */
    uint8_t              *hinted;        /* [n_layer] a hint is pending */

    llm_xcache_stats_t    st;
};

static uint64_t
llm_xc_now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t) ts.tv_sec * 1000000000ull + (uint64_t) ts.tv_nsec;
}

int
llm_xcache_sizes(const llm_model_t *m, uint64_t *slot_bytes,
    uint64_t *experts_bytes)
{
    const llm_hparams_t  *hp = llm_model_hparams(m);
    llm_expert_slices_t   sl;
    uint64_t              win[3] = { 0, 0, 0 }, tot = 0, a, b;
    uint32_t              l, e;
    int                   k;

    if (hp->n_expert == 0) {
        return -EINVAL;
    }
    for (l = 0; l < hp->n_layer; l++) {
        for (e = 0; e < hp->n_expert; e++) {
            int rc = llm_model_expert_slices(m, l, e, &sl);

            if (rc == -ENOENT) {
                break;              /* a dense layer: no experts */
            }
            if (rc < 0) {
                return -EINVAL;
            }
            for (k = 0; k < 3; k++) {
                a = sl.offset[k] & ~(uint64_t) (LLM_XC_ALIGN - 1);
                b = (sl.offset[k] + sl.bytes[k] + LLM_XC_ALIGN - 1)
                    & ~(uint64_t) (LLM_XC_ALIGN - 1);
                win[k] = b - a > win[k] ? b - a : win[k];
                tot += sl.bytes[k];
            }
        }
    }
    *slot_bytes = win[0] + win[1] + win[2];
    if (experts_bytes != NULL) {
        *experts_bytes = tot;
    }
    return 0;
}

/* ---- reads -------------------------------------------------------------- */

static void
llm_xc_busy(llm_xcache_t *xc, int delta)
{
    uint64_t t = llm_xc_now();

    if (delta > 0 && xc->in_flight++ == 0) {
        xc->busy_t0 = t;
    } else if (delta < 0 && --xc->in_flight == 0) {
        xc->st.io_busy_ns += t - xc->busy_t0;
    }
}

/* Queue op's (remaining) read; the caller submits. */
static void
llm_xc_prep(llm_xcache_t *xc, int32_t o)
{
    llm_xc_op_t          *op = &xc->ops[o];
    struct io_uring_sqe  *sqe;

    sqe = io_uring_get_sqe(&xc->ring);
    if (sqe == NULL) {
        /* the SQ is full of unsubmitted entries: hand them over */
        io_uring_submit(&xc->ring);
        xc->unsubmitted = 0;
        sqe = io_uring_get_sqe(&xc->ring);
    }
    /* in_flight <= qd == SQ entries, so after submitting one is free */
    io_uring_prep_read(sqe, xc->fd, op->buf + op->done, op->len - op->done,
                       op->off + op->done);
    io_uring_sqe_set_data64(sqe, (uint64_t) o);
    xc->unsubmitted++;
}

static void
llm_xc_flush(llm_xcache_t *xc)
{
    if (xc->unsubmitted) {
        io_uring_submit(&xc->ring);
        xc->unsubmitted = 0;
    }
}

static void
llm_xc_op_done(llm_xcache_t *xc, int32_t o, int err)
{
    llm_xc_op_t    *op = &xc->ops[o];
    llm_xc_slot_t  *s = &xc->slots[op->slot];

    if (err < 0 && s->err == 0) {
        s->err = err;
        s->err_off = op->off + op->done;
    }
    if (--s->pending == 0) {
        s->state = s->err ? LLM_XC_FAILED : LLM_XC_READY;
    }
    op->next_free = xc->free_op;
    xc->free_op = o;
    llm_xc_busy(xc, -1);
}

/* One completion: done, resubmitted (short read, retry) or failed. */
static void
llm_xc_complete(llm_xcache_t *xc, struct io_uring_cqe *cqe)
{
    int32_t       o = (int32_t) io_uring_cqe_get_data64(cqe);
    int           res = cqe->res;
    llm_xc_op_t  *op = &xc->ops[o];

    io_uring_cqe_seen(&xc->ring, cqe);
    if (res > 0) {
        op->done += (uint32_t) res;
        xc->st.bytes_read += (uint64_t) res;
        if (op->done >= op->need) {
            xc->st.reads++;
            llm_xc_op_done(xc, o, 0);
            return;
        }
        xc->st.retries++;           /* short read: the remainder */
        llm_xc_prep(xc, o);
        return;
    }
    if (res == 0) {
        res = -ENODATA;             /* end of file before the slice's end */
    }
    if (++op->tries < LLM_XC_TRIES || res == -EINTR || res == -EAGAIN) {
        xc->st.retries++;
        llm_xc_prep(xc, o);
        return;
    }
    llm_xc_op_done(xc, o, res);
}

static void
llm_xc_reap(llm_xcache_t *xc)
{
    struct io_uring_cqe *cqe;

    while (io_uring_peek_cqe(&xc->ring, &cqe) == 0) {
        llm_xc_complete(xc, cqe);
    }
    llm_xc_flush(xc);
}

/* Wait for at least one completion (there must be reads in flight). */
static int
llm_xc_wait_one(llm_xcache_t *xc)
{
    struct io_uring_cqe *cqe;
    int                  rc;

    llm_xc_flush(xc);
    do {
        rc = io_uring_wait_cqe(&xc->ring, &cqe);
    } while (rc == -EINTR);
    if (rc < 0) {
        return rc;
    }
    llm_xc_complete(xc, cqe);
    llm_xc_reap(xc);
    return 0;
}

static int32_t
llm_xc_get_op(llm_xcache_t *xc)
{
    int32_t o;

    while (xc->free_op < 0) {
        if (llm_xc_wait_one(xc) < 0) {
            return -1;
        }
    }
    o = xc->free_op;
    xc->free_op = xc->ops[o].next_free;
    return o;
}

/* Start reading (layer, expert) into slot s: state LOADING. */
static int
llm_xc_load(llm_xcache_t *xc, int32_t si, uint32_t layer, uint32_t expert)
{
    llm_xc_slot_t        *s = &xc->slots[si];
    llm_expert_slices_t   sl;
    uint64_t              a, b, end, pos;
    uint32_t              len;
    int32_t               o;
    int                   k;

    if (llm_model_expert_slices(xc->m, layer, expert, &sl) < 0) {
        return -EINVAL;
    }
    s->key = (int32_t) (layer * xc->n_expert + expert);
    xc->map[s->key] = si;
    s->state = LLM_XC_LOADING;
    s->regrouped = 0;
    s->err = 0;
    s->pending = 1;                 /* held until every op is queued */
    for (k = 0; k < 3; k++) {
        a = sl.offset[k] & ~(uint64_t) (LLM_XC_ALIGN - 1);
        end = sl.offset[k] + sl.bytes[k];
        b = (end + LLM_XC_ALIGN - 1) & ~(uint64_t) (LLM_XC_ALIGN - 1);
        s->inner[k] = xc->win_base[k] + (uint32_t) (sl.offset[k] - a);
        for (pos = a; pos < b; pos += len) {
            len = b - pos > LLM_XC_CHUNK ? LLM_XC_CHUNK : (uint32_t) (b - pos);
            o = llm_xc_get_op(xc);
            if (o < 0) {
                s->err = -EIO;
                break;
            }
            xc->ops[o].slot = si;
            xc->ops[o].tries = 0;
            xc->ops[o].off = pos;
            xc->ops[o].len = len;
            xc->ops[o].done = 0;
            xc->ops[o].need = end - pos < len ? (uint32_t) (end - pos) : len;
            xc->ops[o].buf = s->buf + xc->win_base[k] + (pos - a);
            s->pending++;
            llm_xc_busy(xc, 1);
            llm_xc_prep(xc, o);
        }
    }
    if (--s->pending == 0) {
        s->state = s->err ? LLM_XC_FAILED : LLM_XC_READY;
    }
    return 0;
}

/* ---- slots -------------------------------------------------------------- */

/*
 * CLOCK: the first unpinned, not loading slot whose reference bit is clear
 * (clearing bits on the way).  A prefetch for layer `keep` never evicts a
 * slot of that layer or of the one before it (the layer being computed).
 */
static int32_t
llm_xc_victim(llm_xcache_t *xc, int64_t keep)
{
    llm_xc_slot_t  *s;
    uint32_t        i, layer;
    int32_t         si;

    for (i = 0; i < 2 * xc->n_slots; i++) {
        si = (int32_t) xc->hand;
        s = &xc->slots[si];
        xc->hand = (xc->hand + 1) % xc->n_slots;
        if (s->pins > 0 || s->state == LLM_XC_LOADING) {
            continue;
        }
        if (keep >= 0 && s->key >= 0) {
            layer = (uint32_t) s->key / xc->n_expert;
            if (layer == keep || layer + 1 == keep) {
                continue;
            }
        }
        if (s->ref) {
            s->ref = 0;
            continue;
        }
        if (s->key >= 0) {
            xc->map[s->key] = -1;
        }
        s->key = -1;
        s->state = LLM_XC_EMPTY;
        s->prefetched = 0;
        return si;
    }
    return -1;
}

static void
llm_xc_unpin(llm_xcache_t *xc, uint32_t n)
{
    uint32_t  i;

    for (i = 0; i < n; i++) {
        if (xc->cur[i] >= 0) {
            xc->slots[xc->cur[i]].pins--;
        }
    }
}

/*
 * A complete slot, before its first use: the matrices whose file layout's
 * gemm regroups rows on every call (llm_repack_file_slow: AVX-512 Q8_0,
 * Q4_K, Q6_K) regrouped once, as a resident model's are at load
 * (llm_repack_rows), into the spare buffer, which then becomes the slot's
 * (the old one the spare).  The same kernel on the same bytes: a streamed
 * expert's results stay the resident run's bit for bit, at the regrouped
 * rows' speed instead of a fraction of it; the cost is one pass over the
 * bytes just read.
 */
static void
llm_xc_regroup(llm_xcache_t *xc, llm_xc_slot_t *s)
{
    llm_expert_slices_t  sl;
    uint8_t             *t;
    int                  k, any = 0;

    s->regrouped = 1;
    if (llm_model_expert_slices(xc->m, (uint32_t) s->key / xc->n_expert,
                                (uint32_t) s->key % xc->n_expert, &sl) < 0)
    {
        return;
    }
    for (k = 0; k < 3; k++) {
        llm_type_t  ft = (llm_type_t) sl.type[k];

        s->type[k] = llm_repack_file_slow(ft)
                     ? llm_repack_type(ft, sl.n_out[k]) : ft;
        any |= s->type[k] != sl.type[k];
    }
    if (!any) {
        return;
    }
    for (k = 0; k < 3; k++) {
        if (s->type[k] != sl.type[k]) {
            llm_repack_rows((llm_type_t) sl.type[k], sl.n_in[k], sl.n_out[k],
                            s->buf + s->inner[k], xc->spare + s->inner[k]);
        } else {
            memcpy(xc->spare + s->inner[k], s->buf + s->inner[k],
                   sl.bytes[k]);
        }
    }
    t = s->buf;
    s->buf = xc->spare;
    xc->spare = t;
    xc->st.regroups++;
}

static int
llm_xc_acquire(void *ud, uint32_t layer, const uint32_t *ex, uint32_t n,
    llm_expert_ptrs_t *ptrs, char *err, size_t errlen)
{
    llm_xcache_t   *xc = ud;
    llm_xc_slot_t  *s;
    uint64_t        t0 = llm_xc_now();
    uint32_t        i, key, n_pinned;
    int32_t         si;
    int             busy, rc;

    llm_xc_reap(xc);
    if (n > xc->n_slots) {
        snprintf(err, errlen, "expert cache too small: layer %u needs %u "
                 "experts at once, the cache has %u slots of %.2f MiB; "
                 "use --expert-cache-mb %" PRIu64 " or more", layer, n,
                 xc->n_slots, (double) xc->slot_bytes / 1048576.0,
                 (n * xc->slot_bytes + 1048575) >> 20);
        return -ENOSPC;
    }
    xc->st.acquires++;

    /* pin what is resident or in flight, so no victim below is one */
    for (i = 0; i < n; i++) {
        key = layer * xc->n_expert + ex[i];
        si = xc->map[key];
        xc->cur[i] = si;
        if (xc->hinted[layer] && xc->hint[key]) {
            xc->st.prefetch_right++;
        }
        if (si < 0) {
            continue;
        }
        s = &xc->slots[si];
        s->pins++;
        s->ref = 1;
        if (s->prefetched) {
            s->prefetched = 0;
            xc->st.prefetch_useful++;
        }
        if (s->state == LLM_XC_READY) {
            xc->st.hits++;
        } else if (s->state == LLM_XC_LOADING) {
            xc->st.prefetch_hits++;
        }
    }
    xc->hinted[layer] = 0;

    /* read the missing ones (and any whose earlier read failed) */
    for (i = 0; i < n; i++) {
        si = xc->cur[i];
        if (si >= 0 && xc->slots[si].state != LLM_XC_FAILED) {
            continue;
        }
        xc->st.misses++;
        while (si < 0) {
            si = llm_xc_victim(xc, -1);
            if (si >= 0) {
                break;
            }
            busy = 0;
            n_pinned = 0;
            for (key = 0; key < xc->n_slots; key++) {
                busy |= xc->slots[key].state == LLM_XC_LOADING
                        && xc->slots[key].pins == 0;
                n_pinned += xc->slots[key].pins > 0;
            }
            if (!busy) {
                snprintf(err, errlen, "expert cache too small: layer %u "
                         "needs %u experts, all %u slots are pinned (%u) "
                         "or loading; use --expert-cache-mb %" PRIu64
                         " or more", layer, n, xc->n_slots, n_pinned,
                         (n * xc->slot_bytes + 1048575) >> 20);
                llm_xc_unpin(xc, n);
                return -ENOSPC;
            }
            if ((rc = llm_xc_wait_one(xc)) < 0) {
                snprintf(err, errlen, "expert cache: io_uring wait: %s",
                         strerror(-rc));
                llm_xc_unpin(xc, n);
                return rc;
            }
        }
        s = &xc->slots[si];
        if (xc->cur[i] < 0) {
            s->pins++;
            s->ref = 1;
        }
        xc->cur[i] = si;
        s->prefetched = 0;
        llm_xc_load(xc, si, layer, ex[i]);
    }
    llm_xc_flush(xc);

    /* wait for this layer's reads; the others keep flying */
    for (i = 0; i < n; i++) {
        while (xc->slots[xc->cur[i]].state == LLM_XC_LOADING) {
            if ((rc = llm_xc_wait_one(xc)) < 0) {
                snprintf(err, errlen, "expert cache: io_uring wait: %s",
                         strerror(-rc));
                llm_xc_unpin(xc, n);
                return rc;
            }
        }
    }
    for (i = 0; i < n; i++) {
        s = &xc->slots[xc->cur[i]];
        if (s->state == LLM_XC_FAILED) {
            snprintf(err, errlen, "expert cache: reading layer %u expert %u "
                     "from %s at offset %" PRIu64 " failed after %d tries: "
                     "%s", layer, ex[i], xc->path, s->err_off, LLM_XC_TRIES,
                     s->err == -ENODATA ? "unexpected end of file"
                                        : strerror(-s->err));
            llm_xc_unpin(xc, n);
            xc->st.stall_ns += llm_xc_now() - t0;
            return s->err;
        }
        if (!s->regrouped) {
            llm_xc_regroup(xc, s);
        }
        ptrs[i].gate = s->buf + s->inner[0];
        ptrs[i].up = s->buf + s->inner[1];
        ptrs[i].down = s->buf + s->inner[2];
        memcpy(ptrs[i].type, s->type, sizeof(s->type));
    }
    xc->st.stall_ns += llm_xc_now() - t0;
    return 0;
}

static void
llm_xc_release(void *ud, uint32_t layer, const uint32_t *ex, uint32_t n)
{
    llm_xcache_t  *xc = ud;
    uint32_t       i;
    int32_t        si;

    for (i = 0; i < n; i++) {
        si = xc->map[layer * xc->n_expert + ex[i]];
        if (si >= 0 && xc->slots[si].pins > 0) {
            xc->slots[si].pins--;
        }
    }
    llm_xc_reap(xc);
}

static void
llm_xc_prefetch(void *ud, uint32_t layer, const uint32_t *ex, uint32_t n)
{
    llm_xcache_t  *xc = ud;
    uint32_t       i;
    int32_t        si;

    llm_xc_reap(xc);
    memset(xc->hint + (size_t) layer * xc->n_expert, 0, xc->n_expert);
    xc->hinted[layer] = 1;
    xc->st.prefetch_guessed += n;
    for (i = 0; i < n; i++) {
        xc->hint[layer * xc->n_expert + ex[i]] = 1;
        si = xc->map[layer * xc->n_expert + ex[i]];
        if (si >= 0) {
            xc->slots[si].ref = 1;
            continue;
        }
        /* only free operations: a hint never makes the caller wait */
        if (xc->qd - xc->in_flight < xc->ops_per_slot) {
            break;
        }
        si = llm_xc_victim(xc, layer);
        if (si < 0) {
            break;
        }
        xc->slots[si].prefetched = 1;
        xc->slots[si].ref = 1;
        xc->st.prefetch_issued++;
        llm_xc_load(xc, si, layer, ex[i]);
    }
    llm_xc_flush(xc);
}

/* ---- lifecycle ---------------------------------------------------------- */

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22
#endif

static int
llm_xc_cmp_u64(const void *a, const void *b)
{
    uint64_t  x = *(const uint64_t *) a, y = *(const uint64_t *) b;

    return x < y ? -1 : x > y;
}

/*
 * Drop the experts' pages from the mapping and keep read-ahead off them;
 * populate every other tensor the forward pass reads from the mapping
 * (attention, norms, embeddings, router, shared experts; not those
 * regrouped into anonymous memory at load, which would be resident
 * twice), so they are resident from the start rather than faulted in
 * 4 KiB at a time during the first tokens.
 */
static void
llm_xc_unmap_experts(const llm_model_t *m)
{
    const llm_hparams_t      *hp = llm_model_hparams(m);
    const llm_gguf_t         *g = llm_model_gguf(m);
    const uint8_t            *base = llm_gguf_map(g);
    const llm_gguf_tensor_t  *t;
    llm_expert_slices_t       sl;
    uint64_t                  a, b, pg = (uint64_t) sysconf(_SC_PAGESIZE);
    uint64_t                 *offs, n = 0, i, off;
    uint32_t                  l, e;
    int                       k;

    offs = malloc((size_t) hp->n_layer * hp->n_expert * 3 * sizeof(*offs));

    for (l = 0; l < hp->n_layer; l++) {
        for (e = 0; e < hp->n_expert; e++) {
            if (llm_model_expert_slices(m, l, e, &sl) < 0) {
                continue;
            }
            for (k = 0; k < 3; k++) {
                if (offs != NULL) {
                    offs[n++] = sl.offset[k];
                }
                a = (sl.offset[k] + pg - 1) & ~(pg - 1);
                b = (sl.offset[k] + sl.bytes[k]) & ~(pg - 1);
                if (b > a) {
                    madvise((void *) (base + a), b - a, MADV_RANDOM);
                    madvise((void *) (base + a), b - a, MADV_DONTNEED);
                }
            }
        }
    }
    if (offs == NULL) {
        return;
    }
    qsort(offs, n, sizeof(*offs), llm_xc_cmp_u64);
    for (i = 0; i < llm_gguf_n_tensors(g); i++) {
        t = llm_gguf_tensor_at(g, i);
        off = (uint64_t) ((const uint8_t *) t->data - base);
        if (bsearch(&off, offs, n, sizeof(*offs), llm_xc_cmp_u64) != NULL) {
            continue;               /* an expert tensor, or its expert 0 */
        }
        if (llm_model_regrouped(m, off)) {
            continue;               /* read from its anonymous copy */
        }
        a = off & ~(pg - 1);
        b = (off + t->nbytes + pg - 1) & ~(pg - 1);
        if (madvise((void *) (base + a), b - a, MADV_POPULATE_READ) != 0) {
            madvise((void *) (base + a), b - a, MADV_WILLNEED);
        }
    }
    free(offs);
}

/* O_DIRECT if a first aligned read works, else buffered (the reason in
 * xc->buffered_why, for the caller to log). */
static int
llm_xc_open(llm_xcache_t *xc, int no_direct, char *err, size_t errlen)
{
    void  *probe = NULL;
    int    fd = -1;

    if (!no_direct) {
        fd = open(xc->path, O_RDONLY | O_DIRECT | O_CLOEXEC);
        if (fd >= 0 && posix_memalign(&probe, LLM_XC_ALIGN, LLM_XC_ALIGN)
                       == 0)
        {
            if (pread(fd, probe, LLM_XC_ALIGN, 0) < 0) {
                snprintf(xc->buffered_why, sizeof(xc->buffered_why),
                         "O_DIRECT read of %s refused: %s", xc->path,
                         strerror(errno));
                close(fd);
                fd = -1;
            }
        } else if (fd < 0) {
            snprintf(xc->buffered_why, sizeof(xc->buffered_why),
                     "O_DIRECT open of %s refused: %s", xc->path,
                     strerror(errno));
        }
        free(probe);
    }
    xc->direct = fd >= 0;
    if (fd < 0) {
        fd = open(xc->path, O_RDONLY | O_CLOEXEC);
    }
    if (fd < 0) {
        snprintf(err, errlen, "expert cache: open %s: %s", xc->path,
                 strerror(errno));
        return -errno;
    }
    xc->fd = fd;
    return 0;
}

int
llm_xcache_create(llm_xcache_t **out, const llm_model_t *m,
    const llm_xcache_opts_t *opts, char *err, size_t errlen)
{
    const llm_hparams_t  *hp = llm_model_hparams(m);
    llm_expert_slices_t   sl;
    llm_xcache_t         *xc;
    uint64_t              slot_bytes, experts_bytes, n, w[3] = { 0 }, a, b;
    uint32_t              i, l, e;
    int                   k, rc;
    void                 *p = NULL;

    *out = NULL;
    if (hp->n_expert == 0
        || llm_xcache_sizes(m, &slot_bytes, &experts_bytes) < 0)
    {
        snprintf(err, errlen, "expert cache: the model has no experts to "
                 "stream");
        return -EINVAL;
    }
    n = (opts->cache_mb << 20) / slot_bytes;
    if (opts->max_slots && n > opts->max_slots) {
        n = opts->max_slots;
    }
    if (n > (uint64_t) hp->n_layer * hp->n_expert) {
        n = (uint64_t) hp->n_layer * hp->n_expert;
    }
    if (n < hp->n_expert_used) {
        snprintf(err, errlen, "expert cache too small: %" PRIu64 " MiB holds "
                 "%" PRIu64 " slots of %.2f MiB, a token needs %u; use "
                 "--expert-cache-mb %" PRIu64 " or more", opts->cache_mb, n,
                 (double) slot_bytes / 1048576.0, hp->n_expert_used,
                 (hp->n_expert_used * slot_bytes + 1048575) >> 20);
        return -EINVAL;
    }

    xc = calloc(1, sizeof(*xc));
    if (xc == NULL) {
        snprintf(err, errlen, "expert cache: out of memory");
        return -ENOMEM;
    }
    xc->m = m;
    xc->fd = -1;
    xc->n_layer = hp->n_layer;
    xc->n_expert = hp->n_expert;
    xc->n_slots = (uint32_t) n;
    xc->slot_bytes = slot_bytes;
    xc->free_op = -1;
    snprintf(xc->path, sizeof(xc->path), "%s",
             opts->path ? opts->path : llm_gguf_path(llm_model_gguf(m)));

    /* windows inside a slot: each the largest over all (layer, expert) */
    for (l = 0; l < hp->n_layer; l++) {
        for (e = 0; e < hp->n_expert; e++) {
            if (llm_model_expert_slices(m, l, e, &sl) < 0) {
                break;              /* a dense layer */
            }
            for (k = 0; k < 3; k++) {
                a = sl.offset[k] & ~(uint64_t) (LLM_XC_ALIGN - 1);
                b = (sl.offset[k] + sl.bytes[k] + LLM_XC_ALIGN - 1)
                    & ~(uint64_t) (LLM_XC_ALIGN - 1);
                w[k] = b - a > w[k] ? b - a : w[k];
            }
        }
    }
    xc->win_base[0] = 0;
    xc->win_base[1] = (uint32_t) w[0];
    xc->win_base[2] = (uint32_t) (w[0] + w[1]);

    xc->qd = opts->queue_depth ? opts->queue_depth : LLM_XC_QD;
    xc->qd = xc->qd < 32 ? 32 : xc->qd;
    for (k = 0; k < 3; k++) {
        xc->ops_per_slot += (uint32_t) ((w[k] + LLM_XC_CHUNK - 1)
                                        / LLM_XC_CHUNK);
    }
    if (xc->ops_per_slot > xc->qd) {
        xc->qd = xc->ops_per_slot;
    }
    xc->slots = calloc(n, sizeof(*xc->slots));
    xc->map = malloc((size_t) hp->n_layer * hp->n_expert * sizeof(int32_t));
    xc->ops = calloc(xc->qd, sizeof(*xc->ops));
    xc->cur = malloc(hp->n_expert * sizeof(int32_t));
    xc->hint = calloc((size_t) hp->n_layer * hp->n_expert, 1);
    xc->hinted = calloc(hp->n_layer, 1);
    rc = posix_memalign(&p, LLM_XC_ALIGN, (size_t) (n * slot_bytes));
    if (rc == 0 && posix_memalign(&xc->spare_mem, LLM_XC_ALIGN,
                                  (size_t) slot_bytes) != 0)
    {
        xc->spare_mem = NULL;
    }
    if (xc->slots == NULL || xc->map == NULL || xc->ops == NULL
        || xc->cur == NULL || xc->hint == NULL || xc->hinted == NULL
        || rc != 0 || xc->spare_mem == NULL)
    {
        if (rc == 0) {
            free(p);
        }
        snprintf(err, errlen, "expert cache: out of memory for %" PRIu64
                 " slots of %" PRIu64 " bytes", n, slot_bytes);
        llm_xcache_free(xc);
        return -ENOMEM;
    }
    xc->pool = p;
    xc->spare = xc->spare_mem;
    madvise(xc->pool, (size_t) (n * slot_bytes), MADV_HUGEPAGE);
    madvise(xc->spare, (size_t) slot_bytes, MADV_HUGEPAGE);
    for (i = 0; i < n; i++) {
        xc->slots[i].key = -1;
        xc->slots[i].buf = xc->pool + (size_t) i * slot_bytes;
    }
    for (i = 0; i < hp->n_layer * hp->n_expert; i++) {
        xc->map[i] = -1;
    }
    for (i = xc->qd; i-- > 0; ) {
        xc->ops[i].next_free = xc->free_op;
        xc->free_op = (int32_t) i;
    }

    if ((rc = llm_xc_open(xc, opts->no_direct, err, errlen)) < 0) {
        llm_xcache_free(xc);
        return rc;
    }
    rc = io_uring_queue_init(xc->qd, &xc->ring, 0);
    if (rc < 0) {
        snprintf(err, errlen, "expert cache: io_uring_queue_init(%u): %s",
                 xc->qd, strerror(-rc));
        llm_xcache_free(xc);
        return rc;
    }
    xc->ring_ok = 1;

    xc->st.n_slots = xc->n_slots;
    xc->st.slot_bytes = slot_bytes;
    xc->st.experts_bytes = experts_bytes;
    xc->st.direct = xc->direct;
    xc->st.buffered_why = xc->buffered_why;
    xc->src.ud = xc;
    xc->src.acquire = llm_xc_acquire;
    xc->src.release = llm_xc_release;
    xc->src.prefetch = llm_xc_prefetch;
    llm_xc_unmap_experts(m);
    *out = xc;
    return 0;
}

void
llm_xcache_free(llm_xcache_t *xc)
{
    if (xc == NULL) {
        return;
    }
    if (xc->ring_ok) {
        /* the kernel may still write into slots: let every read land */
        llm_xc_flush(xc);
        while (xc->in_flight > 0 && llm_xc_wait_one(xc) == 0) {
            /* void */
        }
        io_uring_queue_exit(&xc->ring);
    }
    if (xc->fd >= 0) {
        close(xc->fd);
    }
    free(xc->pool);
    free(xc->spare_mem);
    free(xc->slots);
    free(xc->map);
    free(xc->ops);
    free(xc->cur);
    free(xc->hint);
    free(xc->hinted);
    free(xc);
}

const llm_expert_source_t *
llm_xcache_source(llm_xcache_t *xc)
{
    return &xc->src;
}

void
llm_xcache_get_stats(const llm_xcache_t *xc, llm_xcache_stats_t *st)
{
    *st = xc->st;
}
