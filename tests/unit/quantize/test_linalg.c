/* test_linalg.c: the Cholesky factor and triangular inverse of
 * lib/quantize/linalg.c, checked against their defining identities
 * (L L^T = A, T^T L = I) and a factor computed by hand. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../../lib/quantize/linalg.h"
#include "../helpers.h"

static uint64_t rng_state;

static double rng_sym(void)
{
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(rng_state >> 11) / 4503599627370496.0 - 1.0;
}

Test(linalg, cholesky_by_hand)
{
    /* [[4, 2, -2], [2, 10, 2], [-2, 2, 6]] = L L^T with
     * L = [[2, 0, 0], [1, 3, 0], [-1, 1, 2]] */
    double a[9] = { 4, 99, 99, 2, 10, 99, -2, 2, 6 };
    cr_assert_eq(llm_chol_lower(a, 3, 3, NULL), -1);
    const double want[9] = { 2, 99, 99, 1, 3, 99, -1, 1, 2 };
    for (int i = 0; i < 9; i++)
        cr_expect_eq(a[i], want[i], "element %d: %g", i, a[i]);
    /* L^-1 = [[1/2, 0, 0], [-1/6, 1/3, 0], [1/3, -1/6, 1/2]]; T = (L^-1)^T */
    double diag[3];
    cr_assert_eq(llm_tri_inv_t(a, 3, 3, diag, NULL), LLM_OK);
    cr_expect_float_eq(diag[0], 0.5, 1e-15);
    cr_expect_float_eq(diag[1], 1.0 / 3.0, 1e-15);
    cr_expect_float_eq(diag[2], 0.5, 1e-15);
    cr_expect_float_eq(a[1], -1.0 / 6.0, 1e-15); /* T[0][1] = Linv[1][0] */
    cr_expect_float_eq(a[2], 1.0 / 3.0, 1e-15);  /* T[0][2] = Linv[2][0] */
    cr_expect_float_eq(a[5], -1.0 / 6.0, 1e-15); /* T[1][2] = Linv[2][1] */
    cr_expect_eq(a[3], 1.0);                     /* L untouched */
}

Test(linalg, not_positive_definite)
{
    double a[4] = { 1, 0, 2, 1 }; /* [[1, 2], [2, 1]]: eigenvalues 3, -1 */
    cr_expect_eq(llm_chol_lower(a, 2, 2, NULL), 1);
    double b[9] = { 1, 0, 0, 1, 1, 0, 1, 1, 1 }; /* all ones: rank 1, pivot 1 is exactly 0 */
    cr_expect_eq(llm_chol_lower(b, 3, 3, NULL), 1);
    double c[1] = { NAN };
    cr_expect_eq(llm_chol_lower(c, 1, 1, NULL), 0);
}

/* Sizes around the 4-row panels, with lda > n; the same bits with 3 threads. */
Test(linalg, identities_on_random_spd)
{
    static const int64_t sizes[] = { 1, 3, 4, 5, 9, 64, 131, 300 };
    struct llm_pool *pool;
    cr_assert_eq(llm_pool_new(&pool, 3), LLM_OK);
    rng_state = 3;
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
        const int64_t n = sizes[si], lda = n + 3;
        double *B = malloc((size_t)(n * n) * sizeof *B);
        double *A = malloc((size_t)(n * lda) * sizeof *A);
        double *a = malloc((size_t)(n * lda) * sizeof *a);
        double *diag = malloc((size_t)n * sizeof *diag);
        double *a2 = malloc((size_t)(n * lda) * sizeof *a2);
        double *diag2 = malloc((size_t)n * sizeof *diag2);
        cr_assert(B && A && a && diag && a2 && diag2);
        for (int64_t i = 0; i < n * n; i++)
            B[i] = rng_sym();
        for (int64_t i = 0; i < n; i++) /* A = B B^T + n I / 10 */
            for (int64_t j = 0; j < n; j++) {
                double s = i == j ? 0.1 * (double)n : 0.0;
                for (int64_t k = 0; k < n; k++)
                    s += B[i * n + k] * B[j * n + k];
                A[i * lda + j] = s;
            }
        memcpy(a, A, (size_t)(n * lda) * sizeof *a);
        memcpy(a2, A, (size_t)(n * lda) * sizeof *a);
        cr_assert_eq(llm_chol_lower(a, n, lda, NULL), -1, "n %lld", (long long)n);
        cr_assert_eq(llm_chol_lower(a2, n, lda, pool), -1, "n %lld", (long long)n);
        double scale = 0.0;
        for (int64_t i = 0; i < n; i++)
            scale = fmax(scale, A[i * lda + i]);
        for (int64_t i = 0; i < n; i++)
            for (int64_t j = 0; j <= i; j++) {
                double s = 0.0;
                for (int64_t k = 0; k <= j; k++)
                    s += a[i * lda + k] * a[j * lda + k];
                cr_assert_leq(fabs(s - A[i * lda + j]), 1e-12 * scale, "n %lld (%lld, %lld)",
                              (long long)n, (long long)i, (long long)j);
            }
        cr_assert_eq(llm_tri_inv_t(a, n, lda, diag, NULL), LLM_OK);
        cr_assert_eq(llm_tri_inv_t(a2, n, lda, diag2, pool), LLM_OK);
        for (int64_t i = 0; i < n; i++) {
            cr_assert_eq(memcmp(a + i * lda, a2 + i * lda, (size_t)n * sizeof *a), 0);
            cr_assert_eq(memcmp(&diag[i], &diag2[i], sizeof *diag), 0);
        }
        /* (L^-1 L)[i][j] = sum_k T[k][i] L[k][j] over j <= k <= i */
        for (int64_t i = 0; i < n; i++)
            for (int64_t j = 0; j <= i; j++) {
                double s = 0.0;
                for (int64_t k = j; k <= i; k++) {
                    double t = k == i ? diag[i] : a[k * lda + i];
                    s += t * a[k * lda + j];
                }
                cr_assert_leq(fabs(s - (i == j ? 1.0 : 0.0)), 1e-11, "n %lld (%lld, %lld) %g",
                              (long long)n, (long long)i, (long long)j, s);
            }
        free(B), free(A), free(a), free(diag), free(a2), free(diag2);
    }
    llm_pool_free(pool);
}
