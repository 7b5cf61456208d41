/* gguf.c: GGUF v2/v3 reader (formats.md §1.1-1.10, §2.1).
 *
 * The file is read in two passes. The first walks the header, every
 * metadata record and every tensor info, checking each length and count
 * against the bytes left, and records where things are; nothing sized by
 * the file is allocated before the bytes it describes are known to exist.
 * The second builds the struct llm_file: metadata mapped to our schema
 * (unmapped keys kept under `gguf`), the vocabulary into the tokenizer
 * arrays, and the tensors (zero-copy when their type is one we keep,
 * decoded on demand otherwise).
 */
#include <stdio.h>
#include <string.h>

#include "../common/alloc.h"
#include "../common/fp16.h"
#include "../quant/ggml_quants.h"
#include "../quant/quant.h"
#include "gguf_impl.h"
#include "import.h"

/* ------------------------------------------------------------------------ */
/* shared with the writer */

static const uint8_t scalar_sizes[LLM_GGUF_NTYPES_] = {
    [LLM_GGUF_U8] = 1, [LLM_GGUF_I8] = 1,  [LLM_GGUF_U16] = 2, [LLM_GGUF_I16] = 2,
    [LLM_GGUF_U32] = 4, [LLM_GGUF_I32] = 4, [LLM_GGUF_F32] = 4, [LLM_GGUF_BOOL] = 1,
    [LLM_GGUF_U64] = 8, [LLM_GGUF_I64] = 8, [LLM_GGUF_F64] = 8,
};

static const char *const type_names[LLM_GGUF_NTYPES_] = {
    "u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "str", "arr", "u64", "i64", "f64",
};

unsigned llm_gguf_scalar_size(uint32_t t)
{
    return t < LLM_GGUF_NTYPES_ ? scalar_sizes[t] : 0;
}

const char *llm_gguf_type_name(uint32_t t)
{
    return t < LLM_GGUF_NTYPES_ ? type_names[t] : NULL;
}

static uint32_t infer_int(int64_t v)
{
    if (v >= 0)
        return v <= (int64_t)UINT32_MAX ? LLM_GGUF_U32 : LLM_GGUF_U64;
    return v >= INT32_MIN ? LLM_GGUF_I32 : LLM_GGUF_I64;
}

static llm_status infer_scalar(const struct llm_meta *m, uint32_t *type)
{
    switch (m->kind) {
    case LLM_META_BOOL: *type = LLM_GGUF_BOOL; return LLM_OK;
    case LLM_META_STR: *type = LLM_GGUF_STR; return LLM_OK;
    /* float32 whether or not the node is marked f32: a YAML round trip
       loses the mark, and GGUF float metadata is float32 almost always */
    case LLM_META_FLOAT: *type = LLM_GGUF_F32; return LLM_OK;
    case LLM_META_INT: *type = infer_int(m->i); return LLM_OK;
    default: return LLM_E_INVALID;
    }
}

llm_status llm_gguf_infer_type(const struct llm_meta *m, uint32_t *type, uint32_t *elem)
{
    *elem = 0;
    if (m->kind != LLM_META_SEQ)
        return infer_scalar(m, type);
    *type = LLM_GGUF_ARR;
    *elem = LLM_GGUF_I32; /* an empty array: gguf-py's type for ints */
    if (m->n == 0)
        return LLM_OK;
    enum llm_meta_kind k = m->items[0]->kind;
    int64_t lo = 0, hi = 0;
    for (size_t i = 0; i < m->n; i++) {
        const struct llm_meta *it = m->items[i];
        if (it->kind != k)
            return LLM_E_INVALID;
        if (k == LLM_META_INT) {
            lo = i == 0 || it->i < lo ? it->i : lo;
            hi = i == 0 || it->i > hi ? it->i : hi;
        }
    }
    switch (k) {
    case LLM_META_BOOL: *elem = LLM_GGUF_BOOL; return LLM_OK;
    case LLM_META_STR: *elem = LLM_GGUF_STR; return LLM_OK;
    case LLM_META_FLOAT: *elem = LLM_GGUF_F32; return LLM_OK;
    case LLM_META_INT:
        if (lo >= INT32_MIN && hi <= INT32_MAX)
            *elem = LLM_GGUF_I32;
        else if (lo >= 0 && hi <= (int64_t)UINT32_MAX)
            *elem = LLM_GGUF_U32;
        else
            *elem = lo >= 0 ? LLM_GGUF_U64 : LLM_GGUF_I64;
        return LLM_OK;
    default: return LLM_E_INVALID;
    }
}

int llm_gguf_parse_type_name(const char *s, uint32_t *type, uint32_t *elem)
{
    size_t n = strlen(s);
    int arr = n > 2 && strcmp(s + n - 2, "[]") == 0;
    if (arr)
        n -= 2;
    for (uint32_t t = 0; t < LLM_GGUF_NTYPES_; t++) {
        if (t == LLM_GGUF_ARR || strlen(type_names[t]) != n || strncmp(s, type_names[t], n) != 0)
            continue;
        *type = arr ? LLM_GGUF_ARR : t;
        *elem = arr ? t : 0;
        return 1;
    }
    return 0;
}

const char *llm_gguf_arch_rope_type(const char *arch)
{
    /* llama.cpp llama_model_rope_type() at c392e509; "mistral" is how our
       Hugging Face importer names Mistral models, which GGUF files call
       "llama"; qwen3 is neox in the llama.cpp versions that know it */
    static const char *const norm[] = {
        "llama", "mistral", "deci", "baichuan", "starcoder", "plamo", "orion", "internlm2",
        "minicpm", "xverse", "command-r", "cohere2", "olmo", "arctic", "deepseek",
        "deepseek2", "chatglm", "granite", "granitemoe", "chameleon",
    };
    static const char *const neox[] = {
        "falcon", "grok", "dbrx", "bert", "nomic-bert", "stablelm", "bitnet", "qwen",
        "qwen2", "qwen2moe", "qwen3", "qwen3moe", "olmo2", "olmoe", "phi2", "phi3", "phimoe", "gemma", "gemma2", "gemma3",
        "starcoder2", "openelm", "gptneox", "codeshell", "nemotron", "exaone", "minicpm3",
    };
    if (!arch)
        return NULL;
    for (size_t i = 0; i < sizeof norm / sizeof norm[0]; i++)
        if (strcmp(arch, norm[i]) == 0)
            return "norm";
    for (size_t i = 0; i < sizeof neox / sizeof neox[0]; i++)
        if (strcmp(arch, neox[i]) == 0)
            return "neox";
    return NULL;
}

/* ------------------------------------------------------------------------ */
/* bounded reads */

struct rd {
    const uint8_t *p;
    size_t size, pos;
    const char *name; /* the file, for messages */
    char what[320];   /* what is being read, for messages */
};

static llm_status truncated(const struct rd *r)
{
    return llm_error_set(LLM_E_FORMAT, "%s: %s: truncated (at byte %zu of %zu)", r->name, r->what,
                         r->pos, r->size);
}

static int avail(const struct rd *r, uint64_t n)
{
    return n <= (uint64_t)(r->size - r->pos);
}

static uint32_t le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t le64(const uint8_t *p)
{
    return (uint64_t)le32(p) | (uint64_t)le32(p + 4) << 32;
}

