/* model.c: configuration from metadata, weight binding, contexts and the
 * forward pass (written once against model/backend.h). */
#include "model.h"

#include <math.h>
#include <string.h>

#include <xxhash.h>

#include "../common/alloc.h"
#include "../format/import.h"
#include "../ops/matmul.h"
#include "../quant/quant.h"
#include "../tokenizer/tokenizer.h"
#include "../backend/backend.h"
#include "layer.h"
#include "model_impl.h"

/* ---- configuration ---------------------------------------------------- */

static llm_status get_int(const struct llm_meta *m, const char *path, const char *key, int64_t def,
                          int64_t lo, int64_t hi, int32_t *out)
{
    int64_t v;
    llm_status s = llm_meta_get_i64(m, key, &v);
    if (s == LLM_E_NOTFOUND) {
        if (def < 0)
            return llm_error_set(LLM_E_FORMAT, "%s: metadata key '%s' is missing", path, key);
        v = def;
    } else if (s) {
        llm_error_prefix(path);
        return s;
    }
    if (v < lo || v > hi)
        return llm_error_set(LLM_E_FORMAT, "%s: metadata key '%s' = %lld out of range (%lld..%lld)",
                             path, key, (long long)v, (long long)lo, (long long)hi);
    *out = (int32_t)v;
    return LLM_OK;
}

static llm_status get_float(const struct llm_meta *m, const char *path, const char *key, double def,
                            float *out)
{
    double v;
    llm_status s = llm_meta_get_f64(m, key, &v);
    if (s == LLM_E_NOTFOUND)
        v = def;
    else if (s) {
        llm_error_prefix(path);
        return s;
    }
    if (!isfinite(v))
        return llm_error_set(LLM_E_FORMAT, "%s: metadata key '%s' is not a finite number", path, key);
    /* a double beyond the float range narrows to infinity */
    if (!isfinite((float)v))
        return llm_error_set(LLM_E_FORMAT, "%s: metadata key '%s' = %g is out of the range of a "
                             "float", path, key, v);
    *out = (float)v;
    return LLM_OK;
}

llm_status llm_config_from_meta(struct llm_config *c, const struct llm_meta *m, const char *path)
{
    const char *s;
    memset(c, 0, sizeof *c);
    if (!path)
        path = "model";
    if (llm_meta_get_str(m, "architecture", &s))
        return llm_error_set(LLM_E_FORMAT, "%s: metadata key 'architecture' is missing", path);
    if (!strcmp(s, "none"))
        return llm_error_set(LLM_E_UNSUPPORTED, "%s: the file holds a tokenizer only, no model", path);
    static const char *const archs[] = { "llama", "mistral", "qwen2",   "qwen3",    "gemma2",
                                         "gemma3", "phi3",   "mixtral", "qwen2moe", "qwen3moe" };
    size_t ai = 0;
    while (ai < sizeof archs / sizeof archs[0] && strcmp(s, archs[ai]))
        ai++;
    if (ai == sizeof archs / sizeof archs[0])
        return llm_error_set(LLM_E_UNSUPPORTED, "%s: architecture '%s' is not supported (llama, "
                             "mistral, qwen2, qwen3, gemma2, gemma3, phi3, mixtral, qwen2moe, "
                             "qwen3moe)", path, s);
    snprintf(c->arch, sizeof c->arch, "%s", s);
    const int64_t big = 1 << 20;
    LLM_TRY(get_int(m, path, "hparams.vocab_size", 0, 0, INT32_MAX, &c->n_vocab));
    LLM_TRY(get_int(m, path, "hparams.embedding_length", -1, 1, big, &c->dim));
    LLM_TRY(get_int(m, path, "hparams.block_count", -1, 1, 4096, &c->n_layers));
    LLM_TRY(get_int(m, path, "hparams.feed_forward_length", -1, 1, big, &c->ffn_dim));
    LLM_TRY(get_int(m, path, "hparams.head_count", -1, 1, 4096, &c->n_heads));
    LLM_TRY(get_int(m, path, "hparams.head_count_kv", c->n_heads, 1, 4096, &c->n_kv_heads));
    LLM_TRY(get_int(m, path, "hparams.head_dim", c->dim / c->n_heads, 1, 4096, &c->head_dim));
    LLM_TRY(get_int(m, path, "hparams.rope_dim", c->head_dim, 0, 4096, &c->rope_dim));
    LLM_TRY(get_int(m, path, "hparams.context_length", 2048, 1, INT32_MAX, &c->n_ctx_train));
    LLM_TRY(get_float(m, path, "hparams.rope_theta", 10000.0, &c->rope_theta));
    LLM_TRY(get_float(m, path, "hparams.rms_norm_eps", 1e-5, &c->rms_eps));
    if (c->n_heads % c->n_kv_heads)
        return llm_error_set(LLM_E_FORMAT, "%s: head_count %d is not a multiple of head_count_kv %d",
                             path, c->n_heads, c->n_kv_heads);
    if (c->rope_dim % 2 || c->rope_dim > c->head_dim)
        return llm_error_set(LLM_E_FORMAT, "%s: rope_dim %d must be even and at most head_dim %d",
                             path, c->rope_dim, c->head_dim);
    LLM_TRY(get_int(m, path, "hparams.sliding_window", 0, 0, INT32_MAX, &c->swa_window));
    const int g2 = !strcmp(c->arch, "gemma2"), g3 = !strcmp(c->arch, "gemma3");
    c->gemma = g2 || g3;
    /* llama.cpp's defaults, which its files leave out: Gemma 2 alternates
     * local and global layers; Gemma 3 has five local layers, then a
     * global one, the local ones with RoPE base 10000 */
    LLM_TRY(get_int(m, path, "hparams.sliding_window_pattern", g2 ? 2 : g3 ? 6 : 1, 1, 4096,
                    &c->swa_pattern));
    LLM_TRY(get_float(m, path, "hparams.rope_theta_swa", g3 ? 10000.0 : 0.0,
                      &c->rope_theta_swa));
    LLM_TRY(get_float(m, path, "hparams.attn_softcap", 0.0, &c->attn_softcap));
    LLM_TRY(get_float(m, path, "hparams.final_softcap", 0.0, &c->final_softcap));
    /* the 27B Gemmas scale queries by hidden / heads, not the head size
     * (query_pre_attn_scalar; llama.cpp tells them by their layer count) */
    const int huge = (g2 && c->n_layers == 46) || (g3 && c->n_layers == 62);
    LLM_TRY(get_float(m, path, "hparams.query_pre_attn_scalar",
                      huge ? (double)c->dim / c->n_heads : (double)c->head_dim, &c->query_scalar));
    if (!(c->attn_softcap >= 0) || !(c->final_softcap >= 0) || !(c->query_scalar > 0))
        return llm_error_set(LLM_E_FORMAT, "%s: soft-capping %g / %g or query scalar %g out of "
                             "range", path, (double)c->attn_softcap, (double)c->final_softcap,
                             (double)c->query_scalar);
    c->rope_neox = !strncmp(c->arch, "qwen", 4) || c->gemma || !strcmp(c->arch, "phi3");
    c->qk_norm = !strcmp(c->arch, "qwen3") || !strcmp(c->arch, "qwen3moe") || g3;
    LLM_TRY(get_int(m, path, "hparams.expert_count", 0, 0, 4096, &c->n_expert));
    LLM_TRY(get_int(m, path, "hparams.expert_used_count", c->n_expert ? -1 : 0, 0, 4096,
                    &c->n_expert_used));
    LLM_TRY(get_int(m, path, "hparams.expert_feed_forward_length", c->ffn_dim, 1, big,
                    &c->expert_ffn_dim));
    LLM_TRY(get_int(m, path, "hparams.expert_shared_feed_forward_length", 0, 0, big,
                    &c->shared_ffn_dim));
    /* Mixtral and Qwen3-MoE renormalize the chosen experts' weights,
     * Qwen1.5/2-MoE does not (llama.cpp's and transformers' defaults) */
    c->expert_norm = strcmp(c->arch, "qwen2moe") != 0;
    int en = 0;
    if (llm_meta_get_bool(m, "hparams.expert_weights_norm", &en) == LLM_OK)
        c->expert_norm = en;
    llm_error_clear();
    const int moe_arch = !strcmp(c->arch, "mixtral") || strstr(c->arch, "moe") != NULL;
    if (c->n_expert && (c->n_expert_used < 1 || c->n_expert_used > c->n_expert))
        return llm_error_set(LLM_E_FORMAT, "%s: expert_used_count %d of expert_count %d", path,
                             c->n_expert_used, c->n_expert);
    if (moe_arch != (c->n_expert > 0) && strcmp(c->arch, "llama"))
        return llm_error_set(LLM_E_FORMAT, "%s: architecture '%s' with expert_count %d", path,
                             c->arch, c->n_expert);
    if (!llm_meta_get_str(m, "hparams.rope_type", &s)) {
        if (strcmp(s, "norm") && strcmp(s, "neox"))
            return llm_error_set(LLM_E_FORMAT, "%s: hparams.rope_type '%s' (norm, neox)", path, s);
        c->rope_neox = !strcmp(s, "neox");
    }
    int tie = -1;
    if (llm_meta_get_bool(m, "hparams.tie_embeddings", &tie) == LLM_OK)
        c->tie_embeddings = tie;
    snprintf(c->rope_scaling, sizeof c->rope_scaling, "none");
    if (!llm_meta_get_str(m, "hparams.rope_scaling.type", &s)) {
        if (strcmp(s, "none") && strcmp(s, "linear") && strcmp(s, "yarn") && strcmp(s, "llama3") &&
            strcmp(s, "longrope"))
            return llm_error_set(LLM_E_UNSUPPORTED, "%s: rope scaling '%s' is not supported (none, "
                                 "linear, yarn, llama3)", path, s);
        snprintf(c->rope_scaling, sizeof c->rope_scaling, "%s", s);
    }
    LLM_TRY(get_float(m, path, "hparams.rope_scaling.factor", 1.0, &c->rope_factor));
    LLM_TRY(get_int(m, path, "hparams.rope_scaling.original_context_length",
                    strcmp(c->rope_scaling, "llama3") ? c->n_ctx_train : 8192, 1, INT32_MAX,
                    &c->rope_orig_ctx));
    LLM_TRY(get_float(m, path, "hparams.rope_scaling.low_freq_factor", 1.0, &c->rope_low_freq));
    LLM_TRY(get_float(m, path, "hparams.rope_scaling.high_freq_factor", 4.0, &c->rope_high_freq));
    LLM_TRY(get_float(m, path, "hparams.rope_scaling.attn_factor", 1.0, &c->rope_attn_factor));
    LLM_TRY(get_float(m, path, "hparams.rope_scaling.beta_fast", 32.0, &c->rope_beta_fast));
    LLM_TRY(get_float(m, path, "hparams.rope_scaling.beta_slow", 1.0, &c->rope_beta_slow));
    if (strcmp(c->rope_scaling, "none") && !(c->rope_factor > 0))
        return llm_error_set(LLM_E_FORMAT, "%s: rope scaling factor %g must be positive", path,
                             (double)c->rope_factor);
    if (!(c->rope_theta > 0) || !(c->rms_eps >= 0) || !(c->rope_theta_swa >= 0))
        return llm_error_set(LLM_E_FORMAT, "%s: rope_theta %g / rms_norm_eps %g out of range", path,
                             (double)c->rope_theta, (double)c->rms_eps);
    return LLM_OK;
}

