/* matmul.c: the reference products of packed weight rows with float
 * activations, and the run-time dispatch to the SIMD variants.
 *
 * The references work block by block on the packed row: the dot of the
 * block's codes with x, times the block scale, plus min * sum(x) for the
 * zero-point types; a row is never dequantized. Sums are kept in double
 * (the references are also the production path of nf4 and fp8, where a
 * scalar double FMA costs what a float one does).
 *
 * Tolerances (checked by tests/unit/ops/test_matmul.c), with w the row as
 * llm_dequantize_row returns it and S = sum|w_i x_i| + max|w| sum|x_i|:
 *   _ref vs a double dot of the dequantized row     2e-6 S (w_i is rounded
 *                                                    once to float there)
 *   SIMD f32/f16/bf16/nf4/nf4_dq/fp8 vs _ref        1e-5 S
 *   SIMD int8/int4 types vs _ref, by the activations they meet
 *   (llm_matmul_set_act), with A = sum over blocks b of 32 of
 *   (max|x_b| / 254) sum_{i in b} |w_i|:
 *       float                                       1e-5 S
 *       int16 (the default)                         A / 258 + 1e-5 S
 *       int8 (llama.cpp's W4A8/W8A8)                A + 1e-5 S
 *   llm_matmul from LLM_MATMUL_GEMM_MIN_NB tokens on (the prefill GEMMs of
 *   matmul_gemm.h): every type but the int8/int4 ones under int8 or int16
 *   activations: float activations               1e-5 S
 *   (the int8/int4 types under int16 activations run an int16 GEMM on
 *   AVX-512 VNNI, with the int16 bound; the AVX2 variant keeps the float
 *   GEMM for them)
 * A is the int8 rounding of the activations (half a step of
 * d = max|x_b|/127 per element) and nothing else: the integer dot products
 * are exact. On Gaussian data int8 costs about 0.55% of |y| (the test
 * requires ||y_simd - y_ref|| / ||y_ref|| < 1e-2), int16 3e-5 (< 1e-4); on
 * SmolLM2-135M's activations, whose outliers reach 20x their rms, int8
 * costs 1-4% per product and changes greedy answers; int16 does not.
 */
#include "matmul.h"

#include <math.h>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "../common/alloc.h"
#include "../common/fp16.h"
#include "../quant/kquants.h"
#include "../quant/quant.h"
#include "matmul_impl.h"

// ----------------------------------------------------------------------------
// type families

