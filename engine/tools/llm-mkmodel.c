/*
 * llm-mkmodel: write a deterministic synthetic GGUF model.
 *
 * A preset gives every hyperparameter; flags override them one by one.
 * The same flags and seed give the same bytes.
 */

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "mkmodel.h"
#include "readfile.h"
#include "kernels/quant.h"

static void
usage(FILE *f)
{
    fprintf(f,
"usage: llm-mkmodel [--preset NAME] [--arch ARCH] [options] -o FILE.gguf\n"
"\n"
"Writes a synthetic GGUF model with random weights from a seed, the keys,\n"
"tensor names and shapes llama.cpp's converter writes, a byte-level BPE\n"
"vocabulary and a ChatML tool-calling chat template.  Streams tensor by\n"
"tensor: memory use does not grow with the file.\n"
"\n"
"  --preset NAME     starting shape (default tiny):\n"
"                      tiny          qwen3moe 128 embd, 4 layers, 4/2 heads\n"
"                                    of 32, 8 experts (2 used) of 128, vocab\n"
"                                    1000, ctx 2048\n"
"                      bench-moe     qwen3moe 2048 embd, 16 layers, 32/4\n"
"                                    heads of 64, 64 experts (8 used) of\n"
"                                    768, vocab 4096, ctx 8192 (ANCHORS.md)\n"
"                      tiny-llama, tiny-mixtral, tiny-qwen2, tiny-qwen3,\n"
"                      tiny-minimax  the tiny shape in each architecture\n"
"                      tiny-embed    tiny-qwen3 as an embedding model\n"
"                                    (qwen3.pooling_type 3: last token)\n"
"                      tiny-glm4moe, tiny-gpt-oss, tiny-deepseek2,\n"
"                      tiny-qwen35moe\n"
"                                    those layouts at the tiny shape\n"
"                      bench-gpt-oss gpt-oss-20b's widths, 6 layers\n"
"                                    (~2.7 GB with MXFP4 experts)\n"
"                      bench-glm4moe bench-moe's shape as GLM-4.5 lays\n"
"                                    it out (dense layer 0, shared expert)\n"
"                      bench-deepseek2 bench-moe's shape as DeepSeek-V3\n"
"                                    lays it out (MLA with V3's latent and\n"
"                                    head dims, dense layer 0, shared\n"
"                                    expert, group-limited routing)\n"
"                      bench-qwen35moe Qwen3.5-35B-A3B's widths, 16\n"
"                                    layers, 32 experts (8 used)\n"
"  --arch ARCH       llama | qwen2 | qwen3 | qwen3moe | minimax-m2 |\n"
"                    glm4moe | gpt-oss | deepseek2 | qwen35moe (resets\n"
"                    rope base, eps, rope dims, pre-tokenizer to the arch's)\n"
"  --type TYPE       matrix type: F32 (default) F16 BF16 Q8_0 Q4_0; norms,\n"
"                    biases and the router stay F32\n"
"  --seed N          random seed (default 1)\n"
"  --vocab N --ctx N --embd N --layers N --heads N --heads-kv N\n"
"  --head-dim N --ff N --experts N --experts-used N --ff-exp N\n"
"  --rope-dim N --rope-base F --eps F\n"
"                    override one hyperparameter (--experts 0 = dense;\n"
"                    llama with experts is the Mixtral layout)\n"
"  --lora-q N --lora-kv N --mla-v N\n"
"                    deepseek2: the q LoRA rank, the latent's rank\n"
"                    (kv_lora_rank), a value head's dims after v_b\n"
"  --rope-linear F   rope.scaling.type linear, rope.scaling.factor F: the\n"
"                    engine accepts a --ctx up to F x --ctx (not gpt-oss,\n"
"                    which has its yarn keys)\n"
"  --rope-freqs F    a rope_freqs.weight tensor (Llama 3.1's per-pair\n"
"                    frequency divisors), every value F\n"
"  --split-experts   llama with experts in the old Mixtral layout: one\n"
"                    tensor per expert, blk.N.ffn_gate.E.weight etc. (same\n"
"                    values as the merged blk.N.ffn_gate_exps.weight file)\n"
"  --tied            no output.weight: the output head is token_embd, as in\n"
"                    small Qwen2/Qwen3 models\n"
"  --pre NAME        tokenizer.ggml.pre: qwen2 | gpt-2\n"
"  --pooling N       write <arch>.pooling_type N (llama.cpp's enum: 0 none,\n"
"                    1 mean, 2 cls, 3 last, 4 rank): an embedding model\n"
"  --chat-template FILE\n"
"                    tokenizer.chat_template from FILE (Jinja) instead of\n"
"                    the ChatML tool-calling one\n"
"  --script IDS      gpt-oss, glm4moe: weights whose greedy decoding\n"
"                    follows a token chain instead of random ones: IDS\n"
"                    (comma separated) are the prompt's last two tokens,\n"
"                    then the answer, ending with an end token; e.g. a\n"
"                    harmony reply for the tests (up to embd / 2 distinct\n"
"                    tokens; refused when a step is ambiguous)\n"
"  --name NAME       general.name\n"
"  --threads N       worker threads (default: online CPUs)\n"
"  -q, --quiet       no per-tensor lines\n"
"  -o FILE           output file (required)\n"
"  -h, --help        this text\n");
}

