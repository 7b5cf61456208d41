/* test_arch.c: each architecture against Hugging Face transformers.
 *
 * tests/unit/model/ref/NAME.yaml is a small shape of the architecture;
 * NAME.txt holds what transformers computed on the same random weights
 * (scripts/ref-transformers.py: our generator's model, loaded into the
 * transformers class of the architecture): the logits of a 24-token prompt
 * and 8 greedy tokens after it. The test rebuilds the model with the same
 * generator, so CI needs no Python. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../../lib/llm.h"
#include "../../../lib/model/kvstate.h"
#include "../helpers.h"

#define N_PROMPT 24
#define N_GEN 8

struct ref {
    int32_t prompt[N_PROMPT], greedy[N_GEN];
    float *logits; /* (N_PROMPT, n_vocab) */
};

static void read_ids(FILE *fp, const char *word, int32_t *ids, int n, const char *path)
{
    char w[16];
    cr_assert_eq(fscanf(fp, "%15s", w), 1, "%s: truncated", path);
    cr_assert_str_eq(w, word, "%s: expected '%s'", path, word);
    for (int i = 0; i < n; i++)
        cr_assert_eq(fscanf(fp, "%d", &ids[i]), 1, "%s: %s id %d", path, word, i);
}

/* A reference file, past its '#' comment lines. */
static FILE *open_ref(const char *path)
{
    FILE *fp = fopen(path, "r");
    cr_assert(fp, "%s: cannot open", path);
    int c;
    while ((c = fgetc(fp)) == '#')
        while ((c = fgetc(fp)) != '\n' && c != EOF)
            ;
    ungetc(c, fp);
    return fp;
}

static void read_ref(const char *path, int32_t n_vocab, struct ref *r)
{
    FILE *fp = open_ref(path);
    int c;
    read_ids(fp, "prompt", r->prompt, N_PROMPT, path);
    read_ids(fp, "greedy", r->greedy, N_GEN, path);
    r->logits = malloc(sizeof(float) * N_PROMPT * (size_t)n_vocab);
    for (int i = 0; i < N_PROMPT * n_vocab; i++)
        cr_assert_eq(fscanf(fp, "%f", &r->logits[i]), 1, "%s: logit %d", path, i);
    cr_assert_eq(fscanf(fp, "%d", &c), EOF, "%s: more logits than the vocabulary", path);
    fclose(fp);
}

/* max |ours - transformers| / max |transformers| over the prompt's logits,
 * and the greedy tokens; `key` (when not NULL) set to 0 first: a feature
 * taken away, the check that the test can fail. */
static double run(const char *name, const char *key, int32_t *greedy)
{
    char path[256];
    snprintf(path, sizeof path, "tests/unit/model/ref/%s.yaml", name);
    struct llm_file *f;
    llm_status s = llm_synthetic(&f, path, LLM_TYPE_F32, 7);
    cr_assert_eq(s, LLM_OK, "%s", llm_error_detail(s));
    llm_test_scale_weights(f, 12.0f);
    if (key) /* a flag (expert_weights_norm) to false, a number to 0 */
        cr_assert_eq(strstr(key, "_norm") ? llm_meta_set_bool(f->meta, key, 0)
                                          : llm_meta_set_i64(f->meta, key, 0),
                     LLM_OK);
    struct llm_model *m;
    struct llm_model_params mp;
    llm_model_params_default(&mp);
    mp.n_threads = 2;
    s = llm_model_from_file(&m, f, &mp);
    cr_assert_eq(s, LLM_OK, "%s", llm_error_detail(s));
    const int32_t V = llm_model_config(m)->n_vocab;
    struct ref r;
    snprintf(path, sizeof path, "tests/unit/model/ref/%s.txt", name);
    read_ref(path, V, &r);
    struct llm_context *c;
    struct llm_context_params cp;
    llm_context_params_default(&cp);
    cp.n_ctx = 64;
    cp.block_size = 4;
    cp.kv_type_k = cp.kv_type_v = LLM_TYPE_F32;
    cr_assert_eq(llm_context_new(&c, m, &cp), LLM_OK);
    float *lg = malloc(sizeof(float) * N_PROMPT * (size_t)V);
    cr_assert_eq(llm_decode(c, 0, r.prompt, 10, 0, lg, 1), LLM_OK);
    cr_assert_eq(llm_decode(c, 0, r.prompt + 10, N_PROMPT - 10, 10, lg + 10 * V, 1), LLM_OK);
    double err = 0, norm = 0;
    for (int i = 0; i < N_PROMPT * V; i++) {
        err = fmax(err, fabs((double)lg[i] - r.logits[i]));
        norm = fmax(norm, fabs((double)r.logits[i]));
    }
    int32_t t = (int32_t)llm_argmax(lg + (N_PROMPT - 1) * V, V);
    for (int i = 0; i < N_GEN; i++) {
        greedy[i] = t;
        cr_assert_eq(llm_decode(c, 0, &t, 1, N_PROMPT + i, lg, 0), LLM_OK);
        t = (int32_t)llm_argmax(lg, V);
    }
    for (int i = 0; !key && i < N_GEN; i++)
        cr_assert_eq(greedy[i], r.greedy[i], "%s: greedy token %d is %d, transformers %d", name,
                     i, greedy[i], r.greedy[i]);
    free(lg);
    free(r.logits);
    llm_context_free(c);
    llm_model_close(m);
    return err / norm;
}

