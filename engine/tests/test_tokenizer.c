/*
 * Tokenizer and streaming detokenizer tests.
 *
 * 1. Every NAME.gguf vocabulary with NAME.inp / NAME.out test vectors (ids
 *    from the model's own Hugging Face tokenizer): each string gives the
 *    expected ids exactly, and detokenizing them gives the string back.
 *    Small vocabularies are in engine/tests/data/vocab, the others are
 *    read from $LLM_SHARED/vocab (skipped with a message when absent).
 * 2. Streaming detokenization: pieces never split UTF-8, byte-fallback
 *    tokens join, stop strings spanning several tokens are never emitted,
 *    partial stop prefixes are released when the match fails, invalid
 *    UTF-8 becomes U+FFFD.
 * 3. Special tokens are matched only with LLM_TOK_PARSE_SPECIAL; big
 *    inputs (4 MB, 200k fragments) copy O(n) ids growing token arrays.
 * 5. NFC (Qwen's normalizer) against Python's unicodedata on generated
 *    cases (engine/tests/data/vocab/nfc-cases.txt).
 * 4. The hand-written GPT-2 / Llama 3 / Qwen2 / o200k pre-tokenizers split
 *    exactly
 *    as PCRE2 running the regexes does, on random text from all planes
 *    with whitespace of every kind, apostrophes and invalid UTF-8.
 *
 * Prints one line per check group; exits non-zero on any failure.
 */

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/gguf.h"
#include "text/tokenizer.h"
#include "text/tokenizer_int.h"      /* pcre_only, llm_bpe_set_pre: cross-check */
#include "testkit.h"

/*
 * Find NAME.EXT in the repo's test data, else (GGUF only) in
 * $LLM_TOK_VOCAB_DIR (where tests/tokenizer/run.sh puts the vocabularies
 * it converts from tokenizer.json), else in $LLM_SHARED/vocab.
 */
static int
find_vocab_file(char *out, size_t outlen, const char *name, const char *ext)
{
    const char *extra = getenv("LLM_TOK_VOCAB_DIR");

    if (out == NULL || outlen == 0) {
        return -EINVAL;
    }
    snprintf(out, outlen, "engine/tests/data/vocab/%s.%s", name, ext);
    if (access(out, R_OK) == 0) {
        return 0;
    }
    if (extra && *extra && strcmp(ext, "gguf") == 0) {
        snprintf(out, outlen, "%s/%s.%s", extra, name, ext);
        if (access(out, R_OK) == 0) {
            return 0;
        }
    }
    snprintf(out, outlen, "%s/vocab/%s.%s", tk_shared_dir(), name, ext);
    return access(out, R_OK) == 0 ? 0 : -ENOENT;
}

static int
load_vocab(const char *name, llm_gguf_t **g, llm_vocab_t **v)
{
    char  path[1024], err[512];

    *g = NULL;
    *v = NULL;
    if (find_vocab_file(path, sizeof(path), name, "gguf") < 0) {
        return -ENOENT;
    }
    if (llm_gguf_open(g, path, err, sizeof(err)) < 0) {
        CHECK(0, "%s: %s", path, err);
        return -EINVAL;
    }
    if (llm_vocab_load(v, *g, err, sizeof(err)) < 0) {
        CHECK(0, "%s: %s", path, err);
        llm_gguf_close(*g);
        *g = NULL;
        return -EINVAL;
    }
    return 0;
}

static int
utf8_ok(const char *s, size_t n)
{
    const unsigned char *p = (const unsigned char *) s;
    size_t               i = 0, k, need;

    while (i < n) {
        if (p[i] < 0x80) {
            i++;
            continue;
        }
        if (p[i] >= 0xc2 && p[i] <= 0xdf) {
            need = 1;
        } else if (p[i] >= 0xe0 && p[i] <= 0xef) {
            need = 2;
        } else if (p[i] >= 0xf0 && p[i] <= 0xf4) {
            need = 3;
        } else {
            return 0;
        }
        if (i + need >= n) {
            return 0;
        }
        /* no overlongs, no surrogates, nothing above U+10FFFF */
        if ((p[i] == 0xe0 && p[i + 1] < 0xa0)
            || (p[i] == 0xed && p[i + 1] > 0x9f)
            || (p[i] == 0xf0 && p[i + 1] < 0x90)
            || (p[i] == 0xf4 && p[i + 1] > 0x8f))
        {
            return 0;
        }
        for (k = 1; k <= need; k++) {
            if ((p[i + k] & 0xc0) != 0x80) {
                return 0;
            }
        }
        i += need + 1;
    }
    return 1;
}

static size_t random_text(char *buf, size_t max);

