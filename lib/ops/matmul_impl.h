/* matmul_impl.h: what ops/matmul.c shares with its SIMD variants
 * (matmul_avx2.c, matmul_avx512.c) and with the tests; not public.
 *
 * The SIMD variants quantize the activations once per call to int8 blocks
 * of 32 (struct llm_qx) and take int8 dot products with the weight codes,
 * the llama.cpp W4A8 / W8A8 scheme; float types (f32/f16/bf16) use float
 * FMAs on the float activations.
 */
#ifndef LLM_OPS_MATMUL_IMPL_H
#define LLM_OPS_MATMUL_IMPL_H

#include <stdint.h>

#include "../common/status.h"
#include "../quant/blocks.h"

/* One block of 32 activations: x[j] ~ d * qs[j], qs in [-127, 127]
 * (never -128, so that the sign trick of the int8 dot cannot overflow);
 * the offset-code corrections in the integer domain, ready to load:
 * m8 = -8 sum(qs) (4-bit symmetric codes c - 8), p128 = 128 sum(qs) (8-bit
 * zero-point codes c - 128 + 128); ds = d * sum(qs) for the min term. */
struct llm_qx {
    float d;
    float ds;
    int32_t m8, p128;
    int8_t qs[32];
};

/* The same with int16 activations: x[j] ~ d * qs[j], qs in [-32767,
 * 32767]; m8 = -8 sum(qs); ds = d * sum(qs); h0 = the sum of qs[0..15]
 * (Q2_K's minimums cover 16 elements; the other half's is -m8/8 - h0). */
struct llm_qx16 {
    float d;
    float ds;
    int32_t m8, h0;
    int16_t qs[32];
};

/* The sum of qs[16..31] of an int16 block (exact: m8 is -8 sum(qs)) */
static inline int32_t llm_qx16_h1(const struct llm_qx16 *b)
{
    return -b->m8 / 8 - b->h0;
}

/* Quantize x (n) into ceil(n/32) blocks; the last block is zero-padded.
 * Plain C; the SIMD variants have their own (same rounding rule: nearest). */
void llm_quantize_x_ref(const float *x, int64_t n, struct llm_qx *out);

/* The instruction sets a variant may use; llm_matmul_set_isa() limits the
 * dispatch to one of them (tests and benchmarks compare the variants). */
enum llm_isa { LLM_ISA_REF = 0, LLM_ISA_AVX2 = 1, LLM_ISA_AVX512 = 2 };

/* The best ISA this CPU runs (LLM_ISA_REF on a non-x86 build). */
enum llm_isa llm_isa_detect(void);
/* The ISA the dispatch uses now (LLM_ISA and llm_matmul_set_isa applied);
 * vec.c follows it too. */
enum llm_isa llm_matmul_isa(void);
/* Limit the dispatch to `isa` (clamped to what the CPU runs); returns the
 * ISA now in use. Not thread-safe against concurrent products. */
enum llm_isa llm_matmul_set_isa(enum llm_isa isa);
/* The most tokens that products on interleaved rows give the AVX-512
 * group kernels rather than the int16 GEMM (matmul.c says why it depends
 * on the CPU's vendor). */
int llm_x16_few_max(void);

/* The SIMD variants' path for t: LLM_SIMD_NONE (the dispatch runs the
 * reference), LLM_SIMD_FLOAT (float FMAs on float x always: f32, f16,
 * bf16, nf4, nf4_dq, fp8_e4m3), LLM_SIMD_INT8 (the int8, int4 and int3
 * types: float, int16 or int8 activations, llm_matmul_set_act) or
 * LLM_SIMD_KQ (the GGUF block types from q5_0 on: int16 activations
 * whatever llm_matmul_set_act says, matmul_kq.h). */
enum { LLM_SIMD_NONE = 0, LLM_SIMD_FLOAT = 1, LLM_SIMD_INT8 = 2, LLM_SIMD_KQ = 3 };
int llm_matmul_simd_type(enum llm_type t);

/* FP8 E4M3 -> float for each byte (256 entries, built once). */
const float *llm_matmul_fp8_table(void);

