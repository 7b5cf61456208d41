/* test_llama2c.c: llama2.c checkpoints and tokenizer.bin against the real
 * stories260K files, and against the GGUF conversion of the same model read
 * by a small independent GGUF walker below (not lib/format's reader). */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "../../../lib/common/alloc.h"
#include "../../../lib/common/io.h"
#include "../../../lib/format/file.h"
#include "../../../lib/format/import.h"
#include "../../../lib/format/meta.h"
#include "../helpers.h"

/* ---- a minimal GGUF v3 walker (reference for the comparisons) ------------ */

struct ref_tensor {
    char name[64];
    uint32_t n_dims, type;
    uint64_t ne[4], offset;
};

struct ref_gguf {
    struct llm_map map;
    const uint8_t *tok_arr;  /* first string of tokenizer.ggml.tokens */
    uint64_t n_tok;
    const uint8_t *scores;   /* (n_tok) f32 */
    const uint8_t *types;    /* (n_tok) i32 */
    struct ref_tensor t[64];
    uint64_t n_tensors;
    const uint8_t *data;     /* start of tensor data */
};

static uint64_t rd64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

static uint32_t rd32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

static size_t scalar_size(uint32_t t)
{
    static const size_t sz[] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    cr_assert(t < 13 && t != 8 && t != 9, "gguf value type %u", t);
    return sz[t];
}

/* Skips one value of type t at p; returns the position after it. */
static const uint8_t *skip_value(const uint8_t *p, uint32_t t)
{
    if (t == 8)
        return p + 8 + rd64(p);
    if (t == 9) {
        uint32_t at = rd32(p);
        uint64_t n = rd64(p + 4);
        p += 12;
        for (uint64_t i = 0; i < n; i++)
            p = skip_value(p, at);
        return p;
    }
    return p + scalar_size(t);
}

static void ref_gguf_open(struct ref_gguf *g, const char *path)
{
    memset(g, 0, sizeof *g);
    cr_assert_eq(llm_map_open(&g->map, path), LLM_OK);
    const uint8_t *p = g->map.data;
    cr_assert_eq(rd32(p), 0x46554747u); /* "GGUF" */
    cr_assert_eq(rd32(p + 4), 3u);
    g->n_tensors = rd64(p + 8);
    uint64_t n_kv = rd64(p + 16);
    cr_assert_leq(g->n_tensors, 64u);
    p += 24;
    for (uint64_t i = 0; i < n_kv; i++) {
        uint64_t klen = rd64(p);
        const char *key = (const char *)p + 8;
        uint32_t t;
        p += 8 + klen;
        t = rd32(p);
        p += 4;
        if (t == 9 && klen == 21 && !memcmp(key, "tokenizer.ggml.tokens", 21)) {
            g->n_tok = rd64(p + 4);
            g->tok_arr = p + 12;
        } else if (t == 9 && klen == 21 && !memcmp(key, "tokenizer.ggml.scores", 21)) {
            g->scores = p + 12;
        } else if (t == 9 && klen == 25 && !memcmp(key, "tokenizer.ggml.token_type", 25)) {
            g->types = p + 12;
        }
        p = skip_value(p, t);
    }
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        struct ref_tensor *t = &g->t[i];
        uint64_t nlen = rd64(p);
        cr_assert_lt(nlen, sizeof t->name);
        memcpy(t->name, p + 8, nlen);
        p += 8 + nlen;
        t->n_dims = rd32(p);
        p += 4;
        for (uint32_t d = 0; d < 4; d++)
            t->ne[d] = 1;
        for (uint32_t d = 0; d < t->n_dims; d++, p += 8)
            t->ne[d] = rd64(p);
        t->type = rd32(p);
        t->offset = rd64(p + 4);
        p += 12;
    }
    /* default general.alignment (the file sets none) */
    size_t off = (size_t)(p - g->map.data);
    g->data = g->map.data + (off + 31) / 32 * 32;
}

static const struct ref_tensor *ref_find(const struct ref_gguf *g, const char *name)
{
    for (uint64_t i = 0; i < g->n_tensors; i++)
        if (!strcmp(g->t[i].name, name))
            return &g->t[i];
    return NULL;
}

/* ---- helpers ---------------------------------------------------------------- */

static int64_t meta_i(struct llm_file *f, const char *path)
{
    int64_t v = -1;
    cr_assert_eq(llm_meta_get_i64(f->meta, path, &v), LLM_OK, "meta %s", path);
    return v;
}

static double meta_f(struct llm_file *f, const char *path)
{
    double v = -1;
    cr_assert_eq(llm_meta_get_f64(f->meta, path, &v), LLM_OK, "meta %s", path);
    return v;
}

