/* engine.c: the scheduler: continuous batching, chunked prefill, the prefix
 * index, priorities and preemption by recomputation. */
#include "engine.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../common/alloc.h"
#include "../grammar/grammar.h"
#include "../common/num.h"
#include "../kv/prefix.h"
#include "../model/generate.h"
#include "../model/kvstate.h"

void llm_engine_params_default(struct llm_engine_params *p)
{
    memset(p, 0, sizeof *p);
    p->max_seqs = 16;
    p->step_tokens = 512;
    p->prefix_cache = 1;
}

/* One choice of a request: a sequence. Its tokens are the prompt and what
 * it has generated; all but the last are in its slot's KV once it runs
 * (the last is decoded next, for the next distribution). */
struct choice {
    int32_t slot;               /* -1: not running */
    int32_t *toks;              /* (n_prompt + n_gen) */
    size_t cap_toks;
    int32_t n_gen;
    int32_t n_kv;               /* positions its slot holds */
    int forked;                 /* a choice other than the leader: has the prompt's blocks */
    int32_t row;                /* the row of the step's logits that holds its next
                                   distribution; -1: none yet */
    struct llm_sampler *smp;    /* made at the first admission, kept through preemption */
    struct llm_gmatch *gm;      /* its place in the request's grammar (made with smp), or NULL */
    char *text;                 /* (len) its text so far */
    size_t len, cap;
    const char *finish;         /* NULL while it runs */
    double t_last;              /* when it drew its last token (0: none yet) */
    float *lp;                  /* (n_gen) with logprobs */
    int32_t *top_ids;           /* (n_gen, k) */
    float *top_lp;              /* (n_gen, k) */
    size_t cap_lp, cap_ti, cap_tl;
    /* speculative decoding (p.spec) */
    int dec;                    /* decodes this step: its run is the pending token, then nd drafts */
    int32_t nd;                 /* drafts in this step's run */
    int32_t want;               /* drafts the step holds room for, until the draft model fills them */
    int32_t *d;                 /* (kmax) the drafts */
    int32_t *q_ids;             /* (kmax, n_vocab) sampled drafts: the distributions they came */
    float *q_probs;             /* (kmax, n_vocab)   from */
    int32_t *q_n;               /* (kmax) */
    struct llm_sampler *dsmp;   /* draws the sampled drafts */
    struct llm_gmatch *dgm;     /* a copy of gm that walks the drafts (draft model) */
    int32_t dlen;               /* positions its slot of the draft's context holds */
    int32_t calls;              /* this step's draft calls it took part in */
    double calls_s;             /* and its share of their seconds */
};

struct req {
    struct llm_request r;
    int admitted_now;           /* admitted in this step's plan, nothing computed yet */
    int32_t hit_now;            /* tokens its leader took from the prefix index then */
    int loaded_now;             /* its leader loaded the prompt's state then (no lookup) */
    int32_t n_prompt;
    size_t stop_max;            /* bytes of its longest stop string */
    int32_t leader;             /* the live choice that computes the prompt */
    int32_t n_live;
    int64_t order;
    double t_add, t_first;      /* when it was queued, when its first token was drawn (0: not yet) */
    float *pre;                 /* (n_vocab) the logits of a state loaded at admission, until
                                   they take their row */
    struct choice *ch;          /* (r.n) */
};

/* One run of a step's batch: k tokens of a choice from its n_kv on. */
struct entry {
    struct req *q;
    struct choice *c;
    int32_t k;
};

struct llm_engine {
    struct llm_context *c;
    struct llm_kv *kv;
    const struct llm_tokenizer *tok;
    struct llm_engine_params p;
    struct llm_engine_callbacks cb;
    struct llm_prefix *pc;
    int32_t n_vocab, n_ctx, bs;
    struct req **wait;          /* (n_wait) in order: priority, then arrival */
    size_t n_wait, cap_wait;
    struct req **run;           /* (n_run <= max_seqs) */
    int32_t n_run;
    int32_t *slots;             /* (n_slots) free slots */
    int32_t n_slots;
    struct entry *plan;         /* (n_plan <= step_tokens) */
    int32_t n_plan;
    int32_t *bt, *bp, *bq;      /* (step_tokens) token, position, slot */
    int8_t *bl;                 /* (step_tokens) logits wanted */
    float *blog;                /* (max_seqs, n_vocab) the step's logits, sampled in place: a
                                   row per choice that draws (forks that share a first
                                   distribution get a copy) */
    float *raw;                 /* (n_vocab) logits before the sampler */
    int32_t top_ids[LLM_REQ_MAX_TOP_LOGPROBS];
    float top_lp[LLM_REQ_MAX_TOP_LOGPROBS];
    int64_t order_next;
    struct llm_engine_stats st;
    struct llm_engine_latency *lat; /* (st.finished) one per answered request */
    size_t cap_lat;
    double *itl;                /* (n_itl) gaps between successive tokens of a choice */
    size_t n_itl, cap_itl;
    /* speculative decoding (p.spec; NULL: none) */
    const struct llm_spec_params *sp;
    int32_t kmax;               /* the most drafts a choice takes a step */
    struct llm_spec_tuner tun;  /* the draft length, from every choice's rounds */
    int32_t k_step;             /* this step's draft length */
    int32_t k_left;             /* choices that may still draft this step */
    const struct choice *look;  /* a look: the one choice that drafts (NULL: any) */
    struct llm_context *dc;     /* the draft model's context (NULL: lookup), slot for slot */
    struct llm_kv *dkv;
    float *dlog;                /* (max_seqs, n_vocab) each slot's latest draft logits */
    float *dout;                /* (max_seqs, n_vocab) a draft call's rows */
    int32_t *dbt, *dbp, *dbq;   /* (n_db) a draft call's tokens, positions, slots */
    int8_t *dbl;                /* (n_db) */
    int32_t n_db;               /* max(step_tokens, max_seqs) */
    struct llm_spec_scratch sc;
};

/* ---- requests ------------------------------------------------------------ */

static void req_free(struct req *q)
{
    if (!q)
        return;
    for (int32_t i = 0; q->ch && i < q->r.n; i++) {
        struct choice *c = &q->ch[i];
        llm_free(c->toks);
        llm_sampler_free(c->smp);
        llm_gmatch_free(c->gm);
        llm_free(c->text);
        llm_free(c->lp);
        llm_free(c->top_ids);
        llm_free(c->top_lp);
        llm_free(c->d);
        llm_free(c->q_ids);
        llm_free(c->q_probs);
        llm_free(c->q_n);
        llm_sampler_free(c->dsmp);
        llm_gmatch_free(c->dgm);
    }
    llm_free(q->ch);
    llm_free(q->pre);
    llm_request_free(&q->r);
    llm_free(q);
}

