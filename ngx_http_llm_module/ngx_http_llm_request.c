
/*
 * ngx_http_llm_module: the OpenAI request.  Bodies of /v1/chat/completions
 * and /v1/completions parsed with jansson (strict UTF-8, error positions)
 * and validated with OpenAI's messages, codes and `param` paths (the
 * scalar fields from one table, the structured ones by their own
 * functions); the protobuf GenerateRequest built from them and encoded as
 * the engine frame.
 *
 * Unknown top-level fields are ignored: clients send vendor extras.
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "ngx_http_llm_module.h"


/* The OpenAI API's own limits (an engine may have stricter ones). */

#define NGX_HTTP_LLM_API_MAX_N              128
#define NGX_HTTP_LLM_API_MAX_STOP           4
#define NGX_HTTP_LLM_API_MAX_TOP_LOGPROBS   20
#define NGX_HTTP_LLM_API_MAX_LOGPROBS       5     /* legacy completions */

#define NGX_HTTP_LLM_MAX_TOKENS             (1 << 24)


/* The scalar fields of a request, as checked (ngx_http_llm_fields[]). */

typedef struct {
    ngx_uint_t                 echo;
    json_int_t                 best_of;
    ngx_uint_t                 stream;
    double                     temperature;
    double                     top_p;
    double                     presence_penalty;
    double                     frequency_penalty;
    json_int_t                 top_k;
    double                     min_p;
    double                     repetition_penalty;
    ngx_uint_t                 ignore_eos;
    json_int_t                 n;
    json_int_t                 max_tokens;
    json_int_t                 max_completion_tokens;  /* 0: absent */
    json_int_t                 seed;
    ngx_uint_t                 has_seed;
    ngx_uint_t                 logprobs;               /* chat */
    json_int_t                 top_logprobs;           /* -1: absent */
    json_int_t                 completion_logprobs;    /* -1: absent */
    ngx_uint_t                 parallel_tool_calls;
} ngx_http_llm_params_t;


/* What every check needs: where the error goes, what is being filled. */

typedef struct {
    ngx_http_request_t        *request;
    ngx_http_llm_error_t      *err;
    ngx_http_llm_ctx_t        *ctx;
    json_t                    *root;
    ngx_http_llm_params_t     *params;
    ngx_uint_t                 root_changed;  /* members added, replaced */
} ngx_http_llm_check_t;


static ngx_int_t ngx_http_llm_bad(ngx_http_llm_check_t *ck,
    const char *code, const char *param, const char *fmt, ...);
static ngx_int_t ngx_http_llm_get_number(ngx_http_llm_check_t *ck,
    json_t *j, const char *name, double min, double max, double *out,
    ngx_uint_t *present);
static ngx_int_t ngx_http_llm_get_int(ngx_http_llm_check_t *ck,
    json_t *j, const char *name, json_int_t min, json_int_t max,
    json_int_t *out, ngx_uint_t *present);
static ngx_int_t ngx_http_llm_get_bool(ngx_http_llm_check_t *ck,
    json_t *j, const char *name, ngx_uint_t *out, ngx_uint_t *present);
static ngx_int_t ngx_http_llm_new_request(ngx_http_llm_check_t *ck);
static ngx_int_t ngx_http_llm_walk_fields(ngx_http_llm_check_t *ck,
    json_t *root);
static void ngx_http_llm_apply_params(ngx_http_llm_ctx_t *ctx,
    ngx_http_llm_params_t *p);
static ngx_int_t ngx_http_llm_field_model(ngx_http_llm_check_t *ck,
    json_t *j);
static ngx_int_t ngx_http_llm_field_messages(ngx_http_llm_check_t *ck,
    json_t *j);
static ngx_int_t ngx_http_llm_field_prompt(ngx_http_llm_check_t *ck,
    json_t *j);
static ngx_int_t ngx_http_llm_prompts(ngx_http_llm_check_t *ck, json_t *j);
static ngx_int_t ngx_http_llm_prompt_ids(ngx_http_llm_check_t *ck,
    json_t *ids, const char *name);
static ngx_int_t ngx_http_llm_field_suffix(ngx_http_llm_check_t *ck,
    json_t *j);
static ngx_int_t ngx_http_llm_field_stream_options(ngx_http_llm_check_t *ck,
    json_t *opts);
static ngx_int_t ngx_http_llm_check_top_logprobs(ngx_http_llm_check_t *ck,
    json_t *unused);
static ngx_int_t ngx_http_llm_field_stop(ngx_http_llm_check_t *ck,
    json_t *j);
static ngx_int_t ngx_http_llm_field_logit_bias(ngx_http_llm_check_t *ck,
    json_t *j);
static ngx_int_t ngx_http_llm_field_functions(ngx_http_llm_check_t *ck,
    json_t *functions);
static ngx_int_t ngx_http_llm_function_call(ngx_http_llm_check_t *ck,
    json_t *fc);
static ngx_int_t ngx_http_llm_legacy_call(ngx_http_llm_check_t *ck,
    json_t *m, ngx_uint_t i);
static ngx_int_t ngx_http_llm_field_tools(ngx_http_llm_check_t *ck,
    json_t *tools);
static ngx_int_t ngx_http_llm_field_response_format(ngx_http_llm_check_t *ck,
    json_t *j);
static ngx_int_t ngx_http_llm_field_template_kwargs(ngx_http_llm_check_t *ck,
    json_t *j);
static ngx_int_t ngx_http_llm_check_enum(ngx_http_llm_check_t *ck,
    const char *name, json_t *j, const char *const *values);
static ngx_int_t ngx_http_llm_field_reasoning_effort(
    ngx_http_llm_check_t *ck, json_t *j);
static ngx_int_t ngx_http_llm_field_service_tier(ngx_http_llm_check_t *ck,
    json_t *j);
static ngx_int_t ngx_http_llm_field_verbosity(ngx_http_llm_check_t *ck,
    json_t *j);
static ngx_int_t ngx_http_llm_field_modalities(ngx_http_llm_check_t *ck,
    json_t *j);
static ngx_int_t ngx_http_llm_field_audio(ngx_http_llm_check_t *ck,
    json_t *j);
static ngx_int_t ngx_http_llm_field_prediction(ngx_http_llm_check_t *ck,
    json_t *j);
static ngx_int_t ngx_http_llm_parse_messages(ngx_http_llm_check_t *ck,
    ngx_http_llm_ctx_t *ctx, json_t *msgs);
static ngx_int_t ngx_http_llm_parse_message(ngx_http_llm_check_t *ck,
    json_t *m, ngx_uint_t i, Llm__Message *pm);
static ngx_int_t ngx_http_llm_parse_tool_calls(ngx_http_llm_check_t *ck,
    json_t *calls, ngx_uint_t i, Llm__Message *pm);
static ngx_int_t ngx_http_llm_parse_content(ngx_http_llm_check_t *ck,
    json_t *content, ngx_uint_t i, const char *role, char **out);
static ngx_int_t ngx_http_llm_parse_tools(ngx_http_llm_check_t *ck,
    json_t *root);
static ngx_int_t ngx_http_llm_parse_tool(ngx_http_llm_check_t *ck,
    json_t *tool, ngx_uint_t i);
static ngx_int_t ngx_http_llm_parse_tool_choice(ngx_http_llm_check_t *ck,
    json_t *root, json_t *tools, ngx_uint_t n);
static ngx_int_t ngx_http_llm_parse_stop(ngx_http_llm_check_t *ck,
    Llm__Sampling *s, json_t *stop);
static ngx_int_t ngx_http_llm_parse_logit_bias(ngx_http_llm_check_t *ck,
    Llm__Sampling *s, json_t *bias);
static char *ngx_http_llm_dump(ngx_pool_t *pool, json_t *j);
static char *ngx_http_llm_pstrdup(ngx_pool_t *pool, const char *s,
    size_t len);
static void ngx_http_llm_json_cleanup(void *data);


/*
 * Fills an invalid_request_error (400) and returns NGX_DECLINED, the
 * value every check returns on bad input.
 */

static ngx_int_t
ngx_http_llm_bad(ngx_http_llm_check_t *ck, const char *code,
    const char *param, const char *fmt, ...)
{
    u_char                *p;
    va_list                args;
    ngx_http_llm_error_t  *err;

    err = ck->err;

    p = ngx_pnalloc(ck->request->pool, 1024);
    if (p == NULL) {
        return NGX_ERROR;
    }

    err->status = NGX_HTTP_BAD_REQUEST;
    err->type = "invalid_request_error";
    err->code = code;
    err->param = param ? ngx_http_llm_pstrdup(ck->request->pool, param,
                                              ngx_strlen(param))
                       : NULL;
    err->message.data = p;

    va_start(args, fmt);
    err->message.len = ngx_vslprintf(p, p + 1024, fmt, args) - p;
    va_end(args);

    return NGX_DECLINED;
}


#define ngx_http_llm_missing(ck, param)                                       \
    ngx_http_llm_bad(ck, "missing_required_parameter", (char *) param,        \
                     "Missing required parameter: '%s'.", param)


#define ngx_http_llm_bad_type(ck, param, expected, j)                         \
    ngx_http_llm_bad(ck, "invalid_type", param,                               \
                     "Invalid type for '%s': expected %s, but got %s "        \
                     "instead.", param, expected, ngx_http_llm_json_type_name(j))


static ngx_int_t
ngx_http_llm_get_number(ngx_http_llm_check_t *ck, json_t *j,
    const char *name, double min, double max, double *out,
    ngx_uint_t *present)
{
    char    got[64];
    double  v;

    *present = 0;

    if (j == NULL || json_is_null(j)) {
        return NGX_OK;
    }

    if (!json_is_number(j)) {
        return ngx_http_llm_bad_type(ck, name, "a decimal", j);
    }

    v = json_number_value(j);

    if (v < min || v > max) {

        /*
         * nginx's %f goes through an int64: a value past 9.2e18 (JSON
         * allows 5.5e28) would be undefined behaviour and print wrong,
         * so the client's value is printed by libc.
         */

        (void) snprintf(got, sizeof(got), (v > -1e15 && v < 1e15)
                        ? "%.4f" : "%g", v);

        if (v < min) {
            return ngx_http_llm_bad(ck, "decimal_below_min_value", name,
                                    "Invalid '%s': decimal below minimum "
                                    "value. Expected a value >= %.1f, but "
                                    "got %s instead.", name, min, got);
        }

        return ngx_http_llm_bad(ck, "decimal_above_max_value", name,
                                "Invalid '%s': decimal above maximum value. "
                                "Expected a value <= %.1f, but got %s "
                                "instead.", name, max, got);
    }

    *out = v;
    *present = 1;

    return NGX_OK;
}


