/* Tests of llm-bench's speculative decoding test: the prompt file reader
 * and a run on stories260K (the draft is the model itself, so every draft
 * is kept and the texts, checked equal by the run, are greedy decoding's). */
#include <criterion/criterion.h>
#include <string.h>

#include "../../../lib/llm.h"
#include "../helpers.h"

Test(bench_spec, prompts_one_per_line_with_escapes)
{
    const char t[] = "first\\nline two\n\n  \nback\\\\slash\r\nlast";
    char **v;
    int32_t n;
    cr_assert_eq(llm_spec_prompts_parse(&v, &n, t, strlen(t), "p.txt"), LLM_OK);
    cr_assert_eq(n, 4);
    cr_assert_str_eq(v[0], "first\nline two");
    cr_assert_str_eq(v[1], "  ");
    cr_assert_str_eq(v[2], "back\\slash");
    cr_assert_str_eq(v[3], "last");
    llm_spec_prompts_free(v, n);
}

Test(bench_spec, bad_prompt_files_are_named_with_the_line)
{
    char **v;
    int32_t n;
    const char a[] = "ok\nbad \\t escape\n";
    cr_assert_eq(llm_spec_prompts_parse(&v, &n, a, strlen(a), "p.txt"), LLM_E_FORMAT);
    cr_assert_str_eq(llm_error_detail(LLM_E_FORMAT), "p.txt:2: '\\t' is not an escape (\\n or \\\\)");
    const char b[] = "\n\n";
    cr_assert_eq(llm_spec_prompts_parse(&v, &n, b, strlen(b), "p.txt"), LLM_E_FORMAT);
    cr_assert(strstr(llm_error_detail(LLM_E_FORMAT), "no prompt"));
    const char c[] = "a\0b";
    cr_assert_eq(llm_spec_prompts_parse(&v, &n, c, 3, "p.txt"), LLM_E_FORMAT);
    cr_assert(strstr(llm_error_detail(LLM_E_FORMAT), "p.txt:1: a NUL byte"));
}

Test(bench_spec, stories260k_drafting_itself_keeps_every_draft)
{
    TEST_DATA(path, "gguf/stories260K.gguf");
    struct llm_model *m, *dm;
    cr_assert_eq(llm_model_open(&m, path, NULL), LLM_OK);
    cr_assert_eq(llm_model_open(&dm, path, NULL), LLM_OK);
    struct llm_spec_bench_params p;
    llm_spec_bench_params_default(&p);
    p.draft = path;
    p.spec.draft_n = 4;
    p.n_gen = 40;
    p.reps = 2;
    char a[] = "Once upon a time", b[] = "Lily and Tom";
    char *prompts[] = { a, b };
    struct llm_spec_result r;
    llm_status s = llm_bench_spec(&r, m, path, dm, &p, prompts, 2, 1);
    cr_assert_eq(s, LLM_OK, "%s", llm_error_detail(s));
    cr_assert_eq(r.n_prompts, 2);
    cr_assert_eq(r.tokens, 80); /* stories260K writes on past 40 tokens */
    cr_assert_eq(r.accepted, r.drafted);
    /* each prompt: rounds of 4 drafts and the bonus (5 tokens; the first
     * round's first draft is checked by the prompt's logits), 8 passes */
    cr_assert_eq(r.drafted, 2 * 8 * 4);
    cr_assert_eq(r.passes, 2 * 8);
    cr_assert_eq(r.plain_ts.n, 2);
    /* the median of the two passes' ratios lies between the extreme
     * pairings of their speeds */
    cr_assert_gt(r.speedup, 0);
    cr_assert_geq(r.speedup, r.spec_ts.min / r.plain_ts.max * (1 - 1e-12));
    cr_assert_leq(r.speedup, r.spec_ts.max / r.plain_ts.min * (1 + 1e-12));
    cr_assert_str_eq(r.draft, path);
    llm_model_close(dm);
    llm_model_close(m);
}
