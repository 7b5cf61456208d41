/* layer.c: calibrated quantization, one stage (decoder block, or the head)
 * at a time, for GPTQ (true-sequential) and AWQ. See quantize.h for the
 * order of work and qimpl.h for the state.
 *
 * The residual stream of every calibration window, X (N, dim), is the only
 * large buffer kept across stages (plus, for GPTQ, the attention outputs A
 * of the current block). Each stage dequantizes its own weights to float,
 * runs the windows through the block in chunks of the context's batch
 * (using the model's backend ops and a one-window KV cache), collects the
 * Hessians / Gram matrices H = mean x x^T of each group's input, quantizes,
 * and leaves X as the next stage's input.
 *
 * GPTQ with GPTAQ (llm_quantize_params.gptaq_alpha) also carries the float
 * model's stream Xf (and its attention outputs Af): each block runs on Xf
 * with the weights before quantization, and each Hessian gets the cross
 * term D = mean (x_f - x) x^T of the float and quantized inputs of the
 * same tokens (hacc_add_pair).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../common/alloc.h"
#include "../quant/quant.h"
#include "awq.h"
#include "gptq.h"
#include "vhess.h"
#include "../quant/grid.h"
#include "../ops/matmul.h" // llm_pool
#include "../ops/vec.h"
#include "../quant/kquants.h"
#include "../model/layer.h"
#include "qimpl.h"

/* ---- small helpers ------------------------------------------------------ */

static int n_threads(const struct qctx *q)
{
    struct llm_backend *b = llm_context_backend(q->ctx);
    return b->n_threads > 0 ? b->n_threads : 1;
}

int llm_q_calib_bf16_ok(void)
{
    return llm_amx_ok();
}

/* A float matrix (rows, cols) as a weight of the forward pass. With
 * calib_bf16 the calibration's products round to bf16 on the CPU's
 * matrix units (backend.h llm_weight.lowp), but not in --target-bpw's
 * first pass, whose KL divergences of the 8-bit candidates are smaller
 * than bf16's rounding would make them. Not the default: on SmolLM2 it
 * costs 0.4-0.5% of perplexity (llm-quantize(1)). */
static struct llm_weight fw(const struct qctx *q, const float *W, int64_t rows, int64_t cols)
{
    struct llm_weight w = { .type = LLM_TYPE_F32, .data = W, .ne0 = cols, .rows = rows,
                            .lowp = !q->measure && q->p->calib_bf16 };
    return w;
}

/* Y (n, rows) = X (n, cols) . W^T with a float weight: the calibration's
 * own products (Gram matrices, attention-weighted inputs), on the model's
 * backend. */
static llm_status mm(struct qctx *q, const float *W, int64_t rows, int64_t cols, const float *X,
                     int32_t n, float *Y)
{
    struct llm_weight w = fw(q, W, rows, cols);
    const struct llm_weight *wp[1] = { &w };
    float *yp[1] = { Y };
    struct llm_backend *b = llm_context_backend(q->ctx);
    return b->ops->matmul(b, 1, wp, NULL, X, yp, n);
}

/* A Hessian being accumulated: sum over tokens of x x^T, in double. */
struct hacc {
    double *sum;   /* (cols, cols) */
    double *asum;  /* (cols) sum |x| (AWQ's activation statistic) */
    float *t, *y;  /* scratch: (cols, n_batch) transposed chunk, (cols, cols) product */
    double *dsum;  /* GPTAQ (hacc_add_pair): (cols, cols) sum (x_f - x) x^T, or NULL */
    float *td;     /* scratch: (cols, n_batch) transposed x_f - x */
    int64_t cols, n;
};

static llm_status hacc_init(struct hacc *h, int64_t cols, int32_t n_batch)
{
    memset(h, 0, sizeof *h);
    h->cols = cols;
    h->sum = llm_calloc((size_t)(cols * cols), sizeof(double));
    h->asum = llm_calloc((size_t)cols, sizeof(double));
    h->t = llm_malloc((size_t)(cols * n_batch) * sizeof(float));
    h->y = llm_malloc((size_t)(cols * cols) * sizeof(float));
    return h->sum && h->asum && h->t && h->y ? LLM_OK : LLM_E_NOMEM;
}

/* hacc_init, with the float model's cross term for hacc_add_pair when
 * cross (GPTAQ: q->Xf is set). */
static llm_status hacc_init_x(struct hacc *h, int64_t cols, int32_t n_batch, int cross)
{
    LLM_TRY(hacc_init(h, cols, n_batch));
    if (!cross)
        return LLM_OK;
    h->dsum = llm_calloc((size_t)(cols * cols), sizeof(double));
    h->td = llm_malloc((size_t)(cols * n_batch) * sizeof(float));
    return h->dsum && h->td ? LLM_OK : LLM_E_NOMEM;
}

static void hacc_free(struct hacc *h)
{
    llm_free(h->dsum);
    llm_free(h->td);
    llm_free(h->sum);
    llm_free(h->asum);
    llm_free(h->t);
    llm_free(h->y);
    memset(h, 0, sizeof *h);
}

/* The backend's host threads for the loops between products (vhess.h
 * llm_qpar_fn) */
static void qpar(void *ctx, void (*fn)(int i, int n, void *arg), void *arg)
{
    struct qctx *q = ctx;
    struct llm_backend *b = llm_context_backend(q->ctx);
    if (b->ops->host_run)
        b->ops->host_run(b, fn, arg);
    else
        fn(0, 1, arg);
}

/* mm as the products of vhess.h */
static llm_status qmm(void *ctx, const float *W, int64_t rows, int64_t cols, const float *X,
                      int32_t n, float *Y)
{
    return mm(ctx, W, rows, cols, X, n, Y);
}

/* t[j * ldt + i] = x[i * c + j] for x (n, c) and features j in [j0, j1) */
static void transpose(const float *x, int32_t n, int64_t c, float *t, int64_t ldt, int64_t j0,
                      int64_t j1)
{
    llm_vec_transpose(x + j0, c, n, j1 - j0, t + j0 * ldt, ldt);
}

/* hacc_add_raw's loops over the chunk x (n, c), features split between
 * the threads: the transpose, and into a (c) each feature's sum of |x| in
 * token order (the bits of one running sum per feature), rows read in
 * memory order */
struct tr_job {
    const float *x;
    int32_t n;
    int64_t c;
    float *t;
    double *a;
};

/* (LLM_VEC_O3: the sums vectorized across features, each feature's the
 * same chain) */
LLM_VEC_O3 static void tr_run(int i, int nth, void *arg)
{
    const struct tr_job *J = arg;
    const int64_t j0 = J->c * i / nth, j1 = J->c * (i + 1) / nth;
    transpose(J->x, J->n, J->c, J->t, J->n, j0, j1);
    for (int64_t j = j0; j < j1; j++)
        J->a[j] = 0.0;
    for (int32_t r = 0; r < J->n; r++)
        for (int64_t j = j0; j < j1; j++)
            J->a[j] += fabsf(J->x[(int64_t)r * J->c + j]);
}

/* Add the n tokens x (n, cols): the product T . T^T of the transposed
 * chunk runs on the backend's matmul (threaded, SIMD); x x^T is symmetric,
 * so only the blocks on and below the diagonal are formed (58% of the full
 * product at 576 features, 53% at 1536; vhess.h llm_q_gram_add). */
static llm_status hacc_add_raw(struct qctx *q, struct hacc *h, const float *x, int32_t n)
{
    int64_t c = h->cols;
    /* y is free until the product */
    struct tr_job J = { x, n, c, h->t, (double *)(void *)h->y };
    qpar(q, tr_run, &J);
    for (int64_t j = 0; j < c; j++)
        h->asum[j] += J.a[j];
    /* sum[i][j] for j <= i; hacc_mean fills the upper half */
    LLM_TRY(llm_q_gram_add(qmm, qpar, q, h->sum, h->t, h->t, c, n, 1, h->y));
    h->n += n;
    return LLM_OK;
}

static llm_status hacc_add(struct qctx *q, struct hacc *h, const float *x, int32_t n)
{
    double t0 = llm_q_now();
    llm_status s = hacc_add_raw(q, h, x, n);
    q->ph[LLM_QP_HESSIAN] += llm_q_now() - t0;
    return s;
}

/* hacc_add of the quantized model's x (n, cols), and, when h has the cross
 * term and xf is not NULL, sum (xf - x) x^T with xf (n, cols) the float
 * model's input at the same tokens: GPTAQ's dXX^T, as D[i][j] =
 * sum (xf_i - x_i) x_j. */
static llm_status hacc_add_pair(struct qctx *q, struct hacc *h, const float *x, const float *xf,
                                int32_t n)
{
    double t0 = llm_q_now();
    llm_status s = hacc_add_raw(q, h, x, n);
    if (!s && h->dsum && xf) {
        int64_t c = h->cols;
        transpose(xf, n, c, h->td, n, 0, c);
        for (int64_t i = 0; i < c * n; i++) /* td = xf^T - x^T, t holding x^T */
            h->td[i] -= h->t[i];
        s = mm(q, h->t, c, n, h->td, (int32_t)c, h->y); /* y = td t^T */
        for (int64_t i = 0; i < c * c && !s; i++)
            h->dsum[i] += h->y[i];
    }
    q->ph[LLM_QP_HESSIAN] += llm_q_now() - t0;
    return s;
}

/* out (cols, cols) = sum / the token count, llm_malloc'd. */
static llm_status hacc_div(const struct hacc *h, const double *sum, float **out)
{
    int64_t c = h->cols;
    *out = llm_malloc((size_t)(c * c) * sizeof(float));
    if (!*out)
        return LLM_E_NOMEM;
    double inv = h->n ? 1.0 / (double)h->n : 0.0;
    for (int64_t i = 0; i < c * c; i++)
        (*out)[i] = (float)(sum[i] * inv);
    return LLM_OK;
}

/* H (cols, cols) = mean x x^T, and x_mean (cols) = mean |x| when wanted. */
static llm_status hacc_mean(const struct hacc *h, float **H, float *x_mean)
{
    int64_t c = h->cols;
    LLM_TRY(hacc_div(h, h->sum, H));
    for (int64_t i = 0; i < c; i++) /* the upper half from the lower (hacc_add) */
        for (int64_t j = i + 1; j < c; j++)
            (*H)[i * c + j] = (*H)[j * c + i];
    double inv = h->n ? 1.0 / (double)h->n : 0.0;
    if (x_mean)
        for (int64_t j = 0; j < c; j++)
            x_mean[j] = (float)(h->asum[j] * inv);
    return LLM_OK;
}

/* GPTQ's inputs: H (cols, cols) = mean x x^T and D (cols, cols) = mean
 * (x_f - x) x^T on H's scale, NULL without the cross term. */
static llm_status hacc_gptq(const struct hacc *h, float **H, float **D)
{
    *D = NULL;
    LLM_TRY(hacc_mean(h, H, NULL));
    return h->dsum ? hacc_div(h, h->dsum, D) : LLM_OK;
}

/* Mean squared output error tr(D H D^T) / rows for D (rows, cols). */
static llm_status out_err(struct qctx *q, const float *D, int64_t rows, int64_t cols,
                          const float *H, double *err)
{
    float *Y = llm_malloc((size_t)(rows * cols) * sizeof(float));
    if (!Y)
        return LLM_E_NOMEM;
    /* Y = D . H (H symmetric) */
    llm_status s = mm(q, H, cols, cols, D, (int32_t)rows, Y);
    double e = 0;
    for (int64_t i = 0; !s && i < rows * cols; i++)
        e += (double)Y[i] * D[i];
    llm_free(Y);
    *err = e / (double)rows;
    return s;
}