static ngx_int_t
ngx_http_llm_get_int(ngx_http_llm_check_t *ck, json_t *j,
    const char *name, json_int_t min, json_int_t max, json_int_t *out,
    ngx_uint_t *present)
{
    json_int_t  v;

    *present = 0;

    if (j == NULL || json_is_null(j)) {
        return NGX_OK;
    }

    if (!json_is_integer(j)) {
        return ngx_http_llm_bad_type(ck, name, "an integer", j);
    }

    v = json_integer_value(j);

    if (v < min) {
        return ngx_http_llm_bad(ck, "integer_below_min_value", name,
                                "Invalid '%s': integer below minimum value. "
                                "Expected a value >= %L, but got %L "
                                "instead.", name, (int64_t) min, (int64_t) v);
    }

    if (v > max) {
        return ngx_http_llm_bad(ck, "integer_above_max_value", name,
                                "Invalid '%s': integer above maximum value. "
                                "Expected a value <= %L, but got %L "
                                "instead.", name, (int64_t) max, (int64_t) v);
    }

    *out = v;
    *present = 1;

    return NGX_OK;
}


static ngx_int_t
ngx_http_llm_get_bool(ngx_http_llm_check_t *ck, json_t *j,
    const char *name, ngx_uint_t *out, ngx_uint_t *present)
{
    *present = 0;

    if (j == NULL || json_is_null(j)) {
        return NGX_OK;
    }

    if (!json_is_boolean(j)) {
        return ngx_http_llm_bad_type(ck, name, "a boolean", j);
    }

    *out = json_is_true(j) ? 1 : 0;
    *present = 1;

    return NGX_OK;
}


/*
 * The top-level fields of a request, checked in this order (the first
 * bad one is the error reported).  Scalar fields (boolean, integer,
 * decimal, string) are checked by one loop and land in
 * ngx_http_llm_params_t at their offset, the default when absent;
 * structured fields have their own functions.  routes: the routes a
 * field belongs to (a field of the other route is ignored, like any
 * unknown field).
 */

typedef enum {
    NGX_HTTP_LLM_FIELD_BOOL = 0,
    NGX_HTTP_LLM_FIELD_INT,
    NGX_HTTP_LLM_FIELD_NUMBER,
    NGX_HTTP_LLM_FIELD_STRING,   /* type checked only */
    NGX_HTTP_LLM_FIELD_SPECIAL
} ngx_http_llm_field_kind_e;


typedef ngx_int_t (*ngx_http_llm_field_pt)(ngx_http_llm_check_t *ck,
    json_t *j);

typedef struct {
    const char                 *name;
    ngx_http_llm_field_kind_e   kind;
    ngx_uint_t                  routes;
    json_int_t                  imin;      /* INT */
    json_int_t                  imax;
    double                      dmin;      /* NUMBER */
    double                      dmax;
    double                      dflt;      /* when absent or null */
    size_t                      offset;    /* in ngx_http_llm_params_t */
    size_t                      present;   /* its flag there, 0: none */
    ngx_http_llm_field_pt       handler;   /* SPECIAL; else a check after */
} ngx_http_llm_field_t;


#define NGX_HTTP_LLM_CHAT_ONLY   NGX_HTTP_LLM_ROUTE_CHAT
#define NGX_HTTP_LLM_LEGACY      NGX_HTTP_LLM_ROUTE_COMPLETION
#define NGX_HTTP_LLM_ANY         (NGX_HTTP_LLM_ROUTE_CHAT                    \
                                  |NGX_HTTP_LLM_ROUTE_COMPLETION)

#define ngx_http_llm_param(f)    offsetof(ngx_http_llm_params_t, f)

#define ngx_http_llm_bool_field(name, routes, dflt, f)                        \
    { name, NGX_HTTP_LLM_FIELD_BOOL, routes, 0, 0, 0, 0, dflt,               \
      ngx_http_llm_param(f), 0, NULL }

#define ngx_http_llm_int_field(name, routes, min, max, dflt, f)               \
    { name, NGX_HTTP_LLM_FIELD_INT, routes, min, max, 0, 0, dflt,            \
      ngx_http_llm_param(f), 0, NULL }

#define ngx_http_llm_number_field(name, routes, min, max, dflt, f)            \
    { name, NGX_HTTP_LLM_FIELD_NUMBER, routes, 0, 0, min, max, dflt,         \
      ngx_http_llm_param(f), 0, NULL }

#define ngx_http_llm_special_field(name, routes, handler)                     \
    { name, NGX_HTTP_LLM_FIELD_SPECIAL, routes, 0, 0, 0, 0, 0, 0, 0,         \
      handler }


static ngx_http_llm_field_t  ngx_http_llm_fields[] = {

    ngx_http_llm_special_field("model", NGX_HTTP_LLM_ANY,
                               ngx_http_llm_field_model),
    ngx_http_llm_special_field("messages", NGX_HTTP_LLM_CHAT_ONLY,
                               ngx_http_llm_field_messages),
    ngx_http_llm_special_field("prompt", NGX_HTTP_LLM_LEGACY,
                               ngx_http_llm_field_prompt),
    ngx_http_llm_special_field("suffix", NGX_HTTP_LLM_LEGACY,
                               ngx_http_llm_field_suffix),
    ngx_http_llm_bool_field("echo", NGX_HTTP_LLM_LEGACY, 0, echo),
    ngx_http_llm_int_field("best_of", NGX_HTTP_LLM_LEGACY, 1, 1, 1, best_of),

    ngx_http_llm_bool_field("stream", NGX_HTTP_LLM_ANY, 0, stream),
    ngx_http_llm_special_field("stream_options", NGX_HTTP_LLM_ANY,
                               ngx_http_llm_field_stream_options),

    /* sampling */

    ngx_http_llm_number_field("temperature", NGX_HTTP_LLM_ANY, 0, 2, 1,
                              temperature),
    ngx_http_llm_number_field("top_p", NGX_HTTP_LLM_ANY, 0, 1, 1, top_p),
    ngx_http_llm_number_field("presence_penalty", NGX_HTTP_LLM_ANY, -2, 2, 0,
                              presence_penalty),
    ngx_http_llm_number_field("frequency_penalty", NGX_HTTP_LLM_ANY, -2, 2,
                              0, frequency_penalty),

    /* vendor extras with the same meaning as in llama.cpp and vLLM */

    ngx_http_llm_int_field("top_k", NGX_HTTP_LLM_ANY, 0, 1000000, 0, top_k),
    ngx_http_llm_number_field("min_p", NGX_HTTP_LLM_ANY, 0, 1, 0, min_p),
    ngx_http_llm_number_field("repetition_penalty", NGX_HTTP_LLM_ANY, 0, 10,
                              0, repetition_penalty),
    ngx_http_llm_bool_field("ignore_eos", NGX_HTTP_LLM_ANY, 0, ignore_eos),

    ngx_http_llm_int_field("n", NGX_HTTP_LLM_ANY, 1, NGX_HTTP_LLM_API_MAX_N,
                           1, n),
    ngx_http_llm_int_field("max_tokens", NGX_HTTP_LLM_CHAT_ONLY, 1,
                           NGX_HTTP_LLM_MAX_TOKENS, 0, max_tokens),
    ngx_http_llm_int_field("max_tokens", NGX_HTTP_LLM_LEGACY, 1,
                           NGX_HTTP_LLM_MAX_TOKENS, 16, max_tokens),
    ngx_http_llm_int_field("max_completion_tokens", NGX_HTTP_LLM_CHAT_ONLY,
                           1, NGX_HTTP_LLM_MAX_TOKENS, 0,
                           max_completion_tokens),

    { "seed", NGX_HTTP_LLM_FIELD_INT, NGX_HTTP_LLM_ANY, INT64_MIN, INT64_MAX,
      0, 0, 0, ngx_http_llm_param(seed), ngx_http_llm_param(has_seed),
      NULL },

    /* logprobs: a flag and a count in chat, a count in completions */

    ngx_http_llm_bool_field("logprobs", NGX_HTTP_LLM_CHAT_ONLY, 0, logprobs),

    { "top_logprobs", NGX_HTTP_LLM_FIELD_INT, NGX_HTTP_LLM_CHAT_ONLY, 0,
      NGX_HTTP_LLM_API_MAX_TOP_LOGPROBS, 0, 0, -1,
      ngx_http_llm_param(top_logprobs), 0, ngx_http_llm_check_top_logprobs },

    ngx_http_llm_int_field("logprobs", NGX_HTTP_LLM_LEGACY, 0,
                           NGX_HTTP_LLM_API_MAX_LOGPROBS, -1,
                           completion_logprobs),

    ngx_http_llm_special_field("stop", NGX_HTTP_LLM_ANY,
                               ngx_http_llm_field_stop),
    ngx_http_llm_special_field("logit_bias", NGX_HTTP_LLM_ANY,
                               ngx_http_llm_field_logit_bias),

    { "user", NGX_HTTP_LLM_FIELD_STRING, NGX_HTTP_LLM_ANY, 0, 0, 0, 0, 0, 0,
      0, NULL },

    /* tools (with tool_choice), parallel_tool_calls, structured output;
     * the legacy functions (with function_call) become tools first */

    ngx_http_llm_special_field("functions", NGX_HTTP_LLM_CHAT_ONLY,
                               ngx_http_llm_field_functions),
    ngx_http_llm_special_field("tools", NGX_HTTP_LLM_CHAT_ONLY,
                               ngx_http_llm_field_tools),
    ngx_http_llm_bool_field("parallel_tool_calls", NGX_HTTP_LLM_CHAT_ONLY, 1,
                            parallel_tool_calls),
    ngx_http_llm_special_field("response_format", NGX_HTTP_LLM_CHAT_ONLY,
                               ngx_http_llm_field_response_format),
    ngx_http_llm_special_field("chat_template_kwargs",
                               NGX_HTTP_LLM_CHAT_ONLY,
                               ngx_http_llm_field_template_kwargs),

    /*
     * OpenAI fields with values this server cannot honour: a value
     * outside OpenAI's enum is a 400 as there; audio output and
     * predicted outputs are refused; the valid values of the others
     * change nothing here (docs/GATEWAY.md)
     */

    ngx_http_llm_special_field("reasoning_effort", NGX_HTTP_LLM_CHAT_ONLY,
                               ngx_http_llm_field_reasoning_effort),
    ngx_http_llm_special_field("service_tier", NGX_HTTP_LLM_CHAT_ONLY,
                               ngx_http_llm_field_service_tier),
    ngx_http_llm_special_field("verbosity", NGX_HTTP_LLM_CHAT_ONLY,
                               ngx_http_llm_field_verbosity),
    ngx_http_llm_special_field("modalities", NGX_HTTP_LLM_CHAT_ONLY,
                               ngx_http_llm_field_modalities),
    ngx_http_llm_special_field("audio", NGX_HTTP_LLM_CHAT_ONLY,
                               ngx_http_llm_field_audio),
    ngx_http_llm_special_field("prediction", NGX_HTTP_LLM_CHAT_ONLY,
                               ngx_http_llm_field_prediction),

    { NULL, 0, 0, 0, 0, 0, 0, 0, 0, 0, NULL }
};


