/* gguf_write.c: export a struct llm_file as a GGUF v3 file that llama.cpp
 * loads (formats.md §1.1-1.3, §1.7-1.10, §2.1).
 *
 * Layout: header, metadata, tensor infos, zero padding to 32, then the
 * tensors in file order, each padded to 32, so that every offset is the
 * one llama.cpp computes (it requires the packed order). A file with no
 * weights is a tokenizer-only file: 0 tensors and no padding at the end,
 * like llama.cpp's ggml-vocab-*.gguf.
 *
 * Metadata: our schema is mapped back to GGUF keys with the types
 * llama.cpp's loader insists on (counts uint32, epsilon and rope base
 * float32, token types int32[], scores float32[]); keys kept under `gguf`
 * are written after them with their recorded or inferred types (see
 * gguf_impl.h), except those we have already written.
 *
 * Tensors: a type with a GGML twin (f32, f16, bf16, q8_0, q4_0, q4_1, i32)
 * is written byte for byte; every other type (q8_g64, nf4, fp8_e4m3, ...)
 * has no GGUF form and is converted to F16. Q/K rows are permuted when
 * hparams.rope_type differs from the pairing llama.cpp uses for the
 * architecture (Hugging Face order -> GGUF llama order). Mistral models are
 * written as architecture "llama", as llama.cpp's converter does. A Llama 3
 * rope scaling (rope_scaling.type llama3) becomes the rope_freqs.weight
 * tensor, which is how GGUF carries it; dynamic scaling and the yarn
 * beta_fast/beta_slow values have no GGUF keys and are not written.
 * write_opts: convert/type go through llm_file_convert (weight matrices
 * only, as for .llm output) and must name a type GGUF has;
 * compress_level is ignored (GGUF has no compression).
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "../common/alloc.h"
#include "../quant/quant.h"
#include "gguf_impl.h"
#include "import.h"

/* ------------------------------------------------------------------------ */
/* a growing byte buffer (errors are sticky: check once at the end) */

struct buf {
    uint8_t *p;
    size_t n, cap;
    llm_status err;
};

static void put(struct buf *b, const void *p, size_t n)
{
    if (b->err)
        return;
    if (b->n + n > b->cap) {
        size_t cap = b->cap;
        if ((b->err = llm_grow((void **)&b->p, &cap, b->n + n, 1)))
            return;
        b->cap = cap;
    }
    if (n)
        memcpy(b->p + b->n, p, n);
    b->n += n;
}

static void put_u32(struct buf *b, uint32_t v)
{
    uint8_t x[4] = { (uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24) };
    put(b, x, 4);
}

static void put_u64(struct buf *b, uint64_t v)
{
    put_u32(b, (uint32_t)v);
    put_u32(b, (uint32_t)(v >> 32));
}

static void put_str(struct buf *b, const char *s, size_t n)
{
    put_u64(b, n);
    put(b, s, n);
}

/* ------------------------------------------------------------------------ */
/* metadata records */

struct kvw {
    struct buf b;
    uint64_t count;
    char **keys;          /* (nkeys) keys written, to skip their kept twins */
    size_t nkeys, cap;
    const char *name;     /* output, for messages */
};

static int written(const struct kvw *w, const char *key)
{
    for (size_t i = 0; i < w->nkeys; i++)
        if (strcmp(w->keys[i], key) == 0)
            return 1;
    return 0;
}

static void kv_begin(struct kvw *w, const char *key, uint32_t type)
{
    if (w->b.err)
        return;
    char *k = llm_strdup(key);
    if (!k || (w->b.err = llm_grow((void **)&w->keys, &w->cap, w->nkeys + 1, sizeof *w->keys))) {
        llm_free(k);
        w->b.err = LLM_E_NOMEM;
        return;
    }
    w->keys[w->nkeys++] = k;
    put_str(&w->b, key, strlen(key));
    put_u32(&w->b, type);
    w->count++;
}

static void kv_u32(struct kvw *w, const char *key, uint32_t v)
{
    kv_begin(w, key, LLM_GGUF_U32);
    put_u32(&w->b, v);
}

static void kv_f32(struct kvw *w, const char *key, float v)
{
    uint32_t u;
    memcpy(&u, &v, 4);
    kv_begin(w, key, LLM_GGUF_F32);
    put_u32(&w->b, u);
}

static void kv_bool(struct kvw *w, const char *key, int v)
{
    uint8_t x = v != 0;
    kv_begin(w, key, LLM_GGUF_BOOL);
    put(&w->b, &x, 1);
}

static void kv_str(struct kvw *w, const char *key, const char *s, size_t n)
{
    kv_begin(w, key, LLM_GGUF_STR);
    put_str(&w->b, s, n);
}

/* An array of n strings packed as bytes[offsets[i]..offsets[i+1]). */
static void kv_strings(struct kvw *w, const char *key, uint32_t n, const uint8_t *bytes,
                       const uint32_t *offsets)
{
    kv_begin(w, key, LLM_GGUF_ARR);
    put_u32(&w->b, LLM_GGUF_STR);
    put_u64(&w->b, n);
    for (uint32_t i = 0; i < n; i++)
        put_str(&w->b, (const char *)bytes + offsets[i], offsets[i + 1] - offsets[i]);
}

