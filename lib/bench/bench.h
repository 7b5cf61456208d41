/* bench.h: the parts of llm-bench: timers and statistics, the machine
 * header, roofline probes, result printers, regression comparison, plans
 * (command-line lists and YAML suites) and the runner.
 *
 * A plan is a sweep in the manner of llama-bench: every model x every test
 * (pp N: prefill of N tokens; tg N: N tokens generated one at a time; pg P,G:
 * a prefill of P then G generated tokens) x every thread count, each run
 * `warmup` times unmeasured and `reps` times measured. Each combination
 * gives one struct llm_bench_result; the printers write them as a markdown
 * table, CSV, a JSON array or JSON lines with the field names listed in
 * llm-bench(1) (stable: scripts and --compare read them).
 *
 * Statistics: the sample standard deviation (n - 1), and percentiles by
 * linear interpolation between closest ranks (numpy's default: rank
 * p/100 x (n - 1)).
 */
#ifndef LLM_BENCH_BENCH_H
#define LLM_BENCH_BENCH_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "../common/num.h" /* llm_percentile_sorted */
#include "../common/status.h"
#include "../grammar/grammar.h"
#include "../model/spec.h"
#include "../quant/types.h"
#include "../serve/engine.h"
#include "../serve/request.h"

/* ---- timers and statistics --------------------------------------------------- */

/* Monotonic clock in nanoseconds. */
uint64_t llm_time_ns(void);

struct llm_stats {
    size_t n;
    double mean, sd, min, max, median, p50, p90, p99;
};

/* Statistics of x (n); x is not modified. n == 0 gives all zeros;
 * sd is 0 for n == 1. LLM_E_NOMEM when the sorted copy cannot be made. */
llm_status llm_stats_compute(struct llm_stats *s, const double *x, size_t n);

/* A model run's share of a roofline figure, in percent: NaN when there is no
 * roofline or the run went past it. A run cannot beat the hardware, so a
 * share above 100% means the figure is wrong (a low probe, or weights that
 * stay in cache), and it is reported as such instead of printed. Kernel
 * microbenchmarks keep their plain ratio: their operands are in cache. */
double llm_bench_share(double got, double roof);

/* ---- the machine ------------------------------------------------------------- */

struct llm_machine {
    char cpu[128];       /* /proc/cpuinfo "model name", or "unknown" */
    char features[64];   /* "avx2 fma avx512f avx512vnni avxvnni" as present */
    int n_cpus;          /* online processors */
    char version[16];    /* LLM_VERSION */
    char commit[48];     /* LLM_COMMIT: the build's git commit */
};
void llm_machine_detect(struct llm_machine *m);

/* Streaming read bandwidth in GB/s (10^9 bytes/s): n_threads threads, all
 * started before the timer, each summing its share of a `bytes` buffer;
 * each of `reps` rounds times one pass of wide vector loads and one of a
 * plain STREAM-style 64-bit loop, and the best pass counts. */
llm_status llm_probe_bandwidth(double *gbs, int n_threads, size_t bytes, int reps);
/* The probe's buffer: 512 MiB, or 4 times the last-level cache where that
 * is more (at most 2 GiB), far past every cache; but at most a quarter of
 * the free memory (and at least 64 MiB). */
size_t llm_probe_bandwidth_bytes(void);
/* Peak single-precision FMA rate in GFLOP/s (an FMA counts 2) with the
 * widest vectors the CPU has (AVX-512, AVX2+FMA, else scalar), n_threads
 * threads for about `seconds`. */
llm_status llm_probe_fma(double *gflops, int n_threads, double seconds);
/* Peak int16 dot-product rate in GOP/s (a multiply-add counts 2): the
 * instruction of the integer GEMM (AVX-512 VNNI vpdpwssd, else AVX2
 * madd_epi16); 0 where neither exists. */
llm_status llm_probe_dot16(double *gops, int n_threads, double seconds);

/* ---- results and printers ---------------------------------------------------- */

enum llm_bench_format { LLM_BENCH_MD, LLM_BENCH_CSV, LLM_BENCH_JSON, LLM_BENCH_JSONL };
llm_status llm_bench_format_parse(const char *s, enum llm_bench_format *out);

