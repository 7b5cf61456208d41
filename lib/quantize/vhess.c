/* vhess.c: see vhess.h */
#include <string.h>

#include "../common/alloc.h"
#include "vhess.h"

llm_status llm_q_gram_add(llm_qmm_fn mm, void *ctx, double *sum, const float *A, const float *B,
                          int64_t c, int64_t len, int lower, float *y)
{
    for (int64_t b0 = 0; b0 < c; b0 += LLM_Q_GRAM_BLOCK) {
        const int64_t b1 = c - b0 < LLM_Q_GRAM_BLOCK ? c : b0 + LLM_Q_GRAM_BLOCK;
        const int64_t w = lower ? b1 : c;
        /* y (b1 - b0, w) = A[b0:b1] B[0:w]^T */
        LLM_TRY(mm(ctx, B, w, len, A + b0 * len, (int32_t)(b1 - b0), y));
        for (int64_t i = b0; i < b1; i++) {
            const float *yi = y + (i - b0) * w;
            double *s = sum + i * c;
            for (int64_t j = 0; j < (lower ? i + 1 : c); j++)
                s[j] += yi[j];
        }
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
 * (n_heads, n, pl). */
static void gather(const float *probs, int64_t hq0, int64_t hpg, int32_t n, int64_t pl,
                   int32_t i0, int64_t b1, float *S)
{
    const int64_t m = n - i0, K = hpg * m;
    for (int64_t h = 0; h < hpg; h++) {
        const float *P = probs + (hq0 + h) * n * pl;
        /* in tiles of 16 queries: each reads 16 rows, writes 16-float runs */
        for (int32_t a = i0; a < n; a += 16) {
            const int32_t a1 = n - a < 16 ? n : a + 16;
            for (int64_t j = 0; j < b1; j++)
                for (int32_t i = a; i < a1; i++)
                    S[j * K + h * m + (i - i0)] = P[(int64_t)i * pl + j];
        }
    }
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
        gather(probs[0], hq0, hpg, n, pl, i0, b1, v->S);
        /* y (b1 - b0, b1) = S[b0:b1] S[0:b1]^T: M's rows b0..b1 up to the diagonal */
        LLM_TRY(mm(ctx, v->S, b1, K, v->S + b0 * K, (int32_t)(b1 - b0), v->y));
        for (int64_t r = b0; r < b1; r++)
            for (int64_t k = 0; k <= r; k++)
                v->M[r * len + k] += v->y[(r - b0) * b1 + k];
        if (!v->CT)
            continue;
        /* y (b1 - b0, pl) = S[b0:b1] Sf^T: CT's rows b0..b1, every float-side key */
        gather(probs[1], hq0, hpg, n, pl, i0, pl, v->Sf);
        LLM_TRY(mm(ctx, v->Sf, pl, K, v->S + b0 * K, (int32_t)(b1 - b0), v->y));
        for (int64_t r = b0; r < b1; r++)
            for (int64_t k = 0; k < pl; k++)
                v->CT[r * len + k] += v->y[(r - b0) * pl + k];
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
    LLM_TRY(llm_q_gram_add(mm, ctx, sum, XT, v->Z, dim, len, 1, v->y));
    if (v->CT) {
        /* U (dim, len) = X_f^T C - X^T M; dsum += U X */
        LLM_TRY(mm(ctx, v->CT, len, len, XfT, (int32_t)dim, v->U));
        for (int64_t i = 0; i < dim * len; i++)
            v->U[i] -= v->Z[i];
        LLM_TRY(llm_q_gram_add(mm, ctx, dsum, v->U, XT, dim, len, 0, v->y));
        memset(v->CT, 0, (size_t)(len * len) * sizeof(float));
    }
    memset(v->M, 0, (size_t)(len * len) * sizeof(float));
    return LLM_OK;
}
