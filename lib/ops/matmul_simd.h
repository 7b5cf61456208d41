/* matmul_simd.h: the body of the SIMD matrix products, included once by
 * matmul_avx2.c and once by matmul_avx512.c after they set the target ISA
 * and define
 *   SIMD(name)        the variant's name for `name` (name##_avx2 ...)
 *   DOT_U8S8(i, u, s) 8 int32 lanes: i plus lanes whose sum is
 *                     sum_j u[j]*s[j] over 32 unsigned bytes u (<= 128) and
 *                     signed bytes s (>= -127)
 * Not a public header; it holds function definitions.
 *
 * Quantized weights meet int16 activations by default (row_q16 below, one
 * int16 multiply-add per pair of codes), float activations (row_qf), or
 * int8 activations (struct llm_qx, blocks of 32):
 * per block of 32 the integer dot is exact, then one float FMA applies
 * d_w * d_x. Codes that are not plain int8 are shifted into range and the
 * shift is corrected in the integer domain with the block's sum(q_x), and
 * the min of the zero-point types with ds = d_x * sum(q_x):
 *   q4 symmetric   w = d (c - 8)      dot = d d_x (sum(c q) - 8 sum(q))
 *   q4 zero point  w = d c + m        dot = d d_x sum(c q) + m ds
 *   q8 zero point  w = d c + m        dot = d d_x (sum((c-128) q) + 128 sum(q)) + m ds
 *   q8 symmetric   w = d c            sign trick: sum(|c| * sign(q, c))
 * llm_matmul with fewer than LLM_MATMUL_GEMM_MIN_NB tokens (and any number
 * under LLM_ACT_Q8) takes 4 tokens per pass over a weight row, so each
 * block is loaded and unpacked once for 4 tokens; from that many tokens on
 * it runs a GEMM of matmul_gemm.h (int16 for these types under int16
 * activations on AVX-512, float otherwise). Decode (one token) takes
 * SIMD_NR rows per pass, from separate stretches of the matrix.
 */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "../common/alloc.h"
#include "../quant/kquants.h"
#include "matmul_impl.h"

enum { F_SYM8, F_ZP8, F_SYM4, F_ZP4, F_ZP3 };
/* the families with a minimum m per block (w = d c + m) */
#define FAM_ZP(fam) ((fam) == F_ZP8 || (fam) == F_ZP4 || (fam) == F_ZP3)

/* the float vector of the float-activation and int16 kernels */
#ifdef SIMD_AVX512
#define SIMD_NV 2
typedef __m512 SIMD(fv);
#else
#define SIMD_NV 4
typedef __m256 SIMD(fv);
#endif


#define SIMD_INLINE static inline __attribute__((always_inline))
/* tokens per pass over a weight row in llm_matmul */
#define SIMD_NT 4
/* rows per pass in decode, each from its own stretch of the matrix (4
 * measured slower than 2 for q4_0 on Zen 4, in cache and from DRAM) */
#define SIMD_NR 2

SIMD_INLINE float SIMD(hsum)(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

SIMD_INLINE float SIMD(ldh)(const uint8_t *p)
{
    uint16_t h;
    memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

SIMD_INLINE float SIMD(ldf)(const uint8_t *p)
{
    float f;
    memcpy(&f, p, 4);
    return f;
}

// ----------------------------------------------------------------------------
// activations -> int8 blocks of 32 (round to nearest even, as the reference
// rounds with nearbyintf in the default rounding mode)

SIMD_INLINE int SIMD(any_nan)(__m256 a, __m256 b, __m256 c, __m256 d)
{
    __m256 ab = _mm256_or_ps(_mm256_cmp_ps(a, a, _CMP_UNORD_Q), _mm256_cmp_ps(b, b, _CMP_UNORD_Q));
    __m256 cd = _mm256_or_ps(_mm256_cmp_ps(c, c, _CMP_UNORD_Q), _mm256_cmp_ps(d, d, _CMP_UNORD_Q));
    __m256 u = _mm256_or_ps(ab, cd);
    return _mm256_movemask_ps(u) != 0;
}

/* A block with a NaN or an infinity: zero codes and a NaN scale, so that
 * the products are NaN (the reference gives NaN or an infinity; the integer
 * codes cannot carry either, and max_ps drops NaNs). */
static void SIMD(nonfinite)(float *d, float *ds, void *qs, size_t qs_bytes)
{
    *d = NAN;
    *ds = NAN;
    memset(qs, 0, qs_bytes);
}

static void SIMD(quantize_x)(const float *x, int64_t n, struct llm_qx *out)
{
    const __m256 sign = _mm256_set1_ps(-0.0f);
    const __m256i perm = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    for (int64_t b = 0; b * 32 < n; b++) {
        const float *src = x + b * 32;
        float tmp[32];
        if (n - b * 32 < 32) {
            memset(tmp, 0, sizeof tmp);
            memcpy(tmp, src, (size_t)(n - b * 32) * sizeof(float));
            src = tmp;
        }
        __m256 v0 = _mm256_loadu_ps(src), v1 = _mm256_loadu_ps(src + 8);
        __m256 v2 = _mm256_loadu_ps(src + 16), v3 = _mm256_loadu_ps(src + 24);
        __m256 a01 = _mm256_max_ps(_mm256_andnot_ps(sign, v0), _mm256_andnot_ps(sign, v1));
        __m256 a23 = _mm256_max_ps(_mm256_andnot_ps(sign, v2), _mm256_andnot_ps(sign, v3));
        __m256 a = _mm256_max_ps(a01, a23);
        __m128 m = _mm_max_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
        m = _mm_max_ps(m, _mm_movehl_ps(m, m));
        m = _mm_max_ss(m, _mm_movehdup_ps(m));
        const float amax = _mm_cvtss_f32(m);
        if (SIMD(any_nan)(v0, v1, v2, v3) || !isfinite(amax)) {
            SIMD(nonfinite)(&out[b].d, &out[b].ds, out[b].qs, 32);
            out[b].m8 = out[b].p128 = 0;
            continue;
        }
        const float d = amax / 127.0f;
        const float id = d > 0 ? 1.0f / d : 0.0f;
        const __m256 vid = _mm256_set1_ps(id);
        __m256i i0 = _mm256_cvtps_epi32(_mm256_mul_ps(v0, vid));
        __m256i i1 = _mm256_cvtps_epi32(_mm256_mul_ps(v1, vid));
        __m256i i2 = _mm256_cvtps_epi32(_mm256_mul_ps(v2, vid));
        __m256i i3 = _mm256_cvtps_epi32(_mm256_mul_ps(v3, vid));
        __m256i s = _mm256_add_epi32(_mm256_add_epi32(i0, i1), _mm256_add_epi32(i2, i3));
        __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
        s4 = _mm_hadd_epi32(s4, s4);
        s4 = _mm_hadd_epi32(s4, s4);
        i0 = _mm256_packs_epi32(i0, i1);
        i2 = _mm256_packs_epi32(i2, i3);
        i0 = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(i0, i2), perm);
        _mm256_storeu_si256((__m256i *)out[b].qs, i0);
        const int sum = _mm_cvtsi128_si32(s4);
        out[b].d = d;
        out[b].m8 = -8 * sum;
        out[b].p128 = 128 * sum;
        out[b].ds = d * (float)sum;
    }
}

/* int16 activations: the int8 rule with 32767 levels */
static void SIMD(quantize_x16)(const float *x, int64_t n, struct llm_qx16 *out)
{
    const __m256 sign = _mm256_set1_ps(-0.0f);
    for (int64_t b = 0; b * 32 < n; b++) {
        const float *src = x + b * 32;
        float tmp[32];
        if (n - b * 32 < 32) {
            memset(tmp, 0, sizeof tmp);
            memcpy(tmp, src, (size_t)(n - b * 32) * sizeof(float));
            src = tmp;
        }
        __m256 v0 = _mm256_loadu_ps(src), v1 = _mm256_loadu_ps(src + 8);
        __m256 v2 = _mm256_loadu_ps(src + 16), v3 = _mm256_loadu_ps(src + 24);
        __m256 a01 = _mm256_max_ps(_mm256_andnot_ps(sign, v0), _mm256_andnot_ps(sign, v1));
        __m256 a23 = _mm256_max_ps(_mm256_andnot_ps(sign, v2), _mm256_andnot_ps(sign, v3));
        __m256 a = _mm256_max_ps(a01, a23);
        __m128 m = _mm_max_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
        m = _mm_max_ps(m, _mm_movehl_ps(m, m));
        m = _mm_max_ss(m, _mm_movehdup_ps(m));
        if (SIMD(any_nan)(v0, v1, v2, v3) || !isfinite(_mm_cvtss_f32(m))) {
            SIMD(nonfinite)(&out[b].d, &out[b].ds, out[b].qs, 64);
            out[b].m8 = out[b].h0 = 0;
            continue;
        }
        const float d = _mm_cvtss_f32(m) / 32767.0f;
        const float id = d > 0 ? 1.0f / d : 0.0f;
        const __m256 vid = _mm256_set1_ps(id);
        __m256i i0 = _mm256_cvtps_epi32(_mm256_mul_ps(v0, vid));
        __m256i i1 = _mm256_cvtps_epi32(_mm256_mul_ps(v1, vid));
        __m256i i2 = _mm256_cvtps_epi32(_mm256_mul_ps(v2, vid));
        __m256i i3 = _mm256_cvtps_epi32(_mm256_mul_ps(v3, vid));
        const __m256i s01 = _mm256_add_epi32(i0, i1);
        __m256i s = _mm256_add_epi32(s01, _mm256_add_epi32(i2, i3));
        __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
        __m128i h4 = _mm_add_epi32(_mm256_castsi256_si128(s01), _mm256_extracti128_si256(s01, 1));
        s4 = _mm_hadd_epi32(s4, h4);
        s4 = _mm_hadd_epi32(s4, s4);
        /* packs works within 128-bit lanes: restore element order */
        __m256i p01 = _mm256_permute4x64_epi64(_mm256_packs_epi32(i0, i1), 0xd8);
        __m256i p23 = _mm256_permute4x64_epi64(_mm256_packs_epi32(i2, i3), 0xd8);
        _mm256_storeu_si256((__m256i *)out[b].qs, p01);
        _mm256_storeu_si256((__m256i *)(out[b].qs + 16), p23);
        const int sum = _mm_cvtsi128_si32(s4);
        out[b].d = d;
        out[b].m8 = -8 * sum;
        out[b].h0 = _mm_extract_epi32(s4, 1);
        out[b].ds = d * (float)sum;
    }
}

/* The int16 blocks of nb tokens X (nb, ne0) into *xq: stack (cap blocks)
 * when they fit, else memory the caller frees (when *xq is not stack) */
static llm_status SIMD(quantize_x16_all)(const float *X, int64_t ne0, int64_t nb,
                                         struct llm_qx16 *stack, size_t cap,
                                         struct llm_qx16 **xq)
{
    const int64_t nq = (ne0 + 31) / 32;
    uint64_t n;
    *xq = stack;
    if (!llm_mul_ok((uint64_t)nq, (uint64_t)nb, &n) || !llm_mul_ok(n, sizeof **xq, &n))
        return llm_error_set(LLM_E_NOMEM, "matmul: %lld tokens of %lld elements overflow",
                             (long long)nb, (long long)ne0);
    if (n > cap * sizeof *stack && !(*xq = llm_malloc((size_t)n)))
        return LLM_E_NOMEM;
    for (int64_t b = 0; b < nb; b++)
        SIMD(quantize_x16)(X + b * ne0, ne0, *xq + b * nq);
    return LLM_OK;
}

// ----------------------------------------------------------------------------
// weight codes of the 32 elements [32k, 32k+32) of a row

/* the 32 codes (0..7) of a sub-block, bytes in element order */
SIMD_INLINE __m256i SIMD(q3_codes)(const uint8_t *sub)
{
    int64_t lo;
    int32_t hi;
    memcpy(&lo, sub, 8);
    memcpy(&hi, sub + 8, 4);
    /* 64-bit lane g: the low-bit bytes shifted by 2g (elements 8g..8g+7) */
    const __m256i l = _mm256_and_si256(
        _mm256_srlv_epi64(_mm256_set1_epi64x(lo), _mm256_set_epi64x(6, 4, 2, 0)),
        _mm256_set1_epi8(3));
    /* byte 8g+b: high-bit byte g, tested against bit b */
    const __m256i g = _mm256_shuffle_epi8(
        _mm256_set1_epi32(hi),
        _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0));
    const __m256i bit = _mm256_set1_epi64x((int64_t)0x8040201008040201ULL);
    const __m256i h = _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(g, bit), bit),
                                       _mm256_set1_epi8(4));
    return _mm256_or_si256(l, h);
}

/* 32 nibble codes of a 4-bit block of G elements, elements [32s, 32s+32) */
SIMD_INLINE __m256i SIMD(nibbles)(const uint8_t *qs, int G, int s)
{
    const __m256i lo4 = _mm256_set1_epi8(15);
    if (G == 32) {
        __m128i b = _mm_loadu_si128((const __m128i *)qs);
        __m256i v = _mm256_set_m128i(_mm_srli_epi16(b, 4), b);
        return _mm256_and_si256(v, lo4);
    }
    if (32 * s < G / 2)
        return _mm256_and_si256(_mm256_loadu_si256((const __m256i *)(qs + 32 * s)), lo4);
    __m256i v = _mm256_loadu_si256((const __m256i *)(qs + 32 * s - G / 2));
    return _mm256_and_si256(_mm256_srli_epi16(v, 4), lo4);
}

/* Codes (as the unsigned operand of DOT_U8S8 after fixups), scale and the
 * min m of the zero-point types (0 otherwise) for block k. fam, G (0: per
 * row), BB, hdr are constants after inlining. */
SIMD_INLINE __m256i SIMD(codes)(const uint8_t *row, int64_t k, int64_t ne0, int fam, int G,
                                int BB, int hdr, float *dw, float *coef)
{
    __m256i c;
    float d, m = 0.0f;
    if (G == 0) { /* per-row 8-bit: header d (and m), then ne0 codes */
        d = SIMD(ldf)(row);
        if (fam == F_ZP8)
            m = SIMD(ldf)(row + 4);
        const uint8_t *q = row + hdr + 32 * k;
        if (32 * k + 32 <= ne0) {
            c = _mm256_loadu_si256((const __m256i *)q);
        } else { /* no padding in per-row rows: do not read past the row */
            uint8_t tmp[32] = { 0 };
            memcpy(tmp, q, (size_t)(ne0 - 32 * k));
            if (fam == F_ZP8) /* code 128 is the zero after the shift below */
                memset(tmp + (ne0 - 32 * k), 0x80, (size_t)(32 * k + 32 - ne0));
            c = _mm256_loadu_si256((const __m256i *)tmp);
        }
    } else if (fam == F_SYM8 || fam == F_ZP8) {
        const int spb = G / 32;
        const uint8_t *blk = row + hdr + (k / spb) * BB;
        d = SIMD(ldh)(blk);
        if (fam == F_ZP8)
            m = SIMD(ldh)(blk + 2);
        c = _mm256_loadu_si256((const __m256i *)(blk + BB - G + 32 * (k % spb)));
    } else {
        const int spb = G / 32;
        const uint8_t *blk = row + hdr + (k / spb) * BB;
        if (hdr) { /* _ch: 32-element blocks of bare codes, d and m in the header */
            d = SIMD(ldf)(row);
            if (FAM_ZP(fam))
                m = SIMD(ldf)(row + 4);
        } else {
            d = SIMD(ldh)(blk);
            if (FAM_ZP(fam))
                m = SIMD(ldh)(blk + 2);
        }
        c = fam == F_ZP3 ? SIMD(q3_codes)(blk + BB - 12 * spb + 12 * (k % spb))
                         : SIMD(nibbles)(blk + BB - G / 2, G, (int)(k % spb));
    }
    *dw = d;
    *coef = m;
    if (fam == F_ZP8)
        c = _mm256_xor_si256(c, _mm256_set1_epi8((char)0x80));
    return c;
}

/* 8 int32 lanes summing to sum_j w[j] * q[j] - (the code offset) * sum(q):
 * w = c - 8 for q4 symmetric, c for q4 zero point, c - 128 (+128 sum(q)
 * added back) for q8 zero point, c for q8 symmetric. The offset enters as
 * the initial value of lane 0. */
SIMD_INLINE __m256i SIMD(idot)(__m256i c, const struct llm_qx *b, int fam)
{
    __m256i a = _mm256_loadu_si256((const __m256i *)b->qs);
    __m256i init = _mm256_setzero_si256();
    if (fam == F_SYM4)
        init = _mm256_castsi128_si256(_mm_cvtsi32_si128(b->m8));
    else if (fam == F_ZP8)
        init = _mm256_castsi128_si256(_mm_cvtsi32_si128(b->p128));
    if (fam == F_SYM8 || fam == F_ZP8)
        return DOT_U8S8(init, _mm256_abs_epi8(c), _mm256_sign_epi8(a, c));
    return DOT_U8S8(init, c, a);
}

/* y[t] = row . x_t for NT tokens whose blocks start at xq + t*nq. Two
 * blocks per step go to two accumulators, so that the FMA and min-term
 * chains of one token (decode) overlap. */
SIMD_INLINE void SIMD(row_q)(const uint8_t *row, const struct llm_qx *xq, int64_t nq, int64_t ne0,
                             int fam, int G, int BB, int hdr, int NT, float *y)
{
    enum { U = 2 };
    __m256 acc[SIMD_NT][U];
    float corr[SIMD_NT][U];
    const int zp = FAM_ZP(fam);
    /* the same split for every NT, so that matmul gives matvec's bits */
    const int nu = U;
    for (int t = 0; t < NT; t++)
        for (int u = 0; u < U; u++) {
            acc[t][u] = _mm256_setzero_ps();
            corr[t][u] = 0.0f;
        }
    int64_t k = 0;
    for (; k + nu <= nq; k += nu)
#pragma GCC unroll 2
        for (int u = 0; u < nu; u++) {
            float dw, m;
            __m256i c = SIMD(codes)(row, k + u, ne0, fam, G, BB, hdr, &dw, &m);
#pragma GCC unroll 4
            for (int t = 0; t < NT; t++) {
                const struct llm_qx *b = xq + t * nq + k + u;
                __m256 p = _mm256_cvtepi32_ps(SIMD(idot)(c, b, fam));
                acc[t][u] = _mm256_fmadd_ps(p, _mm256_set1_ps(dw * b->d), acc[t][u]);
                if (zp)
                    corr[t][u] += m * b->ds;
            }
        }
    for (; k < nq; k++) {
        float dw, m;
        __m256i c = SIMD(codes)(row, k, ne0, fam, G, BB, hdr, &dw, &m);
#pragma GCC unroll 4
        for (int t = 0; t < NT; t++) {
            const struct llm_qx *b = xq + t * nq + k;
            __m256 p = _mm256_cvtepi32_ps(SIMD(idot)(c, b, fam));
            acc[t][0] = _mm256_fmadd_ps(p, _mm256_set1_ps(dw * b->d), acc[t][0]);
            if (zp)
                corr[t][0] += m * b->ds;
        }
    }
    for (int t = 0; t < NT; t++)
        y[t] = SIMD(hsum)(_mm256_add_ps(acc[t][0], acc[t][1])) + (corr[t][0] + corr[t][1]);
}

/* Decode: row_q for one token and SIMD_NR rows from separate
 * stretches of the matrix, sharing the activation loads, as SIMD(rown_q16)
 * does; each row sums in row_q's order, so the bits are row_q's with
 * NT = 1. */
SIMD_INLINE void SIMD(rown_q)(const uint8_t *const *rows, const struct llm_qx *xq,
                              int64_t nq, int64_t ne0, int fam, int G, int BB, int hdr,
                              float *const *y)
{
    enum { U = 2 };
    __m256 acc[SIMD_NR][U];
    float corr[SIMD_NR][U];
    const int zp = FAM_ZP(fam);
    for (int i = 0; i < SIMD_NR; i++)
        for (int u = 0; u < U; u++) {
            acc[i][u] = _mm256_setzero_ps();
            corr[i][u] = 0.0f;
        }
    for (int64_t k = 0; k < nq; k += U)
#pragma GCC unroll 2
        for (int u = 0; u < U; u++) {
            if (k + u >= nq)
                break;
            const struct llm_qx *b = xq + k + u;
            const __m256i a = _mm256_loadu_si256((const __m256i *)b->qs);
            __m256i init = _mm256_setzero_si256();
            if (fam == F_SYM4)
                init = _mm256_castsi128_si256(_mm_cvtsi32_si128(b->m8));
            else if (fam == F_ZP8)
                init = _mm256_castsi128_si256(_mm_cvtsi32_si128(b->p128));
            const float dx = b->d, ds = b->ds;
#pragma GCC unroll 4
            for (int i = 0; i < SIMD_NR; i++) {
                float dw, m;
                const __m256i c = SIMD(codes)(rows[i], k + u, ne0, fam, G, BB, hdr, &dw, &m);
                const __m256i d = fam == F_SYM8 || fam == F_ZP8
                                      ? DOT_U8S8(init, _mm256_abs_epi8(c), _mm256_sign_epi8(a, c))
                                      : DOT_U8S8(init, c, a);
                acc[i][u] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d), _mm256_set1_ps(dw * dx),
                                            acc[i][u]);
                if (zp)
                    corr[i][u] += m * ds;
            }
        }
    for (int i = 0; i < SIMD_NR; i++)
        *y[i] = SIMD(hsum)(_mm256_add_ps(acc[i][0], acc[i][1])) + (corr[i][0] + corr[i][1]);
}

/* Decode's pass over rows [r0, r1): SIMD_NR streams, each one contiguous
 * stretch of h rows, advance together; the rows left over (fewer than
 * SIMD_NR) go on to the row-by-row loop that follows. */
#define SIMD_ROWS_DECODE(KERN, FAM, G, BB, HDR)                                                 \
    if (nb == 1) {                                                                              \
        const int64_t h = (r1 - r0) / SIMD_NR;                                                  \
        for (int64_t i = 0; i < h; i++) {                                                       \
            const uint8_t *rs[SIMD_NR];                                                         \
            float *ys[SIMD_NR];                                                                 \
            for (int s_ = 0; s_ < SIMD_NR; s_++) {                                              \
                rs[s_] = w + (uint64_t)(r0 + s_ * h + i) * rb;                                  \
                ys[s_] = Y + r0 + s_ * h + i;                                                   \
            }                                                                                   \
            KERN(rs, xq, nq, ne0, FAM, G, BB, HDR, ys);                                         \
        }                                                                                       \
        r0 += SIMD_NR * h;                                                                      \
    }

