/* model.h: a Llama-family model bound to its weights, and contexts that run
 * it (KV cache + scratch).
 *
 * The forward pass is written once against a small backend interface
 * (model/backend.h); the CPU backend is always there. Weights are used in
 * place from the mmap'd .llm file in their stored type (ops/matmul.h works on
 * packed blocks). The KV cache is paged: fixed-size blocks and a block table
 * per sequence.
 */
#ifndef LLM_MODEL_MODEL_H
#define LLM_MODEL_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "../common/status.h"
#include "../format/file.h"
#include "../kv/kv.h"
#include "../quant/types.h"

/* Hyper-parameters, from the metadata (format/file.h schema). */
struct llm_config {
    char arch[32];            /* llama, mistral, qwen2, qwen3, gemma2, gemma3, phi3,
                                 mixtral, qwen2moe, qwen3moe */
    int32_t n_vocab;
    int32_t n_ctx_train;      /* context_length */
    int32_t dim;              /* embedding_length */
    int32_t n_layers;         /* block_count */
    int32_t ffn_dim;          /* feed_forward_length */
    int32_t n_heads;
    int32_t n_kv_heads;
    int32_t head_dim;
    int32_t rope_dim;
    float rope_theta;
    int rope_neox;            /* 1: half-split pairs (neox), 0: interleaved (norm) */
    char rope_scaling[16];    /* none, linear, yarn, llama3 */
    float rope_factor;
    int32_t rope_orig_ctx;
    float rope_low_freq, rope_high_freq, rope_attn_factor, rope_beta_fast, rope_beta_slow;
    float rms_eps;
    int tie_embeddings;
    int qkv_bias;
    int qk_norm;              /* q and k RMS-normed per head before RoPE (qwen3) */
    /* Sliding-window attention: a local layer's token at position i sees
     * positions i - swa_window + 1 .. i. Layer l is local when swa_pattern
     * is 1 (every layer: Mistral) or l % swa_pattern < swa_pattern - 1
     * (Gemma 2: 2, every other layer; Gemma 3: 6, five local then one
     * global). swa_window 0: every layer sees the whole sequence. */
    int32_t swa_window;
    int32_t swa_pattern;
    float rope_theta_swa;     /* the local layers' RoPE base, unscaled (gemma3); 0: rope_theta */
    /* Gemma: the embedding times sqrt(dim), GELU (tanh) gating instead of
     * SiLU, and the outputs of attention and of the feed-forward RMS-normed
     * (post_attention_norm, post_ffw_norm) before they join the residual. */
    int gemma;
    float attn_softcap;       /* scores become c * tanh(s / c) (gemma2); 0: none */
    float final_softcap;      /* the logits likewise (gemma2); 0: none */
    float query_scalar;       /* scores are scaled by 1/sqrt(this) (default head_dim) */
    /* Mixture of experts (n_expert > 0): each token's feed-forward is the
     * sum of n_expert_used experts', weighted by the router's softmax over
     * all experts (renormalized over the chosen ones when expert_norm), plus
     * a shared expert gated by a sigmoid when shared_ffn_dim > 0. */
    int32_t n_expert, n_expert_used;
    int32_t expert_ffn_dim;   /* each expert's hidden width */
    int32_t shared_ffn_dim;   /* the shared expert's (qwen2moe); 0: none */
    int expert_norm;
};

/* Positions a token of layer l attends to, counting itself: the window of
 * a local layer, 0 (all) for a global one. */
int32_t llm_config_layer_window(const struct llm_config *c, int32_t l);

/* Fill a config from metadata; LLM_E_FORMAT naming the missing/bad key. */
llm_status llm_config_from_meta(struct llm_config *c, const struct llm_meta *meta, const char *path);

struct llm_model;

struct llm_model_params {
    int n_threads;            /* 0: the number of cores */
    const char *tokenizer_path; /* llama2.c checkpoints: their tokenizer.bin (optional) */
};
void llm_model_params_default(struct llm_model_params *p);

