/* kquants.c: canonical form and round-to-nearest quantizers of the GGUF
 * block types (kquants.h).
 *
 * The quantizers follow the searches of llama.cpp's ggml-quants.c
 * (quantize_row_*_ref, and quantize_*_impl when an importance is given),
 * written here from their description in formats.md §1.6 and the papers'
 * least-squares argument:
 *   - asymmetric sub-blocks (Q2_K, Q4_K, Q5_K): codes from the sub-block's
 *     [min, max], then a sweep of nstep slightly different scales, each
 *     refitted by weighted least squares (scale and min), keeping the
 *     smallest weighted squared error (qkx_search below);
 *   - symmetric sub-blocks (Q3_K, Q6_K): the scale -nmax/max and 18
 *     neighbours, each refitted (qx_search);
 *   - IQ4: nearest code-book value for the scale max/-127 and 2*ntry+1
 *     neighbours (iq4_search);
 *   - then the sub-block scales (and mins) are themselves quantized to the
 *     block's 4/6/8-bit scale codes and every code is chosen again for the
 *     final scale.
 * Weights without an importance: |x| + rms for the asymmetric types (as
 * llama.cpp's _ref), x^2 for the symmetric and IQ4 ones; with one, imp[j]
 * * sqrt(sigma2 + x^2), sigma2 = 2 mean(x^2) over the super-block.
 * NaN elements are quantized as 0, and elements beyond +-65504 (binary16's
 * largest; the scales and minimums are binary16) are clamped to it first,
 * so every scale is finite (Q8_K, with a float32 scale: to 1e37).
 */
#include "kquants.h"

#include <float.h>
#include <math.h>
#include <string.h>

#include "../common/fp16.h"

static const int8_t iq4_values[16] = LLM_IQ4NL_VALUES;

static inline uint16_t ld16(const uint8_t *p)
{
    return (uint16_t)(p[0] | p[1] << 8);
}

static inline float h2f(const uint8_t *p)
{
    return llm_fp16_to_fp32(ld16(p));
}

static inline void st16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

int llm_kq_scale_group(enum llm_type t)
{
    return t == LLM_TYPE_Q2_K || t == LLM_TYPE_Q3_K || t == LLM_TYPE_Q6_K ? 16 : 32;
}

int llm_kq_has_min(enum llm_type t)
{
    return t == LLM_TYPE_Q2_K || t == LLM_TYPE_Q4_K || t == LLM_TYPE_Q5_K || t == LLM_TYPE_Q5_1;
}

// ----------------------------------------------------------------------------
// canonical form

