/* test_safetensors.c: the safetensors reader and writer: a round trip
 * checked against an independent parse of the written bytes (jansson), and
 * hand-built malformed files that must fail with LLM_E_FORMAT naming the
 * file. */
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "../../../lib/common/alloc.h"
#include "../../../lib/common/fp16.h"
#include "../../../lib/common/io.h"
#include "../../../lib/format/file.h"
#include "../../../lib/format/hf.h"
#include "../../../lib/format/import.h"
#include "../../../lib/format/meta.h"
#include "../helpers.h"

#define NAME "bad.safetensors"

/* A safetensors image: 8-byte length (hlen, or strlen(json) when ~0), the
 * header, then `nbuf` bytes of buffer (values 0, 1, 2, ...). */
static uint8_t *image(const char *json, uint64_t hlen, size_t nbuf, size_t *size)
{
    size_t jl = strlen(json);
    if (hlen == UINT64_MAX)
        hlen = jl;
    *size = 8 + jl + nbuf;
    uint8_t *b = malloc(*size);
    cr_assert(b);
    for (int i = 0; i < 8; i++)
        b[i] = (uint8_t)(hlen >> (8 * i));
    memcpy(b + 8, json, jl);
    for (size_t i = 0; i < nbuf; i++)
        b[8 + jl + i] = (uint8_t)i;
    return b;
}

/* Parse the image and expect failure `want` with both substrings in the detail. */
static void expect_fail(const char *json, uint64_t hlen, size_t nbuf, llm_status want,
                        const char *sub1, const char *sub2)
{
    size_t size;
    uint8_t *b = image(json, hlen, nbuf, &size);
    struct llm_file *f = (struct llm_file *)1;
    llm_error_clear();
    llm_status s = llm_safetensors_parse(&f, b, size, NAME, NULL);
    const char *d = llm_error_detail(s);
    cr_expect_eq(s, want, "status %d for %s (detail: %s)", s, json, d);
    cr_expect_null(f, "no file on failure");
    cr_expect(strncmp(d, NAME ": ", strlen(NAME) + 2) == 0, "detail names the file: %s", d);
    cr_expect(strstr(d, sub1), "detail '%s' lacks '%s'", d, sub1);
    if (sub2)
        cr_expect(strstr(d, sub2), "detail '%s' lacks '%s'", d, sub2);
    free(b);
}

