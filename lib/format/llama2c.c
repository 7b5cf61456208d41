/* llama2c.c: import of llama2.c checkpoints (legacy v0, version 1 and
 * version 2) and of llama2.c tokenizer.bin files.
 *
 * Layouts: reference/formats.md §4. A legacy file has no magic; it is
 * recognised only by its size matching the header exactly, so every header
 * field is checked before the size formula is trusted. fp32 weights are used
 * in place (pointers into the mapping); version 2 int8 groups carry fp32
 * scales that no llm_type keeps losslessly, so they are dequantized to f32 on
 * demand by a fill callback (memory is spent only while a tensor is written).
 */
#include <stdint.h>
#include <string.h>

#include "../common/alloc.h"
#include "../common/io.h"
#include "../common/status.h"
#include "file.h"
#include "import.h"
#include "meta.h"

#define L2C_MAGIC 0x616b3432u
#define L2C_HEADER 256  /* version 1 and 2 header bytes */
#define L2C_LEGACY_HEADER 28

/* Tensor kinds of a checkpoint, in no particular file order. */
enum l2c_kind {
    K_EMB,        /* token_embedding_table (vocab, dim) */
    K_ATT_NORM,   /* (L, dim) */
    K_WQ,         /* (L, dim, dim) */
    K_WK,         /* (L, kv_dim, dim) */
    K_WV,         /* (L, kv_dim, dim) */
    K_WO,         /* (L, dim, dim) */
    K_FFN_NORM,   /* (L, dim) */
    K_W1,         /* (L, hidden, dim) */
    K_W2,         /* (L, dim, hidden) */
    K_W3,         /* (L, hidden, dim) */
    K_FINAL_NORM, /* (dim) */
    K_FREQ,       /* legacy freq_cis_real + imag: (2, seq_len, head_size/2), unused */
    K_CLS,        /* (vocab, dim), only when not shared */
    K_COUNT
};

struct l2c_config {
    int64_t dim, hidden, n_layers, n_heads, n_kv_heads, vocab, seq_len;
    int shared;          /* classifier = token embedding */
    int version;         /* 0 = legacy */
    int64_t group_size;  /* version 2 */
};

struct l2c_layout {
    uint64_t numel[K_COUNT];  /* elements of one layer's tensor (or of the tensor) */
    uint64_t stride[K_COUNT]; /* bytes of one layer's tensor */
    uint64_t off[K_COUNT];    /* byte offset of layer 0's tensor */
    int present[K_COUNT];
    uint64_t end;             /* bytes of the whole file */
};

/* Version 2 dequantization source of one tensor. */
struct l2c_q8 {
    const int8_t *q;    /* (numel) */
    const uint8_t *s;   /* (numel / group) fp32 scales, possibly unaligned */
    uint64_t numel;
    uint64_t group;
};

static uint32_t rd_u32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static int32_t rd_i32(const uint8_t *p)
{
    uint32_t u = rd_u32(p);
    int32_t v;
    memcpy(&v, &u, sizeof v);
    return v;
}

static float rd_f32(const uint8_t *p)
{
    uint32_t u = rd_u32(p);
    float v;
    memcpy(&v, &u, sizeof v);
    return v;
}

static int is_norm(enum l2c_kind k)
{
    return k == K_ATT_NORM || k == K_FFN_NORM || k == K_FINAL_NORM;
}

static int is_per_layer(enum l2c_kind k)
{
    return k != K_EMB && k != K_FINAL_NORM && k != K_FREQ && k != K_CLS;
}

