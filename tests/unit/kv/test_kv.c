/* Tests of the paged KV cache: block tables and the free list, the pool as
 * a budget (LLM_E_KV_FULL changes nothing), fork (shared blocks counted),
 * truncate, copy-on-write (the shared original unchanged), and F16
 * storage. */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "../../../lib/common/fp16.h"
#include "../../../lib/kv/kv.h"
#include "../../../lib/ops/vec.h"
#include "../../../lib/quant/quant.h"

static struct llm_kv *mk(int32_t n_seq, int32_t max_tokens, int32_t n_blocks, enum llm_type t)
{
    struct llm_kv_params p;
    llm_kv_params_default(&p);
    p.n_layers = 2, p.n_kv_heads = 2, p.head_dim = 4, p.block_size = 4;
    p.n_seq = n_seq, p.max_tokens = max_tokens, p.n_blocks = n_blocks, p.type_k = p.type_v = t;
    struct llm_kv *kv;
    cr_assert_eq(llm_kv_new(&kv, &p), LLM_OK);
    return kv;
}

/* Write rows of value `base + pos` (every element) at [pos, pos + n) of
 * seq in both layers, as a forward pass does: prepare, copy, store. */
static llm_status put(struct llm_kv *kv, int32_t seq, int32_t pos, int32_t n, float base)
{
    llm_status s = llm_kv_prepare(kv, seq, pos, n);
    if (s)
        return s;
    llm_kv_copy_host(kv);
    float k[64 * 8], v[64 * 8];
    for (int32_t i = 0; i < n * 8; i++)
        k[i] = base + (float)(pos + i / 8), v[i] = -(base + (float)(pos + i / 8));
    for (int32_t l = 0; l < 2; l++)
        llm_kv_store_host(kv, l, seq, pos, n, k, v);
    llm_kv_set_len(kv, seq, pos + n);
    return LLM_OK;
}

/* The K value of (layer, seq, pos), element e. */
static float kval(const struct llm_kv *kv, int32_t l, int32_t seq, int32_t pos, int e)
{
    return ((const float *)kv->k)[llm_kv_row_index(kv, l, seq, pos) + e];
}

static void assert_rows(const struct llm_kv *kv, int32_t seq, int32_t from, int32_t to, float base)
{
    for (int32_t p = from; p < to; p++)
        for (int32_t l = 0; l < 2; l++)
            for (int e = 0; e < 8; e++)
                cr_assert_eq(kval(kv, l, seq, p, e), base + (float)p, "seq %d pos %d layer %d", seq,
                             p, l);
}

static void assert_all_free(const struct llm_kv *kv)
{
    struct llm_kv_stats st;
    llm_kv_stats(kv, &st);
    cr_assert_eq(st.used, 0, "%d blocks still in use", st.used);
    cr_assert_eq(st.free_, st.n_blocks);
    cr_assert_eq(st.logical, 0);
    for (int32_t i = 0; i < kv->p.n_blocks; i++)
        cr_assert_eq(kv->ref[i], 0, "block %d has %d references", i, kv->ref[i]);
}

Test(kv, blocks_taken_on_demand_and_returned)
{
    struct llm_kv *kv = mk(2, 16, 0, LLM_TYPE_F32); /* 2 x 4 blocks */
    cr_assert_eq(llm_kv_free_blocks(kv), 8);
    cr_assert_eq(llm_kv_prepare(kv, 0, 0, 5), LLM_OK); /* 2 blocks */
    llm_kv_set_len(kv, 0, 5);
    cr_assert_eq(llm_kv_free_blocks(kv), 6);
    cr_assert_eq(llm_kv_prepare(kv, 1, 0, 1), LLM_OK);
    cr_assert_eq(llm_kv_prepare(kv, 0, 5, 3), LLM_OK); /* still 2 */
    cr_assert_eq(llm_kv_free_blocks(kv), 5);
    /* rows of different sequences never share storage */
    int64_t a = llm_kv_row_index(kv, 0, 0, 4), b = llm_kv_row_index(kv, 0, 1, 0);
    cr_assert_neq(a / (4 * 8), b / (4 * 8));
    /* a later layer is a separate plane */
    cr_assert_eq(llm_kv_row_index(kv, 1, 0, 4) - a, (int64_t)8 * 4 * 8);
    llm_kv_reset(kv, 0);
    cr_assert_eq(llm_kv_free_blocks(kv), 7);
    cr_assert_eq(llm_kv_len(kv, 0), 0);
    llm_kv_reset(kv, 1);
    assert_all_free(kv);
    llm_kv_free(kv);
}

