/* cuda.c: the CUDA glue behind gpu.h: devices, memory, and the C wrappers
 * of kernels/ (the only file in lib/ that calls into kernels/). Built when
 * CUDA=1; cuda_none.c stands in otherwise. Every CUDA runtime call goes
 * through LLM_CUDA_TRY (kernels.h), which records file:line and the
 * cudaGetErrorName of a failure and returns LLM_E_CUDA. */
#include "gpu.h"

#include <string.h>

#include <cuda_runtime_api.h>

#include "../../kernels/kernels.h" // defines: llm_dequant_cuda, LLM_CUDA_TRY
#include "../common/alloc.h"       // defines: llm_mul_ok
#include "../quant/types.h"        // defines: llm_type_traits, llm_type_row_bytes

llm_status llm_gpu_available(int *n_devices)
{
    int n = 0;
    *n_devices = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return llm_error_set(LLM_E_CUDA, "no CUDA device: %s (%s)", cudaGetErrorName(e),
                             cudaGetErrorString(e));
    }
    if (n <= 0)
        return llm_error_set(LLM_E_CUDA, "no CUDA device");
    *n_devices = n;
    return LLM_OK;
}

llm_status llm_gpu_device_name(int dev, char *buf, size_t n)
{
    struct cudaDeviceProp prop;
    if (!buf || !n)
        return llm_error_set(LLM_E_INVALID, "gpu_device_name: no buffer");
    buf[0] = 0;
    LLM_CUDA_TRY(cudaGetDeviceProperties(&prop, dev));
    size_t len = strnlen(prop.name, sizeof prop.name);
    if (len >= n)
        len = n - 1;
    memcpy(buf, prop.name, len);
    buf[len] = 0;
    return LLM_OK;
}

llm_status llm_gpu_alloc(void **d_ptr, size_t bytes)
{
    *d_ptr = NULL;
    if (!bytes)
        return LLM_OK;
    LLM_CUDA_TRY(cudaMalloc(d_ptr, bytes));
    return LLM_OK;
}

void llm_gpu_free(void *d_ptr)
{
    if (d_ptr)
        (void)cudaFree(d_ptr); /* nothing a caller could do about a failure here */
}

llm_status llm_gpu_upload(void *d_dst, const void *host_src, size_t bytes)
{
    if (bytes)
        LLM_CUDA_TRY(cudaMemcpy(d_dst, host_src, bytes, cudaMemcpyHostToDevice));
    return LLM_OK;
}

llm_status llm_gpu_download(void *host_dst, const void *d_src, size_t bytes)
{
    if (bytes)
        LLM_CUDA_TRY(cudaMemcpy(host_dst, d_src, bytes, cudaMemcpyDeviceToHost));
    return LLM_OK;
}

llm_status llm_gpu_sync(void)
{
    LLM_CUDA_TRY(cudaDeviceSynchronize());
    return LLM_OK;
}

// ----------------------------------------------------------------------------
// dequantization

/* Sizes of a dequantization: src bytes and dst bytes, overflow-checked. */
static llm_status dequant_sizes(enum llm_type t, int64_t ne0, int64_t nrows, uint64_t *row_bytes,
                                uint64_t *src_bytes, uint64_t *dst_bytes)
{
    const struct llm_type_traits *tr = llm_type_traits((uint32_t)t);
    if (!tr || tr->is_aux)
        return llm_error_set(LLM_E_INVALID, "gpu dequantize: type %s (%u) is not a weight type",
                             llm_type_name((uint32_t)t), (unsigned)t);
    if (ne0 <= 0 || ne0 > ((int64_t)1 << 53) || nrows < 0)
        return llm_error_set(LLM_E_INVALID, "gpu dequantize: bad shape %lld x %lld",
                             (long long)nrows, (long long)ne0);
    *row_bytes = llm_type_row_bytes(t, (uint64_t)ne0);
    if (!*row_bytes || !llm_mul_ok(*row_bytes, (uint64_t)nrows, src_bytes) ||
        !llm_mul_ok((uint64_t)ne0 * sizeof(float), (uint64_t)nrows, dst_bytes) ||
        *src_bytes > SIZE_MAX || *dst_bytes > SIZE_MAX)
        return llm_error_set(LLM_E_INVALID, "gpu dequantize: %lld x %lld overflows",
                             (long long)nrows, (long long)ne0);
    return LLM_OK;
}

llm_status llm_gpu_dequantize_dev(enum llm_type t, const void *d_src, float *d_dst, int64_t ne0,
                                  int64_t nrows, void *stream)
{
    uint64_t rb, sb, db;
    LLM_TRY(dequant_sizes(t, ne0, nrows, &rb, &sb, &db));
    return llm_dequant_cuda(t, d_src, d_dst, ne0, nrows, rb, (cudaStream_t)stream);
}

/* The device part of llm_gpu_dequantize, on buffers its caller owns. */
static llm_status dequant_through(enum llm_type t, const void *host_src, float *host_dst,
                                  void *d_src, float *d_dst, int64_t ne0, int64_t nrows,
                                  uint64_t rb, uint64_t sb, uint64_t db)
{
    LLM_CUDA_TRY(cudaMemcpy(d_src, host_src, (size_t)sb, cudaMemcpyHostToDevice));
    LLM_TRY(llm_dequant_cuda(t, d_src, d_dst, ne0, nrows, rb, NULL));
    LLM_CUDA_TRY(cudaDeviceSynchronize()); /* an error inside the kernel surfaces here */
    LLM_CUDA_TRY(cudaMemcpy(host_dst, d_dst, (size_t)db, cudaMemcpyDeviceToHost));
    return LLM_OK;
}

llm_status llm_gpu_dequantize(enum llm_type t, const void *host_src, float *host_dst, int64_t ne0,
                              int64_t nrows)
{
    uint64_t rb, sb, db;
    LLM_TRY(dequant_sizes(t, ne0, nrows, &rb, &sb, &db));
    if (nrows == 0)
        return LLM_OK;
    if (!host_src || !host_dst)
        return llm_error_set(LLM_E_INVALID, "gpu dequantize: NULL buffer");
    void *d_src = NULL, *d_dst = NULL;
    llm_status s = llm_gpu_alloc(&d_src, (size_t)sb);
    if (s == LLM_OK)
        s = llm_gpu_alloc(&d_dst, (size_t)db);
    if (s == LLM_OK)
        s = dequant_through(t, host_src, host_dst, d_src, d_dst, ne0, nrows, rb, sb, db);
    llm_gpu_free(d_src);
    llm_gpu_free(d_dst);
    return s;
}
