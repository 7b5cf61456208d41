/* quantize.c: the plan (which tensor gets what), the output file streamed
 * tensor by tensor, and the methods that need no calibration (RTN, NF4,
 * FP8). Calibrated layers are in layer.c. See quantize.h. */
#include "quantize.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "../common/alloc.h"
#include "../ops/matmul_impl.h"
#include "../quant/quant.h"
#include "../quant/grid.h"
#include "../quant/kquants.h"
#include "qimpl.h"

void llm_quantize_params_default(struct llm_quantize_params *p)
{
    memset(p, 0, sizeof *p);
    llm_qspec_default(&p->def);
    p->n_samples = 128;
    p->seq_len = 512;
    p->seed = 1;
    p->damp = 0.01f;
    p->block_size = 128;
    p->awq_grid = 20;
    p->awq_duo = 1;
    p->awq_clip = 1;
    p->awq_tokens = 4096;
}

void llm_qreport_free(struct llm_qreport *r)
{
    if (!r)
        return;
    llm_free(r->t);
    memset(r, 0, sizeof *r);
}

double llm_q_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void llm_q_progress(struct qctx *q, int64_t add)
{
    q->work_done += add;
    if (!q->p->progress)
        return;
    struct llm_qprogress pr = { .done = q->work_done, .total = q->work_total,
                                .stage = q->stage_name, .elapsed = llm_q_now() - q->t0 };
    q->p->progress(q->p->progress_ctx, &pr);
}

struct qt *llm_q_find(struct qctx *q, const char *name)
{
    for (size_t i = 0; i < q->n_t; i++)
        if (!strcmp(q->t[i].name, name))
            return &q->t[i];
    return NULL;
}

void llm_q_perm_name(const char *weight, char *out)
{
    size_t len = strlen(weight) - strlen(".weight");
    memcpy(out, weight, len);
    memcpy(out + len, ".perm", 6); /* shorter than ".weight": fits */
}

struct llm_qtensor_report *llm_q_report(struct qctx *q, struct qt *t, int32_t expert)
{
    static struct llm_qtensor_report sink;
    struct llm_qreport *r = q->rep;
    if (!r)
        return memset(&sink, 0, sizeof sink);
    struct llm_qtensor_report *e = NULL;
    if (t->report && expert < 0)
        e = &r->t[t->report - 1];
    for (size_t i = 0; !e && expert >= 0 && i < r->n; i++) /* a few per tensor: a scan */
        if (r->t[i].expert == expert && !strcmp(r->t[i].name, t->name))
            e = &r->t[i];
    if (!e) {
        if (r->n == r->cap) {
            size_t cap = r->cap ? 2 * r->cap : 64;
            struct llm_qtensor_report *nt = llm_realloc(r->t, cap * sizeof *nt);
            if (!nt)
                return memset(&sink, 0, sizeof sink);
            r->t = nt;
            r->cap = cap;
        }
        e = &r->t[r->n++];
        memset(e, 0, sizeof *e);
        snprintf(e->name, sizeof e->name, "%s", t->name);
        e->layer = t->stage >= 0 && t->stage < q->m->c.n_layers ? t->stage : -1;
        e->method = t->imatrix ? LLM_QM_RTN : (enum llm_qmethod)t->spec.method;
        e->from = t->in ? t->in->type : t->to;
        e->to = t->to;
        e->out_err_before = e->out_err_after = -1;
        e->awq_ratio = -1;
        e->expert = expert;
        e->tokens = -1;
        if (expert < 0)
            t->report = r->n;
    }
    /* fp8's scope is final once the tensor is quantized (auto chooses it then) */
    e->fp8_scale = t->to == LLM_TYPE_FP8_E4M3 ? t->spec.per_tensor == 1 : -1;
    return e;
}

llm_status llm_q_load_f32(struct qctx *q, struct qt *t, float **out, int64_t *rows, int64_t *cols)
{
    struct llm_tensor *in = t->in;
    int64_t c = in->ne[0], r = llm_tensor_nrows(in);
    uint64_t n;
    if (!llm_mul_ok((uint64_t)r, (uint64_t)c * sizeof(float), &n) || n > SIZE_MAX)
        return llm_error_set(LLM_E_NOMEM, "%s: tensor '%s' is too large", q->in->path, t->name);
    const void *src;
    LLM_TRY(llm_tensor_bytes(q->in, in, &src));
    float *W = llm_malloc((size_t)n);
    if (!W)
        return LLM_E_NOMEM;
    uint64_t rb = llm_type_row_bytes(in->type, (uint64_t)c);
    for (int64_t i = 0; i < r; i++) {
        llm_status s = llm_dequantize_row(in->type, (const uint8_t *)src + rb * (uint64_t)i,
                                          W + i * c, c);
        if (s) {
            llm_free(W);
            return s;
        }
    }
    *out = W;
    *rows = r;
    *cols = c;
    return LLM_OK;
}

/* FP8 with one scale per tensor: every row header gets the tensor's
 * absmax / 448 (blocks.h), the codes e4m3(x / scale). */
static void fp8_row_tensor_scale(const float *x, int64_t ne0, float scale, uint8_t *dst)
{
    memcpy(dst, &scale, sizeof scale);
    float inv = scale > 0 ? 1.0f / scale : 0.0f;
    for (int64_t i = 0; i < ne0; i++)
        dst[4 + i] = llm_fp32_to_fp8_e4m3(x[i] * inv);
}

float llm_q_fp8_absmax_scale(const float *W, int64_t n)
{
    float amax = 0.0f;
    for (int64_t i = 0; i < n; i++)
        if (isfinite(W[i]) && fabsf(W[i]) > amax)
            amax = fabsf(W[i]);
    return amax / 448.0f;
}

