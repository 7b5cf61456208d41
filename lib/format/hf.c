/* hf.c: Hugging Face model directories (formats.md §3): config.json to
 * hparams, safetensors weights (one file or an index of shards) renamed to
 * GGUF names with Q/K rows permuted to interleaved order for llama/mistral,
 * generation_config.json; the tokenizer is in hf_tokenizer.c, GPTQ/AWQ
 * packed weights in hf_quant.c. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../common/alloc.h"
#include "../common/fp16.h"
#include "../common/io.h"
#include "file.h"
#include "hf.h"
#include "hf_quant.h"
#include "import.h"

#define MAX_CONFIG_JSON ((size_t)64 << 20)
#define MAX_INDEX_JSON ((size_t)256 << 20)
/* Hyper-parameters above this are not a real model and would overflow
 * products of two of them. */
#define MAX_HPARAM ((int64_t)1 << 30)

/* ------------------------------------------------------------------------ */
/* helpers shared with hf_tokenizer.c */

llm_status llm_hf_path(char *buf, size_t size, const char *dir, const char *file)
{
    size_t dl = strlen(dir);
    int slash = dl > 0 && dir[dl - 1] == '/';
    int n = snprintf(buf, size, "%s%s%s", dir, slash ? "" : "/", file);
    if (n < 0 || (size_t)n >= size)
        return llm_error_set(LLM_E_INVALID, "%s: path too long", dir);
    return LLM_OK;
}

llm_status llm_hf_json_load(struct json_t **out, const char *dir, const char *file, size_t max,
                            int flags)
{
    char path[4096];
    *out = NULL;
    LLM_TRY(llm_hf_path(path, sizeof path, dir, file));
    if ((flags & LLM_HF_JSON_OPTIONAL) && access(path, F_OK) != 0)
        return LLM_E_NOTFOUND;
    char *text;
    size_t len;
    LLM_TRY(llm_read_file(path, max, &text, &len));
    json_error_t err;
    size_t jflags = JSON_REJECT_DUPLICATES;
    if (flags & LLM_HF_JSON_INT_AS_REAL)
        jflags |= JSON_DECODE_INT_AS_REAL;
    json_t *j = json_loadb(text, len, jflags, &err);
    llm_free(text);
    if (!j)
        return llm_error_set(LLM_E_FORMAT, "%s: JSON: %s (line %d, column %d)", path, err.text,
                             err.line, err.column);
    *out = j;
    return LLM_OK;
}

void llm_hf_permute_qk(void *dst, const void *src, uint64_t n_rows, uint64_t row_bytes,
                       uint64_t n_head)
{
    uint64_t hd = n_rows / n_head, half = hd / 2;
    uint8_t *d = dst;
    const uint8_t *s = src;
    for (uint64_t h = 0; h < n_head; h++)
        for (uint64_t i = 0; i < half; i++)
            for (uint64_t j = 0; j < 2; j++)
                memcpy(d + (h * hd + 2 * i + j) * row_bytes, s + (h * hd + j * half + i) * row_bytes,
                       (size_t)row_bytes);
}

/* ------------------------------------------------------------------------ */
/* config.json */

struct hf_cfg {
    const char *arch;
    const char *path;   /* DIR/config.json, for messages */
    int permute;        /* Q/K rows from half-split to interleaved order */
    int qkv_bias;       /* q/k/v biases required (qwen2; qwen3 with attention_bias) */
    int qk_norm;        /* per-head q/k RMS norms required (qwen3, gemma3) */
    int gemma;          /* post-norms, norms stored as 1 + w (GGUF's form) */
    int fused;          /* qkv_proj and gate_up_proj (phi3) */
    int64_t swa;        /* sliding window (0: none) */
    int64_t V, ctx, H, I, L, nH, nKV, hd;
    int tie;
    /* mixtures of experts: count, used per token, an expert's width, the
     * shared expert's (0: none), renormalize (-1: the architecture's) */
    int64_t E, K, EI, S;
    int enorm;
};

/* An int key: absent or null gives `def` (or an error when required). */
static llm_status cfg_int(const json_t *cfg, const struct hf_cfg *c, const char *key, int required,
                          int64_t def, int64_t *out)
{
    json_t *v = json_object_get(cfg, key);
    if (!v || json_is_null(v)) {
        if (required)
            return llm_error_set(LLM_E_FORMAT, "%s: missing key '%s'", c->path, key);
        *out = def;
        return LLM_OK;
    }
    if (!json_is_integer(v))
        return llm_error_set(LLM_E_FORMAT, "%s: key '%s' is not an integer", c->path, key);
    json_int_t i = json_integer_value(v);
    if (i < 1 || i > MAX_HPARAM)
        return llm_error_set(LLM_E_FORMAT, "%s: key '%s' is out of range (%lld)", c->path, key,
                             (long long)i);
    *out = i;
    return LLM_OK;
}

/* A number (int or real); 0 when absent or null, -1 (with a detail) when of
 * another type. */
static int cfg_num(const json_t *o, const char *key, const char *path, const char *prefix,
                   double *out)
{
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_number(v)) {
        llm_error_set(LLM_E_FORMAT, "%s: key '%s%s' is not a number", path, prefix, key);
        return -1;
    }
    *out = json_number_value(v);
    return 1;
}

static llm_status read_arch(const json_t *cfg, struct hf_cfg *c)
{
    static const struct { const char *type, *cls; } archs[] = {
        { "llama", "LlamaForCausalLM" },
        { "mistral", "MistralForCausalLM" },
        { "qwen2", "Qwen2ForCausalLM" },
        { "qwen3", "Qwen3ForCausalLM" },
        { "gemma2", "Gemma2ForCausalLM" },
        { "gemma3_text", "Gemma3ForCausalLM" },
        { "phi3", "Phi3ForCausalLM" },
        { "mixtral", "MixtralForCausalLM" },
        { "qwen2_moe", "Qwen2MoeForCausalLM" },
        { "qwen3_moe", "Qwen3MoeForCausalLM" },
    };
    const char *mt = json_string_value(json_object_get(cfg, "model_type"));
    const char *cls = json_string_value(json_array_get(json_object_get(cfg, "architectures"), 0));
    for (size_t i = 0; i < sizeof archs / sizeof archs[0]; i++)
        if ((mt && strcmp(mt, archs[i].type) == 0) ||
            (!mt && cls && strcmp(cls, archs[i].cls) == 0))
            c->arch = archs[i].type;
    if (!c->arch) {
        if (mt)
            return llm_error_set(LLM_E_UNSUPPORTED,
                                 "%s: model_type '%s' is not supported (llama, mistral, qwen2, "
                                 "qwen3, gemma2, gemma3_text, phi3, mixtral, qwen2_moe, "
                                 "qwen3_moe)",
                                 c->path, mt);
        if (cls)
            return llm_error_set(LLM_E_UNSUPPORTED,
                                 "%s: architecture '%s' is not supported (llama, mistral, "
                                 "qwen2, qwen3, gemma2, gemma3, phi3, mixtral, qwen2_moe, "
                                 "qwen3_moe)",
                                 c->path, cls);
        return llm_error_set(LLM_E_FORMAT, "%s: missing key 'model_type'", c->path);
    }
    /* HF stores Q/K for rotate_half RoPE; GGUF llama (and our "norm" rope)
     * wants Meta's interleaved order, qwen2 and qwen3 keep the HF order
     * ("neox"). */
    c->gemma = strncmp(c->arch, "gemma", 5) == 0;
    /* our names, GGUF's */
    if (strcmp(c->arch, "gemma3_text") == 0)
        c->arch = "gemma3";
    else if (strcmp(c->arch, "qwen2_moe") == 0)
        c->arch = "qwen2moe";
    else if (strcmp(c->arch, "qwen3_moe") == 0)
        c->arch = "qwen3moe";
    c->fused = strcmp(c->arch, "phi3") == 0;
    c->permute = strcmp(c->arch, "llama") == 0 || strcmp(c->arch, "mistral") == 0 ||
                 strcmp(c->arch, "mixtral") == 0;
    c->qkv_bias = strcmp(c->arch, "qwen2") == 0 || strcmp(c->arch, "qwen2moe") == 0;
    c->qk_norm = strcmp(c->arch, "qwen3") == 0 || strcmp(c->arch, "gemma3") == 0 ||
                 strcmp(c->arch, "qwen3moe") == 0;
    return LLM_OK;
}

/* Mistral's sliding_window (every layer; null or absent: none). Qwen2 and
 * Qwen3 configs carry one too, used only with use_sliding_window, and
 * then only from layer max_window_layers on: refused, not run wrong. */
static llm_status read_window(const json_t *cfg, struct hf_cfg *c)
{
    json_t *use = json_object_get(cfg, "use_sliding_window");
    if (use && !json_is_null(use) && !json_is_boolean(use))
        return llm_error_set(LLM_E_FORMAT, "%s: key 'use_sliding_window' is not a boolean",
                             c->path);
    if (strncmp(c->arch, "qwen", 4) == 0) {
        if (json_is_true(use))
            return llm_error_set(LLM_E_UNSUPPORTED, "%s: use_sliding_window (sliding-window "
                                 "layers from max_window_layers on) is not supported", c->path);
        return LLM_OK;
    }
    if (json_is_false(use) || !(strcmp(c->arch, "mistral") == 0 || strcmp(c->arch, "mixtral") == 0 ||
                                c->gemma || c->fused))
        return LLM_OK;
    return cfg_int(cfg, c, "sliding_window", 0, 0, &c->swa);
}

