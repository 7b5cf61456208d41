/* kv.h: the paged KV cache, a pool of blocks shared by reference.
 *
 * Keys and values live in fixed-size blocks of `block_size` token rows. A
 * sequence owns a block table mapping its logical blocks (position /
 * block_size) to physical ones. A block id covers the same token range in
 * every layer, so one table serves all layers. Blocks are counted: a block
 * may sit in several tables at once (a fork shares a prefix instead of
 * copying it), and returns to the free list when the last table lets go.
 *
 * Writing into a block that another sequence also holds first gives the
 * writer a private copy (copy-on-write): llm_kv_prepare swaps a new block
 * into the writer's table and records the copy (source, destination) for
 * the storage's owner to carry out before the write (llm_kv_copy_host for
 * host storage; a backend does it on its device). The shared original is
 * never changed.
 *
 * The pool's size (n_blocks) is a budget, independent of max_tokens x
 * n_seq, so that memory can be overcommitted: running out of blocks is
 * LLM_E_KV_FULL, which a caller can act on (free or preempt a sequence and
 * try again); nothing is changed by a call that fails.
 *
 * Storage is (n_layers, n_blocks, block_size, kv_dim) for K and for V, each
 * in its own type (type_k, type_v), with kv_dim = n_kv_heads * head_dim;
 * with sliding windows (below) (n_full, n_blocks, block_size, kv_dim) then
 * (n_local, n_slots, block_size, kv_dim). A
 * row of a quantized type carries its own scales (blocks of 32 elements),
 * so a paged block is self-contained for sharing, forking and moving.
 * q4_0 rows hold a rotated row: each block of 32 goes through the
 * orthonormal 32-point Walsh-Hadamard transform (llm_vec_hadamard32) before
 * it is rounded. The rotation spreads a few large channels (keys have
 * them) over the block, so they no longer set the scale of the other 31;
 * attention rotates the query the same way, and the output of the values
 * back, so nothing else sees it.
 *
 * q4ch keys (KIVI's; the type LLM_TYPE_Q4Z_CH, keys only) are quantized per
 * channel over a whole block instead of per row: each channel's block_size
 * values become 4-bit codes between the channel's minimum and maximum, with
 * that minimum and a scale in fp16. Keys have a few channels far larger
 * than the rest, and a channel's values over 16 tokens are alike where a
 * token's values over its channels are not. A block can only be quantized
 * once it is full, so each sequence keeps its keys in fp16 rows (the
 * "tail") for its last two blocks, and attention reads a token's own block
 * from fp16 rows, every earlier block quantized. That makes a token's
 * result the same however its sequence was split into steps, and a cut
 * back into the last full block restorable (speculation's rollback). A cut
 * further back keeps only the full blocks below it (llm_kv_truncate says
 * how many positions remain); the caller computes the rest again.
 *
 * A q4ch block of one layer holds, for each KV head (head_dim channels):
 * head_dim fp16 scales, head_dim fp16 minimums, then head_dim runs of
 * block_size / 2 code bytes, a channel's codes in groups of 16 tokens of 8
 * bytes (token j of a group in the low nibble of byte j, token j + 8 in
 * its high nibble); the key is minimum + code x scale. So a block is
 * kv_dim x (4 + block_size / 2) bytes, the same as block_size rows of
 * llm_kv_row_bytes. The block size must be a multiple of 16, at most 128.
 *
 * Sliding windows. A window layer (local, in Gemma's words) reads only the
 * last `window` positions, so the rows a sequence will not read again need
 * no memory. Such layers keep their rows apart: a block id names its rows
 * in every full layer, as above, and in the window layers a "window slot"
 * of a pool of their own (n_slots), taken with the block and given back
 * when no table reads those rows any more. A table stops reading its
 * entry i once the sequence is written from a position p with
 * (i + 1) x block_size <= p - window + 1 - keep: every query from then on
 * is at p or later; `keep` positions more are kept for cuts back
 * (speculation's rollback). Those leading entries are the table's "past"
 * ones; their blocks stay, for the full layers and for sharing. A
 * sequence holds at most win_blocks window slots, whatever its length:
 * the pool has n_seq x win_blocks of them, so it never runs out. A cut,
 * fork or attach that would need window rows already given back keeps
 * what it can (llm_kv_truncate, llm_kv_attach_usable) or is refused
 * (llm_kv_fork): the caller computes the rest again.
 *
 * The storage pointers may
 * be device memory when a backend allocates them (llm_kv_new_with); the
 * tables are always host memory. Free blocks are handed out lowest id first
 * and freed ones reused first, so that the pages of zero-filled storage
 * become resident only as blocks come into use.
 *
 * The cache knows nothing of requests or models: sequences are slots
 * 0 .. n_seq-1.
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
    int32_t n_seq;          /* sequence slots */
    int32_t max_tokens;     /* the longest one sequence may grow, in tokens */
    int32_t n_blocks;       /* blocks in the pool; 0: n_seq * ceil(max_tokens / block_size) */
    enum llm_type type_k, type_v; /* F32, F16, BF16, Q8_0, FP8_E4M3, Q4_0 (llm_kv_type_ok);
                                   * Q4Z_CH (q4ch) for keys */
    /* sliding windows (above): window > 0 positions for the layers marked
     * in local (n_layers, 1: a window layer; NULL: every layer); copied */
    int32_t window;
    const uint8_t *local;
    int32_t max_step;       /* the most positions one prepare adds to a sequence (a
                             * step's tokens); 0: max_tokens */
    int32_t keep;           /* positions kept behind the window; 0: LLM_KV_WINDOW_KEEP */
};
/* Speculation drafts at most 64 tokens (llm-run --draft-n): a cut back of
 * up to this many positions keeps the window's rows. */
