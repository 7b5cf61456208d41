/* test_gptq.c: GPTQ on one matrix (lib/quantize/gptq.c).
 *
 * The checks: GPTQ's output error ||X W^T - X Q^T||^2 against RTN on the
 * same grid for correlated inputs; the returned W against quant.c's
 * dequantization of the packed rows; the act-order permutation and its
 * per-group scales; dead input channels; rows not a multiple of the group;
 * the damping retry; and the codes and group parameters of an independent
 * numpy implementation of the reference algorithm (gen_gptq_ref.py, whose
 * output files gptq_ref_[abc].txt this test reads).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../../lib/common/fp16.h"
#include "../../../lib/quant/quant.h"
#include "../../../lib/quantize/gptq.h"
#include "../../../lib/quant/grid.h"
#include "../helpers.h"

static uint64_t rng_state;

static uint64_t rng_next(void)
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static double rng_unit(void)
{
    return ((double)(rng_next() >> 11) + 0.5) / 9007199254740992.0;
}

static float rng_gauss(void)
{
    return (float)(sqrt(-2.0 * log(rng_unit())) * cos(6.283185307179586 * rng_unit()));
}

static uint32_t bits_of(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

// ----------------------------------------------------------------------------
// problems

struct problem {
    int64_t rows, cols, tokens;
    float *W; /* (rows, cols) */
    float *X; /* (tokens, cols) */
    float *H; /* (cols, cols) = (2 / tokens) X^T X */
};

static void hessian(struct problem *pr)
{
    const int64_t n = pr->cols;
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < n; j++) {
            double s = 0.0;
            for (int64_t t = 0; t < pr->tokens; t++)
                s += (double)pr->X[t * n + i] * pr->X[t * n + j];
            pr->H[i * n + j] = (float)(2.0 * s / (double)pr->tokens);
        }
}

static void problem_alloc(struct problem *pr, int64_t rows, int64_t cols, int64_t tokens)
{
    pr->rows = rows, pr->cols = cols, pr->tokens = tokens;
    pr->W = malloc((size_t)(rows * cols) * sizeof(float));
    pr->X = malloc((size_t)(tokens * cols) * sizeof(float));
    pr->H = malloc((size_t)(cols * cols) * sizeof(float));
    cr_assert(pr->W && pr->X && pr->H);
}

/* X = Z A + noise with 16 latent factors: strongly correlated channels. */
static void problem_correlated(struct problem *pr, int64_t rows, int64_t cols, uint64_t seed)
{
    const int64_t T = 512, K = 16;
    rng_state = seed;
    problem_alloc(pr, rows, cols, T);
    float *A = malloc((size_t)(K * cols) * sizeof(float));
    cr_assert(A);
    for (int64_t i = 0; i < rows * cols; i++)
        pr->W[i] = 0.02f * rng_gauss();
    for (int64_t i = 0; i < K * cols; i++)
        A[i] = rng_gauss();
    for (int64_t t = 0; t < T; t++) {
        float z[16];
        for (int k = 0; k < K; k++)
            z[k] = rng_gauss();
        for (int64_t c = 0; c < cols; c++) {
            float v = 0.05f * rng_gauss();
            for (int k = 0; k < K; k++)
                v += z[k] * A[k * cols + c];
            pr->X[t * cols + c] = v;
        }
    }
    free(A);
    hessian(pr);
}

static void problem_free(struct problem *pr)
{
    free(pr->W), free(pr->X), free(pr->H);
}

/* sum over tokens of |Q x - W xf|^2: the error against the float model's
 * output when the quantized model's input is x (pr->X) and the float
 * model's xf (tokens, cols). */
static double float_target_err(const struct problem *pr, const float *xf, const float *Q)
{
    const int64_t n = pr->cols;
    double e = 0.0;
    for (int64_t r = 0; r < pr->rows; r++)
        for (int64_t t = 0; t < pr->tokens; t++) {
            double s = 0.0;
            for (int64_t c = 0; c < n; c++)
                s += (double)Q[r * n + c] * pr->X[t * n + c] -
                     (double)pr->W[r * n + c] * xf[t * n + c];
            e += s * s;
        }
    return e;
}

/* ||X D^T||^2 for D = W - Q (rows, cols). */
static double out_err(const struct problem *pr, const float *Q)
{
    return float_target_err(pr, pr->X, Q);
}

/* RTN on the grid: contiguous groups of the original W, nearest codes. */
static void rtn(enum llm_type t, const float *W, int64_t rows, int64_t cols, float *Q)
{
    struct llm_qgrid g;
    cr_assert_eq(llm_qgrid_of(t, &g), LLM_OK);
    const int64_t G = g.group ? g.group : cols;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c0 = 0; c0 < cols; c0 += G) {
            const int64_t len = cols - c0 < G ? cols - c0 : G;
            struct llm_qgroup p;
            llm_qgrid_group(&g, W + r * cols + c0, len, &p);
            for (int64_t j = 0; j < len; j++)
                Q[r * cols + c0 + j] =
                    llm_qgrid_value(&g, &p, llm_qgrid_code(&g, &p, W[r * cols + c0 + j]));
        }
}

