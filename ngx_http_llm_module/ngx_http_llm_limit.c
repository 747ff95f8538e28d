
/*
 * Per-key limits in a shared zone (llm_zone), the pattern of
 * ngx_http_limit_req_module: a slab pool holding an rbtree of per-key
 * nodes with an LRU queue, inherited by a reload through shm_zone->init.
 *
 * Each key has two token buckets, requests/min and tokens/min, refilled
 * continuously (a limit of N/min refills N/60 per second and holds at most
 * N), and a total token quota.  Admission takes one request and reserves
 * the estimated tokens (capped at the tokens/min limit, so a request is
 * never refused for its size alone); settle gives back what was reserved
 * and charges what was used, so a bucket may go below zero and later
 * requests wait for it.  The x-ratelimit-* headers follow OpenAI: limit,
 * remaining, and the time until the bucket is full again ("1s", "6m0s").
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "ngx_http_llm_module.h"
#include "ngx_http_llm_keys.h"


#define NGX_HTTP_LLM_UNIT    60000             /* bucket units per item */
#define NGX_HTTP_LLM_FULL    ((int64_t) 1 << 62)
#define NGX_HTTP_LLM_IDLE    120000            /* ms: evictable after it */


static ngx_int_t ngx_http_llm_init_zone(ngx_shm_zone_t *shm_zone,
    void *data);
static void ngx_http_llm_limit_rbtree_insert(ngx_rbtree_node_t *temp,
    ngx_rbtree_node_t *node, ngx_rbtree_node_t *sentinel);
static ngx_http_llm_limit_node_t *ngx_http_llm_limit_lookup(
    ngx_http_llm_zone_t *zone, u_char *hash, ngx_uint_t create);
static void ngx_http_llm_limit_refill(ngx_http_llm_limit_node_t *lnode,
    ngx_http_llm_key_t *key);
static ngx_msec_t ngx_http_llm_limit_wait(int64_t level, int64_t need,
    ngx_uint_t rate);
static ngx_int_t ngx_http_llm_limit_check(ngx_http_llm_limit_node_t *ln,
    ngx_http_llm_key_t *key, ngx_uint_t prompt, ngx_uint_t output,
    ngx_uint_t explicit, ngx_http_llm_decision_t *d, ngx_uint_t *left);
static ngx_uint_t ngx_http_llm_limit_take(ngx_http_llm_limit_node_t *ln,
    ngx_http_llm_key_t *key, ngx_uint_t prompt, ngx_uint_t output,
    ngx_uint_t left, ngx_http_llm_ticket_t *t);
static void ngx_http_llm_limit_fill(ngx_http_llm_ticket_t *t,
    ngx_http_llm_limit_node_t *lnode, ngx_http_llm_key_t *key);


/*
 * llm_zone NAME SIZE: creates the zone (limits and metrics).  The zone
 * survives a reload when its name and size stay the same.
 */

char *
ngx_http_llm_zone(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_llm_keys_main_conf_t *kmcf = conf;

    ssize_t               size;
    ngx_str_t            *value;
    ngx_shm_zone_t       *shm_zone, **zp;
    ngx_http_llm_zone_t  *zone;

    value = cf->args->elts;

    size = ngx_parse_size(&value[2]);

    if (size == NGX_ERROR) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "invalid zone size \"%V\"", &value[2]);
        return NGX_CONF_ERROR;
    }

    if (size < (ssize_t) (16 * ngx_pagesize)
        || (size_t) size < 2 * sizeof(ngx_http_llm_shctx_t))
    {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "llm_zone \"%V\" is too small (at least %uzk)",
                           &value[1],
                           ngx_max(16 * ngx_pagesize,
                                   2 * sizeof(ngx_http_llm_shctx_t))
                           / 1024 + 1);
        return NGX_CONF_ERROR;
    }

    zone = ngx_pcalloc(cf->pool, sizeof(ngx_http_llm_zone_t));
    if (zone == NULL) {
        return NGX_CONF_ERROR;
    }

    zone->name = value[1];

    shm_zone = ngx_shared_memory_add(cf, &value[1], size,
                                     &ngx_http_llm_keys_module);
    if (shm_zone == NULL) {
        return NGX_CONF_ERROR;
    }

    if (shm_zone->data) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "duplicate llm_zone \"%V\"", &value[1]);
        return NGX_CONF_ERROR;
    }

    shm_zone->init = ngx_http_llm_init_zone;
    shm_zone->data = zone;

    zp = ngx_array_push(&kmcf->zones);
    if (zp == NULL) {
        return NGX_CONF_ERROR;
    }

    *zp = shm_zone;

    return NGX_CONF_OK;
}


