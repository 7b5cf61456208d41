/* test_gguf.c: the GGUF reader.
 *
 * References: the real files in shared/data (stories260K in GGUF and in
 * llama2.c form, with its tok512.bin tokenizer; llama.cpp's vocab-only
 * files), the facts formats.md §1.4 lists about them, the independent
 * walker in gguf_test_util.h, and crafted files from its builder. The
 * writer and round trips are in test_gguf_write.c. */
#include "gguf_test_util.h"

/* ====================================================================== */
/* real files */

Test(gguf, stories260k_metadata)
{
    TEST_DATA(path, "gguf/stories260K.gguf");
    struct llm_file *f = open_ok(path, NULL);
    cr_assert_str_eq(f->format, "gguf");
    cr_assert_eq(f->src_version, 3);
    cr_assert_str_eq(meta_s(f, "architecture"), "llama");
    cr_assert_str_eq(meta_s(f, "name"), "llama");
    /* formats.md §1.4 */
    cr_assert_eq(meta_i(f, "hparams.context_length"), 2048);
    cr_assert_eq(meta_i(f, "hparams.embedding_length"), 64);
    cr_assert_eq(meta_i(f, "hparams.feed_forward_length"), 172);
    cr_assert_eq(meta_i(f, "hparams.block_count"), 5);
    cr_assert_eq(meta_i(f, "hparams.head_count"), 8);
    cr_assert_eq(meta_i(f, "hparams.head_count_kv"), 4);
    cr_assert_eq(meta_i(f, "hparams.rope_dim"), 8);
    cr_assert_eq(meta_i(f, "hparams.head_dim"), 8);
    cr_assert_eq(meta_i(f, "hparams.vocab_size"), 512);
    cr_assert_eq((float)meta_f(f, "hparams.rms_norm_eps"), 1e-5f);
    cr_assert_eq(meta_f(f, "hparams.rope_theta"), 10000.0);
    cr_assert_str_eq(meta_s(f, "hparams.rope_type"), "norm");
    cr_assert_eq(meta_b(f, "hparams.tie_embeddings"), 0);
    cr_assert_str_eq(meta_s(f, "tokenizer.model"), "llama");
    cr_assert_eq(meta_i(f, "tokenizer.n_tokens"), 512);
    cr_assert_eq(meta_i(f, "tokenizer.unk_id"), 0);
    cr_assert_eq(meta_i(f, "tokenizer.bos_id"), 1);
    cr_assert_eq(meta_i(f, "tokenizer.eos_id"), 2);
    /* LLAMA_TOKEN_NULL ids are not tokens: kept as they were */
    cr_assert_null(llm_meta_get(f->meta, "tokenizer.sep_id"));
    cr_assert_null(llm_meta_get(f->meta, "tokenizer.pad_id"));
    struct llm_meta *sep = kept(f, "tokenizer.ggml.seperator_token_id");
    cr_assert(sep && sep->kind == LLM_META_INT && sep->i == 4294967295);
    cr_assert(kept(f, "tokenizer.ggml.padding_token_id"));
    /* nothing mapped is also kept */
    cr_assert_null(kept(f, "llama.block_count"));
    cr_assert_null(kept(f, "tokenizer.ggml.tokens"));
    cr_assert_str_eq(meta_s(f, "source.format"), "gguf");
    cr_assert_eq(meta_i(f, "source.gguf_version"), 3);
    llm_file_free(f);
}

Test(gguf, stories260k_tensors_in_place_and_equal_to_llama2c)
{
    TEST_DATA(path, "gguf/stories260K.gguf");
    TEST_DATA(bin, "llama2c/stories260K.bin");
    struct llm_file *f = open_ok(path, NULL);
    cr_assert_eq(n_weights(f), 48);
    const uint8_t *base = f->maps[0].data;
    size_t data_start = 14176; /* formats.md §1.4 */
    static const struct { const char *name; int64_t ne0, ne1; uint64_t off; } want[] = {
        { "token_embd.weight", 64, 512, 0 },      { "output_norm.weight", 64, 1, 131072 },
        { "output.weight", 64, 512, 131328 },     { "blk.0.attn_q.weight", 64, 64, 262400 },
        { "blk.0.attn_k.weight", 64, 32, 278784 }, { "blk.0.attn_v.weight", 64, 32, 286976 },
        { "blk.0.attn_output.weight", 64, 64, 295168 },
        { "blk.0.attn_norm.weight", 64, 1, 311552 },
        { "blk.0.ffn_gate.weight", 64, 172, 311808 },
        { "blk.0.ffn_down.weight", 172, 64, 355840 },
        { "blk.0.ffn_up.weight", 64, 172, 399872 }, { "blk.0.ffn_norm.weight", 64, 1, 443904 },
        { "blk.4.ffn_norm.weight", 64, 1, 1170944 },
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        struct llm_tensor *t = llm_file_find(f, want[i].name);
        cr_assert(t, "%s", want[i].name);
        cr_assert_eq(t->type, LLM_TYPE_F32, "%s", want[i].name);
        cr_assert_eq(t->ne[0], want[i].ne0, "%s", want[i].name);
        cr_assert_eq(t->ne[1], want[i].ne1, "%s", want[i].name);
        cr_assert_eq(t->n_dims, want[i].ne1 > 1 ? 2u : 1u, "%s", want[i].name);
        cr_assert_eq((const uint8_t *)t->data, base + data_start + want[i].off,
                     "%s is not read in place", want[i].name);
    }
    /* the llama2.c checkpoint holds the same floats (README: bit-identical).
       Legacy layout: 7 int32, token embedding (512x64), rms_att (5x64),
       wq (5x64x64), wk (5x32x64), wv, wo, rms_ffn, w1 (5x172x64), w2, w3,
       rms_final (64). */
    size_t bsize;
    uint8_t *b = slurp(bin, &bsize);
    const uint8_t *w = b + 28;
    size_t emb = 512 * 64 * 4, att = 5 * 64 * 4, wq = 5 * 64 * 64 * 4, wk = 5 * 32 * 64 * 4;
    size_t ffn = 5 * 172 * 64 * 4;
    struct { const char *name; size_t off, n; } cmp[] = {
        { "token_embd.weight", 0, emb },
        { "output.weight", 0, emb },
        { "blk.0.attn_norm.weight", emb, 256 },
        { "blk.3.attn_norm.weight", emb + 3 * 256, 256 },
        { "blk.1.attn_q.weight", emb + att + 64 * 64 * 4, 64 * 64 * 4 },
        { "blk.2.attn_k.weight", emb + att + wq + 2 * 32 * 64 * 4, 32 * 64 * 4 },
        { "blk.4.attn_output.weight", emb + att + wq + 2 * wk + 4 * 64 * 64 * 4, 64 * 64 * 4 },
        { "blk.0.ffn_gate.weight", emb + 2 * att + 2 * wq + 2 * wk, 172 * 64 * 4 },
        { "blk.0.ffn_up.weight", emb + 2 * att + 2 * wq + 2 * wk + 2 * ffn, 172 * 64 * 4 },
        { "output_norm.weight", emb + 2 * att + 2 * wq + 2 * wk + 3 * ffn, 256 },
    };
    for (size_t i = 0; i < sizeof cmp / sizeof cmp[0]; i++) {
        struct llm_tensor *t = llm_file_find(f, cmp[i].name);
        cr_assert_eq(t->nbytes, cmp[i].n, "%s", cmp[i].name);
        cr_assert_eq(memcmp(t->data, w + cmp[i].off, cmp[i].n), 0, "%s differs from llama2.c",
                     cmp[i].name);
    }
    free(b);
    llm_file_free(f);
}

