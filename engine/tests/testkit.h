/*
 * The engine unit tests' kit: TAP output, checks, files, temp dirs.
 *
 * A test program is a sequence of test points, each one `ok N - name` or
 * `not ok N - name` on stdout, and the plan `1..N` at the end, so prove
 * (or anything that reads TAP) counts them:
 *
 *     tk_begin("round trip");        starts a point (ends the open one)
 *     CHECK(n == 4, "n %d", n);      counts a check; a failure fails the
 *                                    open point and says where and why
 *     REQUIRE(p != NULL, "open");    the same, then returns from a void
 *                                    function (what follows needs it)
 *     tk_note("%d tokens\n", n);     a diagnostic: `# ` before every line
 *     tk_end_as("fuzz: %d refused", n);  ends the open point under a name
 *                                    that says what it found
 *     tk_skip("vocab x", "absent");  a point that is skipped, with why
 *     return tk_done();              ends the open point, prints the count
 *                                    of checks and the plan; 0 if every
 *                                    point passed, else 1
 *
 * A check outside any point opens one, named "setup" unless tk_end_as
 * names it when it ends.  A program with nothing to do calls
 * tk_skip_all(why) first: `1..0 # SKIP why`, exit 0, as prove expects.
 * Failure messages go to stderr as `# ` lines (prove shows them without
 * -v); notes go to stdout.  Not thread-safe: check on the test's thread.
 *
 * The helpers test programs share: tk_read_file (a whole file), temp dirs
 * removed at the end (tk_tmpdir), the shared reference data directory
 * (tk_shared_dir), the tests' random numbers (tk_xorshift64).  One prompt
 * through the forward pass is tools/lib/onepass.h's llm_onepass, which
 * llm-logits uses too.
 */

#ifndef LLM_TESTKIT_H
#define LLM_TESTKIT_H

#include <stddef.h>
#include <stdint.h>


#define TK_PRINTF(a, b)  __attribute__((format(printf, a, b)))

/*
 * CHECK(cond) or CHECK(cond, "format", ...): counts one check; when cond
 * is false, fails the open point with file:line, the condition's text and
 * the message (its arguments are evaluated only then).  Its value is 1
 * when cond held, else 0, for `if (!CHECK(...)) goto out;`.
 */
#define CHECK(cond, ...)                                                \
    ((cond) ? tk_pass()                                                 \
            : tk_fail_at(__FILE__, __LINE__, #cond, " " __VA_ARGS__))

/* CHECK, then return from the (void) function when it failed. */
#define REQUIRE(cond, ...)                                              \
    do {                                                                \
        if (!CHECK(cond, __VA_ARGS__)) {                                \
            return;                                                     \
        }                                                               \
    } while (0)

/* Starts a test point named by the format (the open one ends first). */
void tk_begin(const char *fmt, ...) TK_PRINTF(1, 2);

/* Ends the open point with its `ok`/`not ok` line; 1 if it passed (or none
 * was open), else 0. */
int tk_end(void);

/* Ends the open point under the name the format gives (a point whose name
 * says what it found); prints one even when none was open (no checks). */
int tk_end_as(const char *fmt, ...) TK_PRINTF(1, 2);

/* A skipped point: `ok N - name # SKIP reason`.  It takes the place of
 * the open point when nothing was checked in that one yet (begun, then
 * found to have nothing to run); else the open one ends first. */
void tk_skip(const char *name, const char *fmt, ...) TK_PRINTF(2, 3);

/* Nothing to test here: `1..0 # SKIP reason` and exit 0.  Only before the
 * first point. */
void tk_skip_all(const char *fmt, ...) TK_PRINTF(1, 2)
    __attribute__((noreturn));

/* Fails the open point (opening "setup" if none) with a message: for the
 * checks that print their own diagnosis. */
void tk_fail(const char *fmt, ...) TK_PRINTF(1, 2);

/* Fails the open point (opening "setup" if none) without a message, unless
 * it has failed already: for a check that prints its own diagnosis with
 * tk_note or tk_fail elsewhere, or only the first few of many. */
void tk_fail_quiet(void);

/* A failure the program cannot go on after: tk_fail, then tk_done's
 * plan and exit 1. */
void tk_fatal(const char *fmt, ...) TK_PRINTF(1, 2) __attribute__((noreturn));

/* Ends the open point, removes the temp dirs, prints `# N checks` and the
 * plan; returns the exit code: 0 when every point passed, else 1. */
int tk_done(void);

/* printf to stdout as diagnostics: `# ` starts every line (a line may be
 * written in pieces). */
void tk_note(const char *fmt, ...) TK_PRINTF(1, 2);

/* 1 if no check failed in the open point so far. */
int tk_point_ok(void);

/* The number of failed points and stray failures so far (0: all passed). */
int tk_failures(void);

/* Used by CHECK. */
int tk_pass(void);
int tk_fail_at(const char *file, int line, const char *cond,
    const char *fmt, ...) TK_PRINTF(4, 5);

/*
 * The whole file at path, NUL-terminated (the NUL not counted in *len;
 * len may be NULL).  NULL with errno set when it cannot be read.  The
 * caller frees it.
 */
char *tk_read_file(const char *path, size_t *len);

/*
 * A new directory $TMPDIR/NAME.XXXXXX (TMPDIR unset or empty: /tmp),
 * removed with all it holds by tk_done (a note if it cannot be).  Calls
 * tk_fatal when it cannot be made.  The string lives until tk_done.
 */
const char *tk_tmpdir(const char *name);

/* Removes path and everything below it; 0 or -1 with errno set. */
int tk_rmtree(const char *path);

/* The shared reference data: $LLM_SHARED, else "../shared". */
const char *tk_shared_dir(void);

/* The next state of a xorshift64 generator (13, 7, 17): the random
 * numbers of the fuzz-style tests, the same on every machine.  *state
 * must not be 0. */
uint64_t tk_xorshift64(uint64_t *state);

/*
 * The quantized tensors of a llama.cpp reference file against the same
 * tensors of its f32 model ($LLM_SHARED/reference/QNAME.gguf and
 * FNAME.gguf), inside an open test point: for each tensor whose type
 * want() accepts, the f32 tensor exists, the byte size is the type
 * table's, every dequantized value is finite, the relative RMS error is at
 * most max_err and, unless both bounds are 0, the RMS ratio (dequantized
 * over f32) within [ratio_lo, ratio_hi].  row (may be NULL) sees each row
 * after its dequantization: q its quantized bytes, deq and f n values.
 */
typedef struct {
    const char  *qname, *fname;
    int        (*want)(uint32_t type);
    double       max_err, ratio_lo, ratio_hi;
    void       (*row)(void *ud, uint32_t type, const uint8_t *q,
                      const float *deq, const float *f, int64_t n);
    void        *ud;
} tk_qref_t;

typedef struct {
    uint64_t  tensors;          /* checked */
    double    worst;            /* the largest relative RMS error */
    double    wratio;           /* the RMS ratio farthest from 1 */
} tk_qref_stats_t;

/* 0, or -1 when a file cannot be opened (the point skipped, saying why). */
int tk_qref_check(const tk_qref_t *c, tk_qref_stats_t *st);

#endif /* LLM_TESTKIT_H */
