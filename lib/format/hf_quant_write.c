/* hf_quant_write.c: export of a model with integer grid weights (q4*, q8*)
 * as a Hugging Face GPTQ or AWQ (GEMM) directory (hf_quant.h has the
 * layouts and the rules). The output is built as a second llm_file of HF
 * tensor names whose data is made on demand while llm_safetensors_write
 * writes it, one source tensor unpacked at a time. */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../common/alloc.h"
#include "../common/fp16.h"
#include "../common/io.h"
#include "../quant/quant.h"
#include "../quant/types.h"
#include "../quant/grid.h"
#include "file.h"
#include "hf.h"
#include "hf_quant.h"
#include "hf_quant_impl.h"
#include "import.h"

void llm_hfq_write_opts_default(struct llm_hfq_write_opts *o)
{
    memset(o, 0, sizeof *o);
    o->method = LLM_HFQ_GPTQ;
}

/* ------------------------------------------------------------------------ */
/* names */

static const struct {
    const char *gguf, *hf;
    int linear;
} blk_names[] = {
    { "attn_norm", "input_layernorm", 0 },
    { "attn_q", "self_attn.q_proj", 1 },
    { "attn_k", "self_attn.k_proj", 1 },
    { "attn_v", "self_attn.v_proj", 1 },
    { "attn_output", "self_attn.o_proj", 1 },
    { "ffn_norm", "post_attention_layernorm", 0 },
    { "ffn_gate", "mlp.gate_proj", 1 },
    { "ffn_up", "mlp.up_proj", 1 },
    { "ffn_down", "mlp.down_proj", 1 },
    { "attn_q_norm", "self_attn.q_norm", 0 },
    { "attn_k_norm", "self_attn.k_norm", 0 },
};
#define N_BLK_NAMES (sizeof blk_names / sizeof blk_names[0])

struct xname {
    char module[LLM_MAX_NAME]; /* HF name without the suffix */
    const char *suffix;        /* "weight", "bias" or "perm" */
    int linear;                /* a blk.N projection weight */
    int qk;                    /* 1: Q rows, 2: K rows */
};

/* GGUF name -> HF module name. 0 when there is none. */
static int hf_name(const char *g, struct xname *x)
{
    static const char *const globals[][2] = { { "token_embd", "model.embed_tokens" },
                                              { "output_norm", "model.norm" },
                                              { "output", "lm_head" } };
    memset(x, 0, sizeof *x);
    const char *dot = strrchr(g, '.');
    if (!dot)
        return 0;
    x->suffix = dot + 1;
    if (strcmp(x->suffix, "weight") && strcmp(x->suffix, "bias") && strcmp(x->suffix, "perm"))
        return 0;
    size_t blen = (size_t)(dot - g);
    for (size_t i = 0; i < 3; i++)
        if (strlen(globals[i][0]) == blen && strncmp(g, globals[i][0], blen) == 0) {
            snprintf(x->module, sizeof x->module, "%s", globals[i][1]);
            return 1;
        }
    if (strncmp(g, "blk.", 4) != 0)
        return 0;
    const char *p = g + 4;
    long long layer = 0;
    int digits = 0;
    for (; *p >= '0' && *p <= '9' && digits < 9; p++, digits++)
        layer = layer * 10 + (*p - '0');
    if (!digits || *p != '.')
        return 0;
    p++;
    for (size_t i = 0; i < N_BLK_NAMES; i++) {
        size_t k = strlen(blk_names[i].gguf);
        if (p + k == dot && strncmp(p, blk_names[i].gguf, k) == 0) {
            snprintf(x->module, sizeof x->module, "model.layers.%lld.%s", layer, blk_names[i].hf);
            x->linear = blk_names[i].linear && strcmp(x->suffix, "weight") == 0;
            x->qk = i == 1 ? 1 : i == 2 ? 2 : 0;
            return 1;
        }
    }
    return 0;
}

/* ------------------------------------------------------------------------ */
/* fill contexts */

/* One quantized linear weight of the source. */
struct xlin {
    struct llm_file *f;
    struct llm_tensor *t;      /* in f */
    const char *name;          /* t->name, for messages */
    const int32_t *inv;        /* (in) stored position of original column c, or NULL */
    const int32_t *rowof;      /* (out) our row of HF output column o, or NULL */
    struct llm_qgrid grid;
    int64_t in, out, groups, group; /* group: columns per group (in for _ch) */
    int method, zsub;
    int f32_scales;            /* a per-channel scale is not exact in fp16 */
};

struct xpart {
    struct xlin *x;
    int part;
};

/* A float tensor copied, or a quantized one dequantized to f16; rows in HF
 * order. */
struct xcopy {
    struct llm_file *f;
    struct llm_tensor *t;
    const int32_t *rowof;      /* (rows) or NULL */
    int dequant;
};

