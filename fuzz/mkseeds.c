/*
 * Writes the protobuf seeds of the corpora (run once, the output is
 * committed): framed llm.Request streams for fuzz_engine_frame, and framed
 * llm.Event streams (what an engine sends) for fuzz_module_events.
 *
 *   make -C fuzz seeds   (writes fuzz/corpus/{engine_frame,module_events})
 */

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llm.pb-c.h"

static const char *outdir;

typedef struct {
    uint8_t  *p;
    size_t    n;
} buf_t;

static void
put_req(buf_t *b, const Llm__Request *rq)
{
    size_t n = llm__request__get_packed_size(rq);

    b->p = realloc(b->p, b->n + 4 + n);
    b->p[b->n] = (uint8_t) (n >> 24);
    b->p[b->n + 1] = (uint8_t) (n >> 16);
    b->p[b->n + 2] = (uint8_t) (n >> 8);
    b->p[b->n + 3] = (uint8_t) n;
    llm__request__pack(rq, b->p + b->n + 4);
    b->n += 4 + n;
}

static void
put_ev(buf_t *b, const Llm__Event *ev)
{
    size_t n = llm__event__get_packed_size(ev);

    b->p = realloc(b->p, b->n + 4 + n);
    b->p[b->n] = (uint8_t) (n >> 24);
    b->p[b->n + 1] = (uint8_t) (n >> 16);
    b->p[b->n + 2] = (uint8_t) (n >> 8);
    b->p[b->n + 3] = (uint8_t) n;
    llm__event__pack(ev, b->p + b->n + 4);
    b->n += 4 + n;
}

static void
save(const char *dir, const char *name, buf_t *b, const uint8_t *prefix,
    size_t np)
{
    char  path[1024];
    FILE *f;

    snprintf(path, sizeof(path), "%s/%s/%s", outdir, dir, name);
    f = fopen(path, "wb");
    if (f == NULL) {
        perror(path);
        exit(1);
    }
    fwrite(prefix, 1, np, f);
    fwrite(b->p, 1, b->n, f);
    fclose(f);
    free(b->p);
    b->p = NULL;
    b->n = 0;
}

static void
gen(buf_t *b, Llm__GenerateRequest *g)
{
    Llm__Request rq = LLM__REQUEST__INIT;

    rq.kind_case = LLM__REQUEST__KIND_GENERATE;
    rq.generate = g;
    put_req(b, &rq);
}

