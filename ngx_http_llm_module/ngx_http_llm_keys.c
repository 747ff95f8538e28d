
/*
 * ngx_http_llm_keys_module: API keys for ngx_http_llm_module.
 *
 * Directives (docs/KEYS.md):
 *
 *   llm_keys FILE | off;        http, server, location
 *   llm_zone NAME SIZE;         http (ngx_http_llm_limit.c)
 *   llm_limit_zone NAME | off;  http, server, location
 *   llm_metrics;                location (ngx_http_llm_metrics.c)
 *
 * The keys file holds one key per line as the SHA-256 of the key, never
 * the key itself; it is read when the configuration is loaded, so
 * "nginx -s reload" picks up a changed file.  A presented key is hashed
 * and the digest looked up in a table sorted by digest; the final
 * comparison is CRYPTO_memcmp().  No part of a presented key is ever
 * written to a log.
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include "ngx_http_llm_module.h"
#include "ngx_http_llm_keys.h"


#define NGX_HTTP_LLM_KEY_NAME_LEN  64


static ngx_int_t ngx_http_llm_keys_presented(ngx_http_request_t *r,
    ngx_str_t *key);
static void ngx_http_llm_keys_record_401(ngx_http_request_t *r);
static ngx_int_t ngx_http_llm_keys_find(ngx_http_llm_keyset_t *ks,
    u_char *hash, ngx_http_llm_key_t **key);
static ngx_http_llm_keyset_t *ngx_http_llm_keys_load(ngx_conf_t *cf,
    ngx_str_t *file);
static ngx_int_t ngx_http_llm_keys_parse_line(ngx_conf_t *cf,
    ngx_str_t *file, ngx_uint_t line, u_char *p, u_char *last,
    ngx_array_t *keys);
static ngx_int_t ngx_http_llm_keys_parse_hash(ngx_conf_t *cf,
    ngx_str_t *file, ngx_uint_t line, ngx_str_t *tok,
    ngx_http_llm_key_t *key);
static ngx_int_t ngx_http_llm_keys_parse_name(ngx_conf_t *cf,
    ngx_str_t *file, ngx_uint_t line, ngx_str_t *tok, ngx_array_t *keys,
    ngx_http_llm_key_t *key);
static ngx_int_t ngx_http_llm_keys_parse_option(ngx_conf_t *cf,
    ngx_str_t *file, ngx_uint_t line, ngx_str_t *tok,
    ngx_http_llm_key_t *key);
static ngx_int_t ngx_http_llm_keys_parse_models(ngx_conf_t *cf,
    ngx_str_t *v, ngx_http_llm_key_t *key);
static int ngx_http_llm_keys_cmp(const void *one, const void *two);

static char *ngx_http_llm_keys(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
static char *ngx_http_llm_limit_zone(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
static char *ngx_http_llm_metrics(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);

static void *ngx_http_llm_keys_create_main_conf(ngx_conf_t *cf);
static void *ngx_http_llm_keys_create_loc_conf(ngx_conf_t *cf);
static char *ngx_http_llm_keys_merge_loc_conf(ngx_conf_t *cf, void *parent,
    void *child);


static ngx_command_t  ngx_http_llm_keys_commands[] = {

    { ngx_string("llm_keys"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_http_llm_keys,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("llm_zone"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE2,
      ngx_http_llm_zone,
      NGX_HTTP_MAIN_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("llm_limit_zone"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_http_llm_limit_zone,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("llm_limit_store"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_1MORE,
      ngx_http_llm_limit_store,
      NGX_HTTP_MAIN_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("llm_metrics"),
      NGX_HTTP_LOC_CONF|NGX_CONF_NOARGS,
      ngx_http_llm_metrics,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      NULL },

      ngx_null_command
};


static ngx_http_module_t  ngx_http_llm_keys_module_ctx = {
    NULL,                                  /* preconfiguration */
    NULL,                                  /* postconfiguration */

    ngx_http_llm_keys_create_main_conf,    /* create main configuration */
    NULL,                                  /* init main configuration */

    NULL,                                  /* create server configuration */
    NULL,                                  /* merge server configuration */

    ngx_http_llm_keys_create_loc_conf,     /* create location configuration */
    ngx_http_llm_keys_merge_loc_conf       /* merge location configuration */
};


