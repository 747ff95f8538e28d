
/*
 * ngx_http_llm_module: writing JSON by hand.  The UTF-8-validating
 * string escaper for text from an engine or a client (a byte that starts
 * no valid sequence becomes U+FFFD, so every body is valid JSON and valid
 * UTF-8 whatever comes in), and the growable byte string the JSON answer
 * is collected in.
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "ngx_http_llm_module.h"


/*
 * The length of the well-formed UTF-8 sequence at s (RFC 3629: no
 * overlong forms, no surrogates, nothing past U+10FFFF), 0 if there is
 * none.  Written here because every string the gateway writes into JSON
 * passes through the escaper below, and validating in the same pass costs
 * nothing extra.
 */

size_t
ngx_http_llm_utf8_seq(const u_char *s, size_t len)
{
    size_t  n, i;
    u_char  c;

    c = s[0];

    if (c < 0x80) {
        return 1;
    }

    if (c < 0xc2) {
        return 0;
    }

    n = (c < 0xe0) ? 2 : (c < 0xf0) ? 3 : (c < 0xf5) ? 4 : 0;

    if (n == 0 || len < n) {
        return 0;
    }

    for (i = 1; i < n; i++) {
        if ((s[i] & 0xc0) != 0x80) {
            return 0;
        }
    }

    if ((c == 0xe0 && s[1] < 0xa0)          /* overlong */
        || (c == 0xed && s[1] > 0x9f)       /* surrogates */
        || (c == 0xf0 && s[1] < 0x90)       /* overlong */
        || (c == 0xf4 && s[1] > 0x8f))      /* over U+10FFFF */
    {
        return 0;
    }

    return n;
}


/*
 * ngx_cpystrn() for text from an engine that is kept in a fixed array and
 * later given to jansson (which refuses invalid UTF-8): copies whole
 * characters only, U+FFFD for a byte that starts none, always terminated.
 */

void
ngx_http_llm_utf8_cpystrn(u_char *dst, const u_char *src, size_t size)
{
    size_t  len, i, k;
    u_char  *d, *end;

    if (size == 0) {
        return;
    }

    len = ngx_strlen(src);
    d = dst;
    end = dst + size - 1;

    for (i = 0; i < len; i += k) {
        k = ngx_http_llm_utf8_seq(src + i, len - i);

        if (k == 0) {
            if (end - d < 3) {
                break;
            }

            d = ngx_cpymem(d, "\xef\xbf\xbd", 3);
            k = 1;
            continue;
        }

        if ((size_t) (end - d) < k) {
            break;
        }

        d = ngx_cpymem(d, src + i, k);
    }

    *d = '\0';
}


/*
 * Keeps s in out already JSON-escaped (and made valid UTF-8), for values
 * that come from an engine and are written with %V: the fingerprint.
 */

ngx_int_t
ngx_http_llm_json_str(ngx_pool_t *pool, ngx_str_t *out, const u_char *s,
    size_t len)
{
    u_char  *p;

    p = ngx_pnalloc(pool, ngx_http_llm_json_escape_len(s, len) + 1);
    if (p == NULL) {
        return NGX_ERROR;
    }

    out->data = p;
    out->len = ngx_http_llm_json_escape(p, s, len) - p;

    return NGX_OK;
}


/*
 * n in decimal at p; returns the end.  What ngx_sprintf("%uL") writes,
 * without its format parsing (some 700 instructions a call, paid several
 * times for every answer).
 */

u_char *
ngx_http_llm_uint(u_char *p, uint64_t n)
{
    u_char   tmp[NGX_INT64_LEN], *t;

    t = tmp + NGX_INT64_LEN;

    do {
        *--t = (u_char) (n % 10 + '0');
        n /= 10;
    } while (n);

    return ngx_cpymem(p, t, tmp + NGX_INT64_LEN - t);
}


/*
 * JSON string escaping of len bytes that should be UTF-8 and may not be
 * (an engine's text, a URI, a cut message): a byte that starts no valid
 * sequence becomes \ufffd, so whatever comes in, the body is valid JSON
 * and valid UTF-8.  _len() gives the exact size _escape() writes.
 */

