/* vhess.c: see vhess.h */
#include <string.h>

#include "../common/alloc.h"
#include "vhess.h"
#include "../ops/vec.h"

static void run(llm_qpar_fn par, void *ctx, void (*fn)(int, int, void *), void *arg)
{
    if (par)
        par(ctx, fn, arg);
    else
        fn(0, 1, arg);
}

/* rows [r0, r1) of a matrix (ld) += rows of y (w floats each, from r0):
 * the first r + 1 of row r when lower, else n; into doubles (d) or floats
 * (f). Thread i takes an equal share of the rows. */
struct acc_job {
    double *d;
    float *f;
    const float *y;
    int64_t r0, r1, ld, w, n;
    int lower;
};

/* (LLM_VEC_O3: the rows' sums vectorized, each element's the same) */
LLM_VEC_O3 static void acc_run(int i, int nth, void *arg)
{
    const struct acc_job *J = arg;
    const int64_t rows = J->r1 - J->r0;
    for (int64_t r = J->r0 + rows * i / nth; r < J->r0 + rows * (i + 1) / nth; r++) {
        const float *yr = J->y + (r - J->r0) * J->w;
        const int64_t n = J->lower ? r + 1 : J->n;
        if (J->d) {
            double *s = J->d + r * J->ld;
            for (int64_t k = 0; k < n; k++)
                s[k] += yr[k];
        } else {
            float *s = J->f + r * J->ld;
            for (int64_t k = 0; k < n; k++)
                s[k] += yr[k];
        }
    }
}

llm_status llm_q_gram_add(llm_qmm_fn mm, llm_qpar_fn par, void *ctx, double *sum, const float *A,
                          const float *B, int64_t c, int64_t len, int lower, float *y)
{
    for (int64_t b0 = 0; b0 < c; b0 += LLM_Q_GRAM_BLOCK) {
        const int64_t b1 = c - b0 < LLM_Q_GRAM_BLOCK ? c : b0 + LLM_Q_GRAM_BLOCK;
        const int64_t w = lower ? b1 : c;
        /* y (b1 - b0, w) = A[b0:b1] B[0:w]^T */
        LLM_TRY(mm(ctx, B, w, len, A + b0 * len, (int32_t)(b1 - b0), y));
        struct acc_job J = { .d = sum, .y = y, .r0 = b0, .r1 = b1, .ld = c, .w = w, .n = c,
                             .lower = lower };
        run(par, ctx, acc_run, &J);
    }
    return LLM_OK;
}

llm_status llm_vhess_init(struct llm_vhess *v, int64_t len, int64_t dim, int64_t hpg, int64_t nb,
                          int cross)
{
    memset(v, 0, sizeof *v);
    v->len = len, v->dim = dim, v->hpg = hpg, v->nb = nb;
    const size_t ll = (size_t)(len * len), dl = (size_t)(dim * len), sk = (size_t)(len * hpg * nb);
    const size_t ny = (size_t)LLM_Q_GRAM_BLOCK * (size_t)(len > dim ? len : dim);
    v->M = llm_calloc(ll, sizeof(float));
    v->S = llm_malloc(sk * sizeof(float));
    v->Z = llm_malloc(dl * sizeof(float));
    v->y = llm_malloc(ny * sizeof(float));
    int ok = v->M && v->S && v->Z && v->y;
    if (cross) {
        v->CT = llm_calloc(ll, sizeof(float));
        v->Sf = llm_malloc(sk * sizeof(float));
        v->U = llm_malloc(dl * sizeof(float));
        ok = ok && v->CT && v->Sf && v->U;
    }
    if (!ok) {
        llm_vhess_free(v);
        return LLM_E_NOMEM;
    }
    return LLM_OK;
}

void llm_vhess_free(struct llm_vhess *v)
{
    llm_free(v->M), llm_free(v->CT), llm_free(v->S), llm_free(v->Sf);
    llm_free(v->Z), llm_free(v->U), llm_free(v->y);
    memset(v, 0, sizeof *v);
}

/* S (b1, hpg * m) with S[j][h * m + (i - i0)] = probs[hq0 + h][i][j] for
 * keys j < b1 and the chunk's queries i0 <= i < n (m = n - i0); probs
 * (n_heads, n, pl). Thread i of nth takes an equal share of the keys. */