struct result {
    float *Q;       /* (rows, cols) the returned W */
    uint8_t *out;   /* packed rows */
    int32_t *perm;  /* (cols) */
    uint64_t row_bytes;
    struct llm_gptq_stats st;
};

static llm_status run_gptq(const struct problem *pr, const struct llm_gptq_params *p,
                           struct result *res)
{
    const int64_t n = pr->cols;
    res->row_bytes = llm_type_row_bytes(p->type, (uint64_t)n);
    res->Q = malloc((size_t)(pr->rows * n) * sizeof(float));
    res->out = malloc((size_t)(pr->rows * res->row_bytes));
    res->perm = malloc((size_t)n * sizeof(int32_t));
    float *H = malloc((size_t)(n * n) * sizeof(float));
    cr_assert(res->Q && res->out && res->perm && H);
    memcpy(res->Q, pr->W, (size_t)(pr->rows * n) * sizeof(float));
    memcpy(H, pr->H, (size_t)(n * n) * sizeof(float));
    llm_status s = llm_gptq_quantize(p, res->Q, pr->rows, n, H, res->out, res->perm, &res->st);
    free(H);
    return s;
}

static void result_free(struct result *res)
{
    free(res->Q), free(res->out), free(res->perm);
}

/* (b): the returned W is what the file gives back, column perm[i] of the
 * original order being stored column i. */
static void check_dequant(const struct problem *pr, enum llm_type t, const struct result *res)
{
    const int64_t n = pr->cols;
    float *y = malloc((size_t)n * sizeof(float));
    cr_assert(y);
    for (int64_t i = 0; i < n; i++)
        cr_assert(res->perm[i] >= 0 && res->perm[i] < n);
    for (int64_t r = 0; r < pr->rows; r++) {
        cr_assert_eq(llm_dequantize_row(t, res->out + r * res->row_bytes, y, n), LLM_OK);
        for (int64_t i = 0; i < n; i++) {
            const float q = res->Q[r * n + res->perm[i]];
            cr_assert(isfinite(q));
            cr_assert_eq(bits_of(y[i]), bits_of(q), "%s row %lld stored col %lld: %g != %g",
                         llm_type_name(t), (long long)r, (long long)i, y[i], q);
        }
    }
    free(y);
}

static int is_identity(const int32_t *perm, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        if (perm[i] != i)
            return 0;
    return 1;
}

// ----------------------------------------------------------------------------
// (a), (b), (e): error against RTN and the packed bytes

static void check_beats_rtn(int64_t rows, int64_t cols)
{
    static const enum llm_type types[] = { LLM_TYPE_Q4Z_G128, LLM_TYPE_Q4_G128, LLM_TYPE_Q4Z_CH,
                                           LLM_TYPE_FP8_E4M3, LLM_TYPE_Q3Z_G128, LLM_TYPE_Q3Z_CH };
    struct problem pr;
    problem_correlated(&pr, rows, cols, 42);
    float *Qr = malloc((size_t)(rows * cols) * sizeof(float));
    cr_assert(Qr);
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        rtn(types[ti], pr.W, rows, cols, Qr);
        const double e_rtn = out_err(&pr, Qr);
        for (int mode = 0; mode < 4; mode++) {
            struct llm_gptq_params p;
            llm_gptq_params_init(&p, types[ti]);
            p.act_order = mode & 1;
            p.static_groups = (mode >> 1) & 1;
            struct result res;
            cr_assert_eq(run_gptq(&pr, &p, &res), LLM_OK, "%s", llm_error_detail(LLM_E_INVALID));
            const double e = out_err(&pr, res.Q);
            cr_expect_lt(e / e_rtn, 0.8, "%s cols %lld act_order %d static %d: gptq %g rtn %g",
                         llm_type_name(types[ti]), (long long)cols, p.act_order,
                         p.static_groups, e, e_rtn);
            /* the statistics are the same errors: tr(D H D^T) / rows */
            const double k = 2.0 / (double)pr.tokens / (double)rows;
            cr_expect_float_eq(res.st.err_rtn, e_rtn * k, 1e-3 * e_rtn * k);
            cr_expect_float_eq(res.st.err_gptq, e * k, 1e-3 * e * k);
            cr_expect_eq(res.st.damp_retries, 0);
            check_dequant(&pr, types[ti], &res);
            result_free(&res);
        }
    }
    free(Qr);
    problem_free(&pr);
}

Test(gptq, beats_rtn_on_correlated_inputs, .timeout = 120)
{
    check_beats_rtn(24, 256);
}


