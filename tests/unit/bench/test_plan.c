/* test_plan.c: comma lists, pg pairs and YAML suites of llm-bench. */
#include <string.h>

#include "../../../lib/bench/bench.h"
#include "../helpers.h"

static void list_is(const char *s, const int64_t *want, size_t n)
{
    int64_t v[64];
    size_t got;
    cr_assert_eq(llm_bench_parse_list(s, "-p", 1, 100000, v, 64, &got), LLM_OK, "%s: %s", s,
                 llm_error_detail(-1));
    cr_assert_eq(got, n, "%s: %zu values", s, got);
    for (size_t i = 0; i < n; i++)
        cr_assert_eq(v[i], want[i], "%s: value %zu", s, i);
}

Test(plan, lists)
{
    list_is("512", (int64_t[]){ 512 }, 1);
    list_is("128,512", (int64_t[]){ 128, 512 }, 2);
    list_is("1-4", (int64_t[]){ 1, 2, 3, 4 }, 4);
    list_is("1-8+3", (int64_t[]){ 1, 4, 7 }, 3);
    list_is("1-16*2", (int64_t[]){ 1, 2, 4, 8, 16 }, 5);
    list_is("64,1-3,100-300*2", (int64_t[]){ 64, 1, 2, 3, 100, 200 }, 6);
}

Test(plan, bad_lists)
{
    const char *bad[] = { "", "a", "4-1", "1,,2", "1,", "1-8*1", "1-8+0", "-3", "1-", "1-3+", "2 ", "0",
                          "100001" };
    int64_t v[64];
    size_t n;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cr_assert_eq(llm_bench_parse_list(bad[i], "-p", 1, 100000, v, 64, &n), LLM_E_INVALID, "'%s'", bad[i]);
        cr_assert(strncmp(llm_error_detail(LLM_E_INVALID), "-p: ", 4) == 0, "%s", llm_error_detail(-1));
    }
    cr_assert_eq(llm_bench_parse_list("1-100", "-t", 1, 1000, v, 64, &n), LLM_E_INVALID);
    cr_assert(strstr(llm_error_detail(LLM_E_INVALID), "more than 64 values"));
}

Test(plan, tests_and_pg)
{
    struct llm_bench_plan p;
    llm_bench_plan_init(&p);
    cr_assert_eq(p.reps, 5);
    cr_assert_eq(p.warmup, 1);
    cr_assert_eq(llm_bench_plan_add(&p, 0, (int64_t[]){ 128, 512 }, 2), LLM_OK);
    cr_assert_eq(llm_bench_plan_add(&p, 1, (int64_t[]){ 64 }, 1), LLM_OK);
    cr_assert_eq(llm_bench_plan_add_pg(&p, "512,128"), LLM_OK);
    cr_assert_eq(p.n_tests, 4);
    cr_assert_eq(p.tests[0].n_prompt, 128);
    cr_assert_eq(p.tests[0].n_gen, 0);
    cr_assert_eq(p.tests[2].n_prompt, 0);
    cr_assert_eq(p.tests[2].n_gen, 64);
    cr_assert_eq(p.tests[3].n_prompt, 512);
    cr_assert_eq(p.tests[3].n_gen, 128);
    cr_assert_eq(llm_bench_plan_add_pg(&p, "512"), LLM_E_INVALID);
    cr_assert_eq(llm_bench_plan_add_pg(&p, "1-3,4"), LLM_E_INVALID);
    cr_assert_eq(llm_bench_plan_add_pg(&p, "1,2,3"), LLM_E_INVALID);
    cr_assert(strstr(llm_error_detail(LLM_E_INVALID), "'1,2,3' is not PROMPT,GEN"));
    llm_bench_plan_release(&p);
}

Test(plan, suite)
{
    const char *y = "# a sweep\n"
                    "models: [a.llm, /m/b.llm]\n"
                    "prompt: [128, 512]\n"
                    "gen: \"16-64*2\"\n"
                    "pg:\n  - \"256,32\"\n"
                    "threads: 2\n"
                    "repetitions: 3\n"
                    "warmup: 0\n"
                    "output: jsonl\n";
    struct llm_bench_plan p;
    llm_bench_plan_init(&p);
    cr_assert_eq(llm_bench_suite_parse(&p, y, strlen(y), "s.yaml"), LLM_OK, "%s", llm_error_detail(-1));
    cr_assert_eq(p.n_models, 2);
    cr_assert_str_eq(p.models[1], "/m/b.llm");
    cr_assert_eq(p.n_tests, 6); /* pp128 pp512 tg16 tg32 tg64 pp256+tg32 */
    cr_assert_eq(p.tests[4].n_gen, 64);
    cr_assert_eq(p.tests[5].n_prompt, 256);
    cr_assert_eq(p.n_threads, 1);
    cr_assert_eq(p.threads[0], 2);
    cr_assert_eq(p.reps, 3);
    cr_assert_eq(p.warmup, 0);
    cr_assert_eq(p.have_format, 1);
    cr_assert_eq(p.format, LLM_BENCH_JSONL);
    llm_bench_plan_release(&p);
}

static void suite_fails(const char *y, const char *want)
{
    struct llm_bench_plan p;
    llm_bench_plan_init(&p);
    llm_status s = llm_bench_suite_parse(&p, y, strlen(y), "s.yaml");
    cr_assert_eq(s, LLM_E_FORMAT, "%s", y);
    cr_assert(strstr(llm_error_detail(s), want), "'%s' lacks '%s'", llm_error_detail(s), want);
    llm_bench_plan_release(&p);
}

Test(plan, suite_errors_name_file_and_line)
{
    suite_fails("models: [a]\nprompt: [1]\nthreds: [2]\n", "s.yaml:3: unknown key 'threds'");
    suite_fails("models: [a]\nprompt: [1]\nthreads: [1, x]\n", "s.yaml:3: 'threads' item 2 is not an integer");
    suite_fails("models: [a]\n\nprompt: [1, 0]\n", "s.yaml:3: 'prompt' item 2: 0 is outside");
    suite_fails("models: [a]\nprompt: [1]\nrepetitions: 0\n", "s.yaml:3: 'repetitions' must be an integer");
    suite_fails("models: [a]\nprompt: [1]\noutput: xml\n", "s.yaml:3: 'output' must be md, csv");
    suite_fails("models: [a]\nprompt: \"1,,2\"\n", "s.yaml:2: 'prompt'");
    suite_fails("models: [a]\npg: [\"12\"]\n", "s.yaml:2: pg: '12' is not PROMPT,GEN");
    suite_fails("models: [a, 3]\nprompt: [1]\n", "s.yaml:1: 'models' item 2 is not a non-empty string");
    suite_fails("prompt: [1]\n", "s.yaml: no 'models'");
    suite_fails("models: [a]\n", "s.yaml: no tests");
    suite_fails("models: [a]\nprompt: [1\n", "s.yaml:");
    suite_fails("- a\n- b\n", "s.yaml");
}

Test(plan, suite_file_missing)
{
    struct llm_bench_plan p;
    llm_bench_plan_init(&p);
    cr_assert_eq(llm_bench_suite_load(&p, "/nonexistent/s.yaml"), LLM_E_IO);
    cr_assert(strstr(llm_error_detail(LLM_E_IO), "/nonexistent/s.yaml"));
}
