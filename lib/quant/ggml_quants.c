/* ggml_quants.c: GGML type table and row decoders (formats.md §1.5-1.6).
 *
 * The arithmetic follows ggml's dequantize_row_* step for step (d*sc first,
 * then times q, minus dmin*m), so the floats we produce are the ones
 * llama.cpp would produce, bit for bit. */
#include "ggml_quants.h"

#include <string.h>

#include "../common/alloc.h"
#include "../common/fp16.h"

/* ------------------------------------------------------------------------ */
/* type table */

#define T(id, nm, blck, bytes, dec) [id] = { nm, blck, bytes, dec }

static const struct llm_ggml_type_info table[LLM_GGML_TYPE_COUNT_] = {
    T(LLM_GGML_F32, "F32", 1, 4, 1),
    T(LLM_GGML_F16, "F16", 1, 2, 1),
    T(LLM_GGML_Q4_0, "Q4_0", 32, 18, 1),
    T(LLM_GGML_Q4_1, "Q4_1", 32, 20, 1),
    T(LLM_GGML_Q5_0, "Q5_0", 32, 22, 1),
    T(LLM_GGML_Q5_1, "Q5_1", 32, 24, 1),
    T(LLM_GGML_Q8_0, "Q8_0", 32, 34, 1),
    T(LLM_GGML_Q8_1, "Q8_1", 32, 36, 1),
    T(LLM_GGML_Q2_K, "Q2_K", 256, 84, 1),
    T(LLM_GGML_Q3_K, "Q3_K", 256, 110, 1),
    T(LLM_GGML_Q4_K, "Q4_K", 256, 144, 1),
    T(LLM_GGML_Q5_K, "Q5_K", 256, 176, 1),
    T(LLM_GGML_Q6_K, "Q6_K", 256, 210, 1),
    T(LLM_GGML_Q8_K, "Q8_K", 256, 292, 1),
    T(LLM_GGML_IQ2_XXS, "IQ2_XXS", 256, 66, 0),
    T(LLM_GGML_IQ2_XS, "IQ2_XS", 256, 74, 0),
    T(LLM_GGML_IQ3_XXS, "IQ3_XXS", 256, 98, 0),
    T(LLM_GGML_IQ1_S, "IQ1_S", 256, 50, 0),
    T(LLM_GGML_IQ4_NL, "IQ4_NL", 32, 18, 1),
    T(LLM_GGML_IQ3_S, "IQ3_S", 256, 110, 0),
    T(LLM_GGML_IQ2_S, "IQ2_S", 256, 82, 0),
    T(LLM_GGML_IQ4_XS, "IQ4_XS", 256, 136, 1),
    T(LLM_GGML_I8, "I8", 1, 1, 0),
    T(LLM_GGML_I16, "I16", 1, 2, 0),
    T(LLM_GGML_I32, "I32", 1, 4, 0),
    T(LLM_GGML_I64, "I64", 1, 8, 0),
    T(LLM_GGML_F64, "F64", 1, 8, 1),
    T(LLM_GGML_IQ1_M, "IQ1_M", 256, 56, 0),
    T(LLM_GGML_BF16, "BF16", 1, 2, 1),
    T(LLM_GGML_TQ1_0, "TQ1_0", 256, 54, 0),
    T(LLM_GGML_TQ2_0, "TQ2_0", 256, 66, 0),
    T(LLM_GGML_MXFP4, "MXFP4", 32, 17, 0),
};

const struct llm_ggml_type_info *llm_ggml_type_info(uint32_t id)
{
    if (id >= LLM_GGML_TYPE_COUNT_ || !table[id].name)
        return NULL;
    return &table[id];
}

uint64_t llm_ggml_row_bytes(uint32_t id, uint64_t ne0)
{
    const struct llm_ggml_type_info *ti = llm_ggml_type_info(id);
    uint64_t n;
    if (!ti || ne0 % ti->blck || !llm_mul_ok(ne0 / ti->blck, ti->block_bytes, &n))
        return 0;
    return n;
}

/* ------------------------------------------------------------------------ */
/* little-endian loads */

static inline float ld_half(const uint8_t *p)
{
    return llm_fp16_to_fp32((uint16_t)(p[0] | p[1] << 8));
}

/* ------------------------------------------------------------------------ */
/* 32-element blocks */

static void dequant_q4_0(const uint8_t *b, float *y)
{
    const float d = ld_half(b);
    const uint8_t *qs = b + 2;
    for (int j = 0; j < 16; j++) {
        y[j] = (float)((qs[j] & 0x0F) - 8) * d;
        y[j + 16] = (float)((qs[j] >> 4) - 8) * d;
    }
}

