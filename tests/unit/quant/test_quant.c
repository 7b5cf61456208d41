/* test_quant.c: the row quantizers and dequantizers of lib/quant/quant.c.
 *
 * Error bounds checked per element (d, m = the scales stored in the row,
 * read back from the bytes; fp16 rounding of a scale is at most
 * du = max(2^-11 |d|, 2^-25), half an ulp of binary16):
 *   f32                 exact
 *   f16 / bf16          2^-11 |x| + 2^-25 / 2^-8 |x|
 *   q8_0 (ggml rule)    d/2 + 128 du        (d = amax/127 rounded to nearest)
 *   q4_0 (ggml rule)    |d|/2 + 9 du, and |d| + 9 du for the code 15, where
 *                       ggml clamps the element at -max (+8 -> +7)
 *   q4_1 (ggml rule)    d/2 + 15.5 du + dm  (dm = fp16 rounding of min)
 *   our fp16-scaled     d/2                 (scales rounded outward)
 *   *_ch (float32)      d/2
 *   nf4                 0.1519 d + |amax - d| (half the widest code gap,
 *                       plus the clip of the extreme element by fp16(d))
 *   nf4_dq              0.1519 s·r          (block scale rounded up)
 *   fp8_e4m3            max(2^-4 |x|, 2^-10 r) (half an ulp, relative in the
 *                       normal range, absolute among subnormals)
 * each plus float slack 2^-20 (|x| + |y| + |m|) for the products and sums.
 */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../../lib/common/fp16.h"
#include "../../../lib/quant/quant.h"
#include "../helpers.h"

static const enum llm_type weight_types[] = {
    LLM_TYPE_F32,      LLM_TYPE_F16,      LLM_TYPE_BF16,     LLM_TYPE_Q8_0,     LLM_TYPE_Q8_G64,
    LLM_TYPE_Q8_G128,  LLM_TYPE_Q8_CH,    LLM_TYPE_Q8Z_G32,  LLM_TYPE_Q8Z_G64,  LLM_TYPE_Q8Z_G128,
    LLM_TYPE_Q8Z_CH,   LLM_TYPE_Q4_0,     LLM_TYPE_Q4_G64,   LLM_TYPE_Q4_G128,  LLM_TYPE_Q4_CH,
    LLM_TYPE_Q4_1,     LLM_TYPE_Q4Z_G64,  LLM_TYPE_Q4Z_G128, LLM_TYPE_Q4Z_CH,   LLM_TYPE_NF4,
    LLM_TYPE_NF4_DQ,   LLM_TYPE_FP8_E4M3, LLM_TYPE_Q3Z_G32,  LLM_TYPE_Q3Z_G64,  LLM_TYPE_Q3Z_G128,
    LLM_TYPE_Q3Z_CH,
};
#define N_WEIGHT_TYPES (sizeof weight_types / sizeof weight_types[0])

static const int64_t lengths[] = { 1, 31, 33, 172, 576, 1000 };

static const float nf4[16] = LLM_NF4_VALUES;
/* bitsandbytes' dQuantizeNF4 decision thresholds (csrc/kernels.cu), in
 * ascending order: an independent statement of the NF4 midpoints. */
static const float bnb_mid[15] = {
    -0.8480964004993439f, -0.6106329262256622f, -0.4599952697753906f, -0.33967943489551544f,
    -0.23460740596055984f, -0.13791173323988914f, -0.045525018125772476f, 0.03979014977812767f,
    0.1202552504837513f,  0.2035212516784668f,   0.2920137718319893f,   0.3893125355243683f,
    0.5016634166240692f,  0.6427869200706482f,   0.8614784181118011f,
};
#define NF4_HALF_GAP 0.15190359950065613 /* (-0.6961928 - -1.0) / 2, the widest */

// ----------------------------------------------------------------------------
// random rows

static uint64_t rng_state;

static uint64_t rng_next(void)
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static double rng_unit(void) /* (0, 1) */
{
    return ((double)(rng_next() >> 11) + 0.5) / 9007199254740992.0;
}

static float rng_gauss(void)
{
    return (float)(sqrt(-2.0 * log(rng_unit())) * cos(6.283185307179586 * rng_unit()));
}

enum { DIST_GAUSS, DIST_POSITIVE, DIST_OUTLIERS, DIST_CONST, DIST_ZERO, DIST_TINY, DIST_GRID,
       DIST_LARGE, N_DIST };

static void fill_row(float *x, int64_t n, int dist)
{
    for (int64_t i = 0; i < n; i++) {
        switch (dist) {
        case DIST_GAUSS: x[i] = 0.02f * rng_gauss(); break;
        case DIST_POSITIVE: x[i] = 0.5f + 2.5f * (float)rng_unit(); break;
        case DIST_OUTLIERS: x[i] = rng_gauss() * (rng_next() % 17 == 0 ? 50.0f : 1.0f); break;
        case DIST_CONST: x[i] = 0.37f; break;
        case DIST_ZERO: x[i] = 0.0f; break;
        case DIST_TINY: x[i] = 1e-4f * rng_gauss(); break;
        case DIST_GRID: x[i] = (float)((int)(rng_next() % 33) - 16) * 0.5f; break;
        case DIST_LARGE: x[i] = 300.0f * rng_gauss(); break;
        }
    }
}

// ----------------------------------------------------------------------------
// reading the stored scales back (independently of quant.c: from blocks.h)

static float rd_f16(const uint8_t *p)
{
    uint16_t h;
    memcpy(&h, p, 2);
    return llm_fp16_to_fp32(h);
}

static float rd_f32(const uint8_t *p)
{
    float f;
    memcpy(&f, p, 4);
    return f;
}

static double du(double d) /* half an ulp of a binary16 near d */
{
    return fmax(ldexp(fabs(d), -11), ldexp(1.0, -25));
}

static double block_absmax(const float *x, int64_t ne0, int64_t i, int64_t G)
{
    int64_t b0 = i / G * G;
    double a = 0;
    for (int64_t j = b0; j < b0 + G && j < ne0; j++)
        a = fmax(a, fabs(x[j]));
    return a;
}

/* The largest error allowed for element i (see the table at the top);
 * *m_out receives the magnitude of a zero point, for the slack. */
