/* test_vec.c: the attention vector kernels of lib/ops/vec.c, every variant
 * this CPU runs, against double arithmetic on the same inputs. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../../lib/common/fp16.h"
#include "../../../lib/ops/matmul_impl.h"
#include "../../../lib/ops/vec.h"
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
            const float d32 = llm_vec_dot_f32(a, b, n), d16 = llm_vec_dot_f16(a, h, n);
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
                cr_assert_eq(llm_vec_dot_f32(a, b, n), a[j], "isa %d n=%lld j=%lld", is[ii],
                             (long long)n, (long long)j);
                cr_assert_eq(llm_vec_dot_f16(a, h, n), a[j], "isa %d n=%lld j=%lld", is[ii],
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
                    llm_vec_axpy_f32(y, a, x, n);
                else
                    llm_vec_axpy_f16(y, a, h, n);
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