static ngx_int_t
ngx_http_llm_init_zone(ngx_shm_zone_t *shm_zone, void *data)
{
    ngx_http_llm_zone_t  *ozone = data;

    size_t                len;
    ngx_slab_pool_t      *shpool;
    ngx_http_llm_zone_t  *zone;

    zone = shm_zone->data;

    if (ozone) {
        /* a reload: keep the counters */
        zone->sh = ozone->sh;
        zone->shpool = ozone->shpool;
        zone->sh->reloads++;
        return NGX_OK;
    }

    shpool = (ngx_slab_pool_t *) shm_zone->shm.addr;

    if (shm_zone->shm.exists) {
        zone->shpool = shpool;
        zone->sh = shpool->data;
        return NGX_OK;
    }

    zone->shpool = shpool;

    zone->sh = ngx_slab_alloc(shpool, sizeof(ngx_http_llm_shctx_t));
    if (zone->sh == NULL) {
        return NGX_ERROR;
    }

    ngx_memzero(zone->sh, sizeof(ngx_http_llm_shctx_t));

    shpool->data = zone->sh;

    ngx_rbtree_init(&zone->sh->rbtree, &zone->sh->sentinel,
                    ngx_http_llm_limit_rbtree_insert);

    ngx_queue_init(&zone->sh->queue);

    zone->sh->started = ngx_time();

    len = sizeof(" in llm_zone \"\"") + shm_zone->shm.name.len;

    shpool->log_ctx = ngx_slab_alloc(shpool, len);
    if (shpool->log_ctx == NULL) {
        return NGX_ERROR;
    }

    ngx_sprintf(shpool->log_ctx, " in llm_zone \"%V\"%Z",
                &shm_zone->shm.name);

    shpool->log_nomem = 0;

    return NGX_OK;
}


static void
ngx_http_llm_limit_rbtree_insert(ngx_rbtree_node_t *temp,
    ngx_rbtree_node_t *node, ngx_rbtree_node_t *sentinel)
{
    ngx_rbtree_node_t          **p;
    ngx_http_llm_limit_node_t   *ln, *lnt;

    for ( ;; ) {

        if (node->key < temp->key) {
            p = &temp->left;

        } else if (node->key > temp->key) {
            p = &temp->right;

        } else {
            ln = (ngx_http_llm_limit_node_t *) node;
            lnt = (ngx_http_llm_limit_node_t *) temp;

            p = (ngx_memcmp(ln->hash, lnt->hash, 32) < 0)
                ? &temp->left : &temp->right;
        }

        if (*p == sentinel) {
            break;
        }

        temp = *p;
    }

    *p = node;
    node->parent = temp;
    node->left = sentinel;
    node->right = sentinel;
    ngx_rbt_red(node);
}


/*
 * Finds the node of a key hash, creating it with full buckets when
 * create is set.  When the slab is full, nodes idle for longer than
 * NGX_HTTP_LLM_IDLE (their buckets would be full again) and without a
 * quota are evicted from the LRU tail.  Called with the zone locked;
 * returns NULL when the zone is full.
 */

