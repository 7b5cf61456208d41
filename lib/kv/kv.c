/* kv.c: the block pool of the paged KV cache: tables, reference counts,
 * the free list, fork, truncate and copy-on-write. */
#include "kv.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "../common/alloc.h"
#include "../common/fp16.h"
#include "../ops/vec.h"
#include "../quant/quant.h"

void llm_kv_params_default(struct llm_kv_params *p)
{
    memset(p, 0, sizeof *p);
    p->block_size = 16;
    p->n_seq = 1;
    p->type_k = p->type_v = LLM_TYPE_F32;
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
           llm_kv_type_ok(p->type_k, p->head_dim) && llm_kv_type_ok(p->type_v, p->head_dim) &&
           !llm_kv_types_why_not(p->type_k, p->type_v, p->block_size,
                                 (int64_t)p->n_kv_heads * p->head_dim) &&
           total_blocks(p) > 0;
}

const char *llm_kv_types_why_not(enum llm_type k, enum llm_type v, int32_t bs, int64_t kv_dim)
{
    if (v == LLM_TYPE_Q4Z_CH)
        return "q4ch is a type for keys: values are quantized per token (q4)";
    if (k == LLM_TYPE_Q4Z_CH && (bs <= 0 || bs % 16 || bs > 128 || (4 * kv_dim) % bs))
        return "q4ch keys need a block size of 16, 32, 64 or 128";
    return NULL;
}

size_t llm_kv_type_bytes(enum llm_type t)
{
    return t == LLM_TYPE_F32                           ? 4
           : t == LLM_TYPE_F16 || t == LLM_TYPE_BF16 ? 2
           : t == LLM_TYPE_FP8_E4M3                  ? 1
                                                     : 0;
}

#define KV_NAMES "f32, f16, bf16, q8, fp8_e4m3, q4 or q4ch"
static const struct {
    const char *name;
    enum llm_type t;
} kv_names[] = { { "f32", LLM_TYPE_F32 },  { "f16", LLM_TYPE_F16 },
                 { "bf16", LLM_TYPE_BF16 }, { "q8", LLM_TYPE_Q8_0 },
                 { "fp8_e4m3", LLM_TYPE_FP8_E4M3 }, { "q4", LLM_TYPE_Q4_0 },
                 { "q4ch", LLM_TYPE_Q4Z_CH },
                 /* aliases after the names */
                 { "q8_0", LLM_TYPE_Q8_0 }, { "fp8", LLM_TYPE_FP8_E4M3 } };

llm_status llm_kv_type_parse(const char *name, enum llm_type *out)
{
    for (size_t i = 0; i < sizeof kv_names / sizeof kv_names[0]; i++)
        if (!strcmp(name, kv_names[i].name)) {
            *out = kv_names[i].t;
            return LLM_OK;
        }
    return llm_error_set(LLM_E_INVALID, "'%s' is not " KV_NAMES, name);
}

llm_status llm_kv_types_option(int which, const char *name, enum llm_type kv[2], int *given)
{
    enum llm_type t;
    const char *opt = which == 1 ? "-k" : which == 2 ? "-v" : "";
    if (llm_kv_type_parse(name, &t))
        return llm_error_set(LLM_E_INVALID, "--kv-type%s: '%s' is not " KV_NAMES, opt, name);
    if (which == 2 && t == LLM_TYPE_Q4Z_CH)
        return llm_error_set(LLM_E_INVALID, "--kv-type-v: q4ch is a type for keys (values are "
                             "quantized per token: q4)");
    if (which & 1)
        kv[0] = t;
    if (which & 2) /* --kv-type q4ch: the 4-bit cache, keys per channel and values per token */
        kv[1] = t == LLM_TYPE_Q4Z_CH ? LLM_TYPE_Q4_0 : t;
    *given |= which;
    return LLM_OK;
}

const char *llm_kv_type_name(enum llm_type t)
{
    for (size_t i = 0; i < sizeof kv_names / sizeof kv_names[0]; i++)
        if (kv_names[i].t == t)
            return kv_names[i].name;
    return llm_type_name(t);
}

