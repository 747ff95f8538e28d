/*
 * Jinja values: the arena they live in, containers, truthiness and
 * equality as Python defines them, and the three ways a value becomes
 * text: str() (what {{ }} prints), repr() (how a list prints its items)
 * and json.dumps() (the tojson filter), each byte-identical to CPython's.
 */

#include <errno.h>
#include <float.h>
#include <locale.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <wctype.h>

#include "jinja.h"

struct jj_chunk_s {
    jj_chunk_t  *next;
    size_t       size;
    size_t       used;
    max_align_t  data[];
};

#define JJ_CHUNK  (64 * 1024)

void *
jj_alloc(jj_arena_t *a, size_t n)
{
    jj_chunk_t  *c;
    size_t       sz;
    void        *p;

    n = (n + 15) & ~(size_t) 15;
    if (n == 0) {
        n = 16;
    }
    if (a->limit && a->used + n > a->limit) {
        return NULL;
    }
    c = a->head;
    if (c == NULL || c->size - c->used < n) {
        sz = n > JJ_CHUNK / 2 ? n : JJ_CHUNK;
        c = malloc(sizeof(jj_chunk_t) + sz);
        if (c == NULL) {
            return NULL;
        }
        c->size = sz;
        c->used = 0;
        if (n > JJ_CHUNK / 2 && a->head != NULL) {
            /* big block: keep the current chunk in front for small ones */
            c->next = a->head->next;
            a->head->next = c;
        } else {
            c->next = a->head;
            a->head = c;
        }
    }
    p = (char *) c->data + c->used;
    c->used += n;
    a->used += n;
    memset(p, 0, n);
    return p;
}

void
jj_arena_free(jj_arena_t *a)
{
    jj_chunk_t  *c, *next;

    for (c = a->head; c != NULL; c = next) {
        next = c->next;
        free(c);
    }
    a->head = NULL;
    a->used = 0;
}

/* ---- output buffer ---- */

int
jj_buf_add(jj_buf_t *b, const char *s, size_t n)
{
    size_t  cap;
    char   *p;

    if (b->over) {
        return -1;
    }
    if (b->n + n + 1 > JJ_MAX_OUTPUT) {
        b->over = 1;
        return -1;
    }
    if (b->n + n + 1 > b->cap) {
        cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1) {
            cap *= 2;
        }
        p = realloc(b->p, cap);
        if (p == NULL) {
            b->over = 2;
            return -1;
        }
        b->p = p;
        b->cap = cap;
    }
    if (n) {
        memcpy(b->p + b->n, s, n);
    }
    b->n += n;
    b->p[b->n] = '\0';
    return 0;
}

int
jj_buf_addc(jj_buf_t *b, char c)
{
    return jj_buf_add(b, &c, 1);
}

int
jj_buf_printf(jj_buf_t *b, const char *fmt, ...)
{
    char     tmp[256];
    va_list  ap;
    int      n;

    va_start(ap, fmt);
    n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
    va_end(ap);
    if (n < 0) {
        return -1;
    }
    return jj_buf_add(b, tmp, (size_t) n < sizeof(tmp) ? (size_t) n
                      : sizeof(tmp) - 1);
}

/* ---- containers ---- */

jv_t
jv_str_copy(jj_arena_t *a, const char *s, size_t n)
{
    char  *p;

    p = jj_alloc(a, n + 1);
    if (p == NULL) {
        return jv_undef();
    }
    if (n) {
        memcpy(p, s, n);
    }
    return jv_strn(p, n);
}

jv_t
jv_list_new(jj_arena_t *a, uint32_t kind, size_t cap)
{
    jv_t        v = { 0 };
    jj_list_t  *l;

    l = jj_alloc(a, sizeof(jj_list_t));
    if (l == NULL) {
        return v;
    }
    if (cap) {
        l->items = jj_alloc(a, cap * sizeof(jv_t));
        if (l->items == NULL) {
            return v;
        }
        l->cap = cap;
    }
    l->kind = kind;
    v.type = JV_LIST;
    v.u.l = l;
    return v;
}

int
jv_list_push(jj_arena_t *a, jv_t list, jv_t item)
{
    jj_list_t  *l = list.u.l;
    jv_t       *p;
    size_t      cap;

    if (l->n == l->cap) {
        cap = l->cap ? l->cap * 2 : 4;
        p = jj_alloc(a, cap * sizeof(jv_t));
        if (p == NULL) {
            return -1;
        }
        if (l->n) {
            memcpy(p, l->items, l->n * sizeof(jv_t));
        }
        l->items = p;
        l->cap = cap;
    }
    l->items[l->n++] = item;
    return 0;
}

