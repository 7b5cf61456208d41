/* test_gguf_write.c: the GGUF writer, and GGUF -> llm_file -> GGUF round
 * trips of the real files in shared/data. Written files are checked with
 * the independent walker in gguf_test_util.h (value types, layout) and by
 * reading them back. */
#include "gguf_test_util.h"

/* ====================================================================== */
/* round trips */

static void round_trip(const char *src, const char *dst)
{
    struct llm_file *a = open_ok(src, NULL);
    llm_status s = llm_gguf_write(a, dst, NULL);
    cr_assert_eq(s, LLM_OK, "%s", llm_error_detail(s));
    struct llm_file *b = open_ok(dst, NULL);
    assert_meta_equal(a, b);
    assert_vocab_equal(a, b);
    assert_tensors_equal(a, b);
    llm_file_free(a);
    llm_file_free(b);
}

Test(gguf_write, round_trip_stories260k)
{
    TEST_DATA(src, "gguf/stories260K.gguf");
    const char *out = tmp_path("s.gguf"), *out2 = tmp_path("s2.gguf");
    round_trip(src, out);
    /* how close to the original bytes: the tensor data section is
       identical; the header differs only by keys we write explicitly
       (llama.vocab_size, llama.rope.freq_base, general.file_type,
       general.alignment) and their order */
    size_t na, nb;
    uint8_t *a = slurp(src, &na), *b = slurp(out, &nb);
    struct walk wa, wb;
    walk(a, na, &wa);
    walk(b, nb, &wb);
    cr_assert_eq(wb.n_tensors, 48);
    cr_assert_eq(wb.n_kv, wa.n_kv + 4);
    cr_assert_eq(na - wa.data_start, nb - wb.data_start);
    cr_assert_eq(memcmp(a + wa.data_start, b + wb.data_start, na - wa.data_start), 0,
                 "tensor data section differs from the original");
    for (int i = 0; i < 48; i++) {
        cr_assert_eq(wa.t_off[i], wb.t_off[i]);
        cr_assert_eq(wb.t_type[i], 0);
    }
    cr_assert_eq(nb - na, wb.data_start - wa.data_start);
    cr_log_info("stories260K.gguf rewritten: %zu bytes vs %zu (header %zu vs %zu, data identical)",
                nb, na, wb.data_start, wa.data_start);
    /* exact types llama.cpp's loader insists on */
    uint32_t t, et;
    size_t val;
    cr_assert(key_type(b, "llama.context_length", &t, &et, &val) && t == 4);
    cr_assert(key_type(b, "llama.attention.layer_norm_rms_epsilon", &t, &et, &val) && t == 6);
    cr_assert(key_type(b, "llama.rope.freq_base", &t, &et, &val) && t == 6);
    cr_assert(key_type(b, "tokenizer.ggml.token_type", &t, &et, &val) && t == 9 && et == 5);
    cr_assert(key_type(b, "tokenizer.ggml.scores", &t, &et, &val) && t == 9 && et == 6);
    cr_assert(key_type(b, "tokenizer.ggml.bos_token_id", &t, &et, &val) && t == 4);
    cr_assert(key_type(b, "tokenizer.ggml.seperator_token_id", &t, &et, &val) && t == 4 &&
              rd32(b + val) == 0xFFFFFFFFu);
    cr_assert(key_type(b, "general.alignment", &t, &et, &val) && t == 4 && rd32(b + val) == 32);
    cr_assert(key_type(b, "general.file_type", &t, &et, &val) && t == 4 && rd32(b + val) == 0);
    cr_assert(!key_type(b, "general.quantization_version", &t, &et, &val));
    /* writing is deterministic and a fixed point */
    round_trip(out, out2);
    size_t nc;
    uint8_t *c = slurp(out2, &nc);
    cr_assert_eq(nb, nc);
    cr_assert_eq(memcmp(b, c, nb), 0, "second rewrite differs");
    free(a);
    free(b);
    free(c);
}

