
/*
 * ngx_http_llm_module: the module's definition.  Directives, the
 * configuration (create, merge, the model table of llm_model, llm_pass),
 * the $llm_* variables.  Where a request goes from here: the content
 * handler (ngx_http_llm_handler.c), whose file says which file does what.
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "ngx_http_llm_module.h"


static ngx_int_t ngx_http_llm_variable(ngx_http_request_t *r,
    ngx_http_variable_value_t *v, uintptr_t data);

static ngx_int_t ngx_http_llm_add_variables(ngx_conf_t *cf);
static ngx_int_t ngx_http_llm_init(ngx_conf_t *cf);
static void *ngx_http_llm_create_main_conf(ngx_conf_t *cf);
static char *ngx_http_llm_init_main_conf(ngx_conf_t *cf, void *conf);
static void *ngx_http_llm_create_loc_conf(ngx_conf_t *cf);
static char *ngx_http_llm_merge_loc_conf(ngx_conf_t *cf, void *parent,
    void *child);

static char *ngx_http_llm_pass(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
static ngx_int_t ngx_http_llm_model_price(ngx_http_llm_model_t *m,
    ngx_str_t *value);
static char *ngx_http_llm_model(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
static ngx_int_t ngx_http_llm_model_fallbacks(ngx_http_llm_model_t *m,
    ngx_str_t *value);
static char *ngx_http_llm_handler_flag(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
static char *ngx_http_llm_cors(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);


static ngx_conf_bitmask_t  ngx_http_llm_next_upstream_masks[] = {
    { ngx_string("error"), NGX_HTTP_UPSTREAM_FT_ERROR },
    { ngx_string("timeout"), NGX_HTTP_UPSTREAM_FT_TIMEOUT },
    { ngx_string("invalid_frame"), NGX_HTTP_UPSTREAM_FT_INVALID_HEADER },
    { ngx_string("overloaded"), NGX_HTTP_UPSTREAM_FT_HTTP_503 },
    { ngx_string("http_500"), NGX_HTTP_UPSTREAM_FT_HTTP_500 },
    { ngx_string("http_502"), NGX_HTTP_UPSTREAM_FT_HTTP_502 },
    { ngx_string("http_503"), NGX_HTTP_UPSTREAM_FT_HTTP_503 },
    { ngx_string("http_504"), NGX_HTTP_UPSTREAM_FT_HTTP_504 },
    { ngx_string("off"), NGX_HTTP_UPSTREAM_FT_OFF },
    { ngx_null_string, 0 }
};


static ngx_command_t  ngx_http_llm_commands[] = {

    { ngx_string("llm_pass"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_http_llm_pass,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("llm_api"),
      NGX_HTTP_LOC_CONF|NGX_CONF_FLAG,
      ngx_http_llm_handler_flag,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_llm_loc_conf_t, api),
      NULL },

    { ngx_string("llm_health"),
      NGX_HTTP_LOC_CONF|NGX_CONF_FLAG,
      ngx_http_llm_handler_flag,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_llm_loc_conf_t, health),
      NULL },

    { ngx_string("llm_model"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_2MORE,
      ngx_http_llm_model,
      NGX_HTTP_MAIN_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("llm_balance"),
      NGX_HTTP_UPS_CONF|NGX_CONF_TAKE1,
      ngx_http_llm_balance,
      0,
      0,
      NULL },

    { ngx_string("llm_engine_auth_file"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_http_llm_engine_auth_file,
      NGX_HTTP_MAIN_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("llm_provider"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_2MORE,
      ngx_http_llm_provider,
      NGX_HTTP_MAIN_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("llm_responses_store"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE12,
      ngx_http_llm_responses_store,
      NGX_HTTP_MAIN_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("llm_info_cache"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_msec_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_llm_main_conf_t, info_cache),
      NULL },

    { ngx_string("llm_connect_timeout"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_msec_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_llm_loc_conf_t, upstream.connect_timeout),
      NULL },

    { ngx_string("llm_send_timeout"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_msec_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_llm_loc_conf_t, upstream.send_timeout),
      NULL },

    { ngx_string("llm_read_timeout"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_msec_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_llm_loc_conf_t, upstream.read_timeout),
      NULL },

    { ngx_string("llm_next_upstream"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_1MORE,
      ngx_conf_set_bitmask_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_llm_loc_conf_t, upstream.next_upstream),
      &ngx_http_llm_next_upstream_masks },

    { ngx_string("llm_next_upstream_tries"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_num_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_llm_loc_conf_t, upstream.next_upstream_tries),
      NULL },

    { ngx_string("llm_next_upstream_timeout"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_msec_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_llm_loc_conf_t, upstream.next_upstream_timeout),
      NULL },

    { ngx_string("llm_buffer_size"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_size_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_llm_loc_conf_t, upstream.buffer_size),
      NULL },

    { ngx_string("llm_max_frame"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_size_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_llm_loc_conf_t, max_frame),
      NULL },

    { ngx_string("llm_cors"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_1MORE,
      ngx_http_llm_cors,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("llm_fallback_header"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_FLAG,
      ngx_conf_set_flag_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_llm_loc_conf_t, fallback_header),
      NULL },

    { ngx_string("llm_sse_heartbeat"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_msec_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_llm_loc_conf_t, sse_heartbeat),
      NULL },

    { ngx_string("llm_sse_flush_interval"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_msec_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_llm_loc_conf_t, sse_flush_interval),
      NULL },

      ngx_null_command
};


static ngx_http_module_t  ngx_http_llm_module_ctx = {
    ngx_http_llm_add_variables,            /* preconfiguration */
    ngx_http_llm_init,                     /* postconfiguration */

    ngx_http_llm_create_main_conf,         /* create main configuration */
    ngx_http_llm_init_main_conf,           /* init main configuration */

    NULL,                                  /* create server configuration */
    NULL,                                  /* merge server configuration */

    ngx_http_llm_create_loc_conf,          /* create location configuration */
    ngx_http_llm_merge_loc_conf            /* merge location configuration */
};


