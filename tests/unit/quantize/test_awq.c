/* test_awq.c: AWQ's numeric core (lib/quantize/awq.c).
 *
 *   folding        the model's products are unchanged: rmsnorm/layernorm
 *                  feeding scaled linears, silu(gate) * up feeding down,
 *                  and a fused weight whose last rows alone absorb 1/s
 *   fake_quant     equals codes -> llm_qgrid_pack_row -> llm_dequantize_row
 *   scale search   beats plain RTN on data with salient channels, reports
 *                  the loss a direct float64 recomputation gives, on both
 *                  the token path and the Gram path
 *   clip search    never increases the error, clamps to <= the original max
 *   reference      awq_ref.txt, written by gen_awq_ref.py (numpy), an
 *                  independent statement of the reference searches
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../../lib/quant/quant.h"
#include "../../../lib/quantize/awq.h"
#include "../../../lib/quant/grid.h"
#include "../helpers.h"

// ----------------------------------------------------------------------------
// splitmix64, as gen_awq_ref.py: unit() = top 24 bits / 2^24, normal() =
// Irwin-Hall(4), both exact in double so that the two agree bit for bit

static uint64_t rng_s;

static uint64_t rng_next(void)
{
    uint64_t z = (rng_s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static double rng_unit(void)
{
    return (double)(rng_next() >> 40) / 16777216.0;
}

static double rng_normal(void)
{
    double u1 = rng_unit(), u2 = rng_unit(), u3 = rng_unit(), u4 = rng_unit();
    return (u1 + u2 + u3 + u4 - 2.0) * 1.7320508075688772;
}

static float *fvec(int64_t n)
{
    float *p = calloc((size_t)n, sizeof(float));
    cr_assert_not_null(p);
    return p;
}

static float *fdup(const float *a, int64_t n)
{
    float *p = fvec(n);
    memcpy(p, a, (size_t)n * sizeof(float));
    return p;
}

/* Tokens (n, cols): N(0, 1) times a per-channel scale in [0.5, 1.5), times
 * `boost` on the salient channels (the outliers of real LLM activations). */
static float *make_tokens(int64_t n, int64_t cols, const int *salient, int n_sal, float boost)
{
    double *chan = calloc((size_t)cols, sizeof(double));
    float *X = fvec(n * cols);
    for (int64_t c = 0; c < cols; c++)
        chan[c] = 0.5 + rng_unit();
    for (int i = 0; i < n_sal; i++)
        chan[salient[i]] *= boost;
    for (int64_t t = 0; t < n; t++)
        for (int64_t c = 0; c < cols; c++)
            X[t * cols + c] = (float)(rng_normal() * chan[c]);
    free(chan);
    return X;
}

static float *make_weights(int64_t rows, int64_t cols, double sd)
{
    float *W = fvec(rows * cols);
    for (int64_t i = 0; i < rows * cols; i++)
        W[i] = (float)(sd * rng_normal());
    return W;
}

static float *x_mean_of(const float *X, int64_t n, int64_t cols)
{
    double *sum = calloc((size_t)cols, sizeof(double));
    float *m = fvec(cols);
    llm_awq_abs_sum_add(sum, X, n, cols);
    for (int64_t c = 0; c < cols; c++)
        m[c] = (float)(sum[c] / (double)n);
    free(sum);
    return m;
}

/* Y (n, rows) = X (n, cols) . W^T in double. */
static double *matmul_nt(const float *X, int64_t n, const float *W, int64_t rows, int64_t cols)
{
    double *Y = calloc((size_t)(n * rows), sizeof(double));
    cr_assert_not_null(Y);
    for (int64_t t = 0; t < n; t++)
        for (int64_t r = 0; r < rows; r++) {
            double a = 0.0;
            for (int64_t c = 0; c < cols; c++)
                a += (double)X[t * cols + c] * W[r * cols + c];
            Y[t * rows + r] = a;
        }
    return Y;
}

// ----------------------------------------------------------------------------
// folding

static void rmsnorm(const float *x, int64_t n, float *y)
{
    double ss = 0.0;
    for (int64_t i = 0; i < n; i++)
        ss += (double)x[i] * x[i];
    const double r = 1.0 / sqrt(ss / (double)n + 1e-5);
    for (int64_t i = 0; i < n; i++)
        y[i] = (float)(x[i] * r);
}

static double max_abs(const double *a, int64_t n)
{
    double m = 0.0;
    for (int64_t i = 0; i < n; i++)
        m = fmax(m, fabs(a[i]));
    return m;
}

