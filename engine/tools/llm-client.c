/*
 * llm-client: talk to llm-engine over its socket, for tests and people.
 * Sends one request (a Generate built from JSON, or Info / Tokenize /
 * Detokenize) and prints every event as one JSON line on stdout.  Test
 * options send raw bytes (malformed, oversized, truncated frames), close
 * the connection after K deltas, or repeat the request on one connection.
 *
 * Exit status: 0 when the exchange ended normally (Done or a response),
 * 1 on an Error event, 2 on usage or connection errors, 3 on timeout,
 * 4 when the engine closed the connection without a terminal event.
 */

#include <errno.h>
#include <getopt.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "llm.pb-c.h"
#include "readfile.h"

/* --auth-file: the engine's shared secret, sent on every frame */
static const char  *g_auth;

static void
usage(FILE *f)
{
    fprintf(f,
"usage: llm-client (--socket PATH | --tcp HOST:PORT) [options] [REQUEST]\n"
"\n"
"REQUEST is a JSON object (or --file F, or - for stdin) turned into a\n"
"Generate request:\n"
"  {\"model\": \"m\", \"messages\": [{\"role\": \"user\", \"content\": \"hi\"}],\n"
"   \"prompt\": \"raw text (a completion instead of a chat)\",\n"
"   \"max_tokens\": 16, \"temperature\": 0, \"top_p\": 1, \"top_k\": 0,\n"
"   \"min_p\": 0, \"seed\": 1, \"presence_penalty\": 0,\n"
"   \"frequency_penalty\": 0, \"repetition_penalty\": 1,\n"
"   \"logit_bias\": {\"42\": -100}, \"stop\": [\"\\n\"], \"logprobs\": true,\n"
"   \"top_logprobs\": 2, \"n\": 1, \"ignore_eos\": false, \"echo\": false,\n"
"   \"tools\": [...], \"tool_choice\": \"auto\", \"response_format\": {...},\n"
"   \"chat_template_kwargs\": {...}, \"request_id\": \"r1\", \"key_id\": \"k\",\n"
"   \"count_only\": false}\n"
"\n"
"Other requests:\n"
"  --info                   engine and model information with stats\n"
"  --tokenize TEXT          [--add-special] [--parse-special]\n"
"  --detokenize 1,2,3\n"
"\n"
"Output: one JSON line per event: {\"event\": \"delta\", ...}.\n"
"\n"
"Options:\n"
"  --file F                 read REQUEST from F\n"
"  --repeat N               send the request N times on one connection\n"
"  --disconnect-after K     close the connection after K deltas (exit 0)\n"
"  --raw HEX                send these bytes instead of a request\n"
"  --half-close             shut down the write side after sending\n"
"  --auth-file F            send the engine's shared secret (its first\n"
"                           line) with every request\n"
"  --text                   print only the text of the deltas, then a\n"
"                           newline (events other than delta as JSON)\n"
"  --timeout S              give up after S seconds (default 120)\n"
"  --start-at T             connect, then send at unix time T (seconds,\n"
"                           fractions allowed): a gate for tests\n"
"  --bench N                send the request on N connections at once\n"
"                           (completions: \"<i>: \" before the prompt) and\n"
"                           print aggregate tok/s, decode tok/s, TTFT\n"
"                           p50/p95 as one JSON line\n"
"  --help                   this text\n");
}

static double
now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double) ts.tv_sec + (double) ts.tv_nsec / 1e9;
}


/* protobuf -> JSON, generically through the descriptors. */

static json_t *msg_to_json(const ProtobufCMessage *m);

static json_t *
enum_name(const ProtobufCEnumDescriptor *d, int v)
{
    const ProtobufCEnumValue *ev = protobuf_c_enum_descriptor_get_value(d, v);
    const char               *n, *u;
    char                      buf[64];
    size_t                    i;

    if (ev == NULL) {
        return json_integer(v);
    }
    /* FINISH_STOP -> "stop", ERROR_BAD_FRAME -> "bad_frame" */
    n = ev->name;
    u = strchr(n, '_');
    n = u ? u + 1 : n;
    for (i = 0; n[i] && i < sizeof(buf) - 1; i++) {
        buf[i] = (char) (n[i] >= 'A' && n[i] <= 'Z' ? n[i] + 32 : n[i]);
    }
    buf[i] = '\0';
    return json_string(buf);
}

