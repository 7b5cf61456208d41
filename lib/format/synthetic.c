/* synthetic.c: random-weight models of published shapes, for tests and
 * benchmarks.
 *
 * Every tensor is produced on demand by a fill callback from a generator
 * seeded with hash(name) ^ seed, so a 7B model costs no memory until it is
 * written, tensor by tensor, and the bytes of a tensor do not depend on which
 * other tensors exist or on the order they are written in. Matrices are drawn
 * uniform with the standard deviation of a usual init (0.02) and converted to
 * the requested type; norms are 1 (qwen3's per-head q/k norms and all of
 * Gemma's drawn from [0.5, 1.5), so that their weights matter) and biases
 * small, all f32.
 */
#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "../common/alloc.h"
#include "../common/fp16.h"
#include "../common/io.h"
#include "../common/status.h"
#include "../quant/quant.h"
#include "../quant/types.h"
#include "file.h"
#include "import.h"
#include "meta.h"

#define SYN_STD 0.02
#define SYN_MAX_YAML (1u << 20)

struct syn_shape {
    const char *name;
    const char *arch;   /* llama | mistral | qwen2 | qwen3 | gemma2 | gemma3 | phi3 |
                           mixtral | qwen2moe | qwen3moe */
    int64_t dim, hidden, n_layers, n_heads, n_kv_heads, vocab, ctx;
    int64_t head_dim;   /* 0: dim / n_heads */
    double rope_theta, rms_eps;
    int tie;
    int qkv_bias;
    int64_t swa;        /* sliding window (0: none) */
    int64_t swa_pattern; /* 0: the architecture's (every layer; gemma3: 6) */
    double rope_theta_swa; /* 0: the architecture's (gemma3: 10000) */
    double attn_softcap, final_softcap; /* 0: none */
    int64_t n_expert, n_expert_used, expert_ff, shared_ff; /* mixture of experts */
    int expert_norm;    /* -1: the architecture's */
    int64_t longrope_ctx; /* LongRoPE's original context (> 0: factor tensors) */
};

/* hparams from each model's published config (config.json / params.json) */
static const struct syn_shape shapes[] = {
    {"stories260k", "llama", 64, 172, 5, 8, 4, 512, 512, 0, 10000.0, 1e-5, 1, 0},
    {"stories15m", "llama", 288, 768, 6, 6, 6, 32000, 256, 0, 10000.0, 1e-5, 1, 0},
    {"stories110m", "llama", 768, 2048, 12, 12, 12, 32000, 1024, 0, 10000.0, 1e-5, 1, 0},
    {"smollm2-135m", "llama", 576, 1536, 30, 9, 3, 49152, 8192, 0, 100000.0, 1e-5, 1, 0},
    {"llama-2-7b", "llama", 4096, 11008, 32, 32, 32, 32000, 4096, 0, 10000.0, 1e-5, 0, 0},
    {"llama-3-8b", "llama", 4096, 14336, 32, 32, 8, 128256, 8192, 0, 500000.0, 1e-5, 0, 0},
    {"mistral-7b", "mistral", 4096, 14336, 32, 32, 8, 32000, 32768, 0, 1000000.0, 1e-5, 0, 0},
    {"qwen2-0.5b", "qwen2", 896, 4864, 24, 14, 2, 151936, 131072, 0, 1000000.0, 1e-6, 1, 1},
    {"qwen3-0.6b", "qwen3", 1024, 3072, 28, 16, 8, 151936, 40960, 128, 1000000.0, 1e-6, 1, 0},
    {"mistral-7b-v0.1", "mistral", 4096, 14336, 32, 32, 8, 32000, 32768, 0, 10000.0, 1e-5, 0, 0,
     4096},
    {"gemma2-2b", "gemma2", 2304, 9216, 26, 8, 4, 256000, 8192, 256, 10000.0, 1e-6, 1, 0, 4096, 0,
     0, 50.0, 30.0},
    {"gemma3-270m", "gemma3", 640, 2048, 18, 4, 1, 262144, 32768, 256, 1000000.0, 1e-6, 1, 0, 512},
    {"phi-3-mini-4k", "phi3", 3072, 8192, 32, 32, 32, 32064, 4096, 0, 10000.0, 1e-5, 0, 0, 2047},
    {.name = "mixtral-8x7b", .arch = "mixtral", .dim = 4096, .hidden = 14336, .n_layers = 32,
     .n_heads = 32, .n_kv_heads = 8, .vocab = 32000, .ctx = 32768, .rope_theta = 1000000.0,
     .rms_eps = 1e-5, .n_expert = 8, .n_expert_used = 2, .expert_ff = 14336, .expert_norm = -1},
    {.name = "qwen1.5-moe-a2.7b", .arch = "qwen2moe", .dim = 2048, .hidden = 5632,
     .n_layers = 24, .n_heads = 16, .n_kv_heads = 16, .vocab = 151936, .ctx = 8192,
     .rope_theta = 1000000.0, .rms_eps = 1e-6, .qkv_bias = 1, .n_expert = 60,
     .n_expert_used = 4, .expert_ff = 1408, .shared_ff = 5632, .expert_norm = -1},
    {.name = "qwen3-30b-a3b", .arch = "qwen3moe", .dim = 2048, .hidden = 6144, .n_layers = 48,
     .n_heads = 32, .n_kv_heads = 4, .head_dim = 128, .vocab = 151936, .ctx = 40960,
     .rope_theta = 1000000.0, .rms_eps = 1e-6, .n_expert = 128, .n_expert_used = 8,
     .expert_ff = 768, .expert_norm = -1},
};
#define N_SHAPES (sizeof shapes / sizeof shapes[0])

