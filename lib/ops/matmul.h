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

#include <stddef.h>
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

/* Y (nb, ldy) for rows [r0, r1) = X (nb, ne0) . W^T for a float W (rows,
 * ne0), with W and X rounded to bf16 (to nearest even) and the sums in
 * float, on the CPU's matrix units (AMX: several times the float GEMM on
 * the same cores). For the products that tolerate bf16's 8-bit mantissa:
 * the quantizer's calibration, never inference (whose bits must not depend
 * on the number of tokens). LLM_E_UNSUPPORTED where llm_amx_ok() is 0.
 * The reference sums the rounded products in k order; the tiles sum them in
 * pairs, so the two agree to float rounding, not bit for bit. */
int llm_amx_ok(void);
llm_status llm_matmul_bf16(const float *W, const float *X, float *Y, int64_t ne0, int64_t nb,
                           int64_t ldy, int64_t r0, int64_t r1);
/* The same in two steps, so that threads sharing X round it once:
 * Xp (llm_bf16_x_bytes) = X in the kernel's layout, then the product. */
size_t llm_bf16_x_bytes(int64_t nb, int64_t ne0);
void llm_bf16_pack_x(const float *X, int64_t nb, int64_t ne0, uint16_t *Xp);
llm_status llm_matmul_bf16_packed(const float *W, const uint16_t *Xp, float *Y, int64_t ne0,
                                  int64_t nb, int64_t ldy, int64_t r0, int64_t r1);
llm_status llm_matmul_bf16_ref(const float *W, const float *X, float *Y, int64_t ne0, int64_t nb,
                               int64_t ldy, int64_t r0, int64_t r1);

/* Interleaved 4-bit rows ("x16"), the decode layout of q4_0, q4_1 and the
 * grouped q4 types (q4_g64, q4_g128, q4z_g64, q4z_g128).
 *
 * A row-major q4 matrix makes decode pay, per 32-element block of each
 * row, a conversion and a scaling of lanes that are then summed across the
 * vector: on Zen 4 that bound q4_0 decode by instructions, not by memory.
 * Sixteen rows interleaved put row r in lane r, so a block of 16 rows is
 * one scale load and one FMA (per 32 elements) and nothing is summed
 * across lanes (the idea of llama.cpp's repacked Q4_0 8x8). The CPU backend
 * repacks once at load (model/model.c) and drops the file's pages, so
 * memory stays one copy.
 *
 * Layout: groups of 16 rows, one after the other; a group is ne0/G blocks
 * (G = 32, 64 or 128 elements a scale) of 16 rows, 16 x the type's block
 * bytes each. A row's block is 2-byte units: d (fp16), m (fp16, zero-point
 * types only), then its G/2 code bytes in pairs; unit u of row r sits at
 * unit 16 u + r of the interleaved block. So for q4_0:
 *   [0, 32)     the 16 rows' scales d, row order
 *   then 256 code bytes: byte 32p + 2r + e (p 0..7, r 0..15, e 0..1) is
 *               byte 2p + e of row r's qs (its low nibble is element
 *               2p + e, its high nibble element 2p + e + 16)
 * and q4_1 has the 16 mins in [32, 64) before the codes. A group is
 * exactly as large as its 16 rows.
 *
 * GGUF's Q2_K to Q6_K and IQ4_XS take the same layout with their
 * super-blocks as blocks (G = 256, every field of the 84 to 210 bytes a
 * 2-byte unit in file order): matmul_simd.h's group kernels unpack their scales
 * and codes with the rows in lanes (AVX2: each half of 8 rows apart), where
 * the row kernels summed each block across lanes and decode ran at half
 * llama.cpp's speed on LLaMA-shaped models.
 *
 * llm_x16_ok: t is one of those types, ne0 a positive multiple of G and
 * rows a positive multiple of 16 (the shapes the layout takes). */
int llm_x16_ok(enum llm_type t, int64_t ne0, int64_t rows);
/* Whether the CPU backend and llm-bench --kernels use the layout (for
 * every type that has it: AVX2 and AVX-512 read each in place): not when
 * the environment says LLM_X16=0 (to compare the two), nor where no kernel
 * reads it (the scalar build, LLM_MATMUL_ACT other than q16), where decode
 * would unpack it every token. */
int llm_x16_enabled(void);
/* P (rows/16 groups) = the interleaved form of W (rows, ne0). */
llm_status llm_x16_pack(enum llm_type t, const void *W, int64_t ne0, int64_t rows, void *P);
/* W' (r1 - r0, row bytes) = rows [r0, r1) of P in the row layout again;
 * r0 and r1 multiples of 16. */
llm_status llm_x16_unpack(enum llm_type t, const void *P, int64_t ne0, int64_t r0, int64_t r1,
                          void *W);
/* llm_matvec and llm_matmul on P, for rows [r0, r1), multiples of 16.
 * Same results as on the row layout within the tolerances of matmul.c
 * (the K-quants: the rows' bits).
 * Under int16 activations (the default) decode reads P directly (AVX2,
 * AVX-512), and so do several tokens on AVX-512 (the int16 GEMM, bit for
 * bit decode's per token); everything else unpacks a few hundred rows at a
 * time and runs the row products. */
llm_status llm_matvec_x16(enum llm_type t, const void *P, const float *x, float *y, int64_t ne0,
                          int64_t r0, int64_t r1);
llm_status llm_matmul_x16(enum llm_type t, const void *P, const float *X, float *Y, int64_t ne0,
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
