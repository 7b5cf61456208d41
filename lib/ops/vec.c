/* vec.c: the attention vector kernels of vec.h: plain C references and
 * AVX2 (+FMA, F16C) / AVX-512 variants, compiled here with per-function
 * target attributes and picked at run time like llm_matmul's (LLM_ISA
 * caps both). */
#include "vec.h"

#include <math.h>
#include <string.h>

#include "../common/fp16.h"
#include "../quant/blocks.h"
#include "../quant/quant.h"
#include "matmul_impl.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define VEC_X86 1
#endif

static float dot_f32_ref(const float *a, const float *b, int64_t n)
{
    double s = 0.0;
    for (int64_t i = 0; i < n; i++)
        s += (double)a[i] * b[i];
    return (float)s;
}

static float dot_f16_ref(const float *a, const uint16_t *b, int64_t n)
{
    double s = 0.0;
    for (int64_t i = 0; i < n; i++)
        s += (double)a[i] * llm_fp16_to_fp32(b[i]);
    return (float)s;
}

static float dot_bf16_ref(const float *a, const uint16_t *b, int64_t n)
{
    double s = 0.0;
    for (int64_t i = 0; i < n; i++)
        s += (double)a[i] * llm_bf16_to_fp32(b[i]);
    return (float)s;
}

static float dot_fp8_ref(const float *a, const uint8_t *b, int64_t n)
{
    double s = 0.0;
    for (int64_t i = 0; i < n; i++)
        s += (double)a[i] * llm_fp8_e4m3_to_fp32(b[i]);
    return (float)s;
}

static void axpy_f32_ref(float *y, float a, const float *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        y[i] += a * x[i];
}

static void axpy_f16_ref(float *y, float a, const uint16_t *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        y[i] += a * llm_fp16_to_fp32(x[i]);
}

static void axpy_bf16_ref(float *y, float a, const uint16_t *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        y[i] += a * llm_bf16_to_fp32(x[i]);
}

void llm_vec_dots_f32_ref(const float *q, const float *K, int64_t ldk, int64_t m, int64_t n,
                          float *s)
{
    for (int64_t r = 0; r < m; r++)
        s[r] = dot_f32_ref(q, K + r * ldk, n);
}

void llm_vec_dots_f16_ref(const float *q, const uint16_t *K, int64_t ldk, int64_t m, int64_t n,
                          float *s)
{
    for (int64_t r = 0; r < m; r++)
        s[r] = dot_f16_ref(q, K + r * ldk, n);
}

void llm_vec_dots_bf16_ref(const float *q, const uint16_t *K, int64_t ldk, int64_t m, int64_t n,
                           float *s)
{
    for (int64_t r = 0; r < m; r++)
        s[r] = dot_bf16_ref(q, K + r * ldk, n);
}

void llm_vec_dots_fp8_ref(const float *q, const uint8_t *K, int64_t ldk, int64_t m, int64_t n,
                          float *s)
{
    for (int64_t r = 0; r < m; r++)
        s[r] = dot_fp8_ref(q, K + r * ldk, n);
}

void llm_vec_axpys_f32_ref(float *y, const float *w, const float *V, int64_t ldv, int64_t m,
                           int64_t n)
{
    for (int64_t r = 0; r < m; r++)
        axpy_f32_ref(y, w[r], V + r * ldv, n);
}

void llm_vec_axpys_f16_ref(float *y, const float *w, const uint16_t *V, int64_t ldv, int64_t m,
                           int64_t n)
{
    for (int64_t r = 0; r < m; r++)
        axpy_f16_ref(y, w[r], V + r * ldv, n);
}

void llm_vec_axpys_bf16_ref(float *y, const float *w, const uint16_t *V, int64_t ldv, int64_t m,
                            int64_t n)
{
    for (int64_t r = 0; r < m; r++)
        axpy_bf16_ref(y, w[r], V + r * ldv, n);
}

void llm_vec_axpys_fp8_ref(float *y, const float *w, const uint8_t *V, int64_t ldv, int64_t m,
                           int64_t n)
{
    for (int64_t r = 0; r < m; r++)
        for (int64_t i = 0; i < n; i++)
            y[i] += w[r] * llm_fp8_e4m3_to_fp32(V[r * ldv + i]);
}

void llm_vec_hadamard32(float *x, int64_t n)
{
    const float norm = 0.17677669529663688f; /* 1 / sqrt(32) */
    for (int64_t b = 0; b + 32 <= n; b += 32) {
        float *v = x + b;
        for (int h = 1; h < 32; h *= 2)
            for (int i = 0; i < 32; i += 2 * h)
                for (int j = i; j < i + h; j++) {
                    const float a = v[j], c = v[j + h];
                    v[j] = a + c;
                    v[j + h] = a - c;
                }
        for (int i = 0; i < 32; i++)
            v[i] *= norm;
    }
}

/* q8_0 rows: blocks of 32 int8 and their fp16 scale d; n a multiple of 32,
 * ldk (ldv) in bytes. */
static float dot_q8_0_ref(const float *a, const struct llm_block_q8_0 *b, int64_t n)
{
    double s = 0.0;
    for (int64_t k = 0; k < n / 32; k++) {
        double t = 0.0;
        for (int i = 0; i < 32; i++)
            t += (double)a[32 * k + i] * b[k].qs[i];
        s += t * llm_fp16_to_fp32(b[k].d);
    }
    return (float)s;
}

void llm_vec_dots_q8_0_ref(const float *q, const uint8_t *K, int64_t ldk, int64_t m, int64_t n,
                           float *s)
{
    for (int64_t r = 0; r < m; r++)
        s[r] = dot_q8_0_ref(q, (const struct llm_block_q8_0 *)(K + r * ldk), n);
}

void llm_vec_axpys_q8_0_ref(float *y, const float *w, const uint8_t *V, int64_t ldv, int64_t m,
                            int64_t n)
{
    for (int64_t r = 0; r < m; r++) {
        const struct llm_block_q8_0 *b = (const struct llm_block_q8_0 *)(V + r * ldv);
        for (int64_t k = 0; k < n / 32; k++) {
            const float c = w[r] * llm_fp16_to_fp32(b[k].d);
            for (int i = 0; i < 32; i++)
                y[32 * k + i] += c * (float)b[k].qs[i];
        }
    }
}

static inline int q4ch_code(const uint8_t *cc, int64_t t)
{
    return cc[llm_q4ch_byte(t)] >> llm_q4ch_shift(t) & 15;
}

void llm_vec_dots_q4ch_ref(const float *q, const uint8_t *blk, int64_t n, int64_t bs, float *s)
{
    const uint16_t *sc = (const uint16_t *)blk, *mn = sc + n;
    const uint8_t *codes = blk + 4 * n;
    for (int64_t t = 0; t < bs; t++) {
        double sum = 0.0;
        for (int64_t i = 0; i < n; i++)
            sum += (double)q[i] * ((double)llm_fp16_to_fp32(mn[i]) +
                                   q4ch_code(codes + i * (bs / 2), t) *
                                       (double)llm_fp16_to_fp32(sc[i]));
        s[t] = (float)sum;
    }
}

/* q4_0: element i of a block is the low nibble of qs[i] (i < 16), else
 * the high nibble of qs[i - 16]; the value is (code - 8) d */
static inline int q4_code(const struct llm_block_q4_0 *b, int i)
{
    return (i < 16 ? b->qs[i] & 15 : b->qs[i - 16] >> 4) - 8;
}

void llm_vec_dots_q4_0_ref(const float *q, const uint8_t *K, int64_t ldk, int64_t m, int64_t n,
                           float *s)
{
    for (int64_t r = 0; r < m; r++) {
        const struct llm_block_q4_0 *b = (const struct llm_block_q4_0 *)(K + r * ldk);
        double sum = 0.0;
        for (int64_t k = 0; k < n / 32; k++) {
            double t = 0.0;
            for (int i = 0; i < 32; i++)
                t += (double)q[32 * k + i] * q4_code(&b[k], i);
            sum += t * llm_fp16_to_fp32(b[k].d);
        }
        s[r] = (float)sum;
    }
}

void llm_vec_axpys_q4_0_ref(float *y, const float *w, const uint8_t *V, int64_t ldv, int64_t m,
                            int64_t n)
{
    for (int64_t r = 0; r < m; r++) {
        const struct llm_block_q4_0 *b = (const struct llm_block_q4_0 *)(V + r * ldv);
        for (int64_t k = 0; k < n / 32; k++) {
            const float c = w[r] * llm_fp16_to_fp32(b[k].d);
            for (int i = 0; i < 32; i++)
                y[32 * k + i] += c * (float)q4_code(&b[k], i);
        }
    }
}

void llm_vec_to_f16_ref(const float *x, uint16_t *y, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        y[i] = llm_fp32_to_fp16(x[i]);
}

