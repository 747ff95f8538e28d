/*
 * The io_uring expert cache (docs/STREAMING.md): logits with experts streamed into a
 * cache smaller than the experts are bitwise those of the resident run, on
 * the MoE reference models and on a generated model ten times larger than
 * its 6-slot cache (prefill then decode steps, so slots are evicted and
 * re-read and prefetch hints are used), and on the ../shared/reference
 * files of every other type the engine runs; a read error (a truncated copy of
 * the file) fails the forward pass with a named error and no crash; a
 * batch whose experts outnumber the slots fails cleanly with the minimum.
 */

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "model/expert_cache.h"
#include "model/gguf.h"
#include "mkmodel.h"
#include "model/model.h"
#include "testkit.h"

#define N_PRE   12
#define N_DEC   10
#define N_ALL   (N_PRE + N_DEC)

/* One test point: what (detail) passes when ok. */
static void
check(int ok, const char *what, const char *detail)
{
    what += strspn(what, " ");
    tk_begin("%s%s%s%s", what, detail ? " (" : "", detail ? detail : "",
             detail ? ")" : "");
    CHECK(ok);
    tk_end();
}

/*
 * Prefill N_PRE tokens in one batch (pre_batch 1) or one by one, then
 * N_DEC decode steps; logits of every token to out.  Token ids are fixed,
 * so two runs feed the same inputs whatever their logits.
 */
static int
run(llm_model_t *m, llm_xcache_t *xc, int pre_batch, float *out, char *err,
    size_t errlen)
{
    const llm_hparams_t  *hp = llm_model_hparams(m);
    llm_kv_t             *kv = NULL;
    llm_ctx_t            *c = NULL;
    int32_t               tok[N_ALL], pos[N_ALL], seq[N_ALL];
    uint8_t               want[N_ALL];
    uint32_t              blocks[2] = { 1, 0 }, i, n, done;
    llm_seq_view_t        sv = { blocks, 2, NULL, 0, 0 };
    llm_batch_t           b;
    int                   rc;

    rc = llm_kv_create(&kv, m, 2, 16, LLM_TYPE_F32, err, errlen);
    if (rc == 0) {
        rc = llm_ctx_create(&c, m, kv, 2, N_ALL, err, errlen);
    }
    if (rc == 0) {
        llm_ctx_set_expert_source(c, xc ? llm_xcache_source(xc) : NULL);
        for (i = 0; i < N_ALL; i++) {
            tok[i] = (int32_t) ((i * 53 + 7) % (hp->n_vocab - 1));
            pos[i] = (int32_t) i;
            seq[i] = 0;
            want[i] = 1;
        }
        b.seq = seq;
        b.n_seqs = 1;
        b.seqs = &sv;
        for (done = 0; rc == 0 && done < N_ALL; done += n) {
            n = done == 0 && pre_batch ? N_PRE : 1;
            b.n_tokens = n;
            b.tokens = tok + done;
            b.pos = pos + done;
            b.logits = want + done;
            rc = llm_forward(c, &b, out + (size_t) done * hp->n_vocab, err,
                             errlen);
        }
    }
    llm_ctx_free(c);
    llm_kv_free(kv);
    return rc;
}

/* Whether a streamed expert of m gets regrouped in its slot: one of its
 * matrices has a slow file-layout gemm here and a regrouped type. */
static int
expert_slow(const llm_model_t *m)
{
    llm_expert_slices_t  sl;
    uint32_t             l;
    int                  k, slow = 0;

    for (l = 0; l < llm_model_hparams(m)->n_layer; l++) {
        if (llm_model_expert_slices(m, l, 0, &sl) == 0) {
            for (k = 0; k < 3; k++) {
                slow |= llm_repack_file_slow((llm_type_t) sl.type[k])
                        && llm_repack_type((llm_type_t) sl.type[k],
                                           sl.n_out[k]) != sl.type[k];
            }
            break;
        }
    }
    return slow;
}

/*
 * Resident vs streamed on one file, with a cache of cache_mb capped at
 * max_slots slots (0: no cap).
 */