/* before: does a run ahead of b (lower priority value, then earlier)? */
static int ahead(const struct req *a, const struct req *b)
{
    return a->r.priority != b->r.priority ? a->r.priority < b->r.priority : a->order < b->order;
}

static llm_status wait_push(struct llm_engine *e, struct req *q)
{
    void *p = e->wait;
    LLM_TRY(llm_grow(&p, &e->cap_wait, e->n_wait + 1, sizeof *e->wait));
    e->wait = p;
    size_t lo = 0, hi = e->n_wait;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (ahead(e->wait[mid], q))
            lo = mid + 1;
        else
            hi = mid;
    }
    memmove(e->wait + lo + 1, e->wait + lo, (e->n_wait - lo) * sizeof *e->wait);
    e->wait[lo] = q;
    e->n_wait++;
    return LLM_OK;
}

static int32_t total_of(const struct req *q, const struct choice *c)
{
    return q->n_prompt + c->n_gen;
}

/* ---- engine -------------------------------------------------------------- */

/* Speculation's engine-wide parts: the draft context checked against the
 * target's, the draft calls' buffers. */
static llm_status spec_setup(struct llm_engine *e, const struct llm_spec_params *sp)
{
    e->sp = sp;
    e->kmax = sp->draft_n > 0 ? sp->draft_n : sp->draft_max > 0 ? sp->draft_max : 16;
    llm_spec_tuner_init(&e->tun, llm_spec_cost_ratio(e->c, sp->draft));
    LLM_TRY(llm_spec_scratch_init(&e->sc, e->n_vocab));
    if (!sp->draft)
        return LLM_OK;
    if (llm_context_n_seq(sp->draft) < e->p.max_seqs || llm_context_n_ctx(sp->draft) < e->n_ctx)
        return llm_error_set(LLM_E_INVALID, "engine: the draft's context has %d sequences of %d "
                             "tokens, the target's %d of %d", llm_context_n_seq(sp->draft),
                             llm_context_n_ctx(sp->draft), e->p.max_seqs, e->n_ctx);
    e->dc = sp->draft;
    e->dkv = llm_context_kv(e->dc);
    const size_t M = (size_t)e->p.max_seqs, V = (size_t)e->n_vocab;
    e->n_db = e->p.step_tokens > e->p.max_seqs ? e->p.step_tokens : e->p.max_seqs;
    e->dlog = llm_malloc(M * V * sizeof(float));
    e->dout = llm_malloc(M * V * sizeof(float));
    e->dbt = llm_malloc(3 * (size_t)e->n_db * sizeof(int32_t));
    e->dbl = llm_malloc((size_t)e->n_db);
    if (!e->dlog || !e->dout || !e->dbt || !e->dbl)
        return LLM_E_NOMEM;
    e->dbp = e->dbt + e->n_db;
    e->dbq = e->dbp + e->n_db;
    for (int32_t i = 0; i < e->p.max_seqs; i++)
        llm_context_reset(e->dc, i);
    return LLM_OK;
}

llm_status llm_engine_new(struct llm_engine **out, struct llm_context *c,
                          const struct llm_engine_params *p, const struct llm_engine_callbacks *cb)
{
    *out = NULL;
    struct llm_model *m = llm_context_model(c);
    if (!llm_model_tokenizer(m))
        return llm_error_set(LLM_E_INVALID, "%s: the model has no tokenizer",
                             llm_model_file(m)->path);
    if (p->prefill_only && !cb->prefilled)
        return llm_error_set(LLM_E_INVALID, "engine: prefill only, with no prefilled callback");
    if (p->max_seqs < 1 || p->max_seqs > llm_context_n_seq(c) || p->step_tokens < 1)
        return llm_error_set(LLM_E_INVALID, "engine: %d sequences and %d tokens a step do not "
                             "fit a context of %d sequences", p->max_seqs, p->step_tokens,
                             llm_context_n_seq(c));
    struct llm_engine *e = llm_calloc(1, sizeof *e);
    if (!e)
        return LLM_E_NOMEM;
    e->c = c;
    e->kv = llm_context_kv(c);
    e->tok = llm_model_tokenizer(m);
    e->p = *p;
    e->cb = *cb;
    e->n_vocab = llm_model_config(m)->n_vocab;
    e->n_ctx = llm_context_n_ctx(c);
    e->bs = e->kv->p.block_size;
    const size_t S = (size_t)p->step_tokens, V = (size_t)e->n_vocab;
    /* the step's rows of logits: one per choice that draws, and with
     * speculation one per drafted token too (within the step's tokens) */
    size_t rows = (size_t)p->max_seqs;
    llm_status s = LLM_OK;
    if (p->spec && !p->prefill_only) {
        s = spec_setup(e, p->spec);
        rows += S < (size_t)p->max_seqs * (size_t)(e->kmax + 1) ? S
                : (size_t)p->max_seqs * (size_t)(e->kmax + 1);
    }
    e->run = llm_calloc((size_t)p->max_seqs, sizeof *e->run);
    e->slots = llm_malloc((size_t)p->max_seqs * sizeof(int32_t));
    e->plan = llm_malloc(S * sizeof *e->plan);
    e->bt = llm_malloc(3 * S * sizeof(int32_t));
    e->bl = llm_malloc(S);
    e->blog = llm_malloc(rows * V * sizeof(float));
    e->raw = llm_malloc(V * sizeof(float));
    if (!s && (!e->run || !e->slots || !e->plan || !e->bt || !e->bl || !e->blog || !e->raw))
        s = LLM_E_NOMEM;
    if (!s && p->prefix_cache)
        s = llm_prefix_new(&e->pc, e->kv);
    if (s) {
        llm_engine_free(e);
        return s;
    }
    e->bp = e->bt + S;
    e->bq = e->bp + S;
    for (int32_t i = 0; i < p->max_seqs; i++) {
        llm_context_reset(c, p->max_seqs - 1 - i);
        e->slots[e->n_slots++] = p->max_seqs - 1 - i; /* slot 0 on top */
    }
    *out = e;
    return LLM_OK;
}

void llm_engine_free(struct llm_engine *e)
{
    if (!e)
        return;
    for (int32_t i = 0; i < e->n_run; i++)
        req_free(e->run[i]);
    for (size_t i = 0; i < e->n_wait; i++)
        req_free(e->wait[i]);
    for (int32_t i = 0; i < e->p.max_seqs && e->slots; i++)
        llm_context_reset(e->c, i);
    llm_prefix_free(e->pc);
    llm_free(e->wait);
    llm_free(e->run);
    llm_free(e->slots);
    llm_free(e->plan);
    llm_free(e->bt);
    llm_free(e->bl);
    llm_free(e->blog);
    llm_free(e->raw);
    llm_free(e->lat);
    llm_free(e->itl);
    for (int32_t i = 0; e->dc && i < e->p.max_seqs; i++)
        llm_context_reset(e->dc, i);
    llm_free(e->dlog);
    llm_free(e->dout);
    llm_free(e->dbt);
    llm_free(e->dbl);
    llm_spec_scratch_release(&e->sc);
    llm_free(e);
}

