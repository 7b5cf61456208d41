/* file.h: a model in memory: metadata tree plus named tensors.
 *
 * Every importer (GGUF, llama2.c, Hugging Face, synthetic) produces a
 * struct llm_file; the .llm and GGUF writers consume one. Tensor data is
 * either a pointer into a mapping of the source (no copy), an owned buffer,
 * or produced on demand by a fill callback (a conversion done tensor by
 * tensor while writing, so peak memory stays near one tensor).
 *
 * Conventions (the same as GGUF): tensor names are GGUF names
 * ("token_embd.weight", "blk.0.attn_q.weight", "output.weight", ...), shapes
 * are in ggml order: ne[0] is the number of elements in a row (the
 * contiguous dimension), so a PyTorch weight W[out][in] has ne = {in, out}.
 * Q and K rows are in the order that matches hparams.rope_type: "norm"
 * (interleaved pairs, GGUF llama and llama2.c order) or "neox" (half-split,
 * Hugging Face order).
 *
 * Metadata schema (YAML, see llm-format(5)); importers set:
 *   architecture             llama | mistral | qwen2 | none (tokenizer only)
 *   name                     free text
 *   hparams.vocab_size, context_length, embedding_length, block_count,
 *           feed_forward_length, head_count, head_count_kv, head_dim,
 *           rope_dim (ints); rope_theta, rms_norm_eps (floats);
 *           rope_type (norm|neox); tie_embeddings (bool);
 *           rope_scaling.{type,factor,original_context_length,
 *                         low_freq_factor,high_freq_factor,attn_factor,
 *                         beta_fast,beta_slow}
 *   tokenizer.model          llama (SentencePiece-style) | gpt2 (byte-level BPE) | none
 *   tokenizer.pre            pre-tokenizer name (GGUF tokenizer.ggml.pre)
 *   tokenizer.n_tokens, bos_id, eos_id, unk_id, pad_id, eot_id, sep_id (ints)
 *   tokenizer.add_bos, add_eos, add_space_prefix (bools)
 *   chat_template            Jinja text
 *   generation.*             from generation_config.json
 *   quantization.*           provenance (method, bits, group, calibration...)
 *   source.{format,path}     where it was converted from
 *   gguf.<key>               GGUF keys not mapped above, kept as they were
 *   user.<key>               free-form keys (llm-convert --meta KEY=VALUE)
 * Tokenizer arrays live in auxiliary tensors (flag LLM_TENSOR_AUX):
 *   tokenizer.tokens (u8, all token bytes), tokenizer.token_offsets
 *   (u32, n_tokens+1), tokenizer.scores (f32, n_tokens), tokenizer.token_types
 *   (i32, n_tokens; GGUF token type ids), tokenizer.merges (u8) and
 *   tokenizer.merge_offsets (u32, n_merges+1) for BPE.
 */
#ifndef LLM_FORMAT_FILE_H
#define LLM_FORMAT_FILE_H

#include <stddef.h>
#include <stdint.h>

#include "../common/io.h"
#include "../common/status.h"
#include "../quant/types.h"
#include "meta.h"

#define LLM_MAX_DIMS 4
#define LLM_MAX_NAME 256

enum {
    LLM_TENSOR_AUX = 1u << 0, /* auxiliary data (tokenizer arrays), not a weight */
};

enum { LLM_COMPRESS_NONE = 0, LLM_COMPRESS_ZSTD = 1 };

/* What a NaN or infinite weight met at a tensor's first use does
 * (llm_file.check_finite). */
enum { LLM_FINITE_IGNORE = 0, LLM_FINITE_COUNT = 1, LLM_FINITE_REFUSE = 2 };

struct llm_tensor;
typedef llm_status (*llm_fill_fn)(const struct llm_tensor *t, void *dst, void *ctx);

struct llm_tensor {
    char *name;
    enum llm_type type;
    uint32_t n_dims;
    int64_t ne[LLM_MAX_DIMS]; /* ne[0] = elements per row; unused dims are 1 */
    uint32_t flags;           /* LLM_TENSOR_* */
    uint64_t nbytes;          /* bytes of the data in `type`'s layout */
    const void *data;         /* (nbytes) or NULL: then `fill` or `stored` */
    llm_fill_fn fill;         /* writes nbytes bytes to dst */
    void *fill_ctx;           /* for fill; owned by the file if registered */
    /* as found in a .llm file: */
    uint32_t compression;     /* LLM_COMPRESS_* */
    uint64_t offset;          /* absolute file offset of the stored bytes */
    uint64_t stored_size;     /* bytes in the file */
    uint64_t checksum;        /* XXH3-64 of the nbytes uncompressed bytes */
    const void *stored;       /* stored bytes in the mapping */
    int checked;              /* the checks of its first use are done (see llm_file) */
};

