/*
 * The JSON-schema grammar compiler and its automaton.
 *
 * Input: byte 0 holds the options (bit 0: LLM_GRAMMAR_STRICT, bit 1:
 * LLM_GRAMMAR_ORDERED, bit 2: read the text as an OpenAI response_format
 * object instead of a bare schema, bit 3: mask the gpt-2 vocabulary's
 * logits after feeding); then the schema JSON; optionally a NUL byte and
 * text to feed to the automaton.
 *
 * Checks what grammar.h promises: bytes are fed one at a time and the
 * accepted ones kept; once the state says the value is complete, the kept
 * text parses with jansson; a state that is not complete always offers a
 * next byte, and following the offered bytes reaches a complete value or
 * keeps offering bytes (never a dead end).
 */

#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "fuzz_common.h"
#include "decode/grammar.h"

#define MAX_FED   4096
#define WALK      256

static llm_tokindex_t *tokindex;
static uint32_t        n_vocab;
static float          *logits;

int
LLVMFuzzerInitialize(int *argc, char ***argv)
{
    llm_vocab_t *v;
    char         err[256];

    (void) argc;
    (void) argv;
    v = fuzz_vocab("engine/tests/data/vocab/gpt-2.gguf");
    if (llm_tokindex_create(&tokindex, v, err, sizeof(err)) != 0) {
        fprintf(stderr, "fuzz: tokindex: %s\n", err);
        exit(1);
    }
    n_vocab = llm_vocab_n_tokens(v);
    logits = malloc(n_vocab * sizeof(float));
    return logits ? 0 : 1;
}

static void
check_complete(const char *text, size_t len)
{
    json_error_t  je;
    json_t       *j;

    j = json_loadb(text, len, JSON_DECODE_ANY, &je);
    if (j == NULL) {
        fprintf(stderr, "complete per the automaton but not JSON (%s): "
                "%.*s\n", je.text, (int) len, text);
        abort();
    }
    json_decref(j);
}

static void
run(const llm_grammar_t *g, const uint8_t *text, size_t len, int mask)
{
    llm_gstate_t *st = NULL;
    char          fed[MAX_FED + WALK + 1];
    size_t        n = 0;
    uint8_t       next[257];

    if (llm_gstate_create(&st, g) != 0) {
        return;
    }
    for (size_t i = 0; i < len && n < MAX_FED; i++) {
        if (llm_gstate_feed(st, (const char *) text + i, 1) == 0) {
            fed[n++] = (char) text[i];
        }
    }
    if (llm_gstate_complete(st)) {
        check_complete(fed, n);
    }
    if (mask) {
        for (uint32_t i = 0; i < n_vocab; i++) {
            logits[i] = 0.0f;
        }
        (void) llm_tokindex_mask(tokindex, st, LLM_GMASK_EOG, logits,
                                 n_vocab);
    }
    /* walk on, taking the last byte offered (tends to close values) */
    for (int s = 0; s < WALK; s++) {
        size_t k;

        if (llm_gstate_complete(st)) {
            check_complete(fed, n);
            break;
        }
        k = llm_gstate_next_bytes(st, next, sizeof(next));
        if (k == 0) {
            fprintf(stderr, "dead end: incomplete and no byte allowed "
                    "after: %.*s\n", (int) n, fed);
            abort();
        }
        if (llm_gstate_feed(st, (const char *) &next[k - 1], 1) != 0) {
            fprintf(stderr, "offered byte 0x%02x refused after: %.*s\n",
                    next[k - 1], (int) n, fed);
            abort();
        }
        fed[n++] = (char) next[k - 1];
    }
    llm_gstate_free(st);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    llm_grammar_t *g = NULL;
    json_t        *schema = NULL;
    json_error_t   je;
    const uint8_t *s, *nul, *text = NULL;
    size_t         len, tlen = 0;
    unsigned       flags = 0;
    char           err[512];
    int            rc;

    if (size < 1) {
        return 0;
    }
    if (data[0] & 1) {
        flags |= LLM_GRAMMAR_STRICT;
    }
    if (data[0] & 2) {
        flags |= LLM_GRAMMAR_ORDERED;
    }
    s = data + 1;
    len = size - 1;
    nul = memchr(s, '\0', len);
    if (nul != NULL) {
        text = nul + 1;
        tlen = len - (size_t) (text - s);
        len = (size_t) (nul - s);
    }
    if (data[0] & 4) {
        rc = llm_grammar_from_response_format(&g, (const char *) s, len,
                                              err, sizeof(err));
    } else {
        schema = json_loadb((const char *) s, len, JSON_DECODE_ANY, &je);
        if (schema == NULL) {
            return 0;
        }
        rc = llm_grammar_compile(&g, schema, flags, err, sizeof(err));
    }
    if (rc == 0 && g != NULL) {
        run(g, text, tlen, data[0] & 8);
    }
    llm_grammar_free(g);
    json_decref(schema);
    return 0;
}
