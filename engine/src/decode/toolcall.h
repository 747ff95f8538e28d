/*
 * Tool-call parsing per model family: incremental parsers that
 * turn the model's own tool-call syntax into OpenAI tool_calls.
 *
 * A parser is fed the detokenized text in pieces of any size, down to one
 * byte; a marker may be split across pieces.  Text that is not a call is
 * passed on as content at once, except the few bytes that could still be
 * the start of a call marker, which are held until they can be decided.
 * A call is passed on as it is read: its id and name as soon as the name
 * is complete, then argument fragments whose concatenation is exactly the
 * arguments JSON.  Text after which the model broke the format (a marker
 * that does not go on as the format says) is passed on as content, never
 * dropped.  Families (docs/TOOLS.md):
 *
 *   hermes       <tool_call>\n{"name": "f", "arguments": {...}}\n</tool_call>
 *   minimax-m2   <minimax:tool_call>\n<invoke name="f">\n
 *                <parameter name="k">v</parameter>\n</invoke>\n
 *                </minimax:tool_call>     (v converted by the tool's schema)
 *   llama3-json  [<|python_tag|>]{"name": "f", "parameters": {...}}, when the
 *                answer starts with it
 *   mistral      [TOOL_CALLS][{"name": "f", "arguments": {...}}, ...] or
 *                [TOOL_CALLS]f[CALL_ID]id[ARGS]{...} (CALL_ID optional)
 *   deepseek-v3  <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f
 *                ```json\n{...}\n```<｜tool▁call▁end｜>...<｜tool▁calls▁end｜>
 *                and the V3.1 form <｜tool▁call▁begin｜>f<｜tool▁sep｜>{...}
 *   kimi-k2      <|tool_calls_section_begin|><|tool_call_begin|>functions.f:0
 *                <|tool_call_argument_begin|>{...}<|tool_call_end|>...
 *                <|tool_calls_section_end|>
 *   glm4.5       <tool_call>f\n<arg_key>k</arg_key>\n<arg_value>v</arg_value>\n
 *                </tool_call>  (GLM-4.5/4.6; GLM-4.7 writes no newlines;
 *                v converted by the tool's schema, as for minimax-m2)
 *   qwen3-coder  <tool_call>\n<function=f>\n<parameter=k>\nv\n</parameter>\n
 *                </function>\n</tool_call>  (Qwen3-Coder, Qwen3.5; v
 *                converted by the tool's schema, as for minimax-m2)
 *   harmony      <|channel|>commentary to=functions.f <|constrain|>json
 *                <|message|>{...}<|call|>   (gpt-oss: read by the harmony
 *                reasoning split, reasoning.h; llm_toolcall_create has no
 *                parser for it)
 */

#ifndef LLM_TOOLCALL_H
#define LLM_TOOLCALL_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "seq_hooks.h"

typedef enum {
    LLM_TOOLFMT_NONE = 0,
    LLM_TOOLFMT_HERMES,
    LLM_TOOLFMT_MINIMAX_M2,
    LLM_TOOLFMT_LLAMA3_JSON,
    LLM_TOOLFMT_MISTRAL,
    LLM_TOOLFMT_DEEPSEEK_V3,
    LLM_TOOLFMT_GLM45,
    LLM_TOOLFMT_KIMI_K2,
    LLM_TOOLFMT_QWEN3_CODER,
    LLM_TOOLFMT_HARMONY     /* gpt-oss: calls are parsed by the reasoning
                               split (reasoning.h); only the tool grammar
                               (toolhooks.h) is the family's, no parser */
} llm_toolfmt_e;

/* The family named s ("hermes", ...), or -1 when there is none. */
int llm_toolfmt_from_name(const char *s);
const char *llm_toolfmt_name(int fmt);
/* The names, comma separated, for messages and --help. */
const char *llm_toolfmt_names(void);

/*
 * minimax-m2, glm4.5 and qwen3-coder write a parameter raw (not as JSON) when its
 * schema makes it a string: type "string", or a type list of "string"
 * and "null".
 * The parser and the tool grammar (toolhooks.c) share this rule.
 */
int llm_toolcall_param_is_string(const json_t *param);

typedef struct llm_toolcall_s llm_toolcall_t;

/*
 * A parser for one answer.  tools is the request's parsed tools array (may
 * be NULL; minimax-m2 and glm4.5 read the parameter types from it): the
 * parser takes a reference and only reads it.  Call ids come from seed (0: from
 * getrandom).  Returns 0 or a negative errno with err filled.
 */
int llm_toolcall_create(llm_toolcall_t **out, int fmt, const json_t *tools,
    uint64_t seed, char *err, size_t errlen);
void llm_toolcall_free(llm_toolcall_t *tc);

/*
 * Feed len bytes of text (final = 1 once at the end; len may be 0).
 * Content and calls go out through out.  Returns the number of calls seen
 * so far or a negative errno (-ENOMEM).
 */
int llm_toolcall_feed(llm_toolcall_t *tc, const char *s, size_t len,
    int final, const llm_text_out_t *out);

#endif /* LLM_TOOLCALL_H */
