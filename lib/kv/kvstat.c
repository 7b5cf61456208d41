/* kvstat.c: KV-cache arithmetic, loaders of model shapes and of sequence
 * lengths, and the llm-kvstat printers. */
#include "kvstat.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "../common/alloc.h"
#include "../common/io.h"
#include "../format/file.h"
#include "../format/import.h"
#include "kv.h"

/* Larger than any published model, small enough that products stay far
 * from 64-bit overflow before the explicit checks. */
#define MAX_DIM 1048576

/* ---- KV element types ------------------------------------------------------ */

static const struct {
    const char *name;
    uint32_t bytes32;   /* of 32 elements */
} kv_types[LLM_KVSTAT_N_TYPES] = {
    [LLM_KVSTAT_F32] = { "f32", 128 }, [LLM_KVSTAT_F16] = { "f16", 64 },
    [LLM_KVSTAT_BF16] = { "bf16", 64 }, [LLM_KVSTAT_FP8] = { "fp8", 32 },
    [LLM_KVSTAT_INT8] = { "int8", 32 }, [LLM_KVSTAT_Q8] = { "q8", 34 },
    [LLM_KVSTAT_Q4] = { "q4", 18 }, [LLM_KVSTAT_Q4CH] = { "q4ch", 24 },
};

/* q8 and q4 store a head as blocks of 32 */
static int fits(enum llm_kvstat_type t, int64_t head_dim)
{
    return (t != LLM_KVSTAT_Q8 && t != LLM_KVSTAT_Q4) || head_dim % 32 == 0;
}

/* Bytes of 32 elements of t in blocks of bs tokens: q4ch keys (llm-run's
 * kv.h) hold 4-bit codes and, per channel and block, an fp16 scale and
 * minimum (16 + 128 / bs: 24 at 16 tokens). */
static uint64_t bytes32_bs(enum llm_kvstat_type t, int64_t bs)
{
    return t == LLM_KVSTAT_Q4CH ? 16 + (uint64_t)(128 / bs) : kv_types[t].bytes32;
}

llm_status llm_kvstat_type_parse(const char *s, enum llm_kvstat_type *out)
{
    static const struct {
        const char *alias;
        enum llm_kvstat_type t;
    } aliases[] = {
        { "fp32", LLM_KVSTAT_F32 },    { "float32", LLM_KVSTAT_F32 }, { "fp16", LLM_KVSTAT_F16 },
        { "float16", LLM_KVSTAT_F16 }, { "half", LLM_KVSTAT_F16 },    { "bfloat16", LLM_KVSTAT_BF16 },
        { "fp8_e4m3", LLM_KVSTAT_FP8 }, { "fp8_e5m2", LLM_KVSTAT_FP8 }, { "e4m3", LLM_KVSTAT_FP8 },
        { "e5m2", LLM_KVSTAT_FP8 },    { "i8", LLM_KVSTAT_INT8 },     { "q8_0", LLM_KVSTAT_Q8 },
    };
    for (int i = 0; i < LLM_KVSTAT_N_TYPES; i++)
        if (strcasecmp(s, kv_types[i].name) == 0) {
            *out = (enum llm_kvstat_type)i;
            return LLM_OK;
        }
    for (size_t i = 0; i < sizeof aliases / sizeof aliases[0]; i++)
        if (strcasecmp(s, aliases[i].alias) == 0) {
            *out = aliases[i].t;
            return LLM_OK;
        }
    return llm_error_set(LLM_E_INVALID, "unknown KV type '%s' (f32, f16, bf16, fp8, int8, q8, q4, q4ch)",
                         s);
}

const char *llm_kvstat_type_name(enum llm_kvstat_type t)
{
    return (unsigned)t < LLM_KVSTAT_N_TYPES ? kv_types[t].name : "?";
}

uint32_t llm_kvstat_type_bytes32(enum llm_kvstat_type t)
{
    return (unsigned)t < LLM_KVSTAT_N_TYPES ? kv_types[t].bytes32 : 0;
}

/* ---- shapes ---------------------------------------------------------------- */

/* Published configs (Hugging Face config.json of each model): the
 * sliding window and the layers it applies to (Mistral 7B v0.1 and Phi-3
 * all; Gemma 2 every other; Gemma 3 five of six; v0.2 and later Mistrals,
 * Mixtral and Qwen none). */
static const struct {
    const char *name;
    int64_t layers, heads, kv_heads, head_dim, ctx, window, local;
} presets[] = {
    { "llama-2-7b", 32, 32, 32, 128, 4096, 0, 0 },
    { "llama-2-13b", 40, 40, 40, 128, 4096, 0, 0 },
    { "llama-2-70b", 80, 64, 8, 128, 4096, 0, 0 },
    { "llama-3-8b", 32, 32, 8, 128, 8192, 0, 0 },
    { "llama-3-70b", 80, 64, 8, 128, 8192, 0, 0 },
    { "llama-3.1-8b", 32, 32, 8, 128, 131072, 0, 0 },
    { "mistral-7b", 32, 32, 8, 128, 32768, 0, 0 },
    { "mistral-7b-v0.1", 32, 32, 8, 128, 32768, 4096, 32 },
    { "mixtral-8x7b", 32, 32, 8, 128, 32768, 0, 0 },
    { "qwen3-0.6b", 28, 16, 8, 128, 40960, 0, 0 },
    { "qwen3-30b-a3b", 48, 32, 4, 128, 40960, 0, 0 },
    { "gemma2-2b", 26, 8, 4, 256, 8192, 4096, 13 },
    { "gemma3-270m", 18, 4, 1, 256, 32768, 512, 15 },
    { "phi-3-mini-4k", 32, 32, 32, 96, 4096, 2047, 32 },
    { "qwen2-0.5b", 24, 14, 2, 64, 131072, 0, 0 },
    { "qwen2-7b", 28, 28, 4, 128, 131072, 0, 0 },
    { "smollm2-135m", 30, 9, 3, 64, 8192, 0, 0 },
    { "stories260k", 5, 8, 4, 8, 512, 0, 0 },
};
#define N_PRESETS (sizeof presets / sizeof presets[0])

const char *llm_kvstat_presets(void)
{
    return "llama-2-7b,llama-2-13b,llama-2-70b,llama-3-8b,llama-3-70b,llama-3.1-8b,mistral-7b,"
           "mistral-7b-v0.1,mixtral-8x7b,qwen3-0.6b,qwen3-30b-a3b,gemma2-2b,gemma3-270m,phi-3-mini-4k,"
           "qwen2-0.5b,qwen2-7b,smollm2-135m,stories260k";
}

