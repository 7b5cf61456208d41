/* Tests of the sampler chain against hand-computed distributions. */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "../../../lib/sample/sample.h"

static struct llm_sampler *mk(float temp, int top_k, float top_p, float min_p, uint64_t seed, int nv)
{
    struct llm_sampler_params p;
    llm_sampler_params_default(&p);
    p.temp = temp, p.top_k = top_k, p.top_p = top_p, p.min_p = min_p, p.seed = seed;
    struct llm_sampler *s;
    cr_assert_eq(llm_sampler_new(&s, &p, nv), LLM_OK);
    return s;
}

/* Frequencies of n draws from logits. */
static void histogram(struct llm_sampler *s, const float *logits, int nv, int n, double *freq)
{
    float buf[16];
    memset(freq, 0, sizeof(double) * (size_t)nv);
    for (int i = 0; i < n; i++) {
        memcpy(buf, logits, sizeof(float) * (size_t)nv);
        int32_t t = llm_sampler_sample(s, buf);
        cr_assert(t >= 0 && t < nv);
        freq[t] += 1.0 / n;
    }
}

Test(sample, greedy_is_argmax_lowest_id_on_ties)
{
    struct llm_sampler *s = mk(0, 40, 0.95f, 0.05f, 1, 6);
    float l[6] = { 0.5f, 2.0f, -1.0f, 2.0f, 1.9f, 0.0f };
    cr_assert_eq(llm_sampler_sample(s, l), 1);
    llm_sampler_free(s);
}

Test(sample, temperature_one_reproduces_softmax)
{
    /* p = (0.5, 0.3, 0.2): 200k draws, 3 sigma < 0.004 */
    float l[3] = { logf(0.5f), logf(0.3f), logf(0.2f) };
    struct llm_sampler *s = mk(1.0f, 0, 1.0f, 0.0f, 42, 3);
    double f[3];
    histogram(s, l, 3, 200000, f);
    cr_assert(fabs(f[0] - 0.5) < 0.005 && fabs(f[1] - 0.3) < 0.005 && fabs(f[2] - 0.2) < 0.005,
              "%g %g %g", f[0], f[1], f[2]);
    llm_sampler_free(s);
    /* temperature 0.5 squares the probabilities: (25, 9, 4)/38 */
    s = mk(0.5f, 0, 1.0f, 0.0f, 43, 3);
    histogram(s, l, 3, 200000, f);
    cr_assert(fabs(f[0] - 25.0 / 38) < 0.005 && fabs(f[2] - 4.0 / 38) < 0.005, "%g %g", f[0], f[2]);
    llm_sampler_free(s);
}

Test(sample, top_k_top_p_min_p_truncate)
{
    float l[4] = { logf(0.4f), logf(0.3f), logf(0.2f), logf(0.1f) };
    double f[4];
    struct llm_sampler *s = mk(1.0f, 2, 1.0f, 0.0f, 7, 4); /* top-k 2: 4/7, 3/7 */
    histogram(s, l, 4, 100000, f);
    cr_assert(f[2] == 0 && f[3] == 0 && fabs(f[0] - 4.0 / 7) < 0.006, "%g", f[0]);
    llm_sampler_free(s);
    s = mk(1.0f, 0, 0.75f, 0.0f, 7, 4); /* cumulative 0.4, 0.7, 0.9 >= 0.75: three kept */
    histogram(s, l, 4, 100000, f);
    cr_assert(f[3] == 0 && f[2] > 0.2 && fabs(f[2] - 2.0 / 9) < 0.006, "%g", f[2]);
    llm_sampler_free(s);
    s = mk(1.0f, 0, 1.0f, 0.6f, 7, 4); /* min-p 0.6 x 0.4 = 0.24: two kept */
    histogram(s, l, 4, 100000, f);
    cr_assert(f[2] == 0 && f[3] == 0 && f[1] > 0.4);
    llm_sampler_free(s);
}

