/*
 * Internal interface of the Jinja renderer behind template.h: values and
 * the per-render arena (jinja_value.c), the lexer and parser
 * (jinja_parse.c), the evaluator (jinja_eval.c) and the filters, tests,
 * methods and globals (jinja_builtin.c).
 *
 * Values are small structs passed by value; everything they point to lives
 * in the render's arena and is freed at once when the render ends, so no
 * value is ever freed by hand.  The AST lives in the compile arena owned
 * by the llm_tmpl_t.
 */

#ifndef LLM_JINJA_H
#define LLM_JINJA_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

/* Limits (per render unless noted). */
#define JJ_MAX_DEPTH        200         /* nested macro calls / blocks */
#define JJ_MAX_PARSE_DEPTH  200         /* nested expressions at compile */
#define JJ_MAX_ITERATIONS   1000000     /* loop iterations, all loops */
#define JJ_MAX_OUTPUT       (16u << 20) /* bytes of rendered text */
#define JJ_MAX_MEMORY       (256u << 20) /* arena bytes */
#define JJ_MAX_RANGE        100000      /* as jinja2's sandbox MAX_RANGE */
#define JJ_MAX_JSON_DEPTH   200         /* nesting of the variables */
#define JJ_MAX_REPR_DEPTH   200         /* nesting printed / compared */
#define JJ_MAX_WORK         200000000ull /* evaluation steps + items touched */

/* ---- arena ---- */

typedef struct jj_chunk_s jj_chunk_t;

typedef struct {
    jj_chunk_t  *head;
    size_t       used;       /* bytes handed out, all chunks */
    size_t       limit;      /* 0 = none */
} jj_arena_t;

void *jj_alloc(jj_arena_t *a, size_t n);      /* zeroed, NULL over limit */
void jj_arena_free(jj_arena_t *a);

/* ---- values ---- */

typedef enum {
    JV_UNDEF = 0,
    JV_NONE,
    JV_BOOL,
    JV_INT,
    JV_FLOAT,
    JV_STR,
    JV_LIST,            /* list, tuple, generator, dict_items, range */
    JV_DICT,
    JV_NS,              /* namespace(): a mutable dict with attributes */
    JV_FUNC,
    JV_LOOP
} jv_type_t;

#define JV_MARKUP  2

typedef enum {
    JL_LIST = 0,
    JL_TUPLE,
    JL_GEN,             /* select/map/...: always true, no len, no json */
    JL_ITEMS,           /* dict.items() */
    JL_KEYS,
    JL_VALUES,
    JL_RANGE
} jl_kind_t;

typedef struct jj_list_s jj_list_t;
typedef struct jj_dict_s jj_dict_t;
typedef struct jj_func_s jj_func_t;
typedef struct jj_loop_s jj_loop_t;

typedef struct {
    uint32_t     type;
    uint32_t     flag;       /* UNDEF: 1 = unsafe attribute (sandbox);
                                STR: JV_MARKUP = markupsafe.Markup */
    size_t       n;          /* STR: byte length */
    union {
        int64_t       i;     /* INT, BOOL */
        double        f;
        const char   *s;     /* STR (not NUL-terminated); UNDEF: hint */
        jj_list_t    *l;
        jj_dict_t    *d;     /* DICT, NS */
        jj_func_t    *fn;
        jj_loop_t    *loop;
    } u;
} jv_t;

struct jj_list_s {
    jv_t        *items;
    size_t       n;
    size_t       cap;
    uint32_t     kind;       /* jl_kind_t */
    int64_t      r[3];       /* JL_RANGE: start, stop, step (for repr) */
};

struct jj_dict_s {
    jv_t        *keys;
    jv_t        *vals;
    size_t       n;
    size_t       cap;
};

/* The growable output buffer; bounded by JJ_MAX_OUTPUT. */
typedef struct {
    char        *p;
    size_t       n;
    size_t       cap;
    int          over;       /* 1 output limit, 2 out of memory,
                                3 nested too deeply to print */
} jj_buf_t;