float llm_q_fp8_tensor_scale(const struct qt *t, const float *W, int64_t n)
{
    if (t->to != LLM_TYPE_FP8_E4M3 || t->spec.per_tensor != 1)
        return 0.0f;
    return llm_q_fp8_absmax_scale(W, n);
}

llm_status llm_q_quantize_plain(struct qctx *q, struct qt *t, int32_t expert, float *W,
                                int64_t row0, int64_t rows, int64_t cols)
{
    double t0 = llm_q_now();
    uint64_t rb = llm_type_row_bytes(t->to, (uint64_t)cols);
    if (!t->data)
        t->data = llm_malloc((size_t)t->nbytes ? (size_t)t->nbytes : 1);
    if (!t->data)
        return LLM_E_NOMEM;
    const float tscale = llm_q_fp8_tensor_scale(t, W, rows * cols);
    float *back = llm_malloc((size_t)cols * sizeof(float));
    if (!back)
        return LLM_E_NOMEM;
    double err = 0;
    llm_status s = LLM_OK;
    for (int64_t i = 0; i < rows && !s; i++) {
        uint8_t *dst = (uint8_t *)t->data + rb * (uint64_t)(row0 + i);
        float *w = W + i * cols;
        if (tscale > 0.0f)
            fp8_row_tensor_scale(w, cols, tscale, dst);
        else
            s = llm_quantize_row(t->to, w, dst, cols);
        if (!s)
            s = llm_dequantize_row(t->to, dst, back, cols);
        for (int64_t j = 0; j < cols && !s; j++) {
            double d = (double)w[j] - back[j];
            err += d * d;
            w[j] = back[j];
        }
    }
    llm_free(back);
    if (s)
        return s;
    struct llm_qtensor_report *e = llm_q_report(q, t, expert);
    e->rows = rows;
    e->cols = cols;
    e->weight_err = err / ((double)rows * (double)cols);
    e->seconds += llm_q_now() - t0;
    return LLM_OK;
}

/* ---- the output file -------------------------------------------------- */

struct fill_ctx {
    struct qctx *q;
    size_t i;
};

/* A tensor of the output, on the writer's demand: run the stages it waits
 * for, then hand over its bytes. */
static llm_status fill_tensor(const struct llm_tensor *ot, void *dst, void *arg)
{
    struct fill_ctx *fc = arg;
    struct qctx *q = fc->q;
    struct qt *t = &q->t[fc->i];
    if (q->flow != FLOW_NONE)
        while (q->stage_done < t->stage)
            LLM_TRY(llm_q_calib_stage(q, ++q->stage_done));
    if (t->data) {
        memcpy(dst, t->data, (size_t)ot->nbytes);
        llm_free(t->data);
        t->data = NULL;
        return LLM_OK;
    }
    if (!t->in)
        return llm_error_set(LLM_E_INVALID, "%s: tensor '%s' was not produced", q->in->path,
                             t->name);
    if (t->in->type == t->to)
        return llm_tensor_read(q->in, t->in, dst);
    if (!t->is_linear) {
        /* a vector or an untouched table in another type */
        const void *src;
        LLM_TRY(llm_tensor_bytes(q->in, t->in, &src));
        return llm_convert_rows(t->in->type, src, t->to, dst, t->in->ne[0],
                                llm_tensor_nrows(t->in));
    }
    /* RTN / NF4 / FP8 / keep-with-type, row block by row block */
    snprintf(q->stage_name, sizeof q->stage_name, "%s", t->name);
    float *W;
    int64_t rows, cols;
    LLM_TRY(llm_q_load_f32(q, t, &W, &rows, &cols));
    llm_status s = llm_q_quantize_plain(q, t, -1, W, 0, rows, cols);
    llm_free(W);
    if (s)
        return s;
    memcpy(dst, t->data, (size_t)ot->nbytes);
    llm_free(t->data);
    t->data = NULL;
    llm_q_progress(q, q->flow == FLOW_NONE ? rows * cols : 0);
    return LLM_OK;
}

/* Stage of a tensor: -1 before the blocks, the block index, or n_layers
 * for output_norm / output (and a tied table the head quantizes). */
static int stage_of(const char *name, int n_layers)
{
    int l;
    char tail[8];
    if (sscanf(name, "blk.%d.%1s", &l, tail) == 2 && l >= 0 && l < n_layers)
        return l;
    if (!strcmp(name, "output_norm.weight") || !strcmp(name, "output.weight"))
        return n_layers;
    return -1;
}

static int is_layer_linear(const char *name)
{
    static const char *const suf[] = { ".attn_q.weight", ".attn_k.weight", ".attn_v.weight",
                                       ".attn_output.weight", ".ffn_gate.weight",
                                       ".ffn_up.weight", ".ffn_down.weight",
                                       /* mixtures of experts: the experts (3-D, quantized
                                        * expert by expert) and qwen2moe's shared one; the
                                        * routers stay as they are, as llama.cpp keeps them */
                                       ".ffn_gate_exps.weight", ".ffn_up_exps.weight",
                                       ".ffn_down_exps.weight", ".ffn_gate_shexp.weight",
                                       ".ffn_up_shexp.weight", ".ffn_down_shexp.weight" };
    size_t n = strlen(name);
    if (strncmp(name, "blk.", 4))
        return 0;
    for (size_t i = 0; i < sizeof suf / sizeof suf[0]; i++) {
        size_t k = strlen(suf[i]);
        if (n > k && !strcmp(name + n - k, suf[i]))
            return 1;
    }
    return 0;
}

static int is_quant(enum llm_type t)
{
    const struct llm_type_traits *tr = llm_type_traits(t);
    return tr && tr->is_quant;
}

