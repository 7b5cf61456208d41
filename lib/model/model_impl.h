/* model_impl.h: the insides of a model and a context, for the code in lib/
 * that taps the forward pass (quantize/: layer-by-layer calibration, through
 * model/layer.h). Everything else uses model.h. */
#ifndef LLM_MODEL_MODEL_IMPL_H
#define LLM_MODEL_MODEL_IMPL_H
#include <math.h>

#include "../backend/backend.h"
#include "../kv/kv.h"
#include "model.h"

struct llm_layer_w {
    struct llm_weight attn_norm, wq, wk, wv, wo, bq, bk, bv, q_norm, k_norm, ffn_norm, gate, up, down;
    struct llm_weight post_attn_norm, post_ffn_norm; /* gemma */
    /* mixture of experts: the router (n_expert, dim); expert e's matrices
     * are views of rows of the 3-D ffn_{gate,up,down}_exps tensors; the
     * shared expert and its gate's row (qwen2moe) */
    struct llm_weight router;
    struct llm_weight *exp_gate, *exp_up, *exp_down; /* (n_expert) each */
    struct llm_weight sh_gate_inp, sh_gate, sh_up, sh_down;
};

struct llm_model {
    struct llm_config c;
    struct llm_file *f;
    struct llm_tokenizer *tok;
    struct llm_backend *be;     /* the model's backend: weights bound to it once */
    struct llm_weight tok_embd, out_norm, output;
    struct llm_layer_w *layers; /* (n_layers) */
    float *inv_freq;            /* (rope_dim/2) */
    float *inv_freq_swa;        /* (rope_dim/2) the local layers', or NULL: inv_freq */
    float *inv_freq_long;       /* (rope_dim/2) LongRoPE's long factors', or NULL */
    float mscale;
    uint64_t weight_bytes, n_params;
    int n_threads;
    int borrowed;               /* f is the caller's */
    uint64_t id;                /* llm_model_id, once computed (0: not yet) */
};

struct llm_context {
    struct llm_model *m;
    struct llm_backend *be;     /* the model's */
    struct llm_kv *kv;
    void *kv_k, *kv_v;
    int32_t n_ctx, n_batch;
    int n_threads;
    struct llm_rope rope, rope_swa; /* rope_swa: the local layers' (inv_freq_swa) */
    int rope_long;                  /* LongRoPE's long factors: n_ctx past the original */
    struct llm_attn_shape ash;
    /* activations on the backend, n_batch rows each */
    float *x;       /* (n_batch, dim) residual stream */
    float *xb;      /* (n_batch, dim) normed input */
    float *xb2;     /* (n_batch, dim) branch output */
    float *q;       /* (n_batch, n_heads*head_dim) */
    float *k, *v;   /* (n_batch, n_kv_heads*head_dim) */
    float *att;     /* (n_batch, n_heads*head_dim) */
    float *hb, *hb2; /* (n_batch, ffn_dim) */
    float *xp;      /* (n_batch, max(dim, q dim, ffn_dim)) gathered input of act-order weights */
    /* mixture of experts */
    float *moe_x;   /* (n_batch, dim) the rows an expert reads */
    float *moe_o;   /* (n_batch, dim) its output, then the shared expert's */
    float *moe_y;   /* (n_batch * n_expert_used, dim) each token's experts' outputs, in its order */
    float *moe_r;   /* (n_batch, n_expert) router logits (+1 column: the shared gate) */
    float *moe_rh;  /* host copy of moe_r */
    int32_t *moe_rows;  /* (n_batch * n_expert_used) host: expert-sorted token rows */
    int32_t *moe_slot;  /* (n_batch * n_expert_used) host: their rows of moe_y */
    int32_t *moe_sel;   /* (n_batch * n_expert_used) host: each token's experts, best first */
    float *moe_w;       /* (n_batch * n_expert_used) host: their weights */
    int32_t *moe_count; /* (n_expert + 1) host */
    float *logits;  /* (logits_rows, n_vocab) */
    int32_t logits_rows;
    /* host scratch of a batch */
    float *cs;            /* (n_batch, rope_dim) the rope table of a slice */
    float *cs_swa;        /* (n_batch, rope_dim) the local layers', when their base differs */
    struct llm_seg *segs; /* (n_seq) the runs of the batch */
    struct llm_seg *sl;   /* (n_batch) the runs of a slice */
    uint8_t *seen;        /* (n_seq) */
    int32_t *out_rows;    /* (n_batch) rows of a slice whose logits are asked for */
};

/* model/layer.c: the products of the forward pass, gathering the input of
 * act-order weights first: for each of n_w weights Y[j] (n, W[j].rows) =
 * X (n, ne0) . W[j]^T (+ bias[j]), one backend call for the weights that
 * read the same input. */
llm_status llm_model_matmul(struct llm_context *c, int n_w, const struct llm_weight *const *W,
                            const struct llm_weight *const *bias, const float *X, float *const *Y,
                            int32_t n);
/* The final soft-cap of logits x (n) (gemma 2), in place; none without. */
static inline void llm_model_softcap(const struct llm_config *cf, float *x, int64_t n)
{
    const float cap = cf->final_softcap;
    for (int64_t i = 0; cap > 0 && i < n; i++)
        x[i] = cap * tanhf(x[i] / cap);
}
/* c->cs (and c->cs_swa) for n tokens at positions pos[]. */
void llm_model_rope_tables(struct llm_context *c, const int32_t *pos, int32_t n);
/* One decoder layer over the n rows of a slice in c->x, whose runs are
 * sl[0 .. n_sl) and whose rope table is c->cs (the stages of layer.h). */
llm_status llm_model_layer(struct llm_context *c, int32_t l, const struct llm_seg *sl,
                           int32_t n_sl, int32_t n);

#endif
