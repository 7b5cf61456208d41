/* serve.c: llm-bench --serve: a workload of requests through the
 * continuous-batching engine, arriving over time, with the latencies a
 * serving benchmark reports (vLLM's `bench serve` and `bench throughput`
 * define them the same way). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "../common/alloc.h"
#include "../common/io.h"
#include "../common/num.h"
#include "../model/model.h"
#include "../sample/sample.h"
#include "../serve/batch.h"
#include "../serve/engine.h"
#include "../tokenizer/tokenizer.h"
#include "bench.h"

#define SERVE_MAX_INPUT (1ull << 32) /* bytes of a request file or a text */

void llm_serve_params_default(struct llm_serve_params *p)
{
    memset(p, 0, sizeof *p);
    p->n_requests = 256;
    p->prompt_min = 32, p->prompt_max = 512;
    p->gen_min = 16, p->gen_max = 256;
    llm_engine_params_default(&p->engine);
    p->defaults.max_tokens = -1;
    llm_sampler_params_default(&p->defaults.sp);
    p->kv_k = p->kv_v = LLM_TYPE_F16;
}

/* An integer uniform in [lo, hi]. */
static int32_t uniform_int(struct llm_rng *g, int32_t lo, int32_t hi)
{
    int32_t v = lo + (int32_t)(llm_rng_uniform(g) * (double)(hi - lo + 1));
    return v > hi ? hi : v;
}

/* The synthetic workload: request i is BOS (when the model adds one), the
 * text's first shared_prefix tokens, then prompt tokens from a random place
 * after them; it asks for a drawn number of tokens, greedy, past EOS. */
static llm_status synthetic(struct llm_request *q, const struct llm_serve_params *p,
                            struct llm_model *m, struct llm_rng *g)
{
    const struct llm_tokenizer *tok = llm_model_tokenizer(m);
    char *text = NULL;
    size_t len, n_tok = 0;
    int32_t *ids = NULL;
    LLM_TRY(llm_read_file(p->text, SERVE_MAX_INPUT, &text, &len));
    llm_status s = llm_tokenize(tok, text, len, 0, &ids, &n_tok);
    llm_free(text);
    if (s)
        return s;
    const size_t need = (size_t)p->shared_prefix + (size_t)p->prompt_max;
    if (n_tok < need + 1) {
        llm_free(ids);
        return llm_error_set(LLM_E_INVALID, "%s: %zu tokens, too few for prompts of %d after a "
                             "shared prefix of %d", p->text, n_tok, p->prompt_max, p->shared_prefix);
    }
    /* what the model puts before a prompt: BOS or nothing */
    int32_t *head = NULL;
    size_t add_bos = 0;
    if ((s = llm_tokenize(tok, "", 0, LLM_TOK_ADD_BOS, &head, &add_bos))) {
        llm_free(ids);
        return s;
    }
    const int32_t bos = add_bos ? head[0] : -1;
    llm_free(head);
    for (int32_t i = 0; !s && i < p->n_requests; i++) {
        const int32_t L = uniform_int(g, p->prompt_min, p->prompt_max);
        const size_t free_span = n_tok - (size_t)p->shared_prefix - (size_t)L; /* >= 1 */
        const size_t at = (size_t)p->shared_prefix +
                          (size_t)(llm_rng_uniform(g) * (double)free_span) % free_span;
        struct llm_request *r = &q[i];
        memset(r, 0, sizeof *r);
        r->line = i + 1;
        r->n = 1;
        r->max_tokens = uniform_int(g, p->gen_min, p->gen_max);
        llm_sampler_params_default(&r->sp);
        r->sp.temp = 0;
        r->n_ids = add_bos + (size_t)p->shared_prefix + (size_t)L;
        if (!(r->ids = llm_malloc(r->n_ids * sizeof *r->ids))) {
            s = LLM_E_NOMEM;
            break;
        }
        size_t k = 0;
        if (add_bos)
            r->ids[k++] = bos;
        memcpy(r->ids + k, ids, (size_t)p->shared_prefix * sizeof *ids);
        memcpy(r->ids + k + p->shared_prefix, ids + at, (size_t)L * sizeof *ids);
    }
    llm_free(ids);
    return s;
}

/* The request file: every non-blank line parsed and prepared; a bad line is
 * reported on stderr and counted, and the others go on. *n: the good ones. */