llm_status llm_kvstat_preset(struct llm_kvstat_shape *out, const char *name)
{
    for (size_t i = 0; i < N_PRESETS; i++)
        if (strcasecmp(name, presets[i].name) == 0) {
            memset(out, 0, sizeof *out);
            snprintf(out->name, sizeof out->name, "%s", presets[i].name);
            snprintf(out->source, sizeof out->source, "preset");
            out->n_layers = presets[i].layers;
            out->n_heads = presets[i].heads;
            out->n_kv_heads = presets[i].kv_heads;
            out->head_dim = presets[i].head_dim;
            out->ctx_train = presets[i].ctx;
            out->window = presets[i].window;
            out->n_local = presets[i].local;
            return LLM_OK;
        }
    return llm_error_set(LLM_E_NOTFOUND, "unknown preset '%s' (known: %s)", name, llm_kvstat_presets());
}

llm_status llm_kvstat_shape_check(const struct llm_kvstat_shape *s)
{
    const struct { const char *what; int64_t v; } f[] = {
        { "layers", s->n_layers }, { "heads", s->n_heads },
        { "KV heads", s->n_kv_heads }, { "head dim", s->head_dim },
    };
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
        LLM_CHECK(f[i].v >= 1 && f[i].v <= MAX_DIM, LLM_E_INVALID, "%s: %s %" PRId64 " is out of range",
                  s->name, f[i].what, f[i].v);
    LLM_CHECK(s->n_heads % s->n_kv_heads == 0, LLM_E_INVALID,
              "%s: %" PRId64 " heads is not a multiple of %" PRId64 " KV heads", s->name, s->n_heads,
              s->n_kv_heads);
    LLM_CHECK(s->ctx_train >= 0, LLM_E_INVALID, "%s: negative context length", s->name);
    LLM_CHECK(s->window >= 0 && s->window <= INT32_MAX && s->n_local >= 0 &&
              s->n_local <= s->n_layers && (s->window > 0) == (s->n_local > 0), LLM_E_INVALID,
              "%s: a sliding window of %" PRId64 " on %" PRId64 " of %" PRId64 " layers", s->name,
              s->window, s->n_local, s->n_layers);
    return LLM_OK;
}

int64_t llm_kvstat_window_layers(int64_t n_layers, int64_t pattern)
{
    return pattern <= 1 ? n_layers : n_layers - n_layers / pattern;
}

/* An int key of a config.json object: 0 when absent or null. */
static llm_status json_dim(const json_t *o, const char *key, const char *name, int64_t *out)
{
    json_t *v = json_object_get(o, key);
    *out = 0;
    if (!v || json_is_null(v))
        return LLM_OK;
    if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > INT32_MAX)
        return llm_error_set(LLM_E_FORMAT, "%s: key '%s' is not a positive integer", name, key);
    *out = json_integer_value(v);
    return LLM_OK;
}

/* The sliding window of a config.json (llm_kvstat_shape_from_config). */
static llm_status json_window(const json_t *cfg, const char *name, struct llm_kvstat_shape *out)
{
    int64_t w = 0, pat = 0, from = 0;
    llm_status s = json_dim(cfg, "sliding_window", name, &w);
    if (s || !w)
        return s;
    const json_t *use = json_object_get(cfg, "use_sliding_window");
    const json_t *lt = json_object_get(cfg, "layer_types");
    const char *mt = json_string_value(json_object_get(cfg, "model_type"));
    int64_t local = out->n_layers;
    if (json_is_array(lt)) {
        local = 0;
        for (size_t i = 0; i < json_array_size(lt); i++) {
            const char *t = json_string_value(json_array_get(lt, i));
            local += t && !strcmp(t, "sliding_attention");
        }
        if ((int64_t)json_array_size(lt) != out->n_layers)
            return llm_error_set(LLM_E_FORMAT, "%s: layer_types has %zu entries for %" PRId64
                                 " layers", name, json_array_size(lt), out->n_layers);
    } else if (json_is_false(use) || (mt && !strncmp(mt, "qwen", 4) && !json_is_true(use))) {
        local = 0; /* Qwen's window is off unless use_sliding_window */
    } else if (mt && !strncmp(mt, "qwen", 4)) {
        if ((s = json_dim(cfg, "max_window_layers", name, &from)))
            return s;
        local = from < out->n_layers ? out->n_layers - from : 0;
    } else {
        if ((s = json_dim(cfg, "sliding_window_pattern", name, &pat)))
            return s;
        if (!pat && mt && !strcmp(mt, "gemma2"))
            pat = 2;
        if (!pat && mt && !strncmp(mt, "gemma3", 6))
            pat = 6;
        local = llm_kvstat_window_layers(out->n_layers, pat);
    }
    out->window = local ? w : 0;
    out->n_local = local;
    return LLM_OK;
}

llm_status llm_kvstat_shape_from_config(struct llm_kvstat_shape *out, const char *text, size_t len,
                                    const char *name)
{
    json_error_t err;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &err);
    if (!root)
        return llm_error_set(LLM_E_FORMAT, "%s:%d: not valid JSON: %s", name, err.line, err.text);
    llm_status s = LLM_OK;
    const json_t *cfg = root;
    int64_t hidden = 0;
    memset(out, 0, sizeof *out);
    if (!json_is_object(root)) {
        s = llm_error_set(LLM_E_FORMAT, "%s: not a JSON object", name);
        goto out;
    }
    /* multimodal configs keep the language model's keys in text_config */
    if (!json_object_get(cfg, "num_hidden_layers") && json_is_object(json_object_get(cfg, "text_config")))
        cfg = json_object_get(cfg, "text_config");
    if ((s = json_dim(cfg, "num_hidden_layers", name, &out->n_layers)) ||
        (s = json_dim(cfg, "num_attention_heads", name, &out->n_heads)) ||
        (s = json_dim(cfg, "num_key_value_heads", name, &out->n_kv_heads)) ||
        (s = json_dim(cfg, "head_dim", name, &out->head_dim)) ||
        (s = json_dim(cfg, "hidden_size", name, &hidden)) ||
        (s = json_dim(cfg, "max_position_embeddings", name, &out->ctx_train)))
        goto out;
    if (!out->n_layers || !out->n_heads) {
        s = llm_error_set(LLM_E_FORMAT, "%s: missing key '%s'", name,
                          out->n_layers ? "num_attention_heads" : "num_hidden_layers");
        goto out;
    }
    if (!out->n_kv_heads)
        out->n_kv_heads = out->n_heads; /* the transformers default: MHA */
    if (!out->head_dim) {
        if (!hidden) {
            s = llm_error_set(LLM_E_FORMAT, "%s: missing key 'head_dim' (or 'hidden_size')", name);
            goto out;
        }
        if (hidden % out->n_heads) {
            s = llm_error_set(LLM_E_FORMAT,
                              "%s: hidden_size %" PRId64 " is not a multiple of num_attention_heads %" PRId64,
                              name, hidden, out->n_heads);
            goto out;
        }
        out->head_dim = hidden / out->n_heads;
    }
    if ((s = json_window(cfg, name, out)))
        goto out;
    const char *mn = json_string_value(json_object_get(root, "_name_or_path"));
    snprintf(out->name, sizeof out->name, "%s", mn && *mn ? mn : name);
    snprintf(out->source, sizeof out->source, "config");
    if ((s = llm_kvstat_shape_check(out))) {
        /* the check names the model; say which file it came from */
        llm_error_prefix(name);
        s = LLM_E_FORMAT;
    }
