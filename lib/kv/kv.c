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
           p->n_seq > 0 && p->max_tokens > 0 && p->n_blocks >= 0 && p->window >= 0 &&
           p->max_step >= 0 && p->keep >= 0 &&
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

/* ---- sliding windows: the geometry ----------------------------------------- */

static int32_t window_keep(const struct llm_kv_params *p)
{
    return p->keep > 0 ? p->keep : LLM_KV_WINDOW_KEEP;
}

static int32_t marked_local(const struct llm_kv_params *p)
{
    int32_t n = 0;
    for (int32_t l = 0; p->window > 0 && l < p->n_layers; l++)
        n += !p->local || p->local[l];
    return n;
}

int32_t llm_kv_window_blocks(const struct llm_kv_params *p)
{
    if (p->window <= 0 || p->block_size <= 0 || p->max_tokens <= 0 || p->n_seq <= 0 ||
        !marked_local(p))
        return 0;
    /* a step writes positions [pos, pos + step) and reads from
     * pos - window + 1 - keep on: at most this many blocks, however they
     * fall on the block boundaries */
    const int64_t step = p->max_step > 0 && p->max_step < p->max_tokens ? p->max_step
                                                                       : p->max_tokens;
    const int64_t b = (step + p->window + window_keep(p) + 2 * (int64_t)p->block_size) /
                          p->block_size + 1;
    /* no saving, or a pool too large to count: every layer a full one */
    if (b >= blocks_per_seq(p) || b * p->n_seq > INT32_MAX)
        return 0;
    return (int32_t)b;
}

/* The window layers (0 when the window saves nothing) and their slots. */
static int32_t n_local_of(const struct llm_kv_params *p, int32_t *n_slots)
{
    const int32_t wb = llm_kv_window_blocks(p);
    *n_slots = wb * p->n_seq;
    return wb ? marked_local(p) : 0;
}

/* Bytes of one block's K (v = 0) or V (v = 1) rows in one layer; 0 for
 * bad parameters. */
static uint64_t layer_block_bytes(const struct llm_kv_params *p, int v)
{
    uint64_t n;
    const uint64_t row = llm_kv_row_bytes(v ? p->type_v : p->type_k,
                                          (int64_t)p->n_kv_heads * p->head_dim, p->block_size);
    if (!params_ok(p) || !llm_mul_ok((uint64_t)p->block_size, row, &n))
        return 0;
    return n;
}

/* Bytes of K (v = 0) or V (v = 1) of the full layers' blocks (blocks = 1:
 * one block) or of the window layers' slots (window), through *out; 0 for
 * bad parameters or an overflow. */
static int part_bytes(const struct llm_kv_params *p, int v, int window, uint64_t blocks,
                      uint64_t *out)
{
    int32_t n_slots, n_local = n_local_of(p, &n_slots);
    const uint64_t lb = layer_block_bytes(p, v);
    const uint64_t layers = window ? (uint64_t)n_local : (uint64_t)(p->n_layers - n_local);
    uint64_t n;
    *out = 0;
    return lb && llm_mul_ok(lb, layers, &n) && llm_mul_ok(n, window ? (uint64_t)n_slots : blocks, out);
}

uint64_t llm_kv_block_bytes(const struct llm_kv_params *p)
{
    uint64_t k, v;
    return part_bytes(p, 0, 0, 1, &k) && part_bytes(p, 1, 0, 1, &v) && k + v >= k ? k + v : 0;
}

uint64_t llm_kv_window_bytes(const struct llm_kv_params *p)
{
    uint64_t k, v;
    return part_bytes(p, 0, 1, 0, &k) && part_bytes(p, 1, 1, 0, &v) && k + v >= k ? k + v : 0;
}

uint64_t llm_kv_half_bytes(const struct llm_kv_params *p, int v)
{
    uint64_t full, win;
    if (!part_bytes(p, v, 0, (uint64_t)total_blocks(p), &full) || !part_bytes(p, v, 1, 0, &win) ||
        full + win < full)
        return 0;
    return full + win;
}

uint64_t llm_kv_storage_bytes(const struct llm_kv_params *p)
{
    uint64_t k = llm_kv_half_bytes(p, 0), v = llm_kv_half_bytes(p, 1);
    return k && v && k + v > k ? k + v : 0;
}