Test(kv, the_pool_is_a_budget_and_full_changes_nothing)
{
    /* 5 blocks for two sequences of up to 16 tokens (4 blocks each):
     * overcommitted */
    struct llm_kv *kv = mk(2, 16, 5, LLM_TYPE_F32);
    cr_assert_eq(llm_kv_storage_bytes(&kv->p), (uint64_t)5 * 2 * 4 * 8 * 4 * 2);
    cr_assert_eq(llm_kv_prepare(kv, 0, 0, 17), LLM_E_INVALID, "past max_tokens");
    cr_assert_eq(llm_kv_prepare(kv, 2, 0, 1), LLM_E_INVALID, "no such sequence");
    cr_assert_eq(llm_kv_prepare(kv, 0, 1, 1), LLM_E_INVALID, "past the sequence's end");
    cr_assert_eq(put(kv, 0, 0, 16, 0), LLM_OK);
    cr_assert_eq(put(kv, 1, 0, 4, 100), LLM_OK);
    cr_assert_eq(llm_kv_free_blocks(kv), 0);
    cr_assert_eq(llm_kv_need(kv, 1, 4, 4, NULL), 1);
    cr_assert_eq(llm_kv_prepare(kv, 1, 4, 4), LLM_E_KV_FULL);
    cr_assert_eq(llm_kv_len(kv, 1), 4, "a failed prepare changes nothing");
    cr_assert_eq(kv->n_seq_blocks[1], 1);
    assert_rows(kv, 1, 0, 4, 100);
    /* rolling sequence 0 back to 8 tokens frees two blocks */
    llm_kv_truncate(kv, 0, 8);
    cr_assert_eq(llm_kv_free_blocks(kv), 2);
    cr_assert_eq(put(kv, 1, 4, 8, 100), LLM_OK);
    assert_rows(kv, 0, 0, 8, 0);
    assert_rows(kv, 1, 0, 12, 100);
    /* a prepare that cuts the sequence counts the blocks the cut frees:
     * sequence 1 rewritten from position 2 needs its blocks 1 and 2
     * again, which the cut returns */
    cr_assert_eq(llm_kv_free_blocks(kv), 0);
    cr_assert_eq(put(kv, 1, 2, 10, 200), LLM_OK);
    for (int32_t p = 2; p < 12; p++)
        cr_assert_eq(kval(kv, 0, 1, p, 0), 200.0f + (float)p);
    cr_assert_eq(kval(kv, 0, 1, 1, 0), 101.0f, "positions before the cut are kept");
    struct llm_kv_stats st;
    llm_kv_stats(kv, &st);
    cr_assert_eq(st.peak_used, 5);
    llm_kv_reset(kv, 0);
    llm_kv_reset(kv, 1);
    assert_all_free(kv);
    llm_kv_free(kv);
    struct llm_kv_params p;
    llm_kv_params_default(&p);
    cr_assert_eq(llm_kv_new(&kv, &p), LLM_E_INVALID);
    cr_assert_eq(llm_kv_storage_bytes(&p), 0);
}

