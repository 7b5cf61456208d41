/* batch.c: a batch file through the engine: lines in, one line out for
 * each, in order, resumable. */
#include "batch.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <fcntl.h>

#include "../common/alloc.h"
#include "../common/io.h"
#include "../common/num.h"
#include "../model/kvstate.h"
#include "handoff.h"

/* The input may be large but is held whole: lines are few hundred bytes. */
#define BATCH_MAX_INPUT ((size_t)1 << 34)

/* One input line. */
struct item {
    int64_t line;
    size_t off, len;    /* where it is in the input, without its '\n' (not decode) */
    char *out;          /* its output line once done, until written */
    size_t out_len;
    int done, written;
    int got;            /* decode: its handoff item came */
};

/* What an earlier run answered (--resume). */
struct answered;

struct run {
    const struct llm_batch_params *p;
    struct llm_batch_summary *sum;
    struct llm_context *c;
    const struct llm_tokenizer *tok;
    struct llm_engine *e;
    struct llm_grammar_set *gs;     /* response_format grammars; outlives the engine */
    const struct answered *prev;
    const char *in_name;
    char *text;                     /* (len) the input file (not decode) */
    FILE *out;
    const char *out_name;
    struct llm_handoff_writer hw;   /* prefill: the stream out */
    struct llm_state_info want;     /* decode: what a state must be for this context */
    struct item *it;    /* (n_it) in input order */
    size_t n_it, next;  /* next: the first not yet written (input order) */
    char **cids;        /* (n_cids) the custom_ids seen */
    size_t n_cids, cap_cids;
    int64_t created;
    llm_status werr;    /* the first write error */
    char serr_msg[1024];/* decode: how the stream was cut or damaged */
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
            "\"kv_blocks\":%d,\"kv_blocks_peak\":%d,\"kv_window_slots\":%d,"
            "\"kv_window_slots_peak\":%d,\"ttft_s\":{\"p50\":%.4f,\"p90\":%.4f,"
            "\"p99\":%.4f},\"tpot_s\":{\"p50\":%.5f,\"p90\":%.5f,\"p99\":%.5f},\"e2e_s\":{"
            "\"p50\":%.4f,\"p90\":%.4f,\"p99\":%.4f},\"itl_s\":{\"p50\":%.5f,\"p90\":%.5f,"
            "\"p99\":%.5f},\"loaded_states\":%lld",
            (long long)s->lines, (long long)s->answered, (long long)s->errors,
            (long long)s->skipped, (long long)s->duplicates, s->interrupted ? "true" : "false",
            s->seconds, (long long)s->prompt_tokens, (long long)s->completion_tokens,
            s->seconds > 0 ? (double)(s->answered + s->errors) / s->seconds : 0.0,
            s->seconds > 0 ? (double)s->completion_tokens / s->seconds : 0.0,
            (long long)e->steps, (long long)e->prefill_tokens, (long long)e->decode_tokens,
            (long long)e->preemptions, (long long)e->lookup_tokens, (long long)e->hit_tokens,
            e->lookup_tokens ? (double)e->hit_tokens / (double)e->lookup_tokens : 0.0,
            (long long)e->evicted_blocks, e->kv_blocks, e->kv_peak, e->kv_slots, e->kv_slots_peak,
            s->ttft[0], s->ttft[1],
            s->ttft[2], s->tpot[0], s->tpot[1], s->tpot[2], s->e2e[0], s->e2e[1], s->e2e[2],
            s->itl[0], s->itl[1], s->itl[2], (long long)s->loaded);
    if (s->speculating)
        fprintf(f, ",\"speculation\":{\"drafted\":%lld,\"accepted\":%lld,\"acceptance_rate\":%.4f,"
                "\"draft_rounds\":%lld,\"mean_accepted_length\":%.3f,\"target_passes\":%lld,"
                "\"tokens\":%lld,\"passes_per_token\":%.4f}", (long long)e->spec_drafted,
                (long long)e->spec_accepted, e->spec_drafted ? (double)e->spec_accepted /
                (double)e->spec_drafted : 0.0, (long long)e->spec_rounds, e->spec_rounds
                ? (double)e->spec_accepted / (double)e->spec_rounds : 0.0,
                (long long)e->spec_passes, (long long)e->spec_tokens, e->spec_tokens
                ? (double)e->spec_passes / (double)e->spec_tokens : 0.0);
    fputs("}\n", f);
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
    const double *itl = llm_engine_itls(e, &n);
    if (!n)
        return LLM_OK;
    if (!(x = llm_malloc(n * sizeof *x)))
        return LLM_E_NOMEM;
    memcpy(x, itl, n * sizeof *x);
    percentiles(x, n, sum->itl);
    llm_free(x);
    return LLM_OK;
}

