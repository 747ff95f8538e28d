/*
 * Reasoning split: the thinking text of a reasoning model, told apart
 * from its answer as it streams, for OpenAI's reasoning_content (and the
 * Responses and Anthropic dialects' reasoning items and thinking blocks).
 *
 * Format "think" (Qwen3, QwQ, DeepSeek-R1 / V3.1, GLM-4.5, MiniMax-M2,
 * Kimi-K2-Thinking ...): the answer starts with <think> ... </think>, or
 * the chat template opened <think> at the end of the prompt and the
 * answer starts inside it.  What is inside goes out as reasoning, what
 * follows </think> as the answer (to the tool-call parser, or content).
 * Whitespace around the reasoning and at the start of the answer is
 * dropped; a <think> later in the answer is answer text.
 *
 * Format "harmony" (gpt-oss): the answer is a series of messages, each a
 * header (<|start|>assistant, <|channel|>NAME, to=RECIPIENT,
 * <|constrain|>TYPE) then <|message|> and its body up to <|end|>,
 * <|call|> or <|return|> (the last two end generation as tokens; spelled
 * in text they end the message too), or the end.  The analysis channel is
 * reasoning; final, and commentary to the user, are the answer's text,
 * without the markup; a message to a tool (to=functions.NAME) is a tool
 * call: out->call(NAME) when its header is read, then its body (the
 * arguments JSON) as it comes.
 * The detokenizer must emit control tokens' text for this format.
 *
 * Fed the detokenized text in pieces of any size (down to one byte); a
 * marker may be split across pieces: the bytes that could still begin
 * one are held until they can be decided.
 */

#ifndef LLM_REASONING_H
#define LLM_REASONING_H

#include <stddef.h>

typedef enum {
    LLM_REASONING_NONE = 0,
    LLM_REASONING_THINK,
    LLM_REASONING_HARMONY
} llm_reasoning_fmt_e;

/* The format named s ("none", "think", "harmony"), or -1. */
int llm_reasoning_fmt_from_name(const char *s);
const char *llm_reasoning_fmt_name(int fmt);

typedef struct {
    void  (*reasoning)(void *ud, const char *s, size_t len);
    void  (*answer)(void *ud, const char *s, size_t len);
    /* harmony tool calls: name set (args NULL) when a call starts, then
     * argument fragments with name NULL */
    void  (*call)(void *ud, const char *name, size_t name_len,
                  const char *args, size_t len);
    void   *ud;
} llm_reasoning_out_t;

typedef struct llm_reasoning_s llm_reasoning_t;

/*
 * A splitter for one answer; inside = 1 when the prompt ended inside a
 * reasoning block (the template opened it).  NULL on no memory.
 */
llm_reasoning_t *llm_reasoning_create(int fmt, int inside);
void llm_reasoning_free(llm_reasoning_t *r);

/* Feed len bytes (final = 1 once at the end: held bytes go out). */
void llm_reasoning_feed(llm_reasoning_t *r, const char *s, size_t len,
    int final, const llm_reasoning_out_t *out);

/*
 * 1 while the text so far is inside the reasoning block: the answer's
 * constraints (tool and response_format grammars) do not apply to it.
 */
int llm_reasoning_inside(const llm_reasoning_t *r);

/* 1 when a prompt ending with this text leaves the answer inside a
 * reasoning block of format fmt (the template opened <think>). */
int llm_reasoning_prompt_opens(int fmt, const char *prompt, size_t len);

#endif /* LLM_REASONING_H */
