/* matmul_kq.h: the products of the GGUF block types (Q5_0, Q5_1, Q2_K ..
 * Q8_K, IQ4_NL, IQ4_XS; quant/kquants.h) with int16 activations, included
 * by matmul_simd.h (so once per ISA; SIMD(name) and DOT16 come from there).
 * Not a public header.
 *
 * A row is read a chunk of 256 elements at a time (one super-block, or up
 * to eight 32-element blocks), unpacked into the canonical form: int16
 * codes c, and per 16 elements a float scale s and minimum m. Per
 * 32-element activation block k (x ~ dx * q, struct llm_qx16) the integer
 * dot of c with q is exact (|c| <= 128, |q| <= 32767: four products per
 * int32 lane), then
 *     acc += float(dot) * (s * dx)             one FMA on 8 lanes
 * per 32 elements when the scale covers 32 (per 16 for Q2_K, Q3_K, Q6_K),
 * and the minimum adds m * (dx * sum q) (= m * ds; per 16 for Q2_K, from
 * the int16 sums of q). Even and odd blocks go to two accumulators (two
 * FMA chains), summed at the end of the row.
 *
 * Each token's arithmetic is the same whatever else is in the call: a row
 * is unpacked once for up to SIMD_NT tokens, which then run the same
 * sequence of operations one after the other, so llm_matmul gives
 * llm_matvec's bits for every token (batch invariance, matmul_impl.h).
 */

/* the codes, scales and minimums of one chunk */
struct SIMD(kq_chunk) {
    int16_t c[256] __attribute__((aligned(32)));
    float s[16], m[16];
};

SIMD_INLINE void SIMD(kq_st16)(int16_t *c, __m128i lo, __m128i hi, int sgn)
{
    if (sgn) {
        _mm256_store_si256((__m256i *)c, _mm256_cvtepi8_epi16(lo));
        _mm256_store_si256((__m256i *)(c + 16), _mm256_cvtepi8_epi16(hi));
    } else {
        _mm256_store_si256((__m256i *)c, _mm256_cvtepu8_epi16(lo));
        _mm256_store_si256((__m256i *)(c + 16), _mm256_cvtepu8_epi16(hi));
    }
}

/* 32 bytes as 32 int16 at c (sign- or zero-extended) */
SIMD_INLINE void SIMD(kq_st32)(int16_t *c, __m256i v, int sgn)
{
    SIMD(kq_st16)(c, _mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1), sgn);
}

/* 6-bit scale and min of sub-block j of Q4_K/Q5_K */
SIMD_INLINE void SIMD(kq_sm4)(int j, const uint8_t *q, int *sc, int *m)
{
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

/* bits of a 32-bit word (little-endian bytes at p) as 32 bytes, 0 or `v` */
SIMD_INLINE __m256i SIMD(kq_bits)(const uint8_t *p, uint8_t v)
{
    uint32_t w;
    memcpy(&w, p, 4);
    const __m256i idx = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2,
                                         2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ull);
    __m256i b = _mm256_shuffle_epi8(_mm256_set1_epi32((int)w), idx);
    b = _mm256_cmpeq_epi8(_mm256_and_si256(b, bit), bit);
    return _mm256_and_si256(b, _mm256_set1_epi8((char)v));
}

/* 16 nibble bytes at p as 32 bytes: the low nibbles (elements 0-15), then
 * the high ones (16-31) */
SIMD_INLINE __m256i SIMD(kq_nib32)(const uint8_t *p)
{
    const __m128i v = _mm_loadu_si128((const __m128i *)p), f = _mm_set1_epi8(0x0F);
    return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(v, 4), f), _mm_and_si128(v, f));
}

/* Chunk [e0, e0 + n) of a row of type t in canonical form (n = 256, or
 * for the 32-element types a multiple of 32 up to 256). */
