/* kvstat.h: KV-cache arithmetic (llm-kvstat).
 *
 * A decoder layer keeps, for every token of every live sequence, one key and
 * one value vector per KV head:
 *
 *     bytes/token = 2 (K and V) x n_layers x n_kv_heads x head_dim x bytes(kv type)
 *
 * Always n_kv_heads x head_dim, never hidden_size: the two are equal only for
 * full multi-head attention (MHA); grouped-query (GQA) and multi-query (MQA)
 * models share each KV head among n_heads / n_kv_heads query heads, which
 * divides the cache by that factor.
 *
 * A paged allocator (vLLM's PagedAttention) hands out fixed blocks of
 * block_size tokens, so a sequence of L tokens holds ceil(L / block_size)
 * blocks and wastes less than one block; a contiguous allocator reserves the
 * full context for every sequence up front and wastes ctx - L tokens. The
 * functions below compute both from a list of sequence lengths.
 *
 * Everything here is pure arithmetic on struct llm_kvstat_shape except the
 * loaders (preset table, config.json, model file, lengths file).
 *
 * Example: Llama-2-7B, f16, 4096 tokens
 *
 *     struct llm_kvstat_shape s;
 *     struct llm_kvstat_params p;
 *     struct llm_kvstat_report r;
 *     llm_kvstat_preset(&s, "llama-2-7b");
 *     llm_kvstat_params_default(&p);
 *     p.ctx = 4096;
 *     llm_kvstat_compute(&r, &s, &p, NULL, 0);   // r.bytes_per_token == 524288
 */
#ifndef LLM_KV_KVSTAT_H
#define LLM_KV_KVSTAT_H

#include <stdint.h>
#include <stdio.h>

#include "../common/status.h"
#include "../format/meta.h"

/* Element types a KV cache may be stored in. fp8 (E4M3 or E5M2) and int8
 * are counted at one byte per element: their per-tensor or per-head scales
 * are negligible next to the cache. */
/* KV element types: the float ones, an fp8 or int8 cache whose scales are
 * not counted, and llm-run's q8 and q4 (blocks of 32 with an fp16 scale:
 * 34 and 18 bytes; heads of a multiple of 32). */
enum llm_kvstat_type { LLM_KVSTAT_F32, LLM_KVSTAT_F16, LLM_KVSTAT_BF16, LLM_KVSTAT_FP8, LLM_KVSTAT_INT8,
                       LLM_KVSTAT_Q8, LLM_KVSTAT_Q4, LLM_KVSTAT_Q4CH, LLM_KVSTAT_N_TYPES };

/* "f32", "f16", ... (case-insensitive; "fp16", "float16", "e4m3" accepted). */
llm_status llm_kvstat_type_parse(const char *s, enum llm_kvstat_type *out);
const char *llm_kvstat_type_name(enum llm_kvstat_type t);
/* Bytes of 32 elements of type t (an element: this / 32, 1.0625 for q8). */
uint32_t llm_kvstat_type_bytes32(enum llm_kvstat_type t);

/* What the arithmetic needs from a model. */
struct llm_kvstat_shape {
    char name[128];         /* preset name, model name or path */
    char source[16];        /* "preset", "config", "model" */
    int64_t n_layers;
    int64_t n_heads;        /* query heads */
    int64_t n_kv_heads;     /* <= n_heads, divides it */
    int64_t head_dim;
    int64_t ctx_train;      /* trained context (0 when unknown) */
    uint64_t weight_bytes;  /* bytes of the weights (0 when unknown: presets, config.json) */
    int64_t window;         /* sliding window in positions; 0: none */
    int64_t n_local;        /* the layers that read only the window (0 without one) */
};
/* Sliding windows: the layers of n_layers a window of `window` positions
 * applies to with pattern P (1: all; P: P - 1 local layers then a global
 * one, repeated), as llm-run reads the model's metadata. */
int64_t llm_kvstat_window_layers(int64_t n_layers, int64_t pattern);

/* Published hyper-parameters of a named model (llama-2-7b, llama-3-8b, ...).
 * LLM_E_NOTFOUND naming the preset and listing the known ones otherwise. */
