/* test_matmul_amx.c: the bf16 product on the matrix units (matmul_amx.c).
 *
 * References: llm_matmul_bf16_ref (the same rounded operands, float sums in
 * k order) and a double product of the unrounded operands. Bounds, with
 * S = sum_k |w_k x_k|:
 *   AMX against the bf16 reference   |y - ref| <= 1e-5 S (float sums in
 *                                    another order: a few ulps of S)
 *   bf16 against the exact product   |y - exact| <= 2^-7 S (each operand
 *                                    within 2^-9 of itself, so each product
 *                                    within 2^-8, plus the sums)
 * Shapes cover the tails: tokens and rows not multiples of 16 or 32, K not
 * a multiple of 32, a row range that starts inside the matrix, ldy > rows.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "../../../lib/backend/backend.h"
#include "../../../lib/ops/matmul.h"
#include "../helpers.h"

static float frand(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((double)(*s >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

struct shape {
    int64_t ne0, nb, rows, r0, r1, ldy;
};

static const struct shape shapes[] = {
    { 64, 32, 32, 0, 32, 32 },       { 576, 512, 576, 0, 576, 576 },   { 576, 37, 100, 16, 83, 101 },
    { 172, 5, 64, 0, 64, 64 },       { 1536, 48, 288, 144, 288, 288 }, { 40, 1, 3, 0, 3, 3 },
    { 33, 17, 17, 1, 17, 20 },       { 512, 96, 1000, 500, 1000, 1000 },
};

static void check(const struct shape *sh, int exact_ref)
{
    uint64_t seed = 0x1234u + (uint64_t)sh->ne0 * 7 + (uint64_t)sh->nb;
    float *W = malloc((size_t)(sh->rows * sh->ne0) * sizeof(float));
    float *X = malloc((size_t)(sh->nb * sh->ne0) * sizeof(float));
    float *Y = malloc((size_t)(sh->nb * sh->ldy) * sizeof(float));
    float *R = malloc((size_t)(sh->nb * sh->ldy) * sizeof(float));
    cr_assert(W && X && Y && R);
    for (int64_t i = 0; i < sh->rows * sh->ne0; i++)
        W[i] = frand(&seed) * (i % 7 == 0 ? 4.0f : 0.5f);
    for (int64_t i = 0; i < sh->nb * sh->ne0; i++)
        X[i] = frand(&seed) * 3.0f;
    /* poison: rows outside [r0, r1) and the columns past rows must stay */
    for (int64_t i = 0; i < sh->nb * sh->ldy; i++)
        Y[i] = R[i] = -12345.0f;
    if (exact_ref)
        cr_assert_eq(llm_matmul_bf16_ref(W, X, Y, sh->ne0, sh->nb, sh->ldy, sh->r0, sh->r1), LLM_OK);
    else
        cr_assert_eq(llm_matmul_bf16(W, X, Y, sh->ne0, sh->nb, sh->ldy, sh->r0, sh->r1), LLM_OK);
    llm_matmul_bf16_ref(W, X, R, sh->ne0, sh->nb, sh->ldy, sh->r0, sh->r1);
    for (int64_t t = 0; t < sh->nb; t++)
        for (int64_t r = 0; r < sh->ldy; r++) {
            const float y = Y[t * sh->ldy + r];
            if (r < sh->r0 || r >= sh->r1) {
                cr_assert_eq(y, -12345.0f, "K=%lld token %lld row %lld outside [%lld, %lld) written",
                             (long long)sh->ne0, (long long)t, (long long)r, (long long)sh->r0,
                             (long long)sh->r1);
                continue;
            }
            double e = 0.0, S = 0.0;
            for (int64_t k = 0; k < sh->ne0; k++) {
                const double p = (double)W[r * sh->ne0 + k] * X[t * sh->ne0 + k];
                e += p;
                S += fabs(p);
            }
            const double ref = exact_ref ? e : R[t * sh->ldy + r];
            const double tol = exact_ref ? S / 128.0 : 1e-5 * S;
            cr_assert(fabs(y - ref) <= tol, "K=%lld token %lld row %lld: %.9g, reference %.9g (S %.4g)",
                      (long long)sh->ne0, (long long)t, (long long)r, y, ref, S);
        }
    free(W), free(X), free(Y), free(R);
}

