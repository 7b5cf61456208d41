/* report.c: llm-bench result printers (markdown, CSV, JSON, JSON lines).
 * The field names are a documented interface (llm-bench(1)); --compare
 * reads model_filename, test, n_threads and avg_ts back. */
#include <inttypes.h>
#include <math.h>
#include <string.h>
#include <strings.h>

#include "../common/alloc.h"
#include "../common/io.h"
#include "../format/meta.h" /* llm_json_string */
#include "bench.h"

llm_status llm_bench_format_parse(const char *s, enum llm_bench_format *out)
{
    static const char *names[] = { "md", "csv", "json", "jsonl" };
    for (int i = 0; i < 4; i++)
        if (strcasecmp(s, names[i]) == 0) {
            *out = (enum llm_bench_format)i;
            return LLM_OK;
        }
    return llm_error_set(LLM_E_INVALID, "unknown output format '%s' (md, csv, json, jsonl)", s);
}

void llm_bench_result_release(struct llm_bench_result *r)
{
    llm_free(r->samples_ns);
    r->samples_ns = NULL;
}

/* ---- values that may be absent ------------------------------------------------ */

/* A figure that does not apply to a test (TTFT of tg) is stored as NaN. */
enum { FIELD_STR, FIELD_U64, FIELD_INT, FIELD_NUM, FIELD_SAMPLES };

struct field {
    const char *name;
    int kind;
    const char *s;
    uint64_t u;
    double d;
    const double *v;
    size_t n;
};

static int has_ttft(const struct llm_bench_result *r) { return r->n_prompt > 0 && r->ttft_ms.n > 0; }
static int has_tok(const struct llm_bench_result *r) { return r->n_gen > 0 && r->token_ms.n > 0; }

#define NUM(nm, x) (struct field){ .name = nm, .kind = FIELD_NUM, .d = (x) }
#define U64(nm, x) (struct field){ .name = nm, .kind = FIELD_U64, .u = (x) }
#define STR(nm, x) (struct field){ .name = nm, .kind = FIELD_STR, .s = (x) }

/* The build and machine fields every result row starts with. */
static size_t machine_fields(struct field *f, const struct llm_bench_header *h)
{
    size_t n = 0;
    f[n++] = STR("build_version", h->machine.version);
    f[n++] = STR("build_commit", h->machine.commit);
    f[n++] = STR("cpu_info", h->machine.cpu);
    f[n++] = STR("cpu_features", h->machine.features);
    f[n++] = U64("n_cpus", (uint64_t)h->machine.n_cpus);
    return n;
}