static llm_status read_src(struct llm_file *f, struct llm_tensor *t, uint8_t **out)
{
    *out = NULL;
    if (t->nbytes > SIZE_MAX)
        return llm_error_set(LLM_E_NOMEM, "tensor '%s' too large", t->name);
    uint8_t *buf = llm_malloc((size_t)t->nbytes);
    if (!buf)
        return LLM_E_NOMEM;
    llm_status s = llm_tensor_read(f, t, buf);
    if (s) {
        llm_free(buf);
        return s;
    }
    *out = buf;
    return LLM_OK;
}

/* Walk the rows of a quantized weight in HF output order: codes in the
 * original column order and the group parameters of each. With `check`,
 * verify that every group is expressible (see why_not) instead. */
static llm_status x_part(struct xlin *x, int part, uint8_t *dst)
{
    const int64_t in = x->in, out = x->out, G = x->groups;
    if (part == LLM_HFQ_GIDX) {
        for (int64_t c = 0; c < in; c++)
            llm_hfq_or32(dst, (uint64_t)c, (uint32_t)((x->inv ? x->inv[c] : c) / x->group));
        return LLM_OK;
    }
    uint8_t *raw, *codes = llm_malloc((size_t)in), *orig = llm_malloc((size_t)in);
    struct llm_qgroup *p = llm_malloc((size_t)G * sizeof *p);
    llm_status s = codes && orig && p ? read_src(x->f, x->t, &raw) : LLM_E_NOMEM;
    if (s) {
        llm_free(codes);
        llm_free(orig);
        llm_free(p);
        return s;
    }
    const uint64_t rb = llm_type_row_bytes(x->t->type, (uint64_t)in);
    const int bits = x->grid.bits;
    for (int64_t o = 0; o < out && !s; o++) {
        int64_t r = x->rowof ? x->rowof[o] : o;
        s = llm_qgrid_unpack_row(&x->grid, raw + (uint64_t)r * rb, in, codes, p);
        if (s)
            break;
        if (part == LLM_HFQ_SCALES) {
            for (int64_t k = 0; k < G; k++) {
                if (x->f32_scales) {
                    llm_hfq_or32(dst, (uint64_t)(k * out + o), llm_f32_bits(p[k].d));
                    continue;
                }
                uint16_t h = llm_fp32_to_fp16(p[k].d);
                dst[2 * (k * out + o)] = (uint8_t)h;
                dst[2 * (k * out + o) + 1] = (uint8_t)(h >> 8);
            }
        } else if (part == LLM_HFQ_QZEROS) {
            for (int64_t k = 0; k < G; k++) {
                uint32_t z = (uint32_t)(p[k].zero - x->zsub);
                if (x->method == LLM_HFQ_AWQ)
                    llm_hfq_or32(dst, (uint64_t)(k * (out / 8) + o / 8),
                                 z << (4 * llm_hfq_awq_slot[o % 8]));
                else
                    llm_hfq_put(dst, (uint64_t)(k * (out * bits / 32)), 1, (uint64_t)o, bits, z);
            }
        } else {
            const uint8_t *q = codes;
            if (x->inv) {
                for (int64_t c = 0; c < in; c++)
                    orig[c] = codes[x->inv[c]];
                q = orig;
            }
            if (x->method == LLM_HFQ_AWQ) {
                for (int64_t c = 0; c < in; c++)
                    llm_hfq_or32(dst, (uint64_t)(c * (out / 8) + o / 8),
                         (uint32_t)q[c] << (4 * llm_hfq_awq_slot[o % 8]));
            } else {
                for (int64_t c = 0; c < in; c++)
                    llm_hfq_put(dst, (uint64_t)o, (uint64_t)out, (uint64_t)c, bits, q[c]);
            }
        }
    }
    llm_free(raw);
    llm_free(codes);
    llm_free(orig);
    llm_free(p);
    return s;
}

static llm_status fill_part(const struct llm_tensor *t, void *dst, void *ctx)
{
    struct xpart *xp = ctx;
    memset(dst, 0, (size_t)t->nbytes);
    llm_status s = x_part(xp->x, xp->part, dst);
    if (s)
        llm_error_prefix(xp->x->name);
    return s;
}

static llm_status fill_copy(const struct llm_tensor *t, void *dst, void *ctx)
{
    struct xcopy *c = ctx;
    const struct llm_tensor *src = c->t;
    if (!c->rowof && !c->dequant)
        return llm_tensor_read(c->f, c->t, dst);
    uint8_t *raw;
    LLM_TRY(read_src(c->f, c->t, &raw));
    const int64_t ne0 = src->ne[0];
    const int64_t rows = src->n_dims == 1 ? ne0 : llm_tensor_nrows(src);
    const uint64_t srb = src->n_dims == 1 ? src->nbytes / (uint64_t)ne0
                                          : llm_type_row_bytes(src->type, (uint64_t)ne0);
    const uint64_t drb = src->n_dims == 1 ? srb : llm_type_row_bytes(t->type, (uint64_t)ne0);
    float *row = c->dequant ? llm_malloc((size_t)ne0 * sizeof *row) : NULL;
    llm_status s = c->dequant && !row ? LLM_E_NOMEM : LLM_OK;
    for (int64_t o = 0; o < rows && !s; o++) {
        int64_t r = c->rowof ? c->rowof[o] : o;
        uint8_t *d = (uint8_t *)dst + (uint64_t)o * drb;
        if (!c->dequant) {
            memcpy(d, raw + (uint64_t)r * srb, (size_t)srb);
            continue;
        }
        s = llm_dequantize_row(src->type, raw + (uint64_t)r * srb, row, ne0);
        for (int64_t i = 0; i < ne0 && !s; i++) {
            uint16_t h = llm_fp32_to_fp16(row[i]);
            d[2 * i] = (uint8_t)h;
            d[2 * i + 1] = (uint8_t)(h >> 8);
        }
    }
    llm_free(row);
    llm_free(raw);
    return s;
}

