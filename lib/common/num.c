/* num.c: a monotonic clock, an order of doubles, percentiles. */
#include "num.h"

#include <time.h>

double llm_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int llm_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double llm_percentile_sorted(const double *sorted, size_t n, double p)
{
    if (n == 1 || p <= 0)
        return sorted[0];
    if (p >= 100)
        return sorted[n - 1];
    double rank = p / 100.0 * (double)(n - 1);
    size_t lo = (size_t)rank;
    double frac = rank - (double)lo;
    if (lo + 1 >= n)
        return sorted[n - 1];
    return sorted[lo] + frac * (sorted[lo + 1] - sorted[lo]);
}
