/* vec.h: the vector kernels of attention over a KV cache, on the rows of
 * one KV block at a time: the dot products of a query with m key rows, and
 * y += sum_r w_r v_r over m value rows; float, fp16 (IEEE binary16) or
 * bf16 (bfloat16) rows, SIMD (AVX-512 / AVX2, as llm_matmul picks) with plain C references
 * (double sums, row by row).
 *
 * Tolerances (tests/unit/ops/test_vec.c), S = sum |q_i k_i| for a dot:
 *   llm_vec_dots_*      |s_r - exact| <= (n + 2) 2^-24 S   (float sums in
 *                       another order than the reference's double one)
 *   llm_vec_axpys_*     |y_i - exact| <= (m + 2) 2^-24 (|y_i| + sum_r |w_r v_ri|)
 *                       (m + 1 terms summed in float)
 */
#ifndef LLM_OPS_VEC_H
#define LLM_OPS_VEC_H

#include <stdint.h>

/* For short element-wise loops outside these kernels (attention's
 * bookkeeping, the calibration's sums): GCC at -O2 leaves them scalar and
 * -O3 vectorizes them, each element's arithmetic unchanged (no
 * -ffast-math: nothing is reassociated). */
#if defined(__GNUC__) && !defined(__clang__)
#define LLM_VEC_O3 __attribute__((optimize("O3")))
#else
#define LLM_VEC_O3
#endif

/* y[i] = x[i] rounded to fp16 (to nearest even; overflow to inf, NaN kept
 * quiet), the bits of fp16.h's llm_fp32_to_fp16: the KV cache's rows. The
 * SIMD variants use F16C's conversion, which rounds the same way. */
void llm_vec_to_f16(const float *x, uint16_t *y, int64_t n);
void llm_vec_to_f16_ref(const float *x, uint16_t *y, int64_t n);

/* Gemma's gate: g[i] = gelu(g[i]) * u[i], GELU's tanh form computed as
 * x / (1 + exp(-2 k (x + 0.044715 x^3))) with k = sqrt(2/pi) (the same
 * function: 0.5 (1 + tanh z) = 1 / (1 + exp(-2z))) and exp by a degree-6
 * polynomial after range reduction (Cephes' expf): within 4e-7 of the
 * exact value relative to max(|x|, 1) |u|. Every element goes through the
 * same arithmetic wherever it lies in g (a tail is padded to the vector
 * width), so a token's row does not depend on the batch. */
void llm_vec_geglu(float *g, const float *u, int64_t n);
void llm_vec_geglu_ref(float *g, const float *u, int64_t n);

/* The SwiGLU gate: g[i] = silu(g[i]) u[i] = g[i] / (1 + exp(-g[i])) u[i],
 * exp as geglu's; every element the same arithmetic anywhere in g, and
 * the SIMD variant the reference's bits. */
void llm_vec_swiglu(float *g, const float *u, int64_t n);
void llm_vec_swiglu_ref(float *g, const float *u, int64_t n);

/* Attention's softmax of the scores s[lo, hi) in place: each first times
 * scale (and, with softcap > 0, capped to softcap tanh(s / softcap), as
 * Gemma 2), then exp(s - max) / sum, exp by geglu's polynomial (Cephes'
 * expf; test_vec: within (n / 8 + 8) 2^-23 of the exact softmax of n
 * scores, relative to each value). The sum runs in 8 lanes,
 * position p in lane p % 8, and the lanes meet in a fixed order: a
 * position's result depends on the scores and [lo, hi) alone, whoever
 * calls, and the SIMD variant gives the reference's bits. */
void llm_vec_softmax(float *s, int64_t lo, int64_t hi, float scale, float softcap);
void llm_vec_softmax_ref(float *s, int64_t lo, int64_t hi, float scale, float softcap);

/* m rows of a KV block, ldk (ldv) elements apart:
 * s[r] = sum_i q[i] K[r ldk + i] for r < m; s (m), q (n)
 * y[i] += sum_r w[r] V[r ldv + i] for i < n; y (n), w (m) */
