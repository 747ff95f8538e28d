/*
 * Reasoning split checks: each case fed whole, byte by byte, split in two
 * at every point and in random chunks; the reasoning and the answer must
 * be the expected ones every time, and inside() must say "in the block"
 * exactly while the text so far has opened it and not closed it.
 */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "decode/reasoning.h"
#include "testkit.h"

typedef struct {
    char    reasoning[1024];
    size_t  rlen;
    char    answer[1024];
    size_t  alen;
    char    calls[1024];          /* "name(args) " per call */
    int     open;                 /* a call's arguments are coming */
} rec_t;

static void
rec_call(void *ud, const char *name, size_t nlen, const char *args,
    size_t len)
{
    rec_t  *r = ud;
    size_t  n = strlen(r->calls);

    if (name != NULL) {
        snprintf(r->calls + n, sizeof(r->calls) - n, "%s%.*s(",
                 r->open ? ") " : "", (int) nlen, name);
        r->open = 1;
    } else if (r->open) {
        snprintf(r->calls + n, sizeof(r->calls) - n, "%.*s", (int) len,
                 args);
    } else {
        snprintf(r->calls + n, sizeof(r->calls) - n, "<args without a call>");
    }
}

static void
rec_reasoning(void *ud, const char *s, size_t len)
{
    rec_t *r = ud;

    if (r->rlen + len < sizeof(r->reasoning)) {
        memcpy(r->reasoning + r->rlen, s, len);
        r->rlen += len;
        r->reasoning[r->rlen] = '\0';
    }
}

static void
rec_answer(void *ud, const char *s, size_t len)
{
    rec_t *r = ud;

    if (r->alen + len < sizeof(r->answer)) {
        memcpy(r->answer + r->alen, s, len);
        r->alen += len;
        r->answer[r->alen] = '\0';
    }
}

typedef struct {
    const char  *name;
    int          fmt;
    int          inside;       /* the prompt opened the block */
    const char  *text;
    const char  *reasoning;
    const char  *answer;
    const char  *calls;        /* harmony: "name(args" per call, ") " apart */
} rcase_t;

static const rcase_t  cases[] = {
    { "think block, then the answer", LLM_REASONING_THINK, 0,
      "<think>\nI should greet.\n</think>\n\nHello!", "I should greet.",
      "Hello!", NULL },
    { "the template opened it", LLM_REASONING_THINK, 1,
      "\nplan: say hi\n\n</think>\n\nHi", "plan: say hi", "Hi", NULL },
    { "no block: all answer, space kept", LLM_REASONING_THINK, 0,
      "\n\nHello <think> there", "", "\n\nHello <think> there", NULL },
    { "cut off inside", LLM_REASONING_THINK, 0, "<think>still thinking  ",
      "still thinking", "", NULL },
    { "not the marker", LLM_REASONING_THINK, 0, "<thinx>a", "", "<thinx>a", NULL },
    { "a broken close stays reasoning", LLM_REASONING_THINK, 0,
      "<think>a </thin b</think>c", "a </thin b", "c", NULL },
    { "a later <think> is answer", LLM_REASONING_THINK, 0,
      "<think>r</think>a <think>b</think>", "r", "a <think>b</think>", NULL },
    { "empty block (thinking off)", LLM_REASONING_THINK, 0,
      "<think>\n\n</think>\n\nOK", "", "OK", NULL },
    { "UTF-8 in both", LLM_REASONING_THINK, 0,
      "<think>caf\xc3\xa9 \xe2\x80\x94 ok</think>\xe4\xbd\xa0\xe5\xa5\xbd",
      "caf\xc3\xa9 \xe2\x80\x94 ok", "\xe4\xbd\xa0\xe5\xa5\xbd", NULL },
    { "format none passes all", LLM_REASONING_NONE, 0,
      "<think>x</think>y", "", "<think>x</think>y", NULL },
    { "harmony: analysis, then final", LLM_REASONING_HARMONY, 0,
      "<|channel|>analysis<|message|>think hard<|end|><|start|>assistant"
      "<|channel|>final<|message|>The answer.", "think hard", "The answer.", NULL },
    { "harmony: a tool call", LLM_REASONING_HARMONY, 0,
      "<|channel|>analysis<|message|>need weather<|end|><|start|>assistant"
      "<|channel|>commentary to=functions.get_weather <|constrain|>json"
      "<|message|>{\"city\":\"Paris\"}", "need weather", "",
      "get_weather({\"city\":\"Paris\"}" },
    { "harmony: the recipient first, two calls", LLM_REASONING_HARMONY, 0,
      "<|channel|>analysis<|message|>x<|end|><|start|>assistant "
      "to=functions.f<|channel|>commentary json<|message|>{}<|end|>"
      "<|start|>assistant to=functions.g<|channel|>commentary"
      "<|message|>{\"a\":1}", "x", "", "f({}) g({\"a\":1}" },
    { "harmony: a preamble to the user", LLM_REASONING_HARMONY, 0,
      "<|channel|>commentary<|message|>Let me check.<|end|>", "",
      "Let me check.", NULL },
    { "harmony: plain text", LLM_REASONING_HARMONY, 0, "Hello there", "",
      "Hello there", NULL },
    { "harmony: <|call|> and <|return|> spelled in text end a message",
      LLM_REASONING_HARMONY, 0,
      "<|channel|>commentary to=functions.f <|constrain|>json<|message|>"
      "{\"a\":1}<|call|><|channel|>final<|message|>ok<|return|>", "", "ok",
      "f({\"a\":1}" },
    { "harmony: cut off in analysis", LLM_REASONING_HARMONY, 0,
      "<|channel|>analysis<|message|>abc", "abc", "", NULL },
    { "harmony: cut off in a header", LLM_REASONING_HARMONY, 0,
      "<|channel|>analysis<|message|>a<|end|><|start|>assist", "a", "", NULL },
};

