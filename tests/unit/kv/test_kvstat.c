/* test_kvstat.c: KV-cache arithmetic against published and hand-computed
 * figures; loaders of presets, config.json, model metadata and lengths. */
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../../lib/common/alloc.h"
#include "../../../lib/format/meta.h"
#include "../../../lib/kv/kvstat.h"
#include "../helpers.h"

static struct llm_kvstat_report report(const char *preset, enum llm_kvstat_type t, int64_t ctx)
{
    struct llm_kvstat_shape s;
    struct llm_kvstat_params p;
    struct llm_kvstat_report r;
    cr_assert_eq(llm_kvstat_preset(&s, preset), LLM_OK, "%s", preset);
    llm_kvstat_params_default(&p);
    p.type = t;
    p.ctx = ctx;
    cr_assert_eq(llm_kvstat_compute(&r, &s, &p, NULL, 0), LLM_OK, "%s", llm_error_detail(-1));
    return r;
}

/* serving.md section 4: published figures (llama.cpp logs, vLLM paper). */
Test(kvstat, published_bytes_per_token)
{
    struct llm_kvstat_report r = report("llama-2-7b", LLM_KVSTAT_F16, 4096);
    cr_assert_eq(r.bytes_per_token, 524288);
    cr_assert_eq(r.bytes_per_sequence, 2147483648ull); /* 2 GiB at 4096 */
    cr_assert_eq(r.bytes_per_token_layer, 16384);
    cr_assert_eq(r.bytes_per_token_mha, 524288);
    cr_assert_float_eq(r.gqa_factor, 1.0, 1e-12);

    r = report("llama-2-70b", LLM_KVSTAT_F16, 4096);
    cr_assert_eq(r.bytes_per_token, 327680);
    cr_assert_eq(r.bytes_per_sequence, 1342177280ull); /* llama.cpp log: 1280 MiB at 4096 cells */
    cr_assert_eq(r.bytes_per_token_mha, 2621440);      /* 2560 KiB: GQA-8 saves 8x */
    cr_assert_float_eq(r.gqa_factor, 8.0, 1e-12);

    r = report("llama-3-8b", LLM_KVSTAT_F16, 0);
    cr_assert_eq(r.bytes_per_token, 131072);
    cr_assert_eq(r.params.ctx, 8192); /* the trained context by default */
    cr_assert_float_eq(r.gqa_factor, 4.0, 1e-12);

    /* OPT-13B / Llama-2-13B: 800 KB per token in the PagedAttention paper */
    cr_assert_eq(report("llama-2-13b", LLM_KVSTAT_F16, 0).bytes_per_token, 819200);
    cr_assert_eq(report("llama-3-70b", LLM_KVSTAT_F16, 0).bytes_per_token, 327680);
    cr_assert_eq(report("mistral-7b", LLM_KVSTAT_F16, 0).bytes_per_token, 131072);
    /* 2 x 28 x 4 x 128 x 2 and 2 x 30 x 3 x 64 x 2 */
    cr_assert_eq(report("qwen2-7b", LLM_KVSTAT_F16, 0).bytes_per_token, 57344);
    cr_assert_eq(report("smollm2-135m", LLM_KVSTAT_F16, 0).bytes_per_token, 23040);
}

