/* machine.c: what llm-bench records about the machine, and the two roofline
 * probes (streaming read bandwidth for decode, FMA peak for prefill). */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
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

/* The probe's two read kernels over words [lo, hi) of the buffer, each
 * returning the sum of the words (which proves every word was read and
 * keeps the loads): wide vector loads (64 or 32 bytes, four independent
 * accumulators), and a plain 64-bit loop in the manner of STREAM's
 * kernels. The probe takes the faster, so that neither a compiler's choice
 * nor a CPU's preference for one kind of load makes the roofline low. */
static uint64_t read_scalar(const uint64_t *w, size_t lo, size_t hi)
{
    uint64_t a = 0, b = 0, c = 0, d = 0;
    size_t k = lo;
    for (; k + 4 <= hi; k += 4) {
        a += w[k];
        b += w[k + 1];
        c += w[k + 2];
        d += w[k + 3];
    }
    for (; k < hi; k++)
        a += w[k];
    return a + b + c + d;
}

#if LLM_X86
__attribute__((target("avx512f"))) static uint64_t read_avx512(const uint64_t *w, size_t lo, size_t hi)
{
    __m512i a = _mm512_setzero_si512(), b = a, c = a, d = a;
    size_t k = lo;
    for (; k + 32 <= hi; k += 32) {
        a = _mm512_add_epi64(a, _mm512_loadu_si512((const void *)(w + k)));
        b = _mm512_add_epi64(b, _mm512_loadu_si512((const void *)(w + k + 8)));
        c = _mm512_add_epi64(c, _mm512_loadu_si512((const void *)(w + k + 16)));
        d = _mm512_add_epi64(d, _mm512_loadu_si512((const void *)(w + k + 24)));
    }
    a = _mm512_add_epi64(_mm512_add_epi64(a, b), _mm512_add_epi64(c, d));
    return (uint64_t)_mm512_reduce_add_epi64(a) + read_scalar(w, k, hi);
}

__attribute__((target("avx2"))) static uint64_t read_avx2(const uint64_t *w, size_t lo, size_t hi)
{
    __m256i a = _mm256_setzero_si256(), b = a, c = a, d = a;
    size_t k = lo;
    for (; k + 16 <= hi; k += 16) {
        a = _mm256_add_epi64(a, _mm256_loadu_si256((const __m256i *)(w + k)));
        b = _mm256_add_epi64(b, _mm256_loadu_si256((const __m256i *)(w + k + 4)));
        c = _mm256_add_epi64(c, _mm256_loadu_si256((const __m256i *)(w + k + 8)));
        d = _mm256_add_epi64(d, _mm256_loadu_si256((const __m256i *)(w + k + 12)));
    }
    a = _mm256_add_epi64(_mm256_add_epi64(a, b), _mm256_add_epi64(c, d));
    uint64_t l[4];
    _mm256_storeu_si256((__m256i *)l, a);
    return l[0] + l[1] + l[2] + l[3] + read_scalar(w, k, hi);
}
#endif

/* The widest read kernel this CPU has (1), or the plain loop (0). */
static uint64_t read_words(int vec, const uint64_t *w, size_t lo, size_t hi)
{
#if LLM_X86
    if (vec && __builtin_cpu_supports("avx512f"))
        return read_avx512(w, lo, hi);
    if (vec && __builtin_cpu_supports("avx2"))
        return read_avx2(w, lo, hi);
#endif
    (void)vec;
    return read_scalar(w, lo, hi);
}

/* The probe's threads are started before any timing and meet at a spinning
 * barrier around each pass (a sleeping one would add its wake-up to the
 * time); thread 0 times a pass from the barrier that starts it to the one
 * that ends it. They begin only when all of them exist (go = 1), or leave
 * at once when one could not be started (go = -1). */
struct bw_run {
    const uint64_t *buf; /* (words) */
    size_t words;
    int n, passes;
    uint64_t *ns;        /* (passes) time of each pass */
    uint64_t *sums;      /* (n) per thread: the sum over passes of its words */
    atomic_int go;
    atomic_int arrived;  /* threads at the barrier in this round */
    atomic_int round;
};

struct bw_arg {
    struct bw_run *r;
    int i;
};

static void bw_barrier(struct bw_run *r)
{
    const int round = atomic_load(&r->round);
    if (atomic_fetch_add(&r->arrived, 1) == r->n - 1) {
        atomic_store(&r->arrived, 0);
        atomic_store(&r->round, round + 1);
    } else
        while (atomic_load(&r->round) == round)
            sched_yield(); /* returns at once unless the CPUs are oversubscribed */
}