enum syn_init { INIT_WEIGHT, INIT_ONES, INIT_BIAS, INIT_NORM, INIT_LONG };

struct syn_tensor {
    uint64_t seed;  /* generator seed of this tensor */
    int init;       /* enum syn_init */
};

const char *llm_synthetic_shapes(void)
{
    return "stories260k,stories15m,stories110m,smollm2-135m,llama-2-7b,llama-3-8b,"
           "mistral-7b,qwen2-0.5b,qwen3-0.6b,mistral-7b-v0.1,gemma2-2b,gemma3-270m,"
           "phi-3-mini-4k,mixtral-8x7b,qwen1.5-moe-a2.7b,qwen3-30b-a3b";
}

/* ---- generator ------------------------------------------------------------- */

static uint64_t splitmix64(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t fnv1a64(const char *s)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *s; s++)
        h = (h ^ (uint8_t)*s) * 0x100000001b3ull;
    return h;
}

/* uniform in [-a, a): std = a / sqrt(3) */
static void gen_row(uint64_t *state, float a, float *row, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        uint64_t r = splitmix64(state);
        float u = (float)(r >> 40) * (1.0f / 16777216.0f); /* [0, 1), 24 bits */
        row[i] = (2.0f * u - 1.0f) * a;
    }
}

static llm_status syn_fill(const struct llm_tensor *t, void *dst, void *ctx)
{
    const struct syn_tensor *st = ctx;
    int64_t ne0 = t->ne[0], nrows = llm_tensor_nrows(t);
    uint64_t row_bytes = llm_type_row_bytes(t->type, (uint64_t)ne0);
    uint64_t state = st->seed;
    float a = (float)(SYN_STD * sqrt(3.0));
    float *row; /* (ne0) */
    llm_status s = LLM_OK;

    if (row_bytes == 0 || row_bytes * (uint64_t)nrows != t->nbytes)
        return llm_error_set(LLM_E_INVALID, "synthetic tensor '%s': size mismatch", t->name);
    row = llm_malloc((size_t)ne0 * sizeof *row);
    if (!row)
        return LLM_E_NOMEM;
    for (int64_t r = 0; r < nrows && s == LLM_OK; r++) {
        uint8_t *out = (uint8_t *)dst + (uint64_t)r * row_bytes;
        if (st->init == INIT_ONES) {
            for (int64_t i = 0; i < ne0; i++)
                row[i] = 1.0f;
        } else if (st->init == INIT_NORM || st->init == INIT_LONG) {
            /* norms and LongRoPE's short factors in [0.5, 1.5), its long
             * ones in [1, 5) */
            const float half = st->init == INIT_LONG ? 2.0f : 0.5f;
            gen_row(&state, half, row, ne0);
            for (int64_t i = 0; i < ne0; i++)
                row[i] += st->init == INIT_LONG ? 3.0f : 1.0f;
        } else {
            gen_row(&state, st->init == INIT_BIAS ? a * 0.1f : a, row, ne0);
        }
        if (t->type == LLM_TYPE_F32) {
            memcpy(out, row, (size_t)ne0 * sizeof *row);
        } else if (t->type == LLM_TYPE_F16 || t->type == LLM_TYPE_BF16) {
            for (int64_t i = 0; i < ne0; i++) {
                uint16_t h = t->type == LLM_TYPE_F16 ? llm_fp32_to_fp16(row[i])
                                                     : llm_fp32_to_bf16(row[i]);
                memcpy(out + 2 * i, &h, 2);
            }
        } else {
            s = llm_quantize_row(t->type, row, out, ne0);
        }
    }
    llm_free(row);
    return s;
}