ngx_module_t  ngx_http_llm_module = {
    NGX_MODULE_V1,
    &ngx_http_llm_module_ctx,              /* module context */
    ngx_http_llm_commands,                 /* module directives */
    NGX_HTTP_MODULE,                       /* module type */
    NULL,                                  /* init master */
    NULL,                                  /* init module */
    NULL,                                  /* init process */
    NULL,                                  /* init thread */
    NULL,                                  /* exit thread */
    NULL,                                  /* exit process */
    NULL,                                  /* exit master */
    NGX_MODULE_V1_PADDING
};


enum {
    NGX_HTTP_LLM_VAR_KEY_NAME = 0,
    NGX_HTTP_LLM_VAR_MODEL,
    NGX_HTTP_LLM_VAR_PROMPT_TOKENS,
    NGX_HTTP_LLM_VAR_COMPLETION_TOKENS,
    NGX_HTTP_LLM_VAR_CACHED_TOKENS,
    NGX_HTTP_LLM_VAR_TTFT_MS,
    NGX_HTTP_LLM_VAR_FINISH_REASON,
    NGX_HTTP_LLM_VAR_ERROR_CODE,
    NGX_HTTP_LLM_VAR_REQUEST_ID,
    NGX_HTTP_LLM_VAR_COST,
    NGX_HTTP_LLM_VAR_REQUESTED_MODEL
};


static ngx_http_variable_t  ngx_http_llm_vars[] = {

    { ngx_string("llm_key_name"), NULL, ngx_http_llm_variable,
      NGX_HTTP_LLM_VAR_KEY_NAME, NGX_HTTP_VAR_NOCACHEABLE, 0 },

    { ngx_string("llm_model"), NULL, ngx_http_llm_variable,
      NGX_HTTP_LLM_VAR_MODEL, NGX_HTTP_VAR_NOCACHEABLE, 0 },

    { ngx_string("llm_prompt_tokens"), NULL, ngx_http_llm_variable,
      NGX_HTTP_LLM_VAR_PROMPT_TOKENS, NGX_HTTP_VAR_NOCACHEABLE, 0 },

    { ngx_string("llm_completion_tokens"), NULL, ngx_http_llm_variable,
      NGX_HTTP_LLM_VAR_COMPLETION_TOKENS, NGX_HTTP_VAR_NOCACHEABLE, 0 },

    { ngx_string("llm_cached_tokens"), NULL, ngx_http_llm_variable,
      NGX_HTTP_LLM_VAR_CACHED_TOKENS, NGX_HTTP_VAR_NOCACHEABLE, 0 },

    { ngx_string("llm_ttft_ms"), NULL, ngx_http_llm_variable,
      NGX_HTTP_LLM_VAR_TTFT_MS, NGX_HTTP_VAR_NOCACHEABLE, 0 },

    { ngx_string("llm_finish_reason"), NULL, ngx_http_llm_variable,
      NGX_HTTP_LLM_VAR_FINISH_REASON, NGX_HTTP_VAR_NOCACHEABLE, 0 },

    { ngx_string("llm_error_code"), NULL, ngx_http_llm_variable,
      NGX_HTTP_LLM_VAR_ERROR_CODE, NGX_HTTP_VAR_NOCACHEABLE, 0 },

    { ngx_string("llm_request_id"), NULL, ngx_http_llm_variable,
      NGX_HTTP_LLM_VAR_REQUEST_ID, NGX_HTTP_VAR_NOCACHEABLE, 0 },

    { ngx_string("llm_cost"), NULL, ngx_http_llm_variable,
      NGX_HTTP_LLM_VAR_COST, NGX_HTTP_VAR_NOCACHEABLE, 0 },

    { ngx_string("llm_requested_model"), NULL, ngx_http_llm_variable,
      NGX_HTTP_LLM_VAR_REQUESTED_MODEL, NGX_HTTP_VAR_NOCACHEABLE, 0 },

      ngx_http_null_variable
};


