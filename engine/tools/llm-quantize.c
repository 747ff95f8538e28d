/*
 * llm-quantize: convert a GGUF model to another tensor type or mix.
 *
 *   llm-quantize [options] IN.gguf OUT.gguf TYPE
 *
 * Per-tensor types follow llama.cpp's rules (quantize.c), so the output
 * loads in llama.cpp as well as here.
 */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "imatrix.h"
#include "quantize.h"

static void
usage(FILE *f)
{
    fprintf(f,
"usage: llm-quantize [options] IN.gguf OUT.gguf TYPE\n"
"\n"
"Converts the weight matrices of IN (F32, F16 or BF16) to TYPE, copying\n"
"all metadata and setting general.file_type as llama.cpp does.  Norms,\n"
"biases and the MoE router stay as they are.  TYPE:\n"
"  F32 F16 BF16 Q8_0 Q4_0 Q4_1   llama.cpp's ftype of that name\n"
"  Q5_0 Q5_1 Q2_K Q6_K           (output.weight gets Q6_K, and the mix rules\n"
"  IQ4_NL IQ4_XS                 of llama_tensor_get_type apply: see below)\n"
"  Q3_K Q4_K Q5_K                every matrix that type (llama-quantize --pure;\n"
"                                file_type Q3_K_M / Q4_K_M / Q5_K_M)\n"
"  Q3_K_S Q3_K_M Q3_K_L          llama.cpp's mixes: Q4_K / Q5_K / Q6_K / Q8_0\n"
"  Q4_K_S Q4_K_M Q5_K_S Q5_K_M   for output, attn_v, attn_k, attn_output and\n"
"                                ffn_down by layer, as llama_tensor_get_type\n"
"  MXFP4_MOE                     expert tensors MXFP4, other matrices Q8_0\n"
"\n"
"Options:\n"
"  --imatrix FILE       importance matrix from llama-imatrix (GGUF, or the\n"
"                       legacy .dat): Q4_0 Q4_1 Q5_0 Q5_1 Q2_K..Q6_K IQ4_NL\n"
"                       IQ4_XS weight each column's error by it (Q8_0,\n"
"                       MXFP4 and the float types ignore it)\n"
"  --threads N          worker threads (default: online CPUs)\n"
"  --pure               no mix rules: every matrix gets TYPE's base type\n"
"  --allow-requantize   accept already quantized input tensors\n"
"  -q, --quiet          no per-tensor lines\n"
"  -h, --help           this text\n"
"\n"
"Byte identity with llama-quantize: every type here runs ggml's own\n"
"algorithm (the reference quantizer without an importance matrix, the\n"
"weighted one with it, IQ4_NL/IQ4_XS always the weighted one with x^2\n"
"weights when there is none, as ggml does), all deterministic, so a\n"
"tensor is byte-identical to llama-quantize's given the same input and\n"
"the same importance matrix; the per-tensor types and order match too.\n"
"Checked on the shared reference models (test_quantize_ref): every type\n"
"without a matrix, and Q8_0/MXFP4 tensors and token_embd/output (which\n"
"have no importance data) of files llama.cpp made with one.  The weighted\n"
"(--imatrix) algorithms are ggml's step for step but have not been\n"
"compared with a llama.cpp file made from the same matrix.\n");
}

int
main(int argc, char **argv)
{
    llm_quantize_params_t p;
    llm_quantize_stats_t st;
    const llm_qtype_t *q;
    const char *pos[3];
    const char *imatrix_path = NULL;
    llm_imatrix_t *im = NULL;
    int rc;
    int npos = 0, quiet = 0;
    char err[512];
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    struct timespec t0, t1;

    memset(&p, 0, sizeof(p));
    p.n_threads = ncpu > 0 ? (uint32_t) (ncpu > 64 ? 64 : ncpu) : 1;
    for (int a = 1; a < argc; a++) {
        if (strcmp(argv[a], "-h") == 0 || strcmp(argv[a], "--help") == 0) {
            usage(stdout);
            return 0;
        } else if (strcmp(argv[a], "--imatrix") == 0 && a + 1 < argc) {
            imatrix_path = argv[++a];
        } else if (strcmp(argv[a], "--pure") == 0) {
            p.pure = 1;
        } else if (strcmp(argv[a], "--allow-requantize") == 0) {
            p.allow_requantize = 1;
        } else if (strcmp(argv[a], "-q") == 0
                   || strcmp(argv[a], "--quiet") == 0)
        {
            quiet = 1;
        } else if (strcmp(argv[a], "--threads") == 0 && a + 1 < argc) {
            char *end;
            long n = strtol(argv[++a], &end, 10);
            if (*end != '\0' || n < 1 || n > 256) {
                fprintf(stderr, "llm-quantize: --threads: expected 1..256, "
                    "got '%s'\n", argv[a]);
                return 2;
            }
            p.n_threads = (uint32_t) n;
        } else if (argv[a][0] == '-' && argv[a][1] != '\0') {
            fprintf(stderr, "llm-quantize: unknown option '%s' (see "
                "--help)\n", argv[a]);
            return 2;
        } else if (npos < 3) {
            pos[npos++] = argv[a];
        } else {
            fprintf(stderr, "llm-quantize: too many arguments (see "
                "--help)\n");
            return 2;
        }
    }
    if (npos != 3) {
        usage(stderr);
        return 2;
    }
    q = llm_qtype_find(pos[2]);
    if (q == NULL) {
        fprintf(stderr, "llm-quantize: unknown TYPE '%s'; one of:", pos[2]);
        for (const llm_qtype_t *t = llm_qtypes; t->name != NULL; t++) {
            fprintf(stderr, " %s", t->name);
        }
        fputc('\n', stderr);
        return 2;
    }
    if (strcmp(pos[0], pos[1]) == 0) {
        fprintf(stderr, "llm-quantize: IN and OUT are the same file\n");
        return 2;
    }
    p.log = quiet ? NULL : stdout;
    if (imatrix_path != NULL) {
        if (llm_imatrix_load(&im, imatrix_path, err, sizeof(err)) != 0) {
            fprintf(stderr, "llm-quantize: --imatrix: %s\n", err);
            return 1;
        }
        p.imatrix = im;
        p.imatrix_path = imatrix_path;
        if (!quiet) {
            printf("importance matrix %s: %u entries (%s format), %u "
                "chunks\n", imatrix_path, llm_imatrix_n_entries(im),
                llm_imatrix_is_legacy(im) ? "legacy" : "GGUF",
                llm_imatrix_chunks(im));
        }
    }

    clock_gettime(CLOCK_MONOTONIC, &t0);
    rc = llm_model_quantize(pos[0], pos[1], q, &p, &st, err, sizeof(err));
    llm_imatrix_free(im);
    if (rc != 0) {
        fprintf(stderr, "llm-quantize: %s\n", err);
        return 1;
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    printf("%s -> %s (%s, file_type %u): %llu tensors, %llu converted, "
        "%llu fallbacks, %.2f MiB -> %.2f MiB, %u threads, %.2f s\n",
        pos[0], pos[1], q->name, q->ftype,
        (unsigned long long) st.n_tensors,
        (unsigned long long) st.n_quantized,
        (unsigned long long) st.n_fallback,
        (double) st.bytes_in / 1048576.0, (double) st.bytes_out / 1048576.0,
        p.n_threads, (double) (t1.tv_sec - t0.tv_sec)
        + (double) (t1.tv_nsec - t0.tv_nsec) / 1e9);
    return 0;
}
