/* grid.h: quantization grids with explicit scales and integer zero points,
 * shared by GPTQ, AWQ and the Hugging Face GPTQ/AWQ importers and exporters.
 *
 * The RTN quantizers of quant/quant.c pick their own scales; the methods
 * here choose a scale and an integer zero per group themselves (GPTQ from the
 * error-updated weights, AWQ after clipping, importers from a checkpoint)
 * and need to write exactly those into our block layouts (blocks.h):
 *
 *   symmetric types (q8_0, q8_g64/g128, q8_ch, q4_0, q4_g64/g128, q4_ch):
 *       w = d * (q - 2^(bits-1)),  code q in [0, 2^bits - 1]
 *       (int8 types store q - 128 as int8; int4 types store the code q,
 *       whose zero 8 is implied)
 *   zero-point types (q8z_*, q4_1, q4z_*):
 *       w = d * q + m,  m = -d * z  for an integer zero z in [0, 2^bits - 1]
 *   fp8_e4m3, the one grid that is not uniform:
 *       w = e4m3(q) * d,  the code q an E4M3 byte (never a NaN code), d the
 *       float32 row scale; GPTQ feeds back FP8's rounding errors through it
 *
 * d and m are stored as binary16 in grouped types and float32 in the row
 * header of _ch types; llm_qgrid_group returns them already rounded to the
 * stored precision, so that d * q + m computed in float32 (quant.c's
 * dequantization rule: one product, then one sum) is exactly what the file
 * will give back. GPTQ's error feedback relies on that.
 */
#ifndef LLM_QUANTIZE_GRID_H
#define LLM_QUANTIZE_GRID_H
#include <stdint.h>

#include "../common/status.h"
#include "types.h"

/* The grid of a type. */
struct llm_qgrid {
    enum llm_type type;
    int bits;        /* 3, 4 or 8 */
    int group;       /* elements per group; 0: the whole row (_ch types, fp8) */
    int zero_point;  /* 1: w = d*q + m with an integer zero; 0: symmetric */
    int maxq;        /* 2^bits - 1 */
    int fp8;         /* 1: the code is an E4M3 byte, w = e4m3(q) * d (zero_point 0) */
};

/* The grid of `t`; LLM_E_INVALID (detail names the type) for types that are
 * not grids (f32/f16/bf16, nf4, nf4_dq, aux types). */
llm_status llm_qgrid_of(enum llm_type t, struct llm_qgrid *g);
/* The inverse for the integer grids: the type of `bits` (3, 4 or 8), with
 * zero points or symmetric, in groups of `group` elements (32, 64, 128; 0:
 * one per row); -1 when there is none (3 bits is zero points only). */
int llm_qgrid_type(int bits, int zero_point, int group);

/* Parameters of one group, as stored. d is never 0: a scale that would be
 * stored as 0 becomes the smallest positive value of the stored precision. */
struct llm_qgroup {
    float d;     /* scale, rounded to the stored precision */
    float m;     /* minimum (zero-point types), = stored(-d * z); 0 for symmetric */
    int zero;    /* integer zero: z for zero-point types, 2^(bits-1) for symmetric,
                    0 for fp8 */
};

/* FP8 takes one rule in all three functions below: d = absmax / 448, the
 * round-to-nearest rule of quant.c.
 *
 * Choose d and z for the values x (n) from their range, by GPTQ's
 * Quantizer.find_params rule (quantization.md 1.1): the range is widened to
 * contain 0, sym uses max(|min|, max), scale = (max - min) / maxq, zero =
 * round(-min / scale) (sym: 2^(bits-1)); an all-zero group gets [-1, 1]. */
void llm_qgrid_group(const struct llm_qgrid *g, const float *x, int64_t n, struct llm_qgroup *p);