static json_t *
value_to_json(const ProtobufCFieldDescriptor *f, const void *p)
{
    switch (f->type) {
    case PROTOBUF_C_TYPE_INT32: case PROTOBUF_C_TYPE_SINT32:
    case PROTOBUF_C_TYPE_SFIXED32:
        return json_integer(*(const int32_t *) p);
    case PROTOBUF_C_TYPE_UINT32: case PROTOBUF_C_TYPE_FIXED32:
        return json_integer(*(const uint32_t *) p);
    case PROTOBUF_C_TYPE_INT64: case PROTOBUF_C_TYPE_SINT64:
    case PROTOBUF_C_TYPE_SFIXED64:
        return json_integer(*(const int64_t *) p);
    case PROTOBUF_C_TYPE_UINT64: case PROTOBUF_C_TYPE_FIXED64:
        return json_integer((json_int_t) *(const uint64_t *) p);
    case PROTOBUF_C_TYPE_FLOAT:
        return json_real(*(const float *) p);
    case PROTOBUF_C_TYPE_DOUBLE:
        return json_real(*(const double *) p);
    case PROTOBUF_C_TYPE_BOOL:
        return json_boolean(*(const protobuf_c_boolean *) p);
    case PROTOBUF_C_TYPE_ENUM:
        return enum_name(f->descriptor, *(const int *) p);
    case PROTOBUF_C_TYPE_STRING: {
        const char *s = *(char *const *) p;
        json_t     *j = json_string(s ? s : "");

        return j ? j : json_string("<invalid utf-8>");
    }
    case PROTOBUF_C_TYPE_BYTES: {
        const ProtobufCBinaryData *b = p;
        json_t                    *a = json_array();

        for (size_t i = 0; i < b->len; i++) {
            json_array_append_new(a, json_integer(b->data[i]));
        }
        return a;
    }
    case PROTOBUF_C_TYPE_MESSAGE: {
        const ProtobufCMessage *m = *(ProtobufCMessage *const *) p;

        return m ? msg_to_json(m) : json_null();
    }
    }
    return json_null();
}

static size_t
type_size(ProtobufCType t)
{
    switch (t) {
    case PROTOBUF_C_TYPE_INT64: case PROTOBUF_C_TYPE_SINT64:
    case PROTOBUF_C_TYPE_SFIXED64: case PROTOBUF_C_TYPE_UINT64:
    case PROTOBUF_C_TYPE_FIXED64: case PROTOBUF_C_TYPE_DOUBLE:
        return 8;
    case PROTOBUF_C_TYPE_STRING: case PROTOBUF_C_TYPE_MESSAGE:
        return sizeof(void *);
    case PROTOBUF_C_TYPE_BYTES:
        return sizeof(ProtobufCBinaryData);
    case PROTOBUF_C_TYPE_BOOL:
        return sizeof(protobuf_c_boolean);
    default:
        return 4;
    }
}

static json_t *
msg_to_json(const ProtobufCMessage *m)
{
    const ProtobufCMessageDescriptor *d = m->descriptor;
    const char                       *base = (const char *) m;
    json_t                           *o = json_object();

    for (unsigned i = 0; i < d->n_fields; i++) {
        const ProtobufCFieldDescriptor *f = &d->fields[i];

        if (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) {
            if (*(const uint32_t *) (base + f->quantifier_offset) != f->id) {
                continue;
            }
        }
        if (f->label == PROTOBUF_C_LABEL_REPEATED) {
            size_t      n = *(const size_t *) (base + f->quantifier_offset);
            const char *arr = *(char *const *) (base + f->offset);
            json_t     *a = json_array();

            for (size_t k = 0; k < n; k++) {
                json_array_append_new(a, value_to_json(f,
                                      arr + k * type_size(f->type)));
            }
            json_object_set_new(o, f->name, a);
        } else {
            json_object_set_new(o, f->name, value_to_json(f, base + f->offset));
        }
    }
    return o;
}


/* JSON -> Generate. */

typedef struct {
    Llm__Request          rq;
    Llm__GenerateRequest  g;
    Llm__Sampling         s;
    json_t               *root;
    char                 *tools, *tool_choice, *response_format, *kwargs;
} gen_t;

static const char *
jstr(json_t *o, const char *k)
{
    json_t *v = json_object_get(o, k);

    return json_is_string(v) ? json_string_value(v) : "";
}

static double
jnum(json_t *o, const char *k, double dflt)
{
    json_t *v = json_object_get(o, k);

    return json_is_number(v) ? json_number_value(v) : dflt;
}

static char *
jdump(json_t *o, const char *k)
{
    json_t *v = json_object_get(o, k);

    return v ? json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
}

