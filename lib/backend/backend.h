/* backend.h: the operations a forward pass needs, implemented once per
 * device (backend/cpu.c always; a CUDA backend in lib/gpu may add itself).
 *
 * A backend belongs to one model: the model creates it, binds every weight
 * once (bind: upload, or repack into the layout the backend's kernels read)
 * and its contexts run on it. Activation buffers come from the backend's
 * alloc and may live on a device: the forward pass never touches their
 * contents, it only passes them to the ops and downloads the logits. Every
 * op works on a batch of n tokens: rows of activations are token-major,
 * (n, width); the tokens may belong to several sequences (struct llm_seg).
 *
 * Determinism: every op computes a token's row with the same arithmetic
 * whatever the other rows of the batch are, its slot in the batch and the
 * number of threads, so that a sequence's results do not depend on what it
 * was batched with (llm(7), "same answer alone or batched").
 */
#ifndef LLM_BACKEND_BACKEND_H
#define LLM_BACKEND_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "../common/status.h"
#include "../kv/kv.h"
#include "../quant/types.h"

/* A weight matrix (rows, ne0) in its stored type, or a float vector. */
struct llm_weight {
    enum llm_type type;
    const void *data;   /* host bytes (the mapping) */
    int64_t ne0, rows;
    void *dev;          /* the backend's copy on its device, when it keeps one */
    /* GPTQ act-order: the columns are stored permuted so that quantization
     * groups are contiguous, and the product reads x[perm[i]] for stored
     * column i (the "<name>.perm" tensor). NULL: identity. Weights that read
     * the same input share one pointer when their permutations are equal. */
    const int32_t *perm; /* (ne0) host */
    /* The CPU's decode layout of a 4-bit matrix (ops/matmul.h's
     * interleaved rows), made by the CPU backend's bind; when set, products
     * read it and not data (whose pages the model may then drop). */
    const void *x16;
    /* x16's type: `type`, or for Q5_0 and IQ4_NL the q8_0 and for Q5_1 the
     * q8z_g32 that holds exactly the same values (same d and m, the codes
     * widened to bytes), whose interleaved kernels read 1.5x the bytes with
     * far fewer instructions (cpu.c). 0 (f32) when x16 is NULL. */
    enum llm_type x16_type;
    /* 1: the product may round W (f32) and the activations to bf16, where
     * the CPU has matrix units for it (ops/matmul.h llm_matmul_bf16): the
     * quantizer's calibration sets it on its float weights. Inference never
     * does (its bits must not depend on the step's token count). */
    int lowp;
};

/* Rotary embedding: θ_i = inv_freq[i] for pair i of n_dims/2; cos and sin
 * are multiplied by mscale (YaRN). */
struct llm_rope {
    int32_t n_dims;
    int neox;               /* pairs (i, i + n_dims/2) instead of (2i, 2i+1) */
    const float *inv_freq;  /* (n_dims/2) host */
    float mscale;
};

/* cs (n, n_dims/2, 2) = [cos, sin](pos[t] * inv_freq[i]) * mscale: the
 * table the rope op reads, made once per batch for every layer. */
void llm_rope_table(const struct llm_rope *r, const int32_t *pos, int32_t n, float *cs);

struct llm_attn_shape {
    int32_t n_heads, n_kv_heads, head_dim;
    float scale;            /* 1/sqrt(head_dim), or of the model's query scalar */
    float softcap;          /* scaled scores become softcap * tanh(s / softcap); 0: none */
    int32_t window;         /* a token at position i sees i - window + 1 .. i; 0: 0 .. i */
};

/* A run of n tokens of one sequence in a batch: positions pos .. pos+n-1,
 * rows row .. row+n-1 of the batch's activations. */
struct llm_seg {
    int32_t seq, pos, n, row;
};

struct llm_backend;

struct llm_backend_ops {
    const char *name;
    void (*destroy)(struct llm_backend *b);
    /* Run fn(i, n, ctx) for i < n on the backend's n host threads and
     * wait: a caller's own loops over host memory (the quantizer's
     * element-wise work between products). NULL: the caller runs
     * fn(0, 1, ctx). */
    void (*host_run)(struct llm_backend *b, void (*fn)(int i, int n, void *ctx), void *ctx);
    /* Run with n threads from now on (n > 0). */
    llm_status (*threads)(struct llm_backend *b, int n);
    /* Device memory for activations and the KV cache (zeroed). */
    llm_status (*alloc)(struct llm_backend *b, size_t bytes, void **out);
    void (*release)(struct llm_backend *b, void *p);
    llm_status (*download)(struct llm_backend *b, void *dst, const void *src, size_t bytes);
    llm_status (*upload)(struct llm_backend *b, void *dst, const void *src, size_t bytes);
    /* Prepare a weight once, at load: upload, or repack (w->dev, w->x16).
     * Memory the backend allocates here is its own, freed by destroy. When
     * it keeps a copy, it calls done (if not NULL) on each stretch of
     * w->data as soon as it has copied it, so that the caller can let go of
     * those pages and the peak stays one copy of the weights. */
    llm_status (*bind)(struct llm_backend *b, struct llm_weight *w,
                       void (*done)(void *ctx, const void *p, size_t n), void *ctx);

