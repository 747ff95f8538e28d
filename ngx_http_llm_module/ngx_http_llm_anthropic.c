
/*
 * ngx_http_llm_module: Anthropic's Messages API as a dialect over the chat
 * route (docs/GATEWAY.md, "/v1/messages").  POST /v1/messages becomes the
 * chat request the engine knows (system, messages with text, tool_use and
 * tool_result blocks, tools with input_schema, tool_choice, stop_sequences,
 * thinking), validated by ngx_http_llm_parse_json(); the answer is a
 * Message (thinking, text and tool_use blocks) or, streamed, Anthropic's
 * event sequence; every error is {"type":"error","error":{...}}.
 * POST /v1/messages/count_tokens is the same request counted by the
 * engine (GenerateRequest.count_only) and answered {"input_tokens":N}.
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "ngx_http_llm_module.h"


#define NGX_HTTP_LLM_ANTH_NONE      0
#define NGX_HTTP_LLM_ANTH_TEXT      1
#define NGX_HTTP_LLM_ANTH_THINKING  2
#define NGX_HTTP_LLM_ANTH_TOOL      3


typedef struct {
    ngx_uint_t                   block;     /* NGX_HTTP_LLM_ANTH_*: open */
    ngx_uint_t                   index;     /* the open block's index */
    ngx_uint_t                   nblocks;   /* blocks started */
    uint32_t                     call;      /* the open tool block's call */
    unsigned                     count_only:1;
    unsigned                     started:1;  /* message_start sent */
} ngx_http_llm_anth_t;


/* A request being translated: the 400s name Anthropic's field paths. */
typedef struct {
    ngx_http_request_t          *request;
    ngx_http_llm_error_t        *err;
    json_t                      *chat;      /* the chat request made */
    json_t                      *msgs;      /* its messages */
} ngx_http_llm_anth_req_t;


static ngx_int_t ngx_http_llm_anth_parse(ngx_http_request_t *r,
    ngx_http_llm_ctx_t *ctx, u_char *body, size_t len,
    ngx_http_llm_error_t *err);
static ngx_int_t ngx_http_llm_anth_parse_count(ngx_http_request_t *r,
    ngx_http_llm_ctx_t *ctx, u_char *body, size_t len,
    ngx_http_llm_error_t *err);
static ngx_int_t ngx_http_llm_anth_translate(ngx_http_request_t *r,
    ngx_http_llm_ctx_t *ctx, u_char *body, size_t len,
    ngx_http_llm_error_t *err, ngx_uint_t count_only);
static ngx_int_t ngx_http_llm_anth_bad(ngx_http_llm_anth_req_t *q,
    const char *fmt, ...);
static ngx_int_t ngx_http_llm_anth_scalars(ngx_http_llm_anth_req_t *q,
    json_t *root, ngx_uint_t count_only);
static ngx_int_t ngx_http_llm_anth_system(ngx_http_llm_anth_req_t *q,
    json_t *sys);
static ngx_int_t ngx_http_llm_anth_texts(ngx_http_llm_anth_req_t *q,
    json_t *content, const char *path, ngx_http_llm_sbuf_t *text);
static ngx_int_t ngx_http_llm_anth_messages(ngx_http_llm_anth_req_t *q,
    json_t *msgs);
static ngx_int_t ngx_http_llm_anth_message(ngx_http_llm_anth_req_t *q,
    json_t *m, ngx_uint_t i);
static ngx_int_t ngx_http_llm_anth_block(ngx_http_llm_anth_req_t *q,
    json_t *b, ngx_uint_t i, ngx_uint_t k, ngx_uint_t user,
    ngx_http_llm_sbuf_t *text, json_t *calls);
static ngx_int_t ngx_http_llm_anth_tool_result(ngx_http_llm_anth_req_t *q,
    json_t *b, ngx_uint_t i, ngx_uint_t k);
static ngx_int_t ngx_http_llm_anth_tools(ngx_http_llm_anth_req_t *q,
    json_t *tools);
static ngx_int_t ngx_http_llm_anth_tool_choice(ngx_http_llm_anth_req_t *q,
    json_t *tc);
static ngx_int_t ngx_http_llm_anth_thinking(ngx_http_llm_anth_req_t *q,
    json_t *th);

static ngx_int_t ngx_http_llm_anth_body(ngx_http_request_t *r,
    ngx_http_llm_ctx_t *ctx, ngx_str_t *body);
static ngx_int_t ngx_http_llm_anth_sse(ngx_http_request_t *r,
    ngx_http_llm_ctx_t *ctx, Llm__Event *ev, ngx_chain_t ***ll);
static u_char *ngx_http_llm_anth_error_json(ngx_pool_t *pool,
    ngx_http_llm_error_t *err, size_t *len);


ngx_http_llm_dialect_t  ngx_http_llm_anthropic_dialect = {
    "anthropic",
    "msg_",
    ngx_http_llm_anth_parse,
    ngx_http_llm_anth_body,
    ngx_http_llm_anth_sse,
    ngx_http_llm_anth_error_json
};


ngx_http_llm_dialect_t  ngx_http_llm_anthropic_count_dialect = {
    "anthropic count_tokens",
    "msg_",
    ngx_http_llm_anth_parse_count,
    ngx_http_llm_anth_body,
    ngx_http_llm_anth_sse,
    ngx_http_llm_anth_error_json
};


/* Text into an sbuf: literal bytes, a JSON string, a number. */

#define ngx_http_llm_anth_lit(pool, sb, s)                                    \
    ngx_http_llm_sbuf_add(pool, sb, (u_char *) s, sizeof(s) - 1)


static ngx_int_t
ngx_http_llm_anth_str(ngx_pool_t *pool, ngx_http_llm_sbuf_t *sb,
    const u_char *s, size_t len)
{
    u_char  *p;
    size_t   n;

    n = ngx_http_llm_json_escape_len(s, len) + 2;

    if (sb->len + n + 1 > sb->cap) {
        p = ngx_pnalloc(pool, ngx_max(sb->cap * 2, sb->len + n + 256));
        if (p == NULL) {
            return NGX_ERROR;
        }

        if (sb->len) {
            ngx_memcpy(p, sb->data, sb->len);
        }

        sb->cap = ngx_max(sb->cap * 2, sb->len + n + 256);
        sb->data = p;
    }

    p = sb->data + sb->len;
    *p++ = '"';
    p = ngx_http_llm_json_escape(p, s, len);
    *p++ = '"';
    *p = '\0';

    sb->len = p - sb->data;

    return NGX_OK;
}


static ngx_int_t
ngx_http_llm_anth_num(ngx_pool_t *pool, ngx_http_llm_sbuf_t *sb,
    ngx_uint_t n)
{
    u_char  buf[NGX_INT_T_LEN];

    return ngx_http_llm_sbuf_add(pool, sb, buf, ngx_sprintf(buf, "%ui", n)
                                                - buf);
}


/* The request. */