static ngx_http_llm_limit_node_t *
ngx_http_llm_limit_lookup(ngx_http_llm_zone_t *zone, u_char *hash,
    ngx_uint_t create)
{
    ngx_int_t                   rc;
    ngx_uint_t                  tries;
    ngx_queue_t                *q;
    ngx_rbtree_key_t            k;
    ngx_rbtree_node_t          *node, *sentinel;
    ngx_http_llm_limit_node_t  *ln;

    ngx_memcpy(&k, hash, sizeof(ngx_rbtree_key_t));

    node = zone->sh->rbtree.root;
    sentinel = zone->sh->rbtree.sentinel;

    while (node != sentinel) {

        if (k < node->key) {
            node = node->left;
            continue;
        }

        if (k > node->key) {
            node = node->right;
            continue;
        }

        ln = (ngx_http_llm_limit_node_t *) node;

        rc = ngx_memcmp(hash, ln->hash, 32);

        if (rc == 0) {
            ngx_queue_remove(&ln->queue);
            ngx_queue_insert_head(&zone->sh->queue, &ln->queue);
            return ln;
        }

        node = (rc < 0) ? node->left : node->right;
    }

    if (!create) {
        return NULL;
    }

    for (tries = 0; /* void */ ; tries++) {

        ln = ngx_slab_alloc_locked(zone->shpool,
                                   sizeof(ngx_http_llm_limit_node_t));
        if (ln != NULL) {
            break;
        }

        if (tries == 16 || ngx_queue_empty(&zone->sh->queue)) {
            return NULL;
        }

        /* evict one idle node without a quota from the tail */

        for (q = ngx_queue_last(&zone->sh->queue);
             q != ngx_queue_sentinel(&zone->sh->queue);
             q = ngx_queue_prev(q))
        {
            ln = ngx_queue_data(q, ngx_http_llm_limit_node_t, queue);

            if ((ngx_msec_int_t) (ngx_current_msec - ln->last)
                < NGX_HTTP_LLM_IDLE)
            {
                /* the rest are more recent */
                return NULL;
            }

            if (!ln->has_quota) {
                break;
            }
        }

        if (q == ngx_queue_sentinel(&zone->sh->queue)) {
            return NULL;
        }

        ngx_queue_remove(q);
        ngx_rbtree_delete(&zone->sh->rbtree, &ln->node);
        ngx_slab_free_locked(zone->shpool, ln);
    }

    ngx_memzero(ln, sizeof(ngx_http_llm_limit_node_t));

    ln->node.key = k;
    ngx_memcpy(ln->hash, hash, 32);
    ln->req_level = NGX_HTTP_LLM_FULL;
    ln->tok_level = NGX_HTTP_LLM_FULL;
    ln->last = ngx_current_msec;

    ngx_rbtree_insert(&zone->sh->rbtree, &ln->node);
    ngx_queue_insert_head(&zone->sh->queue, &ln->queue);

    return ln;
}


/*
 * Refills both buckets for the time since the last refill; zone locked.
 * When a reload changed a limit, the bucket moves by the change of its
 * capacity: what was used stays used, the rest follows the new limit.
 */

static void
ngx_http_llm_limit_refill(ngx_http_llm_limit_node_t *ln,
    ngx_http_llm_key_t *key)
{
    int64_t         cap;
    ngx_msec_int_t  elapsed;

    cap = (int64_t) key->rpm * NGX_HTTP_LLM_UNIT;

    if (cap != ln->req_cap) {
        if (ln->req_cap && cap && ln->req_level < ln->req_cap) {
            ln->req_level += cap - ln->req_cap;

        } else {
            ln->req_level = NGX_HTTP_LLM_FULL;
        }

        ln->req_cap = cap;
    }

    cap = (int64_t) key->tpm * NGX_HTTP_LLM_UNIT;

    if (cap != ln->tok_cap) {
        if (ln->tok_cap && cap && ln->tok_level < ln->tok_cap) {
            ln->tok_level += cap - ln->tok_cap;

        } else {
            ln->tok_level = NGX_HTTP_LLM_FULL;
        }

        ln->tok_cap = cap;
    }

    elapsed = (ngx_msec_int_t) (ngx_current_msec - ln->last);

    if (elapsed < 0) {
        elapsed = 0;
    }

    if (elapsed > 2 * NGX_HTTP_LLM_UNIT) {
        elapsed = 2 * NGX_HTTP_LLM_UNIT;
    }

    ln->last = ngx_current_msec;

    if (key->rpm) {
        cap = (int64_t) key->rpm * NGX_HTTP_LLM_UNIT;
        ln->req_level += (int64_t) elapsed * key->rpm;

        if (ln->req_level > cap) {
            ln->req_level = cap;
        }
    }

    if (key->tpm) {
        cap = (int64_t) key->tpm * NGX_HTTP_LLM_UNIT;
        ln->tok_level += (int64_t) elapsed * key->tpm;

        if (ln->tok_level > cap) {
            ln->tok_level = cap;
        }
    }

    ln->has_quota = (key->quota != 0 || key->budget != 0);
}


