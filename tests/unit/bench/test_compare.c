/* test_compare.c: --compare with a planted regression, results files read
 * back in both JSON forms, and malformed files. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "../../../lib/bench/bench.h"
#include "../../../lib/common/alloc.h"
#include "../helpers.h"

static const char *write_tmp(const char *name, const char *text)
{
    static char path[4][512];
    static int k;
    char *p = path[k++ & 3];
    snprintf(p, sizeof path[0], "%s/%s", llm_test_tmpdir(), name);
    FILE *f = fopen(p, "w");
    cr_assert_not_null(f);
    fputs(text, f);
    fclose(f);
    return p;
}

#define ROW(model, test, th, ts) \
    "{\"model_filename\": \"" model "\", \"test\": \"" test "\", \"n_threads\": " #th ", \"avg_ts\": " #ts "}"

Test(compare, planted_regression)
{
    const char *old = write_tmp("old.jsonl", ROW("/a/m.llm", "pp128", 1, 100) "\n" ROW("/a/m.llm", "tg32", 1, 50)
                                             "\n\n" ROW("/a/m.llm", "tg32", 2, 90) "\n" ROW("/a/m.llm", "pp512", 1, 10) "\n");
    /* pp128 -20% (planted), tg32 t1 -3% (noise), tg32 t2 +10%, pp512 gone, tg64 new;
     * the new run was made from another directory */
    const char *new_ = write_tmp("new.json", "[" ROW("m.llm", "pp128", 1, 80) ",\n" ROW("/b/m.llm", "tg32", 1, 48.5)
                                             ",\n" ROW("/b/m.llm", "tg32", 2, 99) "," ROW("/b/m.llm", "tg64", 1, 40) "]\n");
    struct llm_bench_row *o, *n;
    size_t no, nn, nc;
    cr_assert_eq(llm_bench_rows_load(&o, &no, old), LLM_OK, "%s", llm_error_detail(-1));
    cr_assert_eq(llm_bench_rows_load(&n, &nn, new_), LLM_OK, "%s", llm_error_detail(-1));
    cr_assert_eq(no, 4);
    cr_assert_eq(nn, 4);
    cr_assert_str_eq(o[0].key, "m.llm | pp128 | t1");
    struct llm_bench_cmp c[8];
    cr_assert_eq(llm_bench_compare(c, &nc, o, no, n, nn, 5.0), 1);
    cr_assert_eq(nc, 5);
    cr_assert_float_eq(c[0].change_pct, -20.0, 1e-9);
    cr_assert_eq(c[0].regression, 1);
    cr_assert_float_eq(c[1].change_pct, -3.0, 1e-9);
    cr_assert_eq(c[1].regression, 0);
    cr_assert_float_eq(c[2].change_pct, 10.0, 1e-9);
    cr_assert(isnan(c[3].new_ts) && !c[3].regression, "pp512 is missing, not a regression");
    cr_assert(isnan(c[4].old_ts));
    cr_assert_str_eq(c[4].key, "m.llm | tg64 | t1");
    /* a looser threshold lets the planted regression through, a tighter one catches the noise too */
    cr_assert_eq(llm_bench_compare(c, &nc, o, no, n, nn, 25.0), 0);
    cr_assert_eq(llm_bench_compare(c, &nc, o, no, n, nn, 2.0), 2);

    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    llm_bench_compare(c, &nc, o, no, n, nn, 5.0);
    cr_assert_eq(llm_bench_compare_print(f, c, nc, 5.0), LLM_OK);
    fclose(f);
    cr_assert(strstr(buf, "| m.llm | pp128 | 1 | 100.00 | 80.00 | -20.00% | REGRESSION |"), "%s", buf);
    cr_assert(strstr(buf, "| m.llm | tg32 | 2 | 90.00 | 99.00 | +10.00% | ok |"), "%s", buf);
    cr_assert(strstr(buf, "| m.llm | pp512 | 1 | 10.00 | - | - | missing |"), "%s", buf);
    cr_assert(strstr(buf, "| m.llm | tg64 | 1 | - | 40.00 | - | new |"), "%s", buf);
    cr_assert(strstr(buf, "1 regression beyond 5%"), "%s", buf);
    free(buf);
    llm_free(o);
    llm_free(n);
}

static void load_fails(const char *text, const char *want)
{
    const char *p = write_tmp("bad.jsonl", text);
    struct llm_bench_row *r;
    size_t n;
    llm_status s = llm_bench_rows_load(&r, &n, p);
    cr_assert_eq(s, LLM_E_FORMAT, "%s", text);
    const char *d = llm_error_detail(s);
    cr_assert(strncmp(d, p, strlen(p)) == 0 && strstr(d, want), "'%s' lacks '%s'", d, want);
}

Test(compare, bad_files)
{
    load_fails(ROW("m", "pp1", 1, 5) "\n{\"model_filename\": \n", ":2: not valid JSON");
    load_fails(ROW("m", "pp1", 1, 5) "\n[1]\n", ":2: not a JSON object");
    load_fails("{\"test\": \"pp1\", \"n_threads\": 1, \"avg_ts\": 1}\n", ":1: no string 'model_filename'");
    load_fails("{\"model_filename\": \"m\", \"test\": \"pp1\", \"n_threads\": 1, \"avg_ts\": \"x\"}\n",
               "no non-negative number 'avg_ts'");
    load_fails(ROW("m", "pp1", 1, 5) "\n" ROW("m", "pp1", 1, 6) "\n", ":2: duplicate result 'm | pp1 | t1'");
    load_fails("[" ROW("m", "pp1", 1, 5) ", 7]", ": result 2: not a JSON object");
    load_fails("[1, 2", "not valid JSON");
    load_fails("\n\n", "no results");
}
