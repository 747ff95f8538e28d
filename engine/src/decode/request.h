/*
 * The engine's request: one Generate, decoded once from the wire
 * (serve/wire.c) and read by everything after it: the prompt builder
 * (messages, tools, chat_template_kwargs), the scheduler (sampling, n,
 * stops, echo) and the per-sequence hooks (tools, tool_choice,
 * parallel_tool_calls, response_format).
 *
 * It lives here, below serve/, because the decoding hooks read it and
 * nothing in decode/ may include serve/ or the protobuf header; it holds
 * what a request asks for, nothing about the connection that carried it.
 *
 * The JSON the OpenAI API carries (tools, tool_choice, response_format,
 * chat_template_kwargs, the messages) is parsed here once per request
 * into jansson trees that every reader shares read-only (a reader that
 * keeps one past the request, such as the tool-call parser, takes a
 * reference).  A field that is present but does not parse is recorded,
 * not refused: whoever uses it reports it, with the same message and at
 * the same point as when each reader parsed the text itself, and a field
 * nobody uses for this request (tools of a completion) is never an error.
 *
 * Lifetime: plain strings (prompt, stop strings, request_id) are borrowed
 * from what the request was decoded from and live as long as that does;
 * trees and arrays are the request's own, freed by llm_request_free().
 */

#ifndef LLM_REQUEST_H
#define LLM_REQUEST_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

typedef enum {
    LLM_TOOL_CHOICE_AUTO = 0,     /* absent, "auto" */
    LLM_TOOL_CHOICE_NONE,
    LLM_TOOL_CHOICE_REQUIRED,
    LLM_TOOL_CHOICE_NAMED,        /* {"type": "function", "function": ...} */
    LLM_TOOL_CHOICE_INVALID       /* reported by the tool hooks, if used */
} llm_tool_choice_e;

/* Sampling as asked, not yet checked (the scheduler checks it). */
typedef struct {
    uint32_t            n;                  /* choices; 0 means 1 */
    uint32_t            max_tokens;         /* 0: up to the context */
    float               temperature;        /* 0: greedy */
    float               top_p;              /* 0 or 1: off */
    int32_t             top_k;              /* 0: off */
    float               min_p;              /* 0: off */
    float               presence_penalty;
    float               frequency_penalty;
    float               repetition_penalty; /* 0 or 1: off */
    int32_t            *bias_ids;           /* logit_bias, n_bias each */
    float              *bias_vals;
    size_t              n_bias;
    const char        **stop;               /* strings borrowed */
    size_t              n_stop;
    int                 has_seed;
    uint64_t            seed;
    int                 logprobs;
    uint32_t            top_logprobs;
    int                 ignore_eos;
} llm_req_sampling_t;

/* One prompt of a completion with several (borrowed strings). */
typedef struct {
    const char         *text;               /* raw text, or */
    const int32_t      *ids;                /* token ids when n_ids > 0 */
    size_t              n_ids;
} llm_req_prompt_t;

typedef struct {
    const char         *request_id;         /* for logs; never NULL */

    /* the prompt: a chat, or a completion's raw text */
    int                 is_completion;
    const char         *prompt;             /* completion; never NULL */
    const int32_t      *prompt_ids;         /* completion given as token
                                             * ids (borrowed), or NULL */
    size_t              n_prompt_ids;
    llm_req_prompt_t   *prompts;            /* several prompts (2 or more;
                                             * then prompt is ""), owned */
    size_t              n_prompts;
    int                 echo;               /* completion: prompt first */
    json_t             *messages;           /* chat: array of OpenAI
                                             * message objects, or NULL */
    json_t             *template_kwargs;    /* object, or NULL */
    int                 template_kwargs_bad;

    /* tools */
    json_t             *tools;              /* the array, or NULL */
    char               *tools_bad;          /* given, not an array: the
                                             * message ("tools: ...") */
    llm_tool_choice_e   tool_choice;
    const char         *tool_choice_name;   /* NAMED: in tool_choice_tree */
    json_t             *tool_choice_tree;
    int                 parallel_tool_calls;

    /* the output's shape */
    json_t             *response_format;    /* object, or NULL */
    int                 response_format_bad;/* given, not an object */

    llm_req_sampling_t  sampling;
} llm_request_t;

/* Every field empty: no tools, tool_choice auto, n 1, strings "". */
void llm_request_init(llm_request_t *r);

/* Drop the trees and arrays (not the borrowed strings); r is then as
 * after llm_request_init(). */
void llm_request_free(llm_request_t *r);

/*
 * Parse one JSON-text field into r (NULL or "": absent).  Each returns 0,
 * or -ENOMEM; text that does not parse is recorded in r as the field's
 * _bad (or LLM_TOOL_CHOICE_INVALID), never an error here.  tool_choice
 * also takes the bare words auto, none and required.
 */
int llm_request_set_tools(llm_request_t *r, const char *json);
int llm_request_set_tool_choice(llm_request_t *r, const char *json);
int llm_request_set_response_format(llm_request_t *r, const char *json);
int llm_request_set_template_kwargs(llm_request_t *r, const char *json);

/*
 * response_format asks for a JSON answer: given, and its type is not
 * "text" (json_object, json_schema; another type is refused by the
 * response_format grammar).  A response_format that did not parse counts
 * as asking for JSON.
 */
int llm_request_wants_json(const llm_request_t *r);

#endif /* LLM_REQUEST_H */
