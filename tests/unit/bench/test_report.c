/* test_report.c: the four result printers, read back with jansson (JSON),
 * by columns (CSV) and by cells (markdown). */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../../lib/bench/bench.h"
#include "../helpers.h"

static double samples_a[3] = { 1e6, 2e6, 3e6 };

static void fixture(struct llm_bench_header *h, struct llm_bench_result r[2])
{
    memset(h, 0, sizeof *h);
    memset(r, 0, 2 * sizeof *r);
    snprintf(h->machine.cpu, sizeof h->machine.cpu, "Test CPU, 2 GHz");
    snprintf(h->machine.features, sizeof h->machine.features, "avx2 fma");
    snprintf(h->machine.version, sizeof h->machine.version, "0.1.0");
    snprintf(h->machine.commit, sizeof h->machine.commit, "abc1234");
    h->machine.n_cpus = 2;
    h->bw_measured = 1;
    snprintf(h->test_time, sizeof h->test_time, "2026-11-29T10:00:00Z");
    /* pp128: 3 reps of 1, 2, 3 ms */
    snprintf(r[0].model, sizeof r[0].model, "/m/stories \"260K\", f32.llm");
    snprintf(r[0].test, sizeof r[0].test, "pp128");
    r[0].n_prompt = 128;
    r[0].n_threads = 2;
    r[0].reps = 3;
    r[0].samples_ns = samples_a;
    r[0].model_bytes = 1171200;
    r[0].n_params = 292800;
    llm_stats_compute(&r[0].ns, samples_a, 3);
    llm_stats_compute(&r[0].ts, (double[]){ 128000, 64000, 128000 / 3.0 }, 3);
    llm_stats_compute(&r[0].ttft_ms, (double[]){ 1, 2, 3 }, 3);
    r[0].roof_gbs = 20;
    r[0].roof_gflops = 100;
    r[1].roof_gbs = 30;
    r[1].roof_gflops = 200;
    r[0].gflops = 37.5;
    r[0].gflops_pct = 37.5;
    /* tg16: no TTFT */
    snprintf(r[1].model, sizeof r[1].model, "m|x.llm");
    snprintf(r[1].test, sizeof r[1].test, "tg16");
    r[1].n_gen = 16;
    r[1].n_threads = 1;
    r[1].reps = 1;
    llm_stats_compute(&r[1].ts, (double[]){ 500 }, 1);
    llm_stats_compute(&r[1].token_ms, (double[]){ 2, 2, 2, 2 }, 4);
    r[1].gbs = 5;
    r[1].gbs_pct = 25;
}

static char *print(enum llm_bench_format fmt, size_t n)
{
    struct llm_bench_header h;
    struct llm_bench_result r[2];
    fixture(&h, r);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    cr_assert_eq(llm_bench_print(f, fmt, &h, r, n), LLM_OK);
    fclose(f);
    return buf;
}

Test(report, json_fields)
{
    char *s = print(LLM_BENCH_JSON, 2);
    json_error_t err;
    json_t *a = json_loads(s, 0, &err);
    cr_assert_not_null(a, "%s\n%s", err.text, s);
    cr_assert_eq(json_array_size(a), 2);
    json_t *o = json_array_get(a, 0), *t = json_array_get(a, 1);
    cr_assert_str_eq(json_string_value(json_object_get(o, "model_filename")), "/m/stories \"260K\", f32.llm");
    cr_assert_str_eq(json_string_value(json_object_get(o, "test")), "pp128");
    cr_assert_str_eq(json_string_value(json_object_get(o, "build_commit")), "abc1234");
    cr_assert_str_eq(json_string_value(json_object_get(o, "cpu_features")), "avx2 fma");
    cr_assert_str_eq(json_string_value(json_object_get(o, "roofline_bandwidth_source")), "probe");
    cr_assert_float_eq(json_number_value(json_object_get(o, "roofline_bandwidth_gbs")), 20, 0);
    cr_assert_float_eq(json_number_value(json_object_get(t, "roofline_peak_gflops")), 200, 0);
    cr_assert_eq(json_integer_value(json_object_get(o, "n_prompt")), 128);
    cr_assert_eq(json_integer_value(json_object_get(o, "repetitions")), 3);
    cr_assert_float_eq(json_number_value(json_object_get(o, "avg_ns")), 2e6, 1e-3);
    cr_assert_float_eq(json_number_value(json_object_get(o, "stddev_ns")), 1e6, 1e-3);
    cr_assert_float_eq(json_number_value(json_object_get(o, "ttft_p50_ms")), 2, 1e-9);
    cr_assert_float_eq(json_number_value(json_object_get(o, "ttft_p90_ms")), 2.8, 1e-9);
    json_t *sm = json_object_get(o, "samples_ns");
    cr_assert_eq(json_array_size(sm), 3);
    cr_assert_float_eq(json_number_value(json_array_get(sm, 2)), 3e6, 0);
    /* what does not apply is null */
    cr_assert(json_is_null(json_object_get(o, "token_p50_ms")));
    cr_assert(json_is_null(json_object_get(o, "bandwidth_gbs")));
    cr_assert(json_is_null(json_object_get(t, "ttft_p50_ms")));
    cr_assert(json_is_null(json_object_get(t, "gflops")));
    cr_assert_float_eq(json_number_value(json_object_get(t, "bandwidth_pct")), 25, 1e-9);
    cr_assert_float_eq(json_number_value(json_object_get(t, "token_p99_ms")), 2, 1e-9);
    json_decref(a);
    free(s);
    s = print(LLM_BENCH_JSON, 0);
    cr_assert_str_eq(s, "[]\n");
    free(s);
}