/* Detokenize ids with a fresh streaming detokenizer; checks every piece. */
static char *
detok_all(const llm_vocab_t *v, const int32_t *ids, size_t n, size_t *len,
    int *pieces_ok)
{
    llm_detok_t  *d;
    const char   *o;
    size_t        ol, i, cap = 256, l = 0;
    char         *buf = malloc(cap);

    *pieces_ok = 1;
    if (buf == NULL || llm_detok_create(&d, v, NULL, 0) < 0) {
        free(buf);
        return NULL;
    }
    for (i = 0; i <= n; i++) {
        if (i < n) {
            llm_detok_push(d, ids[i], &o, &ol);
        } else {
            llm_detok_flush(d, &o, &ol);
        }
        if (!utf8_ok(o, ol)) {
            *pieces_ok = 0;
        }
        while (l + ol + 1 > cap) {
            cap *= 2;
            buf = realloc(buf, cap);
        }
        memcpy(buf + l, o, ol);
        l += ol;
    }
    buf[l] = '\0';
    llm_detok_free(d);
    *len = l;
    return buf;
}

static void
print_ids(const char *label, const int32_t *ids, size_t n)
{
    size_t i;

    tk_note("    %s:", label);
    for (i = 0; i < n && i < 40; i++) {
        tk_note(" %d", ids[i]);
    }
    tk_note(n > 40 ? " ...\n" : "\n");
}

/*
 * The test vectors of one vocabulary.  Returns 1 if run, 0 if skipped.
 */
static int
test_vocab(const char *name)
{
    static const char  sep[] = "\n__ggml_vocab_test__\n";
    llm_gguf_t        *g;
    llm_vocab_t       *v;
    llm_tokens_t       t = { 0 };
    char               ipath[1024], opath[1024], err[512];
    char              *inp, *outp, *p, *q, *line, *end, *back;
    size_t             il, ol, bl, n_str = 0, n_ok = 0, n_rt = 0, k;
    int32_t            exp[4096];
    size_t             ne;
    int                shown = 0, pok;

    if (find_vocab_file(ipath, sizeof(ipath), name, "inp") < 0
        || find_vocab_file(opath, sizeof(opath), name, "out") < 0
        || load_vocab(name, &g, &v) == -ENOENT)
    {
        snprintf(err, sizeof(err), "vocab %s", name);
        tk_skip(err, "no %s.gguf/.inp/.out in engine/tests/data/vocab or "
                "%s/vocab", name, tk_shared_dir());
        return 0;
    }
    if (v == NULL) {
        tk_begin("vocab %s", name);
        tk_fail("cannot load");
        tk_end();
        return 1;
    }

    inp = tk_read_file(ipath, &il);
    outp = tk_read_file(opath, &ol);
    if (inp == NULL || outp == NULL) {
        CHECK(0, "%s: cannot read %s or %s", name, ipath, opath);
        goto done;
    }

    p = inp;
    line = outp;
    while ((q = strstr(p, sep)) != NULL) {
        end = strchr(line, '\n');
        if (end == NULL) {
            CHECK(0, "%s: %s has fewer lines than %s has strings", name,
                  opath, ipath);
            break;
        }
        *end = '\0';
        ne = 0;
        for (char *s = line; *s; ) {
            char *e;
            long  x = strtol(s, &e, 10);

            if (e == s) {
                break;
            }
            if (ne < sizeof(exp) / sizeof(exp[0])) {
                exp[ne++] = (int32_t) x;
            }
            s = e;
        }

        t.n = 0;
        if (llm_tokenize(v, p, (size_t) (q - p), 0, &t, err,
                         sizeof(err)) < 0)
        {
            CHECK(0, "%s: string %zu: %s", name, n_str, err);
        } else if (t.n != ne || memcmp(t.ids, exp, ne * 4) != 0) {
            tk_fail_quiet();
            if (shown++ < 5) {
                tk_note("  FAIL %s: string %zu '%.*s'\n", name, n_str,
                        (int) (q - p) > 60 ? 60 : (int) (q - p), p);
                print_ids("expected", exp, ne);
                print_ids("got     ", t.ids, t.n);
            }
        } else {
            n_ok++;
        }

        back = detok_all(v, t.ids, t.n, &bl, &pok);
        if (back && pok && bl == (size_t) (q - p)
            && memcmp(back, p, bl) == 0)
        {
            n_rt++;
        } else {
            tk_fail_quiet();
            if (shown++ < 5) {
                tk_note("  FAIL %s: round trip of string %zu '%.*s' gave "
                        "'%s'%s\n", name, n_str,
                        (int) (q - p) > 60 ? 60 : (int) (q - p), p,
                        back ? back : "(null)",
                        pok ? "" : " (a piece split UTF-8)");
            }
        }
        free(back);

        n_str++;
        p = q + sizeof(sep) - 1;
        line = end + 1;
    }
    (void) k;

    tk_end_as("vocab %s: %zu/%zu strings exact, %zu/%zu round trips "
              "(%s, pre %s, %u tokens)",
              name, n_ok, n_str, n_rt, n_str, llm_vocab_model(v),
              llm_vocab_pre(v), llm_vocab_n_tokens(v));

done:
    free(inp);
    free(outp);
    llm_tokens_free(&t);
    llm_vocab_free(v);
    llm_gguf_close(g);
    return 1;
}

