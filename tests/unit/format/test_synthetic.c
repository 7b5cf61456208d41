/* test_synthetic.c: synthetic models: published parameter counts, shapes,
 * determinism, value statistics, YAML shape files. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "../../../lib/format/file.h"
#include "../../../lib/format/import.h"
#include "../../../lib/format/meta.h"
#include "../../../lib/quant/types.h"
#include "../helpers.h"

static int64_t meta_i(struct llm_file *f, const char *path)
{
    int64_t v = -1;
    cr_assert_eq(llm_meta_get_i64(f->meta, path, &v), LLM_OK, "meta %s", path);
    return v;
}

static int meta_b(struct llm_file *f, const char *path)
{
    int v = -1;
    cr_assert_eq(llm_meta_get_bool(f->meta, path, &v), LLM_OK, "meta %s", path);
    return v;
}

/* The parameter count implied by the hparams in the metadata (a llama
 * block: q/k/v/o, gate/up/down, two norms; qwen2 adds q/k/v biases). */
static uint64_t count_from_hparams(struct llm_file *f)
{
    uint64_t H = (uint64_t)meta_i(f, "hparams.embedding_length");
    uint64_t I = (uint64_t)meta_i(f, "hparams.feed_forward_length");
    uint64_t L = (uint64_t)meta_i(f, "hparams.block_count");
    uint64_t nh = (uint64_t)meta_i(f, "hparams.head_count");
    uint64_t nkv = (uint64_t)meta_i(f, "hparams.head_count_kv");
    uint64_t V = (uint64_t)meta_i(f, "hparams.vocab_size");
    uint64_t hd = (uint64_t)meta_i(f, "hparams.head_dim");
    int tie = meta_b(f, "hparams.tie_embeddings");
    const char *arch = NULL;
    cr_assert_eq(llm_meta_get_str(f->meta, "architecture", &arch), LLM_OK);
    uint64_t attn = 2 * H * hd * nh + 2 * H * hd * nkv;
    uint64_t bias = strcmp(arch, "qwen2") == 0 ? hd * nh + 2 * hd * nkv : 0;
    int gemma = strncmp(arch, "gemma", 5) == 0;
    uint64_t qk_norm = strcmp(arch, "qwen3") == 0 || strcmp(arch, "gemma3") == 0 ||
                               strcmp(arch, "qwen3moe") == 0
                           ? 2 * hd
                           : 0;
    if (strcmp(arch, "qwen2moe") == 0)
        bias = hd * nh + 2 * hd * nkv;
    uint64_t ffn = 3 * H * I;
    int64_t E = 0, ef = 0, sf = 0;
    if (llm_meta_get_i64(f->meta, "hparams.expert_count", &E) == LLM_OK) {
        ef = meta_i(f, "hparams.expert_feed_forward_length");
        llm_meta_get_i64(f->meta, "hparams.expert_shared_feed_forward_length", &sf);
        /* the experts, the router, the shared expert and its gate's row */
        ffn = (uint64_t)E * 3 * H * (uint64_t)ef + (uint64_t)E * H +
              (sf ? 3 * H * (uint64_t)sf + H : 0);
    }
    llm_error_clear();
    uint64_t layer = attn + bias + qk_norm + ffn + (gemma ? 4 : 2) * H;
    return V * H * (tie ? 1 : 2) + L * layer + H;
}

