/* hf_quant.h: Hugging Face GPTQ and AWQ (GEMM) checkpoints, in and out
 * (quantization.md 1.3, 1.4, 2.4).
 *
 * Type mapping. A 4-bit checkpoint with group 32, 64, 128 or -1 (per output
 * channel) becomes q4_1, q4z_g64, q4z_g128 or q4z_ch; when every zero point of
 * the checkpoint is the midpoint (8) it becomes q4_0, q4_g64, q4_g128 or
 * q4_ch instead (the same values, no stored minimum). 8-bit checkpoints map
 * to q8z_g32 ... q8z_ch and q8_0 ... q8_ch likewise (midpoint 128). Each
 * group's fp16 scale s and integer zero z become d = s and m = -d*z rounded
 * to the stored precision (llm_qgrid_group_set), so w = d*q + m equals
 * s*(q - z) up to that one rounding of m (exact for symmetric types).
 *
 * Layout. Our weights are [out rows][in columns] (ggml ne = {in, out}).
 * GPTQ qweight is int32 [in*bits/32][out], packed along the input dim,
 * LSB first; qzeros int32 [groups][out*bits/32] packed along the output dim
 * (at 2, 4 and 8 bits the reader also takes GPTQModel's ceil(n*bits/32)
 * words for a dimension that is not a multiple of 32/bits);
 * scales [groups][out]; g_idx int32 [in]. AWQ GEMM qweight is int32
 * [in][out/8] and qzeros [groups][out/8], packed along the output dim with
 * nibble i holding column 8j + {0,2,4,6,1,3,5,7}[i]; 4 bits only, no g_idx.
 * Q and K rows are permuted between the HF half-split order and our
 * interleaved order exactly as hf.c does for float weights (when
 * hparams.rope_type is "norm").
 *
 * GPTQ zero-point layouts. "v1" (AutoGPTQ's checkpoint_format "gptq") stores
 * z - 1, "v2" ("gptq_v2") stores z. The importer decides once per
 * checkpoint from the stored zeros of every quantized tensor, not from the
 * metadata (which is known to lie): all stored zeros 2^(bits-1) - 1 -> v1
 * (symmetric); all 2^(bits-1) -> v2 (symmetric); otherwise a stored
 * 2^bits - 1 anywhere -> v2 (v1 cannot store z = 2^bits); otherwise
 * (asymmetric, no decisive value) checkpoint_format "gptq_v2" -> v2, and
 * anything else -> v1, AutoGPTQ's historical layout. AWQ zeros never have
 * the offset. The exporter writes v1 with checkpoint_format "gptq" by
 * default, because that is what vLLM's and transformers' GPTQ loaders
 * assume unless told otherwise; a zero point of 0 cannot be stored in v1,
 * and then the caller must ask for v2.
 *
 * Act-order. A GPTQ g_idx other than c / group_size is imported by a stable
 * sort of the columns by g_idx: the weight is stored with its columns
 * permuted so that each group is contiguous, plus an I32 tensor
 * "<base>.perm" (ne0 = in) with perm[i] = the original input column of
 * stored column i (the forward pass computes W_stored . x[perm]). Every
 * group must then hold exactly group_size columns (the last one the rest).
 * Export un-permutes and writes g_idx[c] = group of c; the order of the
 * columns inside one group is not representable in g_idx, so a round trip
 * is byte-identical when perm is increasing inside each group (as the
 * importer makes it).
 */
#ifndef LLM_FORMAT_HF_QUANT_H
#define LLM_FORMAT_HF_QUANT_H

#include <stddef.h>
#include <stdint.h>

#include "../common/status.h"
#include "file.h"
#include "hf.h"

/* ---- import: hooks used by hf.c --------------------------------------- */

struct llm_hfq;
struct json_t;

/* The quantization of a model directory, from config.json's
 * "quantization_config" or else DIR/quantize_config.json. *out = NULL (and
 * LLM_OK) when the checkpoint is not quantized; LLM_E_UNSUPPORTED for
 * quantization methods, bit widths or group sizes we cannot hold. */
llm_status llm_hfq_new(struct llm_hfq **out, const struct json_t *cfg, const char *dir);
void llm_hfq_free(struct llm_hfq *q);

/* Parts of a quantized linear layer, by tensor name suffix. */
enum { LLM_HFQ_QWEIGHT, LLM_HFQ_QZEROS, LLM_HFQ_SCALES, LLM_HFQ_GIDX, LLM_HFQ_NPARTS };

