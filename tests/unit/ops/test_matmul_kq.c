/* test_matmul_kq.c: products of the GGUF block types (Q5_0, Q5_1, Q2_K ..
 * Q8_K, IQ4_NL, IQ4_XS) on their packed rows: the reference against a
 * double dot of the dequantized rows, each SIMD variant against the
 * reference within the int16-activation bound of ops/matmul.c, and batch
 * invariance (every token of llm_matmul is llm_matvec's, bit for bit, for
 * any batch and row range). */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "../../../lib/ops/matmul.h"
#include "../../../lib/ops/matmul_impl.h"
#include "../../../lib/quant/kquants.h"
#include "../../../lib/quant/quant.h"
#include "../helpers.h"

static const enum llm_type kq_types[] = {
    LLM_TYPE_Q5_0, LLM_TYPE_Q5_1, LLM_TYPE_Q2_K,   LLM_TYPE_Q3_K,   LLM_TYPE_Q4_K,
    LLM_TYPE_Q5_K, LLM_TYPE_Q6_K, LLM_TYPE_Q8_K,   LLM_TYPE_IQ4_NL, LLM_TYPE_IQ4_XS,
};
#define N_KQ (sizeof kq_types / sizeof kq_types[0])

static uint64_t rng = 0x9E3779B97F4A7C15ull;

static float gauss(void)
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    float u = ((float)(rng >> 40) + 0.5f) / 16777216.0f;
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    float v = ((float)(rng >> 40) + 0.5f) / 16777216.0f;
    return sqrtf(-2.0f * logf(u)) * cosf(6.2831853f * v);
}

struct mat {
    enum llm_type t;
    int64_t ne0, rows;
    uint64_t rb;
    uint8_t *w;  // (rows, rb)
    float *deq;  // (rows, ne0)
};

static void mat_make(struct mat *m, enum llm_type t, int64_t ne0, int64_t rows)
{
    m->t = t, m->ne0 = ne0, m->rows = rows;
    m->rb = llm_type_row_bytes(t, (uint64_t)ne0);
    cr_assert(m->rb > 0);
    m->w = malloc(m->rb * (uint64_t)rows);
    m->deq = malloc(sizeof(float) * (size_t)(ne0 * rows));
    float *src = malloc(sizeof(float) * (size_t)ne0);
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t i = 0; i < ne0; i++) /* an offset so that the minimums matter */
            src[i] = gauss() * 0.05f + 0.03f * (float)(r % 3);
        cr_assert_eq(llm_quantize_row(t, src, m->w + m->rb * (uint64_t)r, ne0), LLM_OK);
        cr_assert_eq(llm_dequantize_row(t, m->w + m->rb * (uint64_t)r, m->deq + r * ne0, ne0), LLM_OK);
    }
    free(src);
}

static void mat_free(struct mat *m)
{
    free(m->w);
    free(m->deq);
}

/* S = sum|w x| + max|w| sum|x|, and the int16 activation bound A/258 + 1e-5 S
 * (A = sum over blocks of 32 of max|x_b|/254 * sum|w_b|) */
static void bounds(const struct mat *m, int64_t r, const float *x, double *S, double *B)
{
    const float *w = m->deq + r * m->ne0;
    double s = 0, sx = 0, wmax = 0, a = 0;
    for (int64_t e0 = 0; e0 < m->ne0; e0 += 32) {
        double amax = 0, sw = 0;
        for (int64_t i = e0; i < e0 + 32; i++) {
            s += fabs((double)w[i] * x[i]);
            sx += fabs(x[i]);
            wmax = fmax(wmax, fabs(w[i]));
            amax = fmax(amax, fabs(x[i]));
            sw += fabs(w[i]);
        }
        a += amax / 254.0 * sw;
    }
    *S = s + wmax * sx;
    *B = a / 258.0 * (1 + 1e-3) + 1e-5 * *S;
}

static double dot_deq(const struct mat *m, int64_t r, const float *x)
{
    double s = 0;
    for (int64_t i = 0; i < m->ne0; i++)
        s += (double)m->deq[r * m->ne0 + i] * x[i];
    return s;
}

/* lengths per block size: 32-element types also get rows that are not a
 * whole number of 256-element chunks */
static int64_t length(enum llm_type t, int i)
{
    static const int64_t l32[] = { 32, 576, 1536 }, l256[] = { 256, 768, 1536 };
    return llm_type_traits(t)->blck == 32 ? l32[i] : l256[i];
}