const struct llm_engine_latency *llm_engine_latencies(const struct llm_engine *e, size_t *n)
{
    *n = (size_t)e->st.finished;
    return e->lat;
}

const double *llm_engine_itls(const struct llm_engine *e, size_t *n)
{
    *n = e->n_itl;
    return e->itl;
}

llm_status llm_engine_add(struct llm_engine *e, struct llm_request *r)
{
    return llm_engine_add_at(e, r, llm_now_s());
}

llm_status llm_engine_add_at(struct llm_engine *e, struct llm_request *r, double t_arrival)
{
    if (r->err_code || !r->n_ids || r->n_ids > (size_t)e->n_ctx || r->n < 1 ||
        r->n > e->p.max_seqs)
        return llm_error_set(LLM_E_INVALID, "engine: request of line %lld cannot be queued",
                             (long long)r->line);
    struct req *q = llm_calloc(1, sizeof *q);
    if (!q)
        return LLM_E_NOMEM;
    q->r = *r;
    memset(r, 0, sizeof *r);
    q->n_prompt = (int32_t)q->r.n_ids;
    for (size_t i = 0; i < q->r.n_stop; i++)
        if (strlen(q->r.stop[i]) > q->stop_max)
            q->stop_max = strlen(q->r.stop[i]);
    q->n_live = q->r.n;
    q->order = e->order_next++;
    q->t_add = t_arrival;
    q->ch = llm_calloc((size_t)q->r.n, sizeof *q->ch);
    llm_status s = q->ch ? LLM_OK : LLM_E_NOMEM;
    for (int32_t i = 0; !s && i < q->r.n; i++) {
        struct choice *c = &q->ch[i];
        c->slot = -1;
        c->row = -1;
        void *p = NULL;
        s = llm_grow(&p, &c->cap_toks, (size_t)q->n_prompt + 16, sizeof(int32_t));
        c->toks = p;
        if (!s)
            memcpy(c->toks, q->r.ids, (size_t)q->n_prompt * sizeof(int32_t));
    }
    if (!s)
        s = wait_push(e, q);
    if (s) {
        req_free(q);
        return s;
    }
    e->st.added++;
    return LLM_OK;
}

int64_t llm_engine_pending(const struct llm_engine *e)
{
    return (int64_t)e->n_wait + e->n_run;
}

void llm_engine_stats(const struct llm_engine *e, struct llm_engine_stats *st)
{
    *st = e->st;
    st->running = e->n_run;
    st->waiting = (int64_t)e->n_wait;
    struct llm_kv_stats ks;
    llm_kv_stats(e->kv, &ks);
    st->kv_blocks = ks.n_blocks;
    st->kv_used = ks.used;
    st->kv_free = ks.free_;
    st->kv_peak = ks.peak_used;
    st->kv_slots = ks.slots;
    st->kv_slots_peak = ks.slots_peak;
    st->kv_tokens = ks.tokens;
    st->kv_logical = ks.logical;
    if (e->pc) {
        struct llm_prefix_stats ps;
        llm_prefix_stats(e->pc, &ps);
        st->kv_cached = ps.entries;
        st->kv_idle = ps.idle;
        st->evicted_blocks = ps.evicted;
    }
}

/* ---- running and leaving ------------------------------------------------- */

static void release_slot(struct llm_engine *e, struct choice *c)
{
    if (c->slot < 0)
        return;
    llm_context_reset(e->c, c->slot);
    if (e->dc)
        llm_context_reset(e->dc, c->slot);
    e->slots[e->n_slots++] = c->slot;
    c->slot = -1;
    c->n_kv = 0;
    c->forked = 0;
    c->row = -1;
    c->dec = 0;
    c->nd = c->want = c->dlen = 0;
}

static void run_remove(struct llm_engine *e, struct req *q)
{
    for (int32_t i = 0; i < e->n_run; i++)
        if (e->run[i] == q) {
            memmove(e->run + i, e->run + i + 1, (size_t)(e->n_run - i - 1) * sizeof *e->run);
            e->n_run--;
            return;
        }
}

/* The request goes back to the queue with what it has generated; its
 * blocks are released (it is recomputed when it is readmitted). */
static llm_status preempt(struct llm_engine *e, struct req *q)
{
    for (int32_t i = 0; i < q->r.n; i++)
        release_slot(e, &q->ch[i]);
    run_remove(e, q);
    if (!q->admitted_now)
        e->st.preemptions++;
    q->admitted_now = 0;
    llm_free(q->pre); /* it is computed when readmitted */
    q->pre = NULL;
    /* its entries leave the plan */
    int32_t k = 0;
    for (int32_t i = 0; i < e->n_plan; i++)
        if (e->plan[i].q != q)
            e->plan[k++] = e->plan[i];
    e->n_plan = k;
    return wait_push(e, q);
}

/* The request is answered at t (its step's clock): the callback, then it is
 * freed. */
static llm_status answer(struct llm_engine *e, struct req *q, double t)
{
    struct llm_choice_out out[LLM_REQ_MAX_N];
    for (int32_t i = 0; i < q->r.n; i++) {
        const struct choice *c = &q->ch[i];
        out[i] = (struct llm_choice_out){
            .text = c->text ? c->text : "", .len = c->len, .finish_reason = c->finish,
            .n_tokens = c->n_gen, .ids = c->toks + q->n_prompt, .lp = c->lp,
            .top_ids = c->top_ids, .top_lp = c->top_lp, .k = q->r.top_logprobs,
        };
    }
    run_remove(e, q);
    /* latencies, as vLLM's benchmarks define them, from the time it was queued */
    void *p = e->lat;
    LLM_TRY(llm_grow(&p, &e->cap_lat, (size_t)e->st.finished + 1, sizeof *e->lat));
    e->lat = p;
    int32_t most = 0;
    for (int32_t i = 0; i < q->r.n; i++)
        most = q->ch[i].n_gen > most ? q->ch[i].n_gen : most;
    const double t_first = q->t_first > 0 ? q->t_first : t;
    e->lat[e->st.finished] = (struct llm_engine_latency){
        .ttft = t_first - q->t_add, .e2e = t - q->t_add,
        .tpot = most > 1 ? (t - t_first) / (most - 1) : 0.0, .tokens = most,
    };
    llm_status s = e->cb.done ? e->cb.done(e->cb.ctx, &q->r, out, q->r.n, q->n_prompt) : LLM_OK;
    req_free(q);
    e->st.finished++;
    return s;
}

static void finish(struct llm_engine *e, struct req *q, struct choice *c, const char *why)
{
    c->finish = why;
    release_slot(e, c);
    q->n_live--;
}

/* Text and ends after c sampled `id` (generate.c's rules, so that the
 * text is llm-run's). */
