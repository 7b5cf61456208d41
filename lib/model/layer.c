/* layer.c: the decoder layer of the forward pass, in the stages of
 * layer.h; llm_model_layer runs them for llm_decode_batch. */
#include "layer.h"

#include <math.h>
#include <string.h>

#include "../common/alloc.h"
#include "model_impl.h"

llm_status llm_model_matmul(struct llm_context *c, int n_w, const struct llm_weight *const *W,
                            const struct llm_weight *const *bias, const float *X, float *const *Y,
                            int32_t n)
{
    struct llm_backend *b = c->be;
    int any = 0;
    for (int j = 0; j < n_w; j++)
        any |= W[j]->perm != NULL;
    if (!any)
        return b->ops->matmul(b, n_w, W, bias, X, Y, n);
    uint32_t done = 0;
    for (int j = 0; j < n_w; j++) {
        if (done >> j & 1)
            continue;
        const struct llm_weight *gw[3], *gb[3];
        float *gy[3];
        int k = 0;
        for (int i = j; i < n_w && k < 3; i++) {
            if ((done >> i & 1) || W[i]->perm != W[j]->perm)
                continue;
            gw[k] = W[i];
            gb[k] = bias ? bias[i] : NULL;
            gy[k++] = Y[i];
            done |= 1u << i;
        }
        const float *in = X;
        if (W[j]->perm) {
            LLM_TRY(b->ops->gather(b, X, W[j]->perm, c->xp, n, W[j]->ne0));
            in = c->xp;
        }
        LLM_TRY(b->ops->matmul(b, k, gw, bias ? gb : NULL, in, gy, n));
    }
    return LLM_OK;
}

/* The caller's weight, else the model's; a bias only when the model's
 * layers have biases or the caller gives one. */
static const struct llm_weight *pick(const struct llm_weight *mine, const struct llm_weight *own)
{
    return mine ? mine : own;
}

static const struct llm_weight *pick_bias(const struct llm_weight *mine,
                                          const struct llm_weight *own)
{
    return mine ? mine : own->data ? own : NULL;
}

static const struct llm_layer_lin no_lin;

static llm_status check_rows(const struct llm_context *c, int32_t l, int32_t n)
{
    if (l < 0 || l >= c->m->c.n_layers || n < 1 || n > c->n_batch)
        return llm_error_set(LLM_E_INVALID, "layer %d of %d, %d rows (1..%d)", l,
                             c->m->c.n_layers, n, c->n_batch);
    return LLM_OK;
}

llm_status llm_layer_norm(struct llm_context *c, int32_t l, enum llm_norm which, const float *x,
                          float *y, int32_t n)
{
    const struct llm_config *cf = &c->m->c;
    if (which != LLM_NORM_OUT)
        LLM_TRY(check_rows(c, l, n));
    const struct llm_weight *w = which == LLM_NORM_OUT    ? &c->m->out_norm
                                 : which == LLM_NORM_ATTN ? &c->m->layers[l].attn_norm
                                                          : &c->m->layers[l].ffn_norm;
    return c->be->ops->rmsnorm(c->be, x, w, y, n, cf->dim, cf->rms_eps);
}

/* q, k, v of xb (n rows), roped with c->cs, then the attention of the runs
 * sl[0 .. n_sl) into att. */
static llm_status attention_stage(struct llm_context *c, int32_t l, const struct llm_layer_lin *lin,
                                  const float *xb, const struct llm_seg *sl, int32_t n_sl,
                                  int32_t n, float *att, float *probs)
{
    struct llm_backend *b = c->be;
    const struct llm_layer_w *L = &c->m->layers[l];
    const struct llm_weight *qkv[3] = { pick(lin->wq, &L->wq), pick(lin->wk, &L->wk),
                                        pick(lin->wv, &L->wv) };
    const struct llm_weight *bias[3] = { pick_bias(lin->bq, &L->bq), pick_bias(lin->bk, &L->bk),
                                         pick_bias(lin->bv, &L->bv) };
    const int any_bias = bias[0] || bias[1] || bias[2];
    float *qkv_out[3] = { c->q, c->k, c->v };
    /* without att, the probabilities alone: no v */
    LLM_TRY(llm_model_matmul(c, att ? 3 : 2, qkv, any_bias ? bias : NULL, xb, qkv_out, n));
    const struct llm_config *cf = &c->m->c;
    if (cf->qk_norm) { /* each head's row (head_dim) normed on its own */
        LLM_TRY(b->ops->rmsnorm(b, c->q, &L->q_norm, c->q, n * cf->n_heads, cf->head_dim,
                                cf->rms_eps));
        LLM_TRY(b->ops->rmsnorm(b, c->k, &L->k_norm, c->k, n * cf->n_kv_heads, cf->head_dim,
                                cf->rms_eps));
    }
    struct llm_attn_shape sh = c->ash;
    sh.window = llm_config_layer_window(cf, l);
    const float *cs = sh.window && c->cs_swa ? c->cs_swa : c->cs;
    LLM_TRY(b->ops->rope(b, &c->ash, c->rope.n_dims, c->rope.neox, cs, c->q, c->k, n));
    return b->ops->attention(b, &sh, c->kv, l, sl, n_sl, c->q, c->k, att ? c->v : NULL, att,
                             probs);
}

