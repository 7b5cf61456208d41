/* llm.h: the public header of libllm, the one header cmd/ includes.
 *
 * libllm takes a language model from its published checkpoint to inference:
 * importers (GGUF, llama2.c, Hugging Face safetensors), the .llm container
 * (llm-format(5)), quantized block types with CPU references and CUDA
 * kernels.
 *
 * Conventions
 *   - Every fallible function returns llm_status: LLM_OK (0) or a negative
 *     LLM_E_* code; llm_error_detail() gives a one-line message that names
 *     the file and what is wrong. The library never prints and never exits.
 *   - Tensors are row-major with ggml's dimension order: ne[0] is the number
 *     of elements in a row (contiguous), ne[1] the number of rows, and so on.
 *     A PyTorch weight W[out][in] has ne = {in, out}.
 *   - Objects made by _new/_open are released by _free/_close.
 *
 * Example: convert a GGUF file to .llm with f16 weights
 *
 *     struct llm_file *f;
 *     struct llm_write_opts wo;
 *     llm_write_opts_default(&wo);
 *     wo.convert = 1, wo.type = LLM_TYPE_F16;
 *     llm_status s = llm_import(&f, "m.gguf", NULL);
 *     if (!s) s = llm_llm_write(f, "m.llm", &wo);
 *     if (s) fprintf(stderr, "%s\n", llm_error_detail(s));
 *     llm_file_free(f);
 */
#ifndef LLM_H
#define LLM_H

#include "common/alloc.h"  /* llm_malloc, llm_free */
#include "common/cli.h"    /* option tables for cmd/ */
#include "common/fp16.h"
#include "common/io.h"     /* llm_map, llm_out */
#include "common/status.h"
#include "format/file.h"   /* struct llm_file, struct llm_tensor */
#include "format/import.h" /* llm_import, llm_*_write, llm_synthetic */
#include "format/hf_quant.h" /* llm_hfq_write: GPTQ/AWQ directories */
#include "format/info.h"
#include "format/meta.h"
#include "gpu/gpu.h"       /* llm_gpu_* (LLM_E_CUDA when built without CUDA) */
#include "grammar/grammar.h" /* llm_grammar_*, llm_gmask_*, llm_gmatch_*: constrained decoding */
#include "grammar/convert.h" /* llm_regex_to_gbnf, llm_schema_to_gbnf */
#include "bench/bench.h"    /* llm_bench_*, llm_stats_*, llm_probe_*: llm-bench */
#include "kv/kvstat.h"      /* llm_kvstat_*: KV-cache arithmetic (llm-kvstat) */
#include "quant/blocks.h"
#include "quant/kquants.h"  /* the GGUF block types: canonical form, quantizers */
#include "quant/quant.h"
#include "quant/types.h"
#include "kv/kv.h"          /* the paged KV cache */
#include "kv/prefix.h"      /* the prefix index over the KV blocks */
#include "kv/state.h"       /* KV state files: a sequence's state between processes */
#include "model/model.h"    /* llm_model_open, llm_context_new, llm_decode, llm_perplexity */
#include "model/generate.h" /* llm_generate */
#include "model/spec.h"     /* llm_spec_*: speculative decoding */
#include "model/kvstate.h"  /* llm_kvstate_*: a context's sequence to and from a state file */
#include "sample/sample.h"  /* llm_sampler_* */
#include "serve/request.h"  /* OpenAI batch lines in and out */
#include "serve/engine.h"   /* continuous batching: llm_engine_* */
#include "serve/batch.h"    /* llm-run --batch: llm_batch_run */
#include "serve/trace.h"    /* the KV trace: llm-kvstat --trace */
#include "tokenizer/tokenizer.h"
#include "ops/matmul.h"      /* llm_matvec, llm_matmul, llm_pool_*: CPU products and threads */
#include "ops/vec.h"         /* llm_vec_dots_*, llm_vec_axpys_*: attention kernels */
#include "quantize/awq.h"    /* llm_awq_*: AWQ scale and clip search, folding (llm-quantize) */
#include "quantize/quantize.h" /* llm_quantize, recipes: llm-quantize */
#include "quantize/calib.h"  /* llm_calib_*: calibration windows */
#include "quant/grid.h"   /* llm_qgrid_*: integer grids with explicit scales and zeros */
#include "quantize/gptq.h"   /* llm_gptq_quantize: GPTQ on one matrix */

#endif
