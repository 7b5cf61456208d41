/* fuzz_bench.c: the parsers of llm-bench (YAML suites, result files read
 * back by --compare, the prompt files of --draft and --lookup). The first
 * byte picks the parser. */
#include <stddef.h>
#include <stdint.h>

#include "../../lib/bench/bench.h"
#include "../../lib/common/alloc.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    const char *text = (const char *)data + 1;
    size_t len = size - 1;
    if (data[0] & 1) {
        struct llm_bench_plan p;
        llm_bench_plan_init(&p);
        llm_bench_suite_parse(&p, text, len, "fuzz.yaml");
        llm_bench_plan_release(&p);
        return 0;
    }
    if (data[0] & 2) {
        char **v;
        int32_t n;
        if (llm_spec_prompts_parse(&v, &n, text, len, "fuzz.txt") != LLM_OK)
            return 0;
        for (int32_t i = 0; i < n; i++)
            if (!v[i][0]) /* empty lines are skipped, never prompts */
                __builtin_trap();
        llm_spec_prompts_free(v, n);
        return 0;
    }
    struct llm_bench_row *rows;
    size_t n, nc;
    if (llm_bench_rows_parse(&rows, &n, text, len, "fuzz.jsonl") != LLM_OK)
        return 0;
    struct llm_bench_cmp *c = llm_malloc(2 * n * sizeof *c);
    if (c)
        llm_bench_compare(c, &nc, rows, n, rows, n, 5.0);
    llm_free(c);
    llm_free(rows);
    return 0;
}