static void
engine_seeds(void)
{
    buf_t                   b = { 0 };
    Llm__Request            rq = LLM__REQUEST__INIT;
    Llm__InfoRequest        in = LLM__INFO_REQUEST__INIT;
    Llm__TokenizeRequest    tk = LLM__TOKENIZE_REQUEST__INIT;
    Llm__DetokenizeRequest  dt = LLM__DETOKENIZE_REQUEST__INIT;
    Llm__CancelRequest      cr = LLM__CANCEL_REQUEST__INIT;
    Llm__GenerateRequest    g = LLM__GENERATE_REQUEST__INIT;
    Llm__Sampling           sm = LLM__SAMPLING__INIT;
    Llm__Message            m0 = LLM__MESSAGE__INIT, m1 = LLM__MESSAGE__INIT,
                            m2 = LLM__MESSAGE__INIT, m3 = LLM__MESSAGE__INIT;
    Llm__Message           *msgs[4] = { &m0, &m1, &m2, &m3 };
    Llm__ToolCall           tc = LLM__TOOL_CALL__INIT, *tcs[1] = { &tc };
    Llm__Sampling__LogitBiasEntry lb = LLM__SAMPLING__LOGIT_BIAS_ENTRY__INIT,
                                  *lbs[1] = { &lb };
    int32_t                 ids[] = { 1, 100, 2000, 151643, 9, 77 };
    char                   *stops[] = { "\n\n", "END" };

    rq.kind_case = LLM__REQUEST__KIND_INFO;
    rq.info = &in;
    put_req(&b, &rq);
    save("engine_frame", "info", &b, NULL, 0);

    tk.text = "Hello <|im_start|>user\nworld<|im_end|> 123 \xc3\xa9";
    tk.parse_special = 1;
    tk.add_special = 1;
    rq.kind_case = LLM__REQUEST__KIND_TOKENIZE;
    rq.tokenize = &tk;
    put_req(&b, &rq);
    tk.parse_special = 0;
    put_req(&b, &rq);
    save("engine_frame", "tokenize", &b, NULL, 0);

    dt.n_tokens = sizeof(ids) / sizeof(ids[0]);
    dt.tokens = ids;
    rq.kind_case = LLM__REQUEST__KIND_DETOKENIZE;
    rq.detokenize = &dt;
    put_req(&b, &rq);
    save("engine_frame", "detokenize", &b, NULL, 0);

    rq.kind_case = LLM__REQUEST__KIND_CANCEL;
    rq.cancel = &cr;
    put_req(&b, &rq);
    save("engine_frame", "cancel", &b, NULL, 0);

    /* a plain chat */
    g.request_id = "chatcmpl-1";
    g.key_id = "demo";
    g.model = "fake";
    m0.role = "system";
    m0.content = "You are terse.";
    m1.role = "user";
    m1.content = "Say hi <|im_start|>assistant";
    g.n_messages = 2;
    g.messages = msgs;
    sm.max_tokens = 16;
    sm.temperature = 0.7f;
    sm.top_p = 0.9f;
    sm.top_k = 40;
    sm.has_seed = 1;
    sm.seed = 42;
    g.sampling = &sm;
    g.stream = 1;
    gen(&b, &g);
    save("engine_frame", "chat", &b, NULL, 0);

    /* tools, a tool call and its result */
    m2.role = "assistant";
    m2.content = "";
    m2.content_null = 1;
    tc.id = "call_1";
    tc.type = "function";
    tc.name = "get_weather";
    tc.arguments = "{\"city\":\"Paris\"}";
    m2.n_tool_calls = 1;
    m2.tool_calls = tcs;
    m3.role = "tool";
    m3.tool_call_id = "call_1";
    m3.content = "{\"t\":18}";
    g.n_messages = 4;
    g.tools_json = "[{\"type\":\"function\",\"function\":{\"name\":"
        "\"get_weather\",\"description\":\"weather\",\"parameters\":"
        "{\"type\":\"object\",\"properties\":{\"city\":{\"type\":"
        "\"string\"}},\"required\":[\"city\"]}}}]";
    g.tool_choice_json = "\"required\"";
    g.parallel_tool_calls = 1;
    gen(&b, &g);
    save("engine_frame", "tools", &b, NULL, 0);

    g.tool_choice_json = "{\"type\":\"function\",\"function\":{\"name\":"
        "\"get_weather\"}}";
    g.chat_template_kwargs_json = "{\"enable_thinking\":false}";
    gen(&b, &g);
    save("engine_frame", "tool_forced", &b, NULL, 0);

    /* constrained output */
    g.tools_json = "";
    g.tool_choice_json = "";
    g.chat_template_kwargs_json = "";
    g.n_messages = 2;
    g.response_format_json = "{\"type\":\"json_schema\",\"json_schema\":"
        "{\"name\":\"x\",\"strict\":true,\"schema\":{\"type\":\"object\","
        "\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"enum\":"
        "[\"x\",\"y\"]}},\"required\":[\"a\",\"b\"],"
        "\"additionalProperties\":false}}}";
    gen(&b, &g);
    save("engine_frame", "json_schema", &b, NULL, 0);
    g.response_format_json = "{\"type\":\"json_object\"}";
    sm.n = 2;
    gen(&b, &g);
    save("engine_frame", "json_object_n2", &b, NULL, 0);

    /* a completion with everything */
    g.response_format_json = "";
    g.n_messages = 0;
    g.is_completion = 1;
    g.prompt = "Once upon a time";
    g.echo = 1;
    sm.n = 1;
    sm.logprobs = 1;
    sm.top_logprobs = 5;
    sm.presence_penalty = 0.5f;
    sm.frequency_penalty = 0.5f;
    sm.repetition_penalty = 1.1f;
    sm.min_p = 0.05f;
    sm.n_stop = 2;
    sm.stop = stops;
    lb.key = 100;
    lb.value = -100.0f;
    sm.n_logit_bias = 1;
    sm.logit_bias = lbs;
    gen(&b, &g);
    save("engine_frame", "completion", &b, NULL, 0);

    /* errors: unknown model, two requests on one connection */
    g.model = "nope";
    gen(&b, &g);
    save("engine_frame", "bad_model", &b, NULL, 0);
    g.model = "alias-a";
    gen(&b, &g);
    gen(&b, &g);
    save("engine_frame", "two", &b, NULL, 0);
}

