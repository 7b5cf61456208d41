/* test_matmul.c: the products of lib/ops/matmul.c and its SIMD variants.
 *
 * Independent reference: llm_dequantize_row (lib/quant) and a double dot
 * product. Bounds, with w the dequantized row and
 * S = sum|w_i x_i| + max|w| sum|x_i|:
 *   _ref            |y - w.x| <= 2e-6 S  (one float rounding of each
 *                                         dequantized w_i, ~6e-8, plus the
 *                                         final float rounding)
 *   SIMD, float activations (f32/f16/bf16/nf4/fp8 always; the int8/int4
 *                   types with llm_matmul_set_act(LLM_ACT_F32))
 *                   |y - ref| <= 1e-5 S
 *   SIMD, int8 activations (llm_matmul_set_act(LLM_ACT_Q8); int8/int4 types)
 *                   |y - ref| <= A + 1e-5 S,
 *                   A = sum_b (max|x_b|/254) sum_{i in b}|w_i| * (1 + 1e-3)
 *                   and ||y - ref|| / ||ref|| < 1e-2 over 256 Gaussian rows
 *   SIMD, int16 activations (LLM_ACT_Q16, the default)
 *                   |y - ref| <= A / 258 + 1e-5 S, relative < 1e-4
 *   llm_matmul from LLM_MATMUL_GEMM_MIN_NB tokens on (the float GEMM), every
 *   type and activation setting but int8 (LLM_ACT_Q8 keeps the row kernels)
 *                   |y - ref| <= 1e-5 S
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../../lib/common/fp16.h"
#include "../../../lib/ops/matmul.h"
#include "../../../lib/ops/matmul_impl.h"
#include "../../../lib/quant/quant.h"
#include "../helpers.h"

static const enum llm_type weight_types[] = {
    LLM_TYPE_F32,      LLM_TYPE_F16,      LLM_TYPE_BF16,     LLM_TYPE_Q8_0,     LLM_TYPE_Q8_G64,
    LLM_TYPE_Q8_G128,  LLM_TYPE_Q8_CH,    LLM_TYPE_Q8Z_G32,  LLM_TYPE_Q8Z_G64,  LLM_TYPE_Q8Z_G128,
    LLM_TYPE_Q8Z_CH,   LLM_TYPE_Q4_0,     LLM_TYPE_Q4_G64,   LLM_TYPE_Q4_G128,  LLM_TYPE_Q4_CH,
    LLM_TYPE_Q4_1,     LLM_TYPE_Q4Z_G64,  LLM_TYPE_Q4Z_G128, LLM_TYPE_Q4Z_CH,   LLM_TYPE_NF4,
    LLM_TYPE_NF4_DQ,   LLM_TYPE_FP8_E4M3, LLM_TYPE_Q3Z_G32,  LLM_TYPE_Q3Z_G64,  LLM_TYPE_Q3Z_G128,
    LLM_TYPE_Q3Z_CH,
};
#define N_TYPES (sizeof weight_types / sizeof weight_types[0])

static const int64_t lengths[] = { 32, 64, 172, 576, 1000, 1536 };
#define N_LENGTHS (sizeof lengths / sizeof lengths[0])
static const int64_t row_counts[] = { 1, 7, 64 };
#define N_ROWS (sizeof row_counts / sizeof row_counts[0])

// ----------------------------------------------------------------------------
// random data

static uint64_t rng_state;

static uint64_t rng_next(void)
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static float rng_unit(void)
{
    return (float)((rng_next() >> 40) + 0.5) / 16777216.0f;
}

static float rng_gauss(void)
{
    return sqrtf(-2.0f * logf(rng_unit())) * cosf(6.2831853f * rng_unit());
}

/* A quantized matrix and its dequantized rows. */
struct mat {
    enum llm_type t;
    int64_t ne0, rows;
    uint64_t rb;
    uint8_t *w;   // (rows, rb)
    float *deq;   // (rows, ne0)
};

static void mat_make(struct mat *m, enum llm_type t, int64_t ne0, int64_t rows, float offset)
{
    m->t = t;
    m->ne0 = ne0;
    m->rows = rows;
    m->rb = llm_type_row_bytes(t, (uint64_t)ne0);
    cr_assert(m->rb > 0);
    m->w = malloc(m->rb * (uint64_t)rows);
    m->deq = malloc(sizeof(float) * (size_t)(ne0 * rows));
    float *src = malloc(sizeof(float) * (size_t)ne0);
    for (int64_t r = 0; r < rows; r++) {
        /* an offset per row so that the zero-point types have a real minimum */
        for (int64_t i = 0; i < ne0; i++)
            src[i] = rng_gauss() * 0.05f + offset * (float)(r % 3);
        cr_assert_eq(llm_quantize_row(t, src, m->w + m->rb * (uint64_t)r, ne0), LLM_OK);
        cr_assert_eq(llm_dequantize_row(t, m->w + m->rb * (uint64_t)r, m->deq + r * ne0, ne0),
                     LLM_OK);
    }
    free(src);
}

static void mat_free(struct mat *m)
{
    free(m->w);
    free(m->deq);
}

static float *vec_make(int64_t n, float scale)
{
    float *x = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++)
        x[i] = rng_gauss() * scale;
    return x;
}

/* S = sum|w x| + max|w| sum|x| for row r */
static double scale_of(const struct mat *m, int64_t r, const float *x)
{
    const float *w = m->deq + r * m->ne0;
    double s = 0, sx = 0, wmax = 0;
    for (int64_t i = 0; i < m->ne0; i++) {
        s += fabs((double)w[i] * x[i]);
        sx += fabs(x[i]);
        wmax = fmax(wmax, fabs(w[i]));
    }
    return s + wmax * sx;
}

static double dot_deq(const struct mat *m, int64_t r, const float *x)
{
    double s = 0;
    for (int64_t i = 0; i < m->ne0; i++)
        s += (double)m->deq[r * m->ne0 + i] * x[i];
    return s;
}

/* the int8 activation rounding bound of the quantized SIMD paths */
static double act_bound(const struct mat *m, int64_t r, const float *x)
{
    const float *w = m->deq + r * m->ne0;
    double b = 0;
    for (int64_t e0 = 0; e0 < m->ne0; e0 += 32) {
        double amax = 0, sw = 0;
        for (int64_t i = e0; i < e0 + 32 && i < m->ne0; i++) {
            amax = fmax(amax, fabs(x[i]));
            sw += fabs(w[i]);
        }
        b += amax / 254.0 * sw;
    }
    return b * (1 + 1e-3);
}

static int default_act = -1;

/* The variants this CPU runs; also remembers the default activations so
 * that restore_isa can put them back. */
static int n_isas(enum llm_isa *isas)
{
    if (default_act < 0) {
        default_act = llm_matmul_set_act(LLM_ACT_Q16);
        llm_matmul_set_act(default_act);
    }
    int n = 0;
    enum llm_isa best = llm_isa_detect();
    for (int i = LLM_ISA_AVX2; i <= (int)best; i++)
        isas[n++] = (enum llm_isa)i;
    return n;
}

static void restore_isa(void)
{
    llm_matmul_set_isa(LLM_ISA_AVX512);
    llm_matmul_set_invariant(1);
    if (default_act >= 0)
        llm_matmul_set_act(default_act);
}

// ----------------------------------------------------------------------------
// the reference against the dequantized rows

