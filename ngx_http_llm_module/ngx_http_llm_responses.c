
/*
 * ngx_http_llm_module: POST /v1/responses, OpenAI's Responses API for
 * text models, as a dialect over the chat route.  The request (input as a
 * string or items, instructions, function tools, tool_choice, text.format,
 * max_output_tokens, reasoning, the sampling fields) becomes the chat
 * request the module already validates (ngx_http_llm_parse_json), so the
 * engine runs it as any chat request; the answer is the Response object,
 * or its typed event stream (response.created ... response.completed,
 * each with its sequence_number).  Finished responses are kept for a while
 * in a shared zone (llm_responses_store) for previous_response_id and
 * item_reference.
 * JSON is made with jansson (strings from the engine through
 * ngx_http_llm_json_text, which never fails on bad UTF-8).
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "ngx_http_llm_module.h"


/* 0.7 as 0.7, not 0.69999999999999996 */
#define NGX_HTTP_LLM_RESP_DUMP       (JSON_COMPACT | JSON_REAL_PRECISION(15))

#define NGX_HTTP_LLM_RESP_NONE       0
#define NGX_HTTP_LLM_RESP_REASONING  1
#define NGX_HTTP_LLM_RESP_MESSAGE    2
#define NGX_HTTP_LLM_RESP_CALL       3


typedef struct {
    json_t                        *resp;      /* the Response being made */
    json_t                        *output;    /* its output items */
    json_t                        *item;      /* stream: the open item */
    ngx_http_llm_sbuf_t            text;      /* the open item's text */
    ngx_uint_t                     kind;      /* NGX_HTTP_LLM_RESP_* */
    ngx_uint_t                     call_index;
    ngx_uint_t                     seq;       /* sequence_number */
    json_t                        *conv;      /* the conversation's items */
    ngx_uint_t                     n_prev;    /* of previous_response_id */
    unsigned                       started:1;
    unsigned                       has_store:1;  /* llm_responses_store */
    unsigned                       store:1;   /* this one is kept */
} ngx_http_llm_resp_t;


/*
 * The store (llm_responses_store): output items by their id, for
 * item_reference, and each response's conversation (its input items and
 * output) by the response id, for previous_response_id; JSON text in a
 * shared zone, kept for a lifetime, the oldest dropped when full.
 */

typedef struct {
    ngx_rbtree_t                   rbtree;
    ngx_rbtree_node_t              sentinel;
    ngx_queue_t                    lru;       /* the newest first */
} ngx_http_llm_store_sh_t;


typedef struct {
    ngx_str_node_t                 sn;        /* sn.str: the id */
    ngx_queue_t                    queue;
    time_t                         expires;
    size_t                         len;       /* of the JSON */
    u_char                         data[1];   /* the id, then the JSON */
} ngx_http_llm_store_node_t;


#define NGX_HTTP_LLM_STORE_SIZE  (4 * 1024 * 1024)
#define NGX_HTTP_LLM_STORE_TTL   3600


static ngx_int_t ngx_http_llm_resp_bad(ngx_http_request_t *r,
    ngx_http_llm_error_t *err, const char *code, const char *param,
    const char *fmt, ...);
static ngx_int_t ngx_http_llm_resp_bad_type(ngx_http_request_t *r,
    ngx_http_llm_error_t *err, const char *param, const char *expected,
    json_t *j);
static ngx_int_t ngx_http_llm_resp_enum(ngx_http_request_t *r,
    ngx_http_llm_error_t *err, json_t *j, const char *param,
    const char *const *values, const char **out);
static json_t *ngx_http_llm_resp_new_id(const char *prefix);
static void ngx_http_llm_resp_cleanup(void *data);
static ngx_int_t ngx_http_llm_store_init_zone(ngx_shm_zone_t *shm_zone,
    void *data);
static void ngx_http_llm_store_delete(ngx_http_llm_store_sh_t *sh,
    ngx_slab_pool_t *shpool, ngx_http_llm_store_node_t *node);
static void ngx_http_llm_store_expire(ngx_http_llm_store_sh_t *sh,
    ngx_slab_pool_t *shpool);
static void ngx_http_llm_store_put(ngx_http_request_t *r, json_t *id,
    json_t *json);
static json_t *ngx_http_llm_store_get(ngx_http_request_t *r, const char *id);
static void ngx_http_llm_store_response(ngx_http_request_t *r,
    ngx_http_llm_resp_t *st);
static void ngx_http_llm_resp_json_cleanup(void *data);
static ngx_int_t ngx_http_llm_resp_content(ngx_http_request_t *r,
    json_t *content, ngx_uint_t i, json_t **out, ngx_http_llm_error_t *err);
static ngx_int_t ngx_http_llm_resp_message(ngx_http_request_t *r,
    json_t *item, ngx_uint_t i, json_t *msgs, ngx_http_llm_error_t *err);
static ngx_int_t ngx_http_llm_resp_member(ngx_http_request_t *r, json_t *item,
    ngx_uint_t i, const char *name, json_t **out, ngx_http_llm_error_t *err);
static ngx_int_t ngx_http_llm_resp_call(ngx_http_request_t *r, json_t *item,
    ngx_uint_t i, json_t *msgs, ngx_http_llm_error_t *err);
static ngx_int_t ngx_http_llm_resp_call_output(ngx_http_request_t *r,
    json_t *item, ngx_uint_t i, json_t *msgs, ngx_http_llm_error_t *err);
static ngx_int_t ngx_http_llm_resp_item(ngx_http_request_t *r, json_t *item,
    ngx_uint_t i, json_t *msgs, ngx_http_llm_error_t *err);
static ngx_int_t ngx_http_llm_resp_conv(ngx_http_request_t *r,
    ngx_http_llm_resp_t *st, json_t *root, ngx_http_llm_error_t *err);
static ngx_int_t ngx_http_llm_resp_reference(ngx_http_request_t *r,
    ngx_http_llm_resp_t *st, size_t i, json_t **item,
    ngx_http_llm_error_t *err);
static ngx_int_t ngx_http_llm_resp_input(ngx_http_request_t *r,
    ngx_http_llm_resp_t *st, json_t *root, json_t *chat,
    ngx_http_llm_error_t *err);
static ngx_int_t ngx_http_llm_resp_tools(ngx_http_request_t *r, json_t *root,
    json_t *chat, json_t *echo, ngx_http_llm_error_t *err);
static ngx_int_t ngx_http_llm_resp_tool_choice(ngx_http_request_t *r,
    json_t *root, json_t *chat, json_t *echo, ngx_http_llm_error_t *err);
static ngx_int_t ngx_http_llm_resp_text(ngx_http_request_t *r, json_t *root,
    json_t *chat, json_t *echo, ngx_http_llm_error_t *err);
static ngx_int_t ngx_http_llm_resp_reasoning(ngx_http_request_t *r,
    json_t *root, json_t *chat, json_t *echo, ngx_http_llm_error_t *err);
static ngx_int_t ngx_http_llm_resp_options(ngx_http_request_t *r,
    ngx_http_llm_resp_t *st, json_t *root, json_t *chat, json_t *echo,
    ngx_http_llm_error_t *err);
static ngx_int_t ngx_http_llm_resp_echo(ngx_http_llm_ctx_t *ctx, json_t *root,
    json_t *echo);
static void ngx_http_llm_resp_rename(ngx_pool_t *pool,
    ngx_http_llm_error_t *err);
static u_char *ngx_http_llm_resp_error_json(ngx_pool_t *pool,
    ngx_http_llm_error_t *err, size_t *len);
static ngx_int_t ngx_http_llm_resp_parse(ngx_http_request_t *r,
    ngx_http_llm_ctx_t *ctx, u_char *body, size_t len,
    ngx_http_llm_error_t *err);
static ngx_int_t ngx_http_llm_resp_finish(ngx_http_llm_ctx_t *ctx,
    ngx_http_llm_resp_t *st, const char *status, const char *reason,
    json_t *error);
static const char *ngx_http_llm_resp_status(Llm__FinishReason f,
    const char **reason);
static json_t *ngx_http_llm_resp_text_part(json_t *text);
static ngx_int_t ngx_http_llm_resp_body(ngx_http_request_t *r,
    ngx_http_llm_ctx_t *ctx, ngx_str_t *body);
static ngx_int_t ngx_http_llm_resp_emit(ngx_http_request_t *r,
    ngx_http_llm_resp_t *st, ngx_chain_t ***ll, json_t *ev, ngx_uint_t flush);
static ngx_int_t ngx_http_llm_resp_start(ngx_http_request_t *r,
    ngx_http_llm_ctx_t *ctx, ngx_http_llm_resp_t *st, ngx_chain_t ***ll);
static ngx_int_t ngx_http_llm_resp_open(ngx_http_request_t *r,
    ngx_http_llm_resp_t *st, ngx_chain_t ***ll, ngx_uint_t kind,
    Llm__ToolCallDelta *t);
static ngx_int_t ngx_http_llm_resp_close(ngx_http_request_t *r,
    ngx_http_llm_resp_t *st, ngx_chain_t ***ll, const char *status);
static ngx_int_t ngx_http_llm_resp_delta(ngx_http_request_t *r,
    ngx_http_llm_resp_t *st, ngx_chain_t ***ll, const char *s);
static ngx_int_t ngx_http_llm_resp_done(ngx_http_request_t *r,
    ngx_http_llm_ctx_t *ctx, ngx_http_llm_resp_t *st, Llm__Done *done,
    ngx_chain_t ***ll);
static ngx_int_t ngx_http_llm_resp_error(ngx_http_request_t *r,
    ngx_http_llm_ctx_t *ctx, ngx_http_llm_resp_t *st, Llm__Error *e,
    ngx_chain_t ***ll);
static ngx_int_t ngx_http_llm_resp_sse(ngx_http_request_t *r,
    ngx_http_llm_ctx_t *ctx, Llm__Event *ev, ngx_chain_t ***ll);


ngx_http_llm_dialect_t  ngx_http_llm_responses_dialect = {
    "responses",
    "resp_",
    ngx_http_llm_resp_parse,
    ngx_http_llm_resp_body,
    ngx_http_llm_resp_sse,
    ngx_http_llm_resp_error_json
};


/* the fields that mean the same in a chat request, handed over as they
 * are (so their errors name them as the client wrote them) */

static const char *const  ngx_http_llm_resp_same[] = {
    "model", "stream", "temperature", "top_p", "top_k", "min_p", "seed",
    "presence_penalty", "frequency_penalty", "repetition_penalty",
    "ignore_eos", "stop", "logit_bias", "user", "parallel_tool_calls",
    "service_tier", "chat_template_kwargs", NULL
};


static const char *const  ngx_http_llm_resp_efforts[] = {
    "none", "minimal", "low", "medium", "high", "xhigh", "max", NULL
};

static const char *const  ngx_http_llm_resp_summaries[] = {
    "auto", "concise", "detailed", NULL
};


