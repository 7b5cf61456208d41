/* matmul_avx2.c: the AVX2 + FMA + F16C variant of the products (see
 * matmul_simd.h). Only this file is compiled for that target, so the rest
 * of the build stays generic; matmul.c calls it when the CPU has AVX2. */
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h> /* before the target switch: clang's intrinsics carry their own */
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c"))), apply_to = function)
#else
#pragma GCC target("avx2,fma,f16c")
#endif

#define SIMD(name) name##_avx2

/* maddubs: u8 x s8 pairs to int16 (no saturation: |u| <= 128, |s| <= 127
 * gives at most 32512), then pairs of int16 to int32 */
#define DOT_U8S8(i, u, s) \
    _mm256_add_epi32((i), _mm256_madd_epi16(_mm256_maddubs_epi16((u), (s)), _mm256_set1_epi16(1)))

#include "matmul_simd.h"

#if defined(__clang__)
#pragma clang attribute pop
#endif

#else

#include "matmul_impl.h"

llm_status llm_matvec_avx2(enum llm_type t, const void *W, const float *x, float *y, int64_t ne0,
                           uint64_t row_bytes, int64_t r0, int64_t r1, int act, int inv)
{
    (void)t, (void)W, (void)x, (void)y, (void)ne0, (void)row_bytes, (void)r0, (void)r1, (void)act;
    (void)inv;
    return llm_error_set(LLM_E_UNSUPPORTED, "matvec: no AVX2 on this build");
}

llm_status llm_matmul_avx2(enum llm_type t, const void *W, const float *X, float *Y, int64_t ne0,
                           uint64_t row_bytes, int64_t nb, int64_t ldy, int64_t r0, int64_t r1,
                           int act, int inv)
{
    (void)inv;
    (void)t, (void)W, (void)X, (void)Y, (void)ne0, (void)row_bytes, (void)nb, (void)ldy;
    (void)r0, (void)r1, (void)act;
    return llm_error_set(LLM_E_UNSUPPORTED, "matmul: no AVX2 on this build");
}

llm_status llm_matvec_x16_avx2(enum llm_type t, const void *P, const float *x, float *y,
                               int64_t ne0, int64_t r0, int64_t r1)
{
    (void)t, (void)P, (void)x, (void)y, (void)ne0, (void)r0, (void)r1;
    return llm_error_set(LLM_E_UNSUPPORTED, "matvec: no AVX2 on this build");
}

llm_status llm_matmul_x16_avx2(enum llm_type t, const void *P, const float *X, float *Y,
                               int64_t ne0, int64_t nb, int64_t ldy, int64_t r0, int64_t r1)
{
    (void)t, (void)P, (void)X, (void)Y, (void)ne0, (void)nb, (void)ldy, (void)r0, (void)r1;
    return llm_error_set(LLM_E_UNSUPPORTED, "matmul: no AVX2 on this build");
}

#endif