Test(matmul, ref_matches_dequantized_dot)
{
    rng_state = 1;
    for (size_t ti = 0; ti < N_TYPES; ti++)
        for (size_t li = 0; li < N_LENGTHS; li++)
            for (size_t ri = 0; ri < N_ROWS; ri++) {
                struct mat m;
                mat_make(&m, weight_types[ti], lengths[li], row_counts[ri], 0.1f);
                float *x = vec_make(m.ne0, 1.0f);
                float *y = malloc(sizeof(float) * (size_t)m.rows);
                cr_assert_eq(llm_matvec_ref(m.t, m.w, x, y, m.ne0, 0, m.rows), LLM_OK);
                for (int64_t r = 0; r < m.rows; r++) {
                    double want = dot_deq(&m, r, x), tol = 2e-6 * scale_of(&m, r, x);
                    cr_assert(fabs(y[r] - want) <= tol,
                              "%s ne0=%lld row %lld: ref %.9g, dequantized dot %.9g (tol %.3g)",
                              llm_type_name(m.t), (long long)m.ne0, (long long)r, y[r], want,
                              tol);
                }
                free(x);
                free(y);
                mat_free(&m);
            }
}

/* Hand-made blocks: values a reader can check on paper. */
Test(matmul, ref_known_values)
{
    /* q4_1: d = 0.5, m = -1, codes 0..15 then 15..0 -> w_j = 0.5 c_j - 1 */
    uint8_t blk[20];
    uint16_t d = llm_fp32_to_fp16(0.5f), mn = llm_fp32_to_fp16(-1.0f);
    memcpy(blk, &d, 2);
    memcpy(blk + 2, &mn, 2);
    for (int j = 0; j < 16; j++)
        blk[4 + j] = (uint8_t)(j | ((15 - j) << 4));
    float x[32], y;
    double want = 0;
    for (int j = 0; j < 32; j++) {
        x[j] = (float)(j % 5) - 2.0f;
        int c = j < 16 ? j : 31 - j;
        want += (0.5 * c - 1.0) * x[j];
    }
    cr_assert_eq(llm_matvec_ref(LLM_TYPE_Q4_1, blk, x, &y, 32, 0, 1), LLM_OK);
    cr_assert_float_eq(y, want, 1e-6);
    cr_assert_eq(llm_matvec(LLM_TYPE_Q4_1, blk, x, &y, 32, 0, 1), LLM_OK);
    /* x is small integers: the int8 activations are exact (max|x_b| = 2,
     * codes q = x * 127/2 are not integers, so allow the stated bound) */
    cr_assert(fabs(y - want) <= 32 * 7.0 * 2.0 / 254.0, "%g vs %g", y, want);

    /* q8_0: d = 0.25, codes -16..15 -> sum d * c * 1 = 0.25 * -16 = -4 */
    uint8_t b8[34];
    uint16_t d8 = llm_fp32_to_fp16(0.25f);
    memcpy(b8, &d8, 2);
    for (int j = 0; j < 32; j++) {
        b8[2 + j] = (uint8_t)(int8_t)(j - 16);
        x[j] = 1.0f;
    }
    cr_assert_eq(llm_matvec_ref(LLM_TYPE_Q8_0, b8, x, &y, 32, 0, 1), LLM_OK);
    cr_assert_float_eq(y, -4.0f, 0);
    /* x = 1 quantizes exactly (d_x = 1/127, q = 127): the int8 path is exact */
    cr_assert_eq(llm_matvec(LLM_TYPE_Q8_0, b8, x, &y, 32, 0, 1), LLM_OK);
    cr_assert_float_eq(y, -4.0f, 1e-6);
}

Test(matmul, quantize_x_ref_rounding)
{
    rng_state = 7;
    float *x = vec_make(100, 3.0f);
    struct llm_qx q[4];
    llm_quantize_x_ref(x, 100, q);
    for (int64_t i = 0; i < 128; i++) {
        const struct llm_qx *b = &q[i / 32];
        float v = i < 100 ? x[i] : 0.0f;
        cr_assert(b->qs[i % 32] >= -127);
        cr_assert(fabsf(v - b->d * b->qs[i % 32]) <= b->d * 0.5f * (1 + 1e-5f) + 1e-30f);
    }
    for (int k = 0; k < 4; k++) {
        int s = 0;
        for (int j = 0; j < 32; j++)
            s += q[k].qs[j];
        cr_assert_float_eq(q[k].ds, q[k].d * (float)s, 1e-6f * fabsf(q[k].d) * 32 * 127);
        cr_assert_eq(q[k].m8, -8 * s);
        cr_assert_eq(q[k].p128, 128 * s);
    }
    free(x);
}

// ----------------------------------------------------------------------------
// the SIMD variants against the reference

Test(matmul, simd_matches_ref, .fini = restore_isa)
{
    enum llm_isa isas[2];
    int ni = n_isas(isas);
    if (!ni) {
        cr_skip_test("no AVX2 on this CPU");
        return;
    }
    rng_state = 2;
    for (size_t ti = 0; ti < N_TYPES; ti++)
        for (size_t li = 0; li < N_LENGTHS; li++)
            for (size_t ri = 0; ri < N_ROWS; ri++) {
                struct mat m;
                mat_make(&m, weight_types[ti], lengths[li], row_counts[ri], 0.1f);
                float *x = vec_make(m.ne0, 1.0f);
                float *y = malloc(sizeof(float) * (size_t)m.rows);
                float *yr = malloc(sizeof(float) * (size_t)m.rows);
                double *tol = malloc(sizeof(double) * (size_t)m.rows);
                double *tol8 = malloc(sizeof(double) * (size_t)m.rows);
                double *tol16 = malloc(sizeof(double) * (size_t)m.rows);
                for (int64_t r = 0; r < m.rows; r++) {
                    tol[r] = 1e-5 * scale_of(&m, r, x);
                    tol8[r] = tol[r] + act_bound(&m, r, x);
                    tol16[r] = tol[r] + act_bound(&m, r, x) / 258.0;
                }
                cr_assert_eq(llm_matvec_ref(m.t, m.w, x, yr, m.ne0, 0, m.rows), LLM_OK);
                for (int act = 0; act < 3; act++)
                    for (int ii = 0; ii < ni; ii++) {
                        cr_assert_eq(llm_matmul_set_isa(isas[ii]), isas[ii]);
                        llm_matmul_set_act(act);
                        cr_assert_eq(llm_matvec(m.t, m.w, x, y, m.ne0, 0, m.rows), LLM_OK);
                        const int q = llm_matmul_simd_type(m.t) == LLM_SIMD_INT8;
                        const double *tl = q && act == LLM_ACT_Q8    ? tol8
                                           : q && act == LLM_ACT_Q16 ? tol16
                                                                     : tol;
                        for (int64_t r = 0; r < m.rows; r++)
                            cr_assert(fabs(y[r] - yr[r]) <= tl[r],
                                      "isa %d act %d %s ne0=%lld row %lld: %.9g vs ref %.9g "
                                      "(tol %.3g)",
                                      isas[ii], act, llm_type_name(m.t), (long long)m.ne0,
                                      (long long)r, y[r], yr[r], tl[r]);
                    }
                free(x);
                free(y);
                free(yr);
                free(tol);
                free(tol8);
                free(tol16);
                mat_free(&m);
            }
}

/* The accuracy cost of the activation quantization on zero-mean Gaussian
 * rows (independent dot products), ||y - ref|| / ||ref||: int8 < 1e-2
 * (about 0.55% is expected: rounding error of std d/sqrt(12),
 * d = max|x_b|/127), int16 < 1e-4 (258 times less), float < 1e-6. */