/* GPTAQ: when the input has drifted from the float model's (x = xf + an
 * error made upstream), fitting Q x to W xf leaves less error against the
 * float output than GPTQ's fit of Q x to W x, for both a per-row and a
 * grouped type, with and without act-order. */
Test(gptq, gptaq_lowers_the_error_against_the_float_output, .timeout = 120)
{
    struct problem pr;
    problem_correlated(&pr, 16, 128, 11);
    const int64_t n = pr.cols, T = pr.tokens;
    float *xf = malloc((size_t)(T * n) * sizeof(float));
    float *D = malloc((size_t)(n * n) * sizeof(float)); /* (2/T) (xf - x)^T x */
    cr_assert(xf && D);
    /* xf = x + a 10% distortion: a mix of neighbouring channels plus noise */
    for (int64_t t = 0; t < T; t++)
        for (int64_t c = 0; c < n; c++)
            xf[t * n + c] = pr.X[t * n + c] + 0.1f * pr.X[t * n + (c + 1) % n] +
                            0.02f * rng_gauss();
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < n; j++) {
            double s = 0.0;
            for (int64_t t = 0; t < T; t++)
                s += ((double)xf[t * n + i] - pr.X[t * n + i]) * pr.X[t * n + j];
            D[i * n + j] = (float)(2.0 * s / (double)T);
        }
    static const enum llm_type types[] = { LLM_TYPE_Q4Z_CH, LLM_TYPE_Q4Z_G64 };
    for (int k = 0; k < 2; k++)
        for (int ao = 0; ao < 2; ao++) {
            struct llm_gptq_params p;
            llm_gptq_params_init(&p, types[k]);
            p.act_order = ao;
            struct result plain, asym;
            cr_assert_eq(run_gptq(&pr, &p, &plain), LLM_OK);
            p.dxxt = D, p.alpha = 1.0f;
            cr_assert_eq(run_gptq(&pr, &p, &asym), LLM_OK);
            check_dequant(&pr, p.type, &asym);
            const double e0 = float_target_err(&pr, xf, plain.Q);
            const double e1 = float_target_err(&pr, xf, asym.Q);
            cr_expect_lt(e1, 0.5 * e0, "%s act-order %d: GPTAQ %g, GPTQ %g",
                         llm_type_name(types[k]), ao, e1, e0);
            result_free(&plain);
            result_free(&asym);
        }
    free(xf);
    free(D);
    problem_free(&pr);
}

Test(gptq, cols_not_a_multiple_of_the_group, .timeout = 120)
{
    check_beats_rtn(16, 172);
}

Test(gptq, threads_give_the_same_bits)
{
    struct problem pr;
    problem_correlated(&pr, 37, 200, 9);
    struct llm_gptq_params p;
    llm_gptq_params_init(&p, LLM_TYPE_Q4_1);
    p.act_order = 1;
    p.block_size = 64;
    struct result a, b;
    cr_assert_eq(run_gptq(&pr, &p, &a), LLM_OK);
    p.n_threads = 3;
    cr_assert_eq(run_gptq(&pr, &p, &b), LLM_OK);
    cr_expect_eq(memcmp(a.Q, b.Q, (size_t)(37 * 200) * sizeof(float)), 0);
    cr_expect_eq(memcmp(a.out, b.out, (size_t)(37 * a.row_bytes)), 0);
    cr_expect_eq(memcmp(a.perm, b.perm, 200 * sizeof(int32_t)), 0);
    cr_expect_eq(a.st.err_gptq, b.st.err_gptq);
    check_dequant(&pr, p.type, &a);
    result_free(&a), result_free(&b);
    problem_free(&pr);
}

/* With a diagonal H (uncorrelated inputs) no error propagates (U is
 * diagonal), so GPTQ is RTN on the same grid, bit for bit. */
Test(gptq, diagonal_hessian_is_rtn)
{
    static const enum llm_type types[] = { LLM_TYPE_Q4Z_G128, LLM_TYPE_Q4_0, LLM_TYPE_Q8Z_CH,
                                           LLM_TYPE_Q4_CH, LLM_TYPE_FP8_E4M3 };
    const int64_t rows = 9, cols = 300, n = cols;
    struct problem pr;
    problem_correlated(&pr, rows, cols, 8);
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < n; j++)
            pr.H[i * n + j] = i == j ? 0.5f + (float)(i % 7) : 0.0f;
    float *Qr = malloc((size_t)(rows * n) * sizeof(float));
    cr_assert(Qr);
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        rtn(types[ti], pr.W, rows, n, Qr);
        for (int sg = 0; sg < 2; sg++) {
            struct llm_gptq_params p;
            llm_gptq_params_init(&p, types[ti]);
            p.static_groups = sg;
            p.block_size = 64;
            struct result res;
            cr_assert_eq(run_gptq(&pr, &p, &res), LLM_OK);
            for (int64_t i = 0; i < rows * n; i++)
                cr_assert_eq(bits_of(res.Q[i]), bits_of(Qr[i]), "%s static %d element %lld",
                             llm_type_name(types[ti]), sg, (long long)i);
            cr_expect_eq(res.st.err_gptq, res.st.err_rtn);
            result_free(&res);
        }
    }
    free(Qr);
    problem_free(&pr);
}