Test(matmul_bf16, reference_within_bf16_of_exact)
{
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        check(&shapes[i], 1);
}

Test(matmul_bf16, amx_matches_reference)
{
    if (!llm_amx_ok()) {
        cr_skip_test("this CPU (or kernel) has no AMX-BF16");
        return;
    }
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        check(&shapes[i], 0);
}

/* A tail token must not see another token's padding: a 17-token product
 * equals the first 17 rows of a 32-token one (the same rows of X). */
Test(matmul_bf16, tokens_independent)
{
    if (!llm_amx_ok()) {
        cr_skip_test("this CPU (or kernel) has no AMX-BF16");
        return;
    }
    enum { K = 96, N = 32, R = 48 };
    static float W[R * K], X[N * K], Y1[N * R], Y2[N * R];
    uint64_t s = 99;
    for (int i = 0; i < R * K; i++)
        W[i] = frand(&s);
    for (int i = 0; i < N * K; i++)
        X[i] = frand(&s);
    cr_assert_eq(llm_matmul_bf16(W, X, Y1, K, N, R, 0, R), LLM_OK);
    cr_assert_eq(llm_matmul_bf16(W, X, Y2, K, 17, R, 0, R), LLM_OK);
    cr_assert_eq(memcmp(Y1, Y2, 17 * R * sizeof(float)), 0);
}

/* Through the CPU backend (2 threads): a lowp float weight runs the bf16
 * product (its result equals llm_matmul_bf16's, bit for bit, whatever the
 * threads' split), and the same weight without lowp, as inference gives
 * it, is the float product (llm_matmul's bits): rounding never reaches
 * inference. Two weights in one call share the rounded activations. */
Test(matmul_bf16, backend_lowp_only_where_asked)
{
    enum { K = 200, N = 40, R1 = 96, R2 = 48 };
    static float W1[R1 * K], W2[R2 * K], X[N * K];
    static float Y1[N * R1], Y2[N * R2], E1[N * R1], E2[N * R2];
    uint64_t s = 7;
    for (int i = 0; i < R1 * K; i++)
        W1[i] = frand(&s);
    for (int i = 0; i < R2 * K; i++)
        W2[i] = frand(&s);
    for (int i = 0; i < N * K; i++)
        X[i] = frand(&s) * 2.0f;
    struct llm_backend *b;
    cr_assert_eq(llm_backend_cpu_new(&b, 2, 0), LLM_OK);
    for (int lowp = 0; lowp < 2; lowp++) {
        struct llm_weight w1 = { .type = LLM_TYPE_F32, .data = W1, .ne0 = K, .rows = R1, .lowp = lowp };
        struct llm_weight w2 = { .type = LLM_TYPE_F32, .data = W2, .ne0 = K, .rows = R2, .lowp = lowp };
        const struct llm_weight *wp[2] = { &w1, &w2 };
        float *yp[2] = { Y1, Y2 };
        cr_assert_eq(b->ops->matmul(b, 2, wp, NULL, X, yp, N), LLM_OK);
        if (lowp && llm_amx_ok()) {
            cr_assert_eq(llm_matmul_bf16(W1, X, E1, K, N, R1, 0, R1), LLM_OK);
            cr_assert_eq(llm_matmul_bf16(W2, X, E2, K, N, R2, 0, R2), LLM_OK);
        } else {
            cr_assert_eq(llm_matmul(LLM_TYPE_F32, W1, X, E1, K, N, R1, 0, R1), LLM_OK);
            cr_assert_eq(llm_matmul(LLM_TYPE_F32, W2, X, E2, K, N, R2, 0, R2), LLM_OK);
        }
        cr_assert_eq(memcmp(Y1, E1, sizeof Y1), 0, "lowp %d", lowp);
        cr_assert_eq(memcmp(Y2, E2, sizeof Y2), 0, "lowp %d", lowp);
    }
    b->ops->destroy(b);
}
