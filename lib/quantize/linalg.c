/* linalg.c: Cholesky factor and triangular inverse for GPTQ (linalg.h).
 *
 * Both are organised so that the bulk of the work is dot products between
 * 4 "panel" rows, kept in cache, and 2 rows streamed past them, 8 running
 * sums at once: every value loaded serves 2 or 4 multiply-adds, and the
 * rows of the bulk are independent, so threads split them.
 *
 * The products are kern.h's (vector lanes in a fixed order), so the result
 * depends neither on the number of threads nor on the instruction set.
 */
#include "linalg.h"

#include <math.h>
#include <string.h>

#include "../common/alloc.h"
#include "kern.h"

static void run(struct llm_pool *pool, void (*fn)(int, int, void *), void *ctx)
{
    if (pool)
        llm_pool_run(pool, fn, ctx);
    else
        fn(0, 1, ctx);
}

// ----------------------------------------------------------------------------
// Cholesky, by panels of 4 columns: factor the panel's 4 x 4 diagonal block,
// then every row below it gets its 4 panel entries from dots of length j0
// with the 4 panel rows (left of the panel) and a short correction inside it.

#define CP 4

struct chol {
    const struct llm_qkern *K;
    double *a;
    int64_t n, lda, j0, nb;
};

static void chol_below(int ti, int nt, void *ctx)
{
    const struct chol *C = ctx;
    const int64_t lda = C->lda, j0 = C->j0, nb = C->nb, i0 = j0 + nb;
    /* pairs of rows, dealt round-robin so that threads share the cache lines of the panel */
    const int64_t npairs = (C->n - i0 + 1) / 2;
    const double *x[CP];
    for (int c = 0; c < CP; c++)
        x[c] = C->a + (j0 + (c < nb ? c : 0)) * lda;
    for (int64_t pr = ti; pr < npairs; pr += nt) {
        const int64_t i = i0 + 2 * pr;
        const int two = i + 1 < C->n;
        double *l0 = C->a + i * lda, *l1 = C->a + (i + two) * lda;
        double s[2][4];
        C->K->dot4x2(x, l0, l1, j0, s);
        for (int b = 0; b <= two; b++) {
            double *li = b ? l1 : l0;
            for (int64_t c = 0; c < nb; c++) {
                const double *lc = C->a + (j0 + c) * lda;
                double v = li[j0 + c] - s[b][c];
                for (int64_t k = j0; k < j0 + c; k++)
                    v -= li[k] * lc[k];
                li[j0 + c] = v / lc[j0 + c];
            }
        }
    }
}

int64_t llm_chol_lower(double *a, int64_t n, int64_t lda, struct llm_pool *pool)
{
    const struct llm_qkern *K = llm_qkern_get();
    for (int64_t j0 = 0; j0 < n; j0 += CP) {
        const int64_t nb = n - j0 < CP ? n - j0 : CP;
        for (int64_t i = j0; i < j0 + nb; i++) {
            double *li = a + i * lda;
            for (int64_t j = j0; j <= i; j++) {
                const double *lj = a + j * lda;
                const double s = li[j] - K->dot1(li, lj, j);
                if (j < i) {
                    li[j] = s / lj[j];
                } else {
                    if (!(s > 0.0) || !isfinite(s))
                        return i;
                    li[i] = sqrt(s);
                }
            }
        }
        if (j0 + nb < n) {
            struct chol C = { K, a, n, lda, j0, nb };
            /* a thread per 64 rows at most: small panels are not worth a wake-up */
            run((n - j0) * j0 < 65536 ? NULL : pool, chol_below, &C);
        }
    }
    return -1;
}

// ----------------------------------------------------------------------------
// T = (L^-1)^T. Row k of T satisfies T[k][k] = 1 / L[k][k] and, for m > k,
// T[k][m] = -dot(L[m][k:m], T[k][k:m]) / L[m][m]: it depends only on itself
// and on L. Four rows at a time, kept in scratch with zeros left of their
// diagonals so that they share one dot over L[m][k0:m]; two m at a time,
// the second corrected by the term of the first.

struct triinv {
    const struct llm_qkern *K;
    double *a, *diag, *scratch;
    int64_t n, lda;
};

static void tri_rows(int ti, int nt, void *ctx)
{
    const struct triinv *T = ctx;
    const int64_t n = T->n, lda = T->lda;
    double *t[4];
    for (int r = 0; r < 4; r++)
        t[r] = T->scratch + ((int64_t)ti * 4 + r) * n;
    const int64_t nblk = (n + 3) / 4;
    for (int64_t blk = ti; blk < nblk; blk += nt) {
        const int64_t k0 = blk * 4, nr = n - k0 < 4 ? n - k0 : 4;
        const double *x[4];
        for (int r = 0; r < 4; r++) {
            memset(t[r] + k0, 0, (size_t)(n - k0) * sizeof(double));
            x[r] = t[r] + k0;
        }
        for (int64_t m = k0; m < n; m += 2) {
            const int two = m + 1 < n;
            const double *l0 = T->a + m * lda, *l1 = T->a + (m + two) * lda;
            double s[2][4];
            T->K->dot4x2(x, l0 + k0, l1 + k0, m - k0, s);
            for (int r = 0; r < nr; r++) {
                const int64_t k = k0 + r;
                if (k == m)
                    t[r][m] = 1.0 / l0[m];
                else if (k < m)
                    t[r][m] = -s[0][r] / l0[m];
                if (!two)
                    continue;
                if (k == m + 1)
                    t[r][m + 1] = 1.0 / l1[m + 1];
                else if (k <= m)
                    t[r][m + 1] = -(s[1][r] + l1[m] * t[r][m]) / l1[m + 1];
            }
        }
        for (int r = 0; r < nr; r++) {
            const int64_t k = k0 + r;
            T->diag[k] = t[r][k];
            memcpy(T->a + k * lda + k + 1, t[r] + k + 1, (size_t)(n - k - 1) * sizeof(double));
        }
    }
}

llm_status llm_tri_inv_t(double *a, int64_t n, int64_t lda, double *diag, struct llm_pool *pool)
{
    const int nt = pool ? llm_pool_size(pool) : 1;
    double *scratch = llm_malloc((size_t)nt * 4 * (size_t)n * sizeof(double)); // (nt, 4, n)
    if (!scratch)
        return LLM_E_NOMEM;
    struct triinv T = { llm_qkern_get(), a, diag, scratch, n, lda };
    run(pool, tri_rows, &T);
    llm_free(scratch);
    return LLM_OK;
}