/* ---- shape files ----------------------------------------------------------- */

static const char *const yaml_keys[] = {
    "architecture",  "embedding_length", "feed_forward_length", "block_count",
    "head_count",    "head_count_kv",    "vocab_size",          "context_length",
    "rope_theta",    "rms_norm_eps",     "tie_embeddings",      "head_dim",
    "attention_bias", "name",        "sliding_window",      "sliding_window_pattern",
    "rope_theta_swa", "attn_softcap", "final_softcap", "expert_count", "expert_used_count",
    "expert_feed_forward_length", "expert_shared_feed_forward_length", "expert_weights_norm",
    "longrope_original_context",
};

static llm_status yaml_int(const struct llm_meta *root, const char *path, const char *key,
                           int64_t *out)
{
    struct llm_meta *m = llm_meta_child(root, key);
    LLM_CHECK(m, LLM_E_FORMAT, "%s: missing key '%s'", path, key);
    LLM_CHECK(m->kind == LLM_META_INT, LLM_E_FORMAT, "%s:%zu: key '%s': expected an integer",
              path, m->line, key);
    LLM_CHECK(m->i > 0 && m->i <= INT32_MAX, LLM_E_FORMAT,
              "%s:%zu: key '%s': %lld is out of range (1..%d)", path, m->line, key,
              (long long)m->i, INT32_MAX);
    *out = m->i;
    return LLM_OK;
}

static llm_status yaml_float(const struct llm_meta *root, const char *path, const char *key,
                             double *out)
{
    struct llm_meta *m = llm_meta_child(root, key);
    LLM_CHECK(m, LLM_E_FORMAT, "%s: missing key '%s'", path, key);
    LLM_CHECK(m->kind == LLM_META_INT || m->kind == LLM_META_FLOAT, LLM_E_FORMAT,
              "%s:%zu: key '%s': expected a number", path, m->line, key);
    *out = m->kind == LLM_META_INT ? (double)m->i : m->f;
    LLM_CHECK(isfinite(*out) && *out > 0, LLM_E_FORMAT, "%s:%zu: key '%s': must be positive",
              path, m->line, key);
    return LLM_OK;
}

static llm_status yaml_bool(const struct llm_meta *root, const char *path, const char *key,
                            int *out)
{
    struct llm_meta *m = llm_meta_child(root, key);
    LLM_CHECK(m, LLM_E_FORMAT, "%s: missing key '%s'", path, key);
    LLM_CHECK(m->kind == LLM_META_BOOL, LLM_E_FORMAT, "%s:%zu: key '%s': expected true or false",
              path, m->line, key);
    *out = (int)m->i;
    return LLM_OK;
}

/* Keys: those of the named shapes; head_dim, attention_bias,
 * sliding_window, sliding_window_pattern, rope_theta_swa, attn_softcap,
 * final_softcap and the experts' keys optional. */
static llm_status shape_from_yaml(const struct llm_meta *root, const char *path,
                                  struct syn_shape *sh, char *arch, size_t arch_cap)
{
    struct llm_meta *m;