jv_t
jv_dict_new(jj_arena_t *a, uint32_t type)
{
    jv_t  v = { 0 };

    v.u.d = jj_alloc(a, sizeof(jj_dict_t));
    if (v.u.d != NULL) {
        v.type = type;
    }
    return v;
}

/* Python dict keys: equal values are one key (1 == 1.0 == True). */
static long
dict_find(const jj_dict_t *d, jv_t key)
{
    size_t  i;

    for (i = 0; i < d->n; i++) {
        if (key.type == JV_STR) {
            if (d->keys[i].type == JV_STR && d->keys[i].n == key.n
                && memcmp(d->keys[i].u.s, key.u.s, key.n) == 0)
            {
                return (long) i;
            }
        } else if (jv_equal(d->keys[i], key)) {
            return (long) i;
        }
    }
    return -1;
}

static int dict_append(jj_arena_t *a, jv_t dict, jv_t key, jv_t val);

int
jv_dict_set(jj_arena_t *a, jv_t dict, jv_t key, jv_t val)
{
    long  i;

    i = dict_find(dict.u.d, key);
    if (i >= 0) {
        dict.u.d->vals[i] = val;
        return 0;
    }
    return dict_append(a, dict, key, val);
}

static int
dict_append(jj_arena_t *a, jv_t dict, jv_t key, jv_t val)
{
    jj_dict_t  *d = dict.u.d;
    jv_t       *k, *v;
    size_t      cap;

    if (d->n == d->cap) {
        cap = d->cap ? d->cap * 2 : 4;
        k = jj_alloc(a, cap * sizeof(jv_t));
        v = jj_alloc(a, cap * sizeof(jv_t));
        if (k == NULL || v == NULL) {
            return -1;
        }
        if (d->n) {
            memcpy(k, d->keys, d->n * sizeof(jv_t));
            memcpy(v, d->vals, d->n * sizeof(jv_t));
        }
        d->keys = k;
        d->vals = v;
        d->cap = cap;
    }
    d->keys[d->n] = key;
    d->vals[d->n] = val;
    d->n++;
    return 0;
}

int
jv_dict_get(jv_t dict, jv_t key, jv_t *val)
{
    long  i;

    i = dict_find(dict.u.d, key);
    if (i < 0) {
        return 0;
    }
    *val = dict.u.d->vals[i];
    return 1;
}

int
jv_dict_gets(jv_t dict, const char *key, size_t n, jv_t *val)
{
    return jv_dict_get(dict, jv_strn(key, n), val);
}

/* ---- Python semantics ---- */

int
jv_truthy(jv_t v)
{
    switch (v.type) {
    case JV_UNDEF:
    case JV_NONE:
        return 0;
    case JV_BOOL:
    case JV_INT:
        return v.u.i != 0;
    case JV_FLOAT:
        return v.u.f != 0.0;
    case JV_STR:
        return v.n != 0;
    case JV_LIST:
        if (v.u.l->kind == JL_GEN) {
            return 1;
        }
        return v.u.l->n != 0;
    case JV_DICT:
        return v.u.d->n != 0;
    default:
        return 1;
    }
}

int
jv_is_num(jv_t v)
{
    return v.type == JV_INT || v.type == JV_FLOAT || v.type == JV_BOOL;
}

double
jv_num(jv_t v)
{
    return v.type == JV_FLOAT ? v.u.f : (double) v.u.i;
}

static int equal_at(jv_t a, jv_t b, int level);

int
jv_equal(jv_t a, jv_t b)
{
    return equal_at(a, b, 0);
}