static void kv_array4(struct kvw *w, const char *key, uint32_t elem, uint32_t n, const void *v)
{
    kv_begin(w, key, LLM_GGUF_ARR);
    put_u32(&w->b, elem);
    put_u64(&w->b, n);
    const uint8_t *p = v;
    for (uint32_t i = 0; i < n; i++) { /* values are host floats/ints: write them LE */
        uint32_t u;
        memcpy(&u, p + 4 * (size_t)i, 4);
        put_u32(&w->b, u);
    }
}

/* hparams and tokenizer values, checked to fit their GGUF types. */
static llm_status get_u32(struct kvw *w, const struct llm_meta *m, const char *path, uint32_t *v,
                          int *have)
{
    int64_t x;
    llm_status s = llm_meta_get_i64(m, path, &x);
    *have = 0;
    if (s == LLM_E_NOTFOUND)
        return LLM_OK;
    if (s) {
        llm_error_prefix(w->name);
        return s;
    }
    if (x < 0 || x > (int64_t)UINT32_MAX)
        return llm_error_set(LLM_E_INVALID, "%s: %s = %lld does not fit a GGUF uint32", w->name,
                             path, (long long)x);
    *v = (uint32_t)x;
    *have = 1;
    return LLM_OK;
}

static llm_status get_f(struct kvw *w, const struct llm_meta *m, const char *path, double *v,
                        int *have)
{
    llm_status s = llm_meta_get_f64(m, path, v);
    *have = s == LLM_OK;
    if (s == LLM_E_NOTFOUND)
        return LLM_OK;
    if (s)
        llm_error_prefix(w->name);
    return s;
}

static llm_status get_s(struct kvw *w, const struct llm_meta *m, const char *path,
                        const struct llm_meta **v)
{
    *v = llm_meta_get(m, path);
    if (*v && (*v)->kind != LLM_META_STR) {
        const char *dummy;
        llm_status s = llm_meta_get_str(m, path, &dummy); /* for its detail */
        llm_error_prefix(w->name);
        return s ? s : LLM_E_INVALID;
    }
    return LLM_OK;
}

static llm_status get_b(struct kvw *w, const struct llm_meta *m, const char *path, int *v,
                        int *have)
{
    llm_status s = llm_meta_get_bool(m, path, v);
    *have = s == LLM_OK;
    if (s == LLM_E_NOTFOUND)
        return LLM_OK;
    if (s)
        llm_error_prefix(w->name);
    return s;
}

/* Scalar value of a kept key in GGUF type t. */
static llm_status put_scalar(struct kvw *w, const char *key, const struct llm_meta *m, uint32_t t)
{
    struct buf *b = &w->b;
    if (t == LLM_GGUF_STR) {
        if (m->kind != LLM_META_STR)
            goto bad;
        put_str(b, m->s, m->slen);
        return LLM_OK;
    }
    if (t == LLM_GGUF_BOOL) {
        if (m->kind != LLM_META_BOOL)
            goto bad;
        uint8_t x = m->i != 0;
        put(b, &x, 1);
        return LLM_OK;
    }
    if (t == LLM_GGUF_F32 || t == LLM_GGUF_F64) {
        double d;
        if (m->kind == LLM_META_FLOAT)
            d = m->f;
        else if (m->kind == LLM_META_INT)
            d = (double)m->i;
        else
            goto bad;
        if (t == LLM_GGUF_F32) {
            float f = (float)d;
            uint32_t u;
            memcpy(&u, &f, 4);
            put_u32(b, u);
        } else {
            uint64_t u;
            memcpy(&u, &d, 8);
            put_u64(b, u);
        }
        return LLM_OK;
    }
    if (m->kind != LLM_META_INT)
        goto bad;
    int64_t v = m->i;
    int ok;
    switch (t) {
    case LLM_GGUF_U8: ok = v >= 0 && v <= UINT8_MAX; break;
    case LLM_GGUF_I8: ok = v >= INT8_MIN && v <= INT8_MAX; break;
    case LLM_GGUF_U16: ok = v >= 0 && v <= UINT16_MAX; break;
    case LLM_GGUF_I16: ok = v >= INT16_MIN && v <= INT16_MAX; break;
    case LLM_GGUF_U32: ok = v >= 0 && v <= (int64_t)UINT32_MAX; break;
    case LLM_GGUF_I32: ok = v >= INT32_MIN && v <= INT32_MAX; break;
    default: ok = 1; /* u64 (bit pattern) and i64 */
    }
    if (!ok)
        return llm_error_set(LLM_E_INVALID, "%s: metadata gguf.%s: %lld does not fit a GGUF %s",
                             w->name, key, (long long)v, llm_gguf_type_name(t));
    uint8_t x[8];
    for (int i = 0; i < 8; i++)
        x[i] = (uint8_t)((uint64_t)v >> (8 * i));
    put(b, x, llm_gguf_scalar_size(t));
    return LLM_OK;
bad:
    return llm_error_set(LLM_E_INVALID, "%s: metadata gguf.%s cannot be written as GGUF %s",
                         w->name, key, llm_gguf_type_name(t));
}