/* FP8 with one scale per tensor (--fp8-scale tensor): every row header is
 * the given scale, the error is below round to nearest with that scale
 * (quant.c's row quantizer on the scaled row, an independent path), and a
 * fixed scale is refused for integer grids. */
Test(gptq, fp8_tensor_scale)
{
    const int64_t rows = 12, cols = 192;
    struct problem pr;
    problem_correlated(&pr, rows, cols, 5);
    float amax = 0.0f;
    for (int64_t i = 0; i < rows * cols; i++)
        amax = fmaxf(amax, fabsf(pr.W[i]));
    const float scale = amax / 448.0f;
    /* RTN with the tensor's scale: quantize the row divided by it, with its
     * own row scale 1 (a row whose absmax is 448 after division has r = 1) */
    float *Qr = malloc((size_t)(rows * cols) * sizeof(float));
    float *x = malloc((size_t)(cols + 1) * sizeof(float));
    uint8_t *buf = malloc((size_t)llm_type_row_bytes(LLM_TYPE_FP8_E4M3, (uint64_t)cols + 1));
    cr_assert(Qr && x && buf);
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t j = 0; j < cols; j++)
            x[j] = pr.W[r * cols + j] / scale;
        x[cols] = 448.0f; /* pins the row scale at 1 */
        cr_assert_eq(llm_quantize_row(LLM_TYPE_FP8_E4M3, x, buf, cols + 1), LLM_OK);
        cr_assert_eq(llm_dequantize_row(LLM_TYPE_FP8_E4M3, buf, x, cols + 1), LLM_OK);
        for (int64_t j = 0; j < cols; j++)
            Qr[r * cols + j] = x[j] * scale;
    }
    struct llm_gptq_params p;
    llm_gptq_params_init(&p, LLM_TYPE_FP8_E4M3);
    p.scale = scale;
    struct result res;
    cr_assert_eq(run_gptq(&pr, &p, &res), LLM_OK, "%s", llm_error_detail(LLM_E_INVALID));
    for (int64_t r = 0; r < rows; r++) {
        float hdr;
        memcpy(&hdr, res.out + r * res.row_bytes, sizeof hdr);
        cr_assert_eq(bits_of(hdr), bits_of(scale), "row %lld", (long long)r);
    }
    check_dequant(&pr, p.type, &res);
    const double e = out_err(&pr, res.Q), e_rtn = out_err(&pr, Qr);
    cr_expect_lt(e / e_rtn, 0.8, "gptq %g rtn %g", e, e_rtn);
    result_free(&res);

    llm_gptq_params_init(&p, LLM_TYPE_Q4Z_CH);
    p.scale = scale;
    cr_expect_eq(run_gptq(&pr, &p, &res), LLM_E_INVALID);
    result_free(&res);
    free(Qr), free(x), free(buf);
    problem_free(&pr);
}

/* Degenerate shapes and batch sizes: one column, one row, batches of one
 * column, batches longer than the row. */
Test(gptq, small_shapes_and_batches)
{
    static const int64_t shapes[][2] = { { 1, 1 }, { 1, 2 }, { 3, 5 }, { 2, 33 }, { 5, 130 } };
    static const enum llm_type types[] = { LLM_TYPE_Q4_1, LLM_TYPE_Q8_CH, LLM_TYPE_Q4_G64,
                                           LLM_TYPE_Q8Z_G128 };
    static const int blocks[] = { 1, 7, 0, 1000 };
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        struct problem pr;
        problem_correlated(&pr, shapes[si][0], shapes[si][1], 100 + si);
        for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++)
            for (size_t bi = 0; bi < sizeof blocks / sizeof blocks[0]; bi++)
                for (int mode = 0; mode < 4; mode++) {
                    struct llm_gptq_params p;
                    llm_gptq_params_init(&p, types[ti]);
                    p.block_size = blocks[bi];
                    p.act_order = mode & 1;
                    p.static_groups = mode >> 1;
                    p.n_threads = 2;
                    struct result res;
                    cr_assert_eq(run_gptq(&pr, &p, &res), LLM_OK, "%s",
                                 llm_error_detail(LLM_E_INVALID));
                    check_dequant(&pr, types[ti], &res);
                    cr_expect(res.st.err_gptq >= 0.0 && isfinite(res.st.err_gptq));
                    result_free(&res);
                }
        problem_free(&pr);
    }
}

// ----------------------------------------------------------------------------
// (c): act-order