/* Beyond JJ_MAX_REPR_DEPTH nested containers compare unequal. */
static int
equal_at(jv_t a, jv_t b, int level)
{
    size_t  i;
    jv_t    x;

    if (level > JJ_MAX_REPR_DEPTH) {
        return 0;
    }

    if (jv_is_num(a) && jv_is_num(b)) {
        if (a.type != JV_FLOAT && b.type != JV_FLOAT) {
            return a.u.i == b.u.i;
        }
        return jv_num(a) == jv_num(b);
    }
    if (a.type != b.type) {
        return 0;
    }
    switch (a.type) {
    case JV_UNDEF:
    case JV_NONE:
        return 1;
    case JV_STR:
        return a.n == b.n && memcmp(a.u.s, b.u.s, a.n) == 0;
    case JV_LIST:
        if ((a.u.l->kind == JL_TUPLE) != (b.u.l->kind == JL_TUPLE)
            || a.u.l->kind == JL_GEN || b.u.l->kind == JL_GEN)
        {
            return a.u.l == b.u.l;
        }
        if (a.u.l->n != b.u.l->n) {
            return 0;
        }
        for (i = 0; i < a.u.l->n; i++) {
            if (!equal_at(a.u.l->items[i], b.u.l->items[i], level + 1)) {
                return 0;
            }
        }
        return 1;
    case JV_DICT:
        if (a.u.d->n != b.u.d->n) {
            return 0;
        }
        for (i = 0; i < a.u.d->n; i++) {
            if (!jv_dict_get(b, a.u.d->keys[i], &x)
                || !equal_at(a.u.d->vals[i], x, level + 1))
            {
                return 0;
            }
        }
        return 1;
    case JV_NS:
    case JV_LOOP:
    case JV_FUNC:
        return a.u.d == b.u.d;
    default:
        return 0;
    }
}

const char *
jv_type_name(jv_t v)
{
    switch (v.type) {
    case JV_UNDEF: return "Undefined";
    case JV_NONE: return "NoneType";
    case JV_BOOL: return "bool";
    case JV_INT: return "int";
    case JV_FLOAT: return "float";
    case JV_STR: return "str";
    case JV_LIST:
        switch (v.u.l->kind) {
        case JL_TUPLE: return "tuple";
        case JL_GEN: return "generator";
        case JL_ITEMS: return "dict_items";
        case JL_KEYS: return "dict_keys";
        case JL_VALUES: return "dict_values";
        case JL_RANGE: return "range";
        default: return "list";
        }
    case JV_DICT: return "dict";
    case JV_NS: return "Namespace";
    case JV_FUNC: return "function";
    case JV_LOOP: return "LoopContext";
    default: return "object";
    }
}

/*
 * Convert the request's JSON into values.  Integers stay integers, reals
 * become floats, objects keep their key order (jansson preserves insertion
 * order when iterating with json_object_foreach on an object it parsed).
 */
jv_t
jv_from_json(jj_arena_t *a, json_t *j, int depth)
{
    jv_t         v, item, key;
    const char  *k;
    json_t      *x;
    size_t       i;

    if (j == NULL) {
        return jv_none();
    }
    if (depth > JJ_MAX_JSON_DEPTH) {
        v = jv_undef();
        v.flag = 3;             /* too deep: the caller reports it */
        return v;
    }
    switch (json_typeof(j)) {
    case JSON_OBJECT:
        v = jv_dict_new(a, JV_DICT);
        if (v.type == JV_UNDEF) {
            return v;
        }
        json_object_foreach(j, k, x) {
            key = jv_str_copy(a, k, strlen(k));
            item = jv_from_json(a, x, depth + 1);
            if (item.type == JV_UNDEF) {
                return item;
            }
            /* jansson's keys are unique: append without a lookup */
            if (key.type == JV_UNDEF || dict_append(a, v, key, item) != 0) {
                return jv_undef();
            }
        }
        return v;
    case JSON_ARRAY:
        v = jv_list_new(a, JL_LIST, json_array_size(j));
        if (v.type == JV_UNDEF) {
            return v;
        }
        json_array_foreach(j, i, x) {
            item = jv_from_json(a, x, depth + 1);
            if (item.type == JV_UNDEF) {
                return item;
            }
            if (jv_list_push(a, v, item) != 0) {
                return jv_undef();
            }
        }
        return v;
    case JSON_STRING:
        return jv_str_copy(a, json_string_value(j), json_string_length(j));
    case JSON_INTEGER:
        return jv_int(json_integer_value(j));
    case JSON_REAL:
        return jv_float(json_real_value(j));
    case JSON_TRUE:
        return jv_bool(1);
    case JSON_FALSE:
        return jv_bool(0);
    default:
        return jv_none();
    }
}

/* ---- UTF-8 and character classes ---- */