Test(report, jsonl_one_object_per_line)
{
    char *s = print(LLM_BENCH_JSONL, 2);
    char *nl = strchr(s, '\n');
    cr_assert_not_null(nl);
    cr_assert_eq(strchr(nl + 1, '\n'), s + strlen(s) - 1, "two lines");
    *nl = 0;
    json_error_t err;
    json_t *o = json_loads(s, 0, &err);
    cr_assert_not_null(o, "%s", err.text);
    cr_assert_float_eq(json_number_value(json_object_get(o, "median_ts")), 64000, 1e-6);
    json_decref(o);
    o = json_loads(nl + 1, 0, &err);
    cr_assert_not_null(o, "%s", err.text);
    cr_assert_str_eq(json_string_value(json_object_get(o, "test")), "tg16");
    json_decref(o);
    free(s);
}

/* Split one CSV line (RFC 4180 quotes) into cells. */
static int csv_split(const char *line, char cells[][256], int max)
{
    int n = 0;
    const char *p = line;
    while (n < max) {
        char *c = cells[n++];
        size_t k = 0;
        if (*p == '"') {
            for (p++; *p && !(*p == '"' && p[1] != '"'); p++) {
                if (*p == '"')
                    p++;
                c[k++] = *p;
            }
            p++;
        } else
            while (*p && *p != ',' && *p != '\n')
                c[k++] = *p++;
        c[k] = 0;
        if (*p != ',')
            break;
        p++;
    }
    return n;
}

Test(report, csv)
{
    char *s = print(LLM_BENCH_CSV, 2);
    static char head[64][256], row[64][256], row2[64][256];
    char *l2 = strchr(s, '\n') + 1, *l3 = strchr(l2, '\n') + 1;
    int nh = csv_split(s, head, 64), nr = csv_split(l2, row, 64), nr2 = csv_split(l3, row2, 64);
    cr_assert_eq(nh, nr);
    cr_assert_eq(nh, nr2);
    int im = -1, it = -1, itt = -1, is = -1;
    for (int i = 0; i < nh; i++) {
        im = strcmp(head[i], "model_filename") ? im : i;
        it = strcmp(head[i], "test") ? it : i;
        itt = strcmp(head[i], "ttft_p50_ms") ? itt : i;
        is = strcmp(head[i], "samples_ns") ? is : i;
    }
    cr_assert(im >= 0 && it >= 0 && itt >= 0 && is >= 0);
    cr_assert_str_eq(row[im], "/m/stories \"260K\", f32.llm");
    cr_assert_str_eq(row[it], "pp128");
    cr_assert_str_eq(row[itt], "2");
    cr_assert_str_eq(row[is], "1000000;2000000;3000000");
    cr_assert_str_eq(row2[itt], ""); /* absent: empty cell */
    free(s);
}

Test(report, markdown)
{
    char *s = print(LLM_BENCH_MD, 2);
    cr_assert(strstr(s, "cpu: Test CPU, 2 GHz (avx2 fma), 2 cpus; llm-tools 0.1.0 (abc1234)"), "%s", s);
    cr_assert(strstr(s, "roofline, 2 threads: read bandwidth 20.0 GB/s (probe), FMA peak 100.0 GFLOP/s (given)\n"
                        "roofline, 1 thread: read bandwidth 30.0 GB/s (probe), FMA peak 200.0 GFLOP/s (given)\n\n|"),
              "%s", s);
    cr_assert(strstr(s, "| stories \"260K\", f32.llm | 1.12 MiB | 292.80 K | 2 | pp128 | 78222.22 ± "), "%s", s);
    cr_assert(strstr(s, "| 64000.00 | 2.00/2.80/2.98 | - | - | 37.50 (37.5%) |"), "%s", s);
    cr_assert(strstr(s, "| m\\|x.llm |"), "a '|' in a name is escaped: %s", s);
    cr_assert(strstr(s, "| tg16 | 500.00 ± 0.00 | 500.00 | - | 2.000/2.000/2.000 | 5.00 (25.0%) | - |"), "%s", s);
    free(s);
}

