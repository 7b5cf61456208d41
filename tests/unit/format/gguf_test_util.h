/* gguf_test_util.h: what the GGUF reader and writer tests share: a small
 * GGUF walker written here (not lib/format's reader) to find section
 * boundaries and value types in files, a builder for crafted files, and
 * structural comparisons of two llm_files. Functions are static inline so
 * that each test file may use a subset. */
#ifndef LLM_TESTS_GGUF_TEST_UTIL_H
#define LLM_TESTS_GGUF_TEST_UTIL_H

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

static inline uint32_t rd32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static inline uint64_t rd64(const uint8_t *p)
{
    return (uint64_t)rd32(p) | (uint64_t)rd32(p + 4) << 32;
}

static inline int64_t meta_i(struct llm_file *f, const char *path)
{
    int64_t v = -1;
    cr_assert_eq(llm_meta_get_i64(f->meta, path, &v), LLM_OK, "meta %s", path);
    return v;
}

static inline double meta_f(struct llm_file *f, const char *path)
{
    double v = -1;
    cr_assert_eq(llm_meta_get_f64(f->meta, path, &v), LLM_OK, "meta %s", path);
    return v;
}

static inline const char *meta_s(struct llm_file *f, const char *path)
{
    const char *v = NULL;
    cr_assert_eq(llm_meta_get_str(f->meta, path, &v), LLM_OK, "meta %s", path);
    return v;
}

static inline int meta_b(struct llm_file *f, const char *path)
{
    int v = -1;
    cr_assert_eq(llm_meta_get_bool(f->meta, path, &v), LLM_OK, "meta %s", path);
    return v;
}

static inline struct llm_meta *kept(struct llm_file *f, const char *key)
{
    return llm_meta_child(llm_meta_get(f->meta, "gguf"), key);
}

static inline uint8_t *slurp(const char *path, size_t *size)
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

static inline struct llm_file *open_ok(const char *path, const struct llm_import_opts *o)
{
    struct llm_file *f = NULL;
    llm_status s = llm_gguf_open(&f, path, o);
    cr_assert_eq(s, LLM_OK, "%s: %s", path, llm_error_detail(s));
    return f;
}

/* Parse a copy of exactly `size` bytes (so that ASan sees any over-read). */
static inline llm_status parse_copy(const uint8_t *data, size_t size, const struct llm_import_opts *o,
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
static inline void expect_error(const uint8_t *data, size_t size, llm_status want, const char *needle)
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

static inline char *tmp_path(const char *name)
{
    static _Thread_local char buf[4][512];
    static _Thread_local int k;
    char *p = buf[k++ & 3];
    snprintf(p, sizeof buf[0], "%s/%s", llm_test_tmpdir(), name);
    return p;
}

/* ---- an independent GGUF walker -------------------------------------- */

static inline size_t scalar_size(uint32_t t)
{
    static const size_t sz[] = { 1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8 };
    cr_assert(t < 13 && t != 8 && t != 9, "value type %u", t);
    return sz[t];
}

static inline size_t skip_value(const uint8_t *d, size_t pos, uint32_t t)
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

static inline void walk(const uint8_t *d, size_t size, struct walk *w)
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

/* Type (and element type) of `key` in a GGUF buffer, and where its value
 * starts; 0 when absent. */
static inline int key_type(const uint8_t *d, const char *key, uint32_t *type, uint32_t *etype,
                    size_t *val)
{
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

static inline void gb_put(struct gb *b, const void *p, size_t n)
{
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
        cr_assert(b->p);
    }
    memcpy(b->p + b->n, p, n);
    b->n += n;
}

static inline void gb_u8(struct gb *b, uint8_t v) { gb_put(b, &v, 1); }
static inline void gb_u16(struct gb *b, uint16_t v) { uint8_t x[2] = { (uint8_t)v, (uint8_t)(v >> 8) }; gb_put(b, x, 2); }
static inline void gb_u32(struct gb *b, uint32_t v) { gb_u16(b, (uint16_t)v); gb_u16(b, (uint16_t)(v >> 16)); }
static inline void gb_u64(struct gb *b, uint64_t v) { gb_u32(b, (uint32_t)v); gb_u32(b, (uint32_t)(v >> 32)); }
static inline void gb_f32(struct gb *b, float v) { uint32_t u; memcpy(&u, &v, 4); gb_u32(b, u); }
static inline void gb_f64(struct gb *b, double v) { uint64_t u; memcpy(&u, &v, 8); gb_u64(b, u); }
static inline void gb_strn(struct gb *b, const char *s, size_t n) { gb_u64(b, n); gb_put(b, s, n); }
static inline void gb_str(struct gb *b, const char *s) { gb_strn(b, s, strlen(s)); }

struct spec {
    uint32_t version, align;
    struct gb kv, ti, data;
    uint64_t n_kv, n_t;
};

static inline void spec_init(struct spec *s)
{
    memset(s, 0, sizeof *s);
    s->version = 3;
    s->align = 32;
}

static inline struct gb *key(struct spec *s, const char *k, uint32_t type)
{
    gb_str(&s->kv, k);
    gb_u32(&s->kv, type);
    s->n_kv++;
    return &s->kv;
}

static inline void key_u32(struct spec *s, const char *k, uint32_t v) { gb_u32(key(s, k, 4), v); }
static inline void key_str(struct spec *s, const char *k, const char *v) { gb_str(key(s, k, 8), v); }

/* A model skeleton: llama hparams and a 6-token vocabulary. */
static inline void llama_keys(struct spec *s)
{
    key_str(s, "general.architecture", "llama");
    key_u32(s, "llama.embedding_length", 32);
    key_u32(s, "llama.attention.head_count", 4);
    key_u32(s, "llama.block_count", 1);
    key_str(s, "tokenizer.ggml.model", "llama");
    struct gb *b = key(s, "tokenizer.ggml.tokens", 9);
    static const char *toks[] = { "<unk>", "<s>", "</s>", "a", "b", "\xe2\x96\x81\x61\x62" }; /* U+2581 "ab" */
    gb_u32(b, 8);
    gb_u64(b, 6);
    for (int i = 0; i < 6; i++)
        gb_str(b, toks[i]);
}

/* Tensor with its data appended at the next aligned offset. */
static inline void tensor(struct spec *s, const char *name, uint32_t n_dims, const uint64_t *ne,
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

static inline uint8_t *assemble(struct spec *s, size_t *size)
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

static inline int meta_equal(const struct llm_meta *a, const struct llm_meta *b, char *where, size_t n)
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
static inline void assert_meta_equal(struct llm_file *a, struct llm_file *b)
{
    struct llm_meta *x = llm_meta_clone(a->meta), *y = llm_meta_clone(b->meta);
    llm_meta_del(x, "source");
    llm_meta_del(y, "source");
    char where[256] = "";
    cr_assert(meta_equal(x, y, where, sizeof where), "metadata differs: %s", where);
    llm_meta_free(x);
    llm_meta_free(y);
}

static inline void assert_vocab_equal(struct llm_file *a, struct llm_file *b)
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

static inline size_t n_weights(const struct llm_file *f)
{
    size_t n = 0;
    for (size_t i = 0; i < f->n_tensors; i++)
        n += !(f->tensors[i].flags & LLM_TENSOR_AUX);
    return n;
}

static inline void assert_tensors_equal(struct llm_file *a, struct llm_file *b)
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

#endif
