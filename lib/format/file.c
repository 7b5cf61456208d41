/* file.c: struct llm_file: tensors, owned buffers, mappings, tokenizer arrays. */
#include "file.h"

#include <stdio.h>
#include <string.h>
#include <xxhash.h>
#include <zstd.h>

#include "../common/alloc.h"
#include "../quant/quant.h"

llm_status llm_file_new(struct llm_file **out, const char *path, const char *format)
{
    struct llm_file *f = llm_calloc(1, sizeof *f);
    if (!f)
        return LLM_E_NOMEM;
    f->meta = llm_meta_new(LLM_META_MAP);
    f->path = llm_strdup(path ? path : "-");
    f->format = llm_strdup(format ? format : "");
    if (!f->meta || !f->path || !f->format) {
        llm_file_free(f);
        return LLM_E_NOMEM;
    }
    *out = f;
    return LLM_OK;
}

void llm_file_free(struct llm_file *f)
{
    if (!f)
        return;
    for (size_t i = 0; i < f->n_tensors; i++)
        llm_free(f->tensors[i].name);
    llm_free(f->tensors);
    llm_free(f->name_index);
    for (size_t i = 0; i < f->n_owned; i++)
        llm_free(f->owned[i]);
    llm_free(f->owned);
    for (size_t i = 0; i < f->n_maps; i++)
        llm_map_close(&f->maps[i]);
    llm_free(f->maps);
    llm_meta_free(f->meta);
    llm_free(f->path);
    llm_free(f->format);
    llm_free(f);
}

llm_status llm_file_own(struct llm_file *f, void *p)
{
    llm_status s = llm_grow((void **)&f->owned, &f->cap_owned, f->n_owned + 1, sizeof *f->owned);
    if (s) {
        llm_free(p);
        return s;
    }
    f->owned[f->n_owned++] = p;
    return LLM_OK;
}

llm_status llm_file_add_map(struct llm_file *f, struct llm_map *m)
{
    llm_status s = llm_grow((void **)&f->maps, &f->cap_maps, f->n_maps + 1, sizeof *f->maps);
    if (s) {
        llm_map_close(m);
        return s;
    }
    f->maps[f->n_maps++] = *m;
    memset(m, 0, sizeof *m);
    return LLM_OK;
}

int llm_file_drop_pages(struct llm_file *f, const void *p, size_t n)
{
    for (size_t i = 0; i < f->n_maps; i++)
        if (llm_map_drop(&f->maps[i], p, n))
            return 1;
    return 0;
}

/* Names are found through a hash table, so that a file with a hundred
 * thousand tensors (a crafted one, say) loads in linear time. */
static size_t name_hash(const char *s)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (; *s; s++)
        h = (h ^ (uint8_t)*s) * 1099511628211ull;
    return (size_t)h;
}

static void index_insert(struct llm_file *f, size_t i)
{
    size_t mask = f->cap_index - 1, k = name_hash(f->tensors[i].name) & mask;
    while (f->name_index[k])
        k = (k + 1) & mask;
    f->name_index[k] = (uint32_t)(i + 1);
}

static llm_status index_rebuild(struct llm_file *f, size_t cap)
{
    if (cap == f->cap_index) { /* same size: clear in place, nothing to allocate */
        memset(f->name_index, 0, cap * sizeof *f->name_index);
    } else {
        uint32_t *t = llm_calloc(cap, sizeof *t);
        if (!t)
            return LLM_E_NOMEM;
        llm_free(f->name_index);
        f->name_index = t;
        f->cap_index = cap;
    }
    for (size_t i = 0; i < f->n_tensors; i++)
        index_insert(f, i);
    return LLM_OK;
}

struct llm_tensor *llm_file_find(const struct llm_file *f, const char *name)
{
    if (!f->cap_index)
        return NULL;
    size_t mask = f->cap_index - 1, k = name_hash(name) & mask;
    for (; f->name_index[k]; k = (k + 1) & mask) {
        struct llm_tensor *t = &f->tensors[f->name_index[k] - 1];
        if (strcmp(t->name, name) == 0)
            return t;
    }
    return NULL;
}

void llm_file_remove(struct llm_file *f, const char *name)
{
    struct llm_tensor *t = llm_file_find(f, name);
    if (!t)
        return;
    size_t i = (size_t)(t - f->tensors);
    llm_free(t->name);
    memmove(t, t + 1, (f->n_tensors - i - 1) * sizeof *t);
    f->n_tensors--;
    /* indexes after i moved down: rebuild in place (removal is rare) */
    index_rebuild(f, f->cap_index);
}

