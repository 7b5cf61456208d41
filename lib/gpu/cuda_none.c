/* cuda_none.c: the gpu.h functions of a build without CUDA (CUDA=0): each
 * one fails with LLM_E_CUDA, so that callers need no #ifdef. */
#include "gpu.h"

#define NO_CUDA() llm_error_set(LLM_E_CUDA, "built without CUDA")

llm_status llm_gpu_available(int *n_devices)
{
    if (n_devices)
        *n_devices = 0;
    return NO_CUDA();
}

llm_status llm_gpu_device_name(int dev, char *buf, size_t n)
{
    (void)dev;
    if (buf && n)
        buf[0] = 0;
    return NO_CUDA();
}

llm_status llm_gpu_dequantize(enum llm_type t, const void *host_src, float *host_dst, int64_t ne0,
                              int64_t nrows)
{
    (void)t, (void)host_src, (void)host_dst, (void)ne0, (void)nrows;
    return NO_CUDA();
}

llm_status llm_gpu_dequantize_dev(enum llm_type t, const void *d_src, float *d_dst, int64_t ne0,
                                  int64_t nrows, void *stream)
{
    (void)t, (void)d_src, (void)d_dst, (void)ne0, (void)nrows, (void)stream;
    return NO_CUDA();
}

llm_status llm_gpu_alloc(void **d_ptr, size_t bytes)
{
    (void)bytes;
    if (d_ptr)
        *d_ptr = NULL;
    return NO_CUDA();
}

void llm_gpu_free(void *d_ptr)
{
    (void)d_ptr;
}

llm_status llm_gpu_upload(void *d_dst, const void *host_src, size_t bytes)
{
    (void)d_dst, (void)host_src, (void)bytes;
    return NO_CUDA();
}

llm_status llm_gpu_download(void *host_dst, const void *d_src, size_t bytes)
{
    (void)host_dst, (void)d_src, (void)bytes;
    return NO_CUDA();
}

llm_status llm_gpu_sync(void)
{
    return NO_CUDA();
}
