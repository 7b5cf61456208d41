/* Tests of speculative decoding (lib/model/spec.h): prompt lookup, the
 * adaptive draft length, the rejection rule against the distribution it
 * must keep (chi-square, on a synthetic vocabulary and on stories260K's
 * first two tokens), greedy and match-rule identity with plain decoding,
 * the draft's vocabulary check, and no KV block held past the rollback. */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "../../../lib/llm.h"
#include "../helpers.h"

/* The chi-square statistic's critical value at false-alarm rate 1e-4 (z =
 * 3.719), by the Wilson-Hilferty approximation. */
static double chi2_critical(int df)
{
    const double z = 3.719, a = 2.0 / (9.0 * df);
    return df * pow(1 - a + z * sqrt(a), 3);
}

/* Observed counts (n) against probabilities p (n) over `total` draws:
 * bins whose expectation is under 5 are pooled. Asserts the statistic is
 * below the critical value; returns it. */
static double chi2_check(const int64_t *obs, const double *p, int n, int64_t total, const char *what)
{
    double stat = 0, pool_e = 0;
    int64_t pool_o = 0;
    int bins = 0;
    for (int i = 0; i < n; i++) {
        double e = p[i] * (double)total;
        if (e < 5) {
            pool_e += e;
            pool_o += obs[i];
            continue;
        }
        stat += (obs[i] - e) * (obs[i] - e) / e;
        bins++;
    }
    if (pool_e >= 5) {
        stat += (pool_o - pool_e) * (pool_o - pool_e) / pool_e;
        bins++;
    } else {
        cr_assert_leq(pool_o, 5 + 10 * pool_e, "%s: %lld draws where %.2f were expected", what,
                      (long long)pool_o, pool_e);
    }
    cr_assert_geq(bins, 3, "%s: too few bins for the test", what);
    cr_assert_lt(stat, chi2_critical(bins - 1), "%s: chi-square %.1f over %d bins (critical %.1f)",
                 what, stat, bins, chi2_critical(bins - 1));
    return stat;
}

/* Temperature 1 over the whole vocabulary: the model's own distribution. */
static struct llm_sampler_params plain_sampling(void)
{
    struct llm_sampler_params sp;
    llm_sampler_params_default(&sp);
    sp.temp = 1;
    sp.top_k = 0;
    sp.top_p = 1;
    sp.min_p = 0;
    return sp;
}

Test(spec, lookup_takes_the_latest_longest_match)
{
    const int32_t t[] = { 5, 1, 2, 9, 7, 1, 2, 3, 4, 8, 1, 2, 3 };
    int32_t out[8];
    /* "1 2 3" occurred at 5: what followed is 4 8 1 2 3 */
    cr_assert_eq(llm_spec_lookup(t, 13, 1, 3, 8, out), 5);
    cr_assert_eq(out[0], 4);
    cr_assert_eq(out[4], 3);
    cr_assert_eq(llm_spec_lookup(t, 13, 1, 3, 2, out), 2);
    /* bigrams only: "2 3" last occurred at 6 as well */
    cr_assert_eq(llm_spec_lookup(t, 13, 1, 2, 1, out), 1);
    cr_assert_eq(out[0], 4);
    /* "5 1 2 9": 9 never recurs, nor does any n-gram ending in it */
    const int32_t u[] = { 5, 1, 2, 9 };
    cr_assert_eq(llm_spec_lookup(u, 4, 1, 3, 4, out), 0);
    /* a trigram minimum skips the unigram that would match */
    const int32_t v[] = { 1, 2, 3, 4, 3 };
    cr_assert_eq(llm_spec_lookup(v, 5, 2, 3, 4, out), 0);
    cr_assert_eq(llm_spec_lookup(v, 5, 1, 3, 4, out), 2);
    cr_assert_eq(out[0], 4);
    cr_assert_eq(out[1], 3);
}

/* The tuner drafts long when drafts are cheap and kept, short when they
 * are dear or rejected, and follows a change. */