/* Re-emit the keys kept under `gguf` that we have not written. */
static llm_status write_kept(struct kvw *w, const struct llm_meta *root)
{
    const struct llm_meta *map = llm_meta_get(root, "gguf");
    if (!map)
        return LLM_OK;
    if (map->kind != LLM_META_MAP)
        return llm_error_set(LLM_E_INVALID, "%s: metadata 'gguf' is not a map", w->name);
    const struct llm_meta *types = llm_meta_get(root, "source.gguf_types");
    for (size_t i = 0; i < map->n; i++) {
        const struct llm_meta *m = map->items[i];
        const char *key = m->key;
        if (written(w, key))
            continue;
        uint32_t type, elem;
        int recorded = 0;
        const struct llm_meta *rt = llm_meta_child(types, key);
        if (rt && rt->kind == LLM_META_STR && llm_gguf_parse_type_name(rt->s, &type, &elem))
            recorded = (type == LLM_GGUF_ARR) == (m->kind == LLM_META_SEQ);
        if (!recorded && llm_gguf_infer_type(m, &type, &elem) != LLM_OK)
            return llm_error_set(LLM_E_INVALID, "%s: metadata gguf.%s has no GGUF form (not a "
                                 "scalar or a list of scalars of one kind)", w->name, key);
        kv_begin(w, key, type);
        if (type != LLM_GGUF_ARR) {
            LLM_TRY(put_scalar(w, key, m, type));
            continue;
        }
        put_u32(&w->b, elem);
        put_u64(&w->b, m->n);
        for (size_t j = 0; j < m->n; j++)
            LLM_TRY(put_scalar(w, key, m->items[j], elem));
    }
    return LLM_OK;
}

/* ------------------------------------------------------------------------ */
/* tensors */

struct otensor {
    struct llm_tensor *t;  /* NULL for a tensor we generate (rope_freqs) */
    const char *name;
    enum llm_type type;    /* type written (has a GGML twin) */
    uint32_t gtype;
    uint32_t n_dims;
    int64_t ne[LLM_MAX_DIMS];
    uint64_t nbytes, offset;
    int n_head;            /* > 0: permute rows (Q/K) in groups of this many heads */
    const void *gen;       /* generated data */
    /* Phi-3's fused tensors: the rows of parts[0 .. n_parts) one after the
     * other (t is parts[0]), each part_bytes[k] long, under fused_name */
    int n_parts;
    struct llm_tensor *parts[3];
    uint64_t part_bytes[3];
    char fused_name[LLM_MAX_NAME];
};

enum { PERM_NONE, PERM_TO_NORM, PERM_TO_NEOX };

struct wctx {
    struct llm_file *f;
    const char *name;        /* output, for messages */
    const struct llm_write_opts *opts;
    struct otensor *ot;      /* (n_ot) */
    size_t n_ot;
    int perm;                /* PERM_* */
    int64_t head_count, head_count_kv;
    float *rope_freqs;       /* generated llama3 factors, or NULL */
    int phi3;                /* fuse Q/K/V and gate/up as llama.cpp's phi3 reads them */
};

/* Q/K tensors of layer N, and the number of heads their rows hold. */
static int qk_heads(const struct wctx *c, const char *name)
{
    int n = 0;
    char which = 0, rest[16] = "";
    if (sscanf(name, "blk.%d.attn_%c%15s", &n, &which, rest) != 3)
        return 0;
    if (strcmp(rest, ".weight") != 0 && strcmp(rest, ".bias") != 0)
        return 0;
    if (which == 'q')
        return (int)c->head_count;
    if (which == 'k')
        return (int)c->head_count_kv;
    return 0;
}

static llm_status plan_tensor(struct wctx *c, struct llm_tensor *t, struct otensor *o)
{
    const char *nm = c->name;
    o->t = t;
    o->name = t->name;
    o->n_dims = t->n_dims;
    memcpy(o->ne, t->ne, sizeof o->ne);
    if (strlen(t->name) > LLM_GGUF_MAX_NAME)
        return llm_error_set(LLM_E_INVALID, "%s: tensor '%s': name longer than %u bytes, which "
                             "GGUF readers refuse", nm, t->name, LLM_GGUF_MAX_NAME);
    enum llm_type type = t->type;
    const struct llm_type_traits *tr = llm_type_traits(type);
    if (!tr || (tr->is_aux && tr->ggml_type < 0))
        return llm_error_set(LLM_E_UNSUPPORTED, "%s: tensor '%s': type %s has no GGUF form", nm,
                             t->name, llm_type_name(type));
    if (tr->ggml_type < 0) { /* q8_g64, nf4, fp8...: no GGML twin */
        type = LLM_TYPE_F16;
        tr = llm_type_traits(type);
    }
    if (tr->blck > 1 && t->ne[0] % tr->blck)
        return llm_error_set(LLM_E_INVALID, "%s: tensor '%s': rows of %lld elements cannot be "
                             "stored as %s in GGUF (needs a multiple of %u)", nm, t->name,
                             (long long)t->ne[0], tr->name, tr->blck);
    o->type = type;
    o->gtype = (uint32_t)tr->ggml_type;
    LLM_TRY(llm_type_tensor_bytes(type, t->n_dims, t->ne, &o->nbytes));
    if (c->perm != PERM_NONE) {
        int heads = qk_heads(c, t->name);
        if (heads > 0) {
            int64_t rows = t->n_dims == 1 ? t->ne[0] : t->ne[1];
            if (t->n_dims > 2 || rows % heads || (rows / heads) % 2)
                return llm_error_set(LLM_E_INVALID, "%s: tensor '%s': %lld rows do not split into "
                                     "%d heads of even size", nm, t->name, (long long)rows, heads);
            if (t->n_dims == 1 && type != LLM_TYPE_F32 && type != LLM_TYPE_F16 &&
                type != LLM_TYPE_BF16)
                return llm_error_set(LLM_E_UNSUPPORTED, "%s: tensor '%s': cannot reorder a %s "
                                     "bias", nm, t->name, llm_type_name(type));
            o->n_head = heads;
        }
    }
    return LLM_OK;
}

