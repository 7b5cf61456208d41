/* quant.c: round-to-nearest quantization and dequantization of one row, the
 * CPU reference of every llm_type (layouts in blocks.h).
 *
 * The rules, per family (x = one element, G = group; "fp16(.)" rounds to
 * nearest even, "fp16_up(.)" to the smallest binary16 >= the value,
 * "fp16_down(.)" to the largest <=):
 *
 *   q8_0, q4_0, q4_1   byte for byte ggml's quantize_row_*_ref (finite input):
 *                      q8_0 d = amax/127, q = roundf(x*id), id = 1/d;
 *                      q4_0 d = max/-8 (max = the element of largest |x|,
 *                      sign kept), q = min(15, trunc(x*id + 8.5));
 *                      q4_1 d = (max-min)/15, m = min,
 *                      q = min(15, trunc((x-min)*id + 0.5)).
 *   q8_g64/g128        d = fp16_up(amax/127), q = round(x/d) in [-127,127].
 *   q4_g64/g128        d = fp16_up(amax/7.5), q = round(x/d) in [-8,7]
 *                      (stored q+8): GPTQ's symmetric 4-bit rule; every
 *                      element is within d/2, and all 16 codes are used.
 *   q8z_*, q4z_g*      m = fp16_down(min), d = fp16_up((max-m)/L),
 *                      q = round((x-m)/d) in [0,L], L = 255 or 15.
 *                      Rounding m down and d up keeps [min,max] inside the
 *                      representable range, so |err| <= d/2 for every element.
 *   *_ch               the same symmetric / zero-point rules with float32
 *                      d (and m) over the whole row, in the row header.
 *   nf4                d = fp16(absmax of the 64-block); code = the NF4
 *                      value nearest x/d: the number of bitsandbytes'
 *                      midpoint thresholds that x/d strictly exceeds, so a
 *                      tie (x/d exactly on a threshold) takes the lower
 *                      code, as bitsandbytes' '>' decision tree does.
 *   nf4_dq             row scale r = (max block absmax)/448 (float32 header);
 *                      block scale s = the smallest E4M3 value >= absmax/r
 *                      (rounded UP so that |x| <= s*r and x/(s*r) stays in
 *                      [-1,1]); codes as nf4 with d = s*r.
 *   fp8_e4m3           row scale r = row absmax/448 (float32 header),
 *                      q = e4m3(x/r), round to nearest even, saturating.
 *
 * Scales are computed from the finite elements only. A NaN element is
 * quantized as 0 (fp8: as NaN); +-inf saturates to the code of largest
 * magnitude. Grouped types pad the last block of a row with zeros before
 * quantizing (blocks.h); per-channel types take their row scale from the
 * ne0 real elements, and their padding nibbles hold the code of 0.
 *
 * Dequantization is d*q (+ m), computed as one float product and then one
 * float sum, never fused: kernels/dequant.cu reproduces it bit for bit.
 */
#include "quant.h"

#include <math.h>
#include <stddef.h>
#include <string.h>

#include "../common/alloc.h"
#include "../common/fp16.h" // defines: llm_fp16_to_fp32, llm_fp32_to_fp16, bf16, llm_f32_bits
#include "ggml_quants.h"
#include "kquants.h"

// ----------------------------------------------------------------------------
// type families

enum kind {
    K_NONE, K_F32, K_F16, K_BF16, K_SYM8, K_ZP8, K_SYM4, K_ZP4, K_NF4, K_NF4DQ, K_FP8, K_ZP3,
    K_GGUF /* Q5_0 .. IQ4_XS: ggml's layouts and decoders (kquants.h) */
};