static llm_status check_config(const struct l2c_config *c, const char *name)
{
    const char *what = c->version == 0 ? "not a llama2.c checkpoint (legacy header: " :
                                         "bad llama2.c header (";
    if (c->dim <= 0 || c->hidden <= 0 || c->n_layers <= 0 || c->n_heads <= 0 ||
        c->n_kv_heads <= 0 || c->vocab <= 0 || c->seq_len <= 0)
        return llm_error_set(LLM_E_FORMAT,
                             "%s: %sdim %lld, hidden_dim %lld, n_layers %lld, n_heads %lld, "
                             "n_kv_heads %lld, vocab_size %lld, seq_len %lld must be positive)",
                             name, what, (long long)c->dim, (long long)c->hidden,
                             (long long)c->n_layers, (long long)c->n_heads,
                             (long long)c->n_kv_heads, (long long)c->vocab,
                             (long long)c->seq_len);
    LLM_CHECK(c->dim % c->n_heads == 0, LLM_E_FORMAT,
              "%s: %sdim %lld is not a multiple of n_heads %lld)", name, what,
              (long long)c->dim, (long long)c->n_heads);
    LLM_CHECK(c->n_kv_heads <= c->n_heads && c->n_heads % c->n_kv_heads == 0, LLM_E_FORMAT,
              "%s: %sn_heads %lld is not a multiple of n_kv_heads %lld)", name, what,
              (long long)c->n_heads, (long long)c->n_kv_heads);
    /* RoPE rotates pairs of a head's coordinates */
    LLM_CHECK((c->dim / c->n_heads) % 2 == 0, LLM_E_FORMAT,
              "%s: %shead size %lld is odd)", name, what, (long long)(c->dim / c->n_heads));
    return LLM_OK;
}

/* Fills numel/stride for every kind, then offsets in the given order.
 * Returns 0 on overflow. */
static int make_layout(const struct l2c_config *c, const enum l2c_kind *order, size_t n_order,
                       uint64_t header, struct l2c_layout *lay)
{
    uint64_t dim = (uint64_t)c->dim, hid = (uint64_t)c->hidden, L = (uint64_t)c->n_layers;
    uint64_t kv_dim = dim / (uint64_t)c->n_heads * (uint64_t)c->n_kv_heads;
    uint64_t head = dim / (uint64_t)c->n_heads;
    uint64_t v = (uint64_t)c->vocab, seq = (uint64_t)c->seq_len;
    int ok = 1;

    memset(lay, 0, sizeof *lay);
    ok &= llm_mul_ok(v, dim, &lay->numel[K_EMB]);
    lay->numel[K_ATT_NORM] = dim;
    ok &= llm_mul_ok(dim, dim, &lay->numel[K_WQ]);
    ok &= llm_mul_ok(kv_dim, dim, &lay->numel[K_WK]);
    lay->numel[K_WV] = lay->numel[K_WK];
    lay->numel[K_WO] = lay->numel[K_WQ];
    lay->numel[K_FFN_NORM] = dim;
    ok &= llm_mul_ok(hid, dim, &lay->numel[K_W1]);
    lay->numel[K_W2] = lay->numel[K_W1];
    lay->numel[K_W3] = lay->numel[K_W1];
    lay->numel[K_FINAL_NORM] = dim;
    ok &= llm_mul_ok(seq, head, &lay->numel[K_FREQ]); /* real and imag halves */
    lay->numel[K_CLS] = lay->numel[K_EMB];
    if (!ok)
        return 0;

    uint64_t pos = header;
    for (size_t i = 0; i < n_order; i++) {
        enum l2c_kind k = order[i];
        uint64_t n = lay->numel[k], stride, block;
        int quant = c->version == 2 && !is_norm(k);
        if (quant) {
            /* int8 values, then the tensor's fp32 group scales */
            ok &= llm_mul_ok(n / (uint64_t)c->group_size, 4, &stride);
            ok &= llm_add_ok(stride, n, &stride);
        } else {
            ok &= llm_mul_ok(n, 4, &stride);
        }
        ok &= llm_mul_ok(stride, is_per_layer(k) ? L : 1, &block);
        lay->stride[k] = stride;
        lay->off[k] = pos;
        lay->present[k] = 1;
        ok &= llm_add_ok(pos, block, &pos);
        if (!ok)
            return 0;
    }
    lay->end = pos;
    return 1;
}

