/*
 * The tool-call hooks of a sequence (docs/TOOLS.md): the text
 * hook runs the family's parser (toolcall.h) so calls leave as
 * ToolCallDelta events; the mask and accept hooks run the tool grammar
 * (hermes, llama3-json, mistral, deepseek-v3, kimi-k2, minimax-m2, glm4.5,
 * glm4.7, harmony: whose calls the reasoning split parses): once
 * the model writes the opener, only the given tool names and
 * arguments valid against that tool's `parameters` are allowed, then the
 * closer, then another call (parallel_tool_calls) or the end.
 *
 * tool_choice: "auto" (or absent) lets the model choose; "required" and
 * {"type": "function", "function": {"name": "f"}} force a call from the
 * first token (the named one only); "none" forbids calls: the opener is
 * masked and the text is not parsed.
 */

#ifndef LLM_TOOLHOOKS_H
#define LLM_TOOLHOOKS_H

#include <stddef.h>
#include <stdint.h>

#include "hooks.h"

/*
 * Fill *out when the request's tools are in play for this sequence
 * (tools given, the family is not none): returns 1.  Returns 0 with *out
 * untouched when they are not (no tools, or no family), and a negative
 * errno on a bad request, with err written as "PARAM: message" where
 * PARAM is the request field at fault (tool_choice,
 * tools[i].function.parameters, response_format).
 */
int llm_tool_hooks_make(const llm_hooks_ctx_t *ctx, const llm_request_t *rq,
    uint32_t choice, llm_seq_hooks_t *out, char *err, size_t errlen);

#endif /* LLM_TOOLHOOKS_H */