int32_t llm_config_layer_window(const struct llm_config *c, int32_t l)
{
    if (c->swa_window <= 0)
        return 0;
    const int32_t p = c->swa_pattern;
    return p <= 1 || l % p < p - 1 ? c->swa_window : 0;
}

/* ---- weights ---------------------------------------------------------- */

/* The act-order permutation "<base>.perm" of weight "<base>.weight", when
 * the file has one: i32 (ne0), each column exactly once. */
static llm_status bind_perm(struct llm_model *m, struct llm_weight *w, const char *name)
{
    char pname[LLM_MAX_NAME];
    size_t len = strlen(name);
    if (len < 7 || strcmp(name + len - 7, ".weight") || len - 7 + 6 >= sizeof pname)
        return LLM_OK;
    memcpy(pname, name, len - 7);
    memcpy(pname + len - 7, ".perm", 6);
    struct llm_tensor *t = llm_file_find(m->f, pname);
    if (!t)
        return LLM_OK;
    if (t->type != LLM_TYPE_I32 || t->n_dims != 1 || t->ne[0] != w->ne0)
        return llm_error_set(LLM_E_FORMAT, "%s: tensor '%s': %s [%lld], expected i32 [%lld]",
                             m->f->path, pname, llm_type_name(t->type), (long long)t->ne[0],
                             (long long)w->ne0);
    const void *data;
    LLM_TRY(llm_tensor_bytes(m->f, t, &data));
    const int32_t *perm = data;
    uint8_t *seen = llm_calloc((size_t)w->ne0, 1);
    if (!seen)
        return LLM_E_NOMEM;
    int identity = 1;
    for (int64_t i = 0; i < w->ne0; i++) {
        identity &= perm[i] == i;
        if (perm[i] < 0 || perm[i] >= w->ne0 || seen[perm[i]]) {
            llm_free(seen);
            return llm_error_set(LLM_E_FORMAT, "%s: tensor '%s': element %lld = %d is not a "
                                 "permutation of 0..%lld", m->f->path, pname, (long long)i,
                                 perm[i], (long long)w->ne0 - 1);
        }
        seen[perm[i]] = 1;
    }
    llm_free(seen);
    /* an identity (a row of one group, or files from before llm-quantize
     * stopped writing them) would only cost a gather per product */
    w->perm = identity ? NULL : perm;
    return LLM_OK;
}

/* Weights that read the same input and carry equal permutations share one
 * pointer, so the forward pass gathers the input once. */
static void share_perm(struct llm_weight *a, struct llm_weight *b)
{
    if (a->perm && b->perm && a->ne0 == b->ne0 &&
        !memcmp(a->perm, b->perm, (size_t)a->ne0 * sizeof(int32_t)))
        b->perm = a->perm;
}

/* A tensor that must exist with ne = {ne0, rows} (rows 0: a vector of ne0). */
static llm_status bind(struct llm_model *m, struct llm_weight *w, const char *name, int64_t ne0,
                       int64_t rows, int optional)
{
    struct llm_file *f = m->f;
    struct llm_tensor *t = llm_file_find(f, name);
    memset(w, 0, sizeof *w);
    if (!t) {
        if (optional)
            return LLM_OK;
        return llm_error_set(LLM_E_FORMAT, "%s: tensor '%s' is missing", f->path, name);
    }
    const struct llm_type_traits *tr = llm_type_traits(t->type);
    int vec = rows == 0;
    int64_t want_rows = vec ? 1 : rows;
    if (!tr || tr->is_aux)
        return llm_error_set(LLM_E_FORMAT, "%s: tensor '%s': type %s is not a weight type",
                             f->path, name, llm_type_name(t->type));
    if (t->flags & LLM_TENSOR_AUX)
        return llm_error_set(LLM_E_FORMAT, "%s: tensor '%s': flagged as auxiliary data, not a "
                             "weight", f->path, name);
    if (vec && (t->n_dims != 1 || t->ne[0] != ne0)) {
        char shape[96];
        int k = snprintf(shape, sizeof shape, "%lld", (long long)t->ne[0]);
        for (uint32_t d = 1; d < t->n_dims && d < LLM_MAX_DIMS && k > 0 && k < 64; d++)
            k += snprintf(shape + k, sizeof shape - (size_t)k, ", %lld", (long long)t->ne[d]);
        return llm_error_set(LLM_E_FORMAT, "%s: tensor '%s': %s [%s], expected [%lld]", f->path,
                             name, llm_type_name(t->type), shape, (long long)ne0);
    }
    if (t->ne[0] != ne0 || llm_tensor_nrows(t) != want_rows)
        return llm_error_set(LLM_E_FORMAT, "%s: tensor '%s': %s [%lld, %lld], expected [%lld, %lld]",
                             f->path, name, llm_type_name(t->type), (long long)t->ne[0],
                             (long long)llm_tensor_nrows(t), (long long)ne0, (long long)rows);
    const void *data;
    LLM_TRY(llm_tensor_bytes(f, t, &data));
    w->type = t->type;
    w->data = data;
    w->ne0 = ne0;
    w->rows = want_rows;
    if (vec && t->type != LLM_TYPE_F32) {
        /* Norms and biases are read as float by every op. */
        float *cv = llm_malloc((size_t)ne0 * sizeof(float));
        if (!cv)
            return LLM_E_NOMEM;
        LLM_TRY(llm_file_own(f, cv));
        LLM_TRY(llm_dequantize_row(t->type, data, cv, ne0));
        w->type = LLM_TYPE_F32;
        w->data = cv;
    }
    if (!vec) {
        m->weight_bytes += t->nbytes;
        LLM_TRY(bind_perm(m, w, name));
    }
    return LLM_OK;
}