static llm_status q8_fill(const struct llm_tensor *t, void *dst, void *ctx)
{
    const struct l2c_q8 *src = ctx;
    float *out = dst; /* (numel) */

    if (t->type != LLM_TYPE_F32 || t->nbytes != src->numel * 4)
        return llm_error_set(LLM_E_INVALID, "tensor '%s': fill size mismatch", t->name);
    for (uint64_t g = 0; g < src->numel / src->group; g++) {
        float d = rd_f32(src->s + g * 4);
        const int8_t *q = src->q + g * src->group;
        float *o = out + g * src->group;
        for (uint64_t j = 0; j < src->group; j++)
            o[j] = (float)q[j] * d;
    }
    return LLM_OK;
}

static const char *gguf_name(enum l2c_kind k)
{
    switch (k) {
    case K_EMB: return "token_embd";
    case K_ATT_NORM: return "attn_norm";
    case K_WQ: return "attn_q";
    case K_WK: return "attn_k";
    case K_WV: return "attn_v";
    case K_WO: return "attn_output";
    case K_FFN_NORM: return "ffn_norm";
    case K_W1: return "ffn_gate";
    case K_W2: return "ffn_down";
    case K_W3: return "ffn_up";
    case K_FINAL_NORM: return "output_norm";
    case K_CLS: return "output";
    default: return "?";
    }
}

/* ggml ne of one layer's tensor of kind k: a [out][in] matrix is {in, out}. */
static uint32_t kind_shape(const struct l2c_config *c, enum l2c_kind k, int64_t ne[2])
{
    int64_t kv_dim = c->dim / c->n_heads * c->n_kv_heads;
    switch (k) {
    case K_EMB:
    case K_CLS: ne[0] = c->dim; ne[1] = c->vocab; return 2;
    case K_WQ:
    case K_WO: ne[0] = c->dim; ne[1] = c->dim; return 2;
    case K_WK:
    case K_WV: ne[0] = c->dim; ne[1] = kv_dim; return 2;
    case K_W1:
    case K_W3: ne[0] = c->dim; ne[1] = c->hidden; return 2;
    case K_W2: ne[0] = c->hidden; ne[1] = c->dim; return 2;
    default: ne[0] = c->dim; ne[1] = 1; return 1;
    }
}

static llm_status add_one(struct llm_file *f, const struct l2c_config *c,
                          const struct l2c_layout *lay, const uint8_t *data, enum l2c_kind k,
                          int64_t layer, struct l2c_q8 *q8, size_t *n_q8)
{
    char tname[LLM_MAX_NAME];
    int64_t ne[2];
    uint32_t nd = kind_shape(c, k, ne);
    const uint8_t *p = data + lay->off[k] + (uint64_t)layer * lay->stride[k];
    int quant = c->version == 2 && !is_norm(k);
    struct llm_tensor *t;

    if (is_per_layer(k))
        snprintf(tname, sizeof tname, "blk.%lld.%s.weight", (long long)layer, gguf_name(k));
    else
        snprintf(tname, sizeof tname, "%s.weight", gguf_name(k));

    if (quant) {
        struct l2c_q8 *s = &q8[(*n_q8)++];
        s->q = (const int8_t *)p;
        s->s = p + lay->numel[k];
        s->numel = lay->numel[k];
        s->group = (uint64_t)c->group_size;
        LLM_TRY(llm_file_add_tensor(f, tname, LLM_TYPE_F32, nd, ne, NULL, &t));
        t->fill = q8_fill;
        t->fill_ctx = s;
        return LLM_OK;
    }
    if (((uintptr_t)p & 3) != 0) {
        /* a caller's buffer that is not 4-aligned: float loads need a copy */
        uint64_t nb = lay->numel[k] * 4;
        void *copy = llm_malloc((size_t)nb);
        if (!copy)
            return LLM_E_NOMEM;
        memcpy(copy, p, (size_t)nb);
        LLM_TRY(llm_file_own(f, copy));
        p = copy;
    }
    return llm_file_add_tensor(f, tname, LLM_TYPE_F32, nd, ne, p, NULL);
}