static void assert_close(const double *a, const double *b, int64_t n, double rel, const char *what)
{
    const double tol = rel * max_abs(a, n);
    for (int64_t i = 0; i < n; i++)
        cr_assert(fabs(a[i] - b[i]) <= tol, "%s[%lld]: %.9g vs %.9g (tol %.3g)", what,
                  (long long)i, a[i], b[i], tol);
}

/* The norm (weight g, bias b or none) of each token times W^T, in double. */
static double *norm_linear(const float *x, int64_t n, int64_t cols, const float *g, const float *b,
                           const float *W, int64_t rows)
{
    float *h = fvec(n * cols);
    for (int64_t t = 0; t < n; t++) {
        rmsnorm(x + t * cols, cols, h + t * cols);
        for (int64_t c = 0; c < cols; c++)
            h[t * cols + c] = h[t * cols + c] * g[c] + (b ? b[c] : 0.0f);
    }
    double *y = matmul_nt(h, n, W, rows, cols);
    free(h);
    return y;
}

Test(test_awq, fold_norm_into_linears)
{
    rng_s = 11;
    const int64_t n = 8, cols = 64, rows = 40;
    float *x = make_tokens(n, cols, NULL, 0, 1.0f), *W = make_weights(rows, cols, 0.05);
    float *g = fvec(cols), *b = fvec(cols), *s = fvec(cols);
    for (int64_t c = 0; c < cols; c++) {
        g[c] = (float)(0.5 + rng_unit());
        b[c] = (float)(0.1 * rng_normal());
        s[c] = (float)exp(3.0 * (rng_unit() - 0.5)); /* 0.22 .. 4.5 */
    }
    for (int with_bias = 0; with_bias < 2; with_bias++) {
        const float *bb = with_bias ? b : NULL;
        double *want = norm_linear(x, n, cols, g, bb, W, rows);
        float *g2 = fdup(g, cols), *b2 = fdup(b, cols), *W2 = fdup(W, rows * cols);
        llm_awq_fold_norm(g2, with_bias ? b2 : NULL, s, cols);
        llm_awq_scale_cols(W2, rows, cols, s);
        for (int64_t c = 0; c < cols; c++) {
            cr_assert_float_eq(g2[c], g[c] / s[c], 0);
            cr_assert_float_eq(b2[c], with_bias ? b[c] / s[c] : b[c], 0);
        }
        double *got = norm_linear(x, n, cols, g2, with_bias ? b2 : NULL, W2, rows);
        assert_close(want, got, n * rows, 1e-5, with_bias ? "layernorm+bias" : "rmsnorm");
        free(want), free(got), free(g2), free(b2), free(W2);
    }
    free(x), free(W), free(g), free(b), free(s);
}

/* out (n, cols) = (silu(x gate^T) * (x up^T)) down^T, in double. */
static double *mlp(const float *x, int64_t n, int64_t cols, int64_t inter, const float *gate,
                   const float *up, const float *down)
{
    double *a = matmul_nt(x, n, gate, inter, cols), *u = matmul_nt(x, n, up, inter, cols);
    float *h = fvec(n * inter);
    for (int64_t i = 0; i < n * inter; i++)
        h[i] = (float)(a[i] / (1.0 + exp(-a[i])) * u[i]);
    double *y = matmul_nt(h, n, down, cols, inter);
    free(a), free(u), free(h);
    return y;
}

Test(test_awq, fold_up_into_down)
{
    rng_s = 12;
    const int64_t n = 6, cols = 48, inter = 96;
    float *x = make_tokens(n, cols, NULL, 0, 1.0f);
    float *gate = make_weights(inter, cols, 0.2), *up = make_weights(inter, cols, 0.2);
    float *down = make_weights(cols, inter, 0.1), *s = fvec(inter);
    for (int64_t i = 0; i < inter; i++)
        s[i] = (float)exp(3.0 * (rng_unit() - 0.5));
    double *want = mlp(x, n, cols, inter, gate, up, down);
    float *up2 = fdup(up, inter * cols), *down2 = fdup(down, cols * inter);
    cr_assert_eq(llm_awq_fold_rows(up2, inter, cols, NULL, s, inter), LLM_OK);
    llm_awq_scale_cols(down2, cols, inter, s);
    double *got = mlp(x, n, cols, inter, gate, up2, down2);
    assert_close(want, got, n * cols, 1e-5, "mlp");
    free(want), free(got), free(up2), free(down2);
    free(x), free(gate), free(up), free(down), free(s);
}

