/* test_llmfile.c: the .llm container: round trips, compression, checksums,
 * truncation and corruption, atomic writes, the rule for the unknown. */
#include <dirent.h>
#include <string.h>
#include <sys/stat.h>
#include <xxhash.h>

#include "../../../lib/common/alloc.h"
#include "../../../lib/common/fp16.h"
#include "../../../lib/format/import.h"
#include "../helpers.h"

static float fdata[64 * 40];
static uint16_t hdata[32 * 8];

/* A small model: a few types, an aux array, metadata with an unknown key. */
static struct llm_file *make_model(void)
{
    struct llm_file *f;
    cr_assert_eq(llm_file_new(&f, "mem", "test"), LLM_OK);
    for (size_t i = 0; i < sizeof fdata / sizeof fdata[0]; i++)
        fdata[i] = (float)i * 0.25f - 7.0f;
    for (size_t i = 0; i < sizeof hdata / sizeof hdata[0]; i++)
        hdata[i] = (uint16_t)(0x3c00 + i);
    int64_t ne2[2] = { 64, 40 }, neh[2] = { 32, 8 }, ne1[1] = { 64 };
    cr_assert_eq(llm_file_add_tensor(f, "token_embd.weight", LLM_TYPE_F32, 2, ne2, fdata, NULL), LLM_OK);
    cr_assert_eq(llm_file_add_tensor(f, "blk.0.attn_q.weight", LLM_TYPE_F16, 2, neh, hdata, NULL), LLM_OK);
    cr_assert_eq(llm_file_add_tensor(f, "output_norm.weight", LLM_TYPE_F32, 1, ne1, fdata, NULL), LLM_OK);
    const char *toks[] = { "<unk>", "a", "\xe2\x96\x81" "b" };
    uint32_t lens[] = { 5, 1, 4 };
    float sc[] = { 0, -1, -2 };
    int32_t ty[] = { 2, 1, 1 };
    cr_assert_eq(llm_file_set_vocab(f, 3, toks, lens, sc, ty), LLM_OK);
    llm_meta_set_str(f->meta, "architecture", "llama");
    llm_meta_set_i64(f->meta, "hparams.block_count", 1);
    llm_meta_set_f32(f->meta, "hparams.rms_norm_eps", 1e-5f);
    llm_meta_set_str(f->meta, "future.unknown_key", "kept");
    llm_meta_set_str(f->meta, "chat_template", "{% for m in messages %}{{ m.content }}\n{% endfor %}");
    return f;
}

static const char *write_tmp(struct llm_file *f, int level, const char *name)
{
    static char path[4][512];
    static int k;
    char *p = path[k++ & 3];
    snprintf(p, sizeof path[0], "%s/%s", llm_test_tmpdir(), name);
    struct llm_write_opts o;
    llm_write_opts_default(&o);
    o.compress_level = level;
    llm_status s = llm_llm_write(f, p, &o);
    cr_assert_eq(s, LLM_OK, "write: %s", llm_error_detail(s));
    return p;
}

static void assert_same(struct llm_file *a, struct llm_file *b)
{
    cr_assert_eq(a->n_tensors, b->n_tensors);
    for (size_t i = 0; i < a->n_tensors; i++) {
        struct llm_tensor *x = &a->tensors[i], *y = &b->tensors[i];
        cr_assert_str_eq(x->name, y->name);
        cr_assert_eq(x->type, y->type);
        cr_assert_eq(x->n_dims, y->n_dims);
        cr_assert_eq(memcmp(x->ne, y->ne, sizeof x->ne), 0);
        cr_assert_eq(x->flags, y->flags, "%s flags", x->name);
        const void *p, *q;
        cr_assert_eq(llm_tensor_bytes(a, x, &p), LLM_OK);
        cr_assert_eq(llm_tensor_bytes(b, y, &q), LLM_OK, "%s", llm_error_detail(LLM_E_FORMAT));
        cr_assert_eq(memcmp(p, q, x->nbytes), 0, "tensor %s differs", x->name);
    }
}

Test(llmfile, round_trip_keeps_tensors_and_metadata)
{
    struct llm_file *f = make_model(), *g;
    const char *p = write_tmp(f, 0, "m.llm");
    cr_assert_eq(llm_llm_open(&g, p, NULL), LLM_OK);
    assert_same(f, g);
    const char *s;
    double eps;
    cr_assert_eq(llm_meta_get_str(g->meta, "future.unknown_key", &s), LLM_OK, "unknown keys are kept");
    cr_assert_str_eq(s, "kept");
    cr_assert_eq(llm_meta_get_f64(g->meta, "hparams.rms_norm_eps", &eps), LLM_OK);
    cr_assert_eq((float)eps, 1e-5f);
    struct llm_vocab_view v;
    cr_assert_eq(llm_file_vocab(g, &v), LLM_OK);
    cr_assert_eq(v.n_tokens, 3);
    cr_assert_eq(memcmp(v.bytes + v.offsets[2], "\xe2\x96\x81" "b", 4), 0);
    cr_assert_eq(v.scores[2], -2.0f);
    cr_assert_eq(v.types[0], 2);
    /* every uncompressed tensor is aligned to 64 bytes in the file */
    for (size_t i = 0; i < g->n_tensors; i++)
        cr_assert_eq(g->tensors[i].offset % 64, 0);
    size_t n;
    cr_assert_eq(llm_llm_verify(g, &n), LLM_OK);
    cr_assert_eq(n, g->n_tensors);
    llm_file_free(g);
    llm_file_free(f);
}

