/* bench_tokenize.c: tokenizer throughput on a text file.
 *
 *   bench-tokenize MODEL TEXT [RUNS]
 *
 * Opens MODEL (any format llm_import reads), tokenizes the whole of TEXT as
 * one string RUNS times (default 5, no BOS, no special-token parsing) and
 * prints the token count and the median throughput in MB/s (10^6 bytes per
 * second of wall time inside llm_tokenize; loading is not counted). */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "../../lib/llm.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    if (argc < 3 || argc > 4) {
        fprintf(stderr, "usage: bench-tokenize MODEL TEXT [RUNS]\n");
        return 2;
    }
    int runs = argc == 4 ? atoi(argv[3]) : 5;
    if (runs < 1 || runs > 1000) {
        fprintf(stderr, "bench-tokenize: RUNS must be 1..1000\n");
        return 2;
    }
    struct llm_file *f = NULL;
    struct llm_tokenizer *t = NULL;
    char *text = NULL;
    size_t len;
    llm_status s = llm_import(&f, argv[1], NULL);
    if (!s)
        s = llm_tokenizer_new(&t, f);
    if (!s)
        s = llm_read_file(argv[2], (size_t)1 << 31, &text, &len);
    if (s) {
        fprintf(stderr, "bench-tokenize: %s\n", llm_error_detail(s));
        return 1;
    }
    double *sec = malloc((size_t)runs * sizeof *sec);
    size_t n = 0;
    for (int r = 0; r < runs && !s; r++) {
        int32_t *ids;
        double t0 = now();
        s = llm_tokenize(t, text, len, 0, &ids, &n);
        sec[r] = now() - t0;
        if (!s)
            llm_free(ids);
    }
    if (s) {
        fprintf(stderr, "bench-tokenize: %s\n", llm_error_detail(s));
        return 1;
    }
    qsort(sec, (size_t)runs, sizeof *sec, cmp);
    double med = sec[runs / 2];
    printf("%s: %zu bytes -> %zu tokens, median of %d: %.3f s, %.2f MB/s\n", argv[1], len, n,
           runs, med, (double)len / med / 1e6);
    free(sec);
    llm_free(text);
    llm_tokenizer_free(t);
    llm_file_free(f);
    return 0;
}