Test(synthetic, published_parameter_counts)
{
    struct {
        const char *shape;
        uint64_t params; /* published counts (model cards / papers) */
        int64_t dim, hidden, layers, heads, kv, vocab, ctx;
        int tie;
    } want[] = {
        {"stories260k", 260032, 64, 172, 5, 8, 4, 512, 512, 1},
        {"stories15m", 15191712, 288, 768, 6, 6, 6, 32000, 256, 1},
        {"stories110m", 109529856, 768, 2048, 12, 12, 12, 32000, 1024, 1},
        {"smollm2-135m", 134515008, 576, 1536, 30, 9, 3, 49152, 8192, 1},
        {"llama-2-7b", 6738415616ull, 4096, 11008, 32, 32, 32, 32000, 4096, 0},
        {"llama-3-8b", 8030261248ull, 4096, 14336, 32, 32, 8, 128256, 8192, 0},
        {"mistral-7b", 7241732096ull, 4096, 14336, 32, 32, 8, 32000, 32768, 0},
        {"qwen2-0.5b", 494032768, 896, 4864, 24, 14, 2, 151936, 131072, 1},
        /* 0.44B without the embedding, as the model card says */
        {"qwen3-0.6b", 596049920, 1024, 3072, 28, 16, 8, 151936, 40960, 1},
        {"mistral-7b-v0.1", 7241732096ull, 4096, 14336, 32, 32, 8, 32000, 32768, 0},
        {"gemma2-2b", 2614341888ull, 2304, 9216, 26, 8, 4, 256000, 8192, 1},
        {"phi-3-mini-4k", 3821079552ull, 3072, 8192, 32, 32, 32, 32064, 4096, 0},
        {"mixtral-8x7b", 46702792704ull, 4096, 14336, 32, 32, 8, 32000, 32768, 0},
        {"qwen1.5-moe-a2.7b", 14315784192ull, 2048, 5632, 24, 16, 16, 151936, 8192, 0},
        {"qwen3-30b-a3b", 30532122624ull, 2048, 6144, 48, 32, 4, 151936, 40960, 0},
        /* 170M embedding + 100M transformer, as the model card says */
        {"gemma3-270m", 268098176, 640, 2048, 18, 4, 1, 262144, 32768, 1},
    };
    size_t n_names = 1;
    for (const char *p = llm_synthetic_shapes(); *p; p++)
        n_names += *p == ',';
    cr_assert_eq(n_names, sizeof want / sizeof want[0]);
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        struct llm_file *f;
        uint64_t params, bytes;
        cr_assert(strstr(llm_synthetic_shapes(), want[i].shape));
        cr_assert_eq(llm_synthetic(&f, want[i].shape, LLM_TYPE_F16, 1), LLM_OK, "%s: %s",
                     want[i].shape, llm_error_detail(-1));
        llm_file_totals(f, &params, &bytes);
        cr_assert_eq(params, want[i].params, "%s: %llu params", want[i].shape,
                     (unsigned long long)params);
        cr_assert_eq(params, count_from_hparams(f), "%s", want[i].shape);
        cr_assert_eq(meta_i(f, "hparams.embedding_length"), want[i].dim);
        cr_assert_eq(meta_i(f, "hparams.feed_forward_length"), want[i].hidden);
        cr_assert_eq(meta_i(f, "hparams.block_count"), want[i].layers);
        cr_assert_eq(meta_i(f, "hparams.head_count"), want[i].heads);
        cr_assert_eq(meta_i(f, "hparams.head_count_kv"), want[i].kv);
        cr_assert_eq(meta_i(f, "hparams.vocab_size"), want[i].vocab);
        cr_assert_eq(meta_i(f, "hparams.context_length"), want[i].ctx);
        cr_assert_eq(meta_b(f, "hparams.tie_embeddings"), want[i].tie);
        cr_assert_eq(llm_file_find(f, "output.weight") == NULL, want[i].tie, "%s",
                     want[i].shape);
        /* lazily produced: nothing is materialised at creation */
        for (size_t k = 0; k < f->n_tensors; k++) {
            cr_assert_null(f->tensors[k].data);
            cr_assert(f->tensors[k].fill);
        }
        llm_file_free(f);
    }
}