static llm_status rd_u32(struct rd *r, uint32_t *v)
{
    if (!avail(r, 4))
        return truncated(r);
    *v = le32(r->p + r->pos);
    r->pos += 4;
    return LLM_OK;
}

static llm_status rd_u64(struct rd *r, uint64_t *v)
{
    if (!avail(r, 8))
        return truncated(r);
    *v = le64(r->p + r->pos);
    r->pos += 8;
    return LLM_OK;
}

/* A gguf_string: uint64 length, then the bytes. */
static llm_status rd_str(struct rd *r, const uint8_t **s, uint64_t *len)
{
    LLM_TRY(rd_u64(r, len));
    if (!avail(r, *len))
        return truncated(r);
    *s = r->p + r->pos;
    r->pos += (size_t)*len;
    return LLM_OK;
}

/* Describe a key or name for messages: printable ASCII as is, anything
 * else as '?', at most 96 bytes. */
static void shown(char *buf, size_t n, const uint8_t *s, uint64_t len)
{
    size_t k = 0;
    for (uint64_t i = 0; i < len && k + 4 < n && i < 96; i++)
        buf[k++] = s[i] >= 0x20 && s[i] < 0x7f ? (char)s[i] : '?';
    if (len > 96 && k + 4 < n) {
        memcpy(buf + k, "...", 3);
        k += 3;
    }
    buf[k] = 0;
}

/* ------------------------------------------------------------------------ */
/* a set of byte strings, to find duplicate keys and tensor names in
 * O(n) (a quadratic scan would let a crafted file stall the reader) */

struct strset {
    size_t *slot; /* (cap) 1-based entry index, 0 = empty */
    size_t cap;
};

static uint64_t fnv1a(const uint8_t *s, uint64_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (uint64_t i = 0; i < n; i++)
        h = (h ^ s[i]) * 1099511628211ull;
    return h;
}

static llm_status strset_init(struct strset *set, size_t n)
{
    size_t cap = 16;
    while (cap < 2 * n)
        cap *= 2;
    set->slot = llm_calloc(cap, sizeof *set->slot);
    set->cap = cap;
    return set->slot ? LLM_OK : LLM_E_NOMEM;
}

/* Insert entry `idx` (strings looked up through strs/lens); returns the
 * 1-based index of an equal entry already there, or 0. */
static size_t strset_add(struct strset *set, const uint8_t *const *strs, const uint64_t *lens,
                         size_t idx)
{
    size_t mask = set->cap - 1, h = (size_t)fnv1a(strs[idx], lens[idx]) & mask;
    for (;; h = (h + 1) & mask) {
        size_t e = set->slot[h];
        if (!e) {
            set->slot[h] = idx + 1;
            return 0;
        }
        if (lens[e - 1] == lens[idx] && memcmp(strs[e - 1], strs[idx], lens[idx]) == 0)
            return e;
    }
}

static void strset_free(struct strset *set)
{
    llm_free(set->slot);
    set->slot = NULL;
}

/* ------------------------------------------------------------------------ */
/* pass 1: the layout */

struct kv {
    const char *key;      /* NUL-terminated copy (in the key arena) */
    uint32_t type;        /* LLM_GGUF_* */
    uint32_t etype;       /* arrays: element type */
    uint64_t count;       /* arrays: elements */
    const uint8_t *val;   /* the value (arrays: the first element) */
    int used;             /* mapped to our schema */
};

struct tinfo {
    char name[LLM_MAX_NAME];
    uint32_t n_dims;
    int64_t ne[LLM_MAX_DIMS];
    uint32_t gtype;
    uint64_t offset; /* relative to the data section */
    uint64_t nbytes;
};

struct gguf {
    struct rd r;
    uint32_t version;
    uint64_t n_kv, n_tensors;
    struct kv *kv;        /* (n_kv) */
    char *keys;           /* arena of the NUL-terminated keys */
    struct tinfo *ti;     /* (n_tensors) */
    uint32_t alignment;
    uint64_t data_offset;
    const struct llm_import_opts *opts;
    struct llm_file *f;
    const char *arch;     /* general.architecture, NUL-terminated, or NULL */
    uint32_t n_tokens;    /* tokenizer.ggml.tokens entries (0: none) */
};

static llm_status scan_value(struct gguf *g, struct kv *kv)
{
    struct rd *r = &g->r;
    if (kv->type == LLM_GGUF_STR) {
        const uint8_t *s;
        uint64_t n;
        kv->val = r->p + r->pos;
        return rd_str(r, &s, &n);
    }
    if (kv->type != LLM_GGUF_ARR) {
        unsigned sz = llm_gguf_scalar_size(kv->type);
        if (!sz)
            return llm_error_set(LLM_E_FORMAT, "%s: %s: unknown value type %u", r->name, r->what,
                                 kv->type);
        if (!avail(r, sz))
            return truncated(r);
        kv->val = r->p + r->pos;
        r->pos += sz;
        return LLM_OK;
    }
    LLM_TRY(rd_u32(r, &kv->etype));
    LLM_TRY(rd_u64(r, &kv->count));
    kv->val = r->p + r->pos;
    if (kv->etype == LLM_GGUF_ARR)
        return llm_error_set(LLM_E_FORMAT, "%s: %s: arrays of arrays are not supported "
                             "(llama.cpp refuses them too)", r->name, r->what);
    if (kv->etype == LLM_GGUF_STR) {
        /* every string takes at least its 8-byte length */
        if (kv->count > (r->size - r->pos) / 8)
            return llm_error_set(LLM_E_FORMAT, "%s: %s: array of %llu strings does not fit in "
                                 "the file", r->name, r->what, (unsigned long long)kv->count);
        for (uint64_t i = 0; i < kv->count; i++) {
            const uint8_t *s;
            uint64_t n;
            LLM_TRY(rd_str(r, &s, &n));
        }
        return LLM_OK;
    }
    unsigned sz = llm_gguf_scalar_size(kv->etype);
    if (!sz)
        return llm_error_set(LLM_E_FORMAT, "%s: %s: unknown array element type %u", r->name,
                             r->what, kv->etype);
    uint64_t bytes;
    if (!llm_mul_ok(kv->count, sz, &bytes) || !avail(r, bytes))
        return llm_error_set(LLM_E_FORMAT, "%s: %s: array of %llu %s values does not fit in the "
                             "file", r->name, r->what, (unsigned long long)kv->count,
                             llm_gguf_type_name(kv->etype));
    r->pos += (size_t)bytes;
    return LLM_OK;
}

