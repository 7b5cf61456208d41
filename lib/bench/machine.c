/* machine.c: what llm-bench records about the machine, and the two roofline
 * probes (streaming read bandwidth for decode, FMA peak for prefill). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../common/alloc.h"
#include "bench.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define LLM_X86 1
#else
#define LLM_X86 0
#endif

#ifndef LLM_VERSION
#define LLM_VERSION "unknown"
#endif
#ifndef LLM_COMMIT
#define LLM_COMMIT "unknown"
#endif

static void cpu_model(char *buf, size_t n)
{
    snprintf(buf, n, "unknown");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f)
        return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10) != 0)
            continue;
        const char *p = strchr(line, ':');
        if (!p)
            continue;
        p++;
        while (*p == ' ' || *p == '\t')
            p++;
        size_t len = strcspn(p, "\n");
        snprintf(buf, n, "%.*s", (int)len, p);
        break;
    }
    fclose(f);
}

void llm_machine_detect(struct llm_machine *m)
{
    memset(m, 0, sizeof *m);
    cpu_model(m->cpu, sizeof m->cpu);
#if LLM_X86
    __builtin_cpu_init();
    const struct { const char *name; int on; } feats[] = {
        { "avx2", __builtin_cpu_supports("avx2") },
        { "fma", __builtin_cpu_supports("fma") },
        { "avx512f", __builtin_cpu_supports("avx512f") },
        { "avx512vnni", __builtin_cpu_supports("avx512vnni") },
#if defined(__GNUC__) && __GNUC__ >= 11
        { "avxvnni", __builtin_cpu_supports("avxvnni") },
#endif
    };
    size_t off = 0;
    for (size_t i = 0; i < sizeof feats / sizeof feats[0]; i++)
        if (feats[i].on && off < sizeof m->features)
            off += (size_t)snprintf(m->features + off, sizeof m->features - off, "%s%s", off ? " " : "",
                                    feats[i].name);
#endif
    if (!m->features[0])
        snprintf(m->features, sizeof m->features, "none");
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    m->n_cpus = n > 0 ? (int)n : 1;
    snprintf(m->version, sizeof m->version, "%s", LLM_VERSION);
    snprintf(m->commit, sizeof m->commit, "%s", LLM_COMMIT);
}

/* ---- threads ---------------------------------------------------------------- */

struct job {
    void (*fn)(struct job *j);
    int i, n;
    /* bandwidth */
    const uint64_t *buf; /* (words) */
    size_t words;
    uint64_t sum;
    /* fma */
    double seconds;
    double flops;
};

static void *job_main(void *arg)
{
    struct job *j = arg;
    j->fn(j);
    return NULL;
}

/* Run fn on n threads (the caller is one of them). */
static llm_status run_jobs(struct job *jobs, int n)
{
    pthread_t th[256];
    int started = 0;
    llm_status s = LLM_OK;
    for (int i = 1; i < n; i++, started++)
        if (pthread_create(&th[i], NULL, job_main, &jobs[i])) {
            s = llm_error_set(LLM_E_NOMEM, "probe: cannot start thread %d of %d", i + 1, n);
            break;
        }
    jobs[0].fn(&jobs[0]);
    for (int i = 1; i <= started; i++)
        pthread_join(th[i], NULL);
    return s;
}

/* ---- bandwidth -------------------------------------------------------------- */

static void bw_job(struct job *j)
{
    size_t lo = j->words * (size_t)j->i / (size_t)j->n, hi = j->words * (size_t)(j->i + 1) / (size_t)j->n;
    /* four independent sums so the adds are never the bottleneck */
    uint64_t a = 0, b = 0, c = 0, d = 0;
    size_t k = lo;
    for (; k + 4 <= hi; k += 4) {
        a += j->buf[k];
        b += j->buf[k + 1];
        c += j->buf[k + 2];
        d += j->buf[k + 3];
    }
    for (; k < hi; k++)
        a += j->buf[k];
    j->sum = a + b + c + d;
}