/* Mixtral's num_local_experts (its experts as wide as intermediate_size),
 * Qwen-MoE's num_experts and moe_intermediate_size (and the shared
 * expert's width); every layer a mixture, as llama.cpp runs them. */
static llm_status read_experts(const json_t *cfg, struct hf_cfg *c)
{
    c->enorm = -1;
    const int mixtral = strcmp(c->arch, "mixtral") == 0;
    if (!mixtral && !strstr(c->arch, "moe"))
        return LLM_OK;
    /* the hub's Mixtral and Qwen configs, and transformers v5's name */
    const char *ek = json_object_get(cfg, "num_experts") ? "num_experts" : "num_local_experts";
    if (!json_object_get(cfg, ek))
        ek = mixtral ? "num_local_experts" : "num_experts";
    LLM_TRY(cfg_int(cfg, c, ek, 1, 0, &c->E));
    LLM_TRY(cfg_int(cfg, c, "num_experts_per_tok", 1, 0, &c->K));
    LLM_CHECK(c->K <= c->E, LLM_E_FORMAT, "%s: num_experts_per_tok %lld exceeds the %lld experts",
              c->path, (long long)c->K, (long long)c->E);
    if (mixtral) {
        c->EI = c->I;
        return LLM_OK;
    }
    LLM_TRY(cfg_int(cfg, c, "moe_intermediate_size", 1, 0, &c->EI));
    if (strcmp(c->arch, "qwen2moe") == 0)
        LLM_TRY(cfg_int(cfg, c, "shared_expert_intermediate_size", 0, 0, &c->S));
    int64_t step = 1;
    LLM_TRY(cfg_int(cfg, c, "decoder_sparse_step", 0, 1, &step));
    json_t *dense = json_object_get(cfg, "mlp_only_layers");
    if (step != 1 || (json_is_array(dense) && json_array_size(dense) > 0))
        return llm_error_set(LLM_E_UNSUPPORTED, "%s: dense layers among the experts "
                             "(decoder_sparse_step %lld, mlp_only_layers) are not supported",
                             c->path, (long long)step);
    json_t *nt = json_object_get(cfg, "norm_topk_prob");
    if (nt && !json_is_null(nt) && !json_is_boolean(nt))
        return llm_error_set(LLM_E_FORMAT, "%s: key 'norm_topk_prob' is not a boolean", c->path);
    if (json_is_boolean(nt))
        c->enorm = json_is_true(nt);
    else if (strcmp(c->arch, "qwen3moe") == 0) /* transformers' defaults */
        c->enorm = 0;
    return LLM_OK;
}

static llm_status read_config(const json_t *cfg, struct hf_cfg *c)
{
    if (!json_is_object(cfg))
        return llm_error_set(LLM_E_FORMAT, "%s: not a JSON object", c->path);
    LLM_TRY(read_arch(cfg, c));
    LLM_TRY(cfg_int(cfg, c, "vocab_size", 1, 0, &c->V));
    LLM_TRY(cfg_int(cfg, c, "hidden_size", 1, 0, &c->H));
    LLM_TRY(cfg_int(cfg, c, "intermediate_size", 1, 0, &c->I));
    LLM_TRY(cfg_int(cfg, c, "num_hidden_layers", 1, 0, &c->L));
    LLM_TRY(cfg_int(cfg, c, "num_attention_heads", 1, 0, &c->nH));
    LLM_TRY(cfg_int(cfg, c, "max_position_embeddings", 1, 0, &c->ctx));
    LLM_TRY(cfg_int(cfg, c, "num_key_value_heads", 0, c->nH, &c->nKV));
    if (!json_object_get(cfg, "head_dim") || json_is_null(json_object_get(cfg, "head_dim")))
        LLM_CHECK(c->H % c->nH == 0, LLM_E_FORMAT,
                  "%s: hidden_size %lld is not a multiple of num_attention_heads %lld", c->path,
                  (long long)c->H, (long long)c->nH);
    LLM_TRY(cfg_int(cfg, c, "head_dim", 0, c->H / c->nH, &c->hd));
    LLM_CHECK(c->nH % c->nKV == 0, LLM_E_FORMAT,
              "%s: num_attention_heads %lld is not a multiple of num_key_value_heads %lld",
              c->path, (long long)c->nH, (long long)c->nKV);
    LLM_CHECK(c->hd % 2 == 0, LLM_E_FORMAT, "%s: head_dim %lld is odd", c->path,
              (long long)c->hd);
    LLM_CHECK(c->V <= UINT32_MAX - 1, LLM_E_FORMAT, "%s: vocab_size is too large", c->path);
    json_t *tie = json_object_get(cfg, "tie_word_embeddings");
    if (tie && !json_is_null(tie) && !json_is_boolean(tie))
        return llm_error_set(LLM_E_FORMAT, "%s: key 'tie_word_embeddings' is not a boolean",
                             c->path);
    c->tie = json_is_true(tie);
    json_t *ab = json_object_get(cfg, "attention_bias");
    if (ab && !json_is_null(ab) && !json_is_boolean(ab))
        return llm_error_set(LLM_E_FORMAT, "%s: key 'attention_bias' is not a boolean", c->path);
    if (c->qk_norm && json_is_true(ab))
        c->qkv_bias = 1;
    LLM_TRY(read_experts(cfg, c));
    return read_window(cfg, c);
}

/* Phi-3's LongRoPE ("su" in its first configs): long_factor and
 * short_factor, one per rotary pair, become the tensors GGUF has
 * (rope_factors_long/short.weight); cos and sin are scaled by
 * attention_factor, or by transformers' default
 * sqrt(1 + ln(factor) / ln(original length)). */
double llm_longrope_attn_factor(double ctx, double orig)
{
    const double factor = ctx / orig;
    return factor <= 1 ? 1.0 : sqrt(1 + log(factor) / log(orig));
}

static llm_status set_longrope(struct llm_file *f, const json_t *cfg, const json_t *rs,
                               const struct hf_cfg *c)
{
    struct llm_meta *m = f->meta;
    double orig = 0, attn = 0;
    int r = cfg_num(rs, "original_max_position_embeddings", c->path, "rope_scaling.", &orig);
    if (r == 0)
        r = cfg_num(cfg, "original_max_position_embeddings", c->path, "", &orig);
    if (r < 0)
        return LLM_E_FORMAT;
    if (r == 0 || !(orig >= 2 && orig <= (double)MAX_HPARAM))
        return llm_error_set(LLM_E_FORMAT, "%s: LongRoPE needs original_max_position_embeddings "
                             "(2..%lld)", c->path, (long long)MAX_HPARAM);
    const double factor = (double)c->ctx / orig;
    r = cfg_num(rs, "attention_factor", c->path, "rope_scaling.", &attn);
    if (r < 0)
        return LLM_E_FORMAT;
    if (r == 0)
        attn = llm_longrope_attn_factor((double)c->ctx, orig);
    static const char *const keys[2][2] = { { "short_factor", "rope_factors_short.weight" },
                                            { "long_factor", "rope_factors_long.weight" } };
    const int64_t half = c->hd / 2;
    for (int k = 0; k < 2; k++) {
        json_t *a = json_object_get(rs, keys[k][0]);
        if (!json_is_array(a) || (int64_t)json_array_size(a) != half)
            return llm_error_set(LLM_E_FORMAT, "%s: rope_scaling.%s is not an array of %lld "
                                 "numbers (head_dim / 2)", c->path, keys[k][0], (long long)half);
        float *v = llm_malloc((size_t)half * sizeof *v);
        if (!v)
            return LLM_E_NOMEM;
        llm_status s = llm_file_own(f, v);
        if (s) {
            llm_free(v);
            return s;
        }
        for (int64_t i = 0; i < half; i++) {
            json_t *x = json_array_get(a, (size_t)i);
            if (!json_is_number(x) || !(json_number_value(x) > 0) || !isfinite(json_number_value(x)))
                return llm_error_set(LLM_E_FORMAT, "%s: rope_scaling.%s[%lld] is not a positive "
                                     "number", c->path, keys[k][0], (long long)i);
            v[i] = (float)json_number_value(x);
        }
        int64_t ne[LLM_MAX_DIMS] = { half, 1, 1, 1 };
        LLM_TRY(llm_file_add_tensor(f, keys[k][1], LLM_TYPE_F32, 1, ne, v, NULL));
    }
    LLM_TRY(llm_meta_set_str(m, "hparams.rope_scaling.type", "longrope"));
    LLM_TRY(llm_meta_set_f32(m, "hparams.rope_scaling.factor", (float)factor));
    LLM_TRY(llm_meta_set_f32(m, "hparams.rope_scaling.attn_factor", (float)attn));
    return llm_meta_set_i64(m, "hparams.rope_scaling.original_context_length", (int64_t)orig);
}

