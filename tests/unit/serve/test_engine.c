/* Tests of the engine: every request's text is the text of a single run
 * (llm_generate with its seed), whatever the batch around it, the chunk
 * size, the number of sequences at once, the prefix index (on, off, or
 * evicting), and preemptions forced by a small pool; priorities order the
 * queue. On stories260K, whose vocabulary and tokenizer come with it. */
#include <criterion/criterion.h>
#include <string.h>

#include "../../../lib/llm.h"
#include "../helpers.h"

#define NREQ 24

static struct llm_context *open_ctx(struct llm_model *m, int32_t n_seq, int32_t kv_blocks,
                                    int32_t n_batch)
{
    struct llm_context *c;
    struct llm_context_params cp;
    llm_context_params_default(&cp);
    cp.n_ctx = 256;
    cp.n_seq = n_seq;
    cp.kv_blocks = kv_blocks;
    cp.n_batch = n_batch;
    llm_status s = llm_context_new(&c, m, &cp);
    cr_assert_eq(s, LLM_OK, "%s", llm_error_detail(s));
    return c;
}

/* Request i of the test set: prompts of 1 to ~100 tokens, half of them
 * beginning with the same long sentence, greedy and sampled, n up to 3,
 * stop strings, lengths from 0 to 48 tokens. */
static void request_line(int i, char *buf, size_t cap)
{
    static const char *words[] = { "Once", "upon", "a", "time", "there", "was", "a", "little",
                                   "girl", "named", "Lily", "who", "loved", "to", "play" };
    char prompt[2048] = "";
    if (i % 2)
        strcat(prompt, "One day, a big dog and a small cat went to the park to play with a red "
                       "ball and they ran and ran until the sun went down. ");
    int nw = 1 + (i * 7) % 40;
    for (int w = 0; w < nw; w++) {
        strcat(prompt, words[(i + w) % 15]);
        strcat(prompt, " ");
    }
    const int n = i % 5 == 0 ? 3 : 1;
    const char *stop = i % 4 == 1 ? ",\"stop\":[\".\",\"!\"]" : "";
    snprintf(buf, cap, "{\"custom_id\":\"r%d\",\"body\":{\"prompt\":\"%s\",\"max_tokens\":%d,"
             "\"temperature\":%s,\"seed\":%d,\"n\":%d%s}}", i, prompt, (i * 13) % 49,
             i % 3 ? "0.9" : "0", 100 + i, n, stop);
}

struct result {
    char text[3][2048];
    const char *finish[3];
    int32_t n_tokens[3];
    int n;
    int order; /* when it was answered */
};

struct sink {
    struct result *res;
    int answered;
};

static llm_status on_done(void *ctx, const struct llm_request *r, const struct llm_choice_out *ch,
                          int32_t n, int32_t prompt_tokens)
{
    (void)prompt_tokens;
    struct sink *s = ctx;
    struct result *o = &s->res[r->line - 1];
    cr_assert_eq(o->n, 0, "line %lld answered twice", (long long)r->line);
    o->n = n;
    o->order = s->answered++;
    for (int32_t i = 0; i < n; i++) {
        cr_assert_lt(ch[i].len, sizeof o->text[i]);
        memcpy(o->text[i], ch[i].text, ch[i].len);
        o->text[i][ch[i].len] = 0;
        o->finish[i] = ch[i].finish_reason;
        o->n_tokens[i] = ch[i].n_tokens;
    }
    return LLM_OK;
}

static void parse_line(struct llm_model *m, int i, struct llm_request *r)
{
    char line[4096];
    request_line(i, line, sizeof line);
    struct llm_req_defaults d = { .max_tokens = -1 };
    llm_sampler_params_default(&d.sp);
    cr_assert_eq(llm_request_parse(r, line, strlen(line), i + 1, &d), LLM_OK);
    cr_assert_null(r->err_code, "%s", r->err_msg);
    cr_assert_eq(llm_request_tokenize(r, m, NULL, 256), LLM_OK);
    cr_assert_null(r->err_code, "%s", r->err_msg);
}

