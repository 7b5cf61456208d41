/* llm-bench: measure prefill and decode speed (llama-bench style sweeps),
 * kernel microbenchmarks (--kernels), KL divergence from a base model (--base),
 * perplexity on a text file, and compare two result files. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../lib/llm.h"

enum { OPT_PG = 256, OPT_WARMUP, OPT_BW, OPT_PEAK, OPT_PPL, OPT_CTX, OPT_COMPARE, OPT_THRESHOLD, OPT_SUITE, OPT_KERNELS,
       OPT_TYPES, OPT_BASE, OPT_CHUNKS, OPT_SCORE_ALL, OPT_KVTYPE, OPT_KVTYPE_K, OPT_KVTYPE_V, OPT_SERVE, OPT_SERVE_TEXT, OPT_REQUESTS,
       OPT_PLEN, OPT_GLEN, OPT_SPREFIX, OPT_RATE, OPT_SEED, OPT_MAXSEQS, OPT_STEPTOK,
       OPT_NOPREFIX, OPT_DRAFT, OPT_LOOKUP, OPT_PROMPTS, OPT_CHAT, OPT_NGRAMMIN, OPT_NGRAMMAX,
       OPT_DRAFTN, OPT_DRAFTMAX, OPT_GRAMMAR, OPT_SCHEMA, OPT_REGEX, OPT_JSONOBJ };

#define MAX_BATCH 16

static const struct llm_opt opts[] = {
    { 'm', "model", LLM_ARG_REQUIRED, "FILE", "model to measure (repeatable)", "file" },
    { 'p', "n-prompt", LLM_ARG_REQUIRED, "LIST", "pp tests: prompt lengths, e.g. 128,512 (default: 512)", NULL },
    { 'n', "n-gen", LLM_ARG_REQUIRED, "LIST", "tg tests: tokens generated, e.g. 64 (default: 128)", NULL },
    { OPT_PG, "pg", LLM_ARG_REQUIRED, "P,G", "a pg test: prefill P then generate G (repeatable)", NULL },
    { 'b', "batch", LLM_ARG_REQUIRED, "LIST", "batched tests of B parallel sequences, e.g. 1,4,16,32 (as llama-batched-bench -npl)", NULL },
    { 't', "threads", LLM_ARG_REQUIRED, "LIST", "thread counts, e.g. 1,2 (default: the number of CPUs)", NULL },
    { 'r', "repetitions", LLM_ARG_REQUIRED, "N", "measured runs per test (default: 5)", NULL },
    { OPT_WARMUP, "warmup", LLM_ARG_REQUIRED, "N", "unmeasured runs before them (default: 1)", NULL },
    { 'o', "output", LLM_ARG_REQUIRED, "FORMAT", "md, csv, json or jsonl (default: md)", "md csv json jsonl" },
    { OPT_BW, "bandwidth", LLM_ARG_REQUIRED, "GB/S", "memory bandwidth for the roofline (default: probe it)", NULL },
    { OPT_PEAK, "peak", LLM_ARG_REQUIRED, "GFLOP/S", "FMA peak for the roofline (default: probe it)", NULL },
    { OPT_PPL, "ppl", LLM_ARG_REQUIRED, "FILE", "measure the perplexity of the model on a text file", "file" },
    { OPT_BASE, "base", LLM_ARG_REQUIRED, "FILE", "with --ppl: KL divergence of -m's predictions from this model's", "file" },
    { OPT_CHUNKS, "chunks", LLM_ARG_REQUIRED, "N", "with --ppl: score only the first N windows (llama-perplexity --chunks)", NULL },
    { OPT_KVTYPE, "kv-type", LLM_ARG_REQUIRED, "TYPE", "KV cache type of K and V, with --ppl (default: f32) or the speed, serving, speculation and grammar tests (default: f16, as llm-run): f32, f16, bf16, q8, fp8_e4m3, q4 or q4ch (keys per channel, values q4)", "f32 f16 bf16 q8 fp8_e4m3 q4 q4ch" },
    { OPT_KVTYPE_K, "kv-type-k", LLM_ARG_REQUIRED, "TYPE", "KV cache type of K alone", "f32 f16 bf16 q8 fp8_e4m3 q4 q4ch" },
    { OPT_KVTYPE_V, "kv-type-v", LLM_ARG_REQUIRED, "TYPE", "KV cache type of V alone", "f32 f16 bf16 q8 fp8_e4m3 q4" },
    { OPT_SCORE_ALL, "score-all", LLM_ARG_NONE, NULL, "with --ppl: score every token of each window (the GPTQ/AWQ papers' protocol)", NULL },
    { OPT_CTX, "ctx", LLM_ARG_REQUIRED, "N", "with --ppl: window in tokens (default: 512); with --kernels: KV tokens of attn (default: 512); with --serve*: each sequence's context", NULL },
    { OPT_KERNELS, "kernels", LLM_ARG_NONE, NULL, "microbenchmark the matrix kernels and attention (shapes of -m, or stories110m)", NULL },
    { OPT_TYPES, "types", LLM_ARG_REQUIRED, "LIST", "with --kernels: weight types (default: f32,f16,bf16,q8_0,q4_0,...)", NULL },
    { OPT_SERVE, "serve", LLM_ARG_REQUIRED, "FILE", "serving benchmark: the requests of an OpenAI batch JSONL file ('-' = stdin) through the continuous-batching engine", "file" },
    { OPT_SERVE_TEXT, "serve-text", LLM_ARG_REQUIRED, "FILE", "serving benchmark: synthetic requests, their prompts drawn from the tokens of a text file (greedy, end of text ignored)", "file" },
    { OPT_REQUESTS, "requests", LLM_ARG_REQUIRED, "N", "with --serve-text: how many requests (default: 256)", NULL },
    { OPT_PLEN, "prompt-len", LLM_ARG_REQUIRED, "A-B", "with --serve-text: prompt tokens, uniform in [A, B] (default: 32-512)", NULL },
    { OPT_GLEN, "gen-len", LLM_ARG_REQUIRED, "A-B", "with --serve-text: output tokens, uniform in [A, B] (default: 16-256)", NULL },
    { OPT_SPREFIX, "shared-prefix", LLM_ARG_REQUIRED, "N", "with --serve-text: the text's first N tokens before every prompt (default: 0)", NULL },
    { OPT_RATE, "rate", LLM_ARG_REQUIRED, "R", "with --serve*: Poisson arrivals of R requests/s (default: all at the start)", NULL },
    { OPT_SEED, "seed", LLM_ARG_REQUIRED, "N", "with --serve*: seed of lengths, prompts, arrivals and sampling (default: 0)", NULL },
    { OPT_MAXSEQS, "max-seqs", LLM_ARG_REQUIRED, "N", "with --serve*: sequences running at once (default: 16)", NULL },
    { OPT_STEPTOK, "step-tokens", LLM_ARG_REQUIRED, "N", "with --serve*: tokens per forward pass at most (default: 512)", NULL },
    { OPT_NOPREFIX, "no-prefix-cache", LLM_ARG_NONE, NULL, "with --serve*: do not keep computed prompt blocks for later requests", NULL },
    { OPT_DRAFT, "draft", LLM_ARG_REQUIRED, "FILE", "speculative decoding: greedy text of --prompts with and without FILE as the draft model; with --serve*, each run again speculating", "file" },
    { OPT_LOOKUP, "lookup", LLM_ARG_NONE, NULL, "speculative decoding: the same with prompt lookup as the draft; with --serve*, each run again speculating", NULL },
    { OPT_GRAMMAR, "grammar", LLM_ARG_REQUIRED, "FILE", "constrained decoding: the cost per token of the GBNF grammar in FILE on --prompts", "file" },
    { OPT_SCHEMA, "json-schema", LLM_ARG_REQUIRED, "FILE", "constrained decoding: the same with the JSON Schema in FILE", "file" },
    { OPT_REGEX, "regex", LLM_ARG_REQUIRED, "RE", "constrained decoding: the same with a regular expression", NULL },
    { OPT_JSONOBJ, "json-object", LLM_ARG_NONE, NULL, "constrained decoding: the same with any JSON value", NULL },
    { OPT_PROMPTS, "prompts", LLM_ARG_REQUIRED, "FILE", "with --draft, --lookup or a grammar: the prompts, one per line ('\\n' a newline)", "file" },
    { OPT_CHAT, "chat", LLM_ARG_NONE, NULL, "with --draft, --lookup or a grammar: each prompt is a user message in the model's chat template", NULL },
    { OPT_NGRAMMIN, "ngram-min", LLM_ARG_REQUIRED, "N", "with --lookup: the shortest n-gram matched (default: 2)", NULL },
    { OPT_NGRAMMAX, "ngram-max", LLM_ARG_REQUIRED, "N", "with --lookup: the longest n-gram matched (default: 4)", NULL },
    { OPT_DRAFTN, "draft-n", LLM_ARG_REQUIRED, "N", "with --draft or --lookup: tokens drafted per pass (default: chosen as the run goes)", NULL },
    { OPT_DRAFTMAX, "draft-max", LLM_ARG_REQUIRED, "N", "with --draft or --lookup: the most the chosen length drafts (default: 16)", NULL },
    { OPT_COMPARE, "compare", LLM_ARG_NONE, NULL, "compare two result files (json or jsonl): OLD NEW", NULL },
    { OPT_THRESHOLD, "threshold", LLM_ARG_REQUIRED, "PCT", "with --compare: a slowdown beyond PCT % fails (default: 5)", NULL },
    { OPT_SUITE, "suite", LLM_ARG_REQUIRED, "FILE", "run the tests of a YAML suite file", "file" },
};

static struct llm_cli cli = {
    .prog = "llm-bench",
    .synopsis = "[-m FILE]... [-p LIST] [-n LIST] [--pg P,G]... [-t LIST] [--kv-type TYPE] [-r N] [-o FORMAT]\n"
                "-b LIST [-m FILE]... [-p LIST] [-n LIST] [--pg P,G]... [-t LIST] [--kv-type TYPE] [-r N] [-o FORMAT]\n"
                "--suite FILE [-o FORMAT]\n"
                "--ppl FILE [--ctx N] [--chunks N] [--score-all] [--kv-type TYPE] [-t N] [--base FILE] -m FILE\n"
                "--kernels [-m FILE] [--types LIST] [--ctx N] [-t LIST] [-r N] [-o FORMAT]\n"
                "--serve FILE|--serve-text FILE [--rate R] [SERVE OPTIONS] [--draft FILE|--lookup] [-m FILE]... [-t LIST] [--kv-type TYPE] [-o FORMAT]\n"
                "--draft FILE|--lookup --prompts FILE [--chat] [SPEC OPTIONS] [-m FILE]... [-n N] [-t LIST] [--kv-type TYPE] [-r N] [-o FORMAT]\n"
                "--grammar FILE|--json-schema FILE|--regex RE|--json-object --prompts FILE [--chat] [-m FILE]... [-n N] [-t LIST] [--kv-type TYPE] [-r N] [-o FORMAT]\n"
                "--compare [--threshold PCT] OLD NEW",
    .summary = "Measure prefill (pp) and decode (tg) speed, latency percentiles and the share of\n"
               "the machine's roofline; serving throughput and latency; perplexity; compare two runs.",
    .opts = opts,
    .n_opts = sizeof opts / sizeof opts[0],
    .footer = "LIST: N, A,B,C, FIRST-LAST, FIRST-LAST+STEP or FIRST-LAST*MULT; every model, test and\n"
              "thread count is combined.\n\n"
              "Examples:\n"
              "  llm-bench -m model.llm -p 128,512 -n 64 -t 1,2\n"
              "  llm-bench -m model.llm -b 1,4,16,32 -p 128 -n 64\n"
              "  llm-bench -m model.llm -o jsonl > new.jsonl; llm-bench --compare old.jsonl new.jsonl\n"
              "  llm-bench -m model.llm --ppl wiki.test.raw --ctx 512\n"
              "  llm-bench -m q4.llm --base f16.llm --ppl wiki.test.raw\n"
              "  llm-bench --kernels --types q4_0,q8_0 -t 1,2\n"
              "  llm-bench -m model.llm -t 2 --serve requests.jsonl\n"
              "  llm-bench -m model.llm -t 2 --serve-text stories.txt --shared-prefix 400 --rate 2\n"
              "  llm-bench -m f32.llm --draft gptq4.llm --prompts prompts.txt --chat -n 128 -t 2\n"
              "  llm-bench -m model.llm --json-schema person.json --prompts prompts.txt --chat -t 2\n",
};

struct args {
    struct llm_bench_plan plan;
    int64_t batch[MAX_BATCH]; /* -b: parallel sequences of the batched tests */
    size_t n_batch;
    int have_tests, have_threads, have_reps, have_warmup;
    double bw, peak;
    const char *ppl, *suite, *base, *types;
    int kernels;
    int64_t ctx, chunks;
    int have_ctx, compare, have_threshold, score_all;
    int have_kvtype;            /* 1: K's type given, 2: V's */
    enum llm_type kv[2];        /* the KV cache's K and V types as given */
    double threshold;
    struct llm_serve_params serve;
    int serve_opts; /* an option of the serving workload was given */
    struct llm_spec_bench_params spec;
    struct llm_grammar_bench_params gram;
    int n_grammars;     /* grammar options given (one may be) */
    const char *prompts;
    int spec_opts;  /* an option of the speculative test was given (1; 2: of lookup) */
};