Test(kvstat, kv_types_scale_bytes)
{
    cr_assert_eq(report("llama-2-7b", LLM_KVSTAT_F32, 1).bytes_per_token, 1048576);
    cr_assert_eq(report("llama-2-7b", LLM_KVSTAT_BF16, 1).bytes_per_token, 524288);
    cr_assert_eq(report("llama-2-7b", LLM_KVSTAT_FP8, 1).bytes_per_token, 262144);
    cr_assert_eq(report("llama-2-7b", LLM_KVSTAT_INT8, 1).bytes_per_token, 262144);
    struct llm_kvstat_report r = report("llama-3-8b", LLM_KVSTAT_FP8, 1);
    cr_assert_eq(r.bytes_per_token_type[LLM_KVSTAT_F32], 262144);
    cr_assert_eq(r.bytes_per_token_type[LLM_KVSTAT_F16], 131072);
    cr_assert_eq(r.bytes_per_token_type[LLM_KVSTAT_FP8], 65536);
    /* llm-run's q8 and q4: blocks of 32 and their fp16 scale */
    cr_assert_eq(r.bytes_per_token_type[LLM_KVSTAT_Q8], 69632);
    cr_assert_eq(r.bytes_per_token_type[LLM_KVSTAT_Q4], 36864);
    r = report("llama-2-7b", LLM_KVSTAT_Q4, 1);
    cr_assert_eq(r.bytes_per_token, 147456);
    cr_assert_eq(r.type_bytes, 0.5625);
    /* the cache's own arithmetic agrees, block for block */
    const enum llm_kvstat_type kt[] = { LLM_KVSTAT_F32, LLM_KVSTAT_F16, LLM_KVSTAT_BF16,
                                        LLM_KVSTAT_FP8, LLM_KVSTAT_Q8, LLM_KVSTAT_Q4 };
    const enum llm_type lt[] = { LLM_TYPE_F32, LLM_TYPE_F16, LLM_TYPE_BF16, LLM_TYPE_FP8_E4M3,
                                 LLM_TYPE_Q8_0, LLM_TYPE_Q4_0 };
    for (size_t i = 0; i < sizeof kt / sizeof kt[0]; i++) {
        struct llm_kvstat_shape sh;
        struct llm_kvstat_params p;
        llm_kvstat_preset(&sh, "smollm2-135m");
        llm_kvstat_params_default(&p);
        p.type = kt[i], p.ctx = 64;
        cr_assert_eq(llm_kvstat_compute(&r, &sh, &p, NULL, 0), LLM_OK);
        struct llm_kv_params kp;
        llm_kv_params_default(&kp);
        kp.n_layers = (int32_t)sh.n_layers, kp.n_kv_heads = (int32_t)sh.n_kv_heads;
        kp.head_dim = (int32_t)sh.head_dim, kp.block_size = (int32_t)p.block_size;
        kp.max_tokens = 64, kp.type_k = kp.type_v = lt[i];
        cr_assert_eq(llm_kv_block_bytes(&kp), r.bytes_per_block, "%s", llm_kvstat_type_name(kt[i]));
    }
    /* keys and values apart: the mean of the two, as the cache allocates them */
    {
        struct llm_kvstat_shape sh;
        struct llm_kvstat_params p;
        llm_kvstat_preset(&sh, "smollm2-135m");
        llm_kvstat_params_default(&p);
        p.type = LLM_KVSTAT_Q8, p.split_v = 1, p.type_v = LLM_KVSTAT_Q4, p.ctx = 64;
        cr_assert_eq(llm_kvstat_compute(&r, &sh, &p, NULL, 0), LLM_OK);
        cr_assert_eq(r.bytes_per_token, 9360);
        cr_assert_eq(r.type_bytes, 0.8125);
        struct llm_kv_params kp;
        llm_kv_params_default(&kp);
        kp.n_layers = (int32_t)sh.n_layers, kp.n_kv_heads = (int32_t)sh.n_kv_heads;
        kp.head_dim = (int32_t)sh.head_dim, kp.block_size = (int32_t)p.block_size;
        kp.max_tokens = 64, kp.type_k = LLM_TYPE_Q8_0, kp.type_v = LLM_TYPE_Q4_0;
        cr_assert_eq(llm_kv_block_bytes(&kp), r.bytes_per_block);
    }
    /* heads that do not fit the blocks: refused for the type, n/a in the list */
    struct llm_kvstat_shape sh;
    struct llm_kvstat_params p;
    llm_kvstat_preset(&sh, "stories260k");
    llm_kvstat_params_default(&p);
    p.type = LLM_KVSTAT_Q4;
    llm_status st = llm_kvstat_compute(&r, &sh, &p, NULL, 0);
    cr_assert_eq(st, LLM_E_INVALID);
    cr_assert_str_eq(llm_error_detail(st), "a q4 cache stores heads as blocks of 32 elements: "
                     "these have 8");
    p.type = LLM_KVSTAT_F16;
    cr_assert_eq(llm_kvstat_compute(&r, &sh, &p, NULL, 0), LLM_OK);
    cr_assert_eq(r.bytes_per_token_type[LLM_KVSTAT_Q8], 0);
    cr_assert_eq(r.bytes_per_token_type[LLM_KVSTAT_F16], r.bytes_per_token);
}

Test(kvstat, type_names)
{
    enum llm_kvstat_type t;
    cr_assert_eq(llm_kvstat_type_parse("BF16", &t), LLM_OK);
    cr_assert_eq(t, LLM_KVSTAT_BF16);
    cr_assert_eq(llm_kvstat_type_parse("e4m3", &t), LLM_OK);
    cr_assert_eq(t, LLM_KVSTAT_FP8);
    cr_assert_eq(llm_kvstat_type_parse("q4_0", &t), LLM_E_INVALID);
    cr_assert(strstr(llm_error_detail(LLM_E_INVALID), "'q4_0'"));
    cr_assert_str_eq(llm_kvstat_type_name(LLM_KVSTAT_INT8), "int8");
    cr_assert_eq(llm_kvstat_type_bytes32(LLM_KVSTAT_F32), 128);
    cr_assert_eq(llm_kvstat_type_bytes32(LLM_KVSTAT_Q8), 34);
    cr_assert_eq(llm_kvstat_type_bytes32(LLM_KVSTAT_Q4), 18);
}