/* Even columns: inputs 10x larger and weights 1000x smaller than odd ones,
 * so that act-order puts all even columns first. */
static void problem_split(struct problem *pr, int64_t rows, int64_t cols)
{
    rng_state = 77;
    problem_alloc(pr, rows, cols, 256);
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++)
            pr->W[r * cols + c] = rng_gauss() * (c % 2 ? 1.0f : 0.001f);
    for (int64_t t = 0; t < pr->tokens; t++)
        for (int64_t c = 0; c < cols; c++)
            pr->X[t * cols + c] = rng_gauss() * (c % 2 ? 1.0f : 10.0f);
    hessian(pr);
}

Test(gptq, act_order_permutation_and_groups)
{
    const int64_t rows = 8, cols = 256, n = cols;
    struct problem pr;
    problem_split(&pr, rows, cols);
    struct llm_gptq_params p;
    llm_gptq_params_init(&p, LLM_TYPE_Q4Z_G128);
    p.act_order = 1;
    struct result res;
    cr_assert_eq(run_gptq(&pr, &p, &res), LLM_OK);
    /* the argsort of diag(H), descending, by selection here */
    char *used = calloc((size_t)n, 1);
    cr_assert(used);
    for (int64_t i = 0; i < n; i++) {
        int64_t best = -1;
        for (int64_t c = 0; c < n; c++)
            if (!used[c] && (best < 0 || pr.H[c * n + c] > pr.H[best * n + best]))
                best = c;
        used[best] = 1;
        cr_assert_eq(res.perm[i], best, "position %lld", (long long)i);
    }
    free(used);
    for (int64_t i = 0; i < n / 2; i++)
        cr_assert_eq(res.perm[i] % 2, 0);
    check_dequant(&pr, p.type, &res);
    /* each stored group has its own scale: the small-weight group a small one */
    struct llm_qgrid g;
    cr_assert_eq(llm_qgrid_of(p.type, &g), LLM_OK);
    for (int64_t r = 0; r < rows; r++) {
        uint8_t q[256];
        struct llm_qgroup gp[2];
        cr_assert_eq(llm_qgrid_unpack_row(&g, res.out + r * res.row_bytes, n, q, gp), LLM_OK);
        cr_expect_lt(gp[0].d, 0.01f, "row %lld: d %g", (long long)r, gp[0].d);
        cr_expect_gt(gp[1].d, 0.1f, "row %lld: d %g", (long long)r, gp[1].d);
    }
    result_free(&res);

    /* static groups: identity perm, groups of the original W in original order */
    p.static_groups = 1;
    cr_assert_eq(run_gptq(&pr, &p, &res), LLM_OK);
    cr_expect(is_identity(res.perm, n));
    check_dequant(&pr, p.type, &res);
    for (int64_t r = 0; r < rows; r++) {
        uint8_t q[256];
        struct llm_qgroup gp[2], want;
        cr_assert_eq(llm_qgrid_unpack_row(&g, res.out + r * res.row_bytes, n, q, gp), LLM_OK);
        for (int k = 0; k < 2; k++) {
            llm_qgrid_group(&g, pr.W + r * n + k * 128, 128, &want);
            cr_expect_eq(bits_of(gp[k].d), bits_of(want.d));
            cr_expect_eq(gp[k].zero, want.zero);
            cr_expect_gt(gp[k].d, 0.1f);
        }
    }
    result_free(&res);

    /* a given column order (row blocks with their own H sharing one
     * .perm): diag(H)'s own order gives the same bytes; another order is
     * followed; what is not a permutation is refused */
    p.static_groups = 0;
    int32_t *order = malloc((size_t)n * sizeof(int32_t));
    cr_assert(order);
    struct result r1, r2;
    cr_assert_eq(run_gptq(&pr, &p, &r1), LLM_OK);
    memcpy(order, r1.perm, (size_t)n * sizeof(int32_t));
    p.order = order;
    cr_assert_eq(run_gptq(&pr, &p, &r2), LLM_OK);
    cr_expect_eq(memcmp(r1.out, r2.out, (size_t)(rows * r1.row_bytes)), 0);
    cr_expect_eq(memcmp(r1.perm, r2.perm, (size_t)n * sizeof(int32_t)), 0);
    result_free(&r2);
    for (int64_t i = 0; i < n; i++) /* reversed: odd (large-weight) columns first */
        order[i] = (int32_t)(n - 1 - i);
    cr_assert_eq(run_gptq(&pr, &p, &r2), LLM_OK);
    for (int64_t i = 0; i < n; i++)
        cr_assert_eq(r2.perm[i], n - 1 - i);
    check_dequant(&pr, p.type, &r2);
    result_free(&r2);
    order[5] = order[6];
    cr_expect_eq(run_gptq(&pr, &p, &r2), LLM_E_INVALID);
    cr_expect(strstr(llm_error_detail(LLM_E_INVALID), "not a permutation"), "%s",
              llm_error_detail(LLM_E_INVALID));
    result_free(&r2);
    result_free(&r1);
    free(order);
    p.order = NULL;

    /* a per-channel type has one scale: stored in original order */
    llm_gptq_params_init(&p, LLM_TYPE_Q4Z_CH);
    p.act_order = 1;
    cr_assert_eq(run_gptq(&pr, &p, &res), LLM_OK);
    cr_expect(is_identity(res.perm, n));
    check_dequant(&pr, p.type, &res);
    result_free(&res);
    problem_free(&pr);
}