Test(spec, adaptive_length_follows_acceptance_and_costs)
{
    struct llm_spec_tuner t;
    llm_spec_tuner_init(&t, 0);
    cr_assert_eq(llm_spec_tuner_k(&t, 16), 4); /* nothing timed: 4 */
    cr_assert_eq(llm_spec_tuner_k(&t, 2), 2);
    /* lookup-like: free drafts, 95% kept, passes of 20 ms + 1 ms a token */
    for (int i = 0; i < 60; i++) {
        int nd = 8, kept = i % 3 ? 8 : 5;
        llm_spec_tuner_round(&t, nd, kept, 0, 0, nd + 1, 0.020 + 0.001 * (nd + 1) + 1e-4 * (i % 2));
    }
    int32_t k_cheap = llm_spec_tuner_k(&t, 16);
    cr_assert_geq(k_cheap, 8, "k %d", k_cheap);
    /* a draft half as slow as the target, half its drafts rejected at once */
    for (int i = 0; i < 60; i++) {
        int nd = 2 + i % 2, kept = i % 2;
        llm_spec_tuner_round(&t, nd, kept, nd, 0.010 * nd, nd + 1, 0.020 + 0.001 * (nd + 1));
    }
    cr_assert_eq(llm_spec_tuner_k(&t, 16), 0); /* plain steps pay more */
    for (int i = 0; i < 31; i++) {
        llm_spec_tuner_round(&t, 0, 0, 0, 0, 1, 0.021);
        cr_assert_eq(llm_spec_tuner_k(&t, 16), 0);
    }
    llm_spec_tuner_round(&t, 0, 0, 0, 0, 1, 0.021);
    cr_assert_eq(llm_spec_tuner_k(&t, 16), 1); /* the 32nd plain step: one draft to look again */
    /* the look finds it still does not pay: the next one after 128 */
    llm_spec_tuner_round(&t, 1, 0, 1, 0.012, 2, 0.022);
    for (int i = 0; i < 128; i++) {
        cr_assert_eq(llm_spec_tuner_k(&t, 16), 0, "plain step %d", i);
        llm_spec_tuner_round(&t, 0, 0, 0, 0, 1, 0.021);
    }
    cr_assert_eq(llm_spec_tuner_k(&t, 16), 1);
    /* in between: alpha 0.75, a draft step a quarter of a pass */
    llm_spec_tuner_init(&t, 0);
    for (int i = 0; i < 200; i++) {
        int nd = 1 + i % 4, kept = (i % 4 == 3) ? nd : nd * 3 / 4;
        llm_spec_tuner_round(&t, nd, kept, nd, 0.005 * nd, nd + 1, 0.018 + 0.0015 * (nd + 1));
    }
    int32_t k = llm_spec_tuner_k(&t, 16);
    cr_assert(k >= 2 && k <= 4, "k %d", k);
    /* before anything is timed, the weights' prior: a draft step 0.6 of a
     * pass (a q4 draft of a q8_0 target) does not pay at alpha 0.75, and
     * looks after 32 plain steps; 0.15 (of an f32 target) drafts 3 */
    llm_spec_tuner_init(&t, 0.6);
    cr_assert_eq(llm_spec_tuner_k(&t, 16), 0);
    for (int i = 0; i < 32; i++)
        llm_spec_tuner_round(&t, 0, 0, 0, 0, 1, 0.004);
    cr_assert_eq(llm_spec_tuner_k(&t, 16), 1);
    llm_spec_tuner_init(&t, 0.15);
    cr_assert_eq(llm_spec_tuner_k(&t, 16), 3);
    /* timed steps replace the prior: drafts that cost nothing */
    for (int i = 0; i < 40; i++)
        llm_spec_tuner_round(&t, 4, 4, 4, 0, 5, 0.020);
    cr_assert_geq(llm_spec_tuner_k(&t, 16), 8);
}

/* The rejection rule on an 8-token vocabulary: whatever q the draft came
 * from (a different distribution, or a token chosen outright as lookup
 * does), the kept-or-redrawn token follows the target's p. */