Test(gguf, stories260k_vocab_equals_tok512)
{
    TEST_DATA(path, "gguf/stories260K.gguf");
    TEST_DATA(tok, "llama2c/tok512.bin");
    struct llm_file *f = open_ok(path, NULL);
    struct llm_vocab_view v;
    cr_assert_eq(llm_file_vocab(f, &v), LLM_OK);
    cr_assert_eq(v.n_tokens, 512);
    cr_assert_eq(v.n_merges, 0);
    cr_assert(v.scores && v.types);
    /* token types: <unk> UNKNOWN, <s> </s> CONTROL, <0x00> BYTE */
    cr_assert_eq(v.types[0], 2);
    cr_assert_eq(v.types[1], 3);
    cr_assert_eq(v.types[2], 3);
    cr_assert_eq(v.types[3], 6);
    size_t n;
    uint8_t *b = slurp(tok, &n);
    size_t pos = 4; /* max_token_length */
    for (uint32_t i = 0; i < 512; i++) {
        float score;
        memcpy(&score, b + pos, 4);
        uint32_t len = rd32(b + pos + 4);
        pos += 8;
        cr_assert_eq(v.scores[i], score, "token %u score", i);
        /* llama2.c's tokenizer.py writes BOS/EOS as "\n<s>\n"/"\n</s>\n"
           and U+2581 as a space; GGUF keeps the SentencePiece pieces */
        char want[64];
        size_t wl = 0;
        if (i == 1 || i == 2) {
            wl = (size_t)snprintf(want, sizeof want, "\n%.*s\n",
                                  (int)(v.offsets[i + 1] - v.offsets[i]),
                                  (const char *)v.bytes + v.offsets[i]);
        } else {
            for (uint32_t k = v.offsets[i]; k < v.offsets[i + 1]; k++) {
                if (k + 2 < v.offsets[i + 1] && !memcmp(v.bytes + k, "\xe2\x96\x81", 3)) {
                    want[wl++] = ' ';
                    k += 2;
                } else {
                    want[wl++] = (char)v.bytes[k];
                }
            }
        }
        cr_assert_eq(wl, len, "token %u length", i);
        cr_assert_eq(memcmp(want, b + pos, len), 0, "token %u bytes", i);
        pos += len;
    }
    cr_assert_eq(pos, n);
    free(b);
    llm_file_free(f);
}

Test(gguf, tiny_random_f16)
{
    TEST_DATA(path, "gguf/llama-2-tiny-random.gguf");
    struct llm_file *f = open_ok(path, NULL);
    cr_assert_eq(n_weights(f), 12);
    cr_assert_str_eq(meta_s(f, "name"), "LLaMA v2");
    cr_assert_eq(meta_i(f, "hparams.context_length"), 4096);
    cr_assert_eq(meta_i(f, "hparams.embedding_length"), 8);
    cr_assert_eq(meta_i(f, "hparams.block_count"), 1);
    cr_assert_eq(meta_i(f, "hparams.feed_forward_length"), 32);
    cr_assert_eq(meta_i(f, "hparams.head_count"), 2);
    cr_assert_eq(meta_i(f, "hparams.head_dim"), 4);
    cr_assert_eq(meta_i(f, "hparams.vocab_size"), 32000);
    cr_assert_eq(meta_i(f, "source.gguf_file_type"), 1);
    const uint8_t *base = f->maps[0].data;
    size_t data_start = (724398 + 31) / 32 * 32; /* tensor infos end at 724398 */
    struct llm_tensor *e = llm_file_find(f, "token_embd.weight");
    cr_assert_eq(e->type, LLM_TYPE_F16);
    cr_assert_eq(e->ne[0], 8);
    cr_assert_eq(e->ne[1], 32000);
    cr_assert_eq(e->nbytes, 8 * 32000 * 2);
    cr_assert_eq((const uint8_t *)e->data, base + data_start);
    struct llm_tensor *o = llm_file_find(f, "output.weight");
    cr_assert_eq(o->type, LLM_TYPE_F16);
    cr_assert_eq((const uint8_t *)o->data, base + data_start + 514144);
    struct llm_tensor *n = llm_file_find(f, "blk.0.ffn_norm.weight");
    cr_assert_eq(n->type, LLM_TYPE_F32);
    cr_assert_eq(n->n_dims, 1);
    cr_assert_eq((const uint8_t *)n->data, base + data_start + 514080);
    /* F16 values decode to finite numbers of a random init */
    const uint16_t *h = e->data;
    for (int i = 0; i < 8 * 32000; i += 997)
        cr_assert(isfinite(llm_fp16_to_fp32(h[i])));
    llm_file_free(f);
}

