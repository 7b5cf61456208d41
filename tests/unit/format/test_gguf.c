/* test_gguf.c: the GGUF reader and writer.
 *
 * References: the real files in shared/data (stories260K in GGUF and in
 * llama2.c form, with its tok512.bin tokenizer; llama.cpp's vocab-only
 * files), the facts formats.md §1.4 lists about them, a small GGUF walker
 * written here (not lib/format's reader) to find section boundaries and
 * value types in written files, and a GGUF builder for crafted files. */
#include <fcntl.h>
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../../lib/common/alloc.h"
#include "../../../lib/common/fp16.h"
#include "../../../lib/common/io.h"
#include "../../../lib/format/file.h"
#include "../../../lib/format/import.h"
#include "../../../lib/format/meta.h"
#include "../../../lib/quant/ggml_quants.h"
#include "../../../lib/quant/quant.h"
#include "../helpers.h"

/* ---- little helpers --------------------------------------------------- */

static uint32_t rd32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t rd64(const uint8_t *p)
{
    return (uint64_t)rd32(p) | (uint64_t)rd32(p + 4) << 32;
}

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

static struct llm_meta *kept(struct llm_file *f, const char *key)
{
    return llm_meta_child(llm_meta_get(f->meta, "gguf"), key);
}

static uint8_t *slurp(const char *path, size_t *size)
{
    struct llm_map m;
    cr_assert_eq(llm_map_open(&m, path), LLM_OK, "%s", path);
    uint8_t *b = malloc(m.size ? m.size : 1);
    cr_assert(b);
    memcpy(b, m.data, m.size);
    *size = m.size;
    llm_map_close(&m);
    return b;
}

static struct llm_file *open_ok(const char *path, const struct llm_import_opts *o)
{
    struct llm_file *f = NULL;
    llm_status s = llm_gguf_open(&f, path, o);
    cr_assert_eq(s, LLM_OK, "%s: %s", path, llm_error_detail(s));
    return f;
}

/* Parse a copy of exactly `size` bytes (so that ASan sees any over-read). */
static llm_status parse_copy(const uint8_t *data, size_t size, const struct llm_import_opts *o,
                             struct llm_file **f)
{
    uint8_t *c = malloc(size ? size : 1);
    cr_assert(c);
    memcpy(c, data, size);
    llm_status s = llm_gguf_parse(f, c, size, "t.gguf", o);
    if (!s) /* the file points into c: read every tensor now, then drop it */
        for (size_t i = 0; i < (*f)->n_tensors; i++) {
            const void *p;
            cr_assert_eq(llm_tensor_bytes(*f, &(*f)->tensors[i], &p), LLM_OK, "%s",
                         llm_error_detail(-1));
            (*f)->tensors[i].fill = NULL;
        }
    free(c);
    return s;
}

/* A parse that must fail with `want` and a detail that starts with the
 * file name and contains `needle`. */
static void expect_error(const uint8_t *data, size_t size, llm_status want, const char *needle)
{
    struct llm_file *f = (struct llm_file *)1;
    llm_error_clear();
    llm_status s = parse_copy(data, size, NULL, &f);
    cr_assert_eq(s, want, "want %d for '%s', got %d: %s", want, needle, s, llm_error_detail(s));
    cr_assert_null(f);
    const char *d = llm_error_detail(s);
    cr_assert(!strncmp(d, "t.gguf: ", 8), "detail '%s'", d);
    cr_assert(strstr(d, needle), "detail '%s' lacks '%s'", d, needle);
}

static char *tmp_path(const char *name)
{
    static _Thread_local char buf[4][512];
    static _Thread_local int k;
    char *p = buf[k++ & 3];
    snprintf(p, sizeof buf[0], "%s/%s", llm_test_tmpdir(), name);
    return p;
}

/* ---- an independent GGUF walker -------------------------------------- */