/* Run the set through an engine; returns the preemptions. */
static int64_t run_engine(struct llm_model *m, const struct llm_engine_params *ep, int32_t kv_blocks,
                          struct result *res, struct llm_engine_stats *out)
{
    struct llm_context *c = open_ctx(m, ep->max_seqs, kv_blocks, ep->step_tokens);
    struct sink sk = { res, 0 };
    struct llm_engine_callbacks cb = { .done = on_done, .ctx = &sk };
    struct llm_engine *e;
    llm_status s = llm_engine_new(&e, c, ep, &cb);
    cr_assert_eq(s, LLM_OK, "%s", llm_error_detail(s));
    memset(res, 0, NREQ * sizeof *res);
    for (int i = 0; i < NREQ; i++) {
        struct llm_request r;
        parse_line(m, i, &r);
        cr_assert_eq(llm_engine_add(e, &r), LLM_OK);
        llm_request_free(&r);
    }
    int guard = 0;
    while (llm_engine_pending(e)) {
        s = llm_engine_step(e);
        cr_assert_eq(s, LLM_OK, "%s", llm_error_detail(s));
        cr_assert_lt(++guard, 100000, "the engine does not finish");
    }
    cr_assert_eq(sk.answered, NREQ);
    /* one inter-token latency per token after a choice's first, and one
     * TTFT per request, none of them negative */
    size_t n_itl, n_lat, want = 0;
    const double *itl = llm_engine_itls(e, &n_itl);
    const struct llm_engine_latency *lat = llm_engine_latencies(e, &n_lat);
    for (int i = 0; i < NREQ; i++)
        for (int k = 0; k < res[i].n; k++)
            want += res[i].n_tokens[k] > 1 ? (size_t)res[i].n_tokens[k] - 1 : 0;
    cr_assert_eq(n_itl, want, "%zu gaps for %zu tokens after the first", n_itl, want);
    for (size_t i = 0; i < n_itl; i++)
        cr_assert_geq(itl[i], 0.0);
    cr_assert_eq(n_lat, NREQ);
    for (size_t i = 0; i < n_lat; i++)
        cr_assert(lat[i].ttft >= 0 && lat[i].e2e >= lat[i].ttft, "request %zu", i);
    struct llm_engine_stats st;
    llm_engine_stats(e, &st);
    llm_engine_free(e);
    struct llm_kv_stats ks;
    llm_context_kv_stats(c, &ks, NULL);
    cr_assert_eq(ks.used, 0, "every block is free again");
    llm_context_free(c);
    if (out)
        *out = st;
    return st.preemptions;
}

struct gen_sink {
    struct result *o;
};

static llm_status gen_text(void *ctx, int32_t seq, const char *b, size_t n)
{
    struct gen_sink *g = ctx;
    size_t l = strlen(g->o->text[seq]);
    cr_assert_lt(l + n, sizeof g->o->text[seq]);
    memcpy(g->o->text[seq] + l, b, n);
    g->o->text[seq][l + n] = 0;
    return LLM_OK;
}

/* The reference: each request alone through llm_generate. */
static void run_single(struct llm_model *m, struct result *res)
{
    memset(res, 0, NREQ * sizeof *res);
    for (int i = 0; i < NREQ; i++) {
        struct llm_request r;
        parse_line(m, i, &r);
        struct llm_context *c = open_ctx(m, r.n + 1, 0, 0);
        struct llm_gen_params gp;
        llm_gen_params_default(&gp);
        gp.n_predict = r.max_tokens;
        gp.sp = r.sp;
        gp.stop = (const char *const *)r.stop;
        gp.n_stop = r.n_stop;
        gp.n_seq = r.n;
        struct gen_sink g = { &res[i] };
        struct llm_gen_callbacks cb = { gen_text, NULL, &g };
        struct llm_gen_result gr[3];
        llm_status s = llm_generate(c, r.ids, r.n_ids, &gp, &cb, gr);
        cr_assert_eq(s, LLM_OK, "%s", llm_error_detail(s));
        res[i].n = r.n;
        for (int k = 0; k < r.n; k++)
            res[i].finish[k] = !strcmp(gr[k].stop_reason, "eos") || !strcmp(gr[k].stop_reason, "stop")
                                   ? "stop" : "length";
        llm_context_free(c);
        llm_request_free(&r);
    }
}

static void same(const struct result *a, const struct result *b, const char *what)
{
    for (int i = 0; i < NREQ; i++) {
        cr_assert_eq(a[i].n, b[i].n, "%s: request %d", what, i);
        for (int k = 0; k < a[i].n; k++) {
            cr_assert_str_eq(a[i].text[k], b[i].text[k], "%s: request %d choice %d", what, i, k);
            cr_assert_str_eq(a[i].finish[k], b[i].finish[k], "%s: request %d choice %d", what, i, k);
        }
    }
}

static struct result ref[NREQ], got[NREQ];

