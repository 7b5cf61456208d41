/* test_hf.c: Hugging Face model directories.
 *
 * There is no real HF checkpoint in the test data, so the fixtures are made
 * here from real data: stories260K (llama2.c) is written out as an HF
 * directory (config.json, safetensors with HF names and Q/K rows permuted
 * INTO the HF half-split order by the code below, tok512.model), and
 * llm_hf_open must give back tensors bit-identical to the source and the
 * vocabulary of the GGUF conversion of the same model. Tokenizer.json
 * fixtures are hand-written and checked token by token. */
#include <jansson.h>
#include <math.h>
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

/* ---- small helpers ------------------------------------------------------ */

static void write_text(const char *dir, const char *name, const char *text)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *fp = fopen(path, "wb");
    cr_assert(fp, "cannot write %s", path);
    fputs(text, fp);
    fclose(fp);
}

static void copy_file(const char *from, const char *dir, const char *name)
{
    char *text;
    size_t len;
    cr_assert_eq(llm_read_file(from, 1 << 24, &text, &len), LLM_OK);
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *fp = fopen(path, "wb");
    cr_assert(fp);
    cr_assert_eq(fwrite(text, 1, len, fp), len);
    fclose(fp);
    llm_free(text);
}

static int64_t meta_i(struct llm_file *f, const char *path)
{
    int64_t v = -12345;
    cr_expect_eq(llm_meta_get_i64(f->meta, path, &v), LLM_OK, "metadata %s", path);
    return v;
}

static double meta_f(struct llm_file *f, const char *path)
{
    double v = -12345;
    cr_expect_eq(llm_meta_get_f64(f->meta, path, &v), LLM_OK, "metadata %s", path);
    return v;
}

static const char *meta_s(struct llm_file *f, const char *path)
{
    const char *v = "(absent)";
    cr_expect_eq(llm_meta_get_str(f->meta, path, &v), LLM_OK, "metadata %s", path);
    return v;
}

static int meta_b(struct llm_file *f, const char *path)
{
    int v = -1;
    cr_expect_eq(llm_meta_get_bool(f->meta, path, &v), LLM_OK, "metadata %s", path);
    return v;
}

static const char *token(const struct llm_vocab_view *v, uint32_t i, char *buf, size_t n)
{
    uint32_t len = v->offsets[i + 1] - v->offsets[i];
    snprintf(buf, n, "%.*s", (int)len, (const char *)v->bytes + v->offsets[i]);
    return buf;
}

/* ---- the stories260K fixture -------------------------------------------- */

enum { N_HEAD = 8, N_KV = 4, HD = 8 };

/* GGUF name -> HF name, written independently of lib/format/hf.c. */
static void hf_name(const char *gguf, char *out, size_t n)
{
    static const char *const map[][2] = {
        { "token_embd.weight", "model.embed_tokens.weight" },
        { "output_norm.weight", "model.norm.weight" },
        { "output.weight", "lm_head.weight" },
        { "attn_norm", "input_layernorm" },
        { "attn_q", "self_attn.q_proj" },
        { "attn_k", "self_attn.k_proj" },
        { "attn_v", "self_attn.v_proj" },
        { "attn_output", "self_attn.o_proj" },
        { "ffn_norm", "post_attention_layernorm" },
        { "ffn_gate", "mlp.gate_proj" },
        { "ffn_up", "mlp.up_proj" },
        { "ffn_down", "mlp.down_proj" },
    };
    for (int i = 0; i < 3; i++)
        if (strcmp(gguf, map[i][0]) == 0) {
            snprintf(out, n, "%s", map[i][1]);
            return;
        }
    int layer;
    char part[64];
    cr_assert_eq(sscanf(gguf, "blk.%d.%63[a-z_]", &layer, part), 2, "name %s", gguf);
    for (int i = 3; i < 12; i++)
        if (strcmp(part, map[i][0]) == 0) {
            snprintf(out, n, "model.layers.%d.%s.weight", layer, map[i][1]);
            return;
        }
    cr_assert_fail("no HF name for %s", gguf);
}

/* Meta/GGUF interleaved rows -> HF half-split rows: HF row h*hd + j*hd/2 + i
 * holds GGUF row h*hd + 2i + j (the inverse of the import permutation). */
static void to_hf_order(float *dst, const float *src, int64_t rows, int64_t cols, int n_head)
{
    int64_t hd = rows / n_head;
    for (int64_t r = 0; r < rows; r++) {
        int64_t h = r / hd, w = r % hd, j = w / (hd / 2), i = w % (hd / 2);
        memcpy(dst + r * cols, src + (h * hd + 2 * i + j) * cols, (size_t)cols * 4);
    }
}

static struct llm_file *load_stories(void)
{
    const char *bin = llm_test_data("llama2c/stories260K.bin");
    if (!bin)
        return NULL;
    struct llm_import_opts o;
    llm_import_opts_default(&o);
    struct llm_file *src;
    cr_assert_eq(llm_llama2c_open(&src, bin, &o), LLM_OK, "%s", llm_error_detail(-1));
    return src;
}

/* The weights of src under HF names (Q/K in HF order) as a new file; bf16
 * converts every tensor. */
static struct llm_file *hf_weights(struct llm_file *src, int bf16)
{
    struct llm_file *h;
    cr_assert_eq(llm_file_new(&h, "fixture", "hf"), LLM_OK);
    for (size_t i = 0; i < src->n_tensors; i++) {
        struct llm_tensor *t = &src->tensors[i];
        if (t->flags & LLM_TENSOR_AUX)
            continue;
        cr_assert_eq(t->type, LLM_TYPE_F32);
        const void *p;
        cr_assert_eq(llm_tensor_bytes(src, t, &p), LLM_OK);
        int64_t n = llm_tensor_nelements(t);
        float *buf = llm_malloc((size_t)n * 4);
        cr_assert(buf);
        if (strstr(t->name, ".attn_q.") || strstr(t->name, ".attn_k."))
            to_hf_order(buf, p, t->ne[1], t->ne[0], strstr(t->name, ".attn_q.") ? N_HEAD : N_KV);
        else
            memcpy(buf, p, (size_t)n * 4);
        void *data = buf;
        if (bf16) {
            uint16_t *b = llm_malloc((size_t)n * 2);
            cr_assert(b);
            for (int64_t k = 0; k < n; k++)
                b[k] = llm_fp32_to_bf16(buf[k]);
            llm_free(buf);
            data = b;
        }
        cr_assert_eq(llm_file_own(h, data), LLM_OK);
        char name[256];
        hf_name(t->name, name, sizeof name);
        cr_assert_eq(llm_file_add_tensor(h, name, bf16 ? LLM_TYPE_BF16 : LLM_TYPE_F32, t->n_dims,
                                         t->ne, data, NULL),
                     LLM_OK);
    }
    return h;
}

static const char *stories_config =
    "{\n"
    "  \"architectures\": [\"LlamaForCausalLM\"],\n"
    "  \"model_type\": \"llama\",\n"
    "  \"hidden_size\": 64,\n"
    "  \"intermediate_size\": 172,\n"
    "  \"num_hidden_layers\": 5,\n"
    "  \"num_attention_heads\": 8,\n"
    "  \"num_key_value_heads\": 4,\n"
    "  \"vocab_size\": 512,\n"
    "  \"max_position_embeddings\": 512,\n"
    "  \"rms_norm_eps\": 1e-05,\n"
    "  \"rope_theta\": 10000.0,\n"
    "  \"tie_word_embeddings\": true,\n"
    "  \"bos_token_id\": 1,\n"
    "  \"eos_token_id\": 2,\n"
    "  \"torch_dtype\": \"float32\"\n"
    "}\n";

/* Write the HF directory; shards = 0: model.safetensors, 2: an index and two
 * shards. Returns the directory. */
static const char *write_stories_dir(struct llm_file *src, int bf16, int shards)
{
    const char *dir = llm_test_tmpdir();
    struct llm_file *h = hf_weights(src, bf16);
    char path[1024];
    if (!shards) {
        snprintf(path, sizeof path, "%s/model.safetensors", dir);
        cr_assert_eq(llm_safetensors_write(h, path), LLM_OK, "%s", llm_error_detail(-1));
    } else {
        json_t *wm = json_object();
        for (int s = 0; s < 2; s++) {
            struct llm_file *part;
            cr_assert_eq(llm_file_new(&part, "part", "hf"), LLM_OK);
            char file[64];
            snprintf(file, sizeof file, "model-%05d-of-00002.safetensors", s + 1);
            for (size_t i = s; i < h->n_tensors; i += 2) {
                struct llm_tensor *t = &h->tensors[i];
                cr_assert_eq(llm_file_add_tensor(part, t->name, t->type, t->n_dims, t->ne,
                                                 t->data, NULL),
                             LLM_OK);
                json_object_set_new(wm, t->name, json_string(file));
            }
            snprintf(path, sizeof path, "%s/%s", dir, file);
            cr_assert_eq(llm_safetensors_write(part, path), LLM_OK, "%s", llm_error_detail(-1));
            llm_file_free(part);
        }
        json_t *idx = json_pack("{s:{s:i},s:o}", "metadata", "total_size", 1040128, "weight_map",
                                wm);
        snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
        cr_assert_eq(json_dump_file(idx, path, JSON_INDENT(2)), 0);
        json_decref(idx);
    }
    llm_file_free(h);
    write_text(dir, "config.json", stories_config);
    const char *tok = llm_test_data("llama2c/tok512.model");
    cr_assert(tok);
    copy_file(tok, dir, "tokenizer.model");
    return dir;
}

/* Every weight of src is in got with the same shape and the same bytes
 * (bf16: the bf16 rounding of the source). */
