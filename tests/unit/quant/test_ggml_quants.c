/* test_ggml_quants.c: the GGML block decoders.
 *
 * Each test chooses the logical contents of a block (quantized values,
 * sub-block scales and minimums, super-block scales), packs them into the
 * byte layout with a packer written here from formats.md §1.6 (element by
 * element: which byte and which bits hold element e), decodes the block
 * with the library, and compares with the formula evaluated on the logical
 * values in double precision. The library decodes with ggml's loop
 * structure, so the two sides share no code. A few hand-computed literals
 * pin the scale-packing bit positions. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "../../../lib/common/fp16.h"
#include "../../../lib/quant/ggml_quants.h"
#include "../../../lib/quant/quant.h"
#include "../helpers.h"

static uint64_t rng = 0x9E3779B97F4A7C15ull;

static uint32_t rnd(uint32_t n)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng % n);
}

static void put16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

/* A random half that is an exact small value (so the expected products are
 * computed exactly in double and rounding is the only float error). */
static uint16_t rnd_half(float *val)
{
    float v = (float)((int)rnd(2001) - 1000) / 1024.0f;
    uint16_t h = llm_fp32_to_fp16(v);
    *val = llm_fp16_to_fp32(h);
    return h;
}

static void check_close(const float *got, const double *want, int n, const char *what)
{
    for (int i = 0; i < n; i++) {
        double tol = 1e-6 * (fabs(want[i]) + 1.0);
        cr_assert(fabs((double)got[i] - want[i]) <= tol, "%s: element %d: got %.9g, want %.9g",
                  what, i, (double)got[i], want[i]);
    }
}

Test(ggml_quants, type_table_matches_ggml)
{
    /* formats.md §1.5 */
    static const struct { uint32_t id; uint32_t blck, bytes; } want[] = {
        { 0, 1, 4 },     { 1, 1, 2 },     { 2, 32, 18 },   { 3, 32, 20 },   { 6, 32, 22 },
        { 7, 32, 24 },   { 8, 32, 34 },   { 9, 32, 36 },   { 10, 256, 84 }, { 11, 256, 110 },
        { 12, 256, 144 }, { 13, 256, 176 }, { 14, 256, 210 }, { 15, 256, 292 },
        { 16, 256, 66 }, { 20, 32, 18 },  { 23, 256, 136 }, { 26, 1, 4 },   { 28, 1, 8 },
        { 29, 256, 56 }, { 30, 1, 2 },    { 34, 256, 54 },  { 35, 256, 66 },
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const struct llm_ggml_type_info *ti = llm_ggml_type_info(want[i].id);
        cr_assert_not_null(ti, "type %u", want[i].id);
        cr_assert_eq(ti->blck, want[i].blck, "type %u", want[i].id);
        cr_assert_eq(ti->block_bytes, want[i].bytes, "type %u", want[i].id);
    }
    /* removed ids and ids past the end */
    static const uint32_t gone[] = { 4, 5, 31, 32, 33, 36, 37, 38, 40, 1000 };
    for (size_t i = 0; i < sizeof gone / sizeof gone[0]; i++)
        cr_assert_null(llm_ggml_type_info(gone[i]), "type %u", gone[i]);
    cr_assert_str_eq(llm_ggml_type_info(12)->name, "Q4_K");
    cr_assert(llm_ggml_type_info(12)->can_decode);
    cr_assert(!llm_ggml_type_info(16)->can_decode);
    cr_assert_eq(llm_ggml_row_bytes(12, 512), 288);
    cr_assert_eq(llm_ggml_row_bytes(12, 100), 0); /* not whole blocks */
    cr_assert_eq(llm_ggml_row_bytes(4, 32), 0);
}

/* ---- K-quants -------------------------------------------------------- */