/*
 * Parses and validates the body of a chat or legacy completion request
 * into ctx (the GenerateRequest in ctx->gen, the response options).
 * NGX_OK; NGX_DECLINED with err filled (400); NGX_ERROR on no memory.
 */

ngx_int_t
ngx_http_llm_parse_request(ngx_http_request_t *r, ngx_http_llm_ctx_t *ctx,
    u_char *body, size_t len, ngx_http_llm_error_t *err)
{
    json_t  *root;

    root = ngx_http_llm_load_json(r, body, len, err);
    if (root == NULL) {
        return err->status ? NGX_DECLINED : NGX_ERROR;
    }

    return ngx_http_llm_parse_json(r, ctx, root, len, err);
}


/*
 * The body as a JSON tree released with r->pool, or NULL: with err filled
 * (a 400) when it is not JSON, else (err->status 0) on no memory.
 */

json_t *
ngx_http_llm_load_json(ngx_http_request_t *r, u_char *body, size_t len,
    ngx_http_llm_error_t *err)
{
    json_t                 *root;
    json_error_t            jerr;
    ngx_pool_cleanup_t     *cln;
    ngx_http_llm_check_t    ck;

    ngx_memzero(&ck, sizeof(ngx_http_llm_check_t));
    ck.request = r;
    ck.err = err;

    root = json_loadb((const char *) body, len, 0, &jerr);
    if (root == NULL) {
        (void) ngx_http_llm_bad(&ck, NULL, NULL,
                                "We could not parse the JSON body of your "
                                "request: %s at line %d, column %d "
                                "(byte %d).", jerr.text, jerr.line,
                                jerr.column, jerr.position);
        return NULL;
    }

    cln = ngx_pool_cleanup_add(r->pool, 0);
    if (cln == NULL) {
        json_decref(root);
        err->status = 0;
        return NULL;
    }

    cln->handler = ngx_http_llm_json_cleanup;
    cln->data = root;

    return root;
}


/*
 * Validates a chat or legacy completion request given as a JSON tree
 * (the client's body, or the chat request a dialect made of its own;
 * released with r->pool by the caller) into ctx.  len: the bytes the
 * client sent, for the admission estimate.  Returns as
 * ngx_http_llm_parse_request().
 */

ngx_int_t
ngx_http_llm_parse_json(ngx_http_request_t *r, ngx_http_llm_ctx_t *ctx,
    json_t *root, size_t len, ngx_http_llm_error_t *err)
{
    ngx_int_t               rc;
    ngx_uint_t              i;
    ngx_http_llm_check_t    ck;
    ngx_http_llm_params_t   params;

    ngx_memzero(&params, sizeof(ngx_http_llm_params_t));

    ck.request = r;
    ck.err = err;
    ck.ctx = ctx;
    ck.root = root;
    ck.params = &params;
    ck.root_changed = 0;

    if (!json_is_object(root)) {
        return ngx_http_llm_bad(&ck, NULL, NULL,
                                "The request body must be a JSON object, "
                                "not %s.", ngx_http_llm_json_type_name(root));
    }

    if (ngx_http_llm_new_request(&ck) != NGX_OK
        || ngx_http_llm_keep_json(r, ctx, root) != NGX_OK)
    {
        return NGX_ERROR;
    }

    rc = ngx_http_llm_walk_fields(&ck, root);
    if (rc != NGX_OK) {
        return rc;
    }

    ngx_http_llm_apply_params(ctx, &params);

    if (ctx->n > NGX_HTTP_LLM_API_MAX_N) {
        return ngx_http_llm_bad(&ck, "invalid_value", "n",
                                "n times the number of prompts must be at "
                                "most %d, got %uD x %uz.",
                                NGX_HTTP_LLM_API_MAX_N, ctx->gen->sampling->n,
                                ctx->gen->n_prompts);
    }

    /* per-choice state */

    ctx->choices = ngx_pcalloc(r->pool,
                               ctx->n * sizeof(ngx_http_llm_choice_t));
    if (ctx->choices == NULL) {
        return NGX_ERROR;
    }

    for (i = 0; i < ctx->n; i++) {
        if (ngx_array_init(&ctx->choices[i].calls, r->pool, 1,
                           sizeof(ngx_http_llm_call_t))
            != NGX_OK)
        {
            return NGX_ERROR;
        }
    }

    /*
     * The prompt estimate reserved at admission (with the output, see
     * ngx_http_llm_limit_admit): a token per 4 bytes of the body, which
     * the JSON around the text makes an overestimate.
     */

    ctx->prompt_est = len / 4;

    return NGX_OK;
}


/* The GenerateRequest with its Sampling, the response id, the key. */

static ngx_int_t
ngx_http_llm_new_request(ngx_http_llm_check_t *ck)
{
    ngx_uint_t             chat;
    Llm__Sampling         *s;
    ngx_http_request_t    *r;
    ngx_http_llm_ctx_t    *ctx;
    Llm__GenerateRequest  *gen;

    r = ck->request;
    ctx = ck->ctx;
    chat = (ctx->route == NGX_HTTP_LLM_ROUTE_CHAT);

    gen = ngx_palloc(r->pool, sizeof(Llm__GenerateRequest));
    s = ngx_palloc(r->pool, sizeof(Llm__Sampling));
    if (gen == NULL || s == NULL) {
        return NGX_ERROR;
    }

    llm__generate_request__init(gen);
    llm__sampling__init(s);
    gen->sampling = s;
    gen->is_completion = !chat;
    ctx->gen = gen;

    gen->request_id = (char *) ngx_http_llm_request_id(ctx);

    if (ctx->key) {
        gen->key_id = ngx_http_llm_pstrdup(r->pool,
                                           (char *) ctx->key->name.data,
                                           ctx->key->name.len);
        if (gen->key_id == NULL) {
            return NGX_ERROR;
        }
    }

    return NGX_OK;
}


/*
 * The members of a request object, for ngx_http_llm_member(): a request
 * has a handful of the 50 fields ngx_http_llm_fields[] knows, and looking
 * each field up in jansson's hash table (hashing every name) cost more
 * than comparing it with the few keys there are.
 */

#define NGX_HTTP_LLM_MEMBERS  16

typedef struct {
    const char                *key;
    size_t                     len;
    json_t                    *value;
} ngx_http_llm_member_t;


/*
 * Lists the members of object root into m (NGX_HTTP_LLM_MEMBERS at most):
 * their number, or NGX_HTTP_LLM_MEMBERS + 1 when there are more and
 * ngx_http_llm_member() asks jansson instead.
 */

static ngx_uint_t
ngx_http_llm_members(json_t *root, ngx_http_llm_member_t *m)
{
    void        *it;
    ngx_uint_t   n;

    if (json_object_size(root) > NGX_HTTP_LLM_MEMBERS) {
        return NGX_HTTP_LLM_MEMBERS + 1;
    }

    n = 0;

    for (it = json_object_iter(root);
         it && n < NGX_HTTP_LLM_MEMBERS;
         it = json_object_iter_next(root, it))
    {
        m[n].key = json_object_iter_key(it);
        m[n].len = json_object_iter_key_len(it);
        m[n].value = json_object_iter_value(it);
        n++;
    }

    return n;
}


/* json_object_get(root, name) on the members listed by the above. */

static json_t *
ngx_http_llm_member(json_t *root, ngx_http_llm_member_t *m, ngx_uint_t n,
    const char *name)
{
    ngx_uint_t  i;

    if (n > NGX_HTTP_LLM_MEMBERS) {
        return json_object_get(root, name);
    }

    for (i = 0; i < n; i++) {
        if (m[i].key[0] == name[0]
            && ngx_strcmp(m[i].key, name) == 0
            && m[i].len == ngx_strlen(name))
        {
            return m[i].value;
        }
    }

    return NULL;
}


/* Checks the fields of ngx_http_llm_fields[] in their order. */

static ngx_int_t
ngx_http_llm_walk_fields(ngx_http_llm_check_t *ck, json_t *root)
{
    u_char                 *base;
    double                  d;
    json_t                 *j;
    ngx_int_t               rc;
    ngx_uint_t              flag, present, n;
    json_int_t              v;
    ngx_http_llm_field_t   *f;
    ngx_http_llm_member_t   m[NGX_HTTP_LLM_MEMBERS];

    base = (u_char *) ck->params;
    n = ngx_http_llm_members(root, m);

    for (f = ngx_http_llm_fields; f->name; f++) {

        if (!(f->routes & ck->ctx->route)) {
            continue;
        }

        present = 0;
        j = ngx_http_llm_member(root, m, n, f->name);

        switch (f->kind) {

        case NGX_HTTP_LLM_FIELD_BOOL:
            rc = ngx_http_llm_get_bool(ck, j, f->name, &flag, &present);
            *(ngx_uint_t *) (base + f->offset) = present ? flag
                                                 : (ngx_uint_t) f->dflt;
            break;

        case NGX_HTTP_LLM_FIELD_INT:
            rc = ngx_http_llm_get_int(ck, j, f->name, f->imin, f->imax,
                                      &v, &present);
            *(json_int_t *) (base + f->offset) = present ? v
                                                 : (json_int_t) f->dflt;
            break;

        case NGX_HTTP_LLM_FIELD_NUMBER:
            rc = ngx_http_llm_get_number(ck, j, f->name, f->dmin, f->dmax,
                                         &d, &present);
            *(double *) (base + f->offset) = present ? d : f->dflt;
            break;

        case NGX_HTTP_LLM_FIELD_STRING:
            rc = (j && !json_is_null(j) && !json_is_string(j))
                 ? ngx_http_llm_bad_type(ck, f->name, "a string", j)
                 : NGX_OK;
            break;

        default: /* NGX_HTTP_LLM_FIELD_SPECIAL */
            rc = f->handler(ck, j);

            if (ck->root_changed) {
                /* the legacy functions became tools: list them again */
                ck->root_changed = 0;
                n = ngx_http_llm_members(root, m);
            }

            break;
        }

        if (rc != NGX_OK) {
            return rc;
        }

        if (present && f->present) {
            *(ngx_uint_t *) (base + f->present) = 1;
        }

        if (present && f->kind != NGX_HTTP_LLM_FIELD_SPECIAL && f->handler) {
            rc = f->handler(ck, NULL);
            if (rc != NGX_OK) {
                return rc;
            }
        }
    }

    return NGX_OK;
}


/* The checked scalar fields into the GenerateRequest and ctx. */