static ngx_int_t
ngx_http_llm_anth_parse(ngx_http_request_t *r, ngx_http_llm_ctx_t *ctx,
    u_char *body, size_t len, ngx_http_llm_error_t *err)
{
    return ngx_http_llm_anth_translate(r, ctx, body, len, err, 0);
}


static ngx_int_t
ngx_http_llm_anth_parse_count(ngx_http_request_t *r, ngx_http_llm_ctx_t *ctx,
    u_char *body, size_t len, ngx_http_llm_error_t *err)
{
    return ngx_http_llm_anth_translate(r, ctx, body, len, err, 1);
}


static void
ngx_http_llm_anth_cleanup(void *data)
{
    json_decref(data);
}


/*
 * The Messages request in body as the chat request, validated by
 * ngx_http_llm_parse_json() into ctx; count_only: a count_tokens request
 * (no max_tokens, nothing generated).  Returns as the dialect's parse.
 */

static ngx_int_t
ngx_http_llm_anth_translate(ngx_http_request_t *r, ngx_http_llm_ctx_t *ctx,
    u_char *body, size_t len, ngx_http_llm_error_t *err,
    ngx_uint_t count_only)
{
    json_t                   *root, *j;
    ngx_int_t                 rc;
    ngx_pool_cleanup_t       *cln;
    ngx_http_llm_anth_t      *st;
    ngx_http_llm_anth_req_t   q;

    st = ngx_pcalloc(r->pool, sizeof(ngx_http_llm_anth_t));
    if (st == NULL) {
        return NGX_ERROR;
    }

    st->count_only = count_only;
    ctx->dialect_ctx = st;

    root = ngx_http_llm_load_json(r, body, len, err);
    if (root == NULL) {
        return err->status ? NGX_DECLINED : NGX_ERROR;
    }

    cln = ngx_pool_cleanup_add(r->pool, 0);
    if (cln == NULL) {
        return NGX_ERROR;
    }

    q.request = r;
    q.err = err;
    q.chat = json_object();
    q.msgs = json_array();

    if (q.chat == NULL || q.msgs == NULL
        || json_object_set_new(q.chat, "messages", q.msgs) != 0)
    {
        json_decref(q.chat);
        return NGX_ERROR;
    }

    cln->handler = ngx_http_llm_anth_cleanup;
    cln->data = q.chat;

    if (!json_is_object(root)) {
        return ngx_http_llm_anth_bad(&q, "The request body must be a JSON "
                                     "object.");
    }

    rc = ngx_http_llm_anth_scalars(&q, root, count_only);
    if (rc != NGX_OK) {
        return rc;
    }

    j = json_object_get(root, "system");
    if (j && !json_is_null(j)) {
        rc = ngx_http_llm_anth_system(&q, j);
        if (rc != NGX_OK) {
            return rc;
        }
    }

    rc = ngx_http_llm_anth_messages(&q, json_object_get(root, "messages"));
    if (rc != NGX_OK) {
        return rc;
    }

    j = json_object_get(root, "tools");
    if (j && !json_is_null(j)) {
        rc = ngx_http_llm_anth_tools(&q, j);
        if (rc != NGX_OK) {
            return rc;
        }
    }

    j = json_object_get(root, "tool_choice");
    if (j && !json_is_null(j)) {
        rc = ngx_http_llm_anth_tool_choice(&q, j);
        if (rc != NGX_OK) {
            return rc;
        }
    }

    j = json_object_get(root, "thinking");
    if (j && !json_is_null(j)) {
        rc = ngx_http_llm_anth_thinking(&q, j);
        if (rc != NGX_OK) {
            return rc;
        }
    }

    rc = ngx_http_llm_parse_json(r, ctx, q.chat, len, err);
    if (rc != NGX_OK) {
        return rc;
    }

    if (count_only) {
        ctx->gen->count_only = 1;
    }

    return NGX_OK;
}


/* A 400 invalid_request_error with the formatted message. */

static ngx_int_t
ngx_http_llm_anth_bad(ngx_http_llm_anth_req_t *q, const char *fmt, ...)
{
    u_char   *p, buf[1024];
    va_list   args;

    va_start(args, fmt);
    p = ngx_vslprintf(buf, buf + sizeof(buf), fmt, args);
    va_end(args);

    q->err->status = NGX_HTTP_BAD_REQUEST;
    q->err->type = "invalid_request_error";
    q->err->code = NULL;
    q->err->param = NULL;

    q->err->message.data = ngx_pnalloc(q->request->pool, p - buf);
    if (q->err->message.data == NULL) {
        return NGX_ERROR;
    }

    q->err->message.len = p - buf;
    ngx_memcpy(q->err->message.data, buf, p - buf);

    return NGX_DECLINED;
}


/*
 * model, max_tokens (required but for count_tokens), stream,
 * stop_sequences, temperature (0..1), top_p, top_k, metadata.user_id:
 * checked for their Anthropic types and copied under the chat names.
 */

static ngx_int_t
ngx_http_llm_anth_scalars(ngx_http_llm_anth_req_t *q, json_t *root,
    ngx_uint_t count_only)
{
    json_t      *j, *v;
    size_t       i;
    const char  *name;

    static const char  *copy[] = { "model", "stream", "top_p", "top_k",
                                   NULL };

    for (i = 0; copy[i]; i++) {
        j = json_object_get(root, copy[i]);
        if (j && json_object_set(q->chat, copy[i], j) != 0) {
            return NGX_ERROR;
        }
    }

    j = json_object_get(root, "model");
    if (j == NULL) {
        return ngx_http_llm_anth_bad(q, "model: Field required");
    }

    j = json_object_get(root, "max_tokens");

    if (j == NULL || json_is_null(j)) {
        if (!count_only) {
            return ngx_http_llm_anth_bad(q, "max_tokens: Field required");
        }

    } else if (!json_is_integer(j) || json_integer_value(j) < 1) {
        return ngx_http_llm_anth_bad(q, "max_tokens: Input should be an "
                                     "integer greater than or equal to 1");

    } else if (!count_only && json_object_set(q->chat, "max_tokens", j) != 0) {
        return NGX_ERROR;
    }

    if (count_only && json_object_get(root, "stream")) {
        (void) json_object_del(q->chat, "stream");
    }

    j = json_object_get(root, "temperature");
    if (j && !json_is_null(j)) {
        if (!json_is_number(j) || json_number_value(j) < 0
            || json_number_value(j) > 1)
        {
            return ngx_http_llm_anth_bad(q, "temperature: Input should be a "
                                         "number between 0 and 1");
        }

        if (json_object_set(q->chat, "temperature", j) != 0) {
            return NGX_ERROR;
        }
    }

    j = json_object_get(root, "stop_sequences");
    if (j && !json_is_null(j)) {
        if (!json_is_array(j)) {
            return ngx_http_llm_anth_bad(q, "stop_sequences: Input should "
                                         "be a valid list");
        }

        json_array_foreach(j, i, v) {
            if (!json_is_string(v)) {
                return ngx_http_llm_anth_bad(q, "stop_sequences.%uz: Input "
                                             "should be a valid string", i);
            }
        }

        if (json_array_size(j) && json_object_set(q->chat, "stop", j) != 0) {
            return NGX_ERROR;
        }
    }

    j = json_object_get(root, "metadata");
    if (j && !json_is_null(j)) {
        v = json_is_object(j) ? json_object_get(j, "user_id") : NULL;

        if (!json_is_object(j) || (v && !json_is_null(v)
                                   && !json_is_string(v)))
        {
            return ngx_http_llm_anth_bad(q, "metadata: Input should be an "
                                         "object with a string user_id");
        }

        if (v && json_is_string(v)
            && json_object_set(q->chat, "user", v) != 0)
        {
            return NGX_ERROR;
        }
    }

    name = NULL;

    if (json_object_get(root, "mcp_servers")) {
        name = "mcp_servers";

    } else if (json_object_get(root, "container")) {
        name = "container";
    }

    if (name) {
        return ngx_http_llm_anth_bad(q, "%s: this server runs no server "
                                     "tools; remove the field", name);
    }

    return NGX_OK;
}


