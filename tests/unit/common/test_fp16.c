/* test_fp16.c: half and bfloat16 conversions against the hardware (F16C)
 * and against exhaustive round trips. */
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "../../../lib/common/fp16.h"
#include "../helpers.h"

__attribute__((target("f16c"))) static uint16_t hw_to_half(float f)
{
    return (uint16_t)_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT);
}

__attribute__((target("f16c"))) static float hw_from_half(uint16_t h)
{
    return _cvtsh_ss(h);
}

static uint32_t rng = 12345;
static uint32_t next(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 17;
    rng ^= rng << 5;
    return rng;
}

Test(fp16, every_half_round_trips)
{
    for (uint32_t h = 0; h < 65536; h++) {
        float f = llm_fp16_to_fp32((uint16_t)h);
        if (isnan(f)) {
            cr_assert(((h >> 10) & 0x1f) == 0x1f && (h & 0x3ff));
            continue;
        }
        cr_assert_eq(llm_fp32_to_fp16(f), h, "half 0x%04x -> %g -> 0x%04x", h, f, llm_fp32_to_fp16(f));
    }
}

Test(fp16, matches_f16c_hardware)
{
    if (!__builtin_cpu_supports("f16c")) {
        cr_skip_test("this CPU has no F16C");
        return;
    }
    for (uint32_t h = 0; h < 65536; h++) {
        float a = llm_fp16_to_fp32((uint16_t)h), b = hw_from_half((uint16_t)h);
        cr_assert(memcmp(&a, &b, 4) == 0 || (isnan(a) && isnan(b)), "decode 0x%04x", h);
    }
    for (int i = 0; i < 2000000; i++) {
        uint32_t u = next();
        float f;
        memcpy(&f, &u, 4);
        if (isnan(f))
            continue;
        cr_assert_eq(llm_fp32_to_fp16(f), hw_to_half(f), "encode 0x%08x (%g)", u, f);
    }
}

Test(fp16, bfloat16_rounds_to_nearest_even)
{
    cr_assert_eq(llm_fp32_to_bf16(1.0f), 0x3f80);
    cr_assert_eq(llm_bf16_to_fp32(0x3f80), 1.0f);
    /* 1 + 2^-8 is exactly halfway between bf16 1.0 and 1.0078125: to even */
    cr_assert_eq(llm_fp32_to_bf16(1.00390625f), 0x3f80);
    cr_assert_eq(llm_fp32_to_bf16(1.01171875f), 0x3f82);
    uint16_t nan = llm_fp32_to_bf16(NAN);
    cr_assert(isnan(llm_bf16_to_fp32(nan)));
    for (uint32_t b = 0; b < 65536; b++) {
        float f = llm_bf16_to_fp32((uint16_t)b);
        if (!isnan(f))
            cr_assert_eq(llm_fp32_to_bf16(f), b);
    }
}