/* Milliseconds until a bucket at level refilling rate/ms holds need. */

static ngx_msec_t
ngx_http_llm_limit_wait(int64_t level, int64_t need, ngx_uint_t rate)
{
    if (level >= need || rate == 0) {
        return 0;
    }

    return (ngx_msec_t) ((need - level + (int64_t) rate - 1) / (int64_t) rate);
}


/* The x-ratelimit-* values from the buckets; zone locked. */

static void
ngx_http_llm_limit_fill(ngx_http_llm_ticket_t *t,
    ngx_http_llm_limit_node_t *ln, ngx_http_llm_key_t *key)
{
    int64_t  cap;

    if (key->rpm) {
        cap = (int64_t) key->rpm * NGX_HTTP_LLM_UNIT;
        t->limit_requests = key->rpm;
        t->remaining_requests = ln->req_level > 0
                                ? (ngx_uint_t) (ln->req_level
                                                / NGX_HTTP_LLM_UNIT)
                                : 0;
        t->reset_requests = ngx_http_llm_limit_wait(ln->req_level, cap,
                                                    key->rpm);
    }

    if (key->tpm) {
        cap = (int64_t) key->tpm * NGX_HTTP_LLM_UNIT;
        t->limit_tokens = key->tpm;
        t->remaining_tokens = ln->tok_level > 0
                              ? (ngx_uint_t) (ln->tok_level
                                              / NGX_HTTP_LLM_UNIT)
                              : 0;
        t->reset_tokens = ngx_http_llm_limit_wait(ln->tok_level, cap,
                                                  key->tpm);
    }
}


/*
 * Admits one request (contract in ngx_http_llm_module.h).  Checked in
 * this order: the quota, requests/min, tokens/min; nothing is taken from
 * any bucket unless all three pass.  Without a key or a zone the request
 * is admitted with an empty ticket (no headers).
 */

ngx_int_t
ngx_http_llm_limit_admit(ngx_http_request_t *r, ngx_http_llm_key_t *key,
    ngx_uint_t prompt, ngx_uint_t output, ngx_uint_t explicit,
    ngx_http_llm_ticket_t *t, ngx_http_llm_decision_t *d)
{
    ngx_uint_t                     reserve, left;
    ngx_http_llm_zone_t           *zone;
    ngx_http_llm_keys_ctx_t       *ctx;
    ngx_http_llm_limit_node_t     *ln;
    ngx_http_llm_keys_loc_conf_t  *klcf;

    ngx_memzero(t, sizeof(ngx_http_llm_ticket_t));
    ngx_memzero(d, sizeof(ngx_http_llm_decision_t));
    t->key = key;
    d->key = key;

    klcf = ngx_http_get_module_loc_conf(r, ngx_http_llm_keys_module);

    if (key == NULL || klcf->shm_zone == NULL) {
        return NGX_OK;
    }

    ctx = ngx_http_llm_keys_get_ctx(r);
    if (ctx == NULL) {
        return NGX_ERROR;
    }

    ctx->ticket = t;
    ctx->shm_zone = klcf->shm_zone;

    zone = klcf->shm_zone->data;

    ngx_shmtx_lock(&zone->shpool->mutex);

    ln = ngx_http_llm_limit_lookup(zone, key->hash, 1);

    if (ln == NULL) {
        ngx_shmtx_unlock(&zone->shpool->mutex);

        ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                      "llm_zone \"%V\" is full, request of key \"%V\" "
                      "refused", &zone->name, &key->name);

        t->key = NULL;
        d->verdict = NGX_HTTP_LLM_DENY_ZONE_FULL;

        return NGX_OK;
    }

    ngx_http_llm_limit_refill(ln, key);

    if (ngx_http_llm_limit_check(ln, key, prompt, output, explicit, d,
                                 &left)
        != NGX_OK)
    {
        goto reject;
    }

    reserve = ngx_http_llm_limit_take(ln, key, prompt, output, left, t);
    d->verdict = NGX_HTTP_LLM_ALLOW;

    ngx_http_llm_limit_fill(t, ln, key);

    ngx_shmtx_unlock(&zone->shpool->mutex);

    t->reserved = reserve;

    ngx_log_debug5(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "llm limit: key \"%V\" admitted, reserved %ui, output "
                   "cap %ui, remaining %ui requests %ui tokens",
                   &key->name, reserve, t->out_cap, t->remaining_requests,
                   t->remaining_tokens);

    return NGX_OK;

