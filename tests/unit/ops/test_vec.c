/* test_vec.c: the attention vector kernels of lib/ops/vec.c, every variant
 * this CPU runs, against double arithmetic on the same inputs. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../../lib/common/fp16.h"
#include "../../../lib/kv/kv.h"
#include "../../../lib/ops/matmul_impl.h"
#include "../../../lib/ops/vec.h"
#include "../../../lib/quant/quant.h"
#include "../helpers.h"

static uint64_t rng = 1;

static float rnd(void)
{
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((double)(rng >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

/* the ISAs to try: the reference, then each SIMD variant the CPU runs */
static int isas(enum llm_isa *out)
{
    int n = 0;
    for (int i = LLM_ISA_REF; i <= (int)llm_isa_detect(); i++)
        out[n++] = (enum llm_isa)i;
    return n;
}

/* one row through the multi-row kernels */
static float dot32(const float *a, const float *b, int64_t n)
{
    float s;
    llm_vec_dots_f32(a, b, n, 1, n, &s);
    return s;
}

static float dot16(const float *a, const uint16_t *b, int64_t n)
{
    float s;
    llm_vec_dots_f16(a, b, n, 1, n, &s);
    return s;
}

static void restore(void)
{
    llm_matmul_set_isa(LLM_ISA_AVX512);
}

/* lengths around every vector width and unroll (8, 16, 32, 64) */
static const int64_t lens[] = { 0, 1, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 100, 128, 257 };
#define N_LENS (sizeof lens / sizeof lens[0])

/* |dot - exact| <= (n + 2) 2^-24 S: float sums of n terms in any order */
Test(vec, dot_within_float_bound, .fini = restore)
{
    enum llm_isa is[3];
    int ni = isas(is);
    for (int ii = 0; ii < ni; ii++) {
        llm_matmul_set_isa(is[ii]);
        for (size_t li = 0; li < N_LENS; li++) {
            const int64_t n = lens[li];
            float a[257], b[257];
            uint16_t h[257];
            for (int64_t i = 0; i < n; i++) {
                a[i] = rnd();
                h[i] = llm_fp32_to_fp16(rnd());
                b[i] = llm_fp16_to_fp32(h[i]);
            }
            double exact = 0, S = 0;
            for (int64_t i = 0; i < n; i++) {
                exact += (double)a[i] * b[i];
                S += fabs((double)a[i] * b[i]);
            }
            const double tol = (double)(n + 2) * ldexp(1.0, -24) * S;
            const float d32 = dot32(a, b, n), d16 = dot16(a, h, n);
            cr_assert(fabs(d32 - exact) <= tol, "isa %d n=%lld f32: %.9g vs %.9g", is[ii],
                      (long long)n, d32, exact);
            cr_assert(fabs(d16 - exact) <= tol, "isa %d n=%lld f16: %.9g vs %.9g", is[ii],
                      (long long)n, d16, exact);
        }
    }
}

/* With b a unit vector the dot is a[j] exactly: every position, tails
 * included, is read once and from the right place. */
Test(vec, dot_unit_vectors_pick_each_element, .fini = restore)
{
    enum llm_isa is[3];
    int ni = isas(is);
    float a[100], b[100];
    uint16_t h[100];
    for (int i = 0; i < 100; i++)
        a[i] = (float)(i + 1) * 0.25f;
    for (int ii = 0; ii < ni; ii++) {
        llm_matmul_set_isa(is[ii]);
        for (int64_t n = 1; n <= 100; n += (n < 70 ? 1 : 29))
            for (int64_t j = 0; j < n; j++) {
                memset(b, 0, sizeof b);
                memset(h, 0, sizeof h);
                b[j] = 1.0f;
                h[j] = llm_fp32_to_fp16(1.0f);
                /* a value past n that must not be read into the sum */
                if (n < 100) {
                    b[n] = 1e6f;
                    h[n] = llm_fp32_to_fp16(1000.0f);
                }
                cr_assert_eq(dot32(a, b, n), a[j], "isa %d n=%lld j=%lld", is[ii],
                             (long long)n, (long long)j);
                cr_assert_eq(dot16(a, h, n), a[j], "isa %d n=%lld j=%lld", is[ii],
                             (long long)n, (long long)j);
            }
    }
}

/* y + a x, one or two roundings, and nothing written past n */
Test(vec, axpy_within_rounding_and_in_bounds, .fini = restore)
{
    enum llm_isa is[3];
    int ni = isas(is);
    for (int ii = 0; ii < ni; ii++) {
        llm_matmul_set_isa(is[ii]);
        for (size_t li = 0; li < N_LENS; li++) {
            const int64_t n = lens[li];
            float y0[258], y[258], x[257], xf[257];
            uint16_t h[257];
            const float a = rnd() * 3.0f;
            for (int64_t i = 0; i < n; i++) {
                y0[i] = rnd();
                x[i] = rnd();
                h[i] = llm_fp32_to_fp16(x[i]);
                xf[i] = llm_fp16_to_fp32(h[i]);
            }
            for (int k = 0; k < 2; k++) {
                memcpy(y, y0, sizeof(float) * (size_t)n);
                y[n] = 12345.0f;
                if (k == 0)
                    llm_vec_axpys_f32(y, &a, x, n, 1, n);
                else
                    llm_vec_axpys_f16(y, &a, h, n, 1, n);
                const float *xs = k == 0 ? x : xf;
                for (int64_t i = 0; i < n; i++) {
                    const double want = (double)y0[i] + (double)a * xs[i];
                    const double tol = ldexp(1.0, -23) * (fabs(y0[i]) + fabs(a * xs[i]));
                    cr_assert(fabs(y[i] - want) <= tol, "isa %d n=%lld %s i=%lld: %.9g vs %.9g",
                              is[ii], (long long)n, k ? "f16" : "f32", (long long)i, y[i],
                              want);
                }
                cr_assert_eq(y[n], 12345.0f, "isa %d n=%lld: wrote past n", is[ii],
                             (long long)n);
            }
        }
    }
}