ngx_module_t  ngx_http_llm_keys_module = {
    NGX_MODULE_V1,
    &ngx_http_llm_keys_module_ctx,         /* module context */
    ngx_http_llm_keys_commands,            /* module directives */
    NGX_HTTP_MODULE,                       /* module type */
    NULL,                                  /* init master */
    NULL,                                  /* init module */
    NULL,                                  /* init process */
    NULL,                                  /* init thread */
    NULL,                                  /* exit thread */
    ngx_http_llm_store_exit,               /* exit process */
    NULL,                                  /* exit master */
    NGX_MODULE_V1_PADDING
};


/*
 * Authenticates r (contract in ngx_http_llm_module.h).  The presented key
 * is hashed with SHA-256 and only the digest is looked up; on failure the
 * error log gets a line without any part of the key, and the verdict
 * (the 401 OpenAI sends) keeps the key masked down to its public prefix.
 */

ngx_int_t
ngx_http_llm_auth(ngx_http_request_t *r, ngx_http_llm_key_t **key,
    ngx_http_llm_decision_t *d)
{
    u_char                         *p, *last, hash[EVP_MAX_MD_SIZE];
    size_t                          len;
    unsigned int                    n;
    ngx_str_t                       presented;
    ngx_http_llm_keys_ctx_t        *ctx;
    ngx_http_llm_keys_loc_conf_t   *klcf;

    *key = NULL;
    ngx_memzero(d, sizeof(ngx_http_llm_decision_t));

    klcf = ngx_http_get_module_loc_conf(r, ngx_http_llm_keys_module);

    if (klcf->keyset == NULL) {
        return NGX_DECLINED;
    }

    if (ngx_http_llm_keys_presented(r, &presented) != NGX_OK) {
        ngx_log_error(NGX_LOG_INFO, r->connection->log, 0,
                      "llm: no API key presented");

        ngx_http_llm_keys_record_401(r);

        d->verdict = NGX_HTTP_LLM_DENY_NO_KEY;
        return NGX_OK;
    }

    if (EVP_Digest(presented.data, presented.len, hash, &n, EVP_sha256(),
                   NULL)
        != 1 || n != 32)
    {
        ngx_log_error(NGX_LOG_ALERT, r->connection->log, 0,
                      "llm: EVP_Digest(SHA-256) failed");
        return NGX_ERROR;
    }

    if (ngx_http_llm_keys_find(klcf->keyset, hash, key) != NGX_OK) {

        ngx_log_error(NGX_LOG_INFO, r->connection->log, 0,
                      "llm: unknown API key (%uz bytes) for keys file \"%V\"",
                      presented.len, &klcf->keyset->file);

        ngx_http_llm_keys_record_401(r);

        /*
         * OpenAI shows the key masked; the message also goes to the error
         * log, so only a public prefix ("sk-", "sk-llm-") is shown
         */

        p = d->masked;

        if (presented.len > 3
            && ngx_strncmp(presented.data, "sk-", 3) == 0)
        {
            last = ngx_strlchr(presented.data + 3,
                               presented.data + ngx_min(presented.len, 8),
                               '-');
            len = last ? (size_t) (last + 1 - presented.data) : 3;
            p = ngx_cpymem(p, presented.data, len);
        }

        p = ngx_cpymem(p, "****", 4);
        *p = '\0';

        d->verdict = NGX_HTTP_LLM_DENY_BAD_KEY;
        *key = NULL;
        return NGX_OK;
    }

    ctx = ngx_http_llm_keys_get_ctx(r);
    if (ctx == NULL) {
        *key = NULL;
        return NGX_ERROR;
    }

    ctx->key = *key;

    ngx_log_debug1(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "llm: API key \"%V\"", &(*key)->name);

    return NGX_OK;
}


/*
 * A 401 comes before the body, so before any model name: it is counted
 * here as model="none", and the caller's ngx_http_llm_metrics_record()
 * for the same request is ignored.
 */