Test(gguf, vocab_only_files)
{
    static const struct {
        const char *file, *model, *arch;
        uint32_t n_tokens, n_merges;
        int scores;
        uint32_t probe;
        const char *probe_text;
    } want[] = {
        { "vocab/ggml-vocab-llama-spm.gguf", "llama", "llama", 32000, 0, 1, 1, "<s>" },
        { "vocab/ggml-vocab-phi-3.gguf", "llama", "phi3", 32064, 0, 1, 32000, "<|endoftext|>" },
        { "vocab/ggml-vocab-gpt-2.gguf", "gpt2", "gpt2", 50257, 50000, 0, 50256, "<|endoftext|>" },
        { "vocab/ggml-vocab-starcoder.gguf", "gpt2", "starcoder2", 49152, 48872, 0, 0,
          "<|endoftext|>" },
        { "vocab/ggml-vocab-deepseek-coder.gguf", "gpt2", "llama", 32256, 31757, 0, 1, "\"" },
    };
    for (size_t k = 0; k < sizeof want / sizeof want[0]; k++) {
        const char *path = llm_test_data(want[k].file);
        if (!path) {
            cr_skip_test("test data %s is absent", want[k].file);
            return;
        }
        struct llm_file *f = open_ok(path, NULL);
        cr_assert_eq(n_weights(f), 0, "%s", want[k].file);
        cr_assert_str_eq(meta_s(f, "architecture"), want[k].arch);
        cr_assert_str_eq(meta_s(f, "tokenizer.model"), want[k].model);
        cr_assert_eq(meta_i(f, "tokenizer.n_tokens"), want[k].n_tokens);
        struct llm_vocab_view v;
        cr_assert_eq(llm_file_vocab(f, &v), LLM_OK);
        cr_assert_eq(v.n_tokens, want[k].n_tokens, "%s", want[k].file);
        cr_assert_eq(v.n_merges, want[k].n_merges, "%s", want[k].file);
        cr_assert_eq(!!v.scores, want[k].scores, "%s", want[k].file);
        cr_assert(v.types);
        uint32_t len = v.offsets[want[k].probe + 1] - v.offsets[want[k].probe];
        cr_assert_eq(len, strlen(want[k].probe_text), "%s", want[k].file);
        cr_assert_eq(memcmp(v.bytes + v.offsets[want[k].probe], want[k].probe_text, len), 0);
        cr_assert_null(llm_meta_get(f->meta, "hparams.tie_embeddings"));
        llm_file_free(f);
    }
    /* key specifics */
    const char *ds = llm_test_data("vocab/ggml-vocab-deepseek-coder.gguf");
    struct llm_file *f = open_ok(ds, NULL);
    cr_assert_str_eq(meta_s(f, "tokenizer.pre"), "deepseek-coder");
    cr_assert_str_eq(meta_s(f, "hparams.rope_scaling.type"), "linear");
    cr_assert_eq(meta_f(f, "hparams.rope_scaling.factor"), 4.0);
    cr_assert_eq(meta_f(f, "hparams.rope_theta"), 100000.0);
    cr_assert_eq(meta_i(f, "hparams.vocab_size"), 32256);
    cr_assert_eq(meta_i(f, "tokenizer.bos_id"), 32013);
    cr_assert_eq(meta_i(f, "tokenizer.pad_id"), 32014);
    cr_assert_eq(meta_b(f, "tokenizer.add_bos"), 1);
    cr_assert_eq(meta_b(f, "tokenizer.add_eos"), 0);
    llm_file_free(f);
    f = open_ok(llm_test_data("vocab/ggml-vocab-gpt-2.gguf"), NULL);
    /* gpt2 has no RoPE and a LayerNorm epsilon we do not map: kept */
    cr_assert_null(llm_meta_get(f->meta, "hparams.rope_type"));
    struct llm_meta *eps = kept(f, "gpt2.attention.layer_norm_epsilon");
    cr_assert(eps && eps->kind == LLM_META_FLOAT && (float)eps->f == 1e-5f);
    llm_file_free(f);
    f = open_ok(llm_test_data("vocab/ggml-vocab-phi-3.gguf"), NULL);
    cr_assert(!strncmp(meta_s(f, "chat_template"), "{{ bos_token }}", 15));
    cr_assert_eq(meta_i(f, "hparams.rope_scaling.original_context_length"), 4096);
    cr_assert_str_eq(meta_s(f, "hparams.rope_type"), "neox");
    llm_file_free(f);
}

/* ====================================================================== */
/* damaged files */

static void expect_format(const uint8_t *data, size_t size, const char *what)
{
    struct llm_file *f = (struct llm_file *)1;
    llm_error_clear();
    llm_status s = llm_gguf_parse(&f, data, size, "stories260K.gguf", NULL);
    cr_assert_eq(s, LLM_E_FORMAT, "%s: status %d: %s", what, s, llm_error_detail(s));
    cr_assert_null(f);
    cr_assert(!strncmp(llm_error_detail(s), "stories260K.gguf: ", 18), "%s: detail '%s'", what,
              llm_error_detail(s));
}