static llm_status set_meta(struct llm_file *f, const struct l2c_config *c, const char *name)
{
    struct llm_meta *m = f->meta;
    const char *base = strrchr(name, '/');
    const char *dot;
    int64_t head = c->dim / c->n_heads;

    base = base ? base + 1 : name;
    dot = strrchr(base, '.');
    LLM_TRY(llm_meta_set_str(m, "architecture", "llama"));
    LLM_TRY(llm_meta_set_strn(m, "name", base,
                              dot && dot != base ? (size_t)(dot - base) : strlen(base)));
    LLM_TRY(llm_meta_set_i64(m, "hparams.vocab_size", c->vocab));
    LLM_TRY(llm_meta_set_i64(m, "hparams.context_length", c->seq_len));
    LLM_TRY(llm_meta_set_i64(m, "hparams.embedding_length", c->dim));
    LLM_TRY(llm_meta_set_i64(m, "hparams.block_count", c->n_layers));
    LLM_TRY(llm_meta_set_i64(m, "hparams.feed_forward_length", c->hidden));
    LLM_TRY(llm_meta_set_i64(m, "hparams.head_count", c->n_heads));
    LLM_TRY(llm_meta_set_i64(m, "hparams.head_count_kv", c->n_kv_heads));
    LLM_TRY(llm_meta_set_i64(m, "hparams.head_dim", head));
    LLM_TRY(llm_meta_set_i64(m, "hparams.rope_dim", head));
    /* run.c hard-codes these */
    LLM_TRY(llm_meta_set_f32(m, "hparams.rope_theta", 10000.0f));
    LLM_TRY(llm_meta_set_f32(m, "hparams.rms_norm_eps", 1e-5f));
    LLM_TRY(llm_meta_set_str(m, "hparams.rope_type", "norm"));
    LLM_TRY(llm_meta_set_bool(m, "hparams.tie_embeddings", c->shared));
    LLM_TRY(llm_meta_set_str(m, "source.format", "llama2c"));
    LLM_TRY(llm_meta_set_str(m, "source.path", name));
    LLM_TRY(llm_meta_set_i64(m, "source.version", c->version));
    if (c->version == 2)
        LLM_TRY(llm_meta_set_i64(m, "source.group_size", c->group_size));
    return LLM_OK;
}

/* Read the header's fields into c and check them (size = the bytes there
 * are, at least the header). */
static llm_status read_config(struct l2c_config *c, const uint8_t *data, size_t size,
                              const char *name)
{
    const uint8_t *h;
    memset(c, 0, sizeof *c);
    if (size >= 8 && rd_u32(data) == L2C_MAGIC) {
        int32_t version = rd_i32(data + 4);
        LLM_CHECK(version == 1 || version == 2, LLM_E_UNSUPPORTED,
                  "%s: llama2.c checkpoint version %d is not supported (only legacy, 1 and 2)",
                  name, (int)version);
        LLM_CHECK(size >= L2C_HEADER, LLM_E_FORMAT,
                  "%s: truncated llama2.c header (%zu of %d bytes)", name, size, L2C_HEADER);
        c->version = version;
        h = data + 8;
        LLM_CHECK(data[36] <= 1, LLM_E_FORMAT, "%s: bad shared_classifier byte %u", name,
                  (unsigned)data[36]);
        c->shared = data[36];
        if (version == 2)
            c->group_size = rd_i32(data + 37); /* unaligned by design */
    } else {
        LLM_CHECK(size >= L2C_LEGACY_HEADER, LLM_E_FORMAT,
                  "%s: not a llama2.c checkpoint (%zu bytes, shorter than a header)", name,
                  size);
        h = data;
    }
    c->dim = rd_i32(h);
    c->hidden = rd_i32(h + 4);
    c->n_layers = rd_i32(h + 8);
    c->n_heads = rd_i32(h + 12);
    c->n_kv_heads = rd_i32(h + 16);
    c->vocab = rd_i32(h + 20);
    c->seq_len = rd_i32(h + 24);
    if (c->version == 0) {
        /* a negative vocab_size flags a separate classifier */
        c->shared = c->vocab > 0;
        if (c->vocab < 0)
            c->vocab = -c->vocab;
    }
    LLM_TRY(check_config(c, name));

    LLM_CHECK(c->version != 2 || c->group_size > 0, LLM_E_FORMAT,
              "%s: version 2 group size %lld is not positive", name, (long long)c->group_size);
    return LLM_OK;
}

