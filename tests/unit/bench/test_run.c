/* test_run.c: the pp / tg / pg runner and perplexity on stories260K. Speed
 * is never asserted: the tests check what is counted and how the figures
 * are derived from the samples. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "../../../lib/bench/bench.h"
#include "../../../lib/common/alloc.h"
#include "../../../lib/common/io.h"
#include "../../../lib/model/model.h"
#include "../helpers.h"

static void run(struct llm_bench_result *r, struct llm_model *m, int32_t pp, int32_t tg, int reps)
{
    memset(r, 0, sizeof *r);
    r->roof_gbs = 10;
    r->roof_gflops = 100;
    r->kv_k = r->kv_v = LLM_TYPE_F16;
    struct llm_bench_test t = { pp, tg };
    cr_assert_eq(llm_bench_run(r, m, "x/stories260K.gguf", &t, 1, reps, 1), LLM_OK, "%s", llm_error_detail(-1));
}

Test(run, pp_tg_pg)
{
    TEST_DATA(path, "gguf/stories260K.gguf");
    (void)path;
    struct llm_model *m = llm_test_model("gguf/stories260K.gguf", 1);
    struct llm_bench_result r;

    run(&r, m, 32, 0, 3);
    cr_assert_str_eq(r.test, "pp32");
    cr_assert_str_eq(r.model, "x/stories260K.gguf");
    cr_assert_eq(r.reps, 3);
    cr_assert_eq(r.ns.n, 3);
    cr_assert_eq(r.ttft_ms.n, 3);
    cr_assert_eq(r.token_ms.n, 0);
    cr_assert_eq(r.model_bytes, llm_model_weight_bytes(m));
    cr_assert_eq(r.n_params, llm_model_n_params(m));
    for (int i = 0; i < 3; i++) /* the prefill is inside each repetition's time */
        cr_assert(r.samples_ns[i] > 0);
    cr_assert(r.ttft_ms.max <= r.ns.max * 1e-6 + 1e-9);
    /* tokens/s of each repetition is 32 / its time */
    double ts_sum = 0;
    for (int i = 0; i < 3; i++)
        ts_sum += 32 / (r.samples_ns[i] * 1e-9);
    cr_assert_float_eq(r.ts.mean, ts_sum / 3, r.ts.mean * 1e-9);
    cr_assert_float_eq(r.gflops, 2.0 * (double)r.n_params * 32 / (r.ttft_ms.mean * 1e-3) * 1e-9, r.gflops * 1e-9);
    if (r.gflops <= 100) /* of 100 GFLOP/s */
        cr_assert_float_eq(r.gflops_pct, r.gflops, r.gflops * 1e-9);
    else
        cr_assert(isnan(r.gflops_pct));
    llm_bench_result_release(&r);

    /* a cache other than f16 names itself in the test */
    memset(&r, 0, sizeof r);
    r.kv_k = LLM_TYPE_F32, r.kv_v = LLM_TYPE_BF16;
    struct llm_bench_test t8 = { 0, 8 };
    cr_assert_eq(llm_bench_run(&r, m, "x", &t8, 1, 1, 0), LLM_OK, "%s", llm_error_detail(-1));
    cr_assert_str_eq(r.test, "tg8 kv=f32/bf16");
    llm_bench_result_release(&r);
    memset(&r, 0, sizeof r);
    r.kv_k = r.kv_v = LLM_TYPE_BF16;
    cr_assert_eq(llm_bench_run(&r, m, "x", &t8, 1, 1, 0), LLM_OK, "%s", llm_error_detail(-1));
    cr_assert_str_eq(r.test, "tg8 kv=bf16");
    llm_bench_result_release(&r);

    run(&r, m, 0, 8, 2);
    cr_assert_str_eq(r.test, "tg8");
    cr_assert_eq(r.token_ms.n, 16, "every generated token of every repetition");
    cr_assert_eq(r.ttft_ms.n, 0);
    cr_assert_float_eq(r.gbs, (double)r.model_bytes / (r.token_ms.mean * 1e-3) * 1e-9, r.gbs * 1e-9);
    /* of 10 GB/s; this tiny model's weights stay in cache and may read faster:
     * then the share is not a number (a run cannot go past its roofline) */
    if (r.gbs <= 10)
        cr_assert_float_eq(r.gbs_pct, r.gbs * 10, r.gbs * 1e-8);
    else
        cr_assert(isnan(r.gbs_pct));
    cr_assert(r.token_ms.p50 <= r.token_ms.p90 && r.token_ms.p90 <= r.token_ms.p99);
    llm_bench_result_release(&r);

    run(&r, m, 16, 4, 2);
    cr_assert_str_eq(r.test, "pp16+tg4");
    cr_assert_eq(r.token_ms.n, 8);
    cr_assert_eq(r.ttft_ms.n, 2);
    /* a repetition lasts at least its prefill plus its tokens */
    cr_assert(r.ns.min * 1e-6 >= r.ttft_ms.min + r.token_ms.min * 4 - 1e-6);
    llm_bench_result_release(&r);

    struct llm_bench_test bad = { 0, 0 };
    cr_assert_eq(llm_bench_run(&r, m, "x", &bad, 1, 1, 0), LLM_E_INVALID);
    llm_model_close(m);
}

