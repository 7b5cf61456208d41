/* kern_impl.h: the inner loops of GPTQ (kern.h), written once with GCC
 * vector types and compiled twice: generically (kern.c) and for AVX2
 * (kern_avx2.c), with KERN(name) naming each instance.
 *
 * The vectors are 32 bytes in both instances (the generic one runs each as
 * two SSE halves), and every horizontal sum is written out in a fixed lane
 * order with no fused multiply-add, so both give the same bits: the result
 * of a quantization does not depend on the machine it ran on.
 *
 * Included only by kern.c and kern_avx2.c.
 */
#include <stdint.h>
#include <string.h>

typedef double KERN(v4d) __attribute__((vector_size(32)));
typedef float KERN(v8f) __attribute__((vector_size(32)));
/* the same, for loads and stores at any 4-byte aligned address */
typedef double KERN(v4du) __attribute__((vector_size(32), aligned(4), may_alias));
typedef float KERN(v8fu) __attribute__((vector_size(32), aligned(4), may_alias));
#define v4d KERN(v4d)
#define v8f KERN(v8f)

/* Macros, not functions: a function taking or returning a 32-byte vector
 * draws a calling-convention warning in the generic instance. */
#define LD4D(p) (*(const KERN(v4du) *)(p))
#define LD8F(p) (*(const KERN(v8fu) *)(p))
#define ST8F(p, v) (*(KERN(v8fu) *)(p) = (v))
#define HSUM4D(v) (((v)[0] + (v)[1]) + ((v)[2] + (v)[3]))
#define HSUM8F(v) \
    ((((v)[0] + (v)[1]) + ((v)[2] + (v)[3])) + (((v)[4] + (v)[5]) + ((v)[6] + (v)[7])))
#define SPLAT8F(x) ((v8f){ (x), (x), (x), (x), (x), (x), (x), (x) })

static void KERN(dot4x2)(const double *const x[4], const double *y0, const double *y1,
                         int64_t len, double s[2][4])
{
    const v4d z = { 0, 0, 0, 0 };
    v4d a0 = z, a1 = z, a2 = z, a3 = z, b0 = z, b1 = z, b2 = z, b3 = z;
    const double *x0 = x[0], *x1 = x[1], *x2 = x[2], *x3 = x[3];
    int64_t k = 0;
    for (; k + 4 <= len; k += 4) {
        const v4d u = LD4D(y0 + k), v = LD4D(y1 + k);
        const v4d p0 = LD4D(x0 + k), p1 = LD4D(x1 + k), p2 = LD4D(x2 + k), p3 = LD4D(x3 + k);
        a0 += p0 * u, a1 += p1 * u, a2 += p2 * u, a3 += p3 * u;
        b0 += p0 * v, b1 += p1 * v, b2 += p2 * v, b3 += p3 * v;
    }
    s[0][0] = HSUM4D(a0), s[0][1] = HSUM4D(a1), s[0][2] = HSUM4D(a2), s[0][3] = HSUM4D(a3);
    s[1][0] = HSUM4D(b0), s[1][1] = HSUM4D(b1), s[1][2] = HSUM4D(b2), s[1][3] = HSUM4D(b3);
    for (; k < len; k++)
        for (int r = 0; r < 4; r++) {
            s[0][r] += x[r][k] * y0[k];
            s[1][r] += x[r][k] * y1[k];
        }
}

static double KERN(dot1)(const double *x, const double *y, int64_t len)
{
    v4d a = { 0, 0, 0, 0 };
    int64_t k = 0;
    for (; k + 4 <= len; k += 4)
        a += LD4D(x + k) * LD4D(y + k);
    double s = HSUM4D(a);
    for (; k < len; k++)
        s += x[k] * y[k];
    return s;
}

static void KERN(axpy_sub)(float *y, const float *u, float e, int64_t n)
{
    const v8f ev = SPLAT8F(e);
    int64_t j = 0;
    for (; j + 8 <= n; j += 8)
        ST8F(y + j, LD8F(y + j) - ev * LD8F(u + j));
    for (; j < n; j++)
        y[j] -= e * u[j];
}

/* Tiles of 4 rows by 16 columns in registers, over column panels of B that
 * stay in cache while every row tile passes. */