SIMD_INLINE SIMD(fv) SIMD(fload)(const float *p)
{
#ifdef SIMD_AVX512
    return _mm512_loadu_ps(p);
#else
    return _mm256_loadu_ps(p);
#endif
}

SIMD_INLINE SIMD(fv) SIMD(fma)(SIMD(fv) a, SIMD(fv) b, SIMD(fv) c)
{
#ifdef SIMD_AVX512
    return _mm512_fmadd_ps(a, b, c);
#else
    return _mm256_fmadd_ps(a, b, c);
#endif
}

SIMD_INLINE SIMD(fv) SIMD(fzero)(void)
{
#ifdef SIMD_AVX512
    return _mm512_setzero_ps();
#else
    return _mm256_setzero_ps();
#endif
}

SIMD_INLINE float SIMD(fsum)(SIMD(fv) v)
{
#ifdef SIMD_AVX512
    return _mm512_reduce_add_ps(v);
#else
    return SIMD(hsum)(v);
#endif
}

SIMD_INLINE SIMD(fv) SIMD(fset1)(float v)
{
#ifdef SIMD_AVX512
    return _mm512_set1_ps(v);
#else
    return _mm256_set1_ps(v);
#endif
}

/* Scale and min of a block as the low lanes of a vector, [d, m, ...]:
 * both fp16 at blk (one 4-byte load and conversion), or the row header's
 * floats; lane 1 is meaningless for the symmetric families. */
SIMD_INLINE __m128 SIMD(dm_h)(const uint8_t *blk)
{
    int32_t v;
    memcpy(&v, blk, 4);
    return _mm_cvtph_ps(_mm_cvtsi32_si128(v));
}

SIMD_INLINE __m128 SIMD(dm_f)(const uint8_t *row, int zp)
{
    return zp ? _mm_castsi128_ps(_mm_loadl_epi64((const __m128i *)row))
              : _mm_set_ss(SIMD(ldf)(row));
}

/* The 32 codes of block k widened straight into int16 lanes in element
 * order (w0: elements 0-15, w1: 16-31): one zero/sign-extending 16-byte
 * load per 16 codes and no cross-lane shuffle, so that decode spends its
 * port-5 slots on little else; signed for q8 symmetric, unsigned (0..255,
 * 0..15) otherwise (the -8 of q4 symmetric goes in through m8). Scale and
 * min as SIMD(dm_h) / SIMD(dm_f) give them. */
SIMD_INLINE void SIMD(codes16)(const uint8_t *row, int64_t k, int64_t ne0, int fam, int G, int BB,
                               int hdr, __m128 *dm, __m256i *w0, __m256i *w1)
{
    const int zp = FAM_ZP(fam);
    if (G == 0 || fam == F_SYM8 || fam == F_ZP8) {
        const uint8_t *q;
        uint8_t tmp[32];
        if (G == 0) { /* per-row 8-bit: header d (and m), then ne0 codes */
            *dm = SIMD(dm_f)(row, zp);
            q = row + hdr + 32 * k;
            if (32 * k + 32 > ne0) { /* no padding in per-row rows: do not read past the row;
                                      * the zero codes meet zero activations */
                memset(tmp, 0, sizeof tmp);
                memcpy(tmp, q, (size_t)(ne0 - 32 * k));
                q = tmp;
            }
        } else {
            const int spb = G / 32;
            const uint8_t *blk = row + hdr + (k / spb) * BB;
            *dm = SIMD(dm_h)(blk);
            q = blk + BB - G + 32 * (k % spb);
        }
        const __m128i q0 = _mm_loadu_si128((const __m128i *)q);
        const __m128i q1 = _mm_loadu_si128((const __m128i *)(q + 16));
        *w0 = fam == F_SYM8 ? _mm256_cvtepi8_epi16(q0) : _mm256_cvtepu8_epi16(q0);
        *w1 = fam == F_SYM8 ? _mm256_cvtepi8_epi16(q1) : _mm256_cvtepu8_epi16(q1);
    } else {
        const int spb = G / 32, s = (int)(k % spb);
        const uint8_t *blk = row + hdr + (k / spb) * BB;
        /* _ch: 32-element blocks of bare codes, scales in the header */
        *dm = hdr ? SIMD(dm_f)(row, zp) : SIMD(dm_h)(blk);
        const uint8_t *qs = blk + BB - G / 2;
        const __m256i lo4 = _mm256_set1_epi16(15);
        if (fam == F_ZP3) { /* 12-byte sub-blocks after d, m */
            const __m256i c = SIMD(q3_codes)(blk + BB - 12 * spb + 12 * s);
            *w0 = _mm256_cvtepu8_epi16(_mm256_castsi256_si128(c));
            *w1 = _mm256_cvtepu8_epi16(_mm256_extracti128_si256(c, 1));
        } else if (G == 32) { /* byte j: element j (low nibble), j + 16 (high) */
            const __m256i v = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)qs));
            *w0 = _mm256_and_si256(v, lo4);
            *w1 = _mm256_srli_epi16(v, 4);
        } else if (32 * s < G / 2) {
            const uint8_t *q = qs + 32 * s;
            *w0 = _mm256_and_si256(_mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)q)), lo4);
            *w1 = _mm256_and_si256(
                _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(q + 16))), lo4);
        } else {
            const uint8_t *q = qs + 32 * s - G / 2;
            *w0 = _mm256_srli_epi16(_mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)q)), 4);
            *w1 = _mm256_srli_epi16(
                _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(q + 16))), 4);
        }
    }
}

/* int16 activations: sum_j w[j] q[j] exactly in 8 int32 lanes (|w| <= 255,
 * |q| <= 32767, 4 products a lane: below 2^25), with the 4-bit symmetric
 * offset (-8 sum(q), |.| < 2^23) as lane 0's initial value; codes as
 * SIMD(codes16) gives them. 256-bit even in the AVX-512 variant (vpdpwssd
 * with VL): measured faster than 512-bit here. */
SIMD_INLINE __m256 SIMD(idot16)(__m256i w0, __m256i w1, const struct llm_qx16 *b, int fam)
{
    __m256i i = fam == F_SYM4 ? _mm256_castsi128_si256(_mm_cvtsi32_si128(b->m8))
                              : _mm256_setzero_si256();
#ifdef SIMD_AVX512
    i = _mm256_dpwssd_epi32(i, w0, _mm256_loadu_si256((const __m256i *)b->qs));
    i = _mm256_dpwssd_epi32(i, w1, _mm256_loadu_si256((const __m256i *)(b->qs + 16)));
#else
    i = _mm256_add_epi32(i, _mm256_madd_epi16(w0, _mm256_loadu_si256((const __m256i *)b->qs)));
    i = _mm256_add_epi32(i,
                         _mm256_madd_epi16(w1, _mm256_loadu_si256((const __m256i *)(b->qs + 16))));
#endif
    return _mm256_cvtepi32_ps(i);
}

/* row_q with int16 activations. Per block and token, [d_w, m] times
 * [d_x, ds] (adjacent in struct llm_qx16) gives the scale in lane 0 and
 * the min term in lane 1 with one multiply; lane 1 accumulates as a
 * vector. */
SIMD_INLINE void SIMD(row_q16)(const uint8_t *row, const struct llm_qx16 *xq, int64_t nq,
                               int64_t ne0, int fam, int G, int BB, int hdr, int NT, float *y)
{
    enum { U = 2 };
    __m256 acc[SIMD_NT][U];
    __m128 corr[SIMD_NT][U];
    const int zp = FAM_ZP(fam);
    for (int t = 0; t < NT; t++)
        for (int u = 0; u < U; u++) {
            acc[t][u] = _mm256_setzero_ps();
            corr[t][u] = _mm_setzero_ps();
        }
    int64_t k = 0;
    for (; k + U <= nq; k += U)
#pragma GCC unroll 2
        for (int u = 0; u < U; u++) {
            __m128 dm;
            __m256i w0, w1;
            SIMD(codes16)(row, k + u, ne0, fam, G, BB, hdr, &dm, &w0, &w1);
#pragma GCC unroll 4
            for (int t = 0; t < NT; t++) {
                const struct llm_qx16 *b = xq + t * nq + k + u;
                __m128 pr;
                if (zp) {
                    pr = _mm_mul_ps(dm, _mm_castsi128_ps(_mm_loadl_epi64((const __m128i *)&b->d)));
                    corr[t][u] = _mm_add_ps(corr[t][u], pr);
                } else {
                    pr = _mm_mul_ss(dm, _mm_load_ss(&b->d));
                }
                acc[t][u] = _mm256_fmadd_ps(SIMD(idot16)(w0, w1, b, fam), _mm256_broadcastss_ps(pr),
                                            acc[t][u]);
            }
        }
    for (; k < nq; k++) {
        __m128 dm;
        __m256i w0, w1;
        SIMD(codes16)(row, k, ne0, fam, G, BB, hdr, &dm, &w0, &w1);
#pragma GCC unroll 4
        for (int t = 0; t < NT; t++) {
            const struct llm_qx16 *b = xq + t * nq + k;
            __m128 pr;
            if (zp) {
                pr = _mm_mul_ps(dm, _mm_castsi128_ps(_mm_loadl_epi64((const __m128i *)&b->d)));
                corr[t][0] = _mm_add_ps(corr[t][0], pr);
            } else {
                pr = _mm_mul_ss(dm, _mm_load_ss(&b->d));
            }
            acc[t][0] = _mm256_fmadd_ps(SIMD(idot16)(w0, w1, b, fam), _mm256_broadcastss_ps(pr),
                                        acc[t][0]);
        }
    }
    for (int t = 0; t < NT; t++) {
        const float c0 = _mm_cvtss_f32(_mm_movehdup_ps(corr[t][0]));
        const float c1 = _mm_cvtss_f32(_mm_movehdup_ps(corr[t][1]));
        y[t] = SIMD(hsum)(_mm256_add_ps(acc[t][0], acc[t][1])) + (c0 + c1);
    }
}

/* Decode: row_q16 for one token and SIMD_NR rows at once, which share
 * the activation loads (a block of x16 is three loads, as many as the
 * codes and scales of a row). The caller passes rows from SIMD_NR
 * separate stretches of the matrix, each walked in order, so that the
 * hardware prefetchers see sequential streams: adjacent rows would make
 * each stream skip a row at every step, and DRAM-resident matrices ran at
 * a third of the bandwidth. Each row sums in row_q16's order, so the bits
 * are row_q16's. */
SIMD_INLINE void SIMD(rown_q16)(const uint8_t *const *rows, const struct llm_qx16 *xq,
                                int64_t nq, int64_t ne0, int fam, int G, int BB, int hdr,
                                float *const *y)
{
    enum { U = 2 };
    __m256 acc[SIMD_NR][U];
    __m128 corr[SIMD_NR][U];
    const int zp = FAM_ZP(fam);
    for (int i = 0; i < SIMD_NR; i++)
        for (int u = 0; u < U; u++) {
            acc[i][u] = _mm256_setzero_ps();
            corr[i][u] = _mm_setzero_ps();
        }
    for (int64_t k = 0; k < nq; k += U)
#pragma GCC unroll 2
        for (int u = 0; u < U; u++) {
            if (k + u >= nq)
                break;
            const struct llm_qx16 *b = xq + k + u;
            const __m256i x0 = _mm256_loadu_si256((const __m256i *)b->qs);
            const __m256i x1 = _mm256_loadu_si256((const __m256i *)(b->qs + 16));
            const __m128 xs = zp ? _mm_castsi128_ps(_mm_loadl_epi64((const __m128i *)&b->d))
                                 : _mm_load_ss(&b->d);
            const __m256i init = fam == F_SYM4
                                     ? _mm256_castsi128_si256(_mm_cvtsi32_si128(b->m8))
                                     : _mm256_setzero_si256();
#pragma GCC unroll 4
            for (int i = 0; i < SIMD_NR; i++) {
                __m128 dm;
                __m256i w0, w1;
                SIMD(codes16)(rows[i], k + u, ne0, fam, G, BB, hdr, &dm, &w0, &w1);
                __m128 pr;
                if (zp) {
                    pr = _mm_mul_ps(dm, xs);
                    corr[i][u] = _mm_add_ps(corr[i][u], pr);
                } else {
                    pr = _mm_mul_ss(dm, xs);
                }
#ifdef SIMD_AVX512
                __m256i d = _mm256_dpwssd_epi32(init, w0, x0);
                d = _mm256_dpwssd_epi32(d, w1, x1);
#else
                __m256i d = _mm256_add_epi32(init, _mm256_madd_epi16(w0, x0));
                d = _mm256_add_epi32(d, _mm256_madd_epi16(w1, x1));
#endif
                acc[i][u] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d), _mm256_broadcastss_ps(pr),
                                            acc[i][u]);
            }
        }
    for (int i = 0; i < SIMD_NR; i++) {
        const float c0 = _mm_cvtss_f32(_mm_movehdup_ps(corr[i][0]));
        const float c1 = _mm_cvtss_f32(_mm_movehdup_ps(corr[i][1]));
        *y[i] = SIMD(hsum)(_mm256_add_ps(acc[i][0], acc[i][1])) + (c0 + c1);
    }
}

// ----------------------------------------------------------------------------
// quantized weights, float activations (the default): the 32 codes of a
// block become floats (offset 8 of q4 symmetric removed in the integer
// domain first) and meet x in float FMAs; the block's sum is scaled by d,
// and the min of the zero-point types meets sx = sum of x over the block
// (once per call, shared by every row). Exact up to float rounding, like
// the reference; a block costs a few more instructions than the int8 path,
// which decode, bound by memory bandwidth, does not feel.

/* The 32 codes of block k as bytes in two halves (elements 0-15, 16-31),
 * signed for the symmetric families (q4: c - 8), unsigned for the
 * zero-point ones; scale and min as SIMD(codes). */
SIMD_INLINE void SIMD(codes2)(const uint8_t *row, int64_t k, int64_t ne0, int fam, int G, int BB,
                              int hdr, float *dw, float *mn, __m128i *c0, __m128i *c1)
{
    float d, m = 0.0f;
    if (G == 0) { /* per-row 8-bit: header d (and m), then ne0 codes */
        d = SIMD(ldf)(row);
        if (fam == F_ZP8)
            m = SIMD(ldf)(row + 4);
        const uint8_t *q = row + hdr + 32 * k;
        if (32 * k + 32 <= ne0) {
            *c0 = _mm_loadu_si128((const __m128i *)q);
            *c1 = _mm_loadu_si128((const __m128i *)(q + 16));
        } else { /* no padding in per-row rows: do not read past the row */
            uint8_t tmp[32] = { 0 };
            memcpy(tmp, q, (size_t)(ne0 - 32 * k));
            *c0 = _mm_loadu_si128((const __m128i *)tmp);
            *c1 = _mm_loadu_si128((const __m128i *)(tmp + 16));
        }
    } else {
        const int spb = G / 32, s = (int)(k % spb);
        const uint8_t *blk = row + hdr + (k / spb) * BB;
        if (hdr) { /* _ch: 32-element blocks of bare codes */
            d = SIMD(ldf)(row);
            if (FAM_ZP(fam))
                m = SIMD(ldf)(row + 4);
        } else {
            d = SIMD(ldh)(blk);
            if (FAM_ZP(fam))
                m = SIMD(ldh)(blk + 2);
        }
        if (fam == F_SYM8 || fam == F_ZP8) {
            const uint8_t *q = blk + BB - G + 32 * s;
            *c0 = _mm_loadu_si128((const __m128i *)q);
            *c1 = _mm_loadu_si128((const __m128i *)(q + 16));
        } else if (fam == F_ZP3) {
            const __m256i c = SIMD(q3_codes)(blk + BB - 12 * spb + 12 * s);
            *c0 = _mm256_castsi256_si128(c);
            *c1 = _mm256_extracti128_si256(c, 1);
        } else {
            const __m128i lo4 = _mm_set1_epi8(15);
            const uint8_t *qs = blk + BB - G / 2;
            if (G == 32) {
                __m128i b = _mm_loadu_si128((const __m128i *)qs);
                *c0 = _mm_and_si128(b, lo4);
                *c1 = _mm_and_si128(_mm_srli_epi16(b, 4), lo4);
            } else if (32 * s < G / 2) {
                *c0 = _mm_and_si128(_mm_loadu_si128((const __m128i *)(qs + 32 * s)), lo4);
                *c1 = _mm_and_si128(_mm_loadu_si128((const __m128i *)(qs + 32 * s + 16)), lo4);
            } else {
                const uint8_t *q = qs + 32 * s - G / 2;
                *c0 = _mm_and_si128(_mm_srli_epi16(_mm_loadu_si128((const __m128i *)q), 4), lo4);
                *c1 = _mm_and_si128(_mm_srli_epi16(_mm_loadu_si128((const __m128i *)(q + 16)), 4),
                                    lo4);
            }
            if (fam == F_SYM4) {
                *c0 = _mm_sub_epi8(*c0, _mm_set1_epi8(8));
                *c1 = _mm_sub_epi8(*c1, _mm_set1_epi8(8));
            }
        }
    }
    *dw = d;
    *mn = m;
}

/* two halves of 16 byte codes -> SIMD_NV float vectors in element order */
SIMD_INLINE void SIMD(codes_to_f)(__m128i c0, __m128i c1, int sgn, SIMD(fv) *f)
{
#ifdef SIMD_AVX512
    if (sgn) {
        f[0] = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(c0));
        f[1] = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(c1));
    } else {
        f[0] = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(c0));
        f[1] = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(c1));
    }
#else
    const __m128i p[4] = { c0, _mm_srli_si128(c0, 8), c1, _mm_srli_si128(c1, 8) };
    for (int v = 0; v < 4; v++)
        f[v] = _mm256_cvtepi32_ps(sgn ? _mm256_cvtepi8_epi32(p[v]) : _mm256_cvtepu8_epi32(p[v]));
#endif
}

/* y[t] = row . X[t] for NT tokens of ne0 floats, ldx apart; sx (NT, nq) */
SIMD_INLINE void SIMD(row_qf)(const uint8_t *row, const float *X, int64_t ldx, const float *sx,
                              int64_t nq, int64_t ne0, int fam, int G, int BB, int hdr, int NT,
                              float *y)
{
    enum { U = 2 };
    SIMD(fv) acc[SIMD_NT][U];
    float corr[SIMD_NT][U];
    const int zp = FAM_ZP(fam);
    for (int t = 0; t < NT; t++)
        for (int u = 0; u < U; u++) {
            acc[t][u] = SIMD(fzero)();
            corr[t][u] = 0.0f;
        }
    /* full blocks; a partial last block goes through a zero-padded x */
    const int64_t nfull = ne0 / 32;
    int64_t k = 0;
    for (; k < nq; k += U)
#pragma GCC unroll 2
        for (int u = 0; u < U; u++) {
            const int64_t kk = k + u;
            if (kk >= nq)
                break;
            float dw, m;
            __m128i c0, c1;
            SIMD(codes2)(row, kk, ne0, fam, G, BB, hdr, &dw, &m, &c0, &c1);
            SIMD(fv) f[SIMD_NV];
            SIMD(codes_to_f)(c0, c1, fam == F_SYM8 || fam == F_SYM4, f);
            float pad[SIMD_NT][32];
#pragma GCC unroll 4
            for (int t = 0; t < NT; t++) {
                const float *xb = X + t * ldx + 32 * kk;
                if (kk >= nfull) {
                    memset(pad[t], 0, sizeof pad[t]);
                    memcpy(pad[t], xb, (size_t)(ne0 - 32 * kk) * sizeof(float));
                    xb = pad[t];
                }
                SIMD(fv) b = SIMD(fzero)();
#pragma GCC unroll 4
                for (int v = 0; v < SIMD_NV; v++)
                    b = SIMD(fma)(f[v], SIMD(fload)(xb + v * (32 / SIMD_NV)), b);
#ifdef SIMD_AVX512
                acc[t][u] = _mm512_fmadd_ps(b, _mm512_set1_ps(dw), acc[t][u]);
#else
                acc[t][u] = _mm256_fmadd_ps(b, _mm256_set1_ps(dw), acc[t][u]);
#endif
                if (zp)
                    corr[t][u] += m * sx[t * nq + kk];
            }
        }
    for (int t = 0; t < NT; t++)
        y[t] = SIMD(fsum)(acc[t][0]) + SIMD(fsum)(acc[t][1]) + (corr[t][0] + corr[t][1]);
}

// ----------------------------------------------------------------------------
// float weights

SIMD_INLINE __m256 SIMD(ldw)(const uint8_t *row, int64_t i, int ft)
{
    if (ft == LLM_TYPE_F32)
        return _mm256_loadu_ps((const float *)(row + 4 * i));
    __m128i h = _mm_loadu_si128((const __m128i *)(row + 2 * i));
    if (ft == LLM_TYPE_F16)
        return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

SIMD_INLINE float SIMD(ldw1)(const uint8_t *row, int64_t i, int ft)
{
    if (ft == LLM_TYPE_F32)
        return SIMD(ldf)(row + 4 * i);
    uint16_t h;
    memcpy(&h, row + 2 * i, 2);
    if (ft == LLM_TYPE_F16)
        return _cvtsh_ss(h);
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* y[t] = row . X[t] for NT tokens of ne0 floats, ldx apart */
SIMD_INLINE void SIMD(row_f)(const uint8_t *row, const float *X, int64_t ldx, int64_t ne0, int ft,
                             int NT, float *y)
{
#ifdef SIMD_AVX512
    if (ft == LLM_TYPE_F32) { /* 64 bytes a load, the tail masked: half the instructions */
        __m512 a[SIMD_NT][2];
        for (int t = 0; t < NT; t++)
            a[t][0] = a[t][1] = _mm512_setzero_ps();
        const float *w = (const float *)row;
        int64_t i = 0;
        for (; i + 32 <= ne0; i += 32) {
            const __m512 w0 = _mm512_loadu_ps(w + i), w1 = _mm512_loadu_ps(w + i + 16);
#pragma GCC unroll 4
            for (int t = 0; t < NT; t++) {
                a[t][0] = _mm512_fmadd_ps(w0, _mm512_loadu_ps(X + t * ldx + i), a[t][0]);
                a[t][1] = _mm512_fmadd_ps(w1, _mm512_loadu_ps(X + t * ldx + i + 16), a[t][1]);
            }
        }
        for (; i < ne0; i += 16) {
            const __mmask16 m = ne0 - i >= 16 ? (__mmask16)0xffff
                                              : (__mmask16)((1u << (ne0 - i)) - 1);
            const __m512 w0 = _mm512_maskz_loadu_ps(m, w + i);
#pragma GCC unroll 4
            for (int t = 0; t < NT; t++)
                a[t][0] = _mm512_fmadd_ps(w0, _mm512_maskz_loadu_ps(m, X + t * ldx + i), a[t][0]);
        }
        for (int t = 0; t < NT; t++)
            y[t] = _mm512_reduce_add_ps(_mm512_add_ps(a[t][0], a[t][1]));
        return;
    }
#endif
    __m256 acc[SIMD_NT][2];
    for (int t = 0; t < NT; t++)
        acc[t][0] = acc[t][1] = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= ne0; i += 16) {
        __m256 w0 = SIMD(ldw)(row, i, ft), w1 = SIMD(ldw)(row, i + 8, ft);
#pragma GCC unroll 4
        for (int t = 0; t < NT; t++) {
            acc[t][0] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(X + t * ldx + i), acc[t][0]);
            acc[t][1] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(X + t * ldx + i + 8), acc[t][1]);
        }
    }
    for (; i + 8 <= ne0; i += 8) {
        __m256 w0 = SIMD(ldw)(row, i, ft);
#pragma GCC unroll 4
        for (int t = 0; t < NT; t++)
            acc[t][0] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(X + t * ldx + i), acc[t][0]);
    }
    for (int t = 0; t < NT; t++) {
        float s = SIMD(hsum)(_mm256_add_ps(acc[t][0], acc[t][1]));
        for (int64_t j = i; j < ne0; j++)
            s += SIMD(ldw1)(row, j, ft) * X[t * ldx + j];
        y[t] = s;
    }
}