/* Llama 3 frequency factors (formats.md §1.10), one per rotary pair. */
static llm_status llama3_freqs(struct wctx *c, int64_t *n_out)
{
    const struct llm_meta *m = c->f->meta;
    int64_t dim = 0, ctx = 8192;
    double base = 10000, factor = 8, lo = 1, hi = 4;
    if (llm_meta_get_i64(m, "hparams.head_dim", &dim) || dim < 2 || dim > (1 << 20) || dim % 2)
        return llm_error_set(LLM_E_INVALID, "%s: llama3 rope scaling needs an even "
                             "hparams.head_dim", c->name);
    llm_meta_get_f64(m, "hparams.rope_theta", &base);
    llm_meta_get_f64(m, "hparams.rope_scaling.factor", &factor);
    llm_meta_get_f64(m, "hparams.rope_scaling.low_freq_factor", &lo);
    llm_meta_get_f64(m, "hparams.rope_scaling.high_freq_factor", &hi);
    llm_meta_get_i64(m, "hparams.rope_scaling.original_context_length", &ctx);
    if (!(hi > lo) || factor <= 0 || ctx <= 0)
        return llm_error_set(LLM_E_INVALID, "%s: bad llama3 rope scaling parameters", c->name);
    int64_t n = dim / 2;
    c->rope_freqs = llm_malloc((size_t)n * sizeof *c->rope_freqs);
    if (!c->rope_freqs)
        return LLM_E_NOMEM;
    const double pi = 3.14159265358979323846;
    for (int64_t i = 0; i < n; i++) {
        double freq = 1.0 / pow(base, (double)(2 * i) / (double)dim);
        double wavelen = 2 * pi / freq, r;
        if (wavelen < (double)ctx / hi) {
            r = 1;
        } else if (wavelen > (double)ctx / lo) {
            r = factor;
        } else {
            double smooth = ((double)ctx / wavelen - lo) / (hi - lo);
            r = 1 / ((1 - smooth) / factor + smooth);
        }
        c->rope_freqs[i] = (float)r;
    }
    *n_out = n;
    return LLM_OK;
}

/* Phi-3: llama.cpp reads Q, K and V as one attn_qkv and the gate and up
 * projections as one ffn_up (gate first), which import split (gguf.c).
 * 1: t leads a fused tensor (planned into o); -1: t is a later part of one
 * (skipped); 0: t is written alone. */
static int plan_fused(struct wctx *c, struct llm_tensor *t, struct otensor *o, llm_status *st)
{
    /* the fused name, then its parts in order */
    static const char *const groups[2][4] = { { "attn_qkv", "attn_q", "attn_k", "attn_v" },
                                              { "ffn_up", "ffn_gate", "ffn_up", NULL } };
    int layer, end = 0, g = -1, k = -1;
    char what[16], name[LLM_MAX_NAME];
    *st = LLM_OK;
    if (!c->phi3 || sscanf(t->name, "blk.%d.%15[a-z_].weight%n", &layer, what, &end) != 2 ||
        t->name[end] != '\0')
        return 0;
    for (int gi = 0; gi < 2 && g < 0; gi++)
        for (int ki = 0; ki < 3 && groups[gi][1 + ki] && g < 0; ki++)
            if (!strcmp(what, groups[gi][1 + ki]))
                g = gi, k = ki;
    if (g < 0)
        return 0;
    if (k > 0)
        return -1;
    memset(o, 0, sizeof *o);
    for (int jj = 0; jj < 3 && groups[g][1 + jj]; jj++) {
        snprintf(name, sizeof name, "blk.%d.%s.weight", layer, groups[g][1 + jj]);
        struct llm_tensor *p = llm_file_find(c->f, name);
        struct otensor po;
        memset(&po, 0, sizeof po);
        if (!p) {
            *st = llm_error_set(LLM_E_INVALID, "%s: tensor '%s' is missing (phi3 fuses it into "
                                "'blk.%d.%s.weight')", c->name, name, layer, groups[g][0]);
            return 1;
        }
        if ((*st = plan_tensor(c, p, &po)))
            return 1;
        if (p->n_dims != 2 || (jj && (po.type != o->type || po.ne[0] != o->ne[0]))) {
            *st = llm_error_set(LLM_E_UNSUPPORTED, "%s: tensor '%s' (%s, %lld wide) cannot join "
                                "'%s' (%s, %lld wide) in phi3's fused 'blk.%d.%s.weight', one "
                                "tensor of one type for llama.cpp", c->name, name,
                                llm_type_name(po.type), (long long)po.ne[0],
                                jj ? o->parts[0]->name : "", llm_type_name(o->type),
                                (long long)o->ne[0], layer, groups[g][0]);
            return 1;
        }
        if (jj == 0) {
            *o = po;
        } else {
            o->ne[1] += po.ne[1];
            o->nbytes += po.nbytes;
        }
        o->parts[jj] = p;
        o->part_bytes[jj] = po.nbytes;
        o->n_parts = jj + 1;
    }
    snprintf(o->fused_name, sizeof o->fused_name, "blk.%d.%s.weight", layer, groups[g][0]);
    o->name = o->fused_name;
    return 1;
}

