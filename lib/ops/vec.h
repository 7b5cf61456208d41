/* vec.h: the vector kernels of attention over a KV cache: the dot product
 * of a query with a key row and y += a v with a value row, on float or
 * fp16 (IEEE binary16) rows, SIMD (AVX-512 / AVX2, as llm_matmul picks)
 * with plain C references.
 *
 * Tolerances (tests/unit/ops/test_vec.c), S = sum |a_i b_i|:
 *   llm_vec_dot_*       |dot - exact| <= 1e-6 S + n 2^-24 S   (float sums in
 *                       another order than the reference's double one)
 *   llm_vec_axpy_*      |y_i - (y_i + a x_i)| <= 2^-23 (|y_i| + |a x_i|)
 *                       (one rounding with FMA, two in the reference)
 */
#ifndef LLM_OPS_VEC_H
#define LLM_OPS_VEC_H

#include <stdint.h>

/* sum_i a[i] b[i] over n elements; a (n), b (n) */
float llm_vec_dot_f32(const float *a, const float *b, int64_t n);
float llm_vec_dot_f16(const float *a, const uint16_t *b, int64_t n);
float llm_vec_dot_f32_ref(const float *a, const float *b, int64_t n);
float llm_vec_dot_f16_ref(const float *a, const uint16_t *b, int64_t n);

/* y[i] += a x[i] for i < n; y (n), x (n) */
void llm_vec_axpy_f32(float *y, float a, const float *x, int64_t n);
void llm_vec_axpy_f16(float *y, float a, const uint16_t *x, int64_t n);
void llm_vec_axpy_f32_ref(float *y, float a, const float *x, int64_t n);
void llm_vec_axpy_f16_ref(float *y, float a, const uint16_t *x, int64_t n);

#endif