static ngx_int_t
ngx_http_llm_variable(ngx_http_request_t *r, ngx_http_variable_value_t *v,
    uintptr_t data)
{
    u_char              *p;
    ngx_str_t            s;
    ngx_uint_t           n;
    ngx_http_llm_ctx_t  *ctx;

    ctx = ngx_http_get_module_ctx(r, ngx_http_llm_module);

    if (ctx == NULL) {
        v->not_found = 1;
        return NGX_OK;
    }

    s.len = 0;
    s.data = NULL;
    n = 0;

    switch (data) {

    case NGX_HTTP_LLM_VAR_KEY_NAME:
        if (ctx->key) {
            s = ctx->key->name;
        }
        goto string;

    case NGX_HTTP_LLM_VAR_MODEL:
        s = ctx->model_name.len ? ctx->model_name : ctx->requested;
        goto string;

    case NGX_HTTP_LLM_VAR_REQUESTED_MODEL:
        s = ctx->requested;
        goto string;

    case NGX_HTTP_LLM_VAR_COST:
        if (ctx->model == NULL || !ctx->model->priced || !ctx->recorded) {
            goto dash;
        }

        p = ngx_pnalloc(r->pool, 32);
        if (p == NULL) {
            return NGX_ERROR;
        }

        v->len = ngx_http_llm_format_cost(p, ctx->cost) - p;
        v->data = p;
        v->valid = 1;
        v->no_cacheable = 1;
        v->not_found = 0;

        return NGX_OK;

    case NGX_HTTP_LLM_VAR_FINISH_REASON:
        s = ctx->finish_reason;
        goto string;

    case NGX_HTTP_LLM_VAR_ERROR_CODE:
        s = ctx->error_code;
        goto string;

    case NGX_HTTP_LLM_VAR_REQUEST_ID:
        s.data = ngx_http_llm_request_id(ctx);
        s.len = ctx->id_len;
        goto string;

    case NGX_HTTP_LLM_VAR_PROMPT_TOKENS:
        n = ctx->prompt_tokens;
        break;

    case NGX_HTTP_LLM_VAR_COMPLETION_TOKENS:
        n = ctx->completion_tokens;
        break;

    case NGX_HTTP_LLM_VAR_CACHED_TOKENS:
        n = ctx->cached_tokens;
        break;

    case NGX_HTTP_LLM_VAR_TTFT_MS:
        if (!ctx->got_token) {
            goto dash;
        }

        n = ctx->ttft;
        break;
    }

    p = ngx_pnalloc(r->pool, NGX_INT_T_LEN);
    if (p == NULL) {
        return NGX_ERROR;
    }

    v->len = ngx_sprintf(p, "%ui", n) - p;
    v->data = p;
    v->valid = 1;
    v->no_cacheable = 1;
    v->not_found = 0;

    return NGX_OK;

string:

    if (s.len == 0) {
        goto dash;
    }

    v->len = s.len;
    v->data = s.data;
    v->valid = 1;
    v->no_cacheable = 1;
    v->not_found = 0;

    return NGX_OK;

dash:

    v->len = 1;
    v->data = (u_char *) "-";
    v->valid = 1;
    v->no_cacheable = 1;
    v->not_found = 0;

    return NGX_OK;
}


static ngx_int_t
ngx_http_llm_add_variables(ngx_conf_t *cf)
{
    ngx_http_variable_t  *var, *v;

    for (v = ngx_http_llm_vars; v->name.len; v++) {
        var = ngx_http_add_variable(cf, &v->name, v->flags);
        if (var == NULL) {
            return NGX_ERROR;
        }

        var->get_handler = v->get_handler;
        var->data = v->data;
    }

    return NGX_OK;
}


static ngx_int_t
ngx_http_llm_init(ngx_conf_t *cf)
{
    return ngx_http_llm_error_filter_init(cf);
}