/* One linear of the stage: its output-file entry and its float weights. */
struct lin {
    struct qt *t;
    float *W;          /* (rows, cols) being quantized; afterwards the file's values */
    float *W0;         /* (rows, cols) original, for the report */
    int64_t rows, cols;
    const float *colscale; /* AWQ: columns were multiplied by these (cols), or NULL */
    const float *rowscale; /* AWQ: rows were divided by these (rows), or NULL */
    /* an expert of a 3-D tensor of experts: rows row0 .. row0 + rows - 1 of
     * t, the report's entry `expert`; a view (W and W0 point into the
     * whole tensor's lin, lin_free leaves them); -1 and 0 otherwise */
    int32_t expert;
    int64_t row0;
    int kind;          /* LQ .. LD, LHEAD; -1: an expert's */
};

static llm_status lin_load(struct qctx *q, struct lin *L, const char *fmt, int layer)
{
    char name[LLM_MAX_NAME];
    snprintf(name, sizeof name, fmt, layer);
    memset(L, 0, sizeof *L);
    L->expert = -1;
    L->kind = -1;
    L->t = llm_q_find(q, name);
    if (!L->t || !L->t->in)
        return llm_error_set(LLM_E_FORMAT, "%s: tensor '%s' is missing", q->in->path, name);
    LLM_TRY(llm_q_load_f32(q, L->t, &L->W, &L->rows, &L->cols));
    size_t n = (size_t)(L->rows * L->cols) * sizeof(float);
    L->W0 = llm_malloc(n);
    if (!L->W0)
        return LLM_E_NOMEM;
    memcpy(L->W0, L->W, n);
    return LLM_OK;
}

static void lin_free(struct lin *L)
{
    llm_free(L->W);
    llm_free(L->W0);
    L->W = L->W0 = NULL;
}

/* tr(D H D^T) / rows with the rows in nh equal blocks, block b on H[b]. */
static llm_status out_err_blocks(struct qctx *q, const float *D, int64_t rows, int64_t cols,
                                 const float *const *H, int nh, double *err)
{
    int64_t rb = rows / nh;
    double sum = 0;
    for (int b = 0; b < nh; b++) {
        double e;
        LLM_TRY(out_err(q, D + b * rb * cols, rb, cols, H[b], &e));
        sum += e * (double)rb;
    }
    *err = sum / (double)rows;
    return LLM_OK;
}

/* Report: weight error, and the output error of plain RTN on the original
 * weights ("before") and of the result ("after"), both in the original
 * output domain (AWQ's scales undone), on the nh Hessians of equal blocks
 * of rows (one for most linears; one per KV head for GPTQ's v). */
static llm_status lin_report(struct qctx *q, struct lin *L, const float *const *H, int nh,
                             double seconds, double awq_ratio)
{
    struct llm_qtensor_report *e = llm_q_report(q, L->t, L->expert);
    int64_t n = L->rows * L->cols;
    float *D = llm_malloc((size_t)n * sizeof(float));
    float *row = llm_malloc((size_t)L->cols * sizeof(float));
    void *qb = llm_malloc((size_t)llm_type_row_bytes(L->t->to, (uint64_t)L->cols));
    llm_status s = D && row && qb ? LLM_OK : LLM_E_NOMEM;
    double werr = 0;
    for (int64_t i = 0; !s && i < L->rows; i++)
        for (int64_t j = 0; j < L->cols; j++) {
            float v = L->W[i * L->cols + j];
            if (L->rowscale)
                v *= L->rowscale[i];
            if (L->colscale)
                v /= L->colscale[j];
            float d = L->W0[i * L->cols + j] - v;
            D[i * L->cols + j] = d;
            werr += (double)d * d;
        }
    if (!s)
        s = out_err_blocks(q, D, L->rows, L->cols, H, nh, &e->out_err_after);
    /* plain RTN of the original weights on the same type */
    for (int64_t i = 0; !s && i < L->rows; i++) {
        const float *w0 = L->W0 + i * L->cols;
        s = llm_quantize_row(L->t->to, w0, qb, L->cols);
        if (!s)
            s = llm_dequantize_row(L->t->to, qb, row, L->cols);
        for (int64_t j = 0; !s && j < L->cols; j++)
            D[i * L->cols + j] = w0[j] - row[j];
    }
    if (!s)
        s = out_err_blocks(q, D, L->rows, L->cols, H, nh, &e->out_err_before);
    llm_free(D);
    llm_free(row);
    llm_free(qb);
    e->rows = L->rows;
    e->cols = L->cols;
    e->weight_err = werr / (double)n;
    e->seconds += seconds;
    e->awq_ratio = awq_ratio;
    return s;
}