static void
ngx_http_llm_apply_params(ngx_http_llm_ctx_t *ctx, ngx_http_llm_params_t *p)
{
    Llm__Sampling         *s;
    Llm__GenerateRequest  *gen;

    gen = ctx->gen;
    s = gen->sampling;

    gen->echo = p->echo;
    ctx->echo = p->echo;
    ctx->stream = p->stream;
    gen->stream = p->stream;

    s->temperature = (float) p->temperature;
    s->top_p = (float) p->top_p;
    s->presence_penalty = (float) p->presence_penalty;
    s->frequency_penalty = (float) p->frequency_penalty;
    s->top_k = (int32_t) p->top_k;
    s->min_p = (float) p->min_p;
    s->repetition_penalty = (float) p->repetition_penalty;
    s->ignore_eos = p->ignore_eos;

    s->n = (uint32_t) p->n;

    /* several prompts: n choices each, numbered prompt * n + j */
    ctx->n = (ngx_uint_t) p->n * (gen->n_prompts ? gen->n_prompts : 1);

    ctx->max_tokens = (ngx_uint_t) (p->max_completion_tokens
                                    ? p->max_completion_tokens
                                    : p->max_tokens);
    s->max_tokens = (uint32_t) ctx->max_tokens;

    if (p->has_seed) {
        s->has_seed = 1;
        s->seed = (uint64_t) p->seed;
    }

    if (ctx->route == NGX_HTTP_LLM_ROUTE_CHAT) {
        ctx->logprobs = p->logprobs;
        s->logprobs = ctx->logprobs;

        if (p->top_logprobs >= 0) {
            s->top_logprobs = (uint32_t) p->top_logprobs;
        }

        gen->parallel_tool_calls = p->parallel_tool_calls;

    } else if (p->completion_logprobs >= 0) {
        ctx->completion_logprobs = (ngx_int_t) p->completion_logprobs;
        s->logprobs = 1;
        s->top_logprobs = (uint32_t) p->completion_logprobs;
    }
}


static ngx_int_t
ngx_http_llm_field_model(ngx_http_llm_check_t *ck, json_t *j)
{
    ngx_http_llm_ctx_t  *ctx;

    ctx = ck->ctx;

    if (j == NULL || json_is_null(j)) {
        return ngx_http_llm_bad(ck, "missing_required_parameter", "model",
                                "you must provide a model parameter");
    }

    if (!json_is_string(j)) {
        return ngx_http_llm_bad_type(ck, "model", "a string", j);
    }

    if (json_string_length(j) == 0) {
        return ngx_http_llm_bad(ck, "missing_required_parameter", "model",
                                "you must provide a model parameter");
    }

    ctx->requested.data = (u_char *) json_string_value(j);
    ctx->requested.len = json_string_length(j);
    ctx->gen->model = (char *) ctx->requested.data;

    return NGX_OK;
}


static ngx_int_t
ngx_http_llm_field_messages(ngx_http_llm_check_t *ck, json_t *j)
{
    if (j == NULL) {
        return ngx_http_llm_bad(ck, "missing_required_parameter",
                                "messages", "Missing required parameter: "
                                "'messages'.");
    }

    return ngx_http_llm_parse_messages(ck, ck->ctx, j);
}


static ngx_int_t
ngx_http_llm_field_prompt(ngx_http_llm_check_t *ck, json_t *j)
{
    json_t  *e;

    if (j == NULL || json_is_null(j)) {
        return ngx_http_llm_bad(ck, "missing_required_parameter",
                                "prompt", "Missing required parameter: "
                                "'prompt'.");
    }

    if (json_is_string(j)) {
        ck->ctx->gen->prompt = (char *) json_string_value(j);
        return NGX_OK;
    }

    if (!json_is_array(j)) {
        return ngx_http_llm_bad_type(ck, "prompt", "a string, an array of "
                                     "strings, an array of token ids or an "
                                     "array of token id arrays", j);
    }

    if (json_array_size(j) == 0) {
        return ngx_http_llm_bad(ck, "empty_array", "prompt",
                                "Invalid 'prompt': empty array. Expected an "
                                "array with minimum length 1, but got an "
                                "empty array instead.");
    }

    e = json_array_get(j, 0);

    if (json_is_integer(e)) {
        /* [542, 33]: one prompt as token ids */
        return ngx_http_llm_prompt_ids(ck, j, "prompt");
    }

    if (json_array_size(j) > 1) {
        return ngx_http_llm_prompts(ck, j);
    }

    if (json_is_string(e)) {
        ck->ctx->gen->prompt = (char *) json_string_value(e);
        return NGX_OK;
    }

    if (json_is_array(e)) {
        /* [[542, 33]] */
        return ngx_http_llm_prompt_ids(ck, e, "prompt[0]");
    }

    return ngx_http_llm_bad_type(ck, "prompt[0]", "a string or an array of "
                                 "token ids", e);
}


/*
 * Several prompts, all strings or all token id arrays, as prompts[] of
 * the GenerateRequest; their number times n is bounded as n is.
 */

static ngx_int_t
ngx_http_llm_prompts(ngx_http_llm_check_t *ck, json_t *j)
{
    u_char                  param[32];
    json_t                 *e;
    size_t                  i, n;
    ngx_int_t               rc;
    Llm__GenerateRequest   *gen;
    Llm__CompletionPrompt  *cp;

    gen = ck->ctx->gen;
    n = json_array_size(j);

    if (n > NGX_HTTP_LLM_API_MAX_N) {
        return ngx_http_llm_bad(ck, "array_above_max_length", "prompt",
                                "Invalid 'prompt': %uz prompts, more than "
                                "choices can be generated.", n);
    }

    gen->prompts = ngx_palloc(ck->request->pool,
                              n * sizeof(Llm__CompletionPrompt *));
    if (gen->prompts == NULL) {
        return NGX_ERROR;
    }

    json_array_foreach(j, i, e) {
        ngx_sprintf(param, "prompt[%uz]%Z", i);

        cp = ngx_palloc(ck->request->pool, sizeof(Llm__CompletionPrompt));
        if (cp == NULL) {
            return NGX_ERROR;
        }

        llm__completion_prompt__init(cp);
        gen->prompts[i] = cp;

        if (json_is_string(json_array_get(j, 0)) && json_is_string(e)) {
            cp->text = (char *) json_string_value(e);
            continue;
        }

        if (!json_is_array(json_array_get(j, 0)) || !json_is_array(e)) {
            return ngx_http_llm_bad_type(ck, (char *) param,
                                         json_is_string(json_array_get(j, 0))
                                         ? "a string (as the first prompt)"
                                         : "an array of token ids (as the "
                                           "first prompt)", e);
        }

        rc = ngx_http_llm_prompt_ids(ck, e, (char *) param);
        if (rc != NGX_OK) {
            return rc;
        }

        /* the ids went to prompt_token_ids: they belong to this prompt */
        cp->token_ids = gen->prompt_token_ids;
        cp->n_token_ids = gen->n_prompt_token_ids;
        gen->prompt_token_ids = NULL;
        gen->n_prompt_token_ids = 0;
    }

    gen->n_prompts = n;

    return NGX_OK;
}


/* A prompt as token ids (non-negative integers) into the request. */

static ngx_int_t
ngx_http_llm_prompt_ids(ngx_http_llm_check_t *ck, json_t *ids,
    const char *name)
{
    u_char                 param[64];
    json_t                *e;
    size_t                 i, n;
    json_int_t             v;
    Llm__GenerateRequest  *gen;

    gen = ck->ctx->gen;
    n = json_array_size(ids);

    if (n == 0) {
        return ngx_http_llm_bad(ck, "empty_array", name,
                                "Invalid '%s': empty array. Expected an "
                                "array with minimum length 1, but got an "
                                "empty array instead.", name);
    }

    gen->prompt_token_ids = ngx_palloc(ck->request->pool,
                                       n * sizeof(int32_t));
    if (gen->prompt_token_ids == NULL) {
        return NGX_ERROR;
    }

    json_array_foreach(ids, i, e) {
        ngx_sprintf(param, "%s[%uz]%Z", name, i);

        if (!json_is_integer(e)) {
            return ngx_http_llm_bad_type(ck, (char *) param,
                                         "an integer (a token id)", e);
        }

        v = json_integer_value(e);

        if (v < 0 || v > NGX_MAX_INT32_VALUE) {
            return ngx_http_llm_bad(ck, "invalid_value", (char *) param,
                                    "Invalid '%s': %L is not a token id.",
                                    param, (int64_t) v);
        }

        gen->prompt_token_ids[i] = (int32_t) v;
    }

    gen->n_prompt_token_ids = n;

    return NGX_OK;
}


static ngx_int_t
ngx_http_llm_field_suffix(ngx_http_llm_check_t *ck, json_t *j)
{
    if (j && !json_is_null(j)) {
        return ngx_http_llm_bad(ck, "unsupported_parameter", "suffix",
                                "Unsupported parameter: 'suffix' is not "
                                "supported by this server.");
    }

    return NGX_OK;
}


static ngx_int_t
ngx_http_llm_field_stream_options(ngx_http_llm_check_t *ck, json_t *opts)
{
    json_t  *j;

    if (opts == NULL || json_is_null(opts)) {
        return NGX_OK;
    }

    if (!ck->params->stream) {
        return ngx_http_llm_bad(ck, "invalid_value", "stream_options",
                                "The 'stream_options' parameter is only "
                                "allowed when 'stream' is enabled.");
    }

    if (!json_is_object(opts)) {
        return ngx_http_llm_bad_type(ck, "stream_options", "an object",
                                     opts);
    }

    j = json_object_get(opts, "include_usage");
    if (j && !json_is_null(j)) {
        if (!json_is_boolean(j)) {
            return ngx_http_llm_bad_type(ck, "stream_options.include_usage",
                                         "a boolean", j);
        }

        ck->ctx->include_usage = json_is_true(j);
    }

    return NGX_OK;
}


/* After a top_logprobs that is present: chat needs logprobs with it. */

static ngx_int_t
ngx_http_llm_check_top_logprobs(ngx_http_llm_check_t *ck, json_t *unused)
{
    if (!ck->params->logprobs) {
        return ngx_http_llm_bad(ck, "invalid_value", "top_logprobs",
                                "Invalid value for 'top_logprobs': "
                                "'logprobs' must be set to true to use it.");
    }

    return NGX_OK;
}


static ngx_int_t
ngx_http_llm_field_stop(ngx_http_llm_check_t *ck, json_t *j)
{
    return ngx_http_llm_parse_stop(ck, ck->ctx->gen->sampling, j);
}


static ngx_int_t
ngx_http_llm_field_logit_bias(ngx_http_llm_check_t *ck, json_t *j)
{
    return ngx_http_llm_parse_logit_bias(ck, ck->ctx->gen->sampling, j);
}


/* tools and tool_choice, checked, then passed on as JSON text. */

/*
 * The legacy functions[] and function_call, as OpenAI still takes them:
 * rewritten in the request as tools[] (each {"type": "function",
 * "function": f}) and tool_choice, with parallel_tool_calls false (the
 * legacy answer has one function_call), so that the tools checks that
 * follow see them; the answer then takes the legacy shape
 * (ctx->legacy_functions).
 */

