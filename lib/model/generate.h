/* generate.h: the generation loop behind llm-run: the prompt in slices,
 * then n_seq completions of it decoded as one batch, each through its own
 * sampler, streaming the text of each token as soon as no stop string can
 * still begin in it.
 *
 * The completions share the prompt's KV blocks (forks of the prompt): the
 * prompt is computed and stored once. Sequence i's sampler is seeded with
 * seed + i, and its logits do not depend on the others (llm_decode_batch),
 * so completion i is the text that a single run with seed + i gives. When a
 * KV budget is too small for all of them at once, the latest sequence is
 * preempted (its blocks released) and recomputed from its tokens later:
 * the same bits, so the same text.
 */
#ifndef LLM_MODEL_GENERATE_H
#define LLM_MODEL_GENERATE_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#include "../common/status.h"
#include "../grammar/grammar.h"
#include "../sample/sample.h"
#include "model.h"
#include "spec.h"

struct llm_gen_params {
    int32_t n_predict;              /* new tokens per completion at most; < 0: until EOS or the
                                       context is full */
    struct llm_sampler_params sp;   /* completion i draws with seed sp.seed + i */
    const char *const *stop;        /* stop strings (not printed) */
    size_t n_stop;
    int ignore_eos;                 /* keep going past end-of-generation tokens */
    int32_t top_logprobs;           /* > 0: report that many alternatives per token */
    int32_t n_seq;                  /* completions of the prompt (default 1); the context needs
                                       n_seq + 1 sequences when n_seq > 1 (one keeps the prompt) */
    volatile sig_atomic_t *interrupt; /* stop cleanly when it becomes non-zero (seen between
                                         prompt slices and between steps) */
    const struct llm_spec_params *spec; /* speculative decoding (a draft context or lookup;
                                           one completion), or NULL */
    struct llm_gmask *grammar;      /* constrained decoding (grammar/grammar.h), or NULL: each
                                       completion draws only tokens the grammar allows; a token
                                       that is the only one allowed is taken without a draw,
                                       and those that follow it alone are decoded with it in
                                       one pass (jump-forward) */
    /* A prompt whose KV is known (kv/state.h: --kv-in, --prompt-cache): */
    int32_t n_cached;               /* its first n_cached tokens are already stored in the
                                       prompt's slot (llm_gen_prompt_slot), computed by this
                                       model: only the rest is computed */
    const float *cached_logits;     /* (n_vocab) the logits after the whole prompt: needed
                                       when n_cached is the whole prompt */
    /* Called once the whole prompt is in the slot, with its last logits,
       before any token is drawn (--kv-out, --prompt-cache); may be NULL. */
    llm_status (*prefilled)(void *ctx, struct llm_context *c, int32_t slot,
                            const float *logits);
    void *prefilled_ctx;
    int prefill_only;               /* stop after the prompt: no token is drawn (results say
                                       "prefill") */
};
void llm_gen_params_default(struct llm_gen_params *p);
/* The sequence that holds the prompt of n_seq completions. */
static inline int32_t llm_gen_prompt_slot(int32_t n_seq)
{
    return n_seq > 1 ? n_seq : 0;
}

/* One generated token (for --top-logprobs and --json). */
struct llm_gen_token {
    int32_t id;
    float logprob;                  /* log-probability under the model (before penalties) */
    int32_t n_top;
    const int32_t *top_ids;         /* (n_top), best first */
    const float *top_lp;            /* (n_top) */
};

struct llm_gen_callbacks {
    /* Text of completion `seq` ready for output (bytes, possibly a partial
     * UTF-8 sequence). */
    llm_status (*text)(void *ctx, int32_t seq, const char *bytes, size_t len);
    /* Each sampled token, before its text (optional). */
    llm_status (*token)(void *ctx, int32_t seq, const struct llm_gen_token *t);
    void *ctx;
};

/* The result of one completion. */
struct llm_gen_result {
    int32_t n_prompt;               /* prompt tokens processed: fewer than given when
                                       interrupted during the prefill */
    int32_t n_cached;               /* of them, found in the KV already (n_cached) */
    int32_t n_gen;
    double t_prompt_s, t_gen_s;     /* prompt processing, then generation (all completions) */
    const char *stop_reason;        /* "eos", "stop", "length", "context", "interrupted",
                                       "prefill" (prefill_only) */
    int32_t n_preempted;            /* times its blocks were released and recomputed */
    int32_t n_passes;               /* forward passes of the model that decoded its tokens */
    int64_t n_drafted, n_accepted;  /* speculative decoding: tokens drafted, and kept */
    int32_t n_draft_rounds;         /* target passes that checked at least one draft */
    int32_t n_forced;               /* tokens the grammar forced (taken without a draw) */
};

/* The earliest occurrence in s (len bytes) of any of the n_stop stop
 * strings, or len when there is none. */
size_t llm_stop_find(const char *s, size_t len, const char *const *stop, size_t n_stop);

/* Prompt lookup (llm_spec_lookup with sp's n-gram sizes): up to want
 * tokens after toks (n) into d, cut at the first that the grammar refuses
 * from gm's place (NULL: no grammar); *nd receives how many. */
llm_status llm_spec_lookup_masked(const struct llm_spec_params *sp, const int32_t *toks, int32_t n,
                                  const struct llm_gmatch *gm, int32_t want, int32_t *d,
                                  int32_t *nd);

/* Run `prompt` (n_prompt >= 1 tokens) through fresh sequences of `c` and
 * generate p->n_seq completions; res (n_seq) receives their results. The
 * model must have a tokenizer. */
llm_status llm_generate(struct llm_context *c, const int32_t *prompt, size_t n_prompt,
                        const struct llm_gen_params *p, const struct llm_gen_callbacks *cb,
                        struct llm_gen_result *res);

#endif