/* Stream ids through a detokenizer with stops; returns the emitted text. */
static char *
stream(const llm_vocab_t *v, const int32_t *ids, size_t n,
    const char *const *stops, size_t n_stops, int *stopped_at,
    int *pieces_ok)
{
    llm_detok_t  *d;
    const char   *o;
    size_t        ol, i, l = 0;
    char         *buf = calloc(1, 65536);
    int           rc;

    *stopped_at = -1;
    *pieces_ok = 1;
    if (buf == NULL || llm_detok_create(&d, v, stops, n_stops) < 0) {
        free(buf);
        return NULL;
    }
    for (i = 0; i <= n; i++) {
        rc = i < n ? llm_detok_push(d, ids[i], &o, &ol)
                   : llm_detok_flush(d, &o, &ol);
        if (!utf8_ok(o, ol)) {
            *pieces_ok = 0;
        }
        if (l + ol < 65535) {
            memcpy(buf + l, o, ol);
            l += ol;
        }
        if (rc == 1 && *stopped_at < 0) {
            *stopped_at = (int) i;
        }
    }
    llm_detok_free(d);
    return buf;
}

static void
test_detok_bpe(void)
{
    llm_gguf_t    *g;
    llm_vocab_t   *v;
    llm_tokens_t   t = { 0 };
    char          *s, err[256];
    int            at, pok;
    const char    *text = "Hello world, this is 🦙 and 中文 with stop "
                          "strings here.";
    const char    *stop1[] = { "this is 🦙 an" };     /* spans 3+ tokens */
    const char    *stop2[] = { "world peace", "XYZ" };
    const char    *stop3[] = { "ld, thi" };
    size_t         i;

    if (load_vocab("gpt-2", &g, &v) < 0) {
        tk_skip("detok byte-level", "no gpt-2 vocabulary");
        return;
    }

    llm_tokenize(v, text, strlen(text), 0, &t, err, sizeof(err));

    /* emoji and CJK are split across byte-level tokens: never emitted
     * half, whole text comes back */
    s = stream(v, t.ids, t.n, NULL, 0, &at, &pok);
    CHECK(pok, "a streamed piece split a UTF-8 character");
    CHECK(s && strcmp(s, text) == 0, "stream without stops gave '%s'", s);
    CHECK(at == -1, "stopped without stop strings");
    free(s);

    s = stream(v, t.ids, t.n, stop1, 1, &at, &pok);
    CHECK(s && strcmp(s, "Hello world, ") == 0,
          "stop spanning tokens: emitted '%s'", s);
    CHECK(at > 0 && (size_t) at < t.n, "stop not reported (at %d)", at);
    CHECK(pok, "piece split UTF-8 with stops");
    free(s);

    s = stream(v, t.ids, t.n, stop3, 1, &at, &pok);
    CHECK(s && strcmp(s, "Hello wor") == 0,
          "stop inside tokens: emitted '%s'", s);
    free(s);

    /* which stop string ended the stream: the one found first (for
     * Anthropic's stop_sequence), none before the end or without a match */
    {
        const char   *stop4[] = { "XYZ", "is 🦙", "ld, thi" };
        const char   *o;
        size_t        ol;
        llm_detok_t  *d;
        int           rc = 0;

        d = NULL;
        CHECK(llm_detok_create(&d, v, stop4, 3) == 0, "detok_create");
        for (i = 0; d != NULL && i < t.n && rc != 1; i++) {
            CHECK(llm_detok_stop_string(d) == NULL,
                  "a stop string reported before the stream stopped");
            rc = llm_detok_push(d, t.ids[i], &o, &ol);
        }
        CHECK(rc == 1 && llm_detok_stop_string(d) != NULL
              && strcmp(llm_detok_stop_string(d), "ld, thi") == 0,
              "stop string reported: '%s'",
              llm_detok_stop_string(d) ? llm_detok_stop_string(d) : "NULL");
        if (d != NULL) {
            llm_detok_reset(d);
            CHECK(llm_detok_stop_string(d) == NULL,
                  "a reset detokenizer still reports its stop string");
            llm_detok_free(d);
        }
    }

    /* a held prefix ("world ") that turns out not to be a stop is released */
    s = stream(v, t.ids, t.n, stop2, 2, &at, &pok);
    CHECK(s && strcmp(s, text) == 0, "false stop prefix: emitted '%s'", s);
    CHECK(at == -1, "false stop reported at %d", at);
    free(s);

    /* invalid UTF-8: byte-level BPE tokenizes any bytes; decoding gives
     * U+FFFD per maximal invalid subpart, an incomplete end too */
    {
        static const struct { const char *in, *out; } cases[] = {
            { "a\xff" "b", "a\xef\xbf\xbd" "b" },
            { "\xc3(x", "\xef\xbf\xbd(x" },
            { "\xed\xa0\x80z", "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbdz" },
            { "ok\xe2\x82", "ok\xef\xbf\xbd" },
            { "\xf0\x9f\xa6\x99\xf0\x9f", "\xf0\x9f\xa6\x99\xef\xbf\xbd" },
            { "\xe4\xb8\xad\xe6", "\xe4\xb8\xad\xef\xbf\xbd" },
        };

        for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
            t.n = 0;
            llm_tokenize(v, cases[i].in, strlen(cases[i].in), 0, &t, err,
                         sizeof(err));
            s = stream(v, t.ids, t.n, NULL, 0, &at, &pok);
            CHECK(s && strcmp(s, cases[i].out) == 0 && pok,
                  "invalid UTF-8 case %zu: got '%s'", i, s);
            free(s);
        }
    }

    /* stop strings must be valid UTF-8 */
    {
        llm_detok_t *d;
        const char  *bad[] = { "\x80x" };

        CHECK(llm_detok_create(&d, v, bad, 1) == -EINVAL,
              "invalid stop string accepted");
    }

    tk_end_as("detok byte-level: UTF-8 never split, stops across 2-3 "
              "tokens, false prefixes released, U+FFFD");
    llm_tokens_free(&t);
    llm_vocab_free(v);
    llm_gguf_close(g);
}

