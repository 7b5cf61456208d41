/* blocks.h: tensor element types and quantized block layouts.
 *
 * Read by both the C compiler and nvcc: the layouts are defined here once,
 * and their sizes are checked at compile time. All fields are little-endian;
 * `uint16_t d` fields are IEEE binary16 bit patterns.
 *
 * A tensor of `ne[0]` elements per row and nrows = ne[1]*ne[2]*ne[3] rows is
 * stored row after row. Each row is
 *
 *     [row header: row_header bytes][block 0][block 1]...[block nb-1]
 *
 * with nb = ceil(ne[0] / blck) blocks. When ne[0] is not a multiple of blck,
 * the last block of each row is padded with zeros before quantization, and
 * the padding is ignored when dequantizing. Grouped types have no row header
 * ("scales beside their blocks"); per-channel (_ch), NF4-DQ and FP8 types
 * keep their float32 row scale(s) in the row header.
 *
 * 4-bit blocks keep element j in the low nibble of qs[j] and element
 * j + blck/2 in the high nibble (the ggml Q4_0 order, generalised to 64 and
 * 128); per-channel 4-bit rows use 32-element blocks in that order.
 *
 * 3-bit codes come in sub-blocks of 32 elements, 12 bytes each: bytes 0-7
 * hold the low two bits (element i at bits 2*(i/8) of byte i%8), bytes 8-11
 * the third bit (element i at bit i%8 of byte 8 + i/8). A block of G
 * elements is d, m, then G/32 sub-blocks; per-channel 3-bit rows are the
 * header's d and m, then bare sub-blocks. So 8 consecutive elements are one
 * byte's shifted bits in both planes, which a SIMD unpack reads directly.
 *
 * Lossless GGUF correspondences: LLM_TYPE_Q8_0 = GGML Q8_0, LLM_TYPE_Q4_0 =
 * GGML Q4_0, LLM_TYPE_Q4_1 = GGML Q4_1 (byte for byte), and every type
 * from LLM_TYPE_Q5_0 on: the GGUF types llama.cpp writes (Q5_0, Q5_1, the
 * K-quants, IQ4_NL, IQ4_XS), kept in their GGML layout (ggml-common.h of
 * llama.cpp c392e509; formats.md §1.6). Their rows hold whole blocks only
 * (ne0 a multiple of the block: 32, or 256 for the super-block types) and
 * have no row header. Each block reads as codes c times a float scale s
 * plus a float minimum m per 16 (or 32) elements, w = s*c + m, computed as
 * ggml computes it (quant/kquants.h gives that form).
 */
#ifndef LLM_QUANT_BLOCKS_H
#define LLM_QUANT_BLOCKS_H

#include <stdint.h>

#ifdef __cplusplus
#define LLM_STATIC_ASSERT(c, m) static_assert(c, m)
#else
#include <assert.h>
#define LLM_STATIC_ASSERT(c, m) _Static_assert(c, m)
#endif