reject:

    ngx_http_llm_limit_fill(t, ln, key);

    zone->sh->rate_limited++;

    ngx_shmtx_unlock(&zone->shpool->mutex);

    ctx->rate_limited = 1;
    t->settled = 1;

    ngx_log_error(NGX_LOG_INFO, r->connection->log, 0,
                  "llm: key \"%V\" rate limited: %s", &key->name,
                  d->verdict == NGX_HTTP_LLM_DENY_QUOTA ? "quota"
                  : d->verdict == NGX_HTTP_LLM_DENY_BUDGET ? "budget"
                  : d->verdict == NGX_HTTP_LLM_DENY_REQUESTS ? "requests/min"
                  : "tokens/min");

    return NGX_OK;
}


/*
 * Whether the key's limits let one more request in now (the node
 * refilled, under the zone's lock): NGX_OK with *left what the key may
 * still spend (NGX_HTTP_LLM_UNBOUNDED: no limit says), or NGX_DECLINED
 * with the refusal in d.
 */

static ngx_int_t
ngx_http_llm_limit_check(ngx_http_llm_limit_node_t *ln,
    ngx_http_llm_key_t *key, ngx_uint_t prompt, ngx_uint_t output,
    ngx_uint_t explicit, ngx_http_llm_decision_t *d, ngx_uint_t *left)
{
    int64_t     need;
    ngx_uint_t  reserve, level;

    d->verdict = NGX_HTTP_LLM_DENY_QUOTA;

    /* left: what the key may still spend now, over every limit it has */

    *left = NGX_HTTP_LLM_UNBOUNDED;

    if (key->budget && ln->spent >= key->budget) {
        d->verdict = NGX_HTTP_LLM_DENY_BUDGET;
        return NGX_DECLINED;
    }

    if (key->quota) {
        if (ln->quota_used >= key->quota) {
            return NGX_DECLINED;
        }

        *left = key->quota - ln->quota_used;
    }

    if (key->rpm && ln->req_level < NGX_HTTP_LLM_UNIT) {
        d->verdict = NGX_HTTP_LLM_DENY_REQUESTS;
        d->wait = ngx_http_llm_limit_wait(ln->req_level, NGX_HTTP_LLM_UNIT,
                                          key->rpm);
        d->used = key->rpm - (ln->req_level > 0
                              ? (ngx_uint_t) (ln->req_level
                                              / NGX_HTTP_LLM_UNIT)
                              : 0);
        d->requested = 1;
        return NGX_DECLINED;
    }

    if (key->tpm) {

        /*
         * An explicit max_tokens waits until the bucket holds the whole
         * request (at most the bucket's size); without one, the prompt and
         * one token are enough and the output is capped at the rest.
         */

        reserve = explicit ? prompt + output : prompt + 1;

        if (reserve > key->tpm) {
            reserve = key->tpm;
        }

        need = (int64_t) reserve * NGX_HTTP_LLM_UNIT;

        if (ln->tok_level < need) {
            d->verdict = NGX_HTTP_LLM_DENY_TOKENS;
            d->wait = ngx_http_llm_limit_wait(ln->tok_level, need, key->tpm);
            d->used = key->tpm - (ln->tok_level > 0
                                  ? (ngx_uint_t) (ln->tok_level
                                                  / NGX_HTTP_LLM_UNIT)
                                  : 0);
            d->requested = reserve;
            return NGX_DECLINED;
        }

        level = (ngx_uint_t) (ln->tok_level / NGX_HTTP_LLM_UNIT);

        /* an explicit max_tokens waited for its room: only the quota cuts */

        if (!explicit && level < *left) {
            *left = level;
        }
    }

    return NGX_OK;
}


/*
 * Takes the admitted request from the node's buckets: the prompt and the
 * output it may generate, capped at what is left (t->out_cap when the
 * cap cuts).  Returns the tokens reserved.
 */