/* float32 on both sides, summed in other orders: we see 0.4-3.8e-6 of the
 * largest logit */
#define TOL 1e-5

/* The shape `name` matches transformers (and its greedy tokens, in run). */
static void expect_match(const char *name)
{
    int32_t g[N_GEN];
    double e = run(name, NULL, g);
    cr_assert(e <= TOL, "%s: relative error %g", name, e);
}

/* Without `key` (set to 0) the same weights are far from transformers':
 * the test can fail. */
static void expect_far_without(const char *name, const char *key)
{
    int32_t g[N_GEN];
    double e = run(name, key, g);
    cr_assert(e > 100 * TOL, "%s without %s: relative error %g", name, key, e);
}

Test(arch, mistral_sliding_window_matches_transformers)
{
    expect_match("mistral-swa");
    expect_far_without("mistral-swa", "hparams.sliding_window");
}

Test(arch, qwen3_matches_transformers) { expect_match("qwen3"); }
Test(arch, qwen2_matches_transformers) { expect_match("qwen2"); }
Test(arch, gemma2_26_layers_matches_transformers) { expect_match("gemma2-26"); }

Test(arch, gemma3_matches_transformers)
{
    expect_match("gemma3");
    expect_far_without("gemma3", "hparams.sliding_window"); /* its local layers made global */
}

Test(arch, gemma2_matches_transformers)
{
    expect_match("gemma2");
    expect_far_without("gemma2", "hparams.sliding_window");
    expect_far_without("gemma2", "hparams.attn_softcap");
    expect_far_without("gemma2", "hparams.final_softcap");
}

/* transformers read the fused tensors of our GGUF export (qkv_proj and
 * gate_up_proj as they are), so this checks their layout too */
Test(arch, phi3_matches_transformers)
{
    expect_match("phi3");
    expect_far_without("phi3", "hparams.sliding_window");
}

/* mixtures of experts: 4, 6 and 8 experts, 2 or 3 per token, the weights
 * renormalized or not, qwen2moe's shared expert */
Test(arch, mixtral_qwen2moe_qwen3moe_match_transformers)
{
    expect_match("mixtral");
    expect_match("qwen2moe");
    expect_match("qwen3moe");
    /* renormalizing the chosen experts' weights or not matters */
    expect_far_without("qwen3moe", "hparams.expert_weights_norm");
}

/* LongRoPE with its long factors: the context (64) and transformers'
 * text (24) are both past the original length (16) */
Test(arch, phi3_longrope_matches_transformers) { expect_match("phi3-longrope"); }

/* A context no longer than the original length takes the short factors,
 * and its states are not another context's */
Test(arch, longrope_short_context_takes_the_short_factors)
{
    struct llm_file *f;
    cr_assert_eq(llm_synthetic(&f, "tests/unit/model/ref/phi3-longrope.yaml", LLM_TYPE_F32, 7),
                 LLM_OK);
    struct llm_model *m;
    struct llm_model_params mp;
    llm_model_params_default(&mp);
    cr_assert_eq(llm_model_from_file(&m, f, &mp), LLM_OK);
    float a[96], b[96];
    int32_t tok[10];
    uint64_t id[2];
    for (int i = 0; i < 10; i++)
        tok[i] = (i * 37 + 11) % 96;
    for (int k = 0; k < 2; k++) {
        struct llm_context *c;
        struct llm_context_params cp;
        llm_context_params_default(&cp);
        cp.n_ctx = k ? 64 : 16;
        cr_assert_eq(llm_context_new(&c, m, &cp), LLM_OK);
        cr_assert_eq(llm_context_rope_long(c), k);
        cr_assert_eq(llm_decode(c, 0, tok, 10, 0, k ? b : a, 0), LLM_OK);
        struct llm_state_info in;
        cr_assert_eq(llm_kvstate_info(c, &in), LLM_OK);
        id[k] = in.model_id;
        llm_context_free(c);
    }
    cr_assert(memcmp(a, b, sizeof a), "the long factors changed nothing");
    cr_assert_neq(id[0], id[1], "a long context's states would load into a short one");
    llm_model_close(m);
}

/* llama.cpp b4748 on our GGUF export of the same weights
 * (scripts/greedy-llama-cpp.sh --save wrote NAME.llamacpp): its greedy
 * tokens are ours, for each shape it runs as the architecture defines it.
 * Not mistral-swa (b4748 reads no window for llama: its file records how
 * it differs), gemma2 (b4748 needs 26, 42 or 46 layers: gemma2-26 is its
 * shape with 26), nor the shapes that came after it. */
Test(arch, greedy_matches_llama_cpp)
{
    static const char *const names[] = { "qwen2", "gemma2-26", "phi3", "phi3-longrope",
                                         "mixtral", "qwen2moe" };
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) {
        char path[256];
        snprintf(path, sizeof path, "tests/unit/model/ref/%s.llamacpp", names[k]);
        FILE *fp = open_ref(path);
        int32_t want[N_GEN], got[N_GEN];
        read_ids(fp, "greedy", want, N_GEN, path);
        fclose(fp);
        run(names[k], NULL, got);
        for (int i = 0; i < N_GEN; i++)
            cr_assert_eq(got[i], want[i], "%s: greedy token %d is %d, llama.cpp %d", names[k], i,
                         got[i], want[i]);
    }
}