static llm_status plan_tensors(struct wctx *c)
{
    struct llm_file *f = c->f;
    int64_t n_freqs = 0;
    const char *rs = NULL;
    llm_meta_get_str(f->meta, "hparams.rope_scaling.type", &rs);
    size_t n_weights = 0;
    for (size_t i = 0; i < f->n_tensors; i++)
        n_weights += !(f->tensors[i].flags & LLM_TENSOR_AUX);
    if (n_weights && rs && strcmp(rs, "llama3") == 0 && !llm_file_find(f, "rope_freqs.weight"))
        LLM_TRY(llama3_freqs(c, &n_freqs));
    c->ot = llm_calloc(n_weights + 2, sizeof *c->ot);
    if (!c->ot)
        return LLM_E_NOMEM;
    if (n_freqs) {
        struct otensor *o = &c->ot[c->n_ot++];
        o->name = "rope_freqs.weight";
        o->type = LLM_TYPE_F32;
        o->gtype = 0;
        o->n_dims = 1;
        o->ne[0] = n_freqs;
        o->ne[1] = o->ne[2] = o->ne[3] = 1;
        o->nbytes = (uint64_t)n_freqs * 4;
        o->gen = c->rope_freqs;
    }
    const char *arch = NULL;
    c->phi3 = llm_meta_get_str(f->meta, "architecture", &arch) == LLM_OK && !strcmp(arch, "phi3");
    llm_error_clear();
    for (size_t i = 0; i < f->n_tensors; i++) {
        if (f->tensors[i].flags & LLM_TENSOR_AUX)
            continue;
        llm_status st;
        int r = plan_fused(c, &f->tensors[i], &c->ot[c->n_ot], &st);
        if (st)
            return st;
        if (r > 0)
            c->n_ot++;
        else if (r == 0)
            LLM_TRY(plan_tensor(c, &f->tensors[i], &c->ot[c->n_ot++]));
    }
    /* llama.cpp b4748's phi3 and qwen2moe need output.weight: a tied model
       writes its embedding twice */
    struct llm_tensor *emb = llm_file_find(f, "token_embd.weight");
    if ((c->phi3 || !strcmp(arch, "qwen2moe")) && emb && !llm_file_find(f, "output.weight")) {
        LLM_TRY(plan_tensor(c, emb, &c->ot[c->n_ot]));
        c->ot[c->n_ot++].name = "output.weight";
    }
    uint64_t off = 0;
    for (size_t i = 0; i < c->n_ot; i++) {
        c->ot[i].offset = off;
        off += llm_align_up(c->ot[i].nbytes, LLM_GGUF_DEFAULT_ALIGNMENT);
    }
    return LLM_OK;
}

/* llama_ftype of the most common type among the weight matrices, the way
 * llama.cpp guesses it (by tensor count). */
static int guess_file_type(const struct wctx *c)
{
    size_t count[LLM_TYPE_COUNT_] = { 0 }, best = 0;
    enum llm_type bt = LLM_TYPE_F32;
    for (size_t i = 0; i < c->n_ot; i++) {
        const struct otensor *o = &c->ot[i];
        if (o->n_dims < 2 || o->type == LLM_TYPE_I32)
            continue;
        if (++count[o->type] > best) {
            best = count[o->type];
            bt = o->type;
        }
    }
    switch (bt) {
    case LLM_TYPE_F16: return 1;
    case LLM_TYPE_Q4_0: return 2;
    case LLM_TYPE_Q4_1: return 3;
    case LLM_TYPE_Q8_0: return 7;
    case LLM_TYPE_BF16: return 32;
    default: return 0;
    }
}

/* ------------------------------------------------------------------------ */
/* metadata */