static ngx_uint_t
ngx_http_llm_limit_take(ngx_http_llm_limit_node_t *ln,
    ngx_http_llm_key_t *key, ngx_uint_t prompt, ngx_uint_t output,
    ngx_uint_t left, ngx_http_llm_ticket_t *t)
{
    ngx_uint_t  reserve, allowed;

    /* the output it may generate: never past what is left */

    allowed = output;

    if (left != NGX_HTTP_LLM_UNBOUNDED) {
        if (left > prompt) {
            allowed = ngx_min(output, left - prompt);

        } else {
            /* the prompt estimate alone fills it: one token, then stop */
            allowed = 1;
        }
    }

    if (allowed < output) {
        t->out_cap = allowed;
    }

    reserve = (allowed == NGX_HTTP_LLM_UNBOUNDED) ? prompt : prompt + allowed;

    if (key->rpm) {
        ln->req_level -= NGX_HTTP_LLM_UNIT;
    }

    if (key->tpm) {
        t->tok_reserved = ngx_min(reserve, key->tpm);
        ln->tok_level -= (int64_t) t->tok_reserved * NGX_HTTP_LLM_UNIT;
    }

    ln->quota_used += reserve;
    ln->requests++;

    return reserve;
}


/*
 * Settles a ticket (contract in ngx_http_llm_module.h): the tokens/min
 * bucket gets back the reservation and pays used_tokens; the quota is
 * charged used_tokens instead of the estimate.  A ticket never settled
 * (a request cut off without usage) keeps its reservation as its charge.
 */

void
ngx_http_llm_limit_settle(ngx_http_request_t *r, ngx_http_llm_ticket_t *t,
    ngx_uint_t used_tokens, uint64_t cost)
{
    int64_t                        cap;
    ngx_uint_t                     reserve;
    ngx_shm_zone_t                *shm_zone;
    ngx_http_llm_key_t            *key;
    ngx_http_llm_zone_t           *zone;
    ngx_http_llm_keys_ctx_t       *ctx;
    ngx_http_llm_limit_node_t     *ln;
    ngx_http_llm_keys_loc_conf_t  *klcf;

    if (t == NULL || t->settled || t->key == NULL) {
        return;
    }

    t->settled = 1;
    key = t->key;

    ctx = ngx_http_get_module_ctx(r, ngx_http_llm_keys_module);

    if (ctx && ctx->shm_zone) {
        shm_zone = ctx->shm_zone;

    } else {
        klcf = ngx_http_get_module_loc_conf(r, ngx_http_llm_keys_module);
        shm_zone = klcf->shm_zone;
    }

    if (shm_zone == NULL) {
        return;
    }

    zone = shm_zone->data;

    reserve = t->tok_reserved;

    ngx_shmtx_lock(&zone->shpool->mutex);

    ln = ngx_http_llm_limit_lookup(zone, key->hash, 0);

    if (ln != NULL) {
        ngx_http_llm_limit_refill(ln, key);

        if (key->tpm) {
            cap = (int64_t) key->tpm * NGX_HTTP_LLM_UNIT;
            ln->tok_level += ((int64_t) reserve - (int64_t) used_tokens)
                             * NGX_HTTP_LLM_UNIT;

            if (ln->tok_level > cap) {
                ln->tok_level = cap;
            }
        }

        if (ln->quota_used >= t->reserved) {
            ln->quota_used -= t->reserved;

        } else {
            ln->quota_used = 0;
        }

        ln->quota_used += used_tokens;
        ln->spent += cost;
    }

    ngx_shmtx_unlock(&zone->shpool->mutex);

    ngx_http_llm_store_settle(r, t, used_tokens, cost);

    ngx_log_debug3(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "llm limit: key \"%V\" settled %ui of %ui reserved",
                   &key->name, used_tokens, t->reserved);
}


/*
 * Adds the x-ratelimit-* headers for the limits the key has (a limit of 0,
 * unlimited, gets none).  Once per request: a second call, e.g. from
 * ngx_http_llm_send_error() after ngx_http_llm_send_denial() added them
 * to a 429, does nothing.
 */