Test(synthetic, hparams_of_named_shapes)
{
    struct llm_file *f;
    double theta, eps;
    const char *s;
    cr_assert_eq(llm_synthetic(&f, "qwen2-0.5b", LLM_TYPE_F32, 7), LLM_OK);
    cr_assert_eq(llm_meta_get_str(f->meta, "architecture", &s), LLM_OK);
    cr_assert_str_eq(s, "qwen2");
    cr_assert_eq(llm_meta_get_f64(f->meta, "hparams.rope_theta", &theta), LLM_OK);
    cr_assert_float_eq(theta, 1e6, 1e-3);
    cr_assert_eq(llm_meta_get_f64(f->meta, "hparams.rms_norm_eps", &eps), LLM_OK);
    cr_assert_float_eq(eps, 1e-6, 1e-12);
    cr_assert_eq(llm_meta_get_str(f->meta, "tokenizer.model", &s), LLM_OK);
    cr_assert_str_eq(s, "none");
    struct llm_tensor *t = llm_file_find(f, "blk.23.attn_k.bias");
    cr_assert(t);
    cr_assert_eq(t->n_dims, 1);
    cr_assert_eq(t->ne[0], 128);
    cr_assert_eq(t->type, LLM_TYPE_F32);
    cr_assert_null(llm_file_find(f, "blk.0.attn_output.bias"));
    llm_file_free(f);

    cr_assert_eq(llm_synthetic(&f, "llama-3-8b", LLM_TYPE_Q4_0, 7), LLM_OK);
    cr_assert_eq(llm_meta_get_f64(f->meta, "hparams.rope_theta", &theta), LLM_OK);
    cr_assert_float_eq(theta, 500000.0, 1e-3);
    t = llm_file_find(f, "blk.31.attn_k.weight");
    cr_assert_eq(t->ne[0], 4096);
    cr_assert_eq(t->ne[1], 1024);
    cr_assert_eq(t->type, LLM_TYPE_Q4_0);
    cr_assert_eq(llm_file_find(f, "blk.31.ffn_norm.weight")->type, LLM_TYPE_F32);
    cr_assert_null(llm_file_find(f, "blk.0.attn_q.bias"));
    llm_file_free(f);

    cr_assert_eq(llm_synthetic(&f, "smollm2-135m", LLM_TYPE_F32, 7), LLM_OK);
    cr_assert_eq(llm_meta_get_f64(f->meta, "hparams.rope_theta", &theta), LLM_OK);
    cr_assert_float_eq(theta, 100000.0, 1e-3);
    cr_assert_eq(meta_i(f, "hparams.head_dim"), 64);
    llm_file_free(f);
}

Test(synthetic, same_names_and_shapes_as_llama2c_import)
{
    TEST_DATA(p0, "llama2c/stories260K.bin");
    struct llm_file *a, *b;
    cr_assert_eq(llm_llama2c_open(&a, p0, NULL), LLM_OK);
    cr_assert_eq(llm_synthetic(&b, "stories260k", LLM_TYPE_F32, 0), LLM_OK);
    cr_assert_eq(a->n_tensors, b->n_tensors);
    for (size_t i = 0; i < a->n_tensors; i++) {
        struct llm_tensor *t = llm_file_find(b, a->tensors[i].name);
        cr_assert(t, "%s missing", a->tensors[i].name);
        cr_assert_eq(t->n_dims, a->tensors[i].n_dims);
        cr_assert_eq(memcmp(t->ne, a->tensors[i].ne, sizeof t->ne), 0, "%s", t->name);
    }
    llm_file_free(a);
    llm_file_free(b);
}

/* All tensor bytes of a stories260k model, concatenated. */
static uint8_t *all_bytes(const char *shape, enum llm_type type, uint64_t seed, size_t *n)
{
    struct llm_file *f;
    cr_assert_eq(llm_synthetic(&f, shape, type, seed), LLM_OK, "%s", llm_error_detail(-1));
    size_t total = 0;
    for (size_t i = 0; i < f->n_tensors; i++)
        total += f->tensors[i].nbytes;
    uint8_t *b = malloc(total), *p = b;
    for (size_t i = 0; i < f->n_tensors; i++) {
        cr_assert_eq(llm_tensor_read(f, &f->tensors[i], p), LLM_OK, "%s: %s",
                     f->tensors[i].name, llm_error_detail(-1));
        p += f->tensors[i].nbytes;
    }
    *n = total;
    llm_file_free(f);
    return b;
}

Test(synthetic, deterministic_by_seed)
{
    enum llm_type types[] = {LLM_TYPE_F32, LLM_TYPE_F16, LLM_TYPE_BF16, LLM_TYPE_Q8_0,
                             LLM_TYPE_Q4_0};
    for (size_t k = 0; k < sizeof types / sizeof types[0]; k++) {
        size_t n1, n2, n3;
        uint8_t *a = all_bytes("stories260k", types[k], 42, &n1);
        uint8_t *b = all_bytes("stories260k", types[k], 42, &n2);
        uint8_t *c = all_bytes("stories260k", types[k], 43, &n3);
        cr_assert_eq(n1, n2);
        cr_assert_eq(n1, n3);
        cr_assert_eq(memcmp(a, b, n1), 0, "type %s: same seed, different bytes",
                     llm_type_name(types[k]));
        /* a different seed changes every weight matrix, not just a few bytes */
        size_t same = 0;
        for (size_t i = 0; i < n1; i++)
            same += a[i] == c[i];
        cr_assert_lt(same, n1 / 2, "type %s: %zu of %zu bytes equal", llm_type_name(types[k]),
                     same, n1);
        free(a);
        free(b);
        free(c);
    }
}

