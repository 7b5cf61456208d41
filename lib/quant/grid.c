/* grid.c: quantization grids with explicit scales and zeros (grid.h).
 *
 * Stored precision: grouped types keep d and m as binary16 (round to nearest
 * even, saturating at +-65504), _ch types as float32. A scale that would be
 * stored as 0 (a group of subnormal magnitudes) becomes the smallest positive
 * value of its precision instead, so that x / d never divides by zero; every
 * element of such a group then gets the code of 0 or a clamped code, and its
 * value stays within the group's tiny range of 0.
 *
 * The zero z of GPTQ's rule is computed from the float32 scale before it is
 * rounded to binary16 (the reference computes z from its float32 scale and a
 * checkpoint stores fp16(scale) beside that integer z); codes are then taken
 * on the stored d, since that is the grid the file gives back.
 */
#include "grid.h"

#include <float.h>
#include <math.h>
#include <string.h>

#include "../common/fp16.h"
#include "quant.h"
#include "types.h"

// ----------------------------------------------------------------------------
// grids

/* Every grid: type, bits, elements per group (0: the row), zero point, fp8. */
static const struct {
    enum llm_type t;
    int8_t bits, zp, fp8;
    int16_t group;
} grids[] = {
    { LLM_TYPE_Q8_0, 8, 0, 0, 32 },       { LLM_TYPE_Q8_G64, 8, 0, 0, 64 },
    { LLM_TYPE_Q8_G128, 8, 0, 0, 128 },   { LLM_TYPE_Q8_CH, 8, 0, 0, 0 },
    { LLM_TYPE_Q8Z_G32, 8, 1, 0, 32 },    { LLM_TYPE_Q8Z_G64, 8, 1, 0, 64 },
    { LLM_TYPE_Q8Z_G128, 8, 1, 0, 128 },  { LLM_TYPE_Q8Z_CH, 8, 1, 0, 0 },
    { LLM_TYPE_Q4_0, 4, 0, 0, 32 },       { LLM_TYPE_Q4_G64, 4, 0, 0, 64 },
    { LLM_TYPE_Q4_G128, 4, 0, 0, 128 },   { LLM_TYPE_Q4_CH, 4, 0, 0, 0 },
    { LLM_TYPE_Q4_1, 4, 1, 0, 32 },       { LLM_TYPE_Q4Z_G64, 4, 1, 0, 64 },
    { LLM_TYPE_Q4Z_G128, 4, 1, 0, 128 },  { LLM_TYPE_Q4Z_CH, 4, 1, 0, 0 },
    { LLM_TYPE_Q3Z_G32, 3, 1, 0, 32 },    { LLM_TYPE_Q3Z_G64, 3, 1, 0, 64 },
    { LLM_TYPE_Q3Z_G128, 3, 1, 0, 128 },  { LLM_TYPE_Q3Z_CH, 3, 1, 0, 0 },
    { LLM_TYPE_FP8_E4M3, 8, 0, 1, 0 },
};

llm_status llm_qgrid_of(enum llm_type t, struct llm_qgrid *g)
{
    for (size_t i = 0; i < sizeof grids / sizeof grids[0]; i++) {
        if (grids[i].t != t)
            continue;
        g->type = t;
        g->bits = grids[i].bits;
        g->group = grids[i].group;
        g->zero_point = grids[i].zp;
        g->maxq = (1 << grids[i].bits) - 1;
        g->fp8 = grids[i].fp8;
        return LLM_OK;
    }
    return llm_error_set(LLM_E_INVALID,
                         "type %s is not a grid (q8*, q4*, q3z* and fp8_e4m3 types only)",
                         llm_type_name((uint32_t)t));
}

int llm_qgrid_type(int bits, int zero_point, int group)
{
    for (size_t i = 0; i < sizeof grids / sizeof grids[0]; i++)
        if (!grids[i].fp8 && grids[i].bits == bits && grids[i].zp == !!zero_point &&
            grids[i].group == group)
            return (int)grids[i].t;
    return -1;
}

// ----------------------------------------------------------------------------
// stored precision

static uint16_t to_half_sat(float v)
{
    uint16_t h = llm_fp32_to_fp16(v);
    if ((h & 0x7fff) >= 0x7c00 && !isnan(v))
        h = (uint16_t)((h & 0x8000) | 0x7bff);
    return h;
}

