/* spec.c: the parts of speculative decoding that do not run a model: the
 * draft's vocabulary check, prompt lookup, the acceptance rules and the
 * adaptive draft length. The loop itself is in generate.c. */
#include "spec.h"

#include <string.h>

#include "../common/alloc.h"
#include "../format/file.h"
#include "../tokenizer/tokenizer.h"

void llm_spec_params_default(struct llm_spec_params *p)
{
    memset(p, 0, sizeof *p);
    /* measured on rewrites of a given text (scripts/spec-prompts): single
     * tokens recur too often by chance to be worth drafting from */
    p->ngram_min = 2;
    p->ngram_max = 4;
    p->draft_max = 16;
    p->rule = LLM_SPEC_MATCH;
}

llm_status llm_spec_check_draft(struct llm_model *target, struct llm_model *draft)
{
    const char *tp = llm_model_file(target)->path, *dp = llm_model_file(draft)->path;
    const int32_t nt = llm_model_config(target)->n_vocab, nd = llm_model_config(draft)->n_vocab;
    if (nt != nd)
        return llm_error_set(LLM_E_INVALID, "%s: the draft's vocabulary has %d tokens, the target's "
                             "(%s) %d: a draft needs the target's vocabulary", dp, nd, tp, nt);
    const struct llm_tokenizer *a = llm_model_tokenizer(target), *b = llm_model_tokenizer(draft);
    if (!a || !b)
        return llm_error_set(LLM_E_INVALID, "%s: no tokenizer to compare with the target's (%s)",
                             dp, tp);
    if (llm_tokenizer_n_tokens(a) != llm_tokenizer_n_tokens(b))
        return llm_error_set(LLM_E_INVALID, "%s: the draft's tokenizer has %u tokens, the target's "
                             "(%s) %u", dp, llm_tokenizer_n_tokens(b), tp, llm_tokenizer_n_tokens(a));
    const int32_t n = (int32_t)llm_tokenizer_n_tokens(a);
    for (int32_t id = 0; id < n; id++) {
        const char *x, *y;
        size_t lx, ly;
        if (llm_token_piece(a, id, 1, &x, &lx, NULL) || llm_token_piece(b, id, 1, &y, &ly, NULL) ||
            lx != ly || memcmp(x, y, lx))
            return llm_error_set(LLM_E_INVALID, "%s: token %d of the draft is not the target's "
                                 "(%s): a draft needs the target's vocabulary", dp, id, tp);
    }
    return LLM_OK;
}

llm_status llm_spec_draft_sampler(struct llm_sampler **out, const struct llm_sampler_params *target,
                                  int32_t n_vocab)
{
    struct llm_sampler_params dp = *target;
    dp.repeat_penalty = 1;
    dp.presence_penalty = dp.frequency_penalty = 0;
    dp.seed ^= 0x9e3779b97f4a7c15ull;
    return llm_sampler_new(out, &dp, n_vocab);
}

int32_t llm_spec_draft_token(struct llm_sampler *dsmp, float *logits, int32_t n_vocab,
                             int32_t *q_ids, float *q_probs, int32_t *q_n)
{
    *q_n = 0;
    if (!dsmp) {
        int32_t x = 0;
        for (int32_t i = 1; i < n_vocab; i++)
            if (logits[i] > logits[x])
                x = i;
        return x;
    }
    const int32_t qn = llm_sampler_dist(dsmp, logits, q_ids, q_probs);
    double r = llm_sampler_uniform(dsmp), acc = 0;
    *q_n = qn;
    for (int32_t i = 0; i < qn; i++)
        if (r < (acc += q_probs[i]))
            return q_ids[i];
    return q_ids[qn - 1];
}

