/* spec.h: speculative decoding. Draft a few tokens cheaply (a smaller
 * model with the same vocabulary, or the continuation of an n-gram found
 * earlier in the prompt and the text so far), check them all in one
 * forward pass of the target, keep the prefix it agrees with and the
 * target's own token after it. The target's KV past the kept tokens is cut
 * (llm_context_truncate) before the next pass.
 *
 * Two rules decide which drafted tokens are kept:
 * - match (the default): at each drafted position the target draws its
 *   token exactly as plain decoding does (the same logits bits, since the
 *   forward pass is batch invariant, the same sampler state, one draw per
 *   token), and a draft token is kept when it is that token. The text is
 *   the same bits as plain decoding with the same seed.
 * - rejection (Leviathan et al. 2023, Chen et al. 2023): a draft token x
 *   drawn from the draft's distribution q is kept with probability
 *   min(1, p(x) / q(x)), p the target's; else the token is drawn from
 *   max(0, p - q) normalised, and after the last kept draft a bonus token
 *   comes from p. The text follows the target's distribution, and more
 *   drafts are kept than under match, but it is not plain decoding's text
 *   for a seed.
 * With temp 0 both are greedy decoding's text, token for token.
 */
#ifndef LLM_MODEL_SPEC_H
#define LLM_MODEL_SPEC_H

#include <stdint.h>

#include "../common/status.h"
#include "../sample/sample.h"
#include "model.h"

enum llm_spec_rule { LLM_SPEC_MATCH, LLM_SPEC_REJECTION };

struct llm_spec_params {
    struct llm_context *draft;  /* the draft model's context (sequence 0 is used), or NULL */
    int lookup;                 /* draft from n-grams of the prompt and the text so far */
    int32_t ngram_min, ngram_max; /* lookup: n-gram lengths tried, longest first (default 2, 4) */
    int32_t draft_n;            /* tokens drafted per target pass; 0: adapted to the acceptance */
    int32_t draft_max;          /* adapted: at most this many (default 16) */
    enum llm_spec_rule rule;
};
void llm_spec_params_default(struct llm_spec_params *p);

/* LLM_E_INVALID unless draft has target's vocabulary: the same size, and
 * the same text for every token. */
llm_status llm_spec_check_draft(struct llm_model *target, struct llm_model *draft);

/* Prompt lookup: the latest earlier occurrence in toks (n) of its last g
 * tokens, g from ngram_max down to ngram_min; out (k) receives up to k
 * tokens that followed it. Returns how many (0: no n-gram recurs). */
int32_t llm_spec_lookup(const int32_t *toks, int32_t n, int32_t ngram_min, int32_t ngram_max,
                        int32_t k, int32_t *out);

/* The draft model's sampler under the rejection rule: the target's chain
 * without its penalties (any q keeps the rule exact, and this one needs no
 * history), seeded apart from the target's. */
llm_status llm_spec_draft_sampler(struct llm_sampler **out, const struct llm_sampler_params *target,
                                  int32_t n_vocab);

/* A draft token from the draft model's logits (n_vocab; modified): drawn
 * by dsmp, its distribution left in q_ids/q_probs (n_vocab each) and *q_n,
 * or with dsmp NULL the most likely token (*q_n = 0: a point mass). */
int32_t llm_spec_draft_token(struct llm_sampler *dsmp, float *logits, int32_t n_vocab,
                             int32_t *q_ids, float *q_probs, int32_t *q_n);

/* Of a round's nd drafts, those the draft model decoded (all but the last)
 * that still hold when kept were kept: what its KV keeps past the tokens
 * before the round. */
static inline int32_t llm_spec_draft_kept(int32_t nd, int32_t kept)
{
    return kept < nd - 1 ? kept : nd - 1 > 0 ? nd - 1 : 0;
}

/* Scratch for llm_spec_verify: dense copies of p and q. */
struct llm_spec_scratch {
    int32_t n_vocab;
    int32_t *ids;   /* (n_vocab) the target's candidates */
    float *probs;   /* (n_vocab) */
    float *dense;   /* (n_vocab) zero between calls */
};
llm_status llm_spec_scratch_init(struct llm_spec_scratch *s, int32_t n_vocab);
void llm_spec_scratch_release(struct llm_spec_scratch *s);

/* The target's token at one drafted position. logits (n_vocab) are the
 * target's for this position (modified, as by llm_sampler_sample); draft
 * is the drafted token (-1: none, the bonus position); q_ids/q_probs (q_n)
 * the distribution it was drawn from (q_n 0: it was chosen outright, a
 * point mass). *accepted says whether the draft was kept (the returned
 * token is then the draft). The sampler's history is not changed: the
 * caller accepts the token it keeps. */
int32_t llm_spec_verify(struct llm_sampler *target, float *logits, int32_t draft,
                        const int32_t *q_ids, const float *q_probs, int32_t q_n,
                        enum llm_spec_rule rule, struct llm_spec_scratch *sc, int *accepted);

/* The adaptive draft length. It keeps estimates, forgetting old rounds
 * (weight 0.9 a round), of
 * - alpha, the chance that a draft is kept given the one before it was
 *   (kept drafts over kept drafts plus rejections: the geometric model's
 *   estimate);
 * - the draft's time per step (one draft model call), and
 * - the target pass's time as a + b x tokens (least squares over the
 *   passes' token counts; b = a / 16 until two counts have been seen),
 * and drafts the k in 1 .. kmax with the most expected tokens,
 * (1 - alpha^(k+1)) / (1 - alpha), per expected second,
 * a + b (k + 1) + k x draft step; or nothing (k = 0, a plain step) when
 * no k beats a plain step's 1 / (a + b) by 10%, with one draft after 32 plain
 * steps to see whether that has changed (after 128, 512, 1024 while it
 * has not). */
struct llm_spec_tuner {
    double kept, rejected;          /* decayed counts */
    double step_s, steps;           /* decayed draft seconds and calls */
    double w, sn, snn, st, snt;     /* decayed sums of the target passes: 1, n, n^2, t, n t */
    int32_t plain;                  /* plain steps since the last draft */
    int32_t probe;                  /* plain steps before the next look (32 .. 1024) */
    double ratio;                   /* a draft step over a one-token pass until timed */
};
/* The tuner, with the prior cost of a draft step over a one-token target
 * pass (0: free, as lookup's) that holds until a step is timed: without
 * it, the first rounds draft as if drafts were free, which a draft that
 * never pays (a q4 draft of a q8_0 target: 0.6) loses. */
void llm_spec_tuner_init(struct llm_spec_tuner *t, double ratio);
/* That prior: the draft's weight bytes over the target's, the ratio of
 * their bandwidth-bound decode (0 without a draft). */
double llm_spec_cost_ratio(struct llm_context *target, struct llm_context *draft);
/* A round: nd drafted, kept of them; the draft's steps (calls of one or
 * two tokens) and their seconds; the target pass's tokens and seconds
 * (rows 0: no pass). */
void llm_spec_tuner_round(struct llm_spec_tuner *t, int32_t nd, int32_t kept, int32_t calls,
                          double draft_s, int32_t rows, double pass_s);
/* The k to draft next, 0 .. kmax. */
int32_t llm_spec_tuner_k(const struct llm_spec_tuner *t, int32_t kmax);

#endif