Test(matmul, simd_relative_error, .fini = restore_isa)
{
    enum llm_isa isas[2];
    int ni = n_isas(isas);
    if (!ni) {
        cr_skip_test("no AVX2 on this CPU");
        return;
    }
    rng_state = 6;
    for (size_t ti = 0; ti < N_TYPES; ti++)
        for (size_t li = 3; li < N_LENGTHS; li++) {
            struct mat m;
            mat_make(&m, weight_types[ti], lengths[li], 256, 0.0f);
            float *x = vec_make(m.ne0, 1.0f);
            float y[256], yr[256];
            cr_assert_eq(llm_matvec_ref(m.t, m.w, x, yr, m.ne0, 0, m.rows), LLM_OK);
            for (int act = 0; act < 3; act++)
                for (int ii = 0; ii < ni; ii++) {
                    llm_matmul_set_isa(isas[ii]);
                    llm_matmul_set_act(act);
                    cr_assert_eq(llm_matvec(m.t, m.w, x, y, m.ne0, 0, m.rows), LLM_OK);
                    double e2 = 0, r2 = 0;
                    for (int64_t r = 0; r < m.rows; r++) {
                        e2 += (double)(y[r] - yr[r]) * (y[r] - yr[r]);
                        r2 += (double)yr[r] * yr[r];
                    }
                    double rel = sqrt(e2 / r2);
                    if (getenv("MM_VERBOSE"))
                        fprintf(stderr, "isa %d act %d %s ne0=%lld rel %.3g\n", isas[ii], act,
                                llm_type_name(m.t), (long long)m.ne0, rel);
                    const int q = llm_matmul_simd_type(m.t) == LLM_SIMD_INT8;
                    const double lim = q && act == LLM_ACT_Q8    ? 1e-2
                                       : q && act == LLM_ACT_Q16 ? 1e-4
                                                                 : 1e-6;
                    cr_assert(rel < lim, "isa %d act %d %s ne0=%lld: relative error %.3g",
                              isas[ii], act, llm_type_name(m.t), (long long)m.ne0, rel);
                }
            free(x);
            mat_free(&m);
        }
}

/* The activation quantizer of each variant rounds as the reference does
 * (nearest even; the products then see the same int8 blocks). */
Test(matmul, simd_quantized_x_matches_ref_on_integers, .fini = restore_isa)
{
    enum llm_isa isas[2];
    int ni = n_isas(isas);
    if (!ni) {
        cr_skip_test("no AVX2 on this CPU");
        return;
    }
    /* x whose blocks have max 127: x quantizes exactly, so the int8 path
     * must give the reference result up to float rounding */
    rng_state = 3;
    const int64_t ne0 = 1000, rows = 7;
    float *x = malloc(sizeof(float) * ne0);
    for (int64_t i = 0; i < ne0; i++)
        x[i] = (i % 32 == 0) ? 127.0f : (float)((int)(rng_next() % 255) - 127);
    llm_matmul_set_act(LLM_ACT_Q8);
    for (int ii = 0; ii < ni; ii++) {
        llm_matmul_set_isa(isas[ii]);
        for (size_t ti = 0; ti < N_TYPES; ti++) {
            if (llm_matmul_simd_type(weight_types[ti]) != LLM_SIMD_INT8)
                continue;
            struct mat m;
            mat_make(&m, weight_types[ti], ne0, rows, 0.1f);
            float y[7], yr[7];
            cr_assert_eq(llm_matvec_ref(m.t, m.w, x, yr, ne0, 0, rows), LLM_OK);
            cr_assert_eq(llm_matvec(m.t, m.w, x, y, ne0, 0, rows), LLM_OK);
            for (int64_t r = 0; r < rows; r++)
                cr_assert(fabs(y[r] - yr[r]) <= 1e-5 * scale_of(&m, r, x),
                          "isa %d %s row %lld: %.9g vs %.9g", isas[ii], llm_type_name(m.t),
                          (long long)r, y[r], yr[r]);
            mat_free(&m);
        }
    }
    free(x);
}

// ----------------------------------------------------------------------------
// matmul = matvec per token, sub-ranges, errors

static void check_matmul_vs_matvec(int use_ref)
{
    rng_state = 4;
    const int64_t nbs[] = { 1, 3, 4, 5, 9, 13 };
    for (size_t ti = 0; ti < N_TYPES; ti++)
        for (size_t li = 0; li < N_LENGTHS; li += 2) {
            const int64_t ne0 = lengths[li], rows = 7, ldy = rows + 3;
            struct mat m;
            mat_make(&m, weight_types[ti], ne0, rows, 0.1f);
            for (size_t bi = 0; bi < sizeof nbs / sizeof nbs[0]; bi++) {
                const int64_t nb = nbs[bi];
                float *X = vec_make(nb * ne0, 1.0f);
                float *Y = malloc(sizeof(float) * (size_t)(nb * ldy));
                for (int64_t i = 0; i < nb * ldy; i++)
                    Y[i] = -12345.0f;
                /* rows [2, 6) only */
                llm_status s = use_ref ? llm_matmul_ref(m.t, m.w, X, Y, ne0, nb, ldy, 2, 6)
                                       : llm_matmul(m.t, m.w, X, Y, ne0, nb, ldy, 2, 6);
                cr_assert_eq(s, LLM_OK);
                for (int64_t b = 0; b < nb; b++) {
                    float y[7];
                    s = use_ref ? llm_matvec_ref(m.t, m.w, X + b * ne0, y, ne0, 0, rows)
                                : llm_matvec(m.t, m.w, X + b * ne0, y, ne0, 0, rows);
                    cr_assert_eq(s, LLM_OK);
                    for (int64_t r = 0; r < ldy; r++) {
                        if (r >= 2 && r < 6 && (use_ref || nb < LLM_MATMUL_GEMM_MIN_NB))
                            cr_assert_eq(Y[b * ldy + r], y[r],
                                         "%s ne0=%lld nb=%lld token %lld row %lld: %.9g vs %.9g",
                                         llm_type_name(m.t), (long long)ne0, (long long)nb,
                                         (long long)b, (long long)r, Y[b * ldy + r], y[r]);
                        else if (r >= 2 && r < 6) /* the GEMM: both within their bounds */
                            cr_assert(fabs(Y[b * ldy + r] - y[r]) <=
                                          2e-5 * scale_of(&m, r, X + b * ne0) +
                                              act_bound(&m, r, X + b * ne0),
                                      "%s ne0=%lld nb=%lld token %lld row %lld: %.9g vs %.9g",
                                      llm_type_name(m.t), (long long)ne0, (long long)nb,
                                      (long long)b, (long long)r, Y[b * ldy + r], y[r]);
                        else
                            cr_assert_eq(Y[b * ldy + r], -12345.0f, "row %lld written",
                                         (long long)r);
                    }
                }
                free(X);
                free(Y);
            }
            mat_free(&m);
        }
}

Test(matmul, matmul_equals_matvec_per_token, .fini = restore_isa)
{
    for (int act = 0; act < 3; act++) {
        llm_matmul_set_act(act);
        check_matmul_vs_matvec(0);
    }
}

Test(matmul, matmul_ref_equals_matvec_ref_per_token)
{
    check_matmul_vs_matvec(1);
}

Test(matmul, sub_ranges_write_only_their_rows)
{
    rng_state = 5;
    const int64_t ne0 = 172, rows = 64;
    for (size_t ti = 0; ti < N_TYPES; ti++) {
        struct mat m;
        mat_make(&m, weight_types[ti], ne0, rows, 0.1f);
        float *x = vec_make(ne0, 1.0f);
        float full[64], part[64];
        cr_assert_eq(llm_matvec(m.t, m.w, x, full, ne0, 0, rows), LLM_OK);
        const int64_t ranges[][2] = { { 0, 1 }, { 5, 12 }, { 63, 64 }, { 10, 10 }, { 0, 64 } };
        for (size_t k = 0; k < sizeof ranges / sizeof ranges[0]; k++) {
            for (int64_t r = 0; r < rows; r++)
                part[r] = NAN;
            cr_assert_eq(llm_matvec(m.t, m.w, x, part, ne0, ranges[k][0], ranges[k][1]), LLM_OK);
            for (int64_t r = 0; r < rows; r++) {
                if (r >= ranges[k][0] && r < ranges[k][1])
                    cr_assert_eq(part[r], full[r], "%s row %lld", llm_type_name(m.t),
                                 (long long)r);
                else
                    cr_assert(isnan(part[r]), "%s row %lld written outside [%lld, %lld)",
                              llm_type_name(m.t), (long long)r, (long long)ranges[k][0],
                              (long long)ranges[k][1]);
            }
        }
        free(x);
        mat_free(&m);
    }
}