static void
test_detok_spm(void)
{
    llm_gguf_t    *g;
    llm_vocab_t   *v;
    llm_tokens_t   t = { 0 };
    llm_detok_t   *d;
    char           err[256];
    const char    *o;
    size_t         ol, i, n_byte = 0;
    int            emitted_early = 0;
    const char    *text = "🦙";

    if (load_vocab("llama-spm", &g, &v) < 0) {
        tk_skip("detok SentencePiece", "no llama-spm vocabulary");
        return;
    }
    llm_tokenize(v, text, strlen(text), 0, &t, err, sizeof(err));
    for (i = 0; i < t.n; i++) {
        n_byte += llm_vocab_token_type(v, t.ids[i]) == 6;
    }
    CHECK(n_byte == 4, "expected 4 byte-fallback tokens for U+1F999, got "
          "%zu of %zu", n_byte, t.n);

    llm_detok_create(&d, v, NULL, 0);
    {
        char   buf[64];
        size_t l = 0;

        for (i = 0; i < t.n; i++) {
            llm_detok_push(d, t.ids[i], &o, &ol);
            if (i + 1 < t.n && ol > 0 && memchr(o, 0xf0, ol)) {
                emitted_early = 1;
            }
            memcpy(buf + l, o, ol);
            l += ol;
        }
        llm_detok_flush(d, &o, &ol);
        memcpy(buf + l, o, ol);
        l += ol;
        buf[l] = '\0';
        CHECK(!emitted_early, "byte-fallback bytes emitted before the "
              "character completed");
        CHECK(strcmp(buf, text) == 0, "byte fallback joined to '%s'", buf);
    }
    llm_detok_free(d);

    /* merging word by word gives what merging the whole text gives */
    CHECK(v->spm_split, "llama-spm: expected word-by-word merging");
    for (i = 0; i < 3000; i++) {
        char          buf[512];
        size_t        n = random_text(buf, sizeof(buf));
        llm_tokens_t  whole = { 0 };

        t.n = 0;
        llm_tokenize(v, buf, n, 0, &t, err, sizeof(err));
        v->spm_split = 0;
        llm_tokenize(v, buf, n, 0, &whole, err, sizeof(err));
        v->spm_split = 1;
        CHECK(t.n == whole.n && memcmp(t.ids, whole.ids, t.n * 4) == 0,
              "SentencePiece word-by-word differs from whole-text merging");
        llm_tokens_free(&whole);
    }

    /* random text round-trips through SentencePiece + byte fallback */
    for (i = 0; i < 3000; i++) {
        char    buf[512], *back;
        size_t  n = random_text(buf, sizeof(buf)), bl;
        int     pok;

        t.n = 0;
        llm_tokenize(v, buf, n, 0, &t, err, sizeof(err));
        back = detok_all(v, t.ids, t.n, &bl, &pok);
        if (utf8_ok(buf, n)) {
            CHECK(back && bl == n && memcmp(back, buf, n) == 0,
                  "SentencePiece round trip of %zu bytes gave %zu", n, bl);
        }
        CHECK(pok, "SentencePiece piece split UTF-8");
        free(back);
    }

    tk_end_as("SentencePiece: byte-fallback tokens joined, leading space "
              "handled, word-by-word merging exact, random text round-trips");
    llm_tokens_free(&t);
    llm_vocab_free(v);
    llm_gguf_close(g);
}

