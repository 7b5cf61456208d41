/* plan.c: what llm-bench runs: comma lists in the manner of llama-bench,
 * pg pairs, and YAML suite files. */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "../common/alloc.h"
#include "../common/io.h"
#include "../format/meta.h"
#include "bench.h"

#define MAX_TOKENS 1048576

void llm_bench_plan_init(struct llm_bench_plan *p)
{
    memset(p, 0, sizeof *p);
    p->reps = 5;
    p->warmup = 1;
    p->format = LLM_BENCH_MD;
}

void llm_bench_plan_release(struct llm_bench_plan *p)
{
    for (size_t i = 0; i < p->n_owned; i++)
        llm_free(p->owned[i]);
    p->n_owned = 0;
}

static int parse_num(const char **s, int64_t *v)
{
    char *end;
    errno = 0;
    if (**s < '0' || **s > '9')
        return 0;
    long long x = strtoll(*s, &end, 10);
    if (errno || end == *s)
        return 0;
    *v = x;
    *s = end;
    return 1;
}

llm_status llm_bench_parse_list(const char *s, const char *what, int64_t min, int64_t max,
                                int64_t *out, size_t cap, size_t *n)
{
    const char *p = s;
    *n = 0;
    for (;;) {
        int64_t a, b, step = 1;
        char op = '+';
        if (!parse_num(&p, &a))
            goto bad;
        b = a;
        if (*p == '-') {
            p++;
            if (!parse_num(&p, &b) || b < a)
                goto bad;
            if (*p == '+' || *p == '*') {
                op = *p++;
                if (!parse_num(&p, &step) || step < (op == '*' ? 2 : 1))
                    goto bad;
            }
        }
        for (int64_t v = a; v <= b;) {
            LLM_CHECK(v >= min && v <= max, LLM_E_INVALID, "%s: %" PRId64 " is outside %" PRId64 "..%" PRId64,
                      what, v, min, max);
            LLM_CHECK(*n < cap, LLM_E_INVALID, "%s: more than %zu values", what, cap);
            out[(*n)++] = v;
            if (op == '+' ? v > INT64_MAX - step : v > INT64_MAX / step)
                break;
            v = op == '+' ? v + step : v * step;
        }
        if (*p == 0)
            return LLM_OK;
        if (*p++ != ',')
            goto bad;
    }
bad:
    return llm_error_set(LLM_E_INVALID,
                         "%s: '%s' is not a list of N, FIRST-LAST, FIRST-LAST+STEP or FIRST-LAST*MULT", what, s);
}

static llm_status add_test(struct llm_bench_plan *p, int32_t pp, int32_t tg)
{
    LLM_CHECK(p->n_tests < sizeof p->tests / sizeof p->tests[0], LLM_E_INVALID, "more than %zu tests",
              sizeof p->tests / sizeof p->tests[0]);
    p->tests[p->n_tests++] = (struct llm_bench_test){ pp, tg };
    return LLM_OK;
}

llm_status llm_bench_plan_add(struct llm_bench_plan *p, int is_gen, const int64_t *v, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        LLM_CHECK(v[i] >= 1 && v[i] <= MAX_TOKENS, LLM_E_INVALID, "%s %" PRId64 ": tokens must be 1..%d",
                  is_gen ? "tg" : "pp", v[i], MAX_TOKENS);
        LLM_TRY(add_test(p, is_gen ? 0 : (int32_t)v[i], is_gen ? (int32_t)v[i] : 0));
    }
    return LLM_OK;
}

llm_status llm_bench_plan_add_pg(struct llm_bench_plan *p, const char *pair)
{
    int64_t v[2];
    size_t n;
    if (llm_bench_parse_list(pair, "pg", 1, MAX_TOKENS, v, 2, &n) || n != 2 || strchr(pair, '-'))
        return llm_error_set(LLM_E_INVALID, "pg: '%s' is not PROMPT,GEN (two token counts 1..%d)", pair,
                             MAX_TOKENS);
    return add_test(p, (int32_t)v[0], (int32_t)v[1]);
}

/* ---- suites --------------------------------------------------------------------- */

/* A list of integers: a YAML sequence of ints, a single int, or a string
 * in the comma-list syntax. */
static llm_status suite_ints(const struct llm_meta *m, const char *name, int64_t min, int64_t max,
                             int64_t *out, size_t *n)
{
    char what[300];
    snprintf(what, sizeof what, "%s:%zu: '%s'", name, m->line, m->key);
    *n = 0;
    if (m->kind == LLM_META_INT) {
        LLM_CHECK(m->i >= min && m->i <= max, LLM_E_FORMAT, "%s: %" PRId64 " is outside %" PRId64 "..%" PRId64,
                  what, m->i, min, max);
        out[(*n)++] = m->i;
        return LLM_OK;
    }
    if (m->kind == LLM_META_STR) {
        llm_status s = llm_bench_parse_list(m->s, what, min, max, out, LLM_BENCH_MAX_LIST, n);
        return s ? LLM_E_FORMAT : LLM_OK;
    }
    LLM_CHECK(m->kind == LLM_META_SEQ, LLM_E_FORMAT, "%s: expected a list of integers", what);
    for (size_t i = 0; i < m->n; i++) {
        const struct llm_meta *it = m->items[i];
        LLM_CHECK(it->kind == LLM_META_INT, LLM_E_FORMAT, "%s:%zu: '%s' item %zu is not an integer", name,
                  it->line ? it->line : m->line, m->key, i + 1);
        LLM_CHECK(it->i >= min && it->i <= max, LLM_E_FORMAT,
                  "%s:%zu: '%s' item %zu: %" PRId64 " is outside %" PRId64 "..%" PRId64, name,
                  it->line ? it->line : m->line, m->key, i + 1, it->i, min, max);
        LLM_CHECK(*n < LLM_BENCH_MAX_LIST, LLM_E_FORMAT, "%s: more than %d values", what, LLM_BENCH_MAX_LIST);
        out[(*n)++] = it->i;
    }
    LLM_CHECK(*n > 0, LLM_E_FORMAT, "%s: empty list", what);
    return LLM_OK;
}

