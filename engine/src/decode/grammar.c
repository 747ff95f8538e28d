/*
 * Constrained decoding.  See grammar.h for the contract and
 * docs/CONSTRAINED.md for the design.
 *
 * A compiled schema is an array of nodes (index 0 is "any value").  The
 * automaton state is a set of threads; a thread is one parse: a stack of
 * frames (root, object, array, and at the top at most one leaf: key,
 * string, number or literal).  Every frame is deterministic over bytes;
 * the only place a thread splits is the first byte of a value whose node
 * is an anyOf, and identical threads are merged, so the set stays small.
 * Numbers and literals (enum, const, true, false, null) have no closing
 * byte: they end when a byte cannot continue them, and that byte goes on
 * to the parent, which never accepts a byte that could continue them.
 */

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar.h"


/* The compiled schema. */

#define LLM_T_NULL   0x01
#define LLM_T_BOOL   0x02
#define LLM_T_INT    0x04
#define LLM_T_NUM    0x08     /* any number, integers included */
#define LLM_T_STR    0x10
#define LLM_T_ARR    0x20
#define LLM_T_OBJ    0x40
#define LLM_T_ALL    0x7f

#define LLM_GN_TYPED  0       /* types + object/array constraints */
#define LLM_GN_ANYOF  1
#define LLM_GN_LIT    2       /* one of a sorted list of literals */

#define LLM_GN_NONE   UINT32_MAX

#define LLM_INT_DIGITS   18
#define LLM_FRAC_DIGITS  16
#define LLM_EXP_DIGITS   2
#define LLM_COMPILE_NEST 64
#define LLM_ANYOF_NEST   8

typedef struct {
    char      *s;
    uint32_t   len;
} llm_glit_t;

typedef struct {
    char      *name;
    uint32_t   len;
    uint32_t   node;
} llm_gprop_t;

typedef struct {
    uint32_t      kind;
    uint32_t      types;          /* LLM_T_* */
    llm_gprop_t  *props;          /* declaration order */
    uint32_t      n_props;
    uint64_t      required;       /* bit i: props[i] */
    uint32_t      additional;     /* node, or LLM_GN_NONE: forbidden */
    uint32_t      items;          /* node */
    uint32_t      min_items;
    uint32_t      max_items;
    uint32_t     *alts;           /* anyOf */
    uint32_t      n_alts;
    llm_glit_t   *lits;           /* sorted, unique */
    uint32_t      n_lits;
} llm_gnode_t;

struct llm_grammar_s {
    llm_gnode_t  *nodes;
    uint32_t      n_nodes;
    uint32_t      cap;
    uint32_t      root;
    unsigned      flags;
};

static const llm_glit_t llm_lits_bool[] = { { "false", 5 }, { "true", 4 } };
static const llm_glit_t llm_lits_null[] = { { "null", 4 } };


/* The automaton state. */

#define LLM_F_ROOT  0
#define LLM_F_OBJ   1
#define LLM_F_ARR   2
#define LLM_F_KEY   3
#define LLM_F_STR   4
#define LLM_F_NUM   5
#define LLM_F_LIT   6

/* root */
#define LLM_R_START    0
#define LLM_R_DONE     1
/* object */
#define LLM_O_START    0      /* after '{' */
#define LLM_O_KEYDONE  1      /* after the key, before ':' */
#define LLM_O_COLON    2      /* after ':' */
#define LLM_O_AFTER    3      /* after a value */
#define LLM_O_COMMA    4      /* after ',' */
/* array */
#define LLM_A_START    0
#define LLM_A_AFTER    1
#define LLM_A_COMMA    2
/* number */
#define LLM_N_MINUS    0
#define LLM_N_ZERO     1
#define LLM_N_INT      2
#define LLM_N_DOT      3
#define LLM_N_FRAC     4
#define LLM_N_E        5
#define LLM_N_ESIGN    6
#define LLM_N_EXP      7
/* literal sets (sub of a LIT frame) */
#define LLM_L_NODE     0
#define LLM_L_BOOL     1
#define LLM_L_NULL     2

#define LLM_FREE_KEY   UINT32_MAX

typedef struct {
    uint32_t  node;
    uint8_t   kind;
    uint8_t   sub;       /* state within the frame; key: free keys ok */
    uint8_t   u8need;    /* UTF-8 continuation bytes still due */
    uint8_t   u8lo;      /* range of the next continuation byte */
    uint8_t   u8hi;
    uint8_t   esc;       /* string: 1 after '\', 2..5 in \uXXXX */
    uint16_t  pos;       /* key, literal: bytes matched; number: digits */
    uint32_t  a;         /* obj: current property; arr: items; lit: lo;
                            num: integers only */
    uint32_t  b;         /* obj: ordered, next allowed; lit: hi */
    uint32_t  hex;       /* \u value so far */
    uint64_t  m1;        /* obj: properties seen; key: candidates allowed */
    uint64_t  m2;        /* key: candidates by name, seen or not */
} llm_gframe_t;

typedef struct {
    uint32_t      depth;
    uint32_t      ws;    /* consecutive whitespace bytes */
    llm_gframe_t  f[LLM_GRAMMAR_MAX_DEPTH + 2];
} llm_gthread_t;

typedef struct {
    uint32_t       n;
    llm_gthread_t  t[LLM_GRAMMAR_MAX_THREADS];
} llm_gset_t;

struct llm_gstate_s {
    const llm_grammar_t  *g;
    int                   finished;
    llm_gset_t           *cur;
    llm_gset_t          **lv;      /* scratch sets, made on demand */
    uint32_t              n_lv;
    uint64_t             *bits;    /* mask scratch, one bit per token */
    uint32_t              n_bits;
};


/* The token index. */

typedef struct {
    uint32_t  end;       /* preorder index just past the subtree */
    int32_t   tok;       /* first token whose bytes end here, or -1 */
    uint16_t  depth;     /* 1 for children of the root */
    uint8_t   byte;
} llm_tnode_t;

typedef struct {
    llm_tnode_t  *n;
    uint32_t      n_nodes;
    uint32_t      max_depth;
} llm_trie_t;

struct llm_tokindex_s {
    const llm_vocab_t  *v;
    uint32_t      n_vocab;
    llm_trie_t    all;       /* every token but control and EOG ones */
    llm_trie_t    unsafe;    /* suffixes after the string-safe prefix */
    int32_t      *next_all;  /* token chains of the tries */
    int32_t      *next_uns;
    uint64_t     *safe;      /* tokens made only of string-safe bytes */
    int32_t      *eog;
    uint32_t      n_eog;
    uint32_t      n_words;
};


/* Compiling. */

typedef struct {
    char      *ptr;      /* JSON pointer after '#' */
    uint32_t   node;
} llm_gref_t;

typedef struct {
    llm_grammar_t  *g;
    const json_t   *root;
    llm_gref_t     *refs;
    uint32_t        n_refs;
    uint32_t        nest;
    char           *err;
    size_t          errlen;
} llm_gcc_t;

static int llm_gcc_schema(llm_gcc_t *cc, const json_t *s, const char *ptr,
    uint32_t *out);

static const char *
llm_gptr(const char *ptr)
{
    return ptr[0] ? ptr : "the root";
}

static int
llm_gerr(llm_gcc_t *cc, const char *fmt, const char *a, const char *ptr)
{
    char  msg[256];

    snprintf(msg, sizeof(msg), fmt, a);
    snprintf(cc->err, cc->errlen, "%s at %s", msg, llm_gptr(ptr));
    return -EINVAL;
}

/* parent + "/" + key with '~' and '/' escaped; malloc'd. */
static char *
llm_gptr_child(const char *parent, const char *key)
{
    size_t  n = strlen(parent), k = strlen(key), i, j;
    char   *p = malloc(n + 2 + 2 * k);

    if (p == NULL) {
        return NULL;
    }
    memcpy(p, parent, n);
    j = n;
    p[j++] = '/';
    for (i = 0; i < k; i++) {
        if (key[i] == '~') {
            p[j++] = '~';
            p[j++] = '0';
        } else if (key[i] == '/') {
            p[j++] = '~';
            p[j++] = '1';
        } else {
            p[j++] = key[i];
        }
    }
    p[j] = '\0';
    return p;
}