/* A 400 invalid_request_error; param and message copied into r->pool. */

static ngx_int_t
ngx_http_llm_resp_bad(ngx_http_request_t *r, ngx_http_llm_error_t *err,
    const char *code, const char *param, const char *fmt, ...)
{
    u_char   *p, *q;
    size_t    n;
    va_list   args;

    p = ngx_pnalloc(r->pool, 1024);
    if (p == NULL) {
        return NGX_ERROR;
    }

    err->status = NGX_HTTP_BAD_REQUEST;
    err->type = "invalid_request_error";
    err->code = code;
    err->param = NULL;
    err->message.data = p;

    va_start(args, fmt);
    err->message.len = ngx_vslprintf(p, p + 1024, fmt, args) - p;
    va_end(args);

    if (param) {
        n = ngx_strlen(param);
        q = ngx_pnalloc(r->pool, n + 1);
        if (q == NULL) {
            return NGX_ERROR;
        }

        ngx_memcpy(q, param, n + 1);
        err->param = (char *) q;
    }

    return NGX_DECLINED;
}


static ngx_int_t
ngx_http_llm_resp_bad_type(ngx_http_request_t *r, ngx_http_llm_error_t *err,
    const char *param, const char *expected, json_t *j)
{
    return ngx_http_llm_resp_bad(r, err, "invalid_type", param,
                                 "Invalid type for '%s': expected %s, but "
                                 "got %s instead.", param, expected,
                                 ngx_http_llm_json_type_name(j));
}


/*
 * A string field with OpenAI's enum: absent or null is fine (*out NULL),
 * another value a 400 naming the supported ones.
 */

static ngx_int_t
ngx_http_llm_resp_enum(ngx_http_request_t *r, ngx_http_llm_error_t *err,
    json_t *j, const char *param, const char *const *values,
    const char **out)
{
    u_char       list[256], *p, *last;
    ngx_uint_t   i, n;
    const char  *v;

    *out = NULL;

    if (j == NULL || json_is_null(j)) {
        return NGX_OK;
    }

    if (!json_is_string(j)) {
        return ngx_http_llm_resp_bad_type(r, err, param, "a string", j);
    }

    v = json_string_value(j);

    for (n = 0; values[n]; n++) {
        if (ngx_strcmp(v, values[n]) == 0) {
            *out = values[n];
            return NGX_OK;
        }
    }

    p = list;
    last = list + sizeof(list) - 1;

    for (i = 0; i < n; i++) {
        p = ngx_slprintf(p, last, "%s'%s'",
                         i == 0 ? "" : (i + 1 == n ? ", and " : ", "),
                         values[i]);
    }

    *p = '\0';

    return ngx_http_llm_resp_bad(r, err, "invalid_value", param,
                                 "Invalid value: '%s'. Supported values "
                                 "are: %s.", v, list);
}


/* prefix + 24 letters and digits, as the response id, into r->pool */

static json_t *
ngx_http_llm_resp_new_id(const char *prefix)
{
    u_char      id[48], *p;
    ngx_uint_t  i;

    static const char  alnum[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";

    p = ngx_cpymem(id, prefix, ngx_strlen(prefix));

    for (i = 0; i < 24; i++) {
        *p++ = alnum[ngx_random() % 62];
    }

    return json_stringn((const char *) id, p - id);
}


static void
ngx_http_llm_resp_cleanup(void *data)
{
    ngx_http_llm_resp_t  *st = data;

    if (st->resp) {
        json_decref(st->resp);
    }

    if (st->output) {
        json_decref(st->output);
    }

    if (st->item) {
        json_decref(st->item);
    }

    if (st->conv) {
        json_decref(st->conv);
    }
}


/* ------------------------------------------------------------------ */
/* the store                                                           */
/* ------------------------------------------------------------------ */


static ngx_int_t
ngx_http_llm_store_init_zone(ngx_shm_zone_t *shm_zone, void *data)
{
    ngx_slab_pool_t          *shpool;
    ngx_http_llm_store_sh_t  *sh;

    if (data) {
        /* a reload, the same size: the old cycle's items stay */
        shm_zone->data = data;
        return NGX_OK;
    }

    shpool = (ngx_slab_pool_t *) shm_zone->shm.addr;

    if (shm_zone->shm.exists) {
        shm_zone->data = shpool->data;
        return NGX_OK;
    }

    sh = ngx_slab_alloc(shpool, sizeof(ngx_http_llm_store_sh_t));
    if (sh == NULL) {
        return NGX_ERROR;
    }

    ngx_rbtree_init(&sh->rbtree, &sh->sentinel, ngx_str_rbtree_insert_value);
    ngx_queue_init(&sh->lru);

    shpool->data = sh;
    shpool->log_nomem = 0;        /* full: the oldest go */
    shm_zone->data = sh;

    return NGX_OK;
}


/*
 * llm_responses_store off | SIZE [LIFETIME] (http{}); cmd NULL: the
 * default, 4m for an hour.
 */

char *
ngx_http_llm_responses_store(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_llm_main_conf_t *mcf = conf;

    time_t      ttl;
    ssize_t     size;
    ngx_str_t  *value, name;

    if (mcf->responses_set) {
        return "is duplicate";
    }

    mcf->responses_set = 1;
    size = NGX_HTTP_LLM_STORE_SIZE;
    ttl = NGX_HTTP_LLM_STORE_TTL;

    if (cmd) {
        value = cf->args->elts;

        if (ngx_strcmp(value[1].data, "off") == 0) {
            if (cf->args->nelts != 2) {
                return "takes no lifetime with \"off\"";
            }

            mcf->responses_store = NULL;
            return NGX_CONF_OK;
        }

        size = ngx_parse_size(&value[1]);
        if (size == NGX_ERROR || size < (ssize_t) (8 * ngx_pagesize)) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "invalid size \"%V\" of llm_responses_store "
                               "(at least %ui)", &value[1], 8 * ngx_pagesize);
            return NGX_CONF_ERROR;
        }

        if (cf->args->nelts == 3) {
            ttl = ngx_parse_time(&value[2], 1);
            if (ttl == (time_t) NGX_ERROR || ttl == 0) {
                ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                                   "invalid lifetime \"%V\" of "
                                   "llm_responses_store", &value[2]);
                return NGX_CONF_ERROR;
            }
        }
    }

    ngx_str_set(&name, "llm_responses");

    mcf->responses_store = ngx_shared_memory_add(cf, &name, size,
                                                 &ngx_http_llm_module);
    if (mcf->responses_store == NULL) {
        return NGX_CONF_ERROR;
    }

    mcf->responses_store->init = ngx_http_llm_store_init_zone;
    mcf->responses_ttl = ttl;

    return NGX_CONF_OK;
}


static void
ngx_http_llm_store_delete(ngx_http_llm_store_sh_t *sh,
    ngx_slab_pool_t *shpool, ngx_http_llm_store_node_t *node)
{
    ngx_rbtree_delete(&sh->rbtree, &node->sn.node);
    ngx_queue_remove(&node->queue);
    ngx_slab_free_locked(shpool, node);
}


/* The expired ones go (the oldest are last). */

static void
ngx_http_llm_store_expire(ngx_http_llm_store_sh_t *sh,
    ngx_slab_pool_t *shpool)
{
    ngx_queue_t                *q;
    ngx_http_llm_store_node_t  *node;

    while (!ngx_queue_empty(&sh->lru)) {
        q = ngx_queue_last(&sh->lru);
        node = ngx_queue_data(q, ngx_http_llm_store_node_t, queue);

        if (node->expires > ngx_time()) {
            return;
        }

        ngx_http_llm_store_delete(sh, shpool, node);
    }
}


/* Keeps json (dumped) under id; a failure only logs. */

static void
ngx_http_llm_store_put(ngx_http_request_t *r, json_t *id, json_t *json)
{
    char                       *s;
    size_t                      n, idlen, size;
    ngx_str_t                   key;
    ngx_shm_zone_t             *zone;
    ngx_slab_pool_t            *shpool;
    ngx_http_llm_store_sh_t    *sh;
    ngx_http_llm_store_node_t  *node;
    ngx_http_llm_main_conf_t   *mcf;

    mcf = ngx_http_get_module_main_conf(r, ngx_http_llm_module);
    zone = mcf->responses_store;

    if (zone == NULL || !json_is_string(id)) {
        return;
    }

    s = json_dumps(json, NGX_HTTP_LLM_RESP_DUMP);
    if (s == NULL) {
        return;
    }

    key.data = (u_char *) json_string_value(id);
    key.len = json_string_length(id);
    idlen = key.len;
    n = ngx_strlen(s);
    size = offsetof(ngx_http_llm_store_node_t, data) + idlen + n;

    shpool = (ngx_slab_pool_t *) zone->shm.addr;
    sh = zone->data;

    if (size > zone->shm.size / 4) {
        ngx_log_error(NGX_LOG_WARN, r->connection->log, 0,
                      "llm: %V (%uz bytes) is too large for "
                      "llm_responses_store", &key, size);
        free(s);
        return;
    }

    ngx_shmtx_lock(&shpool->mutex);

    ngx_http_llm_store_expire(sh, shpool);

    node = (ngx_http_llm_store_node_t *)
           ngx_str_rbtree_lookup(&sh->rbtree, &key,
                                 ngx_crc32_short(key.data, key.len));
    if (node) {
        ngx_http_llm_store_delete(sh, shpool, node);
    }

    for ( ;; ) {
        node = ngx_slab_alloc_locked(shpool, size);
        if (node || ngx_queue_empty(&sh->lru)) {
            break;
        }

        /* full: the oldest goes */
        ngx_http_llm_store_delete(sh, shpool,
            ngx_queue_data(ngx_queue_last(&sh->lru),
                           ngx_http_llm_store_node_t, queue));
    }

    if (node) {
        ngx_memcpy(node->data, key.data, idlen);
        ngx_memcpy(node->data + idlen, s, n);
        node->sn.str.data = node->data;
        node->sn.str.len = idlen;
        node->sn.node.key = ngx_crc32_short(key.data, key.len);
        node->len = n;
        node->expires = ngx_time() + mcf->responses_ttl;

        ngx_rbtree_insert(&sh->rbtree, &node->sn.node);
        ngx_queue_insert_head(&sh->lru, &node->queue);
    }

    ngx_shmtx_unlock(&shpool->mutex);

    free(s);
}


/* What is kept under id (a new reference, released by the caller), or
 * NULL: unknown, expired, or no memory. */

