/* pool.c: a persistent pool of worker threads with a spinning barrier.
 *
 * llm_pool_run publishes (fn, ctx) and bumps a generation counter; workers
 * spin on the counter for a short while (a decode step calls the pool
 * hundreds of times per token, microseconds apart), then yield, then sleep
 * on a futex so that an idle pool costs no CPU. The caller runs index 0
 * itself and spins on a countdown of the workers still running.
 *
 * Ordering: fn/ctx are written before the release increment of `gen` and
 * read after the acquire load that sees it; each worker's writes are
 * published by its release decrement of `pending`, read by the caller's
 * acquire load. A sleeping worker announces itself in `sleepers` before its
 * last look at `gen` (both seq_cst), so the caller, which bumps `gen` before
 * reading `sleepers`, either wakes it or is seen by it.
 */
#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "../common/alloc.h"
#include "matmul.h"

/* Spin this long before yielding (a pause costs 10 to 140 cycles depending
 * on the core, so the spin is timed, not counted), then yield this many
 * times before sleeping. */
#define POOL_SPIN_NS 200000
#define POOL_YIELD 16
/* pauses between looks at the clock (and sched_yield calls) while spinning */
#define POOL_CHECK 255

struct llm_pool {
    int n;
    pthread_t *threads; // (n - 1)
    _Alignas(64) _Atomic uint32_t gen;
    _Atomic int sleepers;
    _Atomic int stop;
    void (*fn)(int i, int n, void *ctx);
    void *ctx;
    _Alignas(64) _Atomic int pending;
};

struct pool_arg {
    struct llm_pool *p;
    int i;
};

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void futex_wait(_Atomic uint32_t *addr, uint32_t val)
{
    syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAIT_PRIVATE, val, NULL, NULL, 0);
}

static void futex_wake_all(_Atomic uint32_t *addr)
{
    syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

/* Wait until gen differs from `seen`; returns the new value. */
static uint32_t wait_gen(struct llm_pool *p, uint32_t seen)
{
    uint32_t g;
    int64_t t0 = 0;
    for (int s = 0;; s++) {
        if ((g = atomic_load_explicit(&p->gen, memory_order_acquire)) != seen)
            return g;
        cpu_relax();
        if ((s & POOL_CHECK) == POOL_CHECK) {
            int64_t t = now_ns();
            if (!t0)
                t0 = t;
            else if (t - t0 > POOL_SPIN_NS)
                break;
            /* more threads than free cores: let the one we wait for run */
            sched_yield();
        }
    }
    for (int s = 0; s < POOL_YIELD; s++) {
        if ((g = atomic_load_explicit(&p->gen, memory_order_acquire)) != seen)
            return g;
        sched_yield();
    }
    for (;;) {
        atomic_fetch_add(&p->sleepers, 1);
        g = atomic_load(&p->gen);
        if (g == seen)
            futex_wait(&p->gen, seen);
        atomic_fetch_sub(&p->sleepers, 1);
        if ((g = atomic_load_explicit(&p->gen, memory_order_acquire)) != seen)
            return g;
    }
}

static void *worker(void *arg_)
{
    struct pool_arg a = *(struct pool_arg *)arg_;
    llm_free(arg_);
    struct llm_pool *p = a.p;
    uint32_t seen = 0;
    for (;;) {
        seen = wait_gen(p, seen);
        if (atomic_load_explicit(&p->stop, memory_order_acquire))
            return NULL;
        p->fn(a.i, p->n, p->ctx);
        atomic_fetch_sub_explicit(&p->pending, 1, memory_order_release);
    }
}

static void pool_stop(struct llm_pool *p, int started)
{
    atomic_store(&p->stop, 1);
    atomic_fetch_add_explicit(&p->gen, 1, memory_order_release);
    futex_wake_all(&p->gen);
    for (int i = 0; i < started; i++)
        pthread_join(p->threads[i], NULL);
}

llm_status llm_pool_new(struct llm_pool **out, int n_threads)
{
    *out = NULL;
    if (n_threads < 1 || n_threads > 1024)
        return llm_error_set(LLM_E_INVALID, "pool: bad thread count %d", n_threads);
    struct llm_pool *p = llm_calloc(1, sizeof *p);
    if (!p)
        return LLM_E_NOMEM;
    p->n = n_threads;
    if (n_threads > 1) {
        p->threads = llm_calloc((size_t)n_threads - 1, sizeof *p->threads);
        if (!p->threads) {
            llm_free(p);
            return LLM_E_NOMEM;
        }
    }
    for (int i = 1; i < n_threads; i++) {
        struct pool_arg *a = llm_malloc(sizeof *a);
        int rc = ENOMEM;
        if (a) {
            a->p = p;
            a->i = i;
            rc = pthread_create(&p->threads[i - 1], NULL, worker, a);
        }
        if (rc != 0) {
            llm_free(a);
            pool_stop(p, i - 1);
            llm_free(p->threads);
            llm_free(p);
            return llm_error_set(rc == ENOMEM ? LLM_E_NOMEM : LLM_E_INVALID,
                                 "pool: cannot start thread %d of %d: %s", i, n_threads,
                                 strerror(rc));
        }
    }
    *out = p;
    return LLM_OK;
}

void llm_pool_free(struct llm_pool *p)
{
    if (!p)
        return;
    pool_stop(p, p->n - 1);
    llm_free(p->threads);
    llm_free(p);
}

int llm_pool_size(const struct llm_pool *p)
{
    return p ? p->n : 1;
}

void llm_pool_run(struct llm_pool *p, void (*fn)(int i, int n, void *ctx), void *ctx)
{
    if (!p || p->n == 1) {
        fn(0, 1, ctx);
        return;
    }
    p->fn = fn;
    p->ctx = ctx;
    atomic_store_explicit(&p->pending, p->n - 1, memory_order_relaxed);
    atomic_fetch_add(&p->gen, 1); /* seq_cst: ordered before the sleepers load */
    if (atomic_load(&p->sleepers) > 0)
        futex_wake_all(&p->gen);
    fn(0, p->n, ctx);
    /* the workers run the same share of work: spin, but let a descheduled
     * worker have the core after a while */
    int64_t t0 = 0;
    for (int s = 0; atomic_load_explicit(&p->pending, memory_order_acquire) > 0; s++) {
        if (t0 < 0) {
            sched_yield();
            continue;
        }
        cpu_relax();
        if ((s & POOL_CHECK) == POOL_CHECK) {
            int64_t t = now_ns();
            if (!t0)
                t0 = t;
            else if (t - t0 > POOL_SPIN_NS)
                t0 = -1;
            sched_yield();
        }
    }
}