/* Every field of one result, in output order. */
static size_t fields_of(struct field *f, const struct llm_bench_header *h, const struct llm_bench_result *r)
{
    size_t n = 0;
    double nan = NAN;
    int tt = has_ttft(r), tk = has_tok(r);
    n = machine_fields(f, h);
    f[n++] = NUM("roofline_bandwidth_gbs", r->roof_gbs);
    f[n++] = STR("roofline_bandwidth_source", h->bw_measured ? "probe" : "user");
    f[n++] = NUM("roofline_peak_gflops", r->roof_gflops);
    f[n++] = STR("roofline_peak_source", h->peak_measured ? "probe" : "user");
    f[n++] = STR("test_time", h->test_time);
    f[n++] = STR("model_filename", r->model);
    f[n++] = U64("model_size", r->model_bytes);
    f[n++] = U64("model_n_params", r->n_params);
    f[n++] = STR("test", r->test);
    f[n++] = U64("n_prompt", (uint64_t)r->n_prompt);
    f[n++] = U64("n_gen", (uint64_t)r->n_gen);
    f[n++] = U64("n_threads", (uint64_t)r->n_threads);
    f[n++] = U64("repetitions", (uint64_t)r->reps);
    f[n++] = NUM("avg_ns", r->ns.mean);
    f[n++] = NUM("stddev_ns", r->ns.sd);
    f[n++] = NUM("median_ns", r->ns.median);
    f[n++] = NUM("avg_ts", r->ts.mean);
    f[n++] = NUM("stddev_ts", r->ts.sd);
    f[n++] = NUM("median_ts", r->ts.median);
    f[n++] = NUM("ttft_p50_ms", tt ? r->ttft_ms.p50 : nan);
    f[n++] = NUM("ttft_p90_ms", tt ? r->ttft_ms.p90 : nan);
    f[n++] = NUM("ttft_p99_ms", tt ? r->ttft_ms.p99 : nan);
    f[n++] = NUM("token_mean_ms", tk ? r->token_ms.mean : nan);
    f[n++] = NUM("token_p50_ms", tk ? r->token_ms.p50 : nan);
    f[n++] = NUM("token_p90_ms", tk ? r->token_ms.p90 : nan);
    f[n++] = NUM("token_p99_ms", tk ? r->token_ms.p99 : nan);
    f[n++] = NUM("bandwidth_gbs", tk ? r->gbs : nan);
    f[n++] = NUM("bandwidth_pct", tk ? r->gbs_pct : nan);
    f[n++] = NUM("gflops", tt ? r->gflops : nan);
    f[n++] = NUM("gflops_pct", tt ? r->gflops_pct : nan);
    /* batched tests (llama-batched-bench's columns); empty otherwise */
    const int b = r->n_seq > 0;
    f[n++] = U64("n_seq", (uint64_t)r->n_seq);
    f[n++] = NUM("t_pp_s", b ? r->pp_s.mean : nan);
    f[n++] = NUM("s_pp_ts", b ? r->s_pp : nan);
    f[n++] = NUM("t_tg_s", b && r->n_gen ? r->tg_s.mean : nan);
    f[n++] = NUM("s_tg_ts", b && r->n_gen ? r->s_tg : nan);
    f[n++] = NUM("s_ts", b ? r->s_all : nan);
    f[n++] = NUM("roofline_dot16_gops", b ? r->roof_dot : nan);
    f[n++] = STR("tg_peak", !b ? "" : r->int_weights && r->roof_dot > 0 ? "dot16" : "fma");
    f[n++] = NUM("tg_gops", b && r->n_gen ? r->tg_gops : nan);
    f[n++] = NUM("tg_peak_pct", b && r->n_gen ? r->tg_peak_pct : nan);
    f[n++] = U64("kv_bytes", r->kv_bytes);
    f[n++] = (struct field){ .name = "samples_ns", .kind = FIELD_SAMPLES, .v = r->samples_ns,
                             .n = r->samples_ns ? (size_t)r->reps : 0 };
    return n;
}
#define MAX_FIELDS 64

static void json_value(FILE *o, const struct field *f)
{
    switch (f->kind) {
    case FIELD_STR: llm_json_string(o, f->s, strlen(f->s)); break;
    case FIELD_U64: fprintf(o, "%" PRIu64, f->u); break;
    case FIELD_NUM:
        if (isfinite(f->d))
            fprintf(o, "%.6g", f->d);
        else
            fputs("null", o);
        break;
    case FIELD_SAMPLES:
        fputc('[', o);
        for (size_t i = 0; i < f->n; i++)
            fprintf(o, "%s%.0f", i ? ", " : "", f->v[i]);
        fputc(']', o);
        break;
    }
}

/* The fields of one item (a struct llm_bench_result or llm_bench_kresult). */
typedef size_t (*fields_fn)(struct field *f, const struct llm_bench_header *h, const void *item);
static size_t fields_of_run(struct field *f, const struct llm_bench_header *h, const void *item)
{
    return fields_of(f, h, item);
}

/* One object on one line. */
static void print_json_obj(FILE *o, const struct llm_bench_header *h, fields_fn ff, const void *r)
{
    struct field f[MAX_FIELDS];
    size_t n = ff(f, h, r);
    fputc('{', o);
    for (size_t i = 0; i < n; i++) {
        fprintf(o, "%s\"%s\": ", i ? ", " : "", f[i].name);
        json_value(o, &f[i]);
    }
    fputc('}', o);
}

/* RFC 4180: quote when needed, double the quotes. */
static void csv_string(FILE *o, const char *s)
{
    if (!strpbrk(s, ",\"\n\r")) {
        fputs(s, o);
        return;
    }
    fputc('"', o);
    for (; *s; s++) {
        if (*s == '"')
            fputc('"', o);
        fputc(*s, o);
    }
    fputc('"', o);
}