#define LLM_KV_WINDOW_KEEP 80

/* Bytes of an element of a KV type stored element by element (f32, f16,
 * bf16, fp8_e4m3), or 0 for any other type. */
size_t llm_kv_type_bytes(enum llm_type t);
/* Can the cache store type t in pieces of `width` elements (a head; a
 * state file checks its rows)? f32, f16, bf16, fp8_e4m3 (saturating, no
 * scale), and q8_0 and q4_0 (blocks of 32 int8 or 4-bit codes and their
 * fp16 scale, each row carrying its own blocks: width a multiple of 32;
 * q4_0 rotated). */
int llm_kv_type_ok(enum llm_type t, int64_t width);
/* The KV type of a --kv-type name: f32, f16, bf16, q8 (or q8_0), fp8_e4m3
 * (or fp8), q4, q4ch; LLM_E_INVALID "'NAME' is not ..." for another. */
llm_status llm_kv_type_parse(const char *name, enum llm_type *out);
/* The argument of --kv-type (which 3: both halves), --kv-type-k (1) or
 * --kv-type-v (2) into kv[0] (K) and kv[1] (V), adding which to *given;
 * LLM_E_INVALID "--kv-type-k: 'NAME' is not ..." for another name. q4ch is
 * a key type: --kv-type q4ch gives q4ch keys and q4 values, --kv-type-v
 * q4ch is refused. */
llm_status llm_kv_types_option(int which, const char *name, enum llm_type kv[2], int *given);
/* The --kv-type name of a KV type (q4 for q4_0, q8 for q8_0). */
const char *llm_kv_type_name(enum llm_type t);
/* "q8" when K and V are of one type, else "q8 K and q4 V". */
void llm_kv_types_text(char *buf, size_t size, enum llm_type k, enum llm_type v);
/* Bytes of a K or V row of kv_dim elements in type t, in a cache of blocks
 * of block_size rows (q4ch: a block's bytes / block_size). */
size_t llm_kv_row_bytes(enum llm_type t, int64_t kv_dim, int32_t block_size);
/* Can a cache have keys of type k and values of type v in blocks of bs?
 * NULL, or why not. */
const char *llm_kv_types_why_not(enum llm_type k, enum llm_type v, int32_t bs, int64_t kv_dim);

/* Floats llm_kv_store_host rotates at a time (a multiple of 32). */
#define LLM_KV_ROT_MAX 256

/* A copy-on-write copy: every full layer's K and V rows of block src to
 * dst, and the window layers' rows of slot src_slot to dst_slot (-1: none
 * to copy). */
struct llm_kv_copy {
    int32_t src, dst;
    int32_t src_slot, dst_slot;
};

