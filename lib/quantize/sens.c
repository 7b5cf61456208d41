/* sens.c: --target-bpw's sensitivity of the model's output to one tensor.
 *
 * A tensor's output error tr((W - Q) H (W - Q)^T) is in its own layer's
 * units: an error in an early q or k, or in the head, moves the next-token
 * distributions more or less than the same error in a late down. The first
 * pass (quantize.c measure_and_allocate) puts each tensor's errors into
 * one unit: the mean KL divergence of the model's next-token distributions
 * from the float model's over the first LLM_QSENS_TOKENS calibration
 * tokens, with that tensor alone holding a candidate type's values and
 * every other weight float. The run starts where the measuring stage
 * stands (its residual stream is the float model's) and goes on through
 * the model's own later layers and head (model/layer.h), so it costs the
 * rest of the model for those tokens, not all of it.
 */
#include <math.h>
#include <string.h>

#include "../common/alloc.h"
#include "../model/layer.h"
#include "qimpl.h"

/* Rows of logits at a time: (LOGIT_ROWS, n_vocab) floats. */
#define LOGIT_ROWS 32

struct llm_qsens {
    int32_t nw, n;     /* windows, and the leading tokens of each that are scored */
    float *R;          /* (nw * n, dim) the stream being run */
    float *xb;         /* (nb, dim) normed rows */
    float *att;        /* (nb, q dim) attention output */
    float *h;          /* (nb, ffn_dim) FFN hidden state */
    float *z;          /* (LOGIT_ROWS, n_vocab) logits */
    float *pb;         /* (nw * n, n_vocab) the float model's probabilities */
    double *negent;    /* (nw * n) sum p log p of each row of pb */
};

void llm_qsens_free(struct qctx *q)
{
    struct llm_qsens *S = q->sens;
    if (!S)
        return;
    llm_free(S->R), llm_free(S->xb), llm_free(S->att), llm_free(S->h), llm_free(S->z);
    llm_free(S->pb), llm_free(S->negent);
    llm_free(S);
    q->sens = NULL;
}

/* Row r's logits z (n_vocab): into the base's probabilities (store), or
 * its KL divergence from them: sum p (log p - z + lse(z)). */
static double row_kl(struct llm_qsens *S, int64_t r, const float *z, int64_t nv, int store)
{
    float mx = z[0];
    for (int64_t v = 1; v < nv; v++)
        mx = z[v] > mx ? z[v] : mx;
    double sum = 0;
    for (int64_t v = 0; v < nv; v++)
        sum += expf(z[v] - mx);
    const double lse = (double)mx + log(sum);
    float *p = S->pb + r * nv;
    if (store) {
        double ne = 0;
        for (int64_t v = 0; v < nv; v++) {
            const double lp = (double)z[v] - lse;
            p[v] = (float)exp(lp);
            ne += p[v] > 0 ? (double)p[v] * log((double)p[v]) : 0.0;
        }
        S->negent[r] = ne;
        return 0;
    }
    double cross = 0, mass = 0;
    for (int64_t v = 0; v < nv; v++) {
        cross += (double)p[v] * z[v];
        mass += p[v];
    }
    const double kl = S->negent[r] - cross + lse * mass;
    return kl > 0 ? kl : 0; /* rounding, for equal distributions */
}

/* The stream S->R from layer l (n_layers: the head alone; part 1: from
 * its FFN, the stream being past its attention) through the later layers
 * and the head, with linear `kind` of layer l (LHEAD: the head) replaced
 * by w (NULL: none); each row's distribution stored as the base, or the
 * mean KL divergence from it. */
static llm_status run_rows(struct qctx *q, int32_t l, int part, int kind,
                           const struct llm_weight *w, int store, double *kl)
{
    struct llm_qsens *S = q->sens;
    const struct llm_config *cf = &q->m->c;
    const int64_t dim = cf->dim, nv = cf->n_vocab, rows = (int64_t)S->nw * S->n;
    for (int32_t j = l; j < cf->n_layers; j++) {
        struct llm_layer_lin lin;
        memset(&lin, 0, sizeof lin);
        const struct llm_weight **slot[NLIN] = { &lin.wq, &lin.wk, &lin.wv, &lin.wo,
                                                 &lin.gate, &lin.up, &lin.down };
        if (j == l && w && kind < NLIN)
            *slot[kind] = w;
        for (int32_t win = 0; win < S->nw; win++)
            for (int32_t off = 0; off < S->n; off += q->nb) {
                const int32_t n = S->n - off < q->nb ? S->n - off : q->nb;
                float *x = S->R + ((int64_t)win * S->n + off) * dim;
                if (j != l || part == 0) {
                    LLM_TRY(llm_layer_norm(q->ctx, j, LLM_NORM_ATTN, x, S->xb, n));
                    LLM_TRY(llm_layer_attention(q->ctx, j, &lin, S->xb, 0, off, n, S->att, NULL));
                    LLM_TRY(llm_layer_attn_out(q->ctx, j, &lin, S->att, x, n));
                }
                LLM_TRY(llm_layer_norm(q->ctx, j, LLM_NORM_FFN, x, S->xb, n));
                LLM_TRY(llm_layer_ffn_hidden(q->ctx, j, &lin, S->xb, S->h, n));
                LLM_TRY(llm_layer_ffn_out(q->ctx, j, &lin, S->h, x, n));
            }
    }
    double sum = 0;
    const int32_t lr = q->nb < LOGIT_ROWS ? q->nb : LOGIT_ROWS; /* the context's batch at most */
    for (int64_t r = 0; r < rows; r += lr) {
        const int32_t n = (int32_t)(rows - r < lr ? rows - r : lr);
        LLM_TRY(llm_layer_norm(q->ctx, 0, LLM_NORM_OUT, S->R + r * dim, S->xb, n));
        LLM_TRY(llm_layer_logits(q->ctx, kind == LHEAD ? w : NULL, S->xb, S->z, n));
        for (int32_t i = 0; i < n; i++)
            sum += row_kl(S, r + i, S->z + (int64_t)i * nv, nv, store);
    }
    if (kl)
        *kl = sum / (double)rows;
    return LLM_OK;
}