#define KERN_PANEL 256
static void KERN(gemm_sub)(int64_t m, int64_t n, int64_t k, const float *A, int64_t lda,
                           const float *B, int64_t ldb, float *C, int64_t ldc)
{
    for (int64_t j0 = 0; j0 < n; j0 += KERN_PANEL) {
        const int64_t j1 = n - j0 < KERN_PANEL ? n : j0 + KERN_PANEL;
        for (int64_t i = 0; i < m; i += 4) {
            const int64_t mr = m - i < 4 ? m - i : 4;
            const float *a0 = A + i * lda;
            const float *a1 = A + (i + (mr > 1 ? 1 : 0)) * lda;
            const float *a2 = A + (i + (mr > 2 ? 2 : 0)) * lda;
            const float *a3 = A + (i + (mr > 3 ? 3 : 0)) * lda;
            int64_t j = j0;
            for (; j + 16 <= j1; j += 16) {
                const v8f z = SPLAT8F(0.0f);
                v8f c00 = z, c01 = z, c10 = z, c11 = z, c20 = z, c21 = z, c30 = z, c31 = z;
                const float *b = B + j;
                for (int64_t kk = 0; kk < k; kk++, b += ldb) {
                    const v8f b0 = LD8F(b), b1 = LD8F(b + 8);
                    const v8f x0 = SPLAT8F(a0[kk]), x1 = SPLAT8F(a1[kk]);
                    const v8f x2 = SPLAT8F(a2[kk]), x3 = SPLAT8F(a3[kk]);
                    c00 += x0 * b0, c01 += x0 * b1;
                    c10 += x1 * b0, c11 += x1 * b1;
                    c20 += x2 * b0, c21 += x2 * b1;
                    c30 += x3 * b0, c31 += x3 * b1;
                }
                const v8f acc[4][2] = { { c00, c01 }, { c10, c11 }, { c20, c21 }, { c30, c31 } };
                for (int64_t r = 0; r < mr; r++) {
                    float *c = C + (i + r) * ldc + j;
                    ST8F(c, LD8F(c) - acc[r][0]);
                    ST8F(c + 8, LD8F(c + 8) - acc[r][1]);
                }
            }
            for (; j < j1; j++)
                for (int64_t r = 0; r < mr; r++) {
                    const float *a = A + (i + r) * lda;
                    float s = 0.0f;
                    for (int64_t kk = 0; kk < k; kk++)
                        s += a[kk] * B[kk * ldb + j];
                    C[(i + r) * ldc + j] -= s;
                }
        }
    }
}

/* out[v] += the terms i in [i0, i1) of x_v^T H x_v for 4 vectors, from the
 * upper triangle of H, two rows of H at a time:
 * sum_i x_i (H_ii x_i + 2 sum_{j>i} H_ij x_j). i0 is even. */
static void KERN(quad4)(const float *H, int64_t n, int64_t i0, int64_t i1,
                        const float *const x[4], double out[4])
{
    double acc[4] = { out[0], out[1], out[2], out[3] };
    for (int64_t i = i0; i < i1; i += 2) {
        const int two = i + 1 < i1;
        const float *h0 = H + i * n, *h1 = H + (i + two) * n;
        const v8f z = SPLAT8F(0.0f);
        v8f s00 = z, s01 = z, s02 = z, s03 = z, s10 = z, s11 = z, s12 = z, s13 = z;
        int64_t j = i + 2;
        for (; j + 8 <= n; j += 8) {
            const v8f g0 = LD8F(h0 + j), g1 = LD8F(h1 + j);
            const v8f x0 = LD8F(x[0] + j), x1 = LD8F(x[1] + j);
            const v8f x2 = LD8F(x[2] + j), x3 = LD8F(x[3] + j);
            s00 += g0 * x0, s01 += g0 * x1, s02 += g0 * x2, s03 += g0 * x3;
            s10 += g1 * x0, s11 += g1 * x1, s12 += g1 * x2, s13 += g1 * x3;
        }
        const v8f sv[2][4] = { { s00, s01, s02, s03 }, { s10, s11, s12, s13 } };
        for (int v = 0; v < 4; v++) {
            const float *xv = x[v];
            double t0 = HSUM8F(sv[0][v]), t1 = HSUM8F(sv[1][v]);
            for (int64_t jj = j; jj < n; jj++) {
                t0 += (double)h0[jj] * xv[jj];
                t1 += (double)h1[jj] * xv[jj];
            }
            const double xi = xv[i];
            if (two) {
                const double xi1 = xv[i + 1];
                t0 += (double)h0[i + 1] * xi1;
                acc[v] += xi1 * ((double)h1[i + 1] * xi1 + 2.0 * t1);
            }
            acc[v] += xi * ((double)h0[i] * xi + 2.0 * t0);
        }
    }
    memcpy(out, acc, sizeof acc);
}

const struct llm_qkern KERN(llm_qkern) = {
    .name = KERN_NAME,
    .dot4x2 = KERN(dot4x2),
    .dot1 = KERN(dot1),
    .axpy_sub = KERN(axpy_sub),
    .gemm_sub = KERN(gemm_sub),
    .quad4 = KERN(quad4),
};

#undef v4d
#undef v8f
#undef LD4D
#undef LD8F
#undef ST8F
#undef HSUM4D
#undef HSUM8F
#undef SPLAT8F