/* The multi-row kernels: m rows ldk apart, with a poison value (1e30) in
 * the gap after each row's n elements that must not reach a sum; every
 * row count around the AVX2 and AVX-512 groups (8, 16), every length. */
static const int64_t row_counts[] = { 0, 1, 2, 7, 8, 9, 15, 16, 17, 33 };
#define N_ROWS (sizeof row_counts / sizeof row_counts[0])
#define LD_MAX 260

/* m rows of n random values, ld apart, poison in the gaps: F as floats,
 * H as fp16 (60000 in the gaps) and Ff the fp16 values back as floats */
static void rows_make(int64_t m, int64_t n, int64_t ld, float *F, float *Ff, uint16_t *H)
{
    for (int64_t r = 0; r < m; r++)
        for (int64_t i = 0; i < ld; i++) {
            const float v = i < n ? rnd() : 1e30f;
            H[r * ld + i] = llm_fp32_to_fp16(i < n ? v : 60000.0f);
            F[r * ld + i] = v;
            Ff[r * ld + i] = llm_fp16_to_fp32(H[r * ld + i]);
        }
}

Test(vec, dots_within_float_bound_row_by_row, .fini = restore)
{
    enum llm_isa is[3];
    int ni = isas(is);
    static float K[33 * LD_MAX], Kf[33 * LD_MAX];
    static uint16_t H[33 * LD_MAX];
    float q[257], s32[34], s16[34];
    for (int ii = 0; ii < ni; ii++) {
        llm_matmul_set_isa(is[ii]);
        for (size_t li = 0; li < N_LENS; li++)
            for (size_t mi = 0; mi < N_ROWS; mi++) {
                const int64_t n = lens[li], m = row_counts[mi], ld = n + 3;
                for (int64_t i = 0; i < n; i++)
                    q[i] = rnd();
                rows_make(m, n, ld, K, Kf, H);
                s32[m] = s16[m] = 12345.0f;
                llm_vec_dots_f32(q, K, ld, m, n, s32);
                llm_vec_dots_f16(q, H, ld, m, n, s16);
                for (int64_t r = 0; r < m; r++)
                    for (int k = 0; k < 2; k++) {
                        const float *b = (k ? Kf : K) + r * ld;
                        double exact = 0, S = 0;
                        for (int64_t i = 0; i < n; i++) {
                            exact += (double)q[i] * b[i];
                            S += fabs((double)q[i] * b[i]);
                        }
                        const double tol = (double)(n + 2) * ldexp(1.0, -24) * S;
                        const float got = k ? s16[r] : s32[r];
                        cr_assert(fabs(got - exact) <= tol,
                                  "isa %d n=%lld m=%lld row %lld %s: %.9g vs %.9g", is[ii],
                                  (long long)n, (long long)m, (long long)r, k ? "f16" : "f32",
                                  got, exact);
                    }
                cr_assert(s32[m] == 12345.0f && s16[m] == 12345.0f,
                          "isa %d n=%lld m=%lld: wrote past m", is[ii], (long long)n,
                          (long long)m);
            }
    }
}

Test(vec, axpys_within_rounding_and_in_bounds, .fini = restore)
{
    enum llm_isa is[3];
    int ni = isas(is);
    static float V[33 * LD_MAX], Vf[33 * LD_MAX];
    static uint16_t H[33 * LD_MAX];
    float y0[258], y[258], w[33];
    for (int ii = 0; ii < ni; ii++) {
        llm_matmul_set_isa(is[ii]);
        for (size_t li = 0; li < N_LENS; li++)
            for (size_t mi = 0; mi < N_ROWS; mi++) {
                const int64_t n = lens[li], m = row_counts[mi], ld = n + 3;
                for (int64_t i = 0; i < n; i++)
                    y0[i] = rnd();
                for (int64_t r = 0; r < m; r++)
                    w[r] = rnd() * 2.0f;
                rows_make(m, n, ld, V, Vf, H);
                for (int k = 0; k < 2; k++) {
                    memcpy(y, y0, sizeof(float) * (size_t)n);
                    y[n] = 12345.0f;
                    if (k == 0)
                        llm_vec_axpys_f32(y, w, V, ld, m, n);
                    else
                        llm_vec_axpys_f16(y, w, H, ld, m, n);
                    const float *b = k ? Vf : V;
                    for (int64_t i = 0; i < n; i++) {
                        double want = y0[i], S = fabs(y0[i]);
                        for (int64_t r = 0; r < m; r++) {
                            want += (double)w[r] * b[r * ld + i];
                            S += fabs((double)w[r] * b[r * ld + i]);
                        }
                        const double tol = (double)(m + 2) * ldexp(1.0, -24) * S;
                        cr_assert(fabs(y[i] - want) <= tol,
                                  "isa %d n=%lld m=%lld %s i=%lld: %.9g vs %.9g", is[ii],
                                  (long long)n, (long long)m, k ? "f16" : "f32", (long long)i,
                                  y[i], want);
                    }
                    cr_assert_eq(y[n], 12345.0f, "isa %d n=%lld m=%lld: wrote past n", is[ii],
                                 (long long)n, (long long)m);
                }
            }
    }
}