// ----------------------------------------------------------------------------
// NF4: the code book is looked up in registers (two 8-entry permutes and a
// blend on bit 3 of the code) and multiplied in float with float x, so the
// result is the reference's up to float rounding

/* y[t] = row . X[t] for NT tokens; dq: nf4_dq (fp8 block scale times the
 * row header scale) instead of nf4 (fp16 block scale) */
SIMD_INLINE void SIMD(row_nf4)(const uint8_t *row, const float *X, int64_t ldx, int64_t ne0,
                               int dq, int NT, const float *fp8, float *y)
{
    static const float book[16] = LLM_NF4_VALUES;
    const __m256 tlo = _mm256_loadu_ps(book), thi = _mm256_loadu_ps(book + 8);
    const __m256i lo4 = _mm256_set1_epi8(15);
    const int BB = dq ? 33 : 34, hdr = dq ? 4 : 0;
    const float r = dq ? SIMD(ldf)(row) : 0.0f;
    __m256 acc[SIMD_NT];
    for (int t = 0; t < NT; t++)
        acc[t] = _mm256_setzero_ps();
    for (int64_t e0 = 0; e0 < ne0; e0 += 64) {
        const uint8_t *blk = row + hdr + (e0 / 64) * BB;
        const float d = dq ? fp8[blk[0]] * r : SIMD(ldh)(blk);
        const __m256i q = _mm256_loadu_si256((const __m256i *)(blk + BB - 32));
        uint8_t codes[64];
        _mm256_storeu_si256((__m256i *)codes, _mm256_and_si256(q, lo4));
        _mm256_storeu_si256((__m256i *)(codes + 32),
                            _mm256_and_si256(_mm256_srli_epi16(q, 4), lo4));
        const float *xb[SIMD_NT];
        float pad[SIMD_NT][64];
        for (int t = 0; t < NT; t++) {
            xb[t] = X + t * ldx + e0;
            if (e0 + 64 > ne0) { /* the padding of the last block meets x = 0 */
                memset(pad[t], 0, sizeof pad[t]);
                memcpy(pad[t], xb[t], (size_t)(ne0 - e0) * sizeof(float));
                xb[t] = pad[t];
            }
        }
        /* two chains per token: one FMA chain would be latency-bound */
        __m256 bacc[SIMD_NT][2];
        for (int t = 0; t < NT; t++)
            bacc[t][0] = bacc[t][1] = _mm256_setzero_ps();
#pragma GCC unroll 8
        for (int g = 0; g < 8; g++) {
            __m128i c8 = _mm_loadl_epi64((const __m128i *)(codes + 8 * g));
            __m256i idx = _mm256_cvtepu8_epi32(c8);
            __m256 v = _mm256_blendv_ps(_mm256_permutevar8x32_ps(tlo, idx),
                                        _mm256_permutevar8x32_ps(thi, idx),
                                        _mm256_castsi256_ps(_mm256_slli_epi32(idx, 28)));
#pragma GCC unroll 4
            for (int t = 0; t < NT; t++)
                bacc[t][g & 1] = _mm256_fmadd_ps(v, _mm256_loadu_ps(xb[t] + 8 * g), bacc[t][g & 1]);
        }
        const __m256 vd = _mm256_set1_ps(d);
#pragma GCC unroll 4
        for (int t = 0; t < NT; t++)
            acc[t] = _mm256_fmadd_ps(_mm256_add_ps(bacc[t][0], bacc[t][1]), vd, acc[t]);
    }
    for (int t = 0; t < NT; t++)
        y[t] = SIMD(hsum)(acc[t]);
}

// ----------------------------------------------------------------------------
// FP8 E4M3: (v & 0x7f) << 7 is a binary16 whose value is 2^-8 times the
// E4M3 magnitude, subnormals included (both formats have 3 bits of mantissa
// below the exponent field), so F16C converts 8 codes at once; 2^8 and the
// row scale are applied once per row. The NaN codes (0x7f, 0xff) would
// read as 480: they are detected and make the result NaN, as in the
// reference.

SIMD_INLINE __m256i SIMD(fp8_as_h)(__m128i b16)
{
    __m256i v = _mm256_cvtepu8_epi16(b16);
    __m256i mag = _mm256_slli_epi16(_mm256_and_si256(v, _mm256_set1_epi16(0x7f)), 7);
    __m256i sgn = _mm256_slli_epi16(_mm256_and_si256(v, _mm256_set1_epi16(0x80)), 8);
    return _mm256_or_si256(mag, sgn);
}

SIMD_INLINE void SIMD(row_fp8)(const uint8_t *row, const float *X, int64_t ldx, int64_t ne0,
                               int NT, float *y)
{
    const uint8_t *q = row + 4;
    __m256 acc[SIMD_NT][2];
    for (int t = 0; t < NT; t++)
        acc[t][0] = acc[t][1] = _mm256_setzero_ps();
    __m128i nan = _mm_setzero_si128();
    const __m128i m7f = _mm_set1_epi8(0x7f);
    int64_t i = 0;
    for (; i + 16 <= ne0; i += 16) {
        __m128i b = _mm_loadu_si128((const __m128i *)(q + i));
        nan = _mm_or_si128(nan, _mm_cmpeq_epi8(_mm_and_si128(b, m7f), m7f));
        __m256i h = SIMD(fp8_as_h)(b);
        __m256 w0 = _mm256_cvtph_ps(_mm256_castsi256_si128(h));
        __m256 w1 = _mm256_cvtph_ps(_mm256_extracti128_si256(h, 1));
#pragma GCC unroll 4
        for (int t = 0; t < NT; t++) {
            acc[t][0] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(X + t * ldx + i), acc[t][0]);
            acc[t][1] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(X + t * ldx + i + 8), acc[t][1]);
        }
    }
    const float *fp8 = llm_matmul_fp8_table();
    const float r = SIMD(ldf)(row);
    const int has_nan = !_mm_testz_si128(nan, nan);
    for (int t = 0; t < NT; t++) {
        float s = SIMD(hsum)(_mm256_add_ps(acc[t][0], acc[t][1])) * 256.0f;
        for (int64_t j = i; j < ne0; j++)
            s += fp8[q[j]] * X[t * ldx + j];
        y[t] = has_nan ? NAN : s * r;
    }
}

// ----------------------------------------------------------------------------
// row loops, specialised per type so that the inner loops see constants

struct SIMD(shape) {
    int fam, G, BB, hdr;
};

static int SIMD(shape_of)(enum llm_type t, struct SIMD(shape) *s)
{
    switch (t) {
    case LLM_TYPE_Q8_0: *s = (struct SIMD(shape)){ F_SYM8, 32, 34, 0 }; return 1;
    case LLM_TYPE_Q8_G64: *s = (struct SIMD(shape)){ F_SYM8, 64, 66, 0 }; return 1;
    case LLM_TYPE_Q8_G128: *s = (struct SIMD(shape)){ F_SYM8, 128, 130, 0 }; return 1;
    case LLM_TYPE_Q8_CH: *s = (struct SIMD(shape)){ F_SYM8, 0, 1, 4 }; return 1;
    case LLM_TYPE_Q8Z_G32: *s = (struct SIMD(shape)){ F_ZP8, 32, 36, 0 }; return 1;
    case LLM_TYPE_Q8Z_G64: *s = (struct SIMD(shape)){ F_ZP8, 64, 68, 0 }; return 1;
    case LLM_TYPE_Q8Z_G128: *s = (struct SIMD(shape)){ F_ZP8, 128, 132, 0 }; return 1;
    case LLM_TYPE_Q8Z_CH: *s = (struct SIMD(shape)){ F_ZP8, 0, 1, 8 }; return 1;
    case LLM_TYPE_Q4_0: *s = (struct SIMD(shape)){ F_SYM4, 32, 18, 0 }; return 1;
    case LLM_TYPE_Q4_G64: *s = (struct SIMD(shape)){ F_SYM4, 64, 34, 0 }; return 1;
    case LLM_TYPE_Q4_G128: *s = (struct SIMD(shape)){ F_SYM4, 128, 66, 0 }; return 1;
    case LLM_TYPE_Q4_CH: *s = (struct SIMD(shape)){ F_SYM4, 32, 16, 4 }; return 1;
    case LLM_TYPE_Q4_1: *s = (struct SIMD(shape)){ F_ZP4, 32, 20, 0 }; return 1;
    case LLM_TYPE_Q4Z_G64: *s = (struct SIMD(shape)){ F_ZP4, 64, 36, 0 }; return 1;
    case LLM_TYPE_Q4Z_G128: *s = (struct SIMD(shape)){ F_ZP4, 128, 68, 0 }; return 1;
    case LLM_TYPE_Q4Z_CH: *s = (struct SIMD(shape)){ F_ZP4, 32, 16, 8 }; return 1;
    case LLM_TYPE_Q3Z_G32: *s = (struct SIMD(shape)){ F_ZP3, 32, 16, 0 }; return 1;
    case LLM_TYPE_Q3Z_G64: *s = (struct SIMD(shape)){ F_ZP3, 64, 28, 0 }; return 1;
    case LLM_TYPE_Q3Z_G128: *s = (struct SIMD(shape)){ F_ZP3, 128, 52, 0 }; return 1;
    case LLM_TYPE_Q3Z_CH: *s = (struct SIMD(shape)){ F_ZP3, 32, 12, 8 }; return 1;
    default: return 0;
    }
}

/* Y[b*ldy + r] for tokens b in [0, nb), rows [r0, r1); xq (nb, nq) */
#define SIMD_ROWS_Q(FAM, G, BB, HDR)                                                            \
    SIMD_ROWS_DECODE(SIMD(rown_q), FAM, G, BB, HDR)                                             \
    for (int64_t r = r0; r < r1; r++) {                                                         \
        const uint8_t *row = w + (uint64_t)r * rb;                                              \
        int64_t b = 0;                                                                          \
        float out[SIMD_NT];                                                                     \
        for (; b + SIMD_NT <= nb; b += SIMD_NT) {                                               \
            SIMD(row_q)(row, xq + b * nq, nq, ne0, FAM, G, BB, HDR, SIMD_NT, out);              \
            for (int j = 0; j < SIMD_NT; j++)                                                   \
                Y[(b + j) * ldy + r] = out[j];                                                  \
        }                                                                                       \
        for (; b < nb; b++) {                                                                   \
            SIMD(row_q)(row, xq + b * nq, nq, ne0, FAM, G, BB, HDR, 1, out);                    \
            Y[b * ldy + r] = out[0];                                                            \
        }                                                                                       \
    }

static void SIMD(rows_q)(enum llm_type t, const uint8_t *w, uint64_t rb, const struct llm_qx *xq,
                         int64_t nq, int64_t ne0, float *Y, int64_t nb, int64_t ldy, int64_t r0,
                         int64_t r1)
{
    switch (t) {
    case LLM_TYPE_Q8_0: SIMD_ROWS_Q(F_SYM8, 32, 34, 0) break;
    case LLM_TYPE_Q8_G64: SIMD_ROWS_Q(F_SYM8, 64, 66, 0) break;
    case LLM_TYPE_Q8_G128: SIMD_ROWS_Q(F_SYM8, 128, 130, 0) break;
    case LLM_TYPE_Q8_CH: SIMD_ROWS_Q(F_SYM8, 0, 1, 4) break;
    case LLM_TYPE_Q8Z_G32: SIMD_ROWS_Q(F_ZP8, 32, 36, 0) break;
    case LLM_TYPE_Q8Z_G64: SIMD_ROWS_Q(F_ZP8, 64, 68, 0) break;
    case LLM_TYPE_Q8Z_G128: SIMD_ROWS_Q(F_ZP8, 128, 132, 0) break;
    case LLM_TYPE_Q8Z_CH: SIMD_ROWS_Q(F_ZP8, 0, 1, 8) break;
    case LLM_TYPE_Q4_0: SIMD_ROWS_Q(F_SYM4, 32, 18, 0) break;
    case LLM_TYPE_Q4_G64: SIMD_ROWS_Q(F_SYM4, 64, 34, 0) break;
    case LLM_TYPE_Q4_G128: SIMD_ROWS_Q(F_SYM4, 128, 66, 0) break;
    case LLM_TYPE_Q4_CH: SIMD_ROWS_Q(F_SYM4, 32, 16, 4) break;
    case LLM_TYPE_Q4_1: SIMD_ROWS_Q(F_ZP4, 32, 20, 0) break;
    case LLM_TYPE_Q4Z_G64: SIMD_ROWS_Q(F_ZP4, 64, 36, 0) break;
    case LLM_TYPE_Q4Z_G128: SIMD_ROWS_Q(F_ZP4, 128, 68, 0) break;
    case LLM_TYPE_Q4Z_CH: SIMD_ROWS_Q(F_ZP4, 32, 16, 8) break;
    case LLM_TYPE_Q3Z_G32: SIMD_ROWS_Q(F_ZP3, 32, 16, 0) break;
    case LLM_TYPE_Q3Z_G64: SIMD_ROWS_Q(F_ZP3, 64, 28, 0) break;
    case LLM_TYPE_Q3Z_G128: SIMD_ROWS_Q(F_ZP3, 128, 52, 0) break;
    case LLM_TYPE_Q3Z_CH: SIMD_ROWS_Q(F_ZP3, 32, 12, 8) break;
    default: break;
    }
}

/* Y[b*ldy + r] for tokens b in [0, nb), rows [r0, r1); X (nb, ne0), sx (nb, nq) */
#define SIMD_ROWS_QF(FAM, G, BB, HDR)                                                           \
    for (int64_t r = r0; r < r1; r++) {                                                         \
        const uint8_t *row = w + (uint64_t)r * rb;                                              \
        int64_t b = 0;                                                                          \
        float out[SIMD_NT];                                                                     \
        for (; b + SIMD_NT <= nb; b += SIMD_NT) {                                               \
            SIMD(row_qf)(row, X + b * ne0, ne0, sx + b * nq, nq, ne0, FAM, G, BB, HDR, SIMD_NT, \
                         out);                                                                  \
            for (int j = 0; j < SIMD_NT; j++)                                                   \
                Y[(b + j) * ldy + r] = out[j];                                                  \
        }                                                                                       \
        for (; b < nb; b++) {                                                                   \
            SIMD(row_qf)(row, X + b * ne0, ne0, sx + b * nq, nq, ne0, FAM, G, BB, HDR, 1, out); \
            Y[b * ldy + r] = out[0];                                                            \
        }                                                                                       \
    }

static void SIMD(rows_qf)(enum llm_type t, const uint8_t *w, uint64_t rb, const float *X,
                          const float *sx, int64_t nq, int64_t ne0, float *Y, int64_t nb,
                          int64_t ldy, int64_t r0, int64_t r1)
{
    switch (t) {
    case LLM_TYPE_Q8_0: SIMD_ROWS_QF(F_SYM8, 32, 34, 0) break;
    case LLM_TYPE_Q8_G64: SIMD_ROWS_QF(F_SYM8, 64, 66, 0) break;
    case LLM_TYPE_Q8_G128: SIMD_ROWS_QF(F_SYM8, 128, 130, 0) break;
    case LLM_TYPE_Q8_CH: SIMD_ROWS_QF(F_SYM8, 0, 1, 4) break;
    case LLM_TYPE_Q8Z_G32: SIMD_ROWS_QF(F_ZP8, 32, 36, 0) break;
    case LLM_TYPE_Q8Z_G64: SIMD_ROWS_QF(F_ZP8, 64, 68, 0) break;
    case LLM_TYPE_Q8Z_G128: SIMD_ROWS_QF(F_ZP8, 128, 132, 0) break;
    case LLM_TYPE_Q8Z_CH: SIMD_ROWS_QF(F_ZP8, 0, 1, 8) break;
    case LLM_TYPE_Q4_0: SIMD_ROWS_QF(F_SYM4, 32, 18, 0) break;
    case LLM_TYPE_Q4_G64: SIMD_ROWS_QF(F_SYM4, 64, 34, 0) break;
    case LLM_TYPE_Q4_G128: SIMD_ROWS_QF(F_SYM4, 128, 66, 0) break;
    case LLM_TYPE_Q4_CH: SIMD_ROWS_QF(F_SYM4, 32, 16, 4) break;
    case LLM_TYPE_Q4_1: SIMD_ROWS_QF(F_ZP4, 32, 20, 0) break;
    case LLM_TYPE_Q4Z_G64: SIMD_ROWS_QF(F_ZP4, 64, 36, 0) break;
    case LLM_TYPE_Q4Z_G128: SIMD_ROWS_QF(F_ZP4, 128, 68, 0) break;
    case LLM_TYPE_Q4Z_CH: SIMD_ROWS_QF(F_ZP4, 32, 16, 8) break;
    case LLM_TYPE_Q3Z_G32: SIMD_ROWS_QF(F_ZP3, 32, 16, 0) break;
    case LLM_TYPE_Q3Z_G64: SIMD_ROWS_QF(F_ZP3, 64, 28, 0) break;
    case LLM_TYPE_Q3Z_G128: SIMD_ROWS_QF(F_ZP3, 128, 52, 0) break;
    case LLM_TYPE_Q3Z_CH: SIMD_ROWS_QF(F_ZP3, 32, 12, 8) break;
    default: break;
    }
}

#define SIMD_ROWS_Q16(FAM, G, BB, HDR)                                                          \
    SIMD_ROWS_DECODE(SIMD(rown_q16), FAM, G, BB, HDR)                                           \
    for (int64_t r = r0; r < r1; r++) {                                                         \
        const uint8_t *row = w + (uint64_t)r * rb;                                              \
        int64_t b = 0;                                                                          \
        float out[SIMD_NT];                                                                     \
        for (; b + SIMD_NT <= nb; b += SIMD_NT) {                                               \
            SIMD(row_q16)(row, xq + b * nq, nq, ne0, FAM, G, BB, HDR, SIMD_NT, out);            \
            for (int j = 0; j < SIMD_NT; j++)                                                   \
                Y[(b + j) * ldy + r] = out[j];                                                  \
        }                                                                                       \
        for (; b < nb; b++) {                                                                   \
            SIMD(row_q16)(row, xq + b * nq, nq, ne0, FAM, G, BB, HDR, 1, out);                  \
            Y[b * ldy + r] = out[0];                                                            \
        }                                                                                       \
    }

static void SIMD(rows_q16)(enum llm_type t, const uint8_t *w, uint64_t rb,
                           const struct llm_qx16 *xq, int64_t nq, int64_t ne0, float *Y, int64_t nb,
                           int64_t ldy, int64_t r0, int64_t r1)
{
    switch (t) {
    case LLM_TYPE_Q8_0: SIMD_ROWS_Q16(F_SYM8, 32, 34, 0) break;
    case LLM_TYPE_Q8_G64: SIMD_ROWS_Q16(F_SYM8, 64, 66, 0) break;
    case LLM_TYPE_Q8_G128: SIMD_ROWS_Q16(F_SYM8, 128, 130, 0) break;
    case LLM_TYPE_Q8_CH: SIMD_ROWS_Q16(F_SYM8, 0, 1, 4) break;
    case LLM_TYPE_Q8Z_G32: SIMD_ROWS_Q16(F_ZP8, 32, 36, 0) break;
    case LLM_TYPE_Q8Z_G64: SIMD_ROWS_Q16(F_ZP8, 64, 68, 0) break;
    case LLM_TYPE_Q8Z_G128: SIMD_ROWS_Q16(F_ZP8, 128, 132, 0) break;
    case LLM_TYPE_Q8Z_CH: SIMD_ROWS_Q16(F_ZP8, 0, 1, 8) break;
    case LLM_TYPE_Q4_0: SIMD_ROWS_Q16(F_SYM4, 32, 18, 0) break;
    case LLM_TYPE_Q4_G64: SIMD_ROWS_Q16(F_SYM4, 64, 34, 0) break;
    case LLM_TYPE_Q4_G128: SIMD_ROWS_Q16(F_SYM4, 128, 66, 0) break;
    case LLM_TYPE_Q4_CH: SIMD_ROWS_Q16(F_SYM4, 32, 16, 4) break;
    case LLM_TYPE_Q4_1: SIMD_ROWS_Q16(F_ZP4, 32, 20, 0) break;
    case LLM_TYPE_Q4Z_G64: SIMD_ROWS_Q16(F_ZP4, 64, 36, 0) break;
    case LLM_TYPE_Q4Z_G128: SIMD_ROWS_Q16(F_ZP4, 128, 68, 0) break;
    case LLM_TYPE_Q4Z_CH: SIMD_ROWS_Q16(F_ZP4, 32, 16, 8) break;
    case LLM_TYPE_Q3Z_G32: SIMD_ROWS_Q16(F_ZP3, 32, 16, 0) break;
    case LLM_TYPE_Q3Z_G64: SIMD_ROWS_Q16(F_ZP3, 64, 28, 0) break;
    case LLM_TYPE_Q3Z_G128: SIMD_ROWS_Q16(F_ZP3, 128, 52, 0) break;
    case LLM_TYPE_Q3Z_CH: SIMD_ROWS_Q16(F_ZP3, 32, 12, 8) break;
    default: break;
    }
}

