/* gptq.c: GPTQ on one weight matrix (gptq.h; quantization.md 1.1 and 1.3).
 *
 * The steps are the reference's (IST-DASLab/gptq fasterquant, AutoGPTQ's
 * static groups), in its order:
 *   per-channel parameters from the untouched W (its find_params(W) before
 *   anything else); dead columns (diag(H) == 0: H_ii = 1, W[:, i] = 0);
 *   static groups from W; act-order permutation (argsort of diag(H)
 *   descending, stable: ties keep the lower column first); damping
 *   (percdamp * mean(diag(H)) on the diagonal); the upper Cholesky factor U
 *   of H^-1; lazy batches of block_size columns with the rank-1 updates
 *   inside a block and one product W[:, i2:] -= Err1 U[i1:i2, i2:] after it.
 *
 * Two points of the reference that are easy to get wrong:
 *  - A dynamic group starting at column c takes its parameters from W as it
 *    stood at the start of the lazy batch containing c (the reference reads
 *    W, not the batch copy W1, and W changes only between batches). With
 *    groups shorter than the batch, a group that starts inside a batch does
 *    not see the updates made earlier in that batch. We compute every group
 *    starting in a batch before the batch, which is the same thing.
 *  - Codes are taken on the stored grid (fp16 d and m, grid.h), and the
 *    error fed back is w - Q with Q the value the file gives back.
 *
 * U comes from one Cholesky factorization instead of the reference's three
 * steps (cholesky, cholesky_inverse, cholesky upper): with J the reversal
 * permutation, L = chol(J H J) gives H = V V^T with V = J L J upper, and
 * U = V^-1 = J L^-1 J is upper with U^T U = H^-1, the same (unique) factor.
 * It is computed in double; the updates run in float32 as the reference's.
 *
 * Every row is independent once U is known (the group parameters are per
 * row too), so threads take contiguous ranges of rows through all batches
 * with no synchronisation.
 *
 * The GGUF block types (Q5_0 .. IQ4_XS, quant/kquants.h) are grids too:
 * a block (32 or 256 columns) takes its scales, sub-block scales and
 * minimums from the round-to-nearest quantizer of its type, run on W as
 * it stands when GPTQ reaches the block (or on the original W with static
 * groups), with diag(H) as its importance (llama.cpp's imatrix); its codes
 * are then chosen column by column on that fixed grid, the errors fed
 * back, and written into the block in place (llm_kq_set_code).
 * llm_gptq_params.rtn_only skips the feedback: round to nearest weighted
 * by diag(H), llama.cpp's quantization with an importance matrix.
 *
 * GPTAQ (llm_gptq_params.dxxt; Li et al. 2025, the GPTAQ repository's
 * fasterquant) adds to each rank-1 update the term x_i P[i][:], x_i the
 * column's value just before rounding, with P = alpha triu1(D U^T) U. The
 * reference's lazy batch multiplies P by the batch after rounding (its W1
 * then holds Q), so its result depends on block_size; here the batch
 * keeps the pre-rounding values (npre), which gives the unbatched result.
 */
#include "gptq.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../common/alloc.h"
#include "../ops/matmul.h" // llm_pool
#include "../quant/grid.h"
#include "../quant/kquants.h"
#include "../quant/quant.h"
#include "kern.h"
#include "linalg.h"

#define DAMP_RETRIES 10
#define DAMP_STEP 0.01

void llm_gptq_params_init(struct llm_gptq_params *p, enum llm_type type)
{
    memset(p, 0, sizeof *p);
    p->type = type;
    p->damp = 0.01f;
    p->block_size = 128;
    p->n_threads = 1;
}

// ----------------------------------------------------------------------------
// the row-parallel work

