/* kernels.c: llm-bench --kernels: each matrix kernel (llm_matvec for
 * decode, llm_matmul for prefill) on random weights of each type at a
 * model's shapes, and single-query attention over a KV cache, split across
 * a persistent pool the way the forward pass splits them. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "../common/alloc.h"
#include "../ops/matmul.h"
#include "../ops/vec.h"
#include "../quant/quant.h"
#include "bench.h"

llm_status llm_bench_kernel_shapes(struct llm_bench_kshape *out, int32_t dim, int32_t ffn_dim,
                                   int32_t n_vocab)
{
    LLM_CHECK(dim > 0 && ffn_dim > 0 && n_vocab > 0, LLM_E_INVALID,
              "kernels: shapes dim %d, ffn_dim %d, n_vocab %d", dim, ffn_dim, n_vocab);
    const struct llm_bench_kshape s[LLM_BENCH_N_KSHAPES] = {
        { "attn", dim, dim },
        { "ffn_up", ffn_dim, dim },
        { "ffn_down", dim, ffn_dim },
        { "output", n_vocab, dim },
    };
    memcpy(out, s, sizeof s);
    return LLM_OK;
}

llm_status llm_bench_parse_types(const char *s, enum llm_type *out, size_t cap, size_t *n)
{
    *n = 0;
    char item[32];
    for (const char *p = s;;) {
        size_t len = strcspn(p, ",");
        LLM_CHECK(len > 0 && len < sizeof item, LLM_E_INVALID, "--types: '%s' is not a list of types", s);
        LLM_CHECK(*n < cap, LLM_E_INVALID, "--types: more than %zu types", cap);
        memcpy(item, p, len);
        item[len] = 0;
        enum llm_type t;
        LLM_TRY(llm_type_parse(item, &t));
        LLM_CHECK(t != LLM_TYPE_U8 && t != LLM_TYPE_I32 && t != LLM_TYPE_U32, LLM_E_INVALID,
                  "--types: %s is not a weight type", item);
        out[(*n)++] = t;
        if (!p[len])
            return LLM_OK;
        p += len + 1;
    }
}

void llm_bench_kresult_release(struct llm_bench_kresult *r)
{
    llm_free(r->samples_ns);
    r->samples_ns = NULL;
}

llm_status llm_bench_product_cost(enum llm_type t, int64_t rows, int64_t ne0, int64_t nb,
                                  uint64_t *bytes, double *flops)
{
    uint64_t rb = llm_type_row_bytes(t, (uint64_t)ne0);
    LLM_CHECK(rows > 0 && ne0 > 0 && nb > 0 && rb && llm_mul_ok(rb, (uint64_t)rows, bytes), LLM_E_INVALID,
              "kernels: %s matrix of %lld rows of %lld", llm_type_name(t), (long long)rows, (long long)ne0);
    *flops = 2.0 * (double)rows * (double)ne0 * (double)nb;
    return LLM_OK;
}

void llm_bench_attn_cost(int64_t n_ctx, int32_t n_heads, int32_t n_kv_heads, int32_t head_dim,
                         size_t elt, uint64_t *bytes, double *flops)
{
    *bytes = 2 * (uint64_t)n_ctx * (uint64_t)n_kv_heads * (uint64_t)head_dim * elt;
    *flops = 4.0 * (double)n_heads * (double)n_ctx * (double)head_dim;
}

void llm_bench_kernel_figures(struct llm_bench_kresult *r)
{
    double ns = r->ns.mean;
    r->gbs = ns > 0 ? (double)r->bytes / ns : 0; /* bytes per ns = GB/s */
    r->gflops = ns > 0 ? r->flops / ns : 0;
    r->gbs_pct = r->roof_gbs > 0 ? 100 * r->gbs / r->roof_gbs : 0;
    r->gflops_pct = r->roof_gflops > 0 ? 100 * r->gflops / r->roof_gflops : 0;
}

