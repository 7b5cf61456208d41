/* test_stats.c: llm-bench statistics against hand-computed values and
 * numpy's percentile (linear interpolation) on the same samples. */
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "../../../lib/bench/bench.h"
#include "../helpers.h"

Test(stats, hand_computed)
{
    /* mean 5, sample variance 32/7 (sum of squared deviations 32) */
    const double x[] = { 7, 2, 4, 4, 5, 5, 9, 4 };
    struct llm_stats s;
    cr_assert_eq(llm_stats_compute(&s, x, 8), LLM_OK);
    cr_assert_eq(s.n, 8);
    cr_assert_float_eq(s.mean, 5.0, 1e-12);
    cr_assert_float_eq(s.sd, sqrt(32.0 / 7.0), 1e-12);
    cr_assert_float_eq(s.min, 2.0, 0);
    cr_assert_float_eq(s.max, 9.0, 0);
    /* sorted 2 4 4 4 5 5 7 9: median between 4 and 5 */
    cr_assert_float_eq(s.median, 4.5, 1e-12);
    cr_assert_float_eq(s.p50, 4.5, 1e-12);
    /* numpy.percentile(x, 90) = 7 + 0.3 * (9 - 7) = 7.6 (rank 6.3) */
    cr_assert_float_eq(s.p90, 7.6, 1e-12);
    /* rank 6.93: 7 + 0.93 * 2 = 8.86 */
    cr_assert_float_eq(s.p99, 8.86, 1e-12);
    /* the input is left as it was */
    cr_assert_float_eq(x[0], 7.0, 0);
}

Test(stats, edge_cases)
{
    struct llm_stats s;
    cr_assert_eq(llm_stats_compute(&s, NULL, 0), LLM_OK);
    cr_assert_eq(s.n, 0);
    cr_assert_float_eq(s.mean, 0.0, 0);
    const double one = 3.25;
    cr_assert_eq(llm_stats_compute(&s, &one, 1), LLM_OK);
    cr_assert_float_eq(s.mean, 3.25, 0);
    cr_assert_float_eq(s.sd, 0.0, 0);
    cr_assert_float_eq(s.p99, 3.25, 0);
    cr_assert_float_eq(s.median, 3.25, 0);
}

Test(stats, percentile_interpolation)
{
    double v[101];
    for (int i = 0; i <= 100; i++)
        v[i] = i * 10.0;
    cr_assert_float_eq(llm_percentile_sorted(v, 101, 0), 0.0, 0);
    cr_assert_float_eq(llm_percentile_sorted(v, 101, 100), 1000.0, 0);
    cr_assert_float_eq(llm_percentile_sorted(v, 101, 37), 370.0, 1e-9);
    cr_assert_float_eq(llm_percentile_sorted(v, 101, 37.5), 375.0, 1e-9);
    const double two[] = { 1, 3 };
    cr_assert_float_eq(llm_percentile_sorted(two, 2, 25), 1.5, 1e-12);
}

/* A large mean with a small spread: the naive sum-of-squares formula loses
 * every digit here, Welford keeps them. */
Test(stats, no_cancellation)
{
    const double x[] = { 1e9 + 4, 1e9 + 7, 1e9 + 13, 1e9 + 16 };
    struct llm_stats s;
    cr_assert_eq(llm_stats_compute(&s, x, 4), LLM_OK);
    cr_assert_float_eq(s.mean, 1e9 + 10, 1e-6);
    cr_assert_float_eq(s.sd, sqrt(90.0 / 3.0), 1e-6);
}

Test(stats, clock_is_monotonic_and_in_ns)
{
    uint64_t a = llm_time_ns();
    struct timespec d = { 0, 20 * 1000 * 1000 };
    nanosleep(&d, NULL);
    uint64_t b = llm_time_ns();
    cr_assert(b - a >= 20000000u && b - a < 2000000000u, "slept 20 ms, measured %llu ns",
              (unsigned long long)(b - a));
}