static void dequant_q4_1(const uint8_t *b, float *y)
{
    const float d = ld_half(b), m = ld_half(b + 2);
    const uint8_t *qs = b + 4;
    for (int j = 0; j < 16; j++) {
        y[j] = (float)(qs[j] & 0x0F) * d + m;
        y[j + 16] = (float)(qs[j] >> 4) * d + m;
    }
}

static void dequant_q8_0(const uint8_t *b, float *y)
{
    const float d = ld_half(b);
    for (int j = 0; j < 32; j++)
        y[j] = (float)(int8_t)b[2 + j] * d;
}

void llm_ggml_dequant_q5_0(const uint8_t *b, float *y)
{
    struct llm_block_q5_0 x;
    memcpy(&x, b, sizeof x);
    const float d = llm_fp16_to_fp32(x.d);
    uint32_t qh;
    memcpy(&qh, x.qh, 4);
    /* bit j of qh is bit 4 of element j, bit j+16 that of element j+16 */
    for (int j = 0; j < 16; j++) {
        const uint8_t h0 = (uint8_t)(((qh >> j) << 4) & 0x10);
        const uint8_t h1 = (uint8_t)((qh >> (j + 12)) & 0x10);
        const int32_t x0 = ((x.qs[j] & 0x0F) | h0) - 16;
        const int32_t x1 = ((x.qs[j] >> 4) | h1) - 16;
        y[j] = (float)x0 * d;
        y[j + 16] = (float)x1 * d;
    }
}

void llm_ggml_dequant_q5_1(const uint8_t *b, float *y)
{
    struct llm_block_q5_1 x;
    memcpy(&x, b, sizeof x);
    const float d = llm_fp16_to_fp32(x.d), m = llm_fp16_to_fp32(x.m);
    uint32_t qh;
    memcpy(&qh, x.qh, 4);
    for (int j = 0; j < 16; j++) {
        const uint8_t h0 = (uint8_t)(((qh >> j) << 4) & 0x10);
        const uint8_t h1 = (uint8_t)((qh >> (j + 12)) & 0x10);
        const int x0 = (x.qs[j] & 0x0F) | h0;
        const int x1 = (x.qs[j] >> 4) | h1;
        y[j] = (float)x0 * d + m;
        y[j + 16] = (float)x1 * d + m;
    }
}

void llm_ggml_dequant_q8_1(const uint8_t *b, float *y)
{
    struct llm_ggml_block_q8_1 x;
    memcpy(&x, b, sizeof x);
    const float d = llm_fp16_to_fp32(x.d);
    for (int j = 0; j < 32; j++)
        y[j] = (float)x.qs[j] * d;
}

/* ------------------------------------------------------------------------ */
/* K-quants: super-blocks of 256 */

void llm_ggml_dequant_q2_k(const uint8_t *b, float *y)
{
    struct llm_block_q2_k x;
    memcpy(&x, b, sizeof x);
    const float d = llm_fp16_to_fp32(x.d), min = llm_fp16_to_fp32(x.dmin);
    const uint8_t *q = x.qs;
    int is = 0;
    for (int n = 0; n < LLM_QK_K; n += 128) {
        for (int shift = 0; shift < 8; shift += 2) {
            /* two groups of 16, each with its own scale/min byte */
            for (int g = 0; g < 2; g++) {
                const uint8_t sc = x.scales[is++];
                const float dl = d * (float)(sc & 0xF), ml = min * (float)(sc >> 4);
                for (int l = 0; l < 16; l++)
                    *y++ = dl * (float)((q[l + 16 * g] >> shift) & 3) - ml;
            }
        }
        q += 32;
    }
}

/* The 16 six-bit scales of a Q3_K block, as signed values (ggml's kmask
 * unpacking): low 4 bits from scales[0..7] (low then high nibbles), high 2
 * bits from scales[8..11]. */
static void q3_k_scales(const uint8_t *s, int *out)
{
    for (int i = 0; i < 16; i++) {
        const int low4 = i < 8 ? s[i] & 0xF : s[i - 8] >> 4;
        const int high2 = (s[8 + i % 4] >> (2 * (i / 4))) & 3;
        out[i] = (low4 | high2 << 4) - 32;
    }
}

