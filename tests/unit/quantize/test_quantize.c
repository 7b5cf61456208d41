/* test_quantize.c: recipes, calibration windows, act-order permutations at
 * inference, AWQ's folding on a real model, and the quantizer end to end
 * on stories260K. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "../../../lib/bench/bench.h"
#include "../../../lib/common/alloc.h"
#include "../../../lib/format/import.h"
#include "../../../lib/model/model.h"
#include "../../../lib/quant/kquants.h"
#include "../../../lib/quant/quant.h"
#include "../../../lib/quantize/awq.h"
#include "../../../lib/quantize/calib.h"
#include "../../../lib/quantize/qimpl.h"
#include "../../../lib/quantize/quantize.h"
#include "../../../lib/sample/sample.h"
#include "../../../lib/tokenizer/tokenizer.h"
#include "../helpers.h"

/* ---- the type of each tensor ------------------------------------------- */

Test(quantize, group_fits_the_row)
{
    /* one group covers the row: per channel */
    cr_assert_eq(llm_q_fit_group(LLM_TYPE_Q4Z_G128, 64), LLM_TYPE_Q4Z_CH);
    cr_assert_eq(llm_q_fit_group(LLM_TYPE_Q8_0, 16), LLM_TYPE_Q8_CH);
    /* a multiple of the group keeps it */
    cr_assert_eq(llm_q_fit_group(LLM_TYPE_Q4Z_G128, 1536), LLM_TYPE_Q4Z_G128);
    cr_assert_eq(llm_q_fit_group(LLM_TYPE_Q4_0, 576), LLM_TYPE_Q4_0);
    /* 576 = 4.5 groups of 128: groups of 64 are fewer bytes and finer */
    cr_assert_eq(llm_q_fit_group(LLM_TYPE_Q4Z_G128, 576), LLM_TYPE_Q4Z_G64);
    cr_assert_eq(llm_q_fit_group(LLM_TYPE_Q4_G128, 576), LLM_TYPE_Q4_G64);
    cr_assert_eq(llm_q_fit_group(LLM_TYPE_Q8_G128, 576), LLM_TYPE_Q8_G64);
    cr_assert_lt(llm_type_row_bytes(LLM_TYPE_Q4Z_G64, 576),
                 llm_type_row_bytes(LLM_TYPE_Q4Z_G128, 576));
    /* 172: two groups of 128 (136 bytes) > three of 64 (108) < six of 32 (120) */
    cr_assert_eq(llm_q_fit_group(LLM_TYPE_Q4Z_G128, 172), LLM_TYPE_Q4Z_G64);
    cr_assert_eq(llm_q_fit_group(LLM_TYPE_Q4Z_G64, 172), LLM_TYPE_Q4Z_G64);
    /* nothing smaller than 32; other kinds of type are left alone */
    cr_assert_eq(llm_q_fit_group(LLM_TYPE_Q4_0, 172), LLM_TYPE_Q4_0);
    cr_assert_eq(llm_q_fit_group(LLM_TYPE_NF4, 172), LLM_TYPE_NF4);
    cr_assert_eq(llm_q_fit_group(LLM_TYPE_FP8_E4M3, 172), LLM_TYPE_FP8_E4M3);
}

/* ---- recipes ------------------------------------------------------------ */

static llm_status parse(const char *text, struct llm_recipe **r)
{
    return llm_recipe_parse(r, text, strlen(text), "r.yaml");
}

Test(quantize, recipe_rules_first_match_wins)
{
    struct llm_recipe *r;
    cr_assert_eq(parse("default:\n  method: gptq\nrules:\n"
                       "  - match: \"blk.*.attn_*\"\n    bits: 4\n    group: 64\n"
                       "  - match: \"blk.*\"\n    method: rtn\n    bits: 8\n    sym: true\n"
                       "  - match: output.weight\n    method: keep\n    type: f16\n", &r),
                 LLM_OK, "%s", llm_error_detail(LLM_E_INVALID));
    cr_assert_eq(r->n_rules, 3);
    cr_assert_eq(r->rules[0].line, 4);
    cr_assert_eq(r->rules[2].line, 11);
    struct llm_qspec def, s;
    llm_qspec_default(&def);
    enum llm_type t;
    int line;
    llm_recipe_resolve(r, &def, "blk.3.attn_v.weight", &s, &line);
    cr_assert_eq(line, 4);
    cr_assert_eq(s.method, LLM_QM_GPTQ);
    cr_assert_eq(llm_qspec_type(&s, LLM_TYPE_F32, &t), LLM_OK);
    cr_assert_eq(t, LLM_TYPE_Q4Z_G64);
    llm_recipe_resolve(r, &def, "blk.3.ffn_up.weight", &s, &line);
    cr_assert_eq(line, 7);
    cr_assert_eq(llm_qspec_type(&s, LLM_TYPE_F32, &t), LLM_OK);
    cr_assert_eq(t, LLM_TYPE_Q8_G128); /* group 128 from the command line's default */
    llm_recipe_resolve(r, &def, "output.weight", &s, &line);
    cr_assert_eq(llm_qspec_type(&s, LLM_TYPE_F32, &t), LLM_OK);
    cr_assert_eq(t, LLM_TYPE_F16);
    llm_recipe_resolve(r, &def, "token_embd.weight", &s, &line);
    cr_assert_eq(line, 0);
    cr_assert_eq(s.method, LLM_QM_GPTQ); /* the recipe's default */
    cr_assert(strstr(r->text, "    type: f16\n"), "the recipe text is kept");
    llm_recipe_free(r);
    /* fp8's scale scope: channel, tensor, auto */
    const char *scopes[] = { "channel", "tensor", "auto" };
    for (int i = 0; i < 3; i++) {
        char text[128];
        snprintf(text, sizeof text, "rules:\n  - match: x\n    method: fp8\n    scale: %s\n",
                 scopes[i]);
        cr_assert_eq(parse(text, &r), LLM_OK);
        llm_recipe_resolve(r, &def, "x", &s, &line);
        cr_assert_eq(s.per_tensor, i == 2 ? LLM_FP8_SCALE_AUTO : i, "%s", scopes[i]);
        llm_recipe_free(r);
    }
}