int32_t llm_spec_lookup(const int32_t *toks, int32_t n, int32_t ngram_min, int32_t ngram_max,
                        int32_t k, int32_t *out)
{
    if (ngram_min < 1)
        ngram_min = 1;
    for (int32_t g = ngram_max; g >= ngram_min && k > 0; g--) {
        if (g >= n)
            continue;
        const int32_t *tail = toks + n - g;
        /* the latest occurrence that ends before the tail begins to repeat
         * itself at the very end (start + g < n), so something follows it */
        for (int32_t start = n - g - 1; start >= 0; start--) {
            if (memcmp(toks + start, tail, (size_t)g * sizeof *toks))
                continue;
            int32_t m = 0;
            for (int32_t j = start + g; j < n && m < k; j++)
                out[m++] = toks[j];
            return m;
        }
    }
    return 0;
}

llm_status llm_spec_scratch_init(struct llm_spec_scratch *s, int32_t n_vocab)
{
    s->n_vocab = n_vocab;
    s->ids = llm_malloc((size_t)n_vocab * sizeof *s->ids);
    s->probs = llm_malloc((size_t)n_vocab * sizeof *s->probs);
    s->dense = llm_calloc((size_t)n_vocab, sizeof *s->dense);
    if (!s->ids || !s->probs || !s->dense) {
        llm_spec_scratch_release(s);
        return LLM_E_NOMEM;
    }
    return LLM_OK;
}

void llm_spec_scratch_release(struct llm_spec_scratch *s)
{
    llm_free(s->ids);
    llm_free(s->probs);
    llm_free(s->dense);
    memset(s, 0, sizeof *s);
}

int32_t llm_spec_verify(struct llm_sampler *target, float *logits, int32_t draft,
                        const int32_t *q_ids, const float *q_probs, int32_t q_n,
                        enum llm_spec_rule rule, struct llm_spec_scratch *sc, int *accepted)
{
    *accepted = 0;
    if (rule == LLM_SPEC_MATCH || draft < 0 || llm_sampler_params_of(target)->temp <= 0) {
        /* the token plain decoding draws here; greedy under either rule */
        int32_t x = llm_sampler_sample(target, logits);
        *accepted = x == draft;
        return x;
    }
    /* q(x): from the draft's distribution, or 1 for a token chosen outright */
    double qx = q_n ? 0 : 1;
    for (int32_t i = 0; i < q_n; i++)
        if (q_ids[i] == draft)
            qx = q_probs[i];
    const int32_t n = llm_sampler_dist(target, logits, sc->ids, sc->probs);
    double px = 0;
    for (int32_t i = 0; i < n; i++)
        if (sc->ids[i] == draft)
            px = sc->probs[i];
    if (llm_sampler_uniform(target) * qx < px) {
        *accepted = 1;
        return draft;
    }
    /* rejected: draw from max(0, p - q), over p's support (the residual is
     * 0 where p is) */
    if (q_n)
        for (int32_t i = 0; i < q_n; i++)
            sc->dense[q_ids[i]] = q_probs[i];
    else
        sc->dense[draft] = 1;
    double sum = 0;
    for (int32_t i = 0; i < n; i++) {
        double r = (double)sc->probs[i] - sc->dense[sc->ids[i]];
        sc->probs[i] = r > 0 ? (float)r : 0;
        sum += sc->probs[i];
    }
    if (q_n)
        for (int32_t i = 0; i < q_n; i++)
            sc->dense[q_ids[i]] = 0;
    else
        sc->dense[draft] = 0;
    /* p <= q everywhere only when p == q up to rounding, where the draft is
     * always kept in exact arithmetic */
    if (!(sum > 0)) {
        *accepted = 1;
        return draft;
    }
    double r = llm_sampler_uniform(target) * sum, acc = 0;
    int32_t last = sc->ids[0];
    for (int32_t i = 0; i < n; i++) {
        if (sc->probs[i] <= 0)
            continue;
        last = sc->ids[i];
        acc += sc->probs[i];
        if (r < acc)
            return sc->ids[i];
    }
    return last;
}

/* Old rounds' weight in the tuner's estimates, per round. */
#define TUNER_DECAY 0.9
/* Plain steps before a draft looks again whether drafting pays: at first,
 * and at most (four times longer each time it still does not: a look
 * costs the draft's catch-up on every token it missed, as much as a few
 * plain steps). */