/* rope_scaling (or v5-style rope_parameters) to hparams.rope_scaling.* */
static llm_status set_rope(struct llm_file *f, const json_t *cfg, const struct hf_cfg *c)
{
    struct llm_meta *m = f->meta;
    json_t *rp = json_object_get(cfg, "rope_parameters");
    /* transformers v5's Gemma 3: one set per layer type; the global layers'
     * is the model's RoPE, the local layers' base is read in set_gemma */
    if (json_is_object(rp) && json_is_object(json_object_get(rp, "full_attention")))
        rp = json_object_get(rp, "full_attention");
    json_t *rs = json_object_get(cfg, "rope_scaling");
    if (!rs || json_is_null(rs))
        rs = rp;
    double theta = 10000.0, v;
    int r = cfg_num(cfg, "rope_theta", c->path, "", &theta);
    if (r == 0 && json_is_object(rp))
        r = cfg_num(rp, "rope_theta", c->path, "rope_parameters.", &theta);
    if (r < 0)
        return LLM_E_FORMAT;
    LLM_TRY(llm_meta_set_f32(m, "hparams.rope_theta", (float)theta));
    LLM_TRY(llm_meta_set_str(m, "hparams.rope_type", c->permute ? "norm" : "neox"));
    if (!rs || json_is_null(rs))
        return LLM_OK;
    if (!json_is_object(rs))
        return llm_error_set(LLM_E_FORMAT, "%s: rope_scaling is not an object", c->path);
    const char *type = json_string_value(json_object_get(rs, "rope_type"));
    if (!type)
        type = json_string_value(json_object_get(rs, "type"));
    if (!type || strcmp(type, "default") == 0)
        return LLM_OK;
    if (strcmp(type, "longrope") == 0 || strcmp(type, "su") == 0)
        return set_longrope(f, cfg, rs, c);
    if (strcmp(type, "linear") != 0 && strcmp(type, "yarn") != 0 &&
        strcmp(type, "llama3") != 0 && strcmp(type, "dynamic") != 0)
        return llm_error_set(LLM_E_UNSUPPORTED,
                             "%s: rope_scaling type '%s' is not supported "
                             "(linear, yarn, llama3, dynamic)",
                             c->path, type);
    LLM_TRY(llm_meta_set_str(m, "hparams.rope_scaling.type", type));
    r = cfg_num(rs, "factor", c->path, "rope_scaling.", &v);
    if (r < 0)
        return LLM_E_FORMAT;
    if (r == 0)
        return llm_error_set(LLM_E_FORMAT, "%s: missing key 'rope_scaling.factor'", c->path);
    LLM_TRY(llm_meta_set_f32(m, "hparams.rope_scaling.factor", (float)v));
    static const char *const keys[][2] = {
        { "low_freq_factor", "low_freq_factor" },   { "high_freq_factor", "high_freq_factor" },
        { "attention_factor", "attn_factor" },      { "beta_fast", "beta_fast" },
        { "beta_slow", "beta_slow" },
    };
    char path[96];
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        r = cfg_num(rs, keys[i][0], c->path, "rope_scaling.", &v);
        if (r < 0)
            return LLM_E_FORMAT;
        snprintf(path, sizeof path, "hparams.rope_scaling.%s", keys[i][1]);
        if (r > 0)
            LLM_TRY(llm_meta_set_f32(m, path, (float)v));
    }
    /* Llama 3.1 keeps it inside rope_scaling, older configs at the top. */
    r = cfg_num(rs, "original_max_position_embeddings", c->path, "rope_scaling.", &v);
    if (r == 0)
        r = cfg_num(cfg, "original_max_position_embeddings", c->path, "", &v);
    if (r < 0)
        return LLM_E_FORMAT;
    if (r > 0 && !(v >= 1 && v <= (double)MAX_HPARAM))
        return llm_error_set(LLM_E_FORMAT,
                             "%s: original_max_position_embeddings is out of range", c->path);
    if (r > 0)
        LLM_TRY(llm_meta_set_i64(m, "hparams.rope_scaling.original_context_length", (int64_t)v));
    return LLM_OK;
}

/* Gemma 2 and 3: the activation, the query scalar, the soft-caps, which
 * layers are local and the local layers' RoPE base. */
static llm_status set_gemma(struct llm_meta *m, const json_t *cfg, const struct hf_cfg *c)
{
    const char *act = json_string_value(json_object_get(cfg, "hidden_activation"));
    if (!act)
        act = json_string_value(json_object_get(cfg, "hidden_act"));
    if (act && strcmp(act, "gelu_pytorch_tanh") != 0)
        return llm_error_set(LLM_E_UNSUPPORTED, "%s: hidden_activation '%s' is not supported "
                             "(gelu_pytorch_tanh)", c->path, act);
    static const char *const keys[][2] = {
        { "query_pre_attn_scalar", "hparams.query_pre_attn_scalar" },
        { "attn_logit_softcapping", "hparams.attn_softcap" },
        { "final_logit_softcapping", "hparams.final_softcap" },
        { "rope_local_base_freq", "hparams.rope_theta_swa" },
    };
    double v;
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        int r = cfg_num(cfg, keys[i][0], c->path, "", &v);
        if (r < 0)
            return LLM_E_FORMAT;
        if (r > 0 && !(v > 0))
            return llm_error_set(LLM_E_FORMAT, "%s: key '%s' = %g is not positive", c->path,
                                 keys[i][0], v);
        if (r > 0)
            LLM_TRY(llm_meta_set_f32(m, keys[i][1], (float)v));
    }
    json_t *rp = json_object_get(json_object_get(cfg, "rope_parameters"), "sliding_attention");
    if (json_is_object(rp)) {
        int r = cfg_num(rp, "rope_theta", c->path, "rope_parameters.sliding_attention.", &v);
        if (r < 0)
            return LLM_E_FORMAT;
        if (r > 0)
            LLM_TRY(llm_meta_set_f32(m, "hparams.rope_theta_swa", (float)v));
    }
    /* which layers are local: layer_types, else sliding_window_pattern,
     * else the architecture's (model.c: 2 for gemma2, 6 for gemma3) */
    json_t *lt = json_object_get(cfg, "layer_types");
    int64_t pat = 0;
    if (json_is_array(lt)) {
        size_t n = json_array_size(lt), first_full = n;
        if (n != (size_t)c->L)
            return llm_error_set(LLM_E_FORMAT, "%s: layer_types has %zu entries, "
                                 "num_hidden_layers is %lld", c->path, n, (long long)c->L);
        for (size_t i = 0; i < n && first_full == n; i++) {
            const char *t = json_string_value(json_array_get(lt, i));
            if (t && !strcmp(t, "full_attention"))
                first_full = i;
        }
        /* every layer local (1), every layer global (no window), or P - 1
         * local layers then a global one */
        pat = first_full == n ? 1 : (int64_t)first_full + 1;
        for (size_t i = 0; i < n; i++) {
            const char *t = json_string_value(json_array_get(lt, i));
            int local = first_full != 0 && (pat == 1 || (int64_t)i % pat < pat - 1);
            if (!t || strcmp(t, local ? "sliding_attention" : "full_attention"))
                return llm_error_set(LLM_E_UNSUPPORTED, "%s: layer_types[%zu] is '%s': local "
                                     "and global layers that do not repeat every %lld are not "
                                     "supported", c->path, i, t ? t : "?", (long long)pat);
        }
        if (first_full == 0) /* no local layer */
            return llm_meta_set_i64(m, "hparams.sliding_window", 0);
    } else if (json_object_get(cfg, "sliding_window_pattern")) {
        LLM_TRY(cfg_int(cfg, c, "sliding_window_pattern", 0, 0, &pat));
    }
    if (pat)
        LLM_TRY(llm_meta_set_i64(m, "hparams.sliding_window_pattern", pat));
    return LLM_OK;
}

static llm_status set_config_meta(struct llm_file *f, const json_t *cfg, const char *dir,
                                  const struct hf_cfg *c)
{
    struct llm_meta *m = f->meta;
    LLM_TRY(llm_meta_set_str(m, "architecture", c->arch));
    const char *name = json_string_value(json_object_get(cfg, "_name_or_path"));
    if (!name || !*name) {
        size_t n = strlen(dir);
        while (n > 1 && dir[n - 1] == '/')
            n--;
        const char *b = dir + n;
        while (b > dir && b[-1] != '/')
            b--;
        LLM_TRY(llm_meta_set_strn(m, "name", b, (size_t)(dir + n - b)));
    } else {
        LLM_TRY(llm_meta_set_str(m, "name", name));
    }
    const struct { const char *key; int64_t v; } ints[] = {
        { "hparams.vocab_size", c->V },         { "hparams.context_length", c->ctx },
        { "hparams.embedding_length", c->H },   { "hparams.block_count", c->L },
        { "hparams.feed_forward_length", c->I }, { "hparams.head_count", c->nH },
        { "hparams.head_count_kv", c->nKV },     { "hparams.head_dim", c->hd },
        { "hparams.rope_dim", c->hd },
    };
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++)
        LLM_TRY(llm_meta_set_i64(m, ints[i].key, ints[i].v));
    double eps = 1e-6; /* the transformers config-class default */
    if (cfg_num(cfg, "rms_norm_eps", c->path, "", &eps) < 0)
        return LLM_E_FORMAT;
    LLM_TRY(llm_meta_set_f32(m, "hparams.rms_norm_eps", (float)eps));
    if (c->swa)
        LLM_TRY(llm_meta_set_i64(m, "hparams.sliding_window", c->swa));
    if (c->E) {
        LLM_TRY(llm_meta_set_i64(m, "hparams.expert_count", c->E));
        LLM_TRY(llm_meta_set_i64(m, "hparams.expert_used_count", c->K));
        LLM_TRY(llm_meta_set_i64(m, "hparams.expert_feed_forward_length", c->EI));
        if (c->S)
            LLM_TRY(llm_meta_set_i64(m, "hparams.expert_shared_feed_forward_length", c->S));
        if (c->enorm >= 0)
            LLM_TRY(llm_meta_set_bool(m, "hparams.expert_weights_norm", c->enorm));
    }
    if (c->gemma)
        LLM_TRY(set_gemma(m, cfg, c));
    double prf = 1;
    if (cfg_num(cfg, "partial_rotary_factor", c->path, "", &prf) < 0)
        return LLM_E_FORMAT;
    if (prf != 1)
        return llm_error_set(LLM_E_UNSUPPORTED, "%s: partial_rotary_factor %g (RoPE on part of "
                             "each head) is not supported", c->path, prf);
    LLM_TRY(set_rope(f, cfg, c));
    LLM_TRY(llm_meta_set_str(m, "source.format", "hf"));
    LLM_TRY(llm_meta_set_str(m, "source.path", dir));
    return LLM_OK;
}