enum kind {
    K_NONE, K_F32, K_F16, K_BF16, K_SYM8, K_ZP8, K_SYM4, K_ZP4, K_NF4, K_NF4DQ, K_FP8, K_ZP3,
    K_GGUF /* Q5_0 .. IQ4_XS (quant/kquants.h) */
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

static const float nf4_values[16] = LLM_NF4_VALUES;

// rows may sit at any address: read scalars byte by byte

static inline uint16_t ld16(const uint8_t *p)
{
    return (uint16_t)(p[0] | (p[1] << 8));
}

static inline float ldf(const uint8_t *p)
{
    return llm_bits_f32((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                        (uint32_t)p[3] << 24);
}

static inline float h2f(const uint8_t *p)
{
    return llm_fp16_to_fp32(ld16(p));
}

static float fp8_table[256];
static pthread_once_t fp8_once = PTHREAD_ONCE_INIT;

static void fp8_init(void)
{
    for (int i = 0; i < 256; i++)
        fp8_table[i] = llm_fp8_e4m3_to_fp32((uint8_t)i);
}

const float *llm_matmul_fp8_table(void)
{
    pthread_once(&fp8_once, fp8_init);
    return fp8_table;
}

/* Code j of a 4-bit block of G elements (blocks.h nibble order). */
static inline int nib(const uint8_t *qs, int64_t j, int64_t G)
{
    return j < G / 2 ? qs[j] & 15 : qs[j - G / 2] >> 4;
}

// ----------------------------------------------------------------------------
// the reference dot of one packed row with x (ne0)

static float dot_row_ref(enum llm_type t, enum kind k, const struct llm_type_traits *tr,
                         const uint8_t *row,
                         const float *x, int64_t ne0)
{
    const int64_t hdr = tr->row_header, BB = tr->block_bytes;
    /* per-row types with 1-element "blocks" are one block of ne0 codes */
    const int64_t G = tr->blck == 1 ? ne0 : (int64_t)tr->blck;
    double sum = 0.0;

    switch (k) {
    case K_F32:
        for (int64_t j = 0; j < ne0; j++)
            sum += (double)ldf(row + 4 * j) * x[j];
        return (float)sum;
    case K_F16:
        for (int64_t j = 0; j < ne0; j++)
            sum += (double)llm_fp16_to_fp32(ld16(row + 2 * j)) * x[j];
        return (float)sum;
    case K_BF16:
        for (int64_t j = 0; j < ne0; j++)
            sum += (double)llm_bf16_to_fp32(ld16(row + 2 * j)) * x[j];
        return (float)sum;
    case K_FP8:
        pthread_once(&fp8_once, fp8_init);
        for (int64_t j = 0; j < ne0; j++)
            sum += (double)fp8_table[row[4 + j]] * x[j];
        return (float)(sum * ldf(row));
    case K_GGUF: {
        /* the canonical form (kquants.h): per 16 elements, s * sum(c x) +
         * m * sum(x); rows are whole blocks */
        int16_t c[256];
        float s[16], m[16];
        for (int64_t e0 = 0; e0 < ne0; e0 += G) {
            llm_kq_unpack(t, row + e0 / G * BB, c, s, m);
            for (int64_t g = 0; g < G / 16; g++) {
                double cx = 0.0, sx = 0.0;
                for (int64_t j = 0; j < 16; j++) {
                    cx += (double)c[16 * g + j] * x[e0 + 16 * g + j];
                    sx += x[e0 + 16 * g + j];
                }
                sum += cx * s[g] + sx * m[g];
            }
        }
        return (float)sum;
    }
    default:
        break;
    }

    pthread_once(&fp8_once, fp8_init);
    /* row-header scales (per-channel, nf4_dq) */
    const float rd = hdr >= 4 ? ldf(row) : 0.0f, rm = hdr >= 8 ? ldf(row + 4) : 0.0f;
    for (int64_t b = 0, e0 = 0; e0 < ne0; b++, e0 += G) {
        const uint8_t *blk = row + hdr + b * BB;
        const int64_t n = ne0 - e0 < G ? ne0 - e0 : G; /* the padding is skipped */
        const float *xb = x + e0;
        double s = 0.0, sx = 0.0;
        float d, m = 0.0f;
        switch (k) {
        case K_SYM8: {
            const int8_t *qs = (const int8_t *)(blk + BB - (tr->blck == 1 ? 1 : G));
            d = hdr ? rd : h2f(blk);
            for (int64_t j = 0; j < n; j++)
                s += (double)qs[j] * xb[j];
            break;
        }
        case K_ZP8: {
            const uint8_t *qs = blk + BB - (tr->blck == 1 ? 1 : G);
            d = hdr ? rd : h2f(blk);
            m = hdr ? rm : h2f(blk + 2);
            for (int64_t j = 0; j < n; j++) {
                s += (double)qs[j] * xb[j];
                sx += xb[j];
            }
            break;
        }
        case K_SYM4: {
            const uint8_t *qs = blk + BB - G / 2;
            d = hdr ? rd : h2f(blk);
            for (int64_t j = 0; j < n; j++)
                s += (double)(nib(qs, j, G) - 8) * xb[j];
            break;
        }
        case K_ZP4:
        case K_ZP3: {
            const uint8_t *qs = blk + BB - (k == K_ZP4 ? G / 2 : 3 * G / 8);
            d = hdr ? rd : h2f(blk);
            m = hdr ? rm : h2f(blk + 2);
            for (int64_t j = 0; j < n; j++) {
                const int c = k == K_ZP4 ? nib(qs, j, G)
                                         : llm_q3_code(qs, j);
                s += (double)c * xb[j];
                sx += xb[j];
            }
            break;
        }
        case K_NF4:
        case K_NF4DQ: {
            const uint8_t *qs = blk + BB - 32;
            d = k == K_NF4 ? h2f(blk) : fp8_table[blk[0]] * rd;
            for (int64_t j = 0; j < n; j++)
                s += (double)nf4_values[nib(qs, j, 64)] * xb[j];
            break;
        }
        default:
            return 0.0f;
        }
        sum += s * d + sx * m;
    }
    return (float)sum;
}

/* The 4-bit per-channel types use 32-element blocks (blck 32) but no block
 * scale; dot_row_ref reads their scale from the header like the others. */

void llm_quantize_x_ref(const float *x, int64_t n, struct llm_qx *out)
{
    for (int64_t b = 0; b * 32 < n; b++) {
        const int64_t e0 = b * 32, m = n - e0 < 32 ? n - e0 : 32;
        float amax = 0.0f;
        for (int64_t j = 0; j < m; j++)
            amax = fmaxf(amax, fabsf(x[e0 + j]));
        float d = amax / 127.0f;
        const float id = d > 0 ? 1.0f / d : 0.0f;
        int sum = 0, nan = 0;
        for (int64_t j = 0; j < m; j++)
            nan |= !isfinite(x[e0 + j]);
        for (int64_t j = 0; j < 32; j++) {
            int q = j < m && !nan ? (int)nearbyintf(x[e0 + j] * id) : 0;
            q = q > 127 ? 127 : q < -127 ? -127 : q;
            out[b].qs[j] = (int8_t)q;
            sum += q;
        }
        if (nan) /* as the SIMD quantizers: NaN reaches the products */
            d = NAN;
        out[b].d = d;
        out[b].m8 = -8 * sum;
        out[b].p128 = 128 * sum;
        out[b].ds = d * (float)sum;
    }
}

// ----------------------------------------------------------------------------
// argument checks

static llm_status check(enum llm_type t, const void *W, const void *x, const void *y,
                        int64_t ne0, int64_t r0, int64_t r1, const char *fn,
                        const struct llm_type_traits **tr, uint64_t *rb)
{
    *tr = llm_type_traits((uint32_t)t);
    if (!*tr || (*tr)->is_aux || kind_of[t] == K_NONE)
        return llm_error_set(LLM_E_INVALID, "%s: type %s (%u) is not a weight type", fn,
                             llm_type_name((uint32_t)t), (unsigned)t);
    if (ne0 <= 0 || ne0 > ((int64_t)1 << 40))
        return llm_error_set(LLM_E_INVALID, "%s: bad row length %lld", fn, (long long)ne0);
    if (llm_type_whole_blocks(t) && ne0 % (*tr)->blck)
        return llm_error_set(LLM_E_INVALID, "%s: rows of %lld elements are not whole %u-element "
                             "blocks of %s", fn, (long long)ne0, (*tr)->blck, (*tr)->name);
    if (r0 < 0 || r1 < r0)
        return llm_error_set(LLM_E_INVALID, "%s: bad row range [%lld, %lld)", fn,
                             (long long)r0, (long long)r1);
    if (r1 > r0 && (!W || !x || !y))
        return llm_error_set(LLM_E_INVALID, "%s: NULL buffer", fn);
    *rb = llm_type_row_bytes(t, (uint64_t)ne0);
    uint64_t end;
    if (!*rb || !llm_mul_ok(*rb, (uint64_t)r1, &end) || end > (uint64_t)INT64_MAX)
        return llm_error_set(LLM_E_INVALID, "%s: %lld rows of %lld %s elements overflow", fn,
                             (long long)r1, (long long)ne0, (*tr)->name);
    return LLM_OK;
}

static llm_status check_mm(enum llm_type t, const void *W, const float *X, float *Y, int64_t ne0,
                           int64_t nb, int64_t ldy, int64_t r0, int64_t r1, const char *fn,
                           const struct llm_type_traits **tr, uint64_t *rb)
{
    LLM_TRY(check(t, W, X, Y, ne0, r0, r1, fn, tr, rb));
    uint64_t n;
    if (nb < 0 || ldy < r1 || !llm_mul_ok((uint64_t)nb, (uint64_t)ldy, &n) ||
        !llm_mul_ok((uint64_t)nb, (uint64_t)ne0, &n))
        return llm_error_set(LLM_E_INVALID, "%s: bad batch %lld or ldy %lld for %lld rows", fn,
                             (long long)nb, (long long)ldy, (long long)r1);
    return LLM_OK;
}

// ----------------------------------------------------------------------------
// references

llm_status llm_matvec_ref(enum llm_type t, const void *W, const float *x, float *y, int64_t ne0,
                          int64_t r0, int64_t r1)
{
    const struct llm_type_traits *tr;
    uint64_t rb;
    LLM_TRY(check(t, W, x, y, ne0, r0, r1, "matvec", &tr, &rb));
    const uint8_t *w = W;
    for (int64_t r = r0; r < r1; r++)
        y[r] = dot_row_ref(t, (enum kind)kind_of[t], tr, w + (uint64_t)r * rb, x, ne0);
    return LLM_OK;
}

llm_status llm_matmul_ref(enum llm_type t, const void *W, const float *X, float *Y, int64_t ne0,
                          int64_t nb, int64_t ldy, int64_t r0, int64_t r1)
{
    const struct llm_type_traits *tr;
    uint64_t rb;
    LLM_TRY(check_mm(t, W, X, Y, ne0, nb, ldy, r0, r1, "matmul", &tr, &rb));
    const uint8_t *w = W;
    /* row-outer: each row is read from memory once and reused from cache
     * for every token */
    for (int64_t r = r0; r < r1; r++)
        for (int64_t b = 0; b < nb; b++)
            Y[b * ldy + r] =
                dot_row_ref(t, (enum kind)kind_of[t], tr, w + (uint64_t)r * rb, X + b * ne0, ne0);
    return LLM_OK;
}

// ----------------------------------------------------------------------------
// dispatch

/* The activations of the int8/int4 types unless LLM_MATMUL_ACT says: int16
 * costs 1.2-2.5x less than float per block and gave the scalar reference's
 * greedy text, token for token, on SmolLM2-135M Q4_1 (4 prompts x 64
 * tokens), where int8 changed all four. It rules decode and products of
 * a few tokens; prefill (LLM_MATMUL_GEMM_MIN_NB tokens and more) runs an
 * int16 GEMM on AVX-512 VNNI (vpdpwssd: twice the multiply-adds of a float
 * FMA; stories110m-shaped q4_0 prefill went from 750 to 1000-1250 tokens/s
 * on 2 Zen 4 cores) and the float GEMM on AVX2, where madd_epi16 does not
 * pay for its unpacking. */
#define LLM_ACT_DEFAULT LLM_ACT_Q16

#if defined(__x86_64__) || defined(__i386__)
/* F16C from CPUID leaf 1 (ECX bit 29): clang's __builtin_cpu_supports does
 * not know the name */
static int has_f16c(void)
{
    unsigned a, b, c, d;
    return __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 29));
}
#endif

