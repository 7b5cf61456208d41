/* safetensors.c: the safetensors container (formats.md §3.1): a validating
 * header scanner shared with the HF directory importer, a reader of a single
 * file (tensors keep their own names) and a writer. */
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/alloc.h"
#include "../common/io.h"
#include "file.h"
#include "hf.h"
#include "import.h"

/* Element sizes in bits (sub-byte types exist: F4, F6). */
static const struct {
    const char *name;
    uint32_t bits;
    int type;
} st_dtypes[] = {
    { "F32", 32, LLM_TYPE_F32 },     { "F16", 16, LLM_TYPE_F16 },   { "BF16", 16, LLM_TYPE_BF16 },
    { "BOOL", 8, -1 },               { "U8", 8, -1 },               { "I8", 8, -1 },
    { "I16", 16, -1 },               { "U16", 16, -1 },             { "I32", 32, -1 },
    { "U32", 32, -1 },               { "F64", 64, -1 },             { "I64", 64, -1 },
    { "U64", 64, -1 },               { "F8_E5M2", 8, -1 },          { "F8_E4M3", 8, -1 },
    { "F8_E8M0", 8, -1 },            { "F8_E4M3FNUZ", 8, -1 },      { "F8_E5M2FNUZ", 8, -1 },
    { "F4", 4, -1 },                 { "F6_E2M3", 6, -1 },          { "F6_E3M2", 6, -1 },
    { "C64", 64, -1 },
};

struct st_item {
    const char *name;
    const char *dtype;
    int type;
    json_t *shape;   /* borrowed from the header document */
    uint64_t begin, end;
};

static int item_cmp(const void *a, const void *b)
{
    const struct st_item *x = a, *y = b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end)
        return x->end < y->end ? -1 : 1;
    return 0;
}

static uint64_t rd_le64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

/* Non-negative JSON integer, else -1. */
static int64_t json_uint(const json_t *v)
{
    if (!json_is_integer(v))
        return -1;
    json_int_t i = json_integer_value(v);
    return i < 0 ? -1 : (int64_t)i;
}

static llm_status put_metadata(struct llm_meta *meta, json_t *md, const char *name)
{
    if (json_is_null(md))
        return LLM_OK;
    if (!json_is_object(md))
        return llm_error_set(LLM_E_FORMAT, "%s: __metadata__ is not an object", name);
    const char *k;
    json_t *v;
    json_object_foreach(md, k, v) {
        if (!json_is_string(v))
            return llm_error_set(LLM_E_FORMAT, "%s: __metadata__ value of '%s' is not a string",
                                 name, k);
    }
    if (!meta || json_object_size(md) == 0)
        return LLM_OK;
    struct llm_meta *map = llm_meta_get(meta, "safetensors");
    if (!map || map->kind != LLM_META_MAP) {
        map = llm_meta_new(LLM_META_MAP);
        if (!map)
            return LLM_E_NOMEM;
        LLM_TRY(llm_meta_set(meta, "safetensors", map));
    }
    json_object_foreach(md, k, v) {
        struct llm_meta *s = llm_meta_new_strn(json_string_value(v), json_string_length(v));
        if (!s)
            return LLM_E_NOMEM;
        LLM_TRY(llm_meta_put(map, k, s));
    }
    return LLM_OK;
}

/* Check one tensor record and fill *it; the byte range is checked against
 * buf_size here, the tiling later. */
static llm_status check_item(const char *name, const char *key, json_t *v, uint64_t buf_size,
                             struct st_item *it)
{
    if (!json_is_object(v))
        return llm_error_set(LLM_E_FORMAT, "%s: tensor '%s': entry is not an object", name, key);
    json_t *dt = json_object_get(v, "dtype"), *sh = json_object_get(v, "shape"),
           *off = json_object_get(v, "data_offsets");
    if (!json_is_string(dt))
        return llm_error_set(LLM_E_FORMAT, "%s: tensor '%s': missing or bad 'dtype'", name, key);
    if (!json_is_array(sh))
        return llm_error_set(LLM_E_FORMAT, "%s: tensor '%s': missing or bad 'shape'", name, key);
    if (!json_is_array(off) || json_array_size(off) != 2)
        return llm_error_set(LLM_E_FORMAT, "%s: tensor '%s': 'data_offsets' is not [begin, end]",
                             name, key);
    const char *dts = json_string_value(dt);
    uint32_t bits = 0;
    int type = -1;
    for (size_t i = 0; i < sizeof st_dtypes / sizeof st_dtypes[0]; i++)
        if (strcmp(dts, st_dtypes[i].name) == 0) {
            bits = st_dtypes[i].bits;
            type = st_dtypes[i].type;
        }
    if (!bits)
        return llm_error_set(LLM_E_FORMAT, "%s: tensor '%s': unknown dtype '%s'", name, key, dts);

