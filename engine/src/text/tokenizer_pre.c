/*
 * Hand-written matchers for the two pre-tokenizer regexes nearly every
 * byte-level BPE vocabulary uses, so the hot path does not go through a
 * regex engine: GPT-2's
 *
 *   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 *
 * and the Llama 3 / Qwen2 one (\p{N}{1,3} or \p{N})
 *
 *   (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}
 *   | ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
 *
 * and o200k's (gpt-4o, gpt-oss, llama4, minimax-m2), with U for
 * [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}], W for [\p{Ll}\p{Lm}\p{Lo}\p{M}] and
 * C for (?i:'s|'t|'re|'ve|'m|'ll|'d)
 *
 *   [^\r\n\p{L}\p{N}]?U*W+C?|[^\r\n\p{L}\p{N}]?U+W*C?|\p{N}{1,3}
 *   | ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+
 *
 * Each function returns the end of the match PCRE2 would find starting at
 * byte i (alternatives tried in order, with the backtracking the greedy
 * quantifiers imply worked out by hand), or 0 for no match there.  As with
 * PCRE2_MATCH_INVALID_UTF, an invalid UTF-8 byte matches nothing, not even
 * a negated class, and counts as "not \S" for the look-ahead.
 * test_tokenizer checks them against PCRE2 on random text.
 *
 * Unicode properties come from the generated run table in
 * tokenizer_unicode.c, expanded once into a two-stage lookup table.
 */

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer_int.h"

#define UCD_INVALID  0x80

extern const uint32_t llm_ucd_runs[][2];
extern const uint32_t llm_ucd_n_runs;

static uint16_t        ucd_stage1[0x1100];
static uint8_t        *ucd_stage2;
static pthread_once_t  ucd_once = PTHREAD_ONCE_INIT;
static int             ucd_ok;

/*
 * Expand the runs: one 256-entry block per (cp >> 8); blocks whose flags
 * are all equal share one of 64 uniform blocks.
 */
static void
ucd_build(void)
{
    uint8_t   *flat, *blk;
    uint32_t   r, cp, end, b, n_blk = 64, k;
    int        uniform;

    flat = malloc(0x110000);
    blk = malloc((size_t) (0x1100 + 64) * 256);
    if (flat == NULL || blk == NULL) {
        free(flat);
        free(blk);
        return;
    }
    for (r = 0; r < llm_ucd_n_runs; r++) {
        cp = llm_ucd_runs[r][0];
        end = r + 1 < llm_ucd_n_runs ? llm_ucd_runs[r + 1][0] : 0x110000;
        memset(flat + cp, (int) llm_ucd_runs[r][1], end - cp);
    }
    for (k = 0; k < 64; k++) {
        memset(blk + k * 256, (int) k, 256);
    }
    for (b = 0; b < 0x1100; b++) {
        uniform = 1;
        for (k = 1; k < 256 && uniform; k++) {
            uniform = flat[b * 256 + k] == flat[b * 256];
        }
        if (uniform && flat[b * 256] < 64) {
            ucd_stage1[b] = flat[b * 256];
        } else {
            memcpy(blk + n_blk * 256, flat + b * 256, 256);
            ucd_stage1[b] = (uint16_t) n_blk++;
        }
    }
    free(flat);
    ucd_stage2 = realloc(blk, (size_t) n_blk * 256);
    if (ucd_stage2 == NULL) {
        ucd_stage2 = blk;
    }
    ucd_ok = 1;
}

int
llm_ucd_init(void)
{
    pthread_once(&ucd_once, ucd_build);
    return ucd_ok ? 0 : -1;
}

static inline uint8_t
ucd(uint32_t cp)
{
    return ucd_stage2[(size_t) ucd_stage1[cp >> 8] * 256 + (cp & 0xff)];
}

uint8_t
llm_ucd_flags(uint32_t cp)
{
    return cp < 0x110000 ? ucd(cp) : 0;
}

/* Decode the character at i: its length, *fl its flags (UCD_INVALID and
 * length 1 for a byte that starts no valid sequence). */