static const uint8_t kind_of[LLM_TYPE_COUNT_] = {
    [LLM_TYPE_F32] = K_F32,       [LLM_TYPE_F16] = K_F16,        [LLM_TYPE_BF16] = K_BF16,
    [LLM_TYPE_Q8_0] = K_SYM8,     [LLM_TYPE_Q8_G64] = K_SYM8,    [LLM_TYPE_Q8_G128] = K_SYM8,
    [LLM_TYPE_Q8_CH] = K_SYM8,    [LLM_TYPE_Q8Z_G32] = K_ZP8,    [LLM_TYPE_Q8Z_G64] = K_ZP8,
    [LLM_TYPE_Q8Z_G128] = K_ZP8,  [LLM_TYPE_Q8Z_CH] = K_ZP8,     [LLM_TYPE_Q4_0] = K_SYM4,
    [LLM_TYPE_Q4_G64] = K_SYM4,   [LLM_TYPE_Q4_G128] = K_SYM4,   [LLM_TYPE_Q4_CH] = K_SYM4,
    [LLM_TYPE_Q4_1] = K_ZP4,      [LLM_TYPE_Q4Z_G64] = K_ZP4,    [LLM_TYPE_Q4Z_G128] = K_ZP4,
    [LLM_TYPE_Q4Z_CH] = K_ZP4,    [LLM_TYPE_NF4] = K_NF4,        [LLM_TYPE_NF4_DQ] = K_NF4DQ,
    [LLM_TYPE_FP8_E4M3] = K_FP8,  [LLM_TYPE_Q3Z_G32] = K_ZP3,    [LLM_TYPE_Q3Z_G64] = K_ZP3,
    [LLM_TYPE_Q3Z_G128] = K_ZP3,  [LLM_TYPE_Q3Z_CH] = K_ZP3,     [LLM_TYPE_Q5_0] = K_GGUF,
    [LLM_TYPE_Q5_1] = K_GGUF,     [LLM_TYPE_Q2_K] = K_GGUF,      [LLM_TYPE_Q3_K] = K_GGUF,
    [LLM_TYPE_Q4_K] = K_GGUF,     [LLM_TYPE_Q5_K] = K_GGUF,      [LLM_TYPE_Q6_K] = K_GGUF,
    [LLM_TYPE_Q8_K] = K_GGUF,     [LLM_TYPE_IQ4_NL] = K_GGUF,    [LLM_TYPE_IQ4_XS] = K_GGUF,
};

/* The generic code below finds d at byte 0, m at byte 2 and qs at the end
 * of each block; these pin that to the structs of blocks.h. */
_Static_assert(offsetof(struct llm_block_q8_0, qs) == 2, "q8_0 layout");
_Static_assert(offsetof(struct llm_block_q8_g128, qs) == 2, "q8_g128 layout");
_Static_assert(offsetof(struct llm_block_q8z_g32, m) == 2 &&
               offsetof(struct llm_block_q8z_g128, qs) == 4, "q8z layout");
_Static_assert(offsetof(struct llm_block_q4_0, qs) == 2, "q4_0 layout");
_Static_assert(offsetof(struct llm_block_q4_g128, qs) == 2, "q4_g128 layout");
_Static_assert(offsetof(struct llm_block_q4_1, m) == 2 &&
               offsetof(struct llm_block_q4z_g128, qs) == 4, "q4z layout");
_Static_assert(offsetof(struct llm_block_q3z_g32, m) == 2 &&
               offsetof(struct llm_block_q3z_g128, qs) == 4, "q3z layout");
_Static_assert(offsetof(struct llm_block_nf4, qs) == 2, "nf4 layout");
_Static_assert(offsetof(struct llm_block_nf4_dq, qs) == 1, "nf4_dq layout");

static const float nf4_values[16] = LLM_NF4_VALUES;

/* The midpoints between adjacent NF4 values, as the float literals of
 * bitsandbytes' dQuantizeNF4 (csrc/kernels.cu), so that our codes are
 * theirs even at the last bit (four of them differ by one ulp from the
 * midpoints of the float code values). */
static const float nf4_mid[15] = {
    -0.8480964004993439f, -0.6106329262256622f, -0.4599952697753906f, -0.33967943489551544f,
    -0.23460740596055984f, -0.13791173323988914f, -0.045525018125772476f, 0.03979014977812767f,
    0.1202552504837513f,  0.2035212516784668f,   0.2920137718319893f,   0.3893125355243683f,
    0.5016634166240692f,  0.6427869200706482f,   0.8614784181118011f,
};

// ----------------------------------------------------------------------------
// byte access: rows (and so blocks and row headers) may sit at any address

static inline uint16_t ld16(const uint8_t *p)
{
    return (uint16_t)(p[0] | (p[1] << 8));
}

static inline void st16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