static llm_status scan_kvs(struct gguf *g)
{
    struct rd *r = &g->r;
    /* a record takes at least 8 (key length) + 1 (key) + 4 (type) + 1 bytes */
    if (g->n_kv > (r->size - r->pos) / 14)
        return llm_error_set(LLM_E_FORMAT, "%s: %llu metadata records cannot fit in %zu bytes",
                             r->name, (unsigned long long)g->n_kv, r->size);
    size_t n = (size_t)g->n_kv;
    g->kv = llm_calloc(n ? n : 1, sizeof *g->kv);
    const uint8_t **kp = llm_calloc(n ? n : 1, sizeof *kp);
    uint64_t *kl = llm_calloc(n ? n : 1, sizeof *kl);
    struct strset set = { 0 };
    llm_status s = LLM_E_NOMEM;
    if (!g->kv || !kp || !kl || strset_init(&set, n))
        goto out;
    uint64_t arena = 0;
    for (size_t i = 0; i < n; i++) {
        snprintf(r->what, sizeof r->what, "metadata record %zu", i);
        if ((s = rd_str(r, &kp[i], &kl[i])))
            goto out;
        char key[128];
        shown(key, sizeof key, kp[i], kl[i]);
        if (kl[i] == 0 || kl[i] > LLM_GGUF_MAX_KEY || memchr(kp[i], 0, (size_t)kl[i])) {
            s = llm_error_set(LLM_E_FORMAT, "%s: metadata record %zu: bad key '%s' (%llu bytes)",
                              r->name, i, key, (unsigned long long)kl[i]);
            goto out;
        }
        size_t dup = strset_add(&set, kp, kl, i);
        if (dup) {
            s = llm_error_set(LLM_E_FORMAT, "%s: duplicate metadata key '%s'", r->name, key);
            goto out;
        }
        snprintf(r->what, sizeof r->what, "key '%s'", key);
        if ((s = rd_u32(r, &g->kv[i].type)) || (s = scan_value(g, &g->kv[i])))
            goto out;
        arena += kl[i] + 1;
    }
    s = LLM_E_NOMEM;
    g->keys = llm_malloc(arena ? (size_t)arena : 1);
    if (!g->keys)
        goto out;
    char *k = g->keys;
    for (size_t i = 0; i < n; i++) {
        memcpy(k, kp[i], (size_t)kl[i]);
        k[kl[i]] = 0;
        g->kv[i].key = k;
        k += kl[i] + 1;
    }
    s = LLM_OK;
out:
    llm_free(kp);
    llm_free(kl);
    strset_free(&set);
    return s;
}

static struct kv *find_kv(struct gguf *g, const char *key)
{
    for (size_t i = 0; i < g->n_kv; i++)
        if (strcmp(g->kv[i].key, key) == 0)
            return &g->kv[i];
    return NULL;
}

static llm_status scan_tensor_infos(struct gguf *g)
{
    struct rd *r = &g->r;
    /* an info takes at least 8 + 1 (name) + 4 (n_dims) + 8 (ne) + 4 + 8 bytes */
    if (g->n_tensors > (r->size - r->pos) / 33)
        return llm_error_set(LLM_E_FORMAT, "%s: %llu tensor infos cannot fit in %zu bytes",
                             r->name, (unsigned long long)g->n_tensors, r->size);
    size_t n = (size_t)g->n_tensors;
    g->ti = llm_calloc(n ? n : 1, sizeof *g->ti);
    const uint8_t **np = llm_calloc(n ? n : 1, sizeof *np);
    uint64_t *nl = llm_calloc(n ? n : 1, sizeof *nl);
    struct strset set = { 0 };
    llm_status s = LLM_E_NOMEM;
    if (!g->ti || !np || !nl || strset_init(&set, n))
        goto out;
    for (size_t i = 0; i < n; i++) {
        struct tinfo *t = &g->ti[i];
        snprintf(r->what, sizeof r->what, "tensor info %zu", i);
        if ((s = rd_str(r, &np[i], &nl[i])))
            goto out;
        char shown_name[128];
        shown(shown_name, sizeof shown_name, np[i], nl[i]);
        if (nl[i] == 0 || nl[i] >= LLM_MAX_NAME || memchr(np[i], 0, (size_t)nl[i])) {
            s = llm_error_set(LLM_E_FORMAT, "%s: tensor info %zu: bad name '%s' (%llu bytes)",
                              r->name, i, shown_name, (unsigned long long)nl[i]);
            goto out;
        }
        memcpy(t->name, np[i], (size_t)nl[i]);
        t->name[nl[i]] = 0;
        if (strset_add(&set, np, nl, i)) {
            s = llm_error_set(LLM_E_FORMAT, "%s: duplicate tensor '%s'", r->name, t->name);
            goto out;
        }
        snprintf(r->what, sizeof r->what, "tensor '%s'", t->name);
        if ((s = rd_u32(r, &t->n_dims)))
            goto out;
        if (t->n_dims < 1 || t->n_dims > LLM_MAX_DIMS) {
            s = llm_error_set(LLM_E_FORMAT, "%s: tensor '%s': %u dimensions (1..%d allowed)",
                              r->name, t->name, t->n_dims, LLM_MAX_DIMS);
            goto out;
        }
        for (uint32_t d = 0; d < LLM_MAX_DIMS; d++)
            t->ne[d] = 1;
        for (uint32_t d = 0; d < t->n_dims; d++) {
            uint64_t v;
            if ((s = rd_u64(r, &v)))
                goto out;
            if (v == 0 || v > INT64_MAX) {
                s = llm_error_set(LLM_E_FORMAT, "%s: tensor '%s': dimension %u is %llu", r->name,
                                  t->name, d, (unsigned long long)v);
                goto out;
            }
            t->ne[d] = (int64_t)v;
        }
        if ((s = rd_u32(r, &t->gtype)) || (s = rd_u64(r, &t->offset)))
            goto out;
    }
    s = LLM_OK;
out:
    llm_free(np);
    llm_free(nl);
    strset_free(&set);
    return s;
}

/* Sizes, types and places of the tensors, all checked against the file. */
static llm_status check_tensors(struct gguf *g)
{
    const char *name = g->r.name;
    for (size_t i = 0; i < g->n_tensors; i++) {
        struct tinfo *t = &g->ti[i];
        const struct llm_ggml_type_info *tt = llm_ggml_type_info(t->gtype);
        if (!tt)
            return llm_error_set(LLM_E_FORMAT, "%s: tensor '%s': unknown GGML type %u", name,
                                 t->name, t->gtype);
        if ((uint64_t)t->ne[0] % tt->blck)
            return llm_error_set(LLM_E_FORMAT, "%s: tensor '%s': row of %lld elements is not a "
                                 "multiple of the %s block (%u)", name, t->name,
                                 (long long)t->ne[0], tt->name, tt->blck);
        uint64_t elems = (uint64_t)t->ne[0], rows = 1;
        for (uint32_t d = 1; d < LLM_MAX_DIMS; d++)
            if (!llm_mul_ok(rows, (uint64_t)t->ne[d], &rows) ||
                !llm_mul_ok(elems, (uint64_t)t->ne[d], &elems))
                goto overflow;
        /* our shapes are exact in a double: at most 2^53 elements */
        if (elems > ((uint64_t)1 << 53))
            goto overflow;
        uint64_t row_bytes = llm_ggml_row_bytes(t->gtype, (uint64_t)t->ne[0]);
        if (!row_bytes || !llm_mul_ok(row_bytes, rows, &t->nbytes))
            goto overflow;
        if (t->offset % g->alignment)
            return llm_error_set(LLM_E_FORMAT, "%s: tensor '%s': offset %llu is not a multiple of "
                                 "the alignment %u", name, t->name,
                                 (unsigned long long)t->offset, g->alignment);
        uint64_t start, end;
        if (!llm_add_ok(g->data_offset, t->offset, &start) ||
            !llm_add_ok(start, t->nbytes, &end) || end > g->r.size)
            return llm_error_set(LLM_E_FORMAT, "%s: tensor '%s': data (%llu bytes at offset %llu) "
                                 "runs past the end of the file (%zu bytes)", name, t->name,
                                 (unsigned long long)t->nbytes, (unsigned long long)t->offset,
                                 g->r.size);
        if (llm_type_from_ggml(t->gtype) < 0 && !tt->can_decode)
            return llm_error_set(LLM_E_UNSUPPORTED, "%s: tensor '%s': GGML type %s (%u) is not "
                                 "supported", name, t->name, tt->name, t->gtype);
        continue;
    overflow:
        return llm_error_set(LLM_E_FORMAT, "%s: tensor '%s': shape %lld x %lld x %lld x %lld is "
                             "too large", name, t->name, (long long)t->ne[0], (long long)t->ne[1],
                             (long long)t->ne[2], (long long)t->ne[3]);
    }
    return LLM_OK;
}