enum llm_type {
    /* plain */
    LLM_TYPE_F32 = 0,
    LLM_TYPE_F16 = 1,
    LLM_TYPE_BF16 = 2,
    /* integer arrays for auxiliary sections (tokenizer data) */
    LLM_TYPE_U8 = 3,
    LLM_TYPE_I32 = 4,
    LLM_TYPE_U32 = 5,
    /* int8, symmetric: w = d * q */
    LLM_TYPE_Q8_0 = 16,    /* group 32 (= GGML Q8_0) */
    LLM_TYPE_Q8_G64 = 17,
    LLM_TYPE_Q8_G128 = 18,
    LLM_TYPE_Q8_CH = 19,   /* per channel: row header float d */
    /* uint8 with zero point, stored as a minimum: w = d * q + m */
    LLM_TYPE_Q8Z_G32 = 20,
    LLM_TYPE_Q8Z_G64 = 21,
    LLM_TYPE_Q8Z_G128 = 22,
    LLM_TYPE_Q8Z_CH = 23,  /* row header float d, float m */
    /* int4, symmetric: w = d * (q - 8) */
    LLM_TYPE_Q4_0 = 24,    /* group 32 (= GGML Q4_0) */
    LLM_TYPE_Q4_G64 = 25,
    LLM_TYPE_Q4_G128 = 26,
    LLM_TYPE_Q4_CH = 27,   /* row header float d */
    /* uint4 with zero point, stored as a minimum: w = d * q + m */
    LLM_TYPE_Q4_1 = 28,    /* group 32 (= GGML Q4_1) */
    LLM_TYPE_Q4Z_G64 = 29,
    LLM_TYPE_Q4Z_G128 = 30,
    LLM_TYPE_Q4Z_CH = 31,  /* row header float d, float m */
    /* NF4 (QLoRA normal-float code book), blocks of 64 scaled by absmax */
    LLM_TYPE_NF4 = 32,     /* fp16 absmax per block */
    LLM_TYPE_NF4_DQ = 33,  /* double quantization: fp8 E4M3 absmax per block
                              times a float32 row scale in the row header */
    /* FP8 E4M3 (OCP, "fn": no inf, 0x7f/0xff NaN, max 448) times a float32
       scale in each row's header (llm_quantize_row uses the row's absmax/448;
       a per-tensor quantizer writes the same scale in every row) */
    LLM_TYPE_FP8_E4M3 = 34,
    /* uint3 with zero point, stored as a minimum: w = d * q + m (GPTQ's
       3-bit grid); codes in 12-byte sub-blocks of 32 (see above) */
    LLM_TYPE_Q3Z_G32 = 35,
    LLM_TYPE_Q3Z_G64 = 36,
    LLM_TYPE_Q3Z_G128 = 37,
    LLM_TYPE_Q3Z_CH = 38,  /* row header float d, float m */
    /* GGUF's own layouts (GGML ids in parentheses), kept byte for byte */
    LLM_TYPE_Q5_0 = 39,    /* (6)  int5 symmetric, groups of 32 */
    LLM_TYPE_Q5_1 = 40,    /* (7)  uint5 with minimum, groups of 32 */
    LLM_TYPE_Q2_K = 41,    /* (10) super-blocks of 256: 16 x (4-bit scale, min) */
    LLM_TYPE_Q3_K = 42,    /* (11) 16 x 6-bit scale, 3-bit codes */
    LLM_TYPE_Q4_K = 43,    /* (12) 8 x (6-bit scale, min), 4-bit codes */
    LLM_TYPE_Q5_K = 44,    /* (13) 8 x (6-bit scale, min), 5-bit codes */
    LLM_TYPE_Q6_K = 45,    /* (14) 16 x int8 scale, 6-bit codes */
    LLM_TYPE_Q8_K = 46,    /* (15) float32 scale, int8 codes */
    LLM_TYPE_IQ4_NL = 47,  /* (20) 16-value non-linear code book, groups of 32 */
    LLM_TYPE_IQ4_XS = 48,  /* (23) the same code book, 8 x 6-bit scale per 256 */
    LLM_TYPE_COUNT_ = 49   /* one past the largest id (ids 6..15 unused) */
};

struct llm_block_q8_0 { uint16_t d; int8_t qs[32]; };
struct llm_block_q8_g64 { uint16_t d; int8_t qs[64]; };
struct llm_block_q8_g128 { uint16_t d; int8_t qs[128]; };
struct llm_block_q8z_g32 { uint16_t d, m; uint8_t qs[32]; };
struct llm_block_q8z_g64 { uint16_t d, m; uint8_t qs[64]; };
struct llm_block_q8z_g128 { uint16_t d, m; uint8_t qs[128]; };
struct llm_block_q4_0 { uint16_t d; uint8_t qs[16]; };
struct llm_block_q4_g64 { uint16_t d; uint8_t qs[32]; };
struct llm_block_q4_g128 { uint16_t d; uint8_t qs[64]; };
struct llm_block_q4_1 { uint16_t d, m; uint8_t qs[16]; };
struct llm_block_q4z_g64 { uint16_t d, m; uint8_t qs[32]; };
struct llm_block_q4z_g128 { uint16_t d, m; uint8_t qs[64]; };
struct llm_block_q4_ch { uint8_t qs[16]; };            /* 32 elements */
struct llm_block_q3z_g32 { uint16_t d, m; uint8_t qs[12]; };
struct llm_block_q3z_g64 { uint16_t d, m; uint8_t qs[24]; };
struct llm_block_q3z_g128 { uint16_t d, m; uint8_t qs[48]; };
struct llm_block_q3_ch { uint8_t qs[12]; };            /* 32 elements */
struct llm_block_nf4 { uint16_t d; uint8_t qs[32]; };   /* 64 elements */
struct llm_block_nf4_dq { uint8_t s; uint8_t qs[32]; }; /* 64 elements; s is E4M3 */

/* GGML layouts (QK_K = 256) */
struct llm_block_q5_0 { uint16_t d; uint8_t qh[4]; uint8_t qs[16]; };
struct llm_block_q5_1 { uint16_t d, m; uint8_t qh[4]; uint8_t qs[16]; };
struct llm_block_q2_k { uint8_t scales[16]; uint8_t qs[64]; uint16_t d, dmin; };
struct llm_block_q3_k { uint8_t hmask[32]; uint8_t qs[64]; uint8_t scales[12]; uint16_t d; };
struct llm_block_q4_k { uint16_t d, dmin; uint8_t scales[12]; uint8_t qs[128]; };
struct llm_block_q5_k { uint16_t d, dmin; uint8_t scales[12]; uint8_t qh[32]; uint8_t qs[128]; };
struct llm_block_q6_k { uint8_t ql[128]; uint8_t qh[64]; int8_t scales[16]; uint16_t d; };
struct llm_block_q8_k { float d; int8_t qs[256]; int16_t bsums[16]; };
struct llm_block_iq4_nl { uint16_t d; uint8_t qs[16]; };
struct llm_block_iq4_xs { uint16_t d; uint16_t scales_h; uint8_t scales_l[4]; uint8_t qs[128]; };