/* Sums of the rows X (m, n; ldx apart) of a test's type, as floats: each
 * s[r] within (n + 2) 2^-24 of the sum of |products| of the exact dot; each
 * y[i] within (m + slack) 2^-24 of the sum of its |terms|; nothing written
 * past m or n. */
static void check_dots(int isa, const float *q, const float *X, int64_t ldx, int64_t m, int64_t n,
                       const float *s)
{
    for (int64_t r = 0; r < m; r++) {
        double exact = 0, S = 0;
        for (int64_t i = 0; i < n; i++) {
            exact += (double)q[i] * X[r * ldx + i];
            S += fabs((double)q[i] * X[r * ldx + i]);
        }
        cr_assert(fabs(s[r] - exact) <= (double)(n + 2) * ldexp(1.0, -24) * S,
                  "isa %d n=%lld m=%lld row %lld: %.9g vs %.9g", isa, (long long)n, (long long)m,
                  (long long)r, s[r], exact);
    }
    cr_assert_eq(s[m], 12345.0f, "isa %d: wrote past m", isa);
}

static void check_axpys(int isa, const float *y0, const float *w, const float *X, int64_t ldx,
                        int64_t m, int64_t n, const float *y, int slack)
{
    for (int64_t i = 0; i < n; i++) {
        double want = y0[i], S = fabs(y0[i]);
        for (int64_t r = 0; r < m; r++) {
            want += (double)w[r] * X[r * ldx + i];
            S += fabs((double)w[r] * X[r * ldx + i]);
        }
        cr_assert(fabs(y[i] - want) <= (double)(m + slack) * ldexp(1.0, -24) * S,
                  "isa %d n=%lld m=%lld i=%lld: %.9g vs %.9g", isa, (long long)n, (long long)m,
                  (long long)i, y[i], want);
    }
    cr_assert_eq(y[n], 12345.0f, "isa %d: wrote past n", isa);
}

/* bfloat16 rows: the same bounds over the values they hold, poison (1e30,
 * which bfloat16 keeps) in the gaps, every row count and length. */
Test(vec, bf16_dots_and_axpys_within_bounds, .fini = restore)
{
    enum llm_isa is[3];
    int ni = isas(is);
    static uint16_t B[33 * LD_MAX];
    static float Bf[33 * LD_MAX];
    float q[257], s[34], y0[258], y[258], w[33];
    for (int ii = 0; ii < ni; ii++) {
        llm_matmul_set_isa(is[ii]);
        for (size_t li = 0; li < N_LENS; li++)
            for (size_t mi = 0; mi < N_ROWS; mi++) {
                const int64_t n = lens[li], m = row_counts[mi], ld = n + 3;
                for (int64_t r = 0; r < m; r++)
                    for (int64_t i = 0; i < ld; i++) {
                        B[r * ld + i] = llm_fp32_to_bf16(i < n ? rnd() : 1e30f);
                        Bf[r * ld + i] = llm_bf16_to_fp32(B[r * ld + i]);
                    }
                for (int64_t i = 0; i < n; i++)
                    q[i] = rnd(), y0[i] = rnd();
                for (int64_t r = 0; r < m; r++)
                    w[r] = rnd() * 2.0f;
                s[m] = 12345.0f;
                llm_vec_dots_bf16(q, B, ld, m, n, s);
                check_dots(is[ii], q, Bf, ld, m, n, s);
                memcpy(y, y0, sizeof(float) * (size_t)n);
                y[n] = 12345.0f;
                llm_vec_axpys_bf16(y, w, B, ld, m, n);
                check_axpys(is[ii], y0, w, Bf, ld, m, n, y, 2);
            }
    }
}

/* Rows of blocks of 32 (q8_0, q4_0: a KV head as blocks of codes and
 * their fp16 scale), ld bytes apart (even: the blocks' scales are 2-byte
 * aligned, as the cache's rows of 34- and 18-byte blocks are) with 0x7f
 * poison bytes in the gaps: within the float bounds of the values the
 * blocks hold (as dequantized), every row count, heads of 32 to 256. */
typedef void (*dots_fn)(const float *, const uint8_t *, int64_t, int64_t, int64_t, float *);
typedef void (*axpys_fn)(float *, const float *, const uint8_t *, int64_t, int64_t, int64_t);

static void check_block_rows(enum llm_type t, int64_t block_bytes, dots_fn dots, axpys_fn axpys)
{
    enum llm_isa is[3];
    int ni = isas(is);
    static uint8_t B[33 * 300];
    static float D[33 * 256];
    float q[256], x[256], s[34], y0[257], y[257], w[33];
    const int64_t heads[] = { 32, 64, 96, 128, 256 };
    for (int ii = 0; ii < ni; ii++) {
        llm_matmul_set_isa(is[ii]);
        for (size_t hi = 0; hi < sizeof heads / sizeof heads[0]; hi++)
            for (size_t mi = 0; mi < N_ROWS; mi++) {
                const int64_t n = heads[hi], m = row_counts[mi], rb = n / 32 * block_bytes,
                              ld = rb + 6;
                memset(B, 0x7f, sizeof B);
                for (int64_t r = 0; r < m; r++) {
                    for (int64_t i = 0; i < n; i++)
                        x[i] = rnd() * (float)(r + 1);
                    cr_assert_eq(llm_quantize_row(t, x, B + r * ld, n), LLM_OK);
                    cr_assert_eq(llm_dequantize_row(t, B + r * ld, D + r * n, n), LLM_OK);
                }
                for (int64_t i = 0; i < n; i++)
                    q[i] = rnd(), y0[i] = rnd();
                for (int64_t r = 0; r < m; r++)
                    w[r] = rnd();
                s[m] = 12345.0f;
                dots(q, B, ld, m, n, s);
                check_dots(is[ii], q, D, n, m, n, s);
                memcpy(y, y0, sizeof(float) * (size_t)n);
                y[n] = 12345.0f;
                axpys(y, w, B, ld, m, n);
                /* c = w d is rounded once more than a float row's product */
                check_axpys(is[ii], y0, w, D, n, m, n, y, 3);
            }
    }
}