static void expect_same_weights(struct llm_file *src, struct llm_file *got, int bf16)
{
    size_t n_src = 0, n_got = 0;
    for (size_t i = 0; i < got->n_tensors; i++)
        n_got += !(got->tensors[i].flags & LLM_TENSOR_AUX);
    for (size_t i = 0; i < src->n_tensors; i++) {
        struct llm_tensor *s = &src->tensors[i];
        if (s->flags & LLM_TENSOR_AUX)
            continue;
        n_src++;
        struct llm_tensor *g = llm_file_find(got, s->name);
        cr_assert(g, "tensor %s missing", s->name);
        cr_expect_eq(g->type, bf16 ? LLM_TYPE_BF16 : LLM_TYPE_F32, "%s type", s->name);
        cr_expect_eq(g->n_dims, s->n_dims, "%s dims", s->name);
        cr_expect_eq(memcmp(g->ne, s->ne, sizeof s->ne), 0, "%s shape", s->name);
        const void *sp;
        cr_assert_eq(llm_tensor_bytes(src, s, &sp), LLM_OK);
        void *gp = llm_malloc((size_t)g->nbytes);
        cr_assert(gp);
        cr_assert_eq(llm_tensor_read(got, g, gp), LLM_OK, "%s", llm_error_detail(-1));
        int64_t n = llm_tensor_nelements(s);
        if (!bf16) {
            cr_expect_eq(g->nbytes, s->nbytes);
            cr_expect_eq(memcmp(gp, sp, (size_t)s->nbytes), 0, "%s bytes differ", s->name);
        } else {
            const float *sf = sp;
            const uint16_t *gb = gp;
            int64_t bad = 0;
            for (int64_t k = 0; k < n; k++)
                bad += gb[k] != llm_fp32_to_bf16(sf[k]);
            cr_expect_eq(bad, 0, "%s: %lld values differ", s->name, (long long)bad);
        }
        if (strstr(s->name, ".attn_q.") || strstr(s->name, ".attn_k."))
            cr_expect(!g->data && g->fill, "%s is permuted lazily", s->name);
        llm_free(gp);
    }
    cr_expect_eq(n_got, n_src, "no extra weights");
    cr_expect_null(llm_file_find(got, "output.weight"), "tied: no output.weight");
}

static void expect_stories_meta(struct llm_file *f)
{
    cr_expect_str_eq(f->format, "hf");
    cr_expect_str_eq(meta_s(f, "architecture"), "llama");
    cr_expect_eq(meta_i(f, "hparams.vocab_size"), 512);
    cr_expect_eq(meta_i(f, "hparams.context_length"), 512);
    cr_expect_eq(meta_i(f, "hparams.embedding_length"), 64);
    cr_expect_eq(meta_i(f, "hparams.block_count"), 5);
    cr_expect_eq(meta_i(f, "hparams.feed_forward_length"), 172);
    cr_expect_eq(meta_i(f, "hparams.head_count"), 8);
    cr_expect_eq(meta_i(f, "hparams.head_count_kv"), 4);
    cr_expect_eq(meta_i(f, "hparams.head_dim"), 8);
    cr_expect_eq(meta_i(f, "hparams.rope_dim"), 8);
    cr_expect_eq((float)meta_f(f, "hparams.rms_norm_eps"), 1e-5f);
    cr_expect_eq(meta_f(f, "hparams.rope_theta"), 10000.0);
    cr_expect_str_eq(meta_s(f, "hparams.rope_type"), "norm");
    cr_expect_eq(meta_b(f, "hparams.tie_embeddings"), 1);
    cr_expect_str_eq(meta_s(f, "source.format"), "hf");
    cr_expect_eq(llm_meta_get(f->meta, "hparams.rope_scaling"), NULL);
}

/* The vocabulary equals the GGUF conversion's (tokens, scores) and has the
 * SentencePiece types. */
static void expect_stories_vocab(struct llm_file *f)
{
    struct llm_vocab_view v, r;
    cr_assert_eq(llm_file_vocab(f, &v), LLM_OK, "%s", llm_error_detail(-1));
    cr_assert_eq(v.n_tokens, 512);
    for (uint32_t i = 0; i < 512; i++) {
        int32_t type = i == 0 ? 2 : i <= 2 ? 3 : i <= 258 ? 6 : 1;
        cr_expect_eq(v.types[i], type, "token %u type", i);
    }
    cr_expect_str_eq(meta_s(f, "tokenizer.model"), "llama");
    cr_expect_eq(meta_i(f, "tokenizer.bos_id"), 1);
    cr_expect_eq(meta_i(f, "tokenizer.eos_id"), 2);
    cr_expect_eq(meta_i(f, "tokenizer.unk_id"), 0);
    cr_expect_eq(meta_b(f, "tokenizer.add_space_prefix"), 1);

    const char *gpath = llm_test_data("gguf/stories260K.gguf");
    if (!gpath) {
        cr_log_warn("gguf/stories260K.gguf absent: vocabulary not compared with the GGUF");
        return;
    }
    struct llm_import_opts o;
    llm_import_opts_default(&o);
    struct llm_file *g;
    cr_assert_eq(llm_gguf_open(&g, gpath, &o), LLM_OK, "%s", llm_error_detail(-1));
    cr_assert_eq(llm_file_vocab(g, &r), LLM_OK);
    cr_assert_eq(r.n_tokens, v.n_tokens);
    cr_assert(r.scores && v.scores);
    for (uint32_t i = 0; i < v.n_tokens; i++) {
        uint32_t a = v.offsets[i + 1] - v.offsets[i], b = r.offsets[i + 1] - r.offsets[i];
        cr_expect(a == b && memcmp(v.bytes + v.offsets[i], r.bytes + r.offsets[i], a) == 0,
                  "token %u text", i);
        cr_expect_eq(v.scores[i], r.scores[i], "token %u score", i);
    }
    llm_file_free(g);
}

Test(hf, stories260k_f32)
{
    struct llm_file *src = load_stories();
    if (!src)
        cr_skip_test("llama2c/stories260K.bin is absent");
    if (!llm_test_data("llama2c/tok512.model"))
        cr_skip_test("llama2c/tok512.model is absent");
    const char *dir = write_stories_dir(src, 0, 0);
    struct llm_import_opts o;
    llm_import_opts_default(&o);
    struct llm_file *f;
    cr_assert_eq(llm_hf_open(&f, dir, &o), LLM_OK, "%s", llm_error_detail(-1));
    expect_same_weights(src, f, 0);
    expect_stories_meta(f);
    expect_stories_vocab(f);
    cr_expect_str_eq(f->tensors[0].name, "token_embd.weight", "GGUF tensor order");
    cr_expect_str_eq(f->tensors[1].name, "blk.0.attn_norm.weight");
    llm_file_free(f);

    /* llm_import recognises the directory */
    cr_assert_eq(llm_import(&f, dir, &o), LLM_OK, "%s", llm_error_detail(-1));
    cr_expect_str_eq(f->format, "hf");
    llm_file_free(f);
    llm_file_free(src);
}

Test(hf, stories260k_sharded)
{
    struct llm_file *src = load_stories();
    if (!src)
        cr_skip_test("llama2c/stories260K.bin is absent");
    if (!llm_test_data("llama2c/tok512.model"))
        cr_skip_test("llama2c/tok512.model is absent");
    const char *dir = write_stories_dir(src, 0, 2);
    char path[1024];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    cr_assert_neq(access(path, F_OK), 0);
    struct llm_file *f;
    cr_assert_eq(llm_hf_open(&f, dir, NULL), LLM_OK, "%s", llm_error_detail(-1));
    expect_same_weights(src, f, 0);
    expect_stories_meta(f);
    cr_expect_eq(f->n_maps, 2, "both shards mapped");
    llm_file_free(f);

    /* an index that puts a tensor in the wrong shard */
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    json_t *idx = json_load_file(path, 0, NULL);
    cr_assert(idx);
    json_t *wm = json_object_get(idx, "weight_map");
    const char *other = strcmp(json_string_value(json_object_get(wm, "model.embed_tokens.weight")),
                               "model-00001-of-00002.safetensors") == 0
                            ? "model-00002-of-00002.safetensors"
                            : "model-00001-of-00002.safetensors";
    char orig[64];
    snprintf(orig, sizeof orig, "%s",
             json_string_value(json_object_get(wm, "model.embed_tokens.weight")));
    json_object_set_new(wm, "model.embed_tokens.weight", json_string(other));
    cr_assert_eq(json_dump_file(idx, path, 0), 0);
    llm_status s = llm_hf_open(&f, dir, NULL);
    cr_expect_eq(s, LLM_E_FORMAT);
    cr_expect(strstr(llm_error_detail(s), "model.embed_tokens.weight"), "%s",
              llm_error_detail(s));
    /* an index entry with no tensor behind it */
    json_object_set_new(wm, "model.embed_tokens.weight", json_string(orig));
    json_object_set_new(wm, "model.layers.0.mlp.extra.weight",
                        json_string("model-00001-of-00002.safetensors"));
    cr_assert_eq(json_dump_file(idx, path, 0), 0);
    s = llm_hf_open(&f, dir, NULL);
    cr_expect_eq(s, LLM_E_FORMAT);
    cr_expect(strstr(llm_error_detail(s), "'model.layers.0.mlp.extra.weight' is not in its shard"),
              "%s", llm_error_detail(s));
    json_object_del(wm, "model.layers.0.mlp.extra.weight");
    /* a shard that is not there */
    json_object_set_new(wm, "model.embed_tokens.weight", json_string("model-9.safetensors"));
    cr_assert_eq(json_dump_file(idx, path, 0), 0);
    s = llm_hf_open(&f, dir, NULL);
    cr_expect_eq(s, LLM_E_IO);
    cr_expect(strstr(llm_error_detail(s), "model-9.safetensors"), "%s", llm_error_detail(s));
    json_object_set_new(wm, "model.embed_tokens.weight", json_string("../x.safetensors"));
    cr_assert_eq(json_dump_file(idx, path, 0), 0);
    s = llm_hf_open(&f, dir, NULL);
    cr_expect_eq(s, LLM_E_FORMAT);
    cr_expect(strstr(llm_error_detail(s), "bad shard file name"), "%s", llm_error_detail(s));
    json_decref(idx);
    llm_file_free(src);
}

Test(hf, stories260k_bf16)
{
    struct llm_file *src = load_stories();
    if (!src)
        cr_skip_test("llama2c/stories260K.bin is absent");
    if (!llm_test_data("llama2c/tok512.model"))
        cr_skip_test("llama2c/tok512.model is absent");
    const char *dir = write_stories_dir(src, 1, 0);
    struct llm_file *f;
    cr_assert_eq(llm_hf_open(&f, dir, NULL), LLM_OK, "%s", llm_error_detail(-1));
    expect_same_weights(src, f, 1);
    llm_file_free(f);
    llm_file_free(src);
}

