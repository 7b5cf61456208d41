/* test_types.c: the type table of lib/quant/types.c: traits against the
 * block structs of blocks.h and the GGML type table (formats.md §1.5),
 * row and tensor sizes, name parsing. */
#include <stdint.h>
#include <string.h>

#include "../../../lib/quant/types.h"
#include "../helpers.h"

Test(types, traits_match_block_structs)
{
    struct { enum llm_type t; uint32_t blck, bytes, hdr; } want[] = {
        { LLM_TYPE_F32, 1, 4, 0 },
        { LLM_TYPE_F16, 1, 2, 0 },
        { LLM_TYPE_BF16, 1, 2, 0 },
        { LLM_TYPE_Q8_0, 32, sizeof(struct llm_block_q8_0), 0 },
        { LLM_TYPE_Q8_G64, 64, sizeof(struct llm_block_q8_g64), 0 },
        { LLM_TYPE_Q8_G128, 128, sizeof(struct llm_block_q8_g128), 0 },
        { LLM_TYPE_Q8_CH, 1, 1, 4 },
        { LLM_TYPE_Q8Z_G32, 32, sizeof(struct llm_block_q8z_g32), 0 },
        { LLM_TYPE_Q8Z_G64, 64, sizeof(struct llm_block_q8z_g64), 0 },
        { LLM_TYPE_Q8Z_G128, 128, sizeof(struct llm_block_q8z_g128), 0 },
        { LLM_TYPE_Q8Z_CH, 1, 1, 8 },
        { LLM_TYPE_Q4_0, 32, sizeof(struct llm_block_q4_0), 0 },
        { LLM_TYPE_Q4_G64, 64, sizeof(struct llm_block_q4_g64), 0 },
        { LLM_TYPE_Q4_G128, 128, sizeof(struct llm_block_q4_g128), 0 },
        { LLM_TYPE_Q4_CH, 32, sizeof(struct llm_block_q4_ch), 4 },
        { LLM_TYPE_Q4_1, 32, sizeof(struct llm_block_q4_1), 0 },
        { LLM_TYPE_Q4Z_G64, 64, sizeof(struct llm_block_q4z_g64), 0 },
        { LLM_TYPE_Q4Z_G128, 128, sizeof(struct llm_block_q4z_g128), 0 },
        { LLM_TYPE_Q4Z_CH, 32, sizeof(struct llm_block_q4_ch), 8 },
        { LLM_TYPE_NF4, 64, sizeof(struct llm_block_nf4), 0 },
        { LLM_TYPE_NF4_DQ, 64, sizeof(struct llm_block_nf4_dq), 4 },
        { LLM_TYPE_FP8_E4M3, 1, 1, 4 },
        { LLM_TYPE_Q3Z_G32, 32, sizeof(struct llm_block_q3z_g32), 0 },
        { LLM_TYPE_Q3Z_G64, 64, sizeof(struct llm_block_q3z_g64), 0 },
        { LLM_TYPE_Q3Z_G128, 128, sizeof(struct llm_block_q3z_g128), 0 },
        { LLM_TYPE_Q3Z_CH, 32, sizeof(struct llm_block_q3_ch), 8 },
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const struct llm_type_traits *tr = llm_type_traits(want[i].t);
        cr_assert_not_null(tr, "type %d", (int)want[i].t);
        cr_assert_eq(tr->blck, want[i].blck, "%s blck", tr->name);
        cr_assert_eq(tr->block_bytes, want[i].bytes, "%s bytes", tr->name);
        cr_assert_eq(tr->row_header, want[i].hdr, "%s header", tr->name);
        cr_assert_eq(tr->is_aux, 0);
        cr_assert_eq(tr->is_quant, want[i].t >= LLM_TYPE_Q8_0, "%s is_quant", tr->name);
        cr_assert(tr->desc && tr->desc[0]);
    }
    /* the quantized structs hold exactly the bits they claim */
    cr_assert_eq(sizeof(struct llm_block_q4_0), 2 + 32 / 2);
    cr_assert_eq(sizeof(struct llm_block_nf4_dq), 1 + 64 / 2);
}

