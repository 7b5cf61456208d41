/* hf.h: Hugging Face formats: safetensors files and model directories.
 *
 * The readers themselves (llm_hf_open, llm_safetensors_open/_parse,
 * llm_spm_parse) are declared in import.h. This header adds the safetensors
 * writer, the safetensors header scanner shared by the two readers, the Q/K
 * row permutation and the tokenizer.json reader (for tests and fuzzing).
 *
 * Metadata written by llm_hf_open beyond file.h's schema:
 *   tokenizer.pre_regex      sequence of the pre-tokenizer's split regexes,
 *                            in the order they apply: Split patterns verbatim
 *                            (a String pattern regex-escaped), "\p{N}" for
 *                            Digits(individual_digits), and the GPT-2 regex
 *                            for ByteLevel(use_regex)
 *   chat_templates.<name>    named chat templates other than "default"
 *   safetensors.<key>        __metadata__ strings of a single safetensors file
 */
#ifndef LLM_FORMAT_HF_H
#define LLM_FORMAT_HF_H

#include <stddef.h>
#include <stdint.h>

#include "../common/status.h"
#include "file.h"

/* Largest safetensors JSON header accepted (the reference library's limit). */
#define LLM_ST_MAX_HEADER 100000000u

/* One tensor of a safetensors header, validated against the buffer. */
struct llm_st_entry {
    const char *name;          /* as in the file; valid during the callback */
    const char *dtype;         /* "F32", "BF16", "I64", ... */
    int type;                  /* LLM_TYPE_F32/F16/BF16, or -1 for other dtypes */
    uint32_t n_dims;           /* 1..LLM_MAX_DIMS (a scalar is one element) */
    int64_t ne[LLM_MAX_DIMS];  /* ggml order: PyTorch shape reversed */
    const uint8_t *data;       /* (nbytes) inside the caller's buffer; may be unaligned */
    uint64_t nbytes;
};
typedef llm_status (*llm_st_fn)(const struct llm_st_entry *e, void *ctx);

/* Validate a whole safetensors file image (header and tiling of the byte
 * buffer) and call fn for every tensor, in data-offset order. `meta`
 * (optional) receives the __metadata__ strings as safetensors.<key>. Errors
 * are LLM_E_FORMAT with a detail starting "NAME: "; tensors with more than
 * LLM_MAX_DIMS dimensions are LLM_E_UNSUPPORTED. */
llm_status llm_st_scan(const uint8_t *data, size_t size, const char *name, struct llm_meta *meta,
                       llm_st_fn fn, void *ctx);

/* Write the weight tensors of f (F32, F16, BF16, or I32 for GPTQ/AWQ packed
 * words; auxiliary tensors are skipped) as a safetensors file under their names, shapes in PyTorch order,
 * header padded with spaces to a multiple of 8 and tensors sorted as the
 * reference writer does (by element size, then name). f's safetensors.<key>
 * strings become __metadata__, with "format": "pt". */
llm_status llm_safetensors_write(struct llm_file *f, const char *path);

/* Reorder the rows of a Q or K projection (weight or bias) from Hugging Face
 * half-split order to the interleaved (Meta/GGUF) order, as llama.cpp's
 * converter does: dst row h*hd + 2i + j = src row h*hd + j*hd/2 + i, with
 * hd = n_rows / n_head. n_rows must be a multiple of 2*n_head. */
void llm_hf_permute_qk(void *dst, const void *src, uint64_t n_rows, uint64_t row_bytes,
                       uint64_t n_head);

/* ---- shared by hf.c and hf_tokenizer.c ---- */

struct json_t;

/* Flags of llm_hf_json_load. */
enum {
    LLM_HF_JSON_OPTIONAL = 1,    /* a missing file: LLM_E_NOTFOUND without a detail */
    /* Numbers are reals (json_number_value), for files of which no integer
     * is read and where transformers writes integers past int64: its
     * tokenizer_config.json says "model_max_length": int(1e30) when the
     * length is unset. */
    LLM_HF_JSON_INT_AS_REAL = 2,
};

/* Read and parse DIR/FILE (at most `max` bytes), with LLM_HF_JSON_* flags.
 * Errors name "DIR/FILE". */
llm_status llm_hf_json_load(struct json_t **out, const char *dir, const char *file, size_t max,
                            int flags);
/* "DIR/FILE" into buf; LLM_E_INVALID when it does not fit. */
llm_status llm_hf_path(char *buf, size_t size, const char *dir, const char *file);

/* Special ids found in config.json (-1 when absent or not an int). */
struct llm_hf_ids {
    int64_t bos, eos, pad, unk;
};

/* The tokenizer of a model directory: tokenizer.json (byte-level BPE, or
 * SentencePiece-style BPE when there is no tokenizer.model) or
 * tokenizer.model, then tokenizer_config.json (special tokens, chat
 * templates, add_bos/add_eos) and chat_template.jinja. The vocabulary is
 * padded to vocab_size. Sets tokenizer.model = "none" when the directory
 * has no tokenizer. */
llm_status llm_hf_tokenizer_dir(struct llm_file *f, const char *dir, uint32_t vocab_size,
                                const struct llm_hf_ids *cfg_ids);

/* Read a tokenizer.json document into f: vocabulary (padded with [PAD<i>]
 * UNUSED tokens up to min_tokens), merges and the tokenizer.* metadata.
 * `name` is used in error details. */
llm_status llm_hf_tokenizer_json(struct llm_file *f, const char *text, size_t len,
                                 const char *name, uint32_t min_tokens);

#endif