void llm_bench_attention(const float *q, const float *K, const float *V, float *out, float *scores,
                         int64_t n_ctx, int32_t n_heads, int32_t n_kv_heads, int32_t hd, int32_t h0,
                         int32_t h1)
{
    int32_t group = n_heads / n_kv_heads;
    size_t stride = (size_t)n_kv_heads * (size_t)hd; // K, V: (n_ctx, n_kv_heads, hd)
    float scale = 1.0f / sqrtf((float)hd);
    for (int32_t h = h0; h < h1; h++) {
        const float *qh = q + (size_t)h * (size_t)hd;
        size_t kv = (size_t)(h / group) * (size_t)hd;
        float *sc = scores + (size_t)h * (size_t)n_ctx; // (n_ctx)
        float mx = -INFINITY;
        for (int64_t t = 0; t < n_ctx; t++) {
            const float *k = K + (size_t)t * stride + kv;
            float d = 0;
            for (int32_t i = 0; i < hd; i++)
                d += qh[i] * k[i];
            sc[t] = d * scale;
            mx = sc[t] > mx ? sc[t] : mx;
        }
        float sum = 0;
        for (int64_t t = 0; t < n_ctx; t++)
            sum += sc[t] = expf(sc[t] - mx);
        float *o = out + (size_t)h * (size_t)hd;
        memset(o, 0, (size_t)hd * sizeof *o);
        for (int64_t t = 0; t < n_ctx; t++) {
            const float *v = V + (size_t)t * stride + kv;
            float w = sc[t] / sum;
            for (int32_t i = 0; i < hd; i++)
                o[i] += w * v[i];
        }
    }
}

void llm_bench_attention_kernels(const float *q, const uint16_t *K, const uint16_t *V, float *out,
                                 float *scores, int64_t n_ctx, int32_t n_heads, int32_t n_kv_heads,
                                 int32_t hd, int32_t h0, int32_t h1)
{
    const int32_t group = n_heads / n_kv_heads, bs = 16; /* the KV cache's default block */
    const int64_t stride = (int64_t)n_kv_heads * hd;      // K, V: (n_ctx, n_kv_heads, hd)
    for (int32_t h = h0; h < h1; h++) {
        const uint16_t *Kh = K + (int64_t)(h / group) * hd, *Vh = V + (int64_t)(h / group) * hd;
        float *sc = scores + (int64_t)h * n_ctx, *o = out + (int64_t)h * hd; // (n_ctx), (hd)
        for (int64_t p0 = 0; p0 < n_ctx; p0 += bs)
            llm_vec_dots_f16(q + (int64_t)h * hd, Kh + p0 * stride, stride,
                             n_ctx - p0 < bs ? n_ctx - p0 : bs, hd, sc + p0);
        llm_vec_softmax(sc, 0, n_ctx, 1.0f / sqrtf((float)hd), 0);
        memset(o, 0, (size_t)hd * sizeof *o);
        for (int64_t p0 = 0; p0 < n_ctx; p0 += bs)
            llm_vec_axpys_f16(o, sc + p0, Vh + p0 * stride, stride, n_ctx - p0 < bs ? n_ctx - p0 : bs,
                              hd);
    }
}

/* ---- the runner ------------------------------------------------------------------ */

enum { K_MATVEC, K_MATMUL, K_ATTN };

struct job {
    int kind;
    enum llm_type t;
    const void *W;
    int x16;              // W is in matmul.h's interleaved layout
    const float *x;       // matvec (ne0), matmul (nb, ne0), attn q (n_heads, hd)
    float *y;             // matvec (rows), matmul (nb, rows), attn out (n_heads, hd)
    int64_t rows, ne0, nb;
    const uint16_t *K, *V; // fp16 (n_ctx, n_kv_heads, hd)
    float *scores;        // (n_heads, n_ctx)
    int32_t n_heads, n_kv_heads, hd;
    llm_status st[256];   // per thread
};