/* run_rows, its time in the report's `sensitivity` phase */
static llm_status run(struct qctx *q, int32_t l, int part, int kind, const struct llm_weight *w,
                      int store, double *kl)
{
    const double t0 = llm_q_now();
    llm_status s = run_rows(q, l, part, kind, w, store, kl);
    q->ph[LLM_QP_SENS] += llm_q_now() - t0;
    return s;
}

/* The scored rows of the current stream q->X into S->R. */
static void take_rows(struct qctx *q)
{
    struct llm_qsens *S = q->sens;
    const int64_t dim = q->m->c.dim;
    for (int32_t w = 0; w < S->nw; w++)
        memcpy(S->R + (int64_t)w * S->n * dim, q->X + (int64_t)w * q->cal.len * dim,
               (size_t)(S->n * dim) * sizeof(float));
}

llm_status llm_qsens_begin(struct qctx *q)
{
    const struct llm_config *cf = &q->m->c;
    struct llm_qsens *S = llm_calloc(1, sizeof *S);
    if (!S)
        return LLM_E_NOMEM;
    q->sens = S;
    /* the leading tokens of as many windows as make LLM_QSENS_TOKENS */
    S->n = q->cal.len < LLM_QSENS_TOKENS ? q->cal.len : LLM_QSENS_TOKENS;
    S->nw = LLM_QSENS_TOKENS / S->n;
    S->nw = S->nw > q->cal.n ? q->cal.n : S->nw;
    const int64_t rows = (int64_t)S->nw * S->n, dim = cf->dim, nv = cf->n_vocab;
    const int64_t qd = (int64_t)cf->n_heads * cf->head_dim;
    S->R = llm_malloc((size_t)(rows * dim) * sizeof(float));
    S->xb = llm_malloc((size_t)(q->nb * dim) * sizeof(float));
    S->att = llm_malloc((size_t)(q->nb * qd) * sizeof(float));
    S->h = llm_malloc((size_t)(q->nb * cf->ffn_dim) * sizeof(float));
    S->z = llm_malloc((size_t)(LOGIT_ROWS * nv) * sizeof(float));
    S->pb = llm_malloc((size_t)(rows * nv) * sizeof(float));
    S->negent = llm_malloc((size_t)rows * sizeof(double));
    if (!S->R || !S->xb || !S->att || !S->h || !S->z || !S->pb || !S->negent)
        return llm_error_set(LLM_E_NOMEM, "--target-bpw's base distributions: %.1f MB not "
                             "available", (double)(rows * nv) * 4 / 1e6);
    /* q->X holds the embeddings: the float model from its first layer */
    take_rows(q);
    return run(q, 0, 0, LQ, NULL, 1, NULL);
}

llm_status llm_qsens_kl(struct qctx *q, int32_t l, int kind, const float *W, int64_t rows,
                        int64_t cols, double *kl)
{
    const struct llm_weight w = { .type = LLM_TYPE_F32, .data = W, .ne0 = cols, .rows = rows };
    if (kind == LHEAD && q->m->c.tie_embeddings) {
        /* a tied table is the embedding too: the whole model, from the
         * rows W gives the tokens */
        struct llm_qsens *S = q->sens;
        for (int32_t win = 0; win < S->nw; win++)
            LLM_TRY(llm_layer_embed(q->ctx, &w, q->cal.tokens + (int64_t)win * q->cal.len, S->n,
                                    S->R + (int64_t)win * S->n * q->m->c.dim));
        return run(q, 0, 0, kind, &w, 0, kl);
    }
    take_rows(q);
    /* the stage holds layer l's input while it measures q, k, v and o, and
     * the stream past the attention for gate, up and down (gptq_block);
     * the head the stream past the last layer */
    return run(q, kind == LHEAD ? q->m->c.n_layers : l, kind >= LG && kind <= LD, kind, &w, 0, kl);
}
