/* hf_quant_impl.h: shared by hf_quant.c (import) and hf_quant_write.c
 * (export); not part of the public API. */
#ifndef LLM_FORMAT_HF_QUANT_IMPL_H
#define LLM_FORMAT_HF_QUANT_IMPL_H

#include <stdint.h>

/* AWQ GEMM packing: nibble i of a word holds output column 8j + order[i];
 * column 8j + c sits in nibble slot[c] (the inverse). */
extern const uint8_t llm_hfq_awq_order[8];
extern const uint8_t llm_hfq_awq_slot[8];

struct llm_qgrid;
struct llm_qgroup;
/* The group parameters of a checkpoint's scale s and integer zero z, as
 * stored: llm_qgrid_group_set, except that a negative scale keeps its sign
 * (RTN q4_0 data has them; the formula s*(q - z) does not care) and a
 * scale of 0 stays 0. */
void llm_hfq_group(const struct llm_qgrid *g, float s, int z, struct llm_qgroup *p);

/* Little-endian 32-bit word i of p (p may be unaligned): read it; OR v
 * into it. */
uint32_t llm_hfq_rd32(const uint8_t *p, uint64_t i);
void llm_hfq_or32(uint8_t *p, uint64_t i, uint32_t v);

/* GPTQ packing: values of `bits` bits, LSB first, as one bit stream over
 * the words w0, w0 + stride, w0 + 2 stride, ...; value j at stream bit
 * bits * j. For 2, 4 and 8 bits a word holds 32/bits whole values; 3-bit
 * values straddle words (AutoGPTQ's pack: 10 values, 2 bits of the 11th,
 * and so on, 32 values in 3 words). Get value j, or OR v (< 2^bits) in. */
uint32_t llm_hfq_get(const uint8_t *p, uint64_t w0, uint64_t stride, uint64_t j, int bits);
void llm_hfq_put(uint8_t *p, uint64_t w0, uint64_t stride, uint64_t j, int bits, uint32_t v);

/* Values per whole number of words: 32 (3 bits), 8 (4 bits), 4 (8 bits);
 * packed dimensions must be multiples of it. */
static inline int llm_hfq_per(int bits)
{
    return 32 / (bits & -bits);
}

#endif