static void *
ngx_http_llm_create_main_conf(ngx_conf_t *cf)
{
    ngx_http_llm_main_conf_t  *mcf;

    mcf = ngx_pcalloc(cf->pool, sizeof(ngx_http_llm_main_conf_t));
    if (mcf == NULL) {
        return NULL;
    }

    if (ngx_array_init(&mcf->models, cf->pool, 4,
                       sizeof(ngx_http_llm_model_t))
        != NGX_OK)
    {
        return NULL;
    }

    if (ngx_array_init(&mcf->backends, cf->pool, 4,
                       sizeof(ngx_http_llm_backend_t))
        != NGX_OK)
    {
        return NULL;
    }

    if (ngx_array_init(&mcf->inits, cf->pool, 4,
                       sizeof(ngx_http_llm_peer_init_t))
        != NGX_OK
        || ngx_array_init(&mcf->passes, cf->pool, 4,
                          sizeof(ngx_http_upstream_srv_conf_t *))
           != NGX_OK
        || ngx_array_init(&mcf->providers, cf->pool, 2,
                          sizeof(ngx_http_llm_provider_t)) != NGX_OK
        || ngx_array_init(&mcf->registered, cf->pool, 4,
                          sizeof(ngx_http_upstream_srv_conf_t *))
           != NGX_OK)
    {
        return NULL;
    }

    mcf->info_cache = NGX_CONF_UNSET_MSEC;
    mcf->engine_auth = "";

    return mcf;
}


/*
 * Runs after the whole http{} block is read, so upstream{} blocks named
 * by llm_model and llm_pass are known: resolves fallback names and
 * registers every engine address (ngx_http_llm_register_backends), before
 * any location is merged.
 */

static char *
ngx_http_llm_init_main_conf(ngx_conf_t *cf, void *conf)
{
    ngx_http_llm_main_conf_t *mcf = conf;

    ngx_str_t              *names;
    ngx_uint_t              i, j;
    ngx_http_llm_model_t   *m, *fb, **pm;

    ngx_conf_init_msec_value(mcf->info_cache, 1000);

    if (!mcf->responses_set
        && ngx_http_llm_responses_store(cf, NULL, mcf) != NGX_CONF_OK)
    {
        return NGX_CONF_ERROR;
    }

    m = mcf->models.elts;

    for (i = 0; i < mcf->models.nelts; i++) {

        names = m[i].fallback_names.elts;

        for (j = 0; j < m[i].fallback_names.nelts; j++) {
            fb = ngx_http_llm_find_model(mcf, &names[j]);
            if (fb == NULL) {
                ngx_log_error(NGX_LOG_EMERG, cf->log, 0,
                              "llm_model \"%V\": fallback model \"%V\" is "
                              "not defined by any llm_model",
                              &m[i].name, &names[j]);
                return NGX_CONF_ERROR;
            }

            if (fb == &m[i]) {
                continue;
            }

            pm = ngx_array_push(&m[i].fallback);
            if (pm == NULL) {
                return NGX_CONF_ERROR;
            }

            *pm = fb;
        }
    }

    if (ngx_http_llm_providers_resolve(cf, mcf) != NGX_OK) {
        return NGX_CONF_ERROR;
    }

    if (ngx_http_llm_register_backends(cf, mcf) != NGX_OK) {
        return NGX_CONF_ERROR;
    }

    return NGX_CONF_OK;
}


static void *
ngx_http_llm_create_loc_conf(ngx_conf_t *cf)
{
    ngx_http_llm_loc_conf_t  *conf;

    conf = ngx_pcalloc(cf->pool, sizeof(ngx_http_llm_loc_conf_t));
    if (conf == NULL) {
        return NULL;
    }

    /*
     * set by ngx_pcalloc():
     *
     *     conf->upstream.upstream = NULL;
     *     conf->upstream.next_upstream = 0;
     *     conf->upstream.hide_headers_hash = { NULL, 0 };
     */

    conf->upstream.local = NGX_CONF_UNSET_PTR;
    conf->upstream.socket_keepalive = NGX_CONF_UNSET;
    conf->upstream.next_upstream_tries = NGX_CONF_UNSET_UINT;
    conf->upstream.connect_timeout = NGX_CONF_UNSET_MSEC;
    conf->upstream.send_timeout = NGX_CONF_UNSET_MSEC;
    conf->upstream.read_timeout = NGX_CONF_UNSET_MSEC;
    conf->upstream.next_upstream_timeout = NGX_CONF_UNSET_MSEC;
    conf->upstream.buffer_size = NGX_CONF_UNSET_SIZE;

    /* the hardcoded values */
    conf->upstream.cyclic_temp_file = 0;
    conf->upstream.buffering = 0;
    conf->upstream.ignore_client_abort = 0;
    conf->upstream.send_lowat = 0;
    conf->upstream.bufs.num = 0;
    conf->upstream.busy_buffers_size = 0;
    conf->upstream.max_temp_file_size = 0;
    conf->upstream.temp_file_write_size = 0;
    conf->upstream.intercept_errors = 0;
    conf->upstream.pass_request_headers = 0;
    conf->upstream.pass_request_body = 0;
    conf->upstream.force_ranges = 0;

    ngx_str_set(&conf->upstream.module, "llm");

    conf->api = NGX_CONF_UNSET;
    conf->health = NGX_CONF_UNSET;
    conf->fallback_header = NGX_CONF_UNSET;
    conf->cors = NGX_CONF_UNSET_PTR;
    conf->sse_heartbeat = NGX_CONF_UNSET_MSEC;
    conf->sse_flush_interval = NGX_CONF_UNSET_MSEC;
    conf->max_frame = NGX_CONF_UNSET_SIZE;

    return conf;
}