static llm_status from_file(struct llm_request **out, size_t *n, int64_t *errors,
                            const struct llm_serve_params *p, struct llm_context *c)
{
    char *text = NULL;
    size_t len, at = 0, l, cap = 0;
    LLM_TRY(llm_read_file(p->requests, SERVE_MAX_INPUT, &text, &len));
    const char *name = strcmp(p->requests, "-") ? p->requests : "<stdin>";
    struct llm_request *q = NULL;
    llm_status s = LLM_OK;
    int64_t lineno = 0;
    *n = 0;
    for (const char *line; !s && (line = llm_batch_next_line(text, len, &at, &l, &lineno));) {
        void *v = q;
        if ((s = llm_grow(&v, &cap, *n + 1, sizeof *q)))
            break;
        q = v;
        struct llm_request *r = &q[*n];
        if ((s = llm_request_parse(r, line, l, lineno, &p->defaults)) ||
            (s = llm_batch_prepare(r, c, p->defaults.chat_template, NULL, p->engine.max_seqs))) {
            llm_request_free(r);
            break;
        }
        if (r->err_code) {
            if (++*errors <= 10)
                fprintf(stderr, "llm-bench: %s:%lld: %s: %s\n", name, (long long)lineno,
                        r->err_code, r->err_msg);
            llm_request_free(r);
        } else
            ++*n;
    }
    llm_free(text);
    if (*errors > 10)
        fprintf(stderr, "llm-bench: %s: %lld bad lines in all (not measured)\n", name,
                (long long)*errors);
    if (!s && !*n)
        s = llm_error_set(LLM_E_INVALID, "%s: no request to measure", name);
    if (s) {
        for (size_t i = 0; i < *n; i++)
            llm_request_free(&q[i]);
        llm_free(q);
        *n = 0;
        return s;
    }
    *out = q;
    return LLM_OK;
}

struct tally {
    int64_t answered, prompt_tokens, output_tokens;
    double t_end;
};

static llm_status on_done(void *ctx, const struct llm_request *r, const struct llm_choice_out *ch,
                          int32_t n, int32_t prompt_tokens)
{
    (void)r;
    struct tally *t = ctx;
    t->answered++;
    t->prompt_tokens += prompt_tokens;
    for (int32_t i = 0; i < n; i++)
        t->output_tokens += ch[i].n_tokens;
    t->t_end = llm_now_s();
    return LLM_OK;
}

/* Statistics of a latency in milliseconds, over the items that have it. */
static llm_status stats_ms(struct llm_stats *st, const struct llm_engine_latency *l, size_t n,
                           int which)
{
    double *x = llm_malloc((n + 1) * sizeof *x);
    if (!x)
        return LLM_E_NOMEM;
    size_t m = 0;
    for (size_t i = 0; i < n; i++)
        if (which != 2 || l[i].tokens > 1) /* TPOT needs a second token */
            x[m++] = 1e3 * (which == 0 ? l[i].ttft : which == 1 ? l[i].e2e : l[i].tpot);
    llm_status s = llm_stats_compute(st, x, m);
    llm_free(x);
    return s;
}

/* Sleep until time t (llm_now_s's clock). */
static void sleep_until(double t)
{
    double d = t - llm_now_s();
    if (d <= 0)
        return;
    struct timespec ts = { .tv_sec = (time_t)d, .tv_nsec = (long)((d - floor(d)) * 1e9) };
    while (nanosleep(&ts, &ts) && errno == EINTR)
        ;
}

static void describe(struct llm_serve_result *r, const struct llm_serve_params *p)
{
    const char *base = p->requests ? strrchr(p->requests, '/') : NULL;
    const char *name = p->requests && !strcmp(p->requests, "-") ? "<stdin>" : p->requests;
    char rate[32] = "all at once";
    if (p->rate > 0)
        snprintf(rate, sizeof rate, "%g/s", p->rate);
    char prefix[32] = "";
    if (p->shared_prefix)
        snprintf(prefix, sizeof prefix, " prefix %d", p->shared_prefix);
    if (p->requests)
        snprintf(r->test, sizeof r->test, "serve %s, %s", base ? base + 1 : name, rate);
    else
        snprintf(r->test, sizeof r->test, "serve %d x p%d-%d g%d-%d%s, %s", p->n_requests,
                 p->prompt_min, p->prompt_max, p->gen_min, p->gen_max, prefix, rate);
}

