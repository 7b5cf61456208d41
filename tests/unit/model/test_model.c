/* Tests of the forward pass: an independent double-precision reference on
 * synthetic shapes (GQA, neox, Q/K/V biases, RoPE scaling, quantized
 * weights), batch vs token-by-token, the paged cache with two sequences, and
 * stories260K's greedy text against llama2.c's expected output. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../../lib/llm.h"
#include "../../../lib/model/layer.h"
#include "../../../lib/model/model_impl.h"
#include "../helpers.h"

/* ---- a plain reference forward pass ------------------------------------ */

static double *deq(struct llm_file *f, const char *name, int64_t *ne0, int64_t *rows)
{
    struct llm_tensor *t = llm_file_find(f, name);
    if (!t)
        return NULL;
    const void *data;
    cr_assert_eq(llm_tensor_bytes(f, t, &data), LLM_OK);
    *ne0 = t->ne[0];
    *rows = llm_tensor_nrows(t);
    double *out = malloc(sizeof(double) * (size_t)(*ne0 * *rows));
    float *row = malloc(sizeof(float) * (size_t)*ne0);
    uint64_t rb = llm_type_row_bytes(t->type, (uint64_t)*ne0);
    for (int64_t r = 0; r < *rows; r++) {
        cr_assert_eq(llm_dequantize_row(t->type, (const uint8_t *)data + rb * (uint64_t)r, row, *ne0),
                     LLM_OK);
        for (int64_t i = 0; i < *ne0; i++)
            out[r * *ne0 + i] = row[i];
    }
    free(row);
    return out;
}

static double *W(struct llm_file *f, const char *fmt, int l)
{
    char name[128];
    int64_t a, b;
    snprintf(name, sizeof name, fmt, l);
    return deq(f, name, &a, &b);
}

static void ref_matvec(const double *w, const double *x, double *y, int64_t rows, int64_t ne0)
{
    for (int64_t r = 0; r < rows; r++) {
        double s = 0;
        for (int64_t i = 0; i < ne0; i++)
            s += w[r * ne0 + i] * x[i];
        y[r] = s;
    }
}

static void ref_rmsnorm(const double *x, const double *g, double *y, int64_t n, double eps)
{
    double ss = 0;
    for (int64_t i = 0; i < n; i++)
        ss += x[i] * x[i];
    ss = 1.0 / sqrt(ss / n + eps);
    for (int64_t i = 0; i < n; i++)
        y[i] = x[i] * ss * g[i];
}

/* Inverse frequencies from the formulas of formats.md §1.10 / §3.3. */
static double ref_inv_freq(const struct llm_config *c, int i, double *mscale)
{
    double f = pow(c->rope_theta, -2.0 * i / c->rope_dim), fac = c->rope_factor;
    *mscale = 1;
    if (!strcmp(c->rope_scaling, "linear"))
        return f / fac;
    if (!strcmp(c->rope_scaling, "llama3")) {
        double old = c->rope_orig_ctx, wl = 2 * M_PI / f;
        if (wl < old / c->rope_high_freq)
            return f;
        if (wl > old / c->rope_low_freq)
            return f / fac;
        double sm = (old / wl - c->rope_low_freq) / (c->rope_high_freq - c->rope_low_freq);
        return (1 - sm) * f / fac + sm * f;
    }
    if (!strcmp(c->rope_scaling, "yarn")) {
        double corr_f = c->rope_dim * log(c->rope_orig_ctx / (c->rope_beta_fast * 2 * M_PI)) /
                        (2 * log(c->rope_theta));
        double corr_s = c->rope_dim * log(c->rope_orig_ctx / (c->rope_beta_slow * 2 * M_PI)) /
                        (2 * log(c->rope_theta));
        double lo = fmax(0, floor(corr_f)), hi = fmin(c->rope_dim - 1, ceil(corr_s));
        double ramp = 1 - fmin(1, fmax(0, (i - lo) / fmax(0.001, hi - lo)));
        *mscale = c->rope_attn_factor * (1 + 0.1 * log(fac));
        return f / fac * (1 - ramp) + f * ramp;
    }
    return f;
}

static void ref_rope(const struct llm_config *c, double *v, int nh, int pos)
{
    int half = c->rope_dim / 2;
    for (int h = 0; h < nh; h++) {
        double *x = v + h * c->head_dim;
        for (int i = 0; i < half; i++) {
            double ms, th = pos * ref_inv_freq(c, i, &ms);
            int a = c->rope_neox ? i : 2 * i, b = c->rope_neox ? i + half : 2 * i + 1;
            double x0 = x[a], x1 = x[b];
            x[a] = (x0 * cos(th) - x1 * sin(th)) * ms;
            x[b] = (x0 * sin(th) + x1 * cos(th)) * ms;
        }
    }
}

