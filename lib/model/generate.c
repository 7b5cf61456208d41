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
    int32_t n_todo;         /* tokens at the end of gen not yet decoded (next is the last) */
    struct llm_gmatch *gm;  /* its place in the grammar, or NULL */
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
    int32_t *bt, *bp, *bs;  /* (n * GEN_FORCED_MAX) a step's batch */
    int8_t *bl;             /* (n * GEN_FORCED_MAX) which of its tokens give logits */
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

/* Completion i takes token id (drawn from its logits, whose copy before
 * the sampler is g->raw with --top-logprobs) and emits its text: either it
 * ends, or q->next is the token to decode. */
static llm_status emit(struct gen *g, int32_t i, int32_t id)
{
    const struct llm_gen_params *p = g->p;
    struct gseq *q = &g->s[i];
    if (q->gm)
        LLM_TRY(llm_gmatch_accept(q->gm, id));
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
    if ((!p->ignore_eos || (q->gm && llm_gmatch_must_end(q->gm))) &&
        llm_tokenizer_is_eog(g->tok, id))
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
    q->n_todo = q->next < 0 ? 1 : q->n_todo + 1;
    q->next = id;
    return LLM_OK;
}

/* The most tokens a grammar may force on one completion between passes. */
#define GEN_FORCED_MAX 32

static llm_status no_token(void)
{
    return llm_error_set(LLM_E_INVALID, "grammar: no token of the vocabulary can continue the "
                         "text here");
}

/* Completion q's logits masked by its grammar; *only: the token the grammar
 * alone allows (counted as forced: it is taken without a draw), else -1. */
static llm_status mask_logits(struct gseq *q, float *logits, int32_t *only)
{
    int32_t na;
    LLM_TRY(llm_gmatch_apply(q->gm, logits, &na, only));
    if (!na)
        return no_token();
    q->res->n_forced += *only >= 0;
    return LLM_OK;
}

/* Draw completion i's next token from its logits (masked by its grammar)
 * and emit it. The tokens the grammar then forces, one after another, are
 * emitted too and decoded with it (without --top-logprobs, which needs
 * each one's logits). */
static llm_status step_seq(struct gen *g, int32_t i)
{
    struct gseq *q = &g->s[i];
    q->fresh = 0;
    if (g->p->n_predict >= 0 && q->res->n_gen >= g->p->n_predict)
        return finish(g, i, "length");
    if (g->raw)
        memcpy(g->raw, q->logits, (size_t)g->n_vocab * sizeof(float));
    if (!q->gm)
        return emit(g, i, llm_sampler_sample(q->smp, q->logits));
    int32_t na, only;
    LLM_TRY(mask_logits(q, q->logits, &only));
    LLM_TRY(emit(g, i, only >= 0 ? only : llm_sampler_sample(q->smp, q->logits)));
    while (!g->raw && q->state == S_RUN && q->next >= 0 && q->n_todo < GEN_FORCED_MAX) {
        const uint64_t *bits;
        LLM_TRY(llm_gmatch_allowed(q->gm, &bits, &na, &only));
        if (!na)
            return no_token();
        if (only < 0)
            break;
        q->res->n_forced++;
        LLM_TRY(emit(g, i, only));
    }
    return LLM_OK;
}

/* Completion i, preempted, gets its blocks back: the prompt's shared ones,
 * and its own tokens but the pending ones computed again (the same bits as
 * the first time, so the same text follows). LLM_E_KV_FULL: not yet. */
