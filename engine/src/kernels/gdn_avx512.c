/*
 * The chunked gated delta rule with AVX-512 (vectors of 16 floats).
 */

#define GDN_VL  16
#define GDN_FN  llm_gdn_chunk_avx512
#define GDN_STEP_FN llm_gdn_step_avx512
#include "gdn_impl.h"
