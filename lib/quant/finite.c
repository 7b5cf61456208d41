/* finite.c: count the NaN and infinite values of rows of any type, as
 * llm_dequantize_row would give them, without dequantizing where the layout
 * allows (see quant.h). It runs on every weight as it is first used, beside
 * the checksum, so it reads only what can be non-finite: the floats of the
 * float types, and the scales and minimums of the block types, whose codes
 * are small integers. */
#include <float.h>
#include <math.h>
#include <string.h>

#include "../common/alloc.h"
#include "../common/fp16.h"
#include "quant.h"

static inline uint16_t ld16(const uint8_t *p)
{
    return (uint16_t)(p[0] | (p[1] << 8));
}

static inline uint32_t ld32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static inline int bad_f16(uint16_t h)
{
    return (h & 0x7c00) == 0x7c00;
}

/* E4M3 ("fn"): 0x7f and 0xff are NaN, and there is no infinity */
static inline int bad_e4m3(uint8_t v)
{
    return (v & 0x7f) == 0x7f;
}

/* Non-finite values among n floats of `bytes` bytes (2 or 4) whose
 * exponent field is `mask`: the scan runs over every weight of a float model
 * at its first use, so it goes a 64-bit word at a time (SWAR): an exponent
 * of all ones plus its lowest bit carries into the lane's top bit, and no
 * lane carries into the next; a popcount counts them. The caller looks for
 * the first one only when there is one. */
static uint64_t count_floats(const uint8_t *p, int64_t n, int bytes, uint32_t mask)
{
    const int per = 8 / bytes; /* lanes per word */
    uint64_t m = 0, one = 0, top = 0;
    for (int k = 0; k < per; k++) {
        int sh = 8 * bytes * k;
        m |= (uint64_t)mask << sh;
        one |= (uint64_t)(mask & -mask) << sh;          /* the exponent's lowest bit */
        top |= (uint64_t)1 << (sh + 8 * bytes - 1);     /* the lane's sign bit */
    }
    uint64_t c = 0;
    int64_t i = 0, words = n / per, w = 0;
    /* the common case, none: OR the lanes' top bits, four words a step;
     * count them only when some are set */
    uint64_t acc = 0;
    for (; w + 4 <= words; w += 4) {
        uint64_t x[4];
        memcpy(x, p + 8 * w, 32);
        acc |= (((x[0] & m) + one) | ((x[1] & m) + one) | ((x[2] & m) + one) |
                ((x[3] & m) + one)) & top;
    }
    for (; w < words; w++) {
        uint64_t x;
        memcpy(&x, p + 8 * w, 8);
        acc |= ((x & m) + one) & top;
    }
    for (w = 0; acc && w < words; w++) {
        uint64_t x;
        memcpy(&x, p + 8 * w, 8);
        c += (uint64_t)__builtin_popcountll(((x & m) + one) & top);
    }
    for (i = words * per; i < n; i++) {
        uint32_t u = 0;
        memcpy(&u, p + (uint64_t)bytes * (uint64_t)i, (size_t)bytes);
        c += (u & mask) == mask;
    }
    return c;
}

/* Is there a block of BB bytes whose binary16 scale (at byte 0) or minimum
 * (at byte 2, with_m) is not finite? Branch-free, four blocks a step: an
 * exponent field of all ones plus one sets bit 15, so OR-ing that bit over
 * the blocks tells whether any is bad (the common case is none). */
static int any_bad_block(const uint8_t *p, uint64_t nblocks, uint32_t BB, int with_m)
{
    const uint32_t off = with_m ? 2 : 0; /* without m, load d twice */
    uint32_t acc = 0;
    uint64_t b = 0;
#define BAD(q) ((((uint32_t)ld16(q) & 0x7c00u) + 0x0400u) | (((uint32_t)ld16((q) + off) & 0x7c00u) + 0x0400u))
    for (; b + 4 <= nblocks; b += 4) {
        const uint8_t *q = p + b * BB;
        acc |= BAD(q) | BAD(q + BB) | BAD(q + 2 * BB) | BAD(q + 3 * BB);
    }
    for (; b < nblocks; b++)
        acc |= BAD(p + b * BB);
#undef BAD
    return (acc & 0x8000u) != 0;
}

