/*
 * The engine unit tests' kit (testkit.h): TAP points and checks, notes,
 * files and temp dirs, a prompt through the forward pass.  Linked into
 * every test binary (engine/Makefile).
 */

#include <errno.h>
#include <math.h>
#include <ftw.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testkit.h"
#include "kernels/quant.h"
#include "model/gguf.h"
#include "readfile.h"

#define TK_MAX_TMPDIRS  8

static struct {
    int     n_points;       /* `ok`/`not ok` lines printed */
    int     failures;       /* failed points */
    long    checks;         /* CHECKs evaluated */
    long    failed_checks;  /* of which failed, or tk_fail calls */
    int     open;           /* a point is open */
    int     open_failed;    /* ... and something in it failed */
    long    open_checks;    /* ... and this many checks ran in it */
    char    name[256];      /* ... its name */
    int     mid_line;       /* a note ended without its newline */
    char   *tmpdirs[TK_MAX_TMPDIRS];
    int     n_tmpdirs;
} tk;


/* Ends a note left without its newline, so a TAP line starts a line. */
static void
tk_line_start(void)
{
    if (tk.mid_line) {
        fputc('\n', stdout);
        tk.mid_line = 0;
    }
}


/* Writes text to f with `# ` before every line; *mid tracks whether the
 * last write ended inside a line. */
static void
tk_write_diag(FILE *f, const char *text, int *mid)
{
    const char  *p = text, *nl;

    while (*p != '\0') {
        if (!*mid) {
            fputs("# ", f);
        }
        nl = strchr(p, '\n');
        if (nl == NULL) {
            fputs(p, f);
            *mid = 1;
            return;
        }
        fwrite(p, 1, (size_t) (nl - p + 1), f);
        *mid = 0;
        p = nl + 1;
    }
}


/* A failure message on stderr, one or more whole `# ` lines. */
static void
tk_vdiag_err(const char *prefix, const char *fmt, va_list ap)
{
    char  *msg = NULL;
    int    mid = 0;

    tk_line_start();
    fflush(stdout);
    if (vasprintf(&msg, fmt, ap) < 0) {
        msg = NULL;
    }
    if (prefix != NULL) {
        tk_write_diag(stderr, prefix, &mid);
    }
    tk_write_diag(stderr, msg != NULL ? msg : fmt, &mid);
    if (mid) {
        fputc('\n', stderr);
    }
    fflush(stderr);
    free(msg);
}


/* Opens the point a check outside tk_begin counts in: named "setup"
 * unless tk_end_as names it. */
static void
tk_open_implicit(void)
{
    if (!tk.open) {
        snprintf(tk.name, sizeof(tk.name), "setup");
        tk.open = 1;
        tk.open_failed = 0;
        tk.open_checks = 0;
    }
}


/* Prints the open point's line (tk.name) and closes it. */
static int
tk_emit(void)
{
    tk.open = 0;
    tk.n_points++;
    tk_line_start();
    printf("%sok %d - %s\n", tk.open_failed ? "not " : "", tk.n_points,
           tk.name);
    fflush(stdout);
    if (tk.open_failed) {
        tk.failures++;
        tk.open_failed = 0;
        return 0;
    }
    return 1;
}


/* Marks the open point failed. */
static void
tk_mark_failed(void)
{
    tk_open_implicit();
    tk.open_failed = 1;
    tk.failed_checks++;
}


void
tk_begin(const char *fmt, ...)
{
    va_list  ap;

    tk_end();
    va_start(ap, fmt);
    vsnprintf(tk.name, sizeof(tk.name), fmt, ap);
    va_end(ap);
    tk.open = 1;
    tk.open_failed = 0;
    tk.open_checks = 0;
}


int
tk_end(void)
{
    if (!tk.open) {
        return 1;
    }
    return tk_emit();
}


int
tk_end_as(const char *fmt, ...)
{
    va_list  ap;

    va_start(ap, fmt);
    vsnprintf(tk.name, sizeof(tk.name), fmt, ap);
    va_end(ap);
    return tk_emit();
}


void
tk_skip(const char *name, const char *fmt, ...)
{
    va_list  ap;

    if (tk.open && !tk.open_failed && tk.open_checks == 0) {
        tk.open = 0;            /* begun, then skipped before any check */
    }
    tk_end();
    tk.n_points++;
    tk_line_start();
    printf("ok %d - %s # SKIP ", tk.n_points, name);
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    fputc('\n', stdout);
    fflush(stdout);
}