/* items: nr items of `size` bytes; empty: a zeroed item for the header row. */
static void print_csv(FILE *o, const struct llm_bench_header *h, fields_fn ff, const void *items, size_t size,
                      size_t nr, const void *empty)
{
    struct field f[MAX_FIELDS];
    size_t n = ff(f, h, nr ? items : empty);
    for (size_t i = 0; i < n; i++)
        fprintf(o, "%s%s", i ? "," : "", f[i].name);
    fputc('\n', o);
    for (size_t k = 0; k < nr; k++) {
        n = ff(f, h, (const char *)items + k * size);
        for (size_t i = 0; i < n; i++) {
            if (i)
                fputc(',', o);
            switch (f[i].kind) {
            case FIELD_STR: csv_string(o, f[i].s); break;
            case FIELD_U64: fprintf(o, "%" PRIu64, f[i].u); break;
            case FIELD_NUM:
                if (isfinite(f[i].d))
                    fprintf(o, "%.6g", f[i].d);
                break;
            case FIELD_SAMPLES: /* one cell, values separated by ';' */
                for (size_t j = 0; j < f[i].n; j++)
                    fprintf(o, "%s%.0f", j ? ";" : "", f[i].v[j]);
                break;
            }
        }
        fputc('\n', o);
    }
}

/* ---- markdown ----------------------------------------------------------------- */

static const char *human_bytes(char *buf, size_t n, double b)
{
    static const char *u[] = { "B", "KiB", "MiB", "GiB", "TiB" };
    int i = 0;
    while (b >= 1024 && i < 4)
        b /= 1024, i++;
    snprintf(buf, n, i ? "%.2f %s" : "%.0f %s", b, u[i]);
    return buf;
}

static const char *human_count(char *buf, size_t n, double c)
{
    static const char *u[] = { "", "K", "M", "B", "T" };
    int i = 0;
    while (c >= 1000 && i < 4)
        c /= 1000, i++;
    snprintf(buf, n, i ? "%.2f %s" : "%.0f%s", c, u[i]);
    return buf;
}

/* Markdown cells must not contain '|' or newlines. */
static void md_cell(FILE *o, const char *s)
{
    for (; *s; s++)
        fputs(*s == '|' ? "\\|" : *s == '\n' ? " " : (char[2]){ *s, 0 }, o);
}

/* A file's name without its folders, as a cell. */
static void md_file(FILE *o, const char *path)
{
    const char *base = strrchr(path, '/');
    md_cell(o, base ? base + 1 : path);
}

/* "12.3%", or what a share that went past its roofline means */
static const char *share_cell(char *buf, size_t n, double pct)
{
    if (isfinite(pct))
        snprintf(buf, n, "%.1f%%", pct);
    else
        snprintf(buf, n, "above the roofline");
    return buf;
}

/* Batched results as llama-batched-bench prints them, with the decode's
 * share of the compute peak (int16 dot product or FMA) and the KV cache
 * in use. */
static void print_md_batch(FILE *o, const struct llm_bench_result *r, size_t n)
{
    fputs("| model | threads | B | PP | TG | N_KV | T_PP s | S_PP t/s | T_TG s | S_TG t/s | T s "
          "| S t/s | TG GOP/s (% of peak) | KV MiB |\n"
          "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: "
          "| ---: | ---: |\n",
          o);
    for (size_t i = 0; i < n; i++) {
        const struct llm_bench_result *x = &r[i];
        if (!x->n_seq)
            continue;
        fputs("| ", o);
        md_file(o, x->model);
        fprintf(o, " | %d | %d | %d | %d | %lld | %.3f | %.2f | ", x->n_threads, x->n_seq,
                x->n_prompt, x->n_gen, (long long)x->n_seq * (x->n_prompt + x->n_gen),
                x->pp_s.mean, x->s_pp);
        if (x->n_gen)
            fprintf(o, "%.3f | %.2f | ", x->tg_s.mean, x->s_tg);
        else
            fputs("- | - | ", o);
        fprintf(o, "%.3f | %.2f | ", x->pp_s.mean + x->tg_s.mean, x->s_all);
        char sh[32];
        if (x->n_gen)
            fprintf(o, "%.1f (%s %s) | ", x->tg_gops, share_cell(sh, sizeof sh, x->tg_peak_pct),
                    x->int_weights && x->roof_dot > 0 ? "dot16" : "FMA");
        else
            fputs("- | ", o);
        fprintf(o, "%.1f |\n", (double)x->kv_bytes / (1024.0 * 1024.0));
    }
}

/* The md tables' first line: the machine and the build. */
static void md_machine(FILE *o, const struct llm_bench_header *h)
{
    fprintf(o, "cpu: %s (%s), %d cpus; llm-tools %s (%s); %s\n", h->machine.cpu, h->machine.features,
            h->machine.n_cpus, h->machine.version, h->machine.commit, h->test_time);
}