/*
 * The text of content: a string, or a list of text blocks (their texts
 * joined by "\n"), appended to text.  Other blocks are a 400 naming path.
 */

static ngx_int_t
ngx_http_llm_anth_texts(ngx_http_llm_anth_req_t *q, json_t *content,
    const char *path, ngx_http_llm_sbuf_t *text)
{
    size_t       i;
    json_t      *b, *t;
    const char  *type;

    if (json_is_string(content)) {
        return ngx_http_llm_sbuf_add(q->request->pool, text,
                                     (u_char *) json_string_value(content),
                                     json_string_length(content));
    }

    if (!json_is_array(content)) {
        return ngx_http_llm_anth_bad(q, "%s: Input should be a valid string "
                                     "or a list of text blocks", path);
    }

    json_array_foreach(content, i, b) {
        t = json_object_get(b, "type");
        type = json_is_string(t) ? json_string_value(t) : "";

        if (ngx_strcmp(type, "text") != 0) {
            return ngx_http_llm_anth_bad(q, "%s.%uz.type: only text blocks "
                                         "are supported here, got '%s'",
                                         path, i, type);
        }

        t = json_object_get(b, "text");
        if (!json_is_string(t)) {
            return ngx_http_llm_anth_bad(q, "%s.%uz.text: Field required",
                                         path, i);
        }

        if ((text->len
             && ngx_http_llm_anth_lit(q->request->pool, text, "\n")
                != NGX_OK)
            || ngx_http_llm_sbuf_add(q->request->pool, text,
                                     (u_char *) json_string_value(t),
                                     json_string_length(t))
               != NGX_OK)
        {
            return NGX_ERROR;
        }
    }

    return NGX_OK;
}


/* Appends {"role":role,"content":text} to the chat messages. */

static ngx_int_t
ngx_http_llm_anth_push(ngx_http_llm_anth_req_t *q, const char *role,
    ngx_http_llm_sbuf_t *text, json_t *calls)
{
    json_t  *m, *c;

    if (text->len) {
        c = json_stringn((const char *) text->data, text->len);

    } else {
        c = calls ? json_null() : json_string("");
    }

    m = json_pack("{s:s,s:o}", "role", role, "content", c);
    if (m == NULL) {
        return NGX_ERROR;
    }

    if (calls && json_array_size(calls)
        && json_object_set(m, "tool_calls", calls) != 0)
    {
        json_decref(m);
        return NGX_ERROR;
    }

    return json_array_append_new(q->msgs, m) == 0 ? NGX_OK : NGX_ERROR;
}


static ngx_int_t
ngx_http_llm_anth_system(ngx_http_llm_anth_req_t *q, json_t *sys)
{
    ngx_int_t            rc;
    ngx_http_llm_sbuf_t  text;

    ngx_memzero(&text, sizeof(ngx_http_llm_sbuf_t));

    rc = ngx_http_llm_anth_texts(q, sys, "system", &text);
    if (rc != NGX_OK) {
        return rc;
    }

    return ngx_http_llm_anth_push(q, "system", &text, NULL);
}


static ngx_int_t
ngx_http_llm_anth_messages(ngx_http_llm_anth_req_t *q, json_t *msgs)
{
    size_t     i;
    json_t    *m;
    ngx_int_t  rc;

    if (msgs == NULL) {
        return ngx_http_llm_anth_bad(q, "messages: Field required");
    }

    if (!json_is_array(msgs) || json_array_size(msgs) == 0) {
        return ngx_http_llm_anth_bad(q, "messages: Input should be a "
                                     "non-empty list");
    }

    json_array_foreach(msgs, i, m) {
        rc = ngx_http_llm_anth_message(q, m, i);
        if (rc != NGX_OK) {
            return rc;
        }
    }

    return NGX_OK;
}


/*
 * One message: a user's text and tool_result blocks (each result a chat
 * tool message, before the user's text), an assistant's text and
 * tool_use blocks (one assistant message with tool_calls); thinking
 * blocks of earlier turns are dropped.
 */

static ngx_int_t
ngx_http_llm_anth_message(ngx_http_llm_anth_req_t *q, json_t *m,
    ngx_uint_t i)
{
    size_t               k;
    json_t              *j, *c, *b, *calls;
    ngx_int_t            rc;
    ngx_uint_t           user;
    const char          *role;
    ngx_http_llm_sbuf_t  text;

    ngx_memzero(&text, sizeof(ngx_http_llm_sbuf_t));

    j = json_is_object(m) ? json_object_get(m, "role") : NULL;
    role = json_is_string(j) ? json_string_value(j) : "";

    if (ngx_strcmp(role, "user") == 0) {
        user = 1;

    } else if (ngx_strcmp(role, "assistant") == 0) {
        user = 0;

    } else {
        return ngx_http_llm_anth_bad(q, "messages.%ui.role: Input should be "
                                     "'user' or 'assistant'", i);
    }

    c = json_object_get(m, "content");

    if (json_is_string(c)) {
        rc = ngx_http_llm_anth_texts(q, c, "", &text);
        if (rc != NGX_OK) {
            return rc;
        }

        return ngx_http_llm_anth_push(q, role, &text, NULL);
    }

    if (!json_is_array(c)) {
        return ngx_http_llm_anth_bad(q, "messages.%ui.content: Input should "
                                     "be a valid string or a list of "
                                     "content blocks", i);
    }

    calls = json_array();
    if (calls == NULL) {
        return NGX_ERROR;
    }

    rc = NGX_OK;

    json_array_foreach(c, k, b) {
        rc = ngx_http_llm_anth_block(q, b, i, k, user, &text, calls);
        if (rc != NGX_OK) {
            break;
        }
    }

    if (rc == NGX_OK && (text.len || json_array_size(calls)
                         || json_array_size(c) == 0))
    {
        rc = ngx_http_llm_anth_push(q, role, &text, calls);
    }

    json_decref(calls);

    return rc;
}


