/* prefix.c: the prefix index: a chain of block hashes over the KV pool's
 * blocks, with the tokens kept to verify, and LRU eviction of leaves. */
#include "prefix.h"

#include <string.h>
#include <xxhash.h>

#include "../common/alloc.h"

/* One listed block; entries are indexed by block id (a block is listed at
 * most once: its contents are those of one chain). */
struct pentry {
    uint64_t hash;          /* the chain's key up to this block */
    uint64_t last_use;      /* the index's clock at the last hit or insert */
    int32_t parent;         /* the block before it in the chain; -1: the first */
    int32_t children;       /* listed blocks whose parent it is */
    int32_t next;           /* the next entry of its hash bucket; -1: none */
    int8_t used;
};

struct llm_prefix {
    struct llm_kv *kv;
    int32_t bs, n_blocks;
    struct pentry *e;       /* (n_blocks) */
    int32_t *tok;           /* (n_blocks, bs) the tokens of each listed block */
    int32_t *bucket;        /* (n_buckets) first entry; -1: none */
    uint64_t n_buckets;     /* a power of two */
    uint64_t clock;
    int32_t entries;
    int64_t evicted, lookup_tokens, hit_tokens;
};

llm_status llm_prefix_new(struct llm_prefix **out, struct llm_kv *kv)
{
    *out = NULL;
    struct llm_prefix *pc = llm_calloc(1, sizeof *pc);
    if (!pc)
        return LLM_E_NOMEM;
    pc->kv = kv;
    pc->bs = kv->p.block_size;
    pc->n_blocks = kv->p.n_blocks;
    pc->n_buckets = 1;
    while (pc->n_buckets < 2 * (uint64_t)pc->n_blocks)
        pc->n_buckets *= 2;
    pc->e = llm_calloc((size_t)pc->n_blocks, sizeof *pc->e);
    pc->tok = llm_malloc((size_t)pc->n_blocks * (size_t)pc->bs * sizeof(int32_t));
    pc->bucket = llm_malloc(pc->n_buckets * sizeof(int32_t));
    if (!pc->e || !pc->tok || !pc->bucket) {
        llm_prefix_free(pc);
        return LLM_E_NOMEM;
    }
    memset(pc->bucket, 0xff, pc->n_buckets * sizeof(int32_t));
    *out = pc;
    return LLM_OK;
}

void llm_prefix_free(struct llm_prefix *pc)
{
    if (!pc)
        return;
    for (int32_t b = 0; pc->e && b < pc->n_blocks; b++)
        if (pc->e[b].used)
            llm_kv_release(pc->kv, b);
    llm_free(pc->e);
    llm_free(pc->tok);
    llm_free(pc->bucket);
    llm_free(pc);
}

/* The key of a block of tokens after the chain keyed parent_hash (0 for
 * the first block). */
static uint64_t key_of(const struct llm_prefix *pc, uint64_t parent_hash, const int32_t *t)
{
    return XXH3_64bits_withSeed(t, (size_t)pc->bs * sizeof(int32_t), parent_hash);
}

/* The listed block that continues `parent` (-1: the chain's start) with
 * tokens t, whose key is h; -1 when there is none. */
static int32_t find(const struct llm_prefix *pc, uint64_t h, int32_t parent, const int32_t *t)
{
    for (int32_t b = pc->bucket[h & (pc->n_buckets - 1)]; b >= 0; b = pc->e[b].next)
        if (pc->e[b].hash == h && pc->e[b].parent == parent &&
            !memcmp(pc->tok + (size_t)b * pc->bs, t, (size_t)pc->bs * sizeof(int32_t)))
            return b;
    return -1;
}