static void
ngx_http_llm_keys_record_401(ngx_http_request_t *r)
{
    ngx_time_t             *tp;
    ngx_msec_int_t          ms;
    ngx_http_llm_sample_t   s;

    ngx_memzero(&s, sizeof(ngx_http_llm_sample_t));

    tp = ngx_timeofday();
    ms = (ngx_msec_int_t) ((tp->sec - r->start_sec) * 1000
                           + (tp->msec - r->start_msec));

    s.status = NGX_HTTP_UNAUTHORIZED;
    s.duration = (ms > 0) ? (ngx_msec_t) ms : 0;

    ngx_http_llm_metrics_record(r, &s);
}


/*
 * Finds the presented key in "Authorization: Bearer KEY" (the scheme in
 * any case) or else in "x-api-key: KEY".  Spaces and tabs around the
 * value and between "Bearer" and the key are ignored.  NGX_DECLINED when
 * neither header carries a non-empty key.
 */

static ngx_int_t
ngx_http_llm_keys_presented(ngx_http_request_t *r, ngx_str_t *key)
{
    u_char           *p, *last;
    ngx_uint_t        i;
    ngx_list_part_t  *part;
    ngx_table_elt_t  *h;

    key->len = 0;
    key->data = NULL;

    h = r->headers_in.authorization;

    if (h != NULL) {
        p = h->value.data;
        last = p + h->value.len;

        while (p < last && (*p == ' ' || *p == '\t')) {
            p++;
        }

        if (last - p > 6
            && ngx_strncasecmp(p, (u_char *) "Bearer", 6) == 0
            && (p[6] == ' ' || p[6] == '\t'))
        {
            p += 7;

            while (p < last && (*p == ' ' || *p == '\t')) {
                p++;
            }

            while (last > p && (last[-1] == ' ' || last[-1] == '\t')) {
                last--;
            }

            if (p < last) {
                key->data = p;
                key->len = last - p;
                goto found;
            }
        }
    }

    part = &r->headers_in.headers.part;
    h = part->elts;

    for (i = 0; /* void */ ; i++) {

        if (i >= part->nelts) {
            if (part->next == NULL) {
                break;
            }

            part = part->next;
            h = part->elts;
            i = 0;
        }

        if (h[i].key.len != sizeof("x-api-key") - 1
            || ngx_strncasecmp(h[i].key.data, (u_char *) "x-api-key",
                               sizeof("x-api-key") - 1)
               != 0)
        {
            continue;
        }

        p = h[i].value.data;
        last = p + h[i].value.len;

        while (p < last && (*p == ' ' || *p == '\t')) {
            p++;
        }

        while (last > p && (last[-1] == ' ' || last[-1] == '\t')) {
            last--;
        }

        if (p < last) {
            key->data = p;
            key->len = last - p;
            goto found;
        }
    }

    return NGX_DECLINED;

found:

    return NGX_OK;
}


/*
 * Binary search over the digests (the digest of an attacker's input says
 * nothing about any stored digest), then a constant-time comparison of
 * the candidate.
 */

static ngx_int_t
ngx_http_llm_keys_find(ngx_http_llm_keyset_t *ks, u_char *hash,
    ngx_http_llm_key_t **key)
{
    ngx_int_t   rc;
    ngx_uint_t  lo, hi, mid;

    lo = 0;
    hi = ks->nkeys;

    while (lo < hi) {
        mid = lo + (hi - lo) / 2;

        rc = ngx_memcmp(hash, ks->keys[mid].hash, 32);

        if (rc == 0) {
            lo = mid;
            break;
        }

        if (rc < 0) {
            hi = mid;

        } else {
            lo = mid + 1;
        }
    }

    if (lo < ks->nkeys && CRYPTO_memcmp(hash, ks->keys[lo].hash, 32) == 0) {
        *key = &ks->keys[lo];
        return NGX_OK;
    }

    return NGX_DECLINED;
}


ngx_uint_t
ngx_http_llm_key_allows(ngx_http_llm_key_t *key, ngx_str_t *model)
{
    ngx_str_t   *m;
    ngx_uint_t   i;

    if (key == NULL || key->models == NULL) {
        return 1;
    }

    m = key->models->elts;

    for (i = 0; i < key->models->nelts; i++) {
        if (m[i].len == model->len
            && ngx_memcmp(m[i].data, model->data, model->len) == 0)
        {
            return 1;
        }
    }

    return 0;
}