Test(llmfile, compressed_round_trip_and_verify)
{
    struct llm_file *f = make_model(), *g;
    const char *p = write_tmp(f, 19, "c.llm");
    cr_assert_eq(llm_llm_open(&g, p, NULL), LLM_OK);
    int compressed = 0;
    for (size_t i = 0; i < g->n_tensors; i++)
        compressed += g->tensors[i].compression == LLM_COMPRESS_ZSTD;
    cr_assert_gt(compressed, 0, "the regular f32 data must compress");
    assert_same(f, g);
    llm_file_free(g);
    llm_file_free(f);
}

Test(llmfile, writes_are_deterministic)
{
    struct llm_file *f = make_model();
    const char *a = write_tmp(f, 0, "a.llm"), *b = write_tmp(f, 0, "b.llm");
    char *x, *y;
    size_t nx, ny;
    cr_assert_eq(llm_read_file(a, 1 << 20, &x, &nx), LLM_OK);
    cr_assert_eq(llm_read_file(b, 1 << 20, &y, &ny), LLM_OK);
    cr_assert_eq(nx, ny);
    cr_assert_eq(memcmp(x, y, nx), 0);
    llm_free(x);
    llm_free(y);
    llm_file_free(f);
}

static char *slurp(const char *p, size_t *n)
{
    char *x;
    cr_assert_eq(llm_read_file(p, 1 << 24, &x, n), LLM_OK);
    return x;
}

Test(llmfile, every_truncation_is_refused)
{
    struct llm_file *f = make_model();
    size_t n;
    char *x = slurp(write_tmp(f, 3, "t.llm"), &n);
    for (size_t cut = 0; cut < n; cut++) {
        struct llm_file *g = NULL;
        llm_status s = llm_llm_parse(&g, (const uint8_t *)x, cut, "t.llm", NULL);
        cr_assert_neq(s, LLM_OK, "truncated at %zu of %zu accepted", cut, n);
        cr_assert(strncmp(llm_error_detail(s), "t.llm:", 6) == 0, "%s", llm_error_detail(s));
        cr_assert_null(g);
    }
    llm_free(x);
    llm_file_free(f);
}

Test(llmfile, flipped_bytes_are_detected)
{
    struct llm_file *f = make_model();
    size_t n;
    char *x = slurp(write_tmp(f, 0, "x.llm"), &n);
    char *y = llm_malloc(n);
    for (size_t i = 0; i < n; i++) {
        memcpy(y, x, n);
        y[i] ^= 0x10;
        struct llm_file *g = NULL;
        llm_status s = llm_llm_parse(&g, (const uint8_t *)y, n, "x.llm", NULL);
        if (s == LLM_OK) {
            /* only tensor data or padding can change without a structural
               error: then the checksum must catch a change in the data */
            llm_status v = llm_llm_verify(g, NULL);
            int in_data = 0;
            for (size_t k = 0; k < g->n_tensors; k++)
                if (i >= g->tensors[k].offset && i < g->tensors[k].offset + g->tensors[k].stored_size)
                    in_data = 1;
            if (in_data)
                cr_assert_eq(v, LLM_E_CHECKSUM, "flip at %zu in tensor data not detected", i);
            llm_file_free(g);
        }
    }
    llm_free(x);
    llm_free(y);
    llm_file_free(f);
}

Test(llmfile, corrupt_compressed_tensor_fails_on_load)
{
    struct llm_file *f = make_model(), *g;
    size_t n;
    char *x = slurp(write_tmp(f, 3, "z.llm"), &n);
    cr_assert_eq(llm_llm_parse(&g, (const uint8_t *)x, n, "z.llm", NULL), LLM_OK);
    struct llm_tensor *t = llm_file_find(g, "token_embd.weight");
    cr_assert_eq(t->compression, LLM_COMPRESS_ZSTD);
    size_t off = t->offset + t->stored_size / 2;
    llm_file_free(g);
    x[off] ^= 0x5a;
    cr_assert_eq(llm_llm_parse(&g, (const uint8_t *)x, n, "z.llm", NULL), LLM_OK);
    const void *b;
    llm_status s = llm_tensor_bytes(g, llm_file_find(g, "token_embd.weight"), &b);
    cr_assert(s == LLM_E_CHECKSUM || s == LLM_E_FORMAT, "corrupt compressed data loaded");
    cr_assert(strstr(llm_error_detail(s), "token_embd.weight"));
    llm_file_free(g);
    llm_free(x);
    llm_file_free(f);
}

static void rehash_header(char *x)
{
    uint64_t h = XXH3_64bits(x, 56);
    memcpy(x + 56, &h, 8);
}

