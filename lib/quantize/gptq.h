/* gptq.h: the GPTQ algorithm on one weight matrix (quantization.md 1.1,
 * 1.3; IST-DASLab/gptq's fasterquant, with AutoGPTQ's static groups and
 * GPTQModel's damping retry). The driver collects H and calls this once per
 * linear layer; the grid, the group rule and the packing are grid.h's.
 */
#ifndef LLM_QUANTIZE_GPTQ_H
#define LLM_QUANTIZE_GPTQ_H

#include <stdint.h>

#include "../common/status.h"
#include "../quant/types.h"

struct llm_gptq_params {
    enum llm_type type; /* target grid type (llm_qgrid_of): an integer grid, fp8_e4m3, or a
                           GGUF block type (q4_k ...: its blocks' scales fitted by its own
                           quantizer with diag(H) as importance, gptq.c) */
    float damp;         /* percdamp: the fraction of mean(diag(H)) added to the diagonal */
    int block_size;     /* lazy-batch columns; 0: 128 */
    int act_order;      /* columns in descending diag(H) order */
    int static_groups;  /* group parameters from the original W before any update */
    int n_threads;      /* threads for the row-parallel work (0: 1) */
    int rtn_grid;       /* 1: each group's scale and zero by the type's round-to-nearest
                           rule (llm_qgrid_group_rtn); 0: GPTQ's find_params, as the
                           reference */
    const int32_t *order; /* with act_order: the column order to use (cols, a
                             permutation), instead of diag(H) descending; lets
                             row blocks quantized with their own H share one
                             order (NULL: diag(H)'s) */
    float scale;        /* fp8_e4m3 only: > 0 gives every row this scale (one
                           scale per tensor); 0: each row's absmax / 448 */
    /* GPTAQ's asymmetric calibration (Li et al. 2025): with dxxt, the target
     * is the float model's output W x_f, not W x with x the input of the
     * already-quantized model that H is made of. dxxt (cols, cols), original
     * column order, is mean (x_f - x) x^T on H's scale (H = mean x x^T);
     * NULL: plain GPTQ. alpha weighs its correction (the reference's 0.25). */
    const float *dxxt;
    float alpha;
    /* > 0: each group's range shrunk for the least sum |Q - W|^mse over its
     * weights (llm_qgrid_group_mse), as the reference's Quantizer with mse
     * (norm 2.4 there); integer grids only. 0: off, the default. */
    float mse;
    /* The GGUF block types (q4_k ...; quant/kquants.h) only: 1 rounds each
     * row to nearest by its type's quantizer with diag(H) as the importance
     * of each column (llama.cpp's imatrix), with no error feedback; the
     * stats' err_rtn is then the error without the importance. */
    int rtn_only;
};

/* type, with the reference defaults: damp 0.01, block 128, no act-order, no
 * static groups, one thread. */
void llm_gptq_params_init(struct llm_gptq_params *p, enum llm_type type);

struct llm_gptq_stats {
    /* tr((W - Q) H (W - Q)^T) / rows with the original W and H (no damping):
     * RTN on the same grid (llm_qgrid_group per group of the original W,
     * nearest codes), and GPTQ's Q */
    double err_rtn, err_gptq;
    int damp_retries; /* Cholesky failures recovered by raising damp by 0.01 each time */
    double damp;      /* the percdamp that succeeded */
};

/* Act-order's column order: order (n) = the columns by descending d[i *
 * stride], ties lower column first (diag(H) is H with stride n + 1).
 * LLM_E_NOMEM. */
llm_status llm_gptq_order(const float *d, int64_t stride, int64_t n, int32_t *order);

/* Quantize W (rows, cols) float32 with the Hessian H (cols, cols) = (2/n) sum x x^T
 * of the calibration inputs; both are destroyed.
 *
 * On return W holds the quantized weights as the file will give them back
 * (dequantized, ORIGINAL column order) and out (rows * llm_type_row_bytes(type,
 * cols) bytes) the packed rows. With act_order, without static_groups and
 * with more than one group per row, the packed columns are stored in
 * permuted order: perm (cols) receives perm[i] = original column of stored
 * column i (so y = Wstored . x[perm]); otherwise (static groups, _ch types,
 * a single group) the rows are stored in original order and perm gets the
 * identity. cols need not be a multiple of the group (the last group is
 * short; the packed row pads).
 *
 * Dynamic groups (grouped types without static_groups) take their
 * parameters (llm_qgrid_group) from W as it stood at the start of the lazy
 * batch holding the group's first column, as the reference does; with
 * groups shorter than block_size that is not the fully updated W (gptq.c).
 *
 * fp8_e4m3 is GPTQ on the E4M3 grid with round to nearest's scales: each
 * row's absmax / 448, or params.scale for every row.
 *
 * st may be NULL; computing it costs about as much as the quantization
 * itself (two quadratic forms in H per row).
 *
 * Errors: LLM_E_INVALID for bad arguments, a non-finite W or H, a negative
 * diagonal of H, or an H that is not positive definite even after raising
 * damp by 0.01 ten times; LLM_E_NOMEM. */
llm_status llm_gptq_quantize(const struct llm_gptq_params *p, float *W, int64_t rows,
                             int64_t cols, float *H, void *out, int32_t *perm,
                             struct llm_gptq_stats *st);

#endif
