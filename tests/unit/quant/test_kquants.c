/* test_kquants.c: the GGUF block types as llm_types (Q5_0, Q5_1, Q2_K ..
 * Q8_K, IQ4_NL, IQ4_XS): the type table, the canonical form against ggml's
 * decoders (test_ggml_quants.c checks those against formats.md), and the
 * round-to-nearest quantizers (error bounds, importance, bad input). */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "../../../lib/common/fp16.h"
#include "../../../lib/quant/ggml_quants.h"
#include "../../../lib/quant/kquants.h"
#include "../../../lib/quant/quant.h"
#include "../helpers.h"

static const enum llm_type kq_types[] = {
    LLM_TYPE_Q5_0, LLM_TYPE_Q5_1, LLM_TYPE_Q2_K,   LLM_TYPE_Q3_K,   LLM_TYPE_Q4_K,
    LLM_TYPE_Q5_K, LLM_TYPE_Q6_K, LLM_TYPE_Q8_K,   LLM_TYPE_IQ4_NL, LLM_TYPE_IQ4_XS,
};
#define N_KQ (sizeof kq_types / sizeof kq_types[0])

static uint64_t rng = 0x243F6A8885A308D3ull;

static uint32_t rnd32(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 11);
}

static float gauss(void)
{
    float u = ((float)(rnd32() >> 8) + 0.5f) / 16777216.0f;
    float v = ((float)(rnd32() >> 8) + 0.5f) / 16777216.0f;
    return sqrtf(-2.0f * logf(u)) * cosf(6.2831853f * v);
}

Test(kquants, type_table)
{
    static const struct { enum llm_type t; const char *name; uint32_t blck, bytes; int ggml; } want[] = {
        { LLM_TYPE_Q5_0, "q5_0", 32, 22, 6 },      { LLM_TYPE_Q5_1, "q5_1", 32, 24, 7 },
        { LLM_TYPE_Q2_K, "q2_k", 256, 84, 10 },    { LLM_TYPE_Q3_K, "q3_k", 256, 110, 11 },
        { LLM_TYPE_Q4_K, "q4_k", 256, 144, 12 },   { LLM_TYPE_Q5_K, "q5_k", 256, 176, 13 },
        { LLM_TYPE_Q6_K, "q6_k", 256, 210, 14 },   { LLM_TYPE_Q8_K, "q8_k", 256, 292, 15 },
        { LLM_TYPE_IQ4_NL, "iq4_nl", 32, 18, 20 }, { LLM_TYPE_IQ4_XS, "iq4_xs", 256, 136, 23 },
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const struct llm_type_traits *tr = llm_type_traits(want[i].t);
        cr_assert_not_null(tr);
        cr_assert_str_eq(tr->name, want[i].name);
        cr_assert_eq(tr->blck, want[i].blck, "%s", tr->name);
        cr_assert_eq(tr->block_bytes, want[i].bytes, "%s", tr->name);
        cr_assert_eq(tr->row_header, 0);
        cr_assert_eq(tr->ggml_type, want[i].ggml, "%s", tr->name);
        /* the same bytes as GGML's type of that id */
        const struct llm_ggml_type_info *gi = llm_ggml_type_info((uint32_t)want[i].ggml);
        cr_assert_eq(gi->blck, tr->blck);
        cr_assert_eq(gi->block_bytes, tr->block_bytes);
        cr_assert(gi->can_decode, "%s", gi->name);
        cr_assert_eq(llm_type_from_ggml((uint32_t)want[i].ggml), (int)want[i].t);
        cr_assert(llm_type_whole_blocks(want[i].t));
        enum llm_type p;
        cr_assert_eq(llm_type_parse(want[i].name, &p), LLM_OK);
        cr_assert_eq(p, want[i].t);
        /* rows are whole blocks: no padding, as llama.cpp reads them */
        cr_assert_eq(llm_type_row_bytes(want[i].t, 2 * (uint64_t)tr->blck), 2 * (uint64_t)tr->block_bytes);
        cr_assert_eq(llm_type_row_bytes(want[i].t, tr->blck + 16), 0);
        int64_t ne[2] = { (int64_t)tr->blck + 16, 3 };
        uint64_t nbytes;
        cr_assert_eq(llm_type_tensor_bytes(want[i].t, 2, ne, &nbytes), LLM_E_FORMAT);
        cr_assert(strstr(llm_error_detail(LLM_E_INVALID), "whole"), "%s", llm_error_detail(LLM_E_INVALID));
    }
    cr_assert(!llm_type_whole_blocks(LLM_TYPE_Q4_0));
    cr_assert(strstr(llm_type_names(), "iq4_xs"));
}

