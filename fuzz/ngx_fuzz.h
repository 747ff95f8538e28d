/*
 * A request without a running nginx, for the module's fuzz targets: the
 * process-wide state nginx's core needs (page size, cached time, a log to
 * /dev/null, ngx_cycle), and a fake ngx_http_request_t with a pool, a
 * connection, module ctx and location conf arrays and an upstream, as the
 * module's functions find them.  The nginx core objects are the real
 * ones (../build/fuzz/nginx-src, built with clang and the sanitizers).
 */

#ifndef NGX_FUZZ_H
#define NGX_FUZZ_H

#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include <jansson.h>

#include "ngx_http_llm_module.h"

#define NGX_FUZZ_MODULES  64

static ngx_log_t                 ngx_fuzz_log;
static ngx_open_file_t           ngx_fuzz_log_file;
static ngx_cycle_t               ngx_fuzz_cycle;
static ngx_http_llm_loc_conf_t   ngx_fuzz_llcf;
static ngx_http_llm_main_conf_t  ngx_fuzz_mcf;    /* no responses store */
static int                       ngx_fuzz_strict_utf8;

static void
ngx_fuzz_init(void)
{
    ngx_pagesize = getpagesize();
    for (ngx_pagesize_shift = 0; (1u << ngx_pagesize_shift) < ngx_pagesize;
         ngx_pagesize_shift++)
    {
        /* void */
    }
    ngx_cacheline_size = NGX_CPU_CACHE_LINE;
    ngx_time_init();

    ngx_fuzz_log_file.fd = open("/dev/null", O_WRONLY);
    ngx_fuzz_log.file = &ngx_fuzz_log_file;
    /* everything is formatted (the module's log arguments are checked
     * too) and thrown away */
    ngx_fuzz_log.log_level = NGX_LOG_DEBUG_ALL;
    ngx_fuzz_cycle.log = &ngx_fuzz_log;
    ngx_cycle = &ngx_fuzz_cycle;

    ngx_http_llm_module.ctx_index = 1;
    ngx_fuzz_llcf.max_frame = 1 << 20;
    ngx_fuzz_strict_utf8 = getenv("FUZZ_LAX_UTF8") == NULL;
}

/*
 * A request in its own pool (destroy the pool to free everything).  The
 * request cleanups (r->cleanup: the module's metrics record) are not run:
 * there is no shared zone; the pool cleanups are.
 */
static ngx_http_request_t *
ngx_fuzz_request(void)
{
    ngx_pool_t           *pool;
    ngx_connection_t     *c;
    ngx_http_request_t   *r;
    ngx_http_upstream_t  *u;

    pool = ngx_create_pool(16384, &ngx_fuzz_log);
    if (pool == NULL) {
        return NULL;
    }
    r = ngx_pcalloc(pool, sizeof(ngx_http_request_t));
    c = ngx_pcalloc(pool, sizeof(ngx_connection_t));
    u = ngx_pcalloc(pool, sizeof(ngx_http_upstream_t));
    if (r == NULL || c == NULL || u == NULL) {
        ngx_destroy_pool(pool);
        return NULL;
    }
    c->log = &ngx_fuzz_log;
    c->pool = pool;
    c->fd = -1;
    r->connection = c;
    r->main = r;
    r->pool = pool;
    r->upstream = u;
    u->output.tag = (ngx_buf_tag_t) &ngx_http_llm_module;
    r->ctx = ngx_pcalloc(pool, sizeof(void *) * NGX_FUZZ_MODULES);
    r->loc_conf = ngx_pcalloc(pool, sizeof(void *) * NGX_FUZZ_MODULES);
    r->main_conf = ngx_pcalloc(pool, sizeof(void *) * NGX_FUZZ_MODULES);
    if (r->ctx == NULL || r->loc_conf == NULL || r->main_conf == NULL) {
        ngx_destroy_pool(pool);
        return NULL;
    }
    r->loc_conf[ngx_http_llm_module.ctx_index] = &ngx_fuzz_llcf;
    r->main_conf[ngx_http_llm_module.ctx_index] = &ngx_fuzz_mcf;
    ngx_str_set(&r->method_name, "POST");
    return r;
}

/*
 * Aborts unless s is one JSON value in valid UTF-8 (the gateway's rule:
 * every body valid JSON and valid UTF-8).  With FUZZ_LAX_UTF8 set, bytes
 * >= 0x80 are taken as letters: JSON syntax alone.
 */
static void
ngx_fuzz_check_json(const char *what, const u_char *s, size_t len)
{
    u_char        *copy;
    json_t        *j;
    json_error_t   je;

    if (ngx_fuzz_strict_utf8) {
        j = json_loadb((const char *) s, len, JSON_ALLOW_NUL, &je);
    } else {
        copy = malloc(len ? len : 1);
        if (copy == NULL) {
            return;
        }
        for (size_t i = 0; i < len; i++) {
            copy[i] = s[i] >= 0x80 ? 'x' : s[i];
        }
        j = json_loadb((const char *) copy, len, JSON_ALLOW_NUL, &je);
        free(copy);
    }
    if (j == NULL) {
        fprintf(stderr, "%s is not valid JSON%s: %s at %d: %.*s\n", what,
                ngx_fuzz_strict_utf8 ? "/UTF-8" : "", je.text,
                je.position, (int) (len > 2000 ? 2000 : len), s);
        abort();
    }
    json_decref(j);
}

#endif /* NGX_FUZZ_H */