/* Content block k of message i into text, calls or a tool message. */

static ngx_int_t
ngx_http_llm_anth_block(ngx_http_llm_anth_req_t *q, json_t *b, ngx_uint_t i,
    ngx_uint_t k, ngx_uint_t user, ngx_http_llm_sbuf_t *text, json_t *calls)
{
    char        *args;
    json_t      *t, *id, *name, *input, *call;
    const char  *type;

    t = json_is_object(b) ? json_object_get(b, "type") : NULL;
    type = json_is_string(t) ? json_string_value(t) : "";

    if (ngx_strcmp(type, "text") == 0) {
        t = json_object_get(b, "text");
        if (!json_is_string(t)) {
            return ngx_http_llm_anth_bad(q, "messages.%ui.content.%ui.text: "
                                         "Field required", i, k);
        }

        if (text->len
            && ngx_http_llm_anth_lit(q->request->pool, text, "\n") != NGX_OK)
        {
            return NGX_ERROR;
        }

        return ngx_http_llm_sbuf_add(q->request->pool, text,
                                     (u_char *) json_string_value(t),
                                     json_string_length(t));
    }

    if (ngx_strcmp(type, "thinking") == 0
        || ngx_strcmp(type, "redacted_thinking") == 0)
    {
        return NGX_OK;
    }

    if (user && ngx_strcmp(type, "tool_result") == 0) {
        return ngx_http_llm_anth_tool_result(q, b, i, k);
    }

    if (user || ngx_strcmp(type, "tool_use") != 0) {
        return ngx_http_llm_anth_bad(q, "messages.%ui.content.%ui.type: "
                                     "content blocks of type '%s' are not "
                                     "supported by this server in a%s "
                                     "message (text%s only)", i, k, type,
                                     user ? " user" : "n assistant",
                                     user ? ", tool_result"
                                          : ", tool_use, thinking");
    }

    id = json_object_get(b, "id");
    name = json_object_get(b, "name");
    input = json_object_get(b, "input");

    if (!json_is_string(id) || !json_is_string(name)
        || !json_is_object(input))
    {
        return ngx_http_llm_anth_bad(q, "messages.%ui.content.%ui: a "
                                     "tool_use block needs an id, a name "
                                     "and an input object", i, k);
    }

    args = json_dumps(input, JSON_COMPACT);
    if (args == NULL) {
        return NGX_ERROR;
    }

    call = json_pack("{s:O,s:s,s:{s:O,s:s}}", "id", id, "type", "function",
                     "function", "name", name, "arguments", args);
    free(args);

    if (call == NULL) {
        return NGX_ERROR;
    }

    return json_array_append_new(calls, call) == 0 ? NGX_OK : NGX_ERROR;
}


/*
 * A tool_result: a chat tool message for its tool_use_id; its content a
 * string or text blocks; is_error marks the text so the model sees it.
 */

static ngx_int_t
ngx_http_llm_anth_tool_result(ngx_http_llm_anth_req_t *q, json_t *b,
    ngx_uint_t i, ngx_uint_t k)
{
    u_char               path[64];
    json_t              *id, *c, *m;
    ngx_int_t            rc;
    ngx_http_llm_sbuf_t  text;

    ngx_memzero(&text, sizeof(ngx_http_llm_sbuf_t));

    id = json_object_get(b, "tool_use_id");
    if (!json_is_string(id)) {
        return ngx_http_llm_anth_bad(q, "messages.%ui.content.%ui."
                                     "tool_use_id: Field required", i, k);
    }

    if (json_is_true(json_object_get(b, "is_error"))
        && ngx_http_llm_anth_lit(q->request->pool, &text, "Error: ")
           != NGX_OK)
    {
        return NGX_ERROR;
    }

    c = json_object_get(b, "content");

    if (c && !json_is_null(c)) {
        ngx_sprintf(path, "messages.%ui.content.%ui.content%Z", i, k);

        rc = ngx_http_llm_anth_texts(q, c, (char *) path, &text);
        if (rc != NGX_OK) {
            return rc;
        }
    }

    m = json_pack("{s:s,s:O,s:s%}", "role", "tool", "tool_call_id", id,
                  "content", text.len ? (char *) text.data : "",
                  (size_t) text.len);
    if (m == NULL) {
        return NGX_ERROR;
    }

    return json_array_append_new(q->msgs, m) == 0 ? NGX_OK : NGX_ERROR;
}


/* Custom tools as function tools; server tools (a type) are refused. */

static ngx_int_t
ngx_http_llm_anth_tools(ngx_http_llm_anth_req_t *q, json_t *tools)
{
    size_t   i;
    json_t  *t, *out, *f, *name, *desc, *schema, *type;

    if (!json_is_array(tools)) {
        return ngx_http_llm_anth_bad(q, "tools: Input should be a valid "
                                     "list");
    }

    out = json_array();
    if (out == NULL || json_object_set_new(q->chat, "tools", out) != 0) {
        return NGX_ERROR;
    }

    json_array_foreach(tools, i, t) {
        type = json_object_get(t, "type");

        if (type && !json_is_null(type)
            && !(json_is_string(type)
                 && ngx_strcmp(json_string_value(type), "custom") == 0))
        {
            return ngx_http_llm_anth_bad(q, "tools.%uz.type: server tools "
                                         "('%s') are not supported by this "
                                         "server; give custom tools (name, "
                                         "description, input_schema)", i,
                                         json_is_string(type)
                                         ? json_string_value(type) : "?");
        }

        name = json_object_get(t, "name");
        desc = json_object_get(t, "description");
        schema = json_object_get(t, "input_schema");

        if (!json_is_string(name)) {
            return ngx_http_llm_anth_bad(q, "tools.%uz.name: Field required",
                                         i);
        }

        if (!json_is_object(schema)) {
            return ngx_http_llm_anth_bad(q, "tools.%uz.input_schema: Field "
                                         "required (an object)", i);
        }

        f = json_pack("{s:O,s:O}", "name", name, "parameters", schema);

        if (f && json_is_string(desc)) {
            json_object_set(f, "description", desc);
        }

        if (f == NULL
            || json_array_append_new(out, json_pack("{s:s,s:o}", "type",
                                                    "function", "function",
                                                    f))
               != 0)
        {
            return NGX_ERROR;
        }
    }

    return NGX_OK;
}


/*
 * auto, any (required), tool {name} (the named function), none;
 * disable_parallel_tool_use: parallel_tool_calls false.
 */

