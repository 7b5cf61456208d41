/* quantize.h: post-training quantization of a model file (llm-quantize).
 *
 * Methods: round to nearest (rtn), GPTQ, AWQ, NF4 and FP8, chosen per tensor
 * by a default spec and an optional YAML recipe. GPTQ and AWQ calibrate on
 * text (calib.h) layer by layer: the calibration activations of the residual
 * stream are kept for all windows, one layer's weights are dequantized to
 * float at a time, and the output file is streamed tensor by tensor, so
 * peak memory is about one layer plus the activations, whatever the model
 * size (the input is read through mmap).
 *
 * GPTQ is true-sequential (quantization.md 1.1): within a layer the groups
 * [q,k,v] -> [o] -> [gate,up] -> [down] are quantized in that order, each
 * Hessian collected from inputs computed with the already-quantized
 * weights, and the next layer sees this layer's quantized output. AWQ
 * follows llm-awq/AutoAWQ (quantization.md 2.1): per layer, activation
 * statistics from the float layer, a scale search per scaling group
 * (attn_norm -> q,k,v; v -> o when there is no GQA; ffn_norm -> gate,up;
 * up -> down), the scales folded into the preceding norm or linear layer,
 * a clip search (not for q/k), then grouped integer quantization with zero
 * points; the next layer's input is the float layer's output.
 *
 * A mixture of experts is quantized expert by expert; GPTQ and AWQ
 * calibrate each expert on the tokens routed to it (llm-quantize(1),
 * "Mixtures of experts"; LLM_MOE_MIN_TOKENS_PER_INPUT).
 */
#ifndef LLM_QUANTIZE_QUANTIZE_H
#define LLM_QUANTIZE_QUANTIZE_H
#include <stdint.h>

#include "../common/status.h"
#include "../format/file.h"
#include "../format/import.h"
#include "../quant/types.h"

enum llm_qmethod {
    LLM_QM_KEEP, /* leave the tensor as it is */
    LLM_QM_RTN,
    LLM_QM_GPTQ,
    LLM_QM_AWQ,
    LLM_QM_NF4,
    LLM_QM_FP8,
};
/* rtn to a GGUF block type (q4_k ...) with calibration text weighs each
 * column by its mean squared activation (llama.cpp's importance matrix):
 * the calibration flow of gptq collects them (gptq.h rtn_only). */
const char *llm_qmethod_name(enum llm_qmethod m);
llm_status llm_qmethod_parse(const char *s, enum llm_qmethod *out);

/* What to do with one tensor. Fields left at -1 take the default's value. */
struct llm_qspec {
    int method;        /* enum llm_qmethod */
    int bits;          /* 3, 4 or 8 (rtn, gptq; awq: 3 or 4) */
    int group;         /* 32, 64, 128; 0: one group per row (per channel) */
    int sym;           /* 1 symmetric, 0 zero points */
    int double_quant;  /* nf4: fp8 block scales x a row scale (nf4_dq) */
    int per_tensor;    /* fp8's scale: 0 per row (channel), 1 one for the whole tensor,
                          LLM_FP8_SCALE_AUTO whichever GPTQ leaves the smaller output
                          error with on the calibration data (needs it) */
    int type;          /* an explicit llm_type (rtn/keep: convert to it), -1 none */
};
#define LLM_FP8_SCALE_AUTO 2
/* All fields -1. */
void llm_qspec_unset(struct llm_qspec *s);
/* The defaults of the command line: method rtn, bits 4, group 128,
 * symmetric at 8 bits and zero points at 4 bits (AWQ: always zero points
 * unless sym is given). */
void llm_qspec_default(struct llm_qspec *s);
/* The llm_type that spec `s` produces for a tensor now of type `cur`;
 * LLM_E_INVALID with a message for impossible combinations (nf4 with group
 * 32, awq at 8 bits...). */
llm_status llm_qspec_type(const struct llm_qspec *s, enum llm_type cur, enum llm_type *out);