/* Cephes' expf: n = round(x / ln 2), r = x - n ln 2 (ln 2 in two parts),
 * exp(r) by its degree-6 polynomial, times 2^n; x clamped to
 * [-87, 88] so that the result is a normal float. */
#define EXP_LO (-87.0f)
#define EXP_HI 88.0f
#define EXP_LOG2E 1.44269504088896341f
#define EXP_C1 0.693359375f
#define EXP_C2 (-2.12194440e-4f)
#define EXP_P0 1.9875691500e-4f
#define EXP_P1 1.3981999507e-3f
#define EXP_P2 8.3334519073e-3f
#define EXP_P3 4.1665795894e-2f
#define EXP_P4 1.6666665459e-1f
#define EXP_P5 5.0000001201e-1f
#define GELU_K 0.7978845608028654f /* sqrt(2 / pi) */
#define GELU_C 0.044715f

static float exp_poly(float x)
{
    /* max then min, as the vector kernels' _mm*_max_ps and _mm*_min_ps:
     * a NaN becomes EXP_LO there, so it does here (and never reaches the
     * integer conversion below, where it would be undefined) */
    x = x > EXP_LO ? x : EXP_LO;
    x = x < EXP_HI ? x : EXP_HI;
    const float n = nearbyintf(x * EXP_LOG2E);
    const float r = x - n * EXP_C1 - n * EXP_C2;
    float p = EXP_P0;
    p = p * r + EXP_P1;
    p = p * r + EXP_P2;
    p = p * r + EXP_P3;
    p = p * r + EXP_P4;
    p = p * r + EXP_P5;
    p = p * (r * r) + r + 1.0f;
    const uint32_t bits = (uint32_t)((int32_t)n + 127) << 23;
    float two_n;
    memcpy(&two_n, &bits, 4);
    return p * two_n;
}

void llm_vec_geglu_ref(float *g, const float *u, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        const float x = g[i], z = GELU_K * (x + GELU_C * (x * x * x));
        g[i] = x / (1.0f + exp_poly(-2.0f * z)) * u[i];
    }
}

void llm_vec_swiglu_ref(float *g, const float *u, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        g[i] = g[i] / (1.0f + exp_poly(-g[i])) * u[i];
}

/* the scale (and Gemma 2's soft cap) and the maximum, every tier's first
 * pass: element-wise, and the maximum does not depend on the order */
static float softmax_scale(float *s, int64_t lo, int64_t hi, float scale, float softcap)
{
    float mx = -INFINITY;
    for (int64_t p = lo; p < hi; p++) {
        float v = s[p] * scale;
        if (softcap > 0)
            v = softcap * tanhf(v / softcap);
        s[p] = v;
        mx = v > mx ? v : mx;
    }
    return mx;
}

/* the lanes' sums in a fixed order */
static float softmax_lanes(const float *l)
{
    return ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));
}

void llm_vec_softmax_ref(float *s, int64_t lo, int64_t hi, float scale, float softcap)
{
    const float mx = softmax_scale(s, lo, hi, scale, softcap);
    float lane[8] = { 0 };
    for (int64_t p = lo; p < hi; p++) {
        s[p] = exp_poly(s[p] - mx);
        lane[p & 7] += s[p];
    }
    const float inv = 1.0f / softmax_lanes(lane);
    for (int64_t p = lo; p < hi; p++)
        s[p] *= inv;
}

void llm_vec_transpose_ref(const float *x, int64_t ldx, int64_t rows, int64_t cols, float *t,
                           int64_t ldt)
{
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < cols; j++)
            t[j * ldt + i] = x[i * ldx + j];
}

static float rms_scale(float ss, int64_t dim, float eps)
{
    return 1.0f / sqrtf(ss / (float)dim + eps);
}

void llm_vec_rmsnorm_ref(const float *x, const float *g, float *y, int64_t n, int64_t dim,
                         float eps)
{
    for (int64_t t = 0; t < n; t++) {
        const float *xi = x + t * dim;
        float *yi = y + t * dim, ss = 0.0f;
        for (int64_t k = 0; k < dim; k++)
            ss += xi[k] * xi[k];
        ss = rms_scale(ss, dim, eps);
        for (int64_t k = 0; k < dim; k++)
            yi[k] = g[k] * (ss * xi[k]);
    }
}

#ifdef VEC_X86

#define T_AVX2 __attribute__((target("avx2,fma,f16c")))
#define T_AVX512 __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl")))

/* 8 floats of b at i: float or fp16 */
#define LD8_F32(b, i) _mm256_loadu_ps((b) + (i))
#define LD8_F16(b, i) _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((b) + (i))))
#define LD16_F32(b, i) _mm512_loadu_ps((b) + (i))
#define LD16_F16(b, i) _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((b) + (i))))
#define MLD16_F32(m, b, i) _mm512_maskz_loadu_ps((m), (b) + (i))
#define MLD16_F16(m, b, i) _mm512_cvtph_ps(_mm256_maskz_loadu_epi16((m), (b) + (i)))
/* bfloat16 is the high half of a float: widen and shift (exact) */
#define LD8_BF16(b, i)                                                                   \
    _mm256_castsi256_ps(_mm256_slli_epi32(                                               \
        _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)((b) + (i)))), 16))
#define LD16_BF16(b, i)                                                                  \
    _mm512_castsi512_ps(_mm512_slli_epi32(                                               \
        _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)((b) + (i)))), 16))
#define MLD16_BF16(m, b, i)                                                              \
    _mm512_castsi512_ps(_mm512_slli_epi32(                                               \
        _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16((m), (b) + (i))), 16))

/* fp8 e4m3 (S.EEEE.MMM, bias 7) moved into fp16's bit positions
 * (S.0EEEE.MMM0000000) is the same number times 2^-8, subnormals too;
 * the cache never holds the NaN code (stores saturate at 448) */
#define FP8_TO_H(x) _mm256_or_si256(_mm256_and_si256(_mm256_slli_epi16((x), 8), _mm256_set1_epi16((short)0x8000)), \
                                    _mm256_and_si256(_mm256_slli_epi16((x), 7), _mm256_set1_epi16(0x3f80)))
#define LD16_FP8(b, i)                                                                   \
    _mm512_mul_ps(_mm512_cvtph_ps(FP8_TO_H(_mm256_cvtepu8_epi16(                          \
                      _mm_loadu_si128((const __m128i *)((b) + (i)))))),                  \
                  _mm512_set1_ps(256.0f))
#define MLD16_FP8(m, b, i)                                                               \
    _mm512_mul_ps(_mm512_cvtph_ps(FP8_TO_H(_mm256_cvtepu8_epi16(                          \
                      _mm_maskz_loadu_epi8((m), (b) + (i))))),                           \
                  _mm512_set1_ps(256.0f))
#define FP8_TO_H8(x) _mm_or_si128(_mm_and_si128(_mm_slli_epi16((x), 8), _mm_set1_epi16((short)0x8000)), \
                                  _mm_and_si128(_mm_slli_epi16((x), 7), _mm_set1_epi16(0x3f80)))
#define LD8_FP8(b, i)                                                                    \
    _mm256_mul_ps(_mm256_cvtph_ps(FP8_TO_H8(_mm_cvtepu8_epi16(                            \
                      _mm_loadl_epi64((const __m128i *)((b) + (i)))))),                  \
                  _mm256_set1_ps(256.0f))
#define CVT_FP8(v) llm_fp8_e4m3_to_fp32(v)

#define CVT_F32(v) (v)
#define CVT_F16(v) llm_fp16_to_fp32(v)
#define CVT_BF16(v) llm_bf16_to_fp32(v)


/* The multi-row kernels. dots: a group of rows (16 with AVX-512, 8 with
 * AVX2) each sums into its own vector, so the FMA chains are independent;
 * then one transposing reduction turns the group's vectors into a vector
 * of its sums (a few shuffles a row, where a horizontal sum per row costs
 * a long dependent chain). Rows past m in the last group read row 0 again
 * and are not stored. axpys: 64 (AVX-512) or 32 (AVX2) columns of y stay
 * in registers over all the rows, in two sets of accumulators (even and
 * odd rows) so that consecutive rows do not wait on each other's FMA. */

/* reduce16 in two halves: its first three stages over the 8 vectors of
 * rows 8h .. 8h+7 (lane L: [row 8h+L (2 parts), row 8h+4+L (2 parts)]),
 * then its last over the two halves; dots_n keeps one half while it sums
 * the other, with reduce16's operations, so its bits */
static inline __attribute__((always_inline)) T_AVX512 __m512 reduce8_half(const __m512 *v)
{
    __m512 t[4], u[2];
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++) /* 256-bit halves: [sum of v[2j] | of v[2j+1]] */
        t[j] = _mm512_add_ps(_mm512_shuffle_f32x4(v[2 * j], v[2 * j + 1], 0x44),
                             _mm512_shuffle_f32x4(v[2 * j], v[2 * j + 1], 0xEE));
