/* test_grid.c: the grids of lib/quant/grid.c.
 *
 * The packed rows are read back by quant.c's llm_dequantize_row (an
 * independent reader of blocks.h), which must give llm_qgrid_value of every
 * code bit for bit; the group rules are checked on examples computed by hand
 * from quantization.md 1.1 (GPTQ) and 2.1 (AWQ).
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "../../../lib/common/fp16.h"
#include "../../../lib/quant/quant.h"
#include "../../../lib/quant/grid.h"
#include "../helpers.h"

static const enum llm_type grid_types[] = {
    LLM_TYPE_Q8_0,    LLM_TYPE_Q8_G64,  LLM_TYPE_Q8_G128, LLM_TYPE_Q8_CH,
    LLM_TYPE_Q8Z_G32, LLM_TYPE_Q8Z_G64, LLM_TYPE_Q8Z_G128, LLM_TYPE_Q8Z_CH,
    LLM_TYPE_Q4_0,    LLM_TYPE_Q4_G64,  LLM_TYPE_Q4_G128, LLM_TYPE_Q4_CH,
    LLM_TYPE_Q4_1,    LLM_TYPE_Q4Z_G64, LLM_TYPE_Q4Z_G128, LLM_TYPE_Q4Z_CH,
    LLM_TYPE_Q3Z_G32, LLM_TYPE_Q3Z_G64, LLM_TYPE_Q3Z_G128, LLM_TYPE_Q3Z_CH,
};
#define N_GRID_TYPES (sizeof grid_types / sizeof grid_types[0])

static const int64_t lengths[] = { 1, 31, 64, 172, 200, 576 };

static uint64_t rng_state;

static uint64_t rng_next(void)
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static float rng_sym(void) /* [-1, 1) */
{
    return (float)((double)(rng_next() >> 11) / 4503599627370496.0 - 1.0);
}

static uint32_t bits_of(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float half(float v)
{
    return llm_fp16_to_fp32(llm_fp32_to_fp16(v));
}

Test(grid, grid_of_each_type)
{
    static const struct { enum llm_type t; int bits, group, zp; } want[] = {
        { LLM_TYPE_Q8_0, 8, 32, 0 },    { LLM_TYPE_Q8_G64, 8, 64, 0 },
        { LLM_TYPE_Q8_G128, 8, 128, 0 }, { LLM_TYPE_Q8_CH, 8, 0, 0 },
        { LLM_TYPE_Q8Z_G32, 8, 32, 1 }, { LLM_TYPE_Q8Z_G64, 8, 64, 1 },
        { LLM_TYPE_Q8Z_G128, 8, 128, 1 }, { LLM_TYPE_Q8Z_CH, 8, 0, 1 },
        { LLM_TYPE_Q4_0, 4, 32, 0 },    { LLM_TYPE_Q4_G64, 4, 64, 0 },
        { LLM_TYPE_Q4_G128, 4, 128, 0 }, { LLM_TYPE_Q4_CH, 4, 0, 0 },
        { LLM_TYPE_Q4_1, 4, 32, 1 },    { LLM_TYPE_Q4Z_G64, 4, 64, 1 },
        { LLM_TYPE_Q4Z_G128, 4, 128, 1 }, { LLM_TYPE_Q4Z_CH, 4, 0, 1 },
        { LLM_TYPE_Q3Z_G32, 3, 32, 1 }, { LLM_TYPE_Q3Z_G64, 3, 64, 1 },
        { LLM_TYPE_Q3Z_G128, 3, 128, 1 }, { LLM_TYPE_Q3Z_CH, 3, 0, 1 },
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        struct llm_qgrid g;
        cr_assert_eq(llm_qgrid_of(want[i].t, &g), LLM_OK);
        cr_expect_eq(g.type, want[i].t);
        cr_expect_eq(g.bits, want[i].bits, "%s", llm_type_name(want[i].t));
        cr_expect_eq(g.group, want[i].group, "%s", llm_type_name(want[i].t));
        cr_expect_eq(g.zero_point, want[i].zp, "%s", llm_type_name(want[i].t));
        cr_expect_eq(g.maxq, (1 << want[i].bits) - 1);
        cr_expect_eq(g.fp8, 0);
        /* and back */
        cr_expect_eq(llm_qgrid_type(want[i].bits, want[i].zp, want[i].group), (int)want[i].t);
    }
    cr_expect_eq(llm_qgrid_type(3, 0, 128), -1); /* no symmetric 3-bit grid */
    cr_expect_eq(llm_qgrid_type(2, 1, 128), -1);
    struct llm_qgrid f;
    cr_assert_eq(llm_qgrid_of(LLM_TYPE_FP8_E4M3, &f), LLM_OK);
    cr_expect(f.fp8 == 1 && f.bits == 8 && f.group == 0 && f.zero_point == 0 && f.maxq == 255);
    static const enum llm_type bad[] = { LLM_TYPE_F32, LLM_TYPE_F16, LLM_TYPE_BF16, LLM_TYPE_NF4,
                                         LLM_TYPE_NF4_DQ, LLM_TYPE_U8 };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct llm_qgrid g;
        cr_expect_eq(llm_qgrid_of(bad[i], &g), LLM_E_INVALID, "%s", llm_type_name(bad[i]));
        cr_expect(strstr(llm_error_detail(LLM_E_INVALID), llm_type_name(bad[i])) != NULL);
    }
}