/* 6-bit scale and min of sub-block j of Q4_K/Q5_K (12 packed bytes q) */
static void scale_min_k4(int j, const uint8_t *q, int *sc, int *m)
{
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

/* s and m for a pair of 16s (per-32 types) */
static inline void pair(float *s, float *m, int k, float sv, float mv)
{
    s[2 * k] = s[2 * k + 1] = sv;
    m[2 * k] = m[2 * k + 1] = mv;
}

void llm_kq_unpack(enum llm_type t, const uint8_t *b, int16_t *c, float *s, float *m)
{
    switch (t) {
    case LLM_TYPE_Q5_0:
    case LLM_TYPE_Q5_1: {
        const int zp = t == LLM_TYPE_Q5_1;
        const uint8_t *qh = b + (zp ? 4 : 2), *qs = qh + 4;
        const uint32_t h = (uint32_t)qh[0] | (uint32_t)qh[1] << 8 | (uint32_t)qh[2] << 16 |
                           (uint32_t)qh[3] << 24;
        for (int j = 0; j < 16; j++) {
            c[j] = (int16_t)(((qs[j] & 0xF) | ((h >> j) & 1) << 4) - (zp ? 0 : 16));
            c[j + 16] = (int16_t)(((qs[j] >> 4) | ((h >> (j + 16)) & 1) << 4) - (zp ? 0 : 16));
        }
        pair(s, m, 0, h2f(b), zp ? h2f(b + 2) : 0.0f);
        return;
    }
    case LLM_TYPE_Q2_K: {
        const uint8_t *sc = b, *q = b + 16;
        const float d = h2f(b + 80), dmin = h2f(b + 82);
        for (int k = 0; k < 16; k++) {
            s[k] = d * (float)(sc[k] & 0xF);
            m[k] = -(dmin * (float)(sc[k] >> 4));
        }
        for (int e = 0; e < 256; e++) /* e = 128 n + 32 j + l */
            c[e] = (int16_t)((q[32 * (e / 128) + e % 32] >> (2 * ((e / 32) % 4))) & 3);
        return;
    }
    case LLM_TYPE_Q3_K: {
        const uint8_t *hm = b, *q = b + 32, *sc = b + 96;
        const float d = h2f(b + 108);
        for (int k = 0; k < 16; k++) {
            const int low4 = k < 8 ? sc[k] & 0xF : sc[k - 8] >> 4;
            const int high2 = (sc[8 + k % 4] >> (2 * (k / 4))) & 3;
            s[k] = d * (float)((low4 | high2 << 4) - 32);
            m[k] = 0.0f;
        }
        for (int e = 0; e < 256; e++) {
            const int j = (e / 32) % 4, l = e % 32;
            const int v = (q[32 * (e / 128) + l] >> (2 * j)) & 3;
            c[e] = (int16_t)(v - ((hm[l] >> (e / 32)) & 1 ? 0 : 4));
        }
        return;
    }
    case LLM_TYPE_Q4_K:
    case LLM_TYPE_Q5_K: {
        const int five = t == LLM_TYPE_Q5_K;
        const float d = h2f(b), dmin = h2f(b + 2);
        const uint8_t *qh = b + 16, *ql = b + (five ? 48 : 16);
        for (int k = 0; k < 8; k++) {
            int sc, mn;
            scale_min_k4(k, b + 4, &sc, &mn);
            pair(s, m, k, d * (float)sc, -(dmin * (float)mn));
        }
        for (int e = 0; e < 256; e++) {
            const int k = e / 32, l = e % 32;
            int v = k & 1 ? ql[32 * (k / 2) + l] >> 4 : ql[32 * (k / 2) + l] & 0xF;
            if (five)
                v |= ((qh[l] >> k) & 1) << 4;
            c[e] = (int16_t)v;
        }
        return;
    }
    case LLM_TYPE_Q6_K: {
        const uint8_t *ql = b, *qh = b + 128;
        const int8_t *sc = (const int8_t *)(b + 192);
        const float d = h2f(b + 208);
        for (int k = 0; k < 16; k++) {
            s[k] = d * (float)sc[k];
            m[k] = 0.0f;
        }
        for (int e = 0; e < 256; e++) { /* e = 128 n + 32 j + l */
            const int n = e / 128, j = (e / 32) % 4, l = e % 32;
            const uint8_t lo = ql[64 * n + 32 * (j & 1) + l];
            const int v = (j < 2 ? lo & 0xF : lo >> 4) | ((qh[32 * n + l] >> (2 * j)) & 3) << 4;
            c[e] = (int16_t)(v - 32);
        }
        return;
    }
    case LLM_TYPE_Q8_K: {
        float d;
        memcpy(&d, b, 4);
        for (int k = 0; k < 8; k++)
            pair(s, m, k, d, 0.0f);
        for (int e = 0; e < 256; e++)
            c[e] = (int8_t)b[4 + e];
        return;
    }
    case LLM_TYPE_IQ4_NL: {
        for (int j = 0; j < 16; j++) {
            c[j] = iq4_values[b[2 + j] & 0xF];
            c[j + 16] = iq4_values[b[2 + j] >> 4];
        }
        pair(s, m, 0, h2f(b), 0.0f);
        return;
    }
    case LLM_TYPE_IQ4_XS: {
        const float d = h2f(b);
        const uint16_t sh = ld16(b + 2);
        for (int k = 0; k < 8; k++) {
            const int ls = ((b[4 + k / 2] >> 4 * (k % 2)) & 0xF) | ((sh >> 2 * k) & 3) << 4;
            pair(s, m, k, d * (float)(ls - 32), 0.0f);
            const uint8_t *qs = b + 8 + 16 * k;
            for (int j = 0; j < 16; j++) {
                c[32 * k + j] = iq4_values[qs[j] & 0xF];
                c[32 * k + j + 16] = iq4_values[qs[j] >> 4];
            }
        }
        return;
    }
    default:
        return;
    }
}

// ----------------------------------------------------------------------------
// searches

/* nearest integer, ties to even (ggml's nearest_int in the default rounding
 * mode); |v| must be far below 2^22 */
static inline int nearest(float v)
{
    return (int)nearbyintf(v);
}

static inline int clampi(int v, int lo, int hi)
{
    return v < lo ? lo : v > hi ? hi : v;
}

/* Asymmetric codes L (0..nmax) for x (n), weights w: returns the scale and
 * sets *mn to the (non-negative) amount subtracted: x ~ scale*L - *mn. */
static float qkx_search(int n, int nmax, const float *x, const float *w, uint8_t *L, float *mn,
                        float rmin, float rdelta, int nstep)
{
    float lo = x[0], hi = x[0], sw = 0, sx = 0;
    for (int i = 0; i < n; i++) {
        lo = fminf(lo, x[i]);
        hi = fmaxf(hi, x[i]);
        sw += w[i];
        sx += w[i] * x[i];
    }
    if (lo > 0)
        lo = 0;
    if (hi <= lo) {
        memset(L, 0, (size_t)n);
        *mn = -lo;
        return 0.0f;
    }
    float iscale = (float)nmax / (hi - lo), scale = 1.0f / iscale, best = 0;
    for (int i = 0; i < n; i++) {
        L[i] = (uint8_t)clampi(nearest(iscale * (x[i] - lo)), 0, nmax);
        const float diff = scale * L[i] + lo - x[i];
        best += w[i] * diff * diff;
    }
    uint8_t aux[32];
    for (int is = 0; is <= nstep; is++) {
        iscale = (rmin + rdelta * (float)is + (float)nmax) / (hi - lo);
        float sl = 0, sl2 = 0, sxl = 0;
        for (int i = 0; i < n; i++) {
            const int l = clampi(nearest(iscale * (x[i] - lo)), 0, nmax);
            aux[i] = (uint8_t)l;
            sl += w[i] * (float)l;
            sl2 += w[i] * (float)(l * l);
            sxl += w[i] * (float)l * x[i];
        }
        const float D = sw * sl2 - sl * sl;
        if (D <= 0)
            continue;
        float ts = (sw * sxl - sx * sl) / D, tm = (sl2 * sx - sl * sxl) / D;
        if (tm > 0) { /* the minimum may not be above 0 */
            tm = 0;
            ts = sxl / sl2;
        }
        float err = 0;
        for (int i = 0; i < n; i++) {
            const float diff = ts * aux[i] + tm - x[i];
            err += w[i] * diff * diff;
        }
        if (err < best) {
            memcpy(L, aux, (size_t)n);
            best = err;
            scale = ts;
            lo = tm;
        }
    }
    *mn = -lo;
    return scale;
}

/* Symmetric codes L (-nmax..nmax-1, stored + nmax) for x (n), weights w:
 * returns the scale (x ~ scale * (L - nmax)). */
static float qx_search(int n, int nmax, const float *x, const float *w, uint8_t *L)
{
    float amax = 0, max = 0;
    for (int i = 0; i < n; i++)
        if (fabsf(x[i]) > amax) {
            amax = fabsf(x[i]);
            max = x[i];
        }
    if (amax < 1e-15f) {
        memset(L, nmax, (size_t)n);
        return 0.0f;
    }
    float scale = 0, best = 0;
    for (int is = 0; is <= 18; is++) {
        /* 0 first (the plain scale), then -9..-1, 1..9 tenths of a step */
        const int k = is == 0 ? 0 : is <= 9 ? is - 10 : is - 9;
        const float iscale = -((float)nmax + 0.1f * (float)k) / max;
        float sxl = 0, sl2 = 0;
        for (int i = 0; i < n; i++) {
            const int l = clampi(nearest(iscale * x[i]), -nmax, nmax - 1);
            sxl += w[i] * x[i] * (float)l;
            sl2 += w[i] * (float)(l * l);
        }
        if (sl2 > 0 && (is == 0 || sxl * sxl > best * sl2)) {
            for (int i = 0; i < n; i++)
                L[i] = (uint8_t)(nmax + clampi(nearest(iscale * x[i]), -nmax, nmax - 1));
            scale = sxl / sl2;
            best = scale * sxl;
        } else if (is == 0) {
            for (int i = 0; i < n; i++)
                L[i] = (uint8_t)(nmax + clampi(nearest(iscale * x[i]), -nmax, nmax - 1));
            scale = 1.0f / iscale;
            best = 0;
        }
    }
    return scale;
}

/* The code-book index nearest v */
static int iq4_index(float v)
{
    if (v <= iq4_values[0])
        return 0;
    if (v >= iq4_values[15])
        return 15;
    int lo = 0, hi = 15;
    while (hi - lo > 1) {
        const int mid = (lo + hi) / 2;
        if (v < iq4_values[mid])
            hi = mid;
        else
            lo = mid;
    }
    return v - iq4_values[lo] < iq4_values[hi] - v ? lo : hi;
}

/* The best scale for 32 elements x on the code book (weights w), trying
 * the scales max/v[0] and 2*ntry of its neighbours */
static float iq4_search(const float *x, const float *w, int ntry)
{
    float amax = 0, max = 0;
    for (int i = 0; i < 32; i++)
        if (fabsf(x[i]) > amax) {
            amax = fabsf(x[i]);
            max = x[i];
        }
    if (amax < 1e-15f)
        return 0.0f;
    float d = 0, best = -1;
    for (int it = -ntry; it <= ntry; it++) {
        const float id = ((float)it + (float)iq4_values[0]) / max;
        float sqx = 0, sq2 = 0;
        for (int i = 0; i < 32; i++) {
            const float q = iq4_values[iq4_index(id * x[i])];
            sqx += w[i] * q * x[i];
            sq2 += w[i] * q * q;
        }
        if (sq2 > 0 && (best < 0 || sqx * sqx > best * sq2)) {
            d = sqx / sq2;
            best = d * sqx;
        }
    }
    return d;
}

// ----------------------------------------------------------------------------
// quantizers, one block each; x is finite

/* the weights of the elements of one sub-block xs (n) of super-block xb
 * (N); asym: the _ref rule |x| + rms, else x^2 */
static void weights(const float *xs, int n, const float *imp, float sigma2, int asym, float *w)
{
    float ss = 0;
    for (int i = 0; i < n; i++)
        ss += xs[i] * xs[i];
    const float rms = sqrtf(ss / (float)n);
    for (int i = 0; i < n; i++)
        w[i] = imp ? imp[i] * sqrtf(sigma2 + xs[i] * xs[i])
             : asym ? rms + fabsf(xs[i])
                    : xs[i] * xs[i];
}

static float sigma2_of(const float *x, int n)
{
    float ss = 0;
    for (int i = 0; i < n; i++)
        ss += x[i] * x[i];
    return 2.0f * ss / (float)n;
}

static void quant_q5_01(const float *x, uint8_t *b, int zp)
{
    uint8_t q[32];
    float d, mn = 0;
    if (zp) {
        float lo = x[0], hi = x[0];
        for (int i = 1; i < 32; i++) {
            lo = fminf(lo, x[i]);
            hi = fmaxf(hi, x[i]);
        }
        d = (hi - lo) / 31.0f;
        const float id = d ? 1.0f / d : 0.0f;
        for (int i = 0; i < 32; i++)
            q[i] = (uint8_t)clampi((int)((x[i] - lo) * id + 0.5f), 0, 31);
        mn = lo;
    } else {
        float amax = 0, max = 0;
        for (int i = 0; i < 32; i++)
            if (fabsf(x[i]) > amax) {
                amax = fabsf(x[i]);
                max = x[i];
            }
        d = max / -16.0f;
        const float id = d ? 1.0f / d : 0.0f;
        for (int i = 0; i < 32; i++) /* truncation of v + 16.5, as ggml */
            q[i] = (uint8_t)clampi((int)(x[i] * id + 16.5f), 0, 31);
    }
    st16(b, llm_fp32_to_fp16(d));
    if (zp)
        st16(b + 2, llm_fp32_to_fp16(mn));
    uint8_t *qh = b + (zp ? 4 : 2), *qs = qh + 4;
    uint32_t h = 0;
    for (int j = 0; j < 16; j++) {
        qs[j] = (uint8_t)((q[j] & 0xF) | (q[j + 16] & 0xF) << 4);
        h |= (uint32_t)(q[j] >> 4) << j | (uint32_t)(q[j + 16] >> 4) << (j + 16);
    }
    for (int i = 0; i < 4; i++)
        qh[i] = (uint8_t)(h >> 8 * i);
}

static void quant_q8_k(const float *x, uint8_t *b)
{
    float amax = 0, max = 0;
    for (int i = 0; i < 256; i++)
        if (fabsf(x[i]) > amax) {
            amax = fabsf(x[i]);
            max = x[i];
        }
    float d = 0;
    int8_t q[256] = { 0 };
    if (amax > 0) {
        const float iscale = -127.0f / max;
        for (int i = 0; i < 256; i++)
            q[i] = (int8_t)clampi(nearest(iscale * x[i]), -127, 127);
        d = 1.0f / iscale;
    }
    memcpy(b, &d, 4);
    memcpy(b + 4, q, 256);
    for (int k = 0; k < 16; k++) {
        int sum = 0;
        for (int i = 0; i < 16; i++)
            sum += q[16 * k + i];
        const int16_t s16 = (int16_t)sum;
        memcpy(b + 260 + 2 * k, &s16, 2);
    }
}

/* Q4_K (bits 4) and Q5_K (bits 5) */
static void quant_q45_k(const float *x, uint8_t *b, const float *imp, int bits)
{
    const int nmax = (1 << bits) - 1;
    uint8_t L[256];
    float sc[8], mins[8], w[32], maxs = 0, maxm = 0;
    const float s2 = sigma2_of(x, 256);
    for (int k = 0; k < 8; k++) {
        weights(x + 32 * k, 32, imp ? imp + 32 * k : NULL, s2, 1, w);
        sc[k] = imp ? qkx_search(32, nmax, x + 32 * k, w, L + 32 * k, &mins[k], -0.9f, 0.05f, 36)
              : bits == 4 ? qkx_search(32, nmax, x + 32 * k, w, L + 32 * k, &mins[k], -1.0f, 0.1f, 20)
                          : qkx_search(32, nmax, x + 32 * k, w, L + 32 * k, &mins[k], -0.5f, 0.1f, 15);
        maxs = fmaxf(maxs, sc[k]);
        maxm = fmaxf(maxm, mins[k]);
    }
    const float is = maxs > 0 ? 63.0f / maxs : 0.0f, im = maxm > 0 ? 63.0f / maxm : 0.0f;
    uint8_t *S = b + 4;
    memset(S, 0, 12);
    for (int k = 0; k < 8; k++) {
        const int ls = clampi(nearest(is * sc[k]), 0, 63), lm = clampi(nearest(im * mins[k]), 0, 63);
        if (k < 4) {
            S[k] = (uint8_t)ls;
            S[k + 4] = (uint8_t)lm;
        } else {
            S[k + 4] = (uint8_t)((ls & 0xF) | (lm & 0xF) << 4);
            S[k - 4] |= (uint8_t)((ls >> 4) << 6);
            S[k] |= (uint8_t)((lm >> 4) << 6);
        }
    }
    st16(b, llm_fp32_to_fp16(maxs / 63.0f));
    st16(b + 2, llm_fp32_to_fp16(maxm / 63.0f));
    const float d = h2f(b), dmin = h2f(b + 2);
    for (int k = 0; k < 8; k++) {
        int ls, lm;
        scale_min_k4(k, S, &ls, &lm);
        const float dk = d * (float)ls, mk = dmin * (float)lm;
        if (dk == 0.0f)
            continue;
        for (int i = 0; i < 32; i++)
            L[32 * k + i] = (uint8_t)clampi(nearest((x[32 * k + i] + mk) / dk), 0, nmax);
    }
    uint8_t *qh = b + 16, *ql = b + (bits == 5 ? 48 : 16);
    if (bits == 5)
        memset(qh, 0, 32);
    for (int p = 0; p < 4; p++)
        for (int l = 0; l < 32; l++) {
            const uint8_t a = L[64 * p + l], c = L[64 * p + 32 + l];
            ql[32 * p + l] = (uint8_t)((a & 0xF) | (c & 0xF) << 4);
            if (bits == 5)
                qh[l] |= (uint8_t)((a >> 4) << (2 * p) | (c >> 4) << (2 * p + 1));
        }
}

static void quant_q2_k(const float *x, uint8_t *b, const float *imp)
{
    uint8_t L[256];
    float sc[16], mins[16], w[16], maxs = 0, maxm = 0;
    const float s2 = sigma2_of(x, 256);
    for (int k = 0; k < 16; k++) {
        weights(x + 16 * k, 16, imp ? imp + 16 * k : NULL, s2, 1, w);
        if (!imp) /* the _ref rule for Q2_K: |x| alone */
            for (int i = 0; i < 16; i++)
                w[i] = fabsf(x[16 * k + i]);
        sc[k] = qkx_search(16, 3, x + 16 * k, w, L + 16 * k, &mins[k], -0.5f, 0.1f, 15);
        maxs = fmaxf(maxs, sc[k]);
        maxm = fmaxf(maxm, mins[k]);
    }
    const float is = maxs > 0 ? 15.0f / maxs : 0.0f, im = maxm > 0 ? 15.0f / maxm : 0.0f;
    for (int k = 0; k < 16; k++)
        b[k] = (uint8_t)(clampi(nearest(is * sc[k]), 0, 15) | clampi(nearest(im * mins[k]), 0, 15) << 4);
    st16(b + 80, llm_fp32_to_fp16(maxs / 15.0f));
    st16(b + 82, llm_fp32_to_fp16(maxm / 15.0f));
    const float d = h2f(b + 80), dmin = h2f(b + 82);
    for (int k = 0; k < 16; k++) {
        const float dk = d * (float)(b[k] & 0xF), mk = dmin * (float)(b[k] >> 4);
        if (dk == 0.0f)
            continue;
        for (int i = 0; i < 16; i++)
            L[16 * k + i] = (uint8_t)clampi(nearest((x[16 * k + i] + mk) / dk), 0, 3);
    }
    uint8_t *q = b + 16;
    for (int n = 0; n < 2; n++)
        for (int l = 0; l < 32; l++)
            q[32 * n + l] = (uint8_t)(L[128 * n + l] | L[128 * n + 32 + l] << 2 |
                                      L[128 * n + 64 + l] << 4 | L[128 * n + 96 + l] << 6);
}

/* Q3_K (nmax 4, 6-bit scales) and Q6_K (nmax 32, int8 scales) */
static void quant_q36_k(const float *x, uint8_t *b, const float *imp, int six)
{
    const int nmax = six ? 32 : 4;
    uint8_t L[256];
    float sc[16], w[16], amax = 0, maxs = 0;
    const float s2 = sigma2_of(x, 256);
    for (int k = 0; k < 16; k++) {
        weights(x + 16 * k, 16, imp ? imp + 16 * k : NULL, s2, 0, w);
        sc[k] = qx_search(16, nmax, x + 16 * k, w, L + 16 * k);
        if (fabsf(sc[k]) > amax) {
            amax = fabsf(sc[k]);
            maxs = sc[k];
        }
    }
    const int smax = six ? 128 : 32, shi = six ? 127 : 31;
    const float iscale = amax > 0 ? -(float)smax / maxs : 0.0f;
    int ls[16];
    for (int k = 0; k < 16; k++)
        ls[k] = amax > 0 ? clampi(nearest(iscale * sc[k]), -smax, shi) : 0;
    const uint16_t dh = llm_fp32_to_fp16(amax > 0 ? 1.0f / iscale : 0.0f);
    const float d = llm_fp16_to_fp32(dh);
    for (int k = 0; k < 16; k++) {
        const float dk = d * (float)ls[k];
        for (int i = 0; i < 16; i++)
            L[16 * k + i] = dk == 0.0f ? (uint8_t)nmax
                            : (uint8_t)(nmax + clampi(nearest(x[16 * k + i] / dk), -nmax, nmax - 1));
    }
    if (six) {
        uint8_t *ql = b, *qh = b + 128;
        for (int k = 0; k < 16; k++)
            b[192 + k] = (uint8_t)(int8_t)ls[k];
        st16(b + 208, dh);
        memset(qh, 0, 64);
        for (int e = 0; e < 256; e++) {
            const int n = e / 128, j = (e / 32) % 4, l = e % 32;
            uint8_t *lo = &ql[64 * n + 32 * (j & 1) + l];
            if (j < 2)
                *lo = (uint8_t)((*lo & 0xF0) | (L[e] & 0xF));
            else
                *lo = (uint8_t)((*lo & 0x0F) | (L[e] & 0xF) << 4);
            qh[32 * n + l] |= (uint8_t)((L[e] >> 4) << (2 * j));
        }
        return;
    }
    uint8_t *hm = b, *q = b + 32, *S = b + 96;
    memset(b, 0, 108);
    for (int k = 0; k < 16; k++) {
        const int v = ls[k] + 32; /* 0..63 */
        if (k < 8)
            S[k] |= (uint8_t)(v & 0xF);
        else
            S[k - 8] |= (uint8_t)((v & 0xF) << 4);
        S[8 + k % 4] |= (uint8_t)((v >> 4) << (2 * (k / 4)));
    }
    st16(b + 108, dh);
    for (int e = 0; e < 256; e++) {
        const int j = (e / 32) % 4, l = e % 32;
        if (L[e] > 3)
            hm[l] |= (uint8_t)(1 << (e / 32));
        q[32 * (e / 128) + l] |= (uint8_t)((L[e] & 3) << (2 * j));
    }
}

/* IQ4_NL (one 32-block) and IQ4_XS (eight, with 6-bit scales) */
static void quant_iq4(const float *x, uint8_t *b, const float *imp, int xs)
{
    const int n = xs ? 256 : 32, nsub = n / 32;
    float sc[8], w[32], amax = 0, maxs = 0;
    const float s2 = sigma2_of(x, n);
    for (int k = 0; k < nsub; k++) {
        weights(x + 32 * k, 32, imp ? imp + 32 * k : NULL, s2, 0, w);
        sc[k] = iq4_search(x + 32 * k, w, 7);
        if (fabsf(sc[k]) > amax) {
            amax = fabsf(sc[k]);
            maxs = sc[k];
        }
    }
    float dsub[8];
    if (xs) {
        const uint16_t dh = llm_fp32_to_fp16(-maxs / 32.0f);
        const float d = llm_fp16_to_fp32(dh), id = d != 0.0f ? 1.0f / d : 0.0f;
        uint16_t sh = 0;
        st16(b, dh);
        memset(b + 4, 0, 4);
        for (int k = 0; k < 8; k++) {
            const int l = clampi(nearest(id * sc[k]), -32, 31) + 32;
            b[4 + k / 2] |= (uint8_t)((l & 0xF) << 4 * (k % 2));
            sh |= (uint16_t)((l >> 4) << 2 * k);
            dsub[k] = d * (float)(l - 32);
        }
        st16(b + 2, sh);
    } else {
        st16(b, llm_fp32_to_fp16(sc[0]));
        dsub[0] = h2f(b);
    }
    uint8_t *qs = b + (xs ? 8 : 2);
    for (int k = 0; k < nsub; k++) {
        const float id = dsub[k] != 0.0f ? 1.0f / dsub[k] : 0.0f;
        for (int j = 0; j < 16; j++) {
            const int lo = iq4_index(id * x[32 * k + j]), hi = iq4_index(id * x[32 * k + j + 16]);
            qs[16 * k + j] = (uint8_t)(lo | hi << 4);
        }
    }
}

llm_status llm_kq_quantize_row(enum llm_type t, const float *x, void *dst, int64_t ne0,
                               const float *imp)
{
    const struct llm_type_traits *tr = llm_type_traits((uint32_t)t);
    if (!tr || !llm_kq_type(t))
        return llm_error_set(LLM_E_INVALID, "quantize: %s is not a GGUF block type",
                             llm_type_name((uint32_t)t));
    if (ne0 <= 0 || ne0 % tr->blck)
        return llm_error_set(LLM_E_INVALID, "quantize: rows of %lld elements are not whole %u-element "
                             "blocks of %s", (long long)ne0, tr->blck, tr->name);
    uint8_t *out = dst;
    float buf[256], ibuf[256];
    const int64_t G = tr->blck;
    const float lim = t == LLM_TYPE_Q8_K ? 1e37f : 65504.0f;
    for (int64_t e0 = 0; e0 < ne0; e0 += G) {
        /* NaN -> 0, beyond +-lim -> +-lim: every scale stays finite */
        for (int64_t i = 0; i < G; i++) {
            const float v = x[e0 + i];
            buf[i] = isnan(v) ? 0.0f : fminf(fmaxf(v, -lim), lim);
            if (imp)
                ibuf[i] = isfinite(imp[e0 + i]) && imp[e0 + i] > 0 ? imp[e0 + i] : 0.0f;
        }
        const float *w = imp ? ibuf : NULL;
        uint8_t *b = out + (e0 / G) * tr->block_bytes;
        switch (t) {
        case LLM_TYPE_Q5_0: quant_q5_01(buf, b, 0); break;
        case LLM_TYPE_Q5_1: quant_q5_01(buf, b, 1); break;
        case LLM_TYPE_Q2_K: quant_q2_k(buf, b, w); break;
        case LLM_TYPE_Q3_K: quant_q36_k(buf, b, w, 0); break;
        case LLM_TYPE_Q4_K: quant_q45_k(buf, b, w, 4); break;
        case LLM_TYPE_Q5_K: quant_q45_k(buf, b, w, 5); break;
        case LLM_TYPE_Q6_K: quant_q36_k(buf, b, w, 1); break;
        case LLM_TYPE_Q8_K: quant_q8_k(buf, b); break;
        case LLM_TYPE_IQ4_NL: quant_iq4(buf, b, w, 0); break;
        case LLM_TYPE_IQ4_XS: quant_iq4(buf, b, w, 1); break;
        default: break;
        }
    }
    return LLM_OK;
}