Test(engine, every_schedule_gives_the_single_run_text, .timeout = 0)
{
    struct llm_model *m = llm_test_model("gguf/stories260K.gguf", 2);
    if (!m) {
        cr_skip_test("stories260K.gguf is absent");
        return;
    }
    run_single(m, ref);
    int some_text = 0;
    for (int i = 0; i < NREQ; i++)
        some_text += ref[i].text[0][0] != 0;
    cr_assert_gt(some_text, NREQ / 2, "the reference generated text");
    struct llm_engine_params ep;
    struct llm_engine_stats st;
    /* 8 at once, chunks of 64, the prefix index on */
    llm_engine_params_default(&ep);
    ep.record_itl = 1;
    ep.max_seqs = 8, ep.step_tokens = 64;
    run_engine(m, &ep, 0, got, &st);
    same(ref, got, "8 sequences");
    cr_assert_gt(st.hit_tokens, 0, "the shared sentence is found in the index");
    /* one at a time */
    ep.max_seqs = 3, ep.step_tokens = 512, ep.prefix_cache = 0;
    run_engine(m, &ep, 0, got, NULL);
    same(ref, got, "3 sequences, no index");
    /* chunks of 5 tokens */
    ep.max_seqs = 6, ep.step_tokens = 5, ep.prefix_cache = 0;
    run_engine(m, &ep, 0, got, NULL);
    same(ref, got, "chunks of 5");
    /* a pool too small for everyone: preemptions, with and without the index */
    ep.max_seqs = 8, ep.step_tokens = 48, ep.prefix_cache = 0;
    cr_assert_gt(run_engine(m, &ep, 24, got, NULL), 0, "the small pool preempts");
    same(ref, got, "preempted");
    ep.prefix_cache = 1;
    cr_assert_gt(run_engine(m, &ep, 24, got, &st), 0, "the small pool preempts");
    cr_assert_gt(st.evicted_blocks, 0, "and evicts from the index");
    same(ref, got, "preempted, with the index");
    llm_model_close(m);
}

/* Speculation in the engine: every choice drafts (by lookup, or by the
 * model as its own draft: greedy drafts, which greedy requests keep and
 * sampled ones often refuse, so that the KV is cut back), one pass checks
 * them all, and the text stays the single run's, through chunks and
 * preemptions; no block of either pool is left behind. */
Test(engine, speculation_gives_the_single_run_text, .timeout = 0)
{
    struct llm_model *m = llm_test_model("gguf/stories260K.gguf", 2);
    if (!m) {
        cr_skip_test("stories260K.gguf is absent");
        return;
    }
    run_single(m, ref);
    struct llm_spec_params sp;
    llm_spec_params_default(&sp);
    struct llm_engine_params ep;
    struct llm_engine_stats st;
    llm_engine_params_default(&ep);
    ep.record_itl = 1;
    ep.spec = &sp;
    sp.lookup = 1;
    ep.max_seqs = 8, ep.step_tokens = 64;
    run_engine(m, &ep, 0, got, &st);
    same(ref, got, "lookup");
    cr_assert_gt(st.spec_drafted, 0, "lookup drafts");
    static const struct {
        int32_t max_seqs, step_tokens, kv_blocks, draft_n, prefix;
    } runs[] = {
        { 8, 64, 0, 4, 1 },     /* 8 at once, 4 drafts each */
        { 6, 5, 0, 3, 0 },      /* chunks of 5: the drafts share a small budget */
        { 8, 48, 24, 4, 0 },    /* a pool too small: drafts dropped, requests preempted */
        { 4, 512, 0, 0, 1 },    /* the draft length adapted: to looks alone */
    };
    sp.lookup = 0;
    for (size_t i = 0; i < sizeof runs / sizeof *runs; i++) {
        ep.max_seqs = runs[i].max_seqs, ep.step_tokens = runs[i].step_tokens;
        ep.prefix_cache = runs[i].prefix;
        sp.draft_n = runs[i].draft_n;
        sp.draft = open_ctx(m, ep.max_seqs, runs[i].kv_blocks, ep.step_tokens);
        int64_t pre = run_engine(m, &ep, runs[i].kv_blocks, got, &st);
        char what[64];
        snprintf(what, sizeof what, "draft model, run %zu", i);
        same(ref, got, what);
        if (runs[i].draft_n) {
            cr_assert(st.spec_accepted > 0 && st.spec_accepted < st.spec_drafted,
                      "%s: %lld drafted, %lld kept", what, (long long)st.spec_drafted,
                      (long long)st.spec_accepted);
            cr_assert_lt(st.spec_passes, st.spec_tokens, "%s: fewer passes than tokens", what);
        } else {
            /* a draft that costs a whole step (the model itself) never
             * pays: the adapted length is its looks alone */
            cr_assert(st.spec_drafted > 0 && st.spec_drafted * 8 < st.spec_tokens,
                      "%s: %lld drafted for %lld tokens", what, (long long)st.spec_drafted,
                      (long long)st.spec_tokens);
        }
        if (runs[i].kv_blocks)
            cr_assert_gt(pre, 0, "%s: the small pool preempts", what);
        struct llm_kv_stats ks;
        llm_context_kv_stats(sp.draft, &ks, NULL);
        cr_assert_eq(ks.used, 0, "%s: every block of the draft's pool is free again", what);
        llm_context_free(sp.draft);
    }
    llm_model_close(m);
}

