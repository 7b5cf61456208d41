/* kquants.h: the GGUF block types from LLM_TYPE_Q5_0 on (Q5_0, Q5_1, the
 * K-quants Q2_K..Q8_K, IQ4_NL, IQ4_XS): their common reading for kernels,
 * and round-to-nearest quantizers that write them as llama.cpp does.
 *
 * Layouts: blocks.h (ggml-common.h of llama.cpp c392e509). Decoding to
 * floats is ggml_quants.c's, bit for bit ggml's.
 *
 * The common reading ("canonical form"): a block of blck elements (32 or
 * 256) is codes c[i] (small signed integers, -128 <= c <= 127), and per 16
 * elements a float scale s and a float minimum m, so that element i is
 *
 *     w[i] = s[i/16] * c[i] + m[i/16]      (one float product, then one sum)
 *
 * which is the float ggml's decoder gives (s and m are the very products
 * ggml forms, e.g. d*sc and -(dmin*m) for Q4_K). Kernels take integer dot
 * products of the codes with integer activations and apply s and m per
 * 16 or 32 elements.
 *
 *     int16_t c[256]; float s[16], m[16];
 *     llm_kq_unpack(LLM_TYPE_Q4_K, block, c, s, m);
 */
#ifndef LLM_QUANT_KQUANTS_H
#define LLM_QUANT_KQUANTS_H

#include <stdint.h>

#include "../common/status.h"
#include "types.h"

/* Whether t is one of these types. */
static inline int llm_kq_type(enum llm_type t)
{
    return t >= LLM_TYPE_Q5_0 && t <= LLM_TYPE_IQ4_XS;
}

/* Granularity of the scales of t: 32 when s and m repeat over each pair of
 * 16 (Q4_K, Q5_K, Q5_0, Q5_1, IQ4_NL, IQ4_XS, Q8_K), else 16; and whether
 * any m can be non-zero (Q2_K, Q4_K, Q5_K, Q5_1). */
int llm_kq_scale_group(enum llm_type t);
int llm_kq_has_min(enum llm_type t);

/* One block of t at blk (any alignment) in canonical form: c (blck), s and
 * m (blck/16). */
void llm_kq_unpack(enum llm_type t, const uint8_t *blk, int16_t *c, float *s, float *m);

/* Quantize one row x (ne0, a multiple of the block) to t, round to nearest
 * with llama.cpp's per-type searches for the scales (make_qkx2/qx/q3
 * style weighted least squares; see kquants.c). imp (ne0, may be NULL):
 * per-column importance, such as llama.cpp's imatrix (the mean of the
 * squared activations); with it every search weights element j by
 * imp[j] * sqrt(sigma2 + x[j]^2) as llama.cpp's quantize_*_impl do. */
llm_status llm_kq_quantize_row(enum llm_type t, const float *x, void *dst, int64_t ne0,
                               const float *imp);

/* For GPTQ on these grids (quantize/gptq.c): the codes of a block whose
 * scales are fixed. llm_kq_nearest: the canonical code c nearest x on the
 * grid s*c + m (s, m the canonical scale and minimum of its 16 elements;
 * the IQ4 types: a code-book value); llm_kq_set_code: store canonical code
 * c as element e of the block (as llm_kq_quantize_row packs it);
 * llm_kq_finish_block: whatever a block derives from its codes (Q8_K's
 * sums), after the last llm_kq_set_code. */
int llm_kq_nearest(enum llm_type t, float s, float m, float x);
void llm_kq_set_code(enum llm_type t, uint8_t *blk, int e, int c);
void llm_kq_finish_block(enum llm_type t, uint8_t *blk);

#endif