static ngx_int_t
ngx_http_llm_anth_tool_choice(ngx_http_llm_anth_req_t *q, json_t *tc)
{
    json_t      *t, *name, *choice;
    const char  *type;

    t = json_is_object(tc) ? json_object_get(tc, "type") : NULL;
    type = json_is_string(t) ? json_string_value(t) : "";

    if (ngx_strcmp(type, "auto") == 0) {
        choice = json_string("auto");

    } else if (ngx_strcmp(type, "any") == 0) {
        choice = json_string("required");

    } else if (ngx_strcmp(type, "none") == 0) {
        choice = json_string("none");

    } else if (ngx_strcmp(type, "tool") == 0) {
        name = json_object_get(tc, "name");
        if (!json_is_string(name)) {
            return ngx_http_llm_anth_bad(q, "tool_choice.name: Field "
                                         "required");
        }

        choice = json_pack("{s:s,s:{s:O}}", "type", "function", "function",
                           "name", name);

    } else {
        return ngx_http_llm_anth_bad(q, "tool_choice.type: Input should be "
                                     "'auto', 'any', 'tool' or 'none'");
    }

    if (choice == NULL
        || json_object_set_new(q->chat, "tool_choice", choice) != 0)
    {
        return NGX_ERROR;
    }

    if (json_is_true(json_object_get(tc, "disable_parallel_tool_use"))
        && json_object_set_new(q->chat, "parallel_tool_calls", json_false())
           != 0)
    {
        return NGX_ERROR;
    }

    return NGX_OK;
}


/*
 * thinking {type: enabled, budget_tokens >= 1} or {type: disabled}: the
 * chat template's enable_thinking (Qwen3 and the templates that read
 * it); the budget is checked, not enforced: max_tokens caps the whole
 * answer (docs/GATEWAY.md).
 */

static ngx_int_t
ngx_http_llm_anth_thinking(ngx_http_llm_anth_req_t *q, json_t *th)
{
    json_t      *t, *b;
    ngx_uint_t   on;
    const char  *type;

    t = json_is_object(th) ? json_object_get(th, "type") : NULL;
    type = json_is_string(t) ? json_string_value(t) : "";

    if (ngx_strcmp(type, "enabled") == 0) {
        b = json_object_get(th, "budget_tokens");
        if (!json_is_integer(b) || json_integer_value(b) < 1) {
            return ngx_http_llm_anth_bad(q, "thinking.budget_tokens: Input "
                                         "should be an integer greater "
                                         "than or equal to 1");
        }

        on = 1;

    } else if (ngx_strcmp(type, "disabled") == 0) {
        on = 0;

    } else {
        return ngx_http_llm_anth_bad(q, "thinking.type: Input should be "
                                     "'enabled' or 'disabled'");
    }

    return json_object_set_new(q->chat, "chat_template_kwargs",
                               json_pack("{s:b}", "enable_thinking", on))
           == 0 ? NGX_OK : NGX_ERROR;
}


/* The answer. */

static const char *
ngx_http_llm_anth_stop_reason(ngx_http_llm_choice_t *ch)
{
    switch (ch->finish) {
    case LLM__FINISH_REASON__FINISH_LENGTH:
        return "max_tokens";
    case LLM__FINISH_REASON__FINISH_TOOL_CALLS:
        return "tool_use";
    case LLM__FINISH_REASON__FINISH_CONTENT_FILTER:
        return "refusal";
    default:
        return ch->stop_sequence.len ? "stop_sequence" : "end_turn";
    }
}


/* "toolu_" and the engine's call id (without its "call_"). */

static ngx_int_t
ngx_http_llm_anth_tool_id(ngx_pool_t *pool, ngx_http_llm_sbuf_t *sb,
    u_char *id, size_t len)
{
    u_char  *p, buf[128];

    if (len >= 5 && ngx_strncmp(id, "call_", 5) == 0) {
        id += 5;
        len -= 5;
    }

    p = ngx_cpymem(buf, "toolu_", 6);
    p = ngx_cpymem(p, id, ngx_min(len, sizeof(buf) - 6));

    return ngx_http_llm_anth_str(pool, sb, buf, p - buf);
}


/* The usage object: input_tokens without the cache reads, as Anthropic. */

static ngx_int_t
ngx_http_llm_anth_usage(ngx_pool_t *pool, ngx_http_llm_sbuf_t *sb,
    ngx_http_llm_ctx_t *ctx, ngx_uint_t output)
{
    ngx_uint_t  cached;

    cached = ngx_min(ctx->cached_tokens, ctx->prompt_tokens);

    if (ngx_http_llm_anth_lit(pool, sb, "{\"input_tokens\":") != NGX_OK
        || ngx_http_llm_anth_num(pool, sb, ctx->prompt_tokens - cached)
           != NGX_OK
        || ngx_http_llm_anth_lit(pool, sb, ",\"cache_creation_input_tokens\""
                                 ":0,\"cache_read_input_tokens\":")
           != NGX_OK
        || ngx_http_llm_anth_num(pool, sb, cached) != NGX_OK
        || ngx_http_llm_anth_lit(pool, sb, ",\"output_tokens\":") != NGX_OK
        || ngx_http_llm_anth_num(pool, sb, output) != NGX_OK)
    {
        return NGX_ERROR;
    }

    return ngx_http_llm_anth_lit(pool, sb, "}");
}


/* {"id","type":"message","role","model" of the answer, to "content":[ */

static ngx_int_t
ngx_http_llm_anth_head(ngx_http_request_t *r, ngx_http_llm_ctx_t *ctx,
    ngx_http_llm_sbuf_t *sb)
{
    if (ngx_http_llm_anth_lit(r->pool, sb, "{\"id\":") != NGX_OK
        || ngx_http_llm_anth_str(r->pool, sb, ctx->id, ctx->id_len)
           != NGX_OK
        || ngx_http_llm_anth_lit(r->pool, sb, ",\"type\":\"message\","
                                 "\"role\":\"assistant\",\"model\":\"")
           != NGX_OK
        || ngx_http_llm_sbuf_add(r->pool, sb, ctx->model_json.data,
                                 ctx->model_json.len)
           != NGX_OK)
    {
        return NGX_ERROR;
    }

    return ngx_http_llm_anth_lit(r->pool, sb, "\",\"content\":[");
}


/* A tool_use block of the collected call. */

static ngx_int_t
ngx_http_llm_anth_tool_block(ngx_http_request_t *r, ngx_http_llm_sbuf_t *sb,
    ngx_http_llm_call_t *call)
{
    char        *s;
    json_t      *input;
    ngx_int_t    rc;

    input = call->arguments.len
            ? json_loadb((char *) call->arguments.data, call->arguments.len,
                         0, NULL)
            : NULL;

    if (input && !json_is_object(input)) {
        json_decref(input);
        input = NULL;
    }

    if (input == NULL) {
        /* cut by max_tokens, or no arguments: the input must be an object */
        input = json_object();
    }

    s = input ? json_dumps(input, JSON_COMPACT) : NULL;
    json_decref(input);

    if (s == NULL) {
        return NGX_ERROR;
    }

    if (ngx_http_llm_anth_lit(r->pool, sb, "{\"type\":\"tool_use\",\"id\":")
        != NGX_OK
        || ngx_http_llm_anth_tool_id(r->pool, sb, call->id.data, call->id.len)
           != NGX_OK
        || ngx_http_llm_anth_lit(r->pool, sb, ",\"name\":") != NGX_OK
        || ngx_http_llm_anth_str(r->pool, sb, call->name.data, call->name.len)
           != NGX_OK
        || ngx_http_llm_anth_lit(r->pool, sb, ",\"input\":") != NGX_OK
        || ngx_http_llm_sbuf_add(r->pool, sb, (u_char *) s, ngx_strlen(s))
           != NGX_OK)
    {
        free(s);
        return NGX_ERROR;
    }

    free(s);

    rc = ngx_http_llm_anth_lit(r->pool, sb, "}");

    return rc;
}


