/* spec.c: llm-bench --draft / --lookup: greedy generation of a prompt set
 * with and without speculative decoding, alternated prompt by prompt so
 * that both see the same machine, the text checked identical, and the
 * speedup and the acceptance counters reported. */
#include <math.h>
#include <string.h>

#include "../common/alloc.h"
#include "../common/io.h"
#include "../model/generate.h"
#include "../model/model.h"
#include "../tokenizer/tokenizer.h"
#include "bench.h"

#define SPEC_MAX_PROMPTS 4096

void llm_spec_bench_params_default(struct llm_spec_bench_params *p)
{
    memset(p, 0, sizeof *p);
    llm_spec_params_default(&p->spec);
    p->n_gen = 128;
    p->reps = 3;
    p->kv_k = p->kv_v = LLM_TYPE_F16;
}

/* One prompt line (n bytes, its '\r' before the newline dropped) with its
 * escapes undone into out (n + 1 bytes); *m receives its length. */
static llm_status unescape(const char *line, size_t n, char *out, size_t *m, const char *name,
                           int32_t lineno)
{
    *m = 0;
    if (n && line[n - 1] == '\r')
        n--;
    for (size_t i = 0; i < n; i++) {
        if (!line[i])
            return llm_error_set(LLM_E_FORMAT, "%s:%d: a NUL byte in the prompt", name, lineno);
        if (line[i] != '\\' || i + 1 == n)
            out[(*m)++] = line[i];
        else if (line[++i] == 'n')
            out[(*m)++] = '\n';
        else if (line[i] == '\\')
            out[(*m)++] = '\\';
        else
            return llm_error_set(LLM_E_FORMAT, "%s:%d: '\\%c' is not an escape (\\n or \\\\)",
                                 name, lineno, line[i]);
    }
    out[*m] = 0;
    return LLM_OK;
}

llm_status llm_spec_prompts_parse(char ***out, int32_t *n, const char *text, size_t len,
                                  const char *name)
{
    char **v = NULL;
    size_t cap = 0, at = 0, l, m;
    int32_t k = 0, lineno = 0;
    llm_status s = LLM_OK;
    *out = NULL;
    *n = 0;
    for (const char *line; !s && (line = llm_next_line(text, len, &at, &l));) {
        char *p = llm_malloc(l + 1);
        void *g = v;
        if (!p || (s = unescape(line, l, p, &m, name, ++lineno)) || !m) {
            llm_free(p);
            s = p ? s : LLM_E_NOMEM;
            continue;
        }
        if (k >= SPEC_MAX_PROMPTS)
            s = llm_error_set(LLM_E_FORMAT, "%s: more than %d prompts", name, SPEC_MAX_PROMPTS);
        else if (!(s = llm_grow(&g, &cap, (size_t)k + 1, sizeof *v)))
            v = g, v[k++] = p, p = NULL;
        llm_free(p);
    }
    if (!s && !k)
        s = llm_error_set(LLM_E_FORMAT, "%s: no prompt (one per line)", name);
    if (s) {
        llm_spec_prompts_free(v, k);
        return s;
    }
    *out = v;
    *n = k;
    return LLM_OK;
}

void llm_spec_prompts_free(char **v, int32_t n)
{
    for (int32_t i = 0; v && i < n; i++)
        llm_free(v[i]);
    llm_free(v);
}

llm_status llm_bench_prompt_ids(struct llm_model *m, const char *text, int chat, int32_t **ids,
                                size_t *n)
{
    char *r = NULL;
    if (chat) {
        const struct llm_chat_msg msg = { "user", text };
        LLM_TRY(llm_chat_render(llm_model_file(m), NULL, &msg, 1, 1, &r));
        text = r;
    }
    llm_status s = llm_tokenize(llm_model_tokenizer(m), text, strlen(text),
                                LLM_TOK_ADD_BOS | (chat ? LLM_TOK_PARSE_SPECIAL : 0), ids, n);
    llm_free(r);
    return s;
}

/* The tokens of one generation. */
struct spec_tokens {
    int32_t *id;
    size_t n, cap;
    llm_status s;
};

static llm_status on_token(void *ctx, int32_t seq, const struct llm_gen_token *t)
{
    struct spec_tokens *k = ctx;
    void *p = k->id;
    (void)seq;
    LLM_TRY(llm_grow(&p, &k->cap, k->n + 1, sizeof(int32_t)));
    k->id = p;
    k->id[k->n++] = t->id;
    return LLM_OK;
}