static double err_bound(enum llm_type t, const float *x, int64_t ne0, const uint8_t *row,
                        const float *y, int64_t i, double *m_out)
{
    const struct llm_type_traits *tr = llm_type_traits(t);
    const int64_t G = tr->blck;
    const uint8_t *blk = row + tr->row_header + i / G * tr->block_bytes;
    *m_out = 0;
    switch (t) {
    case LLM_TYPE_F32: return 0;
    case LLM_TYPE_F16: return ldexp(fabs(x[i]), -11) + ldexp(1.0, -25);
    case LLM_TYPE_BF16: return ldexp(fabs(x[i]), -8);
    case LLM_TYPE_Q8_0: {
        double d = rd_f16(blk);
        return 0.5 * d + 128 * du(d);
    }
    case LLM_TYPE_Q4_0: {
        double d = fabs(rd_f16(blk));
        int j = (int)(i % 32);
        int q = j < 16 ? blk[2 + j] & 15 : blk[2 + j - 16] >> 4;
        return (q == 15 ? d : 0.5 * d) + 9 * du(d);
    }
    case LLM_TYPE_Q4_1: {
        double d = rd_f16(blk), m = rd_f16(blk + 2);
        *m_out = fabs(m);
        return 0.5 * d + 15.5 * du(d) + du(m);
    }
    case LLM_TYPE_Q8_G64: case LLM_TYPE_Q8_G128: case LLM_TYPE_Q4_G64: case LLM_TYPE_Q4_G128:
        return 0.5 * rd_f16(blk);
    case LLM_TYPE_Q8Z_G32: case LLM_TYPE_Q8Z_G64: case LLM_TYPE_Q8Z_G128:
    case LLM_TYPE_Q4Z_G64: case LLM_TYPE_Q4Z_G128:
    case LLM_TYPE_Q3Z_G32: case LLM_TYPE_Q3Z_G64: case LLM_TYPE_Q3Z_G128:
        *m_out = fabs(rd_f16(blk + 2));
        return 0.5 * rd_f16(blk);
    case LLM_TYPE_Q8_CH: case LLM_TYPE_Q4_CH:
        return 0.5 * rd_f32(row);
    case LLM_TYPE_Q8Z_CH: case LLM_TYPE_Q4Z_CH: case LLM_TYPE_Q3Z_CH:
        *m_out = fabs(rd_f32(row + 4));
        return 0.5 * rd_f32(row);
    case LLM_TYPE_NF4: {
        double d = rd_f16(blk);
        return NF4_HALF_GAP * d + fabs(block_absmax(x, ne0, i, 64) - d);
    }
    case LLM_TYPE_NF4_DQ:
        return NF4_HALF_GAP * llm_fp8_e4m3_to_fp32(blk[0]) * rd_f32(row);
    case LLM_TYPE_FP8_E4M3:
        return fmax(ldexp(fabs(x[i]), -4), ldexp(rd_f32(row), -10));
    default:
        break;
    }
    (void)y;
    cr_assert_fail("no bound for type %s", llm_type_name(t));
    return 0;
}

// ----------------------------------------------------------------------------
// round trips

#define GUARD 16
#define SENTINEL -12345.678f

static void roundtrip_one(enum llm_type t, const float *x, int64_t ne0, const char *what)
{
    uint64_t rb = llm_type_row_bytes(t, (uint64_t)ne0);
    cr_assert(rb > 0);
    uint8_t *q = malloc(rb + GUARD), *q2 = malloc(rb + GUARD);
    float *y = malloc((size_t)(ne0 + GUARD) * sizeof(float));
    memset(q, 0xA5, rb + GUARD);
    memset(q2, 0x00, rb + GUARD);
    for (int64_t i = 0; i < ne0 + GUARD; i++)
        y[i] = SENTINEL;

    cr_assert_eq(llm_quantize_row(t, x, q, ne0), LLM_OK, "%s n=%lld: %s", llm_type_name(t),
                 (long long)ne0, llm_error_detail(-1));
    cr_assert_eq(llm_quantize_row(t, x, q2, ne0), LLM_OK);
    for (int g = 0; g < GUARD; g++)
        cr_assert_eq(q[rb + g], 0xA5, "%s n=%lld: quantize wrote past the row", llm_type_name(t),
                     (long long)ne0);
    /* every byte of the row is written: two different initial fills agree */
    cr_assert(memcmp(q, q2, rb) == 0, "%s n=%lld: row bytes depend on the old contents",
              llm_type_name(t), (long long)ne0);

    cr_assert_eq(llm_dequantize_row(t, q, y, ne0), LLM_OK);
    for (int g = 0; g < GUARD; g++)
        cr_assert_eq(y[ne0 + g], SENTINEL, "%s n=%lld: dequantize wrote past ne0 (padding leaked)",
                     llm_type_name(t), (long long)ne0);
    for (int64_t i = 0; i < ne0; i++) {
        double m;
        double b = err_bound(t, x, ne0, q, y, i, &m);
        b += ldexp(fabs(x[i]) + fabs(y[i]) + m, -20) + 1e-37;
        double e = fabs((double)x[i] - (double)y[i]);
        cr_assert(e <= b, "%s n=%lld %s: element %lld: x=%.9g y=%.9g |err|=%.3g > bound %.3g",
                  llm_type_name(t), (long long)ne0, what, (long long)i, x[i], y[i], e, b);
    }
    free(q);
    free(q2);
    free(y);
}

Test(quant, roundtrip_error_is_bounded)
{
    rng_state = 1;
    float *x = malloc(1000 * sizeof(float));
    for (size_t k = 0; k < N_WEIGHT_TYPES; k++)
        for (size_t l = 0; l < sizeof lengths / sizeof lengths[0]; l++)
            for (int dist = 0; dist < N_DIST; dist++)
                for (int rep = 0; rep < 3; rep++) {
                    fill_row(x, lengths[l], dist);
                    char what[48];
                    snprintf(what, sizeof what, "dist %d rep %d", dist, rep);
                    roundtrip_one(weight_types[k], x, lengths[l], what);
                }
    free(x);
}

/* The error bound is not vacuous: typical gaussian rows land well inside
 * the known RMS errors of each format (q4 about d/sqrt(12)). */
Test(quant, roundtrip_rms_error_is_plausible)
{
    rng_state = 7;
    enum { N = 4096 };
    float *x = malloc(N * sizeof(float)), *y = malloc(N * sizeof(float));
    uint8_t *q = malloc(llm_type_row_bytes(LLM_TYPE_F32, N));
    fill_row(x, N, DIST_GAUSS);
    struct { enum llm_type t; double lo, hi; } cases[] = {
        /* relative RMS error (rms(err) / rms(x)) */
        { LLM_TYPE_Q8_0, 0.002, 0.01 },  { LLM_TYPE_Q8_CH, 0.003, 0.02 },
        { LLM_TYPE_Q4_0, 0.05, 0.15 },   { LLM_TYPE_Q4_G128, 0.06, 0.17 },
        { LLM_TYPE_Q4_1, 0.04, 0.15 },   { LLM_TYPE_NF4, 0.05, 0.15 },
        { LLM_TYPE_NF4_DQ, 0.05, 0.17 }, { LLM_TYPE_FP8_E4M3, 0.01, 0.05 },
        /* 7 steps instead of 15: about twice q4's error */
        { LLM_TYPE_Q3Z_G32, 0.08, 0.25 }, { LLM_TYPE_Q3Z_G128, 0.10, 0.30 },
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        cr_assert_eq(llm_quantize_row(cases[c].t, x, q, N), LLM_OK);
        cr_assert_eq(llm_dequantize_row(cases[c].t, q, y, N), LLM_OK);
        double se = 0, sx = 0;
        for (int i = 0; i < N; i++) {
            se += ((double)x[i] - y[i]) * ((double)x[i] - y[i]);
            sx += (double)x[i] * x[i];
        }
        double rel = sqrt(se / sx);
        cr_assert(rel >= cases[c].lo && rel <= cases[c].hi, "%s: relative rms error %.4f not in [%g, %g]",
                  llm_type_name(cases[c].t), rel, cases[c].lo, cases[c].hi);
    }
    free(x);
    free(y);
    free(q);
}