#define SIMD_ROWS_F(KERN)                                                                        \
    for (int64_t r = r0; r < r1; r++) {                                                         \
        const uint8_t *row = w + (uint64_t)r * rb;                                              \
        int64_t b = 0;                                                                          \
        float out[SIMD_NT];                                                                     \
        for (; b + SIMD_NT <= nb; b += SIMD_NT) {                                               \
            KERN(row, X + b * ne0, SIMD_NT, out);                                               \
            for (int j = 0; j < SIMD_NT; j++)                                                   \
                Y[(b + j) * ldy + r] = out[j];                                                  \
        }                                                                                       \
        for (; b < nb; b++) {                                                                   \
            KERN(row, X + b * ne0, 1, out);                                                     \
            Y[b * ldy + r] = out[0];                                                            \
        }                                                                                       \
    }

static void SIMD(rows_f)(enum llm_type t, const uint8_t *w, uint64_t rb, const float *X,
                         int64_t ne0, float *Y, int64_t nb, int64_t ldy, int64_t r0, int64_t r1)
{
    const float *fp8 = llm_matmul_fp8_table();
#define K_F32_(row, x, nt, out) SIMD(row_f)(row, x, ne0, ne0, LLM_TYPE_F32, nt, out)
#define K_F16_(row, x, nt, out) SIMD(row_f)(row, x, ne0, ne0, LLM_TYPE_F16, nt, out)
#define K_BF16_(row, x, nt, out) SIMD(row_f)(row, x, ne0, ne0, LLM_TYPE_BF16, nt, out)
#define K_NF4_(row, x, nt, out) SIMD(row_nf4)(row, x, ne0, ne0, 0, nt, fp8, out)
#define K_NF4DQ_(row, x, nt, out) SIMD(row_nf4)(row, x, ne0, ne0, 1, nt, fp8, out)
#define K_FP8_(row, x, nt, out) SIMD(row_fp8)(row, x, ne0, ne0, nt, out)
    switch (t) {
    case LLM_TYPE_F32: SIMD_ROWS_F(K_F32_) break;
    case LLM_TYPE_F16: SIMD_ROWS_F(K_F16_) break;
    case LLM_TYPE_BF16: SIMD_ROWS_F(K_BF16_) break;
    case LLM_TYPE_NF4: SIMD_ROWS_F(K_NF4_) break;
    case LLM_TYPE_NF4_DQ: SIMD_ROWS_F(K_NF4DQ_) break;
    case LLM_TYPE_FP8_E4M3: SIMD_ROWS_F(K_FP8_) break;
    default: break;
    }
#undef K_F32_
#undef K_F16_
#undef K_BF16_
#undef K_NF4_
#undef K_NF4DQ_
#undef K_FP8_
}

// ----------------------------------------------------------------------------
// decode on interleaved 4-bit rows (matmul.h's x16 layout): lane r of
// the int32 sums is row r of the group; each vpdpwssd (AVX2: madd, two
// halves of 8 rows) adds a pair of elements of all 16 rows, the pair of
// int16 activations broadcast, so a block of 16 rows ends in one exact
// int32 sum per lane and per 32-element activation block, one conversion
// and one FMA with the 16 scales (one load), and nothing is summed across
// lanes.

/* Code bytes 32u .. 32u+31 of a block of 16 rows (unit u of each row) as
 * int16 lanes: (lo) the low nibbles, (hi) the high ones (AVX2: rows 0-7
 * from bytes 0-15, rows 8-15 from bytes 16-31). */
#ifdef SIMD_AVX512
typedef __m512i SIMD(x16v);
#define X16_H 1
SIMD_INLINE void SIMD(x16_codes)(const uint8_t *c, __m512i *lo, __m512i *hi)
{
    const __m512i v = _mm512_cvtepu8_epi16(_mm256_loadu_si256((const __m256i *)c));
    *lo = _mm512_and_si512(v, _mm512_set1_epi16(15));
    *hi = _mm512_srli_epi16(v, 4);
}
#else
typedef __m256i SIMD(x16v);
#define X16_H 2
SIMD_INLINE void SIMD(x16_codes)(const uint8_t *c, __m256i lo[2], __m256i hi[2])
{
    for (int h = 0; h < 2; h++) {
        const __m256i v = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(c + 16 * h)));
        lo[h] = _mm256_and_si256(v, _mm256_set1_epi16(15));
        hi[h] = _mm256_srli_epi16(v, 4);
    }
}
#endif

/* One group of 16 rows: y (16) = the rows . x, x as ng * G/32 blocks xq.
 * G (32, 64 or 128 elements a scale) and zp are constants at each call
 * (SIMD(llm_matvec_x16)), so the unit loop unrolls. Unit u of a group:
 * low nibbles = elements 2u, 2u+1, high nibbles = elements 2u + G/2 and
 * the next; element e meets activation block e/32, offset e%32. Each
 * activation block keeps two sum chains (by unit parity; G = 32, whose
 * low and high nibbles share one block, four), because one chain would
 * wait on vpdpwssd's latency. Per activation block, the int16 GEMM's
 * order of float operations, so that its tokens are decode's bit for bit. */
SIMD_INLINE void SIMD(x16_group)(const uint8_t *gp, const struct llm_qx16 *xq, int64_t ng,
                                 int zp, int G, int BB, float *y)
{
    enum { NC = 8 };    /* chains: 2 per activation block, at most 4 blocks */
    const int nsub = G / 32, hc = G == 32 ? 2 : 0; /* hc: the high nibbles' own chains */
    const uint64_t bb = 16 * (uint64_t)BB;
#ifdef SIMD_AVX512
    __m512 acc[1] = { _mm512_setzero_ps() };
#else
    __m256 acc[2] = { _mm256_setzero_ps(), _mm256_setzero_ps() };
#endif
    for (int64_t k = 0; k < ng; k++) {
        const uint8_t *blk = gp + (uint64_t)k * bb, *cq = blk + (zp ? 64 : 32);
        const struct llm_qx16 *b = xq + k * nsub;
        /* chain 2j (+ hc) of block j starts at its -8 sum(q) (symmetric types) */
        SIMD(x16v) s[X16_H][NC];
        for (int h = 0; h < X16_H; h++)
            for (int j = 0; j < NC / 2; j++) {
#ifdef SIMD_AVX512
                s[h][2 * j] = !zp && j < nsub ? _mm512_set1_epi32(b[j].m8) : _mm512_setzero_si512();
                s[h][2 * j + 1] = _mm512_setzero_si512();
#else
                s[h][2 * j] = !zp && j < nsub ? _mm256_set1_epi32(b[j].m8) : _mm256_setzero_si256();
                s[h][2 * j + 1] = _mm256_setzero_si256();
#endif
            }
#pragma GCC unroll 32
        for (int u = 0; u < G / 4; u++) {
            SIMD(x16v) lo[X16_H], hi[X16_H];
            SIMD(x16_codes)(cq + 32 * u, lo, hi);
            const int el = 2 * u, eh = 2 * u + G / 2;
            const int cl = 2 * (el / 32) + (u & 1), ch = 2 * (eh / 32) + hc + (u & 1);
            int32_t pl, ph;
            memcpy(&pl, b[el / 32].qs + el % 32, 4);
            memcpy(&ph, b[eh / 32].qs + eh % 32, 4);
            for (int h = 0; h < X16_H; h++) {
#ifdef SIMD_AVX512
                s[h][cl] = _mm512_dpwssd_epi32(s[h][cl], lo[h], _mm512_set1_epi32(pl));
                s[h][ch] = _mm512_dpwssd_epi32(s[h][ch], hi[h], _mm512_set1_epi32(ph));
#else
                s[h][cl] =
                    _mm256_add_epi32(s[h][cl], _mm256_madd_epi16(lo[h], _mm256_set1_epi32(pl)));
                s[h][ch] =
                    _mm256_add_epi32(s[h][ch], _mm256_madd_epi16(hi[h], _mm256_set1_epi32(ph)));
#endif
            }
        }
        for (int h = 0; h < X16_H; h++) {
            /* block j's sum: its chains (G = 32: all four) */
#ifdef SIMD_AVX512
            const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)blk));
            const __m512 m = zp ? _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(blk + 32)))
                                : _mm512_setzero_ps();
            for (int j = 0; j < nsub; j++) {
                __m512i is = _mm512_add_epi32(s[h][2 * j], s[h][2 * j + 1]);
                if (hc)
                    is = _mm512_add_epi32(is, _mm512_add_epi32(s[h][2], s[h][3]));
                acc[h] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(is),
                                         _mm512_mul_ps(d, _mm512_set1_ps(b[j].d)), acc[h]);
                if (zp)
                    acc[h] = _mm512_fmadd_ps(m, _mm512_set1_ps(b[j].ds), acc[h]);
            }
#else
            const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(blk + 16 * h)));
            const __m256 m =
                zp ? _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(blk + 32 + 16 * h)))
                   : _mm256_setzero_ps();
            for (int j = 0; j < nsub; j++) {
                __m256i is = _mm256_add_epi32(s[h][2 * j], s[h][2 * j + 1]);
                if (hc)
                    is = _mm256_add_epi32(is, _mm256_add_epi32(s[h][2], s[h][3]));
                acc[h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is),
                                         _mm256_mul_ps(d, _mm256_set1_ps(b[j].d)), acc[h]);
                if (zp)
                    acc[h] = _mm256_fmadd_ps(m, _mm256_set1_ps(b[j].ds), acc[h]);
            }
#endif
        }
    }
#ifdef SIMD_AVX512
    _mm512_storeu_ps(y, acc[0]);
#else
    _mm256_storeu_ps(y, acc[0]);
    _mm256_storeu_ps(y + 8, acc[1]);
#endif
}

/* Q2_K's minimums of a block for 16 rows (AVX2: 8), after its scale:
 * acc + (m0 s0 + m1 s1) (-dmin d_x), with m0, m1 the rows' integer
 * minimums of the two halves (as floats), s0, s1 the token's sums of qs
 * over them. m0 s0 + m1 s1 is exact in float: integers below 2^24 (m <=
 * 15, |s| <= 16 * 32767), so only the last FMA rounds. The int16 GEMM
 * (matmul_gemm.h), its decode and the interleaved group kernel all take
 * this step, so their bits agree. */
#ifdef SIMD_AVX512
SIMD_INLINE __m512 SIMD(q2min)(__m512 acc, __m512 m0, __m512 m1, __m512 dm, const struct llm_qx16 *b)
{
    const __m512 t = _mm512_fmadd_ps(m1, _mm512_set1_ps((float)llm_qx16_h1(b)),
                                     _mm512_mul_ps(m0, _mm512_set1_ps((float)b->h0)));
    return _mm512_fmadd_ps(t, _mm512_mul_ps(dm, _mm512_set1_ps(b->d)), acc);
}
#else
SIMD_INLINE __m256 SIMD(q2min)(__m256 acc, __m256 m0, __m256 m1, __m256 dm, const struct llm_qx16 *b)
{
    const __m256 t = _mm256_fmadd_ps(m1, _mm256_set1_ps((float)llm_qx16_h1(b)),
                                     _mm256_mul_ps(m0, _mm256_set1_ps((float)b->h0)));
    return _mm256_fmadd_ps(t, _mm256_mul_ps(dm, _mm256_set1_ps(b->d)), acc);
}
#endif

/* Q6_K's codes of pair v of half h of an interleaved super-block, c + 32
 * (0..63, kq_unpack's codes plus 32), for blocks 4h + j in bytes (two of
 * each of the 16 rows): a's low nibbles (j = 0), c's (1), a's high (2),
 * c's (3) from units 32h + v (a) and 32h + 16 + v (c), with bits 2j, 2j+1
 * of unit 64 + 16h + v (q) on top. 256-bit operations, which more ports
 * run than 512-bit ones, on AVX2 and AVX-512 alike. */
SIMD_INLINE void SIMD(k6_bytes)(const uint8_t *blk, int h, int v, __m256i *b0, __m256i *b1, __m256i *b2,
                                __m256i *b3)
{
    const __m256i f = _mm256_set1_epi8(0x0F), t3 = _mm256_set1_epi8(0x30);
    const __m256i a = _mm256_loadu_si256((const __m256i *)(blk + 32 * (32 * h + v)));
    const __m256i c = _mm256_loadu_si256((const __m256i *)(blk + 32 * (32 * h + 16 + v)));
    const __m256i q = _mm256_loadu_si256((const __m256i *)(blk + 32 * (64 + 16 * h + v)));
    *b0 = _mm256_or_si256(_mm256_and_si256(a, f), _mm256_and_si256(_mm256_slli_epi16(q, 4), t3));
    *b1 = _mm256_or_si256(_mm256_and_si256(c, f), _mm256_and_si256(_mm256_slli_epi16(q, 2), t3));
    *b2 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(a, 4), f), _mm256_and_si256(q, t3));
    *b3 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(c, 4), f),
                          _mm256_and_si256(_mm256_srli_epi16(q, 2), t3));
}

#ifdef SIMD_AVX512
/* Unit u of an interleaved group's block (32 bytes: 2 of each of 16 rows)
 * as int16 lanes (its bytes), as int32 lanes (its 16-bit words: row r in
 * lane r), as floats (its binary16 words) */
SIMD_INLINE __m512i SIMD(x16_u8)(const uint8_t *blk, int u)
{
    return _mm512_cvtepu8_epi16(_mm256_loadu_si256((const __m256i *)(blk + 32 * u)));
}
SIMD_INLINE __m512i SIMD(x16_u16)(const uint8_t *blk, int u)
{
    return _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(blk + 32 * u)));
}
SIMD_INLINE __m512 SIMD(x16_uf)(const uint8_t *blk, int u)
{
    return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(blk + 32 * u)));
}

/* Units u and u + 1 of an interleaved block (64 bytes) with row r's four
 * bytes in int32 lane r: its two of u, then its two of u + 1 (for even
 * v = u - first unit: elements 2v .. 2v + 3 of each row) */
SIMD_INLINE __m512i SIMD(x16_pair)(const uint8_t *blk, int u)
{
    const __m512i idx = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8,
                                         23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    return _mm512_permutexvar_epi16(idx, _mm512_loadu_si512((const void *)(blk + 32 * u)));
}

/* The four bytes at p in every int32 lane */
SIMD_INLINE __m512i SIMD(bcast4)(const uint8_t *p)
{
    int32_t v;
    memcpy(&v, p, 4);
    return _mm512_set1_epi32(v);
}

/* A token's int16 blocks (n) made ready for vpdpbusd, in place: each
 * block's qs becomes 32 low bytes (unsigned) then 32 high bytes (signed),
 * x = 256 xh + xl exactly; d, ds, m8 and h0 stay. Only the K-quant
 * group kernels read blocks so rewritten (x16_group_k4, x16_half_sums;
 * not IQ4_XS's, whose signed code book would need a correction). */
static void SIMD(x16_split)(struct llm_qx16 *xq, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        const __m512i q = _mm512_loadu_si512((const void *)xq[i].qs);
        uint8_t *x = (uint8_t *)xq[i].qs;
        _mm256_storeu_si256((__m256i *)x, _mm512_cvtepi16_epi8(q));
        _mm256_storeu_si256((__m256i *)(x + 32), _mm512_cvtepi16_epi8(_mm512_srai_epi16(q, 8)));
    }
}

/* An interleaved Q4_K super-block's scales d sc (D) and minimums
 * -(dmin mn) (M) of its 8 sub-blocks, row r in lane r: kq_scales_k4's
 * values. Units 0, 1: d, dmin; 2-7: the 12 scale bytes. */
SIMD_INLINE void SIMD(x16_k4_scales)(const uint8_t *blk, __m512 D[8], __m512 M[8])
{
    const __m512i m6 = _mm512_set1_epi32(63), m4 = _mm512_set1_epi32(15), m2 = _mm512_set1_epi32(3);
    const __m512 d = SIMD(x16_uf)(blk, 0), dmin = SIMD(x16_uf)(blk, 1);
    /* scale bytes 0-3, 4-7, 8-11 of each row as words */
    __m512i w[3];
    for (int i = 0; i < 3; i++)
        w[i] = _mm512_or_si512(SIMD(x16_u16)(blk, 2 + 2 * i),
                               _mm512_slli_epi32(SIMD(x16_u16)(blk, 3 + 2 * i), 16));
    for (int j = 0; j < 8; j++) {
        __m512i sc, mn;
        if (j < 4) {
            sc = _mm512_and_si512(_mm512_srli_epi32(w[0], 8 * j), m6);
            mn = _mm512_and_si512(_mm512_srli_epi32(w[1], 8 * j), m6);
        } else {
            const int sh = 8 * (j - 4);
            sc = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(w[2], sh), m4),
                                 _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(w[0], sh + 6), m2), 4));
            mn = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(w[2], sh + 4), m4),
                                 _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(w[1], sh + 6), m2), 4));
        }
        D[j] = _mm512_mul_ps(d, _mm512_cvtepi32_ps(sc));
        const __m512 m = _mm512_mul_ps(dmin, _mm512_cvtepi32_ps(mn));
        M[j] = _mm512_castsi512_ps(
            _mm512_xor_si512(_mm512_castps_si512(m), _mm512_set1_epi32((int)0x80000000u)));
    }
}

/* k6_bytes widened: blocks 4h + j's elements 2v, 2v+1 of the 16 rows as
 * int16 pairs (the GEMM's tile takes the 32 off) */
SIMD_INLINE void SIMD(x16_k6_codes)(const uint8_t *blk, int h, int v, __m512i cj[4])
{
    __m256i b0, b1, b2, b3;
    SIMD(k6_bytes)(blk, h, v, &b0, &b1, &b2, &b3);
    cj[0] = _mm512_cvtepu8_epi16(b0);
    cj[1] = _mm512_cvtepu8_epi16(b1);
    cj[2] = _mm512_cvtepu8_epi16(b2);
    cj[3] = _mm512_cvtepu8_epi16(b3);
}

/* Sub-block scales 2B, 2B + 1 (d sc) of an interleaved Q6_K super-block */
SIMD_INLINE void SIMD(x16_k6_scales)(const uint8_t *blk, int B, __m512 *d0, __m512 *d1)
{
    const __m512 d = SIMD(x16_uf)(blk, 104);
    const __m512i w = SIMD(x16_u16)(blk, 96 + B);
    *d0 = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_srai_epi32(_mm512_slli_epi32(w, 24), 24)));
    *d1 = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_srai_epi32(_mm512_slli_epi32(w, 16), 24)));
}

/* Codes of pair u of chunk p of an interleaved Q4_K (five: Q5_K) super-block:
 * sub-block 2p's elements 2u, 2u+1 of the 16 rows (lo) and 2p+1's (hi), as
 * int16 pairs; Q5_K's fifth bits are bits 2p, 2p+1 of qh (units 8-23). */
SIMD_INLINE void SIMD(x16_k45_codes)(const uint8_t *blk, int five, int p, int u, __m512i *lo,
                                     __m512i *hi)
{
    SIMD(x16_codes)(blk + 32 * ((five ? 24 : 8) + 16 * p + u), lo, hi);
    if (five) {
        const __m512i q = SIMD(x16_u8)(blk, 8 + u), one = _mm512_set1_epi16(1);
        const __m512i b0 = _mm512_and_si512(_mm512_srli_epi16(q, 2 * p), one);
        const __m512i b1 = _mm512_and_si512(_mm512_srli_epi16(q, 2 * p + 1), one);
        *lo = _mm512_or_si512(*lo, _mm512_slli_epi16(b0, 4));
        *hi = _mm512_or_si512(*hi, _mm512_slli_epi16(b1, 4));
    }
}

/* The same codes of units 2w, 2w + 1 (elements 4w .. 4w + 3) as bytes,
 * row r's four in lane r (x16_pair), for x16_group_k4's vpdpbusd */
SIMD_INLINE void SIMD(x16_k45_bytes)(const uint8_t *blk, int five, int p, int w, __m512i *lo,
                                     __m512i *hi)
{
    const __m512i f = _mm512_set1_epi8(0x0F);
    const __m512i q = SIMD(x16_pair)(blk, (five ? 24 : 8) + 16 * p + 2 * w);
    if (!five) {
        *lo = _mm512_and_si512(q, f);
        *hi = _mm512_and_si512(_mm512_srli_epi16(q, 4), f);
        return;
    }
    /* bit 2p (lo) and 2p + 1 (hi) of qh's byte to bit 4 by 16-bit shifts:
     * what crosses from the neighbouring byte lands in bits 0-3, which the
     * ternary logic takes from q, or in bits 5-7, which the mask clears */
    const __m512i h = SIMD(x16_pair)(blk, 8 + 2 * w), x1f = _mm512_set1_epi8(0x1F);
    const __m512i b0 = p < 2 ? _mm512_slli_epi16(h, 4 - 2 * p) : p == 2 ? h : _mm512_srli_epi16(h, 2);
    const __m512i b1 = p < 2 ? _mm512_slli_epi16(h, 3 - 2 * p) : _mm512_srli_epi16(h, 2 * p - 3);
    *lo = _mm512_and_si512(_mm512_ternarylogic_epi32(q, b0, f, 0xE4), x1f);
    *hi = _mm512_and_si512(_mm512_ternarylogic_epi32(_mm512_srli_epi16(q, 4), b1, f, 0xE4), x1f);
}

/* Q4_K interleaved (matmul.c x16_group: 256; five: Q5_K): one group of 16
 * rows, y (16) = the rows . x, ns super-blocks. A super-block is 72 units
 * of 2 bytes (Q5_K 88), row r's at 32 u + 2 r: d, dmin, the 12 scale bytes
 * (units 2-7), (Q5_K: qh, units 8-23), then qs: unit 8 (24) + 16 p + u
 * holds bytes 2u, 2u+1 of the p-th 32, whose low nibbles are elements 2u,
 * 2u+1 of sub-block 2p and the high ones those of 2p+1 (x16_k45_codes).
 * The scales unpack with the rows in lanes, and each sub-block meets
 * its scale and minimum in the int16 GEMM's order (gq_micro, zero-point
 * form: the same d sc and -(dmin mn) as kq_scales_k4), so that a token's
 * bits are those of the rows' decode and GEMM. */