static llm_status take_token(struct llm_engine *e, struct req *q, struct choice *c, int32_t id)
{
    void *p = c->toks;
    LLM_TRY(llm_grow(&p, &c->cap_toks, (size_t)total_of(q, c) + 1, sizeof(int32_t)));
    c->toks = p;
    const int32_t prev = c->toks[total_of(q, c) - 1];
    c->toks[total_of(q, c)] = id;
    c->n_gen++;
    if (c->gm)
        LLM_TRY(llm_gmatch_accept(c->gm, id));
    if ((!e->p.ignore_eos || (c->gm && llm_gmatch_must_end(c->gm))) &&
        llm_tokenizer_is_eog(e->tok, id)) {
        finish(e, q, c, "stop");
        return LLM_OK;
    }
    const char *txt;
    size_t tl;
    LLM_TRY(llm_token_piece_after(e->tok, prev, id, 0, &txt, &tl));
    p = c->text;
    LLM_TRY(llm_grow(&p, &c->cap, c->len + tl + 1, 1));
    c->text = p;
    const size_t old = c->len;
    memcpy(c->text + c->len, txt, tl);
    c->len += tl;
    c->text[c->len] = 0;
    if (q->r.n_stop) {
        /* a stop string ends in the new bytes: look from where it could begin */
        size_t from = old + 1 > q->stop_max ? old + 1 - q->stop_max : 0;
        size_t at = llm_stop_find(c->text + from, c->len - from,
                                  (const char *const *)q->r.stop, q->r.n_stop);
        if (at < c->len - from) {
            c->len = from + at;
            c->text[c->len] = 0;
            finish(e, q, c, "stop");
            return LLM_OK;
        }
    }
    if ((q->r.max_tokens >= 0 && c->n_gen >= q->r.max_tokens) ||
        q->n_prompt + c->n_gen > e->n_ctx)
        finish(e, q, c, "length");
    return LLM_OK;
}

/* Sample c's next token from its row of the step's logits (changed in
 * place by the sampler); t: when the step's tokens were drawn. With
 * speculation, draft is the drafted token at this position (-1: none),
 * `at` its index in c's drafts, and *accepted says whether it was kept. */
static llm_status sample(struct llm_engine *e, struct req *q, struct choice *c, double t,
                         int32_t draft, int32_t at, int *accepted)
{
    float *logits = e->blog + (size_t)c->row * e->n_vocab;
    c->row = -1;
    if (accepted)
        *accepted = 0;
    if (q->r.max_tokens >= 0 && c->n_gen >= q->r.max_tokens) {
        finish(e, q, c, "length");
        return LLM_OK;
    }
    if (q->t_first <= 0)
        q->t_first = t;
    if (e->p.record_itl && c->t_last > 0) { /* as a streaming client would see it */
        void *p = e->itl;
        LLM_TRY(llm_grow(&p, &e->cap_itl, e->n_itl + 1, sizeof *e->itl));
        e->itl = p;
        e->itl[e->n_itl++] = t - c->t_last;
    }
    c->t_last = t;
    if (q->r.logprobs)
        memcpy(e->raw, logits, (size_t)e->n_vocab * sizeof(float));
    int32_t id, n_allowed = 1, only = -1;
    if (c->gm) /* the grammar's mask; a token it alone allows is taken without a draw */
        LLM_TRY(llm_gmatch_apply(c->gm, logits, &n_allowed, &only));
    if (!n_allowed) { /* the vocabulary cannot continue the grammar's text */
        finish(e, q, c, "stop");
        return LLM_OK;
    }
    if (!accepted) {
        id = only >= 0 ? only : llm_sampler_sample(c->smp, logits);
    } else if (only >= 0) {
        id = only;
        *accepted = draft >= 0 && draft == only;
    } else {
        const int32_t qn = draft >= 0 && c->q_n ? c->q_n[at] : 0;
        const size_t V = (size_t)e->n_vocab;
        id = llm_spec_verify(c->smp, logits, draft, qn ? c->q_ids + (size_t)at * V : NULL,
                             qn ? c->q_probs + (size_t)at * V : NULL, qn, e->sp->rule, &e->sc,
                             accepted);
    }
    llm_sampler_accept(c->smp, id);
    if (q->r.logprobs) {
        const size_t k = (size_t)q->r.top_logprobs, n = (size_t)c->n_gen + 1;
        void *p = c->lp;
        LLM_TRY(llm_grow(&p, &c->cap_lp, n, sizeof(float)));
        c->lp = p;
        c->lp[n - 1] = llm_logprob(e->raw, e->n_vocab, id);
        if (k) {
            p = c->top_ids;
            LLM_TRY(llm_grow(&p, &c->cap_ti, n * k, sizeof(int32_t)));
            c->top_ids = p;
            p = c->top_lp;
            LLM_TRY(llm_grow(&p, &c->cap_tl, n * k, sizeof(float)));
            c->top_lp = p;
            int32_t got = llm_top_logprobs(e->raw, e->n_vocab, (int32_t)k, e->top_ids, e->top_lp);
            for (size_t j = 0; j < k; j++) {
                c->top_ids[(n - 1) * k + j] = j < (size_t)got ? e->top_ids[j] : 0;
                c->top_lp[(n - 1) * k + j] = j < (size_t)got ? e->top_lp[j] : -INFINITY;
            }
        }
    }
    return take_token(e, q, c, id);
}

/* ---- speculative decoding (spec.h) -------------------------------------- */

static int computes(const struct req *q, const struct choice *c);

/* A choice's own speculation state, made at its first admission: the
 * draft sampler (seed apart from its sampler's sp) when the draft model
 * samples under the rejection rule. */
static llm_status spec_choice_new(struct llm_engine *e, struct choice *c,
                                  const struct llm_sampler_params *sp)
{
    const size_t K = (size_t)e->kmax, V = (size_t)e->n_vocab;
    c->d = llm_malloc(K * sizeof(int32_t));
    if (!c->d)
        return LLM_E_NOMEM;
    if (!e->dc || e->sp->rule != LLM_SPEC_REJECTION || sp->temp <= 0)
        return LLM_OK;
    c->q_ids = llm_malloc(K * V * sizeof(int32_t));
    c->q_probs = llm_malloc(K * V * sizeof(float));
    c->q_n = llm_calloc(K, sizeof(int32_t));
    if (!c->q_ids || !c->q_probs || !c->q_n)
        return LLM_E_NOMEM;
    return llm_spec_draft_sampler(&c->dsmp, sp, e->n_vocab);
}

/* This step's draft length, the same for every choice: the one given, or
 * the tuner's choice from all choices' rounds (each choice's share of a
 * step's time is its share of the step's tokens, so that a batch whose
 * pass costs little more than its tokens' arithmetic, where checking
 * drafts is not cheap, drafts little or nothing). The first step of all
 * only times the pass; the draft model's first look, and a look after
 * plain steps when drafting has not paid, is taken by one choice. */