/* The same by AWQ's pseudo_quantize_tensor rule (quantization.md 2.1): the
 * range is NOT widened to contain 0, scale = max(max - min, 1e-5) / maxq,
 * zero = clamp(-round(min / scale), 0, maxq); sym: scale = amax /
 * (2^(bits-1) - 1). AWQ clips by clamping the weights before this call. */
void llm_qgrid_group_awq(const struct llm_qgrid *g, const float *x, int64_t n,
                         struct llm_qgroup *p);
/* The same from the group's range: lo and hi the least and greatest of its
 * finite values (lo > hi: none), for a caller that found them with vectors
 * (AWQ's searches). Not for fp8. */
void llm_qgrid_group_awq_range(const struct llm_qgrid *g, float lo, float hi,
                               struct llm_qgroup *p);

/* The same by the type's round-to-nearest rule, which uses the grid better
 * than GPTQ's: zero-point grids take AWQ's rule (the true range, an integer
 * zero clamped to the grid); symmetric grids map the element of largest
 * magnitude, sign kept, exactly to code 0 (d = e / -2^(bits-1), ggml's
 * q4_0 rule), so d may be negative and the step is amax/2^(bits-1) instead
 * of 2 amax/maxq, with no clipping of the extreme. */
void llm_qgrid_group_rtn(const struct llm_qgrid *g, const float *x, int64_t n,
                         struct llm_qgroup *p);

/* The three rules above, and the reference's search over them: GPTQ's
 * Quantizer with mse (quantization.md 1.1; IST-DASLab/gptq quant.py,
 * GPTQModel's `mse`). With norm > 0 the rule's range (for GPTQ's rule after
 * widening it to 0) is shrunk by f = 1 - i/100, i = 0..79, and the
 * parameters of least sum |Q(x) - x|^norm over x (n) are kept (the first on
 * a tie), the error measured on the unstored float32 scale as the reference
 * does; they are then stored as the rule's own. Clipping the extremes
 * trades their error for a finer step on the rest. norm <= 0: the rule
 * alone; fp8: its one rule, with no search. */
enum llm_qrule { LLM_QRULE_GPTQ, LLM_QRULE_AWQ, LLM_QRULE_RTN };
void llm_qgrid_group_mse(const struct llm_qgrid *g, enum llm_qrule rule, float norm,
                         const float *x, int64_t n, struct llm_qgroup *p);

/* Set d and z from a given scale and integer zero (checkpoint import): d and
 * m are rounded to the stored precision. zero is clamped to [0, maxq]; a
 * symmetric grid's zero is always 2^(bits-1), so there `zero` is not read. */
void llm_qgrid_group_set(const struct llm_qgrid *g, float scale, int zero, struct llm_qgroup *p);

/* The code of x on a group's grid: clamp(round_half_even(x / d) + zero, 0,
 * maxq) (GPTQ/AWQ's rule; fp8: e4m3(x / d), saturating), and its dequantized
 * value d*q + m (fp8: e4m3(q) * d) as the file will give it back. */
int llm_qgrid_code(const struct llm_qgrid *g, const struct llm_qgroup *p, float x);
float llm_qgrid_value(const struct llm_qgrid *g, const struct llm_qgroup *p, int q);

/* Pack one row of codes q (ne0, each in [0, maxq]; for fp8 not a NaN code)
 * with the parameters of its groups p (ceil(ne0 / group) entries; 1 for _ch
 * types and fp8) into dst (llm_type_row_bytes(g->type, ne0) bytes). Padding
 * elements of the last block get the code of 0. */
llm_status llm_qgrid_pack_row(const struct llm_qgrid *g, const uint8_t *q,
                              const struct llm_qgroup *p, int64_t ne0, void *dst);

/* The inverse: codes q (ne0) and group parameters p from a packed row; for
 * zero-point types zero = round(-m / d) (exact when the row was packed by
 * llm_qgrid_pack_row). */
llm_status llm_qgrid_unpack_row(const struct llm_qgrid *g, const void *src, int64_t ne0,
                                uint8_t *q, struct llm_qgroup *p);

#endif