Test(kvstat, batch_and_block)
{
    struct llm_kvstat_shape s;
    struct llm_kvstat_params p;
    struct llm_kvstat_report r;
    llm_kvstat_preset(&s, "llama-2-7b");
    llm_kvstat_params_default(&p);
    p.ctx = 1000;
    p.batch = 3;
    p.block_size = 32;
    cr_assert_eq(llm_kvstat_compute(&r, &s, &p, NULL, 0), LLM_OK);
    cr_assert_eq(r.bytes_per_sequence, 524288000ull);
    cr_assert_eq(r.bytes_per_batch, 1572864000ull);
    cr_assert_eq(r.bytes_per_block, 16777216ull);
    cr_assert_eq(r.have_capacity, 0);
    cr_assert_eq(r.have_waste, 0);
}

Test(kvstat, capacity_hand_computed)
{
    struct llm_kvstat_shape s;
    struct llm_kvstat_params p;
    struct llm_kvstat_report r;
    llm_kvstat_preset(&s, "llama-3-8b");
    llm_kvstat_params_default(&p);
    p.ctx = 8192;
    p.mem = 80ull << 30;
    p.weights = 16ull << 30;
    cr_assert_eq(llm_kvstat_compute(&r, &s, &p, NULL, 0), LLM_OK);
    cr_assert_eq(r.kv_mem, 64ull << 30);
    cr_assert_eq(r.cap_tokens, 524288);  /* 64 GiB / 128 KiB */
    cr_assert_eq(r.cap_blocks, 32768);   /* / 16 */
    cr_assert_eq(r.cap_seqs_contig, 64); /* / 8192 */
    cr_assert_eq(r.cap_seqs_paged, 64);

    /* stories260k: 2 x 5 x 4 x 8 x 2 = 640 B/token. 70 blocks of 16; a
     * 100-token context takes 7 blocks (112 tokens): 10 sequences paged,
     * 1120 / 100 = 11 contiguous (no block rounding). */
    llm_kvstat_preset(&s, "stories260k");
    llm_kvstat_params_default(&p);
    p.ctx = 100;
    p.mem = 640 * 16 * 70 + 639;
    cr_assert_eq(llm_kvstat_compute(&r, &s, &p, NULL, 0), LLM_OK);
    cr_assert_eq(r.bytes_per_token, 640);
    cr_assert_eq(r.params.weights, 0);
    cr_assert_eq(r.cap_tokens, 1120);
    cr_assert_eq(r.cap_blocks, 70);
    cr_assert_eq(r.cap_seqs_contig, 11);
    cr_assert_eq(r.cap_seqs_paged, 10);

    /* weights larger than the budget leave nothing */
    p.weights = p.mem + 1;
    cr_assert_eq(llm_kvstat_compute(&r, &s, &p, NULL, 0), LLM_OK);
    cr_assert_eq(r.kv_mem, 0);
    cr_assert_eq(r.cap_tokens, 0);
    cr_assert_eq(r.cap_seqs_paged, 0);
}

Test(kvstat, paged_vs_contiguous_waste)
{
    struct llm_kvstat_shape s;
    struct llm_kvstat_params p;
    struct llm_kvstat_report r;
    llm_kvstat_preset(&s, "stories260k");
    llm_kvstat_params_default(&p);
    p.ctx = 100;
    p.mem = 640 * 16 * 70;
    /* blocks: 1, 1, 2, 7 = 11 (176 tokens); used 134; contiguous 400 */
    const uint64_t len[] = { 1, 16, 17, 100 };
    cr_assert_eq(llm_kvstat_compute(&r, &s, &p, len, 4), LLM_OK);
    const struct llm_kvstat_waste *w = &r.waste;
    cr_assert_eq(r.have_waste, 1);
    cr_assert_eq(w->n_seqs, 4);
    cr_assert_eq(w->min_len, 1);
    cr_assert_eq(w->max_len, 100);
    cr_assert_float_eq(w->mean_len, 33.5, 1e-12);
    cr_assert_eq(w->used_tokens, 134);
    cr_assert_eq(w->paged_blocks, 11);
    cr_assert_eq(w->paged_tokens, 176);
    cr_assert_eq(w->contig_tokens, 400);
    cr_assert_float_eq(w->contig_waste_pct, 66.5, 1e-9);
    cr_assert_float_eq(w->paged_waste_pct, 100.0 * 42 / 176, 1e-9);
    cr_assert_eq(w->contig_fit, 11);
    cr_assert_eq(w->paged_fit, 25); /* 70 blocks / (11 / 4) blocks per sequence */

    /* block size 1: no waste at all */
    p.block_size = 1;
    cr_assert_eq(llm_kvstat_compute(&r, &s, &p, len, 4), LLM_OK);
    cr_assert_eq(r.waste.paged_tokens, 134);
    cr_assert_float_eq(r.waste.paged_waste_pct, 0.0, 1e-12);

    /* a length beyond the context is refused */
    const uint64_t bad[] = { 5, 101 };
    cr_assert_eq(llm_kvstat_compute(&r, &s, &p, bad, 2), LLM_E_INVALID);
    cr_assert(strstr(llm_error_detail(LLM_E_INVALID), "sequence 2: length 101"));
}

