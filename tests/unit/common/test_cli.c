/* test_cli.c: number parsing used by every tool's options. */
#include <limits.h>

#include "../../../lib/common/cli.h"
#include "../helpers.h"

Test(cli, integers)
{
    int64_t v;
    cr_assert_eq(llm_parse_i64("42", 0, 100, "-n", &v), LLM_OK);
    cr_assert_eq(v, 42);
    cr_assert_eq(llm_parse_i64("0x10", 0, 100, "-n", &v), LLM_OK);
    cr_assert_eq(v, 16);
    cr_assert_eq(llm_parse_i64("101", 0, 100, "-n", &v), LLM_E_INVALID);
    cr_assert(strstr(llm_error_detail(LLM_E_INVALID), "out of range"));
    cr_assert_eq(llm_parse_i64("4x", 0, 100, "-n", &v), LLM_E_INVALID);
    cr_assert_eq(llm_parse_i64("", 0, 100, "-n", &v), LLM_E_INVALID);
    cr_assert_eq(llm_parse_i64("99999999999999999999", 0, INT64_MAX, "-n", &v), LLM_E_INVALID);
}

Test(cli, floats)
{
    double d;
    cr_assert_eq(llm_parse_f64("0.5", 0, 1, "--temp", &d), LLM_OK);
    cr_assert_eq(d, 0.5);
    cr_assert_eq(llm_parse_f64("nan", 0, 1, "--temp", &d), LLM_E_INVALID);
    cr_assert_eq(llm_parse_f64("2", 0, 1, "--temp", &d), LLM_E_INVALID);
}

Test(cli, sizes)
{
    uint64_t v;
    cr_assert_eq(llm_parse_size("80G", "--mem", &v), LLM_OK);
    cr_assert_eq(v, 80ull << 30);
    cr_assert_eq(llm_parse_size("512MiB", "--mem", &v), LLM_OK);
    cr_assert_eq(v, 512ull << 20);
    cr_assert_eq(llm_parse_size("1.5k", "--mem", &v), LLM_OK);
    cr_assert_eq(v, 1536);
    cr_assert_eq(llm_parse_size("12", "--mem", &v), LLM_OK);
    cr_assert_eq(v, 12);
    cr_assert_eq(llm_parse_size("-1G", "--mem", &v), LLM_E_INVALID);
    cr_assert_eq(llm_parse_size("5X", "--mem", &v), LLM_E_INVALID);
}