static void SIMD(kq_unpack)(enum llm_type t, const uint8_t *row, int64_t e0, int n,
                            struct SIMD(kq_chunk) *k)
{
    const __m256i f = _mm256_set1_epi8(0x0F);
    switch (t) {
    case LLM_TYPE_Q4_K:
    case LLM_TYPE_Q5_K: {
        const int five = t == LLM_TYPE_Q5_K;
        const uint8_t *b = row + e0 / 256 * (five ? 176 : 144);
        const float d = SIMD(ldh)(b), dmin = SIMD(ldh)(b + 2);
        for (int j = 0; j < 8; j++) {
            int sc, mn;
            SIMD(kq_sm4)(j, b + 4, &sc, &mn);
            k->s[2 * j] = k->s[2 * j + 1] = d * (float)sc;
            k->m[2 * j] = k->m[2 * j + 1] = -(dmin * (float)mn);
        }
        const uint8_t *ql = b + (five ? 48 : 16);
        const __m256i qh = five ? _mm256_loadu_si256((const __m256i *)(b + 16)) : _mm256_setzero_si256();
        const __m256i one = _mm256_set1_epi8(1);
        for (int p = 0; p < 4; p++) {
            const __m256i v = _mm256_loadu_si256((const __m256i *)(ql + 32 * p));
            __m256i lo = _mm256_and_si256(v, f), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), f);
            if (five) { /* bit 2p (2p+1) of qh[l] is bit 4 of sub-block 2p's (2p+1's) element l */
                lo = _mm256_or_si256(lo, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * p), one), 4));
                hi = _mm256_or_si256(hi, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * p + 1), one), 4));
            }
            SIMD(kq_st32)(k->c + 64 * p, lo, 0);
            SIMD(kq_st32)(k->c + 64 * p + 32, hi, 0);
        }
        return;
    }
    case LLM_TYPE_Q6_K: {
        const uint8_t *b = row + e0 / 256 * 210;
        const float d = SIMD(ldh)(b + 208);
        for (int j = 0; j < 16; j++) {
            k->s[j] = d * (float)(int8_t)b[192 + j];
            k->m[j] = 0.0f;
        }
        const __m256i m30 = _mm256_set1_epi8(0x30), o32 = _mm256_set1_epi8(32);
        for (int h = 0; h < 2; h++) {
            const __m256i a = _mm256_loadu_si256((const __m256i *)(b + 64 * h));
            const __m256i c = _mm256_loadu_si256((const __m256i *)(b + 64 * h + 32));
            const __m256i q = _mm256_loadu_si256((const __m256i *)(b + 128 + 32 * h));
            const __m256i v0 = _mm256_or_si256(_mm256_and_si256(a, f), _mm256_and_si256(_mm256_slli_epi16(q, 4), m30));
            const __m256i v1 = _mm256_or_si256(_mm256_and_si256(c, f), _mm256_and_si256(_mm256_slli_epi16(q, 2), m30));
            const __m256i v2 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(a, 4), f), _mm256_and_si256(q, m30));
            const __m256i v3 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(c, 4), f),
                                               _mm256_and_si256(_mm256_srli_epi16(q, 2), m30));
            SIMD(kq_st32)(k->c + 128 * h, _mm256_sub_epi8(v0, o32), 1);
            SIMD(kq_st32)(k->c + 128 * h + 32, _mm256_sub_epi8(v1, o32), 1);
            SIMD(kq_st32)(k->c + 128 * h + 64, _mm256_sub_epi8(v2, o32), 1);
            SIMD(kq_st32)(k->c + 128 * h + 96, _mm256_sub_epi8(v3, o32), 1);
        }
        return;
    }
    case LLM_TYPE_Q5_0:
    case LLM_TYPE_Q5_1: {
        const int zp = t == LLM_TYPE_Q5_1, BB = zp ? 24 : 22;
        for (int j = 0; j < n / 32; j++) {
            const uint8_t *b = row + (e0 / 32 + j) * BB;
            __m256i v = _mm256_or_si256(SIMD(kq_nib32)(b + (zp ? 8 : 6)), SIMD(kq_bits)(b + (zp ? 4 : 2), 0x10));
            if (!zp)
                v = _mm256_sub_epi8(v, _mm256_set1_epi8(16));
            SIMD(kq_st32)(k->c + 32 * j, v, !zp);
            k->s[2 * j] = k->s[2 * j + 1] = SIMD(ldh)(b);
            k->m[2 * j] = k->m[2 * j + 1] = zp ? SIMD(ldh)(b + 2) : 0.0f;
        }
        return;
    }
    case LLM_TYPE_IQ4_NL:
    case LLM_TYPE_IQ4_XS: {
        static const int8_t kv[16] = LLM_IQ4NL_VALUES;
        const __m256i lut = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)kv));
        if (t == LLM_TYPE_IQ4_NL) {
            for (int j = 0; j < n / 32; j++) {
                const uint8_t *b = row + (e0 / 32 + j) * 18;
                SIMD(kq_st32)(k->c + 32 * j, _mm256_shuffle_epi8(lut, SIMD(kq_nib32)(b + 2)), 1);
                k->s[2 * j] = k->s[2 * j + 1] = SIMD(ldh)(b);
                k->m[2 * j] = k->m[2 * j + 1] = 0.0f;
            }
            return;
        }
        const uint8_t *b = row + e0 / 256 * 136;
        const float d = SIMD(ldh)(b);
        const unsigned sh = (unsigned)b[2] | (unsigned)b[3] << 8;
        for (int j = 0; j < 8; j++) {
            const int ls = ((b[4 + j / 2] >> 4 * (j % 2)) & 0xF) | ((sh >> 2 * j) & 3) << 4;
            k->s[2 * j] = k->s[2 * j + 1] = d * (float)(ls - 32);
            k->m[2 * j] = k->m[2 * j + 1] = 0.0f;
        }
        for (int p = 0; p < 4; p++) { /* sub-blocks 2p (low lane) and 2p+1 (high lane) */
            const __m256i v = _mm256_loadu_si256((const __m256i *)(b + 8 + 32 * p));
            const __m256i lo = _mm256_shuffle_epi8(lut, _mm256_and_si256(v, f));
            const __m256i hi = _mm256_shuffle_epi8(lut, _mm256_and_si256(_mm256_srli_epi16(v, 4), f));
            SIMD(kq_st16)(k->c + 64 * p, _mm256_castsi256_si128(lo), _mm256_castsi256_si128(hi), 1);
            SIMD(kq_st16)(k->c + 64 * p + 32, _mm256_extracti128_si256(lo, 1),
                          _mm256_extracti128_si256(hi, 1), 1);
        }
        return;
    }
    case LLM_TYPE_Q8_K: {
        const uint8_t *b = row + e0 / 256 * 292;
        const float d = SIMD(ldf)(b);
        for (int j = 0; j < 16; j++) {
            k->s[j] = d;
            k->m[j] = 0.0f;
        }
        for (int p = 0; p < 8; p++)
            SIMD(kq_st32)(k->c + 32 * p, _mm256_loadu_si256((const __m256i *)(b + 4 + 32 * p)), 1);
        return;
    }
    default: /* Q2_K, Q3_K: the C reading */
        llm_kq_unpack(t, row + e0 / 256 * llm_type_traits((uint32_t)t)->block_bytes, k->c, k->s,
                      k->m);
        return;
    }
}