static llm_status scan(struct gguf *g)
{
    struct rd *r = &g->r;
    snprintf(r->what, sizeof r->what, "header");
    if (r->size < 4 || le32(r->p) != LLM_GGUF_MAGIC)
        return llm_error_set(LLM_E_FORMAT, "%s: not a GGUF file (bad magic)", r->name);
    r->pos = 4;
    LLM_TRY(rd_u32(r, &g->version));
    if (g->version == 1)
        return llm_error_set(LLM_E_UNSUPPORTED, "%s: GGUF version 1 is not supported (convert it "
                             "to v3 with a newer gguf tool)", r->name);
    if (g->version == 0x02000000u || g->version == 0x03000000u)
        return llm_error_set(LLM_E_UNSUPPORTED, "%s: big-endian GGUF files are not supported",
                             r->name);
    if (g->version != 2 && g->version != 3)
        return llm_error_set(LLM_E_FORMAT, "%s: unknown GGUF version %u (2 and 3 are supported)",
                             r->name, g->version);
    LLM_TRY(rd_u64(r, &g->n_tensors));
    LLM_TRY(rd_u64(r, &g->n_kv));
    LLM_TRY(scan_kvs(g));
    LLM_TRY(scan_tensor_infos(g));

    g->alignment = LLM_GGUF_DEFAULT_ALIGNMENT;
    struct kv *al = find_kv(g, "general.alignment");
    if (al) {
        if (al->type != LLM_GGUF_U32)
            return llm_error_set(LLM_E_FORMAT, "%s: general.alignment has type %s, expected u32",
                                 r->name, llm_gguf_type_name(al->type));
        uint32_t a = le32(al->val);
        if (a == 0 || (a & (a - 1)))
            return llm_error_set(LLM_E_FORMAT, "%s: general.alignment %u is not a power of two",
                                 r->name, a);
        g->alignment = a;
        al->used = 1;
    }
    /* vocab-only files end right after the infos: no padding is required */
    g->data_offset = llm_align_up(r->pos, g->alignment);
    return check_tensors(g);
}

/* ------------------------------------------------------------------------ */
/* pass 2: metadata */

static int is_int_type(uint32_t t)
{
    return t <= LLM_GGUF_I32 || t == LLM_GGUF_U64 || t == LLM_GGUF_I64;
}

/* Integer element `i` of a validated value of integer type t, as int64
 * (u64 values above INT64_MAX keep their bit pattern). */
static int64_t int_at(uint32_t t, const uint8_t *p, uint64_t i)
{
    switch (t) {
    case LLM_GGUF_U8: return p[i];
    case LLM_GGUF_I8: return (int8_t)p[i];
    case LLM_GGUF_U16: return (uint16_t)(p[2 * i] | p[2 * i + 1] << 8);
    case LLM_GGUF_I16: return (int16_t)(uint16_t)(p[2 * i] | p[2 * i + 1] << 8);
    case LLM_GGUF_U32: return le32(p + 4 * i);
    case LLM_GGUF_I32: return (int32_t)le32(p + 4 * i);
    default: return (int64_t)le64(p + 8 * i); /* U64, I64 */
    }
}

static double float_at(uint32_t t, const uint8_t *p, uint64_t i)
{
    if (t == LLM_GGUF_F32)
        return (double)llm_bits_f32(le32(p + 4 * i));
    uint64_t u = le64(p + 8 * i);
    double d;
    memcpy(&d, &u, 8);
    return d;
}

/* String at a validated position: returns the bytes, advances *p. */
static const char *str_at(const uint8_t **p, uint64_t *len)
{
    *len = le64(*p);
    const char *s = (const char *)*p + 8;
    *p += 8 + *len;
    return s;
}

static llm_status wrong_type(struct gguf *g, const struct kv *kv, const char *want)
{
    const char *have = llm_gguf_type_name(kv->type);
    char arr[32];
    if (kv->type == LLM_GGUF_ARR) {
        snprintf(arr, sizeof arr, "%s[]", llm_gguf_type_name(kv->etype));
        have = arr;
    }
    return llm_error_set(LLM_E_FORMAT, "%s: key '%s' has type %s, expected %s", g->r.name,
                         kv->key, have, want);
}

/* A scalar integer that must be >= 0. */
static llm_status get_count(struct gguf *g, const struct kv *kv, int64_t *v)
{
    if (!is_int_type(kv->type))
        return wrong_type(g, kv, "an unsigned integer");
    *v = int_at(kv->type, kv->val, 0);
    if (*v < 0 || (kv->type == LLM_GGUF_U64 && le64(kv->val) > INT64_MAX))
        return llm_error_set(LLM_E_FORMAT, "%s: key '%s': value out of range", g->r.name, kv->key);
    return LLM_OK;
}

/* A metadata node of the value (scalars and arrays of scalars). */
static struct llm_meta *node_of(const struct kv *kv)
{
    const uint8_t *p = kv->val;
    if (kv->type != LLM_GGUF_ARR) {
        if (kv->type == LLM_GGUF_STR) {
            uint64_t n;
            const char *s = str_at(&p, &n);
            return llm_meta_new_strn(s, (size_t)n);
        }
        if (kv->type == LLM_GGUF_BOOL)
            return llm_meta_new_bool(p[0] != 0);
        if (kv->type == LLM_GGUF_F32)
            return llm_meta_new_f32((float)float_at(kv->type, p, 0));
        if (kv->type == LLM_GGUF_F64)
            return llm_meta_new_f64(float_at(kv->type, p, 0));
        return llm_meta_new_i64(int_at(kv->type, p, 0));
    }
    struct llm_meta *seq = llm_meta_new(LLM_META_SEQ);
    if (!seq)
        return NULL;
    for (uint64_t i = 0; i < kv->count; i++) {
        struct llm_meta *e;
        if (kv->etype == LLM_GGUF_STR) {
            uint64_t n;
            const char *s = str_at(&p, &n);
            e = llm_meta_new_strn(s, (size_t)n);
        } else if (kv->etype == LLM_GGUF_BOOL) {
            e = llm_meta_new_bool(p[i] != 0);
        } else if (kv->etype == LLM_GGUF_F32) {
            e = llm_meta_new_f32((float)float_at(kv->etype, p, i));
        } else if (kv->etype == LLM_GGUF_F64) {
            e = llm_meta_new_f64(float_at(kv->etype, p, i));
        } else {
            e = llm_meta_new_i64(int_at(kv->etype, p, i));
        }
        if (!e || llm_meta_push(seq, e) != LLM_OK) {
            llm_meta_free(seq);
            return NULL;
        }
    }
    return seq;
}