Test(kv, fork_shares_blocks_and_counts_them)
{
    struct llm_kv *kv = mk(4, 32, 0, LLM_TYPE_F32);
    cr_assert_eq(put(kv, 0, 0, 16, 0), LLM_OK); /* 4 full blocks */
    cr_assert_eq(llm_kv_fork(kv, 0, 1, 16), LLM_OK);
    cr_assert_eq(llm_kv_fork(kv, 0, 2, 16), LLM_OK);
    cr_assert_eq(llm_kv_fork(kv, 0, 3, 8), LLM_OK);
    struct llm_kv_stats st;
    llm_kv_stats(kv, &st);
    cr_assert_eq(st.used, 4, "forks take no block");
    cr_assert_eq(st.logical, 4 + 4 + 4 + 2);
    cr_assert_eq(st.shared, 4);
    cr_assert_eq(llm_kv_block_ref(kv, 0, 0), 4);
    cr_assert_eq(llm_kv_block_ref(kv, 0, 3), 3);
    cr_assert_eq(llm_kv_len(kv, 3), 8);
    for (int s = 0; s < 4; s++)
        assert_rows(kv, s, 0, llm_kv_len(kv, s), 0);
    /* the sequences diverge: appends past a full shared block take new
     * blocks and leave the shared ones alone */
    cr_assert_eq(put(kv, 1, 16, 3, 1000), LLM_OK);
    cr_assert_eq(put(kv, 2, 16, 5, 2000), LLM_OK);
    cr_assert_eq(put(kv, 3, 8, 1, 3000), LLM_OK); /* block 2 was shared: copied */
    llm_kv_stats(kv, &st);
    cr_assert_eq(st.used, 4 + 1 + 2 + 1);
    assert_rows(kv, 0, 0, 16, 0);
    assert_rows(kv, 1, 0, 16, 0);
    assert_rows(kv, 1, 16, 19, 1000);
    assert_rows(kv, 2, 16, 21, 2000);
    assert_rows(kv, 3, 0, 8, 0);
    assert_rows(kv, 3, 8, 9, 3000);
    cr_assert_eq(llm_kv_fork(kv, 0, 0, 4), LLM_E_INVALID);
    cr_assert_eq(llm_kv_fork(kv, 0, 1, 17), LLM_E_INVALID, "past src's length");
    cr_assert_eq(llm_kv_fork(kv, 5, 1, 1), LLM_E_INVALID);
    for (int s = 0; s < 4; s++)
        llm_kv_reset(kv, s);
    assert_all_free(kv);
    llm_kv_free(kv);
}

Test(kv, copy_on_write_of_a_shared_partial_block)
{
    struct llm_kv *kv = mk(2, 32, 0, LLM_TYPE_F32);
    cr_assert_eq(put(kv, 0, 0, 6, 0), LLM_OK); /* block 1 holds positions 4, 5 of 8 */
    cr_assert_eq(llm_kv_fork(kv, 0, 1, 6), LLM_OK);
    const int32_t shared = kv->tables[1];
    cr_assert_eq(kv->tables[kv->max_blocks + 1], shared);
    /* the fork writes position 6, inside the shared partial block: it gets
     * its own copy first (positions 4, 5 carried over) */
    cr_assert_eq(llm_kv_need(kv, 1, 6, 1, NULL), 1);
    cr_assert_eq(llm_kv_prepare(kv, 1, 6, 1), LLM_OK);
    cr_assert_eq(kv->n_copies, 1);
    cr_assert_eq(kv->copies[0].src, shared);
    const int32_t mine = kv->tables[kv->max_blocks + 1];
    cr_assert_neq(mine, shared);
    cr_assert_eq(kv->copies[0].dst, mine);
    llm_kv_copy_host(kv);
    cr_assert_eq(kv->n_copies, 0);
    float k[8], v[8];
    for (int e = 0; e < 8; e++)
        k[e] = 77, v[e] = -77;
    llm_kv_store_host(kv, 0, 1, 6, 1, k, v);
    llm_kv_store_host(kv, 1, 1, 6, 1, k, v);
    llm_kv_set_len(kv, 1, 7);
    assert_rows(kv, 1, 0, 6, 0);
    cr_assert_eq(kval(kv, 1, 1, 6, 3), 77.0f);
    /* the original is unchanged, and so is its owner's next write */
    assert_rows(kv, 0, 0, 6, 0);
    cr_assert_eq(kv->ref[shared], 1);
    cr_assert_eq(llm_kv_block_ref(kv, 0, 0), 2, "the full block stays shared");
    cr_assert_eq(llm_kv_need(kv, 0, 6, 1, NULL), 0, "the owner writes in place");
    cr_assert_eq(put(kv, 0, 6, 2, 500), LLM_OK);
    cr_assert_eq(kval(kv, 0, 1, 6, 0), 77.0f);
    assert_rows(kv, 0, 6, 8, 500);
    llm_kv_reset(kv, 0);
    cr_assert_eq(llm_kv_block_ref(kv, 1, 0), 1, "released by one, kept by the other");
    assert_rows(kv, 1, 0, 6, 0);
    llm_kv_reset(kv, 1);
    assert_all_free(kv);
    llm_kv_free(kv);
}