Test(kvstat, bad_shapes_and_overflow)
{
    struct llm_kvstat_shape s;
    struct llm_kvstat_params p;
    struct llm_kvstat_report r;
    llm_kvstat_params_default(&p);
    llm_kvstat_preset(&s, "llama-2-7b");
    s.n_kv_heads = 5; /* 32 % 5 != 0 */
    cr_assert_eq(llm_kvstat_compute(&r, &s, &p, NULL, 0), LLM_E_INVALID);
    cr_assert(strstr(llm_error_detail(LLM_E_INVALID), "not a multiple"));
    s.n_kv_heads = 0;
    cr_assert_eq(llm_kvstat_compute(&r, &s, &p, NULL, 0), LLM_E_INVALID);
    /* 2 x 2^20 x 2^20 x 2^20 x 4 x ctx overflows 64 bits */
    s.n_layers = s.n_heads = s.n_kv_heads = s.head_dim = 1 << 20;
    p.type = LLM_KVSTAT_F32;
    p.ctx = INT64_C(1) << 40;
    cr_assert_eq(llm_kvstat_compute(&r, &s, &p, NULL, 0), LLM_E_INVALID);
    cr_assert(strstr(llm_error_detail(LLM_E_INVALID), "overflows"));
}

Test(kvstat, unknown_preset)
{
    struct llm_kvstat_shape s;
    cr_assert_eq(llm_kvstat_preset(&s, "llama-9-1t"), LLM_E_NOTFOUND);
    const char *d = llm_error_detail(LLM_E_NOTFOUND);
    cr_assert(strstr(d, "unknown preset 'llama-9-1t'") && strstr(d, "llama-2-7b"), "%s", d);
    /* every advertised name loads */
    char names[512];
    snprintf(names, sizeof names, "%s", llm_kvstat_presets());
    int n = 0;
    for (char *save, *t = strtok_r(names, ",", &save); t; t = strtok_r(NULL, ",", &save), n++)
        cr_assert_eq(llm_kvstat_preset(&s, t), LLM_OK, "%s", t);
    cr_assert_geq(n, 8);
}

static const char llama3_cfg[] =
    "{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": 4096, \"num_hidden_layers\": 32,\n"
    " \"num_attention_heads\": 32, \"num_key_value_heads\": 8, \"max_position_embeddings\": 8192,\n"
    " \"model_type\": \"llama\", \"vocab_size\": 128256, \"_name_or_path\": \"meta-llama/Meta-Llama-3-8B\"}";

Test(kvstat, config_json)
{
    struct llm_kvstat_shape s;
    cr_assert_eq(llm_kvstat_shape_from_config(&s, llama3_cfg, strlen(llama3_cfg), "c.json"), LLM_OK);
    cr_assert_eq(s.n_layers, 32);
    cr_assert_eq(s.n_heads, 32);
    cr_assert_eq(s.n_kv_heads, 8);
    cr_assert_eq(s.head_dim, 128); /* hidden_size / heads */
    cr_assert_eq(s.ctx_train, 8192);
    cr_assert_str_eq(s.name, "meta-llama/Meta-Llama-3-8B");
    cr_assert_str_eq(s.source, "config");

    /* no num_key_value_heads: MHA; explicit head_dim wins over hidden/heads */
    const char *mha = "{\"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"hidden_size\": 64,"
                      " \"head_dim\": 32}";
    cr_assert_eq(llm_kvstat_shape_from_config(&s, mha, strlen(mha), "m.json"), LLM_OK);
    cr_assert_eq(s.n_kv_heads, 4);
    cr_assert_eq(s.head_dim, 32);
    cr_assert_str_eq(s.name, "m.json");

    /* multimodal: the language model's keys are in text_config */
    const char *mm = "{\"model_type\": \"x\", \"text_config\": {\"num_hidden_layers\": 3,"
                     " \"num_attention_heads\": 8, \"num_key_value_heads\": 1, \"head_dim\": 16}}";
    cr_assert_eq(llm_kvstat_shape_from_config(&s, mm, strlen(mm), "mm.json"), LLM_OK);
    cr_assert_eq(s.n_layers, 3);
    cr_assert_eq(s.n_kv_heads, 1);
}

static void config_fails(const char *text, const char *want)
{
    struct llm_kvstat_shape s;
    llm_status st = llm_kvstat_shape_from_config(&s, text, strlen(text), "dir/config.json");
    cr_assert_eq(st, LLM_E_FORMAT, "%s", text);
    const char *d = llm_error_detail(st);
    cr_assert(strncmp(d, "dir/config.json", 15) == 0 && strstr(d, want), "detail '%s' for %s", d, text);
}

