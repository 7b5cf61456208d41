/* types.c: the type table. */
#include "types.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "../common/alloc.h"

#define Q(name, blck, bytes, hdr, ggml, desc) { name, blck, bytes, hdr, 1, 0, ggml, desc }

static const struct llm_type_traits table[LLM_TYPE_COUNT_] = {
    [LLM_TYPE_F32] = { "f32", 1, 4, 0, 0, 0, 0, "IEEE binary32" },
    [LLM_TYPE_F16] = { "f16", 1, 2, 0, 0, 0, 1, "IEEE binary16" },
    [LLM_TYPE_BF16] = { "bf16", 1, 2, 0, 0, 0, 30, "bfloat16" },
    [LLM_TYPE_U8] = { "u8", 1, 1, 0, 0, 1, -1, "bytes (auxiliary data)" },
    [LLM_TYPE_I32] = { "i32", 1, 4, 0, 0, 1, 26, "int32 (auxiliary data)" },
    [LLM_TYPE_U32] = { "u32", 1, 4, 0, 0, 1, -1, "uint32 (auxiliary data)" },
    [LLM_TYPE_Q8_0] = Q("q8_0", 32, 34, 0, 8, "int8 symmetric, groups of 32, fp16 scale (GGUF Q8_0)"),
    [LLM_TYPE_Q8_G64] = Q("q8_g64", 64, 66, 0, -1, "int8 symmetric, groups of 64"),
    [LLM_TYPE_Q8_G128] = Q("q8_g128", 128, 130, 0, -1, "int8 symmetric, groups of 128"),
    [LLM_TYPE_Q8_CH] = Q("q8_ch", 1, 1, 4, -1, "int8 symmetric, one float32 scale per row"),
    [LLM_TYPE_Q8Z_G32] = Q("q8z_g32", 32, 36, 0, -1, "uint8 with zero point, groups of 32"),
    [LLM_TYPE_Q8Z_G64] = Q("q8z_g64", 64, 68, 0, -1, "uint8 with zero point, groups of 64"),
    [LLM_TYPE_Q8Z_G128] = Q("q8z_g128", 128, 132, 0, -1, "uint8 with zero point, groups of 128"),
    [LLM_TYPE_Q8Z_CH] = Q("q8z_ch", 1, 1, 8, -1, "uint8 with zero point, per row"),
    [LLM_TYPE_Q4_0] = Q("q4_0", 32, 18, 0, 2, "int4 symmetric, groups of 32, fp16 scale (GGUF Q4_0)"),
    [LLM_TYPE_Q4_G64] = Q("q4_g64", 64, 34, 0, -1, "int4 symmetric, groups of 64"),
    [LLM_TYPE_Q4_G128] = Q("q4_g128", 128, 66, 0, -1, "int4 symmetric, groups of 128"),
    [LLM_TYPE_Q4_CH] = Q("q4_ch", 32, 16, 4, -1, "int4 symmetric, one float32 scale per row"),
    [LLM_TYPE_Q4_1] = Q("q4_1", 32, 20, 0, 3, "uint4 with zero point, groups of 32 (GGUF Q4_1)"),
    [LLM_TYPE_Q4Z_G64] = Q("q4z_g64", 64, 36, 0, -1, "uint4 with zero point, groups of 64"),
    [LLM_TYPE_Q4Z_G128] = Q("q4z_g128", 128, 68, 0, -1, "uint4 with zero point, groups of 128"),
    [LLM_TYPE_Q4Z_CH] = Q("q4z_ch", 32, 16, 8, -1, "uint4 with zero point, per row"),
    [LLM_TYPE_NF4] = Q("nf4", 64, 34, 0, -1, "NF4 code book, blocks of 64, fp16 absmax"),
    [LLM_TYPE_NF4_DQ] = Q("nf4_dq", 64, 33, 4, -1, "NF4, blocks of 64, fp8 absmax x float32 row scale"),
    [LLM_TYPE_FP8_E4M3] = Q("fp8_e4m3", 1, 1, 4, -1, "FP8 E4M3 times a float32 row scale"),
    [LLM_TYPE_Q3Z_G32] = Q("q3z_g32", 32, 16, 0, -1, "uint3 with zero point, groups of 32"),
    [LLM_TYPE_Q3Z_G64] = Q("q3z_g64", 64, 28, 0, -1, "uint3 with zero point, groups of 64"),
    [LLM_TYPE_Q3Z_G128] = Q("q3z_g128", 128, 52, 0, -1, "uint3 with zero point, groups of 128"),
    [LLM_TYPE_Q3Z_CH] = Q("q3z_ch", 32, 12, 8, -1, "uint3 with zero point, per row"),
    [LLM_TYPE_Q5_0] = Q("q5_0", 32, 22, 0, 6, "int5 symmetric, groups of 32 (GGUF Q5_0)"),
    [LLM_TYPE_Q5_1] = Q("q5_1", 32, 24, 0, 7, "uint5 with minimum, groups of 32 (GGUF Q5_1)"),
    [LLM_TYPE_Q2_K] = Q("q2_k", 256, 84, 0, 10, "2-bit K-quant, 16 x 4-bit scale and min (GGUF Q2_K)"),
    [LLM_TYPE_Q3_K] = Q("q3_k", 256, 110, 0, 11, "3-bit K-quant, 16 x 6-bit scale (GGUF Q3_K)"),
    [LLM_TYPE_Q4_K] = Q("q4_k", 256, 144, 0, 12, "4-bit K-quant, 8 x 6-bit scale and min (GGUF Q4_K)"),
    [LLM_TYPE_Q5_K] = Q("q5_k", 256, 176, 0, 13, "5-bit K-quant, 8 x 6-bit scale and min (GGUF Q5_K)"),
    [LLM_TYPE_Q6_K] = Q("q6_k", 256, 210, 0, 14, "6-bit K-quant, 16 x int8 scale (GGUF Q6_K)"),
    [LLM_TYPE_Q8_K] = Q("q8_k", 256, 292, 0, 15, "int8, float32 scale per 256 (GGUF Q8_K)"),
    [LLM_TYPE_IQ4_NL] = Q("iq4_nl", 32, 18, 0, 20, "4-bit non-linear code book, groups of 32 (GGUF IQ4_NL)"),
    [LLM_TYPE_IQ4_XS] = Q("iq4_xs", 256, 136, 0, 23, "4-bit non-linear, 8 x 6-bit scale per 256 (GGUF IQ4_XS)"),
};

