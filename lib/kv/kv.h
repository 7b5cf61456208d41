/* kv.h: the paged KV cache.
 *
 * Keys and values live in fixed-size blocks of `block_size` token rows; a
 * sequence owns a block table mapping its logical blocks (position /
 * block_size) to physical ones, taken from a shared free list as the
 * sequence grows and returned when it is reset. A block id covers the same
 * token range in every layer, so one table serves all layers.
 *
 * Storage is (n_layers, n_blocks, block_size, kv_dim) for K and for V, in
 * F32 or F16, with kv_dim = n_kv_heads * head_dim. The storage pointers may
 * be device memory when a backend allocates them (llm_kv_new_with); the
 * tables are always host memory.
 */
#ifndef LLM_KV_KV_H
#define LLM_KV_KV_H

#include <stddef.h>
#include <stdint.h>

#include "../common/status.h"
#include "../quant/types.h"

struct llm_kv_params {
    int32_t n_layers, n_kv_heads, head_dim;
    int32_t block_size;     /* tokens per block (default 16) */
    int32_t n_seq;          /* sequences with a block table */
    int32_t max_tokens;     /* capacity of one sequence, in tokens */
    int32_t n_blocks;       /* physical blocks; 0: n_seq * ceil(max_tokens / block_size) */
    enum llm_type type;     /* LLM_TYPE_F32 or LLM_TYPE_F16 */
};

struct llm_kv {
    struct llm_kv_params p;
    int64_t kv_dim;
    size_t elt;             /* bytes per element */
    size_t row_bytes;       /* kv_dim * elt */
    int32_t max_blocks;     /* table entries per sequence */
    void *k, *v;            /* (n_layers, n_blocks, block_size, kv_dim) */
    int32_t *free_ids;      /* (n_blocks) stack of free block ids */
    int32_t n_free;
    int32_t *tables;        /* (n_seq, max_blocks) physical id or -1 */
    int32_t *n_seq_blocks;  /* (n_seq) blocks held */
    int32_t *seq_len;       /* (n_seq) positions stored */
    int owns_storage;
};

void llm_kv_params_default(struct llm_kv_params *p);

/* Bytes of K+V storage the parameters need; 0 on overflow or bad values. */
uint64_t llm_kv_storage_bytes(const struct llm_kv_params *p);

/* A cache with host storage. LLM_E_INVALID for bad parameters. */
llm_status llm_kv_new(struct llm_kv **out, const struct llm_kv_params *p);
/* A cache whose K and V storage (llm_kv_storage_bytes / 2 each) the caller
 * allocated and keeps owning. */
llm_status llm_kv_new_with(struct llm_kv **out, const struct llm_kv_params *p, void *k, void *v);
void llm_kv_free(struct llm_kv *kv);

/* Make positions [0, n_tokens) of `seq` addressable, taking blocks from the
 * free list. LLM_E_INVALID when n_tokens exceeds the sequence capacity,
 * LLM_E_NOMEM when the free list runs out (the detail says which). */
llm_status llm_kv_reserve(struct llm_kv *kv, int32_t seq, int32_t n_tokens);
/* Record that positions [0, len) hold data (len <= reserved tokens). */
void llm_kv_set_len(struct llm_kv *kv, int32_t seq, int32_t len);
int32_t llm_kv_len(const struct llm_kv *kv, int32_t seq);
/* Return every block of `seq` to the free list. */
void llm_kv_reset(struct llm_kv *kv, int32_t seq);
int32_t llm_kv_free_blocks(const struct llm_kv *kv);

/* Offset in elements of the row of (layer, seq, pos) in the K or V storage;
 * the position must be reserved. */
static inline int64_t llm_kv_row_index(const struct llm_kv *kv, int32_t layer, int32_t seq,
                                       int32_t pos)
{
    int32_t blk = kv->tables[(int64_t)seq * kv->max_blocks + pos / kv->p.block_size];
    return (((int64_t)layer * kv->p.n_blocks + blk) * kv->p.block_size + pos % kv->p.block_size) *
           kv->kv_dim;
}

/* Store n rows of keys and values (n, kv_dim) float32 at positions
 * pos..pos+n-1 of `seq` in `layer` (host storage only), converting to the
 * cache type. */
void llm_kv_store_host(struct llm_kv *kv, int32_t layer, int32_t seq, int32_t pos, int32_t n,
                       const float *k, const float *v);

#endif