static inline __attribute__((always_inline)) size_t
dec(const uint8_t *s, size_t n, size_t i, uint32_t *cp, uint8_t *fl)
{
    uint8_t  c = s[i];
    int      r;

    if (c < 0x80) {
        *cp = c;
        *fl = ucd(c);
        return 1;
    }
    r = llm_utf8_check(s + i, n - i);
    if (r <= 0) {
        *cp = 0xfffffffful;
        *fl = UCD_INVALID;
        return 1;
    }
    if (r == 2) {
        *cp = ((uint32_t) (c & 0x1f) << 6) | (s[i + 1] & 0x3f);
    } else if (r == 3) {
        *cp = ((uint32_t) (c & 0x0f) << 12)
              | ((uint32_t) (s[i + 1] & 0x3f) << 6) | (s[i + 2] & 0x3f);
    } else {
        *cp = ((uint32_t) (c & 0x07) << 18)
              | ((uint32_t) (s[i + 1] & 0x3f) << 12)
              | ((uint32_t) (s[i + 2] & 0x3f) << 6) | (s[i + 3] & 0x3f);
    }
    *fl = ucd(*cp);
    return (size_t) r;
}

/* End of the run of characters with any of the flags in `any` from i. */
static inline size_t
run_any(const uint8_t *s, size_t n, size_t i, uint8_t any)
{
    uint32_t  cp;
    uint8_t   f;
    size_t    l;

    while (i < n) {
        l = dec(s, n, i, &cp, &f);
        if (f == UCD_INVALID || !(f & any)) {
            break;
        }
        i += l;
    }
    return i;
}

/* End of the run of valid characters with none of the flags in `none`. */
static inline size_t
run_none(const uint8_t *s, size_t n, size_t i, uint8_t none)
{
    uint32_t  cp;
    uint8_t   f;
    size_t    l;

    while (i < n) {
        l = dec(s, n, i, &cp, &f);
        if (f == UCD_INVALID || (f & none)) {
            break;
        }
        i += l;
    }
    return i;
}

/*
 * The contraction after the apostrophe at s[i - 1]: end or 0.  Caseless
 * as PCRE2 folds: s also matches U+017F (long s).
 */
static size_t
contraction(const uint8_t *s, size_t n, size_t i, int caseless)
{
    uint8_t  a, b;

    if (i >= n) {
        return 0;
    }
    a = s[i];
    b = i + 1 < n ? s[i + 1] : 0;
    if (caseless) {
        if (a == 0xc5 && b == 0xbf) {
            return i + 2;                       /* 'ſ */
        }
        a = (a >= 'A' && a <= 'Z') ? a + 32 : a;
        b = (b >= 'A' && b <= 'Z') ? b + 32 : b;
    }
    if (a == 's' || a == 't' || a == 'm' || a == 'd') {
        return i + 1;
    }
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e')
        || (a == 'l' && b == 'l'))
    {
        return i + 2;
    }
    return 0;
}

/* \s+(?!\S)|\s+ at i, i being whitespace: the run, less its last
 * character when a non-space follows and the run is longer than one. */
static inline size_t
space_run(const uint8_t *s, size_t n, size_t i)
{
    size_t    j, q, l;
    uint32_t  cp;
    uint8_t   f;

    j = run_any(s, n, i, LLM_UCD_S);
    if (j >= n) {
        return j;
    }
    (void) dec(s, n, j, &cp, &f);
    if (f == UCD_INVALID) {
        return j;
    }
    /* start of the last character of the run */
    for (q = j - 1; q > i && (s[q] & 0xc0) == 0x80; q--) { /* void */ }
    l = q;
    return l > i ? l : j;
}

