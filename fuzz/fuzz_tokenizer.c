/*
 * The tokenizer over real vocabularies (byte-level BPE of several
 * pre-tokenizer families, SentencePiece), with special-token parsing on
 * and off, then the streaming detokenizer over the ids it produced.
 *
 * Input: byte 0 picks the vocabulary (low 4 bits) and the flags (bit 4:
 * parse special tokens, bit 5: add BOS/EOS, bit 6: detokenize with
 * special tokens shown); the rest is the text.
 */

#include <stdint.h>
#include <string.h>

#include "fuzz_common.h"

static const char *vocab_files[] = {
    "engine/tests/data/vocab/gpt-2.gguf",
    "engine/tests/data/vocab/llama-spm.gguf",
    "engine/tests/data/vocab/phi-3.gguf",
    "engine/tests/data/vocab/deepseek-coder.gguf",
    "engine/tests/data/vocab/starcoder.gguf",
    "engine/tests/data/vocab/refact.gguf",
    "engine/tests/data/vocab/mpt.gguf",
    "engine/tests/data/reference/ref-qwen3moe-q4_0.gguf",
    "engine/tests/data/reference/ref-minimax-m2-q4_0.gguf",
    "engine/tests/data/reference/ref-llama-moe-q4_0.gguf",
};
#define N_VOCABS (sizeof(vocab_files) / sizeof(vocab_files[0]))

static llm_vocab_t *vocabs[N_VOCABS];

int
LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void) argc;
    (void) argv;
    for (size_t i = 0; i < N_VOCABS; i++) {
        vocabs[i] = fuzz_vocab(vocab_files[i]);
    }
    return 0;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const llm_vocab_t *v;
    llm_tokens_t       toks = { 0 };
    llm_detok_t       *d = NULL;
    unsigned           flags = 0;
    const char        *p;
    size_t             n, total = 0;
    char               err[256];
    uint32_t           nv;

    if (size < 1) {
        return 0;
    }
    v = vocabs[(data[0] & 0x0f) % N_VOCABS];
    nv = llm_vocab_n_tokens(v);
    if (data[0] & 0x10) {
        flags |= LLM_TOK_PARSE_SPECIAL;
    }
    if (data[0] & 0x20) {
        flags |= LLM_TOK_ADD_SPECIAL;
    }
    if (llm_tokenize(v, (const char *) data + 1, size - 1, flags, &toks,
                     err, sizeof(err)) != 0)
    {
        goto done;
    }
    for (size_t i = 0; i < toks.n; i++) {
        if (toks.ids[i] < 0 || (uint32_t) toks.ids[i] >= nv) {
            fprintf(stderr, "token %d out of the vocabulary (%u)\n",
                    toks.ids[i], nv);
            abort();
        }
        (void) llm_token_bytes(v, toks.ids[i], data[0] & 0x40, &n);
    }
    if (llm_detok_create(&d, v, NULL, 0) != 0) {
        goto done;
    }
    llm_detok_set_special(d, (data[0] & 0x40) != 0);
    for (size_t i = 0; i <= toks.n; i++) {
        int rc = i < toks.n ? llm_detok_push(d, toks.ids[i], &p, &n)
                            : llm_detok_flush(d, &p, &n);

        if (rc < 0) {
            break;
        }
        if (n > 0) {
            volatile char c = p[0];     /* the piece must be readable */

            (void) c;
            c = p[n - 1];
            total += n;
        }
    }
    (void) total;
done:
    llm_detok_free(d);
    llm_tokens_free(&toks);
    return 0;
}