/* Add `node` under a key known to be new (keys are unique in the file):
 * llm_meta_put would look for it first, quadratic in the number of keys. */
static llm_status append(struct llm_meta *map, const char *key, struct llm_meta *node)
{
    if (!node)
        return LLM_E_NOMEM;
    node->key = llm_strdup(key);
    if (!node->key) {
        llm_meta_free(node);
        return LLM_E_NOMEM;
    }
    return llm_meta_push(map, node);
}

/* Keep an unmapped key under `gguf`, and its type when the writer would
 * not infer it. */
static llm_status keep(struct gguf *g, const struct kv *kv)
{
    struct llm_meta *root = g->f->meta;
    struct llm_meta *node = node_of(kv);
    if (!node)
        return LLM_E_NOMEM;
    uint32_t type, elem;
    int exact = llm_gguf_infer_type(node, &type, &elem) == LLM_OK && type == kv->type &&
                (type != LLM_GGUF_ARR || elem == kv->etype);
    struct llm_meta *map = llm_meta_get(root, "gguf");
    if (!map) {
        LLM_TRY(llm_meta_set(root, "gguf", llm_meta_new(LLM_META_MAP)));
        map = llm_meta_get(root, "gguf");
    }
    LLM_TRY(append(map, kv->key, node));
    if (exact)
        return LLM_OK;
    struct llm_meta *types = llm_meta_get(root, "source.gguf_types");
    if (!types) {
        LLM_TRY(llm_meta_set(root, "source.gguf_types", llm_meta_new(LLM_META_MAP)));
        types = llm_meta_get(root, "source.gguf_types");
    }
    char tn[16];
    if (kv->type == LLM_GGUF_ARR)
        snprintf(tn, sizeof tn, "%s[]", llm_gguf_type_name(kv->etype));
    else
        snprintf(tn, sizeof tn, "%s", llm_gguf_type_name(kv->type));
    return append(types, kv->key, llm_meta_new_strn(tn, strlen(tn)));
}

enum vkind { V_INT, V_F32, V_STR, V_BOOL };

/* `<arch>.` keys of our schema. */
static const struct { const char *suffix, *path; enum vkind kind; } arch_keys[] = {
    { "vocab_size", "hparams.vocab_size", V_INT },
    { "context_length", "hparams.context_length", V_INT },
    { "embedding_length", "hparams.embedding_length", V_INT },
    { "block_count", "hparams.block_count", V_INT },
    { "feed_forward_length", "hparams.feed_forward_length", V_INT },
    { "attention.head_count", "hparams.head_count", V_INT },
    { "attention.head_count_kv", "hparams.head_count_kv", V_INT },
    { "attention.key_length", "hparams.head_dim", V_INT },
    { "attention.sliding_window", "hparams.sliding_window", V_INT },
    { "attention.sliding_window_pattern", "hparams.sliding_window_pattern", V_INT },
    { "rope.dimension_count", "hparams.rope_dim", V_INT },
    { "attention.layer_norm_rms_epsilon", "hparams.rms_norm_eps", V_F32 },
    { "rope.freq_base", "hparams.rope_theta", V_F32 },
    { "rope.freq_base_swa", "hparams.rope_theta_swa", V_F32 },
    { "attn_logit_softcapping", "hparams.attn_softcap", V_F32 },
    { "expert_count", "hparams.expert_count", V_INT },
    { "expert_used_count", "hparams.expert_used_count", V_INT },
    { "expert_feed_forward_length", "hparams.expert_feed_forward_length", V_INT },
    { "expert_shared_feed_forward_length", "hparams.expert_shared_feed_forward_length", V_INT },
    { "expert_weights_norm", "hparams.expert_weights_norm", V_BOOL },
    { "final_logit_softcapping", "hparams.final_softcap", V_F32 },
    { "rope.scaling.type", "hparams.rope_scaling.type", V_STR },
    { "rope.scaling.factor", "hparams.rope_scaling.factor", V_F32 },
    { "rope.scaling.original_context_length", "hparams.rope_scaling.original_context_length",
      V_INT },
    { "rope.scaling.attn_factor", "hparams.rope_scaling.attn_factor", V_F32 },
};

static const struct { const char *key, *path; enum vkind kind; } plain_keys[] = {
    { "general.architecture", "architecture", V_STR },
    { "general.name", "name", V_STR },
    { "tokenizer.ggml.model", "tokenizer.model", V_STR },
    { "tokenizer.ggml.pre", "tokenizer.pre", V_STR },
    { "tokenizer.ggml.add_bos_token", "tokenizer.add_bos", V_BOOL },
    { "tokenizer.ggml.add_eos_token", "tokenizer.add_eos", V_BOOL },
    { "tokenizer.ggml.add_space_prefix", "tokenizer.add_space_prefix", V_BOOL },
    { "tokenizer.chat_template", "chat_template", V_STR },
};

/* Special token ids: mapped when they name a token, else kept as they are
 * (llama.cpp ignores an id >= n_tokens, e.g. LLAMA_TOKEN_NULL). */
static const struct { const char *key, *path; } id_keys[] = {
    { "tokenizer.ggml.bos_token_id", "tokenizer.bos_id" },
    { "tokenizer.ggml.eos_token_id", "tokenizer.eos_id" },
    { "tokenizer.ggml.unknown_token_id", "tokenizer.unk_id" },
    { "tokenizer.ggml.padding_token_id", "tokenizer.pad_id" },
    { "tokenizer.ggml.seperator_token_id", "tokenizer.sep_id" },
    { "tokenizer.ggml.eot_token_id", "tokenizer.eot_id" },
};

/* Set `path` from kv as `kind`. *done = 0 (and no error) when the value
 * has another shape we keep instead (a per-layer array for an int). */
static llm_status map_value(struct gguf *g, const struct kv *kv, const char *path,
                            enum vkind kind, int *done)
{
    struct llm_meta *root = g->f->meta;
    *done = 1;
    switch (kind) {
    case V_INT: {
        if (kv->type == LLM_GGUF_ARR && is_int_type(kv->etype)) {
            *done = 0;
            return LLM_OK;
        }
        int64_t v = 0;
        LLM_TRY(get_count(g, kv, &v));
        return llm_meta_set_i64(root, path, v);
    }
    case V_F32:
        if (kv->type != LLM_GGUF_F32 && kv->type != LLM_GGUF_F64)
            return wrong_type(g, kv, "f32");
        if (kv->type == LLM_GGUF_F64)
            return llm_meta_set_f64(root, path, float_at(kv->type, kv->val, 0));
        return llm_meta_set_f32(root, path, (float)float_at(kv->type, kv->val, 0));
    case V_STR: {
        if (kv->type != LLM_GGUF_STR)
            return wrong_type(g, kv, "str");
        const uint8_t *p = kv->val;
        uint64_t n;
        const char *s = str_at(&p, &n);
        return llm_meta_set_strn(root, path, s, (size_t)n);
    }
    case V_BOOL:
        if (kv->type != LLM_GGUF_BOOL)
            return wrong_type(g, kv, "bool");
        return llm_meta_set_bool(root, path, kv->val[0] != 0);
    }
    return LLM_OK;
}