/*
 * The Message of choice 0 (thinking, text, tool_use blocks), or for
 * count_tokens {"input_tokens":N}: a count costs the key no tokens, so
 * the usage settled and recorded is zeroed here.
 */

static ngx_int_t
ngx_http_llm_anth_body(ngx_http_request_t *r, ngx_http_llm_ctx_t *ctx,
    ngx_str_t *body)
{
    ngx_uint_t              i, n;
    ngx_http_llm_sbuf_t     sb;
    ngx_http_llm_call_t    *call;
    ngx_http_llm_anth_t    *st;
    ngx_http_llm_choice_t  *ch;

    ngx_memzero(&sb, sizeof(ngx_http_llm_sbuf_t));
    st = ctx->dialect_ctx;
    ch = &ctx->choices[0];

    if (st->count_only) {
        if (ngx_http_llm_anth_lit(r->pool, &sb, "{\"input_tokens\":")
            != NGX_OK
            || ngx_http_llm_anth_num(r->pool, &sb, ctx->prompt_tokens)
               != NGX_OK
            || ngx_http_llm_anth_lit(r->pool, &sb, "}\n") != NGX_OK)
        {
            return NGX_ERROR;
        }

        ctx->prompt_tokens = 0;
        ctx->cached_tokens = 0;
        ctx->completion_tokens = 0;
        goto done;
    }

    if (ngx_http_llm_anth_head(r, ctx, &sb) != NGX_OK) {
        return NGX_ERROR;
    }

    n = 0;

    if (ch->reasoning.len) {
        if (ngx_http_llm_anth_lit(r->pool, &sb, "{\"type\":\"thinking\","
                                  "\"thinking\":") != NGX_OK
            || ngx_http_llm_anth_str(r->pool, &sb, ch->reasoning.data,
                                     ch->reasoning.len) != NGX_OK
            || ngx_http_llm_anth_lit(r->pool, &sb, ",\"signature\":\"\"}")
               != NGX_OK)
        {
            return NGX_ERROR;
        }

        n++;
    }

    if (ch->content.len) {
        if ((n && ngx_http_llm_anth_lit(r->pool, &sb, ",") != NGX_OK)
            || ngx_http_llm_anth_lit(r->pool, &sb, "{\"type\":\"text\","
                                     "\"text\":") != NGX_OK
            || ngx_http_llm_anth_str(r->pool, &sb, ch->content.data,
                                     ch->content.len) != NGX_OK
            || ngx_http_llm_anth_lit(r->pool, &sb, "}") != NGX_OK)
        {
            return NGX_ERROR;
        }

        n++;
    }

    call = ch->calls.elts;

    for (i = 0; i < ch->calls.nelts; i++) {
        if ((n && ngx_http_llm_anth_lit(r->pool, &sb, ",") != NGX_OK)
            || ngx_http_llm_anth_tool_block(r, &sb, &call[i]) != NGX_OK)
        {
            return NGX_ERROR;
        }

        n++;
    }

    if (ngx_http_llm_anth_lit(r->pool, &sb, "],\"stop_reason\":\"")
        != NGX_OK
        || ngx_http_llm_sbuf_add(r->pool, &sb, (u_char *)
                                 ngx_http_llm_anth_stop_reason(ch),
                                 ngx_strlen(ngx_http_llm_anth_stop_reason(ch)))
           != NGX_OK
        || ngx_http_llm_anth_lit(r->pool, &sb, "\",\"stop_sequence\":")
           != NGX_OK
        || (ch->stop_sequence.len
            ? ngx_http_llm_anth_str(r->pool, &sb, ch->stop_sequence.data,
                                    ch->stop_sequence.len)
            : ngx_http_llm_anth_lit(r->pool, &sb, "null")) != NGX_OK
        || ngx_http_llm_anth_lit(r->pool, &sb, ",\"usage\":") != NGX_OK
        || ngx_http_llm_anth_usage(r->pool, &sb, ctx, ctx->completion_tokens)
           != NGX_OK
        || ngx_http_llm_anth_lit(r->pool, &sb, "}\n") != NGX_OK)
    {
        return NGX_ERROR;
    }

done:

    body->data = sb.data;
    body->len = sb.len;

    return NGX_OK;
}


/* The stream. */

/* Appends "event: NAME\ndata: " to sb; the caller ends it with "}\n\n". */

static ngx_int_t
ngx_http_llm_anth_event(ngx_pool_t *pool, ngx_http_llm_sbuf_t *sb,
    const char *name)
{
    if (ngx_http_llm_anth_lit(pool, sb, "event: ") != NGX_OK
        || ngx_http_llm_sbuf_add(pool, sb, (u_char *) name, ngx_strlen(name))
           != NGX_OK
        || ngx_http_llm_anth_lit(pool, sb, "\ndata: {\"type\":\"") != NGX_OK
        || ngx_http_llm_sbuf_add(pool, sb, (u_char *) name, ngx_strlen(name))
           != NGX_OK)
    {
        return NGX_ERROR;
    }

    return ngx_http_llm_anth_lit(pool, sb, "\"");
}


/* message_start (the Message with no content yet) and a ping. */

static ngx_int_t
ngx_http_llm_anth_start(ngx_http_request_t *r, ngx_http_llm_ctx_t *ctx,
    ngx_http_llm_sbuf_t *sb)
{
    if (ngx_http_llm_anth_event(r->pool, sb, "message_start") != NGX_OK
        || ngx_http_llm_anth_lit(r->pool, sb, ",\"message\":") != NGX_OK
        || ngx_http_llm_anth_head(r, ctx, sb) != NGX_OK
        || ngx_http_llm_anth_lit(r->pool, sb, "],\"stop_reason\":null,"
                                 "\"stop_sequence\":null,\"usage\":")
           != NGX_OK
        || ngx_http_llm_anth_usage(r->pool, sb, ctx, 0) != NGX_OK
        || ngx_http_llm_anth_lit(r->pool, sb, "}}\n\n") != NGX_OK
        || ngx_http_llm_anth_event(r->pool, sb, "ping") != NGX_OK)
    {
        return NGX_ERROR;
    }

    return ngx_http_llm_anth_lit(r->pool, sb, "}\n\n");
}


/* content_block_stop of the open block (a thinking one gets its empty
 * signature first, as Anthropic sends one before the stop). */