/* Grouped types quantize a short last block as if padded with zeros. */
Test(quant, tail_block_is_zero_padded)
{
    rng_state = 3;
    for (size_t k = 0; k < N_WEIGHT_TYPES; k++) {
        enum llm_type t = weight_types[k];
        const struct llm_type_traits *tr = llm_type_traits(t);
        if (tr->row_header || tr->blck == 1)
            continue; /* per-channel scales come from the real elements only */
        for (int dist = 0; dist < N_DIST; dist++) {
            int64_t ne0 = 172, padded = (ne0 + tr->blck - 1) / tr->blck * tr->blck;
            float x[256] = { 0 };
            fill_row(x, ne0, dist);
            uint64_t rb = llm_type_row_bytes(t, (uint64_t)ne0);
            cr_assert_eq(rb, llm_type_row_bytes(t, (uint64_t)padded));
            uint8_t a[512], b[512];
            cr_assert_eq(llm_quantize_row(t, x, a, ne0), LLM_OK);
            cr_assert_eq(llm_quantize_row(t, x, b, padded), LLM_OK);
            cr_assert(memcmp(a, b, rb) == 0, "%s dist %d", tr->name, dist);
        }
    }
}

// ----------------------------------------------------------------------------
// ggml's reference quantizers, rewritten from ggml-quants.c (quantize_row_*_ref)

static uint16_t ref_fp16(float f)
{
#ifdef __FLT16_MAX__
    _Float16 h = (_Float16)f; /* the compiler's own IEEE conversion, round to nearest even */
    uint16_t u;
    memcpy(&u, &h, 2);
    return u;
#else
    return llm_fp32_to_fp16(f);
#endif
}

#define MAXF(a, b) ((a) > (b) ? (a) : (b))
#define MINI(a, b) ((a) < (b) ? (a) : (b))

static void ggml_q8_0(const float *x, uint8_t *y, int64_t k)
{
    for (int64_t i = 0; i < k / 32; i++) {
        float amax = 0.0f;
        for (int j = 0; j < 32; j++)
            amax = MAXF(amax, fabsf(x[i * 32 + j]));
        const float d = amax / ((1 << 7) - 1);
        const float id = d ? 1.0f / d : 0.0f;
        uint16_t dh = ref_fp16(d);
        uint8_t *b = y + i * 34;
        b[0] = (uint8_t)dh;
        b[1] = (uint8_t)(dh >> 8);
        for (int j = 0; j < 32; j++) {
            int8_t q = (int8_t)roundf(x[i * 32 + j] * id);
            b[2 + j] = (uint8_t)q;
        }
    }
}

static void ggml_q4_0(const float *x, uint8_t *y, int64_t k)
{
    for (int64_t i = 0; i < k / 32; i++) {
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < 32; j++) {
            const float v = x[i * 32 + j];
            if (amax < fabsf(v)) {
                amax = fabsf(v);
                max = v;
            }
        }
        const float d = max / -8;
        const float id = d ? 1.0f / d : 0.0f;
        uint16_t dh = ref_fp16(d);
        uint8_t *b = y + i * 18;
        b[0] = (uint8_t)dh;
        b[1] = (uint8_t)(dh >> 8);
        for (int j = 0; j < 16; j++) {
            const float x0 = x[i * 32 + j] * id, x1 = x[i * 32 + 16 + j] * id;
            const uint8_t xi0 = (uint8_t)MINI(15, (int8_t)(x0 + 8.5f));
            const uint8_t xi1 = (uint8_t)MINI(15, (int8_t)(x1 + 8.5f));
            b[2 + j] = (uint8_t)(xi0 | (xi1 << 4));
        }
    }
}

static void ggml_q4_1(const float *x, uint8_t *y, int64_t k)
{
    for (int64_t i = 0; i < k / 32; i++) {
        float min = FLT_MAX, max = -FLT_MAX;
        for (int j = 0; j < 32; j++) {
            const float v = x[i * 32 + j];
            if (v < min)
                min = v;
            if (v > max)
                max = v;
        }
        const float d = (max - min) / ((1 << 4) - 1);
        const float id = d ? 1.0f / d : 0.0f;
        uint16_t dh = ref_fp16(d), mh = ref_fp16(min);
        uint8_t *b = y + i * 20;
        b[0] = (uint8_t)dh;
        b[1] = (uint8_t)(dh >> 8);
        b[2] = (uint8_t)mh;
        b[3] = (uint8_t)(mh >> 8);
        for (int j = 0; j < 16; j++) {
            const float x0 = (x[i * 32 + j] - min) * id, x1 = (x[i * 32 + 16 + j] - min) * id;
            const uint8_t xi0 = (uint8_t)MINI(15, (int8_t)(x0 + 0.5f));
            const uint8_t xi1 = (uint8_t)MINI(15, (int8_t)(x1 + 0.5f));
            b[4 + j] = (uint8_t)(xi0 | (xi1 << 4));
        }
    }
}

Test(quant, ggml_types_match_ggml_reference_bytes)
{
    rng_state = 11;
    static const int64_t lens[] = { 32, 33, 64, 172, 1000, 4096 };
    struct { enum llm_type t; void (*ref)(const float *, uint8_t *, int64_t); } cases[] = {
        { LLM_TYPE_Q8_0, ggml_q8_0 }, { LLM_TYPE_Q4_0, ggml_q4_0 }, { LLM_TYPE_Q4_1, ggml_q4_1 },
    };
    float *x = malloc(4096 * sizeof(float));
    uint8_t *a = malloc(8192), *b = malloc(8192);
    for (size_t c = 0; c < 3; c++)
        for (size_t l = 0; l < sizeof lens / sizeof lens[0]; l++)
            for (int dist = 0; dist < N_DIST; dist++)
                for (int rep = 0; rep < 4; rep++) {
                    int64_t ne0 = lens[l], padded = (ne0 + 31) / 32 * 32;
                    memset(x, 0, 4096 * sizeof(float));
                    fill_row(x, ne0, dist); /* x[ne0..padded) stay 0: the padding */
                    uint64_t rb = llm_type_row_bytes(cases[c].t, (uint64_t)ne0);
                    cr_assert_eq(llm_quantize_row(cases[c].t, x, a, ne0), LLM_OK);
                    cases[c].ref(x, b, padded);
                    for (uint64_t k = 0; k < rb; k++)
                        cr_assert_eq(a[k], b[k], "%s n=%lld dist %d rep %d: byte %llu is %02x, ggml %02x",
                                     llm_type_name(cases[c].t), (long long)ne0, dist, rep,
                                     (unsigned long long)k, a[k], b[k]);
                }
    free(x);
    free(a);
    free(b);
}