/* ------------------------------------------------------------------------ */
/* weights */

struct hf_w {
    char name[LLM_MAX_NAME]; /* GGUF name */
    char *src;               /* HF name (owned) */
    uint32_t shard;          /* index into the shard paths */
    int type;
    uint32_t n_dims;
    int64_t ne[LLM_MAX_DIMS];
    const uint8_t *data;
    uint64_t nbytes;
    int64_t order;           /* sort key: file position in GGUF order */
    uint64_t perm_heads;     /* 0: no permutation */
    int plus_one;            /* a Gemma norm: stored as f32 1 + w */
    llm_fill_fn fill;        /* GPTQ/AWQ weights: made by hf_quant.c */
    void *fill_ctx;
};

struct hf_load {
    struct llm_file *f;
    const struct hf_cfg *c;
    char **shards;           /* (n_shards) paths */
    uint32_t n_shards, cur;
    size_t cap_shards;
    json_t *weight_map;      /* index mode */
    const char *ipath;       /* DIR/model.safetensors.index.json */
    const char *shard_file;  /* the current shard's name in the index */
    size_t n_listed;
    struct hf_w *w;
    size_t n, cap;
    struct llm_hfq *q;       /* GPTQ/AWQ checkpoint, or NULL */
    struct moe_piece *pieces; /* (L, 3, E): each expert's gate, up, down, or NULL */
};

/* One expert's matrix: its own tensor (experts.N.gate_proj) or rows of a
 * tensor of all experts (transformers v5's experts.gate_up_proj). */
struct moe_piece {
    const uint8_t *data; /* NULL: not seen */
    int type;
    const char *shard;
};

static const struct {
    const char *hf, *gguf;
} layer_names[] = {
    { "input_layernorm", "attn_norm" },
    { "self_attn.q_proj", "attn_q" },
    { "self_attn.k_proj", "attn_k" },
    { "self_attn.v_proj", "attn_v" },
    { "self_attn.o_proj", "attn_output" },
    { "post_attention_layernorm", "ffn_norm" },
    { "mlp.gate_proj", "ffn_gate" },
    { "mlp.up_proj", "ffn_up" },
    { "mlp.down_proj", "ffn_down" },
    { "self_attn.q_norm", "attn_q_norm" },
    { "self_attn.k_norm", "attn_k_norm" },
    { "pre_feedforward_layernorm", "ffn_norm" },
    { "post_feedforward_layernorm", "post_ffw_norm" },
    { "self_attn.qkv_proj", "attn_qkv" },
    { "mlp.gate_up_proj", "ffn_gate_up" },
};
/* slots of the names some architectures alone have */
enum { SLOT_POST_ATTN = 5, SLOT_QK_NORM = 9, SLOT_PRE_FFN = 11, SLOT_POST_FFN = 12,
       SLOT_QKV = 13, SLOT_GATE_UP = 14 };
#define N_LAYER_NAMES (sizeof layer_names / sizeof layer_names[0])

static int ends_with(const char *s, const char *suf)
{
    size_t n = strlen(s), k = strlen(suf);
    return n >= k && strcmp(s + n - k, suf) == 0;
}

/* HF name -> GGUF name. 1: mapped; 0: dropped; -1: unknown. *layer is -1
 * for tensors outside the blocks, *slot the position of the name within
 * its group, *bias whether it is a bias. */
static int map_name(const struct hf_cfg *c, const char *hf, char *out, int64_t *layer,
                    size_t *slot, int *bias)
{
    *layer = -1;
    *bias = 0;
    if (ends_with(hf, ".rotary_emb.inv_freq") || ends_with(hf, ".attention.masked_bias"))
        return 0;
    static const char *const globals[][2] = { { "model.embed_tokens.weight", "token_embd.weight" },
                                              { "model.norm.weight", "output_norm.weight" },
                                              { "lm_head.weight", "output.weight" } };
    for (size_t i = 0; i < 3; i++)
        if (strcmp(hf, globals[i][0]) == 0) {
            snprintf(out, LLM_MAX_NAME, "%s", globals[i][1]);
            *slot = i;
            return 1;
        }
    static const char prefix[] = "model.layers.";
    if (strncmp(hf, prefix, sizeof prefix - 1) != 0)
        return -1;
    const char *p = hf + sizeof prefix - 1;
    int64_t l = 0;
    int digits = 0;
    for (; *p >= '0' && *p <= '9' && digits < 9; p++, digits++)
        l = l * 10 + (*p - '0');
    if (!digits || *p != '.')
        return -1;
    p++;
    for (size_t i = 0; i < N_LAYER_NAMES; i++) {
        size_t k = strlen(layer_names[i].hf);
        if (strncmp(p, layer_names[i].hf, k) != 0)
            continue;
        if (strcmp(p + k, ".weight") == 0 || strcmp(p + k, ".bias") == 0) {
            *bias = p[k + 1] == 'b';
            /* Gemma's post_attention_layernorm follows attention; its
             * pre_feedforward_layernorm is everyone else's ffn_norm */
            const char *g = c->gemma && i == SLOT_POST_ATTN ? "post_attention_norm"
                                                            : layer_names[i].gguf;
            if (!c->gemma && (i == SLOT_PRE_FFN || i == SLOT_POST_FFN))
                return -1;
            if (!c->fused && (i == SLOT_QKV || i == SLOT_GATE_UP))
                return -1;
            snprintf(out, LLM_MAX_NAME, "blk.%lld.%s.%s", (long long)l, g,
                     *bias ? "bias" : "weight");
            *layer = l;
            *slot = i;
            return 1;
        }
    }
    return -1;
}

/* The ggml shape config.json implies for a tensor. */
static uint32_t expected_ne(const struct hf_cfg *c, int64_t layer, size_t slot, int bias,
                            int64_t *ne)
{
    int64_t q = c->nH * c->hd, kv = c->nKV * c->hd;
    if (layer < 0) {
        if (slot == 1) { /* output_norm */
            ne[0] = c->H;
            return 1;
        }
        ne[0] = c->H;
        ne[1] = c->V;
        return 2;
    }
    /* rows (out) and columns (in) of each projection, by slot */
    const int64_t rows[N_LAYER_NAMES] = { c->H,  q,     kv,   kv,          c->H,
                                          c->H,  c->I,  c->I, c->H,        c->hd,
                                          c->hd, c->H,  c->H, q + 2 * kv,  2 * c->I };
    const int64_t cols[N_LAYER_NAMES] = { 0,    c->H, c->H, c->H, q, 0,    c->H, c->H,
                                          c->I, 0,    0,    0,    0, c->H, c->H };
    if (bias || !cols[slot]) {
        ne[0] = rows[slot];
        return 1;
    }
    ne[0] = cols[slot];
    ne[1] = rows[slot];
    return 2;
}

static void shape_str(char *buf, size_t n, uint32_t nd, const int64_t *ne)
{
    size_t k = 0;
    k += (size_t)snprintf(buf, n, "[");
    for (uint32_t d = nd; d-- > 0 && k < n;)
        k += (size_t)snprintf(buf + k, n - k, "%lld%s", (long long)ne[d], d ? ", " : "");
    if (k < n)
        snprintf(buf + k, n - k, "]");
}

static llm_status check_index(struct hf_load *ld, const char *name, const char *shard)
{
    if (!ld->weight_map)
        return LLM_OK;
    const char *want = json_string_value(json_object_get(ld->weight_map, name));
    if (!want)
        return llm_error_set(LLM_E_FORMAT,
                             "%s: tensor '%s' is not listed in model.safetensors.index.json",
                             shard, name);
    if (strcmp(want, ld->shard_file) != 0)
        return llm_error_set(LLM_E_FORMAT,
                             "%s: tensor '%s' is listed in model.safetensors.index.json "
                             "under '%s'",
                             shard, name, want);
    ld->n_listed++;
    return LLM_OK;
}

/* token_embd first, then the blocks in order, then output_norm, output */
static int64_t w_order(int64_t layer, size_t slot, int bias)
{
    return layer < 0 ? (slot == 0 ? -1 : (int64_t)1 << 40 | (int64_t)slot)
                     : layer * 64 + (int64_t)slot * 2 + bias;
}