/* A random block of t: random bytes, with finite binary16 (float32 for
 * Q8_K) scales of moderate size where the layout keeps them. */
static void random_block(enum llm_type t, uint8_t *b)
{
    const struct llm_type_traits *tr = llm_type_traits(t);
    for (uint32_t i = 0; i < tr->block_bytes; i++)
        b[i] = (uint8_t)rnd32();
    int off[2] = { 0, -1 };
    switch (t) {
    case LLM_TYPE_Q5_1: case LLM_TYPE_Q4_K: case LLM_TYPE_Q5_K: off[1] = 2; break;
    case LLM_TYPE_Q2_K: off[0] = 80, off[1] = 82; break;
    case LLM_TYPE_Q3_K: off[0] = 108; break;
    case LLM_TYPE_Q6_K: off[0] = 208; break;
    default: break;
    }
    if (t == LLM_TYPE_Q8_K) {
        float d = gauss() * 0.01f;
        memcpy(b, &d, 4);
        return;
    }
    for (int k = 0; k < 2; k++)
        if (off[k] >= 0) {
            uint16_t h = llm_fp32_to_fp16(gauss() * 0.01f);
            b[off[k]] = (uint8_t)h;
            b[off[k] + 1] = (uint8_t)(h >> 8);
        }
}

Test(kquants, canonical_form_is_ggml_decoding_bit_for_bit)
{
    for (size_t ti = 0; ti < N_KQ; ti++) {
        const enum llm_type t = kq_types[ti];
        const struct llm_type_traits *tr = llm_type_traits(t);
        for (int trial = 0; trial < 200; trial++) {
            uint8_t b[292];
            random_block(t, b);
            int16_t c[256];
            float s[16], m[16], y[256];
            llm_kq_unpack(t, b, c, s, m);
            cr_assert_eq(llm_ggml_dequantize_row((uint32_t)tr->ggml_type, b, y, tr->blck), LLM_OK);
            for (uint32_t i = 0; i < tr->blck; i++) {
                volatile float p = s[i / 16] * (float)c[i]; /* no fma: ggml rounds twice */
                const float w = p + m[i / 16];
                cr_assert(memcmp(&w, &y[i], 4) == 0 || (w == 0 && y[i] == 0),
                          "%s element %u: canonical %.9g, ggml %.9g", tr->name, i, w, y[i]);
                cr_assert(c[i] >= -128 && c[i] <= 127); /* -128: Q8_K's random bytes */
            }
            if (llm_kq_scale_group(t) == 32)
                for (uint32_t k = 0; k < tr->blck / 32; k++)
                    cr_assert(s[2 * k] == s[2 * k + 1] && m[2 * k] == m[2 * k + 1]);
            if (!llm_kq_has_min(t))
                for (uint32_t k = 0; k < tr->blck / 16; k++)
                    cr_assert(m[k] == 0.0f);
            /* llm_dequantize_row is ggml's decoder */
            float z[256];
            cr_assert_eq(llm_dequantize_row(t, b, z, tr->blck), LLM_OK);
            cr_assert(memcmp(z, y, tr->blck * sizeof(float)) == 0);
        }
    }
}

/* relative rms error of round to nearest on Gaussian rows, by type (a
 * uniform 4-bit grid over +-2.5 sigma gives about 0.1) */
static double rel_rms(enum llm_type t, const float *x, int64_t n, const float *imp)
{
    const uint64_t rb = llm_type_row_bytes(t, (uint64_t)n);
    uint8_t *q = malloc(rb);
    float *y = malloc(sizeof(float) * (size_t)n);
    if (imp)
        cr_assert_eq(llm_kq_quantize_row(t, x, q, n, imp), LLM_OK);
    else
        cr_assert_eq(llm_quantize_row(t, x, q, n), LLM_OK);
    cr_assert_eq(llm_dequantize_row(t, q, y, n), LLM_OK);
    double e = 0, s = 0;
    for (int64_t i = 0; i < n; i++) {
        const double w = imp ? imp[i] : 1.0;
        e += w * (double)(y[i] - x[i]) * (y[i] - x[i]);
        s += w * (double)x[i] * x[i];
    }
    free(q);
    free(y);
    return sqrt(e / s);
}