static int
build_generate(gen_t *x, json_t *j)
{
    json_t *v, *e;
    size_t  i;

    llm__request__init(&x->rq);
    llm__generate_request__init(&x->g);
    llm__sampling__init(&x->s);
    x->root = j;
    x->rq.kind_case = LLM__REQUEST__KIND_GENERATE;
    x->rq.generate = &x->g;
    x->g.sampling = &x->s;
    x->g.request_id = (char *) jstr(j, "request_id");
    x->g.key_id = (char *) jstr(j, "key_id");
    x->g.model = (char *) jstr(j, "model");
    x->g.echo = json_is_true(json_object_get(j, "echo"));
    x->g.stream = 1;

    v = json_object_get(j, "prompt");
    if (v) {
        if (!json_is_string(v)) {
            fprintf(stderr, "llm-client: prompt must be a string\n");
            return -1;
        }
        x->g.is_completion = 1;
        x->g.prompt = (char *) json_string_value(v);
    }
    v = json_object_get(j, "messages");
    if (json_is_array(v)) {
        x->g.n_messages = json_array_size(v);
        x->g.messages = calloc(x->g.n_messages + 1, sizeof(Llm__Message *));
        json_array_foreach(v, i, e) {
            Llm__Message *m = calloc(1, sizeof(*m));
            json_t       *c = json_object_get(e, "content"), *tc, *t;
            size_t        k;

            llm__message__init(m);
            m->role = (char *) jstr(e, "role");
            if (json_is_string(c)) {
                m->content = (char *) json_string_value(c);
            } else {
                m->content_null = 1;
            }
            m->tool_call_id = (char *) jstr(e, "tool_call_id");
            m->name = (char *) jstr(e, "name");
            m->reasoning_content = (char *) jstr(e, "reasoning_content");
            tc = json_object_get(e, "tool_calls");
            if (json_is_array(tc)) {
                m->n_tool_calls = json_array_size(tc);
                m->tool_calls = calloc(m->n_tool_calls + 1,
                                       sizeof(Llm__ToolCall *));
                json_array_foreach(tc, k, t) {
                    Llm__ToolCall *c2 = calloc(1, sizeof(*c2));
                    json_t        *fn = json_object_get(t, "function");

                    llm__tool_call__init(c2);
                    c2->id = (char *) jstr(t, "id");
                    c2->type = (char *) jstr(t, "type");
                    c2->name = (char *) jstr(fn, "name");
                    c2->arguments = (char *) jstr(fn, "arguments");
                    m->tool_calls[k] = c2;
                }
            }
            x->g.messages[i] = m;
        }
    }

    x->s.max_tokens = (uint32_t) jnum(j, "max_tokens", 0);
    x->s.temperature = (float) jnum(j, "temperature", 0);
    x->s.top_p = (float) jnum(j, "top_p", 0);
    x->s.top_k = (int32_t) jnum(j, "top_k", 0);
    x->s.min_p = (float) jnum(j, "min_p", 0);
    if (json_is_integer(json_object_get(j, "seed"))) {
        x->s.has_seed = 1;
        x->s.seed = (uint64_t) json_integer_value(json_object_get(j, "seed"));
    }
    x->s.presence_penalty = (float) jnum(j, "presence_penalty", 0);
    x->s.frequency_penalty = (float) jnum(j, "frequency_penalty", 0);
    x->s.repetition_penalty = (float) jnum(j, "repetition_penalty", 0);
    x->s.logprobs = json_is_true(json_object_get(j, "logprobs"));
    x->s.top_logprobs = (uint32_t) jnum(j, "top_logprobs", 0);
    x->s.n = (uint32_t) jnum(j, "n", 0);
    x->s.ignore_eos = json_is_true(json_object_get(j, "ignore_eos"));
    x->g.count_only = json_is_true(json_object_get(j, "count_only"));

    v = json_object_get(j, "stop");
    if (json_is_string(v)) {
        x->s.n_stop = 1;
        x->s.stop = calloc(1, sizeof(char *));
        x->s.stop[0] = (char *) json_string_value(v);
    } else if (json_is_array(v)) {
        x->s.n_stop = json_array_size(v);
        x->s.stop = calloc(x->s.n_stop + 1, sizeof(char *));
        json_array_foreach(v, i, e) {
            x->s.stop[i] = (char *) (json_is_string(e) ? json_string_value(e)
                                                       : "");
        }
    }
    v = json_object_get(j, "logit_bias");
    if (json_is_object(v)) {
        const char *key;
        size_t      k = 0;

        x->s.n_logit_bias = json_object_size(v);
        x->s.logit_bias = calloc(x->s.n_logit_bias + 1, sizeof(void *));
        json_object_foreach(v, key, e) {
            Llm__Sampling__LogitBiasEntry *b = calloc(1, sizeof(*b));

            llm__sampling__logit_bias_entry__init(b);
            b->key = atoi(key);
            b->value = (float) json_number_value(e);
            x->s.logit_bias[k++] = b;
        }
    }
    x->tools = jdump(j, "tools");
    x->tool_choice = jdump(j, "tool_choice");
    x->response_format = jdump(j, "response_format");
    x->kwargs = jdump(j, "chat_template_kwargs");
    if (x->tools) {
        x->g.tools_json = x->tools;
    }
    if (x->tool_choice) {
        x->g.tool_choice_json = x->tool_choice;
    }
    if (x->response_format) {
        x->g.response_format_json = x->response_format;
    }
    if (x->kwargs) {
        x->g.chat_template_kwargs_json = x->kwargs;
    }
    x->g.parallel_tool_calls =
        !json_is_false(json_object_get(j, "parallel_tool_calls"));
    return 0;
}


