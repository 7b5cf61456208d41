/* linalg.h: the dense factorizations GPTQ needs, in double precision on
 * row-major square matrices (leading dimension lda >= n).
 *
 * The inner loops are dot products over contiguous rows, blocked so that
 * each value loaded serves several of them (linalg.c). pool may be NULL
 * (one thread); the results do not depend on the number of threads.
 */
#ifndef LLM_QUANTIZE_LINALG_H
#define LLM_QUANTIZE_LINALG_H

#include <stdint.h>

#include "../common/status.h"
#include "../ops/matmul.h" /* struct llm_pool */

/* In-place Cholesky factor A = L L^T of the symmetric matrix whose lower
 * triangle (diagonal included) is in a (n, lda); L replaces that lower
 * triangle and the strict upper triangle is left untouched. Returns -1 on
 * success, or the index of the first pivot that is not positive and finite
 * (A is not numerically positive definite; a is then partly overwritten). */
int64_t llm_chol_lower(double *a, int64_t n, int64_t lda, struct llm_pool *pool);

/* T = (L^-1)^T, the upper triangular transpose of the inverse of the lower
 * factor in a's lower triangle: T's strict upper triangle is written into
 * a's strict upper triangle (L stays in the lower one) and its diagonal
 * (1 / L[i][i]) into diag (n). LLM_E_NOMEM when its scratch (4 n doubles
 * per thread) cannot be allocated. */
llm_status llm_tri_inv_t(double *a, int64_t n, int64_t lda, double *diag, struct llm_pool *pool);

#endif
