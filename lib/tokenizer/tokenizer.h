/* tokenizer.h: text <-> token ids, exactly as each model family's reference
 * does, and chat prompts rendered with the model's template.
 *
 * Built from the tokenizer arrays and settings of a struct llm_file (see
 * format/file.h: tokenizer.* metadata and auxiliary tensors), whatever the
 * file was converted from. Two algorithms:
 *   - "llama": SentencePiece-style BPE over scores with byte fallback (Llama
 *     1/2, Mistral, TinyLlama, Phi-3, stories), the U+2581 space rule and the
 *     add-prefix-space rule;
 *   - "gpt2": byte-level BPE over ranked merges with the family's
 *     pre-tokenizer regex (PCRE2), as llama.cpp does for tokenizer.pre.
 * Merging is O(n log n) per word (a heap), never quadratic.
 *
 * Ids equal llama.cpp's (llama_tokenize with add_special = LLM_TOK_ADD_BOS,
 * parse_special = LLM_TOK_PARSE_SPECIAL) for valid UTF-8. Where llama.cpp
 * loses bytes we keep them, so that llm_detokenize(llm_tokenize(s)) == s for
 * any bytes the vocabulary can express: invalid UTF-8 is not replaced by
 * U+FFFD, and detokenizing applies no clean-up of spaces. Exceptions
 * inherent to a vocabulary: U+2581 in SentencePiece text, bytes without a
 * token, text after special tokens (which gets the SentencePiece prefix
 * space or loses stripped spaces).
 */
#ifndef LLM_TOKENIZER_TOKENIZER_H
#define LLM_TOKENIZER_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "../common/status.h"
#include "../format/file.h"

struct llm_tokenizer;

enum {
    LLM_TOK_ADD_BOS = 1 << 0,       /* add BOS when the model wants it (tokenizer.add_bos) */
    LLM_TOK_PARSE_SPECIAL = 1 << 1, /* "<|im_start|>" in the text is the special token */
};

/* Build a tokenizer from a file's vocabulary (the file must outlive it). */
llm_status llm_tokenizer_new(struct llm_tokenizer **out, struct llm_file *f);
void llm_tokenizer_free(struct llm_tokenizer *t);

uint32_t llm_tokenizer_n_tokens(const struct llm_tokenizer *t);
int32_t llm_tokenizer_bos(const struct llm_tokenizer *t);  /* -1 when none */
int32_t llm_tokenizer_eos(const struct llm_tokenizer *t);  /* -1 when none */
/* Is `id` an end-of-generation token (EOS, EOT, <|im_end|>, ...)? */
int llm_tokenizer_is_eog(const struct llm_tokenizer *t, int32_t id);

/* Tokenize `len` bytes of text (any bytes: invalid UTF-8 and NUL included).
 * *ids is malloc'd (llm_free), *n its length. */
llm_status llm_tokenize(const struct llm_tokenizer *t, const char *text, size_t len, int flags,
                        int32_t **ids, size_t *n);

/* The bytes of one token as it appears in text (byte pieces decoded, U+2581
 * turned into a space, byte-level BPE mapped back to bytes). Special tokens
 * give their text only when `special` is set, else nothing. LLM_E_INVALID
 * for an id out of range (the detail names it). *bytes points into the
 * tokenizer (valid until it is freed); buf is not needed and may be NULL. */
llm_status llm_token_piece(const struct llm_tokenizer *t, int32_t id, int special,
                           const char **bytes, size_t *len, char buf[8]);

/* The bytes token `id` adds to streamed text when it follows token `prev`:
 * its piece, less the SentencePiece dummy-prefix space right after BOS. No
 * allocation: for printing generated tokens one at a time. */
llm_status llm_token_piece_after(const struct llm_tokenizer *t, int32_t prev, int32_t id,
                                 int special, const char **bytes, size_t *len);

/* Detokenize a whole sequence (malloc'd, NUL-terminated). Applies the
 * leading-space rule of SentencePiece models (a space after BOS is dropped). */
llm_status llm_detokenize(const struct llm_tokenizer *t, const int32_t *ids, size_t n,
                          int special, char **text, size_t *len);

/* Chat messages. */
struct llm_chat_msg {
    const char *role;    /* "system", "user", "assistant" */
    const char *content;
};

/* Render messages with the model's chat template (recognised by family from
 * the template text) or with `name` (chatml, llama2, llama3, mistral,
 * zephyr, phi3, gemma) when not NULL. add_generation_prompt appends the
 * assistant header. LLM_E_UNSUPPORTED with a detail listing the names when
 * the template is not recognised, LLM_E_INVALID for messages the template
 * refuses (roles that do not alternate for llama2, mistral, gemma). The text
 * holds the BOS text where the template emits bos_token: tokenize it with
 * LLM_TOK_PARSE_SPECIAL and without LLM_TOK_ADD_BOS. Names also accepted:
 * mistral-v1, mistral-v3, mistral-v3-tekken, mistral-v7 (plain "mistral"
 * is v1 unless the model's template says otherwise). *out is malloc'd. */
llm_status llm_chat_render(struct llm_file *f, const char *name, const struct llm_chat_msg *msgs,
                           size_t n, int add_generation_prompt, char **out);
const char *llm_chat_template_names(void);

#endif