enum llm_isa llm_isa_detect(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma") || !has_f16c())
        return LLM_ISA_REF;
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni"))
        return LLM_ISA_AVX512;
    return LLM_ISA_AVX2;
#else
    return LLM_ISA_REF;
#endif
}

/* Both paths give each token decode's bits, so the choice is speed alone.
 * The group kernels widen each block's codes once for up to four tokens;
 * the int16 GEMM widens the group into memory first, which costs more than
 * it saves for a few tokens. On Zen 4 (AVX-512 on 256-bit units) the group
 * kernels were 10-20% faster at 16 tokens; on Sapphire Rapids the GEMM is
 * as fast at 6 tokens and faster from 8 (1536 x 576 q4_1 rows, one thread:
 * 0.066 against 0.079 ms at 8 tokens, 0.099 against 0.130 at 12, 0.138
 * against 0.168 at 16). 0: not yet detected. */
static _Atomic int x16_few = 0;

int llm_x16_few_max(void)
{
    int n = x16_few;
    if (!n) {
#if defined(__x86_64__) || defined(__i386__)
        __builtin_cpu_init();
        n = __builtin_cpu_is("amd") ? 16 : 6;
#else
        n = 16;
#endif
        x16_few = n;
    }
    return n;
}

/* -1: not yet detected */
static _Atomic int isa_in_use = -1;