static void
compare(const char *path, uint64_t cache_mb, uint32_t max_slots,
    int pre_batch)
{
    llm_model_t         *m = NULL, *ms = NULL;
    llm_model_opts_t     mo = { 0 };
    llm_xcache_opts_t    xo = { 0 };
    llm_xcache_t        *xc = NULL;
    llm_xcache_stats_t   st;
    const char          *name = strrchr(path, '/') ? strrchr(path, '/') + 1
                                                   : path;
    float               *a = NULL, *b = NULL;
    size_t               n;
    char                 err[512], d[320];
    uint64_t             slot, ex;
    int                  slow;

    if (llm_model_load(&m, path, NULL, err, sizeof(err)) < 0) {
        check(0, name, err);
        return;
    }
    n = (size_t) N_ALL * llm_model_hparams(m)->n_vocab;
    a = calloc(n, sizeof(float));
    b = calloc(n, sizeof(float));
    mo.expert_cache_mb = cache_mb;
    xo.cache_mb = cache_mb;
    xo.max_slots = max_slots;
    if (run(m, NULL, pre_batch, a, err, sizeof(err)) < 0
        || llm_model_load(&ms, path, &mo, err, sizeof(err)) < 0
        || llm_xcache_create(&xc, ms, &xo, err, sizeof(err)) < 0
        || run(ms, xc, pre_batch, b, err, sizeof(err)) < 0)
    {
        check(0, name, err);
        goto done;
    }
    llm_xcache_get_stats(xc, &st);
    llm_xcache_sizes(ms, &slot, &ex);
    snprintf(d, sizeof(d), "%u slots, experts %.1fx the cache; %llu hits, "
             "%llu misses, %llu prefetched (%llu used), %llu bytes read, %s",
             st.n_slots,
             (double) ex / ((double) st.n_slots * (double) st.slot_bytes),
             (unsigned long long) st.hits, (unsigned long long) st.misses,
             (unsigned long long) st.prefetch_issued,
             (unsigned long long) st.prefetch_useful,
             (unsigned long long) st.bytes_read,
             st.direct ? "O_DIRECT" : "buffered");
    tk_note("%s: %s\n", name, d);
    check(memcmp(a, b, n * sizeof(float)) == 0,
          "  streamed logits bitwise equal to resident", name);
    /* smaller than the experts: slots were evicted and experts re-read */
    check(st.misses > st.n_slots && st.bytes_read >= st.misses * (ex
          / ((uint64_t) llm_model_hparams(ms)->n_layer
             * llm_model_hparams(ms)->n_expert)),
          "  experts evicted and re-read, every miss read in full", NULL);
    check(st.prefetch_guessed > 0 && st.prefetch_right <= st.prefetch_guessed
          && st.prefetch_useful <= st.prefetch_issued,
          "  prefetch hints counted", NULL);
    /* where the file layout's gemm regroups on every call (AVX-512 Q8_0,
     * Q4_K, Q6_K) a slot is regrouped once, when first used; elsewhere
     * never */
    slow = expert_slow(ms);
    snprintf(d, sizeof(d), "%llu regroups, %llu loads",
             (unsigned long long) st.regroups,
             (unsigned long long) (st.misses + st.prefetch_issued));
    check(slow ? st.regroups > 0
                 && st.regroups <= st.misses + st.prefetch_issued
               : st.regroups == 0,
          slow ? "  slots regrouped once for the regrouped rows' kernel"
               : "  slots kept in the file's layout", d);
done:
    llm_xcache_free(xc);
    llm_model_free(ms);
    llm_model_free(m);
    free(a);
    free(b);
}

static int
make_model(const char *path, const char *arch, uint32_t n_embd,
    uint32_t n_expert, uint32_t n_used, int split, llm_type_t type,
    int tied)
{
    llm_mkmodel_params_t  p;
    char                  err[512];

    if (llm_mkmodel_preset(&p, strcmp(arch, "llama") == 0 ? "tiny-mixtral"
                                                          : "tiny",
                           err, sizeof(err)) < 0)
    {
        tk_begin("mkmodel %s", path);
        tk_fail("%s", err);
        tk_end();
        return -1;
    }
    p.n_embd = n_embd;
    p.n_ff_exp = n_embd;
    p.n_layer = 4;
    p.n_expert = n_expert;
    p.n_expert_used = n_used;
    p.type = type;
    p.tied = tied;
    p.split_experts = split;
    p.n_threads = 2;
    if (llm_mkmodel_check(&p, err, sizeof(err)) < 0
        || llm_mkmodel_write(&p, path, NULL, err, sizeof(err)) < 0)
    {
        tk_begin("mkmodel %s", path);
        tk_fail("%s", err);
        tk_end();
        return -1;
    }
    return 0;
}

