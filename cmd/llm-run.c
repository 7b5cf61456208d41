/* llm-run: generate text with a model (one prompt or a chat), and the
 * tokenizer's two directions. */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "../lib/llm.h"

enum { OPT_TEMP = 256, OPT_TOPK, OPT_TOPP, OPT_MINP, OPT_REPEAT, OPT_LASTN, OPT_PRESENCE,
       OPT_FREQUENCY, OPT_STOP, OPT_IGNORE_EOS, OPT_LOGPROBS, OPT_ECHO, OPT_CHAT, OPT_SYSTEM,
       OPT_TEMPLATE, OPT_JSON, OPT_CTX, OPT_KVTYPE, OPT_KVTYPE_K, OPT_KVTYPE_V, OPT_TRUNCATE, OPT_TOKENIZE, OPT_DETOKENIZE,
       OPT_NOBOS, OPT_SPECIAL, OPT_TOKENIZER, OPT_NOVERIFY, OPT_NSEQ, OPT_KVMEM, OPT_KVBLOCKS,
       OPT_BLOCKSIZE, OPT_BATCH, OPT_RESUME, OPT_CORDER, OPT_MAXSEQS, OPT_STEPTOK, OPT_NOPREFIX,
       OPT_STATSJSON, OPT_KVTRACE, OPT_DRAFT, OPT_LOOKUP, OPT_NGRAMMIN, OPT_NGRAMMAX, OPT_DRAFTN,
       OPT_DRAFTMAX, OPT_SPECRULE, OPT_GRAMMAR, OPT_JSONOBJ, OPT_REGEX, OPT_SCHEMA, OPT_KVIN,
       OPT_KVOUT, OPT_PREFILLONLY, OPT_KVCOMPRESS, OPT_PROMPTCACHE, OPT_ROLE };

static const struct llm_opt opts[] = {
    { 'm', "model", LLM_ARG_REQUIRED, "FILE", "the model (.llm, GGUF or llama2.c; '-' = stdin)", "file" },
    { OPT_TOKENIZER, "tokenizer", LLM_ARG_REQUIRED, "FILE", "llama2.c tokenizer.bin for a llama2.c checkpoint", "file" },
    { OPT_NOVERIFY, "no-verify", LLM_ARG_NONE, NULL, "do not check the tensor checksums (.llm) nor look for NaN and infinite weights while loading", NULL },
    { 'p', "prompt", LLM_ARG_REQUIRED, "TEXT", "the prompt (default: read -f FILE or stdin)", NULL },
    { 'f', "file", LLM_ARG_REQUIRED, "FILE", "read the prompt from FILE ('-' = stdin)", "file" },
    { 'n', "n-predict", LLM_ARG_REQUIRED, "N", "generate at most N tokens (default: -1, until EOS or the context is full)", NULL },
    { OPT_TEMP, "temp", LLM_ARG_REQUIRED, "T", "temperature; 0 is greedy (default: 0.8)", NULL },
    { OPT_TOPK, "top-k", LLM_ARG_REQUIRED, "N", "keep the N most likely tokens; 0 = off (default: 40)", NULL },
    { OPT_TOPP, "top-p", LLM_ARG_REQUIRED, "P", "nucleus sampling; 1 = off (default: 0.95)", NULL },
    { OPT_MINP, "min-p", LLM_ARG_REQUIRED, "P", "drop tokens below P times the best one; 0 = off (default: 0.05)", NULL },
    { OPT_REPEAT, "repeat-penalty", LLM_ARG_REQUIRED, "F", "penalise repeated tokens; 1 = off (default: 1)", NULL },
    { OPT_LASTN, "repeat-last-n", LLM_ARG_REQUIRED, "N", "tokens of history the penalties see; -1 = all (default: 64)", NULL },
    { OPT_PRESENCE, "presence-penalty", LLM_ARG_REQUIRED, "F", "subtract F from seen tokens (default: 0)", NULL },
    { OPT_FREQUENCY, "frequency-penalty", LLM_ARG_REQUIRED, "F", "subtract F per occurrence (default: 0)", NULL },
    { 's', "seed", LLM_ARG_REQUIRED, "N", "random seed (default: from the clock; shown by -v and --json)", NULL },
    { OPT_STOP, "stop", LLM_ARG_REQUIRED, "TEXT", "stop when TEXT is generated (not printed; repeatable)", NULL },
    { OPT_IGNORE_EOS, "ignore-eos", LLM_ARG_NONE, NULL, "do not stop at end-of-generation tokens", NULL },
    { OPT_LOGPROBS, "top-logprobs", LLM_ARG_REQUIRED, "N", "report the N most likely tokens at each step (--json, else stderr)", NULL },
    { OPT_ECHO, "echo", LLM_ARG_NONE, NULL, "print the prompt before the continuation", NULL },
    { OPT_CHAT, "chat", LLM_ARG_NONE, NULL, "wrap the prompt in the model's chat template (interactive on a terminal)", NULL },
    { OPT_SYSTEM, "system", LLM_ARG_REQUIRED, "TEXT", "with --chat: the system message", NULL },
    { OPT_TEMPLATE, "template", LLM_ARG_REQUIRED, "NAME", "with --chat: use a built-in template instead of the model's",
      "chatml llama2 llama3 mistral zephyr phi3 gemma" },
    { OPT_JSON, "json", LLM_ARG_NONE, NULL, "print one JSON object (text, token counts, timings) instead of streaming", NULL },
    { 't', "threads", LLM_ARG_REQUIRED, "N", "threads (default: the number of cores)", NULL },
    { OPT_CTX, "ctx", LLM_ARG_REQUIRED, "N", "context size in tokens (default: the model's, at most 4096)", NULL },
    { OPT_KVTYPE, "kv-type", LLM_ARG_REQUIRED, "TYPE", "KV cache type of K and V: f32, f16, bf16, q8 (int8 in blocks of 32 with their scale), fp8_e4m3, q4 (4-bit blocks of 32, rotated) or q4ch (4-bit keys per channel over each KV block, q4 values) (default: f16; with --kv-in, the state's)", "f32 f16 bf16 q8 fp8_e4m3 q4 q4ch" },
    { OPT_KVTYPE_K, "kv-type-k", LLM_ARG_REQUIRED, "TYPE", "KV cache type of K alone", "f32 f16 bf16 q8 fp8_e4m3 q4 q4ch" },
    { OPT_KVTYPE_V, "kv-type-v", LLM_ARG_REQUIRED, "TYPE", "KV cache type of V alone", "f32 f16 bf16 q8 fp8_e4m3 q4" },
    { OPT_NSEQ, "n-seq", LLM_ARG_REQUIRED, "N", "N completions of the prompt, sharing its KV blocks, decoded as one batch (default: 1)", NULL },
    { OPT_NSEQ, "parallel", LLM_ARG_REQUIRED, "N", "the same as --n-seq", NULL },
    { OPT_KVMEM, "kv-mem", LLM_ARG_REQUIRED, "SIZE", "KV cache budget, e.g. 64M or 2G (default: what --ctx tokens of every completion need)", NULL },
    { OPT_KVBLOCKS, "kv-blocks", LLM_ARG_REQUIRED, "N", "KV cache budget in blocks (default: as --kv-mem)", NULL },
    { OPT_BLOCKSIZE, "block-size", LLM_ARG_REQUIRED, "N", "tokens per KV block (default: 16)", NULL },
    { OPT_PREFILLONLY, "prefill-only", LLM_ARG_NONE, NULL, "compute the prompt and write its state (--kv-out); generate nothing", NULL },
    { OPT_KVOUT, "kv-out", LLM_ARG_REQUIRED, "FILE", "write the state after the prompt (KV, tokens, sampler, logits) to FILE ('-' = stdout, with --prefill-only)", "file" },
    { OPT_KVIN, "kv-in", LLM_ARG_REQUIRED, "FILE", "continue from a state that --kv-out wrote ('-' = stdin): the same text as one uninterrupted run", "file" },
    { OPT_KVCOMPRESS, "kv-compress", LLM_ARG_NONE, NULL, "with --kv-out or --prompt-cache: compress the state with zstd", NULL },
    { OPT_PROMPTCACHE, "prompt-cache", LLM_ARG_REQUIRED, "FILE", "reuse the state in FILE for the part of the prompt it holds, and save the prompt's state there when it held less", "file" },
    { OPT_GRAMMAR, "grammar", LLM_ARG_REQUIRED, "FILE", "constrain the text to the GBNF grammar in FILE (llama.cpp's grammar language; see llm-run(1))", "file" },
    { OPT_SCHEMA, "json-schema", LLM_ARG_REQUIRED, "FILE", "constrain the text to JSON that validates against the JSON Schema in FILE", "file" },
    { OPT_JSONOBJ, "json-object", LLM_ARG_NONE, NULL, "constrain the text to one JSON value", NULL },
    { OPT_REGEX, "regex", LLM_ARG_REQUIRED, "RE", "constrain the text to match the regular expression RE, whole", NULL },
    { OPT_BATCH, "batch", LLM_ARG_REQUIRED, "FILE", "answer the requests of an OpenAI batch JSONL file ('-' = stdin) by continuous batching; one output line per input line", "file" },
    { 'o', "output", LLM_ARG_REQUIRED, "FILE", "with --batch: write the output lines to FILE (default: stdout)", "file" },
    { OPT_RESUME, "resume", LLM_ARG_NONE, NULL, "with --batch -o FILE: skip the lines answered in FILE by an interrupted run, append the rest", NULL },
    { OPT_CORDER, "completion-order", LLM_ARG_NONE, NULL, "with --batch: write each line when it is done (default: in input order)", NULL },
    { OPT_MAXSEQS, "max-seqs", LLM_ARG_REQUIRED, "N", "with --batch: sequences running at once (default: 16)", NULL },
    { OPT_STEPTOK, "step-tokens", LLM_ARG_REQUIRED, "N", "with --batch: tokens per forward pass at most; longer prompts go in chunks (default: 512)", NULL },
    { OPT_NOPREFIX, "no-prefix-cache", LLM_ARG_NONE, NULL, "with --batch: do not keep computed prompt blocks for later requests", NULL },
    { OPT_STATSJSON, "stats-json", LLM_ARG_REQUIRED, "FILE", "with --batch: write the run's summary as JSON to FILE", "file" },
    { OPT_KVTRACE, "kv-trace", LLM_ARG_REQUIRED, "FILE", "with --batch: write one JSON line per scheduler step to FILE (llm-kvstat --trace reads it)", "file" },
    { OPT_ROLE, "role", LLM_ARG_REQUIRED, "ROLE", "with --batch, in two processes: 'prefill' computes the prompts and writes their states as a stream (-o or stdout); 'decode' reads that stream (--batch FILE, default stdin) and answers the requests", "prefill decode" },
    { OPT_DRAFT, "draft", LLM_ARG_REQUIRED, "FILE", "speculative decoding with FILE as the draft model (the target's vocabulary; a low-bit llm-quantize of the target is a good one); with --batch, for every request", "file" },
    { OPT_LOOKUP, "lookup", LLM_ARG_NONE, NULL, "speculative decoding by prompt lookup: draft the tokens that followed the last n-gram where it occurred before; with --batch, for every request", NULL },
    { OPT_NGRAMMIN, "ngram-min", LLM_ARG_REQUIRED, "N", "with --lookup: the shortest n-gram matched (default: 2)", NULL },
    { OPT_NGRAMMAX, "ngram-max", LLM_ARG_REQUIRED, "N", "with --lookup: the longest n-gram matched, tried first (default: 4)", NULL },
    { OPT_DRAFTN, "draft-n", LLM_ARG_REQUIRED, "N", "draft N tokens per target pass (default: chosen from the measured acceptance and costs, none when drafting does not pay)", NULL },
    { OPT_DRAFTMAX, "draft-max", LLM_ARG_REQUIRED, "N", "the most tokens the chosen draft length reaches (default: 16)", NULL },
    { OPT_SPECRULE, "spec-rule", LLM_ARG_REQUIRED, "RULE", "which drafts are kept when sampling: 'match' keeps a draft the target draws itself, the text of plain decoding for the seed; 'rejection' keeps x with probability min(1, p/q), the target's distribution with more drafts kept (default: match)", "match rejection" },
    { OPT_TRUNCATE, "truncate", LLM_ARG_NONE, NULL, "keep BOS and the last ctx/2 tokens of a prompt longer than the context", NULL },
    { OPT_TOKENIZE, "tokenize", LLM_ARG_NONE, NULL, "print the token ids of the text and exit", NULL },
    { OPT_DETOKENIZE, "detokenize", LLM_ARG_NONE, NULL, "read token ids and print their text", NULL },
    { OPT_NOBOS, "no-bos", LLM_ARG_NONE, NULL, "with --tokenize: do not add BOS", NULL },
    { OPT_SPECIAL, "parse-special", LLM_ARG_NONE, NULL, "special tokens written in the text are tokens (--detokenize: print them)", NULL },
};

