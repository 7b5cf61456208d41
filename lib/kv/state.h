/* state.h: KV state files: a sequence's state after its prompt, written by
 * one process and continued by another (llm-run --kv-out / --kv-in,
 * --prompt-cache), so that prefill and decode can run apart.
 *
 * A state holds what a continuation needs to give the bits of one
 * uninterrupted run: the model's identity, the tokens (their positions are
 * 0 .. n_tokens-1), the K and V rows of every layer in the cache's stored
 * type, the sampler's parameters (its history is the tokens) and the
 * logits after the last token.
 *
 * The file is a header and a sequence of records, written and read in one
 * pass, so that it streams through a pipe (llm-format(5), KV STATE FILES):
 *
 *   header   "LLMSTATE", version, flags (compressed; the window layers'
 *            first position held), sizes, sampler parameters, XXH3-64 of it
 *   record   the tokens            (n_tokens) int32
 *   record   the logits            (n_vocab) f32
 *   record   KV rows of chunk i    (n_layers, 2, rows, kv_dim): the K rows in
 *                                  kv_type_k, then the V rows in kv_type_v (q8_0
 *                                  and q4_0: each row its blocks of 32 and
 *                                  their scales; q4_0 rotated, kv.h),
 *            for positions i*chunk .. i*chunk+rows-1, one per chunk
 *   end      "LLMSTEND"
 *
 * A record is raw size (u32), stored size (u32), XXH3-64 of the raw bytes
 * seeded with the record's index (u64), then the stored bytes: zstd when
 * stored < raw, else the raw bytes. Nothing may follow the end.
 */
#ifndef LLM_KV_STATE_H
#define LLM_KV_STATE_H

#include <stdint.h>
#include <stdio.h>

#include "../common/status.h"
#include "../quant/types.h"
#include "kv.h"
#include "../sample/sample.h"

/* Version 2 gave K and V each its own type (version 1: one for both,
 * still read); version 3 the first position of the window layers' rows
 * (window_from). */
#define LLM_STATE_VERSION 3u
/* Bounds on what a header may claim, so that a damaged one cannot ask for
 * absurd memory. */
#define LLM_STATE_MAX_TOKENS (1 << 24)
#define LLM_STATE_MAX_VOCAB (1 << 24)
#define LLM_STATE_MAX_LAYERS 4096
#define LLM_STATE_MAX_KVDIM (1 << 20)
#define LLM_STATE_MAX_CHUNK 4096

struct llm_state_info {
    uint64_t model_id;              /* llm_model_id of the model that computed it */
    enum llm_type kv_type_k;        /* the stored type of the K rows */
    enum llm_type kv_type_v;        /* and of the V rows */
    int32_t n_layers, kv_dim, n_vocab;
    int32_t n_tokens;               /* >= 1 */
    int32_t chunk;                  /* tokens per KV record */
    int32_t window_from;            /* sliding-window layers: their rows below this position
                                       are zeros (the cache had given them back, kv.h) */
    int compress;                   /* zstd each record (where it is smaller) */
    struct llm_sampler_params sp;
};


/* The K and V rows of positions pos .. pos+n-1 as (n_layers, 2, n, kv_dim)
 * elements of kv_type_k and kv_type_v: filled by the writer's source, taken by the reader's
 * sink. */
typedef llm_status (*llm_state_rows_fn)(void *ctx, int32_t pos, int32_t n, void *rows);

/* Write a state to path ("-": stdout), atomically (common/io.h): tokens
 * (n_tokens), logits (n_vocab); rows called once per chunk, in order. */
llm_status llm_state_write(const char *path, const struct llm_state_info *info,
                           const int32_t *tokens, const float *logits, llm_state_rows_fn rows,
                           void *ctx);

/* The same into memory (*buf: llm_free it, *len bytes), for a stream that
 * carries the states of many requests (serve/handoff.h). */
llm_status llm_state_write_mem(void **buf, size_t *len, const struct llm_state_info *in,
                               const int32_t *tokens, const float *logits,
                               llm_state_rows_fn rows, void *ctx);

/* Reading, in one pass: open reads and checks the header (the caller then
 * checks it against its model and cache: llm_state_expect), read the rest.
 * A damaged or cut file is LLM_E_FORMAT or LLM_E_CHECKSUM naming the path
 * and what is wrong. */
struct llm_state_reader;
llm_status llm_state_open(struct llm_state_reader **out, const char *path,
                          struct llm_state_info *info);
/* The same from a stream (name: for messages; own: fclose it on close). */
llm_status llm_state_open_stream(struct llm_state_reader **out, FILE *f, const char *name,
                                 int own, struct llm_state_info *info);
/* Then the tokens (n_tokens) and the logits (n_vocab); */
llm_status llm_state_read_tokens(struct llm_state_reader *r, int32_t *tokens, float *logits);
/* then the rows: rows (may be NULL: they are checked and dropped) takes
 * each chunk, in order; then the end, and nothing after it. */
llm_status llm_state_read_rows(struct llm_state_reader *r, llm_state_rows_fn rows, void *ctx);
void llm_state_close(struct llm_state_reader *r);

/* LLM_E_INVALID naming path and the first difference when a state (got)
 * cannot continue on a model and cache that would write `want` (its
 * model_id, the KV types, n_layers, kv_dim and n_vocab are compared). */
llm_status llm_state_expect(const struct llm_state_info *got, const struct llm_state_info *want,
                            const char *path);

#endif
