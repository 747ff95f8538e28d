/*
 * llm-toolbench: what the tool-call hooks cost to set up for one sequence
 * on a vocabulary (docs/TOOLS.md, docs/BENCHMARKS.md).
 *
 *   llm-toolbench -m FILE [--format F] [--tools JSON] [--repeat N]
 *
 * Builds the token index of the vocabulary of FILE (a model or
 * vocabulary-only GGUF) as the engine does at start, then makes and frees
 * the hooks of a request with the given tools (default: two tools, one of
 * string and integer parameters, one of an integer array) N times (20)
 * for each tool_choice (auto, none, required) and prints the mean time of
 * one.  The set-up is one pass over the vocabulary (the family's marker
 * pieces, the tool names' pieces, whitespace and end tokens) and, unless
 * none, the call grammar's compile.
 */

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "model/gguf.h"
#include "decode/hooks.h"
#include "text/tokenizer.h"
#include "decode/toolcall.h"

static const char default_tools[] =
    "[{\"type\": \"function\", \"function\": {\"name\": \"record\", "
    "\"parameters\": {\"type\": \"object\", \"properties\": {"
    "\"a\": {\"type\": \"string\"}, \"b\": {\"type\": \"integer\"}}, "
    "\"required\": [\"a\", \"b\"]}}}, {\"type\": \"function\", "
    "\"function\": {\"name\": \"series\", \"parameters\": {\"type\": "
    "\"object\", \"properties\": {\"v\": {\"type\": \"array\", \"items\": "
    "{\"type\": \"integer\"}}}}}}]";

static double
now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void
usage(FILE *f)
{
    fprintf(f,
        "usage: llm-toolbench -m FILE [--format F] [--tools JSON] "
        "[--repeat N]\n"
        "  -m FILE       model or vocabulary-only GGUF\n"
        "  --format F    tool-call family: %s (default hermes)\n"
        "  --tools JSON  the request's tools array (default: two tools)\n"
        "  --repeat N    hooks made and freed per tool_choice (20)\n",
        llm_toolfmt_names());
}

int
main(int argc, char **argv)
{
    static const struct option lo[] = {
        { "format", 1, 0, 'f' }, { "tools", 1, 0, 't' },
        { "repeat", 1, 0, 'r' }, { "help", 0, 0, 'h' }, { 0, 0, 0, 0 },
    };
    static const char *choices[] = { "auto", "none", "required" };
    const char       *path = NULL, *fmt = "hermes", *tools = default_tools;
    long              repeat = 20;
    llm_gguf_t       *gg = NULL;
    llm_vocab_t      *v = NULL;
    llm_hooks_ctx_t   ctx;
    char              err[512];
    double            t0;
    int               o, rc = 1;

    while ((o = getopt_long(argc, argv, "m:h", lo, NULL)) != -1) {
        switch (o) {
        case 'm': path = optarg; break;
        case 'f': fmt = optarg; break;
        case 't': tools = optarg; break;
        case 'r':
            repeat = strtol(optarg, NULL, 10);
            if (repeat < 1) {
                fprintf(stderr, "llm-toolbench: --repeat N, N >= 1\n");
                return 2;
            }
            break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (path == NULL || llm_toolfmt_from_name(fmt) < 0) {
        usage(stderr);
        return 2;
    }
    if (llm_gguf_open(&gg, path, err, sizeof(err)) != 0
        || llm_vocab_load(&v, gg, err, sizeof(err)) != 0)
    {
        fprintf(stderr, "llm-toolbench: %s\n", err);
        goto done;
    }
    t0 = now_ms();
    if (llm_hooks_ctx_init(&ctx, v, llm_vocab_n_tokens(v), fmt, err,
                           sizeof(err)) != 0)
    {
        fprintf(stderr, "llm-toolbench: %s\n", err);
        goto done;
    }
    printf("%s: %u tokens, token index %.1f ms, family %s\n", path,
           llm_vocab_n_tokens(v), now_ms() - t0, fmt);
    for (size_t c = 0; c < sizeof(choices) / sizeof(choices[0]); c++) {
        llm_request_t        rq;
        llm_seq_hooks_t      h;

        /* parsed once, as the engine does per request */
        llm_request_init(&rq);
        rq.parallel_tool_calls = 1;
        if (llm_request_set_tools(&rq, tools) != 0
            || llm_request_set_tool_choice(&rq, choices[c]) != 0)
        {
            fprintf(stderr, "llm-toolbench: out of memory\n");
            llm_request_free(&rq);
            llm_hooks_ctx_free(&ctx);
            goto done;
        }
        t0 = now_ms();
        for (long i = 0; i < repeat; i++) {
            memset(&h, 0, sizeof(h));
            if (llm_hooks_make(&ctx, &rq, 0, &h, err, sizeof(err)) != 0) {
                fprintf(stderr, "llm-toolbench: %s\n", err);
                llm_request_free(&rq);
                llm_hooks_ctx_free(&ctx);
                goto done;
            }
            if (h.free) {
                h.free(h.ud);
            }
        }
        printf("tool_choice %-8s hooks set-up %.2f ms per sequence "
               "(mean of %ld)\n", choices[c], (now_ms() - t0) / repeat,
               repeat);
        llm_request_free(&rq);
    }
    llm_hooks_ctx_free(&ctx);
    rc = 0;
done:
    llm_vocab_free(v);
    llm_gguf_close(gg);
    return rc;
}
