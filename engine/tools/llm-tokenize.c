/*
 * llm-tokenize: tokenize UTF-8 text from stdin with the vocabulary of a
 * model or vocabulary-only GGUF file, as the engine does.
 *
 *   llm-tokenize -m FILE [--bos] [--special] [--ids-only] < text
 *
 * Prints the ids space-separated on one line; without --ids-only, then one
 * line per token: id, its text as stored in the file, and the bytes it
 * stands for (C-escaped).
 */

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "model/gguf.h"
#include "text/tokenizer.h"
#include "readfile.h"

static void
usage(FILE *f)
{
    fprintf(f,
        "usage: llm-tokenize -m FILE [--bos] [--special] [--ids-only] "
        "[--time] < text\n"
        "  -m FILE     model or vocabulary-only GGUF (tokenizer.ggml.* keys)\n"
        "  --bos       add BOS/EOS as the vocabulary asks (add_bos_token)\n"
        "  --special   match control tokens such as <|im_start|> in the text\n"
        "  --ids-only  print only the ids, space-separated\n"
        "  --time      print the tokenize wall and CPU time (excluding load) "
        "on stderr\n");
}

static void
print_escaped(const char *s, size_t n)
{
    size_t         i;
    unsigned char  c;

    for (i = 0; i < n; i++) {
        c = (unsigned char) s[i];
        if (c == '\n') {
            fputs("\\n", stdout);
        } else if (c == '\t') {
            fputs("\\t", stdout);
        } else if (c == '\r') {
            fputs("\\r", stdout);
        } else if (c == '\\') {
            fputs("\\\\", stdout);
        } else if (c < 0x20 || c == 0x7f) {
            printf("\\x%02x", c);
        } else {
            putchar(c);
        }
    }
}

int
main(int argc, char **argv)
{
    const char       *path = NULL, *s;
    llm_gguf_t       *g = NULL;
    llm_vocab_t      *v = NULL;
    llm_tokens_t      toks = { 0 };
    char              err[512], *text = NULL;
    size_t            len = 0, i, n;
    unsigned          flags = 0;
    int               ids_only = 0, timing = 0, rc, i_arg, status = 1;
    struct timespec   t0, t1, c0, c1;

    for (i_arg = 1; i_arg < argc; i_arg++) {
        if (strcmp(argv[i_arg], "-m") == 0 && i_arg + 1 < argc) {
            path = argv[++i_arg];
        } else if (strcmp(argv[i_arg], "--bos") == 0) {
            flags |= LLM_TOK_ADD_SPECIAL;
        } else if (strcmp(argv[i_arg], "--special") == 0) {
            flags |= LLM_TOK_PARSE_SPECIAL;
        } else if (strcmp(argv[i_arg], "--ids-only") == 0) {
            ids_only = 1;
        } else if (strcmp(argv[i_arg], "--time") == 0) {
            timing = 1;
        } else if (strcmp(argv[i_arg], "--help") == 0
                   || strcmp(argv[i_arg], "-h") == 0)
        {
            usage(stdout);
            return 0;
        } else {
            fprintf(stderr, "llm-tokenize: unknown argument '%s'\n",
                    argv[i_arg]);
            usage(stderr);
            return 2;
        }
    }
    if (path == NULL) {
        usage(stderr);
        return 2;
    }

    rc = llm_gguf_open(&g, path, err, sizeof(err));
    if (rc < 0) {
        fprintf(stderr, "llm-tokenize: %s\n", err);
        goto done;
    }
    rc = llm_vocab_load(&v, g, err, sizeof(err));
    if (rc < 0) {
        fprintf(stderr, "llm-tokenize: %s: %s\n", path, err);
        goto done;
    }

    text = llm_read_stream(stdin, &len);
    if (text == NULL) {
        fprintf(stderr, "llm-tokenize: reading stdin: %s\n", strerror(errno));
        goto done;
    }

    clock_gettime(CLOCK_MONOTONIC, &t0);
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c0);
    rc = llm_tokenize(v, text, len, flags, &toks, err, sizeof(err));
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c1);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (rc < 0) {
        fprintf(stderr, "llm-tokenize: %s\n", err);
        goto done;
    }
    if (timing) {
        fprintf(stderr, "tokenized %zu bytes into %zu tokens in %.3f ms "
                "(cpu %.3f ms)\n", len, toks.n,
                (t1.tv_sec - t0.tv_sec) * 1e3
                + (t1.tv_nsec - t0.tv_nsec) / 1e6,
                (c1.tv_sec - c0.tv_sec) * 1e3
                + (c1.tv_nsec - c0.tv_nsec) / 1e6);
    }

    for (i = 0; i < toks.n; i++) {
        printf(i ? " %d" : "%d", toks.ids[i]);
    }
    putchar('\n');

    if (!ids_only) {
        for (i = 0; i < toks.n; i++) {
            printf("%6d  '", toks.ids[i]);
            s = llm_vocab_token_text(v, toks.ids[i], &n);
            print_escaped(s, n);
            fputs("'  -> '", stdout);
            s = llm_token_bytes(v, toks.ids[i], 1, &n);
            print_escaped(s, n);
            fputs("'\n", stdout);
        }
    }
    status = fflush(stdout) == 0 ? 0 : 1;

done:
    free(text);
    llm_tokens_free(&toks);
    llm_vocab_free(v);
    llm_gguf_close(g);
    return status;
}