static void
test_special(void)
{
    llm_gguf_t    *g;
    llm_vocab_t   *v;
    llm_tokens_t   t = { 0 };
    char           err[256];
    const char    *text = "a<|endoftext|>b";
    int32_t        eot;
    size_t         i, found = 0;

    if (load_vocab("gpt-2", &g, &v) < 0) {
        tk_skip("special tokens", "no gpt-2 vocabulary");
        return;
    }
    eot = llm_vocab_find(v, "<|endoftext|>", 13);
    CHECK(eot == 50256, "<|endoftext|> is %d", eot);
    CHECK(llm_vocab_is_eog(v, eot), "<|endoftext|> does not end generation");
    CHECK(llm_vocab_is_control(v, eot), "<|endoftext|> is not control");

    llm_tokenize(v, text, strlen(text), LLM_TOK_PARSE_SPECIAL, &t, err,
                 sizeof(err));
    CHECK(t.n == 3 && t.ids[1] == eot, "with PARSE_SPECIAL: %zu tokens", t.n);

    t.n = 0;
    llm_tokenize(v, text, strlen(text), 0, &t, err, sizeof(err));
    for (i = 0; i < t.n; i++) {
        found += t.ids[i] == eot;
    }
    CHECK(t.n > 3 && found == 0, "without PARSE_SPECIAL the control token "
          "was matched");

    /* a guard before it: plain text, the guard itself gone */
    {
        llm_tokens_t  plain = { 0 };
        const char   *gt = "a" LLM_TOK_GUARD "<|endoftext|>b<|endoftext|>";

        t.n = 0;
        llm_tokenize(v, gt, strlen(gt), LLM_TOK_PARSE_SPECIAL
                     | LLM_TOK_GUARDED, &t, err, sizeof(err));
        llm_tokenize(v, "a<|endoftext|>b", 15, 0, &plain, err, sizeof(err));
        CHECK(t.n == plain.n + 1 && t.ids[t.n - 1] == eot
              && memcmp(t.ids, plain.ids, plain.n * sizeof(int32_t)) == 0,
              "guarded: %zu tokens, expected the plain %zu and one special",
              t.n, plain.n);
        llm_tokens_free(&plain);
    }

    {
        size_t      l;
        const char *p = llm_token_bytes(v, eot, 0, &l);

        CHECK(l == 0, "control token piece without special: '%s'", p);
        p = llm_token_bytes(v, eot, 1, &l);
        CHECK(l == 13 && memcmp(p, "<|endoftext|>", 13) == 0,
              "control token piece with special");
    }

    tk_end_as("special tokens: matched only with PARSE_SPECIAL and not "
              "after a guard, control pieces only when asked");
    llm_tokens_free(&t);
    llm_vocab_free(v);
    llm_gguf_close(g);
}

static uint64_t  rng_state = 0x9e3779b97f4a7c15ull;

static uint32_t
rnd(void)
{
    return (uint32_t) (tk_xorshift64(&rng_state) >> 16);
}

static size_t
put_cp(char *d, uint32_t cp)
{
    if (cp >= 0xd800 && cp <= 0xdfff) {
        cp = 0xfffd;
    }
    return llm_utf8_put(d, cp);
}

/* Random text that exercises every branch of the pre-tokenizer regexes. */
static size_t
random_text(char *buf, size_t max)
{
    static const char  *asc[] = {
        " ", "  ", "   ", "\t", "\n", "\r", "\r\n", "\n\n", " \n", "'",
        "'s", "'S", "'t", "'re", "'RE", "'Ve", "'m", "'ll", "'LL", "'d",
        "'x", "!", "?!", "...", ",", "-", "_", "/", "(", ")", "\"", "#",
        "$", "+", "<", "=", "`", "|", "~", "0", "12", "345", "6789",
        "a", "Hello", "WORLD", "don", "x", "\x80", "\xff", "\xc3",
        "\xe2\x82", "\xf0\x9f", "\xed\xa0\x80", "\xc5\xbf",
        "'\xc5\xbfx", "'Sa", "'tt", "'llo", "'REd", "'d1", " 1", " !",
        " a", "\t!", "\xe1\xa0\x8e", "\xc2\x85x",
        "\xe3\x80\x80\xe3\x80\x80" "a",
    };
    static const uint32_t  spaces[] = {
        0x85, 0xa0, 0x1680, 0x2000, 0x2005, 0x200a, 0x2028, 0x2029,
        0x202f, 0x205f, 0x3000, 0x0b, 0x0c, 0x200b, 0xfeff, 0x17f,
    };
    size_t    n = 0, len = 1 + rnd() % 48, k;
    uint32_t  r, cp;

    while (len-- > 0 && n + 8 < max) {
        r = rnd() % 100;
        if (r < 45) {
            const char *a = asc[rnd() % (sizeof(asc) / sizeof(asc[0]))];

            k = strlen(a);
            memcpy(buf + n, a, k);
            n += k;
            continue;
        }
        if (r < 55) {
            cp = spaces[rnd() % (sizeof(spaces) / sizeof(spaces[0]))];
        } else if (r < 70) {
            cp = 0x80 + rnd() % 0x780;            /* Latin .. NKo, marks */
        } else if (r < 85) {
            cp = 0x800 + rnd() % 0xf800;          /* BMP: CJK, symbols */
        } else if (r < 95) {
            cp = 0x10000 + rnd() % 0x100000;      /* astral planes */
        } else {
            cp = 0x300 + rnd() % 0x70;            /* combining marks */
        }
        n += put_cp(buf + n, cp);
    }
    return n;
}