SIMD_INLINE void SIMD(x16_group_k4)(const uint8_t *gp, const struct llm_qx16 *xq, int64_t ns,
                                    int five, float *y)
{
    __m512 acc = _mm512_setzero_ps();
    for (int64_t k = 0; k < ns; k++) {
        const uint8_t *blk = gp + (uint64_t)k * 16 * (five ? 176 : 144);
        const struct llm_qx16 *b = xq + 8 * k;
        __m512 D[8], M[8];
        SIMD(x16_k4_scales)(blk, D, M);
        for (int p = 0; p < 4; p++) {
            /* the token's split blocks (x16_split): low bytes by codes and
             * codes by high bytes, two chains each (by pair parity) */
            const struct llm_qx16 *bl = b + 2 * p, *bh = b + 2 * p + 1;
            __m512i la = _mm512_setzero_si512(), lb = la, ga = la, gb = la, ma = la, mb = la, na = la,
                    nb = la;
#pragma GCC unroll 8
            for (int w = 0; w < 8; w += 2) {
                __m512i lo, hi, lo2, hi2;
                SIMD(x16_k45_bytes)(blk, five, p, w, &lo, &hi);
                SIMD(x16_k45_bytes)(blk, five, p, w + 1, &lo2, &hi2);
                /* sub-block 2p's bytes (xa), 2p + 1's (xb) */
                const uint8_t *xa = (const uint8_t *)bl->qs + 4 * w, *xb = (const uint8_t *)bh->qs + 4 * w;
                la = _mm512_dpbusd_epi32(la, SIMD(bcast4)(xa), lo);
                ga = _mm512_dpbusd_epi32(ga, lo, SIMD(bcast4)(xa + 32));
                ma = _mm512_dpbusd_epi32(ma, SIMD(bcast4)(xb), hi);
                na = _mm512_dpbusd_epi32(na, hi, SIMD(bcast4)(xb + 32));
                lb = _mm512_dpbusd_epi32(lb, SIMD(bcast4)(xa + 4), lo2);
                gb = _mm512_dpbusd_epi32(gb, lo2, SIMD(bcast4)(xa + 36));
                mb = _mm512_dpbusd_epi32(mb, SIMD(bcast4)(xb + 4), hi2);
                nb = _mm512_dpbusd_epi32(nb, hi2, SIMD(bcast4)(xb + 36));
            }
            const __m512i s0 = _mm512_add_epi32(la, lb), s1 = _mm512_slli_epi32(_mm512_add_epi32(ga, gb), 8);
            const __m512i s2 = _mm512_add_epi32(ma, mb), s3 = _mm512_slli_epi32(_mm512_add_epi32(na, nb), 8);
            acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(s0, s1)),
                                  _mm512_mul_ps(D[2 * p], _mm512_set1_ps(bl->d)), acc);
            acc = _mm512_fmadd_ps(M[2 * p], _mm512_set1_ps(bl->ds), acc);
            acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(s2, s3)),
                                  _mm512_mul_ps(D[2 * p + 1], _mm512_set1_ps(bh->d)), acc);
            acc = _mm512_fmadd_ps(M[2 * p + 1], _mm512_set1_ps(bh->ds), acc);
        }
    }
    _mm512_storeu_ps(y, acc);
}

/* Q3_K and Q2_K interleaved (q2: Q2_K): the 16 sub-scales of a
 * super-block as int32 lanes (row r in lane r), and Q2_K's minimums as
 * floats (M0, M1 of block b: mn[2b], mn[2b+1]). Q3_K: units 48-53 hold
 * the 12 scale bytes (kq_scales_k3's fields), Q2_K: units 0-7 the 16 scale
 * bytes (low nibble scale, high minimum). */
SIMD_INLINE void SIMD(x16_k23_scales)(const uint8_t *blk, int q2, __m512i sc[16], __m512 mn[16])
{
    if (q2) {
        for (int b = 0; b < 8; b++) {
            const __m512i w = SIMD(x16_u16)(blk, b);
            for (int e = 0; e < 2; e++) {
                const __m512i byte = _mm512_and_si512(_mm512_srli_epi32(w, 8 * e), _mm512_set1_epi32(255));
                sc[2 * b + e] = _mm512_and_si512(byte, _mm512_set1_epi32(15));
                mn[2 * b + e] = _mm512_cvtepi32_ps(_mm512_srli_epi32(byte, 4));
            }
        }
        return;
    }
    __m512i u[6];
    for (int i = 0; i < 6; i++)
        u[i] = SIMD(x16_u16)(blk, 48 + i);
    const __m512i A0 = _mm512_or_si512(u[0], _mm512_slli_epi32(u[1], 16));
    const __m512i A1 = _mm512_or_si512(u[2], _mm512_slli_epi32(u[3], 16));
    const __m512i H = _mm512_or_si512(u[4], _mm512_slli_epi32(u[5], 16));
    for (int g = 0; g < 16; g++) {
        const int bi = g % 8;
        const __m512i low4 = _mm512_and_si512(
            _mm512_srli_epi32(bi < 4 ? A0 : A1, 8 * (bi % 4) + (g >= 8 ? 4 : 0)), _mm512_set1_epi32(15));
        const __m512i high2 =
            _mm512_and_si512(_mm512_srli_epi32(H, 8 * (g % 4) + 2 * (g / 4)), _mm512_set1_epi32(3));
        sc[g] = _mm512_sub_epi32(_mm512_or_si512(low4, _mm512_slli_epi32(high2, 4)), _mm512_set1_epi32(32));
    }
}

/* Q2_K's -dmin (unit 41), row r in lane r */
SIMD_INLINE __m512 SIMD(x16_k2_dm)(const uint8_t *blk)
{
    return _mm512_sub_ps(_mm512_setzero_ps(), SIMD(x16_uf)(blk, 41));
}

/* Codes of pair v of half h of an interleaved Q3_K (q2: Q2_K) super-block,
 * blocks 4h + j, their sub-scales folded in (the GEMM's form: kq_unpack_gemm):
 * bits 2j of qs's unit, Q3_K minus 4 unless bit 4h + j of hmask's */
SIMD_INLINE void SIMD(x16_k23_codes)(const uint8_t *blk, int q2, int h, int v, const __m512i sc[16],
                                     __m512i cj[4])
{
    const __m512i three = _mm512_set1_epi16(3);
    const __m512i q = SIMD(x16_u8)(blk, (q2 ? 8 : 16) + 16 * h + v);
    const __m512i hm = q2 ? q : SIMD(x16_u8)(blk, v);
    for (int j = 0; j < 4; j++) {
        __m512i c = _mm512_and_si512(_mm512_srli_epi16(q, 2 * j), three);
        if (!q2) /* + 4 hbit - 4 */
            c = _mm512_sub_epi16(_mm512_add_epi16(c, _mm512_slli_epi16(_mm512_and_si512(
                                     _mm512_srli_epi16(hm, 4 * h + j), _mm512_set1_epi16(1)), 2)),
                                 _mm512_set1_epi16(4));
        const __m512i g = _mm512_and_si512(sc[2 * (4 * h + j) + (v >> 3)], _mm512_set1_epi32(0xFFFF));
        cj[j] = _mm512_mullo_epi16(c, _mm512_or_si512(g, _mm512_slli_epi32(g, 16))); /* both halves */
    }
}

/* Codes of an interleaved super-block's half h, elements 4w .. 4w + 3 of
 * its blocks 4h + j, as bytes (row r's four in lane r): Q6_K's c + 32
 * (0..63), Q3_K's without its - 4 (0..7), Q2_K's (0..3). The offsets and
 * sub-scales are taken off per half block in the int32 sums. */
SIMD_INLINE void SIMD(x16_k_bytes)(enum llm_type t, const uint8_t *blk, int h, int w, __m512i cj[4])
{
    if (t == LLM_TYPE_Q6_K) { /* as x16_k6_codes */
        const __m512i f = _mm512_set1_epi8(0x0F), t3 = _mm512_set1_epi8(0x30);
        const __m512i a = SIMD(x16_pair)(blk, 32 * h + 2 * w);
        const __m512i c = SIMD(x16_pair)(blk, 32 * h + 16 + 2 * w);
        const __m512i q = SIMD(x16_pair)(blk, 64 + 16 * h + 2 * w);
        /* (A & f) | (B & ~f): ternary-logic 0xE4 with f the third operand */
        cj[0] = _mm512_ternarylogic_epi32(a, _mm512_and_si512(_mm512_slli_epi16(q, 4), t3), f, 0xE4);
        cj[1] = _mm512_ternarylogic_epi32(c, _mm512_and_si512(_mm512_slli_epi16(q, 2), t3), f, 0xE4);
        cj[2] = _mm512_ternarylogic_epi32(_mm512_srli_epi16(a, 4), _mm512_and_si512(q, t3), f, 0xE4);
        cj[3] = _mm512_ternarylogic_epi32(_mm512_srli_epi16(c, 4),
                                          _mm512_and_si512(_mm512_srli_epi16(q, 2), t3), f, 0xE4);
        return;
    }
    const int q2 = t == LLM_TYPE_Q2_K;
    const __m512i three = _mm512_set1_epi8(3), seven = _mm512_set1_epi8(7);
    const __m512i q = SIMD(x16_pair)(blk, (q2 ? 8 : 16) + 16 * h + 2 * w);
    const __m512i hm = q2 ? q : SIMD(x16_pair)(blk, 2 * w);
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++) {
        const __m512i lo = j ? _mm512_srli_epi16(q, 2 * j) : q;
        if (q2) {
            cj[j] = _mm512_and_si512(lo, three);
            continue;
        }
        /* bit 4h + j of hmask's byte to bit 2 of the code's (within the byte: 4h + j <= 7) */
        const int sh = 4 * h + j - 2;
        const __m512i hb = sh > 0 ? _mm512_srli_epi16(hm, sh) : sh < 0 ? _mm512_slli_epi16(hm, -sh) : hm;
        cj[j] = _mm512_and_si512(_mm512_ternarylogic_epi32(lo, hb, three, 0xE4), seven);
    }
}

/* Half h of an interleaved Q6_K, Q3_K or Q2_K super-block (t, a constant
 * at each call) with the token's split blocks b (x16_split): s[j][e], the
 * exact sums of block 4h + j's elements 16e .. 16e + 15 over its codes as
 * x16_k_bytes gives them. Four codes of a row meet four activations in
 * one vpdpbusd, twice (the low bytes, unsigned, by the codes; the codes,
 * unsigned, by the high bytes, signed): half the instructions of the
 * codes widened to int16, and the same integers. */
SIMD_INLINE void SIMD(x16_half_sums)(enum llm_type t, const uint8_t *blk, int h,
                                     const struct llm_qx16 *b, __m512i s[4][2])
{
    /* named accumulators: in an array GCC kept them in memory (x16_group_k6) */
    for (int e = 0; e < 2; e++) {
        __m512i l0 = _mm512_setzero_si512(), l1 = l0, l2 = l0, l3 = l0, g0 = l0, g1 = l0, g2 = l0, g3 = l0;
#pragma GCC unroll 4
        for (int w = 4 * e; w < 4 * e + 4; w++) {
            __m512i cj[4];
            SIMD(x16_k_bytes)(t, blk, h, w, cj);
            /* block 4h + j's low bytes at x + j sizeof *b, its high bytes 32 on */
            const uint8_t *x = (const uint8_t *)b[4 * h].qs + 4 * w;
            l0 = _mm512_dpbusd_epi32(l0, SIMD(bcast4)(x), cj[0]);
            g0 = _mm512_dpbusd_epi32(g0, cj[0], SIMD(bcast4)(x + 32));
            l1 = _mm512_dpbusd_epi32(l1, SIMD(bcast4)(x + sizeof *b), cj[1]);
            g1 = _mm512_dpbusd_epi32(g1, cj[1], SIMD(bcast4)(x + sizeof *b + 32));
            l2 = _mm512_dpbusd_epi32(l2, SIMD(bcast4)(x + 2 * sizeof *b), cj[2]);
            g2 = _mm512_dpbusd_epi32(g2, cj[2], SIMD(bcast4)(x + 2 * sizeof *b + 32));
            l3 = _mm512_dpbusd_epi32(l3, SIMD(bcast4)(x + 3 * sizeof *b), cj[3]);
            g3 = _mm512_dpbusd_epi32(g3, cj[3], SIMD(bcast4)(x + 3 * sizeof *b + 32));
        }
        s[0][e] = _mm512_add_epi32(l0, _mm512_slli_epi32(g0, 8));
        s[1][e] = _mm512_add_epi32(l1, _mm512_slli_epi32(g1, 8));
        s[2][e] = _mm512_add_epi32(l2, _mm512_slli_epi32(g2, 8));
        s[3][e] = _mm512_add_epi32(l3, _mm512_slli_epi32(g3, 8));
    }
}

/* Q6_K interleaved (matmul.c x16_group: 256), as x16_group_k4: a
 * super-block is 105 units, ql (units 0-63), qh (64-95), the 16 int8
 * scales (96-103), d (104). Per half h and pair v of elements (2v, 2v+1),
 * the units 32h + v (a), 32h + 16 + v (c) and 64 + 16h + v (q) give blocks
 * 4h + j, elements 2v, 2v+1: a's low nibbles (j = 0), c's (1), a's high
 * (2), c's (3), with bits 2j, 2j+1 of q on top, minus 32 (kq_unpack's
 * codes). Each 16 elements meet their scale in the int16 GEMM's order
 * (gq_micro's s16: half blocks in order, no minimum). */
SIMD_INLINE void SIMD(x16_group_k6)(const uint8_t *gp, const struct llm_qx16 *xq, int64_t ns,
                                    float *y)
{
    __m512 acc = _mm512_setzero_ps();
    for (int64_t k = 0; k < ns; k++) {
        const uint8_t *blk = gp + (uint64_t)k * 16 * 210;
        const struct llm_qx16 *b = xq + 8 * k;
        for (int h = 0; h < 2; h++) {
            __m512i s[4][2];
            SIMD(x16_half_sums)(LLM_TYPE_Q6_K, blk, h, b, s);
            for (int j = 0; j < 4; j++) {
                const int B = 4 * h + j;
                /* sum (c - 32) q = sum c q - 32 sum q, exactly, per half */
                s[j][0] = _mm512_sub_epi32(s[j][0], _mm512_set1_epi32(32 * b[B].h0));
                s[j][1] = _mm512_sub_epi32(s[j][1], _mm512_set1_epi32(32 * llm_qx16_h1(b + B)));
                __m512 d0, d1;
                SIMD(x16_k6_scales)(blk, B, &d0, &d1);
                const __m512 dx = _mm512_set1_ps(b[B].d);
                acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s[j][0]), _mm512_mul_ps(d0, dx), acc);
                acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s[j][1]), _mm512_mul_ps(d1, dx), acc);
            }
        }
    }
    _mm512_storeu_ps(y, acc);
}

/* Q3_K and Q2_K interleaved: one group of 16 rows, as x16_group_k4, each
 * 32-element block in the int16 GEMM's order (its d; Q2_K then its
 * minimums, SIMD(q2min)). */
SIMD_INLINE void SIMD(x16_group_k23)(const uint8_t *gp, const struct llm_qx16 *xq, int64_t ns,
                                     int q2, float *y)
{
    __m512 acc = _mm512_setzero_ps();
    for (int64_t k = 0; k < ns; k++) {
        const uint8_t *blk = gp + (uint64_t)k * 16 * (q2 ? 84 : 110);
        const struct llm_qx16 *b = xq + 8 * k;
        __m512i sc[16];
        __m512 mn[16];
        SIMD(x16_k23_scales)(blk, q2, sc, mn);
        const __m512 d = SIMD(x16_uf)(blk, q2 ? 40 : 54);
        const __m512 dm = q2 ? SIMD(x16_k2_dm)(blk) : _mm512_setzero_ps();
        for (int h = 0; h < 2; h++) {
            __m512i s[4][2];
            SIMD(x16_half_sums)(q2 ? LLM_TYPE_Q2_K : LLM_TYPE_Q3_K, blk, h, b, s);
            for (int j = 0; j < 4; j++) {
                const struct llm_qx16 *x = b + 4 * h + j;
                const int B = 4 * h + j;
                /* the folded form's sum, exactly: sum over the halves of
                 * sc (sum c q - 4 sum q) (Q3_K; Q2_K without the 4) */
                __m512i t0 = s[j][0], t1 = s[j][1];
                if (!q2) {
                    t0 = _mm512_sub_epi32(t0, _mm512_set1_epi32(4 * x->h0));
                    t1 = _mm512_sub_epi32(t1, _mm512_set1_epi32(4 * llm_qx16_h1(x)));
                }
                const __m512i is = _mm512_add_epi32(_mm512_mullo_epi32(t0, sc[2 * B]),
                                                    _mm512_mullo_epi32(t1, sc[2 * B + 1]));
                acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(is), _mm512_mul_ps(d, _mm512_set1_ps(x->d)), acc);
                if (q2)
                    acc = SIMD(q2min)(acc, mn[2 * B], mn[2 * B + 1], dm, x);
            }
        }
    }
    _mm512_storeu_ps(y, acc);
}

/* IQ4_XS interleaved (136 bytes, 68 units): d (unit 0), the scales' high
 * bits (1) and low nibbles (2-3), then sub-block j's 16 code bytes in
 * units 4 + 8j + w, whose low nibbles index elements 2w, 2w+1 and high
 * ones 16 + 2w, 17 + 2w in the code book. D: the 8 sub-blocks' d (ls - 32)
 * (kq_scales_xs's values), row r in lane r. */
SIMD_INLINE void SIMD(x16_xs_scales)(const uint8_t *blk, __m512 D[8])
{
    const __m512 d = SIMD(x16_uf)(blk, 0);
    const __m512i sh = SIMD(x16_u16)(blk, 1);
    const __m512i sl = _mm512_or_si512(SIMD(x16_u16)(blk, 2), _mm512_slli_epi32(SIMD(x16_u16)(blk, 3), 16));
    for (int j = 0; j < 8; j++) {
        const __m512i ls = _mm512_or_si512(
            _mm512_and_si512(_mm512_srli_epi32(sl, 4 * j), _mm512_set1_epi32(15)),
            _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(sh, 2 * j), _mm512_set1_epi32(3)), 4));
        D[j] = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_sub_epi32(ls, _mm512_set1_epi32(32))));
    }
}

/* Code pairs of unit w of sub-block j: elements 2w, 2w+1 (lo) and 16 + 2w,
 * 17 + 2w (hi) of the 16 rows, looked up in the code book */
SIMD_INLINE void SIMD(x16_xs_codes)(const uint8_t *blk, int j, int w, __m512i *lo, __m512i *hi)
{
    static const int8_t kv[16] = LLM_IQ4NL_VALUES;
    const __m512i lut = _mm512_castsi256_si512(_mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)kv)));
    SIMD(x16_codes)(blk + 32 * (4 + 8 * j + w), lo, hi);
    *lo = _mm512_permutexvar_epi16(*lo, lut);
    *hi = _mm512_permutexvar_epi16(*hi, lut);
}

/* IQ4_XS interleaved: one group of 16 rows, each sub-block in the int16
 * GEMM's order (its scale, no minimum) */
SIMD_INLINE void SIMD(x16_group_xs)(const uint8_t *gp, const struct llm_qx16 *xq, int64_t ns,
                                    float *y)
{
    __m512 acc = _mm512_setzero_ps();
    for (int64_t k = 0; k < ns; k++) {
        const uint8_t *blk = gp + (uint64_t)k * 16 * 136;
        const struct llm_qx16 *b = xq + 8 * k;
        __m512 D[8];
        SIMD(x16_xs_scales)(blk, D);
        for (int j = 0; j < 8; j++) {
            __m512i s0 = _mm512_setzero_si512(), s1 = s0;
#pragma GCC unroll 8
            for (int w = 0; w < 8; w++) {
                __m512i lo, hi;
                SIMD(x16_xs_codes)(blk, j, w, &lo, &hi);
                int32_t pl, ph;
                memcpy(&pl, b[j].qs + 2 * w, 4);
                memcpy(&ph, b[j].qs + 16 + 2 * w, 4);
                s0 = _mm512_dpwssd_epi32(s0, lo, _mm512_set1_epi32(pl));
                s1 = _mm512_dpwssd_epi32(s1, hi, _mm512_set1_epi32(ph));
            }
            acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(s0, s1)),
                                  _mm512_mul_ps(D[j], _mm512_set1_ps(b[j].d)), acc);
        }
    }
    _mm512_storeu_ps(y, acc);
}

/* A group of 16 interleaved K-quant rows (ns super-blocks) into the
 * int16 GEMM's packed tile (matmul_gemm.h: P (nq, 16 pairs, 16 lanes), D
 * and M (nq, 16), Q6_K's D (nq, 2, 16)): the group kernels' codes and
 * scales are already the tile's vectors, so this is a copy, and the
 * several tokens of a step or a prompt do not unpack the groups to rows. */
SIMD_INLINE void SIMD(x16_k_to_packed)(enum llm_type t, const uint8_t *gp, int64_t ns, int32_t *P,
                                       float *D, float *M)
{
    for (int64_t k = 0; k < ns; k++) {
        if (t == LLM_TYPE_Q4_K || t == LLM_TYPE_Q5_K) {
            const int five = t == LLM_TYPE_Q5_K;
            const uint8_t *blk = gp + (uint64_t)k * 16 * (five ? 176 : 144);
            __m512 Dv[8], Mv[8];
            SIMD(x16_k4_scales)(blk, Dv, Mv);
            for (int j = 0; j < 8; j++) {
                _mm512_storeu_ps(D + (8 * k + j) * 16, Dv[j]);
                _mm512_storeu_ps(M + (8 * k + j) * 16, Mv[j]);
            }
            for (int p = 0; p < 4; p++)
                for (int u = 0; u < 16; u++) {
                    __m512i lo, hi;
                    SIMD(x16_k45_codes)(blk, five, p, u, &lo, &hi);
                    _mm512_storeu_si512((void *)(P + (8 * k + 2 * p) * 256 + 16 * u), lo);
                    _mm512_storeu_si512((void *)(P + (8 * k + 2 * p + 1) * 256 + 16 * u), hi);
                }
            continue;
        }
        if (t == LLM_TYPE_IQ4_XS) {
            const uint8_t *blk = gp + (uint64_t)k * 16 * 136;
            __m512 Dv[8];
            SIMD(x16_xs_scales)(blk, Dv);
            for (int j = 0; j < 8; j++) {
                _mm512_storeu_ps(D + (8 * k + j) * 16, Dv[j]);
                _mm512_storeu_ps(M + (8 * k + j) * 16, _mm512_setzero_ps());
                for (int w = 0; w < 8; w++) {
                    __m512i lo, hi;
                    SIMD(x16_xs_codes)(blk, j, w, &lo, &hi);
                    _mm512_storeu_si512((void *)(P + (8 * k + j) * 256 + 16 * w), lo);
                    _mm512_storeu_si512((void *)(P + (8 * k + j) * 256 + 16 * (8 + w)), hi);
                }
            }
            continue;
        }
        if (t == LLM_TYPE_Q3_K || t == LLM_TYPE_Q2_K) {
            const int q2 = t == LLM_TYPE_Q2_K;
            const uint8_t *blk = gp + (uint64_t)k * 16 * (q2 ? 84 : 110);
            __m512i sc[16];
            __m512 mn[16];
            SIMD(x16_k23_scales)(blk, q2, sc, mn);
            const __m512 d = SIMD(x16_uf)(blk, q2 ? 40 : 54);
            for (int B = 0; B < 8; B++) {
                const int64_t q = 8 * k + B;
                _mm512_storeu_ps(D + q * 16, d);
                if (q2) { /* M (nq, 3, 16): SIMD(q2min)'s m0, m1, dm */
                    _mm512_storeu_ps(M + 3 * q * 16, mn[2 * B]);
                    _mm512_storeu_ps(M + (3 * q + 1) * 16, mn[2 * B + 1]);
                    _mm512_storeu_ps(M + (3 * q + 2) * 16, SIMD(x16_k2_dm)(blk));
                } else {
                    _mm512_storeu_ps(M + q * 16, _mm512_setzero_ps());
                }
            }
            for (int h = 0; h < 2; h++)
                for (int v = 0; v < 16; v++) {
                    __m512i cj[4];
                    SIMD(x16_k23_codes)(blk, q2, h, v, sc, cj);
                    for (int j = 0; j < 4; j++)
                        _mm512_storeu_si512((void *)(P + (8 * k + 4 * h + j) * 256 + 16 * v), cj[j]);
                }
            continue;
        }
        const uint8_t *blk = gp + (uint64_t)k * 16 * 210;
        for (int B = 0; B < 8; B++) {
            __m512 d0, d1;
            SIMD(x16_k6_scales)(blk, B, &d0, &d1);
            _mm512_storeu_ps(D + (2 * (8 * k + B)) * 16, d0);
            _mm512_storeu_ps(D + (2 * (8 * k + B) + 1) * 16, d1);
            _mm512_storeu_ps(M + (8 * k + B) * 16, _mm512_setzero_ps());
        }
        for (int h = 0; h < 2; h++)
            for (int v = 0; v < 16; v++) {
                __m512i cj[4];
                SIMD(x16_k6_codes)(blk, h, v, cj);
                for (int j = 0; j < 4; j++)
                    _mm512_storeu_si512((void *)(P + (8 * k + 4 * h + j) * 256 + 16 * v),
                                        _mm512_sub_epi16(cj[j], _mm512_set1_epi16(32)));
            }
    }
}
#endif