Test(safetensors, write_then_read_round_trip)
{
    struct llm_file *f;
    cr_assert_eq(llm_file_new(&f, "mem", "synthetic"), LLM_OK);
    static float a[6] = { 1.5f, -2.0f, 3.25f, 0.0f, -0.125f, 1e-3f };
    static uint16_t b[4], c[8];
    for (int i = 0; i < 4; i++)
        b[i] = llm_fp32_to_fp16((float)i - 1.5f);
    for (int i = 0; i < 8; i++)
        c[i] = llm_fp32_to_bf16((float)i * 0.3f);
    int64_t ne_a[2] = { 3, 2 }, ne_b[1] = { 4 }, ne_c[3] = { 2, 2, 2 };
    cr_assert_eq(llm_file_add_tensor(f, "z.a", LLM_TYPE_F32, 2, ne_a, a, NULL), LLM_OK);
    cr_assert_eq(llm_file_add_tensor(f, "b", LLM_TYPE_F16, 1, ne_b, b, NULL), LLM_OK);
    cr_assert_eq(llm_file_add_tensor(f, "a", LLM_TYPE_BF16, 3, ne_c, c, NULL), LLM_OK);
    cr_assert_eq(llm_meta_set_str(f->meta, "safetensors.note", "hello"), LLM_OK);
    char path[512];
    snprintf(path, sizeof path, "%s/t.safetensors", llm_test_tmpdir());
    cr_assert_eq(llm_safetensors_write(f, path), LLM_OK, "%s", llm_error_detail(-1));

    /* The bytes, read independently. */
    char *raw;
    size_t len;
    cr_assert_eq(llm_read_file(path, 1 << 20, &raw, &len), LLM_OK);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--)
        hlen = hlen << 8 | (uint8_t)raw[i];
    cr_expect_eq(hlen % 8, 0, "header padded to 8: %llu", (unsigned long long)hlen);
    cr_expect_eq(raw[8], '{');
    cr_expect_eq(len, 8 + hlen + 24 + 8 + 16);
    json_error_t err;
    json_t *h = json_loadb(raw + 8, hlen, 0, &err);
    cr_assert(h, "header JSON: %s", err.text);
    json_t *ta = json_object_get(h, "z.a");
    cr_expect_str_eq(json_string_value(json_object_get(ta, "dtype")), "F32");
    json_t *sh = json_object_get(ta, "shape");
    cr_expect_eq(json_array_size(sh), 2);
    cr_expect_eq(json_integer_value(json_array_get(sh, 0)), 2, "PyTorch order [out, in]");
    cr_expect_eq(json_integer_value(json_array_get(sh, 1)), 3);
    /* F32 first (larger elements), then by name: "z.a", then "a", "b". */
    json_t *offs = json_object_get(ta, "data_offsets");
    cr_expect_eq(json_integer_value(json_array_get(offs, 0)), 0);
    cr_expect_eq(json_integer_value(json_array_get(offs, 1)), 24);
    offs = json_object_get(json_object_get(h, "a"), "data_offsets");
    cr_expect_eq(json_integer_value(json_array_get(offs, 0)), 24);
    cr_expect_eq(json_integer_value(json_array_get(offs, 1)), 40);
    cr_expect_str_eq(json_string_value(json_object_get(json_object_get(h, "b"), "dtype")), "F16");
    json_t *md = json_object_get(h, "__metadata__");
    cr_expect_str_eq(json_string_value(json_object_get(md, "format")), "pt");
    cr_expect_str_eq(json_string_value(json_object_get(md, "note")), "hello");
    cr_expect_eq(memcmp(raw + 8 + hlen, a, 24), 0);
    cr_expect_eq(memcmp(raw + 8 + hlen + 24, c, 16), 0);
    cr_expect_eq(memcmp(raw + 8 + hlen + 40, b, 8), 0);
    json_decref(h);
    llm_free(raw);

    /* And our reader. */
    struct llm_file *g;
    cr_assert_eq(llm_safetensors_open(&g, path, NULL), LLM_OK, "%s", llm_error_detail(-1));
    cr_expect_str_eq(g->format, "safetensors");
    cr_expect_eq(g->n_tensors, 3);
    cr_expect_str_eq(g->tensors[0].name, "z.a", "file order");
    struct llm_tensor *t = llm_file_find(g, "z.a");
    cr_assert(t);
    cr_expect_eq(t->type, LLM_TYPE_F32);
    cr_expect_eq(t->n_dims, 2);
    cr_expect_eq(t->ne[0], 3);
    cr_expect_eq(t->ne[1], 2);
    cr_expect(t->data, "aligned data is used in place");
    cr_expect_eq(memcmp(t->data, a, 24), 0);
    t = llm_file_find(g, "a");
    cr_assert(t);
    cr_expect_eq(t->type, LLM_TYPE_BF16);
    cr_expect_eq(t->n_dims, 3);
    cr_expect_eq(memcmp(t->data, c, 16), 0);
    t = llm_file_find(g, "b");
    cr_assert(t);
    cr_expect_eq(t->type, LLM_TYPE_F16);
    cr_expect_eq(memcmp(t->data, b, 8), 0);
    const char *note;
    cr_expect_eq(llm_meta_get_str(g->meta, "safetensors.note", &note), LLM_OK);
    cr_expect_str_eq(note, "hello");
    cr_expect_eq(llm_meta_get_str(g->meta, "safetensors.format", &note), LLM_OK);
    cr_expect_str_eq(note, "pt");
    llm_file_free(g);
    llm_file_free(f);
}

