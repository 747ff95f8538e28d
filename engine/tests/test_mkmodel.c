/*
 * test_mkmodel: llm-mkmodel's generator and llm-quantize's converter.
 *
 * 1. Determinism: same seed -> same bytes (also across thread counts),
 *    other seed -> other bytes.
 * 2. Every preset reopens with the reader and carries the hyperparameters
 *    and tensor shapes it declares.
 * 3. The vocabulary: sizes, special ids and types, every merge reachable.
 * 4. Quantization to every target: the file reopens, tensor types are the
 *    expected ones, and the dequantized weights are within the type's
 *    error of the source (relative RMS).
 * 5. llama.cpp's mix rules on an 8-expert model, the fallback for rows
 *    that do not fit a 256 block, and refusals with clear messages.
 * 6. Quantizing the shared F32 reference models reproduces llama-quantize's
 *    files byte for byte (skipped when ../shared is absent).
 */

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/gguf.h"
#include "model/model.h"
#include "mkmodel.h"
#include "onepass.h"
#include "kernels/quant.h"
#include "quantize.h"
#include "vocabgen.h"
#include "testkit.h"

static const char *tmpdir;

static int
same_file(const char *a, const char *b)
{
    FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
    int same = fa && fb, ca, cb;

    while (same) {
        ca = getc(fa);
        cb = getc(fb);
        if (ca != cb) {
            same = 0;
        }
        if (ca == EOF || cb == EOF) {
            break;
        }
    }
    if (fa) {
        fclose(fa);
    }
    if (fb) {
        fclose(fb);
    }
    return same;
}

static int
make(const char *preset, uint32_t type, uint64_t seed, uint32_t threads,
    const char *path)
{
    llm_mkmodel_params_t p;
    char err[512];
    int rc;

    rc = llm_mkmodel_preset(&p, preset, err, sizeof(err));
    if (rc == 0) {
        p.type = type;
        p.seed = seed;
        p.n_threads = threads;
        rc = llm_mkmodel_write(&p, path, NULL, err, sizeof(err));
    }
    CHECK(rc == 0, "mkmodel %s: %s", preset, err);
    return rc;
}

/* ---- 1 ---- */

static void
test_determinism(void)
{
    char a[128], b[128], c[128];

    snprintf(a, sizeof(a), "%s/a.gguf", tmpdir);
    snprintf(b, sizeof(b), "%s/b.gguf", tmpdir);
    snprintf(c, sizeof(c), "%s/c.gguf", tmpdir);
    make("tiny", LLM_TYPE_Q4_0, 7, 1, a);
    make("tiny", LLM_TYPE_Q4_0, 7, 3, b);
    make("tiny", LLM_TYPE_Q4_0, 8, 2, c);
    CHECK(same_file(a, b), "same seed, 1 vs 3 threads: files differ");
    CHECK(!same_file(a, c), "seeds 7 and 8 give the same file");
    tk_end_as("determinism: seed -> bytes, independent of threads");
}

/* Old Mixtral layout: per-expert tensors hold the merged tensor's rows. */
static void
test_split_experts(void)
{
    char a[128], b[128], err[512], name[96];
    llm_mkmodel_params_t p;
    llm_gguf_t *ga = NULL, *gb = NULL;
    int rc;

    snprintf(a, sizeof(a), "%s/merged.gguf", tmpdir);
    snprintf(b, sizeof(b), "%s/split.gguf", tmpdir);
    llm_mkmodel_preset(&p, "tiny-mixtral", err, sizeof(err));
    p.type = LLM_TYPE_Q8_0;
    rc = llm_mkmodel_write(&p, a, NULL, err, sizeof(err));
    p.split_experts = 1;
    rc |= llm_mkmodel_write(&p, b, NULL, err, sizeof(err));
    CHECK(rc == 0, "%s", err);
    if (rc == 0 && llm_gguf_open(&ga, a, err, sizeof(err)) == 0
        && llm_gguf_open(&gb, b, err, sizeof(err)) == 0)
    {
        static const char *parts[3] = { "gate", "up", "down" };
        for (int k = 0; k < 3; k++) {
            const llm_gguf_tensor_t *m, *e;
            snprintf(name, sizeof(name), "blk.2.ffn_%s_exps.weight",
                parts[k]);
            m = llm_gguf_find_tensor(ga, name);
            for (uint32_t x = 0; m != NULL && x < p.n_expert; x++) {
                snprintf(name, sizeof(name), "blk.2.ffn_%s.%u.weight",
                    parts[k], x);
                e = llm_gguf_find_tensor(gb, name);
                CHECK(e != NULL && e->n_dims == 2 && e->ne[0] == m->ne[0]
                      && e->ne[1] == m->ne[1]
                      && e->nbytes * p.n_expert == m->nbytes
                      && memcmp(e->data, (const uint8_t *) m->data
                                + x * e->nbytes, e->nbytes) == 0,
                    "%s differs from its rows of the merged tensor", name);
            }
        }
        CHECK(llm_gguf_find_tensor(gb, "blk.0.ffn_gate_exps.weight") == NULL,
            "split file has merged tensors");
    }
    llm_gguf_close(ga);
    llm_gguf_close(gb);
    p.arch[0] = 'q';
    CHECK(llm_mkmodel_check(&p, err, sizeof(err)) != 0, "split on non-llama");
    tk_end_as("split experts: old Mixtral layout holds the same weights");
}

