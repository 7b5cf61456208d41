/* batch.c: a batch file through the engine: lines in, one line out for
 * each, in order, resumable. */
#include "batch.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../common/alloc.h"
#include "../common/io.h"
#include "../common/num.h"

/* The input may be large but is held whole: lines are few hundred bytes. */
#define BATCH_MAX_INPUT ((size_t)1 << 34)

/* One input line. */
struct item {
    int64_t line;
    size_t off, len;    /* where it is in the input, without its '\n' */
    char *out;          /* its output line once done, until written */
    size_t out_len;
    int done, written;
};

struct run {
    const struct llm_batch_params *p;
    struct llm_batch_summary *sum;
    const struct llm_tokenizer *tok;
    FILE *out;
    const char *out_name;
    struct item *it;    /* (n_it) in input order */
    size_t n_it, next;  /* next: the first not yet written (input order) */
    int64_t created;
    llm_status werr;    /* the first write error */
};

static llm_status write_line(struct run *r, struct item *it)
{
    if (it->written)
        return LLM_OK;
    if (!r->werr && (fwrite(it->out, 1, it->out_len, r->out) != it->out_len || fflush(r->out)))
        r->werr = llm_error_set(LLM_E_IO, "%s: write error: %s", r->out_name, strerror(errno));
    it->written = 1;
    llm_free(it->out);
    it->out = NULL;
    return r->werr;
}

/* Item i is done: write what the order allows. */
static llm_status emit(struct run *r, size_t i)
{
    r->it[i].done = 1;
    if (r->p->completion_order)
        return write_line(r, &r->it[i]);
    while (r->next < r->n_it && r->it[r->next].done)
        LLM_TRY(write_line(r, &r->it[r->next++]));
    return LLM_OK;
}

static size_t item_of(const struct run *r, int64_t line)
{
    size_t lo = 0, hi = r->n_it;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (r->it[mid].line < line)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* The output line of request q into its item. */
static llm_status record(struct run *r, const struct llm_request *q,
                         const struct llm_choice_out *ch, int32_t n, int32_t prompt_tokens)
{
    size_t i = item_of(r, q->line);
    if (i >= r->n_it || r->it[i].line != q->line)
        return llm_error_set(LLM_E_INVALID, "batch: no input line %lld", (long long)q->line);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f)
        return LLM_E_NOMEM;
    llm_request_write_output(f, q, r->p->model_name, r->created, ch, n, prompt_tokens, r->tok);
    if (fclose(f)) {
        free(buf);
        return LLM_E_NOMEM;
    }
    /* open_memstream's buffer is malloc'd: copied into ours */
    r->it[i].out = llm_malloc(len + 1);
    if (!r->it[i].out) {
        free(buf);
        return LLM_E_NOMEM;
    }
    memcpy(r->it[i].out, buf, len + 1);
    r->it[i].out_len = len;
    free(buf);
    if (q->err_code) {
        r->sum->errors++;
    } else {
        r->sum->answered++;
        r->sum->prompt_tokens += prompt_tokens;
        for (int32_t k = 0; k < n; k++)
            r->sum->completion_tokens += ch[k].n_tokens;
    }
    return emit(r, i);
}

static llm_status on_done(void *ctx, const struct llm_request *q, const struct llm_choice_out *ch,
                          int32_t n, int32_t prompt_tokens)
{
    return record(ctx, q, ch, n, prompt_tokens);
}

/* ---- resume -------------------------------------------------------------- */

/* What an earlier run answered: its lines (sorted by line number) and
 * their custom_ids. */
struct answer {
    int64_t line;
    char *cid;
};

struct answered {
    struct answer *a;
    size_t n, cap;
};

static int cmp_answer(const void *x, const void *y)
{
    const struct answer *a = x, *b = y;
    return (a->line > b->line) - (a->line < b->line);
}

static void answered_free(struct answered *a)
{
    for (size_t i = 0; i < a->n; i++)
        llm_free(a->a[i].cid);
    llm_free(a->a);
    memset(a, 0, sizeof *a);
}

/* Read the output of an earlier run. A last line without its newline (a
 * run killed while writing it) is cut off the file, to be answered again. */