/* "N", "A-B" or "A:B" with min <= A <= B <= max. */
static llm_status parse_range(const char *arg, const char *what, int32_t min, int32_t max,
                              int32_t *lo, int32_t *hi)
{
    char buf[64];
    const char *sep = strpbrk(arg, "-:");
    int64_t a, b;
    if (!sep) {
        LLM_TRY(llm_parse_i64(arg, min, max, what, &a));
        *lo = *hi = (int32_t)a;
        return LLM_OK;
    }
    snprintf(buf, sizeof buf, "%.*s", (int)(sep - arg), arg);
    LLM_TRY(llm_parse_i64(buf, min, max, what, &a));
    LLM_TRY(llm_parse_i64(sep + 1, min, max, what, &b));
    LLM_CHECK(a <= b, LLM_E_INVALID, "%s: '%s': the first bound is above the second", what, arg);
    *lo = (int32_t)a, *hi = (int32_t)b;
    return LLM_OK;
}

/* A speculation option's count: n-gram lengths and draft lengths, 1 to 64
 * (llm-run's bounds). */
static llm_status spec_count(const char *arg, const char *what, int32_t *out)
{
    int64_t v;
    LLM_TRY(llm_parse_i64(arg, 1, 64, what, &v));
    *out = (int32_t)v;
    return LLM_OK;
}