Test(matmul_kq, reference_and_simd_agree)
{
    const enum llm_isa best = llm_isa_detect();
    for (size_t ti = 0; ti < N_KQ; ti++)
        for (int li = 0; li < 3; li++) {
            const enum llm_type t = kq_types[ti];
            const int64_t ne0 = length(t, li), rows = 7;
            struct mat m;
            mat_make(&m, t, ne0, rows);
            float *x = malloc(sizeof(float) * (size_t)ne0), y[7], yr[7];
            for (int64_t i = 0; i < ne0; i++) /* outliers, as real activations have */
                x[i] = gauss() * (i % 97 == 0 ? 20.0f : 1.0f);
            cr_assert_eq(llm_matvec_ref(t, m.w, x, yr, ne0, 0, rows), LLM_OK);
            for (int64_t r = 0; r < rows; r++) {
                double S, B;
                bounds(&m, r, x, &S, &B);
                cr_assert(fabs(yr[r] - dot_deq(&m, r, x)) <= 2e-6 * S, "%s ne0 %lld: ref %g, double %g",
                          llm_type_name(t), (long long)ne0, yr[r], dot_deq(&m, r, x));
            }
            for (int isa = LLM_ISA_AVX2; isa <= (int)best; isa++) {
                llm_matmul_set_isa((enum llm_isa)isa);
                cr_assert_eq(llm_matvec(t, m.w, x, y, ne0, 0, rows), LLM_OK);
                for (int64_t r = 0; r < rows; r++) {
                    double S, B;
                    bounds(&m, r, x, &S, &B);
                    cr_assert(fabs(y[r] - yr[r]) <= B, "%s ne0 %lld isa %d row %lld: %g vs ref %g (bound %g)",
                              llm_type_name(t), (long long)ne0, isa, (long long)r, y[r], yr[r], B);
                }
            }
            llm_matmul_set_isa(LLM_ISA_AVX512);
            free(x);
            mat_free(&m);
        }
}

Test(matmul_kq, batch_invariant_bit_for_bit)
{
    const enum llm_isa best = llm_isa_detect();
    for (size_t ti = 0; ti < N_KQ; ti++) {
        const enum llm_type t = kq_types[ti];
        const int64_t ne0 = length(t, 1), rows = 21, nb = 11;
        struct mat m;
        mat_make(&m, t, ne0, rows);
        float *X = malloc(sizeof(float) * (size_t)(ne0 * nb));
        float *Y = malloc(sizeof(float) * (size_t)(rows * nb)), *y = malloc(sizeof(float) * rows);
        for (int64_t i = 0; i < ne0 * nb; i++)
            X[i] = gauss();
        for (int isa = LLM_ISA_REF; isa <= (int)best; isa++) {
            llm_matmul_set_isa((enum llm_isa)isa);
            /* the whole batch, then odd sub-batches and row ranges */
            cr_assert_eq(llm_matmul(t, m.w, X, Y, ne0, nb, rows, 0, rows), LLM_OK);
            for (int64_t b = 0; b < nb; b++) {
                cr_assert_eq(llm_matvec(t, m.w, X + b * ne0, y, ne0, 0, rows), LLM_OK);
                cr_assert(memcmp(y, Y + b * rows, sizeof(float) * rows) == 0,
                          "%s isa %d token %lld: batched differs from alone", llm_type_name(t), isa,
                          (long long)b);
            }
            float *Z = calloc((size_t)(rows * 3), sizeof(float));
            cr_assert_eq(llm_matmul(t, m.w, X + 5 * ne0, Z, ne0, 3, rows, 4, 17), LLM_OK);
            for (int64_t b = 0; b < 3; b++)
                cr_assert(memcmp(Z + b * rows + 4, Y + (5 + b) * rows + 4, sizeof(float) * 13) == 0,
                          "%s isa %d: rows 4-17 of tokens 5-7", llm_type_name(t), isa);
            /* the activation setting of the int8 types does not apply here */
            const int old = llm_matmul_set_act(LLM_ACT_Q8);
            cr_assert_eq(llm_matmul(t, m.w, X, Z, ne0, 3, rows, 0, rows), LLM_OK);
            llm_matmul_set_act(old);
            cr_assert(memcmp(Z, Y, sizeof(float) * (size_t)(3 * rows)) == 0, "%s act", llm_type_name(t));
            free(Z);
        }
        llm_matmul_set_isa(LLM_ISA_AVX512);
        free(X);
        free(Y);
        free(y);
        mat_free(&m);
    }
}

/* Q6_K's largest products: every code -32, every sub-scale -128, every
 * activation at the int16 maximum. Folded into the codes (c sc = 4096, as
 * Q3_K's sub-scales are), a 32-element block's int32 sum would overflow
 * (32 x 4096 x 32767 > 2^31); the int16 GEMM and decode keep the plain
 * codes and take a float step per half block (matmul_gemm.h s16), so the
 * result is the reference's, alone and batched, on every ISA. */