static const char *head_of(const char *rel, size_t bytes)
{
    const char *src = llm_test_data(rel);
    if (!src)
        return NULL;
    char *text;
    size_t len;
    cr_assert_eq(llm_read_file(src, 1u << 24, &text, &len), LLM_OK);
    static char out[2][512];
    static int k;
    char *p = out[k++ & 1];
    snprintf(p, sizeof out[0], "%s/head.txt", llm_test_tmpdir());
    FILE *f = fopen(p, "w");
    fwrite(text, 1, len < bytes ? len : bytes, f);
    fclose(f);
    llm_free(text);
    return p;
}

/* stories260K was trained on TinyStories: in-domain text has a low
 * perplexity, Wikipedia a far higher one. */
Test(run, perplexity)
{
    TEST_DATA(ts, "text/tinystories_val.txt");
    TEST_DATA(wiki, "text/wiki.test.raw");
    TEST_DATA(path, "gguf/stories260K.gguf");
    (void)ts, (void)wiki, (void)path;
    struct llm_model *m = llm_test_model("gguf/stories260K.gguf", 1);
    double ppl, se, ppl_wiki, se_wiki;
    size_t n;
    cr_assert_eq(llm_bench_perplexity(m, head_of("text/tinystories_val.txt", 12000), 128, 1, 0, 0, LLM_TYPE_F32, LLM_TYPE_F32, &ppl, &se, &n),
                 LLM_OK, "%s", llm_error_detail(-1));
    cr_assert(n > 2000 && n < 12000, "%zu tokens", n);
    cr_assert(ppl > 1.5 && ppl < 12, "in-domain PPL %g", ppl);
    cr_assert(se > 0 && se < ppl / 5, "+/- %g", se);
    cr_assert_eq(llm_bench_perplexity(m, head_of("text/wiki.test.raw", 12000), 128, 1, 0, 0, LLM_TYPE_F32, LLM_TYPE_F32, &ppl_wiki, &se_wiki, &n),
                 LLM_OK);
    cr_assert(ppl_wiki > 2 * ppl, "wiki PPL %g vs stories %g", ppl_wiki, ppl);
    /* too short for two windows */
    llm_status s = llm_bench_perplexity(m, head_of("text/tinystories_val.txt", 200), 128, 1, 0, 0, LLM_TYPE_F32, LLM_TYPE_F32, &ppl, &se, &n);
    cr_assert_eq(s, LLM_E_INVALID);
    cr_assert(strstr(llm_error_detail(s), "head.txt"), "%s", llm_error_detail(s));
    cr_assert_eq(llm_bench_perplexity(m, "/nonexistent/t.txt", 128, 1, 0, 0, LLM_TYPE_F32, LLM_TYPE_F32, &ppl, &se, &n), LLM_E_IO);
    llm_model_close(m);
}

Test(run, share_of_a_roofline)
{
    cr_assert_float_eq(llm_bench_share(5, 10), 50.0, 1e-12);
    cr_assert_float_eq(llm_bench_share(10, 10), 100.0, 1e-12);
    cr_assert(isnan(llm_bench_share(10.5, 10)), "past the roofline: not a share");
    cr_assert(isnan(llm_bench_share(1, 0)), "no roofline");
}