void
tk_skip_all(const char *fmt, ...)
{
    va_list  ap;

    tk_line_start();
    printf("1..0 # SKIP ");
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    fputc('\n', stdout);
    fflush(stdout);
    exit(0);
}


void
tk_fail(const char *fmt, ...)
{
    va_list  ap;

    tk_mark_failed();
    va_start(ap, fmt);
    tk_vdiag_err(NULL, fmt, ap);
    va_end(ap);
}


void
tk_fail_quiet(void)
{
    if (!tk.open || !tk.open_failed) {
        tk_mark_failed();
    }
}


void
tk_fatal(const char *fmt, ...)
{
    va_list  ap;

    tk_mark_failed();
    va_start(ap, fmt);
    tk_vdiag_err(NULL, fmt, ap);
    va_end(ap);
    tk_done();
    exit(1);
}


int
tk_pass(void)
{
    tk_open_implicit();
    tk.checks++;
    tk.open_checks++;
    return 1;
}


int
tk_fail_at(const char *file, int line, const char *cond, const char *fmt,
    ...)
{
    va_list  ap;
    char     where[1024];

    tk.checks++;
    tk_mark_failed();
    tk.open_checks++;
    /* fmt is " " plus the caller's format (CHECK's trick to allow none) */
    if (fmt[0] == ' ' && fmt[1] == '\0') {
        snprintf(where, sizeof(where), "%s:%d: failed: %s\n", file, line,
                 cond);
        fmt = "";
    } else {
        snprintf(where, sizeof(where), "%s:%d: failed: %s\n  ", file, line,
                 cond);
        fmt++;
    }
    va_start(ap, fmt);
    tk_vdiag_err(where, fmt, ap);
    va_end(ap);
    return 0;
}


int
tk_point_ok(void)
{
    return !tk.open_failed;
}


int
tk_failures(void)
{
    return tk.failures + (tk.open && tk.open_failed);
}


void
tk_note(const char *fmt, ...)
{
    va_list  ap;
    char    *msg = NULL;

    va_start(ap, fmt);
    if (vasprintf(&msg, fmt, ap) < 0) {
        msg = NULL;
    }
    va_end(ap);
    tk_write_diag(stdout, msg != NULL ? msg : fmt, &tk.mid_line);
    free(msg);
}


int
tk_done(void)
{
    int  i;

    tk_end();
    for (i = 0; i < tk.n_tmpdirs; i++) {
        if (tk_rmtree(tk.tmpdirs[i]) != 0) {
            tk_note("cannot remove %s: %s\n", tk.tmpdirs[i],
                    strerror(errno));
        }
        free(tk.tmpdirs[i]);
    }
    tk.n_tmpdirs = 0;
    tk_line_start();
    if (tk.checks != 0 || tk.failed_checks != 0) {
        printf("# %ld checks, %ld failures\n", tk.checks, tk.failed_checks);
    }
    printf("1..%d\n", tk.n_points);
    fflush(stdout);
    return tk.failures != 0 ? 1 : 0;
}


char *
tk_read_file(const char *path, size_t *len)
{
    size_t  n;

    return llm_read_file(path, len != NULL ? len : &n);
}


const char *
tk_tmpdir(const char *name)
{
    const char  *t = getenv("TMPDIR");
    char        *dir;

    if (tk.n_tmpdirs == TK_MAX_TMPDIRS) {
        tk_fatal("tk_tmpdir %s: more than %d temp dirs", name,
                 TK_MAX_TMPDIRS);
    }
    if (asprintf(&dir, "%s/%s.XXXXXX", t && *t ? t : "/tmp", name) < 0) {
        tk_fatal("tk_tmpdir %s: out of memory", name);
    }
    if (mkdtemp(dir) == NULL) {
        tk_fatal("mkdtemp %s: %s", dir, strerror(errno));
    }
    tk.tmpdirs[tk.n_tmpdirs++] = dir;
    return dir;
}


static int
tk_rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void) st;
    (void) ftw;
    return flag == FTW_DP ? rmdir(path) : unlink(path);
}


int
tk_rmtree(const char *path)
{
    return nftw(path, tk_rm_one, 16, FTW_DEPTH | FTW_PHYS);
}