Test(types, unused_and_aux_ids)
{
    for (uint32_t t = 6; t < 16; t++) {
        cr_assert_null(llm_type_traits(t), "id %u", t);
        cr_assert_str_eq(llm_type_name(t), "?");
    }
    cr_assert_null(llm_type_traits(LLM_TYPE_COUNT_));
    cr_assert_null(llm_type_traits(0xffffffffu));
    cr_assert_str_eq(llm_type_name(1000), "?");
    cr_assert(llm_type_traits(LLM_TYPE_U8)->is_aux);
    cr_assert(llm_type_traits(LLM_TYPE_I32)->is_aux);
    cr_assert(llm_type_traits(LLM_TYPE_U32)->is_aux);
    cr_assert_eq(llm_type_traits(LLM_TYPE_I32)->block_bytes, 4);
}

/* GGML ids with the same bytes (formats.md §1.5): F32 0, F16 1, Q4_0 2,
 * Q4_1 3, Q8_0 8, I32 26, BF16 30. */
Test(types, ggml_correspondence)
{
    cr_assert_eq(llm_type_from_ggml(0), LLM_TYPE_F32);
    cr_assert_eq(llm_type_from_ggml(1), LLM_TYPE_F16);
    cr_assert_eq(llm_type_from_ggml(2), LLM_TYPE_Q4_0);
    cr_assert_eq(llm_type_from_ggml(3), LLM_TYPE_Q4_1);
    cr_assert_eq(llm_type_from_ggml(8), LLM_TYPE_Q8_0);
    cr_assert_eq(llm_type_from_ggml(26), LLM_TYPE_I32);
    cr_assert_eq(llm_type_from_ggml(30), LLM_TYPE_BF16);
    cr_assert_eq(llm_type_from_ggml(12), LLM_TYPE_Q4_K); /* the GGUF layouts (test_kquants.c) */
    cr_assert_eq(llm_type_from_ggml(6), LLM_TYPE_Q5_0);
    cr_assert_eq(llm_type_from_ggml(9), -1); /* Q8_1: no counterpart */
    cr_assert_eq(llm_type_from_ggml(16), -1); /* IQ2_XXS */
    cr_assert_eq(llm_type_from_ggml(99), -1);
    /* GGML block sizes: Q4_0 18, Q4_1 20, Q8_0 34 bytes per 32 */
    cr_assert_eq(llm_type_row_bytes(LLM_TYPE_Q4_0, 4096), 4096 / 32 * 18);
    cr_assert_eq(llm_type_row_bytes(LLM_TYPE_Q4_1, 4096), 4096 / 32 * 20);
    cr_assert_eq(llm_type_row_bytes(LLM_TYPE_Q8_0, 4096), 4096 / 32 * 34);
}

