/*
 * The GGUF loader: the header, key/values and tensor table parsed from a
 * file (a memfd holding the input, opened by its /proc/self/fd path so
 * the real open/fstat/mmap path runs), every key/value and tensor read
 * back, then what a model load does with them: the vocabulary, the chat
 * template, and llm_model_load (hyperparameters, tensor binding).
 */

#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fuzz_common.h"
#include "model/model.h"
#include "template/template.h"

static int  mfd = -1;
static char mpath[64];

int
LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void) argc;
    (void) argv;
    mfd = memfd_create("fuzz.gguf", 0);
    if (mfd < 0) {
        perror("memfd_create");
        exit(1);
    }
    snprintf(mpath, sizeof(mpath), "/proc/self/fd/%d", mfd);
    return 0;
}

/* Touch every byte the loader says belongs to a key/value or tensor. */
static void
walk(const llm_gguf_t *g)
{
    const uint8_t *map = llm_gguf_map(g);
    uint64_t       fsize = llm_gguf_file_size(g), sum = 0;

    for (uint64_t i = 0; i < llm_gguf_n_kv(g); i++) {
        const llm_gguf_kv_t *kv = llm_gguf_kv_at(g, i);

        sum += kv->key.len ? (uint8_t) kv->key.ptr[kv->key.len - 1] : 0;
        if (kv->strs) {
            uint64_t n = kv->type == LLM_GGUF_ARRAY ? kv->arr_n : 1;

            for (uint64_t k = 0; k < n; k++) {
                if (kv->strs[k].len) {
                    sum += (uint8_t) kv->strs[k].ptr[kv->strs[k].len - 1];
                }
            }
        }
        (void) llm_gguf_find_kv(g, "general.architecture");
    }
    for (uint64_t i = 0; i < llm_gguf_n_tensors(g); i++) {
        const llm_gguf_tensor_t *t = llm_gguf_tensor_at(g, i);
        const uint8_t           *d = t->data;

        if (t->nbytes == 0) {
            continue;
        }
        if (d < map || d + t->nbytes > map + fsize) {
            fprintf(stderr, "tensor %s: %llu bytes outside the file\n",
                    t->name, (unsigned long long) t->nbytes);
            abort();
        }
        sum += d[0] + d[t->nbytes - 1];
        (void) llm_gguf_find_tensor(g, t->name);
    }
    (void) sum;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    llm_gguf_t        *g = NULL;
    llm_vocab_t       *v = NULL;
    llm_tmpl_t        *t = NULL;
    llm_model_t       *m = NULL;
    llm_model_opts_t   mo = { .no_prefault = 1 };
    llm_gguf_str_t     ts;
    char               err[512];

    if (ftruncate(mfd, 0) != 0
        || pwrite(mfd, data, size, 0) != (ssize_t) size)
    {
        abort();
    }
    if (llm_gguf_open(&g, mpath, err, sizeof(err)) != 0) {
        return 0;
    }
    walk(g);
    if (llm_vocab_load(&v, g, err, sizeof(err)) == 0) {
        llm_tokens_t toks = { 0 };

        (void) llm_tokenize(v, "Hello <|im_start|> world", 24,
                            LLM_TOK_PARSE_SPECIAL | LLM_TOK_ADD_SPECIAL,
                            &toks, err, sizeof(err));
        llm_tokens_free(&toks);
    }
    if (llm_gguf_get_str(g, "tokenizer.chat_template", &ts, err,
                         sizeof(err)) == 0)
    {
        (void) llm_tmpl_compile(&t, ts.ptr, ts.len, err, sizeof(err));
    }
    if (llm_model_load(&m, mpath, &mo, err, sizeof(err)) == 0) {
        (void) llm_model_hparams(m);
        llm_model_free(m);
    }
    llm_tmpl_free(t);
    llm_vocab_free(v);
    llm_gguf_close(g);
    return 0;
}