static void
test_pre_vs_pcre(void)
{
    static const char *const pres[] = {
        "gpt-2", "llama-bpe", "qwen2", "falcon", "starcoder", "gpt-4o",
    };
    llm_gguf_t    *g;
    llm_vocab_t   *v;
    llm_tokens_t   a = { 0 }, b = { 0 }, t = { 0 };
    char           buf[512], err[256];
    size_t         p, it, n, bad = 0;

    if (load_vocab("gpt-2", &g, &v) < 0) {
        tk_skip("pre-tokenizer cross-check", "no gpt-2 vocabulary");
        return;
    }
    for (p = 0; p < sizeof(pres) / sizeof(pres[0]); p++) {
        if (llm_bpe_set_pre(v, pres[p], err, sizeof(err)) < 0) {
            CHECK(0, "%s", err);
            continue;
        }
        for (it = 0; it < 20000; it++) {
            n = random_text(buf, sizeof(buf));
            /* compare the piece boundaries, not just the ids */
            a.n = b.n = 0;
            v->pcre_only = 0;
            v->split_log = &a;
            llm_tokenize(v, buf, n, 0, &t, err, sizeof(err));
            v->pcre_only = 1;
            v->split_log = &b;
            llm_tokenize(v, buf, n, 0, &t, err, sizeof(err));
            v->pcre_only = 0;
            v->split_log = NULL;
            t.n = 0;
            if (a.n != b.n || memcmp(a.ids, b.ids, a.n * 4) != 0) {
                tk_fail_quiet();
                if (bad++ < 3) {
                    tk_note("  FAIL pre %s: hand-written and PCRE2 splits "
                            "differ on (%zu bytes):", pres[p], n);
                    for (size_t i = 0; i < n; i++) {
                        tk_note(" %02x", (unsigned char) buf[i]);
                    }
                    tk_note("\n");
                    print_ids("hand piece ends", a.ids, a.n);
                    print_ids("pcre piece ends", b.ids, b.n);
                }
            }
        }
    }
    tk_end_as("pre-tokenizer: hand-written gpt-2/llama3/qwen2/o200k splits "
              "equal PCRE2's on 6 x 20000 random strings");
    llm_tokens_free(&a);
    llm_tokens_free(&b);
    llm_tokens_free(&t);
    llm_vocab_free(v);
    llm_gguf_close(g);
}

/* Every pre-tokenizer set compiles and splits losslessly. */
static void
test_all_pre_sets(void)
{
    static const char *const pres[] = {
        "gpt-2", "llama-bpe", "llama3", "qwen2", "deepseek-llm",
        "deepseek-coder", "deepseek-v3", "falcon", "mpt", "starcoder",
        "refact", "minimax-m2", "gpt-4o", "llama4", "tekken", "bloom",
        "default", "command-r", "smollm", "dbrx", "stablelm2", "olmo",
    };
    llm_gguf_t    *g;
    llm_vocab_t   *v;
    llm_tokens_t   t = { 0 };
    char           buf[512], err[256], *back;
    size_t         p, it, n, bl;
    int            pok;

    if (load_vocab("gpt-2", &g, &v) < 0) {
        tk_skip("pre-tokenizer sets", "no gpt-2 vocabulary");
        return;
    }
    for (p = 0; p < sizeof(pres) / sizeof(pres[0]); p++) {
        if (llm_bpe_set_pre(v, pres[p], err, sizeof(err)) < 0) {
            CHECK(0, "pre %s: %s", pres[p], err);
            continue;
        }
        for (it = 0; it < 2000; it++) {
            n = random_text(buf, sizeof(buf));
            t.n = 0;
            if (llm_tokenize(v, buf, n, 0, &t, err, sizeof(err)) < 0) {
                CHECK(0, "pre %s: %s", pres[p], err);
                break;
            }
            back = detok_all(v, t.ids, t.n, &bl, &pok);
            /* invalid input comes back with U+FFFD: compare valid text;
             * qwen2 gives back the NFC of the text */
            if (utf8_ok(buf, n)) {
                char   *want = buf, *norm = NULL;
                size_t  wn = n;

                if (v->nfc && llm_nfc(buf, n, &norm, &wn) == 1) {
                    want = norm;
                } else {
                    wn = n;
                }
                CHECK(back && bl == wn && memcmp(back, want, wn) == 0,
                      "pre %s: round trip of %zu bytes failed (got %zu: "
                      "%.*s | %.*s)", pres[p], n, bl, (int) n, buf, (int) bl,
                      back ? back : "");
                free(norm);
            }
            CHECK(pok, "pre %s: a piece split UTF-8", pres[p]);
            free(back);
        }
    }
    {
        llm_vocab_t *bad = v;

        CHECK(llm_bpe_set_pre(bad, "no-such-pre", err, sizeof(err)) < 0,
              "unknown pre accepted");
    }
    tk_end_as("pre-tokenizer sets: all %zu compile, tokenize and round-trip "
              "random text",
              sizeof(pres) / sizeof(pres[0]));
    llm_tokens_free(&t);
    llm_vocab_free(v);
    llm_gguf_close(g);
}

/*
 * Write a small vocabulary GGUF: model, pre (NULL: none), tokens, an
 * optional token_type array of n_types entries, merges.
 */
