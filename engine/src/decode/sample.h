/*
 * Token sampling: logit processing (logit_bias, repetition, presence and
 * frequency penalties), greedy or stochastic choice (temperature, top_k,
 * top_p, min_p) with a per-sequence seeded RNG, and logprobs.
 *
 * The order, as vLLM and Hugging Face apply it: bias, penalties, then
 * (logprobs are taken here, from the processed logits before temperature),
 * then temperature, top_k, top_p, min_p, draw.  Ties go to the lower id, so
 * the choice depends only on the logits row, the history and the RNG
 * state: a seeded sequence gives the same tokens whatever else is in the
 * batch.
 */

#ifndef LLM_SAMPLE_H
#define LLM_SAMPLE_H

#include <stddef.h>
#include <stdint.h>

#define LLM_SAMPLE_MAX_TOP_LOGPROBS  20

/* xoshiro256**, seeded through splitmix64. */
typedef struct {
    uint64_t  s[4];
} llm_rng_t;

void llm_rng_seed(llm_rng_t *r, uint64_t seed);
uint64_t llm_rng_next(llm_rng_t *r);
/* Uniform in [0, 1) with 53 random bits. */
double llm_rng_uniform(llm_rng_t *r);

typedef struct {
    float          temperature;        /* <= 0: greedy */
    int32_t        top_k;              /* <= 0: off */
    float          top_p;              /* <= 0 or >= 1: off */
    float          min_p;              /* <= 0: off */
    float          presence_penalty;   /* OpenAI: over generated tokens */
    float          frequency_penalty;
    float          repetition_penalty; /* <= 0 or == 1: off; prompt+gen */
    const int32_t *bias_ids;           /* logit_bias */
    const float   *bias_vals;
    size_t         n_bias;
    uint32_t       top_logprobs;       /* 0..20 */
    int            logprobs;           /* compute the chosen token's */
} llm_sample_params_t;

typedef struct {
    int32_t  token;
    float    logprob;
} llm_logprob_t;

typedef struct {
    int32_t        token;
    float          logprob;            /* when params.logprobs */
    uint32_t       n_top;
    llm_logprob_t  top[LLM_SAMPLE_MAX_TOP_LOGPROBS];
} llm_sample_result_t;

/* Scratch for one thread of sampling, sized for the vocabulary. */
typedef struct llm_sampler_s llm_sampler_t;

int llm_sampler_create(llm_sampler_t **out, uint32_t n_vocab);
void llm_sampler_free(llm_sampler_t *s);

/*
 * Choose the next token from one row of logits (modified in place).
 * hist holds the prompt tokens followed by the n_gen generated ones; the
 * repetition penalty looks at all of them, presence and frequency at the
 * generated ones only.  Tokens masked to -INFINITY beforehand (constrained
 * decoding) are never chosen.  Returns the token id, or -EINVAL when every
 * token is masked.
 */
int32_t llm_sample(llm_sampler_t *s, const llm_sample_params_t *p,
    float *logits, const int32_t *hist, size_t n_prompt, size_t n_gen,
    llm_rng_t *rng, llm_sample_result_t *res);

#endif /* LLM_SAMPLE_H */
