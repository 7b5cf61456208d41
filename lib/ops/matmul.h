/* matmul.h: products of quantized or float weight matrices with float
 * activations, computed on the packed rows (never a dequantized copy).
 *
 * W is a tensor of `rows` rows of `ne0` elements in type t (row bytes from
 * llm_type_row_bytes; the row header and padding rules of blocks.h apply).
 * The _ref functions are the plain C references; the dispatching functions
 * pick AVX2 / AVX-512 (VNNI) at run time and must agree with the reference
 * within the tolerance stated in ops/matmul.c.
 */
#ifndef LLM_OPS_MATMUL_H
#define LLM_OPS_MATMUL_H

#include <stdint.h>

#include "../common/status.h"
#include "../quant/types.h"

/* y[r] = dot(W[r], x) for r in [r0, r1): W (rows, ne0) of type t, x (ne0), y (rows). */
llm_status llm_matvec_ref(enum llm_type t, const void *W, const float *x, float *y, int64_t ne0,
                          int64_t r0, int64_t r1);
llm_status llm_matvec(enum llm_type t, const void *W, const float *x, float *y, int64_t ne0,
                      int64_t r0, int64_t r1);

/* Y[b][r] = dot(W[r], X[b]) for b in [0, nb), r in [r0, r1):
 * X (nb, ne0) row-major, Y (nb, ldy) row-major with ldy >= rows. From 8
 * tokens on the SIMD path is a register-blocked float GEMM (prefill, and
 * the quantizer's products), so the caller should pass many tokens in one
 * call rather than a few at a time; it allocates a packing buffer of up
 * to about 300 KiB per call. */
llm_status llm_matmul_ref(enum llm_type t, const void *W, const float *X, float *Y, int64_t ne0,
                          int64_t nb, int64_t ldy, int64_t r0, int64_t r1);
llm_status llm_matmul(enum llm_type t, const void *W, const float *X, float *Y, int64_t ne0,
                      int64_t nb, int64_t ldy, int64_t r0, int64_t r1);

/* The instruction set the dispatching functions use on this CPU:
 * "avx512-vnni", "avx2" or "scalar" (for benchmark reports). The
 * environment variable LLM_ISA=scalar|avx2|avx512 caps the choice. */
const char *llm_matmul_isa_name(void);

/* A persistent pool of worker threads with a spinning barrier, for splitting
 * rows across cores with few synchronisation points. */
struct llm_pool;
llm_status llm_pool_new(struct llm_pool **out, int n_threads);
void llm_pool_free(struct llm_pool *p);
int llm_pool_size(const struct llm_pool *p);
/* Run fn(i, n, ctx) on each of the n threads (the caller is thread 0) and
 * wait for all of them. */
void llm_pool_run(struct llm_pool *p, void (*fn)(int i, int n, void *ctx), void *ctx);

#endif