    uint64_t nel = 1;
    for (size_t i = 0; i < json_array_size(sh); i++) {
        int64_t d = json_uint(json_array_get(sh, i));
        if (d < 0)
            return llm_error_set(LLM_E_FORMAT, "%s: tensor '%s': shape has a bad dimension", name,
                                 key);
        if (!llm_mul_ok(nel, (uint64_t)d, &nel))
            return llm_error_set(LLM_E_FORMAT, "%s: tensor '%s': shape overflows", name, key);
    }
    uint64_t nbits;
    if (!llm_mul_ok(nel, bits, &nbits))
        return llm_error_set(LLM_E_FORMAT, "%s: tensor '%s': shape overflows", name, key);
    if (nbits % 8)
        return llm_error_set(LLM_E_FORMAT, "%s: tensor '%s': %s data is not a whole number of bytes",
                             name, key, dts);
    int64_t b = json_uint(json_array_get(off, 0)), e = json_uint(json_array_get(off, 1));
    if (b < 0 || e < 0 || b > e)
        return llm_error_set(LLM_E_FORMAT, "%s: tensor '%s': bad data_offsets", name, key);
    if ((uint64_t)e > buf_size)
        return llm_error_set(LLM_E_FORMAT,
                             "%s: tensor '%s': data_offsets end %lld is past end of file "
                             "(byte buffer of %llu bytes)",
                             name, key, (long long)e, (unsigned long long)buf_size);
    if ((uint64_t)(e - b) != nbits / 8)
        return llm_error_set(LLM_E_FORMAT,
                             "%s: tensor '%s': data_offsets give %llu bytes but dtype %s and "
                             "its shape need %llu",
                             name, key, (unsigned long long)(e - b), dts,
                             (unsigned long long)(nbits / 8));
    it->name = key;
    it->dtype = dts;
    it->type = type;
    it->shape = sh;
    it->begin = (uint64_t)b;
    it->end = (uint64_t)e;
    return LLM_OK;
}

static llm_status scan_items(const uint8_t *data, size_t size, const char *name,
                             struct llm_meta *meta, llm_st_fn fn, void *ctx, json_t *root,
                             struct st_item *items)
{
    uint64_t hlen = rd_le64(data);
    uint64_t base = 8 + hlen, buf_size = size - base;
    size_t n = 0;
    const char *key;
    json_t *v;
    json_object_foreach(root, key, v) {
        if (strcmp(key, "__metadata__") == 0) {
            LLM_TRY(put_metadata(meta, v, name));
            continue;
        }
        LLM_TRY(check_item(name, key, v, buf_size, &items[n]));
        n++;
    }
    qsort(items, n, sizeof *items, item_cmp);
    uint64_t expect = 0;
    for (size_t i = 0; i < n; i++) {
        if (items[i].begin < expect)
            return llm_error_set(LLM_E_FORMAT, "%s: tensor '%s' overlaps tensor '%s'", name,
                                 items[i].name, items[i - 1].name);
        if (items[i].begin > expect)
            return llm_error_set(LLM_E_FORMAT,
                                 "%s: tensor '%s': %llu unused bytes before its data "
                                 "(tensors must tile the byte buffer)",
                                 name, items[i].name,
                                 (unsigned long long)(items[i].begin - expect));
        expect = items[i].end;
    }
    if (expect != buf_size)
        return llm_error_set(LLM_E_FORMAT,
                             "%s: byte buffer has %llu bytes but the tensors cover %llu", name,
                             (unsigned long long)buf_size, (unsigned long long)expect);
    for (size_t i = 0; i < n; i++) {
        struct llm_st_entry e = { 0 };
        size_t nd = json_array_size(items[i].shape);
        if (nd > LLM_MAX_DIMS)
            return llm_error_set(LLM_E_UNSUPPORTED,
                                 "%s: tensor '%s': %zu dimensions (at most %d supported)", name,
                                 items[i].name, nd, LLM_MAX_DIMS);
        e.name = items[i].name;
        e.dtype = items[i].dtype;
        e.type = items[i].type;
        for (int d = 0; d < LLM_MAX_DIMS; d++)
            e.ne[d] = 1;
        /* A scalar is stored as a one-element vector. */
        e.n_dims = nd ? (uint32_t)nd : 1;
        for (size_t d = 0; d < nd; d++)
            e.ne[d] = json_integer_value(json_array_get(items[i].shape, nd - 1 - d));
        e.data = data + base + items[i].begin;
        e.nbytes = items[i].end - items[i].begin;
        LLM_TRY(fn(&e, ctx));
    }
    return LLM_OK;
}