Test(matmul, bad_arguments)
{
    float x[32] = { 0 }, y[4];
    uint8_t w[34 * 4] = { 0 };
    cr_assert_eq(llm_matvec(LLM_TYPE_U8, w, x, y, 32, 0, 1), LLM_E_INVALID);
    cr_assert_eq(llm_matvec_ref((enum llm_type)7, w, x, y, 32, 0, 1), LLM_E_INVALID);
    cr_assert_eq(llm_matvec(LLM_TYPE_Q8_0, w, x, y, 0, 0, 1), LLM_E_INVALID);
    cr_assert_eq(llm_matvec(LLM_TYPE_Q8_0, w, x, y, 32, 2, 1), LLM_E_INVALID);
    cr_assert_eq(llm_matvec(LLM_TYPE_Q8_0, w, x, y, 32, -1, 1), LLM_E_INVALID);
    cr_assert_eq(llm_matvec(LLM_TYPE_Q8_0, NULL, x, y, 32, 0, 1), LLM_E_INVALID);
    cr_assert_eq(llm_matmul(LLM_TYPE_Q8_0, w, x, y, 32, 1, 2, 0, 4), LLM_E_INVALID); /* ldy < r1 */
    cr_assert_eq(llm_matmul(LLM_TYPE_Q8_0, w, x, y, 32, -1, 4, 0, 4), LLM_E_INVALID);
    cr_assert_eq(llm_matmul_ref(LLM_TYPE_Q8_0, w, x, y, 32, 1, 2, 0, 4), LLM_E_INVALID);
    /* an empty range touches nothing, even with NULL buffers */
    cr_assert_eq(llm_matvec(LLM_TYPE_Q8_0, NULL, NULL, NULL, 32, 3, 3), LLM_OK);
    cr_assert(strstr(llm_error_detail(llm_matvec(LLM_TYPE_Q8_0, w, x, y, 32, 2, 1)), "matvec"));
}

/* FP8 NaN codes (0x7f, 0xff) make the product NaN in every path, both in
 * the 16-code SIMD body and in the scalar tail. */
Test(matmul, fp8_nan_code_gives_nan, .fini = restore_isa)
{
    const int64_t ne0 = 40;
    uint8_t row[4 + 40];
    float r = 0.5f, x[40], y;
    memcpy(row, &r, 4);
    for (int64_t i = 0; i < ne0; i++) {
        row[4 + i] = (uint8_t)(0x30 + i); /* finite codes */
        x[i] = 1.0f;
    }
    cr_assert_eq(llm_matvec_ref(LLM_TYPE_FP8_E4M3, row, x, &y, ne0, 0, 1), LLM_OK);
    cr_assert(isfinite(y));
    const int64_t at[] = { 5, 37 };
    const uint8_t codes[] = { 0x7f, 0xff };
    enum llm_isa isas[2];
    int ni = n_isas(isas);
    for (size_t k = 0; k < 2; k++) {
        row[4 + at[k]] = codes[k];
        cr_assert_eq(llm_matvec_ref(LLM_TYPE_FP8_E4M3, row, x, &y, ne0, 0, 1), LLM_OK);
        cr_assert(isnan(y));
        for (int ii = 0; ii < ni; ii++) {
            llm_matmul_set_isa(isas[ii]);
            cr_assert_eq(llm_matvec(LLM_TYPE_FP8_E4M3, row, x, &y, ne0, 0, 1), LLM_OK);
            cr_assert(isnan(y), "isa %d: NaN code at %lld gave %g", isas[ii], (long long)at[k], y);
        }
        row[4 + at[k]] = 0x30;
    }
}

// ----------------------------------------------------------------------------
// the prefill GEMM (LLM_MATMUL_GEMM_MIN_NB tokens and more)

/* Every type, rows and tokens that are not multiples of the micro-tile
 * (AVX-512 32 x 12, AVX2 16 x 6), row blocks past 256 rows, k panels of 256
 * with a short last one, ne0 not a multiple of the block, sub-ranges of
 * rows and ldy > rows: llm_matmul against llm_matmul_ref for nb = 1..17 and
 * 40, within the float bound from LLM_MATMUL_GEMM_MIN_NB tokens on (except
 * int8 activations, and the int16 GEMM of the int types on AVX-512, which
 * has the int16 bound), the row kernels' bounds below; rows outside
 * [r0, r1) and columns past them are never written. */
Test(matmul, gemm_matches_ref, .fini = restore_isa)
{
    enum llm_isa isas[2];
    int ni = n_isas(isas);
    if (!ni) {
        cr_skip_test("no AVX2 on this CPU");
        return;
    }
    rng_state = 11;
    /* ne0, rows, r0, r1 */
    const int64_t shapes[][4] = { { 32, 33, 0, 33 },
                                  { 172, 45, 3, 45 },
                                  { 600, 300, 17, 290 },
                                  { 1000, 20, 0, 20 } };
    const int64_t NBMAX = 40;
    for (size_t ti = 0; ti < N_TYPES; ti++)
        for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
            const int64_t ne0 = shapes[si][0], rows = shapes[si][1], r0 = shapes[si][2],
                          r1 = shapes[si][3], ldy = rows + 5;
            struct mat m;
            mat_make(&m, weight_types[ti], ne0, rows, 0.1f);
            float *X = vec_make(NBMAX * ne0, 1.0f);
            float *Yr = malloc(sizeof(float) * (size_t)(NBMAX * ldy));
            float *Y = malloc(sizeof(float) * (size_t)(NBMAX * ldy));
            double *tol = malloc(sizeof(double) * (size_t)(NBMAX * rows));
            double *ab = malloc(sizeof(double) * (size_t)(NBMAX * rows));
            cr_assert_eq(llm_matmul_ref(m.t, m.w, X, Yr, ne0, NBMAX, ldy, r0, r1), LLM_OK);
            for (int64_t b = 0; b < NBMAX; b++)
                for (int64_t r = r0; r < r1; r++) {
                    tol[b * rows + r] = 1e-5 * scale_of(&m, r, X + b * ne0);
                    ab[b * rows + r] = act_bound(&m, r, X + b * ne0);
                }
            const int q = llm_matmul_simd_type(m.t) == LLM_SIMD_INT8;
            for (int64_t nb = 1; nb <= NBMAX; nb = nb == 17 ? NBMAX : nb + 1)
                for (int act = 0; act < 3; act++)
                    for (int ii = 0; ii < 2 * ni; ii++) {
                        /* the batch-invariant kernels, then the others */
                        const int inv = ii < ni;
                        llm_matmul_set_invariant(inv);
                        llm_matmul_set_isa(isas[ii % ni]);
                        llm_matmul_set_act(act);
                        for (int64_t i = 0; i < NBMAX * ldy; i++)
                            Y[i] = -12345.0f;
                        cr_assert_eq(llm_matmul(m.t, m.w, X, Y, ne0, nb, ldy, r0, r1), LLM_OK);
                        const int gemm =
                            !inv && nb >= LLM_MATMUL_GEMM_MIN_NB && !(q && act == LLM_ACT_Q8);
                        for (int64_t b = 0; b < NBMAX; b++)
                            for (int64_t r = 0; r < ldy; r++) {
                                const float y = Y[b * ldy + r];
                                if (b >= nb || r < r0 || r >= r1) {
                                    cr_assert_eq(y, -12345.0f, "%s nb=%lld: token %lld row %lld "
                                                 "written", llm_type_name(m.t), (long long)nb,
                                                 (long long)b, (long long)r);
                                    continue;
                                }
                                double tl = tol[b * rows + r];
                                /* the AVX-512 prefill of the int types is an int16 GEMM */
                                if (!gemm && q && act == LLM_ACT_Q8)
                                    tl += ab[b * rows + r];
                                else if ((!gemm || isas[ii % ni] == LLM_ISA_AVX512) && q &&
                                         act == LLM_ACT_Q16)
                                    tl += ab[b * rows + r] / 258.0;
                                cr_assert(fabs(y - Yr[b * ldy + r]) <= tl,
                                          "inv %d isa %d act %d %s ne0=%lld nb=%lld token %lld "
                                          "row %lld: %.9g vs ref %.9g (tol %.3g)",
                                          inv, isas[ii % ni], act, llm_type_name(m.t), (long long)ne0,
                                          (long long)nb, (long long)b, (long long)r, y,
                                          Yr[b * ldy + r], tl);
                            }
                    }
            free(X);
            free(Y);
            free(Yr);
            free(tol);
            free(ab);
            mat_free(&m);
        }
}

