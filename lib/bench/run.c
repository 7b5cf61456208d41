/* run.c: the measurements of llm-bench: pp / tg / pg tests through
 * llm_decode, and perplexity through llm_perplexity. */
#include <stdio.h>
#include <string.h>

#include "../common/alloc.h"
#include "../common/io.h"
#include "../model/model.h"
#include "../ops/matmul_impl.h"
#include "../tokenizer/tokenizer.h"
#include "bench.h"

static uint64_t next_rand(uint64_t *st)
{
    *st = *st * 6364136223846793005ull + 1442695040888963407ull;
    return *st >> 33;
}

static llm_status run_reps(struct llm_bench_result *r, struct llm_context *c, int32_t n_vocab,
                           const struct llm_bench_test *t, int reps, int warmup, double *ttft_ms,
                           double *tok_ms, double *ts)
{
    int32_t n_tok = t->n_prompt > 0 ? t->n_prompt : 1;
    int32_t *toks = llm_malloc((size_t)n_tok * sizeof *toks);
    float *logits = llm_malloc((size_t)n_vocab * sizeof *logits); // (n_vocab)
    llm_status s = LLM_OK;
    if (!toks || !logits) {
        s = LLM_E_NOMEM;
        goto out;
    }
    uint64_t seed = 1234;
    size_t k = 0;
    for (int rep = -warmup; rep < reps && !s; rep++) {
        for (int32_t i = 0; i < n_tok; i++)
            toks[i] = (int32_t)(next_rand(&seed) % (uint64_t)n_vocab);
        llm_context_reset(c, 0);
        int32_t pos = 0;
        uint64_t t0 = llm_time_ns(), tp = t0;
        if (t->n_prompt > 0) {
            s = llm_decode(c, 0, toks, t->n_prompt, 0, logits, 0);
            tp = llm_time_ns();
            pos = t->n_prompt;
        }
        for (int32_t g = 0; g < t->n_gen && !s; g++, pos++) {
            int32_t tok = (int32_t)(next_rand(&seed) % (uint64_t)n_vocab);
            uint64_t g0 = llm_time_ns();
            s = llm_decode(c, 0, &tok, 1, pos, logits, 0);
            if (rep >= 0)
                tok_ms[k++] = (double)(llm_time_ns() - g0) * 1e-6;
        }
        uint64_t dt = llm_time_ns() - t0;
        if (rep < 0 || s)
            continue;
        r->samples_ns[rep] = (double)dt;
        ttft_ms[rep] = (double)(tp - t0) * 1e-6;
        ts[rep] = (double)(t->n_prompt + t->n_gen) / ((double)(dt ? dt : 1) * 1e-9);
    }
out:
    llm_free(toks);
    llm_free(logits);
    return s;
}

/* A KV cache other than llama-bench's default f16 is part of the test's
 * name ("tg64 kv=q4", "tg64 kv=q8/q4" for K and V), so that --compare
 * never matches runs over different caches. */
static void kv_suffix(struct llm_bench_result *r)
{
    size_t n = strlen(r->test);
    if (r->kv_k == LLM_TYPE_F16 && r->kv_v == LLM_TYPE_F16)
        return;
    if (r->kv_k == r->kv_v)
        snprintf(r->test + n, sizeof r->test - n, " kv=%s", llm_kv_type_name(r->kv_k));
    else
        snprintf(r->test + n, sizeof r->test - n, " kv=%s/%s", llm_kv_type_name(r->kv_k),
                 llm_kv_type_name(r->kv_v));
}