Test(vec, q8_0_dots_and_axpys_within_bounds, .fini = restore)
{
    check_block_rows(LLM_TYPE_Q8_0, 34, llm_vec_dots_q8_0, llm_vec_axpys_q8_0);
}

Test(vec, q4_0_dots_and_axpys_within_bounds, .fini = restore)
{
    check_block_rows(LLM_TYPE_Q4_0, 18, llm_vec_dots_q4_0, llm_vec_axpys_q4_0);
}

/* q4ch key blocks (kv.h: a head's channels over bs tokens): the rounding
 * within half a step of each channel's range (plus the fp16 rounding of
 * its scale and minimum), and the dots of every ISA against the
 * dequantized keys, within the float bound of the terms the kernels add
 * (q_i min_i and q_i scale_i code_ti), never writing past bs. */
Test(vec, q4ch_blocks_round_and_dot_within_bounds, .fini = restore)
{
    enum llm_isa is[3];
    int ni = isas(is);
    static uint16_t rows[128 * 256];
    static uint8_t blk[256 * (4 + 64)];
    static float D[128 * 256];
    float q[256], s[129];
    const int64_t heads[] = { 8, 32, 64, 72, 256 };
    const int32_t sizes[] = { 16, 32, 128 };
    for (size_t hi = 0; hi < sizeof heads / sizeof heads[0]; hi++)
        for (size_t bi = 0; bi < sizeof sizes / sizeof sizes[0]; bi++) {
            const int64_t n = heads[hi];
            const int32_t bs = sizes[bi];
            /* channel 3 large, channel 5 constant, as keys have */
            for (int32_t t = 0; t < bs; t++)
                for (int64_t i = 0; i < n; i++)
                    rows[t * n + i] = llm_fp32_to_fp16(i == 5 ? 0.75f
                                                       : rnd() * (i == 3 ? 40.0f : 1.0f) + 0.1f * (float)i);
            llm_kv_q4ch_quantize(rows, n, bs, 1, blk);
            llm_kv_q4ch_dequantize(blk, n, bs, 1, D);
            for (int64_t i = 0; i < n; i++) {
                float lo = INFINITY, hi_ = -INFINITY;
                for (int32_t t = 0; t < bs; t++) {
                    const float x = llm_fp16_to_fp32(rows[t * n + i]);
                    lo = x < lo ? x : lo, hi_ = x > hi_ ? x : hi_;
                }
                const double tol = 0.5 * (hi_ - lo) / 15.0 * 1.01 + 1e-3 * (fabs(lo) + fabs(hi_));
                for (int32_t t = 0; t < bs; t++)
                    cr_assert(fabs(D[t * n + i] - llm_fp16_to_fp32(rows[t * n + i])) <= tol,
                              "n=%lld bs=%d channel %lld token %d: %g for %g", (long long)n, bs,
                              (long long)i, t, D[t * n + i], llm_fp16_to_fp32(rows[t * n + i]));
            }
            for (int64_t i = 0; i < n; i++)
                q[i] = rnd();
            const uint16_t *sc = (const uint16_t *)blk, *mn = sc + n;
            for (int ii = 0; ii < ni; ii++) {
                llm_matmul_set_isa(is[ii]);
                s[bs] = 12345.0f;
                llm_vec_dots_q4ch(q, blk, n, bs, s);
                for (int32_t t = 0; t < bs; t++) {
                    double exact = 0, S = 0;
                    for (int64_t i = 0; i < n; i++) {
                        const double m = llm_fp16_to_fp32(mn[i]), c = D[t * n + i] - m;
                        exact += (double)q[i] * D[t * n + i];
                        S += fabs(q[i] * m) + fabs(q[i] * c) + fabs(q[i] * llm_fp16_to_fp32(sc[i]));
                    }
                    cr_assert(fabs(s[t] - exact) <= (double)(n + 4) * ldexp(1.0, -24) * S,
                              "isa %d n=%lld bs=%d token %d: %.9g vs %.9g", is[ii], (long long)n,
                              bs, t, s[t], exact);
                }
                cr_assert_eq(s[bs], 12345.0f, "isa %d: wrote past bs", is[ii]);
            }
        }
}

/* fp8 e4m3 rows (bytes, no scale): every code but NaN's through the
 * kernels (the cache never stores NaN: stores saturate), and the float
 * bounds over random values, every row count and length. */