Test(kv, truncate_releases_only_what_no_one_holds)
{
    struct llm_kv *kv = mk(2, 32, 0, LLM_TYPE_F32);
    cr_assert_eq(put(kv, 0, 0, 12, 0), LLM_OK);
    cr_assert_eq(llm_kv_fork(kv, 0, 1, 12), LLM_OK);
    llm_kv_truncate(kv, 0, 5);
    struct llm_kv_stats st;
    llm_kv_stats(kv, &st);
    cr_assert_eq(st.used, 3, "sequence 1 still holds all three");
    cr_assert_eq(llm_kv_len(kv, 0), 5);
    llm_kv_truncate(kv, 1, 4);
    llm_kv_stats(kv, &st);
    cr_assert_eq(st.used, 2);
    llm_kv_truncate(kv, 1, 100); /* longer than it is: nothing */
    cr_assert_eq(llm_kv_len(kv, 1), 4);
    /* rewriting from a position inside a shared block copies it */
    cr_assert_eq(put(kv, 1, 2, 2, 900), LLM_OK);
    assert_rows(kv, 0, 0, 5, 0);
    assert_rows(kv, 1, 0, 2, 0);
    assert_rows(kv, 1, 2, 4, 900);
    llm_kv_reset(kv, 0);
    llm_kv_reset(kv, 1);
    assert_all_free(kv);
    llm_kv_free(kv);
}

Test(kv, store_f32_and_f16)
{
    for (int f16 = 0; f16 < 2; f16++) {
        struct llm_kv *kv = mk(1, 12, 0, f16 ? LLM_TYPE_F16 : LLM_TYPE_F32);
        cr_assert_eq(llm_kv_prepare(kv, 0, 0, 6), LLM_OK);
        float k[3 * 8], v[3 * 8];
        for (int i = 0; i < 24; i++)
            k[i] = 0.5f * (float)i + 0.25f, v[i] = -(float)i;
        llm_kv_store_host(kv, 1, 0, 3, 3, k, v);
        for (int t = 0; t < 3; t++) {
            int64_t off = llm_kv_row_index(kv, 1, 0, 3 + t);
            for (int e = 0; e < 8; e++) {
                float kk = f16 ? llm_fp16_to_fp32(((uint16_t *)kv->k)[off + e]) : ((float *)kv->k)[off + e];
                float vv = f16 ? llm_fp16_to_fp32(((uint16_t *)kv->v)[off + e]) : ((float *)kv->v)[off + e];
                cr_assert_eq(kk, k[t * 8 + e]);
                cr_assert_eq(vv, v[t * 8 + e]);
            }
        }
        cr_assert_eq(llm_kv_storage_bytes(&kv->p), (uint64_t)2 * 3 * 4 * 8 * (f16 ? 2 : 4) * 2);
        cr_assert_eq(llm_kv_block_bytes(&kv->p), (uint64_t)2 * 4 * 8 * (f16 ? 2 : 4) * 2);
        llm_kv_free(kv);
    }
}

