/* Tests of the prefix index: a chain of full blocks found again by its
 * tokens and only by them, shared by reference, kept after its sequence
 * lets go, evicted least recently used and leaves first, and every block
 * free again when the index is freed. */
#include <criterion/criterion.h>
#include <string.h>

#include "../../../lib/llm.h"

static struct llm_kv *pool(int32_t n_blocks)
{
    struct llm_kv_params p;
    llm_kv_params_default(&p);
    p.n_layers = 1, p.n_kv_heads = 1, p.head_dim = 4;
    p.block_size = 4, p.n_seq = 4, p.max_tokens = 64, p.n_blocks = n_blocks;
    p.type_k = p.type_v = LLM_TYPE_F32;
    struct llm_kv *kv;
    cr_assert_eq(llm_kv_new(&kv, &p), LLM_OK);
    return kv;
}

/* seq holds n positions (written as a forward pass would) */
static void fill(struct llm_kv *kv, int32_t seq, int32_t n)
{
    cr_assert_eq(llm_kv_prepare(kv, seq, llm_kv_len(kv, seq), n - llm_kv_len(kv, seq)), LLM_OK);
    llm_kv_copy_host(kv);
    llm_kv_set_len(kv, seq, n);
}

Test(prefix, chain_found_by_its_tokens_only)
{
    struct llm_kv *kv = pool(16);
    struct llm_prefix *pc;
    cr_assert_eq(llm_prefix_new(&pc, kv), LLM_OK);
    const int32_t a[] = { 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11 };
    fill(kv, 0, 11); /* blocks 0, 1 full, 2 partial */
    cr_assert_eq(llm_prefix_insert(pc, 0, a, 11), LLM_OK);
    struct llm_prefix_stats st;
    llm_prefix_stats(pc, &st);
    cr_assert_eq(st.entries, 2, "only full blocks are listed");
    const int32_t b0 = llm_kv_seq_block(kv, 0, 0), b1 = llm_kv_seq_block(kv, 0, 1);
    cr_assert_eq(llm_kv_refs(kv, b0), 2);
    /* the same first 9 tokens: two blocks shared */
    const int32_t same[] = { 1, 2, 3, 4, 5, 6, 7, 8, 99 };
    cr_assert_eq(llm_prefix_attach(pc, 1, same, 9, 8), 8);
    cr_assert_eq(llm_kv_seq_block(kv, 1, 0), b0);
    cr_assert_eq(llm_kv_seq_block(kv, 1, 1), b1);
    cr_assert_eq(llm_kv_len(kv, 1), 8);
    cr_assert_eq(llm_kv_refs(kv, b1), 3);
    /* max_blocks holds it back */
    cr_assert_eq(llm_prefix_attach(pc, 2, same, 9, 1), 4);
    /* a different second block: one; a different first: none */
    const int32_t other[] = { 1, 2, 3, 4, 5, 6, 7, 0, 9 };
    cr_assert_eq(llm_prefix_attach(pc, 2, other, 9, 8), 4);
    const int32_t none[] = { 0, 2, 3, 4, 5, 6, 7, 8 };
    cr_assert_eq(llm_prefix_attach(pc, 2, none, 8, 8), 0);
    cr_assert_eq(llm_kv_len(kv, 2), 0);
    /* the second block alone is not a prefix: block 1 is keyed by block 0 */
    cr_assert_eq(llm_prefix_attach(pc, 2, a + 4, 4, 8), 0);
    /* fewer tokens than a block: nothing */
    cr_assert_eq(llm_prefix_attach(pc, 2, a, 3, 8), 0);
    llm_prefix_stats(pc, &st);
    cr_assert_eq(st.hit_tokens, 8 + 4 + 4);
    /* the sequences end; the index keeps the blocks, then lets them go */
    for (int s = 0; s < 4; s++)
        llm_kv_reset(kv, s);
    cr_assert_eq(llm_kv_free_blocks(kv), 14);
    llm_prefix_stats(pc, &st);
    cr_assert_eq(st.evictable, 1, "only the leaf is evictable");
    llm_prefix_free(pc);
    cr_assert_eq(llm_kv_free_blocks(kv), 16);
    llm_kv_free(kv);
}