static llm_status suite_one_int(const struct llm_meta *m, const char *name, int64_t min, int64_t max, int *out)
{
    LLM_CHECK(m->kind == LLM_META_INT && m->i >= min && m->i <= max, LLM_E_FORMAT,
              "%s:%zu: '%s' must be an integer in %" PRId64 "..%" PRId64, name, m->line, m->key, min, max);
    *out = (int)m->i;
    return LLM_OK;
}

static llm_status suite_strings(struct llm_bench_plan *p, const struct llm_meta *m, const char *name, int pg)
{
    size_t n = m->kind == LLM_META_SEQ ? m->n : 1;
    LLM_CHECK(m->kind == LLM_META_SEQ || m->kind == LLM_META_STR, LLM_E_FORMAT,
              "%s:%zu: '%s' must be a list of strings", name, m->line, m->key);
    LLM_CHECK(n > 0, LLM_E_FORMAT, "%s:%zu: '%s': empty list", name, m->line, m->key);
    for (size_t i = 0; i < n; i++) {
        const struct llm_meta *it = m->kind == LLM_META_SEQ ? m->items[i] : m;
        size_t line = it->line ? it->line : m->line;
        LLM_CHECK(it->kind == LLM_META_STR && it->slen > 0, LLM_E_FORMAT,
                  "%s:%zu: '%s' item %zu is not a non-empty string", name, line, m->key, i + 1);
        if (pg) {
            if (llm_bench_plan_add_pg(p, it->s)) {
                char where[300];
                snprintf(where, sizeof where, "%s:%zu", name, line);
                llm_error_prefix(where);
                return LLM_E_FORMAT;
            }
            continue;
        }
        LLM_CHECK(p->n_models < LLM_BENCH_MAX_LIST && p->n_owned < LLM_BENCH_MAX_LIST, LLM_E_FORMAT,
                  "%s:%zu: more than %d models", name, line, LLM_BENCH_MAX_LIST);
        char *dup = llm_strdup(it->s);
        if (!dup)
            return LLM_E_NOMEM;
        p->owned[p->n_owned++] = dup;
        p->models[p->n_models++] = dup;
    }
    return LLM_OK;
}

llm_status llm_bench_suite_parse(struct llm_bench_plan *p, const char *text, size_t len, const char *name)
{
    struct llm_meta *root;
    LLM_TRY(llm_meta_parse_yaml(&root, text, len, name));
    llm_status s = LLM_OK;
    int64_t v[LLM_BENCH_MAX_LIST];
    size_t n;
    for (size_t i = 0; i < root->n && !s; i++) {
        const struct llm_meta *m = root->items[i];
        const char *k = m->key;
        if (strcmp(k, "models") == 0)
            s = suite_strings(p, m, name, 0);
        else if (strcmp(k, "prompt") == 0 || strcmp(k, "gen") == 0) {
            if (!(s = suite_ints(m, name, 1, MAX_TOKENS, v, &n)))
                s = llm_bench_plan_add(p, k[0] == 'g', v, n);
        } else if (strcmp(k, "pg") == 0)
            s = suite_strings(p, m, name, 1);
        else if (strcmp(k, "threads") == 0) {
            if (!(s = suite_ints(m, name, 1, 256, v, &n)))
                for (size_t j = 0; j < n; j++)
                    p->threads[p->n_threads++] = (int)v[j];
        } else if (strcmp(k, "repetitions") == 0)
            s = suite_one_int(m, name, 1, 100000, &p->reps);
        else if (strcmp(k, "warmup") == 0)
            s = suite_one_int(m, name, 0, 100000, &p->warmup);
        else if (strcmp(k, "output") == 0) {
            if (m->kind != LLM_META_STR || llm_bench_format_parse(m->s, &p->format))
                s = llm_error_set(LLM_E_FORMAT, "%s:%zu: 'output' must be md, csv, json or jsonl", name, m->line);
            p->have_format = 1;
        } else
            s = llm_error_set(LLM_E_FORMAT,
                              "%s:%zu: unknown key '%s' (models, prompt, gen, pg, threads, repetitions, warmup, "
                              "output)",
                              name, m->line, k);
    }
    if (!s && p->n_models == 0)
        s = llm_error_set(LLM_E_FORMAT, "%s: no 'models'", name);
    if (!s && p->n_tests == 0)
        s = llm_error_set(LLM_E_FORMAT, "%s: no tests ('prompt', 'gen' or 'pg')", name);
    llm_meta_free(root);
    return s;
}

llm_status llm_bench_suite_load(struct llm_bench_plan *p, const char *path)
{
    char *text;
    size_t len;
    LLM_TRY(llm_read_file(path, 1u << 20, &text, &len));
    llm_status s = llm_bench_suite_parse(p, text, len, path);
    llm_free(text);
    return s;
}
