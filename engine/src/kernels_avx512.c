/*
 * AVX512 kernels (placeholder while the SIMD code is written).
 */

#include "kernels_common.h"


void
llm_kernels_init_avx512(llm_kernels_t *k)
{
    (void) k;
}
