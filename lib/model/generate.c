/* generate.c: the generation loop and its stop-string hold-back. */
#include "generate.h"

#include <string.h>
#include <time.h>

#include "../common/alloc.h"
#include "../tokenizer/tokenizer.h"

void llm_gen_params_default(struct llm_gen_params *p)
{
    memset(p, 0, sizeof *p);
    p->n_predict = -1;
    llm_sampler_params_default(&p->sp);
}

/* Prompt tokens per llm_decode call: llm_context_new's batch for contexts of
 * 512 tokens or more (a shorter context takes the whole prompt in one). */
#define GEN_PREFILL_SLICE ((size_t)512)

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Text not yet emitted, because a stop string may begin in it. */
struct pending {
    char *buf;
    size_t len, cap;
};

/* Bytes of pending text (of length len) that cannot be the beginning of a
 * stop string: everything before the longest suffix that is a proper prefix
 * of one. */
static size_t safe_len(const char *s, size_t len, const char *const *stop, size_t n_stop)
{
    size_t hold = 0;
    for (size_t i = 0; i < n_stop; i++) {
        size_t sl = strlen(stop[i]);
        if (!sl)
            continue;
        for (size_t k = sl - 1 < len ? sl - 1 : len; k > hold; k--)
            if (memcmp(s + len - k, stop[i], k) == 0) {
                hold = k;
                break;
            }
    }
    return len - hold;
}

/* Earliest occurrence of any stop string, or len. */
static size_t find_stop(const char *s, size_t len, const char *const *stop, size_t n_stop)
{
    size_t best = len;
    for (size_t i = 0; i < n_stop; i++) {
        size_t sl = strlen(stop[i]);
        for (size_t at = 0; sl && at + sl <= len && at < best; at++)
            if (memcmp(s + at, stop[i], sl) == 0) {
                best = at;
                break;
            }
    }
    return best;
}

llm_status llm_generate(struct llm_context *c, const int32_t *prompt, size_t n_prompt,
                        const struct llm_gen_params *p, const struct llm_gen_callbacks *cb,
                        struct llm_gen_result *res)
{
    struct llm_model *m = llm_context_model(c);
    const struct llm_tokenizer *tok = llm_model_tokenizer(m);
    int32_t n_vocab = llm_model_config(m)->n_vocab, n_ctx = llm_context_n_ctx(c);
    memset(res, 0, sizeof *res);
    if (!tok)
        return llm_error_set(LLM_E_INVALID, "%s: the model has no tokenizer",
                             llm_model_file(m)->path);
    if (n_prompt == 0)
        return llm_error_set(LLM_E_INVALID, "the prompt is empty (no tokens to start from)");
    if (n_prompt > (size_t)n_ctx)
        return llm_error_set(LLM_E_INVALID, "the prompt has %zu tokens, more than the context of %d "
                             "(use --ctx)", n_prompt, n_ctx);
    struct llm_sampler *smp = NULL;
    float *logits = llm_malloc((size_t)n_vocab * sizeof(float));
    float *raw = p->top_logprobs > 0 ? llm_malloc((size_t)n_vocab * sizeof(float)) : NULL;
    int32_t ntop = p->top_logprobs > 0 ? p->top_logprobs : 0;
    int32_t *top_ids = ntop ? llm_calloc((size_t)ntop, sizeof(int32_t)) : NULL;
    float *top_lp = ntop ? llm_calloc((size_t)ntop, sizeof(float)) : NULL;
    struct pending pend = { 0 };
    llm_status s = LLM_OK;
    if (!logits || (ntop && (!raw || !top_ids || !top_lp)))
        s = LLM_E_NOMEM;
    if (!s)
        s = llm_sampler_new(&smp, &p->sp, n_vocab);
    res->n_prompt = (int32_t)n_prompt;
    res->stop_reason = "length";
    double t0 = now_s();
    llm_context_reset(c, 0);
    /* The prompt goes in slices so that Ctrl-C is seen during a long prefill;
     * a slice is the context's batch, so the arithmetic is the same as in one
     * call. */
    int done = 0;
    for (size_t off = 0; !s && off < n_prompt; off += GEN_PREFILL_SLICE) {
        if (p->interrupt && *p->interrupt) {
            res->stop_reason = "interrupted";
            res->n_prompt = (int32_t)off;
            done = 1;
            break;
        }
        size_t nb = n_prompt - off < GEN_PREFILL_SLICE ? n_prompt - off : GEN_PREFILL_SLICE;
        s = llm_decode(c, 0, prompt + off, (int32_t)nb, (int32_t)off, logits, 0);
    }
    for (size_t i = 0; !s && !done && i < n_prompt; i++)
        llm_sampler_accept(smp, prompt[i]);
    double t1 = now_s();
    res->t_prompt_s = t1 - t0;
    int32_t pos = (int32_t)n_prompt, prev = prompt[n_prompt - 1];
    while (!s && !done) {
        if (p->n_predict >= 0 && res->n_gen >= p->n_predict)
            break;
        if (p->interrupt && *p->interrupt) {
            res->stop_reason = "interrupted";
            break;
        }
        if (raw)
            memcpy(raw, logits, (size_t)n_vocab * sizeof(float));
        int32_t id = llm_sampler_sample(smp, logits);
        llm_sampler_accept(smp, id);
        res->n_gen++;
        if (cb->token) {
            struct llm_gen_token gt = { .id = id };
            if (raw) {
                gt.logprob = llm_logprob(raw, n_vocab, id);
                gt.n_top = llm_top_logprobs(raw, n_vocab, ntop, top_ids, top_lp);
                gt.top_ids = top_ids;
                gt.top_lp = top_lp;
            }
            if ((s = cb->token(cb->ctx, &gt)))
                break;
        }
        if (!p->ignore_eos && llm_tokenizer_is_eog(tok, id)) {
            res->stop_reason = "eos";
            break;
        }
        const char *txt;
        size_t tl;
        if ((s = llm_token_piece_after(tok, prev, id, 0, &txt, &tl)))
            break;
        void *buf = pend.buf;
        s = llm_grow(&buf, &pend.cap, pend.len + tl + 1, 1);
        pend.buf = buf;
        if (s)
            break;
        memcpy(pend.buf + pend.len, txt, tl);
        pend.len += tl;
        size_t at = find_stop(pend.buf, pend.len, p->stop, p->n_stop);
        size_t emit = at < pend.len ? at : safe_len(pend.buf, pend.len, p->stop, p->n_stop);
        if (emit && cb->text && (s = cb->text(cb->ctx, pend.buf, emit)))
            break;
        memmove(pend.buf, pend.buf + emit, pend.len - emit);
        pend.len -= emit;
        if (at < pend.len + emit) {
            res->stop_reason = "stop";
            pend.len = 0;
            break;
        }
        prev = id;
        if (p->n_predict >= 0 && res->n_gen >= p->n_predict)
            break;
        if (pos >= n_ctx) {
            res->stop_reason = "context";
            break;
        }
        s = llm_decode(c, 0, &id, 1, pos++, logits, 0);
    }
    /* Held-back text that never became a stop string is output. */
    if (!s && pend.len && cb->text)
        s = cb->text(cb->ctx, pend.buf, pend.len);
    res->t_gen_s = now_s() - t1;
    llm_free(pend.buf);
    llm_sampler_free(smp);
    llm_free(logits);
    llm_free(raw);
    llm_free(top_ids);
    llm_free(top_lp);
    return s;
}