Test(spec, rejection_rule_keeps_the_target_distribution)
{
    enum { V = 8, N = 200000 };
    const float logits[V] = { 2.0f, 1.5f, 1.0f, 0.5f, 0.0f, -0.5f, -1.0f, -3.0f };
    const int32_t q_ids[V] = { 7, 6, 5, 4, 3, 2, 1, 0 }; /* q favours what p does not */
    const float q_probs[V] = { 0.3f, 0.2f, 0.15f, 0.1f, 0.1f, 0.07f, 0.05f, 0.03f };
    struct llm_sampler_params sp = plain_sampling();
    struct llm_sampler *t, *d;
    cr_assert_eq(llm_sampler_new(&t, &sp, V), LLM_OK);
    sp.seed = 99;
    cr_assert_eq(llm_sampler_new(&d, &sp, V), LLM_OK);
    double p[V], sum = 0;
    for (int i = 0; i < V; i++)
        sum += p[i] = exp(logits[i]);
    for (int i = 0; i < V; i++)
        p[i] /= sum;
    struct llm_spec_scratch sc;
    cr_assert_eq(llm_spec_scratch_init(&sc, V), LLM_OK);
    for (int mode = 0; mode < 2; mode++) {
        int64_t obs[V] = { 0 }, kept = 0;
        for (int k = 0; k < N; k++) {
            int32_t draft;
            if (mode == 0) { /* drawn from q */
                double r = llm_sampler_uniform(d), acc = 0;
                draft = q_ids[V - 1];
                for (int i = 0; i < V; i++)
                    if (r < (acc += q_probs[i])) {
                        draft = q_ids[i];
                        break;
                    }
            } else { /* lookup: always the least likely token but one */
                draft = 6;
            }
            float l[V];
            memcpy(l, logits, sizeof l);
            int acc;
            int32_t x = llm_spec_verify(t, l, draft, mode ? NULL : q_ids, mode ? NULL : q_probs,
                                        mode ? 0 : V, LLM_SPEC_REJECTION, &sc, &acc);
            cr_assert(x >= 0 && x < V);
            cr_assert(!acc || x == draft);
            obs[x]++;
            kept += acc;
        }
        chi2_check(obs, p, V, N, mode ? "point-mass draft" : "sampled draft");
        /* kept as often as the rule says: sum min(p, q), or p(6) */
        double want = 0;
        for (int i = 0; i < V; i++)
            want += fmin(p[q_ids[i]], q_probs[i]);
        if (mode)
            want = p[6];
        cr_assert_lt(fabs((double)kept / N - want), 0.01, "kept %.4f, rule %.4f",
                     (double)kept / N, want);
    }
    /* the match rule keeps a draft only when it is the target's own draw */
    float l[V];
    memcpy(l, logits, sizeof l);
    int acc;
    sp.temp = 0;
    struct llm_sampler *g;
    cr_assert_eq(llm_sampler_new(&g, &sp, V), LLM_OK);
    cr_assert_eq(llm_spec_verify(g, l, 3, NULL, NULL, 0, LLM_SPEC_REJECTION, &sc, &acc), 0);
    cr_assert_eq(acc, 0);
    memcpy(l, logits, sizeof l);
    cr_assert_eq(llm_spec_verify(g, l, 0, NULL, NULL, 0, LLM_SPEC_MATCH, &sc, &acc), 0);
    cr_assert_eq(acc, 1);
    llm_sampler_free(g);
    llm_spec_scratch_release(&sc);
    llm_sampler_free(t);
    llm_sampler_free(d);
}

/* Tokens of one generation. */
struct toks {
    int32_t id[512];
    int32_t n;
    struct llm_context *c;
    int32_t n_prompt, block;
    int leak;          /* a step where the pool held a block past the sequence */
};

static llm_status on_tok(void *ctx, int32_t seq, const struct llm_gen_token *t)
{
    struct toks *k = ctx;
    cr_assert_eq(seq, 0);
    if (k->n < 512)
        k->id[k->n] = t->id;
    k->n++;
    if (k->c) {
        /* one sequence and no prefix index: every block in use is one of
         * its table's, whatever was drafted and cut */
        struct llm_kv_stats st;
        uint64_t bb;
        llm_context_kv_stats(k->c, &st, &bb);
        int32_t len = llm_context_seq_len(k->c, 0);
        if (st.used != (len + k->block - 1) / k->block)
            k->leak = 1;
    }
    return LLM_OK;
}

static void run(struct llm_context *c, const int32_t *prompt, size_t n, const struct llm_gen_params *gp,
                struct toks *out, struct llm_gen_result *r)
{
    memset(out->id, 0, sizeof out->id);
    out->n = 0;
    struct llm_gen_callbacks cb = { NULL, on_tok, out };
    llm_status s = llm_generate(c, prompt, n, gp, &cb, r);
    cr_assert_eq(s, LLM_OK, "%s", llm_error_detail(s));
}

static int32_t *tokenize(struct llm_model *m, const char *text, size_t *n)
{
    int32_t *ids;
    cr_assert_eq(llm_tokenize(llm_model_tokenizer(m), text, strlen(text), LLM_TOK_ADD_BOS, &ids, n),
                 LLM_OK);
    return ids;
}

/* Greedy, and sampled under the match rule: a draft model (here the
 * target's own weights, opened a second time) and lookup give plain
 * decoding's tokens, for fixed and adaptive lengths. */