/* ---- 2 ---- */

static uint32_t
get_u32(llm_gguf_t *g, const char *arch, const char *suffix)
{
    char key[128], err[256];
    uint32_t v = 0;

    snprintf(key, sizeof(key), "%s.%s", arch, suffix);
    CHECK(llm_gguf_get_u32(g, key, &v, err, sizeof(err)) == 0, "%s", err);
    return v;
}

static void
check_shape(llm_gguf_t *g, const char *name, int64_t ne0, int64_t ne1,
    int64_t ne2)
{
    const llm_gguf_tensor_t *t = llm_gguf_find_tensor(g, name);

    CHECK(t != NULL, "tensor %s missing", name);
    if (t != NULL) {
        CHECK(t->ne[0] == ne0 && t->ne[1] == ne1 && t->ne[2] == ne2,
            "%s: [%lld, %lld, %lld], expected [%lld, %lld, %lld]", name,
            (long long) t->ne[0], (long long) t->ne[1],
            (long long) t->ne[2], (long long) ne0, (long long) ne1,
            (long long) ne2);
    }
}

static void
test_presets(void)
{
    static const char *presets[] = { "tiny", "tiny-llama", "tiny-mixtral",
        "tiny-qwen2", "tiny-qwen3", "tiny-minimax" };
    char path[128], err[512], name[96];

    snprintf(path, sizeof(path), "%s/p.gguf", tmpdir);
    for (size_t k = 0; k < sizeof(presets) / sizeof(presets[0]); k++) {
        llm_mkmodel_params_t p;
        llm_gguf_t *g;
        llm_gguf_str_t s;
        int64_t E, Q, KV, X;
        uint32_t nt;

        llm_mkmodel_preset(&p, presets[k], err, sizeof(err));
        p.type = LLM_TYPE_F16;
        p.n_threads = 2;
        if (llm_mkmodel_write(&p, path, NULL, err, sizeof(err)) != 0) {
            CHECK(0, "%s: %s", presets[k], err);
            continue;
        }
        if (llm_gguf_open(&g, path, err, sizeof(err)) != 0) {
            CHECK(0, "%s: reopen: %s", presets[k], err);
            continue;
        }
        CHECK(llm_gguf_get_str(g, "general.architecture", &s, err,
                  sizeof(err)) == 0 && s.len == strlen(p.arch)
              && memcmp(s.ptr, p.arch, s.len) == 0, "%s: arch", presets[k]);
        CHECK(get_u32(g, p.arch, "block_count") == p.n_layer
              && get_u32(g, p.arch, "embedding_length") == p.n_embd
              && get_u32(g, p.arch, "attention.head_count") == p.n_head
              && get_u32(g, p.arch, "attention.head_count_kv")
                 == p.n_head_kv
              && get_u32(g, p.arch, "attention.key_length") == p.head_dim
              && get_u32(g, p.arch, "rope.dimension_count") == p.rope_dim
              && get_u32(g, p.arch, "context_length") == p.n_ctx,
            "%s: hyperparameters", presets[k]);
        CHECK(get_u32(g, "general", "file_type") == 1, "%s: file_type",
            presets[k]);
        E = p.n_embd;
        Q = (int64_t) p.n_head * p.head_dim;
        KV = (int64_t) p.n_head_kv * p.head_dim;
        X = p.n_expert;
        check_shape(g, "token_embd.weight", E, p.n_vocab, 1);
        check_shape(g, "output.weight", E, p.n_vocab, 1);
        check_shape(g, "output_norm.weight", E, 1, 1);
        nt = 3;
        for (uint32_t i = 0; i < p.n_layer; i++) {
#define SH(fmt, a, b, c) do {                                           \
            snprintf(name, sizeof(name), fmt, i);                       \
            check_shape(g, name, a, b, c);                              \
            nt++;                                                       \
        } while (0)
            SH("blk.%u.attn_norm.weight", E, 1, 1);
            SH("blk.%u.attn_q.weight", E, Q, 1);
            SH("blk.%u.attn_k.weight", E, KV, 1);
            SH("blk.%u.attn_v.weight", E, KV, 1);
            SH("blk.%u.attn_output.weight", Q, E, 1);
            SH("blk.%u.ffn_norm.weight", E, 1, 1);
            if (strcmp(p.arch, "qwen2") == 0) {
                SH("blk.%u.attn_q.bias", Q, 1, 1);
                SH("blk.%u.attn_k.bias", KV, 1, 1);
                SH("blk.%u.attn_v.bias", KV, 1, 1);
            }
            if (strcmp(p.arch, "qwen3") == 0
                || strcmp(p.arch, "qwen3moe") == 0)
            {
                SH("blk.%u.attn_q_norm.weight", p.head_dim, 1, 1);
                SH("blk.%u.attn_k_norm.weight", p.head_dim, 1, 1);
            }
            if (strcmp(p.arch, "minimax-m2") == 0) {
                SH("blk.%u.attn_q_norm.weight", Q, 1, 1);
                SH("blk.%u.attn_k_norm.weight", KV, 1, 1);
                SH("blk.%u.exp_probs_b.bias", X, 1, 1);
            }
            if (X > 0) {
                SH("blk.%u.ffn_gate_inp.weight", E, X, 1);
                SH("blk.%u.ffn_gate_exps.weight", E, p.n_ff_exp, X);
                SH("blk.%u.ffn_up_exps.weight", E, p.n_ff_exp, X);
                SH("blk.%u.ffn_down_exps.weight", p.n_ff_exp, E, X);
                snprintf(name, sizeof(name), "blk.%u.ffn_gate_inp.weight",
                    i);
                CHECK(llm_gguf_find_tensor(g, name)->type == LLM_TYPE_F32,
                    "%s: router not F32", presets[k]);
            } else {
                SH("blk.%u.ffn_gate.weight", E, p.n_ff, 1);
                SH("blk.%u.ffn_up.weight", E, p.n_ff, 1);
                SH("blk.%u.ffn_down.weight", p.n_ff, E, 1);
            }
#undef SH
        }
        CHECK(llm_gguf_n_tensors(g) == nt, "%s: %llu tensors, expected %u",
            presets[k], (unsigned long long) llm_gguf_n_tensors(g), nt);
        CHECK(llm_gguf_find_tensor(g, "blk.0.attn_norm.weight")->type
              == LLM_TYPE_F32
              && llm_gguf_find_tensor(g, "blk.0.attn_q.weight")->type
                 == LLM_TYPE_F16, "%s: norm F32, matrices F16", presets[k]);
        if (X > 0) {
            CHECK(get_u32(g, p.arch, "expert_count") == X
                  && get_u32(g, p.arch, "expert_used_count")
                     == p.n_expert_used, "%s: experts", presets[k]);
        }
        llm_gguf_close(g);
    }
    tk_end_as("presets: every arch reopens with its declared keys and "
        "shapes");
}