/* LLM_ISA=scalar|avx2|avx512 in the environment caps the choice (to
 * compare the variants in a whole model run, or to rule a kernel out). */
static enum llm_isa isa_now(void)
{
    int v = isa_in_use;
    if (v < 0) {
        v = (int)llm_isa_detect();
        const char *e = getenv("LLM_ISA");
        if (e && (strcmp(e, "scalar") == 0 || strcmp(e, "ref") == 0))
            v = LLM_ISA_REF;
        else if (e && strcmp(e, "avx2") == 0 && v > LLM_ISA_AVX2)
            v = LLM_ISA_AVX2;
        isa_in_use = v;
    }
    return (enum llm_isa)v;
}

/* -1: not yet read from the environment */
static _Atomic int act_mode = -1;
static _Atomic int inv_mode = -1;

/* LLM_BATCH_INVARIANT=0 in the environment turns batch invariance off (to
 * measure what it costs). */
static int inv_now(void)
{
    int v = inv_mode;
    if (v < 0) {
        const char *e = getenv("LLM_BATCH_INVARIANT");
        v = !(e && strcmp(e, "0") == 0);
        inv_mode = v;
    }
    return v;
}

int llm_matmul_set_invariant(int on)
{
    int old = inv_now();
    inv_mode = on != 0;
    return old;
}

int llm_matmul_invariant(void)
{
    return inv_now();
}

static int act_now(void)
{
    int v = act_mode;
    if (v < 0) {
        const char *e = getenv("LLM_MATMUL_ACT");
        v = LLM_ACT_DEFAULT;
        if (e && strcmp(e, "f32") == 0)
            v = LLM_ACT_F32;
        else if (e && strcmp(e, "q16") == 0)
            v = LLM_ACT_Q16;
        else if (e && strcmp(e, "q8") == 0)
            v = LLM_ACT_Q8;
        act_mode = v;
    }
    return v;
}

enum llm_isa llm_matmul_isa(void)
{
    return isa_now();
}

int llm_matmul_set_act(int act)
{
    int old = act_now();
    act_mode = act == LLM_ACT_Q8 || act == LLM_ACT_Q16 ? act : LLM_ACT_F32;
    return old;
}

enum llm_isa llm_matmul_set_isa(enum llm_isa isa)
{
    enum llm_isa best = llm_isa_detect();
    isa_in_use = (int)(isa < best ? isa : best);
    return (enum llm_isa)isa_in_use;
}