static llm_status write_meta(struct wctx *c, struct kvw *w)
{
    const struct llm_meta *m = c->f->meta;
    const struct llm_meta *arch_node, *name, *sv;
    LLM_TRY(get_s(w, m, "architecture", &arch_node));
    const char *arch = arch_node ? arch_node->s : "none";
    /* GGUF calls Mistral and Mixtral "llama" (Mixtral: with experts) */
    if (strcmp(arch, "mistral") == 0 || strcmp(arch, "mixtral") == 0)
        arch = "llama";
    kv_str(w, "general.architecture", arch, strlen(arch));
    LLM_TRY(get_s(w, m, "name", &name));
    if (name)
        kv_str(w, "general.name", name->s, name->slen);

    /* hyper-parameters */
    static const struct { const char *path, *suffix; } counts[] = {
        { "hparams.vocab_size", "vocab_size" },
        { "hparams.context_length", "context_length" },
        { "hparams.embedding_length", "embedding_length" },
        { "hparams.block_count", "block_count" },
        { "hparams.feed_forward_length", "feed_forward_length" },
        { "hparams.head_count", "attention.head_count" },
        { "hparams.head_count_kv", "attention.head_count_kv" },
        { "hparams.rope_dim", "rope.dimension_count" },
        { "hparams.sliding_window", "attention.sliding_window" },
        { "hparams.sliding_window_pattern", "attention.sliding_window_pattern" },
        { "hparams.expert_count", "expert_count" },
        { "hparams.expert_used_count", "expert_used_count" },
        { "hparams.expert_feed_forward_length", "expert_feed_forward_length" },
        { "hparams.expert_shared_feed_forward_length", "expert_shared_feed_forward_length" },
    };
    char key[512];
    uint32_t v, emb = 0, heads = 0, hd = 0;
    int have, have_emb = 0, have_heads = 0, have_hd = 0;
    /* llama.cpp's llama with experts (Mixtral) reads their width from
       feed_forward_length */
    uint32_t eff = 0;
    int have_eff = 0;
    if (!strcmp(arch, "llama"))
        LLM_TRY(get_u32(w, m, "hparams.expert_feed_forward_length", &eff, &have_eff));
    for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++) {
        LLM_TRY(get_u32(w, m, counts[i].path, &v, &have));
        if (!have)
            continue;
        if (have_eff && !strcmp(counts[i].suffix, "expert_feed_forward_length"))
            continue;
        if (have_eff && !strcmp(counts[i].suffix, "feed_forward_length"))
            v = eff;
        snprintf(key, sizeof key, "%s.%s", arch, counts[i].suffix);
        kv_u32(w, key, v);
    }
    /* llama.cpp b4748 refuses a phi3 file without a window: a window of
       the whole context is none */
    LLM_TRY(get_u32(w, m, "hparams.sliding_window", &v, &have));
    if (!strcmp(arch, "phi3") && (!have || v == 0)) {
        LLM_TRY(get_u32(w, m, "hparams.context_length", &v, &have));
        snprintf(key, sizeof key, "%s.attention.sliding_window", arch);
        if (have)
            kv_u32(w, key, v);
    }
    int norm;
    LLM_TRY(get_b(w, m, "hparams.expert_weights_norm", &norm, &have));
    if (have) {
        snprintf(key, sizeof key, "%s.expert_weights_norm", arch);
        kv_bool(w, key, norm);
    }
    LLM_TRY(get_u32(w, m, "hparams.embedding_length", &emb, &have_emb));
    LLM_TRY(get_u32(w, m, "hparams.head_count", &heads, &have_heads));
    LLM_TRY(get_u32(w, m, "hparams.head_dim", &hd, &have_hd));
    /* llama.cpp's default head size is n_embd / n_head: say so only when
       it differs */
    if (have_hd && !(have_emb && have_heads && heads && emb / heads == hd)) {
        snprintf(key, sizeof key, "%s.attention.key_length", arch);
        kv_u32(w, key, hd);
        snprintf(key, sizeof key, "%s.attention.value_length", arch);
        kv_u32(w, key, hd);
    }
    double d;
    LLM_TRY(get_f(w, m, "hparams.rms_norm_eps", &d, &have));
    if (have) {
        snprintf(key, sizeof key, "%s.attention.layer_norm_rms_epsilon", arch);
        kv_f32(w, key, (float)d);
    }
    LLM_TRY(get_f(w, m, "hparams.rope_theta", &d, &have));
    if (have) {
        snprintf(key, sizeof key, "%s.rope.freq_base", arch);
        kv_f32(w, key, (float)d);
    }
    static const char *const floats[][2] = {
        { "hparams.rope_theta_swa", "rope.freq_base_swa" },
        { "hparams.attn_softcap", "attn_logit_softcapping" },
        { "hparams.final_softcap", "final_logit_softcapping" },
    };
    for (size_t i = 0; i < sizeof floats / sizeof floats[0]; i++) {
        LLM_TRY(get_f(w, m, floats[i][0], &d, &have));
        if (have) {
            snprintf(key, sizeof key, "%s.%s", arch, floats[i][1]);
            kv_f32(w, key, (float)d);
        }
    }
    LLM_TRY(get_s(w, m, "hparams.rope_scaling.type", &sv));
    /* llama.cpp knows the scaling types none, linear, yarn and longrope and
       aborts on any other name. llama3 scaling travels as the rope_freqs
       tensor; dynamic (NTK) scaling has no GGUF form and is left out, as
       llama.cpp's converter does. */
    if (!sv || strcmp(sv->s, "none") == 0 || strcmp(sv->s, "linear") == 0 ||
        strcmp(sv->s, "yarn") == 0 || strcmp(sv->s, "longrope") == 0) {
        if (sv) {
            snprintf(key, sizeof key, "%s.rope.scaling.type", arch);
            kv_str(w, key, sv->s, sv->slen);
        }
        LLM_TRY(get_f(w, m, "hparams.rope_scaling.factor", &d, &have));
        /* LongRoPE's scaling is its factor tensors: llama.cpp would read a
         * factor as linear scaling on top of them (1/factor on every
         * position), so its converter writes none, nor does this */
        if (have && !(sv && !strcmp(sv->s, "longrope"))) {
            snprintf(key, sizeof key, "%s.rope.scaling.factor", arch);
            kv_f32(w, key, (float)d);
        }
        LLM_TRY(get_u32(w, m, "hparams.rope_scaling.original_context_length", &v, &have));
        if (have) {
            snprintf(key, sizeof key, "%s.rope.scaling.original_context_length", arch);
            kv_u32(w, key, v);
        }
        LLM_TRY(get_f(w, m, "hparams.rope_scaling.attn_factor", &d, &have));
        if (have) {
            snprintf(key, sizeof key, "%s.rope.scaling.attn_factor", arch);
            kv_f32(w, key, (float)d);
        }
    }

    /* file-level facts */
    if (c->n_ot) {
        int quant = 0;
        for (size_t i = 0; i < c->n_ot; i++)
            quant |= llm_type_traits(c->ot[i].type)->is_quant;
        kv_u32(w, "general.file_type", (uint32_t)guess_file_type(c));
        if (quant)
            kv_u32(w, "general.quantization_version", 2);
    }
    kv_u32(w, "general.alignment", LLM_GGUF_DEFAULT_ALIGNMENT);

    /* tokenizer */
    struct llm_vocab_view vv;
    llm_status s = llm_file_vocab(c->f, &vv);
    if (s && s != LLM_E_NOTFOUND) {
        if (strncmp(llm_error_detail(s), c->f->path, strlen(c->f->path)) != 0)
            llm_error_prefix(c->f->path);
        return s;
    }
    int has_vocab = s == LLM_OK;
    LLM_TRY(get_s(w, m, "tokenizer.model", &sv));
    if (sv)
        kv_str(w, "tokenizer.ggml.model", sv->s, sv->slen);
    else if (has_vocab || c->n_ot) /* llama.cpp requires the key */
        kv_str(w, "tokenizer.ggml.model", !has_vocab ? "no_vocab" : vv.n_merges ? "gpt2" : "llama",
               !has_vocab ? 8 : vv.n_merges ? 4 : 5);
    LLM_TRY(get_s(w, m, "tokenizer.pre", &sv));
    if (sv)
        kv_str(w, "tokenizer.ggml.pre", sv->s, sv->slen);
    if (has_vocab) {
        kv_strings(w, "tokenizer.ggml.tokens", vv.n_tokens, vv.bytes, vv.offsets);
        if (vv.scores)
            kv_array4(w, "tokenizer.ggml.scores", LLM_GGUF_F32, vv.n_tokens, vv.scores);
        if (vv.types)
            kv_array4(w, "tokenizer.ggml.token_type", LLM_GGUF_I32, vv.n_tokens, vv.types);
        if (vv.n_merges)
            kv_strings(w, "tokenizer.ggml.merges", vv.n_merges, vv.merge_bytes, vv.merge_offsets);
    }
    static const struct { const char *path, *key; } ids[] = {
        { "tokenizer.bos_id", "tokenizer.ggml.bos_token_id" },
        { "tokenizer.eos_id", "tokenizer.ggml.eos_token_id" },
        { "tokenizer.unk_id", "tokenizer.ggml.unknown_token_id" },
        { "tokenizer.sep_id", "tokenizer.ggml.seperator_token_id" },
        { "tokenizer.pad_id", "tokenizer.ggml.padding_token_id" },
        { "tokenizer.eot_id", "tokenizer.ggml.eot_token_id" },
    };
    for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++) {
        LLM_TRY(get_u32(w, m, ids[i].path, &v, &have));
        if (have)
            kv_u32(w, ids[i].key, v);
    }
    static const struct { const char *path, *key; } flags[] = {
        { "tokenizer.add_bos", "tokenizer.ggml.add_bos_token" },
        { "tokenizer.add_eos", "tokenizer.ggml.add_eos_token" },
        { "tokenizer.add_space_prefix", "tokenizer.ggml.add_space_prefix" },
    };
    for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++) {
        int b;
        LLM_TRY(get_b(w, m, flags[i].path, &b, &have));
        if (have)
            kv_bool(w, flags[i].key, b);
    }
    LLM_TRY(get_s(w, m, "chat_template", &sv));
    if (sv)
        kv_str(w, "tokenizer.chat_template", sv->s, sv->slen);
    LLM_TRY(write_kept(w, m));
    return w->b.err;
}