/* Feeds c->text in the pieces cut (sorted offsets, ncut of them). */
static int
run(const rcase_t *c, const size_t *cut, size_t ncut, rec_t *rec,
    int *inside_ok)
{
    llm_reasoning_out_t  out = { rec_reasoning, rec_answer, rec_call, rec };
    llm_reasoning_t     *r = llm_reasoning_create(c->fmt, c->inside);
    size_t               n = strlen(c->text), at = 0, i, end;
    const char          *open, *close;

    if (r == NULL) {
        return -1;
    }
    memset(rec, 0, sizeof(*rec));
    *inside_ok = 1;
    open = c->fmt == LLM_REASONING_THINK ? strstr(c->text, "<think>")
                                         : NULL;
    close = open || c->inside ? strstr(c->text, "</think>") : NULL;
    for (i = 0; i <= ncut; i++) {
        end = i < ncut ? cut[i] : n;
        llm_reasoning_feed(r, c->text + at, end - at, 0, &out);
        at = end;
        /* inside exactly between a leading open and its close */
        if (c->fmt == LLM_REASONING_THINK
            && (c->inside || (open && strspn(c->text, " \n") ==
                                      (size_t) (open - c->text))))
        {
            size_t  o = c->inside ? 0 : (size_t) (open - c->text) + 7;
            size_t  e = close ? (size_t) (close - c->text) + 8 : n + 1;
            int     want = at >= o && at < e;

            /* the decision may wait for the bytes of a marker */
            if (llm_reasoning_inside(r) != want && at + 8 < e && at > o + 8)
            {
                *inside_ok = 0;
            }
        }
    }
    llm_reasoning_feed(r, "", 0, 1, &out);
    llm_reasoning_free(r);
    return 0;
}

static int
same(const rcase_t *c, const rec_t *rec)
{
    return strcmp(rec->reasoning, c->reasoning) == 0
           && strcmp(rec->answer, c->answer) == 0
           && strcmp(rec->calls, c->calls ? c->calls : "") == 0;
}

static void
check_case(const rcase_t *c)
{
    size_t    n = strlen(c->text), cut[64], i, k, ncut;
    rec_t     rec;
    int       ok_in, fails = 0, runs = 0;
    uint64_t  rng = 0x9e3779b97f4a7c15ull;

    tk_begin("%s", c->name);
    /* whole */
    REQUIRE(run(c, NULL, 0, &rec, &ok_in) == 0);
    CHECK(same(c, &rec), "whole: reasoning '%s' answer '%s' calls '%s'",
          rec.reasoning, rec.answer, rec.calls);
    /* byte by byte */
    for (i = 0; i + 1 < n && i < 64; i++) {
        cut[i] = i + 1;
    }
    if (n <= 64) {
        REQUIRE(run(c, cut, n - 1, &rec, &ok_in) == 0);
        CHECK(same(c, &rec), "bytes: reasoning '%s' answer '%s'",
              rec.reasoning, rec.answer);
        CHECK(ok_in, "bytes: inside() wrong");
    }
    /* two pieces at every point */
    for (i = 1; i < n; i++) {
        cut[0] = i;
        REQUIRE(run(c, cut, 1, &rec, &ok_in) == 0);
        runs++;
        fails += !same(c, &rec);
    }
    /* random chunks */
    for (k = 0; k < 200; k++) {
        size_t at = 0;

        ncut = 0;
        while (ncut < 16) {
            at += 1 + tk_xorshift64(&rng) % 6;
            if (at >= n) {
                break;
            }
            cut[ncut++] = at;
        }
        REQUIRE(run(c, cut, ncut, &rec, &ok_in) == 0);
        runs++;
        fails += !same(c, &rec);
    }
    CHECK(fails == 0, "%d of %d split runs differ", fails, runs);
}

int
main(void)
{
    size_t  i;

    for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        check_case(&cases[i]);
    }

    tk_begin("format names");
    CHECK(llm_reasoning_fmt_from_name("think") == LLM_REASONING_THINK, "think");
    CHECK(llm_reasoning_fmt_from_name("none") == LLM_REASONING_NONE, "none");
    CHECK(llm_reasoning_fmt_from_name("harmony") == LLM_REASONING_HARMONY,
          "harmony");
    CHECK(llm_reasoning_fmt_from_name("bogus") == -1, "bogus");
    CHECK(strcmp(llm_reasoning_fmt_name(LLM_REASONING_THINK), "think") == 0,
          "name");

    tk_begin("a prompt that opens the block");
    CHECK(llm_reasoning_prompt_opens(LLM_REASONING_THINK,
                                     "<|im_start|>assistant\n<think>\n", 30),
          "open");
    CHECK(!llm_reasoning_prompt_opens(LLM_REASONING_THINK,
                                      "assistant\n<think>\n\n</think>\n\n",
                                      28), "closed");
    CHECK(!llm_reasoning_prompt_opens(LLM_REASONING_NONE, "<think>", 7),
          "format none");
    return tk_done();
}
