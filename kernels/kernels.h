/* kernels.h: the C entry points of the CUDA kernels in the kernels/ .cu files.
 *
 * Read by nvcc (the .cu files) and by the C compiler (lib/gpu/cuda.c, the
 * only file in lib/ that calls into kernels/). Every entry point:
 *   - takes device pointers and a stream, and is asynchronous on it;
 *   - checks the type and the sizes it is given, and returns LLM_OK,
 *     LLM_E_INVALID (a bad argument, with a detail) or LLM_E_CUDA (a launch
 *     failed; the detail names the file, line and cudaGetErrorName);
 *   - never prints, never exits.
 * Templates stay inside the .cu files; only these C functions cross over.
 */
#ifndef LLM_KERNELS_H
#define LLM_KERNELS_H

/* system headers first, outside extern "C" (their C++ versions hold templates) */
#include <stddef.h>
#include <stdint.h>
#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "../lib/common/status.h" // defines: llm_status, llm_error_set, LLM_E_CUDA
#include "../lib/quant/blocks.h"  // defines: enum llm_type, the block structs

/* LLM_CUDA_TRY(call): run a CUDA runtime call; on failure record
 * "file:line: call: cudaErrorName (text)" and return LLM_E_CUDA. For use in
 * functions that own nothing to clean up (split the work so that the one
 * that frees calls the one that tries). */
#define LLM_CUDA_TRY(call)                                                            \
    do {                                                                              \
        cudaError_t llm_cuda_e_ = (call);                                             \
        if (llm_cuda_e_ != cudaSuccess) {                                             \
            (void)cudaGetLastError(); /* clear a non-sticky error for the next call */ \
            return llm_error_set(LLM_E_CUDA, "%s:%d: %s: %s (%s)", __FILE__, __LINE__, #call, \
                                 cudaGetErrorName(llm_cuda_e_),                        \
                                 cudaGetErrorString(llm_cuda_e_));                     \
        }                                                                             \
    } while (0)

/* Dequantize nrows rows of type t to float32 on the device.
 * src: nrows rows of row_bytes bytes each (row_bytes = llm_type_row_bytes(t,
 * ne0), checked against the kernel's own layout); dst: (nrows, ne0) floats.
 * Rows may start at any byte address. The result equals llm_dequantize_row
 * bit for bit (NaN payloads aside). Every weight type, f32/f16/bf16
 * included; LLM_E_INVALID for the auxiliary types. */
llm_status llm_dequant_cuda(enum llm_type t, const void *src, float *dst, int64_t ne0,
                            int64_t nrows, uint64_t row_bytes, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