llm_status llm_bench_run(struct llm_bench_result *r, struct llm_model *m, const char *model,
                         const struct llm_bench_test *t, int n_threads, int reps, int warmup)
{
    LLM_CHECK(reps >= 1 && warmup >= 0 && n_threads >= 1, LLM_E_INVALID,
              "bench: %d repetitions, %d warm-up runs, %d threads", reps, warmup, n_threads);
    LLM_CHECK(t->n_prompt >= 0 && t->n_gen >= 0 && t->n_prompt + t->n_gen >= 1, LLM_E_INVALID,
              "bench: empty test");
    const struct llm_config *cfg = llm_model_config(m);
    int64_t need = (int64_t)t->n_prompt + t->n_gen;
    LLM_CHECK(need <= INT32_MAX, LLM_E_INVALID, "%s: test of %lld tokens", model, (long long)need);
    snprintf(r->model, sizeof r->model, "%s", model);
    if (t->n_gen == 0)
        snprintf(r->test, sizeof r->test, "pp%d", t->n_prompt);
    else if (t->n_prompt == 0)
        snprintf(r->test, sizeof r->test, "tg%d", t->n_gen);
    else
        snprintf(r->test, sizeof r->test, "pp%d+tg%d", t->n_prompt, t->n_gen);
    kv_suffix(r);
    r->n_prompt = t->n_prompt;
    r->n_gen = t->n_gen;
    r->n_threads = n_threads;
    r->reps = reps;
    r->model_bytes = llm_model_weight_bytes(m);
    r->n_params = llm_model_n_params(m);

    struct llm_context_params cp;
    llm_context_params_default(&cp);
    cp.n_ctx = (int32_t)need;
    cp.n_seq = 1;
    cp.n_threads = n_threads;
    cp.kv_type_k = r->kv_k;
    cp.kv_type_v = r->kv_v;
    struct llm_context *c = NULL;
    size_t n_tok = (size_t)reps * (size_t)t->n_gen;
    double *ttft = llm_malloc((size_t)reps * sizeof *ttft);
    double *ts = llm_malloc((size_t)reps * sizeof *ts);
    double *tok = llm_malloc((n_tok ? n_tok : 1) * sizeof *tok);
    r->samples_ns = llm_malloc((size_t)reps * sizeof *r->samples_ns);
    llm_status s = !ttft || !ts || !tok || !r->samples_ns ? LLM_E_NOMEM : LLM_OK;
    if (!s)
        s = llm_context_new(&c, m, &cp);
    if (!s)
        s = run_reps(r, c, cfg->n_vocab, t, reps, warmup, ttft, tok, ts);
    if (!s)
        s = llm_stats_compute(&r->ns, r->samples_ns, (size_t)reps);
    if (!s)
        s = llm_stats_compute(&r->ts, ts, (size_t)reps);
    if (!s && t->n_prompt)
        s = llm_stats_compute(&r->ttft_ms, ttft, (size_t)reps);
    if (!s && t->n_gen)
        s = llm_stats_compute(&r->token_ms, tok, n_tok);
    if (!s && t->n_gen && r->token_ms.mean > 0) {
        /* decode streams every weight once per token */
        r->gbs = (double)r->model_bytes / (r->token_ms.mean * 1e-3) * 1e-9;
        r->gbs_pct = llm_bench_share(r->gbs, r->roof_gbs);
    }
    if (!s && t->n_prompt && r->ttft_ms.mean > 0) {
        /* a matrix-vector product per weight and token: 2 flops per parameter
         * (attention scores and the embedding lookup are not counted) */
        r->gflops = 2.0 * (double)r->n_params * t->n_prompt / (r->ttft_ms.mean * 1e-3) * 1e-9;
        r->gflops_pct = llm_bench_share(r->gflops, r->roof_gflops);
    }
    if (s && s != LLM_E_NOMEM)
        llm_error_prefix(model);
    llm_context_free(c);
    llm_free(ttft);
    llm_free(ts);
    llm_free(tok);
    if (s)
        llm_bench_result_release(r);
    return s;
}

/* Whether most of the weight matrices' bytes are of the integer types
 * (their products run on the int16 dot product, not on FMAs). */
static int mostly_int(struct llm_model *m)
{
    const struct llm_file *f = llm_model_file(m);
    uint64_t ib = 0, all = 0;
    for (size_t i = 0; i < f->n_tensors; i++) {
        const struct llm_tensor *t = &f->tensors[i];
        if ((t->flags & LLM_TENSOR_AUX) || t->n_dims < 2)
            continue;
        all += t->nbytes;
        if (llm_matmul_simd_type(t->type) == LLM_SIMD_INT8)
            ib += t->nbytes;
    }
    return 2 * ib > all;
}