out:
    json_decref(root);
    return s;
}

llm_status llm_kvstat_shape_load_config(struct llm_kvstat_shape *out, const char *path)
{
    char *text;
    size_t len;
    LLM_TRY(llm_read_file(path, 16u << 20, &text, &len));
    llm_status s = llm_kvstat_shape_from_config(out, text, len, path);
    llm_free(text);
    return s;
}

static llm_status meta_dim(const struct llm_meta *meta, const char *key, const char *name,
                           int required, int64_t *out)
{
    char path[64];
    snprintf(path, sizeof path, "hparams.%s", key);
    *out = 0;
    llm_status s = llm_meta_get_i64(meta, path, out);
    if (s == LLM_E_NOTFOUND && !required)
        return LLM_OK;
    if (s == LLM_E_NOTFOUND)
        return llm_error_set(LLM_E_FORMAT, "%s: metadata has no %s", name, path);
    if (s) {
        llm_error_prefix(name);
        return s;
    }
    LLM_CHECK(*out >= 1 && *out <= MAX_DIM * 16LL, LLM_E_FORMAT, "%s: %s = %" PRId64 " is out of range",
              name, path, *out);
    return LLM_OK;
}

llm_status llm_kvstat_shape_from_meta(struct llm_kvstat_shape *out, const struct llm_meta *meta,
                                  const char *name)
{
    memset(out, 0, sizeof *out);
    const char *arch = NULL;
    if (llm_meta_get_str(meta, "architecture", &arch) == LLM_OK && strcmp(arch, "none") == 0)
        return llm_error_set(LLM_E_FORMAT, "%s: no model in the file (architecture: none)", name);
    int64_t dim;
    LLM_TRY(meta_dim(meta, "block_count", name, 1, &out->n_layers));
    LLM_TRY(meta_dim(meta, "head_count", name, 1, &out->n_heads));
    LLM_TRY(meta_dim(meta, "head_count_kv", name, 0, &out->n_kv_heads));
    LLM_TRY(meta_dim(meta, "head_dim", name, 0, &out->head_dim));
    LLM_TRY(meta_dim(meta, "embedding_length", name, 0, &dim));
    LLM_TRY(meta_dim(meta, "context_length", name, 0, &out->ctx_train));
    /* (0 is no window) */
    if (llm_meta_get_i64(meta, "hparams.sliding_window", &out->window) == LLM_OK &&
        (out->window < 0 || out->window > INT32_MAX))
        return llm_error_set(LLM_E_FORMAT, "%s: hparams.sliding_window = %" PRId64 " is out of "
                             "range", name, out->window);
    llm_error_clear();
    if (out->window) { /* with llm-run's defaults for Gemma (model.c) */
        int64_t pat;
        LLM_TRY(meta_dim(meta, "sliding_window_pattern", name, 0, &pat));
        if (!pat && arch && !strcmp(arch, "gemma2"))
            pat = 2;
        if (!pat && arch && !strcmp(arch, "gemma3"))
            pat = 6;
        out->n_local = llm_kvstat_window_layers(out->n_layers, pat);
    }
    if (!out->n_kv_heads)
        out->n_kv_heads = out->n_heads;
    if (!out->head_dim) {
        LLM_CHECK(dim, LLM_E_FORMAT, "%s: metadata has neither hparams.head_dim nor hparams.embedding_length",
                  name);
        LLM_CHECK(dim % out->n_heads == 0, LLM_E_FORMAT,
                  "%s: embedding_length %" PRId64 " is not a multiple of head_count %" PRId64, name, dim,
                  out->n_heads);
        out->head_dim = dim / out->n_heads;
    }
    const char *mn = NULL;
    llm_meta_get_str(meta, "name", &mn);
    snprintf(out->name, sizeof out->name, "%s", mn && *mn ? mn : name);
    snprintf(out->source, sizeof out->source, "model");
    if (llm_kvstat_shape_check(out)) {
        llm_error_prefix(name);
        return LLM_E_FORMAT;
    }
    return LLM_OK;
}

llm_status llm_kvstat_shape_load_model(struct llm_kvstat_shape *out, const char *path)
{
    struct llm_file *f;
    LLM_TRY(llm_import(&f, path, NULL));
    llm_status s = llm_kvstat_shape_from_meta(out, f->meta, path);
    if (!s) {
        uint64_t params;
        llm_file_totals(f, &params, &out->weight_bytes);
    }
    llm_file_free(f);
    return s;
}

/* ---- arithmetic ------------------------------------------------------------ */

void llm_kvstat_params_default(struct llm_kvstat_params *p)
{
    memset(p, 0, sizeof *p);
    p->type = LLM_KVSTAT_F16;
    p->batch = 1;
    p->block_size = 16;
    p->weights = UINT64_MAX;
    p->step = LLM_KVSTAT_STEP;
}

static llm_status mul3(uint64_t a, uint64_t b, uint64_t c, uint64_t *out)
{
    uint64_t t = 0;
    LLM_CHECK(llm_mul_ok(a, b, &t) && llm_mul_ok(t, c, out), LLM_E_INVALID,
              "size overflows 64 bits (%" PRIu64 " x %" PRIu64 " x %" PRIu64 ")", a, b, c);
    return LLM_OK;
}