/* The type that stores rows of ne0 elements on t's grid without wasting
 * bits on padding:
 *  - a group as long as the row or longer is one group per row: the
 *    per-channel type holds exactly that (stories260K's 64-wide rows in
 *    groups of 128 would take 8.5 bits per weight instead of 5);
 *  - a row that is not a multiple of the group takes the largest smaller
 *    group that stores it in fewer bytes, which is also finer: SmolLM2's
 *    576-wide rows are 324 bytes in groups of 64 against 340 padded to
 *    five groups of 128 (llama.cpp likewise gives such tensors another
 *    type);
 *  - the GGUF block types (q4_k ...) take llama.cpp's fallbacks
 *    (llm_q_fallback), so that the file exports as llama.cpp's would. */
enum llm_type llm_q_fit_group(enum llm_type t, int64_t ne0)
{
    if (llm_type_whole_blocks(t))
        return llm_q_fallback(t, ne0);
    struct llm_qgrid g;
    if (llm_qgrid_of(t, &g) != LLM_OK || g.fp8 || !g.group) {
        llm_error_clear();
        return t;
    }
    if (g.group > ne0)
        return (enum llm_type)llm_qgrid_type(g.bits, g.zero_point, 0);
    enum llm_type best = t; /* ties keep the larger group */
    for (int G = g.group / 2; G >= 32; G /= 2) {
        enum llm_type f = (enum llm_type)llm_qgrid_type(g.bits, g.zero_point, G);
        if (llm_type_row_bytes(f, (uint64_t)ne0) < llm_type_row_bytes(best, (uint64_t)ne0))
            best = f;
    }
    return best;
}

/* --target-bpw's candidates for rows of ne0 elements: llama.cpp's types
 * from 2.6 to 8.5 bits per weight, as rows of ne0 store them (fallbacks
 * where 256 does not divide ne0), each once. */
static int candidates(int64_t ne0, enum llm_type *out)
{
    static const enum llm_type base[] = { LLM_TYPE_Q2_K, LLM_TYPE_Q3_K, LLM_TYPE_IQ4_XS,
                                          LLM_TYPE_Q4_K, LLM_TYPE_Q5_K, LLM_TYPE_Q6_K,
                                          LLM_TYPE_Q8_0 };
    int n = 0;
    for (size_t i = 0; i < sizeof base / sizeof base[0]; i++) {
        enum llm_type t = llm_q_fallback(base[i], ne0);
        if (t == LLM_TYPE_Q8_0 && ne0 % 32)
            t = LLM_TYPE_F16;
        int seen = 0;
        for (int k = 0; k < n; k++)
            seen |= out[k] == t;
        if (!seen)
            out[n++] = t;
    }
    return n;
}

/* --target-bpw's choice for tensor `name` (NULL: none) */
static const struct qchoice *choice_of(const struct qctx *q, const char *name)
{
    for (size_t i = 0; i < q->n_choice; i++)
        if (!strcmp(q->choice[i].name, name))
            return &q->choice[i];
    return NULL;
}