void llm_vec_dots_f32(const float *q, const float *K, int64_t ldk, int64_t m, int64_t n, float *s);
void llm_vec_dots_f16(const float *q, const uint16_t *K, int64_t ldk, int64_t m, int64_t n,
                      float *s);
void llm_vec_dots_f32_ref(const float *q, const float *K, int64_t ldk, int64_t m, int64_t n,
                          float *s);
void llm_vec_dots_f16_ref(const float *q, const uint16_t *K, int64_t ldk, int64_t m, int64_t n,
                          float *s);
void llm_vec_axpys_f32(float *y, const float *w, const float *V, int64_t ldv, int64_t m,
                       int64_t n);
void llm_vec_axpys_f16(float *y, const float *w, const uint16_t *V, int64_t ldv, int64_t m,
                       int64_t n);
void llm_vec_axpys_f32_ref(float *y, const float *w, const float *V, int64_t ldv, int64_t m,
                           int64_t n);
void llm_vec_axpys_f16_ref(float *y, const float *w, const uint16_t *V, int64_t ldv, int64_t m,
                           int64_t n);
void llm_vec_dots_bf16(const float *q, const uint16_t *K, int64_t ldk, int64_t m, int64_t n,
                       float *s);
void llm_vec_dots_bf16_ref(const float *q, const uint16_t *K, int64_t ldk, int64_t m, int64_t n,
                           float *s);
void llm_vec_axpys_bf16(float *y, const float *w, const uint16_t *V, int64_t ldv, int64_t m,
                        int64_t n);
void llm_vec_axpys_bf16_ref(float *y, const float *w, const uint16_t *V, int64_t ldv, int64_t m,
                            int64_t n);
/* The same for nq queries over the same rows (the query heads that share
 * a KV head): query j at q + j qs gives s + j ss, and y + j ys gains its
 * weights w + j ws; each query the bits of the one-query call. On AVX-512
 * a row is loaded once for up to three queries. */
void llm_vec_dots_f32_n(const float *q, int64_t qs, int nq, const float *K, int64_t ldk, int64_t m,
                        int64_t n, float *s, int64_t ss);
void llm_vec_dots_f16_n(const float *q, int64_t qs, int nq, const uint16_t *K, int64_t ldk,
                        int64_t m, int64_t n, float *s, int64_t ss);
void llm_vec_dots_bf16_n(const float *q, int64_t qs, int nq, const uint16_t *K, int64_t ldk,
                         int64_t m, int64_t n, float *s, int64_t ss);
void llm_vec_axpys_f32_n(float *y, int64_t ys, const float *w, int64_t ws, int nq, const float *V,
                         int64_t ldv, int64_t m, int64_t n);
void llm_vec_axpys_f16_n(float *y, int64_t ys, const float *w, int64_t ws, int nq,
                         const uint16_t *V, int64_t ldv, int64_t m, int64_t n);
void llm_vec_axpys_bf16_n(float *y, int64_t ys, const float *w, int64_t ws, int nq,
                          const uint16_t *V, int64_t ldv, int64_t m, int64_t n);

/* q8_0 rows (a key or value head as blocks of 32 int8 and their fp16
 * scale): n a multiple of 32, ldk and ldv in bytes, rows 2-byte aligned. The products of a
 * block are summed in float before its scale multiplies them. */
void llm_vec_dots_q8_0(const float *q, const uint8_t *K, int64_t ldk, int64_t m, int64_t n,
                       float *s);
void llm_vec_dots_q8_0_ref(const float *q, const uint8_t *K, int64_t ldk, int64_t m, int64_t n,
                           float *s);
void llm_vec_axpys_q8_0(float *y, const float *w, const uint8_t *V, int64_t ldv, int64_t m,
                        int64_t n);
void llm_vec_axpys_q8_0_ref(float *y, const float *w, const uint8_t *V, int64_t ldv, int64_t m,
                            int64_t n);