llm_status llm_layer_attention(struct llm_context *c, int32_t l, const struct llm_layer_lin *lin,
                               const float *xb, int32_t seq, int32_t pos, int32_t n, float *att,
                               float *probs)
{
    LLM_TRY(check_rows(c, l, n));
    for (int32_t i = 0; i < n; i++)
        c->out_rows[i] = pos + i;
    llm_model_rope_tables(c, c->out_rows, n);
    /* every layer stores this run: the blocks are taken at the first, and
     * the length is set at each (the last layer's call ends the run) */
    if (l == 0 || llm_kv_len(c->kv, seq) < pos + n) {
        LLM_TRY(llm_kv_prepare(c->kv, seq, pos, n));
        if (c->kv->n_copies)
            LLM_TRY(c->be->ops->kv_copy(c->be, c->kv));
    }
    const struct llm_seg sg = { .seq = seq, .pos = pos, .n = n, .row = 0 };
    LLM_TRY(attention_stage(c, l, lin ? lin : &no_lin, xb, &sg, 1, n, att, probs));
    llm_kv_set_len(c->kv, seq, pos + n);
    return LLM_OK;
}

void llm_model_rope_tables(struct llm_context *c, const int32_t *pos, int32_t n)
{
    llm_rope_table(&c->rope, pos, n, c->cs);
    if (c->cs_swa)
        llm_rope_table(&c->rope_swa, pos, n, c->cs_swa);
}

/* x += the branch output in c->xb2, RMS-normed first by `post` when the
 * model has it (gemma) */
static llm_status join(struct llm_context *c, const struct llm_weight *post, float *x, int32_t n)
{
    const struct llm_config *cf = &c->m->c;
    if (post->data)
        LLM_TRY(c->be->ops->rmsnorm(c->be, c->xb2, post, c->xb2, n, cf->dim, cf->rms_eps));
    return c->be->ops->add(c->be, x, c->xb2, (int64_t)n * cf->dim);
}

llm_status llm_layer_attn_out(struct llm_context *c, int32_t l, const struct llm_layer_lin *lin,
                              const float *att, float *x, int32_t n)
{
    LLM_TRY(check_rows(c, l, n));
    const struct llm_weight *wo[1] = { pick(lin ? lin->wo : NULL, &c->m->layers[l].wo) };
    float *out[1] = { c->xb2 };
    LLM_TRY(llm_model_matmul(c, 1, wo, NULL, att, out, n));
    return join(c, &c->m->layers[l].post_attn_norm, x, n);
}

llm_status llm_layer_ffn_hidden(struct llm_context *c, int32_t l, const struct llm_layer_lin *lin,
                                const float *xb, float *h, int32_t n)
{
    LLM_TRY(check_rows(c, l, n));
    if (c->m->c.n_expert)
        return llm_error_set(LLM_E_INVALID, "layer %d: a mixture-of-experts feed-forward has "
                             "no single hidden stage (llm_layer_moe)", l);
    const struct llm_layer_w *L = &c->m->layers[l];
    if (!lin)
        lin = &no_lin;
    const struct llm_weight *gu[2] = { pick(lin->gate, &L->gate), pick(lin->up, &L->up) };
    float *out[2] = { h, c->hb2 };
    LLM_TRY(llm_model_matmul(c, 2, gu, NULL, xb, out, n));
    if (c->m->c.gemma)
        return c->be->ops->geglu(c->be, h, c->hb2, (int64_t)n * c->m->c.ffn_dim);
    return c->be->ops->swiglu(c->be, h, c->hb2, (int64_t)n * c->m->c.ffn_dim);
}

llm_status llm_layer_ffn_out(struct llm_context *c, int32_t l, const struct llm_layer_lin *lin,
                             const float *h, float *x, int32_t n)
{
    LLM_TRY(check_rows(c, l, n));
    const struct llm_weight *dn[1] = { pick(lin ? lin->down : NULL, &c->m->layers[l].down) };
    float *out[1] = { c->xb2 };
    LLM_TRY(llm_model_matmul(c, 1, dn, NULL, h, out, n));
    return join(c, &c->m->layers[l].post_ffn_norm, x, n);
}