/* Which tensor gets what; the calibration flow; refusals. */
static llm_status plan(struct qctx *q)
{
    struct llm_file *in = q->in;
    const struct llm_quantize_params *p = q->p;
    int nl = q->m->c.n_layers, tied = q->m->c.tie_embeddings;
    const char *path = in->path;
    const char *prev;
    if (!llm_meta_get_str(in->meta, "quantization.method", &prev) && !p->allow_requantize)
        return llm_error_set(LLM_E_INVALID, "%s: the model was quantized already (method %s); "
                             "quantize the float model, or pass --allow-requantize", path, prev);
    llm_error_clear();
    q->t = llm_calloc(in->n_tensors + 16 * (size_t)nl + 4, sizeof *q->t);
    if (!q->t)
        return LLM_E_NOMEM;
    int has_gptq = 0, has_awq = 0;
    for (size_t i = 0; i < in->n_tensors; i++) {
        struct llm_tensor *it = &in->tensors[i];
        struct qt *t = &q->t[q->n_t++];
        t->in = it;
        snprintf(t->name, sizeof t->name, "%s", it->name);
        t->to = it->type;
        t->stage = stage_of(it->name, nl);
        llm_qspec_unset(&t->spec);
        t->spec.method = LLM_QM_KEEP;
        if (it->flags & LLM_TENSOR_AUX)
            continue;
        int matrix = it->n_dims >= 2;
        int emb = !strcmp(it->name, "token_embd.weight"), head = !strcmp(it->name, "output.weight");
        if (!matrix || !(is_layer_linear(it->name) || emb || head))
            continue;
        if (is_quant(it->type)) {
            if (!p->allow_requantize)
                return llm_error_set(LLM_E_INVALID, "%s: tensor '%s' is already quantized (%s); "
                                     "quantize the float model, or pass --allow-requantize to "
                                     "dequantize it on load", path, it->name,
                                     llm_type_name(it->type));
            if (q->rep)
                q->rep->dequantized_input = 1;
        }
        t->is_linear = 1;
        struct llm_qspec def = p->def;
        int rule_line = 0; /* the recipe rule that named the tensor */
        if (emb || head) {
            /* Embeddings and the head default to 8-bit round to nearest
             * (q8_0); a recipe may say otherwise. */
            llm_qspec_unset(&def);
            def.method = LLM_QM_RTN;
            def.bits = 8;
            def.group = 32;
            def.sym = 1;
            def.double_quant = def.per_tensor = 0;
            /* Only a rule that matches the table's name changes that: the
             * recipe's default is meant for the blocks. */
            struct llm_recipe rules;
            if (p->recipe) {
                rules = *p->recipe;
                llm_qspec_unset(&rules.def);
            }
            llm_recipe_resolve(p->recipe ? &rules : NULL, &def, it->name, &t->spec, &rule_line);
        } else {
            llm_recipe_resolve(p->recipe, &def, it->name, &t->spec, &rule_line);
        }
        const struct qchoice *ch = choice_of(q, it->name);
        if (q->measure && it->n_dims > 2)
            return llm_error_set(LLM_E_UNSUPPORTED, "%s: tensor '%s': --target-bpw does not "
                                 "weigh the experts of a mixture of experts yet", path, it->name);
        if (q->measure) {
            /* the first pass of --target-bpw: measure every candidate on
             * the calibration inputs (an untied embedding table has none:
             * its type is fixed in allocate()) */
            t->n_cand = candidates(it->ne[0], t->cand);
            t->measure = !(emb && !tied);
            t->spec.method = t->measure ? LLM_QM_GPTQ : LLM_QM_RTN;
            t->spec.type = (int)t->cand[0];
            t->to = t->cand[0];
            if (t->measure && emb)
                t->stage = nl;
            has_gptq |= t->measure;
            continue;
        } else if (ch) {
            t->spec.type = (int)ch->type;
            if (emb || head || !llm_kq_type(ch->type))
                t->spec.method = LLM_QM_RTN;
        } else if (p->mix != LLM_QMIX_NONE && !rule_line) {
            /* a named mixture: the type by llama.cpp's rules; the method
             * the command line's for the blocks, rtn for the tables */
            const int layer = t->stage >= 0 && t->stage < nl ? t->stage : -1;
            t->spec.type = (int)llm_qmix_type(p->mix, it->name, layer, nl, head || (emb && tied),
                                              it->ne[0]);
            if (emb || head)
                t->spec.method = LLM_QM_RTN;
        }
        enum llm_type to;
        llm_status s = llm_qspec_type(&t->spec, it->type, &to);
        if (s) {
            llm_error_prefix(it->name);
            llm_error_prefix(path);
            return s;
        }
        t->to = llm_q_fit_group(to, it->ne[0]);
        /* rtn to a GGUF block type with calibration text: weighted by the
         * columns' mean squared inputs, which the gptq flow collects (an
         * embedding table read by lookup has no inputs: plain rtn) */
        if (t->spec.method == LLM_QM_RTN && p->calib_path && llm_kq_type(t->to) &&
            !(emb && !tied)) {
            t->spec.method = LLM_QM_GPTQ;
            t->imatrix = 1;
            if (emb)
                t->stage = nl;
        }
        struct llm_qgrid fg;
        if ((t->spec.method == LLM_QM_GPTQ || t->spec.method == LLM_QM_AWQ) &&
            !llm_kq_type(t->to) && t->spec.type >= 0 &&
            llm_kq_type((enum llm_type)t->spec.type) && llm_qgrid_of(t->to, &fg) != LLM_OK) {
            /* rows that hold no block of any GGUF quantized type fall back
             * to f16, which is kept */
            llm_error_clear();
            t->spec.method = LLM_QM_RTN;
        }
        /* fp8 with calibration text is GPTQ on the E4M3 grid: the same
         * scales, the rounding errors fed back into the columns not yet
         * quantized */
        if (t->spec.method == LLM_QM_FP8 && p->calib_path)
            t->spec.method = LLM_QM_GPTQ;
        if (t->spec.method == LLM_QM_FP8 && t->spec.per_tensor == LLM_FP8_SCALE_AUTO)
            return llm_error_set(LLM_E_INVALID, "%s: tensor '%s': fp8 scale auto chooses by the "
                                 "calibration data: it needs --calib FILE", path, it->name);
        if (t->spec.method == LLM_QM_AWQ && (emb || head))
            return llm_error_set(LLM_E_INVALID, "%s: tensor '%s': awq applies to the linear layers "
                                 "of the blocks only", path, it->name);
        if (t->spec.method == LLM_QM_GPTQ && emb && !tied)
            return llm_error_set(LLM_E_INVALID, "%s: tensor 'token_embd.weight': gptq needs the "
                                 "inputs of a product; an embedding table is read by lookup", path);
        if (t->spec.method == LLM_QM_GPTQ && emb && p->act_order && !p->static_groups)
            return llm_error_set(LLM_E_INVALID, "%s: the tied 'token_embd.weight' cannot take "
                                 "act-order without --static-groups (its columns must stay in "
                                 "order for the lookup)", path);
        if (t->spec.method == LLM_QM_GPTQ && p->gptq_mse > 0.0f && t->to == LLM_TYPE_FP8_E4M3)
            return llm_error_set(LLM_E_INVALID, "%s: tensor '%s': --mse searches the range of an "
                                 "integer grid; fp8 has none", path, it->name);
        if (t->spec.method == LLM_QM_GPTQ && it->n_dims == 3 && p->act_order && !p->static_groups)
            return llm_error_set(LLM_E_INVALID, "%s: tensor '%s': act-order experts would need a "
                                 "column order per expert; use --static-groups with --act-order",
                                 path, it->name);
        if (t->spec.method == LLM_QM_GPTQ) {
            has_gptq = 1;
            if (emb)
                t->stage = nl; /* quantized with the head's Hessian */
        }
        has_awq |= t->spec.method == LLM_QM_AWQ;
    }
    if (has_gptq && has_awq)
        return llm_error_set(LLM_E_INVALID, "a run may use gptq or awq, not both");
    q->flow = has_gptq ? FLOW_GPTQ : has_awq ? FLOW_AWQ : FLOW_NONE;
    if (q->flow == FLOW_NONE && p->calib_path)
        return llm_error_set(LLM_E_INVALID, "%s: calibration text given, but no tensor uses gptq, "
                             "awq, fp8 or rtn to a GGUF block type (q4_k ...)", p->calib_path);
    if (q->flow != FLOW_NONE && !p->calib_path)
        return llm_error_set(LLM_E_INVALID, "%s needs calibration text: --calib FILE",
                             has_gptq ? "gptq" : "awq");
    /* GPTQ's own options, given to a run (a recipe) that has no GPTQ */
    if (q->flow != FLOW_GPTQ && (p->gptaq_alpha > 0.0f || p->act_order || p->gptq_mse > 0.0f))
        return llm_error_set(LLM_E_INVALID, "%s: no tensor uses gptq (or fp8 with calibration)",
                             p->gptaq_alpha > 0.0f ? "--gptaq"
                             : p->act_order        ? "--act-order"
                                                   : "--mse");
    /* Progress counts weight elements; with calibration only those the
     * stages process, which take nearly all the time. */
    for (size_t i = 0; i < q->n_t; i++) {
        struct qt *t = &q->t[i];
        int staged = t->stage >= 0 && (t->stage < nl || t->spec.method == LLM_QM_GPTQ);
        if (t->is_linear && (q->flow == FLOW_NONE || staged))
            q->work_total += llm_tensor_nelements(t->in);
    }
    /* AWQ folds its scales into the norms (and v's bias, and the routers of
     * a mixture of experts): those are rewritten, as float32 */
    if (q->flow == FLOW_AWQ)
        for (size_t i = 0; i < q->n_t; i++) {
            const char *n = q->t[i].name;
            size_t len = strlen(n);
            if (q->t[i].stage >= 0 && q->t[i].stage < nl &&
                ((len > 17 && !strcmp(n + len - 17, ".attn_norm.weight")) ||
                 (len > 16 && !strcmp(n + len - 16, ".ffn_norm.weight")) ||
                 (len > 12 && !strcmp(n + len - 12, ".attn_v.bias")) ||
                 (len > 20 && !strcmp(n + len - 20, ".ffn_gate_inp.weight")) ||
                 (len > 26 && !strcmp(n + len - 26, ".ffn_gate_inp_shexp.weight"))))
                q->t[i].to = LLM_TYPE_F32;
        }
    /* act-order weights carry a permutation tensor after them, when their
     * rows have more than one group: in a single group the order changes
     * nothing stored (gptq.c keeps such rows in column order) */
    if (q->flow == FLOW_GPTQ && p->act_order && !p->static_groups) {
        size_t n = q->n_t;
        for (size_t i = 0; i < n; i++) {
            struct qt *t = &q->t[i];
            struct llm_qgrid g;
            if (t->spec.method != LLM_QM_GPTQ || llm_qgrid_of(t->to, &g) != LLM_OK ||
                !g.group || t->in->ne[0] <= g.group)
                continue;
            char pname[LLM_MAX_NAME];
            llm_q_perm_name(t->name, pname);
            struct qt *pt = &q->t[q->n_t++];
            memcpy(pt->name, pname, sizeof pname);
            if (llm_file_find(in, pt->name))
                return llm_error_set(LLM_E_INVALID, "%s: tensor '%s' exists already", path,
                                     pt->name);
            pt->to = LLM_TYPE_I32;
            pt->stage = t->stage;
            llm_qspec_unset(&pt->spec);
            pt->spec.method = LLM_QM_KEEP;
        }
    }
    /* output order: by stage, stable (the writer streams in this order) */
    for (size_t i = 1; i < q->n_t; i++) {
        struct qt x = q->t[i];
        size_t j = i;
        while (j > 0 && q->t[j - 1].stage > x.stage) {
            q->t[j] = q->t[j - 1];
            j--;
        }
        q->t[j] = x;
    }
    return LLM_OK;
}