static void spec_length(struct llm_engine *e)
{
    e->k_left = e->p.max_seqs;
    e->look = NULL;
    if (e->sp->draft_n > 0) {
        e->k_step = e->sp->draft_n;
        return;
    }
    if (e->tun.w <= 0) {
        e->k_step = 0;
        return;
    }
    const int looking = e->tun.plain >= e->tun.probe;
    e->k_step = llm_spec_tuner_k(&e->tun, e->kmax);
    if (!(e->dc && e->tun.steps <= 0) && !(looking && e->k_step == 1))
        return;
    /* a look: by the decoding choice the draft has seen the most of, whose
     * catch-up costs least */
    e->k_left = 1;
    int32_t least = INT32_MAX;
    for (int32_t i = 0; e->dc && i < e->n_run; i++)
        for (int32_t j = 0; j < e->run[i]->r.n; j++) {
            const struct choice *c = &e->run[i]->ch[j];
            const int32_t behind = total_of(e->run[i], c) - c->dlen;
            if (computes(e->run[i], c) && c->n_gen > 0 && c->n_kv == total_of(e->run[i], c) - 1 &&
                behind < least)
                least = behind, e->look = c;
        }
}

/* A decoding choice's drafts for this step, within `spare` tokens of the
 * step's budget: by lookup at once, or room held for the draft model
 * (spec_draft_all fills it). Returns how many tokens follow its pending
 * one in the step's run. */
static llm_status spec_reserve(struct llm_engine *e, struct req *q, struct choice *c,
                               int32_t spare, int32_t *nd)
{
    *nd = c->nd = c->want = 0;
    c->calls = 0;
    c->calls_s = 0;
    if (c->n_gen < 1 || spare <= 0 || e->k_left <= 0 || (e->look && c != e->look))
        return LLM_OK; /* (a first token may be copied to the forks: drawn plainly) */
    e->k_left--;
    int64_t want = e->k_step;
    if (q->r.max_tokens >= 0 && want > (int64_t)q->r.max_tokens - c->n_gen - 1)
        want = (int64_t)q->r.max_tokens - c->n_gen - 1; /* a round draws nd + 1 */
    if (want > e->n_ctx - total_of(q, c)) /* the drafts' positions stay in the context */
        want = e->n_ctx - total_of(q, c);
    if (want > spare)
        want = spare;
    if (want <= 0)
        return LLM_OK;
    if (e->dc) {
        *nd = c->nd = c->want = (int32_t)want;
        return LLM_OK;
    }
    LLM_TRY(llm_spec_lookup_masked(e->sp, c->toks, total_of(q, c), c->gm, (int32_t)want, c->d,
                                   &c->nd));
    *nd = c->nd;
    return LLM_OK;
}

/* The choices' drafts give their room back (the pool is short). */
static int spec_drop(struct llm_engine *e)
{
    int dropped = 0;
    for (int32_t i = 0; i < e->n_plan; i++) {
        struct entry *p = &e->plan[i];
        if (p->c->nd > 0) {
            p->k -= p->c->nd;
            p->c->nd = p->c->want = 0;
            dropped = 1;
        }
    }
    return dropped;
}

/* One call of the draft model over the runs in dbt/dbp/dbq/dbl (n tokens);
 * its rows go to their slots' dlog, in batch order; *dt: its seconds. */
static llm_status spec_draft_call(struct llm_engine *e, int32_t n, double *dt)
{
    struct llm_batch b = { .n = n, .token = e->dbt, .pos = e->dbp, .seq = e->dbq, .logits = e->dbl };
    const double t0 = llm_now_s();
    LLM_TRY(llm_decode_batch(e->dc, &b, e->dout));
    *dt = llm_now_s() - t0;
    const size_t V = (size_t)e->n_vocab;
    for (int32_t i = 0, r = 0; i < n; i++)
        if (e->dbl[i])
            memcpy(e->dlog + (size_t)e->dbq[i] * V, e->dout + (size_t)r++ * V, V * sizeof(float));
    return LLM_OK;
}

/* The draft model fills the room the plan's choices hold (c->want): it
 * catches up with each one's tokens (the prompt's from a sibling that has
 * it), then drafts one token a call for all of them at once. A choice the
 * draft's pool cannot hold, or whose catch-up does not fit the step,
 * drafts nothing this step. */
static llm_status spec_draft_all(struct llm_engine *e)
{
    const size_t V = (size_t)e->n_vocab;
    int32_t free_ = llm_kv_free_blocks(e->dkv), n = 0, most = 0;
    for (int32_t i = 0; i < e->n_plan; i++) {
        struct entry *p = &e->plan[i];
        struct choice *c = p->c;
        struct req *q = p->q;
        if (c->want <= 0)
            continue;
        const int32_t tot = total_of(q, c);
        for (int32_t j = 0; c->dlen < q->n_prompt && j < q->r.n; j++) {
            struct choice *o = &q->ch[j];
            if (o != c && o->slot >= 0 && llm_context_seq_len(e->dc, o->slot) >= q->n_prompt) {
                LLM_TRY(llm_context_fork(e->dc, o->slot, c->slot, q->n_prompt));
                c->dlen = q->n_prompt;
            }
        }
        /* the tokens it has not seen, then the drafts but the last */
        int32_t m = tot - c->dlen;
        const int32_t need = llm_kv_need(e->dkv, c->slot, c->dlen, m + c->want - 1, NULL);
        const int part = m > e->n_db - n; /* a long catch-up goes on next step */
        if (need > free_ || part) {
            p->k -= c->nd;
            c->nd = c->want = 0;
        }
        if (need > free_)
            continue;
        free_ -= need;
        if (part)
            m = e->n_db - n;
        for (int32_t j = 0; j < m; j++, n++) {
            e->dbt[n] = c->toks[c->dlen + j];
            e->dbp[n] = c->dlen + j;
            e->dbq[n] = c->slot;
            e->dbl[n] = !part && j == m - 1;
        }
        /* a short catch-up (the round's last tokens) is one of its draft
         * steps for the tuner; a long one (the prompt) is not. calls_s
         * holds its tokens until the call's time is shared out. */
        c->calls = m <= 2 && !part;
        c->calls_s = m;
        c->dlen += m;
        c->nd = 0;
        most = c->want > most ? c->want : most;
    }
    double dt = 0;
    if (n)
        LLM_TRY(spec_draft_call(e, n, &dt));
    for (int32_t i = 0; i < e->n_plan; i++) {
        struct choice *c = e->plan[i].c;
        if (c->dec)
            c->calls_s = c->calls ? dt * c->calls_s / n : 0; /* its tokens' share */
    }
    for (int32_t j = 0; j < most; j++) {
        n = 0;
        for (int32_t i = 0; i < e->n_plan; i++) {
            struct choice *c = e->plan[i].c;
            if (c->want <= j || c->nd != j)
                continue;
            float *dl = e->dlog + (size_t)c->slot * V;
            if (j == 0 && c->gm) /* under a grammar, a copy of the matcher walks the drafts */
                LLM_TRY(llm_gmatch_copy(&c->dgm, c->gm));
            int32_t n_allowed = 1, only, qn;
            if (c->dgm)
                LLM_TRY(llm_gmatch_apply(c->dgm, dl, &n_allowed, &only));
            if (!n_allowed) { /* nothing can follow: the drafts so far */
                c->want = j;
                continue;
            }
            const int32_t x = llm_spec_draft_token(c->dsmp, dl, e->n_vocab,
                                                   c->dsmp ? c->q_ids + (size_t)j * V : NULL,
                                                   c->dsmp ? c->q_probs + (size_t)j * V : NULL,
                                                   &qn);
            if (c->dsmp)
                c->q_n[j] = qn;
            c->d[j] = x;
            c->nd = j + 1;
            if (c->dgm && llm_gmatch_accept(c->dgm, x)) { /* not expected: x was allowed */
                llm_error_clear();
                c->nd = j;
            }
            if (c->nd == j || (c->dgm && llm_gmatch_must_end(c->dgm)) || j + 1 >= c->want) {
                c->want = c->nd; /* done */
                continue;
            }
            e->dbt[n] = x;
            e->dbp[n] = c->dlen++;
            e->dbq[n] = c->slot;
            e->dbl[n++] = 1;
        }
        if (!n)
            continue;
        LLM_TRY(spec_draft_call(e, n, &dt));
        for (int32_t i = 0; i < e->n_plan; i++) { /* those in the call: drafted j, go on */
            struct choice *c = e->plan[i].c;
            if (c->nd == j + 1 && c->want > j + 1)
                c->calls++, c->calls_s += dt / n;
        }
    }
    /* each run: the pending token and the drafts made */
    for (int32_t i = 0; i < e->n_plan; i++) {
        struct entry *p = &e->plan[i];
        if (!p->c->dec)
            continue;
        p->k = 1 + p->c->nd;
        p->c->want = 0;
        llm_gmatch_free(p->c->dgm);
        p->c->dgm = NULL;
    }
    return LLM_OK;
}