/* ------------------------------------------------------------------------ */
/* data */

/* Reorder the rows (or, for a bias, the elements) of each head between
 * the GGUF llama pairing (2i, 2i+1) and the Hugging Face one (i, i+hd/2):
 * GGUF row h*hd + 2i + j holds HF row h*hd + j*hd/2 + i (formats.md §1.10). */
static void permute_rows(const struct otensor *o, int perm, const uint8_t *src, uint8_t *dst)
{
    int64_t rows = o->n_dims == 1 ? o->ne[0] : o->ne[1];
    size_t unit = (size_t)(o->nbytes / (uint64_t)rows); // bytes of one row (or element)
    int64_t hd = rows / o->n_head;
    for (int64_t h = 0; h < o->n_head; h++)
        for (int64_t i = 0; i < hd / 2; i++)
            for (int64_t j = 0; j < 2; j++) {
                int64_t norm = h * hd + 2 * i + j, neox = h * hd + j * (hd / 2) + i;
                int64_t to = perm == PERM_TO_NORM ? norm : neox;
                int64_t from = perm == PERM_TO_NORM ? neox : norm;
                memcpy(dst + (size_t)to * unit, src + (size_t)from * unit, unit);
            }
}

static llm_status write_tensor(struct wctx *c, struct llm_out *out, const struct otensor *o)
{
    for (int k = 0; k < o->n_parts; k++) {
        struct otensor part = *o;
        part.n_parts = 0;
        part.t = o->parts[k];
        part.nbytes = o->part_bytes[k];
        part.ne[1] = o->parts[k]->ne[1];
        LLM_TRY(write_tensor(c, out, &part));
    }
    if (o->n_parts)
        return LLM_OK;
    struct llm_tensor *t = o->t;
    if (!t)
        return llm_out_write(out, o->gen, (size_t)o->nbytes);
    if (t->nbytes > SIZE_MAX || o->nbytes > SIZE_MAX)
        return llm_error_set(LLM_E_NOMEM, "%s: tensor '%s' is too large", c->name, t->name);
    void *in = NULL, *conv = NULL, *perm = NULL;
    const void *where;
    llm_status s = llm_tensor_peek(c->f, t, &where); /* checked at the first use */
    const uint8_t *p = where;
    if (s)
        return s;
    if (!p) { /* compressed, filled or decoded: one tensor in memory at a time */
        in = llm_malloc((size_t)t->nbytes);
        if (!in)
            return LLM_E_NOMEM;
        if ((s = llm_tensor_read(c->f, t, in)))
            goto out;
        p = in;
    }
    if (o->type != t->type) {
        conv = llm_malloc((size_t)o->nbytes);
        if (!conv) {
            s = LLM_E_NOMEM;
            goto out;
        }
        s = llm_convert_rows(t->type, p, o->type, conv, t->ne[0], llm_tensor_nrows(t));
        if (s) {
            char pre[LLM_MAX_NAME + 1024];
            snprintf(pre, sizeof pre, "%s: tensor '%s'", c->name, t->name);
            llm_error_prefix(pre);
            goto out;
        }
        p = conv;
    }
    if (o->n_head > 0) {
        perm = llm_malloc((size_t)o->nbytes);
        if (!perm) {
            s = LLM_E_NOMEM;
            goto out;
        }
        permute_rows(o, c->perm, p, perm);
        p = perm;
    }
    s = llm_out_write(out, p, (size_t)o->nbytes);
out:
    llm_free(in);
    llm_free(conv);
    llm_free(perm);
    return s;
}