static int cmp_i32(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* Act-order puts a group's columns in descending Hessian order; inside a
 * group the order changes nothing (one scale and zero for all), so they are
 * stored by original column. A Hugging Face checkpoint (g_idx) keeps only
 * which group each column is in, and this order is what importing one
 * gives, so export and import round-trip to the same bytes. */
static llm_status sort_within_groups(struct qt *t, int64_t rows, int64_t cols, int32_t *perm)
{
    struct llm_qgrid g;
    LLM_TRY(llm_qgrid_of(t->to, &g));
    int64_t gs = g.group ? g.group : cols, ng = (cols + gs - 1) / gs;
    int64_t *pos = llm_malloc((size_t)cols * sizeof(int64_t)); /* new column i <- old pos[i] */
    int32_t *sorted = llm_malloc((size_t)cols * sizeof(int32_t));
    uint8_t *codes = llm_malloc((size_t)cols), *tmp = llm_malloc((size_t)cols);
    struct llm_qgroup *gp = llm_malloc((size_t)ng * sizeof *gp);
    llm_status s = pos && sorted && codes && tmp && gp ? LLM_OK : LLM_E_NOMEM;
    /* where each original column sits now: old position by value */
    int64_t *where = !s ? llm_malloc((size_t)cols * sizeof(int64_t)) : NULL;
    if (!s && !where)
        s = LLM_E_NOMEM;
    if (!s) {
        for (int64_t i = 0; i < cols; i++)
            where[perm[i]] = i;
        memcpy(sorted, perm, (size_t)cols * sizeof(int32_t));
        for (int64_t k = 0; k < ng; k++) {
            int64_t j0 = k * gs, j1 = j0 + gs < cols ? j0 + gs : cols;
            qsort(sorted + j0, (size_t)(j1 - j0), sizeof(int32_t), cmp_i32);
        }
        for (int64_t i = 0; i < cols; i++)
            pos[i] = where[sorted[i]];
    }
    uint64_t rb = llm_type_row_bytes(t->to, (uint64_t)cols);
    for (int64_t r = 0; !s && r < rows; r++) {
        uint8_t *row = (uint8_t *)t->data + rb * (uint64_t)r;
        s = llm_qgrid_unpack_row(&g, row, cols, codes, gp);
        for (int64_t i = 0; !s && i < cols; i++)
            tmp[i] = codes[pos[i]];
        if (!s)
            s = llm_qgrid_pack_row(&g, tmp, gp, cols, row);
    }
    if (!s)
        memcpy(perm, sorted, (size_t)cols * sizeof(int32_t));
    llm_free(pos);
    llm_free(where);
    llm_free(sorted);
    llm_free(codes);
    llm_free(tmp);
    llm_free(gp);
    return s;
}

/* act-order for row blocks with their own Hessians: one column order for
 * the tensor (it has one .perm), by the summed diagonals. */
static llm_status shared_order(const float *const *H, int nh, int64_t c, int32_t *order)
{
    float *d = llm_malloc((size_t)c * sizeof(float)); /* (c) */
    if (!d)
        return LLM_E_NOMEM;
    for (int64_t i = 0; i < c; i++) {
        d[i] = 0;
        for (int b = 0; b < nh; b++)
            d[i] += H[b][i * c + i];
    }
    llm_status s = llm_gptq_order(d, 1, c, order);
    llm_free(d);
    return s;
}

/* GPTQ on W (rows, cols) in nh row blocks, each on its own Hessian H[b]
 * (Hc: scratch of cols^2); out: the packed rows. err (may be NULL): the
 * summed output error tr((W - Q) H (W - Q)^T) of the blocks. */
static llm_status gptq_blocks(float *W, int64_t rows, int64_t c, const float *const *H,
                              const float *const *D, int nh, const struct llm_gptq_params *gp,
                              float *Hc, int32_t *perm, void *out, double *err)
{
    const int64_t rb = rows / nh;
    const uint64_t row_bytes = llm_type_row_bytes(gp->type, (uint64_t)c);
    if (err)
        *err = 0;
    for (int b = 0; b < nh; b++) {
        struct llm_gptq_stats st;
        struct llm_gptq_params pb = *gp;
        pb.dxxt = D ? D[b] : NULL;
        memcpy(Hc, H[b], (size_t)(c * c) * sizeof(float));
        LLM_TRY(llm_gptq_quantize(&pb, W + b * rb * c, rb, c, Hc,
                                  (uint8_t *)out + (uint64_t)(b * rb) * row_bytes, perm,
                                  err ? &st : NULL));
        if (err)
            *err += st.err_gptq * (double)rb;
    }
    return LLM_OK;
}

/* FP8's scope chosen by the calibration data (--fp8-scale auto): GPTQ with
 * each row's scale (on L->W, into data) and with the tensor's (on a copy),
 * and the one whose output error on the calibration inputs is smaller is
 * kept in L->W and data; t's spec then names it. E4M3's steps are
 * relative, so which scale suits a tensor depends on where its weights
 * fall between steps; neither scope wins on every model. */
static llm_status fp8_auto_scope(struct lin *L, const float *const *H, const float *const *D,
                                 int nh,
                                 struct llm_gptq_params *gp, float *Hc, int32_t *perm, void *data)
{
    const size_t n = (size_t)(L->rows * L->cols);
    const size_t nbytes = (size_t)llm_type_row_bytes(gp->type, (uint64_t)L->cols) *
                          (size_t)L->rows;
    float *Wt = llm_malloc(n * sizeof(float));
    void *dt = llm_malloc(nbytes ? nbytes : 1);
    llm_status s = Wt && dt ? LLM_OK : LLM_E_NOMEM;
    double err_row = 0, err_tensor = 0;
    if (!s) {
        memcpy(Wt, L->W, n * sizeof(float));
        gp->scale = llm_q_fp8_absmax_scale(Wt, (int64_t)n);
        s = gptq_blocks(Wt, L->rows, L->cols, H, D, nh, gp, Hc, perm, dt, &err_tensor);
    }
    if (!s) {
        gp->scale = 0.0f;
        s = gptq_blocks(L->W, L->rows, L->cols, H, D, nh, gp, Hc, perm, data, &err_row);
    }
    if (!s && err_tensor < err_row) {
        memcpy(L->W, Wt, n * sizeof(float));
        memcpy(data, dt, nbytes);
    }
    L->t->spec.per_tensor = !s && err_tensor < err_row;
    llm_free(Wt);
    llm_free(dt);
    return s;
}

/* --target-bpw's first pass: each candidate type's output error on the
 * calibration inputs, sum over rows of tr((W - Q) H (W - Q)^T), Q rounded
 * to nearest with diag(H) as the importance (the GGUF block types) or
 * plainly; rows in nh equal blocks, block b on H[b]; and the KL divergence
 * it adds to the model's output (measure_lin). L->W stays float, so the
 * next layers see the float model's activations. */
struct measure_job {
    const struct lin *L;
    const float *const *H;
    int64_t rb;           /* rows per H block */
    enum llm_type type;
    float *D;             /* (rows, cols) W0 - Q */
    llm_status s[64];     /* per thread */
};

static void measure_rows(int ti, int nt, void *ctx)
{
    struct measure_job *J = ctx;
    const int64_t rows = J->L->rows, c = J->L->cols;
    const int64_t r0 = rows * ti / nt, r1 = rows * (ti + 1) / nt;
    float *imp = llm_malloc((size_t)c * sizeof(float)), *row = llm_malloc((size_t)c * sizeof(float));
    void *qb = llm_malloc((size_t)llm_type_row_bytes(LLM_TYPE_F32, (uint64_t)c));
    llm_status s = imp && row && qb ? LLM_OK : LLM_E_NOMEM;
    int64_t hb = -1;
    for (int64_t i = r0; i < r1 && !s; i++) {
        const float *w0 = J->L->W0 + i * c;
        if (i / J->rb != hb) {
            hb = i / J->rb;
            for (int64_t j = 0; j < c; j++)
                imp[j] = J->H[hb][j * c + j];
        }
        s = llm_kq_type(J->type) ? llm_kq_quantize_row(J->type, w0, qb, c, imp)
                                 : llm_quantize_row(J->type, w0, qb, c);
        if (!s)
            s = llm_dequantize_row(J->type, qb, row, c);
        for (int64_t j = 0; !s && j < c; j++)
            J->D[i * c + j] = w0[j] - row[j];
    }
    llm_free(imp), llm_free(row), llm_free(qb);
    J->s[ti] = s;
}

/* Bits per weight of t's candidate k. */
static double bits_of(const struct qt *t, int k)
{
    uint64_t b = 0;
    llm_type_tensor_bytes(t->cand[k], t->in->n_dims, t->in->ne, &b);
    return 8.0 * (double)b / (double)llm_tensor_nelements(t->in);
}

/* J->D = W0 - Q for candidate type `type`, rows shared among nt threads. */
static llm_status measure_type(struct measure_job *J, struct llm_pool *pool, int nt,
                               enum llm_type type)
{
    J->type = type;
    if (pool)
        llm_pool_run(pool, measure_rows, J);
    else
        measure_rows(0, 1, J);
    for (int i = 0; i < (pool ? nt : 1); i++)
        LLM_TRY(J->s[i]);
    return LLM_OK;
}

static llm_status measure_lin(struct qctx *q, struct lin *L, const float *const *H, int nh)
{
    struct qt *t = L->t;
    const int64_t rows = L->rows, c = L->cols;
    int nt = n_threads(q);
    nt = nt > 64 ? 64 : nt;
    struct measure_job J = { .L = L, .H = H, .rb = rows / nh };
    J.D = llm_malloc((size_t)(rows * c) * sizeof(float));
    struct llm_pool *pool = NULL;
    llm_status s = J.D ? LLM_OK : LLM_E_NOMEM;
    if (!s && nt > 1)
        s = llm_pool_new(&pool, nt);
    /* Each error goes into a KL divergence (sens.c), measured at the
     * candidate nearest the target's bits and at the smallest (the first
     * of equals), from the candidate's values W0 - D while D is at hand;
     * the others are taken from the nearer of the two in proportion to
     * their errors (the divergence of a small change grows as its squared
     * size, as the error does), between them on the line through both. */
    const double target = q->p->target_bpw;
    int near = 0, small = 0;
    for (int k = 1; k < t->n_cand; k++) {
        if (fabs(bits_of(t, k) - target) < fabs(bits_of(t, near) - target))
            near = k;
        if (bits_of(t, k) < bits_of(t, small))
            small = k;
    }
    double kl[2] = { 0, 0 }; /* near, small */
    for (int k = 0; k < t->n_cand && !s; k++) {
        s = measure_type(&J, pool, nt, t->cand[k]);
        double e = 0;
        if (!s)
            s = out_err_blocks(q, J.D, rows, c, H, nh, &e);
        t->cand_err[k] = e * (double)rows;
        if (s || (k != near && k != small))
            continue;
        for (int64_t j = 0; j < rows * c; j++) /* the candidate's values */
            J.D[j] = L->W0[j] - J.D[j];
        s = llm_qsens_kl(q, t->stage, L->kind, J.D, rows, c, &kl[k == near ? 0 : 1]);
        if (k == near && k == small)
            kl[1] = kl[0];
    }
    const double e0 = t->cand_err[near], e1 = t->cand_err[small];
    for (int k = 0; k < t->n_cand; k++) {
        const double e = t->cand_err[k];
        if (e <= e0 || e1 <= e0)
            t->cand_kl[k] = e0 > 0 ? kl[0] * e / e0 : kl[0];
        else if (e <= e1)
            t->cand_kl[k] = kl[0] + (kl[1] - kl[0]) * (e - e0) / (e1 - e0);
        else
            t->cand_kl[k] = kl[1] * e / e1;
    }
    llm_pool_free(pool);
    llm_free(J.D);
    return s;
}

/* Quantize one linear with GPTQ, its rows in nh equal blocks each on its
 * own Hessian H[b], or plainly for other methods; L->W becomes the file's
 * values (original column order). D (cols, cols): GPTAQ's cross term for
 * nh == 1 (hacc_gptq), or NULL. */
static llm_status quant_lin_blocks_raw(struct qctx *q, struct lin *L, const float *const *H, int nh,
                                  const float *const *D)
{
    double t0 = llm_q_now();
    struct qt *t = L->t;
    if (t->measure) {
        LLM_TRY(measure_lin(q, L, H, nh));
        llm_q_progress(q, L->rows * L->cols);
        return LLM_OK;
    }
    if (t->spec.method == LLM_QM_GPTQ) {
        const struct llm_quantize_params *p = q->p;
        int64_t c = L->cols;
        float *Hc = llm_malloc((size_t)(c * c) * sizeof(float));
        if (!t->data) /* an expert's rows go into the whole tensor's */
            t->data = llm_malloc((size_t)t->nbytes);
        int32_t *perm = llm_malloc((size_t)c * sizeof(int32_t));
        int32_t *order = nh > 1 ? llm_malloc((size_t)c * sizeof(int32_t)) : NULL;
        if (!Hc || !t->data || !perm || (nh > 1 && !order)) {
            llm_free(Hc);
            llm_free(perm);
            llm_free(order);
            return LLM_E_NOMEM;
        }
        llm_status s = order ? shared_order(H, nh, c, order) : LLM_OK;
        uint8_t *out = (uint8_t *)t->data + llm_type_row_bytes(t->to, (uint64_t)c) *
                                                 (uint64_t)L->row0;
        struct llm_gptq_params gp = { .type = t->to, .damp = p->damp,
                                      .block_size = p->block_size, .act_order = p->act_order,
                                      .static_groups = p->static_groups,
                                      .n_threads = n_threads(q),
                                      .rtn_grid = !p->reference_grid, .order = order,
                                      .alpha = p->gptaq_alpha, .mse = p->gptq_mse,
                                      .rtn_only = t->imatrix };
        if (t->imatrix || llm_kq_type(t->to)) /* these fit their own scales */
            gp.mse = 0.0f, gp.rtn_grid = 1;
        if (t->imatrix) /* no error feedback: nothing else reads the GPTQ options */
            gp.act_order = gp.static_groups = 0, gp.order = NULL, gp.alpha = 0.0f;
        gp.scale = llm_q_fp8_tensor_scale(t, L->W, L->rows * c);
        if (!s)
            s = t->to == LLM_TYPE_FP8_E4M3 && t->spec.per_tensor == LLM_FP8_SCALE_AUTO
                    ? fp8_auto_scope(L, H, D, nh, &gp, Hc, perm, out)
                    : gptq_blocks(L->W, L->rows, c, H, D, nh, &gp, Hc, perm, out, NULL);
        llm_free(Hc);
        llm_free(order);
        if (s) {
            llm_free(perm);
            llm_error_prefix(t->name);
            llm_error_prefix(q->in->path);
            return s;
        }
        char pname[LLM_MAX_NAME];
        llm_q_perm_name(t->name, pname);
        struct qt *pt = llm_q_find(q, pname);
        if (pt) {
            s = sort_within_groups(t, L->rows, c, perm);
            if (s) {
                llm_free(perm);
                return s;
            }
            pt->data = perm;
        } else {
            llm_free(perm);
        }
    } else {
        LLM_TRY(llm_q_quantize_plain(q, t, L->expert, L->W, L->row0, L->rows, L->cols));
    }
    LLM_TRY(lin_report(q, L, H, nh, llm_q_now() - t0, -1));
    llm_q_progress(q, L->rows * L->cols);
    return LLM_OK;
}

static llm_status quant_lin_blocks(struct qctx *q, struct lin *L, const float *const *H, int nh,
                                   const float *const *D)
{
    double t0 = llm_q_now(), sens = q->ph[LLM_QP_SENS];
    llm_status s = quant_lin_blocks_raw(q, L, H, nh, D);
    q->ph[LLM_QP_SOLVE] += llm_q_now() - t0 - (q->ph[LLM_QP_SENS] - sens);
    return s;
}

static llm_status quant_lin(struct qctx *q, struct lin *L, const float *H, const float *D)
{
    return quant_lin_blocks(q, L, &H, 1, &D);
}

/* The model's per-layer vectors as float weights. */
static struct llm_weight fvec(const float *v, int64_t n)
{
    struct llm_weight w = { .type = LLM_TYPE_F32, .data = v, .ne0 = n, .rows = 1 };
    return w;
}

/* ---- calibration setup -------------------------------------------------- */

/* Drop the file pages of the input tensors of stage `stage` (-1: of every
 * stage) that a mapping holds; the bytes dropped. A later read maps them
 * back in. */
static uint64_t drop_inputs(struct qctx *q, int stage)
{
    uint64_t dropped = 0;
    for (size_t i = 0; i < q->n_t; i++) {
        const struct llm_tensor *in = q->t[i].in;
        if (in && in->data && (stage < 0 || q->t[i].stage == stage) &&
            llm_file_drop_pages(q->in, in->data, (size_t)in->nbytes))
            dropped += in->nbytes;
    }
    return dropped;
}

static llm_status calib_begin(struct qctx *q)
{
    const struct llm_quantize_params *p = q->p;
    const struct llm_config *c = &q->m->c;
    if (!q->m->tok)
        return llm_error_set(LLM_E_INVALID, "%s: the model has no tokenizer to read the "
                             "calibration text with", q->in->path);
    snprintf(q->stage_name, sizeof q->stage_name, "calibration");
    LLM_TRY(llm_calib_load(&q->cal, q->m->tok, p->calib_path, p->n_samples, p->seq_len,
                           p->seed));
    const int asym = q->flow == FLOW_GPTQ && p->gptaq_alpha > 0.0f;
    struct llm_context_params cp;
    llm_context_params_default(&cp);
    cp.n_ctx = q->cal.len;
    cp.n_threads = p->n_threads;
    cp.n_seq = asym ? 2 : 1; /* GPTAQ: the float model's window in a sequence of its own */
    cp.n_batch = q->cal.len < 512 ? q->cal.len : 512;
    LLM_TRY(llm_context_new(&q->ctx, q->m, &cp));
    q->nb = cp.n_batch;
    q->xb = llm_malloc((size_t)q->nb * (size_t)c->dim * sizeof(float));
    q->xb2 = llm_malloc((size_t)q->nb * (size_t)c->dim * sizeof(float));
    q->hb = llm_malloc((size_t)q->nb * (size_t)c->ffn_dim * sizeof(float));
    if (!q->xb || !q->xb2 || !q->hb)
        return LLM_E_NOMEM;
    q->N = (int64_t)q->cal.n * q->cal.len;
    int64_t qd = (int64_t)c->n_heads * c->head_dim;
    uint64_t nx, na;
    if (!llm_mul_ok((uint64_t)q->N, (uint64_t)c->dim * sizeof(float), &nx) || nx > SIZE_MAX ||
        !llm_mul_ok((uint64_t)q->N, (uint64_t)qd * sizeof(float), &na) || na > SIZE_MAX)
        return llm_error_set(LLM_E_NOMEM, "%lld calibration tokens are too many",
                             (long long)q->N);
    q->X = llm_malloc((size_t)nx);
    if (!q->X)
        return llm_error_set(LLM_E_NOMEM, "calibration activations: %.1f MB not available",
                             (double)nx / 1e6);
    if (q->flow == FLOW_GPTQ) {
        q->A = llm_malloc((size_t)na);
        if (asym) {
            q->Xf = llm_malloc((size_t)nx);
            q->Af = llm_malloc((size_t)na);
        }
        if (!q->A || (asym && (!q->Xf || !q->Af)))
            return llm_error_set(LLM_E_NOMEM, "calibration activations: %.1f MB not available",
                                 (double)(na * (asym ? 2 : 1) + (asym ? nx : 0)) / 1e6);
    }
    for (int32_t w = 0; w < q->cal.n; w++)
        LLM_TRY(llm_layer_embed(q->ctx, NULL, q->cal.tokens + (int64_t)w * q->cal.len, q->cal.len,
                                q->X + (int64_t)w * q->cal.len * c->dim));
    /* --target-bpw's first pass: the float model's distributions, which
     * each candidate's KL divergence is measured against */
    if (q->measure)
        LLM_TRY(llm_qsens_begin(q));
    /* The stages read the weights one block at a time; the pages that
     * loading (its checks) and the embedding brought in are dropped, and
     * each stage drops its own when the next begins (calib_stage): what
     * stays resident is the activations and one block, which leaves room
     * for GPTQ's copy of the FFN's hidden states. */
    const uint64_t dropped = drop_inputs(q, -1);
    /* kept only where it takes no more than the mapped weights that left
     * (bytes the file holds in memory stay): the peak stays what it was,
     * else down's input is computed twice */
    uint64_t nh;
    if (q->flow == FLOW_GPTQ && !c->n_expert &&
        llm_mul_ok((uint64_t)q->N, (uint64_t)c->ffn_dim * sizeof(float), &nh) && nh <= dropped &&
        nh <= SIZE_MAX)
        q->Hc = llm_malloc((size_t)nh); /* NULL: computed twice as well */
    q->hc_kept = q->Hc != NULL;
    if (asym)
        memcpy(q->Xf, q->X, (size_t)nx);
    return LLM_OK;
}

llm_status llm_q_calib_begin(struct qctx *q)
{
    double t0 = llm_q_now();
    llm_status s = calib_begin(q);
    q->ph[LLM_QP_TOTAL] += llm_q_now() - t0;
    return s;
}

void llm_q_calib_end(struct qctx *q)
{
    llm_qsens_free(q);
    llm_context_free(q->ctx);
    q->ctx = NULL;
    llm_free(q->X);
    llm_free(q->A);
    llm_free(q->Xf);
    llm_free(q->Af);
    llm_free(q->xb);
    llm_free(q->xb2);
    llm_free(q->hb);
    llm_free(q->Hc);
    q->X = q->A = q->Xf = q->Af = q->xb = q->xb2 = q->hb = q->Hc = NULL;
    llm_calib_free(&q->cal);
}

/* Chunks of the windows: window w, tokens [off, off + n), rows of X from
 * row0 = w * len + off. Start from CHUNKS_BEGIN; chunk_next gives the next
 * one, 0 after the last. */
struct chunk {
    int32_t w, off, n;
    int64_t row0;
};
#define CHUNKS_BEGIN { 0, 0, 0, -1 }

static int chunk_next(const struct qctx *q, struct chunk *k)
{
    if (k->row0 >= 0) {
        k->off += k->n;
        if (k->off >= q->cal.len) {
            k->w++;
            k->off = 0;
        }
    }
    if (k->w >= q->cal.n)
        return 0;
    int32_t left = q->cal.len - k->off;
    k->n = left < q->nb ? left : q->nb;
    k->row0 = (int64_t)k->w * q->cal.len + k->off;
    return 1;
}

/* Attention of the chunk through the model's attention stage, with the
 * float weights of q, k, v (and v's bias, when AWQ changed it) given,
 * for normed input xb at positions off.. of the window's sequence `seq`
 * (the quantized model's stream 0, the float model's 1), output to `out`. */
static llm_status attn_chunk(struct qctx *q, int32_t l, const float *xb, struct lin *lq,
                             const float *Wq, struct lin *lk, const float *Wk, struct lin *lv,
                             const float *Wv, const float *bv, int32_t seq, int32_t off, int32_t n,
                             float *out, float *probs)
{
    struct llm_weight wq = fw(q, Wq, lq->rows, lq->cols), wk = fw(q, Wk, lk->rows, lk->cols),
                      wv = fw(q, Wv, lv->rows, lv->cols), bvw = fvec(bv, lv->rows);
    const struct llm_layer_lin lin = { .wq = &wq, .wk = &wk, .wv = &wv, .bv = bv ? &bvw : NULL };
    return llm_layer_attention(q->ctx, l, &lin, xb, seq, off, n, out, probs);
}

/* H (dim, dim) = mean x x^T of the residual stream X through norm `which`
 * of layer l: the input of q/k/v, of gate/up, or of the head. With GPTAQ
 * (q->Xf), D gets the cross term with the float model's stream Xf normed
 * alike; otherwise NULL. */
static llm_status normed_hessian(struct qctx *q, int32_t l, enum llm_norm which, float **H,
                                 float **D)
{
    const int64_t dim = q->m->c.dim;
    struct hacc h;
    *D = NULL;
    llm_status s = hacc_init_x(&h, dim, q->nb, q->Xf != NULL);
    for (struct chunk k = CHUNKS_BEGIN; !s && chunk_next(q, &k);) {
        s = llm_layer_norm(q->ctx, l, which, q->X + k.row0 * dim, q->xb, k.n);
        if (!s && q->Xf)
            s = llm_layer_norm(q->ctx, l, which, q->Xf + k.row0 * dim, q->xb2, k.n);
        if (!s)
            s = hacc_add_pair(q, &h, q->xb, q->Xf ? q->xb2 : NULL, k.n);
    }
    if (!s)
        s = hacc_gptq(&h, H, D);
    hacc_free(&h);
    return s;
}

/* ---- GPTQ: true-sequential block ---------------------------------------- */

/* GPTQ's Hessians of v, one per KV head (H: n_kv_heads pointers).
 *
 * The rows of v that make KV head g reach the model only through the
 * attention of the query heads reading g: at token i that head's output is
 * W_g y_i with y_i = sum_j a_ij x_j (x: the normed input, a: the head's
 * attention probabilities). The error that matters is |dW_g y_i|^2, so the
 * Hessian is mean y y^T over the tokens and the group's query heads, not
 * the input's mean x x^T. The two differ most at a token that most queries
 * attend to (a window's first token, an attention sink): one token among
 * hundreds in x x^T, in nearly every y. On the input's Hessian GPTQ moves
 * error into that token's rare direction: SmolLM2 with GPTQ on v alone
 * (4-bit g32) lost 14% perplexity to round-to-nearest.
 *
 * Attention uses the quantized q and k (true-sequential): the
 * probabilities are the model's own attention's (its tap, model/layer.h),
 * chunk by chunk of each window. With Y_h = P_h X for the window's
 * probabilities P_h (len, len) and normed input X (len, dim), the group's
 * sum is sum_h Y_h^T Y_h = X^T M X with M = sum_h P_h^T P_h (len, len):
 * M is formed from the causal probabilities (only the rows a key block
 * can reach, only the blocks on and below the diagonal), then X^T (M X)
 * once per group and window, rather than P_h X and Y_h^T Y_h per head: at
 * SmolLM2's 9 heads on 3 groups and 512 tokens, 2.3x fewer operations.
 *
 * With GPTAQ (q->Xf), D (n_kv_heads pointers) gets each group's cross
 * term sum_h (Y_fh - Y_h)^T Y_h, Y_fh from the float stream, q and k
 * (their W0): (Xf^T C - X^T M) X with C = sum_h P_fh^T P_h. */

static llm_status v_hessians(struct qctx *q, int32_t l, struct lin *lq, struct lin *lk,
                             struct lin *lv, float **H, float **D)
{
    const struct llm_config *cf = &q->m->c;
    const int64_t dim = cf->dim, nh = cf->n_heads, nkv = cf->n_kv_heads, hpg = nh / nkv;
    const int64_t len = q->cal.len, nb = q->nb;
    const int asym = q->Xf != NULL, nv = asym ? 2 : 1; /* quantized, float */
    float *XT[2] = { 0 }, *probs[2] = { 0 };
    int fail = 0;
    for (int v = 0; v < nv; v++) {
        XT[v] = llm_malloc((size_t)(dim * len) * sizeof(float));       /* (dim, len) normed input^T */
        probs[v] = llm_malloc((size_t)(nh * nb * len) * sizeof(float)); /* (nh, nb, <= len) */
        fail |= !XT[v] || !probs[v];
    }
    struct hacc *h = llm_calloc((size_t)nkv, sizeof *h);
    struct llm_vhess *vh = llm_calloc((size_t)nkv, sizeof *vh); /* a window's M, C per group */
    llm_status s = !fail && h && vh ? LLM_OK : LLM_E_NOMEM;
    for (int64_t g = 0; g < nkv && !s; g++) {
        s = hacc_init_x(&h[g], dim, 1, asym);
        if (!s)
            s = llm_vhess_init(&vh[g], len, dim, hpg, nb, asym);
        vh[g].par = qpar; /* (init zeroes it, also on failure) */
    }
    for (struct chunk k = CHUNKS_BEGIN; !s && chunk_next(q, &k);) {
        /* the model's attention of the chunk with the quantized q and k (and
         * with GPTAQ the float ones, on the float stream, in sequence 1):
         * its probabilities alone (no v), and the normed input they weight */
        for (int v = 0; v < nv && !s; v++) {
            const float *X = (v ? q->Xf : q->X) + k.row0 * dim;
            s = llm_layer_norm(q->ctx, l, LLM_NORM_ATTN, X, q->xb, k.n);
            if (!s)
                transpose(q->xb, k.n, dim, XT[v] + k.off, len, 0, dim);
            if (!s)
                s = attn_chunk(q, l, q->xb, lq, v ? lq->W0 : lq->W, lk, v ? lk->W0 : lk->W, lv,
                               v ? lv->W0 : lv->W, NULL, v, k.off, k.n, NULL, probs[v]);
        }
        /* each group's M (and C) takes the chunk; at the end of the window
         * they go into its sums */
        double t0 = llm_q_now();
        const int last = k.off + k.n == len;
        for (int64_t g = 0; g < nkv && !s; g++) {
            s = llm_vhess_add(&vh[g], qmm, q, probs, g * hpg, k.off, k.n);
            if (!s && last) {
                s = llm_vhess_window(&vh[g], qmm, q, XT[0], XT[1], h[g].sum, h[g].dsum);
                h[g].n += len * hpg;
            }
        }
        q->ph[LLM_QP_HESSIAN] += llm_q_now() - t0;
    }
    for (int64_t g = 0; g < nkv && !s; g++)
        s = hacc_gptq(&h[g], &H[g], &D[g]);
    for (int64_t g = 0; g < nkv && h && vh; g++) {
        hacc_free(&h[g]);
        llm_vhess_free(&vh[g]);
    }
    llm_free(h);
    llm_free(vh);
    for (int v = 0; v < 2; v++)
        llm_free(XT[v]), llm_free(probs[v]);
    return s;
}

static const char *const lin_fmt[NLIN] = {
    "blk.%d.attn_q.weight",   "blk.%d.attn_k.weight", "blk.%d.attn_v.weight",
    "blk.%d.attn_output.weight", "blk.%d.ffn_gate.weight", "blk.%d.ffn_up.weight",
    "blk.%d.ffn_down.weight",
};

/* GPTAQ: the float block's attention outputs Af (N, qd) from the float
 * stream Xf, with the block's weights before quantization. */
static llm_status float_attention(struct qctx *q, int32_t l, struct lin *L)
{
    const int64_t dim = q->m->c.dim, qd = (int64_t)q->m->c.n_heads * q->m->c.head_dim;
    llm_status s = LLM_OK;
    for (struct chunk k = CHUNKS_BEGIN; !s && chunk_next(q, &k);) {
        s = llm_layer_norm(q->ctx, l, LLM_NORM_ATTN, q->Xf + k.row0 * dim, q->xb, k.n);
        if (!s)
            s = attn_chunk(q, l, q->xb, &L[LQ], L[LQ].W, &L[LK], L[LK].W, &L[LV], L[LV].W, NULL,
                           0, k.off, k.n, q->Af + k.row0 * qd, NULL);
    }
    return s;
}

/* The FFN's input h (n, ff) = silu(gate x) * up x of the stream rows X
 * (n, dim) through layer l's ffn norm, with the float weights of gate and
 * up in W[0], W[1]. */
static llm_status ffn_hidden(struct qctx *q, int32_t l, const float *X, const float *const W[2],
                             int32_t n, float *h)
{
    const int64_t dim = q->m->c.dim, ff = q->m->c.ffn_dim;
    struct llm_weight wg = fw(q, W[0], ff, dim), wu = fw(q, W[1], ff, dim);
    const struct llm_layer_lin lin = { .gate = &wg, .up = &wu };
    LLM_TRY(llm_layer_norm(q->ctx, l, LLM_NORM_FFN, X, q->xb, n));
    return llm_layer_ffn_hidden(q->ctx, l, &lin, q->xb, h, n);
}

/* x (n, dim) += in (n, cols) . W^T: a residual branch's output (o on the
 * attention, down on the FFN's hidden), through the forward pass's own
 * stage, with the float weight W of that linear. */
static llm_status residual(struct qctx *q, int32_t l, int is_down, const struct lin *L,
                           const float *W, const float *in, float *x, int32_t n)
{
    struct llm_weight w = fw(q, W, L->rows, L->cols);
    const struct llm_layer_lin lin = { .wo = &w, .down = &w };
    return is_down ? llm_layer_ffn_out(q->ctx, l, &lin, in, x, n)
                   : llm_layer_attn_out(q->ctx, l, &lin, in, x, n);
}

/* ---- mixtures of experts ------------------------------------------------ */

struct awq_in;
static void awq_in_free(struct awq_in *a, int64_t n);

/* The feed-forward of a mixture-of-experts block: the 3-D tensors of the
 * experts' gate, up and down (and the shared expert's matrices), loaded as
 * float, with a view per expert; the Hessians of one kind of input (gate
 * and up's, or down's) of every expert, collected through the forward
 * pass's tap. Expert e is index e, the shared expert index E. */
enum { MG, MU, MD, NM };
struct moe {
    struct qctx *q;
    int32_t E, n_ex;         /* experts; views (E, or E + 1 with a shared expert) */
    struct lin all[NM];      /* the experts' tensors (E * rows, cols) */
    struct lin sh[NM];       /* the shared expert's (t NULL: none) */
    struct lin *v;           /* (n_ex, NM) the views */
    struct llm_weight *w;    /* (n_ex, NM) float weights of the views (W, or W0 for
                              * the float stream) */
    struct llm_moe_lin *ml;  /* (n_ex) pointing into w */
    struct hacc *h;          /* (n_ex) Hessians being collected */
    int64_t *tokens;         /* (n_ex) tokens routed to each */
    int down;                /* 0: collect gate and up's inputs, 1: down's */
    struct awq_in *ain;      /* AWQ: (n_ex, 2) each expert's inputs of gate and up, of down */
    int64_t stride;          /* AWQ: every stride-th token of an expert is sampled */
};

static const char *const moe_fmt[NM] = { "blk.%d.ffn_gate_exps.weight", "blk.%d.ffn_up_exps.weight",
                                          "blk.%d.ffn_down_exps.weight" };
static const char *const sh_fmt[NM] = { "blk.%d.ffn_gate_shexp.weight", "blk.%d.ffn_up_shexp.weight",
                                         "blk.%d.ffn_down_shexp.weight" };

static void moe_free(struct moe *mo)
{
    for (int i = 0; i < NM; i++) {
        lin_free(&mo->all[i]);
        lin_free(&mo->sh[i]);
    }
    for (int32_t e = 0; mo->h && e < mo->n_ex; e++)
        hacc_free(&mo->h[e]);
    awq_in_free(mo->ain, mo->ain ? 2 * mo->n_ex : 0);
    llm_free(mo->v);
    llm_free(mo->w);
    llm_free(mo->ml);
    llm_free(mo->h);
    llm_free(mo->tokens);
    memset(mo, 0, sizeof *mo);
}

static llm_status moe_load(struct qctx *q, int32_t l, struct moe *mo)
{
    const struct llm_config *cf = &q->m->c;
    memset(mo, 0, sizeof *mo);
    mo->q = q;
    mo->E = cf->n_expert;
    mo->n_ex = mo->E + (cf->shared_ffn_dim > 0);
    for (int i = 0; i < NM; i++) {
        LLM_TRY(lin_load(q, &mo->all[i], moe_fmt[i], l));
        if (mo->n_ex > mo->E)
            LLM_TRY(lin_load(q, &mo->sh[i], sh_fmt[i], l));
    }
    mo->v = llm_calloc((size_t)mo->n_ex * NM, sizeof *mo->v);
    mo->w = llm_calloc((size_t)mo->n_ex * NM, sizeof *mo->w);
    mo->ml = llm_calloc((size_t)mo->n_ex, sizeof *mo->ml);
    mo->h = llm_calloc((size_t)mo->n_ex, sizeof *mo->h);
    mo->tokens = llm_calloc((size_t)mo->n_ex, sizeof *mo->tokens);
    if (!mo->v || !mo->w || !mo->ml || !mo->h || !mo->tokens)
        return LLM_E_NOMEM;
    for (int32_t e = 0; e < mo->n_ex; e++)
        for (int i = 0; i < NM; i++) {
            struct lin *V = &mo->v[e * NM + i];
            if (e == mo->E) {
                *V = mo->sh[i];
            } else {
                const struct lin *A = &mo->all[i];
                int64_t rows = A->rows / mo->E;
                *V = *A;
                V->rows = rows;
                V->row0 = e * rows;
                V->W = A->W + V->row0 * A->cols;
                V->W0 = A->W0 + V->row0 * A->cols;
            }
            V->expert = e == mo->E ? -1 : e;
        }
    return LLM_OK;
}

/* The views' weights for llm_layer_moe: the values being quantized (or,
 * float0, the original ones, for GPTAQ's float stream). */
static const struct llm_moe_lin *moe_lin(struct moe *mo, int float0)
{
    for (int32_t e = 0; e < mo->n_ex; e++) {
        struct llm_weight *w = &mo->w[e * NM];
        for (int i = 0; i < NM; i++) {
            const struct lin *V = &mo->v[e * NM + i];
            w[i] = fw(mo->q, float0 ? V->W0 : V->W, V->rows, V->cols);
        }
        mo->ml[e] = (struct llm_moe_lin){ .gate = &w[MG], .up = &w[MU], .down = &w[MD] };
    }
    return mo->ml;
}

static llm_status moe_tap(void *arg, int32_t e, int down, const float *x, int32_t m)
{
    struct moe *mo = arg;
    if (down != mo->down)
        return LLM_OK;
    mo->tokens[e] += m;
    return hacc_add(mo->q, &mo->h[e], x, m);
}

/* Every chunk of the stream X through layer l's FFN norm and experts,
 * with the views' weights: with collect, each expert's inputs of kind
 * mo->down go into its Hessian and X is left alone; without, the branch is
 * added to X (and with GPTAQ the float experts' to Xf). */
static llm_status moe_pass(struct qctx *q, int32_t l, struct moe *mo, int collect)
{
    const int64_t dim = q->m->c.dim;
    llm_status s = LLM_OK;
    const struct llm_moe_lin *ml = moe_lin(mo, 0);
    for (struct chunk k = CHUNKS_BEGIN; !s && chunk_next(q, &k);) {
        float *X = q->X + k.row0 * dim;
        s = llm_layer_norm(q->ctx, l, LLM_NORM_FFN, X, q->xb, k.n);
        if (!s && collect) /* the branch's sum goes to scratch */
            memcpy(q->xb2, X, (size_t)(k.n * dim) * sizeof(float));
        if (!s)
            s = llm_layer_moe(q->ctx, l, ml, collect ? moe_tap : NULL, mo, q->xb,
                              collect ? q->xb2 : X, k.n);
    }
    if (s || collect || !q->Xf)
        return s;
    ml = moe_lin(mo, 1);
    for (struct chunk k = CHUNKS_BEGIN; !s && chunk_next(q, &k);) {
        float *X = q->Xf + k.row0 * dim;
        s = llm_layer_norm(q->ctx, l, LLM_NORM_FFN, X, q->xb, k.n);
        if (!s)
            s = llm_layer_moe(q->ctx, l, ml, NULL, NULL, q->xb, X, k.n);
    }
    return s;
}

/* Quantize linear V of an expert on its Hessian H, or, routed fewer
 * tokens than it has inputs, by round to nearest (the fallback, in the
 * report with the token count). */
static llm_status moe_quant(struct qctx *q, struct lin *V, const float *H, int64_t tokens)
{
    const int fallback = tokens < (int64_t)LLM_MOE_MIN_TOKENS_PER_INPUT * V->cols;
    if (fallback) {
        double t0 = llm_q_now();
        LLM_TRY(llm_q_quantize_plain(q, V->t, V->expert, V->W, V->row0, V->rows, V->cols));
        LLM_TRY(lin_report(q, V, &H, 1, llm_q_now() - t0, -1));
        llm_q_progress(q, V->rows * V->cols);
    } else {
        LLM_TRY(quant_lin(q, V, H, NULL));
    }
    struct llm_qtensor_report *r = llm_q_report(q, V->t, V->expert);
    r->tokens = tokens;
    r->fallback = fallback;
    return LLM_OK;
}

/* Collect one kind of the experts' inputs (mo->down), then quantize the
 * linears that read them: gate and up, or down. */
static llm_status moe_collect_quant(struct qctx *q, int32_t l, struct moe *mo, int down)
{
    const struct llm_config *cf = &q->m->c;
    llm_status s = LLM_OK;
    mo->down = down;
    for (int32_t e = 0; !s && e < mo->n_ex; e++) {
        int64_t cols = !down ? cf->dim : e == mo->E ? cf->shared_ffn_dim : cf->expert_ffn_dim;
        hacc_free(&mo->h[e]);
        s = hacc_init(&mo->h[e], cols, q->nb);
        mo->tokens[e] = 0;
    }
    if (!s)
        s = moe_pass(q, l, mo, 1);
    for (int32_t e = 0; !s && e < mo->n_ex; e++) {
        float *H = NULL;
        s = hacc_mean(&mo->h[e], &H, NULL);
        for (int i = down ? MD : MG; !s && i <= (down ? MD : MU); i++)
            s = moe_quant(q, &mo->v[e * NM + i], H, mo->tokens[e]);
        llm_free(H);
        hacc_free(&mo->h[e]);
    }
    return s;
}

/* GPTQ of the experts, true-sequential as a dense FFN: gate and up on
 * each expert's routed inputs, down on its hidden state from the
 * quantized gate and up, then the quantized branch added to the stream.
 * With GPTAQ the float stream goes through the float experts, but the
 * experts get no cross term: the two streams route tokens differently. */
static llm_status gptq_moe(struct qctx *q, int32_t l)
{
    struct moe mo;
    llm_status s = moe_load(q, l, &mo);
    if (!s)
        s = moe_collect_quant(q, l, &mo, 0);
    if (!s)
        s = moe_collect_quant(q, l, &mo, 1);
    if (!s)
        s = moe_pass(q, l, &mo, 0);
    moe_free(&mo);
    return s;
}

static llm_status gptq_block(struct qctx *q, int32_t l, struct lin *L)
{
    const struct llm_config *cf = &q->m->c;
    int64_t dim = cf->dim, qd = (int64_t)cf->n_heads * cf->head_dim, ff = cf->ffn_dim;
    const int asym = q->Xf != NULL;
    struct hacc h = { 0 };
    float *H = NULL, *D = NULL;
    llm_status s;

    /* [q, k, v] on the normed input; v, unless asked otherwise, on the
     * attention-weighted input of each KV head (v_hessians). With GPTAQ the
     * float attention is computed first, while the weights are still float. */
    const int v_attn = !q->p->input_v_hessian && L[LV].t->spec.method == LLM_QM_GPTQ;
    s = normed_hessian(q, l, LLM_NORM_ATTN, &H, &D);
    if (!s && asym)
        s = float_attention(q, l, L);
    for (int i = LQ; !s && i <= (v_attn ? LK : LV); i++)
        s = quant_lin(q, &L[i], H, D);
    llm_free(H);
    llm_free(D);
    H = D = NULL;
    if (s)
        return s;
    if (v_attn) {
        int nkv = cf->n_kv_heads;
        float **Hv = llm_calloc((size_t)(2 * nkv), sizeof *Hv), **Dv = Hv + nkv;
        if (!Hv)
            return LLM_E_NOMEM;
        s = v_hessians(q, l, &L[LQ], &L[LK], &L[LV], Hv, Dv);
        if (!s)
            s = quant_lin_blocks(q, &L[LV], (const float *const *)Hv, nkv,
                                 (const float *const *)Dv);
        for (int g = 0; g < 2 * nkv; g++)
            llm_free(Hv[g]);
        llm_free(Hv);
        if (s)
            return s;
    }

    /* [o] on the attention output computed with the quantized q, k, v */
    LLM_TRY(hacc_init_x(&h, qd, q->nb, asym));
    for (struct chunk k = CHUNKS_BEGIN; chunk_next(q, &k);) {
        int32_t n = k.n;
        int64_t row0 = k.row0;
        if (!s)
            s = llm_layer_norm(q->ctx, l, LLM_NORM_ATTN, q->X + row0 * dim, q->xb, n);
        if (!s)
            s = attn_chunk(q, l, q->xb, &L[LQ], L[LQ].W, &L[LK], L[LK].W, &L[LV], L[LV].W, NULL,
                           0, k.off, n, q->A + row0 * qd, NULL);
        if (!s)
            s = hacc_add_pair(q, &h, q->A + row0 * qd, asym ? q->Af + row0 * qd : NULL, n);
    }
    if (!s)
        s = hacc_gptq(&h, &H, &D);
    hacc_free(&h);
    if (!s)
        s = quant_lin(q, &L[LO], H, D);
    llm_free(H);
    llm_free(D);
    H = D = NULL;
    /* residual (the float stream with the float o), then [gate, up] on the
     * normed stream */
    for (struct chunk k = CHUNKS_BEGIN; chunk_next(q, &k);) {
        int32_t n = k.n;
        int64_t row0 = k.row0;
        if (!s)
            s = residual(q, l, 0, &L[LO], L[LO].W, q->A + row0 * qd, q->X + row0 * dim, n);
        if (!s && asym)
            s = residual(q, l, 0, &L[LO], L[LO].W0, q->Af + row0 * qd, q->Xf + row0 * dim, n);
    }
    if (s)
        return s;
    if (cf->n_expert)
        return gptq_moe(q, l);
    s = normed_hessian(q, l, LLM_NORM_FFN, &H, &D);
    for (int i = LG; !s && i <= LU; i++)
        s = quant_lin(q, &L[i], H, D);
    llm_free(H);
    llm_free(D);
    H = D = NULL;
    if (s)
        return s;

    /* [down] on silu(gate) * up with the quantized gate and up; the
     * intermediate is kept for the residual in q->Hc (N x ffn floats, the
     * largest buffer of the run) or, where that did not fit, computed
     * again. GPTAQ's float intermediate hf comes from the float gate and
     * up on Xf. */
    const float *Wq[2] = { L[LG].W, L[LU].W }, *Wf[2] = { L[LG].W0, L[LU].W0 };
    float *hf = asym ? llm_malloc((size_t)(q->nb * ff) * sizeof(float)) : NULL;
    if (asym && !hf)
        s = LLM_E_NOMEM;
    if (!s)
        s = hacc_init_x(&h, ff, q->nb, asym);
    for (int pass = 0; pass < 2 && !s; pass++) {
        for (struct chunk k = CHUNKS_BEGIN; !s && chunk_next(q, &k);) {
            int32_t n = k.n;
            int64_t row0 = k.row0;
            float *hb = q->Hc ? q->Hc + row0 * ff : q->hb;
            if (pass == 0 || !q->Hc)
                s = ffn_hidden(q, l, q->X + row0 * dim, Wq, n, hb);
            /* the float stream is done in pass 0: its down is the float one */
            if (!s && pass == 0 && asym)
                s = ffn_hidden(q, l, q->Xf + row0 * dim, Wf, n, hf);
            if (!s && pass == 0)
                s = hacc_add_pair(q, &h, hb, hf, n);
            if (!s && pass == 0 && asym)
                s = residual(q, l, 1, &L[LD], L[LD].W0, hf, q->Xf + row0 * dim, n);
            if (!s && pass == 1)
                s = residual(q, l, 1, &L[LD], L[LD].W, hb, q->X + row0 * dim, n);
        }
        if (!s && pass == 0) {
            s = hacc_gptq(&h, &H, &D);
            if (!s)
                s = quant_lin(q, &L[LD], H, D);
            llm_free(H);
            llm_free(D);
            H = D = NULL;
        }
    }
    hacc_free(&h);
    llm_free(hf);
    return s;
}

/* ---- AWQ block ---------------------------------------------------------- */

/* Inputs of the four scaling groups collected from the float block. */
enum { GIN_QKV, GIN_O, GIN_GU, GIN_D, NGIN };

struct awq_in {
    struct hacc h;
    float *sample;     /* (ns, cols) every stride-th token */
    int64_t ns, cap;
};

static void awq_in_free(struct awq_in *a, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        hacc_free(&a[i].h);
        llm_free(a[i].sample);
    }
    llm_free(a);
}