Test(test_awq, fold_rows_last_rows_and_bias)
{
    /* a fused (q; k; v) weight with bias: only v's rows (the last n_s) are divided */
    const int64_t rows = 10, cols = 3, n_s = 4;
    float W[30], b[10], W0[30], b0[10], s[4] = { 2.0f, 4.0f, 0.5f, 8.0f };
    for (int i = 0; i < 30; i++)
        W[i] = W0[i] = (float)(i + 1);
    for (int i = 0; i < 10; i++)
        b[i] = b0[i] = (float)(10 * i + 3);
    cr_assert_eq(llm_awq_fold_rows(W, rows, cols, b, s, n_s), LLM_OK);
    for (int64_t r = 0; r < rows; r++) {
        const float d = r < rows - n_s ? 1.0f : s[r - (rows - n_s)];
        for (int64_t c = 0; c < cols; c++)
            cr_assert_float_eq(W[r * cols + c], W0[r * cols + c] / d, 0);
        cr_assert_float_eq(b[r], b0[r] / d, 0);
    }
    cr_assert_eq(llm_awq_fold_rows(W, rows, cols, b, s, rows + 1), LLM_E_INVALID);
}

// ----------------------------------------------------------------------------
// fake_quant

/* The scale search's candidate rows on AVX-512 are the scalar steps' bits:
 * zero-point and symmetric grids, groups of 32 to whole rows, short last
 * groups and widths that are not multiples of 16, outliers, values that
 * round to the grid's ends, signed zeros, non-finite weights and scales,
 * and all-zero groups. */
Test(test_awq, candidate_rows_vector_bits_equal_scalar)
{
    static const enum llm_type types[] = {
        LLM_TYPE_Q4_1,    LLM_TYPE_Q4Z_G64, LLM_TYPE_Q4Z_G128, LLM_TYPE_Q4Z_CH, LLM_TYPE_Q4_0,
        LLM_TYPE_Q4_G128, LLM_TYPE_Q4_CH,   LLM_TYPE_Q8_0,     LLM_TYPE_Q8Z_G32, LLM_TYPE_Q3Z_G64,
    };
    static const int64_t lens[] = { 576, 200, 37, 1536, 64 };
    float w0[1] = { 1.0f }, d0[1];
    if (llm_awq_candidate_row(LLM_TYPE_Q4_1, w0, w0, d0, 1, 1) == LLM_E_UNSUPPORTED)
        cr_skip_test("no AVX-512 here: the vector rows are not built");
    rng_s = 29;
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++)
        for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++)
            for (int draw = 0; draw < 6; draw++) {
                const int64_t cols = lens[li];
                float *w = make_weights(1, cols, 0.05), *s = fvec(cols);
                float *a = fvec(cols), *b = fvec(cols);
                for (int64_t i = 0; i < cols; i++)
                    s[i] = (float)exp(2.0 * (rng_unit() - 0.5));
                for (int64_t i = 0; i < cols; i += 13)
                    w[i] *= 40.0f; /* outliers */
                if (draw == 1)
                    for (int64_t i = 0; i < cols; i += 5)
                        w[i] = i % 2 ? 0.0f : -0.0f;
                if (draw == 2) /* a group of zeros, of either sign */
                    for (int64_t i = 0; i < cols && i < 70; i++)
                        w[i] = i % 3 ? -0.0f : 0.0f;
                if (draw == 3) {
                    w[0] = INFINITY, w[cols / 2] = NAN, w[cols - 1] = -INFINITY;
                    s[cols / 3] = 0.0f;
                }
                if (draw == 4) /* every value one sign */
                    for (int64_t i = 0; i < cols; i++)
                        w[i] = fabsf(w[i]);
                if (draw == 5) /* huge scales: candidates past the float range */
                    for (int64_t i = 0; i < cols; i += 7)
                        s[i] = 1e30f;
                cr_assert_eq(llm_awq_candidate_row(types[ti], w, s, a, cols, 0), LLM_OK);
                cr_assert_eq(llm_awq_candidate_row(types[ti], w, s, b, cols, 1), LLM_OK);
                for (int64_t i = 0; i < cols; i++) {
                    uint32_t ua, ub;
                    memcpy(&ua, &a[i], 4), memcpy(&ub, &b[i], 4);
                    cr_assert(ua == ub || (isnan(a[i]) && isnan(b[i])),
                              "%s cols %lld draw %d [%lld]: scalar %a, vector %a",
                              llm_type_name(types[ti]), (long long)cols, draw, (long long)i,
                              (double)a[i], (double)b[i]);
                }
                free(w), free(s), free(a), free(b);
            }
}