/* The n_expert matrices (rows, ne0) of the 3-D tensor blk.<l>.<nm>.weight
 * {ne0, rows, n_expert}: views of its rows. A decode step reads
 * n_expert_used of them, so the bytes read per token count that share. */
static llm_status bind_experts(struct llm_model *m, int32_t l, const char *nm, int64_t ne0,
                               int64_t rows, struct llm_weight **out)
{
    const struct llm_config *c = &m->c;
    char name[LLM_MAX_NAME];
    snprintf(name, sizeof name, "blk.%d.%s.weight", l, nm);
    struct llm_tensor *t = llm_file_find(m->f, name);
    if (t && (t->n_dims != 3 || t->ne[1] != rows || t->ne[2] != c->n_expert))
        return llm_error_set(LLM_E_FORMAT, "%s: tensor '%s': %s [%lld, %lld, %lld], expected "
                             "[%lld, %lld, %d]", m->f->path, name, llm_type_name(t->type),
                             (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2],
                             (long long)ne0, (long long)rows, c->n_expert);
    struct llm_weight all;
    uint64_t before = m->weight_bytes;
    LLM_TRY(bind(m, &all, name, ne0, rows * c->n_expert, 0));
    if (all.perm)
        return llm_error_set(LLM_E_UNSUPPORTED, "%s: tensor '%s': act-order experts are not "
                             "supported", m->f->path, name);
    m->weight_bytes = before + (m->weight_bytes - before) / (uint64_t)c->n_expert *
                                   (uint64_t)c->n_expert_used;
    struct llm_weight *w = llm_calloc((size_t)c->n_expert, sizeof *w);
    if (!w)
        return LLM_E_NOMEM;
    LLM_TRY(llm_file_own(m->f, w));
    const uint64_t bytes = llm_type_row_bytes(all.type, (uint64_t)ne0) * (uint64_t)rows;
    for (int32_t e = 0; e < c->n_expert; e++) {
        w[e] = all;
        w[e].rows = rows;
        w[e].data = (const uint8_t *)all.data + bytes * (uint64_t)e;
    }
    *out = w;
    return LLM_OK;
}

/* A RoPE frequency factor (rope_freqs, LongRoPE's) divides a frequency. */
static llm_status factor_ok(const struct llm_model *m, const char *name, float v, int32_t i)
{
    if (v > 0)
        return LLM_OK;
    return llm_error_set(LLM_E_FORMAT, "%s: %s[%d] = %g is not positive", m->f->path, name, i,
                         (double)v);
}

static llm_status rope_init(struct llm_model *m)
{
    const struct llm_config *c = &m->c;
    int32_t half = c->rope_dim / 2;
    m->inv_freq = llm_calloc((size_t)(half ? half : 1), sizeof(float));
    if (!m->inv_freq)
        return LLM_E_NOMEM;
    m->mscale = 1.0f;
    const float *freqs = NULL, *long_freqs = NULL;
    const char *freqs_name = "rope_freqs.weight";
    struct llm_tensor *t = llm_file_find(m->f, "rope_freqs.weight");
    if (t) {
        struct llm_weight w;
        LLM_TRY(bind(m, &w, "rope_freqs.weight", half, 0, 0));
        freqs = w.data;
    }
    /* LongRoPE (Phi-3 128k, Phi-3.5): frequencies divided by the short
     * factors, or the long ones in a context longer than the original
     * (llama.cpp's choice; llm_context_new makes it), and cos and sin
     * scaled by the attention factor in both */
    if (!strcmp(c->rope_scaling, "longrope") || llm_file_find(m->f, "rope_factors_long.weight")) {
        struct llm_weight ws, wl;
        LLM_TRY(bind(m, &ws, "rope_factors_short.weight", half, 0, 0));
        LLM_TRY(bind(m, &wl, "rope_factors_long.weight", half, 0, 0));
        freqs = ws.data, long_freqs = wl.data;
        freqs_name = "rope_factors_short.weight";
        m->inv_freq_long = llm_calloc((size_t)(half ? half : 1), sizeof(float));
        if (!m->inv_freq_long)
            return LLM_E_NOMEM;
    }
    const char *sc = c->rope_scaling;
    float factor = c->rope_factor;
    /* YaRN correction range (ggml_rope_yarn_corr_dims). */
    float lo = 0, hi = 0;
    if (!strcmp(sc, "yarn")) {
        double nd = c->rope_dim, base = c->rope_theta, orig = c->rope_orig_ctx;
        double cf = nd * log(orig / (c->rope_beta_fast * 2 * M_PI)) / (2 * log(base));
        double cs = nd * log(orig / (c->rope_beta_slow * 2 * M_PI)) / (2 * log(base));
        lo = (float)fmax(0, floor(cf));
        hi = (float)fmin(nd - 1, ceil(cs));
        m->mscale = c->rope_attn_factor * (1.0f + 0.1f * logf(factor));
    }
    for (int32_t i = 0; i < half; i++) {
        const float base = 1.0f / powf(c->rope_theta, (float)(2 * i) / (float)c->rope_dim);
        float f = base;
        if (freqs) {
            LLM_TRY(factor_ok(m, freqs_name, freqs[i], i));
            f /= freqs[i];
        } else if (!strcmp(sc, "linear")) {
            f /= factor;
        } else if (!strcmp(sc, "llama3")) {
            float old = (float)c->rope_orig_ctx, wavelen = 2.0f * (float)M_PI / f;
            if (wavelen > old / c->rope_low_freq) {
                f /= factor;
            } else if (wavelen >= old / c->rope_high_freq) {
                float smooth = (old / wavelen - c->rope_low_freq) /
                               (c->rope_high_freq - c->rope_low_freq);
                f = (1 - smooth) * f / factor + smooth * f;
            }
        } else if (!strcmp(sc, "yarn")) {
            float ramp = ((float)i - lo) / fmaxf(0.001f, hi - lo);
            ramp = 1.0f - fminf(1.0f, fmaxf(0.0f, ramp));
            f = (f / factor) * (1 - ramp) + f * ramp;
        }
        m->inv_freq[i] = f;
        if (long_freqs) {
            LLM_TRY(factor_ok(m, "rope_factors_long.weight", long_freqs[i], i));
            m->inv_freq_long[i] = base / long_freqs[i];
        }
    }
    if (long_freqs)
        m->mscale = c->rope_attn_factor;
    if (c->rope_theta_swa > 0 && c->swa_window > 0) {
        m->inv_freq_swa = llm_calloc((size_t)(half ? half : 1), sizeof(float));
        if (!m->inv_freq_swa)
            return LLM_E_NOMEM;
        for (int32_t i = 0; i < half; i++)
            m->inv_freq_swa[i] = 1.0f / powf(c->rope_theta_swa, (float)(2 * i) / (float)c->rope_dim);
    }
    return LLM_OK;
}