static int
write_vocab(const char *path, const char *model, const char *pre,
    size_t n_types, int bos)
{
    static const char *const toks[] = { "a", "b", "ab", "<s>" };
    static const char *const merges[] = { "a b" };
    static const int32_t     types[] = { 1, 1, 1, 3, 1, 1 };
    size_t                   lens[4], ml[1] = { 3 }, i;
    llm_gguf_writer_t       *w;
    char                     err[256];

    for (i = 0; i < 4; i++) {
        lens[i] = strlen(toks[i]);
    }
    if (llm_gguf_writer_open(&w, path, err, sizeof(err)) < 0) {
        return -1;
    }
    llm_gguf_w_str(w, "general.architecture", "llama", 5);
    llm_gguf_w_str(w, "tokenizer.ggml.model", model, strlen(model));
    if (pre) {
        llm_gguf_w_str(w, "tokenizer.ggml.pre", pre, strlen(pre));
    }
    llm_gguf_w_str_arr(w, "tokenizer.ggml.tokens", toks, lens, 4);
    if (n_types) {
        llm_gguf_w_arr(w, "tokenizer.ggml.token_type", LLM_GGUF_INT32, types,
                       n_types);
    }
    llm_gguf_w_str_arr(w, "tokenizer.ggml.merges", merges, ml, 1);
    if (bos >= 0) {
        llm_gguf_w_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t) bos);
    }
    llm_gguf_w_begin_data(w);
    return llm_gguf_writer_close(w, err, sizeof(err));
}