/* More tokens than one chunk of the GEMM (the float one takes 768 at a
 * time, the int16 one 256, as the quantizer's calibration products need):
 * every token, the last chunk's short tail included, matches the
 * reference. */
Test(matmul, gemm_many_tokens, .fini = restore_isa)
{
    enum llm_isa isas[2];
    int ni = n_isas(isas);
    rng_state = 13;
    const enum llm_type types[] = { LLM_TYPE_F32, LLM_TYPE_Q4_1, LLM_TYPE_Q8_CH };
    const int64_t ne0 = 300, rows = 37, nb = 1601;
    float *X = vec_make(nb * ne0, 1.0f);
    float *Y = malloc(sizeof(float) * (size_t)(nb * rows));
    float *Yr = malloc(sizeof(float) * (size_t)(nb * rows));
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        struct mat m;
        mat_make(&m, types[ti], ne0, rows, 0.1f);
        cr_assert_eq(llm_matmul_ref(m.t, m.w, X, Yr, ne0, nb, rows, 0, rows), LLM_OK);
        for (int ii = 0; ii < 2 * ni; ii++) {
            llm_matmul_set_invariant(ii < ni);
            llm_matmul_set_isa(isas[ii % ni]);
            llm_matmul_set_act(LLM_ACT_Q16);
            cr_assert_eq(llm_matmul(m.t, m.w, X, Y, ne0, nb, rows, 0, rows), LLM_OK);
            /* the int types meet int16 activations in the int16 GEMM */
            const int a16 = llm_matmul_simd_type(m.t) == LLM_SIMD_INT8 &&
                            (ii < ni || isas[ii % ni] == LLM_ISA_AVX512);
            for (int64_t b = 0; b < nb; b++)
                for (int64_t r = 0; r < rows; r++)
                    cr_assert(fabs(Y[b * rows + r] - Yr[b * rows + r]) <=
                                  1e-5 * scale_of(&m, r, X + b * ne0) +
                                      (a16 ? act_bound(&m, r, X + b * ne0) / 258.0 : 0),
                              "isa %d %s token %lld row %lld: %.9g vs %.9g", isas[ii % ni],
                              llm_type_name(m.t), (long long)b, (long long)r, Y[b * rows + r],
                              Yr[b * rows + r]);
        }
        mat_free(&m);
    }
    free(X);
    free(Y);
    free(Yr);
}

/* In the GEMM the tokens stay independent: a NaN in one token's
 * activations, or an FP8 NaN code in one row, makes exactly that token's,
 * or that row's, outputs NaN. */
Test(matmul, gemm_nan_stays_in_its_token_and_row, .fini = restore_isa)
{
    enum llm_isa isas[2];
    int ni = n_isas(isas);
    rng_state = 12;
    const int64_t ne0 = 300, rows = 40, nb = 20;
    for (size_t ti = 0; ti < N_TYPES; ti++) {
        struct mat m;
        mat_make(&m, weight_types[ti], ne0, rows, 0.1f);
        if (m.t == LLM_TYPE_FP8_E4M3) /* row 5, element 290: a NaN code */
            m.w[m.rb * 5 + 4 + 290] = 0x7f;
        float *X = vec_make(nb * ne0, 1.0f);
        X[13 * ne0 + 260] = NAN;
        float *Y = malloc(sizeof(float) * (size_t)(nb * rows));
        for (int ii = 0; ii < 2 * ni; ii++) {
            llm_matmul_set_invariant(ii < ni);
            llm_matmul_set_isa(isas[ii % ni]);
            for (int act = LLM_ACT_F32; act <= LLM_ACT_Q16; act += LLM_ACT_Q16) {
                llm_matmul_set_act(act);
                cr_assert_eq(llm_matmul(m.t, m.w, X, Y, ne0, nb, rows, 0, rows), LLM_OK);
                for (int64_t b = 0; b < nb; b++)
                    for (int64_t r = 0; r < rows; r++) {
                        const int nan = b == 13 || (m.t == LLM_TYPE_FP8_E4M3 && r == 5);
                        cr_assert(nan ? isnan(Y[b * rows + r]) : isfinite(Y[b * rows + r]),
                                  "isa %d act %d %s token %lld row %lld: %g", isas[ii % ni], act,
                                  llm_type_name(m.t), (long long)b, (long long)r,
                                  Y[b * rows + r]);
                    }
            }
        }
        free(X);
        free(Y);
        mat_free(&m);
    }
}

// ----------------------------------------------------------------------------
// real weights: stories260K (all F32), quantized to every type

#include "../../../lib/format/import.h"

Test(matmul, stories260k_weights_every_type, .fini = restore_isa)
{
    TEST_DATA(path, "gguf/stories260K.gguf");
    struct llm_import_opts o;
    llm_import_opts_default(&o);
    struct llm_file *f;
    cr_assert_eq(llm_import(&f, path, &o), LLM_OK, "%s", llm_error_detail(-1));
    /* ffn_down: ne0 = 172 (not a multiple of 32), 64 rows; x = the
     * activation-like embedding rows padded out with ffn_gate */
    struct llm_tensor *wt = llm_file_find(f, "blk.0.ffn_down.weight");
    struct llm_tensor *et = llm_file_find(f, "token_embd.weight");
    cr_assert(wt && et);
    cr_assert_eq(wt->type, LLM_TYPE_F32);
    cr_assert_eq(wt->ne[0], 172);
    cr_assert_eq(wt->ne[1], 64);
    const void *wd, *ed;
    cr_assert_eq(llm_tensor_bytes(f, wt, &wd), LLM_OK);
    cr_assert_eq(llm_tensor_bytes(f, et, &ed), LLM_OK);
    const int64_t ne0 = 172, rows = 64;
    float *wf = malloc(sizeof(float) * ne0 * rows), x[172];
    memcpy(wf, wd, sizeof(float) * ne0 * rows);
    memcpy(x, (const float *)ed + 64 * 7, sizeof(float) * 64);
    memcpy(x + 64, (const float *)ed + 64 * 100, sizeof(float) * 64);
    memcpy(x + 128, (const float *)ed + 64 * 300, sizeof(float) * 44);
    enum llm_isa isas[2];
    int ni = n_isas(isas);
    for (size_t ti = 0; ti < N_TYPES; ti++) {
        struct mat m = { weight_types[ti], ne0, rows, llm_type_row_bytes(weight_types[ti], ne0),
                         NULL, NULL };
        m.w = malloc(m.rb * rows);
        m.deq = malloc(sizeof(float) * ne0 * rows);
        for (int64_t r = 0; r < rows; r++) {
            cr_assert_eq(llm_quantize_row(m.t, wf + r * ne0, m.w + m.rb * r, ne0), LLM_OK);
            cr_assert_eq(llm_dequantize_row(m.t, m.w + m.rb * r, m.deq + r * ne0, ne0), LLM_OK);
        }
        float yr[64], y[64];
        cr_assert_eq(llm_matvec_ref(m.t, m.w, x, yr, ne0, 0, rows), LLM_OK);
        for (int64_t r = 0; r < rows; r++)
            cr_assert(fabs(yr[r] - dot_deq(&m, r, x)) <= 2e-6 * scale_of(&m, r, x), "%s row %lld",
                      llm_type_name(m.t), (long long)r);
        for (int act = 0; act < 3; act++)
        for (int ii = 0; ii < ni; ii++) {
            llm_matmul_set_isa(isas[ii]);
            llm_matmul_set_act(act);
            cr_assert_eq(llm_matvec(m.t, m.w, x, y, ne0, 0, rows), LLM_OK);
            for (int64_t r = 0; r < rows; r++) {
                double tol = 1e-5 * scale_of(&m, r, x);
                if (llm_matmul_simd_type(m.t) == LLM_SIMD_INT8 && act == LLM_ACT_Q8)
                    tol += act_bound(&m, r, x);
                if (llm_matmul_simd_type(m.t) == LLM_SIMD_INT8 && act == LLM_ACT_Q16)
                    tol += act_bound(&m, r, x) / 258.0;
                cr_assert(fabs(y[r] - yr[r]) <= tol, "isa %d %s row %lld: %g vs %g", isas[ii],
                          llm_type_name(m.t), (long long)r, y[r], yr[r]);
            }
        }
        mat_free(&m);
    }
    free(wf);
    llm_file_free(f);
}

