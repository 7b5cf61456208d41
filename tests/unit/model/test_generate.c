/* Tests of the generation loop: a prompt fed in slices gives the same
 * numbers as one call, Ctrl-C (the interrupt flag) is seen before the
 * prefill and between tokens, and a full context ends generation with
 * stop reason "context" after n_ctx - n_prompt + 1 tokens. */
#include <criterion/criterion.h>
#include <string.h>

#include "../../../lib/llm.h"
#include "../helpers.h"

#define TOPK 8
struct capture {
    int32_t n, top_ids[TOPK];
    float top_lp[TOPK];
    volatile sig_atomic_t *flag;
    int32_t stop_after; /* raise *flag after this many tokens */
    size_t text_bytes;
};

static llm_status on_token(void *ctx, int32_t seq, const struct llm_gen_token *t)
{
    struct capture *c = ctx;
    cr_assert_eq(seq, 0);
    if (c->n++ == 0 && t->n_top) {
        cr_assert_eq(t->n_top, TOPK);
        memcpy(c->top_ids, t->top_ids, sizeof c->top_ids);
        memcpy(c->top_lp, t->top_lp, sizeof c->top_lp);
    }
    if (c->flag && c->n == c->stop_after)
        *c->flag = 1;
    return LLM_OK;
}

static llm_status on_text(void *ctx, int32_t seq, const char *b, size_t n)
{
    (void)b;
    cr_assert_eq(seq, 0);
    ((struct capture *)ctx)->text_bytes += n;
    return LLM_OK;
}

/* 1100 prompt tokens go in three slices; the first token's distribution must
 * be bit-identical to one llm_decode call over the whole prompt. */
Test(generate, prefill_in_slices_matches_one_call)
{
    TEST_DATA(txt, "text/tinystories_val.txt");
    struct llm_model *m = llm_test_model("gguf/stories260K.gguf", 1);
    if (!m)
        cr_skip_test("gguf/stories260K.gguf is absent");
    char *text;
    size_t len, n;
    int32_t *ids;
    cr_assert_eq(llm_read_file(txt, 1 << 24, &text, &len), LLM_OK);
    cr_assert_eq(llm_tokenize(llm_model_tokenizer(m), text, len > 20000 ? 20000 : len,
                              LLM_TOK_ADD_BOS, &ids, &n), LLM_OK);
    cr_assert_gt(n, 1100);
    n = 1100;
    struct llm_context *c;
    struct llm_context_params cp;
    llm_context_params_default(&cp);
    cp.n_ctx = 1200;
    cr_assert_eq(llm_context_new(&c, m, &cp), LLM_OK);
    struct llm_gen_params gp;
    llm_gen_params_default(&gp);
    gp.sp.temp = 0;
    gp.n_predict = 1;
    gp.top_logprobs = TOPK;
    struct capture cap = { 0 };
    struct llm_gen_callbacks cb = { on_text, on_token, &cap };
    struct llm_gen_result r;
    cr_assert_eq(llm_generate(c, ids, n, &gp, &cb, &r), LLM_OK);
    cr_assert_eq(r.n_prompt, 1100);
    cr_assert_eq(r.n_gen, 1);
    int32_t nv = llm_model_config(m)->n_vocab, want_ids[TOPK];
    float *logits = malloc(sizeof(float) * (size_t)nv), want_lp[TOPK];
    llm_context_reset(c, 0);
    cr_assert_eq(llm_decode(c, 0, ids, (int32_t)n, 0, logits, 0), LLM_OK);
    cr_assert_eq(llm_top_logprobs(logits, nv, TOPK, want_ids, want_lp), TOPK);
    for (int i = 0; i < TOPK; i++) {
        cr_assert_eq(cap.top_ids[i], want_ids[i], "rank %d", i);
        cr_assert(cap.top_lp[i] == want_lp[i], "rank %d: %.9g vs %.9g", i, (double)cap.top_lp[i],
                  (double)want_lp[i]);
    }
    free(logits);
    llm_free(ids);
    llm_free(text);
    llm_context_free(c);
    llm_model_close(m);
}

Test(generate, interrupt_before_prefill_and_between_tokens)
{
    struct llm_model *m = llm_test_model("gguf/stories260K.gguf", 1);
    if (!m)
        cr_skip_test("gguf/stories260K.gguf is absent");
    struct llm_context *c;
    cr_assert_eq(llm_context_new(&c, m, NULL), LLM_OK);
    volatile sig_atomic_t flag = 1;
    int32_t bos = 1;
    struct llm_gen_params gp;
    llm_gen_params_default(&gp);
    gp.sp.temp = 0;
    gp.n_predict = 50;
    gp.interrupt = &flag;
    struct capture cap = { 0 };
    struct llm_gen_callbacks cb = { on_text, on_token, &cap };
    struct llm_gen_result r;
    cr_assert_eq(llm_generate(c, &bos, 1, &gp, &cb, &r), LLM_OK);
    cr_assert_str_eq(r.stop_reason, "interrupted");
    cr_assert_eq(r.n_prompt, 0);
    cr_assert_eq(r.n_gen, 0);
    cr_assert_eq(cap.n, 0);
    cr_assert_eq(cap.text_bytes, 0);
    /* raised while the third token is handled: that token is the last */
    flag = 0;
    cap = (struct capture){ .flag = &flag, .stop_after = 3 };
    cr_assert_eq(llm_generate(c, &bos, 1, &gp, &cb, &r), LLM_OK);
    cr_assert_str_eq(r.stop_reason, "interrupted");
    cr_assert_eq(r.n_gen, 3);
    cr_assert_gt(cap.text_bytes, 0);
    llm_context_free(c);
    llm_model_close(m);
}

Test(generate, full_context_stops_with_reason_context)
{
    struct llm_model *m = llm_test_model("gguf/stories260K.gguf", 1);
    if (!m)
        cr_skip_test("gguf/stories260K.gguf is absent");
    struct llm_context *c;
    struct llm_context_params cp;
    llm_context_params_default(&cp);
    cp.n_ctx = 16;
    cr_assert_eq(llm_context_new(&c, m, &cp), LLM_OK);
    int32_t prompt[17] = { 1, 403, 407 }; /* the rest: token 0, for the too-long case */
    struct llm_gen_params gp;
    llm_gen_params_default(&gp);
    gp.sp.temp = 0;
    gp.ignore_eos = 1;
    struct capture cap = { 0 };
    struct llm_gen_callbacks cb = { on_text, on_token, &cap };
    struct llm_gen_result r;
    cr_assert_eq(llm_generate(c, prompt, 3, &gp, &cb, &r), LLM_OK);
    cr_assert_str_eq(r.stop_reason, "context");
    /* 13 positions after the prompt, and the last sampled token needs none */
    cr_assert_eq(r.n_gen, 14);
    /* exactly that many asked for: the length limit, not the context */
    gp.n_predict = 14;
    cr_assert_eq(llm_generate(c, prompt, 3, &gp, &cb, &r), LLM_OK);
    cr_assert_str_eq(r.stop_reason, "length");
    cr_assert_eq(llm_generate(c, prompt, 17, &gp, &cb, &r), LLM_E_INVALID);
    llm_context_free(c);
    llm_model_close(m);
}
