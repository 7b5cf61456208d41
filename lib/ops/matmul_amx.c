/* matmul_amx.c: the float product in bf16 on the CPU's matrix units (Intel
 * AMX, Sapphire Rapids and later), for the products that tolerate bf16's 8
 * bits of mantissa: the quantizer's calibration (its forward passes and
 * Hessians), which GPTQ's and AWQ's references run in bf16 or fp16 on a
 * GPU. A tile multiply-add (TDPBF16PS) does 16 x 16 x 32 multiply-adds, so
 * on 2 cores this runs several times the float FMA GEMM.
 *
 * Never used for inference: there a token's bits must not depend on the
 * number of tokens in the step (decode's matvec is float), see matmul.c.
 *
 * Layout of one call (thread), rows [r0, r1) of W and all of X:
 *   Xp (np, kp) bf16, row-major: X rounded, zero-padded to np = n rounded
 *      up to 32 tokens and kp = ne0 rounded up to 32. An A tile is 16
 *      tokens x 32 k of it, read in place with stride kp.
 *   Wp: the rows in groups of 16 (zero rows pad the last group to an even
 *      number of groups), each group kp/32 B tiles of 16 x 64 bytes in the
 *      "VNNI" order the instruction takes: tile row j holds, for each of
 *      the 16 rows r, the pair (W[r][2j], W[r][2j+1]).
 * A step of the loop is 32 tokens x 32 rows: two A tiles, two B tiles,
 * four accumulator tiles (tmm0-3 C, tmm4-5 A, tmm6-7 B). */
#include <stdint.h>
#include <string.h>

#include "../common/alloc.h"
#include "matmul.h"
#include "matmul_impl.h"

#if defined(__x86_64__) && defined(__linux__)
#include <cpuid.h>
#include <immintrin.h> /* before the target switch: clang's intrinsics carry their own */
#include <sys/syscall.h>
#include <unistd.h>

#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18

/* -1: not yet asked */
static _Atomic int amx_state = -1;

/* CPUID leaf 7: EDX bit 24 AMX-TILE, bit 22 AMX-BF16; EBX bit 16
 * AVX512F, bit 30 AVX512BW; EAX of subleaf 1 bit 5 AVX512-BF16 (the
 * conversions). Linux gives a process the tiles' 8 KiB of state only when
 * it asks (arch_prctl), once for all its threads. */
int llm_amx_ok(void)
{
    int v = amx_state;
    if (v < 0) {
        unsigned a, b, c, d, a1, b1, c1, d1;
        v = __get_cpuid_count(7, 0, &a, &b, &c, &d) &&
            __get_cpuid_count(7, 1, &a1, &b1, &c1, &d1) && (d & (1u << 24)) && (d & (1u << 22)) &&
            (b & (1u << 16)) && (b & (1u << 30)) && (a1 & (1u << 5)) &&
            syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
        amx_state = v;
    }
    /* LLM_ISA=avx2 or scalar (llm_matmul_isa) rules the units out too */
    return v && llm_matmul_isa() == LLM_ISA_AVX512;
}

#if defined(__clang__)
#pragma clang attribute push(                                                       \
    __attribute__((target("avx512f,avx512bw,avx512bf16,amx-tile,amx-bf16"))), \
    apply_to = function)
#else
#pragma GCC target("avx512f,avx512bw,avx512bf16,amx-tile,amx-bf16")
#endif

struct tilecfg {
    uint8_t palette, start_row;
    uint8_t reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
};

/* Store accumulator tile `tile` (16 tokens x 16 rows) to Y at token t,
 * row r, keeping only the nt tokens and nr rows that exist. */
#define STORE_C(tile, t, r, nt, nr)                                                 \
    do {                                                                            \
        if ((nt) >= 16 && (nr) >= 16) {                                             \
            _tile_stored(tile, Y + (t) * ldy + (r), ldy * (int64_t)sizeof(float)); \
        } else if ((nt) > 0 && (nr) > 0) {                                          \
            _tile_stored(tile, cbuf, 64);                                           \
            for (int64_t i_ = 0; i_ < (nt) && i_ < 16; i_++)                        \
                memcpy(Y + ((t) + i_) * ldy + (r), cbuf + i_ * 16,                  \
                       (size_t)((nr) < 16 ? (nr) : 16) * sizeof(float));            \
        }                                                                           \
    } while (0)

/* 16 x 16 dwords: out[j] lane r = a[r] lane j (unpacks within 128-bit
 * lanes, then the 4 x 4 transpose of the lanes) */