static const char *meta_s(struct llm_file *f, const char *path)
{
    const char *v = NULL;
    cr_assert_eq(llm_meta_get_str(f->meta, path, &v), LLM_OK, "meta %s", path);
    return v;
}

static int meta_b(struct llm_file *f, const char *path)
{
    int v = -1;
    cr_assert_eq(llm_meta_get_bool(f->meta, path, &v), LLM_OK, "meta %s", path);
    return v;
}

/* Reads a whole file into an owned buffer with `extra` spare bytes. */
static uint8_t *slurp(const char *path, size_t *size, size_t extra)
{
    struct llm_map m;
    cr_assert_eq(llm_map_open(&m, path), LLM_OK);
    uint8_t *b = malloc(m.size + extra + 1);
    cr_assert(b);
    memcpy(b, m.data, m.size);
    *size = m.size;
    llm_map_close(&m);
    return b;
}

/* A parse that must fail with LLM_E_FORMAT and a detail naming the file. */
static void expect_format_error(const uint8_t *data, size_t size, const char *what)
{
    struct llm_file *f = (struct llm_file *)1;
    llm_error_clear();
    llm_status s = llm_llama2c_parse(&f, data, size, "bad.bin", NULL);
    cr_assert_eq(s, LLM_E_FORMAT, "%s (size %zu): status %d: %s", what, size, s,
                 llm_error_detail(s));
    cr_assert_null(f, "%s: *out not cleared", what);
    cr_assert(!strncmp(llm_error_detail(s), "bad.bin: ", 9), "%s: detail '%s'", what,
              llm_error_detail(s));
}


/* ---- checkpoints ----------------------------------------------------------------- */

Test(llama2c, legacy_header_and_shapes)
{
    TEST_DATA(path, "llama2c/stories260K.bin");
    struct llm_file *f;
    cr_assert_eq(llm_llama2c_open(&f, path, NULL), LLM_OK, "%s", llm_error_detail(-1));

    cr_assert_str_eq(f->format, "llama2c");
    cr_assert_str_eq(meta_s(f, "architecture"), "llama");
    cr_assert_str_eq(meta_s(f, "name"), "stories260K");
    cr_assert_eq(meta_i(f, "hparams.embedding_length"), 64);
    cr_assert_eq(meta_i(f, "hparams.feed_forward_length"), 172);
    cr_assert_eq(meta_i(f, "hparams.block_count"), 5);
    cr_assert_eq(meta_i(f, "hparams.head_count"), 8);
    cr_assert_eq(meta_i(f, "hparams.head_count_kv"), 4);
    cr_assert_eq(meta_i(f, "hparams.vocab_size"), 512);
    cr_assert_eq(meta_i(f, "hparams.context_length"), 512);
    cr_assert_eq(meta_i(f, "hparams.head_dim"), 8);
    cr_assert_eq(meta_i(f, "hparams.rope_dim"), 8);
    cr_assert_float_eq(meta_f(f, "hparams.rope_theta"), 10000.0, 1e-9);
    cr_assert_float_eq(meta_f(f, "hparams.rms_norm_eps"), 1e-5, 1e-12);
    cr_assert_str_eq(meta_s(f, "hparams.rope_type"), "norm");
    cr_assert_eq(meta_b(f, "hparams.tie_embeddings"), 1);
    cr_assert_str_eq(meta_s(f, "source.format"), "llama2c");
    cr_assert_eq(meta_i(f, "source.version"), 0);

    /* shared classifier: no output.weight */
    cr_assert_eq(f->n_tensors, 1 + 5 * 9 + 1);
    cr_assert_null(llm_file_find(f, "output.weight"));
    struct llm_tensor *t = llm_file_find(f, "token_embd.weight");
    cr_assert(t);
    cr_assert_eq(t->n_dims, 2);
    cr_assert_eq(t->ne[0], 64);
    cr_assert_eq(t->ne[1], 512);
    cr_assert_eq(t->type, LLM_TYPE_F32);
    /* zero copy: the first weight sits right after the 28-byte header */
    cr_assert_eq((const uint8_t *)t->data, f->maps[0].data + 28);
    struct {
        const char *name;
        int64_t ne0, ne1;
    } want[] = {{"blk.4.attn_q.weight", 64, 64},   {"blk.4.attn_k.weight", 64, 32},
                {"blk.4.attn_v.weight", 64, 32},   {"blk.4.attn_output.weight", 64, 64},
                {"blk.4.ffn_gate.weight", 64, 172}, {"blk.4.ffn_down.weight", 172, 64},
                {"blk.4.ffn_up.weight", 64, 172},  {"blk.0.attn_norm.weight", 64, 1},
                {"blk.0.ffn_norm.weight", 64, 1},  {"output_norm.weight", 64, 1}};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        t = llm_file_find(f, want[i].name);
        cr_assert(t, "%s missing", want[i].name);
        cr_assert_eq(t->ne[0], want[i].ne0, "%s", want[i].name);
        cr_assert_eq(t->ne[1], want[i].ne1, "%s", want[i].name);
        cr_assert_eq(t->n_dims, want[i].ne1 == 1 ? 1u : 2u, "%s", want[i].name);
    }
    uint64_t params, bytes;
    llm_file_totals(f, &params, &bytes);
    cr_assert_eq(params, 260032); /* the data README's count */
    cr_assert_eq(bytes, 260032 * 4);
    llm_file_free(f);
}