ngx_http_llm_keys_ctx_t *
ngx_http_llm_keys_get_ctx(ngx_http_request_t *r)
{
    ngx_http_llm_keys_ctx_t  *ctx;

    ctx = ngx_http_get_module_ctx(r, ngx_http_llm_keys_module);

    if (ctx == NULL) {
        ctx = ngx_pcalloc(r->pool, sizeof(ngx_http_llm_keys_ctx_t));
        if (ctx == NULL) {
            return NULL;
        }

        ngx_http_set_ctx(r, ctx, ngx_http_llm_keys_module);
    }

    return ctx;
}


ngx_http_llm_key_t *
ngx_http_llm_request_key(ngx_http_request_t *r)
{
    ngx_http_llm_keys_ctx_t  *ctx;

    ctx = ngx_http_get_module_ctx(r, ngx_http_llm_keys_module);

    return ctx ? ctx->key : NULL;
}


/*
 * Reads and parses a keys file (format in docs/KEYS.md) into a table
 * sorted by hash, allocated from cf->pool so it lives as long as the
 * configuration.  Each error names file:line and is logged once; returns
 * NULL then.
 */

static ngx_http_llm_keyset_t *
ngx_http_llm_keys_load(ngx_conf_t *cf, ngx_str_t *file)
{
    u_char                 *buf, *p, *eol, *last;
    off_t                   size;
    ssize_t                 n;
    ngx_fd_t                fd;
    ngx_uint_t              line, i;
    ngx_array_t             keys;
    ngx_file_info_t         fi;
    ngx_http_llm_key_t     *k;
    ngx_http_llm_keyset_t  *ks;

    ks = NULL;
    buf = NULL;

    fd = ngx_open_file(file->data, NGX_FILE_RDONLY, NGX_FILE_OPEN, 0);

    if (fd == NGX_INVALID_FILE) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, ngx_errno,
                           ngx_open_file_n " \"%V\" failed", file);
        return NULL;
    }

    if (ngx_fd_info(fd, &fi) == NGX_FILE_ERROR) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, ngx_errno,
                           ngx_fd_info_n " \"%V\" failed", file);
        goto done;
    }

    size = ngx_file_size(&fi);

    if (size > 64 * 1024 * 1024) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "keys file \"%V\" is larger than 64M", file);
        goto done;
    }

    buf = ngx_pnalloc(cf->temp_pool, (size_t) size + 1);
    if (buf == NULL) {
        goto done;
    }

    for (p = buf; p < buf + size; p += n) {
        n = ngx_read_fd(fd, p, buf + size - p);

        if (n == NGX_ERROR) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, ngx_errno,
                               ngx_read_fd_n " \"%V\" failed", file);
            goto done;
        }

        if (n == 0) {
            break;
        }
    }

    last = p;

    if (ngx_array_init(&keys, cf->pool, 16, sizeof(ngx_http_llm_key_t))
        != NGX_OK)
    {
        goto done;
    }

    line = 0;

    for (p = buf; p < last; p = eol + 1) {
        line++;

        eol = ngx_strlchr(p, last, '\n');
        if (eol == NULL) {
            eol = last;
        }

        if (ngx_http_llm_keys_parse_line(cf, file, line, p, eol, &keys)
            != NGX_OK)
        {
            goto done;
        }
    }

    k = keys.elts;

    ngx_qsort(k, keys.nelts, sizeof(ngx_http_llm_key_t),
              ngx_http_llm_keys_cmp);

    for (i = 1; i < keys.nelts; i++) {
        if (ngx_memcmp(k[i - 1].hash, k[i].hash, 32) == 0) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "%V:%ui: the same hash as line %ui",
                               file, ngx_max(k[i - 1].index, k[i].index),
                               ngx_min(k[i - 1].index, k[i].index));
            goto done;
        }
    }

    if (keys.nelts == 0) {
        ngx_conf_log_error(NGX_LOG_WARN, cf, 0,
                           "keys file \"%V\" has no keys: every request "
                           "gets 401", file);
    }

    ks = ngx_pcalloc(cf->pool, sizeof(ngx_http_llm_keyset_t));
    if (ks == NULL) {
        goto done;
    }

    ks->file = *file;
    ks->keys = k;
    ks->nkeys = keys.nelts;