static llm_status bind_all(struct llm_model *m)
{
    struct llm_config *c = &m->c;
    struct llm_tensor *emb = llm_file_find(m->f, "token_embd.weight");
    if (!emb)
        return llm_error_set(LLM_E_FORMAT, "%s: tensor 'token_embd.weight' is missing", m->f->path);
    if (c->n_vocab == 0)
        c->n_vocab = (int32_t)(llm_tensor_nrows(emb) > INT32_MAX ? 0 : llm_tensor_nrows(emb));
    if (c->n_vocab <= 0)
        return llm_error_set(LLM_E_FORMAT, "%s: no vocabulary size", m->f->path);
    int64_t qd = (int64_t)c->n_heads * c->head_dim, kd = (int64_t)c->n_kv_heads * c->head_dim;
    LLM_TRY(bind(m, &m->tok_embd, "token_embd.weight", c->dim, c->n_vocab, 0));
    m->weight_bytes -= emb->nbytes; /* one row per token is read, not the table */
    if (m->tok_embd.perm)
        return llm_error_set(LLM_E_FORMAT, "%s: tensor 'token_embd.perm': the embedding table "
                             "cannot have permuted columns", m->f->path);
    LLM_TRY(bind(m, &m->out_norm, "output_norm.weight", c->dim, 0, 0));
    LLM_TRY(bind(m, &m->output, "output.weight", c->dim, c->n_vocab, 1));
    if (!m->output.data) {
        m->output = m->tok_embd;
        m->weight_bytes += emb->nbytes;
        c->tie_embeddings = 1;
    } else {
        c->tie_embeddings = 0;
    }
    m->layers = llm_calloc((size_t)c->n_layers, sizeof *m->layers);
    if (!m->layers)
        return LLM_E_NOMEM;
    char name[LLM_MAX_NAME];
#define B(field, nm, ne0, rows, opt)                                 \
    do {                                                             \
        snprintf(name, sizeof name, "blk.%d." nm, l);                \
        LLM_TRY(bind(m, &L->field, name, (ne0), (rows), (opt)));      \
    } while (0)
    for (int l = 0; l < c->n_layers; l++) {
        struct llm_layer_w *L = &m->layers[l];
        B(attn_norm, "attn_norm.weight", c->dim, 0, 0);
        B(wq, "attn_q.weight", c->dim, qd, 0);
        B(wk, "attn_k.weight", c->dim, kd, 0);
        B(wv, "attn_v.weight", c->dim, kd, 0);
        B(wo, "attn_output.weight", qd, c->dim, 0);
        B(bq, "attn_q.bias", qd, 0, 1);
        B(bk, "attn_k.bias", kd, 0, 1);
        B(bv, "attn_v.bias", kd, 0, 1);
        B(q_norm, "attn_q_norm.weight", c->head_dim, 0, !c->qk_norm);
        B(k_norm, "attn_k_norm.weight", c->head_dim, 0, !c->qk_norm);
        if (!c->qk_norm && (L->q_norm.data || L->k_norm.data))
            return llm_error_set(LLM_E_FORMAT, "%s: tensor 'blk.%d.attn_%s_norm.weight': "
                                 "architecture '%s' has no q/k norms", m->f->path, l,
                                 L->q_norm.data ? "q" : "k", c->arch);
        B(ffn_norm, "ffn_norm.weight", c->dim, 0, 0);
        B(post_attn_norm, "post_attention_norm.weight", c->dim, 0, !c->gemma);
        B(post_ffn_norm, "post_ffw_norm.weight", c->dim, 0, !c->gemma);
        const int moe = c->n_expert > 0;
        B(gate, "ffn_gate.weight", c->dim, c->ffn_dim, moe);
        B(up, "ffn_up.weight", c->dim, c->ffn_dim, moe);
        B(down, "ffn_down.weight", c->ffn_dim, c->dim, moe);
        if (moe) {
            B(router, "ffn_gate_inp.weight", c->dim, c->n_expert, 0);
            LLM_TRY(bind_experts(m, l, "ffn_gate_exps", c->dim, c->expert_ffn_dim, &L->exp_gate));
            LLM_TRY(bind_experts(m, l, "ffn_up_exps", c->dim, c->expert_ffn_dim, &L->exp_up));
            LLM_TRY(bind_experts(m, l, "ffn_down_exps", c->expert_ffn_dim, c->dim, &L->exp_down));
            const int sh = c->shared_ffn_dim > 0;
            B(sh_gate_inp, "ffn_gate_inp_shexp.weight", c->dim, 0, !sh);
            B(sh_gate, "ffn_gate_shexp.weight", c->dim, c->shared_ffn_dim, !sh);
            B(sh_up, "ffn_up_shexp.weight", c->dim, c->shared_ffn_dim, !sh);
            B(sh_down, "ffn_down_shexp.weight", c->shared_ffn_dim, c->dim, !sh);
        }
        if (L->bq.data || L->bk.data || L->bv.data)
            c->qkv_bias = 1;
        share_perm(&L->wq, &L->wk);
        share_perm(&L->wq, &L->wv);
        share_perm(&L->wk, &L->wv);
        share_perm(&L->gate, &L->up);
    }
#undef B
    return rope_init(m);
}

void llm_model_params_default(struct llm_model_params *p)
{
    memset(p, 0, sizeof *p);
}

/* The weight matrices of the products: i = 0 the output head, then per
 * layer 7 (and with experts the router, the shared expert's 3 and each
 * expert's 3); NULL past the end. */
static struct llm_weight *matrix(struct llm_model *m, int64_t i)
{
    if (i == 0)
        return &m->output;
    const int64_t E = m->c.n_expert, per = 7 + (E ? 4 + 3 * E : 0);
    if (--i >= per * (int64_t)m->c.n_layers)
        return NULL;
    struct llm_layer_w *L = &m->layers[i / per];
    struct llm_weight *lw[11] = { &L->wq,     &L->wk,      &L->wv,    &L->wo,
                                  &L->gate,   &L->up,      &L->down,  &L->router,
                                  &L->sh_gate, &L->sh_up,  &L->sh_down };
    i %= per;
    if (i < 11)
        return lw[i];
    i -= 11;
    struct llm_weight *ex[3] = { L->exp_gate, L->exp_up, L->exp_down };
    return &ex[i % 3][i / 3];
}

static void drop_pages(void *ctx, const void *p, size_t n)
{
    llm_file_drop_pages(ctx, p, n);
}

/* Bind every matrix to the model's backend once. Where the backend keeps
 * a copy of its own (the CPU's interleaved rows, a device's upload), the
 * file's pages of that matrix are dropped as it is copied, so that resident
 * memory stays one copy of the weights (the pages straddling two stretches
 * go at the end). */
static llm_status bind_backend(struct llm_model *m)
{
    struct llm_weight *w;
    for (int64_t i = 0; (w = matrix(m, i)); i++) {
        if (!w->data)
            continue;
        LLM_TRY(m->be->ops->bind(m->be, w, drop_pages, m->f));
        if (w->x16 || w->dev)
            llm_file_drop_pages(m->f, w->data,
                                (size_t)llm_type_row_bytes(w->type, (uint64_t)w->ne0) *
                                    (size_t)w->rows);
    }
    return LLM_OK;
}

/* The embedding table is read one row per token, unless it is also the
 * output head in the row layout: the pages a checksum pass brought in
 * (llm-run verifies by default) need not stay resident. */
static void drop_embedding(struct llm_model *m)
{
    struct llm_weight *e = &m->tok_embd;
    /* a tied table is read from the head's copy */
    if (m->c.tie_embeddings && m->output.x16) {
        e->x16 = m->output.x16;
        e->x16_type = m->output.x16_type;
    }
    if (e->data && (!m->c.tie_embeddings || m->output.x16))
        llm_file_drop_pages(m->f, e->data,
                            (size_t)llm_type_row_bytes(e->type, (uint64_t)e->ne0) * (size_t)e->rows);
}

static llm_status model_from_file(struct llm_model **out, struct llm_file *f,
                                  const struct llm_model_params *p, int borrowed)
{
    *out = NULL;
    struct llm_model *m = llm_calloc(1, sizeof *m);
    if (!m) {
        if (!borrowed)
            llm_file_free(f);
        return LLM_E_NOMEM;
    }
    m->f = f;
    m->borrowed = borrowed;
    m->n_threads = p ? p->n_threads : 0;
    size_t n_weights = 0;
    for (size_t i = 0; i < f->n_tensors; i++)
        n_weights += !(f->tensors[i].flags & LLM_TENSOR_AUX);
    llm_status s = n_weights ? llm_config_from_meta(&m->c, f->meta, f->path)
                             : llm_error_set(LLM_E_UNSUPPORTED, "%s: the file holds a tokenizer "
                                             "only, no model weights", f->path);
    if (!s)
        s = bind_all(m);
    /* a borrowed file is the quantizer's input, whose weights it reads as
     * rows: no interleaved copies */
    if (!s)
        s = llm_backend_cpu_new(&m->be, m->n_threads, !borrowed);
    if (!s)
        s = bind_backend(m);
    if (!s && !borrowed)
        drop_embedding(m);
    if (!s) {
        /* A file without a vocabulary runs from token ids alone. */
        struct llm_vocab_view v;
        llm_status vs = llm_file_vocab(f, &v);
        if (vs == LLM_OK)
            s = llm_tokenizer_new(&m->tok, f);
        else if (vs == LLM_E_NOTFOUND)
            llm_error_clear();
        else
            s = vs;
    }
    if (s) {
        llm_model_close(m);
        return s;
    }
    uint64_t bytes;
    llm_file_totals(f, &m->n_params, &bytes);
    *out = m;
    return LLM_OK;
}

llm_status llm_model_from_file(struct llm_model **out, struct llm_file *f,
                               const struct llm_model_params *p)
{
    return model_from_file(out, f, p, 0);
}