static struct llm_cli cli = {
    .prog = "llm-run",
    .synopsis = "-m MODEL [-p TEXT | -f FILE] [OPTIONS]\n"
                "-m MODEL --chat [--system TEXT] [-p TEXT | -f FILE] [OPTIONS]\n"
                "-m MODEL --batch FILE [-o FILE [--resume]] [OPTIONS]\n"
                "-m MODEL --batch FILE --role prefill [-o STREAM] | llm-run -m MODEL --role decode [-o FILE] [OPTIONS]\n"
                "-m MODEL [-p TEXT | -f FILE] --prefill-only --kv-out FILE [OPTIONS]\n"
                "-m MODEL --kv-in FILE [OPTIONS]\n"
                "-m MODEL --tokenize [--no-bos] [--parse-special] [--json] [-p TEXT | -f FILE]\n"
                "-m MODEL --detokenize [--parse-special] [-p IDS | -f FILE]",
    .summary = "Generate text with a language model; tokenize and detokenize.",
    .opts = opts,
    .n_opts = sizeof opts / sizeof opts[0],
    .footer = "The continuation is streamed to stdout as it is generated. Without -p or -f the\n"
              "prompt is read from stdin. Ctrl-C stops generation; the text so far is kept.\n\n"
              "Examples:\n"
              "  llm-run -m stories.llm -p 'Once upon a time' -n 100 --temp 0\n"
              "  llm-run -m smollm2.llm --chat -p 'What is the capital of France?'\n"
              "  llm-run -m smollm2.llm -p 'Once upon a time' --n-seq 4 --seed 7 -n 64\n"
              "  llm-run -m smollm2.llm --batch requests.jsonl -o answers.jsonl --temp 0\n"
              "  llm-run -m smollm2.llm --batch requests.jsonl --role prefill | llm-run -m smollm2.llm --role decode --temp 0\n"
              "  llm-run -m smollm2-f32.llm --draft smollm2-gptq4.llm -p 'Once upon a time' --temp 0 -v\n"
              "  llm-run -m smollm2.llm --batch rewrites.jsonl -o answers.jsonl --lookup\n"
              "  llm-run -m smollm2.llm -f long.txt --prefill-only --kv-out - | llm-run -m smollm2.llm --kv-in - -n 64\n"
              "  echo 'Hello world' | llm-run -m smollm2.llm --tokenize --json\n"
              "  llm-run -m smollm2.llm --detokenize -p '19556 905'\n",
};

struct args {
    const char *model, *tokenizer, *prompt, *file, *system, *tmpl;
    int32_t n_predict, n_ctx, top_logprobs, n_seq, kv_blocks, block_size;
    uint64_t kv_mem;
    struct llm_sampler_params sp;
    int have_seed, have_sampling, ignore_eos, echo, chat, json, threads, truncate;
    int tokenize, detokenize, no_bos, special, no_verify;
    const char *batch, *output, *stats_json, *kv_trace;
    int resume, completion_order, no_prefix, have_gen;
    const char *draft;          /* speculative decoding: the draft model */
    int have_spec;              /* an option that needs --draft or --lookup */
    int have_ngram, have_dmax;
    struct llm_spec_params spec;
    const char *grammar;        /* constrained decoding: a GBNF file, */
    const char *schema;         /* a JSON Schema file, */
    const char *regex;          /* a regular expression, */
    int json_object;            /* or any JSON value */
    struct llm_grammar *gram;   /* the one given, compiled */
    struct llm_gmask *gmask;
    double t_grammar_s;         /* time to parse it and index the vocabulary */
    int32_t max_seqs, step_tokens;
    enum llm_type kv[2];        /* the KV cache's K and V types */
    int have_kvtype;            /* 1: K's type was given, 2: V's */
    const char *kv_in, *kv_out, *prompt_cache; /* KV state files (kv/state.h) */
    int prefill_only, kv_compress;
    enum llm_batch_role role;   /* --role: the half of a split batch run */
    unsigned sp_given;          /* SP_* bits: sampler options given (--kv-in keeps the rest) */
    const char *stop[32];
    size_t n_stop;
};

/* Sampler options given on the command line: with --kv-in, the others
 * come from the state. */
enum { SP_TEMP = 1, SP_TOPK = 2, SP_TOPP = 4, SP_MINP = 8, SP_REPEAT = 16, SP_LASTN = 32,
       SP_PRESENCE = 64, SP_FREQUENCY = 128 };

/* --draft or --lookup: generation speculates. */
static int speculating(const struct args *a)
{
    return a->draft || a->spec.lookup;
}

static volatile sig_atomic_t interrupted;

/* The most memory the process has had resident, in bytes (0 if unknown). */
static uint64_t peak_rss(void)
{
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) || ru.ru_maxrss < 0)
        return 0;
    return (uint64_t)ru.ru_maxrss * 1024; /* Linux counts kilobytes */
}

static void on_sigint(int sig)
{
    if (interrupted)
        _exit(128 + sig);
    interrupted = sig;
}

/* SIGINT (and SIGTERM with `term`) set `interrupted`; a second one exits. */
static void catch_signals(int term)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sigaction(SIGINT, &sa, NULL);
    if (term)
        sigaction(SIGTERM, &sa, NULL);
}

/* ---- output -------------------------------------------------------------- */

/* What one completion produced, kept for --json, the chat and --n-seq. */
struct completion {
    char *text; /* (len) the whole continuation */
    size_t len, cap;
    struct llm_gen_token *toks; /* (n_toks) with --top-logprobs and --json */
    int32_t *top_ids; /* (n_toks, k) */
    float *top_lp;    /* (n_toks, k) */
    size_t n_toks, cap_toks, cap_ids, cap_lp;
};

struct out_state {
    const struct args *a;
    const struct llm_tokenizer *tok;
    int capture;                /* keep the text even while streaming it */
    int32_t n;                  /* completions */
    struct completion *comp;    /* (n) */
};

/* A single completion streams its text to stdout; several are kept and
 * printed one after the other at the end (their tokens interleave). */
static int streaming(const struct out_state *o)
{
    return o->n == 1 && !o->a->json;
}

static llm_status on_text(void *ctx, int32_t seq, const char *b, size_t n)
{
    struct out_state *o = ctx;
    struct completion *c = &o->comp[seq];
    if (!streaming(o) || o->capture) {
        void *p = c->text;
        LLM_TRY(llm_grow(&p, &c->cap, c->len + n + 1, 1));
        c->text = p;
        memcpy(c->text + c->len, b, n);
        c->len += n;
        c->text[c->len] = 0;
        if (!streaming(o))
            return LLM_OK;
    }
    if (fwrite(b, 1, n, stdout) != n || fflush(stdout))
        return llm_error_set(LLM_E_IO, "<stdout>: write error: %s", strerror(errno));
    return LLM_OK;
}

static void print_piece_json(FILE *f, const struct llm_tokenizer *t, int32_t id)
{
    const char *b;
    size_t n;
    char buf[8];
    if (llm_token_piece(t, id, 1, &b, &n, buf))
        b = "", n = 0;
    llm_json_string(f, b, n);
}

static void print_piece_text(FILE *f, const struct llm_tokenizer *t, int32_t id)
{
    const char *b;
    size_t n;
    char buf[8];
    if (llm_token_piece(t, id, 1, &b, &n, buf))
        b = "", n = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)b[i];
        if (ch == '\n')
            fputs("\\n", f);
        else if (ch == '\t')
            fputs("\\t", f);
        else if (ch < 0x20)
            fprintf(f, "\\x%02x", ch);
        else
            fputc(ch, f);
    }
}