uint32_t
jj_utf8_decode(const char *s, size_t n, size_t *i)
{
    const unsigned char  *p = (const unsigned char *) s + *i;
    size_t                left = n - *i;
    uint32_t              cp;
    int                   len, k;

    if (p[0] < 0x80) {
        (*i)++;
        return p[0];
    }
    if ((p[0] & 0xe0) == 0xc0) {
        len = 2;
        cp = p[0] & 0x1f;
    } else if ((p[0] & 0xf0) == 0xe0) {
        len = 3;
        cp = p[0] & 0x0f;
    } else if ((p[0] & 0xf8) == 0xf0) {
        len = 4;
        cp = p[0] & 0x07;
    } else {
        (*i)++;
        return 0xfffd;
    }
    if ((size_t) len > left) {
        (*i)++;
        return 0xfffd;
    }
    for (k = 1; k < len; k++) {
        if ((p[k] & 0xc0) != 0x80) {
            (*i)++;
            return 0xfffd;
        }
        cp = (cp << 6) | (p[k] & 0x3f);
    }
    *i += len;
    return cp;
}

size_t
jj_utf8_next(const char *s, size_t n, size_t i)
{
    jj_utf8_decode(s, n, &i);
    return i;
}

size_t
jj_utf8_len(const char *s, size_t n)
{
    size_t  i, count = 0;

    for (i = 0; i < n; i++) {
        if (((unsigned char) s[i] & 0xc0) != 0x80) {
            count++;
        }
    }
    return count;
}

int
jj_utf8_encode(char *d, uint32_t cp)
{
    if (cp < 0x80) {
        d[0] = (char) cp;
        return 1;
    }
    if (cp < 0x800) {
        d[0] = (char) (0xc0 | (cp >> 6));
        d[1] = (char) (0x80 | (cp & 0x3f));
        return 2;
    }
    if (cp < 0x10000) {
        d[0] = (char) (0xe0 | (cp >> 12));
        d[1] = (char) (0x80 | ((cp >> 6) & 0x3f));
        d[2] = (char) (0x80 | (cp & 0x3f));
        return 3;
    }
    d[0] = (char) (0xf0 | (cp >> 18));
    d[1] = (char) (0x80 | ((cp >> 12) & 0x3f));
    d[2] = (char) (0x80 | ((cp >> 6) & 0x3f));
    d[3] = (char) (0x80 | (cp & 0x3f));
    return 4;
}

int
jj_is_space(uint32_t cp)
{
    return (cp >= 0x09 && cp <= 0x0d) || (cp >= 0x1c && cp <= 0x20)
           || cp == 0x85 || cp == 0xa0 || cp == 0x1680
           || (cp >= 0x2000 && cp <= 0x200a) || cp == 0x2028
           || cp == 0x2029 || cp == 0x202f || cp == 0x205f
           || cp == 0x3000;
}

static locale_t        jj_utf8_locale;
static pthread_once_t  jj_locale_once = PTHREAD_ONCE_INIT;

static void
jj_locale_init(void)
{
    jj_utf8_locale = newlocale(LC_CTYPE_MASK, "C.UTF-8", (locale_t) 0);
}

uint32_t
jj_lower(uint32_t cp)
{
    if (cp < 0x80) {
        return cp >= 'A' && cp <= 'Z' ? cp + 32 : cp;
    }
    pthread_once(&jj_locale_once, jj_locale_init);
    return jj_utf8_locale ? (uint32_t) towlower_l((wint_t) cp,
                                                  jj_utf8_locale) : cp;
}

uint32_t
jj_upper(uint32_t cp)
{
    if (cp < 0x80) {
        return cp >= 'a' && cp <= 'z' ? cp - 32 : cp;
    }
    pthread_once(&jj_locale_once, jj_locale_init);
    return jj_utf8_locale ? (uint32_t) towupper_l((wint_t) cp,
                                                  jj_utf8_locale) : cp;
}

/* ---- text forms ---- */

/*
 * float.__repr__: the shortest digits that read back to the same double,
 * fixed notation for exponents -4..15, else d.ddde+XX.
 */