llm_status llm_model_from_file_borrowed(struct llm_model **out, struct llm_file *f,
                                        const struct llm_model_params *p)
{
    return model_from_file(out, f, p, 1);
}

llm_status llm_model_open(struct llm_model **out, const char *path, const struct llm_model_params *p)
{
    struct llm_file *f;
    struct llm_import_opts io;
    *out = NULL;
    llm_import_opts_default(&io);
    io.tokenizer_path = p ? p->tokenizer_path : NULL;
    LLM_TRY(llm_import(&f, path, &io));
    return llm_model_from_file(out, f, p);
}

void llm_model_close(struct llm_model *m)
{
    if (!m)
        return;
    llm_tokenizer_free(m->tok);
    llm_free(m->layers);
    llm_free(m->inv_freq);
    llm_free(m->inv_freq_swa);
    llm_free(m->inv_freq_long);
    if (m->be)
        m->be->ops->destroy(m->be);
    if (!m->borrowed)
        llm_file_free(m->f);
    llm_free(m);
}

const struct llm_config *llm_model_config(const struct llm_model *m)
{
    return &m->c;
}

struct llm_file *llm_model_file(struct llm_model *m)
{
    return m->f;
}

struct llm_tokenizer *llm_model_tokenizer(struct llm_model *m)
{
    return m->tok;
}

uint64_t llm_model_weight_bytes(const struct llm_model *m)
{
    return m->weight_bytes;
}

uint64_t llm_model_n_params(const struct llm_model *m)
{
    return m->n_params;
}

/* ---- contexts ----------------------------------------------------------- */

void llm_context_params_default(struct llm_context_params *p)
{
    memset(p, 0, sizeof *p);
    p->kv_type_k = p->kv_type_v = LLM_TYPE_F32;
    p->n_seq = 1;
    p->block_size = 16;
}

static llm_status act_alloc(struct llm_context *c, float **out, int64_t rows, int64_t width)
{
    uint64_t n;
    if (!llm_mul_ok((uint64_t)rows, (uint64_t)width * sizeof(float), &n) || n > SIZE_MAX)
        return llm_error_set(LLM_E_NOMEM, "activation buffer of %lld x %lld floats is too large",
                             (long long)rows, (long long)width);
    return c->be->ops->alloc(c->be, (size_t)n, (void **)out);
}

void llm_context_free(struct llm_context *c)
{
    if (!c)
        return;
    if (c->be) {
        float **bufs[] = { &c->x,   &c->xb,     &c->xb2,    &c->q,     &c->k,     &c->v,
                           &c->att, &c->hb,     &c->hb2,    &c->logits, &c->xp,   &c->moe_x,
                           &c->moe_o, &c->moe_y, &c->moe_r };
        for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
            if (*bufs[i])
                c->be->ops->release(c->be, *bufs[i]);
        if (c->kv_k)
            c->be->ops->release(c->be, c->kv_k);
        if (c->kv_v)
            c->be->ops->release(c->be, c->kv_v);
    }
    llm_kv_free(c->kv);
    llm_free(c->cs);
    llm_free(c->cs_swa);
    llm_free(c->moe_rh);
    llm_free(c->moe_rows);
    llm_free(c->moe_slot);
    llm_free(c->moe_sel);
    llm_free(c->moe_w);
    llm_free(c->moe_count);
    llm_free(c->segs);
    llm_free(c->sl);
    llm_free(c->seen);
    llm_free(c->out_rows);
    llm_free(c);
}

/* The window layers of the model (n_layers, 1: a sliding-window layer), or
 * NULL without windows (or memory). */
static uint8_t *window_layers(const struct llm_config *cf)
{
    if (cf->swa_window <= 0)
        return NULL;
    uint8_t *w = llm_malloc((size_t)cf->n_layers);
    for (int32_t l = 0; w && l < cf->n_layers; l++)
        w[l] = llm_config_layer_window(cf, l) > 0;
    return w;
}

/* The KV pool's parameters from the context's: its size in blocks from
 * kv_blocks, else from the kv_bytes budget, else what n_seq full sequences
 * need. */
static llm_status kv_params(const struct llm_config *cf, const struct llm_context_params *p,
                            const uint8_t *local, struct llm_kv_params *kp)
{
    llm_kv_params_default(kp);
    kp->n_layers = cf->n_layers;
    kp->n_kv_heads = cf->n_kv_heads;
    kp->head_dim = cf->head_dim;
    kp->block_size = p->block_size;
    kp->n_seq = p->n_seq;
    kp->max_tokens = p->n_ctx;
    kp->type_k = p->kv_type_k;
    kp->type_v = p->kv_type_v;
    kp->n_blocks = p->kv_blocks;
    /* sliding-window layers hold only their windows' rows (kv.h), for steps
     * of up to n_batch tokens, or a block (a state file's record) */
    kp->window = cf->swa_window > 0 ? cf->swa_window : 0;
    kp->local = local;
    kp->max_step = p->n_batch > p->block_size ? p->n_batch : p->block_size;
    if (!p->kv_blocks && p->kv_bytes) {
        /* the window layers' slots first (a fixed size), blocks of the
         * full layers from the rest; with no full layer the blocks cost
         * nothing and keep their default number */
        const uint64_t wb = llm_kv_window_bytes(kp), bb = llm_kv_block_bytes(kp);
        const uint64_t nb = p->kv_bytes < wb ? 0 : bb ? (p->kv_bytes - wb) / bb : 1;
        if (nb < 1)
            return llm_error_set(LLM_E_INVALID, "a KV budget of %llu bytes holds no block of %d "
                                 "tokens (%llu bytes%s)", (unsigned long long)p->kv_bytes,
                                 p->block_size, (unsigned long long)bb,
                                 wb ? ", after the window layers' rows" : "");
        kp->n_blocks = !bb ? 0 : nb > INT32_MAX ? INT32_MAX : (int32_t)nb;
    }
    if (!llm_kv_storage_bytes(kp))
        return llm_error_set(LLM_E_NOMEM, "KV cache for %d tokens x %d sequences (%d blocks of "
                             "%d) is too large", p->n_ctx, p->n_seq, kp->n_blocks, p->block_size);
    return LLM_OK;
}

