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

/* Little-endian 32-bit word i of p (p may be unaligned). */
uint32_t llm_hfq_rd32(const uint8_t *p, uint64_t i);

#endif