/* The defaults the forward pass gets: int16 activations for the int8/int4
 * types (int8 changed SmolLM2's greedy answers), the best ISA by name. */
Test(matmul, defaults)
{
    if (getenv("LLM_MATMUL_ACT") || getenv("LLM_ISA")) {
        cr_skip_test("LLM_MATMUL_ACT or LLM_ISA is set");
        return;
    }
    int act = llm_matmul_set_act(LLM_ACT_Q16);
    cr_assert_eq(act, LLM_ACT_Q16);
    cr_assert_eq(llm_matmul_set_act(LLM_ACT_Q8), LLM_ACT_Q16);
    cr_assert_eq(llm_matmul_set_act(act), LLM_ACT_Q8);
    const char *want = llm_isa_detect() == LLM_ISA_AVX512 ? "avx512-vnni"
                       : llm_isa_detect() == LLM_ISA_AVX2 ? "avx2"
                                                          : "scalar";
    llm_matmul_set_isa(LLM_ISA_AVX512);
    cr_assert_str_eq(llm_matmul_isa_name(), want);
    cr_assert_eq(llm_matmul_simd_type(LLM_TYPE_Q4_1), LLM_SIMD_INT8);
    cr_assert_eq(llm_matmul_simd_type(LLM_TYPE_NF4), LLM_SIMD_FLOAT);
    cr_assert_eq(llm_matmul_simd_type(LLM_TYPE_U8), LLM_SIMD_NONE);
}

/* A NaN activation gives NaN, as in the reference, whatever the
 * activations the SIMD path quantizes to. */
Test(matmul, nan_activation_propagates, .fini = restore_isa)
{
    enum llm_isa isas[2];
    int ni = n_isas(isas);
    rng_state = 9;
    for (size_t ti = 0; ti < N_TYPES; ti++) {
        struct mat m;
        mat_make(&m, weight_types[ti], 100, 3, 0.1f);
        float *x = vec_make(100, 1.0f);
        x[70] = NAN;
        float y[3];
        cr_assert_eq(llm_matvec_ref(m.t, m.w, x, y, 100, 0, 3), LLM_OK);
        for (int r = 0; r < 3; r++)
            cr_assert(isnan(y[r]), "ref %s", llm_type_name(m.t));
        for (int act = 0; act < 3; act++)
            for (int ii = 0; ii < ni; ii++) {
                llm_matmul_set_isa(isas[ii]);
                llm_matmul_set_act(act);
                cr_assert_eq(llm_matvec(m.t, m.w, x, y, 100, 0, 3), LLM_OK);
                for (int r = 0; r < 3; r++)
                    cr_assert(isnan(y[r]), "isa %d act %d %s row %d: %g", isas[ii], act,
                              llm_type_name(m.t), r, y[r]);
            }
        free(x);
        mat_free(&m);
    }
}

/* An infinite activation: NaN from the quantized-activation paths (the
 * integer codes cannot carry it), never a finite number. */
Test(matmul, inf_activation_is_not_finite, .fini = restore_isa)
{
    enum llm_isa isas[2];
    int ni = n_isas(isas);
    rng_state = 10;
    struct mat m;
    mat_make(&m, LLM_TYPE_Q4_1, 64, 2, 0.1f);
    float *x = vec_make(64, 1.0f), y[2];
    x[3] = INFINITY;
    for (int act = 0; act < 3; act++)
        for (int ii = 0; ii < ni; ii++) {
            llm_matmul_set_isa(isas[ii]);
            llm_matmul_set_act(act);
            cr_assert_eq(llm_matvec(m.t, m.w, x, y, 64, 0, 2), LLM_OK);
            cr_assert(!isfinite(y[0]) && !isfinite(y[1]), "isa %d act %d: %g %g", isas[ii], act,
                      y[0], y[1]);
        }
    struct llm_qx q[2];
    llm_quantize_x_ref(x, 64, q);
    cr_assert(isnan(q[0].d));
    cr_assert(!isnan(q[1].d));
    free(x);
    mat_free(&m);
}

// ----------------------------------------------------------------------------
// interleaved 4-bit rows (matmul.h's x16 layout)

/* The layout byte for byte as matmul.h states it, and back to rows. */
/* the types with an interleaved layout (matmul.h) */
static const enum llm_type x16_types[] = {
    LLM_TYPE_Q4_0,     LLM_TYPE_Q4_1,     LLM_TYPE_Q4_G64,  LLM_TYPE_Q4Z_G64,
    LLM_TYPE_Q4_G128,  LLM_TYPE_Q4Z_G128, LLM_TYPE_Q8_0,    LLM_TYPE_Q8Z_G32,
    LLM_TYPE_Q8_G64,   LLM_TYPE_Q8Z_G64,  LLM_TYPE_Q8_G128, LLM_TYPE_Q8Z_G128,
    LLM_TYPE_F32,      LLM_TYPE_F16,      LLM_TYPE_BF16,
};
#define N_X16_TYPES (sizeof x16_types / sizeof x16_types[0])

