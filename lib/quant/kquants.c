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
// searches (each float operation in ggml's order, so that the bytes are
// llama.cpp's: tests/cli/llm-quantize.sh checks them against its files)

/* nearest integer, ties to even, as ggml's nearest_int: adding 1.5 * 2^23
 * leaves the rounded integer in the low mantissa bits; |v| <= 4194303 */
static inline int nearest(float v)
{
    const float f = v + 12582912.0f;
    int32_t i;
    memcpy(&i, &f, 4);
    return (i & 0x007fffff) - 0x00400000;
}

static inline int clampi(int v, int lo, int hi)
{
    return v < lo ? lo : v > hi ? hi : v;
}

/* Asymmetric codes L (0..nmax) for x (n), weights w: returns the scale and
 * sets *mn to the (non-negative) amount subtracted: x ~ scale*L - *mn.
 * The error is squared, or absolute with mad. (make_qkx2/qkx3_quants) */
static float qkx_search(int n, int nmax, const float *x, const float *w, uint8_t *L, float *mn,
                        float rmin, float rdelta, int nstep, int mad)
{
    float lo = x[0], hi = x[0], sw = w[0], sx = sw * x[0];
    for (int i = 1; i < n; i++) {
        if (x[i] < lo)
            lo = x[i];
        if (x[i] > hi)
            hi = x[i];
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
    float iscale = (float)nmax / (hi - lo), scale = 1 / iscale, best = 0;
    for (int i = 0; i < n; i++) {
        L[i] = (uint8_t)clampi(nearest(iscale * (x[i] - lo)), 0, nmax);
        float diff = scale * (float)L[i] + lo - x[i];
        diff = mad ? fabsf(diff) : diff * diff;
        best += w[i] * diff;
    }
    uint8_t aux[32];
    for (int is = 0; is <= nstep; is++) {
        iscale = (rmin + rdelta * (float)is + (float)nmax) / (hi - lo);
        float sl = 0, sl2 = 0, sxl = 0;
        for (int i = 0; i < n; i++) {
            const int l = clampi(nearest(iscale * (x[i] - lo)), 0, nmax);
            aux[i] = (uint8_t)l;
            sl += w[i] * (float)l;
            sl2 += w[i] * (float)l * (float)l;
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
            float diff = ts * (float)aux[i] + tm - x[i];
            diff = mad ? fabsf(diff) : diff * diff;
            err += w[i] * diff;
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

/* Symmetric codes L (-nmax..nmax-1, stored + nmax) for x (n), weighted by
 * w (NULL: x^2): the scale -nmax/max and 18 neighbours, each refitted by
 * least squares (make_qx_quants with rmse_type 1). Returns the scale. */
static float qx_search(int n, int nmax, const float *x, const float *w, uint8_t *L)
{
    float amax = 0, max = 0;
    for (int i = 0; i < n; i++)
        if (fabsf(x[i]) > amax) {
            amax = fabsf(x[i]);
            max = x[i];
        }
    if (amax < 1e-15f) {
        memset(L, 0, (size_t)n);
        return 0.0f;
    }
    float iscale = (float)-nmax / max, sxl = 0, sl2 = 0;
    for (int i = 0; i < n; i++) {
        const int l = clampi(nearest(iscale * x[i]), -nmax, nmax - 1);
        const float wi = w ? w[i] : x[i] * x[i];
        L[i] = (uint8_t)(l + nmax);
        sxl += wi * x[i] * (float)l;
        sl2 += wi * (float)l * (float)l;
    }
    float scale = sl2 != 0.0f ? sxl / sl2 : 0.0f, best = scale * sxl;
    for (int is = -9; is <= 9; is++) {
        if (is == 0)
            continue;
        iscale = -((float)nmax + 0.1f * (float)is) / max;
        sxl = sl2 = 0;
        for (int i = 0; i < n; i++) {
            const int l = clampi(nearest(iscale * x[i]), -nmax, nmax - 1);
            const float wi = w ? w[i] : x[i] * x[i];
            sxl += wi * x[i] * (float)l;
            sl2 += wi * (float)l * (float)l;
        }
        if (sl2 > 0 && sxl * sxl > best * sl2) {
            for (int i = 0; i < n; i++)
                L[i] = (uint8_t)(nmax + clampi(nearest(iscale * x[i]), -nmax, nmax - 1));
            scale = sxl / sl2;
            best = scale * sxl;
        }
    }
    return scale;
}

/* Q3_K's search without importance (make_q3_quants with do_rmse): codes
 * from -nmax/max, then up to 5 passes moving single codes while the
 * least-squares fit improves. L stored + nmax; returns the scale. */
static float q3_search(int n, int nmax, const float *x, uint8_t *Lout)
{
    float amax = 0, max = 0;
    for (int i = 0; i < n; i++)
        if (fabsf(x[i]) > amax) {
            amax = fabsf(x[i]);
            max = x[i];
        }
    if (amax < 1e-15f) {
        memset(Lout, 0, (size_t)n);
        return 0.0f;
    }
    const float iscale = (float)-nmax / max;
    int L[32];
    float sxl = 0, sl2 = 0;
    for (int i = 0; i < n; i++) {
        L[i] = clampi(nearest(iscale * x[i]), -nmax, nmax - 1);
        const float w = x[i] * x[i];
        sxl += w * x[i] * (float)L[i];
        sl2 += w * (float)L[i] * (float)L[i];
    }
    for (int it = 0; it < 5; it++) {
        int changed = 0;
        for (int i = 0; i < n; i++) {
            const float w = x[i] * x[i];
            float slx = sxl - w * x[i] * (float)L[i];
            if (slx > 0) {
                float s2 = sl2 - w * (float)L[i] * (float)L[i];
                const int nl = clampi(nearest(x[i] * s2 / slx), -nmax, nmax - 1);
                if (nl != L[i]) {
                    slx += w * x[i] * (float)nl;
                    s2 += w * (float)nl * (float)nl;
                    if (s2 > 0 && slx * slx * sl2 > sxl * sxl * s2) {
                        L[i] = nl;
                        sxl = slx;
                        sl2 = s2;
                        changed++;
                    }
                }
            }
        }
        if (!changed)
            break;
    }
    for (int i = 0; i < n; i++)
        Lout[i] = (uint8_t)(L[i] + nmax);
    return sxl / sl2;
}

/* Non-negative codes L (0..nmax) for the sub-block scales or minimums x
 * (n) weighted by w (make_qp_quants): returns the scale. */
static float qp_search(int n, int nmax, const float *x, uint8_t *Lout, const float *w)
{
    float max = 0;
    for (int i = 0; i < n; i++)
        max = fmaxf(max, x[i]);
    if (max == 0.0f) {
        memset(Lout, 0, (size_t)n);
        return 0.0f;
    }
    int L[16];
    float iscale = (float)nmax / max;
    for (int i = 0; i < n; i++)
        L[i] = nearest(iscale * x[i]);
    float scale = 1 / iscale, best = 0;
    for (int i = 0; i < n; i++) {
        const float diff = x[i] - scale * (float)L[i];
        best += w[i] * diff * diff;
    }
    for (int is = -4; is <= 4; is++) {
        if (is == 0)
            continue;
        const float isc = (0.1f * (float)is + (float)nmax) / max, sc = 1 / isc;
        float err = 0;
        for (int i = 0; i < n; i++) {
            const int l = nearest(isc * x[i]) < nmax ? nearest(isc * x[i]) : nmax;
            const float diff = x[i] - sc * (float)l;
            err += w[i] * diff * diff;
        }
        if (err < best) {
            best = err;
            iscale = isc;
        }
    }
    float sxl = 0, sl2 = 0;
    for (int i = 0; i < n; i++) {
        const int l = nearest(iscale * x[i]) < nmax ? nearest(iscale * x[i]) : nmax;
        L[i] = l;
        sxl += w[i] * x[i] * (float)l;
        sl2 += w[i] * (float)l * (float)l;
    }
    for (int it = 0; it < 5; it++) {
        int changed = 0;
        for (int i = 0; i < n; i++) {
            float slx = sxl - w[i] * x[i] * (float)L[i];
            float s2 = sl2 - w[i] * (float)L[i] * (float)L[i];
            if (slx > 0 && s2 > 0) {
                int nl = nearest(x[i] * s2 / slx);
                nl = nl < nmax ? nl : nmax;
                if (nl != L[i]) {
                    slx += w[i] * x[i] * (float)nl;
                    s2 += w[i] * (float)nl * (float)nl;
                    if (slx * slx * sl2 > sxl * sxl * s2) {
                        L[i] = nl;
                        sxl = slx;
                        sl2 = s2;
                        changed++;
                    }
                }
            }
        }
        if (!changed)
            break;
    }
    for (int i = 0; i < n; i++)
        Lout[i] = (uint8_t)L[i];
    return sxl / sl2;
}

/* The code-book index nearest v (ggml's best_index_int8) */
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
    return v - iq4_values[hi - 1] < iq4_values[hi] - v ? hi - 1 : hi;
}

/* The scale for 32 elements x on the code book, weights w: the fit of the
 * codes of max/127 and of the 15 scales (itry - 127)/max around -max/127
 * (quantize_row_iq4_nl_impl with ntry 7) */
static float iq4_search(const float *x, const float *w)
{
    float amax = 0, max = 0;
    for (int i = 0; i < 32; i++)
        if (fabsf(x[i]) > amax) {
            amax = fabsf(x[i]);
            max = x[i];
        }
    if (amax < 1e-15f)
        return 0.0f;
    float d = -max / (float)iq4_values[0], id = 1 / d, sqx = 0, sq2 = 0;
    for (int i = 0; i < 32; i++) {
        const float q = iq4_values[iq4_index(id * x[i])];
        sqx += w[i] * q * x[i];
        sq2 += w[i] * q * q;
    }
    d = sqx / sq2;
    float best = d * sqx;
    for (int it = -7; it <= 7; it++) {
        id = ((float)it + (float)iq4_values[0]) / max;
        sqx = sq2 = 0;
        for (int i = 0; i < 32; i++) {
            const float q = iq4_values[iq4_index(id * x[i])];
            sqx += w[i] * q * x[i];
            sq2 += w[i] * q * q;
        }
        if (sq2 > 0 && sqx * sqx > best * sq2) {
            d = sqx / sq2;
            best = d * sqx;
        }
    }
    return d;
}

// ----------------------------------------------------------------------------
// quantizers, one block each; x is finite

static float sum_sq(const float *x, int n)
{
    float ss = 0;
    for (int i = 0; i < n; i++)
        ss += x[i] * x[i];
    return ss;
}

/* Q5_0 and Q5_1; with an importance, weighted searches with the row's
 * sigma2 = mean x^2 (quantize_row_q5_0/q5_1_impl) */
static void quant_q5_01(const float *x, uint8_t *b, int zp, const float *imp, float sigma2)
{
    uint8_t q[32];
    float d, mn = 0;
    if (imp) {
        float w[32];
        for (int i = 0; i < 32; i++)
            w[i] = imp[i] * sqrtf(sigma2 + x[i] * x[i]);
        if (zp) {
            float m;
            d = qkx_search(32, 31, x, w, q, &m, -0.9f, 0.05f, 36, 0);
            mn = -m;
        } else {
            d = qx_search(32, 16, x, w, q);
        }
    } else if (zp) {
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
    llm_kq_finish_block(LLM_TYPE_Q8_K, b);
}

/* Q4_K (bits 4) and Q5_K (bits 5): quantize_row_q4_K/q5_K_ref, and with an
 * importance quantize_row_q4_K/q5_K_impl (weighted searches, the sub-block
 * scales and minimums fitted by qp_search) */
static void quant_q45_k(const float *x, uint8_t *b, const float *imp, int bits)
{
    const int nmax = (1 << bits) - 1;
    uint8_t L[256], Ls[8], Lm[8];
    float sc[8], mins[8], sw[8], w[32], maxs = 0, maxm = 0;
    const float sigma2 = 2 * sum_sq(x, 256) / 256;
    for (int k = 0; k < 8; k++) {
        const float *xs = x + 32 * k;
        if (imp) {
            for (int i = 0; i < 32; i++)
                w[i] = imp[32 * k + i] * sqrtf(sigma2 + xs[i] * xs[i]);
            float sumw = 0;
            for (int i = 0; i < 32; i++)
                sumw += w[i];
            sw[k] = sumw;
            sc[k] = qkx_search(32, nmax, xs, w, L + 32 * k, &mins[k], -0.9f, 0.05f, 36, 0);
            continue;
        }
        /* the _ref weights: the sub-block's rms plus |x| */
        const float avs = sqrtf(sum_sq(xs, 32) / 32);
        for (int i = 0; i < 32; i++)
            w[i] = avs + fabsf(xs[i]);
        sc[k] = bits == 4 ? qkx_search(32, nmax, xs, w, L + 32 * k, &mins[k], -1.0f, 0.1f, 20, 0)
                          : qkx_search(32, nmax, xs, w, L + 32 * k, &mins[k], -0.5f, 0.1f, 15, 0);
        maxs = fmaxf(maxs, sc[k]);
        maxm = fmaxf(maxm, mins[k]);
    }
    float dblk, mblk;
    if (imp) {
        dblk = qp_search(8, 63, sc, Ls, sw);
        mblk = qp_search(8, 63, mins, Lm, sw);
    } else {
        const float is = maxs > 0 ? 63.0f / maxs : 0.0f, im = maxm > 0 ? 63.0f / maxm : 0.0f;
        for (int k = 0; k < 8; k++) {
            Ls[k] = (uint8_t)clampi(nearest(is * sc[k]), 0, 63);
            Lm[k] = (uint8_t)clampi(nearest(im * mins[k]), 0, 63);
        }
        dblk = maxs / 63.0f;
        mblk = maxm / 63.0f;
    }
    uint8_t *S = b + 4;
    memset(S, 0, 12);
    for (int k = 0; k < 8; k++) {
        const int ls = Ls[k] < 63 ? Ls[k] : 63, lm = Lm[k] < 63 ? Lm[k] : 63;
        if (k < 4) {
            S[k] = (uint8_t)ls;
            S[k + 4] = (uint8_t)lm;
        } else {
            S[k + 4] = (uint8_t)((ls & 0xF) | (lm & 0xF) << 4);
            S[k - 4] |= (uint8_t)((ls >> 4) << 6);
            S[k] |= (uint8_t)((lm >> 4) << 6);
        }
    }
    st16(b, llm_fp32_to_fp16(dblk));
    st16(b + 2, llm_fp32_to_fp16(mblk));
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

/* Q2_K: quantize_row_q2_K_ref (|x| weights, absolute error), and with an
 * importance quantize_row_q2_K_impl */
static void quant_q2_k(const float *x, uint8_t *b, const float *imp)
{
    uint8_t L[256], Ls[16], Lm[16];
    float sc[16], mins[16], sw[16], w[16], maxs = 0, maxm = 0;
    const float sigma2 = sum_sq(x, 256) / 256;
    for (int k = 0; k < 16; k++) {
        const float *xs = x + 16 * k;
        if (imp) {
            float sumw = 0;
            for (int i = 0; i < 16; i++) {
                w[i] = imp[16 * k + i] * sqrtf(sigma2 + xs[i] * xs[i]);
                sumw += w[i];
            }
            sw[k] = sumw;
            sc[k] = qkx_search(16, 3, xs, w, L + 16 * k, &mins[k], -0.9f, 0.05f, 36, 0);
            continue;
        }
        for (int i = 0; i < 16; i++)
            w[i] = fabsf(xs[i]);
        sc[k] = qkx_search(16, 3, xs, w, L + 16 * k, &mins[k], -0.5f, 0.1f, 15, 1);
        maxs = fmaxf(maxs, sc[k]);
        maxm = fmaxf(maxm, mins[k]);
    }
    float dblk, mblk;
    if (imp) {
        dblk = qp_search(16, 15, sc, Ls, sw);
        mblk = qp_search(16, 15, mins, Lm, sw);
    } else {
        const float is = maxs > 0 ? 15.0f / maxs : 0.0f, im = maxm > 0 ? 15.0f / maxm : 0.0f;
        for (int k = 0; k < 16; k++) {
            Ls[k] = (uint8_t)(maxs > 0 ? clampi(nearest(is * sc[k]), 0, 15) : 0);
            Lm[k] = (uint8_t)(maxm > 0 ? clampi(nearest(im * mins[k]), 0, 15) : 0);
        }
        dblk = maxs > 0 ? maxs / 15.0f : 0.0f;
        mblk = maxm > 0 ? maxm / 15.0f : 0.0f;
    }
    for (int k = 0; k < 16; k++)
        b[k] = (uint8_t)(Ls[k] | Lm[k] << 4);
    st16(b + 80, llm_fp32_to_fp16(dblk));
    st16(b + 82, llm_fp32_to_fp16(mblk));
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

/* Q3_K (nmax 4, 6-bit scales; quantize_row_q3_K_ref / _impl) and Q6_K
 * (nmax 32, int8 scales; quantize_row_q6_K_ref / _impl, whose importance
 * weights the codes directly) */
static void quant_q36_k(const float *x, uint8_t *b, const float *imp, int six)
{
    const int nmax = six ? 32 : 4;
    uint8_t L[256];
    float sc[16], sw[16], w[16], amax = 0, maxs = 0;
    const float sigma2 = 2 * sum_sq(x, 256) / 256;
    for (int k = 0; k < 16; k++) {
        const float *xs = x + 16 * k;
        if (six) {
            sc[k] = qx_search(16, 32, xs, imp ? imp + 16 * k : NULL, L + 16 * k);
        } else if (imp) {
            float sumw = 0;
            for (int i = 0; i < 16; i++) {
                w[i] = imp[16 * k + i] * sqrtf(sigma2 + xs[i] * xs[i]);
                sumw += w[i];
            }
            sw[k] = sumw;
            sc[k] = qx_search(16, 4, xs, w, L + 16 * k);
        } else {
            sc[k] = q3_search(16, 4, xs, L + 16 * k);
        }
        if (fabsf(sc[k]) > amax) {
            amax = fabsf(sc[k]);
            maxs = sc[k];
        }
    }
    int ls[16];
    uint16_t dh;
    if (!six && imp) { /* the sub-block scales fitted as 6-bit codes */
        uint8_t Ls[16];
        dh = llm_fp32_to_fp16(qx_search(16, 32, sc, sw, Ls));
        for (int k = 0; k < 16; k++)
            ls[k] = Ls[k] - 32;
    } else if (six ? amax < 1e-15f : maxs == 0.0f) {
        memset(b, 0, six ? 210 : 110);
        if (six)
            return;
        dh = 0;
        for (int k = 0; k < 16; k++)
            ls[k] = 0;
    } else {
        const float iscale = (six ? -128.0f : -32.0f) / maxs;
        for (int k = 0; k < 16; k++)
            ls[k] = six ? (nearest(iscale * sc[k]) < 127 ? nearest(iscale * sc[k]) : 127)
                        : clampi(nearest(iscale * sc[k]), -32, 31);
        dh = llm_fp32_to_fp16(1 / iscale);
    }
    const float d = llm_fp16_to_fp32(dh);
    for (int k = 0; k < 16; k++) {
        const float dk = d * (float)ls[k];
        if (dk == 0.0f) /* the search's codes stay, as ggml keeps them */
            continue;
        for (int i = 0; i < 16; i++)
            L[16 * k + i] = (uint8_t)(nmax + clampi(nearest(x[16 * k + i] / dk), -nmax, nmax - 1));
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

/* IQ4_NL (one 32-block) and IQ4_XS (eight, with 6-bit scales): as
 * llama-quantize writes them (quantize_iq4_nl/iq4_xs, ntry 7) */
static void quant_iq4(const float *x, uint8_t *b, const float *imp, int xs)
{
    const int n = xs ? 256 : 32, nsub = n / 32;
    float sc[8], w[32], amax = 0, maxs = 0;
    const float sigma2 = sum_sq(x, n) * (2.0f / (float)n);
    for (int k = 0; k < nsub; k++) {
        const float *xk = x + 32 * k;
        for (int i = 0; i < 32; i++)
            w[i] = imp ? imp[32 * k + i] * sqrtf(sigma2 + xk[i] * xk[i]) : xk[i] * xk[i];
        sc[k] = iq4_search(xk, w);
        if (fabsf(sc[k]) > amax) {
            amax = fabsf(sc[k]);
            maxs = sc[k];
        }
    }
    float idsub[8]; /* 1 / each sub-block's scale, unrounded as ggml's */
    if (xs) {
        const float d = -maxs / 32, id = d != 0.0f ? 1 / d : 0.0f;
        uint16_t sh = 0;
        st16(b, llm_fp32_to_fp16(d));
        memset(b + 4, 0, 4);
        for (int k = 0; k < 8; k++) {
            const int l = clampi(nearest(id * sc[k]), -32, 31);
            const float dl = d * (float)l;
            idsub[k] = dl != 0.0f ? 1 / dl : 0.0f;
            b[4 + k / 2] |= (uint8_t)(((l + 32) & 0xF) << 4 * (k % 2));
            sh |= (uint16_t)(((l + 32) >> 4) << 2 * k);
        }
        st16(b + 2, sh);
    } else {
        st16(b, llm_fp32_to_fp16(sc[0]));
        idsub[0] = sc[0] != 0.0f ? 1 / sc[0] : 0.0f;
    }
    uint8_t *qs = b + (xs ? 8 : 2);
    for (int k = 0; k < nsub; k++)
        for (int j = 0; j < 16; j++) {
            const int lo = iq4_index(idsub[k] * x[32 * k + j]);
            const int hi = iq4_index(idsub[k] * x[32 * k + j + 16]);
            qs[16 * k + j] = (uint8_t)(lo | hi << 4);
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
    /* Q5_0 and Q5_1 with an importance weigh by the whole row's mean square */
    float row_sigma2 = 0;
    if (imp && (t == LLM_TYPE_Q5_0 || t == LLM_TYPE_Q5_1)) {
        for (int64_t i = 0; i < ne0; i++) {
            const float v = isnan(x[i]) ? 0.0f : fminf(fmaxf(x[i], -lim), lim);
            row_sigma2 += v * v;
        }
        row_sigma2 = row_sigma2 / (float)ne0;
    }
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
        case LLM_TYPE_Q5_0: quant_q5_01(buf, b, 0, w, row_sigma2); break;
        case LLM_TYPE_Q5_1: quant_q5_01(buf, b, 1, w, row_sigma2); break;
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

// ----------------------------------------------------------------------------
// codes one at a time (GPTQ)

int llm_kq_nearest(enum llm_type t, float s, float m, float x)
{
    if (t == LLM_TYPE_IQ4_NL || t == LLM_TYPE_IQ4_XS)
        return s != 0.0f ? iq4_values[iq4_index(x / s)] : iq4_values[iq4_index(0.0f)];
    int lo, hi;
    switch (t) {
    case LLM_TYPE_Q5_0: lo = -16, hi = 15; break;
    case LLM_TYPE_Q5_1: lo = 0, hi = 31; break;
    case LLM_TYPE_Q2_K: lo = 0, hi = 3; break;
    case LLM_TYPE_Q3_K: lo = -4, hi = 3; break;
    case LLM_TYPE_Q4_K: lo = 0, hi = 15; break;
    case LLM_TYPE_Q5_K: lo = 0, hi = 31; break;
    case LLM_TYPE_Q6_K: lo = -32, hi = 31; break;
    default: lo = -127, hi = 127; break; /* Q8_K */
    }
    if (s == 0.0f || !isfinite(s))
        return clampi(0, lo, hi);
    const float v = (x - m) / s;
    return clampi(isfinite(v) ? nearest(fminf(fmaxf(v, -1e6f), 1e6f)) : 0, lo, hi);
}

void llm_kq_set_code(enum llm_type t, uint8_t *b, int e, int c)
{
    switch (t) {
    case LLM_TYPE_Q5_0:
    case LLM_TYPE_Q5_1: {
        const int zp = t == LLM_TYPE_Q5_1, L = zp ? c : c + 16, j = e % 16;
        uint8_t *qh = b + (zp ? 4 : 2), *qs = qh + 4;
        qs[j] = (uint8_t)(e < 16 ? (qs[j] & 0xF0) | (L & 0xF) : (qs[j] & 0x0F) | (L & 0xF) << 4);
        qh[e / 8] = (uint8_t)((qh[e / 8] & ~(1 << (e % 8))) | ((L >> 4) & 1) << (e % 8));
        return;
    }
    case LLM_TYPE_Q2_K:
    case LLM_TYPE_Q3_K: {
        const int q3 = t == LLM_TYPE_Q3_K, L = q3 ? c + 4 : c, j = (e / 32) % 4;
        uint8_t *q = b + (q3 ? 32 : 16) + 32 * (e / 128) + e % 32;
        *q = (uint8_t)((*q & ~(3 << (2 * j))) | (L & 3) << (2 * j));
        if (q3)
            b[e % 32] = (uint8_t)((b[e % 32] & ~(1 << (e / 32))) | ((L >> 2) & 1) << (e / 32));
        return;
    }
    case LLM_TYPE_Q4_K:
    case LLM_TYPE_Q5_K: {
        const int five = t == LLM_TYPE_Q5_K, k = e / 32, l = e % 32;
        uint8_t *q = b + (five ? 48 : 16) + 32 * (k / 2) + l;
        *q = (uint8_t)(k & 1 ? (*q & 0x0F) | (c & 0xF) << 4 : (*q & 0xF0) | (c & 0xF));
        if (five)
            b[16 + l] = (uint8_t)((b[16 + l] & ~(1 << k)) | ((c >> 4) & 1) << k);
        return;
    }
    case LLM_TYPE_Q6_K: {
        const int L = c + 32, n = e / 128, j = (e / 32) % 4, l = e % 32;
        uint8_t *lo = b + 64 * n + 32 * (j & 1) + l, *hb = b + 128 + 32 * n + l;
        *lo = (uint8_t)(j < 2 ? (*lo & 0xF0) | (L & 0xF) : (*lo & 0x0F) | (L & 0xF) << 4);
        *hb = (uint8_t)((*hb & ~(3 << (2 * j))) | ((L >> 4) & 3) << (2 * j));
        return;
    }
    case LLM_TYPE_Q8_K:
        b[4 + e] = (uint8_t)(int8_t)c;
        return;
    case LLM_TYPE_IQ4_NL:
    case LLM_TYPE_IQ4_XS: {
        int L = 0;
        while (L < 15 && iq4_values[L] != c)
            L++;
        uint8_t *qs = t == LLM_TYPE_IQ4_NL ? b + 2 : b + 8 + 16 * (e / 32);
        const int j = e % 32;
        qs[j % 16] = (uint8_t)(j < 16 ? (qs[j % 16] & 0xF0) | L : (qs[j % 16] & 0x0F) | L << 4);
        return;
    }
    default:
        return;
    }
}

void llm_kq_finish_block(enum llm_type t, uint8_t *b)
{
    if (t != LLM_TYPE_Q8_K)
        return;
    for (int k = 0; k < 16; k++) {
        int sum = 0;
        for (int i = 0; i < 16; i++)
            sum += (int8_t)b[4 + 16 * k + i];
        const int16_t s16 = (int16_t)sum;
        memcpy(b + 260 + 2 * k, &s16, 2);
    }
}