/* Quantize x with the grid (codes from llm_qgrid_code, or random codes),
 * pack, and compare quant.c's dequantization with llm_qgrid_value. */
static void check_pack(enum llm_type t, int64_t ne0, int random_codes, float scale)
{
    struct llm_qgrid g;
    cr_assert_eq(llm_qgrid_of(t, &g), LLM_OK);
    const int64_t G = g.group ? g.group : ne0;
    const int64_t ng = (ne0 + G - 1) / G;
    float *x = malloc((size_t)ne0 * sizeof *x);
    float *y = malloc((size_t)ne0 * sizeof *y);
    uint8_t *q = malloc((size_t)ne0), *q2 = malloc((size_t)ne0);
    struct llm_qgroup *p = malloc((size_t)ng * sizeof *p), *p2 = malloc((size_t)ng * sizeof *p2);
    size_t rb = (size_t)llm_type_row_bytes(t, (uint64_t)ne0);
    uint8_t *row = malloc(rb);
    cr_assert(x && y && q && q2 && p && p2 && row && rb);
    for (int64_t i = 0; i < ne0; i++)
        x[i] = scale * rng_sym() + (random_codes ? 0.3f * scale : 0.0f);
    for (int64_t k = 0; k < ng; k++) {
        const int64_t n = ne0 - k * G < G ? ne0 - k * G : G;
        if (random_codes && k % 2)
            llm_qgrid_group_awq(&g, x + k * G, n, &p[k]);
        else
            llm_qgrid_group(&g, x + k * G, n, &p[k]);
        for (int64_t j = 0; j < n; j++)
            q[k * G + j] = (uint8_t)(random_codes ? (int)(rng_next() % (uint64_t)(g.maxq + 1))
                                                  : llm_qgrid_code(&g, &p[k], x[k * G + j]));
    }
    memset(row, 0xa5, rb);
    cr_assert_eq(llm_qgrid_pack_row(&g, q, p, ne0, row), LLM_OK);
    cr_assert_eq(llm_dequantize_row(t, row, y, ne0), LLM_OK);
    for (int64_t i = 0; i < ne0; i++) {
        float want = llm_qgrid_value(&g, &p[i / G], q[i]);
        cr_assert_eq(bits_of(y[i]), bits_of(want), "%s ne0 %lld i %lld code %d: %g != %g",
                     llm_type_name(t), (long long)ne0, (long long)i, q[i], y[i], want);
        /* nearest code of the group: within d/2, or d at an end of the range
         * that the reference's rounding clamps (+amax -> 7s), plus the
         * rounding of m; a symmetric group with no negative element has the
         * reference's half range (checked in gptq_sym4_rule), so ne0 1 is left out */
        if (!random_codes && ne0 > 1)
            cr_assert_leq(fabs(y[i] - x[i]), p[i / G].d + fabs(p[i / G].m) * 0x1p-10 + 1e-7,
                          "%s ne0 %lld i %lld x %g y %g d %g m %g z %d", llm_type_name(t),
                          (long long)ne0, (long long)i, x[i], y[i], p[i / G].d, p[i / G].m,
                          p[i / G].zero);
    }
    cr_assert_eq(llm_qgrid_unpack_row(&g, row, ne0, q2, p2), LLM_OK);
    cr_assert_eq(memcmp(q, q2, (size_t)ne0), 0, "%s ne0 %lld codes", llm_type_name(t),
                 (long long)ne0);
    for (int64_t k = 0; k < ng; k++) {
        cr_assert_eq(bits_of(p2[k].d), bits_of(p[k].d), "%s group %lld d", llm_type_name(t),
                     (long long)k);
        cr_assert_eq(bits_of(p2[k].m), bits_of(p[k].m), "%s group %lld m", llm_type_name(t),
                     (long long)k);
        cr_assert_eq(p2[k].zero, p[k].zero, "%s group %lld zero", llm_type_name(t), (long long)k);
    }
    free(x), free(y), free(q), free(q2), free(p), free(p2), free(row);
}

