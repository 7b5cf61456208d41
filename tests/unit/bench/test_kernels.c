/* test_kernels.c: llm-bench --kernels: the shapes, the cost and figure
 * arithmetic against hand-computed values, the reference attention loop on
 * distributions worked out by hand, a small run end to end and its printers
 * (read back with jansson). */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../../lib/bench/bench.h"
#include "../../../lib/common/alloc.h"
#include "../../../lib/common/fp16.h"
#include "../../../lib/ops/matmul.h"
#include "../helpers.h"

Test(kernels, shapes_of_a_model)
{
    struct llm_bench_kshape s[LLM_BENCH_N_KSHAPES];
    /* stories15M: dim 288, hidden 768, vocab 32000 */
    cr_assert_eq(llm_bench_kernel_shapes(s, 288, 768, 32000), LLM_OK);
    cr_assert_str_eq(s[0].name, "attn");
    cr_assert(s[0].rows == 288 && s[0].ne0 == 288);
    cr_assert_str_eq(s[1].name, "ffn_up");
    cr_assert(s[1].rows == 768 && s[1].ne0 == 288);
    cr_assert_str_eq(s[2].name, "ffn_down");
    cr_assert(s[2].rows == 288 && s[2].ne0 == 768);
    cr_assert_str_eq(s[3].name, "output");
    cr_assert(s[3].rows == 32000 && s[3].ne0 == 288);
    cr_assert_eq(llm_bench_kernel_shapes(s, 288, 0, 32000), LLM_E_INVALID);
    /* the defaults are stories110m's */
    cr_assert(LLM_BENCH_KDEF_DIM == 768 && LLM_BENCH_KDEF_FFN == 2048 && LLM_BENCH_KDEF_VOCAB == 32000);
}

Test(kernels, type_lists)
{
    enum llm_type t[LLM_BENCH_MAX_LIST];
    size_t n;
    cr_assert_eq(llm_bench_parse_types(LLM_BENCH_KTYPES_DEFAULT, t, LLM_BENCH_MAX_LIST, &n), LLM_OK);
    cr_assert_eq(n, 11);
    const enum llm_type want[] = { LLM_TYPE_F32, LLM_TYPE_F16, LLM_TYPE_BF16, LLM_TYPE_Q8_0,
                                   LLM_TYPE_Q4_0, LLM_TYPE_Q4_1, LLM_TYPE_Q8_G128, LLM_TYPE_Q4_G128,
                                   LLM_TYPE_Q4Z_G128, LLM_TYPE_NF4, LLM_TYPE_FP8_E4M3 };
    for (size_t i = 0; i < n; i++)
        cr_assert_eq(t[i], want[i], "item %zu", i);
    cr_assert_eq(llm_bench_parse_types("q4_0", t, 4, &n), LLM_OK);
    cr_assert(n == 1 && t[0] == LLM_TYPE_Q4_0);
    cr_assert_eq(llm_bench_parse_types("q4_0,,f32", t, 4, &n), LLM_E_INVALID);
    cr_assert_eq(llm_bench_parse_types("q4_0,q5_z", t, 4, &n), LLM_E_INVALID);
    cr_assert_eq(llm_bench_parse_types("u8", t, 4, &n), LLM_E_INVALID);
    cr_assert_eq(llm_bench_parse_types("f32,f16,bf16", t, 2, &n), LLM_E_INVALID);
}

Test(kernels, cost_arithmetic)
{
    uint64_t b;
    double f;
    /* q4_0: 18 bytes per 32 weights; 64 x 64 = 128 blocks */
    cr_assert_eq(llm_bench_product_cost(LLM_TYPE_Q4_0, 64, 64, 1, &b, &f), LLM_OK);
    cr_assert_eq(b, 2304);
    cr_assert_float_eq(f, 8192.0, 0);
    cr_assert_eq(llm_bench_product_cost(LLM_TYPE_F32, 32000, 768, 128, &b, &f), LLM_OK);
    cr_assert_eq(b, 98304000);
    cr_assert_float_eq(f, 2.0 * 32000 * 768 * 128, 0);
    cr_assert_eq(llm_bench_product_cost(LLM_TYPE_F32, 0, 768, 1, &b, &f), LLM_E_INVALID);
    /* K and V of 512 tokens x 4 KV heads x 64 floats (fp16: half); 12 query heads */
    llm_bench_attn_cost(512, 12, 4, 64, sizeof(float), &b, &f);
    cr_assert_eq(b, 1048576);
    cr_assert_float_eq(f, 4.0 * 12 * 512 * 64, 0);
    llm_bench_attn_cost(512, 12, 4, 64, sizeof(uint16_t), &b, &f);
    cr_assert_eq(b, 524288);
}