static llm_status waste_compute(struct llm_kvstat_report *r, const uint64_t *len, size_t n)
{
    struct llm_kvstat_waste *w = &r->waste;
    uint64_t B = (uint64_t)r->params.block_size, ctx = (uint64_t)r->params.ctx;
    memset(w, 0, sizeof *w);
    w->n_seqs = n;
    w->min_len = UINT64_MAX;
    for (size_t i = 0; i < n; i++) {
        LLM_CHECK(len[i] >= 1 && len[i] <= ctx, LLM_E_INVALID,
                  "sequence %zu: length %" PRIu64 " is outside 1..%" PRIu64 " (--ctx)", i + 1, len[i], ctx);
        uint64_t blocks = (len[i] + B - 1) / B;
        /* n <= SIZE_MAX and len <= ctx <= 2^40: sums of n x ctx fit in 64 bits
         * only when checked */
        LLM_CHECK(llm_add_ok(w->used_tokens, len[i], &w->used_tokens) &&
                      llm_add_ok(w->paged_blocks, blocks, &w->paged_blocks),
                  LLM_E_INVALID, "sum of sequence lengths overflows");
        w->min_len = len[i] < w->min_len ? len[i] : w->min_len;
        w->max_len = len[i] > w->max_len ? len[i] : w->max_len;
    }
    LLM_TRY(mul3(w->paged_blocks, B, 1, &w->paged_tokens));
    LLM_TRY(mul3(n, ctx, 1, &w->contig_tokens));
    w->mean_len = (double)w->used_tokens / (double)n;
    w->contig_waste_pct = 100.0 * (double)(w->contig_tokens - w->used_tokens) / (double)w->contig_tokens;
    w->paged_waste_pct = 100.0 * (double)(w->paged_tokens - w->used_tokens) / (double)w->paged_tokens;
    if (r->have_capacity) {
        w->contig_fit = r->cap_seqs_contig;
        /* as many sequences of the mix as the blocks allow, on average */
        w->paged_fit = (uint64_t)((double)r->cap_blocks * (double)n / (double)w->paged_blocks);
    }
    return LLM_OK;
}