Test(grid, pack_dequantizes_to_grid_values)
{
    rng_state = 11;
    for (size_t ti = 0; ti < N_GRID_TYPES; ti++)
        for (size_t li = 0; li < sizeof lengths / sizeof lengths[0]; li++) {
            check_pack(grid_types[ti], lengths[li], 0, 0.05f);
            check_pack(grid_types[ti], lengths[li], 0, 40.0f);
            check_pack(grid_types[ti], lengths[li], 1, 0.3f);
        }
}

/* The FP8 grid is quant.c's fp8_e4m3 quantizer spelled out: codes taken
 * one by one with the row's parameters pack to the very bytes that
 * llm_quantize_row writes, every code reads back as llm_qgrid_value, and
 * each value is the nearest E4M3 step (relative error at most 2^-4, or half
 * a subnormal step of d * 2^-9). */
Test(grid, fp8_is_the_rtn_quantizer)
{
    rng_state = 17;
    struct llm_qgrid g;
    cr_assert_eq(llm_qgrid_of(LLM_TYPE_FP8_E4M3, &g), LLM_OK);
    static const float scales[] = { 1e-6f, 0.05f, 3.0f, 4e4f };
    for (size_t li = 0; li < sizeof lengths / sizeof lengths[0]; li++)
        for (size_t si = 0; si < sizeof scales / sizeof scales[0]; si++) {
            const int64_t n = lengths[li];
            size_t rb = (size_t)llm_type_row_bytes(LLM_TYPE_FP8_E4M3, (uint64_t)n);
            float *x = malloc((size_t)n * sizeof *x), *y = malloc((size_t)n * sizeof *y);
            uint8_t *q = malloc((size_t)n), *q2 = malloc((size_t)n);
            uint8_t *row = malloc(rb), *ref = malloc(rb);
            cr_assert(x && y && q && q2 && row && ref);
            for (int64_t i = 0; i < n; i++) /* magnitudes over 8 binades, both signs */
                x[i] = scales[si] * rng_sym() * ldexpf(1.0f, -(int)(rng_next() % 8));
            struct llm_qgroup p, p2;
            llm_qgrid_group(&g, x, n, &p);
            for (int64_t i = 0; i < n; i++)
                q[i] = (uint8_t)llm_qgrid_code(&g, &p, x[i]);
            cr_assert_eq(llm_qgrid_pack_row(&g, q, &p, n, row), LLM_OK);
            cr_assert_eq(llm_quantize_row(LLM_TYPE_FP8_E4M3, x, ref, n), LLM_OK);
            cr_assert_eq(memcmp(row, ref, rb), 0, "n %lld scale %g", (long long)n,
                         (double)scales[si]);
            cr_assert_eq(llm_dequantize_row(LLM_TYPE_FP8_E4M3, row, y, n), LLM_OK);
            for (int64_t i = 0; i < n; i++) {
                float v = llm_qgrid_value(&g, &p, q[i]);
                cr_assert_eq(bits_of(y[i]), bits_of(v), "n %lld i %lld", (long long)n,
                             (long long)i);
                cr_assert_leq(fabsf(v - x[i]), fabsf(x[i]) * 0x1p-4f + p.d * 0x1p-10f,
                              "x %g v %g d %g", (double)x[i], (double)v, (double)p.d);
            }
            cr_assert_eq(llm_qgrid_unpack_row(&g, row, n, q2, &p2), LLM_OK);
            cr_assert_eq(memcmp(q, q2, (size_t)n), 0);
            cr_assert(bits_of(p2.d) == bits_of(p.d) && p2.m == 0.0f && p2.zero == 0);
            free(x), free(y), free(q), free(q2), free(row), free(ref);
        }
    /* a NaN code (0x7f, 0xff) is not on the grid; a zero row keeps a non-zero scale */
    struct llm_qgroup p;
    float zeros[4] = { 0 };
    llm_qgrid_group(&g, zeros, 4, &p);
    cr_expect(p.d > 0.0f);
    cr_expect_eq(llm_qgrid_code(&g, &p, 0.0f), 0);
    uint8_t q[4] = { 1, 0x7e, 0xfe, 0x7f }, row[8];
    cr_expect_eq(llm_qgrid_pack_row(&g, q, &p, 4, row), LLM_E_INVALID);
    q[3] = 0xff;
    cr_expect_eq(llm_qgrid_pack_row(&g, q, &p, 4, row), LLM_E_INVALID);
    q[3] = 0x80;
    cr_expect_eq(llm_qgrid_pack_row(&g, q, &p, 4, row), LLM_OK);
    /* saturation: beyond 448 d the code is 448's */
    llm_qgrid_group_set(&g, 1.0f, 0, &p);
    cr_expect_eq(llm_qgrid_code(&g, &p, 1e9f), 0x7e);
    cr_expect_eq(llm_qgrid_code(&g, &p, -1e9f), 0xfe);
}

