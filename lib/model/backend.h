/* backend.h: the operations a forward pass needs, implemented once per
 * device (model/cpu.c always; a CUDA backend may add itself).
 *
 * Activation buffers come from the backend's alloc and may live on a device:
 * the forward pass never touches their contents, it only passes them to the
 * ops and downloads the logits. Weights are the tensors of the mapped file in
 * their stored type (struct llm_weight); a device backend repacks or uploads
 * them once in bind. Every op works on a batch of n tokens: rows of
 * activations are token-major, (n, width).
 */
#ifndef LLM_MODEL_BACKEND_H
#define LLM_MODEL_BACKEND_H

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
    void *dev;          /* the backend's copy, when it keeps one */
    /* GPTQ act-order: the columns are stored permuted so that quantization
     * groups are contiguous, and the product reads x[perm[i]] for stored
     * column i (the "<name>.perm" tensor). NULL: identity. Weights that read
     * the same input share one pointer when their permutations are equal. */
    const int32_t *perm; /* (ne0) host */
    /* The CPU's decode layout of a 4-bit matrix (ops/matmul.h's
     * interleaved rows), made once at load; when set, products read it and
     * not data. NULL: products read data. */
    const void *x16;
};

/* Rotary embedding: θ_i = inv_freq[i] for pair i of n_dims/2; cos and sin
 * are multiplied by mscale (YaRN). */
struct llm_rope {
    int32_t n_dims;
    int neox;               /* pairs (i, i + n_dims/2) instead of (2i, 2i+1) */
    const float *inv_freq;  /* (n_dims/2) host */
    float mscale;
};

struct llm_attn_shape {
    int32_t n_heads, n_kv_heads, head_dim;
    float scale;            /* 1/sqrt(head_dim) */
};

struct llm_backend;

struct llm_backend_ops {
    const char *name;
    void (*destroy)(struct llm_backend *b);
    /* Device memory for activations and the KV cache (zeroed). */
    llm_status (*alloc)(struct llm_backend *b, size_t bytes, void **out);
    void (*release)(struct llm_backend *b, void *p);
    llm_status (*download)(struct llm_backend *b, void *dst, const void *src, size_t bytes);
    /* Prepare a weight (upload/repack); the CPU uses it in place. */
    llm_status (*bind)(struct llm_backend *b, struct llm_weight *w);

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
     * for positions pos .. pos+n-1. */
    llm_status (*rope)(struct llm_backend *b, const struct llm_rope *r,
                       const struct llm_attn_shape *s, float *q, float *k, int32_t n, int32_t pos);
    /* Store k, v (n, kv_dim) of `layer` at pos .. pos+n-1 of seq in the cache,
     * then out (n, n_heads*head_dim) = causal attention of q over positions
     * 0 .. pos+i of the cache (GQA: query head h reads KV head
     * h / (n_heads / n_kv_heads)). */
    llm_status (*attention)(struct llm_backend *b, const struct llm_attn_shape *s,
                            struct llm_kv *kv, int32_t layer, int32_t seq, const float *q,
                            const float *k, const float *v, float *out, int32_t n, int32_t pos);
    /* gate (m) = silu(gate) * up. */
    llm_status (*swiglu)(struct llm_backend *b, float *gate, const float *up, int64_t m);
    /* x (m) += y. */
    llm_status (*add)(struct llm_backend *b, float *x, const float *y, int64_t m);
    /* y (n, width)[t][i] = x[t][perm[i]]: the input of an act-order weight. */
    llm_status (*gather)(struct llm_backend *b, const float *x, const int32_t *perm, float *y,
                         int32_t n, int64_t width);
};

struct llm_backend {
    const struct llm_backend_ops *ops;
    int n_threads;
};

/* The CPU backend with a pool of n_threads (0: the number of cores). */
llm_status llm_backend_cpu_new(struct llm_backend **out, int n_threads);

#endif