llm_status llm_st_scan(const uint8_t *data, size_t size, const char *name, struct llm_meta *meta,
                       llm_st_fn fn, void *ctx)
{
    if (size < 8)
        return llm_error_set(LLM_E_FORMAT, "%s: file too short for a safetensors header (%zu bytes)",
                             name, size);
    uint64_t hlen = rd_le64(data);
    if (hlen > LLM_ST_MAX_HEADER)
        return llm_error_set(LLM_E_FORMAT, "%s: header length %llu exceeds the limit of %u bytes",
                             name, (unsigned long long)hlen, LLM_ST_MAX_HEADER);
    if (hlen > size - 8)
        return llm_error_set(LLM_E_FORMAT,
                             "%s: header length %llu is past end of file (%zu bytes)", name,
                             (unsigned long long)hlen, size);
    if (hlen == 0 || data[8] != '{')
        return llm_error_set(LLM_E_FORMAT, "%s: header does not start with '{'", name);
    json_error_t err;
    json_t *root = json_loadb((const char *)data + 8, (size_t)hlen, JSON_REJECT_DUPLICATES, &err);
    if (!root)
        return llm_error_set(LLM_E_FORMAT, "%s: header JSON: %s (column %d)", name, err.text,
                             err.column);
    llm_status s = LLM_OK;
    struct st_item *items = NULL;
    if (!json_is_object(root)) {
        s = llm_error_set(LLM_E_FORMAT, "%s: header is not a JSON object", name);
        goto out;
    }
    size_t count = json_object_size(root);
    items = llm_calloc(count ? count : 1, sizeof *items);
    if (!items) {
        s = LLM_E_NOMEM;
        goto out;
    }
    s = scan_items(data, size, name, meta, fn, ctx, root, items);
out:
    llm_free(items);
    json_decref(root);
    return s;
}

/* ------------------------------------------------------------------------ */
/* reader of one file */

/* Copies the tensor from its (unaligned) place in the mapping. */
static llm_status fill_copy(const struct llm_tensor *t, void *dst, void *ctx)
{
    memcpy(dst, ctx, (size_t)t->nbytes);
    return LLM_OK;
}

static size_t type_align(enum llm_type t)
{
    return t == LLM_TYPE_F32 || t == LLM_TYPE_I32 ? 4 : 2;
}

struct st_open_ctx {
    struct llm_file *f;
    const char *name;
};

static llm_status st_add(const struct llm_st_entry *e, void *vctx)
{
    struct st_open_ctx *c = vctx;
    if (e->type < 0)
        return llm_error_set(LLM_E_UNSUPPORTED,
                             "%s: tensor '%s': dtype %s is not supported (F32, F16 and BF16 only)",
                             c->name, e->name, e->dtype);
    int aligned = (uintptr_t)e->data % type_align((enum llm_type)e->type) == 0;
    struct llm_tensor *t;
    llm_status s = llm_file_add_tensor(c->f, e->name, (enum llm_type)e->type, e->n_dims, e->ne,
                                       aligned ? e->data : NULL, &t);
    if (s)
        return s;
    if (!aligned) {
        t->fill = fill_copy;
        t->fill_ctx = (void *)(uintptr_t)e->data;
    }
    return LLM_OK;
}