/* GPTQ rounds each matrix against its Hessian, mean x x^T over the
 * calibration tokens: with fewer than LLM_GPTQ_TOKENS_PER_INPUT tokens per
 * input the estimate has directions the sample barely covers, and GPTQ
 * moves the rounding error into them, where other text finds it. One
 * warning, before the calibration starts, names the widest such matrix and
 * counts the others. */
static void warn_calib_tokens(struct qctx *q)
{
    const struct llm_quantize_params *p = q->p;
    if (q->flow != FLOW_GPTQ || !p->warn)
        return;
    int64_t tokens = (int64_t)p->n_samples * p->seq_len;
    const struct qt *widest = NULL;
    size_t n_short = 0;
    for (size_t i = 0; i < q->n_t; i++) {
        const struct qt *t = &q->t[i];
        if (!t->in || t->spec.method != LLM_QM_GPTQ || t->imatrix ||
            tokens >= LLM_GPTQ_TOKENS_PER_INPUT * t->in->ne[0])
            continue;
        n_short++;
        if (!widest || t->in->ne[0] > widest->in->ne[0])
            widest = t;
    }
    if (!widest)
        return;
    char others[64] = "";
    if (n_short > 1)
        snprintf(others, sizeof others, " and of %zu other matrices", n_short - 1);
    int64_t w = widest->in->ne[0];
    char msg[LLM_MAX_NAME + 384];
    snprintf(msg, sizeof msg, "%lld calibration tokens (%d windows of %d) are fewer than %d per "
             "input of '%s' (%lld inputs: %lld tokens)%s: %s under-determined, and GPTQ fits "
             "the calibration text rather than the model; raise --samples or --seq-len",
             (long long)tokens, p->n_samples, p->seq_len, LLM_GPTQ_TOKENS_PER_INPUT, widest->name,
             (long long)w, (long long)(LLM_GPTQ_TOKENS_PER_INPUT * w), others,
             n_short > 1 ? "their Hessians are" : "its Hessian is");
    p->warn(p->warn_ctx, msg);
}