struct llm_kv {
    struct llm_kv_params p;
    int64_t kv_dim;
    size_t row_bytes_k;     /* a K row: llm_kv_row_bytes(type_k, kv_dim) */
    size_t row_bytes_v;     /* a V row: llm_kv_row_bytes(type_v, kv_dim) */
    int32_t max_blocks;     /* table entries per sequence */
    void *k, *v;            /* (n_layers, n_blocks, block_size, kv_dim) */
    int32_t *ref;           /* (n_blocks) tables holding the block; 0: free */
    int32_t *free_ids;      /* (n_blocks) stack of free block ids, lowest on top */
    int32_t n_free;
    int32_t *tables;        /* (n_seq, max_blocks) physical id or -1 */
    int32_t *n_seq_blocks;  /* (n_seq) blocks held */
    int32_t *seq_len;       /* (n_seq) positions stored */
    int32_t peak_used;      /* most blocks in use at once */
    struct llm_kv_copy *copies; /* (n_copies) recorded by llm_kv_prepare, not yet done */
    uint16_t *tail;         /* q4ch keys: (n_seq, n_layers, 2, block_size, kv_dim) fp16
                             * rows; slot b % 2 holds logical block b */
    int32_t *tail_blk;      /* q4ch keys: (n_seq, 2) the block in each slot, or -1 */
    int32_t n_copies, cap_copies;
    int owns_storage;
    /* sliding windows (above; n_local 0 and the rest NULL without) */
    int32_t n_full, n_local;    /* layers of each kind */
    uint8_t *local;         /* (n_layers) 1: a window layer */
    int32_t *plane;         /* (n_layers) the layer's place among the full or the window layers */
    int32_t win_blocks;     /* window slots a sequence holds at most */
    int32_t n_slots;        /* the slot pool: n_seq x win_blocks */
    int32_t *slot;          /* (n_blocks) the block's window slot, or -1 */
    int32_t *slot_ref;      /* (n_blocks) table entries that still read its window rows */
    int32_t *free_slots;    /* (n_slots) stack of free slots, lowest on top */
    int32_t n_free_slots, peak_slots;
    int32_t *past;          /* (n_seq) the table's leading entries it reads no window rows of */
};

void llm_kv_params_default(struct llm_kv_params *p);

/* Bytes of K+V storage the parameters need; 0 on overflow or bad values. */
uint64_t llm_kv_storage_bytes(const struct llm_kv_params *p);
/* Bytes of the K (v = 0) or the V (v = 1) storage alone. */
uint64_t llm_kv_half_bytes(const struct llm_kv_params *p, int v);
/* Bytes of K+V storage of one block (all layers; with windows the full
 * layers: what a block of the pool costs, 0 when every layer is a window
 * layer). */
uint64_t llm_kv_block_bytes(const struct llm_kv_params *p);
/* Bytes of the window layers' slots, whatever n_blocks (0 without
 * windows): storage = this + n_blocks x llm_kv_block_bytes. */
uint64_t llm_kv_window_bytes(const struct llm_kv_params *p);
/* Window slots a sequence holds at most, or 0 when the parameters have no
 * window that saves memory (then every layer is stored as a full one). */
int32_t llm_kv_window_blocks(const struct llm_kv_params *p);

/* A cache with host storage. LLM_E_INVALID for bad parameters. */
llm_status llm_kv_new(struct llm_kv **out, const struct llm_kv_params *p);
/* A cache whose K and V storage (llm_kv_half_bytes of each) the caller
 * allocated and keeps owning. */
llm_status llm_kv_new_with(struct llm_kv **out, const struct llm_kv_params *p, void *k, void *v);
void llm_kv_free(struct llm_kv *kv);

/* Blocks llm_kv_prepare(kv, seq, pos, n) would take from the free list
 * (new blocks, and private copies of shared ones), or -1 when the request
 * is invalid; *freed (may be NULL): the blocks its cut to pos would return.
 * For a batch of several sequences the sums bound what the prepares take
 * and free. */