static int cid_cmp(const void *a, const void *b)
{
    const char *const *x = a, *const *y = b;
    return strcmp(*x, *y);
}

/* Count the custom_ids that an earlier line has too (each is reported). */
static void duplicates(struct run *r)
{
    if (!r->n_cids)
        return;
    qsort(r->cids, r->n_cids, sizeof *r->cids, cid_cmp);
    for (size_t i = 1; i < r->n_cids; i++)
        if (!strcmp(r->cids[i], r->cids[i - 1])) {
            r->sum->duplicates++;
            if (r->sum->duplicates <= 10)
                fprintf(stderr, "llm-run: %s: custom_id \"%.60s\" is used by more than one line "
                        "(each is answered)\n", r->in_name, r->cids[i]);
        }
}

/* ---- the roles ----------------------------------------------------------- */

/* Is the state (len bytes) one that line q can continue from? A state that
 * is damaged, of another model or cache, or of another prompt gets the
 * line an error record (LLM_OK); LLM_E_NOMEM only. */
static llm_status check_state(struct run *r, struct llm_request *q, void *state, size_t len)
{
    char name[256];
    snprintf(name, sizeof name, "%s: line %lld: its state", r->in_name, (long long)q->line);
    FILE *f = fmemopen(state, len, "rb");
    if (!f)
        return LLM_E_NOMEM;
    struct llm_state_reader *rd = NULL;
    struct llm_state_info in;
    int32_t *toks = NULL;
    float *logits = NULL;
    llm_status s = llm_state_open_stream(&rd, f, name, 1, &in);
    if (!s)
        s = llm_state_expect(&in, &r->want, name);
    if (!s && (size_t)in.n_tokens != q->n_ids)
        s = llm_error_set(LLM_E_INVALID, "%s holds %d tokens where this line's prompt has %zu "
                          "(another chat template or tokenizer?)", name, in.n_tokens, q->n_ids);
    if (!s) {
        toks = llm_malloc((size_t)in.n_tokens * sizeof *toks);
        logits = llm_malloc((size_t)in.n_vocab * sizeof *logits);
        s = toks && logits ? LLM_OK : LLM_E_NOMEM;
    }
    if (!s)
        s = llm_state_read_tokens(rd, toks, logits);
    if (!s && memcmp(toks, q->ids, q->n_ids * sizeof *toks))
        s = llm_error_set(LLM_E_INVALID, "%s is of other tokens than this line's prompt "
                          "(another chat template or tokenizer?)", name);
    if (!s) /* every record's checksum, so that admission cannot fail on it */
        s = llm_state_read_rows(rd, NULL, NULL);
    llm_state_close(rd);
    llm_free(toks);
    llm_free(logits);
    if (s == LLM_E_NOMEM || !s)
        return s;
    q->err_code = "invalid_state";
    q->err_msg = llm_strdup(llm_error_detail(s));
    llm_error_clear();
    return q->err_msg ? LLM_OK : LLM_E_NOMEM;
}