Test(hf, tokenizer_config_and_generation_config)
{
    struct llm_file *src = load_stories();
    if (!src)
        cr_skip_test("llama2c/stories260K.bin is absent");
    if (!llm_test_data("llama2c/tok512.model"))
        cr_skip_test("llama2c/tok512.model is absent");
    const char *dir = write_stories_dir(src, 0, 0);
    write_text(dir, "tokenizer_config.json",
               "{\"add_bos_token\": true, \"add_eos_token\": false,\n"
               /* transformers' int(1e30) for an unset length, past int64 */
               " \"model_max_length\": 1000000000000000019884624838656,\n"
               " \"bos_token\": \"<s>\",\n"
               " \"eos_token\": {\"content\": \"</s>\", \"lstrip\": false, \"special\": true},\n"
               " \"unk_token\": \"<unk>\", \"pad_token\": null,\n"
               " \"added_tokens_decoder\": {\"2\": {\"content\": \"</s>\", \"special\": true},\n"
               "    \"511\": {\"content\": \"<|im_end|>\", \"special\": false}},\n"
               " \"chat_template\": [{\"name\": \"default\", \"template\": \"{{ messages }}\"},\n"
               "                   {\"name\": \"tool_use\", \"template\": \"{{ tools }}\"}]}\n");
    write_text(dir, "generation_config.json",
               "{\"bos_token_id\": 1, \"eos_token_id\": [2, 5], \"temperature\": 0.7,\n"
               " \"top_p\": 0.9, \"top_k\": 40, \"do_sample\": true}\n");
    struct llm_file *f;
    cr_assert_eq(llm_hf_open(&f, dir, NULL), LLM_OK, "%s", llm_error_detail(-1));
    cr_expect_eq(meta_b(f, "tokenizer.add_bos"), 1);
    cr_expect_eq(meta_b(f, "tokenizer.add_eos"), 0);
    cr_expect_eq(meta_i(f, "tokenizer.bos_id"), 1);
    cr_expect_eq(meta_i(f, "tokenizer.eos_id"), 2);
    cr_expect_eq(meta_i(f, "tokenizer.unk_id"), 0);
    cr_expect_str_eq(meta_s(f, "chat_template"), "{{ messages }}");
    struct llm_meta *ct = llm_meta_get(f->meta, "chat_templates");
    cr_assert(ct);
    struct llm_meta *tu = llm_meta_child(ct, "tool_use");
    cr_assert(tu && tu->kind == LLM_META_STR);
    cr_expect_str_eq(tu->s, "{{ tools }}");
    cr_expect(fabs(meta_f(f, "generation.temperature") - 0.7) < 1e-12);
    cr_expect(fabs(meta_f(f, "generation.top_p") - 0.9) < 1e-12);
    cr_expect_eq(meta_i(f, "generation.top_k"), 40);
    cr_expect_eq(meta_i(f, "generation.bos_token_id"), 1);
    cr_expect_eq(meta_b(f, "generation.do_sample"), 1);
    struct llm_meta *eos = llm_meta_get(f->meta, "generation.eos_token_id");
    cr_assert(eos && eos->kind == LLM_META_SEQ && eos->n == 2);
    cr_expect_eq(eos->items[0]->i, 2);
    cr_expect_eq(eos->items[1]->i, 5);
    /* added_tokens_decoder overrides a piece: a control token by its looks */
    struct llm_vocab_view v;
    cr_assert_eq(llm_file_vocab(f, &v), LLM_OK);
    char buf[64];
    cr_expect_str_eq(token(&v, 511, buf, sizeof buf), "<|im_end|>");
    cr_expect_eq(v.types[511], 3);
    cr_expect_eq(v.scores[511], -1000.0f);
    llm_file_free(f);

    /* chat_template.jinja wins over tokenizer_config.json */
    write_text(dir, "chat_template.jinja", "{% for m in messages %}{{ m }}{% endfor %}");
    cr_assert_eq(llm_hf_open(&f, dir, NULL), LLM_OK, "%s", llm_error_detail(-1));
    cr_expect_str_eq(meta_s(f, "chat_template"), "{% for m in messages %}{{ m }}{% endfor %}");
    llm_file_free(f);
    llm_file_free(src);
}

/* ---- bad directories ------------------------------------------------------ */

static void expect_open_fails(const char *dir, llm_status want, const char *sub1, const char *sub2)
{
    struct llm_file *f = (struct llm_file *)1;
    llm_error_clear();
    llm_status s = llm_hf_open(&f, dir, NULL);
    const char *d = llm_error_detail(s);
    cr_expect_eq(s, want, "status %d: %s", s, d);
    cr_expect_null(f);
    cr_expect(strstr(d, dir), "detail '%s' names the directory", d);
    cr_expect(strstr(d, sub1), "detail '%s' lacks '%s'", d, sub1);
    if (sub2)
        cr_expect(strstr(d, sub2), "detail '%s' lacks '%s'", d, sub2);
}

/* Replace the first occurrence of `from` in the directory's config.json. */
static void edit_config(const char *dir, const char *from, const char *to)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/config.json", dir);
    char *text;
    size_t len;
    cr_assert_eq(llm_read_file(path, 1 << 20, &text, &len), LLM_OK);
    char *p = strstr(text, from);
    cr_assert(p, "'%s' not in config.json", from);
    char out[8192];
    snprintf(out, sizeof out, "%.*s%s%s", (int)(p - text), text, to, p + strlen(from));
    llm_free(text);
    write_text(dir, "config.json", out);
}

Test(hf, bad_directories)
{
    struct llm_file *src = load_stories();
    if (!src)
        cr_skip_test("llama2c/stories260K.bin is absent");
    if (!llm_test_data("llama2c/tok512.model"))
        cr_skip_test("llama2c/tok512.model is absent");
    const char *dir = write_stories_dir(src, 0, 0);
    char d[512];
    snprintf(d, sizeof d, "%s", dir);

    edit_config(d, "\"hidden_size\": 64,", "");
    char want[1024];
    snprintf(want, sizeof want, "%s/config.json: missing key 'hidden_size'", d);
    expect_open_fails(d, LLM_E_FORMAT, want, NULL);
    write_text(d, "config.json", stories_config);

    edit_config(d, "\"model_type\": \"llama\"", "\"model_type\": \"gemma\"");
    expect_open_fails(d, LLM_E_UNSUPPORTED, "config.json", "model_type 'gemma'");
    write_text(d, "config.json", stories_config);

    edit_config(d, "\"hidden_size\": 64", "\"hidden_size\": 64.5");
    expect_open_fails(d, LLM_E_FORMAT, "config.json", "'hidden_size' is not an integer");
    write_text(d, "config.json", stories_config);

    write_text(d, "config.json", "{\"model_type\": \"llama\", \"hidden_size\": ");
    expect_open_fails(d, LLM_E_FORMAT, "config.json", "JSON");
    write_text(d, "config.json", stories_config);

    edit_config(d, "\"num_key_value_heads\": 4", "\"num_key_value_heads\": 3");
    expect_open_fails(d, LLM_E_FORMAT, "config.json", "num_key_value_heads");
    write_text(d, "config.json", stories_config);

    /* config and weights disagree */
    edit_config(d, "\"intermediate_size\": 172", "\"intermediate_size\": 170");
    expect_open_fails(d, LLM_E_FORMAT, "model.safetensors", "does not match config.json");
    write_text(d, "config.json", stories_config);

    edit_config(d, "\"num_hidden_layers\": 5", "\"num_hidden_layers\": 6");
    expect_open_fails(d, LLM_E_FORMAT, "missing tensor", "model.layers.5.input_layernorm.weight");
    write_text(d, "config.json", stories_config);

    edit_config(d, "\"num_hidden_layers\": 5", "\"num_hidden_layers\": 4");
    expect_open_fails(d, LLM_E_FORMAT, "model.layers.4", "num_hidden_layers is 4");
    write_text(d, "config.json", stories_config);

    edit_config(d, "\"rope_theta\": 10000.0", "\"rope_scaling\": {\"type\": \"mrope\", "
                                              "\"factor\": 2}");
    expect_open_fails(d, LLM_E_UNSUPPORTED, "config.json", "mrope");
    write_text(d, "config.json", stories_config);
    edit_config(d, "\"rope_theta\": 10000.0", "\"rope_scaling\": {\"type\": \"longrope\", "
                                              "\"factor\": 2}");
    expect_open_fails(d, LLM_E_FORMAT, "config.json", "LongRoPE needs original_max_position");
    write_text(d, "config.json", stories_config);

    /* a damaged model.safetensors */
    char path[1024];
    snprintf(path, sizeof path, "%s/model.safetensors", d);
    char *text;
    size_t len;
    cr_assert_eq(llm_read_file(path, 1 << 24, &text, &len), LLM_OK);
    FILE *fp = fopen(path, "wb");
    cr_assert(fp);
    fwrite(text, 1, len - 100, fp);
    fclose(fp);
    expect_open_fails(d, LLM_E_FORMAT, "model.safetensors", "past end of file");
    unlink(path);
    expect_open_fails(d, LLM_E_NOTFOUND, "no model.safetensors", NULL);
    llm_free(text);

    snprintf(path, sizeof path, "%s/config.json", d);
    unlink(path);
    expect_open_fails(d, LLM_E_NOTFOUND, "no config.json", NULL);
    llm_file_free(src);
}

/* ---- a qwen2 directory: no permutation, biases, yarn, F16 ----------------- */