Test(vec, fp8_dots_and_axpys_within_bounds, .fini = restore)
{
    enum llm_isa is[3];
    int ni = isas(is);
    static uint8_t B[33 * LD_MAX];
    static float Bf[33 * LD_MAX];
    float q[257], s[34], y0[258], y[258], w[33];
    for (int ii = 0; ii < ni; ii++) {
        llm_matmul_set_isa(is[ii]);
        /* each code once: 254 codes as 16 rows of 16 (NaN's two codes as 0) */
        uint8_t all[256];
        float allf[256], one[16], got[16];
        for (int c = 0; c < 256; c++) {
            all[c] = (c & 0x7f) == 0x7f ? 0 : (uint8_t)c;
            allf[c] = llm_fp8_e4m3_to_fp32(all[c]);
        }
        for (int r = 0; r < 16; r++)
            for (int e = 0; e < 16; e++) { /* unit vector e picks element e of each row */
                for (int i = 0; i < 16; i++)
                    one[i] = i == e ? 1.0f : 0.0f;
                llm_vec_dots_fp8(one, all, 16, 16, 16, got);
                cr_assert_eq(got[r], allf[r * 16 + e], "isa %d code 0x%02x: %g vs %g", is[ii],
                             r * 16 + e, got[r], allf[r * 16 + e]);
            }
        for (size_t li = 0; li < N_LENS; li++)
            for (size_t mi = 0; mi < N_ROWS; mi++) {
                const int64_t n = lens[li], m = row_counts[mi], ld = n + 3;
                for (int64_t r = 0; r < m; r++)
                    for (int64_t i = 0; i < ld; i++) {
                        B[r * ld + i] = i < n ? llm_fp32_to_fp8_e4m3(rnd() * 300.0f) : 0x7e;
                        Bf[r * ld + i] = llm_fp8_e4m3_to_fp32(B[r * ld + i]);
                    }
                for (int64_t i = 0; i < n; i++)
                    q[i] = rnd(), y0[i] = rnd();
                for (int64_t r = 0; r < m; r++)
                    w[r] = rnd() * 2.0f;
                s[m] = 12345.0f;
                llm_vec_dots_fp8(q, B, ld, m, n, s);
                check_dots(is[ii], q, Bf, ld, m, n, s);
                memcpy(y, y0, sizeof(float) * (size_t)n);
                y[n] = 12345.0f;
                llm_vec_axpys_fp8(y, w, B, ld, m, n);
                check_axpys(is[ii], y0, w, Bf, ld, m, n, y, 2);
            }
    }
}

/* The 32-point Walsh-Hadamard transform: against the matrix H[i][j] =
 * (-1)^popcount(i & j) / sqrt(32) in double, orthonormal (norms kept),
 * its own inverse within rounding, blocks independent. */
Test(vec, hadamard32_is_the_orthonormal_transform)
{
    float x[96], y[96];
    for (int i = 0; i < 96; i++)
        x[i] = rnd() * (i % 7 == 3 ? 50.0f : 1.0f); /* a few large channels */
    memcpy(y, x, sizeof x);
    llm_vec_hadamard32(y, 96);
    for (int b = 0; b < 3; b++) {
        double n0 = 0, n1 = 0;
        for (int i = 0; i < 32; i++) {
            double want = 0, S = 0;
            for (int j = 0; j < 32; j++) {
                const double h = (__builtin_popcount((unsigned)(i & j)) & 1 ? -1.0 : 1.0) /
                                 sqrt(32.0);
                want += h * x[32 * b + j];
                S += fabs(h * x[32 * b + j]);
            }
            cr_assert(fabs(y[32 * b + i] - want) <= 8 * ldexp(1.0, -24) * S, "block %d row %d: "
                      "%.9g vs %.9g", b, i, y[32 * b + i], want);
            n0 += (double)x[32 * b + i] * x[32 * b + i];
            n1 += (double)y[32 * b + i] * y[32 * b + i];
        }
        cr_assert(fabs(n1 - n0) <= 1e-5 * n0, "block %d: norm %g to %g", b, n0, n1);
    }
    llm_vec_hadamard32(y, 96);
    for (int i = 0; i < 96; i++)
        cr_assert(fabsf(y[i] - x[i]) <= 1e-5f * (fabsf(x[i]) + 1.0f), "%d: %g back to %g", i, x[i], y[i]);
}

/* The fp16 rounding of every variant gives the reference's bits (fp16.h's
 * conversion) on every 251st float bit pattern, both signs: ties to even,
 * subnormals, the overflow edge at 65520, infinities and NaN payloads,
 * at lengths around the vector widths. */
Test(vec, to_f16_is_the_reference_rounding, .fini = restore)
{
    enum llm_isa is[3];
    int ni = isas(is);
    enum { N = 4099 };
    static float x[N];
    static uint32_t u[N]; /* x's bits */
    static uint16_t y[N];
    /* a start in each region that matters, then a stride through all */
    const uint32_t starts[] = { 0x00000000u, 0x33000000u, 0x387fc000u, 0x38800000u,
                                0x477fe000u, 0x477ff000u, 0x7f800000u, 0x7fc01234u,
                                0x3f801000u, 0x3f803000u };
    for (int ii = 0; ii < ni; ii++) {
        llm_matmul_set_isa(is[ii]);
        for (size_t si = 0; si < sizeof starts / sizeof starts[0]; si++)
            for (uint64_t base = starts[si]; base < starts[si] + 0x100000000ull; base += 0x4000000ull) {
                for (int i = 0; i < N; i++) {
                    u[i] = (uint32_t)(base + (uint64_t)i * (i < 64 ? 1 : 251));
                    if (i & 1)
                        u[i] ^= 0x80000000u;
                }
                memcpy(x, u, sizeof x);
                for (size_t li = 0; li < N_LENS; li++) { /* short rows: the tails */
                    uint16_t t[257];
                    llm_vec_to_f16(x, t, lens[li]);
                    for (int64_t i = 0; i < lens[li]; i++)
                        cr_assert_eq(t[i], llm_fp32_to_fp16(x[i]), "isa %d n %lld: %08x", is[ii],
                                     (long long)lens[li], u[i]);
                }
                llm_vec_to_f16(x, y, N);
                for (int i = 0; i < N; i++)
                    cr_assert_eq(y[i], llm_fp32_to_fp16(x[i]), "isa %d: %08x gives %04x, not %04x",
                                 is[ii], u[i], y[i], llm_fp32_to_fp16(x[i]));
            }
    }
}