/* Item i's line (len bytes), read: skipped when answered before (--resume),
 * answered at once when bad, else queued (decode: with its prompt's state,
 * taken over when one came; prefill: for its prompt only). */
static llm_status take_line(struct run *r, size_t i, const char *line, size_t len, void **state,
                            size_t state_len)
{
    const struct llm_batch_params *p = r->p;
    struct llm_request q;
    LLM_TRY(llm_request_parse(&q, line, len, r->it[i].line, &p->defaults));
    llm_status s = LLM_OK;
    if (q.custom_id) {
        void *c = r->cids;
        s = llm_grow(&c, &r->cap_cids, r->n_cids + 1, sizeof *r->cids);
        r->cids = c;
        if (!s && !(r->cids[r->n_cids++] = llm_strdup(q.custom_id)))
            s = LLM_E_NOMEM;
    }
    const struct answer *k = p->resume ? answered_find(r->prev, r->it[i].line) : NULL;
    if (!s && k) {
        const char *was = k->cid;
        if ((was == NULL) != (q.custom_id == NULL) || (was && strcmp(was, q.custom_id)))
            s = llm_error_set(LLM_E_INVALID, "%s: line %lld has custom_id \"%.60s\" but %s "
                              "answered it as \"%.60s\": not the same input (cannot resume)",
                              r->in_name, (long long)r->it[i].line,
                              q.custom_id ? q.custom_id : "(none)", p->out_path,
                              was ? was : "(none)");
        r->it[i].done = r->it[i].written = 1;
        r->sum->skipped++;
        llm_request_free(&q);
        return s;
    }
    if (!s)
        s = llm_batch_prepare(&q, r->c, p->defaults.chat_template, r->gs, p->engine.max_seqs);
    if (!s && !q.err_code && state && *state)
        s = check_state(r, &q, *state, state_len);
    if (!s && q.err_code && p->role == LLM_BATCH_PREFILL) {
        /* the decode side reads the line and answers it */
        s = llm_handoff_write_item(&r->hw, q.line, line, len, NULL, 0);
        r->it[i].done = r->it[i].written = 1;
        r->sum->errors++;
    } else if (!s && q.err_code) {
        s = record(r, &q, NULL, 0, 0);
    } else if (!s) {
        if (p->role == LLM_BATCH_PREFILL)
            q.n = 1; /* the choices are forked on the decode side */
        if (state && *state) {
            q.state = *state;
            q.state_len = state_len;
            *state = NULL;
            r->sum->loaded++;
        }
        s = llm_engine_add(r->e, &q);
    }
    llm_request_free(&q);
    return s;
}

/* Prefill: a prompt is computed; its line and state go into the stream. */
static llm_status on_prefilled(void *ctx, const struct llm_request *q, int32_t slot,
                               const int32_t *tokens, int32_t n, const float *logits)
{
    struct run *r = ctx;
    size_t i = item_of(r, q->line);
    if (i >= r->n_it || r->it[i].line != q->line)
        return llm_error_set(LLM_E_INVALID, "batch: no input line %lld", (long long)q->line);
    void *buf;
    size_t len;
    LLM_TRY(llm_kvstate_save_mem(r->c, slot, tokens, n, logits, &q->sp, r->p->kv_compress, &buf,
                                 &len));
    llm_status s = llm_handoff_write_item(&r->hw, q->line, r->text + r->it[i].off, r->it[i].len,
                                          buf, len);
    llm_free(buf);
    r->it[i].done = r->it[i].written = 1;
    r->sum->answered++;
    r->sum->prompt_tokens += n;
    return s;
}

/* The input file's non-blank lines as items. */
static llm_status read_items(struct run *r)
{
    size_t len;
    LLM_TRY(llm_read_file(r->p->in_path, BATCH_MAX_INPUT, &r->text, &len));
    size_t cap = 0, at = 0, l;
    int64_t lineno = 0;
    for (const char *line; (line = llm_batch_next_line(r->text, len, &at, &l, &lineno));) {
        void *q = r->it;
        LLM_TRY(llm_grow(&q, &cap, r->n_it + 1, sizeof *r->it));
        r->it = q;
        r->it[r->n_it++] = (struct item){ .line = lineno, .off = (size_t)(line - r->text),
                                          .len = l };
    }
    return LLM_OK;
}

