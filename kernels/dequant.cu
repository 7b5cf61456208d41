/* dequant.cu: dequantize rows of any llm_type to float32 on the GPU.
 *
 * The CPU reference is llm_dequantize_row (lib/quant/quant.c); this kernel
 * reproduces it bit for bit: the same byte-wise reads (rows may start at
 * any address), the same exact fp16/fp8 decodes, and the same float
 * operations in the same order, written as __fmul_rn/__fadd_rn so that
 * nvcc cannot contract q*d + m into an fma (the CPU rounds twice).
 *
 * One kernel template per layout family; one thread block per row
 * (grid-stride over rows), its threads striding over the row's elements,
 * so consecutive threads read consecutive bytes and write consecutive floats.
 */
#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels.h"

extern "C" {
}

// ----------------------------------------------------------------------------
// layouts

enum dq_kind {
    DQ_F32, DQ_F16, DQ_BF16, DQ_SYM8, DQ_ZP8, DQ_SYM4, DQ_ZP4, DQ_NF4, DQ_NF4DQ, DQ_FP8, DQ_ZP3,
    /* the GGUF layouts (quant/kquants.h), one kind each */
    DQ_Q5_0, DQ_Q5_1, DQ_Q2_K, DQ_Q3_K, DQ_Q4_K, DQ_Q5_K, DQ_Q6_K, DQ_Q8_K, DQ_IQ4_NL, DQ_IQ4_XS
};

/* The element reads below take d at byte 0 of a block, m at byte 2 and the
 * codes at the end; these tie that to blocks.h. */
static_assert(offsetof(struct llm_block_q8_0, qs) == sizeof(struct llm_block_q8_0) - 32, "q8_0");
static_assert(offsetof(struct llm_block_q8z_g64, m) == 2 &&
              offsetof(struct llm_block_q8z_g64, qs) == sizeof(struct llm_block_q8z_g64) - 64, "q8z");
static_assert(offsetof(struct llm_block_q4_0, qs) == sizeof(struct llm_block_q4_0) - 16, "q4_0");
static_assert(offsetof(struct llm_block_q4_1, m) == 2 &&
              offsetof(struct llm_block_q4_1, qs) == sizeof(struct llm_block_q4_1) - 16, "q4_1");
static_assert(offsetof(struct llm_block_q4z_g128, qs) == sizeof(struct llm_block_q4z_g128) - 64, "q4z");
static_assert(offsetof(struct llm_block_q3z_g128, m) == 2 &&
              offsetof(struct llm_block_q3z_g128, qs) == sizeof(struct llm_block_q3z_g128) - 48, "q3z");
static_assert(offsetof(struct llm_block_nf4, qs) == sizeof(struct llm_block_nf4) - 32, "nf4");
static_assert(offsetof(struct llm_block_nf4_dq, qs) == sizeof(struct llm_block_nf4_dq) - 32, "nf4_dq");

static __device__ const float nf4_values[16] = LLM_NF4_VALUES;
static __device__ const int8_t iq4_values[16] = LLM_IQ4NL_VALUES;

// ----------------------------------------------------------------------------
// exact scalar decodes (the same bit manipulations as lib/common/fp16.h and
// llm_fp8_e4m3_to_fp32)

static __device__ __forceinline__ uint32_t ld_u16(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8;
}