llm_status llm_layer_logits(struct llm_context *c, const struct llm_weight *head, const float *xb,
                            float *logits, int32_t n)
{
    if (n < 1 || n > c->n_batch)
        return llm_error_set(LLM_E_INVALID, "logits of %d rows (1..%d)", n, c->n_batch);
    const struct llm_weight *w[1] = { pick(head, &c->m->output) };
    float *y[1] = { logits };
    LLM_TRY(llm_model_matmul(c, 1, w, NULL, xb, y, n));
    llm_model_softcap(&c->m->c, logits, (int64_t)n * c->m->c.n_vocab);
    return LLM_OK;
}

llm_status llm_layer_embed(struct llm_context *c, const struct llm_weight *table,
                           const int32_t *tokens, int32_t n, float *x)
{
    LLM_TRY(c->be->ops->embed(c->be, pick(table, &c->m->tok_embd), tokens, n, x));
    const struct llm_config *cf = &c->m->c;
    if (cf->gemma) /* as llama.cpp and transformers: sqrt(dim) in float */
        return c->be->ops->scale(c->be, x, sqrtf((float)cf->dim), (int64_t)n * cf->dim);
    return LLM_OK;
}

struct llm_backend *llm_context_backend(struct llm_context *c)
{
    return c->be;
}

/* The router's choice for n tokens from their logits r (n, ld): each
 * token's n_expert_used best experts by softmax probability (ties to the
 * lower index), best first, into sel, and their probabilities into w,
 * renormalized over the chosen ones when the model says so. r is
 * overwritten (the probabilities, -1 where chosen). Softmax in float, as
 * transformers computes it. */
static void route(const struct llm_config *cf, float *r, int64_t ld, int32_t n, int32_t *sel,
                  float *w)
{
    const int32_t E = cf->n_expert, K = cf->n_expert_used;
    for (int32_t t = 0; t < n; t++) {
        float *p = r + (int64_t)t * ld, mx = p[0], sum = 0.0f;
        for (int32_t e = 1; e < E; e++)
            mx = p[e] > mx ? p[e] : mx;
        for (int32_t e = 0; e < E; e++)
            sum += p[e] = expf(p[e] - mx);
        for (int32_t e = 0; e < E; e++)
            p[e] /= sum;
        int32_t *st = sel + (int64_t)t * K;
        float *wt = w + (int64_t)t * K, chosen = 0.0f;
        for (int32_t k = 0; k < K; k++) {
            int32_t best = 0;
            for (int32_t e = 1; e < E; e++)
                if (p[e] > p[best])
                    best = e;
            st[k] = best;
            chosen += wt[k] = p[best];
            p[best] = -1.0f; /* below every probability: not chosen again */
        }
        for (int32_t k = 0; cf->expert_norm && k < K; k++)
            wt[k] /= chosen;
    }
}

/* A mixture-of-experts feed-forward of the n rows of xb into c->xb2, then
 * joined to x: the tokens grouped by expert, so that each chosen expert's
 * matrices are read once for all its tokens; each token's outputs summed
 * in its own order of experts, so its bits do not depend on the batch. */