llm_status llm_safetensors_parse(struct llm_file **out, const uint8_t *data, size_t size,
                                 const char *name, const struct llm_import_opts *o)
{
    *out = NULL;
    struct llm_file *f;
    LLM_TRY(llm_file_new(&f, name, "safetensors"));
    llm_file_set_checks(f, o);
    struct st_open_ctx c = { f, name };
    llm_status s = llm_st_scan(data, size, name, f->meta, st_add, &c);
    if (!s)
        s = llm_meta_set_str(f->meta, "source.format", "safetensors");
    if (!s)
        s = llm_meta_set_str(f->meta, "source.path", name);
    if (s) {
        llm_file_free(f);
        return s;
    }
    *out = f;
    return LLM_OK;
}

llm_status llm_safetensors_open(struct llm_file **out, const char *path,
                                const struct llm_import_opts *o)
{
    *out = NULL;
    struct llm_map m;
    LLM_TRY(llm_model_map(&m, path));
    const char *shown = strcmp(path, "-") == 0 ? "<stdin>" : path;
    struct llm_file *f;
    llm_status s = llm_safetensors_parse(&f, m.data, m.size, shown, o);
    if (s) {
        llm_map_close(&m);
        return s;
    }
    s = llm_file_add_map(f, &m);
    if (s) {
        llm_file_free(f);
        return s;
    }
    *out = f;
    return LLM_OK;
}

/* ------------------------------------------------------------------------ */
/* writer */

static const char *st_dtype_name(enum llm_type t)
{
    switch (t) {
    case LLM_TYPE_F32: return "F32";
    case LLM_TYPE_F16: return "F16";
    case LLM_TYPE_BF16: return "BF16";
    case LLM_TYPE_I32: return "I32"; /* GPTQ/AWQ packed words (hf_quant_write.c) */
    default: return NULL;
    }
}

/* The reference writer's order: larger elements first, then by name, so
 * every tensor starts aligned to its element size. */
static int write_cmp(const void *a, const void *b)
{
    const struct llm_tensor *x = *(const struct llm_tensor *const *)a;
    const struct llm_tensor *y = *(const struct llm_tensor *const *)b;
    size_t ax = type_align(x->type), ay = type_align(y->type);
    if (ax != ay)
        return ax > ay ? -1 : 1;
    return strcmp(x->name, y->name);
}

static llm_status set_new(json_t *obj, const char *key, json_t *v)
{
    if (!v || json_object_set_new(obj, key, v) != 0)
        return llm_error_set(LLM_E_NOMEM, "out of memory (safetensors header)");
    return LLM_OK;
}

static llm_status build_header(struct llm_file *f, struct llm_tensor **ts, size_t n, json_t *root)
{
    json_t *md = json_object();
    LLM_TRY(set_new(root, "__metadata__", md));
    struct llm_meta *sm = llm_meta_get(f->meta, "safetensors");
    int have_format = 0;
    if (sm && sm->kind == LLM_META_MAP)
        for (size_t i = 0; i < sm->n; i++) {
            struct llm_meta *c = sm->items[i];
            if (c->kind != LLM_META_STR)
                continue;
            have_format |= strcmp(c->key, "format") == 0;
            LLM_TRY(set_new(md, c->key, json_stringn(c->s, c->slen)));
        }
    if (!have_format)
        LLM_TRY(set_new(md, "format", json_string("pt")));
    uint64_t off = 0;
    for (size_t i = 0; i < n; i++) {
        struct llm_tensor *t = ts[i];
        json_t *o = json_object(), *shape = json_array(), *offs = json_array();
        if (!o || !shape || !offs) {
            json_decref(o);
            json_decref(shape);
            json_decref(offs);
            return llm_error_set(LLM_E_NOMEM, "out of memory (safetensors header)");
        }
        LLM_TRY(set_new(root, t->name, o));
        LLM_TRY(set_new(o, "dtype", json_string(st_dtype_name(t->type))));
        LLM_TRY(set_new(o, "shape", shape));
        LLM_TRY(set_new(o, "data_offsets", offs));
        for (uint32_t d = t->n_dims; d-- > 0;)
            if (json_array_append_new(shape, json_integer(t->ne[d])) != 0)
                return llm_error_set(LLM_E_NOMEM, "out of memory (safetensors header)");
        if (json_array_append_new(offs, json_integer((json_int_t)off)) != 0 ||
            json_array_append_new(offs, json_integer((json_int_t)(off + t->nbytes))) != 0)
            return llm_error_set(LLM_E_NOMEM, "out of memory (safetensors header)");
        off += t->nbytes;
    }
    return LLM_OK;
}