static json_t *
ngx_http_llm_store_get(ngx_http_request_t *r, const char *id)
{
    u_char                     *copy;
    size_t                      len;
    ngx_str_t                   key;
    ngx_shm_zone_t             *zone;
    ngx_slab_pool_t            *shpool;
    ngx_http_llm_store_sh_t    *sh;
    ngx_http_llm_store_node_t  *node;
    ngx_http_llm_main_conf_t   *mcf;

    mcf = ngx_http_get_module_main_conf(r, ngx_http_llm_module);
    zone = mcf->responses_store;

    key.data = (u_char *) id;
    key.len = ngx_strlen(id);
    copy = NULL;
    len = 0;

    shpool = (ngx_slab_pool_t *) zone->shm.addr;
    sh = zone->data;

    ngx_shmtx_lock(&shpool->mutex);

    node = (ngx_http_llm_store_node_t *)
           ngx_str_rbtree_lookup(&sh->rbtree, &key,
                                 ngx_crc32_short(key.data, key.len));

    if (node && node->expires <= ngx_time()) {
        ngx_http_llm_store_delete(sh, shpool, node);
        node = NULL;
    }

    if (node) {
        len = node->len;
        copy = ngx_pnalloc(r->pool, len);
        if (copy) {
            ngx_memcpy(copy, node->data + node->sn.str.len, len);
        }
    }

    ngx_shmtx_unlock(&shpool->mutex);

    if (copy == NULL) {
        return NULL;
    }

    return json_loadb((const char *) copy, len, 0, NULL);
}


/*
 * Keeps the finished response: each output item under its id, and the
 * conversation (its items and the output) under the response's id.
 */

static void
ngx_http_llm_store_response(ngx_http_request_t *r, ngx_http_llm_resp_t *st)
{
    size_t   i;
    json_t  *item;

    if (!st->store) {
        return;
    }

    json_array_foreach(st->output, i, item) {
        ngx_http_llm_store_put(r, json_object_get(item, "id"), item);
    }

    if (json_array_extend(st->conv, st->output) != 0) {
        return;
    }

    ngx_http_llm_store_put(r, json_object_get(st->resp, "id"), st->conv);
}


static void
ngx_http_llm_resp_json_cleanup(void *data)
{
    json_decref((json_t *) data);
}


/* ------------------------------------------------------------------ */
/* the request                                                         */
/* ------------------------------------------------------------------ */


/*
 * The text parts of a message item's content as chat content parts
 * [{"type":"text","text"}] (a string stays a string); images, files and
 * audio are refused.
 */

static ngx_int_t
ngx_http_llm_resp_content(ngx_http_request_t *r, json_t *content,
    ngx_uint_t i, json_t **out, ngx_http_llm_error_t *err)
{
    u_char       param[96];
    json_t      *part, *t, *text, *parts;
    ngx_uint_t   k;
    const char  *type;

    if (json_is_string(content)) {
        *out = json_incref(content);
        return NGX_OK;
    }

    ngx_sprintf(param, "input[%ui].content%Z", i);

    if (!json_is_array(content)) {
        return ngx_http_llm_resp_bad_type(r, err, (char *) param,
                                          "a string or an array of content "
                                          "parts", content ? content
                                                           : json_null());
    }

    parts = json_array();
    if (parts == NULL) {
        return NGX_ERROR;
    }

    *out = parts;

    json_array_foreach(content, k, part) {
        ngx_sprintf(param, "input[%ui].content[%ui]%Z", i, k);

        if (!json_is_object(part)) {
            return ngx_http_llm_resp_bad_type(r, err, (char *) param,
                                              "an object", part);
        }

        t = json_object_get(part, "type");
        ngx_sprintf(param, "input[%ui].content[%ui].type%Z", i, k);

        if (!json_is_string(t)) {
            return ngx_http_llm_resp_bad(r, err,
                                         "missing_required_parameter",
                                         (char *) param, "Missing required "
                                         "parameter: '%s'.", param);
        }

        type = json_string_value(t);

        if (ngx_strcmp(type, "input_text") == 0
            || ngx_strcmp(type, "output_text") == 0
            || ngx_strcmp(type, "refusal") == 0)
        {
            text = json_object_get(part, type[0] == 'r' ? "refusal"
                                                        : "text");
            if (!json_is_string(text)) {
                ngx_sprintf(param, "input[%ui].content[%ui].%s%Z", i, k,
                            type[0] == 'r' ? "refusal" : "text");
                return ngx_http_llm_resp_bad_type(r, err, (char *) param,
                                                  "a string",
                                                  text ? text : json_null());
            }

            if (json_array_append_new(parts,
                    json_pack("{s:s,s:O}", "type", "text", "text", text))
                != 0)
            {
                return NGX_ERROR;
            }

            continue;
        }

        if (ngx_strcmp(type, "input_image") == 0
            || ngx_strcmp(type, "input_file") == 0
            || ngx_strcmp(type, "input_audio") == 0)
        {
            return ngx_http_llm_resp_bad(r, err, "unsupported_content",
                                         (char *) param, "Unsupported "
                                         "content part type '%s': the "
                                         "model accepts text only.", type);
        }

        return ngx_http_llm_resp_bad(r, err, "invalid_value", (char *) param,
                                     "Invalid value: '%s'. Supported "
                                     "values are: 'input_text', "
                                     "'output_text', and 'refusal'.", type);
    }

    return NGX_OK;
}


/* A message item: {"role","content"}. */

static ngx_int_t
ngx_http_llm_resp_message(ngx_http_request_t *r, json_t *item, ngx_uint_t i,
    json_t *msgs, ngx_http_llm_error_t *err)
{
    u_char       param[64];
    json_t      *content, *m;
    ngx_int_t    rc;
    const char  *role;

    static const char *const  roles[] = {
        "user", "assistant", "system", "developer", NULL
    };

    ngx_sprintf(param, "input[%ui].role%Z", i);

    rc = ngx_http_llm_resp_enum(r, err, json_object_get(item, "role"),
                                (char *) param, roles, &role);
    if (rc != NGX_OK) {
        return rc;
    }

    if (role == NULL) {
        return ngx_http_llm_resp_bad(r, err, "missing_required_parameter",
                                     (char *) param, "Missing required "
                                     "parameter: '%s'.", param);
    }

    content = NULL;

    rc = ngx_http_llm_resp_content(r, json_object_get(item, "content"), i,
                                   &content, err);
    if (rc != NGX_OK) {
        if (content) {
            json_decref(content);
        }

        return rc;
    }

    m = json_pack("{s:s,s:o}", "role", role, "content", content);
    if (m == NULL || json_array_append_new(msgs, m) != 0) {
        return NGX_ERROR;
    }

    return NGX_OK;
}


/* A string member of an item, required: NGX_OK with *out set. */

static ngx_int_t
ngx_http_llm_resp_member(ngx_http_request_t *r, json_t *item, ngx_uint_t i,
    const char *name, json_t **out, ngx_http_llm_error_t *err)
{
    u_char   param[64];
    json_t  *j;

    j = json_object_get(item, name);
    ngx_sprintf(param, "input[%ui].%s%Z", i, name);

    if (j == NULL || json_is_null(j)) {
        return ngx_http_llm_resp_bad(r, err, "missing_required_parameter",
                                     (char *) param, "Missing required "
                                     "parameter: '%s'.", param);
    }

    if (!json_is_string(j)) {
        return ngx_http_llm_resp_bad_type(r, err, (char *) param, "a string",
                                          j);
    }

    *out = j;

    return NGX_OK;
}


/*
 * A function_call item: a tool call of the assistant message before it
 * (consecutive calls are one message's calls), or of a new one.
 */

static ngx_int_t
ngx_http_llm_resp_call(ngx_http_request_t *r, json_t *item, ngx_uint_t i,
    json_t *msgs, ngx_http_llm_error_t *err)
{
    json_t     *call_id, *name, *args, *last, *calls, *call;
    ngx_int_t   rc;

    name = NULL;
    args = NULL;

    rc = ngx_http_llm_resp_member(r, item, i, "call_id", &call_id, err);
    if (rc == NGX_OK) {
        rc = ngx_http_llm_resp_member(r, item, i, "name", &name, err);
    }

    if (rc == NGX_OK) {
        rc = ngx_http_llm_resp_member(r, item, i, "arguments", &args, err);
    }

    if (rc != NGX_OK) {
        return rc;
    }

    call = json_pack("{s:O,s:s,s:{s:O,s:O}}", "id", call_id,
                     "type", "function", "function", "name", name,
                     "arguments", args);
    if (call == NULL) {
        return NGX_ERROR;
    }

    last = json_array_get(msgs, json_array_size(msgs) - 1);

    if (last == NULL
        || ngx_strcmp(json_string_value(json_object_get(last, "role")),
                      "assistant") != 0)
    {
        last = json_pack("{s:s,s:n}", "role", "assistant", "content");
        if (last == NULL || json_array_append_new(msgs, last) != 0) {
            json_decref(call);
            return NGX_ERROR;
        }
    }

    calls = json_object_get(last, "tool_calls");

    if (calls == NULL) {
        calls = json_array();
        if (calls == NULL
            || json_object_set_new(last, "tool_calls", calls) != 0)
        {
            json_decref(call);
            return NGX_ERROR;
        }
    }

    return json_array_append_new(calls, call) == 0 ? NGX_OK : NGX_ERROR;
}


/* A function_call_output item: a tool message. */

static ngx_int_t
ngx_http_llm_resp_call_output(ngx_http_request_t *r, json_t *item,
    ngx_uint_t i, json_t *msgs, ngx_http_llm_error_t *err)
{
    u_char      param[64];
    json_t     *call_id, *output, *content, *m;
    ngx_int_t   rc;

    rc = ngx_http_llm_resp_member(r, item, i, "call_id", &call_id, err);
    if (rc != NGX_OK) {
        return rc;
    }

    output = json_object_get(item, "output");

    if (json_is_array(output)) {
        content = NULL;

        rc = ngx_http_llm_resp_content(r, output, i, &content, err);
        if (rc != NGX_OK) {
            if (content) {
                json_decref(content);
            }

            return rc;
        }

    } else if (json_is_string(output)) {
        content = json_incref(output);

    } else {
        ngx_sprintf(param, "input[%ui].output%Z", i);
        return ngx_http_llm_resp_bad_type(r, err, (char *) param,
                                          "a string or an array of content "
                                          "parts",
                                          output ? output : json_null());
    }

    m = json_pack("{s:s,s:O,s:o}", "role", "tool", "tool_call_id", call_id,
                  "content", content);
    if (m == NULL || json_array_append_new(msgs, m) != 0) {
        return NGX_ERROR;
    }

    return NGX_OK;
}


/* One item of input into msgs. */

