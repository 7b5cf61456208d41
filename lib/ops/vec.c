/* vec.c: the attention vector kernels of vec.h: plain C references and
 * AVX2 (+FMA, F16C) / AVX-512 variants, compiled here with per-function
 * target attributes and picked at run time like llm_matmul's (LLM_ISA
 * caps both). Four accumulators: one FMA chain would wait on its latency
 * (4 cycles) every step. */
#include "vec.h"

#include <string.h>

#include "../common/fp16.h"
#include "matmul_impl.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define VEC_X86 1
#endif

float llm_vec_dot_f32_ref(const float *a, const float *b, int64_t n)
{
    double s = 0.0;
    for (int64_t i = 0; i < n; i++)
        s += (double)a[i] * b[i];
    return (float)s;
}

float llm_vec_dot_f16_ref(const float *a, const uint16_t *b, int64_t n)
{
    double s = 0.0;
    for (int64_t i = 0; i < n; i++)
        s += (double)a[i] * llm_fp16_to_fp32(b[i]);
    return (float)s;
}

void llm_vec_axpy_f32_ref(float *y, float a, const float *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        y[i] += a * x[i];
}

void llm_vec_axpy_f16_ref(float *y, float a, const uint16_t *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        y[i] += a * llm_fp16_to_fp32(x[i]);
}

#ifdef VEC_X86

#define T_AVX2 __attribute__((target("avx2,fma,f16c")))
#define T_AVX512 __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl")))

static T_AVX2 float hsum8(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* 8 floats of b at i: float or fp16 */
#define LD8_F32(b, i) _mm256_loadu_ps((b) + (i))
#define LD8_F16(b, i) _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((b) + (i))))
#define LD16_F32(b, i) _mm512_loadu_ps((b) + (i))
#define LD16_F16(b, i) _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((b) + (i))))
#define MLD16_F32(m, b, i) _mm512_maskz_loadu_ps((m), (b) + (i))
#define MLD16_F16(m, b, i) _mm512_cvtph_ps(_mm256_maskz_loadu_epi16((m), (b) + (i)))

#define DOT_AVX2(NAME, BT, LD8, CVT1)                                                   \
    static T_AVX2 float NAME(const float *a, const BT *b, int64_t n)                  \
    {                                                                                 \
        __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;                   \
        int64_t i = 0;                                                                \
        for (; i + 32 <= n; i += 32) {                                                \
            s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), LD8(b, i), s0);              \
            s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), LD8(b, i + 8), s1);      \
            s2 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 16), LD8(b, i + 16), s2);    \
            s3 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 24), LD8(b, i + 24), s3);    \
        }                                                                             \
        for (; i + 8 <= n; i += 8)                                                    \
            s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), LD8(b, i), s0);              \
        float s = hsum8(_mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3))); \
        for (; i < n; i++)                                                            \
            s += a[i] * CVT1(b[i]);                                                   \
        return s;                                                                     \
    }

#define AXPY_AVX2(NAME, BT, LD8, CVT1)                                             \
    static T_AVX2 void NAME(float *y, float a, const BT *x, int64_t n)           \
    {                                                                            \
        const __m256 va = _mm256_set1_ps(a);                                     \
        int64_t i = 0;                                                           \
        for (; i + 8 <= n; i += 8)                                               \
            _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, LD8(x, i), _mm256_loadu_ps(y + i))); \
        for (; i < n; i++)                                                       \
            y[i] += a * CVT1(x[i]);                                              \
    }

/* AVX-512: the tail in one masked step */
#define DOT_AVX512(NAME, BT, LD16, MLD16)                                               \
    static T_AVX512 float NAME(const float *a, const BT *b, int64_t n)                \
    {                                                                                 \
        __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;                   \
        int64_t i = 0;                                                                \
        for (; i + 64 <= n; i += 64) {                                                \
            s0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), LD16(b, i), s0);             \
            s1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 16), LD16(b, i + 16), s1);   \
            s2 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 32), LD16(b, i + 32), s2);   \
            s3 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 48), LD16(b, i + 48), s3);   \
        }                                                                             \
        for (; i + 16 <= n; i += 16)                                                  \
            s0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), LD16(b, i), s0);             \
        if (i < n) {                                                                  \
            const __mmask16 m = (__mmask16)((1u << (n - i)) - 1);                     \
            s1 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + i), MLD16(m, b, i), s1); \
        }                                                                             \
        return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(s0, s1), _mm512_add_ps(s2, s3))); \
    }

#define AXPY_AVX512(NAME, BT, LD16, MLD16)                                          \
    static T_AVX512 void NAME(float *y, float a, const BT *x, int64_t n)          \
    {                                                                             \
        const __m512 va = _mm512_set1_ps(a);                                      \
        int64_t i = 0;                                                            \
        for (; i + 16 <= n; i += 16)                                              \
            _mm512_storeu_ps(y + i, _mm512_fmadd_ps(va, LD16(x, i), _mm512_loadu_ps(y + i))); \
        if (i < n) {                                                              \
            const __mmask16 m = (__mmask16)((1u << (n - i)) - 1);                 \
            _mm512_mask_storeu_ps(y + i, m,                                       \
                                  _mm512_fmadd_ps(va, MLD16(m, x, i), _mm512_maskz_loadu_ps(m, y + i))); \
        }                                                                         \
    }

#define CVT_F32(v) (v)
#define CVT_F16(v) llm_fp16_to_fp32(v)

DOT_AVX2(dot_f32_avx2, float, LD8_F32, CVT_F32)
DOT_AVX2(dot_f16_avx2, uint16_t, LD8_F16, CVT_F16)
AXPY_AVX2(axpy_f32_avx2, float, LD8_F32, CVT_F32)
AXPY_AVX2(axpy_f16_avx2, uint16_t, LD8_F16, CVT_F16)
DOT_AVX512(dot_f32_avx512, float, LD16_F32, MLD16_F32)
DOT_AVX512(dot_f16_avx512, uint16_t, LD16_F16, MLD16_F16)
AXPY_AVX512(axpy_f32_avx512, float, LD16_F32, MLD16_F32)
AXPY_AVX512(axpy_f16_avx512, uint16_t, LD16_F16, MLD16_F16)

#define VEC_DISPATCH(avx512, avx2, ref, ...) \
    switch (llm_matmul_isa()) {              \
    case LLM_ISA_AVX512:                     \
        return avx512(__VA_ARGS__);          \
    case LLM_ISA_AVX2:                       \
        return avx2(__VA_ARGS__);            \
    default:                                 \
        return ref(__VA_ARGS__);             \
    }

#else

#define VEC_DISPATCH(avx512, avx2, ref, ...) return ref(__VA_ARGS__);

#endif

float llm_vec_dot_f32(const float *a, const float *b, int64_t n)
{
    VEC_DISPATCH(dot_f32_avx512, dot_f32_avx2, llm_vec_dot_f32_ref, a, b, n)
}

float llm_vec_dot_f16(const float *a, const uint16_t *b, int64_t n)
{
    VEC_DISPATCH(dot_f16_avx512, dot_f16_avx2, llm_vec_dot_f16_ref, a, b, n)
}

void llm_vec_axpy_f32(float *y, float a, const float *x, int64_t n)
{
    VEC_DISPATCH(axpy_f32_avx512, axpy_f32_avx2, llm_vec_axpy_f32_ref, y, a, x, n)
}

void llm_vec_axpy_f16(float *y, float a, const uint16_t *x, int64_t n)
{
    VEC_DISPATCH(axpy_f16_avx512, axpy_f16_avx2, llm_vec_axpy_f16_ref, y, a, x, n)
}