Test(llama2c, v1_equals_legacy_bit_for_bit)
{
    TEST_DATA(p0, "llama2c/stories260K.bin");
    TEST_DATA(p1, "llama2c/stories260K.v1.bin");
    struct llm_file *a, *b;
    cr_assert_eq(llm_llama2c_open(&a, p0, NULL), LLM_OK, "%s", llm_error_detail(-1));
    cr_assert_eq(llm_llama2c_open(&b, p1, NULL), LLM_OK, "%s", llm_error_detail(-1));
    cr_assert_eq(meta_i(b, "source.version"), 1);
    cr_assert_eq(meta_b(b, "hparams.tie_embeddings"), 1);
    cr_assert_str_eq(meta_s(b, "name"), "stories260K.v1");
    cr_assert_eq(a->n_tensors, b->n_tensors);
    for (size_t i = 0; i < a->n_tensors; i++) {
        struct llm_tensor *x = &a->tensors[i], *y = &b->tensors[i];
        cr_assert_str_eq(x->name, y->name);
        cr_assert_eq(x->n_dims, y->n_dims);
        cr_assert_eq(memcmp(x->ne, y->ne, sizeof x->ne), 0, "%s", x->name);
        cr_assert_eq(x->nbytes, y->nbytes);
        cr_assert_eq(memcmp(x->data, y->data, x->nbytes), 0, "%s differs", x->name);
        /* version 1 data starts at 256 and is in the mapping, not copied */
        cr_assert((const uint8_t *)y->data >= b->maps[0].data + 256 &&
                  (const uint8_t *)y->data + y->nbytes <= b->maps[0].data + b->maps[0].size);
    }
    /* the two files lay weights out differently: a mix-up would not be equal */
    cr_assert_neq(memcmp(llm_file_find(a, "blk.0.attn_q.weight")->data,
                         llm_file_find(a, "blk.1.attn_q.weight")->data, 64 * 64 * 4),
                  0);
    llm_file_free(a);
    llm_file_free(b);
}

Test(llama2c, tensors_equal_gguf)
{
    TEST_DATA(p0, "llama2c/stories260K.bin");
    TEST_DATA(pg, "gguf/stories260K.gguf");
    struct llm_file *f;
    struct ref_gguf g;
    cr_assert_eq(llm_llama2c_open(&f, p0, NULL), LLM_OK, "%s", llm_error_detail(-1));
    ref_gguf_open(&g, pg);
    cr_assert_eq(g.n_tensors, 48);
    for (size_t i = 0; i < f->n_tensors; i++) {
        struct llm_tensor *t = &f->tensors[i];
        const struct ref_tensor *r = ref_find(&g, t->name);
        cr_assert(r, "%s not in the GGUF file", t->name);
        cr_assert_eq(r->type, 0u, "%s", t->name);
        cr_assert_eq(r->n_dims, t->n_dims, "%s", t->name);
        for (int d = 0; d < 4; d++)
            cr_assert_eq((int64_t)r->ne[d], t->ne[d], "%s ne[%d]", t->name, d);
        cr_assert_eq(memcmp(g.data + r->offset, t->data, t->nbytes), 0, "%s differs", t->name);
    }
    /* the GGUF file stores the shared classifier separately */
    const struct ref_tensor *out = ref_find(&g, "output.weight");
    cr_assert(out);
    cr_assert_eq(memcmp(g.data + out->offset, llm_file_find(f, "token_embd.weight")->data,
                        64 * 512 * 4),
                 0);
    llm_map_close(&g.map);
    llm_file_free(f);
}

