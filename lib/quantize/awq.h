/* awq.h: the numeric core of AWQ (activation-aware weight quantization,
 * quantization.md section 2): the per-input-channel scale search, the clip
 * search, the pseudo-quantizer, and the folding of scales into the
 * neighbouring norm or linear. The driver (calibration, layer-by-layer
 * forward, recipes) lives in llm-quantize; these are pure functions of
 * float32 buffers, row-major, W (rows, cols) = PyTorch's weight[out][in].
 *
 * Differences from llm-awq / AutoAWQ, on purpose:
 *   - The scale-search loss is measured on the outputs of the scaled linears
 *     themselves, sum over the linears of mean((X W^T - (X/s) Q(W s)^T)^2),
 *     not on the output of the enclosing module (whole self_attn for q/k/v,
 *     whole mlp for gate/up): a cheaper objective that needs no attention or
 *     MLP forward per grid point.
 *   - Q is the grid of the target llm_type (quant/grid.h,
 *     llm_qgrid_group_awq): the group's d and m are rounded to their stored
 *     precision (binary16 for grouped types) where the reference keeps them
 *     in the model's float type, so the searched loss is the loss of the
 *     weights the file will hold.
 *   - The loss is computed in float32 with double sums. Since
 *     X W^T - (X/s) Q(W s)^T = X D^T with D = W - Q(W s)/s, and
 *     sum over tokens (X d)^2 = d^T G d with the Gram matrix G = X^T X, the
 *     search uses whichever of X or G is cheaper (G about when n > cols);
 *     both give the same number up to rounding. With several linears the
 *     per-linear means are summed, so each linear weighs the same whatever
 *     its number of rows.
 *   - A last group shorter than the group size (cols not a multiple of it)
 *     is its own group; the reference requires a multiple.
 *   - llm_awq_search_scale_gram accepts G accumulated over every calibration
 *     token, so the objective need not be measured on a subsample.
 */
#ifndef LLM_QUANTIZE_AWQ_H
#define LLM_QUANTIZE_AWQ_H

#include <stdint.h>

#include "../common/status.h"
#include "../quant/types.h"

/* Pseudo-quantize W (rows, cols) in place on the grid of integer type t
 * (quant/grid.h; LLM_E_INVALID for other types) with AWQ's rule, group by
 * group: W = value(code(W)), the values that packing W with
 * llm_qgrid_pack_row and dequantizing would give back. */
llm_status llm_awq_fake_quant(enum llm_type t, float *W, int64_t rows, int64_t cols);

/* d (cols) = w - Q(w s) / s: one scale candidate's error row as the search
 * computes it (Q: AWQ's rule on t's grid; t an integer grid type or a GGUF
 * block type, unweighted), by the scalar steps (vec 0) or, on an integer
 * grid where the CPU has AVX-512, by the vector ones (vec 1: the same bits;
 * LLM_E_UNSUPPORTED elsewhere). For the tests. */
llm_status llm_awq_candidate_row(enum llm_type t, const float *w, const float *s, float *d,
                                 int64_t cols, int vec);

struct llm_awq_scale_result {
    float ratio;        /* alpha of the chosen grid point, in [0, 1) */
    int duo;            /* the chosen scales have the weights' term (duo scaling) */
    double loss_before; /* plain RTN (s = 1) */
    double loss_best;   /* at the chosen scales */
};

/* Scale search (auto_scale) for n_w linears W[j] (rows[j], cols) that read
 * the same input. X (n, cols) is a sample of those inputs; x_mean (cols) =
 * mean |x| per input channel over ALL calibration tokens (get_act_scale).
 * For alpha in {0, 1/n_grid, ..., (n_grid-1)/n_grid}:
 *     s = x_mean^alpha                          (duo_scaling = 0, llm-awq)
 *     s = x_mean^alpha / (w_mean^(1-alpha) + 1e-4)  (duo_scaling = 1, AutoAWQ)
 * with w_mean (cols) the mean over the rows of every W[j] of |w| / (the
 * group's max |w| + 1e-6); then s = max(s, 1e-4), s /= sqrt(max(s) min(s)),
 * inf/NaN entries set to 1 (AutoAWQ); loss = sum_j mean over (n, rows[j]) of
 * (X W_j^T - (X/s) Q(W_j s)^T)^2. The first smallest loss wins. Writes the
 * winning s (cols) and *r; history (n_grid) receives each grid point's loss
 * when not NULL. duo_scaling 2 searches both forms (2 n_grid points; history
 * gets the duo ones) and keeps the lower loss, r->duo saying which won.
 * W is not modified. Under duo_scaling alpha = 0 is not plain
 * RTN, and the reference keeps the best grid point even when it is worse
 * than r->loss_before; so does this function (the driver may compare).
 * n_threads >= 1; n_grid <= 1000. LLM_E_INVALID for bad arguments,
 * LLM_E_NOMEM. Cost: (n_grid + 1) x sum(rows) x min(n, cols) x cols
 * multiply-adds, plus n x cols^2 once when n > cols (forming G). */