/* Logits (n, vocab) of tokens at positions 0..n-1. */
static double *ref_forward(struct llm_file *f, const struct llm_config *c, const int32_t *tok, int n)
{
    int64_t a, b, D = c->dim, hd = c->head_dim, qd = c->n_heads * hd, kd = c->n_kv_heads * hd;
    int64_t V = c->n_vocab, F = c->ffn_dim;
    double *emb = deq(f, "token_embd.weight", &a, &b);
    double *out_w = deq(f, "output.weight", &a, &b);
    double *onorm = deq(f, "output_norm.weight", &a, &b);
    if (!out_w)
        out_w = emb;
    double *x = calloc((size_t)(n * D), sizeof(double)), *xb = calloc((size_t)D, sizeof(double));
    double *q = calloc((size_t)(n * qd), sizeof(double)), *k = calloc((size_t)(n * kd), sizeof(double));
    double *v = calloc((size_t)(n * kd), sizeof(double)), *att = calloc((size_t)qd, sizeof(double));
    double *o = calloc((size_t)D, sizeof(double)), *g = calloc((size_t)F, sizeof(double));
    double *u = calloc((size_t)F, sizeof(double)), *sc = calloc((size_t)n, sizeof(double));
    double *logits = calloc((size_t)(n * V), sizeof(double));
    for (int t = 0; t < n; t++)
        memcpy(x + t * D, emb + tok[t] * D, sizeof(double) * (size_t)D);
    for (int l = 0; l < c->n_layers; l++) {
        double *an = W(f, "blk.%d.attn_norm.weight", l), *wq = W(f, "blk.%d.attn_q.weight", l);
        double *wk = W(f, "blk.%d.attn_k.weight", l), *wv = W(f, "blk.%d.attn_v.weight", l);
        double *wo = W(f, "blk.%d.attn_output.weight", l), *fn = W(f, "blk.%d.ffn_norm.weight", l);
        double *wg = W(f, "blk.%d.ffn_gate.weight", l), *wu = W(f, "blk.%d.ffn_up.weight", l);
        double *wd = W(f, "blk.%d.ffn_down.weight", l);
        double *bq = W(f, "blk.%d.attn_q.bias", l), *bk = W(f, "blk.%d.attn_k.bias", l);
        double *bv = W(f, "blk.%d.attn_v.bias", l);
        double *qn = W(f, "blk.%d.attn_q_norm.weight", l), *kn = W(f, "blk.%d.attn_k_norm.weight", l);
        const int win = llm_config_layer_window(c, l);
        for (int t = 0; t < n; t++) {
            ref_rmsnorm(x + t * D, an, xb, D, c->rms_eps);
            ref_matvec(wq, xb, q + t * qd, qd, D);
            ref_matvec(wk, xb, k + t * kd, kd, D);
            ref_matvec(wv, xb, v + t * kd, kd, D);
            for (int64_t i = 0; bq && i < qd; i++)
                q[t * qd + i] += bq[i];
            for (int64_t i = 0; bk && i < kd; i++)
                k[t * kd + i] += bk[i], v[t * kd + i] += bv[i];
            for (int h = 0; qn && h < c->n_heads; h++)
                ref_rmsnorm(q + t * qd + h * hd, qn, q + t * qd + h * hd, hd, c->rms_eps);
            for (int h = 0; kn && h < c->n_kv_heads; h++)
                ref_rmsnorm(k + t * kd + h * hd, kn, k + t * kd + h * hd, hd, c->rms_eps);
            ref_rope(c, q + t * qd, c->n_heads, t);
            ref_rope(c, k + t * kd, c->n_kv_heads, t);
        }
        for (int t = 0; t < n; t++) {
            for (int h = 0; h < c->n_heads; h++) {
                int g0 = h / (c->n_heads / c->n_kv_heads);
                double mx = -1e300, sum = 0;
                const int p0 = win && t >= win ? t - win + 1 : 0; /* the sliding window */
                for (int p = p0; p <= t; p++) {
                    double d = 0;
                    for (int e = 0; e < hd; e++)
                        d += q[t * qd + h * hd + e] * k[p * kd + g0 * hd + e];
                    sc[p] = d / sqrt((double)hd);
                    mx = fmax(mx, sc[p]);
                }
                for (int p = p0; p <= t; p++)
                    sum += sc[p] = exp(sc[p] - mx);
                for (int e = 0; e < hd; e++) {
                    double s = 0;
                    for (int p = p0; p <= t; p++)
                        s += sc[p] / sum * v[p * kd + g0 * hd + e];
                    att[h * hd + e] = s;
                }
            }
            ref_matvec(wo, att, o, D, qd);
            for (int64_t i = 0; i < D; i++)
                x[t * D + i] += o[i];
            ref_rmsnorm(x + t * D, fn, xb, D, c->rms_eps);
            ref_matvec(wg, xb, g, F, D);
            ref_matvec(wu, xb, u, F, D);
            for (int64_t i = 0; i < F; i++)
                g[i] = g[i] / (1 + exp(-g[i])) * u[i];
            ref_matvec(wd, g, o, D, F);
            for (int64_t i = 0; i < D; i++)
                x[t * D + i] += o[i];
        }
        double *all[] = { an, wq, wk, wv, wo, fn, wg, wu, wd, bq, bk, bv, qn, kn };
        for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
            free(all[i]);
    }
    for (int t = 0; t < n; t++) {
        ref_rmsnorm(x + t * D, onorm, xb, D, c->rms_eps);
        ref_matvec(out_w, xb, logits + t * V, V, D);
    }
    if (out_w != emb)
        free(out_w);
    double *fr[] = { emb, onorm, x, xb, q, k, v, att, o, g, u, sc };
    for (size_t i = 0; i < sizeof fr / sizeof fr[0]; i++)
        free(fr[i]);
    return logits;
}

/* ---- synthetic models --------------------------------------------------- */

static struct llm_file *synth(const char *yaml, enum llm_type type)
{
    const char *dir = llm_test_tmpdir();
    char path[512];
    snprintf(path, sizeof path, "%s/shape.yaml", dir);
    FILE *fp = fopen(path, "w");
    cr_assert(fp);
    fputs(yaml, fp);
    fclose(fp);
    struct llm_file *f;
    llm_status s = llm_synthetic(&f, path, type, 7);
    cr_assert_eq(s, LLM_OK, "%s", llm_error_detail(s));
    return f;
}

static const char *QWEN = "architecture: qwen2\nembedding_length: 48\nfeed_forward_length: 80\n"
                          "block_count: 2\nhead_count: 6\nhead_count_kv: 2\nvocab_size: 96\n"
                          "context_length: 64\nrope_theta: 10000.0\nrms_norm_eps: 1e-6\n"
                          "tie_embeddings: true\n";
static const char *LLAMA = "architecture: llama\nembedding_length: 64\nfeed_forward_length: 96\n"
                           "block_count: 2\nhead_count: 4\nhead_count_kv: 1\nvocab_size: 80\n"
                           "context_length: 128\nrope_theta: 500000.0\nrms_norm_eps: 1e-5\n"
                           "tie_embeddings: false\nhead_dim: 32\n";

/* Scale the synthetic weights up so that attention is not uniform and the
 * logits spread (0.02-std weights make every model nearly linear). */
/* tol bounds max |logit - ref| / max |ref|; rms_tol (when > 0) bounds the
 * relative RMS error instead, for kernels that round activations to int8
 * (W8A8), whose worst logit moves by a few percent on these sharp models. */
