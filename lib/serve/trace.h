/* trace.h: the KV trace of llm-run --batch --kv-trace (one JSON object a
 * scheduler step), read back and summarized for llm-kvstat --trace: the
 * pool's use over time, the room lost inside blocks, the prefix cache's
 * hit rate and the preemptions; drawn as a terminal chart or an SVG plot.
 */
#ifndef LLM_SERVE_TRACE_H
#define LLM_SERVE_TRACE_H

#include <stdint.h>
#include <stdio.h>

#include "../common/status.h"

/* One step. */
struct llm_trace_step {
    double t;
    int64_t step, running, waiting, finished;
    int64_t blocks, used, free_, cached, idle, logical, block_size, tokens;
    int64_t prefill, decode, lookup_tokens, hit_tokens, preemptions;
};

struct llm_trace {
    struct llm_trace_step *s;   /* (n) in file order */
    size_t n;
};

struct llm_trace_summary {
    int64_t steps;
    double seconds;
    int64_t blocks, block_size;
    double used_mean, used_peak;        /* fractions of the pool */
    double cached_mean;                 /* fraction of the pool listed by the prefix index */
    double idle_mean;                   /* fraction held by the index alone */
    double inside_waste;                /* of the block rows the sequences' tables hold, the
                                           share no token fills (mean over steps) */
    int64_t running_peak, waiting_peak, finished;
    int64_t prefill_tokens, decode_tokens;
    int64_t lookup_tokens, hit_tokens;
    double hit_rate;
    int64_t preemptions;
};

/* Read a trace. LLM_E_FORMAT naming path:line and the field for a line that
 * is not a step record (every field present, a number, in range). */
llm_status llm_trace_read(struct llm_trace *tr, const char *path);
/* The same from memory (name for messages). */
llm_status llm_trace_parse(struct llm_trace *tr, const char *text, size_t len, const char *name);
void llm_trace_free(struct llm_trace *tr);

void llm_trace_summarize(const struct llm_trace *tr, struct llm_trace_summary *sum);

/* A chart of the pool's use over time, `width` columns by `height` rows:
 * '#' blocks in use by sequences, ':' blocks the prefix index alone keeps. */
void llm_trace_chart(FILE *f, const struct llm_trace *tr, int width, int height);

/* An SVG plot: blocks used and cached, and running and waiting requests,
 * against time. */
llm_status llm_trace_svg(const struct llm_trace *tr, const char *path);

#endif
