/*
 * Jinja evaluator: walks the AST with jinja2's scoping (a for-loop
 * iteration, a macro call and a with block each get a fresh scope; if and
 * set do not), Python's operator semantics, and jinja2's default
 * Undefined (prints as "", is false, iterates as empty; using it in
 * arithmetic or taking an attribute of it is an error).
 *
 * Every function returns 0 or -1; on -1 the context holds the first error.
 * Depth, loop iterations, output bytes and arena memory are bounded.
 */

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jinja.h"

#define EXEC_BREAK     1
#define EXEC_CONTINUE  2

struct jj_scope_s {
    jj_scope_t  *parent;
    jv_t         vars;        /* JV_DICT */
};

int
jj_fail(jj_ctx_t *c, int rc, const char *fmt, ...)
{
    va_list  ap;

    if (c->rc != 0) {
        return -1;
    }
    c->rc = rc;
    va_start(ap, fmt);
    vsnprintf(c->err, sizeof(c->err), fmt, ap);
    va_end(ap);
    return -1;
}

int
jj_oom(jj_ctx_t *c)
{
    if (c->out != NULL && c->out->over == 1) {
        return jj_fail(c, -E2BIG, "rendered output exceeds %u bytes",
                       JJ_MAX_OUTPUT);
    }
    return jj_fail(c, -ENOMEM, "template rendering exceeds its memory "
                   "limit (%u MiB)", JJ_MAX_MEMORY >> 20);
}

int
jj_work(jj_ctx_t *c, uint64_t n)
{
    c->work += n;
    if (c->work > JJ_MAX_WORK) {
        return jj_fail(c, -E2BIG, "template rendering exceeds its work "
                       "limit (%llu steps)", (unsigned long long) JJ_MAX_WORK);
    }
    return 0;
}

int
jj_buf_fail(jj_ctx_t *c, const jj_buf_t *b)
{
    if (b->over == 3) {
        return jj_fail(c, -ELOOP, "RecursionError: maximum recursion depth "
                       "exceeded while getting the repr of an object");
    }
    if (b->over == 1) {
        return jj_fail(c, -E2BIG, "rendered output exceeds %u bytes",
                       JJ_MAX_OUTPUT);
    }
    return jj_oom(c);
}