/* ------------------------------------------------------------------------ */
/* planning */

struct xplan {
    struct llm_file *f, *o;
    const struct llm_hfq_write_opts *opts;
    const char *dir;
    int64_t nH, nKV;
    int permute;          /* our Q/K rows are interleaved: back to HF order */
    int bits, group;      /* of the checkpoint; group -1 per channel; bits 0 until known */
    int all_sym, act, n_quant;
    json_t *skipped;      /* (array) HF modules written unquantized */
};

static const char *method_name(const struct xplan *p)
{
    return p->opts->method == LLM_HFQ_AWQ ? "AWQ" : "GPTQ";
}

/* The HF row of each of our Q/K rows, inverted: rowof[hf] = ours. */
static llm_status qk_rowof(struct xplan *p, int qk, int64_t rows, const int32_t **out)
{
    *out = NULL;
    if (!qk || !p->permute)
        return LLM_OK;
    int64_t heads = qk == 1 ? p->nH : p->nKV;
    if (heads <= 0 || rows % (2 * heads) != 0)
        return llm_error_set(LLM_E_FORMAT, "%s: %lld Q/K rows do not split into %lld heads",
                             p->f->path, (long long)rows, (long long)heads);
    int32_t *id = llm_malloc((size_t)rows * sizeof *id);
    int32_t *hf = llm_malloc((size_t)rows * sizeof *hf);
    int32_t *rowof = llm_malloc((size_t)rows * sizeof *rowof);
    if (!id || !hf || !rowof) {
        llm_free(id);
        llm_free(hf);
        llm_free(rowof);
        return LLM_E_NOMEM;
    }
    for (int64_t r = 0; r < rows; r++)
        id[r] = (int32_t)r;
    llm_hf_permute_qk(hf, id, (uint64_t)rows, sizeof *id, (uint64_t)heads);
    for (int64_t r = 0; r < rows; r++)
        rowof[hf[r]] = (int32_t)r;
    llm_free(id);
    llm_free(hf);
    LLM_TRY(llm_file_own(p->o, rowof));
    *out = rowof;
    return LLM_OK;
}

/* The inverse of a stored .perm tensor (validated), or NULL for none or the
 * identity. */
static llm_status load_perm(struct xplan *p, const char *wname, int64_t in, const int32_t **inv)
{
    *inv = NULL;
    char pname[LLM_MAX_NAME];
    size_t k = strlen(wname) - strlen(".weight");
    snprintf(pname, sizeof pname, "%.*s.perm", (int)k, wname);
    struct llm_tensor *t = llm_file_find(p->f, pname);
    if (!t)
        return LLM_OK;
    if (t->type != LLM_TYPE_I32 || t->n_dims != 1 || t->ne[0] != in)
        return llm_error_set(LLM_E_FORMAT, "%s: tensor '%s': expected I32 of %lld elements",
                             p->f->path, pname, (long long)in);
    const void *data;
    LLM_TRY(llm_tensor_bytes(p->f, t, &data));
    int32_t *iv = llm_malloc((size_t)in * sizeof *iv);
    if (!iv)
        return LLM_E_NOMEM;
    for (int64_t c = 0; c < in; c++)
        iv[c] = -1;
    int identity = 1;
    for (int64_t i = 0; i < in; i++) {
        int32_t v;
        memcpy(&v, (const uint8_t *)data + 4 * i, 4);
        if (v < 0 || v >= in || iv[v] >= 0) {
            llm_free(iv);
            return llm_error_set(LLM_E_FORMAT,
                                 "%s: tensor '%s': not a permutation (value %d at %lld)",
                                 p->f->path, pname, v, (long long)i);
        }
        iv[v] = (int32_t)i;
        identity &= v == i;
    }
    if (identity) {
        llm_free(iv);
        return LLM_OK;
    }
    LLM_TRY(llm_file_own(p->o, iv));
    *inv = iv;
    return LLM_OK;
}

