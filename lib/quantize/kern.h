/* kern.h: the inner loops of GPTQ's factorization, updates and error
 * statistics, one table per instruction set (kern_impl.h); every table
 * gives the same bits, so the choice is only a matter of speed. */
#ifndef LLM_QUANTIZE_KERN_H
#define LLM_QUANTIZE_KERN_H

#include <stdint.h>

struct llm_qkern {
    const char *name; /* "generic", "avx2" */
    /* s[b][r] = dot(x[r][0:len], y_b[0:len]) for 4 rows x and 2 rows y */
    void (*dot4x2)(const double *const x[4], const double *y0, const double *y1, int64_t len,
                   double s[2][4]);
    double (*dot1)(const double *x, const double *y, int64_t len);
    /* y[0:n] -= e * u[0:n] (each product rounded, then the difference) */
    void (*axpy_sub)(float *y, const float *u, float e, int64_t n);
    /* C (m, n; ldc) -= A (m, k; lda) @ B (k, n; ldb), each sum over k formed
     * first, then subtracted */
    void (*gemm_sub)(int64_t m, int64_t n, int64_t k, const float *A, int64_t lda,
                     const float *B, int64_t ldb, float *C, int64_t ldc);
    /* out[v] += the terms of rows [i0, i1) of H (i0 even) in x_v^T H x_v, for
     * 4 vectors x_v (n) and the symmetric H (n, n) read from its upper
     * triangle */
    void (*quad4)(const float *H, int64_t n, int64_t i0, int64_t i1, const float *const x[4],
                  double out[4]);
};

extern const struct llm_qkern llm_qkern_generic;
extern const struct llm_qkern llm_qkern_avx2; /* x86 builds only */

/* The fastest table this CPU runs; LLM_ISA=scalar in the environment picks
 * the generic one (as it caps lib/ops' kernels). */
const struct llm_qkern *llm_qkern_get(void);

#endif