static const enum l2c_kind legacy[] = {K_EMB, K_ATT_NORM, K_WQ, K_WK, K_WV, K_WO,
                                       K_FFN_NORM, K_W1, K_W2, K_W3, K_FINAL_NORM,
                                       K_FREQ, K_CLS};
static const enum l2c_kind v1[] = {K_ATT_NORM, K_FFN_NORM, K_FINAL_NORM, K_EMB, K_WQ,
                                   K_WK, K_WV, K_WO, K_W1, K_W2, K_W3, K_CLS};

/* Read the header into c and pick the layout that the file size matches. */
static llm_status read_header(struct l2c_config *c, struct l2c_layout *lay, const uint8_t *data,
                              size_t size, const char *name)
{
    enum l2c_kind order[K_COUNT];
    size_t n_order = 0;
    LLM_TRY(read_config(c, data, size, name));

    if (c->version == 0) {
        struct l2c_layout with, without;
        int ok_with = make_layout(c, legacy, c->shared ? 12 : 13, L2C_LEGACY_HEADER, &with);
        /* the same order without K_FREQ */
        for (size_t i = 0; i < sizeof legacy / sizeof legacy[0]; i++)
            if (legacy[i] != K_FREQ && (legacy[i] != K_CLS || !c->shared))
                order[n_order++] = legacy[i];
        int ok_without = make_layout(c, order, n_order, L2C_LEGACY_HEADER, &without);
        if (ok_with && with.end == size) {
            *lay = with;
            return LLM_OK;
        }
        if (ok_without && without.end == size) {
            *lay = without;
            return LLM_OK;
        }
        if (!ok_with)
            return llm_error_set(LLM_E_FORMAT,
                                 "%s: not a llama2.c checkpoint (header sizes overflow)", name);
        return llm_error_set(LLM_E_FORMAT,
                             "%s: not a llama2.c checkpoint: %zu bytes, but the legacy header "
                             "(dim %lld, hidden_dim %lld, n_layers %lld, n_heads %lld, "
                             "n_kv_heads %lld, vocab_size %lld, seq_len %lld) needs %llu bytes "
                             "(%llu without freq_cis)",
                             name, size, (long long)c->dim, (long long)c->hidden,
                             (long long)c->n_layers, (long long)c->n_heads,
                             (long long)c->n_kv_heads, (long long)c->vocab,
                             (long long)c->seq_len, (unsigned long long)with.end,
                             (unsigned long long)without.end);
    }

    n_order = 0;
    for (size_t i = 0; i < sizeof v1 / sizeof v1[0]; i++)
        if (v1[i] != K_CLS || !c->shared)
            order[n_order++] = v1[i];
    LLM_CHECK(make_layout(c, order, n_order, L2C_HEADER, lay), LLM_E_FORMAT,
              "%s: llama2.c header sizes overflow", name);
    for (size_t i = 0; c->version == 2 && i < n_order; i++) {
        enum l2c_kind k = order[i];
        /* export.py asserts this for every quantized tensor */
        LLM_CHECK(is_norm(k) || lay->numel[k] % (uint64_t)c->group_size == 0, LLM_E_FORMAT,
                  "%s: version 2 group size %lld does not divide the %llu elements of %s",
                  name, (long long)c->group_size, (unsigned long long)lay->numel[k],
                  gguf_name(k));
    }
    LLM_CHECK(lay->end == size, LLM_E_FORMAT,
              "%s: %s: file has %zu bytes, the version %d header (dim %lld, hidden_dim %lld, "
              "n_layers %lld, n_heads %lld, n_kv_heads %lld, vocab_size %lld) needs %llu",
              name, size < lay->end ? "truncated" : "trailing bytes", size, c->version,
              (long long)c->dim, (long long)c->hidden, (long long)c->n_layers,
              (long long)c->n_heads, (long long)c->n_kv_heads, (long long)c->vocab,
              (unsigned long long)lay->end);
    return LLM_OK;
}