/* Open a .llm file (or anything llm_import reads) and bind its weights. */
llm_status llm_model_open(struct llm_model **out, const char *path, const struct llm_model_params *p);
/* Bind the weights of an already opened file; the model takes `f` over
 * (freed with the model, or at once on failure). */
llm_status llm_model_from_file(struct llm_model **out, struct llm_file *f,
                               const struct llm_model_params *p);
/* The same, but `f` stays the caller's (freed after the model is closed). */
llm_status llm_model_from_file_borrowed(struct llm_model **out, struct llm_file *f,
                                        const struct llm_model_params *p);
void llm_model_close(struct llm_model *m);
const struct llm_config *llm_model_config(const struct llm_model *m);
struct llm_file *llm_model_file(struct llm_model *m);
struct llm_tokenizer *llm_model_tokenizer(struct llm_model *m); /* NULL when the file has none */
/* Bytes of weights read per generated token (for bandwidth figures). */
uint64_t llm_model_weight_bytes(const struct llm_model *m);
uint64_t llm_model_n_params(const struct llm_model *m);

struct llm_context;

struct llm_context_params {
    int32_t n_ctx;            /* the longest a sequence may grow, in tokens (0: min(train ctx, 4096)) */
    enum llm_type kv_type_k;  /* the K cache's type: F32, F16, BF16, Q8_0, FP8_E4M3, Q4_0 */
    enum llm_type kv_type_v;  /* the V cache's */
    int32_t n_seq;            /* sequence slots, ids 0 .. n_seq-1 (default 1) */
    int32_t block_size;       /* tokens per KV block (default 16) */
    int32_t kv_blocks;        /* the KV pool in blocks; 0: from kv_bytes, or what n_seq full
                                 sequences need (n_seq * ceil(n_ctx / block_size)) */
    uint64_t kv_bytes;        /* the KV pool as a memory budget, when kv_blocks is 0 */
    int32_t n_batch;          /* tokens per forward pass: a larger batch goes in slices of
                                 this many (0: 512) */
    int n_threads;            /* 0: the model's */
};
void llm_context_params_default(struct llm_context_params *p);

/* A context: a KV pool shared by n_seq sequences, and the buffers of a
 * forward pass. Contexts run on their model's backend, one at a time. */
llm_status llm_context_new(struct llm_context **out, struct llm_model *m,
                           const struct llm_context_params *p);
void llm_context_free(struct llm_context *c);
/* Does the context rotate with LongRoPE's long factors (its n_ctx past the
 * model's original context length; llama.cpp's choice)? */
int llm_context_rope_long(const struct llm_context *c);

/* A batch: n tokens from any number of sequences, each token with its own
 * position and sequence id. The tokens of a sequence are one run of
 * consecutive positions, in order, starting at or before the sequence's
 * length (a start before it cuts the sequence there first: rollback).
 * logits[i] != 0 asks for token i's logits; logits NULL asks for the last
 * token of each sequence's run. */
struct llm_batch {
    int32_t n;
    const int32_t *token;     /* (n) */
    const int32_t *pos;       /* (n) */
    const int32_t *seq;       /* (n) */
    const int8_t *logits;     /* (n) or NULL */
};

/* Run a batch through one forward pass (in slices of n_batch tokens) and
 * write the logits asked for to `logits` (n_out, n_vocab), in batch order;
 * `logits` NULL computes none. A token's logits are the same bits whatever
 * else is in the batch, its slot, the slicing and the thread count.
 * LLM_E_INVALID for a malformed batch (nothing is run); LLM_E_KV_FULL when
 * the KV pool has too few free blocks for it (nothing is run or changed:
 * free or cut sequences, or run fewer, and try again). */
llm_status llm_decode_batch(struct llm_context *c, const struct llm_batch *b, float *logits);

/* Run n tokens of sequence `seq` at positions pos .. pos+n-1 (pos at most
 * the sequence's length; the cache is cut to pos). Writes logits (n_vocab)
 * of the last token, or of every token (n, n_vocab) when all_logits; none
 * when logits is NULL. llm_decode_batch with one sequence. */