static size_t scalar_size(uint32_t t)
{
    static const size_t sz[] = { 1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8 };
    cr_assert(t < 13 && t != 8 && t != 9, "value type %u", t);
    return sz[t];
}

static size_t skip_value(const uint8_t *d, size_t pos, uint32_t t)
{
    if (t == 8)
        return pos + 8 + (size_t)rd64(d + pos);
    if (t == 9) {
        uint32_t et = rd32(d + pos);
        uint64_t n = rd64(d + pos + 4);
        pos += 12;
        if (et != 8)
            return pos + (size_t)n * scalar_size(et);
        for (uint64_t i = 0; i < n; i++)
            pos = skip_value(d, pos, 8);
        return pos;
    }
    return pos + scalar_size(t);
}

struct walk {
    uint64_t n_tensors, n_kv;
    size_t kv_end[64];       /* end of each record (first 64) */
    size_t ti_end[64];       /* end of each tensor info (first 64) */
    size_t infos_end, data_start;
    uint64_t t_off[64], t_type[64];
};

static void walk(const uint8_t *d, size_t size, struct walk *w)
{
    memset(w, 0, sizeof *w);
    cr_assert_geq(size, 24);
    cr_assert_eq(rd32(d), 0x46554747u);
    w->n_tensors = rd64(d + 8);
    w->n_kv = rd64(d + 16);
    size_t pos = 24;
    for (uint64_t i = 0; i < w->n_kv; i++) {
        pos += 8 + (size_t)rd64(d + pos);
        uint32_t t = rd32(d + pos);
        pos = skip_value(d, pos + 4, t);
        if (i < 64)
            w->kv_end[i] = pos;
    }
    for (uint64_t i = 0; i < w->n_tensors; i++) {
        pos += 8 + (size_t)rd64(d + pos);
        uint32_t nd = rd32(d + pos);
        pos += 4 + 8 * (size_t)nd;
        if (i < 64) {
            w->t_type[i] = rd32(d + pos);
            w->t_off[i] = rd64(d + pos + 4);
        }
        pos += 12;
        if (i < 64)
            w->ti_end[i] = pos;
    }
    w->infos_end = pos;
    w->data_start = (pos + 31) / 32 * 32; /* files here use the default alignment */
    cr_assert_leq(pos, size);
}

/* Type (and element type) of `key` in a GGUF buffer; 0 when absent. */
static int find_key(const uint8_t *d, uint32_t *type, uint32_t *etype, size_t *val)
{
    (void)d;
    (void)type;
    (void)etype;
    (void)val;
    return 0;
}

static int key_type(const uint8_t *d, const char *key, uint32_t *type, uint32_t *etype,
                    size_t *val)
{
    (void)find_key;
    uint64_t n_kv = rd64(d + 16);
    size_t pos = 24, kl = strlen(key);
    for (uint64_t i = 0; i < n_kv; i++) {
        uint64_t l = rd64(d + pos);
        int match = l == kl && !memcmp(d + pos + 8, key, kl);
        pos += 8 + (size_t)l;
        uint32_t t = rd32(d + pos);
        if (match) {
            *type = t;
            *etype = t == 9 ? rd32(d + pos + 4) : 0;
            *val = pos + 4;
            return 1;
        }
        pos = skip_value(d, pos + 4, t);
    }
    return 0;
}

/* ---- a GGUF builder for crafted files -------------------------------- */

struct gb {
    uint8_t *p;
    size_t n, cap;
};

static void gb_put(struct gb *b, const void *p, size_t n)
{
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
        cr_assert(b->p);
    }
    memcpy(b->p + b->n, p, n);
    b->n += n;
}