/* A gate g = f(g) u: within 4e-7 of the exact form (relative to max(|x|,
 * 1) |u|) over -30..30 and the extremes, the SIMD variants the reference's
 * bits, and each element's bits the same at any position and length (the
 * tails). */
static void check_gate(void (*ref)(float *, const float *, int64_t),
                       void (*gate)(float *, const float *, int64_t), double (*exact)(double))
{
    enum llm_isa is[3];
    int ni = isas(is);
    enum { N = 4001 };
    static float x[N], u[N], g[N], want[N];
    for (int i = 0; i < N; i++) {
        x[i] = -30.0f + 60.0f * (float)i / (N - 1);
        u[i] = 0.5f + (float)(i % 7) * 0.25f;
    }
    x[0] = -1e30f, x[1] = 1e30f, x[2] = 0.0f, x[3] = -0.0f, x[4] = 1e-30f, x[5] = -3.5f;
    memcpy(want, x, sizeof x);
    ref(want, u, N);
    for (int i = 0; i < N; i++) {
        const double e = exact(x[i]) * u[i], tol = 4e-7 * fmax(fabs((double)x[i]), 1.0) * u[i];
        cr_assert(fabs(want[i] - e) <= tol, "x %g: %.9g, exact %.9g", x[i], want[i], e);
    }
    for (int ii = 0; ii < ni; ii++) {
        llm_matmul_set_isa(is[ii]);
        memcpy(g, x, sizeof x);
        gate(g, u, N);
        cr_assert(!memcmp(g, want, sizeof g), "isa %d: not the reference's bits", is[ii]);
        for (size_t li = 0; li < N_LENS; li++)
            for (int off = 0; off < 9; off += 4) {
                float t[300];
                memcpy(t, x + 100 + off, (size_t)lens[li] * sizeof(float));
                gate(t, u + 100 + off, lens[li]);
                cr_assert(!memcmp(t, want + 100 + off, (size_t)lens[li] * sizeof(float)),
                          "isa %d: %lld elements at %d differ", is[ii], (long long)lens[li],
                          100 + off);
            }
    }
}

/* GELU's tanh form and SiLU, exactly */
static double gelu_exact(double x)
{
    return 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}

static double silu_exact(double x)
{
    return x / (1.0 + exp(-x));
}

/* Gemma's GELU gate */
Test(vec, geglu_close_to_exact_and_the_same_anywhere, .fini = restore)
{
    check_gate(llm_vec_geglu_ref, llm_vec_geglu, gelu_exact);
}

/* the SwiGLU gate */
Test(vec, swiglu_close_to_exact_and_the_same_anywhere, .fini = restore)
{
    check_gate(llm_vec_swiglu_ref, llm_vec_swiglu, silu_exact);
}

/* Attention's softmax: within (n / 8 + 8) 2^-23 of the exact softmax (in
 * double, relative to each value) for windows [lo, hi) of every length
 * and start modulo 8, with and without Gemma 2's soft cap; each SIMD
 * variant the reference's bits; the scores outside the window untouched. */
Test(vec, softmax_close_to_exact_and_the_reference_bits, .fini = restore)
{
    enum llm_isa is[3];
    int ni = isas(is);
    enum { N = 1100 };
    static float x[N], ref[N], got[N];
    static double want[N];
    static const int64_t wins[][2] = { { 0, 1 },  { 3, 4 },   { 5, 7 },    { 0, 8 },    { 1, 9 },
                                       { 7, 24 }, { 8, 17 },  { 13, 100 }, { 0, 1000 }, { 77, 1100 },
                                       { 9, 10 }, { 40, 48 } };
    /* several draws: the order of a sum's terms seldom changes its
     * rounding here (one draw in several catches the two halves of
     * softmax_avx512's chunk added the other way round) */
    for (int draw = 0; draw < 16; draw++) {
        rng = 11 + (uint64_t)draw;
        for (int i = 0; i < N; i++)
            x[i] = 40.0f * rnd();
        for (size_t w = 0; w < sizeof wins / sizeof wins[0]; w++)
            for (int cap = 0; cap < 2; cap++) {
                const int64_t lo = wins[w][0], hi = wins[w][1];
                const float scale = 0.125f, softcap = cap ? 5.0f : 0.0f;
                double mx = -INFINITY, sum = 0;
                for (int64_t p = lo; p < hi; p++) {
                    double v = (double)x[p] * scale;
                    if (cap)
                        v = softcap * tanh(v / softcap);
                    want[p] = v;
                    mx = v > mx ? v : mx;
                }
                for (int64_t p = lo; p < hi; p++)
                    sum += want[p] = exp(want[p] - mx);
                memcpy(ref, x, sizeof x);
                llm_vec_softmax_ref(ref, lo, hi, scale, softcap);
                const double tol = ((double)(hi - lo) / 8 + 8) * 0x1p-23;
                for (int64_t p = 0; p < N; p++)
                    if (p < lo || p >= hi)
                        cr_assert(ref[p] == x[p], "[%lld, %lld): position %lld changed", (long long)lo,
                                  (long long)hi, (long long)p);
                    else
                        cr_assert(fabs(ref[p] - want[p] / sum) <= tol * want[p] / sum,
                                  "[%lld, %lld) cap %d, position %lld: %.9g, exact %.9g", (long long)lo,
                                  (long long)hi, cap, (long long)p, ref[p], want[p] / sum);
                for (int ii = 0; ii < ni; ii++) {
                    llm_matmul_set_isa(is[ii]);
                    memcpy(got, x, sizeof x);
                    llm_vec_softmax(got, lo, hi, scale, softcap);
                    cr_assert(!memcmp(got, ref, sizeof got), "isa %d, draw %d, [%lld, %lld) cap %d: "
                              "not the reference's bits", is[ii], draw, (long long)lo, (long long)hi,
                              cap);
                }
            }
    }
}