/* qweight/qzeros/scales/g_idx of a GPTQ/AWQ linear layer, to hf_quant.c */
static llm_status collect_quant(struct hf_load *ld, const struct llm_st_entry *e, int part,
                                size_t blen, const char *shard)
{
    const struct hf_cfg *c = ld->c;
    char hf[LLM_MAX_NAME + 8], gname[LLM_MAX_NAME];
    int64_t layer, ne[LLM_MAX_DIMS] = { 1, 1, 1, 1 };
    size_t slot;
    int bias;
    LLM_CHECK(blen < LLM_MAX_NAME, LLM_E_FORMAT, "%s: tensor name of %zu bytes", shard, blen);
    snprintf(hf, sizeof hf, "%.*s.weight", (int)blen, e->name);
    if (map_name(c, hf, gname, &layer, &slot, &bias) != 1 || slot >= SLOT_QKV ||
        expected_ne(c, layer, slot, 0, ne) != 2)
        return llm_error_set(LLM_E_UNSUPPORTED,
                             "%s: tensor '%s': not a quantized linear layer of %s", shard,
                             e->name, c->arch);
    if (layer >= c->L)
        return llm_error_set(LLM_E_FORMAT,
                             "%s: tensor '%s': layer %lld but num_hidden_layers is %lld", shard,
                             e->name, (long long)layer, (long long)c->L);
    uint64_t heads = c->permute && (slot == 1 || slot == 2) && layer >= 0
                         ? (uint64_t)(slot == 1 ? c->nH : c->nKV)
                         : 0;
    return llm_hfq_add(ld->q, e, part, shard, gname, ne[0], ne[1], heads,
                       w_order(layer, slot, 0));
}

/* Phi-3's qkv_proj and gate_up_proj (the last entry of ld->w) into the
 * row ranges every other tool reads: attn_q, attn_k, attn_v; ffn_gate,
 * ffn_up (gate first), the same bytes. */
static llm_status split_fused(struct hf_load *ld, int64_t layer, size_t slot)
{
    const struct hf_cfg *c = ld->c;
    const int n = slot == SLOT_QKV ? 3 : 2;
    const size_t slots[2][3] = { { 1, 2, 3 }, { 6, 7, 0 } };
    const int64_t rows[2][3] = { { c->nH * c->hd, c->nKV * c->hd, c->nKV * c->hd },
                                 { c->I, c->I, 0 } };
    struct hf_w whole = ld->w[ld->n - 1];
    ld->n--;
    uint64_t row_bytes = whole.nbytes / (uint64_t)whole.ne[1], off = 0;
    llm_status s = LLM_OK;
    for (int k = 0; k < n && !s; k++) {
        const int g = slot == SLOT_QKV ? 0 : 1;
        s = llm_grow((void **)&ld->w, &ld->cap, ld->n + 1, sizeof *ld->w);
        if (s)
            break;
        struct hf_w *w = &ld->w[ld->n];
        *w = whole;
        if (!(w->src = llm_strdup(whole.src))) {
            s = LLM_E_NOMEM;
            break;
        }
        ld->n++;
        snprintf(w->name, sizeof w->name, "blk.%lld.%s.weight", (long long)layer,
                 layer_names[slots[g][k]].gguf);
        w->ne[1] = rows[g][k];
        w->data = whole.data + off;
        w->nbytes = row_bytes * (uint64_t)rows[g][k];
        w->order = w_order(layer, slots[g][k], 0);
        off += w->nbytes;
    }
    llm_free(whole.src);
    return s;
}

/* A plain tensor of a mixture-of-experts layer (the router, the shared
 * expert): name and expected shape. 0: not one. */
static int moe_plain(const struct hf_cfg *c, const char *rest, int64_t layer, char *gname,
                     uint32_t *nd, int64_t *ne, int *slot)
{
    static const struct { const char *hf, *gguf; int kind; } names[] = {
        { "block_sparse_moe.gate.weight", "ffn_gate_inp", 0 },
        { "mlp.gate.weight", "ffn_gate_inp", 0 },
        { "mlp.shared_expert.gate_proj.weight", "ffn_gate_shexp", 1 },
        { "mlp.shared_expert.up_proj.weight", "ffn_up_shexp", 1 },
        { "mlp.shared_expert.down_proj.weight", "ffn_down_shexp", 2 },
        { "mlp.shared_expert_gate.weight", "ffn_gate_inp_shexp", 3 },
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        if (strcmp(rest, names[i].hf))
            continue;
        snprintf(gname, LLM_MAX_NAME, "blk.%lld.%s.weight", (long long)layer, names[i].gguf);
        const int k = names[i].kind;
        *slot = (int)i;
        *nd = k == 3 ? 1 : 2;
        ne[0] = k == 2 ? c->S : c->H;
        ne[1] = k == 0 ? c->E : k == 1 ? c->S : k == 2 ? c->H : 1;
        return k > 0 && !c->S ? 0 : 1;
    }
    return 0;
}

/* Experts' matrices: experts.N.{gate,up,down}_proj (Qwen), experts.N.w1,
 * w3, w2 (Mixtral), or v5's experts.gate_up_proj and experts.down_proj
 * holding every expert. 1: taken (or an error set in *st); 0: not one. */
static int moe_expert(struct hf_load *ld, const struct llm_st_entry *e, const char *rest,
                      int64_t layer, const char *shard, llm_status *st)
{
    const struct hf_cfg *c = ld->c;
    static const char *const kinds[][3] = { { "gate_proj.weight", "up_proj.weight",
                                              "down_proj.weight" },
                                            { "w1.weight", "w3.weight", "w2.weight" } };
    const char *p = rest;
    const int mixtral = !strncmp(p, "block_sparse_moe.experts.", 25);
    if (!mixtral && strncmp(p, "mlp.experts.", 12))
        return 0;
    p += mixtral ? 25 : 12;
    *st = LLM_OK;
    const size_t es = e->type == LLM_TYPE_F32 ? 4 : 2;
    struct moe_piece *lp = ld->pieces + layer * 3 * c->E;
    int64_t want[3];
    uint32_t nd;
    if (!mixtral && (!strcmp(p, "gate_up_proj") || !strcmp(p, "down_proj"))) {
        const int down = p[0] == 'd';
        nd = 3;
        want[0] = down ? c->EI : c->H, want[1] = down ? c->H : 2 * c->EI, want[2] = c->E;
        if (e->n_dims != nd || memcmp(e->ne, want, sizeof want)) {
            *st = llm_error_set(LLM_E_FORMAT, "%s: tensor '%s': not [%lld, %lld, %lld]", shard,
                                e->name, (long long)want[2], (long long)want[1],
                                (long long)want[0]);
            return 1;
        }
        /* expert x's rows start at x * per; gate_up's up half EI rows on */
        const uint64_t row = (uint64_t)want[0] * es, per = (uint64_t)want[1] * row;
        for (int64_t x = 0; x < c->E; x++) {
            const uint8_t *at = e->data + (uint64_t)x * per;
            if (down) {
                lp[2 * c->E + x] = (struct moe_piece){ at, e->type, shard };
            } else {
                lp[x] = (struct moe_piece){ at, e->type, shard };
                lp[c->E + x] = (struct moe_piece){ at + (uint64_t)c->EI * row, e->type, shard };
            }
        }
        return 1;
    }
    int64_t x = 0;
    int digits = 0;
    for (; *p >= '0' && *p <= '9' && digits < 9; p++, digits++)
        x = x * 10 + (*p - '0');
    if (!digits || *p != '.')
        return 0;
    p++;
    for (int k = 0; k < 3; k++) {
        if (strcmp(p, kinds[mixtral][k]))
            continue;
        if (x >= c->E) {
            *st = llm_error_set(LLM_E_FORMAT, "%s: tensor '%s': expert %lld of %lld", shard,
                                e->name, (long long)x, (long long)c->E);
            return 1;
        }
        want[0] = k == 2 ? c->EI : c->H, want[1] = k == 2 ? c->H : c->EI;
        if (e->n_dims != 2 || e->ne[0] != want[0] || e->ne[1] != want[1]) {
            *st = llm_error_set(LLM_E_FORMAT, "%s: tensor '%s': not [%lld, %lld]", shard, e->name,
                                (long long)want[1], (long long)want[0]);
            return 1;
        }
        lp[k * c->E + x] = (struct moe_piece){ e->data, e->type, shard };
        return 1;
    }
    return 0;
}

/* A mixture-of-experts layer's tensor: the router, the shared expert (into
 * ld->w) or an expert's piece (into ld->pieces). 1: taken. */