struct llm_bench_result {
    char model[512];           /* path as given */
    uint64_t model_bytes;      /* weight bytes read per token */
    uint64_t n_params;
    char test[48];             /* "pp512", "tg128", "pp512+tg128" */
    int32_t n_prompt, n_gen;
    int n_threads;
    int reps;
    double *samples_ns;        /* (reps) wall time of each measured repetition */
    struct llm_stats ns;       /* of samples_ns */
    struct llm_stats ts;       /* tokens/s of each repetition: (n_prompt + n_gen) / time */
    struct llm_stats ttft_ms;  /* prefill to first logits, per repetition (pp, pg) */
    struct llm_stats token_ms; /* each generated token (tg, pg), all repetitions */
    enum llm_type kv_k, kv_v;  /* the KV cache's types (the caller sets them first) */
    double roof_gbs;           /* roofline at n_threads: read bandwidth (GB/s) ... */
    double roof_gflops;        /* ... and FMA peak (GFLOP/s) */
    double gbs, gbs_pct;       /* decode: model_bytes / mean token time; % of roof_gbs */
    double gflops, gflops_pct; /* prefill: 2 x n_params x n_prompt / mean prefill time; % of roof_gflops */
    /* batched tests (llm_bench_run_batch), in llama-batched-bench's terms */
    int32_t n_seq;             /* B sequences of n_prompt (PP) then n_gen (TG) tokens; 0: not batched */
    struct llm_stats pp_s, tg_s; /* T_PP and T_TG, seconds, per repetition */
    double s_pp, s_tg, s_all;  /* B PP / T_PP, B TG / T_TG, B (PP + TG) / (T_PP + T_TG), means */
    double roof_dot;           /* int16 dot-product peak (GOP/s) at n_threads */
    int int_weights;           /* most weight bytes are integer types: decode's peak is roof_dot */
    double tg_gops, tg_peak_pct; /* decode: 2 x n_params x S_TG; its % of roof_dot or roof_gflops */
    uint64_t kv_bytes;         /* the KV cache's blocks in use at the end (B x (PP + TG) tokens) */
};
void llm_bench_result_release(struct llm_bench_result *r);

/* What goes above the results (md: a few lines; json/jsonl: fields of every
 * object; csv: columns). */
struct llm_bench_header {
    struct llm_machine machine;
    int bw_measured, peak_measured; /* roofline figures: 1 probed, 0 given by the user */
    char test_time[32];   /* UTC, ISO 8601 */
    char isa[16];         /* --kernels: llm_matmul_isa_name() */
};

/* Print results as `fmt`. md prints the header lines, the table and nothing
 * else; csv a header row then one row per result; json one array; jsonl one
 * object per line. */
llm_status llm_bench_print(FILE *f, enum llm_bench_format fmt, const struct llm_bench_header *h,
                           const struct llm_bench_result *r, size_t n);

/* ---- comparison -------------------------------------------------------------- */

/* One row of a results file, as read back for --compare. */
struct llm_bench_row {
    char key[640];        /* "MODEL | TEST | t THREADS" */
    double avg_ts;
};

/* Read a results file written with -o json or -o jsonl (detected from the
 * first character). Errors name the file (and line for jsonl). *rows is
 * freed with llm_free. */
llm_status llm_bench_rows_load(struct llm_bench_row **rows, size_t *n, const char *path);
/* The same from a buffer; `name` goes into the details. */
llm_status llm_bench_rows_parse(struct llm_bench_row **rows, size_t *n, const char *text, size_t len,
                                const char *name);

struct llm_bench_cmp {
    const char *key;
    double old_ts, new_ts;   /* NaN when the row is missing on that side */
    double change_pct;       /* (new - old) / old x 100 */
    int regression;          /* change_pct < -threshold */
};

/* Compare every row of `old` with the row of the same key in `new` (tokens/s;
 * higher is better). cmp (n_old + n_new entries) receives the rows of old
 * in order, then those only in new. Returns the number of regressions. */