llm_status llm_layer_moe(struct llm_context *c, int32_t l, const struct llm_moe_lin *lin,
                         llm_moe_tap tap, void *arg, const float *xb, float *x, int32_t n)
{
    LLM_TRY(check_rows(c, l, n));
    struct llm_backend *b = c->be;
    const struct llm_config *cf = &c->m->c;
    const struct llm_layer_w *L = &c->m->layers[l];
    const int32_t E = cf->n_expert, K = cf->n_expert_used;
    if (!E)
        return llm_error_set(LLM_E_INVALID, "layer %d has no experts", l);
    static const struct llm_moe_lin none;
    const struct llm_weight *rw[1] = { &L->router };
    float *ro[1] = { c->moe_r };
    LLM_TRY(llm_model_matmul(c, 1, rw, NULL, xb, ro, n));
    LLM_TRY(b->ops->download(b, c->moe_rh, c->moe_r, (size_t)n * (size_t)E * sizeof(float)));
    route(cf, c->moe_rh, E, n, c->moe_sel, c->moe_w);
    /* the (token, rank) pairs sorted by expert: rows to read, slots to fill */
    int32_t *cnt = c->moe_count;
    memset(cnt, 0, (size_t)(E + 1) * sizeof *cnt);
    for (int64_t i = 0; i < (int64_t)n * K; i++)
        cnt[c->moe_sel[i] + 1]++;
    for (int32_t e = 0; e < E; e++)
        cnt[e + 1] += cnt[e];
    for (int64_t i = 0; i < (int64_t)n * K; i++) {
        const int32_t at = cnt[c->moe_sel[i]]++;
        c->moe_rows[at] = (int32_t)(i / K);
        c->moe_slot[at] = (int32_t)i;
    }
    /* cnt[e] is now the end of expert e's pairs */
    for (int32_t e = 0, start = 0; e < E; start = cnt[e], e++) {
        const int32_t m = cnt[e] - start;
        if (!m)
            continue;
        const struct llm_moe_lin *my = lin ? &lin[e] : &none;
        LLM_TRY(b->ops->get_rows(b, xb, c->moe_rows + start, c->moe_x, m, cf->dim));
        if (tap)
            LLM_TRY(tap(arg, e, 0, c->moe_x, m));
        const struct llm_weight *gu[2] = { pick(my->gate, &L->exp_gate[e]),
                                           pick(my->up, &L->exp_up[e]) };
        float *h[2] = { c->hb, c->hb2 };
        LLM_TRY(llm_model_matmul(c, 2, gu, NULL, c->moe_x, h, m));
        LLM_TRY(b->ops->swiglu(b, c->hb, c->hb2, (int64_t)m * cf->expert_ffn_dim));
        if (tap)
            LLM_TRY(tap(arg, e, 1, c->hb, m));
        const struct llm_weight *dn[1] = { pick(my->down, &L->exp_down[e]) };
        float *o[1] = { c->moe_o };
        LLM_TRY(llm_model_matmul(c, 1, dn, NULL, c->hb, o, m));
        LLM_TRY(b->ops->set_rows(b, c->moe_o, c->moe_slot + start, c->moe_y, m, cf->dim));
    }
    LLM_TRY(b->ops->combine(b, c->xb2, c->moe_y, c->moe_w, n, K, cf->dim, 0));
    if (L->sh_gate.data) { /* qwen2moe's shared expert, gated by sigmoid(x . g) */
        const struct llm_moe_lin *my = lin ? &lin[E] : &none;
        const struct llm_weight *gu[2] = { pick(my->gate, &L->sh_gate), pick(my->up, &L->sh_up) },
                                *g[1] = { &L->sh_gate_inp }, *dn[1] = { pick(my->down, &L->sh_down) };
        float *h[2] = { c->hb, c->hb2 }, *o[1] = { c->moe_o }, *go[1] = { c->moe_r };
        if (tap)
            LLM_TRY(tap(arg, E, 0, xb, n));
        LLM_TRY(llm_model_matmul(c, 2, gu, NULL, xb, h, n));
        LLM_TRY(b->ops->swiglu(b, c->hb, c->hb2, (int64_t)n * cf->shared_ffn_dim));
        if (tap)
            LLM_TRY(tap(arg, E, 1, c->hb, n));
        LLM_TRY(llm_model_matmul(c, 1, dn, NULL, c->hb, o, n));
        LLM_TRY(llm_model_matmul(c, 1, g, NULL, xb, go, n));
        LLM_TRY(b->ops->download(b, c->moe_rh, c->moe_r, (size_t)n * sizeof(float)));
        for (int32_t t = 0; t < n; t++)
            c->moe_rh[t] = 1.0f / (1.0f + expf(-c->moe_rh[t]));
        LLM_TRY(b->ops->combine(b, c->xb2, c->moe_o, c->moe_rh, n, 1, cf->dim, 1));
    }
    return join(c, &L->post_ffn_norm, x, n);
}

llm_status llm_model_layer(struct llm_context *c, int32_t l, const struct llm_seg *sl,
                           int32_t n_sl, int32_t n)
{
    LLM_TRY(llm_layer_norm(c, l, LLM_NORM_ATTN, c->x, c->xb, n));
    LLM_TRY(attention_stage(c, l, &no_lin, c->xb, sl, n_sl, n, c->att, NULL));
    LLM_TRY(llm_layer_attn_out(c, l, NULL, c->att, c->x, n));
    LLM_TRY(llm_layer_norm(c, l, LLM_NORM_FFN, c->x, c->xb, n));
    if (c->m->c.n_expert)
        return llm_layer_moe(c, l, NULL, NULL, NULL, c->xb, c->x, n);
    LLM_TRY(llm_layer_ffn_hidden(c, l, NULL, c->xb, c->hb, n));
    return llm_layer_ffn_out(c, l, NULL, c->hb, c->x, n);
}