static llm_status build(struct llm_file *f, const struct l2c_config *c,
                        const struct l2c_layout *lay, const uint8_t *data, const char *name)
{
    static const enum l2c_kind per_layer[] = {K_ATT_NORM, K_WQ,       K_WK, K_WV, K_WO,
                                              K_FFN_NORM, K_W1,       K_W2, K_W3};
    struct l2c_q8 *q8 = NULL;
    size_t n_q8 = 0;

    if (c->version == 2) {
        /* size known to fit the file: every tensor has at least one byte */
        uint64_t n = (uint64_t)c->n_layers * 7 + 2;
        q8 = llm_calloc((size_t)n, sizeof *q8);
        if (!q8)
            return LLM_E_NOMEM;
        LLM_TRY(llm_file_own(f, q8));
    }
    LLM_TRY(add_one(f, c, lay, data, K_EMB, 0, q8, &n_q8));
    for (int64_t l = 0; l < c->n_layers; l++)
        for (size_t i = 0; i < sizeof per_layer / sizeof per_layer[0]; i++)
            LLM_TRY(add_one(f, c, lay, data, per_layer[i], l, q8, &n_q8));
    LLM_TRY(add_one(f, c, lay, data, K_FINAL_NORM, 0, q8, &n_q8));
    if (!c->shared)
        LLM_TRY(add_one(f, c, lay, data, K_CLS, 0, q8, &n_q8));
    return set_meta(f, c, name);
}

llm_status llm_llama2c_head(const uint8_t *d, size_t n, int eof, uint64_t *need, uint64_t *size,
                            const char *name)
{
    *size = 0;
    size_t hdr = n >= 4 && rd_u32(d) == L2C_MAGIC ? L2C_HEADER : L2C_LEGACY_HEADER;
    if (n < L2C_HEADER && !eof) {
        *need = L2C_HEADER; /* enough to tell a version 1 or 2 header */
        return LLM_OK;
    }
    if (n < hdr)
        return llm_error_set(LLM_E_FORMAT, "%s: not a llama2.c checkpoint (%zu bytes, shorter "
                             "than a header)", name, n);
    struct l2c_config c;
    LLM_TRY(read_config(&c, d, n, name));
    /* the largest of the layouts the header allows: the parser then
     * matches the size exactly */
    struct l2c_layout lay;
    enum l2c_kind order[K_COUNT];
    size_t n_order = 0;
    const enum l2c_kind *all = c.version ? v1 : legacy;
    size_t n_all = c.version ? sizeof v1 / sizeof v1[0] : sizeof legacy / sizeof legacy[0];
    for (size_t i = 0; i < n_all; i++)
        if (all[i] != K_CLS || !c.shared)
            order[n_order++] = all[i];
    if (!make_layout(&c, order, n_order, hdr, &lay))
        return llm_error_set(LLM_E_FORMAT, "%s: %s header sizes overflow", name,
                             c.version ? "llama2.c" : "not a llama2.c checkpoint (legacy)");
    *size = lay.end;
    *need = 0;
    return LLM_OK;
}

llm_status llm_llama2c_parse(struct llm_file **out, const uint8_t *data, size_t size,
                             const char *name, const struct llm_import_opts *o)
{
    struct l2c_config c;
    struct l2c_layout lay;
    struct llm_file *f = NULL;
    llm_status s;

    *out = NULL;
    if (!name)
        name = "<buffer>";
    LLM_TRY(read_header(&c, &lay, data, size, name));
    LLM_TRY(llm_file_new(&f, name, "llama2c"));
    f->src_version = (uint32_t)c.version;
    llm_file_set_checks(f, o);
    s = build(f, &c, &lay, data, name);
    if (s != LLM_OK) {
        llm_file_free(f);
        return s;
    }
    *out = f;
    return LLM_OK;
}

/* ---- tokenizer.bin ------------------------------------------------------- */

