/* hf_quant.c: import of Hugging Face GPTQ and AWQ (GEMM) checkpoints into
 * our integer grid types (see hf_quant.h for the mapping and the rules);
 * hf.c finds the tensors and calls in here. The export is in
 * hf_quant_write.c. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "../common/alloc.h"
#include "../common/fp16.h"
#include "../quant/types.h"
#include "../quant/grid.h"
#include "file.h"
#include "hf.h"
#include "hf_quant.h"
#include "hf_quant_impl.h"
#include "import.h"

#define MAX_QCONFIG_JSON ((size_t)1 << 20)
/* Output rows unpacked together: neighbouring rows share the cache lines of
 * the packed words. */
#define ROW_TILE 16

static const char *const part_suffix[LLM_HFQ_NPARTS] = { ".qweight", ".qzeros", ".scales",
                                                         ".g_idx" };

const uint8_t llm_hfq_awq_order[8] = { 0, 2, 4, 6, 1, 3, 5, 7 };
const uint8_t llm_hfq_awq_slot[8] = { 0, 4, 1, 5, 2, 6, 3, 7 };

void llm_hfq_group(const struct llm_qgrid *g, float s, int z, struct llm_qgroup *p)
{
    llm_qgrid_group_set(g, fabsf(s), z, p);
    if (s == 0.0f) {
        p->d = 0.0f;
        p->m = 0.0f;
    } else if (s < 0.0f) {
        /* rounding to the stored precision is symmetric in the sign */
        p->d = -p->d;
        p->m = -p->m;
    }
}