int32_t llm_kv_need(const struct llm_kv *kv, int32_t seq, int32_t pos, int32_t n, int32_t *freed);
/* Make positions [pos, pos + n) of `seq` writable: the sequence is cut to
 * pos first when it is longer (pos <= its length), missing blocks are
 * taken, and shared blocks in the range are replaced by private copies
 * (recorded in kv->copies). LLM_E_INVALID for a bad sequence or a range
 * past max_tokens or past the sequence's end; LLM_E_KV_FULL when the
 * blocks run out, changing nothing. The length becomes pos + n only with
 * llm_kv_set_len, once the rows are written. */
llm_status llm_kv_prepare(struct llm_kv *kv, int32_t seq, int32_t pos, int32_t n);
/* Record that positions [0, len) hold data (len <= the blocks held). */
void llm_kv_set_len(struct llm_kv *kv, int32_t seq, int32_t len);
int32_t llm_kv_len(const struct llm_kv *kv, int32_t seq);

/* dst (empty, or emptied first) shares the first n positions of src: the
 * blocks covering them are referenced, not copied. n <= src's length.
 * LLM_E_INVALID for bad arguments or dst == src, or when the window rows
 * the fork would read are gone (dst then unchanged, unless only its own
 * reading had kept them: then it is emptied). */
llm_status llm_kv_fork(struct llm_kv *kv, int32_t src, int32_t dst, int32_t n);
/* Keep the first n positions of `seq` (n >= its length changes nothing);
 * blocks past them are released. Returns the positions kept: n, or with
 * q4ch keys fewer when n falls in a quantized block whose fp16 rows are
 * gone (kv.h): then the full blocks below n. */
int32_t llm_kv_truncate(struct llm_kv *kv, int32_t seq, int32_t n);
/* The first position whose window rows seq still holds (0 without
 * windows): below it a window layer has none (llm_kv_has_row). */
int32_t llm_kv_window_from(const struct llm_kv *kv, int32_t seq);
/* seq reads no window rows below position pos (rounded up to a block): a
 * state loaded from a file that had none there (kvstate). */
void llm_kv_window_forget(struct llm_kv *kv, int32_t seq, int32_t pos);
/* Can seq, n positions long, go on without window rows below position
 * from (a state's: llm_state_info.window_from)? Always for from 0; never
 * in a cache without windows. */
int llm_kv_window_reaches(const struct llm_kv *kv, int32_t n, int32_t from);
/* Of the nb full blocks `blocks`, the most leading ones that llm_kv_attach
 * can give a sequence: those whose window rows of its last positions are
 * held (nb without windows). */
int32_t llm_kv_attach_usable(const struct llm_kv *kv, const int32_t *blocks, int32_t nb);
/* Would llm_kv_truncate(kv, seq, n) keep all n positions? */
int llm_kv_can_cut(const struct llm_kv *kv, int32_t seq, int32_t n);
/* Release every block of `seq` (llm_kv_truncate to 0). */
void llm_kv_reset(struct llm_kv *kv, int32_t seq);

/* The first row of copy cp's source (dst 0) or destination (dst 1) in
 * `layer`, or -1 when it has none to copy there. */
int64_t llm_kv_copy_row(const struct llm_kv *kv, const struct llm_kv_copy *cp, int32_t layer,
                        int dst);
/* Carry out (host storage) and forget the recorded copies. */
void llm_kv_copy_host(struct llm_kv *kv);

struct llm_kv_stats {
    int32_t n_blocks;       /* the pool */
    int32_t used;           /* blocks in at least one table */
    int32_t free_;          /* n_blocks - used */
    int32_t shared;         /* blocks in two tables or more */
    int32_t logical;        /* entries of all tables: what the sequences would hold unshared */
    int32_t peak_used;
    int64_t tokens;         /* positions stored, over all sequences */
    int32_t slots, slots_used, slots_peak; /* window slots (0 without windows) */
    uint64_t slot_bytes;    /* K+V bytes of one window slot (all window layers) */
};
void llm_kv_stats(const struct llm_kv *kv, struct llm_kv_stats *st);
int32_t llm_kv_free_blocks(const struct llm_kv *kv);
/* The reference count of the block at logical index i of `seq` (0 when
 * there is none). */
int32_t llm_kv_block_ref(const struct llm_kv *kv, int32_t seq, int32_t i);

/* The physical block at logical index i of `seq`, or -1. */
int32_t llm_kv_seq_block(const struct llm_kv *kv, int32_t seq, int32_t i);
/* References held outside the tables (the prefix index): retain adds one
 * to a block in use, release drops one (the block is freed at zero). */
