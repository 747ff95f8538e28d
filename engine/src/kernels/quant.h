/*
 * Tensor types with ggml's exact block layouts, and the kernels over them.
 *
 * Type ids are ggml's (they are what GGUF files store).  Every block format
 * is a packed struct with a static assert on its size (quant.c).  Each
 * weight type names the activation type its dot product takes
 * (llm_type_vec_dot_type): Q8_0 for Q4_0/Q5_0/Q8_0/IQ4_NL/MXFP4, Q8_1 for
 * Q4_1/Q5_1, Q8_K for the K-quants and the other I-quants (IQ4_XS, IQ3_*,
 * IQ2_*, IQ1_*), F32 for the float types.
 * Activations are converted once per row with llm_quantize_act() and then
 * dotted with many weight rows.
 *
 * Every kernel has a scalar reference; SIMD versions (x86-64: AVX2,
 * AVX-512 with VNNI; aarch64: NEON with the dot-product extension) are
 * chosen once at start from cpuid or the auxiliary vector, or forced with
 * LLM_SIMD=scalar|avx2|avx512|neon.
 */

#ifndef LLM_QUANT_H
#define LLM_QUANT_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
    LLM_TYPE_F32 = 0,
    LLM_TYPE_F16 = 1,
    LLM_TYPE_Q4_0 = 2,
    LLM_TYPE_Q4_1 = 3,
    LLM_TYPE_Q5_0 = 6,
    LLM_TYPE_Q5_1 = 7,
    LLM_TYPE_Q8_0 = 8,
    LLM_TYPE_Q8_1 = 9,
    LLM_TYPE_Q2_K = 10,
    LLM_TYPE_Q3_K = 11,
    LLM_TYPE_Q4_K = 12,
    LLM_TYPE_Q5_K = 13,
    LLM_TYPE_Q6_K = 14,
    LLM_TYPE_Q8_K = 15,
    LLM_TYPE_IQ2_XXS = 16,
    LLM_TYPE_IQ2_XS = 17,
    LLM_TYPE_IQ3_XXS = 18,
    LLM_TYPE_IQ1_S = 19,
    LLM_TYPE_IQ4_NL = 20,
    LLM_TYPE_IQ3_S = 21,
    LLM_TYPE_IQ2_S = 22,
    LLM_TYPE_IQ4_XS = 23,
    LLM_TYPE_IQ1_M = 29,
    LLM_TYPE_BF16 = 30,
    LLM_TYPE_MXFP4 = 39,
    /* engine-internal, never in a file: Q4_0, IQ4_NL, MXFP4, IQ4_XS,
     * Q2_K, Q3_K, Q8_0, Q4_K and Q6_K with every 16 rows interleaved
     * (llm_repack_rows) */
    LLM_TYPE_Q4_0_R16 = 40,
    LLM_TYPE_IQ4_NL_R16 = 41,
    LLM_TYPE_MXFP4_R16 = 42,
    LLM_TYPE_IQ4_XS_R16 = 43,
    LLM_TYPE_Q2_K_R16 = 44,
    LLM_TYPE_Q3_K_R16 = 45,
    LLM_TYPE_Q8_0_R16 = 46,
    LLM_TYPE_Q4_K_R16 = 47,
    LLM_TYPE_Q6_K_R16 = 48,
    LLM_TYPE_COUNT = 49
} llm_type_t;

/* Levels: on x86-64 SCALAR < AVX2 < AVX512 (each a superset); on aarch64
 * SCALAR and NEON.  Compare levels only through llm_simd_supported(). */
typedef enum {
    LLM_SIMD_SCALAR = 0,
    LLM_SIMD_AVX2 = 1,
    LLM_SIMD_AVX512 = 2,
    LLM_SIMD_NEON = 3,
    LLM_SIMD_COUNT = 4
} llm_simd_t;

/* Static facts about a type; 0-sized for types this engine does not know. */
typedef struct {
    const char  *name;         /* "Q4_K" */
    uint32_t     block;        /* weights per block (1 for floats) */
    uint32_t     block_bytes;  /* bytes per block */
    int          supported;    /* loadable as a weight type */
} llm_type_info_t;

const llm_type_info_t *llm_type_info(uint32_t type);   /* NULL if unknown */
/* The name of any type id ggml defines ("IQ2_XXS" too, which this engine
 * does not run); "?" for an id ggml does not define. */
const char *llm_type_name(uint32_t type);
/*
 * The names of the weight types this engine runs, from the type table,
 * as "F32, F16, BF16, Q4_0, ...": floats first, then by id.  Writes at
 * most len bytes, NUL-terminated when len > 0; returns the length of the
 * whole list (as snprintf: >= len means it was cut).
 */
size_t llm_type_list_supported(char *buf, size_t len);
/* Bytes of a row of n values; 0 if n is not a multiple of the block. */
size_t llm_row_bytes(uint32_t type, int64_t n);

/* The activation type weight type t is dotted with. */
llm_type_t llm_type_vec_dot_type(llm_type_t t);