static ngx_int_t
ngx_http_llm_field_functions(ngx_http_llm_check_t *ck, json_t *functions)
{
    u_char      param[64];
    json_t     *tools, *t, *f, *fc, *n;
    ngx_uint_t  i;

    fc = json_object_get(ck->root, "function_call");

    if (functions == NULL || json_is_null(functions)) {
        if (fc && !json_is_null(fc)
            && !(json_is_string(fc)
                 && ngx_strcmp(json_string_value(fc), "none") == 0))
        {
            return ngx_http_llm_bad(ck, "invalid_value", "function_call",
                                    "Invalid value for 'function_call': "
                                    "'function_call' is only allowed when "
                                    "'functions' are specified.");
        }

        return NGX_OK;
    }

    t = json_object_get(ck->root, "tools");
    if (t && !json_is_null(t)) {
        return ngx_http_llm_bad(ck, "invalid_value", "functions",
                                "Invalid parameter: 'functions' and 'tools' "
                                "cannot both be given ('functions' is the "
                                "deprecated form of 'tools').");
    }

    t = json_object_get(ck->root, "tool_choice");
    if (t && !json_is_null(t)) {
        return ngx_http_llm_bad(ck, "invalid_value", "tool_choice",
                                "Invalid parameter: 'tool_choice' goes "
                                "with 'tools'; with 'functions' use "
                                "'function_call'.");
    }

    if (!json_is_array(functions)) {
        return ngx_http_llm_bad_type(ck, "functions", "an array", functions);
    }

    if (json_array_size(functions) == 0) {
        return ngx_http_llm_bad(ck, "empty_array", "functions",
                                "Invalid 'functions': empty array. Expected "
                                "an array with minimum length 1, but got "
                                "an empty array instead.");
    }

    tools = json_array();
    ck->root_changed = 1;

    if (tools == NULL
        || json_object_set_new(ck->root, "tools", tools) != 0)
    {
        return NGX_ERROR;
    }

    json_array_foreach(functions, i, f) {
        ngx_sprintf(param, "functions[%ui]%Z", i);

        if (!json_is_object(f)) {
            return ngx_http_llm_bad_type(ck, (char *) param, "an object", f);
        }

        n = json_object_get(f, "name");
        if (n == NULL || !json_is_string(n)) {
            ngx_sprintf(param, "functions[%ui].name%Z", i);
            return n ? ngx_http_llm_bad_type(ck, (char *) param, "a string",
                                             n)
                     : ngx_http_llm_missing(ck, param);
        }

        t = json_pack("{s:s, s:O}", "type", "function", "function", f);
        if (t == NULL || json_array_append_new(tools, t) != 0) {
            return NGX_ERROR;
        }
    }

    if (json_object_get(ck->root, "parallel_tool_calls") == NULL
        && json_object_set_new(ck->root, "parallel_tool_calls",
                               json_false()) != 0)
    {
        return NGX_ERROR;
    }

    ck->ctx->legacy_functions = 1;

    return ngx_http_llm_function_call(ck, fc);
}


/* function_call: "none", "auto" or {"name": f}, as tool_choice. */

static ngx_int_t
ngx_http_llm_function_call(ngx_http_llm_check_t *ck, json_t *fc)
{
    json_t      *n, *choice;
    const char  *s;

    if (fc == NULL || json_is_null(fc)) {
        return NGX_OK;
    }

    if (json_is_string(fc)) {
        s = json_string_value(fc);

        if (ngx_strcmp(s, "none") != 0 && ngx_strcmp(s, "auto") != 0) {
            return ngx_http_llm_bad(ck, "invalid_value", "function_call",
                                    "Invalid value: '%s'. Supported values "
                                    "are: 'none' and 'auto', or an object "
                                    "naming a function.", s);
        }

        choice = json_incref(fc);

    } else if (json_is_object(fc)) {
        n = json_object_get(fc, "name");

        if (n == NULL || !json_is_string(n)) {
            return ngx_http_llm_bad(ck, "missing_required_parameter",
                                    "function_call.name",
                                    "Missing required parameter: "
                                    "'function_call.name'.");
        }

        choice = json_pack("{s:s, s:{s:O}}", "type", "function",
                           "function", "name", n);

    } else {
        return ngx_http_llm_bad_type(ck, "function_call",
                                     "a string or an object", fc);
    }

    ck->root_changed = 1;

    if (choice == NULL
        || json_object_set_new(ck->root, "tool_choice", choice) != 0)
    {
        return NGX_ERROR;
    }

    return NGX_OK;
}


static ngx_int_t
ngx_http_llm_field_tools(ngx_http_llm_check_t *ck, json_t *tools)
{
    json_t                *j;
    ngx_int_t              rc;
    Llm__GenerateRequest  *gen;

    gen = ck->ctx->gen;

    rc = ngx_http_llm_parse_tools(ck, ck->root);
    if (rc != NGX_OK) {
        return rc;
    }

    if (tools && json_array_size(tools)) {
        gen->tools_json = ngx_http_llm_dump(ck->request->pool, tools);
        if (gen->tools_json == NULL) {
            return NGX_ERROR;
        }
    }

    j = json_object_get(ck->root, "tool_choice");
    if (j && !json_is_null(j)) {
        if (json_is_string(j)) {
            gen->tool_choice_json = (char *) json_string_value(j);

        } else {
            gen->tool_choice_json = ngx_http_llm_dump(ck->request->pool, j);
            if (gen->tool_choice_json == NULL) {
                return NGX_ERROR;
            }
        }
    }

    return NGX_OK;
}


static ngx_int_t
ngx_http_llm_field_response_format(ngx_http_llm_check_t *ck, json_t *j)
{
    json_t      *t, *js;
    const char  *type;

    if (j == NULL || json_is_null(j)) {
        return NGX_OK;
    }

    if (!json_is_object(j)) {
        return ngx_http_llm_bad_type(ck, "response_format", "an object", j);
    }

    t = json_object_get(j, "type");
    if (t == NULL) {
        return ngx_http_llm_bad(ck, "missing_required_parameter",
                                "response_format.type",
                                "Missing required parameter: "
                                "'response_format.type'.");
    }

    if (!json_is_string(t)) {
        return ngx_http_llm_bad_type(ck, "response_format.type", "a string",
                                     t);
    }

    type = json_string_value(t);

    if (ngx_strcmp(type, "json_schema") == 0) {
        js = json_object_get(j, "json_schema");

        if (js == NULL || !json_is_object(js)) {
            return ngx_http_llm_bad(ck, js ? "invalid_type"
                                    : "missing_required_parameter",
                                    "response_format.json_schema",
                                    "Invalid 'response_format.json_schema': "
                                    "expected an object with 'name' and "
                                    "'schema'.");
        }

        t = json_object_get(js, "name");
        if (t == NULL || !json_is_string(t)) {
            return ngx_http_llm_bad(ck, "missing_required_parameter",
                                    "response_format.json_schema.name",
                                    "Missing required parameter: "
                                    "'response_format.json_schema.name'.");
        }

        t = json_object_get(js, "schema");
        if (t && !json_is_object(t)) {
            return ngx_http_llm_bad_type(ck,
                                         "response_format.json_schema.schema",
                                         "an object", t);
        }

    } else if (ngx_strcmp(type, "json_object") != 0
               && ngx_strcmp(type, "text") != 0)
    {
        return ngx_http_llm_bad(ck, "invalid_value", "response_format.type",
                                "Invalid value: '%s'. Supported values are: "
                                "'text', 'json_object' and 'json_schema'.",
                                type);
    }

    if (ngx_strcmp(type, "text") != 0) {
        ck->ctx->gen->response_format_json =
                                    ngx_http_llm_dump(ck->request->pool, j);
        if (ck->ctx->gen->response_format_json == NULL) {
            return NGX_ERROR;
        }
    }

    return NGX_OK;
}


static ngx_int_t
ngx_http_llm_field_template_kwargs(ngx_http_llm_check_t *ck, json_t *j)
{
    json_t  *kw, *effort;

    effort = json_object_get(ck->root, "reasoning_effort");
    if (!json_is_string(effort)) {
        effort = NULL;
    }

    if ((j == NULL || json_is_null(j)) && effort == NULL) {
        return NGX_OK;
    }

    if (j != NULL && !json_is_null(j) && !json_is_object(j)) {
        return ngx_http_llm_bad_type(ck, "chat_template_kwargs", "an object",
                                     j);
    }

    /*
     * reasoning_effort reaches the template as the variable of that name
     * (gpt-oss's template reads it), and "none" as enable_thinking false
     * (Qwen3, GLM-4.5); the client's own chat_template_kwargs win
     */

    kw = (j != NULL && json_is_object(j)) ? json_copy(j) : json_object();
    if (kw == NULL) {
        return NGX_ERROR;
    }

    if (effort != NULL) {
        if (json_object_get(kw, "reasoning_effort") == NULL) {
            json_object_set(kw, "reasoning_effort", effort);
        }

        if (ngx_strcmp(json_string_value(effort), "none") == 0
            && json_object_get(kw, "enable_thinking") == NULL)
        {
            json_object_set_new(kw, "enable_thinking", json_false());
        }
    }

    ck->ctx->gen->chat_template_kwargs_json =
                                    ngx_http_llm_dump(ck->request->pool, kw);
    json_decref(kw);

    if (ck->ctx->gen->chat_template_kwargs_json == NULL) {
        return NGX_ERROR;
    }

    return NGX_OK;
}


/*
 * A string field with an enum (OpenAI's): null or absent is fine, any
 * other value a 400 naming the values (values is NULL-terminated).
 */

static ngx_int_t
ngx_http_llm_check_enum(ngx_http_llm_check_t *ck, const char *name,
    json_t *j, const char *const *values)
{
    u_char       list[256], *p, *last;
    ngx_uint_t   i, n;
    const char  *v;

    if (j == NULL || json_is_null(j)) {
        return NGX_OK;
    }

    if (!json_is_string(j)) {
        return ngx_http_llm_bad_type(ck, name, "a string", j);
    }

    v = json_string_value(j);

    for (n = 0; values[n]; n++) {
        if (ngx_strcmp(v, values[n]) == 0) {
            return NGX_OK;
        }
    }

    /* 'a', 'b', and 'c' as OpenAI writes it */

    p = list;
    last = list + sizeof(list) - 1;

    for (i = 0; i < n; i++) {
        p = ngx_slprintf(p, last, "%s'%s'",
                         i == 0 ? "" : (i + 1 == n ? ", and " : ", "),
                         values[i]);
    }

    *p = '\0';

    return ngx_http_llm_bad(ck, "invalid_value", name,
                            "Invalid value: '%s'. Supported values are: "
                            "%s.", v, list);
}


static ngx_int_t
ngx_http_llm_field_reasoning_effort(ngx_http_llm_check_t *ck, json_t *j)
{
    static const char *const  values[] = {
        "none", "minimal", "low", "medium", "high", "xhigh", "max", NULL
    };

    return ngx_http_llm_check_enum(ck, "reasoning_effort", j, values);
}


static ngx_int_t
ngx_http_llm_field_service_tier(ngx_http_llm_check_t *ck, json_t *j)
{
    static const char *const  values[] = {
        "auto", "default", "flex", "scale", "priority", "fast", NULL
    };

    return ngx_http_llm_check_enum(ck, "service_tier", j, values);
}