static ngx_int_t
ngx_http_llm_resp_item(ngx_http_request_t *r, json_t *item, ngx_uint_t i,
    json_t *msgs, ngx_http_llm_error_t *err)
{
    u_char       param[64];
    json_t      *t;
    const char  *type;

    ngx_sprintf(param, "input[%ui]%Z", i);

    if (!json_is_object(item)) {
        return ngx_http_llm_resp_bad_type(r, err, (char *) param,
                                          "an object", item);
    }

    t = json_object_get(item, "type");
    ngx_sprintf(param, "input[%ui].type%Z", i);

    if (t != NULL && !json_is_string(t)) {
        return ngx_http_llm_resp_bad_type(r, err, (char *) param, "a string",
                                          t);
    }

    type = t ? json_string_value(t) : "message";

    if (ngx_strcmp(type, "message") == 0) {
        return ngx_http_llm_resp_message(r, item, i, msgs, err);
    }

    if (ngx_strcmp(type, "function_call") == 0) {
        return ngx_http_llm_resp_call(r, item, i, msgs, err);
    }

    if (ngx_strcmp(type, "function_call_output") == 0) {
        return ngx_http_llm_resp_call_output(r, item, i, msgs, err);
    }

    if (ngx_strcmp(type, "reasoning") == 0) {
        /* an earlier turn's reasoning: the chat templates drop it too */
        return NGX_OK;
    }

    if (ngx_strcmp(type, "item_reference") == 0) {
        return ngx_http_llm_resp_bad(r, err, "invalid_value", (char *) param,
                                     "Item references are not supported: "
                                     "this server does not store responses "
                                     "(llm_responses_store off); send the "
                                     "items themselves in input.");
    }

    return ngx_http_llm_resp_bad(r, err, "invalid_value", (char *) param,
                                 "Unsupported input item type '%s': this "
                                 "server takes 'message', 'function_call', "
                                 "'function_call_output' and 'reasoning' "
                                 "items.", type);
}


/*
 * The conversation's items: those of previous_response_id (from the
 * store), then input's (a string is a user message).
 */

static ngx_int_t
ngx_http_llm_resp_conv(ngx_http_request_t *r, ngx_http_llm_resp_t *st,
    json_t *root, ngx_http_llm_error_t *err)
{
    json_t  *prev, *in, *items;

    st->conv = json_array();
    if (st->conv == NULL) {
        return NGX_ERROR;
    }

    prev = json_object_get(root, "previous_response_id");

    if (prev && !json_is_null(prev)) {
        if (!json_is_string(prev)) {
            return ngx_http_llm_resp_bad_type(r, err, "previous_response_id",
                                              "a string", prev);
        }

        items = ngx_http_llm_store_get(r, json_string_value(prev));

        if (!json_is_array(items)) {
            if (items) {
                json_decref(items);
            }

            return ngx_http_llm_resp_bad(r, err, "previous_response_not_found",
                                         "previous_response_id", "Previous "
                                         "response with id '%s' not found "
                                         "(this server keeps responses in "
                                         "llm_responses_store for a "
                                         "while; send the whole "
                                         "conversation in input).",
                                         json_string_value(prev));
        }

        st->n_prev = json_array_size(items);

        if (json_array_extend(st->conv, items) != 0) {
            json_decref(items);
            return NGX_ERROR;
        }

        json_decref(items);
    }

    in = json_object_get(root, "input");

    if (in == NULL || json_is_null(in)) {
        if (st->n_prev) {
            return NGX_OK;
        }

        return ngx_http_llm_resp_bad(r, err, "missing_required_parameter",
                                     "input", "Missing required parameter: "
                                     "'input'.");
    }

    if (json_is_string(in)) {
        return json_array_append_new(st->conv,
                                     json_pack("{s:s,s:s,s:O}", "type",
                                               "message", "role", "user",
                                               "content", in))
               == 0 ? NGX_OK : NGX_ERROR;
    }

    if (!json_is_array(in)) {
        return ngx_http_llm_resp_bad_type(r, err, "input",
                                          "a string or an array of items",
                                          in);
    }

    return json_array_extend(st->conv, in) == 0 ? NGX_OK : NGX_ERROR;
}


/*
 * An item_reference in the conversation replaced by the item kept under
 * its id; NGX_DECLINED (400) when unknown.
 */

static ngx_int_t
ngx_http_llm_resp_reference(ngx_http_request_t *r, ngx_http_llm_resp_t *st,
    size_t i, json_t **item, ngx_http_llm_error_t *err)
{
    u_char   param[64];
    json_t  *id, *found;

    if (!json_is_object(*item)
        || !json_is_string(json_object_get(*item, "type"))
        || ngx_strcmp(json_string_value(json_object_get(*item, "type")),
                      "item_reference") != 0
        || !st->has_store)
    {
        return NGX_OK;
    }

    id = json_object_get(*item, "id");
    ngx_sprintf(param, "input[%uz].id%Z", i - st->n_prev);

    if (!json_is_string(id)) {
        return ngx_http_llm_resp_bad(r, err, "missing_required_parameter",
                                     (char *) param, "Missing required "
                                     "parameter: '%s'.", param);
    }

    found = ngx_http_llm_store_get(r, json_string_value(id));

    if (!json_is_object(found)) {
        if (found) {
            json_decref(found);
        }

        return ngx_http_llm_resp_bad(r, err, "invalid_value", (char *) param,
                                     "Item with id '%s' not found (this "
                                     "server keeps output items in "
                                     "llm_responses_store for a while; "
                                     "send the item itself).",
                                     json_string_value(id));
    }

    if (json_array_set_new(st->conv, i, found) != 0) {
        return NGX_ERROR;
    }

    *item = found;

    return NGX_OK;
}


/* instructions and the conversation as the chat messages. */

static ngx_int_t
ngx_http_llm_resp_input(ngx_http_request_t *r, ngx_http_llm_resp_t *st,
    json_t *root, json_t *chat, ngx_http_llm_error_t *err)
{
    json_t      *msgs, *j, *item;
    size_t       i;
    ngx_int_t    rc;

    msgs = json_array();
    if (msgs == NULL || json_object_set_new(chat, "messages", msgs) != 0) {
        return NGX_ERROR;
    }

    j = json_object_get(root, "instructions");

    if (j && !json_is_null(j)) {
        if (!json_is_string(j)) {
            return ngx_http_llm_resp_bad_type(r, err, "instructions",
                                              "a string", j);
        }

        if (json_array_append_new(msgs, json_pack("{s:s,s:O}", "role",
                                                  "system", "content", j))
            != 0)
        {
            return NGX_ERROR;
        }
    }

    rc = ngx_http_llm_resp_conv(r, st, root, err);
    if (rc != NGX_OK) {
        return rc;
    }

    json_array_foreach(st->conv, i, item) {
        rc = ngx_http_llm_resp_reference(r, st, i, &item, err);

        if (rc == NGX_OK) {
            rc = ngx_http_llm_resp_item(r, item, i - st->n_prev, msgs, err);
        }

        if (rc != NGX_OK) {
            return rc;
        }
    }

    return NGX_OK;
}


/*
 * tools: function tools {type,name,description,parameters,strict} as chat
 * tools; echo gets them as the Response shows them.
 */

static ngx_int_t
ngx_http_llm_resp_tools(ngx_http_request_t *r, json_t *root, json_t *chat,
    json_t *echo, ngx_http_llm_error_t *err)
{
    u_char       param[64];
    json_t      *tools, *tool, *t, *name, *desc, *params, *strict, *fn;
    json_t      *out, *shown;
    ngx_uint_t   i;

    out = json_array();
    shown = json_array();

    if (out == NULL || shown == NULL
        || json_object_set_new(echo, "tools", shown) != 0)
    {
        json_decref(out);
        return NGX_ERROR;
    }

    if (json_object_set_new(chat, "tools", out) != 0) {
        return NGX_ERROR;
    }

    tools = json_object_get(root, "tools");

    if (tools == NULL || json_is_null(tools)) {
        json_object_del(chat, "tools");
        return NGX_OK;
    }

    if (!json_is_array(tools)) {
        return ngx_http_llm_resp_bad_type(r, err, "tools", "an array", tools);
    }

    json_array_foreach(tools, i, tool) {
        ngx_sprintf(param, "tools[%ui]%Z", i);

        if (!json_is_object(tool)) {
            return ngx_http_llm_resp_bad_type(r, err, (char *) param,
                                              "an object", tool);
        }

        t = json_object_get(tool, "type");
        ngx_sprintf(param, "tools[%ui].type%Z", i);

        if (!json_is_string(t)) {
            return ngx_http_llm_resp_bad(r, err, "missing_required_parameter",
                                         (char *) param, "Missing required "
                                         "parameter: '%s'.", param);
        }

        if (ngx_strcmp(json_string_value(t), "function") != 0) {
            return ngx_http_llm_resp_bad(r, err, "invalid_value",
                                         (char *) param, "Tool type '%s' is "
                                         "not supported by this server: "
                                         "only 'function' tools are.",
                                         json_string_value(t));
        }

        name = json_object_get(tool, "name");
        ngx_sprintf(param, "tools[%ui].name%Z", i);

        if (!json_is_string(name)) {
            return name ? ngx_http_llm_resp_bad_type(r, err, (char *) param,
                                                     "a string", name)
                        : ngx_http_llm_resp_bad(r, err,
                                                "missing_required_parameter",
                                                (char *) param, "Missing "
                                                "required parameter: '%s'.",
                                                param);
        }

        desc = json_object_get(tool, "description");
        params = json_object_get(tool, "parameters");
        strict = json_object_get(tool, "strict");

        ngx_sprintf(param, "tools[%ui].parameters%Z", i);

        if (params && !json_is_null(params) && !json_is_object(params)) {
            return ngx_http_llm_resp_bad_type(r, err, (char *) param,
                                              "an object", params);
        }

        ngx_sprintf(param, "tools[%ui].strict%Z", i);

        if (strict && !json_is_null(strict) && !json_is_boolean(strict)) {
            return ngx_http_llm_resp_bad_type(r, err, (char *) param,
                                              "a boolean", strict);
        }

        fn = json_pack("{s:O}", "name", name);
        if (fn == NULL) {
            return NGX_ERROR;
        }

        if (desc && !json_is_null(desc)) {
            json_object_set(fn, "description", desc);
        }

        if (params && !json_is_null(params)) {
            json_object_set(fn, "parameters", params);
        }

        if (strict && !json_is_null(strict)) {
            json_object_set(fn, "strict", strict);
        }

        if (json_array_append_new(out, json_pack("{s:s,s:o}", "type",
                                                 "function", "function", fn))
            != 0
            || json_array_append_new(shown,
                   json_pack("{s:s,s:O,s:O,s:O,s:O}", "type", "function",
                             "name", name,
                             "description", desc ? desc : json_null(),
                             "parameters", params ? params : json_null(),
                             "strict", strict ? strict : json_null()))
               != 0)
        {
            return NGX_ERROR;
        }
    }

    return NGX_OK;
}


/* tool_choice: "none", "auto", "required" or {"type":"function","name"}. */