static jv_t
undef_hint(jj_ctx_t *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static jv_t
undef_hint(jj_ctx_t *c, const char *fmt, ...)
{
    char     tmp[256];
    va_list  ap;
    jv_t     v = jv_undef(), s;

    va_start(ap, fmt);
    vsnprintf(tmp, sizeof(tmp), fmt, ap);
    va_end(ap);
    s = jv_str_copy(&c->arena, tmp, strlen(tmp));
    if (s.type == JV_STR) {
        v.u.s = s.u.s;
    }
    return v;
}

int
jj_undef_fail(jj_ctx_t *c, jv_t v)
{
    if (v.flag == 1) {
        return jj_fail(c, -EINVAL, "SecurityError: %s",
                       v.u.s ? v.u.s : "unsafe access");
    }
    return jj_fail(c, -EINVAL, "UndefinedError: %s",
                   v.u.s ? v.u.s : "value is undefined");
}

/* ---- scopes ---- */

static jj_scope_t *
scope_new(jj_ctx_t *c, jj_scope_t *parent)
{
    jj_scope_t  *s;

    s = jj_alloc(&c->arena, sizeof(jj_scope_t));
    if (s == NULL) {
        jj_oom(c);
        return NULL;
    }
    s->parent = parent;
    s->vars = jv_dict_new(&c->arena, JV_DICT);
    if (s->vars.type == JV_UNDEF) {
        jj_oom(c);
        return NULL;
    }
    return s;
}

static int
scope_set(jj_ctx_t *c, jj_scope_t *s, const char *name, size_t n, jv_t v)
{
    if (jv_dict_set(&c->arena, s->vars, jv_strn(name, n), v) != 0) {
        return jj_oom(c);
    }
    return 0;
}

static int
scope_get(jj_scope_t *s, const char *name, size_t n, jv_t *v)
{
    for ( ; s != NULL; s = s->parent) {
        if (jv_dict_gets(s->vars, name, n, v)) {
            return 1;
        }
    }
    return 0;
}

/* ---- conversions ---- */

int
jj_str(jj_ctx_t *c, jv_t v, jv_t *out)
{
    jj_buf_t  b = { 0 };

    if (v.type == JV_STR) {
        *out = v;
        return 0;
    }
    if (jv_str_into(&b, v) != 0) {
        free(b.p);
        return jj_buf_fail(c, &b);
    }
    *out = jv_str_copy(&c->arena, b.p ? b.p : "", b.n);
    free(b.p);
    if (out->type != JV_STR) {
        return jj_oom(c);
    }
    return 0;
}

/* list(v): a JV_LIST (JL_LIST) whose items may be shared with v. */
int
jj_iterate(jj_ctx_t *c, jv_t v, jv_t *list)
{
    jv_t    l;
    size_t  i, j;

    if ((v.type == JV_STR && jj_work(c, v.n) != 0)
        || (v.type == JV_DICT && jj_work(c, v.u.d->n) != 0)
        || (v.type == JV_LIST && jj_work(c, v.u.l->n) != 0))
    {
        return -1;
    }

    switch (v.type) {
    case JV_UNDEF:
        if (v.flag == 1) {
            return jj_undef_fail(c, v);
        }
        *list = jv_list_new(&c->arena, JL_LIST, 0);
        return list->type == JV_LIST ? 0 : jj_oom(c);
    case JV_LIST:
        *list = v;
        return 0;
    case JV_DICT:
        l = jv_list_new(&c->arena, JL_LIST, v.u.d->n);
        if (l.type != JV_LIST) {
            return jj_oom(c);
        }
        for (i = 0; i < v.u.d->n; i++) {
            l.u.l->items[i] = v.u.d->keys[i];
        }
        l.u.l->n = v.u.d->n;
        *list = l;
        return 0;
    case JV_STR:
        l = jv_list_new(&c->arena, JL_LIST, jj_utf8_len(v.u.s, v.n));
        if (l.type != JV_LIST) {
            return jj_oom(c);
        }
        for (i = 0; i < v.n; i = j) {
            j = jj_utf8_next(v.u.s, v.n, i);
            l.u.l->items[l.u.l->n++] = jv_strn(v.u.s + i, j - i);
        }
        *list = l;
        return 0;
    default:
        return jj_fail(c, -EINVAL, "TypeError: '%s' object is not iterable",
                       jv_type_name(v));
    }
}

static int compare_at(jj_ctx_t *c, jv_t a, jv_t b, int *cmp, int level);

int
jj_compare(jj_ctx_t *c, jv_t a, jv_t b, int *cmp)
{
    return compare_at(c, a, b, cmp, 0);
}

static int
compare_at(jj_ctx_t *c, jv_t a, jv_t b, int *cmp, int level)
{
    size_t  i, n;
    int     r;
    double  x, y;

    if (level > JJ_MAX_REPR_DEPTH) {
        return jj_fail(c, -ELOOP, "RecursionError: maximum recursion depth "
                       "exceeded in comparison");
    }

    if (jv_is_num(a) && jv_is_num(b)) {
        if (a.type != JV_FLOAT && b.type != JV_FLOAT) {
            *cmp = a.u.i < b.u.i ? -1 : a.u.i > b.u.i;
        } else {
            x = jv_num(a);
            y = jv_num(b);
            *cmp = x < y ? -1 : x > y;
        }
        return 0;
    }
    if (a.type == JV_STR && b.type == JV_STR) {
        n = a.n < b.n ? a.n : b.n;
        r = memcmp(a.u.s, b.u.s, n);
        *cmp = r ? (r < 0 ? -1 : 1) : (a.n < b.n ? -1 : a.n > b.n);
        return 0;
    }
    if (a.type == JV_LIST && b.type == JV_LIST
        && (a.u.l->kind == JL_LIST || a.u.l->kind == JL_TUPLE)
        && a.u.l->kind == b.u.l->kind)
    {
        n = a.u.l->n < b.u.l->n ? a.u.l->n : b.u.l->n;
        for (i = 0; i < n; i++) {
            if (jv_equal(a.u.l->items[i], b.u.l->items[i])) {
                continue;
            }
            return compare_at(c, a.u.l->items[i], b.u.l->items[i], cmp,
                              level + 1);
        }
        *cmp = a.u.l->n < b.u.l->n ? -1 : a.u.l->n > b.u.l->n;
        return 0;
    }
    if (a.type == JV_UNDEF) {
        return jj_undef_fail(c, a);
    }
    if (b.type == JV_UNDEF) {
        return jj_undef_fail(c, b);
    }
    return jj_fail(c, -EINVAL, "TypeError: '<' not supported between "
                   "instances of '%s' and '%s'", jv_type_name(a),
                   jv_type_name(b));
}

int
jj_in(jj_ctx_t *c, jv_t needle, jv_t hay, int *res)
{
    size_t  i;
    jv_t    x;

    *res = 0;
    switch (hay.type) {
    case JV_STR:
        if (needle.type != JV_STR) {
            return jj_fail(c, -EINVAL, "TypeError: 'in <string>' requires "
                           "string as left operand, not %s",
                           jv_type_name(needle));
        }
        *res = needle.n == 0
               || memmem(hay.u.s, hay.n, needle.u.s, needle.n) != NULL;
        return 0;
    case JV_LIST:
        if (jj_work(c, hay.u.l->n) != 0) {
            return -1;
        }
        for (i = 0; i < hay.u.l->n; i++) {
            if (jv_equal(hay.u.l->items[i], needle)) {
                *res = 1;
                break;
            }
        }
        return 0;
    case JV_DICT:
        *res = jv_dict_get(hay, needle, &x);
        return 0;
    case JV_UNDEF:
        if (hay.flag == 1) {
            return jj_undef_fail(c, hay);
        }
        return 0;
    default:
        return jj_fail(c, -EINVAL, "TypeError: argument of type '%s' is not "
                       "iterable", jv_type_name(hay));
    }
}

/* ---- arithmetic ---- */

static const char *
op_sym(uint32_t op)
{
    switch (op) {
    case JOP_ADD: return "+";
    case JOP_SUB: return "-";
    case JOP_MUL: return "*";
    case JOP_DIV: return "/";
    case JOP_FLOORDIV: return "//";
    case JOP_MOD: return "%";
    case JOP_POW: return "** or pow()";
    default: return "?";
    }
}

static int
seq_concat(jj_ctx_t *c, jv_t a, jv_t b, jv_t *out)
{
    jv_t    l;
    size_t  i;

    l = jv_list_new(&c->arena, a.u.l->kind, a.u.l->n + b.u.l->n);
    if (l.type != JV_LIST) {
        return jj_oom(c);
    }
    for (i = 0; i < a.u.l->n; i++) {
        l.u.l->items[l.u.l->n++] = a.u.l->items[i];
    }
    for (i = 0; i < b.u.l->n; i++) {
        l.u.l->items[l.u.l->n++] = b.u.l->items[i];
    }
    *out = l;
    return 0;
}

static int
seq_repeat(jj_ctx_t *c, jv_t a, int64_t k, jv_t *out)
{
    char    *p;
    jv_t     l;
    int64_t  i;
    size_t   j;

    if (k < 0) {
        k = 0;
    }
    if (a.type == JV_STR) {
        if (a.n && (uint64_t) k > JJ_MAX_OUTPUT / a.n) {
            return jj_fail(c, -E2BIG, "string repetition too large");
        }
        p = jj_alloc(&c->arena, a.n * (size_t) k + 1);
        if (p == NULL) {
            return jj_oom(c);
        }
        for (i = 0; i < k; i++) {
            memcpy(p + (size_t) i * a.n, a.u.s, a.n);
        }
        *out = jv_strn(p, a.n * (size_t) k);
        return 0;
    }
    if (a.u.l->n && (uint64_t) k > JJ_MAX_RANGE / a.u.l->n) {
        return jj_fail(c, -E2BIG, "list repetition too large");
    }
    l = jv_list_new(&c->arena, a.u.l->kind, a.u.l->n * (size_t) k);
    if (l.type != JV_LIST) {
        return jj_oom(c);
    }
    for (i = 0; i < k; i++) {
        for (j = 0; j < a.u.l->n; j++) {
            l.u.l->items[l.u.l->n++] = a.u.l->items[j];
        }
    }
    *out = l;
    return 0;
}

/*
 * Python's printf-style "fmt % args" for the conversions templates use:
 * %s %r %d %i %%; anything else is rejected by name.
 */
int
jj_str_format(jj_ctx_t *c, jv_t fmt, jv_t args, jv_t *out)
{
    jj_buf_t  b = { 0 };
    jv_t      one[1], *items, v;
    size_t    i, n, k = 0;
    int       rc = 0;
    char      conv;

    if (args.type == JV_LIST && args.u.l->kind == JL_TUPLE) {
        items = args.u.l->items;
        n = args.u.l->n;
    } else {
        one[0] = args;
        items = one;
        n = 1;
    }
    for (i = 0; i < fmt.n && rc == 0; i++) {
        if (fmt.u.s[i] != '%') {
            rc = jj_buf_addc(&b, fmt.u.s[i]);
            continue;
        }
        if (++i == fmt.n) {
            free(b.p);
            return jj_fail(c, -EINVAL, "ValueError: incomplete format");
        }
        conv = fmt.u.s[i];
        if (conv == '%') {
            rc = jj_buf_addc(&b, '%');
            continue;
        }
        if (conv != 's' && conv != 'r' && conv != 'd' && conv != 'i') {
            free(b.p);
            return jj_fail(c, -EINVAL, "unsupported construct: %%%c string "
                           "formatting", conv);
        }
        if (k == n) {
            free(b.p);
            return jj_fail(c, -EINVAL, "TypeError: not enough arguments for "
                           "format string");
        }
        v = items[k++];
        if (conv == 'd' || conv == 'i') {
            if (!jv_is_num(v)) {
                free(b.p);
                return jj_fail(c, -EINVAL, "TypeError: %%%c format: a real "
                               "number is required, not %s", conv,
                               jv_type_name(v));
            }
            if (v.type == JV_FLOAT) {
                v = jv_int((int64_t) v.u.f);
            }
            rc = jj_buf_printf(&b, "%lld", (long long) v.u.i);
        } else if (conv == 'r') {
            rc = jv_repr_into(&b, v);
        } else {
            rc = jv_str_into(&b, v);
        }
    }
    /* CPython skips this check when the argument is a mapping, and a
     * list or dict passes its PyMapping_Check */
    if (rc == 0 && k < n && args.type != JV_DICT
        && !(args.type == JV_LIST && args.u.l->kind != JL_TUPLE))
    {
        free(b.p);
        return jj_fail(c, -EINVAL, "TypeError: not all arguments converted "
                       "during string formatting");
    }
    if (rc != 0) {
        free(b.p);
        return jj_buf_fail(c, &b);
    }
    *out = jv_str_copy(&c->arena, b.p ? b.p : "", b.n);
    free(b.p);
    return out->type == JV_STR ? 0 : jj_oom(c);
}

static int
binop(jj_ctx_t *c, uint32_t op, jv_t a, jv_t b, jv_t *out)
{
    int64_t  x, y, r;
    double   f, g;
    char    *p;

    if (a.type == JV_UNDEF) {
        return jj_undef_fail(c, a);
    }
    if (b.type == JV_UNDEF) {
        return jj_undef_fail(c, b);
    }
    if (jv_is_num(a) && jv_is_num(b)) {
        if (a.type != JV_FLOAT && b.type != JV_FLOAT && op != JOP_DIV) {
            x = a.u.i;
            y = b.u.i;
            switch (op) {
            case JOP_ADD:
                if (__builtin_add_overflow(x, y, &r)) {
                    goto overflow;
                }
                break;
            case JOP_SUB:
                if (__builtin_sub_overflow(x, y, &r)) {
                    goto overflow;
                }
                break;
            case JOP_MUL:
                if (__builtin_mul_overflow(x, y, &r)) {
                    goto overflow;
                }
                break;
            case JOP_FLOORDIV:
            case JOP_MOD:
                if (y == 0) {
                    return jj_fail(c, -EINVAL, "ZeroDivisionError: integer "
                                   "division or modulo by zero");
                }
                if (x == INT64_MIN && y == -1) {
                    goto overflow;
                }
                r = x / y;
                if ((x % y != 0) && ((x < 0) != (y < 0))) {
                    r--;
                }
                if (op == JOP_MOD) {
                    r = x - r * y;
                }
                break;
            case JOP_POW:
                if (y < 0) {
                    *out = jv_float(pow((double) x, (double) y));
                    return 0;
                }
                r = 1;
                while (y-- > 0) {
                    if (__builtin_mul_overflow(r, x, &r)) {
                        goto overflow;
                    }
                }
                break;
            default:
                return jj_fail(c, -EINVAL, "bad operator");
            }
            *out = jv_int(r);
            return 0;
        }
        f = jv_num(a);
        g = jv_num(b);
        switch (op) {
        case JOP_ADD: *out = jv_float(f + g); return 0;
        case JOP_SUB: *out = jv_float(f - g); return 0;
        case JOP_MUL: *out = jv_float(f * g); return 0;
        case JOP_DIV:
            if (g == 0) {
                return jj_fail(c, -EINVAL, "ZeroDivisionError: division by "
                               "zero");
            }
            *out = jv_float(f / g);
            return 0;
        case JOP_FLOORDIV:
        case JOP_MOD:
            if (g == 0) {
                return jj_fail(c, -EINVAL, "ZeroDivisionError: float "
                               "divmod()");
            }
            if (op == JOP_FLOORDIV) {
                *out = jv_float(floor(f / g));
            } else {
                double m = fmod(f, g);

                if (m != 0 && ((m < 0) != (g < 0))) {
                    m += g;
                }
                *out = jv_float(m);
            }
            return 0;
        case JOP_POW:
            *out = jv_float(pow(f, g));
            return 0;
        default:
            return jj_fail(c, -EINVAL, "bad operator");
        }
    }
    if (op == JOP_ADD && a.type == JV_STR && b.type == JV_STR) {
        int markup = a.flag == JV_MARKUP || b.flag == JV_MARKUP;

        /* Markup + str escapes the str (markupsafe), giving Markup */
        if (markup && a.flag != JV_MARKUP && jj_escape(c, a, &a) != 0) {
            return -1;
        }
        if (markup && b.flag != JV_MARKUP && jj_escape(c, b, &b) != 0) {
            return -1;
        }
        p = jj_alloc(&c->arena, a.n + b.n + 1);
        if (p == NULL) {
            return jj_oom(c);
        }
        memcpy(p, a.u.s, a.n);
        memcpy(p + a.n, b.u.s, b.n);
        *out = jv_strn(p, a.n + b.n);
        out->flag = markup ? JV_MARKUP : 0;
        return 0;
    }
    if (op == JOP_ADD && a.type == JV_LIST && b.type == JV_LIST
        && (a.u.l->kind == JL_LIST || a.u.l->kind == JL_TUPLE)
        && a.u.l->kind == b.u.l->kind)
    {
        return seq_concat(c, a, b, out);
    }
    if (op == JOP_ADD && (a.type == JV_STR || a.type == JV_LIST)) {
        return jj_fail(c, -EINVAL, "TypeError: can only concatenate %s (not "
                       "\"%s\") to %s", jv_type_name(a), jv_type_name(b),
                       jv_type_name(a));
    }
    if (op == JOP_MUL) {
        if ((a.type == JV_STR || (a.type == JV_LIST
                                  && a.u.l->kind <= JL_TUPLE))
            && (b.type == JV_INT || b.type == JV_BOOL))
        {
            return seq_repeat(c, a, b.u.i, out);
        }
        if ((b.type == JV_STR || (b.type == JV_LIST
                                  && b.u.l->kind <= JL_TUPLE))
            && (a.type == JV_INT || a.type == JV_BOOL))
        {
            return seq_repeat(c, b, a.u.i, out);
        }
    }
    if (op == JOP_MOD && a.type == JV_STR) {
        return jj_str_format(c, a, b, out);
    }
    return jj_fail(c, -EINVAL, "TypeError: unsupported operand type(s) for "
                   "%s: '%s' and '%s'", op_sym(op), jv_type_name(a),
                   jv_type_name(b));

overflow:
    return jj_fail(c, -ERANGE, "integer overflow in template arithmetic");
}

/* ---- evaluation ---- */

static int eval(jj_ctx_t *c, jj_scope_t *s, const jj_node_t *n, jv_t *out);
static int exec_body(jj_ctx_t *c, jj_scope_t *s, jj_node_t **kids,
    uint32_t n);

static int
eval_args(jj_ctx_t *c, jj_scope_t *s, const jj_node_t *n, jv_t **args,
    jv_t **kwv)
{
    uint32_t  i;

    *args = NULL;
    *kwv = NULL;
    if (n->nkids) {
        *args = jj_alloc(&c->arena, n->nkids * sizeof(jv_t));
        if (*args == NULL) {
            return jj_oom(c);
        }
        for (i = 0; i < n->nkids; i++) {
            if (eval(c, s, n->kids[i], &(*args)[i]) != 0) {
                return -1;
            }
        }
    }
    if (n->nkids2) {
        *kwv = jj_alloc(&c->arena, n->nkids2 * sizeof(jv_t));
        if (*kwv == NULL) {
            return jj_oom(c);
        }
        for (i = 0; i < n->nkids2; i++) {
            if (eval(c, s, n->kids2[i], &(*kwv)[i]) != 0) {
                return -1;
            }
        }
    }
    return 0;
}

/* Render a body into a fresh buffer, returning it as a string value. */
static int
capture(jj_ctx_t *c, jj_scope_t *s, jj_node_t **kids, uint32_t nkids,
    jv_t *out)
{
    jj_buf_t  b = { 0 }, *saved = c->out;
    int       rc;

    c->out = &b;
    rc = exec_body(c, s, kids, nkids);
    c->out = saved;
    if (b.over) {
        free(b.p);
        return jj_buf_fail(c, &b);
    }
    if (rc != 0) {
        /* an error, or break / continue leaving the block unfinished */
        free(b.p);
        return rc;
    }
    *out = jv_str_copy(&c->arena, b.p ? b.p : "", b.n);
    free(b.p);
    return out->type == JV_STR ? 0 : jj_oom(c);
}

static int
call_macro(jj_ctx_t *c, jj_func_t *fn, jv_t *args, size_t nargs,
    const char **kwn, jv_t *kwv, size_t nkw, jv_t *out)
{
    const jj_node_t  *m = fn->macro;
    jj_scope_t       *s;
    jv_t              v, extra, kwargs;
    size_t            i, k;
    int               found, rc;

    if (c->depth >= JJ_MAX_DEPTH) {
        return jj_fail(c, -ELOOP, "maximum recursion depth (%d) exceeded in "
                       "macro '%.*s'", JJ_MAX_DEPTH, (int) fn->namelen,
                       fn->name);
    }
    if (nargs > m->nnames && !(m->op & 1)) {
        return jj_fail(c, -EINVAL, "TypeError: macro '%.*s' takes not more "
                       "than %u argument(s)", (int) fn->namelen, fn->name,
                       m->nnames);
    }
    s = scope_new(c, fn->scope);
    if (s == NULL) {
        return -1;
    }
    kwargs = jv_dict_new(&c->arena, JV_DICT);
    extra = jv_list_new(&c->arena, JL_TUPLE, 0);
    if (kwargs.type == JV_UNDEF || extra.type == JV_UNDEF) {
        return jj_oom(c);
    }
    for (k = 0; k < nkw; k++) {
        found = 0;
        for (i = 0; i < m->nnames; i++) {
            if (strcmp(kwn[k], m->names[i]) == 0) {
                found = 1;
                if (i < nargs) {
                    return jj_fail(c, -EINVAL, "TypeError: macro '%.*s' got "
                                   "multiple values for argument '%s'",
                                   (int) fn->namelen, fn->name, kwn[k]);
                }
            }
        }
        if (!found) {
            if (!(m->op & 2)) {
                return jj_fail(c, -EINVAL, "TypeError: macro '%.*s' takes "
                               "no keyword argument '%s'", (int) fn->namelen,
                               fn->name, kwn[k]);
            }
            if (jv_dict_set(&c->arena, kwargs,
                            jv_strn(kwn[k], strlen(kwn[k])), kwv[k]) != 0)
            {
                return jj_oom(c);
            }
        }
    }
    for (i = 0; i < m->nnames; i++) {
        if (i < nargs) {
            v = args[i];
        } else {
            found = 0;
            for (k = 0; k < nkw; k++) {
                if (strcmp(kwn[k], m->names[i]) == 0) {
                    v = kwv[k];
                    found = 1;
                }
            }
            if (!found) {
                if (m->kids2[i] != NULL) {
                    if (eval(c, s, m->kids2[i], &v) != 0) {
                        return -1;
                    }
                } else {
                    v = undef_hint(c, "parameter '%s' was not provided",
                                   m->names[i]);
                }
            }
        }
        if (scope_set(c, s, m->names[i], strlen(m->names[i]), v) != 0) {
            return -1;
        }
    }
    for (i = m->nnames; i < nargs; i++) {
        if (jv_list_push(&c->arena, extra, args[i]) != 0) {
            return jj_oom(c);
        }
    }
    if (scope_set(c, s, "varargs", 7, extra) != 0
        || scope_set(c, s, "kwargs", 6, kwargs) != 0)
    {
        return -1;
    }
    if (fn->caller != NULL) {
        jj_func_t  *cf = jj_alloc(&c->arena, sizeof(jj_func_t));

        if (cf == NULL) {
            return jj_oom(c);
        }
        cf->kind = JF_MACRO;
        cf->macro = fn->caller;
        cf->scope = fn->caller_scope;
        cf->name = "caller";
        cf->namelen = 6;
        v.type = JV_FUNC;
        v.flag = 0;
        v.u.fn = cf;
        if (scope_set(c, s, "caller", 6, v) != 0) {
            return -1;
        }
    }
    c->depth++;
    rc = capture(c, s, m->kids, m->nkids, out);
    c->depth--;
    if (rc > 0) {
        /* {% break %} in a macro body outside any loop of its own */
        return jj_fail(c, -EINVAL, "TemplateSyntaxError: loop control "
                       "outside of a loop in macro '%.*s'",
                       (int) fn->namelen, fn->name);
    }
    return rc;
}

int
jj_call_value(jj_ctx_t *c, jv_t fn, jv_t *args, size_t nargs,
    const char **kwn, jv_t *kwv, size_t nkw, jv_t *out)
{
    if (fn.type == JV_UNDEF) {
        return jj_undef_fail(c, fn);
    }
    if (fn.type != JV_FUNC) {
        return jj_fail(c, -EINVAL, "TypeError: '%s' object is not callable",
                       jv_type_name(fn));
    }
    if (fn.u.fn->kind == JF_MACRO) {
        return call_macro(c, fn.u.fn, args, nargs, kwn, kwv, nkw, out);
    }
    return jj_call_builtin(c, fn.u.fn, args, nargs, kwn, kwv, nkw, out);
}

static int
slice_index(int64_t len, int has, jv_t v, int64_t step, int start,
    int64_t *out, jj_ctx_t *c)
{
    int64_t  i;

    if (!has || v.type == JV_NONE) {
        if (step > 0) {
            *out = start ? 0 : len;
        } else {
            *out = start ? len - 1 : -1;
        }
        return 0;
    }
    if (v.type != JV_INT && v.type != JV_BOOL) {
        return jj_fail(c, -EINVAL, "TypeError: slice indices must be "
                       "integers or None");
    }
    i = v.u.i;
    if (i < 0) {
        i += len;
        if (i < 0) {
            i = step > 0 ? 0 : -1;
        }
    } else if (i >= len) {
        i = step > 0 ? len : len - 1;
    }
    *out = i;
    return 0;
}

static int
eval_slice(jj_ctx_t *c, jj_scope_t *s, const jj_node_t *n, jv_t *out)
{
    jv_t      obj, v[3] = { jv_none(), jv_none(), jv_none() }, l;
    int64_t   len, step = 1, start = 0, stop = 0, i;
    size_t   *offs = NULL, k, j;
    char     *p;
    int       ascii = 1;

    if (eval(c, s, n->a, &obj) != 0
        || (n->b && eval(c, s, n->b, &v[0]) != 0)
        || (n->c && eval(c, s, n->c, &v[1]) != 0)
        || (n->d && eval(c, s, n->d, &v[2]) != 0))
    {
        return -1;
    }
    if (obj.type == JV_UNDEF) {
        return jj_undef_fail(c, obj);
    }
    if (v[2].type != JV_NONE) {
        if (v[2].type != JV_INT) {
            return jj_fail(c, -EINVAL, "TypeError: slice indices must be "
                           "integers or None");
        }
        step = v[2].u.i;
        if (step == 0) {
            return jj_fail(c, -EINVAL, "ValueError: slice step cannot be "
                           "zero");
        }
    }
    if (obj.type == JV_STR) {
        for (k = 0; k < obj.n; k++) {
            if ((unsigned char) obj.u.s[k] >= 0x80) {
                ascii = 0;
                break;
            }
        }
        len = (int64_t) (ascii ? obj.n : jj_utf8_len(obj.u.s, obj.n));
        if (!ascii) {
            offs = jj_alloc(&c->arena, ((size_t) len + 1) * sizeof(size_t));
            if (offs == NULL) {
                return jj_oom(c);
            }
            for (k = 0, j = 0; j < obj.n; k++) {
                offs[k] = j;
                j = jj_utf8_next(obj.u.s, obj.n, j);
            }
            offs[k] = obj.n;
        }
    } else if (obj.type == JV_LIST) {
        len = (int64_t) obj.u.l->n;
    } else {
        return jj_fail(c, -EINVAL, "TypeError: '%s' object is not "
                       "subscriptable", jv_type_name(obj));
    }
    if (slice_index(len, n->b != NULL, v[0], step, 1, &start, c) != 0
        || slice_index(len, n->c != NULL, v[1], step, 0, &stop, c) != 0)
    {
        return -1;
    }
    if (obj.type == JV_STR) {
        p = jj_alloc(&c->arena, obj.n + 1);
        if (p == NULL) {
            return jj_oom(c);
        }
        k = 0;
        for (i = start; step > 0 ? i < stop : i > stop; i += step) {
            if (ascii) {
                p[k++] = obj.u.s[i];
            } else {
                memcpy(p + k, obj.u.s + offs[i], offs[i + 1] - offs[i]);
                k += offs[i + 1] - offs[i];
            }
        }
        *out = jv_strn(p, k);
        return 0;
    }
    l = jv_list_new(&c->arena, obj.u.l->kind == JL_TUPLE ? JL_TUPLE
                    : JL_LIST, 0);
    if (l.type != JV_LIST) {
        return jj_oom(c);
    }
    for (i = start; step > 0 ? i < stop : i > stop; i += step) {
        if (jv_list_push(&c->arena, l, obj.u.l->items[i]) != 0) {
            return jj_oom(c);
        }
    }
    *out = l;
    return 0;
}

static int
eval(jj_ctx_t *c, jj_scope_t *s, const jj_node_t *n, jv_t *out)
{
    jv_t        a, b, *args, *kwv, v;
    uint32_t    i;
    int         r, res;
    jj_buf_t    buf = { 0 };

    if (jj_work(c, 1) != 0) {
        return -1;
    }

    switch (n->type) {
    case JN_CONST:
        *out = n->val;
        return 0;

    case JN_NAME:
        if (!scope_get(s, n->name, n->namelen, out)) {
            *out = undef_hint(c, "'%s' is undefined", n->name);
        }
        return 0;

    case JN_BLOCKVAL:
        *out = c->blockval;
        return 0;

    case JN_GETATTR:
        if (eval(c, s, n->a, &a) != 0) {
            return -1;
        }
        if (a.type == JV_UNDEF) {
            return jj_undef_fail(c, a);
        }
        return jj_getattr(c, a, n->name, n->namelen, out);

    case JN_GETITEM:
        if (eval(c, s, n->a, &a) != 0 || eval(c, s, n->b, &b) != 0) {
            return -1;
        }
        if (a.type == JV_UNDEF) {
            return jj_undef_fail(c, a);
        }
        return jj_getitem(c, a, b, out);

    case JN_SLICE:
        return eval_slice(c, s, n, out);

    case JN_CALL:
        if (eval(c, s, n->a, &a) != 0 || eval_args(c, s, n, &args, &kwv)) {
            return -1;
        }
        return jj_call_value(c, a, args, n->nkids, n->names, kwv, n->nkids2,
                             out);

    case JN_FILTER:
        if (n->op == 1) {
            return jj_fail(c, -EINVAL, "TemplateRuntimeError: No filter "
                           "named '%s' found. (line %u)", n->name, n->line);
        }
        if (eval(c, s, n->a, &a) != 0 || eval_args(c, s, n, &args, &kwv)) {
            return -1;
        }
        return jj_filter(c, n->name, n->namelen, a, args, n->nkids,
                         n->names, kwv, n->nkids2, out);

    case JN_TEST:
        if (n->op & 2) {
            return jj_fail(c, -EINVAL, "TemplateRuntimeError: No test "
                           "named '%s' found. (line %u)", n->name, n->line);
        }
        if (eval(c, s, n->a, &a) != 0 || eval_args(c, s, n, &args, &kwv)) {
            return -1;
        }
        if (jj_test(c, n->name, n->namelen, a, args, n->nkids, &res) != 0) {
            return -1;
        }
        *out = jv_bool((n->op & 1) ? !res : res);
        return 0;

    case JN_NEG:
    case JN_POS:
        if (eval(c, s, n->a, &a) != 0) {
            return -1;
        }
        if (a.type == JV_UNDEF) {
            return jj_undef_fail(c, a);
        }
        if (!jv_is_num(a)) {
            return jj_fail(c, -EINVAL, "TypeError: bad operand type for "
                           "unary %c: '%s'", n->type == JN_NEG ? '-' : '+',
                           jv_type_name(a));
        }
        if (n->type == JN_POS) {
            *out = a.type == JV_BOOL ? jv_int(a.u.i) : a;
        } else if (a.type == JV_FLOAT) {
            *out = jv_float(-a.u.f);
        } else if (a.u.i == INT64_MIN) {
            return jj_fail(c, -ERANGE, "integer overflow");
        } else {
            *out = jv_int(-a.u.i);
        }
        return 0;

    case JN_NOT:
        if (eval(c, s, n->a, &a) != 0) {
            return -1;
        }
        *out = jv_bool(!jv_truthy(a));
        return 0;

    case JN_AND:
    case JN_OR:
        if (eval(c, s, n->a, &a) != 0) {
            return -1;
        }
        if ((n->type == JN_AND) != jv_truthy(a)) {
            *out = a;
            return 0;
        }
        return eval(c, s, n->b, out);

    case JN_BINOP:
        if (eval(c, s, n->a, &a) != 0 || eval(c, s, n->b, &b) != 0) {
            return -1;
        }
        return binop(c, n->op, a, b, out);

    case JN_COMPARE:
        if (eval(c, s, n->a, &a) != 0) {
            return -1;
        }
        for (i = 0; i < n->nkids; i++) {
            if (eval(c, s, n->kids[i], &b) != 0) {
                return -1;
            }
            switch (n->ops[i]) {
            case JOP_EQ: res = jv_equal(a, b); break;
            case JOP_NE: res = !jv_equal(a, b); break;
            case JOP_IN:
            case JOP_NOTIN:
                if (jj_in(c, a, b, &res) != 0) {
                    return -1;
                }
                if (n->ops[i] == JOP_NOTIN) {
                    res = !res;
                }
                break;
            default:
                if (jj_compare(c, a, b, &r) != 0) {
                    return -1;
                }
                res = n->ops[i] == JOP_LT ? r < 0 : n->ops[i] == JOP_LE
                      ? r <= 0 : n->ops[i] == JOP_GT ? r > 0 : r >= 0;
            }
            if (!res) {
                *out = jv_bool(0);
                return 0;
            }
            a = b;
        }
        *out = jv_bool(1);
        return 0;

    case JN_CONCAT:
        for (i = 0; i < n->nkids; i++) {
            if (eval(c, s, n->kids[i], &a) != 0) {
                free(buf.p);
                return -1;
            }
            if (jv_str_into(&buf, a) != 0) {
                free(buf.p);
                return jj_buf_fail(c, &buf);
            }
        }
        *out = jv_str_copy(&c->arena, buf.p ? buf.p : "", buf.n);
        free(buf.p);
        return out->type == JV_STR ? 0 : jj_oom(c);

    case JN_CONDEXPR:
        if (eval(c, s, n->a, &a) != 0) {
            return -1;
        }
        if (jv_truthy(a)) {
            return eval(c, s, n->b, out);
        }
        if (n->c == NULL) {
            *out = undef_hint(c, "the inline if-expression on line %u "
                              "evaluated to false and no else section was "
                              "defined.", n->line);
            return 0;
        }
        return eval(c, s, n->c, out);

    case JN_LIST:
    case JN_TUPLE:
        v = jv_list_new(&c->arena, n->type == JN_LIST ? JL_LIST : JL_TUPLE,
                        n->nkids);
        if (v.type != JV_LIST) {
            return jj_oom(c);
        }
        for (i = 0; i < n->nkids; i++) {
            if (eval(c, s, n->kids[i], &v.u.l->items[i]) != 0) {
                return -1;
            }
            v.u.l->n++;
        }
        *out = v;
        return 0;

    case JN_DICT:
        v = jv_dict_new(&c->arena, JV_DICT);
        if (v.type != JV_DICT) {
            return jj_oom(c);
        }
        for (i = 0; i + 1 < n->nkids; i += 2) {
            if (eval(c, s, n->kids[i], &a) != 0
                || eval(c, s, n->kids[i + 1], &b) != 0)
            {
                return -1;
            }
            if (a.type == JV_LIST && a.u.l->kind != JL_TUPLE) {
                return jj_fail(c, -EINVAL, "TypeError: unhashable type: "
                               "'%s'", jv_type_name(a));
            }
            if (a.type == JV_DICT || a.type == JV_NS) {
                return jj_fail(c, -EINVAL, "TypeError: unhashable type: "
                               "'dict'");
            }
            if (jv_dict_set(&c->arena, v, a, b) != 0) {
                return jj_oom(c);
            }
        }
        *out = v;
        return 0;

    default:
        return jj_fail(c, -EINVAL, "internal error: node %u is not an "
                       "expression (line %u)", n->type, n->line);
    }
}

/* ---- statements ---- */

static int
assign(jj_ctx_t *c, jj_scope_t *s, const jj_node_t *target, jv_t v)
{
    jv_t      ns, l;
    uint32_t  i;

    switch (target->type) {
    case JN_NAME:
        return scope_set(c, s, target->name, target->namelen, v);
    case JN_GETATTR:
        if (!scope_get(s, target->a->name, target->a->namelen, &ns)
            || ns.type != JV_NS)
        {
            return jj_fail(c, -EINVAL, "TemplateRuntimeError: cannot assign "
                           "attribute on non-namespace object (line %u)",
                           target->line);
        }
        if (jv_dict_set(&c->arena, ns, jv_strn(target->name,
                        target->namelen), v) != 0)
        {
            return jj_oom(c);
        }
        return 0;
    case JN_TUPLE:
        if (jj_iterate(c, v, &l) != 0) {
            return -1;
        }
        if (l.u.l->n != target->nkids) {
            return jj_fail(c, -EINVAL, "ValueError: %s values to unpack "
                           "(expected %u, got %zu)",
                           l.u.l->n > target->nkids ? "too many"
                           : "not enough", target->nkids, l.u.l->n);
        }
        for (i = 0; i < target->nkids; i++) {
            if (assign(c, s, target->kids[i], l.u.l->items[i]) != 0) {
                return -1;
            }
        }
        return 0;
    default:
        return jj_fail(c, -EINVAL, "can't assign (line %u)", target->line);
    }
}

static int
exec_for(jj_ctx_t *c, jj_scope_t *s, const jj_node_t *n)
{
    jv_t          it, items, lv, cond;
    jj_scope_t   *is;
    jj_loop_t    *loop;
    size_t        i, completed = 0;
    int           rc;

    if (eval(c, s, n->b, &it) != 0 || jj_iterate(c, it, &items) != 0) {
        return -1;
    }
    if (n->c != NULL) {
        /* "for x in xs if cond": filter first, loop.length counts kept */
        jv_t  kept = jv_list_new(&c->arena, JL_LIST, 0);

        if (kept.type != JV_LIST) {
            return jj_oom(c);
        }
        for (i = 0; i < items.u.l->n; i++) {
            if (++c->iterations > JJ_MAX_ITERATIONS) {
                return jj_fail(c, -E2BIG, "more than %u loop iterations",
                               JJ_MAX_ITERATIONS);
            }
            is = scope_new(c, s);
            if (is == NULL || assign(c, is, n->a, items.u.l->items[i]) != 0
                || eval(c, is, n->c, &cond) != 0)
            {
                return -1;
            }
            if (jv_truthy(cond)
                && jv_list_push(&c->arena, kept, items.u.l->items[i]) != 0)
            {
                return jj_oom(c);
            }
        }
        items = kept;
    } else if (items.u.l->kind == JL_GEN) {
        items.u.l->kind = JL_LIST;      /* consumed */
    }
    if (items.u.l->n == 0) {
        goto else_body;
    }
    loop = jj_alloc(&c->arena, sizeof(jj_loop_t));
    if (loop == NULL) {
        return jj_oom(c);
    }
    loop->items = items;
    lv.type = JV_LOOP;
    lv.flag = 0;
    lv.n = 0;
    lv.u.loop = loop;
    is = scope_new(c, s);
    if (is == NULL) {
        return -1;
    }
    for (i = 0; i < items.u.l->n; i++) {
        if (++c->iterations > JJ_MAX_ITERATIONS) {
            return jj_fail(c, -E2BIG, "more than %u loop iterations",
                           JJ_MAX_ITERATIONS);
        }
        loop->index0 = i;
        /* a fresh scope per iteration; its storage is reused */
        is->vars.u.d->n = 0;
        if (assign(c, is, n->a, items.u.l->items[i]) != 0
            || scope_set(c, is, "loop", 4, lv) != 0)
        {
            return -1;
        }
        rc = exec_body(c, is, n->kids, n->nkids);
        if (rc < 0) {
            return -1;
        }
        if (rc == EXEC_BREAK) {
            break;
        }
        completed += rc == 0;
    }
    if (completed || n->nkids2 == 0) {
        return 0;
    }

else_body:
    /*
     * jinja2 runs the else block unless some iteration reached the end of
     * the body: an empty loop, and also one whose every iteration left by
     * break or continue (its iteration flag is reset at the body's end).
     * A break or continue in the else block belongs to an outer loop.
     */
    is = scope_new(c, s);
    if (is == NULL) {
        return -1;
    }
    return exec_body(c, is, n->kids2, n->nkids2);
}

static int
apply_block_filter(jj_ctx_t *c, jj_scope_t *s, const jj_node_t *chain,
    jv_t v, jv_t *out)
{
    jv_t  saved = c->blockval;
    int   rc;

    c->blockval = v;
    rc = eval(c, s, chain, out);
    c->blockval = saved;
    return rc;
}

static int
exec_node(jj_ctx_t *c, jj_scope_t *s, const jj_node_t *n)
{
    jv_t          v, w;
    jj_func_t    *fn;
    jj_scope_t   *ws;
    uint32_t      i;
    int           rc;

    switch (n->type) {
    case JN_TEXT:
        if (jj_buf_add(c->out, n->val.u.s, n->val.n) != 0) {
            return jj_oom(c);
        }
        return 0;

    case JN_OUTPUT:
        if (eval(c, s, n->a, &v) != 0) {
            return -1;
        }
        if (jv_str_into(c->out, v) != 0) {
            return jj_buf_fail(c, c->out);
        }
        return 0;

    case JN_IF:
        if (eval(c, s, n->a, &v) != 0) {
            return -1;
        }
        if (jv_truthy(v)) {
            return exec_body(c, s, n->kids, n->nkids);
        }
        return exec_body(c, s, n->kids2, n->nkids2);

    case JN_FOR:
        return exec_for(c, s, n);

    case JN_SET:
        if (eval(c, s, n->b, &v) != 0) {
            return -1;
        }
        return assign(c, s, n->a, v);

    case JN_SETBLOCK:
        /* the body runs in an inner scope (jinja2's frame.inner()) */
        ws = scope_new(c, s);
        if (ws == NULL) {
            return -1;
        }
        rc = capture(c, ws, n->kids, n->nkids, &v);
        if (rc != 0) {
            return rc;
        }
        if (n->c != NULL) {
            if (apply_block_filter(c, s, n->c, v, &w) != 0) {
                return -1;
            }
            v = w;
        }
        return assign(c, s, n->a, v);

    case JN_MACRO:
        fn = jj_alloc(&c->arena, sizeof(jj_func_t));
        if (fn == NULL) {
            return jj_oom(c);
        }
        fn->kind = JF_MACRO;
        fn->macro = n;
        fn->scope = s;
        fn->name = n->name;
        fn->namelen = n->namelen;
        v.type = JV_FUNC;
        v.flag = 0;
        v.n = 0;
        v.u.fn = fn;
        return scope_set(c, s, n->name, n->namelen, v);

    case JN_CALLBLOCK: {
        const jj_node_t  *call = n->a;
        jv_t              callee, *args, *kwv;
        jj_func_t        *copy;

        if (eval(c, s, call->a, &callee) != 0
            || eval_args(c, s, call, &args, &kwv) != 0)
        {
            return -1;
        }
        if (callee.type != JV_FUNC || callee.u.fn->kind != JF_MACRO) {
            return jj_fail(c, -EINVAL, "{%% call %%} needs a macro (line "
                           "%u)", n->line);
        }
        copy = jj_alloc(&c->arena, sizeof(jj_func_t));
        if (copy == NULL) {
            return jj_oom(c);
        }
        *copy = *callee.u.fn;
        copy->caller = n;
        copy->caller_scope = s;
        callee.u.fn = copy;
        if (jj_call_value(c, callee, args, call->nkids, call->names, kwv,
                          call->nkids2, &v) != 0)
        {
            return -1;
        }
        return jv_str_into(c->out, v) != 0 ? jj_buf_fail(c, c->out) : 0;
    }

    case JN_FILTERBLOCK:
        ws = scope_new(c, s);
        if (ws == NULL) {
            return -1;
        }
        rc = capture(c, ws, n->kids, n->nkids, &v);
        if (rc != 0) {
            return rc;
        }
        if (apply_block_filter(c, s, n->c, v, &w) != 0) {
            return -1;
        }
        return jv_str_into(c->out, w) != 0 ? jj_buf_fail(c, c->out) : 0;

    case JN_WITH:
        ws = scope_new(c, s);
        if (ws == NULL) {
            return -1;
        }
        for (i = 0; i < n->nkids2; i++) {
            if (eval(c, s, n->kids2[i], &v) != 0
                || assign(c, ws, n->targets[i], v) != 0)
            {
                return -1;
            }
        }
        rc = exec_body(c, ws, n->kids, n->nkids);
        return rc;

    case JN_BREAK:
        return EXEC_BREAK;

    case JN_CONTINUE:
        return EXEC_CONTINUE;

    default:
        return jj_fail(c, -EINVAL, "internal error: node %u is not a "
                       "statement (line %u)", n->type, n->line);
    }
}

static int
exec_body(jj_ctx_t *c, jj_scope_t *s, jj_node_t **kids, uint32_t n)
{
    uint32_t  i;
    int       rc;

    if (c->depth >= JJ_MAX_DEPTH) {
        return jj_fail(c, -ELOOP, "maximum recursion depth exceeded: "
                       "template nesting deeper than %d", JJ_MAX_DEPTH);
    }
    c->depth++;
    for (i = 0; i < n; i++) {
        rc = exec_node(c, s, kids[i]);
        if (rc != 0) {
            c->depth--;
            return rc;
        }
    }
    c->depth--;
    return 0;
}

/*
 * Render t with vars (a JSON object; its keys become template variables).
 * now is the epoch second strftime_now() formats, or -1 for the clock.
 */
int
jj_render(const jj_tmpl_t *t, json_t *vars, int64_t now, char **out,
    size_t *outlen, char *err, size_t errlen)
{
    jj_ctx_t     *c;
    jj_buf_t      buf = { 0 };
    const char   *k;
    json_t       *x;
    jv_t          v, w;
    int           rc;

    *out = NULL;
    if (outlen) {
        *outlen = 0;
    }
    c = calloc(1, sizeof(jj_ctx_t));
    if (c == NULL) {
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    c->arena.limit = JJ_MAX_MEMORY;
    c->out = &buf;
    c->now = now;
    c->globals = scope_new(c, NULL);
    c->root = c->globals ? scope_new(c, c->globals) : NULL;
    if (c->root == NULL) {
        goto done;
    }
    jj_add_globals(c, c->globals->vars);
    if (vars != NULL && json_is_object(vars)) {
        json_object_foreach(vars, k, x) {
            v = jv_from_json(&c->arena, x, 0);
            w = jv_str_copy(&c->arena, k, strlen(k));
            if (v.type == JV_UNDEF && v.flag == 3) {
                jj_fail(c, -EINVAL, "template variable '%s' is nested deeper "
                        "than %d levels", k, JJ_MAX_JSON_DEPTH);
                goto done;
            }
            if (v.type == JV_UNDEF || w.type != JV_STR
                || jv_dict_set(&c->arena, c->globals->vars, w, v) != 0)
            {
                jj_oom(c);
                goto done;
            }
        }
    }
    rc = exec_body(c, c->root, t->root->kids, t->root->nkids);
    if (rc < 0 && c->rc == 0) {
        jj_oom(c);
    }

done:
    rc = c->rc;
    if (rc == 0 && buf.over) {
        jj_oom(c);
        rc = c->rc;
    }
    if (rc == 0 && c->root == NULL) {
        rc = -ENOMEM;
        snprintf(c->err, sizeof(c->err), "out of memory");
    }
    if (rc != 0) {
        snprintf(err, errlen, "%s", c->err);
        free(buf.p);
    } else {
        if (buf.p == NULL) {
            buf.p = calloc(1, 1);
            if (buf.p == NULL) {
                rc = -ENOMEM;
                snprintf(err, errlen, "out of memory");
            }
        }
        *out = buf.p;
        if (outlen) {
            *outlen = buf.n;
        }
    }
    jj_arena_free(&c->arena);
    free(c);
    return rc;
}