Test(types, row_bytes)
{
    cr_assert_eq(llm_type_row_bytes(LLM_TYPE_F32, 7), 28);
    cr_assert_eq(llm_type_row_bytes(LLM_TYPE_BF16, 7), 14);
    cr_assert_eq(llm_type_row_bytes(LLM_TYPE_Q4_0, 1), 18);
    cr_assert_eq(llm_type_row_bytes(LLM_TYPE_Q4_0, 32), 18);
    cr_assert_eq(llm_type_row_bytes(LLM_TYPE_Q4_0, 33), 36);
    cr_assert_eq(llm_type_row_bytes(LLM_TYPE_Q8_G128, 129), 260);
    cr_assert_eq(llm_type_row_bytes(LLM_TYPE_Q8_CH, 31), 35);
    cr_assert_eq(llm_type_row_bytes(LLM_TYPE_Q8Z_CH, 31), 39);
    cr_assert_eq(llm_type_row_bytes(LLM_TYPE_Q4_CH, 33), 4 + 2 * 16);
    cr_assert_eq(llm_type_row_bytes(LLM_TYPE_Q4Z_CH, 64), 8 + 2 * 16);
    cr_assert_eq(llm_type_row_bytes(LLM_TYPE_NF4, 65), 68);
    cr_assert_eq(llm_type_row_bytes(LLM_TYPE_NF4_DQ, 65), 4 + 2 * 33);
    cr_assert_eq(llm_type_row_bytes(LLM_TYPE_FP8_E4M3, 10), 14);
    cr_assert_eq(llm_type_row_bytes(LLM_TYPE_Q3Z_G128, 172), 2 * 52);
    cr_assert_eq(llm_type_row_bytes(LLM_TYPE_Q3Z_CH, 64), 8 + 2 * 12);
    cr_assert_eq(llm_type_row_bytes(LLM_TYPE_FP8_E4M3, 0), 4); /* the header alone */
    /* overflow and unknown types give 0 */
    cr_assert_eq(llm_type_row_bytes(LLM_TYPE_F32, UINT64_MAX / 2), 0);
    cr_assert_eq(llm_type_row_bytes(LLM_TYPE_FP8_E4M3, UINT64_MAX - 2), 0);
    cr_assert_eq(llm_type_row_bytes((enum llm_type)9, 32), 0);
}

Test(types, tensor_bytes)
{
    uint64_t n = 0;
    int64_t ne[4] = { 64, 3, 2, 1 };
    cr_assert_eq(llm_type_tensor_bytes(LLM_TYPE_Q4_0, 4, ne, &n), LLM_OK);
    cr_assert_eq(n, 2 * 18 * 6);
    cr_assert_eq(llm_type_tensor_bytes(LLM_TYPE_NF4_DQ, 2, ne, &n), LLM_OK);
    cr_assert_eq(n, (4 + 33) * 3);
    int64_t one[1] = { 5 };
    cr_assert_eq(llm_type_tensor_bytes(LLM_TYPE_F16, 1, one, &n), LLM_OK);
    cr_assert_eq(n, 10);

    cr_assert_eq(llm_type_tensor_bytes(LLM_TYPE_F32, 0, ne, &n), LLM_E_FORMAT);
    cr_assert_eq(llm_type_tensor_bytes(LLM_TYPE_F32, 5, ne, &n), LLM_E_FORMAT);
    cr_assert_eq(llm_type_tensor_bytes((enum llm_type)12, 1, ne, &n), LLM_E_FORMAT);
    int64_t zero[2] = { 4, 0 }, neg[2] = { -4, 2 };
    cr_assert_eq(llm_type_tensor_bytes(LLM_TYPE_F32, 2, zero, &n), LLM_E_FORMAT);
    cr_assert_eq(llm_type_tensor_bytes(LLM_TYPE_F32, 2, neg, &n), LLM_E_FORMAT);
    int64_t big[4] = { (int64_t)1 << 30, (int64_t)1 << 30, 1 << 20, 1 };
    cr_assert_eq(llm_type_tensor_bytes(LLM_TYPE_F32, 3, big, &n), LLM_E_FORMAT);
    int64_t huge[1] = { ((int64_t)1 << 53) + 1 };
    cr_assert_eq(llm_type_tensor_bytes(LLM_TYPE_F32, 1, huge, &n), LLM_E_FORMAT);
    int64_t edge[2] = { (int64_t)1 << 26, (int64_t)1 << 27 }; /* 2^53 elements: allowed */
    cr_assert_eq(llm_type_tensor_bytes(LLM_TYPE_U8, 2, edge, &n), LLM_OK);
    cr_assert_eq(n, (uint64_t)1 << 53);
}