void llm_kv_retain(struct llm_kv *kv, int32_t block);
void llm_kv_release(struct llm_kv *kv, int32_t block);
int32_t llm_kv_refs(const struct llm_kv *kv, int32_t block);
/* `seq` (emptied first) holds the nb full blocks `blocks` (all in use) as
 * its first nb * block_size positions, shared by reference. */
llm_status llm_kv_attach(struct llm_kv *kv, int32_t seq, const int32_t *blocks, int32_t nb);
/* The first row of block blk in `layer`, counted in rows (at row *
 * row_bytes_k or _v bytes); in a window layer the block's slot must be
 * held. */
static inline int64_t llm_kv_block_row(const struct llm_kv *kv, int32_t layer, int32_t blk)
{
    if (kv->n_local && kv->local[layer])
        return ((int64_t)kv->n_full * kv->p.n_blocks + (int64_t)kv->plane[layer] * kv->n_slots +
                kv->slot[blk]) * kv->p.block_size;
    return ((int64_t)(kv->n_local ? kv->plane[layer] : layer) * kv->p.n_blocks + blk) *
           kv->p.block_size;
}
/* The row of (layer, seq, pos) in the K or V storage, counted in rows; the
 * position must be held (llm_kv_has_row in a window layer). */
static inline int64_t llm_kv_row_number(const struct llm_kv *kv, int32_t layer, int32_t seq,
                                        int32_t pos)
{
    int32_t blk = kv->tables[(int64_t)seq * kv->max_blocks + pos / kv->p.block_size];
    return llm_kv_block_row(kv, layer, blk) + pos % kv->p.block_size;
}
/* Does `layer` hold the row of a stored position pos of seq? Always, but
 * in a window layer below llm_kv_window_from. */
static inline int llm_kv_has_row(const struct llm_kv *kv, int32_t layer, int32_t seq, int32_t pos)
{
    return !kv->n_local || !kv->local[layer] || pos / kv->p.block_size >= kv->past[seq];
}
/* Its offset in elements, for the types stored element by element. */
static inline int64_t llm_kv_row_index(const struct llm_kv *kv, int32_t layer, int32_t seq,
                                       int32_t pos)
{
    return llm_kv_row_number(kv, layer, seq, pos) * kv->kv_dim;
}

/* Store n rows of keys and values (n, kv_dim) float32 at positions
 * pos..pos+n-1 of `seq` in `layer` (host storage only), converting to the
 * cache type; v NULL: the keys alone. The positions must have been
 * prepared. q4ch keys go into the tail as fp16, and each block they fill
 * is quantized from its fp16 rows. */
void llm_kv_store_host(struct llm_kv *kv, int32_t layer, int32_t seq, int32_t pos, int32_t n,
                       const float *k, const float *v);

/* q4ch keys. The fp16 row of (seq, layer, pos) in the tail; pos's block
 * must be the one its slot holds to be meaningful. */
static inline uint16_t *llm_kv_tail_row(const struct llm_kv *kv, int32_t seq, int32_t layer,
                                        int32_t pos)
{
    const int32_t bs = kv->p.block_size;
    return kv->tail + ((((int64_t)seq * kv->p.n_layers + layer) * 2 + (pos / bs) % 2) * bs +
                       pos % bs) * kv->kv_dim;
}
/* Does the tail of seq hold the fp16 rows of logical block b? */
int llm_kv_tail_holds(const struct llm_kv *kv, int32_t seq, int32_t b);
/* Record that the tail of seq holds logical block b (its rows written). */
void llm_kv_tail_mark(struct llm_kv *kv, int32_t seq, int32_t b);
/* Quantize a full block: its rows (bs, kv_dim) fp16 into a q4ch block (the
 * layout above) of n_heads heads. */
void llm_kv_q4ch_quantize(const uint16_t *rows, int64_t kv_dim, int32_t bs, int32_t n_heads,
                          uint8_t *blk);
/* Its keys back as floats (bs, kv_dim): the reference of what attention
 * reads. */
void llm_kv_q4ch_dequantize(const uint8_t *blk, int64_t kv_dim, int32_t bs, int32_t n_heads,
                            float *rows);

#endif
