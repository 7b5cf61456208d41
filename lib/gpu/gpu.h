/* gpu.h: the CUDA device, seen from C.
 *
 * Built from lib/gpu/cuda.c when the library is built with CUDA, and from
 * lib/gpu/cuda_none.c otherwise, where every function fails with
 * LLM_E_CUDA "built without CUDA" (so callers and tests need no #ifdef).
 * This header needs no CUDA header: streams are passed as void *
 * (a cudaStream_t; NULL is the default stream) and device memory as void *.
 *
 *     int n;
 *     if (llm_gpu_available(&n) == LLM_OK)
 *         st = llm_gpu_dequantize(LLM_TYPE_Q4_0, rows, out, ne0, nrows);
 *
 * Every failure records a detail ("cuda.c:80: cudaMalloc(...):
 * cudaErrorMemoryAllocation (out of memory)") for llm_error_detail().
 */
#ifndef LLM_GPU_GPU_H
#define LLM_GPU_GPU_H

#include <stddef.h>
#include <stdint.h>

#include "../common/status.h"
#include "../quant/blocks.h" // defines: enum llm_type

/* *n_devices = the number of usable CUDA devices. LLM_OK when there is at
 * least one; LLM_E_CUDA (and *n_devices = 0) when there is none, the driver
 * is missing, or the library was built without CUDA. */
llm_status llm_gpu_available(int *n_devices);

/* The name of device `dev` ("NVIDIA H100 80GB HBM3") into buf (n bytes). */
llm_status llm_gpu_device_name(int dev, char *buf, size_t n);

/* Dequantize nrows rows of type t from host memory to host memory through
 * the current device: upload, kernel, download, synchronise (for tests;
 * the forward pass uses the _dev variant on resident weights).
 * host_src: nrows * llm_type_row_bytes(t, ne0) bytes; host_dst: (nrows, ne0).
 * The result equals llm_dequantize_row on every row. */
llm_status llm_gpu_dequantize(enum llm_type t, const void *host_src, float *host_dst, int64_t ne0,
                              int64_t nrows);

/* The same on device pointers, asynchronous on `stream` (a cudaStream_t,
 * NULL for the default stream). d_dst: (nrows, ne0) floats on the device. */
llm_status llm_gpu_dequantize_dev(enum llm_type t, const void *d_src, float *d_dst, int64_t ne0,
                                  int64_t nrows, void *stream);

/* Device memory: *d_ptr receives `bytes` bytes (NULL for 0 bytes);
 * llm_gpu_free(NULL) does nothing. */
llm_status llm_gpu_alloc(void **d_ptr, size_t bytes);
void llm_gpu_free(void *d_ptr);

/* Synchronous copies between host and device memory. */
llm_status llm_gpu_upload(void *d_dst, const void *host_src, size_t bytes);
llm_status llm_gpu_download(void *host_dst, const void *d_src, size_t bytes);

/* Wait for all work on the current device. */
llm_status llm_gpu_sync(void);

#endif