Test(test_awq, fake_quant_equals_pack_dequantize)
{
    static const enum llm_type types[] = {
        LLM_TYPE_Q4_1,     LLM_TYPE_Q4Z_G64, LLM_TYPE_Q4Z_G128, LLM_TYPE_Q4Z_CH, LLM_TYPE_Q4_0,
        LLM_TYPE_Q4_G128,  LLM_TYPE_Q4_CH,   LLM_TYPE_Q8_0,     LLM_TYPE_Q8Z_G32, LLM_TYPE_Q8_CH,
    };
    static const int64_t lens[] = { 256, 200 }; /* 200: a short last group */
    rng_s = 13;
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++)
        for (size_t li = 0; li < 2; li++) {
            const enum llm_type t = types[ti];
            const int64_t rows = 5, cols = lens[li];
            struct llm_qgrid g;
            cr_assert_eq(llm_qgrid_of(t, &g), LLM_OK);
            float *W = make_weights(rows, cols, 0.05);
            for (int64_t i = 0; i < rows * cols; i += 37)
                W[i] *= 12.0f; /* outliers */
            float *F = fdup(W, rows * cols), *back = fvec(cols);
            cr_assert_eq(llm_awq_fake_quant(t, F, rows, cols), LLM_OK);
            const int64_t gl = g.group ? g.group : cols, ng = (cols + gl - 1) / gl;
            uint8_t *codes = malloc((size_t)cols), *packed = malloc(llm_type_row_bytes(t, cols));
            struct llm_qgroup *p = calloc((size_t)ng, sizeof *p);
            for (int64_t r = 0; r < rows; r++) {
                const float *w = W + r * cols;
                for (int64_t k = 0; k < ng; k++) {
                    const int64_t c0 = k * gl, len = cols - c0 < gl ? cols - c0 : gl;
                    llm_qgrid_group_awq(&g, w + c0, len, &p[k]);
                    for (int64_t i = 0; i < len; i++)
                        codes[c0 + i] = (uint8_t)llm_qgrid_code(&g, &p[k], w[c0 + i]);
                }
                cr_assert_eq(llm_qgrid_pack_row(&g, codes, p, cols, packed), LLM_OK);
                cr_assert_eq(llm_dequantize_row(t, packed, back, cols), LLM_OK);
                for (int64_t i = 0; i < cols; i++) {
                    cr_assert(F[r * cols + i] == back[i], "%s cols %lld [%lld,%lld]: %.9g vs %.9g",
                              llm_type_name(t), (long long)cols, (long long)r, (long long)i,
                              F[r * cols + i], back[i]);
                    /* within half a step of the weight, plus the binary16
                     * rounding of m, unless clamped at the grid's edge */
                    const struct llm_qgroup *pk = &p[i / gl];
                    const int q = codes[i];
                    if (q > 0 && q < g.maxq)
                        cr_assert(fabsf(back[i] - w[i]) <=
                                      0.505f * pk->d + 0x1p-11f * fabsf(pk->m) + 1e-6f * fabsf(w[i]),
                                  "%s: %g -> %g (d %g)", llm_type_name(t), w[i], back[i], pk->d);
                }
            }
            free(W), free(F), free(back), free(codes), free(packed), free(p);
        }
    float w[4] = { 1, 2, 3, 4 };
    cr_assert_eq(llm_awq_fake_quant(LLM_TYPE_NF4, w, 1, 4), LLM_E_INVALID);
    cr_assert_eq(llm_awq_fake_quant(LLM_TYPE_F16, w, 1, 4), LLM_E_INVALID);
}

// ----------------------------------------------------------------------------
// scale search

/* sum_j mean((X W_j^T - (X/s) Q(W_j s)^T)^2), the reference's formula, in
 * double on the C side's quantized values. */
static double direct_loss(enum llm_type t, const float *X, int64_t n, int64_t cols, int n_w,
                          const float *const *W, const int64_t *rows, const float *s)
{
    float *Xs = fdup(X, n * cols);
    for (int64_t i = 0; i < n * cols; i++)
        Xs[i] = X[i] / s[i % cols];
    double loss = 0.0;
    for (int j = 0; j < n_w; j++) {
        float *Q = fdup(W[j], rows[j] * cols);
        llm_awq_scale_cols(Q, rows[j], cols, s);
        cr_assert_eq(llm_awq_fake_quant(t, Q, rows[j], cols), LLM_OK);
        double *a = matmul_nt(X, n, W[j], rows[j], cols), *b = matmul_nt(Xs, n, Q, rows[j], cols);
        double e = 0.0;
        for (int64_t i = 0; i < n * rows[j]; i++)
            e += (a[i] - b[i]) * (a[i] - b[i]);
        loss += e / (double)(n * rows[j]);
        free(Q), free(a), free(b);
    }
    free(Xs);
    return loss;
}