/* Quantize L with AWQ's grid rule (after scaling and clipping); G (cols,
 * cols): the mean x x^T of its input before the scales, or NULL. */
static llm_status awq_pack(struct lin *L, const float *G)
{
    struct qt *t = L->t;
    if (llm_kq_type(t->to)) {
        /* a GGUF block type: its own quantizer, as the search assumed,
         * weighted by the scaled columns' mean squared inputs */
        const uint64_t rb = llm_type_row_bytes(t->to, (uint64_t)L->cols);
        if (!t->data)
            t->data = llm_malloc((size_t)t->nbytes);
        float *imp = G ? llm_malloc((size_t)L->cols * sizeof(float)) : NULL;
        llm_status s = t->data && (imp || !G) ? LLM_OK : LLM_E_NOMEM;
        for (int64_t j = 0; imp && j < L->cols; j++) {
            const float c = L->colscale ? L->colscale[j] : 1.0f;
            imp[j] = G[j * L->cols + j] / (c * c);
        }
        for (int64_t i = 0; !s && i < L->rows; i++) {
            uint8_t *row = (uint8_t *)t->data + rb * (uint64_t)(L->row0 + i);
            s = llm_kq_quantize_row(t->to, L->W + i * L->cols, row, L->cols, imp);
            if (!s)
                s = llm_dequantize_row(t->to, row, L->W + i * L->cols, L->cols);
        }
        llm_free(imp);
        return s;
    }
    struct llm_qgrid g;
    LLM_TRY(llm_qgrid_of(t->to, &g));
    int64_t gs = g.group ? g.group : L->cols, ng = (L->cols + gs - 1) / gs;
    uint64_t rb = llm_type_row_bytes(t->to, (uint64_t)L->cols);
    if (!t->data) /* an expert's rows go into the whole tensor's */
        t->data = llm_malloc((size_t)t->nbytes);
    uint8_t *codes = llm_malloc((size_t)L->cols);
    struct llm_qgroup *gp = llm_malloc((size_t)ng * sizeof *gp);
    llm_status s = t->data && codes && gp ? LLM_OK : LLM_E_NOMEM;
    for (int64_t i = 0; !s && i < L->rows; i++) {
        float *w = L->W + i * L->cols;
        for (int64_t k = 0; k < ng; k++) {
            int64_t j0 = k * gs, j1 = j0 + gs < L->cols ? j0 + gs : L->cols;
            llm_qgrid_group_awq(&g, w + j0, j1 - j0, &gp[k]);
            for (int64_t j = j0; j < j1; j++) {
                codes[j] = (uint8_t)llm_qgrid_code(&g, &gp[k], w[j]);
                w[j] = llm_qgrid_value(&g, &gp[k], codes[j]);
            }
        }
        s = llm_qgrid_pack_row(&g, codes, gp, L->cols,
                               (uint8_t *)t->data + rb * (uint64_t)(L->row0 + i));
    }
    llm_free(codes);
    llm_free(gp);
    return s;
}