size_t
ngx_http_llm_json_escape_len(const u_char *s, size_t len)
{
    size_t  n, i, k;

    n = 0;

    for (i = 0; i < len; i++) {
        if (s[i] == '"' || s[i] == '\\' || s[i] == '\n' || s[i] == '\r'
            || s[i] == '\t')
        {
            n += 2;

        } else if (s[i] < 0x20 || s[i] == 0x7f) {
            n += 6;

        } else if (s[i] < 0x80) {
            n++;

        } else {
            k = ngx_http_llm_utf8_seq(s + i, len - i);

            if (k == 0) {
                n += 6;

            } else {
                n += k;
                i += k - 1;
            }
        }
    }

    return n;
}



u_char *
ngx_http_llm_json_escape(u_char *d, const u_char *s, size_t len)
{
    size_t  i, k;

    static u_char  hex[] = "0123456789abcdef";

    for (i = 0; i < len; i++) {
        switch (s[i]) {
        case '"':
            *d++ = '\\'; *d++ = '"';
            break;
        case '\\':
            *d++ = '\\'; *d++ = '\\';
            break;
        case '\n':
            *d++ = '\\'; *d++ = 'n';
            break;
        case '\r':
            *d++ = '\\'; *d++ = 'r';
            break;
        case '\t':
            *d++ = '\\'; *d++ = 't';
            break;
        default:
            if (s[i] < 0x20 || s[i] == 0x7f) {
                *d++ = '\\'; *d++ = 'u'; *d++ = '0'; *d++ = '0';
                *d++ = hex[s[i] >> 4];
                *d++ = hex[s[i] & 0xf];

            } else if (s[i] < 0x80) {
                *d++ = s[i];

            } else {
                k = ngx_http_llm_utf8_seq(s + i, len - i);

                if (k == 0) {
                    d = ngx_cpymem(d, "\\ufffd", 6);

                } else {
                    d = ngx_cpymem(d, s + i, k);
                    i += k - 1;
                }
            }
        }
    }

    return d;
}


ngx_int_t
ngx_http_llm_sbuf_add(ngx_pool_t *pool, ngx_http_llm_sbuf_t *s,
    const u_char *data, size_t len)
{
    u_char  *p;
    size_t   cap;

    if (len == 0) {
        return NGX_OK;
    }

    if (s->len + len + 1 > s->cap) {
        cap = ngx_max(s->cap * 2, s->len + len + 1);
        cap = ngx_max(cap, 256);

        p = ngx_pnalloc(pool, cap);
        if (p == NULL) {
            return NGX_ERROR;
        }

        if (s->len) {
            ngx_memcpy(p, s->data, s->len);
        }

        s->data = p;
        s->cap = cap;
    }

    ngx_memcpy(s->data + s->len, data, len);
    s->len += len;
    s->data[s->len] = '\0';

    return NGX_OK;
}


/*
 * A JSON string of bytes that may be partial or bad UTF-8 (a bad byte
 * becomes U+FFFD), for the jansson-built bodies; s may be NULL when len
 * is 0.  NULL on no memory.
 */

json_t *
ngx_http_llm_json_text(const u_char *s, size_t len)
{
    u_char  *buf, *d;
    size_t   i, n;
    json_t  *j;

    j = json_stringn((const char *) (s ? s : (u_char *) ""), len);
    if (j) {
        return j;
    }

    buf = malloc(len * 3 + 1);
    if (buf == NULL) {
        return NULL;
    }

    d = buf;

    for (i = 0; i < len; i += n) {
        n = ngx_http_llm_utf8_seq(s + i, len - i);

        if (n == 0) {
            /* ASCII is a sequence of its own: only bad bytes end here */
            *d++ = 0xef; *d++ = 0xbf; *d++ = 0xbd;
            n = 1;
            continue;
        }

        d = ngx_cpymem(d, s + i, n);
    }

    j = json_stringn((const char *) buf, d - buf);
    free(buf);

    return j;
}


/* What a JSON value is, for messages: "an object", "a string", ... */

const char *
ngx_http_llm_json_type_name(json_t *j)
{
    switch (json_typeof(j)) {
    case JSON_OBJECT:
        return "an object";
    case JSON_ARRAY:
        return "an array";
    case JSON_STRING:
        return "a string";
    case JSON_INTEGER:
        return "an integer";
    case JSON_REAL:
        return "a decimal";
    case JSON_TRUE:
    case JSON_FALSE:
        return "a boolean";
    default:
        return "null";
    }
}