static void *bw_thread(void *arg)
{
    struct bw_arg *a = arg;
    struct bw_run *r = a->r;
    int go;
    while (!(go = atomic_load(&r->go)))
        sched_yield();
    if (go < 0)
        return NULL;
    const size_t lo = r->words * (size_t)a->i / (size_t)r->n;
    const size_t hi = r->words * (size_t)(a->i + 1) / (size_t)r->n;
    uint64_t x = 0;
    for (int p = 0; p < r->passes; p++) {
        bw_barrier(r);
        uint64_t t0 = a->i ? 0 : llm_time_ns();
        x += read_words(p % 2 == 0, r->buf, lo, hi); /* even passes vector loads, odd plain */
        bw_barrier(r);
        if (!a->i)
            r->ns[p] = llm_time_ns() - t0;
    }
    r->sums[a->i] = x;
    return NULL;
}

size_t llm_probe_bandwidth_bytes(void)
{
    size_t bytes = (size_t)512 << 20;
#ifdef _SC_LEVEL3_CACHE_SIZE
    long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
    if (l3 > 0 && (size_t)l3 * 4 > bytes) /* well past the last-level cache */
        bytes = (size_t)l3 * 4;
#endif
    if (bytes > (size_t)2 << 30)
        bytes = (size_t)2 << 30;
    /* and at most a quarter of the free memory (Linux would not refuse the
     * allocation, it would kill a process when the pages are touched) */
    long pages = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    if (pages > 0 && page > 0 && (size_t)pages / 4 * (size_t)page < bytes)
        bytes = (size_t)pages / 4 * (size_t)page;
    return bytes > ((size_t)64 << 20) ? bytes : (size_t)64 << 20;
}

llm_status llm_probe_bandwidth(double *gbs, int n_threads, size_t bytes, int reps)
{
    LLM_CHECK(n_threads >= 1 && n_threads <= 256, LLM_E_INVALID, "probe: %d threads (1..256)", n_threads);
    LLM_CHECK(bytes >= 4096 && reps >= 1, LLM_E_INVALID, "probe: buffer of %zu bytes, %d passes", bytes, reps);
    struct bw_run r = { .words = bytes / sizeof(uint64_t), .n = n_threads, .passes = 2 * reps };
    uint64_t *buf = llm_malloc(r.words * sizeof *buf);
    r.ns = llm_calloc((size_t)r.passes, sizeof *r.ns);
    r.sums = llm_calloc((size_t)n_threads, sizeof *r.sums);
    struct bw_arg *args = llm_calloc((size_t)n_threads, sizeof *args);
    pthread_t th[256];
    int started = 0;
    llm_status s = LLM_OK;
    if (!buf || !r.ns || !r.sums || !args) {
        s = LLM_E_NOMEM;
        goto out;
    }
    for (size_t i = 0; i < r.words; i++) /* touch every page before timing */
        buf[i] = i;
    r.buf = buf;
    for (int i = 0; i < n_threads; i++)
        args[i] = (struct bw_arg){ &r, i };
    for (int i = 1; i < n_threads; i++, started++)
        if (pthread_create(&th[i], NULL, bw_thread, &args[i]))
            break;
    atomic_store(&r.go, started == n_threads - 1 ? 1 : -1);
    if (started == n_threads - 1)
        bw_thread(&args[0]);
    for (int i = 1; i <= started; i++)
        pthread_join(th[i], NULL);
    if (started < n_threads - 1) {
        s = llm_error_set(LLM_E_NOMEM, "probe: cannot start thread %d of %d", started + 2, n_threads);
        goto out;
    }
    /* every pass read every word once: passes x (0 + 1 + ... + words-1) */
    uint64_t check = 0;
    for (int i = 0; i < n_threads; i++)
        check += r.sums[i];
    if (check != (uint64_t)r.passes * ((uint64_t)r.words * (uint64_t)(r.words - 1) / 2)) {
        s = llm_error_set(LLM_E_INVALID, "probe: bandwidth pass read wrong data");
        goto out;
    }
    double best = 0;
    for (int p = 0; p < r.passes; p++) {
        double g = (double)(r.words * sizeof *buf) / (double)(r.ns[p] ? r.ns[p] : 1);
        best = g > best ? g : best;
    }
    *gbs = best;
out:
    llm_free(buf);
    llm_free(r.ns);
    llm_free(r.sums);
    llm_free(args);
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