#pragma GCC unroll 2
    for (int j = 0; j < 2; j++) /* 128-bit lanes: rows 4j .. 4j+3 */
        u[j] = _mm512_add_ps(_mm512_shuffle_f32x4(t[2 * j], t[2 * j + 1], 0x88),
                             _mm512_shuffle_f32x4(t[2 * j], t[2 * j + 1], 0xDD));
    return _mm512_add_ps(_mm512_shuffle_ps(u[0], u[1], 0x44), _mm512_shuffle_ps(u[0], u[1], 0xEE));
}

static inline __attribute__((always_inline)) T_AVX512 __m512 reduce16_fin(__m512 w0, __m512 w1)
{
    /* lane L: rows L, L+4, L+8, L+12; element 4L+i holds row L + 4i */
    const __m512 x = _mm512_add_ps(_mm512_shuffle_ps(w0, w1, 0x88), _mm512_shuffle_ps(w0, w1, 0xDD));
    const __m512i idx = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    return _mm512_permutexvar_ps(idx, x);
}

/* lane r of the result = the sum of v[r]'s lanes, r < 16 */
static inline __attribute__((always_inline)) T_AVX512 __m512 reduce16(const __m512 *v)
{
    return reduce16_fin(reduce8_half(v), reduce8_half(v + 8));
}

/* lane r of the result = the sum of v[r]'s lanes, r < 8 */
static inline __attribute__((always_inline)) T_AVX2 __m256 reduce8(const __m256 *v)
{
    __m256 t[4], u[2];
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++) /* [sum of v[2j] | of v[2j+1]] in 128-bit halves */
        t[j] = _mm256_add_ps(_mm256_permute2f128_ps(v[2 * j], v[2 * j + 1], 0x20),
                             _mm256_permute2f128_ps(v[2 * j], v[2 * j + 1], 0x31));
#pragma GCC unroll 2
    for (int j = 0; j < 2; j++) /* half h: [row 4j+h (2 parts), row 4j+2+h (2 parts)] */
        u[j] = _mm256_add_ps(_mm256_shuffle_ps(t[2 * j], t[2 * j + 1], 0x44),
                             _mm256_shuffle_ps(t[2 * j], t[2 * j + 1], 0xEE));
    /* half h: rows h, h+2, h+4, h+6 */
    const __m256 x = _mm256_add_ps(_mm256_shuffle_ps(u[0], u[1], 0x88),
                                   _mm256_shuffle_ps(u[0], u[1], 0xDD));
    return _mm256_permutevar8x32_ps(x, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

/* AVX-512: NAME##_q takes NQ (1 to 3) queries of a KV head over the same
 * rows, each row loaded (and widened) once for all of them, and every
 * query the same arithmetic whatever NQ: dots 16 rows at a time in two
 * halves of 8 (so that three queries' sums fit the registers), then
 * reduce16's stages; axpys with its even and odd row chains. NAME is one
 * query, the decode step's call. */
#define DOTS_AVX512(NAME, BT, LD16, MLD16)                                                \
    static inline __attribute__((always_inline)) T_AVX512 void NAME##_q(                  \
        const float *q, int64_t qs, int NQ, const BT *K, int64_t ldk, int64_t m, int64_t n, \
        float *s, int64_t ss)                                                              \
    {                                                                                      \
        for (int64_t r0 = 0; r0 < m; r0 += 16) {                                           \
            const BT *row[16];                                                             \
            _Pragma("GCC unroll 16") for (int r = 0; r < 16; r++)                          \
                row[r] = K + (r0 + r < m ? r0 + r : 0) * ldk;                              \
            __m512 w[2][3];                                                                \
            _Pragma("GCC unroll 2") for (int h = 0; h < 2; h++) {                          \
                __m512 acc[3][8];                                                          \
                _Pragma("GCC unroll 3") for (int j = 0; j < 3; j++)                        \
                    _Pragma("GCC unroll 8") for (int r = 0; r < 8; r++)                    \
                        acc[j][r] = _mm512_setzero_ps();                                   \
                int64_t i = 0;                                                             \
                for (; i + 16 <= n; i += 16) {                                             \
                    __m512 qv[3];                                                          \
                    _Pragma("GCC unroll 3") for (int j = 0; j < 3; j++)                    \
                        qv[j] = j < NQ ? _mm512_loadu_ps(q + j * qs + i) : qv[0];          \
                    _Pragma("GCC unroll 8") for (int r = 0; r < 8; r++) {                  \
                        const __m512 k = LD16(row[8 * h + r], i);                          \
                        _Pragma("GCC unroll 3") for (int j = 0; j < 3; j++)                \
                            if (j < NQ)                                                    \
                                acc[j][r] = _mm512_fmadd_ps(k, qv[j], acc[j][r]);          \
                    }                                                                      \
                }                                                                          \
                if (i < n) {                                                               \
                    const __mmask16 mk = (__mmask16)((1u << (n - i)) - 1);                 \
                    __m512 qv[3];                                                          \
                    _Pragma("GCC unroll 3") for (int j = 0; j < 3; j++)                    \
                        qv[j] = j < NQ ? _mm512_maskz_loadu_ps(mk, q + j * qs + i) : qv[0]; \
                    _Pragma("GCC unroll 8") for (int r = 0; r < 8; r++) {                  \
                        const __m512 k = MLD16(mk, row[8 * h + r], i);                     \
                        _Pragma("GCC unroll 3") for (int j = 0; j < 3; j++)                \
                            if (j < NQ)                                                    \
                                acc[j][r] = _mm512_fmadd_ps(k, qv[j], acc[j][r]);          \
                    }                                                                      \
                }                                                                          \
                _Pragma("GCC unroll 3") for (int j = 0; j < 3; j++)                        \
                    if (j < NQ)                                                            \
                        w[h][j] = reduce8_half(acc[j]);                                    \
            }                                                                              \
            const int64_t left = m - r0;                                                   \
            const __mmask16 out = left >= 16 ? (__mmask16)0xffff                           \
                                             : (__mmask16)((1u << left) - 1);              \
            _Pragma("GCC unroll 3") for (int j = 0; j < 3; j++)                            \
                if (j < NQ)                                                                \
                    _mm512_mask_storeu_ps(s + j * ss + r0, out, reduce16_fin(w[0][j], w[1][j])); \
        }                                                                                  \
    }                                                                                      \
    static T_AVX512 void NAME(const float *q, const BT *K, int64_t ldk, int64_t m, int64_t n, \
                              float *s)                                                    \
    {                                                                                      \
        NAME##_q(q, 0, 1, K, ldk, m, n, s, 0);                                             \
    }

#define AXPYS_AVX512(NAME, BT, MLD16)                                                     \
    static inline __attribute__((always_inline)) T_AVX512 void NAME##_q(                  \
        float *y, int64_t ys, const float *w, int64_t ws, int NQ, const BT *V, int64_t ldv, \
        int64_t m, int64_t n)                                                              \
    {                                                                                      \
        for (int64_t c = 0; c < n; c += 64) {                                              \
            __mmask16 mk[4];                                                               \
            __m512 a[3][2][4];                                                             \
            _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++) {                          \
                const int64_t left = n - c - 16 * k;                                       \
                mk[k] = left >= 16 ? (__mmask16)0xffff                                     \
                        : left > 0 ? (__mmask16)((1u << left) - 1)                         \
                                   : (__mmask16)0;                                         \
                _Pragma("GCC unroll 3") for (int j = 0; j < 3; j++) {                      \
                    a[j][0][k] = j < NQ ? _mm512_maskz_loadu_ps(mk[k], y + j * ys + c + 16 * k) \
                                        : _mm512_setzero_ps();                             \
                    a[j][1][k] = _mm512_setzero_ps();                                      \
                }                                                                          \
            }                                                                              \
            int64_t r = 0;                                                                 \
            for (; r + 2 <= m; r += 2)                                                     \
                _Pragma("GCC unroll 2") for (int e = 0; e < 2; e++) {                      \
                    const BT *v = V + (r + e) * ldv + c;                                   \
                    __m512 x[4];                                                           \
                    _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++)                    \
                        x[k] = MLD16(mk[k], v, 16 * k);                                    \
                    _Pragma("GCC unroll 3") for (int j = 0; j < 3; j++)                    \
                        if (j < NQ) {                                                      \
                            const __m512 wv = _mm512_set1_ps(w[j * ws + r + e]);           \
                            _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++)            \
                                a[j][e][k] = _mm512_fmadd_ps(wv, x[k], a[j][e][k]);        \
                        }                                                                  \
                }                                                                          \
            if (r < m) {                                                                   \
                const BT *v = V + r * ldv + c;                                             \
                __m512 x[4];                                                               \
                _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++)                        \
                    x[k] = MLD16(mk[k], v, 16 * k);                                        \
                _Pragma("GCC unroll 3") for (int j = 0; j < 3; j++)                        \
                    if (j < NQ) {                                                          \
                        const __m512 wv = _mm512_set1_ps(w[j * ws + r]);                   \
                        _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++)                \
                            a[j][0][k] = _mm512_fmadd_ps(wv, x[k], a[j][0][k]);            \
                    }                                                                      \
            }                                                                              \
            _Pragma("GCC unroll 3") for (int j = 0; j < 3; j++)                            \
                if (j < NQ)                                                                \
                    _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++)                    \
                        _mm512_mask_storeu_ps(y + j * ys + c + 16 * k, mk[k],              \
                                              _mm512_add_ps(a[j][0][k], a[j][1][k]));      \
        }                                                                                  \
    }                                                                                      \
    static T_AVX512 void NAME(float *y, const float *w, const BT *V, int64_t ldv, int64_t m, \
                              int64_t n)                                                   \
    {                                                                                      \
        NAME##_q(y, 0, w, 0, 1, V, ldv, m, n);                                             \
    }