llm_status llm_file_add_tensor(struct llm_file *f, const char *name, enum llm_type type,
                               uint32_t n_dims, const int64_t *ne, const void *data,
                               struct llm_tensor **out)
{
    size_t nlen = strlen(name);
    if (nlen == 0 || nlen >= LLM_MAX_NAME)
        return llm_error_set(LLM_E_FORMAT, "%s: tensor name of %zu bytes (1..%d allowed)", f->path,
                             nlen, LLM_MAX_NAME - 1);
    if (llm_file_find(f, name))
        return llm_error_set(LLM_E_FORMAT, "%s: duplicate tensor '%s'", f->path, name);
    struct llm_tensor t = { 0 };
    t.type = type;
    t.n_dims = n_dims;
    for (int i = 0; i < LLM_MAX_DIMS; i++)
        t.ne[i] = i < (int)n_dims ? ne[i] : 1;
    llm_status s = llm_type_tensor_bytes(type, n_dims, t.ne, &t.nbytes);
    if (s) {
        char pre[LLM_MAX_NAME + 512];
        snprintf(pre, sizeof pre, "%s: tensor '%s'", f->path, name);
        llm_error_prefix(pre);
        return s;
    }
    if (llm_type_traits(type)->is_aux)
        t.flags |= LLM_TENSOR_AUX;
    t.data = data;
    t.name = llm_strdup(name);
    if (!t.name)
        return LLM_E_NOMEM;
    s = llm_grow((void **)&f->tensors, &f->cap_tensors, f->n_tensors + 1, sizeof *f->tensors);
    if (s) {
        llm_free(t.name);
        return s;
    }
    if (f->n_tensors >= UINT32_MAX - 1) {
        llm_free(t.name);
        return llm_error_set(LLM_E_FORMAT, "%s: too many tensors", f->path);
    }
    if ((f->n_tensors + 1) * 2 > f->cap_index) {
        s = index_rebuild(f, f->cap_index ? f->cap_index * 2 : 64);
        if (s) {
            llm_free(t.name);
            return s;
        }
    }
    f->tensors[f->n_tensors] = t;
    if (out)
        *out = &f->tensors[f->n_tensors];
    f->n_tensors++;
    index_insert(f, f->n_tensors - 1);
    return LLM_OK;
}

int64_t llm_tensor_nelements(const struct llm_tensor *t)
{
    return t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3];
}

int64_t llm_tensor_nrows(const struct llm_tensor *t)
{
    return t->ne[1] * t->ne[2] * t->ne[3];
}

/* ---- the bytes of a tensor, checked at their first use ----------------
 *
 * Every reader of tensor data comes through here, so that no tool uses (or
 * copies into a new file, where a new checksum would launder them) bytes
 * whose stored checksum does not match: llm-convert, llm-quantize and
 * llm-bench read damaged weights with exit 0 when only llm-run checked. The
 * same pass counts NaN and infinite weights, which make a model's output
 * meaningless. A tensor is checked once (t->checked); a .llm tensor's data
 * pointer is set only then, so that nothing reads it unchecked. */

#define CHECK_CHUNK ((uint64_t)1 << 20) /* bytes hashed and scanned at once: in cache for both */

static int scans_values(const struct llm_file *f, const struct llm_tensor *t)
{
    const struct llm_type_traits *tr = llm_type_traits(t->type);
    return f->check_finite != LLM_FINITE_IGNORE && tr && !tr->is_aux &&
           !(t->flags & LLM_TENSOR_AUX);
}

/* Check the nbytes of t at p: against its stored checksum when `sum`, and
 * its values as f->check_finite says. */