static int
llm_gnode_new(llm_gcc_t *cc, uint32_t *out)
{
    llm_grammar_t  *g = cc->g;
    llm_gnode_t    *n;

    if (g->n_nodes >= LLM_GRAMMAR_MAX_NODES) {
        snprintf(cc->err, cc->errlen, "JSON schema too large: more than %d "
                 "nodes", LLM_GRAMMAR_MAX_NODES);
        return -EINVAL;
    }
    if (g->n_nodes == g->cap) {
        uint32_t cap = g->cap ? g->cap * 2 : 16;

        n = realloc(g->nodes, cap * sizeof(*n));
        if (n == NULL) {
            snprintf(cc->err, cc->errlen, "out of memory");
            return -ENOMEM;
        }
        g->nodes = n;
        g->cap = cap;
    }
    n = &g->nodes[g->n_nodes];
    memset(n, 0, sizeof(*n));
    n->kind = LLM_GN_TYPED;
    n->types = LLM_T_ALL;
    n->additional = 0;
    n->items = 0;
    n->max_items = UINT32_MAX;
    *out = g->n_nodes++;
    return 0;
}

static const char *const llm_gannotations[] = {
    "description", "title", "default", "examples", "$schema", "$id",
    "$comment", "deprecated", "readOnly", "writeOnly", "$defs",
    "definitions", NULL
};

static const char *const llm_gkeywords[] = {
    "type", "properties", "required", "additionalProperties", "items",
    "minItems", "maxItems", "enum", "const", "anyOf", "oneOf", "$ref", NULL
};

static int
llm_gin(const char *const *list, const char *k)
{
    for (size_t i = 0; list[i]; i++) {
        if (strcmp(list[i], k) == 0) {
            return 1;
        }
    }
    return 0;
}

static int
llm_glit_cmp(const void *a, const void *b)
{
    const llm_glit_t *x = a, *y = b;
    uint32_t          n = x->len < y->len ? x->len : y->len;
    int               c = memcmp(x->s, y->s, n);

    if (c != 0) {
        return c;
    }
    return x->len < y->len ? -1 : x->len > y->len;
}

static uint32_t
llm_gjson_type(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT:
        return LLM_T_OBJ;
    case JSON_ARRAY:
        return LLM_T_ARR;
    case JSON_STRING:
        return LLM_T_STR;
    case JSON_INTEGER:
        return LLM_T_INT | LLM_T_NUM;
    case JSON_REAL:
        return json_real_value(v) == floor(json_real_value(v))
               ? LLM_T_INT | LLM_T_NUM : LLM_T_NUM;
    case JSON_TRUE:
    case JSON_FALSE:
        return LLM_T_BOOL;
    default:
        return LLM_T_NULL;
    }
}

/* enum / const: the values (filtered by types) as sorted literals. */
static int
llm_gcc_lits(llm_gcc_t *cc, uint32_t idx, const json_t *vals, uint32_t types,
    const char *kw, const char *ptr)
{
    llm_glit_t  *l;
    size_t       i, n = json_array_size(vals), k = 0, j;
    json_t      *v;

    l = calloc(n ? n : 1, sizeof(*l));
    if (l == NULL) {
        snprintf(cc->err, cc->errlen, "out of memory");
        return -ENOMEM;
    }
    json_array_foreach(vals, i, v) {
        if (!(llm_gjson_type(v) & types)) {
            continue;
        }
        l[k].s = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
        if (l[k].s == NULL) {
            for (j = 0; j < k; j++) {
                free(l[j].s);
            }
            free(l);
            snprintf(cc->err, cc->errlen, "out of memory");
            return -ENOMEM;
        }
        l[k].len = (uint32_t) strlen(l[k].s);
        k++;
    }
    if (k == 0) {
        free(l);
        return llm_gerr(cc, "no value of '%s' matches 'type'", kw, ptr);
    }
    qsort(l, k, sizeof(*l), llm_glit_cmp);
    for (i = 1, j = 1; i < k; i++) {
        if (llm_glit_cmp(&l[i], &l[j - 1]) == 0) {
            free(l[i].s);
        } else {
            l[j++] = l[i];
        }
    }
    cc->g->nodes[idx].kind = LLM_GN_LIT;
    cc->g->nodes[idx].lits = l;
    cc->g->nodes[idx].n_lits = (uint32_t) j;
    return 0;
}

static int
llm_gcc_types(llm_gcc_t *cc, const json_t *t, const char *ptr, uint32_t *out)
{
    static const struct {
        const char  *name;
        uint32_t     bits;
    } names[] = {
        { "null", LLM_T_NULL }, { "boolean", LLM_T_BOOL },
        { "integer", LLM_T_INT }, { "number", LLM_T_NUM | LLM_T_INT },
        { "string", LLM_T_STR }, { "array", LLM_T_ARR },
        { "object", LLM_T_OBJ }
    };
    const json_t  *e;
    size_t         i, k, n;
    uint32_t       bits = 0;

    n = json_is_array(t) ? json_array_size(t) : 1;
    if (json_is_array(t) && n == 0) {
        return llm_gerr(cc, "'%s' must not be an empty list", "type", ptr);
    }
    for (i = 0; i < n; i++) {
        e = json_is_array(t) ? json_array_get(t, i) : t;
        if (!json_is_string(e)) {
            return llm_gerr(cc, "'%s' must be a string or a list of strings",
                            "type", ptr);
        }
        for (k = 0; k < sizeof(names) / sizeof(names[0]); k++) {
            if (strcmp(names[k].name, json_string_value(e)) == 0) {
                bits |= names[k].bits;
                break;
            }
        }
        if (k == sizeof(names) / sizeof(names[0])) {
            return llm_gerr(cc, "unknown type '%s'", json_string_value(e),
                            ptr);
        }
    }
    *out = bits;
    return 0;
}

static int
llm_gcc_count(llm_gcc_t *cc, const json_t *v, const char *kw,
    const char *ptr, uint32_t *out)
{
    double  d;

    if (json_is_integer(v) && json_integer_value(v) >= 0) {
        *out = json_integer_value(v) > UINT32_MAX
               ? UINT32_MAX : (uint32_t) json_integer_value(v);
        return 0;
    }
    if (json_is_real(v)) {
        d = json_real_value(v);
        if (d >= 0 && d == floor(d)) {
            *out = d > UINT32_MAX ? UINT32_MAX : (uint32_t) d;
            return 0;
        }
    }
    return llm_gerr(cc, "'%s' must be a non-negative integer", kw, ptr);
}

/* Resolve "#..." to a node, compiling its target the first time. */
static int
llm_gcc_ref(llm_gcc_t *cc, const json_t *ref, const char *ptr, uint32_t *out)
{
    const char    *r, *p, *q;
    const json_t  *t = cc->root;
    llm_gref_t    *nr;
    char           key[512];
    size_t         k, i;
    uint32_t       idx;
    int            rc;

    if (!json_is_string(ref)) {
        return llm_gerr(cc, "'%s' must be a string", "$ref", ptr);
    }
    r = json_string_value(ref);
    if (r[0] != '#') {
        return llm_gerr(cc, "only local $ref ('#/...') is supported, not "
                        "'%s'", r, ptr);
    }
    for (i = 0; i < cc->n_refs; i++) {
        if (strcmp(cc->refs[i].ptr, r + 1) == 0) {
            *out = cc->refs[i].node;
            return 0;
        }
    }
    for (p = r + 1; *p; p = q) {
        if (*p != '/') {
            return llm_gerr(cc, "$ref '%s' is not a JSON pointer", r, ptr);
        }
        p++;
        q = p + strcspn(p, "/");
        for (k = 0; p < q && k < sizeof(key) - 1; p++) {
            if (*p == '~' && p[1] == '1') {
                key[k++] = '/';
                p++;
            } else if (*p == '~' && p[1] == '0') {
                key[k++] = '~';
                p++;
            } else {
                key[k++] = *p;
            }
        }
        key[k] = '\0';
        if (json_is_object(t)) {
            t = json_object_get(t, key);
        } else if (json_is_array(t)) {
            t = json_array_get(t, strtoul(key, NULL, 10));
        } else {
            t = NULL;
        }
        if (t == NULL) {
            return llm_gerr(cc, "$ref '%s' does not resolve", r, ptr);
        }
    }
    rc = llm_gnode_new(cc, &idx);
    if (rc != 0) {
        return rc;
    }
    nr = realloc(cc->refs, (cc->n_refs + 1) * sizeof(*nr));
    if (nr == NULL) {
        snprintf(cc->err, cc->errlen, "out of memory");
        return -ENOMEM;
    }
    cc->refs = nr;
    nr[cc->n_refs].ptr = strdup(r + 1);
    if (nr[cc->n_refs].ptr == NULL) {
        snprintf(cc->err, cc->errlen, "out of memory");
        return -ENOMEM;
    }
    nr[cc->n_refs++].node = idx;
    *out = idx;
    /* the target compiles into idx, found by later refs to it first */
    {
        llm_gnode_t  *n;
        uint32_t      inner;

        rc = llm_gcc_schema(cc, t, r + 1, &inner);
        if (rc != 0) {
            return rc;
        }
        if (inner == idx) {
            return llm_gerr(cc, "$ref '%s' refers to itself", r, ptr);
        }
        n = &cc->g->nodes[idx];
        n->kind = LLM_GN_ANYOF;
        n->alts = malloc(sizeof(uint32_t));
        if (n->alts == NULL) {
            snprintf(cc->err, cc->errlen, "out of memory");
            return -ENOMEM;
        }
        n->alts[0] = inner;
        n->n_alts = 1;
    }
    return 0;
}