static void check_against_ref(struct llm_file *f, int n, double tol, int n_threads,
                              enum llm_type kv_type, double rms_tol)
{
    struct llm_model *m;
    struct llm_model_params mp;
    llm_model_params_default(&mp);
    mp.n_threads = n_threads;
    llm_status s = llm_model_from_file(&m, f, &mp);
    cr_assert_eq(s, LLM_OK, "%s", llm_error_detail(s));
    const struct llm_config *c = llm_model_config(m);
    int32_t tok[40];
    for (int i = 0; i < n; i++)
        tok[i] = (int32_t)((i * 37 + 11) % c->n_vocab);
    double *ref = ref_forward(llm_model_file(m), c, tok, n);
    struct llm_context *ctx;
    struct llm_context_params cp;
    llm_context_params_default(&cp);
    cp.n_ctx = 64;
    cp.kv_type_k = cp.kv_type_v = kv_type;
    cp.block_size = 4; /* several blocks per sequence */
    cr_assert_eq(llm_context_new(&ctx, m, &cp), LLM_OK);
    float *lg = malloc(sizeof(float) * (size_t)(n * c->n_vocab));
    /* the prompt in two batches: the second attends to the first's cache */
    int n1 = n / 2;
    cr_assert_eq(llm_decode(ctx, 0, tok, n1, 0, lg, 1), LLM_OK);
    s = llm_decode(ctx, 0, tok + n1, n - n1, n1, lg + n1 * c->n_vocab, 1);
    cr_assert_eq(s, LLM_OK, "%s", llm_error_detail(s));
    double err = 0, norm = 0, se = 0, sr = 0;
    for (int i = 0; i < n * c->n_vocab; i++) {
        err = fmax(err, fabs(lg[i] - ref[i]));
        norm = fmax(norm, fabs(ref[i]));
        se += (lg[i] - ref[i]) * (lg[i] - ref[i]);
        sr += ref[i] * ref[i];
    }
    cr_assert(norm > 0.01, "degenerate logits (max %g)", norm);
    cr_assert(err <= tol * norm, "KV %s: max |logit - ref| = %g, max |ref| = %g",
              llm_type_name(kv_type), err, norm);
    if (rms_tol > 0)
        cr_assert(sqrt(se / sr) <= rms_tol, "relative RMS error %g", sqrt(se / sr));
    /* token by token from scratch gives the same last logits */
    llm_context_reset(ctx, 0);
    for (int i = 0; i < n; i++)
        cr_assert_eq(llm_decode(ctx, 0, tok + i, 1, i, lg, 0), LLM_OK);
    for (int i = 0; i < c->n_vocab; i++)
        cr_assert(fabs(lg[i] - ref[(n - 1) * c->n_vocab + i]) <= tol * norm);
    free(lg);
    free(ref);
    llm_context_free(ctx);
    llm_model_close(m);
}

Test(model, qwen2_gqa_neox_bias_matches_reference)
{
    struct llm_file *f = synth(QWEN, LLM_TYPE_F32);
    llm_test_scale_weights(f, 12.0f);
    check_against_ref(f, 13, 2e-4, 1, LLM_TYPE_F32, 0);
}

Test(model, llama_mqa_head_dim_matches_reference_2_threads)
{
    struct llm_file *f = synth(LLAMA, LLM_TYPE_F32);
    llm_test_scale_weights(f, 12.0f);
    check_against_ref(f, 21, 2e-4, 2, LLM_TYPE_F32, 0);
}

static const char *MISTRAL_SWA = "architecture: mistral\nsliding_window: 6\nhead_dim: 32\n"
                                 "embedding_length: 64\nfeed_forward_length: 96\n"
                                 "block_count: 2\nhead_count: 4\nhead_count_kv: 2\n"
                                 "vocab_size: 80\ncontext_length: 128\nrope_theta: 10000.0\n"
                                 "rms_norm_eps: 1e-5\ntie_embeddings: false\n";
static const char *QWEN3 = "architecture: qwen3\nembedding_length: 48\nfeed_forward_length: 80\n"
                           "block_count: 2\nhead_count: 4\nhead_count_kv: 2\nhead_dim: 16\n"
                           "vocab_size: 96\ncontext_length: 64\nrope_theta: 1000000.0\n"
                           "rms_norm_eps: 1e-6\ntie_embeddings: true\n";

/* 21 tokens through a window of 6 in blocks of 4: windows that start
 * inside a block, whole blocks skipped, the prompt's two halves. */
Test(model, mistral_sliding_window_matches_reference)
{
    struct llm_file *f = synth(MISTRAL_SWA, LLM_TYPE_F32);
    llm_test_scale_weights(f, 12.0f);
    check_against_ref(f, 21, 2e-4, 2, LLM_TYPE_F32, 0);
}

/* Last logits of 32 tokens (t0 + i * 13) % 80 for i < 16, then the same
 * 16 tokens for every t0, with the window set to `win`. */
static void window_tail_logits(enum llm_type kv, int32_t win, int32_t t0, float *out)
{
    struct llm_file *f = synth(MISTRAL_SWA, LLM_TYPE_F32);
    llm_test_scale_weights(f, 12.0f);
    cr_assert_eq(llm_meta_set_i64(f->meta, "hparams.sliding_window", win), LLM_OK);
    struct llm_model *m;
    struct llm_model_params mp;
    llm_model_params_default(&mp);
    cr_assert_eq(llm_model_from_file(&m, f, &mp), LLM_OK);
    struct llm_context *ctx;
    struct llm_context_params cp;
    llm_context_params_default(&cp);
    cp.n_ctx = 64;
    cp.block_size = kv == LLM_TYPE_Q4Z_CH ? 16 : 4; /* q4ch's least */
    cp.kv_type_k = kv;
    cp.kv_type_v = kv == LLM_TYPE_Q4Z_CH ? LLM_TYPE_Q4_0 : kv; /* q4ch is for keys */
    llm_status s = llm_context_new(&ctx, m, &cp);
    cr_assert_eq(s, LLM_OK, "%s", llm_error_detail(s));
    int32_t tok[32];
    for (int i = 0; i < 32; i++)
        tok[i] = ((i < 16 ? t0 : 7) + i * 13) % 80;
    cr_assert_eq(llm_decode(ctx, 0, tok, 10, 0, out, 0), LLM_OK);
    cr_assert_eq(llm_decode(ctx, 0, tok + 10, 22, 10, out, 0), LLM_OK);
    llm_context_free(ctx);
    llm_model_close(m);
}