    LLM_CHECK(root->kind == LLM_META_MAP, LLM_E_FORMAT, "%s: expected a map of shape keys",
              path);
    for (size_t i = 0; i < root->n; i++) {
        const char *key = root->items[i]->key;
        size_t k = 0;
        while (k < sizeof yaml_keys / sizeof yaml_keys[0] && strcmp(key, yaml_keys[k]) != 0)
            k++;
        LLM_CHECK(k < sizeof yaml_keys / sizeof yaml_keys[0], LLM_E_FORMAT,
                  "%s:%zu: unknown key '%s'", path, root->items[i]->line, key);
    }
    memset(sh, 0, sizeof *sh);
    m = llm_meta_child(root, "architecture");
    LLM_CHECK(m, LLM_E_FORMAT, "%s: missing key 'architecture'", path);
    LLM_CHECK(m->kind == LLM_META_STR &&
                  (!strcmp(m->s, "llama") || !strcmp(m->s, "mistral") ||
                   !strcmp(m->s, "qwen2") || !strcmp(m->s, "qwen3") || !strcmp(m->s, "gemma2") ||
                   !strcmp(m->s, "gemma3") || !strcmp(m->s, "phi3") || !strcmp(m->s, "mixtral") ||
                   !strcmp(m->s, "qwen2moe") || !strcmp(m->s, "qwen3moe")),
              LLM_E_FORMAT, "%s:%zu: key 'architecture': expected llama, mistral, qwen2, qwen3, "
              "gemma2, gemma3, phi3, mixtral, qwen2moe or qwen3moe",
              path, m->line);
    snprintf(arch, arch_cap, "%s", m->s);
    sh->arch = arch;
    sh->name = path;
    LLM_TRY(yaml_int(root, path, "embedding_length", &sh->dim));
    LLM_TRY(yaml_int(root, path, "feed_forward_length", &sh->hidden));
    LLM_TRY(yaml_int(root, path, "block_count", &sh->n_layers));
    LLM_TRY(yaml_int(root, path, "head_count", &sh->n_heads));
    LLM_TRY(yaml_int(root, path, "head_count_kv", &sh->n_kv_heads));
    LLM_TRY(yaml_int(root, path, "vocab_size", &sh->vocab));
    LLM_TRY(yaml_int(root, path, "context_length", &sh->ctx));
    LLM_TRY(yaml_float(root, path, "rope_theta", &sh->rope_theta));
    LLM_TRY(yaml_float(root, path, "rms_norm_eps", &sh->rms_eps));
    LLM_TRY(yaml_bool(root, path, "tie_embeddings", &sh->tie));
    if (llm_meta_child(root, "head_dim"))
        LLM_TRY(yaml_int(root, path, "head_dim", &sh->head_dim));
    /* qwen2 has q/k/v biases by definition */
    sh->qkv_bias = !strcmp(arch, "qwen2") || !strcmp(arch, "qwen2moe");
    sh->expert_norm = -1;
    if (llm_meta_child(root, "attention_bias"))
        LLM_TRY(yaml_bool(root, path, "attention_bias", &sh->qkv_bias));
    if (llm_meta_child(root, "sliding_window"))
        LLM_TRY(yaml_int(root, path, "sliding_window", &sh->swa));
    if (llm_meta_child(root, "sliding_window_pattern"))
        LLM_TRY(yaml_int(root, path, "sliding_window_pattern", &sh->swa_pattern));
    if (llm_meta_child(root, "rope_theta_swa"))
        LLM_TRY(yaml_float(root, path, "rope_theta_swa", &sh->rope_theta_swa));
    if (llm_meta_child(root, "attn_softcap"))
        LLM_TRY(yaml_float(root, path, "attn_softcap", &sh->attn_softcap));
    if (llm_meta_child(root, "final_softcap"))
        LLM_TRY(yaml_float(root, path, "final_softcap", &sh->final_softcap));
    static const char *const ek[] = { "expert_count", "expert_used_count",
                                      "expert_feed_forward_length",
                                      "expert_shared_feed_forward_length" };
    int64_t *ev[] = { &sh->n_expert, &sh->n_expert_used, &sh->expert_ff, &sh->shared_ff };
    for (size_t i = 0; i < 4; i++)
        if (llm_meta_child(root, ek[i]))
            LLM_TRY(yaml_int(root, path, ek[i], ev[i]));
    if (llm_meta_child(root, "expert_weights_norm"))
        LLM_TRY(yaml_bool(root, path, "expert_weights_norm", &sh->expert_norm));
    if (llm_meta_child(root, "longrope_original_context"))
        LLM_TRY(yaml_int(root, path, "longrope_original_context", &sh->longrope_ctx));
    const int moe_arch = !strcmp(arch, "mixtral") || strstr(arch, "moe") != NULL;
    LLM_CHECK(moe_arch == (sh->n_expert > 0) &&
                  (!sh->n_expert || (sh->n_expert_used >= 1 && sh->n_expert_used <= sh->n_expert)),
              LLM_E_FORMAT, "%s: %s needs expert_count and expert_used_count (1..expert_count) "
              "exactly when the architecture has experts", path, arch);
    if (sh->n_expert && !sh->expert_ff)
        sh->expert_ff = sh->hidden;
    return LLM_OK;
}