Test(grid, padding_takes_the_code_of_zero)
{
    struct llm_qgrid g;
    cr_assert_eq(llm_qgrid_of(LLM_TYPE_Q4Z_G64, &g), LLM_OK);
    struct llm_qgroup p[2];
    llm_qgrid_group_set(&g, 0.25f, 5, &p[0]);
    llm_qgrid_group_set(&g, 0.5f, 3, &p[1]);
    uint8_t q[65];
    memset(q, 9, sizeof q);
    uint8_t row[2 * 36];
    cr_assert_eq(llm_qgrid_pack_row(&g, q, p, 65, row), LLM_OK);
    /* block 1: element 64 = low nibble of qs[0]; the rest is padding = zero 3 */
    const uint8_t *qs = row + 36 + 4;
    cr_expect_eq(qs[0], 9 | 3 << 4);
    for (int j = 1; j < 32; j++)
        cr_expect_eq(qs[j], 3 | 3 << 4, "byte %d", j);

    cr_assert_eq(llm_qgrid_of(LLM_TYPE_Q4_CH, &g), LLM_OK);
    llm_qgrid_group_set(&g, 0.25f, 0, &p[0]);
    uint8_t row2[4 + 16];
    cr_assert_eq(llm_qgrid_pack_row(&g, q, p, 3, row2), LLM_OK);
    cr_expect_eq(row2[4], 9 | 8 << 4);
    cr_expect_eq(row2[4 + 5], 8 | 8 << 4);
    q[0] = 16;
    cr_expect_eq(llm_qgrid_pack_row(&g, q, p, 3, row2), LLM_E_INVALID);
}