/* NAME##_n: any number of queries, three at a time */
#define DOTS_N_AVX512(NAME, BT)                                                             \
    static T_AVX512 void NAME##_n(const float *q, int64_t qs, int nq, const BT *K,         \
                                  int64_t ldk, int64_t m, int64_t n, float *s, int64_t ss)  \
    {                                                                                      \
        for (; nq >= 3; nq -= 3, q += 3 * qs, s += 3 * ss)                                 \
            NAME##_q(q, qs, 3, K, ldk, m, n, s, ss);                                       \
        if (nq == 2)                                                                       \
            NAME##_q(q, qs, 2, K, ldk, m, n, s, ss);                                       \
        else if (nq == 1)                                                                  \
            NAME##_q(q, qs, 1, K, ldk, m, n, s, ss);                                       \
    }
#define AXPYS_N_AVX512(NAME, BT)                                                            \
    static T_AVX512 void NAME##_n(float *y, int64_t ys, const float *w, int64_t ws, int nq,  \
                                  const BT *V, int64_t ldv, int64_t m, int64_t n)          \
    {                                                                                      \
        for (; nq >= 3; nq -= 3, y += 3 * ys, w += 3 * ws)                                 \
            NAME##_q(y, ys, w, ws, 3, V, ldv, m, n);                                       \
        if (nq == 2)                                                                       \
            NAME##_q(y, ys, w, ws, 2, V, ldv, m, n);                                       \
        else if (nq == 1)                                                                  \
            NAME##_q(y, ys, w, ws, 1, V, ldv, m, n);                                       \
    }

/* AVX2 has no masked fp16 load: the columns past the last full 8 go by
 * scalar code */
#define DOTS_AVX2(NAME, BT, LD8, CVT1)                                                      \
    static T_AVX2 void NAME(const float *q, const BT *K, int64_t ldk, int64_t m, int64_t n, \
                            float *s)                                                      \
    {                                                                                      \
        const int64_t n8 = n / 8 * 8;                                                      \
        for (int64_t r0 = 0; r0 < m; r0 += 8) {                                            \
            const BT *row[8];                                                              \
            __m256 acc[8];                                                                 \
            _Pragma("GCC unroll 8") for (int r = 0; r < 8; r++) {                          \
                row[r] = K + (r0 + r < m ? r0 + r : 0) * ldk;                              \
                acc[r] = _mm256_setzero_ps();                                              \
            }                                                                              \
            for (int64_t i = 0; i < n8; i += 8) {                                          \
                const __m256 qv = _mm256_loadu_ps(q + i);                                  \
                _Pragma("GCC unroll 8") for (int r = 0; r < 8; r++)                        \
                    acc[r] = _mm256_fmadd_ps(LD8(row[r], i), qv, acc[r]);                  \
            }                                                                              \
            float out[8];                                                                  \
            _mm256_storeu_ps(out, reduce8(acc));                                           \
            for (int r = 0; r < 8 && r0 + r < m; r++) {                                    \
                float t = out[r];                                                          \
                for (int64_t i = n8; i < n; i++)                                           \
                    t += q[i] * CVT1(row[r][i]);                                           \
                s[r0 + r] = t;                                                             \
            }                                                                              \
        }                                                                                  \
    }

#define AXPYS_AVX2(NAME, BT, LD8, CVT1)                                                     \
    static T_AVX2 void NAME(float *y, const float *w, const BT *V, int64_t ldv, int64_t m,  \
                            int64_t n)                                                     \
    {                                                                                      \
        const int64_t n32 = n / 32 * 32;                                                   \
        for (int64_t c = 0; c < n32; c += 32) {                                            \
            __m256 a[2][4];                                                                \
            _Pragma("GCC unroll 4") for (int j = 0; j < 4; j++) {                          \
                a[0][j] = _mm256_loadu_ps(y + c + 8 * j);                                  \
                a[1][j] = _mm256_setzero_ps();                                             \
            }                                                                              \
            int64_t r = 0;                                                                 \
            for (; r + 2 <= m; r += 2)                                                     \
                _Pragma("GCC unroll 2") for (int e = 0; e < 2; e++) {                      \
                    const __m256 wv = _mm256_set1_ps(w[r + e]);                            \
                    const BT *v = V + (r + e) * ldv + c;                                   \
                    _Pragma("GCC unroll 4") for (int j = 0; j < 4; j++)                    \
                        a[e][j] = _mm256_fmadd_ps(wv, LD8(v, 8 * j), a[e][j]);             \
                }                                                                          \
            if (r < m) {                                                                   \
                const __m256 wv = _mm256_set1_ps(w[r]);                                    \
                const BT *v = V + r * ldv + c;                                             \
                _Pragma("GCC unroll 4") for (int j = 0; j < 4; j++)                        \
                    a[0][j] = _mm256_fmadd_ps(wv, LD8(v, 8 * j), a[0][j]);                 \
            }                                                                              \
            _Pragma("GCC unroll 4") for (int j = 0; j < 4; j++)                            \
                _mm256_storeu_ps(y + c + 8 * j, _mm256_add_ps(a[0][j], a[1][j]));          \
        }                                                                                  \
        for (int64_t r = 0; r < m && n32 < n; r++)                                         \
            for (int64_t i = n32; i < n; i++)                                              \
                y[i] += w[r] * CVT1(V[r * ldv + i]);                                       \
    }

DOTS_AVX512(dots_f32_avx512, float, LD16_F32, MLD16_F32)
DOTS_AVX512(dots_f16_avx512, uint16_t, LD16_F16, MLD16_F16)
AXPYS_AVX512(axpys_f32_avx512, float, MLD16_F32)
AXPYS_AVX512(axpys_f16_avx512, uint16_t, MLD16_F16)
DOTS_AVX2(dots_f32_avx2, float, LD8_F32, CVT_F32)
DOTS_AVX2(dots_f16_avx2, uint16_t, LD8_F16, CVT_F16)
AXPYS_AVX2(axpys_f32_avx2, float, LD8_F32, CVT_F32)
AXPYS_AVX2(axpys_f16_avx2, uint16_t, LD8_F16, CVT_F16)
DOTS_AVX512(dots_bf16_avx512, uint16_t, LD16_BF16, MLD16_BF16)
AXPYS_AVX512(axpys_bf16_avx512, uint16_t, MLD16_BF16)
DOTS_AVX2(dots_bf16_avx2, uint16_t, LD8_BF16, CVT_BF16)
AXPYS_AVX2(axpys_bf16_avx2, uint16_t, LD8_BF16, CVT_BF16)
DOTS_AVX512(dots_fp8_avx512, uint8_t, LD16_FP8, MLD16_FP8)
DOTS_N_AVX512(dots_f32_avx512, float)
DOTS_N_AVX512(dots_f16_avx512, uint16_t)
DOTS_N_AVX512(dots_bf16_avx512, uint16_t)
AXPYS_N_AVX512(axpys_f32_avx512, float)
AXPYS_N_AVX512(axpys_f16_avx512, uint16_t)
AXPYS_N_AVX512(axpys_bf16_avx512, uint16_t)

AXPYS_AVX512(axpys_fp8_avx512, uint8_t, MLD16_FP8)
DOTS_AVX2(dots_fp8_avx2, uint8_t, LD8_FP8, CVT_FP8)
AXPYS_AVX2(axpys_fp8_avx2, uint8_t, LD8_FP8, CVT_FP8)

/* Rows of blocks of 32 (q8_0, q4_0), a row at a time: each block's 32
 * products summed in vectors, scaled by its d into the row's accumulator,
 * one horizontal sum a row. A type gives its block struct and a loader of
 * a block's elements as floats: LD16(b, h) the half h (0: elements 0-15,
 * 1: 16-31) for AVX-512, LD8(b, j) the eighth j for AVX2. */
