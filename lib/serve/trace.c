/* trace.c: the KV trace read back, summarized and drawn. */
#include "trace.h"

#include <errno.h>
#include <jansson.h>
#include <string.h>

#include "../common/alloc.h"
#include "../common/io.h"

#define TRACE_MAX_BYTES ((size_t)1 << 32)

static const char *const int_fields[] = {
    "step", "running", "waiting", "finished", "blocks", "blocks_used", "blocks_free",
    "blocks_cached", "blocks_idle", "blocks_logical", "block_size", "tokens", "prefill", "decode",
    "lookup_tokens", "hit_tokens", "preemptions",
};

static llm_status parse_line(struct llm_trace_step *st, const char *line, size_t len,
                             const char *name, int64_t lineno)
{
    json_error_t je;
    json_t *j = json_loadb(line, len, 0, &je);
    if (!j || !json_is_object(j)) {
        json_decref(j);
        return llm_error_set(LLM_E_FORMAT, "%s:%lld: not a JSON object (a --kv-trace line)",
                             name, (long long)lineno);
    }
    int64_t v[17];
    const size_t nf = sizeof int_fields / sizeof *int_fields;
    for (size_t i = 0; i < nf; i++) {
        json_t *x = json_object_get(j, int_fields[i]);
        if (!json_is_integer(x) || json_integer_value(x) < 0) {
            json_decref(j);
            return llm_error_set(LLM_E_FORMAT, "%s:%lld: \"%s\" is missing or not a count",
                                 name, (long long)lineno, int_fields[i]);
        }
        v[i] = json_integer_value(x);
    }
    json_t *t = json_object_get(j, "t");
    double tv = json_is_number(t) ? json_number_value(t) : -1;
    json_decref(j);
    if (!(tv >= 0 && tv < 1e9))
        return llm_error_set(LLM_E_FORMAT, "%s:%lld: \"t\" is missing or not seconds", name,
                             (long long)lineno);
    *st = (struct llm_trace_step){
        .t = tv, .step = v[0], .running = v[1], .waiting = v[2], .finished = v[3],
        .blocks = v[4], .used = v[5], .free_ = v[6], .cached = v[7], .idle = v[8],
        .logical = v[9], .block_size = v[10], .tokens = v[11], .prefill = v[12], .decode = v[13],
        .lookup_tokens = v[14], .hit_tokens = v[15], .preemptions = v[16],
    };
    if (!st->blocks || !st->block_size || st->used > st->blocks || st->cached > st->used || st->idle > st->cached ||
        st->used + st->free_ != st->blocks || st->hit_tokens > st->lookup_tokens ||
        st->block_size > 1 << 20 || st->blocks > INT32_MAX)
        return llm_error_set(LLM_E_FORMAT, "%s:%lld: the block counts do not add up", name,
                             (long long)lineno);
    return LLM_OK;
}

llm_status llm_trace_parse(struct llm_trace *tr, const char *text, size_t len, const char *name)
{
    memset(tr, 0, sizeof *tr);
    size_t cap = 0;
    int64_t lineno = 0;
    llm_status s = LLM_OK;
    size_t at = 0, l;
    for (const char *line; !s && (line = llm_next_line(text, len, &at, &l));) {
        lineno++;
        if (!l)
            continue;
        void *p = tr->s;
        if ((s = llm_grow(&p, &cap, tr->n + 1, sizeof *tr->s)))
            break;
        tr->s = p;
        s = parse_line(&tr->s[tr->n], line, l, name, lineno);
        if (!s && tr->n && (tr->s[tr->n].blocks != tr->s[0].blocks ||
                            tr->s[tr->n].t < tr->s[tr->n - 1].t))
            s = llm_error_set(LLM_E_FORMAT, "%s:%lld: another pool or an earlier time than the "
                              "line before (two traces in one file?)", name, (long long)lineno);
        tr->n += !s;
    }
    if (!s && !tr->n)
        s = llm_error_set(LLM_E_FORMAT, "%s: no steps (an empty trace)", name);
    if (s)
        llm_trace_free(tr);
    return s;
}