Test(spec, greedy_and_match_rule_give_plain_decoding_tokens)
{
    struct llm_model *m = llm_test_model("gguf/stories260K.gguf", 1);
    if (!m)
        cr_skip_test("gguf/stories260K.gguf is absent");
    struct llm_model *dm = llm_test_model("gguf/stories260K.gguf", 1);
    struct llm_context *c, *dc;
    struct llm_context_params cp;
    llm_context_params_default(&cp);
    cp.n_ctx = 256;
    cr_assert_eq(llm_context_new(&c, m, &cp), LLM_OK);
    cr_assert_eq(llm_context_new(&dc, dm, &cp), LLM_OK);
    cr_assert_eq(llm_spec_check_draft(m, dm), LLM_OK);
    size_t n;
    int32_t *prompt = tokenize(m, "Once upon a time, Lily and Tom", &n);
    static struct toks plain, sp;
    struct llm_gen_result r;
    for (int sampled = 0; sampled < 2; sampled++) {
        struct llm_gen_params gp;
        llm_gen_params_default(&gp);
        gp.n_predict = 150;
        gp.ignore_eos = 1;
        gp.sp.seed = 11;
        gp.sp.temp = sampled ? 1.0f : 0.0f;
        gp.sp.repeat_penalty = sampled ? 1.2f : 1.0f;
        run(c, prompt, n, &gp, &plain, &r);
        cr_assert_eq(plain.n, 150);
        for (int way = 0; way < 4; way++) {
            struct llm_spec_params spp;
            llm_spec_params_default(&spp);
            spp.draft = way < 2 ? dc : NULL;
            spp.lookup = way >= 2;
            spp.draft_n = way & 1 ? 3 : 0;
            gp.spec = &spp;
            sp.c = c;
            sp.block = 16;
            sp.leak = 0;
            run(c, prompt, n, &gp, &sp, &r);
            gp.spec = NULL;
            cr_assert_eq(sp.n, 150, "way %d sampled %d", way, sampled);
            for (int i = 0; i < 150; i++)
                cr_assert_eq(sp.id[i], plain.id[i], "way %d sampled %d: token %d", way, sampled, i);
            cr_assert_eq(sp.leak, 0, "way %d: a block outlived the rollback", way);
            cr_assert_gt(r.n_drafted, 0, "way %d drafted nothing", way);
            cr_assert_leq(r.n_accepted, r.n_drafted);
            /* each pass yields at least one token; drafts cut the passes */
            cr_assert_lt(r.n_passes, 150, "way %d: %d passes", way, r.n_passes);
            if (way < 2 && !sampled) /* the draft is the target: all kept */
                cr_assert_eq(r.n_accepted, r.n_drafted);
            sp.c = NULL;
        }
        /* the pool is empty after the run */
        struct llm_kv_stats st;
        uint64_t bb;
        llm_context_kv_stats(c, &st, &bb);
        cr_assert_eq(st.used, 0);
    }
    llm_free(prompt);
    llm_context_free(dc);
    llm_context_free(c);
    llm_model_close(dm);
    llm_model_close(m);
}

Test(spec, a_draft_with_another_vocabulary_is_refused)
{
    struct llm_model *m = llm_test_model("gguf/stories260K.gguf", 1);
    struct llm_model *o = llm_test_model("gguf/llama-2-tiny-random.gguf", 1);
    if (!m || !o)
        cr_skip_test("stories260K.gguf or llama-2-tiny-random.gguf is absent");
    cr_assert_eq(llm_spec_check_draft(m, o), LLM_E_INVALID);
    const char *d = llm_error_detail(LLM_E_INVALID);
    cr_assert(strstr(d, "32000") && strstr(d, "512") && strstr(d, "llama-2-tiny-random.gguf"), "%s",
              d);
    llm_model_close(o);
    llm_model_close(m);
}

/* The frequencies of the first two tokens of stories260K after `text`,
 * over N seeds, against the target's own probabilities: p1, and
 * p2(y) = sum over x of p1(x) p(y | x). Returns the drafted and kept counts. */