static llm_status on_token(void *ctx, int32_t seq, const struct llm_gen_token *t)
{
    struct out_state *o = ctx;
    if (o->a->top_logprobs <= 0)
        return LLM_OK;
    if (!o->a->json) {
        if (o->n > 1)
            fprintf(stderr, "[%d]\t", seq + 1);
        fprintf(stderr, "%d\t", t->id);
        print_piece_text(stderr, o->tok, t->id);
        fprintf(stderr, "\t%.4f", (double)t->logprob);
        for (int32_t i = 0; i < t->n_top; i++) {
            fprintf(stderr, "\t%d:", t->top_ids[i]);
            print_piece_text(stderr, o->tok, t->top_ids[i]);
            fprintf(stderr, ":%.4f", (double)t->top_lp[i]);
        }
        fputc('\n', stderr);
        return LLM_OK;
    }
    struct completion *c = &o->comp[seq];
    size_t k = (size_t)o->a->top_logprobs;
    void *p = c->toks;
    LLM_TRY(llm_grow(&p, &c->cap_toks, c->n_toks + 1, sizeof *c->toks));
    c->toks = p;
    p = c->top_ids;
    LLM_TRY(llm_grow(&p, &c->cap_ids, (c->n_toks + 1) * k, sizeof(int32_t)));
    c->top_ids = p;
    p = c->top_lp;
    LLM_TRY(llm_grow(&p, &c->cap_lp, (c->n_toks + 1) * k, sizeof(float)));
    c->top_lp = p;
    struct llm_gen_token *d = &c->toks[c->n_toks];
    *d = *t;
    memcpy(c->top_ids + c->n_toks * k, t->top_ids, (size_t)t->n_top * sizeof(int32_t));
    memcpy(c->top_lp + c->n_toks * k, t->top_lp, (size_t)t->n_top * sizeof(float));
    c->n_toks++;
    return LLM_OK;
}

static void completions_free(struct out_state *o)
{
    for (int32_t i = 0; o->comp && i < o->n; i++) {
        llm_free(o->comp[i].text);
        llm_free(o->comp[i].toks);
        llm_free(o->comp[i].top_ids);
        llm_free(o->comp[i].top_lp);
    }
    llm_free(o->comp);
    o->comp = NULL;
}

static void print_tokens_json(const struct out_state *o, const struct completion *c)
{
    size_t k = (size_t)o->a->top_logprobs;
    printf(",\"tokens\":[");
    for (size_t i = 0; i < c->n_toks; i++) {
        const struct llm_gen_token *t = &c->toks[i];
        printf("%s{\"id\":%d,\"token\":", i ? "," : "", t->id);
        print_piece_json(stdout, o->tok, t->id);
        printf(",\"logprob\":%.6f,\"top_logprobs\":[", (double)t->logprob);
        for (int32_t j = 0; j < t->n_top; j++) {
            int32_t id = c->top_ids[i * k + (size_t)j];
            printf("%s{\"id\":%d,\"token\":", j ? "," : "", id);
            print_piece_json(stdout, o->tok, id);
            printf(",\"logprob\":%.6f}", (double)c->top_lp[i * k + (size_t)j]);
        }
        printf("]}");
    }
    printf("]");
}

/* The KV pool after a run: reserved bytes, blocks, and the most in use. */
struct kv_usage {
    uint64_t bytes, block_bytes, slot_bytes;
    int32_t blocks, peak, block_size;
    int32_t slots, slots_peak; /* sliding-window layers' slots (kv.h) */
};

static void kv_usage_of(const struct llm_context *c, const struct args *a, struct kv_usage *u)
{
    struct llm_kv_stats st;
    llm_context_kv_stats(c, &st, &u->block_bytes);
    u->bytes = llm_context_kv_bytes(c);
    u->blocks = st.n_blocks;
    u->peak = st.peak_used;
    u->block_size = a->block_size > 0 ? a->block_size : 16;
    u->slots = st.slots;
    u->slots_peak = st.slots_peak;
    u->slot_bytes = st.slot_bytes;
}

/* Speculative decoding's figures of one completion: the share of drafted
 * tokens kept, the tokens kept per round that drafted, and the target's
 * passes per generated token (1 without speculation). */
struct spec_rates {
    double kept, per_round, passes;
};

static struct spec_rates spec_rates_of(const struct llm_gen_result *r)
{
    return (struct spec_rates){
        .kept = r->n_drafted ? (double)r->n_accepted / (double)r->n_drafted : 0.0,
        .per_round = r->n_draft_rounds ? (double)r->n_accepted / r->n_draft_rounds : 0.0,
        .passes = r->n_gen ? (double)r->n_passes / r->n_gen : 0.0,
    };
}

static void print_spec_json(const struct llm_gen_result *r)
{
    const struct spec_rates x = spec_rates_of(r);
    printf(",\"speculation\":{\"drafted\":%lld,\"accepted\":%lld,\"acceptance_rate\":%.4f,"
           "\"draft_rounds\":%d,\"mean_accepted_length\":%.3f,\"target_passes\":%d,"
           "\"passes_per_token\":%.4f}", (long long)r->n_drafted, (long long)r->n_accepted, x.kept,
           r->n_draft_rounds, x.per_round, r->n_passes, x.passes);
}

static void report_spec(const struct llm_gen_result *r)
{
    const struct spec_rates x = spec_rates_of(r);
    fprintf(stderr, "%s: speculation: %lld drafted, %lld accepted (%.1f%%), %.2f accepted per "
            "round of %d, %d target passes for %d tokens (%.3f per token)\n", cli.prog,
            (long long)r->n_drafted, (long long)r->n_accepted, 100.0 * x.kept, x.per_round,
            r->n_draft_rounds, r->n_passes, r->n_gen, x.passes);
}

/* One JSON object: for one completion its text and counts at the top
 * level; for several, a "completions" array. */
static void print_json(const struct out_state *o, const struct llm_gen_result *r, uint64_t seed,
                       const struct kv_usage *u)
{
    int32_t total = 0;
    for (int32_t i = 0; i < o->n; i++)
        total += r[i].n_gen;
    if (o->n == 1) {
        const struct completion *c = &o->comp[0];
        printf("{\"text\":");
        llm_json_string(stdout, c->text ? c->text : "", c->len);
        printf(",\"prompt_tokens\":%d,\"generated_tokens\":%d,\"stop_reason\":\"%s\",\"seed\":%llu",
               r->n_prompt, r->n_gen, r->stop_reason, (unsigned long long)seed);
    } else {
        printf("{\"prompt_tokens\":%d,\"generated_tokens\":%d,\"seed\":%llu,\"completions\":[",
               r->n_prompt, total, (unsigned long long)seed);
        for (int32_t i = 0; i < o->n; i++) {
            const struct completion *c = &o->comp[i];
            printf("%s{\"index\":%d,\"seed\":%llu,\"text\":", i ? "," : "", i,
                   (unsigned long long)(seed + (uint64_t)i));
            llm_json_string(stdout, c->text ? c->text : "", c->len);
            printf(",\"generated_tokens\":%d,\"stop_reason\":\"%s\",\"preemptions\":%d",
                   r[i].n_gen, r[i].stop_reason, r[i].n_preempted);
            if (o->a->top_logprobs > 0)
                print_tokens_json(o, c);
            printf("}");
        }
        printf("]");
    }
    printf(",\"cached_tokens\":%d", r->n_cached);
    printf(",\"timings\":{\"prompt_s\":%.6f,\"generation_s\":%.6f,\"prompt_tokens_per_s\":%.2f,"
           "\"generation_tokens_per_s\":%.2f}",
           r->t_prompt_s, r->t_gen_s,
           r->t_prompt_s > 0 ? (r->n_prompt - r->n_cached) / r->t_prompt_s : 0.0,
           r->t_gen_s > 0 ? total / r->t_gen_s : 0.0);
    printf(",\"memory\":{\"peak_rss_bytes\":%llu,\"kv_cache_bytes\":%llu,\"kv_block_tokens\":%d,"
           "\"kv_block_bytes\":%llu,\"kv_blocks\":%d,\"kv_blocks_peak\":%d,\"kv_window_slots\":%d,"
           "\"kv_window_slots_peak\":%d,\"kv_peak_bytes\":%llu}",
           (unsigned long long)peak_rss(), (unsigned long long)u->bytes, u->block_size,
           (unsigned long long)u->block_bytes, u->blocks, u->peak, u->slots, u->slots_peak,
           (unsigned long long)((uint64_t)u->peak * u->block_bytes +
                                (uint64_t)u->slots_peak * u->slot_bytes));
    if (o->n == 1 && speculating(o->a))
        print_spec_json(r);
    if (o->n == 1 && o->a->top_logprobs > 0)
        print_tokens_json(o, &o->comp[0]);
    printf("}\n");
}

/* ---- modes --------------------------------------------------------------- */

/* Where the prompt or the ids come from, for messages. */
static const char *input_name(const struct args *a)
{
    if (a->prompt)
        return "-p";
    return a->file && strcmp(a->file, "-") ? a->file : "<stdin>";
}

static llm_status read_input(const struct args *a, char **text, size_t *len)
{
    if (a->prompt) {
        *len = strlen(a->prompt);
        *text = llm_strdup(a->prompt);
        return *text ? LLM_OK : LLM_E_NOMEM;
    }
    return llm_read_file(a->file ? a->file : "-", (size_t)1 << 30, text, len);
}

static int do_tokenize(const struct args *a, struct llm_tokenizer *tok)
{
    char *text;
    size_t len, n;
    int32_t *ids;
    llm_status s = read_input(a, &text, &len);
    if (s)
        return llm_cli_fail(&cli, s);
    s = llm_tokenize(tok, text, len, (a->no_bos ? 0 : LLM_TOK_ADD_BOS) |
                     (a->special ? LLM_TOK_PARSE_SPECIAL : 0), &ids, &n);
    llm_free(text);
    if (s)
        return llm_cli_fail(&cli, s);
    if (a->json) {
        printf("{\"ids\":[");
        for (size_t i = 0; i < n; i++)
            printf("%s%d", i ? "," : "", ids[i]);
        printf("],\"pieces\":[");
        for (size_t i = 0; i < n; i++) {
            if (i)
                putchar(',');
            print_piece_json(stdout, tok, ids[i]);
        }
        printf("]}\n");
    } else {
        for (size_t i = 0; i < n; i++)
            printf("%s%d", i ? " " : "", ids[i]);
        putchar('\n');
    }
    llm_free(ids);
    return 0;
}