/* Run-time SIMD selection.  llm_simd_init() is idempotent and thread-safe. */
void llm_simd_init(void);
llm_simd_t llm_simd_level(void);      /* the level in use */
llm_simd_t llm_simd_best(void);       /* the best the CPU supports */
const char *llm_simd_name(llm_simd_t s);
/* Why LLM_SIMD was not honoured (a name it does not know, a level this
 * CPU or build cannot run), or NULL: for the program to report. */
const char *llm_simd_note(void);
/* 1 if this build and CPU can run level s (SCALAR always). */
int llm_simd_supported(llm_simd_t s);
/* For tests: force a level (must be supported). */
int llm_simd_force(llm_simd_t s);
/* 1 if the AVX-512 level's regrouped gemms run on AMX-INT8 tiles (the
 * CPU has them, Linux granted them, LLM_AMX is not 0): for the logs. */
int llm_simd_amx(void);
/* For tests and benchmarks: switch those tiles on or off (not while
 * kernels run); returns whether they are on (0 where there are none). */
int llm_simd_amx_set(int on);

/* Conversions (scalar, exact as ggml). */
float llm_fp16_to_fp32(uint16_t h);
uint16_t llm_fp32_to_fp16(float f);
float llm_bf16_to_fp32(uint16_t h);
uint16_t llm_fp32_to_bf16(float f);

/* Row conversions; n must be a multiple of the block size. */
void llm_dequantize_row(llm_type_t t, const void *src, float *dst,
    int64_t n);
/* Weight quantization as ggml's reference quantizers do it (tools). */
void llm_quantize_row(llm_type_t t, const float *src, void *dst, int64_t n);
/* Activation quantization to llm_type_vec_dot_type(w) (hot path). */
void llm_quantize_act(llm_type_t act, const float *src, void *dst,
    int64_t n);

/*
 * s = dot(w, x) over n values: w one row of weight type t, x one row of
 * llm_type_vec_dot_type(t) (already converted).
 */
void llm_vec_dot(llm_type_t t, int64_t n, float *s, const void *w,
    const void *x);

/*
 * Small GEMM over one weight matrix: for r < nr, c < nc
 *     y[c * ldy + r] = dot(w + r * w_stride, x + c * x_stride)
 * w: nr rows of type t, each n values; x: nc activation rows already in
 * llm_type_vec_dot_type(t).  The kernel tiles rows and columns so that a
 * weight block loaded once serves several activation rows (prefill and
 * batched decode).  The caller splits work across threads by rows.
 */
void llm_gemm(llm_type_t t, int64_t n, int64_t nr, int64_t nc,
    const void *w, size_t w_stride, const void *x, size_t x_stride,
    float *y, size_t ldy);

/*
 * Weights regrouped at load for the batched kernels.  Q4_0 becomes
 * Q4_0_R16 (IQ4_NL IQ4_NL_R16, MXFP4 MXFP4_R16, IQ4_XS IQ4_XS_R16, Q2_K
 * Q2_K_R16, Q3_K Q3_K_R16, Q8_0 Q8_0_R16, Q4_K Q4_K_R16, Q6_K Q6_K_R16,
 * the same way): each run of 16
 * rows is stored block by block, the 16 rows' scales and then their quants
 * interleaved 4 bytes at a time (llm_block_q4_0x16, llm_block_mxfp4x16,
 * llm_block_iq4_xsx16, llm_block_q2_Kx16, llm_block_q3_Kx16,
 * llm_block_q8_0x16: its quants + 128, unsigned; llm_block_q4_Kx16,
 * llm_block_q6_Kx16), in the
 * same bytes the 16 rows took, so row r of a
 * multiple of 16 still starts at r * row_bytes.  Its gemm takes nr and
 * the first row in multiples of 16; each row's sum runs block by block in
 * one order whatever the number of columns (alone or in a batch: the same
 * bits), and the scalar reference gives the same bits as the SIMD kernel.
 *
 * llm_repack_type: the type rows of t are regrouped into at this SIMD
 * level (t itself when nothing pays: no kernel for it, or nr not a
 * multiple of 16).  llm_repack_rows: nr rows of n values of type t from
 * src into dst (the same size, not overlapping) as llm_repack_type(t, nr).
 */
llm_type_t llm_repack_type(llm_type_t t, int64_t nr);
/* llm_repack_file_slow: whether t's file layout runs, at this SIMD level,
 * by regrouping its rows on every call (AVX-512 Q8_0, Q4_K, Q6_K: the
 * regrouped tile's bits, at a fraction of its speed for one column), so
 * that a matrix of t that meets the gemm often (an output tied to the
 * embeddings) is worth a regrouped copy. */
int llm_repack_file_slow(llm_type_t t);
/* llm_repack_source: the file type a regrouped type is made from (Q4_0
 * for Q4_0_R16, ...); t itself for every other type. */
llm_type_t llm_repack_source(llm_type_t t);
void llm_repack_rows(llm_type_t t, int64_t n, int64_t nr, const void *src,
    void *dst);

/* Scalar references, always available (tests compare against them). */
void llm_vec_dot_ref(llm_type_t t, int64_t n, float *s, const void *w,
    const void *x);
void llm_quantize_act_ref(llm_type_t act, const float *src, void *dst,
    int64_t n);

#endif /* LLM_QUANT_H */