static float stored(const struct llm_qgrid *g, float v)
{
    return g->group ? llm_fp16_to_fp32(to_half_sat(v)) : v;
}

/* A scale as stored, never 0 (see the top of the file). */
static float stored_scale(const struct llm_qgrid *g, float s)
{
    float d = stored(g, fabsf(s));
    if (!(d > 0.0f))
        d = g->group ? llm_fp16_to_fp32(0x0001) : FLT_TRUE_MIN;
    return d;
}

static void finish(const struct llm_qgrid *g, float scale, int zero, struct llm_qgroup *p)
{
    p->d = stored_scale(g, scale);
    if (g->fp8) {
        p->zero = 0;
        p->m = 0.0f;
    } else if (g->zero_point) {
        if (zero < 0)
            zero = 0;
        if (zero > g->maxq)
            zero = g->maxq;
        p->zero = zero;
        /* d (11 significant bits) times z (8 bits) is exact in float32 */
        p->m = stored(g, -p->d * (float)zero);
    } else {
        p->zero = 1 << (g->bits - 1);
        p->m = 0.0f;
    }
}

static void range(const float *x, int64_t n, float *mn, float *mx)
{
    float lo = INFINITY, hi = -INFINITY;
    for (int64_t i = 0; i < n; i++)
        if (isfinite(x[i])) {
            lo = x[i] < lo ? x[i] : lo;
            hi = x[i] > hi ? x[i] : hi;
        }
    if (lo > hi)
        lo = hi = 0.0f;
    *mn = lo;
    *mx = hi;
}

// ----------------------------------------------------------------------------
// group parameters

/* FP8's one rule: the largest magnitude maps to 448, as quant.c's quant_fp8. */
static void fp8_group(const struct llm_qgrid *g, const float *x, int64_t n, struct llm_qgroup *p)
{
    float xmin, xmax;
    range(x, n, &xmin, &xmax);
    finish(g, fmaxf(-xmin, xmax) / 448.0f, 0, p);
}

/* A rule's parameters before storage: the float32 scale (the symmetric
 * round-to-nearest rule's may be negative) and the integer zero. Each rule
 * takes the group's range (lo, hi) and its element of largest magnitude e,
 * all times f: the shrink factor of llm_qgrid_group_mse, 1 otherwise. */
struct raw {
    float scale;
    int zero;
};

struct span {
    float lo, hi, e;
};

/* range()'s lo and hi, and the first finite element of largest magnitude
 * (0 when none), in one pass. */
static struct span span_of(const float *x, int64_t n)
{
    struct span s = { INFINITY, -INFINITY, 0.0f };
    for (int64_t i = 0; i < n; i++)
        if (isfinite(x[i])) {
            s.lo = x[i] < s.lo ? x[i] : s.lo;
            s.hi = x[i] > s.hi ? x[i] : s.hi;
            s.e = fabsf(x[i]) > fabsf(s.e) ? x[i] : s.e;
        }
    if (s.lo > s.hi)
        s.lo = s.hi = 0.0f;
    return s;
}

/* GPTQ's Quantizer.find_params; with f < 1 its mse search shrinks the range
 * after widening it, as the reference does. */
static struct raw raw_gptq(const struct llm_qgrid *g, const struct span *s, float f)
{
    float xmin = fminf(s->lo, 0.0f), xmax = fmaxf(s->hi, 0.0f);
    if (!g->zero_point) {
        /* as the reference: only a negative minimum is mirrored, so a group
         * with no negative element keeps xmin = 0 */
        xmax = fmaxf(-xmin, xmax);
        if (xmin < 0.0f)
            xmin = -xmax;
    }
    if (xmin == 0.0f && xmax == 0.0f) {
        xmin = -1.0f;
        xmax = 1.0f;
    }
    xmin *= f;
    xmax *= f;
    struct raw r = { (xmax - xmin) / (float)g->maxq, 0 };
    if (g->zero_point) {
        float z = r.scale > 0.0f ? rintf(-xmin / r.scale) : 0.0f;
        r.zero = z > (float)g->maxq ? g->maxq : (int)z;
    } else {
        r.zero = 1 << (g->bits - 1);
    }
    return r;
}

/* AWQ's pseudo_quantize_tensor (grid.h); the symmetric form's zero is the
 * midpoint, implied. */