void
jj_float_repr(char *dst, size_t dstlen, double f)
{
    char    buf[64], digits[32], *e;
    int     prec, exp10, nd, i, neg;
    size_t  o = 0;

    if (isnan(f)) {
        snprintf(dst, dstlen, "nan");
        return;
    }
    if (isinf(f)) {
        snprintf(dst, dstlen, f < 0 ? "-inf" : "inf");
        return;
    }
    for (prec = 1; prec <= 17; prec++) {
        snprintf(buf, sizeof(buf), "%.*e", prec - 1, f);
        if (strtod(buf, NULL) == f) {
            break;
        }
    }
    /* buf = [-]d.ddde[+-]XX */
    neg = buf[0] == '-';
    nd = 0;
    for (i = neg; buf[i] != 'e'; i++) {
        if (buf[i] != '.') {
            digits[nd++] = buf[i];
        }
    }
    digits[nd] = '\0';
    e = strchr(buf, 'e');
    exp10 = atoi(e + 1);
    while (nd > 1 && digits[nd - 1] == '0') {
        digits[--nd] = '\0';
    }
    if (neg) {
        buf[o++] = '-';
    }
    if (exp10 >= -4 && exp10 < 16) {
        if (exp10 < 0) {
            buf[o++] = '0';
            buf[o++] = '.';
            for (i = 0; i < -exp10 - 1; i++) {
                buf[o++] = '0';
            }
            for (i = 0; i < nd; i++) {
                buf[o++] = digits[i];
            }
        } else {
            for (i = 0; i <= exp10; i++) {
                buf[o++] = i < nd ? digits[i] : '0';
            }
            buf[o++] = '.';
            if (nd > exp10 + 1) {
                for (i = exp10 + 1; i < nd; i++) {
                    buf[o++] = digits[i];
                }
            } else {
                buf[o++] = '0';
            }
        }
        buf[o] = '\0';
    } else {
        buf[o++] = digits[0];
        if (nd > 1) {
            buf[o++] = '.';
            for (i = 1; i < nd; i++) {
                buf[o++] = digits[i];
            }
        }
        snprintf(buf + o, sizeof(buf) - o, "e%c%02d", exp10 < 0 ? '-' : '+',
                 exp10 < 0 ? -exp10 : exp10);
    }
    snprintf(dst, dstlen, "%s", buf);
}

/* Python's str.isprintable(), close enough for repr(). */
static int
is_printable(uint32_t cp)
{
    if (cp < 0x20 || cp == 0x7f || (cp >= 0x80 && cp <= 0xa0) || cp == 0xad)
    {
        return 0;
    }
    if ((cp >= 0x2000 && cp <= 0x200f) || (cp >= 0x2028 && cp <= 0x202f)
        || (cp >= 0x205f && cp <= 0x206f) || cp == 0x3000 || cp == 0xfeff
        || (cp >= 0xd800 && cp <= 0xdfff) || cp == 0xfffe || cp == 0xffff)
    {
        return 0;
    }
    return 1;
}

static int
str_repr_into(jj_buf_t *b, const char *s, size_t n)
{
    char      q = '\'', tmp[16];
    size_t    i, j;
    uint32_t  cp;
    int       rc = 0;

    if (memchr(s, '\'', n) && !memchr(s, '"', n)) {
        q = '"';
    }
    rc |= jj_buf_addc(b, q);
    for (i = 0; i < n; ) {
        j = i;
        cp = jj_utf8_decode(s, n, &i);
        if (cp == (uint32_t) q || cp == '\\') {
            rc |= jj_buf_addc(b, '\\');
            rc |= jj_buf_addc(b, (char) cp);
        } else if (cp == '\n') {
            rc |= jj_buf_add(b, "\\n", 2);
        } else if (cp == '\r') {
            rc |= jj_buf_add(b, "\\r", 2);
        } else if (cp == '\t') {
            rc |= jj_buf_add(b, "\\t", 2);
        } else if (!is_printable(cp)) {
            if (cp < 0x100) {
                snprintf(tmp, sizeof(tmp), "\\x%02x", cp);
            } else if (cp < 0x10000) {
                snprintf(tmp, sizeof(tmp), "\\u%04x", cp);
            } else {
                snprintf(tmp, sizeof(tmp), "\\U%08x", cp);
            }
            rc |= jj_buf_add(b, tmp, strlen(tmp));
        } else {
            rc |= jj_buf_add(b, s + j, i - j);
        }
    }
    rc |= jj_buf_addc(b, q);
    return rc ? -1 : 0;
}

static int str_at(jj_buf_t *b, jv_t v, int level);
static int repr_at(jj_buf_t *b, jv_t v, int level);