/* Decode: the items the stream has ready go to the engine; with wait_ms,
 * it waits that long for one. *end: the stream is over (*serr: how, when
 * it was cut or damaged; the items before it are served). */
static llm_status pull(struct run *r, struct llm_handoff_reader *rd, int wait_ms, int *end,
                       llm_status *serr)
{
    while (!*end) {
        struct llm_engine_stats st;
        llm_engine_stats(r->e, &st);
        if (st.waiting >= r->p->engine.max_seqs) /* enough queued: the stream waits */
            return LLM_OK;
        struct llm_handoff_item hi;
        int got;
        llm_status s = llm_handoff_next(rd, wait_ms, &hi, &got);
        if (s == LLM_E_NOMEM)
            return s;
        if (s || got < 0) {
            *end = 1;
            *serr = s;
            if (s) /* kept: the detail is overwritten by what runs until it is reported */
                snprintf(r->serr_msg, sizeof r->serr_msg, "%s", llm_error_detail(s));
            return LLM_OK;
        }
        if (!got)
            return LLM_OK;
        size_t i = item_of(r, hi.line);
        if (r->it[i].got) {
            s = llm_error_set(LLM_E_FORMAT, "%s: the handoff stream has line %lld twice (a "
                              "damaged stream)", r->in_name, (long long)hi.line);
            llm_handoff_item_free(&hi);
            *end = 1;
            *serr = s;
            snprintf(r->serr_msg, sizeof r->serr_msg, "%s", llm_error_detail(s));
            return LLM_OK;
        }
        r->it[i].got = 1;
        s = take_line(r, i, hi.text, hi.len, &hi.state, hi.state_len);
        llm_handoff_item_free(&hi);
        LLM_TRY(s);
        wait_ms = 0;
    }
    return LLM_OK;
}

/* Decode: the stream's header: the items, and this model's check. */
static llm_status open_stream(struct run *r, int fd, struct llm_handoff_reader **rd)
{
    uint64_t id;
    uint32_t types;
    const int64_t *lines;
    size_t n;
    LLM_TRY(llm_handoff_open(rd, fd, r->in_name, &id, &types, &lines, &n));
    llm_status s = llm_kvstate_info(r->c, &r->want);
    struct llm_state_info got = r->want; /* the stream's model and types, checked as a state's */
    got.model_id = id;
    got.kv_type_k = (enum llm_type)(types & 0xffff);
    got.kv_type_v = (enum llm_type)(types >> 16);
    if (!s)
        s = llm_state_expect(&got, &r->want, r->in_name);
    if (!s && !(r->it = llm_calloc(n + 1, sizeof *r->it)))
        s = LLM_E_NOMEM;
    for (size_t i = 0; !s && i < n; i++)
        r->it[i].line = lines[i];
    if (!s)
        r->n_it = n;
    return s;
}

static void write_trace(FILE *trace, struct run *r, double t)
{
    struct llm_engine_stats st;
    llm_engine_stats(r->e, &st);
    fprintf(trace, "{\"t\":%.6f,\"step\":%lld,\"running\":%lld,\"waiting\":%lld,"
            "\"finished\":%lld,\"blocks\":%d,\"blocks_used\":%d,\"blocks_free\":%d,"
            "\"blocks_cached\":%d,\"blocks_idle\":%d,\"blocks_logical\":%d,\"block_size\":%d,"
            "\"tokens\":%lld,\"prefill\":%d,\"decode\":%d,\"lookup_tokens\":%lld,"
            "\"hit_tokens\":%lld,\"preemptions\":%lld}\n",
            t, (long long)st.steps, (long long)st.running, (long long)st.waiting,
            (long long)st.finished, st.kv_blocks, st.kv_used, st.kv_free, st.kv_cached,
            st.kv_idle, st.kv_logical, llm_context_kv(r->c)->p.block_size,
            (long long)st.kv_tokens, st.last_prefill, st.last_decode,
            (long long)st.lookup_tokens, (long long)st.hit_tokens, (long long)st.preemptions);
}