Test(report, format_names)
{
    enum llm_bench_format f;
    cr_assert_eq(llm_bench_format_parse("JSONL", &f), LLM_OK);
    cr_assert_eq(f, LLM_BENCH_JSONL);
    cr_assert_eq(llm_bench_format_parse("sql", &f), LLM_E_INVALID);
    cr_assert(strstr(llm_error_detail(LLM_E_INVALID), "'sql'"));
}

/* The serving printer: every field by name in JSON, null where a figure
 * does not apply (no rate, no prefix lookups), and the md row. */
Test(report, serving)
{
    struct llm_bench_header h;
    struct llm_bench_result unused[2];
    fixture(&h, unused);
    struct llm_serve_result r[2];
    memset(r, 0, sizeof r);
    snprintf(r[0].model, sizeof r[0].model, "/m/sm.llm");
    snprintf(r[0].test, sizeof r[0].test, "serve 4 x p8-16 g2-4, all at once");
    r[0].n_threads = 2, r[0].max_seqs = 4, r[0].prefix_cache = 0;
    r[0].requests = 4, r[0].output_tokens = 12, r[0].prompt_tokens = 40, r[0].seconds = 2;
    r[0].req_s = 2, r[0].out_ts = 6, r[0].total_ts = 26;
    llm_stats_compute(&r[0].ttft_ms, (double[]){ 10, 20, 30, 40 }, 4);
    llm_stats_compute(&r[0].itl_ms, (double[]){ 5, 5, 7 }, 3);
    r[1] = r[0];
    r[1].rate = 2.5, r[1].prefix_cache = 1, r[1].lookup_tokens = 40, r[1].hit_tokens = 10;
    r[1].errors = 1, r[1].arrival_span_s = 1.5;
    char *buf;
    size_t len;
    FILE *f = open_memstream(&buf, &len);
    cr_assert_eq(llm_bench_sprint(f, LLM_BENCH_JSON, &h, r, 2), LLM_OK);
    fclose(f);
    json_error_t je;
    json_t *a = json_loads(buf, 0, &je);
    cr_assert_not_null(a, "%s", je.text);
    json_t *x = json_array_get(a, 0), *y = json_array_get(a, 1);
    cr_assert_str_eq(json_string_value(json_object_get(x, "test")), "serve 4 x p8-16 g2-4, all at once");
    cr_assert(json_is_null(json_object_get(x, "request_rate")));
    cr_assert(json_is_null(json_object_get(x, "prefix_hit_rate")));
    cr_assert(json_is_null(json_object_get(x, "tpot_p50_ms")), "no TPOT sample: null");
    cr_assert_float_eq(json_number_value(json_object_get(x, "ttft_p50_ms")), 25, 1e-9);
    cr_assert_float_eq(json_number_value(json_object_get(x, "itl_mean_ms")), 17.0 / 3, 1e-5);
    cr_assert_float_eq(json_number_value(json_object_get(x, "avg_ts")), 6, 1e-9);
    cr_assert_float_eq(json_number_value(json_object_get(y, "request_rate")), 2.5, 1e-9);
    cr_assert_float_eq(json_number_value(json_object_get(y, "prefix_hit_rate")), 0.25, 1e-9);
    cr_assert_eq(json_integer_value(json_object_get(y, "errors")), 1);
    cr_assert_float_eq(json_number_value(json_object_get(y, "arrival_span_s")), 1.5, 1e-9);
    json_decref(a);
    free(buf);
    f = open_memstream(&buf, &len);
    cr_assert_eq(llm_bench_sprint(f, LLM_BENCH_MD, &h, r, 2), LLM_OK);
    fclose(f);
    cr_assert(strstr(buf, "| sm.llm | 2 | serve 4 x p8-16 g2-4, all at once | 4 | 2.00 | 6.0 | "
                          "25/37/40 | - | 5.0/6.6/7.0 | off | 0 | 0 |\n"), "%s", buf);
    cr_assert(strstr(buf, "| 25.0% | 0 | 1 |\n"), "%s", buf);
    free(buf);
}
