/* handoff.h: the stream from llm-run --batch --role prefill to --role
 * decode: prefill and decode in different processes (on different cores or
 * machines), the DistServe and Splitwise idea done with a pipe.
 *
 * The prefill side computes each request's prompt and sends the line with
 * the state of its prompt (kv/state.h); the decode side loads the state into
 * a sequence and generates, in continuous batches. The stream is written and
 * read in one pass (llm-format(5), HANDOFF STREAMS):
 *
 *   header  "LLMSPLIT", version (u32), the KV cache's types (u32: K in the low
 *           16 bits, V in the high, as in state files), the model's identity (u64),
 *           n (u64), the line numbers of the n requests (n i64),
 *           XXH3-64 of all of it before (u64)
 *   item    "LLMSITEM", line (i64), text bytes t (u32), 0 (u32),
 *           state bytes s (u64), the line's text (t bytes),
 *           XXH3-64 of the 32 bytes of the head and the text (u64),
 *           the state (s bytes: a KV state file, with its own checksums;
 *           s = 0: no state, the decode side computes the prompt itself)
 *   end     "LLMSPEND", items (u64), XXH3-64 of those 16 bytes (u64)
 *
 * Items come in the order their prompts finish, each request of the header
 * once. A stream that stops before its end mark was cut short (its writer
 * was interrupted); what came before is good.
 */
#ifndef LLM_SERVE_HANDOFF_H
#define LLM_SERVE_HANDOFF_H

#include <stddef.h>
#include <stdint.h>

#include "../common/io.h"
#include "../common/status.h"

#define LLM_HANDOFF_VERSION 1u
/* Bounds on what a header or item may claim (memory grows only as the
 * bytes arrive, so a damaged claim costs nothing before that). */
#define LLM_HANDOFF_MAX_ITEMS ((uint64_t)1 << 32)
#define LLM_HANDOFF_MAX_TEXT ((uint64_t)1 << 30)
#define LLM_HANDOFF_MAX_STATE ((uint64_t)1 << 40)

/* ---- writing ------------------------------------------------------------- */

struct llm_handoff_writer {
    struct llm_out o;
    uint64_t items;
};

/* Open path ('-': stdout; a file is written atomically) and write the
 * header: the model's identity, the cache's types (kv_types: K | V << 16)
 * and the n requests' line numbers. */
llm_status llm_handoff_write_open(struct llm_handoff_writer *w, const char *path,
                                  uint64_t model_id, uint32_t kv_types, const int64_t *lines,
                                  size_t n);
/* One request: its line (len bytes) and its prompt's state (state_len
 * bytes; 0: none). Flushed, so that the reader can start on it. */
llm_status llm_handoff_write_item(struct llm_handoff_writer *w, int64_t line, const char *text,
                                  size_t len, const void *state, size_t state_len);
/* The end mark (complete: 1) or none (cut short: 0); then the stream is
 * closed (a file renamed into place). */
llm_status llm_handoff_write_close(struct llm_handoff_writer *w, int complete);
void llm_handoff_write_abort(struct llm_handoff_writer *w);

/* ---- reading ------------------------------------------------------------- */

struct llm_handoff_item {
    int64_t line;
    char *text;                 /* (len) the request line, NUL-terminated */
    size_t len;
    void *state;                /* (state_len) a KV state file's bytes, or NULL */
    size_t state_len;
};
void llm_handoff_item_free(struct llm_handoff_item *it);

struct llm_handoff_reader;

/* Read the header from fd (name: for messages): the model's identity, the
 * cache's types and the requests' line numbers (*lines: (n), the reader's). */
llm_status llm_handoff_open(struct llm_handoff_reader **out, int fd, const char *name,
                            uint64_t *model_id, uint32_t *kv_types, const int64_t **lines,
                            size_t *n);

/* Read the items ahead in a thread, holding at most max_items of them or
 * max_bytes (one at least), so that waiting for the writer never stalls
 * the caller's decoding. */
llm_status llm_handoff_start(struct llm_handoff_reader *r, size_t max_items, size_t max_bytes);

/* The next item, in *it (the caller's to free): *got = 1. None read yet:
 * *got = 0 (with wait, it waits for one). The stream's end: *got = -1.
 * A cut, damaged or unreadable stream: its error (LLM_E_FORMAT, LLM_E_CHECKSUM,
 * LLM_E_IO), after the items before it. */
llm_status llm_handoff_next(struct llm_handoff_reader *r, int wait, struct llm_handoff_item *it,
                            int *got);

/* Stop the thread and free the reader (fd stays open). */
void llm_handoff_close(struct llm_handoff_reader *r);

#endif