static llm_status resume(struct gen *g, int32_t i)
{
    struct gseq *q = &g->s[i];
    const int32_t k = q->res->n_gen - q->n_todo; /* the rest are decoded next step */
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
        int32_t nb = 0, nout = 0;
        for (int32_t i = 0; i < g->n; i++) {
            struct gseq *q = &g->s[i];
            if (q->state != S_RUN || q->next < 0)
                continue;
            for (int32_t j = q->res->n_gen - q->n_todo; j < q->res->n_gen; j++) {
                g->bt[nb] = q->gen[j];
                g->bp[nb] = g->n_prompt + j;
                g->bl[nb] = j == q->res->n_gen - 1;
                g->bs[nb++] = i;
            }
            nout++;
        }
        if (!nb)
            return LLM_OK;
        struct llm_batch b = { .n = nb, .token = g->bt, .pos = g->bp, .seq = g->bs,
                               .logits = g->bl };
        llm_status s = llm_decode_batch(g->c, &b, g->blog);
        if (s == LLM_E_KV_FULL && nout > 1 && g->keep != 0) {
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
        for (int32_t j = 0, o = 0; j < nb; j++) {
            if (!g->bl[j])
                continue;
            struct gseq *q = &g->s[g->bs[j]];
            q->res->n_passes++;
            memcpy(q->logits, g->blog + (size_t)o++ * g->n_vocab,
                   (size_t)g->n_vocab * sizeof(float));
            q->next = -1;
            q->n_todo = 0;
            q->fresh = 1;
        }
        return LLM_OK;
    }
}

/* ---- speculative decoding (spec.h) --------------------------------------- */

/* What the one speculating completion keeps beside its gseq. */
struct spec_state {
    const struct llm_spec_params *sp;
    int32_t kmax;            /* the most tokens a round drafts */
    int sampled;             /* the draft samples (rejection rule, temp > 0) */
    int32_t *toks;           /* (n_ctx + 1) the prompt, then the tokens emitted */
    int32_t n_toks;
    int32_t *d;              /* (kmax) drafted tokens */
    int32_t *q_ids;          /* (kmax, n_vocab) with sampled: the distributions they came */
    float *q_probs;          /* (kmax, n_vocab)   from */
    int32_t *q_n;            /* (kmax) */
    float *dlog;             /* (n_vocab) the draft model's logits */
    int32_t dlen;            /* positions the draft context holds */
    struct llm_sampler *dsmp;
    int32_t *bt;             /* (kmax + 1) a target pass's tokens */
    float *rows;             /* (kmax + 1, n_vocab) and their logits */
    struct llm_spec_scratch sc;
    struct llm_spec_tuner tun;
    int32_t calls;           /* draft model steps of the round (calls of 1 or 2 tokens) */
    double calls_s;          /* and their seconds */
};

static void spec_free(struct spec_state *st)
{
    llm_free(st->toks);
    llm_free(st->d);
    llm_free(st->q_ids);
    llm_free(st->q_probs);
    llm_free(st->q_n);
    llm_free(st->dlog);
    llm_free(st->bt);
    llm_free(st->rows);
    llm_sampler_free(st->dsmp);
    llm_spec_scratch_release(&st->sc);
}

static llm_status spec_init(struct gen *g, struct spec_state *st, const int32_t *prompt)
{
    const struct llm_spec_params *sp = g->p->spec;
    const size_t V = (size_t)g->n_vocab;
    st->sp = sp;
    st->kmax = sp->draft_n > 0 ? sp->draft_n : sp->draft_max > 0 ? sp->draft_max : 16;
    llm_spec_tuner_init(&st->tun, llm_spec_cost_ratio(g->c, sp->draft));
    st->sampled = sp->draft && sp->rule == LLM_SPEC_REJECTION && g->p->sp.temp > 0;
    const size_t K = (size_t)st->kmax;
    st->toks = llm_malloc(((size_t)g->n_ctx + 1) * sizeof(int32_t));
    st->d = llm_malloc(K * sizeof(int32_t));
    st->bt = llm_malloc((K + 1) * sizeof(int32_t));
    st->rows = llm_malloc((K + 1) * V * sizeof(float));
    if (!st->toks || !st->d || !st->bt || !st->rows)
        return LLM_E_NOMEM;
    LLM_TRY(llm_spec_scratch_init(&st->sc, g->n_vocab));
    memcpy(st->toks, prompt, (size_t)g->n_prompt * sizeof(int32_t));
    st->n_toks = g->n_prompt;
    if (!sp->draft)
        return LLM_OK;
    if (llm_context_n_ctx(sp->draft) < g->n_ctx)
        return llm_error_set(LLM_E_INVALID, "the draft's context holds %d tokens, the target's %d",
                             llm_context_n_ctx(sp->draft), g->n_ctx);
    st->dlog = llm_malloc(V * sizeof(float));
    if (!st->dlog)
        return LLM_E_NOMEM;
    llm_context_reset(sp->draft, 0);
    if (st->sampled) {
        st->q_ids = llm_malloc(K * V * sizeof(int32_t));
        st->q_probs = llm_malloc(K * V * sizeof(float));
        st->q_n = llm_calloc(K, sizeof(int32_t));
        if (!st->q_ids || !st->q_probs || !st->q_n)
            return LLM_E_NOMEM;
        LLM_TRY(llm_spec_draft_sampler(&st->dsmp, &g->p->sp, g->n_vocab));
    }
    return LLM_OK;
}

