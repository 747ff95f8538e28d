
/*
 * ngx_http_llm_keys_module: declarations shared by its three files.
 *
 *   ngx_http_llm_keys.c     the module, its directives, the keys file,
 *                           ngx_http_llm_auth(), ngx_http_llm_key_allows()
 *   ngx_http_llm_limit.c    the shared zone (llm_zone), per-key token
 *                           buckets, ngx_http_llm_limit_*()
 *   ngx_http_llm_metrics.c  counters in the same zone, Prometheus text
 *
 * The public contract with ngx_http_llm_module is ngx_http_llm_module.h;
 * this header is internal to the keys module, except for the functions
 * marked "for ngx_http_llm_module" below.
 */


#ifndef _NGX_HTTP_LLM_KEYS_H_INCLUDED_
#define _NGX_HTTP_LLM_KEYS_H_INCLUDED_


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "ngx_http_llm_module.h"


/* Metrics label sets are bounded: this many models, then "other". */
#define NGX_HTTP_LLM_METRICS_MODELS     32
#define NGX_HTTP_LLM_METRICS_MODEL_LEN  64
#define NGX_HTTP_LLM_METRICS_STATUSES   16
#define NGX_HTTP_LLM_TTFT_BUCKETS       12
#define NGX_HTTP_LLM_DURATION_BUCKETS   14


/* The parsed keys file; one per distinct file name in the configuration. */

typedef struct {
    ngx_str_t                   file;      /* the full path */
    ngx_http_llm_key_t         *keys;      /* sorted by hash */
    ngx_uint_t                  nkeys;
} ngx_http_llm_keyset_t;


/* Counters of one model in the zone; name.len == 0: a free slot. */

typedef struct {
    ngx_uint_t                  status;    /* 0: a free slot */
    uint64_t                    count;
} ngx_http_llm_status_count_t;

typedef struct {
    size_t                      len;
    u_char                      name[NGX_HTTP_LLM_METRICS_MODEL_LEN];

    ngx_http_llm_status_count_t status[NGX_HTTP_LLM_METRICS_STATUSES];
    uint64_t                    status_other; /* the table was full */

    uint64_t                    prompt_tokens;
    uint64_t                    completion_tokens;
    uint64_t                    cached_tokens;
    uint64_t                    cost;      /* picodollars */
    uint64_t                    fell_back; /* asked for this model, a
                                              fallback answered */

    uint64_t                    ttft[NGX_HTTP_LLM_TTFT_BUCKETS];
    uint64_t                    ttft_inf;  /* the +Inf bucket: count */
    uint64_t                    ttft_sum;  /* milliseconds */

    uint64_t                    duration[NGX_HTTP_LLM_DURATION_BUCKETS];
    uint64_t                    duration_inf;
    uint64_t                    duration_sum;
} ngx_http_llm_model_stats_t;


/*
 * The shared part of an llm_zone: the per-key rbtree (keyed by the key's
 * SHA-256, so counters follow a key across reloads and keys-file edits)
 * and the metrics.  Everything is read and written under shpool->mutex.
 */

typedef struct {
    ngx_rbtree_t                rbtree;
    ngx_rbtree_node_t           sentinel;
    ngx_queue_t                 queue;     /* LRU of the key nodes */

    time_t                      started;   /* zone creation, for metrics */
    ngx_uint_t                  reloads;   /* times inherited by a reload */

    int64_t                     in_flight;
    uint64_t                    rate_limited;
    uint64_t                    fallbacks;
    uint64_t                    upstream_errors;

    /* models[NGX_HTTP_LLM_METRICS_MODELS] is "other" */
    ngx_http_llm_model_stats_t  models[NGX_HTTP_LLM_METRICS_MODELS + 1];
} ngx_http_llm_shctx_t;


/* Per-key state, one rbtree node per key seen. */

typedef struct {
    ngx_rbtree_node_t           node;      /* node.key: hash bytes 0..7 */
    ngx_queue_t                 queue;
    u_char                      hash[32];

    /*
     * Token buckets in units of 1/60000 request (token): a bucket of a
     * limit of N per minute holds up to N * 60000 and refills N per
     * millisecond.  The level may go below zero when settle charges more
     * tokens than were reserved.
     */
    int64_t                     req_level;
    int64_t                     tok_level;
    int64_t                     req_cap;   /* the caps last applied, so */
    int64_t                     tok_cap;   /* a changed limit keeps usage */
    ngx_msec_t                  last;      /* ngx_current_msec of the refill */
    ngx_uint_t                  has_quota; /* never evicted when set */

    uint64_t                    quota_used; /* tokens, reservations included */
    uint64_t                    spent;      /* picodollars, settled */
    uint64_t                    requests;   /* admitted, for the record */
} ngx_http_llm_limit_node_t;


/* An llm_zone as the configuration sees it. */

typedef struct {
    ngx_http_llm_shctx_t       *sh;
    ngx_slab_pool_t            *shpool;
    ngx_str_t                   name;
} ngx_http_llm_zone_t;


typedef struct {
    ngx_array_t                 keysets;   /* of ngx_http_llm_keyset_t * */
    ngx_array_t                 zones;     /* of ngx_shm_zone_t *, in order */
    struct ngx_http_llm_store_conf_s  *store;  /* llm_limit_store */
} ngx_http_llm_keys_main_conf_t;


ngx_http_llm_key_t *ngx_http_llm_key_by_hash(ngx_http_request_t *r,
    u_char *hash);


typedef struct {
    ngx_http_llm_keyset_t      *keyset;    /* NULL: open access */
    ngx_shm_zone_t             *shm_zone;  /* NULL: no limits, no metrics */
    ngx_flag_t                  metrics;   /* llm_metrics here */
    ngx_uint_t                  keys_set;  /* llm_keys given (maybe "off") */
    ngx_uint_t                  zone_set;  /* llm_limit_zone given */
} ngx_http_llm_keys_loc_conf_t;


/* Per request state of the keys module. */

typedef struct {
    ngx_http_llm_key_t         *key;       /* authenticated key */
    ngx_shm_zone_t             *shm_zone;  /* where the ticket was taken */
    ngx_http_llm_ticket_t      *ticket;
    ngx_int_t                   in_flight; /* our share of in_flight */
    unsigned                    headers:1; /* x-ratelimit-* added */
    unsigned                    rate_limited:1;
    unsigned                    recorded:1;
    unsigned                    cleanup:1;
} ngx_http_llm_keys_ctx_t;


/* ngx_http_llm_keys.c */
ngx_http_llm_keys_ctx_t *ngx_http_llm_keys_get_ctx(ngx_http_request_t *r);

/*
 * For ngx_http_llm_module: the key authenticated for r by
 * ngx_http_llm_auth(), or NULL (e.g. for $llm_key_name).
 */
ngx_http_llm_key_t *ngx_http_llm_request_key(ngx_http_request_t *r);

/* ngx_http_llm_limit.c */
char *ngx_http_llm_zone(ngx_conf_t *cf, ngx_command_t *cmd, void *conf);

/* ngx_http_llm_metrics.c */
ngx_int_t ngx_http_llm_metrics_handler(ngx_http_request_t *r);


#endif /* _NGX_HTTP_LLM_KEYS_H_INCLUDED_ */