Test(hf, qwen2_keeps_hf_order_and_biases)
{
    /* H = 8, 2 heads of 4, 1 KV head, I = 12, 1 layer, V = 16, untied */
    struct llm_file *h;
    cr_assert_eq(llm_file_new(&h, "qwen", "hf"), LLM_OK);
    static const struct { const char *name; int64_t ne0, ne1; } ts[] = {
        { "model.embed_tokens.weight", 8, 16 },
        { "model.layers.0.input_layernorm.weight", 8, 0 },
        { "model.layers.0.self_attn.q_proj.weight", 8, 8 },
        { "model.layers.0.self_attn.q_proj.bias", 8, 0 },
        { "model.layers.0.self_attn.k_proj.weight", 8, 4 },
        { "model.layers.0.self_attn.k_proj.bias", 4, 0 },
        { "model.layers.0.self_attn.v_proj.weight", 8, 4 },
        { "model.layers.0.self_attn.v_proj.bias", 4, 0 },
        { "model.layers.0.self_attn.o_proj.weight", 8, 8 },
        { "model.layers.0.post_attention_layernorm.weight", 8, 0 },
        { "model.layers.0.mlp.gate_proj.weight", 8, 12 },
        { "model.layers.0.mlp.up_proj.weight", 8, 12 },
        { "model.layers.0.mlp.down_proj.weight", 12, 8 },
        { "model.norm.weight", 8, 0 },
        { "lm_head.weight", 8, 16 },
        { "model.layers.0.self_attn.rotary_emb.inv_freq", 2, 0 },
    };
    enum { NT = sizeof ts / sizeof ts[0] };
    for (int i = 0; i < NT; i++) {
        int64_t ne[2] = { ts[i].ne0, ts[i].ne1 ? ts[i].ne1 : 1 };
        int64_t n = ne[0] * ne[1];
        int f16 = strstr(ts[i].name, "proj.weight") != NULL;
        void *data = llm_malloc((size_t)n * 4);
        cr_assert(data);
        for (int64_t k = 0; k < n; k++) {
            float v = (float)(i * 100 + k) * 0.01f;
            if (f16)
                ((uint16_t *)data)[k] = llm_fp32_to_fp16(v);
            else
                ((float *)data)[k] = v;
        }
        cr_assert_eq(llm_file_own(h, data), LLM_OK);
        cr_assert_eq(llm_file_add_tensor(h, ts[i].name, f16 ? LLM_TYPE_F16 : LLM_TYPE_F32,
                                         ts[i].ne1 ? 2 : 1, ne, data, NULL),
                     LLM_OK);
    }
    const char *dir = llm_test_tmpdir();
    char path[1024];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    cr_assert_eq(llm_safetensors_write(h, path), LLM_OK, "%s", llm_error_detail(-1));
    write_text(dir, "config.json",
               "{\"architectures\": [\"Qwen2ForCausalLM\"], \"model_type\": \"qwen2\",\n"
               " \"hidden_size\": 8, \"intermediate_size\": 12, \"num_hidden_layers\": 1,\n"
               " \"num_attention_heads\": 2, \"num_key_value_heads\": 1, \"vocab_size\": 16,\n"
               " \"max_position_embeddings\": 32768, \"rms_norm_eps\": 1e-06,\n"
               " \"rope_theta\": 1000000.0, \"tie_word_embeddings\": false,\n"
               " \"rope_scaling\": {\"type\": \"yarn\", \"factor\": 4.0,\n"
               "                  \"original_max_position_embeddings\": 32768}}\n");
    struct llm_file *f;
    cr_assert_eq(llm_hf_open(&f, dir, NULL), LLM_OK, "%s", llm_error_detail(-1));
    cr_expect_str_eq(meta_s(f, "architecture"), "qwen2");
    cr_expect_str_eq(meta_s(f, "hparams.rope_type"), "neox");
    cr_expect_eq(meta_f(f, "hparams.rope_theta"), 1000000.0);
    cr_expect_eq(meta_i(f, "hparams.head_dim"), 4);
    cr_expect_eq(meta_b(f, "hparams.tie_embeddings"), 0);
    cr_expect_str_eq(meta_s(f, "hparams.rope_scaling.type"), "yarn");
    cr_expect_eq(meta_f(f, "hparams.rope_scaling.factor"), 4.0);
    cr_expect_eq(meta_i(f, "hparams.rope_scaling.original_context_length"), 32768);
    cr_expect_str_eq(meta_s(f, "tokenizer.model"), "none");
    static const char *const gguf[NT - 1] = {
        "token_embd.weight", "blk.0.attn_norm.weight", "blk.0.attn_q.weight",
        "blk.0.attn_q.bias", "blk.0.attn_k.weight", "blk.0.attn_k.bias",
        "blk.0.attn_v.weight", "blk.0.attn_v.bias", "blk.0.attn_output.weight",
        "blk.0.ffn_norm.weight", "blk.0.ffn_gate.weight", "blk.0.ffn_up.weight",
        "blk.0.ffn_down.weight", "output_norm.weight", "output.weight",
    };
    cr_expect_eq(f->n_tensors, NT - 1, "inv_freq dropped");
    for (int i = 0; i < NT - 1; i++) {
        struct llm_tensor *t = llm_file_find(f, gguf[i]);
        cr_assert(t, "%s missing", gguf[i]);
        struct llm_tensor *s = llm_file_find(h, ts[i].name);
        cr_expect_eq(t->type, s->type);
        cr_expect_eq(memcmp(t->ne, s->ne, sizeof t->ne), 0, "%s shape", gguf[i]);
        void *buf = llm_malloc((size_t)t->nbytes);
        cr_assert_eq(llm_tensor_read(f, t, buf), LLM_OK);
        cr_expect_eq(memcmp(buf, s->data, (size_t)t->nbytes), 0, "%s unchanged", gguf[i]);
        llm_free(buf);
    }
    llm_file_free(f);

    /* a missing required bias */
    llm_file_remove(h, "model.layers.0.self_attn.k_proj.bias");
    cr_assert_eq(llm_safetensors_write(h, path), LLM_OK);
    expect_open_fails(dir, LLM_E_FORMAT, "missing tensor", "k_proj.bias");
    /* a dtype the importer cannot keep */
    llm_file_free(h);
}

Test(hf, llama3_rope_parameters)
{
    /* rope_parameters (transformers v5) with llama3 scaling; weights of a
     * 1-layer model are not needed to reach the config checks, so a model
     * without weights must fail only after the config was understood. */
    const char *dir = llm_test_tmpdir();
    write_text(dir, "config.json",
               "{\"model_type\": \"llama\", \"hidden_size\": 8, \"intermediate_size\": 12,\n"
               " \"num_hidden_layers\": 1, \"num_attention_heads\": 2, \"vocab_size\": 16,\n"
               " \"max_position_embeddings\": 131072, \"head_dim\": 4,\n"
               " \"rope_parameters\": {\"rope_type\": \"llama3\", \"rope_theta\": 500000.0,\n"
               "   \"factor\": 8.0, \"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0,\n"
               "   \"original_max_position_embeddings\": 8192}}\n");
    expect_open_fails(dir, LLM_E_NOTFOUND, "no model.safetensors", NULL);
    /* now with weights: an all-F32 model written from a synthetic file */
    struct llm_file *h;
    cr_assert_eq(llm_file_new(&h, "l3", "hf"), LLM_OK);
    static float zero[8 * 16];
    const struct { const char *n; int64_t a, b; } ts[] = {
        { "model.embed_tokens.weight", 8, 16 }, { "model.norm.weight", 8, 1 },
        { "model.layers.0.input_layernorm.weight", 8, 1 },
        { "model.layers.0.post_attention_layernorm.weight", 8, 1 },
        { "model.layers.0.self_attn.q_proj.weight", 8, 8 },
        { "model.layers.0.self_attn.k_proj.weight", 8, 8 },
        { "model.layers.0.self_attn.v_proj.weight", 8, 8 },
        { "model.layers.0.self_attn.o_proj.weight", 8, 8 },
        { "model.layers.0.mlp.gate_proj.weight", 8, 12 },
        { "model.layers.0.mlp.up_proj.weight", 8, 12 },
        { "model.layers.0.mlp.down_proj.weight", 12, 8 },
    };
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) {
        int64_t ne[2] = { ts[i].a, ts[i].b };
        cr_assert_eq(llm_file_add_tensor(h, ts[i].n, LLM_TYPE_F32, ts[i].b > 1 ? 2 : 1, ne, zero,
                                         NULL),
                     LLM_OK);
    }
    char path[1024];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    cr_assert_eq(llm_safetensors_write(h, path), LLM_OK);
    struct llm_file *f;
    cr_assert_eq(llm_hf_open(&f, dir, NULL), LLM_OK, "%s", llm_error_detail(-1));
    cr_expect_eq(meta_f(f, "hparams.rope_theta"), 500000.0);
    cr_expect_eq(meta_i(f, "hparams.head_count_kv"), 2, "defaults to the head count");
    cr_expect_str_eq(meta_s(f, "hparams.rope_scaling.type"), "llama3");
    cr_expect_eq(meta_f(f, "hparams.rope_scaling.factor"), 8.0);
    cr_expect_eq(meta_f(f, "hparams.rope_scaling.low_freq_factor"), 1.0);
    cr_expect_eq(meta_f(f, "hparams.rope_scaling.high_freq_factor"), 4.0);
    cr_expect_eq(meta_i(f, "hparams.rope_scaling.original_context_length"), 8192);
    cr_expect_eq(meta_b(f, "hparams.tie_embeddings"), 1, "no lm_head: tied");
    cr_expect_eq((float)meta_f(f, "hparams.rms_norm_eps"), 1e-6f, "transformers default");
    llm_file_free(f);
    llm_file_free(h);
}

/* ---- the permutation ------------------------------------------------------ */

Test(hf, permute_qk_matches_formats_md)
{
    /* formats.md §1.10: hd = 8, one head: GGUF rows take HF rows
     * [0, 4, 1, 5, 2, 6, 3, 7]. */
    int32_t src[8], dst[8];
    for (int i = 0; i < 8; i++)
        src[i] = i;
    llm_hf_permute_qk(dst, src, 8, 4, 1);
    static const int32_t want1[8] = { 0, 4, 1, 5, 2, 6, 3, 7 };
    cr_expect_eq(memcmp(dst, want1, sizeof dst), 0);
    /* two heads of 4 */
    llm_hf_permute_qk(dst, src, 8, 4, 2);
    static const int32_t want2[8] = { 0, 2, 1, 3, 4, 6, 5, 7 };
    cr_expect_eq(memcmp(dst, want2, sizeof dst), 0);
    /* rows of 2 elements move as a whole */
    int32_t m[8] = { 10, 11, 20, 21, 30, 31, 40, 41 }, o[8];
    llm_hf_permute_qk(o, m, 4, 8, 1);
    static const int32_t want3[8] = { 10, 11, 30, 31, 20, 21, 40, 41 };
    cr_expect_eq(memcmp(o, want3, sizeof o), 0);
}

/* ---- tokenizer.json -------------------------------------------------------- */