/* A decoding choice draws from its rows: the drafted positions in order
 * while its sampler keeps the drafts, then the token after the last one
 * kept (a bonus when all are). Its KV is cut back to the kept tokens, the
 * draft's to what still holds; row_s: the step's seconds per token, for
 * the tuner. */
static llm_status spec_sample(struct llm_engine *e, struct req *q, struct choice *c, double t,
                              double row_s)
{
    const int32_t nd = c->nd, row0 = c->row, n_before = total_of(q, c), gen0 = c->n_gen;
    const int32_t before = c->n_kv - 1 - nd; /* its positions before the step */
    int32_t kept = 0;
    for (int32_t r = 0; r <= nd; r++) {
        int acc;
        c->row = row0 + r;
        LLM_TRY(sample(e, q, c, t, r < nd ? c->d[r] : -1, r, &acc));
        if (c->finish || !acc)
            break;
        kept++;
    }
    c->row = -1;
    c->dec = 0;
    c->nd = 0;
    e->st.spec_drafted += nd;
    e->st.spec_accepted += kept;
    e->st.spec_rounds += nd > 0;
    e->st.spec_passes++;
    e->st.spec_tokens += c->n_gen - gen0;
    llm_spec_tuner_round(&e->tun, nd, kept, c->calls, c->calls_s, 1 + nd, row_s * (1 + nd));
    if (c->finish) /* its blocks are released */
        return LLM_OK;
    /* the target keeps the pending token and the drafts kept; what a cut
     * into a quantized block loses is computed again next step */
    if (nd > 0) {
        c->n_kv = llm_context_truncate(e->c, c->slot, before + 1 + kept);
        if (e->pc && c->n_kv / e->bs > before / e->bs)
            LLM_TRY(llm_prefix_insert(e->pc, c->slot, c->toks, c->n_kv));
    }
    /* the draft holds the tokens before the round and its drafts but the
     * last: those kept still hold */
    const int32_t valid = n_before + llm_spec_draft_kept(nd, kept);
    if (e->dc && valid < c->dlen)
        c->dlen = llm_context_truncate(e->dc, c->slot, valid);
    return LLM_OK;
}

/* ---- planning a step ----------------------------------------------------- */

static void plan_add(struct llm_engine *e, struct req *q, struct choice *c, int32_t k)
{
    e->plan[e->n_plan++] = (struct entry){ q, c, k };
}

/* Does the choice compute now (the leader, or a fork that has the prompt)? */
static int computes(const struct req *q, const struct choice *c)
{
    return c->slot >= 0 && !c->finish && (c == &q->ch[q->leader] || c->forked);
}

/* The prompt's state into the leader's slot, and its logits into q->pre;
 * the state's bytes are released (a preempted request is recomputed). */
static llm_status admit_state(struct llm_engine *e, struct req *q, struct choice *l)
{
    FILE *f = fmemopen(q->r.state, q->r.state_len, "rb");
    if (!f)
        return LLM_E_NOMEM;
    struct llm_state_reader *rd;
    struct llm_state_info in;
    LLM_TRY(llm_state_open_stream(&rd, f, "a request's state", 1, &in));
    int32_t *toks = llm_malloc((size_t)in.n_tokens * sizeof *toks);
    q->pre = llm_malloc((size_t)e->n_vocab * sizeof(float));
    llm_status s = toks && q->pre ? LLM_OK : LLM_E_NOMEM;
    if (!s && (in.n_tokens != q->n_prompt || in.n_vocab != e->n_vocab))
        s = llm_error_set(LLM_E_INVALID, "line %lld: its state is not of its prompt",
                          (long long)q->r.line);
    if (!s)
        s = llm_state_read_tokens(rd, toks, q->pre);
    if (!s && memcmp(toks, q->r.ids, (size_t)q->n_prompt * sizeof *toks))
        s = llm_error_set(LLM_E_INVALID, "line %lld: its state is not of its prompt",
                          (long long)q->r.line);
    if (!s)
        s = llm_kvstate_load(rd, &in, e->c, l->slot, q->n_prompt);
    if (!s && llm_context_seq_len(e->c, l->slot) != q->n_prompt)
        s = llm_error_set(LLM_E_INVALID, "line %lld: its state lacks the sliding-window rows "
                          "this context reads (from position %d on; made with another window, "
                          "block size or context?)", (long long)q->r.line, in.window_from);
    llm_state_close(rd);
    llm_free(toks);
    llm_free(q->r.state);
    q->r.state = NULL;
    if (!s && e->pc)
        s = llm_prefix_insert(e->pc, l->slot, l->toks, q->n_prompt);
    if (s) {
        llm_free(q->pre);
        q->pre = NULL;
        return s;
    }
    l->n_kv = q->n_prompt;
    return LLM_OK;
}

