/* batch.h: llm-run --batch: an OpenAI batch JSONL file through the engine.
 *
 * Every non-blank input line gets exactly one output line: its response,
 * or an error record when the line cannot be served (bad JSON, a missing
 * or wrong field, an unknown url, a prompt longer than the context, an n
 * larger than the sequences that run at once); a bad line never stops the
 * others. Lines go out in input order as soon as they and every line
 * before them are done, or in completion order. Each line is flushed when
 * written, so an interrupted run keeps every line it finished: on an
 * interrupt the finished lines still held for ordering are written too,
 * and --resume with the same output skips the lines answered in it.
 */
#ifndef LLM_SERVE_BATCH_H
#define LLM_SERVE_BATCH_H

#include <signal.h>
#include <stdint.h>

#include "../grammar/grammar.h"
#include "../kv/state.h"
#include "engine.h"
#include "request.h"

/* Where a run's work happens: all of it here, or split between two
 * processes joined by a handoff stream (handoff.h). */
enum llm_batch_role {
    LLM_BATCH_ALL,                  /* requests in, answers out */
    LLM_BATCH_PREFILL,              /* requests in, their prompts' states out as a stream */
    LLM_BATCH_DECODE,               /* a stream in, answers out */
};

struct llm_batch_params {
    enum llm_batch_role role;
    int kv_compress;                /* prefill: zstd the states */
    const char *in_path;            /* "-": standard input */
    const char *out_path;           /* NULL or "-": standard output */
    int resume;                     /* skip the lines answered in out_path, append the rest */
    int completion_order;           /* write lines as they finish */
    struct llm_req_defaults defaults;
    struct llm_engine_params engine;
    const char *model_name;         /* "model" in the responses */
    const char *stats_json;         /* write the summary as JSON there (NULL: no) */
    const char *trace_path;         /* one JSON line per step there (NULL: no) */
    int progress;                   /* a status line on stderr about once a second */
    volatile sig_atomic_t *interrupt;
};

struct llm_batch_summary {
    int64_t lines;                  /* requests read (non-blank lines) */
    int64_t answered, errors;       /* output lines written: responses, error records
                                       (prefill: states sent, lines sent without one) */
    int64_t loaded;                 /* decode: requests that came with their prompt's state */
    int64_t skipped;                /* answered in the output already (--resume) */
    int64_t duplicates;             /* lines whose custom_id an earlier line has */
    int64_t prompt_tokens, completion_tokens;
    double seconds;
    int interrupted;
    int speculating;                /* the engine drafted (engine.spec): the summary's JSON has
                                       a "speculation" object */
    struct llm_engine_stats engine;
    /* percentiles over the answered requests (seconds; all of them are
     * queued at the start, so TTFT includes the wait for a slot) */
    double ttft[3], tpot[3], e2e[3];   /* p50, p90, p99 */
    double itl[3];                  /* of every gap between two tokens of a choice, with
                                       stats_json (kept then only: a double per token) */
};

/* The next request line of a batch file's text from *at (its length in *l,
 * without the newline or a CR before it); blank lines are skipped, and
 * *lineno counts every line. NULL at the end. */
const char *llm_batch_next_line(const char *text, size_t len, size_t *at, size_t *l,
                                int64_t *lineno);

/* Make a parsed line ready for the engine: tokenize it for c (with the chat
 * template tmpl, NULL: the model's), check that it fits (n within
 * max_seqs, the prompt within the context and the KV pool), and compile
 * its response_format grammar in gs (NULL: a request with one is
 * refused). A request that does not fit gets err_code and err_msg, and
 * LLM_OK; LLM_E_NOMEM only. */
llm_status llm_batch_prepare(struct llm_request *q, struct llm_context *c, const char *tmpl,
                             struct llm_grammar_set *gs, int32_t max_seqs);

/* Run the file (decode: the stream). LLM_E_INTERRUPTED when *interrupt
 * became non-zero (the finished lines are written); other errors are fatal
 * ones (input or output that cannot be read or written, a model failure, a
 * cut or damaged stream: the requests that came before it are answered
 * first). */
llm_status llm_batch_run(struct llm_context *c, const struct llm_batch_params *p,
                         struct llm_batch_summary *sum);

/* The summary as one JSON object (with its newline). */
void llm_batch_summary_json(FILE *f, const struct llm_batch_summary *s);

#endif