#ifndef SIMD_AVX512
/* AVX2: the K-quant group kernels on half groups. Rows 8h .. 8h + 7 of a
 * group are bytes 16h .. 16h + 15 of each unit, so every helper here takes
 * blk + 16 h and gives 8 lanes, row 8h + i in lane i. The codes are put
 * together in bytes, widened to int16 pairs and summed by madd (vpmaddubsw
 * on bytes, without VNNI, would take as many instructions); the integer
 * sums are exact and the float steps those of the AVX-512 kernels above,
 * so the bits are theirs and the rows'. */

/* Unit u's 16 bytes of the half group: as bytes, as int16 lanes, as int32
 * lanes (its 16-bit words), as floats (its binary16 words) */
SIMD_INLINE __m128i SIMD(x8_b)(const uint8_t *blk, int u)
{
    return _mm_loadu_si128((const __m128i *)(blk + 32 * u));
}
SIMD_INLINE __m256i SIMD(x8_u8)(const uint8_t *blk, int u)
{
    return _mm256_cvtepu8_epi16(SIMD(x8_b)(blk, u));
}
SIMD_INLINE __m256i SIMD(x8_u16)(const uint8_t *blk, int u)
{
    return _mm256_cvtepu16_epi32(SIMD(x8_b)(blk, u));
}
SIMD_INLINE __m256 SIMD(x8_uf)(const uint8_t *blk, int u)
{
    return _mm256_cvtph_ps(SIMD(x8_b)(blk, u));
}
/* an int16 pair of the token (elements i, i + 1 of a block) in every lane */
SIMD_INLINE __m256i SIMD(x8_pair)(const struct llm_qx16 *b, int i)
{
    int32_t v;
    memcpy(&v, b->qs + i, 4);
    return _mm256_set1_epi32(v);
}

/* Q6_K's sub-block scales 2B, 2B + 1 (d sc) for a half group (x16_k6_scales) */
SIMD_INLINE void SIMD(x8_k6_scales)(const uint8_t *blk, int B, __m256 *d0, __m256 *d1)
{
    const __m256 d = SIMD(x8_uf)(blk, 104);
    const __m256i w = SIMD(x8_u16)(blk, 96 + B);
    *d0 = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_srai_epi32(_mm256_slli_epi32(w, 24), 24)));
    *d1 = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_srai_epi32(_mm256_slli_epi32(w, 16), 24)));
}

/* Q2_K's -dmin (unit 41) for a half group; 0 for Q3_K */
SIMD_INLINE __m256 SIMD(x8_k2_dm)(const uint8_t *blk, int q2)
{
    return q2 ? _mm256_sub_ps(_mm256_setzero_ps(), SIMD(x8_uf)(blk, 41)) : _mm256_setzero_ps();
}

/* x16_k4_scales for a half group */
SIMD_INLINE void SIMD(x8_k4_scales)(const uint8_t *blk, __m256 D[8], __m256 M[8])
{
    const __m256i m6 = _mm256_set1_epi32(63), m4 = _mm256_set1_epi32(15), m2 = _mm256_set1_epi32(3);
    const __m256 d = SIMD(x8_uf)(blk, 0), dmin = SIMD(x8_uf)(blk, 1);
    __m256i w[3];
    for (int i = 0; i < 3; i++)
        w[i] = _mm256_or_si256(SIMD(x8_u16)(blk, 2 + 2 * i),
                               _mm256_slli_epi32(SIMD(x8_u16)(blk, 3 + 2 * i), 16));
    for (int j = 0; j < 8; j++) {
        __m256i sc, mn;
        if (j < 4) {
            sc = _mm256_and_si256(_mm256_srli_epi32(w[0], 8 * j), m6);
            mn = _mm256_and_si256(_mm256_srli_epi32(w[1], 8 * j), m6);
        } else {
            const int sh = 8 * (j - 4);
            sc = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(w[2], sh), m4),
                                 _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(w[0], sh + 6), m2), 4));
            mn = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(w[2], sh + 4), m4),
                                 _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(w[1], sh + 6), m2), 4));
        }
        D[j] = _mm256_mul_ps(d, _mm256_cvtepi32_ps(sc));
        M[j] = _mm256_xor_ps(_mm256_mul_ps(dmin, _mm256_cvtepi32_ps(mn)), _mm256_set1_ps(-0.0f));
    }
}

/* x16_k45_codes for a half group: unit u of chunk p, sub-block 2p's
 * elements 2u, 2u+1 (lo) and 2p+1's (hi) */
SIMD_INLINE void SIMD(x8_k45_codes)(const uint8_t *blk, int five, int p, int u, __m256i *lo, __m256i *hi)
{
    const __m256i v = SIMD(x8_u8)(blk, (five ? 24 : 8) + 16 * p + u);
    *lo = _mm256_and_si256(v, _mm256_set1_epi16(15));
    *hi = _mm256_srli_epi16(v, 4);
    if (five) {
        const __m256i q = SIMD(x8_u8)(blk, 8 + u), one = _mm256_set1_epi16(1);
        const __m256i b0 = _mm256_and_si256(_mm256_srli_epi16(q, 2 * p), one);
        const __m256i b1 = _mm256_and_si256(_mm256_srli_epi16(q, 2 * p + 1), one);
        *lo = _mm256_or_si256(*lo, _mm256_slli_epi16(b0, 4));
        *hi = _mm256_or_si256(*hi, _mm256_slli_epi16(b1, 4));
    }
}

/* x16_group_k4 of Q4_K for a half group: its 8 rows . x (Q5_K: x16_group_k5b) */
SIMD_INLINE __m256 SIMD(x8_group_k4)(const uint8_t *gp, const struct llm_qx16 *xq, int64_t ns)
{
    __m256 acc = _mm256_setzero_ps();
    for (int64_t k = 0; k < ns; k++) {
        const uint8_t *blk = gp + (uint64_t)k * 16 * 144;
        const struct llm_qx16 *b = xq + 8 * k;
        __m256 D[8], M[8];
        SIMD(x8_k4_scales)(blk, D, M);
        for (int p = 0; p < 4; p++) {
            const struct llm_qx16 *bl = b + 2 * p, *bh = b + 2 * p + 1;
            __m256i s0 = _mm256_setzero_si256(), s1 = s0, s2 = s0, s3 = s0;
#pragma GCC unroll 16
            for (int u = 0; u < 16; u += 2) {
                __m256i lo, hi, lo2, hi2;
                SIMD(x8_k45_codes)(blk, 0, p, u, &lo, &hi);
                SIMD(x8_k45_codes)(blk, 0, p, u + 1, &lo2, &hi2);
                s0 = _mm256_add_epi32(s0, _mm256_madd_epi16(lo, SIMD(x8_pair)(bl, 2 * u)));
                s2 = _mm256_add_epi32(s2, _mm256_madd_epi16(hi, SIMD(x8_pair)(bh, 2 * u)));
                s1 = _mm256_add_epi32(s1, _mm256_madd_epi16(lo2, SIMD(x8_pair)(bl, 2 * u + 2)));
                s3 = _mm256_add_epi32(s3, _mm256_madd_epi16(hi2, SIMD(x8_pair)(bh, 2 * u + 2)));
            }
            acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_add_epi32(s0, s1)),
                                  _mm256_mul_ps(D[2 * p], _mm256_set1_ps(bl->d)), acc);
            acc = _mm256_fmadd_ps(M[2 * p], _mm256_set1_ps(bl->ds), acc);
            acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_add_epi32(s2, s3)),
                                  _mm256_mul_ps(D[2 * p + 1], _mm256_set1_ps(bh->d)), acc);
            acc = _mm256_fmadd_ps(M[2 * p + 1], _mm256_set1_ps(bh->ds), acc);
        }
    }
    return acc;
}

/* x16_k23_scales for a half group */
SIMD_INLINE void SIMD(x8_k23_scales)(const uint8_t *blk, int q2, __m256i sc[16], __m256 mn[16])
{
    if (q2) {
        for (int b = 0; b < 8; b++) {
            const __m256i w = SIMD(x8_u16)(blk, b);
            for (int e = 0; e < 2; e++) {
                const __m256i byte = _mm256_and_si256(_mm256_srli_epi32(w, 8 * e), _mm256_set1_epi32(255));
                sc[2 * b + e] = _mm256_and_si256(byte, _mm256_set1_epi32(15));
                mn[2 * b + e] = _mm256_cvtepi32_ps(_mm256_srli_epi32(byte, 4));
            }
        }
        return;
    }
    __m256i u[6];
    for (int i = 0; i < 6; i++)
        u[i] = SIMD(x8_u16)(blk, 48 + i);
    const __m256i A0 = _mm256_or_si256(u[0], _mm256_slli_epi32(u[1], 16));
    const __m256i A1 = _mm256_or_si256(u[2], _mm256_slli_epi32(u[3], 16));
    const __m256i H = _mm256_or_si256(u[4], _mm256_slli_epi32(u[5], 16));
#pragma GCC unroll 16
    for (int g = 0; g < 16; g++) {
        const int bi = g % 8;
        const __m256i low4 = _mm256_and_si256(
            _mm256_srli_epi32(bi < 4 ? A0 : A1, 8 * (bi % 4) + (g >= 8 ? 4 : 0)), _mm256_set1_epi32(15));
        const __m256i high2 =
            _mm256_and_si256(_mm256_srli_epi32(H, 8 * (g % 4) + 2 * (g / 4)), _mm256_set1_epi32(3));
        sc[g] = _mm256_sub_epi32(_mm256_or_si256(low4, _mm256_slli_epi32(high2, 4)), _mm256_set1_epi32(32));
    }
}

/* 32 code bytes (two of each of 16 rows) widened by row half, times a
 * token pair: lane i of *a gets row i's dot, of *b row 8 + i's */
SIMD_INLINE void SIMD(x8_dot2)(__m256i *a, __m256i *b, __m256i c, __m256i p)
{
    *a = _mm256_add_epi32(*a, _mm256_madd_epi16(_mm256_cvtepu8_epi16(_mm256_castsi256_si128(c)), p));
    *b = _mm256_add_epi32(*b, _mm256_madd_epi16(_mm256_cvtepu8_epi16(_mm256_extracti128_si256(c, 1)), p));
}

/* x16_group_k4 for Q5_K on AVX2, a whole group: the five bits of both
 * row halves' codes put together in 256-bit bytes once, then widened by
 * row half (the same sums and float steps as x8_group_k4) */
SIMD_INLINE void SIMD(x16_group_k5b)(const uint8_t *gp, const struct llm_qx16 *xq, int64_t ns, float *y)
{
    const __m256i f = _mm256_set1_epi8(0x0F), x10 = _mm256_set1_epi8(0x10);
    __m256 acc[2] = { _mm256_setzero_ps(), _mm256_setzero_ps() };
    for (int64_t k = 0; k < ns; k++) {
        const uint8_t *blk = gp + (uint64_t)k * 16 * 176;
        const struct llm_qx16 *b = xq + 8 * k;
        __m256 D[2][8], M[2][8];
        SIMD(x8_k4_scales)(blk, D[0], M[0]);
        SIMD(x8_k4_scales)(blk + 16, D[1], M[1]);
#pragma GCC unroll 4
        for (int p = 0; p < 4; p++) {
            const struct llm_qx16 *bl = b + 2 * p, *bh = b + 2 * p + 1;
            __m256i l0 = _mm256_setzero_si256(), l1 = l0, h0 = l0, h1 = l0; /* rows 0-7, 8-15 */
#pragma GCC unroll 16
            for (int u = 0; u < 16; u++) {
                const __m256i v = _mm256_loadu_si256((const __m256i *)(blk + 32 * (24 + 16 * p + u)));
                const __m256i q = _mm256_loadu_si256((const __m256i *)(blk + 32 * (8 + u)));
                /* bit 2p (2p + 1) of qh's byte as 16, within the byte */
                const __m256i q0 =
                    p < 2 ? _mm256_slli_epi16(q, 4 - 2 * p) : p == 2 ? q : _mm256_srli_epi16(q, 2);
                const __m256i q1 = p < 2 ? _mm256_slli_epi16(q, 3 - 2 * p) : _mm256_srli_epi16(q, 2 * p - 3);
                const __m256i lo = _mm256_or_si256(_mm256_and_si256(v, f), _mm256_and_si256(q0, x10));
                const __m256i hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(v, 4), f),
                                                   _mm256_and_si256(q1, x10));
                const __m256i pl = SIMD(x8_pair)(bl, 2 * u), ph = SIMD(x8_pair)(bh, 2 * u);
                SIMD(x8_dot2)(&l0, &l1, lo, pl);
                SIMD(x8_dot2)(&h0, &h1, hi, ph);
            }
            const __m256i sl[2] = { l0, l1 }, sh[2] = { h0, h1 };
            for (int r = 0; r < 2; r++) {
                acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sl[r]),
                                         _mm256_mul_ps(D[r][2 * p], _mm256_set1_ps(bl->d)), acc[r]);
                acc[r] = _mm256_fmadd_ps(M[r][2 * p], _mm256_set1_ps(bl->ds), acc[r]);
                acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sh[r]),
                                         _mm256_mul_ps(D[r][2 * p + 1], _mm256_set1_ps(bh->d)), acc[r]);
                acc[r] = _mm256_fmadd_ps(M[r][2 * p + 1], _mm256_set1_ps(bh->ds), acc[r]);
            }
        }
    }
    _mm256_storeu_ps(y, acc[0]);
    _mm256_storeu_ps(y + 8, acc[1]);
}

/* x16_group_k6 on AVX2, a whole group: the codes of both row halves put
 * together in 256-bit bytes once, then widened by row half; each token
 * pair meets both halves (x16_group_k6's sums and float steps) */
SIMD_INLINE void SIMD(x16_group_k6b)(const uint8_t *gp, const struct llm_qx16 *xq, int64_t ns, float *y)
{
    __m256 acc[2] = { _mm256_setzero_ps(), _mm256_setzero_ps() };
    for (int64_t k = 0; k < ns; k++) {
        const uint8_t *blk = gp + (uint64_t)k * 16 * 210;
        const struct llm_qx16 *b = xq + 8 * k;
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            const struct llm_qx16 *x = b + 4 * h;
            __m256i s[2][4][2]; /* row half, block 4h + j, half block e */
            for (int e = 0; e < 2; e++) {
                __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
                __m256i b0 = a0, b1 = a0, b2 = a0, b3 = a0;
#pragma GCC unroll 8
                for (int v = 8 * e; v < 8 * e + 8; v++) {
                    __m256i c0, c1, c2, c3;
                    SIMD(k6_bytes)(blk, h, v, &c0, &c1, &c2, &c3);
                    SIMD(x8_dot2)(&a0, &b0, c0, SIMD(x8_pair)(x, 2 * v));
                    SIMD(x8_dot2)(&a1, &b1, c1, SIMD(x8_pair)(x + 1, 2 * v));
                    SIMD(x8_dot2)(&a2, &b2, c2, SIMD(x8_pair)(x + 2, 2 * v));
                    SIMD(x8_dot2)(&a3, &b3, c3, SIMD(x8_pair)(x + 3, 2 * v));
                }
                s[0][0][e] = a0, s[0][1][e] = a1, s[0][2][e] = a2, s[0][3][e] = a3;
                s[1][0][e] = b0, s[1][1][e] = b1, s[1][2][e] = b2, s[1][3][e] = b3;
            }
            for (int r = 0; r < 2; r++)
                for (int j = 0; j < 4; j++) {
                    const int B = 4 * h + j;
                    const __m256i t0 = _mm256_sub_epi32(s[r][j][0], _mm256_set1_epi32(32 * b[B].h0));
                    const __m256i t1 =
                        _mm256_sub_epi32(s[r][j][1], _mm256_set1_epi32(32 * llm_qx16_h1(b + B)));
                    __m256 d0, d1;
                    SIMD(x8_k6_scales)(blk + 16 * r, B, &d0, &d1);
                    const __m256 dx = _mm256_set1_ps(b[B].d);
                    acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(t0), _mm256_mul_ps(d0, dx), acc[r]);
                    acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(t1), _mm256_mul_ps(d1, dx), acc[r]);
                }
        }
    }
    _mm256_storeu_ps(y, acc[0]);
    _mm256_storeu_ps(y + 8, acc[1]);
}

/* A token's int16 blocks (n) for x16_group_k23's vpmaddubsw on AVX2, xs
 * (n, 32): per block, each pair's low bytes (unsigned) as a 16-bit word
 * twice in a dword (16 dwords), then its high bytes (signed) alike (16);
 * x = 256 xh + xl exactly */
static void SIMD(x8_split)(const struct llm_qx16 *xq, int64_t n, uint32_t *xs)
{
    const __m256i m = _mm256_set1_epi32(0xFF), m2 = _mm256_set1_epi32(0xFF00);
    for (int64_t i = 0; i < n; i++)
        for (int k = 0; k < 2; k++) {
            const __m256i d = _mm256_loadu_si256((const __m256i *)(xq[i].qs + 16 * k)); /* 8 pairs */
            const __m256i d8 = _mm256_srli_epi32(d, 8);
            const __m256i lo = _mm256_or_si256(_mm256_and_si256(d, m), _mm256_and_si256(d8, m2));
            const __m256i d16 = _mm256_srli_epi32(d, 16);
            const __m256i hi = _mm256_or_si256(_mm256_and_si256(d8, m), _mm256_and_si256(d16, m2));
            uint32_t *o = xs + 32 * i + 8 * k;
            _mm256_storeu_si256((__m256i *)o, _mm256_or_si256(lo, _mm256_slli_epi32(lo, 16)));
            _mm256_storeu_si256((__m256i *)(o + 16), _mm256_or_si256(hi, _mm256_slli_epi32(hi, 16)));
        }
}

/* Sums of 16 int16 lanes (rows 0-15) of the low and the high bytes' dots
 * as int32, rows 0-7 (r = 0) or 8-15: l + 256 g */
SIMD_INLINE __m256i SIMD(x8_lg)(__m256i l, __m256i g, int r)
{
    const __m128i l8 = r ? _mm256_extracti128_si256(l, 1) : _mm256_castsi256_si128(l);
    const __m128i g8 = r ? _mm256_extracti128_si256(g, 1) : _mm256_castsi256_si128(g);
    return _mm256_add_epi32(_mm256_cvtepi16_epi32(l8), _mm256_slli_epi32(_mm256_cvtepi16_epi32(g8), 8));
}

/* x16_group_k23 on AVX2, a whole group: the codes stay bytes, 32 of them
 * (two of each of the 16 rows) meet a pair of the token's low bytes and
 * of its high bytes in two vpmaddubsw (xs: x8_split), summed in int16 over
 * a half block (at most 8 x 2 x 255 x 7 = 28560: exact), then widened by
 * row half; each row half then takes its scales as x8 kernels do (the
 * same float steps, so the same bits). */