static llm_status check_bytes(struct llm_file *f, struct llm_tensor *t, const void *p, int sum)
{
    int fin = scans_values(f, t);
    if (!sum && !fin)
        return LLM_OK;
    uint64_t hash = 0, bad = 0;
    int64_t first = -1;
    if (!fin) {
        hash = XXH3_64bits(p, (size_t)t->nbytes);
    } else {
        int64_t ne0 = t->ne[0], rows = llm_tensor_nrows(t);
        uint64_t rb = llm_type_row_bytes(t->type, (uint64_t)ne0);
        uint64_t per = rb >= CHECK_CHUNK ? 1 : CHECK_CHUNK / rb;
        XXH3_state_t *st = NULL;
        if (sum && (!(st = XXH3_createState()) || XXH3_64bits_reset(st) != XXH_OK)) {
            XXH3_freeState(st);
            return llm_error_set(LLM_E_NOMEM, "%s: tensor '%s': no memory to hash it", f->path,
                                 t->name);
        }
        llm_status s = LLM_OK;
        for (int64_t r = 0; r < rows && !s; r += (int64_t)per) {
            int64_t k = rows - r < (int64_t)per ? rows - r : (int64_t)per, at;
            const uint8_t *q = (const uint8_t *)p + (uint64_t)r * rb;
            uint64_t c;
            if (st)
                XXH3_64bits_update(st, q, (size_t)(rb * (uint64_t)k));
            s = llm_rows_nonfinite(t->type, q, ne0, k, &c, &at);
            if (c && first < 0)
                first = r * ne0 + at;
            bad += c;
        }
        if (st)
            hash = XXH3_64bits_digest(st);
        XXH3_freeState(st);
        LLM_TRY(s);
    }
    if (sum && hash != t->checksum)
        return llm_error_set(LLM_E_CHECKSUM, "%s: tensor '%s': checksum mismatch (corrupt data)",
                             f->path, t->name);
    if (bad) {
        if (!f->n_nonfinite_tensors++)
            snprintf(f->nonfinite_first, sizeof f->nonfinite_first, "%s", t->name);
        f->n_nonfinite += bad;
        if (f->check_finite == LLM_FINITE_REFUSE)
            return llm_error_set(LLM_E_FORMAT, "%s: tensor '%s': %llu NaN or infinite value%s "
                                 "(the first at element %lld): the weights are damaged",
                                 f->path, t->name, (unsigned long long)bad, bad == 1 ? "" : "s",
                                 (long long)first);
    }
    return LLM_OK;
}

llm_status llm_tensor_peek(struct llm_file *f, struct llm_tensor *t, const void **out)
{
    *out = NULL;
    if (!llm_tensor_in_place(t))
        return LLM_OK;
    const void *p = t->data ? t->data : t->stored;
    if (!t->checked) {
        int sum = f->check_sums && t->stored && p == t->stored;
        LLM_TRY(check_bytes(f, t, p, sum));
        t->checked = 1;
        t->data = p;
    }
    *out = p;
    return LLM_OK;
}

static llm_status decompress(struct llm_file *f, const struct llm_tensor *t, void *dst)
{
    size_t n = ZSTD_decompress(dst, t->nbytes, t->stored, t->stored_size);
    if (ZSTD_isError(n))
        return llm_error_set(LLM_E_FORMAT, "%s: tensor '%s': zstd: %s", f->path, t->name,
                             ZSTD_getErrorName(n));
    if (n != t->nbytes)
        return llm_error_set(LLM_E_FORMAT, "%s: tensor '%s': decompressed to %zu bytes, expected %llu",
                             f->path, t->name, n, (unsigned long long)t->nbytes);
    return LLM_OK;
}

llm_status llm_tensor_read(struct llm_file *f, struct llm_tensor *t, void *dst)
{
    const void *p;
    LLM_TRY(llm_tensor_peek(f, t, &p));
    if (p) {
        memcpy(dst, p, t->nbytes);
        return LLM_OK;
    }
    int sum = 0;
    if (t->fill) {
        LLM_TRY(t->fill(t, dst, t->fill_ctx));
    } else if (t->stored && t->compression == LLM_COMPRESS_ZSTD) {
        LLM_TRY(decompress(f, t, dst));
        sum = 1; /* compressed data is always checked: it costs little beside zstd */
    } else {
        return llm_error_set(LLM_E_INVALID, "%s: tensor '%s' has no data", f->path, t->name);
    }
    if (!t->checked) {
        LLM_TRY(check_bytes(f, t, dst, sum));
        t->checked = 1;
    }
    return LLM_OK;
}

llm_status llm_tensor_bytes(struct llm_file *f, struct llm_tensor *t, const void **out)
{
    LLM_TRY(llm_tensor_peek(f, t, out));
    if (*out)
        return LLM_OK;
    if (t->nbytes > SIZE_MAX)
        return llm_error_set(LLM_E_NOMEM, "%s: tensor '%s' too large", f->path, t->name);
    void *buf = llm_malloc((size_t)t->nbytes);
    if (!buf)
        return LLM_E_NOMEM;
    llm_status s = llm_tensor_read(f, t, buf);
    if (s) {
        llm_free(buf);
        return s;
    }
    LLM_TRY(llm_file_own(f, buf));
    t->data = buf;
    t->checked = 1;
    *out = buf;
    return LLM_OK;
}