Test(matmul_kq, q6_k_largest_products_do_not_overflow)
{
    const int64_t ne0 = 768, rows = 21, nb = 11;
    const uint64_t rb = llm_type_row_bytes(LLM_TYPE_Q6_K, (uint64_t)ne0);
    uint8_t *w = calloc(rows, rb); /* ql = qh = 0: codes 0 - 32 */
    for (int64_t r = 0; r < rows; r++)
        for (int64_t b = 0; b < ne0 / 256; b++) {
            uint8_t *blk = w + (uint64_t)r * rb + (uint64_t)b * 210;
            memset(blk + 192, 0x80, 16);          /* sub-scales -128 */
            blk[208] = 0x00, blk[209] = 0x3c;     /* d = 1.0 (fp16) */
        }
    float *X = malloc(sizeof(float) * (size_t)(ne0 * nb)), *Y = malloc(sizeof(float) * (size_t)(rows * nb));
    float y[21], yr[21];
    for (int64_t i = 0; i < ne0 * nb; i++)
        X[i] = 1.0f;
    /* each element: 1.0 * -128 * -32 * 1.0 */
    const double want = 4096.0 * (double)ne0;
    const enum llm_isa best = llm_isa_detect();
    for (int isa = LLM_ISA_REF; isa <= (int)best; isa++) {
        llm_matmul_set_isa((enum llm_isa)isa);
        cr_assert_eq(llm_matvec_ref(LLM_TYPE_Q6_K, w, X, yr, ne0, 0, rows), LLM_OK);
        cr_assert_eq(llm_matvec(LLM_TYPE_Q6_K, w, X, y, ne0, 0, rows), LLM_OK);
        cr_assert_eq(llm_matmul(LLM_TYPE_Q6_K, w, X, Y, ne0, nb, rows, 0, rows), LLM_OK);
        for (int64_t r = 0; r < rows; r++) {
            cr_assert(fabs(yr[r] - want) <= 1e-6 * want, "ref row %lld: %g", (long long)r, yr[r]);
            cr_assert(fabs(y[r] - want) <= 1e-3 * want, "isa %d row %lld: %g, want %g", isa,
                      (long long)r, y[r], want);
            for (int64_t b = 0; b < nb; b++)
                cr_assert(memcmp(&Y[b * rows + r], &y[r], sizeof(float)) == 0,
                          "isa %d token %lld row %lld: %g batched, %g alone", isa, (long long)b,
                          (long long)r, Y[b * rows + r], y[r]);
        }
    }
    llm_matmul_set_isa(LLM_ISA_AVX512);
    free(w);
    free(X);
    free(Y);
}

Test(matmul_kq, refuses_partial_blocks)
{
    uint8_t w[144 * 2] = { 0 };
    float x[300] = { 0 }, y[2];
    cr_assert_eq(llm_matvec(LLM_TYPE_Q4_K, w, x, y, 300, 0, 1), LLM_E_INVALID);
    cr_assert(strstr(llm_error_detail(LLM_E_INVALID), "whole 256-element blocks of q4_k"), "%s",
              llm_error_detail(LLM_E_INVALID));
    cr_assert_eq(llm_matmul_simd_type(LLM_TYPE_Q6_K), LLM_SIMD_KQ);
}

/* The K-quants' interleaved copies (matmul.h x16: what the CPU
 * backend decodes on AVX-512): the layout round-trips to the rows byte for
 * byte, and every product on it gives the rows' bits, one token (the group
 * kernels) or many (the rows' GEMM), on every ISA, so a token's result
 * does not depend on the layout either. Rows must be whole super-blocks
 * and whole groups of 16. */