LLM_STATIC_ASSERT(sizeof(struct llm_block_q8_0) == 34, "q8_0 block");
LLM_STATIC_ASSERT(sizeof(struct llm_block_q8_g64) == 66, "q8_g64 block");
LLM_STATIC_ASSERT(sizeof(struct llm_block_q8_g128) == 130, "q8_g128 block");
LLM_STATIC_ASSERT(sizeof(struct llm_block_q8z_g32) == 36, "q8z_g32 block");
LLM_STATIC_ASSERT(sizeof(struct llm_block_q8z_g64) == 68, "q8z_g64 block");
LLM_STATIC_ASSERT(sizeof(struct llm_block_q8z_g128) == 132, "q8z_g128 block");
LLM_STATIC_ASSERT(sizeof(struct llm_block_q4_0) == 18, "q4_0 block");
LLM_STATIC_ASSERT(sizeof(struct llm_block_q4_g64) == 34, "q4_g64 block");
LLM_STATIC_ASSERT(sizeof(struct llm_block_q4_g128) == 66, "q4_g128 block");
LLM_STATIC_ASSERT(sizeof(struct llm_block_q4_1) == 20, "q4_1 block");
LLM_STATIC_ASSERT(sizeof(struct llm_block_q4z_g64) == 36, "q4z_g64 block");
LLM_STATIC_ASSERT(sizeof(struct llm_block_q4z_g128) == 68, "q4z_g128 block");
LLM_STATIC_ASSERT(sizeof(struct llm_block_q4_ch) == 16, "q4_ch block");
LLM_STATIC_ASSERT(sizeof(struct llm_block_q3z_g32) == 16, "q3z_g32 block");
LLM_STATIC_ASSERT(sizeof(struct llm_block_q3z_g64) == 28, "q3z_g64 block");
LLM_STATIC_ASSERT(sizeof(struct llm_block_q3z_g128) == 52, "q3z_g128 block");
LLM_STATIC_ASSERT(sizeof(struct llm_block_q3_ch) == 12, "q3_ch block");
LLM_STATIC_ASSERT(sizeof(struct llm_block_nf4) == 34, "nf4 block");
LLM_STATIC_ASSERT(sizeof(struct llm_block_nf4_dq) == 33, "nf4_dq block");
LLM_STATIC_ASSERT(sizeof(struct llm_block_q5_0) == 22, "q5_0 block");
LLM_STATIC_ASSERT(sizeof(struct llm_block_q5_1) == 24, "q5_1 block");
LLM_STATIC_ASSERT(sizeof(struct llm_block_q2_k) == 84, "q2_K block");
LLM_STATIC_ASSERT(sizeof(struct llm_block_q3_k) == 110, "q3_K block");
LLM_STATIC_ASSERT(sizeof(struct llm_block_q4_k) == 144, "q4_K block");
LLM_STATIC_ASSERT(sizeof(struct llm_block_q5_k) == 176, "q5_K block");
LLM_STATIC_ASSERT(sizeof(struct llm_block_q6_k) == 210, "q6_K block");
LLM_STATIC_ASSERT(sizeof(struct llm_block_q8_k) == 292, "q8_K block");
LLM_STATIC_ASSERT(sizeof(struct llm_block_iq4_nl) == 18, "iq4_nl block");
LLM_STATIC_ASSERT(sizeof(struct llm_block_iq4_xs) == 136, "iq4_xs block");

/* The IQ4_NL / IQ4_XS code book (ggml's kvalues_iq4nl), index = 4-bit code. */
#define LLM_IQ4NL_VALUES \
    { -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113 }

/* The NF4 code book (QLoRA, Dettmers et al. 2023, appendix E; the values
 * bitsandbytes uses), index = 4-bit code. */
#define LLM_NF4_VALUES                                                          \
    { -1.0f, -0.6961928009986877f, -0.5250730514526367f, -0.39491748809814453f, \
      -0.28444138169288635f, -0.18477343022823334f, -0.09105003625154495f, 0.0f,\
      0.07958029955625534f, 0.16093020141124725f, 0.24611230194568634f,          \
      0.33791524171829224f, 0.44070982933044434f, 0.5626170039176941f,           \
      0.7229568362236023f, 1.0f }

#endif
