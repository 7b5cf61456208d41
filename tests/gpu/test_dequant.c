/* test_dequant.c: kernels/dequant.cu against its CPU reference
 * (llm_dequantize_row), for every weight type and several shapes, then a
 * bandwidth measurement on a 4096 x 11008 tensor.
 *
 * Tolerance: none. The kernel decodes fp16/fp8 exactly and performs the
 * reference's float operations in the same order without fma contraction
 * or flush-to-zero, so every value must be bit-identical; the one
 * allowance is NaN, which matches any NaN (the GPU's arithmetic returns a
 * canonical NaN where x86 propagates the input's payload).
 *
 * Cases per type: rows quantized with llm_quantize_row from random data of
 * several shapes (odd lengths, so rows start at odd addresses; a row count
 * past the kernel's grid, so the grid-stride loop runs), rows with NaN, inf,
 * huge and denormal values, and rows of random bytes (arbitrary codes and
 * scales: NaN, inf and subnormal fp16 scales included).
 *
 * Output: one PASS/FAIL line per case, BENCH lines, then "N passed,
 * N failed". Exit 0 when all pass, 1 on a failure, 77 (skip) when there
 * is no CUDA device. Built by `make gpu-tests` (CUDA=1) as
 * build/gpu/test_dequant; run by tests/gpu/run.
 */
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../../lib/gpu/gpu.h"
#include "../../lib/quant/quant.h"

static const enum llm_type types[] = {
    LLM_TYPE_F32,      LLM_TYPE_F16,      LLM_TYPE_BF16,     LLM_TYPE_Q8_0,     LLM_TYPE_Q8_G64,
    LLM_TYPE_Q8_G128,  LLM_TYPE_Q8_CH,    LLM_TYPE_Q8Z_G32,  LLM_TYPE_Q8Z_G64,  LLM_TYPE_Q8Z_G128,
    LLM_TYPE_Q8Z_CH,   LLM_TYPE_Q4_0,     LLM_TYPE_Q4_G64,   LLM_TYPE_Q4_G128,  LLM_TYPE_Q4_CH,
    LLM_TYPE_Q4_1,     LLM_TYPE_Q4Z_G64,  LLM_TYPE_Q4Z_G128, LLM_TYPE_Q4Z_CH,   LLM_TYPE_NF4,
    LLM_TYPE_NF4_DQ,   LLM_TYPE_FP8_E4M3, LLM_TYPE_Q3Z_G32,  LLM_TYPE_Q3Z_G64,  LLM_TYPE_Q3Z_G128,
    LLM_TYPE_Q3Z_CH,   LLM_TYPE_Q5_0,     LLM_TYPE_Q5_1,     LLM_TYPE_Q2_K,     LLM_TYPE_Q3_K,
    LLM_TYPE_Q4_K,     LLM_TYPE_Q5_K,     LLM_TYPE_Q6_K,     LLM_TYPE_Q8_K,     LLM_TYPE_IQ4_NL,
    LLM_TYPE_IQ4_XS,
};
#define N_TYPES (sizeof types / sizeof types[0])

static int n_pass, n_fail;

// ----------------------------------------------------------------------------
// data

static uint64_t rng = 0x243f6a8885a308d3ull;