SIMD_INLINE void SIMD(x16_group_k23b)(const uint8_t *gp, const struct llm_qx16 *xq, const uint32_t *xs,
                                      int64_t ns, int q2, float *y)
{
    const __m256i three = _mm256_set1_epi8(3), four = _mm256_set1_epi8(4);
    __m256 acc[2] = { _mm256_setzero_ps(), _mm256_setzero_ps() };
    for (int64_t k = 0; k < ns; k++) {
        const uint8_t *blk = gp + (uint64_t)k * 16 * (q2 ? 84 : 110);
        const struct llm_qx16 *b = xq + 8 * k;
        const uint32_t *xk = xs + 8 * 32 * k;
        __m256i sc[2][16]; /* by row half */
        __m256 mn[2][16], d[2], dm[2];
        for (int r = 0; r < 2; r++) {
            SIMD(x8_k23_scales)(blk + 16 * r, q2, sc[r], mn[r]);
            d[r] = SIMD(x8_uf)(blk + 16 * r, q2 ? 40 : 54);
            dm[r] = SIMD(x8_k2_dm)(blk + 16 * r, q2);
        }
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            __m256i s[2][4][2]; /* row half, block 4h + j, half block e */
            for (int e = 0; e < 2; e++) {
                __m256i l0 = _mm256_setzero_si256(), l1 = l0, l2 = l0, l3 = l0;
                __m256i g0 = l0, g1 = l0, g2 = l0, g3 = l0;
#pragma GCC unroll 8
                for (int v = 8 * e; v < 8 * e + 8; v++) {
                    const __m256i q =
                        _mm256_loadu_si256((const __m256i *)(blk + 32 * ((q2 ? 8 : 16) + 16 * h + v)));
                    __m256i c0 = _mm256_and_si256(q, three);
                    __m256i c1 = _mm256_and_si256(_mm256_srli_epi16(q, 2), three);
                    __m256i c2 = _mm256_and_si256(_mm256_srli_epi16(q, 4), three);
                    __m256i c3 = _mm256_and_si256(_mm256_srli_epi16(q, 6), three);
                    if (!q2) { /* bit 4h + j of hmask's byte as 4 (within the byte) */
                        const __m256i hm = _mm256_loadu_si256((const __m256i *)(blk + 32 * v));
                        const __m256i h0 = h ? _mm256_srli_epi16(hm, 2) : _mm256_slli_epi16(hm, 2);
                        const __m256i h1 = h ? _mm256_srli_epi16(hm, 3) : _mm256_slli_epi16(hm, 1);
                        c0 = _mm256_or_si256(c0, _mm256_and_si256(h0, four));
                        c1 = _mm256_or_si256(c1, _mm256_and_si256(h1, four));
                        c2 = _mm256_or_si256(c2, _mm256_and_si256(h ? _mm256_srli_epi16(hm, 4) : hm, four));
                        c3 = _mm256_or_si256(c3, _mm256_and_si256(_mm256_srli_epi16(hm, h ? 5 : 1), four));
                    }
                    /* block 4h + j's pair v: low bytes at x[32 j + v], high 16 on */
                    const uint32_t *x = xk + 32 * 4 * h + v;
                    l0 = _mm256_add_epi16(l0, _mm256_maddubs_epi16(_mm256_set1_epi32((int)x[0]), c0));
                    g0 = _mm256_add_epi16(g0, _mm256_maddubs_epi16(c0, _mm256_set1_epi32((int)x[16])));
                    l1 = _mm256_add_epi16(l1, _mm256_maddubs_epi16(_mm256_set1_epi32((int)x[32]), c1));
                    g1 = _mm256_add_epi16(g1, _mm256_maddubs_epi16(c1, _mm256_set1_epi32((int)x[48])));
                    l2 = _mm256_add_epi16(l2, _mm256_maddubs_epi16(_mm256_set1_epi32((int)x[64]), c2));
                    g2 = _mm256_add_epi16(g2, _mm256_maddubs_epi16(c2, _mm256_set1_epi32((int)x[80])));
                    l3 = _mm256_add_epi16(l3, _mm256_maddubs_epi16(_mm256_set1_epi32((int)x[96]), c3));
                    g3 = _mm256_add_epi16(g3, _mm256_maddubs_epi16(c3, _mm256_set1_epi32((int)x[112])));
                }
                for (int r = 0; r < 2; r++) {
                    s[r][0][e] = SIMD(x8_lg)(l0, g0, r);
                    s[r][1][e] = SIMD(x8_lg)(l1, g1, r);
                    s[r][2][e] = SIMD(x8_lg)(l2, g2, r);
                    s[r][3][e] = SIMD(x8_lg)(l3, g3, r);
                }
            }
            for (int r = 0; r < 2; r++)
                for (int j = 0; j < 4; j++) {
                    const struct llm_qx16 *x = b + 4 * h + j;
                    const int B = 4 * h + j;
                    __m256i t0 = s[r][j][0], t1 = s[r][j][1];
                    if (!q2) {
                        t0 = _mm256_sub_epi32(t0, _mm256_set1_epi32(4 * x->h0));
                        t1 = _mm256_sub_epi32(t1, _mm256_set1_epi32(4 * llm_qx16_h1(x)));
                    }
                    const __m256i is = _mm256_add_epi32(_mm256_mullo_epi32(t0, sc[r][2 * B]),
                                                        _mm256_mullo_epi32(t1, sc[r][2 * B + 1]));
                    acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is), _mm256_mul_ps(d[r], _mm256_set1_ps(x->d)),
                                             acc[r]);
                    if (q2)
                        acc[r] = SIMD(q2min)(acc[r], mn[r][2 * B], mn[r][2 * B + 1], dm[r], x);
                }
        }
    }
    _mm256_storeu_ps(y, acc[0]);
    _mm256_storeu_ps(y + 8, acc[1]);
}

/* x16_xs_scales for a half group */
SIMD_INLINE void SIMD(x8_xs_scales)(const uint8_t *blk, __m256 D[8])
{
    const __m256 d = SIMD(x8_uf)(blk, 0);
    const __m256i sh = SIMD(x8_u16)(blk, 1);
    const __m256i sl = _mm256_or_si256(SIMD(x8_u16)(blk, 2), _mm256_slli_epi32(SIMD(x8_u16)(blk, 3), 16));
    for (int j = 0; j < 8; j++) {
        const __m256i ls = _mm256_or_si256(
            _mm256_and_si256(_mm256_srli_epi32(sl, 4 * j), _mm256_set1_epi32(15)),
            _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(sh, 2 * j), _mm256_set1_epi32(3)), 4));
        D[j] = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_sub_epi32(ls, _mm256_set1_epi32(32))));
    }
}

/* x16_xs_codes for a half group: looked up in bytes, then sign-extended */
SIMD_INLINE void SIMD(x8_xs_codes)(const uint8_t *blk, int j, int w, __m256i *lo, __m256i *hi)
{
    static const int8_t kv[16] = LLM_IQ4NL_VALUES;
    const __m128i lut = _mm_loadu_si128((const __m128i *)kv), f = _mm_set1_epi8(15);
    const __m128i v = SIMD(x8_b)(blk, 4 + 8 * j + w);
    *lo = _mm256_cvtepi8_epi16(_mm_shuffle_epi8(lut, _mm_and_si128(v, f)));
    *hi = _mm256_cvtepi8_epi16(_mm_shuffle_epi8(lut, _mm_and_si128(_mm_srli_epi16(v, 4), f)));
}

/* x16_group_xs for a half group */
SIMD_INLINE __m256 SIMD(x8_group_xs)(const uint8_t *gp, const struct llm_qx16 *xq, int64_t ns)
{
    __m256 acc = _mm256_setzero_ps();
    for (int64_t k = 0; k < ns; k++) {
        const uint8_t *blk = gp + (uint64_t)k * 16 * 136;
        const struct llm_qx16 *b = xq + 8 * k;
        __m256 D[8];
        SIMD(x8_xs_scales)(blk, D);
        for (int j = 0; j < 8; j++) {
            __m256i s0 = _mm256_setzero_si256(), s1 = s0;
#pragma GCC unroll 8
            for (int w = 0; w < 8; w++) {
                __m256i lo, hi;
                SIMD(x8_xs_codes)(blk, j, w, &lo, &hi);
                s0 = _mm256_add_epi32(s0, _mm256_madd_epi16(lo, SIMD(x8_pair)(b + j, 2 * w)));
                s1 = _mm256_add_epi32(s1, _mm256_madd_epi16(hi, SIMD(x8_pair)(b + j, 16 + 2 * w)));
            }
            acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_add_epi32(s0, s1)),
                                  _mm256_mul_ps(D[j], _mm256_set1_ps(b[j].d)), acc);
        }
    }
    return acc;
}

/* x16_k23_codes for a half group: the GEMM's form, sub-scales folded in */
SIMD_INLINE void SIMD(x8_k23_codes)(const uint8_t *blk, int q2, int h, int v, const __m256i sc[16],
                                    __m256i cj[4])
{
    const __m256i three = _mm256_set1_epi16(3);
    const __m256i q = SIMD(x8_u8)(blk, (q2 ? 8 : 16) + 16 * h + v);
    const __m256i hm = q2 ? q : SIMD(x8_u8)(blk, v);
    for (int j = 0; j < 4; j++) {
        __m256i c = _mm256_and_si256(_mm256_srli_epi16(q, 2 * j), three);
        if (!q2) /* + 4 hbit - 4 */
            c = _mm256_sub_epi16(_mm256_add_epi16(c, _mm256_slli_epi16(_mm256_and_si256(
                                     _mm256_srli_epi16(hm, 4 * h + j), _mm256_set1_epi16(1)), 2)),
                                 _mm256_set1_epi16(4));
        const __m256i g = _mm256_and_si256(sc[2 * (4 * h + j) + (v >> 3)], _mm256_set1_epi32(0xFFFF));
        cj[j] = _mm256_mullo_epi16(c, _mm256_or_si256(g, _mm256_slli_epi32(g, 16)));
    }
}

/* x16_k_to_packed on AVX2: the same tile, each half group's 8 lanes (o) */
SIMD_INLINE void SIMD(x16_k_to_packed)(enum llm_type t, const uint8_t *gp, int64_t ns, int32_t *P,
                                       float *D, float *M)
{
    const uint64_t bb = 16 * (uint64_t)llm_type_traits(t)->block_bytes;
    for (int64_t k = 0; k < ns; k++)
        for (int o = 0; o < 16; o += 8) {
            const uint8_t *blk = gp + (uint64_t)k * bb + 2 * o;
            if (t == LLM_TYPE_Q4_K || t == LLM_TYPE_Q5_K) {
                const int five = t == LLM_TYPE_Q5_K;
                __m256 Dv[8], Mv[8];
                SIMD(x8_k4_scales)(blk, Dv, Mv);
                for (int j = 0; j < 8; j++) {
                    _mm256_storeu_ps(D + (8 * k + j) * 16 + o, Dv[j]);
                    _mm256_storeu_ps(M + (8 * k + j) * 16 + o, Mv[j]);
                }
                for (int p = 0; p < 4; p++)
                    for (int u = 0; u < 16; u++) {
                        __m256i lo, hi;
                        SIMD(x8_k45_codes)(blk, five, p, u, &lo, &hi);
                        _mm256_storeu_si256((__m256i *)(P + (8 * k + 2 * p) * 256 + 16 * u + o), lo);
                        _mm256_storeu_si256((__m256i *)(P + (8 * k + 2 * p + 1) * 256 + 16 * u + o), hi);
                    }
            } else if (t == LLM_TYPE_IQ4_XS) {
                __m256 Dv[8];
                SIMD(x8_xs_scales)(blk, Dv);
                for (int j = 0; j < 8; j++) {
                    _mm256_storeu_ps(D + (8 * k + j) * 16 + o, Dv[j]);
                    _mm256_storeu_ps(M + (8 * k + j) * 16 + o, _mm256_setzero_ps());
                    for (int w = 0; w < 8; w++) {
                        __m256i lo, hi;
                        SIMD(x8_xs_codes)(blk, j, w, &lo, &hi);
                        _mm256_storeu_si256((__m256i *)(P + (8 * k + j) * 256 + 16 * w + o), lo);
                        _mm256_storeu_si256((__m256i *)(P + (8 * k + j) * 256 + 16 * (8 + w) + o), hi);
                    }
                }
            } else if (t == LLM_TYPE_Q3_K || t == LLM_TYPE_Q2_K) {
                const int q2 = t == LLM_TYPE_Q2_K;
                __m256i sc[16];
                __m256 mn[16];
                SIMD(x8_k23_scales)(blk, q2, sc, mn);
                const __m256 d = SIMD(x8_uf)(blk, q2 ? 40 : 54);
                const __m256 dm = SIMD(x8_k2_dm)(blk, q2);
                for (int B = 0; B < 8; B++) {
                    const int64_t q = 8 * k + B;
                    _mm256_storeu_ps(D + q * 16 + o, d);
                    if (q2) { /* M (nq, 3, 16): SIMD(q2min)'s m0, m1, dm */
                        _mm256_storeu_ps(M + 3 * q * 16 + o, mn[2 * B]);
                        _mm256_storeu_ps(M + (3 * q + 1) * 16 + o, mn[2 * B + 1]);
                        _mm256_storeu_ps(M + (3 * q + 2) * 16 + o, dm);
                    } else {
                        _mm256_storeu_ps(M + q * 16 + o, _mm256_setzero_ps());
                    }
                }
                for (int h = 0; h < 2; h++)
                    for (int v = 0; v < 16; v++) {
                        __m256i cj[4];
                        SIMD(x8_k23_codes)(blk, q2, h, v, sc, cj);
                        for (int j = 0; j < 4; j++)
                            _mm256_storeu_si256((__m256i *)(P + (8 * k + 4 * h + j) * 256 + 16 * v + o),
                                                cj[j]);
                    }
            } else { /* Q6_K */
                for (int B = 0; B < 8; B++) {
                    __m256 d0, d1;
                    SIMD(x8_k6_scales)(blk, B, &d0, &d1);
                    _mm256_storeu_ps(D + (2 * (8 * k + B)) * 16 + o, d0);
                    _mm256_storeu_ps(D + (2 * (8 * k + B) + 1) * 16 + o, d1);
                    _mm256_storeu_ps(M + (8 * k + B) * 16 + o, _mm256_setzero_ps());
                }
                for (int h = 0; h < 2; h++)
                    for (int v = 0; v < 16; v++) {
                        __m256i c[4];
                        SIMD(k6_bytes)(blk - 2 * o, h, v, c, c + 1, c + 2, c + 3); /* both halves */
                        for (int j = 0; j < 4; j++) {
                            const __m128i b =
                                o ? _mm256_extracti128_si256(c[j], 1) : _mm256_castsi256_si128(c[j]);
                            const __m256i w = _mm256_sub_epi16(_mm256_cvtepu8_epi16(b), _mm256_set1_epi16(32));
                            _mm256_storeu_si256((__m256i *)(P + (8 * k + 4 * h + j) * 256 + 16 * v + o), w);
                        }
                    }
            }
        }
}
#endif

/* The 8-bit types interleaved (q8_0, q8_g64/g128: signed codes; q8z_*:
 * unsigned, with a min): unit u of a block is the pair of elements (2u,
 * 2u+1) of all 16 rows, one widening to int16 lanes, row r in int32 lane r
 * (AVX2: two halves of 8 rows). */
SIMD_INLINE void SIMD(x16_codes8)(const uint8_t *c, int zp, SIMD(x16v) w[X16_H])
{
#ifdef SIMD_AVX512
    const __m256i v = _mm256_loadu_si256((const __m256i *)c);
    w[0] = zp ? _mm512_cvtepu8_epi16(v) : _mm512_cvtepi8_epi16(v);
#else
    for (int h = 0; h < 2; h++) {
        const __m128i v = _mm_loadu_si128((const __m128i *)(c + 16 * h));
        w[h] = zp ? _mm256_cvtepu8_epi16(v) : _mm256_cvtepi8_epi16(v);
    }
#endif
}

/* x16_group for the 8-bit types: y (16) = the rows . x. Unit u (pair
 * 2u, 2u+1 of the group's G elements) meets activation block u / 16, pair
 * u % 16; two sum chains per activation block (unit parity), then
 * gq_micro's float order per block. */
SIMD_INLINE void SIMD(x16_group8)(const uint8_t *gp, const struct llm_qx16 *xq, int64_t ng,
                                  int zp, int G, int BB, float *y)
{
    const int nsub = G / 32;
    const uint64_t bb = 16 * (uint64_t)BB;
#ifdef SIMD_AVX512
    __m512 acc[1] = { _mm512_setzero_ps() };
#else
    __m256 acc[2] = { _mm256_setzero_ps(), _mm256_setzero_ps() };
#endif
    for (int64_t k = 0; k < ng; k++) {
        const uint8_t *blk = gp + (uint64_t)k * bb, *cq = blk + (zp ? 64 : 32);
        const struct llm_qx16 *b = xq + k * nsub;
        SIMD(x16v) s[X16_H][8];
        for (int h = 0; h < X16_H; h++)
            for (int c = 0; c < 2 * nsub; c++)
#ifdef SIMD_AVX512
                s[h][c] = _mm512_setzero_si512();
#else
                s[h][c] = _mm256_setzero_si256();
#endif
#pragma GCC unroll 16
        for (int u = 0; u < G / 2; u++) {
            SIMD(x16v) w[X16_H];
            SIMD(x16_codes8)(cq + 32 * u, zp, w);
            int32_t pr;
            memcpy(&pr, b[u / 16].qs + 2 * (u % 16), 4);
            const int c = 2 * (u / 16) + (u & 1);
            for (int h = 0; h < X16_H; h++)
#ifdef SIMD_AVX512
                s[h][c] = _mm512_dpwssd_epi32(s[h][c], w[h], _mm512_set1_epi32(pr));
#else
                s[h][c] = _mm256_add_epi32(s[h][c], _mm256_madd_epi16(w[h], _mm256_set1_epi32(pr)));
#endif
        }
        for (int h = 0; h < X16_H; h++) {
#ifdef SIMD_AVX512
            const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)blk));
            const __m512 m = zp ? _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(blk + 32)))
                                : _mm512_setzero_ps();
            for (int j = 0; j < nsub; j++) {
                const __m512i is = _mm512_add_epi32(s[h][2 * j], s[h][2 * j + 1]);
                acc[h] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(is),
                                         _mm512_mul_ps(d, _mm512_set1_ps(b[j].d)), acc[h]);
                if (zp)
                    acc[h] = _mm512_fmadd_ps(m, _mm512_set1_ps(b[j].ds), acc[h]);
            }
#else
            const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(blk + 16 * h)));
            const __m256 m =
                zp ? _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(blk + 32 + 16 * h)))
                   : _mm256_setzero_ps();
            for (int j = 0; j < nsub; j++) {
                const __m256i is = _mm256_add_epi32(s[h][2 * j], s[h][2 * j + 1]);
                acc[h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is),
                                         _mm256_mul_ps(d, _mm256_set1_ps(b[j].d)), acc[h]);
                if (zp)
                    acc[h] = _mm256_fmadd_ps(m, _mm256_set1_ps(b[j].ds), acc[h]);
            }
#endif
        }
    }
#ifdef SIMD_AVX512
    _mm512_storeu_ps(y, acc[0]);
#else
    _mm256_storeu_ps(y, acc[0]);
    _mm256_storeu_ps(y + 8, acc[1]);
#endif
}

#ifdef SIMD_AVX512
/* Two to four tokens of a group of 16 rows at once (AVX-512; AVX2's 16
 * registers hold the sums of one): y + t ldy (16) = the rows . token t,
 * whose blocks are xq + t nq, the codes widened once for all of them. The
 * int32 sums are exact, so their split into chains does not change them:
 * here one chain per token and activation block (the tokens are chains
 * enough), where x16_group keeps two. Per token and activation block,
 * x16_group's order of float operations: each token's result is decode's
 * bit for bit. Each token's sums are an array of their own: in one array
 * GCC kept them in memory. */
#define X16_MULTI 4

/* acc + block j's int32 sums s[j] times the 16 scales and the token's
 * block scale, then + the 16 minimums times its ds (zero points), j < nsub */
SIMD_INLINE __m512 SIMD(x16_fold)(__m512 acc, const __m512i *s, int nsub, const uint8_t *blk,
                                  const struct llm_qx16 *b, int zp)
{
    const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)blk));
    const __m512 m = zp ? _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(blk + 32))) : d;
#pragma GCC unroll 4
    for (int j = 0; j < nsub; j++) {
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s[j]), _mm512_mul_ps(d, _mm512_set1_ps(b[j].d)),
                              acc);
        if (zp)
            acc = _mm512_fmadd_ps(m, _mm512_set1_ps(b[j].ds), acc);
    }
    return acc;
}

#define X16_TOKENS(X) X(0) X(1) X(2) X(3)

/* x16_group (q8: x16_group8) for NT tokens, NT and the shape constants */
SIMD_INLINE void SIMD(x16_group_n)(const uint8_t *gp, const struct llm_qx16 *xq, int64_t nq,
                                   int64_t ng, int q8, int zp, int G, int BB, float *y,
                                   int64_t ldy, int NT)
{
    const int nsub = G / 32;
    const uint64_t bb = 16 * (uint64_t)BB;
#define X16_ACC(t) __m512 acc##t = _mm512_setzero_ps();
    X16_TOKENS(X16_ACC)
#undef X16_ACC
    for (int64_t k = 0; k < ng; k++) {
        const uint8_t *blk = gp + (uint64_t)k * bb, *cq = blk + (zp ? 64 : 32);
        /* token t's blocks, and its sums: block j's starts at its -8 sum(q)
         * (4-bit symmetric types) */
#define X16_INIT(t)                                                                   \
    const struct llm_qx16 *b##t = xq + (uint64_t)(t < NT ? t : 0) * nq + k * nsub;    \
    __m512i s##t[4];                                                                  \
    _Pragma("GCC unroll 4") for (int j = 0; j < 4; j++)                               \
        s##t[j] = _mm512_set1_epi32(!q8 && !zp && j < nsub ? b##t[j].m8 : 0);
        X16_TOKENS(X16_INIT)
#undef X16_INIT
        int32_t p;
#define X16_DP(t, j, w, src)                                         \
    if (t < NT) {                                                    \
        memcpy(&p, src, 4);                                          \
        s##t[j] = _mm512_dpwssd_epi32(s##t[j], w, _mm512_set1_epi32(p)); \
    }
        if (q8) {
            /* unit u: the pair (2u, 2u+1), activation block u / 16 */
#pragma GCC unroll 64 /* all of it: the sums' indices must be constants */
            for (int u = 0; u < G / 2; u++) {
                __m512i w;
                SIMD(x16_codes8)(cq + 32 * u, zp, &w);
                const int j = u / 16, o = 2 * (u % 16);
#define X16_D8(t) X16_DP(t, j, w, b##t[j].qs + o)
                X16_TOKENS(X16_D8)
#undef X16_D8
            }
        } else {
            /* unit u: low nibbles elements 2u, 2u+1, high 2u + G/2, ... */
#pragma GCC unroll 32
            for (int u = 0; u < G / 4; u++) {
                __m512i lo, hi;
                SIMD(x16_codes)(cq + 32 * u, &lo, &hi);
                const int el = 2 * u, eh = 2 * u + G / 2, jl = el / 32, jh = eh / 32;
#define X16_D4(t)                                 \
    X16_DP(t, jl, lo, b##t[jl].qs + el % 32)      \
    X16_DP(t, jh, hi, b##t[jh].qs + eh % 32)
                X16_TOKENS(X16_D4)
#undef X16_D4
            }
        }
#undef X16_DP
#define X16_FOLD(t)                                                \
    if (t < NT)                                                    \
        acc##t = SIMD(x16_fold)(acc##t, s##t, nsub, blk, b##t, zp);
        X16_TOKENS(X16_FOLD)
#undef X16_FOLD
    }
#define X16_OUT(t)                             \
    if (t < NT)                                \
        _mm512_storeu_ps(y + t * ldy, acc##t);
    X16_TOKENS(X16_OUT)
#undef X16_OUT
}
#undef X16_TOKENS
#endif

/* The float types interleaved (f32, f16, bf16): element k of the 16 rows
 * of a group side by side (k-major), so that one load gives row i in lane
 * i and every product is one FMA a token, with no reduction across lanes:
 * per row and token a single chain over k, the same whatever the number of
 * tokens. */
#ifdef SIMD_AVX512
#define XF_NT 12
#define XF_NT2 8 /* tokens of the two-stream tile: 16 accumulators */
#define XF_H 1
typedef __m512 SIMD(xfv);
#else
#define XF_NT 4
#define XF_NT2 2 /* tokens of the two-stream tile: 8 accumulators */
#define XF_H 2
typedef __m256 SIMD(xfv);
#endif

/* the 16 rows' element k (lanes 8h .. 8h+7 on AVX2) */
SIMD_INLINE SIMD(xfv) SIMD(xf_load)(const uint8_t *g, int64_t k, int ft, int h)
{
#ifdef SIMD_AVX512
    (void)h;
    if (ft == LLM_TYPE_F32)
        return _mm512_loadu_ps((const float *)g + 16 * k);
    const __m256i v = _mm256_loadu_si256((const __m256i *)(g + 32 * k));
    if (ft == LLM_TYPE_F16)
        return _mm512_cvtph_ps(v);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(v), 16));
#else
    if (ft == LLM_TYPE_F32)
        return _mm256_loadu_ps((const float *)g + 16 * k + 8 * h);
    const __m128i v = _mm_loadu_si128((const __m128i *)(g + 32 * k + 16 * h));
    if (ft == LLM_TYPE_F16)
        return _mm256_cvtph_ps(v);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(v), 16));