void llm_ggml_dequant_q3_k(const uint8_t *b, float *y)
{
    struct llm_block_q3_k x;
    memcpy(&x, b, sizeof x);
    const float d_all = llm_fp16_to_fp32(x.d);
    int scales[16];
    q3_k_scales(x.scales, scales);
    const uint8_t *q = x.qs, *hm = x.hmask;
    uint8_t m = 1;
    int is = 0;
    for (int n = 0; n < LLM_QK_K; n += 128) {
        for (int shift = 0; shift < 8; shift += 2) {
            for (int g = 0; g < 2; g++) {
                const float dl = d_all * (float)scales[is++];
                for (int l = 0; l < 16; l++) {
                    const int k = l + 16 * g;
                    const int v = ((q[k] >> shift) & 3) - ((hm[k] & m) ? 0 : 4);
                    *y++ = dl * (float)v;
                }
            }
            m = (uint8_t)(m << 1);
        }
        q += 32;
    }
}

/* 6-bit scale and min of sub-block j of a Q4_K/Q5_K block. */
static void scale_min_k4(int j, const uint8_t *q, uint8_t *sc, uint8_t *m)
{
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (uint8_t)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
        *m = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

void llm_ggml_dequant_q4_k(const uint8_t *b, float *y)
{
    struct llm_block_q4_k x;
    memcpy(&x, b, sizeof x);
    const float d = llm_fp16_to_fp32(x.d), min = llm_fp16_to_fp32(x.dmin);
    const uint8_t *q = x.qs;
    for (int is = 0; is < 8; is += 2) {
        uint8_t sc, m;
        scale_min_k4(is, x.scales, &sc, &m);
        const float d1 = d * (float)sc, m1 = min * (float)m;
        scale_min_k4(is + 1, x.scales, &sc, &m);
        const float d2 = d * (float)sc, m2 = min * (float)m;
        for (int l = 0; l < 32; l++)
            *y++ = d1 * (float)(q[l] & 0xF) - m1;
        for (int l = 0; l < 32; l++)
            *y++ = d2 * (float)(q[l] >> 4) - m2;
        q += 32;
    }
}

void llm_ggml_dequant_q5_k(const uint8_t *b, float *y)
{
    struct llm_block_q5_k x;
    memcpy(&x, b, sizeof x);
    const float d = llm_fp16_to_fp32(x.d), min = llm_fp16_to_fp32(x.dmin);
    const uint8_t *ql = x.qs, *qh = x.qh;
    uint8_t u1 = 1, u2 = 2;
    for (int is = 0; is < 8; is += 2) {
        uint8_t sc, m;
        scale_min_k4(is, x.scales, &sc, &m);
        const float d1 = d * (float)sc, m1 = min * (float)m;
        scale_min_k4(is + 1, x.scales, &sc, &m);
        const float d2 = d * (float)sc, m2 = min * (float)m;
        for (int l = 0; l < 32; l++)
            *y++ = d1 * (float)((ql[l] & 0xF) + (qh[l] & u1 ? 16 : 0)) - m1;
        for (int l = 0; l < 32; l++)
            *y++ = d2 * (float)((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
        ql += 32;
        u1 = (uint8_t)(u1 << 2);
        u2 = (uint8_t)(u2 << 2);
    }
}

void llm_ggml_dequant_q6_k(const uint8_t *b, float *y)
{
    struct llm_block_q6_k x;
    memcpy(&x, b, sizeof x);
    const float d = llm_fp16_to_fp32(x.d);
    const uint8_t *ql = x.ql, *qh = x.qh;
    const int8_t *sc = x.scales;
    for (int n = 0; n < LLM_QK_K; n += 128) {
        for (int l = 0; l < 32; l++) {
            const int is = l / 16;
            const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
            const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
            const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
            const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
            y[l + 0] = d * (float)sc[is + 0] * (float)q1;
            y[l + 32] = d * (float)sc[is + 2] * (float)q2;
            y[l + 64] = d * (float)sc[is + 4] * (float)q3;
            y[l + 96] = d * (float)sc[is + 6] * (float)q4;
        }
        y += 128;
        ql += 64;
        qh += 32;
        sc += 8;
    }
}

void llm_ggml_dequant_q8_k(const uint8_t *b, float *y)
{
    struct llm_block_q8_k x;
    memcpy(&x, b, sizeof x);
    for (int j = 0; j < LLM_QK_K; j++)
        y[j] = x.d * (float)x.qs[j];
}

/* ------------------------------------------------------------------------ */
/* IQ4: 4-bit indices into a 16-value non-linear code book */

static const int8_t iq4nl_values[16] = LLM_IQ4NL_VALUES;

void llm_ggml_dequant_iq4_nl(const uint8_t *b, float *y)
{
    struct llm_block_iq4_nl x;
    memcpy(&x, b, sizeof x);
    const float d = llm_fp16_to_fp32(x.d);
    for (int j = 0; j < 16; j++) {
        y[j] = d * (float)iq4nl_values[x.qs[j] & 0xF];
        y[j + 16] = d * (float)iq4nl_values[x.qs[j] >> 4];
    }
}

void llm_ggml_dequant_iq4_xs(const uint8_t *b, float *y)
{
    struct llm_block_iq4_xs x;
    memcpy(&x, b, sizeof x);
    const float d = llm_fp16_to_fp32(x.d);
    for (int ib = 0; ib < 8; ib++) {
        /* 6-bit scale: low 4 bits in scales_l (two per byte), high 2 in scales_h */
        const int ls = ((x.scales_l[ib / 2] >> 4 * (ib % 2)) & 0xF) | (((x.scales_h >> 2 * ib) & 3) << 4);
        const float dl = d * (float)(ls - 32);
        const uint8_t *qs = x.qs + 16 * ib;
        for (int j = 0; j < 16; j++) {
            y[32 * ib + j] = dl * (float)iq4nl_values[qs[j] & 0xF];
            y[32 * ib + j + 16] = dl * (float)iq4nl_values[qs[j] >> 4];
        }
    }
}

/* ------------------------------------------------------------------------ */
/* rows */

llm_status llm_ggml_dequantize_row(uint32_t id, const void *src, float *dst, int64_t ne0)
{
    const struct llm_ggml_type_info *ti = llm_ggml_type_info(id);
    if (!ti || !ti->can_decode)
        return llm_error_set(LLM_E_UNSUPPORTED, "GGML type %s (%u) cannot be decoded",
                             ti ? ti->name : "?", (unsigned)id);
    if (ne0 <= 0 || (uint64_t)ne0 % ti->blck)
        return llm_error_set(LLM_E_INVALID, "GGML %s: row of %lld elements is not a whole number "
                             "of %u-element blocks", ti->name, (long long)ne0, ti->blck);
    const uint8_t *p = src;
    const int64_t nb = ne0 / ti->blck;
    switch (id) {
    case LLM_GGML_F32:
        memcpy(dst, p, (size_t)ne0 * 4);
        return LLM_OK;
    case LLM_GGML_F16:
        for (int64_t i = 0; i < ne0; i++)
            dst[i] = ld_half(p + 2 * i);
        return LLM_OK;
    case LLM_GGML_BF16:
        for (int64_t i = 0; i < ne0; i++)
            dst[i] = llm_bf16_to_fp32((uint16_t)(p[2 * i] | p[2 * i + 1] << 8));
        return LLM_OK;
    case LLM_GGML_F64:
        for (int64_t i = 0; i < ne0; i++) {
            double v;
            memcpy(&v, p + 8 * i, 8);
            dst[i] = (float)v;
        }
        return LLM_OK;
    default:
        break;
    }
    void (*fn)(const uint8_t *, float *) = NULL;
    switch (id) {
    case LLM_GGML_Q4_0: fn = dequant_q4_0; break;
    case LLM_GGML_Q4_1: fn = dequant_q4_1; break;
    case LLM_GGML_Q5_0: fn = llm_ggml_dequant_q5_0; break;
    case LLM_GGML_Q5_1: fn = llm_ggml_dequant_q5_1; break;
    case LLM_GGML_Q8_0: fn = dequant_q8_0; break;
    case LLM_GGML_Q8_1: fn = llm_ggml_dequant_q8_1; break;
    case LLM_GGML_Q2_K: fn = llm_ggml_dequant_q2_k; break;
    case LLM_GGML_Q3_K: fn = llm_ggml_dequant_q3_k; break;
    case LLM_GGML_Q4_K: fn = llm_ggml_dequant_q4_k; break;
    case LLM_GGML_Q5_K: fn = llm_ggml_dequant_q5_k; break;
    case LLM_GGML_Q6_K: fn = llm_ggml_dequant_q6_k; break;
    case LLM_GGML_Q8_K: fn = llm_ggml_dequant_q8_k; break;
    case LLM_GGML_IQ4_NL: fn = llm_ggml_dequant_iq4_nl; break;
    case LLM_GGML_IQ4_XS: fn = llm_ggml_dequant_iq4_xs; break;
    default:
        return llm_error_set(LLM_E_UNSUPPORTED, "GGML type %s (%u) cannot be decoded", ti->name,
                             (unsigned)id);
    }
    for (int64_t i = 0; i < nb; i++)
        fn(p + (size_t)i * ti->block_bytes, dst + (size_t)i * ti->blck);
    return LLM_OK;
}