static int
llm_gcc_props(llm_gcc_t *cc, uint32_t idx, const json_t *props,
    const json_t *req, const char *ptr)
{
    const char   *k;
    json_t       *v;
    llm_gprop_t  *p;
    size_t        n, i, j;
    char         *cp;
    uint32_t      node;
    int           rc;

    if (props != NULL && !json_is_object(props)) {
        return llm_gerr(cc, "'%s' must be an object", "properties", ptr);
    }
    n = props ? json_object_size(props) : 0;
    if (n > LLM_GRAMMAR_MAX_PROPS) {
        return llm_gerr(cc, "more than %s properties in one object", "64",
                        ptr);
    }
    if (n > 0) {
        p = calloc(n, sizeof(*p));
        if (p == NULL) {
            snprintf(cc->err, cc->errlen, "out of memory");
            return -ENOMEM;
        }
        cc->g->nodes[idx].props = p;
        i = 0;
        json_object_foreach((json_t *) props, k, v) {
            for (j = 0; k[j]; j++) {
                if (k[j] == '"' || k[j] == '\\'
                    || (unsigned char) k[j] < 0x20)
                {
                    return llm_gerr(cc, "property name '%s' needs JSON "
                                    "escapes, which are not supported", k,
                                    ptr);
                }
            }
            cp = llm_gptr_child(ptr, "properties");
            if (cp == NULL) {
                return -ENOMEM;
            }
            {
                char *cp2 = llm_gptr_child(cp, k);

                free(cp);
                if (cp2 == NULL) {
                    return -ENOMEM;
                }
                rc = llm_gcc_schema(cc, v, cp2, &node);
                free(cp2);
            }
            if (rc != 0) {
                return rc;
            }
            p = &cc->g->nodes[idx].props[i];
            p->name = strdup(k);
            if (p->name == NULL) {
                return -ENOMEM;
            }
            p->len = (uint32_t) strlen(k);
            p->node = node;
            cc->g->nodes[idx].n_props = (uint32_t) ++i;
        }
    }
    if (req == NULL) {
        return 0;
    }
    if (!json_is_array(req)) {
        return llm_gerr(cc, "'%s' must be a list of strings", "required",
                        ptr);
    }
    json_array_foreach(req, i, v) {
        llm_gnode_t *nd = &cc->g->nodes[idx];

        if (!json_is_string(v)) {
            return llm_gerr(cc, "'%s' must be a list of strings",
                            "required", ptr);
        }
        for (j = 0; j < nd->n_props; j++) {
            if (strcmp(nd->props[j].name, json_string_value(v)) == 0) {
                nd->required |= 1ull << j;
                break;
            }
        }
        if (j == nd->n_props) {
            return llm_gerr(cc, "required property '%s' is not in "
                            "'properties'", json_string_value(v), ptr);
        }
    }
    return 0;
}

static int
llm_gcc_anyof(llm_gcc_t *cc, uint32_t idx, const json_t *list,
    const char *kw, const char *ptr)
{
    size_t   i, n;
    char    *cp, num[32];
    uint32_t node;
    int      rc;

    if (!json_is_array(list) || json_array_size(list) == 0) {
        return llm_gerr(cc, "'%s' must be a non-empty list of schemas", kw,
                        ptr);
    }
    n = json_array_size(list);
    if (n > LLM_GRAMMAR_MAX_THREADS) {
        /* the automaton follows at most MAX_THREADS parses at once; more
         * branches would be dropped, silently narrowing the schema */
        char  msg[160];

        snprintf(msg, sizeof(msg), "'%%s' has %zu schemas, at most %d are "
                 "supported (an 'enum' takes any number of constants)", n,
                 LLM_GRAMMAR_MAX_THREADS);
        return llm_gerr(cc, msg, kw, ptr);
    }
    cc->g->nodes[idx].alts = calloc(n, sizeof(uint32_t));
    if (cc->g->nodes[idx].alts == NULL) {
        return -ENOMEM;
    }
    cc->g->nodes[idx].kind = LLM_GN_ANYOF;
    for (i = 0; i < n; i++) {
        cp = llm_gptr_child(ptr, kw);
        if (cp == NULL) {
            return -ENOMEM;
        }
        snprintf(num, sizeof(num), "%zu", i);
        {
            char *cp2 = llm_gptr_child(cp, num);

            free(cp);
            if (cp2 == NULL) {
                return -ENOMEM;
            }
            rc = llm_gcc_schema(cc, json_array_get(list, i), cp2, &node);
            free(cp2);
        }
        if (rc != 0) {
            return rc;
        }
        cc->g->nodes[idx].alts[i] = node;
        cc->g->nodes[idx].n_alts = (uint32_t) i + 1;
    }
    return 0;
}

/* Compile schema s (at JSON pointer ptr) into a node. */
static int
llm_gcc_schema(llm_gcc_t *cc, const json_t *s, const char *ptr, uint32_t *out)
{
    const char    *k, *other = NULL;
    json_t        *v;
    const json_t  *ref, *anyof, *oneof, *en, *cn, *ty;
    uint32_t       idx, types = LLM_T_ALL, node;
    char          *cp;
    int            rc;

    if (json_is_true(s)) {
        *out = 0;
        return 0;
    }
    if (!json_is_object(s)) {
        return llm_gerr(cc, "a schema must be an object or true%s", "", ptr);
    }
    if (++cc->nest > LLM_COMPILE_NEST) {
        return llm_gerr(cc, "JSON schema nested too deeply%s", "", ptr);
    }
    json_object_foreach((json_t *) s, k, v) {
        if (llm_gin(llm_gannotations, k)) {
            continue;
        }
        if (!llm_gin(llm_gkeywords, k)) {
            return llm_gerr(cc, "unsupported JSON schema keyword '%s'", k,
                            ptr);
        }
        if (strcmp(k, "type") != 0 && strcmp(k, "$ref") != 0
            && strcmp(k, "anyOf") != 0 && strcmp(k, "oneOf") != 0
            && strcmp(k, "enum") != 0 && strcmp(k, "const") != 0)
        {
            other = k;
        }
    }
    ref = json_object_get(s, "$ref");
    anyof = json_object_get(s, "anyOf");
    oneof = json_object_get(s, "oneOf");
    en = json_object_get(s, "enum");
    cn = json_object_get(s, "const");
    ty = json_object_get(s, "type");

    if (ref || anyof || oneof) {
        const char *kw = ref ? "$ref" : anyof ? "anyOf" : "oneOf";
        const char *with = other ? other : ty ? "type" : en ? "enum"
                           : cn ? "const" : NULL;
        char        msg[128];

        if (with == NULL && ref && (anyof || oneof)) {
            with = anyof ? "anyOf" : "oneOf";
        } else if (with == NULL && anyof && oneof) {
            with = "oneOf";
        }
        if (with != NULL) {
            snprintf(msg, sizeof(msg), "'%s' cannot be combined with '%%s'",
                     kw);
            return llm_gerr(cc, msg, with, ptr);
        }
        if (ref) {
            rc = llm_gcc_ref(cc, ref, ptr, out);
        } else {
            rc = llm_gnode_new(cc, &idx);
            if (rc == 0) {
                *out = idx;
                rc = llm_gcc_anyof(cc, idx, anyof ? anyof : oneof, kw, ptr);
            }
        }
        cc->nest--;
        return rc;
    }

    if (ty) {
        rc = llm_gcc_types(cc, ty, ptr, &types);
        if (rc != 0) {
            return rc;
        }
    }
    rc = llm_gnode_new(cc, &idx);
    if (rc != 0) {
        return rc;
    }
    *out = idx;
    cc->g->nodes[idx].types = types;

    if (en || cn) {
        if (en && cn) {
            return llm_gerr(cc, "'enum' cannot be combined with '%s'",
                            "const", ptr);
        }
        if (other) {
            return llm_gerr(cc, en ? "'enum' cannot be combined with '%s'"
                            : "'const' cannot be combined with '%s'", other,
                            ptr);
        }
        if (en && (!json_is_array(en) || json_array_size(en) == 0)) {
            return llm_gerr(cc, "'%s' must be a non-empty list", "enum", ptr);
        }
        if (cn) {
            json_t *one = json_pack("[O]", cn);

            if (one == NULL) {
                return -ENOMEM;
            }
            rc = llm_gcc_lits(cc, idx, one, types, "const", ptr);
            json_decref(one);
        } else {
            rc = llm_gcc_lits(cc, idx, en, types, "enum", ptr);
        }
        cc->nest--;
        return rc;
    }

    rc = llm_gcc_props(cc, idx, json_object_get(s, "properties"),
                       json_object_get(s, "required"), ptr);
    if (rc != 0) {
        return rc;
    }
    v = json_object_get(s, "additionalProperties");
    if (v == NULL) {
        cc->g->nodes[idx].additional = (cc->g->flags & LLM_GRAMMAR_STRICT)
                                       ? LLM_GN_NONE : 0;
    } else if (json_is_false(v)) {
        cc->g->nodes[idx].additional = LLM_GN_NONE;
    } else {
        cp = llm_gptr_child(ptr, "additionalProperties");
        if (cp == NULL) {
            return -ENOMEM;
        }
        rc = llm_gcc_schema(cc, v, cp, &node);
        free(cp);
        if (rc != 0) {
            return rc;
        }
        cc->g->nodes[idx].additional = node;
    }
    v = json_object_get(s, "items");
    if (v != NULL) {
        if (json_is_array(v)) {
            return llm_gerr(cc, "'%s' as a list (tuple) is not supported",
                            "items", ptr);
        }
        cp = llm_gptr_child(ptr, "items");
        if (cp == NULL) {
            return -ENOMEM;
        }
        rc = llm_gcc_schema(cc, v, cp, &node);
        free(cp);
        if (rc != 0) {
            return rc;
        }
        cc->g->nodes[idx].items = node;
    }
    v = json_object_get(s, "minItems");
    if (v && (rc = llm_gcc_count(cc, v, "minItems", ptr,
                                 &cc->g->nodes[idx].min_items)) != 0)
    {
        return rc;
    }
    v = json_object_get(s, "maxItems");
    if (v && (rc = llm_gcc_count(cc, v, "maxItems", ptr,
                                 &cc->g->nodes[idx].max_items)) != 0)
    {
        return rc;
    }
    if (cc->g->nodes[idx].min_items > cc->g->nodes[idx].max_items) {
        return llm_gerr(cc, "'minItems' is greater than '%s'", "maxItems",
                        ptr);
    }
    cc->nest--;
    return 0;
}