/* llama.cpp's named mixtures of GGUF types (llama-quantize's Q4_K_M ...,
 * llama_tensor_get_type of b4748, for models without experts): a base
 * type for the linear layers, more bits for some layers' attn_v and
 * ffn_down, q6_k for the output head (q8_0 when its rows do not hold
 * 256-element blocks; a tied embedding table is the head). */
enum llm_qmix { LLM_QMIX_NONE, LLM_QMIX_Q4_K_S, LLM_QMIX_Q4_K_M, LLM_QMIX_Q5_K_S,
                LLM_QMIX_Q5_K_M, LLM_QMIX_Q6_K, LLM_QMIX_Q3_K_S, LLM_QMIX_Q3_K_M,
                LLM_QMIX_Q3_K_L };
/* "q4_k_m" ... (case-insensitive); LLM_E_INVALID naming the choices. */
llm_status llm_qmix_parse(const char *s, enum llm_qmix *out);
const char *llm_qmix_name(enum llm_qmix m);
/* The type mixture m gives tensor `name` (layer `layer` of n_layers, -1
 * outside the blocks; head: the output head or a tied embedding table),
 * before the fallback of rows that do not hold its blocks
 * (llm_q_fallback). */
enum llm_type llm_qmix_type(enum llm_qmix m, const char *name, int layer, int n_layers, int head,
                            int64_t ne0);
/* What llama.cpp stores a GGUF block type as when rows of ne0 elements do
 * not hold its blocks: q4_k -> q5_0, q5_k -> q5_1, q6_k and q8_k -> q8_0,
 * q2_k, q3_k and iq4_xs -> iq4_nl, and f16 when that does not fit either;
 * t itself when it fits (or is not such a type). */
enum llm_type llm_q_fallback(enum llm_type t, int64_t ne0);

/* A recipe: rules "tensor-name glob -> spec", first match wins; a tensor
 * no rule matches gets the default (the recipe's `default:` over the
 * command line's). */
struct llm_recipe_rule {
    char *match;             /* fnmatch(3) pattern on the tensor name */
    struct llm_qspec spec;   /* unset fields inherit from the default */
    int line;                /* 1-based line of the rule in the YAML */
};
struct llm_recipe {
    struct llm_qspec def;    /* `default:` (unset fields: command line) */
    struct llm_recipe_rule *rules;
    size_t n_rules;
    char *text;              /* the YAML as read, stored in the output's metadata */
};
/* Parse a recipe (YAML text of `len` bytes). Errors name the file and the
 * line: "recipe.yaml:7: unknown key 'bitz' (match, method, bits, ...)". */
llm_status llm_recipe_parse(struct llm_recipe **out, const char *text, size_t len,
                            const char *path);
void llm_recipe_free(struct llm_recipe *r);
/* The spec for tensor `name`: `def` overridden by the recipe's default and
 * by the first matching rule (r may be NULL). *line (optional) = the rule's
 * line, 0 when no rule matched. */
void llm_recipe_resolve(const struct llm_recipe *r, const struct llm_qspec *def, const char *name,
                        struct llm_qspec *out, int *line);

/* Progress of a run, for a progress bar. */
struct llm_qprogress {
    int64_t done, total;     /* units of work (weight elements processed) */
    const char *stage;       /* "calibrate", "layer 3/30", "write", ... */
    double elapsed;          /* seconds since the start */
};

/* The most candidate types --target-bpw weighs for one tensor. */
#define LLM_QCAND_MAX 8

/* What happened to one tensor (for --report). Errors are mean squared
 * errors: weight = mean (W - Q)^2; output = tr((W-Q) H (W-Q)^T) / (rows *
 * cols) with H the mean x x^T over the calibration tokens, i.e. the mean
 * squared error of the layer's outputs, for plain RTN on the same grid
 * ("before") and for the method ("after"); -1 when not measured (no
 * calibration). */