static struct raw raw_awq(const struct llm_qgrid *g, const struct span *s, float f)
{
    const float lo = s->lo * f, hi = s->hi * f;
    if (!g->zero_point) {
        float amax = fmaxf(fmaxf(-lo, hi), 1e-5f);
        return (struct raw){ amax / (float)((1 << (g->bits - 1)) - 1), 1 << (g->bits - 1) };
    }
    const float scale = fmaxf(hi - lo, 1e-5f) / (float)g->maxq;
    float z = -rintf(lo / scale);
    z = z < 0.0f ? 0.0f : (z > (float)g->maxq ? (float)g->maxq : z);
    return (struct raw){ scale, (int)z };
}

/* The type's round-to-nearest rule (grid.h): AWQ's for zero points, ggml's
 * q4_0 rule (the signed extreme to code 0) for symmetric grids. */
static struct raw raw_rtn(const struct llm_qgrid *g, const struct span *s, float f)
{
    if (g->zero_point)
        return raw_awq(g, s, f);
    return (struct raw){ s->e * f / -(float)(1 << (g->bits - 1)), 1 << (g->bits - 1) };
}

static void store(const struct llm_qgrid *g, struct raw r, struct llm_qgroup *p)
{
    if (g->zero_point || r.scale >= 0.0f) {
        finish(g, r.scale, r.zero, p);
        return;
    }
    /* a negative symmetric scale keeps its sign; never 0 (as stored_scale) */
    float d = stored(g, r.scale);
    if (!(fabsf(d) > 0.0f))
        d = g->group ? llm_fp16_to_fp32(0x0001) : FLT_TRUE_MIN;
    p->d = d;
    p->zero = r.zero;
    p->m = 0.0f;
}

typedef struct raw (*rule_fn)(const struct llm_qgrid *, const struct span *, float);

static rule_fn rule_of(enum llm_qrule rule)
{
    return rule == LLM_QRULE_GPTQ ? raw_gptq : rule == LLM_QRULE_AWQ ? raw_awq : raw_rtn;
}

void llm_qgrid_group(const struct llm_qgrid *g, const float *x, int64_t n, struct llm_qgroup *p)
{
    llm_qgrid_group_mse(g, LLM_QRULE_GPTQ, 0.0f, x, n, p);
}

void llm_qgrid_group_awq(const struct llm_qgrid *g, const float *x, int64_t n,
                         struct llm_qgroup *p)
{
    llm_qgrid_group_mse(g, LLM_QRULE_AWQ, 0.0f, x, n, p);
}

void llm_qgrid_group_awq_range(const struct llm_qgrid *g, float lo, float hi,
                               struct llm_qgroup *p)
{
    struct span s = { lo, hi, 0.0f }; /* AWQ's rule reads no e */
    if (s.lo > s.hi)
        s.lo = s.hi = 0.0f;
    store(g, raw_awq(g, &s, 1.0f), p);
}

void llm_qgrid_group_rtn(const struct llm_qgrid *g, const float *x, int64_t n,
                         struct llm_qgroup *p)
{
    llm_qgrid_group_mse(g, LLM_QRULE_RTN, 0.0f, x, n, p);
}

/* The reference's search: grid 100, maxshrink 0.8. */
#define SHRINK_GRID 100
#define SHRINK_STEPS 80

/* sum |Q(x) - x|^norm on the unstored grid (scale, zero), as the reference
 * measures its candidates: scale * (clamp(round(x / scale) + zero) - zero). */
static double raw_err(const struct llm_qgrid *g, struct raw r, const float *x, int64_t n,
                      float norm)
{
    const float lim = (float)(g->maxq + 1);
    double e = 0.0;
    for (int64_t i = 0; i < n; i++) {
        if (!isfinite(x[i]))
            continue;
        float t = x[i] / r.scale;
        t = t < -lim ? -lim : (t > lim ? lim : t); /* keeps the conversion defined */
        int q = (int)nearbyintf(t) + r.zero;
        q = q < 0 ? 0 : (q > g->maxq ? g->maxq : q);
        const double d = fabsf(r.scale * (float)(q - r.zero) - x[i]);
        e += norm == 2.0f ? d * d : pow(d, norm);
    }
    return e;
}

