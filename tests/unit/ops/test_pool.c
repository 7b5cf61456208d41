/* test_pool.c: the persistent thread pool of lib/ops/pool.c. */
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../../lib/ops/matmul.h"
#include "../../../lib/quant/quant.h"
#include "../helpers.h"

struct count_ctx {
    int n;
    int iter;
    _Atomic int64_t hits[8];
    int last[8];          /* written plainly by thread i: the barrier must publish it */
    _Atomic int bad_n;
};

static void count_fn(int i, int n, void *ctx_)
{
    struct count_ctx *c = ctx_;
    if (n != c->n || i < 0 || i >= n)
        atomic_fetch_add(&c->bad_n, 1);
    else {
        atomic_fetch_add(&c->hits[i], 1);
        c->last[i] = c->iter;
    }
}

Test(pool, every_index_exactly_once)
{
    for (int n = 1; n <= 4; n++) {
        struct llm_pool *p;
        cr_assert_eq(llm_pool_new(&p, n), LLM_OK);
        cr_assert_eq(llm_pool_size(p), n);
        struct count_ctx c;
        memset(&c, 0, sizeof c);
        c.n = n;
        const int iters = 20000;
        for (int it = 0; it < iters; it++) {
            c.iter = it;
            llm_pool_run(p, count_fn, &c);
            /* every thread finished this run before llm_pool_run returned */
            for (int i = 0; i < n; i++)
                cr_assert_eq(c.last[i], it, "n=%d iteration %d: thread %d saw %d", n, it, i,
                             c.last[i]);
            /* now and then let the workers fall asleep on the futex */
            if (it % 5000 == 4999)
                usleep(20000);
        }
        cr_assert_eq(c.bad_n, 0);
        for (int i = 0; i < n; i++)
            cr_assert_eq(c.hits[i], iters, "n=%d thread %d ran %lld times", n, i,
                         (long long)c.hits[i]);
        for (int i = n; i < 8; i++)
            cr_assert_eq(c.hits[i], 0);
        llm_pool_free(p);
    }
}

Test(pool, bad_size_and_null)
{
    struct llm_pool *p = (struct llm_pool *)1;
    cr_assert_eq(llm_pool_new(&p, 0), LLM_E_INVALID);
    cr_assert_null(p);
    llm_pool_free(NULL);
    /* a NULL pool runs the function on the caller alone */
    struct count_ctx c;
    memset(&c, 0, sizeof c);
    c.n = 1;
    llm_pool_run(NULL, count_fn, &c);
    cr_assert_eq(c.hits[0], 1);
}

/* Rows split across threads give the single-threaded product. */
struct mv_ctx {
    enum llm_type t;
    const void *w;
    const float *x;
    float *y;
    int64_t ne0, rows;
    _Atomic int fail;
};

static void mv_fn(int i, int n, void *ctx_)
{
    struct mv_ctx *c = ctx_;
    int64_t r0 = c->rows * i / n, r1 = c->rows * (i + 1) / n;
    if (llm_matvec(c->t, c->w, c->x, c->y, c->ne0, r0, r1) != LLM_OK)
        atomic_store(&c->fail, 1);
}

Test(pool, split_matvec_equals_single)
{
    const int64_t ne0 = 576, rows = 97;
    const enum llm_type types[] = { LLM_TYPE_F32, LLM_TYPE_Q8_0, LLM_TYPE_Q4_1, LLM_TYPE_NF4 };
    float *src = malloc(sizeof(float) * ne0);
    float *x = malloc(sizeof(float) * ne0);
    for (int64_t i = 0; i < ne0; i++)
        x[i] = (float)((i * 37) % 19) - 9.0f;
    for (size_t k = 0; k < sizeof types / sizeof types[0]; k++) {
        uint64_t rb = llm_type_row_bytes(types[k], ne0);
        uint8_t *w = malloc(rb * rows);
        for (int64_t r = 0; r < rows; r++) {
            for (int64_t i = 0; i < ne0; i++)
                src[i] = (float)((i * 7 + r * 13) % 23) / 23.0f - 0.5f;
            cr_assert_eq(llm_quantize_row(types[k], src, w + rb * r, ne0), LLM_OK);
        }
        float y1[97], y3[97];
        cr_assert_eq(llm_matvec(types[k], w, x, y1, ne0, 0, rows), LLM_OK);
        struct llm_pool *p;
        cr_assert_eq(llm_pool_new(&p, 3), LLM_OK);
        struct mv_ctx c = { types[k], w, x, y3, ne0, rows, 0 };
        for (int rep = 0; rep < 50; rep++) {
            memset(y3, 0xff, sizeof y3);
            llm_pool_run(p, mv_fn, &c);
            cr_assert_eq(c.fail, 0);
            for (int64_t r = 0; r < rows; r++)
                cr_assert_eq(y3[r], y1[r], "%s row %lld", llm_type_name(types[k]),
                             (long long)r);
        }
        llm_pool_free(p);
        free(w);
    }
    free(src);
    free(x);
}
