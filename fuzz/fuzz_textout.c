/*
 * The answer's text path after the detokenizer: the reasoning split
 * (decode/reasoning.c) and then a tool-call family's parser
 * (decode/toolcall.c), as the scheduler chains them.
 *
 * Input: byte 0 picks the reasoning format (think, harmony, none) and
 * whether the prompt opened a think block, byte 1 the tool-call family,
 * byte 2 seeds the piece sizes; the rest is the model's text.  The text
 * goes through whole, then in pieces of 1..16 bytes: the reasoning, the
 * content and every call (name and concatenated arguments) must come out
 * the same both ways, as the streaming contract says (a marker may be
 * split anywhere).
 */

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "decode/reasoning.h"
#include "decode/toolcall.h"

#define FZ_CALLS  16

typedef struct {
    char    *buf[3];            /* reasoning, content, calls */
    size_t   len[3], cap[3];
    int      n_calls;
} fz_out_t;

static void
fz_add(fz_out_t *o, int k, const char *s, size_t n)
{
    char  *b;

    if (o->len[k] + n + 1 > o->cap[k]) {
        o->cap[k] = (o->len[k] + n + 1) * 2;
        b = realloc(o->buf[k], o->cap[k]);
        if (b == NULL) {
            abort();
        }
        o->buf[k] = b;
    }
    memcpy(o->buf[k] + o->len[k], s, n);
    o->len[k] += n;
    o->buf[k][o->len[k]] = '\0';
}

typedef struct {
    fz_out_t        *o;
    llm_toolcall_t  *tc;
} fz_chain_t;

static void
fz_content(void *sink, const char *s, size_t n)
{
    fz_add(sink, 1, s, n);
}

static void
fz_call(void *sink, uint32_t idx, const char *id, const char *name,
    const char *args, size_t n)
{
    fz_out_t  *o = sink;
    char       head[64];

    if (id != NULL && id[0] != '\0') {
        snprintf(head, sizeof(head), "|%u:", idx);
        fz_add(o, 2, head, strlen(head));
        fz_add(o, 2, name, strlen(name));
        fz_add(o, 2, "(", 1);
        o->n_calls++;
    }
    if (args != NULL && n > 0) {
        fz_add(o, 2, args, n);
    }
}

static void
fz_reasoning(void *ud, const char *s, size_t n)
{
    fz_add(((fz_chain_t *) ud)->o, 0, s, n);
}

static void
fz_answer(void *ud, const char *s, size_t n)
{
    fz_chain_t      *c = ud;
    llm_text_out_t   out = { fz_content, fz_call, c->o };

    if (c->tc != NULL) {
        llm_toolcall_feed(c->tc, s, n, 0, &out);
    } else {
        fz_add(c->o, 1, s, n);
    }
}

static void
fz_harmony_call(void *ud, const char *name, size_t nl, const char *args,
    size_t n)
{
    fz_chain_t  *c = ud;

    if (name != NULL) {
        fz_add(c->o, 2, "|h:", 3);
        fz_add(c->o, 2, name, nl);
        fz_add(c->o, 2, "(", 1);
    } else {
        fz_add(c->o, 2, args, n);
    }
}

static json_t  *fz_tools;

/* Runs text through the chain in pieces (sizes from seed; 0: whole). */
static void
fz_run(int rfmt, int inside, int tfmt, const uint8_t *text, size_t n,
    uint8_t seed, fz_out_t *o)
{
    llm_reasoning_out_t  ro = { fz_reasoning, fz_answer, fz_harmony_call,
                                NULL };
    llm_text_out_t       out = { fz_content, fz_call, o };
    fz_chain_t           chain = { o, NULL };
    llm_reasoning_t     *r;
    char                 err[256];
    size_t               at = 0, piece;
    uint32_t             rng = seed * 2654435761u + 1;

    memset(o, 0, sizeof(*o));
    for (int k = 0; k < 3; k++) {
        fz_add(o, k, "", 0);
    }
    ro.ud = &chain;
    r = llm_reasoning_create(rfmt, inside);
    if (r == NULL) {
        abort();
    }
    if (tfmt > LLM_TOOLFMT_NONE
        && llm_toolcall_create(&chain.tc, tfmt, fz_tools, 1, err,
                               sizeof(err)) != 0)
    {
        abort();
    }
    while (at < n) {
        rng = rng * 1103515245u + 12345u;
        piece = seed == 0 ? n - at : 1 + (rng >> 16) % 16;
        piece = piece > n - at ? n - at : piece;
        llm_reasoning_feed(r, (const char *) text + at, piece, 0, &ro);
        at += piece;
    }
    llm_reasoning_feed(r, "", 0, 1, &ro);
    if (chain.tc != NULL) {
        llm_toolcall_feed(chain.tc, "", 0, 1, &out);
        llm_toolcall_free(chain.tc);
    }
    llm_reasoning_free(r);
}

static void
fz_free(fz_out_t *o)
{
    for (int k = 0; k < 3; k++) {
        free(o->buf[k]);
    }
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz_out_t  whole, split;
    int       rfmt, inside, tfmt;

    if (size < 3) {
        return 0;
    }
    if (fz_tools == NULL) {
        /* minimax-m2 and glm4.5 convert values by these types */
        fz_tools = json_loads("[{\"type\":\"function\",\"function\":{"
                              "\"name\":\"f\",\"parameters\":{\"type\":"
                              "\"object\",\"properties\":{\"s\":{\"type\":"
                              "\"string\"},\"n\":{\"type\":\"integer\"}}}}}]",
                              0, NULL);
    }
    rfmt = data[0] % 3;
    inside = (data[0] >> 2) & 1;
    tfmt = data[1] % (LLM_TOOLFMT_QWEN3_CODER + 1);
    fz_run(rfmt, inside, tfmt, data + 3, size - 3, 0, &whole);
    fz_run(rfmt, inside, tfmt, data + 3, size - 3, (uint8_t) (data[2] | 1),
           &split);
    for (int k = 0; k < 3; k++) {
        if (whole.len[k] != split.len[k]
            || memcmp(whole.buf[k], split.buf[k], whole.len[k]) != 0)
        {
            fprintf(stderr, "textout: %s differs whole / in pieces "
                    "(reasoning %d, tools %d):\n[%s]\n[%s]\n",
                    k == 0 ? "reasoning" : k == 1 ? "content" : "calls",
                    rfmt, tfmt, whole.buf[k], split.buf[k]);
            abort();
        }
    }
    fz_free(&whole);
    fz_free(&split);
    return 0;
}