size_t llm_bench_compare(struct llm_bench_cmp *cmp, size_t *n_cmp, const struct llm_bench_row *old,
                         size_t n_old, const struct llm_bench_row *new_, size_t n_new, double threshold);
llm_status llm_bench_compare_print(FILE *f, const struct llm_bench_cmp *cmp, size_t n, double threshold);

/* ---- plans ------------------------------------------------------------------- */

#define LLM_BENCH_MAX_LIST 64

struct llm_bench_test {
    int32_t n_prompt, n_gen;
};

struct llm_bench_plan {
    const char *models[LLM_BENCH_MAX_LIST]; /* borrowed from argv or owned[] */
    size_t n_models;
    struct llm_bench_test tests[3 * LLM_BENCH_MAX_LIST]; /* pp, then tg, then pg */
    size_t n_tests;
    int threads[LLM_BENCH_MAX_LIST];
    size_t n_threads;
    int reps, warmup;
    int have_format;
    enum llm_bench_format format;
    char *owned[LLM_BENCH_MAX_LIST + 1];      /* strings from a suite file */
    size_t n_owned;
};

/* Defaults: no models, no tests, reps 5, warmup 1, md. */
void llm_bench_plan_init(struct llm_bench_plan *p);
void llm_bench_plan_release(struct llm_bench_plan *p);

/* Parse an integer list: comma-separated items, each N, FIRST-LAST,
 * FIRST-LAST+STEP or FIRST-LAST*MULT (as llama-bench). Values must lie in
 * [min, max]; at most `cap` values. Errors name `what`. */
llm_status llm_bench_parse_list(const char *s, const char *what, int64_t min, int64_t max,
                                int64_t *out, size_t cap, size_t *n);

/* Append tests from lists: pp for each of prompt[], tg for each of gen[],
 * and one pg test per "P,G" pair. */
llm_status llm_bench_plan_add(struct llm_bench_plan *p, int is_gen, const int64_t *v, size_t n);
llm_status llm_bench_plan_add_pg(struct llm_bench_plan *p, const char *pair);

/* Read a suite: a YAML map with the keys models (list of paths), prompt,
 * gen (lists of integers, or a string list "128,512"), pg (list of "P,G"),
 * threads, repetitions, warmup and output (md, csv, json, jsonl). Errors
 * are LLM_E_FORMAT naming "NAME:LINE". */
llm_status llm_bench_suite_parse(struct llm_bench_plan *p, const char *text, size_t len,
                                 const char *name);
llm_status llm_bench_suite_load(struct llm_bench_plan *p, const char *path);

/* ---- running (needs the model API) -------------------------------------------- */

struct llm_model;

/* Run one test of `t` on `m` with n_threads: `warmup` unmeasured then `reps`
 * measured repetitions, each on a fresh sequence of pseudo-random tokens
 * (fixed seed: the same tokens every run). Fills r (model_bytes, n_params,
 * samples, statistics; the achieved bandwidth and GFLOP/s against
 * r->roof_gbs / r->roof_gflops, which the caller sets first). `model` is
 * the path, for r->model. Release r with llm_bench_result_release. */
llm_status llm_bench_run(struct llm_bench_result *r, struct llm_model *m, const char *model,
                         const struct llm_bench_test *t, int n_threads, int reps, int warmup);

/* llama-batched-bench's test on `m`: n_seq sequences, each a prompt of
 * t->n_prompt pseudo-random tokens (all in one batch: T_PP), then t->n_gen
 * steps that each decode one token of every sequence (T_TG); `warmup` +
 * `reps` repetitions in a fresh context. Fills r as llm_bench_run does, and
 * its batched fields (r->roof_dot set by the caller first). */
llm_status llm_bench_run_batch(struct llm_bench_result *r, struct llm_model *m, const char *model,
                               const struct llm_bench_test *t, int32_t n_seq, int n_threads,
                               int reps, int warmup);

/* ---- serving (--serve) -------------------------------------------------------- */

