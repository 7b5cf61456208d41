/* engine.h: continuous batching of requests over one context.
 *
 * Each step is one llm_decode_batch: every running sequence that has its
 * next token gets it decoded first, then prompts (and recomputations) are
 * computed in chunks within the step's token budget, then waiting requests
 * join while sequence slots and blocks allow, lowest priority value first,
 * first come first served within a level. A request's choices (n) share its
 * prompt's blocks (a fork); with the prefix index on, a prompt that begins
 * with blocks computed before takes them instead of computing them again.
 *
 * When the KV pool runs out, the prefix index gives back its least recently
 * used blocks first; then the running request with the highest priority
 * value, the newest among equals, is preempted: its blocks are released and
 * it waits again with what it has generated, to be recomputed when it is
 * readmitted. Every sequence owns its sampler and the forward pass is batch
 * invariant, so a request's output is the same bits whatever it ran beside,
 * however it was chunked, cached or preempted: the text a single llm-run
 * with its seed gives.
 *
 * With speculation (p->spec), each choice that decodes drafts tokens after
 * its pending one (by lookup, or by the draft model, whose steps run as
 * batches over all choices), and the step's one pass checks every choice's
 * drafts at once; each choice keeps the drafts its own sampler agrees with
 * (spec.h) and its KV is cut back to them. Under the match rule the text is
 * still plain decoding's.
 */
#ifndef LLM_SERVE_ENGINE_H
#define LLM_SERVE_ENGINE_H

#include <stdint.h>

#include "../common/status.h"
#include "../model/model.h"
#include "request.h"

struct llm_engine_params {
    int32_t max_seqs;       /* sequences running at once: the context's slots */
    int32_t step_tokens;    /* tokens per step at most (the context's n_batch or less) */
    int prefix_cache;       /* keep full blocks for later prompts (default 1) */
    int ignore_eos;         /* keep going past end-of-generation tokens */
    int record_itl;         /* keep every inter-token gap (llm_engine_itls; default 0:
                               a long batch run would hold one double per token) */
    int prefill_only;       /* compute prompts only: each goes to the prefilled
                               callback, then the request is answered with no choices */
    const struct llm_spec_params *spec; /* speculative decoding of every choice (NULL: none):
                               prompt lookup, or a draft context of max_seqs sequences as long
                               as the target's; the drafts of all choices are checked in the
                               step's one pass */
};
void llm_engine_params_default(struct llm_engine_params *p);

/* A request is answered: its choices (n), in order. The engine frees the
 * request after the call. */
struct llm_engine_callbacks {
    llm_status (*done)(void *ctx, const struct llm_request *r, const struct llm_choice_out *ch,
                       int32_t n, int32_t prompt_tokens);
    /* With prefill_only: the prompt of r (tokens, n) is in sequence slot
     * of the context, with the logits after it (n_vocab); the slot is
     * released after the call. */
    llm_status (*prefilled)(void *ctx, const struct llm_request *r, int32_t slot,
                            const int32_t *tokens, int32_t n, const float *logits);
    void *ctx;
};

/* Counters since the engine was made, and the state now. */
struct llm_engine_stats {
    int64_t added, finished, running, waiting;
    int64_t steps, prefill_tokens, decode_tokens, preemptions;
    int64_t lookup_tokens;  /* prompt tokens of admitted requests, with the prefix index on */
    int64_t hit_tokens;     /* of them, taken from the index */
    int64_t evicted_blocks;
    int32_t kv_blocks, kv_used, kv_free, kv_peak;
    int32_t kv_slots, kv_slots_peak; /* sliding-window layers' slots (kv/kv.h; 0: none) */
    int32_t kv_cached;      /* blocks the prefix index lists */
    int32_t kv_idle;        /* of them, held by the index alone */
    int32_t kv_logical;     /* table entries of all sequences (a shared block once per table) */
    int64_t kv_tokens;      /* positions held by running sequences */
    int32_t last_prefill, last_decode; /* tokens of the last step */
    /* speculative decoding: tokens drafted and kept, rounds that drafted;
       the target's passes that decoding choices took part in (one a step
       each), and the tokens those passes gave */
    int64_t spec_drafted, spec_accepted, spec_rounds, spec_passes, spec_tokens;
};

struct llm_engine;

/* An engine over context c (n_seq >= p->max_seqs, n_batch >= p->step_tokens),
 * which it uses alone until it is freed. */
llm_status llm_engine_new(struct llm_engine **out, struct llm_context *c,
                          const struct llm_engine_params *p, const struct llm_engine_callbacks *cb);
/* Release every sequence and block, and the requests not yet answered. */
void llm_engine_free(struct llm_engine *e);

/* Queue a request (tokenized, without error; n <= max_seqs). The engine
 * takes its contents over and leaves *r zeroed. A request with a state
 * (r->state, checked by the caller: this model, this cache's types, the
 * tokens r->ids) has its prompt loaded from it when admitted, not computed. */
llm_status llm_engine_add(struct llm_engine *e, struct llm_request *r);

/* The same for a request that arrived at t_arrival (llm_now_s's clock, not
 * later than now): its latencies count from then. */
llm_status llm_engine_add_at(struct llm_engine *e, struct llm_request *r, double t_arrival);

/* One step. Requests that finish are handed to the callback. Errors are the
 * callback's or the model's (a request that the pool cannot hold even
 * alone ends with finish_reason "length"). */
llm_status llm_engine_step(struct llm_engine *e);

/* Requests added and not yet answered. */
int64_t llm_engine_pending(const struct llm_engine *e);

void llm_engine_stats(const struct llm_engine *e, struct llm_engine_stats *st);

/* Each answered request's latencies, in answer order (n: how many), in
 * seconds from when it was queued: to its first token (TTFT), to its end,
 * and per output token after the first (TPOT, over its longest choice). */
struct llm_engine_latency {
    double ttft, e2e, tpot;
    int32_t tokens;
};
const struct llm_engine_latency *llm_engine_latencies(const struct llm_engine *e, size_t *n);

/* With record_itl, every gap between two successive tokens of a choice
 * (inter-token latency, seconds), in the order they were drawn (n: how
 * many; 0 without record_itl). A preempted choice's gap includes its
 * recomputation. */
const double *llm_engine_itls(const struct llm_engine *e, size_t *n);

#endif