Test(grid, gptq_sym4_rule)
{
    struct llm_qgrid g;
    cr_assert_eq(llm_qgrid_of(LLM_TYPE_Q4_G128, &g), LLM_OK);
    const float x[] = { 1.5f, -0.3f, 0.7f, -1.2f };
    struct llm_qgroup p;
    llm_qgrid_group(&g, x, 4, &p);
    /* amax 1.5: scale = 3/15 = 0.2, zero 8 */
    cr_assert_eq(p.zero, 8);
    cr_assert_eq(p.m, 0.0f);
    cr_assert_eq(bits_of(p.d), bits_of(half(3.0f / 15.0f)));
    /* +amax: round(7.5) + 8 = 16 clamps to 15, i.e. 7s (quantization.md 1.1) */
    cr_expect_eq(llm_qgrid_code(&g, &p, 1.5f), 15);
    cr_expect_eq(llm_qgrid_value(&g, &p, 15), 7.0f * p.d);
    cr_expect_eq(llm_qgrid_code(&g, &p, -1.5f), 0);
    cr_expect_eq(llm_qgrid_value(&g, &p, 0), -8.0f * p.d);
    cr_expect_eq(llm_qgrid_code(&g, &p, -0.3f), 8 - 2); /* round(-1.5004) */
    cr_expect_eq(llm_qgrid_code(&g, &p, 0.0f), 8);

    /* ties go to even: d = 0.25 exactly */
    llm_qgrid_group_set(&g, 0.25f, 8, &p);
    cr_expect_eq(llm_qgrid_code(&g, &p, 0.375f), 8 + 2);  /* 1.5 -> 2 */
    cr_expect_eq(llm_qgrid_code(&g, &p, 0.625f), 8 + 2);  /* 2.5 -> 2 */
    cr_expect_eq(llm_qgrid_code(&g, &p, -0.375f), 8 - 2); /* -1.5 -> -2 */
    cr_expect_eq(llm_qgrid_code(&g, &p, -0.125f), 8);     /* -0.5 -> -0 */
    cr_expect_eq(llm_qgrid_code(&g, &p, 100.0f), 15);
    cr_expect_eq(llm_qgrid_code(&g, &p, -INFINITY), 0);
    cr_expect_eq(llm_qgrid_code(&g, &p, NAN), 8);

    /* the reference mirrors only a negative minimum: a group with no
     * negative element keeps xmin = 0, so scale = xmax / 15 */
    const float pos[] = { 0.5f, 1.5f };
    llm_qgrid_group(&g, pos, 2, &p);
    cr_expect_eq(bits_of(p.d), bits_of(half(1.5f / 15.0f)));
    cr_expect_eq(p.zero, 8);
    cr_expect_eq(llm_qgrid_code(&g, &p, 1.5f), 15);

    /* all zero: the range [-1, 1] */
    const float z[] = { 0.0f, 0.0f, 0.0f };
    llm_qgrid_group(&g, z, 3, &p);
    cr_expect_eq(bits_of(p.d), bits_of(half(2.0f / 15.0f)));
    cr_expect_eq(llm_qgrid_code(&g, &p, 0.0f), 8);

    /* int8 sym: zero 128, stored as q - 128 */
    cr_assert_eq(llm_qgrid_of(LLM_TYPE_Q8_CH, &g), LLM_OK);
    llm_qgrid_group(&g, x, 4, &p);
    cr_expect_eq(p.zero, 128);
    cr_expect_eq(bits_of(p.d), bits_of(3.0f / 255.0f)); /* float32: not rounded to half */
    cr_expect_eq(llm_qgrid_code(&g, &p, 1.5f), 255);    /* round(127.5) = 128, clamped */
}

