/* test_kld.c: the KL divergence of llm-bench --base against closed forms
 * worked out by hand, and its summary statistics. */
#include <math.h>
#include <string.h>

#include "../../../lib/bench/bench.h"
#include "../helpers.h"

Test(kld, log_softmax)
{
    const float x[2] = { 0, logf(3) };
    double lp[2];
    llm_log_softmax(x, 2, lp);
    cr_assert_float_eq(lp[0], log(0.25), 1e-7);
    cr_assert_float_eq(lp[1], log(0.75), 1e-7);
    /* large logits must not overflow: softmax(1000, 1001) */
    const float big[2] = { 1000, 1001 };
    llm_log_softmax(big, 2, lp);
    cr_assert_float_eq(lp[1], -log1p(exp(-1.0)), 1e-9);
    cr_assert_float_eq(exp(lp[0]) + exp(lp[1]), 1.0, 1e-12);
}

Test(kld, identical_is_zero)
{
    const float x[5] = { 0.5f, -2, 3, 1, 0 };
    double p[5], q[5];
    llm_log_softmax(x, 5, p);
    llm_log_softmax(x, 5, q);
    cr_assert_eq(llm_kl_divergence(p, q, 5), 0.0);
}

Test(kld, two_tokens_closed_form)
{
    /* P = (1/4, 3/4), Q = (1/2, 1/2): 1/4 ln(1/2) + 3/4 ln(3/2) */
    double p[2] = { log(0.25), log(0.75) }, q[2] = { log(0.5), log(0.5) };
    cr_assert_float_eq(llm_kl_divergence(p, q, 2), 0.13081203594113697, 1e-12);
    /* the other way round: 1/2 ln 2 + 1/2 ln(2/3) = 0.143841... */
    cr_assert_float_eq(llm_kl_divergence(q, p, 2), 0.14384103622589045, 1e-12);
    /* a zero-probability token of P counts nothing: KL((1, 0) || (1/2, 1/2)) = ln 2 */
    double one[2] = { 0, -INFINITY };
    cr_assert_float_eq(llm_kl_divergence(one, q, 2), log(2), 1e-12);
    /* through logits: logits (0, ln 3) vs (0, 0) */
    const float a[2] = { 0, logf(3) }, b[2] = { 7, 7 };
    llm_log_softmax(a, 2, p);
    llm_log_softmax(b, 2, q);
    cr_assert_float_eq(llm_kl_divergence(p, q, 2), 0.13081203594113697, 1e-7);
}

Test(kld, argmax)
{
    const float x[5] = { 1, 3, 3, -1, 2 };
    cr_assert_eq(llm_argmax(x, 5), 1);
    cr_assert_eq(llm_argmax(x, 1), 0);
}

Test(kld, summary)
{
    const double kld[4] = { 0.4, 0.1, 0.3, 0.2 };
    const double ln2 = log(2);
    const double nb[4] = { ln2, ln2, ln2, ln2 }, nm[4] = { 1, 3, 1, 3 };
    const unsigned char agree[4] = { 1, 1, 0, 1 };
    struct llm_kld_summary s;
    cr_assert_eq(llm_kld_summarize(&s, kld, nb, nm, agree, 4), LLM_OK);
    cr_assert_eq(s.n, 4);
    cr_assert_float_eq(s.kld_mean, 0.25, 1e-12);
    /* sample sd sqrt(0.05 / 3), over sqrt(4) */
    cr_assert_float_eq(s.kld_stderr, sqrt(0.05 / 3) / 2, 1e-12);
    cr_assert_float_eq(s.kld_median, 0.25, 1e-12);
    /* rank 0.99 x 3 = 2.97 of 0.1 0.2 0.3 0.4 */
    cr_assert_float_eq(s.kld_p99, 0.397, 1e-12);
    cr_assert_float_eq(s.top1_pct, 75.0, 1e-12);
    cr_assert_float_eq(s.ppl_base, 2.0, 1e-12);
    cr_assert_float_eq(s.ppl_base_stderr, 0.0, 1e-9);
    /* mean NLL 2, variance 1: e^2 and e^2 sqrt(1/3) (llm_perplexity's rule) */
    cr_assert_float_eq(s.ppl_model, 7.38905609893065, 1e-9);
    cr_assert_float_eq(s.ppl_model_stderr, 4.266073527774856, 1e-9);
    cr_assert_eq(llm_kld_summarize(&s, kld, nb, nm, agree, 0), LLM_E_INVALID);
}