static const char *bpe_json =
    "{\"version\": \"1.0\", \"truncation\": null, \"padding\": null,\n"
    " \"added_tokens\": [\n"
    "  {\"id\": 0, \"content\": \"<|endoftext|>\", \"single_word\": false, \"lstrip\": false,\n"
    "   \"rstrip\": false, \"normalized\": false, \"special\": true},\n"
    "  {\"id\": 12, \"content\": \"<|im_start|>\", \"special\": true},\n"
    "  {\"id\": 13, \"content\": \"<tool>\", \"special\": false},\n"
    "  {\"id\": 11, \"content\": \"<|im_end|>\", \"special\": false}],\n"
    " \"normalizer\": null,\n"
    " \"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": [\n"
    "   {\"type\": \"Digits\", \"individual_digits\": true},\n"
    "   {\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"trim_offsets\": true,\n"
    "    \"use_regex\": true}]},\n"
    " \"post_processor\": {\"type\": \"ByteLevel\", \"add_prefix_space\": true},\n"
    " \"decoder\": {\"type\": \"ByteLevel\", \"add_prefix_space\": true},\n"
    " \"model\": {\"type\": \"BPE\", \"dropout\": null, \"unk_token\": null,\n"
    "   \"continuing_subword_prefix\": null, \"end_of_word_suffix\": null,\n"
    "   \"fuse_unk\": false, \"byte_fallback\": false, \"ignore_merges\": false,\n"
    "   \"vocab\": {\"<|endoftext|>\": 0, \"a\": 1, \"b\": 2, \"\\u0120\": 3, \"ab\": 4,\n"
    "             \"\\u0120a\": 5, \"\\u0120ab\": 6, \"x y\": 7, \"xy\": 8, \"1\": 10},\n"
    "   \"merges\": [\"a b\", [\"\\u0120\", \"a\"], [\"\\u0120a\", \"b\"], [\"x y\", \"z\"],\n"
    "                \"#version: 0.2\", \"\\u0120 ab\"]}}\n";

static struct llm_file *tok_json(const char *json, uint32_t min_tokens, llm_status *s)
{
    struct llm_file *f;
    cr_assert_eq(llm_file_new(&f, "tokenizer.json", "hf"), LLM_OK);
    *s = llm_hf_tokenizer_json(f, json, strlen(json), "tokenizer.json", min_tokens);
    return f;
}

Test(hf, tokenizer_json_byte_level_bpe)
{
    llm_status s;
    struct llm_file *f = tok_json(bpe_json, 16, &s);
    cr_assert_eq(s, LLM_OK, "%s", llm_error_detail(s));
    struct llm_vocab_view v;
    cr_assert_eq(llm_file_vocab(f, &v), LLM_OK);
    cr_assert_eq(v.n_tokens, 16, "padded to config.json's vocab_size");
    static const char *const want[16] = {
        "<|endoftext|>", "a", "b", "\u0120", "ab", "\u0120a", "\u0120ab", "x y",
        "xy", "[PAD9]", "1", "<|im_end|>", "<|im_start|>", "<tool>", "[PAD14]", "[PAD15]",
    };
    static const int32_t types[16] = { 3, 1, 1, 1, 1, 1, 1, 1, 1, 5, 1, 3, 3, 4, 5, 5 };
    char buf[64];
    for (uint32_t i = 0; i < 16; i++) {
        cr_expect_str_eq(token(&v, i, buf, sizeof buf), want[i], "token %u", i);
        cr_expect_eq(v.types[i], types[i], "token %u type %d", i, v.types[i]);
    }
    cr_expect_null(v.scores, "byte-level BPE has no scores");
    static const char *const merges[5] = {
        "a b", "\u0120 a", "\u0120a b", "x\u0120y z", "\u0120 ab",
    };
    cr_assert_eq(v.n_merges, 5, "'#version' line skipped");
    for (uint32_t i = 0; i < 5; i++) {
        uint32_t n = v.merge_offsets[i + 1] - v.merge_offsets[i];
        cr_expect(n == strlen(merges[i]) &&
                      memcmp(v.merge_bytes + v.merge_offsets[i], merges[i], n) == 0,
                  "merge %u: '%.*s'", i, (int)n, (const char *)v.merge_bytes + v.merge_offsets[i]);
    }
    cr_expect_str_eq(meta_s(f, "tokenizer.model"), "gpt2");
    cr_expect_str_eq(meta_s(f, "tokenizer.pre"), "smollm");
    struct llm_meta *re = llm_meta_get(f->meta, "tokenizer.pre_regex");
    cr_assert(re && re->kind == LLM_META_SEQ && re->n == 2);
    cr_expect_str_eq(re->items[0]->s, "\\p{N}");
    cr_expect_str_eq(re->items[1]->s,
                     "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+");
    cr_expect_eq(meta_b(f, "tokenizer.add_space_prefix"), 0);
    llm_file_free(f);
}

static const char *llama3_json =
    "{\"added_tokens\": [{\"id\": 4, \"content\": \"<|begin_of_text|>\", \"special\": true}],\n"
    " \"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": [\n"
    "   {\"type\": \"Split\", \"pattern\": {\"Regex\": "
    "\"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?\\\\p{L}+|\\\\p{N}{1,3}| "
    "?[^\\\\s\\\\p{L}\\\\p{N}]+[\\\\r\\\\n]*|\\\\s*[\\\\r\\\\n]+|\\\\s+(?!\\\\S)|\\\\s+\"},\n"
    "    \"behavior\": \"Isolated\", \"invert\": false},\n"
    "   {\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"use_regex\": false}]},\n"
    " \"post_processor\": {\"type\": \"Sequence\", \"processors\": [\n"
    "   {\"type\": \"ByteLevel\"},\n"
    "   {\"type\": \"TemplateProcessing\",\n"
    "    \"single\": [{\"SpecialToken\": {\"id\": \"<|begin_of_text|>\", \"type_id\": 0}},\n"
    "               {\"Sequence\": {\"id\": \"A\", \"type_id\": 0}}],\n"
    "    \"special_tokens\": {\"<|begin_of_text|>\": {\"id\": \"<|begin_of_text|>\",\n"
    "                        \"ids\": [4], \"tokens\": [\"<|begin_of_text|>\"]}}}]},\n"
    " \"decoder\": {\"type\": \"ByteLevel\"},\n"
    " \"model\": {\"type\": \"BPE\", \"ignore_merges\": true,\n"
    "   \"vocab\": {\"a\": 0, \"b\": 1, \"c\": 2, \"ab\": 3}, \"merges\": [[\"a\", \"b\"]]}}\n";

Test(hf, tokenizer_json_llama3_split)
{
    llm_status s;
    struct llm_file *f = tok_json(llama3_json, 0, &s);
    cr_assert_eq(s, LLM_OK, "%s", llm_error_detail(s));
    cr_expect_str_eq(meta_s(f, "tokenizer.model"), "gpt2");
    cr_expect_str_eq(meta_s(f, "tokenizer.pre"), "llama-bpe");
    struct llm_meta *re = llm_meta_get(f->meta, "tokenizer.pre_regex");
    cr_assert(re && re->n == 1, "only the Split regex (ByteLevel has use_regex false)");
    cr_expect(strstr(re->items[0]->s, "\\p{N}{1,3}"), "verbatim: %s", re->items[0]->s);
    cr_expect_eq(meta_b(f, "tokenizer.add_bos"), 1);
    cr_expect_eq(meta_b(f, "tokenizer.add_eos"), 0);
    cr_expect_eq(meta_i(f, "tokenizer.bos_id"), 4);
    struct llm_vocab_view v;
    cr_assert_eq(llm_file_vocab(f, &v), LLM_OK);
    cr_expect_eq(v.n_tokens, 5);
    cr_expect_eq(v.types[4], 3);
    llm_file_free(f);

    /* the same with the Qwen2 regex (\p{N} alone) */
    char q[4096];
    const char *p = strstr(llama3_json, "\\\\p{N}{1,3}");
    cr_assert(p);
    snprintf(q, sizeof q, "%.*s\\\\p{N}%s", (int)(p - llama3_json), llama3_json,
             p + strlen("\\\\p{N}{1,3}"));
    f = tok_json(q, 0, &s);
    cr_assert_eq(s, LLM_OK, "%s", llm_error_detail(s));
    cr_expect_str_eq(meta_s(f, "tokenizer.pre"), "qwen2");
    llm_file_free(f);
}

static const char *spm_json =
    "{\"added_tokens\": [{\"id\": 0, \"content\": \"<unk>\", \"special\": true},\n"
    "                  {\"id\": 1, \"content\": \"<s>\", \"special\": true}],\n"
    " \"normalizer\": {\"type\": \"Sequence\", \"normalizers\": [\n"
    "   {\"type\": \"Prepend\", \"prepend\": \"\\u2581\"},\n"
    "   {\"type\": \"Replace\", \"pattern\": {\"String\": \" \"}, \"content\": \"\\u2581\"}]},\n"
    " \"pre_tokenizer\": null,\n"
    " \"decoder\": {\"type\": \"Sequence\", \"decoders\": [{\"type\": \"ByteFallback\"},\n"
    "   {\"type\": \"Fuse\"}]},\n"
    " \"model\": {\"type\": \"BPE\", \"byte_fallback\": true, \"unk_token\": \"<unk>\",\n"
    "   \"vocab\": {\"<unk>\": 0, \"<s>\": 1, \"<0x41>\": 2, \"\\u2581a\": 3, \"b\": 4},\n"
    "   \"merges\": [\"\\u2581 a\"]}}\n";

Test(hf, tokenizer_json_sentencepiece_style)
{
    llm_status s;
    struct llm_file *f = tok_json(spm_json, 0, &s);
    cr_assert_eq(s, LLM_OK, "%s", llm_error_detail(s));
    cr_expect_str_eq(meta_s(f, "tokenizer.model"), "llama");
    cr_expect_str_eq(meta_s(f, "tokenizer.pre"), "default");
    cr_expect_eq(meta_b(f, "tokenizer.add_space_prefix"), 1);
    cr_expect_eq(meta_i(f, "tokenizer.unk_id"), 0);
    struct llm_vocab_view v;
    cr_assert_eq(llm_file_vocab(f, &v), LLM_OK);
    cr_assert_eq(v.n_tokens, 5);
    static const int32_t types[5] = { 2, 3, 6, 1, 1 };
    for (int i = 0; i < 5; i++)
        cr_expect_eq(v.types[i], types[i], "token %d type %d", i, v.types[i]);
    cr_assert(v.scores);
    cr_expect(v.scores[3] > v.scores[4], "earlier pieces rank higher");
    llm_file_free(f);
}

Test(hf, tokenizer_json_malformed)
{
    static const struct { const char *json; llm_status st; const char *sub; } cases[] = {
        { "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}", LLM_E_FORMAT, "JSON" },
        { "[1, 2]", LLM_E_FORMAT, "not a JSON object" },
        { "{\"added_tokens\": []}", LLM_E_FORMAT, "missing key 'model'" },
        { "{\"model\": {\"type\": \"Unigram\", \"vocab\": [[\"a\", 0.0]]}}", LLM_E_UNSUPPORTED,
          "Unigram" },
        { "{\"model\": {\"type\": \"BPE\", \"vocab\": [\"a\"]}}", LLM_E_FORMAT, "model.vocab" },
        { "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": -1}}}", LLM_E_FORMAT, "'a'" },
        { "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 4000000000}}}", LLM_E_FORMAT,
          "bad id" },
        { "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 0}}}", LLM_E_FORMAT,
          "same id" },
        { "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [[\"a\"]]}}",
          LLM_E_FORMAT, "merge 0" },
        { "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [\"ab\"]}}",
          LLM_E_FORMAT, "merge 0" },
        { "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [7]}}",
          LLM_E_FORMAT, "merge 0" },
        { "{\"added_tokens\": [{\"id\": 0}], \"model\": {\"type\": \"BPE\", \"vocab\": {}}}",
          LLM_E_FORMAT, "added token 0" },
        { "{\"model\": {\"type\": \"BPE\", \"vocab\": {}}}", LLM_E_FORMAT, "empty vocabulary" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        llm_status s;
        struct llm_file *f = tok_json(cases[i].json, 0, &s);
        const char *d = llm_error_detail(s);
        cr_expect_eq(s, cases[i].st, "case %zu: status %d (%s)", i, s, d);
        cr_expect(strncmp(d, "tokenizer.json: ", 16) == 0, "case %zu: %s", i, d);
        cr_expect(strstr(d, cases[i].sub), "case %zu: '%s' lacks '%s'", i, d, cases[i].sub);
        llm_file_free(f);
    }
}

/* ---- qwen3 and mistral's window from config.json ------------------------ */

/* A synthetic model's tensors under their Hugging Face names, written as
 * model.safetensors, in the form of `arch`'s checkpoints: no Q/K
 * permutation (the neox architectures), Gemma's norms as w - 1 (exact for
 * the generator's weights in [0.5, 1.5)) and its post-norms, Phi-3's fused
 * qkv_proj and gate_up_proj. */
/* The inverse of llm_hf_permute_qk: GGUF's interleaved Q/K rows back to
 * Hugging Face's halves. */
static void *unpermute_qk(const struct llm_tensor *t, const void *d, int64_t heads)
{
    const int64_t rows = t->ne[1], hd = rows / heads, half = hd / 2;
    const size_t rb = (size_t)t->nbytes / (size_t)rows;
    uint8_t *out = llm_malloc((size_t)t->nbytes);
    for (int64_t h = 0; h < heads; h++)
        for (int64_t i = 0; i < half; i++)
            for (int64_t j = 0; j < 2; j++)
                memcpy(out + (size_t)(h * hd + j * half + i) * rb,
                       (const uint8_t *)d + (size_t)(h * hd + 2 * i + j) * rb, rb);
    return out;
}

/* A mixture-of-experts tensor in the form of `arch`'s checkpoints: each
 * expert its own tensor (v4), or v5's experts.gate_up_proj and
 * experts.down_proj; the router; the shared expert. 1: written. */
static int write_moe(struct llm_file *h, struct llm_file *src, const struct llm_tensor *t,
                     const void *d, int l, const char *base, const char *arch, int v5)
{
    const int mixtral = !strcmp(arch, "mixtral");
    char hn[LLM_MAX_NAME];
    static const char *const plain[][2] = {
        { "ffn_gate_inp", "mlp.gate" },
        { "ffn_gate_shexp", "mlp.shared_expert.gate_proj" },
        { "ffn_up_shexp", "mlp.shared_expert.up_proj" },
        { "ffn_down_shexp", "mlp.shared_expert.down_proj" },
        { "ffn_gate_inp_shexp", "mlp.shared_expert_gate" },
    };
    for (size_t i = 0; i < 5; i++) {
        if (strcmp(base, plain[i][0]))
            continue;
        snprintf(hn, sizeof hn, "model.layers.%d.%s.weight", l,
                 mixtral && i == 0 ? "block_sparse_moe.gate" : plain[i][1]);
        int64_t ne[LLM_MAX_DIMS] = { t->ne[0], t->ne[1], 1, 1 };
        cr_assert_eq(llm_file_add_tensor(h, hn, t->type, 2, ne, d, NULL), LLM_OK);
        return 1;
    }
    const int k = !strcmp(base, "ffn_gate_exps") ? 0 : !strcmp(base, "ffn_up_exps") ? 1
                : !strcmp(base, "ffn_down_exps") ? 2 : -1;
    if (k < 0)
        return 0;
    const int64_t E = t->ne[2];
    const size_t one = (size_t)t->nbytes / (size_t)E;
    if (v5) { /* (E, 2I, H) of gate then up per expert; (E, H, I) */
        if (k == 1)
            return 1; /* joined with the gate */
        int64_t ne[LLM_MAX_DIMS] = { t->ne[0], t->ne[1] * (k == 0 ? 2 : 1), E, 1 };
        uint8_t *cat = llm_malloc(one * (size_t)E * (k == 0 ? 2 : 1));
        char un[LLM_MAX_NAME];
        snprintf(un, sizeof un, "blk.%d.ffn_up_exps.weight", l);
        const void *ud = NULL;
        if (k == 0)
            cr_assert_eq(llm_tensor_bytes(src, llm_file_find(src, un), &ud), LLM_OK);
        for (int64_t x = 0; x < E; x++) {
            uint8_t *o = cat + (size_t)x * one * (k == 0 ? 2 : 1);
            memcpy(o, (const uint8_t *)d + (size_t)x * one, one);
            if (k == 0)
                memcpy(o + one, (const uint8_t *)ud + (size_t)x * one, one);
        }
        cr_assert_eq(llm_file_own(h, cat), LLM_OK);
        snprintf(hn, sizeof hn, "model.layers.%d.mlp.experts.%s", l,
                 k == 0 ? "gate_up_proj" : "down_proj");
        cr_assert_eq(llm_file_add_tensor(h, hn, t->type, 3, ne, cat, NULL), LLM_OK);
        return 1;
    }
    static const char *const q[3] = { "gate_proj", "up_proj", "down_proj" },
                             *const m[3] = { "w1", "w3", "w2" };
    for (int64_t x = 0; x < E; x++) {
        snprintf(hn, sizeof hn, "model.layers.%d.%s.%lld.%s.weight", l,
                 mixtral ? "block_sparse_moe.experts" : "mlp.experts", (long long)x,
                 mixtral ? m[k] : q[k]);
        int64_t ne[LLM_MAX_DIMS] = { t->ne[0], t->ne[1], 1, 1 };
        cr_assert_eq(llm_file_add_tensor(h, hn, t->type, 2, ne,
                                         (const uint8_t *)d + (size_t)x * one, NULL),
                     LLM_OK);
    }
    return 1;
}

static void write_hf_weights_v(struct llm_file *src, const char *dir, const char *arch, int v5)
{
    const int gemma = !strncmp(arch, "gemma", 5), phi3 = !strcmp(arch, "phi3");
    const int permute = !strcmp(arch, "mixtral");
    static const char *const names[][2] = {
        { "attn_norm", "input_layernorm" },       { "attn_q_norm", "self_attn.q_norm" },
        { "attn_k_norm", "self_attn.k_norm" },    { "attn_q", "self_attn.q_proj" },
        { "attn_k", "self_attn.k_proj" },         { "attn_v", "self_attn.v_proj" },
        { "attn_output", "self_attn.o_proj" },    { "ffn_norm", "post_attention_layernorm" },
        { "ffn_gate", "mlp.gate_proj" },          { "ffn_up", "mlp.up_proj" },
        { "ffn_down", "mlp.down_proj" },
        /* gemma's */
        { "post_attention_norm", "post_attention_layernorm" },
        { "post_ffw_norm", "post_feedforward_layernorm" },
    };
    struct llm_file *h;
    cr_assert_eq(llm_file_new(&h, "hf", "hf"), LLM_OK);
    for (size_t i = 0; i < src->n_tensors; i++) {
        const struct llm_tensor *t = &src->tensors[i];
        char hn[LLM_MAX_NAME], base[64];
        int l = -1;
        if (!strcmp(t->name, "token_embd.weight"))
            snprintf(hn, sizeof hn, "model.embed_tokens.weight");
        else if (!strcmp(t->name, "output_norm.weight"))
            snprintf(hn, sizeof hn, "model.norm.weight");
        else if (!strcmp(t->name, "output.weight"))
            snprintf(hn, sizeof hn, "lm_head.weight");
        else if (!strncmp(t->name, "rope_factors_", 13))
            continue; /* LongRoPE's: config.json's */
        else {
            char kind[16];
            cr_assert_eq(sscanf(t->name, "blk.%d.%63[a-z_].%15s", &l, base, kind), 3, "%s",
                         t->name);
            const void *md;
            cr_assert_eq(llm_tensor_bytes(src, (struct llm_tensor *)t, &md), LLM_OK);
            if (write_moe(h, src, t, md, l, base, arch, v5))
                continue;
            size_t k = 0;
            while (strcmp(names[k][0], base))
                k++;
            const char *n = gemma && !strcmp(base, "ffn_norm") ? "pre_feedforward_layernorm"
                                                               : names[k][1];
            snprintf(hn, sizeof hn, "model.layers.%d.%s.%s", l, n, kind);
        }
        const void *d;
        cr_assert_eq(llm_tensor_bytes(src, (struct llm_tensor *)t, &d), LLM_OK);
        int64_t ne[LLM_MAX_DIMS];
        memcpy(ne, t->ne, sizeof ne);
        if (phi3 && l >= 0 && (!strcmp(base, "attn_k") || !strcmp(base, "attn_v") ||
                               !strcmp(base, "ffn_up")))
            continue; /* joined to attn_q or ffn_gate below */
        if (phi3 && l >= 0 && (!strcmp(base, "attn_q") || !strcmp(base, "ffn_gate"))) {
            const int qkv = base[0] == 'a';
            const char *more[2] = { qkv ? "attn_k" : "ffn_up", qkv ? "attn_v" : NULL };
            uint8_t *cat = llm_malloc((size_t)t->nbytes * 3);
            memcpy(cat, d, (size_t)t->nbytes);
            uint64_t off = t->nbytes;
            for (int k = 0; k < 2 && more[k]; k++) {
                char nm[LLM_MAX_NAME];
                snprintf(nm, sizeof nm, "blk.%d.%s.weight", l, more[k]);
                struct llm_tensor *o = llm_file_find(src, nm);
                const void *od;
                cr_assert_eq(llm_tensor_bytes(src, o, &od), LLM_OK);
                memcpy(cat + off, od, (size_t)o->nbytes);
                off += o->nbytes;
                ne[1] += o->ne[1];
            }
            cr_assert_eq(llm_file_own(h, cat), LLM_OK);
            snprintf(hn, sizeof hn, "model.layers.%d.%s.weight", l,
                     qkv ? "self_attn.qkv_proj" : "mlp.gate_up_proj");
            d = cat;
        }
        if (permute && l >= 0 && (!strcmp(base, "attn_q") || !strcmp(base, "attn_k"))) {
            int64_t heads = meta_i(src, base[5] == 'q' ? "hparams.head_count"
                                                       : "hparams.head_count_kv");
            void *u = unpermute_qk(t, d, heads);
            cr_assert_eq(llm_file_own(h, u), LLM_OK);
            d = u;
        }
        if (gemma && strstr(t->name, "norm.weight")) {
            float *w = llm_malloc((size_t)t->nbytes);
            memcpy(w, d, (size_t)t->nbytes);
            for (int64_t e = 0; e < t->ne[0]; e++)
                w[e] -= 1.0f;
            cr_assert_eq(llm_file_own(h, w), LLM_OK);
            d = w;
        }
        cr_assert_eq(llm_file_add_tensor(h, hn, t->type, t->n_dims, ne, d, NULL), LLM_OK, "%s: %s",
                     hn, llm_error_detail(-1));
    }
    char path[1024];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    cr_assert_eq(llm_safetensors_write(h, path), LLM_OK, "%s", llm_error_detail(-1));
    llm_file_free(h);
}

static void write_hf_weights(struct llm_file *src, const char *dir, const char *arch)
{
    write_hf_weights_v(src, dir, arch, 0);
}

/* The last logits of 12 tokens of the model in f. */
static void last_logits(struct llm_file *f, float *out)
{
    int32_t tok[12];
    for (int i = 0; i < 12; i++)
        tok[i] = (i * 29 + 3) % 96;
    struct llm_model *m;
    struct llm_model_params mp;
    llm_model_params_default(&mp);
    cr_assert_eq(llm_model_from_file_borrowed(&m, f, &mp), LLM_OK, "%s", llm_error_detail(-1));
    struct llm_context *c;
    struct llm_context_params cp;
    llm_context_params_default(&cp);
    cp.n_ctx = 32;
    cr_assert_eq(llm_context_new(&c, m, &cp), LLM_OK);
    cr_assert_eq(llm_decode(c, 0, tok, 12, 0, out, 0), LLM_OK);
    llm_context_free(c);
    llm_model_close(m);
}

static const char QWEN3_CONFIG[] =
    "{\"architectures\": [\"Qwen3ForCausalLM\"], \"model_type\": \"qwen3\",\n"
    " \"hidden_size\": 64, \"intermediate_size\": 128, \"num_hidden_layers\": 3,\n"
    " \"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"head_dim\": 32,\n"
    " \"vocab_size\": 96, \"max_position_embeddings\": 128, \"rms_norm_eps\": 1e-06,\n"
    " \"rope_theta\": 1000000.0, \"tie_word_embeddings\": true, \"attention_bias\": false,\n"
    " \"use_sliding_window\": %s, \"sliding_window\": 32, \"max_window_layers\": 28}\n";

/* Qwen3 from a Hugging Face directory: the same model as the synthetic one
 * it was written from (tests/unit/model/ref/qwen3.yaml, which
 * test_arch.c checks against transformers), to the bit. */
Test(hf, qwen3_directory_gives_the_synthetic_model)
{
    struct llm_file *src;
    cr_assert_eq(llm_synthetic(&src, "tests/unit/model/ref/qwen3.yaml", LLM_TYPE_F32, 7), LLM_OK);
    const char *dir = llm_test_tmpdir();
    write_hf_weights(src, dir, "qwen3");
    char cfg[1024];
    snprintf(cfg, sizeof cfg, QWEN3_CONFIG, "false");
    write_text(dir, "config.json", cfg);
    struct llm_file *f;
    cr_assert_eq(llm_hf_open(&f, dir, NULL), LLM_OK, "%s", llm_error_detail(-1));
    cr_expect_str_eq(meta_s(f, "architecture"), "qwen3");
    cr_expect_str_eq(meta_s(f, "hparams.rope_type"), "neox");
    cr_expect_eq(meta_i(f, "hparams.head_dim"), 32);
    cr_expect(!llm_meta_get(f->meta, "hparams.sliding_window"), "an unused window imported");
    float a[96], b[96];
    last_logits(src, a);
    last_logits(f, b);
    cr_assert(!memcmp(a, b, sizeof a), "the HF import differs from the synthetic model");
    llm_file_free(f);
    llm_file_free(src);

    /* a window from max_window_layers on is refused, not run wrong */
    snprintf(cfg, sizeof cfg, QWEN3_CONFIG, "true");
    write_text(dir, "config.json", cfg);
    expect_open_fails(dir, LLM_E_UNSUPPORTED, "use_sliding_window", NULL);
    /* q/k norms on an architecture without them */
    snprintf(cfg, sizeof cfg, QWEN3_CONFIG, "false");
    char *p = strstr(cfg, "qwen3");
    memcpy(p, "qwen2", 5);
    p = strstr(cfg, "Qwen3");
    memcpy(p, "Qwen2", 5);
    write_text(dir, "config.json", cfg);
    expect_open_fails(dir, LLM_E_FORMAT, "self_attn.q_norm", "has no q/k norms");
}

/* Gemma 2 and 3 and Phi-3 directories in the form transformers v5 writes
 * (scripts/ref-transformers.py --save: the same configs, whose models
 * match transformers' logits): the synthetic model each was written from,
 * to the bit. */
static void check_family_v(const char *name, const char *arch, const char *config, int v5)
{
    char path[256];
    snprintf(path, sizeof path, "tests/unit/model/ref/%s.yaml", name);
    struct llm_file *src;
    cr_assert_eq(llm_synthetic(&src, path, LLM_TYPE_F32, 7), LLM_OK);
    const char *dir = llm_test_tmpdir();
    write_hf_weights_v(src, dir, arch, v5);
    write_text(dir, "config.json", config);
    struct llm_file *f;
    cr_assert_eq(llm_hf_open(&f, dir, NULL), LLM_OK, "%s: %s", name, llm_error_detail(-1));
    float a[96], b[96];
    last_logits(src, a);
    last_logits(f, b);
    cr_assert(!memcmp(a, b, sizeof a), "%s (v5 %d): the HF import differs from the synthetic "
              "model", name, v5);
    llm_file_free(f);
    llm_file_free(src);
}

static void check_family(const char *name, const char *arch, const char *config)
{
    check_family_v(name, arch, config, 0);
}

#define FAMILY_COMMON                                                                          \
    " \"hidden_size\": 64, \"intermediate_size\": 128, \"vocab_size\": 96,\n"                 \
    " \"max_position_embeddings\": 128, \"num_attention_heads\": 4, \"sliding_window\": %d,\n"

Test(hf, gemma2_gemma3_phi3_directories_give_the_synthetic_models)
{
    char cfg[2048];
    snprintf(cfg, sizeof cfg,
             "{\"architectures\": [\"Gemma2ForCausalLM\"], \"model_type\": \"gemma2\",\n" FAMILY_COMMON
             " \"num_hidden_layers\": 4, \"num_key_value_heads\": 2, \"head_dim\": 32,\n"
             " \"rms_norm_eps\": 1e-06, \"rope_theta\": 10000.0, \"query_pre_attn_scalar\": 32,\n"
             " \"attn_logit_softcapping\": 50.0, \"final_logit_softcapping\": 30.0,\n"
             " \"hidden_activation\": \"gelu_pytorch_tanh\", \"tie_word_embeddings\": true,\n"
             " \"layer_types\": [\"sliding_attention\", \"full_attention\", \"sliding_attention\",\n"
             "                 \"full_attention\"]}\n", 5);
    check_family("gemma2", "gemma2", cfg);
    snprintf(cfg, sizeof cfg,
             "{\"architectures\": [\"Gemma3ForCausalLM\"], \"model_type\": \"gemma3_text\",\n"
             FAMILY_COMMON
             " \"num_hidden_layers\": 4, \"num_key_value_heads\": 1, \"head_dim\": 32,\n"
             " \"rms_norm_eps\": 1e-06, \"query_pre_attn_scalar\": 32,\n"
             " \"attn_logit_softcapping\": null, \"final_logit_softcapping\": null,\n"
             " \"hidden_activation\": \"gelu_pytorch_tanh\", \"tie_word_embeddings\": true,\n"
             " \"layer_types\": [\"sliding_attention\", \"sliding_attention\", \"full_attention\",\n"
             "                 \"sliding_attention\"],\n"
             " \"rope_parameters\": {\"full_attention\": {\"rope_theta\": 1000000.0,\n"
             "                    \"rope_type\": \"default\"}, \"sliding_attention\":\n"
             "                    {\"rope_theta\": 10000.0, \"rope_type\": \"default\"}}}\n", 5);
    check_family("gemma3", "gemma3", cfg);
    snprintf(cfg, sizeof cfg,
             "{\"architectures\": [\"Phi3ForCausalLM\"], \"model_type\": \"phi3\",\n" FAMILY_COMMON
             " \"num_hidden_layers\": 3, \"num_key_value_heads\": 4, \"rms_norm_eps\": 1e-05,\n"
             " \"rope_theta\": 10000.0, \"tie_word_embeddings\": false, \"hidden_act\": \"silu\"}\n", 4);
    check_family("phi3", "phi3", cfg);
}

Test(hf, gemma_and_phi3_configs_refused_by_name)
{
    struct llm_file *src;
    cr_assert_eq(llm_synthetic(&src, "tests/unit/model/ref/gemma3.yaml", LLM_TYPE_F32, 7), LLM_OK);
    const char *dir = llm_test_tmpdir();
    write_hf_weights(src, dir, "gemma3");
    llm_file_free(src);
    static const struct { const char *extra, *sub; llm_status s; } bad[] = {
        { "\"hidden_activation\": \"relu\"", "hidden_activation 'relu'", LLM_E_UNSUPPORTED },
        { "\"layer_types\": [\"sliding_attention\", \"full_attention\", \"full_attention\", "
          "\"sliding_attention\"]", "layer_types[2]", LLM_E_UNSUPPORTED },
        { "\"layer_types\": [\"full_attention\"]", "layer_types has 1 entries", LLM_E_FORMAT },
        { "\"query_pre_attn_scalar\": -1", "query_pre_attn_scalar", LLM_E_FORMAT },
        { "\"partial_rotary_factor\": 0.75", "partial_rotary_factor", LLM_E_UNSUPPORTED },
    };
    char cfg[1024];
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(cfg, sizeof cfg,
                 "{\"model_type\": \"gemma3_text\",\n" FAMILY_COMMON
                 " \"num_hidden_layers\": 4, \"num_key_value_heads\": 1, \"head_dim\": 32,\n"
                 " %s}\n", 5, bad[i].extra);
        write_text(dir, "config.json", cfg);
        expect_open_fails(dir, bad[i].s, bad[i].sub, NULL);
    }
}