/* K and V each in their own type: q4 keys (rotated 4-bit blocks), fp8
 * values. The sizes follow each type; a key row read back (dequantized,
 * rotated back) is within q4's step of what was stored and far closer
 * than the same 4 bits without the rotation manage on a row with one
 * large channel; a value is fp8's rounding of its float. */
Test(kv, store_q4_keys_and_fp8_values)
{
    struct llm_kv_params p;
    llm_kv_params_default(&p);
    p.n_layers = 2, p.n_kv_heads = 2, p.head_dim = 32, p.block_size = 4;
    p.n_seq = 1, p.max_tokens = 8, p.type_k = LLM_TYPE_Q4_0, p.type_v = LLM_TYPE_FP8_E4M3;
    struct llm_kv *kv;
    cr_assert_eq(llm_kv_new(&kv, &p), LLM_OK);
    cr_assert_eq(kv->row_bytes_k, 2 * 18);
    cr_assert_eq(kv->row_bytes_v, 64);
    cr_assert_eq(llm_kv_half_bytes(&p, 0), (uint64_t)2 * 2 * 4 * 36);
    cr_assert_eq(llm_kv_half_bytes(&p, 1), (uint64_t)2 * 2 * 4 * 64);
    cr_assert_eq(llm_kv_storage_bytes(&p), (uint64_t)2 * 2 * 4 * (36 + 64));
    cr_assert_eq(llm_kv_block_bytes(&p), (uint64_t)2 * 4 * (36 + 64));
    cr_assert_eq(llm_kv_prepare(kv, 0, 0, 3), LLM_OK);
    float k[3 * 64], v[3 * 64];
    for (int i = 0; i < 3 * 64; i++) {
        k[i] = (float)((i * 37) % 17) / 8.0f - 1.0f + (i % 64 == 5 ? 40.0f : 0.0f);
        v[i] = (float)((i * 11) % 23) - 11.5f;
    }
    llm_kv_store_host(kv, 1, 0, 0, 3, k, v);
    double err_rot = 0, err_plain = 0;
    for (int t = 0; t < 3; t++) {
        const uint8_t *kr = (const uint8_t *)kv->k + llm_kv_row_number(kv, 1, 0, t) * 36;
        const uint8_t *vr = (const uint8_t *)kv->v + llm_kv_row_number(kv, 1, 0, t) * 64;
        float back[64], plain[64];
        uint8_t blocks[36];
        cr_assert_eq(llm_dequantize_row(LLM_TYPE_Q4_0, kr, back, 64), LLM_OK);
        llm_vec_hadamard32(back, 64);
        llm_quantize_row(LLM_TYPE_Q4_0, k + t * 64, blocks, 64);
        llm_dequantize_row(LLM_TYPE_Q4_0, blocks, plain, 64);
        for (int e = 0; e < 64; e++) {
            err_rot += (back[e] - k[t * 64 + e]) * (back[e] - k[t * 64 + e]);
            err_plain += (plain[e] - k[t * 64 + e]) * (plain[e] - k[t * 64 + e]);
            cr_assert_eq(vr[e], llm_fp32_to_fp8_e4m3(v[t * 64 + e]));
        }
    }
    cr_assert(err_rot < 0.5 * err_plain, "squared error %g rotated, %g plain", err_rot, err_plain);
    /* a type a head cannot hold: q4 needs heads of a multiple of 32 */
    p.head_dim = 48;
    struct llm_kv *bad = NULL;
    cr_assert_eq(llm_kv_new(&bad, &p), LLM_E_INVALID);
    llm_kv_free(kv);
}

/* A cache of 2 layers of 2 heads of 8 in blocks of bs, for q4ch keys
 * (kv.h): k q4ch and v f16 in blocks of 16 are the ones the tests use. */
