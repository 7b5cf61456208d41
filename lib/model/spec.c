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
    p->ngram_min = 1;
    p->ngram_max = 3;
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

int32_t llm_spec_next_k(int32_t k, int32_t drafted, int32_t kept, int32_t kmax)
{
    if (drafted <= 0)
        return k;
    k = kept == drafted ? k + 2 : k - 1;
    return k < 1 ? 1 : k > kmax ? kmax : k;
}