Test(llama2c, tokenizer_equals_gguf_vocab)
{
    TEST_DATA(p0, "llama2c/stories260K.v1.bin");
    TEST_DATA(pt, "llama2c/tok512.bin");
    TEST_DATA(pg, "gguf/stories260K.gguf");
    struct llm_import_opts o;
    struct llm_file *f;
    struct llm_vocab_view v;
    struct ref_gguf g;

    llm_import_opts_default(&o);
    o.tokenizer_path = pt;
    cr_assert_eq(llm_llama2c_open(&f, p0, &o), LLM_OK, "%s", llm_error_detail(-1));
    cr_assert_eq(llm_file_vocab(f, &v), LLM_OK);
    ref_gguf_open(&g, pg);
    cr_assert_eq(v.n_tokens, 512);
    cr_assert_eq(g.n_tok, 512);
    cr_assert(v.scores && v.types);
    const uint8_t *p = g.tok_arr;
    int n_space = 0;
    for (uint32_t i = 0; i < 512; i++) {
        uint64_t len = rd64(p);
        uint32_t ours = v.offsets[i + 1] - v.offsets[i];
        cr_assert_eq(ours, len, "token %u length", i);
        cr_assert_eq(memcmp(v.bytes + v.offsets[i], p + 8, len), 0, "token %u text", i);
        n_space += len >= 3 && !memcmp(p + 8, "\xe2\x96\x81", 3);
        p += 8 + len;
        cr_assert_eq(memcmp(&v.scores[i], g.scores + 4 * i, 4), 0, "token %u score", i);
        cr_assert_eq((uint32_t)v.types[i], rd32(g.types + 4 * i), "token %u type", i);
    }
    cr_assert_eq(n_space, 91); /* tok512.bin has 91 tokens starting with a space */
    cr_assert_eq(v.types[0], 2);
    cr_assert_eq(v.types[1], 3);
    cr_assert_eq(v.types[3], 6);
    cr_assert_eq(v.offsets[2] - v.offsets[1], 3); /* "<s>" */
    cr_assert_str_eq(meta_s(f, "tokenizer.model"), "llama");
    cr_assert_eq(meta_i(f, "tokenizer.n_tokens"), 512);
    cr_assert_eq(meta_i(f, "tokenizer.bos_id"), 1);
    cr_assert_eq(meta_i(f, "tokenizer.eos_id"), 2);
    cr_assert_eq(meta_i(f, "tokenizer.unk_id"), 0);
    cr_assert_eq(meta_b(f, "tokenizer.add_bos"), 1);
    cr_assert_eq(meta_b(f, "tokenizer.add_space_prefix"), 1);
    llm_map_close(&g.map);
    llm_file_free(f);
}

Test(llama2c, truncation_at_every_boundary)
{
    TEST_DATA(p0, "llama2c/stories260K.bin");
    TEST_DATA(p1, "llama2c/stories260K.v1.bin");
    const char *paths[2] = {p0, p1};
    for (int k = 0; k < 2; k++) {
        struct llm_file *f;
        size_t size;
        uint8_t *buf = slurp(paths[k], &size, 8);
        cr_assert_eq(llm_llama2c_parse(&f, buf, size, "x.bin", NULL), LLM_OK);
        /* every tensor's first and last byte, and one past */
        for (size_t i = 0; i < f->n_tensors; i++) {
            size_t off = (size_t)((const uint8_t *)f->tensors[i].data - buf);
            size_t end = off + f->tensors[i].nbytes;
            size_t cuts[] = {off - 1, off, off + 1, end - 1};
            for (size_t c = 0; c < 4; c++)
                expect_format_error(buf, cuts[c], f->tensors[i].name);
        }
        llm_file_free(f);
        /* every length inside the header and around it */
        for (size_t n = 0; n < 300; n++)
            expect_format_error(buf, n, "header");
        for (size_t n = size - 300; n < size; n++)
            expect_format_error(buf, n, "tail");
        /* trailing bytes are as wrong as missing ones */
        memset(buf + size, 0, 8);
        for (size_t n = size + 1; n <= size + 8; n++)
            expect_format_error(buf, n, "trailing");
        free(buf);
    }
}