const char *llm_matmul_isa_name(void)
{
    switch (isa_now()) {
    case LLM_ISA_AVX512:
        return "avx512-vnni";
    case LLM_ISA_AVX2:
        return "avx2";
    default:
        return "scalar";
    }
}

int llm_matmul_simd_type(enum llm_type t)
{
    if ((uint32_t)t >= LLM_TYPE_COUNT_)
        return 0;
    switch ((enum kind)kind_of[t]) {
    case K_F32:
    case K_F16:
    case K_BF16:
    case K_NF4:
    case K_NF4DQ:
    case K_FP8:
        return LLM_SIMD_FLOAT;
    case K_SYM8:
    case K_ZP8:
    case K_SYM4:
    case K_ZP4:
    case K_ZP3:
        return LLM_SIMD_INT8;
    case K_GGUF:
        return LLM_SIMD_KQ;
    default:
        return LLM_SIMD_NONE;
    }
}

llm_status llm_matvec(enum llm_type t, const void *W, const float *x, float *y, int64_t ne0,
                      int64_t r0, int64_t r1)
{
    const struct llm_type_traits *tr;
    uint64_t rb;
    LLM_TRY(check(t, W, x, y, ne0, r0, r1, "matvec", &tr, &rb));
    if (r1 == r0)
        return LLM_OK;
    if (llm_matmul_simd_type(t)) {
        switch (isa_now()) {
        case LLM_ISA_AVX512:
            return llm_matvec_avx512(t, W, x, y, ne0, rb, r0, r1, act_now(), inv_now());
        case LLM_ISA_AVX2:
            return llm_matvec_avx2(t, W, x, y, ne0, rb, r0, r1, act_now(), inv_now());
        default:
            break;
        }
    }
    const uint8_t *w = W;
    for (int64_t r = r0; r < r1; r++)
        y[r] = dot_row_ref(t, (enum kind)kind_of[t], tr, w + (uint64_t)r * rb, x, ne0);
    return LLM_OK;
}

llm_status llm_matmul(enum llm_type t, const void *W, const float *X, float *Y, int64_t ne0,
                      int64_t nb, int64_t ldy, int64_t r0, int64_t r1)
{
    const struct llm_type_traits *tr;
    uint64_t rb;
    LLM_TRY(check_mm(t, W, X, Y, ne0, nb, ldy, r0, r1, "matmul", &tr, &rb));
    if (r1 == r0 || nb == 0)
        return LLM_OK;
    if (llm_matmul_simd_type(t)) {
        switch (isa_now()) {
        case LLM_ISA_AVX512:
            return llm_matmul_avx512(t, W, X, Y, ne0, rb, nb, ldy, r0, r1, act_now(), inv_now());
        case LLM_ISA_AVX2:
            return llm_matmul_avx2(t, W, X, Y, ne0, rb, nb, ldy, r0, r1, act_now(), inv_now());
        default:
            break;
        }
    }
    return llm_matmul_ref(t, W, X, Y, ne0, nb, ldy, r0, r1);
}

// ----------------------------------------------------------------------------
// interleaved 4-bit rows (matmul.h)

static int x16_float(enum llm_type t)
{
    return t == LLM_TYPE_F32 || t == LLM_TYPE_F16 || t == LLM_TYPE_BF16;
}

/* The elements per scale of the types the layout takes (1 for the float
 * types); 0 for the others. */
static int x16_group(enum llm_type t)
{
    switch (t) {
    case LLM_TYPE_F32:
    case LLM_TYPE_F16:
    case LLM_TYPE_BF16:
        return 1;
    case LLM_TYPE_Q4_0:
    case LLM_TYPE_Q4_1:
    case LLM_TYPE_Q8_0:
    case LLM_TYPE_Q8Z_G32:
        return 32;
    case LLM_TYPE_Q4_G64:
    case LLM_TYPE_Q4Z_G64:
    case LLM_TYPE_Q8_G64:
    case LLM_TYPE_Q8Z_G64:
        return 64;
    case LLM_TYPE_Q4_G128:
    case LLM_TYPE_Q4Z_G128:
    case LLM_TYPE_Q8_G128:
    case LLM_TYPE_Q8Z_G128:
        return 128;
    case LLM_TYPE_Q2_K: /* their super-blocks, in 2-byte units as the rest */
    case LLM_TYPE_Q3_K:
    case LLM_TYPE_Q4_K:
    case LLM_TYPE_Q5_K:
    case LLM_TYPE_Q6_K:
    case LLM_TYPE_IQ4_XS:
        return 256;
    default:
        return 0;
    }
}

int llm_x16_ok(enum llm_type t, int64_t ne0, int64_t rows)
{
    const int G = x16_group(t);
    return G && ne0 > 0 && ne0 % G == 0 && ne0 <= ((int64_t)1 << 40) && rows > 0 &&
           rows % 16 == 0;
}