static llm_status set_meta(struct qctx *q, struct llm_meta *meta)
{
    const struct llm_quantize_params *p = q->p;
    const struct llm_qspec *d = &p->def;
    llm_meta_del(meta, "quantization");
    LLM_TRY(llm_meta_set_str(meta, "quantization.method",
                             p->recipe ? "recipe" : llm_qmethod_name((enum llm_qmethod)d->method)));
    if (d->bits >= 0)
        LLM_TRY(llm_meta_set_i64(meta, "quantization.bits", d->bits));
    if (d->group >= 0)
        LLM_TRY(llm_meta_set_i64(meta, "quantization.group", d->group));
    enum llm_type dt;
    if (!llm_qspec_type(d, LLM_TYPE_F32, &dt))
        LLM_TRY(llm_meta_set_str(meta, "quantization.type", llm_type_name(dt)));
    llm_error_clear();
    if (q->flow == FLOW_GPTQ) {
        LLM_TRY(llm_meta_set_f64(meta, "quantization.gptq.damp", p->damp));
        LLM_TRY(llm_meta_set_i64(meta, "quantization.gptq.block_size", p->block_size));
        LLM_TRY(llm_meta_set_bool(meta, "quantization.gptq.act_order", p->act_order));
        LLM_TRY(llm_meta_set_bool(meta, "quantization.gptq.static_groups", p->static_groups));
        LLM_TRY(llm_meta_set_str(meta, "quantization.gptq.grid",
                                 p->reference_grid ? "reference" : "rtn"));
        LLM_TRY(llm_meta_set_bool(meta, "quantization.gptq.true_sequential", 1));
        LLM_TRY(llm_meta_set_bool(meta, "quantization.gptq.gptaq", p->gptaq_alpha > 0.0f));
        if (p->gptaq_alpha > 0.0f)
            LLM_TRY(llm_meta_set_f64(meta, "quantization.gptq.gptaq_alpha", p->gptaq_alpha));
        LLM_TRY(llm_meta_set_f64(meta, "quantization.gptq.mse", p->gptq_mse));
        LLM_TRY(llm_meta_set_str(meta, "quantization.gptq.v_hessian",
                                 p->input_v_hessian ? "input" : "attention"));
    }
    if (q->flow == FLOW_AWQ) {
        LLM_TRY(llm_meta_set_i64(meta, "quantization.awq.grid", p->awq_grid));
        LLM_TRY(llm_meta_set_bool(meta, "quantization.awq.duo_scaling", p->awq_duo));
        LLM_TRY(llm_meta_set_bool(meta, "quantization.awq.clip", p->awq_clip));
        LLM_TRY(llm_meta_set_i64(meta, "quantization.awq.sample_tokens", p->awq_tokens));
    }
    if (q->flow != FLOW_NONE) {
        char hex[17];
        snprintf(hex, sizeof hex, "%016llx", (unsigned long long)q->cal.hash);
        LLM_TRY(llm_meta_set_str(meta, "quantization.calibration.file",
                                 p->calib_name ? p->calib_name : p->calib_path));
        LLM_TRY(llm_meta_set_str(meta, "quantization.calibration.xxh3_64", hex));
        LLM_TRY(llm_meta_set_i64(meta, "quantization.calibration.windows", q->cal.n));
        LLM_TRY(llm_meta_set_i64(meta, "quantization.calibration.window_tokens", q->cal.len));
        LLM_TRY(llm_meta_set_i64(meta, "quantization.calibration.seed", (int64_t)p->seed));
        LLM_TRY(llm_meta_set_i64(meta, "quantization.calibration.text_tokens",
                                 (int64_t)q->cal.text_tokens));
    }
    if (p->mix != LLM_QMIX_NONE)
        LLM_TRY(llm_meta_set_str(meta, "quantization.mixture", llm_qmix_name(p->mix)));
    if (p->target_bpw > 0) {
        LLM_TRY(llm_meta_set_f64(meta, "quantization.target_bpw", p->target_bpw));
        LLM_TRY(llm_meta_set_str(meta, "quantization.allocation",
                                 "types by the output error of each on the calibration data"));
    }
    if (p->recipe) {
        LLM_TRY(llm_meta_set_str(meta, "quantization.recipe", p->recipe->text));
        if (p->recipe_path)
            LLM_TRY(llm_meta_set_str(meta, "quantization.recipe_file", p->recipe_path));
    }
    if (q->rep && q->rep->dequantized_input)
        LLM_TRY(llm_meta_set_bool(meta, "quantization.requantized", 1));
    LLM_TRY(llm_meta_set_str(meta, "quantization.tool",
                             p->tool_version ? p->tool_version : "llm-quantize"));
    return LLM_OK;
}

static llm_status build_output(struct qctx *q, struct llm_file **outp)
{
    struct llm_file *o;
    LLM_TRY(llm_file_new(&o, q->in->path, "llm"));
    llm_meta_free(o->meta);
    o->meta = llm_meta_clone(q->in->meta);
    llm_status s = o->meta ? set_meta(q, o->meta) : LLM_E_NOMEM;
    for (size_t i = 0; i < q->n_t && !s; i++) {
        struct qt *t = &q->t[i];
        struct llm_tensor *ot;
        int64_t ne[LLM_MAX_DIMS] = { 1, 1, 1, 1 };
        uint32_t nd = 1;
        if (t->in) {
            memcpy(ne, t->in->ne, sizeof ne);
            nd = t->in->n_dims;
        } else {
            /* a .perm: as many entries as its weight has columns */
            char wname[LLM_MAX_NAME];
            size_t len = strlen(t->name) - strlen(".perm");
            snprintf(wname, sizeof wname, "%.*s.weight", (int)len, t->name);
            struct llm_tensor *w = llm_file_find(q->in, wname);
            ne[0] = w ? w->ne[0] : 0;
        }
        s = llm_file_add_tensor(o, t->name, t->to, nd, ne, NULL, &ot);
        if (s)
            break;
        if (t->in)
            ot->flags = t->in->flags;
        t->nbytes = ot->nbytes;
        struct fill_ctx *fc = llm_malloc(sizeof *fc);
        if (!fc) {
            s = LLM_E_NOMEM;
            break;
        }
        fc->q = q;
        fc->i = i;
        ot->fill = fill_tensor;
        ot->fill_ctx = fc;
        s = llm_file_own(o, fc);
    }
    if (s) {
        llm_file_free(o);
        return s;
    }
    *outp = o;
    return LLM_OK;
}