struct llm_qtensor_report {
    char name[LLM_MAX_NAME];
    int layer;               /* -1 for tensors outside the blocks */
    enum llm_qmethod method;
    enum llm_type from, to;
    int64_t rows, cols;
    double weight_err;
    double out_err_before, out_err_after;
    double awq_ratio;        /* AWQ: the chosen scale exponent (-1: not scaled) */
    int fp8_scale;           /* fp8: 1 one scale for the tensor, 0 one per row; -1 other types
                                (with --fp8-scale auto: the scope chosen) */
    double seconds;
    int32_t expert;          /* an expert of a 3-D tensor of experts; -1: the tensor */
    int64_t tokens;          /* calibration tokens the expert was routed (-1: not an expert
                                of a calibrated method) */
    int fallback;            /* 1: too few tokens for its Hessian (LLM_MOE_MIN_TOKENS):
                                rounded to nearest instead */
    /* --target-bpw: the types weighed and their measured output errors
     * (sum over the rows of tr((W - Q) H (W - Q)^T), Q rounded to nearest
     * with the importance), the chosen one being `to`, and the KL
     * divergence each is expected to add to the model's output (the
     * allocation's cost) */
    int n_cand;
    enum llm_type cand[LLM_QCAND_MAX];
    double cand_err[LLM_QCAND_MAX];
    double cand_kl[LLM_QCAND_MAX];
};
/* The parts of a calibrated run's time (llm_qreport.calib_seconds). */
enum llm_qphase {
    LLM_QP_TOTAL,   /* the calibration: reading the text, and every stage */
    LLM_QP_FORWARD, /* the forward passes: norms, attention, FFN, residuals */
    LLM_QP_HESSIAN, /* sums of x x^T (and v's attention-weighted inputs) */
    LLM_QP_SOLVE,   /* GPTQ (or rounding) of each matrix on its Hessian */
    LLM_QP_SEARCH,  /* AWQ's scale and clip searches and packing */
    LLM_QP_SENS,    /* --target-bpw: the model's output with each tensor quantized */
    LLM_QP_N
};

struct llm_qreport {
    struct llm_qtensor_report *t;
    size_t n, cap;
    double seconds;          /* whole run */
    int64_t calib_windows, calib_len;
    uint64_t calib_text_tokens;
    uint64_t bytes_in, bytes_out; /* weight bytes (auxiliary tensors excluded) */
    uint64_t params;
    int dequantized_input;   /* the input had quantized weights (--allow-requantize) */
    double target_bpw;       /* --target-bpw (0: none) */
    /* where the calibrated stages' time went (seconds; all 0 without
     * calibration): llm_qphase */
    double calib_seconds[LLM_QP_N];
    int calib_ffn_kept;      /* GPTQ kept the FFN's hidden states between down's Hessian and
                                its residual (else they were computed twice) */
    int calib_bf16;          /* the calibration's products ran in bf16 on the CPU's matrix
                                units (llm-quantize(1)); 0: in float */
};
void llm_qreport_free(struct llm_qreport *r);

/* GPTAQ's weight when none is given: the reference's (on SmolLM2 1 did
 * about as well: 26.94 against 26.87, README). */
#define LLM_GPTAQ_ALPHA 0.25f
/* The norm of the range search when none is given: the reference's
 * (IST-DASLab/gptq's Quantizer, norm=2.4; GPTQModel's mse=2.4). */
#define LLM_GPTQ_MSE 2.4f
/* GPTQ's Hessian of a matrix with K inputs, mean x x^T over the
 * calibration tokens, has K(K+1)/2 entries estimated from those tokens: with
 * fewer than this many tokens per input GPTQ fits the rounding errors to
 * the sample rather than to the model, and a run warns (measurements in
 * llm-quantize(1)). */