static char *
ngx_http_llm_merge_loc_conf(ngx_conf_t *cf, void *parent, void *child)
{
    ngx_http_llm_loc_conf_t *prev = parent;
    ngx_http_llm_loc_conf_t *conf = child;

    ngx_http_llm_main_conf_t  *mcf;

    ngx_conf_merge_ptr_value(conf->upstream.local, prev->upstream.local,
                             NULL);

    ngx_conf_merge_value(conf->upstream.socket_keepalive,
                         prev->upstream.socket_keepalive, 0);

    ngx_conf_merge_uint_value(conf->upstream.next_upstream_tries,
                              prev->upstream.next_upstream_tries, 0);

    ngx_conf_merge_msec_value(conf->upstream.connect_timeout,
                              prev->upstream.connect_timeout, 5000);

    ngx_conf_merge_msec_value(conf->upstream.send_timeout,
                              prev->upstream.send_timeout, 60000);

    ngx_conf_merge_msec_value(conf->upstream.read_timeout,
                              prev->upstream.read_timeout, 300000);

    ngx_conf_merge_msec_value(conf->upstream.next_upstream_timeout,
                              prev->upstream.next_upstream_timeout, 0);

    ngx_conf_merge_size_value(conf->upstream.buffer_size,
                              prev->upstream.buffer_size,
                              (size_t) ngx_pagesize);

    ngx_conf_merge_bitmask_value(conf->upstream.next_upstream,
                              prev->upstream.next_upstream,
                              (NGX_CONF_BITMASK_SET
                               |NGX_HTTP_UPSTREAM_FT_ERROR
                               |NGX_HTTP_UPSTREAM_FT_TIMEOUT
                               |NGX_HTTP_UPSTREAM_FT_INVALID_HEADER
                               |NGX_HTTP_UPSTREAM_FT_HTTP_500
                               |NGX_HTTP_UPSTREAM_FT_HTTP_502
                               |NGX_HTTP_UPSTREAM_FT_HTTP_503
                               |NGX_HTTP_UPSTREAM_FT_HTTP_504));

    if (conf->upstream.next_upstream & NGX_HTTP_UPSTREAM_FT_OFF) {
        conf->upstream.next_upstream = NGX_CONF_BITMASK_SET
                                       |NGX_HTTP_UPSTREAM_FT_OFF;

    } else {
        /*
         * A generate request is safe to repeat until the first byte went
         * to the client, and that is the only time a retry happens.
         */
        conf->upstream.next_upstream |= NGX_HTTP_UPSTREAM_FT_NON_IDEMPOTENT;
    }

    ngx_conf_merge_value(conf->api, prev->api, 0);
    ngx_conf_merge_value(conf->health, prev->health, 0);
    ngx_conf_merge_value(conf->fallback_header, prev->fallback_header, 0);
    ngx_conf_merge_ptr_value(conf->cors, prev->cors, NULL);
    ngx_conf_merge_msec_value(conf->sse_heartbeat, prev->sse_heartbeat, 0);
    ngx_conf_merge_msec_value(conf->sse_flush_interval,
                              prev->sse_flush_interval, 0);
    ngx_conf_merge_size_value(conf->max_frame, prev->max_frame,
                              (size_t) 4 * 1024 * 1024);

    if (conf->max_frame < 64) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"llm_max_frame\" must be at least 64 bytes");
        return NGX_CONF_ERROR;
    }

    if (conf->upstream.upstream == NULL) {
        conf->upstream.upstream = prev->upstream.upstream;
    }

    mcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_llm_module);

    if ((conf->api == 1 || conf->health == 1)
        && conf->upstream.upstream == NULL && mcf->models.nelts == 0)
    {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"llm_api\" and \"llm_health\" need \"llm_pass\" "
                           "or at least one \"llm_model\"");
        return NGX_CONF_ERROR;
    }

    /* registered by ngx_http_llm_init_main_conf(), which ran before */

    (void) ngx_http_llm_backends_find(mcf, conf->upstream.upstream,
                                      &conf->backend, &conf->nbackends);

    return NGX_CONF_OK;
}


