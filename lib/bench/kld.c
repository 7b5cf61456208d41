/* kld.c: llm-bench --ppl --base: the KL divergence of a model's next-token
 * distributions from a base model's, as llama-perplexity --kl-divergence
 * reports it (mean with its standard error, median, 99th percentile, top-1
 * agreement, both perplexities). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../common/alloc.h"
#include "../common/io.h"
#include "../model/model.h"
#include "../tokenizer/tokenizer.h"
#include "bench.h"

void llm_log_softmax(const float *logits, int64_t n, double *lp)
{
    double mx = logits[0];
    for (int64_t i = 1; i < n; i++)
        mx = logits[i] > mx ? logits[i] : mx;
    double sum = 0;
    for (int64_t i = 0; i < n; i++)
        sum += exp((double)logits[i] - mx);
    double lse = mx + log(sum);
    for (int64_t i = 0; i < n; i++)
        lp[i] = (double)logits[i] - lse;
}

double llm_kl_divergence(const double *lp, const double *lq, int64_t n)
{
    double kl = 0;
    for (int64_t i = 0; i < n; i++) {
        double p = exp(lp[i]);
        if (p > 0)
            kl += p * (lp[i] - lq[i]);
    }
    /* rounding can leave a tiny negative sum for equal distributions */
    return kl > 0 ? kl : 0;
}

int64_t llm_argmax(const float *x, int64_t n)
{
    int64_t best = 0;
    for (int64_t i = 1; i < n; i++)
        if (x[i] > x[best])
            best = i;
    return best;
}

/* exp(mean) and exp(mean) x the standard error of the mean (llm_perplexity). */
static void ppl_of(const double *nll, size_t n, double *ppl, double *se)
{
    double sum = 0, sum2 = 0;
    for (size_t i = 0; i < n; i++)
        sum += nll[i], sum2 += nll[i] * nll[i];
    double mean = sum / (double)n, var = sum2 / (double)n - mean * mean;
    *ppl = exp(mean);
    *se = var > 0 && n > 1 ? sqrt(var / (double)(n - 1)) * *ppl : 0.0;
}

llm_status llm_kld_summarize(struct llm_kld_summary *s, const double *kld, const double *nll_base,
                             const double *nll_model, const unsigned char *agree, size_t n)
{
    memset(s, 0, sizeof *s);
    LLM_CHECK(n > 0, LLM_E_INVALID, "kld: no tokens scored");
    struct llm_stats st;
    LLM_TRY(llm_stats_compute(&st, kld, n));
    s->n = n;
    s->kld_mean = st.mean;
    s->kld_stderr = st.sd / sqrt((double)n);
    s->kld_median = st.median;
    s->kld_p99 = st.p99;
    size_t same = 0;
    for (size_t i = 0; i < n; i++)
        same += agree[i] != 0;
    s->top1_pct = 100.0 * (double)same / (double)n;
    ppl_of(nll_base, n, &s->ppl_base, &s->ppl_base_stderr);
    ppl_of(nll_model, n, &s->ppl_model, &s->ppl_model_stderr);
    return LLM_OK;
}

/* The BOS the tokenizer adds, or -1 (as llm_perplexity decides). */
static llm_status bos_of(struct llm_tokenizer *tk, int32_t *bos)
{
    int32_t *ids = NULL;
    size_t k = 0;
    *bos = -1;
    LLM_TRY(llm_tokenize(tk, "", 0, LLM_TOK_ADD_BOS, &ids, &k));
    if (k > 0)
        *bos = ids[0];
    llm_free(ids);
    return LLM_OK;
}

struct kld_work {
    int32_t n_vocab, n_ctx;
    float *lb, *lm;        // (n_ctx, n_vocab) logits of base and model
    double *pb, *pm;       // (n_vocab) log-probabilities
    double *kld, *nb, *nm; // (n scored)
    unsigned char *agree;
};

/* Score the second half of one window whose logits are in w->lb / w->lm. */
static void score_window(struct kld_work *w, const int32_t *toks, size_t *k)
{
    size_t nv = (size_t)w->n_vocab;
    for (int32_t j = w->n_ctx / 2; j < w->n_ctx - 1; j++, (*k)++) {
        const float *xb = w->lb + (size_t)j * nv, *xm = w->lm + (size_t)j * nv;
        llm_log_softmax(xb, w->n_vocab, w->pb);
        llm_log_softmax(xm, w->n_vocab, w->pm);
        w->kld[*k] = llm_kl_divergence(w->pb, w->pm, w->n_vocab);
        w->nb[*k] = -w->pb[toks[j + 1]];
        w->nm[*k] = -w->pm[toks[j + 1]];
        w->agree[*k] = llm_argmax(xb, w->n_vocab) == llm_argmax(xm, w->n_vocab);
    }
}