/* Why tensor x cannot be written quantized (a detail is set), or LLM_OK. */
static llm_status why_not(struct xplan *p, struct xlin *x)
{
    const char *path = p->f->path, *name = x->name;
    int per = llm_hfq_per(x->grid.bits);
    if (x->method == LLM_HFQ_AWQ) {
        LLM_CHECK(x->grid.bits == 4, LLM_E_UNSUPPORTED,
                  "%s: tensor '%s': AWQ holds 4-bit weights only (%s)", path, name,
                  llm_type_name(x->t->type));
        LLM_CHECK(x->grid.group, LLM_E_UNSUPPORTED,
                  "%s: tensor '%s': AWQ needs a group size (%s is per channel)", path, name,
                  llm_type_name(x->t->type));
        LLM_CHECK(x->out % 8 == 0 && x->in % x->grid.group == 0, LLM_E_UNSUPPORTED,
                  "%s: tensor '%s': AWQ needs out_features (%lld) a multiple of 8 and "
                  "in_features (%lld) a multiple of the group size",
                  path, name, (long long)x->out, (long long)x->in);
        LLM_CHECK(!x->inv, LLM_E_UNSUPPORTED,
                  "%s: tensor '%s': AWQ cannot hold an act-order column permutation", path,
                  name);
    } else {
        LLM_CHECK(x->in % per == 0 && x->out % per == 0, LLM_E_UNSUPPORTED,
                  "%s: tensor '%s': GPTQ %d-bit packing needs in_features (%lld) and "
                  "out_features (%lld) to be multiples of %d",
                  path, name, x->grid.bits, (long long)x->in, (long long)x->out, per);
        /* AutoGPTQ would write ceil(in / group) groups, but vLLM refuses them */
        LLM_CHECK(x->in % x->group == 0, LLM_E_UNSUPPORTED,
                  "%s: tensor '%s': in_features %lld is not a multiple of the group size %lld",
                  path, name, (long long)x->in, (long long)x->group);
    }
    uint8_t *raw, *codes = llm_malloc((size_t)x->in);
    struct llm_qgroup *g = llm_malloc((size_t)x->groups * sizeof *g);
    llm_status s = codes && g ? read_src(x->f, x->t, &raw) : LLM_E_NOMEM;
    if (s) {
        llm_free(codes);
        llm_free(g);
        return s;
    }
    const uint64_t rb = llm_type_row_bytes(x->t->type, (uint64_t)x->in);
    for (int64_t r = 0; r < x->out && !s; r++) {
        s = llm_qgrid_unpack_row(&x->grid, raw + (uint64_t)r * rb, x->in, codes, g);
        for (int64_t k = 0; k < x->groups && !s; k++) {
            struct llm_qgroup ref;
            llm_hfq_group(&x->grid, g[k].d, g[k].zero, &ref);
            if (llm_fp16_to_fp32(llm_fp32_to_fp16(g[k].d)) != g[k].d)
                x->f32_scales = 1; /* only _ch types keep float32 scales */
            if (!isfinite(g[k].d))
                s = llm_error_set(LLM_E_UNSUPPORTED,
                                  "%s: tensor '%s': row %lld group %lld: scale %g is not "
                                  "finite",
                                  path, name, (long long)r, (long long)k, (double)g[k].d);
            else if (x->grid.zero_point && (memcmp(&ref.m, &g[k].m, sizeof ref.m) != 0 ||
                                            memcmp(&ref.d, &g[k].d, sizeof ref.d) != 0))
                s = llm_error_set(LLM_E_UNSUPPORTED,
                                  "%s: tensor '%s': row %lld group %lld: minimum %g is not "
                                  "-scale * an integer zero point (RTN q4_1-style data)",
                                  path, name, (long long)r, (long long)k, (double)g[k].m);
            else if (g[k].zero < x->zsub)
                s = llm_error_set(LLM_E_UNSUPPORTED,
                                  "%s: tensor '%s': row %lld group %lld: zero point 0 cannot "
                                  "be stored as zero - 1 (GPTQ v1); write GPTQ v2 instead",
                                  path, name, (long long)r, (long long)k);
        }
    }
    llm_free(raw);
    llm_free(codes);
    llm_free(g);
    return s;
}

static llm_status add_out(struct xplan *p, const char *name, enum llm_type type, uint32_t nd,
                          const int64_t *ne, llm_fill_fn fill, void *ctx)
{
    struct llm_tensor *t;
    LLM_TRY(llm_file_add_tensor(p->o, name, type, nd, ne, NULL, &t));
    t->flags &= ~(uint32_t)LLM_TENSOR_AUX; /* I32 words are weights here */
    t->fill = fill;
    t->fill_ctx = ctx;
    return LLM_OK;
}

static llm_status add_skipped(struct xplan *p, const struct xname *xn)
{
    if (!xn->linear)
        return LLM_OK;
    json_t *v = json_string(xn->module);
    if (!v || json_array_append_new(p->skipped, v) != 0)
        return llm_error_set(LLM_E_NOMEM, "out of memory (config)");
    return LLM_OK;
}

