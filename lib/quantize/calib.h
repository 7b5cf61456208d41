/* calib.h: calibration windows for GPTQ and AWQ, from any text file.
 *
 * The text is tokenized whole with the model's tokenizer (no BOS), then n
 * windows of len tokens start at seeded uniform random offsets (overlaps
 * allowed, as GPTQ's get_wikitext2/get_c4 do). When the tokenizer adds BOS,
 * each window's first token is replaced by BOS, the way llama-perplexity
 * scores chunks: inference always sees BOS at position 0, so the
 * activations collected there are the ones that matter.
 */
#ifndef LLM_QUANTIZE_CALIB_H
#define LLM_QUANTIZE_CALIB_H
#include <stdint.h>

#include "../common/status.h"
#include "../tokenizer/tokenizer.h"

struct llm_calib {
    int32_t *tokens;     /* (n, len) */
    int32_t n, len;
    uint64_t text_tokens; /* tokens in the whole text */
    uint64_t hash;        /* XXH3-64 of the text file's bytes */
};

/* LLM_E_INVALID naming the file when the text has fewer than len + 1 tokens
 * (the message says how many are needed and how many there are). */
llm_status llm_calib_load(struct llm_calib *c, const struct llm_tokenizer *tok, const char *path,
                          int32_t n, int32_t len, uint64_t seed);
void llm_calib_free(struct llm_calib *c);

#endif
