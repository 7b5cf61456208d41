/* num.h: small numeric helpers the tools share: a monotonic clock, an
 * order for qsort and percentiles of sorted samples. */
#ifndef LLM_COMMON_NUM_H
#define LLM_COMMON_NUM_H

#include <stddef.h>

/* Seconds on a monotonic clock (for differences only). */
double llm_now_s(void);
/* qsort order of doubles, ascending. */
int llm_cmp_double(const void *a, const void *b);
/* The p-th percentile (0..100) of sorted (n > 0), interpolated linearly. */
double llm_percentile_sorted(const double *sorted, size_t n, double p);

#endif