static llm_status load_yaml_shape(const char *path, struct syn_shape *sh, char *arch,
                                  size_t arch_cap)
{
    char *text = NULL;
    size_t len = 0;
    struct llm_meta *root = NULL;
    llm_status s;

    LLM_TRY(llm_read_file(path, SYN_MAX_YAML, &text, &len));
    s = llm_meta_parse_yaml(&root, text, len, path);
    llm_free(text);
    if (s != LLM_OK)
        return s;
    s = shape_from_yaml(root, path, sh, arch, arch_cap);
    llm_meta_free(root);
    return s;
}

/* ---- model ------------------------------------------------------------------ */

static llm_status check_shape(const struct syn_shape *sh)
{
    int64_t hd = sh->head_dim ? sh->head_dim : sh->dim / sh->n_heads;
    LLM_CHECK(sh->head_dim || sh->dim % sh->n_heads == 0, LLM_E_FORMAT,
              "%s: embedding_length %lld is not a multiple of head_count %lld", sh->name,
              (long long)sh->dim, (long long)sh->n_heads);
    LLM_CHECK(sh->n_kv_heads <= sh->n_heads && sh->n_heads % sh->n_kv_heads == 0, LLM_E_FORMAT,
              "%s: head_count %lld is not a multiple of head_count_kv %lld", sh->name,
              (long long)sh->n_heads, (long long)sh->n_kv_heads);
    LLM_CHECK(hd % 2 == 0, LLM_E_FORMAT, "%s: head size %lld is odd (RoPE rotates pairs)",
              sh->name, (long long)hd);
    return LLM_OK;
}

/* A tensor of ne0 x ne1 (x ne2 when ne2 > 1; a vector when ne1 is 1 and it
 * is not a weight matrix). */
static llm_status add3(struct llm_file *f, struct syn_tensor *ctx, size_t *n_ctx, uint64_t seed,
                       const char *name, enum llm_type type, int init, int64_t ne0, int64_t ne1,
                       int64_t ne2)
{
    int64_t ne[3] = {ne0, ne1, ne2};
    struct llm_tensor *t;
    struct syn_tensor *st = &ctx[(*n_ctx)++];
    uint64_t h = fnv1a64(name) ^ seed;

    st->seed = splitmix64(&h);
    st->init = init;
    LLM_TRY(llm_file_add_tensor(f, name, type, ne2 > 1 ? 3 : init == INIT_WEIGHT ? 2 : 1, ne, NULL,
                                &t));
    t->fill = syn_fill;
    t->fill_ctx = st;
    return LLM_OK;
}

static llm_status add(struct llm_file *f, struct syn_tensor *ctx, size_t *n_ctx, uint64_t seed,
                      const char *name, enum llm_type type, int init, int64_t ne0, int64_t ne1)
{
    return add3(f, ctx, n_ctx, seed, name, type, init, ne0, ne1, 1);
}