static int
seq_into(jj_buf_t *b, jv_t v, int level)
{
    jj_list_t  *l = v.u.l;
    size_t      i;
    int         rc = 0;

    switch (l->kind) {
    case JL_GEN:
        return jj_buf_printf(b, "<generator object at %p>", (void *) l);
    case JL_RANGE:
        if (l->r[2] == 1) {
            return jj_buf_printf(b, "range(%lld, %lld)", (long long) l->r[0],
                                 (long long) l->r[1]);
        }
        return jj_buf_printf(b, "range(%lld, %lld, %lld)",
                             (long long) l->r[0], (long long) l->r[1],
                             (long long) l->r[2]);
    case JL_ITEMS:
        rc |= jj_buf_add(b, "dict_items([", 12);
        break;
    case JL_KEYS:
        rc |= jj_buf_add(b, "dict_keys([", 11);
        break;
    case JL_VALUES:
        rc |= jj_buf_add(b, "dict_values([", 13);
        break;
    case JL_TUPLE:
        rc |= jj_buf_addc(b, '(');
        break;
    default:
        rc |= jj_buf_addc(b, '[');
    }
    for (i = 0; i < l->n; i++) {
        if (i) {
            rc |= jj_buf_add(b, ", ", 2);
        }
        rc |= repr_at(b, l->items[i], level + 1);
    }
    switch (l->kind) {
    case JL_TUPLE:
        if (l->n == 1) {
            rc |= jj_buf_addc(b, ',');
        }
        rc |= jj_buf_addc(b, ')');
        break;
    case JL_LIST:
        rc |= jj_buf_addc(b, ']');
        break;
    default:
        rc |= jj_buf_add(b, "])", 2);
    }
    return rc ? -1 : 0;
}

static int
dict_into(jj_buf_t *b, jv_t v, int level)
{
    size_t  i;
    int     rc = 0;

    rc |= jj_buf_addc(b, '{');
    for (i = 0; i < v.u.d->n; i++) {
        if (i) {
            rc |= jj_buf_add(b, ", ", 2);
        }
        rc |= repr_at(b, v.u.d->keys[i], level + 1);
        rc |= jj_buf_add(b, ": ", 2);
        rc |= repr_at(b, v.u.d->vals[i], level + 1);
    }
    rc |= jj_buf_addc(b, '}');
    return rc ? -1 : 0;
}

int
jv_str_into(jj_buf_t *b, jv_t v)
{
    return str_at(b, v, 0);
}

int
jv_repr_into(jj_buf_t *b, jv_t v)
{
    return repr_at(b, v, 0);
}

/* str() at a nesting level; deeper than JJ_MAX_REPR_DEPTH (a namespace
 * that holds itself, a list nested in a loop) fails with b->over = 3. */
static int
str_at(jj_buf_t *b, jv_t v, int level)
{
    char  tmp[64];

    if (level > JJ_MAX_REPR_DEPTH) {
        b->over = 3;
        return -1;
    }
    switch (v.type) {
    case JV_UNDEF:
        return 0;
    case JV_NONE:
        return jj_buf_add(b, "None", 4);
    case JV_BOOL:
        return v.u.i ? jj_buf_add(b, "True", 4) : jj_buf_add(b, "False", 5);
    case JV_INT:
        return jj_buf_printf(b, "%lld", (long long) v.u.i);
    case JV_FLOAT:
        jj_float_repr(tmp, sizeof(tmp), v.u.f);
        return jj_buf_add(b, tmp, strlen(tmp));
    case JV_STR:
        return jj_buf_add(b, v.u.s, v.n);
    case JV_LIST:
        return seq_into(b, v, level);
    case JV_DICT:
        return dict_into(b, v, level);
    case JV_NS:
        if (jj_buf_add(b, "<Namespace ", 11) || dict_into(b, v, level)) {
            return -1;
        }
        return jj_buf_addc(b, '>');
    case JV_FUNC:
        if (v.u.fn->kind == JF_MACRO) {
            return jj_buf_printf(b, "<Macro '%.*s'>", (int) v.u.fn->namelen,
                                 v.u.fn->name);
        }
        return jj_buf_printf(b, "<built-in method %.*s>",
                             (int) v.u.fn->namelen, v.u.fn->name);
    case JV_LOOP:
        return jj_buf_printf(b, "<LoopContext %zu/%zu>",
                             v.u.loop->index0 + 1, v.u.loop->items.u.l->n);
    default:
        return 0;
    }
}