static llm_status mk_q4ch(struct llm_kv **kv, int32_t bs, enum llm_type k, enum llm_type v)
{
    struct llm_kv_params p;
    llm_kv_params_default(&p);
    p.n_layers = 2, p.n_kv_heads = 2, p.head_dim = 8, p.block_size = bs;
    p.n_seq = 2, p.max_tokens = 64, p.type_k = k, p.type_v = v;
    *kv = NULL;
    return llm_kv_new(kv, &p);
}

/* key element e of position pos (values: its negation) */
static float q4ch_key(int32_t pos, int e)
{
    return (float)((pos * 7 + e * 3) % 11) * 0.25f - 1.0f + (e == 3 ? 8.0f : 0.0f);
}

static llm_status put_q4ch(struct llm_kv *kv, int32_t seq, int32_t pos, int32_t n)
{
    llm_status s = llm_kv_prepare(kv, seq, pos, n);
    if (s)
        return s;
    llm_kv_copy_host(kv);
    float k[64 * 16], v[64 * 16];
    for (int32_t i = 0; i < n * 16; i++)
        k[i] = q4ch_key(pos + i / 16, i % 16), v[i] = -k[i];
    for (int32_t l = 0; l < 2; l++)
        llm_kv_store_host(kv, l, seq, pos, n, k, v);
    llm_kv_set_len(kv, seq, pos + n);
    return LLM_OK;
}

Test(kv, q4ch_keys_quantize_full_blocks_and_keep_fp16_tails)
{
    struct llm_kv *kv;
    cr_assert_eq(mk_q4ch(&kv, 16, LLM_TYPE_Q4Z_CH, LLM_TYPE_F16), LLM_OK);
    /* 4 bits a key and, per channel and block, an fp16 scale and minimum */
    cr_assert_eq(kv->row_bytes_k, 16 / 2 + 4 * 16 / 16);
    cr_assert_eq(put_q4ch(kv, 0, 0, 20), LLM_OK);
    /* block 0 is quantized (in layer 1 as in 0): within half a step of its keys */
    float back[16 * 16];
    const int64_t r = llm_kv_row_number(kv, 1, 0, 0);
    llm_kv_q4ch_dequantize((const uint8_t *)kv->k + r * (int64_t)kv->row_bytes_k, 16, 16, 2, back);
    for (int32_t t = 0; t < 16; t++)
        for (int e = 0; e < 16; e++)
            cr_assert(fabsf(back[t * 16 + e] - q4ch_key(t, e)) <= 2.5f / 15 / 2 * 1.01f + 1e-3f,
                      "pos %d e %d: %g", t, e, back[t * 16 + e]);
    /* both blocks' keys in the tail, in fp16 */
    cr_assert(llm_kv_tail_holds(kv, 0, 0) && llm_kv_tail_holds(kv, 0, 1));
    for (int32_t p = 0; p < 20; p++)
        cr_assert_eq(llm_kv_tail_row(kv, 0, 1, p)[3], llm_fp32_to_fp16(q4ch_key(p, 3)));
    /* a cut into the last full block keeps its fp16 rows: all positions kept */
    cr_assert_eq(llm_kv_truncate(kv, 0, 10), 10);
    cr_assert_eq(put_q4ch(kv, 0, 10, 30), LLM_OK); /* blocks 0, 1 and 2: slot 0 reused */
    cr_assert(!llm_kv_tail_holds(kv, 0, 0) && llm_kv_tail_holds(kv, 0, 1) &&
              llm_kv_tail_holds(kv, 0, 2));
    /* a write that would cut into block 0 is refused, changing nothing */
    cr_assert_eq(llm_kv_prepare(kv, 0, 8, 4), LLM_E_INVALID);
    cr_assert_eq(llm_kv_len(kv, 0), 40);
    /* a fork shares the blocks and copies the tail, where the cut is held */
    cr_assert_eq(llm_kv_fork(kv, 0, 1, 8), LLM_E_INVALID);
    cr_assert_eq(llm_kv_fork(kv, 0, 1, 36), LLM_OK);
    cr_assert_eq(llm_kv_tail_row(kv, 1, 0, 33)[3], llm_fp32_to_fp16(q4ch_key(33, 3)));
    cr_assert_eq(put_q4ch(kv, 1, 36, 2), LLM_OK);
    /* cuts: into block 1 (held) keeps all, into block 0 (quantized, no
     * rows) keeps the full blocks below: none */
    cr_assert(llm_kv_can_cut(kv, 0, 20) && !llm_kv_can_cut(kv, 0, 8) && llm_kv_can_cut(kv, 0, 16));
    cr_assert_eq(llm_kv_truncate(kv, 0, 20), 20);
    cr_assert_eq(llm_kv_truncate(kv, 0, 8), 0);
    cr_assert_eq(llm_kv_len(kv, 0), 0);
    llm_kv_reset(kv, 1);
    assert_all_free(kv);
    llm_kv_free(kv);
    /* keys only, in blocks of a multiple of 16 */
    cr_assert_eq(mk_q4ch(&kv, 8, LLM_TYPE_Q4Z_CH, LLM_TYPE_F16), LLM_E_INVALID);
    cr_assert_eq(mk_q4ch(&kv, 16, LLM_TYPE_F16, LLM_TYPE_Q4Z_CH), LLM_E_INVALID);
    enum llm_type kvt[2] = { LLM_TYPE_F16, LLM_TYPE_F16 };
    int given = 0;
    cr_assert_eq(llm_kv_types_option(3, "q4ch", kvt, &given), LLM_OK);
    cr_assert(kvt[0] == LLM_TYPE_Q4Z_CH && kvt[1] == LLM_TYPE_Q4_0);
    cr_assert_eq(llm_kv_types_option(2, "q4ch", kvt, &given), LLM_E_INVALID);
}