/* --target-bpw: the types that keep the weights within target bits per
 * weight with the least summed KL divergence, from the first pass (q1):
 * each candidate's output error in its layer's units, put into the
 * divergence it adds to the model's output (sens.c, layer.c measure_lin).
 * On SmolLM2 the layer's own units chose worse (at 4.5 bits a KL
 * divergence of 0.229: ffn_down on q2_k in 16 blocks).
 *
 * One candidate per tensor, least summed divergence within the bytes: a
 * multiple-choice knapsack, solved exactly by dynamic programming over the
 * budget in ALLOC_STEPS steps, each candidate's bytes rounded up to a
 * step (so the choice fits; at most a step per tensor is left unused). A
 * greedy on convex hulls, which this replaced, is optimal only up to its
 * last upgrade's bytes, and one upgrade can be large: a tied 49152-row
 * table's q8_0 is 14 MB of SmolLM2's 84 at 5 bits. */
#define ALLOC_STEPS 65536
static llm_status allocate(struct qctx *q1, double target, struct qchoice **out, size_t *n_out)
{
    const char *path = q1->in->path;
    uint64_t params = 0, fixed = 0;
    size_t n = 0;
    for (size_t i = 0; i < q1->n_t; i++) {
        const struct qt *t = &q1->t[i];
        if (!t->in || (t->in->flags & LLM_TENSOR_AUX))
            continue;
        params += llm_tensor_nelements(t->in);
        if (t->is_linear) {
            n++;
        } else {
            uint64_t b = 0;
            llm_type_tensor_bytes(t->to, t->in->n_dims, t->in->ne, &b);
            fixed += b;
        }
    }
    const uint64_t budget = (uint64_t)(target * (double)params / 8.0);
    const uint64_t left = budget > fixed ? budget - fixed : 0;
    const uint64_t unit = left / ALLOC_STEPS + 1;
    const int64_t W = (int64_t)(left / unit); /* the budget in steps */
    struct qchoice *c = llm_calloc(n ? n : 1, sizeof *c);
    uint64_t(*bytes)[LLM_QCAND_MAX] = llm_calloc(n ? n : 1, sizeof *bytes);
    double *f = llm_malloc((size_t)(W + 1) * sizeof(double));
    double *g = llm_malloc((size_t)(W + 1) * sizeof(double));
    uint8_t *pick = llm_malloc((n ? n : 1) * (size_t)(W + 1)); /* (n, W + 1) */
    if (!c || !bytes || !f || !g || !pick) {
        llm_free(c), llm_free(bytes), llm_free(f), llm_free(g), llm_free(pick);
        return LLM_E_NOMEM;
    }
    size_t k = 0;
    uint64_t least = fixed;
    for (size_t i = 0; i < q1->n_t; i++) {
        const struct qt *t = &q1->t[i];
        if (!t->in || (t->in->flags & LLM_TENSOR_AUX) || !t->is_linear)
            continue;
        struct qchoice *ch = &c[k];
        snprintf(ch->name, sizeof ch->name, "%s", t->name);
        ch->n_cand = t->n_cand;
        ch->measured = t->measure;
        memcpy(ch->cand, t->cand, sizeof ch->cand);
        memcpy(ch->cand_err, t->cand_err, sizeof ch->cand_err);
        memcpy(ch->cand_kl, t->cand_kl, sizeof ch->cand_kl);
        uint64_t lo = UINT64_MAX;
        for (int j = 0; j < t->n_cand; j++) {
            llm_type_tensor_bytes(t->cand[j], t->in->n_dims, t->in->ne, &bytes[k][j]);
            lo = bytes[k][j] < lo ? bytes[k][j] : lo;
        }
        if (!t->measure) {
            /* an untied embedding table (read by lookup, no inputs to
             * weigh): the candidate nearest the target, alone */
            int best = 0;
            const double ne = (double)llm_tensor_nelements(t->in);
            for (int j = 1; j < t->n_cand; j++)
                if (fabs(8.0 * (double)bytes[k][j] / ne - target) <
                    fabs(8.0 * (double)bytes[k][best] / ne - target))
                    best = j;
            ch->cand[0] = ch->cand[best];
            ch->cand_err[0] = ch->cand_kl[0] = 0;
            bytes[k][0] = lo = bytes[k][best];
            ch->n_cand = 1;
        }
        least += lo;
        k++;
    }
    llm_status s = LLM_OK;
    if (least > budget)
        s = llm_error_set(LLM_E_INVALID, "%s: --target-bpw %.3g is below what the smallest types "
                          "give: %.3f bits per weight", path, target,
                          8.0 * (double)least / (double)params);
    /* f[b]: the least divergence of the tensors so far within b steps */
    for (int64_t b = 0; b <= W; b++)
        f[b] = 0;
    for (size_t i = 0; i < n && !s; i++) {
        uint8_t *pk = pick + i * (size_t)(W + 1);
        for (int64_t b = 0; b <= W; b++) {
            g[b] = HUGE_VAL;
            pk[b] = 0;
            for (int j = 0; j < c[i].n_cand; j++) {
                const int64_t w = (int64_t)((bytes[i][j] + unit - 1) / unit);
                if (w <= b && f[b - w] + c[i].cand_kl[j] < g[b]) {
                    g[b] = f[b - w] + c[i].cand_kl[j];
                    pk[b] = (uint8_t)j;
                }
            }
        }
        double *x = f;
        f = g;
        g = x;
    }
    /* rounding the bytes up can make a budget the smallest types just fit
     * look short by a few steps */
    if (!s && !(f[W] < HUGE_VAL))
        s = llm_error_set(LLM_E_INVALID, "%s: --target-bpw %.3g leaves no room above what the "
                          "smallest types give (%.3f bits per weight)", path, target,
                          8.0 * (double)least / (double)params);
    for (size_t i = n, b = (size_t)W; i-- > 0 && !s;) {
        const int j = pick[i * (size_t)(W + 1) + b];
        c[i].type = c[i].cand[j];
        b -= (size_t)((bytes[i][j] + unit - 1) / unit);
    }
    llm_free(bytes), llm_free(f), llm_free(g), llm_free(pick);
    if (s) {
        llm_free(c);
        return s;
    }
    *out = c;
    *n_out = n;
    return LLM_OK;
}

