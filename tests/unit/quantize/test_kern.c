/* test_kern.c: GPTQ's inner loops (lib/quantize/kern.h): each instance
 * against plain loops in double, and the AVX2 instance against the generic
 * one bit for bit (the property that makes a quantization independent of
 * the machine). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../../lib/quantize/kern.h"
#include "../helpers.h"

static uint64_t rng_state;

static double rng_sym(void)
{
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(rng_state >> 11) / 4503599627370496.0 - 1.0;
}

static const struct llm_qkern *instances(int k)
{
#if defined(__x86_64__) || defined(__i386__)
    if (k == 1) {
        __builtin_cpu_init();
        return __builtin_cpu_supports("avx2") ? &llm_qkern_avx2 : NULL;
    }
#endif
    return k == 0 ? &llm_qkern_generic : NULL;
}

Test(kern, dispatch_names_an_instance)
{
    const struct llm_qkern *k = llm_qkern_get();
    cr_assert(k == &llm_qkern_generic || strcmp(k->name, "avx2") == 0);
}

Test(kern, dot_products)
{
    rng_state = 1;
    const int64_t N = 203;
    double *x = malloc(6 * N * sizeof *x);
    cr_assert(x);
    for (int64_t i = 0; i < 6 * N; i++)
        x[i] = rng_sym();
    const double *r[4] = { x, x + N, x + 2 * N, x + 3 * N };
    const double *y0 = x + 4 * N, *y1 = x + 5 * N;
    for (int64_t len = 0; len <= N; len += len < 9 ? 1 : 37) {
        double out[2][2][4], d1[2];
        int have[2] = { 0, 0 };
        for (int k = 0; k < 2; k++) {
            const struct llm_qkern *K = instances(k);
            if (!K)
                continue;
            have[k] = 1;
            K->dot4x2(r, y0, y1, len, out[k]);
            d1[k] = K->dot1(y0, y1, len);
            double s2 = 0;
            for (int v = 0; v < 4; v++) {
                double s0 = 0, s1 = 0;
                for (int64_t i = 0; i < len; i++)
                    s0 += r[v][i] * y0[i], s1 += r[v][i] * y1[i];
                cr_assert_float_eq(out[k][0][v], s0, 1e-13, "%s len %lld", K->name, (long long)len);
                cr_assert_float_eq(out[k][1][v], s1, 1e-13, "%s len %lld", K->name, (long long)len);
            }
            for (int64_t i = 0; i < len; i++)
                s2 += y0[i] * y1[i];
            cr_assert_float_eq(d1[k], s2, 1e-13, "%s len %lld", K->name, (long long)len);
        }
        if (have[0] && have[1]) {
            cr_assert_eq(memcmp(out[0], out[1], sizeof out[0]), 0, "len %lld", (long long)len);
            cr_assert_eq(memcmp(&d1[0], &d1[1], sizeof d1[0]), 0, "len %lld", (long long)len);
        }
    }
    free(x);
}

/* gemm_sub, axpy_sub and quad4 on odd shapes, against double loops, and
 * the two instances against each other. */
Test(kern, updates_and_quadratic_forms)
{
    rng_state = 2;
    const int64_t m = 7, n = 45, k = 13, ld = 50;
    float *A = malloc(m * ld * sizeof *A), *B = malloc(k * ld * sizeof *B);
    float *C0 = malloc(m * ld * sizeof *C0), *C[2] = { malloc(m * ld * sizeof(float)),
                                                       malloc(m * ld * sizeof(float)) };
    float *H = malloc(n * n * sizeof *H), *X = malloc(4 * n * sizeof *X);
    cr_assert(A && B && C0 && C[0] && C[1] && H && X);
    for (int64_t i = 0; i < m * ld; i++)
        A[i] = (float)rng_sym(), C0[i] = (float)rng_sym();
    for (int64_t i = 0; i < k * ld; i++)
        B[i] = (float)rng_sym();
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = i; j < n; j++)
            H[i * n + j] = H[j * n + i] = (float)rng_sym();
    for (int64_t i = 0; i < 4 * n; i++)
        X[i] = (float)rng_sym();
    const float *x[4] = { X, X + n, X + 2 * n, X + 3 * n };
    double q[2][4];
    float ya[2][45];
    int have[2] = { 0, 0 };
    for (int ki = 0; ki < 2; ki++) {
        const struct llm_qkern *K = instances(ki);
        if (!K)
            continue;
        have[ki] = 1;
        memcpy(C[ki], C0, m * ld * sizeof(float));
        K->gemm_sub(m, n, k, A, ld, B, ld, C[ki], ld);
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < ld; j++) {
                double want = C0[i * ld + j];
                if (j < n)
                    for (int64_t kk = 0; kk < k; kk++)
                        want -= (double)A[i * ld + kk] * B[kk * ld + j];
                cr_assert_float_eq(C[ki][i * ld + j], want, 1e-5, "%s (%lld, %lld)", K->name,
                                   (long long)i, (long long)j);
            }
        /* two blocks of rows, as the statistics use it */
        memset(q[ki], 0, sizeof q[ki]);
        K->quad4(H, n, 0, 20, x, q[ki]);
        K->quad4(H, n, 20, n, x, q[ki]);
        for (int v = 0; v < 4; v++) {
            double want = 0;
            for (int64_t i = 0; i < n; i++)
                for (int64_t j = 0; j < n; j++)
                    want += (double)x[v][i] * H[i * n + j] * x[v][j];
            cr_assert_float_eq(q[ki][v], want, 1e-4, "%s quad %d", K->name, v);
        }
        memcpy(ya[ki], X, sizeof ya[ki]);
        K->axpy_sub(ya[ki], X + n, 0.37f, 45);
        for (int j = 0; j < 45; j++)
            cr_assert_eq(ya[ki][j], X[j] - 0.37f * X[n + j]);
    }
    if (have[0] && have[1]) {
        cr_expect_eq(memcmp(C[0], C[1], m * ld * sizeof(float)), 0);
        cr_expect_eq(memcmp(q[0], q[1], sizeof q[0]), 0);
        cr_expect_eq(memcmp(ya[0], ya[1], sizeof ya[0]), 0);
    }
    free(A), free(B), free(C0), free(C[0]), free(C[1]), free(H), free(X);
}