#define BLOCKS_AVX512(DOTS, AXPYS, BLK, LD16)                                                \
    static T_AVX512 void DOTS(const float *q, const uint8_t *K, int64_t ldk, int64_t m,     \
                              int64_t n, float *s)                                         \
    {                                                                                      \
        for (int64_t r = 0; r < m; r++) {                                                  \
            const struct BLK *b = (const struct BLK *)(K + r * ldk);                       \
            __m512 acc = _mm512_setzero_ps();                                              \
            for (int64_t k = 0; k < n / 32; k++) {                                         \
                const __m512 t = _mm512_fmadd_ps(LD16(&b[k], 1), _mm512_loadu_ps(q + 32 * k + 16), \
                                                 _mm512_mul_ps(LD16(&b[k], 0),             \
                                                               _mm512_loadu_ps(q + 32 * k))); \
                acc = _mm512_fmadd_ps(t, _mm512_set1_ps(llm_fp16_to_fp32(b[k].d)), acc);   \
            }                                                                              \
            s[r] = _mm512_reduce_add_ps(acc);                                              \
        }                                                                                  \
    }                                                                                      \
    static T_AVX512 void AXPYS(float *y, const float *w, const uint8_t *V, int64_t ldv,    \
                               int64_t m, int64_t n)                                       \
    {                                                                                      \
        for (int64_t k = 0; k < n / 32; k++) {                                             \
            __m512 a0 = _mm512_loadu_ps(y + 32 * k), a1 = _mm512_loadu_ps(y + 32 * k + 16); \
            for (int64_t r = 0; r < m; r++) {                                              \
                const struct BLK *b = (const struct BLK *)(V + r * ldv) + k;               \
                const __m512 c = _mm512_set1_ps(w[r] * llm_fp16_to_fp32(b->d));            \
                a0 = _mm512_fmadd_ps(c, LD16(b, 0), a0);                                   \
                a1 = _mm512_fmadd_ps(c, LD16(b, 1), a1);                                   \
            }                                                                              \
            _mm512_storeu_ps(y + 32 * k, a0);                                              \
            _mm512_storeu_ps(y + 32 * k + 16, a1);                                         \
        }                                                                                  \
    }

#define BLOCKS_AVX2(DOTS, AXPYS, BLK, LD8)                                                   \
    static T_AVX2 void DOTS(const float *q, const uint8_t *K, int64_t ldk, int64_t m,       \
                            int64_t n, float *s)                                           \
    {                                                                                      \
        for (int64_t r = 0; r < m; r++) {                                                  \
            const struct BLK *b = (const struct BLK *)(K + r * ldk);                       \
            __m256 acc = _mm256_setzero_ps();                                              \
            for (int64_t k = 0; k < n / 32; k++) {                                         \
                const float *qk = q + 32 * k;                                              \
                __m256 t = _mm256_mul_ps(LD8(&b[k], 0), _mm256_loadu_ps(qk));              \
                t = _mm256_fmadd_ps(LD8(&b[k], 1), _mm256_loadu_ps(qk + 8), t);            \
                t = _mm256_fmadd_ps(LD8(&b[k], 2), _mm256_loadu_ps(qk + 16), t);           \
                t = _mm256_fmadd_ps(LD8(&b[k], 3), _mm256_loadu_ps(qk + 24), t);           \
                acc = _mm256_fmadd_ps(t, _mm256_set1_ps(llm_fp16_to_fp32(b[k].d)), acc);   \
            }                                                                              \
            __m128 h = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1)); \
            h = _mm_add_ps(h, _mm_movehl_ps(h, h));                                        \
            h = _mm_add_ss(h, _mm_movehdup_ps(h));                                         \
            s[r] = _mm_cvtss_f32(h);                                                       \
        }                                                                                  \
    }                                                                                      \
    static T_AVX2 void AXPYS(float *y, const float *w, const uint8_t *V, int64_t ldv,      \
                             int64_t m, int64_t n)                                         \
    {                                                                                      \
        for (int64_t k = 0; k < n / 32; k++) {                                             \
            __m256 a[4];                                                                   \
            for (int j = 0; j < 4; j++)                                                    \
                a[j] = _mm256_loadu_ps(y + 32 * k + 8 * j);                                \
            for (int64_t r = 0; r < m; r++) {                                              \
                const struct BLK *b = (const struct BLK *)(V + r * ldv) + k;               \
                const __m256 c = _mm256_set1_ps(w[r] * llm_fp16_to_fp32(b->d));            \
                for (int j = 0; j < 4; j++)                                                \
                    a[j] = _mm256_fmadd_ps(c, LD8(b, j), a[j]);                            \
            }                                                                              \
            for (int j = 0; j < 4; j++)                                                    \
                _mm256_storeu_ps(y + 32 * k + 8 * j, a[j]);                                \
        }                                                                                  \
    }

/* q8_0: 32 int8 */
#define Q8_LD16(b, h)                                                                       \
    _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(b)->qs + (h))))
#define Q8_LD8(b, j)                                                                        \
    _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)((b)->qs + 8 * (j)))))
/* q4_0: 16 bytes of codes, elements 0-15 in the low nibbles and 16-31 in
 * the high ones, less 8 */
#define Q4_LD16(b, h)                                                                       \
    _mm512_cvtepi32_ps(_mm512_sub_epi32(                                                    \
        _mm512_and_si512(_mm512_srli_epi32(_mm512_cvtepu8_epi32(                             \
                                               _mm_loadu_si128((const __m128i *)(b)->qs)),   \
                                           4 * (h)),                                         \
                         _mm512_set1_epi32(15)),                                            \
        _mm512_set1_epi32(8)))
#define Q4_LD8(b, j)                                                                        \
    _mm256_cvtepi32_ps(_mm256_sub_epi32(                                                    \
        _mm256_and_si256(_mm256_srli_epi32(_mm256_cvtepu8_epi32(_mm_loadl_epi64(              \
                                               (const __m128i *)((b)->qs + 8 * ((j) & 1)))), \
                                           4 * ((j) >> 1)),                                  \
                         _mm256_set1_epi32(15)),                                            \
        _mm256_set1_epi32(8)))

BLOCKS_AVX512(dots_q8_0_avx512, axpys_q8_0_avx512, llm_block_q8_0, Q8_LD16)
BLOCKS_AVX512(dots_q4_0_avx512, axpys_q4_0_avx512, llm_block_q4_0, Q4_LD16)
BLOCKS_AVX2(dots_q8_0_avx2, axpys_q8_0_avx2, llm_block_q8_0, Q8_LD8)
BLOCKS_AVX2(dots_q4_0_avx2, axpys_q4_0_avx2, llm_block_q4_0, Q4_LD8)

/* q4ch: w_i = q_i scale_i and the constant sum_i q_i min_i in vectors, then
 * for each group of 16 tokens one FMA a channel (16 tokens' codes, widened
 * from 8 bytes), two accumulators for the FMA latency. */
static T_AVX512 void dots_q4ch_avx512(const float *q, const uint8_t *blk, int64_t n, int64_t bs,
                                      float *s)
{
    const uint16_t *sc = (const uint16_t *)blk, *mn = sc + n;
    const uint8_t *codes = blk + 4 * n;
    float w[256];
    __m512 base = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m512 qv = _mm512_loadu_ps(q + i);
        _mm512_storeu_ps(w + i, _mm512_mul_ps(qv, LD16_F16(sc, i)));
        base = _mm512_fmadd_ps(qv, LD16_F16(mn, i), base);
    }
    float c = _mm512_reduce_add_ps(base);
    for (; i < n; i++) {
        w[i] = q[i] * llm_fp16_to_fp32(sc[i]);
        c += q[i] * llm_fp16_to_fp32(mn[i]);
    }
    const __m128i lo4 = _mm_set1_epi8(15);
    for (int64_t g = 0; g < bs / 16; g++) {
        __m512 a0 = _mm512_set1_ps(c), a1 = _mm512_setzero_ps();
        for (i = 0; i < n; i++) {
            const __m128i b = _mm_loadl_epi64((const __m128i *)(codes + i * (bs / 2) + g * 8));
            const __m128i x = _mm_unpacklo_epi64(_mm_and_si128(b, lo4),
                                                 _mm_and_si128(_mm_srli_epi16(b, 4), lo4));
            const __m512 v = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(x));
            if (i % 2)
                a1 = _mm512_fmadd_ps(_mm512_set1_ps(w[i]), v, a1);
            else
                a0 = _mm512_fmadd_ps(_mm512_set1_ps(w[i]), v, a0);
        }
        _mm512_storeu_ps(s + 16 * g, _mm512_add_ps(a0, a1));
    }
}