/* Every KV cache type reads the window's rows alone: with a window of 6
 * and 2 layers the last token sees back 10 positions, so texts that
 * differ only before the last 16 (whole blocks, which q4ch quantizes
 * together) end in the same bits; without the window they do not. */
Test(model, sliding_window_on_every_kv_type)
{
    const enum llm_type kt[] = { LLM_TYPE_F32,  LLM_TYPE_F16,      LLM_TYPE_BF16, LLM_TYPE_Q8_0,
                                 LLM_TYPE_Q4_0, LLM_TYPE_FP8_E4M3, LLM_TYPE_Q4Z_CH };
    float a[80], b[80];
    for (size_t i = 0; i < sizeof kt / sizeof kt[0]; i++) {
        window_tail_logits(kt[i], 6, 1, a);
        window_tail_logits(kt[i], 6, 40, b);
        cr_assert(!memcmp(a, b, sizeof a), "KV %s: tokens outside the window changed the logits",
                  llm_type_name(kt[i]));
        window_tail_logits(kt[i], 0, 1, a);
        window_tail_logits(kt[i], 0, 40, b);
        cr_assert(memcmp(a, b, sizeof a), "KV %s: without the window the test cannot fail",
                  llm_type_name(kt[i]));
    }
}

/* Close to the double-precision reference with a fp16 cache too. */
Test(model, sliding_window_f16_kv_close_to_reference)
{
    struct llm_file *f = synth(MISTRAL_SWA, LLM_TYPE_F32);
    llm_test_scale_weights(f, 12.0f);
    check_against_ref(f, 19, 5e-3, 1, LLM_TYPE_F16, 0);
}

/* The window's own arithmetic: a window as long as the text gives the
 * bits of the model without one. */
Test(model, window_as_long_as_the_text_changes_nothing)
{
    float a[80], b[80];
    window_tail_logits(LLM_TYPE_F32, 0, 1, a);
    window_tail_logits(LLM_TYPE_F32, 32, 1, b);
    cr_assert(!memcmp(a, b, sizeof a), "a window of the whole text changed the logits");
}

Test(model, qwen3_qk_norm_head_dim_matches_reference)
{
    struct llm_file *f = synth(QWEN3, LLM_TYPE_F32);
    llm_test_scale_weights(f, 12.0f);
    check_against_ref(f, 13, 2e-4, 2, LLM_TYPE_F32, 0);
}

Test(model, f16_kv_cache_close_to_reference)
{
    struct llm_file *f = synth(QWEN, LLM_TYPE_F32);
    llm_test_scale_weights(f, 12.0f);
    check_against_ref(f, 9, 5e-3, 1, LLM_TYPE_F16, 0);
}

Test(model, rope_scaling_linear_yarn_llama3_match_reference)
{
    const char *types[] = { "linear", "yarn", "llama3" };
    for (int i = 0; i < 3; i++) {
        struct llm_file *f = synth(LLAMA, LLM_TYPE_F32);
        llm_test_scale_weights(f, 12.0f);
        cr_assert_eq(llm_meta_set_str(f->meta, "hparams.rope_scaling.type", types[i]), LLM_OK);
        cr_assert_eq(llm_meta_set_f64(f->meta, "hparams.rope_scaling.factor", 4.0), LLM_OK);
        cr_assert_eq(llm_meta_set_i64(f->meta, "hparams.rope_scaling.original_context_length", 32),
                     LLM_OK);
        check_against_ref(f, 17, 2e-4, 1, LLM_TYPE_F32, 0);
    }
}

Test(model, quantized_weights_close_to_reference)
{
    /* Weights read in place in their stored type; the reference uses the
     * same weights dequantized, so only the kernels' rounding of the
     * activations differs (with the reference kernels the error is 1e-5).
     * A wrong block layout or row offset gives errors of order 1. */
    enum llm_type types[] = { LLM_TYPE_Q8_0, LLM_TYPE_Q4_1, LLM_TYPE_Q4_0, LLM_TYPE_F16 };
    for (int i = 0; i < 4; i++) {
        struct llm_file *f = synth(LLAMA, LLM_TYPE_F32);
        llm_test_scale_weights(f, 6.0f);
        cr_assert_eq(llm_file_convert(f, types[i]), LLM_OK);
        check_against_ref(f, 11, 0.1, 2, LLM_TYPE_F32, 2e-2);
    }
}

/* Logits (15, n_vocab) of 11 prompt tokens in one batch (the prefill
 * path) and then 4 tokens one at a time (decode) with `m`. */
static void run_prompt(struct llm_model *m, float *lg)
{
    const struct llm_config *c = llm_model_config(m);
    struct llm_context *ctx;
    struct llm_context_params cp;
    llm_context_params_default(&cp);
    cp.n_ctx = 32;
    cr_assert_eq(llm_context_new(&ctx, m, &cp), LLM_OK);
    int32_t tok[15];
    for (int i = 0; i < 15; i++)
        tok[i] = (int32_t)((i * 37 + 11) % c->n_vocab);
    cr_assert_eq(llm_decode(ctx, 0, tok, 11, 0, lg, 1), LLM_OK);
    for (int i = 11; i < 15; i++)
        cr_assert_eq(llm_decode(ctx, 0, tok + i, 1, i, lg + i * c->n_vocab, 0), LLM_OK);
    llm_context_free(ctx);
}