Test(gguf_write, round_trip_tiny_random_and_vocab_files)
{
    static const char *files[] = {
        "gguf/llama-2-tiny-random.gguf", "vocab/ggml-vocab-llama-spm.gguf",
        "vocab/ggml-vocab-phi-3.gguf", "vocab/ggml-vocab-gpt-2.gguf",
        "vocab/ggml-vocab-starcoder.gguf", "vocab/ggml-vocab-deepseek-coder.gguf",
    };
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        const char *src = llm_test_data(files[i]);
        if (!src) {
            cr_skip_test("test data %s is absent", files[i]);
            return;
        }
        const char *out = tmp_path("rt.gguf");
        round_trip(src, out);
        size_t n;
        uint8_t *b = slurp(out, &n);
        struct walk w;
        walk(b, n, &w);
        if (w.n_tensors == 0) /* tokenizer-only: no padding after the header */
            cr_assert_eq(w.infos_end, n, "%s", files[i]);
        else
            cr_assert_eq(n % 32, 0);
        free(b);
    }
}

Test(gguf_write, write_to_stdout_gives_the_same_bytes)
{
    TEST_DATA(src, "gguf/stories260K.gguf");
    struct llm_file *f = open_ok(src, NULL);
    const char *file = tmp_path("f.gguf"), *piped = tmp_path("p.gguf");
    cr_assert_eq(llm_gguf_write(f, file, NULL), LLM_OK);
    fflush(stdout);
    int saved = dup(1);
    int fd = open(piped, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    cr_assert(saved >= 0 && fd >= 0);
    dup2(fd, 1);
    llm_status s = llm_gguf_write(f, "-", NULL);
    dup2(saved, 1);
    close(fd);
    close(saved);
    cr_assert_eq(s, LLM_OK, "%s", llm_error_detail(s));
    size_t na, nb;
    uint8_t *a = slurp(file, &na), *b = slurp(piped, &nb);
    cr_assert_eq(na, nb);
    cr_assert_eq(memcmp(a, b, na), 0);
    free(a);
    free(b);
    llm_file_free(f);
}

Test(gguf_write, kept_keys_keep_their_types_through_a_round_trip)
{
    struct spec s;
    spec_init(&s);
    llama_keys(&s);
    gb_u16(key(&s, "split.no", 2), 3);
    gb_u8(key(&s, "x.i8", 1), 0xFB);        /* -5 */
    gb_u64(key(&s, "x.i64", 11), (uint64_t)-7);
    gb_u64(key(&s, "x.u64", 10), UINT64_MAX);
    gb_u32(key(&s, "x.u32", 4), 7);          /* inferred: no record */
    gb_u32(key(&s, "x.i32", 5), 7);          /* positive i32: recorded */
    gb_f32(key(&s, "x.f32", 6), 0.1f);
    gb_f64(key(&s, "x.f64", 12), 0.1);
    gb_u8(key(&s, "x.bool", 7), 1);
    key_str(&s, "general.url", "https://example.com/m");
    struct gb *g = key(&s, "x.u8s", 9);
    gb_u32(g, 0);
    gb_u64(g, 3);
    gb_u8(g, 1);
    gb_u8(g, 2);
    gb_u8(g, 250);
    g = key(&s, "x.i32s", 9);
    gb_u32(g, 5);
    gb_u64(g, 2);
    gb_u32(g, (uint32_t)-1);
    gb_u32(g, 9);
    g = key(&s, "x.strs", 9);
    gb_u32(g, 8);
    gb_u64(g, 2);
    gb_str(g, "a");
    gb_str(g, "");
    g = key(&s, "x.empty", 9);
    gb_u32(g, 6);
    gb_u64(g, 0);
    g = key(&s, "llama.feed_forward_length", 9); /* per layer: kept, not mapped */
    gb_u32(g, 5);
    gb_u64(g, 1);
    gb_u32(g, 88);
    size_t n;
    uint8_t *b = assemble(&s, &n);
    struct llm_file *f;
    cr_assert_eq(parse_copy(b, n, NULL, &f), LLM_OK, "%s", llm_error_detail(-1));
    cr_assert_eq(kept(f, "split.no")->i, 3);
    cr_assert_eq(kept(f, "x.i8")->i, -5);
    cr_assert_eq(kept(f, "x.i64")->i, -7);
    cr_assert_eq(kept(f, "x.u64")->i, -1); /* the bit pattern, type recorded */
    cr_assert_eq(kept(f, "x.f32")->f, (double)0.1f);
    cr_assert_eq(kept(f, "x.f64")->f, 0.1);
    cr_assert_eq(kept(f, "x.bool")->kind, LLM_META_BOOL);
    cr_assert_eq(kept(f, "x.u8s")->n, 3);
    cr_assert_eq(kept(f, "x.u8s")->items[2]->i, 250);
    cr_assert_eq(kept(f, "x.i32s")->items[0]->i, -1);
    cr_assert_eq(kept(f, "x.strs")->items[1]->slen, 0);
    cr_assert_eq(kept(f, "x.empty")->n, 0);
    cr_assert_null(llm_meta_get(f->meta, "hparams.feed_forward_length"));
    cr_assert_eq(kept(f, "llama.feed_forward_length")->items[0]->i, 88);
    struct llm_meta *types = llm_meta_get(f->meta, "source.gguf_types");
    cr_assert(types);
    static const char *rec[][2] = {
        { "split.no", "u16" }, { "x.i8", "i8" },   { "x.i64", "i64" },   { "x.u64", "u64" },
        { "x.i32", "i32" },    { "x.f64", "f64" }, { "x.u8s", "u8[]" }, { "x.empty", "f32[]" },
    };
    for (size_t i = 0; i < sizeof rec / sizeof rec[0]; i++) {
        struct llm_meta *m = llm_meta_child(types, rec[i][0]);
        cr_assert(m && m->kind == LLM_META_STR, "%s not recorded", rec[i][0]);
        cr_assert_str_eq(m->s, rec[i][1]);
    }
    cr_assert_null(llm_meta_child(types, "x.u32"));
    cr_assert_null(llm_meta_child(types, "x.f32"));
    cr_assert_null(llm_meta_child(types, "x.i32s"));
    cr_assert_null(llm_meta_child(types, "general.url"));

    const char *out = tmp_path("k.gguf");
    cr_assert_eq(llm_gguf_write(f, out, NULL), LLM_OK, "%s", llm_error_detail(-1));
    size_t nb;
    uint8_t *w = slurp(out, &nb);
    static const struct { const char *key; uint32_t t, et; } types_out[] = {
        { "split.no", 2, 0 }, { "x.i8", 1, 0 },   { "x.i64", 11, 0 },  { "x.u64", 10, 0 },
        { "x.u32", 4, 0 },    { "x.i32", 5, 0 },  { "x.f32", 6, 0 },   { "x.f64", 12, 0 },
        { "x.bool", 7, 0 },   { "general.url", 8, 0 }, { "x.u8s", 9, 0 }, { "x.i32s", 9, 5 },
        { "x.strs", 9, 8 },   { "x.empty", 9, 6 }, { "llama.feed_forward_length", 9, 5 },
    };
    for (size_t i = 0; i < sizeof types_out / sizeof types_out[0]; i++) {
        uint32_t t, et;
        size_t val;
        cr_assert(key_type(w, types_out[i].key, &t, &et, &val), "%s missing", types_out[i].key);
        cr_assert_eq(t, types_out[i].t, "%s: type %u", types_out[i].key, t);
        cr_assert_eq(et, types_out[i].et, "%s: element type %u", types_out[i].key, et);
        if (!strcmp(types_out[i].key, "x.u64"))
            cr_assert_eq(rd64(w + val), UINT64_MAX);
        if (!strcmp(types_out[i].key, "x.f64")) {
            double d;
            memcpy(&d, w + val, 8);
            cr_assert_eq(d, 0.1);
        }
    }
    struct llm_file *g2 = open_ok(out, NULL);
    assert_meta_equal(f, g2);
    cr_assert(llm_meta_get(g2->meta, "source.gguf_types"));
    char where[256] = "";
    cr_assert(meta_equal(llm_meta_get(f->meta, "source.gguf_types"),
                         llm_meta_get(g2->meta, "source.gguf_types"), where, sizeof where), "%s",
              where);
    llm_file_free(g2);
    free(w);
    free(b);
    llm_file_free(f);
}

/* ====================================================================== */
/* writer */

static struct llm_tensor *add(struct llm_file *f, const char *name, enum llm_type type,
                              uint32_t n_dims, int64_t ne0, int64_t ne1, const void *bytes)
{
    int64_t ne[2] = { ne0, ne1 };
    uint64_t nbytes;
    cr_assert_eq(llm_type_tensor_bytes(type, n_dims, ne, &nbytes), LLM_OK);
    void *p = llm_malloc((size_t)nbytes);
    memcpy(p, bytes, (size_t)nbytes);
    cr_assert_eq(llm_file_own(f, p), LLM_OK);
    struct llm_tensor *t;
    cr_assert_eq(llm_file_add_tensor(f, name, type, n_dims, ne, p, &t), LLM_OK, "%s",
                 llm_error_detail(-1));
    return t;
}

static struct llm_file *new_model(const char *arch)
{
    struct llm_file *f;
    cr_assert_eq(llm_file_new(&f, "mem", "synthetic"), LLM_OK);
    cr_assert_eq(llm_meta_set_str(f->meta, "architecture", arch), LLM_OK);
    return f;
}

Test(gguf_write, refuses_what_gguf_cannot_hold)
{
    struct llm_file *f = new_model("llama");
    float x[48 * 2];
    for (int i = 0; i < 96; i++)
        x[i] = (float)i;
    uint8_t q[2 * 2 * 34];
    cr_assert_eq(llm_quantize_row(LLM_TYPE_Q8_0, x, q, 48), LLM_OK);
    cr_assert_eq(llm_quantize_row(LLM_TYPE_Q8_0, x + 48, q + 68, 48), LLM_OK);
    add(f, "odd.weight", LLM_TYPE_Q8_0, 2, 48, 2, q);
    const char *out = tmp_path("bad.gguf");
    llm_status s = llm_gguf_write(f, out, NULL);
    cr_assert_eq(s, LLM_E_INVALID);
    cr_assert(strstr(llm_error_detail(s), "tensor 'odd.weight': rows of 48 elements"));
    cr_assert(!strncmp(llm_error_detail(s), out, strlen(out)));
    cr_assert_neq(access(out, F_OK), 0, "a failed write left a file");
    llm_file_free(f);

    f = new_model("llama");
    char name[80];
    memset(name, 'n', 70);
    strcpy(name + 70, ".weight");
    add(f, name, LLM_TYPE_F32, 1, 4, 1, x);
    s = llm_gguf_write(f, out, NULL);
    cr_assert_eq(s, LLM_E_INVALID);
    cr_assert(strstr(llm_error_detail(s), "longer than 63 bytes"));
    llm_file_free(f);
}

Test(gguf_write, converts_types_without_a_ggml_twin_to_f16)
{
    struct llm_file *f = new_model("llama");
    float x[128 * 2];
    for (int i = 0; i < 256; i++)
        x[i] = sinf((float)i) * 3;
    uint8_t q[2 * 2 * 66];
    cr_assert_eq(llm_quantize_row(LLM_TYPE_Q8_G64, x, q, 128), LLM_OK);
    cr_assert_eq(llm_quantize_row(LLM_TYPE_Q8_G64, x + 128, q + 132, 128), LLM_OK);
    add(f, "blk.0.ffn_up.weight", LLM_TYPE_Q8_G64, 2, 128, 2, q);
    add(f, "blk.0.ffn_norm.weight", LLM_TYPE_F32, 1, 128, 1, x);
    const char *out = tmp_path("c.gguf");
    cr_assert_eq(llm_gguf_write(f, out, NULL), LLM_OK, "%s", llm_error_detail(-1));
    struct llm_file *g = open_ok(out, NULL);
    struct llm_tensor *t = llm_file_find(g, "blk.0.ffn_up.weight");
    cr_assert_eq(t->type, LLM_TYPE_F16);
    float want[256];
    cr_assert_eq(llm_dequantize_row(LLM_TYPE_Q8_G64, q, want, 128), LLM_OK);
    cr_assert_eq(llm_dequantize_row(LLM_TYPE_Q8_G64, q + 132, want + 128, 128), LLM_OK);
    const uint16_t *h = t->data;
    for (int i = 0; i < 256; i++)
        cr_assert_eq(h[i], llm_fp32_to_fp16(want[i]), "element %d", i);
    cr_assert_eq(llm_file_find(g, "blk.0.ffn_norm.weight")->type, LLM_TYPE_F32);
    cr_assert_eq(meta_i(g, "source.gguf_file_type"), 1); /* mostly F16 */
    /* a tokenizer.model is required by llama.cpp: "no_vocab" without one */
    cr_assert_str_eq(meta_s(g, "tokenizer.model"), "no_vocab");
    llm_file_free(g);

    /* write_opts convert: matrices become q8_0, 1-D tensors stay */
    struct llm_write_opts wo;
    llm_write_opts_default(&wo);
    wo.convert = 1;
    wo.type = LLM_TYPE_Q8_0;
    cr_assert_eq(llm_gguf_write(f, out, &wo), LLM_OK, "%s", llm_error_detail(-1));
    size_t n;
    uint8_t *b = slurp(out, &n);
    uint32_t ty, et;
    size_t val;
    cr_assert(key_type(b, "general.file_type", &ty, &et, &val) && rd32(b + val) == 7);
    cr_assert(key_type(b, "general.quantization_version", &ty, &et, &val) && ty == 4 &&
              rd32(b + val) == 2);
    free(b);
    g = open_ok(out, NULL);
    t = llm_file_find(g, "blk.0.ffn_up.weight");
    cr_assert_eq(t->type, LLM_TYPE_Q8_0);
    uint8_t want_q[2 * 4 * 34]; // (2 rows, 4 blocks)
    cr_assert_eq(llm_convert_rows(LLM_TYPE_Q8_G64, q, LLM_TYPE_Q8_0, want_q, 128, 2), LLM_OK);
    cr_assert_eq(memcmp(t->data, want_q, sizeof want_q), 0);
    cr_assert_eq(llm_file_find(g, "blk.0.ffn_norm.weight")->type, LLM_TYPE_F32);
    llm_file_free(g);
    llm_file_free(f);
}

Test(gguf_write, tokenizer_only_file)
{
    struct llm_file *f = new_model("llama");
    const char *toks[] = { "<unk>", "<s>", "</s>", "hello" };
    uint32_t lens[] = { 5, 3, 4, 5 };
    float scores[] = { 0, 0, 0, -1.5f };
    int32_t types[] = { 2, 3, 3, 1 };
    cr_assert_eq(llm_file_set_vocab(f, 4, toks, lens, scores, types), LLM_OK);
    cr_assert_eq(llm_meta_set_str(f->meta, "tokenizer.model", "llama"), LLM_OK);
    cr_assert_eq(llm_meta_set_i64(f->meta, "tokenizer.bos_id", 1), LLM_OK);
    cr_assert_eq(llm_meta_set_bool(f->meta, "tokenizer.add_bos", 1), LLM_OK);
    cr_assert_eq(llm_meta_set_str(f->meta, "chat_template", "{{ x }}"), LLM_OK);
    const char *out = tmp_path("v.gguf");
    cr_assert_eq(llm_gguf_write(f, out, NULL), LLM_OK, "%s", llm_error_detail(-1));
    size_t n;
    uint8_t *b = slurp(out, &n);
    struct walk w;
    walk(b, n, &w);
    cr_assert_eq(w.n_tensors, 0);
    cr_assert_eq(w.infos_end, n); /* not padded */
    uint32_t ty, et;
    size_t val;
    cr_assert(!key_type(b, "general.file_type", &ty, &et, &val));
    cr_assert(key_type(b, "tokenizer.chat_template", &ty, &et, &val) && ty == 8);
    cr_assert(key_type(b, "tokenizer.ggml.add_bos_token", &ty, &et, &val) && ty == 7);
    free(b);
    struct llm_file *g = open_ok(out, NULL);
    assert_vocab_equal(f, g);
    cr_assert_eq(meta_i(g, "tokenizer.bos_id"), 1);
    cr_assert_str_eq(meta_s(g, "chat_template"), "{{ x }}");
    cr_assert_eq(n_weights(g), 0);
    llm_file_free(g);
    llm_file_free(f);
}

/* Rows of attn_q/attn_k are reordered between Hugging Face (neox) and GGUF
 * llama (norm) order: formats.md §1.10's example for hd = 8. */
Test(gguf_write, reorders_qk_rows_for_the_architecture)
{
    static const int hf_to_gguf[8] = { 0, 4, 1, 5, 2, 6, 3, 7 };
    static const int gguf_to_hf[8] = { 0, 2, 4, 6, 1, 3, 5, 7 };
    for (int dir = 0; dir < 2; dir++) {
        struct llm_file *f = new_model(dir == 0 ? "llama" : "qwen2");
        cr_assert_eq(llm_meta_set_str(f->meta, "hparams.rope_type", dir == 0 ? "neox" : "norm"),
                     LLM_OK);
        llm_meta_set_i64(f->meta, "hparams.head_count", 2);
        llm_meta_set_i64(f->meta, "hparams.head_count_kv", 1);
        llm_meta_set_i64(f->meta, "hparams.head_dim", 8);
        llm_meta_set_i64(f->meta, "hparams.rope_dim", 8);
        llm_meta_set_i64(f->meta, "hparams.embedding_length", 16);
        float q[16 * 16], k[8 * 16], bias[16];
        for (int r = 0; r < 16; r++)
            for (int c = 0; c < 16; c++)
                q[r * 16 + c] = (float)(r * 100 + c);
        for (int r = 0; r < 8; r++)
            for (int c = 0; c < 16; c++)
                k[r * 16 + c] = (float)(r * 100 + c);
        for (int r = 0; r < 16; r++)
            bias[r] = (float)r;
        add(f, "blk.0.attn_q.weight", LLM_TYPE_F32, 2, 16, 16, q);
        add(f, "blk.0.attn_k.weight", LLM_TYPE_F32, 2, 16, 8, k);
        add(f, "blk.0.attn_v.weight", LLM_TYPE_F32, 2, 16, 8, k);
        add(f, "blk.0.attn_q.bias", LLM_TYPE_F32, 1, 16, 1, bias);
        const char *out = tmp_path("p.gguf");
        cr_assert_eq(llm_gguf_write(f, out, NULL), LLM_OK, "%s", llm_error_detail(-1));
        struct llm_file *g = open_ok(out, NULL);
        const int *map = dir == 0 ? hf_to_gguf : gguf_to_hf;
        const float *gq = llm_file_find(g, "blk.0.attn_q.weight")->data;
        const float *gk = llm_file_find(g, "blk.0.attn_k.weight")->data;
        const float *gv = llm_file_find(g, "blk.0.attn_v.weight")->data;
        const float *gb = llm_file_find(g, "blk.0.attn_q.bias")->data;
        for (int r = 0; r < 16; r++) {
            int src = (r / 8) * 8 + map[r % 8]; /* per head of 8 rows */
            cr_assert_eq(gq[r * 16 + 3], (float)(src * 100 + 3), "dir %d q row %d", dir, r);
            cr_assert_eq(gb[r], (float)src, "dir %d bias %d", dir, r);
        }
        for (int r = 0; r < 8; r++) {
            cr_assert_eq(gk[r * 16], (float)(map[r] * 100), "dir %d k row %d", dir, r);
            cr_assert_eq(gv[r * 16], (float)(r * 100), "v is not reordered");
        }
        cr_assert_str_eq(meta_s(g, "hparams.rope_type"), dir == 0 ? "norm" : "neox");
        llm_file_free(g);
        llm_file_free(f);
    }
}

Test(gguf_write, llama3_scaling_and_mistral)
{
    struct llm_file *f = new_model("mistral");
    llm_meta_set_i64(f->meta, "hparams.head_count", 1);
    llm_meta_set_i64(f->meta, "hparams.head_dim", 128);
    llm_meta_set_i64(f->meta, "hparams.embedding_length", 128);
    llm_meta_set_f32(f->meta, "hparams.rope_theta", 500000.0f);
    llm_meta_set_str(f->meta, "hparams.rope_scaling.type", "llama3");
    llm_meta_set_f32(f->meta, "hparams.rope_scaling.factor", 8.0f);
    llm_meta_set_f32(f->meta, "hparams.rope_scaling.low_freq_factor", 1.0f);
    llm_meta_set_f32(f->meta, "hparams.rope_scaling.high_freq_factor", 4.0f);
    llm_meta_set_i64(f->meta, "hparams.rope_scaling.original_context_length", 8192);
    float x[128] = { 0 };
    add(f, "output_norm.weight", LLM_TYPE_F32, 1, 128, 1, x);
    const char *out = tmp_path("l3.gguf");
    cr_assert_eq(llm_gguf_write(f, out, NULL), LLM_OK, "%s", llm_error_detail(-1));
    size_t n;
    uint8_t *b = slurp(out, &n);
    uint32_t ty, et;
    size_t val;
    cr_assert(key_type(b, "general.architecture", &ty, &et, &val));
    cr_assert_eq(rd64(b + val), 5);
    cr_assert_eq(memcmp(b + val + 8, "llama", 5), 0);
    cr_assert(!key_type(b, "llama.rope.scaling.type", &ty, &et, &val));
    cr_assert(key_type(b, "llama.rope.freq_base", &ty, &et, &val) && ty == 6);
    free(b);
    struct llm_file *g = open_ok(out, NULL);
    struct llm_tensor *t = llm_file_find(g, "rope_freqs.weight");
    cr_assert(t);
    cr_assert_eq(t->type, LLM_TYPE_F32);
    cr_assert_eq(t->ne[0], 64);
    const float *r = t->data;
    /* high frequencies are kept, low ones divided by the factor (8), and
       the band between is smoothed: values strictly between 1 and 8 */
    cr_assert_eq(r[0], 1.0f);
    cr_assert_eq(r[63], 8.0f);
    int smooth = 0;
    for (int i = 1; i < 64; i++) {
        cr_assert_geq(r[i], r[i - 1]);
        smooth += r[i] > 1.0f && r[i] < 8.0f;
    }
    cr_assert_gt(smooth, 0);
    /* independent check of one smoothed value */
    for (int i = 0; i < 64; i++) {
        double freq = pow(500000.0, -2.0 * i / 128.0), wl = 2 * M_PI / freq;
        if (wl >= 8192 / 4.0 && wl <= 8192 / 1.0) {
            double sm = (8192 / wl - 1) / 3, want = 1 / ((1 - sm) / 8 + sm);
            cr_assert_float_eq(r[i], (float)want, 1e-5 * want, "factor %d", i);
        }
    }
    llm_file_free(g);
    llm_file_free(f);
}

/* GGUF -> .llm -> GGUF gives the bytes of GGUF -> GGUF: the metadata
 * (kept keys, their recorded types, float32 values) survives the YAML. */
Test(gguf_write, same_bytes_through_the_llm_format)
{
    static const char *files[] = { "gguf/stories260K.gguf", "vocab/ggml-vocab-gpt-2.gguf",
                                   "vocab/ggml-vocab-phi-3.gguf" };
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        const char *src = llm_test_data(files[i]);
        if (!src) {
            cr_skip_test("test data %s is absent", files[i]);
            return;
        }
        const char *direct = tmp_path("d.gguf"), *mid = tmp_path("m.llm"), *via = tmp_path("v.gguf");
        struct llm_file *f = open_ok(src, NULL);
        cr_assert_eq(llm_gguf_write(f, direct, NULL), LLM_OK, "%s", llm_error_detail(-1));
        cr_assert_eq(llm_llm_write(f, mid, NULL), LLM_OK, "%s", llm_error_detail(-1));
        llm_file_free(f);
        cr_assert_eq(llm_llm_open(&f, mid, NULL), LLM_OK, "%s", llm_error_detail(-1));
        cr_assert_eq(llm_gguf_write(f, via, NULL), LLM_OK, "%s", llm_error_detail(-1));
        llm_file_free(f);
        size_t na, nb;
        uint8_t *a = slurp(direct, &na), *b = slurp(via, &nb);
        cr_assert_eq(na, nb, "%s: %zu vs %zu bytes", files[i], na, nb);
        cr_assert_eq(memcmp(a, b, na), 0, "%s: bytes differ", files[i]);
        free(a);
        free(b);
    }
}

