/* stats.c: the clock and summary statistics of llm-bench. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../common/alloc.h"
#include "bench.h"

uint64_t llm_time_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

llm_status llm_stats_compute(struct llm_stats *s, const double *x, size_t n)
{
    memset(s, 0, sizeof *s);
    if (n == 0)
        return LLM_OK;
    double *v = llm_malloc(n * sizeof *v);
    if (!v)
        return LLM_E_NOMEM;
    memcpy(v, x, n * sizeof *v);
    qsort(v, n, sizeof *v, llm_cmp_double);
    /* Welford: no catastrophic cancellation for samples with a large mean */
    double mean = 0, m2 = 0;
    for (size_t i = 0; i < n; i++) {
        double d = v[i] - mean;
        mean += d / (double)(i + 1);
        m2 += d * (v[i] - mean);
    }
    s->n = n;
    s->mean = mean;
    s->sd = n > 1 ? sqrt(m2 / (double)(n - 1)) : 0;
    s->min = v[0];
    s->max = v[n - 1];
    s->median = s->p50 = llm_percentile_sorted(v, n, 50);
    s->p90 = llm_percentile_sorted(v, n, 90);
    s->p99 = llm_percentile_sorted(v, n, 99);
    llm_free(v);
    return LLM_OK;
}

double llm_bench_share(double got, double roof)
{
    return roof > 0 && got <= roof ? 100 * got / roof : NAN;
}
