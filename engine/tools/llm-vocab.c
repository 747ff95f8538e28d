/*
 * llm-vocab: Hugging Face tokenizer.json (+ tokenizer_config.json) to a
 * vocabulary-only GGUF carrying the tokenizer.ggml.* keys the way
 * llama.cpp's convert_hf_to_gguf.py writes them for byte-level BPE models:
 *
 *   tokens      model.vocab and added_tokens by id; ids nobody uses become
 *               "[PADn]" (type UNUSED)
 *   token_type  NORMAL; added tokens CONTROL when "special" or looking
 *               special (<|...|>, <｜...｜>, <pad>, ...), else USER_DEFINED
 *   merges      "left right" strings in rank order
 *   pre         from the pre_tokenizer's regex (or --pre)
 *   bos/eos/unknown/seperator/padding token ids, add_bos/add_eos_token
 *               from tokenizer_config.json (or the TemplateProcessing
 *               post-processor), chat_template
 *
 *   llm-vocab -t tokenizer.json [-c tokenizer_config.json] -o out.gguf
 *             [--pre NAME] [--arch NAME] [--name NAME] [--vocab-size N]
 */

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "model/gguf.h"

#define TT_NORMAL        1
#define TT_CONTROL       3
#define TT_USER_DEFINED  4
#define TT_UNUSED        5

static void
usage(FILE *f)
{
    fprintf(f,
        "usage: llm-vocab -t tokenizer.json [-c tokenizer_config.json] "
        "-o out.gguf\n"
        "                 [--pre NAME] [--arch NAME] [--name NAME] "
        "[--vocab-size N]\n"
        "  -t FILE         Hugging Face tokenizer.json (byte-level BPE)\n"
        "  -c FILE         tokenizer_config.json: special tokens, add_bos, "
        "chat template\n"
        "  -o FILE         GGUF to write (tokenizer keys only, no tensors)\n"
        "  --pre NAME      tokenizer.ggml.pre (default: recognised from the "
        "pre_tokenizer regex)\n"
        "  --arch NAME     general.architecture (default llama)\n"
        "  --name NAME     general.name (default: vocab)\n"
        "  --vocab-size N  pad the vocabulary to N tokens with [PADn]\n");
}

/* Split patterns of known tokenizer.json files -> llama.cpp pre names. */
static const struct {
    const char *regex;
    const char *pre;
} known_pre[] = {
    { "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?"
      "[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+", "qwen2" },
    { "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}"
      "| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
      "llama-bpe" },
    { "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}"
      "\\p{Lm}\\p{Lo}\\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\\r\\n\\p{L}"
      "\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}"
      "\\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+"
      "[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+", "gpt-4o" },
    { "\\p{N}{1,3}", "deepseek-v3" },
    { "\\s?\\p{L}+", "deepseek-coder" },
};

/* First Split regex of the pre_tokenizer (recursing into Sequence). */
static const char *
first_split_regex(json_t *pt, int *byte_level_regex)
{
    json_t      *a, *e, *pat;
    const char  *type, *r;
    size_t       i;

    if (!json_is_object(pt)) {
        return NULL;
    }
    type = json_string_value(json_object_get(pt, "type"));
    if (type == NULL) {
        return NULL;
    }
    if (strcmp(type, "Sequence") == 0) {
        a = json_object_get(pt, "pretokenizers");
        json_array_foreach(a, i, e) {
            r = first_split_regex(e, byte_level_regex);
            if (r != NULL) {
                return r;
            }
        }
        return NULL;
    }
    if (strcmp(type, "Split") == 0) {
        pat = json_object_get(pt, "pattern");
        return json_string_value(json_object_get(pat, "Regex"));
    }
    if (strcmp(type, "ByteLevel") == 0
        && json_is_true(json_object_get(pt, "use_regex")))
    {
        *byte_level_regex = 1;
    }
    return NULL;
}

