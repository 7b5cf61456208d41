/* import.h: open any supported model file as a struct llm_file.
 *
 * Formats: .llm (our own), GGUF v2/v3, llama2.c checkpoints (legacy and
 * version 1, tokenizer from a separate tokenizer.bin), Hugging Face model
 * directories (config.json + safetensors), single safetensors files (for
 * --info only: no config), and synthetic shapes.
 */
#ifndef LLM_FORMAT_IMPORT_H
#define LLM_FORMAT_IMPORT_H

#include "../common/status.h"
#include "../quant/types.h"
#include "file.h"

struct llm_import_opts {
    enum llm_type dequant_type;  /* for source types we cannot keep (Q4_K...): default f16 */
    const char *tokenizer_path;  /* llama2.c tokenizer.bin (optional) */
    int verify;                  /* .llm: check every tensor while opening */
    /* By default each tensor's bytes are checked at their first use (see
     * llm_tensor_bytes): its stored checksum (.llm) and its values (a NaN or
     * infinite weight is an error). */
    int no_verify;               /* check neither (llm-run --no-verify) */
    int nonfinite;               /* LLM_FINITE_REFUSE (default), _COUNT or _IGNORE */
};

void llm_import_opts_default(struct llm_import_opts *o);
/* Set a file's checks of first use (check_sums, check_finite) from o (NULL:
 * the defaults); every importer calls it. */
void llm_file_set_checks(struct llm_file *f, const struct llm_import_opts *o);

/* Detect the format of `path` ("-" = stdin) and open it. */
llm_status llm_import(struct llm_file **out, const char *path, const struct llm_import_opts *o);

/* The individual readers. */
llm_status llm_llm_open(struct llm_file **out, const char *path, const struct llm_import_opts *o);
llm_status llm_gguf_open(struct llm_file **out, const char *path, const struct llm_import_opts *o);
llm_status llm_llama2c_open(struct llm_file **out, const char *path,
                            const struct llm_import_opts *o);
llm_status llm_hf_open(struct llm_file **out, const char *dir, const struct llm_import_opts *o);
/* LongRoPE's scale of cos and sin when a config gives none (transformers'
 * default): sqrt(1 + ln(f) / ln(orig)) for f = ctx / orig > 1, else 1. */
double llm_longrope_attn_factor(double ctx, double orig);
llm_status llm_safetensors_open(struct llm_file **out, const char *path,
                                const struct llm_import_opts *o);

/* Parsers of in-memory buffers (the mapped file), for the fuzz targets. The
 * file takes no ownership of `data`, which must outlive it. */
llm_status llm_llm_parse(struct llm_file **out, const uint8_t *data, size_t size,
                         const char *name, const struct llm_import_opts *o);
llm_status llm_gguf_parse(struct llm_file **out, const uint8_t *data, size_t size,
                          const char *name, const struct llm_import_opts *o);
llm_status llm_llama2c_parse(struct llm_file **out, const uint8_t *data, size_t size,
                             const char *name, const struct llm_import_opts *o);
llm_status llm_safetensors_parse(struct llm_file **out, const uint8_t *data, size_t size,
                                 const char *name, const struct llm_import_opts *o);
/* Map a model file ("-" = stdin). Input that is not a regular file (a
 * pipe, a device) is copied to a temporary file, and its first bytes are
 * checked first (llm_model_head_check): the copy stops at the first
 * inconsistency, and at the size the header gives. */
llm_status llm_model_map(struct llm_map *m, const char *path);
/* Map a small file (a tokenizer): input that is not a regular file is
 * copied up to `max` bytes, and refused past them. */
#define LLM_TOKENIZER_MAX ((uint64_t)64 << 20)
llm_status llm_small_map(struct llm_map *m, const char *path, uint64_t max);

/* Checks of the first bytes of a model that is spooled (an llm_map_check_fn
 * of common/io.h; ctx is the name for messages), and of each format (the
 * size of the whole file from the header: 0 for .llm, whose index is at its
 * end). Exposed for the fuzz targets. */
llm_status llm_model_head_check(const uint8_t *head, size_t n, int eof, uint64_t *need,
                                uint64_t *size, void *name);
llm_status llm_llm_head(const uint8_t *d, size_t n, int eof, uint64_t *need, uint64_t *size,
                        const char *name);
llm_status llm_gguf_head(const uint8_t *d, size_t n, int eof, uint64_t *need, uint64_t *size,
                         const char *name);
llm_status llm_safetensors_head(const uint8_t *d, size_t n, int eof, uint64_t *need,
                                uint64_t *size, const char *name);
llm_status llm_llama2c_head(const uint8_t *d, size_t n, int eof, uint64_t *need, uint64_t *size,
                            const char *name);

/* llama2.c tokenizer.bin with n_tokens entries, into f's vocabulary. */
llm_status llm_llama2c_tokenizer_parse(struct llm_file *f, const uint8_t *data, size_t size,
                                       const char *name, uint32_t n_tokens);
/* The llama2.c tokenizer.bin at path into f's vocabulary, of the size of
 * f's hparams.vocab_size (a llama2.c checkpoint's, or a synthetic model's:
 * a random model that tokenizes real text, for calibration tests). */
llm_status llm_llama2c_tokenizer_open(struct llm_file *f, const char *path);
/* SentencePiece ModelProto (tokenizer.model), into f's vocabulary. */
llm_status llm_spm_parse(struct llm_file *f, const uint8_t *data, size_t size, const char *name);

/* Synthetic random-weight model of a named shape (stories260k, stories15m,
 * stories110m, smollm2-135m, llama-2-7b, llama-3-8b, mistral-7b, qwen2-0.5b...)
 * or of a YAML shape file; deterministic for a given seed. Tensor data is
 * produced on demand while writing. */
llm_status llm_synthetic(struct llm_file **out, const char *shape, enum llm_type type,
                         uint64_t seed);
const char *llm_synthetic_shapes(void); /* comma-separated names */

/* Writers. */
struct llm_write_opts {
    int compress_level;   /* 0: none; 1..22: zstd level for every tensor */
    enum llm_type type;   /* convert weight matrices to this type ... */
    int convert;          /* ... when set (norms and 1-D tensors stay f32) */
};
void llm_write_opts_default(struct llm_write_opts *o);
llm_status llm_llm_write(struct llm_file *f, const char *path, const struct llm_write_opts *o);

/* Check every stored checksum of an opened .llm file (reads every page,
 * keeps nothing), and the values as the file's check_finite says.
 * *n_checked (optional) counts the tensors checked. */
llm_status llm_llm_verify(struct llm_file *f, size_t *n_checked);

/* Convert every weight matrix (2-D or more, not auxiliary, name ending in
 * ".weight") to `type` on demand (fill callbacks); 1-D tensors (norms,
 * biases) stay as they are. Tensors already of `type` are untouched. */
llm_status llm_file_convert(struct llm_file *f, enum llm_type type);
llm_status llm_gguf_write(struct llm_file *f, const char *path, const struct llm_write_opts *o);

#endif