// ----------------------------------------------------------------------------
// (d): dead input channels

Test(gptq, dead_column_gives_zero)
{
    static const enum llm_type types[] = { LLM_TYPE_Q4Z_G128, LLM_TYPE_Q4_G128, LLM_TYPE_Q4Z_CH,
                                           LLM_TYPE_Q8_0 };
    const int64_t rows = 12, cols = 160, n = cols;
    struct problem pr;
    problem_correlated(&pr, rows, cols, 5);
    for (int64_t t = 0; t < pr.tokens; t++)
        pr.X[t * n + 7] = pr.X[t * n + 100] = 0.0f;
    hessian(&pr);
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++)
        for (int ao = 0; ao < 2; ao++) {
            struct llm_gptq_params p;
            llm_gptq_params_init(&p, types[ti]);
            p.act_order = ao;
            struct result res;
            cr_assert_eq(run_gptq(&pr, &p, &res), LLM_OK);
            struct llm_qgrid g;
            cr_assert_eq(llm_qgrid_of(types[ti], &g), LLM_OK);
            for (int64_t r = 0; r < rows; r++)
                for (int k = 0; k < 2; k++) {
                    const float w = res.Q[r * n + (k ? 100 : 7)];
                    /* exactly 0 on symmetric and float32 grids; within half an
                     * fp16 ulp of m (|m| < 2) where m = fp16(-d z) is rounded */
                    if (!g.zero_point || !g.group)
                        cr_expect_eq(w, 0.0f, "%s row %lld: %g", llm_type_name(types[ti]),
                                     (long long)r, w);
                    else
                        cr_expect_leq(fabsf(w), 0x1p-11f, "%s row %lld: %g",
                                      llm_type_name(types[ti]), (long long)r, w);
                }
            for (int64_t i = 0; i < rows * n; i++)
                cr_assert(isfinite(res.Q[i]));
            cr_expect(isfinite(res.st.err_gptq) && isfinite(res.st.err_rtn));
            check_dequant(&pr, types[ti], &res);
            result_free(&res);
        }
    problem_free(&pr);
}

// ----------------------------------------------------------------------------
// damping and bad input

Test(gptq, damp_retry_and_failure)
{
    struct problem pr;
    problem_alloc(&pr, 4, 8, 1);
    for (int64_t c = 0; c < 8; c++) /* H = (2 x x^T) of one token: rank 1, exact */
        pr.X[c] = (float)(c + 1);
    for (int64_t i = 0; i < 32; i++)
        pr.W[i] = (float)((i * 7) % 11) / 11.0f - 0.5f;
    hessian(&pr);
    struct llm_gptq_params p;
    llm_gptq_params_init(&p, LLM_TYPE_Q4Z_CH);
    p.damp = 0.0f;
    struct result res;
    cr_assert_eq(run_gptq(&pr, &p, &res), LLM_OK);
    cr_expect_eq(res.st.damp_retries, 1);
    cr_expect_float_eq(res.st.damp, 0.01, 1e-9);
    check_dequant(&pr, p.type, &res);
    result_free(&res);

    /* [[1, 2], [2, 1]] needs damp > 1: ten retries of 0.01 give up */
    float H[4] = { 1, 2, 2, 1 }, W[2] = { 0.5f, -0.25f };
    uint8_t out[64];
    int32_t perm[2];
    llm_gptq_params_init(&p, LLM_TYPE_Q8_CH);
    cr_expect_eq(llm_gptq_quantize(&p, W, 1, 2, H, out, perm, NULL), LLM_E_INVALID);
    cr_expect(strstr(llm_error_detail(LLM_E_INVALID), "not positive definite") != NULL,
              "%s", llm_error_detail(LLM_E_INVALID));
    problem_free(&pr);
}