static int do_detokenize(const struct args *a, struct llm_tokenizer *tok)
{
    char *text, *out;
    size_t len, olen, n = 0, cap = 0;
    int32_t *ids = NULL;
    llm_status s = read_input(a, &text, &len);
    if (s)
        return llm_cli_fail(&cli, s);
    const char *p = text;
    while (!s) {
        while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r' || *p == ',')
            p++;
        if (!*p)
            break;
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v < 0 || v > INT32_MAX ||
            (*end && !strchr(" \t\r\n,", *end))) {
            /* the word alone (not the rest of the input: the message is one
             * line), control bytes shown as '?' */
            char word[24];
            size_t k = 0;
            for (; p[k] && !strchr(" \t\r\n,", p[k]) && k < 20; k++)
                word[k] = (unsigned char)p[k] < 0x20 || p[k] == 0x7f ? '?' : p[k];
            word[k] = 0;
            s = llm_error_set(LLM_E_INVALID, "%s: id %zu, '%s%s', is not a token id", input_name(a),
                              n + 1, word, p[k] && !strchr(" \t\r\n,", p[k]) ? "..." : "");
            break;
        }
        void *q = ids;
        if (!(s = llm_grow(&q, &cap, n + 1, sizeof *ids)))
            ids = q, ids[n++] = (int32_t)v;
        p = end;
    }
    if (!s)
        s = llm_detokenize(tok, ids, n, a->special, &out, &olen);
    llm_free(text);
    llm_free(ids);
    if (s)
        return llm_cli_fail(&cli, s);
    fwrite(out, 1, olen, stdout);
    putchar('\n');
    llm_free(out);
    return 0;
}

static void report(const struct llm_gen_result *r, int32_t n, uint64_t seed,
                   const struct kv_usage *u)
{
    int32_t total = 0;
    char what[64] = "", cached[64] = "";
    for (int32_t i = 0; i < n; i++)
        total += r[i].n_gen;
    if (n > 1)
        snprintf(what, sizeof what, " in %d completions", n);
    if (r->n_cached)
        snprintf(cached, sizeof cached, " (%d from the KV state)", r->n_cached);
    const int32_t computed = r->n_prompt - r->n_cached;
    fprintf(stderr, "%s: seed %llu; prompt: %d tokens%s in %.3f s (%.1f tokens/s); generation: "
            "%d tokens%s in %.3f s (%.1f tokens/s)", cli.prog, (unsigned long long)seed,
            r->n_prompt, cached, r->t_prompt_s,
            r->t_prompt_s > 0 ? computed / r->t_prompt_s : 0.0, total, what, r->t_gen_s,
            r->t_gen_s > 0 ? total / r->t_gen_s : 0.0);
    if (n == 1)
        fprintf(stderr, "; stop: %s", r->stop_reason);
    fprintf(stderr, "; peak RSS %.1f MB (KV cache %.1f MB); KV blocks: %d of %d used at most",
            (double)peak_rss() / 1e6, (double)u->bytes / 1e6, u->peak, u->blocks);
    if (u->slots)
        fprintf(stderr, "; window slots: %d of %d", u->slots_peak, u->slots);
    fputc('\n', stderr);
}

/* -n N asked for more tokens than the KV cache had room for. */
static llm_status check_room(const struct args *a, const struct llm_context *c,
                             const struct llm_gen_result *r, int32_t n)
{
    for (int32_t i = 0; a->n_predict >= 0 && i < n; i++) {
        if (strcmp(r[i].stop_reason, "context"))
            continue;
        char which[48] = "";
        if (n > 1)
            snprintf(which, sizeof which, " (completion %d)", i + 1);
        return llm_error_set(LLM_E_INVALID, "the KV cache is full: the context of %d tokens ended "
                             "after %d of the %d tokens asked for%s (use --ctx N or a smaller -n)",
                             llm_context_n_ctx(c), r[i].n_gen, a->n_predict, which);
    }
    return LLM_OK;
}

/* --echo with --json or several completions: each text starts with the
 * prompt. */
static llm_status prepend(struct completion *c, const char *text, size_t len)
{
    char *t = llm_malloc(len + c->len + 1);
    if (!t)
        return LLM_E_NOMEM;
    memcpy(t, text, len);
    if (c->len)
        memcpy(t + len, c->text, c->len);
    t[len + c->len] = 0;
    llm_free(c->text);
    c->text = t;
    c->len += len;
    c->cap = c->len + 1;
    return LLM_OK;
}

/* Several completions, one after the other, each under a line that says
 * which it is and how it ended. */
static llm_status print_completions(const struct out_state *o, const struct llm_gen_result *r)
{
    for (int32_t i = 0; i < o->n; i++) {
        const struct completion *c = &o->comp[i];
        printf("%s--- completion %d of %d (seed %llu, %d tokens, %s) ---\n", i ? "\n" : "", i + 1,
               o->n, (unsigned long long)(o->a->sp.seed + (uint64_t)i), r[i].n_gen,
               r[i].stop_reason);
        if (c->len)
            fwrite(c->text, 1, c->len, stdout);
        putchar('\n');
    }
    if (fflush(stdout) || ferror(stdout))
        return llm_error_set(LLM_E_IO, "stdout: %s", strerror(errno));
    return LLM_OK;
}

/* ---- KV state files ------------------------------------------------------ */

/* A prompt whose KV is in the prompt's slot already (--kv-in). */
struct preloaded {
    const int32_t *ids;
    int32_t n;
    const float *logits;        /* (n_vocab) after the last token */
};

/* Where the prompt's state goes once it is computed. */
struct save_state {
    const struct args *a;
    const int32_t *ids;
    int32_t n;
    int to_cache;               /* --prompt-cache held less than the prompt */
};

static llm_status on_prefilled(void *ctx, struct llm_context *c, int32_t slot, const float *logits)
{
    const struct save_state *st = ctx;
    const struct args *a = st->a;
    if (a->kv_out)
        LLM_TRY(llm_kvstate_save(c, slot, st->ids, st->n, logits, &a->sp, a->kv_compress,
                                 a->kv_out));
    if (st->to_cache)
        LLM_TRY(llm_kvstate_save(c, slot, st->ids, st->n, logits, &a->sp, a->kv_compress,
                                 a->prompt_cache));
    return LLM_OK;
}

/* Open a state for c: its header checked against c's model and cache, its
 * tokens (*toks) and logits (*logits) read; the rows are next. */
static llm_status state_begin(struct llm_state_reader *r, const struct llm_state_info *in,
                              struct llm_context *c, const char *path, int32_t **toks,
                              float **logits)
{
    struct llm_state_info want;
    LLM_TRY(llm_kvstate_info(c, &want));
    LLM_TRY(llm_state_expect(in, &want, path));
    *toks = llm_malloc((size_t)in->n_tokens * sizeof(int32_t));
    *logits = llm_malloc((size_t)in->n_vocab * sizeof(float));
    if (!*toks || !*logits)
        return LLM_E_NOMEM;
    return llm_state_read_tokens(r, *toks, *logits);
}

/* --prompt-cache: the prompt's slot receives the KV of the longest prefix of
 * ids (n) that the cache holds, but the last token unless it holds exactly
 * the prompt (then logits receives the logits after it): *n_cached
 * positions. *save: the cache held less than the prompt. A missing file is
 * an empty cache; a damaged one, or another model's, is refused. */
static llm_status cache_load(const struct args *a, struct llm_context *c, int32_t slot,
                             const int32_t *ids, int32_t n, int32_t *n_cached, float *logits,
                             int *save)
{
    *n_cached = 0;
    *save = 1;
    struct llm_state_reader *r;
    struct llm_state_info in;
    llm_status s = llm_state_open(&r, a->prompt_cache, &in);
    if (s == LLM_E_NOTFOUND) {
        llm_error_clear();
        return LLM_OK;
    }
    LLM_TRY(s);
    int32_t *toks = NULL;
    float *lg = NULL;
    s = state_begin(r, &in, c, a->prompt_cache, &toks, &lg);
    int32_t k = 0;
    while (!s && k < n && k < in.n_tokens && toks[k] == ids[k])
        k++;
    const int whole = k == n && k == in.n_tokens;
    const int32_t use = whole || k < n ? k : n - 1;
    if (!s)
        s = llm_kvstate_load(r, &in, c, slot, use);
    if (!s) {
        /* (q4ch keys may keep fewer: kvstate.h) */
        const int32_t got = llm_context_seq_len(c, slot);
        if (whole && got == use)
            memcpy(logits, lg, (size_t)in.n_vocab * sizeof(float));
        *n_cached = got;
        *save = k < n; /* as llama.cpp: a cache that covers the prompt stays */
    }
    llm_free(toks);
    llm_free(lg);
    llm_state_close(r);
    return s;
}

/* Tokenize, fit into the context and generate a->n_seq completions (res
 * has room for them); with reply (the chat: one completion), its text.
 * With pre (--kv-in), the prompt is pre's, already in the KV cache. */
