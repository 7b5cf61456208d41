/* ppl.c: perplexity over non-overlapping windows (llama-perplexity's
 * protocol, or the GPTQ/AWQ papers' with score_all). */
#include <math.h>
#include <string.h>

#include "../common/alloc.h"
#include "../tokenizer/tokenizer.h"
#include "model.h"

/* -log softmax(logits)[target], in double. */
static double nll_of(const float *logits, int32_t n_vocab, int32_t target)
{
    float mx = logits[0];
    for (int32_t i = 1; i < n_vocab; i++)
        if (logits[i] > mx)
            mx = logits[i];
    double sum = 0;
    for (int32_t i = 0; i < n_vocab; i++)
        sum += exp((double)logits[i] - mx);
    return log(sum) - ((double)logits[target] - mx);
}

llm_status llm_perplexity(struct llm_context *c, const int32_t *tokens, size_t n, int32_t n_ctx,
                          int score_all, double *ppl, double *stderr_)
{
    struct llm_model *m = llm_context_model(c);
    int32_t n_vocab = llm_model_config(m)->n_vocab;
    if (n_ctx < 2 || n_ctx > llm_context_n_ctx(c))
        return llm_error_set(LLM_E_INVALID, "perplexity: window of %d tokens (2..%d)", n_ctx,
                             llm_context_n_ctx(c));
    /* llama-perplexity refuses texts shorter than two windows. */
    size_t need = score_all ? (size_t)n_ctx : 2 * (size_t)n_ctx;
    if (n < need)
        return llm_error_set(LLM_E_INVALID, "perplexity: %zu tokens, at least %zu needed for a "
                             "context of %d", n, need, n_ctx);
    int32_t bos = -1;
    struct llm_tokenizer *tok = llm_model_tokenizer(m);
    int add_bos = 0;
    if (tok && !score_all) {
        /* The tokenizer adds BOS when asked to iff the model wants one. */
        int32_t *ids = NULL;
        size_t k = 0;
        LLM_TRY(llm_tokenize(tok, "", 0, LLM_TOK_ADD_BOS, &ids, &k));
        add_bos = k > 0;
        bos = add_bos ? ids[0] : -1;
        llm_free(ids);
    }
    float *logits = llm_malloc((size_t)n_ctx * (size_t)n_vocab * sizeof(float));
    int32_t *win = llm_malloc((size_t)n_ctx * sizeof(int32_t));
    if (!logits || !win) {
        llm_free(logits);
        llm_free(win);
        return LLM_E_NOMEM;
    }
    size_t n_chunks = n / (size_t)n_ctx;
    int32_t first = score_all ? 0 : n_ctx / 2;
    double sum = 0, sum2 = 0;
    uint64_t count = 0;
    llm_status s = LLM_OK;
    for (size_t ch = 0; ch < n_chunks && !s; ch++) {
        memcpy(win, tokens + ch * (size_t)n_ctx, (size_t)n_ctx * sizeof(int32_t));
        if (add_bos)
            win[0] = bos;
        llm_context_reset(c, 0);
        s = llm_decode(c, 0, win, n_ctx, 0, logits, 1);
        /* logits[j] predicts window token j+1, which is the original token
         * (only position 0 was replaced). */
        for (int32_t j = first; j < n_ctx - 1 && !s; j++) {
            double v = nll_of(logits + (size_t)j * (size_t)n_vocab, n_vocab,
                              tokens[ch * (size_t)n_ctx + (size_t)j + 1]);
            sum += v;
            sum2 += v * v;
            count++;
        }
    }
    llm_context_reset(c, 0);
    llm_free(logits);
    llm_free(win);
    if (s)
        return s;
    double mean = sum / (double)count, var = sum2 / (double)count - mean * mean;
    *ppl = exp(mean);
    if (stderr_)
        *stderr_ = var > 0 && count > 1 ? sqrt(var / (double)(count - 1)) * *ppl : 0.0;
    return LLM_OK;
}
