/* layer.h: the decoder layer of the forward pass, stage by stage, for the
 * code that taps it (calibration, lib/quantize). llm_decode_batch runs
 * exactly these stages, in this order, with the model's weights:
 *
 *     xb  = attn_norm(x)                 llm_layer_norm(LLM_NORM_ATTN)
 *     att = attention(q, k, v of xb)     llm_layer_attention
 *     x  += att wo^T                     llm_layer_attn_out
 *     xb  = ffn_norm(x)                  llm_layer_norm(LLM_NORM_FFN)
 *     h   = silu(xb gate^T) * (xb up^T)  llm_layer_ffn_hidden
 *     x  += h down^T                     llm_layer_ffn_out
 *
 * A caller may give its own weights for the linears (struct llm_layer_lin:
 * the float copies being quantized) and reads every stage's input and
 * output, which are the inputs of the linears. The attention can also give
 * its probabilities (what v's Hessian weights the input with). Rows are
 * token-major, n <= the context's n_batch tokens at a time; the buffers are
 * the caller's (the context's own are used inside).
 */
#ifndef LLM_MODEL_LAYER_H
#define LLM_MODEL_LAYER_H

#include <stdint.h>

#include "../backend/backend.h"
#include "model.h"

/* The linears of a layer and their biases: NULL entries are the model's. */
struct llm_layer_lin {
    const struct llm_weight *wq, *wk, *wv, *wo, *gate, *up, *down;
    const struct llm_weight *bq, *bk, *bv;
};

enum llm_norm { LLM_NORM_ATTN, LLM_NORM_FFN, LLM_NORM_OUT };

/* y (n, dim) = x (n, dim) through layer l's attention or feed-forward norm,
 * or the output head's norm (l ignored); y may be x. */
llm_status llm_layer_norm(struct llm_context *c, int32_t l, enum llm_norm which, const float *x,
                          float *y, int32_t n);

/* The attention of layer l for n rows of normed input xb (n, dim) that are
 * positions pos .. pos+n-1 of sequence seq (pos at most its length; the
 * cache is cut there): q, k, v projections, RoPE, k and v stored in the
 * KV cache, causal attention: att (n, n_heads * head_dim). probs (when not
 * NULL): (n_heads, n, pos + n) each head's attention probabilities of each
 * row over the positions (0 past the row's own). att NULL (probs given):
 * the probabilities alone, without v's product and the values' sums (v's
 * rows of the cache are not written). */
llm_status llm_layer_attention(struct llm_context *c, int32_t l, const struct llm_layer_lin *lin,
                               const float *xb, int32_t seq, int32_t pos, int32_t n, float *att,
                               float *probs);

/* x (n, dim) += att (n, n_heads * head_dim) . wo^T */
llm_status llm_layer_attn_out(struct llm_context *c, int32_t l, const struct llm_layer_lin *lin,
                              const float *att, float *x, int32_t n);

/* h (n, ffn_dim) = silu(xb . gate^T) * (xb . up^T) for normed xb (n, dim) */
llm_status llm_layer_ffn_hidden(struct llm_context *c, int32_t l, const struct llm_layer_lin *lin,
                                const float *xb, float *h, int32_t n);

/* x (n, dim) += h (n, ffn_dim) . down^T */
llm_status llm_layer_ffn_out(struct llm_context *c, int32_t l, const struct llm_layer_lin *lin,
                             const float *h, float *x, int32_t n);

/* Mixture-of-experts feed-forwards (the model's n_expert > 0), which take
 * the place of ffn_hidden and ffn_out. The linears of expert e, 0 ..
 * n_expert - 1, and at n_expert qwen2moe's shared expert; NULL entries are
 * the model's. */
struct llm_moe_lin {
    const struct llm_weight *gate, *up, *down;
};
/* What llm_layer_moe shows its caller of each expert e that receives
 * tokens: the m rows going into its gate and up (down == 0: x (m, dim)),
 * then those going into its down (down == 1: x (m, the expert's ffn)), the
 * tokens in row order; the shared expert (e = n_expert) gets every row. */
typedef llm_status (*llm_moe_tap)(void *arg, int32_t e, int down, const float *x, int32_t m);

/* x (n, dim) += layer l's mixture of experts of normed xb (n, dim): the
 * router's choice, each chosen expert's output weighted, the shared
 * expert's gated: the forward pass's own computation, with lin (n_expert +
 * 1 entries, or NULL) over the model's weights; tap (may be NULL) sees the
 * inputs of each expert's linears. The router's weights are the model's. */
llm_status llm_layer_moe(struct llm_context *c, int32_t l, const struct llm_moe_lin *lin,
                         llm_moe_tap tap, void *arg, const float *xb, float *x, int32_t n);

/* logits (n, n_vocab) of rows xb (n, dim), normed by the head's norm
 * (llm_layer_norm LLM_NORM_OUT), through the output head (head NULL: the
 * model's) and the final soft-cap: the forward pass's own last stage;
 * logits is the caller's. */
llm_status llm_layer_logits(struct llm_context *c, const struct llm_weight *head, const float *xb,
                            float *logits, int32_t n);

/* The embedding rows of tokens (n) into x (n, dim), from table (vocab
 * rows of dim; NULL: the model's). */
llm_status llm_layer_embed(struct llm_context *c, const struct llm_weight *table,
                           const int32_t *tokens, int32_t n, float *x);

/* The context's backend, for the products of the caller's own (its
 * Hessians): the model's, with the context's threads. */
struct llm_backend *llm_context_backend(struct llm_context *c);

#endif