static int collect_moe(struct hf_load *ld, const struct llm_st_entry *e, const char *shard,
                       llm_status *st)
{
    const struct hf_cfg *c = ld->c;
    static const char prefix[] = "model.layers.";
    *st = LLM_OK;
    if (!c->E || strncmp(e->name, prefix, sizeof prefix - 1))
        return 0;
    const char *p = e->name + sizeof prefix - 1;
    int64_t l = 0;
    int digits = 0;
    for (; *p >= '0' && *p <= '9' && digits < 9; p++, digits++)
        l = l * 10 + (*p - '0');
    if (!digits || *p != '.' || l >= c->L)
        return 0;
    p++;
    if (e->type < 0) {
        if (strstr(p, "experts") || strstr(p, "gate"))
            *st = llm_error_set(LLM_E_UNSUPPORTED, "%s: tensor '%s': dtype %s is not supported "
                                "(F32, F16 and BF16 only)", shard, e->name, e->dtype);
        return *st != LLM_OK;
    }
    if (moe_expert(ld, e, p, l, shard, st))
        return 1;
    char gname[LLM_MAX_NAME];
    uint32_t nd;
    int64_t ne[LLM_MAX_DIMS] = { 1, 1, 1, 1 };
    int slot;
    if (!moe_plain(c, p, l, gname, &nd, ne, &slot))
        return 0;
    /* the shared gate is a Linear(hidden, 1): a row, kept as a vector */
    const int vec = nd == 1;
    if (e->n_dims != (vec ? 2 : nd) || e->ne[0] != ne[0] || e->ne[1] != (vec ? 1 : ne[1])) {
        *st = llm_error_set(LLM_E_FORMAT, "%s: tensor '%s': not [%lld, %lld]", shard, e->name,
                            (long long)(vec ? 1 : ne[1]), (long long)ne[0]);
        return 1;
    }
    if ((*st = llm_grow((void **)&ld->w, &ld->cap, ld->n + 1, sizeof *ld->w)))
        return 1;
    struct hf_w *w = &ld->w[ld->n];
    memset(w, 0, sizeof *w);
    if (!(w->src = llm_strdup(e->name))) {
        *st = LLM_E_NOMEM;
        return 1;
    }
    ld->n++;
    memcpy(w->name, gname, sizeof gname);
    w->shard = ld->cur;
    w->type = e->type;
    w->n_dims = nd;
    memcpy(w->ne, ne, sizeof w->ne);
    w->data = e->data;
    w->nbytes = e->nbytes;
    w->order = l * 64 + 40 + slot; /* after the layer's own tensors */
    return 1;
}

struct moe_fill {
    const struct moe_piece *p; /* (E) */
    int64_t n;
    uint64_t bytes;            /* of one expert's matrix */
};

static llm_status fill_experts(const struct llm_tensor *t, void *dst, void *vctx)
{
    (void)t;
    const struct moe_fill *m = vctx;
    for (int64_t i = 0; i < m->n; i++)
        memcpy((uint8_t *)dst + (uint64_t)i * m->bytes, m->p[i].data, (size_t)m->bytes);
    return LLM_OK;
}

/* Each layer's ffn_{gate,up,down}_exps: the experts' pieces one after the
 * other, all of them there and of one dtype. */
static llm_status add_experts(struct hf_load *ld, const char *dir)
{
    const struct hf_cfg *c = ld->c;
    static const char *const gg[3] = { "ffn_gate_exps", "ffn_up_exps", "ffn_down_exps" };
    for (int64_t l = 0; l < c->L; l++)
        for (int k = 0; k < 3; k++) {
            const struct moe_piece *p = ld->pieces + (l * 3 + k) * c->E;
            for (int64_t x = 0; x < c->E; x++) {
                if (!p[x].data)
                    return llm_error_set(LLM_E_FORMAT, "%s: layer %lld: expert %lld's %s is "
                                         "missing", dir, (long long)l, (long long)x,
                                         k == 0 ? "gate" : k == 1 ? "up" : "down projection");
                if (p[x].type != p[0].type)
                    return llm_error_set(LLM_E_UNSUPPORTED, "%s: layer %lld: experts of "
                                         "different dtypes", dir, (long long)l);
            }
            struct moe_fill *m = llm_malloc(sizeof *m);
            if (!m)
                return LLM_E_NOMEM;
            LLM_TRY(llm_file_own(ld->f, m));
            const uint64_t es = p[0].type == LLM_TYPE_F32 ? 4 : 2;
            *m = (struct moe_fill){ p, c->E, (uint64_t)c->H * (uint64_t)c->EI * es };
            LLM_TRY(llm_grow((void **)&ld->w, &ld->cap, ld->n + 1, sizeof *ld->w));
            struct hf_w *w = &ld->w[ld->n];
            memset(w, 0, sizeof *w);
            snprintf(w->name, sizeof w->name, "blk.%lld.%s.weight", (long long)l, gg[k]);
            if (!(w->src = llm_strdup(w->name)))
                return LLM_E_NOMEM;
            ld->n++;
            w->type = p[0].type;
            w->n_dims = 3;
            w->ne[0] = k == 2 ? c->EI : c->H;
            w->ne[1] = k == 2 ? c->H : c->EI;
            w->ne[2] = c->E;
            w->ne[3] = 1;
            w->order = l * 64 + 50 + k;
            w->fill = fill_experts;
            w->fill_ctx = m;
        }
    return LLM_OK;
}

static llm_status collect(const struct llm_st_entry *e, void *vctx)
{
    struct hf_load *ld = vctx;
    const struct hf_cfg *c = ld->c;
    const char *shard = ld->shards[ld->cur];
    LLM_TRY(check_index(ld, e->name, shard));
    llm_status ms;
    if (!ld->q && collect_moe(ld, e, shard, &ms))
        return ms;
    size_t blen;
    int part = ld->q ? llm_hfq_part(e->name, &blen) : -1;
    if (part >= 0)
        return collect_quant(ld, e, part, blen, shard);
    char gname[LLM_MAX_NAME];
    int64_t layer;
    size_t slot;
    int bias;
    int r = map_name(c, e->name, gname, &layer, &slot, &bias);
    if (r == 0)
        return LLM_OK;
    if (r < 0)
        return llm_error_set(LLM_E_UNSUPPORTED,
                             "%s: tensor '%s': not a %s weight this importer knows", shard,
                             e->name, c->arch);
    if (layer >= c->L)
        return llm_error_set(LLM_E_FORMAT,
                             "%s: tensor '%s': layer %lld but num_hidden_layers is %lld", shard,
                             e->name, (long long)layer, (long long)c->L);
    if (e->type < 0)
        return llm_error_set(LLM_E_UNSUPPORTED,
                             "%s: tensor '%s': dtype %s is not supported (F32, F16 and BF16 only)",
                             shard, e->name, e->dtype);
    int64_t ne[LLM_MAX_DIMS] = { 1, 1, 1, 1 };
    uint32_t nd = expected_ne(c, layer, slot, bias, ne);
    if (nd != e->n_dims || memcmp(ne, e->ne, sizeof ne) != 0) {
        char got[96], want[96];
        shape_str(got, sizeof got, e->n_dims, e->ne);
        shape_str(want, sizeof want, nd, ne);
        return llm_error_set(LLM_E_FORMAT,
                             "%s: tensor '%s': shape %s does not match config.json "
                             "(expected %s)",
                             shard, e->name, got, want);
    }
    LLM_TRY(llm_grow((void **)&ld->w, &ld->cap, ld->n + 1, sizeof *ld->w));
    struct hf_w *w = &ld->w[ld->n];
    memset(w, 0, sizeof *w);
    w->src = llm_strdup(e->name);
    if (!w->src)
        return LLM_E_NOMEM;
    ld->n++;
    memcpy(w->name, gname, sizeof gname);
    w->shard = ld->cur;
    w->type = e->type;
    w->n_dims = e->n_dims;
    memcpy(w->ne, e->ne, sizeof w->ne);
    w->data = e->data;
    w->nbytes = e->nbytes;
    w->order = w_order(layer, slot, bias);
    if (c->permute && (slot == 1 || slot == 2) && layer >= 0)
        w->perm_heads = (uint64_t)(slot == 1 ? c->nH : c->nKV);
    /* GGUF (and so .llm) holds Gemma's norms as 1 + w, llama.cpp's form */
    w->plus_one = c->gemma && strstr(gname, "norm.weight") != NULL;
    if (layer >= 0 && (slot == SLOT_QKV || slot == SLOT_GATE_UP))
        return split_fused(ld, layer, slot);
    return LLM_OK;
}

static int w_cmp(const void *a, const void *b)
{
    const struct hf_w *x = a, *y = b;
    return x->order < y->order ? -1 : x->order > y->order;
}

static llm_status add_shard(struct hf_load *ld, const char *dir, const char *file)
{
    if (!*file || strchr(file, '/') || strcmp(file, ".") == 0 || strcmp(file, "..") == 0)
        return llm_error_set(LLM_E_FORMAT, "%s: bad shard file name '%s'", ld->ipath, file);
    char path[4096];
    LLM_TRY(llm_hf_path(path, sizeof path, dir, file));
    for (uint32_t i = 0; i < ld->n_shards; i++)
        if (strcmp(ld->shards[i], path) == 0)
            return LLM_OK;
    LLM_TRY(llm_grow((void **)&ld->shards, &ld->cap_shards, ld->n_shards + 1, sizeof *ld->shards));
    ld->shards[ld->n_shards] = llm_strdup(path);
    if (!ld->shards[ld->n_shards])
        return LLM_E_NOMEM;
    ld->n_shards++;
    return LLM_OK;
}

static llm_status scan_shards(struct hf_load *ld)
{
    for (uint32_t i = 0; i < ld->n_shards; i++) {
        struct llm_map m;
        LLM_TRY(llm_model_map(&m, ld->shards[i]));
        const uint8_t *data = m.data;
        size_t size = m.size;
        LLM_TRY(llm_file_add_map(ld->f, &m));
        ld->cur = i;
        const char *p = ld->shards[i] + strlen(ld->shards[i]);
        while (p > ld->shards[i] && p[-1] != '/')
            p--;
        ld->shard_file = p;
        LLM_TRY(llm_st_scan(data, size, ld->shards[i], NULL, collect, ld));
    }
    if (ld->weight_map && ld->n_listed != json_object_size(ld->weight_map)) {
        const char *key;
        json_t *v;
        json_object_foreach(ld->weight_map, key, v) {
            size_t blen;
            int found = ld->q && llm_hfq_part(key, &blen) >= 0; /* checked by hf_quant.c */
            for (size_t i = 0; i < ld->n && !found; i++)
                found = strcmp(ld->w[i].src, key) == 0;
            if (!found && !ends_with(key, ".rotary_emb.inv_freq") &&
                !ends_with(key, ".attention.masked_bias"))
                return llm_error_set(LLM_E_FORMAT, "%s: tensor '%s' is not in its shard '%s'",
                                     ld->ipath, key,
                                     json_string_value(v) ? json_string_value(v) : "?");
        }
    }
    return LLM_OK;
}