/*
 * llm_cors off | * | ORIGIN ...: the origins whose browser scripts may
 * call the API (ngx_http_llm_cors.c); off (an empty list) by default.
 */

static char *
ngx_http_llm_cors(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_llm_loc_conf_t *llcf = conf;

    ngx_str_t   *value, *o;
    ngx_uint_t   i;

    if (llcf->cors != NGX_CONF_UNSET_PTR) {
        return "is duplicate";
    }

    value = cf->args->elts;

    llcf->cors = ngx_array_create(cf->pool, cf->args->nelts,
                                  sizeof(ngx_str_t));
    if (llcf->cors == NULL) {
        return NGX_CONF_ERROR;
    }

    if (cf->args->nelts == 2 && ngx_strcmp(value[1].data, "off") == 0) {
        return NGX_CONF_OK;
    }

    for (i = 1; i < cf->args->nelts; i++) {
        if (ngx_strcmp(value[i].data, "off") == 0
            || ((value[i].len != 1 || value[i].data[0] != '*')
                && ngx_strlchr(value[i].data, value[i].data + value[i].len,
                               ':') == NULL))
        {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "invalid origin \"%V\" in \"llm_cors\": "
                               "expected \"*\" or scheme://host[:port]",
                               &value[i]);
            return NGX_CONF_ERROR;
        }

        o = ngx_array_push(llcf->cors);
        if (o == NULL) {
            return NGX_CONF_ERROR;
        }

        *o = value[i];
    }

    return NGX_CONF_OK;
}


static char *
ngx_http_llm_pass(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_llm_loc_conf_t *llcf = conf;

    ngx_str_t                       *value;
    ngx_url_t                        u;
    ngx_http_llm_main_conf_t        *mcf;
    ngx_http_upstream_srv_conf_t   **pass;

    if (llcf->upstream.upstream) {
        return "is duplicate";
    }

    value = cf->args->elts;

    ngx_memzero(&u, sizeof(ngx_url_t));

    u.url = value[1];
    u.no_resolve = 1;

    llcf->upstream.upstream = ngx_http_upstream_add(cf, &u, 0);
    if (llcf->upstream.upstream == NULL) {
        return NGX_CONF_ERROR;
    }

    /* its engines are registered with the models' (init_main_conf) */

    mcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_llm_module);

    pass = ngx_array_push(&mcf->passes);
    if (pass == NULL) {
        return NGX_CONF_ERROR;
    }

    *pass = llcf->upstream.upstream;

    return NGX_CONF_OK;
}


static char *
ngx_http_llm_handler_flag(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    char                      *rv;
    ngx_flag_t                *fp;
    ngx_http_core_loc_conf_t  *clcf;

    rv = ngx_conf_set_flag_slot(cf, cmd, conf);
    if (rv != NGX_CONF_OK) {
        return rv;
    }

    fp = (ngx_flag_t *) ((char *) conf + cmd->offset);

    if (*fp == 1) {
        clcf = ngx_http_conf_get_module_loc_conf(cf, ngx_http_core_module);
        clcf->handler = ngx_http_llm_handler;
    }

    return NGX_CONF_OK;
}


/*
 * fallback=M[,M2...] of llm_model: the names, resolved to models once
 * every llm_model is read (init_main_conf).  NGX_DECLINED for an empty
 * name.
 */

static ngx_int_t
ngx_http_llm_model_fallbacks(ngx_http_llm_model_t *m, ngx_str_t *value)
{
    u_char     *p, *last, *s;
    ngx_str_t  *a;

    p = value->data + 9;
    last = value->data + value->len;

    while (p < last) {
        s = p;

        while (p < last && *p != ',') {
            p++;
        }

        if (p == s) {
            return NGX_DECLINED;
        }

        a = ngx_array_push(&m->fallback_names);
        if (a == NULL) {
            return NGX_ERROR;
        }

        a->data = s;
        a->len = p - s;

        if (p < last) {
            p++;
        }
    }

    return NGX_OK;
}