Test(kquants, quantizers_error_bounds)
{
    /* bounds about 1.3x what they give; llama.cpp's published rmse for
     * the same types on Gaussian data is of these sizes */
    static const struct { enum llm_type t; double max; } want[] = {
        { LLM_TYPE_Q2_K, 0.36 },  { LLM_TYPE_Q3_K, 0.20 }, { LLM_TYPE_Q4_K, 0.11 },
        { LLM_TYPE_Q5_K, 0.055 }, { LLM_TYPE_Q6_K, 0.028 }, { LLM_TYPE_Q8_K, 0.01 },
        { LLM_TYPE_Q5_0, 0.065 }, { LLM_TYPE_Q5_1, 0.06 },  { LLM_TYPE_IQ4_NL, 0.11 },
        { LLM_TYPE_IQ4_XS, 0.11 },
    };
    const int64_t n = 4096;
    float *x = malloc(sizeof(float) * n);
    for (int64_t i = 0; i < n; i++)
        x[i] = gauss() * 0.02f * (1.0f + (float)(i / 256 % 4));
    double prev_bits = 0, prev_err = 1;
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const double e = rel_rms(want[i].t, x, n, NULL);
        cr_assert(e > 0 && e < want[i].max, "%s: relative rms error %.4f (bound %.3f)",
                  llm_type_name(want[i].t), e, want[i].max);
        /* the K series: more bits, less error */
        if (i < 6) {
            const double bits = llm_type_bpw(want[i].t, (uint64_t)n);
            cr_assert(bits > prev_bits && e < prev_err, "%s", llm_type_name(want[i].t));
            prev_bits = bits, prev_err = e;
        }
    }
    free(x);
}

Test(kquants, importance_lowers_the_weighted_error)
{
    /* a few columns matter 100x more: with the importance every type
     * represents them better than without */
    const int64_t n = 2048;
    float *x = malloc(sizeof(float) * n), *imp = malloc(sizeof(float) * n);
    for (int64_t i = 0; i < n; i++) {
        x[i] = gauss() * 0.02f;
        imp[i] = i % 13 == 0 ? 100.0f : 1.0f;
    }
    for (size_t ti = 0; ti < N_KQ; ti++) {
        const enum llm_type t = kq_types[ti];
        if (t == LLM_TYPE_Q8_K || t == LLM_TYPE_Q5_0 || t == LLM_TYPE_Q5_1)
            continue; /* plain absmax/min-max rules: no search to weight */
        const uint64_t rb = llm_type_row_bytes(t, (uint64_t)n);
        uint8_t *q = malloc(rb);
        float *y = malloc(sizeof(float) * n);
        double e_plain = 0, e_imp = 0;
        cr_assert_eq(llm_kq_quantize_row(t, x, q, n, NULL), LLM_OK);
        llm_dequantize_row(t, q, y, n);
        for (int64_t i = 0; i < n; i++)
            e_plain += imp[i] * (double)(y[i] - x[i]) * (y[i] - x[i]);
        e_imp = rel_rms(t, x, n, imp);
        double s = 0;
        for (int64_t i = 0; i < n; i++)
            s += imp[i] * (double)x[i] * x[i];
        e_plain = sqrt(e_plain / s);
        cr_assert(e_imp < 0.9 * e_plain, "%s: weighted error %.4f with importance, %.4f without",
                  llm_type_name(t), e_imp, e_plain);
        free(q);
        free(y);
    }
    free(x);
    free(imp);
}

Test(kquants, quantizers_take_edge_rows)
{
    for (size_t ti = 0; ti < N_KQ; ti++) {
        const enum llm_type t = kq_types[ti];
        const int64_t n = 512;
        const uint64_t rb = llm_type_row_bytes(t, (uint64_t)n);
        uint8_t *q = malloc(rb);
        float x[512], y[512];
        /* zeros, a constant, one spike, NaN and infinities */
        for (int pat = 0; pat < 5; pat++) {
            for (int i = 0; i < n; i++)
                x[i] = pat == 0 ? 0.0f : pat == 1 ? 0.25f : pat == 2 ? (i == 77 ? 3.0f : 0.0f)
                     : pat == 3 ? (i == 5 ? NAN : gauss()) : (i == 9 ? INFINITY : i == 10 ? -INFINITY : gauss());
            cr_assert_eq(llm_quantize_row(t, x, q, n), LLM_OK, "%s", llm_type_name(t));
            cr_assert_eq(llm_dequantize_row(t, q, y, n), LLM_OK);
            uint64_t bad;
            cr_assert_eq(llm_rows_nonfinite(t, q, n, 1, &bad, NULL), LLM_OK);
            cr_assert_eq(bad, 0, "%s pattern %d: %llu non-finite", llm_type_name(t), pat,
                         (unsigned long long)bad);
            for (int i = 0; i < n; i++)
                cr_assert(isfinite(y[i]), "%s pattern %d element %d", llm_type_name(t), pat, i);
            if (pat == 0)
                for (int i = 0; i < n; i++)
                    cr_assert(y[i] == 0.0f, "%s zeros", llm_type_name(t));
            if (pat == 2) /* the spike survives within a sixth */
                cr_assert(fabsf(y[77] - 3.0f) < 0.5f, "%s spike %g", llm_type_name(t), y[77]);
        }
        /* rows that are not whole blocks are refused, clearly */
        cr_assert_eq(llm_quantize_row(t, x, q, 100), LLM_E_INVALID);
        cr_assert(strstr(llm_error_detail(LLM_E_INVALID), "whole"), "%s", llm_error_detail(LLM_E_INVALID));
        cr_assert_eq(llm_dequantize_row(t, q, y, 100), LLM_E_INVALID);
        free(q);
    }
}