Test(kvstat, config_json_errors)
{
    config_fails("{\"num_hidden_layers\": 32,", "not valid JSON");
    config_fails("[1, 2]", "not a JSON object");
    config_fails("{\"num_attention_heads\": 32, \"hidden_size\": 4096}", "missing key 'num_hidden_layers'");
    config_fails("{\"num_hidden_layers\": 32, \"hidden_size\": 4096}", "missing key 'num_attention_heads'");
    config_fails("{\"num_hidden_layers\": \"32\", \"num_attention_heads\": 32}", "'num_hidden_layers' is not a positive");
    config_fails("{\"num_hidden_layers\": -1, \"num_attention_heads\": 32}", "'num_hidden_layers' is not a positive");
    config_fails("{\"num_hidden_layers\": 2, \"num_attention_heads\": 32}", "'head_dim' (or 'hidden_size')");
    config_fails("{\"num_hidden_layers\": 2, \"num_attention_heads\": 3, \"hidden_size\": 64}", "not a multiple");
    config_fails("{\"num_hidden_layers\": 2, \"num_attention_heads\": 32, \"num_key_value_heads\": 5,"
                 " \"head_dim\": 64}", "not a multiple of 5 KV heads");
    config_fails("{\"a\": 1, \"a\": 2}", "not valid JSON");
}

Test(kvstat, config_file_missing)
{
    struct llm_kvstat_shape s;
    llm_status st = llm_kvstat_shape_load_config(&s, "/nonexistent/config.json");
    cr_assert_eq(st, LLM_E_IO);
    cr_assert(strstr(llm_error_detail(st), "/nonexistent/config.json"));
}

Test(kvstat, from_meta)
{
    struct llm_meta *m = llm_meta_new(LLM_META_MAP);
    struct llm_kvstat_shape s;
    cr_assert_eq(llm_kvstat_shape_from_meta(&s, m, "x.llm"), LLM_E_FORMAT);
    cr_assert(strstr(llm_error_detail(LLM_E_FORMAT), "x.llm: metadata has no hparams.block_count"));
    llm_meta_set_i64(m, "hparams.block_count", 30);
    llm_meta_set_i64(m, "hparams.head_count", 9);
    llm_meta_set_i64(m, "hparams.head_count_kv", 3);
    llm_meta_set_i64(m, "hparams.embedding_length", 576);
    llm_meta_set_i64(m, "hparams.context_length", 8192);
    cr_assert_eq(llm_kvstat_shape_from_meta(&s, m, "x.llm"), LLM_OK);
    cr_assert_eq(s.head_dim, 64);
    cr_assert_eq(s.n_kv_heads, 3);
    cr_assert_str_eq(s.name, "x.llm");
    llm_meta_set_str(m, "hparams.head_count_kv", "three");
    cr_assert_eq(llm_kvstat_shape_from_meta(&s, m, "x.llm"), LLM_E_FORMAT);
    cr_assert(strncmp(llm_error_detail(LLM_E_FORMAT), "x.llm: ", 7) == 0);
    llm_meta_set_i64(m, "hparams.head_count_kv", 2); /* 9 % 2 */
    cr_assert_eq(llm_kvstat_shape_from_meta(&s, m, "x.llm"), LLM_E_FORMAT);
    cr_assert(strstr(llm_error_detail(LLM_E_FORMAT), "not a multiple"));
    llm_meta_set_i64(m, "hparams.head_count_kv", 3);
    llm_meta_set_str(m, "architecture", "none"); /* a tokenizer-only file */
    cr_assert_eq(llm_kvstat_shape_from_meta(&s, m, "x.llm"), LLM_E_FORMAT);
    cr_assert(strstr(llm_error_detail(LLM_E_FORMAT), "x.llm: no model in the file"));
    llm_meta_free(m);
}

/* stories260K: dim 64, 5 layers, 8 heads, 4 KV heads (data README):
 * 2 x 5 x 4 x 8 x 2 = 640 bytes per token in f16. */
Test(kvstat, real_model_file)
{
    TEST_DATA(path, "gguf/stories260K.gguf");
    struct llm_kvstat_shape s;
    cr_assert_eq(llm_kvstat_shape_load_model(&s, path), LLM_OK, "%s", llm_error_detail(-1));
    cr_assert_eq(s.n_layers, 5);
    cr_assert_eq(s.n_heads, 8);
    cr_assert_eq(s.n_kv_heads, 4);
    cr_assert_eq(s.head_dim, 8);
    cr_assert_eq(s.ctx_train, 2048);
    cr_assert_str_eq(s.source, "model");
    /* 48 F32 tensors, 260,032 weights plus the separate output matrix */
    cr_assert_eq(s.weight_bytes, (260032ull + 32768) * 4);
    struct llm_kvstat_params p;
    struct llm_kvstat_report r;
    llm_kvstat_params_default(&p);
    p.mem = 4 << 20;
    cr_assert_eq(llm_kvstat_compute(&r, &s, &p, NULL, 0), LLM_OK);
    cr_assert_eq(r.bytes_per_token, 640);
    cr_assert_eq(r.kv_mem, (4u << 20) - s.weight_bytes);
}