/* ---- 3 ---- */

static void
test_vocab(void)
{
    char path[128], err[512];
    llm_gguf_t *g;
    const llm_gguf_str_t *tok, *mer;
    const void *types;
    uint64_t nt, nm, ntt;
    uint32_t bos, eos, eot, pad;
    llm_vocabgen_t v;
    int rc;

    snprintf(path, sizeof(path), "%s/a.gguf", tmpdir);
    rc = llm_gguf_open(&g, path, err, sizeof(err));
    CHECK(rc == 0, "%s", err);
    if (rc != 0) {
        tk_end_as("vocabulary");
        return;
    }
    CHECK(llm_gguf_get_str_arr(g, "tokenizer.ggml.tokens", &nt, &tok, err,
              sizeof(err)) == 0 && nt == 1000, "tokens: %s", err);
    CHECK(llm_gguf_get_str_arr(g, "tokenizer.ggml.merges", &nm, &mer, err,
              sizeof(err)) == 0 && nm > 500, "merges");
    CHECK(llm_gguf_get_arr(g, "tokenizer.ggml.token_type", LLM_GGUF_INT32,
              &ntt, &types, err, sizeof(err)) == 0 && ntt == nt,
        "token_type");
    CHECK(llm_gguf_get_u32(g, "tokenizer.ggml.bos_token_id", &bos, err,
              sizeof(err)) == 0
          && llm_gguf_get_u32(g, "tokenizer.ggml.eos_token_id", &eos, err,
              sizeof(err)) == 0
          && llm_gguf_get_u32(g, "tokenizer.ggml.eot_token_id", &eot, err,
              sizeof(err)) == 0
          && llm_gguf_get_u32(g, "tokenizer.ggml.padding_token_id", &pad,
              err, sizeof(err)) == 0, "special ids: %s", err);
    if (nt == 1000 && ntt == nt) {
        const int32_t *ty = types;
        CHECK(tok[bos].len == 13 && memcmp(tok[bos].ptr, "<|endoftext|>",
              13) == 0 && ty[bos] == LLM_VG_CONTROL, "bos");
        CHECK(tok[eos].len == 10 && memcmp(tok[eos].ptr, "<|im_end|>", 10)
              == 0 && ty[eos] == LLM_VG_CONTROL && eot == eos, "eos/eot");
        CHECK(tok[0].len == 1 && tok[0].ptr[0] == '!', "GPT-2 order: "
            "token 0 is '!'");
        /* byte 0x20 maps to U+0120 'Ġ' (C4 A0) */
        CHECK(tok[188 + 32].len == 2
              && memcmp(tok[188 + 32].ptr, "\xc4\xa0", 2) == 0,
            "space byte token");
        for (uint64_t i = 0; i < nt; i++) {
            CHECK(ty[i] == LLM_VG_NORMAL || ty[i] == LLM_VG_CONTROL
                  || ty[i] == LLM_VG_USER_DEFINED, "token %llu type %d",
                (unsigned long long) i, ty[i]);
        }
        /* merge k is "a b" with a and b earlier tokens and a+b token
         * 256 + k */
        for (uint64_t k = 0; k < nm; k++) {
            const char *sp = memchr(mer[k].ptr, ' ', mer[k].len);
            const llm_gguf_str_t *res = &tok[256 + k];
            size_t la = sp ? (size_t) (sp - mer[k].ptr) : 0;
            size_t lb = sp ? mer[k].len - la - 1 : 0;
            int fa = 0, fb = 0;
            CHECK(sp != NULL && res->len == la + lb
                  && memcmp(res->ptr, mer[k].ptr, la) == 0
                  && memcmp(res->ptr + la, sp + 1, lb) == 0,
                "merge %llu does not build token %llu",
                (unsigned long long) k, (unsigned long long) (256 + k));
            for (uint64_t j = 0; sp && j < 256 + k; j++) {
                fa |= tok[j].len == la && memcmp(tok[j].ptr, mer[k].ptr,
                    la) == 0;
                fb |= tok[j].len == lb && memcmp(tok[j].ptr, sp + 1, lb)
                      == 0;
            }
            CHECK(fa && fb, "merge %llu: parts are not earlier tokens",
                (unsigned long long) k);
            if (!(fa && fb)) {
                break;
            }
        }
    }
    llm_gguf_close(g);

    /* sizes beyond what the trainer makes get [PADn]; bad inputs fail */
    rc = llm_vocabgen_build(&v, 33100, "gpt-2", err, sizeof(err));
    CHECK(rc == 0 && v.n_tokens == 33100 && v.n_merges == LLM_VG_MAX_MERGES
          && v.types[33099] == LLM_VG_UNUSED
          && strcmp(v.tokens[33099], "[PAD33099]") == 0, "pad fill: %s",
        err);
    if (rc == 0) {
        llm_vocabgen_free(&v);
    }
    CHECK(llm_vocabgen_build(&v, 100, "gpt-2", err, sizeof(err)) == -EINVAL
          && strstr(err, "minimum"), "too small: %s", err);
    CHECK(llm_vocabgen_build(&v, 1000, "llama3", err, sizeof(err))
          == -EINVAL && strstr(err, "llama3"), "bad pre: %s", err);
    CHECK(strstr(llm_vocabgen_chat_template(), "<tool_call>") != NULL
          && strstr(llm_vocabgen_chat_template(), "<tools>") != NULL
          && strstr(llm_vocabgen_chat_template(), "<tool_response>")
             != NULL, "chat template has Hermes tool calls");
    tk_end_as("vocabulary: GPT-2 byte order, specials, reachable merges, "
        "[PADn] fill");
}