size_t
llm_pre_gpt2(const uint8_t *s, size_t n, size_t i)
{
    uint32_t  c, c2;
    uint8_t   f, f2;
    size_t    l, j;

    l = dec(s, n, i, &c, &f);
    if (f == UCD_INVALID) {
        return 0;
    }
    if (c == '\'' && (j = contraction(s, n, i + 1, 0)) != 0) {
        return j;
    }
    if (c == ' ' && i + 1 < n) {
        (void) dec(s, n, i + 1, &c2, &f2);
        if (f2 != UCD_INVALID) {
            if (f2 & LLM_UCD_L) {
                return run_any(s, n, i + 1, LLM_UCD_L);
            }
            if (f2 & LLM_UCD_N) {
                return run_any(s, n, i + 1, LLM_UCD_N);
            }
            if (!(f2 & (LLM_UCD_S | LLM_UCD_L | LLM_UCD_N))) {
                return run_none(s, n, i + 1,
                                LLM_UCD_S | LLM_UCD_L | LLM_UCD_N);
            }
        }
    }
    if (f & LLM_UCD_L) {
        return run_any(s, n, i + l, LLM_UCD_L);
    }
    if (f & LLM_UCD_N) {
        return run_any(s, n, i + l, LLM_UCD_N);
    }
    if (!(f & LLM_UCD_S)) {
        return run_none(s, n, i + l, LLM_UCD_S | LLM_UCD_L | LLM_UCD_N);
    }
    return space_run(s, n, i);
}

size_t
llm_pre_llama3(const uint8_t *s, size_t n, size_t i, int max_digits)
{
    uint32_t  c, c2;
    uint8_t   f, f2;
    size_t    l, j, p, last_nl;
    int       k;

    l = dec(s, n, i, &c, &f);
    if (f == UCD_INVALID) {
        return 0;
    }
    if (c == '\'' && (j = contraction(s, n, i + 1, 1)) != 0) {
        return j;
    }

    /* [^\r\n\p{L}\p{N}]?\p{L}+ */
    if (f & LLM_UCD_L) {
        return run_any(s, n, i + l, LLM_UCD_L);
    }
    if (c != '\r' && c != '\n' && !(f & LLM_UCD_N) && i + l < n) {
        (void) dec(s, n, i + l, &c2, &f2);
        if (f2 != UCD_INVALID && (f2 & LLM_UCD_L)) {
            return run_any(s, n, i + l, LLM_UCD_L);
        }
    }

    /* \p{N}{1,max} */
    if (f & LLM_UCD_N) {
        j = i + l;
        for (k = 1; k < max_digits && j < n; k++) {
            l = dec(s, n, j, &c2, &f2);
            if (f2 == UCD_INVALID || !(f2 & LLM_UCD_N)) {
                break;
            }
            j += l;
        }
        return j;
    }

    /* ' ?[^\s\p{L}\p{N}]+[\r\n]*' */
    j = 0;
    if (c == ' ' && i + 1 < n) {
        (void) dec(s, n, i + 1, &c2, &f2);
        if (f2 != UCD_INVALID && !(f2 & (LLM_UCD_S | LLM_UCD_L | LLM_UCD_N))) {
            j = run_none(s, n, i + 1, LLM_UCD_S | LLM_UCD_L | LLM_UCD_N);
        }
    } else if (!(f & LLM_UCD_S)) {
        j = run_none(s, n, i + l, LLM_UCD_S | LLM_UCD_L | LLM_UCD_N);
    }
    if (j) {
        while (j < n && (s[j] == '\r' || s[j] == '\n')) {
            j++;
        }
        return j;
    }

    /* \s*[\r\n]+ : up to the last CR/LF of the whitespace run */
    j = run_any(s, n, i, LLM_UCD_S);
    last_nl = 0;
    for (p = i; p < j; p++) {
        if (s[p] == '\r' || s[p] == '\n') {
            last_nl = p + 1;
        }
    }
    if (last_nl) {
        return last_nl;
    }

    return space_run(s, n, i);
}

/* Optional caseless contraction at j. */
static inline size_t
opt_contraction(const uint8_t *s, size_t n, size_t j)
{
    size_t  k;

    if (j < n && s[j] == '\'' && (k = contraction(s, n, j + 1, 1)) != 0) {
        return k;
    }
    return j;
}