/* A float tensor, or a quantized one as f16 (fallback). */
static llm_status plan_copy(struct xplan *p, struct llm_tensor *t, const struct xname *xn,
                            int dequant)
{
    struct xcopy *c = llm_calloc(1, sizeof *c);
    if (!c)
        return LLM_E_NOMEM;
    LLM_TRY(llm_file_own(p->o, c));
    c->f = p->f;
    c->t = t;
    c->dequant = dequant;
    LLM_TRY(qk_rowof(p, xn->qk, t->n_dims == 1 ? t->ne[0] : t->ne[1], &c->rowof));
    char name[LLM_MAX_NAME + 16];
    snprintf(name, sizeof name, "%s.%s", xn->module, xn->suffix);
    return add_out(p, name, dequant ? LLM_TYPE_F16 : t->type, t->n_dims, t->ne, fill_copy, c);
}

static llm_status plan_quant(struct xplan *p, struct llm_tensor *t, const struct xname *xn,
                             const struct llm_qgrid *g)
{
    struct xlin *x = llm_calloc(1, sizeof *x);
    if (!x)
        return LLM_E_NOMEM;
    LLM_TRY(llm_file_own(p->o, x));
    x->f = p->f;
    x->t = t;
    x->name = t->name;
    x->grid = *g;
    x->in = t->ne[0];
    x->out = t->ne[1];
    x->group = g->group ? g->group : x->in;
    x->groups = (x->in + x->group - 1) / x->group;
    x->method = p->opts->method;
    x->zsub = x->method == LLM_HFQ_GPTQ && !p->opts->gptq_v2;
    LLM_TRY(load_perm(p, t->name, x->in, &x->inv));
    int bits = g->bits, group = g->group ? g->group : -1;
    llm_status s = LLM_OK;
    if (p->bits && (bits != p->bits || group != p->group))
        s = llm_error_set(LLM_E_UNSUPPORTED,
                          "%s: tensor '%s': %s is %d-bit group %d but the checkpoint is "
                          "%d-bit group %d (one bit width and group size per %s checkpoint)",
                          p->f->path, t->name, llm_type_name(t->type), bits, group, p->bits,
                          p->group, method_name(p));
    if (!s)
        s = why_not(p, x);
    if (s) {
        if (!p->opts->dequant)
            return s;
        llm_error_clear();
        LLM_TRY(add_skipped(p, xn));
        return plan_copy(p, t, xn, 1);
    }
    LLM_TRY(qk_rowof(p, xn->qk, x->out, &x->rowof));
    p->bits = bits;
    p->group = group;
    p->n_quant++;
    p->all_sym &= !g->zero_point;
    p->act |= x->inv != NULL;
    const int awq = x->method == LLM_HFQ_AWQ;
    const int64_t shapes[LLM_HFQ_NPARTS][2] = {
        /* ggml ne: {cols, rows} of the PyTorch [rows, cols] */
        { awq ? x->out / 8 : x->out, awq ? x->in : x->in * bits / 32 },
        { awq ? x->out / 8 : x->out * bits / 32, x->groups },
        { x->out, x->groups },
        { x->in, 1 },
    };
    static const char *const suffix[LLM_HFQ_NPARTS] = { "qweight", "qzeros", "scales", "g_idx" };
    for (int part = 0; part < LLM_HFQ_NPARTS; part++) {
        if (part == LLM_HFQ_GIDX && awq)
            continue;
        struct xpart *xp = llm_calloc(1, sizeof *xp);
        if (!xp)
            return LLM_E_NOMEM;
        LLM_TRY(llm_file_own(p->o, xp));
        xp->x = x;
        xp->part = part;
        char name[LLM_MAX_NAME + 16];
        snprintf(name, sizeof name, "%s.%s", xn->module, suffix[part]);
        enum llm_type st = x->f32_scales ? LLM_TYPE_F32 : LLM_TYPE_F16;
        LLM_TRY(add_out(p, name, part == LLM_HFQ_SCALES ? st : LLM_TYPE_I32,
                        part == LLM_HFQ_GIDX ? 1 : 2, shapes[part], fill_part, xp));
    }
    return LLM_OK;
}

static int is_float(enum llm_type t)
{
    return t == LLM_TYPE_F32 || t == LLM_TYPE_F16 || t == LLM_TYPE_BF16;
}

/* GPTQ and AWQ checkpoints hold integer grids only: fp8_e4m3, a grid of
 * grid.h too, goes the way of the other non-integer types. */
static int int_grid(enum llm_type t, struct llm_qgrid *g)
{
    return llm_qgrid_of(t, g) == LLM_OK && !g->fp8;
}