uint32_t llm_hfq_rd32(const uint8_t *p, uint64_t i)
{
    p += 4 * i;
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

uint32_t llm_hfq_get(const uint8_t *p, uint64_t w0, uint64_t stride, uint64_t j, int bits)
{
    const uint64_t pos = (uint64_t)bits * j, w = pos / 32;
    const unsigned s = (unsigned)(pos % 32);
    uint64_t v = llm_hfq_rd32(p, w0 + w * stride) >> s;
    if (s + (unsigned)bits > 32)
        v |= (uint64_t)llm_hfq_rd32(p, w0 + (w + 1) * stride) << (32 - s);
    return (uint32_t)v & ((1u << bits) - 1);
}

void llm_hfq_or32(uint8_t *p, uint64_t i, uint32_t v)
{
    p += 4 * i;
    for (int k = 0; k < 4; k++)
        p[k] |= (uint8_t)(v >> (8 * k));
}

void llm_hfq_put(uint8_t *p, uint64_t w0, uint64_t stride, uint64_t j, int bits, uint32_t v)
{
    const uint64_t pos = (uint64_t)bits * j, w = pos / 32;
    const unsigned s = (unsigned)(pos % 32);
    llm_hfq_or32(p, w0 + w * stride, v << s);
    if (s + (unsigned)bits > 32)
        llm_hfq_or32(p, w0 + (w + 1) * stride, v >> (32 - s));
}

/* One quantized linear layer of the checkpoint; after llm_hfq_finish also
 * the fill context of its weight, owned by the file. */
struct hfq_lin {
    char name[LLM_MAX_NAME];      /* GGUF weight name */
    char perm_name[LLM_MAX_NAME]; /* GGUF name of the .perm tensor */
    char base[LLM_MAX_NAME];      /* HF module name */
    int have[LLM_HFQ_NPARTS];
    uint32_t shard[LLM_HFQ_NPARTS];
    const uint8_t *data[LLM_HFQ_NPARTS];
    uint32_t nd[LLM_HFQ_NPARTS];
    int64_t ne[LLM_HFQ_NPARTS][LLM_MAX_DIMS];
    int scale_type;               /* LLM_TYPE_F16/BF16/F32 */
    int64_t in, out, groups;
    uint64_t qk_heads;
    int64_t order;
    int method, bits, group;      /* group 0: per channel */
    int zoff;                     /* added to stored zeros (1 for GPTQ v1) */
    struct llm_qgrid grid;
    int32_t *perm;                /* (in) or NULL */
    int32_t *rowsrc;              /* (out) HF output index of our row r, or NULL */
};

struct llm_hfq {
    int method, bits, group;      /* group as in the config: -1 per channel */
    int cfg_v2;                   /* checkpoint_format says gptq_v2 */
    char cfg_path[4096];          /* where the quantization config was read */
    char **shards;                /* (n_shards) */
    uint32_t n_shards;
    size_t cap_shards;
    struct hfq_lin **lins;        /* (n_lins) */
    size_t n_lins, cap_lins;
    size_t n_given;               /* lins[0..n_given) are owned by the file */
    struct llm_hfq_tensor *out;   /* (n_out) */
    size_t n_out;
};

/* ------------------------------------------------------------------------ */
/* configuration */

static int json_str_eq(const json_t *v, const char *s)
{
    return json_is_string(v) && strcasecmp(json_string_value(v), s) == 0;
}

static llm_status cfg_intkey(const json_t *qc, const char *path, const char *k1, const char *k2,
                             int required, int64_t def, int64_t *out)
{
    json_t *v = json_object_get(qc, k1);
    const char *key = k1;
    if ((!v || json_is_null(v)) && k2) {
        v = json_object_get(qc, k2);
        key = k2;
    }
    if (!v || json_is_null(v)) {
        if (required)
            return llm_error_set(LLM_E_FORMAT, "%s: quantization config has no '%s'", path, k1);
        *out = def;
        return LLM_OK;
    }
    if (!json_is_integer(v))
        return llm_error_set(LLM_E_FORMAT, "%s: quantization key '%s' is not an integer", path,
                             key);
    *out = json_integer_value(v);
    return LLM_OK;
}

static llm_status read_qconfig(struct llm_hfq *q, const json_t *qc)
{
    const char *path = q->cfg_path;
    if (!json_is_object(qc))
        return llm_error_set(LLM_E_FORMAT, "%s: quantization config is not an object", path);
    json_t *m = json_object_get(qc, "quant_method");
    if (!m || json_is_null(m)) {
        /* AutoGPTQ's quantize_config.json may omit it; AutoAWQ spells its keys w_bit,
         * q_group_size, version */
        int awq = json_object_get(qc, "w_bit") || json_object_get(qc, "version");
        q->method = awq ? LLM_HFQ_AWQ : LLM_HFQ_GPTQ;
    } else if (json_str_eq(m, "gptq")) {
        q->method = LLM_HFQ_GPTQ;
    } else if (json_str_eq(m, "awq")) {
        q->method = LLM_HFQ_AWQ;
    } else {
        return llm_error_set(LLM_E_UNSUPPORTED,
                             "%s: quant_method '%s' is not supported (gptq, awq)", path,
                             json_is_string(m) ? json_string_value(m) : "?");
    }
    int64_t bits, group;
    LLM_TRY(cfg_intkey(qc, path, "bits", "w_bit", q->method == LLM_HFQ_GPTQ, 4, &bits));
    LLM_TRY(cfg_intkey(qc, path, "group_size", "q_group_size", 0, 128, &group));
    if (q->method == LLM_HFQ_AWQ && bits != 4)
        return llm_error_set(LLM_E_UNSUPPORTED, "%s: AWQ with %lld bits is not supported (4)",
                             path, (long long)bits);
    if (bits != 3 && bits != 4 && bits != 8)
        return llm_error_set(LLM_E_UNSUPPORTED,
                             "%s: GPTQ with %lld bits is not supported (3, 4 and 8)", path,
                             (long long)bits);
    if (group != -1 && group != 32 && group != 64 && group != 128)
        return llm_error_set(LLM_E_UNSUPPORTED,
                             "%s: group_size %lld is not supported (32, 64, 128, -1)", path,
                             (long long)group);
    if (q->method == LLM_HFQ_AWQ && group == -1)
        return llm_error_set(LLM_E_UNSUPPORTED, "%s: AWQ with group_size -1 is not supported",
                             path);
    q->bits = (int)bits;
    q->group = (int)group;
    if (q->method == LLM_HFQ_AWQ) {
        json_t *ver = json_object_get(qc, "version");
        if (ver && !json_is_null(ver) && !json_str_eq(ver, "gemm"))
            return llm_error_set(LLM_E_UNSUPPORTED,
                                 "%s: AWQ version '%s' is not supported (gemm)", path,
                                 json_is_string(ver) ? json_string_value(ver) : "?");
        return LLM_OK;
    }
    json_t *fmt = json_object_get(qc, "checkpoint_format");
    if (!fmt || json_is_null(fmt))
        fmt = json_object_get(qc, "format");
    if (json_is_true(json_object_get(qc, "is_marlin_format")))
        return llm_error_set(LLM_E_UNSUPPORTED, "%s: the Marlin GPTQ layout is not supported",
                             path);
    if (fmt && !json_is_null(fmt)) {
        if (json_str_eq(fmt, "gptq_v2"))
            q->cfg_v2 = 1;
        else if (!json_str_eq(fmt, "gptq"))
            return llm_error_set(LLM_E_UNSUPPORTED,
                                 "%s: GPTQ checkpoint_format '%s' is not supported "
                                 "(gptq, gptq_v2)",
                                 path, json_is_string(fmt) ? json_string_value(fmt) : "?");
    }
    return LLM_OK;
}

llm_status llm_hfq_new(struct llm_hfq **out, const struct json_t *cfg, const char *dir)
{
    *out = NULL;
    json_t *qc = json_object_get(cfg, "quantization_config");
    json_t *loaded = NULL;
    const char *file = "config.json";
    if (!qc || json_is_null(qc)) {
        llm_status s = llm_hf_json_load(&loaded, dir, "quantize_config.json", MAX_QCONFIG_JSON,
                                      LLM_HF_JSON_OPTIONAL);
        if (s == LLM_E_NOTFOUND)
            return LLM_OK;
        LLM_TRY(s);
        qc = loaded;
        file = "quantize_config.json";
    }
    struct llm_hfq *q = llm_calloc(1, sizeof *q);
    llm_status s = q ? LLM_OK : LLM_E_NOMEM;
    if (!s)
        s = llm_hf_path(q->cfg_path, sizeof q->cfg_path, dir, file);
    if (!s)
        s = read_qconfig(q, qc);
    json_decref(loaded);
    if (s) {
        llm_hfq_free(q);
        return s;
    }
    *out = q;
    return LLM_OK;
}

void llm_hfq_free(struct llm_hfq *q)
{
    if (!q)
        return;
    for (uint32_t i = 0; i < q->n_shards; i++)
        llm_free(q->shards[i]);
    llm_free(q->shards);
    for (size_t i = q->n_given; i < q->n_lins; i++) {
        llm_free(q->lins[i]->perm);
        llm_free(q->lins[i]->rowsrc);
        llm_free(q->lins[i]);
    }
    llm_free(q->lins);
    llm_free(q->out);
    llm_free(q);
}

/* ------------------------------------------------------------------------ */
/* collecting the parts */

int llm_hfq_part(const char *name, size_t *base_len)
{
    size_t n = strlen(name);
    for (int p = 0; p < LLM_HFQ_NPARTS; p++) {
        size_t k = strlen(part_suffix[p]);
        if (n > k && strcmp(name + n - k, part_suffix[p]) == 0) {
            *base_len = n - k;
            return p;
        }
    }
    return -1;
}

static llm_status shard_index(struct llm_hfq *q, const char *shard, uint32_t *out)
{
    for (uint32_t i = 0; i < q->n_shards; i++)
        if (strcmp(q->shards[i], shard) == 0) {
            *out = i;
            return LLM_OK;
        }
    LLM_TRY(llm_grow((void **)&q->shards, &q->cap_shards, q->n_shards + 1, sizeof *q->shards));
    if (!(q->shards[q->n_shards] = llm_strdup(shard)))
        return LLM_E_NOMEM;
    *out = q->n_shards++;
    return LLM_OK;
}

llm_status llm_hfq_add(struct llm_hfq *q, const struct llm_st_entry *e, int part,
                       const char *shard, const char *gguf, int64_t in, int64_t out,
                       uint64_t qk_heads, int64_t order)
{
    size_t blen;
    if (part < 0 || part >= LLM_HFQ_NPARTS || llm_hfq_part(e->name, &blen) != part)
        return llm_error_set(LLM_E_INVALID, "%s: tensor '%s': not a quantized part", shard,
                             e->name);
    struct hfq_lin *l = NULL;
    for (size_t i = 0; i < q->n_lins && !l; i++)
        if (strcmp(q->lins[i]->name, gguf) == 0)
            l = q->lins[i];
    if (!l) {
        LLM_TRY(llm_grow((void **)&q->lins, &q->cap_lins, q->n_lins + 1, sizeof *q->lins));
        if (!(l = llm_calloc(1, sizeof *l)))
            return LLM_E_NOMEM;
        q->lins[q->n_lins++] = l;
        snprintf(l->name, sizeof l->name, "%s", gguf);
        size_t k = strlen(gguf);
        /* "blk.0.attn_q.weight" -> "blk.0.attn_q.perm" */
        if (k > 7 && strcmp(gguf + k - 7, ".weight") == 0)
            k -= 7;
        snprintf(l->perm_name, sizeof l->perm_name, "%.*s.perm", (int)k, gguf);
        snprintf(l->base, sizeof l->base, "%.*s", (int)blen, e->name);
        l->in = in;
        l->out = out;
        l->qk_heads = qk_heads;
        l->order = order;
        l->method = q->method;
        l->bits = q->bits;
    }
    if (l->have[part])
        return llm_error_set(LLM_E_FORMAT, "%s: tensor '%s' appears twice", shard, e->name);
    LLM_TRY(shard_index(q, shard, &l->shard[part]));
    l->have[part] = 1;
    l->data[part] = e->data;
    l->nd[part] = e->n_dims;
    memcpy(l->ne[part], e->ne, sizeof l->ne[part]);
    if (part == LLM_HFQ_SCALES) {
        if (e->type < 0)
            return llm_error_set(LLM_E_FORMAT,
                                 "%s: tensor '%s': dtype %s (expected F16, BF16 or F32)", shard,
                                 e->name, e->dtype);
        l->scale_type = e->type;
    } else if (strcmp(e->dtype, "I32") != 0) {
        return llm_error_set(LLM_E_FORMAT, "%s: tensor '%s': dtype %s (expected I32)", shard,
                             e->name, e->dtype);
    }
    return LLM_OK;
}

/* ------------------------------------------------------------------------ */
/* reading the parts (valid after the shape checks) */

static float lin_scale(const struct hfq_lin *l, int64_t k, int64_t o)
{
    const uint8_t *p = l->data[LLM_HFQ_SCALES];
    uint64_t i = (uint64_t)(k * l->out + o);
    if (l->scale_type == LLM_TYPE_F32)
        return llm_bits_f32(llm_hfq_rd32(p, i));
    uint16_t h = (uint16_t)(p[2 * i] | p[2 * i + 1] << 8);
    return l->scale_type == LLM_TYPE_F16 ? llm_fp16_to_fp32(h) : llm_bf16_to_fp32(h);
}

/* The stored zero of group k, output column o (without the v1 offset). */
static int lin_zero(const struct hfq_lin *l, int64_t k, int64_t o)
{
    const uint8_t *z = l->data[LLM_HFQ_QZEROS];
    int maxq = (1 << l->bits) - 1;
    if (l->method == LLM_HFQ_AWQ) {
        uint32_t w = llm_hfq_rd32(z, (uint64_t)(k * (l->out / 8) + o / 8));
        return (int)(w >> (4 * llm_hfq_awq_slot[o % 8])) & maxq;
    }
    const uint64_t words = (uint64_t)(l->out * l->bits + 31) / 32; /* per group */
    return (int)llm_hfq_get(z, (uint64_t)k * words, 1, (uint64_t)o, l->bits);
}

/* Codes of output columns os[0..nt) for every input column, in the
 * original column order: codes (nt, in). */
static void lin_codes(const struct hfq_lin *l, const int64_t *os, int nt, uint8_t *codes)
{
    const uint8_t *qw = l->data[LLM_HFQ_QWEIGHT];
    const int64_t in = l->in, out = l->out;
    if (l->method == LLM_HFQ_AWQ) {
        for (int64_t c = 0; c < in; c++)
            for (int t = 0; t < nt; t++) {
                uint32_t w = llm_hfq_rd32(qw, (uint64_t)(c * (out / 8) + os[t] / 8));
                codes[t * in + c] = (uint8_t)(w >> (4 * llm_hfq_awq_slot[os[t] % 8]) & 15);
            }
        return;
    }
    for (int64_t c = 0; c < in; c++)
        for (int t = 0; t < nt; t++)
            codes[t * in + c] =
                (uint8_t)llm_hfq_get(qw, (uint64_t)os[t], (uint64_t)out, (uint64_t)c, l->bits);
}

static llm_status fill_lin(const struct llm_tensor *t, void *dst, void *ctx)
{
    const struct hfq_lin *l = ctx;
    const int64_t in = l->in, G = l->groups;
    const uint64_t row_bytes = llm_type_row_bytes(t->type, (uint64_t)in);
    uint8_t *codes = llm_malloc((size_t)(ROW_TILE * in));
    uint8_t *row = llm_malloc((size_t)in);
    struct llm_qgroup *p = llm_malloc((size_t)G * sizeof *p);
    llm_status s = codes && row && p ? LLM_OK : LLM_E_NOMEM;
    int64_t os[ROW_TILE];
    for (int64_t r0 = 0; r0 < l->out && !s; r0 += ROW_TILE) {
        int nt = (int)(l->out - r0 < ROW_TILE ? l->out - r0 : ROW_TILE);
        for (int i = 0; i < nt; i++)
            os[i] = l->rowsrc ? l->rowsrc[r0 + i] : r0 + i;
        lin_codes(l, os, nt, codes);
        for (int i = 0; i < nt && !s; i++) {
            const uint8_t *src = codes + (int64_t)i * in;
            if (l->perm) {
                for (int64_t c = 0; c < in; c++)
                    row[c] = src[l->perm[c]];
                src = row;
            }
            for (int64_t k = 0; k < G; k++)
                llm_hfq_group(&l->grid, lin_scale(l, k, os[i]), lin_zero(l, k, os[i]) + l->zoff,
                              &p[k]);
            s = llm_qgrid_pack_row(&l->grid, src, p, in, (uint8_t *)dst + (r0 + i) * row_bytes);
        }
    }
    llm_free(codes);
    llm_free(row);
    llm_free(p);
    if (s)
        llm_error_prefix(t->name);
    return s;
}

/* ------------------------------------------------------------------------ */
/* validation */

struct zero_stats {
    int all_mid_minus_1, all_mid, any_max, n;
};

static const char *lin_file(const struct llm_hfq *q, const struct hfq_lin *l, int part)
{
    for (int p = part; p < part + LLM_HFQ_NPARTS; p++)
        if (l->have[p % LLM_HFQ_NPARTS])
            return q->shards[l->shard[p % LLM_HFQ_NPARTS]];
    return q->cfg_path;
}

static void shape_str(char *buf, size_t n, uint32_t nd, const int64_t *ne)
{
    size_t k = (size_t)snprintf(buf, n, "[");
    for (uint32_t d = nd; d-- > 0 && k < n;)
        k += (size_t)snprintf(buf + k, n - k, "%lld%s", (long long)ne[d], d ? ", " : "");
    if (k < n)
        snprintf(buf + k, n - k, "]");
}

/* want: PyTorch shape (rows, cols); cols 0 for a 1-D tensor */
static llm_status check_shape(const struct llm_hfq *q, const struct hfq_lin *l, int part,
                              int64_t rows, int64_t cols)
{
    int64_t ne[LLM_MAX_DIMS] = { 1, 1, 1, 1 };
    uint32_t nd = cols ? 2 : 1;
    ne[0] = cols ? cols : rows;
    if (cols)
        ne[1] = rows;
    if (l->nd[part] == nd && memcmp(l->ne[part], ne, sizeof ne) == 0)
        return LLM_OK;
    char got[96], want[96];
    shape_str(got, sizeof got, l->nd[part], l->ne[part]);
    shape_str(want, sizeof want, nd, ne);
    return llm_error_set(LLM_E_FORMAT,
                         "%s: tensor '%s%s': shape %s, expected %s for in_features %lld, "
                         "out_features %lld",
                         lin_file(q, l, part), l->base, part_suffix[part], got, want,
                         (long long)l->in, (long long)l->out);
}

static llm_status check_shapes(const struct llm_hfq *q, struct hfq_lin *l)
{
    for (int p = 0; p < LLM_HFQ_NPARTS; p++) {
        if (p == LLM_HFQ_GIDX ? l->have[p] && q->method == LLM_HFQ_AWQ : !l->have[p])
            return llm_error_set(LLM_E_FORMAT, "%s: tensor '%s%s' is %s", lin_file(q, l, p),
                                 l->base, part_suffix[p],
                                 l->have[p] ? "not part of an AWQ checkpoint" : "missing");
    }
    const int64_t in = l->in, out = l->out;
    const int per = llm_hfq_per(q->bits);
    const int64_t g = q->group;
    l->groups = g < 0 ? 1 : (in + g - 1) / g;
    l->group = g < 0 ? 0 : (int)g;
    if (q->method == LLM_HFQ_AWQ) {
        LLM_CHECK(out % 8 == 0, LLM_E_FORMAT,
                  "%s: tensor '%s.qweight': out_features %lld is not a multiple of 8",
                  lin_file(q, l, 0), l->base, (long long)out);
        LLM_TRY(check_shape(q, l, LLM_HFQ_QWEIGHT, in, out / 8));
        LLM_TRY(check_shape(q, l, LLM_HFQ_QZEROS, l->groups, out / 8));
    } else {
        /* At 2, 4 and 8 bits a value never straddles a word, and GPTQModel
         * packs a dimension that is not a multiple of 32/bits (stories260K's
         * 172) into ceil(n * bits / 32) words, the last one zero-padded. Its
         * 3-bit pack has no such tail, so there the multiple is required. */
        LLM_CHECK(per != 32 || (in % per == 0 && out % per == 0), LLM_E_FORMAT,
                  "%s: tensor '%s.qweight': in_features %lld and out_features %lld must be "
                  "multiples of %d for %d-bit packing",
                  lin_file(q, l, 0), l->base, (long long)in, (long long)out, per, q->bits);
        LLM_TRY(check_shape(q, l, LLM_HFQ_QWEIGHT, (in * q->bits + 31) / 32, out));
        LLM_TRY(check_shape(q, l, LLM_HFQ_QZEROS, l->groups, (out * q->bits + 31) / 32));
        if (l->have[LLM_HFQ_GIDX])
            LLM_TRY(check_shape(q, l, LLM_HFQ_GIDX, in, 0));
    }
    return check_shape(q, l, LLM_HFQ_SCALES, l->groups, out);
}

/* g_idx to a column permutation (NULL when it is c / group_size). */
static llm_status check_gidx(const struct llm_hfq *q, struct hfq_lin *l)
{
    if (!l->have[LLM_HFQ_GIDX])
        return LLM_OK;
    const char *file = lin_file(q, l, LLM_HFQ_GIDX);
    const uint8_t *gi = l->data[LLM_HFQ_GIDX];
    const int64_t in = l->in, G = l->groups, g = l->group ? l->group : in;
    int64_t *count = llm_calloc((size_t)G + 1, sizeof *count);
    if (!count)
        return LLM_E_NOMEM;
    int trivial = 1;
    llm_status s = LLM_OK;
    for (int64_t c = 0; c < in && !s; c++) {
        int32_t v = (int32_t)llm_hfq_rd32(gi, (uint64_t)c);
        if (v < 0 || v >= G)
            s = llm_error_set(LLM_E_FORMAT,
                              "%s: tensor '%s.g_idx': value %d at %lld is out of range "
                              "(0..%lld groups)",
                              file, l->base, v, (long long)c, (long long)G - 1);
        else {
            count[v]++;
            trivial &= v == c / g;
        }
    }
    for (int64_t k = 0; k < G && !s; k++) {
        int64_t want = in - k * g < g ? in - k * g : g;
        if (count[k] != want)
            s = llm_error_set(LLM_E_FORMAT,
                              "%s: tensor '%s.g_idx': group %lld has %lld columns, expected "
                              "%lld (group_size %lld)",
                              file, l->base, (long long)k, (long long)count[k], (long long)want,
                              (long long)g);
    }
    if (!s && !trivial) {
        /* stable counting sort by group: start of each group in stored order */
        for (int64_t k = G; k > 0; k--)
            count[k] = count[k - 1];
        count[0] = 0;
        for (int64_t k = 0; k < G; k++)
            count[k + 1] += count[k];
        if (!(l->perm = llm_malloc((size_t)in * sizeof *l->perm)))
            s = LLM_E_NOMEM;
        for (int64_t c = 0; c < in && !s; c++) {
            int32_t v = (int32_t)llm_hfq_rd32(gi, (uint64_t)c);
            l->perm[count[v]++] = (int32_t)c;
        }
    }
    llm_free(count);
    return s;
}

static llm_status check_values(const struct llm_hfq *q, struct hfq_lin *l, struct zero_stats *z)
{
    const int maxq = (1 << q->bits) - 1, mid = 1 << (q->bits - 1);
    for (int64_t k = 0; k < l->groups; k++)
        for (int64_t o = 0; o < l->out; o++) {
            float s = lin_scale(l, k, o);
            if (!isfinite(s))
                return llm_error_set(LLM_E_FORMAT,
                                     "%s: tensor '%s.scales': value %g at [%lld, %lld] is "
                                     "not finite",
                                     lin_file(q, l, LLM_HFQ_SCALES), l->base, (double)s,
                                     (long long)k, (long long)o);
            int v = lin_zero(l, k, o);
            z->all_mid_minus_1 &= v == mid - 1;
            z->all_mid &= v == mid;
            z->any_max |= v == maxq;
        }
    z->n++;
    return LLM_OK;
}

/* The type of the checkpoint's grid; 3 bits is zero points only, so a
 * symmetric 3-bit checkpoint's zero of 4 is a minimum of -4 d there. */
static enum llm_type pick_type(int bits, int group, int sym)
{
    return (enum llm_type)llm_qgrid_type(bits, bits == 3 || !sym, group < 0 ? 0 : group);
}

static llm_status give_to_file(struct llm_file *f, struct hfq_lin *l)
{
    llm_status s = LLM_OK;
    if (l->perm && (s = llm_file_own(f, l->perm)))
        l->perm = NULL;
    if (!s && l->rowsrc && (s = llm_file_own(f, l->rowsrc)))
        l->rowsrc = NULL;
    if (s) {
        llm_free(l->perm);
        llm_free(l->rowsrc);
        llm_free(l);
        return s;
    }
    return llm_file_own(f, l);
}

static llm_status set_meta(struct llm_hfq *q, struct llm_file *f, int sym, int v2, int act)
{
    struct llm_meta *m = f->meta;
    LLM_TRY(llm_meta_set_str(m, "quantization.method", q->method == LLM_HFQ_AWQ ? "awq" : "gptq"));
    LLM_TRY(llm_meta_set_i64(m, "quantization.bits", q->bits));
    LLM_TRY(llm_meta_set_i64(m, "quantization.group_size", q->group));
    LLM_TRY(llm_meta_set_bool(m, "quantization.sym", sym));
    LLM_TRY(llm_meta_set_bool(m, "quantization.act_order", act));
    return llm_meta_set_str(m, "quantization.checkpoint_format",
                            q->method == LLM_HFQ_AWQ ? "awq_gemm" : v2 ? "gptq_v2" : "gptq");
}

llm_status llm_hfq_finish(struct llm_hfq *q, struct llm_file *f)
{
    struct zero_stats z = { 1, 1, 0, 0 };
    int act = 0;
    for (size_t i = 0; i < q->n_lins; i++) {
        struct hfq_lin *l = q->lins[i];
        LLM_TRY(check_shapes(q, l));
        LLM_TRY(check_gidx(q, l));
        LLM_TRY(check_values(q, l, &z));
        act |= l->perm != NULL;
        if (l->qk_heads) {
            LLM_CHECK(l->out % (int64_t)(2 * l->qk_heads) == 0, LLM_E_FORMAT,
                      "%s: tensor '%s.qweight': %lld rows do not split into %llu heads",
                      lin_file(q, l, 0), l->base, (long long)l->out,
                      (unsigned long long)l->qk_heads);
            int32_t *id = llm_malloc((size_t)l->out * sizeof *id);
            if (!id || !(l->rowsrc = llm_malloc((size_t)l->out * sizeof *l->rowsrc))) {
                llm_free(id);
                return LLM_E_NOMEM;
            }
            for (int64_t r = 0; r < l->out; r++)
                id[r] = (int32_t)r;
            llm_hf_permute_qk(l->rowsrc, id, (uint64_t)l->out, sizeof *id, l->qk_heads);
            llm_free(id);
        }
    }
    /* the v1/v2 rule of hf_quant.h */
    int v2 = 1;
    if (q->method == LLM_HFQ_GPTQ) {
        if (z.n && z.all_mid_minus_1)
            v2 = 0;
        else if (z.n && (z.all_mid || z.any_max))
            v2 = 1;
        else
            v2 = q->cfg_v2;
    }
    int zoff = q->method == LLM_HFQ_GPTQ && !v2;
    int sym = z.n && (zoff ? z.all_mid_minus_1 : z.all_mid);
    enum llm_type type = pick_type(q->bits, q->group, sym);
    size_t n_out = 0;
    for (size_t i = 0; i < q->n_lins; i++) {
        struct hfq_lin *l = q->lins[i];
        l->zoff = zoff;
        LLM_TRY(llm_qgrid_of(type, &l->grid));
        n_out += l->perm ? 2 : 1;
    }
    LLM_TRY(set_meta(q, f, sym, v2, act));
    if (!(q->out = llm_calloc(n_out ? n_out : 1, sizeof *q->out)))
        return LLM_E_NOMEM;
    while (q->n_given < q->n_lins) {
        struct hfq_lin *l = q->lins[q->n_given++];
        LLM_TRY(give_to_file(f, l));
        struct llm_hfq_tensor *t = &q->out[q->n_out++];
        t->name = l->name;
        t->type = type;
        t->n_dims = 2;
        t->ne[0] = l->in;
        t->ne[1] = l->out;
        t->ne[2] = t->ne[3] = 1;
        t->fill = fill_lin;
        t->fill_ctx = l;
        t->order = l->order;
        if (l->perm) {
            t = &q->out[q->n_out++];
            t->name = l->perm_name;
            t->type = LLM_TYPE_I32;
            t->n_dims = 1;
            t->ne[0] = l->in;
            t->ne[1] = t->ne[2] = t->ne[3] = 1;
            t->data = l->perm;
            t->order = l->order + 1;
        }
    }
    return LLM_OK;
}

size_t llm_hfq_count(const struct llm_hfq *q)
{
    return q ? q->n_out : 0;
}

void llm_hfq_tensor(const struct llm_hfq *q, size_t i, struct llm_hfq_tensor *t)
{
    *t = q->out[i];
}