static void check_search(enum llm_type t, int64_t n, int duo, int n_threads)
{
    static const int salient[] = { 5, 31, 77, 100 };
    const int64_t cols = 128, rows[2] = { 96, 32 };
    const int n_grid = 20;
    float *X = make_tokens(n, cols, salient, 4, 20.0f);
    const float *W[2] = { make_weights(rows[0], cols, 0.02), make_weights(rows[1], cols, 0.02) };
    float *x_mean = x_mean_of(X, n, cols), *s = fvec(cols);
    float *W0 = fdup(W[0], rows[0] * cols);
    double hist[20];
    struct llm_awq_scale_result r;
    cr_assert_eq(llm_awq_search_scale(t, X, n, cols, x_mean, 2, W, rows, n_grid, duo, s, &r, hist,
                                      n_threads),
                 LLM_OK, "%s", llm_error_detail(LLM_E_INVALID));
    cr_assert(memcmp(W0, W[0], (size_t)(rows[0] * cols) * sizeof(float)) == 0, "W modified");
    /* the salient channels must make scaling worth it */
    cr_assert(r.ratio > 0.0f && r.loss_best < 0.8 * r.loss_before,
              "%s n %lld duo %d: ratio %g, loss %g vs RTN %g", llm_type_name(t), (long long)n, duo,
              r.ratio, r.loss_best, r.loss_before);
    /* the reported losses are the direct ones */
    float *ones = fvec(cols);
    for (int64_t c = 0; c < cols; c++)
        ones[c] = 1.0f;
    const double lb = direct_loss(t, X, n, cols, 2, W, rows, ones);
    const double la = direct_loss(t, X, n, cols, 2, W, rows, s);
    cr_assert(fabs(lb - r.loss_before) <= 1e-4 * lb, "RTN loss %.9g, direct %.9g", r.loss_before,
              lb);
    cr_assert(fabs(la - r.loss_best) <= 1e-4 * la, "best loss %.9g, direct %.9g", r.loss_best, la);
    /* history: the chosen point is the first smallest */
    const int k = (int)lrintf(r.ratio * n_grid);
    cr_assert_float_eq(r.ratio, (float)k / n_grid, 1e-7);
    cr_assert(hist[k] == r.loss_best);
    for (int i = 0; i < n_grid; i++)
        cr_assert(i < k ? hist[i] > r.loss_best : hist[i] >= r.loss_best, "history[%d]", i);
    /* s: normalised (sqrt(max * min) = 1); without duo, x_mean^alpha up to that */
    float mx = 0.0f, mn = INFINITY;
    for (int64_t c = 0; c < cols; c++)
        mx = fmaxf(mx, s[c]), mn = fminf(mn, s[c]);
    cr_assert(fabs(sqrt((double)mx * mn) - 1.0) < 1e-5, "norm %g", sqrt((double)mx * mn));
    if (!duo)
        for (int64_t c = 1; c < cols; c++) {
            const double want = pow((double)x_mean[c] / x_mean[0], (double)k / n_grid);
            cr_assert(fabs(s[c] / s[0] - want) <= 1e-5 * want, "s[%lld]", (long long)c);
        }
    /* the Gram entry point, on G = X^T X, agrees */
    float *G = fvec(cols * cols), *s2 = fvec(cols);
    for (int64_t a = 0; a < cols; a++)
        for (int64_t b = 0; b < cols; b++) {
            double acc = 0.0;
            for (int64_t i = 0; i < n; i++)
                acc += (double)X[i * cols + a] * X[i * cols + b];
            G[a * cols + b] = (float)acc;
        }
    struct llm_awq_scale_result r2;
    cr_assert_eq(llm_awq_search_scale_gram(t, G, n, cols, x_mean, 2, W, rows, n_grid, duo, s2, &r2,
                                           NULL, 1),
                 LLM_OK);
    cr_assert_float_eq(r2.ratio, r.ratio, 0);
    cr_assert(fabs(r2.loss_best - r.loss_best) <= 1e-4 * r.loss_best);
    cr_assert(fabs(r2.loss_before - r.loss_before) <= 1e-4 * r.loss_before);
    free(X), free((void *)W[0]), free((void *)W[1]), free(x_mean), free(s), free(W0), free(ones);
    free(G), free(s2);
}

/* n 64 < cols takes the token path, n 512 the Gram path */
Test(test_awq, scale_search_beats_rtn_q4_1)
{
    rng_s = 21;
    check_search(LLM_TYPE_Q4_1, 64, 0, 1);
    check_search(LLM_TYPE_Q4_1, 512, 0, 2);
    check_search(LLM_TYPE_Q4_1, 512, 1, 2);
    check_search(LLM_TYPE_Q4_1, 64, 1, 3);
}