static int have(const struct hf_load *ld, const char *name)
{
    for (size_t i = 0; i < ld->n; i++)
        if (strcmp(ld->w[i].name, name) == 0)
            return 1;
    return 0;
}

/* Each layer's tensors by their GGUF names, each with the Hugging Face
 * name to report when it is missing. */
static llm_status check_complete(struct hf_load *ld, const char *dir, struct hf_cfg *c)
{
    char name[LLM_MAX_NAME];
    if (!have(ld, "token_embd.weight"))
        return llm_error_set(LLM_E_FORMAT, "%s: missing tensor 'model.embed_tokens.weight'", dir);
    if (!have(ld, "output_norm.weight"))
        return llm_error_set(LLM_E_FORMAT, "%s: missing tensor 'model.norm.weight'", dir);
    static const struct { const char *gguf, *hf, *fused; } req[] = {
        { "attn_norm.weight", "input_layernorm.weight", NULL },
        { "attn_q.weight", "self_attn.q_proj.weight", "self_attn.qkv_proj.weight" },
        { "attn_k.weight", "self_attn.k_proj.weight", "self_attn.qkv_proj.weight" },
        { "attn_v.weight", "self_attn.v_proj.weight", "self_attn.qkv_proj.weight" },
        { "attn_output.weight", "self_attn.o_proj.weight", NULL },
        { "ffn_gate.weight", "mlp.gate_proj.weight", "mlp.gate_up_proj.weight" },
        { "ffn_up.weight", "mlp.up_proj.weight", "mlp.gate_up_proj.weight" },
        { "ffn_down.weight", "mlp.down_proj.weight", NULL },
        { "attn_q.bias", "self_attn.q_proj.bias", NULL },     /* 8: qkv_bias */
        { "attn_k.bias", "self_attn.k_proj.bias", NULL },
        { "attn_v.bias", "self_attn.v_proj.bias", NULL },
        { "attn_q_norm.weight", "self_attn.q_norm.weight", NULL }, /* 11: qk_norm */
        { "attn_k_norm.weight", "self_attn.k_norm.weight", NULL },
        { "ffn_norm.weight", "post_attention_layernorm.weight", NULL }, /* 13: not gemma */
        { "ffn_norm.weight", "pre_feedforward_layernorm.weight", NULL }, /* 14: gemma */
        { "post_attention_norm.weight", "post_attention_layernorm.weight", NULL },
        { "post_ffw_norm.weight", "post_feedforward_layernorm.weight", NULL },
    };
    for (int64_t l = 0; l < c->L && !c->qk_norm; l++)
        for (size_t i = 11; i < 13; i++) {
            snprintf(name, sizeof name, "blk.%lld.%s", (long long)l, req[i].gguf);
            if (have(ld, name))
                return llm_error_set(LLM_E_FORMAT, "%s: tensor 'model.layers.%lld.%s': %s has "
                                     "no q/k norms", dir, (long long)l, req[i].hf, c->arch);
        }
    for (int64_t l = 0; l < c->L; l++)
        for (size_t i = 0; i < sizeof req / sizeof req[0]; i++) {
            int want = i < 8 || (i < 11 ? c->qkv_bias : i < 13 ? c->qk_norm
                                                     : i == 13 ? !c->gemma : c->gemma);
            if (c->E && i >= 5 && i < 8) /* the experts take the feed-forward's place */
                want = 0;
            snprintf(name, sizeof name, "blk.%lld.%s", (long long)l, req[i].gguf);
            if (want && !have(ld, name))
                return llm_error_set(LLM_E_FORMAT, "%s: missing tensor 'model.layers.%lld.%s'",
                                     dir, (long long)l,
                                     c->fused && req[i].fused ? req[i].fused : req[i].hf);
        }
    for (int64_t l = 0; l < c->L && c->E; l++) {
        static const char *const moe[][2] = {
            { "ffn_gate_inp.weight", "the router (mlp.gate or block_sparse_moe.gate)" },
            { "ffn_gate_shexp.weight", "mlp.shared_expert.gate_proj.weight" },
            { "ffn_up_shexp.weight", "mlp.shared_expert.up_proj.weight" },
            { "ffn_down_shexp.weight", "mlp.shared_expert.down_proj.weight" },
            { "ffn_gate_inp_shexp.weight", "mlp.shared_expert_gate.weight" },
        };
        for (size_t i = 0; i < (c->S ? 5u : 1u); i++) {
            snprintf(name, sizeof name, "blk.%lld.%s", (long long)l, moe[i][0]);
            if (!have(ld, name))
                return llm_error_set(LLM_E_FORMAT, "%s: layer %lld: missing %s", dir,
                                     (long long)l, moe[i][1]);
        }
    }
    /* Without lm_head the output layer is the embedding, as in llama.cpp. */
    if (!have(ld, "output.weight"))
        c->tie = 1;
    return LLM_OK;
}

struct perm_ctx {
    const uint8_t *src;
    uint64_t n_rows, row_bytes, n_head;
};

static llm_status fill_perm(const struct llm_tensor *t, void *dst, void *vctx)
{
    (void)t;
    const struct perm_ctx *p = vctx;
    llm_hf_permute_qk(dst, p->src, p->n_rows, p->row_bytes, p->n_head);
    return LLM_OK;
}

static llm_status fill_copy(const struct llm_tensor *t, void *dst, void *ctx)
{
    memcpy(dst, ctx, (size_t)t->nbytes);
    return LLM_OK;
}

struct plus_one_ctx {
    const uint8_t *src;
    int type;           /* the source's: F32, F16 or BF16 */
};

/* A Gemma norm as f32 1 + w, the sum in float as llama.cpp's converter
 * makes it (HF's Gemma computes x * (1 + w) in float too). */
static llm_status fill_plus_one(const struct llm_tensor *t, void *dst, void *vctx)
{
    const struct plus_one_ctx *p = vctx;
    float *out = dst;
    for (int64_t i = 0; i < t->ne[0]; i++) {
        float v;
        uint16_t h;
        if (p->type == LLM_TYPE_F32) {
            memcpy(&v, p->src + 4 * i, 4);
        } else {
            memcpy(&h, p->src + 2 * i, 2);
            v = p->type == LLM_TYPE_F16 ? llm_fp16_to_fp32(h) : llm_bf16_to_fp32(h);
        }
        out[i] = v + 1.0f;
    }
    return LLM_OK;
}

static llm_status add_weights(struct hf_load *ld, const struct hf_cfg *c)
{
    qsort(ld->w, ld->n, sizeof *ld->w, w_cmp);
    for (size_t i = 0; i < ld->n; i++) {
        struct hf_w *w = &ld->w[i];
        if (c->tie && strcmp(w->name, "output.weight") == 0)
            continue;
        size_t esize = w->type == LLM_TYPE_F32 || w->type == LLM_TYPE_I32 ? 4 : 2;
        int aligned = (uintptr_t)w->data % esize == 0;
        struct llm_tensor *t;
        if (w->fill) {
            LLM_TRY(llm_file_add_tensor(ld->f, w->name, (enum llm_type)w->type, w->n_dims, w->ne,
                                        NULL, &t));
            t->fill = w->fill;
            t->fill_ctx = w->fill_ctx;
            continue;
        }
        if (w->plus_one) {
            LLM_TRY(llm_file_add_tensor(ld->f, w->name, LLM_TYPE_F32, w->n_dims, w->ne, NULL, &t));
            struct plus_one_ctx *p = llm_malloc(sizeof *p);
            if (!p)
                return LLM_E_NOMEM;
            p->src = w->data;
            p->type = w->type;
            LLM_TRY(llm_file_own(ld->f, p));
            t->fill = fill_plus_one;
            t->fill_ctx = p;
            continue;
        }
        LLM_TRY(llm_file_add_tensor(ld->f, w->name, (enum llm_type)w->type, w->n_dims, w->ne,
                                    w->perm_heads || !aligned ? NULL : w->data, &t));
        if (w->perm_heads) {
            struct perm_ctx *p = llm_malloc(sizeof *p);
            if (!p)
                return LLM_E_NOMEM;
            p->src = w->data;
            p->n_rows = (uint64_t)(w->n_dims == 1 ? w->ne[0] : w->ne[1]);
            p->row_bytes = w->n_dims == 1 ? esize : (uint64_t)w->ne[0] * esize;
            p->n_head = w->perm_heads;
            LLM_TRY(llm_file_own(ld->f, p));
            t->fill = fill_perm;
            t->fill_ctx = p;
        } else if (!aligned) {
            t->fill = fill_copy;
            t->fill_ctx = (void *)(uintptr_t)w->data;
        }
    }
    return LLM_OK;
}