Test(llama2c, bad_headers)
{
    TEST_DATA(p0, "llama2c/stories260K.bin");
    TEST_DATA(p1, "llama2c/stories260K.v1.bin");
    size_t s0, s1;
    uint8_t *b0 = slurp(p0, &s0, 0), *b1 = slurp(p1, &s1, 0);
    int32_t v;
    /* legacy: field index, bad value */
    struct {
        int field;
        int32_t value;
    } bad[] = {{0, -64}, {0, 0}, {0, 65}, {1, 0},   {2, -5},  {3, 0},
               {3, 7},   {4, 0}, {4, 3}, {4, 16},  {5, 0},   {6, 0}, {6, -512}, {0, 128},
               {2, 6},   {5, 513}, {0, 0x7fffffff}, {1, 0x7fffffff}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        for (int k = 0; k < 2; k++) {
            uint8_t *b = k ? b1 : b0;
            size_t at = (size_t)(k ? 8 : 0) + 4 * (size_t)bad[i].field;
            memcpy(&v, b + at, 4);
            memcpy(b + at, &bad[i].value, 4);
            expect_format_error(b, k ? s1 : s0, "field");
            memcpy(b + at, &v, 4);
        }
    }
    /* v1: a shared_classifier byte that is neither 0 nor 1 */
    b1[36] = 2;
    expect_format_error(b1, s1, "shared byte");
    /* v1 with shared_classifier 0 needs an output matrix the file lacks */
    b1[36] = 0;
    expect_format_error(b1, s1, "unshared v1");
    b1[36] = 1;
    /* an unknown version is refused as unsupported, naming the file */
    struct llm_file *f;
    b1[4] = 3;
    cr_assert_eq(llm_llama2c_parse(&f, b1, s1, "v3.bin", NULL), LLM_E_UNSUPPORTED);
    cr_assert(strstr(llm_error_detail(LLM_E_UNSUPPORTED), "v3.bin: "));
    b1[4] = 1;
    /* a legacy file with a negative vocab needs the classifier */
    memcpy(&v, b0 + 20, 4);
    v = -v;
    memcpy(b0 + 20, &v, 4);
    expect_format_error(b0, s0, "negative vocab");
    /* the originals still parse */
    v = -v;
    memcpy(b0 + 20, &v, 4);
    cr_assert_eq(llm_llama2c_parse(&f, b0, s0, "a", NULL), LLM_OK);
    llm_file_free(f);
    cr_assert_eq(llm_llama2c_parse(&f, b1, s1, "b", NULL), LLM_OK);
    llm_file_free(f);
    free(b0);
    free(b1);
}

static uint64_t xorshift(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

Test(llama2c, random_bytes_refused)
{
    uint64_t st = 0x1234567u;
    size_t sizes[] = {28, 256, 1000, 4096, 1056540, 1040384};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        for (int rep = 0; rep < 20; rep++) {
            uint8_t *b = malloc(sizes[k]);
            for (size_t i = 0; i < sizes[k]; i++)
                b[i] = (uint8_t)xorshift(&st);
            if (rep & 1) { /* with the version 1 magic in front */
                uint32_t m = 0x616b3432u, one = 1;
                memcpy(b, &m, 4);
                memcpy(b + 4, &one, 4);
            }
            expect_format_error(b, sizes[k], "random");
            free(b);
        }
    }
}

/* A legacy file rebuilt by hand from the v1 tensors, in legacy order, with or
 * without freq_cis and with a separate classifier. */
static uint8_t *make_legacy(struct llm_file *v1, int with_freq, const float *cls, size_t *size)
{
    static const char *const order[] = {"attn_norm", "attn_q", "attn_k", "attn_v", "attn_output",
                                        "ffn_norm", "ffn_gate", "ffn_down", "ffn_up"};
    size_t cap = 28 + 4 * (260032 + 4096 + 32768);
    uint8_t *b = malloc(cap), *p = b;
    int32_t hdr[7] = {64, 172, 5, 8, 4, cls ? -512 : 512, 512};
    memcpy(p, hdr, 28);
    p += 28;
    struct llm_tensor *t = llm_file_find(v1, "token_embd.weight");
    memcpy(p, t->data, t->nbytes);
    p += t->nbytes;
    for (int k = 0; k < 9; k++)
        for (int l = 0; l < 5; l++) {
            char name[64];
            snprintf(name, sizeof name, "blk.%d.%s.weight", l, order[k]);
            t = llm_file_find(v1, name);
            memcpy(p, t->data, t->nbytes);
            p += t->nbytes;
        }
    t = llm_file_find(v1, "output_norm.weight");
    memcpy(p, t->data, t->nbytes);
    p += t->nbytes;
    if (with_freq) {
        for (int i = 0; i < 4096; i++, p += 4) {
            float x = (float)i * 0.5f;
            memcpy(p, &x, 4);
        }
    }
    if (cls) {
        memcpy(p, cls, 32768 * 4);
        p += 32768 * 4;
    }
    *size = (size_t)(p - b);
    return b;
}