static void gb_u8(struct gb *b, uint8_t v) { gb_put(b, &v, 1); }
static void gb_u16(struct gb *b, uint16_t v) { uint8_t x[2] = { (uint8_t)v, (uint8_t)(v >> 8) }; gb_put(b, x, 2); }
static void gb_u32(struct gb *b, uint32_t v) { gb_u16(b, (uint16_t)v); gb_u16(b, (uint16_t)(v >> 16)); }
static void gb_u64(struct gb *b, uint64_t v) { gb_u32(b, (uint32_t)v); gb_u32(b, (uint32_t)(v >> 32)); }
static void gb_f32(struct gb *b, float v) { uint32_t u; memcpy(&u, &v, 4); gb_u32(b, u); }
static void gb_f64(struct gb *b, double v) { uint64_t u; memcpy(&u, &v, 8); gb_u64(b, u); }
static void gb_strn(struct gb *b, const char *s, size_t n) { gb_u64(b, n); gb_put(b, s, n); }
static void gb_str(struct gb *b, const char *s) { gb_strn(b, s, strlen(s)); }

struct spec {
    uint32_t version, align;
    struct gb kv, ti, data;
    uint64_t n_kv, n_t;
};

static void spec_init(struct spec *s)
{
    memset(s, 0, sizeof *s);
    s->version = 3;
    s->align = 32;
}

static struct gb *key(struct spec *s, const char *k, uint32_t type)
{
    gb_str(&s->kv, k);
    gb_u32(&s->kv, type);
    s->n_kv++;
    return &s->kv;
}

static void key_u32(struct spec *s, const char *k, uint32_t v) { gb_u32(key(s, k, 4), v); }
static void key_str(struct spec *s, const char *k, const char *v) { gb_str(key(s, k, 8), v); }

/* A model skeleton: llama hparams and a 6-token vocabulary. */
static void llama_keys(struct spec *s)
{
    key_str(s, "general.architecture", "llama");
    key_u32(s, "llama.embedding_length", 32);
    key_u32(s, "llama.attention.head_count", 4);
    key_u32(s, "llama.block_count", 1);
    key_str(s, "tokenizer.ggml.model", "llama");
    struct gb *b = key(s, "tokenizer.ggml.tokens", 9);
    static const char *toks[] = { "<unk>", "<s>", "</s>", "a", "b", "\xe2\x96\x81" "ab" };
    gb_u32(b, 8);
    gb_u64(b, 6);
    for (int i = 0; i < 6; i++)
        gb_str(b, toks[i]);
}

/* Tensor with its data appended at the next aligned offset. */
static void tensor(struct spec *s, const char *name, uint32_t n_dims, const uint64_t *ne,
                   uint32_t type, const void *bytes, size_t nbytes)
{
    gb_str(&s->ti, name);
    gb_u32(&s->ti, n_dims);
    for (uint32_t d = 0; d < n_dims; d++)
        gb_u64(&s->ti, ne[d]);
    gb_u32(&s->ti, type);
    gb_u64(&s->ti, s->data.n);
    gb_put(&s->data, bytes, nbytes);
    while (s->data.n % s->align)
        gb_u8(&s->data, 0);
    s->n_t++;
}

static uint8_t *assemble(struct spec *s, size_t *size)
{
    struct gb out = { 0 };
    gb_u32(&out, 0x46554747u);
    gb_u32(&out, s->version);
    gb_u64(&out, s->n_t);
    gb_u64(&out, s->n_kv);
    if (s->kv.n)
        gb_put(&out, s->kv.p, s->kv.n);
    if (s->ti.n)
        gb_put(&out, s->ti.p, s->ti.n);
    if (s->n_t) {
        while (out.n % s->align)
            gb_u8(&out, 0);
        gb_put(&out, s->data.p, s->data.n);
    }
    free(s->kv.p);
    free(s->ti.p);
    free(s->data.p);
    *size = out.n;
    return out.p;
}

/* ---- structural comparisons ------------------------------------------- */