Test(test_awq, scale_search_beats_rtn_other_grids)
{
    rng_s = 22;
    check_search(LLM_TYPE_Q4_G128, 256, 0, 2);
    check_search(LLM_TYPE_Q4Z_G64, 256, 1, 2);
    check_search(LLM_TYPE_Q4_0, 100, 1, 1);
}

/* duo_scaling 2 searches both forms and keeps the lower loss: the winner's
 * scales and loss, on an integer grid and on a GGUF block type (q5_0, whose
 * quantizer is weighted by the inputs) */
Test(test_awq, scale_search_both_forms)
{
    static const int salient[] = { 3, 40, 90 };
    const int64_t cols = 128, rows[2] = { 64, 48 }, n = 256;
    static const enum llm_type types[] = { LLM_TYPE_Q4_1, LLM_TYPE_Q5_0 };
    rng_s = 23;
    float *X = make_tokens(n, cols, salient, 3, 12.0f);
    const float *W[2] = { make_weights(rows[0], cols, 0.02), make_weights(rows[1], cols, 0.02) };
    float *x_mean = x_mean_of(X, n, cols), *s[3] = { fvec(cols), fvec(cols), fvec(cols) };
    for (size_t t = 0; t < sizeof types / sizeof *types; t++) {
        struct llm_awq_scale_result r[3];
        for (int duo = 0; duo < 3; duo++)
            cr_assert_eq(llm_awq_search_scale(types[t], X, n, cols, x_mean, 2, W, rows, 20, duo,
                                              s[duo], &r[duo], NULL, 2),
                         LLM_OK, "%s", llm_error_detail(LLM_E_INVALID));
        const int win = r[1].loss_best <= r[0].loss_best ? 1 : 0;
        cr_assert_eq(r[2].duo, win, "%s: duo %d, want %d", llm_type_name(types[t]), r[2].duo, win);
        cr_assert(r[2].loss_best == r[win].loss_best && r[2].ratio == r[win].ratio,
                  "%s: loss %.9g ratio %g, want %.9g %g", llm_type_name(types[t]), r[2].loss_best,
                  r[2].ratio, r[win].loss_best, r[win].ratio);
        cr_assert(memcmp(s[2], s[win], (size_t)cols * sizeof(float)) == 0);
        cr_assert_eq(r[0].duo, 0);
        cr_assert_eq(r[1].duo, 1);
    }
    struct llm_awq_scale_result r;
    cr_assert_eq(llm_awq_search_scale(LLM_TYPE_Q4_1, X, n, cols, x_mean, 2, W, rows, 20, 3, s[0],
                                      &r, NULL, 1),
                 LLM_E_INVALID);
    free(X), free((void *)W[0]), free((void *)W[1]), free(x_mean);
    free(s[0]), free(s[1]), free(s[2]);
}

Test(test_awq, scale_search_rejects_bad_input)
{
    const int64_t rows[1] = { 2 };
    float X[8] = { 0 }, w[8] = { 0 }, xm[4] = { 1, 1, NAN, 1 }, s[4];
    const float *W[1] = { w };
    struct llm_awq_scale_result r;
    cr_assert_eq(llm_awq_search_scale(LLM_TYPE_Q4_1, X, 2, 4, xm, 1, W, rows, 20, 0, s, &r, NULL, 1),
                 LLM_E_INVALID);
    xm[2] = 1;
    cr_assert_eq(llm_awq_search_scale(LLM_TYPE_NF4, X, 2, 4, xm, 1, W, rows, 20, 0, s, &r, NULL, 1),
                 LLM_E_INVALID);
    cr_assert_eq(llm_awq_search_scale(LLM_TYPE_Q4_1, X, 2, 4, xm, 1, W, rows, 0, 0, s, &r, NULL, 1),
                 LLM_E_INVALID);
    cr_assert_eq(llm_awq_search_scale(LLM_TYPE_Q4_1, X, 0, 4, xm, 1, W, rows, 20, 0, s, &r, NULL, 1),
                 LLM_E_INVALID);
}

// ----------------------------------------------------------------------------
// clip search

/* mean over (row, group, token) of (x_g . (Q(w'_g) - w_g))^2 for the
 * weights Wc (rows, cols) against the originals W0. */
