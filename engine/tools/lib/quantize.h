/*
 * Model quantization (the engine of llm-quantize).
 *
 * Converts a GGUF model to another tensor type or to one of llama.cpp's
 * mixes, choosing per tensor the type llama.cpp's llama_tensor_get_type()
 * would choose, so the output has the same layout as llama-quantize's.
 * Streams tensor by tensor (slabs of rows, a few worker threads), copies
 * all metadata and sets general.file_type to the LLAMA_FTYPE value.
 */

#ifndef LLM_QUANTIZE_H
#define LLM_QUANTIZE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "imatrix.h"

typedef struct {
    const char  *name;          /* "Q4_K_M" */
    uint32_t     ftype;         /* LLAMA_FTYPE_* stored in general.file_type */
    uint32_t     type;          /* default ggml type of the matrices */
    int          pure;          /* every matrix gets type, no mix rules */
} llm_qtype_t;

/* The accepted targets, NULL-name-terminated (for --help). */
extern const llm_qtype_t llm_qtypes[];

/* Look a target up by name (case-insensitive); NULL if unknown. */
const llm_qtype_t *llm_qtype_find(const char *name);

typedef struct {
    uint32_t     n_threads;
    int          pure;              /* force the default type everywhere */
    int          allow_requantize;  /* accept already quantized input */
    FILE        *log;               /* one line per tensor, or NULL */
    /* importance matrix (llm_imatrix_load), or NULL; its path goes into
     * the output's quantize.imatrix.file */
    const llm_imatrix_t *imatrix;
    const char  *imatrix_path;
} llm_quantize_params_t;

typedef struct {
    uint64_t     n_tensors;
    uint64_t     n_quantized;       /* tensors converted (not copied) */
    uint64_t     n_fallback;        /* row not a multiple of the block */
    uint64_t     bytes_in;          /* tensor data */
    uint64_t     bytes_out;
} llm_quantize_stats_t;

/*
 * Quantize the model in_path to out_path with target q.  Returns 0, or a
 * negative errno with err naming the file / tensor; a failed output file
 * is removed.  st may be NULL.
 */
int llm_model_quantize(const char *in_path, const char *out_path,
    const llm_qtype_t *q, const llm_quantize_params_t *params,
    llm_quantize_stats_t *st, char *err, size_t errlen);

#endif /* LLM_QUANTIZE_H */