// ----------------------------------------------------------------------------
// hand-computed blocks: quantize

Test(quant, q8_0_hand_computed_bytes)
{
    /* amax 127 -> d = 1 (0x3c00), q = roundf(x): halves round away from 0 */
    float x[32] = { 127, -127, 0.5f, -0.5f, 1.5f, 2.5f, -2.5f, 3.49f, 100.7f, -0.2f };
    uint8_t want[34] = { 0x00, 0x3c, 0x7f, 0x81, 0x01, 0xff, 0x02, 0x03, 0xfd, 0x03, 0x65, 0x00 };
    uint8_t got[34];
    cr_assert_eq(llm_quantize_row(LLM_TYPE_Q8_0, x, got, 32), LLM_OK);
    cr_assert(memcmp(got, want, 34) == 0);
}

Test(quant, q4_0_hand_computed_bytes)
{
    /* the signed max is -8: d = -8/-8 = 1, q = min(15, trunc(x + 8.5)) */
    float x[32] = { -8, 7, 8, 0, -0.5f, 0.49f, 0.5f, -3.2f };
    x[16] = 1;     /* 9 */
    x[17] = -7.6f; /* 0.9 -> 0 */
    uint8_t want[18] = { 0x00, 0x3c, 0x90, 0x0f, 0x8f, 0x88, 0x88, 0x88, 0x89, 0x85,
                         0x88, 0x88, 0x88, 0x88, 0x88, 0x88, 0x88, 0x88 };
    uint8_t got[18];
    cr_assert_eq(llm_quantize_row(LLM_TYPE_Q4_0, x, got, 32), LLM_OK);
    cr_assert(memcmp(got, want, 18) == 0);

    /* a positive signed max: d = 4/-8 = -0.5 (0xb800), id = -2 */
    float x2[32] = { 4, -4, 1 };
    uint8_t want2[18] = { 0x00, 0xb8, 0x80, 0x8f, 0x86, 0x88, 0x88, 0x88, 0x88, 0x88,
                          0x88, 0x88, 0x88, 0x88, 0x88, 0x88, 0x88, 0x88 };
    cr_assert_eq(llm_quantize_row(LLM_TYPE_Q4_0, x2, got, 32), LLM_OK);
    cr_assert(memcmp(got, want2, 18) == 0);
}

Test(quant, q4_1_hand_computed_bytes)
{
    /* min -5, max 10: d = 1 (0x3c00), m = -5 (0xc500), q = trunc(x + 5 + 0.5) */
    float x[32];
    for (int j = 0; j < 32; j++)
        x[j] = 0;
    x[0] = -5;
    x[1] = 10;
    x[2] = 0.4f;  /* 5.9 -> 5 */
    x[3] = 0.5f;  /* 6 */
    x[16] = 2.49f; /* 7.99 -> 7 */
    uint8_t want[20] = { 0x00, 0x3c, 0x00, 0xc5, 0x70, 0x5f, 0x55, 0x56 };
    for (int j = 8; j < 20; j++)
        want[j] = 0x55;
    uint8_t got[20];
    cr_assert_eq(llm_quantize_row(LLM_TYPE_Q4_1, x, got, 32), LLM_OK);
    cr_assert(memcmp(got, want, 20) == 0);
}

Test(quant, nf4_hand_computed_bytes)
{
    /* absmax 2 -> d = 2 (0x4000); x = 2 * code value, plus exact ties */
    float x[64] = { 0 };
    x[0] = -2.0f;                   /* code 0 */
    x[1] = 2.0f;                    /* code 15 */
    x[2] = 2 * 0.03979014977812767f; /* the 0 | 0.0796 midpoint: the lower code, 7 */
    x[3] = nextafterf(x[2], 1.0f);  /* just above: code 8 */
    x[4] = 2 * 0.44070982933044434f; /* code 12 */
    x[32] = 2 * -0.8480964004993439f; /* the -1 | -0.696 midpoint: code 0 */
    x[33] = 2 * -0.6961928009986877f; /* code 1 */
    uint8_t got[34], want[34] = { 0x00, 0x40 };
    uint8_t codes[64];
    for (int j = 0; j < 64; j++)
        codes[j] = 7;
    codes[0] = 0, codes[1] = 15, codes[2] = 7, codes[3] = 8, codes[4] = 12, codes[32] = 0,
    codes[33] = 1;
    for (int j = 0; j < 32; j++)
        want[2 + j] = (uint8_t)(codes[j] | codes[j + 32] << 4);
    cr_assert_eq(want[2], 0x00);
    cr_assert_eq(want[3], 0x1f);
    cr_assert_eq(llm_quantize_row(LLM_TYPE_NF4, x, got, 64), LLM_OK);
    cr_assert(memcmp(got, want, 34) == 0);
}

/* Our own types' rules, on values whose results are known exactly. */
Test(quant, own_types_hand_computed)
{
    uint8_t got[300];
    /* q4_g64: d = fp16_up(7.5/7.5) = 1; -7.5 -> -8 (code 0), 7.5 -> 7 (15), 2.5 -> 3 (11) */
    float x[64] = { -7.5f, 7.5f, 2.5f, 0.4f };
    cr_assert_eq(llm_quantize_row(LLM_TYPE_Q4_G64, x, got, 64), LLM_OK);
    cr_assert_eq(got[0], 0x00);
    cr_assert_eq(got[1], 0x3c);
    cr_assert_eq(got[2], 0x80); /* x[0] code 0, x[32] = 0 -> code 8 */
    cr_assert_eq(got[3], 0x8f);
    cr_assert_eq(got[4], 0x8b);
    cr_assert_eq(got[5], 0x88);

    /* q8_ch: float d = 254/127 = 2 in the header; q = round(x/2) */
    float y[3] = { 254, -3, 5 }; /* 127, -1.5 -> -2, 2.5 -> 3 */
    cr_assert_eq(llm_quantize_row(LLM_TYPE_Q8_CH, y, got, 3), LLM_OK);
    cr_assert_eq(rd_f32(got), 2.0f);
    cr_assert_eq(got[4], 127);
    cr_assert_eq((int8_t)got[5], -2);
    cr_assert_eq(got[6], 3);

    /* q8z_ch: m = -1, d = (254 - -1)/255 = 1; q = round(x + 1) */
    float z[3] = { -1, 254, 0.5f };
    cr_assert_eq(llm_quantize_row(LLM_TYPE_Q8Z_CH, z, got, 3), LLM_OK);
    cr_assert_eq(rd_f32(got), 1.0f);
    cr_assert_eq(rd_f32(got + 4), -1.0f);
    cr_assert_eq(got[8], 0);
    cr_assert_eq(got[9], 255);
    cr_assert_eq(got[10], 2);

    /* fp8: r = 448/448 = 1, e4m3(x) */
    float f[4] = { 448, -1, 0.1f, 0 };
    cr_assert_eq(llm_quantize_row(LLM_TYPE_FP8_E4M3, f, got, 4), LLM_OK);
    cr_assert_eq(rd_f32(got), 1.0f);
    cr_assert_eq(got[4], 0x7e);
    cr_assert_eq(got[5], 0xb8);
    cr_assert_eq(got[6], 0x1d); /* 0.1 = 1.6 * 2^-4 -> 1.625 * 2^-4: exp 3, man 5 */
    cr_assert_eq(got[7], 0x00);

    /* nf4_dq: row max 448 -> r = 1; blocks of absmax 448 and 3.3 -> E4M3
       up: 448 (0x7e) and 3.5 (exp 8, man 6: 0x46) */
    float w[128] = { 448 };
    w[64] = -3.3f;
    cr_assert_eq(llm_quantize_row(LLM_TYPE_NF4_DQ, w, got, 128), LLM_OK);
    cr_assert_eq(rd_f32(got), 1.0f);
    cr_assert_eq(got[4], 0x7e);
    cr_assert_eq(got[4 + 1], 0x7f); /* 448 -> code 15, x[32] = 0 -> 7 */
    cr_assert_eq(got[4 + 33], 0x46);
    /* -3.3/3.5 = -0.943 -> code 0 (-1.0) */
    cr_assert_eq(got[4 + 33 + 1], 0x70);
}