Test(gguf, truncation_at_every_section_boundary)
{
    TEST_DATA(src, "gguf/stories260K.gguf");
    size_t n;
    uint8_t *full = slurp(src, &n);
    struct walk w;
    walk(full, n, &w);
    cr_assert_eq(w.infos_end, 14152); /* formats.md §1.4 */
    cr_assert_eq(w.data_start, 14176);
    size_t cuts[512], nc = 0;
    size_t fixed[] = { 0, 1, 3, 4, 7, 8, 15, 16, 23, 24, 31, 32, w.infos_end - 1, w.infos_end,
                       w.data_start - 1, w.data_start, n - 1 };
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++)
        cuts[nc++] = fixed[i];
    for (uint64_t i = 0; i < w.n_kv; i++) { /* every record: its end, and mid-value */
        cuts[nc++] = w.kv_end[i];
        cuts[nc++] = w.kv_end[i] - 1;
        cuts[nc++] = w.kv_end[i] + 8; /* inside the next key's length/name */
    }
    for (uint64_t i = 0; i < w.n_tensors; i++) {
        cuts[nc++] = w.ti_end[i];
        cuts[nc++] = w.ti_end[i] - 5; /* inside the offset */
        cuts[nc++] = w.data_start + w.t_off[i] + 1;
        if (w.t_off[i])
            cuts[nc++] = w.data_start + w.t_off[i] - 1; /* previous tensor's last byte */
    }
    cr_assert_leq(nc, sizeof cuts / sizeof cuts[0]);
    for (size_t i = 0; i < nc; i++) {
        size_t cut = cuts[i] < n ? cuts[i] : n - 1;
        uint8_t *b = malloc(cut ? cut : 1);
        memcpy(b, full, cut);
        char what[64];
        snprintf(what, sizeof what, "cut at %zu", cut);
        expect_format(b, cut, what);
        free(b);
    }
    /* and every length of the header and tensor infos */
    uint8_t *b = malloc(w.data_start);
    for (size_t cut = 0; cut < w.data_start; cut++) {
        memcpy(b, full, cut);
        struct llm_file *f = NULL;
        llm_status s = llm_gguf_parse(&f, b, cut, "stories260K.gguf", NULL);
        cr_assert_eq(s, LLM_E_FORMAT, "cut at %zu: %d", cut, s);
        cr_assert(!strncmp(llm_error_detail(s), "stories260K.gguf: ", 18));
    }
    free(b);
    free(full);
}

Test(gguf, truncated_vocab_file)
{
    TEST_DATA(src, "vocab/ggml-vocab-gpt-2.gguf");
    size_t n;
    uint8_t *full = slurp(src, &n);
    struct walk w;
    walk(full, n, &w);
    cr_assert_eq(w.infos_end, n); /* no padding at the end of a vocab-only file */
    for (uint64_t i = 0; i < w.n_kv; i++) {
        size_t cut = w.kv_end[i] - (i % 3 + 1);
        uint8_t *b = malloc(cut);
        memcpy(b, full, cut);
        char what[64];
        snprintf(what, sizeof what, "record %llu cut at %zu", (unsigned long long)i, cut);
        expect_format(b, cut, what);
        free(b);
    }
    free(full);
}

Test(gguf, flipped_bytes_never_crash)
{
    TEST_DATA(src, "gguf/stories260K.gguf");
    size_t n;
    uint8_t *b = slurp(src, &n);
    struct walk w;
    walk(b, n, &w);
    size_t n_format = 0, n_ok = 0;
    for (size_t i = 0; i < w.data_start; i++) {
        b[i] ^= 0xFF;
        struct llm_file *f = NULL;
        llm_error_clear();
        llm_status s = llm_gguf_parse(&f, b, n, "stories260K.gguf", NULL);
        b[i] ^= 0xFF;
        if (s == LLM_OK) {
            n_ok++;
            llm_file_free(f);
            continue;
        }
        cr_assert_eq(s, LLM_E_FORMAT, "byte %zu: status %d: %s", i, s, llm_error_detail(s));
        cr_assert(!strncmp(llm_error_detail(s), "stories260K.gguf: ", 18), "byte %zu: '%s'", i,
                  llm_error_detail(s));
        cr_assert_null(f);
        n_format++;
    }
    cr_assert_gt(n_format, 500);
    cr_assert_gt(n_ok, 100); /* token bytes, scores, float values... */
    /* bytes that must be refused: magic, version, counts, a key length,
       n_dims, type and offset of the first tensor */
    size_t ti0 = w.kv_end[w.n_kv - 1]; /* first tensor info */
    size_t nd0 = ti0 + 8 + 17;         /* after "token_embd.weight" */
    size_t must[] = { 0, 4, 15, 23, 31, nd0, nd0 + 4 + 16, nd0 + 4 + 16 + 4 };
    for (size_t i = 0; i < sizeof must / sizeof must[0]; i++) {
        b[must[i]] ^= 0xFF;
        char what[64];
        snprintf(what, sizeof what, "byte %zu flipped", must[i]);
        expect_format(b, n, what);
        b[must[i]] ^= 0xFF;
    }
    /* several random bytes at once, anywhere before the data */
    uint32_t seed = 12345;
    for (int it = 0; it < 2000; it++) {
        size_t pos[4];
        uint8_t old[4];
        int k = 1 + it % 4;
        for (int j = 0; j < k; j++) {
            seed = seed * 1103515245u + 12345u;
            pos[j] = (seed >> 8) % w.data_start;
            old[j] = b[pos[j]];
            b[pos[j]] = (uint8_t)(seed >> 3);
        }
        struct llm_file *f = NULL;
        llm_status s = llm_gguf_parse(&f, b, n, "stories260K.gguf", NULL);
        for (int j = k - 1; j >= 0; j--)
            b[pos[j]] = old[j];
        if (s == LLM_OK) {
            llm_file_free(f);
            continue;
        }
        cr_assert(s == LLM_E_FORMAT || s == LLM_E_UNSUPPORTED, "iteration %d: status %d", it, s);
        cr_assert(!strncmp(llm_error_detail(s), "stories260K.gguf: ", 18), "iteration %d: '%s'",
                  it, llm_error_detail(s));
    }
    free(b);
}

/* ====================================================================== */
/* crafted files */

