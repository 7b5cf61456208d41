/* compare.c: llm-bench --compare: read two results files back and flag the
 * tests whose throughput fell by more than a threshold. */
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <string.h>

#include "../common/alloc.h"
#include "../common/io.h"
#include "bench.h"

/* `where` is "NAME" or "NAME:LINE" (jsonl), or "NAME: result N" (json). */
static llm_status row_from_json(struct llm_bench_row *row, const json_t *o, const char *where)
{
    LLM_CHECK(json_is_object(o), LLM_E_FORMAT, "%s: not a JSON object", where);
    const char *model = json_string_value(json_object_get(o, "model_filename"));
    const char *test = json_string_value(json_object_get(o, "test"));
    json_t *th = json_object_get(o, "n_threads"), *ts = json_object_get(o, "avg_ts");
    LLM_CHECK(model, LLM_E_FORMAT, "%s: no string 'model_filename'", where);
    LLM_CHECK(test, LLM_E_FORMAT, "%s: no string 'test'", where);
    LLM_CHECK(json_is_integer(th), LLM_E_FORMAT, "%s: no integer 'n_threads'", where);
    LLM_CHECK(json_is_number(ts) && json_number_value(ts) >= 0, LLM_E_FORMAT,
              "%s: no non-negative number 'avg_ts'", where);
    /* by file name: the same model benchmarked from another directory matches */
    const char *base = strrchr(model, '/');
    snprintf(row->key, sizeof row->key, "%.500s | %.60s | t%" PRId64, base ? base + 1 : model, test,
             (int64_t)json_integer_value(th));
    row->avg_ts = json_number_value(ts);
    return LLM_OK;
}

static llm_status add_row(struct llm_bench_row **rows, size_t *n, size_t *cap, const json_t *o,
                          const char *where)
{
    LLM_TRY(llm_grow((void **)rows, cap, *n + 1, sizeof **rows));
    LLM_TRY(row_from_json(&(*rows)[*n], o, where));
    for (size_t i = 0; i < *n; i++)
        LLM_CHECK(strcmp((*rows)[i].key, (*rows)[*n].key) != 0, LLM_E_FORMAT, "%s: duplicate result '%s'",
                  where, (*rows)[*n].key);
    (*n)++;
    return LLM_OK;
}

static llm_status parse_rows(struct llm_bench_row **rows, size_t *n, size_t *cap, const char *text,
                             size_t len, const char *path)
{
    char where[600];
    json_error_t err;
    size_t i = 0;
    while (i < len && (text[i] == ' ' || text[i] == '\t' || text[i] == '\n' || text[i] == '\r'))
        i++;
    if (i < len && text[i] == '[') {
        json_t *a = json_loadb(text, len, 0, &err);
        if (!a)
            return llm_error_set(LLM_E_FORMAT, "%s:%d: not valid JSON: %s", path, err.line, err.text);
        llm_status s = json_is_array(a) ? LLM_OK : llm_error_set(LLM_E_FORMAT, "%s: not a JSON array", path);
        for (size_t k = 0; !s && k < json_array_size(a); k++) {
            snprintf(where, sizeof where, "%s: result %zu", path, k + 1);
            s = add_row(rows, n, cap, json_array_get(a, k), where);
        }
        json_decref(a);
        return s;
    }
    /* JSON lines: one object per non-blank line */
    size_t line = 0;
    for (const char *p = text, *end = text + len; p < end;) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *e = nl ? nl : end;
        line++;
        const char *q = p;
        while (q < e && (*q == ' ' || *q == '\t' || *q == '\r'))
            q++;
        if (q < e) {
            json_t *o = json_loadb(p, (size_t)(e - p), 0, &err);
            if (!o)
                return llm_error_set(LLM_E_FORMAT, "%s:%zu: not valid JSON: %s", path, line, err.text);
            snprintf(where, sizeof where, "%s:%zu", path, line);
            llm_status s = add_row(rows, n, cap, o, where);
            json_decref(o);
            LLM_TRY(s);
        }
        p = nl ? nl + 1 : end;
    }
    return LLM_OK;
}