// ----------------------------------------------------------------------------
// hand-made blocks: dequantize

static void set16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

static void setf(uint8_t *p, float f)
{
    memcpy(p, &f, 4);
}

Test(quant, dequantize_hand_made_blocks)
{
    uint8_t b[300];
    float y[256];

    memset(b, 0, sizeof b); /* q8_0: d = 0.5 */
    set16(b, 0x3800);
    b[2] = 1, b[3] = (uint8_t)-2, b[4] = 127, b[5] = 0x80;
    cr_assert_eq(llm_dequantize_row(LLM_TYPE_Q8_0, b, y, 4), LLM_OK);
    cr_assert(y[0] == 0.5f && y[1] == -1.0f && y[2] == 63.5f && y[3] == -64.0f);

    memset(b, 0, sizeof b); /* q4_0: d = 2; element 0 low nibble, 16 high */
    set16(b, 0x4000);
    b[2] = 0x1f;
    cr_assert_eq(llm_dequantize_row(LLM_TYPE_Q4_0, b, y, 32), LLM_OK);
    cr_assert(y[0] == 14.0f && y[16] == -14.0f && y[1] == -16.0f);

    memset(b, 0, sizeof b); /* q4_1: d = 1, m = -1 */
    set16(b, 0x3c00), set16(b + 2, 0xbc00);
    b[4] = 0xf0;
    cr_assert_eq(llm_dequantize_row(LLM_TYPE_Q4_1, b, y, 32), LLM_OK);
    cr_assert(y[0] == -1.0f && y[16] == 14.0f);

    memset(b, 0, sizeof b); /* q8z_g32: d = 0.5, m = -10 */
    set16(b, 0x3800), set16(b + 2, 0xc900);
    b[4] = 0, b[5] = 255;
    cr_assert_eq(llm_dequantize_row(LLM_TYPE_Q8Z_G32, b, y, 2), LLM_OK);
    cr_assert(y[0] == -10.0f && y[1] == 117.5f);

    memset(b, 0, sizeof b); /* q8_g64: element 63 is the last byte */
    set16(b, 0x3c00);
    b[2 + 63] = (uint8_t)-5;
    cr_assert_eq(llm_dequantize_row(LLM_TYPE_Q8_G64, b, y, 64), LLM_OK);
    cr_assert(y[63] == -5.0f && y[0] == 0.0f);

    memset(b, 0, sizeof b); /* q4z_g128: element 64 = high nibble of qs[0] */
    set16(b, 0x4000), set16(b + 2, 0x3c00); /* d = 2, m = 1 */
    b[4] = 0x3a;
    cr_assert_eq(llm_dequantize_row(LLM_TYPE_Q4Z_G128, b, y, 128), LLM_OK);
    cr_assert(y[0] == 21.0f && y[64] == 7.0f && y[1] == 1.0f);

    memset(b, 0, sizeof b); /* q8_ch: float d = 0.25 */
    setf(b, 0.25f);
    b[4] = 4, b[5] = (uint8_t)-4, b[6] = 127;
    cr_assert_eq(llm_dequantize_row(LLM_TYPE_Q8_CH, b, y, 3), LLM_OK);
    cr_assert(y[0] == 1.0f && y[1] == -1.0f && y[2] == 31.75f);

    memset(b, 0, sizeof b); /* q8z_ch: d = 0.5, m = -3 */
    setf(b, 0.5f), setf(b + 4, -3.0f);
    b[8] = 0, b[9] = 200;
    cr_assert_eq(llm_dequantize_row(LLM_TYPE_Q8Z_CH, b, y, 2), LLM_OK);
    cr_assert(y[0] == -3.0f && y[1] == 97.0f);

    memset(b, 0, sizeof b); /* q4_ch, ne0 = 33: d = 2; the second block holds element 32 */
    setf(b, 2.0f);
    b[4] = 0x9f;
    b[4 + 16] = 0x0c;
    cr_assert_eq(llm_dequantize_row(LLM_TYPE_Q4_CH, b, y, 33), LLM_OK);
    cr_assert(y[0] == 14.0f && y[16] == 2.0f && y[32] == 8.0f && y[1] == -16.0f);

    memset(b, 0, sizeof b); /* q4z_ch: d = 0.5, m = 1 */
    setf(b, 0.5f), setf(b + 4, 1.0f);
    b[8] = 0x21;
    cr_assert_eq(llm_dequantize_row(LLM_TYPE_Q4Z_CH, b, y, 17), LLM_OK);
    cr_assert(y[0] == 1.5f && y[16] == 2.0f && y[1] == 1.0f);

    memset(b, 0, sizeof b); /* q3z_g64: d = 2, m = 1; sub-blocks at 4 and 16 */
    set16(b, 0x4000), set16(b + 2, 0x3c00);
    b[4] = 0xc6;      /* low bits: element 0: 2, 8: 1, 16: 0, 24: 3 */
    b[4 + 8] = 0x01;  /* high bit of element 0 */
    b[4 + 9] = 0x02;  /* high bit of element 9 */
    b[16 + 7] = 0x80, b[16 + 11] = 0x80; /* element 63: low 2, high bit */
    cr_assert_eq(llm_dequantize_row(LLM_TYPE_Q3Z_G64, b, y, 64), LLM_OK);
    cr_assert(y[0] == 13.0f && y[8] == 3.0f && y[16] == 1.0f && y[24] == 7.0f && y[9] == 9.0f &&
              y[63] == 13.0f && y[1] == 1.0f && y[62] == 1.0f);

    memset(b, 0, sizeof b); /* q3z_ch, ne0 = 33: d = 0.5, m = 1; element 32 in the second */
    setf(b, 0.5f), setf(b + 4, 1.0f);
    b[8 + 12] = 0x03, b[8 + 12 + 8] = 0x01;
    cr_assert_eq(llm_dequantize_row(LLM_TYPE_Q3Z_CH, b, y, 33), LLM_OK);
    cr_assert(y[32] == 4.5f && y[0] == 1.0f && y[31] == 1.0f);

    memset(b, 0, sizeof b); /* nf4: d = 2 */
    set16(b, 0x4000);
    b[2] = 0xf0, b[3] = 0x87;
    cr_assert_eq(llm_dequantize_row(LLM_TYPE_NF4, b, y, 64), LLM_OK);
    cr_assert(y[0] == -2.0f && y[32] == 2.0f && y[1] == 0.0f && y[33] == 2 * 0.07958029955625534f);

    memset(b, 0, sizeof b); /* nf4_dq: r = 0.5; s = 0x38 (1.0) and 0x7e (448) */
    setf(b, 0.5f);
    b[4] = 0x38, b[5] = 0x0f;
    b[4 + 33] = 0x7e, b[4 + 34] = 0xe0;
    cr_assert_eq(llm_dequantize_row(LLM_TYPE_NF4_DQ, b, y, 128), LLM_OK);
    cr_assert(y[0] == 0.5f && y[32] == -0.5f && y[64] == -224.0f && y[96] == 224.0f * 0.7229568362236023f);

    memset(b, 0, sizeof b); /* fp8_e4m3: r = 2 */
    setf(b, 2.0f);
    b[4] = 0x38, b[5] = 0xb8, b[6] = 0x7e, b[7] = 0x01, b[8] = 0x7f;
    cr_assert_eq(llm_dequantize_row(LLM_TYPE_FP8_E4M3, b, y, 5), LLM_OK);
    cr_assert(y[0] == 2.0f && y[1] == -2.0f && y[2] == 896.0f && y[3] == 0x1p-8f && isnan(y[4]));

    set16(b, 0x3c00), set16(b + 2, 0x0001), set16(b + 4, 0xfc00), set16(b + 6, 0xc000);
    cr_assert_eq(llm_dequantize_row(LLM_TYPE_F16, b, y, 4), LLM_OK);
    cr_assert(y[0] == 1.0f && y[1] == 0x1p-24f && isinf(y[2]) && y[2] < 0 && y[3] == -2.0f);
    set16(b, 0x3f80), set16(b + 2, 0xc0a0);
    cr_assert_eq(llm_dequantize_row(LLM_TYPE_BF16, b, y, 2), LLM_OK);
    cr_assert(y[0] == 1.0f && y[1] == -5.0f);
}