llm_status llm_kvstat_compute(struct llm_kvstat_report *r, const struct llm_kvstat_shape *s,
                          const struct llm_kvstat_params *p, const uint64_t *lengths, size_t n)
{
    memset(r, 0, sizeof *r);
    LLM_TRY(llm_kvstat_shape_check(s));
    LLM_CHECK((unsigned)p->type < LLM_KVSTAT_N_TYPES, LLM_E_INVALID, "bad KV type %d", (int)p->type);
    r->shape = *s;
    r->params = *p;
    if (!r->params.ctx)
        r->params.ctx = s->ctx_train ? s->ctx_train : 4096;
    if (r->params.weights == UINT64_MAX)
        r->params.weights = s->weight_bytes;
    LLM_CHECK(r->params.ctx >= 1 && r->params.ctx <= (INT64_C(1) << 40), LLM_E_INVALID,
              "context %" PRId64 " is out of range (1..2^40)", r->params.ctx);
    LLM_CHECK(p->batch >= 1 && p->batch <= (INT64_C(1) << 32), LLM_E_INVALID,
              "batch %" PRId64 " is out of range (1..2^32)", p->batch);
    LLM_CHECK(p->block_size >= 1 && p->block_size <= (INT64_C(1) << 20), LLM_E_INVALID,
              "block size %" PRId64 " is out of range (1..1048576)", p->block_size);
    LLM_CHECK(p->step >= 1 && p->step <= (INT64_C(1) << 20), LLM_E_INVALID,
              "step of %" PRId64 " tokens is out of range (1..1048576)", p->step);

    /* q4ch is a key type: a q4ch cache has q4 values, as llm-run's */
    const enum llm_kvstat_type tv = p->split_v ? p->type_v
                                    : p->type == LLM_KVSTAT_Q4CH ? LLM_KVSTAT_Q4 : p->type;
    LLM_CHECK((unsigned)tv < LLM_KVSTAT_N_TYPES, LLM_E_INVALID, "bad KV type %d", (int)tv);
    /* the cache's own rules for q4ch keys (kv.h) */
    const char *why = llm_kv_types_why_not(
        p->type == LLM_KVSTAT_Q4CH ? LLM_TYPE_Q4Z_CH : LLM_TYPE_F16,
        tv == LLM_KVSTAT_Q4CH ? LLM_TYPE_Q4Z_CH : LLM_TYPE_F16,
        (int32_t)p->block_size, s->n_kv_heads * s->head_dim); /* (at most 2^20: checked) */
    LLM_CHECK(!why, LLM_E_INVALID, "%s", why);
    for (int h = 0; h < 2; h++) {
        const enum llm_kvstat_type t = h ? tv : p->type;
        LLM_CHECK(fits(t, s->head_dim), LLM_E_INVALID, "a %s cache stores heads as blocks of "
                  "32 elements: these have %" PRId64, llm_kvstat_type_name(t), s->head_dim);
    }
    const uint32_t b32 = (uint32_t)(bytes32_bs(p->type, p->block_size) + bytes32_bs(tv, p->block_size));
    r->type_bytes = b32 / 64.0;
    uint64_t elems = 0; /* K and V elements per token per layer */
    LLM_TRY(mul3(2, (uint64_t)s->n_kv_heads, (uint64_t)s->head_dim, &elems));
    /* whole: a multiple of 32 elements for q8 and q4, 32 bytes for the rest */
    LLM_TRY(mul3(elems / 2, b32, 1, &r->bytes_per_token_layer));
    r->bytes_per_token_layer /= 32;
    LLM_TRY(mul3(r->bytes_per_token_layer, (uint64_t)s->n_layers, 1, &r->bytes_per_token));
    LLM_TRY(mul3(r->bytes_per_token / (uint64_t)s->n_kv_heads, (uint64_t)s->n_heads, 1,
                 &r->bytes_per_token_mha));
    r->gqa_factor = (double)s->n_heads / (double)s->n_kv_heads;
    LLM_TRY(mul3(r->bytes_per_token, (uint64_t)r->params.ctx, 1, &r->bytes_per_sequence));
    LLM_TRY(mul3(r->bytes_per_sequence, (uint64_t)p->batch, 1, &r->bytes_per_batch));
    LLM_TRY(mul3(r->bytes_per_token, (uint64_t)p->block_size, 1, &r->bytes_per_block));
    if (s->window > 0 && s->n_local > 0) {
        /* llm-run's bound on a window layer's rows (kv/kv.h) */
        struct llm_kv_params kp;
        llm_kv_params_default(&kp);
        kp.n_layers = 1;
        kp.block_size = (int32_t)p->block_size;
        kp.max_tokens = r->params.ctx < INT32_MAX ? (int32_t)r->params.ctx : INT32_MAX;
        kp.window = (int32_t)s->window;
        /* as llm-run: a step of n_batch tokens, or a block */
        kp.max_step = (int32_t)(p->step > p->block_size ? p->step : p->block_size);
        const int32_t wb = llm_kv_window_blocks(&kp);
        if (wb > 0) {
            uint64_t full, loc;
            r->have_window = 1;
            r->window_tokens = (uint64_t)wb * (uint64_t)p->block_size;
            LLM_TRY(mul3(r->bytes_per_token_layer, (uint64_t)(s->n_layers - s->n_local),
                         (uint64_t)r->params.ctx, &full));
            LLM_TRY(mul3(r->bytes_per_token_layer, (uint64_t)s->n_local, r->window_tokens, &loc));
            r->bytes_per_sequence_windowed = full + loc;
            LLM_TRY(mul3(r->bytes_per_sequence_windowed, (uint64_t)p->batch, 1,
                         &r->bytes_per_batch_windowed));
        }
    }
    for (int t = 0; t < LLM_KVSTAT_N_TYPES; t++) {
        uint64_t b = 0;
        /* (q4ch: with q4 values, in blocks of 16 tokens or more as llm-run needs) */
        const uint64_t k32 = bytes32_bs((enum llm_kvstat_type)t, p->block_size < 16 ? 16 : p->block_size);
        const uint64_t v32 = t == LLM_KVSTAT_Q4CH ? kv_types[LLM_KVSTAT_Q4].bytes32 : k32;
        if (fits((enum llm_kvstat_type)t, s->head_dim) && (t != LLM_KVSTAT_Q4CH || fits(LLM_KVSTAT_Q4, s->head_dim)))
            LLM_TRY(mul3(elems / 2, k32 + v32, (uint64_t)s->n_layers, &b));
        r->bytes_per_token_type[t] = b / 32;
    }

    if (p->mem) {
        r->have_capacity = 1;
        r->kv_mem = p->mem > r->params.weights ? p->mem - r->params.weights : 0;
        r->cap_tokens = r->kv_mem / r->bytes_per_token;
        r->cap_blocks = r->kv_mem / r->bytes_per_block;
        r->cap_seqs_contig = r->kv_mem / r->bytes_per_sequence;
        uint64_t B = (uint64_t)p->block_size;
        r->cap_seqs_paged = r->cap_blocks / (((uint64_t)r->params.ctx + B - 1) / B);
        if (r->have_window)
            r->cap_seqs_windowed = r->kv_mem / r->bytes_per_sequence_windowed;
    }
    if (p->shared_prefix) {
        const uint64_t B = (uint64_t)p->block_size, P = (uint64_t)p->shared_prefix;
        LLM_CHECK(p->shared_prefix >= 1 && P <= (uint64_t)r->params.ctx, LLM_E_INVALID,
                  "shared prefix of %" PRId64 " tokens is outside 1..%" PRId64 " (--ctx)",
                  p->shared_prefix, r->params.ctx);
        r->have_sharing = 1;
        r->shared_blocks = P / B;
        r->blocks_per_seq = ((uint64_t)r->params.ctx + B - 1) / B;
        r->own_blocks_per_seq = r->blocks_per_seq - r->shared_blocks;
        LLM_TRY(mul3(r->blocks_per_seq, (uint64_t)p->batch, 1, &r->blocks_unshared));
        LLM_TRY(mul3(r->shared_blocks, (uint64_t)p->batch - 1, 1, &r->blocks_saved));
        r->blocks_shared = r->blocks_unshared - r->blocks_saved;
        LLM_TRY(mul3(r->blocks_saved, r->bytes_per_block, 1, &r->bytes_saved));
        r->saved_pct = 100.0 * (double)r->blocks_saved / (double)r->blocks_unshared;
        if (r->have_capacity) {
            /* the prefix once, then each sequence's own blocks */
            if (r->cap_blocks < r->shared_blocks)
                r->cap_seqs_shared = 0;
            else if (!r->own_blocks_per_seq) /* every sequence is the prefix: any number */
                r->cap_seqs_shared = UINT64_MAX;
            else
                r->cap_seqs_shared = (r->cap_blocks - r->shared_blocks) / r->own_blocks_per_seq;
        }
    }
    if (lengths && n) {
        r->have_waste = 1;
        LLM_TRY(waste_compute(r, lengths, n));
    }
    return LLM_OK;
}

/* ---- sequence lengths ------------------------------------------------------ */

static llm_status push_len(uint64_t **v, size_t *n, size_t *cap, uint64_t x)
{
    LLM_TRY(llm_grow((void **)v, cap, *n + 1, sizeof **v));
    (*v)[(*n)++] = x;
    return LLM_OK;
}

llm_status llm_kvstat_lengths_parse(uint64_t **out, size_t *n, const char *text, size_t len,
                                const char *name, uint64_t max_len)
{
    uint64_t *v = NULL;
    size_t cnt = 0, cap = 0, line = 0;
    llm_status s = LLM_OK;
    const char *p = text, *end = text + len;
    while (p < end && !s) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *e = nl ? nl : end;
        line++;
        while (p < e && (*p == ' ' || *p == '\t'))
            p++;
        const char *q = e;
        while (q > p && isspace((unsigned char)q[-1]))
            q--;
        if (p < q && *p != '#') {
            uint64_t x = 0;
            const char *d = p;
            int ok = 1;
            for (; d < q && ok; d++) {
                ok = *d >= '0' && *d <= '9' && x <= (UINT64_MAX - 9) / 10;
                x = x * 10 + (uint64_t)(*d - '0');
            }
            if (!ok || x == 0)
                s = llm_error_set(LLM_E_FORMAT, "%s:%zu: '%.*s' is not a positive integer", name, line,
                                  (int)(q - p > 40 ? 40 : q - p), p);
            else if (x > max_len)
                s = llm_error_set(LLM_E_FORMAT, "%s:%zu: length %" PRIu64 " exceeds the context (%" PRIu64 ")",
                                  name, line, x, max_len);
            else
                s = push_len(&v, &cnt, &cap, x);
        }
        p = nl ? nl + 1 : end;
    }
    if (!s && cnt == 0)
        s = llm_error_set(LLM_E_FORMAT, "%s: no sequence lengths", name);
    if (s) {
        llm_free(v);
        return s;
    }
    *out = v;
    *n = cnt;
    return LLM_OK;
}

