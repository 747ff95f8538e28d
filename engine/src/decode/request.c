/*
 * The engine's request.  See request.h.
 */

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "request.h"

void
llm_request_init(llm_request_t *r)
{
    memset(r, 0, sizeof(*r));
    r->request_id = "";
    r->prompt = "";
    r->tool_choice = LLM_TOOL_CHOICE_AUTO;
}

void
llm_request_free(llm_request_t *r)
{
    json_decref(r->messages);
    json_decref(r->template_kwargs);
    json_decref(r->tools);
    free(r->tools_bad);
    json_decref(r->tool_choice_tree);
    json_decref(r->response_format);
    free(r->sampling.bias_ids);
    free(r->sampling.bias_vals);
    free(r->sampling.stop);
    free(r->prompts);
    llm_request_init(r);
}

static int
llm_request_empty(const char *json)
{
    return json == NULL || json[0] == '\0';
}

int
llm_request_set_tools(llm_request_t *r, const char *json)
{
    json_error_t  je;
    json_t       *x;
    char          msg[256];

    json_decref(r->tools);
    r->tools = NULL;
    free(r->tools_bad);
    r->tools_bad = NULL;
    if (llm_request_empty(json)) {
        return 0;
    }
    x = json_loads(json, 0, &je);
    if (json_is_array(x)) {
        r->tools = x;
        return 0;
    }
    snprintf(msg, sizeof(msg), "tools: not a JSON array (%s at %d)",
             x ? "wrong type" : je.text, x ? 0 : je.position);
    json_decref(x);
    r->tools_bad = strdup(msg);
    return r->tools_bad ? 0 : -ENOMEM;
}

/* "auto", "none", "required" (bare or JSON-quoted), or
 * {"type": "function", "function": {"name": ...}}. */
int
llm_request_set_tool_choice(llm_request_t *r, const char *json)
{
    static const struct {
        const char         *word;
        llm_tool_choice_e   c;
    } w[] = {
        { "auto", LLM_TOOL_CHOICE_AUTO },
        { "none", LLM_TOOL_CHOICE_NONE },
        { "required", LLM_TOOL_CHOICE_REQUIRED },
    };
    json_t       *j, *f, *type, *name;
    const char   *s = json;
    size_t        i;

    json_decref(r->tool_choice_tree);
    r->tool_choice_tree = NULL;
    r->tool_choice_name = NULL;
    r->tool_choice = LLM_TOOL_CHOICE_AUTO;
    if (llm_request_empty(json)) {
        return 0;
    }
    j = json_loads(json, JSON_DECODE_ANY, NULL);
    if (json_is_string(j)) {
        s = json_string_value(j);
    }
    for (i = 0; i < sizeof(w) / sizeof(w[0]); i++) {
        if (strcmp(s, w[i].word) == 0) {
            r->tool_choice = w[i].c;
            json_decref(j);
            return 0;
        }
    }
    f = json_object_get(j, "function");
    type = json_object_get(j, "type");
    name = json_object_get(f, "name");
    if (!json_is_object(j) || !json_is_string(type)
        || strcmp(json_string_value(type), "function") != 0
        || !json_is_string(name))
    {
        r->tool_choice = LLM_TOOL_CHOICE_INVALID;
        json_decref(j);
        return 0;
    }
    r->tool_choice = LLM_TOOL_CHOICE_NAMED;
    r->tool_choice_tree = j;
    r->tool_choice_name = json_string_value(name);
    return 0;
}

/* *tree = the object json holds (NULL: absent or *bad set). */
static void
llm_request_object(json_t **tree, int *bad, const char *json)
{
    json_t  *x;

    json_decref(*tree);
    *tree = NULL;
    *bad = 0;
    if (llm_request_empty(json)) {
        return;
    }
    x = json_loads(json, 0, NULL);
    if (!json_is_object(x)) {
        json_decref(x);
        *bad = 1;
        return;
    }
    *tree = x;
}

int
llm_request_set_response_format(llm_request_t *r, const char *json)
{
    llm_request_object(&r->response_format, &r->response_format_bad, json);
    return 0;
}

int
llm_request_set_template_kwargs(llm_request_t *r, const char *json)
{
    llm_request_object(&r->template_kwargs, &r->template_kwargs_bad, json);
    return 0;
}

int
llm_request_wants_json(const llm_request_t *r)
{
    const char  *type;

    if (r->response_format_bad) {
        return 1;
    }
    if (r->response_format == NULL) {
        return 0;
    }
    /* json_object or json_schema (another type is refused by the
     * response_format grammar): anything but "text" asks for JSON */
    type = json_string_value(json_object_get(r->response_format, "type"));
    return type == NULL || strcmp(type, "text") != 0;
}