Test(prefix, eviction_takes_unused_leaves_least_recent_first)
{
    struct llm_kv *kv = pool(16);
    struct llm_prefix *pc;
    cr_assert_eq(llm_prefix_new(&pc, kv), LLM_OK);
    const int32_t x[] = { 1, 1, 1, 1, 2, 2, 2, 2 }, y[] = { 3, 3, 3, 3, 4, 4, 4, 4 };
    fill(kv, 0, 8);
    cr_assert_eq(llm_prefix_insert(pc, 0, x, 8), LLM_OK);
    fill(kv, 1, 8);
    cr_assert_eq(llm_prefix_insert(pc, 1, y, 8), LLM_OK);
    /* x is used again after y: y's chain goes first */
    llm_kv_reset(kv, 0);
    cr_assert_eq(llm_prefix_attach(pc, 2, x, 8, 8), 8);
    llm_kv_reset(kv, 1);
    const int32_t y1 = llm_kv_seq_block(kv, 1, 1);
    (void)y1;
    /* x is held by sequence 2: not evictable; y's leaf, then its root */
    cr_assert_eq(llm_prefix_evict(pc, 1), 1);
    cr_assert_eq(llm_prefix_attach(pc, 3, y, 8, 8), 4, "the leaf went, the root stays");
    llm_kv_reset(kv, 3);
    cr_assert_eq(llm_prefix_evict(pc, 8), 1, "x's blocks are in use");
    cr_assert_eq(llm_prefix_attach(pc, 3, y, 8, 8), 0);
    llm_kv_reset(kv, 2);
    cr_assert_eq(llm_prefix_evict(pc, 8), 2);
    cr_assert_eq(llm_kv_free_blocks(kv), 16);
    struct llm_prefix_stats st;
    llm_prefix_stats(pc, &st);
    cr_assert_eq(st.entries, 0);
    cr_assert_eq(st.evicted, 4);
    llm_prefix_free(pc);
    llm_kv_free(kv);
}

/* A write into an attached block copies it first: the index's block keeps
 * its contents. */
Test(prefix, attached_blocks_are_copied_before_a_write)
{
    struct llm_kv *kv = pool(8);
    struct llm_prefix *pc;
    cr_assert_eq(llm_prefix_new(&pc, kv), LLM_OK);
    const int32_t t[] = { 5, 6, 7, 8 };
    fill(kv, 0, 4);
    float *k = kv->k;
    k[llm_kv_row_index(kv, 0, 0, 1)] = 3.5f;
    cr_assert_eq(llm_prefix_insert(pc, 0, t, 4), LLM_OK);
    llm_kv_reset(kv, 0);
    cr_assert_eq(llm_prefix_attach(pc, 1, t, 4, 1), 4);
    const int32_t blk = llm_kv_seq_block(kv, 1, 0);
    /* roll back into the block and write: a private copy */
    cr_assert_eq(llm_kv_prepare(kv, 1, 2, 1), LLM_OK);
    cr_assert_eq(kv->n_copies, 1);
    llm_kv_copy_host(kv);
    cr_assert_neq(llm_kv_seq_block(kv, 1, 0), blk);
    cr_assert_eq(k[llm_kv_row_index(kv, 0, 1, 1)], 3.5f);
    k[llm_kv_row_index(kv, 0, 1, 1)] = -1.0f;
    llm_kv_reset(kv, 1);
    cr_assert_eq(llm_prefix_attach(pc, 2, t, 4, 1), 4);
    cr_assert_eq(llm_kv_seq_block(kv, 2, 0), blk);
    cr_assert_eq(k[llm_kv_row_index(kv, 0, 2, 1)], 3.5f);
    llm_prefix_free(pc);
    llm_kv_reset(kv, 2);
    cr_assert_eq(llm_kv_free_blocks(kv), 8);
    llm_kv_free(kv);
}