static void job_fn(int i, int n, void *ctx)
{
    struct job *j = ctx;
    if (j->kind == K_ATTN) {
        int32_t h0 = (int32_t)((int64_t)j->n_heads * i / n), h1 = (int32_t)((int64_t)j->n_heads * (i + 1) / n);
        llm_bench_attention_kernels(j->x, j->K, j->V, j->y, j->scores, j->rows, j->n_heads,
                                    j->n_kv_heads, j->hd, h0, h1);
        j->st[i] = LLM_OK;
        return;
    }
    int64_t r0 = j->rows * i / n, r1 = j->rows * (i + 1) / n;
    if (j->x16) { /* whole groups of 16 rows, as the CPU backend splits them */
        r0 &= ~(int64_t)15;
        r1 &= ~(int64_t)15;
        j->st[i] = j->kind == K_MATVEC
                       ? llm_matvec_x16(j->t, j->W, j->x, j->y, j->ne0, r0, r1)
                       : llm_matmul_x16(j->t, j->W, j->x, j->y, j->ne0, j->nb, j->rows, r0, r1);
        return;
    }
    if (j->kind == K_MATVEC)
        j->st[i] = llm_matvec(j->t, j->W, j->x, j->y, j->ne0, r0, r1);
    else
        j->st[i] = llm_matmul(j->t, j->W, j->x, j->y, j->ne0, j->nb, j->rows, r0, r1);
}

/* warmup + reps calls of j on pool p, into r (samples and statistics). */
static llm_status time_job(struct llm_bench_kresult *r, struct job *j, struct llm_pool *p, int reps, int warmup)
{
    int n = llm_pool_size(p);
    r->reps = reps;
    r->samples_ns = llm_malloc((size_t)reps * sizeof *r->samples_ns);
    if (!r->samples_ns)
        return LLM_E_NOMEM;
    for (int rep = -warmup; rep < reps; rep++) {
        uint64_t t0 = llm_time_ns();
        llm_pool_run(p, job_fn, j);
        uint64_t dt = llm_time_ns() - t0;
        for (int i = 0; i < n; i++)
            if (j->st[i])
                return j->st[i];
        if (rep >= 0)
            r->samples_ns[rep] = (double)dt;
    }
    LLM_TRY(llm_stats_compute(&r->ns, r->samples_ns, (size_t)reps));
    llm_bench_kernel_figures(r);
    return LLM_OK;
}

static float rand_unit(uint64_t *st)
{
    *st = *st * 6364136223846793005ull + 1442695040888963407ull;
    return (float)(*st >> 40) / (float)(1u << 24) * 2.0f - 1.0f;
}

static void fill_rand(float *x, size_t n, uint64_t *seed)
{
    for (size_t i = 0; i < n; i++)
        x[i] = rand_unit(seed);
}

struct bufs {
    void *W, *W16;        // the rows; their interleaved form (4-bit types)
    float *x, *y, *row;
};