/* The activations the LLM_SIMD_INT8 types meet: float (exact up to float
 * rounding), int16 blocks of 32 (struct llm_qx16: error at most
 * max|x_b|/65534 per element, 1/258 of the int8 one) or int8 blocks of 32
 * (struct llm_qx, the llama.cpp scheme). Int16 is the default (see
 * LLM_ACT_DEFAULT in matmul.c). The environment variable
 * LLM_MATMUL_ACT=f32|q16|q8 sets it at the first product. Returns the
 * previous setting. Not thread-safe against concurrent products. */
enum llm_act { LLM_ACT_F32 = 0, LLM_ACT_Q8 = 1, LLM_ACT_Q16 = 2 };
int llm_matmul_set_act(int act);

/* Batch invariance (the default): every row of llm_matmul is llm_matvec's
 * for its token, bit for bit, whatever the number of tokens, their order
 * and the range of rows, so that a sequence's results do not depend on
 * what else is in its batch. The int8/int4/int3 types under int16
 * activations run the int16 GEMM of matmul_gemm.h for any number of
 * tokens (its order of float operations per row and token is also the
 * interleaved decode's); everything else runs the row kernels. Off
 * (LLM_BATCH_INVARIANT=0 in the environment, or llm_matmul_set_invariant
 * (0), which the quantizer uses for its own products), from
 * LLM_MATMUL_GEMM_MIN_NB tokens on the variants run a register-blocked
 * GEMM: float on float activations for every type (within the float bound,
 * 1e-5 S, of the reference), except the int8/int4 types under LLM_ACT_Q8,
 * which keep llama.cpp's int8 scheme row by row, and under LLM_ACT_Q16
 * with AVX-512, which run the int16 GEMM; fewer tokens go row by row, as
 * llm_matvec does then. Returns the previous setting. Not thread-safe
 * against concurrent products. */
#define LLM_MATMUL_GEMM_MIN_NB 8
int llm_matmul_set_invariant(int on);
int llm_matmul_invariant(void);

/* The variants: same contract as llm_matvec / llm_matmul for the types of
 * llm_matmul_simd_type, arguments already checked; row_bytes from
 * llm_type_row_bytes; act: an enum llm_act for the LLM_SIMD_INT8 types;
 * inv: batch-invariant. */
llm_status llm_matvec_avx2(enum llm_type t, const void *W, const float *x, float *y, int64_t ne0,
                           uint64_t row_bytes, int64_t r0, int64_t r1, int act, int inv);
llm_status llm_matmul_avx2(enum llm_type t, const void *W, const float *X, float *Y, int64_t ne0,
                           uint64_t row_bytes, int64_t nb, int64_t ldy, int64_t r0, int64_t r1,
                           int act, int inv);
llm_status llm_matvec_avx512(enum llm_type t, const void *W, const float *x, float *y,
                             int64_t ne0, uint64_t row_bytes, int64_t r0, int64_t r1, int act,
                             int inv);
llm_status llm_matmul_avx512(enum llm_type t, const void *W, const float *X, float *Y,
                             int64_t ne0, uint64_t row_bytes, int64_t nb, int64_t ldy, int64_t r0,
                             int64_t r1, int act, int inv);

/* Decode on interleaved 4-bit rows (matmul.h's x16 layout) under
 * int16 activations; arguments already checked, r0 and r1 multiples of 16. */
llm_status llm_matvec_x16_avx2(enum llm_type t, const void *P, const float *x, float *y,
                               int64_t ne0, int64_t r0, int64_t r1);
llm_status llm_matvec_x16_avx512(enum llm_type t, const void *P, const float *x, float *y,
                                 int64_t ne0, int64_t r0, int64_t r1);
/* Several tokens on interleaved rows under int16 activations: the int16
 * GEMM of matmul_gemm.h, the same arithmetic per block as decode, so each
 * token's result is bit for bit decode's. */
llm_status llm_matmul_x16_avx2(enum llm_type t, const void *P, const float *X, float *Y,
                               int64_t ne0, int64_t nb, int64_t ldy, int64_t r0, int64_t r1);
llm_status llm_matmul_x16_avx512(enum llm_type t, const void *P, const float *X, float *Y,
                                 int64_t ne0, int64_t nb, int64_t ldy, int64_t r0, int64_t r1);

#endif