Test(synthetic, value_statistics)
{
    struct llm_file *f;
    cr_assert_eq(llm_synthetic(&f, "stories260k", LLM_TYPE_F32, 5), LLM_OK);
    float *buf = malloc(64 * 512 * 4);
    struct llm_tensor *emb = llm_file_find(f, "token_embd.weight");
    cr_assert_eq(llm_tensor_read(f, emb, buf), LLM_OK);
    double sum = 0, sq = 0, amax = 0;
    for (int i = 0; i < 64 * 512; i++) {
        sum += buf[i];
        sq += (double)buf[i] * buf[i];
        amax = fmax(amax, fabs(buf[i]));
    }
    double mean = sum / (64 * 512), sd = sqrt(sq / (64 * 512) - mean * mean);
    cr_assert_lt(fabs(mean), 0.001);
    cr_assert_float_eq(sd, 0.02, 0.0005);
    cr_assert_leq(amax, 0.02 * sqrt(3.0) + 1e-6);
    /* two tensors of the same shape differ (seeded by name) */
    float *q0 = malloc(64 * 64 * 4), *q1 = malloc(64 * 64 * 4);
    cr_assert_eq(llm_tensor_read(f, llm_file_find(f, "blk.0.attn_q.weight"), q0), LLM_OK);
    cr_assert_eq(llm_tensor_read(f, llm_file_find(f, "blk.1.attn_q.weight"), q1), LLM_OK);
    cr_assert_neq(memcmp(q0, q1, 64 * 64 * 4), 0);
    /* norms are exactly one */
    cr_assert_eq(llm_tensor_read(f, llm_file_find(f, "blk.3.ffn_norm.weight"), buf), LLM_OK);
    for (int i = 0; i < 64; i++)
        cr_assert_eq(buf[i], 1.0f);
    free(q0);
    free(q1);
    free(buf);
    llm_file_free(f);
}

Test(synthetic, big_model_is_lazy)
{
    /* a 7B model costs no weight memory until a tensor is produced */
    struct llm_file *f;
    cr_assert_eq(llm_synthetic(&f, "llama-2-7b", LLM_TYPE_Q8_0, 1), LLM_OK);
    cr_assert_eq(f->n_tensors, 3 + 32 * 9);
    cr_assert_eq(f->n_owned, 1); /* the fill contexts */
    uint64_t params, bytes;
    llm_file_totals(f, &params, &bytes);
    cr_assert_eq(bytes, (params - 65 * 4096) / 32 * 34 + 65 * 4096 * 4);
    float norm[4096];
    cr_assert_eq(llm_tensor_read(f, llm_file_find(f, "output_norm.weight"), norm), LLM_OK);
    cr_assert_eq(norm[4095], 1.0f);
    llm_file_free(f);
}

static const char *write_yaml(const char *dir, const char *name, const char *text)
{
    static char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *fp = fopen(path, "w");
    cr_assert(fp);
    fputs(text, fp);
    fclose(fp);
    return path;
}

#define YAML_OK                                                                         \
    "architecture: llama\nembedding_length: 128\nfeed_forward_length: 320\n"          \
    "block_count: 3\nhead_count: 4\nhead_count_kv: 2\nvocab_size: 1000\n"             \
    "context_length: 256\nrope_theta: 50000.0\nrms_norm_eps: 1.0e-6\n"                \
    "tie_embeddings: false\n"