/* ---- 4 ---- */

/* Relative RMS error of tensor name in q against the F32 source. */
static double
rel_err(llm_gguf_t *src, llm_gguf_t *q, const char *name, uint32_t *qtype)
{
    const llm_gguf_tensor_t *a = llm_gguf_find_tensor(src, name);
    const llm_gguf_tensor_t *b = llm_gguf_find_tensor(q, name);
    int64_t n0, rows;
    size_t rb;
    double num = 0, den = 0;
    float *x;

    if (a == NULL || b == NULL || a->type != LLM_TYPE_F32) {
        return INFINITY;
    }
    *qtype = b->type;
    n0 = b->ne[0];
    rows = b->ne[1] * b->ne[2] * b->ne[3];
    rb = llm_row_bytes(b->type, n0);
    x = malloc((size_t) n0 * sizeof(float));
    for (int64_t r = 0; r < rows; r++) {
        const float *ref = (const float *) a->data + r * n0;
        llm_dequantize_row(b->type, (const uint8_t *) b->data + r * rb, x,
            n0);
        for (int64_t i = 0; i < n0; i++) {
            double d = (double) x[i] - ref[i];
            num += d * d;
            den += (double) ref[i] * ref[i];
        }
    }
    free(x);
    return sqrt(num / den);
}

