/* test_finite.c: llm_rows_nonfinite against its reference, the count of
 * NaN and infinite values that llm_dequantize_row gives, on rows of every
 * weight type quantized from random data and then damaged: random bytes
 * (codes, scales, minimums, row headers), scales set to NaN or infinity,
 * and float32 row scales near FLT_MAX whose products overflow. */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../../lib/common/fp16.h"
#include "../../../lib/quant/quant.h"
#include "../helpers.h"

static const enum llm_type types[] = {
    LLM_TYPE_F32,      LLM_TYPE_F16,      LLM_TYPE_BF16,     LLM_TYPE_Q8_0,     LLM_TYPE_Q8_G64,
    LLM_TYPE_Q8_G128,  LLM_TYPE_Q8_CH,    LLM_TYPE_Q8Z_G32,  LLM_TYPE_Q8Z_G64,  LLM_TYPE_Q8Z_G128,
    LLM_TYPE_Q8Z_CH,   LLM_TYPE_Q4_0,     LLM_TYPE_Q4_G64,   LLM_TYPE_Q4_G128,  LLM_TYPE_Q4_CH,
    LLM_TYPE_Q4_1,     LLM_TYPE_Q4Z_G64,  LLM_TYPE_Q4Z_G128, LLM_TYPE_Q4Z_CH,   LLM_TYPE_NF4,
    LLM_TYPE_NF4_DQ,   LLM_TYPE_FP8_E4M3, LLM_TYPE_Q3Z_G32,  LLM_TYPE_Q3Z_G64,  LLM_TYPE_Q3Z_G128,
    LLM_TYPE_Q3Z_CH,
};

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint64_t next(void)
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return rng;
}

/* The reference: dequantize every row and count. */
static uint64_t reference(enum llm_type t, const uint8_t *rows, int64_t ne0, int64_t nrows,
                          int64_t *first)
{
    uint64_t rb = llm_type_row_bytes(t, (uint64_t)ne0), n = 0;
    float *x = malloc((size_t)ne0 * sizeof *x);
    *first = -1;
    for (int64_t r = 0; r < nrows; r++) {
        cr_assert_eq(llm_dequantize_row(t, rows + rb * (uint64_t)r, x, ne0), LLM_OK);
        for (int64_t i = 0; i < ne0; i++)
            if (!isfinite(x[i])) {
                if (*first < 0)
                    *first = r * ne0 + i;
                n++;
            }
    }
    free(x);
    return n;
}

static void agree(enum llm_type t, const uint8_t *rows, int64_t ne0, int64_t nrows, const char *what)
{
    int64_t f_ref, f_got;
    uint64_t want = reference(t, rows, ne0, nrows, &f_ref), got;
    cr_assert_eq(llm_rows_nonfinite(t, rows, ne0, nrows, &got, &f_got), LLM_OK);
    cr_assert_eq(got, want, "%s, %s: %llu non-finite values counted, the dequantized rows have %llu",
                 llm_type_name(t), what, (unsigned long long)got, (unsigned long long)want);
    cr_assert_eq(f_got, f_ref, "%s, %s: first at %lld, expected %lld", llm_type_name(t), what,
                 (long long)f_got, (long long)f_ref);
}

static void check_rows(int64_t ne0, int64_t nrows);

Test(finite, counts_match_the_dequantized_values)
{
    /* 200: a partial last block in every grouped type; 256: whole blocks,
     * which the rows' common pass reads back to back; 37: floats that do
     * not fill the last 64-bit word */
    const int64_t sizes[] = { 37, 200, 256 };
    for (int k = 0; k < 3; k++)
        check_rows(sizes[k], 3);
}

static void check_rows(int64_t ne0, int64_t nrows)
{
    float *x = malloc(sizeof(float) * (size_t)(ne0 * nrows));
    for (size_t k = 0; k < sizeof types / sizeof types[0]; k++) {
        enum llm_type t = types[k];
        uint64_t rb = llm_type_row_bytes(t, (uint64_t)ne0);
        uint8_t *q = malloc(rb * nrows), *d = malloc(rb * nrows);
        for (int64_t i = 0; i < ne0 * nrows; i++)
            x[i] = (float)((double)(next() % 20001) / 10000.0 - 1.0);
        for (int64_t r = 0; r < nrows; r++)
            cr_assert_eq(llm_quantize_row(t, x + r * ne0, q + rb * (uint64_t)r, ne0), LLM_OK);
        agree(t, q, ne0, nrows, "clean");
        /* random bytes anywhere */
        for (int trial = 0; trial < 300; trial++) {
            memcpy(d, q, rb * nrows);
            for (int j = 0, nj = 1 + (int)(next() % 4); j < nj; j++)
                d[next() % (rb * nrows)] = (uint8_t)next();
            agree(t, d, ne0, nrows, "random bytes");
        }
        /* every byte of row 1 set to 0xff in turn: NaN in any float field */
        for (uint64_t b = 0; b < rb; b++) {
            memcpy(d, q, rb * nrows);
            d[rb + b] = 0xff;
            if (b + 1 < rb)
                d[rb + b + 1] = 0x7f;
            agree(t, d, ne0, nrows, "0xff 0x7f");
        }
        /* a float32 row header near FLT_MAX: products that overflow */
        const struct llm_type_traits *tr = llm_type_traits(t);
        if (tr->row_header) {
            const float big[] = { FLT_MAX, 1e38f, 3e36f, -FLT_MAX, INFINITY, NAN };
            for (size_t j = 0; j < sizeof big / sizeof big[0]; j++) {
                memcpy(d, q, rb * nrows);
                memcpy(d + rb, &big[j], 4);
                agree(t, d, ne0, nrows, "a large row scale");
                if (tr->row_header == 8) { /* the minimum too */
                    memcpy(d, q, rb * nrows);
                    memcpy(d + rb + 4, &big[j], 4);
                    agree(t, d, ne0, nrows, "a large row minimum");
                }
            }
        }
        free(q);
        free(d);
    }
    free(x);
}

Test(finite, auxiliary_types_have_none)
{
    uint32_t v[4] = { 0xffffffffu, 0x7f800000u, 0x7fc00000u, 0 };
    uint64_t n = 9;
    int64_t first = 9;
    cr_assert_eq(llm_rows_nonfinite(LLM_TYPE_U32, v, 4, 1, &n, &first), LLM_OK);
    cr_assert_eq(n, 0);
    cr_assert_eq(first, -1);
    cr_assert_eq(llm_rows_nonfinite(LLM_TYPE_F32, v, 4, 1, &n, &first), LLM_OK);
    cr_assert_eq(n, 3);
    cr_assert_eq(first, 0);
}