static void div_cols(float *X, int64_t n, int64_t cols, const float *s)
{
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < cols; j++)
            X[i * cols + j] /= s[j];
}

/* The scale search's form: AutoAWQ's duo scaling unless --no-duo-scaling;
 * on the GGUF block types both forms, the lower error kept (SmolLM2 at
 * q4_k: KL divergence 0.036 with duo scaling, 0.022 without; stories260K
 * at q4_k_m, whose rows fall back to q5_0: 0.0133 with, 0.0140 without). */
static int awq_duo(const struct qctx *q, enum llm_type t)
{
    return q->p->awq_duo && llm_kq_type(t) ? 2 : q->p->awq_duo;
}

/* Scale search for the linears L[first..last] reading input `in`, folding
 * 1/s into `norm` (cols) or into the rows of `prev`. Skipped (scales 1)
 * unless every linear of the group is awq. Returns the ratio or -1. */
static llm_status awq_group(struct qctx *q, struct awq_in *in, struct lin *L, int first, int last,
                            float *norm, struct lin *prev, float *prev_bias, float *s,
                            double *ratio)
{
    *ratio = -1;
    for (int i = first; i <= last; i++)
        if (L[i].t->spec.method != LLM_QM_AWQ)
            return LLM_OK;
    int64_t cols = in->h.cols;
    float *G = NULL;
    float *x_mean = llm_malloc((size_t)cols * sizeof(float));
    if (!x_mean)
        return LLM_E_NOMEM;
    llm_status st = hacc_mean(&in->h, &G, x_mean);
    const float *W[3];
    int64_t rows[3];
    int nw = 0;
    for (int i = first; i <= last; i++) {
        W[nw] = L[i].W;
        rows[nw++] = L[i].rows;
    }
    struct llm_awq_scale_result r;
    if (!st)
        st = llm_awq_search_scale_gram(L[first].t->to, G, 1, cols, x_mean, nw, W, rows,
                                       q->p->awq_grid, awq_duo(q, L[first].t->to), s, &r, NULL,
                                       n_threads(q));
    llm_free(G);
    llm_free(x_mean);
    if (st)
        return st;
    if (norm)
        llm_awq_fold_norm(norm, NULL, s, cols);
    if (prev)
        LLM_TRY(llm_awq_fold_rows(prev->W, prev->rows, prev->cols, prev_bias, s, cols));
    for (int i = first; i <= last; i++) {
        llm_awq_scale_cols(L[i].W, L[i].rows, L[i].cols, s);
        L[i].colscale = s;
    }
    if (prev)
        prev->rowscale = s;
    div_cols(in->sample, in->ns, cols, s);
    *ratio = r.ratio;
    return LLM_OK;
}