Test(ggml_quants, q4_k_matches_formula)
{
    for (int trial = 0; trial < 50; trial++) {
        uint8_t b[144] = { 0 };
        int q[256], sc[8], mn[8];
        float d, dmin;
        put16(b, rnd_half(&d));
        put16(b + 2, rnd_half(&dmin));
        for (int j = 0; j < 8; j++) {
            sc[j] = (int)rnd(64);
            mn[j] = (int)rnd(64);
        }
        uint8_t *s = b + 4, *qs = b + 16;
        for (int j = 0; j < 4; j++) {
            s[j] = (uint8_t)(sc[j] | (sc[j + 4] >> 4) << 6);
            s[j + 4] = (uint8_t)(mn[j] | (mn[j + 4] >> 4) << 6);
            s[j + 8] = (uint8_t)((sc[j + 4] & 0xF) | (mn[j + 4] & 0xF) << 4);
        }
        for (int e = 0; e < 256; e++) {
            q[e] = (int)rnd(16);
            int w = e % 64, byte = 32 * (e / 64) + w % 32;
            qs[byte] |= (uint8_t)(w < 32 ? q[e] : q[e] << 4);
        }
        double want[256];
        for (int e = 0; e < 256; e++)
            want[e] = (double)d * sc[e / 32] * q[e] - (double)dmin * mn[e / 32];
        float got[256];
        llm_ggml_dequant_q4_k(b, got);
        check_close(got, want, 256, "Q4_K");
    }
}

Test(ggml_quants, q4_k_literal)
{
    /* d = 1, dmin = 0.5; sub-block 0: scale 1, min 2 -> y = q - 1;
       sub-block 5: scale 0x23 (low nibble in scales[9], top bits in
       scales[1]), min 0x31 (high nibble of scales[9], top bits in
       scales[5]) -> y = 35*q - 24.5 */
    uint8_t b[144] = { 0 };
    put16(b, 0x3C00);
    put16(b + 2, 0x3800);
    uint8_t *s = b + 4, *qs = b + 16;
    s[0] = 1;
    s[4] = 2;
    s[9] = 0x13;         /* sc5 low 4 = 3, mn5 low 4 = 1 */
    s[1] |= 2 << 6;      /* sc5 high 2 = 2 -> 0x23 */
    s[5] |= 3 << 6;      /* mn5 high 2 = 3 -> 0x31 */
    qs[0] = 0x07;        /* element 0 = 7 */
    qs[64 + 5] = 0x90;   /* chunk 2, element 128+32+5 (sub-block 5) = 9 */
    float y[256];
    llm_ggml_dequant_q4_k(b, y);
    cr_assert_float_eq(y[0], 6.0f, 0);
    cr_assert_float_eq(y[1], -1.0f, 0);
    cr_assert_float_eq(y[165], 35.0f * 9 - 24.5f, 0);
    cr_assert_float_eq(y[160], -24.5f, 0);
}

Test(ggml_quants, q5_k_matches_formula)
{
    for (int trial = 0; trial < 50; trial++) {
        uint8_t b[176] = { 0 };
        int q[256], sc[8], mn[8];
        float d, dmin;
        put16(b, rnd_half(&d));
        put16(b + 2, rnd_half(&dmin));
        for (int j = 0; j < 8; j++) {
            sc[j] = (int)rnd(64);
            mn[j] = (int)rnd(64);
        }
        uint8_t *s = b + 4, *qh = b + 16, *qs = b + 48;
        for (int j = 0; j < 4; j++) {
            s[j] = (uint8_t)(sc[j] | (sc[j + 4] >> 4) << 6);
            s[j + 4] = (uint8_t)(mn[j] | (mn[j + 4] >> 4) << 6);
            s[j + 8] = (uint8_t)((sc[j + 4] & 0xF) | (mn[j + 4] & 0xF) << 4);
        }
        for (int e = 0; e < 256; e++) {
            q[e] = (int)rnd(32);
            int c = e / 64, w = e % 64, l = w % 32;
            qs[32 * c + l] |= (uint8_t)(w < 32 ? (q[e] & 0xF) : (q[e] & 0xF) << 4);
            if (q[e] & 16)
                qh[l] |= (uint8_t)(1u << (2 * c + (w >= 32)));
        }
        double want[256];
        for (int e = 0; e < 256; e++)
            want[e] = (double)d * sc[e / 32] * q[e] - (double)dmin * mn[e / 32];
        float got[256];
        llm_ggml_dequant_q5_k(b, got);
        check_close(got, want, 256, "Q5_K");
    }
}