/* A serving workload: an OpenAI batch request file, or synthetic requests
 * made of a text's tokens, arriving all at once or as a Poisson process.
 * Synthetic requests are greedy and ignore end-of-generation, so each gives
 * exactly its drawn number of tokens (as vLLM's random dataset). */
struct llm_serve_params {
    const char *requests;           /* an OpenAI batch JSONL file ("-": stdin), or NULL */
    const char *text;               /* synthetic: prompts are windows of this text's tokens */
    int32_t n_requests;             /* synthetic: how many (default 256) */
    int32_t prompt_min, prompt_max; /* synthetic: prompt tokens, uniform (default 32-512) */
    int32_t gen_min, gen_max;       /* synthetic: output tokens, uniform (default 16-256) */
    int32_t shared_prefix;          /* synthetic: the text's first N tokens before every prompt */
    uint64_t seed;                  /* lengths, windows and arrivals */
    double rate;                    /* requests/s of Poisson arrivals; 0: all at the start */
    struct llm_engine_params engine;
    struct llm_req_defaults defaults; /* request file: what a line leaves out (llm-run's) */
    /* speculation in the engine (engine.spec is set by the run): */
    const struct llm_spec_params *spec; /* lookup, n-gram sizes, draft length; NULL: none */
    struct llm_model *draft;        /* with spec: the draft model (NULL: lookup) */
    const char *draft_name;         /* for the result: the draft's path */
    enum llm_type kv_k, kv_v;       /* KV cache types (default f16, llm-run's) */
};
void llm_serve_params_default(struct llm_serve_params *p);

struct llm_serve_result {
    char model[512];
    char test[96];                 /* "serve FILE, 4/s", "serve 256 x p32-512 g16-256, all at once" */
    int n_threads;
    int32_t max_seqs;
    int prefix_cache;
    double rate;                   /* 0: all at once */
    int64_t requests;              /* answered */
    int64_t errors;                /* lines of the request file refused (each named on stderr) */
    int64_t prompt_tokens, output_tokens;
    double seconds;                /* from the first arrival to the last answer */
    double arrival_span_s;         /* from the first arrival to the last (0: all at once) */
    double req_s, out_ts, total_ts; /* requests/s, output tokens/s, (prompt + output) tokens/s */
    struct llm_stats ttft_ms;      /* arrival to first token, per request */
    struct llm_stats tpot_ms;      /* (e2e - ttft) / (tokens - 1), per request of 2+ tokens */
    struct llm_stats itl_ms;       /* every gap between two tokens of a sequence */
    struct llm_stats e2e_ms;       /* arrival to last token, per request */
    int64_t lookup_tokens, hit_tokens; /* prompt tokens looked up in the prefix index, found */
    int64_t preemptions;
    int32_t kv_blocks, kv_peak;    /* the pool, and the most blocks in use */
    char draft[512];               /* speculation: the draft's path or "lookup"; "" none */
    int64_t spec_drafted, spec_accepted, spec_rounds, spec_passes, spec_tokens; /* engine.h */
};

/* Run the workload on m with n_threads in a fresh context of max_seqs
 * sequences (n_ctx 0: the longest synthetic sequence, or the model's
 * default for a file), speculating with p->spec (the draft model, if any,
 * in a context of as many sequences and blocks). Requests join the engine when their arrival time
 * comes; latencies count from it. Bad lines of a request file are named on
 * stderr, counted in r->errors and not run. */
llm_status llm_bench_serve(struct llm_serve_result *r, struct llm_model *m, const char *model,
                           const struct llm_serve_params *p, int n_threads, int32_t n_ctx);
llm_status llm_bench_sprint(FILE *f, enum llm_bench_format fmt, const struct llm_bench_header *h,
                            const struct llm_serve_result *r, size_t n);

/* ---- speculative decoding (--draft, --lookup) ----------------------------------- */

struct llm_spec_bench_params {
    const char *draft;          /* the draft model's path (for the result), or NULL */
    struct llm_spec_params spec; /* lookup, n-gram sizes, draft length (draft: set by the run) */
    int chat;                   /* each prompt is a user message in the chat template */
    int32_t n_gen;              /* tokens per prompt at most (default 128; EOS ends sooner) */
    int reps;                   /* passes over the prompt set (default 3) */
    enum llm_type kv_k, kv_v;   /* both models' KV cache types (default f16, llm-run's) */
};
void llm_spec_bench_params_default(struct llm_spec_bench_params *p);