int llm_type_whole_blocks(enum llm_type t)
{
    return t >= LLM_TYPE_Q5_0 && t < LLM_TYPE_COUNT_;
}

const struct llm_type_traits *llm_type_traits(uint32_t t)
{
    if (t >= LLM_TYPE_COUNT_ || !table[t].name)
        return NULL;
    return &table[t];
}

const char *llm_type_name(uint32_t t)
{
    const struct llm_type_traits *tr = llm_type_traits(t);
    return tr ? tr->name : "?";
}

static const struct { const char *alias; enum llm_type t; } aliases[] = {
    { "q8_g32", LLM_TYPE_Q8_0 },  { "q4_g32", LLM_TYPE_Q4_0 },
    { "q4z_g32", LLM_TYPE_Q4_1 }, { "fp8", LLM_TYPE_FP8_E4M3 },
};

const char *llm_type_names(void)
{
    static char buf[512];
    if (!buf[0]) {
        size_t n = 0;
        for (uint32_t t = 0; t < LLM_TYPE_COUNT_; t++) {
            if (!table[t].name || table[t].is_aux)
                continue;
            n += (size_t)snprintf(buf + n, sizeof buf - n, "%s%s", n ? ", " : "", table[t].name);
        }
    }
    return buf;
}

llm_status llm_type_parse(const char *name, enum llm_type *out)
{
    for (uint32_t t = 0; t < LLM_TYPE_COUNT_; t++)
        if (table[t].name && !table[t].is_aux && strcasecmp(name, table[t].name) == 0) {
            *out = (enum llm_type)t;
            return LLM_OK;
        }
    for (size_t i = 0; i < sizeof aliases / sizeof aliases[0]; i++)
        if (strcasecmp(name, aliases[i].alias) == 0) {
            *out = aliases[i].t;
            return LLM_OK;
        }
    return llm_error_set(LLM_E_INVALID, "unknown type '%s' (types: %s)", name, llm_type_names());
}

uint64_t llm_type_row_bytes(enum llm_type t, uint64_t ne0)
{
    const struct llm_type_traits *tr = llm_type_traits(t);
    if (!tr)
        return 0;
    if (ne0 > ((uint64_t)1 << 62))
        return 0;
    if (llm_type_whole_blocks(t) && ne0 % tr->blck)
        return 0;
    uint64_t nb = (ne0 + tr->blck - 1) / tr->blck, bytes;
    if (!llm_mul_ok(nb, tr->block_bytes, &bytes) || !llm_add_ok(bytes, tr->row_header, &bytes))
        return 0;
    return bytes;
}

llm_status llm_type_tensor_bytes(enum llm_type t, uint32_t n_dims, const int64_t *ne, uint64_t *out)
{
    if (!llm_type_traits(t))
        return llm_error_set(LLM_E_FORMAT, "unknown tensor type %u", (unsigned)t);
    if (n_dims < 1 || n_dims > 4)
        return llm_error_set(LLM_E_FORMAT, "bad number of dimensions %u", n_dims);
    uint64_t rows = 1;
    for (uint32_t i = 0; i < n_dims; i++) {
        /* every dimension must be positive and the element count must fit
           in 2^53 (so that it is exact in a double and in int64 arithmetic) */
        if (ne[i] <= 0 || ne[i] > ((int64_t)1 << 53))
            return llm_error_set(LLM_E_FORMAT, "bad dimension %lld", (long long)ne[i]);
        if (i > 0 && !llm_mul_ok(rows, (uint64_t)ne[i], &rows))
            return llm_error_set(LLM_E_FORMAT, "shape overflows");
    }
    uint64_t elems;
    if (!llm_mul_ok(rows, (uint64_t)ne[0], &elems) || elems > ((uint64_t)1 << 53))
        return llm_error_set(LLM_E_FORMAT, "shape overflows");
    if (llm_type_whole_blocks(t) && ne[0] % llm_type_traits(t)->blck)
        return llm_error_set(LLM_E_FORMAT, "rows of %lld elements are not whole %u-element blocks "
                             "of %s", (long long)ne[0], llm_type_traits(t)->blck, llm_type_name(t));
    uint64_t rb = llm_type_row_bytes(t, (uint64_t)ne[0]);
    if (!rb || !llm_mul_ok(rb, rows, out))
        return llm_error_set(LLM_E_FORMAT, "shape overflows");
    return LLM_OK;
}

double llm_type_bpw(enum llm_type t, uint64_t ne0)
{
    if (!ne0)
        return 0;
    return 8.0 * (double)llm_type_row_bytes(t, ne0) / (double)ne0;
}

int llm_type_from_ggml(uint32_t g)
{
    for (uint32_t t = 0; t < LLM_TYPE_COUNT_; t++)
        if (table[t].name && table[t].ggml_type >= 0 && (uint32_t)table[t].ggml_type == g)
            return (int)t;
    return -1;
}
