/*
 * Prompt building (prompt.c): chat template + tokenizer together.
 *
 * 1. Linear work: a chat of 100000 messages is rendered and tokenized
 *    with the ids copied by growing token arrays at most a small multiple
 *    of the ids produced (no per-fragment copy of everything so far).
 *
 * Run from the repository root.  Prints one line per check group; exits
 * non-zero on any failure.
 */

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gguf.h"
#include "prompt.h"
#include "template.h"
#include "tokenizer.h"
#include "tokenizer_int.h"      /* llm_bpe_byte_cp, llm_tok_n_copied */

static int  failures;

#define CHECK(cond, ...)                                                      \
    do {                                                                      \
        if (!(cond)) {                                                        \
            failures++;                                                       \
            printf("  FAIL %s:%d: ", __FILE__, __LINE__);                     \
            printf(__VA_ARGS__);                                              \
            printf("\n");                                                     \
        }                                                                     \
    } while (0)

/*
 * A byte-level vocabulary with no merges (every plain byte is one token):
 * the 256 byte tokens, then the n special texts (duplicates dropped) of
 * token type ttype.  NULL with a message on failure.
 */
static llm_vocab_t *
synth_vocab(const char *const *spec, size_t n, int ttype)
{
    const char        **toks;
    size_t             *lens, nt = 0, i, j;
    int32_t            *types;
    char                path[512], err[512], (*bytes)[4];
    llm_gguf_writer_t  *w;
    llm_gguf_t         *g = NULL;
    llm_vocab_t        *v = NULL;

    toks = calloc(256 + n, sizeof(*toks));
    lens = calloc(256 + n, sizeof(*lens));
    types = calloc(256 + n, sizeof(*types));
    bytes = calloc(256, sizeof(*bytes));
    if (toks == NULL || lens == NULL || types == NULL || bytes == NULL) {
        printf("  synth_vocab: out of memory\n");
        goto done;
    }
    for (i = 0; i < 256; i++) {
        lens[nt] = llm_utf8_put(bytes[i], llm_bpe_byte_cp((uint8_t) i));
        toks[nt] = bytes[i];
        types[nt++] = 1;
    }
    for (i = 0; i < n; i++) {
        for (j = 256; j < nt; j++) {
            if (strcmp(toks[j], spec[i]) == 0) {
                break;
            }
        }
        if (j < nt) {
            continue;
        }
        toks[nt] = spec[i];
        lens[nt] = strlen(spec[i]);
        types[nt++] = ttype;
    }

    snprintf(path, sizeof(path), "%s/test_prompt.%d.gguf",
             getenv("TMPDIR") && *getenv("TMPDIR") ? getenv("TMPDIR")
                                                   : "/tmp", (int) getpid());
    if (llm_gguf_writer_open(&w, path, err, sizeof(err)) < 0) {
        printf("  synth_vocab: %s\n", err);
        goto done;
    }
    llm_gguf_w_str(w, "general.architecture", "llama", 5);
    llm_gguf_w_str(w, "tokenizer.ggml.model", "gpt2", 4);
    llm_gguf_w_str(w, "tokenizer.ggml.pre", "gpt-2", 5);
    llm_gguf_w_str_arr(w, "tokenizer.ggml.tokens", toks, lens, nt);
    llm_gguf_w_arr(w, "tokenizer.ggml.token_type", LLM_GGUF_INT32, types, nt);
    llm_gguf_w_begin_data(w);
    if (llm_gguf_writer_close(w, err, sizeof(err)) < 0
        || llm_gguf_open(&g, path, err, sizeof(err)) < 0
        || llm_vocab_load(&v, g, err, sizeof(err)) < 0)
    {
        printf("  synth_vocab: %s\n", err);
        v = NULL;
    }
    llm_gguf_close(g);
    unlink(path);

done:
    free(toks);
    free(lens);
    free(types);
    free(bytes);
    return v;
}

static size_t
count_id(const llm_tokens_t *t, int32_t id)
{
    size_t  i, n = 0;

    for (i = 0; i < t->n; i++) {
        n += t->ids[i] == id;
    }
    return n;
}

/* ---- 1. linear work ---- */

static void
test_linear(void)
{
    static const char *const spec[] = { "<|im_start|>", "<|im_end|>" };
    const size_t           n_msgs = 100000;
    Llm__GenerateRequest   g = LLM__GENERATE_REQUEST__INIT;
    Llm__Message          *msgs = NULL, **mp = NULL;
    llm_vocab_t           *v;
    llm_tmpl_t            *t = NULL;
    llm_tokens_t           toks = { 0 };
    const char            *param = NULL;
    char                   err[512], (*text)[32] = NULL;
    unsigned long          copied0;
    size_t                 i;
    int                    rc, fail0 = failures;

    v = synth_vocab(spec, 2, 3);
    if (v == NULL) {
        CHECK(0, "no synthetic vocabulary");
        return;
    }
    msgs = calloc(n_msgs, sizeof(*msgs));
    mp = calloc(n_msgs, sizeof(*mp));
    text = calloc(n_msgs, sizeof(*text));
    if (msgs == NULL || mp == NULL || text == NULL
        || llm_tmpl_compile(&t, llm_tmpl_chatml, strlen(llm_tmpl_chatml),
                            err, sizeof(err)) != 0)
    {
        CHECK(0, "setup failed");
        goto done;
    }
    for (i = 0; i < n_msgs; i++) {
        Llm__Message m = LLM__MESSAGE__INIT;

        msgs[i] = m;
        snprintf(text[i], sizeof(text[i]), "message %zu", i);
        msgs[i].role = i % 2 ? "assistant" : "user";
        msgs[i].content = text[i];
        mp[i] = &msgs[i];
    }
    g.n_messages = n_msgs;
    g.messages = mp;

    copied0 = llm_tok_n_copied;
    rc = llm_prompt_build(t, v, &g, &toks, &param, err, sizeof(err));
    CHECK(rc == 0, "%zu messages: %s", n_msgs, err);
    CHECK(count_id(&toks, llm_vocab_find(v, "<|im_start|>", 12))
          == n_msgs + 1, "<|im_start|> %zu times for %zu messages",
          count_id(&toks, llm_vocab_find(v, "<|im_start|>", 12)), n_msgs);
    CHECK(llm_tok_n_copied - copied0 <= 3 * toks.n, "%lu ids copied growing "
          "token arrays for %zu tokens", llm_tok_n_copied - copied0, toks.n);

    printf("%s linear: %zu messages rendered and tokenized into %zu tokens, "
           "%lu ids copied growing arrays\n",
           failures == fail0 ? "ok  " : "FAIL", n_msgs, toks.n,
           llm_tok_n_copied - copied0);

done:
    llm_tokens_free(&toks);
    llm_tmpl_free(t);
    llm_vocab_free(v);
    free(msgs);
    free(mp);
    free(text);
}

int
main(void)
{
    test_linear();

    if (failures) {
        printf("test_prompt: %d failure(s)\n", failures);
        return 1;
    }
    printf("test_prompt: all passed\n");
    return 0;
}
