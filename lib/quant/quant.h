/* quant.h: round-to-nearest quantization and dequantization of rows, the
 * CPU references for every llm_type (see blocks.h for the layouts).
 *
 * A row is ne0 elements; its bytes (llm_type_row_bytes) include the row
 * header. When ne0 is not a multiple of the block length, the last block is
 * quantized as if padded with zeros, and dequantization writes only ne0
 * values. Every function here is the reference that SIMD and CUDA kernels
 * are tested against.
 */
#ifndef LLM_QUANT_QUANT_H
#define LLM_QUANT_QUANT_H

#include <stdint.h>

#include "../common/status.h"
#include "types.h"

/* Dequantize one row of type t to float32: dst (ne0). Works for every
 * type including f32/f16/bf16; LLM_E_INVALID for auxiliary types. */
llm_status llm_dequantize_row(enum llm_type t, const void *src, float *dst, int64_t ne0);

/* NaN and infinite values among nrows rows of ne0 elements of type t, as
 * llm_dequantize_row would give them: *count, and *first (optional) the
 * index of the first (-1: none). Only what can be non-finite is read (the
 * floats of f32/f16/bf16, the scales and minimums of the block types), and
 * a row is dequantized only when its float32 scale is so large that the
 * products could overflow. Auxiliary types have none. */
llm_status llm_rows_nonfinite(enum llm_type t, const void *src, int64_t ne0, int64_t nrows,
                              uint64_t *count, int64_t *first);

/* Quantize one row of float32 to type t (round to nearest, the plain RTN
 * rule of each format: absmax scales for symmetric types, min/max for
 * zero-point types, nearest code for NF4/FP8). src (ne0), dst (row bytes). */
llm_status llm_quantize_row(enum llm_type t, const float *src, void *dst, int64_t ne0);

/* Convert nrows rows between types through float32; a plain copy when the
 * types are equal. */
llm_status llm_convert_rows(enum llm_type from, const void *src, enum llm_type to, void *dst,
                            int64_t ne0, int64_t nrows);

/* 3-bit codes (blocks.h): n codes (each 0..7, n a multiple of 32) into
 * n/32 sub-blocks of 12 bytes at qs; code j of the sub-blocks at qs. */
void llm_q3_pack(const uint8_t *codes, int64_t n, uint8_t *qs);
static inline int llm_q3_code(const uint8_t *qs, int64_t j)
{
    const uint8_t *sub = qs + 12 * (j / 32);
    const int i = (int)(j % 32);
    return ((sub[i & 7] >> (2 * (i >> 3))) & 3) | (((sub[8 + (i >> 3)] >> (i & 7)) & 1) << 2);
}

/* FP8 E4M3 (OCP "fn") <-> float32, round to nearest even, saturating at 448. */
float llm_fp8_e4m3_to_fp32(uint8_t v);
uint8_t llm_fp32_to_fp8_e4m3(float f);

#endif