void llm_qgrid_group_mse(const struct llm_qgrid *g, enum llm_qrule rule, float norm,
                         const float *x, int64_t n, struct llm_qgroup *p)
{
    if (g->fp8) {
        fp8_group(g, x, n, p);
        return;
    }
    const rule_fn raw = rule_of(rule);
    const struct span s = span_of(x, n);
    struct raw best = raw(g, &s, 1.0f);
    if (norm > 0.0f && best.scale != 0.0f) {
        double best_err = raw_err(g, best, x, n, norm);
        for (int i = 1; i < SHRINK_STEPS; i++) {
            const struct raw r = raw(g, &s, (float)(1.0 - (double)i / SHRINK_GRID));
            if (r.scale == 0.0f || !isfinite(r.scale))
                continue;
            const double e = raw_err(g, r, x, n, norm);
            if (e < best_err) {
                best_err = e;
                best = r;
            }
        }
    }
    store(g, best, p);
}

void llm_qgrid_group_set(const struct llm_qgrid *g, float scale, int zero, struct llm_qgroup *p)
{
    finish(g, scale, zero, p);
}

// ----------------------------------------------------------------------------
// codes and values

int llm_qgrid_code(const struct llm_qgrid *g, const struct llm_qgroup *p, float x)
{
    float r = x / p->d;
    if (isnan(r))
        return p->zero;
    if (g->fp8) /* saturates at +-448: never a NaN code */
        return llm_fp32_to_fp8_e4m3(r);
    /* clamp before the conversion: float-to-int of an out-of-range value is undefined */
    const float lim = (float)(g->maxq + 1);
    r = r < -lim ? -lim : (r > lim ? lim : r);
    int q = (int)nearbyintf(r) + p->zero;
    return q < 0 ? 0 : (q > g->maxq ? g->maxq : q);
}

float llm_qgrid_value(const struct llm_qgrid *g, const struct llm_qgroup *p, int q)
{
    if (g->fp8)
        return llm_fp8_e4m3_to_fp32((uint8_t)q) * p->d; /* quant.c's rule */
    if (!g->zero_point)
        return (float)(q - p->zero) * p->d;
    float prod = (float)q * p->d; /* one product, then one sum: quant.c's rule */
    return prod + p->m;
}

// ----------------------------------------------------------------------------
// packing

static inline void st16(uint8_t *b, uint16_t v)
{
    b[0] = (uint8_t)v;
    b[1] = (uint8_t)(v >> 8);
}

static inline uint16_t ld16(const uint8_t *b)
{
    return (uint16_t)(b[0] | b[1] << 8);
}

static inline void stf(uint8_t *b, float f)
{
    uint32_t u = llm_f32_bits(f);
    for (int k = 0; k < 4; k++)
        b[k] = (uint8_t)(u >> (8 * k));
}