static llm_status plan_tensor(struct xplan *p, struct llm_tensor *t)
{
    struct xname xn;
    size_t nlen = strlen(t->name);
    if (t->flags & LLM_TENSOR_AUX && (nlen < 5 || strcmp(t->name + nlen - 5, ".perm") != 0))
        return LLM_OK; /* tokenizer arrays: llm_hf_tokenizer_write */
    if (strcmp(t->name, "rope_freqs.weight") == 0)
        return LLM_OK; /* made again from config.json's rope_scaling */
    if (!hf_name(t->name, &xn))
        return llm_error_set(LLM_E_UNSUPPORTED, "%s: tensor '%s' has no Hugging Face name",
                             p->f->path, t->name);
    if (strcmp(xn.suffix, "perm") == 0) {
        char w[LLM_MAX_NAME];
        snprintf(w, sizeof w, "%.*s.weight", (int)(strlen(t->name) - 5), t->name);
        struct llm_tensor *wt = llm_file_find(p->f, w);
        struct llm_qgrid g;
        LLM_CHECK(wt && int_grid(wt->type, &g), LLM_E_FORMAT,
                  "%s: tensor '%s' permutes no quantized weight", p->f->path, t->name);
        return LLM_OK; /* written as g_idx with its weight */
    }
    struct llm_qgrid g;
    if (xn.linear && t->n_dims == 2 && int_grid(t->type, &g))
        return plan_quant(p, t, &xn, &g);
    llm_error_clear();
    if (is_float(t->type)) {
        LLM_TRY(add_skipped(p, &xn));
        return plan_copy(p, t, &xn, 0);
    }
    if (!p->opts->dequant)
        return llm_error_set(LLM_E_UNSUPPORTED,
                             "%s: tensor '%s': type %s cannot be written to a %s checkpoint "
                             "(write it as f16 with --dequant)",
                             p->f->path, t->name, llm_type_name(t->type), method_name(p));
    LLM_TRY(add_skipped(p, &xn));
    return plan_copy(p, t, &xn, 1);
}

/* ------------------------------------------------------------------------ */
/* config.json */

static llm_status jset(json_t *o, const char *k, json_t *v)
{
    if (!v || json_object_set_new(o, k, v) != 0)
        return llm_error_set(LLM_E_NOMEM, "out of memory (config)");
    return LLM_OK;
}

/* The shortest decimal that reads back as the same float32. */
static json_t *jfloat(double v)
{
    char buf[40];
    float f = (float)v;
    for (int prec = 6; prec <= 9; prec++) {
        snprintf(buf, sizeof buf, "%.*g", prec, (double)f);
        if ((float)strtod(buf, NULL) == f)
            break;
    }
    return json_real(strtod(buf, NULL));
}

static llm_status meta_int(const struct llm_file *f, const char *key, json_t *o, const char *jk,
                           int required)
{
    int64_t v;
    llm_status s = llm_meta_get_i64(f->meta, key, &v);
    if (s == LLM_E_NOTFOUND && !required)
        return LLM_OK;
    if (s == LLM_E_NOTFOUND)
        return llm_error_set(LLM_E_FORMAT, "%s: metadata has no %s", f->path, key);
    LLM_TRY(s);
    return jset(o, jk, json_integer(v));
}

static llm_status meta_float(const struct llm_file *f, const char *key, json_t *o,
                             const char *jk)
{
    double v;
    llm_status s = llm_meta_get_f64(f->meta, key, &v);
    if (s == LLM_E_NOTFOUND)
        return LLM_OK;
    LLM_TRY(s);
    return jset(o, jk, jfloat(v));
}

static llm_status rope_scaling(const struct llm_file *f, json_t *cfg)
{
    const char *type;
    if (llm_meta_get_str(f->meta, "hparams.rope_scaling.type", &type) != LLM_OK) {
        llm_error_clear();
        return LLM_OK;
    }
    json_t *rs = json_object();
    LLM_TRY(jset(cfg, "rope_scaling", rs));
    LLM_TRY(jset(rs, "rope_type", json_string(type)));
    static const char *const keys[][2] = {
        { "factor", "factor" },
        { "low_freq_factor", "low_freq_factor" },
        { "high_freq_factor", "high_freq_factor" },
        { "attn_factor", "attention_factor" },
        { "beta_fast", "beta_fast" },
        { "beta_slow", "beta_slow" },
    };
    char path[96];
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        snprintf(path, sizeof path, "hparams.rope_scaling.%s", keys[i][0]);
        LLM_TRY(meta_float(f, path, rs, keys[i][1]));
    }
    return meta_int(f, "hparams.rope_scaling.original_context_length", rs,
                    "original_max_position_embeddings", 0);
}