struct gather_job {
    const float *probs;
    int64_t hq0, hpg, pl, b1;
    int32_t n, i0;
    float *S;
};

static void gather_run(int t, int nth, void *arg)
{
    const struct gather_job *G = arg;
    const int64_t m = G->n - G->i0, K = G->hpg * m, j0 = G->b1 * t / nth, j1 = G->b1 * (t + 1) / nth;
    for (int64_t h = 0; h < G->hpg; h++) {
        const float *P = G->probs + (G->hq0 + h) * G->n * G->pl;
        llm_vec_transpose(P + (int64_t)G->i0 * G->pl + j0, G->pl, m, j1 - j0,
                          G->S + j0 * K + h * m, K);
    }
}

static void gather(const struct llm_vhess *v, void *ctx, const float *probs, int64_t hq0,
                   int32_t n, int64_t pl, int32_t i0, int64_t b1, float *S)
{
    struct gather_job G = { probs, hq0, v->hpg, pl, b1, n, i0, S };
    run(v->par, ctx, gather_run, &G);
}

llm_status llm_vhess_add(struct llm_vhess *v, llm_qmm_fn mm, void *ctx, float *const probs[2],
                         int64_t hq0, int32_t off, int32_t n)
{
    const int64_t len = v->len, pl = off + n, hpg = v->hpg;
    /* a key j is reached only by queries i >= j - off: a block of keys
     * [b0, b1) by the queries from b0 - off on */
    for (int64_t b0 = 0; b0 < pl; b0 += LLM_Q_GRAM_BLOCK) {
        const int64_t b1 = pl - b0 < LLM_Q_GRAM_BLOCK ? pl : b0 + LLM_Q_GRAM_BLOCK;
        const int32_t i0 = b0 > off ? (int32_t)(b0 - off) : 0;
        const int64_t K = hpg * (n - i0);
        gather(v, ctx, probs[0], hq0, n, pl, i0, b1, v->S);
        /* y (b1 - b0, b1) = S[b0:b1] S[0:b1]^T: M's rows b0..b1 up to the diagonal */
        LLM_TRY(mm(ctx, v->S, b1, K, v->S + b0 * K, (int32_t)(b1 - b0), v->y));
        struct acc_job J = { .f = v->M, .y = v->y, .r0 = b0, .r1 = b1, .ld = len, .w = b1,
                             .lower = 1 };
        run(v->par, ctx, acc_run, &J);
        if (!v->CT)
            continue;
        /* y (b1 - b0, pl) = S[b0:b1] Sf^T: CT's rows b0..b1, every float-side key */
        gather(v, ctx, probs[1], hq0, n, pl, i0, pl, v->Sf);
        LLM_TRY(mm(ctx, v->Sf, pl, K, v->S + b0 * K, (int32_t)(b1 - b0), v->y));
        struct acc_job C = { .f = v->CT, .y = v->y, .r0 = b0, .r1 = b1, .ld = len, .w = pl,
                             .n = pl };
        run(v->par, ctx, acc_run, &C);
    }
    return LLM_OK;
}

llm_status llm_vhess_window(struct llm_vhess *v, llm_qmm_fn mm, void *ctx, const float *XT,
                            const float *XfT, double *sum, double *dsum)
{
    const int64_t len = v->len, dim = v->dim;
    for (int64_t r = 0; r < len; r++) /* M's upper half from its lower */
        for (int64_t k = r + 1; k < len; k++)
            v->M[r * len + k] = v->M[k * len + r];
    /* Z (dim, len) = (M X)^T = X^T M */
    LLM_TRY(mm(ctx, v->M, len, len, XT, (int32_t)dim, v->Z));
    LLM_TRY(llm_q_gram_add(mm, v->par, ctx, sum, XT, v->Z, dim, len, 1, v->y));
    if (v->CT) {
        /* U (dim, len) = X_f^T C - X^T M; dsum += U X */
        LLM_TRY(mm(ctx, v->CT, len, len, XfT, (int32_t)dim, v->U));
        for (int64_t i = 0; i < dim * len; i++)
            v->U[i] -= v->Z[i];
        LLM_TRY(llm_q_gram_add(mm, v->par, ctx, dsum, v->U, XT, dim, len, 0, v->y));
        memset(v->CT, 0, (size_t)(len * len) * sizeof(float));
    }
    memset(v->M, 0, (size_t)(len * len) * sizeof(float));
    return LLM_OK;
}