static llm_status read_answered(const char *path, struct answered *a)
{
    char *text;
    size_t len;
    memset(a, 0, sizeof *a);
    llm_status s = llm_read_file(path, BATCH_MAX_INPUT, &text, &len);
    if (s == LLM_E_IO && errno == ENOENT) {
        llm_error_clear();
        return LLM_OK; /* nothing to resume: a first run */
    }
    LLM_TRY(s);
    size_t complete = len;
    while (complete && text[complete - 1] != '\n')
        complete--;
    if (complete < len && truncate(path, (off_t)complete)) {
        llm_free(text);
        return llm_error_set(LLM_E_IO, "%s: cannot cut its unfinished last line: %s", path,
                             strerror(errno));
    }
    int64_t lineno = 0;
    size_t at = 0, l;
    for (const char *line; !s && (line = llm_next_line(text, complete, &at, &l));) {
        lineno++;
        if (!l)
            continue;
        void *p = a->a;
        if ((s = llm_grow(&p, &a->cap, a->n + 1, sizeof *a->a)))
            break;
        a->a = p;
        s = llm_request_output_key(line, l, &a->a[a->n].line, &a->a[a->n].cid);
        if (s == LLM_E_FORMAT)
            s = llm_error_set(LLM_E_FORMAT, "%s:%lld: not an output line of llm-run --batch "
                              "(cannot resume from it)", path, (long long)lineno);
        else if (!s)
            a->n++;
    }
    llm_free(text);
    if (s) {
        answered_free(a);
        return s;
    }
    qsort(a->a, a->n, sizeof *a->a, cmp_answer);
    return LLM_OK;
}

/* What an earlier run answered of `line`, or NULL. */
static const struct answer *answered_find(const struct answered *a, int64_t line)
{
    const struct answer key = { .line = line };
    return a->n ? bsearch(&key, a->a, a->n, sizeof *a->a, cmp_answer) : NULL;
}

/* ---- progress and summary ------------------------------------------------ */

static void progress(const struct run *r, const struct llm_engine_stats *st, double dt,
                     int64_t dpre, int64_t ddec)
{
    const int64_t done = r->sum->answered + r->sum->errors + r->sum->skipped;
    fprintf(stderr, "\rllm-run: %lld/%lld done, %lld running, %lld waiting; prefill %.0f t/s, "
            "decode %.0f t/s; KV %d/%d blocks (%d cached); prefix hits %.0f%%; %lld "
            "preemptions\033[K", (long long)done, (long long)r->sum->lines,
            (long long)st->running, (long long)st->waiting, dt > 0 ? dpre / dt : 0.0,
            dt > 0 ? ddec / dt : 0.0, st->kv_used, st->kv_blocks, st->kv_cached,
            st->lookup_tokens ? 100.0 * (double)st->hit_tokens / (double)st->lookup_tokens : 0.0,
            (long long)st->preemptions);
    fflush(stderr);
}

void llm_batch_summary_json(FILE *f, const struct llm_batch_summary *s)
{
    const struct llm_engine_stats *e = &s->engine;
    fprintf(f, "{\"requests\":%lld,\"answered\":%lld,\"errors\":%lld,\"skipped\":%lld,"
            "\"duplicate_custom_ids\":%lld,\"interrupted\":%s,\"seconds\":%.3f,"
            "\"prompt_tokens\":%lld,\"completion_tokens\":%lld,\"requests_per_s\":%.3f,"
            "\"output_tokens_per_s\":%.2f,\"steps\":%lld,\"prefill_tokens\":%lld,"
            "\"decode_tokens\":%lld,\"preemptions\":%lld,\"prefix_lookup_tokens\":%lld,"
            "\"prefix_hit_tokens\":%lld,\"prefix_hit_rate\":%.4f,\"prefix_evicted_blocks\":%lld,"
            "\"kv_blocks\":%d,\"kv_blocks_peak\":%d,\"ttft_s\":{\"p50\":%.4f,\"p90\":%.4f,"
            "\"p99\":%.4f},\"tpot_s\":{\"p50\":%.5f,\"p90\":%.5f,\"p99\":%.5f},\"e2e_s\":{"
            "\"p50\":%.4f,\"p90\":%.4f,\"p99\":%.4f}}\n",
            (long long)s->lines, (long long)s->answered, (long long)s->errors,
            (long long)s->skipped, (long long)s->duplicates, s->interrupted ? "true" : "false",
            s->seconds, (long long)s->prompt_tokens, (long long)s->completion_tokens,
            s->seconds > 0 ? (double)(s->answered + s->errors) / s->seconds : 0.0,
            s->seconds > 0 ? (double)s->completion_tokens / s->seconds : 0.0,
            (long long)e->steps, (long long)e->prefill_tokens, (long long)e->decode_tokens,
            (long long)e->preemptions, (long long)e->lookup_tokens, (long long)e->hit_tokens,
            e->lookup_tokens ? (double)e->hit_tokens / (double)e->lookup_tokens : 0.0,
            (long long)e->evicted_blocks, e->kv_blocks, e->kv_peak, s->ttft[0], s->ttft[1],
            s->ttft[2], s->tpot[0], s->tpot[1], s->tpot[2], s->e2e[0], s->e2e[1], s->e2e[2]);
}