static void first_two_follow_the_target(struct llm_model *m, const char *text,
                                        const struct llm_sampler_params *sp,
                                        struct llm_spec_params *spp, int N, int64_t *drafted,
                                        int64_t *accepted)
{
    struct llm_context *c, *dc = NULL;
    struct llm_context_params cp;
    llm_context_params_default(&cp);
    cp.n_ctx = 64;
    cr_assert_eq(llm_context_new(&c, m, &cp), LLM_OK);
    spp->draft = NULL;
    if (!spp->lookup) {
        cr_assert_eq(llm_context_new(&dc, m, &cp), LLM_OK);
        spp->draft = dc;
    }
    const int32_t V = llm_model_config(m)->n_vocab;
    size_t n;
    int32_t *prompt = tokenize(m, text, &n);
    double *p1 = calloc((size_t)V, sizeof *p1), *p2 = calloc((size_t)V, sizeof *p2);
    float *lg = malloc((size_t)V * sizeof *lg);
    int32_t *ids = malloc((size_t)V * sizeof *ids);
    float *pr = malloc((size_t)V * sizeof *pr);
    cr_assert_eq(llm_decode(c, 0, prompt, (int32_t)n, 0, lg, 0), LLM_OK);
    struct llm_sampler *s;
    cr_assert_eq(llm_sampler_new(&s, sp, V), LLM_OK);
    for (size_t i = 0; i < n; i++)
        llm_sampler_accept(s, prompt[i]);
    int32_t k = llm_sampler_dist(s, lg, ids, pr);
    for (int32_t i = 0; i < k; i++)
        p1[ids[i]] = pr[i];
    llm_sampler_free(s);
    for (int32_t x = 0; x < V; x++) {
        if (p1[x] < 1e-7)
            continue;
        cr_assert_eq(llm_decode(c, 0, &x, 1, (int32_t)n, lg, 0), LLM_OK);
        cr_assert_eq(llm_sampler_new(&s, sp, V), LLM_OK);
        for (size_t i = 0; i < n; i++)
            llm_sampler_accept(s, prompt[i]);
        llm_sampler_accept(s, x);
        k = llm_sampler_dist(s, lg, ids, pr);
        for (int32_t i = 0; i < k; i++)
            p2[ids[i]] += p1[x] * pr[i];
        llm_sampler_free(s);
    }
    int64_t *o1 = calloc((size_t)V, sizeof *o1), *o2 = calloc((size_t)V, sizeof *o2);
    struct llm_gen_params gp;
    llm_gen_params_default(&gp);
    gp.sp = *sp;
    gp.n_predict = 3; /* two drafted positions, then the bonus */
    gp.ignore_eos = 1;
    gp.spec = spp;
    static struct toks t;
    *drafted = *accepted = 0;
    for (int seed = 0; seed < N; seed++) {
        struct llm_gen_result r;
        gp.sp.seed = (uint64_t)seed;
        run(c, prompt, n, &gp, &t, &r);
        cr_assert_eq(t.n, 3);
        o1[t.id[0]]++;
        o2[t.id[1]]++;
        *drafted += r.n_drafted;
        *accepted += r.n_accepted;
    }
    chi2_check(o1, p1, V, N, "first token");
    chi2_check(o2, p2, V, N, "second token");
    free(o1);
    free(o2);
    free(p1);
    free(p2);
    free(lg);
    free(ids);
    free(pr);
    llm_free(prompt);
    llm_context_free(dc);
    llm_context_free(c);
}

/* The statistical test on a real model, under the rejection rule, at a
 * false-alarm rate of 1e-4 per comparison:
 * - a draft model (the target's weights; the target's penalties make its
 *   p differ from the draft's q, which has none);
 * - prompt lookup (a point-mass q on the token that followed the n-gram
 *   before: a redraw that forgot to remove it would over-weight it). */
Test(spec, rejection_rule_first_two_tokens_follow_the_target, .timeout = 300)
{
    struct llm_model *m = llm_test_model("gguf/stories260K.gguf", 1);
    if (!m)
        cr_skip_test("gguf/stories260K.gguf is absent");
    struct llm_sampler_params sp = plain_sampling();
    struct llm_spec_params spp;
    llm_spec_params_default(&spp);
    spp.draft_n = 2;
    spp.rule = LLM_SPEC_REJECTION;
    int64_t drafted, accepted;
    struct llm_sampler_params pen = sp;
    pen.repeat_penalty = 2.0f;
    pen.presence_penalty = 2.0f;
    pen.penalty_last_n = -1;
    first_two_follow_the_target(m, "Lily and Tom went to the park. Lily saw a big", &pen, &spp,
                                6000, &drafted, &accepted);
    cr_assert(accepted > 0 && accepted < drafted, "%lld of %lld drafts kept: both ways of the "
              "rule must be taken", (long long)accepted, (long long)drafted);
    spp.lookup = 1;
    spp.ngram_max = 4;
    first_two_follow_the_target(m, "Lily saw a big dog. The dog was happy. Lily saw a big", &sp,
                                &spp, 6000, &drafted, &accepted);
    cr_assert(accepted > 0 && accepted < drafted, "%lld of %lld lookup drafts kept",
              (long long)accepted, (long long)drafted);
    llm_model_close(m);
}
