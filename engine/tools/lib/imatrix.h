/*
 * Importance matrices (llama.cpp's llama-imatrix files) for llm-quantize.
 *
 * An importance matrix holds, per weight matrix (by tensor name), one
 * value per input column: the mean of the squared activations that column
 * saw on a calibration text (per expert for a 3-D expert tensor: ne0 *
 * n_expert values, expert e's at e * ne0).  The quantizers weight each
 * column's error by it.  Two formats are read, as llama-quantize reads
 * them:
 *
 *  - GGUF (what llama-imatrix writes today): general.type "imatrix",
 *    keys imatrix.datasets (string array), imatrix.chunk_count and
 *    imatrix.chunk_size (u32), and per matrix two F32 tensors
 *    "<name>.in_sum2" [ne0, n_mat] (sums of squares) and "<name>.counts"
 *    [1, n_mat] (activations seen per matrix); the value is
 *    in_sum2 / count, or 1 where a count is 0.
 *  - legacy binary (.dat): little-endian i32 n_entries, then per entry
 *    i32 name length, the name, i32 ncall, i32 nval, nval f32; optionally
 *    i32 chunk count, i32 length and the dataset name.  The value is the
 *    stored one divided by ncall when ncall > 0.
 */

#ifndef LLM_IMATRIX_H
#define LLM_IMATRIX_H

#include <stddef.h>
#include <stdint.h>

typedef struct llm_imatrix_s llm_imatrix_t;

/*
 * Load the file at path (either format, told apart by the GGUF magic).
 * Returns 0 and *out (free with llm_imatrix_free), or a negative errno
 * with err naming the file and what is wrong (no entries, a truncated
 * entry, a GGUF file without the imatrix keys or with in_sum2 and counts
 * that do not pair up, a value that is not finite).
 */
int llm_imatrix_load(llm_imatrix_t **out, const char *path, char *err,
    size_t errlen);
void llm_imatrix_free(llm_imatrix_t *im);

/* The values for tensor name and their count, or NULL if it has none. */
const float *llm_imatrix_find(const llm_imatrix_t *im, const char *name,
    uint64_t *n);

uint32_t llm_imatrix_n_entries(const llm_imatrix_t *im);
/* Chunks of calibration text it was computed on (0 when unknown). */
uint32_t llm_imatrix_chunks(const llm_imatrix_t *im);
/* The first calibration dataset's name, or NULL. */
const char *llm_imatrix_dataset(const llm_imatrix_t *im);
/* 1 if read from the legacy binary format. */
int llm_imatrix_is_legacy(const llm_imatrix_t *im);

#endif /* LLM_IMATRIX_H */