llm_status llm_context_new(struct llm_context **out, struct llm_model *m,
                           const struct llm_context_params *pp)
{
    struct llm_context_params p;
    *out = NULL;
    if (pp)
        p = *pp;
    else
        llm_context_params_default(&p);
    const struct llm_config *cf = &m->c;
    if (p.n_ctx <= 0)
        p.n_ctx = cf->n_ctx_train < 4096 ? cf->n_ctx_train : 4096;
    if (p.n_seq <= 0)
        p.n_seq = 1;
    if (p.block_size <= 0)
        p.block_size = 16;
    if (p.n_batch <= 0)
        p.n_batch = 512;
    for (int v = 0; v < 2; v++) {
        const enum llm_type t = v ? p.kv_type_v : p.kv_type_k;
        if (!llm_kv_type_ok(t, cf->head_dim))
            return llm_error_set(LLM_E_INVALID, "KV cache type %s is not supported (f32, f16, "
                                 "bf16, fp8_e4m3, q4ch keys, and q8 and q4 for heads of a "
                                 "multiple of 32: these are %d)", llm_kv_type_name(t),
                                 cf->head_dim);
    }
    const char *why = llm_kv_types_why_not(p.kv_type_k, p.kv_type_v, p.block_size,
                                           (int64_t)cf->n_kv_heads * cf->head_dim);
    if (why)
        return llm_error_set(LLM_E_INVALID, "KV cache: %s (the block size is %d)", why,
                             p.block_size);
    if (p.kv_blocks < 0)
        return llm_error_set(LLM_E_INVALID, "KV pool of %d blocks", p.kv_blocks);
    struct llm_kv_params kp;
    uint8_t *local = window_layers(cf);
    if (cf->swa_window > 0 && !local)
        return LLM_E_NOMEM;
    llm_status ks = kv_params(cf, &p, local, &kp);
    struct llm_context *c = ks ? NULL : llm_calloc(1, sizeof *c);
    if (!c) {
        llm_free(local);
        return ks ? ks : LLM_E_NOMEM;
    }
    c->m = m;
    c->be = m->be;
    c->n_ctx = p.n_ctx;
    c->n_batch = p.n_batch;
    c->n_threads = p.n_threads > 0 ? p.n_threads : m->be->n_threads;
    /* the backend runs with the thread count of the context using it */
    llm_status ts = m->be->ops->threads(m->be, c->n_threads);
    if (ts) {
        llm_free(c);
        llm_free(local);
        return ts;
    }
    uint64_t kb = llm_kv_half_bytes(&kp, 0), vb = llm_kv_half_bytes(&kp, 1);
    llm_status s = kb > SIZE_MAX || vb > SIZE_MAX
                       ? llm_error_set(LLM_E_NOMEM, "KV cache of %llu bytes is too large",
                                       (unsigned long long)(kb + vb))
                       : LLM_OK;
    if (!s)
        s = c->be->ops->alloc(c->be, (size_t)kb, &c->kv_k);
    if (!s)
        s = c->be->ops->alloc(c->be, (size_t)vb, &c->kv_v);
    if (!s)
        s = llm_kv_new_with(&c->kv, &kp, c->kv_k, c->kv_v);
    llm_free(local); /* (copied) */
    int64_t nb = c->n_batch, qd = (int64_t)cf->n_heads * cf->head_dim,
            kd = (int64_t)cf->n_kv_heads * cf->head_dim;
    /* the feed-forward's hidden rows: dense, an expert's or the shared one's */
    int64_t hw = cf->ffn_dim;
    if (cf->n_expert && cf->expert_ffn_dim > hw)
        hw = cf->expert_ffn_dim;
    if (cf->shared_ffn_dim > hw)
        hw = cf->shared_ffn_dim;
    float **acts[] = { &c->x, &c->xb, &c->xb2, &c->q, &c->k, &c->v, &c->att, &c->hb, &c->hb2 };
    int64_t widths[] = { cf->dim, cf->dim, cf->dim, qd, kd, kd, qd, hw, hw };
    for (size_t i = 0; !s && i < sizeof acts / sizeof acts[0]; i++)
        s = act_alloc(c, acts[i], nb, widths[i]);
    if (!s)
        s = act_alloc(c, &c->logits, 1, cf->n_vocab);
    int64_t xpw = cf->dim > qd ? cf->dim : qd;
    if (hw > xpw)
        xpw = hw;
    if (!s)
        s = act_alloc(c, &c->xp, nb, xpw);
    if (!s && cf->n_expert) {
        const int64_t K = cf->n_expert_used, E = cf->n_expert;
        s = act_alloc(c, &c->moe_x, nb, cf->dim);
        if (!s)
            s = act_alloc(c, &c->moe_o, nb, cf->dim);
        if (!s)
            s = act_alloc(c, &c->moe_y, nb * K, cf->dim);
        if (!s)
            s = act_alloc(c, &c->moe_r, nb, E + 1);
        c->moe_rh = llm_malloc((size_t)(nb * (E + 1)) * sizeof(float));
        c->moe_rows = llm_malloc((size_t)(nb * K) * sizeof(int32_t));
        c->moe_slot = llm_malloc((size_t)(nb * K) * sizeof(int32_t));
        c->moe_sel = llm_malloc((size_t)(nb * K) * sizeof(int32_t));
        c->moe_w = llm_malloc((size_t)(nb * K) * sizeof(float));
        c->moe_count = llm_malloc((size_t)(E + 1) * sizeof(int32_t));
        if (!s && (!c->moe_rh || !c->moe_rows || !c->moe_slot || !c->moe_sel || !c->moe_w ||
                   !c->moe_count))
            s = LLM_E_NOMEM;
    }
    if (!s) {
        c->cs = llm_malloc((size_t)nb * (size_t)(cf->rope_dim ? cf->rope_dim : 1) * sizeof(float));
        c->segs = llm_malloc((size_t)p.n_seq * sizeof *c->segs);
        c->sl = llm_malloc((size_t)nb * sizeof *c->sl);
        c->seen = llm_calloc((size_t)p.n_seq, 1);
        c->out_rows = llm_malloc((size_t)nb * sizeof *c->out_rows);
        if (m->inv_freq_swa)
            c->cs_swa = llm_malloc((size_t)nb * (size_t)cf->rope_dim * sizeof(float));
        if (!c->cs || !c->segs || !c->sl || !c->seen || !c->out_rows ||
            (m->inv_freq_swa && !c->cs_swa))
            s = LLM_E_NOMEM;
    }
    if (s) {
        llm_context_free(c);
        return s;
    }
    c->logits_rows = 1;
    c->rope_long = m->inv_freq_long && c->n_ctx > cf->rope_orig_ctx;
    c->rope = (struct llm_rope){ .n_dims = cf->rope_dim, .neox = cf->rope_neox,
                                 .inv_freq = c->rope_long ? m->inv_freq_long : m->inv_freq,
                                 .mscale = m->mscale };
    c->rope_swa = (struct llm_rope){ .n_dims = cf->rope_dim, .neox = cf->rope_neox,
                                     .inv_freq = m->inv_freq_swa, .mscale = 1.0f };
    c->ash = (struct llm_attn_shape){ .n_heads = cf->n_heads, .n_kv_heads = cf->n_kv_heads,
                                      .head_dim = cf->head_dim,
                                      .scale = 1.0f / sqrtf(cf->query_scalar),
                                      .softcap = cf->attn_softcap };
    *out = c;
    return LLM_OK;
}

int llm_context_rope_long(const struct llm_context *c)
{
    return c->rope_long;
}

llm_status llm_context_fork(struct llm_context *c, int32_t src, int32_t dst, int32_t n)
{
    return llm_kv_fork(c->kv, src, dst, n);
}

int32_t llm_context_truncate(struct llm_context *c, int32_t seq, int32_t n)
{
    return llm_kv_truncate(c->kv, seq, n);
}

void llm_context_reset(struct llm_context *c, int32_t seq)
{
    llm_kv_reset(c->kv, seq);
}

int32_t llm_context_seq_len(const struct llm_context *c, int32_t seq)
{
    return llm_kv_len(c->kv, seq);
}

int32_t llm_context_n_ctx(const struct llm_context *c)
{
    return c->n_ctx;
}

int32_t llm_context_n_seq(const struct llm_context *c)
{
    return c->kv->p.n_seq;
}

struct llm_model *llm_context_model(struct llm_context *c)
{
    return c->m;
}

uint64_t llm_context_kv_bytes(const struct llm_context *c)
{
    return llm_kv_storage_bytes(&c->kv->p);
}

struct llm_kv *llm_context_kv(struct llm_context *c)
{
    return c->kv;
}

void llm_context_kv_stats(const struct llm_context *c, struct llm_kv_stats *st,
                          uint64_t *block_bytes)
{
    llm_kv_stats(c->kv, st);
    if (block_bytes)
        *block_bytes = llm_kv_block_bytes(&c->kv->p);
}

/* ---- the forward pass --------------------------------------------------- */

/* Final norm and output projection of the rows rows[0 .. n_rows) of x,
 * downloaded to dst (n_rows, n_vocab). */
static llm_status head_forward(struct llm_context *c, const int32_t *rows, int32_t n_rows,
                               float *dst)
{
    struct llm_backend *b = c->be;
    const struct llm_config *cf = &c->m->c;
    if (n_rows > c->logits_rows) {
        b->ops->release(b, c->logits);
        c->logits = NULL;
        c->logits_rows = 0;
        LLM_TRY(act_alloc(c, &c->logits, n_rows, cf->n_vocab));
        c->logits_rows = n_rows;
    }
    /* the rows asked for, normed into consecutive rows of xb */
    for (int32_t i = 0; i < n_rows;) {
        int32_t j = i + 1;
        while (j < n_rows && rows[j] == rows[j - 1] + 1)
            j++;
        LLM_TRY(b->ops->rmsnorm(b, c->x + (int64_t)rows[i] * cf->dim, &c->m->out_norm,
                                c->xb + (int64_t)i * cf->dim, j - i, cf->dim, cf->rms_eps));
        i = j;
    }
    const struct llm_weight *w[1] = { &c->m->output };
    float *y[1] = { c->logits };
    LLM_TRY(llm_model_matmul(c, 1, w, NULL, c->xb, y, n_rows));
    LLM_TRY(b->ops->download(b, dst, c->logits,
                             (size_t)n_rows * (size_t)cf->n_vocab * sizeof(float)));
    llm_model_softcap(cf, dst, (int64_t)n_rows * cf->n_vocab);
    return LLM_OK;
}

/* The runs of a batch into c->segs, checked: each sequence one run of
 * consecutive positions starting at or before its length and ending
 * within the context; tokens in the vocabulary. */