static uint64_t rnd(void)
{
    uint64_t z = (rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static float gauss(void)
{
    double u = ((double)(rnd() >> 11) + 0.5) / 9007199254740992.0;
    double v = ((double)(rnd() >> 11) + 0.5) / 9007199254740992.0;
    return (float)(sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v));
}

enum data { DATA_GAUSS, DATA_SPECIAL, DATA_BYTES };
static const char *data_name[] = { "gauss", "special", "random bytes" };

static void fill_special(float *x, int64_t ne0, int64_t r)
{
    for (int64_t i = 0; i < ne0; i++) {
        float g = gauss();
        switch (r % 4) {
        case 0: x[i] = i % 17 == 3 ? NAN : i % 17 == 7 ? INFINITY : i % 17 == 11 ? -INFINITY : g; break;
        case 1: x[i] = 1e-6f * g; break; /* f16 subnormals, tiny scales */
        case 2: x[i] = 1e30f * g; break; /* past fp16: saturated scales */
        case 3: x[i] = FLT_TRUE_MIN * (float)(int)(g * 100); break; /* f32 denormals */
        }
    }
}

/* Host rows of type t: (nrows) rows of row_bytes. */
static uint8_t *make_rows(enum llm_type t, int64_t ne0, int64_t nrows, enum data data,
                          uint64_t rb)
{
    uint8_t *q = malloc((size_t)(rb * (uint64_t)nrows));
    float *x = malloc((size_t)ne0 * sizeof(float));
    if (!q || !x) {
        free(q);
        free(x);
        return NULL;
    }
    for (int64_t r = 0; r < nrows; r++) {
        uint8_t *row = q + (uint64_t)r * rb;
        if (data == DATA_BYTES) {
            for (uint64_t k = 0; k < rb; k++)
                row[k] = (uint8_t)rnd();
            continue;
        }
        for (int64_t i = 0; i < ne0; i++)
            x[i] = data == DATA_GAUSS ? gauss() * (rnd() % 31 == 0 ? 20.0f : 1.0f) : 0;
        if (data == DATA_SPECIAL)
            fill_special(x, ne0, r);
        if (llm_quantize_row(t, x, row, ne0) != LLM_OK) {
            free(q);
            free(x);
            return NULL;
        }
    }
    free(x);
    return q;
}

// ----------------------------------------------------------------------------
// comparison

static uint32_t bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* Count the elements where GPU and CPU differ (NaN matches NaN); print the
 * first few. */
static int64_t compare(const float *cpu, const float *gpu, int64_t ne0, int64_t nrows, int64_t r0)
{
    int64_t bad = 0;
    for (int64_t k = 0; k < ne0 * nrows; k++) {
        if (bits(cpu[k]) == bits(gpu[k]) || (isnan(cpu[k]) && isnan(gpu[k])))
            continue;
        if (bad < 5)
            printf("    row %" PRId64 " col %" PRId64 ": cpu %.9g (%08x), gpu %.9g (%08x)\n",
                   r0 + k / ne0, k % ne0, cpu[k], bits(cpu[k]), gpu[k], bits(gpu[k]));
        bad++;
    }
    return bad;
}

static void report(int ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void report(int ok, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    printf("%s ", ok ? "PASS" : "FAIL");
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    fflush(stdout);
    if (ok)
        n_pass++;
    else
        n_fail++;
}

static void check_case(enum llm_type t, int64_t ne0, int64_t nrows, enum data data)
{
    const char *name = llm_type_name(t);
    uint64_t rb = llm_type_row_bytes(t, (uint64_t)ne0);
    uint8_t *q = make_rows(t, ne0, nrows, data, rb);
    float *cpu = malloc((size_t)(ne0 * nrows) * sizeof(float));
    float *gpu = malloc((size_t)(ne0 * nrows) * sizeof(float));
    if (!q || !cpu || !gpu) {
        report(0, "%s %" PRId64 "x%" PRId64 " %s: out of host memory", name, ne0, nrows,
               data_name[data]);
        goto out;
    }
    for (int64_t r = 0; r < nrows; r++)
        if (llm_dequantize_row(t, q + (uint64_t)r * rb, cpu + r * ne0, ne0) != LLM_OK) {
            report(0, "%s: cpu dequantize failed: %s", name, llm_error_detail(-1));
            goto out;
        }
    memset(gpu, 0xff, (size_t)(ne0 * nrows) * sizeof(float));
    llm_status s = llm_gpu_dequantize(t, q, gpu, ne0, nrows);
    if (s != LLM_OK) {
        report(0, "%s %" PRId64 "x%" PRId64 " %s: %s", name, ne0, nrows, data_name[data],
               llm_error_detail(s));
        goto out;
    }
    int64_t bad = compare(cpu, gpu, ne0, nrows, 0);
    report(bad == 0, "%s %" PRId64 "x%" PRId64 " %s%s%" PRId64 "%s", name, ne0, nrows,
           data_name[data], bad ? ": " : "", bad, bad ? " elements differ" : "");
out:
    free(q);
    free(cpu);
    free(gpu);
}

// ----------------------------------------------------------------------------
// bandwidth

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void bench(enum llm_type t, int64_t ne0, int64_t nrows)
{
    const char *name = llm_type_name(t);
    uint64_t rb = llm_type_row_bytes(t, (uint64_t)ne0);
    size_t sb = (size_t)(rb * (uint64_t)nrows), db = (size_t)(ne0 * nrows) * sizeof(float);
    uint8_t *q = make_rows(t, ne0, nrows, DATA_GAUSS, rb);
    float *out = malloc(db), *ref = malloc((size_t)ne0 * sizeof(float));
    void *d_src = NULL, *d_dst = NULL;
    llm_status s = q && out && ref ? LLM_OK : LLM_E_NOMEM;
    if (s == LLM_OK)
        s = llm_gpu_alloc(&d_src, sb);
    if (s == LLM_OK)
        s = llm_gpu_alloc(&d_dst, db);
    if (s == LLM_OK)
        s = llm_gpu_upload(d_src, q, sb);
    for (int w = 0; w < 3 && s == LLM_OK; w++)
        s = llm_gpu_dequantize_dev(t, d_src, d_dst, ne0, nrows, NULL);
    if (s == LLM_OK)
        s = llm_gpu_sync();
    const int iters = 20;
    double t0 = now();
    for (int it = 0; it < iters && s == LLM_OK; it++)
        s = llm_gpu_dequantize_dev(t, d_src, d_dst, ne0, nrows, NULL);
    if (s == LLM_OK)
        s = llm_gpu_sync();
    double dt = (now() - t0) / iters;
    if (s == LLM_OK)
        s = llm_gpu_download(out, d_dst, db);
    if (s != LLM_OK) {
        report(0, "bench %s %" PRId64 "x%" PRId64 ": %s", name, ne0, nrows, llm_error_detail(s));
    } else {
        printf("BENCH dequant %s %" PRId64 "x%" PRId64 ": %.3f ms, %.1f GB/s (reads %.1f MB, "
               "writes %.1f MB)\n", name, ne0, nrows, dt * 1e3, (double)(sb + db) / dt / 1e9,
               (double)sb / 1e6, (double)db / 1e6);
        /* the timed kernel's output, checked on a few rows */
        int64_t bad = 0, rows[] = { 0, 1, nrows / 2, nrows - 1 };
        for (int k = 0; k < 4; k++) {
            llm_dequantize_row(t, q + (uint64_t)rows[k] * rb, ref, ne0);
            bad += compare(ref, out + rows[k] * ne0, ne0, 1, rows[k]);
        }
        report(bad == 0, "bench %s %" PRId64 "x%" PRId64 " output matches the cpu", name, ne0,
               nrows);
    }
    llm_gpu_free(d_src);
    llm_gpu_free(d_dst);
    free(q);
    free(out);
    free(ref);
}

int main(void)
{
    int ndev = 0;
    if (llm_gpu_available(&ndev) != LLM_OK) {
        printf("SKIP test_dequant: %s\n", llm_error_detail(LLM_E_CUDA));
        return 77;
    }
    char dev[256] = "?";
    llm_gpu_device_name(0, dev, sizeof dev);
    printf("# device 0 of %d: %s\n", ndev, dev);

    static const int64_t shapes[][2] = {
        { 1, 1 },  { 1, 3 },   { 31, 3 },   { 33, 5 },  { 64, 4 },
        { 172, 7 }, { 576, 4 }, { 1000, 3 }, { 4096, 2 }, { 11008, 2 },
    };
    for (size_t k = 0; k < N_TYPES; k++) {
        /* the GGUF layouts take whole blocks only: lengths rounded up */
        const int64_t B = llm_type_whole_blocks(types[k]) ? llm_type_traits(types[k])->blck : 1;
#define LEN(n) (((n) + B - 1) / B * B)
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
            check_case(types[k], LEN(shapes[s][0]), shapes[s][1], DATA_GAUSS);
        check_case(types[k], LEN(200), 8, DATA_SPECIAL);
        check_case(types[k], LEN(1000), 16, DATA_BYTES);
        check_case(types[k], LEN(33), 9, DATA_BYTES);
#undef LEN
    }
    /* more rows than the grid has blocks: the grid-stride loop */
    static const enum llm_type many[] = { LLM_TYPE_Q4_0, LLM_TYPE_Q8_CH, LLM_TYPE_NF4_DQ,
                                          LLM_TYPE_FP8_E4M3, LLM_TYPE_F16 };
    for (size_t k = 0; k < sizeof many / sizeof many[0]; k++)
        check_case(many[k], 3, 1100000, DATA_GAUSS);

    /* a Llama-7B FFN matrix: 11008 rows of 4096 */
    bench(LLM_TYPE_Q4_0, 4096, 11008);
    bench(LLM_TYPE_Q8_0, 4096, 11008);
    bench(LLM_TYPE_NF4_DQ, 4096, 11008);
    bench(LLM_TYPE_FP8_E4M3, 4096, 11008);
    bench(LLM_TYPE_Q4_K, 4096, 11008);
    bench(LLM_TYPE_Q6_K, 4096, 11008);

    printf("%d passed, %d failed\n", n_pass, n_fail);
    return n_fail ? 1 : 0;
}