Test(engine, priority_orders_the_queue)
{
    struct llm_model *m = llm_test_model("gguf/stories260K.gguf", 2);
    if (!m) {
        cr_skip_test("stories260K.gguf is absent");
        return;
    }
    struct llm_context *c = open_ctx(m, 1, 0, 0);
    static struct result res[NREQ];
    memset(res, 0, sizeof res);
    struct sink sk = { res, 0 };
    struct llm_engine_callbacks cb = { .done = on_done, .ctx = &sk };
    struct llm_engine_params ep;
    llm_engine_params_default(&ep);
    ep.max_seqs = 1;
    struct llm_engine *e;
    cr_assert_eq(llm_engine_new(&e, c, &ep, &cb), LLM_OK);
    static const int prio[] = { 5, 0, 3, 0, -2 };
    for (int i = 0; i < 5; i++) {
        char line[128];
        snprintf(line, sizeof line, "{\"prompt\":\"Once upon\",\"max_tokens\":3,\"priority\":%d}",
                 prio[i]);
        struct llm_request r;
        struct llm_req_defaults d = { .max_tokens = -1 };
        llm_sampler_params_default(&d.sp);
        cr_assert_eq(llm_request_parse(&r, line, strlen(line), i + 1, &d), LLM_OK);
        cr_assert_eq(llm_request_tokenize(&r, m, NULL, 256), LLM_OK);
        /* the first arrived 50 s ago: its latencies count from then */
        cr_assert_eq(i ? llm_engine_add(e, &r) : llm_engine_add_at(e, &r, llm_now_s() - 50),
                     LLM_OK);
    }
    while (llm_engine_pending(e))
        cr_assert_eq(llm_engine_step(e), LLM_OK);
    /* -2 first, the two 0 in arrival order, then 3 and 5 */
    static const int want[] = { 4, 1, 3, 2, 0 }; /* line index by answer order */
    for (int k = 0; k < 5; k++)
        cr_assert_eq(res[want[k]].order, k, "answer %d should be line %d", k, want[k] + 1);
    size_t nl;
    const struct llm_engine_latency *lat = llm_engine_latencies(e, &nl);
    cr_assert_eq(nl, 5);
    for (size_t k = 0; k < 5; k++)
        cr_assert((lat[k].ttft >= 50) == (k == 4), "answer %zu: TTFT %g s", k, lat[k].ttft);
    llm_engine_free(e);
    llm_context_free(c);
    llm_model_close(m);
}

Test(engine, refuses_what_it_cannot_run)
{
    struct llm_model *m = llm_test_model("gguf/stories260K.gguf", 2);
    if (!m) {
        cr_skip_test("stories260K.gguf is absent");
        return;
    }
    struct llm_context *c = open_ctx(m, 2, 0, 0);
    struct llm_engine_params ep;
    llm_engine_params_default(&ep);
    ep.max_seqs = 3;
    struct llm_engine *e;
    struct llm_engine_callbacks cb = { 0 };
    cr_assert_eq(llm_engine_new(&e, c, &ep, &cb), LLM_E_INVALID, "more sequences than slots");
    ep.max_seqs = 2;
    cr_assert_eq(llm_engine_new(&e, c, &ep, &cb), LLM_OK);
    struct llm_request r;
    struct llm_req_defaults d = { .max_tokens = -1 };
    llm_sampler_params_default(&d.sp);
    const char *line = "{\"prompt\":\"Once\",\"n\":3}";
    cr_assert_eq(llm_request_parse(&r, line, strlen(line), 1, &d), LLM_OK);
    cr_assert_eq(llm_request_tokenize(&r, m, NULL, 256), LLM_OK);
    cr_assert_eq(llm_engine_add(e, &r), LLM_E_INVALID, "n larger than the sequences at once");
    llm_request_free(&r);
    llm_engine_free(e);
    llm_context_free(c);
    llm_model_close(m);
}
