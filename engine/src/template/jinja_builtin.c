/*
 * Jinja builtins: the filters and tests of jinja2's defaults that chat
 * templates use, the str / dict / list methods Python offers them (with
 * ImmutableSandboxedEnvironment's refusal of the mutating ones), attribute
 * and item lookup as the sandbox does it, and the globals Hugging Face
 * adds (raise_exception, strftime_now) plus range, dict and namespace.
 */

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "jinja.h"

/* ---- argument helpers ---- */

typedef struct {
    jv_t         *args;
    size_t        nargs;
    const char  **kwn;
    jv_t         *kwv;
    size_t        nkw;
} jargs_t;

/* Argument at position pos (counting after the value) or keyword name. */
static int
arg(const jargs_t *a, size_t pos, const char *name, jv_t *out)
{
    size_t  i;

    if (pos < a->nargs) {
        *out = a->args[pos];
        return 1;
    }
    for (i = 0; i < a->nkw; i++) {
        if (strcmp(a->kwn[i], name) == 0) {
            *out = a->kwv[i];
            return 1;
        }
    }
    return 0;
}

static int
arg_bool(const jargs_t *a, size_t pos, const char *name, int def)
{
    jv_t  v;

    return arg(a, pos, name, &v) ? jv_truthy(v) : def;
}

static int
need_str(jj_ctx_t *c, jv_t v, const char *what)
{
    if (v.type != JV_STR) {
        return jj_fail(c, -EINVAL, "TypeError: %s must be str, not %s",
                       what, jv_type_name(v));
    }
    return 0;
}

static jv_t
new_str(jj_ctx_t *c, const char *s, size_t n)
{
    jv_t  v = jv_str_copy(&c->arena, s, n);

    if (v.type != JV_STR) {
        jj_oom(c);
    }
    return v;
}