/*
 * price=IN,CACHED,OUT of llm_model: dollars per million tokens with up to
 * six decimals, kept in microdollars per million (picodollars per token).
 */

static ngx_int_t
ngx_http_llm_model_price(ngx_http_llm_model_t *m, ngx_str_t *value)
{
    u_char      *p, *last, *s;
    uint64_t    *price[3];
    ngx_int_t    v;
    ngx_uint_t   i;

    price[0] = &m->price_input;
    price[1] = &m->price_cached;
    price[2] = &m->price_output;

    p = value->data + 6;
    last = value->data + value->len;

    for (i = 0; i < 3; i++) {
        s = p;

        while (p < last && *p != ',') {
            p++;
        }

        v = ngx_atofp(s, p - s, 6);
        if (v == NGX_ERROR || (i < 2) != (p < last)) {
            return NGX_ERROR;
        }

        *price[i] = (uint64_t) v;
        p++;
    }

    m->priced = 1;

    return NGX_OK;
}


/*
 * llm_model NAME upstream=U | provider=P [remote_model=R] [alias=A]...
 *     [fallback=M[,M2...]] [ttft=TIME]
 */

static char *
ngx_http_llm_model(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_llm_main_conf_t *mcf = conf;

    size_t                 len;
    ngx_int_t              rc, t;
    ngx_str_t             *value, *a, ttft;
    ngx_url_t              u;
    ngx_uint_t             i;
    ngx_http_llm_model_t  *m;

    value = cf->args->elts;

    if (ngx_http_llm_find_model(mcf, &value[1])) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "duplicate llm_model name or alias \"%V\"",
                           &value[1]);
        return NGX_CONF_ERROR;
    }

    m = ngx_array_push(&mcf->models);
    if (m == NULL) {
        return NGX_CONF_ERROR;
    }

    ngx_memzero(m, sizeof(ngx_http_llm_model_t));

    m->name = value[1];

    /* configuration text, written into every answer: nginx's escaper */

    len = ngx_escape_json(NULL, m->name.data, m->name.len);

    m->json_name.data = ngx_pnalloc(cf->pool, m->name.len + len);
    if (m->json_name.data == NULL) {
        return NGX_CONF_ERROR;
    }

    m->json_name.len = (u_char *) ngx_escape_json(m->json_name.data,
                                                  m->name.data, m->name.len)
                       - m->json_name.data;

    if (ngx_array_init(&m->aliases, cf->pool, 2, sizeof(ngx_str_t)) != NGX_OK
        || ngx_array_init(&m->fallback_names, cf->pool, 2, sizeof(ngx_str_t))
           != NGX_OK
        || ngx_array_init(&m->fallback, cf->pool, 2,
                          sizeof(ngx_http_llm_model_t *))
           != NGX_OK)
    {
        return NGX_CONF_ERROR;
    }

    for (i = 2; i < cf->args->nelts; i++) {

        if (ngx_strncmp(value[i].data, "upstream=", 9) == 0) {
            ngx_memzero(&u, sizeof(ngx_url_t));

            u.url.data = value[i].data + 9;
            u.url.len = value[i].len - 9;
            u.no_resolve = 1;

            if (u.url.len == 0) {
                goto invalid;
            }

            m->upstream_name = u.url;
            m->upstream = ngx_http_upstream_add(cf, &u, 0);
            if (m->upstream == NULL) {
                return NGX_CONF_ERROR;
            }

            continue;
        }

        if (ngx_strncmp(value[i].data, "provider=", 9) == 0) {
            if (value[i].len == 9) {
                goto invalid;
            }

            m->provider_name.data = value[i].data + 9;
            m->provider_name.len = value[i].len - 9;
            continue;
        }

        if (ngx_strncmp(value[i].data, "remote_model=", 13) == 0) {
            if (value[i].len == 13) {
                goto invalid;
            }

            m->remote_model.data = value[i].data + 13;
            m->remote_model.len = value[i].len - 13;
            continue;
        }

        if (ngx_strncmp(value[i].data, "price=", 6) == 0) {
            if (ngx_http_llm_model_price(m, &value[i]) != NGX_OK) {
                ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                                   "llm_model \"%V\": \"%V\" expects "
                                   "price=INPUT,CACHED_INPUT,OUTPUT in "
                                   "dollars per million tokens, e.g. "
                                   "price=2,0.5,8", &m->name, &value[i]);
                return NGX_CONF_ERROR;
            }

            continue;
        }

        if (ngx_strncmp(value[i].data, "error_rate=", 11) == 0) {
            rc = ngx_http_llm_model_error_rate(cf, m, &value[i]);

            if (rc == NGX_DECLINED) {
                goto invalid;
            }

            if (rc != NGX_OK) {
                return NGX_CONF_ERROR;
            }

            continue;
        }

        if (ngx_strncmp(value[i].data, "ttft=", 5) == 0) {
            ttft.data = value[i].data + 5;
            ttft.len = value[i].len - 5;

            t = ngx_parse_time(&ttft, 0);
            if (t == NGX_ERROR || t == 0) {
                goto invalid;
            }

            m->ttft = (ngx_msec_t) t;
            continue;
        }

        if (ngx_strncmp(value[i].data, "alias=", 6) == 0) {
            if (value[i].len == 6) {
                goto invalid;
            }

            a = ngx_array_push(&m->aliases);
            if (a == NULL) {
                return NGX_CONF_ERROR;
            }

            a->data = value[i].data + 6;
            a->len = value[i].len - 6;

            m->aliases.nelts--;
            if (ngx_http_llm_find_model(mcf, a)) {
                ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                                   "duplicate llm_model name or alias "
                                   "\"%V\"", a);
                return NGX_CONF_ERROR;
            }
            m->aliases.nelts++;

            continue;
        }

        if (ngx_strncmp(value[i].data, "fallback=", 9) == 0) {
            rc = ngx_http_llm_model_fallbacks(m, &value[i]);

            if (rc == NGX_DECLINED) {
                goto invalid;
            }

            if (rc != NGX_OK) {
                return NGX_CONF_ERROR;
            }

            continue;
        }

        goto invalid;
    }

    if ((m->upstream == NULL) == (m->provider_name.len == 0)) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "llm_model \"%V\" needs one of upstream=NAME "
                           "(engines) or provider=NAME", &m->name);
        return NGX_CONF_ERROR;
    }

    if (m->remote_model.len && m->provider_name.len == 0) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "llm_model \"%V\": remote_model= needs provider=",
                           &m->name);
        return NGX_CONF_ERROR;
    }

    (void) cmd;

    return NGX_CONF_OK;