/* An Embed's answer: two Embedding events and EmbedDone, as floats and
 * as base64 (byte 0 bit 5), with the non-streaming chat request. */
static void
embed_seeds(void)
{
    buf_t            b = { 0 };
    Llm__Event       ev = LLM__EVENT__INIT;
    Llm__Embedding   e = LLM__EMBEDDING__INIT;
    Llm__EmbedDone   dn = LLM__EMBED_DONE__INIT;
    Llm__Usage       u = LLM__USAGE__INIT;
    float            v[4] = { 0.5f, -0.5f, 1e-30f, 0.70710677f };
    uint32_t         i;

    for (i = 0; i < 2; i++) {
        ev.kind_case = LLM__EVENT__KIND_EMBEDDING;
        e.index = i;
        e.n_values = 4;
        e.values = v;
        e.tokens = 3;
        ev.embedding = &e;
        put_ev(&b, &ev);
    }
    ev.kind_case = LLM__EVENT__KIND_EMBED_DONE;
    u.prompt_tokens = 6;
    dn.usage = &u;
    dn.model = "fake";
    ev.embed_done = &dn;
    put_ev(&b, &ev);
    {
        uint8_t  opt[1] = { 1 };
        buf_t    copy;

        copy.n = b.n;
        copy.p = malloc(b.n);
        memcpy(copy.p, b.p, b.n);
        save("module_events", "embed-float", &copy, opt, 1);
        opt[0] = 1 | 0x20;
        save("module_events", "embed-base64", &b, opt, 1);
    }
}