struct job {
    const struct llm_qkern *K;
    const struct llm_qgrid *g;
    float *W;                /* (rows, cols), processing order */
    int64_t rows, cols;
    const float *U;          /* (cols, cols) upper: U^T U = H^-1 */
    uint8_t *codes;          /* (rows, cols) processing order */
    struct llm_qgroup *gp;   /* (rows, ng) */
    int64_t G, ng, bs;
    int dynamic, statics;
    enum llm_qrule rule;     /* the group rule (rule_of) */
    float mse;               /* llm_gptq_params.mse */
    const int32_t *perm;     /* (cols) original column of each processed column */
    float *err;              /* (rows, bs) */
    const float *P;          /* (cols, cols) strictly upper, processing order: GPTAQ's
                                correction, or NULL */
    float *npre;             /* (rows, bs) with P: minus each column's value before it
                                was quantized */
    /* the GGUF block types (kq): the packed rows, built in place, and each
     * 16 columns' canonical scale and minimum (rows, cols / 16) */
    enum llm_type kt;
    uint8_t *kout;
    uint64_t krb;
    float *ks, *km;
    const float *imp;        /* (cols) diag(H), the blocks' importance */
    /* statistics */
    const float *H0;         /* (cols, cols) original H */
    const float *D1, *D2;    /* (rows, cols) W0 - RTN, W0 - Q */
    double *q1, *q2;         /* (rows) their quadratic forms */
};

/* A group's scale and zero: the reference's find_params, or the type's
 * round-to-nearest rule (llm_gptq_params.rtn_grid); llm_qgrid_group_mse
 * then searches the range when mse > 0. */
static enum llm_qrule rule_of(const struct llm_gptq_params *p)
{
    return p->rtn_grid ? LLM_QRULE_RTN : LLM_QRULE_GPTQ;
}

static void rows_of(int i, int n, int64_t rows, int64_t *r0, int64_t *r1)
{
    *r0 = rows * i / n;
    *r1 = rows * (i + 1) / n;
}

/* Block k of row r of a GGUF type: scales fitted to x (G values), the
 * codes rounded to nearest; its canonical scales into ks, km. */
static void kq_fit(const struct job *J, int64_t r, int64_t k, const float *x)
{
    const struct llm_type_traits *tr = llm_type_traits(J->kt);
    uint8_t *blk = J->kout + (uint64_t)r * J->krb + (uint64_t)k * tr->block_bytes;
    int16_t c[256];
    llm_kq_quantize_row(J->kt, x, blk, J->G, J->imp + k * J->G);
    llm_kq_unpack(J->kt, blk, c, J->ks + (r * J->cols + k * J->G) / 16,
                  J->km + (r * J->cols + k * J->G) / 16);
}

static void gptq_rows(int ti, int nt, void *ctx)
{
    const struct job *J = ctx;
    const int64_t n = J->cols, bs = J->bs, G = J->G;
    int64_t r0, r1;
    rows_of(ti, nt, J->rows, &r0, &r1);
    if (r0 == r1)
        return;
    for (int64_t i1 = 0; i1 < n; i1 += bs) {
        const int64_t i2 = n - i1 < bs ? n : i1 + bs;
        if (J->dynamic)
            for (int64_t c = (i1 + G - 1) / G * G; c < i2; c += G)
                for (int64_t r = r0; r < r1; r++) {
                    if (J->kout)
                        kq_fit(J, r, c / G, J->W + r * n + c);
                    else
                        llm_qgrid_group_mse(J->g, J->rule, J->mse, J->W + r * n + c,
                                            n - c < G ? n - c : G, &J->gp[r * J->ng + c / G]);
                }
        for (int64_t r = r0; r < r1; r++) {
            float *w = J->W + r * n;
            float *e = J->err + r * bs;
            float *np = J->npre ? J->npre + r * bs : NULL;
            uint8_t *cd = J->codes + r * n;
            const struct llm_qgroup *gp = J->gp + r * J->ng;
            for (int64_t i = i1; i < i2; i++) {
                const float x = w[i];
                int c;
                float v;
                if (J->kout) { /* the column's place in its block, original order */
                    const int64_t o = J->statics ? J->perm[i] : i, g16 = (r * n + o) / 16;
                    c = llm_kq_nearest(J->kt, J->ks[g16], J->km[g16], x);
                    v = J->ks[g16] * (float)c + J->km[g16];
                    llm_kq_set_code(J->kt, J->kout + (uint64_t)r * J->krb +
                                               (uint64_t)(o / G) * llm_type_traits(J->kt)->block_bytes,
                                    (int)(o % G), c);
                } else {
                    const struct llm_qgroup *q = &gp[(J->statics ? J->perm[i] : i) / G];
                    c = llm_qgrid_code(J->g, q, x);
                    v = llm_qgrid_value(J->g, q, c);
                }
                const float *u = J->U + i * n;
                const float ei = (x - v) / u[i];
                cd[i] = (uint8_t)c;
                w[i] = v;
                e[i - i1] = ei;
                J->K->axpy_sub(w + i + 1, u + i + 1, ei, i2 - i - 1);
                if (np) { /* w[j] += x P[i][j]: x is the value before rounding */
                    J->K->axpy_sub(w + i + 1, J->P + i * n + i + 1, -x, i2 - i - 1);
                    np[i - i1] = -x;
                }
            }
        }
        if (i2 < n)
            J->K->gemm_sub(r1 - r0, n - i2, i2 - i1, J->err + r0 * bs, bs, J->U + i1 * n + i2,
                           n, J->W + r0 * n + i2, n);
        if (i2 < n && J->P)
            J->K->gemm_sub(r1 - r0, n - i2, i2 - i1, J->npre + r0 * bs, bs, J->P + i1 * n + i2,
                           n, J->W + r0 * n + i2, n);
    }
}