Test(synthetic, yaml_shape_file)
{
    const char *dir = llm_test_tmpdir();
    const char *path = write_yaml(dir, "tiny.yaml", YAML_OK);
    struct llm_file *f;
    uint64_t params, bytes;
    double theta;
    cr_assert_eq(llm_synthetic(&f, path, LLM_TYPE_F32, 3), LLM_OK, "%s", llm_error_detail(-1));
    llm_file_totals(f, &params, &bytes);
    /* 2*1000*128 + 3*(2*128*128 + 2*128*64 + 3*128*320 + 2*128) + 128 */
    cr_assert_eq(params, 256000 + 3 * (32768 + 16384 + 122880 + 256) + 128);
    cr_assert_eq(params, count_from_hparams(f));
    cr_assert_eq(meta_i(f, "hparams.head_dim"), 32);
    cr_assert_eq(meta_i(f, "hparams.context_length"), 256);
    cr_assert_eq(llm_meta_get_f64(f->meta, "hparams.rope_theta", &theta), LLM_OK);
    cr_assert_float_eq(theta, 50000.0, 1e-6);
    cr_assert(llm_file_find(f, "output.weight"));
    llm_file_free(f);

    /* a missing key names the file and the key */
    path = write_yaml(dir, "missing.yaml",
                      "architecture: llama\nembedding_length: 128\nfeed_forward_length: 320\n"
                      "block_count: 3\nhead_count: 4\nhead_count_kv: 2\n"
                      "context_length: 256\nrope_theta: 50000.0\nrms_norm_eps: 1.0e-6\n"
                      "tie_embeddings: false\n");
    cr_assert_eq(llm_synthetic(&f, path, LLM_TYPE_F32, 3), LLM_E_FORMAT);
    const char *d = llm_error_detail(LLM_E_FORMAT);
    cr_assert(strstr(d, path) && strstr(d, "vocab_size"), "%s", d);

    /* a wrong type names the line */
    path = write_yaml(dir, "type.yaml",
                      "architecture: llama\nembedding_length: 128\nfeed_forward_length: big\n"
                      "block_count: 3\nhead_count: 4\nhead_count_kv: 2\nvocab_size: 1000\n"
                      "context_length: 256\nrope_theta: 50000.0\nrms_norm_eps: 1.0e-6\n"
                      "tie_embeddings: false\n");
    cr_assert_eq(llm_synthetic(&f, path, LLM_TYPE_F32, 3), LLM_E_FORMAT);
    d = llm_error_detail(LLM_E_FORMAT);
    cr_assert(strstr(d, ":3:") && strstr(d, "feed_forward_length"), "%s", d);

    /* an unknown key (a typo) is not silently ignored */
    path = write_yaml(dir, "typo.yaml", YAML_OK "hiden_size: 3\n");
    cr_assert_eq(llm_synthetic(&f, path, LLM_TYPE_F32, 3), LLM_E_FORMAT);
    cr_assert(strstr(llm_error_detail(LLM_E_FORMAT), "hiden_size"));

    /* inconsistent heads */
    path = write_yaml(dir, "heads.yaml",
                      "architecture: llama\nembedding_length: 128\nfeed_forward_length: 320\n"
                      "block_count: 3\nhead_count: 4\nhead_count_kv: 3\nvocab_size: 1000\n"
                      "context_length: 256\nrope_theta: 50000.0\nrms_norm_eps: 1.0e-6\n"
                      "tie_embeddings: false\n");
    cr_assert_eq(llm_synthetic(&f, path, LLM_TYPE_F32, 3), LLM_E_FORMAT);
    cr_assert(strstr(llm_error_detail(LLM_E_FORMAT), "head_count_kv"));

    /* qwen2 architecture brings biases */
    path = write_yaml(dir, "q.yaml",
                      "architecture: qwen2\nembedding_length: 128\nfeed_forward_length: 320\n"
                      "block_count: 2\nhead_count: 4\nhead_count_kv: 2\nvocab_size: 1000\n"
                      "context_length: 256\nrope_theta: 1000000\nrms_norm_eps: 1.0e-6\n"
                      "tie_embeddings: true\n");
    cr_assert_eq(llm_synthetic(&f, path, LLM_TYPE_F32, 3), LLM_OK, "%s", llm_error_detail(-1));
    cr_assert(llm_file_find(f, "blk.1.attn_v.bias"));
    llm_file_totals(f, &params, &bytes);
    cr_assert_eq(params, count_from_hparams(f));
    llm_file_free(f);
}

Test(synthetic, bad_arguments)
{
    struct llm_file *f = (struct llm_file *)1;
    cr_assert_eq(llm_synthetic(&f, "llama-9b", LLM_TYPE_F32, 0), LLM_E_INVALID);
    cr_assert_null(f);
    const char *d = llm_error_detail(LLM_E_INVALID);
    cr_assert(strstr(d, "llama-9b") && strstr(d, "stories15m"), "%s", d);
    cr_assert_eq(llm_synthetic(&f, "stories260k", LLM_TYPE_U8, 0), LLM_E_INVALID);
    cr_assert_eq(llm_synthetic(&f, "stories260k", (enum llm_type)9, 0), LLM_E_INVALID);
    cr_assert_eq(llm_synthetic(&f, "", LLM_TYPE_F32, 0), LLM_E_INVALID);
    /* names are case-insensitive */
    cr_assert_eq(llm_synthetic(&f, "Stories260K", LLM_TYPE_F32, 0), LLM_OK);
    llm_file_free(f);
}
