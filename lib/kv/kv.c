/* kv.c: block tables and free list of the paged KV cache. */
#include "kv.h"

#include <string.h>

#include "../common/alloc.h"
#include "../common/fp16.h"

void llm_kv_params_default(struct llm_kv_params *p)
{
    memset(p, 0, sizeof *p);
    p->block_size = 16;
    p->n_seq = 1;
    p->type = LLM_TYPE_F32;
}

static int32_t blocks_per_seq(const struct llm_kv_params *p)
{
    return (int32_t)(((int64_t)p->max_tokens + p->block_size - 1) / p->block_size);
}

static int32_t total_blocks(const struct llm_kv_params *p)
{
    if (p->n_blocks > 0)
        return p->n_blocks;
    int64_t n = (int64_t)blocks_per_seq(p) * p->n_seq;
    return n > INT32_MAX ? 0 : (int32_t)n;
}

static int params_ok(const struct llm_kv_params *p)
{
    return p->n_layers > 0 && p->n_kv_heads > 0 && p->head_dim > 0 && p->block_size > 0 &&
           p->n_seq > 0 && p->max_tokens > 0 && p->n_blocks >= 0 &&
           (p->type == LLM_TYPE_F32 || p->type == LLM_TYPE_F16) && total_blocks(p) > 0;
}

uint64_t llm_kv_storage_bytes(const struct llm_kv_params *p)
{
    uint64_t n;
    if (!params_ok(p))
        return 0;
    uint64_t elt = p->type == LLM_TYPE_F16 ? 2 : 4;
    if (!llm_mul_ok((uint64_t)p->n_layers, (uint64_t)total_blocks(p), &n) ||
        !llm_mul_ok(n, (uint64_t)p->block_size, &n) ||
        !llm_mul_ok(n, (uint64_t)p->n_kv_heads * (uint64_t)p->head_dim, &n) ||
        !llm_mul_ok(n, elt * 2, &n))
        return 0;
    return n;
}

static llm_status kv_init(struct llm_kv **out, const struct llm_kv_params *p)
{
    *out = NULL;
    if (!params_ok(p))
        return llm_error_set(LLM_E_INVALID, "KV cache: bad parameters (layers %d, kv heads %d, "
                             "head dim %d, block %d, seqs %d, tokens %d, type %s)",
                             p->n_layers, p->n_kv_heads, p->head_dim, p->block_size, p->n_seq,
                             p->max_tokens, llm_type_name(p->type));
    struct llm_kv *kv = llm_calloc(1, sizeof *kv);
    if (!kv)
        return LLM_E_NOMEM;
    kv->p = *p;
    kv->p.n_blocks = total_blocks(p);
    kv->kv_dim = (int64_t)p->n_kv_heads * p->head_dim;
    kv->elt = p->type == LLM_TYPE_F16 ? 2 : 4;
    kv->row_bytes = (size_t)kv->kv_dim * kv->elt;
    kv->max_blocks = blocks_per_seq(p);
    kv->free_ids = llm_calloc((size_t)kv->p.n_blocks, sizeof(int32_t));
    kv->tables = llm_calloc((size_t)p->n_seq * (size_t)kv->max_blocks, sizeof(int32_t));
    kv->n_seq_blocks = llm_calloc((size_t)p->n_seq, sizeof(int32_t));
    kv->seq_len = llm_calloc((size_t)p->n_seq, sizeof(int32_t));
    if (!kv->free_ids || !kv->tables || !kv->n_seq_blocks || !kv->seq_len) {
        llm_kv_free(kv);
        return LLM_E_NOMEM;
    }
    /* Pop order 0, 1, 2...: a lone sequence gets contiguous blocks. */
    for (int32_t i = 0; i < kv->p.n_blocks; i++)
        kv->free_ids[i] = kv->p.n_blocks - 1 - i;
    kv->n_free = kv->p.n_blocks;
    for (size_t i = 0; i < (size_t)p->n_seq * (size_t)kv->max_blocks; i++)
        kv->tables[i] = -1;
    *out = kv;
    return LLM_OK;
}

