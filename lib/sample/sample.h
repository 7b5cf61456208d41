/* sample.h: choosing the next token from logits.
 *
 * The chain, in llama.cpp's default order: repetition / presence /
 * frequency penalties over the last `penalty_last_n` tokens, then top-k,
 * top-p, min-p, temperature and a draw from a seeded generator. temp <= 0
 * is greedy (the arg-max after the penalties; ties go to the lowest id).
 */
#ifndef LLM_SAMPLE_SAMPLE_H
#define LLM_SAMPLE_SAMPLE_H

#include <stddef.h>
#include <stdint.h>

#include "../common/status.h"

struct llm_sampler_params {
    float temp;              /* 0: greedy (default 0.8) */
    int32_t top_k;           /* <= 0: off (default 40) */
    float top_p;             /* 1: off (default 0.95) */
    float min_p;             /* 0: off (default 0.05) */
    float repeat_penalty;    /* 1: off (default 1) */
    float presence_penalty;  /* 0: off */
    float frequency_penalty; /* 0: off */
    int32_t penalty_last_n;  /* tokens of history the penalties see (default 64; -1: all) */
    uint64_t seed;
};
void llm_sampler_params_default(struct llm_sampler_params *p);

struct llm_sampler;
llm_status llm_sampler_new(struct llm_sampler **out, const struct llm_sampler_params *p,
                           int32_t n_vocab);
void llm_sampler_free(struct llm_sampler *s);
/* Add a token to the history the penalties see (prompt and generated). */
void llm_sampler_accept(struct llm_sampler *s, int32_t token);
/* Forget the history and reseed. */
void llm_sampler_reset(struct llm_sampler *s);
/* Pick a token. logits (n_vocab) are modified (penalties applied). */
int32_t llm_sampler_sample(struct llm_sampler *s, float *logits);
/* The distribution llm_sampler_sample would draw from, without drawing:
 * ids (n_vocab) and probs (n_vocab) receive the candidates, most likely
 * first, with probabilities that sum to 1; returns how many. Greedy is
 * one candidate of probability 1. logits are modified as by sample. */
int32_t llm_sampler_dist(struct llm_sampler *s, float *logits, int32_t *ids, float *probs);
/* A uniform draw in [0, 1) from the sampler's generator (speculative
 * decoding's acceptance test draws from the target's). */
double llm_sampler_uniform(struct llm_sampler *s);
const struct llm_sampler_params *llm_sampler_params_of(const struct llm_sampler *s);

/* The k most probable tokens of log_softmax(logits), best first: ids (k)
 * and their log-probabilities lp (k). Returns how many were written
 * (min(k, n_vocab)). */
int32_t llm_top_logprobs(const float *logits, int32_t n_vocab, int32_t k, int32_t *ids, float *lp);
/* log_softmax(logits)[id]. */
float llm_logprob(const float *logits, int32_t n_vocab, int32_t id);

/* The generator: splitmix64-seeded xoshiro256**; uniform in [0, 1). */
struct llm_rng {
    uint64_t s[4];
};
void llm_rng_seed(struct llm_rng *r, uint64_t seed);
uint64_t llm_rng_next(struct llm_rng *r);
double llm_rng_uniform(struct llm_rng *r);

#endif