Test(matmul, x16_layout_and_round_trip)
{
    rng_state = 11;
    const enum llm_type *types = x16_types;
    const int64_t shapes[][2] = { { 128, 16 }, { 384, 48 }, { 640, 32 } }; /* ne0, rows */
    for (size_t ti = 0; ti < N_X16_TYPES; ti++)
        for (size_t si = 0; si < 3; si++) {
            const struct llm_type_traits *tr = llm_type_traits(types[ti]);
            const int64_t ne0 = shapes[si][0], rows = shapes[si][1], G = tr->blck, nq = ne0 / G;
            /* d (and m), then the codes: G/2 bytes (4-bit) or G (8-bit) */
            const int zp = llm_type_name(types[ti])[2] == 'z' || types[ti] == LLM_TYPE_Q4_1;
            const uint64_t BB = tr->block_bytes, hdr = zp ? 4 : 2, units = (BB - hdr) / 2;
            struct mat m;
            mat_make(&m, types[ti], ne0, rows, 0.1f);
            cr_assert(llm_x16_ok(m.t, ne0, rows));
            uint8_t *P = malloc(m.rb * (uint64_t)rows), *back = malloc(m.rb * (uint64_t)rows);
            cr_assert_eq(llm_x16_pack(m.t, m.w, ne0, rows, P), LLM_OK);
            const size_t elt = m.t == LLM_TYPE_F32 ? 4 : 2;
            /* float types: element k of the group's row i at k * 16 + i */
            for (int64_t g = 0; G == 1 && g < rows / 16; g++)
                for (int r = 0; r < 16; r++)
                    for (int64_t k = 0; k < ne0; k++)
                        cr_assert_eq(memcmp(P + (g * 16 * ne0 + k * 16 + r) * (int64_t)elt,
                                            m.w + (uint64_t)(16 * g + r) * m.rb + (uint64_t)k * elt,
                                            elt), 0, "%s row %lld element %lld",
                                     llm_type_name(m.t), (long long)(16 * g + r), (long long)k);
            for (int64_t g = 0; G > 1 && g < rows / 16; g++)
                for (int64_t k = 0; k < nq; k++) {
                    const uint8_t *blk = P + (uint64_t)(g * nq + k) * 16 * BB;
                    for (int r = 0; r < 16; r++) {
                        const uint8_t *src = m.w + (uint64_t)(16 * g + r) * m.rb + (uint64_t)k * BB;
                        cr_assert_eq(memcmp(blk + 2 * r, src, 2), 0, "d of row %d", r);
                        if (zp)
                            cr_assert_eq(memcmp(blk + 32 + 2 * r, src + 2, 2), 0, "m of row %d", r);
                        for (int p = 0; p < (int)units; p++)
                            for (int e = 0; e < 2; e++)
                                cr_assert_eq(blk[16 * hdr + 32 * p + 2 * r + e],
                                             src[hdr + 2 * p + e], "%s group %lld block %lld "
                                             "row %d byte %d", llm_type_name(m.t), (long long)g,
                                             (long long)k, r, 2 * p + e);
                    }
                }
            cr_assert_eq(llm_x16_unpack(m.t, P, ne0, 0, rows, back), LLM_OK);
            cr_assert_eq(memcmp(back, m.w, m.rb * (uint64_t)rows), 0);
            memset(back, 0, m.rb * 16);
            cr_assert_eq(llm_x16_unpack(m.t, P, ne0, rows - 16, rows, back), LLM_OK);
            cr_assert_eq(memcmp(back, m.w + m.rb * (uint64_t)(rows - 16), m.rb * 16), 0);
            free(P);
            free(back);
            mat_free(&m);
        }
    /* shapes and ranges the layout does not take */
    uint8_t buf[4096] = { 0 };
    float x[64] = { 0 }, y[64];
    cr_assert(!llm_x16_ok(LLM_TYPE_Q8_CH, 64, 16));
    cr_assert(!llm_x16_ok(LLM_TYPE_Q3Z_G32, 64, 16));
    cr_assert(!llm_x16_ok(LLM_TYPE_Q4_0, 48, 16));
    cr_assert(!llm_x16_ok(LLM_TYPE_Q4_0, 64, 24));
    cr_assert(!llm_x16_ok(LLM_TYPE_Q4Z_G128, 192, 16)); /* not whole groups */
    cr_assert(llm_x16_ok(LLM_TYPE_Q4Z_G128, 256, 16));
    cr_assert_eq(llm_x16_pack(LLM_TYPE_Q4_CH, buf, 64, 16, buf + 2048), LLM_E_INVALID);
    cr_assert_eq(llm_x16_pack(LLM_TYPE_Q4_G64, buf, 96, 16, buf + 2048), LLM_E_INVALID);
    cr_assert_eq(llm_x16_pack(LLM_TYPE_Q4_0, buf, 64, 8, buf + 2048), LLM_E_INVALID);
    cr_assert_eq(llm_x16_unpack(LLM_TYPE_Q4_0, buf, 64, 8, 16, buf + 2048), LLM_E_INVALID);
    cr_assert_eq(llm_matvec_x16(LLM_TYPE_Q4_0, buf, x, y, 64, 0, 24), LLM_E_INVALID);
    cr_assert_eq(llm_matvec_x16(LLM_TYPE_Q4_0, buf, x, y, 40, 0, 16), LLM_E_INVALID);
    cr_assert_eq(llm_matmul_x16(LLM_TYPE_Q4_1, buf, x, y, 64, 1, 8, 0, 16), LLM_E_INVALID);
    llm_error_clear();
}

/* Products on the interleaved rows against the reference on the rows: every
 * ISA (the scalar one too, which unpacks), every activation setting, with
 * that setting's bound; decode, a few tokens and a GEMM's worth; a sub-range
 * writes only its rows. */
Test(matmul, x16_products_match_ref, .fini = restore_isa)
{
    enum llm_isa isas[3] = { LLM_ISA_REF };
    int ni = 1 + n_isas(isas + 1);
    rng_state = 12;
    const enum llm_type *types = x16_types;
    const int64_t lens[] = { 32, 128, 640, 1536 }, nbs[] = { 1, 3, 20 };
    const int64_t rows = 64, ldy = rows + 5;
    for (size_t ti = 0; ti < N_X16_TYPES; ti++)
        for (size_t li = 0; li < 4; li++) {
            const int64_t ne0 = lens[li];
            if (!llm_x16_ok(types[ti], ne0, rows))
                continue; /* 32-wide rows are no whole group of 64 or 128 */
            struct mat m;
            mat_make(&m, types[ti], ne0, rows, 0.1f);
            uint8_t *P = malloc(m.rb * (uint64_t)rows);
            cr_assert_eq(llm_x16_pack(m.t, m.w, ne0, rows, P), LLM_OK);
            for (size_t bi = 0; bi < 3; bi++) {
                const int64_t nb = nbs[bi];
                float *X = vec_make(nb * ne0, 1.0f);
                float *Y = malloc(sizeof(float) * (size_t)(nb * ldy));
                float *Yr = malloc(sizeof(float) * (size_t)(nb * ldy));
                cr_assert_eq(llm_matmul_ref(m.t, m.w, X, Yr, ne0, nb, ldy, 0, rows), LLM_OK);
                for (int act = 0; act < 3; act++)
                    for (int ii = 0; ii < ni; ii++) {
                        cr_assert_eq(llm_matmul_set_isa(isas[ii]), isas[ii]);
                        llm_matmul_set_act(act);
                        for (int64_t i = 0; i < nb * ldy; i++)
                            Y[i] = -12345.0f;
                        /* rows [16, 48) */
                        cr_assert_eq(nb == 1 ? llm_matvec_x16(m.t, P, X, Y, ne0, 16, 48)
                                             : llm_matmul_x16(m.t, P, X, Y, ne0, nb, ldy, 16, 48),
                                     LLM_OK);
                        for (int64_t b = 0; b < nb; b++)
                            for (int64_t r = 0; r < ldy; r++) {
                                const float y = Y[b * ldy + r], yr = Yr[b * ldy + r];
                                if (r < 16 || r >= 48) {
                                    cr_assert_eq(y, -12345.0f, "row %lld written", (long long)r);
                                    continue;
                                }
                                const float *x = X + b * ne0;
                                double tol = 1e-5 * scale_of(&m, r, x);
                                if (isas[ii] == LLM_ISA_REF)
                                    tol = 0; /* the reference itself, on unpacked rows */
                                else if (act == LLM_ACT_Q8)
                                    tol += act_bound(&m, r, x);
                                else if (act == LLM_ACT_Q16)
                                    tol += act_bound(&m, r, x) / 258.0;
                                cr_assert(fabs(y - yr) <= tol,
                                          "isa %d act %d %s ne0=%lld nb=%lld token %lld row "
                                          "%lld: %.9g vs ref %.9g (tol %.3g)",
                                          isas[ii], act, llm_type_name(m.t), (long long)ne0,
                                          (long long)nb, (long long)b, (long long)r, y, yr, tol);
                            }
                    }
                free(X);
                free(Y);
                free(Yr);
            }
            free(P);
            mat_free(&m);
        }
}