Test(grid, gptq_asym_by_hand)
{
    struct llm_qgrid g;
    cr_assert_eq(llm_qgrid_of(LLM_TYPE_Q4Z_G64, &g), LLM_OK);
    const float x[] = { -0.5f, 0.1f, 1.0f, 0.25f };
    struct llm_qgroup p;
    llm_qgrid_group(&g, x, 4, &p);
    /* scale = 1.5/15 = 0.1 -> fp16 0.0999755859375; zero = round(0.5/0.1) = 5;
     * -5 d = -0.4998779296875 = -2047.5 * 2^-12 rounds (to even) to m = -0.5 */
    cr_assert_eq(p.d, 0.0999755859375f);
    cr_assert_eq(p.zero, 5);
    cr_assert_eq(p.m, -0.5f);
    cr_expect_eq(llm_qgrid_code(&g, &p, -0.5f), 0);  /* round(-5.0012) + 5 */
    cr_expect_eq(llm_qgrid_code(&g, &p, 0.1f), 6);   /* round(1.0002) + 5 */
    cr_expect_eq(llm_qgrid_code(&g, &p, 1.0f), 15);  /* round(10.0024) + 5 */
    cr_expect_eq(llm_qgrid_code(&g, &p, 0.25f), 8);  /* round(2.5006) + 5 */
    cr_expect_eq(llm_qgrid_value(&g, &p, 15), 0.9996337890625f); /* 15 d - 0.5 */
    cr_expect_eq(llm_qgrid_value(&g, &p, 8), 0.2998046875f);
    cr_expect_eq(llm_qgrid_value(&g, &p, 0), -0.5f);

    /* the range is widened to contain 0: all positive -> zero 0 */
    const float pos[] = { 0.2f, 0.5f, 1.0f };
    llm_qgrid_group(&g, pos, 3, &p);
    cr_expect_eq(p.zero, 0);
    cr_expect_eq(bits_of(p.d), bits_of(half(1.0f / 15.0f)));
    cr_expect_eq(p.m, 0.0f);
    /* all zero: [-1, 1]; in float32 -(-1) / (2/15) = 7.4999996, so zero 7 */
    const float z[] = { 0.0f };
    llm_qgrid_group(&g, z, 1, &p);
    cr_expect_eq(p.zero, 7);

    /* per-channel keeps float32 */
    cr_assert_eq(llm_qgrid_of(LLM_TYPE_Q4Z_CH, &g), LLM_OK);
    llm_qgrid_group(&g, x, 4, &p);
    cr_expect_eq(bits_of(p.d), bits_of(1.5f / 15.0f));
    cr_expect_eq(p.zero, 5);
    cr_expect_eq(bits_of(p.m), bits_of(-p.d * 5.0f));
}

Test(grid, awq_rule_by_hand)
{
    struct llm_qgrid g;
    cr_assert_eq(llm_qgrid_of(LLM_TYPE_Q4Z_G128, &g), LLM_OK);
    struct llm_qgroup p;
    /* not widened to 0: scale = 0.8/15, zero = clamp(-round(3.75)) = 0 */
    const float pos[] = { 0.2f, 0.5f, 1.0f };
    llm_qgrid_group_awq(&g, pos, 3, &p);
    cr_expect_eq(bits_of(p.d), bits_of(half((1.0f - 0.2f) / 15.0f)));
    cr_expect_eq(p.zero, 0);
    const float x[] = { -1.0f, 0.5f };
    llm_qgrid_group_awq(&g, x, 2, &p);
    cr_expect_eq(bits_of(p.d), bits_of(half(1.5f / 15.0f)));
    cr_expect_eq(p.zero, 10);
    const float neg[] = { -1.0f, -0.5f }; /* -round(-1/(0.5/15)) = 30 -> 15 */
    llm_qgrid_group_awq(&g, neg, 2, &p);
    cr_expect_eq(p.zero, 15);
    const float c[] = { 0.0f, 0.0f }; /* scale clamps at 1e-5 / 15 */
    llm_qgrid_group_awq(&g, c, 2, &p);
    cr_expect_eq(bits_of(p.d), bits_of(half(1e-5f / 15.0f)));
    /* sym: amax / 7 */
    cr_assert_eq(llm_qgrid_of(LLM_TYPE_Q4_G64, &g), LLM_OK);
    const float s[] = { -1.4f, 0.5f };
    llm_qgrid_group_awq(&g, s, 2, &p);
    cr_expect_eq(bits_of(p.d), bits_of(half(1.4f / 7.0f)));
    cr_expect_eq(p.zero, 8);
    cr_expect_eq(llm_qgrid_code(&g, &p, -1.4f), 1); /* -7 + 8 */
}

