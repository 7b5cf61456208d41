/* bench_matmul.c: microbenchmark of the CPU matrix products (make
 * bench-matmul; run build/bench-matmul [seconds per point]).
 *
 * Reports, on 1 and 2 threads (llm_pool, rows split evenly):
 *   - the machine's read bandwidth: a streaming sum over 1 GiB (the ceiling
 *     a memory-bound decode can reach);
 *   - matvec GB/s of weight bytes at stories110m shapes (ne0 x rows):
 *     768 x 2048 (w1/w3), 2048 x 768 (w2), 768 x 32000 (classifier), and the
 *     % of the read bandwidth of the same thread count. Copies of the matrix
 *     fill 1 GiB and are used in turn, so the weights come from DRAM, as in
 *     a decode step, not from the cache;
 *   - matmul GFLOP/s (2 * rows * ne0 * nb, nb = 128 tokens: prefill);
 *   - the cost of one llm_pool_run (empty function) on 2 threads.
 * for every ISA variant this CPU runs (avx2, avx512-vnni), with float
 * activations, and for q8_0/q4_0/q4_1 with int16 ("+a16") and int8 ("+a8",
 * the llama.cpp scheme) activations (llm_matmul_set_act).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../../lib/ops/matmul.h"
#include "../../lib/ops/matmul_impl.h"
#include "../../lib/quant/quant.h"

#define GIB ((size_t)1 << 30)

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

// ----------------------------------------------------------------------------
// read bandwidth

struct sum_ctx {
    const float *buf;
    size_t n;
    double part[64];
};

#if defined(__x86_64__)
#include <immintrin.h>
__attribute__((target("avx2"))) static double sum_avx2(const float *p, size_t n)
{
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        a0 = _mm256_add_ps(a0, _mm256_load_ps(p + i));
        a1 = _mm256_add_ps(a1, _mm256_load_ps(p + i + 8));
        a2 = _mm256_add_ps(a2, _mm256_load_ps(p + i + 16));
        a3 = _mm256_add_ps(a3, _mm256_load_ps(p + i + 24));
    }
    float t[8];
    _mm256_storeu_ps(t, _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
    double s = 0;
    for (int k = 0; k < 8; k++)
        s += t[k];
    for (; i < n; i++)
        s += p[i];
    return s;
}
#endif

static double sum_plain(const float *p, size_t n)
{
    float a[8] = { 0 };
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++)
            a[k] += p[i + k];
    double s = 0;
    for (int k = 0; k < 8; k++)
        s += a[k];
    for (; i < n; i++)
        s += p[i];
    return s;
}

static void sum_fn(int i, int n, void *ctx_)
{
    struct sum_ctx *c = ctx_;
    size_t a = c->n * (size_t)i / (size_t)n / 32 * 32;
    size_t b = c->n * (size_t)(i + 1) / (size_t)n / 32 * 32;
    if (i == n - 1)
        b = c->n;
#if defined(__x86_64__)
    if (__builtin_cpu_supports("avx2")) {
        c->part[i] = sum_avx2(c->buf + a, b - a);
        return;
    }
#endif
    c->part[i] = sum_plain(c->buf + a, b - a);
}

static double read_bandwidth(struct llm_pool *p, float *buf, size_t bytes)
{
    struct sum_ctx c = { buf, bytes / sizeof(float), { 0 } };
    double best = 0;
    for (int rep = 0; rep < 5; rep++) {
        double t = now();
        llm_pool_run(p, sum_fn, &c);
        t = now() - t;
        if (bytes / t > best)
            best = (double)bytes / t;
    }
    return best / 1e9;
}

// ----------------------------------------------------------------------------
// products

struct mm_ctx {
    enum llm_type t;
    const uint8_t *w; // (rows, rb), the copy in use
    const float *x;   // (nb, ne0)
    float *y;         // (nb, rows)
    int64_t ne0, rows, nb;
    int fail;
};

static void mm_fn(int i, int n, void *ctx_)
{
    struct mm_ctx *c = ctx_;
    int64_t r0 = c->rows * i / n, r1 = c->rows * (i + 1) / n;
    llm_status s = c->nb == 1 ? llm_matvec(c->t, c->w, c->x, c->y, c->ne0, r0, r1)
                              : llm_matmul(c->t, c->w, c->x, c->y, c->ne0, c->nb, c->rows, r0, r1);
    if (s != LLM_OK)
        c->fail = 1;
}

static void empty_fn(int i, int n, void *ctx)
{
    (void)i, (void)n, (void)ctx;
}

/* microseconds per llm_pool_run of an empty function (the fixed cost of
 * one parallel section) */
static double pool_overhead_us(struct llm_pool *p, double secs)
{
    size_t calls = 0;
    double t0 = now();
    while (now() - t0 < secs) {
        for (int k = 0; k < 1000; k++)
            llm_pool_run(p, empty_fn, NULL);
        calls += 1000;
    }
    return (now() - t0) / (double)calls * 1e6;
}

static uint64_t rng = 88172645463325252ull;
static float frand(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)(rng >> 40) / 16777216.0f - 0.5f;
}