static llm_status kld_run(struct llm_context *cb, struct llm_context *cm, const int32_t *ids, size_t n_tok,
                          int32_t bos, struct kld_work *w, struct llm_kld_summary *s)
{
    size_t n_win = n_tok / (size_t)w->n_ctx;
    size_t per = (size_t)(w->n_ctx - 1 - w->n_ctx / 2), total = n_win * per;
    size_t nv = (size_t)w->n_vocab, nc = (size_t)w->n_ctx;
    int32_t *win = llm_malloc(nc * sizeof *win);
    w->lb = llm_malloc(nc * nv * sizeof(float));
    w->lm = llm_malloc(nc * nv * sizeof(float));
    w->pb = llm_malloc(nv * sizeof(double));
    w->pm = llm_malloc(nv * sizeof(double));
    w->kld = llm_malloc(total * sizeof(double));
    w->nb = llm_malloc(total * sizeof(double));
    w->nm = llm_malloc(total * sizeof(double));
    w->agree = llm_malloc(total);
    llm_status st = win && w->lb && w->lm && w->pb && w->pm && w->kld && w->nb && w->nm && w->agree
                        ? LLM_OK : LLM_E_NOMEM;
    size_t k = 0;
    for (size_t c = 0; c < n_win && !st; c++) {
        const int32_t *toks = ids + c * nc;
        memcpy(win, toks, nc * sizeof *win);
        if (bos >= 0)
            win[0] = bos;
        llm_context_reset(cb, 0);
        llm_context_reset(cm, 0);
        st = llm_decode(cb, 0, win, w->n_ctx, 0, w->lb, 1);
        if (!st)
            st = llm_decode(cm, 0, win, w->n_ctx, 0, w->lm, 1);
        if (!st)
            score_window(w, toks, &k);
    }
    if (!st)
        st = llm_kld_summarize(s, w->kld, w->nb, w->nm, w->agree, k);
    llm_free(win);
    llm_free(w->lb);
    llm_free(w->lm);
    llm_free(w->pb);
    llm_free(w->pm);
    llm_free(w->kld);
    llm_free(w->nb);
    llm_free(w->nm);
    llm_free(w->agree);
    return st;
}

llm_status llm_bench_kld(struct llm_model *base, struct llm_model *m, const char *path, int32_t n_ctx,
                         int n_threads, int64_t max_chunks, enum llm_type kv_k,
                         enum llm_type kv_v, struct llm_kld_summary *s, size_t *n_tokens)
{
    struct llm_tokenizer *tk = llm_model_tokenizer(m);
    LLM_CHECK(tk, LLM_E_INVALID, "the model has no tokenizer: the KL divergence needs one");
    int32_t n_vocab = llm_model_config(m)->n_vocab, nv_base = llm_model_config(base)->n_vocab;
    LLM_CHECK(n_vocab == nv_base, LLM_E_INVALID,
              "the base model has %d tokens in its vocabulary, the model %d: they must be the same", nv_base,
              n_vocab);
    LLM_CHECK(n_ctx >= 4, LLM_E_INVALID, "kld: window of %d tokens (at least 4)", n_ctx);
    char *text = NULL;
    size_t len;
    int32_t *ids = NULL, bos = -1;
    struct llm_context *cb = NULL, *cm = NULL;
    LLM_TRY(llm_read_file(path, (size_t)1 << 30, &text, &len));
    llm_status st = llm_tokenize(tk, text, len, LLM_TOK_ADD_BOS, &ids, n_tokens);
    if (!st && max_chunks > 0 && (uint64_t)*n_tokens / (uint64_t)n_ctx > (uint64_t)max_chunks)
        *n_tokens = (size_t)max_chunks * (size_t)n_ctx;
    if (!st && *n_tokens < 2 * (size_t)n_ctx)
        st = llm_error_set(LLM_E_INVALID, "%s: %zu tokens, at least %zu needed for a context of %d", path,
                           *n_tokens, 2 * (size_t)n_ctx, n_ctx);
    for (size_t i = 0; !st && i < *n_tokens; i++)
        if (ids[i] < 0 || ids[i] >= n_vocab)
            st = llm_error_set(LLM_E_INVALID, "%s: token %d is outside the vocabulary of %d", path, ids[i], n_vocab);
    if (!st)
        st = bos_of(tk, &bos);
    struct llm_context_params cp;
    llm_context_params_default(&cp);
    cp.n_ctx = n_ctx;
    cp.n_seq = 1;
    cp.n_threads = n_threads;
    if (!st)
        st = llm_context_new(&cb, base, &cp);
    cp.kv_type_k = kv_k;
    cp.kv_type_v = kv_v;
    if (!st)
        st = llm_context_new(&cm, m, &cp);
    if (!st) {
        struct kld_work w = { .n_vocab = n_vocab, .n_ctx = n_ctx };
        st = kld_run(cb, cm, ids, *n_tokens, bos, &w, s);
    }
    llm_context_free(cb);
    llm_context_free(cm);
    llm_free(ids);
    llm_free(text);
    return st;
}