Test(safetensors, unaligned_data_is_copied_on_demand)
{
    /* Header of 9 bytes + 8: the buffer starts at offset 17 (odd). */
    const char *json = "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";
    size_t size;
    uint8_t *b = image(json, UINT64_MAX, 8, &size);
    /* make the data two known floats */
    float v[2] = { 3.5f, -7.25f };
    size_t jl = strlen(json);
    memcpy(b + 8 + jl, v, 8);
    cr_assert((8 + jl) % 4 != 0, "the test needs an unaligned buffer");
    struct llm_file *f;
    cr_assert_eq(llm_safetensors_parse(&f, b, size, "u.safetensors", NULL), LLM_OK, "%s",
                 llm_error_detail(-1));
    struct llm_tensor *t = llm_file_find(f, "w");
    cr_assert(t);
    cr_expect_null(t->data, "an unaligned tensor is not handed out as a float pointer");
    float got[2];
    cr_assert_eq(llm_tensor_read(f, t, got), LLM_OK);
    cr_expect_eq(got[0], 3.5f);
    cr_expect_eq(got[1], -7.25f);
    llm_file_free(f);
    free(b);
}

Test(safetensors, scalar_and_padding)
{
    /* A scalar (shape []) and a header padded with spaces. */
    const char *json = "{\"s\":{\"dtype\":\"F16\",\"shape\":[],\"data_offsets\":[0,2]}}     ";
    size_t size;
    uint8_t *b = image(json, UINT64_MAX, 2, &size);
    struct llm_file *f;
    cr_assert_eq(llm_safetensors_parse(&f, b, size, "s.safetensors", NULL), LLM_OK, "%s",
                 llm_error_detail(-1));
    struct llm_tensor *t = llm_file_find(f, "s");
    cr_assert(t);
    cr_expect_eq(t->n_dims, 1);
    cr_expect_eq(t->ne[0], 1);
    llm_file_free(f);
    free(b);
}

Test(safetensors, bad_headers)
{
    size_t size;
    uint8_t *b = image("", 0, 0, &size);
    struct llm_file *f;
    cr_expect_eq(llm_safetensors_parse(&f, b, 5, NAME, NULL), LLM_E_FORMAT, "truncated length");
    cr_expect(strstr(llm_error_detail(-3), "too short"));
    free(b);
    expect_fail("{}", (uint64_t)1 << 63, 0, LLM_E_FORMAT, "header length", "limit");
    expect_fail("{}", 100000001, 0, LLM_E_FORMAT, "limit", NULL);
    expect_fail("{}", 1000, 0, LLM_E_FORMAT, "past end of file", NULL);
    expect_fail("[]", UINT64_MAX, 0, LLM_E_FORMAT, "does not start with '{'", NULL);
    expect_fail("{\"w\": {\"dtype\": \"F32\",", UINT64_MAX, 0, LLM_E_FORMAT, "header JSON", NULL);
    expect_fail("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                "\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
                UINT64_MAX, 8, LLM_E_FORMAT, "header JSON", "duplicate");
    expect_fail("{\"__metadata__\":{\"format\":1}}", UINT64_MAX, 0, LLM_E_FORMAT,
                "__metadata__", "not a string");
    expect_fail("{\"w\":[1,2]}", UINT64_MAX, 0, LLM_E_FORMAT, "'w'", "not an object");
    expect_fail("{\"w\":{\"shape\":[1],\"data_offsets\":[0,4]}}", UINT64_MAX, 4, LLM_E_FORMAT,
                "'w'", "dtype");
    expect_fail("{\"w\":{\"dtype\":\"F31\",\"shape\":[1],\"data_offsets\":[0,4]}}", UINT64_MAX, 4,
                LLM_E_FORMAT, "unknown dtype 'F31'", NULL);
    expect_fail("{\"w\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", UINT64_MAX,
                4, LLM_E_FORMAT, "'w'", "bad dimension");
    expect_fail("{\"w\":{\"dtype\":\"F32\",\"shape\":[1099511627776,1099511627776],"
                "\"data_offsets\":[0,4]}}",
                UINT64_MAX, 4, LLM_E_FORMAT, "'w'", "overflows");
    expect_fail("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4]}}", UINT64_MAX, 4,
                LLM_E_FORMAT, "'w'", "data_offsets");
    expect_fail("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,0]}}", UINT64_MAX,
                4, LLM_E_FORMAT, "'w'", "bad data_offsets");
    expect_fail("{\"w\":{\"dtype\":\"F4\",\"shape\":[3],\"data_offsets\":[0,1]}}", UINT64_MAX, 1,
                LLM_E_FORMAT, "'w'", "whole number of bytes");
}