static T_AVX2 void dots_q4ch_avx2(const float *q, const uint8_t *blk, int64_t n, int64_t bs,
                                  float *s)
{
    const uint16_t *sc = (const uint16_t *)blk, *mn = sc + n;
    const uint8_t *codes = blk + 4 * n;
    float w[256];
    __m256 base = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 qv = _mm256_loadu_ps(q + i);
        _mm256_storeu_ps(w + i, _mm256_mul_ps(qv, LD8_F16(sc, i)));
        base = _mm256_fmadd_ps(qv, LD8_F16(mn, i), base);
    }
    float b8[8], c = 0.0f;
    _mm256_storeu_ps(b8, base);
    for (int k = 0; k < 8; k++)
        c += b8[k];
    for (; i < n; i++) {
        w[i] = q[i] * llm_fp16_to_fp32(sc[i]);
        c += q[i] * llm_fp16_to_fp32(mn[i]);
    }
    const __m128i lo4 = _mm_set1_epi8(15);
    for (int64_t g = 0; g < bs / 16; g++) {
        __m256 lo = _mm256_set1_ps(c), hi = _mm256_set1_ps(c);
        for (i = 0; i < n; i++) {
            const __m128i b = _mm_loadl_epi64((const __m128i *)(codes + i * (bs / 2) + g * 8));
            const __m256 wv = _mm256_set1_ps(w[i]);
            lo = _mm256_fmadd_ps(wv, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_and_si128(b, lo4))), lo);
            hi = _mm256_fmadd_ps(wv, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(
                                         _mm_and_si128(_mm_srli_epi16(b, 4), lo4))), hi);
        }
        _mm256_storeu_ps(s + 16 * g, lo);
        _mm256_storeu_ps(s + 16 * g + 8, hi);
    }
}

/* F16C rounds to nearest even with _MM_FROUND_TO_NEAREST_INT, as the
 * reference does (subnormals, overflow and NaN too); AVX-512 takes it too,
 * as a store-bound loop gains nothing from wider vectors */
static T_AVX2 void to_f16_avx2(const float *x, uint16_t *y, int64_t n)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(y + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
    llm_vec_to_f16_ref(x + i, y + i, n - i);
}

/* exp_poly of 8 elements, operation for operation (no fused
 * multiply-adds: the reference rounds each step) */
static inline __attribute__((always_inline)) T_AVX2 __m256 exp8(__m256 a)
{
    a = _mm256_min_ps(_mm256_max_ps(a, _mm256_set1_ps(EXP_LO)), _mm256_set1_ps(EXP_HI));
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(a, _mm256_set1_ps(EXP_LOG2E)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m256 r = _mm256_sub_ps(_mm256_sub_ps(a, _mm256_mul_ps(n, _mm256_set1_ps(EXP_C1))),
                                   _mm256_mul_ps(n, _mm256_set1_ps(EXP_C2)));
    __m256 p = _mm256_set1_ps(EXP_P0);
    p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(EXP_P1));
    p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(EXP_P2));
    p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(EXP_P3));
    p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(EXP_P4));
    p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(EXP_P5));
    p = _mm256_add_ps(_mm256_add_ps(_mm256_mul_ps(p, _mm256_mul_ps(r, r)), r),
                      _mm256_set1_ps(1.0f));
    const __m256i e = _mm256_slli_epi32(
        _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

/* 8 elements of llm_vec_geglu_ref's arithmetic, operation for operation */
static T_AVX2 __m256 geglu8(__m256 x, __m256 u)
{
    const __m256 z = _mm256_mul_ps(
        _mm256_set1_ps(GELU_K),
        _mm256_add_ps(x, _mm256_mul_ps(_mm256_set1_ps(GELU_C),
                                       _mm256_mul_ps(_mm256_mul_ps(x, x), x))));
    const __m256 ex = exp8(_mm256_mul_ps(_mm256_set1_ps(-2.0f), z));
    return _mm256_mul_ps(_mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.0f), ex)), u);
}

/* 8 elements of llm_vec_swiglu_ref's arithmetic, operation for operation */
static T_AVX2 __m256 swiglu8(__m256 x, __m256 u)
{
    const __m256 ex = exp8(_mm256_xor_ps(x, _mm256_set1_ps(-0.0f))); /* -x */
    return _mm256_mul_ps(_mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.0f), ex)), u);
}

static T_AVX2 void swiglu_avx2(float *g, const float *u, int64_t n)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(g + i, swiglu8(_mm256_loadu_ps(g + i), _mm256_loadu_ps(u + i)));
    llm_vec_swiglu_ref(g + i, u + i, n - i); /* the same arithmetic */
}

/* llm_vec_softmax_ref's arithmetic 8 positions at a time, position p in
 * lane p % 8 (the lanes outside [lo, hi) add zeros): the same bits. Only
 * the chunks at the ends go through masked loads and stores (AMD's masked
 * stores are slow). AVX-512 has softmax_avx512, the same arithmetic 16
 * positions at a time. */
static inline __attribute__((always_inline)) T_AVX2 __m256i softmax_mask(int64_t c, int64_t lo,
                                                                         int64_t hi)
{
    /* lanes c + l in [lo, hi) */
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_and_si256(
        _mm256_cmpgt_epi32(_mm256_set1_epi32((int32_t)(hi - c)), lane),
        _mm256_cmpgt_epi32(lane, _mm256_set1_epi32((int32_t)(lo - c) - 1)));
}

#define SOFTMAX_LOAD(c, m, full) ((full) ? _mm256_loadu_ps(s + (c)) : _mm256_maskload_ps(s + (c), (m)))
#define SOFTMAX_STORE(c, m, full, v)            \
    do {                                        \
        if (full)                               \
            _mm256_storeu_ps(s + (c), (v));     \
        else                                    \
            _mm256_maskstore_ps(s + (c), (m), (v)); \
    } while (0)

static T_AVX2 void softmax_avx2(float *s, int64_t lo, int64_t hi, float scale, float softcap)
{
    const int64_t c0 = lo & ~(int64_t)7;
    const __m256i ones = _mm256_set1_epi32(-1);
    __m256 mx;
    if (softcap > 0) {
        mx = _mm256_set1_ps(softmax_scale(s, lo, hi, scale, softcap));
    } else {
        __m256 m8 = _mm256_set1_ps(-INFINITY);
        for (int64_t c = c0; c < hi; c += 8) {
            const int full = c >= lo && c + 8 <= hi;
            const __m256i m = full ? ones : softmax_mask(c, lo, hi);
            const __m256 v = _mm256_mul_ps(SOFTMAX_LOAD(c, m, full), _mm256_set1_ps(scale));
            SOFTMAX_STORE(c, m, full, v);
            /* v first: maxps gives its second operand where one is NaN,
             * so a NaN score is passed over, as in the reference */
            m8 = _mm256_max_ps(full ? v : _mm256_blendv_ps(m8, v, _mm256_castsi256_ps(m)), m8);
        }
        m8 = _mm256_max_ps(m8, _mm256_permute2f128_ps(m8, m8, 1));
        m8 = _mm256_max_ps(m8, _mm256_shuffle_ps(m8, m8, 0x4e));
        mx = _mm256_max_ps(m8, _mm256_shuffle_ps(m8, m8, 0xb1));
    }
    __m256 sum = _mm256_setzero_ps();
    for (int64_t c = c0; c < hi; c += 8) {
        const int full = c >= lo && c + 8 <= hi;
        const __m256i m = full ? ones : softmax_mask(c, lo, hi);
        const __m256 e = exp8(_mm256_sub_ps(SOFTMAX_LOAD(c, m, full), mx));
        SOFTMAX_STORE(c, m, full, e);
        sum = _mm256_add_ps(sum, full ? e : _mm256_and_ps(e, _mm256_castsi256_ps(m)));
    }
    float l[8];
    _mm256_storeu_ps(l, sum);
    const __m256 inv = _mm256_set1_ps(1.0f / softmax_lanes(l));
    for (int64_t c = c0; c < hi; c += 8) {
        const int full = c >= lo && c + 8 <= hi;
        const __m256i m = full ? ones : softmax_mask(c, lo, hi);
        SOFTMAX_STORE(c, m, full, _mm256_mul_ps(SOFTMAX_LOAD(c, m, full), inv));
    }
}
#undef SOFTMAX_LOAD
#undef SOFTMAX_STORE

/* exp8's operations on 16 elements */
static inline __attribute__((always_inline)) T_AVX512 __m512 exp16(__m512 a)
{
    a = _mm512_min_ps(_mm512_max_ps(a, _mm512_set1_ps(EXP_LO)), _mm512_set1_ps(EXP_HI));
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(a, _mm512_set1_ps(EXP_LOG2E)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m512 r = _mm512_sub_ps(_mm512_sub_ps(a, _mm512_mul_ps(n, _mm512_set1_ps(EXP_C1))),
                                   _mm512_mul_ps(n, _mm512_set1_ps(EXP_C2)));
    __m512 p = _mm512_set1_ps(EXP_P0);
    p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(EXP_P1));
    p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(EXP_P2));
    p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(EXP_P3));
    p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(EXP_P4));
    p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(EXP_P5));
    p = _mm512_add_ps(_mm512_add_ps(_mm512_mul_ps(p, _mm512_mul_ps(r, r)), r),
                      _mm512_set1_ps(1.0f));
    const __m512i e = _mm512_slli_epi32(
        _mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
    return _mm512_mul_ps(p, _mm512_castsi512_ps(e));
}

