/* test_vhess.c: v's Hessian sums (lib/quantize/vhess.h) against their
 * definition, sum over heads of Y_h^T Y_h with Y_h = P_h X (and GPTAQ's
 * sum (Y_fh - Y_h)^T Y_h), formed here in double from whole windows. The
 * window is cut into chunks as the calibration cuts it (len > nb, the last
 * chunk short) and the shapes cross the product blocks (keys and features
 * past LLM_Q_GRAM_BLOCK). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../../lib/common/alloc.h"
#include "../../../lib/ops/matmul.h"
#include "../../../lib/quantize/vhess.h"
#include "../helpers.h"

static uint64_t rng_state;

static double rng_u(void)
{
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(rng_state >> 11) / 9007199254740992.0;
}

/* plain Y = X W^T in double, rounded to float */
static llm_status mm_plain(void *ctx, const float *W, int64_t rows, int64_t cols, const float *X,
                           int32_t n, float *Y)
{
    (void)ctx;
    for (int32_t i = 0; i < n; i++)
        for (int64_t r = 0; r < rows; r++) {
            double a = 0.0;
            for (int64_t k = 0; k < cols; k++)
                a += (double)X[(int64_t)i * cols + k] * W[r * cols + k];
            Y[(int64_t)i * rows + r] = (float)a;
        }
    return LLM_OK;
}

/* the library's own product, as the calibration uses it */
static llm_status mm_lib(void *ctx, const float *W, int64_t rows, int64_t cols, const float *X,
                         int32_t n, float *Y)
{
    (void)ctx;
    return llm_matmul(LLM_TYPE_F32, W, X, Y, cols, n, rows, 0, rows);
}

/* Causal probabilities P (nh, len, len): row i a distribution over keys
 * 0..i, some rows peaked on key 0 (a sink), zero past i. */
static void make_probs(double *P, int64_t nh, int64_t len)
{
    for (int64_t h = 0; h < nh; h++)
        for (int64_t i = 0; i < len; i++) {
            double *p = P + (h * len + i) * len, sum = 0.0;
            for (int64_t j = 0; j < len; j++) {
                p[j] = j <= i ? rng_u() + (j == 0 ? 3.0 * (double)(h % 2) : 0.0) : 0.0;
                sum += p[j];
            }
            for (int64_t j = 0; j <= i; j++)
                p[j] /= sum;
        }
}

/* the threads' shares run one after the other: 3 of them, so that every
 * loop given to llm_qpar_fn is split into uneven parts */
static void par3(void *ctx, void (*fn)(int i, int n, void *arg), void *arg)
{
    (void)ctx;
    for (int i = 0; i < 3; i++)
        fn(i, 3, arg);
}