/* The header of a run without roofline probes (serving, speculation), and
 * the default thread count: the CPUs. */
static void sweep_header(struct llm_bench_plan *p, struct llm_bench_header *h)
{
    memset(h, 0, sizeof *h);
    h->bw_measured = h->peak_measured = 1;
    llm_machine_detect(&h->machine);
    time_t now = time(NULL);
    strftime(h->test_time, sizeof h->test_time, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
    if (!p->n_threads)
        p->threads[p->n_threads++] = h->machine.n_cpus;
}

/* --serve / --serve-text: every model with every thread count. */
static int do_serve(struct args *a)
{
    struct llm_bench_plan *p = &a->plan;
    struct llm_bench_header h;
    sweep_header(p, &h);
    /* with --draft or --lookup, each run twice: plain, then speculating */
    const struct llm_spec_params *spec = a->serve.spec;
    const size_t runs = spec ? 2 : 1, total = p->n_models * p->n_threads * runs;
    struct llm_serve_result *res = llm_calloc(total, sizeof *res);
    if (!res)
        return llm_cli_fail(&cli, LLM_E_NOMEM);
    a->serve.defaults.sp.seed = a->serve.seed;
    a->serve.draft_name = a->spec.draft;
    llm_status s = LLM_OK;
    if (a->spec.draft)
        s = llm_model_open(&a->serve.draft, a->spec.draft, NULL);
    size_t n = 0;
    for (size_t mi = 0; mi < p->n_models && !s; mi++) {
        struct llm_model *m;
        if ((s = llm_model_open(&m, p->models[mi], NULL)))
            break;
        if (a->serve.draft)
            s = llm_spec_check_draft(m, a->serve.draft);
        for (size_t ti = 0; ti < p->n_threads && !s; ti++)
            for (size_t k = 0; k < runs && !s; k++) {
                a->serve.spec = k ? spec : NULL;
                if (cli.verbose > 0)
                    fprintf(stderr, "%s: %s: serving, %d threads%s%s\n", cli.prog,
                            p->models[mi], p->threads[ti], k ? ", speculating with " : "",
                            k ? (a->spec.draft ? a->spec.draft : "lookup") : "");
                if (!(s = llm_bench_serve(&res[n], m, p->models[mi], &a->serve, p->threads[ti],
                                          a->have_ctx ? (int32_t)a->ctx : 0)))
                    n++;
            }
        llm_model_close(m);
    }
    llm_model_close(a->serve.draft);
    if (!s)
        s = llm_bench_sprint(stdout, p->format, &h, res, n);
    int refused = n && res[0].errors > 0; /* the same file for every run */
    llm_free(res);
    if (s)
        return llm_cli_fail(&cli, s);
    return refused ? 3 : 0; /* measured, but some lines were refused (named on stderr) */
}

/* The prompts of --prompts. */
static llm_status read_prompts(const struct args *a, char ***prompts, int32_t *n)
{
    char *text;
    size_t len;
    LLM_TRY(llm_read_file(a->prompts, (size_t)1 << 28, &text, &len));
    llm_status s = llm_spec_prompts_parse(prompts, n, text, len,
                                          strcmp(a->prompts, "-") ? a->prompts : "<stdin>");
    llm_free(text);
    return s;
}

/* The options of a test over --prompts (speculation or a grammar, named
 * by what): one -n N, -r N, a model. Returns the usage error's exit
 * status, or -1 when they are fine. */
static int prompt_test(struct args *a, const char *what, int32_t *n_gen, int *reps)
{
    struct llm_bench_plan *p = &a->plan;
    if (a->have_tests) {
        if (p->n_tests != 1 || p->tests[0].n_prompt || !p->tests[0].n_gen)
            return llm_cli_usage(&cli, "with %s: one -n N (tokens per prompt) and no -p or --pg",
                                 what);
        *n_gen = p->tests[0].n_gen;
    }
    if (a->have_reps)
        *reps = p->reps;
    if (!p->n_models)
        return llm_cli_usage(&cli, "no model (-m FILE)");
    return -1;
}

/* --grammar, --json-schema, --regex, --json-object: every model with every
 * thread count, on the prompts. */
static int do_grammar(struct args *a)
{
    struct llm_bench_plan *p = &a->plan;
    struct llm_bench_header h;
    sweep_header(p, &h);
    char **prompts = NULL;
    int32_t n_prompts = 0;
    llm_status s = read_prompts(a, &prompts, &n_prompts);
    if (s)
        return llm_cli_fail(&cli, s);
    const size_t total = p->n_models * p->n_threads;
    struct llm_grammar_result *res = llm_calloc(total, sizeof *res);
    if (!res)
        s = LLM_E_NOMEM;
    size_t n = 0;
    for (size_t mi = 0; mi < p->n_models && !s; mi++) {
        struct llm_model *m;
        if ((s = llm_model_open(&m, p->models[mi], NULL)))
            break;
        for (size_t ti = 0; ti < p->n_threads && !s; ti++) {
            if (cli.verbose > 0)
                fprintf(stderr, "%s: %s: constrained decoding, %d threads\n", cli.prog,
                        p->models[mi], p->threads[ti]);
            if (!(s = llm_bench_grammar(&res[n], m, p->models[mi], &a->gram, prompts, n_prompts,
                                        p->threads[ti])))
                n++;
        }
        llm_model_close(m);
    }
    if (!s)
        s = llm_bench_grammar_print(stdout, p->format, &h, res, n);
    llm_free(res);
    llm_spec_prompts_free(prompts, n_prompts);
    return s ? llm_cli_fail(&cli, s) : 0;
}

/* --draft / --lookup: every model with every thread count, on the prompts. */
static int do_spec(struct args *a)
{
    struct llm_bench_plan *p = &a->plan;
    struct llm_bench_header h;
    sweep_header(p, &h);
    char **prompts = NULL;
    int32_t n_prompts = 0;
    llm_status s = read_prompts(a, &prompts, &n_prompts);
    if (s)
        return llm_cli_fail(&cli, s);
    const size_t total = p->n_models * p->n_threads;
    struct llm_spec_result *res = llm_calloc(total, sizeof *res);
    struct llm_model *dm = NULL;
    if (!res)
        s = LLM_E_NOMEM;
    else if (a->spec.draft)
        s = llm_model_open(&dm, a->spec.draft, NULL);
    size_t n = 0;
    for (size_t mi = 0; mi < p->n_models && !s; mi++) {
        struct llm_model *m;
        if ((s = llm_model_open(&m, p->models[mi], NULL)))
            break;
        for (size_t ti = 0; ti < p->n_threads && !s; ti++) {
            if (cli.verbose > 0)
                fprintf(stderr, "%s: %s: speculative decoding (%s), %d threads\n", cli.prog,
                        p->models[mi], a->spec.draft ? a->spec.draft : "lookup", p->threads[ti]);
            if (!(s = llm_bench_spec(&res[n], m, p->models[mi], dm, &a->spec, prompts, n_prompts,
                                     p->threads[ti])))
                n++;
        }
        llm_model_close(m);
    }
    if (!s)
        s = llm_bench_spec_print(stdout, p->format, &h, res, n);
    llm_model_close(dm);
    llm_free(res);
    llm_spec_prompts_free(prompts, n_prompts);
    return s ? llm_cli_fail(&cli, s) : 0;
}

static int do_compare(const struct args *a, char **files)
{
    struct llm_bench_row *o = NULL, *n = NULL;
    size_t no, nn, nc;
    llm_status s = llm_bench_rows_load(&o, &no, files[0]);
    if (!s)
        s = llm_bench_rows_load(&n, &nn, files[1]);
    if (s) {
        llm_free(o);
        return llm_cli_fail(&cli, s);
    }
    struct llm_bench_cmp *c = llm_malloc((no + nn) * sizeof *c);
    size_t reg = 0;
    if (!c)
        s = LLM_E_NOMEM;
    else {
        reg = llm_bench_compare(c, &nc, o, no, n, nn, a->threshold);
        s = llm_bench_compare_print(stdout, c, nc, a->threshold);
    }
    llm_free(c);
    llm_free(o);
    llm_free(n);
    if (s)
        return llm_cli_fail(&cli, s);
    return reg ? 3 : 0;
}

static int do_kld(const struct args *a)
{
    struct llm_model *m = NULL, *b = NULL;
    struct llm_model_params mp;
    llm_model_params_default(&mp);
    mp.n_threads = a->have_threads ? a->plan.threads[0] : 0;
    llm_status s = llm_model_open(&m, a->plan.models[0], &mp);
    if (!s)
        s = llm_model_open(&b, a->base, &mp);
    struct llm_kld_summary k;
    size_t n_tok = 0;
    uint64_t t0 = llm_time_ns();
    if (!s)
        s = llm_bench_kld(b, m, a->ppl, (int32_t)a->ctx, mp.n_threads, a->chunks, a->kv[0], a->kv[1],
                          &k, &n_tok);
    double sec = (double)(llm_time_ns() - t0) * 1e-9;
    if (b)
        llm_model_close(b);
    if (m)
        llm_model_close(m);
    if (s)
        return llm_cli_fail(&cli, s);
    printf("model: %s\nbase: %s\ntext: %s, %zu tokens, %zu windows of %lld tokens, %zu scored, %.2f s\n",
           a->plan.models[0], a->base, a->ppl, n_tok, n_tok / (size_t)a->ctx, (long long)a->ctx, k.n, sec);
    char types[64];
    llm_kv_types_text(types, sizeof types, a->kv[0], a->kv[1]);
    printf("KV cache: f32 (base), %s (model)\n", types);
    printf("PPL(base) = %.4f +/- %.5f\nPPL(model) = %.4f +/- %.5f\n", k.ppl_base, k.ppl_base_stderr,
           k.ppl_model, k.ppl_model_stderr);
    printf("KLD mean = %.6f +/- %.6f\nKLD median = %.6f\nKLD p99 = %.6f\ntop-1 agreement = %.3f %%\n",
           k.kld_mean, k.kld_stderr, k.kld_median, k.kld_p99, k.top1_pct);
    return 0;
}

static int do_ppl(const struct args *a)
{
    if (a->base)
        return do_kld(a);
    struct llm_model *m;
    struct llm_model_params mp;
    llm_model_params_default(&mp);
    mp.n_threads = a->have_threads ? a->plan.threads[0] : 0;
    llm_status s = llm_model_open(&m, a->plan.models[0], &mp);
    if (s)
        return llm_cli_fail(&cli, s);
    double ppl = 0, se = 0;
    size_t n_tok = 0;
    uint64_t t0 = llm_time_ns();
    s = llm_bench_perplexity(m, a->ppl, (int32_t)a->ctx, mp.n_threads, a->chunks, a->score_all,
                             a->kv[0], a->kv[1], &ppl, &se, &n_tok);
    double sec = (double)(llm_time_ns() - t0) * 1e-9;
    llm_model_close(m);
    if (s)
        return llm_cli_fail(&cli, s);
    printf("model: %s\ntext: %s, %zu tokens, %zu windows of %lld tokens, %.2f s\n", a->plan.models[0], a->ppl,
           n_tok, n_tok / (size_t)a->ctx, (long long)a->ctx, sec);
    char types[64];
    llm_kv_types_text(types, sizeof types, a->kv[0], a->kv[1]);
    printf("KV cache: %s\nPPL = %.4f +/- %.5f\n", types, ppl, se);
    return 0;
}

/* The int16 dot-product peak at one thread count, probed once. */
static llm_status dot_peak(int threads, double *gops)
{
    static int cached[LLM_BENCH_MAX_LIST];
    static double cv[LLM_BENCH_MAX_LIST];
    static size_t n_cached;
    for (size_t i = 0; i < n_cached; i++)
        if (cached[i] == threads) {
            *gops = cv[i];
            return LLM_OK;
        }
    LLM_TRY(llm_probe_dot16(gops, threads, 0.25));
    if (n_cached < LLM_BENCH_MAX_LIST)
        cached[n_cached] = threads, cv[n_cached++] = *gops;
    return LLM_OK;
}

/* The roofline figures at one thread count: probed (cached) or given. */
static llm_status roofline(const struct args *a, int threads, double *gbs, double *gflops)
{
    static int cached[LLM_BENCH_MAX_LIST];
    static double cbw[LLM_BENCH_MAX_LIST], cpk[LLM_BENCH_MAX_LIST];
    static size_t n_cached;
    for (size_t i = 0; i < n_cached; i++)
        if (cached[i] == threads) {
            *gbs = cbw[i], *gflops = cpk[i];
            return LLM_OK;
        }
    *gbs = a->bw, *gflops = a->peak;
    if (!a->bw)
        LLM_TRY(llm_probe_bandwidth(gbs, threads, llm_probe_bandwidth_bytes(), 5));
    if (!a->peak)
        LLM_TRY(llm_probe_fma(gflops, threads, 0.25));
    if (n_cached < LLM_BENCH_MAX_LIST)
        cached[n_cached] = threads, cbw[n_cached] = *gbs, cpk[n_cached++] = *gflops;
    return LLM_OK;
}

static int do_kernels(struct args *a)
{
    struct llm_bench_plan *p = &a->plan;
    struct llm_bench_header h = { .bw_measured = !a->bw, .peak_measured = !a->peak };
    llm_machine_detect(&h.machine);
    snprintf(h.isa, sizeof h.isa, "%s", llm_matmul_isa_name());
    time_t now = time(NULL);
    strftime(h.test_time, sizeof h.test_time, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
    if (!p->n_threads)
        p->threads[p->n_threads++] = h.machine.n_cpus;
    struct llm_bench_kspec k = { .threads = p->threads, .n_threads = p->n_threads, .reps = p->reps,
                                 .warmup = p->warmup, .nb = 128, .n_ctx = a->ctx };
    int32_t dim = LLM_BENCH_KDEF_DIM, ffn = LLM_BENCH_KDEF_FFN, vocab = LLM_BENCH_KDEF_VOCAB;
    k.n_heads = k.n_kv_heads = LLM_BENCH_KDEF_HEADS;
    k.head_dim = LLM_BENCH_KDEF_DIM / LLM_BENCH_KDEF_HEADS;
    llm_status s = llm_bench_parse_types(a->types ? a->types : LLM_BENCH_KTYPES_DEFAULT, k.types,
                                         LLM_BENCH_MAX_LIST, &k.n_types);
    if (s)
        return llm_cli_usage(&cli, "%s", llm_error_detail(s));
    if (p->n_models) {
        struct llm_model *m;
        if ((s = llm_model_open(&m, p->models[0], NULL)))
            return llm_cli_fail(&cli, s);
        const struct llm_config *c = llm_model_config(m);
        dim = c->dim, ffn = c->ffn_dim, vocab = c->n_vocab;
        k.n_heads = c->n_heads, k.n_kv_heads = c->n_kv_heads, k.head_dim = c->head_dim;
        llm_model_close(m);
    }
    if ((s = llm_bench_kernel_shapes(k.shapes, dim, ffn, vocab)))
        return llm_cli_fail(&cli, s);
    double gbs[LLM_BENCH_MAX_LIST], gfl[LLM_BENCH_MAX_LIST];
    for (size_t i = 0; i < p->n_threads && !s; i++)
        s = roofline(a, p->threads[i], &gbs[i], &gfl[i]);
    k.roof_gbs = gbs, k.roof_gflops = gfl;
    struct llm_bench_kresult *res = NULL;
    size_t n = 0;
    if (!s)
        s = llm_bench_kernels(&k, &res, &n);
    if (!s)
        s = llm_bench_kprint(stdout, p->format, &h, res, n);
    for (size_t i = 0; i < n; i++)
        llm_bench_kresult_release(&res[i]);
    llm_free(res);
    return s ? llm_cli_fail(&cli, s) : 0;
}

/* The batched tests: every prompt length of -p with every count of -n,
 * and the --pg pairs. */
static size_t batch_tests(const struct llm_bench_plan *p, struct llm_bench_test *out, size_t cap)
{
    size_t n = 0;
    for (size_t i = 0; i < p->n_tests; i++) {
        const struct llm_bench_test *t = &p->tests[i];
        if (t->n_prompt && t->n_gen && n < cap)
            out[n++] = *t;
        if (t->n_gen)
            continue;
        for (size_t j = 0; j < p->n_tests; j++)
            if (!p->tests[j].n_prompt && n < cap)
                out[n++] = (struct llm_bench_test){ t->n_prompt, p->tests[j].n_gen };
    }
    return n;
}

/* One stderr line for a run that went past a roofline figure (its share is
 * NaN): the run, the figure, and why it is wrong. */
static void past_roof(const struct llm_bench_result *r, const char *verb, double got, double pct,
                      double roof, const char *unit, const char *what, int given, const char *why)
{
    if (got > 0 && roof > 0 && isnan(pct))
        fprintf(stderr, "%s: %s, %s: %s %.1f %s on %d thread%s, more than the %s %s of %.1f %s: "
                "%s\n", cli.prog, r->model, r->test, verb, got, unit, r->n_threads,
                r->n_threads == 1 ? "" : "s", given ? "given" : "probed", what, roof, unit, why);
}

static int do_bench(struct args *a)
{
    struct llm_bench_plan *p = &a->plan;
    struct llm_bench_header h = { .bw_measured = !a->bw, .peak_measured = !a->peak };
    llm_machine_detect(&h.machine);
    time_t now = time(NULL);
    strftime(h.test_time, sizeof h.test_time, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
    if (!p->n_threads)
        p->threads[p->n_threads++] = h.machine.n_cpus;
    struct llm_bench_test bt[3 * LLM_BENCH_MAX_LIST];
    const size_t nbt = a->n_batch ? batch_tests(p, bt, sizeof bt / sizeof bt[0]) : 0;
    const size_t per = a->n_batch ? nbt * a->n_batch : p->n_tests;
    size_t total = p->n_models * per * p->n_threads, n = 0;
    struct llm_bench_result *res = llm_calloc(total ? total : 1, sizeof *res);
    if (!res)
        return llm_cli_fail(&cli, LLM_E_NOMEM);
    llm_status s = LLM_OK;
    int progress = cli.verbose >= 0 && isatty(STDERR_FILENO);
    for (size_t mi = 0; mi < p->n_models && !s; mi++) {
        struct llm_model *m;
        if ((s = llm_model_open(&m, p->models[mi], NULL)))
            break;
        for (size_t ti = 0; ti < p->n_threads && !s; ti++)
            for (size_t k = 0; k < per && a->n_batch && !s; k++) {
                struct llm_bench_result *r = &res[n];
                const struct llm_bench_test *t = &bt[k % nbt];
                r->kv_k = a->kv[0], r->kv_v = a->kv[1];
                const int32_t B = (int32_t)a->batch[k / nbt];
                if ((s = roofline(a, p->threads[ti], &r->roof_gbs, &r->roof_gflops)) ||
                    (s = dot_peak(p->threads[ti], &r->roof_dot)))
                    break;
                if (cli.verbose > 0)
                    fprintf(stderr, "%s: %s: %d sequences of pp %d tg %d, %d threads\n", cli.prog,
                            p->models[mi], B, t->n_prompt, t->n_gen, p->threads[ti]);
                else if (progress)
                    fprintf(stderr, "\r\033[K%s: test %zu of %zu: B %d pp %d tg %d, %d threads",
                            cli.prog, n + 1, total, B, t->n_prompt, t->n_gen, p->threads[ti]);
                if (!(s = llm_bench_run_batch(r, m, p->models[mi], t, B, p->threads[ti], p->reps,
                                              p->warmup)))
                    n++;
            }
        for (size_t ti = 0; ti < p->n_threads && !a->n_batch && !s; ti++)
            for (size_t k = 0; k < p->n_tests && !s; k++) {
                struct llm_bench_result *r = &res[n];
                r->kv_k = a->kv[0], r->kv_v = a->kv[1];
                if ((s = roofline(a, p->threads[ti], &r->roof_gbs, &r->roof_gflops)))
                    break;
                if (cli.verbose > 0)
                    fprintf(stderr, "%s: %s: pp %d tg %d, %d threads\n", cli.prog, p->models[mi],
                            p->tests[k].n_prompt, p->tests[k].n_gen, p->threads[ti]);
                else if (progress)
                    fprintf(stderr, "\r\033[K%s: test %zu of %zu: pp %d tg %d, %d threads", cli.prog, n + 1,
                            total, p->tests[k].n_prompt, p->tests[k].n_gen, p->threads[ti]);
                if (!(s = llm_bench_run(r, m, p->models[mi], &p->tests[k], p->threads[ti], p->reps, p->warmup)))
                    n++;
            }
        llm_model_close(m);
    }
    if (progress)
        fputs("\r\033[K", stderr);
    /* a run past its roofline: the figure is wrong, say so once per run */
    for (size_t i = 0; i < n && !s; i++) {
        const struct llm_bench_result *r = &res[i];
        past_roof(r, "read", r->gbs, r->gbs_pct, r->roof_gbs, "GB/s", "bandwidth", a->bw > 0,
                  a->bw ? "the weights stay in cache, or --bandwidth is low"
                        : "the weights stay in cache, or the probe is low (give --bandwidth)");
        past_roof(r, "ran", r->gflops, r->gflops_pct, r->roof_gflops, "GFLOP/s", "FMA peak",
                  a->peak > 0, a->peak ? "--peak is low" : "the probe is low (give --peak)");
    }
    if (!s)
        s = llm_bench_print(stdout, p->format, &h, res, n);
    for (size_t i = 0; i < n; i++)
        llm_bench_result_release(&res[i]);
    llm_free(res);
    return s ? llm_cli_fail(&cli, s) : 0;
}

static int add_list(struct args *a, int opt, const char *arg)
{
    int64_t v[LLM_BENCH_MAX_LIST];
    size_t n;
    const char *what = opt == 'p' ? "-p" : opt == 'n' ? "-n" : "-t";
    llm_status s = llm_bench_parse_list(arg, what, 1, opt == 't' ? 256 : 1048576, v, LLM_BENCH_MAX_LIST, &n);
    if (!s && opt == 't') {
        if (a->plan.n_threads + n > LLM_BENCH_MAX_LIST)
            return llm_cli_usage(&cli, "-t: more than %d thread counts", LLM_BENCH_MAX_LIST);
        for (size_t i = 0; i < n; i++)
            a->plan.threads[a->plan.n_threads++] = (int)v[i];
        a->have_threads = 1;
    } else if (!s) {
        s = llm_bench_plan_add(&a->plan, opt == 'n', v, n);
        a->have_tests = 1;
    }
    return s ? llm_cli_usage(&cli, "%s", llm_error_detail(s)) : 0;
}

int main(int argc, char **argv)
{
    struct args a = { .ctx = 512, .threshold = 5 };
    llm_serve_params_default(&a.serve);
    llm_spec_bench_params_default(&a.spec);
    llm_grammar_bench_params_default(&a.gram);
    const char *arg;
    int r, rc;
    int64_t v;
    double d;
    llm_bench_plan_init(&a.plan);
    llm_cli_init(&cli);
    while ((r = llm_cli_next(&cli, argc, argv, &arg)) != LLM_CLI_END) {
        llm_status s = LLM_OK;
        switch (r) {
        case LLM_CLI_EXIT0: return llm_cli_exit(&cli, 0);
        case LLM_CLI_ERROR: return 2;
        case 'm':
            if (a.plan.n_models == LLM_BENCH_MAX_LIST)
                return llm_cli_usage(&cli, "-m: at most %d models", LLM_BENCH_MAX_LIST);
            a.plan.models[a.plan.n_models++] = arg;
            break;
        case 'p': case 'n': case 't':
            if ((rc = add_list(&a, r, arg)))
                return rc;
            break;
        case 'b': {
            size_t nb;
            s = llm_bench_parse_list(arg, "-b", 1, 4096, a.batch + a.n_batch, MAX_BATCH - a.n_batch,
                                     &nb);
            a.n_batch += s ? 0 : nb;
            break;
        }
        case OPT_PG:
            s = llm_bench_plan_add_pg(&a.plan, arg);
            a.have_tests = 1;
            break;
        case 'r':
            s = llm_parse_i64(arg, 1, 100000, "-r", &v);
            a.plan.reps = (int)v, a.have_reps = 1;
            break;
        case OPT_WARMUP:
            s = llm_parse_i64(arg, 0, 100000, "--warmup", &v);
            a.plan.warmup = (int)v, a.have_warmup = 1;
            break;
        case 'o':
            s = llm_bench_format_parse(arg, &a.plan.format);
            a.plan.have_format = 1;
            break;
        case OPT_BW: s = llm_parse_f64(arg, 1e-3, 1e6, "--bandwidth", &a.bw); break;
        case OPT_PEAK: s = llm_parse_f64(arg, 1e-3, 1e9, "--peak", &a.peak); break;
        case OPT_PPL: a.ppl = arg; break;
        case OPT_CTX:
            s = llm_parse_i64(arg, 2, 1 << 20, "--ctx", &a.ctx);
            a.have_ctx = 1;
            break;
        case OPT_COMPARE: a.compare = 1; break;
        case OPT_THRESHOLD:
            s = llm_parse_f64(arg, 0, 100, "--threshold", &d);
            a.threshold = d, a.have_threshold = 1;
            break;
        case OPT_SUITE: a.suite = arg; break;
        case OPT_KERNELS: a.kernels = 1; break;
        case OPT_TYPES: a.types = arg; break;
        case OPT_BASE: a.base = arg; break;
        case OPT_CHUNKS: s = llm_parse_i64(arg, 1, INT64_MAX, "--chunks", &a.chunks); break;
        case OPT_SCORE_ALL: a.score_all = 1; break;
        case OPT_KVTYPE:
        case OPT_KVTYPE_K:
        case OPT_KVTYPE_V:
            if (llm_kv_types_option(r == OPT_KVTYPE ? 3 : r == OPT_KVTYPE_K ? 1 : 2, arg, a.kv,
                                    &a.have_kvtype))
                return llm_cli_usage(&cli, "%s", llm_error_detail(LLM_E_INVALID));
            break;
        case OPT_SERVE: a.serve.requests = arg; break;
        case OPT_SERVE_TEXT: a.serve.text = arg; break;
        case OPT_REQUESTS:
            s = llm_parse_i64(arg, 1, 1 << 24, "--requests", &v);
            a.serve.n_requests = (int32_t)v, a.serve_opts |= 2;
            break;
        case OPT_PLEN:
            s = parse_range(arg, "--prompt-len", 1, 1 << 20, &a.serve.prompt_min, &a.serve.prompt_max);
            a.serve_opts |= 2;
            break;
        case OPT_GLEN:
            s = parse_range(arg, "--gen-len", 0, 1 << 20, &a.serve.gen_min, &a.serve.gen_max);
            a.serve_opts |= 2;
            break;
        case OPT_SPREFIX:
            s = llm_parse_i64(arg, 0, 1 << 20, "--shared-prefix", &v);
            a.serve.shared_prefix = (int32_t)v, a.serve_opts |= 2;
            break;
        case OPT_RATE:
            s = llm_parse_f64(arg, 1e-6, 1e9, "--rate", &a.serve.rate);
            a.serve_opts |= 1;
            break;
        case OPT_SEED:
            s = llm_parse_i64(arg, 0, INT64_MAX, "--seed", &v);
            a.serve.seed = (uint64_t)v, a.serve_opts |= 1;
            break;
        case OPT_MAXSEQS:
            s = llm_parse_i64(arg, 1, 1024, "--max-seqs", &v);
            a.serve.engine.max_seqs = (int32_t)v, a.serve_opts |= 1;
            break;
        case OPT_STEPTOK:
            s = llm_parse_i64(arg, 1, 1 << 20, "--step-tokens", &v);
            a.serve.engine.step_tokens = (int32_t)v, a.serve_opts |= 1;
            break;
        case OPT_NOPREFIX: a.serve.engine.prefix_cache = 0, a.serve_opts |= 1; break;
        case OPT_DRAFT: a.spec.draft = arg; break;
        case OPT_LOOKUP: a.spec.spec.lookup = 1; break;
        case OPT_PROMPTS: a.prompts = arg; break;
        case OPT_GRAMMAR: a.gram.kind = LLM_GRAMMAR_GBNF, a.gram.arg = arg, a.n_grammars++; break;
        case OPT_SCHEMA: a.gram.kind = LLM_GRAMMAR_SCHEMA, a.gram.arg = arg, a.n_grammars++; break;
        case OPT_REGEX: a.gram.kind = LLM_GRAMMAR_REGEX, a.gram.arg = arg, a.n_grammars++; break;
        case OPT_JSONOBJ: a.gram.kind = LLM_GRAMMAR_JSON, a.gram.arg = NULL, a.n_grammars++; break;
        case OPT_CHAT: a.spec.chat = 1; break;
        case OPT_NGRAMMIN: s = spec_count(arg, "--ngram-min", &a.spec.spec.ngram_min), a.spec_opts |= 2; break;
        case OPT_NGRAMMAX: s = spec_count(arg, "--ngram-max", &a.spec.spec.ngram_max), a.spec_opts |= 2; break;
        case OPT_DRAFTN: s = spec_count(arg, "--draft-n", &a.spec.spec.draft_n), a.spec_opts |= 1; break;
        case OPT_DRAFTMAX: s = spec_count(arg, "--draft-max", &a.spec.spec.draft_max), a.spec_opts |= 4; break;
        }
        if (s)
            return llm_cli_usage(&cli, "%s", llm_error_detail(s));
    }
    int n_ops = argc - llm_cli_optind;
    struct llm_bench_plan *p = &a.plan;
    int bench_opts = p->n_models || a.have_tests || a.have_threads || a.have_reps || a.have_warmup ||
                     p->have_format || a.bw || a.peak;
    if (a.have_threshold && !a.compare)
        return llm_cli_usage(&cli, "--threshold goes with --compare");
    const int serving = a.serve.requests || a.serve.text;
    if (a.have_ctx && !a.ppl && !a.kernels && !serving)
        return llm_cli_usage(&cli, "--ctx goes with --ppl, --kernels or --serve");
    if (a.serve_opts && !serving)
        return llm_cli_usage(&cli, "--rate, --seed, --max-seqs, --step-tokens and "
                             "--no-prefix-cache go with --serve or --serve-text");
    if ((a.serve_opts & 2) && !a.serve.text)
        return llm_cli_usage(&cli, "--requests, --prompt-len, --gen-len and --shared-prefix go "
                             "with --serve-text");
    const int spec = a.spec.draft || a.spec.spec.lookup;
    if (a.have_kvtype && (a.kernels || a.compare || a.suite))
        return llm_cli_usage(&cli, "--kv-type, --kv-type-k and --kv-type-v go with --ppl "
                             "(and --base) and the speed, serving, speculation and grammar "
                             "tests");
    if (a.ppl) /* the defaults: f32 for perplexity; f16 for speed, as llama-bench and llm-run */
        a.kv[0] = a.have_kvtype & 1 ? a.kv[0] : LLM_TYPE_F32,
        a.kv[1] = a.have_kvtype & 2 ? a.kv[1] : LLM_TYPE_F32;
    else
        a.kv[0] = a.have_kvtype & 1 ? a.kv[0] : LLM_TYPE_F16,
        a.kv[1] = a.have_kvtype & 2 ? a.kv[1] : LLM_TYPE_F16;
    a.serve.kv_k = a.spec.kv_k = a.gram.kv_k = a.kv[0];
    a.serve.kv_v = a.spec.kv_v = a.gram.kv_v = a.kv[1];
    if (a.n_grammars) {
        if (a.n_grammars > 1)
            return llm_cli_usage(&cli, "--grammar, --json-schema, --regex and --json-object: "
                                 "give one");
        if (spec || a.spec_opts)
            return llm_cli_usage(&cli, "a grammar does not go with --draft, --lookup or their "
                                 "options");
        if (!a.prompts)
            return llm_cli_usage(&cli, "a grammar needs --prompts FILE");
        if (serving || a.n_batch || a.have_warmup || a.bw || a.peak || a.ppl || a.suite ||
            a.kernels || a.compare || a.have_ctx || n_ops)
            return llm_cli_usage(&cli, "a grammar goes with --prompts, --chat, -m, -n, -t, -r "
                                 "and -o only");
        if ((rc = prompt_test(&a, "a grammar", &a.gram.n_gen, &a.gram.reps)) >= 0)
            return rc;
        a.gram.chat = a.spec.chat;
        return llm_cli_exit(&cli, do_grammar(&a));
    }
    if ((a.spec_opts || a.prompts || a.spec.chat) && !spec)
        return llm_cli_usage(&cli, "--prompts, --chat, --ngram-min, --ngram-max, --draft-n and "
                             "--draft-max go with --draft, --lookup or a grammar");
    if (spec) {
        if (a.spec.draft && a.spec.spec.lookup)
            return llm_cli_usage(&cli, "--draft and --lookup are two ways to draft; use one");
        if ((a.spec_opts & 2) && !a.spec.spec.lookup)
            return llm_cli_usage(&cli, "--ngram-min and --ngram-max go with --lookup");
        if (a.spec.spec.draft_n && (a.spec_opts & 4))
            return llm_cli_usage(&cli, "--draft-n fixes the draft length, --draft-max bounds the "
                                 "adaptive one; use one");
        if (a.spec.spec.ngram_min > a.spec.spec.ngram_max)
            return llm_cli_usage(&cli, "--ngram-min %d is above --ngram-max %d",
                                 a.spec.spec.ngram_min, a.spec.spec.ngram_max);
        if (serving && (a.prompts || a.spec.chat))
            return llm_cli_usage(&cli, "--prompts and --chat go with the prompt-set test; with "
                                 "--serve, speculation runs on its requests");
        if (serving)
            a.serve.spec = &a.spec.spec;
        else if (!a.prompts)
            return llm_cli_usage(&cli, "%s needs --prompts FILE", a.spec.draft ? "--draft" : "--lookup");
    }
    if (spec && !serving) {
        if (a.n_batch || a.have_warmup || a.bw || a.peak || a.ppl || a.suite ||
            a.kernels || a.compare || a.have_ctx || n_ops)
            return llm_cli_usage(&cli, "--draft and --lookup go with -m, -n, -t, -r, -o and the "
                                 "speculation options only");
        if ((rc = prompt_test(&a, "--draft or --lookup", &a.spec.n_gen, &a.spec.reps)) >= 0)
            return rc;
        return llm_cli_exit(&cli, do_spec(&a));
    }
    if (serving) {
        if (a.serve.requests && a.serve.text)
            return llm_cli_usage(&cli, "--serve and --serve-text: give one workload");
        if (a.have_tests || a.n_batch || a.have_reps || a.have_warmup || a.bw || a.peak || a.ppl ||
            a.suite || a.kernels || a.compare || n_ops)
            return llm_cli_usage(&cli, "--serve and --serve-text go with -m, -t, -o, --ctx and the "
                                 "serving options only");
        if (!p->n_models)
            return llm_cli_usage(&cli, "no model (-m FILE)");
        if (a.have_ctx && a.serve.text &&
            a.ctx < 1 + (int64_t)a.serve.shared_prefix + a.serve.prompt_max + a.serve.gen_max)
            return llm_cli_usage(&cli, "--ctx %lld: shorter than the longest synthetic request "
                                 "(1 + --shared-prefix + the longest prompt and output: %lld)",
                                 (long long)a.ctx, 1 + (long long)a.serve.shared_prefix +
                                 a.serve.prompt_max + a.serve.gen_max);
        if (a.serve.engine.step_tokens < a.serve.engine.max_seqs)
            return llm_cli_usage(&cli, "--step-tokens %d: below --max-seqs %d (every running "
                                 "sequence decodes one token a step)",
                                 a.serve.engine.step_tokens, a.serve.engine.max_seqs);
        return llm_cli_exit(&cli, do_serve(&a));
    }
    if (a.types && !a.kernels)
        return llm_cli_usage(&cli, "--types goes with --kernels");
    if (a.base && !a.ppl)
        return llm_cli_usage(&cli, "--base goes with --ppl");
    if ((a.chunks || a.score_all) && !a.ppl)
        return llm_cli_usage(&cli, "--chunks and --score-all go with --ppl");
    if (a.score_all && a.base)
        return llm_cli_usage(&cli, "--score-all does not go with --base (the KL divergence uses "
                             "llama-perplexity's protocol)");
    if (a.n_batch && (a.ppl || a.suite || a.kernels || a.compare))
        return llm_cli_usage(&cli, "-b goes with -m, -p, -n, --pg, -t, -r, -o and the roofline "
                             "options (not --ppl, --suite, --kernels or --compare)");
    bench_opts |= a.n_batch > 0;
    if (a.compare) {
        if (bench_opts || a.ppl || a.suite || a.kernels || n_ops != 2)
            return llm_cli_usage(&cli, "--compare takes two result files, OLD NEW, and no other option");
        return llm_cli_exit(&cli, do_compare(&a, argv + llm_cli_optind));
    }
    if (n_ops)
        return llm_cli_usage(&cli, "unexpected operand '%s' (models go with -m)", argv[llm_cli_optind]);
    if (a.kernels) {
        if (p->n_models > 1 || a.have_tests || a.ppl || a.suite)
            return llm_cli_usage(&cli, "--kernels takes at most one model (-m) and no tests, --ppl or --suite");
        rc = do_kernels(&a);
        llm_bench_plan_release(p);
        return llm_cli_exit(&cli, rc);
    }
    if (a.ppl) {
        if (p->n_models != 1 || a.have_tests || p->n_threads > 1 || a.have_reps || a.have_warmup ||
            p->have_format || a.bw || a.peak || a.suite)
            return llm_cli_usage(&cli, "--ppl takes one model (-m), and -t, --ctx, --chunks, --score-all, --base only");
        return llm_cli_exit(&cli, do_ppl(&a));
    }
    if (a.suite) {
        if (p->n_models || a.have_tests || a.have_threads || a.have_reps || a.have_warmup)
            return llm_cli_usage(&cli, "--suite gives the models and tests: only -o, --bandwidth, --peak go with it");
        enum llm_bench_format keep = p->format;
        int have = p->have_format;
        llm_status s = llm_bench_suite_load(p, a.suite);
        if (s) {
            llm_bench_plan_release(p);
            return llm_cli_exit(&cli, llm_cli_fail(&cli, s));
        }
        if (have) /* -o on the command line wins over the suite's output */
            p->format = keep;
    } else {
        if (!p->n_models)
            return llm_cli_usage(&cli, "no model (-m FILE)");
        if (!a.have_tests) {
            llm_bench_plan_add(p, 0, (int64_t[]){ 512 }, 1);
            llm_bench_plan_add(p, 1, (int64_t[]){ 128 }, 1);
        }
        if (a.n_batch) {
            /* batched: every -p with every -n, and the --pg pairs */
            struct llm_bench_test bt[3 * LLM_BENCH_MAX_LIST];
            int has_pp = 0, has_tg = 0;
            for (size_t i = 0; i < p->n_tests; i++)
                has_pp |= p->tests[i].n_prompt && !p->tests[i].n_gen,
                has_tg |= !p->tests[i].n_prompt && p->tests[i].n_gen;
            if (has_pp && !has_tg)
                llm_bench_plan_add(p, 1, (int64_t[]){ 128 }, 1);
            if (has_tg && !has_pp)
                llm_bench_plan_add(p, 0, (int64_t[]){ 512 }, 1);
            if (!batch_tests(p, bt, sizeof bt / sizeof bt[0]))
                return llm_cli_usage(&cli, "-b: no test with a prompt (give -p, or --pg P,G)");
        }
    }
    rc = do_bench(&a);
    llm_bench_plan_release(p);
    return llm_cli_exit(&cli, rc);
}