/* A 4-bit model runs its matrices in the interleaved layout of
 * ops/matmul.h, made at load for every matrix whose shape takes it, and
 * gives the row layout's logits (LLM_X16=0) up to float rounding: both
 * take exact integer dots of the same int16 activations. GGUF's Q5_0,
 * IQ4_NL and Q5_1 go interleaved as their 8-bit twins (q8_0, q8z_g32:
 * the same values), with the same result. */
Test(model, interleaved_q4_matches_row_layout)
{
    if (!llm_x16_enabled()) {
        cr_skip_test("no kernel reads the interleaved layout here (LLM_ISA, LLM_MATMUL_ACT)");
        return;
    }
    enum llm_type types[] = { LLM_TYPE_Q4_0, LLM_TYPE_Q4_1, LLM_TYPE_Q4Z_G64,
                              LLM_TYPE_Q5_0, LLM_TYPE_Q5_1, LLM_TYPE_IQ4_NL };
    enum llm_type twins[] = { LLM_TYPE_Q4_0, LLM_TYPE_Q4_1, LLM_TYPE_Q4Z_G64,
                              LLM_TYPE_Q8_0, LLM_TYPE_Q8Z_G32, LLM_TYPE_Q8_0 };
    for (int ti = 0; ti < 6; ti++) {
        struct llm_model *m[2];
        float *lg[2];
        for (int x16 = 0; x16 < 2; x16++) {
            struct llm_file *f = synth(LLAMA, LLM_TYPE_F32);
            llm_test_scale_weights(f, 6.0f);
            cr_assert_eq(llm_file_convert(f, types[ti]), LLM_OK);
            if (x16)
                unsetenv("LLM_X16");
            else
                setenv("LLM_X16", "0", 1);
            cr_assert_eq(llm_model_from_file(&m[x16], f, NULL), LLM_OK);
            unsetenv("LLM_X16");
            lg[x16] = calloc(15 * 80, sizeof(float));
            run_prompt(m[x16], lg[x16]);
        }
        const struct llm_layer_w *L = &m[1]->layers[1];
        const struct llm_weight *ws[] = { &L->wq, &L->wk, &L->wv, &L->wo, &L->gate, &L->up, &L->down,
                                          &m[1]->output };
        /* q4z_g64: the FFN's 96-wide down rows are no whole groups and keep their rows */
        for (size_t i = 0; i < sizeof ws / sizeof ws[0]; i++)
            cr_assert(ws[i]->type == types[ti] &&
                          !ws[i]->x16 == !llm_x16_ok(twins[ti], ws[i]->ne0, ws[i]->rows) &&
                          (!ws[i]->x16 || ws[i]->x16_type == twins[ti]) &&
                          (ws[i]->x16 || ws[i] == &L->down),
                      "weight %zu of %s", i, llm_type_name(types[ti]));
        cr_assert(!m[0]->layers[1].down.x16 && !m[1]->tok_embd.x16);
        double err = 0, norm = 0;
        for (int i = 0; i < 15 * 80; i++) {
            err = fmax(err, fabs(lg[1][i] - lg[0][i]));
            norm = fmax(norm, fabs(lg[0][i]));
        }
        cr_assert(norm > 0.1, "degenerate logits");
        cr_assert(err <= 1e-4 * norm, "%s: max |x16 - rows| = %g, max |logit| = %g",
                  llm_type_name(types[ti]), err, norm);
        for (int x16 = 0; x16 < 2; x16++) {
            llm_model_close(m[x16]);
            free(lg[x16]);
        }
    }
}

Test(model, paged_sequences_are_independent)
{
    struct llm_file *f = synth(QWEN, LLM_TYPE_F32);
    llm_test_scale_weights(f, 12.0f);
    struct llm_model *m;
    cr_assert_eq(llm_model_from_file(&m, f, NULL), LLM_OK);
    int32_t V = llm_model_config(m)->n_vocab;
    struct llm_context *c;
    struct llm_context_params cp;
    llm_context_params_default(&cp);
    cp.n_ctx = 32;
    cp.n_seq = 2;
    cp.block_size = 4;
    cr_assert_eq(llm_context_new(&c, m, &cp), LLM_OK);
    int32_t a[10] = { 1, 5, 9, 13, 17, 21, 25, 29, 33, 37 }, b[10] = { 2, 4, 6, 8, 10, 12, 14, 16, 18, 20 };
    float la[96], lb[96], lx[96];
    /* interleave the two sequences token by token so their blocks alternate */
    for (int i = 0; i < 10; i++) {
        cr_assert_eq(llm_decode(c, 0, a + i, 1, i, la, 0), LLM_OK);
        cr_assert_eq(llm_decode(c, 1, b + i, 1, i, lb, 0), LLM_OK);
    }
    llm_context_reset(c, 1);
    cr_assert_eq(llm_decode(c, 1, a, 10, 0, lx, 0), LLM_OK);
    for (int i = 0; i < V; i++)
        cr_assert_float_eq(lx[i], la[i], 1e-4 * (1 + fabsf(la[i])));
    llm_context_reset(c, 0);
    cr_assert_eq(llm_decode(c, 0, b, 10, 0, lx, 0), LLM_OK);
    for (int i = 0; i < V; i++)
        cr_assert_float_eq(lx[i], lb[i], 1e-4 * (1 + fabsf(lb[i])));
    llm_context_free(c);
    llm_model_close(m);
}

/* The attention's probabilities alone (att NULL: what GPTQ's Hessian of v
 * reads) are the bits of the full attention's, over two chunks of a window
 * (the second reads the first's keys from the cache); without the
 * probabilities either, the call is refused. */