Test(ggml_quants, q6_k_matches_formula)
{
    for (int trial = 0; trial < 50; trial++) {
        uint8_t b[210] = { 0 };
        int q[256], sc[16];
        float d;
        uint8_t *ql = b, *qh = b + 128;
        int8_t *scales = (int8_t *)(b + 192);
        put16(b + 208, rnd_half(&d)); /* d is last */
        for (int i = 0; i < 16; i++) {
            sc[i] = (int)rnd(256) - 128;
            scales[i] = (int8_t)sc[i];
        }
        int sc_of[256];
        for (int e = 0; e < 256; e++) {
            q[e] = (int)rnd(64) - 32;
            int u = q[e] + 32, n = e / 128, r = e % 128, k = r / 32, l = r % 32;
            int lbyte = 64 * n + l + (k & 1) * 32;
            ql[lbyte] |= (uint8_t)(k < 2 ? (u & 0xF) : (u & 0xF) << 4);
            qh[32 * n + l] |= (uint8_t)((u >> 4) << (2 * k));
            sc_of[e] = sc[8 * n + l / 16 + 2 * k];
        }
        double want[256];
        for (int e = 0; e < 256; e++)
            want[e] = (double)d * sc_of[e] * q[e];
        float got[256];
        llm_ggml_dequant_q6_k(b, got);
        check_close(got, want, 256, "Q6_K");
    }
}

Test(ggml_quants, q6_k_literal)
{
    /* element 200 = half 1, r = 72: quarter 2 (high nibble of ql[64+8]),
       bits 4-5 of qh[32+8], scale index 8 + 0 + 4 = 12 */
    uint8_t b[210] = { 0 };
    memset(b, 0, sizeof b);
    /* every other element decodes to q = 0 - 32: make them zero instead by
       setting u = 32 everywhere (high bits 2 in every field) */
    memset(b + 128, 0xAA, 64); /* each 2-bit field = 2 -> u = 32 + low */
    b[64 + 8] = 0x50;          /* high nibble 5 -> u = 37 -> q = 5 */
    ((int8_t *)(b + 192))[12] = -3;
    put16(b + 208, 0x4000);    /* d = 2 */
    float y[256];
    llm_ggml_dequant_q6_k(b, y);
    cr_assert_float_eq(y[200], 2.0f * -3 * 5, 0);
    cr_assert_float_eq(y[0], 0.0f, 0);
    cr_assert_float_eq(y[72], 0.0f, 0);
}

Test(ggml_quants, q2_k_matches_formula)
{
    for (int trial = 0; trial < 50; trial++) {
        uint8_t b[84] = { 0 };
        int q[256], sc[16], mn[16];
        float d, dmin;
        uint8_t *scales = b, *qs = b + 16;
        put16(b + 80, rnd_half(&d));
        put16(b + 82, rnd_half(&dmin));
        for (int i = 0; i < 16; i++) {
            sc[i] = (int)rnd(16);
            mn[i] = (int)rnd(16);
            scales[i] = (uint8_t)(sc[i] | mn[i] << 4);
        }
        int idx[256];
        for (int e = 0; e < 256; e++) {
            q[e] = (int)rnd(4);
            int n = e / 128, r = e % 128, step = r / 32, w = r % 32;
            qs[32 * n + w] |= (uint8_t)(q[e] << (2 * step));
            idx[e] = 8 * n + 2 * step + w / 16;
        }
        double want[256];
        for (int e = 0; e < 256; e++)
            want[e] = (double)d * sc[idx[e]] * q[e] - (double)dmin * mn[idx[e]];
        float got[256];
        llm_ggml_dequant_q2_k(b, got);
        check_close(got, want, 256, "Q2_K");
    }
}

Test(ggml_quants, q3_k_matches_formula)
{
    for (int trial = 0; trial < 50; trial++) {
        uint8_t b[110] = { 0 };
        int q[256], sc[16];
        float d;
        uint8_t *hmask = b, *qs = b + 32, *scales = b + 96;
        put16(b + 108, rnd_half(&d));
        for (int i = 0; i < 16; i++) {
            sc[i] = (int)rnd(64) - 32;
            int u = sc[i] + 32;
            if (i < 8)
                scales[i] |= (uint8_t)(u & 0xF);
            else
                scales[i - 8] |= (uint8_t)((u & 0xF) << 4);
            scales[8 + i % 4] |= (uint8_t)((u >> 4) << (2 * (i / 4)));
        }
        int idx[256];
        for (int e = 0; e < 256; e++) {
            q[e] = (int)rnd(8) - 4; /* -4..3: low 2 bits, minus 4 when the hmask bit is 0 */
            int n = e / 128, r = e % 128, step = r / 32, w = r % 32;
            int low = q[e] >= 0 ? q[e] : q[e] + 4;
            qs[32 * n + w] |= (uint8_t)(low << (2 * step));
            if (q[e] >= 0)
                hmask[w] |= (uint8_t)(1u << (4 * n + step));
            idx[e] = 8 * n + 2 * step + w / 16;
        }
        double want[256];
        for (int e = 0; e < 256; e++)
            want[e] = (double)d * sc[idx[e]] * q[e];
        float got[256];
        llm_ggml_dequant_q3_k(b, got);
        check_close(got, want, 256, "Q3_K");
    }
}