llm_status llm_bench_run_batch(struct llm_bench_result *r, struct llm_model *m, const char *model,
                               const struct llm_bench_test *t, int32_t n_seq, int n_threads,
                               int reps, int warmup)
{
    LLM_CHECK(reps >= 1 && warmup >= 0 && n_threads >= 1, LLM_E_INVALID,
              "bench: %d repetitions, %d warm-up runs, %d threads", reps, warmup, n_threads);
    LLM_CHECK(n_seq >= 1 && n_seq <= 4096, LLM_E_INVALID, "bench: a batch of %d sequences", n_seq);
    LLM_CHECK(t->n_prompt >= 1 && t->n_gen >= 0, LLM_E_INVALID,
              "bench: batched tests need a prompt (-p) of at least 1 token");
    const struct llm_config *cfg = llm_model_config(m);
    const int64_t ctx = (int64_t)t->n_prompt + t->n_gen, npp = (int64_t)n_seq * t->n_prompt;
    LLM_CHECK(ctx <= INT32_MAX / 2 && npp <= INT32_MAX, LLM_E_INVALID,
              "%s: a batch of %d x %lld tokens", model, n_seq, (long long)ctx);
    snprintf(r->model, sizeof r->model, "%s", model);
    snprintf(r->test, sizeof r->test, "b%d:pp%d+tg%d", n_seq, t->n_prompt, t->n_gen);
    kv_suffix(r);
    r->n_prompt = t->n_prompt;
    r->n_gen = t->n_gen;
    r->n_seq = n_seq;
    r->n_threads = n_threads;
    r->reps = reps;
    r->model_bytes = llm_model_weight_bytes(m);
    r->n_params = llm_model_n_params(m);
    r->int_weights = mostly_int(m);

    struct llm_context_params cp;
    llm_context_params_default(&cp);
    cp.n_ctx = (int32_t)ctx;
    cp.n_seq = n_seq;
    cp.n_threads = n_threads;
    cp.kv_type_k = r->kv_k;
    cp.kv_type_v = r->kv_v;
    struct llm_context *c = NULL;
    const size_t nmax = (size_t)(npp > n_seq ? npp : n_seq), n_steps = (size_t)reps * (size_t)t->n_gen;
    int32_t *tok = llm_malloc(3 * nmax * sizeof(int32_t)); /* tokens, positions, sequences */
    float *logits = llm_malloc((size_t)n_seq * (size_t)cfg->n_vocab * sizeof(float)); // (B, n_vocab)
    double *pp = llm_malloc((size_t)reps * sizeof *pp), *tg = llm_malloc((size_t)reps * sizeof *tg);
    double *ts = llm_malloc((size_t)reps * sizeof *ts);
    double *step = llm_malloc((n_steps ? n_steps : 1) * sizeof *step);
    r->samples_ns = llm_malloc((size_t)reps * sizeof *r->samples_ns);
    llm_status s = !tok || !logits || !pp || !tg || !ts || !step || !r->samples_ns ? LLM_E_NOMEM
                                                                                   : LLM_OK;
    if (!s)
        s = llm_context_new(&c, m, &cp);
    int32_t *pos = tok + nmax, *seq = pos + nmax;
    uint64_t seed = 1234;
    size_t k = 0;
    for (int rep = -warmup; rep < reps && !s; rep++) {
        for (int32_t i = 0; i < n_seq; i++)
            llm_context_reset(c, i);
        for (int64_t i = 0; i < npp; i++) {
            tok[i] = (int32_t)(next_rand(&seed) % (uint64_t)cfg->n_vocab);
            pos[i] = (int32_t)(i % t->n_prompt);
            seq[i] = (int32_t)(i / t->n_prompt);
        }
        struct llm_batch b = { .n = (int32_t)npp, .token = tok, .pos = pos, .seq = seq };
        uint64_t t0 = llm_time_ns();
        s = llm_decode_batch(c, &b, logits);
        uint64_t t1 = llm_time_ns();
        for (int32_t g = 0; g < t->n_gen && !s; g++) {
            for (int32_t i = 0; i < n_seq; i++) {
                tok[i] = (int32_t)(next_rand(&seed) % (uint64_t)cfg->n_vocab);
                pos[i] = t->n_prompt + g;
                seq[i] = i;
            }
            b.n = n_seq;
            uint64_t g0 = llm_time_ns();
            s = llm_decode_batch(c, &b, logits);
            if (rep >= 0)
                step[k++] = (double)(llm_time_ns() - g0) * 1e-6;
        }
        uint64_t t2 = llm_time_ns();
        if (rep < 0 || s)
            continue;
        pp[rep] = (double)(t1 - t0) * 1e-9;
        tg[rep] = (double)(t2 - t1) * 1e-9;
        r->samples_ns[rep] = (double)(t2 - t0);
        ts[rep] = (double)n_seq * (double)ctx / ((double)(t2 - t0 ? t2 - t0 : 1) * 1e-9);
    }
    if (!s) {
        struct llm_kv_stats st;
        uint64_t bb;
        llm_context_kv_stats(c, &st, &bb);
        /* blocks of the full layers, slots of the sliding-window ones */
        r->kv_bytes = (uint64_t)st.used * bb + (uint64_t)st.slots_used * st.slot_bytes;
    }
    if (!s)
        s = llm_stats_compute(&r->ns, r->samples_ns, (size_t)reps);
    if (!s)
        s = llm_stats_compute(&r->ts, ts, (size_t)reps);
    if (!s)
        s = llm_stats_compute(&r->pp_s, pp, (size_t)reps);
    if (!s)
        s = llm_stats_compute(&r->tg_s, tg, (size_t)reps);
    if (!s && t->n_gen)
        s = llm_stats_compute(&r->token_ms, step, n_steps);
    if (!s) {
        r->s_pp = r->pp_s.mean > 0 ? (double)npp / r->pp_s.mean : 0;
        r->s_tg = r->tg_s.mean > 0 ? (double)n_seq * t->n_gen / r->tg_s.mean : 0;
        r->s_all = r->pp_s.mean + r->tg_s.mean > 0
                       ? (double)n_seq * (double)ctx / (r->pp_s.mean + r->tg_s.mean) : 0;
        /* every token of a step meets every weight (2 operations a
         * parameter, the head included: each token's logits are computed) */
        r->tg_gops = 2.0 * (double)r->n_params * r->s_tg * 1e-9;
        const double peak = r->int_weights && r->roof_dot > 0 ? r->roof_dot : r->roof_gflops;
        r->tg_peak_pct = llm_bench_share(r->tg_gops, peak);
        if (t->n_gen && r->token_ms.mean > 0) {
            /* a step reads every weight once, for all B tokens */
            r->gbs = (double)r->model_bytes / (r->token_ms.mean * 1e-3) * 1e-9;
            r->gbs_pct = llm_bench_share(r->gbs, r->roof_gbs);
        }
        r->gflops = r->pp_s.mean > 0 ? 2.0 * (double)r->n_params * (double)npp / r->pp_s.mean * 1e-9 : 0;
        r->gflops_pct = llm_bench_share(r->gflops, r->roof_gflops);
    }
    if (s && s != LLM_E_NOMEM)
        llm_error_prefix(model);
    llm_context_free(c);
    llm_free(tok);
    llm_free(logits);
    llm_free(pp);
    llm_free(tg);
    llm_free(ts);
    llm_free(step);
    if (s)
        llm_bench_result_release(r);
    return s;
}