llm_status llm_probe_bandwidth(double *gbs, int n_threads, size_t bytes, int reps)
{
    LLM_CHECK(n_threads >= 1 && n_threads <= 256, LLM_E_INVALID, "probe: %d threads (1..256)", n_threads);
    LLM_CHECK(bytes >= 4096 && reps >= 1, LLM_E_INVALID, "probe: buffer of %zu bytes, %d passes", bytes, reps);
    size_t words = bytes / sizeof(uint64_t);
    uint64_t *buf = llm_malloc(words * sizeof *buf);
    struct job *jobs = llm_calloc((size_t)n_threads, sizeof *jobs);
    llm_status s = LLM_OK;
    if (!buf || !jobs) {
        s = LLM_E_NOMEM;
        goto out;
    }
    for (size_t i = 0; i < words; i++) /* touch every page before timing */
        buf[i] = i;
    double best = 0;
    uint64_t check = 0;
    for (int r = 0; r < reps && !s; r++) {
        for (int i = 0; i < n_threads; i++)
            jobs[i] = (struct job){ .fn = bw_job, .i = i, .n = n_threads, .buf = buf, .words = words };
        uint64_t t0 = llm_time_ns();
        s = run_jobs(jobs, n_threads);
        uint64_t dt = llm_time_ns() - t0;
        uint64_t sum = 0;
        for (int i = 0; i < n_threads; i++)
            sum += jobs[i].sum;
        check ^= sum;
        double g = (double)(words * sizeof *buf) / (double)(dt ? dt : 1);
        best = g > best ? g : best;
    }
    /* sum of 0..words-1: proves every word was read (and keeps the loads) */
    uint64_t want = (uint64_t)words * (uint64_t)(words - 1) / 2;
    if (!s && check != (reps % 2 ? want : 0))
        s = llm_error_set(LLM_E_INVALID, "probe: bandwidth pass read wrong data");
    *gbs = best;
out:
    llm_free(buf);
    llm_free(jobs);
    return s;
}

/* ---- FMA peak --------------------------------------------------------------- */

/* Each kernel runs `iters` rounds of 12 independent FMA chains (enough to
 * cover the latency x throughput of two FMA ports) and returns a value
 * that depends on all of them. */
#define FMA_CHAINS 12

#if LLM_X86
__attribute__((target("avx512f"))) static float fma_avx512(long iters)
{
    __m512 acc[FMA_CHAINS], m = _mm512_set1_ps(0.999999f), a = _mm512_set1_ps(1e-7f);
    for (int c = 0; c < FMA_CHAINS; c++)
        acc[c] = _mm512_set1_ps((float)c);
    for (long i = 0; i < iters; i++)
#pragma GCC unroll 12
        for (int c = 0; c < FMA_CHAINS; c++)
            acc[c] = _mm512_fmadd_ps(acc[c], m, a);
    __m512 t = acc[0];
    for (int c = 1; c < FMA_CHAINS; c++)
        t = _mm512_add_ps(t, acc[c]);
    return _mm512_reduce_add_ps(t);
}

__attribute__((target("avx2,fma"))) static float fma_avx2(long iters)
{
    __m256 acc[FMA_CHAINS], m = _mm256_set1_ps(0.999999f), a = _mm256_set1_ps(1e-7f);
    for (int c = 0; c < FMA_CHAINS; c++)
        acc[c] = _mm256_set1_ps((float)c);
    for (long i = 0; i < iters; i++)
#pragma GCC unroll 12
        for (int c = 0; c < FMA_CHAINS; c++)
            acc[c] = _mm256_fmadd_ps(acc[c], m, a);
    __m256 t = acc[0];
    for (int c = 1; c < FMA_CHAINS; c++)
        t = _mm256_add_ps(t, acc[c]);
    float o[8];
    _mm256_storeu_ps(o, t);
    return o[0] + o[1] + o[2] + o[3] + o[4] + o[5] + o[6] + o[7];
}
#endif

static float fma_scalar(long iters)
{
    float acc[FMA_CHAINS];
    for (int c = 0; c < FMA_CHAINS; c++)
        acc[c] = (float)c;
    for (long i = 0; i < iters; i++)
#pragma GCC unroll 12
        for (int c = 0; c < FMA_CHAINS; c++)
            acc[c] = __builtin_fmaf(acc[c], 0.999999f, 1e-7f);
    float t = 0;
    for (int c = 0; c < FMA_CHAINS; c++)
        t += acc[c];
    return t;
}

static volatile float fma_sink;

static void fma_job(struct job *j)
{
    float (*fn)(long) = fma_scalar;
    int lanes = 1;
#if LLM_X86
    if (__builtin_cpu_supports("avx512f"))
        fn = fma_avx512, lanes = 16;
    else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        fn = fma_avx2, lanes = 8;
#endif
    long iters = 1 << 16;
    double flops = 0;
    uint64_t t0 = llm_time_ns(), limit = (uint64_t)(j->seconds * 1e9);
    while (llm_time_ns() - t0 < limit) {
        fma_sink = fn(iters);
        flops += 2.0 * lanes * FMA_CHAINS * (double)iters;
    }
    j->flops = flops / ((double)(llm_time_ns() - t0) * 1e-9);
}