done:

    if (ngx_close_file(fd) == NGX_FILE_ERROR) {
        ngx_conf_log_error(NGX_LOG_ALERT, cf, ngx_errno,
                           ngx_close_file_n " \"%V\" failed", file);
    }

    return ks;
}


static int
ngx_http_llm_keys_cmp(const void *one, const void *two)
{
    const ngx_http_llm_key_t  *a = one, *b = two;

    return ngx_memcmp(a->hash, b->hash, 32);
}


/* One line of a keys file: "HASH NAME [rpm=N] [tpm=N] [quota=N] [models=]". */

static ngx_int_t
ngx_http_llm_keys_parse_line(ngx_conf_t *cf, ngx_str_t *file,
    ngx_uint_t line, u_char *p, u_char *last, ngx_array_t *keys)
{
    u_char              *s;
    ngx_str_t            tok[8];
    ngx_uint_t           ntok, i;
    ngx_http_llm_key_t  *key;

    /* tokens separated by spaces or tabs; '#' at a token start ends it */

    ntok = 0;

    while (p < last) {

        while (p < last
               && (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n'))
        {
            p++;
        }

        if (p == last || *p == '#') {
            break;
        }

        if (ntok == 8) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "%V:%ui: too many fields (at most: hash, "
                               "name, rpm=, tpm=, quota=, models=)",
                               file, line);
            return NGX_ERROR;
        }

        s = p;

        while (p < last && *p != ' ' && *p != '\t' && *p != '\r') {
            p++;
        }

        tok[ntok].data = s;
        tok[ntok].len = p - s;
        ntok++;
    }

    if (ntok == 0) {
        return NGX_OK;
    }

    if (ntok < 2) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "%V:%ui: expected \"SHA256-HEX NAME [options]\"",
                           file, line);
        return NGX_ERROR;
    }

    key = ngx_array_push(keys);
    if (key == NULL) {
        return NGX_ERROR;
    }

    ngx_memzero(key, sizeof(ngx_http_llm_key_t));
    key->index = line;

    if (ngx_http_llm_keys_parse_hash(cf, file, line, &tok[0], key)
        != NGX_OK
        || ngx_http_llm_keys_parse_name(cf, file, line, &tok[1], keys, key)
           != NGX_OK)
    {
        return NGX_ERROR;
    }

    for (i = 2; i < ntok; i++) {
        if (ngx_http_llm_keys_parse_option(cf, file, line, &tok[i], key)
            != NGX_OK)
        {
            return NGX_ERROR;
        }
    }

    return NGX_OK;
}


/* The first field: the key's SHA-256 as 64 hex digits. */

static ngx_int_t
ngx_http_llm_keys_parse_hash(ngx_conf_t *cf, ngx_str_t *file,
    ngx_uint_t line, ngx_str_t *tok, ngx_http_llm_key_t *key)
{
    ngx_int_t   hi, lo;
    ngx_uint_t  i;

    if (tok->len != 64) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "%V:%ui: the first field must be the key's "
                           "SHA-256 as 64 hex digits, not %uz characters "
                           "(llm-keygen prints a line)", file, line,
                           tok->len);
        return NGX_ERROR;
    }

    for (i = 0; i < 32; i++) {
        hi = ngx_hextoi(&tok->data[2 * i], 1);
        lo = ngx_hextoi(&tok->data[2 * i + 1], 1);

        if (hi == NGX_ERROR || lo == NGX_ERROR) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "%V:%ui: the SHA-256 has a character that "
                               "is not a hex digit at position %ui",
                               file, line, 2 * i + (hi == NGX_ERROR ? 1 : 2));
            return NGX_ERROR;
        }

        key->hash[i] = (u_char) (hi << 4 | lo);
    }

    return NGX_OK;
}