/* Blocks of 64 rows of H (400 KB at 1536 columns) stay in cache while
 * every row of W passes. */
#define STATS_BLOCK 64
static void stats_rows(int ti, int nt, void *ctx)
{
    const struct job *J = ctx;
    const int64_t n = J->cols;
    int64_t r0, r1;
    rows_of(ti, nt, J->rows, &r0, &r1);
    for (int64_t r = r0; r < r1; r++)
        J->q1[r] = J->q2[r] = 0.0;
    for (int64_t i0 = 0; i0 < n; i0 += STATS_BLOCK) {
        const int64_t i1 = n - i0 < STATS_BLOCK ? n : i0 + STATS_BLOCK;
        for (int64_t r = r0; r < r1; r += 2) {
            const int64_t rb = r + 1 < r1 ? r + 1 : r;
            const float *x[4] = { J->D1 + r * n, J->D2 + r * n, J->D1 + rb * n, J->D2 + rb * n };
            double q[4] = { J->q1[r], J->q2[r], J->q1[rb], J->q2[rb] };
            J->K->quad4(J->H0, n, i0, i1, x, q);
            J->q1[r] = q[0], J->q2[r] = q[1];
            J->q1[rb] = q[2], J->q2[rb] = q[3];
        }
    }
}

/* GPTAQ's correction P = alpha triu1(D U^T) U, D the asymmetry term in
 * processing order, by rows of P (each row is independent). U is upper, so
 * row b of U starts at column b: (D U^T)[a][b] = D[a][b:] . U[b][b:], and
 * row a of P sums M[a][b] U[b][:] over b > a. Row a costs about (n - a)^2,
 * so threads take every nt-th row rather than a contiguous range. */
struct pjob {
    const float *D;      /* (n, n) original order */
    const int32_t *perm; /* (n) */
    const float *U;      /* (n, n) upper */
    float *P;            /* (n, n) out */
    int64_t n;
    double alpha;
    double *scratch;     /* (threads, 2 n) */
};

static void asym_rows(int ti, int nt, void *ctx)
{
    struct pjob *J = ctx;
    const int64_t n = J->n;
    double *d = J->scratch + (int64_t)ti * 2 * n; /* (n) row of D */
    double *p = d + n;                             /* (n) row of P */
    for (int64_t a = ti; a < n; a += nt) {
        const float *dr = J->D + (int64_t)J->perm[a] * n;
        for (int64_t k = 0; k < n; k++)
            d[k] = dr[J->perm[k]];
        memset(p, 0, (size_t)n * sizeof *p);
        for (int64_t b = a + 1; b < n; b++) {
            const float *u = J->U + b * n;
            double m = 0.0;
            for (int64_t k = b; k < n; k++)
                m += d[k] * u[k];
            for (int64_t j = b; j < n; j++)
                p[j] += m * u[j];
        }
        for (int64_t j = 0; j < n; j++)
            J->P[a * n + j] = (float)(J->alpha * p[j]);
    }
}

static void run(struct llm_pool *pool, void (*fn)(int, int, void *), void *ctx)
{
    if (pool)
        llm_pool_run(pool, fn, ctx);
    else
        fn(0, 1, ctx);
}

// ----------------------------------------------------------------------------
// setup

struct dsort {
    float d;
    int32_t i;
};

static int by_diag_desc(const void *a_, const void *b_)
{
    const struct dsort *a = a_, *b = b_;
    if (a->d != b->d)
        return a->d > b->d ? -1 : 1;
    return (a->i > b->i) - (a->i < b->i);
}