int llm_x16_enabled(void)
{
    const char *e = getenv("LLM_X16");
    /* without a kernel that reads the layout, decode would unpack it every
     * token: keep the rows then */
    return !(e && strcmp(e, "0") == 0) && isa_now() != LLM_ISA_REF && act_now() == LLM_ACT_Q16;
}

/* Row r of a group between the layouts; UNITS 2-byte units per block of
 * the row (its block bytes / 2: d, m for the zero-point types, then the
 * code pairs). Unit u of row r's block k sits at unit 16 u + r of the
 * interleaved block k. The row is walked in order (one stream); the
 * group's interleaved blocks, a few KiB, stay in cache across its 16 rows. */
static inline __attribute__((always_inline)) void x16_row(uint8_t *row, uint8_t *grp, int r,
                                                          int64_t nq, int units, int pack)
{
    for (int64_t k = 0; k < nq; k++, row += 2 * units) {
        uint8_t *blk = grp + (uint64_t)k * 32 * (uint64_t)units + 2 * (uint64_t)r;
        for (int u = 0; u < units; u++) {
            if (pack)
                memcpy(blk + 32 * u, row + 2 * u, 2);
            else
                memcpy(row + 2 * u, blk + 32 * u, 2);
        }
    }
}

#if defined(__SSE2__)
/* Block k of a group back to its 16 rows (row i's block at rows + i rb),
 * eight units at a time: unit u's 16 rows are 32 bytes, 8 rows a vector of
 * 16-bit lanes, and an 8 x 8 transpose gives each row its 8 units. The
 * plain loop below took a fifth of a K-quant prefill when batches went
 * through x16_by_rows (which they still do where decode does not read the
 * K-quants' groups). */
static void x16_unpack_block(const uint8_t *blk, uint8_t *rows, uint64_t rb, int units)
{
    int u0 = 0;
    for (; u0 + 8 <= units; u0 += 8)
        for (int h = 0; h < 2; h++) {
            __m128i v[8];
            for (int i = 0; i < 8; i++)
                v[i] = _mm_loadu_si128((const __m128i *)(blk + 32 * (u0 + i) + 16 * h));
            /* a: rows (0-3 | 4-7) of units pairs; b: rows pairs of 4 units */
            const __m128i a0 = _mm_unpacklo_epi16(v[0], v[1]), a1 = _mm_unpackhi_epi16(v[0], v[1]);
            const __m128i a2 = _mm_unpacklo_epi16(v[2], v[3]), a3 = _mm_unpackhi_epi16(v[2], v[3]);
            const __m128i a4 = _mm_unpacklo_epi16(v[4], v[5]), a5 = _mm_unpackhi_epi16(v[4], v[5]);
            const __m128i a6 = _mm_unpacklo_epi16(v[6], v[7]), a7 = _mm_unpackhi_epi16(v[6], v[7]);
            const __m128i b[8] = { _mm_unpacklo_epi32(a0, a2), _mm_unpackhi_epi32(a0, a2),
                                   _mm_unpacklo_epi32(a1, a3), _mm_unpackhi_epi32(a1, a3),
                                   _mm_unpacklo_epi32(a4, a6), _mm_unpackhi_epi32(a4, a6),
                                   _mm_unpacklo_epi32(a5, a7), _mm_unpackhi_epi32(a5, a7) };
            for (int r = 0; r < 8; r++) {
                const __m128i lo = b[r / 2], hi = b[4 + r / 2];
                _mm_storeu_si128((__m128i *)(rows + (uint64_t)(8 * h + r) * rb + 2 * (uint64_t)u0),
                                 r % 2 ? _mm_unpackhi_epi64(lo, hi) : _mm_unpacklo_epi64(lo, hi));
            }
        }
    for (; u0 < units; u0++)
        for (int r = 0; r < 16; r++)
            memcpy(rows + (uint64_t)r * rb + 2 * (uint64_t)u0, blk + 32 * u0 + 2 * r, 2);
}
#endif

/* Groups [g0, g1) between the two layouts: pack (1) rows -> P, or unpack
 * (0) P -> rows; W holds rows 16 g0 onwards. Every field is a 2-byte unit
 * (fp16 d and m, pairs of code bytes), so this is a transpose of those. */
/* The float types' groups: element k of row i at k * 16 + i (a 16 x ne0
 * transpose of elements of 4 or 2 bytes; k outer, so that the group is
 * written, or read, in order). */