/* The name: printable, no quotes, unique, for logs and $llm_key_name. */

static ngx_int_t
ngx_http_llm_keys_parse_name(ngx_conf_t *cf, ngx_str_t *file,
    ngx_uint_t line, ngx_str_t *tok, ngx_array_t *keys,
    ngx_http_llm_key_t *key)
{
    u_char               c;
    ngx_uint_t           i, j;
    ngx_http_llm_key_t  *k;

    if (tok->len > NGX_HTTP_LLM_KEY_NAME_LEN) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "%V:%ui: the name is longer than %d characters",
                           file, line, NGX_HTTP_LLM_KEY_NAME_LEN);
        return NGX_ERROR;
    }

    for (i = 0; i < tok->len; i++) {
        c = tok->data[i];

        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
            || (c >= '0' && c <= '9')
            || c == '-' || c == '_' || c == '.' || c == '@' || c == ':')
        {
            continue;
        }

        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "%V:%ui: the name may have only letters, digits "
                           "and \"-_.@:\"", file, line);
        return NGX_ERROR;
    }

    k = keys->elts;

    for (j = 0; j + 1 < keys->nelts; j++) {
        if (k[j].name.len == tok->len
            && ngx_memcmp(k[j].name.data, tok->data, tok->len) == 0)
        {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "%V:%ui: the name \"%V\" is already used on "
                               "line %ui", file, line, tok, k[j].index);
            return NGX_ERROR;
        }
    }

    key->name.len = tok->len;
    key->name.data = ngx_pstrdup(cf->pool, tok);
    if (key->name.data == NULL) {
        return NGX_ERROR;
    }

    return NGX_OK;
}


/* One option: rpm=N, tpm=N, quota=N or models=A,B. */

static ngx_int_t
ngx_http_llm_keys_parse_option(ngx_conf_t *cf, ngx_str_t *file,
    ngx_uint_t line, ngx_str_t *tok, ngx_http_llm_key_t *key)
{
    u_char     *s;
    off_t       v;
    ngx_str_t   opt;

    s = ngx_strlchr(tok->data, tok->data + tok->len, '=');

    if (s == NULL) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "%V:%ui: expected NAME=VALUE, not \"%V\"",
                           file, line, tok);
        return NGX_ERROR;
    }

    opt.data = s + 1;
    opt.len = tok->data + tok->len - opt.data;

    if (ngx_strncmp(tok->data, "models=", 7) == 0) {
        if (ngx_http_llm_keys_parse_models(cf, &opt, key) != NGX_OK) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "%V:%ui: models= expects a comma "
                               "separated list of model names",
                               file, line);
            return NGX_ERROR;
        }

        return NGX_OK;
    }

    if (s - tok->data == 6 && ngx_strncmp(tok->data, "budget", 6) == 0) {

        /* dollars with up to 6 decimals: microdollars, kept as pico */

        v = ngx_atofp(opt.data, opt.len, 6);

        if (v == NGX_ERROR || v > 9000000000000LL) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "%V:%ui: \"%V\" expects dollars up to "
                               "9000000, e.g. budget=25 or budget=0.50 "
                               "(0: none)",
                               file, line, tok);
            return NGX_ERROR;
        }

        key->budget = (uint64_t) v * 1000000;
        return NGX_OK;
    }

    v = ngx_atoof(opt.data, opt.len);

    if (v == NGX_ERROR || v > 1000000000000000LL) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "%V:%ui: \"%V\" expects a whole number "
                           "(0: unlimited)", file, line, tok);
        return NGX_ERROR;
    }

    if (s - tok->data == 3
        && (ngx_strncmp(tok->data, "rpm", 3) == 0
            || ngx_strncmp(tok->data, "tpm", 3) == 0)
        && v > 1000000000000LL)
    {
        /* the token buckets hold limit * 60000 in an int64_t */
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "%V:%ui: \"%V\" is over the largest limit "
                           "of 1000000000000 per minute",
                           file, line, tok);
        return NGX_ERROR;
    }

    if (s - tok->data == 3 && ngx_strncmp(tok->data, "rpm", 3) == 0) {
        key->rpm = (ngx_uint_t) v;

    } else if (s - tok->data == 3
               && ngx_strncmp(tok->data, "tpm", 3) == 0)
    {
        key->tpm = (ngx_uint_t) v;

    } else if (s - tok->data == 5
               && ngx_strncmp(tok->data, "quota", 5) == 0)
    {
        key->quota = (uint64_t) v;

    } else {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "%V:%ui: unknown option \"%V\" (expected "
                           "rpm=, tpm=, quota=, budget= or models=)",
                           file, line, tok);
        return NGX_ERROR;
    }

    return NGX_OK;
}