static double clip_err(enum llm_type t, const float *X, int64_t n, int64_t cols, const float *Wc,
                       const float *W0, int64_t rows, int64_t gl)
{
    float *Q = fdup(Wc, rows * cols);
    cr_assert_eq(llm_awq_fake_quant(t, Q, rows, cols), LLM_OK);
    const int64_t ng = (cols + gl - 1) / gl;
    double e = 0.0;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t k = 0; k < ng; k++)
            for (int64_t i = 0; i < n; i++) {
                double a = 0.0;
                for (int64_t c = k * gl; c < cols && c < (k + 1) * gl; c++)
                    a += (double)X[i * cols + c] * ((double)Q[r * cols + c] - W0[r * cols + c]);
                e += a * a;
            }
    free(Q);
    return e / (double)(rows * ng * n);
}

static void check_clip(enum llm_type t, int64_t rows, int64_t cols, int64_t n, int n_threads)
{
    struct llm_qgrid g;
    cr_assert_eq(llm_qgrid_of(t, &g), LLM_OK);
    const int64_t gl = g.group ? g.group : cols;
    float *X = make_tokens(n, cols, NULL, 0, 1.0f), *W = make_weights(rows, cols, 0.02);
    for (int64_t i = 0; i < rows * cols; i++)
        if (rng_next() % 41 == 0)
            W[i] *= 6.0f; /* heavy tails: clipping pays */
    float *W0 = fdup(W, rows * cols);
    double eb, ea;
    cr_assert_eq(llm_awq_search_clip(t, X, n, cols, W, rows, 20, 0.5f, &eb, &ea, n_threads), LLM_OK);
    /* clipping pays on heavy tails (less on whole-row grids) */
    cr_assert(ea < (g.group ? 0.95 : 1.0) * eb, "%s: err %g -> %g", llm_type_name(t), eb, ea);
    int clipped = 0;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c0 = 0; c0 < cols; c0 += gl) {
            const int64_t len = cols - c0 < gl ? cols - c0 : gl;
            const float *w0 = W0 + r * cols + c0, *w = W + r * cols + c0;
            float org = 0.0f, m = 0.0f;
            for (int64_t i = 0; i < len; i++)
                org = fmaxf(org, fabsf(w0[i])), m = fmaxf(m, fabsf(w[i]));
            cr_assert(m <= org);
            /* a clamp to +-m, m one of the candidates org * (1 - i/20) */
            int cand = -1;
            for (int i = 0; i < 10; i++)
                if (m == org * (float)(1.0 - i / 20.0))
                    cand = i;
            cr_assert(cand >= 0, "max %g is not a candidate of %g", m, org);
            clipped += cand > 0;
            for (int64_t i = 0; i < len; i++)
                cr_assert_float_eq(w[i], fminf(fmaxf(w0[i], -m), m), 0);
        }
    cr_assert(clipped > 0);
    const double db = clip_err(t, X, n, cols, W0, W0, rows, gl);
    const double da = clip_err(t, X, n, cols, W, W0, rows, gl);
    cr_assert(fabs(db - eb) <= 1e-4 * db, "before %.9g, direct %.9g", eb, db);
    cr_assert(fabs(da - ea) <= 1e-4 * da, "after %.9g, direct %.9g", ea, da);
    free(X), free(W), free(W0);
}

Test(test_awq, clip_search_never_worse)
{
    rng_s = 31;
    check_clip(LLM_TYPE_Q4_1, 40, 96, 128, 2);
    check_clip(LLM_TYPE_Q4_G128, 13, 200, 64, 1); /* a short last group */
    check_clip(LLM_TYPE_Q4_0, 7, 64, 33, 3);
    check_clip(LLM_TYPE_Q4Z_CH, 9, 48, 50, 2);
}

// ----------------------------------------------------------------------------
// reference case (gen_awq_ref.py)

static FILE *ref_open(void)
{
    char path[4096];
    const char *f = __FILE__, *slash = strrchr(f, '/');
    snprintf(path, sizeof path, "%.*sawq_ref.txt", slash ? (int)(slash - f + 1) : 0, f);
    FILE *fp = fopen(path, "r");
    cr_assert_not_null(fp, "%s is missing (run gen_awq_ref.py)", path);
    return fp;
}

/* The next line starting with key: its n numbers. */
static void ref_read(FILE *fp, const char *key, double *v, int n)
{
    char word[64];
    for (;;) {
        cr_assert_eq(fscanf(fp, "%63s", word), 1, "awq_ref.txt: no '%s'", key);
        if (word[0] == '#') {
            int ch;
            while ((ch = fgetc(fp)) != '\n' && ch != EOF) {
            }
            continue;
        }
        cr_assert_str_eq(word, key, "awq_ref.txt: '%s' where '%s' was expected", word, key);
        break;
    }
    for (int i = 0; i < n; i++)
        cr_assert_eq(fscanf(fp, "%lf", &v[i]), 1, "awq_ref.txt: %s[%d]", key, i);
}