/* Non-finite inputs (a damaged or fuzzed model's NaN and infinities):
 * the gates and the softmax give each SIMD variant the reference's
 * values (NaN where the reference has NaN), and the reference converts
 * no NaN to an integer (the sanitizer builds fail on that). */
static int same_or_both_nan(const float *a, const float *b, int n)
{
    for (int i = 0; i < n; i++)
        if (!(isnan(a[i]) && isnan(b[i])) && memcmp(&a[i], &b[i], sizeof(float)))
            return 0;
    return 1;
}

Test(vec, non_finite_inputs_give_the_reference_values_anywhere, .fini = restore)
{
    enum llm_isa is[3];
    int ni = isas(is);
    enum { N = 37 };
    float x[N], u[N], ref[N], got[N];
    for (int i = 0; i < N; i++)
        x[i] = 3.0f * rnd(), u[i] = 1.0f + rnd();
    x[1] = NAN, x[9] = INFINITY, x[17] = -INFINITY, x[33] = NAN, x[35] = INFINITY;
    void (*refs[2])(float *, const float *, int64_t) = { llm_vec_geglu_ref, llm_vec_swiglu_ref };
    void (*gates[2])(float *, const float *, int64_t) = { llm_vec_geglu, llm_vec_swiglu };
    for (int gi = 0; gi < 2; gi++) {
        memcpy(ref, x, sizeof x);
        refs[gi](ref, u, N);
        for (int ii = 0; ii < ni; ii++) {
            llm_matmul_set_isa(is[ii]);
            memcpy(got, x, sizeof x);
            gates[gi](got, u, N);
            cr_assert(same_or_both_nan(got, ref, N), "gate %d isa %d", gi, is[ii]);
        }
    }
    /* windows with a NaN, with +inf and -inf, with -inf alone, and finite */
    static const int64_t wins[][2] = { { 0, 8 }, { 2, 30 }, { 10, 20 }, { 18, 33 } };
    for (size_t w = 0; w < sizeof wins / sizeof wins[0]; w++) {
        memcpy(ref, x, sizeof x);
        llm_vec_softmax_ref(ref, wins[w][0], wins[w][1], 0.5f, 0.0f);
        for (int ii = 0; ii < ni; ii++) {
            llm_matmul_set_isa(is[ii]);
            memcpy(got, x, sizeof x);
            llm_vec_softmax(got, wins[w][0], wins[w][1], 0.5f, 0.0f);
            cr_assert(same_or_both_nan(got, ref, N), "softmax window %zu isa %d", w, is[ii]);
        }
    }
}

/* The multi-query forms: 1 to 7 queries over the same rows (f32, fp16 and
 * bf16 rows; every length and row count above), each query's scores and
 * sums the bits of its own one-query call, and nothing written past m rows
 * or n columns. */
Test(vec, multi_query_kernels_give_each_query_the_one_query_bits, .fini = restore)
{
    enum llm_isa is[3];
    int ni = isas(is);
    enum { NQ = 7 };
    static float K[33 * LD_MAX], Kf[33 * LD_MAX];
    static uint16_t H[33 * LD_MAX], B[33 * LD_MAX];
    static float q[NQ * 260], s1[NQ * 36], sn[NQ * 36], w[NQ * 36], y1[NQ * 260], yn[NQ * 260];
    for (int64_t i = 0; i < 33 * LD_MAX; i++)
        B[i] = (uint16_t)(llm_fp32_to_fp16(0) + (rnd() > 0 ? 0x3f00u : 0xbf00u) + (uint16_t)(i % 97));
    for (int ii = 0; ii < ni; ii++) {
        llm_matmul_set_isa(is[ii]);
        for (size_t li = 0; li < N_LENS; li++)
            for (size_t mi = 0; mi < N_ROWS; mi++)
                for (int nq = 1; nq <= NQ; nq++)
                    for (int t = 0; t < 3; t++) {
                        const int64_t n = lens[li], m = row_counts[mi], ld = n + 3;
                        const int64_t qs = n + 1, ss = m + 2; /* strides past the ends */
                        rows_make(m, n, ld, K, Kf, H);
                        for (int64_t i = 0; i < NQ * 260; i++)
                            q[i] = rnd(), y1[i] = yn[i] = rnd();
                        for (int64_t i = 0; i < NQ * 36; i++)
                            w[i] = rnd(), s1[i] = sn[i] = 777.0f;
                        for (int j = 0; j < nq; j++) {
                            if (t == 0) {
                                llm_vec_dots_f32(q + j * qs, K, ld, m, n, s1 + j * ss);
                                llm_vec_axpys_f32(y1 + j * qs, w + j * ss, K, ld, m, n);
                            } else {
                                const uint16_t *R = t == 1 ? H : B;
                                (t == 1 ? llm_vec_dots_f16 : llm_vec_dots_bf16)(q + j * qs, R, ld, m, n,
                                                                             s1 + j * ss);
                                (t == 1 ? llm_vec_axpys_f16 : llm_vec_axpys_bf16)(y1 + j * qs, w + j * ss,
                                                                               R, ld, m, n);
                            }
                        }
                        if (t == 0) {
                            llm_vec_dots_f32_n(q, qs, nq, K, ld, m, n, sn, ss);
                            llm_vec_axpys_f32_n(yn, qs, w, ss, nq, K, ld, m, n);
                        } else if (t == 1) {
                            llm_vec_dots_f16_n(q, qs, nq, H, ld, m, n, sn, ss);
                            llm_vec_axpys_f16_n(yn, qs, w, ss, nq, H, ld, m, n);
                        } else {
                            llm_vec_dots_bf16_n(q, qs, nq, B, ld, m, n, sn, ss);
                            llm_vec_axpys_bf16_n(yn, qs, w, ss, nq, B, ld, m, n);
                        }
                        cr_assert(!memcmp(s1, sn, sizeof s1) && !memcmp(y1, yn, sizeof y1),
                                  "isa %d type %d n=%lld m=%lld nq=%d: not the one-query bits (or "
                                  "written past the ends)", is[ii], t, (long long)n, (long long)m, nq);
                    }
    }
}