/* The vocabulary: tokens, scores, token types, merges. */
static llm_status map_vocab(struct gguf *g)
{
    struct kv *tok = find_kv(g, "tokenizer.ggml.tokens");
    if (!tok)
        return LLM_OK;
    if (tok->type != LLM_GGUF_ARR || tok->etype != LLM_GGUF_STR)
        return wrong_type(g, tok, "str[]");
    if (tok->count == 0)
        return llm_error_set(LLM_E_FORMAT, "%s: tokenizer.ggml.tokens is empty", g->r.name);
    if (tok->count > UINT32_MAX)
        return llm_error_set(LLM_E_FORMAT, "%s: tokenizer.ggml.tokens has %llu entries",
                             g->r.name, (unsigned long long)tok->count);
    uint32_t n = (uint32_t)tok->count;
    struct kv *sc = find_kv(g, "tokenizer.ggml.scores");
    struct kv *ty = find_kv(g, "tokenizer.ggml.token_type");
    if (sc && (sc->type != LLM_GGUF_ARR ||
               (sc->etype != LLM_GGUF_F32 && sc->etype != LLM_GGUF_F64)))
        return wrong_type(g, sc, "f32[]");
    if (ty && (ty->type != LLM_GGUF_ARR || !is_int_type(ty->etype)))
        return wrong_type(g, ty, "i32[]");
    if (sc && sc->count != n)
        return llm_error_set(LLM_E_FORMAT, "%s: tokenizer.ggml.scores has %llu entries for %u "
                             "tokens", g->r.name, (unsigned long long)sc->count, n);
    if (ty && ty->count != n)
        return llm_error_set(LLM_E_FORMAT, "%s: tokenizer.ggml.token_type has %llu entries for "
                             "%u tokens", g->r.name, (unsigned long long)ty->count, n);

    const char **strs = llm_malloc((size_t)n * sizeof *strs);
    uint32_t *lens = llm_malloc((size_t)n * sizeof *lens);
    float *scores = sc ? llm_malloc((size_t)n * sizeof *scores) : NULL;
    int32_t *types = ty ? llm_malloc((size_t)n * sizeof *types) : NULL;
    llm_status s = LLM_E_NOMEM;
    if (!strs || !lens || (sc && !scores) || (ty && !types))
        goto out;
    const uint8_t *p = tok->val;
    for (uint32_t i = 0; i < n; i++) {
        uint64_t len;
        strs[i] = str_at(&p, &len);
        if (len > UINT32_MAX) {
            s = llm_error_set(LLM_E_FORMAT, "%s: token %u is %llu bytes long", g->r.name, i,
                              (unsigned long long)len);
            goto out;
        }
        lens[i] = (uint32_t)len;
    }
    for (uint32_t i = 0; sc && i < n; i++)
        scores[i] = (float)float_at(sc->etype, sc->val, i);
    for (uint32_t i = 0; ty && i < n; i++) {
        int64_t v = int_at(ty->etype, ty->val, i);
        if (v < INT32_MIN || v > INT32_MAX) {
            s = llm_error_set(LLM_E_FORMAT, "%s: token %u has type %lld", g->r.name, i,
                              (long long)v);
            goto out;
        }
        types[i] = (int32_t)v;
    }
    if ((s = llm_file_set_vocab(g->f, n, strs, lens, scores, types)))
        goto out;
    g->n_tokens = n;
    tok->used = 1;
    if (sc)
        sc->used = 1;
    if (ty)
        ty->used = 1;

    struct kv *mg = find_kv(g, "tokenizer.ggml.merges");
    if (mg) {
        if (mg->type != LLM_GGUF_ARR || mg->etype != LLM_GGUF_STR) {
            s = wrong_type(g, mg, "str[]");
            goto out;
        }
        if (mg->count > UINT32_MAX) {
            s = llm_error_set(LLM_E_FORMAT, "%s: tokenizer.ggml.merges has %llu entries",
                              g->r.name, (unsigned long long)mg->count);
            goto out;
        }
        uint32_t m = (uint32_t)mg->count;
        llm_free(strs);
        llm_free(lens);
        strs = llm_malloc((m ? m : 1) * sizeof *strs);
        lens = llm_malloc((m ? m : 1) * sizeof *lens);
        s = LLM_E_NOMEM;
        if (!strs || !lens)
            goto out;
        p = mg->val;
        for (uint32_t i = 0; i < m; i++) {
            uint64_t len;
            strs[i] = str_at(&p, &len);
            if (len > UINT32_MAX) {
                s = llm_error_set(LLM_E_FORMAT, "%s: merge %u is %llu bytes long", g->r.name, i,
                                  (unsigned long long)len);
                goto out;
            }
            lens[i] = (uint32_t)len;
        }
        if ((s = llm_file_set_merges(g->f, m, strs, lens)))
            goto out;
        mg->used = 1;
    }
    s = LLM_OK;
out:
    llm_free(strs);
    llm_free(lens);
    llm_free(scores);
    llm_free(types);
    return s;
}

static llm_status map_kv(struct gguf *g, struct kv *kv)
{
    int done = 0;
    for (size_t i = 0; i < sizeof plain_keys / sizeof plain_keys[0]; i++)
        if (strcmp(kv->key, plain_keys[i].key) == 0) {
            LLM_TRY(map_value(g, kv, plain_keys[i].path, plain_keys[i].kind, &done));
            kv->used = done;
            return LLM_OK;
        }
    for (size_t i = 0; i < sizeof id_keys / sizeof id_keys[0]; i++)
        if (strcmp(kv->key, id_keys[i].key) == 0) {
            if (!is_int_type(kv->type))
                return wrong_type(g, kv, "u32");
            int64_t v = int_at(kv->type, kv->val, 0);
            if (v >= 0 && (uint64_t)v < g->n_tokens &&
                !(kv->type == LLM_GGUF_U64 && le64(kv->val) > INT64_MAX)) {
                LLM_TRY(llm_meta_set_i64(g->f->meta, id_keys[i].path, v));
                kv->used = 1;
            }
            return LLM_OK;
        }
    size_t al = g->arch ? strlen(g->arch) : 0;
    if (al && strncmp(kv->key, g->arch, al) == 0 && kv->key[al] == '.') {
        const char *suffix = kv->key + al + 1;
        for (size_t i = 0; i < sizeof arch_keys / sizeof arch_keys[0]; i++)
            if (strcmp(suffix, arch_keys[i].suffix) == 0) {
                LLM_TRY(map_value(g, kv, arch_keys[i].path, arch_keys[i].kind, &done));
                kv->used = done;
                return LLM_OK;
            }
    }
    return LLM_OK;
}