llm_status llm_gptq_order(const float *d, int64_t stride, int64_t n, int32_t *order)
{
    struct dsort *ds = llm_malloc((size_t)n * sizeof *ds);
    if (!ds)
        return LLM_E_NOMEM;
    for (int64_t i = 0; i < n; i++)
        ds[i] = (struct dsort){ d[i * stride], (int32_t)i };
    qsort(ds, (size_t)n, sizeof *ds, by_diag_desc);
    for (int64_t i = 0; i < n; i++)
        order[i] = ds[i].i;
    llm_free(ds);
    return LLM_OK;
}

/* A group's parameters before any update: the fixed scale of a per-tensor
 * fp8 grid, or the rule and the search mse. */
static void start_params(const struct llm_gptq_params *p, enum llm_qrule rule, float mse,
                         const struct llm_qgrid *g, const float *x, int64_t n,
                         struct llm_qgroup *q)
{
    if (p->scale > 0.0f)
        llm_qgrid_group_set(g, p->scale, 0, q);
    else
        llm_qgrid_group_mse(g, rule, mse, x, n, q);
}

/* W0 - RTN(W0) on the grid's contiguous groups (one group: the whole row);
 * the GGUF block types: their quantizer with importance imp (cols). */
static llm_status rtn_diff(const struct llm_gptq_params *p, const struct llm_qgrid *g,
                           const float *W0, int64_t rows, int64_t cols, int64_t G,
                           const float *imp, float *D)
{
    if (llm_kq_type(p->type)) {
        const uint64_t rb = llm_type_row_bytes(p->type, (uint64_t)cols);
        uint8_t *q = llm_malloc((size_t)rb);
        if (!q)
            return LLM_E_NOMEM;
        for (int64_t r = 0; r < rows; r++) {
            llm_kq_quantize_row(p->type, W0 + r * cols, q, cols, imp);
            llm_dequantize_row(p->type, q, D + r * cols, cols);
            for (int64_t j = 0; j < cols; j++)
                D[r * cols + j] = W0[r * cols + j] - D[r * cols + j];
        }
        llm_free(q);
        return LLM_OK;
    }
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c0 = 0; c0 < cols; c0 += G) {
            const int64_t len = cols - c0 < G ? cols - c0 : G;
            const float *w = W0 + r * cols + c0;
            struct llm_qgroup q;
            start_params(p, LLM_QRULE_GPTQ, 0.0f, g, w, len, &q);
            for (int64_t j = 0; j < len; j++)
                D[r * cols + c0 + j] = w[j] - llm_qgrid_value(g, &q, llm_qgrid_code(g, &q, w[j]));
        }
    return LLM_OK;
}

static int all_finite(const float *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(x[i]))
            return 0;
    return 1;
}

static void *alloc_n(int64_t count, size_t size, int *fail)
{
    uint64_t bytes;
    if (count <= 0 || !llm_mul_ok((uint64_t)count, size, &bytes) || bytes > SIZE_MAX) {
        *fail = 1;
        return NULL;
    }
    void *p = llm_malloc((size_t)bytes);
    if (!p)
        *fail = 1;
    return p;
}

/* (w - q) H (w - q)^T for one row, d = w - q (n) */
static double quad_form(const float *H, const float *d, int64_t n)
{
    double e = 0.0;
    for (int64_t i = 0; i < n; i++) {
        double hi = 0.0;
        for (int64_t j = 0; j < n; j++)
            hi += (double)H[i * n + j] * d[j];
        e += hi * d[i];
    }
    return e;
}

struct rtn_job {
    const struct llm_gptq_params *p;
    float *W;
    const float *H, *imp;
    uint8_t *out;
    int64_t rows, n;
    int stats;
    double err[64], err0[64];
    llm_status s[64];
};