static int
repr_at(jj_buf_t *b, jv_t v, int level)
{
    if (v.type == JV_STR) {
        return str_repr_into(b, v.u.s, v.n);
    }
    if (v.type == JV_UNDEF) {
        return jj_buf_add(b, "Undefined", 9);
    }
    return str_at(b, v, level);
}

/* ---- json.dumps ---- */

static int
json_str_into(jj_buf_t *b, const char *s, size_t n, int ascii)
{
    size_t          i, run, k;
    unsigned char   ch;
    char            tmp[16];
    uint32_t        cp;
    int             rc = 0;

    rc |= jj_buf_addc(b, '"');
    for (i = 0; i < n; ) {
        for (run = i; run < n; run++) {
            ch = (unsigned char) s[run];
            if (ch < 0x20 || ch == '"' || ch == '\\' || (ascii && ch >= 0x80))
            {
                break;
            }
        }
        rc |= jj_buf_add(b, s + i, run - i);
        if (run == n) {
            break;
        }
        ch = (unsigned char) s[run];
        if (ch >= 0x80 && n - run >= 6
            && memcmp(s + run, "\xef\xb7\x90\xef\xb7\x91", 6) == 0)
        {
            /* the tokenizer's guard (tokenizer.h) passes unescaped */
            rc |= jj_buf_add(b, s + run, 6);
            i = run + 6;
            continue;
        }
        if (ch >= 0x80) {
            /* ensure_ascii: \uXXXX, astral planes as surrogate pairs */
            k = run;
            cp = jj_utf8_decode(s, n, &k);
            if (cp >= 0x10000) {
                cp -= 0x10000;
                snprintf(tmp, sizeof(tmp), "\\u%04x\\u%04x",
                         0xd800 + (cp >> 10), 0xdc00 + (cp & 0x3ff));
            } else {
                snprintf(tmp, sizeof(tmp), "\\u%04x", cp);
            }
            rc |= jj_buf_add(b, tmp, strlen(tmp));
            i = k;
            continue;
        }
        switch (ch) {
        case '"': rc |= jj_buf_add(b, "\\\"", 2); break;
        case '\\': rc |= jj_buf_add(b, "\\\\", 2); break;
        case '\n': rc |= jj_buf_add(b, "\\n", 2); break;
        case '\r': rc |= jj_buf_add(b, "\\r", 2); break;
        case '\t': rc |= jj_buf_add(b, "\\t", 2); break;
        case '\b': rc |= jj_buf_add(b, "\\b", 2); break;
        case '\f': rc |= jj_buf_add(b, "\\f", 2); break;
        default:
            snprintf(tmp, sizeof(tmp), "\\u%04x", ch);
            rc |= jj_buf_add(b, tmp, 6);
        }
        i = run + 1;
    }
    rc |= jj_buf_addc(b, '"');
    return rc ? -1 : 0;
}

static int
json_newline(jj_buf_t *b, const char *indent, int nindent, int level)
{
    int  i, rc = 0;

    rc |= jj_buf_addc(b, '\n');
    for (i = 0; i < level; i++) {
        rc |= jj_buf_add(b, indent, (size_t) nindent);
    }
    return rc;
}

static int
json_key_cmp(const void *a, const void *b)
{
    const jv_t *x = *(const jv_t *const *) a, *y = *(const jv_t *const *) b;
    size_t      n = x->n < y->n ? x->n : y->n;
    int         c;

    c = memcmp(x->u.s, y->u.s, n);
    if (c) {
        return c;
    }
    return x->n < y->n ? -1 : x->n > y->n;
}

/*
 * json.dumps with ensure_ascii=False.  indent == NULL is the compact form
 * (default separators ", " and ": "); with an indent the item separator
 * defaults to "," as in Python.  Keys that are not strings are converted
 * as Python does (numbers, booleans, None); anything else fails with
 * Python's TypeError text in err.
 */