static llm_status quant_config(struct xplan *p, json_t **out)
{
    json_t *q = *out = json_object();
    if (!q)
        return llm_error_set(LLM_E_NOMEM, "out of memory (config)");
    int awq = p->opts->method == LLM_HFQ_AWQ;
    LLM_TRY(jset(q, "quant_method", json_string(awq ? "awq" : "gptq")));
    LLM_TRY(jset(q, "bits", json_integer(p->bits)));
    LLM_TRY(jset(q, "group_size", json_integer(p->group)));
    if (awq) {
        LLM_TRY(jset(q, "zero_point", json_true()));
        LLM_TRY(jset(q, "version", json_string("gemm")));
        json_t *skip = json_array_size(p->skipped) ? json_incref(p->skipped) : json_null();
        return jset(q, "modules_to_not_convert", skip);
    }
    LLM_TRY(jset(q, "desc_act", json_boolean(p->act)));
    LLM_TRY(jset(q, "sym", json_boolean(p->all_sym)));
    LLM_TRY(jset(q, "static_groups", json_false()));
    LLM_TRY(jset(q, "checkpoint_format", json_string(p->opts->gptq_v2 ? "gptq_v2" : "gptq")));
    if (json_array_size(p->skipped)) {
        /* GPTQModel's per-module overrides; "-:" = leave this module unquantized */
        json_t *dyn = json_object();
        LLM_TRY(jset(q, "dynamic", dyn));
        size_t i;
        json_t *v;
        json_array_foreach(p->skipped, i, v) {
            char re[2 * LLM_MAX_NAME + 8];
            size_t k = 0;
            const char *s = json_string_value(v);
            k += (size_t)snprintf(re, sizeof re, "-:^");
            for (; *s && k + 4 < sizeof re; s++) {
                if (*s == '.')
                    re[k++] = '\\';
                re[k++] = *s;
            }
            re[k++] = '$';
            re[k] = 0;
            LLM_TRY(jset(dyn, re, json_object()));
        }
    }
    return LLM_OK;
}

static llm_status build_config(struct xplan *p, json_t *cfg, json_t *qc)
{
    const struct llm_file *f = p->f;
    const char *arch;
    if (llm_meta_get_str(f->meta, "architecture", &arch) != LLM_OK)
        return llm_error_set(LLM_E_FORMAT, "%s: metadata has no architecture", f->path);
    static const char *const archs[][2] = { { "llama", "LlamaForCausalLM" },
                                            { "mistral", "MistralForCausalLM" },
                                            { "qwen2", "Qwen2ForCausalLM" },
                                            { "qwen3", "Qwen3ForCausalLM" } };
    const char *cls = NULL;
    for (size_t i = 0; i < sizeof archs / sizeof archs[0]; i++)
        if (strcmp(arch, archs[i][0]) == 0)
            cls = archs[i][1];
    if (!cls)
        return llm_error_set(LLM_E_UNSUPPORTED,
                             "%s: architecture '%s' cannot be written as a Hugging Face "
                             "checkpoint (llama, mistral, qwen2, qwen3)",
                             f->path, arch);
    /* a window on every layer is Mistral's (GGUF calls Mistral "llama") */
    int64_t swa = 0, pat = 1;
    if (llm_meta_get_i64(f->meta, "hparams.sliding_window", &swa) == LLM_OK && swa > 0) {
        (void)llm_meta_get_i64(f->meta, "hparams.sliding_window_pattern", &pat);
        if (strcmp(arch, "llama") == 0)
            arch = "mistral", cls = "MistralForCausalLM";
        if (strcmp(arch, "mistral") != 0 || pat != 1)
            return llm_error_set(LLM_E_UNSUPPORTED, "%s: a sliding window on %s cannot be "
                                 "written as a Hugging Face checkpoint (Mistral's alone)",
                                 f->path, arch);
    }
    llm_error_clear();
    json_t *a = json_array();
    LLM_TRY(jset(cfg, "architectures", a));
    if (json_array_append_new(a, json_string(cls)) != 0)
        return llm_error_set(LLM_E_NOMEM, "out of memory (config)");
    LLM_TRY(jset(cfg, "model_type", json_string(arch)));
    static const char *const ints[][2] = {
        { "hparams.vocab_size", "vocab_size" },
        { "hparams.embedding_length", "hidden_size" },
        { "hparams.feed_forward_length", "intermediate_size" },
        { "hparams.block_count", "num_hidden_layers" },
        { "hparams.head_count", "num_attention_heads" },
        { "hparams.head_count_kv", "num_key_value_heads" },
        { "hparams.context_length", "max_position_embeddings" },
    };
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++)
        LLM_TRY(meta_int(f, ints[i][0], cfg, ints[i][1], 1));
    LLM_TRY(meta_int(f, "hparams.head_dim", cfg, "head_dim", 0));
    LLM_TRY(meta_float(f, "hparams.rms_norm_eps", cfg, "rms_norm_eps"));
    LLM_TRY(meta_float(f, "hparams.rope_theta", cfg, "rope_theta"));
    LLM_TRY(rope_scaling(f, cfg));
    int tie = 0;
    if (llm_meta_get_bool(f->meta, "hparams.tie_embeddings", &tie) != LLM_OK)
        tie = !llm_file_find(f, "output.weight");
    llm_error_clear();
    LLM_TRY(jset(cfg, "tie_word_embeddings", json_boolean(tie)));
    if ((strcmp(arch, "llama") == 0 || strcmp(arch, "qwen3") == 0) &&
        llm_file_find(f, "blk.0.attn_q.bias"))
        LLM_TRY(jset(cfg, "attention_bias", json_true()));
    if (swa > 0)
        LLM_TRY(jset(cfg, "sliding_window", json_integer(swa)));
    LLM_TRY(jset(cfg, "hidden_act", json_string("silu")));
    LLM_TRY(jset(cfg, "torch_dtype", json_string("float16")));
    int64_t id;
    if (llm_meta_get_i64(f->meta, "tokenizer.bos_id", &id) == LLM_OK && id >= 0)
        LLM_TRY(jset(cfg, "bos_token_id", json_integer(id)));
    if (llm_meta_get_i64(f->meta, "tokenizer.eos_id", &id) == LLM_OK && id >= 0)
        LLM_TRY(jset(cfg, "eos_token_id", json_integer(id)));
    llm_error_clear();
    return jset(cfg, "quantization_config", json_incref(qc));
}