static void rtn_rows(int ti, int nt, void *ctx)
{
    struct rtn_job *J = ctx;
    const int64_t n = J->n, r0 = J->rows * ti / nt, r1 = J->rows * (ti + 1) / nt;
    const uint64_t rb = llm_type_row_bytes(J->p->type, (uint64_t)n);
    float *d = llm_malloc((size_t)n * sizeof(float));
    uint8_t *q0 = llm_malloc((size_t)rb);
    llm_status s = d && q0 ? LLM_OK : LLM_E_NOMEM;
    double err = 0.0, err0 = 0.0;
    for (int64_t r = r0; r < r1 && !s; r++) {
        float *w = J->W + r * n;
        uint8_t *q = J->out + (uint64_t)r * rb;
        if (J->stats) { /* the same without the importance */
            if ((s = llm_kq_quantize_row(J->p->type, w, q0, n, NULL)) != LLM_OK ||
                (s = llm_dequantize_row(J->p->type, q0, d, n)) != LLM_OK)
                break;
            for (int64_t i = 0; i < n; i++)
                d[i] = w[i] - d[i];
            err0 += quad_form(J->H, d, n);
        }
        if ((s = llm_kq_quantize_row(J->p->type, w, q, n, J->imp)) != LLM_OK ||
            (s = llm_dequantize_row(J->p->type, q, d, n)) != LLM_OK)
            break;
        if (J->stats) {
            for (int64_t i = 0; i < n; i++)
                w[i] -= d[i];
            err += quad_form(J->H, w, n);
        }
        memcpy(w, d, (size_t)n * sizeof *w);
    }
    llm_free(d), llm_free(q0);
    J->err[ti] = err, J->err0[ti] = err0, J->s[ti] = s;
}

/* llm_gptq_params.rtn_only: each row rounded to nearest by its GGUF type's
 * quantizer with diag(H) as the importance; W becomes the values. st:
 * err_gptq the output error tr((W - Q) H (W - Q)^T) / rows, err_rtn that
 * of the same quantizer without the importance. Rows in parallel. */
static llm_status rtn_importance(const struct llm_gptq_params *p, float *W, int64_t rows,
                                 int64_t n, const float *H, void *out, int32_t *perm,
                                 struct llm_gptq_stats *st)
{
    float *imp = llm_malloc((size_t)n * sizeof(float));
    if (!imp)
        return LLM_E_NOMEM;
    for (int64_t i = 0; i < n; i++)
        imp[i] = H[i * n + i];
    int nt = p->n_threads > 1 ? p->n_threads : 1;
    nt = nt > 64 ? 64 : nt > rows ? (int)rows : nt;
    struct rtn_job J = { .p = p, .W = W, .H = H, .imp = imp, .out = out, .rows = rows, .n = n,
                         .stats = st != NULL };
    struct llm_pool *pool = NULL;
    llm_status s = nt > 1 ? llm_pool_new(&pool, nt) : LLM_OK;
    if (!s) {
        if (pool)
            llm_pool_run(pool, rtn_rows, &J);
        else
            rtn_rows(0, 1, &J);
    }
    double err = 0.0, err0 = 0.0;
    for (int i = 0; i < nt && !s; i++) {
        s = J.s[i];
        err += J.err[i], err0 += J.err0[i];
    }
    llm_pool_free(pool);
    for (int64_t i = 0; i < n; i++)
        perm[i] = (int32_t)i;
    if (st && !s) {
        st->err_rtn = err0 / (double)rows;
        st->err_gptq = err / (double)rows;
        st->damp_retries = 0;
        st->damp = 0.0;
    }
    llm_free(imp);
    return s;
}