static void print_md(FILE *o, const struct llm_bench_header *h, const void *items, size_t n)
{
    const struct llm_bench_result *r = items;
    md_machine(o, h);
    /* one roofline line per thread count, in order of first appearance */
    for (size_t i = 0; i < n; i++) {
        size_t j = 0;
        while (j < i && r[j].n_threads != r[i].n_threads)
            j++;
        if (j == i) {
            fprintf(o, "roofline, %d thread%s: read bandwidth %.1f GB/s (%s), FMA peak %.1f GFLOP/s (%s)",
                    r[i].n_threads, r[i].n_threads == 1 ? "" : "s", r[i].roof_gbs,
                    h->bw_measured ? "probe" : "given", r[i].roof_gflops, h->peak_measured ? "probe" : "given");
            if (r[i].n_seq)
                fprintf(o, ", int16 dot peak %.1f GOP/s (probe)", r[i].roof_dot);
            fputc('\n', o);
        }
    }
    fputc('\n', o);
    size_t nb = 0;
    for (size_t i = 0; i < n; i++)
        nb += r[i].n_seq > 0;
    if (nb) {
        print_md_batch(o, r, n);
        if (nb == n)
            return;
        fputc('\n', o);
    }
    fputs("| model | size | params | threads | test | t/s | median t/s | TTFT ms p50/p90/p99 "
          "| token ms p50/p90/p99 | GB/s (% of bw) | GFLOP/s (% of peak) |\n"
          "| --- | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |\n",
          o);
    for (size_t i = 0; i < n; i++) {
        const struct llm_bench_result *x = &r[i];
        char a[32], b[32], sh[32];
        if (x->n_seq)
            continue;
        fputs("| ", o);
        md_file(o, x->model);
        fprintf(o, " | %s | %s | %d | %s | %.2f ± %.2f | %.2f | ", human_bytes(a, sizeof a, (double)x->model_bytes),
                human_count(b, sizeof b, (double)x->n_params), x->n_threads, x->test, x->ts.mean, x->ts.sd,
                x->ts.median);
        if (has_ttft(x))
            fprintf(o, "%.2f/%.2f/%.2f | ", x->ttft_ms.p50, x->ttft_ms.p90, x->ttft_ms.p99);
        else
            fputs("- | ", o);
        if (has_tok(x))
            fprintf(o, "%.3f/%.3f/%.3f | %.2f (%s) | ", x->token_ms.p50, x->token_ms.p90, x->token_ms.p99,
                    x->gbs, share_cell(sh, sizeof sh, x->gbs_pct));
        else
            fputs("- | - | ", o);
        if (has_ttft(x))
            fprintf(o, "%.2f (%s) |\n", x->gflops, share_cell(sh, sizeof sh, x->gflops_pct));
        else
            fputs("- |\n", o);
    }
}

static void print_json_all(FILE *f, enum llm_bench_format fmt, const struct llm_bench_header *h, fields_fn ff,
                           const void *items, size_t size, size_t n)
{
    if (fmt == LLM_BENCH_JSON)
        fputs("[", f);
    for (size_t i = 0; i < n; i++) {
        if (fmt == LLM_BENCH_JSON)
            fputs(i ? ",\n  " : "\n  ", f);
        print_json_obj(f, h, ff, (const char *)items + i * size);
        if (fmt == LLM_BENCH_JSONL)
            fputc('\n', f);
    }
    if (fmt == LLM_BENCH_JSON)
        fputs(n ? "\n]\n" : "]\n", f);
}

/* One kind of result (items of `size` bytes) in any format: md by its own
 * printer (run on the items), the others from its fields. */
typedef void (*md_fn)(FILE *o, const struct llm_bench_header *h, const void *items, size_t n);
static llm_status print_as(FILE *f, enum llm_bench_format fmt, const struct llm_bench_header *h,
                           fields_fn ff, md_fn md, const void *items, size_t size, size_t n,
                           const void *empty)
{
    switch (fmt) {
    case LLM_BENCH_MD: md(f, h, items, n); break;
    case LLM_BENCH_CSV: print_csv(f, h, ff, items, size, n, empty); break;
    case LLM_BENCH_JSON:
    case LLM_BENCH_JSONL: print_json_all(f, fmt, h, ff, items, size, n); break;
    default: return llm_error_set(LLM_E_INVALID, "bad output format %d", (int)fmt);
    }
    return llm_stream_status(f);
}

llm_status llm_bench_print(FILE *f, enum llm_bench_format fmt, const struct llm_bench_header *h,
                           const struct llm_bench_result *r, size_t n)
{
    static const struct llm_bench_result empty;
    return print_as(f, fmt, h, fields_of_run, print_md, r, sizeof *r, n, &empty);
}

