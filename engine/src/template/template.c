/*
 * Chat templates: the public face (template.h) of the Jinja renderer in
 * jinja_*.c, and the ChatML fallback used when a model file carries no
 * tokenizer.chat_template.
 */

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jinja.h"
#include "template.h"

struct llm_tmpl_s {
    jj_tmpl_t   t;
    char       *src;        /* a copy of the source */
    size_t      len;
};

/*
 * ChatML with Hermes-style tools: the tool signatures go into the system
 * turn inside <tools></tools>, assistant tool calls are rendered as
 * <tool_call>{"name": ..., "arguments": ...}</tool_call>, and tool results
 * come back in a user turn inside <tool_response></tool_response>.
 * Content may be a string or a list of {"type": "text", "text": ...} parts.
 */
const char llm_tmpl_chatml[] =
    "{%- macro text(content) -%}\n"
    "{%- if content is string -%}{{ content }}\n"
    "{%- elif content is iterable and content is not mapping -%}\n"
    "{%- for part in content -%}\n"
    "{%- if part is mapping and part.type == 'text' -%}{{ part.text }}"
    "{%- elif part is string -%}{{ part }}{%- endif -%}\n"
    "{%- endfor -%}\n"
    "{%- elif content is not none -%}{{ content }}{%- endif -%}\n"
    "{%- endmacro -%}\n"
    "{%- if tools -%}\n"
    "{{- '<|im_start|>system\\n' -}}\n"
    "{%- if messages and messages[0].role == 'system' -%}"
    "{{- text(messages[0].content) + '\\n\\n' -}}{%- endif -%}\n"
    "{{- '# Tools\\n\\nYou may call one or more functions to assist with "
    "the user query.\\n\\nYou are provided with function signatures within "
    "<tools></tools> XML tags:\\n<tools>' -}}\n"
    "{%- for tool in tools -%}{{- '\\n' + tool | tojson -}}{%- endfor -%}\n"
    "{{- '\\n</tools>\\n\\nFor each function call, return a json object "
    "with function name and arguments within <tool_call></tool_call> XML "
    "tags:\\n<tool_call>\\n{\"name\": <function-name>, \"arguments\": "
    "<args-json-object>}\\n</tool_call><|im_end|>\\n' -}}\n"
    "{%- elif messages and messages[0].role == 'system' -%}\n"
    "{{- '<|im_start|>system\\n' + text(messages[0].content) + "
    "'<|im_end|>\\n' -}}\n"
    "{%- endif -%}\n"
    "{%- for message in messages -%}\n"
    "{%- if message.role == 'system' and loop.first -%}\n"
    "{%- elif message.role == 'assistant' and message.tool_calls -%}\n"
    "{{- '<|im_start|>assistant' -}}\n"
    "{%- if message.content -%}{{- '\\n' + text(message.content) -}}"
    "{%- endif -%}\n"
    "{%- for tc in message.tool_calls -%}\n"
    "{%- set f = tc.function if tc.function is defined else tc -%}\n"
    "{{- '\\n<tool_call>\\n{\"name\": \"' + f.name + '\", \"arguments\": ' "
    "-}}\n"
    "{%- if f.arguments is string -%}{{- f.arguments -}}"
    "{%- else -%}{{- f.arguments | tojson -}}{%- endif -%}\n"
    "{{- '}\\n</tool_call>' -}}\n"
    "{%- endfor -%}\n"
    "{{- '<|im_end|>\\n' -}}\n"
    "{%- elif message.role == 'tool' -%}\n"
    "{%- if loop.first or loop.previtem.role != 'tool' -%}"
    "{{- '<|im_start|>user' -}}{%- endif -%}\n"
    "{{- '\\n<tool_response>\\n' + text(message.content) + "
    "'\\n</tool_response>' -}}\n"
    "{%- if loop.last or loop.nextitem.role != 'tool' -%}"
    "{{- '<|im_end|>\\n' -}}{%- endif -%}\n"
    "{%- else -%}\n"
    "{{- '<|im_start|>' + message.role + '\\n' + text(message.content) + "
    "'<|im_end|>\\n' -}}\n"
    "{%- endif -%}\n"
    "{%- endfor -%}\n"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}"
    "{%- endif -%}\n";

int
llm_tmpl_compile(llm_tmpl_t **out, const char *src, size_t len, char *err,
    size_t errlen)
{
    llm_tmpl_t  *t;
    int          rc;

    *out = NULL;
    t = calloc(1, sizeof(*t));
    if (t == NULL) {
        snprintf(err, errlen, "chat template: out of memory");
        return -ENOMEM;
    }
    t->t.arena.limit = JJ_MAX_MEMORY;
    t->src = malloc(len + 1);
    if (t->src == NULL) {
        free(t);
        snprintf(err, errlen, "chat template: out of memory");
        return -ENOMEM;
    }
    memcpy(t->src, src, len);
    t->src[len] = '\0';
    t->len = len;
    rc = jj_compile(&t->t, src, len, err, errlen);
    if (rc != 0) {
        llm_tmpl_free(t);
        return rc;
    }
    *out = t;
    return 0;
}

void
llm_tmpl_free(llm_tmpl_t *t)
{
    if (t == NULL) {
        return;
    }
    jj_arena_free(&t->t.arena);
    free(t->src);
    free(t);
}

const char *
llm_tmpl_source(const llm_tmpl_t *t, size_t *len)
{
    *len = t->len;
    return t->src;
}

int
llm_tmpl_render(const llm_tmpl_t *t, json_t *vars, char **out,
    size_t *outlen, char *err, size_t errlen)
{
    return llm_tmpl_render_at(t, vars, -1, out, outlen, err, errlen);
}

int
llm_tmpl_render_at(const llm_tmpl_t *t, json_t *vars, int64_t now,
    char **out, size_t *outlen, char *err, size_t errlen)
{
    if (vars != NULL && !json_is_object(vars)) {
        snprintf(err, errlen, "chat template: variables must be a JSON "
                 "object");
        return -EINVAL;
    }
    return jj_render(&t->t, vars, now, out, outlen, err, errlen);
}