llm_status llm_bench_spec(struct llm_spec_result *r, struct llm_model *m, const char *model,
                          struct llm_model *dm, const struct llm_spec_bench_params *p,
                          char *const *prompts, int32_t n_prompts, int n_threads)
{
    LLM_CHECK(n_threads >= 1 && p->reps >= 1 && p->n_gen >= 1 && n_prompts >= 1 &&
              (dm || p->spec.lookup), LLM_E_INVALID, "bench: bad speculative decoding test");
    memset(r, 0, sizeof *r);
    snprintf(r->model, sizeof r->model, "%s", model);
    snprintf(r->draft, sizeof r->draft, "%s", dm ? p->draft : "lookup");
    r->n_threads = n_threads;
    r->reps = p->reps;
    r->n_prompts = n_prompts;
    r->n_gen = p->n_gen;
    if (dm)
        LLM_TRY(llm_spec_check_draft(m, dm));
    struct llm_context *c = NULL, *dc = NULL;
    struct llm_context_params cp;
    llm_context_params_default(&cp);
    cp.n_threads = n_threads;
    cp.kv_type_k = p->kv_k;
    cp.kv_type_v = p->kv_v;
    double *plain_ts = llm_calloc((size_t)p->reps, sizeof(double));
    double *spec_ts = llm_calloc((size_t)p->reps, sizeof(double));
    struct spec_tokens a = { 0 }, b = { 0 };
    int32_t *ids = NULL;
    llm_status s = plain_ts && spec_ts ? llm_context_new(&c, m, &cp) : LLM_E_NOMEM;
    if (!s && dm) {
        cp.n_ctx = llm_context_n_ctx(c);
        s = llm_context_new(&dc, dm, &cp);
    }
    struct llm_spec_params sp = p->spec;
    sp.draft = dc;
    struct llm_gen_params gp;
    llm_gen_params_default(&gp);
    gp.sp.temp = 0;
    gp.n_predict = p->n_gen;
    struct llm_gen_callbacks cb = { NULL, on_token, NULL };
    for (int rep = 0; !s && rep < p->reps; rep++) {
        double t_plain = 0, t_spec = 0;
        int64_t tokens = 0;
        r->drafted = r->accepted = r->rounds = r->passes = 0;
        for (int32_t i = 0; !s && i < n_prompts; i++) {
            size_t n;
            llm_free(ids);
            ids = NULL;
            if ((s = llm_bench_prompt_ids(m, prompts[i], p->chat, &ids, &n)))
                break;
            struct llm_gen_result ra, rb;
            a.n = b.n = 0;
            gp.spec = NULL;
            cb.ctx = &a;
            if ((s = llm_generate(c, ids, n, &gp, &cb, &ra)))
                break;
            gp.spec = &sp;
            cb.ctx = &b;
            if ((s = llm_generate(c, ids, n, &gp, &cb, &rb)))
                break;
            if (a.n != b.n || (a.n && memcmp(a.id, b.id, a.n * sizeof *a.id))) {
                size_t at = 0;
                while (at < a.n && at < b.n && a.id[at] == b.id[at])
                    at++;
                s = llm_error_set(LLM_E_INVALID, "prompt %d: speculation changed greedy token %zu "
                                  "(a bug: please report it)", i + 1, at + 1);
                break;
            }
            t_plain += ra.t_gen_s;
            t_spec += rb.t_gen_s;
            tokens += ra.n_gen;
            r->drafted += rb.n_drafted;
            r->accepted += rb.n_accepted;
            r->rounds += rb.n_draft_rounds;
            r->passes += rb.n_passes;
        }
        r->tokens = tokens;
        plain_ts[rep] = t_plain > 0 ? (double)tokens / t_plain : 0;
        spec_ts[rep] = t_spec > 0 ? (double)tokens / t_spec : 0;
    }
    if (!s)
        s = llm_stats_compute(&r->plain_ts, plain_ts, (size_t)p->reps);
    if (!s)
        s = llm_stats_compute(&r->spec_ts, spec_ts, (size_t)p->reps);
    /* the median of each pass's ratio: a pass times both ways prompt by
     * prompt, so its ratio sees one machine, where the machine's speed
     * drifts between passes (by a third on a shared one) */
    struct llm_stats ratio = { 0 };
    double *rx = plain_ts; /* its statistics are taken: its room holds the ratios */
    int timed = 1;
    for (int rep = 0; !s && rep < p->reps; rep++) {
        timed &= plain_ts[rep] > 0;
        rx[rep] = plain_ts[rep] > 0 ? spec_ts[rep] / plain_ts[rep] : 0;
    }
    if (!s)
        s = llm_stats_compute(&ratio, rx, (size_t)p->reps);
    r->speedup = !s && timed ? ratio.median : NAN;
    llm_free(ids);
    llm_free(a.id);
    llm_free(b.id);
    llm_free(plain_ts);
    llm_free(spec_ts);
    llm_context_free(dc);
    llm_context_free(c);
    return s;
}