Test(ggml_quants, q3_k_scale_bits_literal)
{
    /* scales[0] = 0x21: low nibble 1 -> scale 0, high nibble 2 -> scale 8;
       scales[8] = 0xE4: 2-bit fields 0,1,2,3 -> high bits of scales 0, 4,
       8, 12. So scale 0 = (1 | 0<<4) - 32 = -31, scale 8 = (2 | 2<<4) - 32
       = 2, scale 4 = (0 | 1<<4) - 32 = -16, scale 12 = (0 | 3<<4) - 32 = 16. */
    uint8_t b[110] = { 0 };
    b[96 + 0] = 0x21;
    b[96 + 8] = 0xE4;
    memset(b, 0xFF, 32); /* every hmask bit set: q = low 2 bits */
    b[32 + 0] = 0x03 | 0x01 << 4;  /* element 0 (step 0) = 3, element 64 (step 2) = 1 */
    b[32 + 32 + 0] = 0x02 | 0x01 << 4; /* element 128 = 2 (scale 8), 192 = 1 (scale 12) */
    b[32 + 0] |= 0x02 << 2;         /* element 32 (step 1, scale 2 = -32) = 2 */
    put16(b + 108, 0x3C00);          /* d = 1 */
    float y[256];
    llm_ggml_dequant_q3_k(b, y);
    cr_assert_float_eq(y[0], -31.0f * 3, 0);
    cr_assert_float_eq(y[64], -16.0f * 1, 0);
    cr_assert_float_eq(y[128], 2.0f * 2, 0);
    cr_assert_float_eq(y[192], 16.0f * 1, 0);
    cr_assert_float_eq(y[32], -32.0f * 2, 0);
    /* an hmask bit of 0 subtracts 4 */
    b[0] = 0xFE;
    llm_ggml_dequant_q3_k(b, y);
    cr_assert_float_eq(y[0], -31.0f * (3 - 4), 0);
}

Test(ggml_quants, q8_k_matches_formula)
{
    uint8_t b[292];
    float d = 0.0625f;
    memcpy(b, &d, 4);
    for (int i = 0; i < 256; i++)
        b[4 + i] = (uint8_t)(int8_t)(i - 128);
    float y[256];
    llm_ggml_dequant_q8_k(b, y);
    for (int i = 0; i < 256; i++)
        cr_assert_float_eq(y[i], 0.0625f * (float)(i - 128), 0, "element %d", i);
}

/* ---- 32-element blocks ----------------------------------------------- */

/* Pack 32 five-bit values into qs/qh (bit 4 of element j is bit j of qh). */
static void pack5(uint8_t *qh, uint8_t *qs, const int *q)
{
    uint32_t h = 0;
    memset(qs, 0, 16);
    for (int j = 0; j < 32; j++) {
        qs[j % 16] |= (uint8_t)(j < 16 ? (q[j] & 0xF) : (q[j] & 0xF) << 4);
        if (q[j] & 16)
            h |= 1u << j;
    }
    for (int i = 0; i < 4; i++)
        qh[i] = (uint8_t)(h >> (8 * i));
}

Test(ggml_quants, q5_0_and_q5_1_match_formula)
{
    for (int trial = 0; trial < 100; trial++) {
        int q[32];
        for (int j = 0; j < 32; j++)
            q[j] = (int)rnd(32);
        float d, m;
        uint8_t b0[22], b1[24];
        put16(b0, rnd_half(&d));
        pack5(b0 + 2, b0 + 6, q);
        put16(b1, llm_fp32_to_fp16(d));
        put16(b1 + 2, rnd_half(&m));
        pack5(b1 + 4, b1 + 8, q);
        double w0[32], w1[32];
        for (int j = 0; j < 32; j++) {
            w0[j] = (double)(q[j] - 16) * d;
            w1[j] = (double)q[j] * d + m;
        }
        float y[32];
        llm_ggml_dequant_q5_0(b0, y);
        check_close(y, w0, 32, "Q5_0");
        llm_ggml_dequant_q5_1(b1, y);
        check_close(y, w1, 32, "Q5_1");
    }
}