static ngx_int_t
ngx_http_llm_field_verbosity(ngx_http_llm_check_t *ck, json_t *j)
{
    static const char *const  values[] = { "low", "medium", "high", NULL };

    return ngx_http_llm_check_enum(ck, "verbosity", j, values);
}


/* modalities: an array of "text" (and "audio", which is refused). */

static ngx_int_t
ngx_http_llm_field_modalities(ngx_http_llm_check_t *ck, json_t *j)
{
    u_char       param[32];
    json_t      *m;
    ngx_uint_t   i;
    const char  *v;

    if (j == NULL || json_is_null(j)) {
        return NGX_OK;
    }

    if (!json_is_array(j)) {
        return ngx_http_llm_bad_type(ck, "modalities", "an array", j);
    }

    json_array_foreach(j, i, m) {
        ngx_sprintf(param, "modalities[%ui]%Z", i);

        if (!json_is_string(m)) {
            return ngx_http_llm_bad_type(ck, (char *) param, "a string", m);
        }

        v = json_string_value(m);

        if (ngx_strcmp(v, "audio") == 0) {
            return ngx_http_llm_bad(ck, "unsupported_value", "modalities",
                                    "Audio output is not supported: this "
                                    "server generates text only; use "
                                    "modalities [\"text\"].");
        }

        if (ngx_strcmp(v, "text") != 0) {
            return ngx_http_llm_bad(ck, "invalid_value", (char *) param,
                                    "Invalid value: '%s'. Supported "
                                    "values are: 'text' and 'audio'.", v);
        }
    }

    return NGX_OK;
}


static ngx_int_t
ngx_http_llm_field_audio(ngx_http_llm_check_t *ck, json_t *j)
{
    if (j == NULL || json_is_null(j)) {
        return NGX_OK;
    }

    return ngx_http_llm_bad(ck, "unsupported_parameter", "audio",
                            "Audio output is not supported: this server "
                            "generates text only.");
}


/*
 * prediction: OpenAI's shape is checked (type "content", content a
 * string or text parts), then refused as OpenAI refuses it for models
 * without predicted outputs.
 */

static ngx_int_t
ngx_http_llm_field_prediction(ngx_http_llm_check_t *ck, json_t *j)
{
    json_t  *t, *c;

    if (j == NULL || json_is_null(j)) {
        return NGX_OK;
    }

    if (!json_is_object(j)) {
        return ngx_http_llm_bad_type(ck, "prediction", "an object", j);
    }

    t = json_object_get(j, "type");
    if (t == NULL || !json_is_string(t)
        || ngx_strcmp(json_string_value(t), "content") != 0)
    {
        return ngx_http_llm_bad(ck, "invalid_value", "prediction.type",
                                "Invalid value for 'prediction.type': "
                                "expected 'content'.");
    }

    c = json_object_get(j, "content");
    if (c == NULL || !(json_is_string(c) || json_is_array(c))) {
        return ngx_http_llm_bad(ck, c ? "invalid_type"
                                      : "missing_required_parameter",
                                "prediction.content",
                                "Invalid 'prediction.content': expected a "
                                "string or an array of text parts.");
    }

    return ngx_http_llm_bad(ck, "unsupported_parameter", "prediction",
                            "Predicted outputs are not supported by this "
                            "server.");
}


static void
ngx_http_llm_json_cleanup(void *data)
{
    json_decref((json_t *) data);
}


static ngx_int_t
ngx_http_llm_parse_messages(ngx_http_llm_check_t *ck,
    ngx_http_llm_ctx_t *ctx, json_t *msgs)
{
    u_char               param[128];
    json_t              *m;
    ngx_int_t            rc;
    ngx_uint_t           i, n;
    Llm__Message        *pm, **pmsgs;
    ngx_http_request_t  *r;

    r = ck->request;

    if (!json_is_array(msgs)) {
        return ngx_http_llm_bad_type(ck, "messages", "an array", msgs);
    }

    n = json_array_size(msgs);

    if (n == 0) {
        return ngx_http_llm_bad(ck, "empty_array", "messages",
                                "Invalid 'messages': empty array. Expected "
                                "an array with minimum length 1, but got an "
                                "empty array instead.");
    }

    pmsgs = ngx_palloc(r->pool, n * sizeof(Llm__Message *));
    if (pmsgs == NULL) {
        return NGX_ERROR;
    }

    ctx->gen->messages = pmsgs;
    ctx->gen->n_messages = n;

    for (i = 0; i < n; i++) {
        m = json_array_get(msgs, i);

        ngx_sprintf(param, "messages[%ui]%Z", i);

        if (!json_is_object(m)) {
            return ngx_http_llm_bad_type(ck, (char *) param, "an object", m);
        }

        pm = ngx_palloc(r->pool, sizeof(Llm__Message));
        if (pm == NULL) {
            return NGX_ERROR;
        }

        llm__message__init(pm);
        pmsgs[i] = pm;

        rc = ngx_http_llm_parse_message(ck, m, i, pm);
        if (rc != NGX_OK) {
            return rc;
        }
    }

    return NGX_OK;
}


/* messages[i]: role, content, name, tool_call_id, tool_calls. */

static ngx_int_t
ngx_http_llm_parse_message(ngx_http_llm_check_t *ck, json_t *m,
    ngx_uint_t i, Llm__Message *pm)
{
    u_char       param[128];
    json_t      *j, *calls;
    ngx_int_t    rc;
    const char  *role;

    j = json_object_get(m, "role");
    ngx_sprintf(param, "messages[%ui].role%Z", i);

    if (j == NULL) {
        return ngx_http_llm_missing(ck, param);
    }

    if (!json_is_string(j)) {
        return ngx_http_llm_bad_type(ck, (char *) param, "a string", j);
    }

    role = json_string_value(j);

    if (ngx_strcmp(role, "function") == 0) {
        role = "tool";

    } else if (ngx_strcmp(role, "system") != 0
               && ngx_strcmp(role, "developer") != 0
               && ngx_strcmp(role, "user") != 0
               && ngx_strcmp(role, "assistant") != 0
               && ngx_strcmp(role, "tool") != 0)
    {
        return ngx_http_llm_bad(ck, "invalid_value", (char *) param,
                                "Invalid value: '%s'. Supported values "
                                "are: 'system', 'assistant', 'user', "
                                "'function', 'tool', and 'developer'.",
                                role);
    }

    pm->role = (char *) role;

    /* content */

    j = json_object_get(m, "content");
    calls = json_object_get(m, "tool_calls");

    if ((calls == NULL || json_is_null(calls))
        && ngx_strcmp(role, "assistant") == 0
        && json_object_get(m, "function_call"))
    {
        rc = ngx_http_llm_legacy_call(ck, m, i);
        if (rc != NGX_OK) {
            return rc;
        }

        calls = json_object_get(m, "tool_calls");
    }

    if (j == NULL || json_is_null(j)) {
        if (ngx_strcmp(role, "assistant") != 0) {
            ngx_sprintf(param, "messages[%ui].content%Z", i);
            return ngx_http_llm_bad(ck, j ? "invalid_type"
                                    : "missing_required_parameter",
                                    (char *) param,
                                    j ? "Invalid type for '%s': "
                                        "expected a string or an array "
                                        "of content parts, but got null "
                                        "instead."
                                      : "Missing required parameter: "
                                        "'%s'.", param);
        }

        pm->content_null = 1;

    } else {
        rc = ngx_http_llm_parse_content(ck, j, i, role, &pm->content);
        if (rc != NGX_OK) {
            return rc;
        }
    }

    j = json_object_get(m, "name");
    if (j && !json_is_null(j)) {
        if (!json_is_string(j)) {
            ngx_sprintf(param, "messages[%ui].name%Z", i);
            return ngx_http_llm_bad_type(ck, (char *) param, "a string", j);
        }

        pm->name = (char *) json_string_value(j);
    }

    j = json_object_get(m, "reasoning_content");
    if (j && json_is_string(j)) {
        pm->reasoning_content = (char *) json_string_value(j);
    }

    /* tool role */

    if (ngx_strcmp(role, "tool") == 0
        && ngx_strcmp(json_string_value(json_object_get(m, "role")),
                      "tool") == 0)
    {
        j = json_object_get(m, "tool_call_id");
        ngx_sprintf(param, "messages[%ui].tool_call_id%Z", i);

        if (j == NULL) {
            return ngx_http_llm_missing(ck, param);
        }

        if (!json_is_string(j)) {
            return ngx_http_llm_bad_type(ck, (char *) param, "a string", j);
        }

        pm->tool_call_id = (char *) json_string_value(j);
    }

    if (calls && !json_is_null(calls)) {
        return ngx_http_llm_parse_tool_calls(ck, calls, i, pm);
    }

    return NGX_OK;
}


/*
 * messages[i].function_call of a legacy assistant message: set in the
 * message as its one tool call (id "call_" and the message's index; the
 * legacy function result that follows names the function, not the id).
 */

static ngx_int_t
ngx_http_llm_legacy_call(ngx_http_llm_check_t *ck, json_t *m, ngx_uint_t i)
{
    u_char   param[64], id[32];
    json_t  *fc, *calls;

    fc = json_object_get(m, "function_call");

    if (json_is_null(fc)) {
        return NGX_OK;
    }

    ngx_sprintf(param, "messages[%ui].function_call%Z", i);

    if (!json_is_object(fc)) {
        return ngx_http_llm_bad_type(ck, (char *) param, "an object", fc);
    }

    ngx_sprintf(id, "call_%ui%Z", i);

    calls = json_pack("[{s:s, s:s, s:O}]", "id", (char *) id,
                      "type", "function", "function", fc);
    if (calls == NULL
        || json_object_set_new(m, "tool_calls", calls) != 0)
    {
        return NGX_ERROR;
    }

    return NGX_OK;
}


/* messages[i].tool_calls of an assistant message. */

