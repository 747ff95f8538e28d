/*
 * Shared by the engine's fuzz targets: where the repository's test data
 * is (FUZZ_REPO, set by the Makefile; overridden by $LLM_REPO), loading a
 * vocabulary once per process.
 */

#ifndef FUZZ_COMMON_H
#define FUZZ_COMMON_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "model/gguf.h"
#include "text/tokenizer.h"

#ifndef FUZZ_REPO
#define FUZZ_REPO "."
#endif

/* rel under the repository, in a static buffer */
static inline const char *
fuzz_path(const char *rel)
{
    static char  buf[4096];
    const char  *repo = getenv("LLM_REPO");

    snprintf(buf, sizeof(buf), "%s/%s", repo ? repo : FUZZ_REPO, rel);
    return buf;
}

/* The vocabulary of a GGUF under the repository; exits on failure (the
 * target cannot run without it). */
static inline llm_vocab_t *
fuzz_vocab(const char *rel)
{
    llm_gguf_t  *g;
    llm_vocab_t *v;
    char         err[512];

    if (llm_gguf_open(&g, fuzz_path(rel), err, sizeof(err)) != 0
        || llm_vocab_load(&v, g, err, sizeof(err)) != 0)
    {
        fprintf(stderr, "fuzz: %s: %s\n", rel, err);
        exit(1);
    }
    llm_gguf_close(g);      /* the vocabulary keeps its own copy */
    return v;
}

#endif /* FUZZ_COMMON_H */
