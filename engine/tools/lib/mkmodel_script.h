/*
 * Scripted weights for llm-mkmodel (mkmodel.h's script): a real model of
 * the architecture whose greedy decoding follows a given token chain, so
 * that end-to-end tests can make the engine decode a known answer (a
 * harmony or <think> reply with its markup) through the real forward
 * pass, detokenizer and chat-format code.
 *
 * The model is a second-order Markov chain built from the architecture's
 * own parts: each chain token gets a slot; its embedding is one-hot at
 * the slot in the first half of the residual; layer 0's attention looks
 * exactly one position back (constant queries and keys from the q/k
 * biases, the keys turned by RoPE's angle for one step, so that q.k
 * peaks at distance 1) and copies that token's slot into the second
 * half; every other attention output and every FFN down projection is
 * zero, so the residual reaches the head as (this token, the one
 * before); the output matrix gives each (previous, current) pair's
 * successor the top logit.  Architectures: gpt-oss (q/k biases, YaRN:
 * the two fastest RoPE pairs, which YaRN leaves as they are) and glm4moe
 * (q/k biases under per-head q/k norms: the norm weights set the scale).
 */

#ifndef LLM_MKMODEL_SCRIPT_H
#define LLM_MKMODEL_SCRIPT_H

#include <stddef.h>
#include <stdint.h>

#include "mkmodel.h"

typedef struct llm_mk_script_s llm_mk_script_t;

/*
 * The script of p (p->script: the last two prompt tokens, then the
 * answer's tokens; the answer should end with an end-of-generation
 * token).  Checks that p's shape can carry it (enough slots, the
 * architecture) and that greedy decoding is unambiguous at every step.
 * 0, or -EINVAL / -ENOMEM with err set.
 */
int llm_mk_script_create(llm_mk_script_t **out,
    const llm_mkmodel_params_t *p, char *err, size_t errlen);
void llm_mk_script_free(llm_mk_script_t *s);

/*
 * Row `row` (ne0 values) of tensor `name` as the script sets it: 1 with
 * x filled, 0 when the tensor keeps its random values.
 */
int llm_mk_script_row(const llm_mk_script_t *s, const char *name,
    int64_t row, int64_t ne0, float *x);

#endif /* LLM_MKMODEL_SCRIPT_H */