/* The prompts of a file: one per non-empty line, "\n" a newline and "\\" a
 * backslash within it. Errors are LLM_E_FORMAT naming "NAME:LINE". */
llm_status llm_spec_prompts_parse(char ***out, int32_t *n, const char *text, size_t len,
                                  const char *name);
void llm_spec_prompts_free(char **v, int32_t n);
/* The token ids of prompt `text` (with BOS where the model wants it), in
 * the model's chat template with chat. *ids malloc'd. */
llm_status llm_bench_prompt_ids(struct llm_model *m, const char *text, int chat, int32_t **ids,
                                size_t *n);

struct llm_spec_result {
    char model[512];
    char draft[512];            /* the draft's path, or "lookup" */
    int n_threads, reps;
    int32_t n_prompts, n_gen;
    int64_t tokens;             /* generated per pass over the prompts (the same both ways) */
    struct llm_stats plain_ts, spec_ts; /* generated tokens/s of each pass */
    double speedup;             /* the median over passes of spec / plain t/s */
    int64_t drafted, accepted, rounds, passes; /* of the last pass, speculating */
};

/* Greedy generation of every prompt, plain then speculating (a draft
 * model dm, or p->spec.lookup), p->reps times; LLM_E_INVALID if the two
 * texts ever differ. n_threads for both models. */
llm_status llm_bench_spec(struct llm_spec_result *r, struct llm_model *m, const char *model,
                          struct llm_model *dm, const struct llm_spec_bench_params *p,
                          char *const *prompts, int32_t n_prompts, int n_threads);
llm_status llm_bench_spec_print(FILE *f, enum llm_bench_format fmt, const struct llm_bench_header *h,
                                const struct llm_spec_result *r, size_t n);

/* ---- constrained decoding (--grammar, --json-schema, --regex, --json-object) ---- */

struct llm_grammar_bench_params {
    enum llm_grammar_kind kind; /* where the grammar comes from (grammar/grammar.h) */
    const char *arg;            /* its file or expression */
    int chat;                   /* each prompt is a user message in the chat template */
    int32_t n_gen;              /* tokens per prompt at most (default 128) */
    int reps;                   /* passes over the prompt set (default 3) */
    enum llm_type kv_k, kv_v;   /* KV cache types (default f16, llm-run's) */
};
void llm_grammar_bench_params_default(struct llm_grammar_bench_params *p);

struct llm_grammar_result {
    char model[512];
    char grammar[512];          /* the file, or the option */
    int n_threads, reps;
    int32_t n_prompts, n_gen;
    int64_t plain_tokens, constrained_tokens; /* generated in the last pass */
    struct llm_stats plain_ms, constrained_ms; /* milliseconds per generated token, each pass */
    double overhead;            /* median constrained / median plain - 1 */
    double compile_ms;          /* to parse the grammar and bind it to the vocabulary */
    double mask_median_us, mask_p99_us, mask_max_us;
    double mask_ms_per_token;   /* all mask time over all constrained tokens */
    int64_t masks, cached, forced;
    int32_t ended;              /* prompts of the last pass whose text the model ended (EOS) */
};

/* Greedy generation of every prompt, plain then under the grammar,
 * p->reps times, alternated prompt by prompt so that both see the same
 * machine. */
llm_status llm_bench_grammar(struct llm_grammar_result *r, struct llm_model *m, const char *model,
                             const struct llm_grammar_bench_params *p, char *const *prompts,
                             int32_t n_prompts, int n_threads);
llm_status llm_bench_grammar_print(FILE *f, enum llm_bench_format fmt,
                                   const struct llm_bench_header *h,
                                   const struct llm_grammar_result *r, size_t n);