static int
parse_u32(const char *flag, const char *s, uint32_t *v)
{
    char *end;
    unsigned long long x;

    errno = 0;
    x = strtoull(s, &end, 10);
    if (errno != 0 || *end != '\0' || end == s || x > UINT32_MAX) {
        fprintf(stderr, "llm-mkmodel: %s: '%s' is not a number\n", flag, s);
        return -1;
    }
    *v = (uint32_t) x;
    return 0;
}

static int
parse_f32(const char *flag, const char *s, float *v)
{
    char *end;

    errno = 0;
    *v = strtof(s, &end);
    if (errno != 0 || *end != '\0' || end == s) {
        fprintf(stderr, "llm-mkmodel: %s: '%s' is not a number\n", flag, s);
        return -1;
    }
    return 0;
}

static int
parse_type(const char *s, uint32_t *t)
{
    static const struct { const char *n; uint32_t t; } types[] = {
        { "F32", LLM_TYPE_F32 }, { "F16", LLM_TYPE_F16 },
        { "BF16", LLM_TYPE_BF16 }, { "Q8_0", LLM_TYPE_Q8_0 },
        { "Q4_0", LLM_TYPE_Q4_0 },
    };
    for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
        if (strcasecmp(s, types[i].n) == 0) {
            *t = types[i].t;
            return 0;
        }
    }
    fprintf(stderr, "llm-mkmodel: --type '%s': expected F32, F16, BF16, "
        "Q8_0 or Q4_0\n", s);
    return -1;
}