Test(kvstat, lengths_parse)
{
    uint64_t *v;
    size_t n;
    const char *t = "5\n\n# comment\n  7 \r\n12";
    cr_assert_eq(llm_kvstat_lengths_parse(&v, &n, t, strlen(t), "l.txt", 100), LLM_OK);
    cr_assert_eq(n, 3);
    cr_assert_eq(v[0], 5);
    cr_assert_eq(v[1], 7);
    cr_assert_eq(v[2], 12);
    llm_free(v);
    const struct { const char *text, *want; } bad[] = {
        { "5\nx\n", "l.txt:2: 'x' is not a positive integer" },
        { "0\n", "l.txt:1: '0' is not a positive integer" },
        { "-3\n", "l.txt:1: '-3'" },
        { "4 5\n", "l.txt:1: '4 5'" },
        { "1\n2\n101\n", "l.txt:3: length 101 exceeds the context (100)" },
        { "99999999999999999999999\n", "not a positive integer" },
        { "\n# nothing\n", "l.txt: no sequence lengths" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        llm_status s = llm_kvstat_lengths_parse(&v, &n, bad[i].text, strlen(bad[i].text), "l.txt", 100);
        cr_assert_eq(s, LLM_E_FORMAT, "%s", bad[i].text);
        cr_assert(strstr(llm_error_detail(s), bad[i].want), "'%s' lacks '%s'", llm_error_detail(s),
                  bad[i].want);
    }
}

Test(kvstat, lengths_synthetic)
{
    uint64_t *a, *b;
    size_t na, nb;
    cr_assert_eq(llm_kvstat_lengths_synthetic(&a, &na, "uniform:10:20:1000", 3, 100), LLM_OK);
    cr_assert_eq(na, 1000);
    int seen[11] = { 0 };
    for (size_t i = 0; i < na; i++) {
        cr_assert(a[i] >= 10 && a[i] <= 20);
        seen[a[i] - 10] = 1;
    }
    for (int i = 0; i <= 10; i++)
        cr_assert(seen[i], "value %d never drawn", i + 10);
    cr_assert_eq(llm_kvstat_lengths_synthetic(&b, &nb, "uniform:10:20:1000", 3, 100), LLM_OK);
    cr_assert_eq(memcmp(a, b, na * sizeof *a), 0, "same seed, same lengths");
    llm_free(b);
    cr_assert_eq(llm_kvstat_lengths_synthetic(&b, &nb, "uniform:10:20:1000", 4, 100), LLM_OK);
    cr_assert_neq(memcmp(a, b, na * sizeof *a), 0, "another seed, other lengths");
    llm_free(a);
    llm_free(b);

    cr_assert_eq(llm_kvstat_lengths_synthetic(&a, &na, "normal:500:50:20000", 1, 4096), LLM_OK);
    double sum = 0, sq = 0;
    for (size_t i = 0; i < na; i++)
        sum += (double)a[i], sq += (double)a[i] * (double)a[i];
    double mean = sum / (double)na, sd = sqrt(sq / (double)na - mean * mean);
    cr_assert(fabs(mean - 500) < 2, "mean %g", mean);
    cr_assert(fabs(sd - 50) < 2, "sd %g", sd);
    llm_free(a);
    /* clamped to 1..max */
    cr_assert_eq(llm_kvstat_lengths_synthetic(&a, &na, "normal:50:200:1000", 1, 100), LLM_OK);
    int lo = 0, hi = 0;
    for (size_t i = 0; i < na; i++) {
        cr_assert(a[i] >= 1 && a[i] <= 100);
        lo += a[i] == 1, hi += a[i] == 100;
    }
    cr_assert(lo > 100 && hi > 100, "clamping at both ends: %d %d", lo, hi);
    llm_free(a);

    const char *bad[] = { "uniform:0:5:10", "uniform:5:1:3", "uniform:1:200:3", "uniform:1.5:3:2",
                          "poisson:1:2:3", "normal:1:-2:3", "normal:1:2", "uniform:1:2:3:4",
                          "uniform:1:2:0" };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cr_assert_eq(llm_kvstat_lengths_synthetic(&a, &na, bad[i], 1, 100), LLM_E_INVALID, "%s", bad[i]);
        cr_assert(strstr(llm_error_detail(LLM_E_INVALID), bad[i]), "%s", llm_error_detail(LLM_E_INVALID));
    }
}

/* The report as JSON, parsed: it must be valid JSON. */
static json_t *json_of(const struct llm_kvstat_report *r)
{
    char *buf = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&buf, &n);
    cr_assert_eq(llm_kvstat_print_json(f, r), LLM_OK);
    fclose(f);
    json_error_t err;
    json_t *j = json_loads(buf, 0, &err);
    cr_assert_not_null(j, "%s: %s", err.text, buf);
    free(buf);
    return j;
}

