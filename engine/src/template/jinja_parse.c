/*
 * Jinja lexer and parser: template text to the AST in jinja.h.
 *
 * The lexer follows jinja2's (lexer.py) rules exactly as Hugging Face
 * configures it: newlines normalised to \n and one trailing newline
 * dropped (keep_trailing_newline=False), "{%-" / "-%}" strip all
 * whitespace on that side, trim_blocks drops the first newline after a
 * block or comment tag, lstrip_blocks drops the spaces and tabs between a
 * line start and a block or comment tag, and a tag ends only where its
 * brackets balance.  The parser is jinja2's recursive descent (parser.py)
 * with the same precedence: condexpr < or < and < not < compare < + - <
 * ~ < * / // % < ** < unary - + < primary with postfix . [] () and
 * filter | / test "is" chains.
 */

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jinja.h"

typedef enum {
    TK_EOF = 0,
    TK_DATA,
    TK_VAR_BEGIN,
    TK_VAR_END,
    TK_BLOCK_BEGIN,
    TK_BLOCK_END,
    TK_NAME,
    TK_STRING,
    TK_INT,
    TK_FLOAT,
    TK_OP
} tk_type_t;

typedef struct {
    uint32_t     type;
    uint32_t     line;
    const char  *s;          /* NAME, OP, DATA, STRING (decoded) */
    size_t       n;
    int64_t      i;
    double       f;
} tok_t;

typedef struct {
    jj_arena_t  *arena;
    tok_t       *toks;
    size_t       ntoks;
    size_t       cap;
    size_t       pos;
    int          depth;
    char        *err;
    size_t       errlen;
    int          failed;
    unsigned     n_varargs;  /* NAME "varargs" / "kwargs" seen so far */
    unsigned     n_kwargs;
    int          soft;       /* inside {% if %}: unknown filters/tests
                                fail at render, as jinja2's soft frames */
    const char *const *ends; /* end tags of the innermost open block */
} parser_t;