int
main(int argc, char **argv)
{
    llm_mkmodel_params_t p;
    const char *preset = "tiny", *out = NULL;
    char err[512];
    int quiet = 0, a;
    long ncpu;
    struct timespec t0, t1;
    FILE *f;

    /* the preset comes first whatever the order, flags override it */
    for (a = 1; a < argc; a++) {
        if (strcmp(argv[a], "-h") == 0 || strcmp(argv[a], "--help") == 0) {
            usage(stdout);
            return 0;
        }
        if (strcmp(argv[a], "--preset") == 0 && a + 1 < argc) {
            preset = argv[++a];
        }
    }
    if (llm_mkmodel_preset(&p, preset, err, sizeof(err)) != 0) {
        fprintf(stderr, "llm-mkmodel: %s\n", err);
        return 2;
    }
    ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    p.n_threads = ncpu > 0 ? (uint32_t) (ncpu > 64 ? 64 : ncpu) : 1;

    for (a = 1; a < argc; a++) {
        const char *f_ = argv[a];
        const char *v = a + 1 < argc ? argv[a + 1] : NULL;
        int rc = 0, takes = 1;

        if (strcmp(f_, "--preset") == 0 && v != NULL) {
            /* done above */
        } else if (strcmp(f_, "-q") == 0 || strcmp(f_, "--quiet") == 0) {
            quiet = 1;
            takes = 0;
        } else if (strcmp(f_, "--split-experts") == 0) {
            p.split_experts = 1;
            takes = 0;
        } else if (strcmp(f_, "--tied") == 0) {
            p.tied = 1;
            takes = 0;
        } else if (v == NULL) {
            fprintf(stderr, "llm-mkmodel: %s: unknown option or missing "
                "value (see --help)\n", f_);
            return 2;
        } else if (strcmp(f_, "-o") == 0 || strcmp(f_, "--output") == 0) {
            out = v;
        } else if (strcmp(f_, "--arch") == 0) {
            snprintf(p.arch, sizeof(p.arch), "%s", v);
            rc = llm_mkmodel_arch_defaults(&p, err, sizeof(err));
            if (rc != 0) {
                fprintf(stderr, "llm-mkmodel: --arch: %s\n", err);
                return 2;
            }
            if (strcmp(v, "qwen2") == 0 || strcmp(v, "qwen3") == 0) {
                p.n_expert = p.n_expert_used = 0;
            }
        } else if (strcmp(f_, "--type") == 0) {
            rc = parse_type(v, &p.type);
        } else if (strcmp(f_, "--seed") == 0) {
            char *end;
            errno = 0;
            p.seed = strtoull(v, &end, 0);
            if (errno != 0 || *end != '\0' || end == v) {
                fprintf(stderr, "llm-mkmodel: --seed: '%s' is not a "
                    "number\n", v);
                rc = -1;
            }
        } else if (strcmp(f_, "--vocab") == 0) {
            rc = parse_u32(f_, v, &p.n_vocab);
        } else if (strcmp(f_, "--ctx") == 0) {
            rc = parse_u32(f_, v, &p.n_ctx);
        } else if (strcmp(f_, "--embd") == 0) {
            rc = parse_u32(f_, v, &p.n_embd);
        } else if (strcmp(f_, "--layers") == 0) {
            rc = parse_u32(f_, v, &p.n_layer);
        } else if (strcmp(f_, "--heads") == 0) {
            rc = parse_u32(f_, v, &p.n_head);
        } else if (strcmp(f_, "--heads-kv") == 0) {
            rc = parse_u32(f_, v, &p.n_head_kv);
        } else if (strcmp(f_, "--head-dim") == 0) {
            uint32_t old = p.head_dim;
            rc = parse_u32(f_, v, &p.head_dim);
            if (rc == 0 && p.rope_dim == old) {
                p.rope_dim = p.head_dim;       /* full rope follows */
            } else if (rc == 0 && p.rope_dim * 2 == old) {
                p.rope_dim = p.head_dim / 2;   /* partial rope follows */
            }
        } else if (strcmp(f_, "--ff") == 0) {
            rc = parse_u32(f_, v, &p.n_ff);
        } else if (strcmp(f_, "--experts") == 0) {
            rc = parse_u32(f_, v, &p.n_expert);
        } else if (strcmp(f_, "--experts-used") == 0) {
            rc = parse_u32(f_, v, &p.n_expert_used);
        } else if (strcmp(f_, "--ff-exp") == 0) {
            rc = parse_u32(f_, v, &p.n_ff_exp);
        } else if (strcmp(f_, "--rope-dim") == 0) {
            rc = parse_u32(f_, v, &p.rope_dim);
        } else if (strcmp(f_, "--lora-q") == 0) {
            rc = parse_u32(f_, v, &p.n_lora_q);
        } else if (strcmp(f_, "--lora-kv") == 0) {
            rc = parse_u32(f_, v, &p.n_lora_kv);
        } else if (strcmp(f_, "--mla-v") == 0) {
            rc = parse_u32(f_, v, &p.mla_v);
        } else if (strcmp(f_, "--rope-base") == 0) {
            rc = parse_f32(f_, v, &p.rope_base);
        } else if (strcmp(f_, "--rope-linear") == 0) {
            rc = parse_f32(f_, v, &p.rope_linear);
        } else if (strcmp(f_, "--rope-freqs") == 0) {
            rc = parse_f32(f_, v, &p.rope_freqs);
        } else if (strcmp(f_, "--eps") == 0) {
            rc = parse_f32(f_, v, &p.eps);
        } else if (strcmp(f_, "--pre") == 0) {
            snprintf(p.pre, sizeof(p.pre), "%s", v);
        } else if (strcmp(f_, "--pooling") == 0) {
            uint32_t pt;

            rc = parse_u32(f_, v, &pt);
            if (rc == 0 && pt > 4) {
                fprintf(stderr, "llm-mkmodel: --pooling: 0..4\n");
                rc = -1;
            }
            p.pooling = (int) pt;
        } else if (strcmp(f_, "--chat-template") == 0) {
            /* static: lives until exit, as the parameters do */
            static char  *tmpl;
            size_t        len;

            free(tmpl);
            tmpl = llm_read_file(v, &len);
            p.chat_template = tmpl;
            if (tmpl == NULL || strlen(tmpl) != len) {
                fprintf(stderr, "llm-mkmodel: --chat-template %s: %s\n", v,
                        tmpl ? "holds a NUL byte" : strerror(errno));
                rc = -1;
            }
        } else if (strcmp(f_, "--script") == 0) {
            /* static: lives until exit, as the parameters do */
            static int32_t  ids[4096];
            const char     *c = v;
            char           *end;
            long            x;

            p.n_script = 0;
            while (rc == 0 && *c != '\0') {
                errno = 0;
                x = strtol(c, &end, 10);
                if (errno != 0 || end == c || x < 0 || x > INT32_MAX
                    || (*end != ',' && *end != '\0')
                    || p.n_script == sizeof(ids) / sizeof(ids[0]))
                {
                    fprintf(stderr, "llm-mkmodel: --script: expected "
                        "token ids separated by commas, got '%s'\n", v);
                    rc = -1;
                    break;
                }
                ids[p.n_script++] = (int32_t) x;
                c = *end == ',' ? end + 1 : end;
            }
            p.script = ids;
        } else if (strcmp(f_, "--name") == 0) {
            snprintf(p.name, sizeof(p.name), "%s", v);
        } else if (strcmp(f_, "--threads") == 0) {
            rc = parse_u32(f_, v, &p.n_threads);
            if (rc == 0 && (p.n_threads == 0 || p.n_threads > 256)) {
                fprintf(stderr, "llm-mkmodel: --threads: 1..256\n");
                rc = -1;
            }
        } else {
            fprintf(stderr, "llm-mkmodel: unknown option '%s' (see "
                "--help)\n", f_);
            return 2;
        }
        if (rc != 0) {
            return 2;
        }
        a += takes;
    }
    if (out == NULL) {
        fprintf(stderr, "llm-mkmodel: -o FILE is required (see --help)\n");
        return 2;
    }
    if (llm_mkmodel_check(&p, err, sizeof(err)) != 0) {
        fprintf(stderr, "llm-mkmodel: %s\n", err);
        return 2;
    }

    clock_gettime(CLOCK_MONOTONIC, &t0);
    if (llm_mkmodel_write(&p, out, quiet ? NULL : stdout, err,
            sizeof(err)) != 0)
    {
        fprintf(stderr, "llm-mkmodel: %s\n", err);
        return 1;
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);

    f = fopen(out, "rb");
    if (f != NULL) {
        fseek(f, 0, SEEK_END);
    }
    printf("wrote %s: %s, %u layers, embd %u, %u experts, vocab %u, %s, "
        "seed %llu, %ld bytes in %.1f s\n", out, p.arch, p.n_layer, p.n_embd,
        p.n_expert, p.n_vocab, llm_type_name(p.type),
        (unsigned long long) p.seed, f ? ftell(f) : -1L,
        (double) (t1.tv_sec - t0.tv_sec)
        + (double) (t1.tv_nsec - t0.tv_nsec) / 1e9);
    if (f != NULL) {
        fclose(f);
    }
    return 0;
}