llm_status llm_decode(struct llm_context *c, int32_t seq, const int32_t *tokens, int32_t n,
                      int32_t pos, float *logits, int all_logits);

/* dst (emptied first) shares the first n positions of src: their KV
 * blocks are referenced, not copied; writes into a shared block copy it
 * first. n <= src's length. */
llm_status llm_context_fork(struct llm_context *c, int32_t src, int32_t dst, int32_t n);
/* Keep the first n positions of `seq`; blocks past them are released.
 * Returns the positions kept: n, or fewer with q4ch keys when n falls in a
 * quantized block (kv.h); the caller computes the rest again. */
int32_t llm_context_truncate(struct llm_context *c, int32_t seq, int32_t n);
/* Forget a sequence's KV blocks. */
void llm_context_reset(struct llm_context *c, int32_t seq);
/* Positions stored for `seq`. */
int32_t llm_context_seq_len(const struct llm_context *c, int32_t seq);
int32_t llm_context_n_ctx(const struct llm_context *c);
int32_t llm_context_n_seq(const struct llm_context *c);
struct llm_model *llm_context_model(struct llm_context *c);
/* Bytes of KV storage the context reserves (the pool; its pages become
 * resident only as blocks come into use). */
uint64_t llm_context_kv_bytes(const struct llm_context *c);
/* The context's block pool, for callers that manage sequences' blocks
 * themselves (the prefix index of lib/serve). Its tables may be changed
 * between batches, never during one. */
struct llm_kv *llm_context_kv(struct llm_context *c);
/* The pool's occupancy (kv/kv.h) and the bytes of one block. */
void llm_context_kv_stats(const struct llm_context *c, struct llm_kv_stats *st,
                          uint64_t *block_bytes);

/* The model's identity, for KV state files (kv/state.h): XXH3-64 over its
 * tensors' names, types, shapes and checksums (a .llm file's stored ones,
 * else computed from the bytes, so that the same weights have the same
 * identity in every format) and the hyper-parameters that shape the KV
 * rows (RoPE, heads, norm epsilon). Computed once, then remembered. */
llm_status llm_model_id(struct llm_model *m, uint64_t *id);
/* The K and V rows of positions pos .. pos+n-1 of `seq`, as (n_layers, 2,
 * n, kv_dim) elements of the cache's type: save copies them out (they must
 * be stored), load appends them to the sequence (pos = its length), taking
 * blocks (LLM_E_KV_FULL when there are too few, changing nothing). */
llm_status llm_context_kv_save(struct llm_context *c, int32_t seq, int32_t pos, int32_t n,
                               void *rows);
llm_status llm_context_kv_load(struct llm_context *c, int32_t seq, int32_t pos, int32_t n,
                               const void *rows);
/* Perplexity of a token stream (tokenized with LLM_TOK_ADD_BOS as the model
 * wants). Non-overlapping windows of n_ctx tokens; the default protocol is
 * llama.cpp's llama-perplexity: the first token of each window is replaced
 * by BOS when the tokenizer adds one, and only the second half of each window
 * is scored (predictions of tokens n_ctx/2+1 .. n_ctx-1). With score_all,
 * the protocol of the GPTQ/AWQ evaluations: every prediction of the window
 * (tokens 1 .. n_ctx-1) is scored and the tokens are left as they are.
 * *ppl = exp(mean NLL); *stderr_ (optional) = ppl * standard error of the
 * mean NLL, as llama-perplexity prints it. The context must hold n_ctx
 * tokens; LLM_E_INVALID when the text has fewer than one window (or fewer than
 * 2 * n_ctx tokens under the default protocol, as llama.cpp requires). */
llm_status llm_perplexity(struct llm_context *c, const int32_t *tokens, size_t n, int32_t n_ctx,
                          int score_all, double *ppl, double *stderr_);

#endif