static ngx_int_t
ngx_http_llm_anth_close(ngx_http_request_t *r, ngx_http_llm_anth_t *st,
    ngx_http_llm_sbuf_t *sb)
{
    if (st->block == NGX_HTTP_LLM_ANTH_NONE) {
        return NGX_OK;
    }

    if (st->block == NGX_HTTP_LLM_ANTH_THINKING
        && (ngx_http_llm_anth_event(r->pool, sb, "content_block_delta")
            != NGX_OK
            || ngx_http_llm_anth_lit(r->pool, sb, ",\"index\":") != NGX_OK
            || ngx_http_llm_anth_num(r->pool, sb, st->index) != NGX_OK
            || ngx_http_llm_anth_lit(r->pool, sb, ",\"delta\":{\"type\":"
                                     "\"signature_delta\",\"signature\":"
                                     "\"\"}}\n\n") != NGX_OK))
    {
        return NGX_ERROR;
    }

    st->block = NGX_HTTP_LLM_ANTH_NONE;

    if (ngx_http_llm_anth_event(r->pool, sb, "content_block_stop") != NGX_OK
        || ngx_http_llm_anth_lit(r->pool, sb, ",\"index\":") != NGX_OK
        || ngx_http_llm_anth_num(r->pool, sb, st->index) != NGX_OK)
    {
        return NGX_ERROR;
    }

    return ngx_http_llm_anth_lit(r->pool, sb, "}\n\n");
}


/*
 * Makes the open block one of kind (closing another first): its
 * content_block_start with the empty block; for a tool_use block the
 * call's id and name.
 */

static ngx_int_t
ngx_http_llm_anth_open(ngx_http_request_t *r, ngx_http_llm_anth_t *st,
    ngx_http_llm_sbuf_t *sb, ngx_uint_t kind, Llm__ToolCallDelta *t)
{
    ngx_int_t  rc;

    if (st->block == kind
        && (kind != NGX_HTTP_LLM_ANTH_TOOL || st->call == t->call_index))
    {
        return NGX_OK;
    }

    if (ngx_http_llm_anth_close(r, st, sb) != NGX_OK) {
        return NGX_ERROR;
    }

    st->block = kind;
    st->index = st->nblocks++;

    if (ngx_http_llm_anth_event(r->pool, sb, "content_block_start") != NGX_OK
        || ngx_http_llm_anth_lit(r->pool, sb, ",\"index\":") != NGX_OK
        || ngx_http_llm_anth_num(r->pool, sb, st->index) != NGX_OK)
    {
        return NGX_ERROR;
    }

    switch (kind) {

    case NGX_HTTP_LLM_ANTH_TEXT:
        rc = ngx_http_llm_anth_lit(r->pool, sb, ",\"content_block\":"
                                   "{\"type\":\"text\",\"text\":\"\"}}\n\n");
        break;

    case NGX_HTTP_LLM_ANTH_THINKING:
        rc = ngx_http_llm_anth_lit(r->pool, sb, ",\"content_block\":"
                                   "{\"type\":\"thinking\",\"thinking\":\"\","
                                   "\"signature\":\"\"}}\n\n");
        break;

    default:
        st->call = t->call_index;

        if (ngx_http_llm_anth_lit(r->pool, sb, ",\"content_block\":"
                                  "{\"type\":\"tool_use\",\"id\":")
            != NGX_OK
            || ngx_http_llm_anth_tool_id(r->pool, sb, (u_char *) t->id,
                                         ngx_strlen(t->id))
               != NGX_OK
            || ngx_http_llm_anth_lit(r->pool, sb, ",\"name\":") != NGX_OK
            || ngx_http_llm_anth_str(r->pool, sb, (u_char *) t->name,
                                     ngx_strlen(t->name))
               != NGX_OK)
        {
            return NGX_ERROR;
        }

        rc = ngx_http_llm_anth_lit(r->pool, sb, ",\"input\":{}}}\n\n");
    }

    return rc;
}


/* A content_block_delta of the open block: {"type":type,field:text}. */

static ngx_int_t
ngx_http_llm_anth_delta(ngx_http_request_t *r, ngx_http_llm_anth_t *st,
    ngx_http_llm_sbuf_t *sb, const char *type, const char *field,
    const char *text)
{
    if (ngx_http_llm_anth_event(r->pool, sb, "content_block_delta") != NGX_OK
        || ngx_http_llm_anth_lit(r->pool, sb, ",\"index\":") != NGX_OK
        || ngx_http_llm_anth_num(r->pool, sb, st->index) != NGX_OK
        || ngx_http_llm_anth_lit(r->pool, sb, ",\"delta\":{\"type\":\"")
           != NGX_OK
        || ngx_http_llm_sbuf_add(r->pool, sb, (u_char *) type,
                                 ngx_strlen(type)) != NGX_OK
        || ngx_http_llm_anth_lit(r->pool, sb, "\",\"") != NGX_OK
        || ngx_http_llm_sbuf_add(r->pool, sb, (u_char *) field,
                                 ngx_strlen(field)) != NGX_OK
        || ngx_http_llm_anth_lit(r->pool, sb, "\":") != NGX_OK
        || ngx_http_llm_anth_str(r->pool, sb, (u_char *) text,
                                 ngx_strlen(text)) != NGX_OK)
    {
        return NGX_ERROR;
    }

    return ngx_http_llm_anth_lit(r->pool, sb, "}}\n\n");
}


/* Done: the open block's stop, message_delta and message_stop. */

static ngx_int_t
ngx_http_llm_anth_done(ngx_http_request_t *r, ngx_http_llm_ctx_t *ctx,
    ngx_http_llm_anth_t *st, ngx_http_llm_sbuf_t *sb, Llm__Done *done)
{
    const char             *reason;
    ngx_http_llm_choice_t  *ch;

    ngx_http_llm_finish(ctx, done);

    ch = &ctx->choices[0];
    reason = ngx_http_llm_anth_stop_reason(ch);

    if (ngx_http_llm_anth_close(r, st, sb) != NGX_OK
        || ngx_http_llm_anth_event(r->pool, sb, "message_delta") != NGX_OK
        || ngx_http_llm_anth_lit(r->pool, sb, ",\"delta\":{\"stop_reason\":"
                                 "\"") != NGX_OK
        || ngx_http_llm_sbuf_add(r->pool, sb, (u_char *) reason,
                                 ngx_strlen(reason)) != NGX_OK
        || ngx_http_llm_anth_lit(r->pool, sb, "\",\"stop_sequence\":")
           != NGX_OK
        || (ch->stop_sequence.len
            ? ngx_http_llm_anth_str(r->pool, sb, ch->stop_sequence.data,
                                    ch->stop_sequence.len)
            : ngx_http_llm_anth_lit(r->pool, sb, "null")) != NGX_OK
        || ngx_http_llm_anth_lit(r->pool, sb, "},\"usage\":") != NGX_OK
        || ngx_http_llm_anth_usage(r->pool, sb, ctx, ctx->completion_tokens)
           != NGX_OK
        || ngx_http_llm_anth_lit(r->pool, sb, "}\n\n") != NGX_OK
        || ngx_http_llm_anth_event(r->pool, sb, "message_stop") != NGX_OK)
    {
        return NGX_ERROR;
    }

    return ngx_http_llm_anth_lit(r->pool, sb, "}\n\n");
}