/* ---- kernel results ------------------------------------------------------------ */

static size_t fields_of_kernel(struct field *f, const struct llm_bench_header *h, const void *item)
{
    const struct llm_bench_kresult *r = item;
    size_t n = 0;
    n = machine_fields(f, h);
    f[n++] = STR("isa", h->isa);
    f[n++] = NUM("roofline_bandwidth_gbs", r->roof_gbs);
    f[n++] = STR("roofline_bandwidth_source", h->bw_measured ? "probe" : "user");
    f[n++] = NUM("roofline_peak_gflops", r->roof_gflops);
    f[n++] = STR("roofline_peak_source", h->peak_measured ? "probe" : "user");
    f[n++] = STR("test_time", h->test_time);
    f[n++] = STR("kernel", r->kernel);
    f[n++] = STR("type", r->type);
    f[n++] = STR("shape", r->shape);
    f[n++] = U64("rows", (uint64_t)r->rows);
    f[n++] = U64("cols", (uint64_t)r->cols);
    f[n++] = U64("batch", (uint64_t)r->batch);
    f[n++] = U64("n_kv_heads", (uint64_t)r->n_kv_heads);
    f[n++] = U64("n_threads", (uint64_t)r->n_threads);
    f[n++] = U64("repetitions", (uint64_t)r->reps);
    f[n++] = U64("bytes", r->bytes);
    f[n++] = U64("flops", (uint64_t)r->flops);
    f[n++] = NUM("avg_ns", r->ns.mean);
    f[n++] = NUM("stddev_ns", r->ns.sd);
    f[n++] = NUM("median_ns", r->ns.median);
    f[n++] = NUM("bandwidth_gbs", r->gbs);
    f[n++] = NUM("bandwidth_pct", r->gbs_pct);
    f[n++] = NUM("gflops", r->gflops);
    f[n++] = NUM("gflops_pct", r->gflops_pct);
    f[n++] = (struct field){ .name = "samples_ns", .kind = FIELD_SAMPLES, .v = r->samples_ns,
                             .n = r->samples_ns ? (size_t)r->reps : 0 };
    return n;
}

static void print_kmd(FILE *o, const struct llm_bench_header *h, const void *items, size_t n)
{
    const struct llm_bench_kresult *r = items;
    fprintf(o, "cpu: %s (%s), %d cpus, kernels %s; llm-tools %s (%s); %s\n", h->machine.cpu, h->machine.features,
            h->machine.n_cpus, h->isa, h->machine.version, h->machine.commit, h->test_time);
    for (size_t i = 0; i < n; i++) {
        size_t j = 0;
        while (j < i && r[j].n_threads != r[i].n_threads)
            j++;
        if (j == i)
            fprintf(o, "roofline, %d thread%s: read bandwidth %.1f GB/s (%s), FMA peak %.1f GFLOP/s (%s)\n",
                    r[i].n_threads, r[i].n_threads == 1 ? "" : "s", r[i].roof_gbs,
                    h->bw_measured ? "probe" : "given", r[i].roof_gflops, h->peak_measured ? "probe" : "given");
    }
    fputc('\n', o);
    fputs("| kernel | type | shape | rows x cols | batch | threads | us | GB/s (% of bw) | GFLOP/s (% of peak) |\n"
          "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |\n",
          o);
    for (size_t i = 0; i < n; i++) {
        const struct llm_bench_kresult *x = &r[i];
        fprintf(o, "| %s | %s | %s | %lld x %lld | %lld | %d | %.1f ± %.1f | %.2f (%.1f%%) | %.2f (%.1f%%) |\n",
                x->kernel, x->type, x->shape, (long long)x->rows, (long long)x->cols, (long long)x->batch,
                x->n_threads, x->ns.mean * 1e-3, x->ns.sd * 1e-3, x->gbs, x->gbs_pct, x->gflops, x->gflops_pct);
    }
}

llm_status llm_bench_kprint(FILE *f, enum llm_bench_format fmt, const struct llm_bench_header *h,
                            const struct llm_bench_kresult *r, size_t n)
{
    static const struct llm_bench_kresult empty;
    return print_as(f, fmt, h, fields_of_kernel, print_kmd, r, sizeof *r, n, &empty);
}

/* ---- serving results (--serve) ------------------------------------------------ */

/* Speculation's share of drafts kept, drafts kept per round that drafted,
 * and target passes per token; NaN where nothing was counted. */
struct spec_rates {
    double kept, per_round, passes;
};