Test(model, attention_probabilities_alone_are_the_full_attentions)
{
    struct llm_file *f = synth(QWEN, LLM_TYPE_F32);
    llm_test_scale_weights(f, 12.0f);
    struct llm_model *m;
    cr_assert_eq(llm_model_from_file(&m, f, NULL), LLM_OK);
    const struct llm_config *cf = llm_model_config(m);
    enum { N = 11, N1 = 5 };
    const int64_t dim = cf->dim, qd = (int64_t)cf->n_heads * cf->head_dim, nh = cf->n_heads;
    struct llm_context *c;
    struct llm_context_params cp;
    llm_context_params_default(&cp);
    cp.n_ctx = 16;
    cp.block_size = 4;
    cr_assert_eq(llm_context_new(&c, m, &cp), LLM_OK);
    float *x = malloc(sizeof(float) * (size_t)(N * dim)), *xb = malloc(sizeof(float) * (size_t)(N * dim));
    float *att = malloc(sizeof(float) * (size_t)(N * qd));
    float *pa = calloc((size_t)(nh * N * N), sizeof(float)), *pb = calloc((size_t)(nh * N * N), sizeof(float));
    for (int64_t i = 0; i < N * dim; i++)
        x[i] = (float)sin(0.37 * (double)i);
    for (int l = 0; l < cf->n_layers; l++) {
        cr_assert_eq(llm_layer_norm(c, l, LLM_NORM_ATTN, x, xb, N), LLM_OK);
        /* alone first: this layer's cache rows hold no keys of an earlier run */
        for (int alone = 1; alone >= 0; alone--) {
            float *pr = alone ? pb : pa;
            llm_context_reset(c, 0);
            /* chunk 0 (positions 0..N1-1), then chunk 1: probs (nh, n, pos + n) each */
            cr_assert_eq(llm_layer_attention(c, l, NULL, xb, 0, 0, N1, alone ? NULL : att, pr),
                         LLM_OK);
            llm_status s = llm_layer_attention(c, l, NULL, xb + N1 * dim, 0, N1, N - N1,
                                               alone ? NULL : att, pr + nh * N1 * N1);
            cr_assert_eq(s, LLM_OK, "%s", llm_error_detail(s));
        }
        cr_assert(!memcmp(pa, pb, sizeof(float) * (size_t)(nh * N * N)),
                  "layer %d: the probabilities alone differ from the attention's", l);
        float mx = 0;
        for (int64_t i = 0; i < nh * N * N; i++)
            mx = pa[i] > mx ? pa[i] : mx;
        cr_assert(mx > 0.0f && mx <= 1.0f, "layer %d: no probabilities (max %g)", l, mx);
    }
    llm_context_reset(c, 0);
    cr_assert_neq(llm_layer_attention(c, 0, NULL, xb, 0, 0, N1, NULL, NULL), LLM_OK);
    free(x), free(xb), free(att), free(pa), free(pb);
    llm_context_free(c);
    llm_model_close(m);
}

Test(model, context_full_and_bad_tokens_refused)
{
    struct llm_model *m;
    cr_assert_eq(llm_model_from_file(&m, synth(QWEN, LLM_TYPE_F32), NULL), LLM_OK);
    struct llm_context *c;
    struct llm_context_params cp;
    llm_context_params_default(&cp);
    cp.n_ctx = 8;
    cr_assert_eq(llm_context_new(&c, m, &cp), LLM_OK);
    int32_t t[9] = { 0 };
    float lg[96];
    cr_assert_eq(llm_decode(c, 0, t, 9, 0, lg, 0), LLM_E_INVALID);
    cr_assert(strstr(llm_error_detail(LLM_E_INVALID), "context"));
    t[3] = 96;
    cr_assert_eq(llm_decode(c, 0, t, 4, 0, lg, 0), LLM_E_INVALID);
    cr_assert(strstr(llm_error_detail(LLM_E_INVALID), "96"));
    t[3] = -1;
    cr_assert_eq(llm_decode(c, 0, t, 4, 0, lg, 0), LLM_E_INVALID);
    cr_assert_eq(llm_decode(c, 0, t, 2, 3, lg, 0), LLM_E_INVALID); /* a gap */
    cr_assert_eq(llm_decode(c, 1, t, 2, 0, lg, 0), LLM_E_INVALID); /* no such sequence */
    llm_context_free(c);
    llm_model_close(m);
}

Test(model, missing_tensor_named)
{
    struct llm_file *f = synth(QWEN, LLM_TYPE_F32);
    llm_file_remove(f, "blk.1.ffn_up.weight");
    struct llm_model *m;
    cr_assert_eq(llm_model_from_file(&m, f, NULL), LLM_E_FORMAT);
    cr_assert(strstr(llm_error_detail(LLM_E_FORMAT), "blk.1.ffn_up.weight"),
              "%s", llm_error_detail(LLM_E_FORMAT));
}

Test(model, bad_shape_and_tokenizer_only_refused)
{
    struct llm_file *f = synth(QWEN, LLM_TYPE_F32);
    cr_assert_eq(llm_meta_set_i64(f->meta, "hparams.feed_forward_length", 81), LLM_OK);
    struct llm_model *m;
    cr_assert_eq(llm_model_from_file(&m, f, NULL), LLM_E_FORMAT);
    cr_assert(strstr(llm_error_detail(LLM_E_FORMAT), "ffn_gate"));
    TEST_DATA(voc, "vocab/ggml-vocab-gpt-2.gguf");
    cr_assert_eq(llm_model_open(&m, voc, NULL), LLM_E_UNSUPPORTED);
    cr_assert(strstr(llm_error_detail(LLM_E_UNSUPPORTED), "tokenizer only"),
              "%s", llm_error_detail(LLM_E_UNSUPPORTED));
}

/* A double beyond the float range passed the finiteness check made on the
 * double, then became infinity: exit 0 and empty output. */
Test(model, float_keys_beyond_the_float_range_refused)
{
    struct llm_file *f = synth(QWEN, LLM_TYPE_F32);
    struct llm_config c;
    cr_assert_eq(llm_config_from_meta(&c, f->meta, "m.llm"), LLM_OK);
    const char *keys[] = { "hparams.rms_norm_eps", "hparams.rope_theta" };
    const double vals[] = { 1e308, 3.5e38 };
    for (int i = 0; i < 2; i++) {
        struct llm_meta *m = llm_meta_clone(f->meta);
        cr_assert_eq(llm_meta_set_f64(m, keys[i], vals[i]), LLM_OK);
        llm_status s = llm_config_from_meta(&c, m, "m.llm");
        cr_assert_eq(s, LLM_E_FORMAT, "%s = %g accepted", keys[i], vals[i]);
        char want[128];
        snprintf(want, sizeof want, "m.llm: metadata key '%s' = %g is out of the range of a float",
                 keys[i], vals[i]);
        cr_assert(strstr(llm_error_detail(s), want), "%s", llm_error_detail(s));
        llm_meta_free(m);
    }
    llm_file_free(f);
}