Test(grid, group_set_and_unpack_zero)
{
    struct llm_qgrid g;
    cr_assert_eq(llm_qgrid_of(LLM_TYPE_Q8Z_G32, &g), LLM_OK);
    struct llm_qgroup p, p2;
    rng_state = 5;
    for (int k = 0; k < 2000; k++) {
        float s = (float)ldexp(1.0 + 0.5 * (rng_sym() + 1.0), (int)(rng_next() % 30) - 24);
        int z = (int)(rng_next() % 256);
        llm_qgrid_group_set(&g, s, z, &p);
        cr_assert_eq(p.zero, z);
        cr_assert_eq(bits_of(p.d), bits_of(half(s)));
        cr_assert_eq(bits_of(p.m), bits_of(half(-p.d * (float)z)));
        uint8_t q[32] = { 0 }, q2[32], row[36];
        cr_assert_eq(llm_qgrid_pack_row(&g, q, &p, 32, row), LLM_OK);
        cr_assert_eq(llm_qgrid_unpack_row(&g, row, 32, q2, &p2), LLM_OK);
        cr_assert_eq(p2.zero, z, "scale %g zero %d", s, z);
    }
    /* a scale that underflows binary16 is kept positive */
    llm_qgrid_group_set(&g, 1e-12f, 3, &p);
    cr_expect_gt(p.d, 0.0f);
    cr_expect_eq(llm_qgrid_code(&g, &p, 0.0f), 3);
}

/* The round-to-nearest rule on a symmetric grid: the element of largest
 * magnitude is code 0 (its value exact up to the binary16 scale), the step
 * is amax/8 (GPTQ's is 2 amax/15), and elements are within half a step
 * except past the grid's other end. Zero-point grids take AWQ's rule. */
Test(grid, rtn_rule)
{
    struct llm_qgrid g;
    cr_assert_eq(llm_qgrid_of(LLM_TYPE_Q4_G64, &g), LLM_OK);
    float x[64];
    uint32_t st = 7;
    for (int trial = 0; trial < 50; trial++) {
        for (int i = 0; i < 64; i++) {
            st = st * 1664525u + 1013904223u;
            x[i] = ((float)(st >> 8) / 16777216.0f - 0.5f) * (float)(trial + 1);
        }
        int e = 0;
        for (int i = 1; i < 64; i++)
            if (fabsf(x[i]) > fabsf(x[e]))
                e = i;
        struct llm_qgroup p;
        llm_qgrid_group_rtn(&g, x, 64, &p);
        cr_assert_eq(p.zero, 8);
        cr_assert_eq(llm_qgrid_code(&g, &p, x[e]), 0);
        cr_assert_float_eq(llm_qgrid_value(&g, &p, 0), x[e], fabsf(x[e]) * 1e-3f);
        for (int i = 0; i < 64; i++) {
            /* the far end of the grid stops at 7 steps: elements beyond it
             * (code 15) are within one step, the others within half */
            int c = llm_qgrid_code(&g, &p, x[i]);
            float v = llm_qgrid_value(&g, &p, c);
            float lim = fabsf(p.d) * (c == 15 ? 1.0f : 0.5f) * 1.001f;
            cr_assert_leq(fabsf(v - x[i]), lim, "trial %d elem %d", trial, i);
        }
        cr_assert_float_eq(fabsf(p.d), fabsf(x[e]) / 8.0f, fabsf(x[e]) * 1e-3f);
    }
    struct llm_qgroup a, b;
    cr_assert_eq(llm_qgrid_of(LLM_TYPE_Q4Z_G64, &g), LLM_OK);
    llm_qgrid_group_rtn(&g, x, 64, &a);
    llm_qgrid_group_awq(&g, x, 64, &b);
    cr_assert(a.d == b.d && a.m == b.m && a.zero == b.zero);
}

/* sum |Q(x) - x|^2 on the stored grid: what the file gives back */
static double stored_err(const struct llm_qgrid *g, const struct llm_qgroup *p, const float *x,
                         int n)
{
    double e = 0.0;
    for (int i = 0; i < n; i++) {
        double d = llm_qgrid_value(g, p, llm_qgrid_code(g, p, x[i])) - x[i];
        e += d * d;
    }
    return e;
}

/* The reference's mse search (grid.h): norm 0 is the rule itself; on
 * bell-shaped groups it shrinks the range and the error falls; AWQ's rule
 * is searched as written in grid.h (a brute force here); fp8 has no
 * search. */