llm_status llm_gptq_quantize(const struct llm_gptq_params *p, float *W, int64_t rows,
                             int64_t cols, float *H, void *out, int32_t *perm,
                             struct llm_gptq_stats *st)
{
    if (!p || !W || !H || !out || !perm)
        return llm_error_set(LLM_E_INVALID, "gptq: NULL argument");
    struct llm_qgrid g = { 0 };
    const int kq = llm_kq_type(p->type);
    if (kq) { /* a GGUF block type: blocks are its groups (kq_fit) */
        const struct llm_type_traits *tr = llm_type_traits(p->type);
        g.type = p->type;
        g.group = (int)tr->blck;
        if (cols % tr->blck)
            return llm_error_set(LLM_E_INVALID, "gptq: rows of %lld columns are not whole "
                                 "%u-element blocks of %s", (long long)cols, tr->blck, tr->name);
        if (p->act_order && !p->static_groups)
            return llm_error_set(LLM_E_INVALID, "gptq: act-order on %s needs static groups (its "
                                 "blocks keep their columns in order)", tr->name);
        if (p->mse > 0.0f || p->scale > 0.0f)
            return llm_error_set(LLM_E_INVALID, "gptq: %s fits its own scales (no --mse)",
                                 tr->name);
    } else {
        LLM_TRY(llm_qgrid_of(p->type, &g));
    }
    if (p->rtn_only && !kq)
        return llm_error_set(LLM_E_INVALID, "gptq: round to nearest with an importance takes a "
                             "GGUF block type (q4_k ...), not %s", llm_type_name(p->type));
    uint64_t nn, rn;
    if (rows <= 0 || cols <= 0 || cols > INT32_MAX || rows > INT32_MAX ||
        !llm_mul_ok((uint64_t)cols, (uint64_t)cols, &nn) ||
        !llm_mul_ok((uint64_t)rows, (uint64_t)cols, &rn) || nn > ((uint64_t)1 << 40) ||
        rn > ((uint64_t)1 << 40))
        return llm_error_set(LLM_E_INVALID, "gptq: bad shape %lld x %lld", (long long)rows,
                             (long long)cols);
    if (!(p->damp >= 0.0f) || !isfinite(p->damp) || p->block_size < 0 || p->n_threads < 0 ||
        !(p->scale >= 0.0f) || !isfinite(p->scale) || (p->scale > 0.0f && !g.fp8) ||
        !(p->alpha >= 0.0f) || !isfinite(p->alpha) || !(p->mse >= 0.0f) || !isfinite(p->mse) ||
        (p->mse > 0.0f && g.fp8))
        return llm_error_set(LLM_E_INVALID, "gptq: bad parameters (damp %g, block %d, threads %d, "
                             "scale %g, alpha %g, mse %g)", (double)p->damp, p->block_size,
                             p->n_threads, (double)p->scale, (double)p->alpha, (double)p->mse);
    const int64_t n = cols;
    const int64_t G = g.group ? g.group : n;
    const int64_t ng = (n + G - 1) / G;
    const int64_t bs = p->block_size ? p->block_size : 128;
    const uint64_t row_bytes = llm_type_row_bytes(p->type, (uint64_t)n);
    if (!all_finite(W, rows * n))
        return llm_error_set(LLM_E_INVALID, "gptq: the weights (%lld x %lld) are not all finite",
                             (long long)rows, (long long)n);
    if (!all_finite(H, n * n))
        return llm_error_set(LLM_E_INVALID, "gptq: the Hessian (%lld x %lld) is not all finite",
                             (long long)n, (long long)n);
    if (p->dxxt && !all_finite(p->dxxt, n * n))
        return llm_error_set(LLM_E_INVALID, "gptq: GPTAQ's cross term (%lld x %lld) is not all "
                             "finite", (long long)n, (long long)n);
    for (int64_t i = 0; i < n; i++)
        if (H[i * n + i] < 0.0f)
            return llm_error_set(LLM_E_INVALID,
                                 "gptq: the Hessian has a negative diagonal element (column %lld)",
                                 (long long)i);

    if (p->rtn_only)
        return rtn_importance(p, W, rows, n, H, out, perm, st);

    int fail = 0;
    float *imp = alloc_n(n, sizeof(float), &fail);          // (n) diag(H)
    float *ks = kq ? alloc_n(rows * n / 16, sizeof(float), &fail) : NULL; // (rows, n / 16)
    float *km = kq ? alloc_n(rows * n / 16, sizeof(float), &fail) : NULL;
    double *A = alloc_n(n * n, sizeof(double), &fail);      // (n, n) factor work
    double *diag = alloc_n(n, sizeof(double), &fail);       // (n)
    uint8_t *codes = alloc_n(rows * n, 1, &fail);           // (rows, n)
    struct llm_qgroup *gp = alloc_n(rows * ng, sizeof *gp, &fail); // (rows, ng)
    float *err = alloc_n(rows * bs, sizeof(float), &fail);  // (rows, bs)
    float *rowbuf = alloc_n(n, sizeof(float), &fail);       // (n)
    uint8_t *cbuf = alloc_n(n, 1, &fail);                   // (n)
    float *W0 = NULL, *D1 = NULL, *H0 = NULL, *P = NULL, *npre = NULL;
    double *q1 = NULL, *q2 = NULL, *pscr = NULL;
    int nt = p->n_threads > 1 ? p->n_threads : 1;
    if (nt > rows)
        nt = (int)rows;
    if (p->dxxt) {
        P = alloc_n(n * n, sizeof(float), &fail);        // (n, n)
        npre = alloc_n(rows * bs, sizeof(float), &fail); // (rows, bs)
        pscr = alloc_n(nt * 2 * n, sizeof(double), &fail);
    }
    if (st) {
        W0 = alloc_n(rows * n, sizeof(float), &fail); // (rows, n), later W0 - Q
        D1 = alloc_n(rows * n, sizeof(float), &fail); // (rows, n) W0 - RTN
        H0 = alloc_n(n * n, sizeof(float), &fail);    // (n, n)
        q1 = alloc_n(rows, sizeof(double), &fail);
        q2 = alloc_n(rows, sizeof(double), &fail);
    }
    struct llm_pool *pool = NULL;
    llm_status s = LLM_OK;
    if (fail) {
        s = llm_error_set(LLM_E_NOMEM, "gptq: out of memory for a %lld x %lld matrix",
                          (long long)rows, (long long)n);
        goto done;
    }
    if (nt > 1 && (s = llm_pool_new(&pool, nt)) != LLM_OK)
        goto done;