Test(kquants, nonfinite_scales_are_counted)
{
    for (size_t ti = 0; ti < N_KQ; ti++) {
        const enum llm_type t = kq_types[ti];
        const struct llm_type_traits *tr = llm_type_traits(t);
        uint8_t rows[3 * 292];
        for (int b = 0; b < 3; b++)
            random_block(t, rows + b * tr->block_bytes);
        uint64_t bad;
        int64_t first;
        cr_assert_eq(llm_rows_nonfinite(t, rows, tr->blck, 3, &bad, &first), LLM_OK);
        cr_assert_eq(bad, 0, "%s", tr->name);
        /* the second block's scale becomes a NaN */
        uint8_t *b1 = rows + tr->block_bytes;
        const int off = t == LLM_TYPE_Q2_K ? 80 : t == LLM_TYPE_Q3_K ? 108 : t == LLM_TYPE_Q6_K ? 208 : 0;
        if (t == LLM_TYPE_Q8_K) {
            float nan = NAN;
            memcpy(b1, &nan, 4);
        } else {
            b1[off] = 0xff;
            b1[off + 1] = 0x7f;
        }
        cr_assert_eq(llm_rows_nonfinite(t, rows, tr->blck, 3, &bad, &first), LLM_OK);
        float y[256];
        llm_dequantize_row(t, b1, y, tr->blck);
        uint64_t want = 0;
        for (uint32_t i = 0; i < tr->blck; i++)
            want += !isfinite(y[i]);
        cr_assert(want > 0);
        cr_assert_eq(bad, want, "%s: %llu, want %llu", tr->name, (unsigned long long)bad,
                     (unsigned long long)want);
        cr_assert_eq(first, (int64_t)tr->blck, "%s first %lld", tr->name, (long long)first);
    }
}

Test(kquants, codes_one_at_a_time)
{
    /* rewriting every code of a block with its own value changes no byte;
     * the nearest code to a grid value is that code; and a block written
     * code by code from zeros (its scales kept) equals the original */
    for (size_t ti = 0; ti < N_KQ; ti++) {
        const enum llm_type t = kq_types[ti];
        const struct llm_type_traits *tr = llm_type_traits(t);
        for (int trial = 0; trial < 50; trial++) {
            float x[256];
            uint8_t b[292], b2[292];
            for (uint32_t i = 0; i < tr->blck; i++)
                x[i] = gauss() * 0.1f + (trial % 2 ? 0.05f : 0.0f);
            cr_assert_eq(llm_quantize_row(t, x, b, tr->blck), LLM_OK);
            int16_t c[256];
            float s[16], m[16];
            llm_kq_unpack(t, b, c, s, m);
            memcpy(b2, b, tr->block_bytes);
            for (uint32_t e = 0; e < tr->blck; e++)
                llm_kq_set_code(t, b2, (int)e, c[e]);
            llm_kq_finish_block(t, b2);
            cr_assert(memcmp(b, b2, tr->block_bytes) == 0, "%s: rewriting codes changed bytes",
                      tr->name);
            for (uint32_t e = 0; e < tr->blck; e++) {
                if (s[e / 16] == 0.0f)
                    continue;
                const float v = s[e / 16] * (float)c[e] + m[e / 16];
                cr_assert_eq(llm_kq_nearest(t, s[e / 16], m[e / 16], v), c[e], "%s element %u",
                             tr->name, e);
            }
            /* the other codes of the grid: setting code k reads back k */
            for (uint32_t e = 0; e < tr->blck; e += 37) {
                const int want = llm_kq_nearest(t, s[e / 16], m[e / 16], x[e] * 3.0f);
                llm_kq_set_code(t, b2, (int)e, want);
                int16_t c2[256];
                float s2[16], m2[16];
                llm_kq_unpack(t, b2, c2, s2, m2);
                cr_assert_eq(c2[e], want, "%s element %u", tr->name, e);
                for (uint32_t i = 0; i < tr->blck; i++)
                    if (i != e)
                        cr_assert_eq(c2[i], c[i], "%s: setting %u changed %u", tr->name, e, i);
                llm_kq_set_code(t, b2, (int)e, c[e]);
            }
        }
    }
}