/* Which part `name` is (-1: none); *base_len is the length of the name
 * without ".qweight" etc. */
int llm_hfq_part(const char *name, size_t *base_len);

/* Record part `part` (tensor e of file `shard`) of the linear layer whose
 * float weight would be `gguf` (a GGUF name) of `in` columns and `out`
 * rows. qk_heads > 0: the output rows are Q/K rows to permute from HF to
 * interleaved order with that many heads. `order` is kept for the caller. */
llm_status llm_hfq_add(struct llm_hfq *q, const struct llm_st_entry *e, int part,
                       const char *shard, const char *gguf, int64_t in, int64_t out,
                       uint64_t qk_heads, int64_t order);

/* After every shard is scanned: check each layer (all parts, shapes, dtypes,
 * g_idx, scales), detect the zero layout and the types, and record
 * quantization.* metadata in f. The tensor data stays in f's mappings. */
llm_status llm_hfq_finish(struct llm_hfq *q, struct llm_file *f);

/* A tensor to add to the file, in the caller's order. */
struct llm_hfq_tensor {
    const char *name;            /* GGUF name */
    enum llm_type type;
    uint32_t n_dims;
    int64_t ne[LLM_MAX_DIMS];
    const void *data;            /* owned by the file, or NULL: then fill */
    llm_fill_fn fill;
    void *fill_ctx;              /* owned by the file */
    int64_t order;
};
size_t llm_hfq_count(const struct llm_hfq *q);
/* The i-th tensor (each weight, then its .perm when act-order); valid after
 * llm_hfq_finish, as long as q. */
void llm_hfq_tensor(const struct llm_hfq *q, size_t i, struct llm_hfq_tensor *t);

/* ---- export ------------------------------------------------------------- */

enum { LLM_HFQ_GPTQ = 1, LLM_HFQ_AWQ = 2 };

struct llm_hfq_write_opts {
    int method;   /* LLM_HFQ_GPTQ or LLM_HFQ_AWQ */
    int gptq_v2;  /* GPTQ: store zeros as they are (checkpoint_format "gptq_v2") */
    int dequant;  /* write tensors the format cannot hold quantized as f16 */
};
void llm_hfq_write_opts_default(struct llm_hfq_write_opts *o);

/* Write f as a Hugging Face directory DIR (created when missing):
 * config.json with quantization_config, quantize_config.json (GPTQ) and
 * model.safetensors. Every blk.N linear weight of an integer grid type
 * (q4*, q8*; one bits and group size for the whole model) is written as
 * qweight/qzeros/scales(/g_idx), scales in fp16 (f32 for a per-channel
 * tensor whose scales fp16 cannot hold exactly); f32/f16/bf16 tensors keep
 * their type. Tensors the format cannot hold quantized (embeddings or
 * lm_head of a quantized type, nf4/fp8, a zero point that is not an
 * integer, a scale that is not finite, shapes the packing cannot split or
 * that vLLM refuses (in_features not a multiple of the group), a zero point
 * of 0 in the GPTQ v1 layout, act-order for AWQ) are refused with LLM_E_UNSUPPORTED naming the tensor, or with
 * o->dequant written as f16 and listed as not quantized in the config
 * ("dynamic" negative matches for GPTQ, "modules_to_not_convert" for AWQ).
 * The tokenizer, when f has one, is written by llm_hf_tokenizer_write. */
llm_status llm_hfq_write(struct llm_file *f, const char *dir, const struct llm_hfq_write_opts *o);

/* The tokenizer of f as DIR/tokenizer.model (SentencePiece-style "llama"
 * vocabularies: pieces, scores, types, special ids, add_dummy_prefix) or
 * DIR/tokenizer.json (byte-level BPE "gpt2": vocabulary, added tokens,
 * merges, the pre-tokenizer of tokenizer.pre / tokenizer.pre_regex, BOS/EOS
 * post-processing), plus DIR/tokenizer_config.json (special tokens,
 * add_bos/add_eos, chat template). *written = 0 when f has no tokenizer.
 * LLM_E_UNSUPPORTED for a pre-tokenizer without a tokenizer.json form or a
 * token that is not UTF-8 (tokenizer.json only). */
llm_status llm_hf_tokenizer_write(struct llm_file *f, const char *dir, int *written);

#endif