Test(gptq, bad_arguments)
{
    float W[4] = { 1, 2, 3, 4 }, H[4] = { 1, 0, 0, 1 };
    uint8_t out[64];
    int32_t perm[2];
    struct llm_gptq_params p;
    llm_gptq_params_init(&p, LLM_TYPE_F16);
    cr_expect_eq(llm_gptq_quantize(&p, W, 2, 2, H, out, perm, NULL), LLM_E_INVALID);
    llm_gptq_params_init(&p, LLM_TYPE_Q8_CH);
    W[1] = NAN;
    cr_expect_eq(llm_gptq_quantize(&p, W, 2, 2, H, out, perm, NULL), LLM_E_INVALID);
    W[1] = 2;
    H[3] = -1;
    cr_expect_eq(llm_gptq_quantize(&p, W, 2, 2, H, out, perm, NULL), LLM_E_INVALID);
    H[3] = 1;
    p.damp = -0.5f;
    cr_expect_eq(llm_gptq_quantize(&p, W, 2, 2, H, out, perm, NULL), LLM_E_INVALID);
    p.damp = 0.01f;
    cr_expect_eq(llm_gptq_quantize(&p, W, 0, 2, H, out, perm, NULL), LLM_E_INVALID);
    /* GPTAQ: a negative or NaN weight, a non-finite cross term */
    float D[4] = { 0.1f, 0, 0, NAN };
    p.dxxt = D, p.alpha = -0.25f;
    cr_expect_eq(llm_gptq_quantize(&p, W, 2, 2, H, out, perm, NULL), LLM_E_INVALID);
    p.alpha = NAN;
    cr_expect_eq(llm_gptq_quantize(&p, W, 2, 2, H, out, perm, NULL), LLM_E_INVALID);
    p.alpha = 0.25f;
    cr_expect_eq(llm_gptq_quantize(&p, W, 2, 2, H, out, perm, NULL), LLM_E_INVALID);
    cr_expect(strstr(llm_error_detail(LLM_E_INVALID), "cross term"));
    D[3] = 0;
    cr_expect_eq(llm_gptq_quantize(&p, W, 2, 2, H, out, perm, NULL), LLM_OK);
}

// ----------------------------------------------------------------------------
// (f): the independent numpy reference

struct lcg {
    uint64_t s;
};

static int64_t lcg_next(struct lcg *g)
{
    g->s = g->s * 6364136223846793005ull + 1442695040888963407ull;
    return (int64_t)(g->s >> 33);
}

/* gen_gptq_ref.py's inputs: integers, so that W and H are exact; D (cols,
 * cols) receives its GPTAQ cross term (2/T) E^T X, exact too. */
static void problem_ref(struct problem *pr, float *D)
{
    const int64_t R = 8, C = 96, T = 256;
    problem_alloc(pr, R, C, T);
    struct lcg g = { 1 };
    for (int64_t i = 0; i < R * C; i++)
        pr->W[i] = (float)(lcg_next(&g) % 2001 - 1000) / 1024.0f;
    int64_t Z[256][4], A[4][96];
    for (int64_t t = 0; t < T; t++)
        for (int k = 0; k < 4; k++)
            Z[t][k] = lcg_next(&g) % 9 - 4;
    for (int k = 0; k < 4; k++)
        for (int64_t c = 0; c < C; c++)
            A[k][c] = lcg_next(&g) % 7 - 3;
    int64_t *X = malloc((size_t)(T * C) * sizeof *X);
    cr_assert(X);
    for (int64_t t = 0; t < T; t++)
        for (int64_t c = 0; c < C; c++) {
            int64_t v = lcg_next(&g) % 3 - 1;
            for (int k = 0; k < 4; k++)
                v += Z[t][k] * A[k][c];
            X[t * C + c] = c == 5 ? 0 : v;
            pr->X[t * C + c] = (float)X[t * C + c];
        }
    for (int64_t i = 0; i < C; i++)
        for (int64_t j = 0; j < C; j++) {
            int64_t s = 0;
            for (int64_t t = 0; t < T; t++)
                s += X[t * C + i] * X[t * C + j];
            pr->H[i * C + j] = (float)s * (2.0f / (float)T);
        }
    int64_t *E = malloc((size_t)(T * C) * sizeof *E); /* Xf - X */
    cr_assert(E);
    for (int64_t i = 0; i < T * C; i++)
        E[i] = lcg_next(&g) % 5 - 2;
    for (int64_t i = 0; i < C; i++)
        for (int64_t j = 0; j < C; j++) {
            int64_t s = 0;
            for (int64_t t = 0; t < T; t++)
                s += E[t * C + i] * X[t * C + j];
            D[i * C + j] = (float)s * (2.0f / (float)T);
        }
    free(E);
    free(X);
}

static int read_word(FILE *f, const char *want)
{
    char w[32];
    return fscanf(f, "%31s", w) == 1 && strcmp(w, want) == 0;
}