int
jv_json_into(jj_buf_t *b, jv_t v, const char *indent, int nindent,
    const char *itemsep, const char *keysep, int flags, int level,
    char *err, size_t errlen)
{
    char         tmp[64];
    size_t       i, n;
    jv_t        *items, key;
    const jv_t **order = NULL;
    jj_buf_t     kb = { 0 };
    int          rc = 0;

    if (level > 100) {
        snprintf(err, errlen, "maximum recursion depth exceeded in tojson");
        return -1;
    }
    switch (v.type) {
    case JV_NONE:
        return jj_buf_add(b, "null", 4);
    case JV_BOOL:
        return v.u.i ? jj_buf_add(b, "true", 4) : jj_buf_add(b, "false", 5);
    case JV_INT:
        return jj_buf_printf(b, "%lld", (long long) v.u.i);
    case JV_FLOAT:
        if (isnan(v.u.f)) {
            return jj_buf_add(b, "NaN", 3);
        }
        if (isinf(v.u.f)) {
            return v.u.f < 0 ? jj_buf_add(b, "-Infinity", 9)
                             : jj_buf_add(b, "Infinity", 8);
        }
        jj_float_repr(tmp, sizeof(tmp), v.u.f);
        return jj_buf_add(b, tmp, strlen(tmp));
    case JV_STR:
        return json_str_into(b, v.u.s, v.n, flags & JJ_JSON_ASCII);
    case JV_LIST:
        if (v.u.l->kind != JL_LIST && v.u.l->kind != JL_TUPLE) {
            break;
        }
        n = v.u.l->n;
        items = v.u.l->items;
        if (n == 0) {
            return jj_buf_add(b, "[]", 2);
        }
        rc |= jj_buf_addc(b, '[');
        for (i = 0; i < n; i++) {
            if (i) {
                rc |= jj_buf_add(b, itemsep, strlen(itemsep));
            }
            if (indent) {
                rc |= json_newline(b, indent, nindent, level + 1);
            }
            if (jv_json_into(b, items[i], indent, nindent, itemsep, keysep,
                             flags, level + 1, err, errlen) != 0)
            {
                return -1;
            }
        }
        if (indent) {
            rc |= json_newline(b, indent, nindent, level);
        }
        rc |= jj_buf_addc(b, ']');
        return rc ? -1 : 0;
    case JV_DICT:
        n = v.u.d->n;
        if (n == 0) {
            return jj_buf_add(b, "{}", 2);
        }
        order = malloc(n * sizeof(*order));
        if (order == NULL) {
            snprintf(err, errlen, "out of memory in tojson");
            return -1;
        }
        for (i = 0; i < n; i++) {
            order[i] = &v.u.d->keys[i];
        }
        if (flags & JJ_JSON_SORT_KEYS) {
            for (i = 0; i < n; i++) {
                if (order[i]->type != JV_STR) {
                    snprintf(err, errlen, "'<' not supported between "
                             "instances of 'str' and '%s'",
                             jv_type_name(*order[i]));
                    free(order);
                    return -1;
                }
            }
            qsort(order, n, sizeof(*order), json_key_cmp);
        }
        rc |= jj_buf_addc(b, '{');
        for (i = 0; i < n; i++) {
            if (i) {
                rc |= jj_buf_add(b, itemsep, strlen(itemsep));
            }
            if (indent) {
                rc |= json_newline(b, indent, nindent, level + 1);
            }
            key = *order[i];
            if (key.type == JV_STR) {
                rc |= json_str_into(b, key.u.s, key.n, flags & JJ_JSON_ASCII);
            } else if (key.type == JV_INT || key.type == JV_FLOAT
                       || key.type == JV_BOOL || key.type == JV_NONE)
            {
                kb.n = 0;
                if (key.type == JV_BOOL) {
                    rc |= jj_buf_add(&kb, key.u.i ? "true" : "false",
                                     key.u.i ? 4 : 5);
                } else if (key.type == JV_NONE) {
                    rc |= jj_buf_add(&kb, "null", 4);
                } else {
                    rc |= jv_str_into(&kb, key);
                }
                rc |= json_str_into(b, kb.p, kb.n, 0);
            } else {
                snprintf(err, errlen, "keys must be str, int, float, bool "
                         "or None, not %s", jv_type_name(key));
                free(order);
                free(kb.p);
                return -1;
            }
            rc |= jj_buf_add(b, keysep, strlen(keysep));
            if (jv_json_into(b, v.u.d->vals[order[i] - v.u.d->keys], indent,
                             nindent, itemsep, keysep, flags, level + 1,
                             err, errlen) != 0)
            {
                free(order);
                free(kb.p);
                return -1;
            }
        }
        free(order);
        free(kb.p);
        if (indent) {
            rc |= json_newline(b, indent, nindent, level);
        }
        rc |= jj_buf_addc(b, '}');
        return rc ? -1 : 0;
    default:
        break;
    }
    snprintf(err, errlen, "Object of type %s is not JSON serializable",
             jv_type_name(v));
    return -1;
}