/* GGUF token types (formats.md §2.3) */
enum { TOK_NORMAL = 1, TOK_UNKNOWN = 2, TOK_CONTROL = 3, TOK_BYTE = 6 };

static int is_hex_upper(uint8_t ch)
{
    return (ch >= '0' && ch <= '9') || (ch >= 'A' && ch <= 'F');
}

static int is_byte_piece(const uint8_t *p, uint32_t n)
{
    return n == 6 && p[0] == '<' && p[1] == '0' && p[2] == 'x' && is_hex_upper(p[3]) &&
           is_hex_upper(p[4]) && p[5] == '>';
}

/* The SentencePiece text of a llama2.c token: export wrote BOS/EOS with
 * newlines around them and spaces for U+2581. Writes to dst (when not NULL)
 * and returns the length. */
static uint32_t spm_text(const uint8_t *p, uint32_t n, uint8_t *dst)
{
    static const uint8_t sp[3] = {0xe2, 0x96, 0x81}; /* U+2581 */
    uint32_t len = 0;

    if (n == 5 && memcmp(p, "\n<s>\n", 5) == 0) {
        p += 1;
        n = 3;
    } else if (n == 6 && memcmp(p, "\n</s>\n", 6) == 0) {
        p += 1;
        n = 4;
    }
    for (uint32_t i = 0; i < n; i++) {
        if (p[i] == ' ') {
            if (dst)
                memcpy(dst + len, sp, 3);
            len += 3;
        } else {
            if (dst)
                dst[len] = p[i];
            len++;
        }
    }
    return len;
}

static llm_status tok_meta(struct llm_file *f, uint32_t n)
{
    struct llm_meta *m = f->meta;
    LLM_TRY(llm_meta_set_str(m, "tokenizer.model", "llama"));
    LLM_TRY(llm_meta_set_i64(m, "tokenizer.n_tokens", n));
    LLM_TRY(llm_meta_set_i64(m, "tokenizer.bos_id", 1));
    LLM_TRY(llm_meta_set_i64(m, "tokenizer.eos_id", 2));
    LLM_TRY(llm_meta_set_i64(m, "tokenizer.unk_id", 0));
    LLM_TRY(llm_meta_set_bool(m, "tokenizer.add_bos", 1));
    LLM_TRY(llm_meta_set_bool(m, "tokenizer.add_eos", 0));
    LLM_TRY(llm_meta_set_bool(m, "tokenizer.add_space_prefix", 1));
    return LLM_OK;
}