struct llm_file {
    struct llm_meta *meta;      /* the metadata map */
    struct llm_tensor *tensors; /* (n_tensors), in file order */
    size_t n_tensors, cap_tensors;
    uint32_t *name_index;       /* (cap_index) open-addressed: tensor index + 1, 0 = empty */
    size_t cap_index;
    struct llm_map *maps;       /* (n_maps) source mappings, closed on free */
    size_t n_maps, cap_maps;
    void **owned;               /* (n_owned) buffers freed on free */
    size_t n_owned, cap_owned;
    char *path;                 /* source path, for messages */
    char *format;               /* "llm", "gguf", "llama2c", "hf", "safetensors", "synthetic" */
    /* GGUF-specific facts kept for --info */
    uint32_t src_version;
    /* What the first use of a tensor's bytes checks, before anything reads
     * them (llm_tensor_peek, llm_tensor_bytes, llm_tensor_read): the
     * importers set these from llm_import_opts; a file made in memory
     * checks nothing. */
    int check_sums;             /* compare the checksum stored with it (.llm) */
    int check_finite;           /* LLM_FINITE_*: look for NaN and infinite weights */
    uint64_t n_nonfinite;       /* NaN and infinite weight values found so far */
    size_t n_nonfinite_tensors; /* the tensors that hold them */
    char nonfinite_first[LLM_MAX_NAME]; /* the first of those tensors */
};

llm_status llm_file_new(struct llm_file **out, const char *path, const char *format);
void llm_file_free(struct llm_file *f);

/* Keep `p` alive as long as the file (freed with llm_free). On failure p is
 * freed. */
llm_status llm_file_own(struct llm_file *f, void *p);
/* Take over a mapping (it is closed with the file). */
llm_status llm_file_add_map(struct llm_file *f, struct llm_map *m);
/* llm_map_drop on the mapping of f that holds [p, p + n), if any (bytes
 * the file owns in memory are left alone); 1 if a mapping held them. */
int llm_file_drop_pages(struct llm_file *f, const void *p, size_t n);

/* Add a tensor; the shape is validated and nbytes computed. `data` may be
 * NULL (set t->fill afterwards). Names must be unique and shorter than
 * LLM_MAX_NAME. *out (optional) points into f->tensors and is valid until the
 * next add. */
llm_status llm_file_add_tensor(struct llm_file *f, const char *name, enum llm_type type,
                               uint32_t n_dims, const int64_t *ne, const void *data,
                               struct llm_tensor **out);
struct llm_tensor *llm_file_find(const struct llm_file *f, const char *name);
/* Remove a tensor by name (no error when absent). */
void llm_file_remove(struct llm_file *f, const char *name);

/* The bytes of a tensor: its data, the decompressed stored bytes, or the
 * output of its fill callback (kept until the file is freed). Every access
 * below checks the bytes at their first use, as the file says (check_sums,
 * check_finite): a checksum that does not match is LLM_E_CHECKSUM naming
 * the file and the tensor; compressed bytes are always checked. */
llm_status llm_tensor_bytes(struct llm_file *f, struct llm_tensor *t, const void **out);
/* Write the tensor's bytes into dst (nbytes), without keeping a copy. */
llm_status llm_tensor_read(struct llm_file *f, struct llm_tensor *t, void *dst);
/* The tensor's bytes where they are (its data, or bytes stored
 * uncompressed in the mapping), checked; *out = NULL (and LLM_OK) when
 * they would have to be decompressed or produced: then llm_tensor_read
 * into a buffer of one's own (what writers do, to keep one tensor in
 * memory at a time). */
llm_status llm_tensor_peek(struct llm_file *f, struct llm_tensor *t, const void **out);
static inline int llm_tensor_in_place(const struct llm_tensor *t)
{
    return t->data || (t->stored && t->compression == LLM_COMPRESS_NONE);
}
/* Check a tensor now, keeping nothing: the checksum stored with it,
 * whatever the file's check_sums (a compressed one is decompressed into
 * *scratch, of *cap bytes, grown as needed), and its values as the file's
 * check_finite says. For llm-convert --verify. */
llm_status llm_tensor_check(struct llm_file *f, struct llm_tensor *t, void **scratch, size_t *cap);

/* Elements and rows of a tensor. */
int64_t llm_tensor_nelements(const struct llm_tensor *t);
int64_t llm_tensor_nrows(const struct llm_tensor *t);

/* Tokenizer arrays. tokens[i] has len[i] bytes (not NUL-terminated);
 * scores and types may be NULL. Replaces any previous vocabulary. */
llm_status llm_file_set_vocab(struct llm_file *f, uint32_t n, const char *const *tokens,
                              const uint32_t *lens, const float *scores, const int32_t *types);
llm_status llm_file_set_merges(struct llm_file *f, uint32_t n, const char *const *merges,
                               const uint32_t *lens);

/* A read view of the tokenizer arrays (pointers into the tensors). */
struct llm_vocab_view {
    uint32_t n_tokens;
    const uint8_t *bytes;     /* all token bytes */
    const uint32_t *offsets;  /* (n_tokens+1): token i = bytes[offsets[i]..offsets[i+1]) */
    const float *scores;      /* (n_tokens) or NULL */
    const int32_t *types;     /* (n_tokens) or NULL */
    uint32_t n_merges;
    const uint8_t *merge_bytes;
    const uint32_t *merge_offsets; /* (n_merges+1) */
};
/* LLM_E_NOTFOUND when the file has no vocabulary; LLM_E_FORMAT when the
 * arrays are inconsistent (offsets out of range, sizes disagree). */
llm_status llm_file_vocab(struct llm_file *f, struct llm_vocab_view *v);

/* Count of weight parameters and their bytes (auxiliary tensors excluded). */
void llm_file_totals(const struct llm_file *f, uint64_t *params, uint64_t *bytes);

#endif