/* An error mid-stream (e, or ev NULL: the one kept in ctx). */

static ngx_int_t
ngx_http_llm_anth_sse_error(ngx_http_request_t *r, ngx_http_llm_ctx_t *ctx,
    ngx_http_llm_sbuf_t *sb, Llm__Error *e)
{
    u_char                *body;
    size_t                 len;
    ngx_http_llm_error_t   err;

    if (e) {
        ngx_http_llm_map_error(e, &err);

    } else {
        err.status = ctx->err_status;
        err.type = "server_error";
        err.code = ctx->error_code.len ? (char *) ctx->error_code.data : NULL;
        err.param = NULL;
        err.message = ctx->err_message;
    }

    if (err.code) {
        ctx->error_code.data = (u_char *) err.code;
        ctx->error_code.len = ngx_strlen(err.code);
    }

    ngx_str_set(&ctx->finish_reason, "error");

    body = ngx_http_llm_anth_error_json(r->pool, &err, &len);
    if (body == NULL) {
        return NGX_ERROR;
    }

    /* the body ends with "\n"; the event with an empty line */

    if (ngx_http_llm_anth_lit(r->pool, sb, "event: error\ndata: ") != NGX_OK
        || ngx_http_llm_sbuf_add(r->pool, sb, body, len) != NGX_OK)
    {
        return NGX_ERROR;
    }

    return ngx_http_llm_anth_lit(r->pool, sb, "\n");
}


/*
 * One engine event of a started stream as Anthropic's events: the first
 * one starts the message; reasoning, text and each tool call are blocks
 * of their own, opened and closed as the kind changes.
 */

static ngx_int_t
ngx_http_llm_anth_sse(ngx_http_request_t *r, ngx_http_llm_ctx_t *ctx,
    Llm__Event *ev, ngx_chain_t ***ll)
{
    ngx_int_t                 rc;
    ngx_uint_t                last;
    Llm__Delta               *d;
    Llm__ToolCallDelta       *t;
    ngx_http_llm_sbuf_t       sb;
    ngx_http_llm_anth_t      *st;
    ngx_http_llm_loc_conf_t  *llcf;

    llcf = ngx_http_get_module_loc_conf(r, ngx_http_llm_module);
    st = ctx->dialect_ctx;
    ngx_memzero(&sb, sizeof(ngx_http_llm_sbuf_t));

    last = (ev == NULL || ev->kind_case == LLM__EVENT__KIND_DONE
            || ev->kind_case == LLM__EVENT__KIND_ERROR);

    if (!st->started && ev && ev->kind_case != LLM__EVENT__KIND_ERROR) {
        st->started = 1;

        if (ngx_http_llm_anth_start(r, ctx, &sb) != NGX_OK) {
            return NGX_ERROR;
        }
    }

    rc = NGX_OK;

    if (ev == NULL) {
        rc = ngx_http_llm_anth_sse_error(r, ctx, &sb, NULL);

    } else {
        switch (ev->kind_case) {

        case LLM__EVENT__KIND_DELTA:
            d = ev->delta;

            if (d->index != 0) {
                break;
            }

            if (d->reasoning[0]) {
                rc = ngx_http_llm_anth_open(r, st, &sb,
                                            NGX_HTTP_LLM_ANTH_THINKING, NULL);
                if (rc == NGX_OK) {
                    rc = ngx_http_llm_anth_delta(r, st, &sb, "thinking_delta",
                                                 "thinking", d->reasoning);
                }
            }

            if (rc == NGX_OK && d->text[0]) {
                rc = ngx_http_llm_anth_open(r, st, &sb,
                                            NGX_HTTP_LLM_ANTH_TEXT, NULL);
                if (rc == NGX_OK) {
                    rc = ngx_http_llm_anth_delta(r, st, &sb, "text_delta",
                                                 "text", d->text);
                }
            }

            break;

        case LLM__EVENT__KIND_TOOL_CALL:
            t = ev->tool_call;

            if (t->index != 0) {
                break;
            }

            rc = ngx_http_llm_anth_open(r, st, &sb, NGX_HTTP_LLM_ANTH_TOOL,
                                        t);
            if (rc == NGX_OK && t->arguments[0]) {
                rc = ngx_http_llm_anth_delta(r, st, &sb, "input_json_delta",
                                             "partial_json", t->arguments);
            }

            break;

        case LLM__EVENT__KIND_DONE:
            rc = ngx_http_llm_anth_done(r, ctx, st, &sb, ev->done);
            break;

        case LLM__EVENT__KIND_ERROR:
            rc = ngx_http_llm_anth_sse_error(r, ctx, &sb, ev->error);
            break;

        default:
            break;
        }
    }

    if (rc != NGX_OK) {
        return NGX_ERROR;
    }

    if (sb.len == 0) {
        return NGX_OK;
    }

    return ngx_http_llm_sse_raw(r, ll, sb.data, sb.len,
                                last || llcf->sse_flush_interval == 0);
}


/* Errors. */

/*
 * {"type":"error","error":{"type","message"}}: the type by the status,
 * as Anthropic's API names them (an engine overloaded or shutting down
 * is overloaded_error).
 */

static u_char *
ngx_http_llm_anth_error_json(ngx_pool_t *pool, ngx_http_llm_error_t *err,
    size_t *len)
{
    u_char      *p, *body;
    size_t       size;
    const char  *type;

    switch (err->status) {
    case NGX_HTTP_UNAUTHORIZED:
        type = "authentication_error";
        break;
    case NGX_HTTP_FORBIDDEN:
        type = "permission_error";
        break;
    case NGX_HTTP_NOT_FOUND:
        type = "not_found_error";
        break;
    case NGX_HTTP_REQUEST_ENTITY_TOO_LARGE:
        type = "request_too_large";
        break;
    case NGX_HTTP_TOO_MANY_REQUESTS:
        type = "rate_limit_error";
        break;
    case NGX_HTTP_SERVICE_UNAVAILABLE:
    case 529:
        type = "overloaded_error";
        break;
    default:
        type = err->status >= 500 || err->status < 400
               ? "api_error" : "invalid_request_error";
    }

    size = ngx_http_llm_len("{\"type\":\"error\",\"error\":{\"type\":\"\","
                            "\"message\":\"\"}}\n")
           + ngx_strlen(type)
           + ngx_http_llm_json_escape_len(err->message.data,
                                          err->message.len);

    body = ngx_pnalloc(pool, size);
    if (body == NULL) {
        return NULL;
    }

    p = ngx_sprintf(body, "{\"type\":\"error\",\"error\":{\"type\":\"%s\","
                    "\"message\":\"", type);
    p = ngx_http_llm_json_escape(p, err->message.data, err->message.len);
    p = ngx_cpymem(p, "\"}}\n", 4);

    *len = p - body;

    return body;
}