/* Defaults llama.cpp applies when a key is absent, made explicit. */
static llm_status derive_hparams(struct gguf *g)
{
    struct llm_meta *m = g->f->meta;
    int64_t emb = 0, heads = 0, v;
    int has_emb = llm_meta_get_i64(m, "hparams.embedding_length", &emb) == LLM_OK;
    int has_heads = llm_meta_get_i64(m, "hparams.head_count", &heads) == LLM_OK;
    if (has_heads && !llm_meta_get(m, "hparams.head_count_kv"))
        LLM_TRY(llm_meta_set_i64(m, "hparams.head_count_kv", heads));
    if (has_emb && has_heads && heads > 0 && !llm_meta_get(m, "hparams.head_dim"))
        LLM_TRY(llm_meta_set_i64(m, "hparams.head_dim", emb / heads));
    if (!llm_meta_get(m, "hparams.rope_dim") && llm_meta_get_i64(m, "hparams.head_dim", &v) == LLM_OK)
        LLM_TRY(llm_meta_set_i64(m, "hparams.rope_dim", v));
    if (has_emb && !llm_meta_get(m, "hparams.rope_theta"))
        LLM_TRY(llm_meta_set_f32(m, "hparams.rope_theta", 10000.0f));
    if (g->n_tokens && !llm_meta_get(m, "hparams.vocab_size"))
        LLM_TRY(llm_meta_set_i64(m, "hparams.vocab_size", g->n_tokens));
    const char *rope = llm_gguf_arch_rope_type(g->arch);
    if (rope)
        LLM_TRY(llm_meta_set_str(m, "hparams.rope_type", rope));
    if (g->n_tensors) {
        int tied = 1;
        for (size_t i = 0; i < g->n_tensors; i++)
            if (strcmp(g->ti[i].name, "output.weight") == 0)
                tied = 0;
        LLM_TRY(llm_meta_set_bool(m, "hparams.tie_embeddings", tied));
    }
    return LLM_OK;
}

static llm_status map_meta(struct gguf *g)
{
    struct llm_meta *m = g->f->meta;
    struct kv *ar = find_kv(g, "general.architecture");
    if (ar && ar->type == LLM_GGUF_STR) {
        const uint8_t *p = ar->val;
        uint64_t n;
        const char *s = str_at(&p, &n);
        /* the arena copy of the value is not NUL-terminated: keep our own */
        LLM_TRY(llm_meta_set_strn(m, "architecture", s, (size_t)n));
        llm_meta_get_str(m, "architecture", &g->arch);
        ar->used = 1;
        if (g->arch && strlen(g->arch) != n)
            g->arch = NULL; /* a NUL inside: no key can carry this prefix */
    }
    LLM_TRY(map_vocab(g));
    /* Facts about the encoding of this file's tensors, which the writer
       recomputes for the file it writes: the file type is kept as
       provenance ("converted from a Q4_K_M file"), the others dropped. */
    struct kv *ft = find_kv(g, "general.file_type");
    if (ft && is_int_type(ft->type)) {
        LLM_TRY(llm_meta_set_i64(m, "source.gguf_file_type", int_at(ft->type, ft->val, 0)));
        ft->used = 1;
    }
    struct kv *qv = find_kv(g, "general.quantization_version");
    if (qv && is_int_type(qv->type))
        qv->used = 1;
    for (size_t i = 0; i < g->n_kv; i++) {
        struct kv *kv = &g->kv[i];
        if (kv->used)
            continue;
        llm_status s = map_kv(g, kv);
        if (s == LLM_E_NOMEM)
            return s;
        if (s) {
            /* a lower layer (metadata) may have failed without our name */
            const char *d = llm_error_detail(s);
            if (strncmp(d, g->r.name, strlen(g->r.name)) != 0)
                llm_error_prefix(g->r.name);
            return s;
        }
    }
    LLM_TRY(derive_hparams(g));
    for (size_t i = 0; i < g->n_kv; i++)
        if (!g->kv[i].used)
            LLM_TRY(keep(g, &g->kv[i]));
    LLM_TRY(llm_meta_set_str(m, "source.format", "gguf"));
    LLM_TRY(llm_meta_set_i64(m, "source.gguf_version", g->version));
    return LLM_OK;
}

/* ------------------------------------------------------------------------ */
/* pass 2: tensors */

/* Produces a tensor's bytes from its GGUF source on demand: a decode (and
 * re-encode to the target type) for GGML types we do not keep, or a plain
 * copy for kept data that is not aligned in memory. */
struct fill_ctx {
    const uint8_t *src;   /* the GGUF data */
    uint32_t gtype;       /* its GGML type */
    uint64_t src_row;     /* bytes of a source row */
    int copy;             /* same layout: copy nbytes */
    const char *path;     /* the file's name (owned by the file) */
};

static llm_status fill_tensor(const struct llm_tensor *t, void *dst, void *ctx)
{
    const struct fill_ctx *c = ctx;
    if (c->copy) {
        memcpy(dst, c->src, (size_t)t->nbytes);
        return LLM_OK;
    }
    const int64_t ne0 = t->ne[0], nrows = llm_tensor_nrows(t);
    const uint64_t out_row = llm_type_row_bytes(t->type, (uint64_t)ne0);
    float *row = llm_malloc((size_t)ne0 * sizeof *row); // (ne0)
    if (!row)
        return LLM_E_NOMEM;
    llm_status s = LLM_OK;
    uint8_t *out = dst;
    for (int64_t r = 0; r < nrows && !s; r++) {
        uint8_t *o = out + (size_t)r * out_row;
        s = llm_ggml_dequantize_row(c->gtype, c->src + (size_t)r * c->src_row, row, ne0);
        if (s)
            break;
        switch (t->type) {
        case LLM_TYPE_F32:
            memcpy(o, row, (size_t)ne0 * 4);
            break;
        case LLM_TYPE_F16:
            for (int64_t i = 0; i < ne0; i++) {
                uint16_t h = llm_fp32_to_fp16(row[i]);
                memcpy(o + 2 * i, &h, 2);
            }
            break;
        case LLM_TYPE_BF16:
            for (int64_t i = 0; i < ne0; i++) {
                uint16_t h = llm_fp32_to_bf16(row[i]);
                memcpy(o + 2 * i, &h, 2);
            }
            break;
        default:
            s = llm_quantize_row(t->type, row, o, ne0);
        }
    }
    llm_free(row);
    if (s) {
        llm_error_prefix(t->name);
        llm_error_prefix("tensor");
        llm_error_prefix(c->path);
    }
    return s;
}

/* Phi-3 files from before the window had a key: llama.cpp b4748's
 * defaults by shape, written down so that the window travels with the
 * model. */
static llm_status phi3_window(struct gguf *g)
{
    struct llm_meta *m = g->f->meta;
    const char *arch = NULL;
    int64_t v, layers = 0, ctx = 0, kv = 0;
    if (llm_meta_get_str(m, "architecture", &arch) || strcmp(arch, "phi3") ||
        !llm_meta_get_i64(m, "hparams.sliding_window", &v)) {
        llm_error_clear();
        return LLM_OK;
    }
    llm_meta_get_i64(m, "hparams.block_count", &layers);
    llm_meta_get_i64(m, "hparams.context_length", &ctx);
    llm_meta_get_i64(m, "hparams.head_count_kv", &kv);
    llm_error_clear();
    int64_t w = (layers == 32 || layers == 40) && ctx == 4096 ? 2047
              : layers == 32 && kv == 32 && ctx == 131072 ? 262144
              : layers == 40 && ctx == 131072            ? 131072
                                                         : 0;
    return w ? llm_meta_set_i64(m, "hparams.sliding_window", w) : LLM_OK;
}

/* One tensor of the file (or one part of a fused one): in place when its
 * type is ours and its bytes are aligned, else decoded on demand. */