/* The 3-bit sub-block as blocks.h states it: codes i % 8 put code b's low
 * bits in every 2-bit field of byte b and its high bit in bits 4-7 of the
 * high-bit bytes; the quantizer's grid for x = i % 8 is d = 1, m = 0. */
Test(quant, q3_hand_computed_bytes)
{
    static const uint8_t want[12] = { 0x00, 0x55, 0xaa, 0xff, 0x00, 0x55,
                                      0xaa, 0xff, 0xf0, 0xf0, 0xf0, 0xf0 };
    uint8_t codes[32], sub[12], blk[16];
    float x[32];
    for (int i = 0; i < 32; i++)
        codes[i] = (uint8_t)(i % 8), x[i] = (float)(i % 8);
    llm_q3_pack(codes, 32, sub);
    cr_assert(memcmp(sub, want, 12) == 0);
    for (int i = 0; i < 32; i++)
        cr_assert_eq(llm_q3_code(sub, i), i % 8);
    cr_assert_eq(llm_quantize_row(LLM_TYPE_Q3Z_G32, x, blk, 32), LLM_OK);
    cr_assert(blk[0] == 0x00 && blk[1] == 0x3c && blk[2] == 0 && blk[3] == 0, /* d = 1, m = 0 */
              "%02x %02x %02x %02x", blk[0], blk[1], blk[2], blk[3]);
    cr_assert(memcmp(blk + 4, want, 12) == 0);
}

/* Rows at odd addresses (a q8_ch row of 31 elements is 35 bytes, so the
 * next row's header is unaligned) read the same as aligned ones. */
Test(quant, unaligned_rows)
{
    rng_state = 5;
    float x[33], y1[33], y2[33];
    fill_row(x, 33, DIST_GAUSS);
    for (size_t k = 0; k < N_WEIGHT_TYPES; k++) {
        enum llm_type t = weight_types[k];
        uint8_t buf[400] __attribute__((aligned(16)));
        uint64_t rb = llm_type_row_bytes(t, 33);
        cr_assert_eq(llm_quantize_row(t, x, buf, 33), LLM_OK);
        cr_assert_eq(llm_quantize_row(t, x, buf + 1 + 200, 33), LLM_OK);
        cr_assert(memcmp(buf, buf + 201, rb) == 0, "%s", llm_type_name(t));
        cr_assert_eq(llm_dequantize_row(t, buf, y1, 33), LLM_OK);
        cr_assert_eq(llm_dequantize_row(t, buf + 201, y2, 33), LLM_OK);
        cr_assert(memcmp(y1, y2, sizeof y1) == 0, "%s", llm_type_name(t));
    }
}

// ----------------------------------------------------------------------------
// FP8 E4M3 conversions

static double e4m3_formula(unsigned c) /* OCP E4M3FN, from the definition */
{
    int s = c >> 7, e = (c >> 3) & 15, m = c & 7;
    if (e == 15 && m == 7)
        return NAN;
    double v = e == 0 ? ldexp(m / 8.0, -6) : ldexp(1.0 + m / 8.0, e - 7);
    return s ? -v : v;
}

Test(quant, fp8_all_codes_match_the_definition)
{
    for (unsigned c = 0; c < 256; c++) {
        double want = e4m3_formula(c);
        float got = llm_fp8_e4m3_to_fp32((uint8_t)c);
        if (isnan(want)) {
            cr_assert(isnan(got), "code %02x", c);
            cr_assert(c == 0x7f || c == 0xff);
            continue;
        }
        cr_assert_eq((double)got, want, "code %02x: %g, want %g", c, got, want);
        cr_assert_eq(signbit(got) != 0, (c & 0x80) != 0, "code %02x sign", c);
        cr_assert_eq(llm_fp32_to_fp8_e4m3(got), c, "code %02x does not round-trip", c);
    }
    cr_assert_eq(llm_fp8_e4m3_to_fp32(0x7e), 448.0f);
    cr_assert_eq(llm_fp8_e4m3_to_fp32(0x01), 0x1p-9f);
    cr_assert_eq(llm_fp8_e4m3_to_fp32(0x08), 0x1p-6f);
}

