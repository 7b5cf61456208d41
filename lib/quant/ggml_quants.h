/* ggml_quants.h: the GGML tensor types as GGUF files store them, and
 * decoders for those llm-tools does not keep as they are.
 *
 * The GGUF importer keeps F32, F16, BF16, Q8_0, Q4_0, Q4_1 and I32 byte for
 * byte (they have an llm_type twin, see types.h). Every other type it meets
 * is decoded here to float32, one row at a time, and re-encoded to the
 * import's target type. Layouts and formulas: ggml-common.h and
 * ggml-quants.c of llama.cpp c392e509, written out in
 * shared/reference/formats.md §1.5-1.6. QK_K = 256.
 *
 * All decoders read their input with byte loads (blocks may sit at any
 * address: GGUF only promises general.alignment, which may be 1).
 *
 *     const struct llm_ggml_type_info *ti = llm_ggml_type_info(id);
 *     if (!ti)                 -> not a GGML type (or a removed one)
 *     if (!ti->can_decode)     -> a type we do not decode (IQ1-3*, TQ*, ...)
 *     llm_ggml_dequantize_row(id, row, out, ne0);   // ne0 % ti->blck == 0
 */
#ifndef LLM_QUANT_GGML_QUANTS_H
#define LLM_QUANT_GGML_QUANTS_H

#include <stddef.h>
#include <stdint.h>

#include "../common/status.h"
#include "blocks.h" /* defines: LLM_STATIC_ASSERT */

/* GGML type ids (ggml.h enum ggml_type); ids 4, 5, 31-33 and 36-38 were
 * removed from GGML and are refused. */
enum {
    LLM_GGML_F32 = 0,
    LLM_GGML_F16 = 1,
    LLM_GGML_Q4_0 = 2,
    LLM_GGML_Q4_1 = 3,
    LLM_GGML_Q5_0 = 6,
    LLM_GGML_Q5_1 = 7,
    LLM_GGML_Q8_0 = 8,
    LLM_GGML_Q8_1 = 9,
    LLM_GGML_Q2_K = 10,
    LLM_GGML_Q3_K = 11,
    LLM_GGML_Q4_K = 12,
    LLM_GGML_Q5_K = 13,
    LLM_GGML_Q6_K = 14,
    LLM_GGML_Q8_K = 15,
    LLM_GGML_IQ2_XXS = 16,
    LLM_GGML_IQ2_XS = 17,
    LLM_GGML_IQ3_XXS = 18,
    LLM_GGML_IQ1_S = 19,
    LLM_GGML_IQ4_NL = 20,
    LLM_GGML_IQ3_S = 21,
    LLM_GGML_IQ2_S = 22,
    LLM_GGML_IQ4_XS = 23,
    LLM_GGML_I8 = 24,
    LLM_GGML_I16 = 25,
    LLM_GGML_I32 = 26,
    LLM_GGML_I64 = 27,
    LLM_GGML_F64 = 28,
    LLM_GGML_IQ1_M = 29,
    LLM_GGML_BF16 = 30,
    LLM_GGML_TQ1_0 = 34,
    LLM_GGML_TQ2_0 = 35,
    LLM_GGML_MXFP4 = 39,
    LLM_GGML_TYPE_COUNT_ = 40 /* one past the largest id we know */
};

#define LLM_QK_K 256

/* Block layouts: blocks.h (llm_block_q5_0 ... llm_block_q8_k), plus Q8_1,
 * which GGUF files do not use for weights. */
struct llm_ggml_block_q8_1 { uint16_t d, s; int8_t qs[32]; };
LLM_STATIC_ASSERT(sizeof(struct llm_ggml_block_q8_1) == 36, "ggml q8_1 block");

struct llm_ggml_type_info {
    const char *name;     /* "Q4_K", as ggml spells it */
    uint32_t blck;        /* elements per block */
    uint32_t block_bytes; /* bytes per block */
    uint8_t can_decode;   /* llm_ggml_dequantize_row handles it */
};

/* The type with GGML id `id`, or NULL for an id that is not (or no longer)
 * a GGML type. */
const struct llm_ggml_type_info *llm_ggml_type_info(uint32_t id);

/* Bytes of a row of ne0 elements of type id, or 0 when id is unknown or
 * ne0 is not a whole number of blocks or the size overflows. */
uint64_t llm_ggml_row_bytes(uint32_t id, uint64_t ne0);

/* Decode one row: src (row bytes) -> dst (ne0). ne0 must be a positive
 * multiple of the block length. LLM_E_UNSUPPORTED (with a detail) for a
 * type that cannot be decoded, LLM_E_INVALID for a bad ne0. */
llm_status llm_ggml_dequantize_row(uint32_t id, const void *src, float *dst, int64_t ne0);

/* Per-block decoders, one block of `blck` elements each (exposed for the
 * tests and for kernels that want one block at a time). */
void llm_ggml_dequant_q5_0(const uint8_t *b, float *y);
void llm_ggml_dequant_q5_1(const uint8_t *b, float *y);
void llm_ggml_dequant_q8_1(const uint8_t *b, float *y);
void llm_ggml_dequant_q2_k(const uint8_t *b, float *y);
void llm_ggml_dequant_q3_k(const uint8_t *b, float *y);
void llm_ggml_dequant_q4_k(const uint8_t *b, float *y);
void llm_ggml_dequant_q5_k(const uint8_t *b, float *y);
void llm_ggml_dequant_q6_k(const uint8_t *b, float *y);
void llm_ggml_dequant_q8_k(const uint8_t *b, float *y);
void llm_ggml_dequant_iq4_nl(const uint8_t *b, float *y);
void llm_ggml_dequant_iq4_xs(const uint8_t *b, float *y);

#endif