int32_t llm_prefix_attach(struct llm_prefix *pc, int32_t seq, const int32_t *tokens, int32_t n,
                          int32_t max_blocks)
{
    int32_t nb = 0, parent = -1, most = n / pc->bs;
    uint64_t h = 0;
    pc->lookup_tokens += n;
    pc->clock++;
    if (max_blocks < most)
        most = max_blocks;
    llm_kv_reset(pc->kv, seq);
    int32_t *ids = most > 0 ? llm_malloc((size_t)most * sizeof(int32_t)) : NULL;
    if (!ids)
        return 0; /* nothing to find, or no memory: computing it is always right */
    while (nb < most) {
        const int32_t *t = tokens + (size_t)nb * pc->bs;
        h = key_of(pc, h, t);
        int32_t b = find(pc, h, parent, t);
        if (b < 0)
            break;
        ids[nb++] = b;
        parent = b;
    }
    /* sliding windows: only as far as the window rows of its end are held */
    nb = llm_kv_attach_usable(pc->kv, ids, nb);
    if (nb && llm_kv_attach(pc->kv, seq, ids, nb)) {
        llm_error_clear();
        nb = 0;
    }
    for (int32_t i = 0; i < nb; i++)
        pc->e[ids[i]].last_use = pc->clock;
    llm_free(ids);
    pc->hit_tokens += (int64_t)nb * pc->bs;
    return nb * pc->bs;
}

llm_status llm_prefix_insert(struct llm_prefix *pc, int32_t seq, const int32_t *tokens, int32_t n)
{
    const int32_t len = llm_kv_len(pc->kv, seq);
    if (n > len)
        n = len;
    int32_t parent = -1;
    uint64_t h = 0;
    pc->clock++;
    for (int32_t j = 0; (int64_t)(j + 1) * pc->bs <= n; j++) {
        const int32_t *t = tokens + (size_t)j * pc->bs;
        int32_t b = llm_kv_seq_block(pc->kv, seq, j);
        if (b < 0)
            break;
        if (pc->e[b].used && pc->e[b].parent == parent) {
            /* listed already (attached from the index, or listed by a fork) */
            pc->e[b].last_use = pc->clock;
            h = pc->e[b].hash;
            parent = b;
            continue;
        }
        h = key_of(pc, h, t);
        int32_t same = find(pc, h, parent, t);
        if (same >= 0) { /* computed twice (two requests at once): keep the first */
            pc->e[same].last_use = pc->clock;
            parent = same;
            continue;
        }
        if (pc->e[b].used) /* a block listed under another chain: not ours to list */
            break;
        struct pentry *e = &pc->e[b];
        e->used = 1;
        e->hash = h;
        e->parent = parent;
        e->children = 0;
        e->last_use = pc->clock;
        uint64_t k = h & (pc->n_buckets - 1);
        e->next = pc->bucket[k];
        pc->bucket[k] = b;
        memcpy(pc->tok + (size_t)b * pc->bs, t, (size_t)pc->bs * sizeof(int32_t));
        if (parent >= 0)
            pc->e[parent].children++;
        llm_kv_retain(pc->kv, b);
        pc->entries++;
        parent = b;
    }
    return LLM_OK;
}

static int evictable(const struct llm_prefix *pc, int32_t b)
{
    return pc->e[b].used && !pc->e[b].children && llm_kv_refs(pc->kv, b) == 1;
}

static void unlist(struct llm_prefix *pc, int32_t b)
{
    struct pentry *e = &pc->e[b];
    int32_t *link = &pc->bucket[e->hash & (pc->n_buckets - 1)];
    while (*link != b)
        link = &pc->e[*link].next;
    *link = e->next;
    if (e->parent >= 0)
        pc->e[e->parent].children--;
    e->used = 0;
    pc->entries--;
    llm_kv_release(pc->kv, b);
}

int32_t llm_prefix_evict(struct llm_prefix *pc, int32_t want)
{
    int32_t done = 0;
    while (done < want) {
        int32_t best = -1;
        for (int32_t b = 0; b < pc->n_blocks; b++)
            if (evictable(pc, b) && (best < 0 || pc->e[b].last_use < pc->e[best].last_use))
                best = b;
        if (best < 0)
            break;
        unlist(pc, best);
        done++;
    }
    pc->evicted += done;
    return done;
}

void llm_prefix_stats(const struct llm_prefix *pc, struct llm_prefix_stats *st)
{
    memset(st, 0, sizeof *st);
    st->entries = pc->entries;
    for (int32_t b = 0; b < pc->n_blocks; b++) {
        st->idle += pc->e[b].used && llm_kv_refs(pc->kv, b) == 1;
        st->evictable += evictable(pc, b);
    }
    st->evicted = pc->evicted;
    st->lookup_tokens = pc->lookup_tokens;
    st->hit_tokens = pc->hit_tokens;
}