static int
perr(parser_t *p, uint32_t line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int
perr(parser_t *p, uint32_t line, const char *fmt, ...)
{
    va_list  ap;
    size_t   n;

    if (p->failed) {
        return -1;
    }
    p->failed = 1;
    va_start(ap, fmt);
    vsnprintf(p->err, p->errlen, fmt, ap);
    va_end(ap);
    n = strlen(p->err);
    if (n < p->errlen) {
        snprintf(p->err + n, p->errlen - n, " (line %u)", line);
    }
    return -1;
}

/* ---- lexer ---- */

static int
push_tok(parser_t *p, uint32_t type, uint32_t line, const char *s,
    size_t n)
{
    tok_t  *t;
    size_t  cap;

    if (p->ntoks == p->cap) {
        cap = p->cap ? p->cap * 2 : 256;
        t = realloc(p->toks, cap * sizeof(tok_t));
        if (t == NULL) {
            return perr(p, line, "out of memory");
        }
        p->toks = t;
        p->cap = cap;
    }
    t = &p->toks[p->ntoks++];
    memset(t, 0, sizeof(*t));
    t->type = type;
    t->line = line;
    t->s = s;
    t->n = n;
    return 0;
}

static int
is_ws(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f'
           || c == '\v';
}

static int
is_name_start(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'
           || (unsigned char) c >= 0x80;
}

static int
is_name_char(char c)
{
    return is_name_start(c) || (c >= '0' && c <= '9');
}

static int
is_digit(char c)
{
    return c >= '0' && c <= '9';
}

static uint32_t
count_nl(const char *s, size_t n)
{
    uint32_t  k = 0;
    size_t    i;

    for (i = 0; i < n; i++) {
        k += s[i] == '\n';
    }
    return k;
}

/* Python's "unicode-escape" decoding of a string literal's body. */
static int
unescape(parser_t *p, uint32_t line, const char *s, size_t n, tok_t *t)
{
    char      *d;
    size_t     i, o = 0, k, w;
    uint32_t   cp;
    char       c;

    d = jj_alloc(p->arena, n + 1);
    if (d == NULL) {
        return perr(p, line, "out of memory");
    }
    for (i = 0; i < n; i++) {
        if (s[i] != '\\' || i + 1 == n) {
            d[o++] = s[i];
            continue;
        }
        c = s[++i];
        switch (c) {
        case '\n': break;
        case '\\': d[o++] = '\\'; break;
        case '\'': d[o++] = '\''; break;
        case '"': d[o++] = '"'; break;
        case 'a': d[o++] = '\a'; break;
        case 'b': d[o++] = '\b'; break;
        case 'f': d[o++] = '\f'; break;
        case 'n': d[o++] = '\n'; break;
        case 'r': d[o++] = '\r'; break;
        case 't': d[o++] = '\t'; break;
        case 'v': d[o++] = '\v'; break;
        case 'x':
        case 'u':
        case 'U':
            w = c == 'x' ? 2 : c == 'u' ? 4 : 8;
            cp = 0;
            for (k = 0; k < w; k++) {
                char h = i + 1 + k < n ? s[i + 1 + k] : 0;
                int  v = h >= '0' && h <= '9' ? h - '0'
                         : h >= 'a' && h <= 'f' ? h - 'a' + 10
                         : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
                if (v < 0) {
                    return perr(p, line, "truncated \\%cXX escape", c);
                }
                cp = cp * 16 + (uint32_t) v;
            }
            if (cp > 0x10ffff) {
                return perr(p, line, "illegal Unicode character");
            }
            i += w;
            o += (size_t) jj_utf8_encode(d + o, cp);
            break;
        default:
            if (c >= '0' && c <= '7') {
                cp = 0;
                for (k = 0; k < 3 && i < n && s[i] >= '0' && s[i] <= '7';
                     k++, i++)
                {
                    cp = cp * 8 + (uint32_t) (s[i] - '0');
                }
                i--;
                o += (size_t) jj_utf8_encode(d + o, cp);
            } else {
                d[o++] = '\\';
                d[o++] = c;
            }
        }
    }
    t->s = d;
    t->n = o;
    return 0;
}

static const char *const ops2[] = { "//", "**", "==", "!=", ">=", "<=",
                                    NULL };
static const char ops1[] = "+-/*%~[](){}=><.:|,;";

/*
 * Lex the inside of a {{ }} or {% %} tag starting at *pos; stops after the
 * end marker found at bracket depth 0 and applies its whitespace control.
 */
static int
lex_tag(parser_t *p, const char *s, size_t len, size_t *pos, uint32_t *line,
    int block, int *ended_nl)
{
    size_t       i = *pos, j;
    int          depth = 0;
    char         q, stack[256];
    const char  *e = block ? "%}" : "}}";
    tok_t       *t;

    for ( ;; ) {
        while (i < len && is_ws(s[i])) {
            *line += s[i] == '\n';
            i++;
        }
        if (i >= len) {
            return perr(p, *line, "unexpected end of template, expected "
                        "end of %s", block ? "block" : "print statement");
        }
        if (depth == 0) {
            if (block && s[i] == '+' && i + 2 < len + 0
                && strncmp(s + i + 1, e, 2) == 0)
            {
                i += 3;
                *ended_nl = 0;
                break;
            }
            if (s[i] == '-' && i + 2 < len + 1 && len - i >= 3
                && strncmp(s + i + 1, e, 2) == 0)
            {
                i += 3;
                *ended_nl = 0;
                while (i < len && is_ws(s[i])) {
                    *ended_nl = s[i] == '\n';
                    *line += s[i] == '\n';
                    i++;
                }
                break;
            }
            if (len - i >= 2 && strncmp(s + i, e, 2) == 0) {
                i += 2;
                *ended_nl = 0;
                if (block && i < len && s[i] == '\n') {
                    i++;
                    (*line)++;
                    *ended_nl = 1;
                }
                break;
            }
        }
        if (is_digit(s[i])) {
            /* integer or float, jinja2's float_re before integer_re */
            j = i;
            while (j < len && (is_digit(s[j]) || s[j] == '_')) {
                j++;
            }
            if ((j + 1 < len && s[j] == '.' && is_digit(s[j + 1]))
                || (j < len && (s[j] == 'e' || s[j] == 'E')
                    && ((j + 1 < len && is_digit(s[j + 1]))
                        || (j + 2 < len && (s[j + 1] == '+'
                                            || s[j + 1] == '-')
                            && is_digit(s[j + 2])))))
            {
                char  buf[128];
                size_t k, o = 0;

                if (s[j] == '.') {
                    j++;
                    while (j < len && (is_digit(s[j]) || s[j] == '_')) {
                        j++;
                    }
                }
                if (j < len && (s[j] == 'e' || s[j] == 'E')
                    && ((j + 1 < len && is_digit(s[j + 1]))
                        || (j + 2 < len && (s[j + 1] == '+'
                                            || s[j + 1] == '-')
                            && is_digit(s[j + 2]))))
                {
                    j += 2;
                    while (j < len && (is_digit(s[j]) || s[j] == '_')) {
                        j++;
                    }
                }
                for (k = i; k < j && o + 1 < sizeof(buf); k++) {
                    if (s[k] != '_') {
                        buf[o++] = s[k];
                    }
                }
                buf[o] = '\0';
                if (push_tok(p, TK_FLOAT, *line, s + i, j - i) != 0) {
                    return -1;
                }
                p->toks[p->ntoks - 1].f = strtod(buf, NULL);
            } else {
                int64_t  v = 0;

                for (j = i; j < len && (is_digit(s[j]) || s[j] == '_'); j++)
                {
                    if (s[j] != '_') {
                        if (v > (INT64_MAX - 9) / 10) {
                            return perr(p, *line, "integer literal too "
                                        "large");
                        }
                        v = v * 10 + (s[j] - '0');
                    }
                }
                if (push_tok(p, TK_INT, *line, s + i, j - i) != 0) {
                    return -1;
                }
                p->toks[p->ntoks - 1].i = v;
            }
            i = j;
            continue;
        }
        if (is_name_start(s[i])) {
            for (j = i; j < len && is_name_char(s[j]); j++) {
            }
            if (push_tok(p, TK_NAME, *line, s + i, j - i) != 0) {
                return -1;
            }
            i = j;
            continue;
        }
        if (s[i] == '\'' || s[i] == '"') {
            q = s[i];
            for (j = i + 1; j < len && s[j] != q; j++) {
                if (s[j] == '\\') {
                    j++;
                }
            }
            if (j >= len) {
                return perr(p, *line, "unexpected char %c", q);
            }
            if (push_tok(p, TK_STRING, *line, NULL, 0) != 0) {
                return -1;
            }
            t = &p->toks[p->ntoks - 1];
            if (unescape(p, *line, s + i + 1, j - i - 1, t) != 0) {
                return -1;
            }
            *line += count_nl(s + i, j - i);
            i = j + 1;
            continue;
        }
        for (j = 0; ops2[j] != NULL; j++) {
            if (len - i >= 2 && strncmp(s + i, ops2[j], 2) == 0) {
                break;
            }
        }
        if (ops2[j] != NULL) {
            if (push_tok(p, TK_OP, *line, s + i, 2) != 0) {
                return -1;
            }
            i += 2;
            continue;
        }
        if (s[i] != '\0' && strchr(ops1, s[i]) != NULL) {
            if (s[i] == '(' || s[i] == '[' || s[i] == '{') {
                if (depth == (int) sizeof(stack)) {
                    return perr(p, *line, "brackets nested too deeply");
                }
                stack[depth++] = s[i] == '(' ? ')' : s[i] == '[' ? ']' : '}';
            } else if (s[i] == ')' || s[i] == ']' || s[i] == '}') {
                if (depth == 0) {
                    return perr(p, *line, "unexpected '%c'", s[i]);
                }
                if (stack[depth - 1] != s[i]) {
                    return perr(p, *line, "unexpected '%c', expected '%c'",
                                s[i], stack[depth - 1]);
                }
                depth--;
            }
            if (push_tok(p, TK_OP, *line, s + i, 1) != 0) {
                return -1;
            }
            i++;
            continue;
        }
        return perr(p, *line, "unexpected char '%c'", s[i]);
    }
    *pos = i;
    return push_tok(p, block ? TK_BLOCK_END : TK_VAR_END, *line, NULL, 0);
}

/* Is s[i..] "{% raw %}" (with optional - / + and spaces)?  Length or 0. */
static size_t
match_raw(const char *s, size_t len, size_t i, const char *word, int *minus)
{
    size_t  j = i + 2, wl = strlen(word);

    *minus = 0;
    if (j < len && (s[j] == '-' || s[j] == '+')) {
        j++;
    }
    while (j < len && is_ws(s[j])) {
        j++;
    }
    if (len - j < wl || strncmp(s + j, word, wl) != 0) {
        return 0;
    }
    j += wl;
    while (j < len && is_ws(s[j])) {
        j++;
    }
    if (j < len && s[j] == '-') {
        *minus = 1;
        j++;
    }
    if (len - j < 2 || s[j] != '%' || s[j + 1] != '}') {
        return 0;
    }
    return j + 2 - i;
}

static int
emit_data(parser_t *p, const char *s, size_t n, uint32_t line)
{
    if (n == 0) {
        return 0;
    }
    return push_tok(p, TK_DATA, line, s, n);
}

/* Text before a tag: "-" strips it, lstrip_blocks strips a blank line. */
static size_t
strip_before(const char *text, size_t n, char sign, int is_var,
    int line_starting)
{
    size_t  l, k;

    if (sign == '-') {
        while (n > 0 && is_ws(text[n - 1])) {
            n--;
        }
        return n;
    }
    if (sign == '+' || is_var) {
        return n;
    }
    for (l = n; l > 0 && text[l - 1] != '\n'; l--) {
    }
    if (l == 0 && !line_starting) {
        return n;
    }
    if (l == n) {
        return n;
    }
    for (k = l; k < n; k++) {
        if (!is_ws(text[k])) {
            return n;
        }
    }
    return l;
}

static int
lex(parser_t *p, const char *s, size_t len)
{
    size_t       pos = 0, i, k, n, m;
    uint32_t     line = 1;
    int          line_starting = 1, minus, ended_nl;
    const char  *q;
    char         sign;

    while (pos < len) {
        /* next tag opener */
        for (i = pos; i + 1 < len; i++) {
            if (s[i] == '{' && (s[i + 1] == '{' || s[i + 1] == '%'
                                || s[i + 1] == '#'))
            {
                break;
            }
        }
        if (i + 1 >= len) {
            if (emit_data(p, s + pos, len - pos, line) != 0) {
                return -1;
            }
            break;
        }
        sign = i + 2 < len && (s[i + 2] == '-' || s[i + 2] == '+')
               ? s[i + 2] : 0;
        if (s[i + 1] == '{' && sign == '+') {
            sign = 0;         /* "{{+" is not a strip sign */
        }
        n = strip_before(s + pos, i - pos, sign, s[i + 1] == '{',
                         line_starting);
        if (emit_data(p, s + pos, n, line) != 0) {
            return -1;
        }
        line += count_nl(s + pos, i - pos);
        pos = i + 2 + (sign ? 1 : 0);

        if (s[i + 1] == '#') {
            for (k = pos; k + 1 < len; k++) {
                if (s[k] == '#' && s[k + 1] == '}') {
                    break;
                }
            }
            if (k + 1 >= len) {
                return perr(p, line, "Missing end of comment tag");
            }
            line += count_nl(s + pos, k - pos);
            ended_nl = 0;
            if (k > pos && s[k - 1] == '-') {
                pos = k + 2;
                while (pos < len && is_ws(s[pos])) {
                    ended_nl = s[pos] == '\n';
                    line += s[pos] == '\n';
                    pos++;
                }
            } else if (k > pos && s[k - 1] == '+') {
                pos = k + 2;
            } else {
                pos = k + 2;
                if (pos < len && s[pos] == '\n') {
                    pos++;
                    line++;
                    ended_nl = 1;
                }
            }
            line_starting = ended_nl;
            continue;
        }

        if (s[i + 1] == '%' && (m = match_raw(s, len, i, "raw", &minus))) {
            pos = i + m;
            if (minus) {
                while (pos < len && is_ws(s[pos])) {
                    line += s[pos] == '\n';
                    pos++;
                }
            } else if (pos < len && s[pos] == '\n') {
                pos++;
                line++;
            }
            for (q = s + pos; ; q++) {
                q = memchr(q, '{', (size_t) (s + len - q));
                if (q == NULL) {
                    return perr(p, line, "Missing end of raw directive");
                }
                if (q + 1 < s + len && q[1] == '%'
                    && (m = match_raw(s, len, (size_t) (q - s), "endraw",
                                      &minus)))
                {
                    break;
                }
            }
            k = (size_t) (q - s);
            sign = k + 2 < len && (s[k + 2] == '-' || s[k + 2] == '+')
                   ? s[k + 2] : 0;
            n = strip_before(s + pos, k - pos, sign, 0, 0);
            if (emit_data(p, s + pos, n, line) != 0) {
                return -1;
            }
            line += count_nl(s + pos, k + m - pos);
            pos = k + m;
            ended_nl = 0;
            if (minus) {
                while (pos < len && is_ws(s[pos])) {
                    ended_nl = s[pos] == '\n';
                    line += s[pos] == '\n';
                    pos++;
                }
            } else if (pos < len && s[pos] == '\n') {
                pos++;
                line++;
                ended_nl = 1;
            }
            line_starting = ended_nl;
            continue;
        }

        if (push_tok(p, s[i + 1] == '{' ? TK_VAR_BEGIN : TK_BLOCK_BEGIN,
                     line, NULL, 0) != 0)
        {
            return -1;
        }
        ended_nl = 0;
        if (lex_tag(p, s, len, &pos, &line, s[i + 1] == '%', &ended_nl)
            != 0)
        {
            return -1;
        }
        line_starting = ended_nl;
    }
    return push_tok(p, TK_EOF, line, NULL, 0);
}

/* ---- parser helpers ---- */

static tok_t *
cur(parser_t *p)
{
    return &p->toks[p->pos];
}

static tok_t *
peek(parser_t *p, size_t k)
{
    return p->pos + k < p->ntoks ? &p->toks[p->pos + k]
                                 : &p->toks[p->ntoks - 1];
}

static int
tok_is_op(const tok_t *t, const char *op)
{
    return t->type == TK_OP && t->n == strlen(op)
           && memcmp(t->s, op, t->n) == 0;
}

static int
tok_is_name(const tok_t *t, const char *name)
{
    return t->type == TK_NAME && t->n == strlen(name)
           && memcmp(t->s, name, t->n) == 0;
}

static const char *
tok_desc(const tok_t *t, char *buf, size_t len)
{
    const char  *d = NULL;

    /* jinja2's describe_token, quoted as its messages quote it */
    switch (t->type) {
    case TK_EOF: d = "end of template"; break;
    case TK_VAR_END: d = "end of print statement"; break;
    case TK_BLOCK_END: d = "end of statement block"; break;
    case TK_BLOCK_BEGIN: d = "begin of statement block"; break;
    case TK_VAR_BEGIN: d = "begin of print statement"; break;
    case TK_DATA: d = "template data / text"; break;
    case TK_STRING: d = "string"; break;
    case TK_INT: d = "integer"; break;
    case TK_FLOAT: d = "float"; break;
    default:
        break;
    }
    if (d != NULL) {
        snprintf(buf, len, "'%s'", d);
    } else {
        snprintf(buf, len, "'%.*s'", (int) (t->n < 40 ? t->n : 40), t->s);
    }
    return buf;
}

/* " Jinja was looking for ... The innermost block ..." for messages. */
static void
looking_for(parser_t *p, char *buf, size_t len)
{
    const char *const  *e = p->ends;
    size_t              o = 0, k;

    buf[0] = '\0';
    if (e == NULL) {
        return;
    }
    o += (size_t) snprintf(buf + o, len - o, " Jinja was looking for the "
                           "following tags: ");
    for (k = 0; e[k] != NULL && o < len; k++) {
        o += (size_t) snprintf(buf + o, len - o, "%s'%s'", k ? " or " : "",
                               e[k]);
    }
    for (k = 0; e[k] != NULL && o < len; k++) {
        if (strncmp(e[k], "end", 3) == 0) {
            snprintf(buf + o, len - o, ". The innermost block that needs to "
                     "be closed is '%s'.", e[k] + 3);
            return;
        }
    }
    if (o < len) {
        snprintf(buf + o, len - o, ".");
    }
}

static int
expect_op(parser_t *p, const char *op)
{
    char  buf[64];

    if (!tok_is_op(cur(p), op)) {
        return perr(p, cur(p)->line, "expected token '%s', got %s", op,
                    tok_desc(cur(p), buf, sizeof(buf)));
    }
    p->pos++;
    return 0;
}

static int
expect_type(parser_t *p, uint32_t type, const char *what)
{
    char  buf[64];

    if (cur(p)->type != type) {
        return perr(p, cur(p)->line, "expected %s, got %s", what,
                    tok_desc(cur(p), buf, sizeof(buf)));
    }
    p->pos++;
    return 0;
}

static jj_node_t *
node(parser_t *p, uint32_t type, uint32_t line)
{
    jj_node_t  *n;

    n = jj_alloc(p->arena, sizeof(jj_node_t));
    if (n == NULL) {
        perr(p, line, "out of memory");
        return NULL;
    }
    n->type = (uint16_t) type;
    n->line = line;
    return n;
}

/* A growable array of node pointers, copied into the arena when done. */
typedef struct {
    jj_node_t   **v;
    const char  **names;
    uint32_t      n;
    uint32_t      cap;
} nvec_t;

static int
nvec_push(parser_t *p, nvec_t *nv, jj_node_t *n, const char *name)
{
    void      *x, *y;
    uint32_t   cap;

    if (nv->n == nv->cap) {
        cap = nv->cap ? nv->cap * 2 : 8;
        x = jj_alloc(p->arena, cap * sizeof(jj_node_t *));
        y = jj_alloc(p->arena, cap * sizeof(char *));
        if (x == NULL || y == NULL) {
            return perr(p, 0, "out of memory");
        }
        if (nv->n) {
            memcpy(x, nv->v, nv->n * sizeof(jj_node_t *));
            memcpy(y, nv->names, nv->n * sizeof(char *));
        }
        nv->v = x;
        nv->names = y;
        nv->cap = cap;
    }
    nv->names[nv->n] = name;
    nv->v[nv->n++] = n;
    return 0;
}

static const char *
name_dup(parser_t *p, const tok_t *t)
{
    char  *s;

    s = jj_alloc(p->arena, t->n + 1);
    if (s == NULL) {
        perr(p, t->line, "out of memory");
        return NULL;
    }
    memcpy(s, t->s, t->n);
    return s;
}

static jj_node_t *parse_expression(parser_t *p, int with_condexpr);
static jj_node_t *parse_or(parser_t *p);
static jj_node_t *parse_tuple(parser_t *p, int simplified, int with_condexpr,
    const char *extra_end, int explicit_parens);
static jj_node_t *parse_unary(parser_t *p, int with_filter);
static jj_node_t *parse_primary(parser_t *p);
static jj_node_t *parse_postfix(parser_t *p, jj_node_t *n);
static jj_node_t *parse_filter_expr(parser_t *p, jj_node_t *n);
static jj_node_t *parse_filter(parser_t *p, jj_node_t *n, int start_inline);

/* Call arguments "(a, b, k=v)" into n->kids / n->kids2 + n->names. */
static int
parse_call_args(parser_t *p, jj_node_t *n)
{
    nvec_t      args = { 0 }, kw = { 0 };
    jj_node_t  *e;
    const char *name;

    if (expect_op(p, "(") != 0) {
        return -1;
    }
    while (!tok_is_op(cur(p), ")")) {
        if (args.n + kw.n > 0 && expect_op(p, ",") != 0) {
            return -1;
        }
        if (tok_is_op(cur(p), ")")) {
            break;
        }
        if (tok_is_op(cur(p), "*") || tok_is_op(cur(p), "**")) {
            return perr(p, cur(p)->line, "unsupported construct: *args or "
                        "**kwargs in a call");
        }
        if (cur(p)->type == TK_NAME && tok_is_op(peek(p, 1), "=")) {
            name = name_dup(p, cur(p));
            p->pos += 2;
            e = parse_expression(p, 1);
            if (name == NULL || e == NULL || nvec_push(p, &kw, e, name)) {
                return -1;
            }
        } else {
            if (kw.n) {
                return perr(p, cur(p)->line, "invalid syntax for function "
                            "call expression");
            }
            e = parse_expression(p, 1);
            if (e == NULL || nvec_push(p, &args, e, NULL) != 0) {
                return -1;
            }
        }
    }
    p->pos++;
    n->kids = args.v;
    n->nkids = args.n;
    n->kids2 = kw.v;
    n->nkids2 = kw.n;
    n->names = kw.names;
    n->nnames = kw.n;
    return 0;
}

static jj_node_t *
parse_condexpr(parser_t *p)
{
    jj_node_t  *e1, *e2, *e3, *n;
    uint32_t    line = cur(p)->line;

    e1 = parse_or(p);
    while (e1 != NULL && tok_is_name(cur(p), "if")) {
        p->pos++;
        e2 = parse_or(p);
        if (e2 == NULL) {
            return NULL;
        }
        e3 = NULL;
        if (tok_is_name(cur(p), "else")) {
            p->pos++;
            e3 = parse_condexpr(p);
            if (e3 == NULL) {
                return NULL;
            }
        }
        n = node(p, JN_CONDEXPR, line);
        if (n == NULL) {
            return NULL;
        }
        n->a = e2;
        n->b = e1;
        n->c = e3;
        e1 = n;
    }
    return e1;
}

static jj_node_t *
parse_expression(parser_t *p, int with_condexpr)
{
    jj_node_t  *n;

    if (++p->depth > JJ_MAX_PARSE_DEPTH) {
        perr(p, cur(p)->line, "expression nested too deeply");
        return NULL;
    }
    n = with_condexpr ? parse_condexpr(p) : parse_or(p);
    p->depth--;
    return n;
}

static jj_node_t *parse_not(parser_t *p);
static jj_node_t *parse_compare(parser_t *p);
static jj_node_t *parse_math1(parser_t *p);

static jj_node_t *
binary(parser_t *p, uint32_t type, uint32_t op, jj_node_t *a, jj_node_t *b,
    uint32_t line)
{
    jj_node_t  *n;

    if (a == NULL || b == NULL) {
        return NULL;
    }
    n = node(p, type, line);
    if (n == NULL) {
        return NULL;
    }
    n->op = (uint16_t) op;
    n->a = a;
    n->b = b;
    return n;
}

static jj_node_t *
parse_and(parser_t *p)
{
    jj_node_t  *n = parse_not(p);
    uint32_t    line;

    while (n != NULL && tok_is_name(cur(p), "and")) {
        line = cur(p)->line;
        p->pos++;
        n = binary(p, JN_AND, 0, n, parse_not(p), line);
    }
    return n;
}

static jj_node_t *
parse_or(parser_t *p)
{
    jj_node_t  *n = parse_and(p);
    uint32_t    line;

    while (n != NULL && tok_is_name(cur(p), "or")) {
        line = cur(p)->line;
        p->pos++;
        n = binary(p, JN_OR, 0, n, parse_and(p), line);
    }
    return n;
}

static jj_node_t *
parse_not(parser_t *p)
{
    jj_node_t  *n, *e;
    uint32_t    line = cur(p)->line;

    if (tok_is_name(cur(p), "not")) {
        p->pos++;
        if (++p->depth > JJ_MAX_PARSE_DEPTH) {
            perr(p, line, "expression nested too deeply");
            return NULL;
        }
        e = parse_not(p);
        p->depth--;
        if (e == NULL || (n = node(p, JN_NOT, line)) == NULL) {
            return NULL;
        }
        n->a = e;
        return n;
    }
    return parse_compare(p);
}

static jj_node_t *
parse_compare(parser_t *p)
{
    static const struct { const char *s; uint16_t op; } cmp[] = {
        { "==", JOP_EQ }, { "!=", JOP_NE }, { "<", JOP_LT },
        { "<=", JOP_LE }, { ">", JOP_GT }, { ">=", JOP_GE }
    };
    jj_node_t  *n, *e, *cn = NULL;
    nvec_t      operands = { 0 };
    uint16_t    opbuf[64];
    uint32_t    line = cur(p)->line, op, k;
    size_t      i;

    n = parse_math1(p);
    if (n == NULL) {
        return NULL;
    }
    for ( ;; ) {
        op = 0;
        for (i = 0; i < sizeof(cmp) / sizeof(cmp[0]); i++) {
            if (tok_is_op(cur(p), cmp[i].s)) {
                op = cmp[i].op;
                p->pos++;
                break;
            }
        }
        if (op == 0 && tok_is_name(cur(p), "in")) {
            op = JOP_IN;
            p->pos++;
        } else if (op == 0 && tok_is_name(cur(p), "not")
                   && tok_is_name(peek(p, 1), "in"))
        {
            op = JOP_NOTIN;
            p->pos += 2;
        }
        if (op == 0) {
            break;
        }
        if (operands.n == 64) {
            perr(p, line, "comparison chain too long");
            return NULL;
        }
        e = parse_math1(p);
        if (e == NULL || nvec_push(p, &operands, e, NULL) != 0) {
            return NULL;
        }
        opbuf[operands.n - 1] = (uint16_t) op;
    }
    if (operands.n == 0) {
        return n;
    }
    cn = node(p, JN_COMPARE, line);
    if (cn == NULL) {
        return NULL;
    }
    cn->a = n;
    cn->kids = operands.v;
    cn->nkids = operands.n;
    cn->ops = jj_alloc(p->arena, operands.n * sizeof(uint16_t));
    if (cn->ops == NULL) {
        perr(p, line, "out of memory");
        return NULL;
    }
    for (k = 0; k < operands.n; k++) {
        cn->ops[k] = opbuf[k];
    }
    return cn;
}

static jj_node_t *
parse_pow(parser_t *p)
{
    jj_node_t  *n = parse_unary(p, 1);
    uint32_t    line;

    while (n != NULL && tok_is_op(cur(p), "**")) {
        line = cur(p)->line;
        p->pos++;
        n = binary(p, JN_BINOP, JOP_POW, n, parse_unary(p, 1), line);
    }
    return n;
}

static jj_node_t *
parse_math2(parser_t *p)
{
    jj_node_t  *n = parse_pow(p);
    uint32_t    line, op;

    while (n != NULL) {
        if (tok_is_op(cur(p), "*")) {
            op = JOP_MUL;
        } else if (tok_is_op(cur(p), "/")) {
            op = JOP_DIV;
        } else if (tok_is_op(cur(p), "//")) {
            op = JOP_FLOORDIV;
        } else if (tok_is_op(cur(p), "%")) {
            op = JOP_MOD;
        } else {
            break;
        }
        line = cur(p)->line;
        p->pos++;
        n = binary(p, JN_BINOP, op, n, parse_pow(p), line);
    }
    return n;
}

static jj_node_t *
parse_concat(parser_t *p)
{
    jj_node_t  *n = parse_math2(p), *c, *e;
    nvec_t      args = { 0 };
    uint32_t    line = cur(p)->line;

    if (n == NULL || !tok_is_op(cur(p), "~")) {
        return n;
    }
    if (nvec_push(p, &args, n, NULL) != 0) {
        return NULL;
    }
    while (tok_is_op(cur(p), "~")) {
        p->pos++;
        e = parse_math2(p);
        if (e == NULL || nvec_push(p, &args, e, NULL) != 0) {
            return NULL;
        }
    }
    c = node(p, JN_CONCAT, line);
    if (c == NULL) {
        return NULL;
    }
    c->kids = args.v;
    c->nkids = args.n;
    return c;
}

static jj_node_t *
parse_math1(parser_t *p)
{
    jj_node_t  *n = parse_concat(p);
    uint32_t    line, op;

    while (n != NULL) {
        if (tok_is_op(cur(p), "+")) {
            op = JOP_ADD;
        } else if (tok_is_op(cur(p), "-")) {
            op = JOP_SUB;
        } else {
            break;
        }
        line = cur(p)->line;
        p->pos++;
        n = binary(p, JN_BINOP, op, n, parse_concat(p), line);
    }
    return n;
}

static jj_node_t *
parse_unary(parser_t *p, int with_filter)
{
    jj_node_t  *n, *e;
    uint32_t    line = cur(p)->line;

    if (++p->depth > JJ_MAX_PARSE_DEPTH) {
        perr(p, line, "expression nested too deeply");
        return NULL;
    }
    if (tok_is_op(cur(p), "-") || tok_is_op(cur(p), "+")) {
        int neg = tok_is_op(cur(p), "-");

        p->pos++;
        e = parse_unary(p, 0);
        if (e == NULL || (n = node(p, neg ? JN_NEG : JN_POS, line)) == NULL)
        {
            return NULL;
        }
        n->a = e;
    } else {
        n = parse_primary(p);
    }
    if (n != NULL) {
        n = parse_postfix(p, n);
    }
    if (n != NULL && with_filter) {
        n = parse_filter_expr(p, n);
    }
    p->depth--;
    return n;
}

static jj_node_t *
parse_primary(parser_t *p)
{
    tok_t      *t = cur(p);
    jj_node_t  *n, *k, *v;
    nvec_t      items = { 0 };
    char        buf[64], *s;
    size_t      len, o;
    size_t      start;

    switch (t->type) {
    case TK_NAME:
        if (tok_is_name(t, "true") || tok_is_name(t, "True")
            || tok_is_name(t, "false") || tok_is_name(t, "False"))
        {
            n = node(p, JN_CONST, t->line);
            if (n != NULL) {
                n->val = jv_bool(t->s[0] == 't' || t->s[0] == 'T');
            }
        } else if (tok_is_name(t, "none") || tok_is_name(t, "None")) {
            n = node(p, JN_CONST, t->line);
            if (n != NULL) {
                n->val = jv_none();
            }
        } else {
            n = node(p, JN_NAME, t->line);
            if (n != NULL) {
                n->name = name_dup(p, t);
                n->namelen = t->n;
            }
            p->n_varargs += tok_is_name(t, "varargs");
            p->n_kwargs += tok_is_name(t, "kwargs");
        }
        p->pos++;
        return n;
    case TK_STRING:
        start = p->pos;
        len = 0;
        while (cur(p)->type == TK_STRING) {
            len += cur(p)->n;
            p->pos++;
        }
        n = node(p, JN_CONST, t->line);
        s = jj_alloc(p->arena, len + 1);
        if (n == NULL || s == NULL) {
            perr(p, t->line, "out of memory");
            return NULL;
        }
        for (o = 0; start < p->pos; start++) {
            memcpy(s + o, p->toks[start].s, p->toks[start].n);
            o += p->toks[start].n;
        }
        n->val = jv_strn(s, len);
        return n;
    case TK_INT:
    case TK_FLOAT:
        n = node(p, JN_CONST, t->line);
        if (n != NULL) {
            n->val = t->type == TK_INT ? jv_int(t->i) : jv_float(t->f);
        }
        p->pos++;
        return n;
    case TK_OP:
        if (tok_is_op(t, "(")) {
            p->pos++;
            n = parse_tuple(p, 0, 1, NULL, 1);
            if (n == NULL || expect_op(p, ")") != 0) {
                return NULL;
            }
            return n;
        }
        if (tok_is_op(t, "[")) {
            p->pos++;
            while (!tok_is_op(cur(p), "]")) {
                if (items.n && expect_op(p, ",") != 0) {
                    return NULL;
                }
                if (tok_is_op(cur(p), "]")) {
                    break;
                }
                v = parse_expression(p, 1);
                if (v == NULL || nvec_push(p, &items, v, NULL) != 0) {
                    return NULL;
                }
            }
            p->pos++;
            n = node(p, JN_LIST, t->line);
            if (n != NULL) {
                n->kids = items.v;
                n->nkids = items.n;
            }
            return n;
        }
        if (tok_is_op(t, "{")) {
            p->pos++;
            while (!tok_is_op(cur(p), "}")) {
                if (items.n && expect_op(p, ",") != 0) {
                    return NULL;
                }
                if (tok_is_op(cur(p), "}")) {
                    break;
                }
                k = parse_expression(p, 1);
                if (k == NULL || expect_op(p, ":") != 0) {
                    return NULL;
                }
                v = parse_expression(p, 1);
                if (v == NULL || nvec_push(p, &items, k, NULL) != 0
                    || nvec_push(p, &items, v, NULL) != 0)
                {
                    return NULL;
                }
            }
            p->pos++;
            n = node(p, JN_DICT, t->line);
            if (n != NULL) {
                n->kids = items.v;
                n->nkids = items.n;
            }
            return n;
        }
        /* fall through */
    default:
        perr(p, t->line, "unexpected %s", tok_desc(t, buf, sizeof(buf)));
        return NULL;
    }
}

/*
 * parse_tuple: comma-separated expressions; a single one without a comma
 * is that expression.  extra_end names a keyword that ends the tuple
 * ("in" for a for target).
 */
static int
tuple_end(parser_t *p, const char *extra_end)
{
    tok_t  *t = cur(p);

    if (t->type == TK_VAR_END || t->type == TK_BLOCK_END || t->type == TK_EOF
        || tok_is_op(t, ")") || tok_is_op(t, "]") || tok_is_op(t, "}")
        || tok_is_op(t, "="))
    {
        return 1;
    }
    return extra_end != NULL && tok_is_name(t, extra_end);
}

static jj_node_t *
parse_tuple(parser_t *p, int simplified, int with_condexpr,
    const char *extra_end, int explicit_parens)
{
    nvec_t      items = { 0 };
    jj_node_t  *n;
    uint32_t    line = cur(p)->line;
    int         is_tuple = 0;

    for ( ;; ) {
        if (items.n) {
            if (expect_op(p, ",") != 0) {
                return NULL;
            }
        }
        if (tuple_end(p, extra_end)) {
            break;
        }
        if (simplified) {
            n = parse_primary(p);
        } else {
            n = parse_expression(p, with_condexpr);
        }
        if (n == NULL || nvec_push(p, &items, n, NULL) != 0) {
            return NULL;
        }
        if (tok_is_op(cur(p), ",")) {
            is_tuple = 1;
        } else {
            break;
        }
    }
    if (!is_tuple) {
        if (items.n) {
            return items.v[0];
        }
        if (!explicit_parens) {
            char buf[64];

            perr(p, line, "Expected an expression, got %s",
                 tok_desc(cur(p), buf, sizeof(buf)));
            return NULL;
        }
    }
    n = node(p, JN_TUPLE, line);
    if (n != NULL) {
        n->kids = items.v;
        n->nkids = items.n;
    }
    return n;
}

static jj_node_t *
parse_subscript_item(parser_t *p)
{
    jj_node_t  *args[3] = { NULL, NULL, NULL }, *n;
    uint32_t    line = cur(p)->line;
    int         k = 0;

    if (!tok_is_op(cur(p), ":")) {
        args[0] = parse_expression(p, 1);
        if (args[0] == NULL) {
            return NULL;
        }
        if (!tok_is_op(cur(p), ":")) {
            return args[0];
        }
    }
    /* slice a:b:c */
    n = node(p, JN_SLICE, line);
    if (n == NULL) {
        return NULL;
    }
    for (k = 1; k < 3 && tok_is_op(cur(p), ":"); k++) {
        p->pos++;
        if (!tok_is_op(cur(p), "]") && !tok_is_op(cur(p), ",")
            && !tok_is_op(cur(p), ":"))
        {
            args[k] = parse_expression(p, 1);
            if (args[k] == NULL) {
                return NULL;
            }
        }
    }
    n->b = args[0];
    n->c = args[1];
    n->d = args[2];
    return n;
}

static jj_node_t *
parse_postfix(parser_t *p, jj_node_t *n)
{
    jj_node_t  *x, *key;
    tok_t      *t;
    char        buf[64];

    while (n != NULL) {
        t = cur(p);
        if (tok_is_op(t, ".")) {
            p->pos++;
            t = cur(p);
            if (t->type == TK_NAME) {
                x = node(p, JN_GETATTR, t->line);
                if (x == NULL) {
                    return NULL;
                }
                x->a = n;
                x->name = name_dup(p, t);
                x->namelen = t->n;
                p->pos++;
            } else if (t->type == TK_INT) {
                x = node(p, JN_GETITEM, t->line);
                key = node(p, JN_CONST, t->line);
                if (x == NULL || key == NULL) {
                    return NULL;
                }
                key->val = jv_int(t->i);
                x->a = n;
                x->b = key;
                p->pos++;
            } else {
                perr(p, t->line, "expected name or number, got %s",
                     tok_desc(t, buf, sizeof(buf)));
                return NULL;
            }
            n = x;
        } else if (tok_is_op(t, "[")) {
            p->pos++;
            key = parse_subscript_item(p);
            if (key == NULL) {
                return NULL;
            }
            if (tok_is_op(cur(p), ",")) {
                perr(p, t->line, "unsupported construct: tuple subscript");
                return NULL;
            }
            if (expect_op(p, "]") != 0) {
                return NULL;
            }
            if (key->type == JN_SLICE) {
                key->a = n;
                n = key;
            } else {
                x = node(p, JN_GETITEM, t->line);
                if (x == NULL) {
                    return NULL;
                }
                x->a = n;
                x->b = key;
                n = x;
            }
        } else if (tok_is_op(t, "(")) {
            x = node(p, JN_CALL, t->line);
            if (x == NULL) {
                return NULL;
            }
            x->a = n;
            if (parse_call_args(p, x) != 0) {
                return NULL;
            }
            n = x;
        } else {
            break;
        }
    }
    return n;
}

/* A dotted filter or test name: "name" or "a.b". */
static int
parse_dotted(parser_t *p, jj_node_t *n)
{
    tok_t  *t = cur(p);
    char    buf[64];

    if (t->type != TK_NAME) {
        return perr(p, t->line, "expected name, got %s",
                    tok_desc(t, buf, sizeof(buf)));
    }
    n->name = name_dup(p, t);
    n->namelen = t->n;
    p->pos++;
    if (tok_is_op(cur(p), ".")) {
        return perr(p, t->line, "unsupported construct: dotted filter or "
                    "test name");
    }
    return n->name == NULL ? -1 : 0;
}

static jj_node_t *
parse_filter(parser_t *p, jj_node_t *operand, int start_inline)
{
    jj_node_t  *f;

    while (tok_is_op(cur(p), "|") || start_inline) {
        if (!start_inline) {
            p->pos++;
        }
        start_inline = 0;
        f = node(p, JN_FILTER, cur(p)->line);
        if (f == NULL || parse_dotted(p, f) != 0) {
            return NULL;
        }
        if (!jj_filter_exists(f->name, f->namelen)) {
            if (!p->soft) {
                perr(p, f->line, "No filter named '%s'.", f->name);
                return NULL;
            }
            f->op = 1;          /* unknown: an error if evaluated */
        }
        if (tok_is_op(cur(p), "(") && parse_call_args(p, f) != 0) {
            return NULL;
        }
        f->a = operand;
        operand = f;
    }
    return operand;
}

static jj_node_t *
parse_test(parser_t *p, jj_node_t *operand)
{
    jj_node_t  *t, *arg;
    tok_t      *c;
    uint32_t    line = cur(p)->line;

    p->pos++;           /* "is" */
    t = node(p, JN_TEST, line);
    if (t == NULL) {
        return NULL;
    }
    if (tok_is_name(cur(p), "not")) {
        p->pos++;
        t->op = 1;
    }
    if (parse_dotted(p, t) != 0) {
        return NULL;
    }
    if (!jj_test_exists(t->name, t->namelen)) {
        if (!p->soft) {
            perr(p, line, "No test named '%s'.", t->name);
            return NULL;
        }
        t->op |= 2;             /* unknown: an error if evaluated */
    }
    c = cur(p);
    if (tok_is_op(c, "(")) {
        if (parse_call_args(p, t) != 0) {
            return NULL;
        }
    } else if ((c->type == TK_NAME || c->type == TK_STRING
                || c->type == TK_INT || c->type == TK_FLOAT
                || tok_is_op(c, "[") || tok_is_op(c, "{"))
               && !tok_is_name(c, "else") && !tok_is_name(c, "or")
               && !tok_is_name(c, "and"))
    {
        if (tok_is_name(c, "is")) {
            perr(p, c->line, "You cannot chain multiple tests with is");
            return NULL;
        }
        arg = parse_primary(p);
        if (arg != NULL) {
            arg = parse_postfix(p, arg);
        }
        if (arg == NULL) {
            return NULL;
        }
        t->kids = jj_alloc(p->arena, sizeof(jj_node_t *));
        if (t->kids == NULL) {
            perr(p, line, "out of memory");
            return NULL;
        }
        t->kids[0] = arg;
        t->nkids = 1;
    }
    t->a = operand;
    return t;
}

static jj_node_t *
parse_filter_expr(parser_t *p, jj_node_t *n)
{
    jj_node_t  *x;

    while (n != NULL) {
        if (tok_is_op(cur(p), "|")) {
            n = parse_filter(p, n, 0);
        } else if (tok_is_name(cur(p), "is")) {
            n = parse_test(p, n);
        } else if (tok_is_op(cur(p), "(")) {
            x = node(p, JN_CALL, cur(p)->line);
            if (x == NULL) {
                return NULL;
            }
            x->a = n;
            if (parse_call_args(p, x) != 0) {
                return NULL;
            }
            n = x;
        } else {
            break;
        }
    }
    return n;
}

/* ---- statements ---- */

static int parse_body(parser_t *p, const char *const *ends, nvec_t *body);

static int
block_end(parser_t *p)
{
    return expect_type(p, TK_BLOCK_END, "end of statement block");
}

/* Assignment target: name, ns.attr, or a tuple of names. */
static jj_node_t *
parse_assign_target(parser_t *p, int with_namespace, const char *extra_end)
{
    jj_node_t  *n, *t;
    tok_t      *c = cur(p);
    nvec_t      items = { 0 };
    char        buf[64];

    if (with_namespace && c->type == TK_NAME && tok_is_op(peek(p, 1), ".")
        && peek(p, 2)->type == TK_NAME)
    {
        n = node(p, JN_GETATTR, c->line);
        t = node(p, JN_NAME, c->line);
        if (n == NULL || t == NULL) {
            return NULL;
        }
        t->name = name_dup(p, c);
        t->namelen = c->n;
        n->a = t;
        n->name = name_dup(p, peek(p, 2));
        n->namelen = peek(p, 2)->n;
        p->pos += 3;
        return n;
    }
    for ( ;; ) {
        c = cur(p);
        if (c->type != TK_NAME) {
            perr(p, c->line, "can't assign to %s",
                 tok_desc(c, buf, sizeof(buf)));
            return NULL;
        }
        t = node(p, JN_NAME, c->line);
        if (t == NULL) {
            return NULL;
        }
        t->name = name_dup(p, c);
        t->namelen = c->n;
        p->pos++;
        if (nvec_push(p, &items, t, NULL) != 0) {
            return NULL;
        }
        if (!tok_is_op(cur(p), ",")) {
            break;
        }
        p->pos++;
        if (tuple_end(p, extra_end)) {
            break;
        }
    }
    if (items.n == 1 && !tok_is_op(&p->toks[p->pos - 1], ",")) {
        return items.v[0];
    }
    n = node(p, JN_TUPLE, items.v[0]->line);
    if (n != NULL) {
        n->kids = items.v;
        n->nkids = items.n;
    }
    return n;
}

static jj_node_t *
parse_for(parser_t *p, uint32_t line)
{
    static const char *const ends1[] = { "endfor", "else", NULL };
    static const char *const ends2[] = { "endfor", NULL };
    jj_node_t  *n;
    nvec_t      body = { 0 }, els = { 0 };

    n = node(p, JN_FOR, line);
    if (n == NULL) {
        return NULL;
    }
    n->a = parse_assign_target(p, 0, "in");
    if (n->a == NULL) {
        return NULL;
    }
    if (!tok_is_name(cur(p), "in")) {
        perr(p, cur(p)->line, "expected token 'in'");
        return NULL;
    }
    p->pos++;
    n->b = parse_tuple(p, 0, 0, "recursive", 0);
    if (n->b == NULL) {
        return NULL;
    }
    if (tok_is_name(cur(p), "if")) {
        p->pos++;
        n->c = parse_expression(p, 1);
        if (n->c == NULL) {
            return NULL;
        }
    }
    if (tok_is_name(cur(p), "recursive")) {
        perr(p, cur(p)->line, "unsupported construct: recursive for loop");
        return NULL;
    }
    if (block_end(p) != 0 || parse_body(p, ends1, &body) != 0) {
        return NULL;
    }
    if (tok_is_name(cur(p), "else")) {
        p->pos++;
        if (block_end(p) != 0 || parse_body(p, ends2, &els) != 0) {
            return NULL;
        }
    }
    p->pos++;          /* endfor */
    if (block_end(p) != 0) {
        return NULL;
    }
    n->kids = body.v;
    n->nkids = body.n;
    n->kids2 = els.v;
    n->nkids2 = els.n;
    return n;
}

static jj_node_t *
parse_if(parser_t *p, uint32_t line)
{
    static const char *const ends[] = { "elif", "else", "endif", NULL };
    static const char *const ends2[] = { "endif", NULL };
    jj_node_t  *n, *top, *x;
    nvec_t      body, els;

    top = n = node(p, JN_IF, line);
    if (n == NULL) {
        return NULL;
    }
    for ( ;; ) {
        n->a = parse_tuple(p, 0, 0, NULL, 0);
        memset(&body, 0, sizeof(body));
        if (n->a == NULL || block_end(p) != 0
            || parse_body(p, ends, &body) != 0)
        {
            return NULL;
        }
        n->kids = body.v;
        n->nkids = body.n;
        if (tok_is_name(cur(p), "elif")) {
            x = node(p, JN_IF, cur(p)->line);
            if (x == NULL) {
                return NULL;
            }
            p->pos++;
            n->kids2 = jj_alloc(p->arena, sizeof(jj_node_t *));
            if (n->kids2 == NULL) {
                perr(p, line, "out of memory");
                return NULL;
            }
            n->kids2[0] = x;
            n->nkids2 = 1;
            n = x;
            continue;
        }
        if (tok_is_name(cur(p), "else")) {
            p->pos++;
            memset(&els, 0, sizeof(els));
            if (block_end(p) != 0 || parse_body(p, ends2, &els) != 0) {
                return NULL;
            }
            n->kids2 = els.v;
            n->nkids2 = els.n;
        }
        break;
    }
    p->pos++;          /* endif */
    if (block_end(p) != 0) {
        return NULL;
    }
    return top;
}

static jj_node_t *
parse_set(parser_t *p, uint32_t line)
{
    static const char *const ends[] = { "endset", NULL };
    jj_node_t  *n, *target, *f;
    nvec_t      body = { 0 };

    target = parse_assign_target(p, 1, NULL);
    if (target == NULL) {
        return NULL;
    }
    if (tok_is_op(cur(p), "=")) {
        p->pos++;
        n = node(p, JN_SET, line);
        if (n == NULL) {
            return NULL;
        }
        n->a = target;
        n->b = parse_tuple(p, 0, 1, NULL, 0);
        if (n->b == NULL || block_end(p) != 0) {
            return NULL;
        }
        return n;
    }
    n = node(p, JN_SETBLOCK, line);
    if (n == NULL) {
        return NULL;
    }
    n->a = target;
    if (tok_is_op(cur(p), "|")) {
        f = node(p, JN_BLOCKVAL, line);
        if (f == NULL) {
            return NULL;
        }
        n->c = parse_filter(p, f, 0);
        if (n->c == NULL) {
            return NULL;
        }
    }
    if (block_end(p) != 0 || parse_body(p, ends, &body) != 0) {
        return NULL;
    }
    p->pos++;
    if (block_end(p) != 0) {
        return NULL;
    }
    n->kids = body.v;
    n->nkids = body.n;
    return n;
}

static int
parse_signature(parser_t *p, jj_node_t *n)
{
    nvec_t      params = { 0 };
    jj_node_t  *def;
    const char *name;
    char        buf[64];

    if (expect_op(p, "(") != 0) {
        return -1;
    }
    while (!tok_is_op(cur(p), ")")) {
        if (params.n && expect_op(p, ",") != 0) {
            return -1;
        }
        if (tok_is_op(cur(p), ")")) {
            break;
        }
        if (cur(p)->type != TK_NAME) {
            return perr(p, cur(p)->line, "expected name, got %s",
                        tok_desc(cur(p), buf, sizeof(buf)));
        }
        name = name_dup(p, cur(p));
        p->pos++;
        def = NULL;
        if (tok_is_op(cur(p), "=")) {
            p->pos++;
            def = parse_expression(p, 1);
            if (def == NULL) {
                return -1;
            }
        } else if (params.n && params.v[params.n - 1] != NULL) {
            return perr(p, cur(p)->line, "non-default argument follows "
                        "default argument");
        }
        if (name == NULL || nvec_push(p, &params, def, name) != 0) {
            return -1;
        }
    }
    p->pos++;
    n->names = params.names;
    n->nnames = params.n;
    n->kids2 = params.v;
    n->nkids2 = params.n;
    return 0;
}

static jj_node_t *
parse_macro(parser_t *p, uint32_t line)
{
    static const char *const ends[] = { "endmacro", NULL };
    jj_node_t  *n;
    nvec_t      body = { 0 };
    char        buf[64];
    unsigned    va, kw;

    n = node(p, JN_MACRO, line);
    if (n == NULL) {
        return NULL;
    }
    if (cur(p)->type != TK_NAME) {
        perr(p, line, "expected name, got %s",
             tok_desc(cur(p), buf, sizeof(buf)));
        return NULL;
    }
    n->name = name_dup(p, cur(p));
    n->namelen = cur(p)->n;
    p->pos++;
    va = p->n_varargs;
    kw = p->n_kwargs;
    if (parse_signature(p, n) != 0 || block_end(p) != 0
        || parse_body(p, ends, &body) != 0)
    {
        return NULL;
    }
    /* like jinja2, a macro accepts extra arguments only if it uses them */
    n->op = (uint16_t) ((p->n_varargs != va ? 1 : 0)
                        | (p->n_kwargs != kw ? 2 : 0));
    p->pos++;
    if (cur(p)->type == TK_NAME) {      /* {% endmacro name %} */
        p->pos++;
    }
    if (block_end(p) != 0) {
        return NULL;
    }
    n->kids = body.v;
    n->nkids = body.n;
    return n;
}

static jj_node_t *
parse_call_block(parser_t *p, uint32_t line)
{
    static const char *const ends[] = { "endcall", NULL };
    jj_node_t  *n, *call;
    nvec_t      body = { 0 };

    n = node(p, JN_CALLBLOCK, line);
    if (n == NULL) {
        return NULL;
    }
    n->op = 3;          /* caller() accepts any arguments */
    if (tok_is_op(cur(p), "(")) {
        if (parse_signature(p, n) != 0) {
            return NULL;
        }
    }
    call = parse_expression(p, 1);
    if (call == NULL) {
        return NULL;
    }
    if (call->type != JN_CALL) {
        perr(p, line, "expected call");
        return NULL;
    }
    n->a = call;
    if (block_end(p) != 0 || parse_body(p, ends, &body) != 0) {
        return NULL;
    }
    p->pos++;
    if (block_end(p) != 0) {
        return NULL;
    }
    n->kids = body.v;
    n->nkids = body.n;
    return n;
}

static jj_node_t *
parse_filter_block(parser_t *p, uint32_t line)
{
    static const char *const ends[] = { "endfilter", NULL };
    jj_node_t  *n, *f;
    nvec_t      body = { 0 };

    n = node(p, JN_FILTERBLOCK, line);
    f = node(p, JN_BLOCKVAL, line);
    if (n == NULL || f == NULL) {
        return NULL;
    }
    n->c = parse_filter(p, f, 1);
    if (n->c == NULL || block_end(p) != 0
        || parse_body(p, ends, &body) != 0)
    {
        return NULL;
    }
    p->pos++;
    if (block_end(p) != 0) {
        return NULL;
    }
    n->kids = body.v;
    n->nkids = body.n;
    return n;
}

static jj_node_t *
parse_with(parser_t *p, uint32_t line)
{
    static const char *const ends[] = { "endwith", NULL };
    jj_node_t  *n, *t, *v;
    nvec_t      targets = { 0 }, values = { 0 }, body = { 0 };

    n = node(p, JN_WITH, line);
    if (n == NULL) {
        return NULL;
    }
    while (cur(p)->type != TK_BLOCK_END) {
        if (targets.n && expect_op(p, ",") != 0) {
            return NULL;
        }
        t = parse_assign_target(p, 0, NULL);
        if (t == NULL || expect_op(p, "=") != 0) {
            return NULL;
        }
        v = parse_expression(p, 1);
        if (v == NULL || nvec_push(p, &targets, t, NULL) != 0
            || nvec_push(p, &values, v, NULL) != 0)
        {
            return NULL;
        }
    }
    if (block_end(p) != 0 || parse_body(p, ends, &body) != 0) {
        return NULL;
    }
    p->pos++;
    if (block_end(p) != 0) {
        return NULL;
    }
    n->kids = body.v;
    n->nkids = body.n;
    n->kids2 = values.v;
    n->nkids2 = values.n;
    n->targets = targets.v;
    return n;
}

static jj_node_t *parse_statement_kind(parser_t *p, tok_t *t,
    uint32_t line);

static jj_node_t *
parse_statement(parser_t *p)
{
    tok_t      *t = cur(p);
    uint32_t    line = t->line;
    jj_node_t  *n;
    int         saved;

    if (t->type != TK_NAME) {
        perr(p, line, "tag name expected");
        return NULL;
    }
    p->pos++;
    saved = p->soft;
    p->soft = tok_is_name(t, "if") || (saved && tok_is_name(t, "set"));
    n = parse_statement_kind(p, t, line);
    p->soft = saved;
    return n;
}

static jj_node_t *
parse_statement_kind(parser_t *p, tok_t *t, uint32_t line)
{
    jj_node_t  *n;
    char        buf[64];

    if (tok_is_name(t, "for")) {
        return parse_for(p, line);
    }
    if (tok_is_name(t, "if")) {
        return parse_if(p, line);
    }
    if (tok_is_name(t, "set")) {
        return parse_set(p, line);
    }
    if (tok_is_name(t, "macro")) {
        return parse_macro(p, line);
    }
    if (tok_is_name(t, "call")) {
        return parse_call_block(p, line);
    }
    if (tok_is_name(t, "filter")) {
        return parse_filter_block(p, line);
    }
    if (tok_is_name(t, "with")) {
        return parse_with(p, line);
    }
    if (tok_is_name(t, "break") || tok_is_name(t, "continue")) {
        n = node(p, t->s[0] == 'b' ? JN_BREAK : JN_CONTINUE, line);
        if (n == NULL || block_end(p) != 0) {
            return NULL;
        }
        return n;
    }
    if (tok_is_name(t, "include") || tok_is_name(t, "extends")
        || tok_is_name(t, "import") || tok_is_name(t, "from")
        || tok_is_name(t, "block") || tok_is_name(t, "autoescape")
        || tok_is_name(t, "do"))
    {
        perr(p, line, "unsupported construct: {%% %s %%}",
             tok_desc(t, buf, sizeof(buf)));
        return NULL;
    }
    {
        char  lbuf[256];

        looking_for(p, lbuf, sizeof(lbuf));
        perr(p, line, "Encountered unknown tag %s.%s",
             tok_desc(t, buf, sizeof(buf)), lbuf);
    }
    return NULL;
}

/*
 * Parse template data, {{ }} and statements until a block whose tag is one
 * of ends (left as the current token, after its "{%"), or EOF when ends is
 * NULL.
 */
static int
parse_body(parser_t *p, const char *const *ends, nvec_t *body)
{
    jj_node_t          *n;
    tok_t              *t;
    size_t              k;
    char                buf[64], lbuf[256];
    const char *const  *saved_ends;

    if (++p->depth > JJ_MAX_PARSE_DEPTH) {
        return perr(p, cur(p)->line, "blocks nested too deeply");
    }
    saved_ends = p->ends;
    p->ends = ends;
    for ( ;; ) {
        t = cur(p);
        switch (t->type) {
        case TK_EOF:
            if (ends != NULL) {
                looking_for(p, lbuf, sizeof(lbuf));
                return perr(p, t->line, "Unexpected end of template.%s",
                            lbuf);
            }
            p->depth--;
            p->ends = saved_ends;
            return 0;
        case TK_DATA:
            n = node(p, JN_TEXT, t->line);
            if (n == NULL) {
                return -1;
            }
            n->val = jv_strn(t->s, t->n);
            p->pos++;
            break;
        case TK_VAR_BEGIN:
            p->pos++;
            n = node(p, JN_OUTPUT, t->line);
            if (n == NULL) {
                return -1;
            }
            n->a = parse_tuple(p, 0, 1, NULL, 0);
            if (n->a == NULL
                || expect_type(p, TK_VAR_END, "end of print statement"))
            {
                return -1;
            }
            break;
        case TK_BLOCK_BEGIN:
            p->pos++;
            if (ends != NULL) {
                for (k = 0; ends[k] != NULL; k++) {
                    if (tok_is_name(cur(p), ends[k])) {
                        p->depth--;
                        p->ends = saved_ends;
                        return 0;
                    }
                }
            }
            if (cur(p)->type == TK_NAME
                && (tok_is_name(cur(p), "endfor")
                    || tok_is_name(cur(p), "endif")
                    || tok_is_name(cur(p), "else")
                    || tok_is_name(cur(p), "elif")
                    || tok_is_name(cur(p), "endmacro")
                    || tok_is_name(cur(p), "endset")
                    || tok_is_name(cur(p), "endfilter")
                    || tok_is_name(cur(p), "endcall")
                    || tok_is_name(cur(p), "endwith")))
            {
                looking_for(p, lbuf, sizeof(lbuf));
                return perr(p, cur(p)->line, "Encountered unknown tag %s.%s",
                            tok_desc(cur(p), buf, sizeof(buf)), lbuf);
            }
            n = parse_statement(p);
            if (n == NULL) {
                return -1;
            }
            break;
        default:
            return perr(p, t->line, "unexpected %s",
                        tok_desc(t, buf, sizeof(buf)));
        }
        if (nvec_push(p, body, n, NULL) != 0) {
            return -1;
        }
    }
}

/*
 * Compile src into t (whose arena the caller zeroed).  Normalises newlines
 * as jinja2 does, lexes, parses.  0, or -EINVAL with the construct and
 * line in err.
 */
int
jj_compile(jj_tmpl_t *t, const char *src, size_t len, char *err,
    size_t errlen)
{
    parser_t   p;
    nvec_t     body = { 0 };
    char      *s;
    size_t     i, n = 0;
    int        rc = -EINVAL;

    memset(&p, 0, sizeof(p));
    p.arena = &t->arena;
    p.err = err;
    p.errlen = errlen;
    if (errlen) {
        err[0] = '\0';
    }
    s = jj_alloc(&t->arena, len + 1);
    if (s == NULL) {
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    for (i = 0; i < len; i++) {
        if (src[i] == '\r') {
            s[n++] = '\n';
            if (i + 1 < len && src[i + 1] == '\n') {
                i++;
            }
        } else {
            s[n++] = src[i];
        }
    }
    if (n > 0 && s[n - 1] == '\n') {
        n--;
    }
    s[n] = '\0';
    if (lex(&p, s, n) != 0) {
        goto done;
    }
    if (parse_body(&p, NULL, &body) != 0) {
        goto done;
    }
    t->root = node(&p, JN_WITH, 1);
    if (t->root == NULL) {
        goto done;
    }
    t->root->kids = body.v;
    t->root->nkids = body.n;
    rc = 0;

done:
    free(p.toks);
    return rc;
}