llm_status llm_probe_fma(double *gflops, int n_threads, double seconds)
{
    LLM_CHECK(n_threads >= 1 && n_threads <= 256, LLM_E_INVALID, "probe: %d threads (1..256)", n_threads);
    LLM_CHECK(seconds > 0 && seconds <= 60, LLM_E_INVALID, "probe: %g seconds (0..60)", seconds);
    struct job *jobs = llm_calloc((size_t)n_threads, sizeof *jobs);
    if (!jobs)
        return LLM_E_NOMEM;
    for (int i = 0; i < n_threads; i++)
        jobs[i] = (struct job){ .fn = fma_job, .i = i, .n = n_threads, .seconds = seconds };
    llm_status s = run_jobs(jobs, n_threads);
    double total = 0;
    for (int i = 0; i < n_threads; i++)
        total += jobs[i].flops;
    *gflops = total * 1e-9;
    llm_free(jobs);
    return s;
}

/* ---- int16 dot-product peak ------------------------------------------------- */

/* The rate of the instruction the int16 GEMM spends its time in: vpdpwssd
 * (AVX-512 VNNI: 32 int16 multiply-adds into 16 int32 lanes), or
 * madd_epi16 + add_epi32 on AVX2 (16 a pair), in 12 independent chains.
 * An operation is a multiply or an add (2 per multiply-add), as FLOPs are
 * counted. */
#if LLM_X86
__attribute__((target("avx512f,avx512bw,avx512vnni"))) static int dot16_avx512(long iters)
{
    __m512i acc[FMA_CHAINS], w = _mm512_set1_epi16(3), x = _mm512_set1_epi16(-2);
    for (int c = 0; c < FMA_CHAINS; c++)
        acc[c] = _mm512_set1_epi32(c);
    for (long i = 0; i < iters; i++)
#pragma GCC unroll 12
        for (int c = 0; c < FMA_CHAINS; c++)
            acc[c] = _mm512_dpwssd_epi32(acc[c], w, x);
    __m512i t = acc[0];
    for (int c = 1; c < FMA_CHAINS; c++)
        t = _mm512_add_epi32(t, acc[c]);
    return _mm512_reduce_add_epi32(t);
}

__attribute__((target("avx2"))) static int dot16_avx2(long iters)
{
    __m256i acc[FMA_CHAINS], w = _mm256_set1_epi16(3), x = _mm256_set1_epi16(-2);
    for (int c = 0; c < FMA_CHAINS; c++)
        acc[c] = _mm256_set1_epi32(c);
    for (long i = 0; i < iters; i++)
#pragma GCC unroll 12
        for (int c = 0; c < FMA_CHAINS; c++)
            acc[c] = _mm256_add_epi32(acc[c], _mm256_madd_epi16(w, x));
    __m256i t = acc[0];
    for (int c = 1; c < FMA_CHAINS; c++)
        t = _mm256_add_epi32(t, acc[c]);
    int o[8];
    _mm256_storeu_si256((__m256i *)o, t);
    return o[0] + o[1] + o[2] + o[3] + o[4] + o[5] + o[6] + o[7];
}
#endif

static volatile int dot16_sink;

static void dot16_job(struct job *j)
{
    int (*fn)(long) = NULL;
    int macs = 0;
#if LLM_X86
    if (__builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512bw"))
        fn = dot16_avx512, macs = 32;
    else if (__builtin_cpu_supports("avx2"))
        fn = dot16_avx2, macs = 16;
#endif
    j->flops = 0;
    if (!fn)
        return;
    long iters = 1 << 16;
    double ops = 0;
    uint64_t t0 = llm_time_ns(), limit = (uint64_t)(j->seconds * 1e9);
    while (llm_time_ns() - t0 < limit) {
        dot16_sink = fn(iters);
        ops += 2.0 * macs * FMA_CHAINS * (double)iters;
    }
    j->flops = ops / ((double)(llm_time_ns() - t0) * 1e-9);
}

llm_status llm_probe_dot16(double *gops, int n_threads, double seconds)
{
    LLM_CHECK(n_threads >= 1 && n_threads <= 256, LLM_E_INVALID, "probe: %d threads (1..256)", n_threads);
    LLM_CHECK(seconds > 0 && seconds <= 60, LLM_E_INVALID, "probe: %g seconds (0..60)", seconds);
    struct job *jobs = llm_calloc((size_t)n_threads, sizeof *jobs);
    if (!jobs)
        return LLM_E_NOMEM;
    for (int i = 0; i < n_threads; i++)
        jobs[i] = (struct job){ .fn = dot16_job, .i = i, .n = n_threads, .seconds = seconds };
    llm_status s = run_jobs(jobs, n_threads);
    double total = 0;
    for (int i = 0; i < n_threads; i++)
        total += jobs[i].flops;
    *gops = total * 1e-9;
    llm_free(jobs);
    return s;
}
