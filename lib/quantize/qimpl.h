/* qimpl.h: state shared by quantize.c (plan, output file, RTN) and
 * layer.c (calibrated layer-by-layer processing for GPTQ and AWQ). */
#ifndef LLM_QUANTIZE_QIMPL_H
#define LLM_QUANTIZE_QIMPL_H
#include <stdint.h>

#include "../model/model_impl.h"
#include "calib.h"
#include "quantize.h"

/* One tensor of the output file. */
struct qt {
    struct llm_tensor *in;      /* the input tensor (NULL: made here, e.g. a .perm) */
    char name[LLM_MAX_NAME];
    struct llm_qspec spec;      /* resolved */
    enum llm_type to;           /* output type */
    int stage;                  /* -1: before the blocks, 0..n_layers-1: block, n_layers: after */
    int is_linear;              /* a weight matrix the methods apply to */
    void *data;                 /* produced bytes, owned until written (NULL: fill on demand) */
    uint64_t nbytes;
    int32_t *perm;              /* act-order permutation of this weight (cols) */
    size_t report;              /* index into the report + 1, 0: none */
    int imatrix;                /* rtn to a GGUF block type weighted by the calibration
                                   inputs: run in the gptq flow (gptq.h rtn_only) */
    /* --target-bpw: the candidate types and their measured output errors
     * (sum over rows of tr((W - Q) H (W - Q)^T), Q rounded to nearest with
     * importance); measure: the first pass, which measures instead of
     * quantizing and leaves the weights float */
    int measure;
    int n_cand;
    enum llm_type cand[LLM_QCAND_MAX];
    double cand_err[LLM_QCAND_MAX];
    double cand_kl[LLM_QCAND_MAX]; /* the KL divergence each is expected to add (sens.c) */
};

/* The linears of a decoder block in the order calibration takes them, and
 * the output head. */
enum { LQ, LK, LV, LO, LG, LU, LD, NLIN, LHEAD = NLIN };

enum qflow { FLOW_NONE, FLOW_GPTQ, FLOW_AWQ };

/* --target-bpw's choice for a tensor (quantize.c) */
struct qchoice {
    char name[LLM_MAX_NAME];
    enum llm_type type;
    int measured;               /* 0: an untied embedding table, type by target alone */
    int n_cand;
    enum llm_type cand[LLM_QCAND_MAX];
    double cand_err[LLM_QCAND_MAX];
    double cand_kl[LLM_QCAND_MAX];
};

struct llm_qsens;

struct qctx {
    struct llm_file *in;
    struct llm_model *m;
    const struct llm_quantize_params *p;
    struct llm_qreport *rep;
    struct qt *t;               /* (n_t) in output order */
    size_t n_t;
    enum qflow flow;
    int stage_done;             /* stages processed: -1 .. n_layers */
    int measure;                /* --target-bpw's first pass */
    const struct qchoice *choice; /* --target-bpw's types for the second (n_choice) */
    struct llm_qsens *sens;     /* the first pass's float-model distributions (sens.c) */
    size_t n_choice;
    /* calibration */
    struct llm_calib cal;
    struct llm_context *ctx;    /* the forward pass's stages (model/layer.h), KV of a window */
    int32_t nb;                 /* tokens a chunk at most (the context's batch) */
    float *xb, *xb2;            /* (nb, dim) a chunk's normed input (xb2: GPTAQ's float one) */
    float *hb;                  /* (nb, ffn_dim) a chunk's FFN hidden state */
    float *X;                   /* (N, dim) residual stream of every window, N = n * len */
    float *A;                   /* (N, q dim) attention outputs */
    float *Xf, *Af;             /* GPTAQ: X and A of the float model (else NULL) */
    float *Hc;                  /* GPTQ: (N, ffn_dim) the FFN's hidden states as down's
                                   Hessian saw them, for the residual after it (else NULL:
                                   computed again) */
    int64_t N;
    double ph[LLM_QP_N];        /* seconds by phase (the report's calib_seconds) */
    int hc_kept;                /* Hc was allocated (the report's calib_ffn_kept) */
    /* progress */
    int64_t work_done, work_total;
    double t0;
    char stage_name[LLM_MAX_NAME + 32];
};

double llm_q_now(void);
void llm_q_progress(struct qctx *q, int64_t add);
struct qt *llm_q_find(struct qctx *q, const char *name);
/* "<base>.perm" of weight "<base>.weight" (act-order), into out (LLM_MAX_NAME). */
void llm_q_perm_name(const char *weight, char *out);
/* A report entry for t, or for its expert `expert` (a 3-D tensor of
 * experts; -1: the tensor), created on first use. */
struct llm_qtensor_report *llm_q_report(struct qctx *q, struct qt *t, int32_t expert);
/* The weights of t as float32: (rows, cols), llm_malloc'd. */
llm_status llm_q_load_f32(struct qctx *q, struct qt *t, float **out, int64_t *rows, int64_t *cols);
/* Quantize W (rows, cols) to t->to by t's method without calibration
 * (RTN / NF4 / FP8 / keep), into rows row0.. of t->data (allocated for the
 * whole tensor when NULL); W becomes the values the file will give back.
 * expert: the report entry (llm_q_report). */
llm_status llm_q_quantize_plain(struct qctx *q, struct qt *t, int32_t expert, float *W,
                                int64_t row0, int64_t rows, int64_t cols);
/* FP8's scale for the values W (n): their largest finite magnitude / 448. */
float llm_q_fp8_absmax_scale(const float *W, int64_t n);
/* The scale of every row when t is fp8 with one scale per tensor:
 * llm_q_fp8_absmax_scale of the tensor; 0 otherwise (a scale per row). */
float llm_q_fp8_tensor_scale(const struct qt *t, const float *W, int64_t n);

/* The type that stores rows of ne0 elements on t's grid with the least
 * padding: per channel when one group covers the row, else the largest
 * group no larger than t's that takes the fewest bytes (quantize.c). */
enum llm_type llm_q_fit_group(enum llm_type t, int64_t ne0);

/* layer.c: calibrated processing of stage s (a block, or the head) */
llm_status llm_q_calib_begin(struct qctx *q);
llm_status llm_q_calib_stage(struct qctx *q, int stage);
void llm_q_calib_end(struct qctx *q);

/* sens.c: --target-bpw's first pass. The model's next-token distributions
 * over the first LLM_QSENS_TOKENS calibration tokens, from q->X (the
 * embeddings, before the first stage), kept in q->sens. */
#define LLM_QSENS_TOKENS 512
llm_status llm_qsens_begin(struct qctx *q);
void llm_qsens_free(struct qctx *q);
/* kl: their mean KL divergence when linear `kind` (LQ .. LD) of layer l,
 * or the head (LHEAD; a tied table, the embedding too), takes the values W
 * (rows, cols), run from the measuring stage's stream q->X (a tied table:
 * from the embedding) to the head with the model's own weights. */
llm_status llm_qsens_kl(struct qctx *q, int32_t l, int kind, const float *W, int64_t rows,
                        int64_t cols, double *kl);

#endif
