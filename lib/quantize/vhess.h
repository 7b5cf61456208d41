/* vhess.h: the sums behind GPTQ's Hessian of v for one KV group (layer.c
 * v_hessians says why v gets one of its own).
 *
 * For the group's heads h and a window of len tokens with normed input X
 * (len, dim) and causal attention probabilities P_h (len, len), the
 * Hessian's sum is sum_h Y_h^T Y_h with Y_h = P_h X. It equals X^T M X with
 * M = sum_h P_h^T P_h: M is formed chunk by chunk as the probabilities
 * arrive, from only the queries each block of keys can be reached by and
 * only the blocks on and below its diagonal, then X^T (M X) once per window
 * for the whole group, instead of P_h X and Y_h^T Y_h per head.
 *
 * With GPTAQ's cross term (the float model's P_fh and X_f beside them) the
 * group also adds sum_h (Y_fh - Y_h)^T Y_h = (X_f^T C - X^T M) X with
 * C = sum_h P_fh^T P_h.
 *
 * The products run on the caller's matmul (llm_qmm_fn); the C reference is
 * the definition, in tests/unit/quantize/test_vhess.c.
 */
#ifndef LLM_QUANTIZE_VHESS_H
#define LLM_QUANTIZE_VHESS_H

#include <stdint.h>

#include "../common/status.h"

/* Y (n, rows) = X (n, cols) . W^T, all float row-major */
typedef llm_status (*llm_qmm_fn)(void *ctx, const float *W, int64_t rows, int64_t cols,
                                 const float *X, int32_t n, float *Y);

/* Run fn(i, n, arg) for i < n on the caller's threads and wait (the
 * element-wise loops between the products); NULL: serially. Every loop
 * given to it splits disjoint outputs, so the results do not depend on
 * the threads. */
typedef void (*llm_qpar_fn)(void *ctx, void (*fn)(int i, int n, void *arg), void *arg);

/* Rows of features per product of llm_q_gram_add (and of M's key blocks). */
#define LLM_Q_GRAM_BLOCK 96

/* sum (c, c) += A B^T for A, B (c, len) (rows: features): the blocks on
 * and below the diagonal when `lower` (for a symmetric product; j <= i is
 * written), else all of it. y: scratch (LLM_Q_GRAM_BLOCK, c). */
llm_status llm_q_gram_add(llm_qmm_fn mm, llm_qpar_fn par, void *ctx, double *sum, const float *A,
                          const float *B, int64_t c, int64_t len, int lower, float *y);

struct llm_vhess {
    int64_t len, dim, hpg, nb; /* window tokens, features, heads of the group, chunk tokens */
    float *M;                  /* (len, len) sum_h P_h^T P_h of the window */
    float *CT;                 /* cross: (len, len) CT[r][k] = sum_h sum_i P_h[i][r] P_fh[i][k] */
    float *S, *Sf;             /* (len, hpg * nb) the chunk's probabilities, gathered */
    float *Z, *U;              /* (dim, len) X^T M, and X_f^T C - X^T M */
    float *y;                  /* (LLM_Q_GRAM_BLOCK, max(len, dim)) products */
    llm_qpar_fn par;           /* the gathers' and sums' threads (NULL after init: serial) */
};

llm_status llm_vhess_init(struct llm_vhess *v, int64_t len, int64_t dim, int64_t hpg, int64_t nb,
                          int cross);
void llm_vhess_free(struct llm_vhess *v);

/* Add a chunk of queries [off, off + n) of the window: probs[0] (n_heads,
 * n, off + n) the probabilities (zero past each query's own position),
 * probs[1] the float model's (cross only); the group's heads are hq0 ..
 * hq0 + hpg - 1. Chunks come in order, n <= nb. */
llm_status llm_vhess_add(struct llm_vhess *v, llm_qmm_fn mm, void *ctx, float *const probs[2],
                         int64_t hq0, int32_t off, int32_t n);

/* End the window: sum (dim, dim) += X^T M X (the blocks on and below the
 * diagonal), and with the cross term dsum (dim, dim) += (X_f^T C - X^T M) X;
 * XT, XfT (dim, len) the inputs transposed. M and C start again at zero.
 * The caller counts len * hpg tokens. */
llm_status llm_vhess_window(struct llm_vhess *v, llm_qmm_fn mm, void *ctx, const float *XT,
                            const float *XfT, double *sum, double *dsum);

#endif