llm_status llm_awq_search_scale(enum llm_type t, const float *X, int64_t n, int64_t cols,
                                const float *x_mean, int n_w, const float *const *W,
                                const int64_t *rows, int n_grid, int duo_scaling, float *s,
                                struct llm_awq_scale_result *r, double *history, int n_threads);

/* The same from the Gram matrix G (cols, cols) = sum over n_tok tokens of
 * x x^T (symmetric, both halves filled) instead of the tokens themselves:
 * the loss is d^T G d / n_tok per row d of D. */
llm_status llm_awq_search_scale_gram(enum llm_type t, const float *G, int64_t n_tok,
                                     int64_t cols, const float *x_mean, int n_w,
                                     const float *const *W, const int64_t *rows, int n_grid,
                                     int duo_scaling, float *s, struct llm_awq_scale_result *r,
                                     double *history, int n_threads);

/* Clip search (auto_clip) for one linear W (rows, cols) whose scales have
 * already been applied, so X (n, cols) must be the matching inputs (already
 * divided by s). Per (row, group) with org_max = max |w| over the group,
 * candidates max_val = org_max * (1 - i/n_grid) for
 * i = 0 .. (int)(max_shrink * n_grid) - 1 (at least i = 0, no clipping);
 * error = mean over tokens of (x_g . (Q(clamp(w_g, +-max_val)) - w_g))^2,
 * the group's share of the output error; the first smallest error wins, and
 * W is clamped in place to +-best max_val (so only ever to <= org_max).
 * err_before / err_after (either may be NULL) receive the mean over (row,
 * group) of that error without clipping and at the chosen max_val, so
 * err_after <= err_before. The reference skips q/k projections and
 * sub-samples about 512 tokens (the driver decides). Cost: rows x cols x n x
 * (int)(max_shrink * n_grid) multiply-adds. */
llm_status llm_awq_search_clip(enum llm_type t, const float *X, int64_t n, int64_t cols, float *W,
                               int64_t rows, int n_grid, float max_shrink, double *err_before,
                               double *err_after, int n_threads);

/* Folding, as llm-awq's scale_ln_fcs / scale_fc_fc (the products of the
 * model are unchanged up to rounding): */
/* norm_w (cols) /= s, and bias (cols) when not NULL: the norm that feeds
 * the scaled linears absorbs 1/s. */
void llm_awq_fold_norm(float *norm_w, float *bias, const float *s, int64_t cols);
/* W[:, i] *= s[i] for W (rows, cols): the linears that read x/s. */
void llm_awq_scale_cols(float *W, int64_t rows, int64_t cols, const float *s);
/* The producing linear absorbs 1/s: W[i, :] /= s[i - (rows - n_s)] and
 * bias[i] likewise (bias (rows) or NULL) for the last n_s rows of W
 * (rows, cols) (scale_fc_fc divides the last len(s) rows, so that a fused
 * qkv weight scales only its v part). LLM_E_INVALID when n_s > rows. */
llm_status llm_awq_fold_rows(float *W, int64_t rows, int64_t cols, float *bias, const float *s,
                             int64_t n_s);

/* Add |x| per channel of X (n, cols) to sum (cols), in double: x_mean is
 * sum / (total tokens) once every calibration batch has been added. */
void llm_awq_abs_sum_add(double *sum, const float *X, int64_t n, int64_t cols);

#endif