Test(sample, seeded_draws_repeat)
{
    float l[8] = { 0, 0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f, 0.7f }, b[8];
    int32_t x[64], y[64], z[64];
    struct llm_sampler *s1 = mk(1.0f, 0, 1.0f, 0.0f, 1234, 8), *s2 = mk(1.0f, 0, 1.0f, 0.0f, 1234, 8);
    struct llm_sampler *s3 = mk(1.0f, 0, 1.0f, 0.0f, 1235, 8);
    int same = 1;
    for (int i = 0; i < 64; i++) {
        memcpy(b, l, sizeof b), x[i] = llm_sampler_sample(s1, b);
        memcpy(b, l, sizeof b), y[i] = llm_sampler_sample(s2, b);
        memcpy(b, l, sizeof b), z[i] = llm_sampler_sample(s3, b);
        same &= x[i] == z[i];
    }
    cr_assert(memcmp(x, y, sizeof x) == 0);
    cr_assert(!same, "different seeds gave the same 64 draws");
    llm_sampler_reset(s1);
    memcpy(b, l, sizeof b);
    cr_assert_eq(llm_sampler_sample(s1, b), x[0]);
    llm_sampler_free(s1), llm_sampler_free(s2), llm_sampler_free(s3);
}

Test(sample, penalties_follow_llama_cpp)
{
    struct llm_sampler_params p;
    llm_sampler_params_default(&p);
    p.temp = 0, p.repeat_penalty = 2.0f, p.presence_penalty = 0.5f, p.frequency_penalty = 0.25f;
    p.penalty_last_n = 3;
    struct llm_sampler *s;
    cr_assert_eq(llm_sampler_new(&s, &p, 5), LLM_OK);
    llm_sampler_accept(s, 4); /* pushed out of the 3-token window */
    llm_sampler_accept(s, 1);
    llm_sampler_accept(s, 2);
    llm_sampler_accept(s, 1);
    float l[5] = { 1.0f, 3.0f, -1.0f, 0.0f, 2.0f };
    llm_sampler_sample(s, l);
    cr_assert_float_eq(l[0], 1.0f, 1e-6);
    cr_assert_float_eq(l[1], 3.0f / 2 - 2 * 0.25f - 0.5f, 1e-6);
    cr_assert_float_eq(l[2], -1.0f * 2 - 0.25f - 0.5f, 1e-6);
    cr_assert_float_eq(l[4], 2.0f, 1e-6);
    llm_sampler_free(s);
}

Test(sample, top_logprobs_sorted_log_softmax)
{
    float l[5] = { 1.0f, 3.0f, -1.0f, 2.5f, 0.0f };
    int32_t ids[8];
    float lp[8];
    cr_assert_eq(llm_top_logprobs(l, 5, 3, ids, lp), 3);
    cr_assert(ids[0] == 1 && ids[1] == 3 && ids[2] == 0);
    double z = exp(1) + exp(3) + exp(-1) + exp(2.5) + exp(0);
    cr_assert_float_eq(lp[0], 3 - log(z), 1e-5);
    cr_assert_float_eq(lp[2], 1 - log(z), 1e-5);
    cr_assert_float_eq(llm_logprob(l, 5, 2), -1 - log(z), 1e-5);
    cr_assert_eq(llm_top_logprobs(l, 5, 8, ids, lp), 5, "k clamps to the vocabulary");
    cr_assert(ids[4] == 2);
}

Test(sample, bad_parameters_refused)
{
    struct llm_sampler_params p;
    struct llm_sampler *s;
    llm_sampler_params_default(&p);
    p.top_p = 0;
    cr_assert_eq(llm_sampler_new(&s, &p, 10), LLM_E_INVALID);
    llm_sampler_params_default(&p);
    p.temp = -1;
    cr_assert_eq(llm_sampler_new(&s, &p, 10), LLM_E_INVALID);
}