/* ---- the run ------------------------------------------------------------- */

const char *llm_batch_next_line(const char *text, size_t len, size_t *at, size_t *l,
                                int64_t *lineno)
{
    for (const char *line; (line = llm_next_line(text, len, at, l));) {
        ++*lineno;
        while (*l && line[*l - 1] == '\r')
            --*l;
        if (strspn(line, " \t\r") < *l) /* a blank line is not a request */
            return line;
    }
    return NULL;
}

llm_status llm_batch_prepare(struct llm_request *q, struct llm_context *c, const char *tmpl,
                             struct llm_grammar_set *gs, int32_t max_seqs)
{
    if (q->err_code)
        return LLM_OK;
    LLM_TRY(llm_request_tokenize(q, llm_context_model(c), tmpl, llm_context_n_ctx(c)));
    const struct llm_kv *kv = llm_context_kv(c);
    const int64_t need = ((int64_t)q->n_ids + kv->p.block_size - 1) / kv->p.block_size;
    char msg[160];
    if (q->err_code)
        return LLM_OK;
    if (q->n > max_seqs) {
        q->err_code = "invalid_request";
        snprintf(msg, sizeof msg, "body.n: %d choices, more than the %d sequences that run "
                 "at once (--max-seqs)", q->n, max_seqs);
    } else if (need > kv->p.n_blocks) {
        q->err_code = "context_length_exceeded";
        snprintf(msg, sizeof msg, "the prompt of %zu tokens needs %lld KV blocks, more than "
                 "the pool's %d (--kv-mem, --kv-blocks)", q->n_ids, (long long)need,
                 kv->p.n_blocks);
    } else if (q->gbnf && !gs) {
        q->err_code = "unsupported";
        snprintf(msg, sizeof msg, "body.response_format: not available here");
    } else if (q->gbnf) {
        llm_status s = llm_grammar_set_get(gs, q->gbnf, "response_format", &q->gmask);
        if (s == LLM_E_NOMEM)
            return s;
        if (!s)
            return LLM_OK;
        q->err_code = "invalid_request";
        snprintf(msg, sizeof msg, "%s", llm_error_detail(s));
        llm_error_clear();
    } else
        return LLM_OK;
    return (q->err_msg = llm_strdup(msg)) ? LLM_OK : LLM_E_NOMEM;
}

/* p50, p90 and p99 of x (n); x is sorted in place. */
static void percentiles(double *x, size_t n, double out[3])
{
    static const double p[3] = { 50, 90, 99 };
    qsort(x, n, sizeof *x, llm_cmp_double);
    for (int k = 0; k < 3; k++)
        out[k] = n ? llm_percentile_sorted(x, n, p[k]) : 0.0;
}

static llm_status latencies(const struct llm_engine *e, struct llm_batch_summary *sum)
{
    size_t n;
    const struct llm_engine_latency *l = llm_engine_latencies(e, &n);
    double *x = llm_malloc((n + 1) * sizeof *x);
    if (!x)
        return LLM_E_NOMEM;
    for (int k = 0; k < 3; k++) {
        size_t m = 0;
        for (size_t i = 0; i < n; i++)
            if (k != 2 || l[i].tokens > 1)
                x[m++] = k == 0 ? l[i].ttft : k == 1 ? l[i].e2e : l[i].tpot;
        percentiles(x, m, k == 0 ? sum->ttft : k == 1 ? sum->e2e : sum->tpot);
    }
    llm_free(x);
    return LLM_OK;
}

static int cid_cmp(const void *a, const void *b)
{
    const char *const *x = a, *const *y = b;
    return strcmp(*x, *y);
}