/* 8 int32 lanes: i plus lanes that sum to sum_j a[j]*b[j] (16 int16 each) */
#ifdef SIMD_AVX512
#define KQ_DOT(i, a, b) _mm256_dpwssd_epi32((i), (a), (b))
#else
#define KQ_DOT(i, a, b) _mm256_add_epi32((i), _mm256_madd_epi16((a), (b)))
#endif

/* The chunk k (n elements) with the activation blocks xq[t * nq ..] of nt
 * tokens: acc0/acc1 (even/odd blocks) and mac per token. G16: scales per
 * 16; MIN: minimums present. */
SIMD_INLINE void SIMD(kq_dot)(const struct SIMD(kq_chunk) *k, int n, const struct llm_qx16 *xq,
                              int64_t nq, int nt, int G16, int MIN, __m256 *acc0, __m256 *acc1,
                              float *mac)
{
    const __m256i ones = _mm256_set1_epi16(1);
    for (int b = 0; b < n / 32; b++) {
        const __m256i c0 = _mm256_load_si256((const __m256i *)(k->c + 32 * b));
        const __m256i c1 = _mm256_load_si256((const __m256i *)(k->c + 32 * b + 16));
        for (int t = 0; t < nt; t++) {
            const struct llm_qx16 *x = xq + t * nq + b;
            const __m256i q0 = _mm256_loadu_si256((const __m256i *)x->qs);
            const __m256i q1 = _mm256_loadu_si256((const __m256i *)(x->qs + 16));
            __m256 *acc = b & 1 ? &acc1[t] : &acc0[t];
            if (!G16) {
                const __m256i i = KQ_DOT(KQ_DOT(_mm256_setzero_si256(), c0, q0), c1, q1);
                *acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(i), _mm256_set1_ps(k->s[2 * b] * x->d), *acc);
                if (MIN)
                    mac[t] += k->m[2 * b] * x->ds;
                continue;
            }
            const __m256i i0 = KQ_DOT(_mm256_setzero_si256(), c0, q0);
            const __m256i i1 = KQ_DOT(_mm256_setzero_si256(), c1, q1);
            *acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(i0), _mm256_set1_ps(k->s[2 * b] * x->d), *acc);
            *acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(i1), _mm256_set1_ps(k->s[2 * b + 1] * x->d), *acc);
            if (MIN) {
                const __m256i u0 = _mm256_madd_epi16(q0, ones), u1 = _mm256_madd_epi16(q1, ones);
                *acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(u0), _mm256_set1_ps(k->m[2 * b] * x->d), *acc);
                *acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(u1), _mm256_set1_ps(k->m[2 * b + 1] * x->d), *acc);
            }
        }
    }
}