static int
looks_special(const char *t)
{
    size_t  n = strlen(t);

    if (strcmp(t, "<pad>") == 0 || strcmp(t, "<mask>") == 0
        || strcmp(t, "<2mass>") == 0 || strcmp(t, "[@BOS@]") == 0)
    {
        return 1;
    }
    if (n >= 4 && strncmp(t, "<|", 2) == 0 && strcmp(t + n - 2, "|>") == 0) {
        return 1;
    }
    /* <｜ ... ｜> (fullwidth bars, DeepSeek) */
    if (n >= 8 && strncmp(t, "<\xef\xbd\x9c", 4) == 0
        && strcmp(t + n - 4, "\xef\xbd\x9c>") == 0)
    {
        return 1;
    }
    if (n >= 8 && strncmp(t, "<unused", 7) == 0 && t[n - 1] == '>') {
        return 1;
    }
    return 0;
}

/* A special token in tokenizer_config.json: "text" or {"content": ...}. */
static const char *
config_token(json_t *cfg, const char *key)
{
    json_t  *t = json_object_get(cfg, key);

    if (json_is_string(t)) {
        return json_string_value(t);
    }
    if (json_is_object(t)) {
        return json_string_value(json_object_get(t, "content"));
    }
    return NULL;
}

typedef struct {
    const char  **tok;
    uint8_t      *type;
    size_t        n;
} vocab_t;

static int32_t
find_id(const vocab_t *v, const char *text)
{
    size_t  i;

    for (i = 0; i < v->n; i++) {
        if (v->tok[i] && strcmp(v->tok[i], text) == 0) {
            return (int32_t) i;
        }
    }
    return -1;
}