static ngx_int_t
ngx_http_llm_resp_tool_choice(ngx_http_request_t *r, json_t *root,
    json_t *chat, json_t *echo, ngx_http_llm_error_t *err)
{
    json_t      *j, *t, *name;
    ngx_int_t    rc;
    const char  *v;

    static const char *const  modes[] = { "none", "auto", "required", NULL };

    j = json_object_get(root, "tool_choice");

    if (j == NULL || json_is_null(j)) {
        return json_object_set_new(echo, "tool_choice", json_string("auto"))
               == 0 ? NGX_OK : NGX_ERROR;
    }

    if (json_is_string(j)) {
        rc = ngx_http_llm_resp_enum(r, err, j, "tool_choice", modes, &v);
        if (rc != NGX_OK) {
            return rc;
        }

        if (json_object_set(chat, "tool_choice", j) != 0
            || json_object_set(echo, "tool_choice", j) != 0)
        {
            return NGX_ERROR;
        }

        return NGX_OK;
    }

    if (!json_is_object(j)) {
        return ngx_http_llm_resp_bad_type(r, err, "tool_choice",
                                          "a string or an object", j);
    }

    t = json_object_get(j, "type");

    if (!json_is_string(t)) {
        return ngx_http_llm_resp_bad(r, err, "missing_required_parameter",
                                     "tool_choice.type", "Missing required "
                                     "parameter: 'tool_choice.type'.");
    }

    if (ngx_strcmp(json_string_value(t), "function") != 0) {
        return ngx_http_llm_resp_bad(r, err, "invalid_value",
                                     "tool_choice.type", "Tool choice type "
                                     "'%s' is not supported by this server: "
                                     "only 'function' tools are.",
                                     json_string_value(t));
    }

    name = json_object_get(j, "name");

    if (!json_is_string(name)) {
        return ngx_http_llm_resp_bad(r, err, "missing_required_parameter",
                                     "tool_choice.name", "Missing required "
                                     "parameter: 'tool_choice.name'.");
    }

    if (json_object_set_new(chat, "tool_choice",
                            json_pack("{s:s,s:{s:O}}", "type", "function",
                                      "function", "name", name))
        != 0
        || json_object_set_new(echo, "tool_choice",
                               json_pack("{s:s,s:O}", "type", "function",
                                         "name", name))
           != 0)
    {
        return NGX_ERROR;
    }

    return NGX_OK;
}


/* text.format as the chat response_format; text.verbosity checked. */

static ngx_int_t
ngx_http_llm_resp_text(ngx_http_request_t *r, json_t *root, json_t *chat,
    json_t *echo, ngx_http_llm_error_t *err)
{
    json_t      *text, *f, *t, *rf, *js, *v;
    ngx_int_t    rc;
    const char  *type, *verbosity;

    static const char *const  levels[] = { "low", "medium", "high", NULL };

    text = json_object_get(root, "text");
    f = NULL;
    verbosity = NULL;

    if (text && !json_is_null(text)) {
        if (!json_is_object(text)) {
            return ngx_http_llm_resp_bad_type(r, err, "text", "an object",
                                              text);
        }

        rc = ngx_http_llm_resp_enum(r, err,
                                    json_object_get(text, "verbosity"),
                                    "text.verbosity", levels, &verbosity);
        if (rc != NGX_OK) {
            return rc;
        }

        f = json_object_get(text, "format");
    }

    if (f == NULL || json_is_null(f)) {
        return json_object_set_new(echo, "text",
                   json_pack("{s:{s:s},s:s}", "format", "type", "text",
                             "verbosity", verbosity ? verbosity : "medium"))
               == 0 ? NGX_OK : NGX_ERROR;
    }

    if (!json_is_object(f)) {
        return ngx_http_llm_resp_bad_type(r, err, "text.format", "an object",
                                          f);
    }

    t = json_object_get(f, "type");

    if (!json_is_string(t)) {
        return ngx_http_llm_resp_bad(r, err, "missing_required_parameter",
                                     "text.format.type", "Missing required "
                                     "parameter: 'text.format.type'.");
    }

    type = json_string_value(t);

    if (ngx_strcmp(type, "json_schema") == 0) {
        if (!json_is_string(json_object_get(f, "name"))) {
            return ngx_http_llm_resp_bad(r, err,
                                         "missing_required_parameter",
                                         "text.format.name", "Missing "
                                         "required parameter: "
                                         "'text.format.name'.");
        }

        if (!json_is_object(json_object_get(f, "schema"))) {
            return ngx_http_llm_resp_bad(r, err,
                                         "missing_required_parameter",
                                         "text.format.schema", "Missing "
                                         "required parameter: "
                                         "'text.format.schema' (an "
                                         "object).");
        }

        js = json_pack("{s:O,s:O}", "name", json_object_get(f, "name"),
                       "schema", json_object_get(f, "schema"));
        if (js == NULL) {
            return NGX_ERROR;
        }

        v = json_object_get(f, "strict");
        if (v && !json_is_null(v)) {
            json_object_set(js, "strict", v);
        }

        v = json_object_get(f, "description");
        if (v && !json_is_null(v)) {
            json_object_set(js, "description", v);
        }

        rf = json_pack("{s:s,s:o}", "type", "json_schema", "json_schema", js);

    } else if (ngx_strcmp(type, "json_object") == 0
               || ngx_strcmp(type, "text") == 0)
    {
        rf = json_pack("{s:s}", "type", type);

    } else {
        return ngx_http_llm_resp_bad(r, err, "invalid_value",
                                     "text.format.type", "Invalid value: "
                                     "'%s'. Supported values are: 'text', "
                                     "'json_object', and 'json_schema'.",
                                     type);
    }

    if (rf == NULL || json_object_set_new(chat, "response_format", rf) != 0) {
        return NGX_ERROR;
    }

    return json_object_set_new(echo, "text",
               json_pack("{s:O,s:s}", "format", f,
                         "verbosity", verbosity ? verbosity : "medium"))
           == 0 ? NGX_OK : NGX_ERROR;
}


/* reasoning {effort, summary}: the effort to the chat request. */

static ngx_int_t
ngx_http_llm_resp_reasoning(ngx_http_request_t *r, json_t *root,
    json_t *chat, json_t *echo, ngx_http_llm_error_t *err)
{
    json_t      *j;
    ngx_int_t    rc;
    const char  *effort, *summary, *gen;

    j = json_object_get(root, "reasoning");
    effort = NULL;
    summary = NULL;

    if (j && !json_is_null(j)) {
        if (!json_is_object(j)) {
            return ngx_http_llm_resp_bad_type(r, err, "reasoning",
                                              "an object", j);
        }

        rc = ngx_http_llm_resp_enum(r, err, json_object_get(j, "effort"),
                                    "reasoning.effort",
                                    ngx_http_llm_resp_efforts, &effort);
        if (rc == NGX_OK) {
            rc = ngx_http_llm_resp_enum(r, err,
                                        json_object_get(j, "summary"),
                                        "reasoning.summary",
                                        ngx_http_llm_resp_summaries,
                                        &summary);
        }

        if (rc == NGX_OK) {
            rc = ngx_http_llm_resp_enum(r, err,
                                        json_object_get(j,
                                                        "generate_summary"),
                                        "reasoning.generate_summary",
                                        ngx_http_llm_resp_summaries, &gen);
        }

        if (rc != NGX_OK) {
            return rc;
        }

        if (effort && json_object_set_new(chat, "reasoning_effort",
                                          json_string(effort))
                      != 0)
        {
            return NGX_ERROR;
        }
    }

    return json_object_set_new(echo, "reasoning",
               json_pack("{s:s?,s:s?}", "effort", effort, "summary",
                         summary))
           == 0 ? NGX_OK : NGX_ERROR;
}


/*
 * What this server refuses (previous_response_id, conversation, prompt
 * templates, background), max_output_tokens, and the fields that are
 * only checked and shown (store, metadata, truncation, max_tool_calls).
 */

static ngx_int_t
ngx_http_llm_resp_options(ngx_http_request_t *r, ngx_http_llm_resp_t *st,
    json_t *root, json_t *chat, json_t *echo, ngx_http_llm_error_t *err)
{
    json_t      *j, *v;
    ngx_int_t    rc;
    const char  *key, *trunc;

    static const char *const  truncations[] = { "auto", "disabled", NULL };

    j = json_object_get(root, "previous_response_id");
    if (j && !json_is_null(j) && !st->has_store) {
        return ngx_http_llm_resp_bad(r, err, "unsupported_parameter",
                                     "previous_response_id", "This server "
                                     "does not store responses "
                                     "(llm_responses_store off); send the "
                                     "whole conversation in input.");
    }

    j = json_object_get(root, "conversation");
    if (j && !json_is_null(j)) {
        return ngx_http_llm_resp_bad(r, err, "unsupported_parameter",
                                     "conversation", "This server does not "
                                     "store conversations; send the whole "
                                     "conversation in input.");
    }

    j = json_object_get(root, "prompt");
    if (j && !json_is_null(j)) {
        return ngx_http_llm_resp_bad(r, err, "unsupported_parameter",
                                     "prompt", "Prompt templates are not "
                                     "supported by this server; send "
                                     "instructions and input.");
    }

    j = json_object_get(root, "background");
    if (j && !json_is_null(j) && !json_is_boolean(j)) {
        return ngx_http_llm_resp_bad_type(r, err, "background", "a boolean",
                                          j);
    }

    if (json_is_true(j)) {
        return ngx_http_llm_resp_bad(r, err, "unsupported_parameter",
                                     "background", "Background responses "
                                     "are not supported: this server does "
                                     "not store responses.");
    }

    j = json_object_get(root, "store");
    if (j && !json_is_null(j) && !json_is_boolean(j)) {
        return ngx_http_llm_resp_bad_type(r, err, "store", "a boolean", j);
    }

    if (json_is_false(j)) {
        st->store = 0;
    }

    if (json_object_set_new(echo, "store", json_boolean(st->store)) != 0) {
        return NGX_ERROR;
    }

    rc = ngx_http_llm_resp_enum(r, err, json_object_get(root, "truncation"),
                                "truncation", truncations, &trunc);
    if (rc != NGX_OK) {
        return rc;
    }

    j = json_object_get(root, "max_output_tokens");
    if (j && !json_is_null(j)) {
        if (!json_is_integer(j)) {
            return ngx_http_llm_resp_bad_type(r, err, "max_output_tokens",
                                              "an integer", j);
        }

        if (json_integer_value(j) < 1) {
            return ngx_http_llm_resp_bad(r, err, "integer_below_min_value",
                                         "max_output_tokens", "Invalid "
                                         "'max_output_tokens': integer below "
                                         "minimum value. Expected a value >= "
                                         "1, but got %L instead.",
                                         (int64_t) json_integer_value(j));
        }

        if (json_object_set(chat, "max_completion_tokens", j) != 0) {
            return NGX_ERROR;
        }
    }

    j = json_object_get(root, "max_tool_calls");
    if (j && !json_is_null(j) && !json_is_integer(j)) {
        return ngx_http_llm_resp_bad_type(r, err, "max_tool_calls",
                                          "an integer", j);
    }

    j = json_object_get(root, "metadata");
    if (j && !json_is_null(j)) {
        if (!json_is_object(j) || json_object_size(j) > 16) {
            return ngx_http_llm_resp_bad_type(r, err, "metadata",
                                              "an object of at most 16 "
                                              "strings", j);
        }

        json_object_foreach(j, key, v) {
            if (!json_is_string(v) || ngx_strlen(key) > 64
                || json_string_length(v) > 512)
            {
                return ngx_http_llm_resp_bad(r, err, "invalid_value",
                                             "metadata", "Invalid "
                                             "'metadata': values must be "
                                             "strings of at most 512 "
                                             "characters, keys at most 64.");
            }
        }
    }

    return json_object_set_new(echo, "truncation",
                               json_string(trunc ? trunc : "disabled"))
           == 0 ? NGX_OK : NGX_ERROR;
}