static void check_reference(const char *name, enum llm_type type)
{
    char path[256];
    snprintf(path, sizeof path, "tests/unit/quantize/gptq_ref_%s.txt", name);
    FILE *f = fopen(path, "r");
    cr_assert(f, "%s is missing (run from the repository root)", path);
    char line[512];
    long pos;
    do { /* skip the comment lines */
        pos = ftell(f);
        cr_assert(fgets(line, sizeof line, f));
    } while (line[0] == '#');
    fseek(f, pos, SEEK_SET);
    int bs, ao, sg;
    cr_assert(read_word(f, "params") && fscanf(f, "%d %d %d", &bs, &ao, &sg) == 3);
    char word[16];
    float alpha = 0.0f; /* GPTAQ's weight, when the case has a "gptaq" line */
    float mse = 0.0f;   /* the range search's norm, when it has an "mse" line */
    cr_assert(fscanf(f, "%15s", word) == 1);
    if (!strcmp(word, "gptaq"))
        cr_assert(fscanf(f, "%f", &alpha) == 1 && fscanf(f, "%15s", word) == 1);
    if (!strcmp(word, "mse"))
        cr_assert(fscanf(f, "%f", &mse) == 1 && fscanf(f, "%15s", word) == 1);
    cr_assert_str_eq(word, "perm");

    struct problem pr;
    float D[96 * 96];
    problem_ref(&pr, D);
    const int64_t n = pr.cols;
    struct llm_gptq_params p;
    llm_gptq_params_init(&p, type);
    p.block_size = bs, p.act_order = ao, p.static_groups = sg;
    p.dxxt = alpha > 0.0f ? D : NULL, p.alpha = alpha;
    p.mse = mse;
    struct result res;
    cr_assert_eq(run_gptq(&pr, &p, &res), LLM_OK);
    check_dequant(&pr, p.type, &res);

    for (int64_t i = 0; i < n; i++) {
        int v;
        cr_assert(fscanf(f, "%d", &v) == 1);
        cr_expect_eq(res.perm[i], v, "case %s perm[%lld]", name, (long long)i);
    }
    struct llm_qgrid g;
    cr_assert_eq(llm_qgrid_of(p.type, &g), LLM_OK);
    int diff_codes = 0, diff_groups = 0;
    for (int64_t r = 0; r < pr.rows; r++) {
        uint8_t q[96];
        struct llm_qgroup gp[3];
        cr_assert_eq(llm_qgrid_unpack_row(&g, res.out + r * res.row_bytes, n, q, gp), LLM_OK);
        cr_assert(read_word(f, "codes"));
        for (int64_t i = 0; i < n; i++) {
            int v;
            cr_assert(fscanf(f, "%d", &v) == 1);
            if (v != q[i]) {
                diff_codes++;
                cr_expect_leq(abs(v - q[i]), 1, "case %s row %lld col %lld: %d vs %d", name,
                              (long long)r, (long long)i, q[i], v);
            }
        }
        cr_assert(read_word(f, "groups"));
        for (int k = 0; k < 3; k++) {
            float d, m;
            int z;
            cr_assert(fscanf(f, "%f %f %d", &d, &m, &z) == 3);
            if (bits_of(d) != bits_of(gp[k].d) || bits_of(m) != bits_of(gp[k].m) ||
                z != gp[k].zero)
                diff_groups++;
        }
    }
    fclose(f);
    /* float32 sums in another order (numpy's BLAS, our tiles) and a factor
     * computed another way move values by ~1e-6 relative: a code flips only
     * on a near-tie, which then changes the error fed to later columns */
    cr_expect_leq(diff_codes, 3, "case %s: %d of 768 codes differ", name, diff_codes);
    cr_expect_leq(diff_groups, 1, "case %s: %d of 24 groups differ", name, diff_groups);
    result_free(&res);
    problem_free(&pr);
}

Test(gptq, matches_numpy_reference_plain)
{
    check_reference("a", LLM_TYPE_Q4_1);
}

Test(gptq, matches_numpy_reference_act_order)
{
    check_reference("b", LLM_TYPE_Q4_1);
}

Test(gptq, matches_numpy_reference_static_groups_block_48)
{
    check_reference("c", LLM_TYPE_Q4_1);
}

/* 3 bits (maxq 7), act-order with the permutation stored */
Test(gptq, matches_numpy_reference_3bit_act_order)
{
    check_reference("d", LLM_TYPE_Q3Z_G32);
}

/* GPTAQ, the float model's output as the target: alpha 1 with act-order in
 * one batch, and the reference's alpha 0.25 in batches of 32 (the lazy
 * update with the pre-rounding values, gen_gptq_ref.py) */
Test(gptq, matches_numpy_reference_gptaq_act_order)
{
    check_reference("e", LLM_TYPE_Q4_1);
}

Test(gptq, matches_numpy_reference_gptaq_block_32)
{
    check_reference("f", LLM_TYPE_Q4_1);
}

/* the Quantizer's mse search (norm 2.4) with act-order: every group's range
 * is searched on the error-updated weights */
Test(gptq, matches_numpy_reference_mse_act_order)
{
    check_reference("g", LLM_TYPE_Q4_1);
}