/* ------------------------------------------------------------------------ */
/* entry point */

static llm_status choose_perm(struct wctx *c)
{
    const struct llm_meta *m = c->f->meta;
    const char *arch = NULL, *have = NULL;
    llm_meta_get_str(m, "architecture", &arch);
    llm_meta_get_str(m, "hparams.rope_type", &have);
    const char *want = llm_gguf_arch_rope_type(arch);
    c->perm = PERM_NONE;
    if (!want || !have || strcmp(want, have) == 0)
        return LLM_OK;
    if (strcmp(have, "norm") != 0 && strcmp(have, "neox") != 0)
        return llm_error_set(LLM_E_INVALID, "%s: unknown hparams.rope_type '%s'", c->name, have);
    if (llm_meta_get_i64(m, "hparams.head_count", &c->head_count) || c->head_count <= 0)
        return llm_error_set(LLM_E_INVALID, "%s: reordering Q/K rows for GGUF needs "
                             "hparams.head_count", c->name);
    if (llm_meta_get_i64(m, "hparams.head_count_kv", &c->head_count_kv) || c->head_count_kv <= 0)
        c->head_count_kv = c->head_count;
    int64_t rd = 0, hd = 0;
    if (!llm_meta_get_i64(m, "hparams.rope_dim", &rd) &&
        !llm_meta_get_i64(m, "hparams.head_dim", &hd) && rd != hd)
        return llm_error_set(LLM_E_UNSUPPORTED, "%s: cannot reorder Q/K rows for a partial "
                             "rotary embedding (rope_dim %lld, head_dim %lld)", c->name,
                             (long long)rd, (long long)hd);
    c->perm = strcmp(want, "norm") == 0 ? PERM_TO_NORM : PERM_TO_NEOX;
    return LLM_OK;
}

llm_status llm_gguf_write(struct llm_file *f, const char *path, const struct llm_write_opts *opts)
{
    struct wctx c = { 0 };
    c.f = f;
    c.name = strcmp(path, "-") == 0 ? "<stdout>" : path;
    c.opts = opts;
    struct kvw w = { 0 };
    w.name = c.name;
    struct buf hdr = { 0 };
    llm_status s;
    if (opts && opts->convert) {
        /* the same rule as the .llm writer: weight matrices only */
        const struct llm_type_traits *tr = llm_type_traits(opts->type);
        if (!tr || tr->ggml_type < 0)
            return llm_error_set(LLM_E_INVALID, "%s: type %s has no GGUF form (GGUF output takes f32, "
                                 "f16, bf16, q8_0, q4_0 or q4_1)", c.name, llm_type_name(opts->type));
        LLM_TRY(llm_file_convert(f, opts->type));
    }
    if ((s = choose_perm(&c)) || (s = plan_tensors(&c)) || (s = write_meta(&c, &w)))
        goto out;

    put_u32(&hdr, LLM_GGUF_MAGIC);
    put_u32(&hdr, LLM_GGUF_VERSION);
    put_u64(&hdr, c.n_ot);
    put_u64(&hdr, w.count);
    put(&hdr, w.b.p, w.b.n);
    for (size_t i = 0; i < c.n_ot; i++) {
        const struct otensor *o = &c.ot[i];
        put_str(&hdr, o->name, strlen(o->name));
        put_u32(&hdr, o->n_dims);
        for (uint32_t d = 0; d < o->n_dims; d++)
            put_u64(&hdr, (uint64_t)o->ne[d]);
        put_u32(&hdr, o->gtype);
        put_u64(&hdr, o->offset);
    }
    if ((s = hdr.err))
        goto out;

    struct llm_out out;
    if ((s = llm_out_open(&out, path)))
        goto out;
    s = llm_out_write(&out, hdr.p, hdr.n);
    if (!s && c.n_ot)
        s = llm_out_pad(&out, LLM_GGUF_DEFAULT_ALIGNMENT);
    for (size_t i = 0; i < c.n_ot && !s; i++) {
        s = write_tensor(&c, &out, &c.ot[i]);
        if (!s)
            s = llm_out_pad(&out, LLM_GGUF_DEFAULT_ALIGNMENT);
    }
    if (s)
        llm_out_abort(&out);
    else
        s = llm_out_commit(&out);
out:
    for (size_t i = 0; i < w.nkeys; i++)
        llm_free(w.keys[i]);
    llm_free(w.keys);
    llm_free(w.b.p);
    llm_free(hdr.p);
    llm_free(c.ot);
    llm_free(c.rope_freqs);
    return s;
}
