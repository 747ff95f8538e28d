/*
 * A deterministic byte-level BPE vocabulary for synthetic models.
 *
 * llm-mkmodel embeds this in the GGUF files it writes, in the form
 * llama.cpp's converter writes a GPT-2-style vocabulary (Qwen2, ...):
 * tokenizer.ggml.model = "gpt2", the 256 byte tokens in GPT-2's
 * byte-to-unicode order, then merge tokens in merge order (learned by a
 * small BPE trainer from an embedded English + code text, pre-tokenized
 * with the real pre-tokenizer regex), then the special tokens, then
 * "[PADn]" fillers (token type 5, unused) if more ids were asked for than
 * the trainer makes merges.  Same n_vocab and pre give the same vocabulary
 * byte for byte.
 */

#ifndef LLM_VOCABGEN_H
#define LLM_VOCABGEN_H

#include <stddef.h>
#include <stdint.h>

/* llama.cpp token types (tokenizer.ggml.token_type). */
#define LLM_VG_NORMAL        1
#define LLM_VG_CONTROL       3
#define LLM_VG_USER_DEFINED  4
#define LLM_VG_UNUSED        5

/* The most merges the trainer learns; the rest of the ids are [PADn]. */
#define LLM_VG_MAX_MERGES    32768

typedef struct {
    uint32_t    n_tokens;
    char      **tokens;       /* NUL-terminated, byte-to-unicode form */
    int32_t    *types;        /* LLM_VG_* */
    uint32_t    n_merges;
    char      **merges;       /* "left right", as tokenizer.ggml.merges */
    uint32_t    bos_id;       /* <|endoftext|> */
    uint32_t    eos_id;       /* <|im_end|> */
    uint32_t    eot_id;       /* <|im_end|> */
    uint32_t    pad_id;       /* <|endoftext|> */
    uint32_t    im_start_id;
} llm_vocabgen_t;

/* Smallest vocabulary: 256 bytes + the special tokens. */
uint32_t llm_vocabgen_min_size(void);

/*
 * Build a vocabulary of exactly n_vocab tokens.  pre selects the
 * pre-tokenizer regex the merges are learned under: "qwen2" or "gpt-2".
 * Returns 0, or -EINVAL / -ENOMEM with err set.
 */
int llm_vocabgen_build(llm_vocabgen_t *v, uint32_t n_vocab, const char *pre,
    char *err, size_t errlen);
void llm_vocabgen_free(llm_vocabgen_t *v);

/* ChatML with Hermes-style tool calls (Qwen2.5's template). */
const char *llm_vocabgen_chat_template(void);
/* The embedded training text (tests tokenize it). */
const char *llm_vocabgen_corpus(void);

#endif /* LLM_VOCABGEN_H */