Test(test_awq, reference_case)
{
    enum { COLS = 64, N = 96, R0 = 48, R1 = 16, GROUP = 32, NG = 20 };
    static const int salient[] = { 3, 17, 40 };
    /* the inputs, drawn in gen_awq_ref.py's order */
    rng_s = 20240601;
    float *X = make_tokens(N, COLS, salient, 3, 8.0f);
    const int64_t rows[2] = { R0, R1 };
    const float *W[2];
    W[0] = make_weights(R0, COLS, 0.02);
    W[1] = make_weights(R1, COLS, 0.02);
    float *x_mean = x_mean_of(X, N, COLS), s[COLS];
    FILE *fp = ref_open();
    double v[R0 * 2 + 4], want_s[COLS], lg[NG], lr[NG], hist[NG];
    ref_read(fp, "x_mean", v, COLS);
    for (int c = 0; c < COLS; c++)
        cr_assert_float_eq(x_mean[c], (float)v[c], 0, "x_mean[%d]: %.9g vs %.9g", c, x_mean[c],
                           v[c]);
    ref_read(fp, "w_mean", v, COLS);
    for (int duo = 0; duo < 2; duo++) {
        double d, kg, kr;
        ref_read(fp, "duo", &d, 1);
        cr_assert_eq((int)d, duo);
        ref_read(fp, "best_grid", &kg, 1);
        ref_read(fp, "best_ref", &kr, 1);
        ref_read(fp, "loss_grid", lg, NG);
        ref_read(fp, "loss_ref", lr, NG);
        ref_read(fp, "scale", want_s, COLS);
        struct llm_awq_scale_result r;
        cr_assert_eq(llm_awq_search_scale(LLM_TYPE_Q4_1, X, N, COLS, x_mean, 2, W, rows, NG, duo,
                                          s, &r, hist, 2),
                     LLM_OK);
        /* same choice as numpy on the same grid, and (on this case) as the
         * reference's unrounded quantizer */
        cr_assert_float_eq(r.ratio, (float)(kg / NG), 0, "duo %d: ratio %g, numpy %g", duo,
                           r.ratio, kg / NG);
        cr_assert_eq((int)kg, (int)kr);
        for (int c = 0; c < COLS; c++)
            cr_assert(fabs(s[c] - want_s[c]) <= 1e-6 * want_s[c], "duo %d s[%d]: %.9g vs %.9g",
                      duo, c, s[c], want_s[c]);
        for (int i = 0; i < NG; i++) {
            cr_assert(fabs(hist[i] - lg[i]) <= 1e-4 * lg[i], "duo %d loss[%d]: %.9g vs %.9g", duo,
                      i, hist[i], lg[i]);
            /* binary16 scales move the loss by well under 1 % */
            cr_assert(fabs(hist[i] - lr[i]) <= 0.01 * lr[i], "duo %d loss[%d]: %.9g vs ref %.9g",
                      duo, i, hist[i], lr[i]);
        }
        cr_assert(fabs(r.loss_best - lg[(int)kg]) <= 1e-4 * lg[(int)kg]);
    }
    /* clip search on the first weight, unscaled */
    float *Wc = fdup(W[0], R0 * COLS);
    double eb, ea, want_max[R0 * 2], err[2];
    cr_assert_eq(llm_awq_search_clip(LLM_TYPE_Q4_1, X, N, COLS, Wc, R0, 20, 0.5f, &eb, &ea, 2),
                 LLM_OK);
    ref_read(fp, "clip_max", want_max, R0 * 2);
    ref_read(fp, "clip_err", err, 2);
    int differ = 0;
    for (int r = 0; r < R0; r++)
        for (int k = 0; k < 2; k++) {
            float m = 0.0f;
            for (int i = 0; i < GROUP; i++)
                m = fmaxf(m, fabsf(Wc[r * COLS + k * GROUP + i]));
            differ += m != (float)want_max[r * 2 + k];
        }
    /* float32 against float64 sums may break a near tie; no more than one */
    cr_assert(differ <= 1, "%d of %d clip choices differ from numpy's", differ, R0 * 2);
    cr_assert(fabs(eb - err[0]) <= 1e-4 * err[0], "clip err before %.9g vs %.9g", eb, err[0]);
    cr_assert(fabs(ea - err[1]) <= (differ ? 1e-2 : 1e-4) * err[1], "clip err after %.9g vs %.9g",
              ea, err[1]);
    fclose(fp);
    free(X), free((void *)W[0]), free((void *)W[1]), free(x_mean), free(Wc);
}