/* Admit q: slots for its live choices, samplers on the first admission, and
 * the prompt's cached blocks (or its state) for its leader. */
static llm_status admit(struct llm_engine *e, struct req *q)
{
    q->leader = -1;
    for (int32_t i = 0; i < q->r.n; i++) {
        struct choice *c = &q->ch[i];
        if (c->finish)
            continue;
        if (q->leader < 0)
            q->leader = i;
        if (!c->smp) {
            struct llm_sampler_params sp = q->r.sp;
            sp.seed += (uint64_t)i;
            LLM_TRY(llm_sampler_new(&c->smp, &sp, e->n_vocab));
            for (int32_t j = 0; j < q->n_prompt; j++)
                llm_sampler_accept(c->smp, q->r.ids[j]);
            if (q->r.gmask)
                LLM_TRY(llm_gmatch_new(&c->gm, q->r.gmask));
            if (e->sp)
                LLM_TRY(spec_choice_new(e, c, &sp));
        }
        c->slot = e->slots[--e->n_slots];
        llm_context_reset(e->c, c->slot);
        if (e->dc)
            llm_context_reset(e->dc, c->slot);
        c->n_kv = 0;
        c->forked = 0;
    }
    struct choice *l = &q->ch[q->leader];
    q->loaded_now = q->r.state != NULL;
    if (q->r.state) {
        LLM_TRY(admit_state(e, q, l));
    } else if (e->pc) { /* at least the last token is computed, for its logits */
        l->n_kv = llm_prefix_attach(e->pc, l->slot, l->toks, total_of(q, l) - 1,
                                    (total_of(q, l) - 1) / e->bs);
    }
    q->hit_now = q->loaded_now ? 0 : l->n_kv;
    q->admitted_now = 1;
    e->run[e->n_run++] = q;
    return LLM_OK;
}

/* Blocks the plan takes. */
static int32_t plan_need(const struct llm_engine *e)
{
    int32_t need = 0;
    for (int32_t i = 0; i < e->n_plan; i++)
        need += llm_kv_need(e->kv, e->plan[i].c->slot, e->plan[i].c->n_kv, e->plan[i].k, NULL);
    return need;
}

/* The running request that gives way first: the highest priority value,
 * then the newest. */
static struct req *victim(const struct llm_engine *e)
{
    struct req *v = NULL;
    for (int32_t i = 0; i < e->n_run; i++)
        if (!v || ahead(v, e->run[i]))
            v = e->run[i];
    return v;
}

/* Make the plan fit the free blocks: the prefix index gives back blocks,
 * then requests are preempted; the last running request, if it still
 * does not fit, computes less, or ends ("length") when nothing fits. */
static llm_status fit(struct llm_engine *e)
{
    for (;;) {
        int32_t need = plan_need(e), free_ = llm_kv_free_blocks(e->kv);
        if (need <= free_)
            return LLM_OK;
        if (spec_drop(e)) /* drafts are the first to go */
            continue;
        if (e->pc && llm_prefix_evict(e->pc, need - free_) > 0)
            continue;
        if (e->n_run > 1) {
            LLM_TRY(preempt(e, victim(e)));
            continue;
        }
        /* one request, alone in the pool: its runs shrink to what fits */
        int32_t k = 0;
        for (int32_t i = 0; i < e->n_plan; i++) {
            struct entry *p = &e->plan[i];
            while (p->k > 0 &&
                   llm_kv_need(e->kv, p->c->slot, p->c->n_kv, p->k, NULL) > free_)
                p->k--;
            free_ -= llm_kv_need(e->kv, p->c->slot, p->c->n_kv, p->k, NULL);
            if (p->k > 0) {
                e->plan[k++] = *p;
            } else if (e->n_plan == 1 || p->c->n_kv == total_of(p->q, p->c) - 1) {
                /* not even its next token fits: the budget is spent; a
                 * leader that cannot hold the prompt ends the choices
                 * waiting for it too */
                struct req *q = p->q;
                const int lead = p->c == &q->ch[q->leader] && p->c->n_kv < q->n_prompt;
                for (int32_t j = 0; j < q->r.n; j++) {
                    struct choice *c = &q->ch[j];
                    if (!c->finish && (c == p->c || (lead && !c->forked)))
                        finish(e, q, c, "length");
                }
            }
        }
        e->n_plan = k;
        return LLM_OK;
    }
}

static llm_status plan_step(struct llm_engine *e)
{
    int32_t budget = e->p.step_tokens;
    e->n_plan = 0;
    /* running requests in priority order */
    for (int32_t i = 1; i < e->n_run; i++)
        for (int32_t j = i; j > 0 && ahead(e->run[j], e->run[j - 1]); j--) {
            struct req *t = e->run[j];
            e->run[j] = e->run[j - 1];
            e->run[j - 1] = t;
        }
    /* decodes first, then the prompts and recomputations in chunks; with
     * speculation, the budget the decodes leave holds their drafts */
    int32_t spare = budget;
    if (e->sp)
        spec_length(e);
    for (int32_t i = 0; i < e->n_run; i++)
        for (int32_t j = 0; j < e->run[i]->r.n; j++) {
            struct choice *c = &e->run[i]->ch[j];
            c->dec = 0;
            spare -= computes(e->run[i], c) && total_of(e->run[i], c) - c->n_kv == 1;
        }
    for (int pass = 0; pass < 2; pass++)
        for (int32_t i = 0; i < e->n_run && budget > 0; i++) {
            struct req *q = e->run[i];
            for (int32_t j = 0; j < q->r.n && budget > 0; j++) {
                struct choice *c = &q->ch[j];
                if (!computes(q, c))
                    continue;
                int32_t rem = total_of(q, c) - c->n_kv;
                if (rem <= 0 || (pass == 0) != (rem == 1))
                    continue;
                int32_t k = rem < budget ? rem : budget, nd = 0;
                if (pass == 0 && e->sp) {
                    c->dec = 1;
                    LLM_TRY(spec_reserve(e, q, c, spare < budget - 1 ? spare : budget - 1, &nd));
                    spare -= nd;
                }
                plan_add(e, q, c, k + nd);
                budget -= k + nd;
            }
        }
    /* waiting requests join while slots and the budget allow */
    while (e->n_wait && budget > 0) {
        struct req *q = e->wait[0];
        if (q->n_live > e->n_slots)
            break;
        if (q->r.state) {
            /* its blocks are taken at admission: wait for room while others run */
            int32_t need = plan_need(e) + (q->n_prompt + e->bs - 1) / e->bs;
            int32_t free_ = llm_kv_free_blocks(e->kv);
            if (need > free_ && e->pc)
                free_ += llm_prefix_evict(e->pc, need - free_);
            if (need > free_ && e->n_run)
                break;
            if (need > free_) { /* alone and still short: computed as any prompt */
                llm_free(q->r.state);
                q->r.state = NULL;
            }
        }
        memmove(e->wait, e->wait + 1, (e->n_wait - 1) * sizeof *e->wait);
        e->n_wait--;
        LLM_TRY(admit(e, q));
        struct choice *l = &q->ch[q->leader];
        int32_t rem = total_of(q, l) - l->n_kv;
        int32_t k = rem < budget ? rem : budget;
        plan_add(e, q, l, k); /* k = 0: a loaded state, for its row of logits */
        budget -= k;
        /* stop admitting once the blocks would not hold the plan */
        int32_t need = plan_need(e), free_ = llm_kv_free_blocks(e->kv);
        if (need > free_ && e->pc)
            free_ += llm_prefix_evict(e->pc, need - free_);
        if (need > free_) {
            if (e->n_run > 1)
                LLM_TRY(preempt(e, q));
            break;
        }
    }
    LLM_TRY(fit(e));
    return e->dc ? spec_draft_all(e) : LLM_OK;
}