/* Count the custom_ids that an earlier line has too (each is reported). */
static void duplicates(struct run *r, char **cids, size_t n)
{
    qsort(cids, n, sizeof *cids, cid_cmp);
    for (size_t i = 1; i < n; i++)
        if (!strcmp(cids[i], cids[i - 1])) {
            r->sum->duplicates++;
            if (r->sum->duplicates <= 10)
                fprintf(stderr, "llm-run: %s: custom_id \"%.60s\" is used by more than one line "
                        "(each is answered)\n",
                        strcmp(r->p->in_path, "-") ? r->p->in_path : "<stdin>", cids[i]);
        }
}

llm_status llm_batch_run(struct llm_context *c, const struct llm_batch_params *p,
                         struct llm_batch_summary *sum)
{
    memset(sum, 0, sizeof *sum);
    struct llm_model *m = llm_context_model(c);
    struct run r = { .p = p, .sum = sum, .tok = llm_model_tokenizer(m), .created = time(NULL) };
    const double t0 = llm_now_s();
    const int to_stdout = !p->out_path || !strcmp(p->out_path, "-");
    r.out_name = to_stdout ? "<stdout>" : p->out_path;
    struct answered prev = { 0 };
    if (p->resume) {
        if (to_stdout)
            return llm_error_set(LLM_E_INVALID, "--resume needs -o FILE (the output to resume)");
        LLM_TRY(read_answered(p->out_path, &prev));
    }
    char *text = NULL;
    size_t len;
    llm_status s = llm_read_file(p->in_path, BATCH_MAX_INPUT, &text, &len);
    if (s) {
        answered_free(&prev);
        return s;
    }
    /* the items: every non-blank line */
    size_t cap = 0, at = 0, l;
    int64_t lineno = 0;
    for (const char *line; !s && (line = llm_batch_next_line(text, len, &at, &l, &lineno));) {
        void *q = r.it;
        if (!(s = llm_grow(&q, &cap, r.n_it + 1, sizeof *r.it))) {
            r.it = q;
            r.it[r.n_it++] = (struct item){ .line = lineno, .off = (size_t)(line - text), .len = l };
        }
    }
    sum->lines = (int64_t)r.n_it;
    struct llm_engine *e = NULL;
    struct llm_engine_callbacks cb = { on_done, &r };
    struct llm_grammar_set *gs = NULL; /* response_format grammars; outlives the engine */
    if (!s)
        s = llm_grammar_set_new(&gs, r.tok);
    if (!s)
        s = llm_engine_new(&e, c, &p->engine, &cb);
    if (!s) {
        r.out = to_stdout ? stdout : fopen(p->out_path, p->resume ? "a" : "w");
        if (!r.out)
            s = llm_error_set(LLM_E_IO, "%s: %s", p->out_path, strerror(errno));
    }
    /* read, check and queue every line; bad ones are answered at once */
    char **cids = llm_calloc(r.n_it + 1, sizeof *cids);
    size_t n_cids = 0;
    if (!cids && !s)
        s = LLM_E_NOMEM;
    for (size_t i = 0; !s && i < r.n_it; i++) {
        struct llm_request q;
        s = llm_request_parse(&q, text + r.it[i].off, r.it[i].len, r.it[i].line, &p->defaults);
        if (s)
            break;
        if (q.custom_id && !(cids[n_cids++] = llm_strdup(q.custom_id)))
            s = LLM_E_NOMEM;
        const struct answer *k = p->resume ? answered_find(&prev, r.it[i].line) : NULL;
        if (!s && k) {
            const char *was = k->cid;
            if ((was == NULL) != (q.custom_id == NULL) ||
                (was && strcmp(was, q.custom_id)))
                s = llm_error_set(LLM_E_INVALID, "%s: line %lld has custom_id \"%.60s\" but %s "
                                  "answered it as \"%.60s\": not the same input (cannot resume)",
                                  p->in_path, (long long)r.it[i].line,
                                  q.custom_id ? q.custom_id : "(none)", p->out_path,
                                  was ? was : "(none)");
            r.it[i].done = r.it[i].written = 1;
            sum->skipped++;
            llm_request_free(&q);
            continue;
        }
        if (!s)
            s = llm_batch_prepare(&q, c, p->defaults.chat_template, gs, p->engine.max_seqs);
        if (!s && q.err_code)
            s = record(&r, &q, NULL, 0, 0);
        else if (!s)
            s = llm_engine_add(e, &q);
        llm_request_free(&q);
    }
    if (!s)
        duplicates(&r, cids, n_cids);
    for (size_t i = 0; cids && i < n_cids; i++)
        llm_free(cids[i]);
    llm_free(cids);
    llm_free(text);
    answered_free(&prev);
    /* the engine runs until every line is answered or the run is stopped */
    double t_last = llm_now_s();
    int64_t pre_last = 0, dec_last = 0;
    FILE *trace = NULL;
    if (!s && p->trace_path && !(trace = fopen(p->trace_path, "w")))
        s = llm_error_set(LLM_E_IO, "%s: %s", p->trace_path, strerror(errno));
    while (!s && llm_engine_pending(e)) {
        if (p->interrupt && *p->interrupt) {
            sum->interrupted = 1;
            break;
        }
        s = llm_engine_step(e);
        double t = llm_now_s();
        if (!s && trace) {
            struct llm_engine_stats st;
            llm_engine_stats(e, &st);
            fprintf(trace, "{\"t\":%.6f,\"step\":%lld,\"running\":%lld,\"waiting\":%lld,"
                    "\"finished\":%lld,\"blocks\":%d,\"blocks_used\":%d,\"blocks_free\":%d,"
                    "\"blocks_cached\":%d,\"blocks_idle\":%d,\"blocks_logical\":%d,\"block_size\":%d,\"tokens\":%lld,\"prefill\":%d,"
                    "\"decode\":%d,\"lookup_tokens\":%lld,\"hit_tokens\":%lld,"
                    "\"preemptions\":%lld}\n",
                    t - t0, (long long)st.steps, (long long)st.running, (long long)st.waiting,
                    (long long)st.finished, st.kv_blocks, st.kv_used, st.kv_free, st.kv_cached,
                    st.kv_idle, st.kv_logical, llm_context_kv(c)->p.block_size, (long long)st.kv_tokens, st.last_prefill,
                    st.last_decode, (long long)st.lookup_tokens, (long long)st.hit_tokens,
                    (long long)st.preemptions);
            if (ferror(trace))
                s = llm_error_set(LLM_E_IO, "%s: write error", p->trace_path);
        }
        if (p->progress && t - t_last >= 1.0) {
            struct llm_engine_stats st;
            llm_engine_stats(e, &st);
            progress(&r, &st, t - t_last, st.prefill_tokens - pre_last,
                     st.decode_tokens - dec_last);
            t_last = t;
            pre_last = st.prefill_tokens;
            dec_last = st.decode_tokens;
        }
    }
    if (trace && fclose(trace) && !s)
        s = llm_error_set(LLM_E_IO, "%s: write error: %s", p->trace_path, strerror(errno));
    if (e) {
        llm_engine_stats(e, &sum->engine);
        llm_status ls = latencies(e, sum);
        if (!s)
            s = ls;
    }
    if (p->progress)
        fputc('\n', stderr);
    /* finished lines still held for the order go out now */
    for (size_t i = 0; i < r.n_it; i++)
        if (r.it[i].done && !r.it[i].written) {
            llm_status ws = write_line(&r, &r.it[i]);
            if (!s)
                s = ws;
        }
    for (size_t i = 0; i < r.n_it; i++)
        llm_free(r.it[i].out);
    llm_free(r.it);
    llm_engine_free(e);
    llm_grammar_set_free(gs);
    if (r.out && !to_stdout && fclose(r.out) && !s)
        s = llm_error_set(LLM_E_IO, "%s: write error: %s", p->out_path, strerror(errno));
    sum->seconds = llm_now_s() - t0;
    if (!s && r.werr)
        s = r.werr;
    if (!s && p->stats_json) {
        FILE *f = strcmp(p->stats_json, "-") ? fopen(p->stats_json, "w") : stdout;
        if (!f)
            s = llm_error_set(LLM_E_IO, "%s: %s", p->stats_json, strerror(errno));
        else {
            llm_batch_summary_json(f, sum);
            if ((f != stdout && fclose(f)) || (f == stdout && fflush(f)))
                s = llm_error_set(LLM_E_IO, "%s: write error", p->stats_json);
        }
    }
    if (!s && sum->interrupted)
        s = llm_error_set(LLM_E_INTERRUPTED, "interrupted: %lld of %lld lines answered (run "
                          "again with --resume to finish)",
                          (long long)(sum->answered + sum->errors + sum->skipped),
                          (long long)sum->lines);
    return s;
}