llm_status llm_trace_read(struct llm_trace *tr, const char *path)
{
    char *text;
    size_t len;
    memset(tr, 0, sizeof *tr);
    LLM_TRY(llm_read_text(path, TRACE_MAX_BYTES, &text, &len));
    llm_status s = llm_trace_parse(tr, text, len, strcmp(path, "-") ? path : "<stdin>");
    llm_free(text);
    return s;
}

void llm_trace_free(struct llm_trace *tr)
{
    llm_free(tr->s);
    memset(tr, 0, sizeof *tr);
}

void llm_trace_summarize(const struct llm_trace *tr, struct llm_trace_summary *sum)
{
    memset(sum, 0, sizeof *sum);
    if (!tr->n)
        return;
    const struct llm_trace_step *last = &tr->s[tr->n - 1];
    sum->steps = (int64_t)tr->n;
    sum->seconds = last->t;
    sum->blocks = last->blocks;
    sum->block_size = last->block_size;
    double waste = 0;
    int64_t n_waste = 0;
    for (size_t i = 0; i < tr->n; i++) {
        const struct llm_trace_step *s = &tr->s[i];
        double u = (double)s->used / (double)s->blocks;
        sum->used_mean += u;
        if (u > sum->used_peak)
            sum->used_peak = u;
        sum->cached_mean += (double)s->cached / (double)s->blocks;
        sum->idle_mean += (double)s->idle / (double)s->blocks;
        if (s->logical) {
            double rows = (double)s->logical * (double)s->block_size;
            waste += rows > (double)s->tokens ? 1.0 - (double)s->tokens / rows : 0.0;
            n_waste++;
        }
        if (s->running > sum->running_peak)
            sum->running_peak = s->running;
        if (s->waiting > sum->waiting_peak)
            sum->waiting_peak = s->waiting;
        sum->prefill_tokens += s->prefill;
        sum->decode_tokens += s->decode;
    }
    sum->used_mean /= (double)tr->n;
    sum->cached_mean /= (double)tr->n;
    sum->idle_mean /= (double)tr->n;
    sum->inside_waste = n_waste ? waste / (double)n_waste : 0.0;
    sum->finished = last->finished;
    sum->lookup_tokens = last->lookup_tokens;
    sum->hit_tokens = last->hit_tokens;
    sum->hit_rate = last->lookup_tokens ? (double)last->hit_tokens / (double)last->lookup_tokens : 0;
    sum->preemptions = last->preemptions;
}

/* The steps in time bucket c of w: [first, end). */
static void bucket(const struct llm_trace *tr, int c, int w, size_t *first, size_t *end)
{
    const double t1 = tr->s[tr->n - 1].t > 0 ? tr->s[tr->n - 1].t : 1;
    size_t i = *first;
    while (i < tr->n && tr->s[i].t <= t1 * (c + 1) / w)
        i++;
    if (c == w - 1)
        i = tr->n;
    *end = i;
}

void llm_trace_chart(FILE *f, const struct llm_trace *tr, int width, int height)
{
    if (!tr->n || width < 1 || height < 1)
        return;
    double used[512], cached[512];
    if (width > 512)
        width = 512;
    /* each column: the most blocks in use within its time span (the last
     * value when a span has no step) */
    size_t first = 0;
    double lu = 0, lc = 0;
    for (int c = 0; c < width; c++) {
        size_t end;
        bucket(tr, c, width, &first, &end);
        double mu = -1, mc = 0;
        for (size_t i = first; i < end; i++) {
            double u = (double)tr->s[i].used / (double)tr->s[i].blocks;
            if (u > mu)
                mu = u, mc = (double)tr->s[i].idle / (double)tr->s[i].blocks;
        }
        if (mu < 0)
            mu = lu, mc = lc;
        used[c] = lu = mu;
        cached[c] = lc = mc;
        first = end;
    }
    /* the blocks only the index holds are drawn at the top of the column */
    for (int r = height; r >= 1; r--) {
        const double lo = (double)(r - 1) / height;
        fprintf(f, "%4.0f%% |", 100.0 * r / height);
        for (int c = 0; c < width; c++) {
            char ch = ' ';
            if (used[c] > lo)
                ch = used[c] - cached[c] > lo ? '#' : ':';
            fputc(ch, f);
        }
        fputc('\n', f);
    }
    fprintf(f, "      +");
    for (int c = 0; c < width; c++)
        fputc('-', f);
    fprintf(f, "\n       0 s%*s%.1f s\n", width - 8, "", tr->s[tr->n - 1].t);
}

