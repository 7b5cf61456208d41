/* prefix.h: the prefix index: full KV blocks kept after their sequences
 * end, found again by the tokens that led to them.
 *
 * A full block's keys and values depend only on the tokens from position 0
 * to its end (the forward pass is batch invariant), so a request whose
 * tokens begin the same way can take the block instead of computing it:
 * the same bits as computing it. Blocks are keyed as a chain, vLLM's block
 * hashes: block j's key hashes block j-1's key with block j's tokens; an
 * entry also keeps its tokens and its parent block, so that a hash
 * collision can never hand out a wrong block.
 *
 * The index holds one reference on each block it lists (kv.h's retain), so
 * a listed block outlives its sequences. A block that only the index holds
 * and that no listed block continues is evictable; eviction takes the least
 * recently used first (a hit or an insert uses an entry, and its chain).
 */
#ifndef LLM_KV_PREFIX_H
#define LLM_KV_PREFIX_H

#include <stdint.h>

#include "../common/status.h"
#include "kv.h"

struct llm_prefix;

struct llm_prefix_stats {
    int32_t entries;        /* blocks listed */
    int32_t idle;           /* of them, held by the index alone (no sequence uses them) */
    int32_t evictable;      /* of those, not continued by another listed block */
    int64_t evicted;        /* blocks evicted so far */
    int64_t lookup_tokens;  /* tokens asked for by llm_prefix_attach */
    int64_t hit_tokens;     /* of them, found */
};

/* An index over kv's blocks (which it must not outlive). */
llm_status llm_prefix_new(struct llm_prefix **out, struct llm_kv *kv);
/* Releases the index's references (blocks no table holds are freed). */
void llm_prefix_free(struct llm_prefix *pc);

/* The longest chain of listed blocks that begins tokens (n), at most
 * max_blocks of them, is attached to `seq` (emptied first; kv.h's attach):
 * returns the tokens it covers (a multiple of the block size; 0: none, seq
 * left empty). */
int32_t llm_prefix_attach(struct llm_prefix *pc, int32_t seq, const int32_t *tokens, int32_t n,
                          int32_t max_blocks);

/* List the full blocks of `seq` that hold tokens[0, n) (n at most its
 * length): each block not yet listed, unless an equal chain is listed
 * already. LLM_E_NOMEM only. */
llm_status llm_prefix_insert(struct llm_prefix *pc, int32_t seq, const int32_t *tokens, int32_t n);

/* Evict up to `want` evictable blocks, least recently used first; returns
 * how many were freed. */
int32_t llm_prefix_evict(struct llm_prefix *pc, int32_t want);

void llm_prefix_stats(const struct llm_prefix *pc, struct llm_prefix_stats *st);

#endif