/* Measure one type x shape at every thread count. */
static llm_status run_shape(const struct llm_bench_kspec *k, enum llm_type t, const struct llm_bench_kshape *sh,
                            struct llm_pool **pools, struct bufs *b, struct llm_bench_kresult *res, size_t *n)
{
    uint64_t bytes;
    double flops;
    LLM_TRY(llm_bench_product_cost(t, sh->rows, sh->ne0, 1, &bytes, &flops));
    size_t rb = (size_t)llm_type_row_bytes(t, (uint64_t)sh->ne0);
    uint64_t seed = 42;
    for (int64_t r = 0; r < sh->rows; r++) {
        fill_rand(b->row, (size_t)sh->ne0, &seed);
        LLM_TRY(llm_quantize_row(t, b->row, (char *)b->W + (size_t)r * rb, sh->ne0));
    }
    fill_rand(b->x, (size_t)(k->nb * sh->ne0), &seed);
    /* the layout llm-run would use (model/model.c interleaves these) */
    const int x16 = llm_x16_enabled() && llm_x16_ok(t, sh->ne0, sh->rows);
    if (x16) {
        LLM_TRY(llm_x16_pack(t, b->W, sh->ne0, sh->rows, b->W16));
    }
    for (size_t ti = 0; ti < k->n_threads; ti++)
        for (int kind = K_MATVEC; kind <= K_MATMUL; kind++) {
            struct llm_bench_kresult *r = &res[(*n)++];
            int64_t nb = kind == K_MATVEC ? 1 : k->nb;
            snprintf(r->kernel, sizeof r->kernel, "%s", kind == K_MATVEC ? "matvec" : "matmul");
            snprintf(r->type, sizeof r->type, "%s%s", llm_type_name(t), x16 ? "/x16" : "");
            snprintf(r->shape, sizeof r->shape, "%s", sh->name);
            r->rows = sh->rows, r->cols = sh->ne0, r->batch = nb;
            r->n_threads = k->threads[ti];
            r->roof_gbs = k->roof_gbs[ti], r->roof_gflops = k->roof_gflops[ti];
            LLM_TRY(llm_bench_product_cost(t, sh->rows, sh->ne0, nb, &r->bytes, &r->flops));
            struct job j = { .kind = kind, .t = t, .W = x16 ? b->W16 : b->W, .x16 = x16,
                             .x = b->x, .y = b->y,
                             .rows = sh->rows, .ne0 = sh->ne0, .nb = nb };
            LLM_TRY(time_job(r, &j, pools[ti], k->reps, k->warmup));
        }
    return LLM_OK;
}

static llm_status run_attn(const struct llm_bench_kspec *k, struct llm_pool **pools, struct llm_bench_kresult *res,
                           size_t *n)
{
    size_t kv = (size_t)k->n_ctx * (size_t)k->n_kv_heads * (size_t)k->head_dim;
    size_t qn = (size_t)k->n_heads * (size_t)k->head_dim;
    /* an fp16 cache, llm-run's default */
    uint16_t *K = llm_malloc(kv * sizeof *K), *V = llm_malloc(kv * sizeof *V);
    float *q = llm_malloc(qn * sizeof *q), *o = llm_malloc(qn * sizeof *o);
    float *sc = llm_malloc((size_t)k->n_heads * (size_t)k->n_ctx * sizeof *sc);
    float *f = llm_malloc(kv * sizeof *f);
    llm_status s = K && V && q && o && sc && f ? LLM_OK : LLM_E_NOMEM;
    uint64_t seed = 7;
    if (!s) {
        fill_rand(f, kv, &seed);
        llm_vec_to_f16(f, K, (int64_t)kv);
        fill_rand(f, kv, &seed);
        llm_vec_to_f16(f, V, (int64_t)kv);
        fill_rand(q, qn, &seed);
    }
    llm_free(f);
    for (size_t ti = 0; ti < k->n_threads && !s; ti++) {
        struct llm_bench_kresult *r = &res[(*n)++];
        snprintf(r->kernel, sizeof r->kernel, "attn");
        snprintf(r->type, sizeof r->type, "f16");
        snprintf(r->shape, sizeof r->shape, "attn");
        r->rows = k->n_ctx, r->cols = k->head_dim, r->batch = k->n_heads;
        r->n_kv_heads = k->n_kv_heads;
        r->n_threads = k->threads[ti];
        r->roof_gbs = k->roof_gbs[ti], r->roof_gflops = k->roof_gflops[ti];
        llm_bench_attn_cost(k->n_ctx, k->n_heads, k->n_kv_heads, k->head_dim, sizeof(uint16_t),
                            &r->bytes, &r->flops);
        struct job j = { .kind = K_ATTN, .x = q, .y = o, .K = K, .V = V, .scores = sc, .rows = k->n_ctx,
                         .n_heads = k->n_heads, .n_kv_heads = k->n_kv_heads, .hd = k->head_dim };
        s = time_job(r, &j, pools[ti], k->reps, k->warmup);
    }
    llm_free(K);
    llm_free(V);
    llm_free(q);
    llm_free(o);
    llm_free(sc);
    return s;
}