static llm_status run_once(const struct args *a, struct llm_context *c, const char *text,
                           size_t len, int special, int echo, const struct preloaded *pre,
                           struct llm_gen_result *res, char **reply)
{
    struct llm_tokenizer *tok = llm_model_tokenizer(llm_context_model(c));
    int32_t *ids;
    size_t n;
    int32_t n_ctx = llm_context_n_ctx(c);
    if (pre) {
        if (!(ids = llm_malloc((size_t)pre->n * sizeof(int32_t))))
            return LLM_E_NOMEM;
        memcpy(ids, pre->ids, (size_t)pre->n * sizeof(int32_t));
        n = (size_t)pre->n;
    } else {
        LLM_TRY(llm_tokenize(tok, text, len, LLM_TOK_ADD_BOS |
                             (special ? LLM_TOK_PARSE_SPECIAL : 0), &ids, &n));
    }
    if (n == 0) { /* no BOS and no text: nothing to start from */
        llm_free(ids);
        return llm_error_set(LLM_E_INVALID, "%s: the prompt is empty (no tokens to start from)",
                             input_name(a));
    }
    const int32_t *use = ids;
    if (n > (size_t)n_ctx) {
        if (!a->truncate) {
            llm_free(ids);
            return llm_error_set(LLM_E_INVALID, "the prompt has %zu tokens, more than the context "
                                 "of %d (use --ctx N or --truncate)", n, n_ctx);
        }
        size_t keep = (size_t)n_ctx / 2, bos = ids[0] == llm_tokenizer_bos(tok);
        if (bos)
            ids[n - keep - 1] = ids[0];
        use = ids + n - keep - bos;
        n = keep + bos;
    }
    const int32_t n_comp = a->n_seq > 1 ? a->n_seq : 1;
    struct out_state o = { .a = a, .tok = tok, .capture = reply != NULL, .n = n_comp };
    /* flushed now: a second Ctrl-C during the prefill exits at once */
    if (echo && streaming(&o) && (fwrite(text, 1, len, stdout) != len || fflush(stdout))) {
        llm_free(ids);
        return llm_error_set(LLM_E_IO, "<stdout>: write error: %s", strerror(errno));
    }
    const int32_t slot = llm_gen_prompt_slot(n_comp);
    float *cache_logits = NULL;
    struct save_state save = { .a = a, .ids = use, .n = (int32_t)n };
    struct llm_gen_params gp;
    llm_gen_params_default(&gp);
    if (pre) {
        gp.n_cached = pre->n;
        gp.cached_logits = pre->logits;
    } else if (a->prompt_cache) {
        const int32_t nv = llm_model_config(llm_context_model(c))->n_vocab;
        llm_status cs = (cache_logits = llm_malloc((size_t)nv * sizeof(float)))
                            ? cache_load(a, c, slot, use, (int32_t)n, &gp.n_cached, cache_logits,
                                         &save.to_cache)
                            : LLM_E_NOMEM;
        if (cs) {
            llm_free(cache_logits);
            llm_free(ids);
            return cs;
        }
        gp.cached_logits = cache_logits;
    }
    if (a->kv_out || save.to_cache) {
        gp.prefilled = on_prefilled;
        gp.prefilled_ctx = &save;
    }
    gp.prefill_only = a->prefill_only;
    gp.n_predict = a->n_predict;
    gp.sp = a->sp;
    gp.stop = a->stop;
    gp.n_stop = a->n_stop;
    gp.ignore_eos = a->ignore_eos;
    gp.top_logprobs = a->top_logprobs;
    gp.n_seq = n_comp;
    gp.interrupt = &interrupted;
    if (speculating(a))
        gp.spec = &a->spec;
    gp.grammar = a->gmask;
    o.comp = llm_calloc((size_t)n_comp, sizeof *o.comp);
    struct llm_gen_callbacks cb = { on_text, on_token, &o };
    llm_status s = o.comp ? llm_generate(c, use, n, &gp, &cb, res) : LLM_E_NOMEM;
    llm_free(ids);
    llm_free(cache_logits);
    for (int32_t i = 0; !s && echo && !streaming(&o) && i < n_comp; i++)
        s = prepend(&o.comp[i], text, len);
    if (!s && a->json) {
        struct kv_usage u;
        kv_usage_of(c, a, &u);
        print_json(&o, res, a->sp.seed, &u);
    } else if (!s && n_comp > 1) {
        s = print_completions(&o, res);
    }
    if (!s && reply) {
        *reply = o.comp[0].text ? o.comp[0].text : llm_strdup("");
        o.comp[0].text = NULL;
        if (!*reply)
            s = LLM_E_NOMEM;
    }
    completions_free(&o);
    return s;
}

static llm_status render_chat(const struct args *a, struct llm_file *f, const struct llm_chat_msg *m,
                              size_t n, char **out)
{
    return llm_chat_render(f, a->tmpl, m, n, 1, out);
}

/* An interactive chat: each line is a user turn; the whole conversation is
 * rendered and run again every turn. */
static int chat_loop(const struct args *a, struct llm_context *c)
{
    struct llm_file *f = llm_model_file(llm_context_model(c));
    struct llm_chat_msg msgs[256];
    char *owned[256];
    size_t n = 0, n_owned = 0;
    char line[8192];
    llm_status s = LLM_OK;
    if (a->system)
        msgs[n++] = (struct llm_chat_msg){ "system", a->system };
    while (!s && n + 2 < 256 && n_owned + 2 < 256) {
        fputs("> ", stderr);
        interrupted = 0;
        if (!fgets(line, sizeof line, stdin))
            break;
        size_t l = strlen(line);
        while (l && (line[l - 1] == '\n' || line[l - 1] == '\r'))
            line[--l] = 0;
        if (!l)
            continue;
        char *u = llm_strdup(line);
        if (!u) {
            s = LLM_E_NOMEM;
            break;
        }
        owned[n_owned++] = u;
        msgs[n++] = (struct llm_chat_msg){ "user", u };
        char *prompt;
        if ((s = render_chat(a, f, msgs, n, &prompt)))
            break;
        struct llm_gen_result r;
        char *reply = NULL;
        s = run_once(a, c, prompt, strlen(prompt), 1, 0, NULL, &r, &reply);
        llm_free(prompt);
        putchar('\n');
        fflush(stdout);
        if (!s && (s = check_room(a, c, &r, 1)))
            llm_free(reply);
        if (s)
            break;
        if (cli.verbose > 0) {
            struct kv_usage ku;
            kv_usage_of(c, a, &ku);
            report(&r, 1, a->sp.seed, &ku);
            if (speculating(a))
                report_spec(&r);
        }
        owned[n_owned++] = reply;
        msgs[n++] = (struct llm_chat_msg){ "assistant", reply };
    }
    for (size_t i = 0; i < n_owned; i++)
        llm_free(owned[i]);
    return s ? llm_cli_fail(&cli, s) : 0;
}

/* The context of a run: one sequence, n_seq + 1 for several completions,
 * --max-seqs for a batch. */
static llm_status open_context(const struct args *a, struct llm_model *m, struct llm_context **out)
{
    struct llm_context *c;
    struct llm_context_params cp;
    llm_context_params_default(&cp);
    cp.n_ctx = a->n_ctx;
    cp.kv_type_k = a->kv[0];
    cp.kv_type_v = a->kv[1];
    cp.n_threads = a->threads;
    /* several completions: one more sequence keeps the prompt */
    cp.n_seq = a->n_seq > 1 ? a->n_seq + 1 : 1;
    if (a->batch) {
        cp.n_seq = a->max_seqs;
        cp.n_batch = a->step_tokens;
    }
    cp.block_size = a->block_size;
    cp.kv_blocks = a->kv_blocks;
    cp.kv_bytes = a->kv_mem;
    if (!a->kv_blocks && !a->kv_mem && a->n_seq > 1) {
        /* the default pool: what every completion's context needs, the
         * prompt's blocks counted once */
        const int32_t bs = a->block_size > 0 ? a->block_size : 16;
        const int32_t ctx = a->n_ctx > 0 ? a->n_ctx : llm_model_config(m)->n_ctx_train < 4096
                                                          ? llm_model_config(m)->n_ctx_train
                                                          : 4096;
        cp.kv_blocks = (int32_t)((int64_t)a->n_seq * ((ctx + bs - 1) / bs) + 1);
    }
    llm_status s = llm_context_new(&c, m, &cp);
    if (s == LLM_E_NOMEM && !a->kv_mem && !a->kv_blocks) {
        /* name the problem: almost always the KV cache of a large --ctx */
        const struct llm_config *cf = llm_model_config(m);
        int32_t n_ctx = cp.n_ctx > 0 ? cp.n_ctx : (cf->n_ctx_train < 4096 ? cf->n_ctx_train : 4096);
        const int64_t kvd = (int64_t)cf->n_kv_heads * cf->head_dim;
        const int32_t bs = a->block_size > 0 ? a->block_size : 16;
        double kvb = (double)cf->n_layers * (double)n_ctx *
                     (double)(llm_kv_row_bytes(a->kv[0], kvd, bs) + llm_kv_row_bytes(a->kv[1], kvd, bs));
        char types[64];
        llm_kv_types_text(types, sizeof types, a->kv[0], a->kv[1]);
        s = llm_error_set(LLM_E_NOMEM, "no memory for the KV cache of %d tokens (%.2f GB of %s) "
                          "and the buffers: use a smaller --ctx", n_ctx, kvb / 1e9, types);
    }
    if (s)
        return s;
    if (!llm_model_tokenizer(m)) {
        llm_context_free(c);
        return llm_error_set(LLM_E_INVALID, "%s: the model has no tokenizer (llama2.c checkpoints "
                             "need --tokenizer)", a->model);
    }
    *out = c;
    return LLM_OK;
}

/* The draft model's context: as many sequences as the target's, as long,
 * with a pool of as many blocks (--batch: --max-seqs slots, one for each
 * of the target's). */
static llm_status open_draft(struct args *a, struct llm_model *dm, struct llm_context *c)
{
    struct llm_context_params cp;
    llm_context_params_default(&cp);
    cp.n_ctx = llm_context_n_ctx(c);
    cp.kv_type_k = a->kv[0];
    cp.kv_type_v = a->kv[1];
    cp.n_threads = a->threads;
    cp.block_size = a->block_size;
    if (a->batch) {
        struct llm_kv_stats ks;
        llm_kv_stats(llm_context_kv(c), &ks);
        cp.n_seq = llm_context_n_seq(c);
        cp.n_batch = a->step_tokens;
        cp.kv_blocks = ks.n_blocks;
    }
    return llm_context_new(&a->spec.draft, dm, &cp);
}

/* --batch: the file through the engine; a summary on stderr. Exit status:
 * 0 every line answered, 3 some lines got error records, 128 + the signal
 * when interrupted (the finished lines are written: --resume goes on). */