    for (int64_t i = 0; i < n; i++)
        imp[i] = H[i * n + i];
    if (st) {
        memcpy(W0, W, (size_t)(rows * n) * sizeof *W0);
        memcpy(H0, H, (size_t)(n * n) * sizeof *H0);
        if ((s = rtn_diff(p, &g, W0, rows, n, G, imp, D1)) != LLM_OK)
            goto done;
    }
    struct job J = {
        .K = llm_qkern_get(), .g = &g, .W = W, .rows = rows, .cols = n, .codes = codes,
        .gp = gp, .G = G, .ng = ng, .bs = bs, .rule = rule_of(p), .mse = p->mse,
        .perm = perm, .err = err, .npre = npre, .H0 = H0, .D1 = D1, .D2 = W0, .q1 = q1,
        .q2 = q2, .kt = p->type, .kout = kq ? out : NULL, .krb = row_bytes, .ks = ks,
        .km = km, .imp = imp,
    };
    if (!g.group && !kq) /* per channel: the reference's find_params(W) on the untouched W */
        for (int64_t r = 0; r < rows; r++)
            start_params(p, rule_of(p), p->mse, &g, W + r * n, n, &gp[r]);
    for (int64_t i = 0; i < n; i++)
        if (H[i * n + i] == 0.0f) {
            H[i * n + i] = 1.0f;
            for (int64_t r = 0; r < rows; r++)
                W[r * n + i] = 0.0f;
        }
    const int statics = p->static_groups && g.group;
    if (statics)
        for (int64_t r = 0; r < rows; r++)
            for (int64_t k = 0; k < ng; k++) {
                if (kq)
                    kq_fit(&J, r, k, W + r * n + k * G);
                else
                    llm_qgrid_group_mse(&g, rule_of(p), p->mse, W + r * n + k * G,
                                        n - k * G < G ? n - k * G : G, &gp[r * ng + k]);
            }
    if (!p->act_order)
        for (int64_t i = 0; i < n; i++)
            perm[i] = (int32_t)i;
    else if (!p->order)
        s = llm_gptq_order(H, n + 1, n, perm);
    else { /* a given order: a permutation, every column once */
        memcpy(perm, p->order, (size_t)n * sizeof *perm);
        memset(cbuf, 0, (size_t)n);
        for (int64_t i = 0; i < n && !s; i++) {
            if (perm[i] < 0 || perm[i] >= n || cbuf[perm[i]])
                s = llm_error_set(LLM_E_INVALID, "gptq: the column order is not a permutation "
                                  "(entry %lld: %d)", (long long)i, perm[i]);
            else
                cbuf[perm[i]] = 1;
        }
    }
    if (s)
        goto done;
    if (p->act_order)
        for (int64_t r = 0; r < rows; r++) {
            float *w = W + r * n;
            for (int64_t i = 0; i < n; i++)
                rowbuf[i] = w[perm[i]];
            memcpy(w, rowbuf, (size_t)n * sizeof *w);
        }