/* Bad vocabularies fail with an errno and a message naming the key. */
static void
test_bad_vocab(void)
{
    static const struct {
        const char *model, *pre;
        size_t      n_types;
        int         bos;
        int         rc;
        const char *key;
    } cases[] = {
        { "gpt2", "gpt-2", 4, 3, 0, NULL },
        { "bert", "gpt-2", 4, -1, -ENOTSUP, "tokenizer.ggml.model" },
        { "gpt2", "no-such-pre", 4, -1, -ENOTSUP, "tokenizer.ggml.pre" },
        { "gpt2", "gpt-2", 6, -1, -EINVAL, "tokenizer.ggml.token_type" },
        { "gpt2", "gpt-2", 4, 9, -EINVAL, "tokenizer.ggml.bos_token_id" },
    };
    char           path[512], err[512];
    llm_gguf_t    *g;
    llm_vocab_t   *v;
    llm_tokens_t   t = { 0 };
    size_t         i;
    int            rc;

    snprintf(path, sizeof(path), "%s/test_tokenizer.%d.gguf",
             (getenv("TMPDIR") && *getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp"), (int) getpid());
    for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        if (write_vocab(path, cases[i].model, cases[i].pre, cases[i].n_types,
                        cases[i].bos) < 0
            || llm_gguf_open(&g, path, err, sizeof(err)) < 0)
        {
            CHECK(0, "case %zu: cannot write or open %s", i, path);
            continue;
        }
        err[0] = '\0';
        rc = llm_vocab_load(&v, g, err, sizeof(err));
        CHECK(rc == cases[i].rc, "case %zu: rc %d, expected %d (%s)", i, rc,
              cases[i].rc, err);
        if (cases[i].key != NULL) {
            CHECK(strstr(err, cases[i].key) != NULL,
                  "case %zu: message '%s' does not name %s", i, err,
                  cases[i].key);
        }
        if (rc == 0) {
            /* the tiny vocabulary works: "ab" merges, <s> is control */
            llm_tokenize(v, "ab<s>", 5, LLM_TOK_PARSE_SPECIAL, &t, err,
                         sizeof(err));
            CHECK(t.n == 2 && t.ids[0] == 2 && t.ids[1] == 3,
                  "tiny vocabulary: %zu tokens", t.n);
            llm_vocab_free(v);
        }
        llm_gguf_close(g);
    }
    unlink(path);
    llm_tokens_free(&t);
    tk_end_as("bad vocabularies: unknown model/pre, wrong array sizes, ids "
              "out of range rejected with the key named");
}

static size_t
unhex(const char *h, char *out, size_t max)
{
    size_t    n = 0;
    unsigned  x;

    while (n < max && h[0] && h[1] && h[0] != ' ' && h[0] != '\n'
           && sscanf(h, "%2x", &x) == 1)
    {
        out[n++] = (char) x;
        h += 2;
    }
    return n;
}

static void
test_nfc(void)
{
    char           path[1024], line[8192], in[2048], ex[2048], *o;
    FILE          *f;
    size_t         ni, ne, ol, n_cases = 0, n_changed = 0;
    int            r;
    llm_gguf_t    *g;
    llm_vocab_t   *v;

    if (find_vocab_file(path, sizeof(path), "nfc-cases", "txt") < 0
        || (f = fopen(path, "r")) == NULL)
    {
        tk_skip("NFC", "no engine/tests/data/vocab/nfc-cases.txt");
        return;
    }
    while (fgets(line, sizeof(line), f) != NULL) {
        char *sp = strchr(line, ' ');

        if (sp == NULL) {
            continue;
        }
        ni = unhex(line, in, sizeof(in));
        ne = unhex(sp + 1, ex, sizeof(ex));
        r = llm_nfc(in, ni, &o, &ol);
        n_cases++;
        n_changed += r == 1;
        if (r == 1) {
            CHECK(ol == ne && memcmp(o, ex, ne) == 0, "NFC case %zu: %s",
                  n_cases, line);
        } else {
            CHECK(r == 0 && ni == ne && memcmp(in, ex, ne) == 0,
                  "NFC case %zu left unchanged: %s", n_cases, line);
        }
        free(o);
    }
    fclose(f);
    CHECK(n_cases >= 1000 && n_changed >= 100, "only %zu cases (%zu changed)",
          n_cases, n_changed);

    /* invalid bytes pass through, and block composition */
    r = llm_nfc("e\xff\xcc\x81", 4, &o, &ol);
    CHECK(r == 0, "invalid byte between e and U+0301 composed (%d)", r);
    free(o);
    r = llm_nfc("\xff" "e\xcc\x81\x80", 5, &o, &ol);
    CHECK(r == 1 && ol == 4 && memcmp(o, "\xff\xc3\xa9\x80", 4) == 0,
          "NFC next to invalid bytes");
    free(o);

    /* byte-level vocabularies other than qwen2 do not normalize */
    if (load_vocab("gpt-2", &g, &v) == 0) {
        llm_tokens_t  a = { 0 }, b = { 0 };
        char          e[256];

        llm_tokenize(v, "caf\xc3\xa9", 5, 0, &a, e, sizeof(e));
        llm_tokenize(v, "cafe\xcc\x81", 6, 0, &b, e, sizeof(e));
        CHECK(a.n != b.n || memcmp(a.ids, b.ids, a.n * 4) != 0,
              "gpt-2 normalized to NFC");
        llm_bpe_set_pre(v, "qwen2", e, sizeof(e));
        a.n = b.n = 0;
        llm_tokenize(v, "caf\xc3\xa9", 5, 0, &a, e, sizeof(e));
        llm_tokenize(v, "cafe\xcc\x81", 6, 0, &b, e, sizeof(e));
        CHECK(a.n == b.n && memcmp(a.ids, b.ids, a.n * 4) == 0,
              "pre qwen2 did not normalize to NFC");
        llm_tokens_free(&a);
        llm_tokens_free(&b);
        llm_vocab_free(v);
        llm_gguf_close(g);
    }

    tk_end_as("NFC: %zu cases as Python's unicodedata (%zu changed), invalid "
              "bytes kept, only for qwen2",
              n_cases, n_changed);
}

/*
 * Linear work on big inputs: 4 MB of short words, once as one fragment and
 * once cut into ~200k fragments by a special token every few words.  The
 * token arrays must grow geometrically: the ids copied by growing them are
 * at most about twice the ids produced (the old exact-size reserve copied
 * the whole array for every fragment: quadratic).
 */
static void
test_linear(void)
{
    static const char *const words[] = {
        "a ", "to ", "of ", "it ", "is ", "we ", "go ", "on "
    };
    const size_t   total = 4u << 20;
    llm_gguf_t    *g;
    llm_vocab_t   *v;
    llm_tokens_t   t = { 0 };
    char           err[256], *buf;
    size_t         n = 0, i = 0, frags = 0;
    unsigned long  copied0;
    int            pass;

    if (load_vocab("gpt-2", &g, &v) < 0) {
        tk_skip("linear tokenization", "no gpt-2 vocabulary");
        return;
    }
    buf = malloc(total + 64);
    if (buf == NULL) {
        CHECK(0, "out of memory");
        goto done;
    }
    for (pass = 0; pass < 2; pass++) {
        n = 0;
        frags = 0;
        for (i = 0; n < total; i++) {
            const char *w = words[(i * 7 + i / 3) % 8];

            memcpy(buf + n, w, strlen(w));
            n += strlen(w);
            if (pass == 1 && i % 2 == 1) {
                memcpy(buf + n, "<|endoftext|>", 13);
                n += 13;
                frags++;
            }
        }
        t.n = 0;
        llm_tokens_free(&t);
        copied0 = llm_tok_n_copied;
        CHECK(llm_tokenize(v, buf, n, LLM_TOK_PARSE_SPECIAL, &t, err,
                           sizeof(err)) == 0, "tokenize: %s", err);
        CHECK(t.n >= i, "%zu bytes gave only %zu tokens", n, t.n);
        CHECK(llm_tok_n_copied - copied0 <= 3 * t.n, "%s: %lu ids copied "
              "growing token arrays for %zu tokens",
              pass ? "fragments" : "one text", llm_tok_n_copied - copied0,
              t.n);
    }
    tk_end_as("linear tokenization: 4 MB in 1 and in %zu fragments, the "
              "token array grows geometrically", frags + 1);
    free(buf);

done:
    llm_tokens_free(&t);
    llm_vocab_free(v);
    llm_gguf_close(g);
}

int
main(void)
{
    static const char *const names[] = {
        "gpt-2", "llama-spm", "phi-3", "deepseek-coder", "deepseek-llm",
        "falcon", "mpt", "starcoder", "refact", "qwen2", "llama-bpe",
    };
    size_t  i;

    for (i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        test_vocab(names[i]);
    }
    test_special();
    test_linear();
    test_bad_vocab();
    test_pre_vs_pcre();
    test_all_pre_sets();
    test_nfc();
    test_detok_bpe();
    test_detok_spm();

    return tk_done();
}