/* A weight replaced by `ne` elements of `type` (zeros), flags set. */
static struct llm_file *with_tensor(const char *name, enum llm_type type, uint32_t n_dims,
                                    const int64_t *ne, uint32_t flags)
{
    struct llm_file *f = synth(QWEN, LLM_TYPE_F32);
    llm_file_remove(f, name);
    uint64_t nbytes;
    cr_assert_eq(llm_type_tensor_bytes(type, n_dims, ne, &nbytes), LLM_OK);
    void *data = llm_calloc(1, (size_t)nbytes);
    cr_assert_eq(llm_file_own(f, data), LLM_OK);
    struct llm_tensor *t;
    cr_assert_eq(llm_file_add_tensor(f, name, type, n_dims, ne, data, &t), LLM_OK);
    t->flags |= flags;
    return f;
}

static void bind_fails_with(struct llm_file *f, const char *want)
{
    struct llm_model *m;
    llm_status s = llm_model_from_file(&m, f, NULL);
    cr_assert_eq(s, LLM_E_FORMAT);
    cr_assert(strstr(llm_error_detail(s), want), "'%s' not in '%s'", want, llm_error_detail(s));
}

Test(model, bind_messages_say_what_is_wrong)
{
    /* a vector of 480 elements where 48 are wanted: it said "expected [480]" */
    int64_t v[1] = { 480 };
    bind_fails_with(with_tensor("output_norm.weight", LLM_TYPE_F32, 1, v, 0),
                    "tensor 'output_norm.weight': f32 [480], expected [48]");
    int64_t v2[2] = { 48, 2 };
    bind_fails_with(with_tensor("output_norm.weight", LLM_TYPE_F32, 2, v2, 0),
                    "tensor 'output_norm.weight': f32 [48, 2], expected [48]");
    /* the right shape with a wrong type or flag: it said "u8 [48, 48],
     * expected [48, 48]" */
    int64_t q[2] = { 48, 48 };
    bind_fails_with(with_tensor("blk.0.attn_q.weight", LLM_TYPE_U8, 2, q, 0),
                    "tensor 'blk.0.attn_q.weight': type u8 is not a weight type");
    bind_fails_with(with_tensor("blk.0.attn_q.weight", LLM_TYPE_F32, 2, q, LLM_TENSOR_AUX),
                    "tensor 'blk.0.attn_q.weight': flagged as auxiliary data, not a weight");
    int64_t q2[2] = { 48, 47 };
    bind_fails_with(with_tensor("blk.0.attn_q.weight", LLM_TYPE_F32, 2, q2, 0),
                    "tensor 'blk.0.attn_q.weight': f32 [48, 47], expected [48, 48]");
}

/* ---- stories260K -------------------------------------------------------- */

struct text_buf {
    char buf[4096];
    size_t len;
};

static llm_status collect(void *ctx, int32_t seq, const char *b, size_t n)
{
    struct text_buf *t = ctx;
    cr_assert_eq(seq, 0);
    cr_assert(t->len + n < sizeof t->buf);
    memcpy(t->buf + t->len, b, n);
    t->len += n;
    return LLM_OK;
}

/* Convert with the library to a .llm file and open that. */
static struct llm_model *open_converted(const char *src, const char *tokenizer, int n_threads)
{
    struct llm_import_opts io;
    llm_import_opts_default(&io);
    io.tokenizer_path = tokenizer;
    struct llm_file *f;
    llm_status s = llm_import(&f, src, &io);
    cr_assert_eq(s, LLM_OK, "%s", llm_error_detail(s));
    char path[512];
    snprintf(path, sizeof path, "%s/m.llm", llm_test_tmpdir());
    struct llm_write_opts wo;
    llm_write_opts_default(&wo);
    cr_assert_eq(llm_llm_write(f, path, &wo), LLM_OK);
    llm_file_free(f);
    struct llm_model *m;
    struct llm_model_params mp;
    llm_model_params_default(&mp);
    mp.n_threads = n_threads;
    s = llm_model_open(&m, path, &mp);
    cr_assert_eq(s, LLM_OK, "%s", llm_error_detail(s));
    return m;
}

/* llama2.c's run.c with an empty prompt: BOS, then 200 greedy steps. */
static void stories_greedy(struct llm_model *m, enum llm_type kv)
{
    const char *exp_path = llm_test_data("llama2c/stories260K.expected_t0_n200.txt");
    cr_assert(exp_path);
    char *expected;
    size_t elen;
    cr_assert_eq(llm_read_file(exp_path, 1 << 20, &expected, &elen), LLM_OK);
    struct llm_tokenizer *tok = llm_model_tokenizer(m);
    cr_assert(tok);
    int32_t *ids;
    size_t n;
    cr_assert_eq(llm_tokenize(tok, "", 0, LLM_TOK_ADD_BOS, &ids, &n), LLM_OK);
    cr_assert_eq(n, 1);
    cr_assert_eq(ids[0], 1);
    struct llm_context *c;
    struct llm_context_params cp;
    llm_context_params_default(&cp);
    cp.kv_type_k = cp.kv_type_v = kv;
    cr_assert_eq(llm_context_new(&c, m, &cp), LLM_OK);
    struct llm_gen_params gp;
    llm_gen_params_default(&gp);
    gp.sp.temp = 0;
    gp.n_predict = 200;
    struct text_buf tb = { .len = 0 };
    struct llm_gen_callbacks cb = { collect, NULL, &tb };
    struct llm_gen_result r;
    cr_assert_eq(llm_generate(c, ids, n, &gp, &cb, &r), LLM_OK);
    cr_assert_eq(r.n_gen, 200);
    cr_assert_eq(tb.len, elen, "got %zu bytes, expected %zu:\n%.*s", tb.len, elen, (int)tb.len, tb.buf);
    cr_assert(memcmp(tb.buf, expected, elen) == 0, "got:\n%.*s", (int)tb.len, tb.buf);
    llm_free(ids);
    llm_free(expected);
    llm_context_free(c);
}