Test(hf, mistral_sliding_window_imported)
{
    struct llm_file *src;
    cr_assert_eq(llm_synthetic(&src, "tests/unit/model/ref/mistral-swa.yaml", LLM_TYPE_F32, 7),
                 LLM_OK);
    const char *dir = llm_test_tmpdir();
    write_hf_weights(src, dir, "mistral");
    llm_file_free(src);
    static const char cfg[] =
        "{\"model_type\": \"mistral\", \"hidden_size\": 64, \"intermediate_size\": 128,\n"
        " \"num_hidden_layers\": 3, \"num_attention_heads\": 4, \"num_key_value_heads\": 2,\n"
        " \"head_dim\": 32, \"vocab_size\": 96, \"max_position_embeddings\": 128,\n"
        " \"sliding_window\": %s}\n";
    char text[512];
    const char *windows[] = { "5", "null", "\"wide\"" };
    for (int i = 0; i < 3; i++) {
        snprintf(text, sizeof text, cfg, windows[i]);
        write_text(dir, "config.json", text);
        if (i == 2) {
            expect_open_fails(dir, LLM_E_FORMAT, "sliding_window", "not an integer");
            break;
        }
        struct llm_file *f;
        cr_assert_eq(llm_hf_open(&f, dir, NULL), LLM_OK, "%s", llm_error_detail(-1));
        cr_expect_str_eq(meta_s(f, "architecture"), "mistral");
        if (i == 0)
            cr_expect_eq(meta_i(f, "hparams.sliding_window"), 5);
        else
            cr_expect(!llm_meta_get(f->meta, "hparams.sliding_window"), "null is no window");
        llm_file_free(f);
    }
}