/* The nearest finite E4M3 value of |f| (ties to the even code), by search. */
static unsigned e4m3_nearest(double a)
{
    if (a >= 448)
        return 0x7e;
    unsigned best = 0;
    for (unsigned c = 1; c < 0x7f; c++) {
        double dc = fabs(e4m3_formula(c) - a), db = fabs(e4m3_formula(best) - a);
        if (dc < db || (dc == db && (c & 1) == 0 && (best & 1)))
            best = c;
    }
    return best;
}

Test(quant, fp8_rounding_is_nearest_even_and_saturating)
{
    rng_state = 9;
    for (int i = 0; i < 20000; i++) {
        float f;
        if (i % 3 == 0) { /* midpoints of adjacent codes: the ties */
            unsigned c = (unsigned)(rng_next() % 0x7e);
            f = (float)((e4m3_formula(c) + e4m3_formula(c + 1)) / 2);
        } else {
            f = (float)ldexp(rng_unit() * 2, (int)(rng_next() % 24) - 14);
        }
        if (rng_next() & 1)
            f = -f;
        unsigned want = e4m3_nearest(fabs(f)) | (f < 0 ? 0x80 : 0);
        cr_assert_eq(llm_fp32_to_fp8_e4m3(f), want, "%.9g -> %02x, want %02x", f,
                     llm_fp32_to_fp8_e4m3(f), want);
    }
    cr_assert_eq(llm_fp32_to_fp8_e4m3(0x1p-10f), 0x00); /* tie 0 | 2^-9: even */
    cr_assert_eq(llm_fp32_to_fp8_e4m3(3 * 0x1p-10f), 0x02);
    cr_assert_eq(llm_fp32_to_fp8_e4m3(464.0f), 0x7e); /* past 448: saturate */
    cr_assert_eq(llm_fp32_to_fp8_e4m3(1e30f), 0x7e);
    cr_assert_eq(llm_fp32_to_fp8_e4m3(INFINITY), 0x7e);
    cr_assert_eq(llm_fp32_to_fp8_e4m3(-INFINITY), 0xfe);
    cr_assert_eq(llm_fp32_to_fp8_e4m3(-0.0f), 0x80);
    cr_assert_eq(llm_fp32_to_fp8_e4m3(1e-30f), 0x00);
    cr_assert_eq(llm_fp32_to_fp8_e4m3(NAN) & 0x7f, 0x7f);
}

// ----------------------------------------------------------------------------
// NF4 and NF4-DQ rules

Test(quant, nf4_codes_are_nearest)
{
    rng_state = 13;
    float x[640], y[640];
    uint8_t q[400];
    for (int rep = 0; rep < 50; rep++) {
        fill_row(x, 640, rep % 2 ? DIST_GAUSS : DIST_OUTLIERS);
        cr_assert_eq(llm_quantize_row(LLM_TYPE_NF4, x, q, 640), LLM_OK);
        cr_assert_eq(llm_dequantize_row(LLM_TYPE_NF4, q, y, 640), LLM_OK);
        for (int i = 0; i < 640; i++) {
            float d = rd_f16(q + i / 64 * 34);
            float v = x[i] / d;
            int want = 0; /* bitsandbytes' thresholds, strict '>' */
            while (want < 15 && v > bnb_mid[want])
                want++;
            cr_assert_eq(y[i], nf4[want] * d, "element %d: x/d=%.9g", i, v);
        }
    }
}

Test(quant, nf4_dq_block_scale_is_rounded_up)
{
    rng_state = 17;
    float x[1000];
    uint8_t q[1000];
    for (int dist = 0; dist < N_DIST; dist++) {
        fill_row(x, 1000, dist);
        for (int i = 0; i < 1000; i += 97)
            x[i] *= 1 + (float)(rng_next() % 100); /* blocks of different ranges */
        cr_assert_eq(llm_quantize_row(LLM_TYPE_NF4_DQ, x, q, 1000), LLM_OK);
        float r = rd_f32(q), rowmax = 0;
        for (int i = 0; i < 1000; i++)
            rowmax = fmaxf(rowmax, fabsf(x[i]));
        cr_assert_eq(r, rowmax / 448.0f);
        for (int b = 0; b * 64 < 1000; b++) {
            uint8_t s = q[4 + b * 33];
            double amax = block_absmax(x, 1000, b * 64, 64);
            cr_assert(s <= 0x7e, "block %d: s=%02x", b, s);
            if (r == 0) {
                cr_assert_eq(s, 0);
                continue;
            }
            /* s is the smallest code whose value reaches amax/r */
            cr_assert(llm_fp8_e4m3_to_fp32(s) >= (float)(amax / r) || s == 0x7e, "block %d", b);
            if (s > 0)
                cr_assert(llm_fp8_e4m3_to_fp32((uint8_t)(s - 1)) < (float)(amax / r), "block %d", b);
        }
    }
}

Test(quant, own_scales_are_rounded_outward)
{
    rng_state = 19;
    float x[128];
    uint8_t q[300];
    for (int rep = 0; rep < 200; rep++) {
        fill_row(x, 128, rep % N_DIST);
        double amax = block_absmax(x, 128, 0, 128);
        cr_assert_eq(llm_quantize_row(LLM_TYPE_Q8_G128, x, q, 128), LLM_OK);
        cr_assert(rd_f16(q) * 127.0 >= amax);
        cr_assert_eq(llm_quantize_row(LLM_TYPE_Q4_G128, x, q, 128), LLM_OK);
        cr_assert(rd_f16(q) * 7.5 >= amax);
        /* zero point: m <= min and m + L d >= max */
        float lo = x[0], hi = x[0];
        for (int i = 0; i < 128; i++)
            lo = fminf(lo, x[i]), hi = fmaxf(hi, x[i]);
        cr_assert_eq(llm_quantize_row(LLM_TYPE_Q4Z_G128, x, q, 128), LLM_OK);
        cr_assert(rd_f16(q + 2) <= lo);
        cr_assert((double)rd_f16(q + 2) + 15.0 * rd_f16(q) >= hi);
        cr_assert_eq(llm_quantize_row(LLM_TYPE_Q8Z_G128, x, q, 128), LLM_OK);
        cr_assert(rd_f16(q + 2) <= lo);
        cr_assert((double)rd_f16(q + 2) + 255.0 * rd_f16(q) >= hi);
    }
}

// ----------------------------------------------------------------------------
// non-finite input, bad arguments, conversion

