/* generate.c: the generation loop: the prompt once, its completions as one
 * batch, stop strings held back, preemption by recomputation. */
#include "generate.h"

#include <string.h>

#include "../common/alloc.h"
#include "../common/num.h"
#include "../tokenizer/tokenizer.h"

void llm_gen_params_default(struct llm_gen_params *p)
{
    memset(p, 0, sizeof *p);
    p->n_predict = -1;
    p->n_seq = 1;
    llm_sampler_params_default(&p->sp);
}

/* Prompt tokens per llm_decode call, so that Ctrl-C is seen during a long
 * prefill; the slicing changes no bit of the result. */
#define GEN_PREFILL_SLICE ((size_t)512)

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

size_t llm_stop_find(const char *s, size_t len, const char *const *stop, size_t n_stop)
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

enum { S_RUN, S_WAIT, S_DONE };

/* One completion. */
struct gseq {
    struct llm_sampler *smp;
    struct pending pend;
    int32_t *gen;           /* (n_gen) its tokens, to recompute it after a preemption */
    size_t cap_gen;
    int32_t prev;           /* the token before the next one (for its text) */
    int32_t next;           /* sampled, not yet decoded; -1: none */
    int state, fresh;       /* fresh: logits hold its next distribution */
    float *logits;          /* (n_vocab) */
    struct llm_gen_result *res;
};

struct gen {
    struct llm_context *c;
    const struct llm_tokenizer *tok;
    const struct llm_gen_params *p;
    const struct llm_gen_callbacks *cb;
    int32_t n_vocab, n_ctx, n_prompt, n, keep; /* keep: the slot that holds the prompt */
    struct gseq *s;         /* (n) */
    float *raw;             /* (n_vocab) logits before the sampler, for --top-logprobs */
    int32_t *top_ids;
    float *top_lp;
    int32_t *bt, *bp, *bs;  /* (n) a step's batch */
    float *blog;            /* (n, n_vocab) its logits */
};

/* End completion i: its held-back text goes out, its blocks are released. */
static llm_status finish(struct gen *g, int32_t i, const char *why)
{
    struct gseq *q = &g->s[i];
    llm_status s = LLM_OK;
    if (q->pend.len && g->cb->text)
        s = g->cb->text(g->cb->ctx, i, q->pend.buf, q->pend.len);
    q->pend.len = 0;
    q->state = S_DONE;
    q->next = -1;
    q->res->stop_reason = why;
    llm_context_reset(g->c, i);
    return s;
}

/* Draw completion i's next token from its logits and emit its text:
 * either it ends, or q->next is the token to decode. */
static llm_status step_seq(struct gen *g, int32_t i)
{
    const struct llm_gen_params *p = g->p;
    struct gseq *q = &g->s[i];
    q->fresh = 0;
    if (p->n_predict >= 0 && q->res->n_gen >= p->n_predict)
        return finish(g, i, "length");
    if (g->raw)
        memcpy(g->raw, q->logits, (size_t)g->n_vocab * sizeof(float));
    int32_t id = llm_sampler_sample(q->smp, q->logits);
    llm_sampler_accept(q->smp, id);
    void *gp = q->gen;
    LLM_TRY(llm_grow(&gp, &q->cap_gen, (size_t)q->res->n_gen + 1, sizeof(int32_t)));
    q->gen = gp;
    q->gen[q->res->n_gen++] = id;
    if (g->cb->token) {
        struct llm_gen_token gt = { .id = id };
        if (g->raw) {
            gt.logprob = llm_logprob(g->raw, g->n_vocab, id);
            gt.n_top = llm_top_logprobs(g->raw, g->n_vocab, p->top_logprobs, g->top_ids,
                                        g->top_lp);
            gt.top_ids = g->top_ids;
            gt.top_lp = g->top_lp;
        }
        LLM_TRY(g->cb->token(g->cb->ctx, i, &gt));
    }
    if (!p->ignore_eos && llm_tokenizer_is_eog(g->tok, id))
        return finish(g, i, "eos");
    const char *txt;
    size_t tl;
    LLM_TRY(llm_token_piece_after(g->tok, q->prev, id, 0, &txt, &tl));
    void *buf = q->pend.buf;
    LLM_TRY(llm_grow(&buf, &q->pend.cap, q->pend.len + tl + 1, 1));
    q->pend.buf = buf;
    memcpy(q->pend.buf + q->pend.len, txt, tl);
    q->pend.len += tl;
    size_t at = llm_stop_find(q->pend.buf, q->pend.len, p->stop, p->n_stop);
    size_t emit = at < q->pend.len ? at : safe_len(q->pend.buf, q->pend.len, p->stop, p->n_stop);
    if (emit && g->cb->text)
        LLM_TRY(g->cb->text(g->cb->ctx, i, q->pend.buf, emit));
    memmove(q->pend.buf, q->pend.buf + emit, q->pend.len - emit);
    q->pend.len -= emit;
    if (at < q->pend.len + emit) {
        q->pend.len = 0;
        return finish(g, i, "stop");
    }
    q->prev = id;
    if (p->n_predict >= 0 && q->res->n_gen >= p->n_predict)
        return finish(g, i, "length");
    if (g->n_prompt + q->res->n_gen > g->n_ctx)
        return finish(g, i, "context");
    q->next = id;
    return LLM_OK;
}