invalid:

    ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                       "invalid parameter \"%V\" of llm_model", &value[i]);
    return NGX_CONF_ERROR;
}


/*
 * A secret from a file named in the configuration (llm_provider key_file,
 * llm_engine_auth_file, llm_limit_store password_file): its first line,
 * surrounding blanks trimmed, 1 to max visible ASCII characters (so it
 * can go into a header or a frame as is), NUL-terminated in cf->pool.
 * NGX_OK, or NGX_ERROR with the reason logged, naming what for.
 */

ngx_int_t
ngx_http_llm_conf_secret(ngx_conf_t *cf, ngx_str_t *name, const char *what,
    size_t max, ngx_str_t *out)
{
    u_char      *buf, *s, *e, *q;
    ssize_t      n;
    ngx_str_t    file;
    ngx_file_t   f;

    file = *name;

    if (ngx_conf_full_name(cf->cycle, &file, 1) != NGX_OK) {
        return NGX_ERROR;
    }

    ngx_memzero(&f, sizeof(ngx_file_t));
    f.name = file;
    f.log = cf->log;

    f.fd = ngx_open_file(file.data, NGX_FILE_RDONLY, NGX_FILE_OPEN, 0);
    if (f.fd == NGX_INVALID_FILE) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, ngx_errno,
                           "%s: cannot open \"%V\"", what, &file);
        return NGX_ERROR;
    }

    buf = ngx_pnalloc(cf->pool, 4096 + 1);
    if (buf == NULL) {
        (void) ngx_close_file(f.fd);
        return NGX_ERROR;
    }

    n = ngx_read_file(&f, buf, 4096, 0);
    (void) ngx_close_file(f.fd);

    if (n == NGX_ERROR) {
        return NGX_ERROR;
    }

    s = buf;
    e = buf + n;

    while (s < e && (*s == ' ' || *s == '\t' || *s == '\r' || *s == '\n')) {
        s++;
    }

    for (q = s; q < e && *q != '\r' && *q != '\n'; q++) { /* void */ }

    while (q > s && (q[-1] == ' ' || q[-1] == '\t')) {
        q--;
    }

    *q = '\0';

    for (e = s; e < q && *e > 0x20 && *e < 0x7f; e++) { /* void */ }

    if (q == s || e < q || (size_t) (q - s) > max) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "%s \"%V\": expected one line of 1 to %uz "
                           "visible ASCII characters", what, &file, max);
        return NGX_ERROR;
    }

    out->data = s;
    out->len = q - s;

    return NGX_OK;
}