static llm_status add_tensor(struct gguf *g, enum llm_type target, const struct tinfo *ti)
{
    struct llm_file *f = g->f;
    const uint8_t *src = g->r.p + g->data_offset + ti->offset;
    int kept = llm_type_from_ggml(ti->gtype);
    enum llm_type type = kept >= 0 ? (enum llm_type)kept : target;
    /* kept data is used in place unless a consumer could not load it
       with aligned accesses (general.alignment below 32, or a buffer
       that is not page-aligned) */
    int in_place = kept >= 0 && (uintptr_t)src % 32 == 0;
    struct llm_tensor *t;
    LLM_TRY(llm_file_add_tensor(f, ti->name, type, ti->n_dims, ti->ne, in_place ? src : NULL, &t));
    /* GGUF I32 tensors are weights, not our auxiliary int arrays */
    t->flags &= ~(uint32_t)LLM_TENSOR_AUX;
    if (in_place)
        return LLM_OK;
    struct fill_ctx *c = llm_calloc(1, sizeof *c);
    if (!c)
        return LLM_E_NOMEM;
    c->src = src;
    c->gtype = ti->gtype;
    c->src_row = llm_ggml_row_bytes(ti->gtype, (uint64_t)ti->ne[0]);
    c->copy = kept >= 0;
    c->path = f->path;
    LLM_TRY(llm_file_own(f, c));
    t->fill = fill_tensor;
    t->fill_ctx = c;
    return LLM_OK;
}

/* Phi-3's fused row counts, read once: Q, K (= V) and the feed-forward's;
 * all 0 for another architecture. */
struct fused_rows {
    int64_t q, kv, ffn;
};

static void phi3_rows(struct gguf *g, struct fused_rows *fr)
{
    const struct llm_meta *m = g->f->meta;
    const char *arch = NULL;
    memset(fr, 0, sizeof *fr);
    if (llm_meta_get_str(m, "architecture", &arch) || strcmp(arch, "phi3")) {
        llm_error_clear();
        return;
    }
    int64_t dim = 0, heads = 0, kv = 0, hd = 0;
    llm_meta_get_i64(m, "hparams.embedding_length", &dim);
    llm_meta_get_i64(m, "hparams.head_count", &heads);
    llm_meta_get_i64(m, "hparams.feed_forward_length", &fr->ffn);
    if (llm_meta_get_i64(m, "hparams.head_count_kv", &kv))
        kv = heads;
    if (llm_meta_get_i64(m, "hparams.head_dim", &hd))
        hd = heads ? dim / heads : 0;
    llm_error_clear();
    fr->q = heads * hd, fr->kv = kv * hd;
}

/* Phi-3 fuses Q, K and V into attn_qkv, and the gate and up projections
 * into ffn_up (gate first). Every other tool reads them apart, so they are
 * split here into row ranges of the same bytes: n_parts (1: not fused)
 * names and row counts. */
static llm_status fused_parts(struct gguf *g, const struct fused_rows *fr, const struct tinfo *ti,
                              char names[3][LLM_MAX_NAME], int64_t rows[3], int *n_parts)
{
    *n_parts = 1;
    int layer, end = 0;
    char what[16];
    if (!fr->q || ti->n_dims != 2 ||
        sscanf(ti->name, "blk.%d.%15[a-z_].weight%n", &layer, what, &end) != 2 ||
        ti->name[end] != '\0')
        return LLM_OK;
    static const char *const qkv[] = { "attn_q", "attn_k", "attn_v" },
                             *const gu[] = { "ffn_gate", "ffn_up" };
    const char *const *nm;
    if (!strcmp(what, "attn_qkv")) {
        rows[0] = fr->q, rows[1] = rows[2] = fr->kv;
        *n_parts = 3, nm = qkv;
    } else if (!strcmp(what, "ffn_up") && fr->ffn > 0 && ti->ne[1] == 2 * fr->ffn) {
        rows[0] = rows[1] = fr->ffn;
        *n_parts = 2, nm = gu;
    } else {
        return LLM_OK;
    }
    int64_t sum = 0;
    for (int k = 0; k < *n_parts; k++) {
        sum += rows[k];
        snprintf(names[k], LLM_MAX_NAME, "blk.%d.%s.weight", layer, nm[k]);
    }
    if (sum != ti->ne[1])
        return llm_error_set(LLM_E_FORMAT, "%s: tensor '%s': %lld rows, expected %lld (the "
                             "fused projections of the hyper-parameters)", g->r.name, ti->name,
                             (long long)ti->ne[1], (long long)sum);
    return LLM_OK;
}

static llm_status add_tensors(struct gguf *g)
{
    enum llm_type target = g->opts ? g->opts->dequant_type : LLM_TYPE_F16;
    const struct llm_type_traits *tt = llm_type_traits(target);
    if (!tt || tt->is_aux)
        return llm_error_set(LLM_E_INVALID, "%s: cannot decode tensors to type %s", g->r.name,
                             llm_type_name(target));
    struct fused_rows fr;
    phi3_rows(g, &fr);
    for (size_t i = 0; i < g->n_tensors; i++) {
        char names[3][LLM_MAX_NAME];
        int64_t rows[3];
        int n_parts;
        LLM_TRY(fused_parts(g, &fr, &g->ti[i], names, rows, &n_parts));
        int64_t row0 = 0;
        for (int k = 0; k < n_parts; row0 += rows[k], k++) {
            struct tinfo part = g->ti[i];
            if (n_parts > 1) {
                memcpy(part.name, names[k], strlen(names[k]) + 1); /* < LLM_MAX_NAME */
                part.ne[1] = rows[k];
                part.offset += (uint64_t)row0 * llm_ggml_row_bytes(part.gtype, (uint64_t)part.ne[0]);
            }
            LLM_TRY(add_tensor(g, target, &part));
        }
    }
    return LLM_OK;
}

/* ------------------------------------------------------------------------ */
/* entry points */

llm_status llm_gguf_parse(struct llm_file **out, const uint8_t *data, size_t size,
                          const char *name, const struct llm_import_opts *o)
{
    *out = NULL;
    struct gguf g = { 0 };
    g.r.p = data;
    g.r.size = data ? size : 0;
    g.r.name = name ? name : "<gguf>";
    g.opts = o;
    llm_status s = scan(&g);
    if (!s)
        s = llm_file_new(&g.f, g.r.name, "gguf");
    if (!s) {
        g.f->src_version = g.version;
        llm_file_set_checks(g.f, o);
        s = map_meta(&g);
    }
    if (!s)
        s = phi3_window(&g);
    if (!s)
        s = add_tensors(&g);
    llm_free(g.kv);
    llm_free(g.keys);
    llm_free(g.ti);
    if (s) {
        llm_file_free(g.f);
        return s;
    }
    *out = g.f;
    return LLM_OK;
}

llm_status llm_gguf_open(struct llm_file **out, const char *path, const struct llm_import_opts *o)
{
    *out = NULL;
    struct llm_map m;
    LLM_TRY(llm_model_map(&m, path));
    const char *name = strcmp(path, "-") == 0 ? "<stdin>" : path;
    struct llm_file *f;
    llm_status s = llm_gguf_parse(&f, m.data, m.size, name, o);
    if (s) {
        llm_map_close(&m);
        return s;
    }
    s = llm_file_add_map(f, &m); /* closes m on failure */
    if (s) {
        llm_file_free(f);
        return s;
    }
    *out = f;
    return LLM_OK;
}