static inline float ldf(const uint8_t *b)
{
    return llm_bits_f32((uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 |
                        (uint32_t)b[3] << 24);
}

/* The block length in the packed row: the group, or 32 for 4- and 3-bit
 * _ch rows (8-bit _ch rows are one long run of bytes). */
static int64_t pack_block(const struct llm_qgrid *g, int64_t ne0)
{
    if (g->group)
        return g->group;
    return g->bits < 8 ? 32 : ne0;
}

/* Code bytes of a block of B elements. */
static int64_t code_bytes(const struct llm_qgrid *g, int64_t B)
{
    return g->bits == 8 ? B : g->bits == 4 ? B / 2 : 3 * B / 8;
}

static llm_status check_row(const struct llm_qgrid *g, const void *buf, const void *q,
                            const void *p, int64_t ne0, const char *fn)
{
    if (!g || !buf || !q || !p)
        return llm_error_set(LLM_E_INVALID, "%s: NULL argument", fn);
    if (ne0 <= 0 || ne0 > ((int64_t)1 << 40))
        return llm_error_set(LLM_E_INVALID, "%s: bad row length %lld", fn, (long long)ne0);
    if (!llm_type_row_bytes(g->type, (uint64_t)ne0))
        return llm_error_set(LLM_E_INVALID, "%s: type %s is not a packed weight type", fn,
                             llm_type_name((uint32_t)g->type));
    return LLM_OK;
}

llm_status llm_qgrid_pack_row(const struct llm_qgrid *g, const uint8_t *q,
                              const struct llm_qgroup *p, int64_t ne0, void *dst_)
{
    LLM_TRY(check_row(g, dst_, q, p, ne0, "qgrid pack"));
    for (int64_t i = 0; i < ne0; i++)
        if (q[i] > g->maxq || (g->fp8 && (q[i] & 0x7f) == 0x7f))
            return llm_error_set(LLM_E_INVALID, "qgrid pack: code %u at %lld is not on the grid",
                                 (unsigned)q[i], (long long)i);
    uint8_t *dst = dst_;
    if (g->fp8) { /* the row scale, then the E4M3 bytes (blocks.h) */
        stf(dst, p[0].d);
        memcpy(dst + 4, q, (size_t)ne0);
        return LLM_OK;
    }
    const int64_t B = pack_block(g, ne0);
    const int64_t nb = (ne0 + B - 1) / B;
    const int hdr = g->group ? 0 : (g->zero_point ? 8 : 4);
    const int pre = g->group ? (g->zero_point ? 4 : 2) : 0; /* scale bytes per block */
    const int64_t qbytes = code_bytes(g, B);
    if (!g->group) {
        stf(dst, p[0].d);
        if (g->zero_point)
            stf(dst + 4, p[0].m);
    }
    uint8_t codes[128];
    for (int64_t b = 0; b < nb; b++) {
        const struct llm_qgroup *gp = g->group ? &p[b] : &p[0];
        uint8_t *blk = dst + hdr + b * (pre + qbytes);
        if (g->group) {
            st16(blk, to_half_sat(gp->d));
            if (g->zero_point)
                st16(blk + 2, to_half_sat(gp->m));
        }
        uint8_t *qs = blk + pre;
        const int64_t e0 = b * B;
        /* padding takes the code of 0, which is the zero on both kinds of grid */
        const uint8_t pad = (uint8_t)gp->zero;
        if (g->bits == 8) {
            for (int64_t j = 0; j < B; j++) {
                uint8_t c = e0 + j < ne0 ? q[e0 + j] : pad;
                qs[j] = g->zero_point ? c : (uint8_t)(int8_t)(c - 128);
            }
        } else {
            for (int64_t j = 0; j < B; j++)
                codes[j] = e0 + j < ne0 ? q[e0 + j] : pad;
            if (g->bits == 3)
                llm_q3_pack(codes, B, qs);
            else
                for (int64_t j = 0; j < B / 2; j++)
                    qs[j] = (uint8_t)((codes[j] & 15) | codes[j + B / 2] << 4);
        }
    }
    return LLM_OK;
}

llm_status llm_qgrid_unpack_row(const struct llm_qgrid *g, const void *src_, int64_t ne0,
                                uint8_t *q, struct llm_qgroup *p)
{
    LLM_TRY(check_row(g, src_, q, p, ne0, "qgrid unpack"));
    const uint8_t *src = src_;
    if (g->fp8) {
        p[0] = (struct llm_qgroup){ .d = ldf(src), .m = 0.0f, .zero = 0 };
        memcpy(q, src + 4, (size_t)ne0);
        return LLM_OK;
    }
    const int64_t B = pack_block(g, ne0);
    const int64_t nb = (ne0 + B - 1) / B;
    const int hdr = g->group ? 0 : (g->zero_point ? 8 : 4);
    const int pre = g->group ? (g->zero_point ? 4 : 2) : 0;
    const int64_t qbytes = code_bytes(g, B);
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *blk = src + hdr + b * (pre + qbytes);
        if (g->group || b == 0) {
            struct llm_qgroup *gp = &p[g->group ? b : 0];
            gp->d = g->group ? llm_fp16_to_fp32(ld16(blk)) : ldf(src);
            gp->m = 0.0f;
            gp->zero = 1 << (g->bits - 1);
            if (g->zero_point) {
                gp->m = g->group ? llm_fp16_to_fp32(ld16(blk + 2)) : ldf(src + 4);
                float z = gp->d != 0.0f ? rintf(-gp->m / gp->d) : 0.0f;
                gp->zero = !(z >= 0.0f) ? 0 : (z > (float)g->maxq ? g->maxq : (int)z);
            }
        }
        const uint8_t *qs = blk + pre;
        const int64_t e0 = b * B;
        const int64_t n = ne0 - e0 < B ? ne0 - e0 : B;
        for (int64_t j = 0; j < n; j++) {
            if (g->bits == 8)
                q[e0 + j] = g->zero_point ? qs[j] : (uint8_t)((int8_t)qs[j] + 128);
            else if (g->bits == 3)
                q[e0 + j] = (uint8_t)llm_q3_code(qs, j);
            else
                q[e0 + j] = j < B / 2 ? qs[j] & 15 : qs[j - B / 2] >> 4;
        }
    }
    return LLM_OK;
}