static ngx_int_t
ngx_http_llm_parse_tool_calls(ngx_http_llm_check_t *ck, json_t *calls,
    ngx_uint_t i, Llm__Message *pm)
{
    u_char          param[128];
    json_t         *c, *f, *t;
    ngx_uint_t      k;
    Llm__ToolCall  *tc;

    ngx_sprintf(param, "messages[%ui].tool_calls%Z", i);

    if (ngx_strcmp(pm->role, "assistant") != 0) {
        return ngx_http_llm_bad(ck, "invalid_value", (char *) param,
                                "Invalid parameter: '%s' is only "
                                "allowed for messages with role "
                                "'assistant'.", param);
    }

    if (!json_is_array(calls)) {
        return ngx_http_llm_bad_type(ck, (char *) param, "an array", calls);
    }

    pm->n_tool_calls = json_array_size(calls);
    pm->tool_calls = ngx_palloc(ck->request->pool,
                                pm->n_tool_calls * sizeof(Llm__ToolCall *));
    if (pm->tool_calls == NULL) {
        return NGX_ERROR;
    }

    for (k = 0; k < pm->n_tool_calls; k++) {
        c = json_array_get(calls, k);
        ngx_sprintf(param, "messages[%ui].tool_calls[%ui]%Z", i, k);

        if (!json_is_object(c)) {
            return ngx_http_llm_bad_type(ck, (char *) param, "an object", c);
        }

        tc = ngx_palloc(ck->request->pool, sizeof(Llm__ToolCall));
        if (tc == NULL) {
            return NGX_ERROR;
        }

        llm__tool_call__init(tc);
        pm->tool_calls[k] = tc;
        tc->type = "function";

        t = json_object_get(c, "id");
        if (t == NULL || !json_is_string(t)) {
            ngx_sprintf(param, "messages[%ui].tool_calls[%ui].id%Z", i, k);
            return ngx_http_llm_missing(ck, param);
        }

        tc->id = (char *) json_string_value(t);

        t = json_object_get(c, "type");
        if (t && (!json_is_string(t)
                  || ngx_strcmp(json_string_value(t), "function")))
        {
            ngx_sprintf(param, "messages[%ui].tool_calls[%ui].type%Z", i, k);
            return ngx_http_llm_bad(ck, "invalid_value", (char *) param,
                                    "Invalid value for '%s': expected "
                                    "'function'.", param);
        }

        f = json_object_get(c, "function");
        ngx_sprintf(param, "messages[%ui].tool_calls[%ui].function%Z", i, k);

        if (f == NULL || !json_is_object(f)) {
            return ngx_http_llm_bad(ck, f ? "invalid_type"
                                    : "missing_required_parameter",
                                    (char *) param, "Invalid '%s': "
                                    "expected an object with 'name' "
                                    "and 'arguments'.", param);
        }

        t = json_object_get(f, "name");
        if (t == NULL || !json_is_string(t)) {
            ngx_sprintf(param, "messages[%ui].tool_calls[%ui]"
                        "function.name%Z", i, k);
            return ngx_http_llm_missing(ck, param);
        }

        tc->name = (char *) json_string_value(t);

        t = json_object_get(f, "arguments");
        if (t && !json_is_string(t)) {
            ngx_sprintf(param, "messages[%ui].tool_calls[%ui]."
                        "function.arguments%Z", i, k);
            return ngx_http_llm_bad_type(ck, (char *) param, "a string", t);
        }

        tc->arguments = t ? (char *) json_string_value(t) : "{}";
    }

    return NGX_OK;
}


/* A message's content: a string, or text parts joined. */

static ngx_int_t
ngx_http_llm_parse_content(ngx_http_llm_check_t *ck, json_t *content,
    ngx_uint_t i, const char *role, char **out)
{
    u_char               param[128], *p;
    size_t               len;
    json_t              *part, *t, *text;
    ngx_uint_t           k, n;
    const char          *type;
    ngx_http_request_t  *r;

    r = ck->request;

    if (json_is_string(content)) {
        *out = (char *) json_string_value(content);
        return NGX_OK;
    }

    ngx_sprintf(param, "messages[%ui].content%Z", i);

    if (!json_is_array(content)) {
        return ngx_http_llm_bad(ck, "invalid_type", (char *) param,
                                "Invalid type for '%s': expected a string "
                                "or an array of content parts, but got %s "
                                "instead.", param,
                                ngx_http_llm_json_type_name(content));
    }

    n = json_array_size(content);
    len = 0;

    for (k = 0; k < n; k++) {
        part = json_array_get(content, k);
        ngx_sprintf(param, "messages[%ui].content[%ui]%Z", i, k);

        if (!json_is_object(part)) {
            return ngx_http_llm_bad_type(ck, (char *) param, "an object",
                                         part);
        }

        t = json_object_get(part, "type");
        ngx_sprintf(param, "messages[%ui].content[%ui].type%Z", i, k);

        if (t == NULL || !json_is_string(t)) {
            return ngx_http_llm_missing(ck, param);
        }

        type = json_string_value(t);

        if (ngx_strcmp(type, "text") == 0
            || (ngx_strcmp(type, "refusal") == 0
                && ngx_strcmp(role, "assistant") == 0))
        {
            text = json_object_get(part, type[0] == 't' ? "text" : "refusal");

            if (text == NULL || !json_is_string(text)) {
                ngx_sprintf(param, "messages[%ui].content[%ui].%s%Z", i, k,
                            type);
                return ngx_http_llm_bad(ck, text ? "invalid_type"
                                        : "missing_required_parameter",
                                        (char *) param, "Invalid '%s': "
                                        "expected a string.", param);
            }

            len += json_string_length(text);
            continue;
        }

        if (ngx_strcmp(type, "image_url") == 0
            || ngx_strcmp(type, "input_audio") == 0
            || ngx_strcmp(type, "file") == 0
            || ngx_strcmp(type, "image") == 0
            || ngx_strcmp(type, "audio") == 0)
        {
            return ngx_http_llm_bad(ck, "unsupported_content", (char *) param,
                                    "Unsupported content part type '%s': "
                                    "the model accepts text only.", type);
        }

        return ngx_http_llm_bad(ck, "invalid_value", (char *) param,
                                "Invalid value: '%s'. Supported values are: "
                                "'text'%s.", type,
                                ngx_strcmp(role, "assistant") == 0
                                ? " and 'refusal'" : "");
    }

    p = ngx_pnalloc(r->pool, len + 1);
    if (p == NULL) {
        return NGX_ERROR;
    }

    *out = (char *) p;

    for (k = 0; k < n; k++) {
        part = json_array_get(content, k);
        type = json_string_value(json_object_get(part, "type"));
        text = json_object_get(part, type[0] == 't' ? "text" : "refusal");

        p = ngx_cpymem(p, json_string_value(text), json_string_length(text));
    }

    *p = '\0';

    return NGX_OK;
}


/* tools[], tool_choice: every field OpenAI defines, with its param path. */

static ngx_int_t
ngx_http_llm_parse_tools(ngx_http_llm_check_t *ck, json_t *root)
{
    json_t      *tools;
    ngx_int_t    rc;
    ngx_uint_t   i, n;

    tools = json_object_get(root, "tools");
    n = 0;

    if (tools && !json_is_null(tools)) {
        if (!json_is_array(tools)) {
            return ngx_http_llm_bad_type(ck, "tools", "an array", tools);
        }

        n = json_array_size(tools);

        for (i = 0; i < n; i++) {
            rc = ngx_http_llm_parse_tool(ck, json_array_get(tools, i), i);
            if (rc != NGX_OK) {
                return rc;
            }
        }
    }

    return ngx_http_llm_parse_tool_choice(ck, root, tools, n);
}


/* tools[i]: a function with a name, a description, a JSON schema. */

static ngx_int_t
ngx_http_llm_parse_tool(ngx_http_llm_check_t *ck, json_t *tool, ngx_uint_t i)
{
    u_char       param[128];
    json_t      *t, *f;
    size_t       len;
    ngx_uint_t   k;
    const char  *name;

    ngx_sprintf(param, "tools[%ui]%Z", i);

    if (!json_is_object(tool)) {
        return ngx_http_llm_bad_type(ck, (char *) param, "an object",
                                     tool);
    }

    t = json_object_get(tool, "type");
    ngx_sprintf(param, "tools[%ui].type%Z", i);

    if (t == NULL) {
        return ngx_http_llm_missing(ck, param);
    }

    if (!json_is_string(t)
        || ngx_strcmp(json_string_value(t), "function") != 0)
    {
        return ngx_http_llm_bad(ck, "invalid_value", (char *) param,
                                "Invalid value: '%s'. Supported "
                                "values are: 'function'.",
                                json_is_string(t)
                                ? json_string_value(t) : "?");
    }

    f = json_object_get(tool, "function");
    ngx_sprintf(param, "tools[%ui].function%Z", i);

    if (f == NULL) {
        return ngx_http_llm_missing(ck, param);
    }

    if (!json_is_object(f)) {
        return ngx_http_llm_bad_type(ck, (char *) param, "an object",
                                     f);
    }

    t = json_object_get(f, "name");
    ngx_sprintf(param, "tools[%ui].function.name%Z", i);

    if (t == NULL) {
        return ngx_http_llm_missing(ck, param);
    }

    if (!json_is_string(t)) {
        return ngx_http_llm_bad_type(ck, (char *) param, "a string",
                                     t);
    }

    name = json_string_value(t);
    len = json_string_length(t);

    for (k = 0; k < len; k++) {
        if (!((name[k] >= 'a' && name[k] <= 'z')
              || (name[k] >= 'A' && name[k] <= 'Z')
              || (name[k] >= '0' && name[k] <= '9')
              || name[k] == '_' || name[k] == '-'))
        {
            break;
        }
    }

    if (len == 0 || len > 64 || k < len) {
        return ngx_http_llm_bad(ck, "invalid_value", (char *) param,
                                "Invalid '%s': string does not "
                                "match pattern. Expected a string "
                                "that matches the pattern "
                                "'^[a-zA-Z0-9_-]{1,64}$'.", param);
    }

    t = json_object_get(f, "description");
    if (t && !json_is_null(t) && !json_is_string(t)) {
        ngx_sprintf(param, "tools[%ui].function.description%Z", i);
        return ngx_http_llm_bad_type(ck, (char *) param, "a string",
                                     t);
    }

    t = json_object_get(f, "parameters");
    if (t && !json_is_object(t)) {
        ngx_sprintf(param, "tools[%ui].function.parameters%Z", i);
        return ngx_http_llm_bad(ck, "invalid_type", (char *) param,
                                "Invalid '%s': expected a JSON "
                                "schema object, but got %s "
                                "instead.", param,
                                ngx_http_llm_json_type_name(t));
    }

    if (t) {
        json_t  *type = json_object_get(t, "type");

        if (type && !json_is_string(type) && !json_is_array(type)) {
            ngx_sprintf(param,
                        "tools[%ui].function.parameters%Z", i);
            return ngx_http_llm_bad(ck, "invalid_value",
                                    (char *) param, "Invalid schema "
                                    "for function '%s': 'type' must "
                                    "be a string.", name);
        }
    }

    t = json_object_get(f, "strict");
    if (t && !json_is_null(t) && !json_is_boolean(t)) {
        ngx_sprintf(param, "tools[%ui].function.strict%Z", i);
        return ngx_http_llm_bad_type(ck, (char *) param,
                                     "a boolean", t);
    }

    return NGX_OK;
}


/* tool_choice: none, auto, required, or a function of tools[]. */