Test(ggml_quants, q5_0_literal)
{
    /* element 17: low nibble in the high half of qs[1], bit 4 in qh bit 17 */
    uint8_t b[22] = { 0 };
    put16(b, 0x3C00);
    memset(b + 6, 0, 16);
    b[2 + 2] = 0x02; /* qh bit 17 */
    b[6 + 1] = 0x30; /* element 17 low nibble = 3 */
    float y[32];
    llm_ggml_dequant_q5_0(b, y);
    cr_assert_float_eq(y[17], (float)((16 | 3) - 16), 0);
    cr_assert_float_eq(y[1], -16.0f, 0);
}

/* The kept 32-element types decode like our own (independent) row code. */
Test(ggml_quants, legacy_types_agree_with_quant_reference)
{
    static const struct { uint32_t g; enum llm_type t; size_t bytes; } pairs[] = {
        { 2, LLM_TYPE_Q4_0, 18 }, { 3, LLM_TYPE_Q4_1, 20 }, { 8, LLM_TYPE_Q8_0, 34 },
    };
    for (size_t k = 0; k < 3; k++) {
        uint8_t row[4 * 34];
        for (size_t i = 0; i < sizeof row; i++)
            row[i] = (uint8_t)rnd(256);
        for (int blk = 0; blk < 4; blk++) { /* finite scales */
            float v;
            put16(row + blk * pairs[k].bytes, rnd_half(&v));
            if (pairs[k].g == 3)
                put16(row + blk * pairs[k].bytes + 2, rnd_half(&v));
        }
        float a[128], b[128];
        cr_assert_eq(llm_ggml_dequantize_row(pairs[k].g, row, a, 128), LLM_OK);
        cr_assert_eq(llm_dequantize_row(pairs[k].t, row, b, 128), LLM_OK);
        for (int i = 0; i < 128; i++)
            cr_assert_float_eq(a[i], b[i], 0, "type %u element %d", pairs[k].g, i);
    }
}

Test(ggml_quants, row_decoder_checks_arguments)
{
    uint8_t buf[512] = { 0 };
    float y[512];
    cr_assert_eq(llm_ggml_dequantize_row(16, buf, y, 256), LLM_E_UNSUPPORTED); /* IQ2_XXS */
    cr_assert(strstr(llm_error_detail(LLM_E_UNSUPPORTED), "IQ2_XXS"));
    cr_assert_eq(llm_ggml_dequantize_row(99, buf, y, 256), LLM_E_UNSUPPORTED);
    cr_assert_eq(llm_ggml_dequantize_row(12, buf, y, 100), LLM_E_INVALID);
    cr_assert_eq(llm_ggml_dequantize_row(12, buf, y, 0), LLM_E_INVALID);
    /* two Q4_K blocks in a row: the second decodes from bytes 144.. */
    put16(buf + 144, 0x3C00);
    buf[144 + 4] = 1;            /* sub-block 0 scale 1 */
    buf[144 + 16] = 0x0B;        /* element 256 = 11 */
    cr_assert_eq(llm_ggml_dequantize_row(12, buf, y, 512), LLM_OK);
    cr_assert_float_eq(y[256], 11.0f, 0);
    cr_assert_float_eq(y[0], 0.0f, 0);
    /* F16, BF16 and F64 rows */
    uint8_t h[6] = { 0x00, 0x3C, 0x00, 0xC0, 0x00, 0x7C }; /* 1, -2, inf */
    cr_assert_eq(llm_ggml_dequantize_row(1, h, y, 3), LLM_OK);
    cr_assert_float_eq(y[0], 1.0f, 0);
    cr_assert_float_eq(y[1], -2.0f, 0);
    cr_assert(isinf(y[2]));
    uint8_t bf[2] = { 0x80, 0x3F }; /* 1.0 */
    cr_assert_eq(llm_ggml_dequantize_row(30, bf, y, 1), LLM_OK);
    cr_assert_float_eq(y[0], 1.0f, 0);
    double dv = -0.375;
    cr_assert_eq(llm_ggml_dequantize_row(28, &dv, y, 1), LLM_OK);
    cr_assert_float_eq(y[0], -0.375f, 0);
}