Test(llama2c, legacy_variants)
{
    TEST_DATA(p0, "llama2c/stories260K.bin");
    TEST_DATA(p1, "llama2c/stories260K.v1.bin");
    struct llm_file *v1, *orig, *f;
    size_t size;
    cr_assert_eq(llm_llama2c_open(&v1, p1, NULL), LLM_OK);
    cr_assert_eq(llm_llama2c_open(&orig, p0, NULL), LLM_OK);

    /* with freq_cis the rebuilt file is the original, byte for byte (except freq) */
    uint8_t *b = make_legacy(v1, 1, NULL, &size);
    cr_assert_eq(size, 1056540);
    cr_assert_eq(memcmp(b, orig->maps[0].data, 28 + 260032 * 4), 0);
    free(b);

    /* without freq_cis */
    b = make_legacy(v1, 0, NULL, &size);
    cr_assert_eq(size, 28 + 260032 * 4);
    cr_assert_eq(llm_llama2c_parse(&f, b, size, "nofreq.bin", NULL), LLM_OK,
                 "%s", llm_error_detail(-1));
    cr_assert_eq(f->n_tensors, orig->n_tensors);
    for (size_t i = 0; i < f->n_tensors; i++)
        cr_assert_eq(memcmp(f->tensors[i].data, orig->tensors[i].data, f->tensors[i].nbytes), 0);
    llm_file_free(f);
    free(b);

    /* a separate classifier (negative vocab), after freq_cis */
    float *cls = malloc(32768 * 4);
    for (int i = 0; i < 32768; i++)
        cls[i] = (float)(i % 97) - 48.0f;
    for (int freq = 0; freq < 2; freq++) {
        b = make_legacy(v1, freq, cls, &size);
        cr_assert_eq(llm_llama2c_parse(&f, b, size, "cls.bin", NULL), LLM_OK,
                     "%s", llm_error_detail(-1));
        cr_assert_eq(meta_b(f, "hparams.tie_embeddings"), 0);
        cr_assert_eq(meta_i(f, "hparams.vocab_size"), 512);
        struct llm_tensor *t = llm_file_find(f, "output.weight");
        cr_assert(t);
        cr_assert_eq(t->ne[0], 64);
        cr_assert_eq(t->ne[1], 512);
        cr_assert_eq(memcmp(t->data, cls, 32768 * 4), 0);
        cr_assert_eq(memcmp(llm_file_find(f, "output_norm.weight")->data,
                            llm_file_find(orig, "output_norm.weight")->data, 256),
                     0);
        llm_file_free(f);
        /* a classifier cut short */
        expect_format_error(b, size - 4, "short classifier");
        free(b);
    }
    free(cls);

    /* a buffer that is not 4-aligned is copied, not read unaligned */
    b = make_legacy(v1, 1, NULL, &size);
    uint8_t *odd = malloc(size + 1);
    memcpy(odd + 1, b, size);
    cr_assert_eq(llm_llama2c_parse(&f, odd + 1, size, "odd.bin", NULL), LLM_OK);
    for (size_t i = 0; i < f->n_tensors; i++) {
        cr_assert_eq((uintptr_t)f->tensors[i].data % 4, 0);
        cr_assert_eq(memcmp(f->tensors[i].data, orig->tensors[i].data, f->tensors[i].nbytes), 0);
    }
    llm_file_free(f);
    free(odd);
    free(b);
    llm_file_free(v1);
    llm_file_free(orig);
}

/* llama2.c export.py quantize_q80 on a flattened tensor, appended to buf */
static uint8_t *put_q80(uint8_t *p, const float *w, size_t n, size_t gs)
{
    int8_t *q = (int8_t *)p;
    uint8_t *s = p + n;
    for (size_t g = 0; g < n / gs; g++) {
        float amax = 0;
        for (size_t j = 0; j < gs; j++)
            amax = fmaxf(amax, fabsf(w[g * gs + j]));
        float d = amax / 127.0f;
        for (size_t j = 0; j < gs; j++)
            q[g * gs + j] = (int8_t)nearbyintf(d > 0 ? w[g * gs + j] / d : 0);
        memcpy(s + 4 * g, &d, 4);
    }
    return p + n + 4 * (n / gs);
}