llm_status llm_llama2c_tokenizer_parse(struct llm_file *f, const uint8_t *data, size_t size,
                                       const char *name, uint32_t n_tokens)
{
    uint32_t max_len;
    uint64_t need, pos, text_len = 0;
    const char **tokens = NULL;
    uint32_t *lens = NULL;
    float *scores = NULL;
    int32_t *types = NULL;
    uint8_t *text = NULL;
    llm_status s = LLM_OK;

    if (!name)
        name = "<buffer>";
    LLM_CHECK(f, LLM_E_INVALID, "%s: no model to attach the tokenizer to", name);
    /* <unk>, <s> and </s> have fixed ids 0..2 in llama2.c */
    LLM_CHECK(n_tokens >= 3, LLM_E_FORMAT,
              "%s: a vocabulary of %u tokens is too small for <unk>, <s>, </s>", name,
              (unsigned)n_tokens);
    LLM_CHECK(size >= 4, LLM_E_FORMAT, "%s: not a llama2.c tokenizer (%zu bytes)", name, size);
    max_len = rd_u32(data);
    /* a score, a length and at least zero bytes per token */
    need = 4 + (uint64_t)n_tokens * 8;
    LLM_CHECK(need <= size, LLM_E_FORMAT,
              "%s: truncated: %u tokens need at least %llu bytes, the file has %zu", name,
              (unsigned)n_tokens, (unsigned long long)need, size);
    LLM_CHECK(max_len > 0 && max_len <= size, LLM_E_FORMAT,
              "%s: not a llama2.c tokenizer (max_token_length %u)", name, (unsigned)max_len);

    /* pass 1: validate and size the converted text */
    pos = 4;
    for (uint32_t i = 0; i < n_tokens; i++) {
        uint32_t n;
        if (size - pos < 8)
            return llm_error_set(LLM_E_FORMAT, "%s: truncated at token %u of %u", name,
                                 (unsigned)i, (unsigned)n_tokens);
        n = rd_u32(data + pos + 4);
        pos += 8;
        LLM_CHECK(n <= max_len, LLM_E_FORMAT,
                  "%s: token %u: length %u exceeds max_token_length %u", name, (unsigned)i,
                  (unsigned)n, (unsigned)max_len);
        LLM_CHECK(n <= size - pos, LLM_E_FORMAT,
                  "%s: token %u: %u bytes past the end of the file", name, (unsigned)i,
                  (unsigned)n);
        text_len += spm_text(data + pos, n, NULL);
        pos += n;
    }
    LLM_CHECK(pos == size, LLM_E_FORMAT,
              "%s: %llu bytes after token %u: the tokenizer has more tokens than the model's "
              "vocab_size %u",
              name, (unsigned long long)(size - pos), (unsigned)n_tokens - 1,
              (unsigned)n_tokens);

    tokens = llm_calloc(n_tokens, sizeof *tokens);
    lens = llm_calloc(n_tokens, sizeof *lens);
    scores = llm_calloc(n_tokens, sizeof *scores);
    types = llm_calloc(n_tokens, sizeof *types);
    text = llm_malloc(text_len ? (size_t)text_len : 1);
    if (!tokens || !lens || !scores || !types || !text) {
        s = LLM_E_NOMEM;
        goto out;
    }

    /* pass 2: convert */
    pos = 4;
    text_len = 0;
    for (uint32_t i = 0; i < n_tokens; i++) {
        uint32_t n = rd_u32(data + pos + 4);
        const uint8_t *p = data + pos + 8;
        scores[i] = rd_f32(data + pos);
        tokens[i] = (const char *)text + text_len;
        lens[i] = spm_text(p, n, text + text_len);
        text_len += lens[i];
        if (i == 0)
            types[i] = TOK_UNKNOWN;
        else if (i <= 2)
            types[i] = TOK_CONTROL;
        else if (is_byte_piece(p, n))
            types[i] = TOK_BYTE;
        else
            types[i] = TOK_NORMAL;
        pos += 8 + n;
    }
    s = llm_file_set_vocab(f, n_tokens, tokens, lens, scores, types);
    if (s == LLM_OK)
        s = tok_meta(f, n_tokens);
out:
    llm_free(tokens);
    llm_free(lens);
    llm_free(scores);
    llm_free(types);
    llm_free(text);
    return s;
}

/* ---- files ----------------------------------------------------------------- */

llm_status llm_llama2c_tokenizer_open(struct llm_file *f, const char *path)
{
    struct llm_map m;
    int64_t vocab;
    llm_status s;

    LLM_TRY(llm_meta_get_i64(f->meta, "hparams.vocab_size", &vocab));
    LLM_TRY(llm_small_map(&m, path, LLM_TOKENIZER_MAX));
    s = llm_llama2c_tokenizer_parse(f, m.data, m.size, path, (uint32_t)vocab);
    llm_map_close(&m);
    return s;
}

llm_status llm_llama2c_open(struct llm_file **out, const char *path,
                            const struct llm_import_opts *o)
{
    struct llm_map m;
    struct llm_file *f = NULL;
    llm_status s;

    *out = NULL;
    LLM_TRY(llm_model_map(&m, path));
    s = llm_llama2c_parse(&f, m.data, m.size, path, o);
    if (s != LLM_OK) {
        llm_map_close(&m);
        return s;
    }
    s = llm_file_add_map(f, &m);
    if (s == LLM_OK && o && o->tokenizer_path)
        s = llm_llama2c_tokenizer_open(f, o->tokenizer_path);
    if (s != LLM_OK) {
        llm_file_free(f);
        return s;
    }
    *out = f;
    return LLM_OK;
}