Test(llmfile, unknown_version_and_features_are_refused)
{
    struct llm_file *f = make_model(), *g = NULL;
    size_t n;
    char *x = slurp(write_tmp(f, 0, "v.llm"), &n);
    uint32_t v = 2;
    memcpy(x + 8, &v, 4);
    rehash_header(x);
    llm_status s = llm_llm_parse(&g, (const uint8_t *)x, n, "v.llm", NULL);
    cr_assert_eq(s, LLM_E_UNSUPPORTED);
    cr_assert(strstr(llm_error_detail(s), "version 2"), "%s", llm_error_detail(s));
    v = 1;
    memcpy(x + 8, &v, 4);
    uint64_t feat = 1ull << 40;
    memcpy(x + 16, &feat, 8);
    rehash_header(x);
    s = llm_llm_parse(&g, (const uint8_t *)x, n, "v.llm", NULL);
    cr_assert_eq(s, LLM_E_UNSUPPORTED);
    cr_assert(strstr(llm_error_detail(s), "features"), "%s", llm_error_detail(s));
    llm_free(x);
    llm_file_free(f);
}

static llm_status failing_fill(const struct llm_tensor *t, void *dst, void *ctx)
{
    (void)t, (void)dst, (void)ctx;
    return llm_error_set(LLM_E_IO, "simulated failure");
}

Test(llmfile, failed_write_leaves_target_untouched)
{
    struct llm_file *f = make_model();
    const char *p = write_tmp(f, 0, "keep.llm");
    size_t n0;
    char *before = slurp(p, &n0);
    int64_t ne[2] = { 16, 16 };
    struct llm_tensor *t;
    cr_assert_eq(llm_file_add_tensor(f, "blk.0.ffn_up.weight", LLM_TYPE_F32, 2, ne, NULL, &t), LLM_OK);
    t->fill = failing_fill;
    cr_assert_eq(llm_llm_write(f, p, NULL), LLM_E_IO);
    size_t n1;
    char *after = slurp(p, &n1);
    cr_assert_eq(n0, n1);
    cr_assert_eq(memcmp(before, after, n0), 0, "target changed by a failed write");
    /* and no temporary file is left behind */
    char dir[512];
    snprintf(dir, sizeof dir, "%s", p);
    *strrchr(dir, '/') = 0;
    DIR *d = opendir(dir);
    struct dirent *e;
    int files = 0;
    while ((e = readdir(d)))
        files += e->d_name[0] != '.' || strstr(e->d_name, ".tmp-") != NULL;
    closedir(d);
    cr_assert_eq(files, 1, "a temporary file was left behind");
    llm_free(before);
    llm_free(after);
    llm_file_free(f);
}

Test(llmfile, convert_changes_weight_matrices_only)
{
    struct llm_file *f = make_model(), *g;
    cr_assert_eq(llm_file_convert(f, LLM_TYPE_F16), LLM_OK);
    cr_assert_eq(llm_file_find(f, "token_embd.weight")->type, LLM_TYPE_F16);
    cr_assert_eq(llm_file_find(f, "output_norm.weight")->type, LLM_TYPE_F32);
    cr_assert_eq(llm_file_find(f, "tokenizer.scores")->type, LLM_TYPE_F32);
    const char *p = write_tmp(f, 0, "h.llm");
    cr_assert_eq(llm_llm_open(&g, p, NULL), LLM_OK);
    const uint16_t *h;
    cr_assert_eq(llm_tensor_bytes(g, llm_file_find(g, "token_embd.weight"), (const void **)&h), LLM_OK);
    for (int i = 0; i < 64 * 40; i++)
        cr_assert_eq(h[i], llm_fp32_to_fp16(fdata[i]), "element %d", i);
    llm_file_free(g);
    llm_file_free(f);
}

/* Each field of the header has its own message: a bad metadata offset was
 * reported as "bad header size". */
Test(llmfile, header_fields_named_in_messages)
{
    struct llm_file *f = make_model(), *g = NULL;
    size_t n;
    char *x = slurp(write_tmp(f, 0, "h.llm"), &n);
    uint64_t off = 128;
    memcpy(x + 24, &off, 8);
    rehash_header(x);
    llm_status s = llm_llm_parse(&g, (const uint8_t *)x, n, "h.llm", NULL);
    cr_assert_eq(s, LLM_E_FORMAT);
    cr_assert(strstr(llm_error_detail(s), "h.llm: bad metadata offset 128 (expected 64)"), "%s",
              llm_error_detail(s));
    off = 64;
    memcpy(x + 24, &off, 8);
    uint32_t hs = 65;
    memcpy(x + 12, &hs, 4);
    rehash_header(x);
    s = llm_llm_parse(&g, (const uint8_t *)x, n, "h.llm", NULL);
    cr_assert_eq(s, LLM_E_FORMAT);
    cr_assert(strstr(llm_error_detail(s), "h.llm: bad header size 65 (expected 64)"), "%s",
              llm_error_detail(s));
    llm_free(x);
    llm_file_free(f);
}