llm_status llm_tensor_check(struct llm_file *f, struct llm_tensor *t, void **scratch, size_t *cap)
{
    if (t->checked && (f->check_sums || !t->stored))
        return LLM_OK;
    if (t->stored && t->compression == LLM_COMPRESS_ZSTD) {
        if (t->nbytes > SIZE_MAX)
            return llm_error_set(LLM_E_NOMEM, "%s: tensor '%s' too large", f->path, t->name);
        if (t->nbytes > *cap) {
            llm_free(*scratch);
            *cap = 0;
            if (!(*scratch = llm_malloc((size_t)t->nbytes)))
                return LLM_E_NOMEM;
            *cap = (size_t)t->nbytes;
        }
        LLM_TRY(decompress(f, t, *scratch));
        LLM_TRY(check_bytes(f, t, *scratch, 1));
    } else if (llm_tensor_in_place(t)) {
        const void *p = t->data ? t->data : t->stored;
        LLM_TRY(check_bytes(f, t, p, t->stored && p == t->stored));
        t->data = p;
    } else {
        /* produced on demand: nothing stored to compare with */
        const void *p;
        return llm_tensor_bytes(f, t, &p);
    }
    t->checked = 1;
    return LLM_OK;
}

/* ------------------------------------------------------------------------ */
/* tokenizer arrays */

/* Pack n strings into a bytes tensor and an offsets tensor. */
static llm_status pack_strings(struct llm_file *f, const char *bytes_name, const char *off_name,
                               uint32_t n, const char *const *strs, const uint32_t *lens)
{
    uint64_t total = 0;
    for (uint32_t i = 0; i < n; i++)
        total += lens[i];
    if (total > UINT32_MAX)
        return llm_error_set(LLM_E_FORMAT, "%s: %s: more than 4 GiB of strings", f->path, bytes_name);
    uint8_t *b = llm_malloc(total ? (size_t)total : 1);
    uint32_t *off = llm_malloc(((size_t)n + 1) * sizeof *off);
    if (!b || !off) {
        llm_free(b);
        llm_free(off);
        return LLM_E_NOMEM;
    }
    uint32_t pos = 0;
    for (uint32_t i = 0; i < n; i++) {
        off[i] = pos;
        if (lens[i])
            memcpy(b + pos, strs[i], lens[i]);
        pos += lens[i];
    }
    off[n] = pos;
    LLM_TRY(llm_file_own(f, b));
    LLM_TRY(llm_file_own(f, off));
    llm_file_remove(f, bytes_name);
    llm_file_remove(f, off_name);
    int64_t ne_b = total ? (int64_t)total : 1, ne_o = (int64_t)n + 1;
    if (!total)
        b[0] = 0; /* a zero-length tensor is not allowed: keep one unused byte */
    LLM_TRY(llm_file_add_tensor(f, bytes_name, LLM_TYPE_U8, 1, &ne_b, b, NULL));
    LLM_TRY(llm_file_add_tensor(f, off_name, LLM_TYPE_U32, 1, &ne_o, off, NULL));
    return LLM_OK;
}

llm_status llm_file_set_vocab(struct llm_file *f, uint32_t n, const char *const *tokens,
                              const uint32_t *lens, const float *scores, const int32_t *types)
{
    if (n == 0)
        return llm_error_set(LLM_E_FORMAT, "%s: empty vocabulary", f->path);
    LLM_TRY(pack_strings(f, "tokenizer.tokens", "tokenizer.token_offsets", n, tokens, lens));
    int64_t ne = n;
    llm_file_remove(f, "tokenizer.scores");
    llm_file_remove(f, "tokenizer.token_types");
    if (scores) {
        float *s = llm_malloc((size_t)n * sizeof *s);
        if (!s)
            return LLM_E_NOMEM;
        memcpy(s, scores, (size_t)n * sizeof *s);
        LLM_TRY(llm_file_own(f, s));
        LLM_TRY(llm_file_add_tensor(f, "tokenizer.scores", LLM_TYPE_F32, 1, &ne, s, NULL));
    }
    if (types) {
        int32_t *t = llm_malloc((size_t)n * sizeof *t);
        if (!t)
            return LLM_E_NOMEM;
        memcpy(t, types, (size_t)n * sizeof *t);
        LLM_TRY(llm_file_own(f, t));
        LLM_TRY(llm_file_add_tensor(f, "tokenizer.token_types", LLM_TYPE_I32, 1, &ne, t, NULL));
    }
    struct llm_tensor *sc = llm_file_find(f, "tokenizer.scores");
    if (sc)
        sc->flags |= LLM_TENSOR_AUX;
    LLM_TRY(llm_meta_set_i64(f->meta, "tokenizer.n_tokens", n));
    return LLM_OK;
}

