/* kvstate.h: a context's sequence to and from a KV state file (kv/state.h):
 * what llm-run's --kv-out, --kv-in and --prompt-cache do. */
#ifndef LLM_MODEL_KVSTATE_H
#define LLM_MODEL_KVSTATE_H

#include "../kv/state.h"
#include "model.h"

/* What a state computed in c has: its model's identity, the cache's type
 * and shape, and the chunk its rows are written in; the tokens and the
 * sampler are the caller's. */
llm_status llm_kvstate_info(struct llm_context *c, struct llm_state_info *in);

/* Write the state of sequence `slot` of c, which holds tokens (n), with
 * the logits after them and the sampler parameters sp, to path ('-':
 * stdout), atomically; compress: zstd each record. */
llm_status llm_kvstate_save(struct llm_context *c, int32_t slot, const int32_t *tokens, int32_t n,
                            const float *logits, const struct llm_sampler_params *sp,
                            int compress, const char *path);

/* The same into memory (*buf: llm_free it, *len bytes). */
llm_status llm_kvstate_save_mem(struct llm_context *c, int32_t slot, const int32_t *tokens,
                                int32_t n, const float *logits,
                                const struct llm_sampler_params *sp, int compress, void **buf,
                                size_t *len);

/* After llm_state_open and llm_state_read_tokens: sequence `slot` of c
 * (emptied first) receives the rows of the state's first n positions;
 * the rest are read, checked and dropped. With q4ch keys, an n inside a
 * full block of the state keeps only the blocks below it (kv.h); a state
 * whose sliding-window layers lack rows this cache would read at n
 * (llm_state_info.window_from: another window, block size or context, or
 * a short n) gives none: llm_context_seq_len says how many positions
 * came. */
llm_status llm_kvstate_load(struct llm_state_reader *r, const struct llm_state_info *in,
                            struct llm_context *c, int32_t slot, int32_t n);

#endif