llm_status llm_bench_serve(struct llm_serve_result *r, struct llm_model *m, const char *model,
                           const struct llm_serve_params *p, int n_threads, int32_t n_ctx)
{
    LLM_CHECK(n_threads >= 1 && (p->requests || p->text) && p->n_requests >= 1 &&
              p->prompt_min >= 1 && p->prompt_min <= p->prompt_max && p->gen_min >= 0 &&
              p->gen_min <= p->gen_max && p->shared_prefix >= 0 && p->rate >= 0,
              LLM_E_INVALID, "bench: bad serving workload");
    memset(r, 0, sizeof *r);
    snprintf(r->model, sizeof r->model, "%s", model);
    describe(r, p);
    r->n_threads = n_threads;
    r->max_seqs = p->engine.max_seqs;
    r->rate = p->rate;
    r->prefix_cache = p->engine.prefix_cache;
    if (!llm_model_tokenizer(m))
        return llm_error_set(LLM_E_INVALID, "%s: the model has no tokenizer", model);
    struct llm_context_params cp;
    llm_context_params_default(&cp);
    cp.n_seq = p->engine.max_seqs;
    cp.n_batch = p->engine.step_tokens;
    cp.n_threads = n_threads;
    cp.n_ctx = n_ctx;
    cp.kv_type_k = p->kv_k;
    cp.kv_type_v = p->kv_v;
    if (!n_ctx && !p->requests) /* the longest synthetic sequence, BOS included */
        cp.n_ctx = 1 + p->shared_prefix + p->prompt_max + p->gen_max;
    struct llm_context *c = NULL;
    LLM_TRY(llm_context_new(&c, m, &cp));
    struct llm_spec_params sp = { 0 };
    struct llm_engine_params ep = p->engine;
    llm_status s = LLM_OK;
    if (p->spec) {
        sp = *p->spec;
        sp.draft = NULL;
        ep.spec = &sp;
        snprintf(r->draft, sizeof r->draft, "%s", p->draft ? p->draft_name : "lookup");
        struct llm_kv_stats ks;
        llm_kv_stats(llm_context_kv(c), &ks);
        cp.n_ctx = llm_context_n_ctx(c);
        cp.kv_blocks = ks.n_blocks;
        if (p->draft)
            s = llm_context_new(&sp.draft, p->draft, &cp);
    }
    struct llm_request *q = NULL;
    size_t n = 0;
    struct llm_rng g;
    llm_rng_seed(&g, p->seed);
    if (!s && p->requests)
        s = from_file(&q, &n, &r->errors, p, c);
    else if (!s && !(s = (q = llm_calloc((size_t)p->n_requests, sizeof *q)) ? LLM_OK : LLM_E_NOMEM)) {
        n = (size_t)p->n_requests;
        s = synthetic(q, p, m, &g);
    }
    /* arrival times: a Poisson process (exponential gaps), or all at 0 */
    double *arrive = s ? NULL : llm_calloc(n + 1, sizeof *arrive);
    if (!s && !arrive)
        s = LLM_E_NOMEM;
    for (size_t i = 1; !s && i < n; i++)
        arrive[i] = arrive[i - 1] + (p->rate > 0 ? -log(1.0 - llm_rng_uniform(&g)) / p->rate : 0);
    struct tally t = { 0 };
    ep.ignore_eos = p->engine.ignore_eos || !p->requests;
    ep.record_itl = 1;
    struct llm_engine_callbacks cb = { .done = on_done, .ctx = &t };
    struct llm_engine *e = NULL;
    if (!s)
        s = llm_engine_new(&e, c, &ep, &cb);
    const double t0 = llm_now_s();
    size_t next = 0;
    while (!s && (next < n || llm_engine_pending(e))) {
        const double now = llm_now_s();
        while (!s && next < n && t0 + arrive[next] <= now) {
            s = llm_engine_add_at(e, &q[next], t0 + arrive[next]);
            next++;
        }
        if (s)
            break;
        if (!llm_engine_pending(e))
            sleep_until(t0 + arrive[next]);
        else
            s = llm_engine_step(e);
    }
    if (!s) {
        size_t nl, ni;
        const struct llm_engine_latency *l = llm_engine_latencies(e, &nl);
        const double *itl = llm_engine_itls(e, &ni);
        double *ms = llm_malloc((ni + 1) * sizeof *ms);
        s = ms ? LLM_OK : LLM_E_NOMEM;
        for (size_t i = 0; !s && i < ni; i++)
            ms[i] = 1e3 * itl[i];
        if (!s)
            s = llm_stats_compute(&r->itl_ms, ms, ni);
        llm_free(ms);
        if (!s)
            s = stats_ms(&r->ttft_ms, l, nl, 0);
        if (!s)
            s = stats_ms(&r->e2e_ms, l, nl, 1);
        if (!s)
            s = stats_ms(&r->tpot_ms, l, nl, 2);
    }
    if (!s) {
        struct llm_engine_stats st;
        llm_engine_stats(e, &st);
        r->requests = t.answered;
        r->prompt_tokens = t.prompt_tokens;
        r->output_tokens = t.output_tokens;
        r->seconds = t.t_end - t0;
        r->arrival_span_s = n ? arrive[n - 1] : 0;
        r->req_s = r->seconds > 0 ? (double)t.answered / r->seconds : 0;
        r->out_ts = r->seconds > 0 ? (double)t.output_tokens / r->seconds : 0;
        r->total_ts = r->seconds > 0 ? (double)(t.prompt_tokens + t.output_tokens) / r->seconds : 0;
        r->lookup_tokens = st.lookup_tokens;
        r->hit_tokens = st.hit_tokens;
        r->preemptions = st.preemptions;
        r->kv_blocks = st.kv_blocks;
        r->kv_peak = st.kv_peak;
        r->spec_drafted = st.spec_drafted;
        r->spec_accepted = st.spec_accepted;
        r->spec_rounds = st.spec_rounds;
        r->spec_passes = st.spec_passes;
        r->spec_tokens = st.spec_tokens;
    }
    llm_engine_free(e);
    llm_context_free(sp.draft);
    for (size_t i = 0; i < n; i++)
        llm_request_free(&q[i]); /* the queued ones were zeroed by the engine */
    llm_free(q);
    llm_free(arrive);
    llm_context_free(c);
    return s;
}