static struct spec_rates spec_rates(int64_t drafted, int64_t accepted, int64_t rounds,
                                    int64_t passes, int64_t tokens)
{
    return (struct spec_rates){
        .kept = drafted ? (double)accepted / (double)drafted : NAN,
        .per_round = rounds ? (double)accepted / (double)rounds : NAN,
        .passes = tokens ? (double)passes / (double)tokens : NAN,
    };
}

static struct spec_rates serve_spec_rates(const struct llm_serve_result *r)
{
    return spec_rates(r->spec_drafted, r->spec_accepted, r->spec_rounds, r->spec_passes,
                      r->spec_tokens);
}

static size_t fields_of_serve(struct field *f, const struct llm_bench_header *h, const void *item)
{
    const struct llm_serve_result *r = item;
    size_t n = machine_fields(f, h);
    static const char *const names[4][4] = {
        { "ttft_mean_ms", "ttft_p50_ms", "ttft_p90_ms", "ttft_p99_ms" },
        { "tpot_mean_ms", "tpot_p50_ms", "tpot_p90_ms", "tpot_p99_ms" },
        { "itl_mean_ms", "itl_p50_ms", "itl_p90_ms", "itl_p99_ms" },
        { "e2e_mean_ms", "e2e_p50_ms", "e2e_p90_ms", "e2e_p99_ms" },
    };
    const struct llm_stats *lat[4] = { &r->ttft_ms, &r->tpot_ms, &r->itl_ms, &r->e2e_ms };
    f[n++] = STR("test_time", h->test_time);
    f[n++] = STR("model_filename", r->model);
    f[n++] = STR("test", r->test);
    f[n++] = U64("n_threads", (uint64_t)r->n_threads);
    f[n++] = U64("max_seqs", (uint64_t)r->max_seqs);
    f[n++] = U64("prefix_cache", (uint64_t)r->prefix_cache);
    f[n++] = NUM("request_rate", r->rate > 0 ? r->rate : NAN);
    f[n++] = U64("requests", (uint64_t)r->requests);
    f[n++] = U64("errors", (uint64_t)r->errors);
    f[n++] = U64("prompt_tokens", (uint64_t)r->prompt_tokens);
    f[n++] = U64("output_tokens", (uint64_t)r->output_tokens);
    f[n++] = NUM("duration_s", r->seconds);
    f[n++] = NUM("arrival_span_s", r->arrival_span_s);
    f[n++] = NUM("requests_per_s", r->req_s);
    f[n++] = NUM("avg_ts", r->out_ts); /* output tokens/s: the figure --compare reads */
    f[n++] = NUM("total_ts", r->total_ts);
    for (int i = 0; i < 4; i++) {
        const double v[4] = { lat[i]->mean, lat[i]->p50, lat[i]->p90, lat[i]->p99 };
        for (int k = 0; k < 4; k++)
            f[n++] = NUM(names[i][k], lat[i]->n ? v[k] : NAN);
    }
    f[n++] = U64("prefix_lookup_tokens", (uint64_t)r->lookup_tokens);
    f[n++] = U64("prefix_hit_tokens", (uint64_t)r->hit_tokens);
    f[n++] = NUM("prefix_hit_rate", r->lookup_tokens ? (double)r->hit_tokens / (double)r->lookup_tokens : NAN);
    f[n++] = U64("preemptions", (uint64_t)r->preemptions);
    f[n++] = U64("kv_blocks", (uint64_t)r->kv_blocks);
    f[n++] = U64("kv_blocks_peak", (uint64_t)r->kv_peak);
    const struct spec_rates x = serve_spec_rates(r);
    f[n++] = STR("draft", r->draft);
    f[n++] = U64("spec_drafted", (uint64_t)r->spec_drafted);
    f[n++] = U64("spec_accepted", (uint64_t)r->spec_accepted);
    f[n++] = NUM("spec_acceptance_rate", r->draft[0] ? x.kept : NAN);
    f[n++] = NUM("spec_mean_accepted_length", r->draft[0] ? x.per_round : NAN);
    f[n++] = NUM("spec_passes_per_token", r->draft[0] ? x.passes : NAN);
    return n;
}