/* Quantize L after its scales: AWQ (clipped first on the sample of its
 * input, unless clip is 0) or, for another method or awq's fallback
 * (plain), the method without calibration; then the report on Gram G
 * with `seconds` so far. */
static llm_status awq_finish(struct qctx *q, struct lin *L, const struct awq_in *in, int clip,
                             int plain, const float *G, double seconds, double ratio)
{
    double t0 = llm_q_now();
    llm_status s = LLM_OK;
    if (L->t->spec.method == LLM_QM_AWQ && !plain) {
        if (clip && q->p->awq_clip)
            s = llm_awq_search_clip(L->t->to, in->sample, in->ns, L->cols, L->W, L->rows,
                                    q->p->awq_grid, 0.5f, NULL, NULL, n_threads(q));
        if (!s)
            s = awq_pack(L, G);
    } else {
        s = llm_q_quantize_plain(q, L->t, L->expert, L->W, L->row0, L->rows, L->cols);
    }
    if (!s)
        s = lin_report(q, L, &G, 1, llm_q_now() - t0 + seconds, ratio);
    llm_q_progress(q, L->rows * L->cols);
    return s;
}

/* AWQ of a mixture of experts. The float block's pass collects, for each
 * expert, the Gram matrix and a sample of the inputs of its gate and up
 * (the tokens routed to it) and of its down (awq_moe_tap). Then, as
 * AutoAWQ's Mixtral and Qwen-MoE recipes: one scale for the gate and up
 * of every expert (and the shared expert), searched on the FFN norm's
 * output over all tokens and folded into that norm, the router (and the
 * shared expert's gate) taking s into its columns so that the routing
 * stays the same; a scale per expert for its down, searched on that
 * expert's hidden state and folded into its up; a clip search per expert
 * on its own inputs. An expert routed too few tokens keeps the common
 * scale (the norm carries it) but gets no scale or clip of its own and
 * is rounded to nearest (the report's fallback). */