    /* x (n, W.ne0) = rows tokens[] of the embedding table W. */
    llm_status (*embed)(struct llm_backend *b, const struct llm_weight *W, const int32_t *tokens,
                        int32_t n, float *x);
    /* y (n, dim) = x / rms(x) * w; y may be x. */
    llm_status (*rmsnorm)(struct llm_backend *b, const float *x, const struct llm_weight *w,
                          float *y, int32_t n, int64_t dim, float eps);
    /* For each of n_w weights: Y[j] (n, W[j].rows) = X (n, ne0) · W[j]ᵀ
     * (+ bias[j] when not NULL). Several weights that read the same X go in
     * one call, so a threaded backend synchronises once for all of them. */
    llm_status (*matmul)(struct llm_backend *b, int n_w, const struct llm_weight *const *W,
                         const struct llm_weight *const *bias, const float *X, float *const *Y,
                         int32_t n);
    /* Rotate q (n, n_heads*head_dim) and k (n, n_kv_heads*head_dim) in place
     * with the table of llm_rope_table (host memory). */
    llm_status (*rope)(struct llm_backend *b, const struct llm_attn_shape *s, int32_t n_dims,
                       int neox, const float *cs, float *q, float *k, int32_t n);
    /* Carry out the KV cache's recorded copy-on-write copies (kv->copies). */
    llm_status (*kv_copy)(struct llm_backend *b, struct llm_kv *kv);
    /* For each segment: store its rows of k, v (kv_dim each) of `layer` at
     * its positions of its sequence (prepared with llm_kv_prepare), then
     * out (n_heads*head_dim per row) = causal attention of its rows of q
     * over positions 0 .. pos+i of its sequence, or the last s->window of
     * them (sliding window) (GQA: query head h reads KV
     * head h / (n_heads / n_kv_heads)). Each token reads its positions in
     * order, whatever the segments around it. probs (one segment only; may
     * be NULL): host memory (n_heads, seg->n, seg->pos + seg->n) receiving
     * each row's attention probabilities, 0 past the row's position and
     * before its window. out and v NULL (with probs): the probabilities
     * alone, the keys stored and the values not. */
    llm_status (*attention)(struct llm_backend *b, const struct llm_attn_shape *s,
                            struct llm_kv *kv, int32_t layer, const struct llm_seg *seg,
                            int32_t n_seg, const float *q, const float *k, const float *v,
                            float *out, float *probs);
    /* gate (m) = silu(gate) * up. */
    llm_status (*swiglu)(struct llm_backend *b, float *gate, const float *up, int64_t m);
    /* gate (m) = gelu(gate) * up, GELU's tanh form (gemma). */
    llm_status (*geglu)(struct llm_backend *b, float *gate, const float *up, int64_t m);
    /* x (m) *= s. */
    llm_status (*scale)(struct llm_backend *b, float *x, float s, int64_t m);
    /* x (m) += y. */
    llm_status (*add)(struct llm_backend *b, float *x, const float *y, int64_t m);
    /* y (n, width)[i] = x[rows[i]] (rows: host memory): the tokens an
     * expert reads. */
    llm_status (*get_rows)(struct llm_backend *b, const float *x, const int32_t *rows, float *y,
                           int32_t n, int64_t width);
    /* y[rows[i]] = x (n, width)[i] (rows: host memory): an expert's outputs
     * to their tokens' slots. */
    llm_status (*set_rows)(struct llm_backend *b, const float *x, const int32_t *rows, float *y,
                           int32_t n, int64_t width);
    /* out (n, width)[t] (+)= sum over j < k, in order, of w[t k + j] *
     * y[t k + j] (w: host memory; accumulate 0: out is overwritten): a
     * token's experts, in the same order whatever else is in the batch. */
    llm_status (*combine)(struct llm_backend *b, float *out, const float *y, const float *w,
                          int32_t n, int32_t k, int64_t width, int accumulate);
    /* y (n, width)[t][i] = x[t][perm[i]]: the input of an act-order weight. */
    llm_status (*gather)(struct llm_backend *b, const float *x, const int32_t *perm, float *y,
                         int32_t n, int64_t width);
};

struct llm_backend {
    const struct llm_backend_ops *ops;
    int n_threads;
};

/* The CPU backend with a pool of n_threads (0: the number of cores).
 * repack: bind makes the interleaved copy of the 4-bit matrices that take
 * it (when llm_x16_enabled()); 0 leaves every weight in its rows. */
llm_status llm_backend_cpu_new(struct llm_backend **out, int n_threads, int repack);

#endif