Test(kv, type_names_parse_and_print)
{
    const char *names[] = { "f32", "f16", "bf16", "q8", "fp8_e4m3", "q4", "q4ch" };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        enum llm_type t;
        cr_assert_eq(llm_kv_type_parse(names[i], &t), LLM_OK);
        cr_assert_str_eq(llm_kv_type_name(t), names[i]);
    }
    enum llm_type t;
    cr_assert_eq(llm_kv_type_parse("q8_0", &t), LLM_OK);
    cr_assert_eq(t, LLM_TYPE_Q8_0);
    cr_assert_eq(llm_kv_type_parse("fp8", &t), LLM_OK);
    cr_assert_eq(t, LLM_TYPE_FP8_E4M3);
    cr_assert_eq(llm_kv_type_parse("q4_0", &t), LLM_E_INVALID);
    cr_assert_str_eq(llm_error_detail(LLM_E_INVALID),
                     "'q4_0' is not f32, f16, bf16, q8, fp8_e4m3, q4 or q4ch");
}

/* Sliding windows at the pool's level (kv.h): layer 1 a window layer of 5
 * positions, layer 0 a full one; steps of at most 4, 8 positions kept for
 * cuts back. A sequence's window slots stay within win_blocks however long
 * it grows, the rows it reads are the ones written, and the full layer
 * keeps them all. A write into a block shared with a reference outside
 * the tables (the prefix index's) gives the writer a copy of the full
 * layer's rows, and the window rows move with it (no one else reads
 * them); shared with another table, they are copied too. */
static struct llm_kv *mk_window(int32_t n_seq)
{
    static const uint8_t local[2] = { 0, 1 };
    struct llm_kv_params p;
    llm_kv_params_default(&p);
    p.n_layers = 2, p.n_kv_heads = 2, p.head_dim = 4, p.block_size = 4;
    p.n_seq = n_seq, p.max_tokens = 256, p.type_k = p.type_v = LLM_TYPE_F32;
    p.window = 5, p.local = local, p.max_step = 4, p.keep = 8;
    struct llm_kv *kv;
    cr_assert_eq(llm_kv_new(&kv, &p), LLM_OK);
    /* (4 + 5 + 8 + 2 x 4) / 4 + 1 */
    cr_assert_eq(kv->win_blocks, 7);
    cr_assert_eq(kv->n_slots, 7 * n_seq);
    cr_assert_eq(llm_kv_window_bytes(&p), 2ull * 7 * n_seq * 4 * 8 * sizeof(float));
    cr_assert_eq(llm_kv_block_bytes(&p), 2ull * 4 * 8 * sizeof(float), "the full layer's");
    return kv;
}