static void print_smd(FILE *o, const struct llm_bench_header *h, const void *items, size_t n)
{
    const struct llm_serve_result *r = items;
    md_machine(o, h);
    fputc('\n', o);
    int spec = 0; /* a column for speculation when a run speculated */
    for (size_t i = 0; i < n; i++)
        spec |= r[i].draft[0] != 0;
    fputs("| model | threads | workload | seqs | req/s | out t/s | TTFT ms p50/p90/p99 "
          "| TPOT ms p50/p90/p99 | ITL ms p50/p90/p99 | prefix hit | preempt | errors |", o);
    fputs(spec ? " draft: kept, passes/token |\n" : "\n", o);
    fputs("| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |", o);
    fputs(spec ? " --- |\n" : "\n", o);
    for (size_t i = 0; i < n; i++) {
        const struct llm_serve_result *x = &r[i];
        fputs("| ", o);
        md_file(o, x->model);
        fprintf(o, " | %d | ", x->n_threads);
        md_cell(o, x->test);
        fprintf(o, " | %d | %.2f | %.1f | ", x->max_seqs, x->req_s, x->out_ts);
        const struct llm_stats *lat[3] = { &x->ttft_ms, &x->tpot_ms, &x->itl_ms };
        for (int k = 0; k < 3; k++) /* TTFT in whole ms, the others to 0.1 */
            if (lat[k]->n)
                fprintf(o, k ? "%.1f/%.1f/%.1f | " : "%.0f/%.0f/%.0f | ", lat[k]->p50,
                        lat[k]->p90, lat[k]->p99);
            else
                fputs("- | ", o);
        if (x->lookup_tokens)
            fprintf(o, "%.1f%% | ", 100.0 * (double)x->hit_tokens / (double)x->lookup_tokens);
        else
            fputs(x->prefix_cache ? "0.0% | " : "off | ", o);
        fprintf(o, "%lld | %lld |", (long long)x->preemptions, (long long)x->errors);
        if (spec && x->draft[0]) {
            const struct spec_rates k = serve_spec_rates(x);
            fputc(' ', o);
            md_file(o, x->draft);
            fprintf(o, ": %.1f%%, %.3f |", 100.0 * (isnan(k.kept) ? 0 : k.kept),
                    isnan(k.passes) ? 1.0 : k.passes);
        } else if (spec) {
            fputs(" - |", o);
        }
        fputc('\n', o);
    }
}

llm_status llm_bench_sprint(FILE *f, enum llm_bench_format fmt, const struct llm_bench_header *h,
                            const struct llm_serve_result *r, size_t n)
{
    static const struct llm_serve_result empty;
    return print_as(f, fmt, h, fields_of_serve, print_smd, r, sizeof *r, n, &empty);
}

/* ---- speculative decoding (--draft, --lookup) --------------------------------- */

static struct spec_rates spec_rates_of(const struct llm_spec_result *r)
{
    return spec_rates(r->drafted, r->accepted, r->rounds, r->passes, r->tokens);
}

static size_t fields_of_spec(struct field *f, const struct llm_bench_header *h, const void *item)
{
    const struct llm_spec_result *r = item;
    size_t n = machine_fields(f, h);
    f[n++] = STR("test_time", h->test_time);
    f[n++] = STR("model_filename", r->model);
    f[n++] = STR("draft", r->draft);
    f[n++] = STR("test", "spec");
    f[n++] = U64("n_threads", (uint64_t)r->n_threads);
    f[n++] = U64("repetitions", (uint64_t)r->reps);
    f[n++] = U64("prompts", (uint64_t)r->n_prompts);
    f[n++] = U64("n_gen", (uint64_t)r->n_gen);
    f[n++] = U64("tokens", (uint64_t)r->tokens);
    f[n++] = NUM("plain_ts", r->plain_ts.median);
    f[n++] = NUM("avg_ts", r->spec_ts.median); /* speculating: the figure --compare reads */
    f[n++] = NUM("spec_ts_sd", r->spec_ts.sd);
    f[n++] = NUM("speedup", r->speedup);
    f[n++] = U64("drafted", (uint64_t)r->drafted);
    f[n++] = U64("accepted", (uint64_t)r->accepted);
    const struct spec_rates k = spec_rates_of(r);
    f[n++] = NUM("acceptance_rate", k.kept);
    f[n++] = NUM("mean_accepted_length", k.per_round);
    f[n++] = NUM("passes_per_token", k.passes);
    return n;
}