static jv_t
undef_msg(jj_ctx_t *c, uint32_t flag, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static jv_t
undef_msg(jj_ctx_t *c, uint32_t flag, const char *fmt, ...)
{
    char     tmp[256];
    va_list  ap;
    jv_t     v = jv_undef(), s;

    va_start(ap, fmt);
    vsnprintf(tmp, sizeof(tmp), fmt, ap);
    va_end(ap);
    s = jv_str_copy(&c->arena, tmp, strlen(tmp));
    v.u.s = s.type == JV_STR ? s.u.s : NULL;
    v.flag = flag;
    return v;
}

/* jinja2 names objects in messages as "'dict object'" or "'None'". */
static const char *
obj_desc(jv_t v, char *buf, size_t len)
{
    if (v.type == JV_NONE) {
        return "'None'";
    }
    snprintf(buf, len, "'%s object'", jv_type_name(v));
    return buf;
}

/* ---- string helpers ---- */

typedef struct {
    char    *p;
    size_t   n;
    size_t   cap;
} sbuf_t;

static int
sb_add(jj_ctx_t *c, sbuf_t *b, const char *s, size_t n)
{
    char    *p;
    size_t   cap;

    if (b->n + n > b->cap) {
        cap = b->cap ? b->cap * 2 : 64;
        while (cap < b->n + n) {
            cap *= 2;
        }
        p = jj_alloc(&c->arena, cap);
        if (p == NULL) {
            return jj_oom(c);
        }
        if (b->n) {
            memcpy(p, b->p, b->n);
        }
        b->p = p;
        b->cap = cap;
    }
    if (n) {
        memcpy(b->p + b->n, s, n);
    }
    b->n += n;
    return 0;
}

static int
sb_cp(jj_ctx_t *c, sbuf_t *b, uint32_t cp)
{
    char  tmp[4];

    return sb_add(c, b, tmp, (size_t) jj_utf8_encode(tmp, cp));
}

static jv_t
sb_val(sbuf_t *b)
{
    return jv_strn(b->p ? b->p : "", b->n);
}

/* Does code point cp occur in chars (a UTF-8 string)? */
static int
in_chars(uint32_t cp, jv_t chars)
{
    size_t  i = 0;

    while (i < chars.n) {
        if (jj_utf8_decode(chars.u.s, chars.n, &i) == cp) {
            return 1;
        }
    }
    return 0;
}

/* str.strip / lstrip / rstrip; chars NONE/UNDEF = whitespace. */
static int
do_strip(jj_ctx_t *c, jv_t s, jv_t chars, int left, int right, jv_t *out)
{
    size_t    b = 0, e = s.n, i, j;
    uint32_t  cp;
    int       ws = chars.type != JV_STR;

    if (!ws && chars.type != JV_STR) {
        return need_str(c, chars, "strip arg");
    }
    if (left) {
        while (b < e) {
            i = b;
            cp = jj_utf8_decode(s.u.s, e, &i);
            if (ws ? !jj_is_space(cp) : !in_chars(cp, chars)) {
                break;
            }
            b = i;
        }
    }
    if (right) {
        while (e > b) {
            j = e - 1;
            while (j > b && ((unsigned char) s.u.s[j] & 0xc0) == 0x80) {
                j--;
            }
            i = j;
            cp = jj_utf8_decode(s.u.s, e, &i);
            if (ws ? !jj_is_space(cp) : !in_chars(cp, chars)) {
                break;
            }
            e = j;
        }
    }
    *out = jv_strn(s.u.s + b, e - b);
    return 0;
}

/* Case mapping: mode 0 lower, 1 upper, 2 capitalize, 3 str.title. */
static int
do_case(jj_ctx_t *c, jv_t s, int mode, jv_t *out)
{
    sbuf_t    b = { 0 };
    size_t    i = 0;
    uint32_t  cp;
    int       first = 1, prev_cased = 0, alpha;

    while (i < s.n) {
        cp = jj_utf8_decode(s.u.s, s.n, &i);
        switch (mode) {
        case 0: cp = jj_lower(cp); break;
        case 1: cp = jj_upper(cp); break;
        case 2: cp = first ? jj_upper(cp) : jj_lower(cp); break;
        default:
            alpha = jj_lower(cp) != cp || jj_upper(cp) != cp;
            if (alpha) {
                cp = prev_cased ? jj_lower(cp) : jj_upper(cp);
            }
            prev_cased = alpha;
        }
        first = 0;
        if (sb_cp(c, &b, cp) != 0) {
            return -1;
        }
    }
    *out = sb_val(&b);
    return 0;
}

/* jinja2's title filter: capitalise after runs of [-\s({\[<]. */
static int
do_title(jj_ctx_t *c, jv_t s, jv_t *out)
{
    sbuf_t    b = { 0 };
    size_t    i = 0;
    uint32_t  cp;
    int       start = 1, sep;

    while (i < s.n) {
        cp = jj_utf8_decode(s.u.s, s.n, &i);
        sep = jj_is_space(cp) || cp == '-' || cp == '(' || cp == '{'
              || cp == '[' || cp == '<';
        if (sep) {
            start = 1;
        } else {
            cp = start ? jj_upper(cp) : jj_lower(cp);
            start = 0;
        }
        if (sb_cp(c, &b, cp) != 0) {
            return -1;
        }
    }
    *out = sb_val(&b);
    return 0;
}

static int
do_replace(jj_ctx_t *c, jv_t s, jv_t old, jv_t new, int64_t count,
    jv_t *out)
{
    sbuf_t       b = { 0 };
    size_t       i = 0, j;
    const char  *hit;

    if (need_str(c, old, "replace() argument 1") != 0
        || need_str(c, new, "replace() argument 2") != 0)
    {
        return -1;
    }
    if (old.n == 0) {
        /* "abc".replace("", "-") == "-a-b-c-" */
        while (count != 0) {
            if (sb_add(c, &b, new.u.s, new.n) != 0) {
                return -1;
            }
            count--;
            if (i >= s.n) {
                break;
            }
            j = jj_utf8_next(s.u.s, s.n, i);
            if (sb_add(c, &b, s.u.s + i, j - i) != 0) {
                return -1;
            }
            i = j;
        }
        if (sb_add(c, &b, s.u.s + i, s.n - i) != 0) {
            return -1;
        }
        *out = sb_val(&b);
        return 0;
    }
    while (count != 0
           && (hit = memmem(s.u.s + i, s.n - i, old.u.s, old.n)) != NULL)
    {
        j = (size_t) (hit - s.u.s);
        if (sb_add(c, &b, s.u.s + i, j - i) != 0
            || sb_add(c, &b, new.u.s, new.n) != 0)
        {
            return -1;
        }
        i = j + old.n;
        count--;
    }
    if (sb_add(c, &b, s.u.s + i, s.n - i) != 0) {
        return -1;
    }
    *out = sb_val(&b);
    return 0;
}

/* str.split / rsplit (sep NONE = runs of whitespace). */
static int
do_split(jj_ctx_t *c, jv_t s, jv_t sep, int64_t maxsplit, int right,
    jv_t *out)
{
    jv_t         l;
    size_t       i, j, b, e, k;
    const char  *hit;
    uint32_t     cp;

    l = jv_list_new(&c->arena, JL_LIST, 0);
    if (l.type != JV_LIST) {
        return jj_oom(c);
    }
    *out = l;
    if (sep.type == JV_STR) {
        if (sep.n == 0) {
            return jj_fail(c, -EINVAL, "ValueError: empty separator");
        }
        if (right) {
            /* collect from the right, then reverse */
            e = s.n;
            while (maxsplit != 0) {
                hit = NULL;
                for (k = e; k >= sep.n; k--) {
                    if (memcmp(s.u.s + k - sep.n, sep.u.s, sep.n) == 0) {
                        hit = s.u.s + k - sep.n;
                        break;
                    }
                }
                if (hit == NULL) {
                    break;
                }
                j = (size_t) (hit - s.u.s);
                if (jv_list_push(&c->arena, l, jv_strn(hit + sep.n,
                                 e - j - sep.n)) != 0)
                {
                    return jj_oom(c);
                }
                e = j;
                maxsplit--;
            }
            if (jv_list_push(&c->arena, l, jv_strn(s.u.s, e)) != 0) {
                return jj_oom(c);
            }
            for (i = 0; i < l.u.l->n / 2; i++) {
                jv_t t = l.u.l->items[i];

                l.u.l->items[i] = l.u.l->items[l.u.l->n - 1 - i];
                l.u.l->items[l.u.l->n - 1 - i] = t;
            }
            return 0;
        }
        i = 0;
        while (maxsplit != 0
               && (hit = memmem(s.u.s + i, s.n - i, sep.u.s, sep.n)) != NULL)
        {
            j = (size_t) (hit - s.u.s);
            if (jv_list_push(&c->arena, l, jv_strn(s.u.s + i, j - i)) != 0) {
                return jj_oom(c);
            }
            i = j + sep.n;
            maxsplit--;
        }
        if (jv_list_push(&c->arena, l, jv_strn(s.u.s + i, s.n - i)) != 0) {
            return jj_oom(c);
        }
        return 0;
    }
    if (sep.type != JV_NONE && sep.type != JV_UNDEF) {
        return need_str(c, sep, "must be str or None");
    }
    /* whitespace split (left to right; rsplit with maxsplit rare) */
    i = 0;
    for ( ;; ) {
        while (i < s.n) {
            k = i;
            cp = jj_utf8_decode(s.u.s, s.n, &k);
            if (!jj_is_space(cp)) {
                break;
            }
            i = k;
        }
        if (i >= s.n) {
            break;
        }
        b = i;
        if (maxsplit == 0) {
            e = s.n;
            while (e > b) {
                /* trailing whitespace is dropped */
                size_t p = e - 1;

                while (p > b && ((unsigned char) s.u.s[p] & 0xc0) == 0x80) {
                    p--;
                }
                k = p;
                if (!jj_is_space(jj_utf8_decode(s.u.s, s.n, &k))) {
                    break;
                }
                e = p;
            }
            if (jv_list_push(&c->arena, l, jv_strn(s.u.s + b, e - b))) {
                return jj_oom(c);
            }
            break;
        }
        while (i < s.n) {
            k = i;
            cp = jj_utf8_decode(s.u.s, s.n, &k);
            if (jj_is_space(cp)) {
                break;
            }
            i = k;
        }
        if (jv_list_push(&c->arena, l, jv_strn(s.u.s + b, i - b)) != 0) {
            return jj_oom(c);
        }
        maxsplit--;
    }
    return 0;
}

/* ---- methods ---- */

typedef enum {
    M_STARTSWITH = 1, M_ENDSWITH, M_SPLIT, M_RSPLIT, M_STRIP, M_LSTRIP,
    M_RSTRIP, M_REPLACE, M_UPPER, M_LOWER, M_TITLE, M_CAPITALIZE, M_FIND,
    M_RFIND, M_COUNT, M_JOIN, M_SPLITLINES, M_ISDIGIT, M_ISALPHA,
    M_ISALNUM, M_ISSPACE, M_ISLOWER, M_ISUPPER, M_INDEX,
    M_GET, M_ITEMS, M_KEYS, M_VALUES,
    M_LCOUNT, M_LINDEX
} method_t;

static const struct {
    const char  *name;
    uint32_t     id;
} str_methods[] = {
    { "startswith", M_STARTSWITH }, { "endswith", M_ENDSWITH },
    { "split", M_SPLIT }, { "rsplit", M_RSPLIT }, { "strip", M_STRIP },
    { "lstrip", M_LSTRIP }, { "rstrip", M_RSTRIP },
    { "replace", M_REPLACE }, { "upper", M_UPPER }, { "lower", M_LOWER },
    { "title", M_TITLE }, { "capitalize", M_CAPITALIZE },
    { "find", M_FIND }, { "rfind", M_RFIND }, { "count", M_COUNT },
    { "join", M_JOIN }, { "splitlines", M_SPLITLINES },
    { "isdigit", M_ISDIGIT }, { "isalpha", M_ISALPHA },
    { "isalnum", M_ISALNUM }, { "isspace", M_ISSPACE },
    { "islower", M_ISLOWER }, { "isupper", M_ISUPPER },
    { "index", M_INDEX }, { NULL, 0 }
}, dict_methods[] = {
    { "get", M_GET }, { "items", M_ITEMS }, { "keys", M_KEYS },
    { "values", M_VALUES }, { NULL, 0 }
}, list_methods[] = {
    { "count", M_LCOUNT }, { "index", M_LINDEX }, { NULL, 0 }
};

static const char *const dict_unsafe[] = {
    "pop", "popitem", "setdefault", "update", "clear", "copy", NULL
};
static const char *const list_unsafe[] = {
    "append", "pop", "insert", "extend", "remove", "reverse", "sort",
    "clear", "copy", NULL
};

static int
name_eq(const char *a, const char *b, size_t n)
{
    return strlen(b) == n && memcmp(a, b, n) == 0;
}

static int
bind_method(jj_ctx_t *c, jv_t self, uint32_t id, const char *name,
    size_t n, jv_t *out)
{
    jj_func_t  *fn;

    fn = jj_alloc(&c->arena, sizeof(jj_func_t));
    if (fn == NULL) {
        return jj_oom(c);
    }
    fn->kind = JF_METHOD;
    fn->id = id;
    fn->self = self;
    fn->name = name;
    fn->namelen = n;
    memset(out, 0, sizeof(*out));
    out->type = JV_FUNC;
    out->u.fn = fn;
    return 0;
}

/* Look name up among methods; 1 bound, 0 none, -1 error. */
static int
find_method(jj_ctx_t *c, jv_t obj, const char *name, size_t n, jv_t *out)
{
    const struct { const char *name; uint32_t id; } *tab = NULL;
    const char *const *unsafe = NULL;
    char        buf[64];
    size_t      i;

    if (obj.type == JV_STR) {
        tab = (const void *) str_methods;
    } else if (obj.type == JV_DICT) {
        tab = (const void *) dict_methods;
        unsafe = dict_unsafe;
    } else if (obj.type == JV_LIST && obj.u.l->kind <= JL_TUPLE) {
        tab = (const void *) list_methods;
        unsafe = obj.u.l->kind == JL_LIST ? list_unsafe : NULL;
    } else {
        return 0;
    }
    for (i = 0; tab[i].name != NULL; i++) {
        if (name_eq(name, tab[i].name, n)) {
            return bind_method(c, obj, tab[i].id, tab[i].name, n, out) == 0
                   ? 1 : -1;
        }
    }
    for (i = 0; unsafe != NULL && unsafe[i] != NULL; i++) {
        if (name_eq(name, unsafe[i], n)) {
            *out = undef_msg(c, 1, "access to attribute '%s' of '%s' object "
                             "is unsafe.", unsafe[i], jv_type_name(obj));
            (void) buf;
            return 1;
        }
    }
    return 0;
}

static int
loop_attr(jj_ctx_t *c, jv_t obj, const char *name, size_t n, jv_t *out)
{
    jj_loop_t  *lp = obj.u.loop;
    size_t      len = lp->items.u.l->n, i = lp->index0;
    jj_func_t  *fn;

    if (name_eq(name, "index0", n)) {
        *out = jv_int((int64_t) i);
    } else if (name_eq(name, "index", n)) {
        *out = jv_int((int64_t) i + 1);
    } else if (name_eq(name, "revindex", n)) {
        *out = jv_int((int64_t) (len - i));
    } else if (name_eq(name, "revindex0", n)) {
        *out = jv_int((int64_t) (len - i - 1));
    } else if (name_eq(name, "first", n)) {
        *out = jv_bool(i == 0);
    } else if (name_eq(name, "last", n)) {
        *out = jv_bool(i + 1 == len);
    } else if (name_eq(name, "length", n)) {
        *out = jv_int((int64_t) len);
    } else if (name_eq(name, "depth", n)) {
        *out = jv_int(1);
    } else if (name_eq(name, "depth0", n)) {
        *out = jv_int(0);
    } else if (name_eq(name, "previtem", n)) {
        *out = i > 0 ? lp->items.u.l->items[i - 1]
               : undef_msg(c, 0, "there is no previous item");
    } else if (name_eq(name, "nextitem", n)) {
        *out = i + 1 < len ? lp->items.u.l->items[i + 1]
               : undef_msg(c, 0, "there is no next item");
    } else if (name_eq(name, "cycle", n)) {
        fn = jj_alloc(&c->arena, sizeof(jj_func_t));
        if (fn == NULL) {
            return jj_oom(c);
        }
        fn->kind = JF_CYCLE;
        fn->self = obj;
        fn->name = "cycle";
        fn->namelen = 5;
        memset(out, 0, sizeof(*out));
        out->type = JV_FUNC;
        out->u.fn = fn;
    } else {
        *out = undef_msg(c, 0, "'LoopContext object' has no attribute "
                         "'%.*s'", (int) n, name);
    }
    return 0;
}

/* obj.name: the sandbox tries the attribute first, then the item. */
int
jj_getattr(jj_ctx_t *c, jv_t obj, const char *name, size_t n, jv_t *out)
{
    char  buf[64];
    int   r;

    if (obj.type == JV_LOOP) {
        return loop_attr(c, obj, name, n, out);
    }
    if (obj.type == JV_NS) {
        if (!jv_dict_gets(obj, name, n, out)) {
            *out = undef_msg(c, 0, "'Namespace object' has no attribute "
                             "'%.*s'", (int) n, name);
        }
        return 0;
    }
    r = find_method(c, obj, name, n, out);
    if (r != 0) {
        return r < 0 ? -1 : 0;
    }
    if (obj.type == JV_DICT && jv_dict_gets(obj, name, n, out)) {
        return 0;
    }
    if (jv_is_num(obj) && (name_eq(name, "real", n)
                           || name_eq(name, "imag", n)))
    {
        *out = name[0] == 'i' ? (obj.type == JV_FLOAT ? jv_float(0.0)
                                 : jv_int(0))
               : obj.type == JV_BOOL ? jv_int(obj.u.i) : obj;
        return 0;
    }
    *out = undef_msg(c, 0, "%s has no attribute '%.*s'",
                     obj_desc(obj, buf, sizeof(buf)), (int) n, name);
    return 0;
}

/* Code point index i of s (negative from the end); 0 if out of range. */
static int
str_index(jv_t s, int64_t idx, jv_t *out)
{
    int64_t  len = (int64_t) jj_utf8_len(s.u.s, s.n), k;
    size_t   i = 0;

    if (idx < 0) {
        idx += len;
    }
    if (idx < 0 || idx >= len) {
        return 0;
    }
    for (k = 0; k < idx; k++) {
        i = jj_utf8_next(s.u.s, s.n, i);
    }
    *out = jv_strn(s.u.s + i, jj_utf8_next(s.u.s, s.n, i) - i);
    return 1;
}

/* obj[key]: the item first, then (for a string key) the attribute. */
int
jj_getitem(jj_ctx_t *c, jv_t obj, jv_t key, jv_t *out)
{
    char     buf[64];
    int64_t  i;
    int      r;

    switch (obj.type) {
    case JV_DICT:
        if (jv_dict_get(obj, key, out)) {
            return 0;
        }
        break;
    case JV_LIST:
        if (key.type == JV_INT || key.type == JV_BOOL) {
            i = key.u.i;
            if (i < 0) {
                i += (int64_t) obj.u.l->n;
            }
            if (i >= 0 && (uint64_t) i < obj.u.l->n
                && obj.u.l->kind != JL_GEN)
            {
                *out = obj.u.l->items[i];
                return 0;
            }
            *out = undef_msg(c, 0, "%s has no element %lld",
                             obj_desc(obj, buf, sizeof(buf)),
                             (long long) key.u.i);
            return 0;
        }
        break;
    case JV_STR:
        if (key.type == JV_INT || key.type == JV_BOOL) {
            if (str_index(obj, key.u.i, out)) {
                return 0;
            }
            *out = undef_msg(c, 0, "'str object' has no element %lld",
                             (long long) key.u.i);
            return 0;
        }
        break;
    case JV_NS:
    case JV_LOOP:
        if (key.type == JV_STR) {
            return jj_getattr(c, obj, key.u.s, key.n, out);
        }
        break;
    default:
        break;
    }
    if (key.type == JV_STR) {
        r = find_method(c, obj, key.u.s, key.n, out);
        if (r != 0) {
            return r < 0 ? -1 : 0;
        }
        *out = undef_msg(c, 0, "%s has no attribute '%.*s'",
                         obj_desc(obj, buf, sizeof(buf)), (int) key.n,
                         key.u.s);
        return 0;
    }
    if (key.type == JV_UNDEF) {
        return jj_undef_fail(c, key);
    }
    {
        jj_buf_t  kb = { 0 };

        jv_repr_into(&kb, key);
        *out = undef_msg(c, 0, "%s has no element %s",
                         obj_desc(obj, buf, sizeof(buf)), kb.p ? kb.p : "");
        free(kb.p);
    }
    return 0;
}

/* The attribute getter of map/selectattr/sort(attribute=): dotted path,
 * each part looked up with getitem (integers as indexes). */
static int
attr_path(jj_ctx_t *c, jv_t item, jv_t path, jv_t *out)
{
    size_t   i = 0, j;
    jv_t     key;
    int64_t  num;
    int      isnum;

    if (path.type == JV_INT) {
        return jj_getitem(c, item, path, out);
    }
    if (need_str(c, path, "attribute") != 0) {
        return -1;
    }
    *out = item;
    while (i <= path.n) {
        for (j = i; j < path.n && path.u.s[j] != '.'; j++) {
        }
        isnum = j > i;
        num = 0;
        for (size_t k = i; k < j; k++) {
            if (path.u.s[k] < '0' || path.u.s[k] > '9' || num > 1000000000) {
                isnum = 0;
                break;
            }
            num = num * 10 + (path.u.s[k] - '0');
        }
        key = isnum ? jv_int(num) : jv_strn(path.u.s + i, j - i);
        if (out->type == JV_UNDEF) {
            return jj_undef_fail(c, *out);
        }
        if (jj_getitem(c, *out, key, out) != 0) {
            return -1;
        }
        i = j + 1;
    }
    return 0;
}

/* ---- methods: calls ---- */

static int
call_method(jj_ctx_t *c, jj_func_t *fn, const jargs_t *a, jv_t *out)
{
    jv_t      self = fn->self, x, y, z, l;
    size_t    i, k, b;
    int64_t   count;
    int       res;
    uint32_t  cp;

    switch (fn->id) {
    case M_STARTSWITH:
    case M_ENDSWITH:
        if (!arg(a, 0, "prefix", &x)) {
            return jj_fail(c, -EINVAL, "TypeError: %s() takes at least 1 "
                           "argument (0 given)", fn->name);
        }
        if (x.type == JV_LIST && x.u.l->kind == JL_TUPLE) {
            l = x;
        } else {
            if (need_str(c, x, "startswith first arg") != 0) {
                return -1;
            }
            l = jv_list_new(&c->arena, JL_TUPLE, 1);
            if (l.type != JV_LIST) {
                return jj_oom(c);
            }
            l.u.l->items[l.u.l->n++] = x;
        }
        res = 0;
        for (i = 0; i < l.u.l->n && !res; i++) {
            y = l.u.l->items[i];
            if (need_str(c, y, "tuple item") != 0) {
                return -1;
            }
            if (y.n <= self.n) {
                res = memcmp(fn->id == M_STARTSWITH ? self.u.s
                             : self.u.s + self.n - y.n, y.u.s, y.n) == 0;
            }
        }
        *out = jv_bool(res);
        return 0;
    case M_SPLIT:
    case M_RSPLIT:
        x = jv_none();
        arg(a, 0, "sep", &x);
        count = -1;
        if (arg(a, 1, "maxsplit", &y)) {
            if (y.type != JV_INT) {
                return jj_fail(c, -EINVAL, "TypeError: maxsplit must be an "
                               "integer");
            }
            count = y.u.i;
        }
        return do_split(c, self, x, count, fn->id == M_RSPLIT, out);
    case M_STRIP:
    case M_LSTRIP:
    case M_RSTRIP:
        x = jv_none();
        arg(a, 0, "chars", &x);
        if (x.type != JV_NONE && x.type != JV_STR) {
            return need_str(c, x, "strip arg");
        }
        return do_strip(c, self, x, fn->id != M_RSTRIP, fn->id != M_LSTRIP,
                        out);
    case M_REPLACE:
        if (!arg(a, 0, "old", &x) || !arg(a, 1, "new", &y)) {
            return jj_fail(c, -EINVAL, "TypeError: replace expected at least "
                           "2 arguments");
        }
        count = -1;
        if (arg(a, 2, "count", &z) && z.type == JV_INT) {
            count = z.u.i;
        }
        return do_replace(c, self, x, y, count, out);
    case M_UPPER:
        return do_case(c, self, 1, out);
    case M_LOWER:
        return do_case(c, self, 0, out);
    case M_TITLE:
        return do_case(c, self, 3, out);
    case M_CAPITALIZE:
        return do_case(c, self, 2, out);
    case M_FIND:
    case M_RFIND:
    case M_INDEX:
    case M_COUNT:
        if (!arg(a, 0, "sub", &x) || need_str(c, x, "substring") != 0) {
            return c->rc ? -1 : jj_fail(c, -EINVAL, "TypeError: %s() takes "
                                        "at least 1 argument", fn->name);
        }
        if (fn->id == M_COUNT) {
            count = 0;
            if (x.n == 0) {
                count = (int64_t) jj_utf8_len(self.u.s, self.n) + 1;
            } else {
                for (i = 0; i + x.n <= self.n; ) {
                    if (memcmp(self.u.s + i, x.u.s, x.n) == 0) {
                        count++;
                        i += x.n;
                    } else {
                        i++;
                    }
                }
            }
            *out = jv_int(count);
            return 0;
        }
        count = -1;
        if (fn->id == M_RFIND) {
            for (k = self.n + 1; k-- > 0; ) {
                if (k + x.n <= self.n
                    && memcmp(self.u.s + k, x.u.s, x.n) == 0)
                {
                    count = (int64_t) jj_utf8_len(self.u.s, k);
                    break;
                }
            }
        } else {
            const char *h = x.n ? memmem(self.u.s, self.n, x.u.s, x.n)
                                : self.u.s;

            if (h != NULL) {
                count = (int64_t) jj_utf8_len(self.u.s,
                                              (size_t) (h - self.u.s));
            }
        }
        if (count < 0 && fn->id == M_INDEX) {
            return jj_fail(c, -EINVAL, "ValueError: substring not found");
        }
        *out = jv_int(count);
        return 0;
    case M_JOIN: {
        sbuf_t  sb = { 0 };

        if (!arg(a, 0, "iterable", &x) || jj_iterate(c, x, &l) != 0) {
            return c->rc ? -1 : jj_fail(c, -EINVAL, "TypeError: join() "
                                        "takes exactly one argument");
        }
        for (i = 0; i < l.u.l->n; i++) {
            y = l.u.l->items[i];
            if (y.type != JV_STR) {
                return jj_fail(c, -EINVAL, "TypeError: sequence item %zu: "
                               "expected str instance, %s found", i,
                               jv_type_name(y));
            }
            if ((i && sb_add(c, &sb, self.u.s, self.n) != 0)
                || sb_add(c, &sb, y.u.s, y.n) != 0)
            {
                return -1;
            }
        }
        *out = sb_val(&sb);
        return 0;
    }
    case M_SPLITLINES:
        l = jv_list_new(&c->arena, JL_LIST, 0);
        if (l.type != JV_LIST) {
            return jj_oom(c);
        }
        res = arg_bool(a, 0, "keepends", 0);
        for (i = 0, b = 0; i < self.n; ) {
            if (self.u.s[i] == '\n' || self.u.s[i] == '\r') {
                k = i + (self.u.s[i] == '\r' && i + 1 < self.n
                         && self.u.s[i + 1] == '\n' ? 2 : 1);
                if (jv_list_push(&c->arena, l, jv_strn(self.u.s + b,
                                 (res ? k : i) - b)) != 0)
                {
                    return jj_oom(c);
                }
                b = i = k;
            } else {
                i++;
            }
        }
        if (b < self.n
            && jv_list_push(&c->arena, l, jv_strn(self.u.s + b, self.n - b)))
        {
            return jj_oom(c);
        }
        *out = l;
        return 0;
    case M_ISDIGIT:
    case M_ISALPHA:
    case M_ISALNUM:
    case M_ISSPACE:
    case M_ISLOWER:
    case M_ISUPPER: {
        int  cased = 0, ok = self.n > 0;

        for (i = 0; i < self.n && ok; ) {
            cp = jj_utf8_decode(self.u.s, self.n, &i);
            int dig = cp >= '0' && cp <= '9';
            int alp = jj_lower(cp) != cp || jj_upper(cp) != cp
                      || (cp >= 0x80 && !jj_is_space(cp) && cp > 0x2000);
            switch (fn->id) {
            case M_ISDIGIT: ok = dig; break;
            case M_ISALPHA: ok = alp; break;
            case M_ISALNUM: ok = alp || dig; break;
            case M_ISSPACE: ok = jj_is_space(cp); break;
            case M_ISLOWER:
                if (jj_upper(cp) != cp) {
                    cased = 1;
                } else if (jj_lower(cp) != cp) {
                    ok = 0;
                }
                break;
            default:
                if (jj_lower(cp) != cp) {
                    cased = 1;
                } else if (jj_upper(cp) != cp) {
                    ok = 0;
                }
            }
        }
        if (fn->id == M_ISLOWER || fn->id == M_ISUPPER) {
            ok = ok && cased;
        }
        *out = jv_bool(ok);
        return 0;
    }
    case M_GET:
        if (!arg(a, 0, "key", &x)) {
            return jj_fail(c, -EINVAL, "TypeError: get expected at least 1 "
                           "argument, got 0");
        }
        if (!jv_dict_get(self, x, out)) {
            *out = jv_none();
            arg(a, 1, "default", out);
        }
        return 0;
    case M_ITEMS:
    case M_KEYS:
    case M_VALUES:
        l = jv_list_new(&c->arena, fn->id == M_ITEMS ? JL_ITEMS
                        : fn->id == M_KEYS ? JL_KEYS : JL_VALUES,
                        self.u.d->n);
        if (l.type != JV_LIST) {
            return jj_oom(c);
        }
        for (i = 0; i < self.u.d->n; i++) {
            if (fn->id == M_ITEMS) {
                x = jv_list_new(&c->arena, JL_TUPLE, 2);
                if (x.type != JV_LIST) {
                    return jj_oom(c);
                }
                x.u.l->items[0] = self.u.d->keys[i];
                x.u.l->items[1] = self.u.d->vals[i];
                x.u.l->n = 2;
            } else {
                x = fn->id == M_KEYS ? self.u.d->keys[i] : self.u.d->vals[i];
            }
            l.u.l->items[l.u.l->n++] = x;
        }
        *out = l;
        return 0;
    case M_LCOUNT:
    case M_LINDEX:
        if (!arg(a, 0, "value", &x)) {
            return jj_fail(c, -EINVAL, "TypeError: %s() takes exactly one "
                           "argument", fn->name);
        }
        count = 0;
        for (i = 0; i < self.u.l->n; i++) {
            if (jv_equal(self.u.l->items[i], x)) {
                if (fn->id == M_LINDEX) {
                    *out = jv_int((int64_t) i);
                    return 0;
                }
                count++;
            }
        }
        if (fn->id == M_LINDEX) {
            return jj_fail(c, -EINVAL, "ValueError: value is not in list");
        }
        *out = jv_int(count);
        return 0;
    default:
        return jj_fail(c, -EINVAL, "unsupported method %s", fn->name);
    }
}

/* ---- globals ---- */

typedef enum {
    G_RANGE = 1, G_NAMESPACE, G_DICT, G_RAISE, G_STRFTIME
} global_t;

static const struct {
    const char  *name;
    uint32_t     id;
} globals[] = {
    { "range", G_RANGE }, { "namespace", G_NAMESPACE }, { "dict", G_DICT },
    { "raise_exception", G_RAISE }, { "strftime_now", G_STRFTIME },
    { NULL, 0 }
};

void
jj_add_globals(jj_ctx_t *c, jv_t dict)
{
    jj_func_t  *fn;
    jv_t        v = { 0 };
    size_t      i;

    for (i = 0; globals[i].name != NULL; i++) {
        fn = jj_alloc(&c->arena, sizeof(jj_func_t));
        if (fn == NULL) {
            jj_oom(c);
            return;
        }
        fn->kind = JF_BUILTIN;
        fn->id = globals[i].id;
        fn->name = globals[i].name;
        fn->namelen = strlen(globals[i].name);
        v.type = JV_FUNC;
        v.u.fn = fn;
        if (jv_dict_set(&c->arena, dict, jv_strn(fn->name, fn->namelen), v))
        {
            jj_oom(c);
            return;
        }
    }
}

static int
call_global(jj_ctx_t *c, jj_func_t *fn, const jargs_t *a, jv_t *out)
{
    jv_t       v, d;
    int64_t    r[3] = { 0, 0, 1 }, i, count;
    size_t     k;
    char       tbuf[512];
    struct tm  tm;
    time_t     t;

    switch (fn->id) {
    case G_RANGE:
        if (a->nargs < 1 || a->nargs > 3 || a->nkw) {
            return jj_fail(c, -EINVAL, "TypeError: range expected 1 to 3 "
                           "integer arguments");
        }
        for (k = 0; k < a->nargs; k++) {
            if (a->args[k].type != JV_INT && a->args[k].type != JV_BOOL) {
                return jj_fail(c, -EINVAL, "TypeError: '%s' object cannot "
                               "be interpreted as an integer",
                               jv_type_name(a->args[k]));
            }
        }
        if (a->nargs == 1) {
            r[1] = a->args[0].u.i;
        } else {
            r[0] = a->args[0].u.i;
            r[1] = a->args[1].u.i;
            if (a->nargs == 3) {
                r[2] = a->args[2].u.i;
            }
        }
        if (r[2] == 0) {
            return jj_fail(c, -EINVAL, "ValueError: range() arg 3 must not "
                           "be zero");
        }
        count = r[2] > 0 ? (r[1] > r[0] ? (r[1] - r[0] + r[2] - 1) / r[2] : 0)
                : (r[0] > r[1] ? (r[0] - r[1] - r[2] - 1) / -r[2] : 0);
        if (count > JJ_MAX_RANGE) {
            return jj_fail(c, -E2BIG, "OverflowError: Range too big. The "
                           "sandbox blocks ranges larger than MAX_RANGE "
                           "(%d).", JJ_MAX_RANGE);
        }
        v = jv_list_new(&c->arena, JL_RANGE, (size_t) count);
        if (v.type != JV_LIST) {
            return jj_oom(c);
        }
        for (i = 0; i < count; i++) {
            v.u.l->items[i] = jv_int(r[0] + i * r[2]);
        }
        v.u.l->n = (size_t) count;
        memcpy(v.u.l->r, r, sizeof(r));
        *out = v;
        return 0;
    case G_NAMESPACE:
    case G_DICT:
        d = jv_dict_new(&c->arena, fn->id == G_NAMESPACE ? JV_NS : JV_DICT);
        if (d.type == JV_UNDEF) {
            return jj_oom(c);
        }
        if (a->nargs > 1) {
            return jj_fail(c, -EINVAL, "TypeError: %s expected at most 1 "
                           "argument", fn->name);
        }
        if (a->nargs == 1) {
            v = a->args[0];
            if (v.type != JV_DICT && v.type != JV_NS) {
                return jj_fail(c, -EINVAL, "unsupported construct: %s() "
                               "from a %s", fn->name, jv_type_name(v));
            }
            for (k = 0; k < v.u.d->n; k++) {
                if (jv_dict_set(&c->arena, d, v.u.d->keys[k],
                                v.u.d->vals[k]) != 0)
                {
                    return jj_oom(c);
                }
            }
        }
        for (k = 0; k < a->nkw; k++) {
            if (jv_dict_set(&c->arena, d, jv_strn(a->kwn[k],
                            strlen(a->kwn[k])), a->kwv[k]) != 0)
            {
                return jj_oom(c);
            }
        }
        *out = d;
        return 0;
    case G_RAISE:
        v = jv_undef();
        arg(a, 0, "message", &v);
        if (jj_str(c, v, &v) != 0) {
            return -1;
        }
        jj_fail(c, -EPERM, "%.*s", (int) v.n, v.u.s);
        c->raised = 1;
        return -1;
    case G_STRFTIME:
        if (!arg(a, 0, "format", &v) || need_str(c, v, "format") != 0) {
            return c->rc ? -1 : jj_fail(c, -EINVAL, "TypeError: "
                                        "strftime_now() needs a format");
        }
        t = c->now >= 0 ? (time_t) c->now : time(NULL);
        if (c->now >= 0) {
            gmtime_r(&t, &tm);
        } else {
            localtime_r(&t, &tm);
        }
        {
            char fmt[256];

            snprintf(fmt, sizeof(fmt), "%.*s", (int) v.n, v.u.s);
            k = strftime(tbuf, sizeof(tbuf), fmt, &tm);
        }
        *out = new_str(c, tbuf, k);
        return out->type == JV_STR ? 0 : -1;
    default:
        return jj_fail(c, -EINVAL, "unknown global");
    }
}

int
jj_call_builtin(jj_ctx_t *c, jj_func_t *fn, jv_t *args, size_t nargs,
    const char **kwn, jv_t *kwv, size_t nkw, jv_t *out)
{
    jargs_t  a = { args, nargs, kwn, kwv, nkw };
    jv_t     l;

    switch (fn->kind) {
    case JF_BUILTIN:
        return call_global(c, fn, &a, out);
    case JF_METHOD:
        return call_method(c, fn, &a, out);
    case JF_CYCLE:
        if (nargs == 0) {
            return jj_fail(c, -EINVAL, "TypeError: no items for cycling "
                           "given");
        }
        l = fn->self;
        *out = args[l.u.loop->index0 % nargs];
        return 0;
    default:
        return jj_fail(c, -EINVAL, "not callable");
    }
}

/* ---- filters ---- */

static int
len_of(jj_ctx_t *c, jv_t v, int64_t *n)
{
    switch (v.type) {
    case JV_UNDEF:
        *n = 0;
        return 0;
    case JV_STR:
        *n = (int64_t) jj_utf8_len(v.u.s, v.n);
        return 0;
    case JV_LIST:
        if (v.u.l->kind != JL_GEN) {
            *n = (int64_t) v.u.l->n;
            return 0;
        }
        break;
    case JV_DICT:
    case JV_NS:
        *n = (int64_t) v.u.d->n;
        return 0;
    default:
        break;
    }
    return jj_fail(c, -EINVAL, "TypeError: object of type '%s' has no "
                   "len()", jv_type_name(v));
}

/* The sort key: case-folded strings unless case_sensitive. */
typedef struct {
    jj_ctx_t  *c;
    int        reverse;
    int        ci;
    int        failed;
} sortctx_t;

static jv_t
fold(jj_ctx_t *c, jv_t v, int ci)
{
    jv_t  out;

    if (ci && v.type == JV_STR && do_case(c, v, 0, &out) == 0) {
        return out;
    }
    return v;
}

typedef struct {
    jv_t    key;
    jv_t    val;
    size_t  idx;
} sortitem_t;

/* Stable merge sort on keys; a comparison may fail (mixed types). */
static int
sort_items(jj_ctx_t *c, sortitem_t *it, size_t n, int reverse)
{
    sortitem_t  *tmp, *src = it, *dst, *t;
    size_t       w, lo, mid, hi, i, j, k;
    int          cmp;

    if (n < 2) {
        return 0;
    }
    tmp = jj_alloc(&c->arena, n * sizeof(sortitem_t));
    if (tmp == NULL) {
        return jj_oom(c);
    }
    dst = tmp;
    for (w = 1; w < n; w *= 2) {
        if (jj_work(c, n) != 0) {
            return -1;
        }
        for (lo = 0; lo < n; lo += 2 * w) {
            mid = lo + w < n ? lo + w : n;
            hi = lo + 2 * w < n ? lo + 2 * w : n;
            i = lo;
            j = mid;
            k = lo;
            while (i < mid && j < hi) {
                if (jj_compare(c, src[j].key, src[i].key, &cmp) != 0) {
                    return -1;
                }
                /* take the right one only if it sorts strictly first */
                if (reverse ? cmp > 0 : cmp < 0) {
                    dst[k++] = src[j++];
                } else {
                    dst[k++] = src[i++];
                }
            }
            while (i < mid) {
                dst[k++] = src[i++];
            }
            while (j < hi) {
                dst[k++] = src[j++];
            }
        }
        t = src;
        src = dst;
        dst = t;
    }
    if (src != it) {
        memcpy(it, src, n * sizeof(sortitem_t));
    }
    return 0;
}

static int
make_gen(jj_ctx_t *c, jv_t *out)
{
    *out = jv_list_new(&c->arena, JL_GEN, 0);
    return out->type == JV_LIST ? 0 : jj_oom(c);
}

/* select / reject / selectattr / rejectattr */
static int
filter_select(jj_ctx_t *c, jv_t v, const jargs_t *a, int by_attr,
    int reject, jv_t *out)
{
    jv_t         l, item, x, name;
    size_t       i, first = by_attr ? 1 : 0;
    int          res;

    if (make_gen(c, out) != 0) {
        return -1;
    }
    if (!jv_truthy(v)) {
        return 0;               /* jinja2: "if value:" before iterating */
    }
    if (jj_iterate(c, v, &l) != 0) {
        return -1;
    }
    if (by_attr && (a->nargs < 1)) {
        return jj_fail(c, -EINVAL, "TypeError: missing attribute for "
                       "selectattr");
    }
    for (i = 0; i < l.u.l->n; i++) {
        item = l.u.l->items[i];
        x = item;
        if (by_attr && attr_path(c, item, a->args[0], &x) != 0) {
            return -1;
        }
        if (a->nargs > first) {
            name = a->args[first];
            if (need_str(c, name, "test name") != 0) {
                return -1;
            }
            if (!jj_test_exists(name.u.s, name.n)) {
                return jj_fail(c, -EINVAL, "TemplateRuntimeError: No test "
                               "named '%.*s'.", (int) name.n, name.u.s);
            }
            if (jj_test(c, name.u.s, name.n, x, a->args + first + 1,
                        a->nargs - first - 1, &res) != 0)
            {
                return -1;
            }
        } else {
            res = jv_truthy(x);
        }
        if (res != reject && jv_list_push(&c->arena, *out, item) != 0) {
            return jj_oom(c);
        }
    }
    return 0;
}

static int
filter_map(jj_ctx_t *c, jv_t v, const jargs_t *a, jv_t *out)
{
    jv_t    l, item, x, name, def;
    size_t  i;

    if (make_gen(c, out) != 0) {
        return -1;
    }
    if (!jv_truthy(v)) {
        return 0;
    }
    if (jj_iterate(c, v, &l) != 0) {
        return -1;
    }
    for (i = 0; i < l.u.l->n; i++) {
        item = l.u.l->items[i];
        if (a->nargs == 0 && arg(a, 99, "attribute", &name)) {
            if (attr_path(c, item, name, &x) != 0) {
                return -1;
            }
            if (x.type == JV_UNDEF && arg(a, 99, "default", &def)) {
                x = def;
            }
        } else if (a->nargs >= 1) {
            name = a->args[0];
            if (need_str(c, name, "filter name") != 0) {
                return -1;
            }
            if (!jj_filter_exists(name.u.s, name.n)) {
                return jj_fail(c, -EINVAL, "TemplateRuntimeError: No filter "
                               "named '%.*s'.", (int) name.n, name.u.s);
            }
            if (jj_filter(c, name.u.s, name.n, item, a->args + 1,
                          a->nargs - 1, a->kwn, a->kwv, a->nkw, &x) != 0)
            {
                return -1;
            }
        } else {
            return jj_fail(c, -EINVAL, "TypeError: map needs a filter name "
                           "or attribute=");
        }
        if (jv_list_push(&c->arena, *out, x) != 0) {
            return jj_oom(c);
        }
    }
    return 0;
}

static int
filter_tojson(jj_ctx_t *c, jv_t v, const jargs_t *a, jv_t *out)
{
    jj_buf_t     b = { 0 };
    jv_t         ind, sep, x;
    const char  *indent = NULL, *itemsep = ", ", *keysep = ": ";
    char         spaces[64], e[256] = "", isep[64], ksep[64];
    int          nindent = 0, rc;

    if (arg(a, 1, "indent", &ind) && ind.type != JV_NONE) {
        if (ind.type == JV_INT) {
            nindent = (int) (ind.u.i < 0 ? 0 : ind.u.i > 60 ? 60 : ind.u.i);
            memset(spaces, ' ', (size_t) nindent);
            indent = spaces;
        } else if (ind.type == JV_STR) {
            indent = ind.u.s;
            nindent = (int) ind.n;
        } else {
            return jj_fail(c, -EINVAL, "TypeError: bad tojson indent");
        }
        itemsep = ",";
    }
    if (arg(a, 2, "separators", &sep) && sep.type != JV_NONE) {
        if (sep.type != JV_LIST || sep.u.l->n != 2
            || sep.u.l->items[0].type != JV_STR
            || sep.u.l->items[1].type != JV_STR)
        {
            return jj_fail(c, -EINVAL, "TypeError: tojson separators must be "
                           "a pair of strings");
        }
        x = sep.u.l->items[0];
        snprintf(isep, sizeof(isep), "%.*s", (int) x.n, x.u.s);
        x = sep.u.l->items[1];
        snprintf(ksep, sizeof(ksep), "%.*s", (int) x.n, x.u.s);
        itemsep = isep;
        keysep = ksep;
    }
    rc = jv_json_into(&b, v, indent, nindent, itemsep, keysep,
                      (arg_bool(a, 3, "sort_keys", 0) ? JJ_JSON_SORT_KEYS : 0)
                      | (arg_bool(a, 0, "ensure_ascii", 0) ? JJ_JSON_ASCII : 0),
                      0, e, sizeof(e));
    if (rc != 0) {
        free(b.p);
        if (e[0]) {
            return jj_fail(c, -EINVAL, "TypeError: %s", e);
        }
        return jj_oom(c);
    }
    *out = new_str(c, b.p ? b.p : "", b.n);
    free(b.p);
    return out->type == JV_STR ? 0 : -1;
}

static int
filter_indent(jj_ctx_t *c, jv_t s, const jargs_t *a, jv_t *out)
{
    sbuf_t   b = { 0 };
    jv_t     w, ind, line;
    char     spaces[256];
    size_t   i, start, n;
    int      first, blank;
    jv_t     lines;

    ind = jv_strn(spaces, 4);
    memset(spaces, ' ', sizeof(spaces));
    if (arg(a, 0, "width", &w)) {
        if (w.type == JV_STR) {
            ind = w;
        } else if (w.type == JV_INT) {
            ind = jv_strn(spaces, (size_t) (w.u.i < 0 ? 0 : w.u.i > 255
                                            ? 255 : w.u.i));
        }
    }
    first = arg_bool(a, 1, "first", 0);
    blank = arg_bool(a, 2, "blank", 0);
    /* as jinja2: lines = (s + "\n").splitlines() */
    lines = jv_list_new(&c->arena, JL_LIST, 0);
    if (lines.type != JV_LIST) {
        return jj_oom(c);
    }
    for (i = 0, start = 0; i < s.n; ) {
        if (s.u.s[i] == '\n' || s.u.s[i] == '\r') {
            n = s.u.s[i] == '\r' && i + 1 < s.n && s.u.s[i + 1] == '\n'
                ? 2 : 1;
            if (jv_list_push(&c->arena, lines, jv_strn(s.u.s + start,
                             i - start)) != 0)
            {
                return jj_oom(c);
            }
            i += n;
            start = i;
        } else {
            i++;
        }
    }
    /* the appended "\n" ends the last line */
    if (jv_list_push(&c->arena, lines, jv_strn(s.u.s + start,
                     s.n - start)) != 0)
    {
        return jj_oom(c);
    }
    if (first && sb_add(c, &b, ind.u.s, ind.n) != 0) {
        return -1;
    }
    for (i = 0; i < lines.u.l->n; i++) {
        line = lines.u.l->items[i];
        if (i > 0) {
            if (sb_add(c, &b, "\n", 1) != 0
                || ((blank || line.n) && sb_add(c, &b, ind.u.s, ind.n) != 0))
            {
                return -1;
            }
        }
        if (sb_add(c, &b, line.u.s, line.n) != 0) {
            return -1;
        }
    }
    *out = sb_val(&b);
    return 0;
}

static const char *const filter_names[] = {
    "abs", "attr", "capitalize", "count", "d", "default", "dictsort", "e",
    "escape", "first", "float", "indent", "int", "items", "join", "last",
    "length", "list", "lower", "map", "max", "min", "reject", "rejectattr",
    "replace", "reverse", "round", "safe", "select", "selectattr", "sort",
    "string", "sum", "title", "tojson", "trim", "unique", "upper",
    "wordcount", "center", "forceescape", NULL
};

int
jj_filter_exists(const char *name, size_t n)
{
    size_t  i;

    for (i = 0; filter_names[i] != NULL; i++) {
        if (name_eq(name, filter_names[i], n)) {
            return 1;
        }
    }
    return 0;
}

#define IS(s)  name_eq(name, s, namelen)

static int filter_rest(jj_ctx_t *c, const char *name, size_t namelen,
    jv_t v, const jargs_t *ap, jv_t *out);

int
jj_filter(jj_ctx_t *c, const char *name, size_t namelen, jv_t v,
    jv_t *args, size_t nargs, const char **kwn, jv_t *kwv, size_t nkw,
    jv_t *out)
{
    jargs_t      a = { args, nargs, kwn, kwv, nkw };
    jv_t         s, x, y, l, key;
    size_t       i;
    int64_t      n = 0;
    sbuf_t       sb = { 0 };

    if (IS("default") || IS("d")) {
        x = jv_strn("", 0);
        arg(&a, 0, "default_value", &x);
        if (v.type == JV_UNDEF || (arg_bool(&a, 1, "boolean", 0)
                                   && !jv_truthy(v)))
        {
            *out = x;
        } else {
            *out = v;
        }
        return 0;
    }
    if (IS("length") || IS("count")) {
        if (len_of(c, v, &n) != 0) {
            return -1;
        }
        *out = jv_int(n);
        return 0;
    }
    if (IS("safe")) {
        /* Markup: "+" with a plain str escapes the plain side */
        if (jj_str(c, v, out) != 0) {
            return -1;
        }
        out->flag = JV_MARKUP;
        return 0;
    }
    if (IS("string")) {
        return jj_str(c, v, out);
    }
    if (IS("tojson")) {
        return filter_tojson(c, v, &a, out);
    }
    if (IS("items")) {
        if (v.type == JV_UNDEF) {
            return make_gen(c, out);
        }
        if (v.type != JV_DICT) {
            return jj_fail(c, -EINVAL, "TypeError: Can only get item pairs "
                           "from a mapping.");
        }
        if (make_gen(c, out) != 0) {
            return -1;
        }
        for (i = 0; i < v.u.d->n; i++) {
            x = jv_list_new(&c->arena, JL_TUPLE, 2);
            if (x.type != JV_LIST) {
                return jj_oom(c);
            }
            x.u.l->items[0] = v.u.d->keys[i];
            x.u.l->items[1] = v.u.d->vals[i];
            x.u.l->n = 2;
            if (jv_list_push(&c->arena, *out, x) != 0) {
                return jj_oom(c);
            }
        }
        return 0;
    }
    if (IS("list")) {
        if (jj_iterate(c, v, &l) != 0) {
            return -1;
        }
        *out = jv_list_new(&c->arena, JL_LIST, l.u.l->n);
        if (out->type != JV_LIST) {
            return jj_oom(c);
        }
        if (l.u.l->n) {
            memcpy(out->u.l->items, l.u.l->items, l.u.l->n * sizeof(jv_t));
        }
        out->u.l->n = l.u.l->n;
        return 0;
    }
    if (IS("first") || IS("last")) {
        if (v.type == JV_LIST && v.u.l->kind == JL_GEN && IS("last")) {
            return jj_fail(c, -EINVAL, "TypeError: 'generator' object is "
                           "not reversible");
        }
        if (jj_iterate(c, v, &l) != 0) {
            return -1;
        }
        if (l.u.l->n == 0) {
            *out = undef_msg(c, 0, "No %s item, sequence was empty.",
                             IS("first") ? "first" : "last");
            return 0;
        }
        *out = l.u.l->items[IS("first") ? 0 : l.u.l->n - 1];
        return 0;
    }
    if (IS("join")) {
        if (jj_iterate(c, v, &l) != 0) {
            return -1;
        }
        s = jv_strn("", 0);
        arg(&a, 0, "d", &s);
        if (jj_str(c, s, &s) != 0) {
            return -1;
        }
        for (i = 0; i < l.u.l->n; i++) {
            x = l.u.l->items[i];
            if (arg(&a, 1, "attribute", &y) && attr_path(c, x, y, &x) != 0) {
                return -1;
            }
            if (jj_str(c, x, &x) != 0
                || (i && sb_add(c, &sb, s.u.s, s.n) != 0)
                || sb_add(c, &sb, x.u.s, x.n) != 0)
            {
                return -1;
            }
        }
        *out = sb_val(&sb);
        return 0;
    }
    if (IS("indent") && v.type != JV_STR) {
        /* jinja2 does s += "\n" on the value as given */
        if (v.type == JV_UNDEF) {
            return jj_undef_fail(c, v);
        }
        return jj_fail(c, -EINVAL, "TypeError: unsupported operand type(s) "
                       "for +=: '%s' and 'str'", jv_type_name(v));
    }
    if (IS("upper") || IS("lower") || IS("capitalize") || IS("title")
        || IS("trim") || IS("replace") || IS("indent") || IS("e")
        || IS("escape") || IS("forceescape") || IS("wordcount")
        || IS("center"))
    {
        if (jj_str(c, v, &s) != 0) {
            return -1;
        }
        if (IS("upper")) {
            return do_case(c, s, 1, out);
        }
        if (IS("lower")) {
            return do_case(c, s, 0, out);
        }
        if (IS("capitalize")) {
            return do_case(c, s, 2, out);
        }
        if (IS("title")) {
            return do_title(c, s, out);
        }
        if (IS("trim")) {
            x = jv_none();
            arg(&a, 0, "chars", &x);
            return do_strip(c, s, x, 1, 1, out);
        }
        if (IS("replace")) {
            if (!arg(&a, 0, "old", &x) || !arg(&a, 1, "new", &y)) {
                return jj_fail(c, -EINVAL, "TypeError: replace needs old and "
                               "new");
            }
            if (jj_str(c, x, &x) != 0 || jj_str(c, y, &y) != 0) {
                return -1;
            }
            n = -1;
            if (arg(&a, 2, "count", &key) && key.type == JV_INT) {
                n = key.u.i;
            }
            return do_replace(c, s, x, y, n, out);
        }
        if (IS("indent")) {
            return filter_indent(c, s, &a, out);
        }
        if (IS("wordcount")) {
            /* len(re.findall(r"\w+", s)) */
            int       inword = 0;
            uint32_t  cp;

            for (i = 0, n = 0; i < s.n; ) {
                cp = jj_utf8_decode(s.u.s, s.n, &i);
                int w = (cp >= '0' && cp <= '9') || (cp >= 'a' && cp <= 'z')
                        || (cp >= 'A' && cp <= 'Z') || cp == '_'
                        || (cp >= 0x80 && !jj_is_space(cp));
                n += w && !inword;
                inword = w;
            }
            *out = jv_int(n);
            return 0;
        }
        if (IS("center")) {
            int64_t  w = 80, len = (int64_t) jj_utf8_len(s.u.s, s.n), left;

            if (arg(&a, 0, "width", &x) && x.type == JV_INT) {
                w = x.u.i > 100000 ? 100000 : x.u.i;
            }
            if (w <= len) {
                *out = s;
                return 0;
            }
            left = (w - len) / 2 + ((w - len) & w & 1);
            for (n = 0; n < left; n++) {
                if (sb_add(c, &sb, " ", 1) != 0) {
                    return -1;
                }
            }
            if (sb_add(c, &sb, s.u.s, s.n) != 0) {
                return -1;
            }
            for (n = left + len; n < w; n++) {
                if (sb_add(c, &sb, " ", 1) != 0) {
                    return -1;
                }
            }
            *out = sb_val(&sb);
            return 0;
        }
        /* escape */
        if (s.flag == JV_MARKUP && !IS("forceescape")) {
            *out = s;
            return 0;
        }
        if (jj_escape(c, s, out) != 0) {
            return -1;
        }
        return 0;
    }
    return filter_rest(c, name, namelen, v, &a, out);
}

int
jj_escape(jj_ctx_t *c, jv_t s, jv_t *out)
{
    sbuf_t  sb = { 0 };
    size_t  i;

    {
        for (i = 0; i < s.n; i++) {
            const char *r = NULL;

            switch (s.u.s[i]) {
            case '&': r = "&amp;"; break;
            case '<': r = "&lt;"; break;
            case '>': r = "&gt;"; break;
            case '"': r = "&#34;"; break;
            case '\'': r = "&#39;"; break;
            }
            if (r ? sb_add(c, &sb, r, strlen(r)) : sb_add(c, &sb, s.u.s + i,
                                                          1))
            {
                return -1;
            }
        }
        *out = sb_val(&sb);
        out->flag = JV_MARKUP;
        return 0;
    }
}

static int
filter_rest(jj_ctx_t *c, const char *name, size_t namelen, jv_t v,
    const jargs_t *ap, jv_t *out)
{
    jargs_t      a = *ap;
    jv_t         s, x, y, l, key;
    sortitem_t  *it;
    size_t       i, j, k;
    int64_t      n = 0;
    int          ci, res, cmp;
    sbuf_t       sb = { 0 };

    if (IS("selectattr") || IS("rejectattr")) {
        return filter_select(c, v, &a, 1, IS("rejectattr"), out);
    }
    if (IS("select") || IS("reject")) {
        return filter_select(c, v, &a, 0, IS("reject"), out);
    }
    if (IS("map")) {
        return filter_map(c, v, &a, out);
    }
    if (IS("attr")) {
        if (!arg(&a, 0, "name", &x) || need_str(c, x, "attribute name")) {
            return c->rc ? -1 : jj_fail(c, -EINVAL, "attr needs a name");
        }
        if (v.type == JV_DICT) {
            /* getattr() only: a dict's keys are not attributes */
            int r = find_method(c, v, x.u.s, x.n, out);

            if (r == 0) {
                *out = undef_msg(c, 0, "'dict object' has no attribute "
                                 "'%.*s'", (int) x.n, x.u.s);
            }
            return r < 0 ? -1 : 0;
        }
        if (v.type == JV_UNDEF) {
            *out = v;
            return 0;
        }
        return jj_getattr(c, v, x.u.s, x.n, out);
    }
    if (IS("dictsort")) {
        if (v.type != JV_DICT) {
            return jj_fail(c, -EINVAL, "FilterArgumentError: You can only "
                           "sort by either \"key\" or \"value\"");
        }
        ci = !arg_bool(&a, 0, "case_sensitive", 0);
        k = 0;
        if (arg(&a, 1, "by", &x) && x.type == JV_STR && x.n == 5
            && memcmp(x.u.s, "value", 5) == 0)
        {
            k = 1;
        }
        it = jj_alloc(&c->arena, (v.u.d->n + 1) * sizeof(sortitem_t));
        if (it == NULL) {
            return jj_oom(c);
        }
        for (i = 0; i < v.u.d->n; i++) {
            it[i].key = fold(c, k ? v.u.d->vals[i] : v.u.d->keys[i], ci);
            it[i].idx = i;
        }
        if (sort_items(c, it, v.u.d->n, arg_bool(&a, 2, "reverse", 0))) {
            return -1;
        }
        *out = jv_list_new(&c->arena, JL_LIST, v.u.d->n);
        if (out->type != JV_LIST) {
            return jj_oom(c);
        }
        for (i = 0; i < v.u.d->n; i++) {
            x = jv_list_new(&c->arena, JL_TUPLE, 2);
            if (x.type != JV_LIST) {
                return jj_oom(c);
            }
            x.u.l->items[0] = v.u.d->keys[it[i].idx];
            x.u.l->items[1] = v.u.d->vals[it[i].idx];
            x.u.l->n = 2;
            out->u.l->items[out->u.l->n++] = x;
        }
        return 0;
    }
    if (IS("sort") || IS("unique") || IS("min") || IS("max")) {
        if (jj_iterate(c, v, &l) != 0) {
            return -1;
        }
        if (IS("sort")) {
            ci = !arg_bool(&a, 1, "case_sensitive", 0);
            res = arg_bool(&a, 0, "reverse", 0);
            y = jv_none();
            arg(&a, 2, "attribute", &y);
        } else {
            ci = !arg_bool(&a, 0, "case_sensitive", 0);
            res = 0;
            y = jv_none();
            arg(&a, 1, "attribute", &y);
        }
        it = jj_alloc(&c->arena, (l.u.l->n + 1) * sizeof(sortitem_t));
        if (it == NULL) {
            return jj_oom(c);
        }
        for (i = 0; i < l.u.l->n; i++) {
            x = l.u.l->items[i];
            if (y.type != JV_NONE && attr_path(c, x, y, &x) != 0) {
                return -1;
            }
            it[i].key = fold(c, x, ci);
            it[i].val = l.u.l->items[i];
            it[i].idx = i;
        }
        if (IS("unique")) {
            if (make_gen(c, out) != 0) {
                return -1;
            }
            for (i = 0; i < l.u.l->n; i++) {
                if (jj_work(c, i) != 0) {
                    return -1;
                }
                for (j = 0; j < i; j++) {
                    if (jv_equal(it[j].key, it[i].key)) {
                        break;
                    }
                }
                if (j == i && jv_list_push(&c->arena, *out, it[i].val)) {
                    return jj_oom(c);
                }
            }
            return 0;
        }
        if (IS("min") || IS("max")) {
            if (l.u.l->n == 0) {
                *out = undef_msg(c, 0, "No aggregated item, sequence was "
                                 "empty.");
                return 0;
            }
            k = 0;
            for (i = 1; i < l.u.l->n; i++) {
                if (jj_compare(c, it[i].key, it[k].key, &cmp) != 0) {
                    return -1;
                }
                if (IS("min") ? cmp < 0 : cmp > 0) {
                    k = i;
                }
            }
            *out = it[k].val;
            return 0;
        }
        if (sort_items(c, it, l.u.l->n, res) != 0) {
            return -1;
        }
        *out = jv_list_new(&c->arena, JL_LIST, l.u.l->n);
        if (out->type != JV_LIST) {
            return jj_oom(c);
        }
        for (i = 0; i < l.u.l->n; i++) {
            out->u.l->items[out->u.l->n++] = it[i].val;
        }
        return 0;
    }
    if (IS("reverse")) {
        if (v.type == JV_STR) {
            if (sb_add(c, &sb, "", 0) != 0) {
                return -1;
            }
            for (i = v.n; i > 0; ) {
                j = i - 1;
                while (j > 0 && ((unsigned char) v.u.s[j] & 0xc0) == 0x80) {
                    j--;
                }
                if (sb_add(c, &sb, v.u.s + j, i - j) != 0) {
                    return -1;
                }
                i = j;
            }
            *out = sb_val(&sb);
            return 0;
        }
        if (jj_iterate(c, v, &l) != 0) {
            return -1;
        }
        *out = jv_list_new(&c->arena, JL_LIST, l.u.l->n);
        if (out->type != JV_LIST) {
            return jj_oom(c);
        }
        for (i = l.u.l->n; i > 0; i--) {
            out->u.l->items[out->u.l->n++] = l.u.l->items[i - 1];
        }
        return 0;
    }
    if (IS("sum")) {
        if (jj_iterate(c, v, &l) != 0) {
            return -1;
        }
        x = jv_int(0);
        arg(&a, 1, "start", &x);
        for (i = 0; i < l.u.l->n; i++) {
            y = l.u.l->items[i];
            if (arg(&a, 0, "attribute", &key) && key.type != JV_NONE
                && attr_path(c, y, key, &y) != 0)
            {
                return -1;
            }
            if (!jv_is_num(x) || !jv_is_num(y)) {
                return jj_fail(c, -EINVAL, "TypeError: unsupported operand "
                               "type(s) for +: '%s' and '%s'",
                               jv_type_name(x), jv_type_name(y));
            }
            if (x.type == JV_FLOAT || y.type == JV_FLOAT) {
                x = jv_float(jv_num(x) + jv_num(y));
            } else if (__builtin_add_overflow(x.u.i, y.u.i, &n)) {
                return jj_fail(c, -ERANGE, "integer overflow in sum");
            } else {
                x = jv_int(n);
            }
        }
        *out = x;
        return 0;
    }
    if (IS("abs")) {
        if (v.type == JV_FLOAT) {
            *out = jv_float(fabs(v.u.f));
        } else if ((v.type == JV_INT || v.type == JV_BOOL)
                   && v.u.i != INT64_MIN)
        {
            *out = jv_int(v.u.i < 0 ? -v.u.i : v.u.i);
        } else {
            return jj_fail(c, -EINVAL, "TypeError: bad operand type for "
                           "abs(): '%s'", jv_type_name(v));
        }
        return 0;
    }
    if (IS("int") || IS("float")) {
        int   isint = IS("int");
        char  tmp[64], *end;

        x = isint ? jv_int(0) : jv_float(0.0);
        arg(&a, 0, "default", &x);
        if (v.type == JV_UNDEF) {
            return jj_undef_fail(c, v);     /* int(Undefined) raises */
        }
        if (v.type == JV_INT || v.type == JV_BOOL) {
            *out = isint ? jv_int(v.u.i) : jv_float((double) v.u.i);
        } else if (v.type == JV_FLOAT) {
            if (isint && (isnan(v.u.f) || fabs(v.u.f) > 9.2e18)) {
                *out = x;
            } else {
                *out = isint ? jv_int((int64_t) v.u.f) : v;
            }
        } else if (v.type == JV_STR && v.n < sizeof(tmp)) {
            memcpy(tmp, v.u.s, v.n);
            tmp[v.n] = '\0';
            if (isint) {
                long long ll = strtoll(tmp, &end, 10);

                while (*end == ' ' || *end == '\t' || *end == '\n') {
                    end++;
                }
                if (end != tmp && *end == '\0') {
                    *out = jv_int(ll);
                } else {
                    double d = strtod(tmp, &end);

                    *out = end != tmp && *end == '\0' && fabs(d) < 9.2e18
                           ? jv_int((int64_t) d) : x;
                }
            } else {
                double d = strtod(tmp, &end);

                *out = end != tmp && *end == '\0' ? jv_float(d) : x;
            }
        } else {
            *out = x;
        }
        return 0;
    }
    if (IS("round")) {
        int64_t  prec = 0;
        double   f, m;

        if (arg(&a, 0, "precision", &x) && x.type == JV_INT) {
            prec = x.u.i < 0 ? 0 : x.u.i > 15 ? 15 : x.u.i;
        }
        if (!jv_is_num(v)) {
            return jj_fail(c, -EINVAL, "TypeError: type %s doesn't define "
                           "__round__ method", jv_type_name(v));
        }
        if (v.type != JV_FLOAT && !arg(&a, 1, "method", &s)) {
            /* round(int, n) stays an int in Python */
            *out = jv_int(v.u.i);
            return 0;
        }
        f = jv_num(v);
        m = pow(10.0, (double) prec);
        s = jv_strn("common", 6);
        arg(&a, 1, "method", &s);
        if (s.type == JV_STR && s.n == 4 && memcmp(s.u.s, "ceil", 4) == 0) {
            f = ceil(f * m) / m;
        } else if (s.type == JV_STR && s.n == 5
                   && memcmp(s.u.s, "floor", 5) == 0)
        {
            f = floor(f * m) / m;
        } else if (isfinite(f)) {
            /* Python's round(): half-even on the exact binary value,
             * which is what printf's correctly rounded %.*f does */
            char  tmp[400];

            snprintf(tmp, sizeof(tmp), "%.*f", (int) prec, f);
            f = strtod(tmp, NULL);
        }
        *out = jv_float(f);
        return 0;
    }
    return jj_fail(c, -EINVAL, "No filter named '%.*s'.", (int) namelen,
                   name);
}

/* ---- tests ---- */

static const char *const test_names[] = {
    "boolean", "callable", "defined", "divisibleby", "eq", "equalto",
    "escaped", "even", "false", "filter", "float", "ge", "gt",
    "greaterthan", "in", "integer", "iterable", "le", "lessthan", "lower",
    "lt", "mapping", "ne", "none", "number", "odd", "sameas", "sequence",
    "string", "test", "true", "undefined", "upper", "==", "!=", "<", "<=",
    ">", ">=", NULL
};

int
jj_test_exists(const char *name, size_t n)
{
    size_t  i;

    for (i = 0; test_names[i] != NULL; i++) {
        if (name_eq(name, test_names[i], n)) {
            return 1;
        }
    }
    return 0;
}

int
jj_test(jj_ctx_t *c, const char *name, size_t namelen, jv_t v, jv_t *args,
    size_t nargs, int *res)
{
    jv_t  x = nargs ? args[0] : jv_undef(), t;
    int   cmp;

    if (IS("defined")) {
        *res = v.type != JV_UNDEF;
    } else if (IS("undefined")) {
        *res = v.type == JV_UNDEF;
    } else if (IS("none")) {
        *res = v.type == JV_NONE;
    } else if (IS("string")) {
        *res = v.type == JV_STR;
    } else if (IS("mapping")) {
        *res = v.type == JV_DICT;
    } else if (IS("number")) {
        *res = jv_is_num(v);
    } else if (IS("integer")) {
        *res = v.type == JV_INT;
    } else if (IS("float")) {
        *res = v.type == JV_FLOAT;
    } else if (IS("boolean")) {
        *res = v.type == JV_BOOL;
    } else if (IS("true")) {
        *res = v.type == JV_BOOL && v.u.i;
    } else if (IS("false")) {
        *res = v.type == JV_BOOL && !v.u.i;
    } else if (IS("callable")) {
        *res = v.type == JV_FUNC || (v.type == JV_UNDEF && v.flag == 1);
    } else if (IS("iterable")) {
        *res = v.type == JV_STR || v.type == JV_LIST || v.type == JV_DICT
               || v.type == JV_UNDEF;
    } else if (IS("sequence")) {
        *res = v.type == JV_STR || v.type == JV_DICT || v.type == JV_UNDEF
               || (v.type == JV_LIST && v.u.l->kind != JL_GEN
                   && v.u.l->kind != JL_ITEMS && v.u.l->kind != JL_KEYS
                   && v.u.l->kind != JL_VALUES);
    } else if (IS("escaped")) {
        *res = 0;
    } else if (IS("lower") || IS("upper")) {
        if (v.type != JV_STR) {
            *res = 0;
            if (jj_str(c, v, &v) != 0) {
                return -1;
            }
        }
        if (do_case(c, v, IS("lower") ? 0 : 1, &t) != 0) {
            return -1;
        }
        *res = jv_equal(t, v);
        {
            /* Python also wants at least one cased character */
            jv_t  other;

            if (do_case(c, v, IS("lower") ? 1 : 0, &other) != 0) {
                return -1;
            }
            *res = *res && !jv_equal(other, v);
        }
    } else if ((IS("odd") || IS("even") || IS("divisibleby"))
               && v.type == JV_STR)
    {
        /* value % n == k on a str is printf formatting: never equal */
        if (jj_str_format(c, v, IS("divisibleby") ? x : jv_int(2), &t)) {
            return -1;
        }
        *res = 0;
    } else if ((IS("odd") || IS("even")) && v.type == JV_FLOAT) {
        double m = fmod(v.u.f, 2.0);

        *res = (m != 0.0) == IS("odd");     /* value % 2 == 1 / == 0 */
        if (IS("odd")) {
            *res = m == 1.0 || m == -1.0;
        }
    } else if (IS("odd") || IS("even")) {
        if (v.type != JV_INT && v.type != JV_BOOL) {
            return jj_fail(c, -EINVAL, "TypeError: not all arguments "
                           "converted during string formatting");
        }
        *res = (v.u.i % 2 != 0) == IS("odd");
    } else if (IS("divisibleby")) {
        if (!jv_is_num(v) || !jv_is_num(x)) {
            return jj_fail(c, -EINVAL, "TypeError: unsupported operand "
                           "type(s) for %%: '%s' and '%s'", jv_type_name(v),
                           jv_type_name(x));
        }
        if (jv_num(x) == 0) {
            return jj_fail(c, -EINVAL, "ZeroDivisionError: integer division "
                           "or modulo by zero");
        }
        if (v.type != JV_FLOAT && x.type != JV_FLOAT) {
            *res = x.u.i == -1 || v.u.i % x.u.i == 0;
        } else {
            *res = fmod(jv_num(v), jv_num(x)) == 0.0;
        }
    } else if (IS("eq") || IS("equalto") || IS("==")) {
        *res = jv_equal(v, x);
    } else if (IS("ne") || IS("!=")) {
        *res = !jv_equal(v, x);
    } else if (IS("sameas")) {
        if (v.type != x.type) {
            *res = 0;
        } else if (v.type == JV_NONE || v.type == JV_UNDEF) {
            *res = 1;
        } else if (v.type == JV_BOOL || v.type == JV_INT) {
            *res = v.u.i == x.u.i;
        } else if (v.type == JV_STR) {
            *res = v.u.s == x.u.s && v.n == x.n;
        } else {
            *res = v.u.l == x.u.l;
        }
    } else if (IS("in")) {
        return jj_in(c, v, x, res);
    } else if (IS("filter") || IS("test")) {
        *res = v.type == JV_STR && (IS("filter")
                                    ? jj_filter_exists(v.u.s, v.n)
                                    : jj_test_exists(v.u.s, v.n));
    } else {
        if (jj_compare(c, v, x, &cmp) != 0) {
            return -1;
        }
        if (IS("lt") || IS("lessthan") || IS("<")) {
            *res = cmp < 0;
        } else if (IS("le") || IS("<=")) {
            *res = cmp <= 0;
        } else if (IS("gt") || IS("greaterthan") || IS(">")) {
            *res = cmp > 0;
        } else {
            *res = cmp >= 0;
        }
    }
    return 0;
}