Test(gguf, versions_and_endianness)
{
    struct spec s;
    size_t n;
    uint8_t *b;
    struct llm_file *f;
    uint32_t bad[] = { 1, 0x03000000u, 0x02000000u, 0, 4, 0xFFFFFFFFu };
    llm_status want[] = { LLM_E_UNSUPPORTED, LLM_E_UNSUPPORTED, LLM_E_UNSUPPORTED,
                          LLM_E_FORMAT, LLM_E_FORMAT, LLM_E_FORMAT };
    const char *needle[] = { "version 1", "big-endian", "big-endian", "version 0", "version 4",
                             "version 4294967295" };
    for (int i = 0; i < 6; i++) {
        spec_init(&s);
        s.version = bad[i];
        llama_keys(&s);
        b = assemble(&s, &n);
        expect_error(b, n, want[i], needle[i]);
        free(b);
    }
    spec_init(&s);
    s.version = 2;
    llama_keys(&s);
    b = assemble(&s, &n);
    cr_assert_eq(parse_copy(b, n, NULL, &f), LLM_OK, "%s", llm_error_detail(-1));
    cr_assert_eq(meta_i(f, "source.gguf_version"), 2);
    llm_file_free(f);
    free(b);
    uint8_t junk[8] = "GGUG\3\0\0\0";
    expect_error(junk, 8, LLM_E_FORMAT, "not a GGUF file");
    expect_error(junk, 0, LLM_E_FORMAT, "not a GGUF file");
}

Test(gguf, huge_counts_and_lengths_are_refused_without_allocating)
{
    struct spec s;
    size_t n;
    uint8_t *b;
    /* header counts */
    spec_init(&s);
    llama_keys(&s);
    b = assemble(&s, &n);
    uint8_t *h = malloc(n);
    memcpy(h, b, n);
    h[23] = 0x10; /* n_kv = 2^60 + ... */
    expect_error(h, n, LLM_E_FORMAT, "metadata records cannot fit");
    memcpy(h, b, n);
    h[15] = 0x40; /* n_tensors */
    expect_error(h, n, LLM_E_FORMAT, "tensor infos cannot fit");
    free(h);
    free(b);
    /* array counts */
    static const uint32_t et[] = { 0, 8, 12 };
    for (int i = 0; i < 3; i++) {
        spec_init(&s);
        struct gb *g = key(&s, "x.arr", 9);
        gb_u32(g, et[i]);
        gb_u64(g, (uint64_t)1 << 60);
        gb_u64(g, 0);
        b = assemble(&s, &n);
        expect_error(b, n, LLM_E_FORMAT, "x.arr");
        free(b);
    }
    /* a string length of 2^63, in a key and in a value */
    spec_init(&s);
    gb_u64(&s.kv, (uint64_t)1 << 63);
    for (int i = 0; i < 8; i++)
        gb_u64(&s.kv, 0);
    s.n_kv = 1;
    b = assemble(&s, &n);
    expect_error(b, n, LLM_E_FORMAT, "truncated");
    free(b);
    spec_init(&s);
    gb_u64(key(&s, "x.s", 8), UINT64_MAX);
    b = assemble(&s, &n);
    expect_error(b, n, LLM_E_FORMAT, "key 'x.s'");
    free(b);
    /* nested arrays, unknown value types */
    spec_init(&s);
    gb_u32(key(&s, "x.nest", 9), 9);
    gb_u64(&s.kv, 1);
    b = assemble(&s, &n);
    expect_error(b, n, LLM_E_FORMAT, "arrays of arrays");
    free(b);
    spec_init(&s);
    gb_u32(key(&s, "x.t", 13), 0);
    b = assemble(&s, &n);
    expect_error(b, n, LLM_E_FORMAT, "unknown value type 13");
    free(b);
    spec_init(&s);
    gb_u32(key(&s, "x.t", 9), 77);
    gb_u64(&s.kv, 1);
    b = assemble(&s, &n);
    expect_error(b, n, LLM_E_FORMAT, "unknown array element type 77");
    free(b);
    /* empty key, key with a NUL */
    spec_init(&s);
    gb_str(&s.kv, "");
    gb_u32(&s.kv, 4);
    gb_u32(&s.kv, 1);
    s.n_kv = 1;
    b = assemble(&s, &n);
    expect_error(b, n, LLM_E_FORMAT, "bad key");
    free(b);
    spec_init(&s);
    gb_strn(&s.kv, "a\0b", 3);
    gb_u32(&s.kv, 4);
    gb_u32(&s.kv, 1);
    s.n_kv = 1;
    b = assemble(&s, &n);
    expect_error(b, n, LLM_E_FORMAT, "bad key");
    free(b);
}

Test(gguf, duplicates_are_refused)
{
    struct spec s;
    size_t n;
    uint8_t *b;
    spec_init(&s);
    llama_keys(&s);
    key_u32(&s, "llama.block_count", 2);
    b = assemble(&s, &n);
    expect_error(b, n, LLM_E_FORMAT, "duplicate metadata key 'llama.block_count'");
    free(b);
    spec_init(&s);
    llama_keys(&s);
    float v[4] = { 1, 2, 3, 4 };
    uint64_t ne[1] = { 4 };
    tensor(&s, "a.weight", 1, ne, 0, v, 16);
    tensor(&s, "a.weight", 1, ne, 0, v, 16);
    b = assemble(&s, &n);
    expect_error(b, n, LLM_E_FORMAT, "duplicate tensor 'a.weight'");
    free(b);
}

/* One tensor info with the given fields and `nbytes` bytes of zero data. */
static uint8_t *one_tensor(const char *name, uint32_t n_dims, const uint64_t *ne, uint32_t type,
                           uint64_t offset, size_t nbytes, size_t *size)
{
    struct spec s;
    spec_init(&s);
    llama_keys(&s);
    gb_str(&s.ti, name);
    gb_u32(&s.ti, n_dims);
    for (uint32_t d = 0; d < n_dims; d++)
        gb_u64(&s.ti, ne[d]);
    gb_u32(&s.ti, type);
    gb_u64(&s.ti, offset);
    s.n_t = 1;
    uint8_t *zero = calloc(1, nbytes + 1);
    gb_put(&s.data, zero, nbytes);
    free(zero);
    return assemble(&s, size);
}