static ngx_int_t
ngx_http_llm_keys_parse_models(ngx_conf_t *cf, ngx_str_t *v,
    ngx_http_llm_key_t *key)
{
    u_char     *p, *s, *last;
    ngx_str_t  *m;

    if (v->len == 1 && v->data[0] == '*') {
        key->models = NULL;
        return NGX_OK;
    }

    if (key->models == NULL) {
        key->models = ngx_array_create(cf->pool, 4, sizeof(ngx_str_t));
        if (key->models == NULL) {
            return NGX_ERROR;
        }
    }

    p = v->data;
    last = p + v->len;

    for ( ;; ) {
        s = p;

        while (p < last && *p != ',') {
            p++;
        }

        if (p == s) {
            return NGX_ERROR;
        }

        m = ngx_array_push(key->models);
        if (m == NULL) {
            return NGX_ERROR;
        }

        m->len = p - s;
        m->data = ngx_pnalloc(cf->pool, m->len);
        if (m->data == NULL) {
            return NGX_ERROR;
        }

        ngx_memcpy(m->data, s, m->len);

        if (p == last) {
            return NGX_OK;
        }

        p++;
    }
}


static char *
ngx_http_llm_keys(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_llm_keys_loc_conf_t *klcf = conf;

    ngx_str_t                       *value, file;
    ngx_uint_t                       i;
    ngx_http_llm_keyset_t          **ksp, *ks;
    ngx_http_llm_keys_main_conf_t   *kmcf;

    if (klcf->keys_set) {
        return "is duplicate";
    }

    klcf->keys_set = 1;

    value = cf->args->elts;

    if (ngx_strcmp(value[1].data, "off") == 0) {
        klcf->keyset = NULL;
        return NGX_CONF_OK;
    }

    file = value[1];

    if (ngx_conf_full_name(cf->cycle, &file, 1) != NGX_OK) {
        return NGX_CONF_ERROR;
    }

    /* one table per file, shared by every location that names it */

    kmcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_llm_keys_module);

    ksp = kmcf->keysets.elts;

    for (i = 0; i < kmcf->keysets.nelts; i++) {
        if (ksp[i]->file.len == file.len
            && ngx_strncmp(ksp[i]->file.data, file.data, file.len) == 0)
        {
            klcf->keyset = ksp[i];
            return NGX_CONF_OK;
        }
    }

    ks = ngx_http_llm_keys_load(cf, &file);
    if (ks == NULL) {
        return NGX_CONF_ERROR;
    }

    ksp = ngx_array_push(&kmcf->keysets);
    if (ksp == NULL) {
        return NGX_CONF_ERROR;
    }

    *ksp = ks;
    klcf->keyset = ks;

    return NGX_CONF_OK;
}


static char *
ngx_http_llm_limit_zone(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_llm_keys_loc_conf_t *klcf = conf;

    ngx_str_t  *value;

    if (klcf->zone_set) {
        return "is duplicate";
    }

    klcf->zone_set = 1;

    value = cf->args->elts;

    if (ngx_strcmp(value[1].data, "off") == 0) {
        klcf->shm_zone = NULL;
        return NGX_CONF_OK;
    }

    /* the zone may be defined later; ngx_http_llm_zone() sets its size */

    klcf->shm_zone = ngx_shared_memory_add(cf, &value[1], 0,
                                           &ngx_http_llm_keys_module);
    if (klcf->shm_zone == NULL) {
        return NGX_CONF_ERROR;
    }

    return NGX_CONF_OK;
}