llm_status llm_kv_new(struct llm_kv **out, const struct llm_kv_params *p)
{
    uint64_t bytes = llm_kv_storage_bytes(p);
    if (!bytes)
        return kv_init(out, p); /* reports the bad parameters */
    if (bytes / 2 > SIZE_MAX)
        return llm_error_set(LLM_E_NOMEM, "KV cache: %llu bytes do not fit in memory",
                             (unsigned long long)bytes);
    LLM_TRY(kv_init(out, p));
    struct llm_kv *kv = *out;
    kv->k = llm_calloc(1, (size_t)(bytes / 2));
    kv->v = llm_calloc(1, (size_t)(bytes / 2));
    kv->owns_storage = 1;
    if (!kv->k || !kv->v) {
        llm_kv_free(kv);
        *out = NULL;
        return LLM_E_NOMEM;
    }
    return LLM_OK;
}

llm_status llm_kv_new_with(struct llm_kv **out, const struct llm_kv_params *p, void *k, void *v)
{
    LLM_TRY(kv_init(out, p));
    (*out)->k = k;
    (*out)->v = v;
    return LLM_OK;
}

void llm_kv_free(struct llm_kv *kv)
{
    if (!kv)
        return;
    if (kv->owns_storage) {
        llm_free(kv->k);
        llm_free(kv->v);
    }
    llm_free(kv->free_ids);
    llm_free(kv->tables);
    llm_free(kv->n_seq_blocks);
    llm_free(kv->seq_len);
    llm_free(kv);
}

llm_status llm_kv_reserve(struct llm_kv *kv, int32_t seq, int32_t n_tokens)
{
    if (seq < 0 || seq >= kv->p.n_seq)
        return llm_error_set(LLM_E_INVALID, "KV cache: sequence %d out of range (0..%d)", seq,
                             kv->p.n_seq - 1);
    if (n_tokens < 0 || n_tokens > kv->p.max_tokens)
        return llm_error_set(LLM_E_INVALID, "context full: %d tokens do not fit in a context of %d",
                             n_tokens, kv->p.max_tokens);
    int32_t need = (int32_t)(((int64_t)n_tokens + kv->p.block_size - 1) / kv->p.block_size);
    int32_t *table = kv->tables + (int64_t)seq * kv->max_blocks;
    if (need - kv->n_seq_blocks[seq] > kv->n_free)
        return llm_error_set(LLM_E_NOMEM, "KV cache: out of blocks (%d free, %d needed)",
                             kv->n_free, need - kv->n_seq_blocks[seq]);
    while (kv->n_seq_blocks[seq] < need)
        table[kv->n_seq_blocks[seq]++] = kv->free_ids[--kv->n_free];
    return LLM_OK;
}

void llm_kv_set_len(struct llm_kv *kv, int32_t seq, int32_t len)
{
    if (seq >= 0 && seq < kv->p.n_seq && len >= 0 &&
        len <= (int64_t)kv->n_seq_blocks[seq] * kv->p.block_size)
        kv->seq_len[seq] = len;
}

int32_t llm_kv_len(const struct llm_kv *kv, int32_t seq)
{
    return seq >= 0 && seq < kv->p.n_seq ? kv->seq_len[seq] : 0;
}

void llm_kv_reset(struct llm_kv *kv, int32_t seq)
{
    if (seq < 0 || seq >= kv->p.n_seq)
        return;
    int32_t *table = kv->tables + (int64_t)seq * kv->max_blocks;
    while (kv->n_seq_blocks[seq] > 0) {
        int32_t i = --kv->n_seq_blocks[seq];
        kv->free_ids[kv->n_free++] = table[i];
        table[i] = -1;
    }
    kv->seq_len[seq] = 0;
}

int32_t llm_kv_free_blocks(const struct llm_kv *kv)
{
    return kv->n_free;
}

void llm_kv_store_host(struct llm_kv *kv, int32_t layer, int32_t seq, int32_t pos, int32_t n,
                       const float *k, const float *v)
{
    for (int32_t i = 0; i < n; i++) {
        int64_t off = llm_kv_row_index(kv, layer, seq, pos + i);
        const float *ki = k + (int64_t)i * kv->kv_dim, *vi = v + (int64_t)i * kv->kv_dim;
        if (kv->p.type == LLM_TYPE_F16) {
            uint16_t *kd = (uint16_t *)kv->k + off, *vd = (uint16_t *)kv->v + off;
            for (int64_t j = 0; j < kv->kv_dim; j++) {
                kd[j] = llm_fp32_to_fp16(ki[j]);
                vd[j] = llm_fp32_to_fp16(vi[j]);
            }
        } else {
            memcpy((float *)kv->k + off, ki, kv->row_bytes);
            memcpy((float *)kv->v + off, vi, kv->row_bytes);
        }
    }
}