Test(gguf, bad_tensor_infos_are_refused)
{
    size_t n;
    uint8_t *b;
    uint64_t ne[5] = { 32, 2, 1, 1, 1 };
    b = one_tensor("t.weight", 0, ne, 0, 0, 256, &n);
    expect_error(b, n, LLM_E_FORMAT, "0 dimensions");
    free(b);
    b = one_tensor("t.weight", 5, ne, 0, 0, 256, &n);
    expect_error(b, n, LLM_E_FORMAT, "5 dimensions");
    free(b);
    uint64_t zero[2] = { 32, 0 };
    b = one_tensor("t.weight", 2, zero, 0, 0, 256, &n);
    expect_error(b, n, LLM_E_FORMAT, "dimension 1 is 0");
    free(b);
    uint64_t neg[2] = { 32, (uint64_t)1 << 63 };
    b = one_tensor("t.weight", 2, neg, 0, 0, 256, &n);
    expect_error(b, n, LLM_E_FORMAT, "t.weight");
    free(b);
    uint64_t big[3] = { (uint64_t)1 << 32, (uint64_t)1 << 32, 1 << 20 };
    b = one_tensor("t.weight", 3, big, 0, 0, 256, &n);
    expect_error(b, n, LLM_E_FORMAT, "too large");
    free(b);
    uint64_t odd[2] = { 48, 2 };
    b = one_tensor("q.weight", 2, odd, 8, 0, 256, &n);
    expect_error(b, n, LLM_E_FORMAT, "not a multiple of the Q8_0 block");
    free(b);
    b = one_tensor("", 2, ne, 0, 0, 256, &n);
    expect_error(b, n, LLM_E_FORMAT, "bad name");
    free(b);
    char longname[300];
    memset(longname, 'x', sizeof longname - 1);
    longname[299] = 0;
    b = one_tensor(longname, 2, ne, 0, 0, 256, &n);
    expect_error(b, n, LLM_E_FORMAT, "bad name");
    free(b);
    /* types */
    b = one_tensor("t.weight", 2, ne, 200, 0, 256, &n);
    expect_error(b, n, LLM_E_FORMAT, "tensor 't.weight': unknown GGML type 200");
    free(b);
    b = one_tensor("t.weight", 2, ne, 4, 0, 256, &n); /* removed Q4_2 */
    expect_error(b, n, LLM_E_FORMAT, "unknown GGML type 4");
    free(b);
    uint64_t row256[2] = { 256, 1 };
    b = one_tensor("iq.weight", 2, row256, 16, 0, 66, &n);
    expect_error(b, n, LLM_E_UNSUPPORTED, "tensor 'iq.weight': GGML type IQ2_XXS (16)");
    free(b);
    /* places */
    b = one_tensor("t.weight", 2, ne, 0, 16, 512, &n);
    expect_error(b, n, LLM_E_FORMAT, "offset 16 is not a multiple of the alignment 32");
    free(b);
    b = one_tensor("t.weight", 2, ne, 0, 0, 255, &n);
    expect_error(b, n, LLM_E_FORMAT, "tensor 't.weight': data (256 bytes at offset 0) runs past");
    free(b);
    b = one_tensor("t.weight", 2, ne, 0, UINT64_MAX - 31, 256, &n);
    expect_error(b, n, LLM_E_FORMAT, "runs past the end");
    free(b);
}

Test(gguf, alignment)
{
    struct spec s;
    size_t n;
    uint8_t *b;
    struct llm_file *f;
    float v[8] = { 1, 2, 3, 4, 5, 6, 7, 8 };
    uint64_t ne[1] = { 8 };
    /* 64: data starts at a multiple of 64 */
    spec_init(&s);
    s.align = 64;
    llama_keys(&s);
    key_u32(&s, "general.alignment", 64);
    tensor(&s, "a.weight", 1, ne, 0, v, 32);
    tensor(&s, "b.weight", 1, ne, 0, v, 32);
    b = assemble(&s, &n);
    uint8_t *page = aligned_alloc(4096, 8192);
    memcpy(page, b, n);
    cr_assert_eq(llm_gguf_parse(&f, page, n, "t.gguf", NULL), LLM_OK, "%s", llm_error_detail(-1));
    struct llm_tensor *t = llm_file_find(f, "b.weight");
    cr_assert_eq(((const uint8_t *)t->data - page) % 64, 0);
    cr_assert_eq(memcmp(t->data, v, 32), 0);
    cr_assert_null(kept(f, "general.alignment")); /* a layout fact, not kept */
    llm_file_free(f);
    free(page);
    free(b);
    /* not a power of two, zero, wrong type */
    uint32_t bad[] = { 48, 0 };
    for (int i = 0; i < 2; i++) {
        spec_init(&s);
        key_u32(&s, "general.alignment", bad[i]);
        b = assemble(&s, &n);
        expect_error(b, n, LLM_E_FORMAT, "is not a power of two");
        free(b);
    }
    spec_init(&s);
    gb_u64(key(&s, "general.alignment", 10), 32);
    b = assemble(&s, &n);
    expect_error(b, n, LLM_E_FORMAT, "general.alignment has type u64");
    free(b);
    /* alignment 1: data is not aligned in memory, so it is copied on use */
    spec_init(&s);
    s.align = 1;
    llama_keys(&s);
    key_u32(&s, "general.alignment", 1);
    tensor(&s, "a.weight", 1, ne, 0, v, 32);
    b = assemble(&s, &n);
    uint8_t *c = aligned_alloc(64, 4096);
    memcpy(c + 1, b, n); /* odd address */
    cr_assert_eq(llm_gguf_parse(&f, c + 1, n, "t.gguf", NULL), LLM_OK, "%s", llm_error_detail(-1));
    t = llm_file_find(f, "a.weight");
    const void *p;
    cr_assert_eq(llm_tensor_bytes(f, t, &p), LLM_OK);
    cr_assert_eq((uintptr_t)p % 4, 0);
    cr_assert_eq(memcmp(p, v, 32), 0);
    llm_file_free(f);
    free(c);
    free(b);
}