Test(types, bits_per_weight)
{
    cr_assert_float_eq(llm_type_bpw(LLM_TYPE_Q4_0, 4096), 4.5, 1e-12);
    cr_assert_float_eq(llm_type_bpw(LLM_TYPE_Q4_1, 4096), 5.0, 1e-12);
    cr_assert_float_eq(llm_type_bpw(LLM_TYPE_Q8_0, 4096), 8.5, 1e-12);
    cr_assert_float_eq(llm_type_bpw(LLM_TYPE_NF4, 4096), 4.25, 1e-12);
    /* NF4 with double quantization: 4 + 8/64 + a 32-bit row scale */
    cr_assert_float_eq(llm_type_bpw(LLM_TYPE_NF4_DQ, 4096), 4.125 + 32.0 / 4096, 1e-12);
    cr_assert_float_eq(llm_type_bpw(LLM_TYPE_F16, 10), 16.0, 1e-12);
    cr_assert_float_eq(llm_type_bpw(LLM_TYPE_Q4_0, 0), 0.0, 1e-12);
}

Test(types, parse_names_and_aliases)
{
    enum llm_type t;
    for (uint32_t id = 0; id < LLM_TYPE_COUNT_; id++) {
        const struct llm_type_traits *tr = llm_type_traits(id);
        if (!tr || tr->is_aux)
            continue;
        t = LLM_TYPE_COUNT_;
        cr_assert_eq(llm_type_parse(tr->name, &t), LLM_OK, "%s", tr->name);
        cr_assert_eq(t, id, "%s", tr->name);
    }
    cr_assert_eq(llm_type_parse("Q4_0", &t), LLM_OK);
    cr_assert_eq(t, LLM_TYPE_Q4_0);
    cr_assert_eq(llm_type_parse("NF4_DQ", &t), LLM_OK);
    cr_assert_eq(t, LLM_TYPE_NF4_DQ);
    struct { const char *s; enum llm_type t; } alias[] = {
        { "q8_g32", LLM_TYPE_Q8_0 }, { "q4_g32", LLM_TYPE_Q4_0 },
        { "q4z_g32", LLM_TYPE_Q4_1 }, { "fp8", LLM_TYPE_FP8_E4M3 }, { "FP8", LLM_TYPE_FP8_E4M3 },
    };
    for (size_t i = 0; i < sizeof alias / sizeof alias[0]; i++) {
        cr_assert_eq(llm_type_parse(alias[i].s, &t), LLM_OK, "%s", alias[i].s);
        cr_assert_eq(t, alias[i].t, "%s", alias[i].s);
    }
    /* auxiliary types are not user-selectable; unknown names list the choices */
    cr_assert_eq(llm_type_parse("u8", &t), LLM_E_INVALID);
    cr_assert_eq(llm_type_parse("q4_kk", &t), LLM_E_INVALID);
    const char *detail = llm_error_detail(LLM_E_INVALID);
    cr_assert(strstr(detail, "q4_kk") != NULL, "%s", detail);
    cr_assert(strstr(detail, "iq4_xs") != NULL, "%s", detail);
    cr_assert(strstr(detail, "nf4_dq") != NULL, "%s", detail);
    cr_assert_eq(llm_type_parse("", &t), LLM_E_INVALID);
    cr_assert_eq(llm_type_parse("q4_0 ", &t), LLM_E_INVALID);
}

Test(types, names_list)
{
    const char *names = llm_type_names();
    cr_assert(strncmp(names, "f32, f16, bf16, q8_0, ", 22) == 0, "%s", names);
    cr_assert(strstr(names, "fp8_e4m3") != NULL);
    cr_assert(strstr(names, "u8") == NULL && strstr(names, "i32") == NULL, "%s", names);
    int commas = 0;
    for (const char *p = names; *p; p++)
        commas += *p == ',';
    cr_assert_eq(commas, 35, "%s", names); /* 36 weight types */
    cr_assert_eq(llm_type_names(), names);
}