Test(kv, window_layers_hold_a_bounded_number_of_slots)
{
    struct llm_kv *kv = mk_window(2);
    for (int32_t pos = 0; pos < 200; pos += 4) {
        cr_assert_eq(put(kv, 0, pos, 4, 1000), LLM_OK);
        struct llm_kv_stats st;
        llm_kv_stats(kv, &st);
        cr_assert_leq(st.slots_used, kv->win_blocks, "at %d: %d slots", pos, st.slots_used);
        /* what the next query reads: its window, in both layers */
        for (int32_t p = pos + 4 - 5; p < pos + 4; p++)
            for (int l = 0; l < 2; l++)
                cr_assert(p < 0 || kval(kv, l, 0, p, 3) == 1000 + (float)p, "pos %d layer %d", p, l);
    }
    for (int32_t p = 0; p < 200; p++) /* the full layer keeps every row */
        cr_assert_eq(kval(kv, 0, 0, p, 0), 1000 + (float)p);
    cr_assert(!llm_kv_has_row(kv, 1, 0, 100) && llm_kv_has_row(kv, 0, 0, 100));
    cr_assert_eq(llm_kv_window_from(kv, 0), kv->past[0] * 4);
    cr_assert_eq(llm_kv_window_from(kv, 0), (196 - 5 + 1 - 8) / 4 * 4);
    llm_kv_reset(kv, 0);
    assert_all_free(kv);
    cr_assert_eq(kv->n_free_slots, kv->n_slots);
    llm_kv_free(kv);
}

Test(kv, window_rows_move_or_copy_on_write)
{
    struct llm_kv *kv = mk_window(2);
    cr_assert_eq(put(kv, 0, 0, 4, 0), LLM_OK);
    cr_assert_eq(put(kv, 0, 4, 2, 0), LLM_OK); /* block 1 half full */
    const int32_t b1 = llm_kv_seq_block(kv, 0, 1), slot = kv->slot[b1];
    llm_kv_retain(kv, b1); /* an outside reference: it reads no window rows */
    cr_assert_eq(put(kv, 0, 6, 2, 0), LLM_OK);
    const int32_t n1 = llm_kv_seq_block(kv, 0, 1);
    cr_assert_neq(n1, b1, "a copy of the shared block");
    cr_assert_eq(kv->slot[n1], slot, "the window rows moved");
    cr_assert_eq(kv->slot[b1], -1);
    assert_rows(kv, 0, 0, 8, 0);
    llm_kv_release(kv, b1);
    /* shared with another table: its window rows are copied */
    cr_assert_eq(llm_kv_fork(kv, 0, 1, 6), LLM_OK);
    cr_assert_eq(kv->slot_ref[n1], 2);
    cr_assert_eq(put(kv, 1, 6, 2, 500), LLM_OK);
    const int32_t c1 = llm_kv_seq_block(kv, 1, 1);
    cr_assert(c1 != n1 && kv->slot[c1] >= 0 && kv->slot[c1] != kv->slot[n1]);
    assert_rows(kv, 1, 4, 6, 0);
    assert_rows(kv, 1, 6, 8, 500);
    assert_rows(kv, 0, 0, 8, 0);
    llm_kv_reset(kv, 0);
    llm_kv_reset(kv, 1);
    assert_all_free(kv);
    cr_assert_eq(kv->n_free_slots, kv->n_slots);
    llm_kv_free(kv);
}
