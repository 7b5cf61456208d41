/* generate.h: the single-sequence generation loop behind llm-run: the
 * prompt in batches of 512 tokens, then one token per step through the
 * sampler, streaming the text of each token as soon as no stop string can
 * still begin in it. */
#ifndef LLM_MODEL_GENERATE_H
#define LLM_MODEL_GENERATE_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#include "../common/status.h"
#include "../sample/sample.h"
#include "model.h"

struct llm_gen_params {
    int32_t n_predict;              /* new tokens at most; < 0: until EOS or the context is full */
    struct llm_sampler_params sp;
    const char *const *stop;        /* stop strings (not printed) */
    size_t n_stop;
    int ignore_eos;                 /* keep going past end-of-generation tokens */
    int32_t top_logprobs;           /* > 0: report that many alternatives per token */
    volatile sig_atomic_t *interrupt; /* stop cleanly when it becomes non-zero (seen between
                                         prompt batches and between tokens) */
};
void llm_gen_params_default(struct llm_gen_params *p);

/* One generated token (for --top-logprobs and --json). */
struct llm_gen_token {
    int32_t id;
    float logprob;                  /* log-probability under the model (before penalties) */
    int32_t n_top;
    const int32_t *top_ids;         /* (n_top), best first */
    const float *top_lp;            /* (n_top) */
};

struct llm_gen_callbacks {
    /* Text ready for output (bytes, possibly a partial UTF-8 sequence). */
    llm_status (*text)(void *ctx, const char *bytes, size_t len);
    /* Each sampled token, before its text (optional). */
    llm_status (*token)(void *ctx, const struct llm_gen_token *t);
    void *ctx;
};

struct llm_gen_result {
    int32_t n_prompt;               /* prompt tokens processed: fewer than given when
                                       interrupted during the prefill */
    int32_t n_gen;
    double t_prompt_s, t_gen_s;     /* prompt processing, then generation */
    const char *stop_reason;        /* "eos", "stop", "length", "context", "interrupted" */
};

/* Run `prompt` (n_prompt >= 1 tokens) through sequence 0 of a fresh context
 * and generate. The model must have a tokenizer. */
llm_status llm_generate(struct llm_context *c, const int32_t *prompt, size_t n_prompt,
                        const struct llm_gen_params *p, const struct llm_gen_callbacks *cb,
                        struct llm_gen_result *res);

#endif