Test(kernels, figures)
{
    struct llm_bench_kresult r = { .bytes = 2000000000u, .flops = 3e9, .roof_gbs = 4, .roof_gflops = 0 };
    r.ns.mean = 1e9; /* one second */
    llm_bench_kernel_figures(&r);
    cr_assert_float_eq(r.gbs, 2.0, 1e-12);
    cr_assert_float_eq(r.gbs_pct, 50.0, 1e-9);
    cr_assert_float_eq(r.gflops, 3.0, 1e-12);
    cr_assert_float_eq(r.gflops_pct, 0.0, 0);
    r.ns.mean = 5e5, r.roof_gflops = 12000;
    llm_bench_kernel_figures(&r);
    cr_assert_float_eq(r.gbs, 4000.0, 1e-9);
    cr_assert_float_eq(r.gflops_pct, 50.0, 1e-9);
}

Test(kernels, attention_by_hand)
{
    /* one head, head_dim 1: scores 0 and ln 3 give weights 1/4, 3/4 */
    float q[2] = { 1, 0 }, K[2] = { 0, logf(3) }, V[2] = { 4, 8 }, o[2], sc[4];
    llm_bench_attention(q, K, V, o, sc, 2, 1, 1, 1, 0, 1);
    cr_assert_float_eq(o[0], 7.0f, 1e-5);
    /* two query heads on one KV head (GQA): head 1 has q = 0, equal weights */
    llm_bench_attention(q, K, V, o, sc, 2, 2, 1, 1, 0, 2);
    cr_assert_float_eq(o[0], 7.0f, 1e-5);
    cr_assert_float_eq(o[1], 6.0f, 1e-5);
    /* head_dim 4: the dot product is scaled by 1/2 */
    float q4[4] = { 1, 1, 1, 1 }, K4[8] = { 0 }, V4[8] = { 4, 0, 0, 0, 8, 0, 0, 1 }, o4[4], sc4[2];
    for (int i = 0; i < 4; i++)
        K4[4 + i] = logf(3) / 2;
    llm_bench_attention(q4, K4, V4, o4, sc4, 2, 1, 1, 4, 0, 1);
    cr_assert_float_eq(o4[0], 7.0f, 1e-5);
    cr_assert_float_eq(o4[3], 0.75f, 1e-6);
}

/* The kernels the benchmark times against the reference loop on the same
 * fp16 values: 3 query heads on each of 2 KV heads, 37 positions (two full
 * KV blocks and a partial one), head size 64. */
Test(kernels, attention_kernels_match_the_reference_loop)
{
    enum { C = 37, HQ = 6, HK = 2, D = 64 };
    static float q[HQ * D], Kf[C * HK * D], Vf[C * HK * D], ref[HQ * D], got[HQ * D], sc[HQ * C];
    static uint16_t K[C * HK * D], V[C * HK * D];
    uint32_t x = 12345;
    for (int i = 0; i < C * HK * D; i++) {
        x = x * 1664525u + 1013904223u;
        K[i] = llm_fp32_to_fp16((float)(x >> 8) / 16777216.0f * 2 - 1);
        x = x * 1664525u + 1013904223u;
        V[i] = llm_fp32_to_fp16((float)(x >> 8) / 16777216.0f * 2 - 1);
        Kf[i] = llm_fp16_to_fp32(K[i]), Vf[i] = llm_fp16_to_fp32(V[i]);
    }
    for (int i = 0; i < HQ * D; i++) {
        x = x * 1664525u + 1013904223u;
        q[i] = (float)(x >> 8) / 16777216.0f * 4 - 2;
    }
    llm_bench_attention(q, Kf, Vf, ref, sc, C, HQ, HK, D, 0, HQ);
    llm_bench_attention_kernels(q, K, V, got, sc, C, HQ, HK, D, 0, 3);
    llm_bench_attention_kernels(q, K, V, got, sc, C, HQ, HK, D, 3, HQ);
    for (int i = 0; i < HQ * D; i++)
        cr_assert(fabsf(got[i] - ref[i]) <= 1e-5f * (1 + fabsf(ref[i])), "element %d: %.9g vs %.9g", i,
                  got[i], ref[i]);
}

static const int threads[2] = { 1, 2 };
static const double roof_bw[2] = { 10, 20 }, roof_fl[2] = { 100, 200 };

static void small_run(struct llm_bench_kresult **r, size_t *n)
{
    struct llm_bench_kspec k = { .n_types = 2, .threads = threads, .roof_gbs = roof_bw, .roof_gflops = roof_fl,
                                 .n_threads = 2, .reps = 2, .warmup = 0, .nb = 4, .n_ctx = 16,
                                 .n_heads = 2, .n_kv_heads = 1, .head_dim = 4 };
    k.types[0] = LLM_TYPE_F32, k.types[1] = LLM_TYPE_Q4_0;
    cr_assert_eq(llm_bench_kernel_shapes(k.shapes, 32, 64, 48), LLM_OK);
    cr_assert_eq(llm_bench_kernels(&k, r, n), LLM_OK);
}