const char *
tk_shared_dir(void)
{
    const char  *s = getenv("LLM_SHARED");

    return s && *s ? s : "../shared";
}


uint64_t
tk_xorshift64(uint64_t *state)
{
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    return *state;
}


/* One tensor of tk_qref_check: tq against its F32 original tf. */
static void
tk_qref_tensor(const tk_qref_t *c, const llm_gguf_tensor_t *tq,
    const llm_gguf_tensor_t *tf, tk_qref_stats_t *st)
{
    int64_t  ne0 = tq->ne[0], rows = 1;
    double   num = 0, den = 0, dq2 = 0, e, ratio;
    size_t   rb;
    float   *deq;
    int      nonfinite = 0;

    for (uint32_t d = 1; d < tq->n_dims; d++) {
        rows *= tq->ne[d];
    }
    rb = llm_row_bytes(tq->type, ne0);
    CHECK(rb != 0 && tq->nbytes == rb * (uint64_t) rows, "%s: %llu bytes, "
          "table says %zu x %lld", tq->name, (unsigned long long) tq->nbytes,
          rb, (long long) rows);
    deq = malloc(ne0 * sizeof(float));
    if (!CHECK(deq != NULL, "malloc")) {
        return;
    }
    for (int64_t r = 0; r < rows; r++) {
        const float    *src = (const float *) tf->data + r * ne0;
        const uint8_t  *qr = (const uint8_t *) tq->data + r * rb;

        llm_dequantize_row(tq->type, qr, deq, ne0);
        for (int64_t j = 0; j < ne0; j++) {
            nonfinite += !isfinite(deq[j]);
            num += ((double) deq[j] - src[j]) * ((double) deq[j] - src[j]);
            den += (double) src[j] * src[j];
            dq2 += (double) deq[j] * deq[j];
        }
        if (c->row != NULL) {
            c->row(c->ud, tq->type, qr, deq, src, ne0);
        }
    }
    free(deq);

    e = sqrt(num / (den > 0 ? den : 1));
    ratio = sqrt(dq2 / (den > 0 ? den : 1));
    CHECK(nonfinite == 0, "%s: %d values not finite", tq->name, nonfinite);
    CHECK(e <= c->max_err, "%s (%s): rel RMS error %.4f > %.4f", tq->name,
          llm_type_name(tq->type), e, c->max_err);
    if (c->ratio_lo != 0 || c->ratio_hi != 0) {
        CHECK(ratio >= c->ratio_lo && ratio <= c->ratio_hi,
              "%s: RMS ratio %.3f", tq->name, ratio);
    }
    st->worst = e > st->worst ? e : st->worst;
    st->wratio = fabs(ratio - 1) > fabs(st->wratio - 1) ? ratio : st->wratio;
    st->tensors++;
}


int
tk_qref_check(const tk_qref_t *c, tk_qref_stats_t *st)
{
    char         qpath[1100], fpath[1100], err[512];
    llm_gguf_t  *q = NULL, *f = NULL;
    int          rc = 0;

    st->tensors = 0;
    st->worst = 0;
    st->wratio = 1;
    snprintf(qpath, sizeof(qpath), "%s/reference/%s.gguf", tk_shared_dir(),
             c->qname);
    snprintf(fpath, sizeof(fpath), "%s/reference/%s.gguf", tk_shared_dir(),
             c->fname);
    if (llm_gguf_open(&q, qpath, err, sizeof(err)) != 0
        || llm_gguf_open(&f, fpath, err, sizeof(err)) != 0)
    {
        tk_skip(c->qname, "%s", err);
        rc = -1;
        goto done;
    }
    for (uint64_t i = 0; i < llm_gguf_n_tensors(q); i++) {
        const llm_gguf_tensor_t  *tq = llm_gguf_tensor_at(q, i);
        const llm_gguf_tensor_t  *tf;

        if (!c->want(tq->type)) {
            continue;
        }
        tf = llm_gguf_find_tensor(f, tq->name);
        if (CHECK(tf != NULL && tf->type == LLM_TYPE_F32, "%s: %s not F32 "
                  "in %s", c->qname, tq->name, c->fname))
        {
            tk_qref_tensor(c, tq, tf, st);
        }
    }

done:
    if (q) {
        llm_gguf_close(q);
    }
    if (f) {
        llm_gguf_close(f);
    }
    return rc;
}