/* Perplexity of the text file `path` with windows of n_ctx tokens
 * (llm_perplexity's default protocol, or every prediction with score_all);
 * max_chunks > 0 keeps only the first max_chunks windows (llama-perplexity
 * --chunks); the KV cache holds K in kv_k and V in kv_v. *n_tokens receives the token
 * count used. */
llm_status llm_bench_perplexity(struct llm_model *m, const char *path, int32_t n_ctx, int n_threads,
                                int64_t max_chunks, int score_all, enum llm_type kv_k,
                                enum llm_type kv_v,
                                double *ppl, double *stderr_, size_t *n_tokens);

/* ---- kernel microbenchmarks (--kernels) -------------------------------------- */

/* The weight matrices of one decoder layer and the output head at a model's
 * shapes: attn (dim rows of dim: q and o), ffn_up (ffn_dim rows of dim: gate
 * and up), ffn_down (dim rows of ffn_dim) and output (n_vocab rows of dim). */
struct llm_bench_kshape {
    char name[16];
    int64_t rows, ne0;
};
#define LLM_BENCH_N_KSHAPES 4
/* The shapes without a model: stories110m. */
#define LLM_BENCH_KDEF_DIM 768
#define LLM_BENCH_KDEF_FFN 2048
#define LLM_BENCH_KDEF_VOCAB 32000
#define LLM_BENCH_KDEF_HEADS 12
/* Fills out[LLM_BENCH_N_KSHAPES]; LLM_E_INVALID when a size is not positive. */
llm_status llm_bench_kernel_shapes(struct llm_bench_kshape *out, int32_t dim, int32_t ffn_dim,
                                   int32_t n_vocab);

/* The types --kernels measures by default. */
#define LLM_BENCH_KTYPES_DEFAULT "f32,f16,bf16,q8_0,q4_0,q4_1,q8_g128,q4_g128,q4z_g128,nf4,fp8_e4m3"
/* Parse a comma-separated type list (at most cap); LLM_E_INVALID naming a bad item. */
llm_status llm_bench_parse_types(const char *s, enum llm_type *out, size_t cap, size_t *n);

/* One kernel measurement. kernel "matvec" (decode: y = W x, batch 1),
 * "matmul" (prefill: batch activations at once) or "attn" (one decode step
 * of single-query attention: rows = KV tokens, cols = head_dim, batch =
 * query heads; the KV is f32). */
struct llm_bench_kresult {
    char kernel[8];
    char type[16];        /* weight type; "f32" (the KV) for attn */
    char shape[16];       /* llm_bench_kshape name, or "attn" */
    int64_t rows, cols, batch;
    int32_t n_kv_heads;   /* attn only (0 otherwise) */
    int n_threads, reps;
    double *samples_ns;   /* (reps) one call each */
    struct llm_stats ns;
    uint64_t bytes;       /* read per call: the packed weights, or K and V */
    double flops;         /* per call: 2 per multiply-add */
    double roof_gbs, roof_gflops;
    double gbs, gbs_pct, gflops, gflops_pct;
};
void llm_bench_kresult_release(struct llm_bench_kresult *r);

/* Cost of one call: a product reads rows x row_bytes(t, ne0) weight bytes
 * and does 2 x rows x ne0 x nb flops; attention reads K and V (2 x n_ctx x
 * n_kv_heads x head_dim floats) and does 4 x n_heads x n_ctx x head_dim
 * flops (scores and weighted sum; the softmax is not counted). */
llm_status llm_bench_product_cost(enum llm_type t, int64_t rows, int64_t ne0, int64_t nb,
                                  uint64_t *bytes, double *flops);
/* One decode step's attention: K and V of n_ctx positions, elt bytes an element. */
void llm_bench_attn_cost(int64_t n_ctx, int32_t n_heads, int32_t n_kv_heads, int32_t head_dim,
                         size_t elt, uint64_t *bytes, double *flops);
/* From r->ns.mean, bytes, flops and the roofs: gbs = bytes / mean ns,
 * gflops = flops / mean ns, and their shares (%) of the roofs (0 for a roof of 0). */
void llm_bench_kernel_figures(struct llm_bench_kresult *r);