/* The GPTQ/AWQ weights (and act-order .perm tensors) hf_quant.c made. */
static llm_status add_quant(struct hf_load *ld)
{
    LLM_TRY(llm_hfq_finish(ld->q, ld->f));
    for (size_t i = 0; i < llm_hfq_count(ld->q); i++) {
        struct llm_hfq_tensor t;
        llm_hfq_tensor(ld->q, i, &t);
        LLM_TRY(llm_grow((void **)&ld->w, &ld->cap, ld->n + 1, sizeof *ld->w));
        struct hf_w *w = &ld->w[ld->n];
        memset(w, 0, sizeof *w);
        if (!(w->src = llm_strdup(t.name)))
            return LLM_E_NOMEM;
        ld->n++;
        snprintf(w->name, sizeof w->name, "%s", t.name);
        w->type = (int)t.type;
        w->n_dims = t.n_dims;
        memcpy(w->ne, t.ne, sizeof w->ne);
        w->data = t.data;
        w->order = t.order;
        w->fill = t.fill;
        w->fill_ctx = t.fill_ctx;
    }
    return LLM_OK;
}

static llm_status load_weights(struct llm_file *f, const char *dir, struct hf_cfg *c,
                               struct llm_hfq *q)
{
    json_t *index = NULL;
    char ipath[4096];
    struct hf_load ld = { .f = f, .c = c, .ipath = ipath, .q = q };
    llm_status s = llm_hf_path(ipath, sizeof ipath, dir, "model.safetensors.index.json");
    if (s)
        return s;
    s = llm_hf_json_load(&index, dir, "model.safetensors.index.json", MAX_INDEX_JSON,
                         LLM_HF_JSON_OPTIONAL);
    if (s == LLM_E_NOTFOUND) {
        char path[4096];
        s = llm_hf_path(path, sizeof path, dir, "model.safetensors");
        if (!s && access(path, F_OK) != 0) {
            char bin[4096];
            int has_bin = llm_hf_path(bin, sizeof bin, dir, "pytorch_model.bin") == LLM_OK &&
                          access(bin, F_OK) == 0;
            s = has_bin ? llm_error_set(LLM_E_UNSUPPORTED,
                                        "%s: only pytorch_model.bin (a pickle) is there; "
                                        "safetensors weights are needed",
                                        dir)
                        : llm_error_set(LLM_E_NOTFOUND,
                                        "%s: no model.safetensors or "
                                        "model.safetensors.index.json",
                                        dir);
        }
        if (!s)
            s = add_shard(&ld, dir, "model.safetensors");
    } else if (!s) {
        ld.weight_map = json_object_get(index, "weight_map");
        if (!json_is_object(ld.weight_map)) {
            s = llm_error_set(LLM_E_FORMAT, "%s: missing key 'weight_map'", ipath);
        } else {
            const char *key;
            json_t *v;
            json_object_foreach(ld.weight_map, key, v) {
                if (!json_is_string(v)) {
                    s = llm_error_set(LLM_E_FORMAT, "%s: weight_map entry '%s' is not a string",
                                      ipath, key);
                    break;
                }
                s = add_shard(&ld, dir, json_string_value(v));
                if (s)
                    break;
            }
            if (!s && ld.n_shards == 0)
                s = llm_error_set(LLM_E_FORMAT, "%s: weight_map is empty", ipath);
        }
    }
    if (!s && c->E) {
        /* the file's: the experts' fills read them when it is written */
        ld.pieces = llm_calloc((size_t)(c->L * 3 * c->E), sizeof *ld.pieces);
        s = ld.pieces ? llm_file_own(f, ld.pieces) : LLM_E_NOMEM;
        if (!s && q)
            s = llm_error_set(LLM_E_UNSUPPORTED, "%s: GPTQ/AWQ mixtures of experts are not "
                              "supported", dir);
    }
    if (!s)
        s = scan_shards(&ld);
    if (!s && c->E)
        s = add_experts(&ld, dir);
    if (!s && q)
        s = add_quant(&ld);
    if (!s)
        s = check_complete(&ld, dir, c);
    if (!s)
        s = add_weights(&ld, c);
    for (size_t i = 0; i < ld.n; i++)
        llm_free(ld.w[i].src);
    llm_free(ld.w);
    for (uint32_t i = 0; i < ld.n_shards; i++)
        llm_free(ld.shards[i]);
    llm_free(ld.shards);
    json_decref(index);
    return s;
}

/* ------------------------------------------------------------------------ */
/* generation_config.json */

static llm_status json_to_meta(const json_t *j, const char *path, int depth, struct llm_meta **out)
{
    *out = NULL;
    if (depth > 16)
        return llm_error_set(LLM_E_FORMAT, "%s: nested too deeply", path);
    switch (json_typeof(j)) {
    case JSON_OBJECT: {
        struct llm_meta *m = llm_meta_new(LLM_META_MAP);
        if (!m)
            return LLM_E_NOMEM;
        const char *k;
        json_t *v;
        json_object_foreach((json_t *)j, k, v) {
            struct llm_meta *c;
            llm_status s = json_to_meta(v, path, depth + 1, &c);
            if (!s)
                s = llm_meta_put(m, k, c);
            if (s) {
                llm_meta_free(m);
                return s;
            }
        }
        *out = m;
        return LLM_OK;
    }
    case JSON_ARRAY: {
        struct llm_meta *m = llm_meta_new(LLM_META_SEQ);
        if (!m)
            return LLM_E_NOMEM;
        size_t i;
        json_t *v;
        json_array_foreach(j, i, v) {
            struct llm_meta *c;
            llm_status s = json_to_meta(v, path, depth + 1, &c);
            if (!s)
                s = llm_meta_push(m, c);
            if (s) {
                llm_meta_free(m);
                return s;
            }
        }
        *out = m;
        return LLM_OK;
    }
    case JSON_STRING: *out = llm_meta_new_strn(json_string_value(j), json_string_length(j)); break;
    case JSON_INTEGER: *out = llm_meta_new_i64(json_integer_value(j)); break;
    case JSON_REAL: *out = llm_meta_new_f64(json_real_value(j)); break;
    case JSON_TRUE: *out = llm_meta_new_bool(1); break;
    case JSON_FALSE: *out = llm_meta_new_bool(0); break;
    case JSON_NULL: *out = llm_meta_new(LLM_META_NULL); break;
    }
    return *out ? LLM_OK : LLM_E_NOMEM;
}

static llm_status read_generation(struct llm_file *f, const char *dir)
{
    json_t *g;
    llm_status s = llm_hf_json_load(&g, dir, "generation_config.json", MAX_CONFIG_JSON,
                                    LLM_HF_JSON_OPTIONAL);
    if (s == LLM_E_NOTFOUND)
        return LLM_OK;
    if (s)
        return s;
    char path[4096];
    s = llm_hf_path(path, sizeof path, dir, "generation_config.json");
    struct llm_meta *m = NULL;
    if (!s && !json_is_object(g))
        s = llm_error_set(LLM_E_FORMAT, "%s: not a JSON object", path);
    if (!s)
        s = json_to_meta(g, path, 0, &m);
    if (!s)
        s = llm_meta_set(f->meta, "generation", m);
    json_decref(g);
    return s;
}

/* ------------------------------------------------------------------------ */

static int64_t cfg_id(const json_t *cfg, const char *key)
{
    json_t *v = json_object_get(cfg, key);
    /* A list (several EOS ids) is not a single special id: skip, like the
     * converter. */
    return json_is_integer(v) && json_integer_value(v) >= 0 ? json_integer_value(v) : -1;
}

llm_status llm_hf_open(struct llm_file **out, const char *dir, const struct llm_import_opts *o)
{
    (void)o;
    *out = NULL;
    char cpath[4096];
    LLM_TRY(llm_hf_path(cpath, sizeof cpath, dir, "config.json"));
    if (!llm_is_dir(dir))
        return llm_error_set(LLM_E_INVALID, "%s: not a directory", dir);
    if (access(cpath, F_OK) != 0)
        return llm_error_set(LLM_E_NOTFOUND, "%s: no config.json (not a Hugging Face model "
                                             "directory)", dir);
    json_t *cfg;
    LLM_TRY(llm_hf_json_load(&cfg, dir, "config.json", MAX_CONFIG_JSON, 0));
    struct hf_cfg c = { .path = cpath };
    struct llm_file *f = NULL;
    struct llm_hfq *q = NULL;
    llm_status s = read_config(cfg, &c);
    if (!s)
        s = llm_hfq_new(&q, cfg, dir);
    if (!s)
        s = llm_file_new(&f, dir, "hf");
    if (!s) {
        llm_file_set_checks(f, o);
        s = set_config_meta(f, cfg, dir, &c);
    }
    if (!s)
        s = load_weights(f, dir, &c, q);
    llm_hfq_free(q);
    if (!s)
        s = llm_meta_set_bool(f->meta, "hparams.tie_embeddings", c.tie);
    if (!s)
        s = read_generation(f, dir);
    if (!s) {
        struct llm_hf_ids ids = { cfg_id(cfg, "bos_token_id"), cfg_id(cfg, "eos_token_id"),
                                  cfg_id(cfg, "pad_token_id"), -1 };
        s = llm_hf_tokenizer_dir(f, dir, (uint32_t)c.V, &ids);
    }
    json_decref(cfg);
    if (s) {
        llm_file_free(f);
        return s;
    }
    *out = f;
    return LLM_OK;
}