llm_status llm_spec_lookup_masked(const struct llm_spec_params *sp, const int32_t *toks, int32_t n,
                                  const struct llm_gmatch *gm, int32_t want, int32_t *d,
                                  int32_t *nd)
{
    *nd = llm_spec_lookup(toks, n, sp->ngram_min, sp->ngram_max, want, d);
    if (!gm || !*nd)
        return LLM_OK;
    struct llm_gmatch *w;
    LLM_TRY(llm_gmatch_copy(&w, gm));
    for (int32_t j = 0; j < *nd; j++) /* cut at the first the grammar refuses */
        if (llm_gmatch_accept(w, d[j])) {
            llm_error_clear();
            *nd = j;
        }
    llm_gmatch_free(w);
    return LLM_OK;
}

/* Up to `want` tokens after toks (n_toks) into st->d: *nd receives how many. */
static llm_status spec_draft_model(struct gen *g, struct spec_state *st, int32_t want, int32_t *nd,
                                   struct llm_gmatch *gm);

static llm_status spec_draft(struct gen *g, struct spec_state *st, int32_t want, int32_t *nd)
{
    const struct llm_spec_params *sp = st->sp;
    *nd = 0;
    st->calls = 0;
    st->calls_s = 0;
    if (want <= 0)
        return LLM_OK;
    if (!sp->draft)
        return llm_spec_lookup_masked(sp, st->toks, st->n_toks, g->s[0].gm, want, st->d, nd);
    /* under a grammar, drafts follow it too: a copy of the matcher walks them */
    struct llm_gmatch *gm = NULL;
    if (g->s[0].gm)
        LLM_TRY(llm_gmatch_copy(&gm, g->s[0].gm));
    llm_status s = spec_draft_model(g, st, want, nd, gm);
    llm_gmatch_free(gm);
    return s;
}

/* spec_draft by the draft model, its logits masked by gm (NULL: none). */
static llm_status spec_draft_model(struct gen *g, struct spec_state *st, int32_t want, int32_t *nd,
                                   struct llm_gmatch *gm)
{
    const struct llm_spec_params *sp = st->sp;
    const size_t V = (size_t)g->n_vocab;
    /* the draft catches up with the tokens it has not seen */
    for (int32_t off = st->dlen; off < st->n_toks; off += (int32_t)GEN_PREFILL_SLICE) {
        int32_t m = st->n_toks - off;
        if (m > (int32_t)GEN_PREFILL_SLICE)
            m = (int32_t)GEN_PREFILL_SLICE;
        const double t0 = llm_now_s();
        LLM_TRY(llm_decode(sp->draft, 0, st->toks + off, m, off, st->dlog, 0));
        /* a step, for the tuner: not the catch-up after plain steps */
        if (m <= 2)
            st->calls++, st->calls_s += llm_now_s() - t0;
    }
    st->dlen = st->n_toks;
    for (int32_t j = 0; j < want; j++) {
        int32_t x, n_allowed, only;
        if (gm) {
            LLM_TRY(llm_gmatch_apply(gm, st->dlog, &n_allowed, &only));
            if (!n_allowed) /* nothing can follow: the drafts so far */
                break;
        }
        int32_t qn;
        x = llm_spec_draft_token(st->dsmp, st->dlog, g->n_vocab,
                                 st->sampled ? st->q_ids + (size_t)j * V : NULL,
                                 st->sampled ? st->q_probs + (size_t)j * V : NULL, &qn);
        if (st->sampled)
            st->q_n[j] = qn;
        st->d[j] = x;
        *nd = j + 1;
        if (gm && llm_gmatch_accept(gm, x)) { /* not expected: x was allowed */
            llm_error_clear();
            *nd = j;
            break;
        }
        if (gm && llm_gmatch_must_end(gm)) /* the grammar has ended: nothing to draft */
            break;
        if (j + 1 < want) {
            const double t0 = llm_now_s();
            LLM_TRY(llm_decode(sp->draft, 0, &x, 1, st->dlen, st->dlog, 0));
            st->dlen++;
            st->calls++, st->calls_s += llm_now_s() - t0;
        }
    }
    return LLM_OK;
}