static void transpose16(__m512i a[16])
{
    __m512i b[16], c[16];
    for (int i = 0; i < 16; i += 2) {
        b[i] = _mm512_unpacklo_epi32(a[i], a[i + 1]);
        b[i + 1] = _mm512_unpackhi_epi32(a[i], a[i + 1]);
    }
    /* c[4g + m] lane k: rows 4g..4g+3 at column 4k + m */
    for (int g = 0; g < 16; g += 4) {
        c[g] = _mm512_unpacklo_epi64(b[g], b[g + 2]);
        c[g + 1] = _mm512_unpackhi_epi64(b[g], b[g + 2]);
        c[g + 2] = _mm512_unpacklo_epi64(b[g + 1], b[g + 3]);
        c[g + 3] = _mm512_unpackhi_epi64(b[g + 1], b[g + 3]);
    }
    for (int m = 0; m < 4; m++) {
        const __m512i d0 = _mm512_shuffle_i32x4(c[m], c[4 + m], 0x88);
        const __m512i d1 = _mm512_shuffle_i32x4(c[m], c[4 + m], 0xdd);
        const __m512i d2 = _mm512_shuffle_i32x4(c[8 + m], c[12 + m], 0x88);
        const __m512i d3 = _mm512_shuffle_i32x4(c[8 + m], c[12 + m], 0xdd);
        a[m] = _mm512_shuffle_i32x4(d0, d2, 0x88);
        a[4 + m] = _mm512_shuffle_i32x4(d1, d3, 0x88);
        a[8 + m] = _mm512_shuffle_i32x4(d0, d2, 0xdd);
        a[12 + m] = _mm512_shuffle_i32x4(d1, d3, 0xdd);
    }
}

/* 32 elements of src from k0 (of k) rounded to bf16, zeros past k */
static __m512i bf16x32(const float *src, int64_t k0, int64_t k)
{
    if (k0 + 32 <= k)
        return (__m512i)_mm512_cvtne2ps_pbh(_mm512_loadu_ps(src + k0 + 16),
                                            _mm512_loadu_ps(src + k0));
    const int64_t left = k - k0;
    const __mmask16 m0 = (__mmask16)(left >= 16 ? 0xffff : left <= 0 ? 0 : (1u << left) - 1);
    const __mmask16 m1 = (__mmask16)(left <= 16 ? 0 : (1u << (left - 16)) - 1);
    return (__m512i)_mm512_cvtne2ps_pbh(_mm512_maskz_loadu_ps(m1, src + k0 + 16),
                                        _mm512_maskz_loadu_ps(m0, src + k0));
}

void llm_bf16_pack_x(const float *X, int64_t nb, int64_t ne0, uint16_t *Xp)
{
    const int64_t kp = (ne0 + 31) & ~(int64_t)31, np = (nb + 31) & ~(int64_t)31;
    for (int64_t t = 0; t < np; t++)
        for (int64_t k = 0; k < kp; k += 32)
            _mm512_storeu_si512((void *)(Xp + t * kp + k),
                                t < nb ? bf16x32(X + t * ne0, k, ne0) : _mm512_setzero_si512());
}

/* Wp (ng groups of nc B tiles) = rows [r0, r0 + nr) of W, zero rows after */
static void pack_w(const float *W, int64_t ne0, int64_t r0, int64_t nr, int64_t ng, int64_t nc,
                   uint16_t *Wp)
{
    __m512i a[16];
    for (int64_t g = 0; g < ng; g++)
        for (int64_t c = 0; c < nc; c++) {
            for (int r = 0; r < 16; r++)
                a[r] = g * 16 + r < nr ? bf16x32(W + (r0 + g * 16 + r) * ne0, c * 32, ne0)
                                       : _mm512_setzero_si512();
            transpose16(a);
            uint16_t *tile = Wp + (g * nc + c) * 512;
            for (int j = 0; j < 16; j++)
                _mm512_storeu_si512((void *)(tile + j * 32), a[j]);
        }
}