/* Single-query attention of heads [h0, h1): q (n_heads, hd), K and V
 * (n_ctx, n_kv_heads, hd), out (n_heads, hd), scores (n_heads, n_ctx)
 * scratch. Query head h reads KV head h / (n_heads / n_kv_heads); scores are
 * scaled by 1/sqrt(hd). The plain reference loop. */
void llm_bench_attention(const float *q, const float *K, const float *V, float *out, float *scores,
                         int64_t n_ctx, int32_t n_heads, int32_t n_kv_heads, int32_t hd, int32_t h0,
                         int32_t h1);
/* The same over fp16 K and V with the kernels a decode step runs (ops/vec.h:
 * the dots and the sums 16 positions, a KV block, at a time, the softmax):
 * what the attn benchmark times. */
void llm_bench_attention_kernels(const float *q, const uint16_t *K, const uint16_t *V, float *out,
                                 float *scores, int64_t n_ctx, int32_t n_heads, int32_t n_kv_heads,
                                 int32_t hd, int32_t h0, int32_t h1);

struct llm_bench_kspec {
    struct llm_bench_kshape shapes[LLM_BENCH_N_KSHAPES];
    enum llm_type types[LLM_BENCH_MAX_LIST];
    size_t n_types;
    const int *threads;   /* (n_threads) */
    const double *roof_gbs, *roof_gflops; /* (n_threads) roofs at each thread count */
    size_t n_threads;
    int reps, warmup;
    int64_t nb;           /* matmul batch (128) */
    int64_t n_ctx;        /* attention: KV tokens */
    int32_t n_heads, n_kv_heads, head_dim;
};

/* Run every type x shape x thread count (matvec then matmul), then attention
 * at each thread count. *out (allocated, *n entries) is released with
 * llm_bench_kresult_release on each and llm_free. Weights are random
 * (fixed seed), quantized with llm_quantize_row. */
llm_status llm_bench_kernels(const struct llm_bench_kspec *k, struct llm_bench_kresult **out, size_t *n);

llm_status llm_bench_kprint(FILE *f, enum llm_bench_format fmt, const struct llm_bench_header *h,
                            const struct llm_bench_kresult *r, size_t n);

/* ---- KL divergence against a base model (--base) ------------------------------ */

/* lp[i] = log softmax(logits)[i], in double; n > 0. */
void llm_log_softmax(const float *logits, int64_t n, double *lp);
/* KL(P || Q) = sum_i p_i (log p_i - log q_i) from log-probabilities; terms
 * with p_i = 0 count 0. */
double llm_kl_divergence(const double *lp, const double *lq, int64_t n);
/* Index of the largest value (the first of equal ones). */
int64_t llm_argmax(const float *x, int64_t n);

struct llm_kld_summary {
    size_t n;                        /* tokens scored */
    double kld_mean, kld_stderr;     /* stderr = sample sd / sqrt(n) */
    double kld_median, kld_p99;
    double top1_pct;                 /* % of tokens where both argmaxes agree */
    double ppl_base, ppl_base_stderr, ppl_model, ppl_model_stderr; /* as llm_perplexity */
};
/* Summarize per-token values (n > 0): kld, nll_base, nll_model (the
 * negative log-probabilities of the true next token) and agree (0/1). */
llm_status llm_kld_summarize(struct llm_kld_summary *s, const double *kld, const double *nll_base,
                             const double *nll_model, const unsigned char *agree, size_t n);

/* Run base and m over the same windows of the text file `path` (the
 * llama-perplexity protocol: windows of n_ctx tokens, BOS first when the
 * tokenizer adds one, the second half scored) and summarize KL(base || m).
 * The text is tokenized with m's tokenizer; the vocabularies must have the
 * same size. The base runs over an f32 KV cache, m over K in kv_k and V in
 * kv_v (m may be base: the KL divergence a cache type costs). */
llm_status llm_bench_kld(struct llm_model *base, struct llm_model *m, const char *path, int32_t n_ctx,
                         int n_threads, int64_t max_chunks, enum llm_type kv_k,
                         enum llm_type kv_v, struct llm_kld_summary *s, size_t *n_tokens);

#endif