/* A NaN activation makes every row of the interleaved product NaN. */
Test(matmul, x16_nan_activation_propagates, .fini = restore_isa)
{
    enum llm_isa isas[2];
    int ni = n_isas(isas);
    rng_state = 13;
    struct mat m;
    mat_make(&m, LLM_TYPE_Q4_1, 96, 16, 0.1f);
    uint8_t *P = malloc(m.rb * 16);
    cr_assert_eq(llm_x16_pack(m.t, m.w, 96, 16, P), LLM_OK);
    float *x = vec_make(96, 1.0f), y[16];
    x[50] = NAN;
    for (int ii = 0; ii < ni; ii++) {
        llm_matmul_set_isa(isas[ii]);
        llm_matmul_set_act(LLM_ACT_Q16);
        cr_assert_eq(llm_matvec_x16(m.t, P, x, y, 96, 0, 16), LLM_OK);
        for (int r = 0; r < 16; r++)
            cr_assert(isnan(y[r]), "isa %d row %d: %g", isas[ii], r, y[r]);
    }
    free(x);
    free(P);
    mat_free(&m);
}

/* On AVX-512 under int16 activations, a product of several tokens on the
 * interleaved rows (the int16 GEMM packing straight from the groups) does
 * per block the arithmetic of decode: each token's result is decode's, bit
 * for bit, so a prompt and a generated token see the same logits. */
Test(matmul, x16_gemm_is_decode_per_token, .fini = restore_isa)
{
    if (llm_isa_detect() != LLM_ISA_AVX512) {
        cr_skip_test("no AVX-512 VNNI on this CPU");
        return;
    }
    rng_state = 14;
    llm_matmul_set_isa(LLM_ISA_AVX512);
    llm_matmul_set_act(LLM_ACT_Q16);
    const enum llm_type *types = x16_types;
    for (size_t ti = 0; ti < N_X16_TYPES; ti++) {
        const int64_t ne0 = 384, rows = 48, nb = 14, ldy = 50;
        struct mat m;
        mat_make(&m, types[ti], ne0, rows, 0.1f);
        uint8_t *P = malloc(m.rb * (uint64_t)rows);
        cr_assert_eq(llm_x16_pack(m.t, m.w, ne0, rows, P), LLM_OK);
        float *X = vec_make(nb * ne0, 1.0f), *Y = malloc(sizeof(float) * (size_t)(nb * ldy));
        float y[48];
        cr_assert_eq(llm_matmul_x16(m.t, P, X, Y, ne0, nb, ldy, 0, rows), LLM_OK);
        for (int64_t b = 0; b < nb; b++) {
            cr_assert_eq(llm_matvec_x16(m.t, P, X + b * ne0, y, ne0, 0, rows), LLM_OK);
            for (int64_t r = 0; r < rows; r++)
                cr_assert_eq(Y[b * ldy + r], y[r], "%s token %lld row %lld: %.9g vs %.9g",
                             llm_type_name(m.t), (long long)b, (long long)r, Y[b * ldy + r], y[r]);
        }
        free(X);
        free(Y);
        free(P);
        mat_free(&m);
    }
}

// ----------------------------------------------------------------------------
// batch invariance: a token's row of llm_matmul is llm_matvec's, bit for
// bit, whatever the number of tokens beside it, its slot and the rows range
// a thread takes (llm(7): the same answer alone or batched)

static const int64_t inv_nbs[] = { 1, 2, 3, 4, 5, 7, 8, 9, 12, 13, 16, 17, 33, 40 };
#define N_INV_NBS (sizeof inv_nbs / sizeof inv_nbs[0])

/* Every token of every batch size against its matvec, for rows [r0, r1);
 * x16: P is the interleaved form. Returns the first mismatch or "". */
static void check_invariant(const struct mat *m, const uint8_t *P, const float *X, int64_t r0,
                            int64_t r1, const char *what)
{
    const int64_t ne0 = m->ne0, rows = m->rows, nbmax = 40;
    float *y = malloc(sizeof(float) * (size_t)(nbmax * rows));
    float *Y = malloc(sizeof(float) * (size_t)(nbmax * rows));
    for (int64_t b = 0; b < nbmax; b++)
        cr_assert_eq(P ? llm_matvec_x16(m->t, P, X + b * ne0, y + b * rows, ne0, r0, r1)
                       : llm_matvec(m->t, m->w, X + b * ne0, y + b * rows, ne0, r0, r1),
                     LLM_OK);
    for (size_t i = 0; i < N_INV_NBS; i++) {
        const int64_t nb = inv_nbs[i];
        /* the batch starts at token `first`: the same token in other slots */
        for (int64_t first = 0; first + nb <= nbmax; first += nb > 8 ? 7 : 3) {
            memset(Y, 0, sizeof(float) * (size_t)(nb * rows));
            cr_assert_eq(P ? llm_matmul_x16(m->t, P, X + first * ne0, Y, ne0, nb, rows, r0, r1)
                           : llm_matmul(m->t, m->w, X + first * ne0, Y, ne0, nb, rows, r0, r1),
                         LLM_OK);
            for (int64_t b = 0; b < nb; b++)
                for (int64_t r = r0; r < r1; r++) {
                    const float a = Y[b * rows + r], e = y[(first + b) * rows + r];
                    if (memcmp(&a, &e, sizeof a))
                        cr_assert_fail("%s %s ne0=%lld rows [%lld, %lld) nb=%lld token %lld "
                                       "row %lld: %.9g vs decode's %.9g", what,
                                       llm_type_name(m->t), (long long)ne0, (long long)r0,
                                       (long long)r1, (long long)nb, (long long)(first + b),
                                       (long long)r, a, e);
                }
        }
    }
    free(y);
    free(Y);
}

Test(matmul, batch_invariant_every_type_isa_and_activation, .fini = restore_isa)
{
    enum llm_isa isas[3];
    int ni = n_isas(isas);
    isas[ni++] = LLM_ISA_REF;
    static const char *const act_names[] = { "f32", "q8", "q16" };
    rng_state = 21;
    const int64_t lens[] = { 64, 172, 576 }, rows = 48;
    for (size_t li = 0; li < 3; li++) {
        float *X = vec_make(40 * lens[li], 1.0f);
        for (size_t ti = 0; ti < N_TYPES; ti++) {
            struct mat m;
            mat_make(&m, weight_types[ti], lens[li], rows, 0.1f);
            for (int i = 0; i < ni; i++) {
                llm_matmul_set_isa(isas[i]);
                for (int act = 0; act < 3; act++) {
                    llm_matmul_set_act(act);
                    char what[64];
                    snprintf(what, sizeof what, "%s act %s",
                             isas[i] == LLM_ISA_AVX512 ? "avx512"
                             : isas[i] == LLM_ISA_AVX2 ? "avx2" : "scalar", act_names[act]);
                    check_invariant(&m, NULL, X, 0, rows, what);
                    check_invariant(&m, NULL, X, 5, 37, what);
                }
            }
            mat_free(&m);
        }
        free(X);
    }
}

Test(matmul, batch_invariant_x16, .fini = restore_isa)
{
    enum llm_isa isas[3];
    int ni = n_isas(isas);
    isas[ni++] = LLM_ISA_REF;
    const enum llm_type *types = x16_types;
    rng_state = 22;
    const int64_t ne0 = 384, rows = 48;
    float *X = vec_make(40 * ne0, 1.0f);
    for (size_t ti = 0; ti < N_X16_TYPES; ti++) {
        struct mat m;
        mat_make(&m, types[ti], ne0, rows, 0.1f);
        uint8_t *P = malloc(m.rb * (uint64_t)rows);
        cr_assert_eq(llm_x16_pack(m.t, m.w, ne0, rows, P), LLM_OK);
        for (int i = 0; i < ni; i++) {
            llm_matmul_set_isa(isas[i]);
            for (int act = 0; act < 3; act++) {
                llm_matmul_set_act(act);
                char what[64];
                snprintf(what, sizeof what, "x16 isa %d act %d", (int)isas[i], act);
                check_invariant(&m, P, X, 0, rows, what);
                check_invariant(&m, P, X, 16, 32, what);
            }
        }
        free(P);
        mat_free(&m);
    }
    free(X);
}