int
main(int argc, char **argv)
{
    const char         *tpath = NULL, *cpath = NULL, *opath = NULL;
    const char         *pre = NULL, *arch = "llama", *name = "vocab";
    json_t             *tj = NULL, *cj = NULL, *model, *jv, *added, *e;
    json_t             *merges, *pp;
    json_error_t        je;
    llm_gguf_writer_t  *w = NULL;
    vocab_t             v = { 0 };
    const char         *key, **mstr = NULL, *s;
    char              **pads = NULL, **mown = NULL, err[512], kbuf[128];
    size_t              i, n_merges = 0, vocab_size = 0, n_added;
    size_t             *lens = NULL;
    int32_t            *types = NULL, id;
    int                 i_arg, status = 1, rc = 0, blr = 0;
    long long           want_size = 0;

    for (i_arg = 1; i_arg < argc; i_arg++) {
        if (strcmp(argv[i_arg], "--help") == 0
            || strcmp(argv[i_arg], "-h") == 0)
        {
            usage(stdout);
            return 0;
        }
        if (i_arg + 1 >= argc) {
            fprintf(stderr, "llm-vocab: '%s' needs a value\n", argv[i_arg]);
            usage(stderr);
            return 2;
        }
        if (strcmp(argv[i_arg], "-t") == 0) {
            tpath = argv[++i_arg];
        } else if (strcmp(argv[i_arg], "-c") == 0) {
            cpath = argv[++i_arg];
        } else if (strcmp(argv[i_arg], "-o") == 0) {
            opath = argv[++i_arg];
        } else if (strcmp(argv[i_arg], "--pre") == 0) {
            pre = argv[++i_arg];
        } else if (strcmp(argv[i_arg], "--arch") == 0) {
            arch = argv[++i_arg];
        } else if (strcmp(argv[i_arg], "--name") == 0) {
            name = argv[++i_arg];
        } else if (strcmp(argv[i_arg], "--vocab-size") == 0) {
            want_size = atoll(argv[++i_arg]);
        } else {
            fprintf(stderr, "llm-vocab: unknown argument '%s'\n",
                    argv[i_arg]);
            usage(stderr);
            return 2;
        }
    }
    if (tpath == NULL || opath == NULL) {
        usage(stderr);
        return 2;
    }

    tj = json_load_file(tpath, 0, &je);
    if (tj == NULL) {
        fprintf(stderr, "llm-vocab: %s:%d: %s\n", tpath, je.line, je.text);
        goto done;
    }
    if (cpath != NULL) {
        cj = json_load_file(cpath, JSON_DECODE_INT_AS_REAL, &je);
        if (cj == NULL) {
            fprintf(stderr, "llm-vocab: %s:%d: %s\n", cpath, je.line,
                    je.text);
            goto done;
        }
    }

    model = json_object_get(tj, "model");
    s = json_string_value(json_object_get(model, "type"));
    if (s == NULL || strcmp(s, "BPE") != 0
        || json_is_true(json_object_get(model, "byte_fallback")))
    {
        fprintf(stderr, "llm-vocab: %s: model.type is '%s'%s; only "
                "byte-level BPE (\"gpt2\") is supported\n", tpath,
                s ? s : "(none)",
                json_is_true(json_object_get(model, "byte_fallback"))
                ? " with byte_fallback" : "");
        goto done;
    }

    /* vocabulary size: highest id + 1 over vocab and added tokens */
    jv = json_object_get(model, "vocab");
    added = json_object_get(tj, "added_tokens");
    if (!json_is_object(jv)) {
        fprintf(stderr, "llm-vocab: %s: model.vocab: expected an object\n",
                tpath);
        goto done;
    }
    json_object_foreach(jv, key, e) {
        if (!json_is_integer(e) || json_integer_value(e) < 0
            || json_integer_value(e) >= (1 << 30))
        {
            fprintf(stderr, "llm-vocab: %s: model.vocab[\"%s\"]: expected "
                    "an id in 0 .. 2^30\n", tpath, key);
            goto done;
        }
        if ((size_t) json_integer_value(e) + 1 > vocab_size) {
            vocab_size = (size_t) json_integer_value(e) + 1;
        }
    }
    n_added = json_array_size(added);
    for (i = 0; i < n_added; i++) {
        e = json_array_get(added, i);
        jv = json_object_get(e, "id");
        if (!json_is_integer(jv) || json_integer_value(jv) < 0
            || json_integer_value(jv) >= (1 << 30)
            || !json_is_string(json_object_get(e, "content")))
        {
            fprintf(stderr, "llm-vocab: %s: added_tokens[%zu]: expected id "
                    "and content\n", tpath, i);
            goto done;
        }
        if ((size_t) json_integer_value(jv) + 1 > vocab_size) {
            vocab_size = (size_t) json_integer_value(jv) + 1;
        }
    }
    if (want_size > 0) {
        if ((size_t) want_size < vocab_size) {
            fprintf(stderr, "llm-vocab: --vocab-size %lld is smaller than "
                    "the %zu ids in %s\n", want_size, vocab_size, tpath);
            goto done;
        }
        vocab_size = (size_t) want_size;
    }

    v.n = vocab_size;
    v.tok = calloc(vocab_size, sizeof(char *));
    v.type = calloc(vocab_size, 1);
    lens = calloc(vocab_size, sizeof(size_t));
    types = calloc(vocab_size, sizeof(int32_t));
    pads = calloc(vocab_size, sizeof(char *));
    if (!v.tok || !v.type || !lens || !types || !pads) {
        fprintf(stderr, "llm-vocab: out of memory\n");
        goto done;
    }

    jv = json_object_get(model, "vocab");
    json_object_foreach(jv, key, e) {
        v.tok[json_integer_value(e)] = key;
        v.type[json_integer_value(e)] = TT_NORMAL;
    }
    for (i = 0; i < n_added; i++) {
        e = json_array_get(added, i);
        id = (int32_t) json_integer_value(json_object_get(e, "id"));
        v.tok[id] = json_string_value(json_object_get(e, "content"));
        v.type[id] = (json_is_true(json_object_get(e, "special"))
                      || looks_special(v.tok[id])) ? TT_CONTROL
                                                   : TT_USER_DEFINED;
    }
    for (i = 0; i < vocab_size; i++) {
        if (v.tok[i] == NULL) {
            if (asprintf(&pads[i], "[PAD%zu]", i) < 0) {
                fprintf(stderr, "llm-vocab: out of memory\n");
                goto done;
            }
            v.tok[i] = pads[i];
            v.type[i] = TT_UNUSED;
        }
        lens[i] = strlen(v.tok[i]);
        types[i] = v.type[i];
    }

    /* merges: "a b" strings, or ["a", "b"] pairs in newer files */
    merges = json_object_get(model, "merges");
    n_merges = json_array_size(merges);
    mstr = calloc(n_merges ? n_merges : 1, sizeof(char *));
    mown = calloc(n_merges ? n_merges : 1, sizeof(char *));
    if (mstr == NULL || mown == NULL) {
        fprintf(stderr, "llm-vocab: out of memory\n");
        goto done;
    }
    for (i = 0; i < n_merges; i++) {
        e = json_array_get(merges, i);
        if (json_is_string(e)) {
            mstr[i] = json_string_value(e);
        } else if (json_is_array(e) && json_array_size(e) == 2
                   && json_is_string(json_array_get(e, 0))
                   && json_is_string(json_array_get(e, 1)))
        {
            if (asprintf(&mown[i], "%s %s",
                         json_string_value(json_array_get(e, 0)),
                         json_string_value(json_array_get(e, 1))) < 0)
            {
                fprintf(stderr, "llm-vocab: out of memory\n");
                goto done;
            }
            mstr[i] = mown[i];
        } else {
            fprintf(stderr, "llm-vocab: %s: model.merges[%zu]: expected "
                    "\"a b\" or [\"a\", \"b\"]\n", tpath, i);
            goto done;
        }
    }

    if (pre == NULL) {
        s = first_split_regex(json_object_get(tj, "pre_tokenizer"), &blr);
        for (i = 0; s && i < sizeof(known_pre) / sizeof(known_pre[0]); i++) {
            if (strcmp(s, known_pre[i].regex) == 0) {
                pre = known_pre[i].pre;
                break;
            }
        }
        if (pre == NULL && s == NULL && blr) {
            pre = "gpt-2";
        }
        if (pre == NULL) {
            fprintf(stderr, "llm-vocab: %s: pre_tokenizer %s%s%s is not one "
                    "I recognise; name it with --pre\n", tpath,
                    s ? "regex '" : "", s ? s : "(no Split regex)",
                    s ? "'" : "");
            goto done;
        }
    }

    rc = llm_gguf_writer_open(&w, opath, err, sizeof(err));
    if (rc < 0) {
        fprintf(stderr, "llm-vocab: %s\n", err);
        goto done;
    }
    rc = llm_gguf_w_str(w, "general.architecture", arch, strlen(arch));
    if (rc == 0) {
        rc = llm_gguf_w_str(w, "general.name", name, strlen(name));
    }
    if (rc == 0) {
        rc = llm_gguf_w_str(w, "tokenizer.ggml.model", "gpt2", 4);
    }
    if (rc == 0) {
        rc = llm_gguf_w_str(w, "tokenizer.ggml.pre", pre, strlen(pre));
    }
    if (rc == 0) {
        rc = llm_gguf_w_str_arr(w, "tokenizer.ggml.tokens", v.tok, lens,
                                vocab_size);
    }
    if (rc == 0) {
        rc = llm_gguf_w_arr(w, "tokenizer.ggml.token_type", LLM_GGUF_INT32,
                            types, vocab_size);
    }
    if (rc == 0) {
        size_t *ml = calloc(n_merges ? n_merges : 1, sizeof(size_t));

        if (ml == NULL) {
            rc = -ENOMEM;
        } else {
            for (i = 0; i < n_merges; i++) {
                ml[i] = strlen(mstr[i]);
            }
            rc = llm_gguf_w_str_arr(w, "tokenizer.ggml.merges", mstr, ml,
                                    n_merges);
            free(ml);
        }
    }

    /* special token ids, as gguf-py's SpecialVocab finds them */
    if (rc == 0 && cj != NULL) {
        static const struct { const char *cfg, *key; } sp[] = {
            { "bos_token", "tokenizer.ggml.bos_token_id" },
            { "eos_token", "tokenizer.ggml.eos_token_id" },
            { "unk_token", "tokenizer.ggml.unknown_token_id" },
            { "sep_token", "tokenizer.ggml.seperator_token_id" },
            { "pad_token", "tokenizer.ggml.padding_token_id" },
            { "cls_token", "tokenizer.ggml.cls_token_id" },
            { "mask_token", "tokenizer.ggml.mask_token_id" },
        };

        for (i = 0; rc == 0 && i < sizeof(sp) / sizeof(sp[0]); i++) {
            s = config_token(cj, sp[i].cfg);
            if (s == NULL || (id = find_id(&v, s)) < 0) {
                continue;
            }
            rc = llm_gguf_w_u32(w, sp[i].key, (uint32_t) id);
        }
    }

    /* add_bos / add_eos: the config's flags, else the post-processor */
    if (rc == 0) {
        json_t *ab = cj ? json_object_get(cj, "add_bos_token") : NULL;
        json_t *ae = cj ? json_object_get(cj, "add_eos_token") : NULL;
        int     tb = -1, te = -1;

        pp = json_object_get(tj, "post_processor");
        if (json_is_object(pp)) {
            s = json_string_value(json_object_get(pp, "type"));
            if (s && strcmp(s, "Sequence") == 0) {
                json_t *procs = json_object_get(pp, "processors");

                json_array_foreach(procs, i, e) {
                    s = json_string_value(json_object_get(e, "type"));
                    if (s && strcmp(s, "TemplateProcessing") == 0) {
                        pp = e;
                        break;
                    }
                }
            }
            s = json_string_value(json_object_get(pp, "type"));
            if (s && strcmp(s, "TemplateProcessing") == 0) {
                json_t *single = json_object_get(pp, "single");
                size_t  ns = json_array_size(single);

                if (ns > 0) {
                    tb = json_object_get(json_array_get(single, 0),
                                         "SpecialToken") != NULL;
                    te = json_object_get(json_array_get(single, ns - 1),
                                         "SpecialToken") != NULL;
                }
            }
        }
        if (json_is_boolean(ab)) {
            rc = llm_gguf_w_bool(w, "tokenizer.ggml.add_bos_token",
                                 json_is_true(ab));
        } else if (tb >= 0) {
            rc = llm_gguf_w_bool(w, "tokenizer.ggml.add_bos_token", tb);
        }
        if (rc == 0 && json_is_boolean(ae)) {
            rc = llm_gguf_w_bool(w, "tokenizer.ggml.add_eos_token",
                                 json_is_true(ae));
        } else if (rc == 0 && te >= 0) {
            rc = llm_gguf_w_bool(w, "tokenizer.ggml.add_eos_token", te);
        }
    }

    /* chat template: a string, or a list of {name, template} */
    if (rc == 0 && cj != NULL) {
        json_t *ct = json_object_get(cj, "chat_template");

        if (json_is_string(ct)) {
            s = json_string_value(ct);
            rc = llm_gguf_w_str(w, "tokenizer.chat_template", s, strlen(s));
        } else if (json_is_array(ct)) {
            json_array_foreach(ct, i, e) {
                const char *nm = json_string_value(json_object_get(e, "name"));

                s = json_string_value(json_object_get(e, "template"));
                if (nm == NULL || s == NULL || rc < 0) {
                    continue;
                }
                if (strcmp(nm, "default") == 0) {
                    snprintf(kbuf, sizeof(kbuf), "tokenizer.chat_template");
                } else {
                    snprintf(kbuf, sizeof(kbuf), "tokenizer.chat_template.%s",
                             nm);
                }
                rc = llm_gguf_w_str(w, kbuf, s, strlen(s));
            }
        }
    }

    if (rc == 0) {
        rc = llm_gguf_w_begin_data(w);
    }
    if (rc < 0) {
        fprintf(stderr, "llm-vocab: %s: writing: %s\n", opath,
                strerror(-rc));
        llm_gguf_writer_abort(w);
        w = NULL;
        goto done;
    }
    rc = llm_gguf_writer_close(w, err, sizeof(err));
    w = NULL;
    if (rc < 0) {
        fprintf(stderr, "llm-vocab: %s\n", err);
        goto done;
    }
    fprintf(stderr, "llm-vocab: wrote %s: %zu tokens, %zu merges, pre %s\n",
            opath, vocab_size, n_merges, pre);
    status = 0;

done:
    if (w != NULL) {
        llm_gguf_writer_abort(w);
    }
    for (i = 0; pads && i < vocab_size; i++) {
        free(pads[i]);
    }
    for (i = 0; mown && i < n_merges; i++) {
        free(mown[i]);
    }
    free(pads);
    free(mown);
    free(mstr);
    free(v.tok);
    free(v.type);
    free(lens);
    free(types);
    json_decref(tj);
    json_decref(cj);
    return status;
}