/*
 * U*W+ at s: U* takes the whole U run [s, b); W+ then goes on from b when
 * b is a W character (it can only be Ll there), else U* gives back up to
 * the last W character of the run (Lm, Lo, M are in both classes).
 */
static size_t
o200k_uw(const uint8_t *s, size_t n, size_t st)
{
    size_t    b = st, l, last_w = 0;
    uint32_t  cp;
    uint8_t   f;

    while (b < n) {
        l = dec(s, n, b, &cp, &f);
        if (f == UCD_INVALID || !(f & LLM_UCD_UP)) {
            break;
        }
        if (f & LLM_UCD_LO) {
            last_w = b + l;
        }
        b += l;
    }
    if (b < n) {
        l = dec(s, n, b, &cp, &f);
        if (f != UCD_INVALID && (f & LLM_UCD_LO)) {
            return run_any(s, n, b + l, LLM_UCD_LO);
        }
    }
    return last_w;                      /* 0: no W at all, no match */
}

size_t
llm_pre_o200k(const uint8_t *s, size_t n, size_t i)
{
    uint32_t  c, c2;
    uint8_t   f, f2;
    size_t    l, j, p, last_nl, b;
    int       k, pre;

    l = dec(s, n, i, &c, &f);
    if (f == UCD_INVALID) {
        return 0;
    }
    /* the optional prefix: a character other than CR, LF, L, N */
    pre = c != '\r' && c != '\n' && !(f & (LLM_UCD_L | LLM_UCD_N));

    /* [^\r\n\p{L}\p{N}]?U*W+C? : with the prefix, then without */
    if (pre && i + l < n && (j = o200k_uw(s, n, i + l)) != 0) {
        return opt_contraction(s, n, j);
    }
    if ((j = o200k_uw(s, n, i)) != 0) {
        return opt_contraction(s, n, j);
    }

    /* [^\r\n\p{L}\p{N}]?U+W*C? */
    for (k = pre ? 0 : 1; k < 2; k++) {
        b = k == 0 ? i + l : i;
        if (b >= n) {
            continue;
        }
        (void) dec(s, n, b, &c2, &f2);
        if (f2 == UCD_INVALID || !(f2 & LLM_UCD_UP)) {
            continue;
        }
        j = run_any(s, n, b, LLM_UCD_UP);
        j = run_any(s, n, j, LLM_UCD_LO);
        return opt_contraction(s, n, j);
    }

    /* \p{N}{1,3} */
    if (f & LLM_UCD_N) {
        j = i + l;
        for (k = 1; k < 3 && j < n; k++) {
            l = dec(s, n, j, &c2, &f2);
            if (f2 == UCD_INVALID || !(f2 & LLM_UCD_N)) {
                break;
            }
            j += l;
        }
        return j;
    }

    /* ' ?[^\s\p{L}\p{N}]+[\r\n/]*' */
    j = 0;
    if (c == ' ' && i + 1 < n) {
        (void) dec(s, n, i + 1, &c2, &f2);
        if (f2 != UCD_INVALID && !(f2 & (LLM_UCD_S | LLM_UCD_L | LLM_UCD_N))) {
            j = run_none(s, n, i + 1, LLM_UCD_S | LLM_UCD_L | LLM_UCD_N);
        }
    } else if (!(f & (LLM_UCD_S | LLM_UCD_L | LLM_UCD_N))) {
        j = run_none(s, n, i + l, LLM_UCD_S | LLM_UCD_L | LLM_UCD_N);
    }
    if (j) {
        while (j < n && (s[j] == '\r' || s[j] == '\n' || s[j] == '/')) {
            j++;
        }
        return j;
    }
    if (!(f & LLM_UCD_S)) {
        return 0;                       /* a letter that matched nothing */
    }

    /* \s*[\r\n]+ : up to the last CR/LF of the whitespace run */
    j = run_any(s, n, i, LLM_UCD_S);
    last_nl = 0;
    for (p = i; p < j; p++) {
        if (s[p] == '\r' || s[p] == '\n') {
            last_nl = p + 1;
        }
    }
    if (last_nl) {
        return last_nl;
    }
    return space_run(s, n, i);
}
