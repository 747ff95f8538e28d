/*
 * From a Generate request to prompt tokens: chat messages become the
 * template variables (messages, tools, add_generation_prompt, bos_token,
 * eos_token, plus chat_template_kwargs), the model's chat template renders
 * them, and the text is tokenized with special tokens parsed in the
 * template's own markup only: every string from the request (contents,
 * tool results, arguments, names, tools, kwargs) carries the tokenizer's
 * guards (tokenizer.h), so "<|im_start|>" typed by a user stays plain
 * text.  A legacy completion prompt is the client's raw text, tokenized
 * as llama.cpp's server does: special tokens parsed, BOS/EOS as the
 * vocabulary asks.  A developer message reaches a template that has no
 * developer role as a system message (OpenAI's rule).  See
 * docs/TEMPLATES.md, "Special tokens".
 */

#ifndef LLM_PROMPT_H
#define LLM_PROMPT_H

#include <stddef.h>

#include "decode/request.h"
#include "template/template.h"
#include "text/tokenizer.h"

/*
 * Build the prompt of rq into out.  Returns 0, or a negative errno with a
 * one-line message in err and the request field at fault in *param
 * (-EINVAL: the request is invalid, e.g. bad tools JSON or a template
 * raise_exception(); other codes: internal).
 */
int llm_prompt_build(const llm_tmpl_t *tmpl, const llm_vocab_t *v,
    const llm_request_t *rq, llm_tokens_t *out, const char **param,
    char *err, size_t errlen);

/*
 * Prompt i of a completion with several (rq->n_prompts), tokenized as a
 * single completion prompt is; llm_prompt_build() gives prompt 0.
 */
int llm_prompt_build_nth(const llm_vocab_t *v, const llm_request_t *rq,
    size_t i, llm_tokens_t *out, const char **param, char *err,
    size_t errlen);

/* The template variables alone (for tests and --dump-prompt). */
json_t *llm_prompt_vars(const llm_vocab_t *v, const llm_request_t *rq,
    const char **param, char *err, size_t errlen);

/* The tool-call format a template's source suggests: "harmony" (it
 * knows <|channel|>), "minimax-m2", "kimi-k2", "glm4.7" (GLM-4.7's
 * compact calls), "glm4.5", "hermes",
 * "mistral", "deepseek-v3", "llama3-json" or "none". */
const char *llm_prompt_tool_format(const char *src, size_t len);

/* The reasoning format (decode/reasoning.h) a template's source suggests:
 * harmony when it knows <|channel|>, think when it knows </think>, else
 * none. */
int llm_prompt_reasoning_format(const char *src, size_t len);

#endif /* LLM_PROMPT_H */