    /* damping and the factor, retried with more damping when H is not
     * numerically positive definite (GPTQModel's damp_auto_increment) */
    double mean = 0.0;
    for (int64_t i = 0; i < n; i++)
        mean += H[i * n + i];
    mean /= (double)n;
    double percdamp = p->damp;
    int retries = 0;
    for (;; retries++) {
        const double damp = percdamp * mean;
        /* A = J P^T H P J, lower triangle */
        for (int64_t i = 0; i < n; i++) {
            const float *h = H + (int64_t)perm[n - 1 - i] * n;
            double *a = A + i * n;
            for (int64_t j = 0; j <= i; j++)
                a[j] = h[perm[n - 1 - j]];
            a[i] += damp;
        }
        if (llm_chol_lower(A, n, n, pool) < 0)
            break;
        if (retries == DAMP_RETRIES) {
            s = llm_error_set(LLM_E_INVALID,
                              "gptq: the Hessian (%lld columns) is not positive definite even "
                              "with damp %.2f after %d retries (too few calibration tokens, or "
                              "a degenerate input?)",
                              (long long)n, percdamp, retries);
            goto done;
        }
        percdamp += DAMP_STEP;
    }
    if ((s = llm_tri_inv_t(A, n, n, diag, pool)) != LLM_OK)
        goto done;
    /* U[i][j] = T[n-1-j][n-1-i]: T's row k scatters into U's column n-1-k */
    float *U = H; // (n, n)
    for (int64_t i = 0; i < n; i++) {
        memset(U + i * n, 0, (size_t)i * sizeof *U);
        U[i * n + i] = (float)diag[n - 1 - i];
    }
    for (int64_t k = 0; k < n; k++) {
        const double *t = A + k * n;
        const int64_t c = n - 1 - k;
        for (int64_t m = k + 1; m < n; m++)
            U[(n - 1 - m) * n + c] = (float)t[m];
    }

    if (P) {
        struct pjob PJ = { .D = p->dxxt, .perm = perm, .U = U, .P = P, .n = n,
                           .alpha = p->alpha, .scratch = pscr };
        run(pool, asym_rows, &PJ);
    }

    J.U = U;
    J.P = P;
    J.dynamic = g.group && !statics;
    J.statics = statics;
    run(pool, gptq_rows, &J);

    const int stored_perm = p->act_order && !statics && g.group && ng > 1;
    for (int64_t r = 0; r < rows && kq; r++) {
        /* the blocks were written in place; restore W's column order */
        float *w = W + r * n;
        for (int64_t k = 0; k < ng; k++)
            llm_kq_finish_block(p->type, (uint8_t *)out + (uint64_t)r * row_bytes +
                                             (uint64_t)k * llm_type_traits(p->type)->block_bytes);
        if (p->act_order) {
            for (int64_t i = 0; i < n; i++)
                rowbuf[perm[i]] = w[i];
            memcpy(w, rowbuf, (size_t)n * sizeof *w);
        }
    }
    for (int64_t r = 0; r < rows && !kq; r++) {
        float *w = W + r * n;
        const uint8_t *cd = codes + r * n;
        if (p->act_order) {
            for (int64_t i = 0; i < n; i++)
                rowbuf[perm[i]] = w[i];
            memcpy(w, rowbuf, (size_t)n * sizeof *w);
        }
        if (p->act_order && !stored_perm) {
            for (int64_t i = 0; i < n; i++)
                cbuf[perm[i]] = cd[i];
            cd = cbuf;
        }
        s = llm_qgrid_pack_row(&g, cd, gp + r * ng, n, (uint8_t *)out + (uint64_t)r * row_bytes);
        if (s != LLM_OK)
            goto done;
    }
    if (!stored_perm)
        for (int64_t i = 0; i < n; i++)
            perm[i] = (int32_t)i;

    if (st) {
        for (int64_t i = 0; i < rows * n; i++)
            W0[i] -= W[i];
        run(pool, stats_rows, &J);
        double e1 = 0.0, e2 = 0.0;
        for (int64_t r = 0; r < rows; r++)
            e1 += q1[r], e2 += q2[r];
        st->err_rtn = e1 / (double)rows;
        st->err_gptq = e2 / (double)rows;
        st->damp_retries = retries;
        st->damp = percdamp;
    }
done:
    llm_pool_free(pool);
    llm_free(imp), llm_free(ks), llm_free(km);
    llm_free(A), llm_free(diag), llm_free(codes), llm_free(gp);
    llm_free(err), llm_free(rowbuf), llm_free(cbuf);
    llm_free(W0), llm_free(D1), llm_free(H0), llm_free(q1), llm_free(q2);
    llm_free(P), llm_free(npre), llm_free(pscr);
    return s;
}