/* Codes of the integer types: value = code * d (+ m), code in [lo, hi]. */
static void code_range(enum llm_type t, int *lo, int *hi, int *zp)
{
    *zp = 1, *lo = 0;
    switch (t) {
    case LLM_TYPE_Q8_0: case LLM_TYPE_Q8_G64: case LLM_TYPE_Q8_G128: case LLM_TYPE_Q8_CH:
        *zp = 0, *lo = -128, *hi = 127;
        return;
    case LLM_TYPE_Q4_0: case LLM_TYPE_Q4_G64: case LLM_TYPE_Q4_G128: case LLM_TYPE_Q4_CH:
        *zp = 0, *lo = -8, *hi = 7;
        return;
    case LLM_TYPE_Q8Z_G32: case LLM_TYPE_Q8Z_G64: case LLM_TYPE_Q8Z_G128: case LLM_TYPE_Q8Z_CH:
        *hi = 255;
        return;
    case LLM_TYPE_Q4_1: case LLM_TYPE_Q4Z_G64: case LLM_TYPE_Q4Z_G128: case LLM_TYPE_Q4Z_CH:
        *hi = 15;
        return;
    default: /* the 3-bit types */
        *hi = 7;
        return;
    }
}

/* Would a row with float32 scale d and minimum m (scale `span` for the
 * code-book types) give only finite values? Exact bounds in double: a value
 * at most FLT_MAX in magnitude stays finite when rounded to float. */
static int row_bounded(double d, double m, double span)
{
    return isfinite(d) && isfinite(m) && fabs(d) * span + fabs(m) <= FLT_MAX;
}

/* The GGUF block types (Q5_0 .. IQ4_XS): their binary16 scales (Q8_K: a
 * float32) sit at fixed offsets of each block; codes times sub-block
 * scales of at most 8 bits stay far below FLT_MAX, so a block has
 * non-finite values only when one of those is not finite, and then it is
 * decoded to count them. */
static llm_status gguf_nonfinite(enum llm_type t, const struct llm_type_traits *tr,
                                 const uint8_t *src, int64_t ne0, int64_t nrows, uint64_t *n,
                                 int64_t *at)
{
    int off[2] = { 0, -1 };
    switch (t) {
    case LLM_TYPE_Q5_1: case LLM_TYPE_Q4_K: case LLM_TYPE_Q5_K: off[1] = 2; break;
    case LLM_TYPE_Q2_K: off[0] = 80, off[1] = 82; break;
    case LLM_TYPE_Q3_K: off[0] = 108; break;
    case LLM_TYPE_Q6_K: off[0] = 208; break;
    default: break; /* Q5_0, IQ4_NL, IQ4_XS: d at 0; Q8_K: float d at 0 */
    }
    const uint64_t nb = (uint64_t)(ne0 / tr->blck) * (uint64_t)nrows;
    float y[256];
    for (uint64_t b = 0; b < nb; b++) {
        const uint8_t *blk = src + b * tr->block_bytes;
        int bad;
        if (t == LLM_TYPE_Q8_K)
            bad = (ld32(blk) & 0x7f800000u) == 0x7f800000u;
        else
            bad = bad_f16(ld16(blk + off[0])) || (off[1] >= 0 && bad_f16(ld16(blk + off[1])));
        if (!bad)
            continue;
        LLM_TRY(llm_dequantize_row(t, blk, y, tr->blck));
        for (uint32_t i = 0; i < tr->blck; i++)
            if (!isfinite(y[i])) {
                if (*at < 0)
                    *at = (int64_t)(b * tr->blck + i);
                ++*n;
            }
    }
    return LLM_OK;
}