static void print_spec_md(FILE *o, const struct llm_bench_header *h, const void *items, size_t n)
{
    const struct llm_spec_result *r = items;
    md_machine(o, h);
    fputc('\n', o);
    fputs("| model | draft | threads | prompts | tokens | plain t/s | spec t/s | speedup "
          "| acceptance | accepted/round | passes/token |\n"
          "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n", o);
    for (size_t i = 0; i < n; i++) {
        const struct llm_spec_result *x = &r[i];
        const struct spec_rates k = spec_rates_of(x);
        fputs("| ", o);
        md_file(o, x->model);
        fputs(" | ", o);
        md_file(o, x->draft);
        fprintf(o, " | %d | %d | %lld | %.2f | %.2f ± %.2f | %.2fx | %.1f%% | %.2f | %.3f |\n",
                x->n_threads, x->n_prompts, (long long)x->tokens, x->plain_ts.median,
                x->spec_ts.median, x->spec_ts.sd, x->speedup, isnan(k.kept) ? 0 : 100 * k.kept,
                isnan(k.per_round) ? 0 : k.per_round, isnan(k.passes) ? 0 : k.passes);
    }
}

llm_status llm_bench_spec_print(FILE *f, enum llm_bench_format fmt, const struct llm_bench_header *h,
                                const struct llm_spec_result *r, size_t n)
{
    static const struct llm_spec_result empty;
    return print_as(f, fmt, h, fields_of_spec, print_spec_md, r, sizeof *r, n, &empty);
}

static size_t fields_of_grammar(struct field *f, const struct llm_bench_header *h, const void *item)
{
    const struct llm_grammar_result *r = item;
    size_t n = machine_fields(f, h);
    f[n++] = STR("test_time", h->test_time);
    f[n++] = STR("model_filename", r->model);
    f[n++] = STR("grammar", r->grammar);
    f[n++] = STR("test", "grammar");
    f[n++] = U64("n_threads", (uint64_t)r->n_threads);
    f[n++] = U64("repetitions", (uint64_t)r->reps);
    f[n++] = U64("prompts", (uint64_t)r->n_prompts);
    f[n++] = U64("n_gen", (uint64_t)r->n_gen);
    f[n++] = U64("plain_tokens", (uint64_t)r->plain_tokens);
    f[n++] = U64("constrained_tokens", (uint64_t)r->constrained_tokens);
    f[n++] = NUM("plain_ms_per_token", r->plain_ms.median);
    f[n++] = NUM("constrained_ms_per_token", r->constrained_ms.median);
    f[n++] = NUM("constrained_ms_sd", r->constrained_ms.sd);
    f[n++] = NUM("avg_ts", r->constrained_ms.median > 0 ? 1e3 / r->constrained_ms.median : 0);
    f[n++] = NUM("overhead", r->overhead);
    f[n++] = NUM("compile_ms", r->compile_ms);
    f[n++] = NUM("mask_median_us", r->mask_median_us);
    f[n++] = NUM("mask_p99_us", r->mask_p99_us);
    f[n++] = NUM("mask_max_us", r->mask_max_us);
    f[n++] = NUM("mask_ms_per_token", r->mask_ms_per_token);
    f[n++] = U64("masks", (uint64_t)r->masks);
    f[n++] = U64("masks_cached", (uint64_t)r->cached);
    f[n++] = U64("forced", (uint64_t)r->forced);
    f[n++] = U64("ended", (uint64_t)r->ended);
    return n;
}

static void print_grammar_md(FILE *o, const struct llm_bench_header *h, const void *items, size_t n)
{
    const struct llm_grammar_result *r = items;
    md_machine(o, h);
    fputc('\n', o);
    fputs("| model | grammar | threads | prompts | ended | plain ms/token | constrained ms/token "
          "| overhead | mask median us | mask p99 us | mask ms/token | compile ms |\n"
          "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n", o);
    for (size_t i = 0; i < n; i++) {
        const struct llm_grammar_result *x = &r[i];
        fputs("| ", o);
        md_file(o, x->model);
        fputs(" | ", o);
        md_file(o, x->grammar);
        fprintf(o, " | %d | %d | %d | %.3f | %.3f ± %.3f | %+.1f%% | %.1f | %.1f | %.4f | %.1f |\n",
                x->n_threads, x->n_prompts, x->ended, x->plain_ms.median, x->constrained_ms.median,
                x->constrained_ms.sd, 100 * x->overhead, x->mask_median_us, x->mask_p99_us,
                x->mask_ms_per_token, x->compile_ms);
    }
}

llm_status llm_bench_grammar_print(FILE *f, enum llm_bench_format fmt,
                                   const struct llm_bench_header *h,
                                   const struct llm_grammar_result *r, size_t n)
{
    static const struct llm_grammar_result empty;
    return print_as(f, fmt, h, fields_of_grammar, print_grammar_md, r, sizeof *r, n, &empty);
}