#define X16F_MOVE(T)                                                                   \
    for (int64_t g = g0; g < g1; g++) {                                                \
        T *grp = (T *)(void *)P + (uint64_t)g * 16 * (uint64_t)ne0;                    \
        T *rows = (T *)(void *)W + (uint64_t)(g - g0) * 16 * (uint64_t)ne0;            \
        for (int64_t k = 0; k < ne0; k++)                                              \
            for (int i = 0; i < 16; i++) {                                             \
                if (pack)                                                              \
                    grp[k * 16 + i] = rows[(uint64_t)i * (uint64_t)ne0 + (uint64_t)k]; \
                else                                                                   \
                    rows[(uint64_t)i * (uint64_t)ne0 + (uint64_t)k] = grp[k * 16 + i]; \
            }                                                                          \
    }

static void x16f_move(uint8_t *W, uint8_t *P, int64_t ne0, size_t elt, int64_t g0, int64_t g1,
                      int pack)
{
    /* the mapping's rows are 32-byte aligned (llm-format(5)), the copies
     * the allocator's: the 4- and 2-byte accesses are aligned */
    if (elt == 4) {
        X16F_MOVE(uint32_t)
    } else {
        X16F_MOVE(uint16_t)
    }
}

static void x16_move(enum llm_type t, uint8_t *W, uint8_t *P, int64_t ne0, int64_t g0,
                     int64_t g1, int pack)
{
    if (x16_float(t)) {
        x16f_move(W, P, ne0, t == LLM_TYPE_F32 ? 4 : 2, g0, g1, pack);
        return;
    }
    const int BB = (int)llm_type_traits((uint32_t)t)->block_bytes, units = BB / 2;
    const int64_t nq = ne0 / x16_group(t);
    const uint64_t rb = (uint64_t)nq * (uint64_t)BB;
    for (int64_t g = g0; g < g1; g++) {
        uint8_t *grp = P + (uint64_t)g * 16 * rb;
#if defined(__SSE2__)
        if (!pack && units >= 8) {
            uint8_t *rows = W + (uint64_t)(g - g0) * 16 * rb;
            for (int64_t k = 0; k < nq; k++)
                x16_unpack_block(grp + (uint64_t)k * 32 * (uint64_t)units, rows + (uint64_t)k * BB,
                                 rb, units);
            continue;
        }
#endif
        for (int r = 0; r < 16; r++) {
            uint8_t *row = W + ((uint64_t)(g - g0) * 16 + (uint64_t)r) * rb;
            /* constant arguments for q4_0 and q4_1, so that they unroll */
            if (units == 9 && pack)
                x16_row(row, grp, r, nq, 9, 1);
            else if (units == 9)
                x16_row(row, grp, r, nq, 9, 0);
            else if (units == 10 && pack)
                x16_row(row, grp, r, nq, 10, 1);
            else if (units == 10)
                x16_row(row, grp, r, nq, 10, 0);
            else
                x16_row(row, grp, r, nq, units, pack);
        }
    }
}

static llm_status x16_check(enum llm_type t, const void *P, int64_t ne0, int64_t r0, int64_t r1,
                            const char *fn)
{
    if (!llm_x16_ok(t, ne0, 16))
        return llm_error_set(LLM_E_INVALID, "%s: %s rows of %lld elements have no interleaved "
                             "form", fn, llm_type_name((uint32_t)t), (long long)ne0);
    if (r0 < 0 || r1 < r0 || r0 % 16 || r1 % 16)
        return llm_error_set(LLM_E_INVALID, "%s: row range [%lld, %lld) is not whole groups of 16",
                             fn, (long long)r0, (long long)r1);
    if (r1 > r0 && !P)
        return llm_error_set(LLM_E_INVALID, "%s: NULL buffer", fn);
    return LLM_OK;
}

llm_status llm_x16_pack(enum llm_type t, const void *W, int64_t ne0, int64_t rows, void *P)
{
    if (!llm_x16_ok(t, ne0, rows))
        return llm_error_set(LLM_E_INVALID, "x16_pack: %s (%lld, %lld) has no interleaved form",
                             llm_type_name((uint32_t)t), (long long)rows, (long long)ne0);
    if (!W || !P)
        return llm_error_set(LLM_E_INVALID, "x16_pack: NULL buffer");
    x16_move(t, (uint8_t *)(uintptr_t)W, P, ne0, 0, rows / 16, 1);
    return LLM_OK;
}

llm_status llm_x16_unpack(enum llm_type t, const void *P, int64_t ne0, int64_t r0, int64_t r1,
                          void *W)
{
    LLM_TRY(x16_check(t, P, ne0, r0, r1, "x16_unpack"));
    if (r1 > r0 && !W)
        return llm_error_set(LLM_E_INVALID, "x16_unpack: NULL buffer");
    x16_move(t, W, (uint8_t *)(uintptr_t)P, ne0, r0 / 16, r1 / 16, 0);
    return LLM_OK;
}