Test(kernels, small_run)
{
    struct llm_bench_kresult *r;
    size_t n;
    small_run(&r, &n);
    /* 2 types x 4 shapes x 2 thread counts x (matvec, matmul), then attn at each thread count */
    cr_assert_eq(n, 34);
    cr_assert_str_eq(r[0].kernel, "matvec");
    cr_assert_str_eq(r[0].type, llm_x16_enabled() ? "f32/x16" : "f32");
    cr_assert_str_eq(r[0].shape, "attn");
    cr_assert(r[0].rows == 32 && r[0].cols == 32 && r[0].batch == 1 && r[0].n_threads == 1);
    cr_assert_eq(r[0].bytes, 32 * 32 * 4);
    cr_assert_str_eq(r[1].kernel, "matmul");
    cr_assert(r[1].batch == 4 && r[1].flops == 2.0 * 32 * 32 * 4);
    cr_assert(r[2].n_threads == 2 && r[2].roof_gbs == 20 && r[2].roof_gflops == 200);
    cr_assert_str_eq(r[8 * 2 - 2].shape, "output");
    /* f32 and q4_0 in the layout llm-run gives them (every shape here is whole groups of 16 rows) */
    cr_assert_str_eq(r[16].type, llm_x16_enabled() ? "q4_0/x16" : "q4_0");
    cr_assert_eq(r[16].bytes, 32 * 18);
    for (size_t i = 0; i < n; i++) {
        cr_assert(r[i].reps == 2 && r[i].ns.n == 2 && r[i].samples_ns[0] > 0);
        cr_assert_float_eq(r[i].gbs, (double)r[i].bytes / r[i].ns.mean, 1e-9 * r[i].gbs);
        cr_assert_float_eq(r[i].gbs_pct, 100 * r[i].gbs / r[i].roof_gbs, 1e-9 * r[i].gbs_pct);
    }
    cr_assert_str_eq(r[32].kernel, "attn");
    cr_assert(r[32].rows == 16 && r[32].cols == 4 && r[32].batch == 2 && r[32].n_kv_heads == 1);
    cr_assert_eq(r[33].bytes, 2 * 16 * 1 * 4 * 2); /* fp16 K and V */
    cr_assert_str_eq(r[33].type, "f16");
    for (size_t i = 0; i < n; i++)
        llm_bench_kresult_release(&r[i]);
    llm_free(r);
}

Test(kernels, printers)
{
    struct llm_bench_kresult *r;
    size_t n;
    small_run(&r, &n);
    struct llm_bench_header h = { .bw_measured = 0, .peak_measured = 1 };
    snprintf(h.isa, sizeof h.isa, "avx2");
    char *buf;
    size_t len;
    FILE *f = open_memstream(&buf, &len);
    cr_assert_eq(llm_bench_kprint(f, LLM_BENCH_JSON, &h, r, n), LLM_OK);
    fclose(f);
    json_error_t e;
    json_t *a = json_loads(buf, 0, &e);
    cr_assert(json_is_array(a) && json_array_size(a) == n, "%s", e.text);
    json_t *o = json_array_get(a, 17);
    cr_assert_str_eq(json_string_value(json_object_get(o, "kernel")), "matmul");
    cr_assert_str_eq(json_string_value(json_object_get(o, "type")),
                     llm_x16_enabled() ? "q4_0/x16" : "q4_0");
    cr_assert_str_eq(json_string_value(json_object_get(o, "isa")), "avx2");
    cr_assert_str_eq(json_string_value(json_object_get(o, "roofline_bandwidth_source")), "user");
    cr_assert_eq(json_integer_value(json_object_get(o, "batch")), 4);
    cr_assert_eq(json_array_size(json_object_get(o, "samples_ns")), 2);
    cr_assert_float_eq(json_number_value(json_object_get(o, "gflops")), r[17].gflops, 1e-5 * r[17].gflops);
    json_decref(a);
    free(buf);
    f = open_memstream(&buf, &len);
    cr_assert_eq(llm_bench_kprint(f, LLM_BENCH_CSV, &h, r, n), LLM_OK);
    fclose(f);
    const char *head = "build_version,build_commit,cpu_info,cpu_features,n_cpus,isa,";
    cr_assert(strncmp(buf, head, strlen(head)) == 0);
    size_t lines = 0;
    for (char *p = buf; *p; p++)
        lines += *p == '\n';
    cr_assert_eq(lines, n + 1);
    free(buf);
    f = open_memstream(&buf, &len);
    cr_assert_eq(llm_bench_kprint(f, LLM_BENCH_MD, &h, r, n), LLM_OK);
    fclose(f);
    cr_assert(strstr(buf, "| kernel | type | shape | rows x cols | batch | threads |"));
    cr_assert(strstr(buf, llm_x16_enabled() ? "| matvec | q4_0/x16 | output | 48 x 32 | 1 | 2 |"
                                            : "| matvec | q4_0 | output | 48 x 32 | 1 | 2 |"));
    cr_assert(strstr(buf, "| attn | f16 | attn | 16 x 4 | 2 | 1 |"));
    free(buf);
    for (size_t i = 0; i < n; i++)
        llm_bench_kresult_release(&r[i]);
    llm_free(r);
}