llm_status llm_trace_svg(const struct llm_trace *tr, const char *path)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return llm_error_set(LLM_E_IO, "%s: %s", path, strerror(errno));
    const double W = 800, H = 220, L = 60, T = 30, G = 60; /* plot size, margins, gap */
    const double t1 = tr->n && tr->s[tr->n - 1].t > 0 ? tr->s[tr->n - 1].t : 1;
    int64_t blocks = tr->n ? tr->s[0].blocks : 1, rmax = 1;
    for (size_t i = 0; i < tr->n; i++) {
        if (tr->s[i].running + tr->s[i].waiting > rmax)
            rmax = tr->s[i].running + tr->s[i].waiting;
        if (tr->s[i].running > rmax)
            rmax = tr->s[i].running;
    }
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
            "font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%%\" height=\"100%%\" "
            "fill=\"white\"/>\n", W + L + 20, 2 * H + 2 * T + G + 30);
    static const char *const title[2] = { "KV blocks (of %lld)", "requests (running, waiting)" };
    static const char *const color[2][2] = { { "#1f77b4", "#ff7f0e" }, { "#2ca02c", "#d62728" } };
    static const char *const label[2][2] = { { "used", "cache only" }, { "running", "waiting" } };
    for (int p = 0; p < 2; p++) {
        const double y0 = T + p * (H + G), ymax = p ? (double)rmax : (double)blocks;
        fprintf(f, "<text x=\"%.0f\" y=\"%.0f\">", L, y0 - 8);
        fprintf(f, title[p], (long long)blocks);
        fprintf(f, "</text>\n<rect x=\"%.0f\" y=\"%.0f\" width=\"%.0f\" height=\"%.0f\" "
                "fill=\"none\" stroke=\"#888\"/>\n", L, y0, W, H);
        fprintf(f, "<text x=\"%.0f\" y=\"%.0f\" text-anchor=\"end\">%.0f</text>\n<text x=\"%.0f\" "
                "y=\"%.0f\" text-anchor=\"end\">0</text>\n", L - 4, y0 + 10, ymax, L - 4, y0 + H);
        for (int k = 0; k < 2; k++) {
            fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"1.5\" points=\"",
                    color[p][k]);
            for (size_t i = 0; i < tr->n; i++) {
                const struct llm_trace_step *s = &tr->s[i];
                double v = p ? (double)(k ? s->waiting : s->running)
                             : (double)(k ? s->idle : s->used);
                fprintf(f, "%.1f,%.1f ", L + W * s->t / t1, y0 + H - H * v / (ymax > 0 ? ymax : 1));
            }
            fprintf(f, "\"/>\n<text x=\"%.0f\" y=\"%.0f\" fill=\"%s\">%s</text>\n",
                    L + W - 160 + 60 * k, y0 - 8, color[p][k], label[p][k]);
        }
    }
    fprintf(f, "<text x=\"%.0f\" y=\"%.0f\">0 s</text><text x=\"%.0f\" y=\"%.0f\" "
            "text-anchor=\"end\">%.2f s</text>\n</svg>\n", L, 2 * H + 2 * T + G + 20, L + W,
            2 * H + 2 * T + G + 20, t1);
    if (ferror(f) | fclose(f))
        return llm_error_set(LLM_E_IO, "%s: write error", path);
    return LLM_OK;
}
