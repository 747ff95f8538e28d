/*
 * The chunked gated delta rule with AVX2 and FMA (vectors of 8 floats).
 */

#define GDN_VL  8
#define GDN_FN  llm_gdn_chunk_avx2
#define GDN_STEP_FN llm_gdn_step_avx2
#include "gdn_impl.h"