/* I/O. */

static int
connect_to(const char *sock, const char *tcp)
{
    int fd;

    if (sock) {
        struct sockaddr_un sa;

        memset(&sa, 0, sizeof(sa));
        sa.sun_family = AF_UNIX;
        if (strlen(sock) >= sizeof(sa.sun_path)) {
            fprintf(stderr, "llm-client: socket path too long\n");
            return -1;
        }
        strcpy(sa.sun_path, sock);
        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0 || connect(fd, (struct sockaddr *) &sa, sizeof(sa)) != 0) {
            fprintf(stderr, "llm-client: connect %s: %s\n", sock,
                    strerror(errno));
            if (fd >= 0) {
                close(fd);
            }
            return -1;
        }
        return fd;
    } else {
        struct addrinfo hints, *res = NULL, *ai;
        char            host[256], *c;

        snprintf(host, sizeof(host), "%s", tcp);
        c = strrchr(host, ':');
        if (c == NULL) {
            fprintf(stderr, "llm-client: --tcp HOST:PORT\n");
            return -1;
        }
        *c = '\0';
        memset(&hints, 0, sizeof(hints));
        hints.ai_socktype = SOCK_STREAM;
        if (getaddrinfo(host, c + 1, &hints, &res) != 0) {
            fprintf(stderr, "llm-client: cannot resolve %s\n", tcp);
            return -1;
        }
        fd = -1;
        for (ai = res; ai; ai = ai->ai_next) {
            fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, 0);
            if (fd >= 0 && connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) {
                break;
            }
            if (fd >= 0) {
                close(fd);
            }
            fd = -1;
        }
        freeaddrinfo(res);
        if (fd < 0) {
            fprintf(stderr, "llm-client: connect %s: %s\n", tcp,
                    strerror(errno));
        }
        return fd;
    }
}

static int
write_all(int fd, const void *p, size_t n)
{
    const uint8_t *b = p;

    while (n > 0) {
        ssize_t k = send(fd, b, n, MSG_NOSIGNAL);

        if (k < 0 && errno == EINTR) {
            continue;
        }
        if (k <= 0) {
            return -1;
        }
        b += k;
        n -= (size_t) k;
    }
    return 0;
}

static int
send_request(int fd, const Llm__Request *req)
{
    Llm__Request  rqa = *req;
    Llm__Request *rq = &rqa;
    size_t        n;
    uint8_t      *b;
    int           rc;

    if (g_auth != NULL) {
        rqa.auth = (char *) g_auth;     /* the engine's --auth-file secret */
    }
    n = llm__request__get_packed_size(rq);
    b = malloc(n + 4);

    if (b == NULL) {
        return -1;
    }
    b[0] = (uint8_t) (n >> 24);
    b[1] = (uint8_t) (n >> 16);
    b[2] = (uint8_t) (n >> 8);
    b[3] = (uint8_t) n;
    llm__request__pack(rq, b + 4);
    rc = write_all(fd, b, n + 4);
    free(b);
    return rc;
}

/* Read exactly n bytes or time out: 0, -1 EOF/error, -3 timeout. */
static int
read_full(int fd, uint8_t *p, size_t n, double deadline, size_t *got)
{
    *got = 0;
    while (*got < n) {
        struct pollfd pf = { fd, POLLIN, 0 };
        int           ms = (int) ((deadline - now_s()) * 1000);
        ssize_t       k;

        if (ms <= 0) {
            return -3;
        }
        if (poll(&pf, 1, ms) <= 0) {
            continue;
        }
        k = recv(fd, p + *got, n - *got, 0);
        if (k < 0 && errno == EINTR) {
            continue;
        }
        if (k <= 0) {
            return -1;
        }
        *got += (size_t) k;
    }
    return 0;
}