/*
 * The Response object without the answer: the request's settings as
 * OpenAI's Response shows them (the model, status and output are set
 * when it is written).
 */

static ngx_int_t
ngx_http_llm_resp_echo(ngx_http_llm_ctx_t *ctx, json_t *root, json_t *echo)
{
    json_t  *j;

#define ngx_http_llm_resp_or(name, dflt)                                      \
    (j = json_object_get(root, name), (j && !json_is_null(j))                 \
                                      ? json_incref(j) : (dflt))

    if (json_object_set_new(echo, "id",
                            json_stringn((char *) ctx->id, ctx->id_len))
        || json_object_set_new(echo, "object", json_string("response"))
        || json_object_set_new(echo, "created_at",
                               json_integer(ctx->created))
        || json_object_set_new(echo, "status", json_string("in_progress"))
        || json_object_set_new(echo, "background", json_false())
        || json_object_set_new(echo, "completed_at", json_null())
        || json_object_set_new(echo, "error", json_null())
        || json_object_set_new(echo, "incomplete_details", json_null())
        || json_object_set_new(echo, "instructions",
                               ngx_http_llm_resp_or("instructions",
                                                    json_null()))
        || json_object_set_new(echo, "max_output_tokens",
                               ngx_http_llm_resp_or("max_output_tokens",
                                                    json_null()))
        || json_object_set_new(echo, "max_tool_calls",
                               ngx_http_llm_resp_or("max_tool_calls",
                                                    json_null()))
        || json_object_set_new(echo, "model", json_string(""))
        || json_object_set_new(echo, "output", json_array())
        || json_object_set_new(echo, "parallel_tool_calls",
                               ngx_http_llm_resp_or("parallel_tool_calls",
                                                    json_true()))
        || json_object_set_new(echo, "previous_response_id",
                               ngx_http_llm_resp_or("previous_response_id",
                                                    json_null()))
        || json_object_set_new(echo, "service_tier", json_string("default"))
        || json_object_set_new(echo, "temperature",
                               ngx_http_llm_resp_or("temperature",
                                                    json_real(1.0)))
        || json_object_set_new(echo, "top_logprobs", json_integer(0))
        || json_object_set_new(echo, "top_p",
                               ngx_http_llm_resp_or("top_p", json_real(1.0)))
        || json_object_set_new(echo, "metadata",
                               ngx_http_llm_resp_or("metadata",
                                                    json_object())))
    {
        return NGX_ERROR;
    }

    j = json_object_get(root, "user");

    if (json_is_string(j) && json_object_set(echo, "user", j) != 0) {
        return NGX_ERROR;
    }

#undef ngx_http_llm_resp_or

    return NGX_OK;
}


/*
 * A chat check's error names the chat field: the name the client used
 * instead (max_completion_tokens is max_output_tokens, ...).
 */

static void
ngx_http_llm_resp_rename(ngx_pool_t *pool, ngx_http_llm_error_t *err)
{
    u_char      *p, *q;
    size_t       n;
    ngx_uint_t   i;

    static const char *const  names[][2] = {
        { "max_completion_tokens", "max_output_tokens" },
        { "max_tokens", "max_output_tokens" },
        { "response_format.json_schema", "text.format" },
        { "response_format", "text.format" },
        { "reasoning_effort", "reasoning.effort" },
        { "messages", "input" },
        { NULL, NULL }
    };

    if (err->param == NULL) {
        return;
    }

    for (i = 0; names[i][0]; i++) {
        n = ngx_strlen(names[i][0]);

        if (ngx_strncmp(err->param, names[i][0], n) != 0) {
            continue;
        }

        if (ngx_strcmp(names[i][0], "messages") == 0) {
            /* the messages are not the items one for one */
            err->param = "input";
            return;
        }

        p = ngx_pnalloc(pool, ngx_strlen(names[i][1])
                                 + ngx_strlen(err->param + n) + 1);
        if (p == NULL) {
            return;
        }

        q = ngx_cpymem(p, names[i][1], ngx_strlen(names[i][1]));
        ngx_memcpy(q, err->param + n, ngx_strlen(err->param + n) + 1);
        err->param = (char *) p;
        return;
    }

    /* tools[i].function.name: tools[i].name */

    if (ngx_strncmp(err->param, "tools[", 6) == 0) {
        p = (u_char *) ngx_strstr(err->param, "].function");
        if (p) {
            q = ngx_pnalloc(pool, ngx_strlen(err->param) + 1);
            if (q == NULL) {
                return;
            }

            n = p + 1 - (u_char *) err->param;
            ngx_memcpy(q, err->param, n);
            ngx_memcpy(q + n, p + 1 + ngx_http_llm_len(".function"),
                       ngx_strlen((char *) p + 1
                                  + ngx_http_llm_len(".function")) + 1);
            err->param = (char *) q;
        }
    }
}


/* OpenAI's error body, its param named as the Responses request names it
 * (an engine's context error says "messages": "input"). */

static u_char *
ngx_http_llm_resp_error_json(ngx_pool_t *pool, ngx_http_llm_error_t *err,
    size_t *len)
{
    ngx_http_llm_error_t  e;

    e = *err;
    ngx_http_llm_resp_rename(pool, &e);

    return ngx_http_llm_error_json(pool, &e, len);
}


/*
 * Parses a Responses request into the chat request the engine runs:
 * NGX_OK; NGX_DECLINED with err (400); NGX_ERROR.
 */

static ngx_int_t
ngx_http_llm_resp_parse(ngx_http_request_t *r, ngx_http_llm_ctx_t *ctx,
    u_char *body, size_t len, ngx_http_llm_error_t *err)
{
    json_t               *root, *chat, *j;
    ngx_int_t             rc;
    ngx_uint_t            i;
    ngx_pool_cleanup_t        *cln;
    ngx_http_llm_resp_t       *st;
    ngx_http_llm_main_conf_t  *mcf;

    root = ngx_http_llm_load_json(r, body, len, err);
    if (root == NULL) {
        return err->status ? NGX_DECLINED : NGX_ERROR;
    }

    if (!json_is_object(root)) {
        return ngx_http_llm_resp_bad(r, err, NULL, NULL, "The request body "
                                     "must be a JSON object, not %s.",
                                     ngx_http_llm_json_type_name(root));
    }

    st = ngx_pcalloc(r->pool, sizeof(ngx_http_llm_resp_t));
    cln = ngx_pool_cleanup_add(r->pool, 0);
    if (st == NULL || cln == NULL) {
        return NGX_ERROR;
    }

    cln->handler = ngx_http_llm_resp_cleanup;
    cln->data = st;
    ctx->dialect_ctx = st;

    mcf = ngx_http_get_module_main_conf(r, ngx_http_llm_module);
    st->has_store = (mcf->responses_store != NULL);
    st->store = st->has_store;

    st->resp = json_object();
    st->output = json_array();
    chat = json_object();

    if (chat) {
        cln = ngx_pool_cleanup_add(r->pool, 0);
        if (cln == NULL) {
            json_decref(chat);
            return NGX_ERROR;
        }

        cln->handler = ngx_http_llm_resp_json_cleanup;
        cln->data = chat;
    }

    if (st->resp == NULL || st->output == NULL || chat == NULL) {
        return NGX_ERROR;
    }

    for (i = 0; ngx_http_llm_resp_same[i]; i++) {
        j = json_object_get(root, ngx_http_llm_resp_same[i]);
        if (j && json_object_set(chat, ngx_http_llm_resp_same[i], j) != 0) {
            return NGX_ERROR;
        }
    }

    (void) ngx_http_llm_request_id(ctx);

    if (ngx_http_llm_resp_echo(ctx, root, st->resp) != NGX_OK
        || json_object_set(st->resp, "output", st->output) != 0)
    {
        return NGX_ERROR;
    }

    rc = ngx_http_llm_resp_options(r, st, root, chat, st->resp, err);

    if (rc == NGX_OK) {
        rc = ngx_http_llm_resp_input(r, st, root, chat, err);
    }

    if (rc == NGX_OK) {
        rc = ngx_http_llm_resp_tools(r, root, chat, st->resp, err);
    }

    if (rc == NGX_OK) {
        rc = ngx_http_llm_resp_tool_choice(r, root, chat, st->resp, err);
    }

    if (rc == NGX_OK) {
        rc = ngx_http_llm_resp_text(r, root, chat, st->resp, err);
    }

    if (rc == NGX_OK) {
        rc = ngx_http_llm_resp_reasoning(r, root, chat, st->resp, err);
    }

    if (rc != NGX_OK) {
        return rc;
    }

    rc = ngx_http_llm_parse_json(r, ctx, chat, len, err);

    if (rc == NGX_DECLINED) {
        ngx_http_llm_resp_rename(r->pool, err);
        return rc;
    }

    return rc;
}


/* ------------------------------------------------------------------ */
/* the answer                                                          */
/* ------------------------------------------------------------------ */


/*
 * The answer's settings into st->resp: model, status (completed, or
 * incomplete with the reason; failed with error), usage.
 */

static ngx_int_t
ngx_http_llm_resp_finish(ngx_http_llm_ctx_t *ctx, ngx_http_llm_resp_t *st,
    const char *status, const char *reason, json_t *error)
{
    json_t  *usage;

    usage = json_pack("{s:I,s:{s:I,s:i},s:I,s:{s:i},s:I}",
                      "input_tokens", (json_int_t) ctx->prompt_tokens,
                      "input_tokens_details",
                      "cached_tokens", (json_int_t) ctx->cached_tokens,
                      "cache_write_tokens", 0,
                      "output_tokens", (json_int_t) ctx->completion_tokens,
                      "output_tokens_details", "reasoning_tokens", 0,
                      "total_tokens",
                      (json_int_t) (ctx->prompt_tokens
                                    + ctx->completion_tokens));

    if (usage == NULL
        || json_object_set_new(st->resp, "usage", usage) != 0
        || json_object_set_new(st->resp, "model",
                               ngx_http_llm_json_text(ctx->model_name.data,
                                                     ctx->model_name.len))
           != 0
        || json_object_set_new(st->resp, "status", json_string(status)) != 0
        || json_object_set_new(st->resp, "completed_at",
                               ngx_strcmp(status, "completed") == 0
                               ? json_integer(ngx_time()) : json_null())
           != 0
        || json_object_set_new(st->resp, "incomplete_details",
                               reason ? json_pack("{s:s}", "reason", reason)
                                      : json_null())
           != 0
        || json_object_set_new(st->resp, "error",
                               error ? error : json_null())
           != 0)
    {
        return NGX_ERROR;
    }

    return NGX_OK;
}