llm_status llm_batch_run(struct llm_context *c, const struct llm_batch_params *p,
                         struct llm_batch_summary *sum)
{
    memset(sum, 0, sizeof *sum);
    struct llm_model *m = llm_context_model(c);
    struct run r = { .p = p, .sum = sum, .c = c, .tok = llm_model_tokenizer(m),
                     .created = time(NULL) };
    const double t0 = llm_now_s();
    const int to_stdout = !p->out_path || !strcmp(p->out_path, "-");
    const int decode = p->role == LLM_BATCH_DECODE, prefill = p->role == LLM_BATCH_PREFILL;
    r.out_name = to_stdout ? "<stdout>" : p->out_path;
    r.in_name = strcmp(p->in_path, "-") ? p->in_path : "<stdin>";
    struct answered prev = { 0 };
    r.prev = &prev;
    if (p->resume) {
        if (to_stdout || prefill)
            return llm_error_set(LLM_E_INVALID, "--resume needs -o FILE (the output to resume)%s",
                                 prefill ? " of the decode side" : "");
        LLM_TRY(read_answered(p->out_path, &prev));
    }
    llm_status s = LLM_OK;
    struct llm_handoff_reader *rd = NULL;
    int fd = -1;
    if (decode) {
        fd = strcmp(p->in_path, "-") ? open(p->in_path, O_RDONLY | O_CLOEXEC) : 0;
        if (fd < 0)
            s = llm_error_set(errno == ENOENT ? LLM_E_NOTFOUND : LLM_E_IO, "%s: %s", p->in_path,
                              strerror(errno));
        if (!s)
            s = open_stream(&r, fd, &rd);
        /* lines answered before are known now (so that the order does not
         * wait for them); their items are checked and counted as they come */
        for (size_t i = 0; !s && i < r.n_it; i++)
            if (p->resume && answered_find(&prev, r.it[i].line))
                r.it[i].done = r.it[i].written = 1;
        if (!s)
            s = llm_handoff_start(rd, (size_t)p->engine.max_seqs, (size_t)1 << 30);
    } else {
        s = read_items(&r);
    }
    sum->lines = (int64_t)r.n_it;
    struct llm_engine_params ep = p->engine;
    ep.prefill_only = prefill;
    ep.record_itl = p->stats_json != NULL;
    struct llm_engine_callbacks cb = { .done = prefill ? NULL : on_done,
                                       .prefilled = on_prefilled, .ctx = &r };
    if (!s)
        s = llm_grammar_set_new(&r.gs, r.tok);
    if (!s)
        s = llm_engine_new(&r.e, c, &ep, &cb);
    int hw_open = 0;
    if (!s && prefill) {
        uint64_t id;
        int64_t *lines = llm_malloc((r.n_it + 1) * sizeof *lines);
        s = lines ? llm_model_id(m, &id) : LLM_E_NOMEM;
        for (size_t i = 0; !s && i < r.n_it; i++)
            lines[i] = r.it[i].line;
        const struct llm_kv *kv = llm_context_kv(c);
        if (!s)
            s = llm_handoff_write_open(&r.hw, to_stdout ? "-" : p->out_path, id,
                                       (uint32_t)kv->p.type_k | (uint32_t)kv->p.type_v << 16,
                                       lines, r.n_it);
        hw_open = !s;
        llm_free(lines);
    } else if (!s) {
        r.out = to_stdout ? stdout : fopen(p->out_path, p->resume ? "a" : "w");
        if (!r.out)
            s = llm_error_set(LLM_E_IO, "%s: %s", p->out_path, strerror(errno));
    }
    /* a file's lines are read, checked and queued at once; bad ones are
     * answered at once */
    for (size_t i = 0; !s && !decode && i < r.n_it; i++)
        s = take_line(&r, i, r.text + r.it[i].off, r.it[i].len, NULL, 0);
    /* the engine runs until every line is answered or the run is stopped */
    double t_last = llm_now_s();
    int64_t pre_last = 0, dec_last = 0;
    FILE *trace = NULL;
    int end = !decode;
    llm_status serr = LLM_OK; /* decode: how the stream ended, when it was cut or damaged */
    if (!s && p->trace_path && !(trace = fopen(p->trace_path, "w")))
        s = llm_error_set(LLM_E_IO, "%s: %s", p->trace_path, strerror(errno));
    while (!s) {
        if (p->interrupt && *p->interrupt) {
            sum->interrupted = 1;
            break;
        }
        if (!end) /* wait for the stream only when there is nothing to compute */
            s = pull(&r, rd, llm_engine_pending(r.e) ? 0 : 200, &end, &serr);
        if (s || (end && !llm_engine_pending(r.e)))
            break;
        if (!llm_engine_pending(r.e))
            continue;
        s = llm_engine_step(r.e);
        double t = llm_now_s();
        if (!s && trace) {
            write_trace(trace, &r, t - t0);
            if (ferror(trace))
                s = llm_error_set(LLM_E_IO, "%s: write error", p->trace_path);
        }
        if (p->progress && t - t_last >= 1.0) {
            struct llm_engine_stats st;
            llm_engine_stats(r.e, &st);
            progress(&r, &st, t - t_last, st.prefill_tokens - pre_last,
                     st.decode_tokens - dec_last);
            t_last = t;
            pre_last = st.prefill_tokens;
            dec_last = st.decode_tokens;
        }
    }
    if (!s)
        duplicates(&r);
    if (trace && fclose(trace) && !s)
        s = llm_error_set(LLM_E_IO, "%s: write error: %s", p->trace_path, strerror(errno));
    sum->speculating = p->engine.spec && p->role != LLM_BATCH_PREFILL;
    if (r.e) {
        llm_engine_stats(r.e, &sum->engine);
        llm_status ls = latencies(r.e, sum);
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
    for (size_t i = 0; i < r.n_cids; i++)
        llm_free(r.cids[i]);
    llm_free(r.cids);
    llm_free(r.text);
    answered_free(&prev);
    llm_engine_free(r.e);
    llm_grammar_set_free(r.gs);
    llm_handoff_close(rd);
    if (fd > 0)
        close(fd);
    if (hw_open) {
        /* an interrupted prefill keeps what it sent: the stream has no end mark */
        llm_status cs = s ? (llm_handoff_write_abort(&r.hw), LLM_OK)
                          : llm_handoff_write_close(&r.hw, !sum->interrupted);
        if (!s)
            s = cs;
        if (!s && to_stdout && fflush(stdout))
            s = llm_error_set(LLM_E_IO, "<stdout>: write error: %s", strerror(errno));
    }
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
    if (!s && serr && !sum->interrupted) /* the lines it had are answered: now the stream's fault */
        s = llm_error_set(serr, "%s (the %lld requests it held are answered)", r.serr_msg,
                          (long long)(sum->answered + sum->errors));
    if (!s && sum->interrupted)
        s = llm_error_set(LLM_E_INTERRUPTED, prefill
                          ? "interrupted: the states of %lld of %lld requests are sent; the "
                            "decode side answers them (then run both again, the decode side "
                            "with --resume)"
                          : "interrupted: %lld of %lld lines answered (run again with --resume "
                            "to finish)",
                          (long long)(sum->answered + sum->errors + sum->skipped),
                          (long long)sum->lines);
    return s;
}