static int meta_equal(const struct llm_meta *a, const struct llm_meta *b, char *where, size_t n)
{
    if (a->kind != b->kind) {
        snprintf(where, n, "%s: kind %d vs %d", a->key ? a->key : "?", a->kind, b->kind);
        return 0;
    }
    switch (a->kind) {
    case LLM_META_INT:
    case LLM_META_BOOL:
        if (a->i != b->i)
            snprintf(where, n, "%s: %lld vs %lld", a->key ? a->key : "?", (long long)a->i,
                     (long long)b->i);
        return a->i == b->i;
    case LLM_META_FLOAT:
        if (a->f != b->f)
            snprintf(where, n, "%s: %g vs %g", a->key ? a->key : "?", a->f, b->f);
        return a->f == b->f;
    case LLM_META_STR:
        if (a->slen != b->slen || memcmp(a->s, b->s, a->slen)) {
            snprintf(where, n, "%s: strings differ", a->key ? a->key : "?");
            return 0;
        }
        return 1;
    case LLM_META_SEQ:
        if (a->n != b->n) {
            snprintf(where, n, "%s: %zu vs %zu items", a->key ? a->key : "?", a->n, b->n);
            return 0;
        }
        for (size_t i = 0; i < a->n; i++)
            if (!meta_equal(a->items[i], b->items[i], where, n))
                return 0;
        return 1;
    case LLM_META_MAP:
        if (a->n != b->n) {
            snprintf(where, n, "%s: %zu vs %zu keys", a->key ? a->key : "(root)", a->n, b->n);
            return 0;
        }
        for (size_t i = 0; i < a->n; i++) {
            const struct llm_meta *c = llm_meta_child(b, a->items[i]->key);
            if (!c) {
                snprintf(where, n, "key '%s' missing", a->items[i]->key);
                return 0;
            }
            if (!meta_equal(a->items[i], c, where, n))
                return 0;
        }
        return 1;
    default:
        return 1;
    }
}

/* Metadata equal apart from `source` (which describes the file read). */
static void assert_meta_equal(struct llm_file *a, struct llm_file *b)
{
    struct llm_meta *x = llm_meta_clone(a->meta), *y = llm_meta_clone(b->meta);
    llm_meta_del(x, "source");
    llm_meta_del(y, "source");
    char where[256] = "";
    cr_assert(meta_equal(x, y, where, sizeof where), "metadata differs: %s", where);
    llm_meta_free(x);
    llm_meta_free(y);
}

static void assert_vocab_equal(struct llm_file *a, struct llm_file *b)
{
    struct llm_vocab_view va, vb;
    llm_status sa = llm_file_vocab(a, &va), sb = llm_file_vocab(b, &vb);
    cr_assert_eq(sa, sb);
    if (sa)
        return;
    cr_assert_eq(va.n_tokens, vb.n_tokens);
    cr_assert_eq(memcmp(va.offsets, vb.offsets, 4 * ((size_t)va.n_tokens + 1)), 0);
    cr_assert_eq(memcmp(va.bytes, vb.bytes, va.offsets[va.n_tokens]), 0);
    cr_assert_eq(!va.scores, !vb.scores);
    cr_assert_eq(!va.types, !vb.types);
    if (va.scores)
        cr_assert_eq(memcmp(va.scores, vb.scores, 4 * (size_t)va.n_tokens), 0);
    if (va.types)
        cr_assert_eq(memcmp(va.types, vb.types, 4 * (size_t)va.n_tokens), 0);
    cr_assert_eq(va.n_merges, vb.n_merges);
    if (va.n_merges) {
        cr_assert_eq(memcmp(va.merge_offsets, vb.merge_offsets, 4 * ((size_t)va.n_merges + 1)), 0);
        cr_assert_eq(memcmp(va.merge_bytes, vb.merge_bytes, va.merge_offsets[va.n_merges]), 0);
    }
}

static size_t n_weights(const struct llm_file *f)
{
    size_t n = 0;
    for (size_t i = 0; i < f->n_tensors; i++)
        n += !(f->tensors[i].flags & LLM_TENSOR_AUX);
    return n;
}