static llm_status build(struct llm_file *f, const struct syn_shape *sh, enum llm_type type,
                        uint64_t seed, const char *shape_arg)
{
    static const char *const mat[] = {"attn_q", "attn_k", "attn_v", "attn_output",
                                      "ffn_gate", "ffn_down", "ffn_up"};
    int64_t hd = sh->head_dim ? sh->head_dim : sh->dim / sh->n_heads;
    int64_t q_dim = hd * sh->n_heads, kv_dim = hd * sh->n_kv_heads;
    /* {ne0, ne1} of each of mat[]: a [out][in] matrix is {in, out} */
    const int64_t mat_ne[7][2] = {{sh->dim, q_dim},     {sh->dim, kv_dim},
                                  {sh->dim, kv_dim},    {q_dim, sh->dim},
                                  {sh->dim, sh->hidden}, {sh->hidden, sh->dim},
                                  {sh->dim, sh->hidden}};
    const int gemma = !strncmp(sh->arch, "gemma", 5);
    const int qk_norm = !strcmp(sh->arch, "qwen3") || !strcmp(sh->arch, "gemma3") ||
                        !strcmp(sh->arch, "qwen3moe");
    const int moe = sh->n_expert > 0, shared = moe && sh->shared_ff > 0;
    const int norm_init = gemma ? INIT_NORM : INIT_ONES;
    size_t per_layer = 9 + (sh->qkv_bias ? 3 : 0) + (qk_norm ? 2 : 0) + (gemma ? 2 : 0) +
                       (moe ? 1 : 0) + (shared ? 4 : 0);
    size_t n = 5 + (size_t)sh->n_layers * per_layer, n_ctx = 0;
    struct syn_tensor *ctx = llm_calloc(n, sizeof *ctx);
    char name[LLM_MAX_NAME];
    struct llm_meta *m = f->meta;

    if (!ctx)
        return LLM_E_NOMEM;
    LLM_TRY(llm_file_own(f, ctx));

    LLM_TRY(add(f, ctx, &n_ctx, seed, "token_embd.weight", type, INIT_WEIGHT, sh->dim,
                sh->vocab));
    for (int64_t l = 0; l < sh->n_layers; l++) {
        snprintf(name, sizeof name, "blk.%lld.attn_norm.weight", (long long)l);
        LLM_TRY(add(f, ctx, &n_ctx, seed, name, LLM_TYPE_F32, norm_init, sh->dim, 1));
        for (size_t i = 0; i < 7; i++) {
            if (i == 4) {
                snprintf(name, sizeof name, "blk.%lld.ffn_norm.weight", (long long)l);
                LLM_TRY(add(f, ctx, &n_ctx, seed, name, LLM_TYPE_F32, norm_init, sh->dim, 1));
            }
            if (moe && i >= 4) { /* the experts: 3-D, and the router */
                const int64_t ne0 = i == 5 ? sh->expert_ff : sh->dim,
                              ne1 = i == 5 ? sh->dim : sh->expert_ff;
                snprintf(name, sizeof name, "blk.%lld.%s_exps.weight", (long long)l, mat[i]);
                LLM_TRY(add3(f, ctx, &n_ctx, seed, name, type, INIT_WEIGHT, ne0, ne1,
                             sh->n_expert));
                if (i == 4) {
                    snprintf(name, sizeof name, "blk.%lld.ffn_gate_inp.weight", (long long)l);
                    LLM_TRY(add(f, ctx, &n_ctx, seed, name, type, INIT_WEIGHT, sh->dim,
                                sh->n_expert));
                }
                if (shared) { /* qwen2moe's shared expert and its gate's row */
                    const int64_t s0 = i == 5 ? sh->shared_ff : sh->dim,
                                  s1 = i == 5 ? sh->dim : sh->shared_ff;
                    snprintf(name, sizeof name, "blk.%lld.%s_shexp.weight", (long long)l, mat[i]);
                    LLM_TRY(add(f, ctx, &n_ctx, seed, name, type, INIT_WEIGHT, s0, s1));
                    if (i == 4) {
                        snprintf(name, sizeof name, "blk.%lld.ffn_gate_inp_shexp.weight",
                                 (long long)l);
                        LLM_TRY(add(f, ctx, &n_ctx, seed, name, LLM_TYPE_F32, INIT_BIAS, sh->dim,
                                    1));
                    }
                }
                continue;
            }
            snprintf(name, sizeof name, "blk.%lld.%s.weight", (long long)l, mat[i]);
            LLM_TRY(add(f, ctx, &n_ctx, seed, name, type, INIT_WEIGHT, mat_ne[i][0],
                        mat_ne[i][1]));
            if (sh->qkv_bias && i < 3) {
                snprintf(name, sizeof name, "blk.%lld.%s.bias", (long long)l, mat[i]);
                LLM_TRY(add(f, ctx, &n_ctx, seed, name, LLM_TYPE_F32, INIT_BIAS, mat_ne[i][1],
                            1));
            }
        }
        for (int i = 0; qk_norm && i < 2; i++) {
            snprintf(name, sizeof name, "blk.%lld.attn_%c_norm.weight", (long long)l, "qk"[i]);
            LLM_TRY(add(f, ctx, &n_ctx, seed, name, LLM_TYPE_F32, INIT_NORM, hd, 1));
        }
        for (int i = 0; gemma && i < 2; i++) {
            snprintf(name, sizeof name, "blk.%lld.%s.weight", (long long)l,
                     i ? "post_ffw_norm" : "post_attention_norm");
            LLM_TRY(add(f, ctx, &n_ctx, seed, name, LLM_TYPE_F32, INIT_NORM, sh->dim, 1));
        }
    }
    LLM_TRY(add(f, ctx, &n_ctx, seed, "output_norm.weight", LLM_TYPE_F32, norm_init, sh->dim,
                1));
    if (!sh->tie)
        LLM_TRY(add(f, ctx, &n_ctx, seed, "output.weight", type, INIT_WEIGHT, sh->dim,
                    sh->vocab));
    if (sh->longrope_ctx > 0) { /* Phi-3's LongRoPE: a factor per rotary pair */
        LLM_TRY(add(f, ctx, &n_ctx, seed, "rope_factors_short.weight", LLM_TYPE_F32, INIT_NORM,
                    hd / 2, 1));
        LLM_TRY(add(f, ctx, &n_ctx, seed, "rope_factors_long.weight", LLM_TYPE_F32, INIT_LONG,
                    hd / 2, 1));
    }

    LLM_TRY(llm_meta_set_str(m, "architecture", sh->arch));
    snprintf(name, sizeof name, "synthetic %s", shape_arg);
    LLM_TRY(llm_meta_set_str(m, "name", name));
    LLM_TRY(llm_meta_set_i64(m, "hparams.vocab_size", sh->vocab));
    LLM_TRY(llm_meta_set_i64(m, "hparams.context_length", sh->ctx));
    LLM_TRY(llm_meta_set_i64(m, "hparams.embedding_length", sh->dim));
    LLM_TRY(llm_meta_set_i64(m, "hparams.block_count", sh->n_layers));
    LLM_TRY(llm_meta_set_i64(m, "hparams.feed_forward_length", sh->hidden));
    LLM_TRY(llm_meta_set_i64(m, "hparams.head_count", sh->n_heads));
    LLM_TRY(llm_meta_set_i64(m, "hparams.head_count_kv", sh->n_kv_heads));
    LLM_TRY(llm_meta_set_i64(m, "hparams.head_dim", hd));
    LLM_TRY(llm_meta_set_i64(m, "hparams.rope_dim", hd));
    LLM_TRY(llm_meta_set_f32(m, "hparams.rope_theta", (float)sh->rope_theta));
    LLM_TRY(llm_meta_set_f32(m, "hparams.rms_norm_eps", (float)sh->rms_eps));
    /* random weights fit either order; say what a real model of the arch uses */
    LLM_TRY(llm_meta_set_str(m, "hparams.rope_type",
                             strncmp(sh->arch, "qwen", 4) == 0 || gemma || !strcmp(sh->arch, "phi3")
                                 ? "neox"
                                 : "norm"));
    if (sh->swa)
        LLM_TRY(llm_meta_set_i64(m, "hparams.sliding_window", sh->swa));
    if (sh->swa_pattern)
        LLM_TRY(llm_meta_set_i64(m, "hparams.sliding_window_pattern", sh->swa_pattern));
    if (sh->rope_theta_swa > 0)
        LLM_TRY(llm_meta_set_f32(m, "hparams.rope_theta_swa", (float)sh->rope_theta_swa));
    if (sh->longrope_ctx > 0) { /* transformers' attention factor for it */
        const double factor = (double)sh->ctx / (double)sh->longrope_ctx;
        LLM_TRY(llm_meta_set_str(m, "hparams.rope_scaling.type", "longrope"));
        LLM_TRY(llm_meta_set_f32(m, "hparams.rope_scaling.factor", (float)factor));
        LLM_TRY(llm_meta_set_i64(m, "hparams.rope_scaling.original_context_length",
                                 sh->longrope_ctx));
        LLM_TRY(llm_meta_set_f32(m, "hparams.rope_scaling.attn_factor",
                                 (float)llm_longrope_attn_factor((double)sh->ctx,
                                                                 (double)sh->longrope_ctx)));
    }
    if (sh->attn_softcap > 0)
        LLM_TRY(llm_meta_set_f32(m, "hparams.attn_softcap", (float)sh->attn_softcap));
    if (sh->final_softcap > 0)
        LLM_TRY(llm_meta_set_f32(m, "hparams.final_softcap", (float)sh->final_softcap));
    if (moe) {
        LLM_TRY(llm_meta_set_i64(m, "hparams.expert_count", sh->n_expert));
        LLM_TRY(llm_meta_set_i64(m, "hparams.expert_used_count", sh->n_expert_used));
        LLM_TRY(llm_meta_set_i64(m, "hparams.expert_feed_forward_length", sh->expert_ff));
        if (shared)
            LLM_TRY(llm_meta_set_i64(m, "hparams.expert_shared_feed_forward_length",
                                     sh->shared_ff));
        if (sh->expert_norm >= 0)
            LLM_TRY(llm_meta_set_bool(m, "hparams.expert_weights_norm", sh->expert_norm));
    }
    LLM_TRY(llm_meta_set_bool(m, "hparams.tie_embeddings", sh->tie));
    LLM_TRY(llm_meta_set_str(m, "tokenizer.model", "none"));
    LLM_TRY(llm_meta_set_str(m, "source.format", "synthetic"));
    LLM_TRY(llm_meta_set_str(m, "source.path", shape_arg));
    if (seed <= INT64_MAX) {
        LLM_TRY(llm_meta_set_i64(m, "source.seed", (int64_t)seed));
    } else {
        snprintf(name, sizeof name, "%" PRIu64, seed);
        LLM_TRY(llm_meta_set_str(m, "source.seed", name));
    }
    return LLM_OK;
}