static void check(llm_qmm_fn mm, int64_t nh, int64_t nkv, int64_t len, int64_t nb, int64_t dim,
                  int cross, double tol)
{
    const int64_t hpg = nh / nkv;
    double *P = malloc(sizeof(double) * (size_t)(nh * len * len));
    double *Pf = malloc(sizeof(double) * (size_t)(nh * len * len));
    double *X = malloc(sizeof(double) * (size_t)(len * dim));
    double *Xf = malloc(sizeof(double) * (size_t)(len * dim));
    float *XT = malloc(sizeof(float) * (size_t)(dim * len));
    float *XfT = malloc(sizeof(float) * (size_t)(dim * len));
    float *probs[2] = { malloc(sizeof(float) * (size_t)(nh * nb * len)),
                        malloc(sizeof(float) * (size_t)(nh * nb * len)) };
    make_probs(P, nh, len);
    make_probs(Pf, nh, len);
    for (int64_t i = 0; i < len * dim; i++) {
        X[i] = (float)(2.0 * rng_u() - 1.0);
        Xf[i] = X[i] + (float)(0.1 * rng_u() - 0.05);
    }
    for (int64_t t = 0; t < len; t++)
        for (int64_t j = 0; j < dim; j++) {
            XT[j * len + t] = (float)X[t * dim + j];
            XfT[j * len + t] = (float)Xf[t * dim + j];
        }
    for (int64_t g = 0; g < nkv; g++) {
        double *sum = calloc((size_t)(dim * dim), sizeof(double));
        double *dsum = calloc((size_t)(dim * dim), sizeof(double));
        double *sum3 = calloc((size_t)(dim * dim), sizeof(double));
        double *dsum3 = calloc((size_t)(dim * dim), sizeof(double));
        /* serially, then with the loops split in 3 (par3): the same bits */
        for (int split = 0; split < 2; split++) {
            struct llm_vhess v;
            cr_assert(llm_vhess_init(&v, len, dim, hpg, nb, cross) == LLM_OK);
            v.par = split ? par3 : NULL;
            /* two windows: M and C must start again at zero after the first */
            for (int w = 0; w < 2; w++) {
                for (int64_t off = 0; off < len; off += nb) {
                    const int32_t n = (int32_t)(len - off < nb ? len - off : nb);
                    const int64_t pl = off + n;
                    for (int v2 = 0; v2 < 2; v2++)
                        for (int64_t h = 0; h < nh; h++)
                            for (int32_t i = 0; i < n; i++)
                                for (int64_t j = 0; j < pl; j++)
                                    probs[v2][(h * n + i) * pl + j] =
                                        (float)(v2 ? Pf : P)[(h * len + off + i) * len + j];
                    cr_assert(llm_vhess_add(&v, mm, NULL, probs, g * hpg, (int32_t)off, n) ==
                              LLM_OK);
                }
                cr_assert(llm_vhess_window(&v, mm, NULL, XT, XfT, split ? sum3 : sum,
                                           split ? dsum3 : dsum) == LLM_OK);
            }
            llm_vhess_free(&v);
        }
        cr_assert_eq(memcmp(sum, sum3, sizeof(double) * (size_t)(dim * dim)), 0);
        cr_assert_eq(memcmp(dsum, dsum3, sizeof(double) * (size_t)(dim * dim)), 0);
        free(sum3), free(dsum3);
        /* the definition, once, doubled for the two windows */
        double *Y = malloc(sizeof(double) * (size_t)(len * dim));
        double *Yf = malloc(sizeof(double) * (size_t)(len * dim));
        double *ref = calloc((size_t)(dim * dim), sizeof(double));
        double *dref = calloc((size_t)(dim * dim), sizeof(double));
        for (int64_t h = g * hpg; h < (g + 1) * hpg; h++) {
            for (int64_t i = 0; i < len; i++)
                for (int64_t a = 0; a < dim; a++) {
                    double y = 0.0, yf = 0.0;
                    for (int64_t j = 0; j < len; j++) {
                        y += P[(h * len + i) * len + j] * (float)X[j * dim + a];
                        yf += Pf[(h * len + i) * len + j] * (float)Xf[j * dim + a];
                    }
                    Y[i * dim + a] = y, Yf[i * dim + a] = yf;
                }
            for (int64_t i = 0; i < len; i++)
                for (int64_t a = 0; a < dim; a++)
                    for (int64_t b = 0; b < dim; b++) {
                        ref[a * dim + b] += 2.0 * Y[i * dim + a] * Y[i * dim + b];
                        dref[a * dim + b] +=
                            2.0 * (Yf[i * dim + a] - Y[i * dim + a]) * Y[i * dim + b];
                    }
        }
        double scale = 0.0, dscale = 0.0;
        for (int64_t i = 0; i < dim * dim; i++) {
            scale = fmax(scale, fabs(ref[i]));
            dscale = fmax(dscale, fabs(dref[i]));
        }
        for (int64_t a = 0; a < dim; a++)
            for (int64_t b = 0; b <= a; b++) /* the lower half is what is summed */
                cr_assert(fabs(sum[a * dim + b] - ref[a * dim + b]) <= tol * scale,
                          "group %lld H[%lld][%lld]: %g, definition %g", (long long)g,
                          (long long)a, (long long)b, sum[a * dim + b], ref[a * dim + b]);
        for (int64_t a = 0; cross && a < dim; a++)
            for (int64_t b = 0; b < dim; b++)
                cr_assert(fabs(dsum[a * dim + b] - dref[a * dim + b]) <= tol * dscale,
                          "group %lld D[%lld][%lld]: %g, definition %g", (long long)g,
                          (long long)a, (long long)b, dsum[a * dim + b], dref[a * dim + b]);
        free(Y), free(Yf), free(ref), free(dref), free(sum), free(dsum);
    }
    free(P), free(Pf), free(X), free(Xf), free(XT), free(XfT), free(probs[0]), free(probs[1]);
}

/* 6 heads on 2 KV heads, windows of 200 in chunks of 120 (120, 80), 100
 * features: key blocks start inside both chunks (only their later queries
 * reach them), the features span two product blocks */
Test(vhess, matches_the_definition)
{
    rng_state = 7;
    check(mm_plain, 6, 2, 200, 120, 100, 0, 1e-5);
}

Test(vhess, cross_term_matches_the_definition)
{
    rng_state = 8;
    check(mm_plain, 6, 2, 200, 120, 100, 1, 1e-5);
}

/* one window in one chunk, one head per group (no sharing), on the library's
 * SIMD product as the calibration runs it */
Test(vhess, library_product)
{
    rng_state = 9;
    check(mm_lib, 3, 3, 130, 130, 70, 1, 1e-4);
    check(mm_lib, 4, 1, 97, 40, 33, 0, 1e-4);
}