Test(grid, mse_search)
{
    static const enum llm_type types[] = { LLM_TYPE_Q4Z_G64, LLM_TYPE_Q4_G64, LLM_TYPE_Q3Z_G64,
                                           LLM_TYPE_Q4Z_CH };
    static const enum llm_qrule rules[] = { LLM_QRULE_GPTQ, LLM_QRULE_AWQ, LLM_QRULE_RTN };
    void (*const plain[])(const struct llm_qgrid *, const float *, int64_t,
                          struct llm_qgroup *) = { llm_qgrid_group, llm_qgrid_group_awq,
                                                   llm_qgrid_group_rtn };
    float x[64];
    rng_state = 11;
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        struct llm_qgrid g;
        cr_assert_eq(llm_qgrid_of(types[t], &g), LLM_OK);
        for (int r = 0; r < 3; r++) {
            double e_plain = 0.0, e_mse = 0.0;
            int shrunk = 0;
            for (int trial = 0; trial < 100; trial++) {
                for (int i = 0; i < 64; i++) /* bell-shaped, as weights are */
                    x[i] = 0.05f * (rng_sym() + rng_sym() + rng_sym());
                struct llm_qgroup a, b, c;
                plain[r](&g, x, 64, &a);
                llm_qgrid_group_mse(&g, rules[r], 0.0f, x, 64, &b);
                cr_assert(bits_of(a.d) == bits_of(b.d) && bits_of(a.m) == bits_of(b.m) &&
                              a.zero == b.zero,
                          "type %zu rule %d: norm 0 is not the rule", t, r);
                llm_qgrid_group_mse(&g, rules[r], 2.0f, x, 64, &c);
                double ea = stored_err(&g, &a, x, 64), ec = stored_err(&g, &c, x, 64);
                /* never worse, but for the rounding of the stored scale */
                cr_assert_leq(ec, ea * 1.01, "type %zu rule %d trial %d", t, r, trial);
                shrunk += fabsf(c.d) < fabsf(a.d);
                e_plain += ea;
                e_mse += ec;
            }
            cr_expect_gt(shrunk, 50, "type %zu rule %d: %d of 100 shrunk", t, r, shrunk);
            cr_expect_lt(e_mse, 0.95 * e_plain, "type %zu rule %d: %g against %g", t, r, e_mse,
                         e_plain);
        }
    }

    /* AWQ's rule, zero points, norm 2.4, brute force on random groups */
    struct llm_qgrid g;
    cr_assert_eq(llm_qgrid_of(LLM_TYPE_Q4Z_G64, &g), LLM_OK);
    for (int trial = 0; trial < 200; trial++) {
        float lo = INFINITY, hi = -INFINITY;
        for (int i = 0; i < 64; i++) {
            x[i] = rng_sym() * (trial % 2 ? 1.0f : 0.01f) + (trial % 3 ? 0.0f : 0.3f);
            lo = fminf(lo, x[i]);
            hi = fmaxf(hi, x[i]);
        }
        double best = INFINITY;
        float bs = 0.0f;
        int bz = 0;
        for (int i = 0; i < 80; i++) {
            float f = (float)(1.0 - i / 100.0);
            float s = fmaxf(hi * f - lo * f, 1e-5f) / 15.0f;
            float z = fminf(fmaxf(-rintf(lo * f / s), 0.0f), 15.0f);
            double e = 0.0;
            for (int k = 0; k < 64; k++) {
                float q = fminf(fmaxf(rintf(x[k] / s) + z, 0.0f), 15.0f);
                e += pow(fabsf(s * (q - z) - x[k]), 2.4);
            }
            if (e < best)
                best = e, bs = s, bz = (int)z;
        }
        struct llm_qgroup want, got;
        llm_qgrid_group_set(&g, bs, bz, &want);
        llm_qgrid_group_mse(&g, LLM_QRULE_AWQ, 2.4f, x, 64, &got);
        cr_assert(bits_of(want.d) == bits_of(got.d) && want.zero == got.zero,
                  "trial %d: d %g z %d, want %g z %d", trial, (double)got.d, got.zero,
                  (double)want.d, want.zero);
    }

    cr_assert_eq(llm_qgrid_of(LLM_TYPE_FP8_E4M3, &g), LLM_OK);
    struct llm_qgroup a, b;
    llm_qgrid_group(&g, x, 64, &a);
    llm_qgrid_group_mse(&g, LLM_QRULE_GPTQ, 2.4f, x, 64, &b);
    cr_assert(bits_of(a.d) == bits_of(b.d));
}