/* The transpose: every element where it belongs on every ISA, blocks
 * around the 8x8 tiles (edges of 0 to 9 past them), inside larger
 * matrices (the strides), and nothing outside the block written. */
Test(vec, transpose_puts_every_element_in_place, .fini = restore)
{
    enum llm_isa is[3];
    int ni = isas(is);
    enum { LDX = 41, LDT = 37 };
    static float x[40 * LDX], t[40 * LDT];
    for (int i = 0; i < 40 * LDX; i++)
        x[i] = (float)i;
    static const int64_t dims[] = { 0, 1, 7, 8, 9, 15, 16, 17, 24, 33, 36 };
    const int nd = sizeof dims / sizeof dims[0];
    for (int ii = 0; ii < ni; ii++) {
        llm_matmul_set_isa(is[ii]);
        for (int a = 0; a < nd; a++)
            for (int b = 0; b < nd; b++) {
                const int64_t rows = dims[a], cols = dims[b];
                for (int i = 0; i < 40 * LDT; i++)
                    t[i] = -1.0f;
                llm_vec_transpose(x + 3, LDX, rows, cols, t + 1, LDT);
                for (int64_t j = 0; j < 40; j++)
                    for (int64_t i = 0; i < LDT && j * LDT + i < 40 * LDT; i++) {
                        const int64_t r = i - 1; /* t + 1: column r of row j of t */
                        const int in = j < cols && r >= 0 && r < rows;
                        const float want = in ? x[r * LDX + 3 + j] : -1.0f;
                        cr_assert(t[j * LDT + i] == want, "isa %d, %lld x %lld: t[%lld][%lld] = "
                                  "%g, not %g", is[ii], (long long)rows, (long long)cols,
                                  (long long)j, (long long)i, t[j * LDT + i], want);
                    }
            }
    }
}

/* RMSNorm: within 3 (dim + 4) 2^-24 of double arithmetic, and every SIMD
 * variant the reference's bits for any number of rows (rows go 8 at a time
 * into lanes) and any width (the tails past 8), also in place. */
Test(vec, rmsnorm_close_to_exact_and_the_reference_bits, .fini = restore)
{
    enum llm_isa is[3];
    int ni = isas(is);
    enum { NR = 19, DM = 77 };
    static float x[NR * DM], g[DM], ref[NR * DM], got[NR * DM];
    rng = 5;
    for (int i = 0; i < NR * DM; i++)
        x[i] = 3.0f * rnd();
    for (int i = 0; i < DM; i++)
        g[i] = 1.0f + 0.5f * rnd();
    static const int64_t dims[] = { 1, 7, 8, 9, 16, 17, 64, 77 };
    const float eps = 1e-5f;
    for (size_t d = 0; d < sizeof dims / sizeof dims[0]; d++)
        for (int64_t n = 0; n <= NR; n++) {
            const int64_t dim = dims[d];
            llm_vec_rmsnorm_ref(x, g, ref, n, dim, eps);
            for (int64_t t = 0; t < n; t++) {
                double ss = 0;
                for (int64_t k = 0; k < dim; k++)
                    ss += (double)x[t * dim + k] * x[t * dim + k];
                const double s = 1.0 / sqrt(ss / (double)dim + eps);
                for (int64_t k = 0; k < dim; k++) {
                    const double want = g[k] * (s * x[t * dim + k]);
                    cr_assert(fabs(ref[t * dim + k] - want) <= 3.0 * (dim + 4) * 0x1p-24 * fabs(want),
                              "dim %lld row %lld [%lld]: %.9g, exact %.9g", (long long)dim,
                              (long long)t, (long long)k, ref[t * dim + k], want);
                }
            }
            for (int ii = 0; ii < ni; ii++) {
                llm_matmul_set_isa(is[ii]);
                memset(got, 0, sizeof got);
                llm_vec_rmsnorm(x, g, got, n, dim, eps);
                cr_assert(!memcmp(got, ref, (size_t)(n * dim) * sizeof(float)),
                          "isa %d, %lld rows of %lld: not the reference's bits", is[ii],
                          (long long)n, (long long)dim);
                memcpy(got, x, sizeof got); /* in place */
                llm_vec_rmsnorm(got, g, got, n, dim, eps);
                cr_assert(!memcmp(got, ref, (size_t)(n * dim) * sizeof(float)),
                          "isa %d, %lld rows of %lld in place: not the reference's bits", is[ii],
                          (long long)n, (long long)dim);
            }
        }
}