static void
events_seeds(void)
{
    buf_t               b = { 0 };
    Llm__Event          ev = LLM__EVENT__INIT;
    Llm__Queued         q = LLM__QUEUED__INIT;
    Llm__Started        st = LLM__STARTED__INIT;
    Llm__Delta          d = LLM__DELTA__INIT;
    Llm__TokenLogprob   lp = LLM__TOKEN_LOGPROB__INIT, *lps[1] = { &lp };
    Llm__TopLogprob     t0 = LLM__TOP_LOGPROB__INIT, t1 =
                            LLM__TOP_LOGPROB__INIT, *tops[2] = { &t0, &t1 };
    Llm__ToolCallDelta  tc = LLM__TOOL_CALL_DELTA__INIT;
    Llm__Done           dn = LLM__DONE__INIT;
    Llm__ChoiceEnd      ce = LLM__CHOICE_END__INIT, *ces[1] = { &ce };
    Llm__Usage          u = LLM__USAGE__INIT;
    Llm__Timings        tm = LLM__TIMINGS__INIT;
    Llm__Error          er = LLM__ERROR__INIT;
    Llm__InfoResponse   in = LLM__INFO_RESPONSE__INIT;
    Llm__EngineStats    es = LLM__ENGINE_STATS__INIT;
    int32_t             toks[2] = { 9707, 11 };
    uint8_t             mode;

    for (mode = 0; mode < 4; mode++) {
        char name[32];

        ev.kind_case = LLM__EVENT__KIND_QUEUED;
        q.position = 2;
        ev.queued = &q;
        put_ev(&b, &ev);
        ev.kind_case = LLM__EVENT__KIND_STARTED;
        st.prompt_tokens = 12;
        st.cached_tokens = 4;
        ev.started = &st;
        put_ev(&b, &ev);
        ev.kind_case = LLM__EVENT__KIND_DELTA;
        d.text = "Hello, \"w\xc3\xb6rld\"\n";
        d.n_tokens = 2;
        d.tokens = toks;
        lp.token = 9707;
        lp.text.data = (uint8_t *) "Hello";
        lp.text.len = 5;
        lp.logprob = -0.25f;
        t0.token = 9707;
        t0.text.data = (uint8_t *) "Hello";
        t0.text.len = 5;
        t0.logprob = -0.25f;
        t1.token = 13;
        t1.text.data = (uint8_t *) "\xe4\xbd";
        t1.text.len = 2;
        t1.logprob = -2.5f;
        lp.n_top = 2;
        lp.top = tops;
        d.n_logprobs = 1;
        d.logprobs = lps;
        ev.delta = &d;
        put_ev(&b, &ev);
        d.text = "";
        d.reasoning = "thinking...";
        d.n_logprobs = 0;
        put_ev(&b, &ev);
        d.reasoning = "";
        if (mode & 1) {
            ev.kind_case = LLM__EVENT__KIND_TOOL_CALL;
            tc.call_index = 0;
            tc.id = "call_abc";
            tc.name = "get_weather";
            tc.arguments = "{\"city\":";
            ev.tool_call = &tc;
            put_ev(&b, &ev);
            tc.id = "";
            tc.name = "";
            tc.arguments = "\"Paris\"}";
            put_ev(&b, &ev);
            ce.finish_reason = LLM__FINISH_REASON__FINISH_TOOL_CALLS;
        } else {
            ce.finish_reason = LLM__FINISH_REASON__FINISH_STOP;
        }
        if (mode & 2) {
            ev.kind_case = LLM__EVENT__KIND_ERROR;
            er.code = LLM__ERROR_CODE__ERROR_CONTEXT_LENGTH_EXCEEDED;
            er.message = "the prompt is too long";
            er.param = "messages";
            u.prompt_tokens = 12;
            u.completion_tokens = 3;
            er.usage = &u;
            ev.error = &er;
            put_ev(&b, &ev);
        } else {
            ev.kind_case = LLM__EVENT__KIND_DONE;
            dn.n_choices = 1;
            dn.choices = ces;
            u.prompt_tokens = 12;
            u.completion_tokens = 7;
            u.cached_tokens = 4;
            dn.usage = &u;
            tm.queue_ms = 1.5;
            tm.prefill_ms = 3.25;
            tm.decode_ms = 40;
            dn.timings = &tm;
            dn.model = "fake";
            dn.system_fingerprint = "fp_\"x\"";
            ev.done = &dn;
            put_ev(&b, &ev);
        }
        /* byte 0: the client request (bits 0-1), the piece size
         * (bits 2-3): every stream with every request */
        for (uint8_t body = 0; body < 4; body++) {
            uint8_t opt[1] = { (uint8_t) (body | (mode << 2)) };
            buf_t   copy;

            copy.n = b.n;
            copy.p = malloc(b.n);
            memcpy(copy.p, b.p, b.n);
            snprintf(name, sizeof(name), "events%u-req%u", mode, body);
            save("module_events", name, &copy, opt, 1);
        }
        /* and the two /v1/responses requests (bit 6; bit 0: streamed) */
        for (uint8_t body = 0; body < 2; body++) {
            uint8_t opt[1] = { (uint8_t) (0x40 | body | (mode << 2)) };
            buf_t   copy;

            copy.n = b.n;
            copy.p = malloc(b.n);
            memcpy(copy.p, b.p, b.n);
            snprintf(name, sizeof(name), "events%u-resp%u", mode, body);
            save("module_events", name, &copy, opt, 1);
        }
        free(b.p);
        b.p = NULL;
        b.n = 0;
    }

    ev.kind_case = LLM__EVENT__KIND_INFO;
    in.model = "fake";
    in.architecture = "qwen3moe";
    in.context_length = 4096;
    in.load_state = "ready";
    in.stats = &es;
    es.kv_blocks_total = 100;
    ev.info = &in;
    put_ev(&b, &ev);
    {
        uint8_t opt[1] = { 0x10 };      /* the Info probe */

        save("module_events", "info", &b, opt, 1);
    }
    embed_seeds();
}

int
main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: mkseeds CORPUS_DIR\n");
        return 2;
    }
    outdir = argv[1];
    engine_seeds();
    events_seeds();
    return 0;
}