llm_status llm_file_set_merges(struct llm_file *f, uint32_t n, const char *const *merges,
                               const uint32_t *lens)
{
    if (n == 0) {
        llm_file_remove(f, "tokenizer.merges");
        llm_file_remove(f, "tokenizer.merge_offsets");
        return LLM_OK;
    }
    return pack_strings(f, "tokenizer.merges", "tokenizer.merge_offsets", n, merges, lens);
}

static llm_status vocab_array(struct llm_file *f, const char *name, enum llm_type type,
                              uint64_t count, const void **out)
{
    struct llm_tensor *t = llm_file_find(f, name);
    if (!t)
        return LLM_E_NOTFOUND;
    if (t->type != type || t->n_dims != 1 || (count && (uint64_t)t->ne[0] != count))
        return llm_error_set(LLM_E_FORMAT, "%s: '%s' has the wrong type or size", f->path, name);
    return llm_tensor_bytes(f, t, out);
}

static llm_status check_offsets(struct llm_file *f, const char *name, const uint32_t *off,
                                uint32_t n, uint64_t nbytes)
{
    if (off[0] != 0)
        return llm_error_set(LLM_E_FORMAT, "%s: '%s' does not start at 0", f->path, name);
    for (uint32_t i = 0; i < n; i++)
        if (off[i + 1] < off[i] || off[i + 1] > nbytes)
            return llm_error_set(LLM_E_FORMAT, "%s: '%s': entry %u out of range", f->path, name, i);
    return LLM_OK;
}

llm_status llm_file_vocab(struct llm_file *f, struct llm_vocab_view *v)
{
    memset(v, 0, sizeof *v);
    struct llm_tensor *tok = llm_file_find(f, "tokenizer.tokens");
    struct llm_tensor *off = llm_file_find(f, "tokenizer.token_offsets");
    if (!tok && !off)
        return LLM_E_NOTFOUND;
    if (!tok || !off || off->ne[0] < 2)
        return llm_error_set(LLM_E_FORMAT, "%s: incomplete tokenizer arrays", f->path);
    v->n_tokens = (uint32_t)(off->ne[0] - 1);
    const void *p;
    LLM_TRY(vocab_array(f, "tokenizer.tokens", LLM_TYPE_U8, 0, &p));
    v->bytes = p;
    LLM_TRY(vocab_array(f, "tokenizer.token_offsets", LLM_TYPE_U32, 0, &p));
    v->offsets = p;
    LLM_TRY(check_offsets(f, "tokenizer.token_offsets", v->offsets, v->n_tokens, (uint64_t)tok->ne[0]));
    llm_status s = vocab_array(f, "tokenizer.scores", LLM_TYPE_F32, v->n_tokens, &p);
    if (s && s != LLM_E_NOTFOUND)
        return s;
    v->scores = s ? NULL : p;
    s = vocab_array(f, "tokenizer.token_types", LLM_TYPE_I32, v->n_tokens, &p);
    if (s && s != LLM_E_NOTFOUND)
        return s;
    v->types = s ? NULL : p;
    struct llm_tensor *mb = llm_file_find(f, "tokenizer.merges");
    struct llm_tensor *mo = llm_file_find(f, "tokenizer.merge_offsets");
    if (mb || mo) {
        if (!mb || !mo || mo->ne[0] < 2)
            return llm_error_set(LLM_E_FORMAT, "%s: incomplete merge arrays", f->path);
        v->n_merges = (uint32_t)(mo->ne[0] - 1);
        LLM_TRY(vocab_array(f, "tokenizer.merges", LLM_TYPE_U8, 0, &p));
        v->merge_bytes = p;
        LLM_TRY(vocab_array(f, "tokenizer.merge_offsets", LLM_TYPE_U32, 0, &p));
        v->merge_offsets = p;
        LLM_TRY(check_offsets(f, "tokenizer.merge_offsets", v->merge_offsets, v->n_merges,
                              (uint64_t)mb->ne[0]));
    }
    return LLM_OK;
}

void llm_file_totals(const struct llm_file *f, uint64_t *params, uint64_t *bytes)
{
    *params = *bytes = 0;
    for (size_t i = 0; i < f->n_tensors; i++) {
        const struct llm_tensor *t = &f->tensors[i];
        if (t->flags & LLM_TENSOR_AUX)
            continue;
        *params += (uint64_t)llm_tensor_nelements(t);
        *bytes += t->nbytes;
    }
}