static llm_status awq_moe_tap(void *arg, int32_t e, int down, const float *x, int32_t m)
{
    struct moe *mo = arg;
    struct awq_in *a = &mo->ain[e * 2 + down];
    const int64_t w = a->h.cols, seen = a->h.n;
    LLM_TRY(hacc_add(mo->q, &a->h, x, m));
    for (int32_t i = 0; i < m; i++)
        if ((seen + i) % mo->stride == 0 && a->ns < a->cap)
            memcpy(a->sample + a->ns++ * w, x + (int64_t)i * w, (size_t)w * sizeof(float));
    if (!down)
        mo->tokens[e] += m;
    return LLM_OK;
}

static llm_status awq_moe_begin(struct qctx *q, int32_t l, struct moe *mo, int64_t stride,
                                int64_t cap)
{
    const struct llm_config *cf = &q->m->c;
    LLM_TRY(moe_load(q, l, mo));
    mo->stride = stride;
    mo->ain = llm_calloc((size_t)(2 * mo->n_ex), sizeof *mo->ain);
    if (!mo->ain)
        return LLM_E_NOMEM;
    for (int32_t e = 0; e < mo->n_ex; e++)
        for (int k = 0; k < 2; k++) {
            struct awq_in *a = &mo->ain[e * 2 + k];
            int64_t cols = !k ? cf->dim : e == mo->E ? cf->shared_ffn_dim : cf->expert_ffn_dim;
            LLM_TRY(hacc_init(&a->h, cols, q->nb));
            a->cap = cap;
            a->sample = llm_malloc((size_t)(cap * cols) * sizeof(float));
            if (!a->sample)
                return LLM_E_NOMEM;
        }
    return LLM_OK;
}

/* The common scale of every gate and up (when all are awq), searched on
 * gu (the norm's output over all tokens); folded into norm, the routers'
 * columns (router (n_expert, dim), shgate (dim) or NULL) and each
 * expert's sample. */
static llm_status awq_moe_common(struct qctx *q, struct moe *mo, struct awq_in *gu, float *norm,
                                 float *router, float *shgate, float *s, double *ratio)
{
    const int64_t dim = gu->h.cols;
    const int nw = 2 * mo->n_ex;
    *ratio = -1;
    for (int32_t e = 0; e < mo->n_ex; e++)
        for (int i = MG; i <= MU; i++)
            if (mo->v[e * NM + i].t->spec.method != LLM_QM_AWQ)
                return LLM_OK;
    const float **W = llm_malloc((size_t)nw * sizeof *W);
    int64_t *rows = llm_malloc((size_t)nw * sizeof *rows);
    float *x_mean = llm_malloc((size_t)dim * sizeof(float)), *G = NULL;
    llm_status st = W && rows && x_mean ? LLM_OK : LLM_E_NOMEM;
    for (int32_t e = 0; !st && e < mo->n_ex; e++)
        for (int i = MG; i <= MU; i++) {
            W[2 * e + i] = mo->v[e * NM + i].W;
            rows[2 * e + i] = mo->v[e * NM + i].rows;
        }
    if (!st)
        st = hacc_mean(&gu->h, &G, x_mean);
    struct llm_awq_scale_result r;
    if (!st)
        st = llm_awq_search_scale_gram(mo->v[MG].t->to, G, 1, dim, x_mean, nw, W, rows,
                                       q->p->awq_grid, awq_duo(q, mo->v[MG].t->to), s, &r, NULL,
                                       n_threads(q));
    llm_free(W);
    llm_free(rows);
    llm_free(x_mean);
    llm_free(G);
    if (st)
        return st;
    llm_awq_fold_norm(norm, NULL, s, dim);
    llm_awq_scale_cols(router, mo->E, dim, s);
    if (shgate)
        llm_awq_scale_cols(shgate, 1, dim, s);
    for (int32_t e = 0; e < mo->n_ex; e++) {
        for (int i = MG; i <= MU; i++) {
            struct lin *V = &mo->v[e * NM + i];
            llm_awq_scale_cols(V->W, V->rows, V->cols, s);
            V->colscale = s;
        }
        div_cols(mo->ain[2 * e].sample, mo->ain[2 * e].ns, dim, s);
    }
    *ratio = r.ratio;
    return LLM_OK;
}

/* Expert e's own scale for its down (folded into its up), clips and
 * quantization; sd (its ffn) receives the scale. */
static llm_status awq_moe_expert(struct qctx *q, struct moe *mo, int32_t e, float *sd,
                                 double ratio_gu)
{
    struct lin *V = &mo->v[e * NM];
    struct awq_in *in = &mo->ain[2 * e];
    const int64_t tokens = mo->tokens[e];
    const int fallback = tokens < (int64_t)LLM_MOE_MIN_TOKENS_PER_INPUT * V[MG].cols ||
                         tokens < (int64_t)LLM_MOE_MIN_TOKENS_PER_INPUT * V[MD].cols;
    double t0 = llm_q_now(), ratio_d = -1;
    float *G[2] = { 0 };
    llm_status s = hacc_mean(&in[0].h, &G[0], NULL);
    if (!s)
        s = hacc_mean(&in[1].h, &G[1], NULL);
    struct awq_in *din = &in[1];
    if (!s && !fallback && V[MU].t->spec.method == LLM_QM_AWQ &&
        V[MD].t->spec.method == LLM_QM_AWQ) {
        struct lin two[2] = { V[MU], V[MD] };
        s = awq_group(q, din, two, 1, 1, NULL, &two[0], NULL, sd, &ratio_d);
        V[MU].rowscale = two[0].rowscale;
        V[MD].colscale = two[1].colscale;
    }
    for (int i = 0; i < NM && !s; i++) {
        s = awq_finish(q, &V[i], &in[i == MD], 1, fallback, G[i == MD],
                       i == 0 ? llm_q_now() - t0 : 0, i == MD ? ratio_d : ratio_gu);
        struct llm_qtensor_report *r = llm_q_report(q, V[i].t, V[i].expert);
        r->tokens = tokens;
        r->fallback = fallback && V[i].t->spec.method == LLM_QM_AWQ;
    }
    llm_free(G[0]);
    llm_free(G[1]);
    return s;
}

/* The router's weights as float (n_expert, dim), and the shared
 * expert's gate (dim) or NULL, for AWQ to scale. */
static llm_status router_copy(struct qctx *q, int32_t l, float **router, float **shgate)
{
    const struct llm_config *cf = &q->m->c;
    const struct llm_layer_w *LW = &q->m->layers[l];
    *router = llm_malloc((size_t)(cf->n_expert * cf->dim) * sizeof(float));
    if (!*router)
        return LLM_E_NOMEM;
    for (int32_t e = 0; e < cf->n_expert; e++)
        LLM_TRY(llm_dequantize_row(LW->router.type,
                                   (const uint8_t *)LW->router.data +
                                       llm_type_row_bytes(LW->router.type, (uint64_t)cf->dim) *
                                           (uint64_t)e,
                                   *router + (int64_t)e * cf->dim, cf->dim));
    *shgate = NULL;
    if (!LW->sh_gate_inp.data)
        return LLM_OK;
    *shgate = llm_malloc((size_t)cf->dim * sizeof(float));
    if (!*shgate)
        return LLM_E_NOMEM;
    return llm_dequantize_row(LW->sh_gate_inp.type, LW->sh_gate_inp.data, *shgate, cf->dim);
}