void llm_kv_types_text(char *buf, size_t size, enum llm_type k, enum llm_type v)
{
    if (k == v)
        snprintf(buf, size, "%s", llm_kv_type_name(k));
    else
        snprintf(buf, size, "%s K and %s V", llm_kv_type_name(k), llm_kv_type_name(v));
}

int llm_kv_type_ok(enum llm_type t, int64_t width)
{
    return llm_kv_type_bytes(t) || (t == LLM_TYPE_Q4Z_CH && width > 0) ||
           ((t == LLM_TYPE_Q8_0 || t == LLM_TYPE_Q4_0) && width > 0 && width % 32 == 0);
}

size_t llm_kv_row_bytes(enum llm_type t, int64_t kv_dim, int32_t block_size)
{
    return t == LLM_TYPE_Q8_0     ? (size_t)(kv_dim / 32) * sizeof(struct llm_block_q8_0)
           : t == LLM_TYPE_Q4_0   ? (size_t)(kv_dim / 32) * sizeof(struct llm_block_q4_0)
           : t == LLM_TYPE_Q4Z_CH ? (size_t)(kv_dim / 2 + 4 * kv_dim / (block_size > 0 ? block_size : 1))
                                  : (size_t)kv_dim * llm_kv_type_bytes(t);
}

/* Bytes of one block's K (v = 0) or V (v = 1) rows in every layer. */
static uint64_t half_block_bytes(const struct llm_kv_params *p, int v)
{
    uint64_t n;
    const uint64_t row = llm_kv_row_bytes(v ? p->type_v : p->type_k,
                                          (int64_t)p->n_kv_heads * p->head_dim, p->block_size);
    if (!params_ok(p) || !llm_mul_ok((uint64_t)p->n_layers, (uint64_t)p->block_size, &n) ||
        !llm_mul_ok(n, row, &n))
        return 0;
    return n;
}

uint64_t llm_kv_block_bytes(const struct llm_kv_params *p)
{
    uint64_t k = half_block_bytes(p, 0), v = half_block_bytes(p, 1);
    return k && v && k + v > k ? k + v : 0;
}

uint64_t llm_kv_half_bytes(const struct llm_kv_params *p, int v)
{
    uint64_t n, b = half_block_bytes(p, v);
    if (!b || !llm_mul_ok(b, (uint64_t)total_blocks(p), &n))
        return 0;
    return n;
}

uint64_t llm_kv_storage_bytes(const struct llm_kv_params *p)
{
    uint64_t k = llm_kv_half_bytes(p, 0), v = llm_kv_half_bytes(p, 1);
    return k && v && k + v > k ? k + v : 0;
}