void
llm_grammar_free(llm_grammar_t *g)
{
    if (g == NULL) {
        return;
    }
    for (uint32_t i = 0; i < g->n_nodes; i++) {
        llm_gnode_t *n = &g->nodes[i];

        for (uint32_t j = 0; j < n->n_props; j++) {
            free(n->props[j].name);
        }
        free(n->props);
        for (uint32_t j = 0; j < n->n_lits; j++) {
            free(n->lits[j].s);
        }
        free(n->lits);
        free(n->alts);
    }
    free(g->nodes);
    free(g);
}

int
llm_grammar_compile(llm_grammar_t **out, const json_t *schema,
    unsigned flags, char *err, size_t errlen)
{
    llm_grammar_t  *g;
    llm_gcc_t       cc;
    uint32_t        any, root;
    int             rc;

    *out = NULL;
    g = calloc(1, sizeof(*g));
    if (g == NULL) {
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    g->flags = flags;
    memset(&cc, 0, sizeof(cc));
    cc.g = g;
    cc.root = schema;
    cc.err = err;
    cc.errlen = errlen;

    rc = llm_gnode_new(&cc, &any);          /* node 0: any value */
    if (rc == 0) {
        if (schema == NULL) {
            rc = llm_gnode_new(&cc, &root);
            if (rc == 0) {
                g->nodes[root].types = LLM_T_OBJ;
            }
        } else {
            rc = llm_gcc_schema(&cc, schema, "", &root);
        }
    }
    for (uint32_t i = 0; i < cc.n_refs; i++) {
        free(cc.refs[i].ptr);
    }
    free(cc.refs);
    if (rc != 0) {
        if (err[0] == '\0') {
            snprintf(err, errlen, "%s", strerror(-rc));
        }
        llm_grammar_free(g);
        return rc;
    }
    g->root = root;
    *out = g;
    return 0;
}

int
llm_grammar_from_response_format(llm_grammar_t **out, const char *json,
    size_t len, char *err, size_t errlen)
{
    json_t        *rf;
    json_error_t   je;
    int            rc;

    rf = json_loadb(json, len, 0, &je);
    rc = llm_grammar_from_response_format_json(out, rf, err, errlen);
    json_decref(rf);
    return rc;
}

int
llm_grammar_from_response_format_json(llm_grammar_t **out, const json_t *rf,
    char *err, size_t errlen)
{
    json_t        *js, *schema, *strict;
    const char    *type;
    int            rc;

    *out = NULL;
    if (rf == NULL || !json_is_object(rf)) {
        snprintf(err, errlen, "response_format is not a JSON object");
        return -EINVAL;
    }
    type = json_string_value(json_object_get(rf, "type"));
    if (type == NULL) {
        snprintf(err, errlen, "response_format.type must be a string");
        rc = -EINVAL;
    } else if (strcmp(type, "text") == 0) {
        rc = 0;
    } else if (strcmp(type, "json_object") == 0) {
        rc = llm_grammar_compile(out, NULL, 0, err, errlen);
    } else if (strcmp(type, "json_schema") == 0) {
        js = json_object_get(rf, "json_schema");
        schema = json_object_get(js, "schema");
        strict = json_object_get(js, "strict");
        if (!json_is_object(js)) {
            snprintf(err, errlen, "response_format.json_schema must be an "
                     "object");
            rc = -EINVAL;
        } else if (schema == NULL) {
            /* OpenAI: no schema means any JSON object */
            rc = llm_grammar_compile(out, NULL, 0, err, errlen);
        } else {
            char  msg[384];

            rc = llm_grammar_compile(out, schema,
                                     json_is_true(strict)
                                     ? LLM_GRAMMAR_STRICT : 0,
                                     msg, sizeof(msg));
            if (rc != 0) {
                snprintf(err, errlen, "response_format.json_schema.schema: "
                         "%s", msg);
            }
        }
    } else {
        snprintf(err, errlen, "response_format.type '%s' is not supported",
                 type);
        rc = -EINVAL;
    }
    return rc;
}


/* The automaton. */

static const llm_gframe_t *
llm_gtop_c(const llm_gthread_t *t)
{
    return &t->f[t->depth - 1];
}

static void
llm_gthread_copy(llm_gthread_t *dst, const llm_gthread_t *src)
{
    memcpy(dst, src, offsetof(llm_gthread_t, f)
                     + src->depth * sizeof(llm_gframe_t));
}

static int
llm_gthread_eq(const llm_gthread_t *a, const llm_gthread_t *b)
{
    return a->depth == b->depth
           && memcmp(a, b, offsetof(llm_gthread_t, f)
                           + a->depth * sizeof(llm_gframe_t)) == 0;
}

static void
llm_gset_commit(llm_gset_t *out, const llm_gthread_t *t)
{
    for (uint32_t i = 0; i < out->n; i++) {
        if (llm_gthread_eq(&out->t[i], t)) {
            return;
        }
    }
    if (out->n < LLM_GRAMMAR_MAX_THREADS) {
        llm_gthread_copy(&out->t[out->n++], t);
    }
}

static llm_gframe_t *
llm_gpush(llm_gthread_t *t, uint8_t kind, uint32_t node)
{
    llm_gframe_t *f;

    if (t->depth >= LLM_GRAMMAR_MAX_DEPTH + 2) {
        return NULL;
    }
    f = &t->f[t->depth++];
    memset(f, 0, sizeof(*f));
    f->kind = kind;
    f->node = node;
    return f;
}

static const llm_glit_t *
llm_glits(const llm_grammar_t *g, const llm_gframe_t *f, uint32_t *n)
{
    switch (f->sub) {
    case LLM_L_BOOL:
        *n = 2;
        return llm_lits_bool;
    case LLM_L_NULL:
        *n = 1;
        return llm_lits_null;
    default:
        *n = g->nodes[f->node].n_lits;
        return g->nodes[f->node].lits;
    }
}

/* Literal: narrow [a, b) to the candidates continued by c. */
static int
llm_glit_step(const llm_grammar_t *g, llm_gframe_t *f, uint8_t c)
{
    const llm_glit_t  *l;
    uint32_t           n, i, j;

    l = llm_glits(g, f, &n);
    (void) n;
    i = f->a;
    if (i < f->b && l[i].len == f->pos) {
        i++;
    }
    while (i < f->b && (uint8_t) l[i].s[f->pos] < c) {
        i++;
    }
    for (j = i; j < f->b && (uint8_t) l[j].s[f->pos] == c; j++) {
        /* void */
    }
    if (i == j) {
        return 0;
    }
    f->a = i;
    f->b = j;
    f->pos++;
    return 1;
}

static int
llm_glit_complete(const llm_grammar_t *g, const llm_gframe_t *f)
{
    const llm_glit_t  *l;
    uint32_t           n;

    l = llm_glits(g, f, &n);
    return f->a < f->b && l[f->a].len == f->pos;
}

static int
llm_gnum_complete(const llm_gframe_t *f)
{
    return f->sub == LLM_N_ZERO || f->sub == LLM_N_INT
           || f->sub == LLM_N_FRAC || f->sub == LLM_N_EXP;
}

/* Number: 1 consumed, 0 cannot continue. */
static int
llm_gnum_step(llm_gframe_t *f, uint8_t c)
{
    int  digit = c >= '0' && c <= '9';
    int  real = f->a == 0;

    switch (f->sub) {
    case LLM_N_MINUS:
        if (c == '0') {
            f->sub = LLM_N_ZERO;
            return 1;
        }
        if (digit) {
            f->sub = LLM_N_INT;
            f->pos = 1;
            return 1;
        }
        return 0;
    case LLM_N_ZERO:
    case LLM_N_INT:
        if (f->sub == LLM_N_INT && digit && f->pos < LLM_INT_DIGITS) {
            f->pos++;
            return 1;
        }
        if (real && c == '.') {
            f->sub = LLM_N_DOT;
            return 1;
        }
        if (real && (c == 'e' || c == 'E')) {
            f->sub = LLM_N_E;
            return 1;
        }
        return 0;
    case LLM_N_DOT:
        if (digit) {
            f->sub = LLM_N_FRAC;
            f->pos = 1;
            return 1;
        }
        return 0;
    case LLM_N_FRAC:
        if (digit && f->pos < LLM_FRAC_DIGITS) {
            f->pos++;
            return 1;
        }
        if (c == 'e' || c == 'E') {
            f->sub = LLM_N_E;
            return 1;
        }
        return 0;
    case LLM_N_E:
        if (c == '+' || c == '-') {
            f->sub = LLM_N_ESIGN;
            return 1;
        }
        /* fall through */
    case LLM_N_ESIGN:
        if (digit) {
            f->sub = LLM_N_EXP;
            f->pos = 1;
            return 1;
        }
        return 0;
    default:    /* LLM_N_EXP */
        if (digit && f->pos < LLM_EXP_DIGITS) {
            f->pos++;
            return 1;
        }
        return 0;
    }
}

/* UTF-8 inside a string or key: 1 ok, 0 invalid. */
static int
llm_gutf8_step(llm_gframe_t *f, uint8_t c)
{
    if (f->u8need) {
        if (c < f->u8lo || c > f->u8hi) {
            return 0;
        }
        f->u8need--;
        f->u8lo = 0x80;
        f->u8hi = 0xbf;
        return 1;
    }
    if (c < 0x80) {
        return 1;
    }
    f->u8lo = 0x80;
    f->u8hi = 0xbf;
    if (c >= 0xc2 && c <= 0xdf) {
        f->u8need = 1;
    } else if (c >= 0xe0 && c <= 0xef) {
        f->u8need = 2;
        if (c == 0xe0) {
            f->u8lo = 0xa0;
        } else if (c == 0xed) {
            f->u8hi = 0x9f;
        }
    } else if (c >= 0xf0 && c <= 0xf4) {
        f->u8need = 3;
        if (c == 0xf0) {
            f->u8lo = 0x90;
        } else if (c == 0xf4) {
            f->u8hi = 0x8f;
        }
    } else {
        return 0;
    }
    return 1;
}

static int
llm_ghex(uint8_t c)
{
    if (c >= '0' && c <= '9') {
        return c - '0';
    }
    if (c >= 'a' && c <= 'f') {
        return c - 'a' + 10;
    }
    if (c >= 'A' && c <= 'F') {
        return c - 'A' + 10;
    }
    return -1;
}

static int llm_gadvance(const llm_grammar_t *g, llm_gthread_t *t, uint8_t c,
    llm_gset_t *out);

/* The frame below the top took a complete value. */
static void
llm_gvalue_done(llm_gthread_t *t)
{
    llm_gframe_t *p = &t->f[t->depth - 1];

    switch (p->kind) {
    case LLM_F_ROOT:
        p->sub = LLM_R_DONE;
        break;
    case LLM_F_OBJ:
        p->sub = LLM_O_AFTER;
        break;
    default:    /* LLM_F_ARR */
        if (p->a < UINT32_MAX) {
            p->a++;
        }
        p->sub = LLM_A_AFTER;
        break;
    }
}

/*
 * The first byte c of a value of node idx.  1: t took it; 0: t did not
 * (either c cannot start such a value, or t split into threads that went
 * straight to out).
 */
static int
llm_gstart(const llm_grammar_t *g, llm_gthread_t *t, uint32_t idx,
    uint8_t c, llm_gset_t *out, uint32_t nest)
{
    const llm_gnode_t  *n = &g->nodes[idx];
    llm_gframe_t       *f;
    llm_gthread_t       tmp;
    uint32_t            types = n->types;

    if (n->kind == LLM_GN_ANYOF) {
        if (nest >= LLM_ANYOF_NEST) {
            return 0;
        }
        if (n->n_alts == 1) {
            return llm_gstart(g, t, n->alts[0], c, out, nest + 1);
        }
        for (uint32_t i = 0; i < n->n_alts; i++) {
            llm_gthread_copy(&tmp, t);
            if (llm_gstart(g, &tmp, n->alts[i], c, out, nest + 1)) {
                llm_gset_commit(out, &tmp);
            }
        }
        return 0;
    }
    if (n->kind == LLM_GN_LIT) {
        f = llm_gpush(t, LLM_F_LIT, idx);
        if (f == NULL) {
            return 0;
        }
        f->sub = LLM_L_NODE;
        f->a = 0;
        f->b = n->n_lits;
        return llm_glit_step(g, f, c);
    }
    switch (c) {
    case '{':
        if (!(types & LLM_T_OBJ) || t->depth > LLM_GRAMMAR_MAX_DEPTH) {
            return 0;
        }
        f = llm_gpush(t, LLM_F_OBJ, idx);
        f->sub = LLM_O_START;
        return 1;
    case '[':
        if (!(types & LLM_T_ARR) || t->depth > LLM_GRAMMAR_MAX_DEPTH) {
            return 0;
        }
        f = llm_gpush(t, LLM_F_ARR, idx);
        f->sub = LLM_A_START;
        return 1;
    case '"':
        if (!(types & LLM_T_STR)) {
            return 0;
        }
        return llm_gpush(t, LLM_F_STR, idx) != NULL;
    case 't':
    case 'f':
    case 'n':
        if (!(types & (c == 'n' ? LLM_T_NULL : LLM_T_BOOL))) {
            return 0;
        }
        f = llm_gpush(t, LLM_F_LIT, idx);
        if (f == NULL) {
            return 0;
        }
        f->sub = c == 'n' ? LLM_L_NULL : LLM_L_BOOL;
        f->a = 0;
        f->b = c == 'n' ? 1 : 2;
        return llm_glit_step(g, f, c);
    default:
        if (c != '-' && (c < '0' || c > '9')) {
            return 0;
        }
        if (!(types & (LLM_T_INT | LLM_T_NUM))) {
            return 0;
        }
        f = llm_gpush(t, LLM_F_NUM, idx);
        if (f == NULL) {
            return 0;
        }
        f->a = (types & LLM_T_NUM) ? 0 : 1;
        if (c == '-') {
            f->sub = LLM_N_MINUS;
        } else if (c == '0') {
            f->sub = LLM_N_ZERO;
        } else {
            f->sub = LLM_N_INT;
            f->pos = 1;
        }
        return 1;
    }
}

static int
llm_gws(llm_gthread_t *t)
{
    if (t->ws >= LLM_GRAMMAR_WS_MAX) {
        return 0;
    }
    t->ws++;
    return 1;
}

#define llm_gis_ws(c)  ((c) == ' ' || (c) == '\n' || (c) == '\t')

/* Keys still allowed in object frame o of node n. */
static uint64_t
llm_gkeys_open(const llm_grammar_t *g, const llm_gnode_t *n,
    const llm_gframe_t *o)
{
    uint64_t  all = n->n_props == 64 ? ~0ull : (1ull << n->n_props) - 1;
    uint64_t  m = all & ~o->m1;

    if (g->flags & LLM_GRAMMAR_ORDERED) {
        uint64_t req;

        m &= o->b >= 64 ? 0 : ~((1ull << o->b) - 1);
        /* no key past a required one still missing: it could not come
         * back later */
        req = m & n->required;
        if (req) {
            m &= (req & -req) | ((req & -req) - 1);
        }
    }
    return m;
}

static int
llm_gobj_can_close(const llm_gnode_t *n, const llm_gframe_t *o)
{
    return (n->required & ~o->m1) == 0;
}

static int
llm_gobj_key(const llm_grammar_t *g, llm_gthread_t *t)
{
    llm_gframe_t       *o = &t->f[t->depth - 1], *k;
    const llm_gnode_t  *n = &g->nodes[o->node];
    uint64_t            open = llm_gkeys_open(g, n, o);
    int                 free_ok = n->additional != LLM_GN_NONE;

    if (open == 0 && !free_ok) {
        return 0;
    }
    k = llm_gpush(t, LLM_F_KEY, o->node);
    if (k == NULL) {
        return 0;
    }
    k->sub = (uint8_t) free_ok;
    k->m1 = open;
    k->m2 = n->n_props == 64 ? ~0ull : (1ull << n->n_props) - 1;
    return 1;
}

static int
llm_gkey_step(const llm_grammar_t *g, llm_gthread_t *t, uint8_t c)
{
    llm_gframe_t       *k = &t->f[t->depth - 1], *o;
    const llm_gnode_t  *n = &g->nodes[k->node];
    uint64_t            m2 = 0, m;
    uint32_t            i;

    if (c == '"' && k->u8need == 0) {
        uint32_t hit = LLM_FREE_KEY;

        for (m = k->m2; m; m &= m - 1) {
            i = (uint32_t) __builtin_ctzll(m);
            if (n->props[i].len == k->pos) {
                hit = i;
                break;
            }
        }
        if (hit != LLM_FREE_KEY) {
            if (!(k->m1 & (1ull << hit))) {
                return 0;
            }
        } else if (!k->sub) {
            return 0;
        }
        t->depth--;
        o = &t->f[t->depth - 1];
        o->a = hit;
        o->sub = LLM_O_KEYDONE;
        if (hit != LLM_FREE_KEY) {
            o->m1 |= 1ull << hit;
            o->b = hit + 1;
        }
        return 1;
    }
    if (c == '\\' || c < 0x20 || !llm_gutf8_step(k, c)) {
        return 0;
    }
    if (k->m2 == 0) {
        return k->sub;
    }
    for (m = k->m2; m; m &= m - 1) {
        i = (uint32_t) __builtin_ctzll(m);
        if (n->props[i].len > k->pos
            && (uint8_t) n->props[i].name[k->pos] == c)
        {
            m2 |= 1ull << i;
        }
    }
    if ((k->m1 & m2) == 0 && !k->sub) {
        return 0;
    }
    k->m1 &= m2;
    k->m2 = m2;
    k->pos = m2 ? k->pos + 1 : 0;
    return 1;
}

static int
llm_gstr_step(llm_gthread_t *t, uint8_t c)
{
    llm_gframe_t  *f = &t->f[t->depth - 1];
    int            h;

    if (f->esc == 0) {
        if (f->u8need == 0 && c == '"') {
            t->depth--;
            llm_gvalue_done(t);
            return 1;
        }
        if (f->u8need == 0 && c == '\\') {
            f->esc = 1;
            return 1;
        }
        return c >= 0x20 && llm_gutf8_step(f, c);
    }
    if (f->esc == 1) {
        if (c == 'u') {
            f->esc = 2;
            f->hex = 0;
            return 1;
        }
        if (c == '"' || c == '\\' || c == '/' || c == 'b' || c == 'f'
            || c == 'n' || c == 'r' || c == 't')
        {
            f->esc = 0;
            return 1;
        }
        return 0;
    }
    h = llm_ghex(c);
    if (h < 0) {
        return 0;
    }
    /* no surrogates (D800-DFFF), no U+0000 */
    if (f->esc == 3 && f->hex == 0xd && h >= 8) {
        return 0;
    }
    if (f->esc == 5 && f->hex == 0 && h == 0) {
        return 0;
    }
    f->hex = f->hex * 16 + (uint32_t) h;
    f->esc = f->esc == 5 ? 0 : f->esc + 1;
    return 1;
}

/* Thread t takes byte c.  1: t is a successor; 0: it is not (or it split
 * and its successors went to out). */
static int
llm_gadvance(const llm_grammar_t *g, llm_gthread_t *t, uint8_t c,
    llm_gset_t *out)
{
    llm_gframe_t       *f = &t->f[t->depth - 1];
    const llm_gnode_t  *n = &g->nodes[f->node];

    switch (f->kind) {
    case LLM_F_STR:
        return llm_gstr_step(t, c);

    case LLM_F_KEY:
        return llm_gkey_step(g, t, c);

    case LLM_F_NUM:
        if (llm_gnum_step(f, c)) {
            return 1;
        }
        if (!llm_gnum_complete(f)) {
            return 0;
        }
        t->depth--;
        llm_gvalue_done(t);
        return llm_gadvance(g, t, c, out);

    case LLM_F_LIT:
        if (llm_glit_step(g, f, c)) {
            return 1;
        }
        if (!llm_glit_complete(g, f)) {
            return 0;
        }
        t->depth--;
        llm_gvalue_done(t);
        return llm_gadvance(g, t, c, out);
    }

    if (llm_gis_ws(c)) {
        return llm_gws(t);
    }
    t->ws = 0;

    switch (f->kind) {
    case LLM_F_ROOT:
        if (f->sub == LLM_R_DONE) {
            return 0;
        }
        return llm_gstart(g, t, g->root, c, out, 0);

    case LLM_F_OBJ:
        switch (f->sub) {
        case LLM_O_START:
            if (c == '}') {
                if (!llm_gobj_can_close(n, f)) {
                    return 0;
                }
                t->depth--;
                llm_gvalue_done(t);
                return 1;
            }
            /* fall through */
        case LLM_O_COMMA:
            return c == '"' && llm_gobj_key(g, t);
        case LLM_O_KEYDONE:
            if (c != ':') {
                return 0;
            }
            f->sub = LLM_O_COLON;
            return 1;
        case LLM_O_COLON:
            return llm_gstart(g, t, f->a == LLM_FREE_KEY ? n->additional
                                    : n->props[f->a].node, c, out, 0);
        default:    /* LLM_O_AFTER */
            if (c == ',') {
                if (llm_gkeys_open(g, n, f) == 0
                    && n->additional == LLM_GN_NONE)
                {
                    return 0;
                }
                f->sub = LLM_O_COMMA;
                return 1;
            }
            if (c == '}' && llm_gobj_can_close(n, f)) {
                t->depth--;
                llm_gvalue_done(t);
                return 1;
            }
            return 0;
        }

    default:    /* LLM_F_ARR */
        switch (f->sub) {
        case LLM_A_START:
            if (c == ']') {
                if (n->min_items > 0) {
                    return 0;
                }
                t->depth--;
                llm_gvalue_done(t);
                return 1;
            }
            if (n->max_items == 0) {
                return 0;
            }
            /* fall through */
        case LLM_A_COMMA:
            return llm_gstart(g, t, n->items, c, out, 0);
        default:    /* LLM_A_AFTER */
            if (c == ',' && f->a < n->max_items) {
                f->sub = LLM_A_COMMA;
                return 1;
            }
            if (c == ']' && f->a >= n->min_items) {
                t->depth--;
                llm_gvalue_done(t);
                return 1;
            }
            return 0;
        }
    }
}

/* out = the successors of every thread of in on byte c. */
static void
llm_gset_step(const llm_grammar_t *g, const llm_gset_t *in, uint8_t c,
    llm_gset_t *out)
{
    llm_gthread_t  w;

    out->n = 0;
    for (uint32_t i = 0; i < in->n; i++) {
        llm_gthread_copy(&w, &in->t[i]);
        if (llm_gadvance(g, &w, c, out)) {
            llm_gset_commit(out, &w);
        }
    }
}

static int
llm_gthread_complete(const llm_grammar_t *g, const llm_gthread_t *t)
{
    const llm_gframe_t *f = llm_gtop_c(t);

    if (t->depth == 1) {
        return f->sub == LLM_R_DONE;
    }
    if (t->depth == 2) {
        if (f->kind == LLM_F_NUM) {
            return llm_gnum_complete(f);
        }
        if (f->kind == LLM_F_LIT) {
            return llm_glit_complete(g, f);
        }
    }
    return 0;
}

static int
llm_gset_complete(const llm_grammar_t *g, const llm_gset_t *s)
{
    for (uint32_t i = 0; i < s->n; i++) {
        if (llm_gthread_complete(g, &s->t[i])) {
            return 1;
        }
    }
    return 0;
}

/* Every thread sits in a string body where string-safe bytes (complete
 * UTF-8, no '"', '\' or control byte) leave it unchanged. */
static int
llm_gset_plain_string(const llm_gset_t *s)
{
    for (uint32_t i = 0; i < s->n; i++) {
        const llm_gframe_t *f = llm_gtop_c(&s->t[i]);

        if (f->u8need != 0) {
            return 0;
        }
        if (f->kind == LLM_F_STR) {
            if (f->esc != 0) {
                return 0;
            }
        } else if (f->kind != LLM_F_KEY || f->m2 != 0 || !f->sub) {
            return 0;
        }
    }
    return s->n > 0;
}


/* States. */

static llm_gset_t *
llm_gstate_level(llm_gstate_t *st, uint32_t d)
{
    llm_gset_t  **lv;
    uint32_t      n;

    if (d >= st->n_lv) {
        n = d + 8;
        lv = realloc(st->lv, n * sizeof(*lv));
        if (lv == NULL) {
            return NULL;
        }
        memset(lv + st->n_lv, 0, (n - st->n_lv) * sizeof(*lv));
        st->lv = lv;
        st->n_lv = n;
    }
    if (st->lv[d] == NULL) {
        st->lv[d] = malloc(sizeof(llm_gset_t));
    }
    return st->lv[d];
}

void
llm_gstate_reset(llm_gstate_t *st)
{
    llm_gthread_t *t = &st->cur->t[0];

    st->finished = 0;
    st->cur->n = 1;
    memset(t, 0, offsetof(llm_gthread_t, f) + sizeof(llm_gframe_t));
    t->depth = 1;
    t->f[0].kind = LLM_F_ROOT;
    t->f[0].sub = LLM_R_START;
    t->f[0].node = st->g->root;
}

int
llm_gstate_create(llm_gstate_t **out, const llm_grammar_t *g)
{
    llm_gstate_t *st;

    *out = NULL;
    st = calloc(1, sizeof(*st));
    if (st == NULL) {
        return -ENOMEM;
    }
    st->g = g;
    st->cur = malloc(sizeof(llm_gset_t));
    if (st->cur == NULL) {
        free(st);
        return -ENOMEM;
    }
    llm_gstate_reset(st);
    *out = st;
    return 0;
}

void
llm_gstate_free(llm_gstate_t *st)
{
    if (st == NULL) {
        return;
    }
    for (uint32_t i = 0; i < st->n_lv; i++) {
        free(st->lv[i]);
    }
    free(st->lv);
    free(st->bits);
    free(st->cur);
    free(st);
}

int
llm_gstate_copy(llm_gstate_t *dst, const llm_gstate_t *src)
{
    if (dst->g != src->g) {
        return -EINVAL;
    }
    dst->finished = src->finished;
    dst->cur->n = src->cur->n;
    for (uint32_t i = 0; i < src->cur->n; i++) {
        llm_gthread_copy(&dst->cur->t[i], &src->cur->t[i]);
    }
    return 0;
}

int
llm_gstate_feed(llm_gstate_t *st, const char *s, size_t len)
{
    llm_gset_t  *a, *b, *in, *o;

    if (len == 0) {
        return 0;
    }
    if (st->finished) {
        return -EILSEQ;
    }
    a = llm_gstate_level(st, 0);
    b = llm_gstate_level(st, 1);
    if (a == NULL || b == NULL) {
        return -ENOMEM;
    }
    in = st->cur;
    for (size_t i = 0; i < len; i++) {
        o = (i & 1) ? b : a;
        llm_gset_step(st->g, in, (uint8_t) s[i], o);
        if (o->n == 0) {
            return -EILSEQ;
        }
        in = o;
    }
    st->cur->n = in->n;
    for (uint32_t i = 0; i < in->n; i++) {
        llm_gthread_copy(&st->cur->t[i], &in->t[i]);
    }
    return 0;
}

int
llm_gstate_complete(const llm_gstate_t *st)
{
    return st->finished || llm_gset_complete(st->g, st->cur);
}

int
llm_gstate_finished(const llm_gstate_t *st)
{
    return st->finished;
}

size_t
llm_gstate_next_bytes(const llm_gstate_t *st, uint8_t *buf, size_t n)
{
    llm_gset_t  *o;
    size_t       k = 0;

    if (st->finished) {
        return 0;
    }
    o = llm_gstate_level((llm_gstate_t *) st, 0);
    if (o == NULL) {
        return 0;
    }
    for (unsigned c = 0; c < 256 && k < n; c++) {
        llm_gset_step(st->g, st->cur, (uint8_t) c, o);
        if (o->n > 0) {
            buf[k++] = (uint8_t) c;
        }
    }
    return k;
}

int
llm_gstate_can_continue(const llm_gstate_t *st)
{
    uint8_t  b[1];

    return llm_gstate_next_bytes(st, b, 1) > 0;
}


/* The token index. */

typedef struct {
    const uint8_t  *s;
    uint32_t        len;
    int32_t         id;
} llm_tent_t;

static int
llm_tent_cmp(const void *a, const void *b)
{
    const llm_tent_t *x = a, *y = b;
    uint32_t          n = x->len < y->len ? x->len : y->len;
    int               c = memcmp(x->s, y->s, n);

    if (c != 0) {
        return c;
    }
    if (x->len != y->len) {
        return x->len < y->len ? -1 : 1;
    }
    return x->id < y->id ? -1 : x->id > y->id;
}

/* The longest prefix of s made of string-safe bytes. */
static uint32_t
llm_safe_prefix(const uint8_t *s, uint32_t len)
{
    llm_gframe_t  f;
    uint32_t      i, ok = 0;

    memset(&f, 0, sizeof(f));
    for (i = 0; i < len; i++) {
        if (s[i] < 0x20 || s[i] == '"' || s[i] == '\\'
            || !llm_gutf8_step(&f, s[i]))
        {
            break;
        }
        if (f.u8need == 0) {
            ok = i + 1;
        }
    }
    return ok;
}

/*
 * Preorder trie over sorted entries e[lo, hi) sharing their first d bytes;
 * the entries of length d end at node `at`.
 */
static int
llm_trie_build(llm_trie_t *t, uint32_t *cap, int32_t *next,
    const llm_tent_t *e, uint32_t lo, uint32_t hi, uint32_t d, uint32_t at)
{
    uint32_t  i = lo, j, node;
    int32_t  *tail = &t->n[at].tok;
    int       rc;

    while (i < hi && e[i].len == d) {
        *tail = e[i].id;
        tail = &next[e[i].id];
        i++;
    }
    *tail = -1;
    while (i < hi) {
        uint8_t b = e[i].s[d];

        for (j = i; j < hi && e[j].s[d] == b; j++) {
            /* void */
        }
        if (t->n_nodes == *cap) {
            llm_tnode_t *nn = realloc(t->n, *cap * 2 * sizeof(*nn));

            if (nn == NULL) {
                return -ENOMEM;
            }
            t->n = nn;
            *cap *= 2;
        }
        node = t->n_nodes++;
        t->n[node].byte = b;
        t->n[node].depth = (uint16_t) (d + 1);
        t->n[node].tok = -1;
        if (d + 1 > t->max_depth) {
            t->max_depth = d + 1;
        }
        rc = llm_trie_build(t, cap, next, e, i, j, d + 1, node);
        if (rc != 0) {
            return rc;
        }
        t->n[node].end = t->n_nodes;
        i = j;
    }
    return 0;
}

static int
llm_trie_make(llm_trie_t *t, int32_t *next, llm_tent_t *e, uint32_t n)
{
    uint32_t  cap = 1024;
    int       rc;

    qsort(e, n, sizeof(*e), llm_tent_cmp);
    t->n = malloc(cap * sizeof(*t->n));
    if (t->n == NULL) {
        return -ENOMEM;
    }
    t->n_nodes = 1;
    t->max_depth = 0;
    t->n[0].byte = 0;
    t->n[0].depth = 0;
    rc = llm_trie_build(t, &cap, next, e, 0, n, 0, 0);
    t->n[0].end = t->n_nodes;
    return rc;
}

void
llm_tokindex_free(llm_tokindex_t *ti)
{
    if (ti == NULL) {
        return;
    }
    free(ti->all.n);
    free(ti->unsafe.n);
    free(ti->next_all);
    free(ti->next_uns);
    free(ti->safe);
    free(ti->eog);
    free(ti);
}

int
llm_tokindex_create(llm_tokindex_t **out, const llm_vocab_t *v, char *err,
    size_t errlen)
{
    llm_tokindex_t  *ti;
    llm_tent_t      *all = NULL, *uns = NULL;
    uint32_t         nv = llm_vocab_n_tokens(v), na = 0, nu = 0, k;
    const char      *p;
    size_t           len;
    int              rc = -ENOMEM, type;

    *out = NULL;
    ti = calloc(1, sizeof(*ti));
    if (ti == NULL) {
        goto failed;
    }
    ti->v = v;
    ti->n_vocab = nv;
    ti->n_words = (nv + 63) / 64;
    ti->next_all = malloc((nv ? nv : 1) * sizeof(int32_t));
    ti->next_uns = malloc((nv ? nv : 1) * sizeof(int32_t));
    ti->safe = calloc(ti->n_words ? ti->n_words : 1, sizeof(uint64_t));
    ti->eog = malloc((nv ? nv : 1) * sizeof(int32_t));
    all = malloc((nv ? nv : 1) * sizeof(*all));
    uns = malloc((nv ? nv : 1) * sizeof(*uns));
    if (ti->next_all == NULL || ti->next_uns == NULL || ti->safe == NULL
        || ti->eog == NULL || all == NULL || uns == NULL)
    {
        goto failed;
    }
    for (uint32_t id = 0; id < nv; id++) {
        if (llm_vocab_is_eog(v, (int32_t) id)) {
            ti->eog[ti->n_eog++] = (int32_t) id;
            continue;
        }
        /* control, unknown and unused tokens are never text to emit */
        type = llm_vocab_token_type(v, (int32_t) id);
        if (llm_vocab_is_control(v, (int32_t) id) || type == 2 || type == 3
            || type == 5)
        {
            continue;
        }
        p = llm_token_bytes(v, (int32_t) id, 0, &len);
        if (len == 0 || len > 65535) {
            continue;
        }
        all[na].s = (const uint8_t *) p;
        all[na].len = (uint32_t) len;
        all[na].id = (int32_t) id;
        na++;
        k = llm_safe_prefix((const uint8_t *) p, (uint32_t) len);
        if (k == len) {
            ti->safe[id / 64] |= 1ull << (id % 64);
        } else {
            uns[nu].s = (const uint8_t *) p + k;
            uns[nu].len = (uint32_t) len - k;
            uns[nu].id = (int32_t) id;
            nu++;
        }
    }
    rc = llm_trie_make(&ti->all, ti->next_all, all, na);
    if (rc == 0) {
        rc = llm_trie_make(&ti->unsafe, ti->next_uns, uns, nu);
    }
    if (rc != 0) {
        goto failed;
    }
    free(all);
    free(uns);
    *out = ti;
    return 0;

failed:
    snprintf(err, errlen, "token index: %s", strerror(-rc));
    free(all);
    free(uns);
    llm_tokindex_free(ti);
    return rc;
}

uint32_t
llm_tokindex_n_vocab(const llm_tokindex_t *ti)
{
    return ti->n_vocab;
}

/* The baseline x86-64 build has no popcnt instruction: SWAR, with the
 * common all-clear and all-set words first. */
static inline uint32_t
llm_popcount64(uint64_t x)
{
    if (x == 0 || x == ~0ull) {
        return x ? 64 : 0;
    }
    x = x - ((x >> 1) & 0x5555555555555555ull);
    x = (x & 0x3333333333333333ull) + ((x >> 2) & 0x3333333333333333ull);
    x = (x + (x >> 4)) & 0x0f0f0f0f0f0f0f0full;
    return (uint32_t) ((x * 0x0101010101010101ull) >> 56);
}

/* Depth-first over trie t from state `start`: set the bit of every token
 * whose bytes the automaton accepts, skipping a subtree at its first
 * rejected byte. */
static int
llm_trie_walk(const llm_trie_t *t, const int32_t *next, llm_gstate_t *st,
    const llm_gset_t *start, uint64_t *bits)
{
    const llm_tnode_t  *nd;
    const llm_gset_t   *in;
    llm_gset_t         *o;
    uint32_t            i = 1;

    while (i < t->n_nodes) {
        nd = &t->n[i];
        in = nd->depth == 1 ? start : st->lv[nd->depth - 1];
        o = nd->depth < st->n_lv ? st->lv[nd->depth] : NULL;
        if (o == NULL) {
            o = llm_gstate_level(st, nd->depth);
            if (o == NULL) {
                return -ENOMEM;
            }
        }
        llm_gset_step(st->g, in, nd->byte, o);
        if (o->n == 0) {
            i = nd->end;
            continue;
        }
        for (int32_t id = nd->tok; id >= 0; id = next[id]) {
            bits[id / 64] |= 1ull << (id % 64);
        }
        i++;
    }
    return 0;
}

int
llm_tokindex_mask(const llm_tokindex_t *ti, llm_gstate_t *st,
    unsigned flags, float *logits, uint32_t n_vocab)
{
    uint32_t   nw = ti->n_words, allowed = 0, w, e;
    uint64_t  *bits, m;
    int        rc;

    if (st->n_bits < nw || st->bits == NULL) {
        free(st->bits);
        st->bits = malloc((nw ? nw : 1) * sizeof(uint64_t));
        if (st->bits == NULL) {
            st->n_bits = 0;
            return -ENOMEM;
        }
        st->n_bits = nw;
    }
    bits = st->bits;

    if (st->finished) {
        memset(bits, 0, nw * sizeof(uint64_t));
    } else if (llm_gset_plain_string(st->cur)) {
        memcpy(bits, ti->safe, nw * sizeof(uint64_t));
        rc = llm_trie_walk(&ti->unsafe, ti->next_uns, st, st->cur, bits);
        if (rc != 0) {
            return rc;
        }
    } else {
        memset(bits, 0, nw * sizeof(uint64_t));
        rc = llm_trie_walk(&ti->all, ti->next_all, st, st->cur, bits);
        if (rc != 0) {
            return rc;
        }
    }
    if ((flags & LLM_GMASK_EOG) && llm_gstate_complete(st)) {
        for (e = 0; e < ti->n_eog; e++) {
            bits[ti->eog[e] / 64] |= 1ull << (ti->eog[e] % 64);
        }
    }

    for (w = 0; w < nw; w++) {
        m = bits[w];
        allowed += llm_popcount64(m);
        if (w == nw - 1 && ti->n_vocab % 64) {
            m |= ~0ull << (ti->n_vocab % 64);      /* past the vocab */
        }
        if (m == ~0ull) {
            continue;
        }
        if (m == 0 && (w + 1) * 64 <= n_vocab) {
            float *l = logits + (size_t) w * 64;

            for (uint32_t j = 0; j < 64; j++) {     /* vectorizes */
                l[j] = -INFINITY;
            }
            continue;
        }
        for (m = ~m; m; m &= m - 1) {
            uint32_t id = w * 64 + (uint32_t) __builtin_ctzll(m);

            if (id < n_vocab) {
                logits[id] = -INFINITY;
            }
        }
    }
    for (uint32_t id = ti->n_vocab; id < n_vocab; id++) {
        logits[id] = -INFINITY;
    }
    return (int) allowed;
}

int
llm_tokindex_accept(const llm_tokindex_t *ti, llm_gstate_t *st,
    int32_t token)
{
    const char  *p;
    size_t       len;

    if (token < 0 || (uint32_t) token >= ti->n_vocab) {
        return -EILSEQ;
    }
    if (llm_vocab_is_eog(ti->v, token)) {
        if (!llm_gstate_complete(st)) {
            return -EILSEQ;
        }
        st->finished = 1;
        return 0;
    }
    if (st->finished || llm_vocab_is_control(ti->v, token)
        || llm_vocab_token_type(ti->v, token) == 2
        || llm_vocab_token_type(ti->v, token) == 5)
    {
        return -EILSEQ;
    }
    p = llm_token_bytes(ti->v, token, 0, &len);
    if (len == 0) {
        return -EILSEQ;
    }
    return llm_gstate_feed(st, p, len);
}