Test(llama2c, version2_dequantized)
{
    TEST_DATA(p1, "llama2c/stories260K.v1.bin");
    static const char *const qorder[] = {"attn_q", "attn_k", "attn_v", "attn_output",
                                         "ffn_gate", "ffn_down", "ffn_up"};
    struct llm_file *v1, *f;
    const size_t gs = 64;
    cr_assert_eq(llm_llama2c_open(&v1, p1, NULL), LLM_OK);
    uint8_t *b = calloc(1, 256 + 260032 * 5 + 4096), *p = b;
    const uint8_t *src = v1->maps[0].data;
    memcpy(p, src, 256);
    p[4] = 2;
    memcpy(p + 37, &(int32_t){(int32_t)gs}, 4);
    p += 256;
    /* norms stay fp32, in v1 order */
    memcpy(p, src + 256, (2 * 5 + 1) * 64 * 4);
    p += (2 * 5 + 1) * 64 * 4;
    struct llm_tensor *t = llm_file_find(v1, "token_embd.weight");
    p = put_q80(p, t->data, 32768, gs);
    for (int k = 0; k < 7; k++)
        for (int l = 0; l < 5; l++) {
            char name[64];
            snprintf(name, sizeof name, "blk.%d.%s.weight", l, qorder[k]);
            t = llm_file_find(v1, name);
            p = put_q80(p, t->data, t->nbytes / 4, gs);
        }
    size_t size = (size_t)(p - b);

    cr_assert_eq(llm_llama2c_parse(&f, b, size, "q.bin", NULL), LLM_OK, "%s",
                 llm_error_detail(-1));
    cr_assert_eq(meta_i(f, "source.version"), 2);
    cr_assert_eq(f->n_tensors, v1->n_tensors);
    size_t n_checked = 0;
    for (size_t i = 0; i < f->n_tensors; i++) {
        struct llm_tensor *x = &f->tensors[i], *y = llm_file_find(v1, x->name);
        cr_assert(y);
        cr_assert_eq(x->type, LLM_TYPE_F32);
        cr_assert_eq(memcmp(x->ne, y->ne, sizeof x->ne), 0);
        float *got = malloc(x->nbytes);
        cr_assert_eq(llm_tensor_read(f, x, got), LLM_OK);
        const float *ref = y->data;
        size_t n = x->nbytes / 4;
        if (x->n_dims == 1) { /* norms exact */
            cr_assert_eq(memcmp(got, ref, x->nbytes), 0);
        } else {
            for (size_t g = 0; g < n / gs; g++) {
                float amax = 0;
                for (size_t j = 0; j < gs; j++)
                    amax = fmaxf(amax, fabsf(ref[g * gs + j]));
                float d = amax / 127.0f;
                for (size_t j = 0; j < gs; j++) {
                    float want = nearbyintf(ref[g * gs + j] / d) * d;
                    cr_assert_eq(got[g * gs + j], want, "%s[%zu]", x->name, g * gs + j);
                    cr_assert_leq(fabsf(got[g * gs + j] - ref[g * gs + j]), d * 0.5f + 1e-7f);
                    n_checked++;
                }
            }
        }
        free(got);
    }
    cr_assert_eq(n_checked, 260032 - 11 * 64);
    llm_file_free(f);

    /* truncations and a group size that does not divide the tensors */
    expect_format_error(b, size - 1, "v2 short");
    expect_format_error(b, 256 + 100, "v2 short");
    memcpy(b + 37, &(int32_t){0}, 4);
    expect_format_error(b, size, "group 0");
    memcpy(b + 37, &(int32_t){48}, 4);
    expect_format_error(b, size, "group 48");
    free(b);
    llm_file_free(v1);
}

/* ---- tokenizer ---------------------------------------------------------------- */

static void expect_tok_error(const uint8_t *data, size_t size, uint32_t n, const char *what)
{
    struct llm_file *f;
    cr_assert_eq(llm_file_new(&f, "m", "llama2c"), LLM_OK);
    llm_error_clear();
    llm_status s = llm_llama2c_tokenizer_parse(f, data, size, "tok.bin", n);
    cr_assert_eq(s, LLM_E_FORMAT, "%s: %d %s", what, s, llm_error_detail(s));
    cr_assert(!strncmp(llm_error_detail(s), "tok.bin: ", 9), "%s: %s", what,
              llm_error_detail(s));
    cr_assert_null(llm_file_find(f, "tokenizer.tokens"));
    llm_file_free(f);
}