#define TUNER_PROBE_MIN 32
#define TUNER_PROBE_MAX 1024

double llm_spec_cost_ratio(struct llm_context *target, struct llm_context *draft)
{
    if (!draft)
        return 0;
    const uint64_t tb = llm_model_weight_bytes(llm_context_model(target));
    return tb ? (double)llm_model_weight_bytes(llm_context_model(draft)) / (double)tb : 0;
}

void llm_spec_tuner_init(struct llm_spec_tuner *t, double ratio)
{
    memset(t, 0, sizeof *t);
    t->ratio = ratio > 0 ? ratio : 0;
    /* a prior worth a few rounds: alpha 0.75 */
    t->kept = 3;
    t->rejected = 1;
    t->probe = TUNER_PROBE_MIN;
}

/* The best k (0: a plain step) by the estimates. */
static int32_t tuner_best(const struct llm_spec_tuner *t, int32_t kmax)
{
    if (t->w <= 0 && t->ratio <= 0) /* nothing timed, drafts free: 4 */
        return kmax < 4 ? kmax : 4;
    const double alpha = t->kept / (t->kept + t->rejected);
    /* the pass: a + b n, by least squares where the counts vary enough;
     * before any, a one-token pass costs 1 */
    double a = 16.0 / 17, b = a / 16;
    if (t->w > 0) {
        const double mean_n = t->sn / t->w, mean_t = t->st / t->w;
        const double var = t->snn / t->w - mean_n * mean_n;
        b = var > 0.25 ? (t->snt / t->w - mean_n * mean_t) / var : -1;
        a = mean_t - b * mean_n;
        if (b < 0 || a <= 0) {
            a = mean_t / (1 + mean_n / 16);
            b = a / 16;
        }
    }
    /* a draft step: as timed, else the weights' prior */
    const double step = t->steps > 0 ? t->step_s / t->steps : t->ratio * (a + b);
    /* drafting must promise 10% more than a plain step: a round has costs
     * the model leaves out (the draft's catch-up, the bookkeeping) */
    int32_t best = 0;
    double best_rate = 1.1 / (a + b), ak = alpha;
    for (int32_t k = 1; k <= kmax; k++) {
        ak *= alpha; /* alpha^(k+1) */
        const double tokens = alpha < 1 ? (1 - ak) / (1 - alpha) : k + 1;
        const double rate = tokens / (a + b * (k + 1) + k * step);
        if (rate > best_rate * (1 + 1e-9))
            best_rate = rate, best = k;
    }
    return best;
}

void llm_spec_tuner_round(struct llm_spec_tuner *t, int32_t nd, int32_t kept, int32_t calls,
                          double draft_s, int32_t rows, double pass_s)
{
    if (nd > 0) {
        t->kept = TUNER_DECAY * t->kept + kept;
        t->rejected = TUNER_DECAY * t->rejected + (kept < nd);
    }
    if (calls > 0) {
        t->step_s = TUNER_DECAY * t->step_s + draft_s;
        t->steps = TUNER_DECAY * t->steps + calls;
    }
    if (rows > 0) {
        t->w = TUNER_DECAY * t->w + 1;
        t->sn = TUNER_DECAY * t->sn + rows;
        t->snn = TUNER_DECAY * t->snn + (double)rows * rows;
        t->st = TUNER_DECAY * t->st + pass_s;
        t->snt = TUNER_DECAY * t->snt + rows * pass_s;
    }
    if (nd == 0) {
        t->plain++;
        return;
    }
    /* a draft that still does not pay waits four times as long for the
     * next look */
    if (tuner_best(t, 64) == 0)
        t->probe = t->plain >= t->probe && 4 * t->probe <= TUNER_PROBE_MAX ? 4 * t->probe : t->probe;
    else
        t->probe = TUNER_PROBE_MIN;
    t->plain = 0;
}

int32_t llm_spec_tuner_k(const struct llm_spec_tuner *t, int32_t kmax)
{
    if (kmax < 1)
        return 1;
    const int32_t k = tuner_best(t, kmax);
    return k || t->plain < t->probe ? k : 1;
}