#define LLM_GPTQ_TOKENS_PER_INPUT 4
/* An expert of a mixture of experts sees only the calibration tokens the
 * router sends it. GPTQ and AWQ calibrate an expert routed at least as
 * many tokens as its linears have inputs (below that its Hessian is
 * singular: directions the sample never covers); one routed fewer is
 * rounded to nearest on the same grid, and the report says so
 * (llm_qtensor_report.fallback). */
#define LLM_MOE_MIN_TOKENS_PER_INPUT 1

struct llm_quantize_params {
    struct llm_qspec def;              /* complete (llm_qspec_default + options) */
    const struct llm_recipe *recipe;   /* optional */
    enum llm_qmix mix;                 /* a named mixture of GGUF types for the tensors no
                                          recipe rule names (LLM_QMIX_NONE: def's type) */
    /* > 0: each linear layer's GGUF type chosen so that the weights take
     * this many bits per weight overall, by the output error each
     * candidate type gives on the calibration data (needs calib_path; a
     * first pass measures, quantize.c); the method is def's (rtn: with
     * importance, or gptq) */
    double target_bpw;
    /* calibration (gptq, awq) */
    const char *calib_path;
    int32_t n_samples, seq_len;        /* default 128 windows of 512 tokens */
    uint64_t seed;
    /* gptq */
    float damp;                        /* default 0.01 */
    int block_size;                    /* default 128 */
    int act_order, static_groups;
    int reference_grid;                /* group scales by GPTQ's find_params instead of the
                                          type's round-to-nearest rule (llm_qgrid_group_rtn) */
    float gptaq_alpha;                 /* > 0: GPTAQ's asymmetric calibration with this
                                          weight (llm_gptq_params.alpha; the usual value is
                                          LLM_GPTAQ_ALPHA); 0 (default): plain GPTQ */
    float gptq_mse;                    /* > 0: each group's range searched for the least
                                          error in this norm (llm_gptq_params.mse; the
                                          reference's is LLM_GPTQ_MSE); 0 (default): off */
    int calib_bf16;                    /* the calibration's products (but --target-bpw's first
                                          pass) in bf16 on the CPU's AMX units; needs
                                          llm_q_calib_bf16_ok() */
    int input_v_hessian;               /* v's Hessian from its input, as the reference, instead
                                          of the attention-weighted input per KV head */
    /* awq */
    int awq_grid;                      /* scale grid points, default 20 */
    int awq_duo;                       /* AutoAWQ's duo scaling (default 1) */
    int awq_clip;                      /* clip search (default 1) */
    int32_t awq_tokens;                /* token sample for the searches (default 4096) */
    /* input */
    int allow_requantize;              /* accept quantized weights (dequantized on load) */
    int n_threads;                     /* 0: the number of cores */
    const char *tool_version;          /* stored in the metadata */
    const char *recipe_path, *calib_name; /* for the metadata */
    void (*progress)(void *ctx, const struct llm_qprogress *p);
    void *progress_ctx;
    /* Called with one line (no newline) for each warning, before the work
     * it concerns starts: today, calibration tokens fewer than
     * LLM_GPTQ_TOKENS_PER_INPUT times the inputs of a GPTQ matrix. NULL:
     * warnings are dropped. */
    void (*warn)(void *ctx, const char *msg);
    void *warn_ctx;
};
void llm_quantize_params_default(struct llm_quantize_params *p);

/* Whether this CPU (and kernel) has the AMX-BF16 units calib_bf16 needs. */
int llm_q_calib_bf16_ok(void);

/* Quantize `in` (its weights are read in place, float or dequantized) and
 * write the result to out_path (a .llm; "-" = stdout) with the writer
 * options `wo` (compression). `rep` (optional) receives per-tensor figures.
 * Refuses a file whose metadata says it was quantized already, or whose
 * weights are quantized, unless allow_requantize. */
llm_status llm_quantize(struct llm_file *in, const struct llm_quantize_params *p,
                        const char *out_path, const struct llm_write_opts *wo,
                        struct llm_qreport *rep);

#endif