llm_status llm_matmul_bf16_packed(const float *W, const uint16_t *Xp, float *Y, int64_t ne0,
                                  int64_t nb, int64_t ldy, int64_t r0, int64_t r1)
{
    if (!llm_amx_ok())
        return llm_error_set(LLM_E_UNSUPPORTED, "matmul: no AMX-BF16 on this CPU");
    if (r0 >= r1 || nb <= 0)
        return LLM_OK;
    const int64_t kp = (ne0 + 31) & ~(int64_t)31, np = (nb + 31) & ~(int64_t)31;
    const int64_t nr = r1 - r0, ng = ((nr + 31) & ~(int64_t)31) / 16, nc = kp / 32;
    uint16_t *Wp = llm_malloc((size_t)(ng * 16 * kp) * sizeof(uint16_t));
    if (!Wp)
        return LLM_E_NOMEM;
    pack_w(W, ne0, r0, nr, ng, nc, Wp);

    struct tilecfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int i = 0; i < 8; i++)
        cfg.rows[i] = 16, cfg.colsb[i] = 64;
    _tile_loadconfig(&cfg);
    float cbuf[256];
    const int64_t xs = kp * (int64_t)sizeof(uint16_t);
    for (int64_t g = 0; g < ng; g += 2) {
        const uint16_t *B0 = Wp + g * nc * 512, *B1 = B0 + nc * 512;
        const int64_t ra = g * 16, rb = ra + 16;
        for (int64_t t = 0; t < np; t += 32) {
            const uint16_t *A0 = Xp + t * kp, *A1 = A0 + 16 * kp;
            _tile_zero(0);
            _tile_zero(1);
            _tile_zero(2);
            _tile_zero(3);
            for (int64_t c = 0; c < nc; c++) {
                _tile_loadd(4, A0 + c * 32, xs);
                _tile_loadd(5, A1 + c * 32, xs);
                _tile_loadd(6, B0 + c * 512, 64);
                _tile_loadd(7, B1 + c * 512, 64);
                _tile_dpbf16ps(0, 4, 6);
                _tile_dpbf16ps(1, 4, 7);
                _tile_dpbf16ps(2, 5, 6);
                _tile_dpbf16ps(3, 5, 7);
            }
            STORE_C(0, t, r0 + ra, nb - t, nr - ra);
            STORE_C(1, t, r0 + rb, nb - t, nr - rb);
            STORE_C(2, t + 16, r0 + ra, nb - t - 16, nr - ra);
            STORE_C(3, t + 16, r0 + rb, nb - t - 16, nr - rb);
        }
    }
    _tile_release();
    llm_free(Wp);
    return LLM_OK;
}

llm_status llm_matmul_bf16(const float *W, const float *X, float *Y, int64_t ne0, int64_t nb,
                           int64_t ldy, int64_t r0, int64_t r1)
{
    if (!llm_amx_ok())
        return llm_error_set(LLM_E_UNSUPPORTED, "matmul: no AMX-BF16 on this CPU");
    uint16_t *Xp = llm_malloc(llm_bf16_x_bytes(nb, ne0));
    if (!Xp)
        return LLM_E_NOMEM;
    llm_bf16_pack_x(X, nb, ne0, Xp);
    llm_status s = llm_matmul_bf16_packed(W, Xp, Y, ne0, nb, ldy, r0, r1);
    llm_free(Xp);
    return s;
}

#if defined(__clang__)
#pragma clang attribute pop
#endif

#else

int llm_amx_ok(void)
{
    return 0;
}

llm_status llm_matmul_bf16(const float *W, const float *X, float *Y, int64_t ne0, int64_t nb,
                           int64_t ldy, int64_t r0, int64_t r1)
{
    (void)W, (void)X, (void)Y, (void)ne0, (void)nb, (void)ldy, (void)r0, (void)r1;
    return llm_error_set(LLM_E_UNSUPPORTED, "matmul: no AMX on this build");
}

void llm_bf16_pack_x(const float *X, int64_t nb, int64_t ne0, uint16_t *Xp)
{
    (void)X, (void)nb, (void)ne0, (void)Xp;
}

llm_status llm_matmul_bf16_packed(const float *W, const uint16_t *Xp, float *Y, int64_t ne0,
                                  int64_t nb, int64_t ldy, int64_t r0, int64_t r1)
{
    (void)W, (void)Xp, (void)Y, (void)ne0, (void)nb, (void)ldy, (void)r0, (void)r1;
    return llm_error_set(LLM_E_UNSUPPORTED, "matmul: no AMX on this build");
}

#endif

size_t llm_bf16_x_bytes(int64_t nb, int64_t ne0)
{
    return (size_t)(((nb + 31) & ~(int64_t)31) * ((ne0 + 31) & ~(int64_t)31)) * sizeof(uint16_t);
}

/* bf16 of x, to nearest even (finite x) */
static float bf16_round(float x)
{
    uint32_t u;
    memcpy(&u, &x, 4);
    u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
    memcpy(&x, &u, 4);
    return x;
}

llm_status llm_matmul_bf16_ref(const float *W, const float *X, float *Y, int64_t ne0, int64_t nb,
                               int64_t ldy, int64_t r0, int64_t r1)
{
    for (int64_t t = 0; t < nb; t++)
        for (int64_t r = r0; r < r1; r++) {
            float s = 0.0f;
            for (int64_t k = 0; k < ne0; k++)
                s += bf16_round(W[r * ne0 + k]) * bf16_round(X[t * ne0 + k]);
            Y[t * ldy + r] = s;
        }
    return LLM_OK;
}