/* The window layers' bookkeeping (kv.h), when the parameters have a
 * window that saves memory. */
static llm_status window_init(struct llm_kv *kv, const struct llm_kv_params *p)
{
    kv->p.local = NULL; /* the caller's: copied into kv->local */
    kv->n_local = n_local_of(p, &kv->n_slots);
    if (!kv->n_local) {
        kv->n_slots = 0;
        kv->n_full = p->n_layers;
        return LLM_OK;
    }
    kv->n_full = p->n_layers - kv->n_local;
    kv->win_blocks = llm_kv_window_blocks(p);
    kv->local = llm_malloc((size_t)p->n_layers);
    kv->plane = llm_malloc((size_t)p->n_layers * sizeof(int32_t));
    kv->slot = llm_malloc((size_t)kv->p.n_blocks * sizeof(int32_t));
    kv->slot_ref = llm_calloc((size_t)kv->p.n_blocks, sizeof(int32_t));
    kv->free_slots = llm_malloc((size_t)kv->n_slots * sizeof(int32_t));
    kv->past = llm_calloc((size_t)p->n_seq, sizeof(int32_t));
    if (!kv->local || !kv->plane || !kv->slot || !kv->slot_ref || !kv->free_slots || !kv->past)
        return LLM_E_NOMEM;
    for (int32_t l = 0, nf = 0, nl = 0; l < p->n_layers; l++) {
        kv->local[l] = !p->local || p->local[l];
        kv->plane[l] = kv->local[l] ? nl++ : nf++;
    }
    kv->p.local = kv->local; /* kv->p describes the cache: llm_kv_storage_bytes(&kv->p) */
    for (int32_t i = 0; i < kv->p.n_blocks; i++)
        kv->slot[i] = -1;
    for (int32_t i = 0; i < kv->n_slots; i++)
        kv->free_slots[i] = kv->n_slots - 1 - i;
    kv->n_free_slots = kv->n_slots;
    return LLM_OK;
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
    if (!kv->ref || !kv->free_ids || !kv->tables || !kv->n_seq_blocks || !kv->seq_len ||
        window_init(kv, p)) {
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
    llm_free(kv->local);
    llm_free(kv->plane);
    llm_free(kv->slot);
    llm_free(kv->slot_ref);
    llm_free(kv->free_slots);
    llm_free(kv->past);
    llm_free(kv);
}

static int seq_ok(const struct llm_kv *kv, int32_t seq);
static int q4ch_can_cut(const struct llm_kv *kv, int32_t seq, int32_t n);

static int32_t *table_of(const struct llm_kv *kv, int32_t seq)
{
    return kv->tables + (int64_t)seq * kv->max_blocks;
}

/* A window slot for block id, read by one table entry. */
static void take_slot(struct llm_kv *kv, int32_t id)
{
    kv->slot[id] = kv->free_slots[--kv->n_free_slots];
    kv->slot_ref[id] = 1;
    if (kv->n_slots - kv->n_free_slots > kv->peak_slots)
        kv->peak_slots = kv->n_slots - kv->n_free_slots;
}

/* A table entry stops reading block id's window rows: the last one gives
 * the slot back. */
static void unread(struct llm_kv *kv, int32_t id)
{
    if (kv->n_local && --kv->slot_ref[id] == 0) {
        kv->free_slots[kv->n_free_slots++] = kv->slot[id];
        kv->slot[id] = -1;
    }
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

/* Table entry i of seq is dropped or replaced: it stops reading. */
static void drop_entry(struct llm_kv *kv, int32_t seq, int32_t i, int32_t id)
{
    if (kv->n_local && i >= kv->past[seq])
        unread(kv, id);
    drop_block(kv, id);
}

/* The table entries a sequence written from position pos on reads no
 * window rows of (kv.h). */
static int32_t past_of(const struct llm_kv *kv, int32_t pos)
{
    const int64_t from = (int64_t)pos - kv->p.window + 1 - window_keep(&kv->p);
    return kv->n_local && from > 0 ? (int32_t)(from / kv->p.block_size) : 0;
}

/* seq stops reading the window rows of its entries below `to`. */
static void advance(struct llm_kv *kv, int32_t seq, int32_t to)
{
    if (!kv->n_local)
        return;
    const int32_t *table = table_of(kv, seq);
    if (to > kv->n_seq_blocks[seq])
        to = kv->n_seq_blocks[seq];
    for (int32_t i = kv->past[seq]; i < to; i++)
        unread(kv, table[i]);
    if (to > kv->past[seq])
        kv->past[seq] = to;
}

/* The first table entry a query at position n reads in a window layer. */
static int32_t first_read(const struct llm_kv *kv, int32_t n)
{
    const int32_t from = n - kv->p.window + 1;
    return from > 0 ? from / kv->p.block_size : 0;
}

/* The first of the entries [lo, nb) of `blocks` from which on every one
 * has its window rows (nb when the last has none). */
static int32_t held_from(const struct llm_kv *kv, const int32_t *blocks, int32_t nb, int32_t lo)
{
    int32_t i = nb;
    while (kv->n_local && i > lo && kv->slot[blocks[i - 1]] >= 0)
        i--;
    return kv->n_local ? i : lo;
}

/* Can a sequence of the nb blocks `blocks`, n positions long, go on: are
 * the window rows its next query reads held? */
static int window_held(const struct llm_kv *kv, const int32_t *blocks, int32_t nb, int32_t n)
{
    return held_from(kv, blocks, nb, first_read(kv, n)) <= first_read(kv, n);
}

/* The most of n positions of seq (n < its length) that it can be cut to
 * and go on from (the window rows there are held; those below past[seq]
 * may be gone). */
static int32_t window_cut(const struct llm_kv *kv, int32_t seq, int32_t n)
{
    const int32_t bs = kv->p.block_size, *table = table_of(kv, seq);
    while (kv->n_local && n > 0) {
        const int32_t nb = (n + bs - 1) / bs, top = nb < kv->past[seq] ? nb : kv->past[seq];
        const int32_t lo = first_read(kv, n);
        if (top <= lo || held_from(kv, table, top, lo) <= lo)
            break;
        n = (held_from(kv, table, top, lo) - 1) * bs; /* below the missing block */
    }
    return n;
}

/* seq's entries from the watermark w on read their window rows (held):
 * its past becomes w. */
static void read_from(struct llm_kv *kv, int32_t seq, int32_t w)
{
    const int32_t *table = table_of(kv, seq);
    if (!kv->n_local)
        return;
    kv->past[seq] = w;
    for (int32_t i = w; i < kv->n_seq_blocks[seq]; i++)
        kv->slot_ref[table[i]]++;
}

int32_t llm_kv_window_from(const struct llm_kv *kv, int32_t seq)
{
    return kv->n_local && seq_ok(kv, seq) ? kv->past[seq] * kv->p.block_size : 0;
}

void llm_kv_window_forget(struct llm_kv *kv, int32_t seq, int32_t pos)
{
    if (kv->n_local && seq_ok(kv, seq) && pos > 0)
        advance(kv, seq, (int32_t)(((int64_t)pos + kv->p.block_size - 1) / kv->p.block_size));
}

int llm_kv_window_reaches(const struct llm_kv *kv, int32_t n, int32_t from)
{
    const int64_t bs = kv->p.block_size;
    return from <= 0 || (kv->n_local && first_read(kv, n) >= ((int64_t)from + bs - 1) / bs);
}

int32_t llm_kv_attach_usable(const struct llm_kv *kv, const int32_t *blocks, int32_t nb)
{
    while (nb > 0 && !window_held(kv, blocks, nb, nb * kv->p.block_size))
        nb--;
    return nb;
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
                             "%d (%s)", seq, pos, kv->tail && !q4ch_can_cut(kv, seq, pos)
                             ? "its q4ch keys there are quantized"
                             : "its window rows there are gone");
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
    /* every query of the step is at pos or later: the window rows before
     * its window go back to the pool first */
    advance(kv, seq, past_of(kv, pos));
    if (kv->n_local && need > kv->n_free_slots) /* (the slots' count rules this out) */
        return llm_error_set(LLM_E_KV_FULL, "KV cache: out of window slots (%d free, %d "
                             "needed)", kv->n_free_slots, need);
    if (n == 0)
        return LLM_OK;
    const int32_t bs = kv->p.block_size;
    int32_t *table = table_of(kv, seq);
    for (int32_t i = pos / bs; i <= (pos + n - 1) / bs; i++) {
        if (i >= kv->n_seq_blocks[seq]) {
            const int32_t id = take_block(kv);
            if (kv->n_local)
                take_slot(kv, id);
            table[kv->n_seq_blocks[seq]++] = id;
            continue;
        }
        if (kv->ref[table[i]] == 1)
            continue;
        /* shared: a private copy, recorded for the storage's owner */
        const int32_t src = table[i], id = take_block(kv);
        struct llm_kv_copy rec = { src, id, -1, -1 };
        if (kv->n_local && kv->slot_ref[src] == 1) {
            /* the window rows were this entry's alone: they move along */
            kv->slot[id] = kv->slot[src];
            kv->slot_ref[id] = 1;
            kv->slot[src] = -1;
            kv->slot_ref[src] = 0;
        } else if (kv->n_local) {
            take_slot(kv, id);
            rec.src_slot = kv->slot[src];
            rec.dst_slot = kv->slot[id];
            kv->slot_ref[src]--;
        }
        kv->copies[kv->n_copies++] = rec;
        drop_block(kv, src);
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
    const int32_t nb = (int32_t)(((int64_t)n + kv->p.block_size - 1) / kv->p.block_size);
    const int32_t *from = table_of(kv, src);
    if (!window_held(kv, from, nb, n))
        return llm_error_set(LLM_E_INVALID, "KV cache: fork of %d tokens from sequence %d, whose "
                             "window rows there are gone", n, src);
    llm_kv_reset(kv, dst);
    if (kv->tail) { /* the fp16 rows go along: a sequence's tail is its own */
        const size_t per = (size_t)kv->p.n_layers * 2 * (size_t)kv->p.block_size *
                           (size_t)kv->kv_dim;
        memcpy(kv->tail + (size_t)dst * per, kv->tail + (size_t)src * per, per * sizeof(uint16_t));
        kv->tail_blk[2 * dst] = kv->tail_blk[2 * src];
        kv->tail_blk[2 * dst + 1] = kv->tail_blk[2 * src + 1];
    }
    /* (emptying dst may have given back window rows only it read) */
    if (!window_held(kv, from, nb, n))
        return llm_error_set(LLM_E_INVALID, "KV cache: fork of %d tokens from sequence %d, whose "
                             "window rows there are gone", n, src);
    int32_t *to = table_of(kv, dst);
    for (int32_t i = 0; i < nb; i++) {
        to[i] = from[i];
        kv->ref[from[i]]++;
    }
    kv->n_seq_blocks[dst] = nb;
    kv->seq_len[dst] = n;
    /* the entries the fork reads from on: the kept ones behind its window
     * too, as far as they are held */
    const int32_t lo = past_of(kv, n);
    read_from(kv, dst, held_from(kv, to, nb, lo));
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

static int q4ch_can_cut(const struct llm_kv *kv, int32_t seq, int32_t n)
{
    const int32_t bs = kv->p.block_size;
    return !kv->tail || n % bs == 0 || llm_kv_tail_holds(kv, seq, n / bs);
}

int llm_kv_can_cut(const struct llm_kv *kv, int32_t seq, int32_t n)
{
    return !seq_ok(kv, seq) || n >= kv->seq_len[seq] ||
           (q4ch_can_cut(kv, seq, n) && window_cut(kv, seq, n) == n);
}

int32_t llm_kv_truncate(struct llm_kv *kv, int32_t seq, int32_t n)
{
    if (!seq_ok(kv, seq) || n < 0)
        return 0;
    const int cut = n < kv->seq_len[seq];
    if (cut && !q4ch_can_cut(kv, seq, n))
        n -= n % kv->p.block_size;
    if (cut)
        n = window_cut(kv, seq, n);
    if (kv->tail && n == 0)
        kv->tail_blk[2 * seq] = kv->tail_blk[2 * seq + 1] = -1;
    const int32_t keep = (int32_t)(((int64_t)n + kv->p.block_size - 1) / kv->p.block_size);
    int32_t *table = table_of(kv, seq);
    while (kv->n_seq_blocks[seq] > keep) {
        int32_t i = --kv->n_seq_blocks[seq];
        drop_entry(kv, seq, i, table[i]);
        table[i] = -1;
    }
    /* entries the shorter sequence reads again: from its watermark, as far
     * back as they are held (window_cut: at least its next query's) */
    if (cut && kv->n_local && past_of(kv, n) < kv->past[seq]) {
        const int32_t to = kv->past[seq] < keep ? kv->past[seq] : keep;
        const int32_t from = held_from(kv, table, to, past_of(kv, n));
        for (int32_t i = from; i < to; i++)
            kv->slot_ref[table[i]]++;
        if (from < kv->past[seq])
            kv->past[seq] = from;
    }
    if (kv->n_local && kv->past[seq] > keep)
        kv->past[seq] = keep;
    if (kv->seq_len[seq] > n)
        kv->seq_len[seq] = n;
    return kv->seq_len[seq];
}

void llm_kv_reset(struct llm_kv *kv, int32_t seq)
{
    llm_kv_truncate(kv, seq, 0);
}

/* The first row of a copy's source (dst 0) or destination (dst 1) in
 * `layer`, or -1 when the copy has none there (a window layer's rows that
 * moved instead). */
int64_t llm_kv_copy_row(const struct llm_kv *kv, const struct llm_kv_copy *cp, int32_t layer,
                        int dst)
{
    const int64_t bs = kv->p.block_size;
    if (kv->n_local && kv->local[layer]) {
        const int32_t slot = dst ? cp->dst_slot : cp->src_slot;
        return slot < 0 ? -1
                        : ((int64_t)kv->n_full * kv->p.n_blocks +
                           (int64_t)kv->plane[layer] * kv->n_slots + slot) * bs;
    }
    return llm_kv_block_row(kv, layer, dst ? cp->dst : cp->src);
}

void llm_kv_copy_host(struct llm_kv *kv)
{
    const size_t bk = (size_t)kv->p.block_size * kv->row_bytes_k,
                 bv = (size_t)kv->p.block_size * kv->row_bytes_v;
    for (int32_t c = 0; c < kv->n_copies; c++)
        for (int32_t l = 0; l < kv->p.n_layers; l++) {
            const int64_t s = llm_kv_copy_row(kv, &kv->copies[c], l, 0),
                          d = llm_kv_copy_row(kv, &kv->copies[c], l, 1);
            if (s < 0)
                continue;
            const size_t sb = (size_t)s / kv->p.block_size, db = (size_t)d / kv->p.block_size;
            memcpy((char *)kv->k + db * bk, (const char *)kv->k + sb * bk, bk);
            memcpy((char *)kv->v + db * bv, (const char *)kv->v + sb * bv, bv);
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
    st->slots = kv->n_slots;
    st->slots_used = kv->n_slots - kv->n_free_slots;
    st->slots_peak = kv->peak_slots;
    st->slot_bytes = kv->n_slots ? llm_kv_window_bytes(&kv->p) / (uint64_t)kv->n_slots : 0;
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
    /* (a reference outside the tables reads no window rows) */
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
    if (!window_held(kv, blocks, nb, nb * kv->p.block_size))
        return llm_error_set(LLM_E_INVALID, "KV cache: the window rows of the %d blocks are gone "
                             "(llm_kv_attach_usable)", nb);
    llm_kv_reset(kv, seq); /* (and no tail: the blocks are full) */
    if (!window_held(kv, blocks, nb, nb * kv->p.block_size)) /* (given back by the reset) */
        return llm_error_set(LLM_E_INVALID, "KV cache: the window rows of the %d blocks are gone "
                             "(llm_kv_attach_usable)", nb);
    int32_t *table = table_of(kv, seq);
    for (int32_t i = 0; i < nb; i++) {
        table[i] = blocks[i];
        kv->ref[blocks[i]]++;
    }
    kv->n_seq_blocks[seq] = nb;
    kv->seq_len[seq] = nb * kv->p.block_size;
    read_from(kv, seq, held_from(kv, table, nb, past_of(kv, kv->seq_len[seq])));
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
        const float *src[2] = { k + (int64_t)i * d, v ? v + (int64_t)i * d : NULL };
        const enum llm_type t[2] = { kv->p.type_k, kv->p.type_v };
        uint8_t *dst[2] = { (uint8_t *)kv->k + (size_t)r * kv->row_bytes_k,
                            (uint8_t *)kv->v + (size_t)r * kv->row_bytes_v };
        for (int j = q4ch; j < (v ? 2 : 1); j++) {
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