#endif
}

/* y[t][16 rows] of NG groups (1 or 2: two chains for decode) and NT
 * tokens of X (ne0 floats each, ldx apart) */
SIMD_INLINE void SIMD(xf_tile)(const uint8_t *const *g, int NG, int ft, const float *X, int64_t ldx,
                               int64_t ne0, int NT, float *const *y, int64_t ldy)
{
    SIMD(xfv) acc[2][XF_NT][XF_H];
    for (int j = 0; j < NG; j++)
        for (int t = 0; t < NT; t++)
            for (int h = 0; h < XF_H; h++)
#ifdef SIMD_AVX512
                acc[j][t][h] = _mm512_setzero_ps();
#else
                acc[j][t][h] = _mm256_setzero_ps();
#endif
    for (int64_t k = 0; k < ne0; k++) {
        SIMD(xfv) w[2][XF_H];
        for (int j = 0; j < NG; j++)
            for (int h = 0; h < XF_H; h++)
                w[j][h] = SIMD(xf_load)(g[j], k, ft, h);
#pragma GCC unroll 12
        for (int t = 0; t < NT; t++) {
#ifdef SIMD_AVX512
            const __m512 xb = _mm512_set1_ps(X[t * ldx + k]);
            for (int j = 0; j < NG; j++)
                acc[j][t][0] = _mm512_fmadd_ps(w[j][0], xb, acc[j][t][0]);
#else
            const __m256 xb = _mm256_set1_ps(X[t * ldx + k]);
            for (int j = 0; j < NG; j++)
                for (int h = 0; h < 2; h++)
                    acc[j][t][h] = _mm256_fmadd_ps(w[j][h], xb, acc[j][t][h]);
#endif
        }
    }
    for (int j = 0; j < NG; j++)
        for (int t = 0; t < NT; t++)
            for (int h = 0; h < XF_H; h++)
#ifdef SIMD_AVX512
                _mm512_storeu_ps(y[j] + t * ldy, acc[j][t][0]);
#else
                _mm256_storeu_ps(y[j] + t * ldy + 8 * h, acc[j][t][h]);
#endif
}

/* Y[b*ldy + r] for b < nb, r in [r0, r1) (multiples of 16) of interleaved
 * float rows P */
static void SIMD(xf_products)(enum llm_type t, const uint8_t *P, const float *X, float *Y,
                              int64_t ne0, int64_t nb, int64_t ldy, int64_t r0, int64_t r1)
{
    const uint64_t gb = 16 * (uint64_t)ne0 * (t == LLM_TYPE_F32 ? 4 : 2);
    const int ft = (int)t;
    int64_t g = r0 / 16;
    if (nb <= XF_NT2) {
        /* decode, and the few tokens of a speculative check: two groups at
         * a time from separate halves of the range, so that the hardware
         * prefetchers see two sequential streams (adjacent groups measured
         * 1.5x slower from DRAM; for one token the two also make two
         * chains to hide the FMA's latency). Each product is the same FMA
         * chain over k whatever the grouping: the same bits. */
        const int64_t h = (r1 / 16 - g) / 2;
        for (int64_t i = 0; i < h; i++) {
            const uint8_t *gp[2] = { P + (uint64_t)(g + i) * gb, P + (uint64_t)(g + h + i) * gb };
            float *yp[2] = { Y + 16 * (g + i), Y + 16 * (g + h + i) };
            /* constant counts, so that the loops unroll */
            switch (nb) {
#define XF_CASE2(n)                                              \
    case n:                                                      \
        SIMD(xf_tile)(gp, 2, ft, X, ne0, ne0, n, yp, ldy);       \
        break;
                XF_CASE2(1) XF_CASE2(2)
#if XF_NT2 > 2
                XF_CASE2(3) XF_CASE2(4) XF_CASE2(5) XF_CASE2(6) XF_CASE2(7) XF_CASE2(8)
#endif
#undef XF_CASE2
            default:
                break;
            }
        }
        g += 2 * h;
    }
    for (; g < r1 / 16; g++) {
        const uint8_t *gp[1] = { P + (uint64_t)g * gb };
        for (int64_t b = 0; b < nb; b += XF_NT) {
            const int nt = nb - b < XF_NT ? (int)(nb - b) : XF_NT;
            float *yp[1] = { Y + b * ldy + 16 * g };
            /* constant counts, so that the loops unroll */
            switch (nt) {
#define XF_CASE(n)                                                          \
    case n:                                                                 \
        SIMD(xf_tile)(gp, 1, ft, X + b * ne0, ne0, ne0, n, yp, ldy); \
        break;
                XF_CASE(1) XF_CASE(2) XF_CASE(3) XF_CASE(4)
#if XF_NT > 4
                XF_CASE(5) XF_CASE(6) XF_CASE(7) XF_CASE(8) XF_CASE(9) XF_CASE(10) XF_CASE(11)
                XF_CASE(12)
#endif
#undef XF_CASE
            default:
                break;
            }
        }
    }
}

#include "matmul_gemm.h"

// ----------------------------------------------------------------------------
// entry points

/* activation blocks kept on the stack up to this many (20 KiB) */
#define SIMD_STACK_QX 512

#include "matmul_kq.h"

/* gcc cannot see that quantize_x writes every block it later reads */
#if !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
llm_status SIMD(llm_matmul)(enum llm_type t, const void *W, const float *X, float *Y, int64_t ne0,
                            uint64_t rb, int64_t nb, int64_t ldy, int64_t r0, int64_t r1, int act,
                            int inv)
{
    /* the GGUF block types: int16 activations always, one path for any
     * number of tokens (batch-invariant by construction) */
    if (llm_kq_type(t))
        return SIMD(kq_matmul)(t, W, rb, X, Y, ne0, nb, ldy, r0, r1);
    struct SIMD(shape) sh;
    const int quant = SIMD(shape_of)(t, &sh);
    /* Batch-invariant (the default): each row is computed the same way
     * for any number of tokens, so that a token's result is decode's: the
     * int16 GEMM for the integer types under int16 activations (it is
     * their decode too), the row kernels for everything else. Otherwise
     * the fastest kernel for the number of tokens. */
    if (quant && act == LLM_ACT_Q16) {
#ifdef SIMD_AVX512
        if (inv && nb == 1)
            return SIMD(gq_decode)(t, W, rb, X, Y, ne0, r0, r1);
        if (inv || nb >= LLM_MATMUL_GEMM_MIN_NB)
#else
        if (inv && nb == 1)
            return SIMD(gq_decode)(t, W, rb, X, Y, ne0, r0, r1);
        if (inv)
#endif
            return SIMD(gemm_q16)(t, &sh, W, rb, X, Y, ne0, nb, ldy, r0, r1, 0);
    }
    if (!inv && nb >= LLM_MATMUL_GEMM_MIN_NB && (!quant || act != LLM_ACT_Q8))
        return SIMD(gemm)(t, W, rb, X, Y, ne0, nb, ldy, r0, r1);
    if (!quant) {
        SIMD(rows_f)(t, W, rb, X, ne0, Y, nb, ldy, r0, r1);
        return LLM_OK;
    }
    const int64_t nq = (ne0 + 31) / 32;
    if (act == LLM_ACT_Q16) {
        struct llm_qx16 stack16[SIMD_STACK_QX / 2], *xq16;
        LLM_TRY(SIMD(quantize_x16_all)(X, ne0, nb, stack16, SIMD_STACK_QX / 2, &xq16));
        SIMD(rows_q16)(t, W, rb, xq16, nq, ne0, Y, nb, ldy, r0, r1);
        if (xq16 != stack16)
            llm_free(xq16);
        return LLM_OK;
    }
    if (act == LLM_ACT_F32) {
        float fstack[SIMD_STACK_QX], *sx = fstack;
        uint64_t n;
        if (!llm_mul_ok((uint64_t)nq, (uint64_t)nb, &n) || !llm_mul_ok(n, sizeof(float), &n))
            return llm_error_set(LLM_E_NOMEM, "matmul: %lld tokens of %lld elements overflow",
                                 (long long)nb, (long long)ne0);
        if (n > sizeof fstack) {
            sx = llm_malloc((size_t)n);
            if (!sx)
                return LLM_E_NOMEM;
        }
        for (int64_t b = 0; b < nb; b++)
            for (int64_t k = 0; k < nq; k++) {
                const float *xb = X + b * ne0 + 32 * k;
                float s = 0.0f;
                for (int64_t j = 0; j < 32 && 32 * k + j < ne0; j++)
                    s += xb[j];
                sx[b * nq + k] = s;
            }
        SIMD(rows_qf)(t, W, rb, X, sx, nq, ne0, Y, nb, ldy, r0, r1);
        if (sx != fstack)
            llm_free(sx);
        return LLM_OK;
    }
    struct llm_qx stack[SIMD_STACK_QX], *xq = stack;
    uint64_t n;
    if (!llm_mul_ok((uint64_t)nq, (uint64_t)nb, &n) ||
        !llm_mul_ok(n, sizeof(struct llm_qx), &n))
        return llm_error_set(LLM_E_NOMEM, "matmul: %lld tokens of %lld elements overflow",
                             (long long)nb, (long long)ne0);
    if (n > sizeof stack) {
        xq = llm_malloc((size_t)n);
        if (!xq)
            return LLM_E_NOMEM;
    }
    for (int64_t b = 0; b < nb; b++)
        SIMD(quantize_x)(X + b * ne0, ne0, xq + b * nq);
    SIMD(rows_q)(t, W, rb, xq, nq, ne0, Y, nb, ldy, r0, r1);
    if (xq != stack)
        llm_free(xq);
    return LLM_OK;
}
#if !defined(__clang__)
#pragma GCC diagnostic pop
#endif

llm_status SIMD(llm_matvec)(enum llm_type t, const void *W, const float *x, float *y, int64_t ne0,
                            uint64_t rb, int64_t r0, int64_t r1, int act, int inv)
{
    /* y (rows) is Y with one token: ldy is never used for b = 0 */
    return SIMD(llm_matmul)(t, W, x, y, ne0, rb, 1, 0, r0, r1, act, inv);
}

/* The integer types of the interleaved layout (matmul.c x16_group) and
 * their shapes, as constants for the kernels' loops to unroll: X(type,
 * 8-bit codes, zero points, elements a scale G, bytes a row's block BB) */
#define X16_INT_TYPES(X)                    \
    X(LLM_TYPE_Q4_0, 0, 0, 32, 18)          \
    X(LLM_TYPE_Q4_1, 0, 1, 32, 20)          \
    X(LLM_TYPE_Q4_G64, 0, 0, 64, 34)        \
    X(LLM_TYPE_Q4Z_G64, 0, 1, 64, 36)       \
    X(LLM_TYPE_Q4_G128, 0, 0, 128, 66)      \
    X(LLM_TYPE_Q4Z_G128, 0, 1, 128, 68)     \
    X(LLM_TYPE_Q8_0, 1, 0, 32, 34)          \
    X(LLM_TYPE_Q8_G64, 1, 0, 64, 66)        \
    X(LLM_TYPE_Q8_G128, 1, 0, 128, 130)     \
    X(LLM_TYPE_Q8Z_G32, 1, 1, 32, 36)       \
    X(LLM_TYPE_Q8Z_G64, 1, 1, 64, 68)       \
    X(LLM_TYPE_Q8Z_G128, 1, 1, 128, 132)

llm_status SIMD(llm_matvec_x16)(enum llm_type t, const void *P, const float *x, float *y,
                                int64_t ne0, int64_t r0, int64_t r1)
{
    if (t == LLM_TYPE_F32 || t == LLM_TYPE_F16 || t == LLM_TYPE_BF16) {
        SIMD(xf_products)(t, P, x, y, ne0, 1, 0, r0, r1);
        return LLM_OK;
    }
    struct llm_qx16 stack[SIMD_STACK_QX / 2], *xq;
    if (llm_kq_type(t)) { /* Q2_K to Q6_K, IQ4_XS */
#ifdef SIMD_AVX512
        LLM_TRY(SIMD(quantize_x16_all)(x, ne0, 1, stack, SIMD_STACK_QX / 2, &xq));
        const int64_t ns = ne0 / 256;
        const uint64_t gb = (uint64_t)ns * 16 * llm_type_traits(t)->block_bytes;
        if (t != LLM_TYPE_IQ4_XS)
            SIMD(x16_split)(xq, 8 * ns);
        for (int64_t g = r0 / 16; g < r1 / 16; g++) {
            const uint8_t *gp = (const uint8_t *)P + (uint64_t)g * gb;
            if (t == LLM_TYPE_Q6_K)
                SIMD(x16_group_k6)(gp, xq, ns, y + 16 * g);
            else if (t == LLM_TYPE_Q3_K)
                SIMD(x16_group_k23)(gp, xq, ns, 0, y + 16 * g);
            else if (t == LLM_TYPE_Q2_K)
                SIMD(x16_group_k23)(gp, xq, ns, 1, y + 16 * g);
            else if (t == LLM_TYPE_IQ4_XS)
                SIMD(x16_group_xs)(gp, xq, ns, y + 16 * g);
            else /* constant, so that the code loop unrolls apart */
                t == LLM_TYPE_Q5_K ? SIMD(x16_group_k4)(gp, xq, ns, 1, y + 16 * g)
                                   : SIMD(x16_group_k4)(gp, xq, ns, 0, y + 16 * g);
        }
        if (xq != stack)
            llm_free(xq);
        return LLM_OK;
#else /* AVX2: whole groups, Q4_K and IQ4_XS by half groups */
        LLM_TRY(SIMD(quantize_x16_all)(x, ne0, 1, stack, SIMD_STACK_QX / 2, &xq));
        const int64_t ns = ne0 / 256;
        const uint64_t gb = (uint64_t)ns * 16 * llm_type_traits(t)->block_bytes;
        const int split = t == LLM_TYPE_Q2_K || t == LLM_TYPE_Q3_K; /* x16_group_k23b's bytes */
        uint32_t xstack[32 * 64], *xs = xstack; /* (8 ns, 32) */
        if (split && 8 * ns > 64 && !(xs = llm_malloc((size_t)ns * 8 * 32 * sizeof *xs))) {
            if (xq != stack)
                llm_free(xq);
            return LLM_E_NOMEM;
        }
        if (split)
            SIMD(x8_split)(xq, 8 * ns, xs);
        for (int64_t g = r0 / 16; g < r1 / 16; g++) {
            const uint8_t *gp = (const uint8_t *)P + (uint64_t)g * gb;
            float *yg = y + 16 * g;
            switch (t) { /* constants, so that the code loops unroll apart */
            case LLM_TYPE_Q2_K: SIMD(x16_group_k23b)(gp, xq, xs, ns, 1, yg); break;
            case LLM_TYPE_Q3_K: SIMD(x16_group_k23b)(gp, xq, xs, ns, 0, yg); break;
            case LLM_TYPE_Q5_K: SIMD(x16_group_k5b)(gp, xq, ns, yg); break;
            case LLM_TYPE_Q6_K: SIMD(x16_group_k6b)(gp, xq, ns, yg); break;
            default: /* Q4_K, IQ4_XS */
                for (int h = 0; h < 2; h++)
                    _mm256_storeu_ps(yg + 8 * h, t == LLM_TYPE_IQ4_XS
                                                     ? SIMD(x8_group_xs)(gp + 16 * h, xq, ns)
                                                     : SIMD(x8_group_k4)(gp + 16 * h, xq, ns));
                break;
            }
        }
        if (xs != xstack)
            llm_free(xs);
        if (xq != stack)
            llm_free(xq);
        return LLM_OK;
#endif
    }
    struct SIMD(shape) sh;
    SIMD(shape_of)(t, &sh);
    const int64_t ng = ne0 / sh.G;
    const uint64_t gbytes = (uint64_t)ng * 16 * (uint64_t)sh.BB; /* a group of 16 rows */
    LLM_TRY(SIMD(quantize_x16_all)(x, ne0, 1, stack, SIMD_STACK_QX / 2, &xq));
    for (int64_t g = r0 / 16; g < r1 / 16; g++) {
        const uint8_t *gp = (const uint8_t *)P + (uint64_t)g * gbytes;
        float *yg = y + 16 * g;
        /* constant shapes, so that x16_group's loops unroll (matmul.c's
         * x16_check has refused every other type) */
        switch (t) {
#define X16_DEC(T, q8, zp, G, BB)                               \
    case T:                                                     \
        if (q8)                                                 \
            SIMD(x16_group8)(gp, xq, ng, zp, G, BB, yg);        \
        else                                                    \
            SIMD(x16_group)(gp, xq, ng, zp, G, BB, yg);         \
        break;
            X16_INT_TYPES(X16_DEC)
#undef X16_DEC
        default:
            break;
        }
    }
    if (xq != stack)
        llm_free(xq);
    return LLM_OK;
}

#ifdef X16_MULTI
/* Y[j ldy + r] for tokens j < nt (2 to X16_MULTI) and the 16 rows r of
 * group g of interleaved integer rows P . the tokens' blocks xq + j nq */
SIMD_INLINE void SIMD(x16_multi)(enum llm_type t, const void *P, const struct llm_qx16 *xq,
                                 int64_t ne0, float *Y, int64_t ldy, int64_t g, int nt)
{
    struct SIMD(shape) sh;
    SIMD(shape_of)(t, &sh);
    const int64_t nq = ne0 / 32, ng = ne0 / sh.G;
    const uint8_t *gp = (const uint8_t *)P + (uint64_t)g * (uint64_t)ng * 16 * (uint64_t)sh.BB;
    float *yg = Y + 16 * g;
    /* constant shapes, so that the loops unroll */
    switch (t) {
#define X16_M(T, q8, zp, G, BB) \
    case T: SIMD(x16_group_n)(gp, xq, nq, ng, q8, zp, G, BB, yg, ldy, nt); break;
        X16_INT_TYPES(X16_M)
#undef X16_M
    default:
        break;
    }
}

/* x16_multi for each token count apart (constant, so that the tokens'
 * sums fold away past it) */
#define X16_MULTI_FN(n)                                                                   \
    static __attribute__((noinline)) void SIMD(x16_multi##n)(                             \
        enum llm_type t, const void *P, const struct llm_qx16 *xq, int64_t ne0, float *Y, \
        int64_t ldy, int64_t g)                                                           \
    {                                                                                     \
        SIMD(x16_multi)(t, P, xq, ne0, Y, ldy, g, n);                                     \
    }
X16_MULTI_FN(2)
X16_MULTI_FN(3)
X16_MULTI_FN(4)
#undef X16_MULTI_FN

/* Y[j ldy + r] for tokens j < nb (2 to llm_x16_few_max()) and rows r in
 * [r0, r1) of interleaved integer rows P: each group of 16 rows passes all
 * the tokens, two to four at a time (x16_group_n), while it stays in cache
 * (2 tokens of a SmolLM2 q4 draft took 1.7 times one through the int16
 * GEMM, 1.2 here). */
static llm_status SIMD(x16_few)(enum llm_type t, const void *P, const float *X, float *Y,
                                int64_t ne0, int64_t nb, int64_t ldy, int64_t r0, int64_t r1)
{
    const int64_t nq = ne0 / 32;
    struct llm_qx16 stack[SIMD_STACK_QX / 2], *xq;
    LLM_TRY(SIMD(quantize_x16_all)(X, ne0, nb, stack, SIMD_STACK_QX / 2, &xq));
    /* passes of sizes as equal as can be (13 tokens: 4 3 3 3; never 1) */
    const int64_t passes = (nb + X16_MULTI - 1) / X16_MULTI;
    for (int64_t g = r0 / 16; g < r1 / 16; g++)
        for (int64_t i = 0, b = 0; i < passes; i++) {
            const int64_t m = nb / passes + (i < nb % passes);
            const struct llm_qx16 *xb = xq + b * nq;
            float *yb = Y + b * ldy;
            switch (m) {
            case 2: SIMD(x16_multi2)(t, P, xb, ne0, yb, ldy, g); break;
            case 3: SIMD(x16_multi3)(t, P, xb, ne0, yb, ldy, g); break;
            default: SIMD(x16_multi4)(t, P, xb, ne0, yb, ldy, g); break; /* 4 */
            }
            b += m;
        }
    if (xq != stack)
        llm_free(xq);
    return LLM_OK;
}
#endif

/* Products of several tokens on interleaved rows: 2 to llm_x16_few_max() tokens
 * of the integer types by the group kernels (AVX-512), more by the int16
 * GEMM reading the groups in place; each token's result is
 * SIMD(llm_matvec_x16)'s. */
llm_status SIMD(llm_matmul_x16)(enum llm_type t, const void *P, const float *X, float *Y,
                                int64_t ne0, int64_t nb, int64_t ldy, int64_t r0, int64_t r1)
{
    if (t == LLM_TYPE_F32 || t == LLM_TYPE_F16 || t == LLM_TYPE_BF16) {
        SIMD(xf_products)(t, P, X, Y, ne0, nb, ldy, r0, r1);
        return LLM_OK;
    }
    if (llm_kq_type(t)) { /* Q2_K to Q6_K, IQ4_XS: their groups packed a tile at a time */
        const struct SIMD(shape) ks = { llm_kq_has_min(t) ? F_ZP8 : F_SYM8, 32, 0, 0 };
        return SIMD(gemm_q16)(t, &ks, P, 0, X, Y, ne0, nb, ldy, r0, r1, 1);
    }
#ifdef X16_MULTI
    if (nb >= 2 && nb <= llm_x16_few_max())
        return SIMD(x16_few)(t, P, X, Y, ne0, nb, ldy, r0, r1);
#endif
    struct SIMD(shape) sh;
    SIMD(shape_of)(t, &sh);
    return SIMD(gemm_q16)(t, &sh, P, 0, X, Y, ne0, nb, ldy, r0, r1, 1);
}
