/*
 * Chat templates: a C implementation of the Jinja subset real models'
 * chat templates use, rendering like Hugging Face's apply_chat_template
 * (jinja2 ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks,
 * loopcontrols, tojson without ASCII escaping, raise_exception,
 * strftime_now).
 *
 * Compile once at model load: a construct outside the supported subset is
 * an error naming it and its line.  Rendering takes the template variables
 * as one jansson object ("messages", "tools", "add_generation_prompt",
 * "bos_token", "eos_token", ...) and is bounded in depth, loop iterations
 * and output size.
 */

#ifndef LLM_TEMPLATE_H
#define LLM_TEMPLATE_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

typedef struct llm_tmpl_s llm_tmpl_t;

/*
 * Compile src (need not be NUL-terminated).  0, or -EINVAL with the
 * construct and line in err (e.g. "Encountered unknown tag 'generation'.
 * ... (line 12)"), -ENOMEM.
 */
int llm_tmpl_compile(llm_tmpl_t **out, const char *src, size_t len,
    char *err, size_t errlen);
void llm_tmpl_free(llm_tmpl_t *t);

/*
 * Render.  On success *out is a malloc'd NUL-terminated string the caller
 * frees.  On failure returns a negative errno with a one-line message in
 * err:
 *   -EPERM   the template's raise_exception(msg): err is exactly msg
 *   -EINVAL  a runtime error as jinja2 raises it ("TypeError: ...",
 *            "UndefinedError: 'x' is undefined", "SecurityError: ...")
 *   -E2BIG   more than 16 MiB of output, 10^6 loop iterations, 2x10^8
 *            steps of work, or a range() over 100000 items
 *   -ELOOP   macro recursion / nesting deeper than 200
 *   -ENOMEM  out of memory (the render's arena is capped at 256 MiB)
 * A compiled template is read-only while rendering: several threads may
 * render the same llm_tmpl_t at once.  vars is only read.
 */
int llm_tmpl_render(const llm_tmpl_t *t, json_t *vars, char **out,
    size_t *outlen, char *err, size_t errlen);

/*
 * As llm_tmpl_render, with strftime_now() formatting the given instant
 * (epoch seconds, UTC) instead of the local clock; now < 0 means the
 * clock.  Tests use it for reproducible output.
 */
int llm_tmpl_render_at(const llm_tmpl_t *t, json_t *vars, int64_t now,
    char **out, size_t *outlen, char *err, size_t errlen);

/* The source the template was compiled from (for guards: prompt.c). */
const char *llm_tmpl_source(const llm_tmpl_t *t, size_t *len);

/*
 * The ChatML template used when a model file carries none (Hermes-style
 * tools: <tools></tools> in the system turn, <tool_call> and
 * <tool_response> blocks).
 */
extern const char llm_tmpl_chatml[];

#endif /* LLM_TEMPLATE_H */