/* The target's token *x at drafted position `at` (of nd drafts; at == nd
 * is the bonus position), from its logits. Under a grammar the logits are
 * masked first (the completion's matcher is at this position: the tokens
 * before it are emitted), and a token the grammar alone allows is taken
 * without a draw, as plain decoding does. */
static llm_status spec_pick(struct gen *g, struct spec_state *st, float *logits, int32_t nd,
                            int32_t at, int32_t *x, int *accepted)
{
    const size_t V = (size_t)g->n_vocab;
    struct gseq *q = &g->s[0];
    if (g->raw)
        memcpy(g->raw, logits, V * sizeof(float));
    const int has = at < nd;
    if (q->gm) {
        int32_t only;
        LLM_TRY(mask_logits(q, logits, &only));
        if (only >= 0) {
            *x = only;
            *accepted = has && st->d[at] == only;
            return LLM_OK;
        }
    }
    const int32_t qn = has && st->sampled ? st->q_n[at] : 0;
    *x = llm_spec_verify(q->smp, logits, has ? st->d[at] : -1,
                         qn ? st->q_ids + (size_t)at * V : NULL,
                         qn ? st->q_probs + (size_t)at * V : NULL, qn, st->sp->rule, &st->sc,
                         accepted);
    return LLM_OK;
}

/* Cut a context's sequence 0 back to its first n positions. A cut into a
 * block of q4ch keys that holds no fp16 rows any more keeps fewer (kv.h):
 * the rest are computed again from the tokens, which are the prompt and
 * the emitted ones. */
static llm_status spec_cut(struct gen *g, const struct spec_state *st, struct llm_context *c,
                           int32_t n)
{
    const int32_t kept = llm_context_truncate(c, 0, n);
    if (kept == n)
        return LLM_OK;
    int32_t *t = llm_malloc((size_t)(n - kept) * sizeof *t);
    if (!t)
        return LLM_E_NOMEM;
    for (int32_t p = kept; p < n; p++)
        t[p - kept] = p < g->n_prompt ? st->toks[p] : g->s[0].gen[p - g->n_prompt];
    llm_status s = llm_decode(c, 0, t, n - kept, kept, NULL, 0);
    llm_free(t);
    return s;
}

/* The end of a round that began with n_before tokens: counters, the
 * emitted tokens appended, the draft's context cut to what still holds. */