llm_status llm_kvstat_preset(struct llm_kvstat_shape *out, const char *name);
const char *llm_kvstat_presets(void); /* comma-separated names */

/* From a Hugging Face config.json text (num_hidden_layers,
 * num_attention_heads, num_key_value_heads (default: MHA), head_dim (default
 * hidden_size / num_attention_heads), max_position_embeddings; a nested
 * text_config is used when the top level has no num_hidden_layers; the
 * sliding window: sliding_window, its layers from layer_types, else
 * sliding_window_pattern, else Gemma 2's alternation and Gemma 3's 5 to 1,
 * else Qwen's use_sliding_window from max_window_layers on, else every
 * layer). Errors are LLM_E_FORMAT with a detail starting "NAME: ". */
llm_status llm_kvstat_shape_from_config(struct llm_kvstat_shape *out, const char *text, size_t len,
                                    const char *name);
/* Read PATH and call llm_kvstat_shape_from_config. */
llm_status llm_kvstat_shape_load_config(struct llm_kvstat_shape *out, const char *path);
/* From .llm metadata (hparams.block_count, head_count, head_count_kv,
 * head_dim, embedding_length, context_length, sliding_window and
 * sliding_window_pattern with llm-run's defaults for Gemma). */
llm_status llm_kvstat_shape_from_meta(struct llm_kvstat_shape *out, const struct llm_meta *meta,
                                  const char *name);
/* Open a model (anything llm_import reads) for its metadata and weight bytes. */
llm_status llm_kvstat_shape_load_model(struct llm_kvstat_shape *out, const char *path);

/* Check a shape (positive sizes, n_kv_heads divides n_heads, no overflow
 * of bytes per token); `name` goes into the detail. */
llm_status llm_kvstat_shape_check(const struct llm_kvstat_shape *s);

struct llm_kvstat_params {
    enum llm_kvstat_type type;  /* default f16; K's when split_v */
    int split_v;                /* V is of type_v (llm-run's --kv-type-k/-v) */
    enum llm_kvstat_type type_v;
    int64_t ctx;            /* tokens per sequence; 0: the shape's ctx_train, else 4096 */
    int64_t batch;          /* sequences (default 1) */
    int64_t block_size;     /* tokens per paged block (default 16, as vLLM) */
    uint64_t mem;           /* memory budget in bytes; 0: no capacity figures */
    uint64_t weights;       /* bytes to take off mem for weights; UINT64_MAX: the shape's */
    int64_t shared_prefix;  /* tokens at the start of every sequence of the batch that they
                               share (one prompt, forked); 0: none */
    int64_t step;           /* tokens of a forward pass (llm-run's, --step-tokens with --batch):
                               the sliding-window layers' bound; default LLM_KVSTAT_STEP */
};
void llm_kvstat_params_default(struct llm_kvstat_params *p);

/* Paged against contiguous allocation of a set of sequences. Token counts;
 * multiply by bytes_per_token for bytes. */
struct llm_kvstat_waste {
    uint64_t n_seqs;
    uint64_t min_len, max_len;
    double mean_len;
    uint64_t used_tokens;        /* sum of lengths */
    uint64_t contig_tokens;      /* n_seqs x ctx */
    uint64_t paged_tokens;       /* sum of ceil(len / B) x B */
    uint64_t paged_blocks;
    /* waste = reserved - used, as a share of what was reserved */
    double contig_waste_pct, paged_waste_pct;
    /* with a budget: sequences of this mix that fit at once */
    uint64_t contig_fit, paged_fit;
};