/* fp8 e4m3 rows (bytes; OCP E4M3, no scale): as the float rows. */
void llm_vec_dots_fp8(const float *q, const uint8_t *K, int64_t ldk, int64_t m, int64_t n,
                      float *s);
void llm_vec_dots_fp8_ref(const float *q, const uint8_t *K, int64_t ldk, int64_t m, int64_t n,
                          float *s);
void llm_vec_axpys_fp8(float *y, const float *w, const uint8_t *V, int64_t ldv, int64_t m,
                       int64_t n);
void llm_vec_axpys_fp8_ref(float *y, const float *w, const uint8_t *V, int64_t ldv, int64_t m,
                           int64_t n);
/* q4_0 rows (blocks of 32 4-bit codes and their fp16 scale, ggml's
 * layout): as the q8_0 rows. */
void llm_vec_dots_q4_0(const float *q, const uint8_t *K, int64_t ldk, int64_t m, int64_t n,
                       float *s);
void llm_vec_dots_q4_0_ref(const float *q, const uint8_t *K, int64_t ldk, int64_t m, int64_t n,
                           float *s);
void llm_vec_axpys_q4_0(float *y, const float *w, const uint8_t *V, int64_t ldv, int64_t m,
                        int64_t n);
void llm_vec_axpys_q4_0_ref(float *y, const float *w, const uint8_t *V, int64_t ldv, int64_t m,
                            int64_t n);
/* A KV head's part of a q4ch key block (kv.h: bs tokens, bs a multiple of
 * 16; n fp16 scales, n fp16 minimums, then each channel's bs / 2 code
 * bytes): s[t] = sum_i q[i] (min_i + code_ti scale_i) for t < bs; s (bs),
 * q (n). */
void llm_vec_dots_q4ch(const float *q, const uint8_t *blk, int64_t n, int64_t bs, float *s);
/* That layout: bytes of a head's part (n channels, bs tokens), and where
 * token t's code of a channel lies (byte, then shift: the high nibble for
 * the second 8 tokens of each 16). */
static inline int64_t llm_q4ch_head_bytes(int64_t n, int64_t bs) { return n * (4 + bs / 2); }
static inline int64_t llm_q4ch_byte(int64_t t) { return t / 16 * 8 + t % 8; }
static inline int llm_q4ch_shift(int64_t t) { return t % 16 < 8 ? 0 : 4; }
void llm_vec_dots_q4ch_ref(const float *q, const uint8_t *blk, int64_t n, int64_t bs, float *s);
/* The orthonormal 32-point Walsh-Hadamard transform of each block of 32 of
 * x (n; a multiple of 32), in place; it is its own inverse (up to
 * rounding). The rotation of the cache's q4 rows (kv.h). */
void llm_vec_hadamard32(float *x, int64_t n);

/* t[j * ldt + i] = x[i * ldx + j] for i < rows, j < cols: a block of a
 * row-major matrix transposed (the calibration's Gram matrices take their
 * inputs feature by feature). */
void llm_vec_transpose(const float *x, int64_t ldx, int64_t rows, int64_t cols, float *t,
                       int64_t ldt);
void llm_vec_transpose_ref(const float *x, int64_t ldx, int64_t rows, int64_t cols, float *t,
                           int64_t ldt);

/* RMSNorm of n rows x (n, dim) into y (n, dim) with the gain g (dim):
 * y[k] = g[k] (s x[k]), s = 1 / sqrt(ss / dim + eps), ss the row's sum of
 * squares added in order of k (a product, then a sum, each rounded). The
 * SIMD forms put rows in lanes, so every row's bits are the reference's
 * whatever n. */
void llm_vec_rmsnorm(const float *x, const float *g, float *y, int64_t n, int64_t dim, float eps);
void llm_vec_rmsnorm_ref(const float *x, const float *g, float *y, int64_t n, int64_t dim,
                         float eps);

#endif