static llm_status spec_round_end(struct gen *g, struct spec_state *st, int32_t n_before,
                                 int32_t nd, int32_t kept, int32_t rows, double pass_s)
{
    llm_status s = LLM_OK;
    struct gseq *q = &g->s[0];
    q->res->n_drafted += nd;
    q->res->n_accepted += kept;
    q->res->n_draft_rounds += nd > 0;
    const int32_t have = g->n_prompt + q->res->n_gen;
    memcpy(st->toks + st->n_toks, q->gen + (st->n_toks - g->n_prompt),
           (size_t)(have - st->n_toks) * sizeof(int32_t));
    st->n_toks = have;
    /* the draft holds the tokens before the round and its drafts but the
     * last: those kept still hold */
    if (st->sp->draft) {
        int32_t valid = n_before + llm_spec_draft_kept(nd, kept);
        if (valid < st->dlen) {
            st->dlen = valid;
            s = spec_cut(g, st, st->sp->draft, valid);
        }
    }
    llm_spec_tuner_round(&st->tun, nd, kept, st->calls, st->calls_s, rows, pass_s);
    return s;
}

/* Generation of the one completion by speculation: each round drafts,
 * checks the drafts in one target pass (the pending token first), emits
 * the kept ones and the target's token after them, and cuts the target's
 * KV back to the tokens kept. */
static llm_status spec_generate(struct gen *g, struct spec_state *st)
{
    const struct llm_gen_params *p = g->p;
    const size_t V = (size_t)g->n_vocab;
    struct gseq *q = &g->s[0];
    while (q->state == S_RUN) {
        if (p->interrupt && *p->interrupt)
            return finish(g, 0, "interrupted");
        /* the prompt and the tokens emitted; the last of them (q->next) is
         * not yet decoded unless the prompt's logits are fresh */
        const int32_t n = g->n_prompt + q->res->n_gen;
        int64_t room = p->n_predict >= 0 ? (int64_t)p->n_predict - q->res->n_gen : INT32_MAX;
        if (room <= 0)
            return finish(g, 0, "length");
        /* a round emits up to want + 1 tokens; the drafts take positions
         * n .. n + want - 1 (after the pending token at n - 1, if any) */
        int64_t want = st->sp->draft_n > 0 ? st->sp->draft_n : llm_spec_tuner_k(&st->tun, st->kmax);
        if (want > room - 1)
            want = room - 1;
        if (want > g->n_ctx - n)
            want = g->n_ctx - n;
        int32_t nd, j = 0, kept = 0;
        int acc;
        LLM_TRY(spec_draft(g, st, (int32_t)want, &nd));
        if (q->fresh) {
            /* the prompt's logits check the first draft */
            q->fresh = 0;
            int32_t x;
            LLM_TRY(spec_pick(g, st, q->logits, nd, 0, &x, &acc));
            LLM_TRY(emit(g, 0, x));
            kept += acc;
            if (q->state != S_RUN || !acc) {
                LLM_TRY(spec_round_end(g, st, n, nd, kept, 0, 0));
                continue;
            }
            j = 1;
        }
        /* one pass: the pending token, then the drafts from j */
        int32_t nb = 0;
        st->bt[nb++] = q->next;
        for (int32_t t = j; t < nd; t++)
            st->bt[nb++] = st->d[t];
        const int32_t pos0 = g->n_prompt + q->res->n_gen - 1;
        const double t0 = llm_now_s();
        LLM_TRY(llm_decode(g->c, 0, st->bt, nb, pos0, st->rows, 1));
        const double pass_s = llm_now_s() - t0;
        q->res->n_passes++;
        int32_t kept_pass = 0;
        for (int32_t r = 0; r < nb && q->state == S_RUN; r++) {
            int32_t x;
            LLM_TRY(spec_pick(g, st, st->rows + (size_t)r * V, nd, j + r, &x, &acc));
            LLM_TRY(emit(g, 0, x));
            kept_pass += acc;
            if (!acc)
                break;
        }
        kept += kept_pass;
        /* rollback: the target keeps the pending token and the drafts kept */
        if (q->state == S_RUN)
            LLM_TRY(spec_cut(g, st, g->c, pos0 + 1 + kept_pass));
        LLM_TRY(spec_round_end(g, st, n, nd, kept, nb, pass_s));
    }
    return LLM_OK;
}