struct llm_kvstat_report {
    struct llm_kvstat_shape shape;
    struct llm_kvstat_params params;  /* as used (ctx and weights resolved) */
    double type_bytes;              /* an element: type_bytes32 / 32 (K's and V's mean) */
    uint64_t bytes_per_token;
    uint64_t bytes_per_token_layer; /* one layer, K and V */
    uint64_t bytes_per_token_mha;   /* if every query head had its own KV head */
    double gqa_factor;              /* n_heads / n_kv_heads: 1 = MHA */
    uint64_t bytes_per_sequence;    /* x ctx */
    uint64_t bytes_per_batch;       /* x ctx x batch */
    uint64_t bytes_per_block;       /* x block_size */
    uint64_t bytes_per_token_type[LLM_KVSTAT_N_TYPES]; /* 0: the heads do not fit its blocks */
    /* sliding windows (have_window: the shape's window saves memory at
     * this ctx): a window layer of llm-run holds at most window_tokens of
     * a sequence (the window, the positions kept for rollbacks and a
     * forward pass of params.step tokens, in whole blocks: kv/kv.h), the
     * other layers the whole ctx */
    int have_window;
    uint64_t window_tokens;
    uint64_t bytes_per_sequence_windowed;
    uint64_t bytes_per_batch_windowed;
    /* capacity (when params.mem) */
    int have_capacity;
    uint64_t kv_mem;                /* mem - weights (0 when the weights do not fit) */
    uint64_t cap_tokens;            /* kv_mem / bytes_per_token */
    uint64_t cap_blocks;            /* kv_mem / bytes_per_block */
    uint64_t cap_seqs_contig;       /* kv_mem / bytes_per_sequence */
    uint64_t cap_seqs_paged;        /* cap_blocks / ceil(ctx / block_size) (vLLM's max concurrency) */
    uint64_t cap_seqs_windowed;     /* kv_mem / bytes_per_sequence_windowed (have_window) */
    /* prefix sharing (when params.shared_prefix): the batch's sequences
     * fork one prompt; the blocks it fills are held once (a fork
     * references them), its partial last block is copied by each sequence
     * at its first write, as the KV pool does (kv/kv.h) */
    int have_sharing;
    uint64_t shared_blocks;         /* floor(prefix / block_size): held once */
    uint64_t blocks_per_seq;        /* ceil(ctx / block_size) */
    uint64_t own_blocks_per_seq;    /* blocks_per_seq - shared_blocks */
    uint64_t blocks_unshared;       /* batch x blocks_per_seq */
    uint64_t blocks_shared;         /* shared_blocks + batch x own_blocks_per_seq */
    uint64_t blocks_saved;          /* (batch - 1) x shared_blocks */
    uint64_t bytes_saved;           /* blocks_saved x bytes_per_block */
    double saved_pct;               /* of blocks_unshared */
    uint64_t cap_seqs_shared;       /* with a budget: sequences of ctx that fit sharing the prefix */
    /* waste (when lengths were given) */
    int have_waste;
    struct llm_kvstat_waste waste;
};

/* The tokens of a forward pass of llm-run by default (its batch). */
#define LLM_KVSTAT_STEP 512

/* Fill `r`. `lengths` (n, may be NULL/0) are sequence lengths in tokens,
 * each 1..ctx. LLM_E_INVALID on a bad shape or parameter, or a length out
 * of range; sizes that overflow 64 bits are LLM_E_INVALID too. */
llm_status llm_kvstat_compute(struct llm_kvstat_report *r, const struct llm_kvstat_shape *s,
                          const struct llm_kvstat_params *p, const uint64_t *lengths, size_t n);

/* Sequence lengths, one positive integer per line (blank lines and lines
 * starting with '#' are skipped). *out (n) is freed with llm_free. Errors
 * name "PATH:LINE". A length above max_len is an error. */
llm_status llm_kvstat_lengths_parse(uint64_t **out, size_t *n, const char *text, size_t len,
                                const char *name, uint64_t max_len);
llm_status llm_kvstat_lengths_load(uint64_t **out, size_t *n, const char *path, uint64_t max_len);

/* Synthetic lengths: "uniform:MIN:MAX:N" (integers, MIN..MAX inclusive) or
 * "normal:MEAN:SD:N" (rounded, clamped to 1..max_len); deterministic for a
 * seed. MIN/MAX outside 1..max_len are an error. */
llm_status llm_kvstat_lengths_synthetic(uint64_t **out, size_t *n, const char *spec, uint64_t seed,
                                    uint64_t max_len);

/* Printers: a readable table, or one JSON object (field names in
 * llm-kvstat(1)). */
llm_status llm_kvstat_print_table(FILE *f, const struct llm_kvstat_report *r);
llm_status llm_kvstat_print_json(FILE *f, const struct llm_kvstat_report *r);

#endif