/* Rows [r0, r1) of P through the row products, X16_CHUNK rows at a time
 * unpacked into a scratch buffer: a GEMM tile block (matmul_gemm.h packs
 * 256 rows), so prefill loses nothing to the detour. */
#define X16_CHUNK 256

static llm_status x16_by_rows(enum llm_type t, const void *P, const float *X, float *Y,
                              int64_t ne0, int64_t nb, int64_t ldy, int64_t r0, int64_t r1)
{
    const uint64_t rb = llm_type_row_bytes(t, (uint64_t)ne0);
    const int64_t n = r1 - r0 < X16_CHUNK ? r1 - r0 : X16_CHUNK;
    uint64_t bytes;
    if (!llm_mul_ok(rb, (uint64_t)n, &bytes) || bytes > SIZE_MAX)
        return llm_error_set(LLM_E_NOMEM, "matmul: rows of %lld elements are too long",
                             (long long)ne0);
    uint8_t *w = llm_malloc((size_t)bytes);
    if (!w)
        return LLM_E_NOMEM;
    llm_status s = LLM_OK;
    for (int64_t c = r0; c < r1 && !s; c += n) {
        const int64_t cn = r1 - c < n ? r1 - c : n;
        x16_move(t, w, (uint8_t *)(uintptr_t)P, ne0, c / 16, (c + cn) / 16, 0);
        /* Y + c: row c of Y is row 0 of the chunk */
        s = nb == 1 ? llm_matvec(t, w, X, Y + c, ne0, 0, cn)
                    : llm_matmul(t, w, X, Y + c, ne0, nb, ldy, 0, cn);
    }
    llm_free(w);
    return s;
}

llm_status llm_matvec_x16(enum llm_type t, const void *P, const float *x, float *y, int64_t ne0,
                          int64_t r0, int64_t r1)
{
    LLM_TRY(x16_check(t, P, ne0, r0, r1, "matvec"));
    if (r1 == r0)
        return LLM_OK;
    if (!x || !y)
        return llm_error_set(LLM_E_INVALID, "matvec: NULL buffer");
    if (llm_kq_type(t) && !llm_x16_enabled())
        return x16_by_rows(t, P, x, y, ne0, 1, 0, r0, r1);
    if (x16_float(t) || act_now() == LLM_ACT_Q16) {
        switch (isa_now()) {
        case LLM_ISA_AVX512:
            return llm_matvec_x16_avx512(t, P, x, y, ne0, r0, r1);
        case LLM_ISA_AVX2:
            return llm_matvec_x16_avx2(t, P, x, y, ne0, r0, r1);
        default:
            break;
        }
    }
    return x16_by_rows(t, P, x, y, ne0, 1, 0, r0, r1);
}

llm_status llm_matmul_x16(enum llm_type t, const void *P, const float *X, float *Y, int64_t ne0,
                          int64_t nb, int64_t ldy, int64_t r0, int64_t r1)
{
    LLM_TRY(x16_check(t, P, ne0, r0, r1, "matmul"));
    if (r1 == r0 || nb == 0)
        return LLM_OK;
    if (!X || !Y || nb < 0 || ldy < r1)
        return llm_error_set(LLM_E_INVALID, "matmul: bad batch %lld or ldy %lld for %lld rows",
                             (long long)nb, (long long)ldy, (long long)r1);
    if (nb == 1)
        return llm_matvec_x16(t, P, X, Y, ne0, r0, r1);
    /* the K-quants' groups: packed for the int16 GEMM (as the rows'
     * tiles), or back to rows a GEMM tile at a time (LLM_X16=0, no SIMD) */
    if (llm_kq_type(t) && !llm_x16_enabled())
        return x16_by_rows(t, P, X, Y, ne0, nb, ldy, r0, r1);
    if (x16_float(t) && isa_now() != LLM_ISA_REF)
        return isa_now() == LLM_ISA_AVX512 ? llm_matmul_x16_avx512(t, P, X, Y, ne0, nb, ldy, r0, r1)
                                           : llm_matmul_x16_avx2(t, P, X, Y, ne0, nb, ldy, r0, r1);
    if (act_now() == LLM_ACT_Q16) {
        switch (isa_now()) {
        case LLM_ISA_AVX512:
            return llm_matmul_x16_avx512(t, P, X, Y, ne0, nb, ldy, r0, r1);
        case LLM_ISA_AVX2:
            /* the int16 GEMM is decode's arithmetic; the float GEMM of the
             * rows is faster on AVX2, where madd does not pay for its
             * unpacking, but not the same bits */
            if (inv_now())
                return llm_matmul_x16_avx2(t, P, X, Y, ne0, nb, ldy, r0, r1);
            break;
        default:
            break;
        }
    }
    return x16_by_rows(t, P, X, Y, ne0, nb, ldy, r0, r1);
}