Test(matmul_kq, k_interleaved_is_the_rows_bit_for_bit)
{
    const enum llm_isa best = llm_isa_detect();
    const int64_t ne0 = 768, rows = 48, nb = 7;
    cr_assert(!llm_x16_ok(LLM_TYPE_Q4_K, 576, 16)); /* not whole super-blocks */
    cr_assert(!llm_x16_ok(LLM_TYPE_Q4_K, ne0, 24));
    cr_assert(!llm_x16_ok(LLM_TYPE_Q8_K, ne0, rows)); /* no group kernel */
    const enum llm_type types[] = { LLM_TYPE_Q2_K, LLM_TYPE_Q3_K, LLM_TYPE_Q4_K, LLM_TYPE_Q5_K,
                                    LLM_TYPE_Q6_K, LLM_TYPE_IQ4_XS };
    for (int ti = 0; ti < 6; ti++) {
        const enum llm_type t = types[ti];
        cr_assert(llm_x16_ok(t, ne0, rows));
        struct mat m;
        mat_make(&m, t, ne0, rows);
        uint8_t *P = malloc(m.rb * (uint64_t)rows), *back = malloc(m.rb * (uint64_t)rows);
        cr_assert_eq(llm_x16_pack(t, m.w, ne0, rows, P), LLM_OK);
        /* unit u of row r of super-block k at 32 u + 2 r of its group's
         * block (here group 1, super-block 2) */
        const uint64_t BB = llm_type_traits(t)->block_bytes;
        for (int r = 0; r < 16; r++)
            for (uint64_t u = 0; u < BB / 2; u++)
                cr_assert_eq(memcmp(P + (3 + 2) * 16 * BB + 32 * u + 2 * (uint64_t)r,
                                    m.w + (uint64_t)(16 + r) * m.rb + 2 * BB + 2 * u, 2), 0,
                             "%s row %d unit %llu", llm_type_name(t), 16 + r, (unsigned long long)u);
        cr_assert_eq(llm_x16_unpack(t, P, ne0, 0, rows, back), LLM_OK);
        cr_assert(memcmp(back, m.w, m.rb * (uint64_t)rows) == 0);
        float *X = malloc(sizeof(float) * (size_t)(ne0 * nb));
        float *Y = malloc(sizeof(float) * (size_t)(rows * nb));
        float *Z = malloc(sizeof(float) * (size_t)(rows * nb));
        for (int64_t i = 0; i < ne0 * nb; i++)
            X[i] = gauss() * (i % 97 == 0 ? 20.0f : 1.0f);
        for (int isa = LLM_ISA_AVX2; isa <= (int)best; isa++) {
            llm_matmul_set_isa((enum llm_isa)isa);
            for (int64_t b = 0; b < nb; b++) {
                cr_assert_eq(llm_matvec(t, m.w, X + b * ne0, Y, ne0, 0, rows), LLM_OK);
                cr_assert_eq(llm_matvec_x16(t, P, X + b * ne0, Z, ne0, 0, rows), LLM_OK);
                cr_assert(memcmp(Y, Z, sizeof(float) * rows) == 0, "%s isa %d token %lld: decode",
                          llm_type_name(t), isa, (long long)b);
            }
            cr_assert_eq(llm_matmul(t, m.w, X, Y, ne0, nb, rows, 0, rows), LLM_OK);
            cr_assert_eq(llm_matmul_x16(t, P, X, Z, ne0, nb, rows, 16, 48), LLM_OK);
            for (int64_t b = 0; b < nb; b++)
                cr_assert(memcmp(Y + b * rows + 16, Z + b * rows + 16, sizeof(float) * 32) == 0,
                          "%s isa %d token %lld: batch", llm_type_name(t), isa, (long long)b);
            /* and the group kernel gives each token of the batch its bits */
            cr_assert_eq(llm_matvec_x16(t, P, X + 3 * ne0, Z, ne0, 16, 32), LLM_OK);
            cr_assert(memcmp(Z + 16, Y + 3 * rows + 16, sizeof(float) * 16) == 0,
                      "%s isa %d: rows 16-31", llm_type_name(t), isa);
        }
        llm_matmul_set_isa(LLM_ISA_AVX512);
        free(X);
        free(Y);
        free(Z);
        free(P);
        free(back);
        mat_free(&m);
    }
}

/* Rows wider than the group kernels' stack buffers (AVX2's split token for
 * Q2_K and Q3_K holds 2048 elements; wider rows take memory) decode on the
 * copy to the rows' bits too, on every ISA. */
Test(matmul_kq, k_interleaved_wide_rows_bit_for_bit)
{
    const enum llm_isa best = llm_isa_detect();
    const int64_t ne0 = 4096, rows = 16;
    const enum llm_type types[] = { LLM_TYPE_Q2_K, LLM_TYPE_Q3_K, LLM_TYPE_Q6_K };
    for (int ti = 0; ti < 3; ti++) {
        const enum llm_type t = types[ti];
        struct mat m;
        mat_make(&m, t, ne0, rows);
        uint8_t *P = malloc(m.rb * (uint64_t)rows);
        cr_assert_eq(llm_x16_pack(t, m.w, ne0, rows, P), LLM_OK);
        float *x = malloc(sizeof(float) * (size_t)ne0), y[16], z[16];
        for (int64_t i = 0; i < ne0; i++)
            x[i] = gauss();
        for (int isa = LLM_ISA_AVX2; isa <= (int)best; isa++) {
            llm_matmul_set_isa((enum llm_isa)isa);
            cr_assert_eq(llm_matvec(t, m.w, x, y, ne0, 0, rows), LLM_OK);
            cr_assert_eq(llm_matvec_x16(t, P, x, z, ne0, 0, rows), LLM_OK);
            cr_assert(memcmp(y, z, sizeof y) == 0, "%s isa %d", llm_type_name(t), isa);
        }
        llm_matmul_set_isa(LLM_ISA_AVX512);
        free(x);
        free(P);
        mat_free(&m);
    }
}