static void assert_tensors_equal(struct llm_file *a, struct llm_file *b)
{
    cr_assert_eq(n_weights(a), n_weights(b));
    for (size_t i = 0; i < a->n_tensors; i++) {
        struct llm_tensor *x = &a->tensors[i];
        if (x->flags & LLM_TENSOR_AUX)
            continue;
        struct llm_tensor *y = llm_file_find(b, x->name);
        cr_assert(y, "%s missing", x->name);
        cr_assert_eq(x->type, y->type, "%s", x->name);
        cr_assert_eq(x->n_dims, y->n_dims, "%s", x->name);
        cr_assert_eq(memcmp(x->ne, y->ne, sizeof x->ne), 0, "%s", x->name);
        const void *px, *py;
        cr_assert_eq(llm_tensor_bytes(a, x, &px), LLM_OK);
        cr_assert_eq(llm_tensor_bytes(b, y, &py), LLM_OK);
        cr_assert_eq(memcmp(px, py, x->nbytes), 0, "%s bytes differ", x->name);
    }
}

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
        cr_assert_eq(v.offsets[i + 1] - v.offsets[i], len, "token %u length", i);
        cr_assert_eq(memcmp(v.bytes + v.offsets[i], b + pos, len), 0, "token %u bytes", i);
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

Test(gguf, round_trip_stories260k)
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

Test(gguf, round_trip_tiny_random_and_vocab_files)
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

Test(gguf, write_to_stdout_gives_the_same_bytes)
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
        /* the big token and score arrays: one byte in 16 is enough */
        if (i > 200 && i < w.kv_end[2] - 16 && i % 16)
            continue;
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
        cr_assert(s == LLM_E_FORMAT || s == LLM_E_UNSUPPORTED, "byte %zu: status %d", i, s);
        cr_assert(!strncmp(llm_error_detail(s), "stories260K.gguf: ", 18), "byte %zu: '%s'", i,
                  llm_error_detail(s));
        cr_assert_null(f);
        n_format += s == LLM_E_FORMAT;
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

Test(gguf, kquant_tensors_are_decoded_on_demand)
{
    static const struct { uint32_t g; const char *name; size_t bytes; size_t halves[2], nh; } ks[] = {
        { 10, "q2k.weight", 84, { 80, 82 }, 2 },  { 11, "q3k.weight", 110, { 108 }, 1 },
        { 12, "q4k.weight", 144, { 0, 2 }, 2 },   { 13, "q5k.weight", 176, { 0, 2 }, 2 },
        { 14, "q6k.weight", 210, { 208 }, 1 },    { 6, "q50.weight", 22, { 0 }, 1 },
        { 7, "q51.weight", 24, { 0, 2 }, 2 },
    };
    uint8_t blocks[7][2 * 8 * 210];
    struct spec s;
    spec_init(&s);
    llama_keys(&s);
    for (int k = 0; k < 7; k++) {
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
        for (int k = 0; k < 7; k++) {
            struct llm_tensor *t = llm_file_find(f, ks[k].name);
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

Test(gguf, kept_keys_keep_their_types_through_a_round_trip)
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

Test(gguf, writer_refuses_what_gguf_cannot_hold)
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

Test(gguf, writer_converts_types_without_a_ggml_twin_to_f16)
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
    uint8_t want_q[4 * 34];
    cr_assert_eq(llm_convert_rows(LLM_TYPE_Q8_G64, q, LLM_TYPE_Q8_0, want_q, 128, 2), LLM_OK);
    cr_assert_eq(memcmp(t->data, want_q, sizeof want_q), 0);
    cr_assert_eq(llm_file_find(g, "blk.0.ffn_norm.weight")->type, LLM_TYPE_F32);
    llm_file_free(g);
    llm_file_free(f);
}

Test(gguf, tokenizer_only_file)
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
Test(gguf, writer_reorders_qk_rows_for_the_architecture)
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

Test(gguf, writer_llama3_scaling_and_mistral)
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