static void
test_quantize(void)
{
    static const struct { const char *q; uint32_t type; double tol; } qs[]
    = {
        { "F16", LLM_TYPE_F16, 1e-3 },   { "BF16", LLM_TYPE_BF16, 8e-3 },
        { "Q8_0", LLM_TYPE_Q8_0, 0.01 }, { "Q6_K", LLM_TYPE_Q6_K, 0.03 },
        { "Q5_K", LLM_TYPE_Q5_K, 0.05 }, { "Q4_K", LLM_TYPE_Q4_K, 0.10 },
        { "Q4_0", LLM_TYPE_Q4_0, 0.13 },
    };
    static const char *names[] = { "token_embd.weight",
        "blk.0.attn_q.weight", "blk.1.ffn_down_exps.weight",
        "blk.1.ffn_gate_exps.weight" };
    char src[128], out[128], err[512];
    llm_mkmodel_params_t p;
    llm_quantize_params_t qp;
    llm_quantize_stats_t st;
    llm_gguf_t *gs = NULL, *gq;
    int rc;

    snprintf(src, sizeof(src), "%s/src.gguf", tmpdir);
    snprintf(out, sizeof(out), "%s/q.gguf", tmpdir);
    llm_mkmodel_preset(&p, "tiny", err, sizeof(err));
    p.n_embd = 256;
    p.n_ff_exp = 256;
    p.n_layer = 2;
    p.n_vocab = 512;
    p.n_expert = 4;
    rc = llm_mkmodel_write(&p, src, NULL, err, sizeof(err));
    CHECK(rc == 0, "%s", err);
    if (rc != 0 || llm_gguf_open(&gs, src, err, sizeof(err)) != 0) {
        tk_end_as("quantize");
        return;
    }
    memset(&qp, 0, sizeof(qp));
    qp.n_threads = 2;
    qp.pure = 1;
    for (size_t k = 0; k < sizeof(qs) / sizeof(qs[0]); k++) {
        const llm_qtype_t *q = llm_qtype_find(qs[k].q);
        uint32_t ft;
        rc = llm_model_quantize(src, out, q, &qp, &st, err, sizeof(err));
        CHECK(rc == 0, "%s: %s", qs[k].q, err);
        if (rc != 0 || llm_gguf_open(&gq, out, err, sizeof(err)) != 0) {
            CHECK(0, "%s: reopen: %s", qs[k].q, err);
            continue;
        }
        CHECK(llm_gguf_get_u32(gq, "general.file_type", &ft, err,
              sizeof(err)) == 0 && ft == q->ftype, "%s: file_type %u",
            qs[k].q, ft);
        CHECK(llm_gguf_n_kv(gq) == llm_gguf_n_kv(gs)
              && llm_gguf_n_tensors(gq) == llm_gguf_n_tensors(gs),
            "%s: keys / tensors not all copied", qs[k].q);
        for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
            uint32_t qt = 0;
            double e = rel_err(gs, gq, names[i], &qt);
            CHECK(qt == qs[k].type && e < qs[k].tol, "%s %s: type %s, "
                "relative RMS error %.5f (bound %.3f)", qs[k].q, names[i],
                llm_type_name(qt), e, qs[k].tol);
        }
        CHECK(llm_gguf_find_tensor(gq, "blk.0.ffn_norm.weight")->type
              == LLM_TYPE_F32
              && llm_gguf_find_tensor(gq, "blk.0.ffn_gate_inp.weight")->type
                 == LLM_TYPE_F32, "%s: norm / router not kept F32",
            qs[k].q);
        CHECK(memcmp(llm_gguf_find_tensor(gq, "blk.0.ffn_norm.weight")->data,
              llm_gguf_find_tensor(gs, "blk.0.ffn_norm.weight")->data,
              256 * 4) == 0, "%s: norm not copied exactly", qs[k].q);
        llm_gguf_close(gq);
    }
    llm_gguf_close(gs);
    tk_end_as("quantize: F16 BF16 Q8_0 Q6_K Q5_K Q4_K Q4_0 reopen, types, "
        "error bounds");
}

/* ---- 5 ---- */

static uint32_t
type_of(llm_gguf_t *g, const char *name)
{
    const llm_gguf_tensor_t *t = llm_gguf_find_tensor(g, name);
    return t ? t->type : 999;
}