static void free_ctx(struct qctx *q)
{
    if (q->flow != FLOW_NONE)
        llm_q_calib_end(q);
    for (size_t i = 0; i < q->n_t; i++) {
        llm_free(q->t[i].data);
        llm_free(q->t[i].perm);
    }
    llm_free(q->t);
    q->t = NULL;
    q->n_t = 0;
}

/* --target-bpw's first pass: the candidates' errors, layer by layer on
 * the float model's activations; then the choice. */
static llm_status measure_and_allocate(struct llm_file *in, const struct llm_quantize_params *p,
                                       struct llm_model *m, struct qchoice **out, size_t *n,
                                       double ph[LLM_QP_N])
{
    struct qctx q1;
    memset(&q1, 0, sizeof q1);
    q1.in = in;
    q1.p = p;
    q1.m = m;
    q1.stage_done = -1;
    q1.t0 = llm_q_now();
    q1.measure = 1;
    llm_status s = plan(&q1);
    if (!s && !p->calib_path)
        s = llm_error_set(LLM_E_INVALID, "--target-bpw weighs each type by its error on the "
                          "calibration data: it needs --calib FILE");
    if (!s)
        s = llm_q_calib_begin(&q1);
    while (!s && q1.stage_done < m->c.n_layers)
        s = llm_q_calib_stage(&q1, ++q1.stage_done);
    if (!s)
        s = allocate(&q1, p->target_bpw, out, n);
    memcpy(ph, q1.ph, sizeof q1.ph);
    free_ctx(&q1);
    return s;
}

llm_status llm_quantize(struct llm_file *in, const struct llm_quantize_params *p,
                        const char *out_path, const struct llm_write_opts *wo,
                        struct llm_qreport *rep)
{
    struct qctx q;
    memset(&q, 0, sizeof q);
    q.in = in;
    q.p = p;
    q.rep = rep;
    q.stage_done = -1;
    q.t0 = llm_q_now();
    if (rep)
        memset(rep, 0, sizeof *rep);
    /* The calibration's products serve no sequence: the fastest kernels
     * for their sizes, batch-invariant or not (ops/matmul_impl.h). */
    const int inv = llm_matmul_set_invariant(0);
    struct llm_model_params mp;
    llm_model_params_default(&mp);
    mp.n_threads = p->n_threads;
    /* The model binds (and validates) the weights, config, RoPE and
     * tokenizer of `in`, which stays the caller's. */
    llm_status s = llm_model_from_file_borrowed(&q.m, in, &mp);
    struct qchoice *choice = NULL;
    if (!s && p->target_bpw > 0) {
        s = measure_and_allocate(in, p, q.m, &choice, &q.n_choice, q.ph); /* its time counts */
        q.choice = choice;
    }
    struct llm_file *of = NULL;
    if (!s)
        s = plan(&q);
    if (!s)
        warn_calib_tokens(&q);
    if (!s && q.flow != FLOW_NONE)
        s = llm_q_calib_begin(&q);
    if (!s)
        s = build_output(&q, &of);
    if (!s) {
        struct llm_write_opts w;
        if (wo)
            w = *wo;
        else
            llm_write_opts_default(&w);
        w.convert = 0;
        s = llm_llm_write(of, out_path, &w);
    }
    if (!s && rep) {
        rep->seconds = llm_q_now() - q.t0;
        rep->calib_windows = q.cal.n;
        rep->calib_len = q.cal.len;
        rep->calib_text_tokens = q.cal.text_tokens;
        rep->target_bpw = p->target_bpw;
        memcpy(rep->calib_seconds, q.ph, sizeof q.ph);
        rep->calib_ffn_kept = q.hc_kept;
        rep->calib_bf16 = q.cal.n > 0 && p->calib_bf16 && llm_q_calib_bf16_ok();
        /* the forward passes: what the stages did besides the rest */
        rep->calib_seconds[LLM_QP_FORWARD] =
            q.ph[LLM_QP_TOTAL] - q.ph[LLM_QP_HESSIAN] - q.ph[LLM_QP_SOLVE] - q.ph[LLM_QP_SEARCH] -
            q.ph[LLM_QP_SENS];
        llm_file_totals(in, &rep->params, &rep->bytes_in);
        uint64_t params;
        llm_file_totals(of, &params, &rep->bytes_out);
        /* the measured errors of --target-bpw's candidates */
        for (size_t i = 0; i < q.n_t; i++) {
            const struct qchoice *ch = choice_of(&q, q.t[i].name);
            if (!ch || !ch->measured)
                continue;
            struct llm_qtensor_report *e = llm_q_report(&q, &q.t[i], -1);
            e->n_cand = ch->n_cand;
            memcpy(e->cand, ch->cand, sizeof e->cand);
            memcpy(e->cand_err, ch->cand_err, sizeof e->cand_err);
            memcpy(e->cand_kl, ch->cand_kl, sizeof e->cand_kl);
        }
    }
    llm_file_free(of);
    free_ctx(&q);
    llm_free(choice);
    llm_model_close(q.m);
    llm_matmul_set_invariant(inv);
    return s;
}