static int do_batch(struct args *a, struct llm_model *m, struct llm_model *dm)
{
    struct llm_context *c;
    llm_status s = open_context(a, m, &c);
    if (!s && dm && (s = open_draft(a, dm, c)))
        llm_context_free(c);
    if (s)
        return llm_cli_fail(&cli, s);
    catch_signals(1);
    struct llm_batch_params bp = {
        .role = a->role, .kv_compress = a->kv_compress,
        .in_path = a->batch, .out_path = a->output, .resume = a->resume,
        .completion_order = a->completion_order, .stats_json = a->stats_json,
        .trace_path = a->kv_trace, .progress = isatty(2), .interrupt = &interrupted,
    };
    bp.defaults.max_tokens = a->n_predict;
    bp.defaults.sp = a->sp;
    bp.defaults.stop = a->stop;
    bp.defaults.n_stop = a->n_stop;
    bp.defaults.chat_template = a->tmpl;
    llm_engine_params_default(&bp.engine);
    bp.engine.max_seqs = a->max_seqs;
    bp.engine.step_tokens = a->step_tokens;
    bp.engine.prefix_cache = !a->no_prefix;
    bp.engine.ignore_eos = a->ignore_eos;
    bp.engine.spec = speculating(a) ? &a->spec : NULL;
    const char *slash = strrchr(a->model, '/');
    bp.model_name = slash ? slash + 1 : a->model;
    struct llm_batch_summary sum;
    s = llm_batch_run(c, &bp, &sum);
    const struct llm_engine_stats *e = &sum.engine;
    if ((!s || s == LLM_E_INTERRUPTED) && a->role == LLM_BATCH_PREFILL) {
        fprintf(stderr, "%s: %lld requests: %lld prompts prefilled and sent, %lld lines sent "
                "without a state (errors: the decode side answers them); %lld prompt tokens in "
                "%.2f s (%.1f tokens/s); prefix cache: %lld of %lld prompt tokens found\n",
                cli.prog, (long long)sum.lines, (long long)sum.answered, (long long)sum.errors,
                (long long)sum.prompt_tokens, sum.seconds,
                sum.seconds > 0 ? (double)sum.prompt_tokens / sum.seconds : 0.0,
                (long long)e->hit_tokens, (long long)e->lookup_tokens);
    } else if (!s || s == LLM_E_INTERRUPTED) {
        char skipped[64] = "", loaded[64] = "";
        if (a->role == LLM_BATCH_DECODE)
            snprintf(loaded, sizeof loaded, " (%lld with their prompts' states)",
                     (long long)sum.loaded);
        if (sum.skipped)
            snprintf(skipped, sizeof skipped, ", %lld answered before (--resume)",
                     (long long)sum.skipped);
        fprintf(stderr, "%s: %lld requests: %lld answered%s, %lld errors%s; %lld prompt + %lld "
                "generated tokens in %.2f s (%.2f requests/s, %.1f generated tokens/s); prefix "
                "cache: %lld of %lld prompt tokens found; %lld preemptions; KV blocks: %d of %d "
                "used at most", cli.prog, (long long)sum.lines, (long long)sum.answered, loaded,
                (long long)sum.errors, skipped, (long long)sum.prompt_tokens,
                (long long)sum.completion_tokens, sum.seconds,
                sum.seconds > 0 ? (double)(sum.answered + sum.errors) / sum.seconds : 0.0,
                sum.seconds > 0 ? (double)sum.completion_tokens / sum.seconds : 0.0,
                (long long)e->hit_tokens, (long long)e->lookup_tokens, (long long)e->preemptions,
                e->kv_peak, e->kv_blocks);
        if (e->kv_slots)
            fprintf(stderr, "; window slots: %d of %d", e->kv_slots_peak, e->kv_slots);
        if (bp.engine.spec)
            fprintf(stderr, "; speculation: %lld drafted, %lld accepted (%.1f%%), %.2f accepted "
                    "per drafting round, %.3f target passes per token", (long long)e->spec_drafted,
                    (long long)e->spec_accepted, e->spec_drafted ? 100.0 * (double)e->spec_accepted
                    / (double)e->spec_drafted : 0.0, e->spec_rounds ? (double)e->spec_accepted /
                    (double)e->spec_rounds : 0.0, e->spec_tokens ? (double)e->spec_passes /
                    (double)e->spec_tokens : 0.0);
        fputc('\n', stderr);
    }
    llm_context_free(a->spec.draft);
    llm_context_free(c);
    if (s == LLM_E_INTERRUPTED) {
        fprintf(stderr, "%s: %s\n", cli.prog, llm_error_detail(s));
        return 128 + (int)interrupted;
    }
    if (s)
        return llm_cli_fail(&cli, s);
    return sum.errors && a->role != LLM_BATCH_PREFILL ? 3 : 0;
}

/* Which option constrains the text, if one does. */
static const char *grammar_option(const struct args *a)
{
    return a->grammar ? "--grammar" : a->schema ? "--json-schema" : a->regex ? "--regex"
           : a->json_object ? "--json-object" : NULL;
}

/* The grammar of --grammar, --json-schema, --regex or --json-object,
 * compiled and bound to the model's vocabulary (a->gmask). */
static llm_status open_grammar(struct args *a, struct llm_model *m)
{
    if (!grammar_option(a))
        return LLM_OK;
    double t0 = llm_now_s();
    llm_status s = llm_grammar_load(&a->gram, a->grammar ? LLM_GRAMMAR_GBNF : a->schema
                                    ? LLM_GRAMMAR_SCHEMA : a->regex ? LLM_GRAMMAR_REGEX
                                    : LLM_GRAMMAR_JSON, a->grammar ? a->grammar : a->schema
                                    ? a->schema : a->regex);
    if (!s && !llm_model_tokenizer(m))
        s = llm_error_set(LLM_E_INVALID, "%s: the model has no tokenizer to constrain",
                          llm_model_file(m)->path);
    if (!s)
        s = llm_gmask_new(&a->gmask, a->gram, llm_model_tokenizer(m));
    a->t_grammar_s = llm_now_s() - t0;
    return s;
}

static void close_grammar(struct args *a)
{
    llm_gmask_free(a->gmask);
    llm_grammar_free(a->gram);
    a->gmask = NULL;
    a->gram = NULL;
}

/* -v: what the grammar cost. */
static void report_grammar(const struct args *a, const struct llm_gen_result *r, int32_t n)
{
    struct llm_gmask_stats st;
    llm_gmask_stats(a->gmask, &st);
    int32_t forced = 0;
    for (int32_t i = 0; i < n; i++)
        forced += r[i].n_forced;
    fprintf(stderr, "%s: grammar: compiled in %.1f ms; %lld masks (%lld from the cache, %lld "
            "positions classified), %.1f us median, %.1f us p99, %.1f us max, %.3f s in all; "
            "%d tokens forced\n", cli.prog, a->t_grammar_s * 1e3, (long long)st.n_masks,
            (long long)st.n_cached, (long long)st.n_positions, st.t_median_us, st.t_p99_us,
            st.t_max_us, st.t_total_s, forced);
}

/* --kv-in: the sampler options not given here are the state's. */
static void sampler_from_state(struct args *a, const struct llm_sampler_params *st)
{
    struct llm_sampler_params *sp = &a->sp;
    const unsigned g = a->sp_given;
    sp->temp = g & SP_TEMP ? sp->temp : st->temp;
    sp->top_k = g & SP_TOPK ? sp->top_k : st->top_k;
    sp->top_p = g & SP_TOPP ? sp->top_p : st->top_p;
    sp->min_p = g & SP_MINP ? sp->min_p : st->min_p;
    sp->repeat_penalty = g & SP_REPEAT ? sp->repeat_penalty : st->repeat_penalty;
    sp->penalty_last_n = g & SP_LASTN ? sp->penalty_last_n : st->penalty_last_n;
    sp->presence_penalty = g & SP_PRESENCE ? sp->presence_penalty : st->presence_penalty;
    sp->frequency_penalty = g & SP_FREQUENCY ? sp->frequency_penalty : st->frequency_penalty;
    sp->seed = a->have_seed ? sp->seed : st->seed;
}

/* --kv-in, after the header (in): the prompt's slot of c receives the
 * state's KV, pre its tokens and logits (freed with llm_free). */
static llm_status kv_in_load(const struct args *a, struct llm_context *c,
                             struct llm_state_reader *r, const struct llm_state_info *in,
                             struct preloaded *pre)
{
    int32_t *toks = NULL;
    float *lg = NULL;
    llm_status s = state_begin(r, in, c, a->kv_in, &toks, &lg);
    if (!s && in->n_tokens > llm_context_n_ctx(c))
        s = llm_error_set(LLM_E_INVALID, "%s: the state holds %d tokens, more than the context of "
                          "%d (use --ctx)", a->kv_in, in->n_tokens, llm_context_n_ctx(c));
    const int32_t slot = llm_gen_prompt_slot(a->n_seq > 1 ? a->n_seq : 1);
    if (!s)
        s = llm_kvstate_load(r, in, c, slot, in->n_tokens);
    if (!s && llm_context_seq_len(c, slot) != in->n_tokens)
        s = llm_error_set(LLM_E_INVALID, "%s: the state lacks the sliding-window rows this "
                          "context reads (it holds them from position %d on; made with another "
                          "window, block size or --ctx?)", a->kv_in, in->window_from);
    if (s) {
        llm_free(toks);
        llm_free(lg);
        return s;
    }
    *pre = (struct preloaded){ toks, in->n_tokens, lg };
    return LLM_OK;
}

static int do_generate(struct args *a, struct llm_model *m, struct llm_model *dm)
{
    struct llm_context *c;
    struct llm_state_reader *rd = NULL;
    struct llm_state_info in;
    struct preloaded pre = { 0 };
    if (a->kv_in) {
        llm_status s = llm_state_open(&rd, a->kv_in, &in);
        if (s)
            return llm_cli_fail(&cli, s);
        if (!(a->have_kvtype & 1))
            a->kv[0] = in.kv_type_k;
        if (!(a->have_kvtype & 2))
            a->kv[1] = in.kv_type_v;
        sampler_from_state(a, &in.sp);
    }
    llm_status s = open_context(a, m, &c);
    if (!s && rd) {
        s = kv_in_load(a, c, rd, &in, &pre);
        llm_state_close(rd);
        if (s)
            llm_context_free(c);
    } else {
        llm_state_close(rd);
    }
    if (!s && dm && (s = open_draft(a, dm, c)))
        llm_context_free(c);
    if (s) {
        llm_free((void *)pre.ids);
        llm_free((void *)pre.logits);
        return llm_cli_fail(&cli, s);
    }
    catch_signals(0);
    if (a->chat && !a->prompt && !a->file && isatty(0)) {
        int rc = chat_loop(a, c);
        llm_context_free(a->spec.draft);
        llm_context_free(c);
        return rc;
    }
    char *text = NULL, *prompt = NULL;
    size_t len = 0;
    if (!a->kv_in)
        s = read_input(a, &text, &len);
    if (!s && a->chat) {
        struct llm_chat_msg msgs[2];
        size_t n = 0;
        if (a->system)
            msgs[n++] = (struct llm_chat_msg){ "system", a->system };
        msgs[n++] = (struct llm_chat_msg){ "user", text };
        s = render_chat(a, llm_model_file(m), msgs, n, &prompt);
        if (!s) {
            llm_free(text);
            text = prompt;
            len = strlen(prompt);
        }
    }
    const int32_t n_comp = a->n_seq > 1 ? a->n_seq : 1;
    struct llm_gen_result *r = llm_calloc((size_t)n_comp, sizeof *r);
    if (!s && !r)
        s = LLM_E_NOMEM;
    if (!s)
        s = run_once(a, c, text, len, a->chat || a->special, a->echo, a->kv_in ? &pre : NULL, r,
                     NULL);
    if (!s && cli.verbose > 0) {
        struct kv_usage u;
        kv_usage_of(c, a, &u);
        report(r, n_comp, a->sp.seed, &u);
        if (speculating(a))
            report_spec(r);
        if (a->gmask)
            report_grammar(a, r, n_comp);
    }
    if (!s)
        s = check_room(a, c, r, n_comp);
    llm_free(r);
    llm_free(text);
    llm_free((void *)pre.ids);
    llm_free((void *)pre.logits);
    llm_context_free(a->spec.draft);
    llm_context_free(c);
    if (s)
        return llm_cli_fail(&cli, s);
    if (interrupted) {
        fflush(stdout);
        fprintf(stderr, "%s: interrupted\n", cli.prog);
        return 130;
    }
    return 0;
}