/* Row `row` (ne0) with nt tokens' activations xq (nt, nq): out[t] */
static void SIMD(kq_row)(enum llm_type t, const uint8_t *row, int64_t ne0, const struct llm_qx16 *xq,
                         int64_t nq, int nt, float *out)
{
    const int G16 = llm_kq_scale_group(t) == 16, MIN = llm_kq_has_min(t);
    __m256 acc0[SIMD_NT], acc1[SIMD_NT];
    float mac[SIMD_NT];
    for (int j = 0; j < nt; j++) {
        acc0[j] = acc1[j] = _mm256_setzero_ps();
        mac[j] = 0.0f;
    }
    struct SIMD(kq_chunk) k;
    for (int64_t e0 = 0; e0 < ne0; e0 += 256) {
        const int n = ne0 - e0 < 256 ? (int)(ne0 - e0) : 256;
        SIMD(kq_unpack)(t, row, e0, n, &k);
        /* constant flags, so that the inner loop has no branches */
        const struct llm_qx16 *x = xq + e0 / 32;
        if (G16 && MIN)
            SIMD(kq_dot)(&k, n, x, nq, nt, 1, 1, acc0, acc1, mac);
        else if (G16)
            SIMD(kq_dot)(&k, n, x, nq, nt, 1, 0, acc0, acc1, mac);
        else if (MIN)
            SIMD(kq_dot)(&k, n, x, nq, nt, 0, 1, acc0, acc1, mac);
        else
            SIMD(kq_dot)(&k, n, x, nq, nt, 0, 0, acc0, acc1, mac);
    }
    for (int j = 0; j < nt; j++)
        out[j] = SIMD(hsum)(_mm256_add_ps(acc0[j], acc1[j])) + mac[j];
}

/* llm_matmul for these types: Y[b*ldy + r], b < nb, r in [r0, r1) */
static llm_status SIMD(kq_matmul)(enum llm_type t, const uint8_t *W, uint64_t rb, const float *X,
                                  float *Y, int64_t ne0, int64_t nb, int64_t ldy, int64_t r0,
                                  int64_t r1)
{
    const int64_t nq = ne0 / 32;
    struct llm_qx16 stack[SIMD_STACK_QX / 2], *xq = stack;
    uint64_t n;
    if (!llm_mul_ok((uint64_t)nq, (uint64_t)nb, &n) || !llm_mul_ok(n, sizeof *xq, &n))
        return llm_error_set(LLM_E_NOMEM, "matmul: %lld tokens of %lld elements overflow",
                             (long long)nb, (long long)ne0);
    if (n > sizeof stack && !(xq = llm_malloc((size_t)n)))
        return LLM_E_NOMEM;
    for (int64_t b = 0; b < nb; b++)
        SIMD(quantize_x16)(X + b * ne0, ne0, xq + b * nq);
    for (int64_t r = r0; r < r1; r++) {
        const uint8_t *row = W + (uint64_t)r * rb;
        float out[SIMD_NT];
        for (int64_t b = 0; b < nb; b += SIMD_NT) {
            const int nt = nb - b < SIMD_NT ? (int)(nb - b) : SIMD_NT;
            SIMD(kq_row)(t, row, ne0, xq + b * nq, nq, nt, out);
            for (int j = 0; j < nt; j++)
                Y[(b + j) * ldy + r] = out[j];
        }
    }
    if (xq != stack)
        llm_free(xq);
    return LLM_OK;
}