/* Random blocks with finite half scales. */
static void random_blocks(uint8_t *p, size_t nblocks, size_t bytes, const size_t *halves,
                          size_t nh, uint32_t seed)
{
    for (size_t i = 0; i < nblocks * bytes; i++) {
        seed = seed * 1103515245u + 12345u;
        p[i] = (uint8_t)(seed >> 16);
    }
    for (size_t b = 0; b < nblocks; b++)
        for (size_t k = 0; k < nh; k++) {
            seed = seed * 1103515245u + 12345u;
            uint16_t h = llm_fp32_to_fp16((float)((seed >> 16) % 2000) / 4096.0f - 0.25f);
            memcpy(p + b * bytes + halves[k], &h, 2);
        }
}

/* The K-quants, Q5_0 and Q5_1 are llm_types now: kept byte for byte
 * whatever the decode target; Q8_1 (no twin) is still decoded on demand. */
Test(gguf, kquant_tensors_are_kept_and_others_decoded_on_demand)
{
    static const struct { uint32_t g; const char *name; size_t bytes; size_t halves[2], nh; } ks[] = {
        { 10, "q2k.weight", 84, { 80, 82 }, 2 },  { 11, "q3k.weight", 110, { 108 }, 1 },
        { 12, "q4k.weight", 144, { 0, 2 }, 2 },   { 13, "q5k.weight", 176, { 0, 2 }, 2 },
        { 14, "q6k.weight", 210, { 208 }, 1 },    { 6, "q50.weight", 22, { 0 }, 1 },
        { 7, "q51.weight", 24, { 0, 2 }, 2 },    { 9, "q81.weight", 36, { 0, 2 }, 2 },
    };
    uint8_t blocks[8][2 * 8 * 210];
    struct spec s;
    spec_init(&s);
    llama_keys(&s);
    for (int k = 0; k < 8; k++) {
        uint32_t blck = llm_ggml_type_info(ks[k].g)->blck;
        size_t nb = 512 / blck * 2; /* [512, 2] */
        random_blocks(blocks[k], nb, ks[k].bytes, ks[k].halves, ks[k].nh, 7u + (uint32_t)k);
        uint64_t ne[2] = { 512, 2 };
        tensor(&s, ks[k].name, 2, ne, ks[k].g, blocks[k], nb * ks[k].bytes);
    }
    uint8_t q8[34 * 2] = { 0 };
    q8[0] = 0x00;
    q8[1] = 0x3C; /* d = 1 */
    q8[2] = 5;
    uint64_t ne8[1] = { 64 };
    tensor(&s, "q8.weight", 1, ne8, 8, q8, sizeof q8);
    size_t n;
    uint8_t *b = assemble(&s, &n);
    static const enum llm_type targets[] = { LLM_TYPE_F16, LLM_TYPE_F32, LLM_TYPE_Q8_0 };
    for (int ti = 0; ti < 3; ti++) {
        struct llm_import_opts o;
        llm_import_opts_default(&o);
        o.dequant_type = targets[ti];
        struct llm_file *f;
        uint8_t *page = aligned_alloc(4096, (n + 4095) / 4096 * 4096);
        memcpy(page, b, n);
        cr_assert_eq(llm_gguf_parse(&f, page, n, "t.gguf", &o), LLM_OK, "%s",
                     llm_error_detail(-1));
        /* Q8_0 is kept as it is, in place */
        struct llm_tensor *t8 = llm_file_find(f, "q8.weight");
        cr_assert_eq(t8->type, LLM_TYPE_Q8_0);
        cr_assert(t8->data && !memcmp(t8->data, q8, sizeof q8));
        for (int k = 0; k < 8; k++) {
            struct llm_tensor *t = llm_file_find(f, ks[k].name);
            const int kept = llm_type_from_ggml(ks[k].g);
            size_t src_bytes = 512 / llm_ggml_type_info(ks[k].g)->blck * ks[k].bytes * 2;
            if (kept >= 0) {
                cr_assert_eq(t->type, (enum llm_type)kept, "%s", ks[k].name);
                cr_assert_eq(t->nbytes, src_bytes, "%s", ks[k].name);
                uint8_t *got = malloc(t->nbytes);
                cr_assert_eq(llm_tensor_read(f, t, got), LLM_OK, "%s", llm_error_detail(-1));
                cr_assert_eq(memcmp(got, blocks[k], src_bytes), 0, "%s changed", ks[k].name);
                free(got);
                continue;
            }
            cr_assert_eq(t->type, targets[ti], "%s", ks[k].name);
            cr_assert_null(t->data, "%s decoded early", ks[k].name);
            cr_assert(t->fill);
            uint8_t *got = malloc(t->nbytes);
            cr_assert_eq(llm_tensor_read(f, t, got), LLM_OK, "%s", llm_error_detail(-1));
            float row[512];
            size_t src_row = 512 / llm_ggml_type_info(ks[k].g)->blck * ks[k].bytes;
            for (int r = 0; r < 2; r++) {
                cr_assert_eq(llm_ggml_dequantize_row(ks[k].g, blocks[k] + r * src_row, row, 512),
                             LLM_OK);
                if (targets[ti] == LLM_TYPE_F32) {
                    cr_assert_eq(memcmp(got + r * 2048, row, 2048), 0, "%s", ks[k].name);
                } else if (targets[ti] == LLM_TYPE_F16) {
                    for (int i = 0; i < 512; i++) {
                        uint16_t h;
                        memcpy(&h, got + r * 1024 + 2 * i, 2);
                        cr_assert_eq(h, llm_fp32_to_fp16(row[i]), "%s [%d][%d]", ks[k].name, r, i);
                    }
                } else {
                    uint8_t want[16 * 34];
                    cr_assert_eq(llm_quantize_row(LLM_TYPE_Q8_0, row, want, 512), LLM_OK);
                    cr_assert_eq(memcmp(got + r * 16 * 34, want, sizeof want), 0, "%s",
                                 ks[k].name);
                }
            }
            free(got);
        }
        llm_file_free(f);
        free(page);
    }
    /* a decode target that is not a weight type */
    struct llm_import_opts o;
    llm_import_opts_default(&o);
    o.dequant_type = LLM_TYPE_U8;
    struct llm_file *f;
    cr_assert_eq(llm_gguf_parse(&f, b, n, "t.gguf", &o), LLM_E_INVALID);
    free(b);
}