/* Copy the first `keep` bytes of src to dst. */
static int
copy_prefix(const char *src, const char *dst, off_t keep)
{
    char     buf[65536];
    int      in, out;
    ssize_t  r;
    off_t    left = keep;

    in = open(src, O_RDONLY);
    out = open(dst, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (in < 0 || out < 0) {
        return -1;
    }
    while (left > 0) {
        r = read(in, buf, left < (off_t) sizeof(buf) ? (size_t) left
                                                     : sizeof(buf));
        if (r <= 0 || write(out, buf, (size_t) r) != r) {
            break;
        }
        left -= r;
    }
    close(in);
    close(out);
    return left == 0 ? 0 : -1;
}

/* A truncated file: the forward pass fails with the cache's named error. */
static void
read_error(const char *path, const char *dir)
{
    llm_model_t          *m = NULL;
    llm_model_opts_t      mo = { 0 };
    llm_xcache_opts_t     xo = { 0 };
    llm_xcache_t         *xc = NULL;
    llm_expert_slices_t   sl;
    const llm_hparams_t  *hp;
    char                  cut[600], err[512] = "";
    float                *out;
    int                   rc;

    snprintf(cut, sizeof(cut), "%s/truncated.gguf", dir);
    mo.expert_cache_mb = 1;
    if (llm_model_load(&m, path, &mo, err, sizeof(err)) < 0) {
        check(0, "read error", err);
        return;
    }
    hp = llm_model_hparams(m);
    /* cut in the middle of layer 2's expert 0 down slice */
    llm_model_expert_slices(m, 2, 0, &sl);
    if (copy_prefix(path, cut, (off_t) (sl.offset[2] + sl.bytes[2] / 2))
        < 0)
    {
        check(0, "read error", "cannot copy the model");
        llm_model_free(m);
        return;
    }
    xo.cache_mb = 1;
    xo.path = cut;
    out = calloc((size_t) N_ALL * hp->n_vocab, sizeof(float));
    rc = llm_xcache_create(&xc, m, &xo, err, sizeof(err));
    if (rc == 0) {
        rc = run(m, xc, 0, out, err, sizeof(err));
    }
    check(rc < 0 && strstr(err, "expert cache: reading layer") != NULL
          && strstr(err, cut) != NULL
          && strstr(err, "unexpected end of file") != NULL,
          "truncated file: named read error", err);
    llm_xcache_free(xc);
    llm_model_free(m);
    free(out);
    unlink(cut);
}

/* Slots fewer than the experts of one step: clean errors with a minimum. */
static void
too_small(const char *path)
{
    llm_model_t        *m = NULL;
    llm_model_opts_t    mo = { 0 };
    llm_xcache_opts_t   xo = { 0 };
    llm_xcache_t       *xc = NULL;
    char                err[512] = "";
    float              *out;
    int                 rc;

    mo.expert_cache_mb = 1;
    if (llm_model_load(&m, path, &mo, err, sizeof(err)) < 0) {
        check(0, "too small", err);
        return;
    }
    xo.cache_mb = 1;
    xo.max_slots = llm_model_hparams(m)->n_expert_used - 1;
    rc = llm_xcache_create(&xc, m, &xo, err, sizeof(err));
    check(rc < 0 && xc == NULL && strstr(err, "too small") != NULL
          && strstr(err, "--expert-cache-mb") != NULL,
          "fewer slots than experts per token: create fails", err);

    /* 6 slots, a 12-token batch needing more experts in a layer */
    xo.max_slots = 6;
    out = calloc((size_t) N_ALL * llm_model_hparams(m)->n_vocab,
                 sizeof(float));
    rc = llm_xcache_create(&xc, m, &xo, err, sizeof(err));
    if (rc == 0) {
        rc = run(m, xc, 1, out, err, sizeof(err));
    }
    check(rc == -ENOSPC && strstr(err, "expert cache too small") != NULL
          && strstr(err, "--expert-cache-mb") != NULL,
          "batch needing more experts than slots fails cleanly", err);
    if (xc != NULL) {
        /* and the cache still works for single tokens afterwards */
        rc = run(m, xc, 0, out, err, sizeof(err));
        check(rc == 0, "  single tokens after that error", rc ? err : NULL);
    }
    llm_xcache_free(xc);
    llm_model_free(m);
    free(out);
}

/*
 * With a cache, the weights regrouped into anonymous memory at load must
 * not be populated again in the mapping (they were resident twice: 87
 * MiB of RSS on the bench model, over the memory plan; BENCHMARKS.md).
 * The cache asks llm_model_regrouped() which tensors those are: true for
 * the regrouped attention matrices, false for the experts (streamed, in
 * the file's layout) and the token embeddings (read row by row).
 */
static void
regrouped_once(const char *path)
{
    llm_model_t              *m = NULL;
    llm_model_opts_t          mo = { 0 };
    const llm_gguf_t         *g;
    const llm_gguf_tensor_t  *t;
    const uint8_t            *base;
    char                      err[512] = "", d[256] = "";
    uint64_t                  rest, i, off, n_attn = 0, n_bad = 0;

    mo.expert_cache_mb = 4;
    mo.bind_only = 1;
    if (llm_model_load(&m, path, &mo, err, sizeof(err)) < 0) {
        check(0, "regrouped once", err);
        return;
    }
    rest = llm_model_regroup_bytes(m, 0);
    if (llm_model_prepare(m, &mo, err, sizeof(err)) < 0) {
        check(0, "regrouped once", err);
        llm_model_free(m);
        return;
    }
    if (rest == 0) {
        tk_skip("regrouped tensors known to the cache",
                "no regrouping on this CPU");
        llm_model_free(m);
        return;
    }
    g = llm_model_gguf(m);
    base = llm_gguf_map(g);
    for (i = 0; i < llm_gguf_n_tensors(g); i++) {
        t = llm_gguf_tensor_at(g, i);
        off = (uint64_t) ((const uint8_t *) t->data - base);
        if (strstr(t->name, "attn_q.weight") != NULL) {
            n_attn++;
            if (!llm_model_regrouped(m, off)) {
                n_bad++;
                snprintf(d, sizeof(d), "%s not regrouped", t->name);
            }
        } else if ((strstr(t->name, "_exps.") != NULL
                    || strcmp(t->name, "token_embd.weight") == 0)
                   && llm_model_regrouped(m, off))
        {
            n_bad++;
            snprintf(d, sizeof(d), "%s said regrouped", t->name);
        }
    }
    check(n_attn > 0 && n_bad == 0,
          "regrouped tensors known to the cache (not populated again)",
          d[0] ? d : NULL);
    llm_model_free(m);
}

/*
 * Regrouped (resident) against the file's layout (--no-regroup) on one
 * file: the same logits bit for bit.  On a Q8_0 model with its output
 * tied to the embeddings, the output gets a regrouped copy of its own
 * (llm_repack_file_slow) while the embeddings stay in the file.
 */
static void
regroup_vs_file(const char *path)
{
    llm_model_t       *m = NULL, *mf = NULL;
    llm_model_opts_t   mo = { 0 };
    float             *a = NULL, *b = NULL;
    size_t             n;
    char               err[512] = "";

    mo.no_regroup = 1;
    if (llm_model_load(&m, path, NULL, err, sizeof(err)) < 0
        || llm_model_load(&mf, path, &mo, err, sizeof(err)) < 0)
    {
        check(0, "regrouped vs the file layout", err);
        goto done;
    }
    n = (size_t) N_ALL * llm_model_hparams(m)->n_vocab;
    a = calloc(n, sizeof(float));
    b = calloc(n, sizeof(float));
    if (a == NULL || b == NULL
        || run(m, NULL, 1, a, err, sizeof(err)) < 0
        || run(mf, NULL, 1, b, err, sizeof(err)) < 0)
    {
        check(0, "regrouped vs the file layout", err);
        goto done;
    }
    check(memcmp(a, b, n * sizeof(float)) == 0,
          "tied Q8_0 output regrouped: logits bitwise those of the file"
          " layout (--no-regroup)", NULL);
done:
    llm_model_free(m);
    llm_model_free(mf);
    free(a);
    free(b);
}

/* "Q3_K/Q3_K/Q5_K": the types of layer 0's gate, up and down experts. */
static void
expert_types(const llm_model_t *m, char *buf, size_t len)
{
    static const char  *parts[] = { "gate", "up", "down" };
    const llm_gguf_tensor_t  *t;
    char                      name[64];
    size_t                    used = 0;
    int                       i;

    buf[0] = '\0';
    for (i = 0; i < 3 && used < len; i++) {
        snprintf(name, sizeof(name), "blk.0.ffn_%s_exps.weight", parts[i]);
        t = llm_gguf_find_tensor(llm_model_gguf(m), name);
        used += (size_t) snprintf(buf + used, len - used, "%s%s",
                                  i ? "/" : "",
                                  t ? llm_gguf_type_name(t->type) : "-");
    }
}

/*
 * The ../shared/reference files whose experts are of the types added
 * after the first eight (issue 32): streamed bitwise equal to resident,
 * as the Q4_0 ones above.  Skipped when ../shared is absent, or while
 * the file holds a type this engine does not run yet.
 */
static void
shared_refs(void)
{
    static const char  *names[] = {
        "ref-qwen3moe-q4_1", "ref-qwen3moe-q5_0", "ref-qwen3moe-q5_1",
        "ref-qwen3moe-q2_k", "ref-qwen3moe-q3_k_m", "ref-qwen3moe-iq4_nl",
        "ref-qwen3moe-iq4_xs", "ref-qwen3moe-mxfp4_moe",
        "ref-qwen3moe-iq1_s", "ref-qwen3moe-iq1_m",
        "ref-minimax-m2-q3_k_m", "ref-minimax-m2-mxfp4_moe",
        "ref-qwen3moe-iq2_xxs", "ref-qwen3moe-iq2_xs", "ref-qwen3moe-iq2_s",
        "ref-qwen3moe-iq3_xxs", "ref-qwen3moe-iq3_s",
    };
    llm_model_t  *m;
    char          path[1200], err[512], types[64];
    uint32_t      ne;
    size_t        i;

    for (i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        snprintf(path, sizeof(path), "%s/reference/%s.gguf",
                 tk_shared_dir(), names[i]);
        if (access(path, R_OK) != 0) {
            tk_skip(names[i], "%s absent", path);
            continue;
        }
        m = NULL;
        if (llm_model_load(&m, path, NULL, err, sizeof(err)) < 0) {
            if (strstr(err, "which this engine does not run yet") != NULL) {
                tk_skip(names[i], "%s", err);
            } else {
                check(0, names[i], err);
            }
            continue;
        }
        ne = llm_model_hparams(m)->n_expert;
        expert_types(m, types, sizeof(types));
        llm_model_free(m);
        tk_note("%s: experts %s\n", names[i], types);
        compare(path, 64, ne, 1);
    }
}

int
main(void)
{
    static const char  *refs[] = {
        "engine/tests/data/reference/ref-qwen3moe-q4_0.gguf",
        "engine/tests/data/reference/ref-minimax-m2-q4_0.gguf",
        "engine/tests/data/reference/ref-llama-moe-q4_0.gguf",
        /* a leading dense layer, shared experts, a NextN block */
        "engine/tests/data/reference-arch/ref-glm4moe-q4_k_m.gguf",
        /* expert biases, MXFP4 experts, sliding window and sinks */
        "engine/tests/data/reference-arch/ref-gpt-oss-mxfp4_moe.gguf",
        /* MLA, group-limited routing */
        "engine/tests/data/reference-arch/ref-deepseek2-q4_k_m.gguf",
        /* gated delta net layers (a state per sequence), gated shared
         * expert, an MTP block */
        "engine/tests/data/reference-arch/ref-qwen35moe-q4_k_m.gguf",
        NULL
    };
    llm_model_t        *m;
    const char         *dir;
    char                gen[600], mix[600], big[600], err[512];
    uint32_t            ne;
    int                 i;

    /* reference models: one layer's worth of slots, so prefill fits */
    for (i = 0; refs[i] != NULL; i++) {
        if (llm_model_load(&m, refs[i], NULL, err, sizeof(err)) < 0) {
            check(0, refs[i], err);
            continue;
        }
        ne = llm_model_hparams(m)->n_expert;
        llm_model_free(m);
        compare(refs[i], 64, ne, 1);
    }
    shared_refs();

    dir = tk_tmpdir("test_expert_cache");
    snprintf(gen, sizeof(gen), "%s/gen-16x4.gguf", dir);
    snprintf(mix, sizeof(mix), "%s/gen-split.gguf", dir);
    if (make_model(gen, "qwen3moe", 256, 16, 4, 0, LLM_TYPE_Q4_0, 0) == 0) {
        /* 64 experts through 6 slots, one token per step */
        compare(gen, 64, 6, 0);
        read_error(gen, dir);
        too_small(gen);
        unlink(gen);
    }
    /* attention matrices with rows in runs of 16 (regrouped) */
    snprintf(big, sizeof(big), "%s/gen-1024.gguf", dir);
    if (make_model(big, "qwen3moe", 1024, 8, 2, 0, LLM_TYPE_Q4_0, 0) == 0) {
        regrouped_once(big);
        unlink(big);
    }
    /* Q8_0 (Q8_0_R16 resident, the file layout streamed), output tied */
    snprintf(big, sizeof(big), "%s/gen-q8-tied.gguf", dir);
    if (make_model(big, "qwen3moe", 256, 8, 2, 0, LLM_TYPE_Q8_0, 1) == 0) {
        compare(big, 64, 8, 1);
        regroup_vs_file(big);
        unlink(big);
    }
    /* old Mixtral layout: one tensor per expert */
    if (make_model(mix, "llama", 128, 8, 2, 1, LLM_TYPE_Q4_0, 0) == 0) {
        compare(mix, 64, 5, 0);
        unlink(mix);
    }
    return tk_done();
}