/* the status and incomplete reason of a finish reason */

static const char *
ngx_http_llm_resp_status(Llm__FinishReason f, const char **reason)
{
    switch (f) {
    case LLM__FINISH_REASON__FINISH_LENGTH:
        *reason = "max_output_tokens";
        return "incomplete";
    case LLM__FINISH_REASON__FINISH_CONTENT_FILTER:
        *reason = "content_filter";
        return "incomplete";
    default:
        *reason = NULL;
        return "completed";
    }
}


static json_t *
ngx_http_llm_resp_text_part(json_t *text)
{
    return json_pack("{s:s,s:[],s:[],s:o}", "type", "output_text",
                     "annotations", "logprobs", "text", text);
}


/* Non-stream: the Response with the output of choice 0. */

static ngx_int_t
ngx_http_llm_resp_body(ngx_http_request_t *r, ngx_http_llm_ctx_t *ctx,
    ngx_str_t *body)
{
    char                   *s;
    size_t                  n;
    json_t                 *item;
    ngx_uint_t              k;
    const char             *status, *reason;
    ngx_http_llm_call_t    *call;
    ngx_http_llm_resp_t    *st;
    ngx_http_llm_choice_t  *ch;

    st = ctx->dialect_ctx;
    ch = &ctx->choices[0];
    status = ngx_http_llm_resp_status(ch->finish, &reason);

    if (ch->reasoning.len) {
        item = json_pack("{s:o,s:s,s:[],s:[{s:s,s:o}],s:s}",
                         "id", ngx_http_llm_resp_new_id("rs_"),
                         "type", "reasoning", "summary", "content",
                         "type", "reasoning_text",
                         "text", ngx_http_llm_json_text(ch->reasoning.data,
                                                       ch->reasoning.len),
                         "status", status);
        if (json_array_append_new(st->output, item) != 0) {
            return NGX_ERROR;
        }
    }

    /* a message unless the answer is calls, or reasoning cut off before
     * any text (as OpenAI's incomplete reasoning responses) */
    if (ch->content.len || (ch->calls.nelts == 0 && ch->reasoning.len == 0)) {
        item = json_pack("{s:o,s:s,s:s,s:s,s:[o]}",
                         "id", ngx_http_llm_resp_new_id("msg_"),
                         "type", "message", "status", status,
                         "role", "assistant", "content",
                         ngx_http_llm_resp_text_part(
                             ngx_http_llm_json_text(ch->content.data,
                                                   ch->content.len)));
        if (json_array_append_new(st->output, item) != 0) {
            return NGX_ERROR;
        }
    }

    call = ch->calls.elts;

    for (k = 0; k < ch->calls.nelts; k++) {
        item = json_pack("{s:o,s:s,s:s,s:o,s:o,s:o}",
                         "id", ngx_http_llm_resp_new_id("fc_"),
                         "type", "function_call", "status", status,
                         "arguments",
                         ngx_http_llm_json_text(call[k].arguments.data,
                                               call[k].arguments.len),
                         "call_id", ngx_http_llm_json_text(call[k].id.data,
                                                          call[k].id.len),
                         "name", ngx_http_llm_json_text(call[k].name.data,
                                                       call[k].name.len));
        if (json_array_append_new(st->output, item) != 0) {
            return NGX_ERROR;
        }
    }

    if (ngx_http_llm_resp_finish(ctx, st, status, reason, NULL) != NGX_OK) {
        return NGX_ERROR;
    }

    ngx_http_llm_store_response(r, st);

    s = json_dumps(st->resp, NGX_HTTP_LLM_RESP_DUMP);
    if (s == NULL) {
        return NGX_ERROR;
    }

    n = ngx_strlen(s);

    body->data = ngx_pnalloc(r->pool, n + 1);
    if (body->data == NULL) {
        free(s);
        return NGX_ERROR;
    }

    ngx_memcpy(body->data, s, n);
    body->data[n] = '\n';
    body->len = n + 1;
    free(s);

    return NGX_OK;
}


/*
 * One event of the stream: ev (its reference taken) gets its
 * sequence_number and goes out as "event: TYPE" and "data: {...}".
 */

static ngx_int_t
ngx_http_llm_resp_emit(ngx_http_request_t *r, ngx_http_llm_resp_t *st,
    ngx_chain_t ***ll, json_t *ev, ngx_uint_t flush)
{
    u_char                   *p;
    char                     *s;
    size_t                    n, t, size;
    const char               *type;
    ngx_chain_t              *cl;
    ngx_http_llm_loc_conf_t  *llcf;

    if (ev == NULL) {
        return NGX_ERROR;
    }

    if (json_object_set_new(ev, "sequence_number", json_integer(st->seq++))
        != 0)
    {
        json_decref(ev);
        return NGX_ERROR;
    }

    s = json_dumps(ev, NGX_HTTP_LLM_RESP_DUMP);
    type = json_string_value(json_object_get(ev, "type"));
    t = type ? ngx_strlen(type) : 0;

    if (s == NULL) {
        json_decref(ev);
        return NGX_ERROR;
    }

    n = ngx_strlen(s);
    size = ngx_http_llm_len("event: \ndata: \n\n") + t + n;

    cl = ngx_http_llm_chain_buf(r, size);
    if (cl == NULL) {
        free(s);
        json_decref(ev);
        return NGX_ERROR;
    }

    p = ngx_cpymem(cl->buf->last, "event: ", ngx_http_llm_len("event: "));
    p = ngx_cpymem(p, type, t);
    p = ngx_cpymem(p, "\ndata: ", ngx_http_llm_len("\ndata: "));
    p = ngx_cpymem(p, s, n);
    p = ngx_cpymem(p, "\n\n", 2);

    free(s);
    json_decref(ev);

    llcf = ngx_http_get_module_loc_conf(r, ngx_http_llm_module);

    cl->buf->last = p;
    cl->buf->flush = flush || llcf->sse_flush_interval == 0;

    **ll = cl;
    *ll = &cl->next;

    return NGX_OK;
}


/* response.created and response.in_progress, once. */

static ngx_int_t
ngx_http_llm_resp_start(ngx_http_request_t *r, ngx_http_llm_ctx_t *ctx,
    ngx_http_llm_resp_t *st, ngx_chain_t ***ll)
{
    if (st->started) {
        return NGX_OK;
    }

    st->started = 1;

    if (json_object_set_new(st->resp, "model",
                            ngx_http_llm_json_text(ctx->model_name.data,
                                                  ctx->model_name.len))
        != 0)
    {
        return NGX_ERROR;
    }

    if (ngx_http_llm_resp_emit(r, st, ll,
                               json_pack("{s:s,s:O}", "type",
                                         "response.created", "response",
                                         st->resp), 0)
        != NGX_OK)
    {
        return NGX_ERROR;
    }

    return ngx_http_llm_resp_emit(r, st, ll,
                                  json_pack("{s:s,s:O}", "type",
                                            "response.in_progress",
                                            "response", st->resp), 0);
}


/*
 * Opens an output item of kind (the one open is closed first): its
 * output_item.added and, for text, content_part.added.  id, name: a
 * call's.
 */

static ngx_int_t
ngx_http_llm_resp_open(ngx_http_request_t *r, ngx_http_llm_resp_t *st,
    ngx_chain_t ***ll, ngx_uint_t kind, Llm__ToolCallDelta *t)
{
    json_t      *item, *part;
    ngx_uint_t   index;

    if (st->kind != NGX_HTTP_LLM_RESP_NONE
        && ngx_http_llm_resp_close(r, st, ll, "completed") != NGX_OK)
    {
        return NGX_ERROR;
    }

    index = json_array_size(st->output);
    part = NULL;

    switch (kind) {

    case NGX_HTTP_LLM_RESP_REASONING:
        item = json_pack("{s:o,s:s,s:[],s:[],s:s}",
                         "id", ngx_http_llm_resp_new_id("rs_"),
                         "type", "reasoning", "summary", "content",
                         "status", "in_progress");
        part = json_pack("{s:s,s:s}", "type", "reasoning_text", "text", "");
        break;

    case NGX_HTTP_LLM_RESP_MESSAGE:
        item = json_pack("{s:o,s:s,s:s,s:s,s:[]}",
                         "id", ngx_http_llm_resp_new_id("msg_"),
                         "type", "message", "status", "in_progress",
                         "role", "assistant", "content");
        part = ngx_http_llm_resp_text_part(json_string(""));
        break;

    default: /* NGX_HTTP_LLM_RESP_CALL */
        item = json_pack("{s:o,s:s,s:s,s:s,s:o,s:o}",
                         "id", ngx_http_llm_resp_new_id("fc_"),
                         "type", "function_call", "status", "in_progress",
                         "arguments", "",
                         "call_id", ngx_http_llm_json_text((u_char *) t->id,
                                                          ngx_strlen(t->id)),
                         "name", ngx_http_llm_json_text((u_char *) t->name,
                                                       ngx_strlen(t->name)));
        st->call_index = t->call_index;
        break;
    }

    if (item == NULL) {
        if (part) {
            json_decref(part);
        }

        return NGX_ERROR;
    }

    st->item = item;
    st->kind = kind;
    st->text.len = 0;

    if (ngx_http_llm_resp_emit(r, st, ll,
                               json_pack("{s:s,s:i,s:O}", "type",
                                         "response.output_item.added",
                                         "output_index", (int) index,
                                         "item", item), 0)
        != NGX_OK)
    {
        if (part) {
            json_decref(part);
        }

        return NGX_ERROR;
    }

    if (part == NULL) {
        return NGX_OK;
    }

    return ngx_http_llm_resp_emit(r, st, ll,
               json_pack("{s:s,s:O,s:i,s:i,s:o}", "type",
                         "response.content_part.added",
                         "item_id", json_object_get(item, "id"),
                         "output_index", (int) index, "content_index", 0,
                         "part", part), 0);
}


/*
 * Closes the open item with status: the .done events of its text or
 * arguments, its content part and itself; the item joins the output.
 */