/* ---- options ------------------------------------------------------------- */

static int parse_f(const char *arg, double lo, double hi, const char *what, float *out)
{
    double v;
    if (llm_parse_f64(arg, lo, hi, what, &v))
        return llm_cli_usage(&cli, "%s", llm_error_detail(LLM_E_INVALID));
    *out = (float)v;
    return 0;
}

static int parse_i(const char *arg, int64_t lo, int64_t hi, const char *what, int32_t *out)
{
    int64_t v;
    if (llm_parse_i64(arg, lo, hi, what, &v))
        return llm_cli_usage(&cli, "%s", llm_error_detail(LLM_E_INVALID));
    *out = (int32_t)v;
    return 0;
}

int main(int argc, char **argv)
{
    struct args a = { .n_predict = -1, .kv = { LLM_TYPE_F16, LLM_TYPE_F16 } };
    llm_sampler_params_default(&a.sp);
    llm_spec_params_default(&a.spec);
    const char *arg;
    int r, rc = 0;
    int32_t v32;
    int64_t v;
    llm_cli_init(&cli);
    while ((r = llm_cli_next(&cli, argc, argv, &arg)) != LLM_CLI_END) {
        switch (r) {
        case LLM_CLI_EXIT0: return llm_cli_exit(&cli, 0);
        case LLM_CLI_ERROR: return 2;
        case 'm': a.model = arg; break;
        case OPT_TOKENIZER: a.tokenizer = arg; break;
        case 'p': a.prompt = arg; break;
        case 'f': a.file = arg; break;
        case 'n': rc = parse_i(arg, -1, INT32_MAX, "-n", &a.n_predict); break;
        case OPT_TEMP: rc = parse_f(arg, 0, 100, "--temp", &a.sp.temp), a.have_sampling = 1, a.sp_given |= SP_TEMP; break;
        case OPT_TOPK: rc = parse_i(arg, 0, INT32_MAX, "--top-k", &a.sp.top_k), a.have_sampling = 1, a.sp_given |= SP_TOPK; break;
        case OPT_TOPP: rc = parse_f(arg, 1e-6, 1, "--top-p", &a.sp.top_p), a.have_sampling = 1, a.sp_given |= SP_TOPP; break;
        case OPT_MINP: rc = parse_f(arg, 0, 1, "--min-p", &a.sp.min_p), a.have_sampling = 1, a.sp_given |= SP_MINP; break;
        case OPT_REPEAT:
            rc = parse_f(arg, 1e-3, 100, "--repeat-penalty", &a.sp.repeat_penalty), a.have_sampling = 1,
            a.sp_given |= SP_REPEAT;
            break;
        case OPT_LASTN:
            rc = parse_i(arg, -1, 1 << 20, "--repeat-last-n", &a.sp.penalty_last_n), a.have_sampling = 1,
            a.sp_given |= SP_LASTN;
            break;
        case OPT_PRESENCE:
            rc = parse_f(arg, -100, 100, "--presence-penalty", &a.sp.presence_penalty), a.have_sampling = 1,
            a.sp_given |= SP_PRESENCE;
            break;
        case OPT_FREQUENCY:
            rc = parse_f(arg, -100, 100, "--frequency-penalty", &a.sp.frequency_penalty), a.have_sampling = 1,
            a.sp_given |= SP_FREQUENCY;
            break;
        case 's':
            if (llm_parse_i64(arg, 0, INT64_MAX, "--seed", &v))
                return llm_cli_usage(&cli, "%s", llm_error_detail(LLM_E_INVALID));
            a.sp.seed = (uint64_t)v;
            a.have_seed = 1;
            break;
        case OPT_STOP:
            if (!*arg)
                return llm_cli_usage(&cli, "--stop: the text is empty");
            if (a.n_stop == 32)
                return llm_cli_usage(&cli, "--stop: at most 32 strings");
            a.stop[a.n_stop++] = arg;
            a.have_sampling = 1;
            break;
        case OPT_IGNORE_EOS: a.ignore_eos = 1, a.have_sampling = 1; break;
        case OPT_LOGPROBS: rc = parse_i(arg, 1, 100, "--top-logprobs", &a.top_logprobs); break;
        case OPT_ECHO: a.echo = 1; break;
        case OPT_CHAT: a.chat = 1; break;
        case OPT_SYSTEM: a.system = arg; break;
        case OPT_TEMPLATE: a.tmpl = arg; break;
        case OPT_JSON: a.json = 1; break;
        case 't': rc = parse_i(arg, 1, 256, "--threads", &v32), a.threads = v32; break;
        case OPT_CTX: rc = parse_i(arg, 1, 1 << 24, "--ctx", &a.n_ctx); break;
        case OPT_KVTYPE:
        case OPT_KVTYPE_K:
        case OPT_KVTYPE_V:
            if (llm_kv_types_option(r == OPT_KVTYPE ? 3 : r == OPT_KVTYPE_K ? 1 : 2, arg, a.kv,
                                    &a.have_kvtype))
                return llm_cli_usage(&cli, "%s", llm_error_detail(LLM_E_INVALID));
            break;
        case OPT_NSEQ: rc = parse_i(arg, 1, 1024, "--n-seq", &a.n_seq); break;
        case OPT_KVBLOCKS: rc = parse_i(arg, 1, INT32_MAX, "--kv-blocks", &a.kv_blocks); break;
        case OPT_BLOCKSIZE: rc = parse_i(arg, 1, 4096, "--block-size", &a.block_size); break;
        case OPT_KVMEM:
            if (llm_parse_size(arg, "--kv-mem", &a.kv_mem) || !a.kv_mem)
                return llm_cli_usage(&cli, "%s", a.kv_mem || !*arg ? llm_error_detail(LLM_E_INVALID)
                                                                   : "--kv-mem: the budget is 0");
            break;
        case OPT_TRUNCATE: a.truncate = 1; break;
        case OPT_TOKENIZE: a.tokenize = 1; break;
        case OPT_DETOKENIZE: a.detokenize = 1; break;
        case OPT_NOBOS: a.no_bos = 1; break;
        case OPT_SPECIAL: a.special = 1; break;
        case OPT_NOVERIFY: a.no_verify = 1; break;
        case OPT_BATCH: a.batch = arg; break;
        case 'o': a.output = arg, a.have_gen = 1; break;
        case OPT_RESUME: a.resume = 1, a.have_gen = 1; break;
        case OPT_CORDER: a.completion_order = 1, a.have_gen = 1; break;
        case OPT_MAXSEQS: rc = parse_i(arg, 1, 1024, "--max-seqs", &a.max_seqs), a.have_gen = 1; break;
        case OPT_STEPTOK: rc = parse_i(arg, 1, 1 << 16, "--step-tokens", &a.step_tokens), a.have_gen = 1; break;
        case OPT_NOPREFIX: a.no_prefix = 1, a.have_gen = 1; break;
        case OPT_STATSJSON: a.stats_json = arg, a.have_gen = 1; break;
        case OPT_KVTRACE: a.kv_trace = arg, a.have_gen = 1; break;
        case OPT_ROLE:
            if (strcmp(arg, "prefill") && strcmp(arg, "decode"))
                return llm_cli_usage(&cli, "--role: '%s' is not prefill or decode", arg);
            a.role = strcmp(arg, "prefill") ? LLM_BATCH_DECODE : LLM_BATCH_PREFILL;
            break;
        case OPT_GRAMMAR: a.grammar = arg; break;
        case OPT_KVIN: a.kv_in = arg; break;
        case OPT_KVOUT: a.kv_out = arg; break;
        case OPT_PREFILLONLY: a.prefill_only = 1; break;
        case OPT_KVCOMPRESS: a.kv_compress = 1; break;
        case OPT_PROMPTCACHE: a.prompt_cache = arg; break;
        case OPT_JSONOBJ: a.json_object = 1; break;
        case OPT_SCHEMA: a.schema = arg; break;
        case OPT_REGEX: a.regex = arg; break;
        case OPT_DRAFT: a.draft = arg; break;
        case OPT_LOOKUP: a.spec.lookup = 1; break;
        case OPT_NGRAMMIN: rc = parse_i(arg, 1, 64, "--ngram-min", &a.spec.ngram_min), a.have_ngram = 1; break;
        case OPT_NGRAMMAX: rc = parse_i(arg, 1, 64, "--ngram-max", &a.spec.ngram_max), a.have_ngram = 1; break;
        case OPT_DRAFTN: rc = parse_i(arg, 1, 64, "--draft-n", &a.spec.draft_n), a.have_spec = 1; break;
        case OPT_DRAFTMAX: rc = parse_i(arg, 1, 64, "--draft-max", &a.spec.draft_max), a.have_spec = 1, a.have_dmax = 1; break;
        case OPT_SPECRULE:
            if (!strcmp(arg, "match"))
                a.spec.rule = LLM_SPEC_MATCH;
            else if (!strcmp(arg, "rejection"))
                a.spec.rule = LLM_SPEC_REJECTION;
            else
                return llm_cli_usage(&cli, "--spec-rule: '%s' is not match or rejection", arg);
            a.have_spec = 1;
            break;
        }
        if (rc)
            return rc;
    }
    if (llm_cli_optind < argc)
        return llm_cli_usage(&cli, "unexpected argument '%s'", argv[llm_cli_optind]);
    if (a.role == LLM_BATCH_DECODE && !a.batch)
        a.batch = "-"; /* the stream from a pipe */
    if (!a.model)
        return llm_cli_usage(&cli, "no model (-m FILE)");
    if (a.prompt && a.file)
        return llm_cli_usage(&cli, "-p and -f both give the prompt; use one");
    if (a.tokenize && a.detokenize)
        return llm_cli_usage(&cli, "--tokenize and --detokenize are separate modes");
    int tokmode = a.tokenize || a.detokenize;
    if (a.no_bos && !a.tokenize)
        return llm_cli_usage(&cli, "--no-bos goes with --tokenize");
    if (a.detokenize && a.json)
        return llm_cli_usage(&cli, "--json does not go with --detokenize");
    if (tokmode && (a.have_sampling || a.have_seed || a.n_predict != -1 || a.echo || a.chat ||
                    a.top_logprobs || a.n_ctx || a.threads || a.truncate || a.no_verify ||
                    a.have_kvtype || a.n_seq || a.kv_mem || a.kv_blocks ||
                    a.block_size))
        return llm_cli_usage(&cli, "generation options do not go with --%s",
                             a.tokenize ? "tokenize" : "detokenize");
    if ((a.system || a.tmpl) && !a.chat && !(a.tmpl && !a.system && a.batch))
        return llm_cli_usage(&cli, "%s goes with --chat", a.system ? "--system" : "--template");
    if (a.chat && a.echo && !a.prompt && !a.file && isatty(0))
        return llm_cli_usage(&cli, "--echo does not go with an interactive chat");
    if (a.chat && a.n_seq > 1 && !a.prompt && !a.file && isatty(0))
        return llm_cli_usage(&cli, "--n-seq does not go with an interactive chat");
    if (a.kv_mem && a.kv_blocks)
        return llm_cli_usage(&cli, "--kv-mem and --kv-blocks both size the KV cache; use one");
    if (a.role == LLM_BATCH_PREFILL) {
        if (!a.batch)
            return llm_cli_usage(&cli, "--role prefill needs --batch FILE (the requests)");
        const char *no = a.n_predict != -1 ? "-n" : a.have_seed ? "--seed" : a.have_sampling
                         ? "a sampling option" : a.completion_order ? "--completion-order"
                         : a.resume ? "--resume" : NULL;
        if (no)
            return llm_cli_usage(&cli, "--role prefill computes prompts only: %s goes to the "
                                 "decode side", no);
        if ((!a.output || !strcmp(a.output, "-")) && isatty(1))
            return llm_cli_usage(&cli, "--role prefill writes a binary stream: pipe it to "
                                 "--role decode or give -o FILE");
    }
    if (!a.batch && a.have_gen)
        return llm_cli_usage(&cli, "-o, --resume, --completion-order, --max-seqs, --step-tokens, "
                             "--no-prefix-cache, --stats-json and --kv-trace go with --batch");
    if (a.draft && a.spec.lookup)
        return llm_cli_usage(&cli, "--draft and --lookup are two ways to draft; use one");
    if (a.have_ngram && !a.spec.lookup)
        return llm_cli_usage(&cli, "--ngram-min and --ngram-max go with --lookup");
    if (a.have_spec && !speculating(&a))
        return llm_cli_usage(&cli, "--draft-n, --draft-max and --spec-rule go with --draft or --lookup");
    if (a.spec.draft_n && a.have_dmax)
        return llm_cli_usage(&cli, "--draft-n fixes the draft length, --draft-max bounds the adaptive "
                             "one; use one");
    if (a.spec.ngram_min > a.spec.ngram_max)
        return llm_cli_usage(&cli, "--ngram-min %d is above --ngram-max %d", a.spec.ngram_min,
                             a.spec.ngram_max);
    if (!!a.grammar + !!a.schema + !!a.regex + a.json_object > 1)
        return llm_cli_usage(&cli, "--grammar, --json-schema, --regex and --json-object each "
                             "constrain the text; use one");
    if (grammar_option(&a) && (tokmode || a.batch))
        return llm_cli_usage(&cli, "%s does not go with %s", grammar_option(&a),
                             tokmode ? (a.tokenize ? "--tokenize" : "--detokenize")
                             : "--batch (use response_format in the requests)");
    if (speculating(&a) && (tokmode || a.n_seq > 1 || a.role == LLM_BATCH_PREFILL))
        return llm_cli_usage(&cli, "%s does not go with %s", a.draft ? "--draft" : "--lookup",
                             tokmode ? (a.tokenize ? "--tokenize" : "--detokenize")
                             : a.n_seq > 1 ? "--n-seq" : "--role prefill (it draws no tokens)");
    if (a.prefill_only && !a.kv_out)
        return llm_cli_usage(&cli, "--prefill-only needs --kv-out FILE (where the state goes)");
    if (a.kv_compress && !a.kv_out && !a.prompt_cache && a.role != LLM_BATCH_PREFILL)
        return llm_cli_usage(&cli, "--kv-compress goes with --kv-out, --prompt-cache or --role "
                             "prefill");
    if (a.kv_out && !strcmp(a.kv_out, "-") && !a.prefill_only)
        return llm_cli_usage(&cli, "--kv-out - needs --prefill-only (stdout carries the text)");
    if (a.kv_in && a.prefill_only)
        return llm_cli_usage(&cli, "--kv-in continues a state; --prefill-only makes one");
    if (a.kv_in && a.prompt_cache)
        return llm_cli_usage(&cli, "--kv-in and --prompt-cache both give the prompt's state; use "
                             "one");
    if (a.kv_in && (a.prompt || a.file || a.chat || a.echo || a.truncate))
        return llm_cli_usage(&cli, "%s does not go with --kv-in (the prompt is in the state)",
                             a.prompt ? "-p" : a.file ? "-f" : a.chat ? "--chat"
                             : a.echo ? "--echo" : "--truncate");
    if (a.kv_in && a.kv_out && !strcmp(a.kv_in, a.kv_out) && strcmp(a.kv_in, "-"))
        return llm_cli_usage(&cli, "--kv-in and --kv-out name the same file");
    if ((a.kv_in || a.kv_out || a.prompt_cache) && (tokmode || a.batch))
        return llm_cli_usage(&cli, "%s does not go with %s", a.kv_in ? "--kv-in" : a.kv_out
                             ? "--kv-out" : "--prompt-cache", tokmode ? (a.tokenize ?
                             "--tokenize" : "--detokenize") : "--batch");
    if (a.prefill_only && (a.n_predict != -1 || a.json || a.top_logprobs || speculating(&a) ||
                           grammar_option(&a) || a.echo))
        return llm_cli_usage(&cli, "--prefill-only generates nothing: %s does not go with it",
                             a.n_predict != -1 ? "-n" : a.json ? "--json" : a.top_logprobs
                             ? "--top-logprobs" : speculating(&a) ? (a.draft ? "--draft"
                             : "--lookup") : a.echo ? "--echo" : grammar_option(&a));
    if (a.prefill_only && a.chat && !a.prompt && !a.file && isatty(0))
        return llm_cli_usage(&cli, "--prefill-only does not go with an interactive chat");
    if (a.batch) {
        const char *no = a.prompt ? "-p" : a.file ? "-f" : a.chat ? "--chat" : a.system ? "--system"
                         : a.echo ? "--echo" : a.json ? "--json" : a.n_seq ? "--n-seq"
                         : a.top_logprobs ? "--top-logprobs" : a.truncate ? "--truncate"
                         : tokmode ? "--tokenize" : NULL;
        if (no)
            return llm_cli_usage(&cli, "%s does not go with --batch (each line says what it wants)",
                                 no);
        if (a.n_stop > LLM_REQ_MAX_STOP)
            return llm_cli_usage(&cli, "--stop: at most %d strings with --batch (a request's own "
                                 "limit)", LLM_REQ_MAX_STOP);
        if (a.resume && (!a.output || !strcmp(a.output, "-")))
            return llm_cli_usage(&cli, "--resume needs -o FILE (the output of the run to resume)");
        if (!a.max_seqs)
            a.max_seqs = 16;
        if (!a.step_tokens)
            a.step_tokens = 512;
    }
    if (!a.have_seed) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        a.sp.seed = ((uint64_t)ts.tv_sec * 1000000007ull) ^ (uint64_t)ts.tv_nsec ^ ((uint64_t)getpid() << 32);
        /* 53 bits: a JSON reader that keeps numbers as doubles reads it back exactly */
        a.sp.seed &= (1ull << 53) - 1;
    }

    struct llm_file *f;
    struct llm_import_opts io;
    llm_import_opts_default(&io);
    io.tokenizer_path = a.tokenizer;
    io.no_verify = a.no_verify; /* else each tensor is checked at its first use */
    llm_status s = llm_import(&f, a.model, &io);
    if (s)
        return llm_cli_fail(&cli, s);
    if (a.tokenizer && strcmp(f->format, "llama2c")) {
        s = llm_error_set(LLM_E_INVALID, "%s: --tokenizer applies to llama2.c checkpoints, not to "
                          "%s files", a.model, f->format);
        llm_file_free(f);
        return llm_cli_fail(&cli, s);
    }
    if (tokmode) {
        struct llm_tokenizer *tok;
        if ((s = llm_tokenizer_new(&tok, f))) {
            llm_file_free(f);
            return llm_cli_fail(&cli, s);
        }
        rc = a.tokenize ? do_tokenize(&a, tok) : do_detokenize(&a, tok);
        llm_tokenizer_free(tok);
        llm_file_free(f);
        return llm_cli_exit(&cli, rc);
    }
    struct llm_model *m;
    struct llm_model_params mp;
    llm_model_params_default(&mp);
    mp.n_threads = a.threads;
    if ((s = llm_model_from_file(&m, f, &mp)))
        return llm_cli_fail(&cli, s);
    struct llm_model *dm = NULL;
    if (a.draft) {
        mp.tokenizer_path = a.tokenizer;
        if (!(s = llm_model_open(&dm, a.draft, &mp)))
            s = llm_spec_check_draft(m, dm);
        if (s) {
            llm_model_close(dm);
            llm_model_close(m);
            return llm_cli_fail(&cli, s);
        }
    }
    if ((s = open_grammar(&a, m))) {
        close_grammar(&a);
        llm_model_close(dm);
        llm_model_close(m);
        return llm_cli_fail(&cli, s);
    }
    rc = a.batch ? do_batch(&a, m, dm) : do_generate(&a, m, dm);
    close_grammar(&a);
    llm_model_close(dm);
    llm_model_close(m);
    return llm_cli_exit(&cli, rc);
}