/* lanes 8..15 (AVX-512F has no 32-bit extract of 256) */
static inline __attribute__((always_inline)) T_AVX512 __m256 hi8(__m512 v)
{
    return _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
}

/* The lanes of positions c .. c + 15 in [lo, hi) */
static inline __attribute__((always_inline)) T_AVX512 __mmask16 softmax_mask16(int64_t c,
                                                                               int64_t lo,
                                                                               int64_t hi)
{
    const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    return _mm512_cmpgt_epi32_mask(_mm512_set1_epi32((int32_t)(hi - c)), lane) &
           _mm512_cmpgt_epi32_mask(lane, _mm512_set1_epi32((int32_t)(lo - c) - 1));
}

/* softmax_avx2's arithmetic 16 positions at a time, so the same bits:
 * exp's polynomial (what costs) runs on 16 lanes, and each chunk's two
 * halves go into the 8 lanes' sums one after the other, as softmax_avx2
 * adds its chunks of 8 (a half past hi adds zeros, which changes no sum).
 * The calibration of SmolLM2 spent 3.4% of GPTQ's time in softmax_avx2. */
static T_AVX512 void softmax_avx512(float *s, int64_t lo, int64_t hi, float scale, float softcap)
{
    if (softcap > 0) { /* the soft cap's tanh is the reference's, element by element */
        softmax_avx2(s, lo, hi, scale, softcap);
        return;
    }
    const int64_t c0 = lo & ~(int64_t)7;
    __m512 m16 = _mm512_set1_ps(-INFINITY);
    for (int64_t c = c0; c < hi; c += 16) {
        const __mmask16 m = softmax_mask16(c, lo, hi);
        const __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, s + c), _mm512_set1_ps(scale));
        _mm512_mask_storeu_ps(s + c, m, v);
        /* v first: a NaN score is passed over, as in softmax_avx2 */
        m16 = _mm512_mask_max_ps(m16, m, v, m16);
    }
    const __m256 m8 = _mm256_max_ps(_mm512_castps512_ps256(m16), hi8(m16));
    const __m256 m4 = _mm256_max_ps(m8, _mm256_permute2f128_ps(m8, m8, 1));
    const __m256 m2 = _mm256_max_ps(m4, _mm256_shuffle_ps(m4, m4, 0x4e));
    const __m512 mx = _mm512_broadcastss_ps(
        _mm256_castps256_ps128(_mm256_max_ps(m2, _mm256_shuffle_ps(m2, m2, 0xb1))));
    __m256 sum = _mm256_setzero_ps();
    for (int64_t c = c0; c < hi; c += 16) {
        const __mmask16 m = softmax_mask16(c, lo, hi);
        const __m512 e = _mm512_maskz_mov_ps(m, exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, s + c),
                                                                   mx)));
        _mm512_mask_storeu_ps(s + c, m, e);
        sum = _mm256_add_ps(sum, _mm512_castps512_ps256(e));
        sum = _mm256_add_ps(sum, hi8(e));
    }
    float l[8];
    _mm256_storeu_ps(l, sum);
    const __m512 inv = _mm512_set1_ps(1.0f / softmax_lanes(l));
    for (int64_t c = c0; c < hi; c += 16) {
        const __mmask16 m = softmax_mask16(c, lo, hi);
        _mm512_mask_storeu_ps(s + c, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, s + c), inv));
    }
}

/* 8 rows of 8 floats -> 8 columns: matmul_gemm.h's packing transposes
 * the same way, but that file is compiled once per ISA with the target set
 * for the whole file, this one function by function */
static inline __attribute__((always_inline)) T_AVX2 void tr8(__m256 r[8])
{
    const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
    const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
    const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
    const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
    const __m256 s0 = _mm256_shuffle_ps(t0, t2, 0x44), s1 = _mm256_shuffle_ps(t0, t2, 0xee);
    const __m256 s2 = _mm256_shuffle_ps(t1, t3, 0x44), s3 = _mm256_shuffle_ps(t1, t3, 0xee);
    const __m256 s4 = _mm256_shuffle_ps(t4, t6, 0x44), s5 = _mm256_shuffle_ps(t4, t6, 0xee);
    const __m256 s6 = _mm256_shuffle_ps(t5, t7, 0x44), s7 = _mm256_shuffle_ps(t5, t7, 0xee);
    r[0] = _mm256_permute2f128_ps(s0, s4, 0x20);
    r[1] = _mm256_permute2f128_ps(s1, s5, 0x20);
    r[2] = _mm256_permute2f128_ps(s2, s6, 0x20);
    r[3] = _mm256_permute2f128_ps(s3, s7, 0x20);
    r[4] = _mm256_permute2f128_ps(s0, s4, 0x31);
    r[5] = _mm256_permute2f128_ps(s1, s5, 0x31);
    r[6] = _mm256_permute2f128_ps(s2, s6, 0x31);
    r[7] = _mm256_permute2f128_ps(s3, s7, 0x31);
}

/* t's 8x8 block (j, i) from x's (i, j) */
static inline __attribute__((always_inline)) T_AVX2 void tr8_block(const float *x, int64_t ldx,
                                                                   float *t, int64_t ldt)
{
    __m256 v[8];
#pragma GCC unroll 8
    for (int r = 0; r < 8; r++)
        v[r] = _mm256_loadu_ps(x + r * ldx);
    tr8(v);
#pragma GCC unroll 8
    for (int r = 0; r < 8; r++)
        _mm256_storeu_ps(t + r * ldt, v[r]);
}

/* 8x8 blocks through registers, two above each other where they can be
 * (so that each row of t gets 16 floats, a cache line, at a time), the
 * edges by the reference; AVX-512 takes it too (the loads and stores
 * bound it) */
static T_AVX2 void transpose_avx2(const float *x, int64_t ldx, int64_t rows, int64_t cols,
                                  float *t, int64_t ldt)
{
    const int64_t r8 = rows / 8 * 8, c8 = cols / 8 * 8;
    for (int64_t i = 0; i < r8; i += 16)
        for (int64_t j = 0; j < c8; j += 8) {
            tr8_block(x + i * ldx + j, ldx, t + j * ldt + i, ldt);
            if (i + 8 < r8)
                tr8_block(x + (i + 8) * ldx + j, ldx, t + j * ldt + i + 8, ldt);
        }
    llm_vec_transpose_ref(x + c8, ldx, r8, cols - c8, t + c8 * ldt, ldt);
    llm_vec_transpose_ref(x + r8 * ldx, ldx, rows - r8, cols, t + r8, ldt);
}

/* 8 rows at a time in the lanes: each lane's sum of squares is its row's
 * chain of the reference's products and sums, in the same order (the
 * reference's one chain per row waited 4 cycles an element; a GPTQ
 * calibration of SmolLM2 spent 2.3% of its time there); AVX-512 takes it
 * too. */
static T_AVX2 void rmsnorm_avx2(const float *x, const float *g, float *y, int64_t n, int64_t dim,
                                float eps)
{
    const int64_t d8 = dim / 8 * 8;
    int64_t t = 0;
    for (; t + 8 <= n; t += 8) {
        const float *xt = x + t * dim;
        __m256 ss = _mm256_setzero_ps();
        for (int64_t k = 0; k < d8; k += 8) {
            __m256 v[8];
#pragma GCC unroll 8
            for (int r = 0; r < 8; r++)
                v[r] = _mm256_loadu_ps(xt + r * dim + k);
            tr8(v);
#pragma GCC unroll 8
            for (int c = 0; c < 8; c++)
                ss = _mm256_add_ps(ss, _mm256_mul_ps(v[c], v[c]));
        }
        for (int64_t k = d8; k < dim; k++) {
            const __m256 v = _mm256_setr_ps(xt[k], xt[dim + k], xt[2 * dim + k], xt[3 * dim + k],
                                            xt[4 * dim + k], xt[5 * dim + k], xt[6 * dim + k],
                                            xt[7 * dim + k]);
            ss = _mm256_add_ps(ss, _mm256_mul_ps(v, v));
        }
        float s8[8];
        _mm256_storeu_ps(s8, ss);
        for (int r = 0; r < 8; r++) {
            const float *xi = xt + r * dim;
            float *yi = y + (t + r) * dim;
            const float sc = rms_scale(s8[r], dim, eps);
            const __m256 s = _mm256_set1_ps(sc);
            for (int64_t k = 0; k < d8; k += 8)
                _mm256_storeu_ps(yi + k, _mm256_mul_ps(_mm256_loadu_ps(g + k),
                                                       _mm256_mul_ps(s, _mm256_loadu_ps(xi + k))));
            for (int64_t k = d8; k < dim; k++)
                yi[k] = g[k] * (sc * xi[k]);
        }
    }
    llm_vec_rmsnorm_ref(x + t * dim, g, y + t * dim, n - t, dim, eps);
}