static llm_status write_body(struct llm_file *f, struct llm_tensor **ts, size_t n,
                             struct llm_out *out)
{
    uint64_t most = 0;
    for (size_t i = 0; i < n; i++)
        if (!llm_tensor_in_place(ts[i]) && ts[i]->nbytes > most)
            most = ts[i]->nbytes;
    void *buf = NULL;
    if (most) {
        if (most > SIZE_MAX)
            return llm_error_set(LLM_E_NOMEM, "out of memory (tensor of %llu bytes)",
                                 (unsigned long long)most);
        buf = llm_malloc((size_t)most);
        if (!buf)
            return LLM_E_NOMEM;
    }
    llm_status s = LLM_OK;
    for (size_t i = 0; i < n && !s; i++) {
        const void *p;
        s = llm_tensor_peek(f, ts[i], &p); /* checked at the first use */
        if (!s && !p) {
            s = llm_tensor_read(f, ts[i], buf);
            p = buf;
        }
        if (!s)
            s = llm_out_write(out, p, (size_t)ts[i]->nbytes);
    }
    llm_free(buf);
    return s;
}

llm_status llm_safetensors_write(struct llm_file *f, const char *path)
{
    size_t n = 0;
    struct llm_tensor **ts = llm_calloc(f->n_tensors ? f->n_tensors : 1, sizeof *ts);
    if (!ts)
        return LLM_E_NOMEM;
    llm_status s = LLM_OK;
    for (size_t i = 0; i < f->n_tensors; i++) {
        struct llm_tensor *t = &f->tensors[i];
        if (t->flags & LLM_TENSOR_AUX)
            continue;
        if (!st_dtype_name(t->type)) {
            s = llm_error_set(LLM_E_UNSUPPORTED,
                              "%s: tensor '%s': type %s cannot be written to safetensors "
                              "(f32, f16 and bf16 only)",
                              path, t->name, llm_type_name(t->type));
            llm_free(ts);
            return s;
        }
        ts[n++] = t;
    }
    qsort(ts, n, sizeof *ts, write_cmp);

    json_t *root = json_object();
    char *hdr = NULL;
    struct llm_out out;
    int opened = 0;
    if (!root) {
        s = llm_error_set(LLM_E_NOMEM, "out of memory (safetensors header)");
        goto done;
    }
    s = build_header(f, ts, n, root);
    if (s)
        goto done;
    size_t len = json_dumpb(root, NULL, 0, JSON_COMPACT);
    if (!len) {
        s = llm_error_set(LLM_E_NOMEM, "%s: cannot serialize the safetensors header", path);
        goto done;
    }
    /* Spaces up to a multiple of 8 keep the byte buffer 8-aligned. */
    size_t padded = (size_t)llm_align_up(len, 8);
    hdr = llm_malloc(padded);
    if (!hdr) {
        s = LLM_E_NOMEM;
        goto done;
    }
    json_dumpb(root, hdr, len, JSON_COMPACT);
    memset(hdr + len, ' ', padded - len);
    uint8_t le[8];
    for (int i = 0; i < 8; i++)
        le[i] = (uint8_t)((uint64_t)padded >> (8 * i));
    s = llm_out_open(&out, path);
    if (s)
        goto done;
    opened = 1;
    s = llm_out_write(&out, le, 8);
    if (!s)
        s = llm_out_write(&out, hdr, padded);
    if (!s)
        s = write_body(f, ts, n, &out);
    if (!s) {
        s = llm_out_commit(&out);
        if (!s)
            opened = 0;
    }
done:
    if (opened)
        llm_out_abort(&out);
    llm_free(hdr);
    json_decref(root);
    llm_free(ts);
    return s;
}