/* Completion i, preempted, gets its blocks back: the prompt's shared ones,
 * and its own tokens but the pending one computed again (the same bits as
 * the first time, so the same text follows). LLM_E_KV_FULL: not yet. */
static llm_status resume(struct gen *g, int32_t i)
{
    struct gseq *q = &g->s[i];
    const int32_t k = q->res->n_gen - 1; /* the last token is q->next, decoded next step */
    LLM_TRY(llm_context_fork(g->c, g->keep, i, g->n_prompt));
    if (k > 0) {
        int32_t *pos = llm_malloc(2 * (size_t)k * sizeof(int32_t));
        if (!pos)
            return LLM_E_NOMEM;
        for (int32_t j = 0; j < k; j++)
            pos[j] = g->n_prompt + j, pos[k + j] = i;
        struct llm_batch b = { .n = k, .token = q->gen, .pos = pos, .seq = pos + k };
        llm_status s = llm_decode_batch(g->c, &b, NULL);
        llm_free(pos);
        if (s) {
            llm_context_reset(g->c, i);
            return s;
        }
    }
    q->state = S_RUN;
    return LLM_OK;
}

/* One decode step of every running completion with a pending token; when
 * the KV pool is full, the latest one is preempted and the step retried. */
static llm_status decode_step(struct gen *g)
{
    for (;;) {
        int32_t nb = 0;
        for (int32_t i = 0; i < g->n; i++) {
            struct gseq *q = &g->s[i];
            if (q->state != S_RUN || q->next < 0)
                continue;
            g->bt[nb] = q->next;
            g->bp[nb] = g->n_prompt + q->res->n_gen - 1;
            g->bs[nb++] = i;
        }
        if (!nb)
            return LLM_OK;
        struct llm_batch b = { .n = nb, .token = g->bt, .pos = g->bp, .seq = g->bs };
        llm_status s = llm_decode_batch(g->c, &b, g->blog);
        if (s == LLM_E_KV_FULL && nb > 1 && g->keep != 0) {
            struct gseq *v = &g->s[g->bs[nb - 1]];
            llm_context_reset(g->c, g->bs[nb - 1]);
            v->state = S_WAIT;
            v->res->n_preempted++;
            continue;
        }
        if (s == LLM_E_KV_FULL)
            return llm_error_set(s, "KV cache full: the pool's blocks cannot hold one "
                                 "sequence of %d tokens (use a larger KV budget)",
                                 g->n_prompt + g->s[g->bs[0]].res->n_gen);
        if (s)
            return s;
        for (int32_t j = 0; j < nb; j++) {
            struct gseq *q = &g->s[g->bs[j]];
            memcpy(q->logits, g->blog + (size_t)j * g->n_vocab, (size_t)g->n_vocab * sizeof(float));
            q->next = -1;
            q->fresh = 1;
        }
        return LLM_OK;
    }
}

static void gen_free(struct gen *g)
{
    for (int32_t i = 0; g->s && i < g->n; i++) {
        llm_sampler_free(g->s[i].smp);
        llm_free(g->s[i].pend.buf);
        llm_free(g->s[i].gen);
        llm_free(g->s[i].logits);
    }
    llm_free(g->s);
    llm_free(g->raw);
    llm_free(g->top_ids);
    llm_free(g->top_lp);
    llm_free(g->bt);
    llm_free(g->blog);
}

static llm_status gen_init(struct gen *g, struct llm_gen_result *res)
{
    const int32_t n = g->n;
    const size_t V = (size_t)g->n_vocab;
    const int32_t ntop = g->p->top_logprobs > 0 ? g->p->top_logprobs : 0;
    g->s = llm_calloc((size_t)n, sizeof *g->s);
    g->bt = llm_malloc(3 * (size_t)n * sizeof(int32_t));
    g->blog = llm_malloc((size_t)n * V * sizeof(float));
    if (ntop) {
        g->raw = llm_malloc(V * sizeof(float));
        g->top_ids = llm_calloc((size_t)ntop, sizeof(int32_t));
        g->top_lp = llm_calloc((size_t)ntop, sizeof(float));
    }
    if (!g->s || !g->bt || !g->blog || (ntop && (!g->raw || !g->top_ids || !g->top_lp)))
        return LLM_E_NOMEM;
    g->bp = g->bt + n;
    g->bs = g->bp + n;
    for (int32_t i = 0; i < n; i++) {
        struct gseq *q = &g->s[i];
        struct llm_sampler_params sp = g->p->sp;
        sp.seed += (uint64_t)i;
        q->res = &res[i];
        q->next = -1;
        q->logits = llm_malloc(V * sizeof(float));
        if (!q->logits)
            return LLM_E_NOMEM;
        LLM_TRY(llm_sampler_new(&q->smp, &sp, g->n_vocab));
    }
    return LLM_OK;
}