static inline float ldf(const uint8_t *p)
{
    return llm_bits_f32((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                        (uint32_t)p[3] << 24);
}

static inline void stf(uint8_t *p, float f)
{
    uint32_t u = llm_f32_bits(f);
    p[0] = (uint8_t)u;
    p[1] = (uint8_t)(u >> 8);
    p[2] = (uint8_t)(u >> 16);
    p[3] = (uint8_t)(u >> 24);
}

static inline float h2f(const uint8_t *p)
{
    return llm_fp16_to_fp32(ld16(p));
}

// ----------------------------------------------------------------------------
// scalar helpers

/* Directed binary16 rounding of a scale, saturating at the largest finite
 * half so that an out-of-range group clips instead of producing inf*0. */
static uint16_t fp16_up(float v)
{
    uint16_t h = llm_fp32_to_fp16(v);
    if (llm_fp16_to_fp32(h) < v)
        h = (h & 0x8000) ? (h == 0x8000 ? 0x0001 : (uint16_t)(h - 1)) : (uint16_t)(h + 1);
    if ((h & 0x7fff) >= 0x7c00 && !isnan(v))
        h = (uint16_t)((h & 0x8000) | 0x7bff);
    return h;
}

static uint16_t fp16_down(float v)
{
    uint16_t h = llm_fp32_to_fp16(v);
    if (llm_fp16_to_fp32(h) > v)
        h = (h & 0x8000) ? (uint16_t)(h + 1) : (h == 0 ? 0x8001 : (uint16_t)(h - 1));
    if ((h & 0x7fff) >= 0x7c00 && !isnan(v))
        h = (uint16_t)((h & 0x8000) | 0x7bff);
    return h;
}

/* The smallest binary16 scale d with d * L >= need (need >= 0): the
 * quotient is rounded up, then checked in double so that the float
 * rounding of need / L cannot leave the largest element outside. */
static uint16_t fp16_scale_up(double need, double L)
{
    uint16_t h = fp16_up((float)(need / L));
    while (h < 0x7bff && (double)llm_fp16_to_fp32(h) * L < need)
        h++;
    return h;
}

/* round(v) clamped to [lo, hi]; NaN gives nanq. Float-to-int conversion of
 * an out-of-range value is undefined, so the clamp comes first. */
static inline int clamp_round(float v, int lo, int hi, int nanq)
{
    if (isnan(v))
        return nanq;
    if (v <= (float)lo)
        return lo;
    if (v >= (float)hi)
        return hi;
    return (int)roundf(v);
}

/* trunc(v) clamped: ggml's (int8_t) cast followed by MIN(15, .), for the
 * values ggml can produce from finite input, without its undefined cases. */
static inline int clamp_trunc(float v, int lo, int hi, int nanq)
{
    if (isnan(v))
        return nanq;
    if (v <= (float)lo)
        return lo;
    if (v >= (float)hi)
        return hi;
    return (int)v;
}

static inline float nan_to_zero(float x)
{
    return isnan(x) ? 0.0f : x;
}

static float absmax(const float *x, int64_t n)
{
    float a = 0.0f;
    for (int64_t i = 0; i < n; i++)
        if (isfinite(x[i]) && fabsf(x[i]) > a)
            a = fabsf(x[i]);
    return a;
}

static void minmax(const float *x, int64_t n, float *mn, float *mx)
{
    float lo = INFINITY, hi = -INFINITY;
    for (int64_t i = 0; i < n; i++)
        if (isfinite(x[i])) {
            if (x[i] < lo)
                lo = x[i];
            if (x[i] > hi)
                hi = x[i];
        }
    if (lo > hi) /* no finite element */
        lo = hi = 0.0f;
    *mn = lo;
    *mx = hi;
}

/* Element j of a 4-bit block of G elements: low nibble of qs[j] for the
 * first half, high nibble of qs[j - G/2] for the second (blocks.h). */
static void pack4(uint8_t *qs, const uint8_t *codes, uint32_t G)
{
    for (uint32_t j = 0; j < G / 2; j++)
        qs[j] = (uint8_t)((codes[j] & 15) | (codes[j + G / 2] << 4));
}

static inline int unpack4(const uint8_t *qs, uint32_t j, uint32_t G)
{
    return j < G / 2 ? qs[j] & 15 : qs[j - G / 2] >> 4;
}

void llm_q3_pack(const uint8_t *codes, int64_t n, uint8_t *qs)
{
    memset(qs, 0, (size_t)(3 * n / 8));
    for (int64_t j = 0; j < n; j++) {
        uint8_t *sub = qs + 12 * (j / 32);
        const int i = (int)(j % 32);
        sub[i & 7] |= (uint8_t)((codes[j] & 3) << (2 * (i >> 3)));
        sub[8 + (i >> 3)] |= (uint8_t)(((codes[j] >> 2) & 1) << (i & 7));
    }
}

/* Index of the NF4 value nearest v: the number of code midpoints strictly
 * below v, so a tie goes to the lower code. */
static inline int nf4_code(float v)
{
    if (isnan(v))
        return 7; /* the code of 0.0 */
    int c = 0;
    while (c < 15 && v > nf4_mid[c])
        c++;
    return c;
}


// ----------------------------------------------------------------------------
// FP8 E4M3 (OCP "fn": bias 7, no inf, S.1111.111 NaN, max 448)

float llm_fp8_e4m3_to_fp32(uint8_t v)
{
    uint32_t sign = (uint32_t)(v & 0x80) << 24;
    uint32_t exp = (v >> 3) & 15, man = v & 7;
    if (exp == 15 && man == 7)
        return llm_bits_f32(sign | 0x7fc00000);
    if (exp == 0) { /* subnormal: man * 2^-9 */
        float f = (float)man * 0x1p-9f;
        return sign ? -f : f;
    }
    return llm_bits_f32(sign | ((exp + 120) << 23) | (man << 20));
}

uint8_t llm_fp32_to_fp8_e4m3(float f)
{
    uint32_t u = llm_f32_bits(f);
    uint8_t sign = (uint8_t)((u >> 24) & 0x80);
    uint32_t a = u & 0x7fffffff;
    if (a > 0x7f800000) /* NaN */
        return sign | 0x7f;
    if (a >= 0x43e00000) /* >= 448, inf included: saturate */
        return sign | 0x7e;
    if (a < 0x3c800000) { /* below 2^-6: subnormal steps of 2^-9 */
        float y = llm_bits_f32(a) * 512.0f; /* exact: a power-of-two scaling */
        uint32_t q = (uint32_t)y;
        float rem = y - (float)q; /* exact */
        if (rem > 0.5f || (rem == 0.5f && (q & 1)))
            q++; /* q == 8 is 0x08, the smallest normal: still right */
        return (uint8_t)(sign | q);
    }
    uint32_t r = a - (120u << 23); /* rebias the exponent from 127 to 7 */
    uint32_t q = r >> 20, rem = r & 0xfffff;
    if (rem > 0x80000 || (rem == 0x80000 && (q & 1)))
        q++;
    if (q > 0x7e)
        q = 0x7e;
    return (uint8_t)(sign | q);
}

/* The smallest E4M3 value >= v (v >= 0), at most 448. */
static uint8_t fp8_up(float v)
{
    if (!(v < 448.0f))
        return 0x7e;
    uint8_t c = llm_fp32_to_fp8_e4m3(v);
    if (llm_fp8_e4m3_to_fp32(c) < v)
        c++;
    return c;
}

// ----------------------------------------------------------------------------
// quantize: grouped types (scales beside their blocks)

/* One block of G elements starting at element e0 of the row; the elements
 * past ne0 read as zero (the padding rule). buf (128). */
static const float *block_in(const float *src, int64_t ne0, int64_t e0, uint32_t G, float *buf)
{
    if (e0 + G <= ne0)
        return src + e0;
    int64_t n = ne0 - e0;
    memcpy(buf, src + e0, (size_t)n * sizeof(float));
    memset(buf + n, 0, (size_t)(G - n) * sizeof(float));
    return buf;
}

static void quant_sym8_block(const float *x, uint8_t *blk, uint32_t G, int ggml)
{
    int8_t *qs = (int8_t *)(blk + 2);
    float a = absmax(x, G);
    if (ggml) {
        const float d = a / 127.0f;
        const float id = d ? 1.0f / d : 0.0f;
        st16(blk, llm_fp32_to_fp16(d));
        for (uint32_t j = 0; j < G; j++)
            qs[j] = (int8_t)clamp_round(nan_to_zero(x[j]) * id, -127, 127, 0);
        return;
    }
    uint16_t h = fp16_scale_up(a, 127.0);
    float d = llm_fp16_to_fp32(h);
    st16(blk, h);
    for (uint32_t j = 0; j < G; j++)
        qs[j] = (int8_t)(d > 0 ? clamp_round(nan_to_zero(x[j]) / d, -127, 127, 0) : 0);
}

static void quant_sym4_block(const float *x, uint8_t *blk, uint32_t G, int ggml)
{
    uint8_t codes[128];
    if (ggml) {
        float amax = 0.0f, max = 0.0f;
        for (uint32_t j = 0; j < G; j++)
            if (isfinite(x[j]) && amax < fabsf(x[j])) {
                amax = fabsf(x[j]);
                max = x[j];
            }
        const float d = max / -8;
        const float id = d ? 1.0f / d : 0.0f;
        st16(blk, llm_fp32_to_fp16(d));
        for (uint32_t j = 0; j < G; j++)
            codes[j] = (uint8_t)clamp_trunc(nan_to_zero(x[j]) * id + 8.5f, 0, 15, 8);
    } else {
        uint16_t h = fp16_scale_up(absmax(x, G), 7.5);
        float d = llm_fp16_to_fp32(h);
        st16(blk, h);
        for (uint32_t j = 0; j < G; j++)
            codes[j] = (uint8_t)(d > 0 ? clamp_round(nan_to_zero(x[j]) / d, -8, 7, 0) + 8 : 8);
    }
    pack4(blk + 2, codes, G);
}

/* Zero-point block: d at byte 0, m at byte 2, L+1 levels, codes out. */
static void quant_zp_block(const float *x, uint8_t *blk, uint32_t G, int L, int ggml,
                           uint8_t *codes)
{
    float mn, mx;
    minmax(x, G, &mn, &mx);
    if (ggml) { /* q4_1 */
        const float d = (mx - mn) / 15;
        const float id = d ? 1.0f / d : 0.0f;
        st16(blk, llm_fp32_to_fp16(d));
        st16(blk + 2, llm_fp32_to_fp16(mn));
        for (uint32_t j = 0; j < G; j++)
            codes[j] = (uint8_t)clamp_trunc((nan_to_zero(x[j]) - mn) * id + 0.5f, 0, 15, 0);
        return;
    }
    uint16_t mh = fp16_down(mn);
    float m = llm_fp16_to_fp32(mh);
    uint16_t dh = fp16_scale_up((double)mx - (double)m, (double)L);
    float d = llm_fp16_to_fp32(dh);
    st16(blk, dh);
    st16(blk + 2, mh);
    for (uint32_t j = 0; j < G; j++)
        codes[j] = (uint8_t)(d > 0 ? clamp_round((nan_to_zero(x[j]) - m) / d, 0, L, 0) : 0);
}

static void quant_nf4_block(const float *x, uint8_t *blk)
{
    uint8_t codes[64];
    uint16_t h = llm_fp32_to_fp16(absmax(x, 64));
    if ((h & 0x7fff) >= 0x7c00) /* absmax past the half range: clip */
        h = 0x7bff;
    float d = llm_fp16_to_fp32(h);
    st16(blk, h);
    for (int j = 0; j < 64; j++)
        codes[j] = (uint8_t)(d > 0 ? nf4_code(x[j] / d) : 7);
    pack4(blk + 2, codes, 64);
}

// ----------------------------------------------------------------------------
// quantize: per-channel and row-scaled types (float32 row header)

static void quant_sym_ch(const float *x, int64_t ne0, uint8_t *dst, int bits)
{
    const float lim = bits == 8 ? 127.0f : 7.5f;
    const int lo = bits == 8 ? -127 : -8, hi = bits == 8 ? 127 : 7;
    float d = absmax(x, ne0) / lim;
    stf(dst, d);
    if (bits == 8) {
        for (int64_t i = 0; i < ne0; i++)
            dst[4 + i] = (uint8_t)(int8_t)(d > 0 ? clamp_round(nan_to_zero(x[i]) / d, lo, hi, 0) : 0);
        return;
    }
    uint8_t codes[32];
    for (int64_t b = 0; b * 32 < ne0; b++) {
        for (int64_t j = 0; j < 32; j++) {
            int64_t i = b * 32 + j;
            float v = i < ne0 ? nan_to_zero(x[i]) : 0.0f;
            codes[j] = (uint8_t)(d > 0 ? clamp_round(v / d, lo, hi, 0) + 8 : 8);
        }
        pack4(dst + 4 + b * 16, codes, 32);
    }
}

static void quant_zp_ch(const float *x, int64_t ne0, uint8_t *dst, int bits)
{
    const int L = (1 << bits) - 1;
    float m, mx;
    minmax(x, ne0, &m, &mx);
    float d = (mx - m) / (float)L;
    stf(dst, d);
    stf(dst + 4, m);
    if (bits == 8) {
        for (int64_t i = 0; i < ne0; i++)
            dst[8 + i] = (uint8_t)(d > 0 ? clamp_round((nan_to_zero(x[i]) - m) / d, 0, L, 0) : 0);
        return;
    }
    uint8_t codes[32];
    for (int64_t b = 0; b * 32 < ne0; b++) {
        for (int64_t j = 0; j < 32; j++) {
            int64_t i = b * 32 + j;
            float v = i < ne0 ? nan_to_zero(x[i]) : 0.0f;
            codes[j] = (uint8_t)(d > 0 ? clamp_round((v - m) / d, 0, L, 0) : 0);
        }
        if (bits == 3)
            llm_q3_pack(codes, 32, dst + 8 + b * 12);
        else
            pack4(dst + 8 + b * 16, codes, 32);
    }
}

static void quant_nf4_dq(const float *x, int64_t ne0, uint8_t *dst)
{
    float rowmax = absmax(x, ne0);
    float r = rowmax / 448.0f;
    stf(dst, r);
    uint8_t codes[64];
    float buf[64];
    for (int64_t b = 0; b * 64 < ne0; b++) {
        const float *xb = block_in(x, ne0, b * 64, 64, buf);
        uint8_t *blk = dst + 4 + b * (int64_t)sizeof(struct llm_block_nf4_dq);
        uint8_t s = r > 0 ? fp8_up(absmax(xb, 64) / r) : 0;
        float d = llm_fp8_e4m3_to_fp32(s) * r;
        blk[0] = s;
        for (int j = 0; j < 64; j++)
            codes[j] = (uint8_t)(d > 0 ? nf4_code(xb[j] / d) : 7);
        pack4(blk + 1, codes, 64);
    }
}

static void quant_fp8(const float *x, int64_t ne0, uint8_t *dst)
{
    float r = absmax(x, ne0) / 448.0f;
    stf(dst, r);
    for (int64_t i = 0; i < ne0; i++) {
        float v = r > 0 ? x[i] / r : (isnan(x[i]) ? x[i] : 0.0f);
        dst[4 + i] = llm_fp32_to_fp8_e4m3(v);
    }
}

// ----------------------------------------------------------------------------
// public entry points

static llm_status check_args(enum llm_type t, const void *a, const void *b, int64_t ne0,
                             const struct llm_type_traits **tr, const char *fn)
{
    *tr = llm_type_traits((uint32_t)t);
    if (!*tr || (*tr)->is_aux || kind_of[t] == K_NONE)
        return llm_error_set(LLM_E_INVALID, "%s: type %s (%u) is not a weight type", fn,
                             llm_type_name((uint32_t)t), (unsigned)t);
    if (ne0 <= 0 || ne0 > ((int64_t)1 << 53))
        return llm_error_set(LLM_E_INVALID, "%s: bad row length %lld", fn, (long long)ne0);
    if (llm_type_whole_blocks(t) && ne0 % (*tr)->blck)
        return llm_error_set(LLM_E_INVALID, "%s: rows of %lld elements are not whole %u-element "
                             "blocks of %s", fn, (long long)ne0, (*tr)->blck, (*tr)->name);
    if (!a || !b)
        return llm_error_set(LLM_E_INVALID, "%s: NULL buffer", fn);
    return LLM_OK;
}

llm_status llm_quantize_row(enum llm_type t, const float *src, void *dst_, int64_t ne0)
{
    const struct llm_type_traits *tr;
    LLM_TRY(check_args(t, src, dst_, ne0, &tr, "quantize"));
    uint8_t *dst = dst_;
    const uint32_t G = tr->blck, BB = tr->block_bytes;
    const int ggml = tr->ggml_type >= 0;
    float buf[128];
    uint8_t codes[128];

    switch ((enum kind)kind_of[t]) {
    case K_F32:
        memcpy(dst, src, (size_t)ne0 * sizeof(float));
        return LLM_OK;
    case K_F16:
        for (int64_t i = 0; i < ne0; i++)
            st16(dst + 2 * i, llm_fp32_to_fp16(src[i]));
        return LLM_OK;
    case K_BF16:
        for (int64_t i = 0; i < ne0; i++)
            st16(dst + 2 * i, llm_fp32_to_bf16(src[i]));
        return LLM_OK;
    case K_SYM8:
        if (tr->row_header)
            quant_sym_ch(src, ne0, dst, 8);
        else
            for (int64_t b = 0; b * G < ne0; b++)
                quant_sym8_block(block_in(src, ne0, b * G, G, buf), dst + b * BB, G, ggml);
        return LLM_OK;
    case K_SYM4:
        if (tr->row_header)
            quant_sym_ch(src, ne0, dst, 4);
        else
            for (int64_t b = 0; b * G < ne0; b++)
                quant_sym4_block(block_in(src, ne0, b * G, G, buf), dst + b * BB, G, ggml);
        return LLM_OK;
    case K_ZP8:
        if (tr->row_header) {
            quant_zp_ch(src, ne0, dst, 8);
        } else {
            for (int64_t b = 0; b * G < ne0; b++) {
                uint8_t *blk = dst + b * BB;
                quant_zp_block(block_in(src, ne0, b * G, G, buf), blk, G, 255, 0, codes);
                memcpy(blk + 4, codes, G);
            }
        }
        return LLM_OK;
    case K_ZP4:
    case K_ZP3: {
        const int bits = kind_of[t] == K_ZP4 ? 4 : 3;
        if (tr->row_header) {
            quant_zp_ch(src, ne0, dst, bits);
            return LLM_OK;
        }
        for (int64_t b = 0; b * G < ne0; b++) {
            uint8_t *blk = dst + b * BB;
            quant_zp_block(block_in(src, ne0, b * G, G, buf), blk, G, (1 << bits) - 1,
                           bits == 4 && ggml, codes);
            if (bits == 4)
                pack4(blk + 4, codes, G);
            else
                llm_q3_pack(codes, G, blk + 4);
        }
        return LLM_OK;
    }
    case K_NF4:
        for (int64_t b = 0; b * 64 < ne0; b++)
            quant_nf4_block(block_in(src, ne0, b * 64, 64, buf), dst + b * BB);
        return LLM_OK;
    case K_NF4DQ:
        quant_nf4_dq(src, ne0, dst);
        return LLM_OK;
    case K_FP8:
        quant_fp8(src, ne0, dst);
        return LLM_OK;
    case K_GGUF:
        return llm_kq_quantize_row(t, src, dst, ne0, NULL);
    case K_NONE:
        break;
    }
    return llm_error_set(LLM_E_INVALID, "quantize: type %u is not a weight type", (unsigned)t);
}

llm_status llm_dequantize_row(enum llm_type t, const void *src_, float *dst, int64_t ne0)
{
    const struct llm_type_traits *tr;
    LLM_TRY(check_args(t, src_, dst, ne0, &tr, "dequantize"));
    const uint8_t *src = src_;
    const uint32_t G = tr->blck, BB = tr->block_bytes, hdr = tr->row_header;

    switch ((enum kind)kind_of[t]) {
    case K_F32:
        memcpy(dst, src, (size_t)ne0 * sizeof(float));
        return LLM_OK;
    case K_F16:
        for (int64_t i = 0; i < ne0; i++)
            dst[i] = h2f(src + 2 * i);
        return LLM_OK;
    case K_BF16:
        for (int64_t i = 0; i < ne0; i++)
            dst[i] = llm_bf16_to_fp32(ld16(src + 2 * i));
        return LLM_OK;
    case K_SYM8:
        for (int64_t i = 0; i < ne0; i++) {
            const uint8_t *blk = src + hdr + i / G * BB;
            float d = hdr ? ldf(src) : h2f(blk);
            dst[i] = (float)(int8_t)blk[BB - G + i % G] * d;
        }
        return LLM_OK;
    case K_SYM4:
        for (int64_t i = 0; i < ne0; i++) {
            const uint8_t *blk = src + hdr + i / G * BB;
            float d = hdr ? ldf(src) : h2f(blk);
            dst[i] = (float)(unpack4(blk + BB - G / 2, (uint32_t)(i % G), G) - 8) * d;
        }
        return LLM_OK;
    case K_ZP8:
    case K_ZP4:
    case K_ZP3:
        for (int64_t i = 0; i < ne0; i++) {
            const uint8_t *blk = src + hdr + i / G * BB;
            float d = hdr ? ldf(src) : h2f(blk);
            float m = hdr ? ldf(src + 4) : h2f(blk + 2);
            int q = kind_of[t] == K_ZP8   ? blk[BB - G + i % G]
                    : kind_of[t] == K_ZP4 ? unpack4(blk + BB - G / 2, (uint32_t)(i % G), G)
                                          : llm_q3_code(blk + BB - 3 * G / 8, i % G);
            float p = (float)q * d; /* two roundings, never an fma (see top) */
            dst[i] = p + m;
        }
        return LLM_OK;
    case K_NF4:
        for (int64_t i = 0; i < ne0; i++) {
            const uint8_t *blk = src + i / 64 * BB;
            dst[i] = nf4_values[unpack4(blk + 2, (uint32_t)(i % 64), 64)] * h2f(blk);
        }
        return LLM_OK;
    case K_NF4DQ: {
        float r = ldf(src);
        for (int64_t i = 0; i < ne0; i++) {
            const uint8_t *blk = src + hdr + i / 64 * BB;
            float d = llm_fp8_e4m3_to_fp32(blk[0]) * r;
            dst[i] = nf4_values[unpack4(blk + 1, (uint32_t)(i % 64), 64)] * d;
        }
        return LLM_OK;
    }
    case K_FP8: {
        float r = ldf(src);
        for (int64_t i = 0; i < ne0; i++)
            dst[i] = llm_fp8_e4m3_to_fp32(src[4 + i]) * r;
        return LLM_OK;
    }
    case K_GGUF:
        return llm_ggml_dequantize_row((uint32_t)tr->ggml_type, src, dst, ne0);
    case K_NONE:
        break;
    }
    return llm_error_set(LLM_E_INVALID, "dequantize: type %u is not a weight type", (unsigned)t);
}

llm_status llm_convert_rows(enum llm_type from, const void *src_, enum llm_type to, void *dst_,
                            int64_t ne0, int64_t nrows)
{
    const struct llm_type_traits *tf = llm_type_traits((uint32_t)from);
    const struct llm_type_traits *tt = llm_type_traits((uint32_t)to);
    if (!tf || !tt)
        return llm_error_set(LLM_E_INVALID, "convert: unknown type %u", (unsigned)(tf ? to : from));
    if (ne0 <= 0 || ne0 > ((int64_t)1 << 53) || nrows < 0)
        return llm_error_set(LLM_E_INVALID, "convert: bad shape %lld x %lld", (long long)ne0,
                             (long long)nrows);
    if (nrows == 0)
        return LLM_OK;
    if (!src_ || !dst_)
        return llm_error_set(LLM_E_INVALID, "convert: NULL buffer");
    uint64_t rb_from = llm_type_row_bytes(from, (uint64_t)ne0);
    uint64_t rb_to = llm_type_row_bytes(to, (uint64_t)ne0);
    uint64_t total;
    if (!rb_from || !rb_to || !llm_mul_ok(rb_from, (uint64_t)nrows, &total) ||
        !llm_mul_ok(rb_to, (uint64_t)nrows, &total) || total > SIZE_MAX)
        return llm_error_set(LLM_E_INVALID, "convert: %lld x %lld elements overflow",
                             (long long)nrows, (long long)ne0);
    const uint8_t *src = src_;
    uint8_t *dst = dst_;

    if (from == to) {
        memcpy(dst, src, (size_t)(rb_from * (uint64_t)nrows));
        return LLM_OK;
    }
    if (tf->is_aux || tt->is_aux)
        return llm_error_set(LLM_E_INVALID, "convert: cannot convert %s to %s", tf->name, tt->name);
    if (from == LLM_TYPE_F32) { /* no scratch: quantize straight from the source */
        for (int64_t r = 0; r < nrows; r++)
            LLM_TRY(llm_quantize_row(to, (const float *)(src + (uint64_t)r * rb_from),
                                     dst + (uint64_t)r * rb_to, ne0));
        return LLM_OK;
    }
    if (to == LLM_TYPE_F32) {
        for (int64_t r = 0; r < nrows; r++)
            LLM_TRY(llm_dequantize_row(from, src + (uint64_t)r * rb_from,
                                       (float *)(dst + (uint64_t)r * rb_to), ne0));
        return LLM_OK;
    }
    float *row = llm_malloc((size_t)ne0 * sizeof(float)); // (ne0)
    if (!row)
        return LLM_E_NOMEM;
    llm_status s = LLM_OK;
    for (int64_t r = 0; r < nrows && s == LLM_OK; r++) {
        s = llm_dequantize_row(from, src + (uint64_t)r * rb_from, row, ne0);
        if (s == LLM_OK)
            s = llm_quantize_row(to, row, dst + (uint64_t)r * rb_to, ne0);
    }
    llm_free(row);
    return s;
}