static void gen_free(struct gen *g)
{
    for (int32_t i = 0; g->s && i < g->n; i++) {
        llm_sampler_free(g->s[i].smp);
        llm_free(g->s[i].pend.buf);
        llm_free(g->s[i].gen);
        llm_free(g->s[i].logits);
        llm_gmatch_free(g->s[i].gm);
    }
    llm_free(g->s);
    llm_free(g->raw);
    llm_free(g->top_ids);
    llm_free(g->top_lp);
    llm_free(g->bt);
    llm_free(g->bl);
    llm_free(g->blog);
}

static llm_status gen_init(struct gen *g, struct llm_gen_result *res)
{
    const int32_t n = g->n;
    const size_t V = (size_t)g->n_vocab;
    const int32_t ntop = g->p->top_logprobs > 0 ? g->p->top_logprobs : 0;
    g->s = llm_calloc((size_t)n, sizeof *g->s);
    const size_t nt = (size_t)n * GEN_FORCED_MAX;
    g->bt = llm_malloc(3 * nt * sizeof(int32_t));
    g->bl = llm_malloc(nt);
    g->blog = llm_malloc((size_t)n * V * sizeof(float));
    if (ntop) {
        g->raw = llm_malloc(V * sizeof(float));
        g->top_ids = llm_calloc((size_t)ntop, sizeof(int32_t));
        g->top_lp = llm_calloc((size_t)ntop, sizeof(float));
    }
    if (!g->s || !g->bt || !g->bl || !g->blog ||
        (ntop && (!g->raw || !g->top_ids || !g->top_lp)))
        return LLM_E_NOMEM;
    g->bp = g->bt + nt;
    g->bs = g->bp + nt;
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
        if (g->p->grammar)
            LLM_TRY(llm_gmatch_new(&q->gm, g->p->grammar));
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
    const int spec = p->spec && (p->spec->draft || p->spec->lookup);
    if (spec && g.n > 1)
        return llm_error_set(LLM_E_INVALID, "speculative decoding makes one completion, not %d",
                             g.n);
    g.keep = llm_gen_prompt_slot(g.n);
    size_t cached = p->n_cached > 0 ? (size_t)p->n_cached : 0;
    if (cached > n_prompt || llm_context_seq_len(c, g.keep) < (int32_t)cached ||
        (cached == n_prompt && !p->cached_logits))
        return llm_error_set(LLM_E_INVALID, "%zu cached prompt tokens, of %zu, are not in "
                             "sequence %d with their logits", cached, n_prompt, g.keep);
    g.n_prompt = (int32_t)n_prompt;
    for (int32_t i = 0; i < g.n; i++)
        if (i != g.keep)
            llm_context_reset(c, i);
    /* (q4ch keys may keep fewer: those are computed again) */
    cached = (size_t)llm_context_truncate(c, g.keep, (int32_t)cached);
    llm_status s = gen_init(&g, res);
    for (int32_t i = 0; i < g.n; i++) {
        res[i].n_prompt = g.n_prompt;
        res[i].n_cached = (int32_t)cached;
        res[i].stop_reason = "length";
    }
    double t0 = llm_now_s();
    if (!s && cached == n_prompt)
        memcpy(g.s[0].logits, p->cached_logits, (size_t)g.n_vocab * sizeof(float));
    int done = 0;
    for (size_t off = cached; !s && off < n_prompt; off += GEN_PREFILL_SLICE) {
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
    if (!s && !done && p->prefilled)
        s = p->prefilled(p->prefilled_ctx, c, g.keep, g.s[0].logits);
    if (!s && !done && p->prefill_only) {
        for (int32_t i = 0; i < g.n; i++)
            res[i].stop_reason = "prefill";
        done = 1;
    }
    double t1 = llm_now_s();
    for (int32_t i = 0; i < g.n; i++)
        res[i].t_prompt_s = t1 - t0;
    struct spec_state st = { 0 };
    if (!s && !done && spec) {
        s = spec_init(&g, &st, prompt);
        if (!s)
            s = spec_generate(&g, &st);
        done = 1;
    }
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
    spec_free(&st);
    gen_free(&g);
    return s;
}