Test(kvstat, json_printer_is_valid_json)
{
    struct llm_kvstat_shape s;
    struct llm_kvstat_params p;
    struct llm_kvstat_report r;
    llm_kvstat_preset(&s, "llama-2-70b");
    llm_kvstat_params_default(&p);
    p.mem = 80ull << 30;
    const uint64_t len[] = { 1, 16, 17, 100 };
    cr_assert_eq(llm_kvstat_compute(&r, &s, &p, len, 4), LLM_OK);
    json_t *j = json_of(&r);
    cr_assert_eq(json_integer_value(json_object_get(j, "bytes_per_token")), 327680);
    cr_assert_eq(json_integer_value(json_object_get(j, "bytes_per_sequence")), 327680ll * 4096);
    cr_assert_eq(json_integer_value(json_object_get(json_object_get(j, "capacity"), "tokens")),
                 (80ll << 30) / 327680);
    cr_assert_eq(json_integer_value(json_object_get(json_object_get(j, "fragmentation"), "paged_tokens")),
                 176);
    cr_assert_str_eq(json_string_value(json_object_get(j, "attention")), "GQA");
    json_decref(j);
}

/* The shared-prefix arithmetic against the KV pool itself: a prompt of P
 * tokens in one sequence, forked into the batch's others, each grown to
 * ctx tokens; the pool then holds exactly the blocks the report says,
 * and the budget's sequence count is what fits. */
#include "../../../lib/kv/kv.h"

Test(kvstat, shared_prefix_matches_the_pool)
{
    struct llm_kvstat_shape s;
    cr_assert_eq(llm_kvstat_preset(&s, "stories260k"), LLM_OK);
    const int64_t cases[][4] = { /* ctx, batch, prefix, block */
                                 { 40, 4, 21, 4 }, { 40, 3, 16, 16 }, { 64, 5, 64, 16 },
                                 { 30, 2, 1, 8 },  { 33, 7, 32, 16 } };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const int64_t ctx = cases[c][0], B = cases[c][1], P = cases[c][2], bs = cases[c][3];
        struct llm_kvstat_params p;
        struct llm_kvstat_report r;
        llm_kvstat_params_default(&p);
        p.ctx = ctx, p.batch = B, p.shared_prefix = P, p.block_size = bs;
        p.type = LLM_KVSTAT_F32;
        p.mem = 1000 * 1000; /* a budget, in blocks: the capacity figures */
        cr_assert_eq(llm_kvstat_compute(&r, &s, &p, NULL, 0), LLM_OK, "%s", llm_error_detail(-1));
        cr_assert(r.have_sharing);
        struct llm_kv_params kp;
        llm_kv_params_default(&kp);
        kp.n_layers = (int32_t)s.n_layers, kp.n_kv_heads = (int32_t)s.n_kv_heads;
        kp.head_dim = (int32_t)s.head_dim, kp.block_size = (int32_t)bs;
        kp.n_seq = (int32_t)B, kp.max_tokens = (int32_t)ctx, kp.type_k = kp.type_v = LLM_TYPE_F32;
        cr_assert_eq(llm_kv_block_bytes(&kp), r.bytes_per_block);
        struct llm_kv *kv;
        cr_assert_eq(llm_kv_new(&kv, &kp), LLM_OK);
        cr_assert_eq(llm_kv_prepare(kv, 0, 0, (int32_t)P), LLM_OK);
        llm_kv_set_len(kv, 0, (int32_t)P);
        for (int32_t i = 1; i < B; i++)
            cr_assert_eq(llm_kv_fork(kv, 0, i, (int32_t)P), LLM_OK);
        for (int32_t i = 0; i < B; i++) {
            cr_assert_eq(llm_kv_prepare(kv, i, (int32_t)P, (int32_t)(ctx - P)), LLM_OK);
            llm_kv_set_len(kv, i, (int32_t)ctx);
            kv->n_copies = 0; /* the copies' data is not the point here */
        }
        struct llm_kv_stats st;
        llm_kv_stats(kv, &st);
        cr_assert_eq((uint64_t)st.used, r.blocks_shared, "case %zu: pool %d, report %llu", c,
                     st.used, (unsigned long long)r.blocks_shared);
        cr_assert_eq((uint64_t)st.logical, r.blocks_unshared);
        cr_assert_eq((uint64_t)(st.logical - st.used), r.blocks_saved);
        cr_assert_eq(r.bytes_saved, r.blocks_saved * r.bytes_per_block);
        llm_kv_free(kv);
        /* as many such sequences as the budget's blocks hold, and not one more */
        if (r.cap_seqs_shared != UINT64_MAX) {
            const uint64_t n = r.cap_seqs_shared;
            cr_assert(r.shared_blocks + n * r.own_blocks_per_seq <= r.cap_blocks);
            cr_assert(r.shared_blocks + (n + 1) * r.own_blocks_per_seq > r.cap_blocks);
        }
    }
    /* a prefix longer than the context is refused */
    struct llm_kvstat_params p;
    struct llm_kvstat_report r;
    llm_kvstat_params_default(&p);
    p.ctx = 10, p.shared_prefix = 11;
    cr_assert_eq(llm_kvstat_compute(&r, &s, &p, NULL, 0), LLM_E_INVALID);
}

