/* Tests of the paged KV cache: block tables, the free list, capacity
 * errors and F16 storage. */
#include <criterion/criterion.h>
#include <string.h>

#include "../../../lib/common/fp16.h"
#include "../../../lib/kv/kv.h"

static struct llm_kv *mk(int32_t n_seq, int32_t max_tokens, int32_t n_blocks, enum llm_type t)
{
    struct llm_kv_params p;
    llm_kv_params_default(&p);
    p.n_layers = 2, p.n_kv_heads = 2, p.head_dim = 4, p.block_size = 4;
    p.n_seq = n_seq, p.max_tokens = max_tokens, p.n_blocks = n_blocks, p.type = t;
    struct llm_kv *kv;
    cr_assert_eq(llm_kv_new(&kv, &p), LLM_OK);
    return kv;
}

Test(kv, blocks_taken_on_demand_and_returned)
{
    struct llm_kv *kv = mk(2, 16, 0, LLM_TYPE_F32); /* 2 x 4 blocks */
    cr_assert_eq(llm_kv_free_blocks(kv), 8);
    cr_assert_eq(llm_kv_reserve(kv, 0, 5), LLM_OK); /* 2 blocks */
    cr_assert_eq(llm_kv_free_blocks(kv), 6);
    cr_assert_eq(llm_kv_reserve(kv, 1, 1), LLM_OK);
    cr_assert_eq(llm_kv_reserve(kv, 0, 8), LLM_OK); /* still 2 */
    cr_assert_eq(llm_kv_free_blocks(kv), 5);
    /* rows of different sequences never share storage */
    int64_t a = llm_kv_row_index(kv, 0, 0, 4), b = llm_kv_row_index(kv, 0, 1, 0);
    cr_assert_neq(a / (4 * 8), b / (4 * 8));
    /* a later layer is a separate plane */
    cr_assert_eq(llm_kv_row_index(kv, 1, 0, 4) - a, (int64_t)8 * 4 * 8);
    llm_kv_reset(kv, 0);
    cr_assert_eq(llm_kv_free_blocks(kv), 7);
    cr_assert_eq(llm_kv_len(kv, 0), 0);
    llm_kv_free(kv);
}

Test(kv, capacity_errors)
{
    struct llm_kv *kv = mk(2, 16, 5, LLM_TYPE_F32); /* fewer blocks than 2 full sequences */
    cr_assert_eq(llm_kv_reserve(kv, 0, 17), LLM_E_INVALID);
    cr_assert_eq(llm_kv_reserve(kv, 2, 1), LLM_E_INVALID);
    cr_assert_eq(llm_kv_reserve(kv, 0, 16), LLM_OK);
    cr_assert_eq(llm_kv_reserve(kv, 1, 8), LLM_E_NOMEM);
    cr_assert_eq(llm_kv_free_blocks(kv), 1, "a failed reserve takes nothing");
    cr_assert_eq(llm_kv_reserve(kv, 1, 4), LLM_OK);
    llm_kv_free(kv);
    struct llm_kv_params p;
    llm_kv_params_default(&p);
    cr_assert_eq(llm_kv_new(&kv, &p), LLM_E_INVALID);
    cr_assert_eq(llm_kv_storage_bytes(&p), 0);
}

Test(kv, store_f32_and_f16)
{
    for (int f16 = 0; f16 < 2; f16++) {
        struct llm_kv *kv = mk(1, 12, 0, f16 ? LLM_TYPE_F16 : LLM_TYPE_F32);
        cr_assert_eq(llm_kv_reserve(kv, 0, 6), LLM_OK);
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
        llm_kv_free(kv);
    }
}
