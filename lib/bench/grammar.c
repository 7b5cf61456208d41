/* grammar.c: llm-bench --grammar (and --json-schema, --regex,
 * --json-object): what constrained decoding costs per token. Each prompt
 * is generated greedily without the grammar and then under it, alternated
 * prompt by prompt so that both see the same machine; the texts differ
 * (that is the point of a grammar), so the figure is the time per
 * generated token, with the time spent making masks beside it. */
#include <math.h>
#include <string.h>

#include "../common/alloc.h"
#include "../common/io.h"
#include "../model/generate.h"
#include "../model/model.h"
#include "bench.h"

void llm_grammar_bench_params_default(struct llm_grammar_bench_params *p)
{
    memset(p, 0, sizeof *p);
    p->n_gen = 128;
    p->reps = 3;
    p->kv_k = p->kv_v = LLM_TYPE_F16;
}

llm_status llm_bench_grammar(struct llm_grammar_result *r, struct llm_model *m, const char *model,
                             const struct llm_grammar_bench_params *p, char *const *prompts,
                             int32_t n_prompts, int n_threads)
{
    LLM_CHECK(n_threads >= 1 && p->reps >= 1 && p->n_gen >= 1 && n_prompts >= 1, LLM_E_INVALID,
              "bench: bad constrained decoding test");
    LLM_CHECK(llm_model_tokenizer(m), LLM_E_INVALID, "%s: the model has no tokenizer", model);
    memset(r, 0, sizeof *r);
    snprintf(r->model, sizeof r->model, "%s", model);
    snprintf(r->grammar, sizeof r->grammar, "%s", p->kind == LLM_GRAMMAR_JSON ? "--json-object"
             : p->kind == LLM_GRAMMAR_REGEX ? "--regex" : p->arg);
    r->n_threads = n_threads;
    r->reps = p->reps;
    r->n_prompts = n_prompts;
    r->n_gen = p->n_gen;
    struct llm_grammar *g = NULL;
    struct llm_gmask *gm = NULL;
    struct llm_context *c = NULL;
    struct llm_context_params cp;
    llm_context_params_default(&cp);
    cp.n_threads = n_threads;
    cp.kv_type_k = p->kv_k;
    cp.kv_type_v = p->kv_v;
    double *plain = llm_calloc((size_t)p->reps, sizeof(double));
    double *constrained = llm_calloc((size_t)p->reps, sizeof(double));
    int32_t *ids = NULL;
    double t0 = llm_now_s();
    llm_status s = plain && constrained ? llm_grammar_load(&g, p->kind, p->arg) : LLM_E_NOMEM;
    if (!s)
        s = llm_gmask_new(&gm, g, llm_model_tokenizer(m));
    r->compile_ms = (llm_now_s() - t0) * 1e3;
    if (!s)
        s = llm_context_new(&c, m, &cp);
    struct llm_gen_params gp;
    llm_gen_params_default(&gp);
    gp.sp.temp = 0;
    gp.n_predict = p->n_gen;
    struct llm_gen_callbacks cb = { 0 };
    int64_t all_tokens = 0; /* constrained, in every pass: what the mask time is spread over */
    for (int rep = 0; !s && rep < p->reps; rep++) {
        double t_plain = 0, t_gram = 0;
        r->plain_tokens = r->constrained_tokens = r->forced = 0;
        r->ended = 0;
        for (int32_t i = 0; !s && i < n_prompts; i++) {
            size_t n;
            llm_free(ids);
            ids = NULL;
            if ((s = llm_bench_prompt_ids(m, prompts[i], p->chat, &ids, &n)))
                break;
            struct llm_gen_result ra, rb;
            gp.grammar = NULL;
            if ((s = llm_generate(c, ids, n, &gp, &cb, &ra)))
                break;
            gp.grammar = gm;
            if ((s = llm_generate(c, ids, n, &gp, &cb, &rb)))
                break;
            t_plain += ra.t_gen_s;
            t_gram += rb.t_gen_s;
            r->plain_tokens += ra.n_gen;
            r->constrained_tokens += rb.n_gen;
            all_tokens += rb.n_gen;
            r->forced += rb.n_forced;
            r->ended += !strcmp(rb.stop_reason, "eos");
        }
        plain[rep] = r->plain_tokens ? 1e3 * t_plain / (double)r->plain_tokens : 0;
        constrained[rep] = r->constrained_tokens ? 1e3 * t_gram / (double)r->constrained_tokens : 0;
    }
    if (!s)
        s = llm_stats_compute(&r->plain_ms, plain, (size_t)p->reps);
    if (!s)
        s = llm_stats_compute(&r->constrained_ms, constrained, (size_t)p->reps);
    if (!s) {
        struct llm_gmask_stats st;
        llm_gmask_stats(gm, &st);
        r->overhead = r->plain_ms.median > 0 ? r->constrained_ms.median / r->plain_ms.median - 1
                                             : NAN;
        r->masks = st.n_masks;
        r->cached = st.n_cached;
        r->mask_median_us = st.t_median_us;
        r->mask_p99_us = st.t_p99_us;
        r->mask_max_us = st.t_max_us;
        r->mask_ms_per_token = all_tokens ? 1e3 * st.t_total_s / (double)all_tokens : 0;
    }
    llm_free(ids);
    llm_free(plain);
    llm_free(constrained);
    llm_context_free(c);
    llm_gmask_free(gm);
    llm_grammar_free(g);
    return s;
}