static __device__ __forceinline__ float ld_f32(const uint8_t *p)
{
    return __uint_as_float((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                           (uint32_t)p[3] << 24);
}

static __device__ __forceinline__ float half_to_f32(uint32_t h)
{
    uint32_t sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
    if (exp == 0x1f)
        return __uint_as_float(sign | 0x7f800000u | (man << 13));
    if (exp == 0) { /* subnormal: man * 2^-24, exact */
        float f = __fmul_rn((float)man, 1.0f / 16777216.0f);
        return sign ? -f : f;
    }
    return __uint_as_float(sign | ((exp + 112) << 23) | (man << 13));
}

static __device__ __forceinline__ float fp8_to_f32(uint32_t v)
{
    uint32_t sign = (v & 0x80u) << 24, exp = (v >> 3) & 15, man = v & 7;
    if (exp == 15 && man == 7)
        return __uint_as_float(sign | 0x7fc00000u);
    if (exp == 0) { /* subnormal: man * 2^-9 */
        float f = __fmul_rn((float)man, 1.0f / 512.0f);
        return sign ? -f : f;
    }
    return __uint_as_float(sign | ((exp + 120) << 23) | (man << 20));
}

/* code j of a 4-bit block of G elements: low nibbles hold the first half */
template <int G>
static __device__ __forceinline__ int nibble(const uint8_t *qs, int j)
{
    return j < G / 2 ? qs[j] & 15 : qs[j - G / 2] >> 4;
}

/* code j of a 3-bit block: sub-blocks of 32, low bits then high bits
 * (blocks.h; llm_q3_code) */
static __device__ __forceinline__ int code3(const uint8_t *qs, int j)
{
    const uint8_t *sub = qs + 12 * (j / 32);
    const int i = j % 32;
    return ((sub[i & 7] >> (2 * (i >> 3))) & 3) | (((sub[8 + (i >> 3)] >> (i & 7)) & 1) << 2);
}

/* Element j of a block of a GGUF type: the canonical form of
 * llm_kq_unpack (lib/quant/kquants.c), s * c (+ m when the type has
 * minimums), each product and sum rounded as ggml's decoder rounds it. */
template <int KIND>
static __device__ __forceinline__ float gguf_one(const uint8_t *b, int j)
{
    float s, m = 0.0f;
    int c;
    if constexpr (KIND == DQ_Q5_0 || KIND == DQ_Q5_1) {
        const int zp = KIND == DQ_Q5_1;
        const uint8_t *qh = b + (zp ? 4 : 2), *qs = qh + 4;
        const uint32_t h = (uint32_t)qh[0] | (uint32_t)qh[1] << 8 | (uint32_t)qh[2] << 16 |
                           (uint32_t)qh[3] << 24;
        c = (j < 16 ? qs[j] & 0xF : qs[j - 16] >> 4) | (int)((h >> j) & 1) << 4;
        c -= zp ? 0 : 16;
        s = half_to_f32(ld_u16(b));
        if (zp)
            return __fadd_rn(__fmul_rn((float)c, s), half_to_f32(ld_u16(b + 2)));
        return __fmul_rn((float)c, s);
    } else if constexpr (KIND == DQ_Q2_K) {
        const int sc = b[j / 16];
        s = __fmul_rn(half_to_f32(ld_u16(b + 80)), (float)(sc & 0xF));
        m = -__fmul_rn(half_to_f32(ld_u16(b + 82)), (float)(sc >> 4));
        c = (b[16 + 32 * (j / 128) + j % 32] >> (2 * ((j / 32) % 4))) & 3;
        return __fadd_rn(__fmul_rn(s, (float)c), m);
    } else if constexpr (KIND == DQ_Q3_K) {
        const uint8_t *sc = b + 96;
        const int k = j / 16, low4 = k < 8 ? sc[k] & 0xF : sc[k - 8] >> 4;
        const int high2 = (sc[8 + k % 4] >> (2 * (k / 4))) & 3;
        s = __fmul_rn(half_to_f32(ld_u16(b + 108)), (float)((low4 | high2 << 4) - 32));
        const int v = (b[32 + 32 * (j / 128) + j % 32] >> (2 * ((j / 32) % 4))) & 3;
        c = v - ((b[j % 32] >> (j / 32)) & 1 ? 0 : 4);
        return __fmul_rn(s, (float)c);
    } else if constexpr (KIND == DQ_Q4_K || KIND == DQ_Q5_K) {
        const int k = j / 32, l = j % 32;
        const uint8_t *q = b + 4;
        int sc, mn;
        if (k < 4) {
            sc = q[k] & 63;
            mn = q[k + 4] & 63;
        } else {
            sc = (q[k + 4] & 0xF) | ((q[k - 4] >> 6) << 4);
            mn = (q[k + 4] >> 4) | ((q[k] >> 6) << 4);
        }
        s = __fmul_rn(half_to_f32(ld_u16(b)), (float)sc);
        m = -__fmul_rn(half_to_f32(ld_u16(b + 2)), (float)mn);
        const uint8_t *ql = b + (KIND == DQ_Q5_K ? 48 : 16);
        c = k & 1 ? ql[32 * (k / 2) + l] >> 4 : ql[32 * (k / 2) + l] & 0xF;
        if constexpr (KIND == DQ_Q5_K)
            c |= ((b[16 + l] >> k) & 1) << 4;
        return __fadd_rn(__fmul_rn(s, (float)c), m);
    } else if constexpr (KIND == DQ_Q6_K) {
        const int n = j / 128, q4 = (j / 32) % 4, l = j % 32;
        s = __fmul_rn(half_to_f32(ld_u16(b + 208)), (float)(int8_t)b[192 + j / 16]);
        const uint8_t lo = b[64 * n + 32 * (q4 & 1) + l];
        c = ((q4 < 2 ? lo & 0xF : lo >> 4) | ((b[128 + 32 * n + l] >> (2 * q4)) & 3) << 4) - 32;
        return __fmul_rn(s, (float)c);
    } else if constexpr (KIND == DQ_Q8_K) {
        return __fmul_rn(ld_f32(b), (float)(int8_t)b[4 + j]);
    } else if constexpr (KIND == DQ_IQ4_NL) {
        c = iq4_values[j < 16 ? b[2 + j] & 0xF : b[2 + j - 16] >> 4];
        return __fmul_rn(half_to_f32(ld_u16(b)), (float)c);
    } else { /* DQ_IQ4_XS */
        const int k = j / 32, l = j % 32;
        const int ls = ((b[4 + k / 2] >> 4 * (k % 2)) & 0xF) | ((int)(ld_u16(b + 2) >> 2 * k) & 3) << 4;
        s = __fmul_rn(half_to_f32(ld_u16(b)), (float)(ls - 32));
        const uint8_t *qs = b + 8 + 16 * k;
        c = iq4_values[l < 16 ? qs[l] & 0xF : qs[l - 16] >> 4];
        return __fmul_rn(s, (float)c);
    }
}

// ----------------------------------------------------------------------------
// CUDA kernels

/* Element i of a row. G: elements per block (1 for byte-per-element types),
 * BB: bytes per block, HDR: row header bytes (float32 scales). */
template <int KIND, int G, int BB, int HDR>
static __device__ __forceinline__ float dequant_one(const uint8_t *row, int64_t i, const float *lut)
{
    if constexpr (KIND == DQ_F32) {
        return ld_f32(row + 4 * i);
    } else if constexpr (KIND == DQ_F16) {
        return half_to_f32(ld_u16(row + 2 * i));
    } else if constexpr (KIND == DQ_BF16) {
        return __uint_as_float(ld_u16(row + 2 * i) << 16);
    } else if constexpr (KIND == DQ_FP8) {
        return __fmul_rn(fp8_to_f32(row[HDR + i]), ld_f32(row));
    } else if constexpr (KIND >= DQ_Q5_0) {
        return gguf_one<KIND>(row + (i / G) * BB, (int)(i % G));
    } else {
        const uint8_t *blk = row + HDR + (i / G) * BB;
        const int j = (int)(i % G);
        if constexpr (KIND == DQ_SYM8 || KIND == DQ_SYM4) {
            float d;
            if constexpr (HDR > 0)
                d = ld_f32(row);
            else
                d = half_to_f32(ld_u16(blk));
            int q;
            if constexpr (KIND == DQ_SYM8)
                q = (int8_t)blk[BB - G + j];
            else
                q = nibble<G>(blk + BB - G / 2, j) - 8;
            return __fmul_rn((float)q, d);
        } else if constexpr (KIND == DQ_ZP8 || KIND == DQ_ZP4 || KIND == DQ_ZP3) {
            float d, m;
            if constexpr (HDR > 0) {
                d = ld_f32(row);
                m = ld_f32(row + 4);
            } else {
                d = half_to_f32(ld_u16(blk));
                m = half_to_f32(ld_u16(blk + 2));
            }
            int q;
            if constexpr (KIND == DQ_ZP8)
                q = blk[BB - G + j];
            else if constexpr (KIND == DQ_ZP3)
                q = code3(blk + BB - 3 * G / 8, j);
            else
                q = nibble<G>(blk + BB - G / 2, j);
            return __fadd_rn(__fmul_rn((float)q, d), m);
        } else if constexpr (KIND == DQ_NF4) {
            return __fmul_rn(lut[nibble<G>(blk + BB - G / 2, j)], half_to_f32(ld_u16(blk)));
        } else { /* DQ_NF4DQ: fp8 block scale times the float32 row scale */
            float d = __fmul_rn(fp8_to_f32(blk[0]), ld_f32(row));
            return __fmul_rn(lut[nibble<G>(blk + BB - G / 2, j)], d);
        }
    }
}

template <int KIND, int G, int BB, int HDR>
static __global__ void dequant_kernel(const uint8_t *__restrict__ src, float *__restrict__ dst,
                                      int64_t ne0, int64_t nrows, int64_t row_bytes)
{
    __shared__ float lut[16]; /* the code book, for divergent lookups */
    if constexpr (KIND == DQ_NF4 || KIND == DQ_NF4DQ) {
        if (threadIdx.x < 16)
            lut[threadIdx.x] = nf4_values[threadIdx.x];
        __syncthreads();
    }
    for (int64_t r = blockIdx.x; r < nrows; r += gridDim.x) {
        const uint8_t *row = src + r * row_bytes;
        float *y = dst + r * ne0;
        for (int64_t i = threadIdx.x; i < ne0; i += blockDim.x)
            y[i] = dequant_one<KIND, G, BB, HDR>(row, i, lut);
    }
}

// ----------------------------------------------------------------------------
// launchers

template <int KIND, int G, int BB, int HDR>
static llm_status dequant_launch(enum llm_type t, const void *src, float *dst, int64_t ne0,
                                 int64_t nrows, uint64_t row_bytes, cudaStream_t stream)
{
    /* the caller's row size (types.c) must be the layout compiled here */
    const uint64_t want = (uint64_t)HDR + (uint64_t)((ne0 + G - 1) / G) * (uint64_t)BB;
    if (row_bytes != want)
        return llm_error_set(LLM_E_INVALID,
                             "dequant_cuda: type %u row of %lld elements given as %llu bytes, the "
                             "kernel layout has %llu", (unsigned)t, (long long)ne0,
                             (unsigned long long)row_bytes, (unsigned long long)want);
    /* a warp at least, 256 threads at most: short rows waste fewer lanes */
    const int threads = ne0 >= 256 ? 256 : (int)((ne0 + 31) / 32 * 32);
    const int64_t max_blocks = 65535 * 16; /* grid-stride past this */
    const unsigned blocks = (unsigned)(nrows < max_blocks ? nrows : max_blocks);
    dequant_kernel<KIND, G, BB, HDR><<<blocks, threads, 0, stream>>>(
        (const uint8_t *)src, dst, ne0, nrows, (int64_t)row_bytes);
    LLM_CUDA_TRY(cudaGetLastError());
    return LLM_OK;
}

// ----------------------------------------------------------------------------
// C entry point

#define BYTES(s) ((int)sizeof(struct s))

extern "C" llm_status llm_dequant_cuda(enum llm_type t, const void *src, float *dst, int64_t ne0,
                                       int64_t nrows, uint64_t row_bytes, cudaStream_t stream)
{
    if (ne0 <= 0 || nrows < 0)
        return llm_error_set(LLM_E_INVALID, "dequant_cuda: bad shape %lld x %lld", (long long)nrows,
                             (long long)ne0);
    if (nrows == 0)
        return LLM_OK;
    if (!src || !dst)
        return llm_error_set(LLM_E_INVALID, "dequant_cuda: NULL device pointer");
    if (row_bytes == 0 || (uint64_t)nrows > UINT64_MAX / row_bytes || (uint64_t)ne0 > (uint64_t)INT64_MAX / (uint64_t)nrows)
        return llm_error_set(LLM_E_INVALID, "dequant_cuda: %lld x %lld overflows", (long long)nrows,
                             (long long)ne0);
#define L(K, G, BB, HDR) dequant_launch<K, G, BB, HDR>(t, src, dst, ne0, nrows, row_bytes, stream)
    switch (t) {
    case LLM_TYPE_F32: return L(DQ_F32, 1, 4, 0);
    case LLM_TYPE_F16: return L(DQ_F16, 1, 2, 0);
    case LLM_TYPE_BF16: return L(DQ_BF16, 1, 2, 0);
    case LLM_TYPE_Q8_0: return L(DQ_SYM8, 32, BYTES(llm_block_q8_0), 0);
    case LLM_TYPE_Q8_G64: return L(DQ_SYM8, 64, BYTES(llm_block_q8_g64), 0);
    case LLM_TYPE_Q8_G128: return L(DQ_SYM8, 128, BYTES(llm_block_q8_g128), 0);
    case LLM_TYPE_Q8_CH: return L(DQ_SYM8, 1, 1, 4);
    case LLM_TYPE_Q8Z_G32: return L(DQ_ZP8, 32, BYTES(llm_block_q8z_g32), 0);
    case LLM_TYPE_Q8Z_G64: return L(DQ_ZP8, 64, BYTES(llm_block_q8z_g64), 0);
    case LLM_TYPE_Q8Z_G128: return L(DQ_ZP8, 128, BYTES(llm_block_q8z_g128), 0);
    case LLM_TYPE_Q8Z_CH: return L(DQ_ZP8, 1, 1, 8);
    case LLM_TYPE_Q4_0: return L(DQ_SYM4, 32, BYTES(llm_block_q4_0), 0);
    case LLM_TYPE_Q4_G64: return L(DQ_SYM4, 64, BYTES(llm_block_q4_g64), 0);
    case LLM_TYPE_Q4_G128: return L(DQ_SYM4, 128, BYTES(llm_block_q4_g128), 0);
    case LLM_TYPE_Q4_CH: return L(DQ_SYM4, 32, BYTES(llm_block_q4_ch), 4);
    case LLM_TYPE_Q4_1: return L(DQ_ZP4, 32, BYTES(llm_block_q4_1), 0);
    case LLM_TYPE_Q4Z_G64: return L(DQ_ZP4, 64, BYTES(llm_block_q4z_g64), 0);
    case LLM_TYPE_Q4Z_G128: return L(DQ_ZP4, 128, BYTES(llm_block_q4z_g128), 0);
    case LLM_TYPE_Q4Z_CH: return L(DQ_ZP4, 32, BYTES(llm_block_q4_ch), 8);
    case LLM_TYPE_NF4: return L(DQ_NF4, 64, BYTES(llm_block_nf4), 0);
    case LLM_TYPE_NF4_DQ: return L(DQ_NF4DQ, 64, BYTES(llm_block_nf4_dq), 4);
    case LLM_TYPE_FP8_E4M3: return L(DQ_FP8, 1, 1, 4);
    case LLM_TYPE_Q3Z_G32: return L(DQ_ZP3, 32, BYTES(llm_block_q3z_g32), 0);
    case LLM_TYPE_Q3Z_G64: return L(DQ_ZP3, 64, BYTES(llm_block_q3z_g64), 0);
    case LLM_TYPE_Q3Z_G128: return L(DQ_ZP3, 128, BYTES(llm_block_q3z_g128), 0);
    case LLM_TYPE_Q3Z_CH: return L(DQ_ZP3, 32, BYTES(llm_block_q3_ch), 8);
    case LLM_TYPE_Q5_0: return L(DQ_Q5_0, 32, BYTES(llm_block_q5_0), 0);
    case LLM_TYPE_Q5_1: return L(DQ_Q5_1, 32, BYTES(llm_block_q5_1), 0);
    case LLM_TYPE_Q2_K: return L(DQ_Q2_K, 256, BYTES(llm_block_q2_k), 0);
    case LLM_TYPE_Q3_K: return L(DQ_Q3_K, 256, BYTES(llm_block_q3_k), 0);
    case LLM_TYPE_Q4_K: return L(DQ_Q4_K, 256, BYTES(llm_block_q4_k), 0);
    case LLM_TYPE_Q5_K: return L(DQ_Q5_K, 256, BYTES(llm_block_q5_k), 0);
    case LLM_TYPE_Q6_K: return L(DQ_Q6_K, 256, BYTES(llm_block_q6_k), 0);
    case LLM_TYPE_Q8_K: return L(DQ_Q8_K, 256, BYTES(llm_block_q8_k), 0);
    case LLM_TYPE_IQ4_NL: return L(DQ_IQ4_NL, 32, BYTES(llm_block_iq4_nl), 0);
    case LLM_TYPE_IQ4_XS: return L(DQ_IQ4_XS, 256, BYTES(llm_block_iq4_xs), 0);
    default: break;
    }
#undef L
    return llm_error_set(LLM_E_INVALID, "dequant_cuda: type %u is not a weight type", (unsigned)t);
}