static llm_status batch_runs(struct llm_context *c, const struct llm_batch *b, int32_t *n_segs)
{
    const struct llm_config *cf = &c->m->c;
    const int32_t n_seq = c->kv->p.n_seq;
    llm_status s = LLM_OK;
    int32_t ns = 0;
    *n_segs = 0;
    if (b->n <= 0 || !b->token || !b->pos || !b->seq)
        return llm_error_set(LLM_E_INVALID, "decode: an empty batch (%d tokens)", b->n);
    for (int32_t i = 0; i < b->n && !s; i++) {
        const int32_t seq = b->seq[i], pos = b->pos[i];
        if (b->token[i] < 0 || b->token[i] >= cf->n_vocab)
            s = llm_error_set(LLM_E_INVALID, "token id %d out of range (vocabulary of %d)",
                              b->token[i], cf->n_vocab);
        else if (seq < 0 || seq >= n_seq)
            s = llm_error_set(LLM_E_INVALID, "sequence %d out of range (0..%d)", seq, n_seq - 1);
        else if (i > 0 && seq == b->seq[i - 1]) {
            if (pos != b->pos[i - 1] + 1)
                s = llm_error_set(LLM_E_INVALID, "decode: sequence %d goes from position %d to "
                                  "%d (positions must follow one another)", seq, b->pos[i - 1],
                                  pos);
            else
                c->segs[ns - 1].n++;
        } else if (c->seen[seq]) {
            s = llm_error_set(LLM_E_INVALID, "decode: the tokens of sequence %d are not one run "
                              "of the batch", seq);
        } else if (pos < 0 || pos > llm_kv_len(c->kv, seq)) {
            s = llm_error_set(LLM_E_INVALID, "decode: sequence %d starts at position %d (the "
                              "cache holds %d)", seq, pos, llm_kv_len(c->kv, seq));
        } else {
            c->seen[seq] = 1;
            c->segs[ns++] = (struct llm_seg){ .seq = seq, .pos = pos, .n = 1, .row = i };
        }
    }
    for (int32_t i = 0; i < ns; i++) {
        c->seen[c->segs[i].seq] = 0;
        if (!s && (int64_t)c->segs[i].pos + c->segs[i].n > c->n_ctx)
            s = llm_error_set(LLM_E_INVALID, "context full: sequence %d would hold %lld tokens, "
                              "more than the context of %d", c->segs[i].seq,
                              (long long)c->segs[i].pos + c->segs[i].n, c->n_ctx);
    }
    *n_segs = ns;
    return s;
}

/* Prepare the KV of the runs sl (n_sl) and carry out the copies. The
 * copies of the runs prepared are done even if a later one failed, so that
 * no table points at a block that was never filled. */
static llm_status runs_prepare(struct llm_context *c, const struct llm_seg *sl, int32_t n_sl)
{
    llm_status s = LLM_OK;
    for (int32_t i = 0; i < n_sl && !s; i++)
        s = llm_kv_prepare(c->kv, sl[i].seq, sl[i].pos, sl[i].n);
    if (c->kv->n_copies) {
        llm_status cs = c->be->ops->kv_copy(c->be, c->kv);
        if (!s)
            s = cs;
    }
    return s;
}

/* Take the KV blocks of every run, all or none. With sliding-window layers
 * they are taken slice by slice instead (kv.h: a window layer's rows are
 * bounded for steps of n_batch tokens); the count checked here is theirs
 * too, since no block is given back by the windows. */
static llm_status batch_blocks(struct llm_context *c, int32_t ns)
{
    int64_t need = 0, avail = llm_kv_free_blocks(c->kv);
    for (int32_t i = 0; i < ns; i++) {
        const struct llm_seg *g = &c->segs[i];
        int32_t freed;
        need += llm_kv_need(c->kv, g->seq, g->pos, g->n, &freed);
        avail += freed;
    }
    if (need > avail)
        return llm_error_set(LLM_E_KV_FULL, "KV cache full: the batch needs %lld blocks, %lld "
                             "are free", (long long)need, (long long)avail);
    /* a run that starts behind its window rows is refused before anything
     * changes (it cannot go on from there: kv.h) */
    for (int32_t i = 0; i < ns; i++)
        if (!llm_kv_can_cut(c->kv, c->segs[i].seq, c->segs[i].pos))
            return llm_kv_prepare(c->kv, c->segs[i].seq, c->segs[i].pos, c->segs[i].n);
    return c->kv->n_local ? LLM_OK : runs_prepare(c, c->segs, ns);
}

llm_status llm_decode_batch(struct llm_context *c, const struct llm_batch *b, float *logits)
{
    const struct llm_config *cf = &c->m->c;
    struct llm_backend *be = c->be;
    int32_t ns;
    LLM_TRY(batch_runs(c, b, &ns));
    if (be->n_threads != c->n_threads)
        LLM_TRY(be->ops->threads(be, c->n_threads));
    LLM_TRY(batch_blocks(c, ns));
    int64_t n_out = 0;
    for (int32_t s0 = 0, g = 0; s0 < b->n; s0 += c->n_batch) {
        const int32_t n = b->n - s0 < c->n_batch ? b->n - s0 : c->n_batch;
        /* the runs of the slice [s0, s0 + n), rows relative to it */
        int32_t n_sl = 0;
        while (g < ns && c->segs[g].row + c->segs[g].n <= s0)
            g++;
        for (const struct llm_seg *sg = c->segs + g; sg < c->segs + ns && sg->row < s0 + n;
             sg++) {
            const int32_t r0 = sg->row > s0 ? sg->row : s0,
                          r1 = sg->row + sg->n < s0 + n ? sg->row + sg->n : s0 + n;
            c->sl[n_sl++] = (struct llm_seg){ .seq = sg->seq, .pos = sg->pos + (r0 - sg->row),
                                              .n = r1 - r0, .row = r0 - s0 };
        }
        if (c->kv->n_local)
            LLM_TRY(runs_prepare(c, c->sl, n_sl));
        llm_model_rope_tables(c, b->pos + s0, n);
        LLM_TRY(llm_layer_embed(c, NULL, b->token + s0, n, c->x));
        for (int32_t l = 0; l < cf->n_layers; l++)
            LLM_TRY(llm_model_layer(c, l, c->sl, n_sl, n));
        for (int32_t k = 0; k < n_sl; k++)
            llm_kv_set_len(c->kv, c->sl[k].seq, c->sl[k].pos + c->sl[k].n);
        if (!logits)
            continue;
        int32_t n_rows = 0;
        for (int32_t i = 0; i < n; i++) {
            const int32_t r = s0 + i;
            /* NULL flags: the last token of each sequence's run */
            int want = b->logits ? b->logits[r] != 0 : r + 1 == b->n || b->seq[r + 1] != b->seq[r];
            if (want)
                c->out_rows[n_rows++] = i;
        }
        if (n_rows)
            LLM_TRY(head_forward(c, c->out_rows, n_rows, logits + n_out * cf->n_vocab));
        n_out += n_rows;
    }
    return LLM_OK;
}

llm_status llm_decode(struct llm_context *c, int32_t seq, const int32_t *tokens, int32_t n,
                      int32_t pos, float *logits, int all_logits)
{
    if (n <= 0)
        return llm_error_set(LLM_E_INVALID, "decode: %d tokens at position %d", n, pos);
    int32_t *ps = llm_malloc(2 * (size_t)n * sizeof(int32_t));
    int8_t *want = all_logits ? llm_malloc((size_t)n) : NULL;
    if (!ps || (all_logits && !want)) {
        llm_free(ps);
        llm_free(want);
        return LLM_E_NOMEM;
    }
    for (int32_t i = 0; i < n; i++) {
        ps[i] = pos + i;
        ps[n + i] = seq;
    }
    if (want)
        memset(want, 1, (size_t)n);
    struct llm_batch b = { .n = n, .token = tokens, .pos = ps, .seq = ps + n, .logits = want };
    llm_status s = llm_decode_batch(c, &b, logits);
    llm_free(ps);
    llm_free(want);
    return s;
}

/* ---- identity and KV rows, for state files (kv/state.h) ------------------- */

/* Hash a config scalar by value (no struct padding is hashed). */
#define ID_ADD(st, v)                                                                   \
    do {                                                                                \
        __typeof__(v) v_ = (v);                                                         \
        XXH3_64bits_update((st), &v_, sizeof v_);                                       \
    } while (0)