Test(model, stories260K_llama2c_greedy_matches_run_c)
{
    TEST_DATA(bin, "llama2c/stories260K.bin");
    TEST_DATA(tok, "llama2c/tok512.bin");
    TEST_DATA(exp, "llama2c/stories260K.expected_t0_n200.txt");
    struct llm_model *m = open_converted(bin, tok, 1);
    stories_greedy(m, LLM_TYPE_F32);
    stories_greedy(m, LLM_TYPE_F16);
    llm_model_close(m);
}

Test(model, stories260K_gguf_greedy_matches_run_c_2_threads)
{
    TEST_DATA(gguf, "gguf/stories260K.gguf");
    TEST_DATA(exp, "llama2c/stories260K.expected_t0_n200.txt");
    struct llm_model *m = open_converted(gguf, NULL, 2);
    cr_assert_eq(llm_model_config(m)->tie_embeddings, 0);
    stories_greedy(m, LLM_TYPE_F32);
    llm_model_close(m);
}

/* Under the sanitizers the whole text takes minutes: score a prefix there
 * and check the value is plausible instead. */
#if defined(__SANITIZE_ADDRESS__)
#define PPL_FULL 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define PPL_FULL 0
#endif
#endif
#ifndef PPL_FULL
#define PPL_FULL 1
#endif

/* llama.cpp b4748's llama-perplexity on the F32 GGUF at ctx 128: 4.9693. */
Test(model, stories260K_perplexity_matches_llama_cpp)
{
    TEST_DATA(gguf, "gguf/stories260K.gguf");
    TEST_DATA(txt, "text/tinystories_val.txt");
    struct llm_model *m = open_converted(gguf, NULL, 1);
    char *text;
    size_t len, n;
    cr_assert_eq(llm_read_file(txt, 1 << 24, &text, &len), LLM_OK);
    if (!PPL_FULL && len > 10000)
        len = 10000;
    int32_t *ids;
    cr_assert_eq(llm_tokenize(llm_model_tokenizer(m), text, len, LLM_TOK_ADD_BOS, &ids, &n), LLM_OK);
    cr_assert_eq(ids[0], 1);
    struct llm_context *c;
    struct llm_context_params cp;
    llm_context_params_default(&cp);
    cp.n_ctx = 128;
    cr_assert_eq(llm_context_new(&c, m, &cp), LLM_OK);
    double ppl, se;
    llm_status s = llm_perplexity(c, ids, n, 128, 0, &ppl, &se);
    cr_assert_eq(s, LLM_OK, "%s", llm_error_detail(s));
    if (PPL_FULL)
        cr_assert(fabs(ppl / 4.9693 - 1) < 0.005, "ppl %.4f +/- %.5f, llama.cpp 4.9693", ppl, se);
    else
        cr_assert(ppl > 3 && ppl < 7, "ppl %.4f on a prefix", ppl);
    cr_assert(se > 0 && se < 0.5, "stderr %g", se);
    /* the GPTQ protocol scores every token, including the hard early ones */
    double ppl_all, ppl_half;
    cr_assert_eq(llm_perplexity(c, ids, 128 * 16, 128, 1, &ppl_all, NULL), LLM_OK);
    cr_assert_eq(llm_perplexity(c, ids, 128 * 16, 128, 0, &ppl_half, NULL), LLM_OK);
    cr_assert(ppl_all > ppl_half * 1.05, "score-all %.4f vs second-half %.4f", ppl_all, ppl_half);
    cr_assert_eq(llm_perplexity(c, ids, 200, 128, 0, &ppl, NULL), LLM_E_INVALID);
    llm_free(ids);
    llm_free(text);
    llm_context_free(c);
    llm_model_close(m);
}

/* Stop strings: text that could begin one is held back, then released when
 * it does not; a match ends the text just before it. */
Test(model, stop_strings_hold_back_and_cut)
{
    TEST_DATA(bin, "llama2c/stories260K.bin");
    TEST_DATA(tok, "llama2c/tok512.bin");
    TEST_DATA(exp_path, "llama2c/stories260K.expected_t0_n200.txt");
    char *expected;
    size_t elen;
    cr_assert_eq(llm_read_file(exp_path, 1 << 20, &expected, &elen), LLM_OK);
    struct llm_model *m = open_converted(bin, tok, 1);
    struct llm_context *c;
    cr_assert_eq(llm_context_new(&c, m, NULL), LLM_OK);
    int32_t bos = 1;
    struct llm_gen_params gp;
    llm_gen_params_default(&gp);
    gp.sp.temp = 0;
    gp.n_predict = 200;
    /* "red ball" occurs, "red balloon" never: the held "red ball" comes out */
    const char *stops1[] = { "red balloon", "zzz" };
    gp.stop = stops1;
    gp.n_stop = 2;
    struct text_buf tb = { .len = 0 };
    struct llm_gen_callbacks cb = { collect, NULL, &tb };
    struct llm_gen_result r;
    cr_assert_eq(llm_generate(c, &bos, 1, &gp, &cb, &r), LLM_OK);
    cr_assert_eq(tb.len, elen);
    cr_assert(memcmp(tb.buf, expected, elen) == 0);
    cr_assert_str_eq(r.stop_reason, "length");
    /* the first "Lily" ends it: the text is everything before */
    const char *stops2[] = { "big, red", "Lily" };
    gp.stop = stops2;
    tb.len = 0;
    cr_assert_eq(llm_generate(c, &bos, 1, &gp, &cb, &r), LLM_OK);
    const char *want = "Once upon a time, there was a little girl named ";
    cr_assert_eq(tb.len, strlen(want), "%.*s", (int)tb.len, tb.buf);
    cr_assert(memcmp(tb.buf, want, tb.len) == 0);
    cr_assert_str_eq(r.stop_reason, "stop");
    cr_assert(r.n_gen < 20);
    llm_free(expected);
    llm_context_free(c);
    llm_model_close(m);
}
