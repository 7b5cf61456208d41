/* matmul_avx512.c: the AVX-512 VNNI variant of the products (see
 * matmul_simd.h): with float activations the int8/int4 codes are converted
 * and multiplied 16 per instruction (512-bit); with int16 activations a
 * pair of codes is one vpdpwssd, with int8 ones a block is one vpdpbusd
 * (256-bit, VL) instead of maddubs + madd. Only this file is compiled for
 * that target; matmul.c calls it when the CPU has AVX-512 F/BW/VL/VNNI. */
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h> /* before the target switch: clang's intrinsics carry their own */
#if defined(__clang__)
#pragma clang attribute push(                                                           \
    __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni"))), \
    apply_to = function)
#else
#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")
#endif

#define SIMD(name) name##_avx512
/* the float-activation kernels use 512-bit vectors */
#define SIMD_AVX512 1

#define DOT_U8S8(i, u, s) _mm256_dpbusd_epi32((i), (u), (s))

#include "matmul_simd.h"

#if defined(__clang__)
#pragma clang attribute pop
#endif

#else

#include "matmul_impl.h"

llm_status llm_matvec_avx512(enum llm_type t, const void *W, const float *x, float *y,
                             int64_t ne0, uint64_t row_bytes, int64_t r0, int64_t r1, int act, int inv)
{
    (void)t, (void)W, (void)x, (void)y, (void)ne0, (void)row_bytes, (void)r0, (void)r1, (void)act;
    (void)inv;
    return llm_error_set(LLM_E_UNSUPPORTED, "matvec: no AVX-512 on this build");
}

llm_status llm_matmul_avx512(enum llm_type t, const void *W, const float *X, float *Y,
                             int64_t ne0, uint64_t row_bytes, int64_t nb, int64_t ldy, int64_t r0,
                             int64_t r1, int act, int inv)
{
    (void)inv;
    (void)t, (void)W, (void)X, (void)Y, (void)ne0, (void)row_bytes, (void)nb, (void)ldy;
    (void)r0, (void)r1, (void)act;
    return llm_error_set(LLM_E_UNSUPPORTED, "matmul: no AVX-512 on this build");
}

llm_status llm_matvec_x16_avx512(enum llm_type t, const void *P, const float *x, float *y,
                                 int64_t ne0, int64_t r0, int64_t r1)
{
    (void)t, (void)P, (void)x, (void)y, (void)ne0, (void)r0, (void)r1;
    return llm_error_set(LLM_E_UNSUPPORTED, "matvec: no AVX-512 on this build");
}

llm_status llm_matmul_x16_avx512(enum llm_type t, const void *P, const float *X, float *Y,
                                 int64_t ne0, int64_t nb, int64_t ldy, int64_t r0, int64_t r1)
{
    (void)t, (void)P, (void)X, (void)Y, (void)ne0, (void)nb, (void)ldy, (void)r0, (void)r1;
    return llm_error_set(LLM_E_UNSUPPORTED, "matmul: no AVX-512 on this build");
}

#endif