static ngx_int_t
ngx_http_llm_parse_tool_choice(ngx_http_llm_check_t *ck, json_t *root,
    json_t *tools, ngx_uint_t n)
{
    json_t      *t, *f, *choice;
    ngx_uint_t   i, found;
    const char  *name, *s;

    choice = json_object_get(root, "tool_choice");
    if (choice == NULL || json_is_null(choice)) {
        return NGX_OK;
    }

    if (json_is_string(choice)) {
        s = json_string_value(choice);

        if (ngx_strcmp(s, "none") != 0 && ngx_strcmp(s, "auto") != 0
            && ngx_strcmp(s, "required") != 0)
        {
            return ngx_http_llm_bad(ck, "invalid_value", "tool_choice",
                                    "Invalid value: '%s'. Supported values "
                                    "are: 'none', 'auto', and 'required'.",
                                    s);
        }

        if (n == 0 && ngx_strcmp(s, "none") != 0) {
            return ngx_http_llm_bad(ck, "invalid_value", "tool_choice",
                                    "Invalid value for 'tool_choice': "
                                    "'tool_choice' is only allowed when "
                                    "'tools' are specified.");
        }

        return NGX_OK;
    }

    if (!json_is_object(choice)) {
        return ngx_http_llm_bad(ck, "invalid_type", "tool_choice",
                                "Invalid type for 'tool_choice': expected "
                                "a string or an object, but got %s instead.",
                                ngx_http_llm_json_type_name(choice));
    }

    t = json_object_get(choice, "type");
    if (t == NULL || !json_is_string(t)
        || ngx_strcmp(json_string_value(t), "function") != 0)
    {
        return ngx_http_llm_bad(ck, "invalid_value", "tool_choice.type",
                                "Invalid value for 'tool_choice.type': "
                                "expected 'function'.");
    }

    f = json_object_get(choice, "function");
    t = f ? json_object_get(f, "name") : NULL;

    if (t == NULL || !json_is_string(t)) {
        return ngx_http_llm_bad(ck, "missing_required_parameter",
                                "tool_choice.function.name",
                                "Missing required parameter: "
                                "'tool_choice.function.name'.");
    }

    name = json_string_value(t);
    found = 0;

    for (i = 0; i < n; i++) {
        f = json_object_get(json_array_get(tools, i), "function");
        t = json_object_get(f, "name");

        if (ngx_strcmp(json_string_value(t), name) == 0) {
            found = 1;
            break;
        }
    }

    if (!found) {
        return ngx_http_llm_bad(ck, "invalid_value",
                                "tool_choice.function.name",
                                "Invalid value for 'tool_choice': no "
                                "function named '%s' was specified in the "
                                "'tools' parameter.", name);
    }

    return NGX_OK;
}


static ngx_int_t
ngx_http_llm_parse_stop(ngx_http_llm_check_t *ck, Llm__Sampling *s,
    json_t *stop)
{
    u_char      param[32];
    json_t     *e;
    ngx_uint_t  i, n;

    if (stop == NULL || json_is_null(stop)) {
        return NGX_OK;
    }

    if (json_is_string(stop)) {
        s->stop = ngx_palloc(ck->request->pool, sizeof(char *));
        if (s->stop == NULL) {
            return NGX_ERROR;
        }

        s->stop[0] = (char *) json_string_value(stop);
        s->n_stop = 1;
        return NGX_OK;
    }

    if (!json_is_array(stop)) {
        return ngx_http_llm_bad(ck, "invalid_type", "stop",
                                "Invalid type for 'stop': expected a string "
                                "or an array of strings, but got %s "
                                "instead.", ngx_http_llm_json_type_name(stop));
    }

    n = json_array_size(stop);

    if (n > NGX_HTTP_LLM_API_MAX_STOP) {
        return ngx_http_llm_bad(ck, "array_above_max_length", "stop",
                                "Invalid 'stop': array too long. Expected an "
                                "array with maximum length %ui, but got an "
                                "array with length %ui instead.",
                                (ngx_uint_t) NGX_HTTP_LLM_API_MAX_STOP, n);
    }

    s->stop = ngx_palloc(ck->request->pool, (n + 1) * sizeof(char *));
    if (s->stop == NULL) {
        return NGX_ERROR;
    }

    for (i = 0; i < n; i++) {
        e = json_array_get(stop, i);

        if (!json_is_string(e)) {
            ngx_sprintf(param, "stop[%ui]%Z", i);
            return ngx_http_llm_bad_type(ck, (char *) param, "a string", e);
        }

        s->stop[i] = (char *) json_string_value(e);
    }

    s->n_stop = n;

    return NGX_OK;
}


static ngx_int_t
ngx_http_llm_parse_logit_bias(ngx_http_llm_check_t *ck, Llm__Sampling *s,
    json_t *bias)
{
    u_char                           *end;
    json_t                           *v;
    double                            d;
    ngx_int_t                         id;
    ngx_uint_t                        n;
    const char                       *key;
    Llm__Sampling__LogitBiasEntry    *e;

    if (bias == NULL || json_is_null(bias)) {
        return NGX_OK;
    }

    if (!json_is_object(bias)) {
        return ngx_http_llm_bad_type(ck, "logit_bias", "an object", bias);
    }

    n = json_object_size(bias);
    if (n == 0) {
        return NGX_OK;
    }

    s->logit_bias = ngx_palloc(ck->request->pool,
                               n * sizeof(Llm__Sampling__LogitBiasEntry *));
    e = ngx_palloc(ck->request->pool,
                   n * sizeof(Llm__Sampling__LogitBiasEntry));
    if (s->logit_bias == NULL || e == NULL) {
        return NGX_ERROR;
    }

    json_object_foreach(bias, key, v) {
        end = (u_char *) key + ngx_strlen(key);
        id = ngx_atoi((u_char *) key, end - (u_char *) key);

        if (id == NGX_ERROR || id > 0x7fffffff) {
            return ngx_http_llm_bad(ck, "invalid_value", "logit_bias",
                                    "Invalid key in 'logit_bias': '%s' is "
                                    "not a token id.", key);
        }

        if (!json_is_number(v)) {
            return ngx_http_llm_bad(ck, "invalid_type", "logit_bias",
                                    "Invalid value in 'logit_bias' for token "
                                    "%s: expected a number.", key);
        }

        d = json_number_value(v);

        if (d < -100 || d > 100) {
            return ngx_http_llm_bad(ck, "invalid_value", "logit_bias",
                                    "Invalid value in 'logit_bias' for token "
                                    "%s: expected a value between -100 and "
                                    "100.", key);
        }

        llm__sampling__logit_bias_entry__init(e);
        e->key = (int32_t) id;
        e->value = (float) d;
        s->logit_bias[s->n_logit_bias++] = e++;
    }

    return NGX_OK;
}


static char *
ngx_http_llm_pstrdup(ngx_pool_t *pool, const char *s, size_t len)
{
    char  *p;

    p = ngx_pnalloc(pool, len + 1);
    if (p == NULL) {
        return NULL;
    }

    ngx_memcpy(p, s, len);
    p[len] = '\0';

    return p;
}


static char *
ngx_http_llm_dump(ngx_pool_t *pool, json_t *j)
{
    char  *s, *p;

    s = json_dumps(j, JSON_COMPACT);
    if (s == NULL) {
        return NULL;
    }

    p = ngx_http_llm_pstrdup(pool, s, ngx_strlen(s));
    free(s);

    return p;
}


/*
 * Checks the request against the limits its model's engines reported in
 * Info (ngx_http_llm_engine_limits), with the engine's own messages, so
 * the refusal is the same as the engine's, without a trip to it.
 * NGX_OK (also when no engine told its limits yet); NGX_DECLINED with
 * err filled (400); NGX_ERROR on no memory.
 */

ngx_int_t
ngx_http_llm_check_limits(ngx_http_request_t *r, ngx_http_llm_ctx_t *ctx,
    ngx_http_llm_error_t *err)
{
    size_t                         len;
    ngx_uint_t                     i;
    Llm__Sampling                 *s;
    ngx_http_llm_check_t           ck;
    ngx_http_llm_engine_limits_t   lim;

    if (ngx_http_llm_engine_limits(r, ctx, &lim) != NGX_OK) {
        return NGX_OK;
    }

    ngx_memzero(&ck, sizeof(ngx_http_llm_check_t));
    ck.request = r;
    ck.err = err;
    ck.ctx = ctx;

    s = ctx->gen->sampling;

    if (ctx->n > lim.max_choices && ctx->gen->n_prompts > 1) {
        return ngx_http_llm_bad(&ck, "invalid_value", "n",
                                "n times the number of prompts must be at "
                                "most %ui, got %uD x %uz", lim.max_choices,
                                s->n, ctx->gen->n_prompts);
    }

    if (ctx->n > lim.max_choices) {
        return ngx_http_llm_bad(&ck, "invalid_value", "n",
                                "n must be between 1 and %ui, got %ui",
                                lim.max_choices, ctx->n);
    }

    if (s->top_logprobs > lim.max_top_logprobs) {
        return ngx_http_llm_bad(&ck, "invalid_value", "top_logprobs",
                                "top_logprobs must be <= %ui, got %uD",
                                lim.max_top_logprobs, s->top_logprobs);
    }

    if (s->n_stop > lim.max_stop) {
        return ngx_http_llm_bad(&ck, "invalid_value", "stop",
                                "at most %ui stop strings, got %uz",
                                lim.max_stop, s->n_stop);
    }

    for (i = 0; lim.max_stop_bytes && i < s->n_stop; i++) {
        len = ngx_strlen(s->stop[i]);

        if (len > lim.max_stop_bytes) {
            return ngx_http_llm_bad(&ck, "invalid_value", "stop",
                                    "stop strings must be at most %ui "
                                    "bytes, got %uz", lim.max_stop_bytes,
                                    len);
        }
    }

    return NGX_OK;
}


/*
 * Encodes the request for the model now answering as one frame in a new
 * chain.
 */

ngx_int_t
ngx_http_llm_encode(ngx_http_request_t *r, ngx_http_llm_ctx_t *ctx,
    ngx_chain_t **out)
{
    size_t        len;
    ngx_buf_t    *b;
    ngx_chain_t  *cl;
    Llm__Request  req = LLM__REQUEST__INIT;

    if (ctx->emb) {
        return ngx_http_llm_embed_encode(r, ctx, out);
    }

    if (ctx->model) {
        /*
         * The model table already chose this engine: its configured name
         * need not be the engine's own, and an empty name is "whatever
         * you serve".  Without a table the client's name goes through.
         */
        ctx->gen->model = "";
    }

    req.kind_case = LLM__REQUEST__KIND_GENERATE;
    req.generate = ctx->gen;
    req.auth = ((ngx_http_llm_main_conf_t *)
                ngx_http_get_module_main_conf(r, ngx_http_llm_module))
               ->engine_auth;

    len = llm__request__get_packed_size(&req);

    b = ngx_create_temp_buf(r->pool, len + 4);
    if (b == NULL) {
        return NGX_ERROR;
    }

    b->last[0] = (u_char) (len >> 24);
    b->last[1] = (u_char) (len >> 16);
    b->last[2] = (u_char) (len >> 8);
    b->last[3] = (u_char) len;

    b->last += 4;
    b->last += llm__request__pack(&req, b->last);

    cl = ngx_alloc_chain_link(r->pool);
    if (cl == NULL) {
        return NGX_ERROR;
    }

    cl->buf = b;
    cl->next = NULL;
    *out = cl;

    return NGX_OK;
}