Test(safetensors, bad_offsets)
{
    /* offsets past the end of the file */
    expect_fail("{\"w\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", UINT64_MAX,
                8, LLM_E_FORMAT, "'w'", "past end of file");
    /* dtype and shape disagree with the byte count */
    expect_fail("{\"w\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", UINT64_MAX, 8,
                LLM_E_FORMAT, "'w'", "need 12");
    expect_fail("{\"w\":{\"dtype\":\"BF16\",\"shape\":[2,2],\"data_offsets\":[0,16]}}",
                UINT64_MAX, 16, LLM_E_FORMAT, "'w'", "need 8");
    /* overlapping tensors */
    expect_fail("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
                UINT64_MAX, 12, LLM_E_FORMAT, "'b' overlaps tensor 'a'", NULL);
    /* the same range twice */
    expect_fail("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}",
                UINT64_MAX, 8, LLM_E_FORMAT, "overlaps", NULL);
    /* a hole between tensors */
    expect_fail("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}",
                UINT64_MAX, 12, LLM_E_FORMAT, "'b'", "unused bytes");
    /* bytes left over after the last tensor */
    expect_fail("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", UINT64_MAX, 8,
                LLM_E_FORMAT, "byte buffer has 8 bytes but the tensors cover 4", NULL);
}

Test(safetensors, other_dtypes_refused_naming_the_tensor)
{
    expect_fail("{\"ids\":{\"dtype\":\"I64\",\"shape\":[2],\"data_offsets\":[0,16]}}", UINT64_MAX,
                16, LLM_E_UNSUPPORTED, "'ids'", "dtype I64");
    expect_fail("{\"q\":{\"dtype\":\"F8_E4M3\",\"shape\":[2],\"data_offsets\":[0,2]}}", UINT64_MAX,
                2, LLM_E_UNSUPPORTED, "'q'", "F8_E4M3");
    expect_fail("{\"q\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1],\"data_offsets\":[0,4]}}",
                UINT64_MAX, 4, LLM_E_UNSUPPORTED, "'q'", "5 dimensions");
}

Test(safetensors, every_truncation_fails_cleanly)
{
    /* A valid two-tensor file, then each of its proper prefixes. */
    const char *json = "{\"__metadata__\":{\"format\":\"pt\"},"
                       "\"a\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]},"
                       "\"b\":{\"dtype\":\"F16\",\"shape\":[3],\"data_offsets\":[16,22]}}";
    size_t size;
    uint8_t *b = image(json, UINT64_MAX, 22, &size);
    struct llm_file *f;
    cr_assert_eq(llm_safetensors_parse(&f, b, size, NAME, NULL), LLM_OK, "%s",
                 llm_error_detail(-1));
    cr_expect_eq(f->n_tensors, 2);
    llm_file_free(f);
    for (size_t n = 0; n < size; n++) {
        llm_status s = llm_safetensors_parse(&f, b, n, NAME, NULL);
        cr_expect_eq(s, LLM_E_FORMAT, "prefix of %zu bytes: status %d", n, s);
        cr_expect(strncmp(llm_error_detail(s), NAME, strlen(NAME)) == 0);
    }
    free(b);
}

Test(safetensors, writer_refuses_quantized_tensors)
{
    struct llm_file *f;
    cr_assert_eq(llm_file_new(&f, "mem", "synthetic"), LLM_OK);
    static uint8_t q[34];
    int64_t ne = 32;
    cr_assert_eq(llm_file_add_tensor(f, "q", LLM_TYPE_Q8_0, 1, &ne, q, NULL), LLM_OK);
    char path[512];
    snprintf(path, sizeof path, "%s/q.safetensors", llm_test_tmpdir());
    llm_status s = llm_safetensors_write(f, path);
    cr_expect_eq(s, LLM_E_UNSUPPORTED);
    cr_expect(strstr(llm_error_detail(s), "'q'"));
    cr_expect_neq(access(path, F_OK), 0, "nothing left under the target name");
    llm_file_free(f);
}