llm_status llm_bench_rows_parse(struct llm_bench_row **rows, size_t *n, const char *text, size_t len,
                                const char *name)
{
    size_t cap = 0;
    *rows = NULL;
    *n = 0;
    llm_status s = parse_rows(rows, n, &cap, text, len, name);
    if (!s && *n == 0)
        s = llm_error_set(LLM_E_FORMAT, "%s: no results", name);
    if (s) {
        llm_free(*rows);
        *rows = NULL;
        *n = 0;
    }
    return s;
}

llm_status llm_bench_rows_load(struct llm_bench_row **rows, size_t *n, const char *path)
{
    char *text;
    size_t len;
    *rows = NULL;
    *n = 0;
    LLM_TRY(llm_read_file(path, (size_t)256 << 20, &text, &len));
    llm_status s = llm_bench_rows_parse(rows, n, text, len, path);
    llm_free(text);
    return s;
}

size_t llm_bench_compare(struct llm_bench_cmp *cmp, size_t *n_cmp, const struct llm_bench_row *old,
                         size_t n_old, const struct llm_bench_row *new_, size_t n_new, double threshold)
{
    size_t k = 0, regressions = 0;
    for (size_t i = 0; i < n_old; i++) {
        struct llm_bench_cmp *c = &cmp[k++];
        c->key = old[i].key;
        c->old_ts = old[i].avg_ts;
        c->new_ts = NAN;
        c->change_pct = NAN;
        c->regression = 0;
        for (size_t j = 0; j < n_new; j++)
            if (strcmp(new_[j].key, old[i].key) == 0) {
                c->new_ts = new_[j].avg_ts;
                /* a test that ran at 0 t/s before cannot get slower */
                c->change_pct = old[i].avg_ts > 0 ? (new_[j].avg_ts - old[i].avg_ts) / old[i].avg_ts * 100 : 0;
                c->regression = c->change_pct < -threshold;
                regressions += (size_t)c->regression;
                break;
            }
    }
    for (size_t j = 0; j < n_new; j++) {
        int found = 0;
        for (size_t i = 0; i < n_old && !found; i++)
            found = strcmp(new_[j].key, old[i].key) == 0;
        if (!found)
            cmp[k++] = (struct llm_bench_cmp){ .key = new_[j].key, .old_ts = NAN, .new_ts = new_[j].avg_ts,
                                               .change_pct = NAN };
    }
    *n_cmp = k;
    return regressions;
}

llm_status llm_bench_compare_print(FILE *f, const struct llm_bench_cmp *cmp, size_t n, double threshold)
{
    size_t reg = 0;
    fputs("| model | test | threads | old t/s | new t/s | change | status |\n"
          "| --- | --- | ---: | ---: | ---: | ---: | --- |\n",
          f);
    for (size_t i = 0; i < n; i++) {
        const struct llm_bench_cmp *c = &cmp[i];
        /* the key is "MODEL | TEST | tN": already three cells */
        char key[640];
        snprintf(key, sizeof key, "%s", c->key);
        char *t = strrchr(key, 't');
        if (t && t > key && t[-1] == ' ')
            memmove(t, t + 1, strlen(t)); /* "t2" -> "2" in the threads cell */
        fprintf(f, "| %s | ", key);
        if (isnan(c->old_ts))
            fprintf(f, "- | %.2f | - | new |\n", c->new_ts);
        else if (isnan(c->new_ts))
            fprintf(f, "%.2f | - | - | missing |\n", c->old_ts);
        else {
            fprintf(f, "%.2f | %.2f | %+.2f%% | %s |\n", c->old_ts, c->new_ts, c->change_pct,
                    c->regression ? "REGRESSION" : "ok");
            reg += (size_t)c->regression;
        }
    }
    fprintf(f, "\n%zu regression%s beyond %.4g%%\n", reg, reg == 1 ? "" : "s", threshold);
    return llm_stream_status(f);
}