/* AVX-512 takes it too: the loop is bound by the divisions */
static T_AVX2 void geglu_avx2(float *g, const float *u, int64_t n)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(g + i, geglu8(_mm256_loadu_ps(g + i), _mm256_loadu_ps(u + i)));
    if (i < n) { /* the tail through the same arithmetic */
        float tg[8] = { 0 }, tu[8] = { 0 };
        memcpy(tg, g + i, (size_t)(n - i) * sizeof(float));
        memcpy(tu, u + i, (size_t)(n - i) * sizeof(float));
        _mm256_storeu_ps(tg, geglu8(_mm256_loadu_ps(tg), _mm256_loadu_ps(tu)));
        memcpy(g + i, tg, (size_t)(n - i) * sizeof(float));
    }
}

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

void llm_vec_to_f16(const float *x, uint16_t *y, int64_t n)
{
    VEC_DISPATCH(to_f16_avx2, to_f16_avx2, llm_vec_to_f16_ref, x, y, n)
}

void llm_vec_swiglu(float *g, const float *u, int64_t n)
{
    VEC_DISPATCH(swiglu_avx2, swiglu_avx2, llm_vec_swiglu_ref, g, u, n)
}

void llm_vec_softmax(float *s, int64_t lo, int64_t hi, float scale, float softcap)
{
    VEC_DISPATCH(softmax_avx512, softmax_avx2, llm_vec_softmax_ref, s, lo, hi, scale, softcap)
}

void llm_vec_transpose(const float *x, int64_t ldx, int64_t rows, int64_t cols, float *t,
                       int64_t ldt)
{
    VEC_DISPATCH(transpose_avx2, transpose_avx2, llm_vec_transpose_ref, x, ldx, rows, cols, t, ldt)
}

void llm_vec_rmsnorm(const float *x, const float *g, float *y, int64_t n, int64_t dim, float eps)
{
    VEC_DISPATCH(rmsnorm_avx2, rmsnorm_avx2, llm_vec_rmsnorm_ref, x, g, y, n, dim, eps)
}

void llm_vec_geglu(float *g, const float *u, int64_t n)
{
    VEC_DISPATCH(geglu_avx2, geglu_avx2, llm_vec_geglu_ref, g, u, n)
}

/* The multi-query forms: the AVX-512 kernels above, elsewhere the
 * one-query kernel per query (the same bits either way) */
#ifdef VEC_X86
#define VEC_N_AVX512(call)                       \
    if (llm_matmul_isa() == LLM_ISA_AVX512) {    \
        call;                                    \
        return;                                  \
    }
#else
#define VEC_N_AVX512(call)
#endif
#define VEC_N(name, avx512, one, BT)                                                         \
    void name(const float *q, int64_t qs, int nq, const BT *K, int64_t ldk, int64_t m,       \
              int64_t n, float *s, int64_t ss)                                               \
    {                                                                                        \
        VEC_N_AVX512(avx512(q, qs, nq, K, ldk, m, n, s, ss))                                 \
        for (int j = 0; j < nq; j++)                                                         \
            one(q + j * qs, K, ldk, m, n, s + j * ss);                                       \
    }
#define VEC_AXN(name, avx512, one, BT)                                                       \
    void name(float *y, int64_t ys, const float *w, int64_t ws, int nq, const BT *V,         \
              int64_t ldv, int64_t m, int64_t n)                                             \
    {                                                                                        \
        VEC_N_AVX512(avx512(y, ys, w, ws, nq, V, ldv, m, n))                                 \
        for (int j = 0; j < nq; j++)                                                         \
            one(y + j * ys, w + j * ws, V, ldv, m, n);                                       \
    }
VEC_N(llm_vec_dots_f32_n, dots_f32_avx512_n, llm_vec_dots_f32, float)
VEC_N(llm_vec_dots_f16_n, dots_f16_avx512_n, llm_vec_dots_f16, uint16_t)
VEC_N(llm_vec_dots_bf16_n, dots_bf16_avx512_n, llm_vec_dots_bf16, uint16_t)
VEC_AXN(llm_vec_axpys_f32_n, axpys_f32_avx512_n, llm_vec_axpys_f32, float)
VEC_AXN(llm_vec_axpys_f16_n, axpys_f16_avx512_n, llm_vec_axpys_f16, uint16_t)
VEC_AXN(llm_vec_axpys_bf16_n, axpys_bf16_avx512_n, llm_vec_axpys_bf16, uint16_t)

void llm_vec_dots_f32(const float *q, const float *K, int64_t ldk, int64_t m, int64_t n, float *s)
{
    VEC_DISPATCH(dots_f32_avx512, dots_f32_avx2, llm_vec_dots_f32_ref, q, K, ldk, m, n, s)
}

void llm_vec_dots_f16(const float *q, const uint16_t *K, int64_t ldk, int64_t m, int64_t n,
                      float *s)
{
    VEC_DISPATCH(dots_f16_avx512, dots_f16_avx2, llm_vec_dots_f16_ref, q, K, ldk, m, n, s)
}

void llm_vec_axpys_f32(float *y, const float *w, const float *V, int64_t ldv, int64_t m,
                       int64_t n)
{
    VEC_DISPATCH(axpys_f32_avx512, axpys_f32_avx2, llm_vec_axpys_f32_ref, y, w, V, ldv, m, n)
}

void llm_vec_axpys_f16(float *y, const float *w, const uint16_t *V, int64_t ldv, int64_t m,
                       int64_t n)
{
    VEC_DISPATCH(axpys_f16_avx512, axpys_f16_avx2, llm_vec_axpys_f16_ref, y, w, V, ldv, m, n)
}

void llm_vec_dots_bf16(const float *q, const uint16_t *K, int64_t ldk, int64_t m, int64_t n,
                       float *s)
{
    VEC_DISPATCH(dots_bf16_avx512, dots_bf16_avx2, llm_vec_dots_bf16_ref, q, K, ldk, m, n, s)
}

void llm_vec_axpys_bf16(float *y, const float *w, const uint16_t *V, int64_t ldv, int64_t m,
                        int64_t n)
{
    VEC_DISPATCH(axpys_bf16_avx512, axpys_bf16_avx2, llm_vec_axpys_bf16_ref, y, w, V, ldv, m, n)
}

void llm_vec_dots_q8_0(const float *q, const uint8_t *K, int64_t ldk, int64_t m, int64_t n,
                       float *s)
{
    VEC_DISPATCH(dots_q8_0_avx512, dots_q8_0_avx2, llm_vec_dots_q8_0_ref, q, K, ldk, m, n, s)
}

void llm_vec_axpys_q8_0(float *y, const float *w, const uint8_t *V, int64_t ldv, int64_t m,
                        int64_t n)
{
    VEC_DISPATCH(axpys_q8_0_avx512, axpys_q8_0_avx2, llm_vec_axpys_q8_0_ref, y, w, V, ldv, m, n)
}

void llm_vec_dots_q4ch(const float *q, const uint8_t *blk, int64_t n, int64_t bs, float *s)
{
    if (n > 256) /* (the SIMD kernels' scratch) */
        return llm_vec_dots_q4ch_ref(q, blk, n, bs, s);
    VEC_DISPATCH(dots_q4ch_avx512, dots_q4ch_avx2, llm_vec_dots_q4ch_ref, q, blk, n, bs, s)
}

void llm_vec_dots_q4_0(const float *q, const uint8_t *K, int64_t ldk, int64_t m, int64_t n,
                       float *s)
{
    VEC_DISPATCH(dots_q4_0_avx512, dots_q4_0_avx2, llm_vec_dots_q4_0_ref, q, K, ldk, m, n, s)
}

void llm_vec_axpys_q4_0(float *y, const float *w, const uint8_t *V, int64_t ldv, int64_t m,
                        int64_t n)
{
    VEC_DISPATCH(axpys_q4_0_avx512, axpys_q4_0_avx2, llm_vec_axpys_q4_0_ref, y, w, V, ldv, m, n)
}

void llm_vec_dots_fp8(const float *q, const uint8_t *K, int64_t ldk, int64_t m, int64_t n,
                      float *s)
{
    VEC_DISPATCH(dots_fp8_avx512, dots_fp8_avx2, llm_vec_dots_fp8_ref, q, K, ldk, m, n, s)
}

void llm_vec_axpys_fp8(float *y, const float *w, const uint8_t *V, int64_t ldv, int64_t m,
                       int64_t n)
{
    VEC_DISPATCH(axpys_fp8_avx512, axpys_fp8_avx2, llm_vec_axpys_fp8_ref, y, w, V, ldv, m, n)
}