static int
hexval(int c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/*
 * --bench N: the request on N connections at once (completions get
 * "<i>: " put in front of the prompt so no two share a prefix block),
 * read all of them with poll, and print one JSON line of figures:
 * aggregate tok/s over the wall time (prefill included), aggregate decode
 * tok/s (every token after each stream's first, over the time from the
 * first stream's first token to the last stream's end), and time to first
 * token p50 / p95.
 */
typedef struct {
    int       fd;
    uint8_t  *buf;
    size_t    n, cap;
    double    t_first, t_done;
    uint32_t  tokens, prompt;
    int       state;          /* 0 running, 1 done, 2 error */
} bench_conn_t;

static int
dbl_cmp(const void *a, const void *b)
{
    double x = *(const double *) a, y = *(const double *) b;

    return x < y ? -1 : x > y;
}

static int
run_bench(const char *sock, const char *tcp, gen_t *x, int n,
    double timeout)
{
    bench_conn_t  *c = calloc((size_t) n, sizeof(*c));
    struct pollfd *pf = calloc((size_t) n, sizeof(*pf));
    double        *ttft = calloc((size_t) n, sizeof(double));
    const char    *base = x->g.prompt;
    double         t0, deadline, decode = 0.0, wall, tlast = 0.0;
    double         tfirst = 0.0;
    uint64_t       total = 0, prompt = 0;
    int            left = n, errors = 0, i, nt = 0;
    char           pbuf[65536];

    if (c == NULL || pf == NULL || ttft == NULL) {
        return 2;
    }
    for (i = 0; i < n; i++) {
        c[i].fd = connect_to(sock, tcp);
        if (c[i].fd < 0) {
            return 2;
        }
    }
    t0 = now_s();
    deadline = t0 + timeout;
    for (i = 0; i < n; i++) {
        if (x->g.is_completion) {
            snprintf(pbuf, sizeof(pbuf), "%d: %s", i, base);
            x->g.prompt = pbuf;
        }
        if (send_request(c[i].fd, &x->rq) != 0) {
            return 2;
        }
    }
    x->g.prompt = (char *) base;

    while (left > 0 && now_s() < deadline) {
        int k = 0;

        for (i = 0; i < n; i++) {
            pf[i].fd = c[i].state == 0 ? c[i].fd : -1;
            pf[i].events = POLLIN;
            pf[i].revents = 0;
        }
        if (poll(pf, (nfds_t) n, 100) <= 0) {
            continue;
        }
        for (i = 0; i < n; i++) {
            bench_conn_t *b = &c[i];
            ssize_t       r;

            if (!(pf[i].revents & (POLLIN | POLLHUP | POLLERR))) {
                continue;
            }
            if (b->cap - b->n < 65536) {
                b->cap = b->cap ? b->cap * 2 : 131072;
                b->buf = realloc(b->buf, b->cap);
            }
            r = recv(b->fd, b->buf + b->n, b->cap - b->n, 0);
            if (r <= 0) {
                b->state = 2;
                errors++;
                left--;
                continue;
            }
            b->n += (size_t) r;
            k = 1;
            /* whole frames */
            for (;;) {
                uint32_t    len;
                Llm__Event *ev;

                if (b->n < 4) {
                    break;
                }
                len = (uint32_t) b->buf[0] << 24 | (uint32_t) b->buf[1] << 16
                      | (uint32_t) b->buf[2] << 8 | b->buf[3];
                if (b->n < 4 + (size_t) len) {
                    break;
                }
                ev = llm__event__unpack(NULL, len, b->buf + 4);
                memmove(b->buf, b->buf + 4 + len, b->n - 4 - len);
                b->n -= 4 + len;
                if (ev == NULL) {
                    b->state = 2;
                    errors++;
                    left--;
                    break;
                }
                if (ev->kind_case == LLM__EVENT__KIND_DELTA
                    && ev->delta->n_tokens > 0)
                {
                    if (b->tokens == 0) {
                        b->t_first = now_s();
                    }
                    b->tokens += (uint32_t) ev->delta->n_tokens;
                } else if (ev->kind_case == LLM__EVENT__KIND_STARTED) {
                    b->prompt = ev->started->prompt_tokens;
                } else if (ev->kind_case == LLM__EVENT__KIND_DONE) {
                    b->t_done = now_s();
                    b->state = 1;
                    left--;
                } else if (ev->kind_case == LLM__EVENT__KIND_ERROR) {
                    fprintf(stderr, "llm-client: bench: %s\n",
                            ev->error->message);
                    b->state = 2;
                    errors++;
                    left--;
                }
                llm__event__free_unpacked(ev, NULL);
                if (b->state != 0) {
                    break;
                }
            }
        }
        (void) k;
    }
    for (i = 0; i < n; i++) {
        if (c[i].state == 1) {
            total += c[i].tokens;
            prompt += c[i].prompt;
            ttft[nt++] = (c[i].t_first - t0) * 1e3;
            if (c[i].tokens > 1) {
                decode += c[i].tokens - 1;
                if (tfirst == 0.0 || c[i].t_first < tfirst) {
                    tfirst = c[i].t_first;
                }
            }
            if (c[i].t_done > tlast) {
                tlast = c[i].t_done;
            }
        }
        close(c[i].fd);
        free(c[i].buf);
    }
    wall = tlast > t0 ? tlast - t0 : 0.0;
    decode = tlast > tfirst && tfirst > 0.0 ? decode / (tlast - tfirst) : 0.0;
    qsort(ttft, (size_t) nt, sizeof(double), dbl_cmp);
    printf("{\"clients\":%d,\"ok\":%d,\"errors\":%d,\"prompt_tokens_mean\":"
           "%.1f,\"completion_tokens\":%llu,\"wall_s\":%.3f,"
           "\"agg_tok_s\":%.2f,\"agg_decode_tok_s\":%.2f,"
           "\"ttft_p50_ms\":%.1f,\"ttft_p95_ms\":%.1f}\n", n, nt, errors,
           nt ? (double) prompt / nt : 0.0, (unsigned long long) total, wall,
           wall > 0 ? (double) total / wall : 0.0, decode,
           nt ? ttft[(nt - 1) / 2] : 0.0,
           nt ? ttft[(int) ((nt - 1) * 0.95 + 0.5)] : 0.0);
    free(c);
    free(pf);
    free(ttft);
    return errors ? 1 : 0;
}

static gen_t                    gx;
static json_t                  *j;
static uint8_t                 *rawb;
static Llm__DetokenizeRequest   dr = LLM__DETOKENIZE_REQUEST__INIT;

static void
free_generate(gen_t *x)
{
    for (size_t i = 0; i < x->g.n_messages; i++) {
        Llm__Message *m = x->g.messages[i];

        for (size_t k = 0; k < m->n_tool_calls; k++) {
            free(m->tool_calls[k]);
        }
        free(m->tool_calls);
        free(m);
    }
    free(x->g.messages);
    for (size_t i = 0; i < x->s.n_logit_bias; i++) {
        free(x->s.logit_bias[i]);
    }
    free(x->s.logit_bias);
    free(x->s.stop);
    free(x->tools);
    free(x->tool_choice);
    free(x->response_format);
    free(x->kwargs);
}

static int run(int argc, char **argv);

int
main(int argc, char **argv)
{
    int rc = run(argc, argv);

    free_generate(&gx);
    json_decref(j);
    free(rawb);
    free(dr.tokens);
    return rc;
}

static int
run(int argc, char **argv)
{
    enum {
        O_SOCKET = 1, O_TCP, O_INFO, O_TOKENIZE, O_ADDSP, O_PARSESP,
        O_DETOK, O_FILE, O_REPEAT, O_DISC, O_RAW, O_HALF, O_TEXT, O_TIMEOUT,
        O_BENCH, O_START, O_AUTH, O_HELP
    };
    static const struct option lo[] = {
        { "socket", 1, 0, O_SOCKET }, { "tcp", 1, 0, O_TCP },
        { "auth-file", 1, 0, O_AUTH },
        { "info", 0, 0, O_INFO }, { "tokenize", 1, 0, O_TOKENIZE },
        { "add-special", 0, 0, O_ADDSP }, { "parse-special", 0, 0, O_PARSESP },
        { "detokenize", 1, 0, O_DETOK }, { "file", 1, 0, O_FILE },
        { "repeat", 1, 0, O_REPEAT }, { "disconnect-after", 1, 0, O_DISC },
        { "raw", 1, 0, O_RAW }, { "half-close", 0, 0, O_HALF },
        { "text", 0, 0, O_TEXT }, { "timeout", 1, 0, O_TIMEOUT },
        { "bench", 1, 0, O_BENCH }, { "start-at", 1, 0, O_START },
        { "help", 0, 0, O_HELP }, { 0, 0, 0, 0 }
    };
    const char              *sock = NULL, *tcp = NULL, *file = NULL;
    const char              *tok_text = NULL, *detok = NULL, *raw = NULL;
    int                      info = 0, add_sp = 0, parse_sp = 0, half = 0;
    int                      text_only = 0, repeat = 1, disc = -1, o, fd;
    int                      rc = 0, deltas = 0, r, bench = 0;
    double                   timeout = 120.0, deadline, start_at = 0;
    Llm__Request             rq = LLM__REQUEST__INIT;
    Llm__InfoRequest         ir = LLM__INFO_REQUEST__INIT;
    Llm__TokenizeRequest     tr = LLM__TOKENIZE_REQUEST__INIT;
    json_error_t             je;
    size_t                   rawn = 0;

    memset(&gx, 0, sizeof(gx));
    while ((o = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
        switch (o) {
        case O_SOCKET: sock = optarg; break;
        case O_TCP: tcp = optarg; break;
        case O_AUTH: {
            char   *sec, *e;
            size_t  len;

            sec = llm_read_file(optarg, &len);
            if (sec == NULL) {
                fprintf(stderr, "llm-client: --auth-file %s: %s\n", optarg,
                        strerror(errno));
                return 2;
            }
            e = strpbrk(sec, "\r\n");
            if (e != NULL) {
                *e = '\0';
            }
            g_auth = sec;
            break;
        }
        case O_INFO: info = 1; break;
        case O_TOKENIZE: tok_text = optarg; break;
        case O_ADDSP: add_sp = 1; break;
        case O_PARSESP: parse_sp = 1; break;
        case O_DETOK: detok = optarg; break;
        case O_FILE: file = optarg; break;
        case O_REPEAT: repeat = atoi(optarg); break;
        case O_DISC: disc = atoi(optarg); break;
        case O_RAW: raw = optarg; break;
        case O_HALF: half = 1; break;
        case O_TEXT: text_only = 1; break;
        case O_TIMEOUT: timeout = strtod(optarg, NULL); break;
        case O_BENCH: bench = atoi(optarg); break;
        case O_START: start_at = strtod(optarg, NULL); break;
        case O_HELP: case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if ((sock == NULL) == (tcp == NULL)) {
        fprintf(stderr, "llm-client: give one of --socket or --tcp; see "
                "--help\n");
        return 2;
    }

    if (raw) {
        size_t l = strlen(raw);

        rawb = malloc(l / 2 + 1);
        for (size_t i = 0; i + 1 < l; i += 2) {
            int hi = hexval(raw[i]), lo2 = hexval(raw[i + 1]);

            if (hi < 0 || lo2 < 0) {
                fprintf(stderr, "llm-client: --raw: not hex at %zu\n", i);
                return 2;
            }
            rawb[rawn++] = (uint8_t) (hi << 4 | lo2);
        }
    } else if (info) {
        rq.kind_case = LLM__REQUEST__KIND_INFO;
        rq.info = &ir;
    } else if (tok_text) {
        tr.text = (char *) tok_text;
        tr.add_special = add_sp;
        tr.parse_special = parse_sp;
        rq.kind_case = LLM__REQUEST__KIND_TOKENIZE;
        rq.tokenize = &tr;
    } else if (detok) {
        char *s = strdup(detok), *t, *save = NULL;

        dr.tokens = calloc(strlen(detok) + 1, sizeof(int32_t));
        for (t = strtok_r(s, ", ", &save); t; t = strtok_r(NULL, ", ", &save)) {
            dr.tokens[dr.n_tokens++] = atoi(t);
        }
        free(s);
        rq.kind_case = LLM__REQUEST__KIND_DETOKENIZE;
        rq.detokenize = &dr;
    } else {
        if (file) {
            j = strcmp(file, "-") == 0 ? json_loadf(stdin, 0, &je)
                                       : json_load_file(file, 0, &je);
        } else if (optind < argc) {
            j = strcmp(argv[optind], "-") == 0
                ? json_loadf(stdin, 0, &je) : json_loads(argv[optind], 0, &je);
        } else {
            fprintf(stderr, "llm-client: no request; see --help\n");
            return 2;
        }
        if (!json_is_object(j)) {
            fprintf(stderr, "llm-client: request: %s (line %d)\n",
                    j ? "not a JSON object" : je.text, je.line);
            return 2;
        }
        if (build_generate(&gx, j) != 0) {
            return 2;
        }
    }

    if (bench > 0) {
        if (gx.root == NULL) {
            fprintf(stderr, "llm-client: --bench needs a Generate request\n");
            return 2;
        }
        return run_bench(sock, tcp, &gx, bench, timeout);
    }
    fd = connect_to(sock, tcp);
    if (fd < 0) {
        return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);

    /* A start gate: clients spawned one by one send at the same moment,
     * so tests of batching do not depend on how fast processes start. */
    if (start_at > 0) {
        struct timespec  ts;
        double           wait;

        clock_gettime(CLOCK_REALTIME, &ts);
        wait = start_at - ((double) ts.tv_sec + ts.tv_nsec / 1e9);
        if (wait > 0) {
            ts.tv_sec = (time_t) wait;
            ts.tv_nsec = (long) ((wait - (double) ts.tv_sec) * 1e9);
            nanosleep(&ts, NULL);
        }
    }
    deadline = now_s() + timeout;

    for (int round = 0; round < repeat; round++) {
        const Llm__Request *req = gx.root ? &gx.rq : &rq;
        int                 terminal = 0;

        if (raw) {
            if (write_all(fd, rawb, rawn) != 0) {
                fprintf(stderr, "llm-client: write: %s\n", strerror(errno));
                return 2;
            }
        } else if (send_request(fd, req) != 0) {
            fprintf(stderr, "llm-client: write: %s\n", strerror(errno));
            return 2;
        }
        if (half) {
            shutdown(fd, SHUT_WR);
        }

        while (!terminal) {
            uint8_t      hdr[4], *body;
            size_t       got;
            uint32_t     len;
            Llm__Event  *ev;
            json_t      *out;
            char        *line;

            r = read_full(fd, hdr, 4, deadline, &got);
            if (r == -3) {
                fprintf(stderr, "llm-client: timeout\n");
                return 3;
            }
            if (r != 0) {
                if (got == 0) {
                    if (raw) {
                        return rc;      /* the engine closed after Error */
                    }
                    fprintf(stderr, "llm-client: the engine closed the "
                            "connection\n");
                    return 4;
                }
                fprintf(stderr, "llm-client: truncated frame header\n");
                return 4;
            }
            len = (uint32_t) hdr[0] << 24 | (uint32_t) hdr[1] << 16
                  | (uint32_t) hdr[2] << 8 | hdr[3];
            body = malloc(len ? len : 1);
            r = read_full(fd, body, len, deadline, &got);
            if (r != 0) {
                fprintf(stderr, "llm-client: truncated frame (%zu of %u)\n",
                        got, len);
                free(body);
                return r == -3 ? 3 : 4;
            }
            ev = llm__event__unpack(NULL, len, body);
            free(body);
            if (ev == NULL) {
                fprintf(stderr, "llm-client: undecodable event frame\n");
                return 4;
            }
            out = msg_to_json(&ev->base);
            /* flatten the oneof: {"event": "delta", ...fields} */
            {
                const char *key;
                json_t     *val, *flat = json_object();

                json_object_foreach(out, key, val) {
                    json_object_set_new(flat, "event", json_string(key));
                    if (json_is_object(val)) {
                        json_object_update(flat, val);
                    }
                }
                json_decref(out);
                out = flat;
            }
            switch (ev->kind_case) {
            case LLM__EVENT__KIND_DELTA:
                deltas++;
                break;
            case LLM__EVENT__KIND_ERROR:
                rc = 1;
                terminal = 1;
                break;
            case LLM__EVENT__KIND_QUEUED: case LLM__EVENT__KIND_STARTED:
            case LLM__EVENT__KIND_TOOL_CALL:
                break;
            default:
                terminal = 1;
                break;
            }
            if (text_only && ev->kind_case == LLM__EVENT__KIND_DELTA) {
                fputs(ev->delta->text, stdout);
            } else if (text_only && ev->kind_case != LLM__EVENT__KIND_DONE
                       && ev->kind_case != LLM__EVENT__KIND_STARTED
                       && ev->kind_case != LLM__EVENT__KIND_QUEUED)
            {
                line = json_dumps(out, JSON_COMPACT);
                printf("\n%s\n", line);
                free(line);
            } else if (!text_only) {
                line = json_dumps(out, JSON_COMPACT);
                printf("%s\n", line);
                free(line);
            }
            json_decref(out);
            llm__event__free_unpacked(ev, NULL);
            if (disc >= 0 && deltas >= disc) {
                close(fd);
                return 0;
            }
        }
        if (text_only) {
            printf("\n");
        }
    }
    close(fd);
    return rc;
}