llm_status llm_rows_nonfinite(enum llm_type t, const void *src_, int64_t ne0, int64_t nrows,
                              uint64_t *count, int64_t *first)
{
    const struct llm_type_traits *tr = llm_type_traits((uint32_t)t);
    const uint8_t *src = src_;
    uint64_t n = 0;
    int64_t at = -1;
    *count = 0;
    if (first)
        *first = -1;
    if (!tr || tr->is_aux || ne0 <= 0 || nrows <= 0)
        return LLM_OK;
    if (llm_type_whole_blocks(t)) {
        if (ne0 % tr->blck)
            return llm_error_set(LLM_E_INVALID, "rows of %lld elements are not whole %u-element "
                                 "blocks of %s", (long long)ne0, tr->blck, tr->name);
        llm_status s = gguf_nonfinite(t, tr, src, ne0, nrows, &n, &at);
        *count = n;
        if (first)
            *first = at;
        return s;
    }
    const uint64_t rb = llm_type_row_bytes(t, (uint64_t)ne0);
    const uint32_t G = tr->blck, BB = tr->block_bytes, hdr = tr->row_header;
    float *row = NULL; /* (ne0): a row dequantized, where bounds do not decide */
    llm_status s = LLM_OK;
    /* the common case, nothing to find: one pass over all the rows at once
     * where rows are whole blocks (or floats) back to back */
    int lo_, hi_, zp_;
    code_range(t, &lo_, &hi_, &zp_);
    if (t == LLM_TYPE_F32 || t == LLM_TYPE_F16 || t == LLM_TYPE_BF16) {
        int bytes = t == LLM_TYPE_F32 ? 4 : 2;
        uint32_t mask = t == LLM_TYPE_F32 ? 0x7f800000u : t == LLM_TYPE_F16 ? 0x7c00u : 0x7f80u;
        if (!count_floats(src, ne0 * nrows, bytes, mask))
            return LLM_OK;
    } else if (!hdr && ne0 % G == 0 &&
               !any_bad_block(src, (uint64_t)(ne0 / G) * (uint64_t)nrows, BB,
                              t != LLM_TYPE_NF4 && zp_)) {
        return LLM_OK;
    }
#define FOUND(k, i)                       \
    do {                                  \
        if (at < 0)                       \
            at = r * ne0 + (int64_t)(i);  \
        n += (uint64_t)(k);               \
    } while (0)
    for (int64_t r = 0; r < nrows && !s; r++) {
        const uint8_t *p = src + (uint64_t)r * rb;
        if (t == LLM_TYPE_F32 || t == LLM_TYPE_F16 || t == LLM_TYPE_BF16) {
            int bytes = t == LLM_TYPE_F32 ? 4 : 2;
            uint32_t mask = t == LLM_TYPE_F32 ? 0x7f800000u : t == LLM_TYPE_F16 ? 0x7c00u : 0x7f80u;
            uint64_t c = count_floats(p, ne0, bytes, mask);
            if (c && at < 0)
                for (int64_t i = 0; i < ne0 && at < 0; i++)
                    if (count_floats(p + (uint64_t)bytes * (uint64_t)i, 1, bytes, mask))
                        at = r * ne0 + i;
            n += c;
            continue;
        }
        int lo, hi, zp, bounded = 1;
        if (!hdr) {
            /* grouped: binary16 d (and m) ahead of each block; codes times
             * a finite binary16 stay far below FLT_MAX */
            int with_m = t != LLM_TYPE_NF4;
            code_range(t, &lo, &hi, &zp);
            with_m = with_m && zp;
            for (int64_t b = 0; b * (int64_t)G < ne0; b++) {
                const uint8_t *blk = p + (uint64_t)b * BB;
                if (bad_f16(ld16(blk)) || (with_m && bad_f16(ld16(blk + 2)))) {
                    int64_t k = ne0 - b * (int64_t)G < (int64_t)G ? ne0 - b * (int64_t)G : G;
                    FOUND(k, b * (int64_t)G);
                }
            }
            continue;
        }
        float r0 = llm_bits_f32(ld32(p));
        if (t == LLM_TYPE_FP8_E4M3 || t == LLM_TYPE_NF4_DQ) {
            bounded = row_bounded(r0, 0, 448.0);
            if (bounded) {
                if (t == LLM_TYPE_FP8_E4M3) {
                    for (int64_t i = 0; i < ne0; i++)
                        if (bad_e4m3(p[4 + i]))
                            FOUND(1, i);
                } else {
                    for (int64_t b = 0; b * 64 < ne0; b++)
                        if (bad_e4m3(p[hdr + (uint64_t)b * BB]))
                            FOUND(ne0 - b * 64 < 64 ? ne0 - b * 64 : 64, b * 64);
                }
            }
        } else {
            code_range(t, &lo, &hi, &zp);
            float m0 = zp ? llm_bits_f32(ld32(p + 4)) : 0.0f;
            bounded = row_bounded(r0, m0, (double)(hi > -lo ? hi : -lo));
        }
        if (bounded)
            continue;
        /* a row scale near FLT_MAX (or not finite): dequantize the row */
        if (!row && !(row = llm_malloc((size_t)ne0 * sizeof *row))) {
            s = LLM_E_NOMEM;
            break;
        }
        s = llm_dequantize_row(t, p, row, ne0);
        for (int64_t i = 0; i < ne0 && !s; i++)
            if (!isfinite(row[i]))
                FOUND(1, i);
    }
#undef FOUND
    llm_free(row);
    *count = n;
    if (first)
        *first = at;
    return s;
}