Test(gguf, mapped_keys_with_wrong_types_are_refused)
{
    struct spec s;
    size_t n;
    uint8_t *b;
    spec_init(&s);
    llama_keys(&s);
    key_str(&s, "llama.context_length", "2048");
    b = assemble(&s, &n);
    expect_error(b, n, LLM_E_FORMAT, "key 'llama.context_length' has type str");
    free(b);
    spec_init(&s);
    llama_keys(&s);
    key_u32(&s, "llama.attention.layer_norm_rms_epsilon", 1);
    b = assemble(&s, &n);
    expect_error(b, n, LLM_E_FORMAT, "layer_norm_rms_epsilon' has type u32, expected f32");
    free(b);
    spec_init(&s);
    llama_keys(&s);
    gb_u8(key(&s, "tokenizer.ggml.add_bos_token", 0), 1);
    b = assemble(&s, &n);
    expect_error(b, n, LLM_E_FORMAT, "add_bos_token' has type u8, expected bool");
    free(b);
    spec_init(&s);
    llama_keys(&s);
    struct gb *g = key(&s, "tokenizer.ggml.scores", 9);
    gb_u32(g, 6);
    gb_u64(g, 2);
    gb_f32(g, 0);
    gb_f32(g, 0);
    b = assemble(&s, &n);
    expect_error(b, n, LLM_E_FORMAT, "scores has 2 entries for 6 tokens");
    free(b);
    spec_init(&s);
    g = key(&s, "tokenizer.ggml.tokens", 9);
    gb_u32(g, 0);
    gb_u64(g, 1);
    gb_u8(g, 65);
    b = assemble(&s, &n);
    expect_error(b, n, LLM_E_FORMAT, "tokenizer.ggml.tokens' has type u8[]");
    free(b);
    spec_init(&s);
    gb_u64(key(&s, "llama.block_count", 10), UINT64_MAX);
    key_str(&s, "general.architecture", "llama");
    b = assemble(&s, &n);
    expect_error(b, n, LLM_E_FORMAT, "out of range");
    free(b);
}

Test(gguf, special_ids_and_defaults)
{
    struct spec s;
    spec_init(&s);
    llama_keys(&s);
    key_u32(&s, "tokenizer.ggml.bos_token_id", 1);
    key_u32(&s, "tokenizer.ggml.eos_token_id", 6);  /* == n_tokens: not a token */
    key_u32(&s, "tokenizer.ggml.eot_token_id", 5);
    key_u32(&s, "tokenizer.ggml.padding_token_id", 0xFFFFFFFFu);
    gb_u8(key(&s, "tokenizer.ggml.add_space_prefix", 7), 0);
    key_u32(&s, "llama.attention.key_length", 16);
    key_str(&s, "general.name", "crafted");
    float v[32] = { 0 };
    uint64_t ne[2] = { 32, 1 };
    tensor(&s, "token_embd.weight", 2, ne, 0, v, sizeof v);
    size_t n;
    uint8_t *b = assemble(&s, &n);
    struct llm_file *f;
    cr_assert_eq(parse_copy(b, n, NULL, &f), LLM_OK, "%s", llm_error_detail(-1));
    cr_assert_eq(meta_i(f, "tokenizer.bos_id"), 1);
    cr_assert_eq(meta_i(f, "tokenizer.eot_id"), 5);
    cr_assert_null(llm_meta_get(f->meta, "tokenizer.eos_id"));
    cr_assert_eq(kept(f, "tokenizer.ggml.eos_token_id")->i, 6);
    cr_assert_null(llm_meta_get(f->meta, "tokenizer.pad_id"));
    cr_assert_eq(meta_b(f, "tokenizer.add_space_prefix"), 0);
    /* defaults made explicit */
    cr_assert_eq(meta_i(f, "hparams.head_count_kv"), 4);
    cr_assert_eq(meta_i(f, "hparams.head_dim"), 16); /* key_length wins over 32/4 */
    cr_assert_eq(meta_i(f, "hparams.rope_dim"), 16);
    cr_assert_eq(meta_f(f, "hparams.rope_theta"), 10000.0);
    cr_assert_eq(meta_i(f, "hparams.vocab_size"), 6);
    cr_assert_eq(meta_b(f, "hparams.tie_embeddings"), 1); /* no output.weight */
    cr_assert_str_eq(meta_s(f, "name"), "crafted");
    llm_file_free(f);
    free(b);
}

Test(gguf, open_errors)
{
    struct llm_file *f = (struct llm_file *)1;
    cr_assert_eq(llm_gguf_open(&f, "/nonexistent/m.gguf", NULL), LLM_E_IO);
    cr_assert_null(f);
    cr_assert(strstr(llm_error_detail(LLM_E_IO), "/nonexistent/m.gguf"));
    TEST_DATA(txt, "llama2c/stories260K.expected_t0_n200.txt");
    cr_assert_eq(llm_gguf_open(&f, txt, NULL), LLM_E_FORMAT);
    cr_assert(!strncmp(llm_error_detail(LLM_E_FORMAT), txt, strlen(txt)));
}