int main(int argc, char **argv)
{
    double secs = argc > 1 ? atof(argv[1]) : 0.3;
    if (!(secs > 0)) {
        fprintf(stderr, "usage: bench-matmul [seconds per point]\n");
        return 2;
    }
    float *buf = aligned_alloc(64, GIB);
    if (!buf) {
        fprintf(stderr, "bench-matmul: cannot allocate 1 GiB\n");
        return 1;
    }
    for (size_t i = 0; i < GIB / sizeof(float); i++)
        buf[i] = (float)(i & 1023) * 1e-3f;

    struct llm_pool *pools[3] = { 0 };
    double bw[3] = { 0 };
    for (int n = 1; n <= 2; n++) {
        if (llm_pool_new(&pools[n], n) != LLM_OK) {
            fprintf(stderr, "bench-matmul: %s\n", llm_error_detail(LLM_E_INVALID));
            return 1;
        }
        bw[n] = read_bandwidth(pools[n], buf, GIB);
    }
    printf("# CPU matmul benchmark, dispatch ISA %s\n", llm_matmul_isa_name());
    printf("read bandwidth (streaming sum over 1 GiB): 1 thread %.1f GB/s, 2 threads %.1f GB/s\n",
           bw[1], bw[2]);
    printf("llm_pool_run round trip (empty function): 2 threads %.3f us\n\n",
           pool_overhead_us(pools[2], secs));

    const enum llm_type types[] = { LLM_TYPE_F32, LLM_TYPE_Q8_0, LLM_TYPE_Q4_0, LLM_TYPE_Q4_1 };
    const int64_t shapes[][2] = { { 768, 2048 }, { 2048, 768 }, { 768, 32000 } };
    const char *isa_names[] = { "ref", "avx2", "avx512-vnni" };
    const int64_t NB = 128;
    float *X = malloc(sizeof(float) * 2048 * NB);
    float *Y = malloc(sizeof(float) * 32000 * NB);
    float *src = malloc(sizeof(float) * 2048);
    for (int64_t i = 0; i < 2048 * NB; i++)
        X[i] = frand();

    printf("%-6s %-12s %-15s %7s | %9s %6s | %9s %6s | %9s | %9s\n", "type", "ne0 x rows",
           "isa", "MB", "mv GB/s", "%bw", "mv GB/s", "%bw", "mm GF/s", "mm GF/s");
    printf("%-6s %-12s %-15s %7s | %16s | %16s | %9s | %9s\n", "", "", "", "", "1 thread",
           "2 threads", "1 thread", "2 threads");
    enum llm_isa best = llm_isa_detect();
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++)
        for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
            const enum llm_type t = types[ti];
            const int64_t ne0 = shapes[si][0], rows = shapes[si][1];
            const uint64_t rb = llm_type_row_bytes(t, (uint64_t)ne0), mb = rb * (uint64_t)rows;
            uint8_t *w = (uint8_t *)buf;
            for (int64_t r = 0; r < rows; r++) {
                for (int64_t i = 0; i < ne0; i++)
                    src[i] = frand();
                llm_quantize_row(t, src, w + rb * (uint64_t)r, ne0);
            }
            const size_t copies = GIB / mb;
            for (size_t k = 1; k < copies; k++)
                memcpy(w + k * mb, w, mb);
            /* float activations on each ISA, then int16 and int8 activations
             * (llm_matmul_set_act) on each */
            for (int v = 0; v < 6; v++) {
                const int isa = (int)LLM_ISA_AVX2 + v % 2, act = v / 2;
                if (isa > (int)best || (act && llm_matmul_simd_type(t) != LLM_SIMD_INT8))
                    continue;
                llm_matmul_set_isa((enum llm_isa)isa);
                llm_matmul_set_act(act == 0 ? LLM_ACT_F32 : act == 1 ? LLM_ACT_Q16 : LLM_ACT_Q8);
                double gbs[3] = { 0 }, gfs[3] = { 0 };
                for (int n = 1; n <= 2; n++) {
                    struct mm_ctx c = { t, w, X, Y, ne0, rows, 1, 0 };
                    size_t k = 0, calls = 0;
                    double t0 = now();
                    while (now() - t0 < secs) {
                        c.w = w + (k++ % copies) * mb;
                        llm_pool_run(pools[n], mm_fn, &c);
                        calls++;
                    }
                    gbs[n] = (double)mb * (double)calls / (now() - t0) / 1e9;
                    c.nb = NB;
                    calls = 0;
                    t0 = now();
                    while (now() - t0 < secs || calls < 2) {
                        c.w = w + (k++ % copies) * mb;
                        llm_pool_run(pools[n], mm_fn, &c);
                        calls++;
                    }
                    gfs[n] = 2.0 * (double)rows * (double)ne0 * (double)NB * (double)calls /
                             (now() - t0) / 1e9;
                    if (c.fail) {
                        fprintf(stderr, "bench-matmul: product failed\n");
                        return 1;
                    }
                }
                char shape[32], name[32];
                snprintf(shape, sizeof shape, "%lldx%lld", (long long)ne0, (long long)rows);
                snprintf(name, sizeof name, "%s%s", isa_names[isa],
                         act == 0 ? "" : act == 1 ? "+a16" : "+a8");
                printf("%-6s %-12s %-15s %7.2f | %9.2f %5.0f%% | %9.2f %5.0f%% | %9.1f | %9.1f\n",
                       llm_type_name(t), shape, name, (double)mb / 1e6, gbs[1],
                       100 * gbs[1] / bw[1], gbs[2], 100 * gbs[2] / bw[2], gfs[1], gfs[2]);
                fflush(stdout);
            }
        }
    llm_matmul_set_isa(best);
    llm_matmul_set_act(LLM_ACT_F32);
    llm_pool_free(pools[1]);
    llm_pool_free(pools[2]);
    free(buf);
    free(X);
    free(Y);
    free(src);
    return 0;
}