llm_status llm_bench_perplexity(struct llm_model *m, const char *path, int32_t n_ctx, int n_threads,
                                int64_t max_chunks, int score_all, enum llm_type kv_k,
                                enum llm_type kv_v,
                                double *ppl, double *stderr_, size_t *n_tokens)
{
    struct llm_tokenizer *tk = llm_model_tokenizer(m);
    LLM_CHECK(tk, LLM_E_INVALID, "the model has no tokenizer: perplexity needs one");
    char *text = NULL;
    size_t len;
    int32_t *ids = NULL;
    struct llm_context *c = NULL;
    LLM_TRY(llm_read_file(path, (size_t)1 << 30, &text, &len));
    llm_status s = llm_tokenize(tk, text, len, LLM_TOK_ADD_BOS, &ids, n_tokens);
    if (!s && max_chunks > 0 && (uint64_t)*n_tokens / (uint64_t)n_ctx > (uint64_t)max_chunks)
        *n_tokens = (size_t)max_chunks * (size_t)n_ctx;
    if (!s) {
        struct llm_context_params cp;
        llm_context_params_default(&cp);
        cp.n_ctx = n_ctx;
        cp.n_seq = 1;
        cp.n_threads = n_threads;
        cp.kv_type_k = kv_k;
        cp.kv_type_v = kv_v;
        s = llm_context_new(&c, m, &cp);
    }
    if (!s && (s = llm_perplexity(c, ids, *n_tokens, n_ctx, score_all, ppl, stderr_)))
        llm_error_prefix(path);
    llm_context_free(c);
    llm_free(ids);
    llm_free(text);
    return s;
}
