/* fp16.h: IEEE binary16 and bfloat16 conversions, exact and portable.
 * (Hardware F16C paths belong to the ops; these are the references.) */
#ifndef LLM_COMMON_FP16_H
#define LLM_COMMON_FP16_H

#include <stdint.h>
#include <string.h>

static inline uint32_t llm_f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static inline float llm_bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* binary16 -> binary32, exact for every input (subnormals, inf, NaN). */
static inline float llm_fp16_to_fp32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f;
    uint32_t man = h & 0x3ff;
    if (exp == 0x1f) /* inf / NaN: keep the payload */
        return llm_bits_f32(sign | 0x7f800000 | (man << 13));
    if (exp == 0) {
        if (man == 0)
            return llm_bits_f32(sign);
        /* subnormal: value = man * 2^-24 */
        float f = (float)man * (1.0f / 16777216.0f);
        return sign ? -f : f;
    }
    return llm_bits_f32(sign | ((exp + 112) << 23) | (man << 13));
}

/* binary32 -> binary16, round to nearest even; overflow -> inf; NaN stays NaN. */
static inline uint16_t llm_fp32_to_fp16(float f)
{
    uint32_t u = llm_f32_bits(f);
    uint32_t sign = (u >> 16) & 0x8000;
    uint32_t a = u & 0x7fffffff;
    if (a > 0x7f800000) /* NaN: quiet, keep top payload bits */
        return (uint16_t)(sign | 0x7e00 | ((a >> 13) & 0x3ff));
    if (a >= 0x477ff000) /* rounds to >= 65520: inf */
        return (uint16_t)(sign | 0x7c00);
    if (a < 0x38800000) { /* below the smallest normal half: subnormal or 0 */
        if (a < 0x33000000) /* < 2^-25: rounds to 0 */
            return (uint16_t)sign;
        uint32_t e = a >> 23;
        uint32_t m = (a & 0x7fffff) | 0x800000;
        uint32_t shift = 126 - e; /* 14..24 */
        uint32_t q = m >> shift;
        uint32_t rem = m & ((1u << shift) - 1);
        uint32_t half = 1u << (shift - 1);
        if (rem > half || (rem == half && (q & 1)))
            q++;
        return (uint16_t)(sign | q);
    }
    uint32_t r = a - 0x38000000; /* rebias exponent: 127 -> 15 */
    uint32_t q = r >> 13;
    uint32_t rem = r & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (q & 1)))
        q++;
    return (uint16_t)(sign | q);
}

static inline float llm_bf16_to_fp32(uint16_t b)
{
    return llm_bits_f32((uint32_t)b << 16);
}

/* binary32 -> bfloat16, round to nearest even; NaN forced quiet (as ggml). */
static inline uint16_t llm_fp32_to_bf16(float f)
{
    uint32_t u = llm_f32_bits(f);
    if ((u & 0x7fffffff) > 0x7f800000)
        return (uint16_t)((u >> 16) | 64);
    return (uint16_t)((u + (0x7fff + ((u >> 16) & 1))) >> 16);
}

#endif