static void
test_mixes(void)
{
    char src[128], out[128], err[512];
    llm_mkmodel_params_t p;
    llm_quantize_params_t qp;
    llm_quantize_stats_t st;
    llm_gguf_t *g;
    int rc;

    snprintf(src, sizeof(src), "%s/src8.gguf", tmpdir);
    snprintf(out, sizeof(out), "%s/q8.gguf", tmpdir);
    llm_mkmodel_preset(&p, "tiny", err, sizeof(err));
    p.n_embd = 256;
    p.n_ff_exp = 256;
    p.n_layer = 8;
    p.n_vocab = 512;
    p.n_expert = 8;
    p.n_head = 8;                       /* attn_output rows of 256 */
    p.type = LLM_TYPE_F16;
    rc = llm_mkmodel_write(&p, src, NULL, err, sizeof(err));
    CHECK(rc == 0, "%s", err);
    memset(&qp, 0, sizeof(qp));
    qp.n_threads = 2;

    rc = llm_model_quantize(src, out, llm_qtype_find("Q4_K_M"), &qp, &st,
        err, sizeof(err));
    CHECK(rc == 0, "Q4_K_M: %s", err);
    if (rc == 0 && llm_gguf_open(&g, out, err, sizeof(err)) == 0) {
        /* use_more_bits over 8 layers: 0, 3, 6, 7 */
        static const int more[8] = { 1, 0, 0, 1, 0, 0, 1, 1 };
        char name[96];
        CHECK(type_of(g, "output.weight") == LLM_TYPE_Q6_K, "output Q6_K");
        CHECK(type_of(g, "token_embd.weight") == LLM_TYPE_Q4_K, "embd");
        for (int i = 0; i < 8; i++) {
            snprintf(name, sizeof(name), "blk.%d.attn_v.weight", i);
            CHECK(type_of(g, name) == LLM_TYPE_Q8_0, "%s Q8_0 (8 experts)",
                name);
            snprintf(name, sizeof(name), "blk.%d.attn_k.weight", i);
            CHECK(type_of(g, name) == LLM_TYPE_Q8_0, "%s Q8_0", name);
            snprintf(name, sizeof(name), "blk.%d.attn_output.weight", i);
            CHECK(type_of(g, name) == LLM_TYPE_Q5_K, "%s Q5_K", name);
            snprintf(name, sizeof(name), "blk.%d.attn_q.weight", i);
            CHECK(type_of(g, name) == LLM_TYPE_Q4_K, "%s Q4_K", name);
            snprintf(name, sizeof(name), "blk.%d.ffn_down_exps.weight", i);
            CHECK(type_of(g, name) == (more[i] ? LLM_TYPE_Q6_K
                                                : LLM_TYPE_Q4_K),
                "%s: %s", name, llm_type_name(type_of(g, name)));
            snprintf(name, sizeof(name), "blk.%d.ffn_up_exps.weight", i);
            CHECK(type_of(g, name) == LLM_TYPE_Q4_K, "%s Q4_K", name);
        }
        llm_gguf_close(g);
    }

    /* tied embeddings: token_embd takes output's rule (Q6_K) */
    {
        char tied[128];
        snprintf(tied, sizeof(tied), "%s/tied.gguf", tmpdir);
        p.tied = 1;
        rc = llm_mkmodel_write(&p, tied, NULL, err, sizeof(err));
        p.tied = 0;
        CHECK(rc == 0, "tied: %s", err);
        rc = llm_model_quantize(tied, out, llm_qtype_find("Q4_K_M"), &qp,
            &st, err, sizeof(err));
        if (rc == 0 && llm_gguf_open(&g, out, err, sizeof(err)) == 0) {
            CHECK(llm_gguf_find_tensor(g, "output.weight") == NULL
                  && type_of(g, "token_embd.weight") == LLM_TYPE_Q6_K,
                "tied: no output.weight, token_embd Q6_K");
            llm_gguf_close(g);
        } else {
            CHECK(0, "tied quantize: %s", err);
        }
    }

    rc = llm_model_quantize(src, out, llm_qtype_find("Q4_K_S"), &qp, &st,
        err, sizeof(err));
    if (rc == 0 && llm_gguf_open(&g, out, err, sizeof(err)) == 0) {
        CHECK(type_of(g, "blk.0.ffn_down_exps.weight") == LLM_TYPE_Q5_K
              && type_of(g, "blk.1.ffn_down_exps.weight") == LLM_TYPE_Q4_K,
            "Q4_K_S: first eighth of ffn_down Q5_K");
        llm_gguf_close(g);
    }

    rc = llm_model_quantize(src, out, llm_qtype_find("Q4_0"), &qp, &st,
        err, sizeof(err));
    if (rc == 0 && llm_gguf_open(&g, out, err, sizeof(err)) == 0) {
        CHECK(type_of(g, "output.weight") == LLM_TYPE_Q6_K
              && type_of(g, "blk.0.attn_v.weight") == LLM_TYPE_Q8_0
              && type_of(g, "blk.0.attn_q.weight") == LLM_TYPE_Q4_0,
            "Q4_0: output Q6_K, attn_v Q8_0 (8 experts), rest Q4_0");
        llm_gguf_close(g);
    }

    /* rows of 128 do not fit a 256 block: fall back as llama.cpp does,
     * Q4_K to Q5_0 (output: Q8_0) */
    snprintf(src, sizeof(src), "%s/tiny.gguf", tmpdir);
    make("tiny", LLM_TYPE_F32, 1, 2, src);
    rc = llm_model_quantize(src, out, llm_qtype_find("Q4_K_M"), &qp, &st,
        err, sizeof(err));
    CHECK(rc == 0 && st.n_fallback > 0, "fallback: %s", err);
    if (rc == 0 && llm_gguf_open(&g, out, err, sizeof(err)) == 0) {
        CHECK(type_of(g, "blk.0.attn_q.weight") == LLM_TYPE_Q5_0
              && type_of(g, "output.weight") == LLM_TYPE_Q8_0,
            "fallback types");
        llm_gguf_close(g);
    }

    /* refusals */
    rc = llm_model_quantize(out, src, llm_qtype_find("Q4_0"), &qp, &st,
        err, sizeof(err));
    CHECK(rc == -EINVAL && strstr(err, "already Q8_0")
          && strstr(err, "--allow-requantize"), "requantize: %s", err);
    snprintf(src, sizeof(src), "%s/none.gguf", tmpdir);
    rc = llm_model_quantize(src, out, llm_qtype_find("Q4_0"), &qp, &st,
        err, sizeof(err));
    CHECK(rc == -ENOENT && strstr(err, "none.gguf"), "missing: %s", err);
    CHECK(llm_qtype_find("IQ2_XXS") == NULL && llm_qtype_find("q4_k_m"),
        "target names");
    tk_end_as("mixes: llama.cpp rules for Q4_K_M / Q4_K_S / Q4_0, "
        "fallback, refusals");
}