int jj_buf_add(jj_buf_t *b, const char *s, size_t n);
int jj_buf_addc(jj_buf_t *b, char c);
int jj_buf_printf(jj_buf_t *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static inline jv_t jv_undef(void) { jv_t v = { 0 }; return v; }
static inline jv_t jv_none(void) { jv_t v = { 0 }; v.type = JV_NONE;
    return v; }
static inline jv_t jv_bool(int b) { jv_t v = { 0 }; v.type = JV_BOOL;
    v.u.i = b != 0; return v; }
static inline jv_t jv_int(int64_t i) { jv_t v = { 0 }; v.type = JV_INT;
    v.u.i = i; return v; }
static inline jv_t jv_float(double f) { jv_t v = { 0 }; v.type = JV_FLOAT;
    v.u.f = f; return v; }
static inline jv_t jv_strn(const char *s, size_t n) { jv_t v = { 0 };
    v.type = JV_STR; v.u.s = s; v.n = n; return v; }

jv_t jv_str_copy(jj_arena_t *a, const char *s, size_t n);  /* type UNDEF on OOM */
jv_t jv_list_new(jj_arena_t *a, uint32_t kind, size_t cap);
int jv_list_push(jj_arena_t *a, jv_t list, jv_t item);
jv_t jv_dict_new(jj_arena_t *a, uint32_t type);   /* JV_DICT or JV_NS */
int jv_dict_set(jj_arena_t *a, jv_t dict, jv_t key, jv_t val);
int jv_dict_get(jv_t dict, jv_t key, jv_t *val);  /* 1 found, 0 not */
int jv_dict_gets(jv_t dict, const char *key, size_t n, jv_t *val);

int jv_truthy(jv_t v);
int jv_equal(jv_t a, jv_t b);
int jv_is_num(jv_t v);                   /* INT, FLOAT or BOOL */
double jv_num(jv_t v);
const char *jv_type_name(jv_t v);        /* Python's name: 'dict', 'str' */

/* JSON to values; UNDEF on OOM, UNDEF with flag 3 when nested too deep. */
jv_t jv_from_json(jj_arena_t *a, json_t *j, int depth);

/* str(): Python's str() of the value appended to b. */
int jv_str_into(jj_buf_t *b, jv_t v);
/* repr() as Python prints a list element. */
int jv_repr_into(jj_buf_t *b, jv_t v);
/* json.dumps(v, ensure_ascii, indent, separators, sort_keys). */
#define JJ_JSON_SORT_KEYS  1
#define JJ_JSON_ASCII      2
int jv_json_into(jj_buf_t *b, jv_t v, const char *indent, int nindent,
    const char *itemsep, const char *keysep, int flags, int level,
    char *err, size_t errlen);
void jj_float_repr(char *dst, size_t dstlen, double f);

/* UTF-8 helpers. */
size_t jj_utf8_len(const char *s, size_t n);           /* code points */
size_t jj_utf8_next(const char *s, size_t n, size_t i);   /* next index */
uint32_t jj_utf8_decode(const char *s, size_t n, size_t *i);
int jj_utf8_encode(char *dst, uint32_t cp);
int jj_is_space(uint32_t cp);                          /* str.isspace */
uint32_t jj_lower(uint32_t cp);
uint32_t jj_upper(uint32_t cp);

/* ---- AST ---- */

typedef enum {
    /* expressions */
    JN_CONST = 1,
    JN_NAME,
    JN_GETATTR,
    JN_GETITEM,
    JN_SLICE,
    JN_CALL,
    JN_FILTER,
    JN_TEST,
    JN_NEG,
    JN_POS,
    JN_NOT,
    JN_AND,
    JN_OR,
    JN_BINOP,
    JN_COMPARE,
    JN_CONCAT,
    JN_CONDEXPR,
    JN_LIST,
    JN_TUPLE,
    JN_DICT,
    JN_BLOCKVAL,        /* the body of {% filter %} / block set */
    /* statements */
    JN_TEXT,
    JN_OUTPUT,
    JN_FOR,
    JN_IF,
    JN_SET,
    JN_SETBLOCK,
    JN_MACRO,
    JN_CALLBLOCK,
    JN_FILTERBLOCK,
    JN_WITH,
    JN_BREAK,
    JN_CONTINUE
} jn_type_t;

typedef enum {
    JOP_ADD = 1, JOP_SUB, JOP_MUL, JOP_DIV, JOP_FLOORDIV, JOP_MOD, JOP_POW,
    JOP_EQ, JOP_NE, JOP_LT, JOP_LE, JOP_GT, JOP_GE, JOP_IN, JOP_NOTIN
} jop_t;

typedef struct jj_node_s jj_node_t;

struct jj_node_s {
    uint16_t      type;       /* jn_type_t */
    uint16_t      op;         /* BINOP; TEST: 1 = negated */
    uint32_t      line;
    jj_node_t    *a, *b, *c, *d;
    jj_node_t   **kids;       /* body, positional args, items */
    uint32_t      nkids;
    uint32_t      nkids2;
    jj_node_t   **kids2;      /* else body, keyword values, defaults */
    const char  **names;      /* keyword names, macro parameters */
    jj_node_t   **targets;    /* WITH: assignment targets, [nkids2] */
    uint32_t      nnames;
    uint16_t     *ops;        /* COMPARE: one per kids[] after a */
    const char   *name;       /* NAME, GETATTR, FILTER, TEST, MACRO */
    size_t        namelen;
    jv_t          val;        /* CONST, TEXT */
};

typedef struct {
    jj_arena_t    arena;
    jj_node_t    *root;       /* JN_WITH-less body: kids = statements */
} jj_tmpl_t;

int jj_compile(jj_tmpl_t *t, const char *src, size_t len, char *err,
    size_t errlen);

/* ---- evaluation ---- */

typedef struct jj_scope_s jj_scope_t;

typedef struct {
    jj_arena_t    arena;
    jj_buf_t     *out;        /* current output (macros swap it) */
    jj_scope_t   *globals;
    jj_scope_t   *root;
    int           depth;
    uint64_t      iterations;
    uint64_t      work;       /* bounded by JJ_MAX_WORK */
    int64_t       now;        /* strftime_now: epoch seconds, -1 = clock */
    jv_t          blockval;
    int           rc;         /* negative errno once an error is set */
    int           raised;     /* the error came from raise_exception */
    char          err[512];
} jj_ctx_t;

int jj_render(const jj_tmpl_t *t, json_t *vars, int64_t now, char **out,
    size_t *outlen, char *err, size_t errlen);

/* Set the render error once (the first error wins); returns -1. */
int jj_fail(jj_ctx_t *c, int rc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
int jj_oom(jj_ctx_t *c);
/* Account n units of work; fails once the render's budget is spent. */
int jj_work(jj_ctx_t *c, uint64_t n);
int jj_buf_fail(jj_ctx_t *c, const jj_buf_t *b);  /* error for b->over */

/* Builtins (jinja_builtin.c), called by the evaluator. */
int jj_filter(jj_ctx_t *c, const char *name, size_t namelen, jv_t v,
    jv_t *args, size_t nargs, const char **kwn, jv_t *kwv, size_t nkw,
    jv_t *out);
int jj_filter_exists(const char *name, size_t namelen);
int jj_test(jj_ctx_t *c, const char *name, size_t namelen, jv_t v,
    jv_t *args, size_t nargs, int *res);
int jj_test_exists(const char *name, size_t namelen);
int jj_getattr(jj_ctx_t *c, jv_t obj, const char *name, size_t n,
    jv_t *out);
int jj_getitem(jj_ctx_t *c, jv_t obj, jv_t key, jv_t *out);
int jj_call_builtin(jj_ctx_t *c, jj_func_t *fn, jv_t *args, size_t nargs,
    const char **kwn, jv_t *kwv, size_t nkw, jv_t *out);
void jj_add_globals(jj_ctx_t *c, jv_t dict);
int jj_escape(jj_ctx_t *c, jv_t s, jv_t *out);     /* markupsafe.escape */

/* Evaluator services the builtins use. */
int jj_str(jj_ctx_t *c, jv_t v, jv_t *out);         /* str(v) */
int jj_iterate(jj_ctx_t *c, jv_t v, jv_t *list);     /* list(v) */
int jj_compare(jj_ctx_t *c, jv_t a, jv_t b, int *cmp); /* <0, 0, >0 */
int jj_in(jj_ctx_t *c, jv_t needle, jv_t hay, int *res);
int jj_call_value(jj_ctx_t *c, jv_t fn, jv_t *args, size_t nargs,
    const char **kwn, jv_t *kwv, size_t nkw, jv_t *out);
int jj_undef_fail(jj_ctx_t *c, jv_t v);
int jj_str_format(jj_ctx_t *c, jv_t fmt, jv_t args, jv_t *out); /* "%s" % x */

/* Callables. */
typedef enum {
    JF_MACRO = 1,
    JF_BUILTIN,         /* id = global function */
    JF_METHOD,          /* id = method of self */
    JF_CYCLE            /* loop.cycle */
} jf_kind_t;

struct jj_func_s {
    uint32_t          kind;
    uint32_t          id;
    jv_t              self;
    const jj_node_t  *macro;
    jj_scope_t       *scope;     /* where the macro was defined */
    const jj_node_t  *caller;    /* {% call %} body */
    jj_scope_t       *caller_scope;
    const char       *name;
    size_t            namelen;
};

struct jj_loop_s {
    jv_t         items;          /* the (filtered) list */
    size_t       index0;
    int          depth;
};

#endif /* LLM_JINJA_H */