Test(llama2c, tokenizer_errors)
{
    TEST_DATA(pt, "llama2c/tok512.bin");
    size_t size;
    uint8_t *b = slurp(pt, &size, 16);
    struct llm_file *f;

    /* the model's vocab size decides the count: more or fewer tokens are errors */
    expect_tok_error(b, size, 511, "fewer");
    expect_tok_error(b, size, 513, "more");
    expect_tok_error(b, size, 0xffffffffu, "huge");
    for (size_t n = 0; n < size; n += (n < 64 ? 1 : 97))
        expect_tok_error(b, n, 512, "truncated");
    expect_tok_error(b, size - 1, 512, "truncated");
    /* max_token_length 0, then too small for the longest token */
    uint32_t m = 0;
    memcpy(b, &m, 4);
    expect_tok_error(b, size, 512, "max 0");
    m = 6;
    memcpy(b, &m, 4);
    expect_tok_error(b, size, 512, "max 6");
    m = 7;
    memcpy(b, &m, 4);
    /* a token length running past the end */
    uint32_t len;
    memcpy(&len, b + 8, 4);
    cr_assert_eq(len, 5); /* "<unk>" */
    memcpy(b + 8, &(uint32_t){0x7fffffffu}, 4);
    expect_tok_error(b, size, 512, "long token");
    memcpy(b + 8, &len, 4);

    cr_assert_eq(llm_file_new(&f, "m", "llama2c"), LLM_OK);
    cr_assert_eq(llm_llama2c_tokenizer_parse(f, b, size, "tok.bin", 512), LLM_OK);
    llm_file_free(f);
    free(b);
}

Test(llama2c, open_errors)
{
    TEST_DATA(p0, "llama2c/stories260K.bin");
    struct llm_import_opts o;
    struct llm_file *f = (struct llm_file *)1;
    llm_import_opts_default(&o);
    o.tokenizer_path = "/nonexistent/tok.bin";
    cr_assert_eq(llm_llama2c_open(&f, p0, &o), LLM_E_IO);
    cr_assert_null(f);
    cr_assert(strstr(llm_error_detail(LLM_E_IO), "/nonexistent/tok.bin"));
    /* a model file given as the tokenizer */
    o.tokenizer_path = p0;
    cr_assert_eq(llm_llama2c_open(&f, p0, &o), LLM_E_FORMAT);
    cr_assert_eq(llm_llama2c_open(&f, "/nonexistent/m.bin", NULL), LLM_E_IO);
}

/* The same model through lib/format's GGUF reader: tensors and vocabulary
 * agree with the llama2.c import (cross-checks both importers). */
Test(llama2c, equals_gguf_reader)
{
    TEST_DATA(p0, "llama2c/stories260K.bin");
    TEST_DATA(pt, "llama2c/tok512.bin");
    TEST_DATA(pg, "gguf/stories260K.gguf");
    struct llm_import_opts o;
    struct llm_file *a, *g;
    struct llm_vocab_view va, vg;

    llm_import_opts_default(&o);
    o.tokenizer_path = pt;
    cr_assert_eq(llm_llama2c_open(&a, p0, &o), LLM_OK, "%s", llm_error_detail(-1));
    cr_assert_eq(llm_gguf_open(&g, pg, NULL), LLM_OK, "%s", llm_error_detail(-1));
    size_t n_weights = 0;
    for (size_t i = 0; i < a->n_tensors; i++) {
        struct llm_tensor *x = &a->tensors[i], *y = llm_file_find(g, x->name);
        if (x->flags & LLM_TENSOR_AUX)
            continue;
        n_weights++;
        cr_assert(y, "%s", x->name);
        cr_assert_eq(y->type, LLM_TYPE_F32);
        cr_assert_eq(memcmp(x->ne, y->ne, sizeof x->ne), 0, "%s", x->name);
        const void *yb;
        cr_assert_eq(llm_tensor_bytes(g, y, &yb), LLM_OK);
        cr_assert_eq(memcmp(x->data, yb, x->nbytes), 0, "%s", x->name);
    }
    cr_assert_eq(n_weights, 47);
    cr_assert_eq(llm_file_vocab(a, &va), LLM_OK);
    cr_assert_eq(llm_file_vocab(g, &vg), LLM_OK);
    cr_assert_eq(va.n_tokens, vg.n_tokens);
    cr_assert_eq(memcmp(va.offsets, vg.offsets, 4 * (va.n_tokens + 1)), 0);
    cr_assert_eq(memcmp(va.bytes, vg.bytes, va.offsets[va.n_tokens]), 0);
    cr_assert_eq(memcmp(va.scores, vg.scores, 4 * va.n_tokens), 0);
    cr_assert_eq(memcmp(va.types, vg.types, 4 * va.n_tokens), 0);
    const char *keys[] = {"tokenizer.bos_id", "tokenizer.eos_id", "tokenizer.unk_id",
                          "hparams.embedding_length", "hparams.block_count",
                          "hparams.head_count_kv", "hparams.rope_dim"};
    for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++)
        cr_assert_eq(meta_i(a, keys[k]), meta_i(g, keys[k]), "%s", keys[k]);
    llm_file_free(a);
    llm_file_free(g);
}