/*
 * llama-quantize's own output: quantizing the shared F32 reference models
 * must reproduce the shared quantized files byte for byte (same tensor
 * order, types, metadata, layout and block contents).
 */
static void
test_llamacpp_identity(void)
{
    static const char *cases[][3] = {
        { "ref-qwen3moe-f32", "ref-qwen3moe-q4_k_m", "Q4_K_M" },
        { "ref-minimax-m2-f32", "ref-minimax-m2-q4_k_m", "Q4_K_M" },
        { "ref-llama-moe-f32", "ref-llama-moe-q4_k_m", "Q4_K_M" },
        { "ref-qwen3moe-f32", "ref-qwen3moe-bf16", "BF16" },
    };
    char in[512], ref[512], out[128], err[512];
    llm_quantize_params_t qp;
    int n = 0;

    snprintf(out, sizeof(out), "%s/ident.gguf", tmpdir);
    memset(&qp, 0, sizeof(qp));
    qp.n_threads = 2;
    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
        snprintf(in, sizeof(in), "%s/reference/%s.gguf",
            tk_shared_dir(), cases[k][0]);
        snprintf(ref, sizeof(ref), "%s/reference/%s.gguf",
            tk_shared_dir(), cases[k][1]);
        if (access(in, R_OK) != 0 || access(ref, R_OK) != 0) {
            tk_skip("llama-quantize identity", "%s absent", in);
            return;
        }
        if (llm_model_quantize(in, out, llm_qtype_find(cases[k][2]), &qp,
                NULL, err, sizeof(err)) != 0)
        {
            CHECK(0, "%s: %s", cases[k][0], err);
            continue;
        }
        CHECK(same_file(out, ref), "%s -> %s differs from llama-quantize's "
            "%s", cases[k][0], cases[k][2], ref);
        n++;
    }
    tk_end_as("llama-quantize identity: %d files byte-identical", n);
}

/*
 * The glm4moe and gpt-oss presets as the engine binds them: the leading
 * dense layer, the shared expert and the skipped NextN block; the window,
 * sinks, biases and YaRN; both run a prompt to finite logits.  (Their
 * numbers against llama.cpp are test_reference's, on the converter's
 * files.)
 */
static void
test_new_arch_presets(void)
{
    static const char *presets[] = { "tiny-glm4moe", "tiny-gpt-oss",
                                     "tiny-deepseek2", "tiny-qwen35moe" };
    static const int32_t ids[] = { 5, 17, 300, 42, 7, 999, 12, 64 };
    char path[128], err[512];
    uint32_t blocks[2] = { 0, 1 };

    snprintf(path, sizeof(path), "%s/arch.gguf", tmpdir);
    for (size_t k = 0; k < sizeof(presets) / sizeof(presets[0]); k++) {
        llm_mkmodel_params_t p;
        const llm_hparams_t *hp;
        llm_model_t *m = NULL;
        llm_kv_t *kv = NULL;
        llm_ctx_t *c = NULL;
        float *out = NULL;
        int finite = 1;

        llm_mkmodel_preset(&p, presets[k], err, sizeof(err));
        p.type = LLM_TYPE_Q8_0;
        p.n_threads = 2;
        if (llm_mkmodel_write(&p, path, NULL, err, sizeof(err)) != 0
            || llm_model_load(&m, path, NULL, err, sizeof(err)) != 0)
        {
            CHECK(0, "%s: %s", presets[k], err);
            continue;
        }
        hp = llm_model_hparams(m);
        if (strcmp(p.arch, "glm4moe") == 0) {
            CHECK(hp->n_layer == 4 && hp->n_layer_file == 5
                  && hp->n_layer_dense == 1 && hp->n_ff_shexp == 128
                  && hp->rope_dims == 16 && hp->gating == LLM_GATING_SIGMOID
                  && hp->expert_weights_scale == 2.5f,
                  "%s: layers %u of %u, dense %u, shexp %u, rope %u",
                  presets[k], hp->n_layer, hp->n_layer_file,
                  hp->n_layer_dense, hp->n_ff_shexp, hp->rope_dims);
        } else if (strcmp(p.arch, "deepseek2") == 0) {
            CHECK(hp->n_lora_kv == 64 && hp->n_lora_q == 96
                  && hp->head_dim == 64 + 16 && hp->head_dim_v == 64
                  && hp->mla_k == 48 && hp->mla_v == 32 && hp->rope_off == 64
                  && hp->n_expert_groups == 2 && hp->n_group_used == 1
                  && hp->n_layer_dense == 1,
                  "%s: latent %u, heads %u/%u, groups %u/%u", presets[k],
                  hp->n_lora_kv, hp->mla_k, hp->mla_v, hp->n_expert_groups,
                  hp->n_group_used);
        } else if (strcmp(p.arch, "qwen35moe") == 0) {
            CHECK(hp->n_layer == 4 && hp->n_layer_file == 5
                  && hp->n_layer_rec == 3 && hp->ssm_state == 32
                  && hp->ssm_k_heads == 2 && hp->ssm_v_heads == 4
                  && hp->ssm_inner == 128 && hp->ssm_d_conv == 4
                  && hp->attn_q_gate && hp->head_dim == 64
                  && hp->rope_dims == 16 && hp->n_ff_shexp == 128
                  && llm_kv_state_bytes(m) == 3 * 4 * (3 * 256 + 4 * 32 * 32),
                  "%s: layers %u (%u recurrent) of %u, state %u x %u/%u "
                  "heads", presets[k], hp->n_layer, hp->n_layer_rec,
                  hp->n_layer_file, hp->ssm_state, hp->ssm_k_heads,
                  hp->ssm_v_heads);
        } else {
            CHECK(hp->n_swa == 64 && hp->ffn_act == LLM_ACT_SWIGLU_OAI
                  && hp->n_layer == 4,
                  "%s: window %u", presets[k], hp->n_swa);
        }
        out = malloc(8 * (size_t) hp->n_vocab * sizeof(float));
        if (out == NULL
            || llm_kv_create(&kv, m, 2, 16, LLM_TYPE_F32, err,
                             sizeof(err)) != 0
            || llm_ctx_create(&c, m, kv, 2, 8, err, sizeof(err)) != 0
            || llm_onepass(c, ids, 8, blocks, 2, out, err, sizeof(err)) != 0)
        {
            CHECK(0, "%s: run: %s", presets[k], err);
        } else {
            for (size_t i = 0; i < 8 * (size_t) hp->n_vocab; i++) {
                finite &= isfinite(out[i]);
            }
            CHECK(finite, "%s: logits not finite", presets[k]);
        }
        free(out);
        llm_ctx_free(c);
        llm_kv_free(kv);
        llm_model_free(m);
    }
    tk_end_as("glm4moe, gpt-oss, deepseek2 and qwen35moe presets bind and "
              "run");
}