llm_status llm_model_id(struct llm_model *m, uint64_t *id)
{
    if (m->id) {
        *id = m->id;
        return LLM_OK;
    }
    XXH3_state_t *st = XXH3_createState();
    if (!st)
        return LLM_E_NOMEM;
    XXH3_64bits_reset(st);
    const struct llm_config *c = &m->c;
    XXH3_64bits_update(st, c->arch, strnlen(c->arch, sizeof c->arch));
    ID_ADD(st, c->n_heads);
    ID_ADD(st, c->n_kv_heads);
    ID_ADD(st, c->head_dim);
    ID_ADD(st, c->rope_dim);
    ID_ADD(st, c->rope_theta);
    ID_ADD(st, c->rope_neox);
    XXH3_64bits_update(st, c->rope_scaling, strnlen(c->rope_scaling, sizeof c->rope_scaling));
    ID_ADD(st, c->rope_factor);
    ID_ADD(st, c->rope_orig_ctx);
    ID_ADD(st, c->rms_eps);
    /* the window changes what a position sees: a model without it (or the
     * same weights under another window) must not share cached states;
     * models without one keep the identity they had before windows */
    if (c->swa_window) {
        ID_ADD(st, c->swa_window);
        ID_ADD(st, c->swa_pattern);
    }
    if (c->rope_theta_swa > 0)
        ID_ADD(st, c->rope_theta_swa);
    if (c->attn_softcap > 0 || c->final_softcap > 0) {
        ID_ADD(st, c->attn_softcap);
        ID_ADD(st, c->final_softcap);
    }
    if (c->query_scalar != (float)c->head_dim)
        ID_ADD(st, c->query_scalar);
    void *buf = NULL;
    size_t cap = 0;
    llm_status s = LLM_OK;
    for (size_t i = 0; !s && i < m->f->n_tensors; i++) {
        struct llm_tensor *t = &m->f->tensors[i];
        /* a .llm file stores each tensor's XXH3-64; elsewhere it is
         * computed, so that a model has one identity in every format that
         * holds the same bytes */
        uint64_t sum = t->checksum;
        if (strcmp(m->f->format, "llm") || t->fill) {
            const void *p;
            s = llm_tensor_peek(m->f, t, &p);
            if (!s && !p) {
                if (t->nbytes > cap) {
                    llm_free(buf);
                    cap = 0;
                    if (!(buf = llm_malloc((size_t)t->nbytes))) {
                        s = LLM_E_NOMEM;
                        break;
                    }
                    cap = (size_t)t->nbytes;
                }
                s = llm_tensor_read(m->f, t, buf);
                p = buf;
            }
            if (!s)
                sum = XXH3_64bits(p, (size_t)t->nbytes);
        }
        XXH3_64bits_update(st, t->name, strlen(t->name));
        ID_ADD(st, (uint32_t)t->type);
        XXH3_64bits_update(st, t->ne, sizeof t->ne);
        ID_ADD(st, sum);
    }
    llm_free(buf);
    uint64_t h = XXH3_64bits_digest(st);
    XXH3_freeState(st);
    if (s)
        return s;
    m->id = h ? h : 1;
    *id = m->id;
    return LLM_OK;
}

/* q4ch keys of one layer, by block (kv.h, and the state files' records): a
 * whole block's bytes, or the fp16 tail rows of the last, partly filled one
 * (rows advances past them). */
static llm_status q4ch_rows_copy(struct llm_context *c, int32_t seq, int32_t l, int32_t pos,
                                 int32_t n, uint8_t **rows, int store)
{
    struct llm_kv *kv = c->kv;
    const int32_t bs = kv->p.block_size;
    if (n == bs) {
        const size_t nb = (size_t)bs * kv->row_bytes_k;
        if (!llm_kv_has_row(kv, l, seq, pos)) { /* behind the window: zeros */
            if (!store)
                memset(*rows, 0, nb);
            *rows += nb;
            return LLM_OK;
        }
        uint8_t *at = (uint8_t *)kv->k + (size_t)llm_kv_row_number(kv, l, seq, pos) * kv->row_bytes_k;
        LLM_TRY(store ? c->be->ops->upload(c->be, at, *rows, nb)
                      : c->be->ops->download(c->be, *rows, at, nb));
        *rows += nb;
        return LLM_OK;
    }
    const size_t nb = (size_t)n * (size_t)kv->kv_dim * sizeof(uint16_t);
    uint16_t *at = llm_kv_tail_row(kv, seq, l, pos);
    if (store) {
        memcpy(at, *rows, nb);
        llm_kv_tail_mark(kv, seq, pos / bs);
    } else {
        memcpy(*rows, at, nb);
    }
    *rows += nb;
    return LLM_OK;
}

/* Copy the K and V rows of positions pos .. pos+n-1 of seq between the
 * cache and rows (n_layers, 2, n, kv_dim), a block's run at a time. */
static llm_status kv_rows_copy(struct llm_context *c, int32_t seq, int32_t pos, int32_t n,
                               uint8_t *rows, int store)
{
    const struct llm_kv *kv = c->kv;
    const int32_t bs = kv->p.block_size;
    const int q4ch = kv->p.type_k == LLM_TYPE_Q4Z_CH;
    /* q4ch: a block at a time, whole or the last (kv.h) */
    if (q4ch && (pos % bs || n > bs || (n < bs && pos + n != llm_kv_len(kv, seq) && !store)))
        return llm_error_set(LLM_E_INVALID, "KV rows %d..%d of q4ch keys are not one block", pos,
                             pos + n - 1);
    for (int32_t l = 0; l < kv->p.n_layers; l++)
        for (int which = 0; which < 2; which++) {
            if (!which && q4ch) {
                LLM_TRY(q4ch_rows_copy(c, seq, l, pos, n, &rows, store));
                continue;
            }
            uint8_t *base = which ? kv->v : kv->k;
            for (int32_t p = pos; p < pos + n;) {
                int32_t run = bs - p % bs;
                if (run > pos + n - p)
                    run = pos + n - p;
                const size_t rb = which ? kv->row_bytes_v : kv->row_bytes_k;
                size_t nb = (size_t)run * rb;
                if (!llm_kv_has_row(kv, l, seq, p)) { /* behind the window: zeros */
                    if (!store)
                        memset(rows, 0, nb);
                    rows += nb;
                    p += run;
                    continue;
                }
                uint8_t *at = base + (size_t)llm_kv_row_number(kv, l, seq, p) * rb;
                LLM_TRY(store ? c->be->ops->upload(c->be, at, rows, nb)
                              : c->be->ops->download(c->be, rows, at, nb));
                rows += nb;
                p += run;
            }
        }
    return LLM_OK;
}

llm_status llm_context_kv_save(struct llm_context *c, int32_t seq, int32_t pos, int32_t n,
                               void *rows)
{
    if (seq < 0 || seq >= c->kv->p.n_seq || pos < 0 || n < 0 || pos + n > llm_kv_len(c->kv, seq))
        return llm_error_set(LLM_E_INVALID, "KV rows %d..%d of sequence %d are not stored", pos,
                             pos + n - 1, seq);
    return kv_rows_copy(c, seq, pos, n, rows, 0);
}

llm_status llm_context_kv_load(struct llm_context *c, int32_t seq, int32_t pos, int32_t n,
                               const void *rows)
{
    if (seq < 0 || seq >= c->kv->p.n_seq || pos < 0 || n < 0 || pos != llm_kv_len(c->kv, seq))
        return llm_error_set(LLM_E_INVALID, "KV rows %d..%d cannot follow sequence %d's %d", pos,
                             pos + n - 1, seq, seq >= 0 && seq < c->kv->p.n_seq
                             ? llm_kv_len(c->kv, seq) : 0);
    if (c->kv->n_local && n > c->kv->p.max_step) /* (the window layers' bound, kv.h) */
        return llm_error_set(LLM_E_INVALID, "KV rows %d..%d: more at once than the %d of a step "
                             "of a context with sliding windows (a state of another block size?)",
                             pos, pos + n - 1, c->kv->p.max_step);
    llm_status s = llm_kv_prepare(c->kv, seq, pos, n);
    if (s == LLM_E_KV_FULL)
        return llm_error_set(s, "KV cache full: the pool's blocks cannot hold %d positions (use a "
                             "larger KV budget)", pos + n);
    LLM_TRY(s);
    if (c->kv->n_copies)
        LLM_TRY(c->be->ops->kv_copy(c->be, c->kv));
    LLM_TRY(kv_rows_copy(c, seq, pos, n, (uint8_t *)(uintptr_t)rows, 1));
    llm_kv_set_len(c->kv, seq, pos + n);
    return LLM_OK;
}