/* Mixtures of experts from Hugging Face directories, each expert its own
 * tensor (the hub's checkpoints) and in transformers v5's fused form: the
 * synthetic model each was written from, to the bit (test_arch.c checks
 * those models against transformers). */
static void check_moe(const char *name, const char *config, int v5)
{
    check_family_v(name, name, config, v5);
}

Test(hf, mixtures_of_experts_give_the_synthetic_models)
{
    static const char mixtral[] =
        "{\"model_type\": \"mixtral\", \"hidden_size\": 64, \"intermediate_size\": 96,\n"
        " \"num_hidden_layers\": 3, \"num_attention_heads\": 4, \"num_key_value_heads\": 2,\n"
        " \"head_dim\": 32, \"vocab_size\": 96, \"max_position_embeddings\": 128,\n"
        " \"rms_norm_eps\": 1e-05, \"rope_theta\": 1000000.0, \"sliding_window\": null,\n"
        " \"num_local_experts\": 4, \"num_experts_per_tok\": 2, \"tie_word_embeddings\": false}\n";
    static const char qwen2moe[] =
        "{\"model_type\": \"qwen2_moe\", \"hidden_size\": 64, \"intermediate_size\": 80,\n"
        " \"num_hidden_layers\": 3, \"num_attention_heads\": 4, \"num_key_value_heads\": 4,\n"
        " \"vocab_size\": 96, \"max_position_embeddings\": 128, \"rms_norm_eps\": 1e-06,\n"
        " \"rope_theta\": 1000000.0, \"num_experts\": 6, \"num_experts_per_tok\": 2,\n"
        " \"moe_intermediate_size\": 48, \"shared_expert_intermediate_size\": 80,\n"
        " \"norm_topk_prob\": false, \"decoder_sparse_step\": 1, \"mlp_only_layers\": [],\n"
        " \"use_sliding_window\": false, \"tie_word_embeddings\": false}\n";
    static const char qwen3moe[] =
        "{\"model_type\": \"qwen3_moe\", \"hidden_size\": 64, \"intermediate_size\": 128,\n"
        " \"num_hidden_layers\": 3, \"num_attention_heads\": 4, \"num_key_value_heads\": 2,\n"
        " \"head_dim\": 32, \"vocab_size\": 96, \"max_position_embeddings\": 128,\n"
        " \"rms_norm_eps\": 1e-06, \"rope_theta\": 1000000.0, \"num_experts\": 8,\n"
        " \"num_experts_per_tok\": 3, \"moe_intermediate_size\": 32, \"norm_topk_prob\": true,\n"
        " \"tie_word_embeddings\": false}\n";
    check_moe("mixtral", mixtral, 0);
    check_moe("qwen2moe", qwen2moe, 0);
    check_moe("qwen3moe", qwen3moe, 0);
    check_moe("qwen3moe", qwen3moe, 1);
    check_moe("qwen2moe", qwen2moe, 1);
}