/*
 * The window --ctx may ask for (hparams n_ctx_max): the trained context
 * without RoPE scaling, factor x the original context with it (never
 * below context_length).
 */
static void
test_ctx_max(void)
{
    static const struct {
        const char *preset;
        float       linear, yarn;
        uint32_t    ctx, orig, want;
    } cs[] = {
        { "tiny-llama", 0.0f, 0.0f, 2048, 0, 2048 },
        { "tiny-llama", 4.0f, 0.0f, 2048, 0, 8192 },
        { "tiny-llama", 0.5f, 0.0f, 2048, 0, 2048 },
        { "tiny-gpt-oss", 0.0f, 4.0f, 4096, 512, 4096 },
        { "tiny-gpt-oss", 0.0f, 32.0f, 4096, 512, 16384 },
    };
    char path[128], err[512];
    llm_mkmodel_params_t p;
    llm_model_t *m;

    tk_begin("n_ctx_max: RoPE scaling stretches the trained window");
    snprintf(path, sizeof(path), "%s/ctx.gguf", tmpdir);
    for (size_t k = 0; k < sizeof(cs) / sizeof(cs[0]); k++) {
        m = NULL;
        llm_mkmodel_preset(&p, cs[k].preset, err, sizeof(err));
        p.n_ctx = cs[k].ctx;
        p.rope_linear = cs[k].linear;
        if (cs[k].yarn > 0.0f) {
            p.yarn_factor = cs[k].yarn;
            p.yarn_orig_ctx = cs[k].orig;
        }
        if (!CHECK(llm_mkmodel_write(&p, path, NULL, err, sizeof(err)) == 0
                   && llm_model_load(&m, path, NULL, err, sizeof(err)) == 0,
                   "%s: %s", cs[k].preset, err))
        {
            continue;
        }
        CHECK(llm_model_hparams(m)->n_ctx_train == cs[k].ctx
              && llm_model_hparams(m)->n_ctx_max == cs[k].want,
              "%s linear %g yarn %g: n_ctx_train %u, n_ctx_max %u, "
              "expected %u", cs[k].preset, (double) cs[k].linear,
              (double) cs[k].yarn, llm_model_hparams(m)->n_ctx_train,
              llm_model_hparams(m)->n_ctx_max, cs[k].want);
        llm_model_free(m);
    }
    unlink(path);
    tk_end();
}

int
main(void)
{
    tmpdir = tk_tmpdir("test_mkmodel");
    llm_simd_init();
    test_determinism();
    test_split_experts();
    test_presets();
    test_new_arch_presets();
    test_vocab();
    test_quantize();
    test_mixes();
    test_llamacpp_identity();
    test_ctx_max();
    return tk_done();
}