Test(gguf_write, kept_types_survive_the_llm_format)
{
    struct spec s;
    spec_init(&s);
    llama_keys(&s);
    gb_u16(key(&s, "split.no", 2), 3);
    gb_u64(key(&s, "x.u64", 10), UINT64_MAX);
    gb_f64(key(&s, "x.f64", 12), 0.1);
    gb_f32(key(&s, "x.f32", 6), 0.1f);
    struct gb *g = key(&s, "x.u8s", 9);
    gb_u32(g, 0);
    gb_u64(g, 2);
    gb_u8(g, 1);
    gb_u8(g, 200);
    size_t n;
    uint8_t *b = assemble(&s, &n);
    struct llm_file *f;
    cr_assert_eq(parse_copy(b, n, NULL, &f), LLM_OK, "%s", llm_error_detail(-1));
    const char *direct = tmp_path("d.gguf"), *mid = tmp_path("m.llm"), *via = tmp_path("v.gguf");
    cr_assert_eq(llm_gguf_write(f, direct, NULL), LLM_OK, "%s", llm_error_detail(-1));
    cr_assert_eq(llm_llm_write(f, mid, NULL), LLM_OK, "%s", llm_error_detail(-1));
    llm_file_free(f);
    cr_assert_eq(llm_llm_open(&f, mid, NULL), LLM_OK, "%s", llm_error_detail(-1));
    cr_assert_eq(llm_gguf_write(f, via, NULL), LLM_OK, "%s", llm_error_detail(-1));
    llm_file_free(f);
    size_t na, nb;
    uint8_t *x = slurp(direct, &na), *y = slurp(via, &nb);
    cr_assert_eq(na, nb);
    cr_assert_eq(memcmp(x, y, na), 0);
    uint32_t t, et;
    size_t val;
    cr_assert(key_type(y, "split.no", &t, &et, &val) && t == 2);
    cr_assert(key_type(y, "x.u64", &t, &et, &val) && t == 10 && rd64(y + val) == UINT64_MAX);
    cr_assert(key_type(y, "x.f64", &t, &et, &val) && t == 12);
    cr_assert(key_type(y, "x.f32", &t, &et, &val) && t == 6 && rd32(y + val) == 0x3dcccccdu);
    cr_assert(key_type(y, "x.u8s", &t, &et, &val) && t == 9 && et == 0);
    free(x);
    free(y);
    free(b);
}