Test(quant, nan_and_inf_do_not_crash)
{
    float x[200], y[200];
    uint8_t q[1000];
    for (size_t k = 0; k < N_WEIGHT_TYPES; k++) {
        enum llm_type t = weight_types[k];
        const struct llm_type_traits *tr = llm_type_traits(t);
        for (int i = 0; i < 200; i++)
            x[i] = 0.01f * (float)(i % 13) - 0.05f;
        x[3] = NAN;
        x[70] = INFINITY;
        x[140] = -INFINITY;
        cr_assert_eq(llm_quantize_row(t, x, q, 200), LLM_OK);
        cr_assert_eq(llm_dequantize_row(t, q, y, 200), LLM_OK);
        if (tr->is_quant) {
            /* the scales come from the finite elements: the rest stays finite,
               inf saturates with its sign, NaN reads back as 0 (fp8: NaN) */
            for (int i = 0; i < 200; i++)
                if (i != 3)
                    cr_assert(isfinite(y[i]), "%s: element %d is %g", tr->name, i, y[i]);
            cr_assert(y[70] > 0 && y[140] < 0, "%s: %g %g", tr->name, y[70], y[140]);
            if (t == LLM_TYPE_FP8_E4M3)
                cr_assert(isnan(y[3]));
            else
                cr_assert(isfinite(y[3]) && fabsf(y[3]) <= 0.1f, "%s: NaN -> %g", tr->name, y[3]);
        }
        /* rows of nothing but non-finite values, and values past fp16 */
        for (int i = 0; i < 200; i++)
            x[i] = i % 3 == 0 ? NAN : i % 3 == 1 ? INFINITY : -INFINITY;
        cr_assert_eq(llm_quantize_row(t, x, q, 200), LLM_OK);
        cr_assert_eq(llm_dequantize_row(t, q, y, 200), LLM_OK);
        for (int i = 0; i < 200; i++)
            x[i] = i % 2 ? FLT_MAX : -FLT_MAX / 3;
        cr_assert_eq(llm_quantize_row(t, x, q, 200), LLM_OK);
        cr_assert_eq(llm_dequantize_row(t, q, y, 200), LLM_OK);
        for (int i = 0; i < 200; i++)
            x[i] = i % 2 ? FLT_TRUE_MIN : 0.0f;
        cr_assert_eq(llm_quantize_row(t, x, q, 200), LLM_OK);
        cr_assert_eq(llm_dequantize_row(t, q, y, 200), LLM_OK);
        for (int i = 0; i < 200; i++)
            cr_assert(isfinite(y[i]), "%s: denormal row element %d is %g", tr->name, i, y[i]);
    }
}

Test(quant, bad_arguments_are_rejected)
{
    float x[4] = { 1, 2, 3, 4 };
    uint8_t q[64];
    cr_assert_eq(llm_quantize_row(LLM_TYPE_U8, x, q, 4), LLM_E_INVALID);
    cr_assert(strstr(llm_error_detail(LLM_E_INVALID), "u8") != NULL);
    cr_assert_eq(llm_dequantize_row(LLM_TYPE_I32, q, x, 4), LLM_E_INVALID);
    cr_assert_eq(llm_quantize_row((enum llm_type)7, x, q, 4), LLM_E_INVALID);
    cr_assert_eq(llm_quantize_row((enum llm_type)99, x, q, 4), LLM_E_INVALID);
    cr_assert_eq(llm_dequantize_row((enum llm_type)LLM_TYPE_COUNT_, q, x, 4), LLM_E_INVALID);
    cr_assert_eq(llm_quantize_row(LLM_TYPE_Q4_0, x, q, 0), LLM_E_INVALID);
    cr_assert_eq(llm_dequantize_row(LLM_TYPE_Q4_0, q, x, -3), LLM_E_INVALID);
    cr_assert_eq(llm_convert_rows(LLM_TYPE_F32, x, LLM_TYPE_U8, q, 4, 1), LLM_E_INVALID);
    cr_assert_eq(llm_convert_rows(LLM_TYPE_F32, x, LLM_TYPE_Q4_0, q, 4, -1), LLM_E_INVALID);
    cr_assert_eq(llm_convert_rows(LLM_TYPE_F32, x, LLM_TYPE_Q4_0, q, (int64_t)1 << 60, 1 << 20),
                 LLM_E_INVALID);
}

Test(quant, convert_rows_matches_row_functions)
{
    rng_state = 23;
    enum { NE0 = 100, NR = 5 };
    float x[NE0 * NR], y[NE0 * NR], row[NE0];
    fill_row(x, NE0 * NR, DIST_OUTLIERS);
    static uint8_t a[NE0 * NR * 4], b[NE0 * NR * 4], c[NE0 * NR * 4], want[NE0 * NR * 4];
    for (size_t k = 0; k < N_WEIGHT_TYPES; k++) {
        enum llm_type from = weight_types[k];
        uint64_t rbf = llm_type_row_bytes(from, NE0);
        /* f32 -> from: the same bytes as quantizing row by row */
        cr_assert_eq(llm_convert_rows(LLM_TYPE_F32, x, from, a, NE0, NR), LLM_OK);
        for (int r = 0; r < NR; r++)
            cr_assert_eq(llm_quantize_row(from, x + r * NE0, want + r * rbf, NE0), LLM_OK);
        cr_assert(memcmp(a, want, rbf * NR) == 0, "%s", llm_type_name(from));
        /* from -> f32 */
        cr_assert_eq(llm_convert_rows(from, a, LLM_TYPE_F32, y, NE0, NR), LLM_OK);
        for (int r = 0; r < NR; r++) {
            cr_assert_eq(llm_dequantize_row(from, a + r * rbf, row, NE0), LLM_OK);
            cr_assert(memcmp(row, y + r * NE0, sizeof row) == 0);
        }
        /* from -> from: a copy */
        memset(b, 0, sizeof b);
        cr_assert_eq(llm_convert_rows(from, a, from, b, NE0, NR), LLM_OK);
        cr_assert(memcmp(a, b, rbf * NR) == 0);
        /* from -> every other type: dequantize, then quantize */
        for (size_t k2 = 0; k2 < N_WEIGHT_TYPES; k2++) {
            enum llm_type to = weight_types[k2];
            if (to == from)
                continue; /* a copy, checked above; requantizing need not be idempotent */
            uint64_t rbt = llm_type_row_bytes(to, NE0);
            cr_assert_eq(llm_convert_rows(from, a, to, c, NE0, NR), LLM_OK);
            for (int r = 0; r < NR; r++) {
                cr_assert_eq(llm_dequantize_row(from, a + r * rbf, row, NE0), LLM_OK);
                cr_assert_eq(llm_quantize_row(to, row, want + r * rbt, NE0), LLM_OK);
            }
            cr_assert(memcmp(c, want, rbt * NR) == 0, "%s -> %s", llm_type_name(from),
                      llm_type_name(to));
        }
    }
    /* equal auxiliary types copy; different ones are refused */
    uint8_t u[8] = { 1, 2, 3, 4, 5, 6, 7, 8 }, v[8] = { 0 };
    cr_assert_eq(llm_convert_rows(LLM_TYPE_U8, u, LLM_TYPE_U8, v, 4, 2), LLM_OK);
    cr_assert(memcmp(u, v, 8) == 0);
    cr_assert_eq(llm_convert_rows(LLM_TYPE_U8, u, LLM_TYPE_I32, v, 2, 1), LLM_E_INVALID);
    cr_assert_eq(llm_convert_rows(LLM_TYPE_Q4_0, u, LLM_TYPE_F32, v, 4, 0), LLM_OK);
}