Test(hf, mixture_of_experts_damage_named)
{
    struct llm_file *src;
    cr_assert_eq(llm_synthetic(&src, "tests/unit/model/ref/qwen3moe.yaml", LLM_TYPE_F32, 7),
                 LLM_OK);
    const char *dir = llm_test_tmpdir();
    write_hf_weights_v(src, dir, "qwen3moe", 0);
    llm_file_free(src);
    static const char base[] =
        "{\"model_type\": \"qwen3_moe\", \"hidden_size\": 64, \"intermediate_size\": 128,\n"
        " \"num_hidden_layers\": 3, \"num_attention_heads\": 4, \"num_key_value_heads\": 2,\n"
        " \"head_dim\": 32, \"vocab_size\": 96, \"max_position_embeddings\": 128,\n"
        " \"moe_intermediate_size\": 32, %s}\n";
    static const struct { const char *keys, *sub; llm_status s; } bad[] = {
        { "\"num_experts\": 8, \"num_experts_per_tok\": 9", "num_experts_per_tok 9", LLM_E_FORMAT },
        { "\"num_experts\": 8, \"num_experts_per_tok\": 2, \"decoder_sparse_step\": 2",
          "dense layers among the experts", LLM_E_UNSUPPORTED },
        { "\"num_experts\": 8, \"num_experts_per_tok\": 2, \"mlp_only_layers\": [1]",
          "dense layers among the experts", LLM_E_UNSUPPORTED },
        { "\"num_experts\": 9, \"num_experts_per_tok\": 2", "mlp.gate.weight': not [9, 64]",
          LLM_E_FORMAT },
        { "\"num_experts\": 7, \"num_experts_per_tok\": 2", "expert 7 of 7", LLM_E_FORMAT },
        { "\"num_experts_per_tok\": 2", "missing key 'num_experts'", LLM_E_FORMAT },
    };
    char cfg[1024];
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(cfg, sizeof cfg, base, bad[i].keys);
        write_text(dir, "config.json", cfg);
        expect_open_fails(dir, bad[i].s, bad[i].sub, NULL);
    }
}

/* Phi-3's LongRoPE from config.json (rope_scaling, the factors as arrays):
 * the synthetic model's tensors and keys, and its bits */
Test(hf, phi3_longrope_config_gives_the_synthetic_model)
{
    struct llm_file *src;
    cr_assert_eq(llm_synthetic(&src, "tests/unit/model/ref/phi3-longrope.yaml", LLM_TYPE_F32, 7),
                 LLM_OK);
    const char *dir = llm_test_tmpdir();
    write_hf_weights(src, dir, "phi3");
    char fac[2][512];
    const char *names[2] = { "rope_factors_short.weight", "rope_factors_long.weight" };
    for (int k = 0; k < 2; k++) {
        const void *d;
        struct llm_tensor *t = llm_file_find(src, names[k]);
        cr_assert_eq(llm_tensor_bytes(src, t, &d), LLM_OK);
        int n = 0;
        for (int64_t i = 0; i < t->ne[0]; i++) /* %.9g: the same float back */
            n += snprintf(fac[k] + n, sizeof fac[k] - (size_t)n, "%s%.9g", i ? ", " : "",
                          (double)((const float *)d)[i]);
    }
    char cfg[2048];
    snprintf(cfg, sizeof cfg,
             "{\"model_type\": \"phi3\", \"hidden_size\": 64, \"intermediate_size\": 128,\n"
             " \"num_hidden_layers\": 3, \"num_attention_heads\": 4, \"vocab_size\": 96,\n"
             " \"max_position_embeddings\": 128, \"original_max_position_embeddings\": 16,\n"
             " \"rms_norm_eps\": 1e-05, \"rope_theta\": 10000.0, \"sliding_window\": null,\n"
             " \"rope_scaling\": {\"type\": \"su\", \"short_factor\": [%s],\n"
             "                  \"long_factor\": [%s]}}\n", fac[0], fac[1]);
    write_text(dir, "config.json", cfg);
    struct llm_file *f;
    cr_assert_eq(llm_hf_open(&f, dir, NULL), LLM_OK, "%s", llm_error_detail(-1));
    cr_expect_str_eq(meta_s(f, "hparams.rope_scaling.type"), "longrope");
    cr_expect_eq(meta_i(f, "hparams.rope_scaling.original_context_length"), 16);
    float a[96], b[96];
    last_logits(src, a);
    last_logits(f, b);
    cr_assert(!memcmp(a, b, sizeof a), "the HF import differs from the synthetic model");
    llm_file_free(f);
    llm_file_free(src);
    /* a factor array of the wrong length */
    char *p = strstr(cfg, "\"long_factor\": [");
    cr_assert(p);
    p = strchr(p, ',');
    memmove(p, strchr(p + 1, ','), strlen(strchr(p + 1, ',')) + 1);
    write_text(dir, "config.json", cfg);
    expect_open_fails(dir, LLM_E_FORMAT, "rope_scaling.long_factor is not an array of 8", NULL);
}