static char *
ngx_http_llm_metrics(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_llm_keys_loc_conf_t *klcf = conf;

    ngx_http_core_loc_conf_t  *clcf;

    if (klcf->metrics != NGX_CONF_UNSET) {
        return "is duplicate";
    }

    klcf->metrics = 1;

    clcf = ngx_http_conf_get_module_loc_conf(cf, ngx_http_core_module);
    clcf->handler = ngx_http_llm_metrics_handler;

    return NGX_CONF_OK;
}


static void *
ngx_http_llm_keys_create_main_conf(ngx_conf_t *cf)
{
    ngx_http_llm_keys_main_conf_t  *kmcf;

    kmcf = ngx_pcalloc(cf->pool, sizeof(ngx_http_llm_keys_main_conf_t));
    if (kmcf == NULL) {
        return NULL;
    }

    if (ngx_array_init(&kmcf->keysets, cf->pool, 2,
                       sizeof(ngx_http_llm_keyset_t *))
        != NGX_OK
        || ngx_array_init(&kmcf->zones, cf->pool, 2,
                          sizeof(ngx_shm_zone_t *))
           != NGX_OK)
    {
        return NULL;
    }

    return kmcf;
}


static void *
ngx_http_llm_keys_create_loc_conf(ngx_conf_t *cf)
{
    ngx_http_llm_keys_loc_conf_t  *conf;

    conf = ngx_pcalloc(cf->pool, sizeof(ngx_http_llm_keys_loc_conf_t));
    if (conf == NULL) {
        return NULL;
    }

    /*
     * set by ngx_pcalloc():
     *
     *     conf->keys_set = 0;
     *     conf->zone_set = 0;
     */

    conf->keyset = NGX_CONF_UNSET_PTR;
    conf->shm_zone = NGX_CONF_UNSET_PTR;
    conf->metrics = NGX_CONF_UNSET;

    return conf;
}


/*
 * llm_keys and llm_limit_zone are inherited.  Without llm_limit_zone at
 * any level the first llm_zone of the http block is used, so one llm_zone
 * line is enough for limits and metrics everywhere.
 */

static char *
ngx_http_llm_keys_merge_loc_conf(ngx_conf_t *cf, void *parent, void *child)
{
    ngx_http_llm_keys_loc_conf_t *prev = parent;
    ngx_http_llm_keys_loc_conf_t *conf = child;

    ngx_shm_zone_t                 **zones, *dflt;
    ngx_http_llm_keys_main_conf_t   *kmcf;

    kmcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_llm_keys_module);

    zones = kmcf->zones.elts;
    dflt = kmcf->zones.nelts ? zones[0] : NULL;

    ngx_conf_merge_ptr_value(conf->keyset, prev->keyset, NULL);
    ngx_conf_merge_ptr_value(conf->shm_zone, prev->shm_zone, dflt);
    /* llm_metrics is not inherited: it is a content handler */

    if (conf->metrics == NGX_CONF_UNSET) {
        conf->metrics = 0;
    }

    if (conf->shm_zone && conf->shm_zone->data == NULL) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "unknown llm_zone \"%V\" in llm_limit_zone",
                           &conf->shm_zone->shm.name);
        return NGX_CONF_ERROR;
    }

    if (conf->metrics && conf->shm_zone == NULL) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "llm_metrics needs an llm_zone");
        return NGX_CONF_ERROR;
    }

    return NGX_CONF_OK;
}


/* The key of digest hash in any keys file of the configuration, or NULL. */

ngx_http_llm_key_t *
ngx_http_llm_key_by_hash(ngx_http_request_t *r, u_char *hash)
{
    ngx_uint_t                      i;
    ngx_http_llm_key_t             *key;
    ngx_http_llm_keyset_t         **ks;
    ngx_http_llm_keys_main_conf_t  *kmcf;

    kmcf = ngx_http_get_module_main_conf(r, ngx_http_llm_keys_module);

    ks = kmcf->keysets.elts;

    for (i = 0; i < kmcf->keysets.nelts; i++) {
        if (ks[i] && ngx_http_llm_keys_find(ks[i], hash, &key) == NGX_OK) {
            return key;
        }
    }

    return NULL;
}