static llm_status kv_init(struct llm_kv **out, const struct llm_kv_params *p)
{
    *out = NULL;
    if (!params_ok(p))
        return llm_error_set(LLM_E_INVALID, "KV cache: bad parameters (layers %d, kv heads %d, "
                             "head dim %d, block %d, seqs %d, tokens %d, blocks %d, types %s/%s)",
                             p->n_layers, p->n_kv_heads, p->head_dim, p->block_size, p->n_seq,
                             p->max_tokens, p->n_blocks, llm_type_name(p->type_k),
                             llm_type_name(p->type_v));
    struct llm_kv *kv = llm_calloc(1, sizeof *kv);
    if (!kv)
        return LLM_E_NOMEM;
    kv->p = *p;
    kv->p.n_blocks = total_blocks(p);
    kv->kv_dim = (int64_t)p->n_kv_heads * p->head_dim;
    kv->row_bytes_k = llm_kv_row_bytes(p->type_k, kv->kv_dim, p->block_size);
    kv->row_bytes_v = llm_kv_row_bytes(p->type_v, kv->kv_dim, p->block_size);
    kv->max_blocks = blocks_per_seq(p);
    kv->ref = llm_calloc((size_t)kv->p.n_blocks, sizeof(int32_t));
    kv->free_ids = llm_calloc((size_t)kv->p.n_blocks, sizeof(int32_t));
    kv->tables = llm_calloc((size_t)p->n_seq * (size_t)kv->max_blocks, sizeof(int32_t));
    kv->n_seq_blocks = llm_calloc((size_t)p->n_seq, sizeof(int32_t));
    kv->seq_len = llm_calloc((size_t)p->n_seq, sizeof(int32_t));
    if (p->type_k == LLM_TYPE_Q4Z_CH) {
        kv->tail = llm_calloc((size_t)p->n_seq * (size_t)p->n_layers * 2 * (size_t)p->block_size,
                              (size_t)kv->kv_dim * sizeof(uint16_t));
        kv->tail_blk = llm_malloc((size_t)p->n_seq * 2 * sizeof(int32_t));
        if (!kv->tail || !kv->tail_blk) {
            llm_kv_free(kv);
            return LLM_E_NOMEM;
        }
        for (int32_t i = 0; i < p->n_seq * 2; i++)
            kv->tail_blk[i] = -1;
    }
    if (!kv->ref || !kv->free_ids || !kv->tables || !kv->n_seq_blocks || !kv->seq_len) {
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
    uint64_t kb = llm_kv_half_bytes(p, 0), vb = llm_kv_half_bytes(p, 1);
    if (!kb || !vb)
        return kv_init(out, p); /* reports the bad parameters */
    if (kb > SIZE_MAX || vb > SIZE_MAX)
        return llm_error_set(LLM_E_NOMEM, "KV cache: %llu bytes do not fit in memory",
                             (unsigned long long)(kb + vb));
    LLM_TRY(kv_init(out, p));
    struct llm_kv *kv = *out;
    kv->k = llm_calloc(1, (size_t)kb);
    kv->v = llm_calloc(1, (size_t)vb);
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
    llm_free(kv->ref);
    llm_free(kv->free_ids);
    llm_free(kv->tables);
    llm_free(kv->n_seq_blocks);
    llm_free(kv->seq_len);
    llm_free(kv->copies);
    llm_free(kv->tail);
    llm_free(kv->tail_blk);
    llm_free(kv);
}

static int32_t *table_of(const struct llm_kv *kv, int32_t seq)
{
    return kv->tables + (int64_t)seq * kv->max_blocks;
}

static int32_t take_block(struct llm_kv *kv)
{
    int32_t id = kv->free_ids[--kv->n_free];
    kv->ref[id] = 1;
    int32_t used = kv->p.n_blocks - kv->n_free;
    if (used > kv->peak_used)
        kv->peak_used = used;
    return id;
}

static void drop_block(struct llm_kv *kv, int32_t id)
{
    if (--kv->ref[id] == 0)
        kv->free_ids[kv->n_free++] = id;
}

static int seq_ok(const struct llm_kv *kv, int32_t seq)
{
    return seq >= 0 && seq < kv->p.n_seq;
}

/* Blocks a prepare of [pos, pos + n) takes once seq is cut to pos (the cut
 * drops the blocks from ceil(pos / bs) on), and in *freed those the cut
 * returns to the free list. */
static int32_t need_after_cut(const struct llm_kv *kv, int32_t seq, int32_t pos, int32_t n,
                              int32_t *freed)
{
    const int32_t bs = kv->p.block_size, *table = table_of(kv, seq);
    const int32_t keep = (pos + bs - 1) / bs;
    int32_t need = 0;
    *freed = 0;
    for (int32_t i = keep; i < kv->n_seq_blocks[seq]; i++)
        *freed += kv->ref[table[i]] == 1;
    if (n == 0)
        return 0;
    for (int32_t i = pos / bs; i <= (pos + n - 1) / bs; i++)
        need += i >= keep || kv->ref[table[i]] > 1;
    return need;
}

int32_t llm_kv_need(const struct llm_kv *kv, int32_t seq, int32_t pos, int32_t n, int32_t *freed)
{
    int32_t f = 0, need = -1;
    if (seq_ok(kv, seq) && pos >= 0 && n >= 0 && pos <= kv->seq_len[seq] &&
        (int64_t)pos + n <= kv->p.max_tokens)
        need = need_after_cut(kv, seq, pos, n, &f);
    if (freed)
        *freed = f;
    return need;
}

llm_status llm_kv_prepare(struct llm_kv *kv, int32_t seq, int32_t pos, int32_t n)
{
    if (!seq_ok(kv, seq))
        return llm_error_set(LLM_E_INVALID, "KV cache: sequence %d out of range (0..%d)", seq,
                             kv->p.n_seq - 1);
    if (pos < 0 || n < 0 || (int64_t)pos + n > kv->p.max_tokens)
        return llm_error_set(LLM_E_INVALID, "context full: %lld tokens do not fit in a context "
                             "of %d", (long long)pos + n, kv->p.max_tokens);
    if (pos > kv->seq_len[seq])
        return llm_error_set(LLM_E_INVALID, "KV cache: position %d of sequence %d is past its "
                             "%d stored tokens", pos, seq, kv->seq_len[seq]);
    if (!llm_kv_can_cut(kv, seq, pos))
        return llm_error_set(LLM_E_INVALID, "KV cache: sequence %d cannot go back to position "
                             "%d (its q4ch keys there are quantized)", seq, pos);
    int32_t freed, need = need_after_cut(kv, seq, pos, n, &freed);
    if (need > kv->n_free + freed)
        return llm_error_set(LLM_E_KV_FULL, "KV cache: out of blocks (%d free, %d needed)",
                             kv->n_free + freed, need);
    /* room for the copies first, so that nothing fails half done */
    void *cp = kv->copies;
    size_t cap = (size_t)kv->cap_copies;
    LLM_TRY(llm_grow(&cp, &cap, (size_t)kv->n_copies + (size_t)need, sizeof *kv->copies));
    kv->copies = cp;
    kv->cap_copies = (int32_t)cap;
    llm_kv_truncate(kv, seq, pos);
    if (n == 0)
        return LLM_OK;
    const int32_t bs = kv->p.block_size;
    int32_t *table = table_of(kv, seq);
    for (int32_t i = pos / bs; i <= (pos + n - 1) / bs; i++) {
        if (i >= kv->n_seq_blocks[seq]) {
            table[kv->n_seq_blocks[seq]++] = take_block(kv);
            continue;
        }
        if (kv->ref[table[i]] == 1)
            continue;
        /* shared: a private copy, recorded for the storage's owner */
        int32_t id = take_block(kv);
        kv->copies[kv->n_copies++] = (struct llm_kv_copy){ table[i], id };
        drop_block(kv, table[i]);
        table[i] = id;
    }
    return LLM_OK;
}

void llm_kv_set_len(struct llm_kv *kv, int32_t seq, int32_t len)
{
    if (seq_ok(kv, seq) && len >= 0 && len <= (int64_t)kv->n_seq_blocks[seq] * kv->p.block_size)
        kv->seq_len[seq] = len;
}

int32_t llm_kv_len(const struct llm_kv *kv, int32_t seq)
{
    return seq_ok(kv, seq) ? kv->seq_len[seq] : 0;
}

llm_status llm_kv_fork(struct llm_kv *kv, int32_t src, int32_t dst, int32_t n)
{
    if (!seq_ok(kv, src) || !seq_ok(kv, dst) || src == dst)
        return llm_error_set(LLM_E_INVALID, "KV cache: cannot fork sequence %d into %d (0..%d)",
                             src, dst, kv->p.n_seq - 1);
    if (n < 0 || n > kv->seq_len[src])
        return llm_error_set(LLM_E_INVALID, "KV cache: fork of %d tokens from sequence %d, which "
                             "holds %d", n, src, kv->seq_len[src]);
    if (kv->tail && n % kv->p.block_size && !llm_kv_tail_holds(kv, src, n / kv->p.block_size))
        return llm_error_set(LLM_E_INVALID, "KV cache: fork of %d tokens from sequence %d, whose "
                             "q4ch keys there are quantized", n, src);
    llm_kv_reset(kv, dst);
    if (kv->tail) { /* the fp16 rows go along: a sequence's tail is its own */
        const size_t per = (size_t)kv->p.n_layers * 2 * (size_t)kv->p.block_size *
                           (size_t)kv->kv_dim;
        memcpy(kv->tail + (size_t)dst * per, kv->tail + (size_t)src * per, per * sizeof(uint16_t));
        kv->tail_blk[2 * dst] = kv->tail_blk[2 * src];
        kv->tail_blk[2 * dst + 1] = kv->tail_blk[2 * src + 1];
    }
    const int32_t nb = (int32_t)(((int64_t)n + kv->p.block_size - 1) / kv->p.block_size);
    const int32_t *from = table_of(kv, src);
    int32_t *to = table_of(kv, dst);
    for (int32_t i = 0; i < nb; i++) {
        to[i] = from[i];
        kv->ref[from[i]]++;
    }
    kv->n_seq_blocks[dst] = nb;
    kv->seq_len[dst] = n;
    return LLM_OK;
}

int llm_kv_tail_holds(const struct llm_kv *kv, int32_t seq, int32_t b)
{
    return kv->tail && b >= 0 && kv->tail_blk[2 * seq + b % 2] == b;
}

void llm_kv_tail_mark(struct llm_kv *kv, int32_t seq, int32_t b)
{
    if (kv->tail && seq_ok(kv, seq) && b >= 0)
        kv->tail_blk[2 * seq + b % 2] = b;
}

int llm_kv_can_cut(const struct llm_kv *kv, int32_t seq, int32_t n)
{
    const int32_t bs = kv->p.block_size;
    return !kv->tail || !seq_ok(kv, seq) || n >= kv->seq_len[seq] || n % bs == 0 ||
           llm_kv_tail_holds(kv, seq, n / bs);
}

int32_t llm_kv_truncate(struct llm_kv *kv, int32_t seq, int32_t n)
{
    if (!seq_ok(kv, seq) || n < 0)
        return 0;
    if (!llm_kv_can_cut(kv, seq, n))
        n -= n % kv->p.block_size;
    if (kv->tail && n == 0)
        kv->tail_blk[2 * seq] = kv->tail_blk[2 * seq + 1] = -1;
    const int32_t keep = (int32_t)(((int64_t)n + kv->p.block_size - 1) / kv->p.block_size);
    int32_t *table = table_of(kv, seq);
    while (kv->n_seq_blocks[seq] > keep) {
        int32_t i = --kv->n_seq_blocks[seq];
        drop_block(kv, table[i]);
        table[i] = -1;
    }
    if (kv->seq_len[seq] > n)
        kv->seq_len[seq] = n;
    return kv->seq_len[seq];
}

void llm_kv_reset(struct llm_kv *kv, int32_t seq)
{
    llm_kv_truncate(kv, seq, 0);
}

void llm_kv_copy_host(struct llm_kv *kv)
{
    const size_t bk = (size_t)kv->p.block_size * kv->row_bytes_k,
                 bv = (size_t)kv->p.block_size * kv->row_bytes_v;
    for (int32_t c = 0; c < kv->n_copies; c++)
        for (int32_t l = 0; l < kv->p.n_layers; l++) {
            const size_t s = (size_t)l * (size_t)kv->p.n_blocks + (size_t)kv->copies[c].src,
                         d = (size_t)l * (size_t)kv->p.n_blocks + (size_t)kv->copies[c].dst;
            memcpy((char *)kv->k + d * bk, (const char *)kv->k + s * bk, bk);
            memcpy((char *)kv->v + d * bv, (const char *)kv->v + s * bv, bv);
        }
    kv->n_copies = 0;
}

void llm_kv_stats(const struct llm_kv *kv, struct llm_kv_stats *st)
{
    memset(st, 0, sizeof *st);
    st->n_blocks = kv->p.n_blocks;
    st->free_ = kv->n_free;
    st->used = kv->p.n_blocks - kv->n_free;
    st->peak_used = kv->peak_used;
    for (int32_t i = 0; i < kv->p.n_blocks; i++)
        st->shared += kv->ref[i] > 1;
    for (int32_t s = 0; s < kv->p.n_seq; s++) {
        st->logical += kv->n_seq_blocks[s];
        st->tokens += kv->seq_len[s];
    }
}

int32_t llm_kv_free_blocks(const struct llm_kv *kv)
{
    return kv->n_free;
}

int32_t llm_kv_seq_block(const struct llm_kv *kv, int32_t seq, int32_t i)
{
    if (!seq_ok(kv, seq) || i < 0 || i >= kv->n_seq_blocks[seq])
        return -1;
    return table_of(kv, seq)[i];
}

void llm_kv_retain(struct llm_kv *kv, int32_t block)
{
    if (block >= 0 && block < kv->p.n_blocks && kv->ref[block] > 0)
        kv->ref[block]++;
}

void llm_kv_release(struct llm_kv *kv, int32_t block)
{
    if (block >= 0 && block < kv->p.n_blocks && kv->ref[block] > 0)
        drop_block(kv, block);
}

int32_t llm_kv_refs(const struct llm_kv *kv, int32_t block)
{
    return block >= 0 && block < kv->p.n_blocks ? kv->ref[block] : 0;
}

llm_status llm_kv_attach(struct llm_kv *kv, int32_t seq, const int32_t *blocks, int32_t nb)
{
    if (!seq_ok(kv, seq) || nb < 0 || nb > kv->max_blocks ||
        (int64_t)nb * kv->p.block_size > kv->p.max_tokens)
        return llm_error_set(LLM_E_INVALID, "KV cache: cannot attach %d blocks to sequence %d",
                             nb, seq);
    for (int32_t i = 0; i < nb; i++)
        if (blocks[i] < 0 || blocks[i] >= kv->p.n_blocks || kv->ref[blocks[i]] <= 0)
            return llm_error_set(LLM_E_INVALID, "KV cache: block %d is not in use", blocks[i]);
    llm_kv_reset(kv, seq); /* (and no tail: the blocks are full) */
    int32_t *table = table_of(kv, seq);
    for (int32_t i = 0; i < nb; i++) {
        table[i] = blocks[i];
        kv->ref[blocks[i]]++;
    }
    kv->n_seq_blocks[seq] = nb;
    kv->seq_len[seq] = nb * kv->p.block_size;
    return LLM_OK;
}

int32_t llm_kv_block_ref(const struct llm_kv *kv, int32_t seq, int32_t i)
{
    if (!seq_ok(kv, seq) || i < 0 || i >= kv->n_seq_blocks[seq])
        return 0;
    return kv->ref[table_of(kv, seq)[i]];
}

/* ---- q4ch keys ------------------------------------------------------------ */

void llm_kv_q4ch_quantize(const uint16_t *rows, int64_t kv_dim, int32_t bs, int32_t n_heads,
                          uint8_t *blk)
{
    const int64_t hd = kv_dim / n_heads;
    for (int32_t h = 0; h < n_heads; h++) {
        uint8_t *hb = blk + h * llm_q4ch_head_bytes(hd, bs);
        uint16_t *sc = (uint16_t *)hb, *mn = sc + hd;
        uint8_t *codes = hb + 4 * hd;
        for (int64_t c = 0; c < hd; c++) {
            const int64_t e = h * hd + c;
            float lo = INFINITY, hi = -INFINITY;
            for (int32_t t = 0; t < bs; t++) {
                const float x = llm_fp16_to_fp32(rows[t * kv_dim + e]);
                lo = x < lo ? x : lo;
                hi = x > hi ? x : hi;
            }
            /* the codes are rounded against the stored (fp16) scale and
             * minimum, which are what attention reads */
            sc[c] = llm_fp32_to_fp16((hi - lo) / 15.0f);
            mn[c] = llm_fp32_to_fp16(lo);
            const float d = llm_fp16_to_fp32(sc[c]), m = llm_fp16_to_fp32(mn[c]);
            const float inv = d > 0 ? 1.0f / d : 0.0f;
            uint8_t *cc = codes + c * (bs / 2);
            memset(cc, 0, (size_t)bs / 2);
            for (int32_t t = 0; t < bs; t++) {
                float q = nearbyintf((llm_fp16_to_fp32(rows[t * kv_dim + e]) - m) * inv);
                int code = q < 0 ? 0 : q > 15 ? 15 : (int)q;
                cc[llm_q4ch_byte(t)] |= (uint8_t)(code << llm_q4ch_shift(t));
            }
        }
    }
}

void llm_kv_q4ch_dequantize(const uint8_t *blk, int64_t kv_dim, int32_t bs, int32_t n_heads,
                            float *rows)
{
    const int64_t hd = kv_dim / n_heads;
    for (int32_t h = 0; h < n_heads; h++) {
        const uint8_t *hb = blk + h * llm_q4ch_head_bytes(hd, bs);
        const uint16_t *sc = (const uint16_t *)hb, *mn = sc + hd;
        const uint8_t *codes = hb + 4 * hd;
        for (int64_t c = 0; c < hd; c++)
            for (int32_t t = 0; t < bs; t++) {
                const int code = codes[c * (bs / 2) + llm_q4ch_byte(t)] >> llm_q4ch_shift(t) & 15;
                rows[t * kv_dim + h * hd + c] =
                    llm_fp16_to_fp32(mn[c]) + (float)code * llm_fp16_to_fp32(sc[c]);
            }
    }
}

/* Keys into the tail as fp16, slot by slot; a block they fill is quantized
 * from its slot (its earlier rows were put there by earlier steps). */
static void store_q4ch(struct llm_kv *kv, int32_t layer, int32_t seq, int32_t pos, int32_t n,
                       const float *k)
{
    const int32_t bs = kv->p.block_size;
    const int64_t d = kv->kv_dim;
    for (int32_t p = pos; p < pos + n;) {
        const int32_t b = p / bs, end = (b + 1) * bs < pos + n ? (b + 1) * bs : pos + n;
        for (; p < end; p++) {
            uint16_t *row = llm_kv_tail_row(kv, seq, layer, p);
            const float *src = k + (int64_t)(p - pos) * d;
            llm_vec_to_f16(src, row, d);
        }
        llm_kv_tail_mark(kv, seq, b);
        if (end == (b + 1) * bs) {
            const int64_t r = llm_kv_row_number(kv, layer, seq, b * bs);
            llm_kv_q4ch_quantize(llm_kv_tail_row(kv, seq, layer, b * bs), d, bs,
                                 kv->p.n_kv_heads, (uint8_t *)kv->k + (size_t)r * kv->row_bytes_k);
        }
    }
}

void llm_kv_store_host(struct llm_kv *kv, int32_t layer, int32_t seq, int32_t pos, int32_t n,
                       const float *k, const float *v)
{
    /* each row in its cache's type as the weights' quantizer writes it: a
     * copy, a rounding to fp16, bf16 or fp8, or q8_0 or q4_0 blocks with
     * their scales (a row, and so a paged block, carries its own); q4_0
     * after the rotation of kv.h */
    float rot[LLM_KV_ROT_MAX];
    const int64_t d = kv->kv_dim;
    const int q4ch = kv->p.type_k == LLM_TYPE_Q4Z_CH;
    if (q4ch)
        store_q4ch(kv, layer, seq, pos, n, k);
    for (int32_t i = 0; i < n; i++) {
        const int64_t r = llm_kv_row_number(kv, layer, seq, pos + i);
        const float *src[2] = { k + (int64_t)i * d, v + (int64_t)i * d };
        const enum llm_type t[2] = { kv->p.type_k, kv->p.type_v };
        uint8_t *dst[2] = { (uint8_t *)kv->k + (size_t)r * kv->row_bytes_k,
                            (uint8_t *)kv->v + (size_t)r * kv->row_bytes_v };
        for (int j = q4ch; j < 2; j++) {
            if (t[j] == LLM_TYPE_FP8_E4M3) { /* no row scale, unlike the weights' fp8 */
                for (int64_t e = 0; e < d; e++)
                    dst[j][e] = llm_fp32_to_fp8_e4m3(src[j][e]);
                continue;
            }
            if (t[j] == LLM_TYPE_F16) { /* llm_quantize_row's bits, vectorized */
                llm_vec_to_f16(src[j], (uint16_t *)dst[j], d);
                continue;
            }
            if (t[j] != LLM_TYPE_Q4_0) {
                llm_quantize_row(t[j], src[j], dst[j], d);
                continue;
            }
            for (int64_t c = 0; c < d; c += LLM_KV_ROT_MAX) { /* a piece at a time */
                const int64_t w = d - c < LLM_KV_ROT_MAX ? d - c : LLM_KV_ROT_MAX;
                memcpy(rot, src[j] + c, (size_t)w * sizeof(float));
                llm_vec_hadamard32(rot, w);
                llm_quantize_row(t[j], rot, dst[j] + c / 32 * sizeof(struct llm_block_q4_0), w);
            }
        }
    }
}