Test(quantize, recipe_errors_name_the_line)
{
    static const struct {
        const char *yaml, *msg;
    } cases[] = {
        { "rules:\n  - match: x\n    bitz: 4\n", "r.yaml:3: unknown key 'bitz'" },
        { "rules:\n  - bits: 4\n", "r.yaml:2: rule has no 'match' key" },
        { "rules:\n  - match: x\n    method: gptx\n", "r.yaml:3: unknown method 'gptx'" },
        { "rules:\n  - match: x\n    bits: four\n", "r.yaml:3: bits must be an integer" },
        { "rules:\n  - match: x\n    bits: 2\n", "r.yaml:2: rtn: 2 bits is not supported (3, 4, 8)" },
        { "rules:\n  - match: x\n    bits: 3\n    sym: true\n",
          "r.yaml:2: rtn: 3 bits has only the zero-point grid" },
        { "rules:\n  - match: x\n    method: awq\n    bits: 8\n", "r.yaml:2: awq: 8 bits" },
        { "rules:\n  - match: x\n    sym: maybe\n", "r.yaml:3: sym must be true or false" },
        { "rules:\n  - match: x\n    type: q9\n", "r.yaml:3: unknown type 'q9'" },
        { "rules: 3\n", "r.yaml:1: rules must be a list" },
        { "rulez:\n  - match: x\n", "r.yaml:1: unknown key 'rulez'" },
        { "rules: [\n", "r.yaml:" },
        { "- a\n- b\n", "r.yaml:1: a recipe is a mapping" },
        { "", "r.yaml: the recipe is empty" },
        { "rules:\n  - match: x\nrules:\n  - match: y\n", "r.yaml:3: 'rules' appears twice" },
        { "rules:\n  - match: x\n    bits: 4\n    bits: 8\n", "r.yaml:4: 'bits' appears twice" },
        { "rules:\n  - match: x\n    method: fp8\n    scale: row\n",
          "r.yaml:4: scale must be tensor, channel or auto" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct llm_recipe *r = NULL;
        llm_status s = parse(cases[i].yaml, &r);
        cr_assert_eq(s, LLM_E_INVALID, "case %zu", i);
        cr_assert_null(r);
        cr_assert(strstr(llm_error_detail(s), cases[i].msg), "case %zu: '%s'", i,
                  llm_error_detail(s));
    }
}

static void spec_refused(const struct llm_qspec *s, const char *msg)
{
    enum llm_type t;
    llm_status st = llm_qspec_type(s, LLM_TYPE_F32, &t);
    cr_assert_eq(st, LLM_E_INVALID);
    cr_assert(strstr(llm_error_detail(st), msg), "%s", llm_error_detail(st));
}

Test(quantize, spec_types)
{
    struct llm_qspec s;
    enum llm_type t;
    llm_qspec_default(&s);
    cr_assert_eq(llm_qspec_type(&s, LLM_TYPE_F32, &t), LLM_OK);
    cr_assert_eq(t, LLM_TYPE_Q4Z_G128); /* 4 bits: zero points */
    s.bits = 8;
    s.group = 32;
    cr_assert_eq(llm_qspec_type(&s, LLM_TYPE_F32, &t), LLM_OK);
    cr_assert_eq(t, LLM_TYPE_Q8_0); /* 8 bits: symmetric */
    s.bits = 4;
    s.sym = 1;
    s.group = 0;
    cr_assert_eq(llm_qspec_type(&s, LLM_TYPE_F32, &t), LLM_OK);
    cr_assert_eq(t, LLM_TYPE_Q4_CH);
    s.method = LLM_QM_NF4;
    s.group = 64;
    s.double_quant = 1;
    cr_assert_eq(llm_qspec_type(&s, LLM_TYPE_F32, &t), LLM_OK);
    cr_assert_eq(t, LLM_TYPE_NF4_DQ);
    s.method = LLM_QM_FP8;
    cr_assert_eq(llm_qspec_type(&s, LLM_TYPE_F32, &t), LLM_OK);
    cr_assert_eq(t, LLM_TYPE_FP8_E4M3);
    s.method = LLM_QM_AWQ;
    s.sym = -1;
    s.group = 128;
    cr_assert_eq(llm_qspec_type(&s, LLM_TYPE_F32, &t), LLM_OK);
    cr_assert_eq(t, LLM_TYPE_Q4Z_G128);
    s.bits = 3; /* awq and gptq at 3 bits: zero points, every group */
    cr_assert_eq(llm_qspec_type(&s, LLM_TYPE_F32, &t), LLM_OK);
    cr_assert_eq(t, LLM_TYPE_Q3Z_G128);
    s.method = LLM_QM_GPTQ;
    s.group = 0;
    cr_assert_eq(llm_qspec_type(&s, LLM_TYPE_F32, &t), LLM_OK);
    cr_assert_eq(t, LLM_TYPE_Q3Z_CH);
    s.group = 32;
    cr_assert_eq(llm_qspec_type(&s, LLM_TYPE_F32, &t), LLM_OK);
    cr_assert_eq(t, LLM_TYPE_Q3Z_G32);
    s.sym = 1; /* no symmetric 3-bit grid */
    spec_refused(&s, "3 bits has only the zero-point grid");
    s.sym = -1;
    s.method = LLM_QM_AWQ;
    s.bits = 8;
    spec_refused(&s, "awq: 8 bits is not supported (3, 4)");
    s.method = LLM_QM_RTN;
    s.bits = 2;
    spec_refused(&s, "2 bits is not supported (3, 4, 8)");
    s.method = LLM_QM_KEEP;
    s.type = -1;
    cr_assert_eq(llm_qspec_type(&s, LLM_TYPE_BF16, &t), LLM_OK);
    cr_assert_eq(t, LLM_TYPE_BF16);
}

/* ---- calibration -------------------------------------------------------- */

static struct llm_file *open_stories(void)
{
    const char *g = llm_test_data("gguf/stories260K.gguf");
    if (!g)
        return NULL;
    struct llm_file *f;
    cr_assert_eq(llm_import(&f, g, NULL), LLM_OK);
    return f;
}

Test(quantize, calib_windows_are_seeded_slices_with_bos)
{
    TEST_DATA(txt, "text/calibration_datav3.txt");
    struct llm_file *f = open_stories();
    struct llm_tokenizer *tok;
    cr_assert_eq(llm_tokenizer_new(&tok, f), LLM_OK);
    struct llm_calib a, b, c;
    cr_assert_eq(llm_calib_load(&a, tok, txt, 8, 64, 7), LLM_OK);
    cr_assert_eq(llm_calib_load(&b, tok, txt, 8, 64, 7), LLM_OK);
    cr_assert_eq(llm_calib_load(&c, tok, txt, 8, 64, 8), LLM_OK);
    cr_assert_eq(memcmp(a.tokens, b.tokens, 8 * 64 * sizeof(int32_t)), 0);
    cr_assert_neq(memcmp(a.tokens, c.tokens, 8 * 64 * sizeof(int32_t)), 0);
    /* each window is a slice of the tokenized text, BOS first */
    char *text;
    size_t len, n;
    int32_t *ids;
    cr_assert_eq(llm_read_file(txt, 1 << 30, &text, &len), LLM_OK);
    cr_assert_eq(llm_tokenize(tok, text, len, 0, &ids, &n), LLM_OK);
    cr_assert_eq(a.text_tokens, n);
    for (int w = 0; w < 8; w++) {
        const int32_t *win = a.tokens + w * 64;
        cr_assert_eq(win[0], llm_tokenizer_bos(tok));
        int found = 0;
        for (size_t o = 0; o + 64 <= n && !found; o++)
            found = !memcmp(ids + o + 1, win + 1, 63 * sizeof(int32_t));
        cr_assert(found, "window %d is not a slice of the text", w);
    }
    llm_free(ids);
    llm_free(text);
    llm_calib_free(&a);
    llm_calib_free(&b);
    llm_calib_free(&c);
    llm_tokenizer_free(tok);
    llm_file_free(f);
}

Test(quantize, calib_too_short_says_how_many)
{
    struct llm_file *f = open_stories();
    if (!f)
        cr_skip_test("stories260K.gguf absent");
    struct llm_tokenizer *tok;
    cr_assert_eq(llm_tokenizer_new(&tok, f), LLM_OK);
    const char *dir = llm_test_tmpdir();
    char path[512];
    snprintf(path, sizeof path, "%s/short.txt", dir);
    FILE *fp = fopen(path, "w");
    fputs("Once upon a time.", fp);
    fclose(fp);
    struct llm_calib c;
    llm_status s = llm_calib_load(&c, tok, path, 4, 32, 1);
    cr_assert_eq(s, LLM_E_INVALID);
    cr_assert(strstr(llm_error_detail(s), "short.txt: the calibration text has"), "%s",
              llm_error_detail(s));
    cr_assert(strstr(llm_error_detail(s), "need at least 33"), "%s", llm_error_detail(s));
    cr_assert_eq(llm_calib_load(&c, tok, "/nonexistent/c.txt", 4, 32, 1), LLM_E_IO);
    llm_tokenizer_free(tok);
    llm_file_free(f);
    remove(path);
    rmdir(dir);
}

/* ---- act-order permutations and AWQ folding at inference ---------------- */

/* Logits (n_tok, n_vocab) of a prompt, all positions. */
static float *logits_of(struct llm_file *f, const int32_t *toks, int n)
{
    struct llm_model *m;
    cr_assert_eq(llm_model_from_file_borrowed(&m, f, NULL), LLM_OK, "%s",
                 llm_error_detail(LLM_E_FORMAT));
    struct llm_context *c;
    cr_assert_eq(llm_context_new(&c, m, NULL), LLM_OK);
    int nv = llm_model_config(m)->n_vocab;
    float *lg = llm_malloc((size_t)n * nv * sizeof(float));
    cr_assert_eq(llm_decode(c, 0, toks, n, 0, lg, 1), LLM_OK);
    llm_context_free(c);
    llm_model_close(m);
    return lg;
}

static float max_rel_diff(const float *a, const float *b, size_t n)
{
    float amax = 0, d = 0;
    for (size_t i = 0; i < n; i++) {
        amax = fmaxf(amax, fabsf(a[i]));
        d = fmaxf(d, fabsf(a[i] - b[i]));
    }
    return d / amax;
}

/* A float copy of a tensor whose data the test then owns in the file. */
static float *own_copy(struct llm_file *f, const char *name, int64_t *rows, int64_t *cols)
{
    struct llm_tensor *t = llm_file_find(f, name);
    cr_assert_not_null(t, "%s", name);
    cr_assert_eq(t->type, LLM_TYPE_F32);
    const void *src;
    cr_assert_eq(llm_tensor_bytes(f, t, &src), LLM_OK);
    float *w = llm_malloc((size_t)t->nbytes);
    memcpy(w, src, (size_t)t->nbytes);
    cr_assert_eq(llm_file_own(f, w), LLM_OK);
    t->data = w;
    *cols = t->ne[0];
    *rows = llm_tensor_nrows(t);
    return w;
}

static const int32_t prompt[] = { 1, 403, 407, 261, 378, 293, 426, 271, 400, 263, 286, 302 };
#define NP ((int)(sizeof prompt / sizeof prompt[0]))

Test(quantize, act_order_perm_gives_the_same_logits)
{
    struct llm_file *f = open_stories();
    if (!f)
        cr_skip_test("stories260K.gguf absent");
    float *ref = logits_of(f, prompt, NP);
    struct llm_rng rng;
    llm_rng_seed(&rng, 42);
    /* q, k, v share one permutation (as GPTQ gives them); down its own */
    static const char *const names[] = { "blk.1.attn_q", "blk.1.attn_k", "blk.1.attn_v",
                                         "blk.3.ffn_down" };
    int32_t *perm_qkv = NULL;
    for (int i = 0; i < 4; i++) {
        char wn[64], pn[64];
        snprintf(wn, sizeof wn, "%s.weight", names[i]);
        snprintf(pn, sizeof pn, "%s.perm", names[i]);
        int64_t rows, cols;
        float *w = own_copy(f, wn, &rows, &cols);
        int32_t *perm = llm_malloc((size_t)cols * sizeof(int32_t));
        if (i > 0 && i < 3) {
            memcpy(perm, perm_qkv, (size_t)cols * sizeof(int32_t));
        } else {
            for (int64_t j = 0; j < cols; j++)
                perm[j] = (int32_t)j;
            for (int64_t j = cols - 1; j > 0; j--) {
                int64_t k = (int64_t)(llm_rng_next(&rng) % (uint64_t)(j + 1));
                int32_t tmp = perm[j];
                perm[j] = perm[k];
                perm[k] = tmp;
            }
        }
        if (i == 0)
            perm_qkv = perm;
        float *row = llm_malloc((size_t)cols * sizeof(float));
        for (int64_t r = 0; r < rows; r++) {
            for (int64_t j = 0; j < cols; j++)
                row[j] = w[r * cols + perm[j]];
            memcpy(w + r * cols, row, (size_t)cols * sizeof(float));
        }
        llm_free(row);
        int64_t ne[1] = { cols };
        cr_assert_eq(llm_file_add_tensor(f, pn, LLM_TYPE_I32, 1, ne, perm, NULL), LLM_OK);
        if (i > 0)
            cr_assert_eq(llm_file_own(f, perm), LLM_OK);
    }
    float *got = logits_of(f, prompt, NP);
    float d = max_rel_diff(ref, got, (size_t)NP * 512);
    cr_assert_lt(d, 1e-5f, "relative difference %g", (double)d);
    /* without the permutation tensors the model is wrong: the test can fail */
    llm_file_remove(f, "blk.1.attn_q.perm");
    llm_file_remove(f, "blk.1.attn_k.perm");
    llm_file_remove(f, "blk.1.attn_v.perm");
    float *bad = logits_of(f, prompt, NP);
    cr_assert_gt(max_rel_diff(ref, bad, (size_t)NP * 512), 1e-2f);
    llm_free(ref);
    llm_free(got);
    llm_free(bad);
    llm_file_free(f);
    llm_free(perm_qkv);
}

Test(quantize, bad_perm_is_refused)
{
    struct llm_file *f = open_stories();
    if (!f)
        cr_skip_test("stories260K.gguf absent");
    int32_t *perm = llm_malloc(64 * sizeof(int32_t));
    for (int j = 0; j < 64; j++)
        perm[j] = j;
    perm[5] = 6; /* 6 twice, 5 never */
    int64_t ne[1] = { 64 };
    cr_assert_eq(llm_file_add_tensor(f, "blk.0.attn_q.perm", LLM_TYPE_I32, 1, ne, perm, NULL),
                 LLM_OK);
    cr_assert_eq(llm_file_own(f, perm), LLM_OK);
    struct llm_model *m;
    llm_status s = llm_model_from_file_borrowed(&m, f, NULL);
    cr_assert_eq(s, LLM_E_FORMAT);
    cr_assert(strstr(llm_error_detail(s), "'blk.0.attn_q.perm': element 6 = 6 is not a "
                                          "permutation"), "%s", llm_error_detail(s));
    llm_file_free(f);
}

/* AWQ's scales folded into the norms and the up rows leave the float
 * model's outputs unchanged (folding as the driver does it). */
Test(quantize, awq_folding_keeps_the_float_model)
{
    struct llm_file *f = open_stories();
    if (!f)
        cr_skip_test("stories260K.gguf absent");
    float *ref = logits_of(f, prompt, NP);
    struct llm_rng rng;
    llm_rng_seed(&rng, 3);
    for (int l = 0; l < 5; l++) {
        char n[64];
        int64_t r, c, rq, cq, rk, ck, rv, cv, rg, cg, ru, cu, rd, cd;
        snprintf(n, sizeof n, "blk.%d.attn_norm.weight", l);
        float *an = own_copy(f, n, &r, &c);
        snprintf(n, sizeof n, "blk.%d.attn_q.weight", l);
        float *wq = own_copy(f, n, &rq, &cq);
        snprintf(n, sizeof n, "blk.%d.attn_k.weight", l);
        float *wk = own_copy(f, n, &rk, &ck);
        snprintf(n, sizeof n, "blk.%d.attn_v.weight", l);
        float *wv = own_copy(f, n, &rv, &cv);
        snprintf(n, sizeof n, "blk.%d.ffn_norm.weight", l);
        float *fn = own_copy(f, n, &r, &c);
        snprintf(n, sizeof n, "blk.%d.ffn_gate.weight", l);
        float *wg = own_copy(f, n, &rg, &cg);
        snprintf(n, sizeof n, "blk.%d.ffn_up.weight", l);
        float *wu = own_copy(f, n, &ru, &cu);
        snprintf(n, sizeof n, "blk.%d.ffn_down.weight", l);
        float *wd = own_copy(f, n, &rd, &cd);
        float s1[64], s2[64], s3[172];
        for (int i = 0; i < 64; i++) {
            s1[i] = (float)(0.25 + 4 * llm_rng_uniform(&rng));
            s2[i] = (float)(0.25 + 4 * llm_rng_uniform(&rng));
        }
        for (int i = 0; i < 172; i++)
            s3[i] = (float)(0.25 + 4 * llm_rng_uniform(&rng));
        llm_awq_fold_norm(an, NULL, s1, 64);
        llm_awq_scale_cols(wq, rq, cq, s1);
        llm_awq_scale_cols(wk, rk, ck, s1);
        llm_awq_scale_cols(wv, rv, cv, s1);
        llm_awq_fold_norm(fn, NULL, s2, 64);
        llm_awq_scale_cols(wg, rg, cg, s2);
        llm_awq_scale_cols(wu, ru, cu, s2);
        cr_assert_eq(llm_awq_fold_rows(wu, ru, cu, NULL, s3, 172), LLM_OK);
        llm_awq_scale_cols(wd, rd, cd, s3);
    }
    float *got = logits_of(f, prompt, NP);
    float d = max_rel_diff(ref, got, (size_t)NP * 512);
    cr_assert_lt(d, 1e-4f, "relative difference %g", (double)d);
    llm_free(ref);
    llm_free(got);
    llm_file_free(f);
}

/* ---- the quantizer end to end ------------------------------------------- */

/* Calibration on 8 windows of 128 tokens of txt, one thread. */
static void calib_8x128(struct llm_quantize_params *p, const char *txt)
{
    p->calib_path = txt;
    p->n_samples = 8;
    p->seq_len = 128;
    p->n_threads = 1;
}

static void run_quant(struct llm_file *f, struct llm_quantize_params *p, const char *out,
                      struct llm_qreport *rep)
{
    llm_status s = llm_quantize(f, p, out, NULL, rep);
    cr_assert_eq(s, LLM_OK, "%s", llm_error_detail(s));
}

Test(quantize, gptq_beats_rtn_on_real_calibration)
{
    TEST_DATA(txt, "text/calibration_datav3.txt");
    struct llm_file *f = open_stories();
    const char *dir = llm_test_tmpdir();
    char out[512];
    snprintf(out, sizeof out, "%s/g.llm", dir);
    struct llm_quantize_params p;
    llm_quantize_params_default(&p);
    p.def.method = LLM_QM_GPTQ;
    calib_8x128(&p, txt);
    struct llm_qreport rep;
    run_quant(f, &p, out, &rep);
    int n_gptq = 0;
    double before = 0, after = 0;
    for (size_t i = 0; i < rep.n; i++) {
        const struct llm_qtensor_report *t = &rep.t[i];
        if (t->method != LLM_QM_GPTQ)
            continue;
        n_gptq++;
        /* 64-wide rows hold one group of 128: the per-channel type; the
         * 172-wide rows of ffn_down take groups of 64 (108 bytes, against
         * 136 padded to two groups of 128) */
        cr_assert_eq(t->to, t->cols < 128 ? LLM_TYPE_Q4Z_CH : LLM_TYPE_Q4Z_G64, "%s", t->name);
        cr_assert_lt(t->out_err_after, t->out_err_before, "%s: %g vs rtn %g", t->name,
                     t->out_err_after, t->out_err_before);
        before += t->out_err_before;
        after += t->out_err_after;
    }
    cr_assert_eq(n_gptq, 35);
    cr_assert_lt(after, 0.8 * before, "gptq %g, rtn %g", after, before);
    cr_assert_eq(rep.calib_windows, 8);
    /* the output is a model that runs, with its provenance */
    struct llm_file *q;
    cr_assert_eq(llm_import(&q, out, NULL), LLM_OK);
    const char *m;
    cr_assert_eq(llm_meta_get_str(q->meta, "quantization.method", &m), LLM_OK);
    cr_assert_str_eq(m, "gptq");
    int64_t w;
    cr_assert_eq(llm_meta_get_i64(q->meta, "quantization.calibration.windows", &w), LLM_OK);
    cr_assert_eq(w, 8);
    float *lg = logits_of(q, prompt, NP);
    for (int i = 0; i < NP * 512; i++)
        cr_assert(isfinite(lg[i]));
    llm_free(lg);
    /* quantizing the result again is refused */
    struct llm_quantize_params p2;
    llm_quantize_params_default(&p2);
    char out2[512];
    snprintf(out2, sizeof out2, "%s/g2.llm", dir);
    llm_status s = llm_quantize(q, &p2, out2, NULL, NULL);
    cr_assert_eq(s, LLM_E_INVALID);
    cr_assert(strstr(llm_error_detail(s), "quantized already"), "%s", llm_error_detail(s));
    cr_assert_eq(access(out2, F_OK), -1);
    llm_file_free(q);
    llm_qreport_free(&rep);
    llm_file_free(f);
    remove(out);
    rmdir(dir);
}

Test(quantize, rtn_matches_the_row_quantizer)
{
    struct llm_file *f = open_stories();
    if (!f)
        cr_skip_test("stories260K.gguf absent");
    const char *dir = llm_test_tmpdir();
    char out[512];
    snprintf(out, sizeof out, "%s/r.llm", dir);
    struct llm_quantize_params p;
    llm_quantize_params_default(&p);
    p.def.bits = 4;
    p.def.group = 64;
    p.def.sym = 1;
    struct llm_qreport rep;
    run_quant(f, &p, out, &rep);
    struct llm_file *q;
    cr_assert_eq(llm_import(&q, out, NULL), LLM_OK);
    /* every block linear is q4_g64 with the bytes of llm_quantize_row; the
     * norms are untouched; the embedding table is q8_0 */
    int n = 0;
    for (size_t i = 0; i < f->n_tensors; i++) {
        struct llm_tensor *a = &f->tensors[i], *b = llm_file_find(q, a->name);
        cr_assert_not_null(b, "%s", a->name);
        const void *ab, *bb;
        cr_assert_eq(llm_tensor_bytes(f, a, &ab), LLM_OK);
        cr_assert_eq(llm_tensor_bytes(q, b, &bb), LLM_OK);
        if (strncmp(a->name, "blk.", 4) || a->n_dims < 2) {
            if (!strcmp(a->name, "token_embd.weight") || !strcmp(a->name, "output.weight")) {
                cr_assert_eq(b->type, LLM_TYPE_Q8_0, "%s", a->name);
                continue;
            }
            cr_assert_eq(b->type, a->type, "%s", a->name);
            cr_assert_eq(memcmp(ab, bb, (size_t)a->nbytes), 0, "%s", a->name);
            continue;
        }
        cr_assert_eq(b->type, LLM_TYPE_Q4_G64, "%s", a->name);
        uint64_t rb = llm_type_row_bytes(LLM_TYPE_Q4_G64, (uint64_t)a->ne[0]);
        uint8_t *row = llm_malloc((size_t)rb);
        for (int64_t r = 0; r < llm_tensor_nrows(a); r++) {
            cr_assert_eq(llm_quantize_row(LLM_TYPE_Q4_G64, (const float *)ab + r * a->ne[0], row,
                                          a->ne[0]), LLM_OK);
            cr_assert_eq(memcmp(row, (const uint8_t *)bb + (uint64_t)r * rb, (size_t)rb), 0,
                         "%s row %lld", a->name, (long long)r);
        }
        llm_free(row);
        n++;
    }
    cr_assert_eq(n, 35);
    llm_file_free(q);
    llm_qreport_free(&rep);
    llm_file_free(f);
    remove(out);
    rmdir(dir);
}

/* ---- the warning for too few calibration tokens -------------------------- */

struct warns {
    int n;
    char last[1024];
};
static void on_warn(void *ctx, const char *msg)
{
    struct warns *w = ctx;
    w->n++;
    snprintf(w->last, sizeof w->last, "%s", msg);
}
/* GPTQ on stories260K (64 inputs to q, k, v, o, gate, up; 172 to ffn_down)
 * with n windows of len tokens; the warnings it gave. */
static struct warns calib_warns(struct llm_file *f, const char *txt, int method, int32_t n,
                                int32_t len)
{
    const char *dir = llm_test_tmpdir();
    char out[512];
    snprintf(out, sizeof out, "%s/w.llm", dir);
    struct llm_quantize_params p;
    llm_quantize_params_default(&p);
    p.def.method = method;
    p.calib_path = txt;
    p.n_samples = n;
    p.seq_len = len;
    p.n_threads = 1;
    struct warns w = { 0 };
    p.warn = on_warn;
    p.warn_ctx = &w;
    run_quant(f, &p, out, NULL);
    remove(out);
    rmdir(dir);
    return w;
}

/* The mean KL divergence of the model with tensor `name` alone quantized
 * to `type` (rtn; with the importance of the calibration for the GGUF
 * block types) from the float model f, over the first LLM_QSENS_TOKENS
 * tokens of the calibration windows (windows of 128): llm_decode's logits,
 * llm-bench's KL divergence. */
static double kl_alone(struct llm_file *f, const char *txt, const char *name, enum llm_type type,
                       uint64_t seed, const char *one)
{
    char text[512];
    snprintf(text, sizeof text,
             "default:\n  method: keep\nrules:\n"
             "  - match: %s\n    method: rtn\n    type: %s\n"
             "  - match: token_embd.weight\n    method: keep\n"
             "  - match: output.weight\n    method: keep\n",
             name, llm_type_name(type));
    struct llm_recipe *r;
    cr_assert_eq(parse(text, &r), LLM_OK, "%s", llm_error_detail(LLM_E_INVALID));
    struct llm_quantize_params p;
    llm_quantize_params_default(&p);
    p.recipe = r;
    calib_8x128(&p, txt);
    if (!llm_kq_type(type)) /* rounded with the importance only on the block types */
        p.calib_path = NULL;
    run_quant(f, &p, one, NULL);
    llm_recipe_free(r);
    struct llm_file *g;
    cr_assert_eq(llm_import(&g, one, NULL), LLM_OK);
    cr_assert_eq(llm_file_find(g, name)->type, type);
    struct llm_tokenizer *tok;
    cr_assert_eq(llm_tokenizer_new(&tok, f), LLM_OK);
    struct llm_calib cal;
    cr_assert_eq(llm_calib_load(&cal, tok, txt, 8, 128, seed), LLM_OK);
    const int nv = 512;
    double *lp = llm_malloc(nv * sizeof(double)), *lq = llm_malloc(nv * sizeof(double));
    double sum = 0;
    for (int win = 0; win < LLM_QSENS_TOKENS / 128; win++) {
        float *a = logits_of(f, cal.tokens + win * 128, 128);
        float *b = logits_of(g, cal.tokens + win * 128, 128);
        for (int i = 0; i < 128; i++) {
            llm_log_softmax(a + i * nv, nv, lp);
            llm_log_softmax(b + i * nv, nv, lq);
            sum += llm_kl_divergence(lp, lq, nv);
        }
        llm_free(a);
        llm_free(b);
    }
    llm_free(lp);
    llm_free(lq);
    llm_calib_free(&cal);
    llm_tokenizer_free(tok);
    llm_file_free(g);
    remove(one);
    return sum / LLM_QSENS_TOKENS;
}

/* --target-bpw's cost of a candidate is the KL divergence it adds to the
 * model's output: at the two measured candidates (the one nearest the
 * target, the smallest) it is the divergence of the model with that
 * tensor alone quantized from the float model, over the first calibration
 * windows, as llm_decode and llm-bench's KL compute it (for the tied
 * table, in both its roles); the others are in proportion to their
 * errors, between the two on the line through them. */
Test(quantize, target_bpw_costs_are_kl_divergences)
{
    TEST_DATA(txt, "text/calibration_datav3.txt");
    TEST_DATA(bin, "llama2c/stories260K.bin");
    TEST_DATA(tokp, "llama2c/tok512.bin");
    const char *dir = llm_test_tmpdir();
    char out[512], one[512];
    snprintf(out, sizeof out, "%s/tb.llm", dir);
    snprintf(one, sizeof one, "%s/one.llm", dir);
    /* stories260K's GGUF has its own head; the llama2.c file ties it to
     * the embedding table */
    struct llm_import_opts io;
    llm_import_opts_default(&io);
    io.tokenizer_path = tokp;
    struct llm_file *files[2] = { open_stories(), NULL };
    cr_assert_eq(llm_import(&files[1], bin, &io), LLM_OK);
    static const char *const names[2][2] = { { "blk.1.attn_q.weight", "output.weight" },
                                             { "token_embd.weight", NULL } };
    for (int fi = 0; fi < 2; fi++) {
        struct llm_file *f = files[fi];
        struct llm_quantize_params p;
        llm_quantize_params_default(&p);
        p.target_bpw = 7.5; /* ffn's 172-wide rows stay f16 */
        calib_8x128(&p, txt);
        struct llm_qreport rep;
        run_quant(f, &p, out, &rep);
        for (int nm = 0; nm < 2 && names[fi][nm]; nm++) {
            const char *name = names[fi][nm];
            const struct llm_qtensor_report *t = NULL;
            for (size_t i = 0; i < rep.n; i++)
                if (!strcmp(rep.t[i].name, name))
                    t = &rep.t[i];
            cr_assert_not_null(t, "%s", name);
            /* 64-wide rows: iq4_nl, q5_0, q5_1, q8_0 */
            cr_assert_eq(t->n_cand, 4, "%s", name);
            double kl[4], err[4];
            const enum llm_type want[4] = { LLM_TYPE_IQ4_NL, LLM_TYPE_Q5_0, LLM_TYPE_Q5_1,
                                            LLM_TYPE_Q8_0 };
            for (int w = 0; w < 4; w++)
                for (int k = 0; k < 4; k++)
                    if (t->cand[k] == want[w])
                        kl[w] = t->cand_kl[k], err[w] = t->cand_err[k];
            cr_assert(kl[0] > kl[1] && kl[1] > kl[2] && kl[2] > kl[3] && kl[3] > 0,
                      "%s: %g %g %g %g", name, kl[0], kl[1], kl[2], kl[3]);
            /* q8_0 nearest the target, iq4_nl the smallest: the q5s on
             * the line through them */
            for (int w = 1; w <= 2; w++)
                cr_assert_float_eq(kl[w],
                                   kl[3] + (kl[0] - kl[3]) * (err[w] - err[3]) / (err[0] - err[3]),
                                   1e-12 * kl[0]);
            for (int w = 0; w < 4; w += 3) {
                const double ref = kl_alone(f, txt, name, want[w], p.seed, one);
                cr_assert(fabs(kl[w] - ref) <= 1e-3 * ref, "%s on %s: cost %g, KL divergence %g",
                          name, llm_type_name(want[w]), kl[w], ref);
            }
        }
        llm_qreport_free(&rep);
        llm_file_free(f);
    }
    remove(out);
    rmdir(dir);
}

Test(quantize, few_calibration_tokens_warn_once)
{
    TEST_DATA(txt, "text/calibration_datav3.txt");
    struct llm_file *f = open_stories();
    if (!f)
        cr_skip_test("stories260K.gguf absent");
    /* 256 tokens: 4 per input of the 64-wide matrices, 1.5 per input of the
     * five ffn_down: one warning, naming the first of them */
    struct warns w = calib_warns(f, txt, LLM_QM_GPTQ, 2, 128);
    cr_assert_eq(w.n, 1);
    cr_assert(strstr(w.last, "256 calibration tokens (2 windows of 128) are fewer than 4 per input "
                             "of 'blk.0.ffn_down.weight' (172 inputs: 688 tokens) and of 4 other "
                             "matrices: their Hessians are under-determined"), "%s", w.last);
    /* 4 x 172 = 688 tokens are enough; one fewer is not */
    w = calib_warns(f, txt, LLM_QM_GPTQ, 43, 16);
    cr_assert_eq(w.n, 0, "%s", w.last);
    w = calib_warns(f, txt, LLM_QM_GPTQ, 3, 229);
    cr_assert_eq(w.n, 1);
    cr_assert(strstr(w.last, "687 calibration tokens (3 windows of 229)"), "%s", w.last);
    /* 192 tokens are fewer than 4 x 64 too: all 35 matrices */
    w = calib_warns(f, txt, LLM_QM_GPTQ, 3, 64);
    cr_assert(strstr(w.last, "and of 34 other matrices"), "%s", w.last);
    /* AWQ inverts no Hessian: no warning */
    w = calib_warns(f, txt, LLM_QM_AWQ, 2, 128);
    cr_assert_eq(w.n, 0, "%s", w.last);
    llm_file_free(f);
}

/* llama.cpp b4748's mixtures on a 30-layer model (SmolLM2's layer sets,
 * read off llama-quantize's files), and its fallbacks. */
Test(quantize, gguf_mixtures_and_fallbacks)
{
    static const int more[] = { 0, 1, 2, 5, 8, 11, 14, 17, 20, 23, 26, 27, 28, 29 };
    for (int l = 0; l < 30; l++) {
        int m = 0;
        for (size_t i = 0; i < sizeof more / sizeof more[0]; i++)
            m |= more[i] == l;
        char v[64], d[64], q[64];
        snprintf(v, sizeof v, "blk.%d.attn_v.weight", l);
        snprintf(d, sizeof d, "blk.%d.ffn_down.weight", l);
        snprintf(q, sizeof q, "blk.%d.attn_q.weight", l);
        cr_assert_eq(llm_qmix_type(LLM_QMIX_Q4_K_M, v, l, 30, 0, 576), m ? LLM_TYPE_Q6_K : LLM_TYPE_Q4_K);
        cr_assert_eq(llm_qmix_type(LLM_QMIX_Q4_K_M, d, l, 30, 0, 1536), m ? LLM_TYPE_Q6_K : LLM_TYPE_Q4_K);
        cr_assert_eq(llm_qmix_type(LLM_QMIX_Q5_K_M, d, l, 30, 0, 1536), m ? LLM_TYPE_Q6_K : LLM_TYPE_Q5_K);
        cr_assert_eq(llm_qmix_type(LLM_QMIX_Q4_K_M, q, l, 30, 0, 576), LLM_TYPE_Q4_K);
        cr_assert_eq(llm_qmix_type(LLM_QMIX_Q4_K_S, v, l, 30, 0, 576), l < 4 ? LLM_TYPE_Q5_K : LLM_TYPE_Q4_K);
        cr_assert_eq(llm_qmix_type(LLM_QMIX_Q4_K_S, d, l, 30, 0, 1536), l < 3 ? LLM_TYPE_Q5_K : LLM_TYPE_Q4_K);
        cr_assert_eq(llm_qmix_type(LLM_QMIX_Q6_K, v, l, 30, 0, 576), LLM_TYPE_Q6_K);
        /* the Q3_K mixtures: q3_k, more bits for attn_v, attn_output and ffn_down */
        char o[64];
        snprintf(o, sizeof o, "blk.%d.attn_output.weight", l);
        cr_assert_eq(llm_qmix_type(LLM_QMIX_Q3_K_M, v, l, 30, 0, 576), l < 2 ? LLM_TYPE_Q5_K : LLM_TYPE_Q4_K);
        cr_assert_eq(llm_qmix_type(LLM_QMIX_Q3_K_M, d, l, 30, 0, 1536), l < 1 ? LLM_TYPE_Q5_K : LLM_TYPE_Q4_K);
        cr_assert_eq(llm_qmix_type(LLM_QMIX_Q3_K_M, o, l, 30, 0, 576), LLM_TYPE_Q4_K);
        cr_assert_eq(llm_qmix_type(LLM_QMIX_Q3_K_M, q, l, 30, 0, 576), LLM_TYPE_Q3_K);
        cr_assert_eq(llm_qmix_type(LLM_QMIX_Q3_K_L, v, l, 30, 0, 576), LLM_TYPE_Q5_K);
        cr_assert_eq(llm_qmix_type(LLM_QMIX_Q3_K_L, o, l, 30, 0, 576), LLM_TYPE_Q5_K);
        cr_assert_eq(llm_qmix_type(LLM_QMIX_Q3_K_L, q, l, 30, 0, 576), LLM_TYPE_Q3_K);
        cr_assert_eq(llm_qmix_type(LLM_QMIX_Q3_K_S, v, l, 30, 0, 576), LLM_TYPE_Q3_K);
        cr_assert_eq(llm_qmix_type(LLM_QMIX_Q3_K_S, d, l, 30, 0, 1536), LLM_TYPE_Q3_K);
    }
    /* a fused qkv: q4_k under q3_k_m and q3_k_l, q5_k under q4_k_m */
    cr_assert_eq(llm_qmix_type(LLM_QMIX_Q3_K_M, "blk.3.attn_qkv.weight", 3, 30, 0, 3072), LLM_TYPE_Q4_K);
    cr_assert_eq(llm_qmix_type(LLM_QMIX_Q3_K_S, "blk.3.attn_qkv.weight", 3, 30, 0, 3072), LLM_TYPE_Q3_K);
    cr_assert_eq(llm_qmix_type(LLM_QMIX_Q4_K_M, "blk.3.attn_qkv.weight", 3, 30, 0, 3072), LLM_TYPE_Q5_K);
    /* the head: q6_k, or q8_0 outright when 256 does not divide its rows */
    cr_assert_eq(llm_qmix_type(LLM_QMIX_Q4_K_M, "output.weight", -1, 30, 1, 4096), LLM_TYPE_Q6_K);
    cr_assert_eq(llm_qmix_type(LLM_QMIX_Q4_K_M, "token_embd.weight", -1, 30, 1, 576), LLM_TYPE_Q8_0);
    cr_assert_eq(llm_qmix_type(LLM_QMIX_Q4_K_M, "token_embd.weight", -1, 30, 0, 576), LLM_TYPE_Q4_K);
    /* fallbacks: llama.cpp's table, f16 past 32 */
    cr_assert_eq(llm_q_fallback(LLM_TYPE_Q4_K, 576), LLM_TYPE_Q5_0);
    cr_assert_eq(llm_q_fallback(LLM_TYPE_Q5_K, 576), LLM_TYPE_Q5_1);
    cr_assert_eq(llm_q_fallback(LLM_TYPE_Q6_K, 576), LLM_TYPE_Q8_0);
    cr_assert_eq(llm_q_fallback(LLM_TYPE_Q2_K, 576), LLM_TYPE_IQ4_NL);
    cr_assert_eq(llm_q_fallback(LLM_TYPE_Q3_K, 576), LLM_TYPE_IQ4_NL);
    cr_assert_eq(llm_q_fallback(LLM_TYPE_IQ4_XS, 576), LLM_TYPE_IQ4_NL);
    cr_assert_eq(llm_q_fallback(LLM_TYPE_Q4_K, 1536), LLM_TYPE_Q4_K);
    cr_assert_eq(llm_q_fallback(LLM_TYPE_Q4_K, 172), LLM_TYPE_F16);
    cr_assert_eq(llm_q_fallback(LLM_TYPE_Q5_0, 172), LLM_TYPE_F16);
    cr_assert_eq(llm_q_fallback(LLM_TYPE_Q4_0, 172), LLM_TYPE_Q4_0); /* ours pad: not GGUF's rule */
    enum llm_qmix mx;
    cr_assert_eq(llm_qmix_parse("Q4_K_M", &mx), LLM_OK);
    cr_assert_eq(mx, LLM_QMIX_Q4_K_M);
    cr_assert_eq(llm_qmix_parse("Q3_K_M", &mx), LLM_OK);
    cr_assert_eq(mx, LLM_QMIX_Q3_K_M);
    cr_assert_eq(llm_qmix_parse("q2_k_m", &mx), LLM_E_INVALID);
    cr_assert(strstr(llm_error_detail(LLM_E_INVALID), "q3_k_l"));
}