static llm_status write_json(const char *dir, const char *file, const json_t *j)
{
    char path[4096];
    LLM_TRY(llm_hf_path(path, sizeof path, dir, file));
    char *text = json_dumps(j, JSON_INDENT(2) | JSON_REAL_PRECISION(9));
    if (!text)
        return llm_error_set(LLM_E_NOMEM, "%s: cannot serialize", path);
    struct llm_out o;
    llm_status s = llm_out_open(&o, path);
    if (!s) {
        s = llm_out_write(&o, text, strlen(text));
        if (!s)
            s = llm_out_write(&o, "\n", 1);
        if (!s)
            s = llm_out_commit(&o);
        else
            llm_out_abort(&o);
    }
    free(text);
    return s;
}

static llm_status make_dir(const char *dir)
{
    if (mkdir(dir, 0777) != 0 && errno != EEXIST)
        return llm_error_set(LLM_E_IO, "%s: cannot create directory: %s", dir, strerror(errno));
    if (!llm_is_dir(dir))
        return llm_error_set(LLM_E_IO, "%s: exists and is not a directory", dir);
    char path[4096];
    LLM_TRY(llm_hf_path(path, sizeof path, dir, "model.safetensors.index.json"));
    if (access(path, F_OK) == 0)
        return llm_error_set(LLM_E_INVALID,
                             "%s: holds a sharded checkpoint (model.safetensors.index.json); "
                             "write to an empty directory",
                             dir);
    return LLM_OK;
}

/* ------------------------------------------------------------------------ */

static llm_status plan(struct xplan *p)
{
    const struct llm_file *f = p->f;
    const char *rt = NULL;
    p->permute = llm_meta_get_str(f->meta, "hparams.rope_type", &rt) == LLM_OK &&
                 strcmp(rt, "norm") == 0;
    llm_error_clear();
    if (p->permute) {
        LLM_TRY(llm_meta_get_i64(f->meta, "hparams.head_count", &p->nH));
        if (llm_meta_get_i64(f->meta, "hparams.head_count_kv", &p->nKV) != LLM_OK)
            p->nKV = p->nH;
        llm_error_clear();
    }
    p->all_sym = 1;
    for (size_t i = 0; i < f->n_tensors; i++)
        LLM_TRY(plan_tensor(p, &f->tensors[i]));
    if (!p->n_quant)
        return llm_error_set(LLM_E_UNSUPPORTED,
                             "%s: no linear weight of an integer grid type (q3z*, q4*, q8*) can be "
                             "written as %s",
                             f->path, method_name(p));
    return LLM_OK;
}

llm_status llm_hfq_write(struct llm_file *f, const char *dir, const struct llm_hfq_write_opts *o)
{
    struct llm_hfq_write_opts def;
    if (!o) {
        llm_hfq_write_opts_default(&def);
        o = &def;
    }
    LLM_CHECK(o->method == LLM_HFQ_GPTQ || o->method == LLM_HFQ_AWQ, LLM_E_INVALID,
              "hf quant write: unknown method %d", o->method);
    LLM_CHECK(strcmp(dir, "-") != 0, LLM_E_INVALID,
              "a %s checkpoint is a directory; it cannot go to standard output",
              o->method == LLM_HFQ_AWQ ? "AWQ" : "GPTQ");
    struct xplan p = { .f = f, .opts = o, .dir = dir };
    json_t *cfg = json_object(), *qc = NULL;
    p.skipped = json_array();
    llm_status s = cfg && p.skipped ? llm_file_new(&p.o, dir, "hf")
                                    : llm_error_set(LLM_E_NOMEM, "out of memory (config)");
    if (!s)
        s = plan(&p);
    if (!s)
        s = quant_config(&p, &qc);
    if (!s)
        s = build_config(&p, cfg, qc);
    if (!s)
        s = make_dir(dir);
    /* the tokenizer first: its refusals come from metadata, before the long write */
    int tok = 0;
    if (!s)
        s = llm_hf_tokenizer_write(f, dir, &tok);
    char path[4096];
    if (!s)
        s = llm_hf_path(path, sizeof path, dir, "model.safetensors");
    if (!s)
        s = llm_safetensors_write(p.o, path);
    if (!s)
        s = write_json(dir, "config.json", cfg);
    if (!s && o->method == LLM_HFQ_GPTQ)
        s = write_json(dir, "quantize_config.json", qc);

    json_decref(cfg);
    json_decref(qc);
    json_decref(p.skipped);
    llm_file_free(p.o);
    return s;
}