llm_status llm_kvstat_lengths_load(uint64_t **out, size_t *n, const char *path, uint64_t max_len)
{
    char *text;
    size_t len;
    LLM_TRY(llm_read_file(path, (size_t)1 << 30, &text, &len));
    llm_status s = llm_kvstat_lengths_parse(out, n, text, len, path, max_len);
    llm_free(text);
    return s;
}

static uint64_t splitmix64(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Uniform in (0, 1]: never 0, so log() below is finite. */
static double unit(uint64_t *st)
{
    return ((double)(splitmix64(st) >> 11) + 1.0) / 9007199254740992.0;
}

llm_status llm_kvstat_lengths_synthetic(uint64_t **out, size_t *n, const char *spec, uint64_t seed,
                                    uint64_t max_len)
{
    char kind[16];
    double a, b;
    long long cnt;
    int used = 0;
    if (sscanf(spec, "%15[a-z]:%lf:%lf:%lld%n", kind, &a, &b, &cnt, &used) != 4 || spec[used] ||
        (strcmp(kind, "uniform") && strcmp(kind, "normal")))
        return llm_error_set(LLM_E_INVALID,
                             "'%s': expected uniform:MIN:MAX:N or normal:MEAN:SD:N", spec);
    LLM_CHECK(cnt >= 1 && cnt <= 100000000, LLM_E_INVALID, "'%s': N must be 1..100000000", spec);
    int uni = strcmp(kind, "uniform") == 0;
    if (uni)
        LLM_CHECK(a == floor(a) && b == floor(b) && a >= 1 && a <= b && b <= (double)max_len,
                  LLM_E_INVALID, "'%s': need integers 1 <= MIN <= MAX <= %" PRIu64 " (the context)", spec,
                  max_len);
    else
        LLM_CHECK(isfinite(a) && isfinite(b) && b >= 0, LLM_E_INVALID,
                  "'%s': need a finite MEAN and SD >= 0", spec);
    uint64_t *v = llm_malloc((size_t)cnt * sizeof *v);
    if (!v)
        return LLM_E_NOMEM;
    uint64_t st = seed;
    for (long long i = 0; i < cnt; i++) {
        if (uni) {
            uint64_t span = (uint64_t)b - (uint64_t)a + 1;
            v[i] = (uint64_t)a + splitmix64(&st) % span;
        } else {
            /* Box-Muller, one value per pair: simple and reproducible */
            double u1 = unit(&st), u2 = unit(&st);
            double x = a + b * sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
            x = floor(x + 0.5);
            v[i] = x < 1 ? 1 : x > (double)max_len ? max_len : (uint64_t)x;
        }
    }
    *out = v;
    *n = (size_t)cnt;
    return LLM_OK;
}

/* ---- printers -------------------------------------------------------------- */

/* "2.00 GiB" */
static const char *human(char *buf, size_t n, double b)
{
    static const char *u[] = { "B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB" };
    int i = 0;
    while (b >= 1024 && i < 6)
        b /= 1024, i++;
    if (i == 0)
        snprintf(buf, n, "%.0f B", b);
    else
        snprintf(buf, n, "%.2f %s", b, u[i]);
    return buf;
}

static void row(FILE *f, const char *label, uint64_t bytes, const char *note)
{
    char h[32];
    if (*note)
        fprintf(f, "%-22s %20" PRIu64 "  %-11s %s\n", label, bytes, human(h, sizeof h, (double)bytes), note);
    else
        fprintf(f, "%-22s %20" PRIu64 "  %s\n", label, bytes, human(h, sizeof h, (double)bytes));
}

static const char *attn_kind(const struct llm_kvstat_shape *s)
{
    return s->n_kv_heads == s->n_heads ? "MHA" : s->n_kv_heads == 1 ? "MQA" : "GQA";
}

llm_status llm_kvstat_print_table(FILE *f, const struct llm_kvstat_report *r)
{
    const struct llm_kvstat_shape *s = &r->shape;
    const struct llm_kvstat_params *p = &r->params;
    char note[160], h[32];
    fprintf(f, "model     %s (%s)\n", s->name, s->source);
    fprintf(f, "shape     %" PRId64 " layers, %" PRId64 " heads, %" PRId64 " KV heads, head dim %" PRId64
               ": %s",
            s->n_layers, s->n_heads, s->n_kv_heads, s->head_dim, attn_kind(s));
    if (s->n_kv_heads != s->n_heads)
        fprintf(f, " (%" PRId64 " query heads per KV head)", s->n_heads / s->n_kv_heads);
    fputc('\n', f);
    const char *pl = r->type_bytes == 1 ? "" : "s";
    if (p->split_v && p->type_v != p->type)
        fprintf(f, "KV type   %s K, %s V (%g byte%s on average)\n", llm_kvstat_type_name(p->type),
                llm_kvstat_type_name(p->type_v), r->type_bytes, pl);
    else
        fprintf(f, "KV type   %s (%g byte%s)\n", llm_kvstat_type_name(p->type), r->type_bytes, pl);
    fprintf(f, "formula   2 x %" PRId64 " layers x %" PRId64 " KV heads x %" PRId64 " x %g byte%s\n",
            s->n_layers, s->n_kv_heads, s->head_dim, r->type_bytes, pl);
    if (s->window && r->have_window)
        fprintf(f, "window    %" PRId64 " of %" PRId64 " layers read the last %" PRId64 " positions: "
                   "llm-run keeps %" PRIu64 " of their rows a sequence (the window, %d kept for "
                   "rollbacks, a step of %" PRId64 ", in blocks)\n",
                s->n_local, s->n_layers, s->window, r->window_tokens, LLM_KV_WINDOW_KEEP, p->step);
    else if (s->window)
        fprintf(f, "window    %" PRId64 " of %" PRId64 " layers read the last %" PRId64 " positions: "
                   "no saving at ctx %" PRId64 "\n", s->n_local, s->n_layers, s->window, p->ctx);
    fputc('\n', f);

    fprintf(f, "%-22s %20s\n", "", "bytes");
    row(f, "per token", r->bytes_per_token, "");
    row(f, "per token, one layer", r->bytes_per_token_layer, "");
    snprintf(note, sizeof note, "if MHA; %s saves %.4gx", attn_kind(s), r->gqa_factor);
    row(f, "per token as MHA", r->bytes_per_token_mha, s->n_kv_heads == s->n_heads ? "(MHA)" : note);
    snprintf(note, sizeof note, "%" PRId64 " tokens", p->block_size);
    row(f, "per block", r->bytes_per_block, note);
    snprintf(note, sizeof note, "ctx %" PRId64, p->ctx);
    row(f, "per sequence", r->bytes_per_sequence, note);
    snprintf(note, sizeof note, "ctx %" PRId64 " x batch %" PRId64, p->ctx, p->batch);
    row(f, "per batch", r->bytes_per_batch, note);
    if (r->have_window) {
        snprintf(note, sizeof note, "window layers hold %" PRIu64 " tokens", r->window_tokens);
        row(f, "per sequence, windows", r->bytes_per_sequence_windowed, note);
        snprintf(note, sizeof note, "%.3gx less than without",
                 (double)r->bytes_per_sequence / (double)r->bytes_per_sequence_windowed);
        row(f, "per batch, windows", r->bytes_per_batch_windowed, note);
    }

    fprintf(f, "\nper token by KV type:");
    for (int t = 0; t < LLM_KVSTAT_N_TYPES; t++)
        fprintf(f, "  %s %s", llm_kvstat_type_name((enum llm_kvstat_type)t),
                r->bytes_per_token_type[t] ? human(h, sizeof h, (double)r->bytes_per_token_type[t])
                                           : "n/a");
    fputc('\n', f);

    if (r->have_capacity) {
        fprintf(f, "\ncapacity\n");
        row(f, "  memory", p->mem, "");
        row(f, "  weights", p->weights, p->weights ? "(subtracted)" : "(none subtracted)");
        row(f, "  for KV", r->kv_mem, "");
        fprintf(f, "  %-20s %20" PRIu64 "\n", "tokens", r->cap_tokens);
        fprintf(f, "  %-20s %20" PRIu64 "  of %" PRId64 " tokens\n", "blocks", r->cap_blocks, p->block_size);
        fprintf(f, "  %-20s %20" PRIu64 "  contiguous, ctx %" PRId64 "\n", "full sequences",
                r->cap_seqs_contig, p->ctx);
        fprintf(f, "  %-20s %20" PRIu64 "  paged, ceil(ctx / %" PRId64 ") blocks each\n", "full sequences",
                r->cap_seqs_paged, p->block_size);
        if (r->have_window)
            fprintf(f, "  %-20s %20" PRIu64 "  window layers bounded\n", "full sequences",
                    r->cap_seqs_windowed);
    }
    if (r->have_sharing) {
        fprintf(f, "\nshared prefix: %" PRId64 " tokens of every one of %" PRId64 " sequences of ctx %"
                   PRId64 " (forks of one prompt)\n", p->shared_prefix, p->batch, p->ctx);
        fprintf(f, "  %-20s %20" PRIu64 "  full blocks of the prefix, held once\n", "shared blocks",
                r->shared_blocks);
        fprintf(f, "  %-20s %20" PRIu64 "  of %" PRIu64 " per sequence\n", "own blocks",
                r->own_blocks_per_seq, r->blocks_per_seq);
        snprintf(note, sizeof note, "without sharing: %" PRIu64, r->blocks_unshared);
        fprintf(f, "  %-20s %20" PRIu64 "  %s\n", "blocks of the batch", r->blocks_shared, note);
        snprintf(note, sizeof note, "%" PRIu64 " blocks, %.2f%%", r->blocks_saved, r->saved_pct);
        row(f, "  saved", r->bytes_saved, note);
        if (r->have_capacity) {
            if (r->cap_seqs_shared == UINT64_MAX)
                fprintf(f, "  %-20s %20s  sharing the prefix\n", "full sequences", "any number");
            else
                fprintf(f, "  %-20s %20" PRIu64 "  sharing the prefix (%" PRIu64 " without)\n",
                        "full sequences", r->cap_seqs_shared, r->cap_seqs_paged);
        }
    }
    if (r->have_waste) {
        const struct llm_kvstat_waste *w = &r->waste;
        uint64_t bpt = r->bytes_per_token;
        fprintf(f, "\npaged vs contiguous: %" PRIu64 " sequences, length %" PRIu64 "..%" PRIu64
                   ", mean %.1f\n",
                w->n_seqs, w->min_len, w->max_len, w->mean_len);
        fprintf(f, "%-22s %14s %14s %14s %8s\n", "", "reserved", "used", "wasted", "waste");
        char a[32], b[32], c[32];
        fprintf(f, "%-22s %14s %14s %14s %7.2f%%\n", "contiguous (ctx)",
                human(a, sizeof a, (double)w->contig_tokens * (double)bpt),
                human(b, sizeof b, (double)w->used_tokens * (double)bpt),
                human(c, sizeof c, (double)(w->contig_tokens - w->used_tokens) * (double)bpt),
                w->contig_waste_pct);
        snprintf(note, sizeof note, "paged (block %" PRId64 ")", p->block_size);
        fprintf(f, "%-22s %14s %14s %14s %7.2f%%\n", note,
                human(a, sizeof a, (double)w->paged_tokens * (double)bpt),
                human(b, sizeof b, (double)w->used_tokens * (double)bpt),
                human(c, sizeof c, (double)(w->paged_tokens - w->used_tokens) * (double)bpt),
                w->paged_waste_pct);
        fprintf(f, "%-22s %14" PRIu64 " %14" PRIu64 " %14" PRIu64 "  (tokens, contiguous)\n", "",
                w->contig_tokens, w->used_tokens, w->contig_tokens - w->used_tokens);
        fprintf(f, "%-22s %14" PRIu64 " %14" PRIu64 " %14" PRIu64 "  (tokens, paged)\n", "",
                w->paged_tokens, w->used_tokens, w->paged_tokens - w->used_tokens);
        if (r->have_capacity)
            fprintf(f, "sequences of this mix that fit at once: %" PRIu64 " contiguous, %" PRIu64
                       " paged (%.2fx)\n",
                    w->contig_fit, w->paged_fit,
                    w->contig_fit ? (double)w->paged_fit / (double)w->contig_fit : 0.0);
    }
    return ferror(f) ? llm_error_set(LLM_E_IO, "write error") : LLM_OK;
}

llm_status llm_kvstat_print_json(FILE *f, const struct llm_kvstat_report *r)
{
    const struct llm_kvstat_shape *s = &r->shape;
    const struct llm_kvstat_params *p = &r->params;
    fputs("{\"model\": ", f);
    llm_json_string(f, s->name, strlen(s->name));
    fprintf(f, ", \"source\": \"%s\", \"n_layers\": %" PRId64 ", \"n_heads\": %" PRId64
               ", \"n_kv_heads\": %" PRId64 ", \"head_dim\": %" PRId64 ", \"attention\": \"%s\",\n",
            s->source, s->n_layers, s->n_heads, s->n_kv_heads, s->head_dim, attn_kind(s));
    char kt[32];
    if (p->split_v && p->type_v != p->type)
        snprintf(kt, sizeof kt, "%s/%s", llm_kvstat_type_name(p->type), llm_kvstat_type_name(p->type_v));
    else
        snprintf(kt, sizeof kt, "%s", llm_kvstat_type_name(p->type));
    fprintf(f, " \"kv_type\": \"%s\", \"kv_type_bytes\": %g, \"ctx\": %" PRId64 ", \"batch\": %" PRId64
               ", \"block_size\": %" PRId64 ",\n",
            kt, r->type_bytes, p->ctx, p->batch, p->block_size);
    fprintf(f, " \"bytes_per_token\": %" PRIu64 ", \"bytes_per_token_layer\": %" PRIu64
               ", \"bytes_per_token_mha\": %" PRIu64 ", \"gqa_factor\": %.6g,\n",
            r->bytes_per_token, r->bytes_per_token_layer, r->bytes_per_token_mha, r->gqa_factor);
    fprintf(f, " \"bytes_per_block\": %" PRIu64 ", \"bytes_per_sequence\": %" PRIu64
               ", \"bytes_per_batch\": %" PRIu64 ",\n",
            r->bytes_per_block, r->bytes_per_sequence, r->bytes_per_batch);
    fprintf(f, " \"window\": %" PRId64 ", \"window_layers\": %" PRId64 ", \"step_tokens\": %" PRId64,
            s->window, s->n_local, p->step);
    if (r->have_window)
        fprintf(f, ", \"window_tokens\": %" PRIu64 ", \"bytes_per_sequence_windowed\": %" PRIu64
                   ", \"bytes_per_batch_windowed\": %" PRIu64 ",\n",
                r->window_tokens, r->bytes_per_sequence_windowed, r->bytes_per_batch_windowed);
    else
        fputs(", \"window_tokens\": null, \"bytes_per_sequence_windowed\": null, "
              "\"bytes_per_batch_windowed\": null,\n", f);
    fputs(" \"bytes_per_token_by_type\": {", f);
    for (int t = 0; t < LLM_KVSTAT_N_TYPES; t++)
        if (r->bytes_per_token_type[t]) /* a type whose blocks the heads fit */
            fprintf(f, "%s\"%s\": %" PRIu64, t ? ", " : "",
                    llm_kvstat_type_name((enum llm_kvstat_type)t), r->bytes_per_token_type[t]);
    fputc('}', f);
    char windowed[24];
    snprintf(windowed, sizeof windowed, "%" PRIu64, r->cap_seqs_windowed);
    if (r->have_capacity)
        fprintf(f, ",\n \"capacity\": {\"mem\": %" PRIu64 ", \"weights\": %" PRIu64 ", \"kv_mem\": %" PRIu64
                   ", \"tokens\": %" PRIu64 ", \"blocks\": %" PRIu64 ", \"sequences_contiguous\": %" PRIu64
                   ", \"sequences_paged\": %" PRIu64 ", \"sequences_windowed\": %s}",
                p->mem, p->weights, r->kv_mem, r->cap_tokens, r->cap_blocks, r->cap_seqs_contig,
                r->cap_seqs_paged, r->have_window ? windowed : "null");
    if (r->have_sharing) {
        fprintf(f, ",\n \"sharing\": {\"shared_prefix\": %" PRId64 ", \"shared_blocks\": %" PRIu64
                   ", \"blocks_per_sequence\": %" PRIu64 ", \"own_blocks_per_sequence\": %" PRIu64
                   ", \"blocks_unshared\": %" PRIu64 ", \"blocks_shared\": %" PRIu64
                   ", \"blocks_saved\": %" PRIu64 ", \"bytes_saved\": %" PRIu64 ", \"saved_pct\": %.6g",
                p->shared_prefix, r->shared_blocks, r->blocks_per_seq, r->own_blocks_per_seq,
                r->blocks_unshared, r->blocks_shared, r->blocks_saved, r->bytes_saved, r->saved_pct);
        if (r->have_capacity) {
            if (r->cap_seqs_shared == UINT64_MAX)
                fputs(", \"sequences_shared\": null", f);
            else
                fprintf(f, ", \"sequences_shared\": %" PRIu64, r->cap_seqs_shared);
        }
        fputc('}', f);
    }
    if (r->have_waste) {
        const struct llm_kvstat_waste *w = &r->waste;
        uint64_t bpt = r->bytes_per_token;
        fprintf(f, ",\n \"fragmentation\": {\"sequences\": %" PRIu64 ", \"min_len\": %" PRIu64
                   ", \"max_len\": %" PRIu64 ", \"mean_len\": %.6g, \"used_tokens\": %" PRIu64
                   ", \"contiguous_tokens\": %" PRIu64 ", \"paged_tokens\": %" PRIu64
                   ", \"paged_blocks\": %" PRIu64 ",\n  \"used_bytes\": %.17g, \"contiguous_waste_bytes\": %.17g"
                   ", \"paged_waste_bytes\": %.17g, \"contiguous_waste_pct\": %.6g, \"paged_waste_pct\": %.6g",
                w->n_seqs, w->min_len, w->max_len, w->mean_len, w->used_tokens, w->contig_tokens,
                w->paged_tokens, w->paged_blocks, (double)w->used_tokens * (double)bpt,
                (double)(w->contig_tokens - w->used_tokens) * (double)bpt,
                (double)(w->paged_tokens - w->used_tokens) * (double)bpt, w->contig_waste_pct,
                w->paged_waste_pct);
        if (r->have_capacity)
            fprintf(f, ", \"contiguous_fit\": %" PRIu64 ", \"paged_fit\": %" PRIu64, w->contig_fit,
                    w->paged_fit);
        fputc('}', f);
    }
    fputs("}\n", f);
    return ferror(f) ? llm_error_set(LLM_E_IO, "write error") : LLM_OK;
}