llm_status llm_bench_kernels(const struct llm_bench_kspec *k, struct llm_bench_kresult **out, size_t *n)
{
    *out = NULL;
    *n = 0;
    LLM_CHECK(k->reps >= 1 && k->warmup >= 0 && k->nb >= 1 && k->n_threads >= 1 && k->n_ctx >= 1 &&
                  k->n_heads >= 1 && k->n_kv_heads >= 1 && k->head_dim >= 1 && k->n_heads % k->n_kv_heads == 0,
              LLM_E_INVALID, "kernels: bad plan (%d reps, %lld KV tokens, %d/%d heads of %d)", k->reps,
              (long long)k->n_ctx, k->n_heads, k->n_kv_heads, k->head_dim);
    for (size_t i = 0; i < k->n_threads; i++)
        LLM_CHECK(k->threads[i] >= 1 && k->threads[i] <= 256, LLM_E_INVALID, "kernels: %d threads", k->threads[i]);
    size_t total = (k->n_types * LLM_BENCH_N_KSHAPES * 2 + 1) * k->n_threads;
    struct llm_bench_kresult *res = llm_calloc(total, sizeof *res);
    struct llm_pool **pools = llm_calloc(k->n_threads, sizeof *pools);
    struct bufs b = { 0 };
    /* the buffers of the largest shape serve every shape */
    uint64_t w_max = 0;
    int64_t ne0_max = 0, rows_max = 0;
    llm_status s = res && pools ? LLM_OK : LLM_E_NOMEM;
    for (size_t si = 0; si < LLM_BENCH_N_KSHAPES && !s; si++) {
        const struct llm_bench_kshape *sh = &k->shapes[si];
        for (size_t ti = 0; ti < k->n_types && !s; ti++) {
            uint64_t bytes;
            double fl;
            if (!(s = llm_bench_product_cost(k->types[ti], sh->rows, sh->ne0, k->nb, &bytes, &fl)))
                w_max = bytes > w_max ? bytes : w_max;
        }
        ne0_max = sh->ne0 > ne0_max ? sh->ne0 : ne0_max;
        rows_max = sh->rows > rows_max ? sh->rows : rows_max;
    }
    if (!s) {
        b.W = llm_malloc((size_t)w_max);
        b.W16 = llm_malloc((size_t)w_max);
        b.x = llm_malloc((size_t)(k->nb * ne0_max) * sizeof(float));    // (nb, ne0)
        b.y = llm_malloc((size_t)(k->nb * rows_max) * sizeof(float));   // (nb, rows)
        b.row = llm_malloc((size_t)ne0_max * sizeof(float));            // (ne0)
        if (!b.W || !b.W16 || !b.x || !b.y || !b.row)
            s = LLM_E_NOMEM;
    }
    for (size_t i = 0; i < k->n_threads && !s; i++)
        s = llm_pool_new(&pools[i], k->threads[i]);
    size_t got = 0;
    for (size_t ti = 0; ti < k->n_types && !s; ti++)
        for (size_t si = 0; si < LLM_BENCH_N_KSHAPES && !s; si++)
            s = run_shape(k, k->types[ti], &k->shapes[si], pools, &b, res, &got);
    if (!s)
        s = run_attn(k, pools, res, &got);
    for (size_t i = 0; pools && i < k->n_threads; i++)
        if (pools[i])
            llm_pool_free(pools[i]);
    llm_free(pools);
    llm_free(b.W);
    llm_free(b.W16);
    llm_free(b.x);
    llm_free(b.y);
    llm_free(b.row);
    if (s) {
        for (size_t i = 0; res && i < total; i++)
            llm_bench_kresult_release(&res[i]);
        llm_free(res);
        return s;
    }
    *out = res;
    *n = got;
    return LLM_OK;
}