static llm_status awq_block(struct qctx *q, int32_t l, struct lin *L)
{
    const struct llm_config *cf = &q->m->c;
    const struct llm_layer_w *LW = &q->m->layers[l];
    int64_t dim = cf->dim, qd = (int64_t)cf->n_heads * cf->head_dim, ff = cf->ffn_dim;
    int64_t widths[NGIN] = { dim, qd, dim, ff };
    struct awq_in in[NGIN];
    memset(in, 0, sizeof in);
    int64_t stride = q->N / (q->p->awq_tokens > 0 ? q->p->awq_tokens : 1);
    if (stride < 1)
        stride = 1;
    int64_t cap = (q->N + stride - 1) / stride;
    float *attn_norm = llm_malloc((size_t)dim * sizeof(float));
    float *ffn_norm = llm_malloc((size_t)dim * sizeof(float));
    float *bv = NULL;
    float *att = llm_malloc((size_t)(q->nb * qd) * sizeof(float));
    float *sc[NGIN] = { 0 };
    llm_status s = attn_norm && ffn_norm && att ? LLM_OK : LLM_E_NOMEM;
    /* a mixture of experts: its tensors, inputs and routers */
    struct moe mo = { 0 };
    float *router = NULL, *shgate = NULL, *sd = NULL;
    const int moe = cf->n_expert > 0;
    if (!s && moe) {
        s = awq_moe_begin(q, l, &mo, stride, cap);
        if (!s)
            s = router_copy(q, l, &router, &shgate);
        int64_t ffw = cf->expert_ffn_dim > cf->shared_ffn_dim ? cf->expert_ffn_dim
                                                               : cf->shared_ffn_dim;
        if (!s && !(sd = llm_malloc((size_t)ffw * sizeof(float))))
            s = LLM_E_NOMEM;
    }
    for (int i = 0; !s && i < NGIN; i++) {
        s = hacc_init(&in[i].h, widths[i], q->nb);
        in[i].cap = cap;
        in[i].sample = llm_malloc((size_t)(cap * widths[i]) * sizeof(float));
        sc[i] = llm_malloc((size_t)widths[i] * sizeof(float));
        if (!s && (!in[i].sample || !sc[i]))
            s = LLM_E_NOMEM;
    }
    if (!s) {
        memcpy(attn_norm, LW->attn_norm.data, (size_t)dim * sizeof(float));
        memcpy(ffn_norm, LW->ffn_norm.data, (size_t)dim * sizeof(float));
        if (LW->bv.data) {
            bv = llm_malloc((size_t)LW->bv.ne0 * sizeof(float));
            if (bv)
                memcpy(bv, LW->bv.data, (size_t)LW->bv.ne0 * sizeof(float));
            else
                s = LLM_E_NOMEM;
        }
    }
    /* the float block over every chunk: statistics of the four inputs, and
     * the block's output as the next block's input */
    for (struct chunk k = CHUNKS_BEGIN; chunk_next(q, &k);) {
        int32_t n = k.n;
        int64_t row0 = k.row0;
        float *xs[NGIN] = { q->xb, att, q->xb, q->hb };
        float *X = q->X + row0 * dim;
        for (int g = 0; g < (moe ? GIN_D : NGIN) && !s; g++) {
            if (g == GIN_QKV)
                s = llm_layer_norm(q->ctx, l, LLM_NORM_ATTN, X, q->xb, n);
            if (g == GIN_O)
                s = attn_chunk(q, l, q->xb, &L[LQ], L[LQ].W, &L[LK], L[LK].W, &L[LV], L[LV].W,
                               NULL, 0, k.off, n, att, NULL);
            if (g == GIN_GU) {
                s = residual(q, l, 0, &L[LO], L[LO].W, att, X, n);
                if (!s)
                    s = llm_layer_norm(q->ctx, l, LLM_NORM_FFN, X, q->xb, n);
            }
            if (g == GIN_D) {
                const float *Wgu[2] = { L[LG].W, L[LU].W };
                struct llm_weight wg = fw(q, Wgu[0], ff, dim), wu = fw(q, Wgu[1], ff, dim);
                const struct llm_layer_lin lin = { .gate = &wg, .up = &wu };
                s = llm_layer_ffn_hidden(q->ctx, l, &lin, q->xb, q->hb, n);
            }
            if (!s)
                s = hacc_add(q, &in[g].h, xs[g], n);
            for (int32_t i = 0; !s && i < n; i++)
                if ((row0 + i) % stride == 0 && in[g].ns < in[g].cap)
                    memcpy(in[g].sample + in[g].ns++ * widths[g], xs[g] + (int64_t)i * widths[g],
                           (size_t)widths[g] * sizeof(float));
        }
        if (!s && moe) /* the experts' inputs through the tap, the output into X */
            s = llm_layer_moe(q->ctx, l, moe_lin(&mo, 0), awq_moe_tap, &mo, q->xb, X, n);
        else if (!s)
            s = residual(q, l, 1, &L[LD], L[LD].W, q->hb, X, n);
    }
    /* Gram matrices in the original domain, for the report */
    float *G[NGIN] = { 0 };
    for (int g = 0; g < (moe ? GIN_D : NGIN) && !s; g++)
        s = hacc_mean(&in[g].h, &G[g], NULL);
    double t0 = llm_q_now();
    double ratio[NLIN];
    for (int i = 0; i < NLIN; i++)
        ratio[i] = -1;
    /* scales, in llm-awq's order; v -> o only without GQA */
    if (!s)
        s = awq_group(q, &in[GIN_QKV], L, LQ, LV, attn_norm, NULL, NULL, sc[GIN_QKV], &ratio[LQ]);
    ratio[LK] = ratio[LV] = ratio[LQ];
    if (!s && L[LV].rows == L[LO].cols && L[LV].t->spec.method == LLM_QM_AWQ)
        s = awq_group(q, &in[GIN_O], L, LO, LO, NULL, &L[LV], bv, sc[GIN_O], &ratio[LO]);
    if (!s && moe)
        s = awq_moe_common(q, &mo, &in[GIN_GU], ffn_norm, router, shgate, sc[GIN_GU],
                           &ratio[LG]);
    else if (!s)
        s = awq_group(q, &in[GIN_GU], L, LG, LU, ffn_norm, NULL, NULL, sc[GIN_GU], &ratio[LG]);
    ratio[LU] = ratio[LG];
    if (!s && !moe && L[LU].t->spec.method == LLM_QM_AWQ)
        s = awq_group(q, &in[GIN_D], L, LD, LD, NULL, &L[LU], NULL, sc[GIN_D], &ratio[LD]);
    /* clipping (not q/k: "due to qk bmm, it is hard to clip precisely") and
     * quantization */
    static const int gin_of[NLIN] = { GIN_QKV, GIN_QKV, GIN_QKV, GIN_O, GIN_GU, GIN_GU, GIN_D };
    for (int i = 0; i < (moe ? LO + 1 : NLIN) && !s; i++)
        s = awq_finish(q, &L[i], &in[gin_of[i]], i != LQ && i != LK, 0, G[gin_of[i]],
                       i == 0 ? llm_q_now() - t0 : 0, ratio[i]);
    for (int32_t e = 0; moe && e < mo.n_ex && !s; e++)
        s = awq_moe_expert(q, &mo, e, sd, ratio[LG]);
    q->ph[LLM_QP_SEARCH] += llm_q_now() - t0;
    /* the norms (and v's bias, the routers) that absorbed 1/s or s */
    struct {
        const char *fmt;
        float *v;
        int64_t n;
    } vecs[5] = { { "blk.%d.attn_norm.weight", attn_norm, dim },
                  { "blk.%d.ffn_norm.weight", ffn_norm, dim },
                  { "blk.%d.attn_v.bias", bv, LW->bv.ne0 },
                  { "blk.%d.ffn_gate_inp.weight", router, (int64_t)cf->n_expert * dim },
                  { "blk.%d.ffn_gate_inp_shexp.weight", shgate, dim } };
    for (int i = 0; i < 5 && !s; i++) {
        char name[LLM_MAX_NAME];
        snprintf(name, sizeof name, vecs[i].fmt, l);
        struct qt *t = llm_q_find(q, name);
        if (!t || !vecs[i].v)
            continue;
        if (t->to != LLM_TYPE_F32 || t->nbytes != (uint64_t)vecs[i].n * sizeof(float)) {
            s = llm_error_set(LLM_E_INVALID, "%s: tensor '%s': unexpected shape", q->in->path,
                              name);
            break;
        }
        t->data = vecs[i].v;
        float **owner[5] = { &attn_norm, &ffn_norm, &bv, &router, &shgate };
        *owner[i] = NULL;
    }
    for (int g = 0; g < NGIN; g++) {
        hacc_free(&in[g].h);
        llm_free(in[g].sample);
        llm_free(G[g]);
        llm_free(sc[g]);
    }
    llm_free(attn_norm);
    llm_free(ffn_norm);
    llm_free(bv);
    llm_free(att);
    llm_free(router);
    llm_free(shgate);
    llm_free(sd);
    moe_free(&mo);
    return s;
}

/* ---- the head ----------------------------------------------------------- */

static llm_status gptq_head(struct qctx *q)
{
    struct qt *t = llm_q_find(q, "output.weight");
    if (!t)
        t = llm_q_find(q, "token_embd.weight");
    if (!t || t->spec.method != LLM_QM_GPTQ)
        return LLM_OK;
    float *H = NULL, *D = NULL;
    llm_status s = normed_hessian(q, 0, LLM_NORM_OUT, &H, &D);
    struct lin L;
    memset(&L, 0, sizeof L);
    L.expert = -1;
    L.kind = LHEAD;
    L.t = t;
    if (!s) {
        s = llm_q_load_f32(q, t, &L.W, &L.rows, &L.cols);
        if (!s) {
            L.W0 = llm_malloc((size_t)(L.rows * L.cols) * sizeof(float));
            if (L.W0)
                memcpy(L.W0, L.W, (size_t)(L.rows * L.cols) * sizeof(float));
            else
                s = LLM_E_NOMEM;
        }
    }
    if (!s)
        s = quant_lin(q, &L, H, D);
    lin_free(&L);
    llm_free(H);
    llm_free(D);
    return s;
}

/* ---- a stage ------------------------------------------------------------ */

static llm_status calib_stage(struct qctx *q, int stage)
{
    const struct llm_config *cf = &q->m->c;
    if (stage < 0)
        return LLM_OK;
    if (stage >= cf->n_layers) {
        snprintf(q->stage_name, sizeof q->stage_name, "output head");
        return q->flow == FLOW_GPTQ ? gptq_head(q) : LLM_OK;
    }
    snprintf(q->stage_name, sizeof q->stage_name, "layer %d/%d", stage + 1, cf->n_layers);
    if (stage > 0) /* the previous block's weights are done with */
        drop_inputs(q, stage - 1);
    llm_q_progress(q, 0);
    struct lin L[NLIN];
    memset(L, 0, sizeof L);
    llm_status s = LLM_OK;
    /* a mixture of experts loads its feed-forward's tensors itself */
    const int n_lin = cf->n_expert ? LO + 1 : NLIN;
    for (int i = 0; i < n_lin && !s; i++) {
        s = lin_load(q, &L[i], lin_fmt[i], stage);
        L[i].kind = i;
    }
    if (!s)
        s = q->flow == FLOW_GPTQ ? gptq_block(q, stage, L) : awq_block(q, stage, L);
    for (int i = 0; i < NLIN; i++)
        lin_free(&L[i]);
    return s;
}

llm_status llm_q_calib_stage(struct qctx *q, int stage)
{
    double t0 = llm_q_now();
    llm_status s = calib_stage(q, stage);
    q->ph[LLM_QP_TOTAL] += llm_q_now() - t0;
    return s;
}