/* ---- a step -------------------------------------------------------------- */

llm_status llm_engine_step(struct llm_engine *e)
{
    if (!e->n_run && !e->n_wait)
        return LLM_OK;
    LLM_TRY(plan_step(e));
    int32_t n = 0, pre = 0, dec = 0;
    for (int32_t i = 0; i < e->n_plan; i++) {
        const struct entry *p = &e->plan[i];
        const int32_t end = p->c->n_kv + p->k, tot = total_of(p->q, p->c);
        /* a speculating run: its pending token and drafts, each giving logits */
        const int spec = p->c->nd > 0;
        for (int32_t j = 0; j < p->k; j++) {
            e->bt[n] = spec && j ? p->c->d[j - 1] : p->c->toks[p->c->n_kv + j];
            e->bp[n] = p->c->n_kv + j;
            e->bq[n] = p->c->slot;
            e->bl[n] = spec || (j == p->k - 1 && end == tot);
            n++;
        }
        if (spec || (p->k == 1 && end == tot))
            dec += p->k;
        else
            pre += p->k;
    }
    /* prompt tokens asked of the prefix index and found, counted for the
     * admissions that hold (not those given back at once for room) */
    for (int32_t i = 0; i < e->n_run; i++) {
        struct req *q = e->run[i];
        if (q->admitted_now && e->pc && !q->loaded_now) {
            e->st.lookup_tokens += q->n_prompt;
            e->st.hit_tokens += q->hit_now < q->n_prompt ? q->hit_now : q->n_prompt;
        }
        q->admitted_now = 0;
    }
    double pass_s = 0;
    if (n) {
        struct llm_batch b = { .n = n, .token = e->bt, .pos = e->bp, .seq = e->bq, .logits = e->bl };
        const double t0 = llm_now_s();
        LLM_TRY(llm_decode_batch(e->c, &b, e->blog));
        pass_s = llm_now_s() - t0;
    }
    e->st.steps++;
    e->st.prefill_tokens += pre;
    e->st.decode_tokens += dec;
    e->st.last_prefill = pre;
    e->st.last_decode = dec;
    /* rows of logits to their choices (in batch order); the index learns
     * the new full blocks */
    int32_t rows = 0;
    for (int32_t i = 0; i < e->n_plan; i++) {
        struct entry *p = &e->plan[i];
        const int32_t before = p->c->n_kv;
        p->c->n_kv += p->k;
        if (p->c->nd > 0) { /* its rows are checked, and its KV cut, when it draws */
            p->c->row = rows;
            rows += p->k;
            continue;
        }
        if (p->c->n_kv == total_of(p->q, p->c))
            p->c->row = rows++;
        if (p->q->pre && p->c->row >= 0) { /* a loaded state's logits */
            memcpy(e->blog + (size_t)p->c->row * e->n_vocab, p->q->pre,
                   (size_t)e->n_vocab * sizeof(float));
            llm_free(p->q->pre);
            p->q->pre = NULL;
        }
        if (e->pc && p->c->n_kv / e->bs > before / e->bs)
            LLM_TRY(llm_prefix_insert(e->pc, p->c->slot, p->c->toks, p->c->n_kv));
    }
    /* the other choices take the prompt's blocks once the leader has them,
     * and its distribution when they have not drawn yet */
    for (int32_t i = 0; i < e->n_run && !e->p.prefill_only; i++) {
        struct req *q = e->run[i];
        struct choice *l = &q->ch[q->leader];
        if (l->slot < 0 || l->n_kv < q->n_prompt)
            continue;
        for (int32_t j = 0; j < q->r.n; j++) {
            struct choice *c = &q->ch[j];
            if (c == l || c->finish || c->slot < 0 || c->forked)
                continue;
            LLM_TRY(llm_context_fork(e->c, l->slot, c->slot, q->n_prompt));
            c->forked = 1;
            c->n_kv = q->n_prompt;
            if (c->n_gen == 0 && l->n_gen == 0 && l->row >= 0) {
                /* a row of its own: the sampler changes the leader's */
                c->row = rows++;
                memcpy(e->blog + (size_t)c->row * e->n_vocab,
                       e->blog + (size_t)l->row * e->n_vocab, (size_t)e->n_vocab * sizeof(float));
            }
        }
    }
    /* every fresh choice draws; finished requests are answered */
    const double t = llm_now_s(); /* one clock for the step's tokens */
    for (int32_t i = 0; i < e->n_run;) {
        struct req *q = e->run[i];
        struct choice *l = &q->ch[q->leader];
        if (e->p.prefill_only && l->row >= 0 && !l->finish) {
            /* the prompt is done: handed over, and the request ends here */
            LLM_TRY(e->cb.prefilled(e->cb.ctx, &q->r, l->slot, l->toks, q->n_prompt,
                                    e->blog + (size_t)l->row * e->n_vocab));
            for (int32_t j = 0; j < q->r.n; j++)
                if (!q->ch[j].finish)
                    finish(e, q, &q->ch[j], "prefilled");
        }
        for (int32_t j = 0; j < q->r.n; j++)
            if (q->ch[j].row >= 0 && !q->ch[j].finish)
                LLM_TRY(q->ch[j].dec ? spec_sample(e, q, &q->ch[j], t, pass_s / n)
                                     : sample(e, q, &q->ch[j], t, -1, -1, NULL));
        if (q->n_live == 0) {
            LLM_TRY(answer(e, q, t));
            continue;
        }
        /* a finished leader hands the prompt over: later forks come from
         * a choice that holds it */
        if (q->ch[q->leader].finish) {
            for (int32_t j = 0; j < q->r.n; j++)
                if (!q->ch[j].finish && q->ch[j].slot >= 0 && q->ch[j].forked) {
                    q->leader = j;
                    break;
                }
        }
        i++;
    }
    return LLM_OK;
}