static ngx_int_t
ngx_http_llm_resp_close(ngx_http_request_t *r, ngx_http_llm_resp_t *st,
    ngx_chain_t ***ll, const char *status)
{
    json_t      *item, *id, *text, *part, *ev;
    ngx_int_t    rc;
    ngx_uint_t   index;

    item = st->item;
    id = json_object_get(item, "id");
    index = json_array_size(st->output);

    text = ngx_http_llm_json_text(st->text.data, st->text.len);
    if (text == NULL) {
        return NGX_ERROR;
    }

    part = NULL;

    switch (st->kind) {

    case NGX_HTTP_LLM_RESP_REASONING:
        ev = json_pack("{s:s,s:O,s:i,s:i,s:O}", "type",
                       "response.reasoning_text.done", "item_id", id,
                       "output_index", (int) index, "content_index", 0,
                       "text", text);
        part = json_pack("{s:s,s:O}", "type", "reasoning_text", "text", text);
        break;

    case NGX_HTTP_LLM_RESP_MESSAGE:
        ev = json_pack("{s:s,s:O,s:i,s:i,s:O,s:[]}", "type",
                       "response.output_text.done", "item_id", id,
                       "output_index", (int) index, "content_index", 0,
                       "text", text, "logprobs");
        part = ngx_http_llm_resp_text_part(json_incref(text));
        break;

    default: /* NGX_HTTP_LLM_RESP_CALL */
        ev = json_pack("{s:s,s:O,s:O,s:i,s:O}", "type",
                       "response.function_call_arguments.done",
                       "item_id", id, "name", json_object_get(item, "name"),
                       "output_index", (int) index, "arguments", text);
        json_object_set(item, "arguments", text);
        break;
    }

    json_decref(text);

    rc = ngx_http_llm_resp_emit(r, st, ll, ev, 0);

    if (rc == NGX_OK && part) {
        rc = ngx_http_llm_resp_emit(r, st, ll,
                 json_pack("{s:s,s:O,s:i,s:i,s:O}", "type",
                           "response.content_part.done", "item_id", id,
                           "output_index", (int) index, "content_index", 0,
                           "part", part), 0);

        if (json_object_set_new(item, "content", json_pack("[O]", part))
            != 0)
        {
            rc = NGX_ERROR;
        }
    }

    if (part) {
        json_decref(part);
    }

    if (rc == NGX_OK
        && json_object_set_new(item, "status", json_string(status)) != 0)
    {
        rc = NGX_ERROR;
    }

    if (rc == NGX_OK) {
        rc = ngx_http_llm_resp_emit(r, st, ll,
                 json_pack("{s:s,s:i,s:O}", "type",
                           "response.output_item.done",
                           "output_index", (int) index, "item", item), 0);
    }

    st->item = NULL;
    st->kind = NGX_HTTP_LLM_RESP_NONE;

    if (json_array_append_new(st->output, item) != 0) {
        return NGX_ERROR;
    }

    return rc;
}


/* A piece of the open item's text or arguments: its .delta event. */

static ngx_int_t
ngx_http_llm_resp_delta(ngx_http_request_t *r, ngx_http_llm_resp_t *st,
    ngx_chain_t ***ll, const char *s)
{
    size_t       n;
    json_t      *id, *delta;
    ngx_uint_t   index;

    n = ngx_strlen(s);
    id = json_object_get(st->item, "id");
    index = json_array_size(st->output);

    if (ngx_http_llm_sbuf_add(r->pool, &st->text, (u_char *) s, n)
        != NGX_OK)
    {
        return NGX_ERROR;
    }

    delta = ngx_http_llm_json_text((u_char *) s, n);

    switch (st->kind) {

    case NGX_HTTP_LLM_RESP_REASONING:
        return ngx_http_llm_resp_emit(r, st, ll,
                   json_pack("{s:s,s:O,s:i,s:i,s:o}", "type",
                             "response.reasoning_text.delta",
                             "item_id", id, "output_index", (int) index,
                             "content_index", 0, "delta", delta), 0);

    case NGX_HTTP_LLM_RESP_MESSAGE:
        return ngx_http_llm_resp_emit(r, st, ll,
                   json_pack("{s:s,s:O,s:i,s:i,s:o,s:[]}", "type",
                             "response.output_text.delta",
                             "item_id", id, "output_index", (int) index,
                             "content_index", 0, "delta", delta,
                             "logprobs"), 0);

    default:
        return ngx_http_llm_resp_emit(r, st, ll,
                   json_pack("{s:s,s:O,s:i,s:o}", "type",
                             "response.function_call_arguments.delta",
                             "item_id", id, "output_index", (int) index,
                             "delta", delta), 0);
    }
}


/* Done: the open item closed, response.completed or .incomplete. */

static ngx_int_t
ngx_http_llm_resp_done(ngx_http_request_t *r, ngx_http_llm_ctx_t *ctx,
    ngx_http_llm_resp_t *st, Llm__Done *done, ngx_chain_t ***ll)
{
    const char  *status, *reason;

    ngx_http_llm_finish(ctx, done);
    status = ngx_http_llm_resp_status(ctx->choices[0].finish, &reason);

    if (json_array_size(st->output) == 0 && st->kind == NGX_HTTP_LLM_RESP_NONE
        && ngx_http_llm_resp_open(r, st, ll, NGX_HTTP_LLM_RESP_MESSAGE, NULL)
           != NGX_OK)
    {
        return NGX_ERROR;
    }

    if (st->kind != NGX_HTTP_LLM_RESP_NONE
        && ngx_http_llm_resp_close(r, st, ll, status) != NGX_OK)
    {
        return NGX_ERROR;
    }

    if (ngx_http_llm_resp_finish(ctx, st, status, reason, NULL) != NGX_OK) {
        return NGX_ERROR;
    }

    ngx_http_llm_store_response(r, st);

    return ngx_http_llm_resp_emit(r, st, ll,
               json_pack("{s:s,s:O}", "type",
                         reason ? "response.incomplete"
                                : "response.completed",
                         "response", st->resp), 1);
}


/*
 * An error mid-stream (e, or ctx's when NULL): the open item closed as
 * incomplete, an "error" event and response.failed.
 */

static ngx_int_t
ngx_http_llm_resp_error(ngx_http_request_t *r, ngx_http_llm_ctx_t *ctx,
    ngx_http_llm_resp_t *st, Llm__Error *e, ngx_chain_t ***ll)
{
    json_t                *msg, *error, *param;
    ngx_http_llm_error_t   err;

    if (e) {
        ngx_http_llm_map_error(e, &err);

    } else {
        err.status = ctx->err_status;
        err.type = "server_error";
        err.code = ctx->error_code.len ? (char *) ctx->error_code.data : NULL;
        err.param = NULL;
        err.message = ctx->err_message;
    }

    if (err.code) {
        ctx->error_code.data = (u_char *) err.code;
        ctx->error_code.len = ngx_strlen(err.code);
    }

    ngx_str_set(&ctx->finish_reason, "error");

    if (st->kind != NGX_HTTP_LLM_RESP_NONE
        && ngx_http_llm_resp_close(r, st, ll, "incomplete") != NGX_OK)
    {
        return NGX_ERROR;
    }

    msg = ngx_http_llm_json_text(err.message.data, err.message.len);
    if (msg == NULL) {
        return NGX_ERROR;
    }

    /* the engine's param may be any bytes */
    param = err.param ? ngx_http_llm_json_text((u_char *) err.param,
                                              ngx_strlen(err.param))
                      : json_null();

    if (ngx_http_llm_resp_emit(r, st, ll,
            json_pack("{s:s,s:s?,s:O,s:o}", "type", "error",
                      "code", err.code ? err.code : err.type,
                      "message", msg, "param", param), 0)
        != NGX_OK)
    {
        json_decref(msg);
        return NGX_ERROR;
    }

    error = json_pack("{s:s,s:o}", "code",
                      err.status == NGX_HTTP_TOO_MANY_REQUESTS
                      ? "rate_limit_exceeded" : "server_error",
                      "message", msg);

    if (error == NULL
        || ngx_http_llm_resp_finish(ctx, st, "failed", NULL, error) != NGX_OK)
    {
        return NGX_ERROR;
    }

    return ngx_http_llm_resp_emit(r, st, ll,
               json_pack("{s:s,s:O}", "type", "response.failed",
                         "response", st->resp), 1);
}


/*
 * One engine event of a started stream as Responses events at *ll:
 * choice 0's reasoning, text and calls as output items, each opened and
 * closed with its events; ev NULL: ctx's error.
 */

static ngx_int_t
ngx_http_llm_resp_sse(ngx_http_request_t *r, ngx_http_llm_ctx_t *ctx,
    Llm__Event *ev, ngx_chain_t ***ll)
{
    Llm__Delta           *d;
    Llm__ToolCallDelta   *t;
    ngx_http_llm_resp_t  *st;

    st = ctx->dialect_ctx;

    if (ngx_http_llm_resp_start(r, ctx, st, ll) != NGX_OK) {
        return NGX_ERROR;
    }

    if (ev == NULL) {
        return ngx_http_llm_resp_error(r, ctx, st, NULL, ll);
    }

    switch (ev->kind_case) {

    case LLM__EVENT__KIND_DELTA:
        d = ev->delta;

        if (d->index != 0) {
            return NGX_OK;
        }

        if (d->reasoning[0]) {
            if (st->kind != NGX_HTTP_LLM_RESP_REASONING
                && ngx_http_llm_resp_open(r, st, ll,
                                          NGX_HTTP_LLM_RESP_REASONING, NULL)
                   != NGX_OK)
            {
                return NGX_ERROR;
            }

            if (ngx_http_llm_resp_delta(r, st, ll, d->reasoning) != NGX_OK) {
                return NGX_ERROR;
            }
        }

        if (d->text[0] == '\0') {
            return NGX_OK;
        }

        if (st->kind != NGX_HTTP_LLM_RESP_MESSAGE
            && ngx_http_llm_resp_open(r, st, ll, NGX_HTTP_LLM_RESP_MESSAGE,
                                      NULL)
               != NGX_OK)
        {
            return NGX_ERROR;
        }

        return ngx_http_llm_resp_delta(r, st, ll, d->text);

    case LLM__EVENT__KIND_TOOL_CALL:
        t = ev->tool_call;

        if (t->index != 0) {
            return NGX_OK;
        }

        if ((st->kind != NGX_HTTP_LLM_RESP_CALL
             || st->call_index != t->call_index)
            && ngx_http_llm_resp_open(r, st, ll, NGX_HTTP_LLM_RESP_CALL, t)
               != NGX_OK)
        {
            return NGX_ERROR;
        }

        if (t->arguments[0] == '\0') {
            return NGX_OK;
        }

        return ngx_http_llm_resp_delta(r, st, ll, t->arguments);

    case LLM__EVENT__KIND_DONE:
        return ngx_http_llm_resp_done(r, ctx, st, ev->done, ll);

    case LLM__EVENT__KIND_ERROR:
        return ngx_http_llm_resp_error(r, ctx, st, ev->error, ll);

    default:
        return NGX_OK;
    }
}