/* Sliding windows: a window layer holds the window, 80 positions kept for
 * rollbacks and a step of 512, in blocks of 16 (kv/kv.h), so Gemma 3
 * 270M at 32768 tokens: 3 global layers x 32768 + 15 window layers x
 * 1152 tokens x 1 KiB a token and layer (f16, 1 KV head of 256). A short
 * context saves nothing; a window from config.json on the layers each
 * family puts it on; JSON and table say so. */
Test(kvstat, sliding_window_layers_bounded)
{
    struct llm_kvstat_report r = report("gemma3-270m", LLM_KVSTAT_F16, 32768);
    cr_assert(r.have_window);
    cr_assert_eq(r.window_tokens, 1152);
    cr_assert_eq(r.bytes_per_sequence_windowed, 1024ull * (3 * 32768 + 15 * 1152));
    cr_assert_eq(r.bytes_per_sequence, 1024ull * 18 * 32768);
    r = report("gemma2-2b", LLM_KVSTAT_F16, 4096);
    cr_assert(!r.have_window, "4096 + 80 + 512 covers a context of 4096");
    {   /* steps of 64 (llm-run --batch --step-tokens 64): (64 + 512 + 80 + 32) / 16 + 1 blocks */
        struct llm_kvstat_shape s3;
        struct llm_kvstat_params p3;
        llm_kvstat_preset(&s3, "gemma3-270m");
        llm_kvstat_params_default(&p3);
        p3.step = 64;
        cr_assert_eq(llm_kvstat_compute(&r, &s3, &p3, NULL, 0), LLM_OK);
        cr_assert_eq(r.window_tokens, 704);
        p3.step = 0;
        cr_assert_eq(llm_kvstat_compute(&r, &s3, &p3, NULL, 0), LLM_E_INVALID);
    }
    r = report("mistral-7b", LLM_KVSTAT_F16, 32768);
    cr_assert(!r.have_window);
    r = report("mistral-7b-v0.1", LLM_KVSTAT_F16, 32768);
    cr_assert(r.have_window && r.bytes_per_sequence_windowed == 4096ull * 32 * (4096 + 640));
    static const struct {
        const char *cfg;
        int64_t window, local;
    } cases[] = {
        { "{\"model_type\": \"gemma2\", \"sliding_window\": 4096", 4096, 13 },
        { "{\"model_type\": \"gemma3_text\", \"sliding_window\": 512", 512, 22 },
        { "{\"model_type\": \"gemma3_text\", \"sliding_window\": 512, \"sliding_window_pattern\": 2", 512, 13 },
        { "{\"model_type\": \"mistral\", \"sliding_window\": 4096", 4096, 26 },
        { "{\"model_type\": \"mistral\", \"sliding_window\": null", 0, 0 },
        { "{\"model_type\": \"qwen2\", \"sliding_window\": 4096, \"use_sliding_window\": false", 0, 0 },
        { "{\"model_type\": \"qwen2\", \"sliding_window\": 4096", 0, 0 },
        { "{\"model_type\": \"qwen2\", \"sliding_window\": 4096, \"use_sliding_window\": true, "
          "\"max_window_layers\": 20", 4096, 6 },
        { "{\"model_type\": \"x\", \"sliding_window\": 64, \"layer_types\": [\"full_attention\", "
          "\"sliding_attention\"]", 0, -1 }, /* 2 entries for 26 layers */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char text[512];
        snprintf(text, sizeof text, "%s, \"num_hidden_layers\": 26, \"num_attention_heads\": 8, "
                 "\"num_key_value_heads\": 4, \"head_dim\": 256}", cases[i].cfg);
        struct llm_kvstat_shape s;
        llm_status st = llm_kvstat_shape_from_config(&s, text, strlen(text), "c.json");
        if (cases[i].local < 0) {
            cr_assert_eq(st, LLM_E_FORMAT);
            cr_assert(strstr(llm_error_detail(st), "c.json: layer_types has 2 entries for 26 layers"),
                      "%s", llm_error_detail(st));
            continue;
        }
        cr_assert_eq(st, LLM_OK, "%s: %s", text, llm_error_detail(st));
        cr_assert_eq(s.window, cases[i].window, "case %zu", i);
        cr_assert_eq(s.n_local, cases[i].local, "case %zu: %lld", i, (long long)s.n_local);
    }
    struct llm_kvstat_shape s;
    struct llm_kvstat_params p;
    llm_kvstat_preset(&s, "gemma3-270m");
    llm_kvstat_params_default(&p);
    p.mem = 1ull << 30;
    cr_assert_eq(llm_kvstat_compute(&r, &s, &p, NULL, 0), LLM_OK);
    cr_assert_eq(r.cap_seqs_windowed, (1ull << 30) / r.bytes_per_sequence_windowed);
    json_t *j = json_of(&r);
    cr_assert_eq(json_integer_value(json_object_get(j, "window_layers")), 15);
    cr_assert_eq(json_integer_value(json_object_get(j, "window_tokens")), 1152);
    cr_assert_eq(json_integer_value(json_object_get(json_object_get(j, "capacity"),
                                                    "sequences_windowed")), 9);
    json_decref(j);
}