llm_status llm_generate(struct llm_context *c, const int32_t *prompt, size_t n_prompt,
                        const struct llm_gen_params *p, const struct llm_gen_callbacks *cb,
                        struct llm_gen_result *res)
{
    struct llm_model *m = llm_context_model(c);
    struct gen g = { .c = c, .tok = llm_model_tokenizer(m), .p = p, .cb = cb,
                     .n_vocab = llm_model_config(m)->n_vocab, .n_ctx = llm_context_n_ctx(c),
                     .n = p->n_seq > 0 ? p->n_seq : 1 };
    for (int32_t i = 0; i < g.n; i++)
        memset(&res[i], 0, sizeof *res);
    if (!g.tok)
        return llm_error_set(LLM_E_INVALID, "%s: the model has no tokenizer",
                             llm_model_file(m)->path);
    if (n_prompt == 0)
        return llm_error_set(LLM_E_INVALID, "the prompt is empty (no tokens to start from)");
    if (n_prompt > (size_t)g.n_ctx)
        return llm_error_set(LLM_E_INVALID, "the prompt has %zu tokens, more than the context of %d "
                             "(use --ctx)", n_prompt, g.n_ctx);
    if (g.n > 1 && g.n + 1 > llm_context_n_seq(c))
        return llm_error_set(LLM_E_INVALID, "%d completions need a context of %d sequences, not %d",
                             g.n, g.n + 1, llm_context_n_seq(c));
    /* several completions: the prompt stays in its own slot, shared by
     * them, so that a preempted one can be recomputed */
    g.keep = g.n > 1 ? g.n : 0;
    g.n_prompt = (int32_t)n_prompt;
    llm_status s = gen_init(&g, res);
    for (int32_t i = 0; i < g.n; i++) {
        res[i].n_prompt = g.n_prompt;
        res[i].stop_reason = "length";
    }
    double t0 = llm_now_s();
    for (int32_t i = 0; i < g.n; i++)
        llm_context_reset(c, i);
    llm_context_reset(c, g.keep);
    int done = 0;
    for (size_t off = 0; !s && off < n_prompt; off += GEN_PREFILL_SLICE) {
        if (p->interrupt && *p->interrupt) {
            for (int32_t i = 0; i < g.n; i++)
                res[i].stop_reason = "interrupted", res[i].n_prompt = (int32_t)off;
            done = 1;
            break;
        }
        size_t nb = n_prompt - off < GEN_PREFILL_SLICE ? n_prompt - off : GEN_PREFILL_SLICE;
        s = llm_decode(c, g.keep, prompt + off, (int32_t)nb, (int32_t)off, g.s[0].logits, 0);
    }
    for (int32_t i = 0; !s && !done && i < g.n; i++) {
        struct gseq *q = &g.s[i];
        for (size_t j = 0; j < n_prompt; j++)
            llm_sampler_accept(q->smp, prompt[j]);
        if (g.keep)
            s = llm_context_fork(c, g.keep, i, g.n_prompt);
        if (i)
            memcpy(q->logits, g.s[0].logits, (size_t)g.n_vocab * sizeof(float));
        q->prev = prompt[n_prompt - 1];
        q->fresh = 1;
    }
    double t1 = llm_now_s();
    for (int32_t i = 0; i < g.n; i++)
        res[i].t_prompt_s = t1 - t0;
    while (!s && !done) {
        int live = 0;
        for (int32_t i = 0; !s && i < g.n; i++) {
            struct gseq *q = &g.s[i];
            if (q->state == S_DONE)
                continue;
            if (p->interrupt && *p->interrupt) {
                s = finish(&g, i, "interrupted");
                continue;
            }
            if (q->state == S_RUN && q->fresh)
                s = step_seq(&g, i);
            live += q->state != S_DONE;
        }
        if (s || !live)
            break;
        /* the preempted come back in order, as room allows */
        for (int32_t i = 0; !s && i < g.n; i++)
            if (g.s[i].state == S_WAIT) {
                s = resume(&g, i);
                if (s == LLM_E_KV_FULL) {
                    llm_error_clear();
                    s = LLM_OK;
                    break;
                }
            }
        if (!s)
            s = decode_step(&g);
        int running = 0;
        for (int32_t i = 0; i < g.n; i++)
            running += g.s[i].state == S_RUN;
        if (!s && !running)
            s = llm_error_set(LLM_E_KV_FULL, "KV cache full: no completion fits in the pool "
                              "(use a larger KV budget)");
    }
    /* held-back text that never became a stop string is output */
    for (int32_t i = 0; i < g.n && g.s; i++) {
        if (g.s[i].state == S_DONE)
            continue;
        if (s)
            g.s[i].pend.len = 0;
        llm_status fs = finish(&g, i, res[i].stop_reason);
        if (!s)
            s = fs;
    }
    double t2 = llm_now_s();
    for (int32_t i = 0; i < g.n; i++)
        res[i].t_gen_s = t2 - t1;
    if (g.keep)
        llm_context_reset(c, g.keep);
    gen_free(&g);
    return s;
}