llm_status llm_synthetic(struct llm_file **out, const char *shape, enum llm_type type,
                         uint64_t seed)
{
    const struct llm_type_traits *tr = llm_type_traits((uint32_t)type);
    const struct syn_shape *sh = NULL;
    struct syn_shape yaml;
    char arch[16];
    struct llm_file *f = NULL;
    llm_status s;

    *out = NULL;
    LLM_CHECK(shape && *shape, LLM_E_INVALID, "synthetic: no shape given (one of %s, or a "
              "YAML file)", llm_synthetic_shapes());
    LLM_CHECK(tr && tr->name && !tr->is_aux, LLM_E_INVALID,
              "synthetic: type %u is not a weight type", (unsigned)type);
    for (size_t i = 0; i < N_SHAPES; i++)
        if (strcasecmp(shape, shapes[i].name) == 0)
            sh = &shapes[i];
    if (!sh) {
        if (access(shape, F_OK) != 0)
            return llm_error_set(LLM_E_INVALID,
                                 "unknown synthetic shape '%s' (known: %s; or a YAML file)",
                                 shape, llm_synthetic_shapes());
        LLM_TRY(load_yaml_shape(shape, &yaml, arch, sizeof arch));
        sh = &yaml;
    }
    LLM_TRY(check_shape(sh));
    LLM_TRY(llm_file_new(&f, shape, "synthetic"));
    s = build(f, sh, type, seed, shape);
    if (s != LLM_OK) {
        llm_file_free(f);
        return s;
    }
    *out = f;
    return LLM_OK;
}