ngx_int_t
ngx_http_llm_limit_headers(ngx_http_request_t *r, ngx_http_llm_ticket_t *t)
{
    u_char                   *p;
    ngx_http_llm_keys_ctx_t  *ctx;

    if (t == NULL || t->key == NULL
        || (t->limit_requests == 0 && t->limit_tokens == 0))
    {
        return NGX_OK;
    }

    ctx = ngx_http_llm_keys_get_ctx(r);
    if (ctx == NULL) {
        return NGX_ERROR;
    }

    if (ctx->headers) {
        return NGX_OK;
    }

    ctx->headers = 1;

    p = ngx_pnalloc(r->pool, 6 * (NGX_INT_T_LEN + 16));
    if (p == NULL) {
        return NGX_ERROR;
    }

    if (t->limit_requests) {
        if (ngx_http_llm_header_out(r, "x-ratelimit-limit-requests", p,
                                    ngx_sprintf(p, "%ui", t->limit_requests)
                                    - p)
            != NGX_OK)
        {
            return NGX_ERROR;
        }

        p += NGX_INT_T_LEN + 16;

        if (ngx_http_llm_header_out(r, "x-ratelimit-remaining-requests", p,
                                    ngx_sprintf(p, "%ui",
                                                t->remaining_requests)
                                    - p)
            != NGX_OK)
        {
            return NGX_ERROR;
        }

        p += NGX_INT_T_LEN + 16;

        if (ngx_http_llm_header_out(r, "x-ratelimit-reset-requests", p,
                                    ngx_http_llm_format_duration(p,
                                                t->reset_requests))
            != NGX_OK)
        {
            return NGX_ERROR;
        }

        p += NGX_INT_T_LEN + 16;
    }

    if (t->limit_tokens) {
        if (ngx_http_llm_header_out(r, "x-ratelimit-limit-tokens", p,
                                    ngx_sprintf(p, "%ui", t->limit_tokens)
                                    - p)
            != NGX_OK)
        {
            return NGX_ERROR;
        }

        p += NGX_INT_T_LEN + 16;

        if (ngx_http_llm_header_out(r, "x-ratelimit-remaining-tokens", p,
                                    ngx_sprintf(p, "%ui",
                                                t->remaining_tokens)
                                    - p)
            != NGX_OK)
        {
            return NGX_ERROR;
        }

        p += NGX_INT_T_LEN + 16;

        if (ngx_http_llm_header_out(r, "x-ratelimit-reset-tokens", p,
                                    ngx_http_llm_format_duration(p,
                                                t->reset_tokens))
            != NGX_OK)
        {
            return NGX_ERROR;
        }
    }

    return NGX_OK;
}


/*
 * Writes ms as Go's time.Duration prints it, which is what OpenAI's
 * x-ratelimit-reset-* carry: "0s", "250ms", "1s", "1.5s", "6m0s",
 * "1h2m3s".  buf must hold NGX_INT_T_LEN + 16 bytes; returns the length
 * (no terminating zero).
 */

size_t
ngx_http_llm_format_duration(u_char *buf, ngx_msec_t ms)
{
    u_char      *p;
    ngx_uint_t   h, m, s, f;

    if (ms == 0) {
        return ngx_cpymem(buf, "0s", 2) - buf;
    }

    if (ms < 1000) {
        return ngx_sprintf(buf, "%Mms", ms) - buf;
    }

    h = ms / 3600000;
    m = ms / 60000 % 60;
    s = ms / 1000 % 60;
    f = ms % 1000;

    p = buf;

    if (h) {
        p = ngx_sprintf(p, "%uih", h);
    }

    if (h || m) {
        p = ngx_sprintf(p, "%uim", m);
    }

    p = ngx_sprintf(p, "%ui", s);

    if (f) {
        if (f % 100 == 0) {
            p = ngx_sprintf(p, ".%ui", f / 100);

        } else if (f % 10 == 0) {
            p = ngx_sprintf(p, ".%02ui", f / 10);

        } else {
            p = ngx_sprintf(p, ".%03ui", f);
        }
    }

    *p++ = 's';

    return p - buf;
}


/*
 * Picodollars (a token at a price of N dollars per million tokens costs N
 * microdollars per million, i.e. N * 10^6 picodollars... per token: the
 * price in microdollars) as dollars with 9 decimals, NUL-terminated.
 */

u_char *
ngx_http_llm_format_cost(u_char *buf, uint64_t pico)
{
    u_char  *p;

    p = ngx_sprintf(buf, "%uL.%09uL", pico / 1000000000000ULL,
                    (pico / 1000) % 1000000000ULL);
    *p = '\0';

    return p;
}
